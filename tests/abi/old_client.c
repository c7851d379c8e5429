/* An old program against the current library.
 *
 * This file is compiled against a frozen copy of a released public header
 * (tests/abi/gptx-<version>/gptx/gptx.h, chosen by CMake) and linked with the
 * library being built, as a program compiled years ago would run with a newer
 * libgptx.so. Every struct that crosses the ABI is exercised in two shapes:
 *   as declared  - the struct as that release's header has it;
 *   older        - without its last field, as an older header would have
 *                  declared it: its *_init passes the end of the field before.
 * Each struct lives in a buffer whose bytes past the declared size (the tail
 * padding, then 64 guard bytes) hold the pattern 0xA5. The test fails when
 *   - any call writes a byte at or past the declared size (guard check);
 *   - any call reads past it: the garbage there would be taken for the
 *     missing field, and every last field is chosen so that garbage is
 *     either rejected or visible through a getter that must report the
 *     field's default; under ASan the inputs are also passed as exact-size
 *     heap copies, so a read past them is reported at once;
 *   - a missing field does not take its default.
 * It uses only what the frozen header declares. See tests/abi/README.md. */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <gptx/gptx.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef GPTX_FROZEN_VERSION_NUMBER
#error "CMake passes GPTX_FROZEN_VERSION_NUMBER, the release of the frozen header"
#endif
#if GPTX_VERSION_NUMBER != GPTX_FROZEN_VERSION_NUMBER
#error "this test must be compiled against the frozen header, not the current one"
#endif

static int failures = 0;
static const char *shape = "";

#define FAIL(...)                                                   \
    do {                                                            \
        fprintf(stderr, "%s:%d: [%s] ", __FILE__, __LINE__, shape); \
        fprintf(stderr, __VA_ARGS__);                               \
        fputc('\n', stderr);                                        \
        failures++;                                                 \
    } while (0)
#define EXPECT(cond)                               \
    do {                                           \
        if (!(cond)) FAIL("expected %s", #cond);   \
    } while (0)
#define EXPECT_OK(call)                                                                   \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != GPTX_OK) FAIL("%s: %s (%s)", #call, gptx_status_name(rc_), gptx_last_error()); \
    } while (0)

/* ---- guarded structs ------------------------------------------------------------ */

enum { GUARD = 64, PATTERN = 0xA5 };

typedef struct slot {
    const char *what;
    unsigned char *mem; /* the struct, then its tail padding and GUARD bytes */
    size_t declared;    /* the struct_size this client passes */
    size_t bytes;       /* sizeof the client's struct + GUARD */
} slot;

static void *slot_new(slot *s, const char *what, size_t declared, size_t type_size) {
    s->what = what;
    s->declared = declared;
    s->bytes = type_size + GUARD;
    s->mem = malloc(s->bytes);
    if (!s->mem) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(s->mem, PATTERN, s->bytes);
    return s->mem;
}

/* Fails when a byte at or past the declared size changed (by `call`), then
 * restores the pattern so that a later check blames only a later call. */
static void slot_check(const slot *s, const char *call) {
    for (size_t i = s->declared; i < s->bytes; i++)
        if (s->mem[i] != PATTERN) {
            FAIL("%s wrote byte %zu of %s, which declares %zu bytes", call, i, s->what,
                 s->declared);
            memset(s->mem + s->declared, PATTERN, s->bytes - s->declared);
            return;
        }
}

/* The declared bytes alone, on the heap: ASan reports any access past them. */
static void *slot_exact(const slot *s) {
    void *p = malloc(s->declared);
    if (!p) exit(1);
    memcpy(p, s->mem, s->declared);
    return p;
}

static void slot_free(slot *s) {
    slot_check(s, "a call");
    free(s->mem);
}

/* init_sized(struct, declared) must succeed, set struct_size, write the
 * defaults into the declared bytes (the same bytes a full-size init gives)
 * and nothing past them. */
