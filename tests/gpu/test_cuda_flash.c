/* The tensor-core attention kernels (backends/cuda/cuda_flash.cu: bf16, head
 * size 64 and 128) against a float64 reference computed from the same bf16
 * inputs, at odd shapes: T = 1, 17, 65, 200 and B * NH = 1, 3, 5, 7.
 *
 * The bound, per element, from what the kernels round (u = 2^-8, bf16's unit
 * roundoff; every product accumulates in fp32):
 *   out (t, d):  u |o| + (u + 2^-16) M,  M = sum_s p_ts |v_sd|   (the output and
 *                P rounded to bf16; the 2^-16 covers fp32 sums and exp2)
 *   lse (t):     2^-20 (1 + |lse|) + T 2^-23
 *   dS (t, s):   u |dS| + 2^-14 |dS| + p (|dD_t| + hs 2^-22 A_ts),  A_ts = sum_d |dO_td| |v_sd|,
 *                dD_t = D_t (from the kernels' own bf16 out, in fp32) - D_t (exact)
 *   dV (s, d):   u |dV| + (u + 2^-16) sum_t p_ts |dO_td|
 *   dK (s, d):   u |dK| + scale sum_t e_dS(t, s) |q_td|;  dQ (t, d): likewise with k
 * The test prints the largest error as a fraction of its bound. Also: the
 * tensor-core path is bitwise repeatable, writes every element of dqkv, is
 * not the CUDA-core path (another bits); a misaligned buffer falls back to
 * the CUDA-core kernels (the same bits as the GPTX_ATTENTION_FLASH_SIMT
 * variant); and generation's key/value-cache attention -- prefill, then 5
 * rows, then one at a time -- gives every row the training kernel's bits. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "bf16_round.h"
#include "check.h"
#include "cuda_test_util.h"

typedef struct {
    const gptx_backend_ops *ops;
    gptx_backend_ops simt; /* the GPTX_ATTENTION_FLASH_SIMT instance */
    gptx_backend *be;
} flash_env;

/* ---- bf16 buffers ------------------------------------------------------------------ */

static uint16_t *h16_rand(size_t n, uint64_t seed, float lo, float hi) {
    float *f = malloc(n * sizeof *f);
    uint16_t *h = malloc((n + 1) * sizeof *h);
    test_fill(f, n, seed, lo, hi);
    for (size_t i = 0; i < n; i++) h[i] = gptx_bf16_round_nearest(f[i]);
    h[n] = 0;
    free(f);
    return h;
}

/* device bf16 buffer of n elements, offset by `shift` elements from a
 * 16-byte aligned allocation (*base, to free) */
static void *d16(flash_env *e, size_t n, int shift, void **base) {
    void *p = NULL;
    if (e->ops->alloc(e->be, (n + (size_t)shift + 8) * 2, &p) != GPTX_OK) {
        fprintf(stderr, "device alloc: %s\n", gptx_last_error());
        exit(1);
    }
    *base = p;
    return (char *)p + 2 * shift;
}

/* bits of the host array into a device bf16 buffer (through the fp32 upload,
 * which copies bytes from a 4-byte boundary: an element before dst is read
 * back first and kept) */
static void up16(flash_env *e, void *dst, const uint16_t *src, size_t n) {
    uintptr_t a = (uintptr_t)dst;
    int odd = (a % 4) != 0;
    size_t words = (n + odd + 1) / 2;
    uint16_t *tmp = calloc(words * 2, sizeof *tmp);
    if (odd) CHECK_OK(e->ops->download_f32(e->be, (float *)tmp, (const float *)(a - 2), 1));
    memcpy(tmp + odd, src, n * 2);
    CHECK_OK(e->ops->upload_f32(e->be, (float *)(a - 2 * odd), (const float *)tmp, words));
    free(tmp);
}

static uint16_t *down16(flash_env *e, const void *src, size_t n) {
    uintptr_t a = (uintptr_t)src;
    int odd = (a % 4) != 0;
    size_t words = (n + odd + 1) / 2;
    uint16_t *tmp = malloc(words * 4), *h = malloc(n * 2 + 2);
    CHECK_OK(e->ops->download_f32(e->be, (float *)tmp, (const float *)(a - 2 * odd), words));
    memcpy(h, tmp + odd, n * 2);
    free(tmp);
    return h;
}

