/* The tensor-core attention kernels (backends/cuda/cuda_flash.cu: head size
 * 64 and 128) under the bf16 and the tf32 policy, against a float64
 * reference computed from the kernels' operands -- the same bf16 inputs;
 * for tf32 the fp32 inputs rounded to tf32 (cvt.rna: nearest, ties away) --
 * at odd shapes: T = 1, 17, 65, 200 and B * NH = 1, 3, 5, 7.
 *
 * The bound, per element, from what the kernels round: u is the operands'
 * unit roundoff (bf16 2^-8, tf32 2^-11; P and dS become operands), uo the
 * outputs' (bf16 2^-8; tf32 stores fp32: 2^-24); every product accumulates
 * in fp32:
 *   out (t, d):  uo |o| + (u + 2^-16) M,  M = sum_s p_ts |v_sd|   (the output and
 *                P rounded; the 2^-16 covers fp32 sums and exp2)
 *   lse (t):     2^-20 (1 + |lse|) + T 2^-23
 *   dS (t, s):   u |dS| + 2^-14 |dS| + p (|dD_t| + hs 2^-22 A_ts),  A_ts = sum_d |dO_td| |v_sd|,
 *                dD_t = D_t (the kernels': from their own out and the stored dO, in fp32)
 *                - D_t (exact, from the operands)
 *   dV (s, d):   uo |dV| + (u + 2^-16) sum_t p_ts |dO_td|
 *   dK (s, d):   uo |dK| + scale sum_t e_dS(t, s) |q_td|;  dQ (t, d): likewise with k
 * The test prints the largest error as a fraction of its bound. Also: the
 * tensor-core path is bitwise repeatable, writes every element of dqkv, is
 * not the CUDA-core path (other bits); every tile configuration
 * (GPTX_VARIANT_ATTENTION_TILES 1..N) gives the default's bits, forward and
 * backward; a misaligned buffer falls back to the CUDA-core kernels (the
 * same bits as the GPTX_ATTENTION_FLASH_SIMT variant); and generation's
 * key/value-cache attention -- prefill, then 5 rows, then one at a time, in
 * the default configuration and in the last -- gives every row the
 * training kernel's bits. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>

#include "bf16_round.h"
#include "check.h"
#include "cuda_test_util.h"

/* tile configurations of the cuda backend (GPTX_CUDA_FLASH_VARIANTS, a private
 * header's; env_open checks that NVAR + 1 is refused) */
#define NVAR 5

typedef struct {
    const char *policy;     /* "bf16" or "tf32" */
    int bf16;               /* storage: bf16, else fp32 */
    double u, uo;           /* operand and output unit roundoff */
    const gptx_backend_ops *ops;
    gptx_backend_ops simt;  /* the GPTX_ATTENTION_FLASH_SIMT instance */
    gptx_backend_ops tiles[NVAR]; /* GPTX_VARIANT_ATTENTION_TILES 1..NVAR */
    gptx_backend *be;
} flash_env;

/* ---- buffers: host float arrays of values the storage holds exactly ------------------ */

/* cvt.rna.tf32.f32 on the host (finite x): 10 fraction bits, nearest, ties away */
static float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

/* a stored value as the kernels' operand */
static double opv(const flash_env *e, float x) { return e->bf16 ? x : tf32(x); }

static float *h_rand(const flash_env *e, size_t n, uint64_t seed, float lo, float hi) {
    float *f = malloc((n + 1) * sizeof *f);
    test_fill(f, n, seed, lo, hi);
    if (e->bf16)
        for (size_t i = 0; i < n; i++) f[i] = gptx_bf16_widen(gptx_bf16_round_nearest(f[i]));
    f[n] = 0;
    return f;
}

static size_t esz(const flash_env *e) { return e->bf16 ? 2 : 4; }

/* device buffer of n elements, offset by `shift` elements from a 16-byte
 * aligned allocation (*base, to free) */
static void *dbuf(flash_env *e, size_t n, int shift, void **base) {
    void *p = NULL;
    if (e->ops->alloc(e->be, (n + (size_t)shift + 8) * esz(e), &p) != GPTX_OK) {
        fprintf(stderr, "device alloc: %s\n", gptx_last_error());
        exit(1);
    }
    *base = p;
    return (char *)p + esz(e) * shift;
}

