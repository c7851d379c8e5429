/* Data parallelism against a single process, run under mpirun -np 2 and 3.
 * Every rank also computes the single-process reference itself (the data
 * is deterministic), so each rank checks its own numbers:
 *   - host collectives (sum/max/min, broadcast, barrier) give exact results;
 *   - training: W ranks on B/W rows each of the same global batch follow the
 *     single process on all B rows (losses and parameters within fp32
 *     tolerance) and keep bitwise identical parameters across ranks;
 *   - unequal shards (ignored targets, a rank with none) give the
 *     single-process gradient, which an unweighted mean would not;
 *   - the loader's rank shares are disjoint and together form the
 *     single-process batches;
 *   - validation spread over ranks (dp_evaluate) equals the single process.
 * Other modes:
 *   test_mpi_train --die kill|hang|other TIMEOUT  rank 1 dies (SIGKILL), hangs
 *       or calls another collective after 2 steps; the other ranks must fail
 *       (exit 3) instead of waiting;
 *   test_mpi_train (no launcher)  the explicit MPI engine as a singleton. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "mpi_check.h"
#include "errors.h"
#include "test_util.h"
#include "train/train_dp.h"

static gptx_comm *comm;
static int R, W;

#define B_GLOBAL 6 /* divisible by 2 and 3 */
#define T_SEQ 8

static double max_abs_diff(const float *a, const float *b, size_t n, double *max_ref) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)a[i]));
    }
    if (max_ref) *max_ref = m;
    return d;
}

/* The global batch of step s: B_GLOBAL rows of T_SEQ tokens. */
static void batch(int s, int vocab, int32_t *in, int32_t *tg) {
    fill_tokens(in, B_GLOBAL * T_SEQ, vocab, 100u + (uint32_t)s);
    fill_tokens(tg, B_GLOBAL * T_SEQ, vocab, 200u + (uint32_t)s);
}

static void test_host_collectives(void) {
    double d[3] = {R + 0.25, -R, 1e-3 * R};
    CHECK_OK(gptx_comm_allreduce_f64(comm, d, 3, GPTX_COMM_SUM));
    double want = 0.25 * W + W * (W - 1) / 2.0;
    CHECK(fabs(d[0] - want) < 1e-12 && d[1] == -(W * (W - 1) / 2.0));
    int64_t mx[2] = {R * 10, -R}, mn[2] = {R * 10, -R};
    CHECK_OK(gptx_comm_allreduce_i64(comm, mx, 2, GPTX_COMM_MAX));
    CHECK_OK(gptx_comm_allreduce_i64(comm, mn, 2, GPTX_COMM_MIN));
    CHECK(mx[0] == (W - 1) * 10 && mx[1] == 0 && mn[0] == 0 && mn[1] == -(W - 1));
    char msg[32];
    snprintf(msg, sizeof msg, "from rank %d", R);
    CHECK_OK(gptx_comm_broadcast(comm, msg, sizeof msg, W - 1));
    char want_msg[32];
    snprintf(want_msg, sizeof want_msg, "from rank %d", W - 1);
    CHECK(strcmp(msg, want_msg) == 0);
    CHECK_OK(gptx_comm_barrier(comm));
    /* the sum of doubles has the same bits on every rank */
    double x = 0.1 * (R + 1) + 1e-17 * R;
    CHECK_OK(gptx_comm_allreduce_f64(comm, &x, 1, GPTX_COMM_SUM));
    int64_t h[2] = {fnv1a(&x, sizeof x), -fnv1a(&x, sizeof x)};
    CHECK_OK(gptx_comm_allreduce_i64(comm, h, 2, GPTX_COMM_MAX));
    CHECK(h[0] == -h[1]);
}

/* One step of the reference (all rows) or of this rank (its rows). */
static int train_step(gptx_model *m, gptx_optimizer *opt, const int32_t *in, const int32_t *tg,
                      int rows, int distributed, double *loss, float *norm) {
    float l = 0;
    int64_t n = 0;
    GPTX_TRY(gptx_model_zero_grad(m));
    GPTX_TRY(gptx_model_forward(m, in, tg, rows, T_SEQ, &l));
    GPTX_TRY(gptx_model_num_loss_tokens(m, &n));
    GPTX_TRY(gptx_model_backward(m, 1.0f));
    *loss = l;
    if (distributed) {
        GPTX_TRY(gptx_comm_average_gradients(comm, m, n));
        double t[2] = {(double)l * (double)n, (double)n};
        GPTX_TRY(gptx_comm_allreduce_f64(comm, t, 2, GPTX_COMM_SUM));
        *loss = t[0] / t[1];
    }
    return gptx_optimizer_step(opt, m, norm);
}