static float *downf(flash_env *e, const float *src, size_t n) {
    float *h = malloc(n * sizeof *h + 4);
    CHECK_OK(e->ops->download_f32(e->be, h, src, n));
    return h;
}

static float wid(uint16_t h) { return gptx_bf16_widen(h); }

/* ---- the float64 reference and the bounds --------------------------------------------- */

typedef struct {
    int B, T, C, NH, hs;
    double scale;
    double *out, *mout, *lse;             /* (B, T, C), M of the out bound, (B, NH, T) */
    double *dqkv, *bound;                 /* (B, T, 3C): gradient and its bound */
} reference;

#define UB (1.0 / 256.0) /* bf16 unit roundoff: half an ulp, 2^-8 relative */

static double qkv_at(const uint16_t *qkv, const reference *r, int b, int t, int part, int h,
                     int d) {
    return wid(qkv[((size_t)b * r->T + t) * 3 * r->C + (size_t)part * r->C + (size_t)h * r->hs + d]);
}

/* probabilities p (T, T) of head (b, h), rows t over keys s <= t */
static void ref_probs(const uint16_t *qkv, reference *r, int b, int h, double *p) {
    int T = r->T;
    for (int t = 0; t < T; t++) {
        double m = -INFINITY, l = 0.0;
        for (int s = 0; s <= t; s++) {
            double x = 0.0;
            for (int d = 0; d < r->hs; d++) x += qkv_at(qkv, r, b, t, 0, h, d) * qkv_at(qkv, r, b, s, 1, h, d);
            p[(size_t)t * T + s] = x * r->scale;
            if (x * r->scale > m) m = x * r->scale;
        }
        for (int s = 0; s <= t; s++) l += exp(p[(size_t)t * T + s] - m);
        r->lse[((size_t)b * r->NH + h) * T + t] = m + log(l);
        for (int s = 0; s <= t; s++) p[(size_t)t * T + s] = exp(p[(size_t)t * T + s] - m) / l;
    }
}

static void ref_forward_head(const uint16_t *qkv, reference *r, int b, int h, const double *p) {
    int T = r->T, C = r->C;
    for (int t = 0; t < T; t++)
        for (int d = 0; d < r->hs; d++) {
            double o = 0.0, m = 0.0;
            for (int s = 0; s <= t; s++) {
                double v = qkv_at(qkv, r, b, s, 2, h, d);
                o += p[(size_t)t * T + s] * v;
                m += p[(size_t)t * T + s] * fabs(v);
            }
            size_t i = ((size_t)b * T + t) * C + (size_t)h * r->hs + d;
            r->out[i] = o;
            r->mout[i] = m;
        }
}

