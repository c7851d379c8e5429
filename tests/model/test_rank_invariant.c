/* A rank_invariant context (gptx_context_options.rank_invariant) on one
 * process: gradient accumulation over backward passes that does not depend
 * on their order or their grouping. Six micro-batches ("units", 1 or 2 rows
 * of T 8) on a 2-layer model:
 *   - the units in order, reversed, and in two halves with the gradients
 *     read in between: the same gradient bits;
 *   - that gradient against the exact sum of the units' own gradients
 *     (tests/support/exact_ref.h): within |err| <= 0.5 ulp + K 2^-64 max per
 *     1024-value chunk, and bitwise for nearly all values;
 *   - against the same units in an ordinary context (fp32 +=): the same
 *     gradient up to fp32 rounding, so the option computes the same thing;
 *   - through the one-rank communicator (average, overlapped backward) and a
 *     one-rank ZeRO-1 optimizer: the same gradients and parameters as the
 *     plain step;
 *   - under the bf16 policy too where it is built (its zero_grad folded
 *     into the backward's first writes);
 *   - the option's errors: 2 is GPTX_ERR_INVALID, the CUDA backend
 *     GPTX_ERR_UNSUPPORTED; its memory: 24 bytes per parameter more. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "exact_ref.h"
#include "test_util.h"

#define K 6
#define T 8
#define CHUNK 1024 /* lib/core/exact_bins.h's EXACT_CHUNK: the window's span */

static int rows_of(int k) { return k % 3 == 0 ? 2 : 1; }

static void unit_batch(int k, int32_t *in, int32_t *tg) {
    fill_tokens(in, (size_t)rows_of(k) * T, 50, 100 + (uint32_t)k);
    fill_tokens(tg, (size_t)rows_of(k) * T, 50, 200 + (uint32_t)k);
}

static gptx_context *context(int rank_invariant, int precision) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 2;
    o.precision = precision;
    o.rank_invariant = rank_invariant;
    gptx_context *ctx = NULL;
    if (gptx_context_create(&ctx, &o) != GPTX_OK) {
        fprintf(stderr, "context: %s\n", gptx_last_error());
        check_failures++;
    }
    return ctx;
}

static gptx_model *model(gptx_context *ctx) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK || gptx_model_init_random(m, 11) != GPTX_OK) {
        fprintf(stderr, "model: %s\n", gptx_last_error());
        check_failures++;
    }
    return m;
}

/* forward and backward of units order[0..n), weight 1/K each */
static int run_units(gptx_model *m, const int *order, int n) {
    for (int j = 0; j < n; j++) {
        int32_t in[2 * T], tg[2 * T];
        unit_batch(order[j], in, tg);
        int rc = gptx_model_forward_backward(m, in, tg, rows_of(order[j]), T, 1.0f / K, NULL);
        if (rc != GPTX_OK) return rc;
    }
    return GPTX_OK;
}

static float *grads_after(gptx_model *m, const int *order, int n) {
    if (gptx_model_zero_grad(m) != GPTX_OK || run_units(m, order, n) != GPTX_OK) {
        fprintf(stderr, "units: %s\n", gptx_last_error());
        check_failures++;
        return NULL;
    }
    return model_values(m, 1);
}