#define INIT_SLOT(s, T, init_sized, FULL)                                                  \
    do {                                                                                   \
        EXPECT_OK(init_sized((T *)(s)->mem, (s)->declared));                               \
        slot_check((s), #init_sized);                                                      \
        T full_;                                                                           \
        memset(&full_, 0, sizeof full_);                                                   \
        EXPECT_OK(init_sized(&full_, (FULL)));                                             \
        EXPECT(((T *)(s)->mem)->struct_size == (s)->declared);                             \
        if (memcmp((s)->mem + sizeof(size_t), (unsigned char *)&full_ + sizeof(size_t),    \
                   (s)->declared - sizeof(size_t)) != 0)                                   \
            FAIL("%s: the declared bytes differ from a full-size init", (s)->what);        \
    } while (0)

/* Runs `call` (which creates an object OUT from the options OPTS) twice: on
 * an exact-size heap copy of slot s, destroying what it made, then on s
 * itself, whose guard is checked; the second object lands in obj. */
#define CREATE_BOTH(T, obj, s, destroy, call) \
    do {                                       \
        T *OUT = NULL;                         \
        void *OPTS = slot_exact(s);            \
        EXPECT_OK(call);                       \
        destroy(OUT);                          \
        free(OPTS);                            \
        OUT = NULL;                            \
        OPTS = (s)->mem;                       \
        EXPECT_OK(call);                       \
        slot_check((s), #call);                \
        (obj) = OUT;                           \
    } while (0)

/* declared size of struct T: complete, or ending at the field before its last */
#define DECLARED(T, SIZE, prev) (older ? GPTX_STRUCT_END(T, prev) : (SIZE))

static int older = 0;

/* ---- the run ------------------------------------------------------------------- */

static char dir[256];

static void run(void) {
    void *exact; /* each input first as an exact-size heap copy (ASan sees any read past it) */
    /* context options: last field rank_invariant from 0.7.0, cuda_graphs before
     * (default 0 both; 0xA5A5A5A5 is rejected) */
    slot so;
    gptx_context_options *co = slot_new(&so, "gptx_context_options",
#if GPTX_FROZEN_VERSION_NUMBER >= 700
                                        DECLARED(gptx_context_options, GPTX_CONTEXT_OPTIONS_SIZE,
                                                 cuda_graphs),
#else
                                        DECLARED(gptx_context_options, GPTX_CONTEXT_OPTIONS_SIZE,
                                                 stochastic_rounding),
#endif
                                        sizeof *co);
    INIT_SLOT(&so, gptx_context_options, gptx_context_options_init_sized,
              GPTX_CONTEXT_OPTIONS_SIZE);
    co->backend = GPTX_BACKEND_CPU;
    co->num_threads = 1;
    gptx_context *ctx = NULL;
    CREATE_BOTH(gptx_context, ctx, &so, gptx_context_destroy, gptx_context_create(&OUT, OPTS));
    if (!ctx) return;
    gptx_context_options got;
    gptx_context_options_init(&got);
    EXPECT_OK(gptx_context_get_options(ctx, &got));
    EXPECT(got.backend == GPTX_BACKEND_CPU && got.num_threads == 1 && got.cuda_graphs == 0);
#if GPTX_FROZEN_VERSION_NUMBER >= 700
    EXPECT(got.rank_invariant == 0);
#endif
    slot go;
    gptx_context_options *gop =
        slot_new(&go, "gptx_context_options (out)", so.declared, sizeof *gop);
    gop->struct_size = go.declared;
    EXPECT_OK(gptx_context_get_options(ctx, gop));
    slot_check(&go, "gptx_context_get_options");
    EXPECT(gop->num_threads == 1);
    slot_free(&go);
    slot_free(&so);

    /* context info (out): last field products */
    slot sf;
    gptx_context_info *ci = slot_new(&sf, "gptx_context_info",
                                     DECLARED(gptx_context_info, GPTX_CONTEXT_INFO_SIZE,
                                              bf16_native),
                                     sizeof *ci);
    INIT_SLOT(&sf, gptx_context_info, gptx_context_info_init_sized, GPTX_CONTEXT_INFO_SIZE);
    EXPECT_OK(gptx_context_get_info(ctx, ci));
    slot_check(&sf, "gptx_context_get_info");
    EXPECT(strcmp(ci->backend, "cpu") == 0 && ci->precision == GPTX_PRECISION_FP32 &&
           ci->num_threads == 1);
    /* OpenBLAS's sgemm, or oneDNN's f32 matmul (GPTX_CPU_FP32_GEMM, docs/precision.md) */
    if (!older) EXPECT(strstr(ci->products, "sgemm") != NULL || strstr(ci->products, " f32 ") != NULL);
    slot_free(&sf);

    /* model config: last field layernorm_eps (default 1e-5) */
    slot sc;
    gptx_model_config *cfg = slot_new(&sc, "gptx_model_config",
                                      DECLARED(gptx_model_config, GPTX_MODEL_CONFIG_SIZE,
                                               mask_padded_logits),
                                      sizeof *cfg);
    INIT_SLOT(&sc, gptx_model_config, gptx_model_config_init_sized, GPTX_MODEL_CONFIG_SIZE);
    cfg->vocab_size = 50;
    cfg->padded_vocab_size = 64;
    cfg->context_length = 16;
    cfg->n_layer = 1;
    cfg->n_head = 2;
    cfg->n_embd = 16;
    gptx_model *model = NULL;
    CREATE_BOTH(gptx_model, model, &sc, gptx_model_destroy,
                gptx_model_create(&OUT, ctx, OPTS));
    if (!model) return;
    EXPECT_OK(gptx_model_init_random(model, 1));
    gptx_model_config full_cfg;
    gptx_model_config_init(&full_cfg);
    EXPECT_OK(gptx_model_get_config(model, &full_cfg));
    EXPECT(full_cfg.layernorm_eps == 1e-5f && full_cfg.n_embd == 16);
    memset(cfg, PATTERN, sc.declared);
    cfg->struct_size = sc.declared;
    EXPECT_OK(gptx_model_get_config(model, cfg));
    slot_check(&sc, "gptx_model_get_config");
    EXPECT(cfg->vocab_size == 50 && cfg->mask_padded_logits == 1);
    slot_free(&sc);

    /* tensor info (out): last field numel */
    slot st;
    gptx_tensor_info *ti = slot_new(&st, "gptx_tensor_info",
                                    DECLARED(gptx_tensor_info, GPTX_TENSOR_INFO_SIZE, shape),
                                    sizeof *ti);
    INIT_SLOT(&st, gptx_tensor_info, gptx_tensor_info_init_sized, GPTX_TENSOR_INFO_SIZE);
    EXPECT_OK(gptx_model_tensor_info(model, 0, ti));
    slot_check(&st, "gptx_model_tensor_info");
    EXPECT(ti->name && strcmp(ti->name, "wte.weight") == 0 && ti->ndim == 2 &&
           ti->shape[0] == 64 && ti->shape[1] == 16);
    if (!older) EXPECT(ti->numel == 64 * 16);
    slot_free(&st);

    /* AdamW options: last field rounding_seed (default 0) */
    slot sa;
    gptx_adamw_options *ao = slot_new(&sa, "gptx_adamw_options",
                                      DECLARED(gptx_adamw_options, GPTX_ADAMW_OPTIONS_SIZE,
                                               decay_policy),
                                      sizeof *ao);
    INIT_SLOT(&sa, gptx_adamw_options, gptx_adamw_options_init_sized, GPTX_ADAMW_OPTIONS_SIZE);
    ao->lr = 1e-3f;
    if (!older) ao->rounding_seed = 7;
    gptx_optimizer *opt = NULL;
    CREATE_BOTH(gptx_optimizer, opt, &sa, gptx_optimizer_destroy,
                gptx_optimizer_create(&OUT, model, OPTS));
    gptx_adamw_options got_ao;
    gptx_adamw_options_init(&got_ao);
    EXPECT_OK(gptx_optimizer_get_options(opt, &got_ao));
    EXPECT(got_ao.lr == 1e-3f && got_ao.rounding_seed == (older ? 0u : 7u));
    slot_free(&sa);

    /* memory stats (out): last field peak */
    slot sm;
    gptx_memory_stats *ms = slot_new(&sm, "gptx_memory_stats",
                                     DECLARED(gptx_memory_stats, GPTX_MEMORY_STATS_SIZE, reserved),
                                     sizeof *ms);
    INIT_SLOT(&sm, gptx_memory_stats, gptx_memory_stats_init_sized, GPTX_MEMORY_STATS_SIZE);
    EXPECT_OK(gptx_context_memory(ctx, ms));
    slot_check(&sm, "gptx_context_memory");
    EXPECT(ms->allocated > 0 && ms->reserved >= ms->allocated);
    slot_free(&sm);

    /* data loader options: last field prefetch (default 0; 0xA5A5A5A5 is rejected) */
    int32_t tokens[400];
    for (int i = 0; i < 400; i++) tokens[i] = (i * 7) % 50;
    slot sl;
    gptx_dataloader_options *lo = slot_new(&sl, "gptx_dataloader_options",
                                           DECLARED(gptx_dataloader_options,
                                                    GPTX_DATALOADER_OPTIONS_SIZE, vocab_size),
                                           sizeof *lo);
    INIT_SLOT(&sl, gptx_dataloader_options, gptx_dataloader_options_init_sized,
              GPTX_DATALOADER_OPTIONS_SIZE);
    lo->batch_size = 2;
    lo->seq_len = 16;
    lo->shuffle = 1;
    lo->seed = 5;
    gptx_dataloader *dl = NULL;
    CREATE_BOTH(gptx_dataloader, dl, &sl, gptx_dataloader_destroy,
                gptx_dataloader_create_from_tokens(&OUT, NULL, tokens, 400, OPTS));
    if (!dl) return;
    gptx_dataloader_options got_lo;
    gptx_dataloader_options_init(&got_lo);
    EXPECT_OK(gptx_dataloader_get_options(dl, &got_lo));
    EXPECT(got_lo.batch_size == 2 && got_lo.prefetch == 0);
    slot_free(&sl);

    /* data loader info (out): last field last_batch_rows */
    slot si;
    gptx_dataloader_info *di = slot_new(&si, "gptx_dataloader_info",
                                        DECLARED(gptx_dataloader_info, GPTX_DATALOADER_INFO_SIZE,
                                                 batches_per_epoch),
                                        sizeof *di);
    INIT_SLOT(&si, gptx_dataloader_info, gptx_dataloader_info_init_sized,
              GPTX_DATALOADER_INFO_SIZE);
    EXPECT_OK(gptx_dataloader_info_get(dl, di));
    slot_check(&si, "gptx_dataloader_info_get");
    EXPECT(di->total_tokens == 400 && di->batches_per_epoch > 1);
    slot_free(&si);

    /* data loader state: last field seed (default 0) */
    const int32_t *in, *tg;
    int rows = 0;
    EXPECT_OK(gptx_dataloader_next(dl, &in, &tg, &rows, NULL));
    slot sd;
    gptx_dataloader_state *ds = slot_new(&sd, "gptx_dataloader_state",
                                         DECLARED(gptx_dataloader_state,
                                                  GPTX_DATALOADER_STATE_SIZE, batch),
                                         sizeof *ds);
    INIT_SLOT(&sd, gptx_dataloader_state, gptx_dataloader_state_init_sized,
              GPTX_DATALOADER_STATE_SIZE);
    EXPECT_OK(gptx_dataloader_get_state(dl, ds));
    slot_check(&sd, "gptx_dataloader_get_state");
    EXPECT(ds->epoch == 0 && ds->batch == 1);
    exact = slot_exact(&sd);
    EXPECT_OK(gptx_dataloader_set_state(dl, exact));
    free(exact);
    EXPECT_OK(gptx_dataloader_set_state(dl, ds));
    gptx_dataloader_state got_ds;
    gptx_dataloader_state_init(&got_ds);
    EXPECT_OK(gptx_dataloader_get_state(dl, &got_ds));
    EXPECT(got_ds.batch == 1 && got_ds.seed == (older ? 0u : 5u));
    slot_free(&sd);

#ifdef GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT
    /* sampler options: last field min_p (0.6.0; default 0; the pattern read in its place is a
     * negative float, which the sampler refuses). The macro comes with the field: the 0.6.0
     * frozen header has both once it is recorded with them. */
#define SO_PREV penalty_window
#else
    /* sampler options: last field stream (default 0) */
#define SO_PREV seed
#endif
    slot ss;
    gptx_sampler_options *sop = slot_new(&ss, "gptx_sampler_options",
                                         DECLARED(gptx_sampler_options, GPTX_SAMPLER_OPTIONS_SIZE,
                                                  SO_PREV),
                                         sizeof *sop);
#undef SO_PREV
    INIT_SLOT(&ss, gptx_sampler_options, gptx_sampler_options_init_sized,
              GPTX_SAMPLER_OPTIONS_SIZE);
    sop->seed = 11;
#ifdef GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT
    if (!older) sop->min_p = 0.25f;
#endif
    gptx_sampler *sampler = NULL;
    CREATE_BOTH(gptx_sampler, sampler, &ss, gptx_sampler_destroy,
                gptx_sampler_create(&OUT, OPTS));
    if (!sampler) return;
    gptx_sampler_options got_so;
    gptx_sampler_options_init(&got_so);
    EXPECT_OK(gptx_sampler_get_options(sampler, &got_so));
    EXPECT(got_so.seed == 11 && got_so.stream == 0 && got_so.temperature == 1.0f);
#ifdef GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT
    EXPECT(got_so.min_p == (older ? 0.0f : 0.25f) &&
           got_so.penalty_window == GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT &&
           got_so.repetition_penalty == 1.0f);
#endif
    slot_free(&ss);

    /* sampler state: last field counter (default 0) */
    float row[64];
    for (int i = 0; i < 64; i++) row[i] = (float)(i % 5);
    int32_t tok = -1;
    EXPECT_OK(gptx_sampler_sample(sampler, row, 64, 50, &tok));
    EXPECT_OK(gptx_sampler_sample(sampler, row, 64, 50, &tok));
    slot sq;
    gptx_sampler_state *sst = slot_new(&sq, "gptx_sampler_state",
                                       DECLARED(gptx_sampler_state, GPTX_SAMPLER_STATE_SIZE,
                                                stream),
                                       sizeof *sst);
    INIT_SLOT(&sq, gptx_sampler_state, gptx_sampler_state_init_sized, GPTX_SAMPLER_STATE_SIZE);
    EXPECT_OK(gptx_sampler_get_state(sampler, sst));
    slot_check(&sq, "gptx_sampler_get_state");
    EXPECT(sst->seed == 11);
    if (!older) EXPECT(sst->counter == 2);
    exact = slot_exact(&sq);
    EXPECT_OK(gptx_sampler_set_state(sampler, exact));
    free(exact);
    EXPECT_OK(gptx_sampler_set_state(sampler, sst));
    slot_check(&sq, "gptx_sampler_set_state");
    gptx_sampler_state got_ss;
    gptx_sampler_state_init(&got_ss);
    EXPECT_OK(gptx_sampler_get_state(sampler, &got_ss));
    EXPECT(got_ss.seed == 11 && got_ss.counter == (older ? 0u : 2u));
    slot_free(&sq);

    /* generator options: last field use_cache (default 1); stats (out): last
     * field use_cache */
    slot sgo;
    gptx_generator_options *gop_ = slot_new(&sgo, "gptx_generator_options",
                                            DECLARED(gptx_generator_options,
                                                     GPTX_GENERATOR_OPTIONS_SIZE, keep),
                                            sizeof *gop_);
    INIT_SLOT(&sgo, gptx_generator_options, gptx_generator_options_init_sized,
              GPTX_GENERATOR_OPTIONS_SIZE);
    gop_->window = 8;
    gptx_generator *gen = NULL;
    CREATE_BOTH(gptx_generator, gen, &sgo, gptx_generator_destroy,
                gptx_generator_create(&OUT, model, OPTS));
    if (!gen) return;
    int32_t gp[3] = {1, 2, 3};
    EXPECT_OK(gptx_generator_feed(gen, gp, 3));
    EXPECT_OK(gptx_generator_next(gen, sampler, &tok));
    slot sgs;
    gptx_generator_stats *gst = slot_new(&sgs, "gptx_generator_stats",
                                         DECLARED(gptx_generator_stats, GPTX_GENERATOR_STATS_SIZE,
                                                  keep),
                                         sizeof *gst);
    INIT_SLOT(&sgs, gptx_generator_stats, gptx_generator_stats_init_sized,
              GPTX_GENERATOR_STATS_SIZE);
    EXPECT_OK(gptx_generator_get_stats(gen, gst));
    slot_check(&sgs, "gptx_generator_get_stats");
    EXPECT(gst->tokens == 4 && gst->prefill_passes == 1 && gst->window == 8 && gst->keep == 4);
    if (!older) EXPECT(gst->use_cache == 1);
    slot_free(&sgs);
    slot_free(&sgo);
    gptx_generator_destroy(gen);

    /* timer report (out): last field steady_tokens_per_second */
    gptx_timer *timer = NULL;
    EXPECT_OK(gptx_timer_create(&timer, ctx, GPTX_TIMER_TRAINING_STEPS));
    for (int i = 0; timer && i < 3; i++) {
        EXPECT_OK(gptx_timer_start(timer));
        EXPECT_OK(gptx_timer_stop(timer, 10));
    }
    slot sr;
    gptx_timer_report *tr = slot_new(&sr, "gptx_timer_report",
                                     DECLARED(gptx_timer_report, GPTX_TIMER_REPORT_SIZE,
                                              steady_max_seconds),
                                     sizeof *tr);
    INIT_SLOT(&sr, gptx_timer_report, gptx_timer_report_init_sized, GPTX_TIMER_REPORT_SIZE);
    EXPECT_OK(gptx_timer_get_report(timer, tr));
    slot_check(&sr, "gptx_timer_get_report");
    EXPECT(tr->intervals == 3 && tr->steady_tokens == 20);
    slot_free(&sr);
    gptx_timer_destroy(timer);

#if GPTX_FROZEN_VERSION_NUMBER >= 300
    /* train state: last field user_metadata (0.3.0; default NULL: none saved) */
#define TS_PREV tokens_seen
#else
    /* train state: last field tokens_seen (default 0, in and out) */
#define TS_PREV lr_schedule_step
#endif
    char path[512];
    snprintf(path, sizeof path, "%s/train_%d.safetensors", dir, older);
    slot sv;
    gptx_train_state *ts = slot_new(&sv, "gptx_train_state",
                                    DECLARED(gptx_train_state, GPTX_TRAIN_STATE_SIZE, TS_PREV),
                                    sizeof *ts);
    INIT_SLOT(&sv, gptx_train_state, gptx_train_state_init_sized, GPTX_TRAIN_STATE_SIZE);
    ts->optimizer = opt;
    ts->sampler = sampler;
    ts->train_loader = dl;
    ts->lr_schedule_step = 3;
#if GPTX_FROZEN_VERSION_NUMBER >= 300
    ts->tokens_seen = 96;
    if (!older) ts->user_metadata = "run record";
#else
    if (!older) ts->tokens_seen = 96;
#endif
    exact = slot_exact(&sv);
    EXPECT_OK(gptx_checkpoint_save(model, exact, path));
    free(exact);
    EXPECT_OK(gptx_checkpoint_save(model, ts, path));
    slot_check(&sv, "gptx_checkpoint_save");
    ts->lr_schedule_step = -1;
    EXPECT_OK(gptx_checkpoint_load(model, ts, path));
    slot_check(&sv, "gptx_checkpoint_load");
    EXPECT(ts->lr_schedule_step == 3);
    gptx_train_state full_ts;
    gptx_train_state_init(&full_ts);
    EXPECT_OK(gptx_checkpoint_load(model, &full_ts, path));
#if GPTX_FROZEN_VERSION_NUMBER >= 300
    EXPECT(full_ts.lr_schedule_step == 3 && full_ts.tokens_seen == 96);
    { /* the older struct's missing field reads as NULL: nothing saved */
        char meta[32];
        size_t mlen = 0;
        int mrc = gptx_checkpoint_user_metadata(path, meta, sizeof meta, &mlen);
        EXPECT(older ? mrc == GPTX_ERR_NOT_FOUND
                     : mrc == GPTX_OK && strcmp(meta, "run record") == 0);
    }
#else
    EXPECT(full_ts.lr_schedule_step == 3 && full_ts.tokens_seen == (older ? 0 : 96));
#endif
#undef TS_PREV
    unlink(path);
    slot_free(&sv);

    /* compare options: last field label_b (default NULL: an empty label) */
    float la[2 * 3] = {0.f, 1.f, 2.f, 2.f, 1.f, 0.f}, lb[2 * 3];
    memcpy(lb, la, sizeof la);
    slot sp;
    gptx_compare_options *cpo = slot_new(&sp, "gptx_compare_options",
                                         DECLARED(gptx_compare_options, GPTX_COMPARE_OPTIONS_SIZE,
                                                  label_a),
                                         sizeof *cpo);
    INIT_SLOT(&sp, gptx_compare_options, gptx_compare_options_init_sized,
              GPTX_COMPARE_OPTIONS_SIZE);
    cpo->label_a = "reference";
    if (!older) cpo->label_b = "candidate";
    /* compare report (out): last field stream */
    slot sk;
    gptx_compare_report *rep = slot_new(&sk, "gptx_compare_report",
                                        DECLARED(gptx_compare_report, GPTX_COMPARE_REPORT_SIZE,
                                                 seed),
                                        sizeof *rep);
    INIT_SLOT(&sk, gptx_compare_report, gptx_compare_report_init_sized,
              GPTX_COMPARE_REPORT_SIZE);
    exact = slot_exact(&sp);
    EXPECT_OK(gptx_compare_logits(la, lb, 2, 3, 3, exact, rep));
    free(exact);
    EXPECT_OK(gptx_compare_logits(la, lb, 2, 3, 3, cpo, rep));
    slot_check(&sp, "gptx_compare_logits (options)");
    slot_check(&sk, "gptx_compare_logits (report)");
    EXPECT(rep->pass == 1 && rep->rows == 2 && strcmp(rep->a.label, "reference") == 0);
    EXPECT(strcmp(rep->b.label, older ? "" : "candidate") == 0);
    char text[GPTX_COMPARE_TEXT_MAX];
    size_t len = 0;
    EXPECT_OK(gptx_compare_report_format(rep, text, sizeof text, &len));
    EXPECT(strstr(text, "PASS") != NULL);
    slot_free(&sp);
    slot_free(&sk);

    /* communicator launch info (out): last field local_world_size */
    slot sn;
    gptx_comm_launch_info *li = slot_new(&sn, "gptx_comm_launch_info",
                                         DECLARED(gptx_comm_launch_info,
                                                  GPTX_COMM_LAUNCH_INFO_SIZE, local_rank),
                                         sizeof *li);
    INIT_SLOT(&sn, gptx_comm_launch_info, gptx_comm_launch_info_init_sized,
              GPTX_COMM_LAUNCH_INFO_SIZE);
    EXPECT_OK(gptx_comm_detect_launch(li));
    slot_check(&sn, "gptx_comm_detect_launch");
    EXPECT(li->launcher == GPTX_LAUNCHER_NONE && li->world_size == 1);
    slot_free(&sn);

    /* communicator options: last field timeout_seconds (default 600; the
     * pattern is a negative double, which is rejected) */
    slot sx;
    gptx_comm_options *cmo = slot_new(&sx, "gptx_comm_options",
                                      DECLARED(gptx_comm_options, GPTX_COMM_OPTIONS_SIZE, engine),
                                      sizeof *cmo);
    INIT_SLOT(&sx, gptx_comm_options, gptx_comm_options_init_sized, GPTX_COMM_OPTIONS_SIZE);
    cmo->engine = GPTX_COMM_SINGLE;
    gptx_comm *comm = NULL;
    CREATE_BOTH(gptx_comm, comm, &sx, gptx_comm_destroy, gptx_comm_create(&OUT, ctx, OPTS));
    if (comm) {
        gptx_comm_options got_co;
        gptx_comm_options_init(&got_co);
        EXPECT_OK(gptx_comm_get_options(comm, &got_co));
        EXPECT(got_co.engine == GPTX_COMM_SINGLE && got_co.timeout_seconds == 600.0);
    }
    slot_free(&sx);

    gptx_comm_destroy(comm);
    gptx_sampler_destroy(sampler);
    /* a handle used after its destroy: a program of any release gets an
     * error status and a message (GPTX_ERR_MISUSE since 0.5.0, a value older
     * headers do not name), not a crash; a second destroy does nothing */
    if (sampler) {
        gptx_sampler_options after;
        gptx_sampler_options_init(&after);
        int rc = gptx_sampler_get_options(sampler, &after);
        EXPECT(rc < 0 && strcmp(gptx_status_name(rc), "GPTX_UNKNOWN") != 0);
        EXPECT(strstr(gptx_last_error(), "destroyed") != NULL);
        gptx_sampler_destroy(sampler);
    }
    gptx_dataloader_destroy(dl);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/gptx_old_client_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    printf("old client built against gptx %s, running with gptx %s\n", GPTX_VERSION_STRING,
           gptx_version());
    for (older = 0; older <= 1; older++) {
        shape = older ? "older: last field missing" : "as declared";
        int before = failures;
        run();
        printf("  %-26s %s\n", shape, failures == before ? "ok" : "FAILED");
    }
    rmdir(dir);
    if (failures) {
        fprintf(stderr, "abi_old_client: %d check(s) failed\n", failures);
        return 1;
    }
    printf("abi_old_client: all checks passed\n");
    return 0;
}
