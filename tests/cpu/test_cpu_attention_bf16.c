/* The CPU backend's bf16 attention (cpu_attention.c under the bf16
 * policies) against a plain C reference of what it is meant to compute: the
 * tile products on bf16 operands with fp32 accumulation, the probabilities P
 * rounded to bf16 before P V and P^T dO, dS rounded to bf16 before dS K and
 * dS^T Q, everything else (scores, softmax statistics, lse, D = dO . O, the
 * dK and dV sums) wider, out and dqkv rounded once.
 *
 * The reference runs in double on the same bf16 inputs. For every value the
 * kernel computes in fp32 it carries an error margin (fp32 accumulation,
 * (K + 4) 2^-24 sum |a b| per product, and the fp32 softmax), so that:
 *  - a rounded operand (P, dS) is either decided (p - margin and p + margin
 *    round to the same bf16 value: the kernel's bf16 P must be that one) or
 *    ambiguous (the reference takes the middle of the two candidates and
 *    adds half their distance to the products' margins);
 *  - an output element is decided when its interval [r - m, r + m] rounds
 *    to one bf16 value: the kernel's bits must be exactly that value; else
 *    they must lie within the interval's two roundings.
 * The margins are worst-case bounds (a product's grows with K, the keys), so
 * from about half (T = 800) to 97 % (T = 19) of the elements are decided:
 * the test is bitwise there, and requires at least 40 % decided.
 * The same comparison against the reference WITHOUT the P and dS roundings
 * (the attention of gptx <= 0.6: fp32 products on widened q, k, v) must fail
 * on many decided elements, so the new numerics are not matched by accident.
 * Shapes: several query blocks of 64 with a tail, a key count past one
 * product tile (768), head sizes 10 to 64; the same bits on 1 thread
 * (bf16_pure) and 3 (bf16: the policies share the attention).
 * Exits 77 in builds without oneDNN. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_backend_util.h"

#define QBLOCK 64 /* the kernel's query rows per tile (cpu_attention.c BLOCK) */

static double gam(int n) { return ldexp((double)n + 4.0, -24); }

/* The bf16 candidates for an fp32 value within [x - e, x + e]: lo/hi as
 * doubles (rounding is monotonic, so every fp32 value in the interval rounds
 * into [lo, hi]). */
typedef struct {
    double lo, hi;
} span;

static double bf(double x) { return gptx_cpu_bf16_to_f32(gptx_cpu_f32_to_bf16((float)x)); }
static span round_span(double x, double e) { return (span){bf(x - e), bf(x + e)}; }
static double mid(span s) { return 0.5 * (s.lo + s.hi); }
static double half(span s) { return 0.5 * (s.hi - s.lo); }

/* A rounded operand: its value in the reference and its uncertainty. With
 * round = 0 (the old numerics) the fp32 value itself, within its margin. */
static void operand(int round, double x, double e, double *val, double *unc) {
    if (!round) {
        *val = x, *unc = e;
        return;
    }
    span s = round_span(x, e);
    *val = mid(s), *unc = half(s);
}

typedef struct {
    size_t n, decided, wrong_decided, outside;
    double worst_outside; /* largest distance outside the span, in bf16 steps of the value */
} tally;

/* One output element: reference r within margin m; got is the kernel's bf16. */
static void judge(tally *t, double r, double m, bf16 got) {
    span s = round_span(r, m);
    double g = gptx_cpu_bf16_to_f32(got);
    t->n++;
    if (s.lo == s.hi) {
        t->decided++;
        t->wrong_decided += g != s.lo;
    } else if (g < s.lo || g > s.hi) {
        t->outside++;
    }
}

typedef struct {
    int B, T, C, NH;
} shape;