/* host values into a device buffer of the storage type (bf16 bits go through
 * the fp32 upload, which copies bytes from a 4-byte boundary: an element
 * before dst is read back first and kept) */
static void up(flash_env *e, void *dst, const float *src, size_t n) {
    if (!e->bf16) {
        CHECK_OK(e->ops->upload_f32(e->be, dst, src, n));
        return;
    }
    uintptr_t a = (uintptr_t)dst;
    int odd = (a % 4) != 0;
    size_t words = (n + odd + 1) / 2;
    uint16_t *tmp = calloc(words * 2, sizeof *tmp);
    if (odd) CHECK_OK(e->ops->download_f32(e->be, (float *)tmp, (const float *)(a - 2), 1));
    for (size_t i = 0; i < n; i++) tmp[odd + i] = gptx_bf16_round_nearest(src[i]);
    CHECK_OK(e->ops->upload_f32(e->be, (float *)(a - 2 * odd), (const float *)tmp, words));
    free(tmp);
}

/* a device buffer of the storage type as host floats (bf16 widened) */
static float *down(flash_env *e, const void *src, size_t n) {
    float *h = malloc(n * sizeof *h + 4);
    if (!e->bf16) {
        CHECK_OK(e->ops->download_f32(e->be, h, src, n));
        return h;
    }
    uintptr_t a = (uintptr_t)src;
    int odd = (a % 4) != 0;
    size_t words = (n + odd + 1) / 2;
    uint16_t *tmp = malloc(words * 4);
    CHECK_OK(e->ops->download_f32(e->be, (float *)tmp, (const float *)(a - 2 * odd), words));
    for (size_t i = 0; i < n; i++) h[i] = gptx_bf16_widen(tmp[odd + i]);
    free(tmp);
    return h;
}

static float *downf(flash_env *e, const float *src, size_t n) {
    float *h = malloc(n * sizeof *h + 4);
    CHECK_OK(e->ops->download_f32(e->be, h, src, n));
    return h;
}

/* ---- the float64 reference and the bounds --------------------------------------------- */

typedef struct {
    const flash_env *e;
    int B, T, C, NH, hs;
    double scale;
    double *out, *mout, *lse;             /* (B, T, C), M of the out bound, (B, NH, T) */
    double *dqkv, *bound;                 /* (B, T, 3C): gradient and its bound */
} reference;

/* element d of head h, part (0 q, 1 k, 2 v) of row t of batch b, as the operand */
static double qkv_at(const float *qkv, const reference *r, int b, int t, int part, int h, int d) {
    return opv(r->e, qkv[((size_t)b * r->T + t) * 3 * r->C + (size_t)part * r->C +
                         (size_t)h * r->hs + d]);
}

