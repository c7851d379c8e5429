/* Threads (gptx.h, "Threads and lifetimes"): two threads hammering one model
 * get GPTX_ERR_BUSY and never a wrong loss; a generator and a training loop
 * on one model likewise; two models on one context used from two threads
 * take turns and end with the bits of a single-threaded run; models on
 * separate contexts run at once with those bits; comparisons across two
 * contexts in opposite orders finish without a deadlock. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

enum { B = 4, T = 32, N = B * T, CALLS = 150, STEPS = 4 };

/* vocab 50 padded to 64, context 32, 2 layers, 2 heads, width 64: a forward
 * pass long enough for two threads' calls to overlap */
static gptx_model_config config(void) {
    gptx_model_config c = small_config();
    c.context_length = T;
    c.n_embd = 64;
    return c;
}

static gptx_model *new_model(gptx_context *ctx, uint64_t seed) {
    gptx_model_config c = config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK || gptx_model_init_random(m, seed) != GPTX_OK) {
        fprintf(stderr, "model: %s\n", gptx_last_error());
        gptx_model_destroy(m);
        return NULL;
    }
    return m;
}

typedef struct batch {
    int32_t in[N], tg[N];
} batch;

static void make_batch(batch *b, uint32_t seed) {
    fill_tokens(b->in, N, 50, seed);
    fill_tokens(b->tg, N, 50, seed + 100);
}

static pthread_barrier_t start;

/* Whether two threads' calls overlapped is up to the scheduler: on a loaded
 * machine one thread may finish its quota before the other runs at all. So a
 * thread that has done its quota goes on until a BUSY has been seen by either
 * thread, or OVERLAP_WAIT_S have passed; the checks then ask for at least the
 * quota, and for the BUSY (a library that never refuses still fails). */
enum { OVERLAP_WAIT_S = 30 };
static atomic_int busy_seen;
static struct timespec overlap_start;

static void overlap_begin(void) {
    atomic_store(&busy_seen, 0);
    clock_gettime(CLOCK_MONOTONIC, &overlap_start);
}

static int keep_going(int done, int quota) {
    if (done < quota) return 1;
    if (atomic_load(&busy_seen)) return 0;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec - overlap_start.tv_sec < OVERLAP_WAIT_S;
}

/* ---- one model, two threads ----------------------------------------------- */

typedef struct hammer {
    gptx_model *m;
    const batch *b;
    float ref;         /* the loss of this batch, computed alone */
    int ok, busy, wrong, other;
    int busy_msg_bad;  /* a BUSY without the message saying why */
} hammer;

/* CALLS successful forward passes (more until the calls are seen to
 * overlap), retrying each refused one. */
static void *hammer_main(void *arg) {
    hammer *h = arg;
    pthread_barrier_wait(&start);
    while (keep_going(h->ok, CALLS) && h->other == 0) {
        float loss = 0.0f;
        int rc = gptx_model_forward(h->m, h->b->in, h->b->tg, B, T, &loss);
        if (rc == GPTX_OK) {
            h->ok++;
            h->wrong += memcmp(&loss, &h->ref, sizeof loss) != 0;
        } else if (rc == GPTX_ERR_BUSY) {
            h->busy++;
            atomic_store(&busy_seen, 1);
            h->busy_msg_bad += strstr(gptx_last_error(), "in use by another thread") == NULL;
            sched_yield();
        } else {
            fprintf(stderr, "forward: %s (%s)\n", gptx_status_name(rc), gptx_last_error());
            h->other++;
        }
    }
    return NULL;
}

static int test_one_model_two_threads(gptx_context *ctx) {
    gptx_model *m = new_model(ctx, 7);
    if (!m) return 1;
    batch b[2];
    hammer h[2];
    for (int k = 0; k < 2; k++) {
        make_batch(&b[k], 1 + (uint32_t)k);
        h[k] = (hammer){.m = m, .b = &b[k]};
        REQUIRE_OK(gptx_model_forward(m, b[k].in, b[k].tg, B, T, &h[k].ref));
    }
    pthread_t th[2];
    overlap_begin();
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, hammer_main, &h[k]);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        printf("thread %d: %d losses, %d wrong, %d BUSY, %d other errors\n", k, h[k].ok,
               h[k].wrong, h[k].busy, h[k].other);
        CHECK(h[k].ok >= CALLS);
        CHECK(h[k].wrong == 0);
        CHECK(h[k].other == 0);
        CHECK(h[k].busy_msg_bad == 0);
    }
    CHECK(h[0].busy + h[1].busy > 0); /* the calls did overlap, and it was seen */
    gptx_model_destroy(m);
    return 0;
}

