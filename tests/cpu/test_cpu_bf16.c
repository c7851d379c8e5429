/* The CPU backend's bf16 storage, op by op (docs/precision.md):
 *  1. the fp32 -> bf16 conversion: its definition (round to nearest even,
 *     denormals to signed zero, NaN quiet) on known cases, and the C path
 *     equal to VCVTNEPS2BF16 where the CPU has it on a sample of every
 *     exponent and rounding case (all 2^32 floats with --exhaustive);
 *  2. every op except the products and attention (whose tile products are
 *     bf16 products: test_cpu_attention_bf16), under bf16_pure (everything bf16):
 *     exactly the fp32 op on the widened inputs, rounded once, bit for bit,
 *     at odd shapes; under bf16 mixed, whose residual stream and LayerNorm
 *     and embedding weights stay fp32, the same with those arguments fp32;
 *  3. the products (oneDNN): within the bound of fp32 accumulation of the
 *     widened inputs, plus one bf16 rounding of a bf16 output;
 *  4. the bits do not depend on the thread count (1, 2, 3), products
 *     included; the pure-bf16 AdamW rounds as the fp32 update rounded to
 *     nearest, or stochastically with the Philox words of the CUDA backend.
 * --dnnl-version V: only that the oneDNN the bf16 products run on (the
 * context's info.products) is version V or starts with it ("3." for any
 * 3.x), so that a build against one oneDNN proves it runs on that one.
 * Uses the private backend table; exits 77 in builds without oneDNN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_round.h"
#include "check.h"
#include "cpu_bf16.h"
#include "cpu_kernels.h"

#include "cpu_backend_util.h"

/* The bf16 result must be the fp32 result rounded, bit for bit. */
static void same_as_rounded(const char *what, const bf16 *got, const float *fp32, size_t n) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != gptx_cpu_f32_to_bf16(fp32[i]) && bad++ == 0) first = i;
    if (bad)
        fprintf(stderr, "%s: %zu of %zu differ from the rounded fp32 op (first [%zu]: %04x, fp32 %a)\n",
                what, bad, n, first, got[first], (double)fp32[first]);
    CHECK(bad == 0);
}

static void same_floats(const char *what, const float *a, const float *b, size_t n) {
    int same = memcmp(a, b, n * sizeof *a) == 0;
    if (!same) fprintf(stderr, "%s: fp32 outputs differ from the fp32 op's\n", what);
    CHECK(same);
}

/* ---- 1. conversion ------------------------------------------------------------- */

static bf16 conv(float x) { return gptx_cpu_f32_to_bf16(x); }
static float bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static void test_conversion(int exhaustive) {
    /* the definition */
    CHECK(conv(1.0f) == 0x3f80 && conv(-2.0f) == 0xc000);
    CHECK(conv(bits(0x3f808000u)) == 0x3f80); /* tie, even stays */
    CHECK(conv(bits(0x3f818000u)) == 0x3f82); /* tie, odd rounds up */
    CHECK(conv(bits(0x3f808001u)) == 0x3f81); /* above the tie */
    CHECK(conv(bits(0x3f807fffu)) == 0x3f80); /* below the tie */
    CHECK(conv(bits(0x00000001u)) == 0x0000 && conv(bits(0x807fffffu)) == 0x8000); /* denormals */
    CHECK(conv(bits(0x00800000u)) == 0x0080);                   /* smallest normal kept */
    CHECK(conv(INFINITY) == 0x7f80 && conv(-INFINITY) == 0xff80);
    CHECK(conv(bits(0x7f7fffffu)) == 0x7f80); /* FLT_MAX rounds to infinity */
    CHECK(conv(bits(0x7f800001u)) == 0x7fc0 && conv(bits(0xffc12345u)) == 0xffc1); /* NaN quiet */
    for (uint32_t h = 0; h < 65536; h++) CHECK(gptx_cpu_bf16_to_f32((bf16)h) == bits(h << 16) ||
                                              isnan(bits(h << 16)));
    /* the C path against the instruction */
    enum { LOWS = 8, N = 65536 * LOWS };
    static const uint32_t lows[LOWS] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000,
                                        0xc000};
    float *x = malloc(N * sizeof *x);
    bf16 *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (uint32_t i = 0; i < N; i++) x[i] = bits(((i / LOWS) << 16) | lows[i % LOWS]);
    gptx_cpu_bf16_narrow_c(a, x, N);
    for (uint32_t i = 0; i < N; i++) CHECK(a[i] == conv(x[i]));
    if (gptx_cpu_bf16_narrow_hw(b, x, N)) {
        size_t bad = 0;
        for (uint32_t i = 0; i < N; i++) bad += a[i] != b[i];
        printf("conversion: VCVTNEPS2BF16 and the C path differ on %zu of %d sampled floats\n",
               bad, N);
        CHECK(bad == 0);
        if (exhaustive) {
            size_t chunk = (size_t)1 << 24;
            float *y = malloc(chunk * sizeof *y);
            bf16 *c = malloc(chunk * sizeof *c), *d = malloc(chunk * sizeof *d);
            bad = 0;
            for (uint64_t base = 0; base < ((uint64_t)1 << 32); base += chunk) {
                for (size_t i = 0; i < chunk; i++) y[i] = bits((uint32_t)(base + i));
                gptx_cpu_bf16_narrow_c(c, y, chunk);
                gptx_cpu_bf16_narrow_hw(d, y, chunk);
                for (size_t i = 0; i < chunk; i++) bad += c[i] != d[i];
            }
            printf("conversion: all 2^32 floats, %zu differ\n", bad);
            CHECK(bad == 0);
            free(y);
            free(c);
            free(d);
        }
    } else {
        printf("conversion: this CPU has no AVX512_BF16; the C path is the only one\n");
    }
    free(x);
    free(a);
    free(b);
}