static int test_training(gptx_context *ctx) {
    gptx_model_config cfg = small_config();
    gptx_model *ref = NULL, *dm = NULL;
    gptx_optimizer *oref = NULL, *odm = NULL;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-2f; /* big enough that 5 steps move every parameter */
    REQUIRE_OK(gptx_model_create(&ref, ctx, &cfg));
    REQUIRE_OK(gptx_model_create(&dm, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(ref, 7));
    REQUIRE_OK(gptx_model_init_random(dm, 7));
    REQUIRE_OK(gptx_optimizer_create(&oref, ref, &ao));
    REQUIRE_OK(gptx_optimizer_create(&odm, dm, &ao));
    const int rows = B_GLOBAL / W;
    int32_t in[B_GLOBAL * T_SEQ], tg[B_GLOBAL * T_SEQ];
    double worst_loss = 0, worst_norm = 0;
    for (int s = 0; s < 5; s++) {
        batch(s, cfg.vocab_size, in, tg);
        double lr_ = 0, ld = 0;
        float nr = 0, nd = 0;
        REQUIRE_OK(train_step(ref, oref, in, tg, B_GLOBAL, 0, &lr_, &nr));
        REQUIRE_OK(train_step(dm, odm, in + R * rows * T_SEQ, tg + R * rows * T_SEQ, rows, 1, &ld,
                              &nd));
        worst_loss = fmax(worst_loss, fabs(lr_ - ld) / fabs(lr_));
        worst_norm = fmax(worst_norm, fabs((double)nr - nd) / nr);
    }
    size_t n = gptx_model_num_parameters(ref);
    float *pr = model_values(ref, 0), *pd = model_values(dm, 0), *p0 = NULL;
    double max_ref = 0, diff = pr && pd ? max_abs_diff(pr, pd, n, &max_ref) : INFINITY;
    /* the reference really moved: the comparison is not between two copies of the start */
    gptx_model *start = NULL;
    REQUIRE_OK(gptx_model_create(&start, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(start, 7));
    p0 = model_values(start, 0);
    double moved = pr && p0 ? max_abs_diff(pr, p0, n, NULL) : 0;
    if (R == 0)
        printf("training, %d ranks: max relative loss difference %.2e, grad norm %.2e, max "
               "parameter difference %.2e (largest parameter %.3f, moved up to %.3f)\n",
               W, worst_loss, worst_norm, diff, max_ref, moved);
    CHECK(worst_loss < 2e-6);
    CHECK(worst_norm < 1e-5);
    /* AdamW divides by sqrt(v): where a gradient is near 0 the update is
     * lr-sized whatever its rounding, so parameters get the bound 1% of lr */
    CHECK(diff < 1e-2 * ao.lr);
    CHECK(moved > 1e-2);
    /* bitwise identical parameters on every rank */
    int64_t h[2] = {pd ? fnv1a(pd, n * sizeof *pd) : 0, 0};
    h[1] = -h[0];
    CHECK_OK(gptx_comm_allreduce_i64(comm, h, 2, GPTX_COMM_MAX));
    CHECK(h[0] == -h[1]);
    free(pr);
    free(pd);
    free(p0);
    gptx_model_destroy(start);
    gptx_optimizer_destroy(oref);
    gptx_optimizer_destroy(odm);
    gptx_model_destroy(ref);
    gptx_model_destroy(dm);
    return 0;
}

/* Targets of global row i at position t kept or ignored: rank r's rows keep
 * a different share (all / half / a quarter); with last_empty the last rank
 * keeps none. */
static void ignore_pattern(int32_t *tg, int last_empty) {
    const int rows = B_GLOBAL / W;
    for (int i = 0; i < B_GLOBAL; i++) {
        int r = i / rows;
        for (int t = 0; t < T_SEQ; t++) {
            int drop = r == 1 ? t % 2 == 0 : r == 2 ? t < 6 : 0;
            if (last_empty && r == W - 1) drop = 1;
            if (drop) tg[i * T_SEQ + t] = GPTX_IGNORE_INDEX;
        }
    }
}

static int test_unequal_shards(gptx_context *ctx, int last_empty) {
    gptx_model_config cfg = small_config();
    gptx_model *m = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(m, 11));
    int32_t in[B_GLOBAL * T_SEQ], tg[B_GLOBAL * T_SEQ];
    batch(9, cfg.vocab_size, in, tg);
    ignore_pattern(tg, last_empty);
    const int rows = B_GLOBAL / W;
    size_t n = gptx_model_num_parameters(m);
    float l = 0;
    /* single process: all rows */
    REQUIRE_OK(gptx_model_zero_grad(m));
    REQUIRE_OK(gptx_model_forward(m, in, tg, B_GLOBAL, T_SEQ, &l));
    REQUIRE_OK(gptx_model_backward(m, 1.0f));
    float *want = model_values(m, 1);
    /* this rank's rows, then the token-weighted average */
    int64_t local = 0;
    REQUIRE_OK(gptx_model_zero_grad(m));
    const size_t at = (size_t)R * rows * T_SEQ;
    REQUIRE_OK(gptx_model_forward(m, in + at, tg + at, rows, T_SEQ, &l));
    REQUIRE_OK(gptx_model_num_loss_tokens(m, &local));
    REQUIRE_OK(gptx_model_backward(m, 1.0f));
    float *mine = model_values(m, 1);
    REQUIRE_OK(gptx_comm_average_gradients(comm, m, local));
    float *got = model_values(m, 1);
    if (!want || !mine || !got) return 1;
    /* what an unweighted mean over ranks would give */
    double *naive = malloc(n * sizeof *naive);
    float *naive_f = malloc(n * sizeof *naive_f);
    if (!naive || !naive_f) return 1;
    for (size_t i = 0; i < n; i++) naive[i] = mine[i] / (double)W;
    CHECK_OK(gptx_comm_allreduce_f64(comm, naive, n, GPTX_COMM_SUM));
    for (size_t i = 0; i < n; i++) naive_f[i] = (float)naive[i];
    double gmax = 0, diff = max_abs_diff(want, got, n, &gmax);
    double naive_diff = max_abs_diff(want, naive_f, n, NULL);
    if (R == 0)
        printf("unequal shards%s, %d ranks: max gradient difference %.2e (largest %.3e); an "
               "unweighted mean would be off by %.2e\n",
               last_empty ? " (last rank without targets)" : "", W, diff, gmax, naive_diff);
    CHECK(diff <= 1e-5 * gmax);
    CHECK(naive_diff > 1e-2 * gmax);
    int64_t h[2] = {fnv1a(got, n * sizeof *got), 0};
    h[1] = -h[0];
    CHECK_OK(gptx_comm_allreduce_i64(comm, h, 2, GPTX_COMM_MAX));
    CHECK(h[0] == -h[1]);
    free(want);
    free(mine);
    free(got);
    free(naive);
    free(naive_f);
    gptx_model_destroy(m);
    return 0;
}

/* Windows are identified by their first token: the data is 0, 1, 2, ... */
static int test_loader_shares(void) {
    enum { T = 4, NW = 37, B = 2, EPOCHS = 2 };
    const size_t ntok = (size_t)T * NW + 1;
    int32_t *tokens = malloc(ntok * sizeof *tokens);
    if (!tokens) return 1;
    for (size_t i = 0; i < ntok; i++) tokens[i] = (int32_t)i;
    gptx_dataloader_options o;
    gptx_dataloader_options_init(&o);
    o.batch_size = B;
    o.seq_len = T;
    o.shuffle = 1;
    o.seed = 3;
    o.rank = R;
    o.world_size = W;
    gptx_dataloader *dl = NULL, *single = NULL;
    REQUIRE_OK(gptx_dataloader_create_from_tokens(&dl, NULL, tokens, ntok, &o));
    o.rank = 0;
    o.world_size = 1;
    o.batch_size = B * W; /* the global batch */
    REQUIRE_OK(gptx_dataloader_create_from_tokens(&single, NULL, tokens, ntok, &o));
    gptx_dataloader_info info, sinfo;
    gptx_dataloader_info_init(&info);
    gptx_dataloader_info_init(&sinfo);
    REQUIRE_OK(gptx_dataloader_info_get(dl, &info));
    REQUIRE_OK(gptx_dataloader_info_get(single, &sinfo));
    const int64_t nb = info.batches_per_epoch;
    int64_t bb[2] = {nb, -nb};
    CHECK_OK(gptx_comm_allreduce_i64(comm, bb, 2, GPTX_COMM_MAX));
    CHECK(bb[0] == -bb[1]);         /* every rank runs the same number of steps */
    CHECK(nb == sinfo.batches_per_epoch);
    /* seen[e][w]: how often window w was handed out in epoch e, over all ranks;
     * ids[e][b][r * B + j]: window of row j of rank r's batch b */
    int64_t *seen = calloc((size_t)EPOCHS * NW, sizeof *seen);
    int64_t *ids = calloc((size_t)EPOCHS * nb * W * B, sizeof *ids);
    if (!seen || !ids) return 1;
    for (int e = 0; e < EPOCHS; e++)
        for (int64_t b = 0; b < nb; b++) {
            const int32_t *in, *tg;
            int rows;
            int64_t ep;
            REQUIRE_OK(gptx_dataloader_next(dl, &in, &tg, &rows, &ep));
            CHECK(ep == e && rows == B);
            for (int j = 0; j < B; j++) {
                int w = in[j * T] / T;
                seen[e * NW + w]++;
                ids[((size_t)e * nb + (size_t)b) * W * B + (size_t)R * B + j] = w + 1;
            }
        }
    CHECK_OK(gptx_comm_allreduce_i64(comm, seen, (size_t)EPOCHS * NW, GPTX_COMM_SUM));
    CHECK_OK(gptx_comm_allreduce_i64(comm, ids, (size_t)EPOCHS * nb * W * B, GPTX_COMM_SUM));
    int dup = 0;
    for (int e = 0; e < EPOCHS; e++) {
        int64_t total = 0;
        for (int w = 0; w < NW; w++) {
            dup += seen[e * NW + w] > 1;
            total += seen[e * NW + w];
        }
        CHECK(total == nb * B * W);
    }
    CHECK(dup == 0);
    /* the ranks' batch b together are the single process's batch b of B*W rows */
    int mismatched = 0;
    for (int e = 0; e < EPOCHS; e++)
        for (int64_t b = 0; b < nb; b++) {
            const int32_t *in, *tg;
            int rows;
            REQUIRE_OK(gptx_dataloader_next(single, &in, &tg, &rows, NULL));
            const int64_t *got = ids + ((size_t)e * nb + (size_t)b) * W * B;
            for (int j = 0; j < rows; j++) {
                int w = in[j * T] / T, found = 0;
                for (int k = 0; k < W * B; k++) found |= got[k] == w + 1;
                mismatched += !found;
            }
        }
    CHECK(mismatched == 0);
    if (R == 0)
        printf("loader, %d ranks: %lld batches/epoch per rank, %d duplicate windows, %d windows "
               "outside the single-process batches\n",
               W, (long long)nb, dup, mismatched);
    free(seen);
    free(ids);
    free(tokens);
    gptx_dataloader_destroy(dl);
    gptx_dataloader_destroy(single);
    return 0;
}

static int test_validation(gptx_context *ctx) {
    enum { NW = 11, B = 3 };
    gptx_model_config cfg = small_config();
    const size_t ntok = (size_t)T_SEQ * NW + 1;
    int32_t tokens[T_SEQ * NW + 1];
    fill_tokens(tokens, ntok, cfg.vocab_size, 77);
    gptx_dataloader_options o;
    gptx_dataloader_options_init(&o);
    o.batch_size = B;
    o.seq_len = T_SEQ;
    o.drop_last = 0; /* batches of 3, 3, 3, 2 windows */
    gptx_dataloader *val = NULL;
    REQUIRE_OK(gptx_dataloader_create_from_tokens(&val, ctx, tokens, ntok, &o));
    gptx_model *m = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(m, 13));
    /* single process: every batch, token-weighted */
    double sum = 0;
    int64_t count = 0;
    for (int b = 0; b < 4; b++) {
        const int32_t *in, *tg;
        int rows;
        float l;
        int64_t c;
        REQUIRE_OK(gptx_dataloader_next(val, &in, &tg, &rows, NULL));
        REQUIRE_OK(gptx_model_forward(m, in, tg, rows, T_SEQ, &l));
        REQUIRE_OK(gptx_model_num_loss_tokens(m, &c));
        sum += (double)l * (double)c;
        count += c;
    }
    double want = sum / (double)count, got = 0, part = 0;
    int64_t got_tokens = 0, part_tokens = 0;
    REQUIRE_OK(dp_evaluate(comm, m, val, 100, T_SEQ, &got, &got_tokens)); /* all 4 batches */
    /* and a limit of 3 batches: the same first 3 batches as one process */
    REQUIRE_OK(dp_evaluate(comm, m, val, 3, T_SEQ, &part, &part_tokens));
    if (R == 0)
        printf("validation, %d ranks: %.9f over %lld tokens, single process %.9f over %lld\n", W,
               got, (long long)got_tokens, want, (long long)count);
    CHECK(got_tokens == count && fabs(got - want) <= 1e-6 * want);
    CHECK(part_tokens == 3 * B * T_SEQ);
    gptx_model_destroy(m);
    gptx_dataloader_destroy(val);
    return 0;
}