/* probabilities p (T, T) of head (b, h), rows t over keys s <= t */
static void ref_probs(const float *qkv, reference *r, int b, int h, double *p) {
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

static void ref_forward_head(const float *qkv, reference *r, int b, int h, const double *p) {
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

/* D's error bound for row o (its elements o..o+hs-1): the kernels' D is
 * sum dout * gout (their stored out) in fp32; the exact one uses the
 * operands and the exact out */
static double ref_dD(const reference *r, const float *dout, const float *gout, size_t o) {
    double D = 0.0, Dk = 0.0, mag = 0.0;
    for (int d = 0; d < r->hs; d++) {
        D += opv(r->e, dout[o + d]) * r->out[o + d];
        Dk += (double)dout[o + d] * gout[o + d];
        mag += fabs((double)dout[o + d] * gout[o + d]);
    }
    return fabs(Dk - D) + r->hs * ldexp(mag, -23);
}

/* dS and its error e_dS (T, T) of head (b, h) */
static void ref_ds(const float *qkv, const float *dout, const float *gout, const reference *r,
                   int b, int h, const double *p, double *ds, double *eds) {
    int T = r->T, C = r->C, hs = r->hs;
    double u = r->e->u;
    for (int t = 0; t < T; t++) {
        size_t o = ((size_t)b * T + t) * C + (size_t)h * hs;
        double D = 0.0, dD = ref_dD(r, dout, gout, o);
        for (int d = 0; d < hs; d++) D += opv(r->e, dout[o + d]) * r->out[o + d];
        for (int s = 0; s <= t; s++) {
            double dp = 0.0, a = 0.0;
            for (int d = 0; d < hs; d++) {
                double v = qkv_at(qkv, r, b, s, 2, h, d), g = opv(r->e, dout[o + d]);
                dp += g * v;
                a += fabs(g * v);
            }
            double pr = p[(size_t)t * T + s], g = pr * (dp - D);
            ds[(size_t)t * T + s] = g;
            eds[(size_t)t * T + s] = (u + ldexp(1.0, -14)) * fabs(g) + pr * (dD + hs * ldexp(a, -22));
        }
    }
}

/* gradient and bound of head (b, h); dout and the kernels' out */
static void ref_backward_head(const float *qkv, const float *dout, const float *gout,
                              reference *r, int b, int h, const double *p) {
    int T = r->T, C = r->C, hs = r->hs;
    size_t TT = (size_t)T * T;
    double *ds = calloc(TT, sizeof *ds), *eds = calloc(TT, sizeof *eds);
    double u = r->e->u, uo = r->e->uo;
    ref_ds(qkv, dout, gout, r, b, h, p, ds, eds);
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
                gv += p[(size_t)y * T + x] * opv(r->e, dout[o]);
                bv += p[(size_t)y * T + x] * fabs(opv(r->e, dout[o]));
            }
            size_t i = ((size_t)b * T + x) * 3 * C + (size_t)h * hs + d;
            gq *= r->scale, bq *= r->scale, gk *= r->scale, bk *= r->scale;
            r->dqkv[i] = gq;
            r->bound[i] = uo * fabs(gq) + bq;
            r->dqkv[i + C] = gk;
            r->bound[i + C] = uo * fabs(gk) + bk;
            r->dqkv[i + 2 * C] = gv;
            r->bound[i + 2 * C] = uo * fabs(gv) + (u + ldexp(1.0, -16)) * bv;
        }
    free(ds);
    free(eds);
}

/* ---- comparisons --------------------------------------------------------------------- */

/* largest |got - want| / bound; a NaN or an exceeded bound fails */
static double against(const char *what, const double *want, const double *bound,
                      const float *got, size_t n) {
    double worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        double ratio = fabs(got[i] - want[i]) / bound[i];
        if (!(ratio <= 1.0) && bad++ < 3)
            fprintf(stderr, "  %s[%zu] = %.9g, reference %.9g, bound %.3g\n", what, i, got[i],
                    want[i], bound[i]);
        if (ratio > worst || ratio != ratio) worst = ratio;
    }
    CHECK(bad == 0);
    return worst;
}

/* elements whose bits differ */
static size_t differ(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof a[i]) != 0;
    return k;
}

/* ---- the cases ----------------------------------------------------------------------- */

typedef struct {
    void *qkv, *out, *dout, *dqkv;
    float *lse;
    void *bases[4];
} dev_set;

/* out (B, T, C), lse (B, NH, T), dqkv (B, T, 3C) downloaded */
typedef struct {
    float *out, *lse, *dqkv;
} results;

static void dev_alloc(flash_env *e, dev_set *s, int B, int T, int C, int NH, int shift) {
    size_t BT = (size_t)B * T;
    s->qkv = dbuf(e, BT * 3 * C, shift, &s->bases[0]);
    s->out = dbuf(e, BT * C, shift, &s->bases[1]);
    s->dout = dbuf(e, BT * C, shift, &s->bases[2]);
    s->dqkv = dbuf(e, BT * 3 * C, shift, &s->bases[3]);
    void *l = NULL;
    CHECK_OK(e->ops->alloc(e->be, (size_t)B * NH * T * 4 + 4, &l));
    s->lse = l;
}

static void dev_free(flash_env *e, dev_set *s) {
    for (int i = 0; i < 4; i++) e->ops->free(e->be, s->bases[i]);
    e->ops->free(e->be, s->lse);
}

static void results_free(results *r) {
    free(r->out);
    free(r->lse);
    free(r->dqkv);
}