/* ---- a generator and a forward loop on one model ----------------------------- */

enum { PROMPT = 6, NEW = 10, ROUNDS = 12 };

typedef struct gen_job {
    gptx_model *m;
    int32_t ref[NEW];
    int ok, busy, wrong, other;
} gen_job;

/* Samples NEW tokens (greedy, so the sequence is fixed) after one prompt. */
static int sample_tokens(gptx_model *m, int32_t *out, int *busy) {
    int32_t prompt[PROMPT] = {3, 14, 15, 9, 26, 5};
    gptx_generator *g = NULL;
    gptx_sampler *s = make_sampler(0.0f, 0, 1.0f, 1);
    int rc;
    while ((rc = gptx_generator_create(&g, m, NULL)) == GPTX_ERR_BUSY && busy) {
        (*busy)++; /* it reads the model's configuration inside a call on the model */
        atomic_store(&busy_seen, 1);
        sched_yield();
    }
    if (rc == GPTX_OK) rc = gptx_generator_feed(g, prompt, PROMPT);
    for (int i = 0; i < NEW && rc == GPTX_OK;) {
        rc = gptx_generator_next(g, s, &out[i]);
        if (rc == GPTX_ERR_BUSY && busy) { /* the model is in the other thread's call */
            (*busy)++;
            atomic_store(&busy_seen, 1);
            rc = GPTX_OK;
            sched_yield();
            continue;
        }
        i++;
    }
    gptx_generator_destroy(g);
    gptx_sampler_destroy(s);
    return rc;
}

static void *gen_main(void *arg) {
    gen_job *j = arg;
    pthread_barrier_wait(&start);
    for (int r = 0; keep_going(r, ROUNDS) && j->other == 0; r++) {
        int32_t got[NEW];
        int rc = sample_tokens(j->m, got, &j->busy);
        if (rc != GPTX_OK) {
            fprintf(stderr, "generator: %s (%s)\n", gptx_status_name(rc), gptx_last_error());
            j->other++;
            break;
        }
        j->ok++;
        j->wrong += memcmp(got, j->ref, sizeof got) != 0;
    }
    return NULL;
}

static int test_generator_and_forward(gptx_context *ctx) {
    gptx_model *m = new_model(ctx, 11);
    if (!m) return 1;
    gen_job j = {.m = m};
    REQUIRE_OK(sample_tokens(m, j.ref, NULL));
    batch b;
    make_batch(&b, 5);
    hammer h = {.m = m, .b = &b};
    REQUIRE_OK(gptx_model_forward(m, b.in, b.tg, B, T, &h.ref));
    pthread_t th[2];
    overlap_begin();
    pthread_create(&th[0], NULL, gen_main, &j);
    pthread_create(&th[1], NULL, hammer_main, &h);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    printf("generator: %d rounds, %d wrong, %d BUSY; forward: %d losses, %d wrong, %d BUSY\n",
           j.ok, j.wrong, j.busy, h.ok, h.wrong, h.busy);
    CHECK(j.ok >= ROUNDS && j.wrong == 0 && j.other == 0);
    CHECK(h.ok >= CALLS && h.wrong == 0 && h.other == 0);
    CHECK(j.busy + h.busy > 0);
    gptx_model_destroy(m);
    return 0;
}

/* ---- one model per thread ------------------------------------------------------ */

typedef struct train_job {
    gptx_model *m;
    uint32_t seed;
    float loss[STEPS];
    int rc;
} train_job;

/* STEPS AdamW steps on the thread's own model, every call's status kept. */
static void *train_main(void *arg) {
    train_job *t = arg;
    pthread_barrier_wait(&start);
    gptx_optimizer *opt = NULL;
    t->rc = gptx_optimizer_create(&opt, t->m, NULL);
    batch b;
    for (int s = 0; s < STEPS && t->rc == GPTX_OK; s++) {
        make_batch(&b, t->seed + (uint32_t)s);
        t->rc = gptx_model_zero_grad(t->m);
        if (t->rc == GPTX_OK)
            t->rc = gptx_model_forward_backward(t->m, b.in, b.tg, B, T, 1.0f, &t->loss[s]);
        if (t->rc == GPTX_OK) t->rc = gptx_optimizer_step(opt, t->m, NULL);
    }
    if (t->rc != GPTX_OK) fprintf(stderr, "train: %s\n", gptx_last_error());
    gptx_optimizer_destroy(opt);
    return NULL;
}

/* Runs two jobs at once on models m[0], m[1]; then compares the losses and
 * parameters with the same jobs run one after the other on fresh models. */