/* Rank 1 dies, hangs or calls another collective after 2 steps; the others
 * must not wait forever. */
static int die_mode(gptx_context *ctx, const char *how) {
    gptx_model_config cfg = small_config();
    gptx_model *m = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(m, 1));
    int32_t in[B_GLOBAL * T_SEQ], tg[B_GLOBAL * T_SEQ];
    for (int s = 0; s < 100000; s++) {
        int other = s == 2 && R == 1 && !strcmp(how, "other");
        if (s == 2 && R == 1 && !other) {
            fprintf(stderr, "rank 1: %s now\n", how);
            if (!strcmp(how, "kill")) raise(SIGKILL);
            for (;;) pause();
        }
        batch(s, cfg.vocab_size, in, tg);
        float l;
        int rc = gptx_model_forward(m, in, tg, 1, T_SEQ, &l);
        if (rc == GPTX_OK) rc = gptx_model_backward(m, 1.0f);
        /* "other": rank 1 waits in a barrier while the others average: a
         * different collective, every rank alive and polling */
        if (rc == GPTX_OK)
            rc = other ? gptx_comm_barrier(comm) : gptx_comm_average_gradients(comm, m, T_SEQ);
        if (rc != GPTX_OK) {
            fprintf(stderr, "rank %d: step %d failed as expected: %s (%s)\n", R, s,
                    gptx_last_error(), gptx_status_name(rc));
            /* the communicator is unusable now */
            CHECK_STATUS(gptx_comm_barrier(comm), GPTX_ERR_STATE);
            gptx_model_destroy(m);
            return 3;
        }
    }
    gptx_model_destroy(m);
    return 0; /* nobody died: the test harness treats exit 0 as a failure */
}