/* Reference of one shape; checks the kernel's out, lse and dqkv. */
static void check_shape(const char *label, int round, shape sh, const bf16 *qkv, const bf16 *dout,
                        const bf16 *out, const float *lse, const bf16 *dqkv, tally *fo, tally *fb,
                        double *lse_worst) {
    int B = sh.B, T = sh.T, C = sh.C, NH = sh.NH, hs = C / NH;
    size_t ld3 = 3 * (size_t)C;
    double scale = (double)(1.0f / sqrtf((float)hs));
    double *p = malloc((size_t)T * T * sizeof *p), *pe = malloc((size_t)T * T * sizeof *pe);
    double *ds = malloc((size_t)T * T * sizeof *ds), *dse = malloc((size_t)T * T * sizeof *dse);
    double *s = malloc((size_t)T * sizeof *s), *sa = malloc((size_t)T * sizeof *sa);
#define X(ptr, i) ((double)gptx_cpu_bf16_to_f32((ptr)[i]))
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t q0 = (size_t)b * T * ld3 + (size_t)h * hs, o0 = (size_t)b * T * C + (size_t)h * hs;
            const float *L = lse + ((size_t)b * NH + h) * T;
            /* forward: P, lse, out */
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, amax = 0, sum = 0;
                int nk = (t / QBLOCK + 1) * QBLOCK < T ? (t / QBLOCK + 1) * QBLOCK : T;
                for (int j = 0; j <= t; j++) {
                    double acc = 0, aa = 0;
                    for (int d = 0; d < hs; d++) {
                        double v = X(qkv, q0 + (size_t)t * ld3 + d) *
                                   X(qkv, q0 + (size_t)j * ld3 + C + d);
                        acc += v, aa += fabs(v);
                    }
                    s[j] = acc * scale, sa[j] = aa;
                    mx = fmax(mx, s[j]), amax = fmax(amax, aa);
                }
                for (int j = 0; j <= t; j++) sum += exp(s[j] - mx);
                double es = 2 * scale * gam(hs) * amax; /* a score's fp32 error, max's included */
                double l = mx + log(sum);
                double le = fabs((double)L[t] - l), ltol = 2 * es + ldexp(1 + fabs(l), -20) +
                                                           ldexp((double)nk, -23);
                *lse_worst = fmax(*lse_worst, le / ltol);
                for (int j = 0; j <= t; j++) {
                    double pr = exp(s[j] - mx) / sum;
                    double e = pr * (2 * es + ldexp(fabs(s[j] - mx) + 1, -22) + ldexp(1.0, -19) +
                                     gam(nk)) + 0x1p-126;
                    operand(round, pr, e, &p[(size_t)t * T + j], &pe[(size_t)t * T + j]);
                }
                for (int d = 0; d < hs; d++) {
                    double r = 0, m = 0, a = 0;
                    for (int j = 0; j <= t; j++) {
                        double v = X(qkv, q0 + (size_t)j * ld3 + 2 * C + d);
                        r += p[(size_t)t * T + j] * v;
                        m += pe[(size_t)t * T + j] * fabs(v);
                        a += (fabs(p[(size_t)t * T + j]) + pe[(size_t)t * T + j]) * fabs(v);
                    }
                    judge(fo, r, m + gam(nk) * a + 0x1p-120 * nk, out[o0 + (size_t)t * C + d]);
                }
            }
            /* backward from the kernel's own out and lse: P again, dS, then dq, dk, dv */
            for (int t = 0; t < T; t++) {
                double D = 0, Da = 0, amax = 0;
                for (int d = 0; d < hs; d++) {
                    double v = X(dout, o0 + (size_t)t * C + d) * X(out, o0 + (size_t)t * C + d);
                    D += v, Da += fabs(v);
                }
                for (int j = 0; j <= t; j++) {
                    double aa = 0;
                    for (int d = 0; d < hs; d++)
                        aa += fabs(X(qkv, q0 + (size_t)t * ld3 + d) *
                                   X(qkv, q0 + (size_t)j * ld3 + C + d));
                    amax = fmax(amax, aa);
                }
                for (int j = 0; j <= t; j++) {
                    double acc = 0, aa = 0, dp = 0, dpa = 0;
                    for (int d = 0; d < hs; d++) {
                        double v = X(qkv, q0 + (size_t)t * ld3 + d) *
                                   X(qkv, q0 + (size_t)j * ld3 + C + d);
                        acc += v, aa += fabs(v);
                        double w = X(dout, o0 + (size_t)t * C + d) *
                                   X(qkv, q0 + (size_t)j * ld3 + 2 * C + d);
                        dp += w, dpa += fabs(w);
                    }
                    double sc = acc * scale, pr = exp(sc - (double)L[t]);
                    double pe_ = pr * (scale * gam(hs) * aa + ldexp(fabs(sc - L[t]) + 1, -22) +
                                       ldexp(1.0, -20)) + 0x1p-126;
                    operand(round, pr, pe_, &p[(size_t)t * T + j], &pe[(size_t)t * T + j]);
                    double g = dp - D, dsr = pr * g * scale;
                    double gerr = gam(hs) * (dpa + Da) + ldexp(fabs(g), -24);
                    double dse_ = scale * (pe_ * (fabs(g) + gerr) + pr * gerr) +
                                  ldexp(fabs(dsr), -22) + 0x1p-126;
                    operand(round, dsr, dse_, &ds[(size_t)t * T + j], &dse[(size_t)t * T + j]);
                }
            }
            for (int t = 0; t < T; t++) /* dq: one product over the keys */
                for (int d = 0; d < hs; d++) {
                    double r = 0, m = 0, a = 0;
                    for (int j = 0; j <= t; j++) {
                        double k = X(qkv, q0 + (size_t)j * ld3 + C + d);
                        r += ds[(size_t)t * T + j] * k;
                        m += dse[(size_t)t * T + j] * fabs(k);
                        a += (fabs(ds[(size_t)t * T + j]) + dse[(size_t)t * T + j]) * fabs(k);
                    }
                    judge(fb, r, m + gam(T) * a + 0x1p-120 * T, dqkv[q0 + (size_t)t * ld3 + d]);
                }
            for (int j = 0; j < T; j++) /* dk, dv: sums over the query blocks, in fp32 */
                for (int d = 0; d < hs; d++) {
                    double rk = 0, mk = 0, ak = 0, rv = 0, mv = 0, av = 0;
                    for (int t = j; t < T; t++) {
                        double q = X(qkv, q0 + (size_t)t * ld3 + d), g = X(dout, o0 + (size_t)t * C + d);
                        size_t i = (size_t)t * T + j;
                        rk += ds[i] * q, mk += dse[i] * fabs(q), ak += (fabs(ds[i]) + dse[i]) * fabs(q);
                        rv += p[i] * g, mv += pe[i] * fabs(g), av += (fabs(p[i]) + pe[i]) * fabs(g);
                    }
                    int n = T + T / QBLOCK + 1;
                    judge(fb, rk, mk + gam(n) * ak + 0x1p-120 * n, dqkv[q0 + (size_t)j * ld3 + C + d]);
                    judge(fb, rv, mv + gam(n) * av + 0x1p-120 * n,
                          dqkv[q0 + (size_t)j * ld3 + 2 * C + d]);
                }
        }