/* forward then backward on ops */
static void run(flash_env *e, const gptx_backend_ops *ops, dev_set *s, const float *qkv,
                const float *dout, int B, int T, int C, int NH, results *res) {
    size_t BT = (size_t)B * T;
    up(e, s->qkv, qkv, BT * 3 * C);
    up(e, s->dout, dout, BT * C);
    CHECK_OK(ops->fill_act(e->be, s->dqkv, NAN, BT * 3 * C)); /* every element must be written */
    CHECK_OK(ops->attention_forward(e->be, s->out, s->lse, NULL, NULL, s->qkv, B, T, C, NH));
    CHECK_OK(ops->attention_backward(e->be, s->dqkv, s->dout, s->qkv, s->out, s->lse, NULL, NULL,
                                     B, T, C, NH));
    res->out = down(e, s->out, BT * C);
    res->lse = downf(e, s->lse, (size_t)B * NH * T);
    res->dqkv = down(e, s->dqkv, BT * 3 * C);
}

/* elements of out, lse and dqkv whose bits differ between a and b */
static size_t differ_all(const results *a, const results *b, size_t nout, size_t nl) {
    return differ(a->out, b->out, nout) + differ(a->lse, b->lse, nl) +
           differ(a->dqkv, b->dqkv, 3 * nout);
}

/* The bound of every output against the reference; the largest fractions */
static void check_bounds(flash_env *e, const float *qkv, const float *dout, const results *got,
                         int B, int T, int C, int NH, double worst[3]) {
    int hs = C / NH;
    size_t BT = (size_t)B * T, n3 = BT * 3 * C, nl = (size_t)B * NH * T;
    reference r = {e, B, T, C, NH, hs, 1.0 / sqrt((double)hs), NULL, NULL, NULL, NULL, NULL};
    r.out = calloc(BT * C, 8), r.mout = calloc(BT * C, 8), r.lse = calloc(nl, 8);
    r.dqkv = calloc(n3, 8), r.bound = calloc(n3, 8);
    double *p = calloc((size_t)T * T, sizeof *p), *bo = calloc(BT * C, 8), *bl = calloc(nl, 8);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            ref_probs(qkv, &r, b, h, p);
            ref_forward_head(qkv, &r, b, h, p);
            ref_backward_head(qkv, dout, got->out, &r, b, h, p);
        }
    for (size_t i = 0; i < BT * C; i++)
        bo[i] = e->uo * fabs(r.out[i]) + (e->u + ldexp(1.0, -16)) * r.mout[i] + 1e-30;
    for (size_t i = 0; i < nl; i++) bl[i] = ldexp(1.0 + fabs(r.lse[i]), -20) + T * ldexp(1.0, -23);
    worst[0] = against("out", r.out, bo, got->out, BT * C);
    worst[1] = against("lse", r.lse, bl, got->lse, nl);
    worst[2] = against("dqkv", r.dqkv, r.bound, got->dqkv, n3);
    void *fr[] = {r.out, r.mout, r.lse, r.dqkv, r.bound, p, bo, bl};
    for (size_t i = 0; i < sizeof fr / sizeof fr[0]; i++) free(fr[i]);
}

static void case_shape(flash_env *e, int B, int T, int C, int NH, uint64_t seed) {
    int hs = C / NH;
    size_t BT = (size_t)B * T, nl = (size_t)B * NH * T;
    float *qkv = h_rand(e, BT * 3 * C, seed, -2.0f, 2.0f), *dout = h_rand(e, BT * C, seed + 1, -1, 1);
    dev_set s;
    dev_alloc(e, &s, B, T, C, NH, 0);
    results got, again, simt, tile;
    run(e, e->ops, &s, qkv, dout, B, T, C, NH, &got);
    run(e, e->ops, &s, qkv, dout, B, T, C, NH, &again);
    run(e, &e->simt, &s, qkv, dout, B, T, C, NH, &simt);
    size_t tiles = 0; /* elements of any configuration that differ from the default's */
    for (int v = 0; v < NVAR; v++) {
        run(e, &e->tiles[v], &s, qkv, dout, B, T, C, NH, &tile);
        size_t d = differ_all(&got, &tile, BT * C, nl);
        if (d) fprintf(stderr, "  tile configuration %d: %zu elements differ\n", v + 1, d);
        tiles += d;
        results_free(&tile);
    }
    double worst[3];
    check_bounds(e, qkv, dout, &got, B, T, C, NH, worst);
    size_t rep = differ_all(&got, &again, BT * C, nl);
    size_t cc = differ(got.out, simt.out, BT * C) + differ(got.dqkv, simt.dqkv, BT * 3 * C);
    printf("  B %d T %3d C %3d NH %d (hs %3d): of the bound out %.3f lse %.3f dqkv %.3f; "
           "repeat %s; tile configurations 1-%d %s; %zu elements differ from the CUDA-core "
           "kernels\n",
           B, T, C, NH, hs, worst[0], worst[1], worst[2], rep ? "DIFFERS" : "bitwise", NVAR,
           tiles ? "DIFFER" : "bitwise", cc);
    CHECK(rep == 0);
    CHECK(tiles == 0);
    CHECK(cc > 0 || T == 1); /* the tensor-core path ran (T = 1: p = 1, both exact) */
    dev_free(e, &s);
    results_free(&got), results_free(&again), results_free(&simt);
    free(qkv);
    free(dout);
}