/* Started without mpirun: the explicit MPI engine as a singleton. */
static int singleton_mode(gptx_context *ctx) {
    gptx_comm_options o;
    gptx_comm_options_init(&o);
    o.engine = GPTX_COMM_MPI;
    REQUIRE_OK(gptx_comm_create(&comm, ctx, &o));
    CHECK(strcmp(gptx_comm_engine_name(comm), "mpi") == 0);
    CHECK(gptx_comm_world_size(comm) == 1 && gptx_comm_rank(comm) == 0);
    CHECK(gptx_comm_local_world_size(comm) == 1);
    double d = 2.5;
    CHECK_OK(gptx_comm_allreduce_f64(comm, &d, 1, GPTX_COMM_SUM));
    CHECK(d == 2.5);
    CHECK_OK(gptx_comm_barrier(comm));
    gptx_comm_destroy(comm); /* finalizes MPI: gptx initialized it */
    comm = NULL;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_STATE);
    CHECK(strstr(gptx_last_error(), "finalized") != NULL);
    o.engine = GPTX_COMM_AUTO; /* the single engine needs no MPI */
    REQUIRE_OK(gptx_comm_create(&comm, ctx, &o));
    CHECK(strcmp(gptx_comm_engine_name(comm), "single") == 0);
    gptx_comm_destroy(comm);
    return check_exit("test_mpi_train (singleton)");
}

