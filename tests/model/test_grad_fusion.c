/* The gradient fusions of the bf16 policies (lib/core/backend.h grad_fusion):
 * the clip norm from per-tensor sums of squares taken in backward, and
 * zero_grad folded into the backward's first gradient writes. A model with
 * them (the default under bf16 on the CPU) against the same model with them
 * switched off (grad_fusion = 0: zero_grad fills, the norm is one
 * sum_squares_to_host pass), trained side by side:
 *   - gradients equal element for element (== : a folded zero_grad can only
 *     turn a +0 into -0), with and without gradient accumulation, tied and
 *     untied heads, bf16 and bf16_pure;
 *   - the norms within 1e-6 relative (double sums grouped per tensor instead
 *     of per chunk of the flat buffer; in practice the same float), and the
 *     parameters bit for bit whenever the norms are the same float;
 *   - zero_grad then get_gradient gives zeros; a step right after zero_grad
 *     without backward steps with norm 0, as before;
 *   - fp32 offers no fusion (its bits are pinned by the reference tests).
 * Skipped (77) without oneDNN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "context.h"
#include "model.h"
#include "test_util.h"

enum { B = 2, T = 16, V = 67, VP = 80, STEPS = 3 };

static void config(gptx_model_config *c, int tied) {
    gptx_model_config_init(c);
    c->vocab_size = V;
    c->padded_vocab_size = VP;
    c->context_length = T;
    c->n_layer = 2;
    c->n_head = 2;
    c->n_embd = 32;
    c->tied_head = tied;
}

typedef struct run {
    gptx_model *m;
    gptx_optimizer *opt;
} run;

static int open_run(run *r, gptx_context *ctx, int tied, int fused) {
    gptx_model_config c;
    config(&c, tied);
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-3f;
    ao.grad_clip = 0.5f; /* clipping active: the norm reaches the update */
    REQUIRE_OK(gptx_model_create(&r->m, ctx, &c));
    if (!fused) r->m->grad_fusion = 0; /* the separate passes, as under fp32 */
    REQUIRE_OK(gptx_model_init_random(r->m, 7));
    REQUIRE_OK(gptx_optimizer_create(&r->opt, r->m, &ao));
    return 0;
}

static void close_run(run *r) {
    gptx_optimizer_destroy(r->opt);
    gptx_model_destroy(r->m);
}

static void batch(int step, int part, int32_t *in, int32_t *tg) {
    uint64_t x = 1000003u * (uint64_t)(step * 7 + part + 1);
    for (int i = 0; i < B * T + 1; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int32_t t = (int32_t)((x >> 33) % V);
        if (i < B * T) in[i] = t;
        if (i > 0) tg[i - 1] = t;
    }
}

/* Every gradient (or parameter) in tensor order into a new array. */
static float *all_of(gptx_model *m, int grads) {
    float *p = malloc(gptx_model_num_parameters(m) * sizeof *p);
    size_t off = 0;
    for (int i = 0; p && i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        CHECK_OK(gptx_model_tensor_info(m, i, &info));
        if (grads) CHECK_OK(gptx_model_get_gradient(m, info.name, p + off, info.numel));
        else CHECK_OK(gptx_model_get_parameter(m, info.name, p + off, info.numel));
        off += info.numel;
    }
    return p;
}

/* mismatching elements (== comparison) */
static size_t mismatches(const float *a, const float *b, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !(a[i] == b[i]);
    return bad;
}