/* gradient and bound of head (b, h); dout and the kernels' out (bf16) */
static void ref_backward_head(const uint16_t *qkv, const uint16_t *dout, const uint16_t *gout,
                              reference *r, int b, int h, const double *p) {
    int T = r->T, C = r->C, hs = r->hs;
    size_t TT = (size_t)T * T;
    double *ds = calloc(TT, sizeof *ds), *eds = calloc(TT, sizeof *eds);
    for (int t = 0; t < T; t++) {
        size_t o = ((size_t)b * T + t) * C + (size_t)h * hs;
        double D = 0.0, dD = 0.0, mag = 0.0;
        for (int d = 0; d < hs; d++) {
            D += wid(dout[o + d]) * r->out[o + d];
            dD += wid(dout[o + d]) * (wid(gout[o + d]) - r->out[o + d]);
            mag += fabs(wid(dout[o + d]) * wid(gout[o + d]));
        }
        dD = fabs(dD) + hs * ldexp(mag, -23);
        for (int s = 0; s <= t; s++) {
            double dp = 0.0, a = 0.0;
            for (int d = 0; d < hs; d++) {
                double v = qkv_at(qkv, r, b, s, 2, h, d);
                dp += wid(dout[o + d]) * v;
                a += fabs(wid(dout[o + d]) * v);
            }
            double pr = p[(size_t)t * T + s], g = pr * (dp - D);
            ds[(size_t)t * T + s] = g;
            eds[(size_t)t * T + s] = (UB + ldexp(1.0, -14)) * fabs(g) + pr * (dD + hs * ldexp(a, -22));
        }
    }
    for (int x = 0; x < T; x++) /* x: query row for dQ, key row for dK and dV */
        for (int d = 0; d < hs; d++) {
            double gq = 0, bq = 0, gk = 0, bk = 0, gv = 0, bv = 0;
            for (int y = 0; y <= x; y++) { /* keys y <= query x */
                gq += ds[(size_t)x * T + y] * qkv_at(qkv, r, b, y, 1, h, d);
                bq += eds[(size_t)x * T + y] * fabs(qkv_at(qkv, r, b, y, 1, h, d));
            }
            for (int y = x; y < T; y++) { /* queries y >= key x */
                size_t o = ((size_t)b * T + y) * C + (size_t)h * hs + d;
                gk += ds[(size_t)y * T + x] * qkv_at(qkv, r, b, y, 0, h, d);
                bk += eds[(size_t)y * T + x] * fabs(qkv_at(qkv, r, b, y, 0, h, d));
                gv += p[(size_t)y * T + x] * wid(dout[o]);
                bv += p[(size_t)y * T + x] * fabs(wid(dout[o]));
            }
            size_t i = ((size_t)b * T + x) * 3 * C + (size_t)h * hs + d;
            gq *= r->scale, bq *= r->scale, gk *= r->scale, bk *= r->scale;
            r->dqkv[i] = gq;
            r->bound[i] = UB * fabs(gq) + bq;
            r->dqkv[i + C] = gk;
            r->bound[i + C] = UB * fabs(gk) + bk;
            r->dqkv[i + 2 * C] = gv;
            r->bound[i + 2 * C] = UB * fabs(gv) + (UB + ldexp(1.0, -16)) * bv;
        }
    free(ds);
    free(eds);
}

/* ---- comparisons --------------------------------------------------------------------- */

/* largest |got - want| / bound; a NaN or an exceeded bound fails */
static double against(const char *what, const double *want, const double *bound,
                      const uint16_t *got16, const float *got32, size_t n) {
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double g = got16 ? wid(got16[i]) : got32[i];
        double ratio = fabs(g - want[i]) / bound[i];
        if (!(ratio <= 1.0) && bad++ < 3)
            fprintf(stderr, "  %s[%zu] = %.9g, reference %.9g, bound %.3g\n", what, i, g, want[i],
                    bound[i]);
        if (ratio > worst || ratio != ratio) worst = ratio;
    }
    CHECK(bad == 0);
    return worst;
}

static size_t differ16(const uint16_t *a, const uint16_t *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += a[i] != b[i];
    return k;
}

/* ---- the cases ----------------------------------------------------------------------- */

typedef struct {
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    void *bases[4];
} dev_set;

static void dev_alloc(flash_env *e, dev_set *s, int B, int T, int C, int NH, int shift) {
    size_t BT = (size_t)B * T;
    s->qkv = d16(e, BT * 3 * C, shift, &s->bases[0]);
    s->out = d16(e, BT * C, shift, &s->bases[1]);
    s->dout = d16(e, BT * C, shift, &s->bases[2]);
    s->dqkv = d16(e, BT * 3 * C, shift, &s->bases[3]);
    void *l = NULL;
    CHECK_OK(e->ops->alloc(e->be, (size_t)B * NH * T * 4 + 4, &l));
    s->lse = l;
}

static void dev_free(flash_env *e, dev_set *s) {
    for (int i = 0; i < 4; i++) e->ops->free(e->be, s->bases[i]);
    e->ops->free(e->be, s->lse);
}

/* forward then backward on ops; out, lse, dqkv downloaded */
static void run(flash_env *e, const gptx_backend_ops *ops, dev_set *s, const uint16_t *qkv,
                const uint16_t *dout, int B, int T, int C, int NH, uint16_t **out, float **lse,
                uint16_t **dqkv) {
    size_t BT = (size_t)B * T;
    up16(e, s->qkv, qkv, BT * 3 * C);
    up16(e, s->dout, dout, BT * C);
    CHECK_OK(ops->fill_act(e->be, s->dqkv, NAN, BT * 3 * C)); /* every element must be written */
    CHECK_OK(ops->attention_forward(e->be, s->out, s->lse, NULL, NULL, s->qkv, B, T, C, NH));
    CHECK_OK(ops->attention_backward(e->be, s->dqkv, s->dout, s->qkv, s->out, s->lse, NULL, NULL,
                                     B, T, C, NH));
    *out = down16(e, s->out, BT * C);
    *lse = downf(e, s->lse, (size_t)B * NH * T);
    *dqkv = down16(e, s->dqkv, BT * 3 * C);
}