/* ---- 2. ops other than products: bit for bit -------------------------------------- */

enum { B = 2, T = 19, C = 40, NH = 4, V = 53, VP = 64 };
#define N ((size_t)B * T)

static void test_embedding(gptx_backend *b16, gptx_backend *b32) {
    pair wte = pair_rand((size_t)VP * C, 0.5f), wpe = pair_rand((size_t)T * C, 0.5f);
    int32_t inp[N];
    for (size_t i = 0; i < N; i++) inp[i] = (int32_t)((i * 7) % V);
    bf16 *out = malloc(N * C * sizeof *out);
    float *out32 = malloc(N * C * sizeof *out32);
    CHECK_OK(ops->embedding_forward(b16, (float *)out, inp, (float *)wte.h, (float *)wpe.h, B, T, C));
    CHECK_OK(ops->embedding_forward(b32, out32, inp, wte.f, wpe.f, B, T, C));
    same_as_rounded("embedding_forward", out, out32, N * C);
    pair dout = pair_rand(N * C, 1.0f);
    float *g1 = floats_rand((size_t)VP * C, 0.1f), *g2 = floats_copy(g1, (size_t)VP * C);
    float *p1 = floats_rand((size_t)T * C, 0.1f), *p2 = floats_copy(p1, (size_t)T * C);
    CHECK_OK(ops->embedding_backward(b16, g1, p1, (float *)dout.h, inp, B, T, C));
    CHECK_OK(ops->embedding_backward(b32, g2, p2, dout.f, inp, B, T, C));
    same_floats("embedding_backward dwte", g1, g2, (size_t)VP * C);
    same_floats("embedding_backward dwpe", p1, p2, (size_t)T * C);
    pair_free(&wte), pair_free(&wpe), pair_free(&dout);
    free(out), free(out32), free(g1), free(g2), free(p1), free(p2);
}

static void test_layernorm(gptx_backend *b16, gptx_backend *b32) {
    pair x = pair_rand(N * C, 2.0f), w = pair_rand(C, 1.0f), bb = pair_rand(C, 0.5f);
    bf16 *out = malloc(N * C * sizeof *out);
    float *out32 = malloc(N * C * sizeof *out32);
    float m1[N], r1[N], m2[N], r2[N];
    CHECK_OK(ops->layernorm_forward(b16, (float *)out, m1, r1, (float *)x.h, (float *)w.h,
                                    (float *)bb.h, (int)N, C, 1e-5f));
    CHECK_OK(ops->layernorm_forward(b32, out32, m2, r2, x.f, w.f, bb.f, (int)N, C, 1e-5f));
    same_as_rounded("layernorm_forward", out, out32, N * C);
    same_floats("layernorm_forward mean", m1, m2, N);
    same_floats("layernorm_forward rstd", r1, r2, N);
    pair dout = pair_rand(N * C, 1.0f), dinp = pair_rand(N * C, 0.5f);
    float *dinp32 = floats_copy(dinp.f, N * C);
    float *dw1 = floats_rand(C, 0.1f), *dw2 = floats_copy(dw1, C);
    float *db1 = floats_rand(C, 0.1f), *db2 = floats_copy(db1, C);
    CHECK_OK(ops->layernorm_backward(b16, (float *)dinp.h, dw1, db1, (float *)dout.h, (float *)x.h,
                                     (float *)w.h, m1, r1, (int)N, C));
    CHECK_OK(ops->layernorm_backward(b32, dinp32, dw2, db2, dout.f, x.f, w.f, m2, r2, (int)N, C));
    same_as_rounded("layernorm_backward dinp (accumulated)", dinp.h, dinp32, N * C);
    same_floats("layernorm_backward dw", dw1, dw2, C);
    same_floats("layernorm_backward db", db1, db2, C);
    pair_free(&x), pair_free(&w), pair_free(&bb), pair_free(&dout), pair_free(&dinp);
    free(out), free(out32), free(dinp32), free(dw1), free(dw2), free(db1), free(db2);
}

