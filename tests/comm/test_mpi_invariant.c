/* Rank-invariant gradients across ranks (gptx_context_options.rank_invariant),
 * under mpirun -np 2 and 3. Eight micro-batches ("units") make a step; rank r
 * runs units comm_shard(8, W, r) (uneven: 3, 3, 2 with three ranks) with
 * loss_scale 1/8 each but the last, 2^45/8 (the last rank's gradients are
 * 2^45 times the others': their windows differ, and every other rank must
 * raise its own to the last rank's before the bins are added), then
 * gptx_comm_average_gradients. Every rank also
 * runs all eight itself on a second model: the reference one process gives.
 *   - the averaged gradients equal the reference bit for bit on every rank;
 *   - a ZeRO-1 step (gptx_optimizer_step_sharded) gives the parameters and
 *     the norm of a plain step on the reference, bit for bit;
 *   - two steps more in the same way stay bitwise equal;
 *   - the same with rank_invariant off differs from one process (printed,
 *     not required: it is why the option exists). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <string.h>

#include "check.h"
#include "comm_engine.h"
#include "mpi_check.h"
#include "test_util.h"

#define K 8
#define T 8

static int R, W;

static void unit_batch(int k, int32_t *in, int32_t *tg) {
    fill_tokens(in, 2 * T, 50, 300 + (uint32_t)k);
    fill_tokens(tg, 2 * T, 50, 400 + (uint32_t)k);
}

static int make_context(gptx_context **ctx, int rank_invariant) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 1;
    o.rank_invariant = rank_invariant;
    return gptx_context_create(ctx, &o);
}

static int make_model(gptx_model **m, gptx_context *ctx) {
    gptx_model_config c = small_config();
    int rc = gptx_model_create(m, ctx, &c);
    return rc == GPTX_OK ? gptx_model_init_random(*m, 5) : rc;
}

/* units [lo, hi) of step s */
static int units(gptx_model *m, int s, size_t lo, size_t hi) {
    int rc = gptx_model_zero_grad(m);
    for (size_t k = lo; k < hi && rc == GPTX_OK; k++) {
        int32_t in[2 * T], tg[2 * T];
        unit_batch(s * K + (int)k, in, tg);
        float scale = k == K - 1 ? ldexpf(1.0f, 45) / K : 1.0f / K;
        rc = gptx_model_forward_backward(m, in, tg, 2, T, scale, NULL);
    }
    return rc;
}

static int same(gptx_model *a, gptx_model *b, int gradients, const char *what) {
    float *x = model_values(a, gradients), *y = model_values(b, gradients);
    size_t n = gptx_model_num_parameters(a), bad = 0;
    for (size_t i = 0; x && y && i < n; i++) bad += memcmp(&x[i], &y[i], 4) != 0;
    if (R == 0 || bad)
        printf("  rank %d: %-48s %s (%zu of %zu differ)\n", R, what, bad ? "DIFFER" : "bitwise",
               bad, n);
    free(x);
    free(y);
    return x && y && bad == 0;
}

static int test_mode(gptx_comm *comm, int rank_invariant) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_context(&ctx, rank_invariant));
    (void)comm;
    gptx_comm *c = NULL; /* a communicator on this context */
    REQUIRE_OK(gptx_comm_create(&c, ctx, NULL));
    gptx_model *m = NULL, *ref = NULL;
    REQUIRE_OK(make_model(&m, ctx));
    REQUIRE_OK(make_model(&ref, ctx));
    size_t lo, hi;
    comm_shard(K, W, R, &lo, &hi);
    REQUIRE_OK(units(m, 0, lo, hi));
    REQUIRE_OK(gptx_comm_average_gradients(c, m, (int64_t)(hi - lo) * 2 * T));
    REQUIRE_OK(units(ref, 0, 0, K));
    int ok = same(m, ref, 1, rank_invariant ? "averaged gradients vs one process"
                                           : "(option off) averaged vs one process");
    if (rank_invariant) {
        CHECK(ok);
        gptx_adamw_options ao;
        gptx_adamw_options_init(&ao);
        gptx_optimizer *zo = NULL, *po = NULL;
        REQUIRE_OK(gptx_optimizer_create_sharded(&zo, m, &ao, c));
        REQUIRE_OK(gptx_optimizer_create(&po, ref, &ao));
        for (int s = 0; s < 3; s++) { /* the sharded step reduces the gradients itself */
            REQUIRE_OK(units(m, s, lo, hi));
            REQUIRE_OK(units(ref, s, 0, K));
            float nz = -1, np = -2;
            CHECK_OK(gptx_optimizer_step_sharded(zo, m, (int64_t)(hi - lo) * 2 * T, &nz));
            CHECK_OK(gptx_optimizer_step(po, ref, &np));
            CHECK(nz == np);
            CHECK(same(m, ref, 0, "ZeRO-1 step's parameters vs one process"));
        }
        gptx_optimizer_destroy(zo);
        gptx_optimizer_destroy(po);
    }
    gptx_comm_destroy(c);
    gptx_model_destroy(m);
    gptx_model_destroy(ref);
    gptx_context_destroy(ctx);
    return 0;
}

int main(void) {
    gptx_context *ctx = NULL;
    gptx_comm *comm = NULL;
    if (mpi_check_start(&ctx, &comm, &R, &W, 1, 64)) return 1;
    int rc = test_mode(comm, 0);
    if (!rc) rc = test_mode(comm, 1);
    return mpi_check_exit(comm, ctx, rc, "test_mpi_invariant", R, W);
}
