/* Handles (gptx.h, "Threads and lifetimes"; lib/core/handle.h): a call with a
 * destroyed handle, a second destroy, a handle of another type or a pointer
 * that is no gptx object is GPTX_ERR_MISUSE with a message, never a crash
 * (run under ASan: no report either); objects destroyed before the objects
 * made from them stay usable by those and are freed with the last of them
 * (LeakSanitizer checks that everything is freed); a destroy that overlaps
 * another thread's call is refused. Argument: the data/gpt2 folder. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>

#include "handle.h"
#include "test_util.h"

enum { B = 2, T = 8, N = B * T };

static int32_t in[N], tg[N];

static gptx_model *new_model(gptx_context *ctx) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK || gptx_model_init_random(m, 5) != GPTX_OK) {
        fprintf(stderr, "model: %s\n", gptx_last_error());
        check_failures++;
    }
    return m;
}

/* Expects status GPTX_ERR_MISUSE and a message with `needle`. */
#define CHECK_MISUSE(call, needle)                \
    do {                                          \
        gptx_clear_error();                       \
        CHECK_STATUS(call, GPTX_ERR_MISUSE);      \
        CHECK_MSG(needle);                        \
    } while (0)

/* A destroy returns nothing: its message says what was refused. */
#define CHECK_DESTROY_REFUSED(call, needle) \
    do {                                    \
        gptx_clear_error();                 \
        call;                               \
        CHECK_MSG(needle);                  \
    } while (0)

/* ---- use after destroy and double destroy, every kind ------------------------ */

static void test_model_context_optimizer_generator(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    gptx_model *m = new_model(ctx);
    gptx_optimizer *opt = NULL;
    gptx_generator *g = NULL;
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    CHECK_OK(gptx_generator_create(&g, m, NULL));

    gptx_generator_destroy(g);
    CHECK_MISUSE(gptx_generator_feed(g, in, 2), "gptx_generator that was destroyed");
    CHECK_DESTROY_REFUSED(gptx_generator_destroy(g), "already destroyed");
    gptx_optimizer_destroy(opt);
    float lr = 0.0f;
    CHECK_MISUSE(gptx_optimizer_get_lr(opt, &lr), "gptx_optimizer that was destroyed");
    CHECK_MISUSE(gptx_optimizer_step(opt, m, NULL), "use after gptx_optimizer_destroy");
    CHECK_DESTROY_REFUSED(gptx_optimizer_destroy(opt), "already destroyed");
    gptx_model_destroy(m);
    CHECK_MISUSE(gptx_model_forward(m, in, tg, B, T, NULL), "gptx_model that was destroyed");
    CHECK_MISUSE(gptx_model_num_tensors(m), "destroyed");
    CHECK(gptx_model_num_parameters(m) == 0);
    CHECK_DESTROY_REFUSED(gptx_model_destroy(m), "gptx_model that was already destroyed");
    gptx_context_destroy(ctx);
    gptx_model *m2 = NULL;
    gptx_model_config c = small_config();
    CHECK_MISUSE(gptx_model_create(&m2, ctx, &c), "gptx_context that was destroyed");
    CHECK(m2 == NULL);
    CHECK_MISUSE(gptx_context_synchronize(ctx), "use after gptx_context_destroy");
    CHECK(strcmp(gptx_context_backend_name(ctx), "") == 0);
    CHECK_DESTROY_REFUSED(gptx_context_destroy(ctx), "gptx_context that was already destroyed");
}

static void test_sampler_loader_timer_comm(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    gptx_sampler *s = make_sampler(1.0f, 0, 1.0f, 3);
    gptx_sampler_destroy(s);
    float logits[4] = {0};
    int32_t tok = 0;
    CHECK_MISUSE(gptx_sampler_sample(s, logits, 4, 4, &tok), "gptx_sampler that was destroyed");
    CHECK_DESTROY_REFUSED(gptx_sampler_destroy(s), "already destroyed");

    gptx_dataloader *dl = NULL;
    gptx_dataloader_options lo;
    gptx_dataloader_options_init(&lo);
    lo.batch_size = B;
    lo.seq_len = T;
    int32_t toks[64];
    fill_tokens(toks, 64, 50, 1);
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, ctx, toks, 64, &lo));
    gptx_dataloader_destroy(dl);
    const int32_t *bi = NULL, *bt = NULL;
    CHECK_MISUSE(gptx_dataloader_next(dl, &bi, &bt, NULL, NULL), "gptx_dataloader that was");
    CHECK_DESTROY_REFUSED(gptx_dataloader_destroy(dl), "already destroyed");

    gptx_timer *t = NULL;
    CHECK_OK(gptx_timer_create(&t, ctx, GPTX_TIMER_TRAINING_STEPS));
    gptx_timer_destroy(t);
    CHECK_MISUSE(gptx_timer_start(t), "gptx_timer that was destroyed");
    CHECK_DESTROY_REFUSED(gptx_timer_destroy(t), "already destroyed");

    gptx_comm *comm = NULL;
    gptx_comm_options co;
    gptx_comm_options_init(&co);
    co.engine = GPTX_COMM_SINGLE;
    CHECK_OK(gptx_comm_create(&comm, ctx, &co));
    gptx_comm_destroy(comm);
    CHECK_MISUSE(gptx_comm_barrier(comm), "gptx_comm that was destroyed");
    CHECK(gptx_comm_rank(comm) == -1);
    CHECK_DESTROY_REFUSED(gptx_comm_destroy(comm), "already destroyed");
    gptx_context_destroy(ctx);
}