static int same(const float *a, const float *b, size_t n, const char *what) {
    size_t bad = 0;
    for (size_t i = 0; a && b && i < n; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
    printf("  %-58s %s\n", what, a && b && !bad ? "bitwise equal" : "DIFFER");
    if (bad) fprintf(stderr, "%s: %zu of %zu differ\n", what, bad, n);
    CHECK(a && b && bad == 0);
    return a && b && !bad;
}

/* The accumulated gradient g against the exact sum of the units' own ones. */
static void check_exact(gptx_model *m, const float *g) {
    size_t n = gptx_model_num_parameters(m), bitwise = 0;
    float *unit[K];
    for (int k = 0; k < K; k++) unit[k] = grads_after(m, &k, 1);
    double worst = 0;
    for (size_t i = 0; g && i < n; i++) {
        size_t c0 = i / CHUNK * CHUNK, c1 = c0 + CHUNK < n ? c0 + CHUNK : n;
        double mx = 0;
        for (int k = 0; k < K; k++)
            for (size_t j = c0; unit[k] && j < c1; j++) mx = fmax(mx, fabs((double)unit[k][j]));
        wide w = {{0}};
        for (int k = 0; k < K; k++) wide_add(&w, unit[k] ? unit[k][i] : NAN);
        float ref = wide_round(w);
        double ulp = (double)nextafterf(fabsf(g[i]), INFINITY) - fabs((double)g[i]);
        double err = fabs((double)g[i] - (double)ref);
        worst = fmax(worst, err / (ulp + K * ldexp(mx, -64)));
        bitwise += memcmp(&g[i], &ref, 4) == 0;
    }
    printf("  exact sum of the 6 units' gradients: %zu of %zu bitwise, worst error / bound "
           "%.3g\n", bitwise, n, worst);
    CHECK(g && worst <= 1.0 && bitwise * 100 >= n * 99);
    for (int k = 0; k < K; k++) free(unit[k]);
}

/* Against fp32 accumulation of the same units: the same gradient. */
static void check_vs_plain(const float *g, int precision) {
    gptx_context *ctx = context(0, precision);
    gptx_model *m = ctx ? model(ctx) : NULL;
    int order[K] = {0, 1, 2, 3, 4, 5};
    float *p = m ? grads_after(m, order, K) : NULL;
    size_t n = m ? gptx_model_num_parameters(m) : 0;
    double worst = 0, scale = 0;
    for (size_t i = 0; p && g && i < n; i++) scale = fmax(scale, fabs((double)p[i]));
    for (size_t i = 0; p && g && i < n; i++) worst = fmax(worst, fabs((double)p[i] - g[i]));
    printf("  vs fp32 accumulation: largest difference %.3g (largest gradient %.3g)\n", worst,
           scale);
    CHECK(p && g && worst <= 1e-6 * scale);
    free(p);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

/* The one-rank communicator and ZeRO-1 on the exact gradients. */
static int check_comm(gptx_context *ctx, const float *g) {
    gptx_model *m = model(ctx), *r = model(ctx);
    gptx_comm *comm = NULL;
    REQUIRE_OK(gptx_comm_create(&comm, ctx, NULL));
    int order[K] = {0, 1, 2, 3, 4, 5};
    REQUIRE_OK(gptx_model_zero_grad(m));
    REQUIRE_OK(run_units(m, order, K));
    CHECK_OK(gptx_comm_average_gradients(comm, m, 7));
    float *a = model_values(m, 1);
    same(a, g, gptx_model_num_parameters(m), "one-rank average vs accumulated");
    /* the overlapped backward, for the last unit */
    int32_t in[2 * T], tg[2 * T];
    REQUIRE_OK(gptx_model_zero_grad(m));
    REQUIRE_OK(run_units(m, order, K - 1));
    unit_batch(K - 1, in, tg);
    REQUIRE_OK(gptx_model_forward(m, in, tg, rows_of(K - 1), T, NULL));
    CHECK_OK(gptx_comm_backward(comm, m, 1.0f / K, 7, 64));
    float *b = model_values(m, 1);
    same(b, g, gptx_model_num_parameters(m), "one-rank overlapped backward vs accumulated");
    /* ZeRO-1 with one rank vs the plain optimizer */
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    gptx_optimizer *zo = NULL, *po = NULL;
    REQUIRE_OK(gptx_optimizer_create_sharded(&zo, m, &ao, comm));
    REQUIRE_OK(gptx_optimizer_create(&po, r, &ao));
    REQUIRE_OK(gptx_model_zero_grad(r));
    REQUIRE_OK(run_units(r, order, K));
    float nz = 0, np = 0;
    CHECK_OK(gptx_optimizer_step_sharded(zo, m, 7, &nz));
    CHECK_OK(gptx_optimizer_step(po, r, &np));
    float *pz = model_values(m, 0), *pp = model_values(r, 0);
    same(pz, pp, gptx_model_num_parameters(m), "one-rank ZeRO-1 step vs plain step");
    CHECK(nz == np);
    free(a);
    free(b);
    free(pz);
    free(pp);
    gptx_optimizer_destroy(zo);
    gptx_optimizer_destroy(po);
    gptx_comm_destroy(comm);
    gptx_model_destroy(m);
    gptx_model_destroy(r);
    return 0;
}

static void check_policy(int precision, const char *name) {
    printf("precision %s\n", name);
    gptx_context *ctx = context(1, precision);
    gptx_model *m = ctx ? model(ctx) : NULL;
    if (!m) return;
    int order[K] = {0, 1, 2, 3, 4, 5}, rev[K] = {5, 4, 3, 2, 1, 0}, a[3] = {0, 1, 2},
        b[3] = {3, 4, 5};
    size_t n = gptx_model_num_parameters(m);
    float *g = grads_after(m, order, K), *h = grads_after(m, rev, K);
    same(h, g, n, "reversed vs in order");
    float *half = grads_after(m, a, 3); /* read between the halves (materialised) */
    CHECK_OK(run_units(m, b, 3));
    float *s = model_values(m, 1);
    same(s, g, n, "two halves, read in between, vs in order");
    if (precision == GPTX_PRECISION_FP32) {
        check_exact(m, g);
        check_comm(ctx, g);
    }
    check_vs_plain(g, precision);
    free(g);
    free(h);
    free(half);
    free(s);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

static void check_options(void) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    CHECK(o.rank_invariant == 0);
    o.backend = GPTX_BACKEND_CPU;
    o.rank_invariant = 2;
    gptx_context *ctx = NULL;
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_INVALID);
    CHECK_MSG("rank_invariant is 2");
    o.rank_invariant = 1;
    o.backend = GPTX_BACKEND_CUDA; /* no exact sums there (or no module here) */
    CHECK_STATUS(gptx_context_create(&ctx, &o), GPTX_ERR_UNSUPPORTED);
    /* the memory: 3 int64 per parameter, one int32 per 1024 */
    gptx_context *plain = context(0, GPTX_PRECISION_FP32), *exact = context(1, GPTX_PRECISION_FP32);
    gptx_model *mp = plain ? model(plain) : NULL, *me = exact ? model(exact) : NULL;
    gptx_memory_stats a, b;
    gptx_memory_stats_init(&a);
    gptx_memory_stats_init(&b);
    CHECK_OK(gptx_context_memory(plain, &a));
    CHECK_OK(gptx_context_memory(exact, &b));
    size_t n = mp ? gptx_model_num_parameters(mp) : 0;
    printf("memory: %zu bytes more for %zu parameters\n", (size_t)(b.allocated - a.allocated), n);
    CHECK(b.allocated - a.allocated == 24 * n + 4 * ((n + CHUNK - 1) / CHUNK));
    gptx_model_destroy(mp);
    gptx_model_destroy(me);
    gptx_context_destroy(plain);
    gptx_context_destroy(exact);
}

int main(void) {
    check_options();
    check_policy(GPTX_PRECISION_FP32, "fp32");
    if (gptx_features() & GPTX_FEATURE_DNNL) check_policy(GPTX_PRECISION_BF16, "bf16");
    else printf("precision bf16: not built (no oneDNN)\n");
    return check_exit("test_rank_invariant");
}
