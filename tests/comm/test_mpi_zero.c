/* ZeRO-1 and overlapped gradient buckets, under mpirun -np 2 and 3. Every
 * rank also trains the single-process reference (all rows) itself. The model
 * has width 25 and context 17, so nparams (17725) is divisible by neither 2
 * nor 3 (uneven shards). Checks:
 *   - ZeRO-1 (gptx_optimizer_step_sharded) vs the unsharded data-parallel
 *     path (average + step) and vs one process, clipping on and off, with a
 *     step of unequal token counts: without clipping bitwise equal to the
 *     unsharded path, with it within fp32 tolerance; parameters bitwise equal
 *     across ranks; moments only for this rank's shard (shard sizes, context
 *     memory);
 *   - overlapped buckets (gptx_comm_backward) with 2 accumulation micro-steps,
 *     bucket sizes 1 byte, about one layer and 1 GiB: gradients and parameters vs
 *     the non-overlapped path, parameters bitwise equal across ranks;
 *   - ZeRO-1 checkpoint: save after 2 steps (collective), load into fresh
 *     objects, 2 more steps == 4 uninterrupted steps (bitwise); the same file
 *     resumes an unsharded optimizer too;
 *   - bad input: each misuse has its own status. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpi_check.h"
#include "errors.h"
#include "test_util.h"

static gptx_comm *comm;
static int R, W;

#define B_GLOBAL 12 /* divisible by 2 and 3; 2 micro-batches per rank */
#define T_SEQ 8
#define LR 1e-2f

static gptx_model_config odd_config(void) {
    gptx_model_config c = small_config();
    c.n_embd = 25;
    c.n_head = 5;
    c.context_length = 17;
    return c;
}