#undef X
    (void)label;
    free(p), free(pe), free(ds), free(dse), free(s), free(sa);
}

/* Runs one shape on `threads` threads; returns out (bf16), lse, dqkv (bf16) in *res. */
typedef struct {
    bf16 *out, *dqkv;
    float *lse;
} result;

static result run(shape sh, int precision, int threads, const pair *qkv, const pair *dout) {
    size_t N = (size_t)sh.B * sh.T;
    gptx_backend *be = make_backend(precision, threads);
    result r = {calloc(N * sh.C, 2), calloc(N * 3 * sh.C, 2),
                calloc((size_t)sh.B * sh.NH * sh.T, sizeof(float))};
    memset(r.dqkv, 0xff, N * 3 * sh.C * 2); /* NaN: every element must be written */
    CHECK_OK(ops->attention_forward(be, (float *)r.out, r.lse, NULL, NULL, (const float *)qkv->h,
                                    sh.B, sh.T, sh.C, sh.NH));
    CHECK_OK(ops->attention_backward(be, (float *)r.dqkv, (const float *)dout->h, (const float *)qkv->h,
                                     (const float *)r.out, r.lse, NULL, NULL, sh.B, sh.T, sh.C,
                                     sh.NH));
    ops->destroy(be);
    return r;
}