static void test_tokenizer(const char *dir) {
    char enc[1024], bpe[1024];
    snprintf(enc, sizeof enc, "%s/encoder.json", dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", dir);
    gptx_tokenizer *tok = NULL;
    CHECK_OK(gptx_tokenizer_load_gpt2(&tok, enc, bpe));
    gptx_tokenizer_destroy(tok);
    int32_t ids[8];
    size_t n = 0;
    CHECK_MISUSE(gptx_tokenizer_encode(tok, "hi", 2, 0, ids, 8, &n),
                 "gptx_tokenizer that was destroyed");
    CHECK(gptx_tokenizer_vocab_size(tok) == 0);
    CHECK_DESTROY_REFUSED(gptx_tokenizer_destroy(tok), "already destroyed");
}

/* ---- handles that are not what the call expects ------------------------------- */

static void test_foreign_handles(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    gptx_model *m = new_model(ctx);
    gptx_optimizer *opt = NULL;
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    CHECK_MISUSE(gptx_model_forward((gptx_model *)opt, in, tg, B, T, NULL),
                 "is a gptx_optimizer, not a gptx_model");
    CHECK_MISUSE(gptx_model_create(&(gptx_model *){NULL}, (gptx_context *)m, NULL),
                 "is a gptx_model, not a gptx_context");
    /* never a gptx object: zeroed memory, and a struct of the caller's */
    void *zeros = calloc(1, 4096);
    CHECK_MISUSE(gptx_model_zero_grad((gptx_model *)zeros), "is not a gptx_model");
    gptx_clear_error();
    gptx_model_destroy((gptx_model *)zeros);
    CHECK_MSG("is not a gptx_model");
    free(zeros);
    gptx_model_config cfg = small_config();
    CHECK_MISUSE(gptx_optimizer_get_step((gptx_optimizer *)&cfg, &(int64_t){0}),
                 "is not a gptx_optimizer");
    /* a destroyed handle of another kind */
    gptx_optimizer_destroy(opt);
    CHECK_MISUSE(gptx_model_zero_grad((gptx_model *)opt), "is a destroyed gptx_optimizer");
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

/* ---- destroy order: what is made from an object keeps it alive ------------------- */

/* ctx destroyed first: the model keeps working on it, the timer and the
 * loader too; the context goes with the last of them. */
static void test_context_outlived(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    gptx_model *m = new_model(ctx);
    gptx_timer *t = NULL;
    CHECK_OK(gptx_timer_create(&t, ctx, GPTX_TIMER_END_TO_END));
    gptx_dataloader *dl = NULL;
    int32_t toks[64];
    fill_tokens(toks, 64, 50, 2);
    gptx_dataloader_options lo;
    gptx_dataloader_options_init(&lo);
    lo.batch_size = B;
    lo.seq_len = T;
    lo.prefetch = 1;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, ctx, toks, 64, &lo));
    float before = 0.0f, after = 0.0f;
    CHECK_OK(gptx_model_forward(m, in, tg, B, T, &before));
    gptx_context_destroy(ctx);
    CHECK_OK(gptx_timer_start(t));
    CHECK_OK(gptx_model_forward(m, in, tg, B, T, &after));
    CHECK_OK(gptx_timer_stop(t, N));
    CHECK(memcmp(&before, &after, sizeof after) == 0);
    const int32_t *bi = NULL, *bt = NULL;
    CHECK_OK(gptx_dataloader_next(dl, &bi, &bt, NULL, NULL));
    CHECK(((gptx_handle *)ctx)->refs == 3); /* the model, the timer, the loader */
    gptx_model_destroy(m);
    gptx_timer_destroy(t);
    gptx_dataloader_destroy(dl); /* the context is released here */
}

/* The model destroyed before its generator and optimizer: the generator
 * goes on with the same tokens, the optimizer's own calls work, and calls
 * that name the model are refused. */
static void test_model_outlived(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    gptx_model *m = new_model(ctx), *twin = new_model(ctx);
    gptx_generator *g = NULL, *gt = NULL;
    gptx_optimizer *opt = NULL;
    CHECK_OK(gptx_generator_create(&g, m, NULL));
    CHECK_OK(gptx_generator_create(&gt, twin, NULL));
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    CHECK_OK(gptx_generator_feed(g, in, 4));
    CHECK_OK(gptx_generator_feed(gt, in, 4));
    gptx_model_destroy(m);
    gptx_sampler *s = make_sampler(0.0f, 0, 1.0f, 1), *st = make_sampler(0.0f, 0, 1.0f, 1);
    for (int i = 0; i < 6; i++) {
        int32_t a = -1, b = -2;
        CHECK_OK(gptx_generator_next(g, s, &a));
        CHECK_OK(gptx_generator_next(gt, st, &b));
        CHECK(a == b);
    }
    int64_t step = -1;
    CHECK_OK(gptx_optimizer_get_step(opt, &step));
    CHECK(step == 0);
    CHECK_MISUSE(gptx_optimizer_step(opt, m, NULL), "gptx_model that was destroyed");
    CHECK(((gptx_handle *)m)->refs == 2); /* the generator and the optimizer */
    gptx_generator_destroy(g);
    gptx_context_destroy(ctx);  /* before the last user of the model: still fine */
    gptx_optimizer_destroy(opt); /* the model, then nothing of ctx but twin's */
    gptx_generator_destroy(gt);
    gptx_model_destroy(twin); /* and the context with it */
    gptx_sampler_destroy(s);
    gptx_sampler_destroy(st);
}