static void test_elementwise(gptx_backend *b16, gptx_backend *b32) {
    size_t n = 3 * 4096 + 77; /* more than one conversion chunk */
    pair x = pair_rand(n, 4.0f), y = pair_rand(n, 1.0f);
    bf16 *o = malloc(n * sizeof *o);
    float *o32 = malloc(n * sizeof *o32);
    CHECK_OK(ops->gelu_forward(b16, (float *)o, (float *)x.h, n));
    CHECK_OK(ops->gelu_forward(b32, o32, x.f, n));
    same_as_rounded("gelu_forward", o, o32, n);
    CHECK_OK(ops->gelu_backward(b16, (float *)o, (float *)x.h, (float *)y.h, n));
    CHECK_OK(ops->gelu_backward(b32, o32, x.f, y.f, n));
    same_as_rounded("gelu_backward", o, o32, n);
    CHECK_OK(ops->residual_forward(b16, (float *)o, (float *)x.h, (float *)y.h, n));
    CHECK_OK(ops->residual_forward(b32, o32, x.f, y.f, n));
    same_as_rounded("residual_forward", o, o32, n);
    pair_free(&x), pair_free(&y);
    free(o), free(o32);
}

static void test_crossentropy(gptx_backend *b16, gptx_backend *b32) {
    int32_t tg[N];
    for (size_t i = 0; i < N; i++) tg[i] = i % 5 == 3 ? GPTX_IGNORE_INDEX : (int32_t)((i * 11) % V);
    for (int mode = 0; mode < 2; mode++) { /* forward then backward; fused */
        pair lg = pair_rand(N * VP, 6.0f);
        float *lg32 = floats_copy(lg.f, N * VP);
        float l1[N], l2[N], s1[3 * N], s2[3 * N];
        if (mode == 0) {
            CHECK_OK(ops->crossentropy_forward(b16, l1, s1, (float *)lg.h, tg, (int)N, V, VP, 1));
            CHECK_OK(ops->crossentropy_forward(b32, l2, s2, lg32, tg, (int)N, V, VP, 1));
            same_as_rounded("crossentropy_forward logits (masked)", lg.h, lg32, N * VP);
            CHECK_OK(ops->crossentropy_backward(b16, (float *)lg.h, s1, tg, (int)N, V, VP, 0.25f));
            CHECK_OK(ops->crossentropy_backward(b32, lg32, s2, tg, (int)N, V, VP, 0.25f));
        } else {
            CHECK_OK(ops->crossentropy_fused(b16, l1, s1, (float *)lg.h, tg, (int)N, V, VP, 1,
                                             0.25f));
            CHECK_OK(ops->crossentropy_fused(b32, l2, s2, lg32, tg, (int)N, V, VP, 1, 0.25f));
        }
        same_floats(mode ? "crossentropy_fused losses" : "crossentropy_forward losses", l1, l2, N);
        same_floats(mode ? "crossentropy_fused statistics" : "crossentropy_forward statistics", s1,
                    s2, 3 * N);
        same_as_rounded(mode ? "crossentropy_fused gradient" : "crossentropy_backward gradient",
                        lg.h, lg32, N * VP);
        pair_free(&lg);
        free(lg32);
    }
}