static int train_pair(int precision, int tied, int accum) {
    const char *name = gptx_precision_name(precision);
    gptx_context *ctx = make_policy_context(precision);
    if (!ctx) return 1;
    run f = {0}, s = {0};
    if (open_run(&f, ctx, tied, 1) || open_run(&s, ctx, tied, 0)) {
        close_run(&f), close_run(&s), gptx_context_destroy(ctx);
        return 1;
    }
    /* the fusion is on: else the comparison below compares a path with itself */
    CHECK(f.m->grad_fusion == (GPTX_GRAD_FUSE_NORM | GPTX_GRAD_FUSE_ZERO));
    size_t n = gptx_model_num_parameters(f.m);
    int same_norm_bits = 0;
    for (int step = 0; step < STEPS; step++) {
        int32_t in[B * T], tg[B * T];
        CHECK_OK(gptx_model_zero_grad(f.m));
        CHECK_OK(gptx_model_zero_grad(s.m));
        CHECK(f.m->grads_zero_pending == 1); /* deferred, not filled */
        for (int k = 0; k < accum; k++) {
            batch(step, k, in, tg);
            float lf = 0, ls = 0;
            CHECK_OK(gptx_model_forward(f.m, in, tg, B, T, &lf));
            CHECK_OK(gptx_model_backward(f.m, 1.0f / (float)accum));
            CHECK_OK(gptx_model_forward(s.m, in, tg, B, T, &ls));
            CHECK_OK(gptx_model_backward(s.m, 1.0f / (float)accum));
            CHECK(lf == ls);
        }
        double sumsq = 0;
        CHECK(gptx_model_grad_sumsq(f.m, &sumsq) == 1); /* this backward's sums */
        CHECK(gptx_model_grad_sumsq(s.m, &sumsq) == 0);
        float *gf = all_of(f.m, 1), *gs = all_of(s.m, 1);
        size_t bad = mismatches(gf, gs, n);
        if (bad) fprintf(stderr, "%s tied %d accum %d step %d: %zu gradients differ\n", name,
                         tied, accum, step, bad);
        CHECK(bad == 0);
        float nf = 0, ns = 0;
        CHECK_OK(gptx_optimizer_step(f.opt, f.m, &nf));
        CHECK_OK(gptx_optimizer_step(s.opt, s.m, &ns));
        double rel = fabs((double)nf - ns) / ns;
        if (!(rel <= 1e-6))
            fprintf(stderr, "%s tied %d accum %d step %d: norm %.9g fused, %.9g separate\n",
                    name, tied, accum, step, (double)nf, (double)ns);
        CHECK(rel <= 1e-6);
        CHECK(ns > 0.5f); /* clipped */
        float *pf = all_of(f.m, 0), *ps = all_of(s.m, 0);
        if (nf == ns) {
            same_norm_bits++;
            CHECK(memcmp(pf, ps, n * sizeof *pf) == 0);
        }
        free(gf), free(gs), free(pf), free(ps);
    }
    printf("%s tied %d accum %d: %d of %d norms the same float, gradients equal\n", name, tied,
           accum, same_norm_bits, STEPS);

    /* zero_grad, then the public read: zeros, and nothing pending after */
    CHECK_OK(gptx_model_zero_grad(f.m));
    CHECK(f.m->grads_zero_pending == 1);
    float *z = all_of(f.m, 1);
    size_t nonzero = 0;
    for (size_t i = 0; z && i < n; i++) nonzero += z[i] != 0.0f;
    CHECK(nonzero == 0);
    CHECK(f.m->grads_zero_pending == 0);
    free(z);

    /* a step right after zero_grad, no backward between: norm 0 on both, the
     * same parameters (weight decay and the moments alone move them) */
    CHECK_OK(gptx_model_zero_grad(f.m));
    CHECK_OK(gptx_model_zero_grad(s.m));
    float nf = -1, ns = -1;
    CHECK_OK(gptx_optimizer_step(f.opt, f.m, &nf));
    CHECK_OK(gptx_optimizer_step(s.opt, s.m, &ns));
    CHECK(nf == 0.0f && ns == 0.0f);
    float *pf = all_of(f.m, 0), *ps = all_of(s.m, 0);
    if (pf && ps) CHECK(memcmp(pf, ps, n * sizeof *pf) == 0);
    free(pf), free(ps);
    close_run(&f);
    close_run(&s);
    gptx_context_destroy(ctx);
    return 0;
}

/* fp32 keeps the separate passes: no fusion offered, zero_grad fills */
static void check_fp32(void) {
    gptx_context *ctx = make_policy_context(GPTX_PRECISION_FP32);
    if (!ctx) return;
    run r = {0};
    if (!open_run(&r, ctx, 1, 1)) {
        CHECK(r.m->grad_fusion == 0);
        CHECK_OK(gptx_model_zero_grad(r.m));
        CHECK(r.m->grads_zero_pending == 0);
    }
    close_run(&r);
    gptx_context_destroy(ctx);
}

int main(void) {
    check_fp32();
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        printf("test_grad_fusion: bf16 skipped (no oneDNN in this build)\n");
        return check_failures ? 1 : 77;
    }
    const int policies[] = {GPTX_PRECISION_BF16, GPTX_PRECISION_BF16_PURE};
    for (int p = 0; p < 2; p++)
        for (int tied = 1; tied >= 0; tied--)
            for (int accum = 1; accum <= 2; accum++) train_pair(policies[p], tied, accum);
    return check_exit("test_grad_fusion");
}
