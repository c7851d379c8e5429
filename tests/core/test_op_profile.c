/* The per-op profiler (lib/core/op_profile.c, op_profile_table.c) on the CPU
 * backend, whose ops are timed with the host clock:
 *   - the experimental calls' argument errors and states;
 *   - off: a model and its optimizer run on the context's own table and
 *     backend (no wrapper at all); on: every entry of their tables is a
 *     wrapper or absent, and the graph entries are absent;
 *   - training steps (zero_grad, forward_backward, AdamW): every op the step
 *     calls has a line, with the call count derived from the model's shape
 *     (tests/support/op_profile_expect.h), each time > 0, their sum at most
 *     the wall time of the steps, the products' flops exact; after a reset
 *     only what followed it;
 *   - losses, parameters and gradients bit for bit the same with profiling
 *     on and off;
 *   under fp32, and under bf16 where oneDNN is built in (the weight copy's
 *   convert_weights and the residual's act_from_res then appear);
 *   - the event path without a device: the CPU table given event entries on
 *     the host clock; no interval read before the report, but all 8192 held
 *     ones at once when one more arrives; every event destroyed with the
 *     context. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <time.h>

#include <gptx/gptx_experimental.h>

#include "check.h"
#include "context.h"
#include "model.h"
#include "op_profile_expect.h"
#include "optimizer.h"
#include "param_storage.h"
#include "test_util.h"

#define B 2
#define T 16
#define STEPS 3
#define MAX_LINES 64

/* test_util.h's small model (2 layers, width 16), its vocabulary padded to
 * 80 rather than 64: lines are kept per product shape, and lm_head (16 x 64)
 * would share mlp.c_fc's */