static void test_adamw(int stochastic) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.precision = GPTX_PRECISION_BF16_PURE;
    o.stochastic_rounding = stochastic;
    o.num_threads = 2;
    gptx_backend *pure = NULL, *b32 = make_backend(GPTX_PRECISION_FP32, 2);
    if (ops->create(&pure, &o) != GPTX_OK) {
        fprintf(stderr, "bf16_pure backend: %s\n", gptx_last_error());
        exit(1);
    }
    size_t n = 70000;
    pair p = pair_rand(n, 1.0f), m = pair_rand(n, 0.01f), v = pair_rand(n, 0.001f);
    for (size_t i = 0; i < n; i++) { /* the second moment is never negative */
        v.h[i] &= 0x7fff;
        v.f[i] = fabsf(v.f[i]);
    }
    float *g = floats_rand(n, 0.05f);
    gptx_param_range r[2] = {{0, 40000, 0.1f}, {40000, 30000, 0.0f}};
    gptx_adamw_hyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 0.8f, 1234, 3};
    float *p32 = floats_copy(p.f, n), *m32 = floats_copy(m.f, n), *v32 = floats_copy(v.f, n);
    CHECK_OK(ops->adamw(pure, (float *)p.h, g, (float *)m.h, (float *)v.h, r, 2, &h));
    CHECK_OK(ops->adamw(b32, p32, g, m32, v32, r, 2, &h));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bf16 ep, em, ev;
        if (stochastic) {
            gptx_philox4 rnd = gptx_philox_block(h.rounding_seed, (uint64_t)h.step, i);
            ep = gptx_bf16_round_stochastic(p32[i], rnd.v[0]);
            em = gptx_bf16_round_stochastic(m32[i], rnd.v[1]);
            ev = gptx_bf16_round_stochastic(v32[i], rnd.v[2]);
        } else {
            ep = conv(p32[i]), em = conv(m32[i]), ev = conv(v32[i]);
        }
        bad += p.h[i] != ep || m.h[i] != em || v.h[i] != ev;
    }
    printf("adamw (bf16_pure, %s): %zu of %zu updates differ from the fp32 update rounded\n",
           stochastic ? "stochastic rounding" : "round to nearest", bad, n);
    CHECK(bad == 0);
    ops->destroy(pure);
    ops->destroy(b32);
    pair_free(&p), pair_free(&m), pair_free(&v);
    free(g), free(p32), free(m32), free(v32);
}

/* bf16 mixed: [res] (embedding output, LayerNorm input and dinp, residual
 * sums) and [p] (LayerNorm and embedding weights) are fp32, [act] bf16. */
static void test_mixed_classes(gptx_backend *mix, gptx_backend *b32) {
    float *wte = floats_rand((size_t)VP * C, 0.5f), *wpe = floats_rand((size_t)T * C, 0.5f);
    int32_t inp[N];
    for (size_t i = 0; i < N; i++) inp[i] = (int32_t)((i * 7) % V);
    float *e1 = malloc(N * C * 4), *e2 = malloc(N * C * 4);
    CHECK_OK(ops->embedding_forward(mix, e1, inp, wte, wpe, B, T, C));
    CHECK_OK(ops->embedding_forward(b32, e2, inp, wte, wpe, B, T, C));
    same_floats("mixed embedding_forward (fp32 in and out)", e1, e2, N * C);
    float *x = floats_rand(N * C, 2.0f), *w = floats_rand(C, 1.0f), *bb = floats_rand(C, 0.5f);
    bf16 *out = malloc(N * C * 2);
    float *out32 = malloc(N * C * 4), m1[N], r1[N], m2[N], r2[N];
    CHECK_OK(ops->layernorm_forward(mix, (float *)out, m1, r1, x, w, bb, (int)N, C, 1e-5f));
    CHECK_OK(ops->layernorm_forward(b32, out32, m2, r2, x, w, bb, (int)N, C, 1e-5f));
    same_as_rounded("mixed layernorm_forward (fp32 residual in, bf16 out)", out, out32, N * C);
    same_floats("mixed layernorm_forward statistics", m1, m2, N);
    pair dout = pair_rand(N * C, 1.0f);
    float *d1 = floats_rand(N * C, 0.5f), *d2 = floats_copy(d1, N * C);
    float *dw1 = floats_rand(C, 0.1f), *dw2 = floats_copy(dw1, C);
    float *db1 = floats_rand(C, 0.1f), *db2 = floats_copy(db1, C);
    CHECK_OK(ops->layernorm_backward(mix, d1, dw1, db1, (float *)dout.h, x, w, m1, r1, (int)N, C));
    CHECK_OK(ops->layernorm_backward(b32, d2, dw2, db2, dout.f, x, w, m2, r2, (int)N, C));
    same_floats("mixed layernorm_backward dinp (fp32, accumulated)", d1, d2, N * C);
    same_floats("mixed layernorm_backward dw", dw1, dw2, C);
    CHECK_OK(ops->residual_forward(mix, e1, x, (float *)dout.h, N * C));
    CHECK_OK(ops->residual_forward(b32, e2, x, dout.f, N * C));
    same_floats("mixed residual_forward (fp32 + bf16 -> fp32)", e1, e2, N * C);
    bf16 *act = malloc(N * C * 2);
    CHECK_OK(ops->act_from_res(mix, (float *)act, e1, N * C));
    same_as_rounded("mixed act_from_res", act, e2, N * C);
    pair_free(&dout);
    free(wte), free(wpe), free(e1), free(e2), free(x), free(w), free(bb), free(out), free(out32);
    free(d1), free(d2), free(dw1), free(dw2), free(db1), free(db2), free(act);
}