static void case_shape(flash_env *e, int B, int T, int C, int NH, uint64_t seed) {
    int hs = C / NH;
    size_t BT = (size_t)B * T, n3 = BT * 3 * C, nl = (size_t)B * NH * T;
    uint16_t *qkv = h16_rand(n3, seed, -2.0f, 2.0f), *dout = h16_rand(BT * C, seed + 1, -1, 1);
    dev_set s;
    dev_alloc(e, &s, B, T, C, NH, 0);
    uint16_t *out, *dq, *out2, *dq2, *out3, *dq3;
    float *lse, *lse2, *lse3;
    run(e, e->ops, &s, qkv, dout, B, T, C, NH, &out, &lse, &dq);
    run(e, e->ops, &s, qkv, dout, B, T, C, NH, &out2, &lse2, &dq2);
    run(e, &e->simt, &s, qkv, dout, B, T, C, NH, &out3, &lse3, &dq3);

    reference r = {B, T, C, NH, hs, 1.0 / sqrt((double)hs), NULL, NULL, NULL, NULL, NULL};
    r.out = calloc(BT * C, 8), r.mout = calloc(BT * C, 8), r.lse = calloc(nl, 8);
    r.dqkv = calloc(n3, 8), r.bound = calloc(n3, 8);
    double *p = calloc((size_t)T * T, sizeof *p), *bo = calloc(BT * C, 8), *bl = calloc(nl, 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            ref_probs(qkv, &r, b, h, p);
            ref_forward_head(qkv, &r, b, h, p);
            ref_backward_head(qkv, dout, out, &r, b, h, p);
        }
    for (size_t i = 0; i < BT * C; i++)
        bo[i] = UB * fabs(r.out[i]) + (UB + ldexp(1.0, -16)) * r.mout[i] + 1e-30;
    for (size_t i = 0; i < nl; i++) bl[i] = ldexp(1.0 + fabs(r.lse[i]), -20) + T * ldexp(1.0, -23);
    double wo = against("out", r.out, bo, out, NULL, BT * C);
    double wl = against("lse", r.lse, bl, NULL, lse, nl);
    double wg = against("dqkv", r.dqkv, r.bound, dq, NULL, n3);
    size_t rep = differ16(out, out2, BT * C) + differ16(dq, dq2, n3) +
                 (size_t)(memcmp(lse, lse2, nl * 4) != 0);
    size_t simt = differ16(out, out3, BT * C) + differ16(dq, dq3, n3);
    printf("  B %d T %3d C %3d NH %d (hs %3d): of the bound out %.3f lse %.3f dqkv %.3f; "
           "repeat %s; %zu elements differ from the CUDA-core kernels\n",
           B, T, C, NH, hs, wo, wl, wg, rep ? "DIFFERS" : "bitwise", simt);
    CHECK(rep == 0);
    CHECK(simt > 0 || T == 1); /* the tensor-core path ran (T = 1: p = 1, both exact) */
    dev_free(e, &s);
    void *fr[] = {qkv, dout, out, dq, out2, dq2, out3, dq3, lse, lse2, lse3, r.out, r.mout,
                  r.lse, r.dqkv, r.bound, p, bo, bl};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* Buffers one element off 16-byte alignment take the CUDA-core kernels:
 * the same bits as the GPTX_ATTENTION_FLASH_SIMT variant. */
static void case_misaligned(flash_env *e) {
    int B = 1, T = 33, C = 128, NH = 2;
    size_t BT = (size_t)B * T;
    uint16_t *qkv = h16_rand(BT * 3 * C, 5, -2, 2), *dout = h16_rand(BT * C, 6, -1, 1);
    dev_set s;
    dev_alloc(e, &s, B, T, C, NH, 1);
    uint16_t *o1, *g1, *o2, *g2;
    float *l1, *l2;
    run(e, e->ops, &s, qkv, dout, B, T, C, NH, &o1, &l1, &g1);
    run(e, &e->simt, &s, qkv, dout, B, T, C, NH, &o2, &l2, &g2);
    size_t d = differ16(o1, o2, BT * C) + differ16(g1, g2, BT * 3 * C);
    printf("  misaligned buffers (2-byte offset): %zu elements differ from the CUDA-core kernels\n",
           d);
    CHECK(d == 0);
    dev_free(e, &s);
    void *fr[] = {qkv, dout, o1, g1, o2, g2, l1, l2};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

/* Generation: prefill P rows, then 5 rows, then one at a time; every row
 * equals the training forward's bit for bit. */
static void case_kv(flash_env *e, int T, int C, int NH) {
    int hs = C / NH, P = T / 3;
    size_t n3 = (size_t)T * 3 * C, nout = (size_t)T * C;
    uint16_t *qkv = h16_rand(n3, 77 + T, -2, 2);
    void *b0, *b1, *b2, *b3, *b4;
    float *lse = NULL, *lse2 = NULL;
    void *dq = d16(e, n3, 0, &b0), *full = d16(e, nout, 0, &b1), *dout = d16(e, nout, 0, &b2);
    void *kc = d16(e, nout, 0, &b3), *vc = d16(e, nout, 0, &b4);
    CHECK_OK(e->ops->alloc(e->be, (size_t)NH * T * 4, (void **)&lse));
    CHECK_OK(e->ops->alloc(e->be, (size_t)NH * T * 4, (void **)&lse2));
    up16(e, dq, qkv, n3);
    CHECK_OK(e->ops->attention_forward(e->be, full, lse, NULL, NULL, dq, 1, T, C, NH));
    CHECK_OK(e->ops->attention_kv_forward(e->be, dout, lse2, dq, kc, vc, P, 0, T, C, NH));
    for (int r = P; r < T;) {
        int n = r == P ? 5 : 1;
        if (r + n > T) n = T - r;
        float *o = (float *)((char *)dout + (size_t)r * C * 2); /* [act] rows, bf16 */
        const float *q = (const float *)((char *)dq + (size_t)r * 3 * C * 2);
        CHECK_OK(e->ops->attention_kv_forward(e->be, o, lse2, q, kc, vc, n, r, T, C, NH));
        r += n;
    }
    uint16_t *a = down16(e, full, nout), *g = down16(e, dout, nout);
    size_t d = differ16(a, g, nout);
    printf("  kv cache T %d C %d NH %d (hs %d): prefill %d, then 5, then 1 by 1: %zu of %zu "
           "elements differ from the training forward\n",
           T, C, NH, hs, P, d, nout);
    CHECK(d == 0);
    void *dev[] = {b0, b1, b2, b3, b4, lse, lse2};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) e->ops->free(e->be, dev[i]);
    free(qkv);
    free(a);
    free(g);
}

int main(void) {
    flash_env e;
    memset(&e, 0, sizeof e);
    e.ops = cuda_test_ops();
    int rc = cuda_test_backend(&e.be, "bf16");
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip("test_cuda_flash");
    if (rc != GPTX_OK) {
        fprintf(stderr, "CUDA backend (bf16): %s\n", gptx_last_error());
        return 1;
    }
    e.simt = *e.ops;
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH_SIMT, 1, 1, 1};
    REQUIRE_OK(e.ops->instance_ops(e.be, &v, &e.simt));
    printf("test_cuda_flash on %s\n", CUDA_TEST_KIND);
    /* B, T, C, NH: head size 64 and 128, B * NH = 1, 3, 5, 7 */
    int shapes[][4] = {{1, 1, 64, 1},   {3, 17, 64, 1},   {1, 65, 192, 3}, {1, 200, 64, 1},
                       {1, 17, 384, 3}, {5, 65, 128, 1}, {7, 1, 128, 1},  {1, 200, 128, 1}};
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++)
        case_shape(&e, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 11 + i);
    case_misaligned(&e);
    case_kv(&e, 70, 128, 2);
    case_kv(&e, 130, 128, 1);
    gptx_memory_stats st;
    gptx_memory_stats_init(&st);
    e.ops->memory_stats(e.be, &st);
    CHECK(st.allocated == 0);
    e.ops->destroy(e.be);
    return check_exit("test_cuda_flash");
}