/* A sharded optimizer keeps its communicator. */
static void test_comm_outlived(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    gptx_model *m = new_model(ctx);
    gptx_comm *comm = NULL;
    gptx_comm_options co;
    gptx_comm_options_init(&co);
    co.engine = GPTX_COMM_SINGLE;
    CHECK_OK(gptx_comm_create(&comm, ctx, &co));
    gptx_optimizer *opt = NULL;
    CHECK_OK(gptx_optimizer_create_sharded(&opt, m, NULL, comm));
    gptx_comm_destroy(comm);
    CHECK_OK(gptx_model_forward_backward(m, in, tg, B, T, 1.0f, NULL));
    CHECK_OK(gptx_optimizer_step_sharded(opt, m, N, NULL));
    gptx_optimizer_destroy(opt); /* the communicator with it */
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

/* ---- a destroy that overlaps another thread's call --------------------------------- */

typedef struct holder {
    gptx_model *m;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int state; /* 0 start, 1 inside the call, 2 may leave */
} holder;

/* Stands for a long call on the model: enters it as a call does and stays
 * until told to leave. */
static void *hold_main(void *arg) {
    holder *h = arg;
    gptx_guard g;
    int rc = gptx_guard_enter(&g, h->m, GPTX_KIND_MODEL, GPTX_GUARD_CHECK, "m", "hold_main");
    pthread_mutex_lock(&h->mu);
    h->state = rc == GPTX_OK ? 1 : -1;
    pthread_cond_broadcast(&h->cv);
    while (h->state != 2) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    gptx_guard_leave(&g);
    return NULL;
}

/* While another thread is inside a call on the model: its destroy is
 * refused, and so is every call that works through it (its own, its
 * generator's, its optimizer's step); the reads of its configuration run. */
static void test_destroy_during_call(void) {
    gptx_context *ctx = NULL;
    CHECK_OK(make_cpu_context(&ctx, 1));
    holder h = {.m = new_model(ctx), .mu = PTHREAD_MUTEX_INITIALIZER,
                .cv = PTHREAD_COND_INITIALIZER};
    gptx_generator *g = NULL;
    gptx_optimizer *opt = NULL;
    gptx_sampler *s = make_sampler(0.0f, 0, 1.0f, 1);
    CHECK_OK(gptx_generator_create(&g, h.m, NULL));
    CHECK_OK(gptx_optimizer_create(&opt, h.m, NULL));
    pthread_t th;
    pthread_create(&th, NULL, hold_main, &h);
    pthread_mutex_lock(&h.mu);
    while (h.state == 0) pthread_cond_wait(&h.cv, &h.mu);
    pthread_mutex_unlock(&h.mu);
    CHECK(h.state == 1);
    CHECK_DESTROY_REFUSED(gptx_model_destroy(h.m), "in use by another thread");
    CHECK_STATUS(gptx_model_zero_grad(h.m), GPTX_ERR_BUSY);
    CHECK_OK(gptx_generator_feed(g, in, 3)); /* the window only */
    int32_t tok = -1;
    CHECK_STATUS(gptx_generator_next(g, s, &tok), GPTX_ERR_BUSY);
    CHECK_STATUS(gptx_optimizer_step(opt, h.m, NULL), GPTX_ERR_BUSY);
    gptx_model_config c;
    gptx_model_config_init(&c);
    CHECK_OK(gptx_model_get_config(h.m, &c));
    pthread_mutex_lock(&h.mu);
    h.state = 2;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(th, NULL);
    CHECK_OK(gptx_model_forward(h.m, in, tg, B, T, NULL)); /* still whole */
    CHECK_OK(gptx_generator_next(g, s, &tok));
    gptx_generator_destroy(g);
    gptx_optimizer_destroy(opt);
    gptx_sampler_destroy(s);
    gptx_model_destroy(h.m);
    gptx_context_destroy(ctx);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_handles <data/gpt2 folder>\n");
        return 2;
    }
    fill_tokens(in, N, 50, 11);
    fill_tokens(tg, N, 50, 12);
    test_model_context_optimizer_generator();
    test_sampler_loader_timer_comm();
    test_tokenizer(argv[1]);
    test_foreign_handles();
    test_context_outlived();
    test_model_outlived();
    test_comm_outlived();
    test_destroy_during_call();
    return check_exit("test_handles");
}