/* ---- 3. products: the fp32 accumulation bound ----------------------------------- */

/* |got - ref| <= 2^-8 |ref| (a bf16 output's rounding, when rounded) +
 * 2^-20 * sum |a_k b_k| (fp32 sums of the exact products in any order). */
static void within_bound(const char *what, const float *got, const float *ref, const float *abs_sum,
                         size_t n, int rounded) {
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        /* (1 + 2^-7): the rounding is of the computed value, not of ref */
        double bound = ((rounded ? ldexp(fabs(ref[i]), -8) : 0.0) + ldexp(abs_sum[i], -20)) *
                           (1.0 + ldexp(1.0, -7)) + 1e-30;
        double r = fabs((double)got[i] - ref[i]) / bound;
        if (r > worst) worst = r;
        bad += !(r <= 1.0);
    }
    printf("  %-34s worst |error| / bound %.3f\n", what, worst);
    CHECK(bad == 0);
}

static void test_products(gptx_backend *b16) {
    /* odd, against the 256 x 768 tiles (cpu_dnnl.h): several tiles with tails in M
     * and N for the forward (301 x 1000) and the weight gradient (1000 x 300) */
    enum { M = 301, K = 300, OC = 1000 };
    pair inp = pair_rand((size_t)M * K, 1.0f), w = pair_rand((size_t)OC * K, 0.2f);
    pair bias = pair_rand(OC, 0.5f), dout = pair_rand((size_t)M * OC, 1.0f);
    /* references in double from the widened inputs, with sum |a b| */
    size_t nf = (size_t)M * OC, nd = (size_t)M * K, nw = (size_t)OC * K;
    float *ref = malloc(nf * 4), *abs_f = malloc(nf * 4), *refd = malloc(nd * 4),
          *abs_d = malloc(nd * 4), *refw = malloc(nw * 4), *abs_w = malloc(nw * 4);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < OC; j++) {
            double s = bias.f[j], a = fabs(bias.f[j]);
            for (int k = 0; k < K; k++) {
                double p = (double)inp.f[(size_t)i * K + k] * w.f[(size_t)j * K + k];
                s += p, a += fabs(p);
            }
            ref[(size_t)i * OC + j] = (float)s, abs_f[(size_t)i * OC + j] = (float)a;
        }
    float *dw0 = floats_rand(nw, 0.1f);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            double s = 0, a = 0;
            for (int j = 0; j < OC; j++) {
                double p = (double)dout.f[(size_t)i * OC + j] * w.f[(size_t)j * K + k];
                s += p, a += fabs(p);
            }
            refd[(size_t)i * K + k] = (float)s, abs_d[(size_t)i * K + k] = (float)a;
        }
    for (int j = 0; j < OC; j++)
        for (int k = 0; k < K; k++) {
            double s = dw0[(size_t)j * K + k], a = fabs(s);
            for (int i = 0; i < M; i++) {
                double p = (double)dout.f[(size_t)i * OC + j] * inp.f[(size_t)i * K + k];
                s += p, a += fabs(p);
            }
            refw[(size_t)j * K + k] = (float)s, abs_w[(size_t)j * K + k] = (float)a;
        }
    bf16 *out = malloc(nf * 2), *dinp = malloc(nd * 2);
    float *outf = malloc(nf * 4), *dinpf = malloc(nd * 4), *dw = floats_copy(dw0, nw);
    float dbias[OC] = {0};
    gptx_context_info info;
    memset(&info, 0, sizeof info);
    ops->describe(b16, &info);
    printf("products (%s), M %d, K %d, OC %d:\n", info.products, M, K, OC);
    CHECK_OK(ops->matmul_forward(b16, (float *)out, (float *)inp.h, (float *)w.h, (float *)bias.h,
                                 M, K, OC));
    for (size_t i = 0; i < nf; i++) outf[i] = gptx_cpu_bf16_to_f32(out[i]);
    within_bound("forward (bf16 out, bias)", outf, ref, abs_f, nf, 1);
    CHECK_OK(ops->matmul_backward(b16, (float *)dinp, dw, dbias, (float *)dout.h, (float *)inp.h,
                                  (float *)w.h, M, K, OC));
    for (size_t i = 0; i < nd; i++) dinpf[i] = gptx_cpu_bf16_to_f32(dinp[i]);
    within_bound("backward dinp (bf16 out)", dinpf, refd, abs_d, nd, 1);
    within_bound("backward dw (fp32, accumulated)", dw, refw, abs_w, nw, 0);
    double worst = 0;
    for (int j = 0; j < OC; j++) {
        double s = 0;
        for (int i = 0; i < M; i++) s += dout.f[(size_t)i * OC + j];
        worst = fmax(worst, fabs(dbias[j] - s));
    }
    CHECK(worst < 1e-4);
    pair_free(&inp), pair_free(&w), pair_free(&bias), pair_free(&dout);
    free(ref), free(abs_f), free(refd), free(abs_d), free(refw), free(abs_w);
    free(out), free(dinp), free(outf), free(dinpf), free(dw), free(dw0);
}