int main(int argc, char **argv) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    gptx_comm_launch_info li;
    gptx_comm_launch_info_init(&li);
    REQUIRE_OK(gptx_comm_detect_launch(&li));
    if (li.launcher == GPTX_LAUNCHER_NONE) {
        int rc = singleton_mode(ctx);
        gptx_context_destroy(ctx);
        return rc;
    }
    gptx_comm_options o;
    gptx_comm_options_init(&o);
    if (argc >= 4 && !strcmp(argv[1], "--die")) o.timeout_seconds = atof(argv[3]);
    REQUIRE_OK(gptx_comm_create(&comm, ctx, &o));
    R = gptx_comm_rank(comm);
    W = gptx_comm_world_size(comm);
    if (argc >= 4 && !strcmp(argv[1], "--die")) {
        int rc = die_mode(ctx, argv[2]);
        gptx_comm_destroy(comm);
        gptx_context_destroy(ctx);
        return rc;
    }
    CHECK(strcmp(gptx_comm_engine_name(comm), "mpi") == 0);
    CHECK(R == li.rank && W == li.world_size);
    CHECK(gptx_comm_local_rank(comm) >= 0 && gptx_comm_local_world_size(comm) >= 1);
    if (W != 2 && W != 3) {
        fprintf(stderr, "run with mpirun -np 2 or -np 3 (world size is %d)\n", W);
        return 1;
    }
    test_host_collectives();
    int rc = test_training(ctx);
    if (!rc) rc = test_unequal_shards(ctx, 0);
    if (!rc) rc = test_unequal_shards(ctx, 1);
    if (!rc) rc = test_loader_shares();
    if (!rc) rc = test_validation(ctx);
    return mpi_check_exit(comm, ctx, rc, "test_mpi_train", R, W);
}