static void result_free(result *r) { free(r->out), free(r->dqkv), free(r->lse); }

static void test_shape(shape sh) {
    size_t N = (size_t)sh.B * sh.T;
    pair qkv = pair_rand(N * 3 * sh.C, 1.5f), dout = pair_rand(N * sh.C, 1.0f);
    result r1 = run(sh, GPTX_PRECISION_BF16_PURE, 1, &qkv, &dout);
    result r3 = run(sh, GPTX_PRECISION_BF16, 3, &qkv, &dout);
    CHECK(memcmp(r1.out, r3.out, N * sh.C * 2) == 0);
    CHECK(memcmp(r1.lse, r3.lse, (size_t)sh.B * sh.NH * sh.T * sizeof(float)) == 0);
    CHECK(memcmp(r1.dqkv, r3.dqkv, N * 3 * sh.C * 2) == 0);
    tally fo = {0}, fb = {0}, oo = {0}, ob = {0};
    double lw = 0, lw_old = 0;
    check_shape("bf16 P, dS", 1, sh, qkv.h, dout.h, r1.out, r1.lse, r1.dqkv, &fo, &fb, &lw);
    check_shape("fp32 P, dS", 0, sh, qkv.h, dout.h, r1.out, r1.lse, r1.dqkv, &oo, &ob, &lw_old);
    printf("B %d T %4d C %3d NH %d (hs %2d), 1 and 3 threads the same bits; against the reference:\n"
           "  out  %6zu: %6zu decided, %zu of them differ, %zu outside the span; lse worst %.2f of "
           "its bound\n"
           "  dqkv %6zu: %6zu decided, %zu of them differ, %zu outside the span\n"
           "  unrounded P, dS (the old numerics): out %zu of %zu and dqkv %zu of %zu decided elements "
           "differ\n",
           sh.B, sh.T, sh.C, sh.NH, sh.C / sh.NH, fo.n, fo.decided, fo.wrong_decided, fo.outside,
           lw, fb.n, fb.decided, fb.wrong_decided, fb.outside, oo.wrong_decided, oo.decided,
           ob.wrong_decided, ob.decided);
    CHECK(fo.wrong_decided == 0 && fo.outside == 0);
    CHECK(fb.wrong_decided == 0 && fb.outside == 0);
    CHECK(lw <= 1.0);
    CHECK(fo.decided >= fo.n * 4 / 10 && fb.decided >= fb.n * 4 / 10);
    /* the new numerics are not the old ones: many elements the old
     * reference decides come out otherwise */
    CHECK(oo.wrong_decided >= oo.decided / 20 + 1);
    CHECK(ob.wrong_decided >= ob.decided / 20 + 1);
    pair_free(&qkv), pair_free(&dout);
    result_free(&r1), result_free(&r3);
}

int main(void) {
    ops = gptx_cpu_backend_ops();
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        printf("test_cpu_attention_bf16: this build has no oneDNN: the bf16 policies are unavailable\n");
        return SKIP_EXIT;
    }
    static const shape shapes[] = {
        {2, 19, 40, 4},   /* one query block, hs 10 */
        {2, 150, 96, 3},  /* three blocks with a tail, hs 32 */
        {1, 130, 128, 2}, /* hs 64 (GPT-2) */
        {1, 800, 32, 2},  /* keys past one product tile (768 columns), hs 16 */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) test_shape(shapes[i]);
    return check_exit("test_cpu_attention_bf16");
}