static void train_pair(gptx_model *m[2], gptx_context *ref_ctx, const char *what) {
    train_job t[2] = {{.m = m[0], .seed = 40}, {.m = m[1], .seed = 80}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, train_main, &t[k]);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(t[k].rc);
        gptx_model *r = new_model(ref_ctx, 100 + (uint64_t)k);
        train_job ref = {.m = r, .seed = t[k].seed};
        pthread_t one;
        pthread_create(&one, NULL, train_main, &ref);
        pthread_barrier_wait(&start); /* the run alone: this thread is the barrier's partner */
        pthread_join(one, NULL);
        CHECK_OK(ref.rc);
        CHECK(memcmp(t[k].loss, ref.loss, sizeof ref.loss) == 0);
        float *a = model_values(m[k], 0), *e = model_values(r, 0);
        CHECK(a && e && !memcmp(a, e, gptx_model_num_parameters(r) * sizeof *a));
        printf("%s, model %d: final loss %.6f, alone %.6f; parameters %s\n", what, k,
               (double)t[k].loss[STEPS - 1], (double)ref.loss[STEPS - 1],
               a && e && !memcmp(a, e, gptx_model_num_parameters(r) * sizeof *a) ? "equal"
                                                                                  : "DIFFER");
        free(a);
        free(e);
        gptx_model_destroy(r);
    }
}

static int test_two_models(void) {
    gptx_context *shared = NULL, *own[2] = {NULL, NULL}, *ref = NULL;
    REQUIRE_OK(make_cpu_context(&shared, 2));
    REQUIRE_OK(make_cpu_context(&own[0], 2));
    REQUIRE_OK(make_cpu_context(&own[1], 2));
    REQUIRE_OK(make_cpu_context(&ref, 2));
    gptx_model *m[2] = {new_model(shared, 100), new_model(shared, 101)};
    if (m[0] && m[1]) train_pair(m, ref, "one context, two threads");
    gptx_model_destroy(m[0]);
    gptx_model_destroy(m[1]);
    m[0] = new_model(own[0], 100);
    m[1] = new_model(own[1], 101);
    if (m[0] && m[1]) train_pair(m, ref, "two contexts, two threads");
    gptx_model_destroy(m[0]);
    gptx_model_destroy(m[1]);
    gptx_context_destroy(shared);
    gptx_context_destroy(own[0]);
    gptx_context_destroy(own[1]);
    gptx_context_destroy(ref);
    return 0;
}

/* ---- comparisons across two contexts --------------------------------------------- */

typedef struct compare_job {
    gptx_model *a, *b;
    int rc;
    int bitwise;
} compare_job;

static void *compare_main(void *arg) {
    compare_job *j = arg;
    int32_t in[N];
    fill_tokens(in, N, 50, 9);
    pthread_barrier_wait(&start);
    j->bitwise = 1;
    for (int i = 0; i < 10 && j->rc == GPTX_OK; i++) {
        gptx_compare_report r;
        gptx_compare_report_init(&r);
        j->rc = gptx_compare_models(j->a, j->b, in, B, T, NULL, &r);
        j->bitwise &= r.bitwise_equal;
    }
    if (j->rc != GPTX_OK) fprintf(stderr, "compare: %s\n", gptx_last_error());
    return NULL;
}

/* a_k, b_k on context k; one thread compares (a_1, a_2), the other
 * (b_2, b_1): each holds both its models throughout, and takes a context
 * only while its model runs there, so neither waits holding the other's. */
static int test_compare_across_contexts(void) {
    gptx_context *c1 = NULL, *c2 = NULL;
    REQUIRE_OK(make_cpu_context(&c1, 1));
    REQUIRE_OK(make_cpu_context(&c2, 1));
    compare_job j[2] = {{new_model(c1, 3), new_model(c2, 3), 0, 0},
                        {new_model(c2, 4), new_model(c1, 4), 0, 0}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, compare_main, &j[k]);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < 2; k++) {
        CHECK_OK(j[k].rc);
        CHECK(j[k].bitwise);
        gptx_model_destroy(j[k].a);
        gptx_model_destroy(j[k].b);
    }
    printf("comparisons across two contexts: %s\n",
           j[0].rc == GPTX_OK && j[1].rc == GPTX_OK ? "all done" : "FAILED");
    gptx_context_destroy(c1);
    gptx_context_destroy(c2);
    return 0;
}

int main(void) {
    pthread_barrier_init(&start, NULL, 2);
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    int rc = test_one_model_two_threads(ctx);
    if (!rc) rc = test_generator_and_forward(ctx);
    gptx_context_destroy(ctx);
    if (!rc) rc = test_two_models();
    if (!rc) rc = test_compare_across_contexts();
    pthread_barrier_destroy(&start);
    return rc ? rc : check_exit("test_threads");
}