/* The GELU fused into its products: the forward's pre-activation is the
 * plain product's output (bit for bit where the products are widened, within
 * a bound on bf16 hardware) and its output the GELU of the
 * unrounded product (within one bf16 rounding of GELU(pre)); the backward's
 * dinp = (dout @ w) * gelu'(pre) rounded once, within the product bound. */
static void test_gelu_products(gptx_backend *b16) {
    enum { M = 300, K = 800, OC = 900 }; /* the epilogue on tail tiles of M and N */
    pair inp = pair_rand((size_t)M * K, 1.0f), w = pair_rand((size_t)OC * K, 0.3f);
    pair bias = pair_rand(OC, 0.5f);
    size_t n = (size_t)M * OC;
    bf16 *plain = malloc(n * 2), *pre = malloc(n * 2), *out = malloc(n * 2);
    CHECK_OK(ops->matmul_forward(b16, (float *)plain, (float *)inp.h, (float *)w.h,
                                 (float *)bias.h, M, K, OC));
    CHECK_OK(ops->matmul_gelu_forward(b16, (float *)out, (float *)pre, (float *)inp.h,
                                      (float *)w.h, (float *)bias.h, M, K, OC));
    /* pre and the plain product round the same sums, but from two oneDNN
     * primitives (fp32 and bf16 destination), which may block K differently
     * on bf16 hardware (AVX512_BF16, AMX): there the fp32 sums differ by up
     * to K·2^-24·S each (S = sum of |a||b| + |bias|) and a rounding may land
     * one bf16 step apart. On the widened path they are the same bits. */
    size_t differ = 0;
    double worst_ratio = 0;
    for (size_t i = 0; i < n; i++) {
        if (plain[i] == pre[i]) continue;
        differ++;
        size_t r = i / OC, c = i % OC;
        double S = fabs(bias.f[c]);
        for (size_t k = 0; k < K; k++) S += fabs(inp.f[r * K + k]) * fabs(w.f[c * K + k]);
        double a = gptx_cpu_bf16_to_f32(plain[i]), p = gptx_cpu_bf16_to_f32(pre[i]);
        double step = ldexp(1.0, ilogb(fmax(fabs(a), fabs(p))) - 7); /* one bf16 step */
        worst_ratio = fmax(worst_ratio, fabs(a - p) / (step + 2 * K * ldexp(S, -24)));
    }
    printf("  %-34s pre vs plain product: %zu of %zu differ, at most %.2f of the bound\n",
           "matmul_gelu_forward", differ, n, worst_ratio);
    CHECK(worst_ratio <= 1.0);
    if (!gptx_cpu_bf16_hardware()) CHECK(differ == 0);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double x = gptx_cpu_bf16_to_f32(pre[i]);
        double g = 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        /* pre is x rounded: GELU moves by at most 1.13 times that, plus out's rounding */
        double bound = ldexp(fabs(g), -8) + 1.13 * ldexp(fabs(x), -8) + 1e-30;
        worst = fmax(worst, fabs(gptx_cpu_bf16_to_f32(out[i]) - g) / bound);
    }
    printf("  %-34s out / bound %.3f\n", "matmul_gelu_forward",
           worst);
    CHECK(worst <= 1.0);
    /* backward: dout (M, OC) @ w (OC, K), times gelu'(pre) of an (M, K) pre */
    pair dout = pair_rand(n, 1.0f), pk = pair_rand((size_t)M * K, 2.0f);
    bf16 *dinp = malloc((size_t)M * K * 2);
    float *dw = calloc((size_t)OC * K, 4), dbias[OC] = {0};
    CHECK_OK(ops->matmul_backward_dgelu(b16, (float *)dinp, dw, dbias, (float *)dout.h,
                                        (float *)pk.h, (float *)w.h, (float *)pk.h, M, K, OC));
    worst = 0;
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++) {
            double s = 0, a = 0;
            for (int j = 0; j < OC; j++) {
                double p = (double)dout.f[(size_t)i * OC + j] * w.f[(size_t)j * K + k];
                s += p, a += fabs(p);
            }
            double x = pk.f[(size_t)i * K + k], th = tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
            double d = 0.5 * (1 + th) + 0.5 * x * (1 - th * th) * 0.7978845608028654 *
                                          (1 + 3 * 0.044715 * x * x);
            double ref = s * d, bound = ldexp(fabs(ref), -8) + ldexp(a * fabs(d), -20) + 1e-6 * fabs(d) * a;
            worst = fmax(worst, fabs(gptx_cpu_bf16_to_f32(dinp[(size_t)i * K + k]) - ref) / bound);
        }
    printf("  %-34s worst |error| / bound %.3f\n", "matmul_backward_dgelu dinp", worst);
    CHECK(worst <= 1.0);
    pair_free(&inp), pair_free(&w), pair_free(&bias), pair_free(&dout), pair_free(&pk);
    free(plain), free(pre), free(out), free(dinp), free(dw);
}