/* Buffers one element off 16-byte alignment take the CUDA-core kernels:
 * the same bits as the GPTX_ATTENTION_FLASH_SIMT variant. */
static void case_misaligned(flash_env *e) {
    int B = 1, T = 33, C = 128, NH = 2;
    size_t BT = (size_t)B * T;
    float *qkv = h_rand(e, BT * 3 * C, 5, -2, 2), *dout = h_rand(e, BT * C, 6, -1, 1);
    dev_set s;
    dev_alloc(e, &s, B, T, C, NH, 1);
    results a, b;
    run(e, e->ops, &s, qkv, dout, B, T, C, NH, &a);
    run(e, &e->simt, &s, qkv, dout, B, T, C, NH, &b);
    size_t d = differ(a.out, b.out, BT * C) + differ(a.dqkv, b.dqkv, BT * 3 * C);
    printf("  misaligned buffers (%zu-byte offset): %zu elements differ from the CUDA-core "
           "kernels\n",
           esz(e), d);
    CHECK(d == 0);
    dev_free(e, &s);
    results_free(&a), results_free(&b);
    free(qkv);
    free(dout);
}

/* Generation through ops: prefill P rows, then 5 rows, then one at a time;
 * every row equals the training forward's (default configuration) bit for
 * bit. */
static void case_kv(flash_env *e, const gptx_backend_ops *ops, const char *which, int T, int C,
                    int NH) {
    int hs = C / NH, P = T / 3;
    size_t n3 = (size_t)T * 3 * C, nout = (size_t)T * C;
    float *qkv = h_rand(e, n3, 77 + T, -2, 2);
    void *b0, *b1, *b2, *b3, *b4;
    float *lse = NULL, *lse2 = NULL;
    void *dq = dbuf(e, n3, 0, &b0), *full = dbuf(e, nout, 0, &b1), *dout = dbuf(e, nout, 0, &b2);
    void *kc = dbuf(e, nout, 0, &b3), *vc = dbuf(e, nout, 0, &b4);
    CHECK_OK(e->ops->alloc(e->be, (size_t)NH * T * 4, (void **)&lse));
    CHECK_OK(e->ops->alloc(e->be, (size_t)NH * T * 4, (void **)&lse2));
    up(e, dq, qkv, n3);
    CHECK_OK(e->ops->attention_forward(e->be, full, lse, NULL, NULL, dq, 1, T, C, NH));
    CHECK_OK(ops->attention_kv_forward(e->be, dout, lse2, dq, kc, vc, P, 0, T, C, NH));
    for (int r = P; r < T;) {
        int n = r == P ? 5 : 1;
        if (r + n > T) n = T - r;
        float *o = (float *)((char *)dout + (size_t)r * C * esz(e)); /* [act] rows */
        const float *q = (const float *)((char *)dq + (size_t)r * 3 * C * esz(e));
        CHECK_OK(ops->attention_kv_forward(e->be, o, lse2, q, kc, vc, n, r, T, C, NH));
        r += n;
    }
    float *a = down(e, full, nout), *g = down(e, dout, nout);
    size_t d = differ(a, g, nout);
    printf("  kv cache (%s) T %d C %d NH %d (hs %d): prefill %d, then 5, then 1 by 1: %zu of %zu "
           "elements differ from the training forward\n",
           which, T, C, NH, hs, P, d, nout);
    CHECK(d == 0);
    void *dev[] = {b0, b1, b2, b3, b4, lse, lse2};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) e->ops->free(e->be, dev[i]);
    free(qkv);
    free(a);
    free(g);
}