/* 1 when every rank holds the same bytes. */
static int same_on_all_ranks(const float *v, size_t n) {
    int64_t h[2] = {v ? fnv1a(v, n * sizeof *v) : 0, 0};
    h[1] = -h[0];
    if (gptx_comm_allreduce_i64(comm, h, 2, GPTX_COMM_MAX) != GPTX_OK) return 0;
    return h[0] == -h[1];
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

static void batch(int s, int vocab, int32_t *in, int32_t *tg) {
    fill_tokens(in, B_GLOBAL * T_SEQ, vocab, 300u + (uint32_t)s);
    fill_tokens(tg, B_GLOBAL * T_SEQ, vocab, 400u + (uint32_t)s);
    if (s == 2) /* unequal token counts: rank 1's rows (of W) drop half their targets */
        for (int i = 0; i < B_GLOBAL; i++)
            if (i / (B_GLOBAL / W) == 1)
                for (int t = 0; t < T_SEQ; t += 2) tg[i * T_SEQ + t] = GPTX_IGNORE_INDEX;
}

enum { REF, PLAIN, ZERO, OVERLAP };

typedef struct run {
    gptx_model *m;
    gptx_optimizer *opt;
} run;

static int run_create(run *r, gptx_context *ctx, int mode, const gptx_adamw_options *ao) {
    gptx_model_config cfg = odd_config();
    GPTX_TRY(gptx_model_create(&r->m, ctx, &cfg));
    GPTX_TRY(gptx_model_init_random(r->m, 11));
    return mode == ZERO ? gptx_optimizer_create_sharded(&r->opt, r->m, ao, comm)
                        : gptx_optimizer_create(&r->opt, r->m, ao);
}

static void run_destroy(run *r) {
    gptx_optimizer_destroy(r->opt);
    gptx_model_destroy(r->m);
    memset(r, 0, sizeof *r);
}

/* One optimizer step of step s: REF on all rows, the others on this rank's
 * rows in 2 micro-batches. *loss: the global mean. With grads, the averaged
 * gradient is copied out before the update (PLAIN and OVERLAP only). */
static int step(run *r, int mode, int s, size_t bucket_bytes, double *loss, float **grads) {
    int32_t in[B_GLOBAL * T_SEQ], tg[B_GLOBAL * T_SEQ];
    batch(s, odd_config().vocab_size, in, tg);
    int rows = mode == REF ? B_GLOBAL : B_GLOBAL / W, first = mode == REF ? 0 : R * rows;
    int K = mode == REF ? 1 : 2, mrows = rows / K;
    GPTX_TRY(gptx_model_zero_grad(r->m));
    double lsum = 0;
    int64_t n = 0;
    for (int k = 0; k < K; k++) {
        float l = 0;
        int64_t nk = 0;
        size_t at = (size_t)(first + k * mrows) * T_SEQ;
        GPTX_TRY(gptx_model_forward(r->m, in + at, tg + at, mrows, T_SEQ, &l));
        GPTX_TRY(gptx_model_num_loss_tokens(r->m, &nk));
        lsum += (double)l * (double)nk;
        n += nk;
        /* accumulation: the mean over the step's targets (equal to 1/K when
         * the micro-batches have equal counts; step 2 has, per rank) */
        float scale = 1.0f / (float)K;
        if (mode == OVERLAP && k == K - 1) {
            GPTX_TRY(gptx_comm_backward(comm, r->m, scale, n, bucket_bytes));
        } else {
            GPTX_TRY(gptx_model_backward(r->m, scale));
        }
    }
    double t[2] = {lsum, (double)n};
    if (mode != REF) GPTX_TRY(gptx_comm_allreduce_f64(comm, t, 2, GPTX_COMM_SUM));
    *loss = t[0] / t[1];
    float norm = 0;
    if (mode == ZERO) return gptx_optimizer_step_sharded(r->opt, r->m, n, &norm);
    if (mode == PLAIN) GPTX_TRY(gptx_comm_average_gradients(comm, r->m, n));
    if (grads) *grads = model_values(r->m, 1);
    return gptx_optimizer_step(r->opt, r->m, &norm);
}

static int test_zero(gptx_context *ctx, float clip) {
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = LR;
    ao.grad_clip = clip;
    run ref = {0}, plain = {0}, zero = {0};
    REQUIRE_OK(run_create(&ref, ctx, REF, &ao));
    REQUIRE_OK(run_create(&plain, ctx, PLAIN, &ao));
    gptx_memory_stats before, after;
    gptx_memory_stats_init(&before);
    gptx_memory_stats_init(&after);
    REQUIRE_OK(gptx_context_memory(ctx, &before));
    REQUIRE_OK(run_create(&zero, ctx, ZERO, &ao));
    REQUIRE_OK(gptx_context_memory(ctx, &after));
    size_t np = gptx_model_num_parameters(zero.m), off = 0, cnt = 0;
    CHECK(np % 2 != 0 && np % 3 != 0);
    /* the shards tile the buffer: offsets and sizes add up, sizes differ by <= 1 */
    CHECK_OK(gptx_optimizer_get_shard(zero.opt, &off, &cnt));
    int64_t sh[3] = {(int64_t)cnt, (int64_t)cnt, -(int64_t)cnt};
    CHECK_OK(gptx_comm_allreduce_i64(comm, sh, 1, GPTX_COMM_SUM));
    CHECK_OK(gptx_comm_allreduce_i64(comm, sh + 1, 2, GPTX_COMM_MAX));
    CHECK(sh[0] == (int64_t)np && sh[1] + sh[2] <= 1);
    CHECK(cnt == np / (size_t)W || cnt == np / (size_t)W + 1);
    /* moments: the model's own allocation (activations come later) plus 2 x shard */
    size_t model_bytes = 2 * np * sizeof(float);
    size_t opt_bytes = after.allocated - before.allocated - model_bytes;
    CHECK(opt_bytes == 2 * cnt * sizeof(float));
    size_t poff = 1, pcnt = 0;
    CHECK_OK(gptx_optimizer_get_shard(plain.opt, &poff, &pcnt));
    CHECK(poff == 0 && pcnt == np);

    double worst_ref = 0, worst_plain = 0;
    for (int s = 0; s < 4; s++) {
        double lr_ = 0, lp = 0, lz = 0;
        REQUIRE_OK(step(&ref, REF, s, 0, &lr_, NULL));
        REQUIRE_OK(step(&plain, PLAIN, s, 0, &lp, NULL));
        REQUIRE_OK(step(&zero, ZERO, s, 0, &lz, NULL));
        worst_ref = fmax(worst_ref, fabs(lz - lr_) / lr_);
        worst_plain = fmax(worst_plain, fabs(lz - lp) / lp);
    }
    float *pr = model_values(ref.m, 0), *pp = model_values(plain.m, 0), *pz = model_values(zero.m, 0);
    double d_ref = pr && pz ? max_diff(pr, pz, np) : INFINITY;
    double d_plain = pp && pz ? max_diff(pp, pz, np) : INFINITY;
    if (R == 0)
        printf("zero-1, %d ranks, clip %g: optimizer state %zu of %zu floats per moment (rank 0); "
               "loss vs 1 process %.2e, vs unsharded %.2e; parameters vs 1 process %.2e, vs "
               "unsharded %.2e\n",
               W, (double)clip, cnt, np, worst_ref, worst_plain, d_ref, d_plain);
    CHECK(worst_ref < 2e-6 && worst_plain < 2e-6);
    /* the unsharded path is as far from one process (it is the same bits without
     * clipping); AdamW amplifies rounding where v is small, over 4 steps with
     * accumulation up to ~1.2% of lr at 3 ranks */
    CHECK(d_ref < 5e-2 * LR);
    if (clip == 0.0f) {
        CHECK(d_plain == 0.0); /* same reduce-scatter, elementwise AdamW: the same bits */
    } else {
        CHECK(d_plain < 1e-2 * LR); /* the norm is summed in another order */
    }
    CHECK(same_on_all_ranks(pz, np));
    free(pr);
    free(pp);
    free(pz);
    run_destroy(&ref);
    run_destroy(&plain);
    run_destroy(&zero);
    return 0;
}

static int test_overlap(gptx_context *ctx, size_t bucket_bytes) {
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = LR;
    run plain = {0}, ov = {0};
    REQUIRE_OK(run_create(&plain, ctx, PLAIN, &ao));
    REQUIRE_OK(run_create(&ov, ctx, OVERLAP, &ao));
    size_t np = gptx_model_num_parameters(ov.m);
    double worst_grad = 0, worst_loss = 0, gmax = 0;
    for (int s = 0; s < 3; s++) {
        double lp = 0, lo = 0;
        float *gp = NULL, *go = NULL;
        REQUIRE_OK(step(&plain, PLAIN, s, 0, &lp, &gp));
        REQUIRE_OK(step(&ov, OVERLAP, s, bucket_bytes, &lo, &go));
        worst_loss = fmax(worst_loss, fabs(lp - lo) / lp);
        if (gp && go) {
            worst_grad = fmax(worst_grad, max_diff(gp, go, np));
            for (size_t i = 0; i < np; i++) gmax = fmax(gmax, fabs(gp[i]));
        } else {
            worst_grad = INFINITY;
        }
        CHECK(same_on_all_ranks(go, np));
        free(gp);
        free(go);
    }
    float *pp = model_values(plain.m, 0), *po = model_values(ov.m, 0);
    double d = pp && po ? max_diff(pp, po, np) : INFINITY;
    if (R == 0)
        printf("overlap, %d ranks, buckets of %zu bytes: gradient difference %.2e (largest %.3f), "
               "loss %.2e, parameters %.2e\n",
               W, bucket_bytes, worst_grad, gmax, worst_loss, d);
    CHECK(worst_grad <= 1e-6 * gmax);
    CHECK(worst_loss < 2e-6);
    CHECK(d < 1e-2 * LR);
    CHECK(same_on_all_ranks(po, np));
    free(pp);
    free(po);
    run_destroy(&plain);
    run_destroy(&ov);
    return 0;
}

static int test_checkpoint(gptx_context *ctx, const char *path) {
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = LR;
    ao.grad_clip = 0.0f; /* so the unsharded resume is bitwise too */
    run full = {0}, first = {0}, second = {0}, plain = {0};
    REQUIRE_OK(run_create(&full, ctx, ZERO, &ao));
    REQUIRE_OK(run_create(&first, ctx, ZERO, &ao));
    double l = 0;
    for (int s = 0; s < 4; s++) REQUIRE_OK(step(&full, ZERO, s, 0, &l, NULL));
    for (int s = 0; s < 2; s++) REQUIRE_OK(step(&first, ZERO, s, 0, &l, NULL));
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = first.opt;
    st.lr_schedule_step = 2;
    CHECK_OK(gptx_checkpoint_save(first.m, &st, path)); /* every rank: collective */
    CHECK_OK(gptx_comm_barrier(comm));                  /* rank 0 has written it */
    run_destroy(&first);
    /* fresh objects (different init), sharded and unsharded */
    gptx_adamw_options other = ao;
    other.lr = 1.0f; /* restored from the file */
    REQUIRE_OK(run_create(&second, ctx, ZERO, &other));
    REQUIRE_OK(run_create(&plain, ctx, PLAIN, &other));
    REQUIRE_OK(gptx_model_init_random(second.m, 99));
    for (int k = 0; k < 2; k++) {
        run *r = k ? &plain : &second;
        gptx_train_state ls;
        gptx_train_state_init(&ls);
        ls.optimizer = r->opt;
        CHECK_OK(gptx_checkpoint_load(r->m, &ls, path));
        CHECK(ls.lr_schedule_step == 2);
        int64_t stp = 0;
        CHECK_OK(gptx_optimizer_get_step(r->opt, &stp));
        CHECK(stp == 2);
    }
    for (int s = 2; s < 4; s++) {
        REQUIRE_OK(step(&second, ZERO, s, 0, &l, NULL));
        REQUIRE_OK(step(&plain, PLAIN, s, 0, &l, NULL));
    }
    size_t np = gptx_model_num_parameters(full.m);
    float *pf = model_values(full.m, 0), *ps = model_values(second.m, 0), *pp = model_values(plain.m, 0);
    double ds = pf && ps ? max_diff(pf, ps, np) : INFINITY;
    double dp = pf && pp ? max_diff(pf, pp, np) : INFINITY;
    if (R == 0)
        printf("zero-1 checkpoint, %d ranks: resumed (sharded) vs uninterrupted %.2e, resumed "
               "unsharded %.2e\n",
               W, ds, dp);
    CHECK(ds == 0.0);
    CHECK(dp == 0.0);
    CHECK(same_on_all_ranks(ps, np));
    free(pf);
    free(ps);
    free(pp);
    run_destroy(&full);
    run_destroy(&second);
    run_destroy(&plain);
    return 0;
}

static int test_bad_input(gptx_context *ctx) {
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    run plain = {0}, zero = {0};
    REQUIRE_OK(run_create(&plain, ctx, PLAIN, &ao));
    REQUIRE_OK(run_create(&zero, ctx, ZERO, &ao));
    gptx_context *other = NULL;
    gptx_model *om = NULL;
    gptx_optimizer *o = NULL;
    gptx_model_config cfg = odd_config();
    REQUIRE_OK(make_cpu_context(&other, 1));
    REQUIRE_OK(gptx_model_create(&om, other, &cfg));
    /* a model of another context than the communicator's */
    CHECK_STATUS(gptx_optimizer_create_sharded(&o, om, &ao, comm), GPTX_ERR_MISMATCH);
    CHECK(o == NULL && strstr(gptx_last_error(), "another context"));
    CHECK_STATUS(gptx_optimizer_create_sharded(&o, plain.m, &ao, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_backward(comm, om, 1.0f, 1, 0), GPTX_ERR_MISMATCH);
    /* the wrong step for the optimizer */
    CHECK_STATUS(gptx_optimizer_step(zero.opt, zero.m, NULL), GPTX_ERR_STATE);
    CHECK(strstr(gptx_last_error(), "gptx_optimizer_step_sharded") != NULL);
    CHECK_STATUS(gptx_optimizer_step_sharded(plain.opt, plain.m, 1, NULL), GPTX_ERR_INVALID);
    CHECK(strstr(gptx_last_error(), "not sharded") != NULL);
    CHECK_STATUS(gptx_optimizer_step_sharded(zero.opt, plain.m, 1, NULL), GPTX_ERR_MISMATCH);
    CHECK_STATUS(gptx_optimizer_step_sharded(zero.opt, zero.m, -1, NULL), GPTX_ERR_INVALID);
    /* overlapped backward without a forward pass, and with a bad count */
    CHECK_STATUS(gptx_comm_backward(comm, plain.m, 1.0f, 1, 0), GPTX_ERR_STATE);
    CHECK(strstr(gptx_last_error(), "forward") != NULL);
    CHECK_STATUS(gptx_comm_backward(comm, plain.m, 1.0f, -3, 0), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_optimizer_get_shard(zero.opt, NULL, NULL), GPTX_ERR_NULL);
    /* nothing above communicated: the ranks are still in step */
    CHECK_OK(gptx_comm_barrier(comm));
    gptx_model_destroy(om);
    gptx_context_destroy(other);
    run_destroy(&plain);
    run_destroy(&zero);
    return 0;
}

int main(void) {
    gptx_context *ctx = NULL;
    if (mpi_check_start(&ctx, &comm, &R, &W, 2, 3)) return 1;
    char path[256] = "";
    if (R == 0) {
        char dir[] = "/tmp/gptx_zero_XXXXXX";
        if (mkdtemp(dir)) snprintf(path, sizeof path, "%s/ckpt.safetensors", dir);
    }
    REQUIRE_OK(gptx_comm_broadcast(comm, path, sizeof path, 0));
    int rc = test_zero(ctx, 1.0f);
    if (!rc) rc = test_zero(ctx, 0.0f);
    /* buckets smaller than any region (ln_f: 200 bytes), about one layer (31 KB), larger than
     * the model (71 KB) */
    if (!rc) rc = test_overlap(ctx, 1);
    if (!rc) rc = test_overlap(ctx, 40000);
    if (!rc) rc = test_overlap(ctx, (size_t)1 << 30);
    if (!rc && path[0]) rc = test_checkpoint(ctx, path);
    if (!rc) rc = test_bad_input(ctx);
    if (R == 0 && path[0]) {
        remove(path);
        *strrchr(path, '/') = '\0';
        rmdir(path);
    }
    return mpi_check_exit(comm, ctx, rc, "test_mpi_zero", R, W);
}