/* ---- 4. thread counts ------------------------------------------------------------ */

/* One forward product, LayerNorm and attention on 1, 2 and 3 threads. */
static void test_thread_counts(void) {
    /* 4 x 3 tiles with tails; K as mlp.c_proj (oneDNN blocks a long K by the
     * tile shape it is given: rows cut by thread count give other bits) */
    enum { M = 1000, K = 3072, OC = 1700 };
    pair inp = pair_rand((size_t)M * K, 1.0f), w = pair_rand((size_t)OC * K, 0.2f);
    pair qkv = pair_rand(N * 3 * C, 1.5f), x = pair_rand(N * C, 2.0f), lw = pair_rand(C, 1.0f);
    bf16 *ref = NULL, *ref_att = NULL, *ref_ln = NULL;
    for (int threads = 1; threads <= 3; threads++) {
        gptx_backend *be = make_backend(GPTX_PRECISION_BF16_PURE, threads); /* all bf16 */
        bf16 *out = malloc((size_t)M * OC * 2), *att = malloc(N * C * 2), *ln = malloc(N * C * 2);
        float lse[B * NH * T], mean[N], rstd[N];
        CHECK_OK(ops->matmul_forward(be, (float *)out, (float *)inp.h, (float *)w.h, NULL, M, K, OC));
        CHECK_OK(ops->attention_forward(be, (float *)att, lse, NULL, NULL, (float *)qkv.h, B, T, C, NH));
        CHECK_OK(ops->layernorm_forward(be, (float *)ln, mean, rstd, (float *)x.h, (float *)lw.h,
                                        (float *)lw.h, (int)N, C, 1e-5f));
        if (!ref) {
            ref = out, ref_att = att, ref_ln = ln;
        } else {
            CHECK(memcmp(out, ref, (size_t)M * OC * 2) == 0);
            CHECK(memcmp(att, ref_att, N * C * 2) == 0);
            CHECK(memcmp(ln, ref_ln, N * C * 2) == 0);
            free(out), free(att), free(ln);
        }
        ops->destroy(be);
    }
    printf("threads 1, 2, 3: the same bits (product %dx%dx%d, attention, LayerNorm)\n", M, K, OC);
    free(ref), free(ref_att), free(ref_ln);
    pair_free(&inp), pair_free(&w), pair_free(&qkv), pair_free(&x), pair_free(&lw);
}

/* The fp32 products' library (cpu_gemm.c): oneDNN by default only where it is
 * built in, the CPU has AVX-512 and OpenBLAS's kernel does not use it. */
static void test_fp32_gemm_rule(void) {
    int d = -1;
    CHECK_OK(gptx_cpu_fp32_gemm_decide(NULL, 1, 1, "Haswell", &d));
    CHECK(d == 1); /* OPENBLAS_CORETYPE=Haswell on an AVX-512 CPU */
    CHECK_OK(gptx_cpu_fp32_gemm_decide("auto", 1, 1, "Zen", &d));
    CHECK(d == 1);
    CHECK_OK(gptx_cpu_fp32_gemm_decide(NULL, 1, 1, "SkylakeX", &d));
    CHECK(d == 0);
    CHECK_OK(gptx_cpu_fp32_gemm_decide("", 1, 1, "cooperlake", &d));
    CHECK(d == 0);
    CHECK_OK(gptx_cpu_fp32_gemm_decide(NULL, 1, 0, "Haswell", &d));
    CHECK(d == 0); /* AVX2 CPU: the libraries are level, OpenBLAS stays */
    CHECK_OK(gptx_cpu_fp32_gemm_decide(NULL, 0, 1, "Haswell", &d));
    CHECK(d == 0); /* no oneDNN in this build */
    CHECK_OK(gptx_cpu_fp32_gemm_decide("openblas", 1, 1, "Haswell", &d));
    CHECK(d == 0);
    CHECK_OK(gptx_cpu_fp32_gemm_decide("onednn", 1, 0, "SkylakeX", &d));
    CHECK(d == 1);
    CHECK(gptx_cpu_fp32_gemm_decide("onednn", 0, 1, "Haswell", &d) == GPTX_ERR_UNSUPPORTED);
    CHECK(gptx_cpu_fp32_gemm_decide("mkl", 1, 1, "Haswell", &d) == GPTX_ERR_INVALID);
    CHECK(strstr(gptx_last_error(), "auto, openblas or onednn") != NULL);
    printf("fp32 products: oneDNN by default only on AVX-512 with a narrower OpenBLAS kernel\n");
}