static gptx_model_config model_config(void) {
    gptx_model_config c = small_config();
    c.padded_vocab_size = 80;
    return c;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void check_errors(void) {
    gptx_context *ctx = make_policy_context(GPTX_PRECISION_FP32);
    if (!ctx) return;
    gptx_op_stat s[2];
    int n = -1;
    CHECK_STATUS(gptx_context_set_profiling(NULL, 1), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_context_set_profiling(ctx, 2), GPTX_ERR_INVALID);
    CHECK_MSG("on is 2");
    CHECK_STATUS(gptx_context_get_op_profile(ctx, s, 2, &n, NULL), GPTX_ERR_STATE);
    CHECK_MSG("never enabled");
    CHECK(n == 0);
    CHECK_STATUS(gptx_context_reset_op_profile(ctx), GPTX_ERR_STATE);
    CHECK_STATUS(gptx_context_reset_op_profile(NULL), GPTX_ERR_NULL);
    CHECK_OK(gptx_context_set_profiling(ctx, 1));
    CHECK_STATUS(gptx_context_get_op_profile(NULL, s, 2, &n, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_context_get_op_profile(ctx, s, 2, NULL, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_context_get_op_profile(ctx, s, -1, &n, NULL), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_context_get_op_profile(ctx, NULL, 1, &n, NULL), GPTX_ERR_NULL);
    int clock = 0;
    CHECK_OK(gptx_context_get_op_profile(ctx, NULL, 0, &n, &clock)); /* nothing ran yet */
    CHECK(n == 0 && clock == GPTX_PROFILE_HOST_CLOCK);
    CHECK_OK(gptx_context_reset_op_profile(ctx));
    gptx_context_destroy(ctx);
}

/* The function-pointer entries of a table, in order (after its name). */
enum { NENTRIES = (sizeof(gptx_backend_ops) - offsetof(gptx_backend_ops, create)) /
                  sizeof(void (*)(void)) };
static void entries(const gptx_backend_ops *ops, void (*out[NENTRIES])(void)) {
    memcpy(out, (const char *)ops + offsetof(gptx_backend_ops, create),
           NENTRIES * sizeof out[0]);
}

/* Every entry of a profiled instance's table differs from the context's
 * (a wrapper) or is absent in both; create, destroy and the graphs absent. */
static void check_wrapped(const gptx_backend_ops *inst, const gptx_backend_ops *base) {
    void (*a[NENTRIES])(void), (*b[NENTRIES])(void);
    entries(inst, a);
    entries(base, b);
    int same = 0;
    for (int i = 0; i < NENTRIES; i++)
        if (a[i] && a[i] == b[i]) same++;
    CHECK(same == 0);
    CHECK(!inst->create && !inst->destroy && !inst->graph_begin && !inst->graph_end);
    CHECK(inst->matmul_forward && inst->alloc && inst->sum_squares_to_host);
    CHECK(!base->event_record && !inst->event_record); /* absent stays absent */
}

static void check_tables(void) {
    gptx_context *ctx = make_policy_context(GPTX_PRECISION_FP32);
    if (!ctx) return;
    gptx_model_config c = model_config();
    gptx_model *off = NULL, *on = NULL, *off_again = NULL;
    gptx_optimizer *opt_off = NULL, *opt_on = NULL;
    CHECK_OK(gptx_model_create(&off, ctx, &c));
    CHECK_OK(gptx_optimizer_create(&opt_off, off, NULL));
    CHECK_OK(gptx_context_set_profiling(ctx, 1));
    CHECK_OK(gptx_model_create(&on, ctx, &c));
    CHECK_OK(gptx_optimizer_create(&opt_on, on, NULL));
    CHECK_OK(gptx_context_set_profiling(ctx, 0));
    CHECK_OK(gptx_model_create(&off_again, ctx, &c));
    if (off && on && off_again && opt_off && opt_on) {
        /* off: the context's table and backend, nothing in between */
        CHECK(memcmp(&off->ops, ctx->ops, sizeof off->ops) == 0);
        CHECK(off->be == ctx->be && off->profiled == NULL);
        CHECK(memcmp(&opt_off->ops, ctx->ops, sizeof opt_off->ops) == 0);
        CHECK(opt_off->be == ctx->be && opt_off->profiled == NULL);
        CHECK(memcmp(&off_again->ops, ctx->ops, sizeof off_again->ops) == 0);
        CHECK(off_again->be == ctx->be);
        /* on: the stand-in and a wrapper for every entry */
        CHECK(on->be != ctx->be && on->profiled != NULL);
        check_wrapped(&on->ops, ctx->ops);
        CHECK(opt_on->be != ctx->be);
        check_wrapped(&opt_on->ops, ctx->ops);
    }
    gptx_optimizer_destroy(opt_on);
    gptx_optimizer_destroy(opt_off);
    gptx_model_destroy(off_again);
    gptx_model_destroy(on);
    gptx_model_destroy(off);
    gptx_context_destroy(ctx);
}

typedef struct run_result {
    float loss[STEPS];
    float *params, *grads; /* np each */
    size_t np;
} run_result;

static int train_step(gptx_model *m, gptx_optimizer *opt, const int32_t *tok, float *loss) {
    int rc = gptx_model_zero_grad(m);
    if (rc == GPTX_OK) rc = gptx_model_forward_backward(m, tok, tok + 1, B, T, 1.0f, loss);
    if (rc == GPTX_OK) rc = gptx_optimizer_step(opt, m, NULL);
    return rc;
}

/* What the profile of STEPS steps after a reset must hold (the ops' times
 * within wall seconds). */
static void check_report(gptx_context *ctx, const gptx_model_config *c, double wall) {
    gptx_op_stat s[MAX_LINES];
    int n = 0, clock = 0;
    CHECK_OK(gptx_context_get_op_profile(ctx, s, MAX_LINES, &n, &clock));
    CHECK(clock == GPTX_PROFILE_HOST_CLOCK);
    CHECK(n > 0 && n <= MAX_LINES);
    gptx_backend_storage st;
    gptx_context_storage(ctx, &st);
    expect_line want[32];
    int nwant = expect_step_lines(c, ctx->ops, ctx->be, &st, want);
    check_profile_lines(s, n, want, nwant, STEPS);
    double sum = 0.0, N = B * T, C = c->n_embd, Vp = c->padded_vocab_size;
    for (int i = 0; i < n; i++) {
        CHECK(s[i].seconds > 0.0);
        sum += s[i].seconds;
        if (!strcmp(s[i].op, "matmul_forward") && s[i].oc == c->padded_vocab_size)
            CHECK(s[i].flops == STEPS * 2.0 * N * C * Vp);
        if (!strcmp(s[i].op, "qkv_backward"))
            CHECK(s[i].flops == STEPS * c->n_layer * 4.0 * N * C * 3 * C);
        if (!strcmp(s[i].op, "attention_forward"))
            CHECK(s[i].flops == STEPS * c->n_layer * 4.0 * C * B * T * (T + 1) / 2);
        if (!s[i].c) CHECK(s[i].flops == 0.0 || !strncmp(s[i].op, "attention", 9));
    }
    CHECK(sum <= wall);
    printf("  %d lines, ops %.3f ms of %.3f ms\n", n, 1e3 * sum, 1e3 * wall);
    /* a shorter array gets the first lines, the count stays the total */
    gptx_op_stat first[2];
    int n2 = 0;
    CHECK_OK(gptx_context_get_op_profile(ctx, first, 2, &n2, NULL));
    CHECK(n2 == n && !strcmp(first[1].op, s[1].op) && first[1].calls == s[1].calls);
}

/* STEPS steps after one warm-up, profiled or not; the losses, the
 * parameters and last gradients into r. */
static int run(int precision, int profile, run_result *r) {
    gptx_context *ctx = make_policy_context(precision);
    if (!ctx) return 1;
    if (profile) REQUIRE_OK(gptx_context_set_profiling(ctx, 1));
    gptx_model_config c = model_config();
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    int32_t tok[B * T + 1];
    fill_tokens(tok, B * T + 1, c.vocab_size, 11);
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 7));
    REQUIRE_OK(gptx_optimizer_create(&opt, m, NULL));
    float warm = 0.0f;
    REQUIRE_OK(train_step(m, opt, tok, &warm));
    if (profile) REQUIRE_OK(gptx_context_reset_op_profile(ctx));
    double t0 = now_s();
    for (int s = 0; s < STEPS; s++) REQUIRE_OK(train_step(m, opt, tok, &r->loss[s]));
    double wall = now_s() - t0;
    if (profile) check_report(ctx, &c, wall);
    r->np = gptx_model_num_parameters(m);
    r->params = model_values(m, 0);
    r->grads = model_values(m, 1);
    CHECK(r->params && r->grads);
    if (profile) { /* a reset forgets every line */
        int n = -1;
        CHECK_OK(gptx_context_reset_op_profile(ctx));
        CHECK_OK(gptx_context_get_op_profile(ctx, NULL, 0, &n, NULL));
        CHECK(n == 0);
    }
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return 0;
}

/* Profiled and not: the same bits. */
static void check_policy(int precision) {
    printf("%s\n", gptx_precision_name(precision));
    run_result off = {0}, on = {0};
    if (run(precision, 0, &off) || run(precision, 1, &on)) {
        check_failures++;
        return;
    }
    CHECK(memcmp(off.loss, on.loss, sizeof off.loss) == 0);
    CHECK(off.params && on.params && off.grads && on.grads && off.np == on.np);
    if (off.params && on.params && off.grads && on.grads) {
        CHECK(memcmp(off.params, on.params, off.np * sizeof(float)) == 0);
        CHECK(memcmp(off.grads, on.grads, off.np * sizeof(float)) == 0);
    }
    free(off.params);
    free(off.grads);
    free(on.params);
    free(on.grads);
}

/* ---- the event path, on host-clock events ---------------------------------- */

#define PENDING_MAX 8192 /* lib/core/op_profile.c */

static gptx_backend_ops evented; /* the CPU table with the events below */
static int64_t events_alive, elapsed_calls;

static int ev_create(gptx_backend *be, void **ev) {
    double *t = calloc(1, sizeof *t);
    if (!t) return GPTX_ERR_NO_MEMORY;
    events_alive++;
    *ev = t;
    return GPTX_OK;
}

static void ev_destroy(gptx_backend *be, void *ev) {
    events_alive--;
    free(ev);
}

static int ev_record(gptx_backend *be, void *ev) {
    *(double *)ev = now_s();
    return GPTX_OK;
}

static int ev_elapsed(gptx_backend *be, void *start, void *stop, double *seconds) {
    elapsed_calls++;
    *seconds = *(double *)stop - *(double *)start;
    return GPTX_OK;
}

/* Enough steps for more than PENDING_MAX calls: the intervals are read
 * once when the held ones reach PENDING_MAX, then at the report. */
static void check_events(void) {
    evented = *gptx_cpu_backend_ops();
    evented.event_create = ev_create;
    evented.event_destroy = ev_destroy;
    evented.event_record = ev_record;
    evented.event_elapsed = ev_elapsed;
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 1;
    gptx_context *ctx = NULL;
    CHECK_OK(gptx_context_create_on(&ctx, &o, &evented));
    if (!ctx) return;
    gptx_model_config c = model_config();
    gptx_backend_storage st;
    gptx_context_storage(ctx, &st);
    expect_line want[32];
    int nwant = expect_step_lines(&c, ctx->ops, ctx->be, &st, want), steps = 0;
    int64_t per_step = 0;
    for (int i = 0; i < nwant; i++) per_step += want[i].calls;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    int32_t tok[B * T + 1];
    fill_tokens(tok, B * T + 1, c.vocab_size, 5);
    CHECK_OK(gptx_context_set_profiling(ctx, 1));
    CHECK_OK(gptx_model_create(&m, ctx, &c));
    CHECK_OK(gptx_model_init_random(m, 3));
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    CHECK_OK(gptx_context_reset_op_profile(ctx)); /* init_random's zero_grad: dropped unread */
    while (m && opt && steps * per_step <= PENDING_MAX) {
        CHECK_OK(train_step(m, opt, tok, NULL));
        steps++;
    }
    CHECK(elapsed_calls == PENDING_MAX); /* once, at the limit; never per op */
    gptx_op_stat s[MAX_LINES];
    int n = 0, clock = 0;
    CHECK_OK(gptx_context_get_op_profile(ctx, s, MAX_LINES, &n, &clock));
    CHECK(clock == GPTX_PROFILE_DEVICE_EVENTS);
    check_profile_lines(s, n, want, nwant, steps);
    CHECK(elapsed_calls == steps * per_step); /* the rest, at the report */
    for (int i = 0; i < n; i++) CHECK(s[i].seconds > 0.0);
    printf("events: %d steps, %lld calls, %lld events alive\n", steps,
           (long long)(steps * per_step), (long long)events_alive);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    CHECK(events_alive == 0);
}

int main(void) {
    check_errors();
    check_events();
    check_tables();
    check_policy(GPTX_PRECISION_FP32);
    if (gptx_features() & GPTX_FEATURE_DNNL) check_policy(GPTX_PRECISION_BF16);
    else printf("bf16: skipped (no oneDNN in this build)\n");
    return check_exit("test_op_profile");
}