/* The policy's backend and its instances; 0, or 1 when there is no device */
static int env_open(flash_env *e, const char *policy) {
    memset(e, 0, sizeof *e);
    e->policy = policy;
    e->bf16 = strcmp(policy, "bf16") == 0;
    e->u = e->bf16 ? ldexp(1.0, -8) : ldexp(1.0, -11);
    e->uo = e->bf16 ? ldexp(1.0, -8) : ldexp(1.0, -24);
    e->ops = cuda_test_ops();
    int rc = cuda_test_backend(&e->be, policy);
    if (rc == GPTX_ERR_UNSUPPORTED) return 1;
    if (rc != GPTX_OK) {
        fprintf(stderr, "CUDA backend (%s): %s\n", policy, gptx_last_error());
        exit(1);
    }
    e->simt = *e->ops;
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH_SIMT, 1, 1, 1, 0};
    REQUIRE_OK(e->ops->instance_ops(e->be, &v, &e->simt));
    for (int k = 0; k < NVAR; k++) {
        gptx_kernel_variants t = {GPTX_ATTENTION_FLASH, 1, 1, 1, k + 1};
        e->tiles[k] = *e->ops;
        REQUIRE_OK(e->ops->instance_ops(e->be, &t, &e->tiles[k]));
    }
    gptx_kernel_variants bad = {GPTX_ATTENTION_FLASH, 1, 1, 1, NVAR + 1};
    gptx_backend_ops none = *e->ops;
    CHECK(e->ops->instance_ops(e->be, &bad, &none) == GPTX_ERR_UNSUPPORTED);
    return 0;
}

static void run_policy(const char *policy) {
    flash_env e;
    if (env_open(&e, policy)) exit(cuda_test_skip("test_cuda_flash"));
    printf("test_cuda_flash on %s, %s policy (operands: u = 2^%d)\n", CUDA_TEST_KIND, policy,
           e.bf16 ? -8 : -11);
    /* B, T, C, NH: head size 64 and 128, B * NH = 1, 3, 5, 7 */
    int shapes[][4] = {{1, 1, 64, 1},   {3, 17, 64, 1},   {1, 65, 192, 3}, {1, 200, 64, 1},
                       {1, 17, 384, 3}, {5, 65, 128, 1}, {7, 1, 128, 1},  {1, 200, 128, 1}};
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++)
        case_shape(&e, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], 11 + i);
    case_misaligned(&e);
    case_kv(&e, e.ops, "default", 70, 128, 2);
    case_kv(&e, e.ops, "default", 130, 128, 1);
    case_kv(&e, &e.tiles[NVAR - 1], "last configuration", 300, 64, 1);
    gptx_memory_stats st;
    gptx_memory_stats_init(&st);
    e.ops->memory_stats(e.be, &st);
    CHECK(st.allocated == 0);
    e.ops->destroy(e.be);
}

/* GPTX_CUDA_FLASH_TILES sets the default table's configuration: 1..NVAR, and
 * anything else is refused when the backend is created */
static void check_env_tiles(void) {
    gptx_backend *be = NULL;
    setenv("GPTX_CUDA_FLASH_TILES", "6", 1);
    CHECK(cuda_test_backend(&be, "bf16") == GPTX_ERR_INVALID);
    CHECK(strstr(gptx_last_error(), "GPTX_CUDA_FLASH_TILES") != NULL);
    setenv("GPTX_CUDA_FLASH_TILES", "4", 1);
    CHECK(cuda_test_backend(&be, "bf16") == GPTX_OK);
    if (be) cuda_test_ops()->destroy(be);
    unsetenv("GPTX_CUDA_FLASH_TILES");
    printf("  GPTX_CUDA_FLASH_TILES: 6 refused, 4 taken\n");
}

int main(void) {
    unsetenv("GPTX_CUDA_FLASH_TILES"); /* the default configuration */
    run_policy("bf16");
    run_policy("tf32");
    check_env_tiles();
    return check_exit("test_cuda_flash");
}