/* bf16_native is 0 or 1 (issue 26: it was 16, __builtin_cpu_supports's bit
 * for AVX512_BF16, on such CPUs). The decision is checked with that raw value
 * on any CPU; the context's info must be 0/1 and agree with it. */
static void test_bf16_native_flag(void) {
    CHECK(gptx_cpu_bf16_decide(16, NULL) == 1);
    CHECK(gptx_cpu_bf16_decide(1, NULL) == 1);
    CHECK(gptx_cpu_bf16_decide(0, NULL) == 0);
    CHECK(gptx_cpu_bf16_decide(16, "0") == 0);
    CHECK(gptx_cpu_bf16_decide(16, "1") == 1);
    CHECK(gptx_cpu_bf16_decide(0, "1") == 0);
    int hw = gptx_cpu_bf16_hardware();
    CHECK(hw == 0 || hw == 1);
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = 1;
    gptx_context *ctx = NULL;
    CHECK_OK(gptx_context_create(&ctx, &co));
    gptx_context_info info;
    gptx_context_info_init(&info);
    CHECK_OK(gptx_context_get_info(ctx, &info));
    printf("  bf16_native %d (decide(16, NULL) = %d, this CPU: %d)\n", info.bf16_native,
           gptx_cpu_bf16_decide(16, NULL), hw);
    CHECK(info.bf16_native == hw);
    gptx_context_destroy(ctx);
}

/* info.products under bf16 names the oneDNN that runs: "oneDNN <version> ..." */
static int test_dnnl_version(const char *want) {
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        printf("test_cpu_bf16: this build has no oneDNN\n");
        return SKIP_EXIT;
    }
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.precision = GPTX_PRECISION_BF16;
    co.num_threads = 1;
    gptx_context *ctx = NULL;
    CHECK_OK(gptx_context_create(&ctx, &co));
    if (!ctx) return 1;
    gptx_context_info info;
    gptx_context_info_init(&info);
    CHECK_OK(gptx_context_get_info(ctx, &info));
    char prefix[64];
    snprintf(prefix, sizeof prefix, "oneDNN %s", want);
    int ok = strncmp(info.products, prefix, strlen(prefix)) == 0;
    printf("  bf16 products: %s\n", info.products);
    if (!ok) fprintf(stderr, "expected \"%s...\" (the oneDNN built against)\n", prefix);
    CHECK(ok);
    gptx_context_destroy(ctx);
    return check_exit("test_cpu_bf16 --dnnl-version");
}

int main(int argc, char **argv) {
    ops = gptx_cpu_backend_ops();
    if (argc > 2 && strcmp(argv[1], "--dnnl-version") == 0) return test_dnnl_version(argv[2]);
    int exhaustive = argc > 1 && strcmp(argv[1], "--exhaustive") == 0;
    test_conversion(exhaustive);
    test_bf16_native_flag();
    test_fp32_gemm_rule();
    if (exhaustive) return check_exit("test_cpu_bf16 --exhaustive");
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        printf("test_cpu_bf16: this build has no oneDNN: the bf16 policies are unavailable\n");
        return check_failures ? 1 : SKIP_EXIT;
    }
    gptx_backend *b16 = make_backend(GPTX_PRECISION_BF16, 2), *b32 = make_backend(GPTX_PRECISION_FP32, 2);
    gptx_backend *pure = make_backend(GPTX_PRECISION_BF16_PURE, 2);
    test_embedding(pure, b32);
    test_layernorm(pure, b32);
    test_elementwise(pure, b32);
    test_crossentropy(b16, b32);
    printf("embedding, LayerNorm, GELU, residual (bf16_pure), cross-entropy: bf16 = "
           "rounded fp32 op, %s\n", check_failures ? "FAILED" : "bit for bit");
    test_mixed_classes(b16, b32);
    printf("bf16 mixed: fp32 residual stream and LayerNorm/embedding weights: %s\n",
           check_failures ? "FAILED" : "bit for bit as above");
    ops->destroy(pure);
    test_adamw(0);
    test_adamw(1);
    test_products(b16);
    test_gelu_products(b16);
    test_thread_counts();
    ops->destroy(b16);
    ops->destroy(b32);
    return check_exit("test_cpu_bf16");
}
