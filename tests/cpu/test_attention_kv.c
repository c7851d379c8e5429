/* The CPU backend's attention over a key/value cache (backend.h
 * attention_kv_forward, cpu_attention_kv.c) against its training attention
 * on the same rows, at odd shapes, fp32 and (with oneDNN) bf16:
 *  - the cache holds every row's key and value, bit for bit;
 *  - a prefill from position 0 is the training kernel's result, bit for bit;
 *  - rows after cached ones (a chunk of 5, then one at a time; bf16: P rounded
 *    as in the training kernel) are within
 *    2e-6 (fp32) or one bf16 rounding plus 2e-6 (bf16) of the rows of the
 *    full causal attention, relative to the row's largest value;
 *  - the same bits on 1, 2 and 3 threads;
 *  - rows past the cache's capacity are GPTX_ERR_SHAPE.
 * The matrix-vector products of one-token steps (cpu_gemv.c) are checked
 * against the general ones at the end. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cpu_kernels.h"
#include "cpu_backend_util.h"

/* One shape through the cache in three steps, against attention_forward;
 * returns the rows it computed (malloc'ed). */
static char *run_shape(int precision, int T, int C, int NH, int threads) {
    int bf = precision != GPTX_PRECISION_FP32, hs = C / NH, P = T / 3;
    size_t esz = bf ? 2 : 4, nq = (size_t)T * 3 * C;
    gptx_backend *be = make_backend(precision, threads);
    pair qkv = pair_rand(nq, 1.5f); /* bf16 values; fp32 runs use their widening */
    const float *in = bf ? (const float *)(const void *)qkv.h : qkv.f;
    char *full = malloc((size_t)T * C * esz), *got = malloc((size_t)T * C * esz);
    char *prefix = malloc((size_t)P * C * esz);
    char *kc = calloc((size_t)T * C, esz), *vc = calloc((size_t)T * C, esz);
    float *lse = malloc((size_t)T * NH * sizeof *lse);
    CHECK_OK(ops->attention_forward(be, (float *)full, lse, NULL, NULL, in, 1, T, C, NH));
    CHECK_OK(ops->attention_forward(be, (float *)prefix, lse, NULL, NULL, in, 1, P, C, NH));
    /* rows [0, P) from position 0, [P, P + 5) as one chunk, then one by one */
    CHECK_OK(ops->attention_kv_forward(be, (float *)got, lse, in, (float *)kc, (float *)vc, P, 0,
                                       T, C, NH));
    CHECK(memcmp(got, prefix, (size_t)P * C * esz) == 0);
    for (int r = P; r < T;) {
        int n = r == P ? 5 : 1;
        CHECK_OK(ops->attention_kv_forward(be, (float *)(got + (size_t)r * C * esz), lse,
                                           (const float *)((const char *)in + (size_t)r * 3 * C * esz),
                                           (float *)kc, (float *)vc, n, r, T, C, NH));
        r += n;
    }
    size_t kbad = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            size_t src = ((size_t)t * 3 * C + (size_t)h * hs) * esz;
            size_t dst = ((size_t)h * T + (size_t)t) * hs * esz;
            kbad += memcmp(kc + dst, (const char *)in + src + (size_t)C * esz, (size_t)hs * esz) != 0;
            kbad += memcmp(vc + dst, (const char *)in + src + 2 * (size_t)C * esz,
                           (size_t)hs * esz) != 0;
        }
    CHECK(kbad == 0);
    double worst = 0.0;
    for (int t = P; t < T; t++) {
        double scale = 1e-30, err = 0.0;
        for (int c = 0; c < C; c++) {
            size_t i = (size_t)t * C + c;
            double a = bf ? gptx_cpu_bf16_to_f32(((bf16 *)got)[i]) : ((float *)got)[i];
            double b = bf ? gptx_cpu_bf16_to_f32(((bf16 *)full)[i]) : ((float *)full)[i];
            scale = fmax(scale, fabs(b));
            err = fmax(err, fabs(a - b));
        }
        worst = fmax(worst, err / scale);
    }
    double tol = bf ? ldexp(1.0, -8) + 2e-6 : 2e-6;
    printf("%-9s T %2d C %3d NH %d, %d threads: prefix and cache bit for bit, decoded rows "
           "within %.3g of the full attention (tolerance %.3g)\n",
           bf ? "bf16_pure" : "fp32", T, C, NH, threads, worst, tol);
    CHECK(worst <= tol);
    /* past the capacity, and no rows */
    CHECK_STATUS(ops->attention_kv_forward(be, (float *)full, lse, in, (float *)kc, (float *)vc, 2,
                                           T - 1, T, C, NH),
                 GPTX_ERR_SHAPE);
    CHECK_STATUS(ops->attention_kv_forward(be, (float *)full, lse, in, (float *)kc, (float *)vc, 0,
                                           0, T, C, NH),
                 GPTX_ERR_SHAPE);
    ops->destroy(be);
    pair_free(&qkv);
    free(full), free(prefix), free(kc), free(vc), free(lse);
    return got;
}

/* Each shape on 1, 2 and 3 threads, from the same inputs: the same bits. */
static void shape_all_threads(int precision, int T, int C, int NH) {
    size_t bytes = (size_t)T * C * (precision == GPTX_PRECISION_FP32 ? 4 : 2);
    uint32_t seed = rng;
    char *ref = run_shape(precision, T, C, NH, 1);
    for (int threads = 2; threads <= 3; threads++) {
        rng = seed;
        char *got = run_shape(precision, T, C, NH, threads);
        CHECK(memcmp(ref, got, bytes) == 0);
        free(got);
    }
    free(ref);
}

/* One-row products (cpu_gemv.c) against the general product of two rows. */
static void check_gemv(int precision) {
    enum { C = 200, OC = 333 };
    int bf = precision != GPTX_PRECISION_FP32;
    size_t esz = bf ? 2 : 4;
    gptx_backend *be = make_backend(precision, 2);
    pair x = pair_rand(2 * C, 1.0f), w = pair_rand((size_t)OC * C, 0.3f), b = pair_rand(OC, 0.5f);
    char *one = malloc(OC * esz), *two = malloc(2 * OC * esz);
    /* the table's pointers are float *; under bf16 they point to bf16 */
    const float *xin = bf ? (const float *)(const void *)x.h : x.f;
    const float *win = bf ? (const float *)(const void *)w.h : w.f;
    const float *bin = bf ? (const float *)(const void *)b.h : b.f;
    CHECK_OK(ops->matmul_forward(be, (float *)one, xin, win, bin, 1, C, OC));
    CHECK_OK(ops->matmul_forward(be, (float *)two, xin, win, bin, 2, C, OC));
    double worst = 0.0;
    for (int o = 0; o < OC; o++) {
        double a = bf ? gptx_cpu_bf16_to_f32(((bf16 *)one)[o]) : ((float *)one)[o];
        double r = bf ? gptx_cpu_bf16_to_f32(((bf16 *)two)[o]) : ((float *)two)[o];
        double s = fabs(b.f[o]);
        for (int c = 0; c < C; c++) s += fabs((double)x.f[c] * w.f[(size_t)o * C + c]);
        worst = fmax(worst, fabs(a - r) / (s + 1e-30));
    }
    /* fp32: two orders of the same sum; bf16: also a rounding of each */
    double tol = bf ? ldexp(1.0, -7) : 1e-6;
    printf("one-row product (%s), %d x %d: within %.3g of the two-row product (relative to "
           "sum |x w|; tolerance %.3g)\n",
           bf ? "bf16" : "fp32", C, OC, worst, tol);
    CHECK(worst <= tol);
    ops->destroy(be);
    pair_free(&x), pair_free(&w), pair_free(&b);
    free(one), free(two);
}

/* The bf16 one-row product as the pool runs it (AVX-512 where the CPU has
 * it) against its C loop: the same bits, with and without a column tail. */
static void check_gemv_bits(void) {
    gptx_backend *be = make_backend(GPTX_PRECISION_BF16_PURE, 2);
    int shapes[][2] = {{768, 333}, {200, 129}, {13, 7}};
    for (int si = 0; si < 3; si++) {
        int C = shapes[si][0], OC = shapes[si][1];
        pair w = pair_rand((size_t)OC * C, 0.3f), b = pair_rand((size_t)OC, 0.5f);
        float *x = floats_rand((size_t)C, 1.0f), *a = malloc((size_t)OC * 4), *r = malloc((size_t)OC * 4);
        CHECK_OK(gptx_cpu_gemv_bf16(be, a, x, w.h, b.h, C, OC));
        gptx_cpu_gemv_bf16_reference(r, x, w.h, b.h, C, OC);
        int same = memcmp(a, r, (size_t)OC * 4) == 0;
        printf("bf16 one-row product %d x %d: the pool's kernel (%s) and the C loop %s\n", C, OC,
               __builtin_cpu_supports("avx512f") ? "AVX-512" : "the C loop too: no AVX-512 here",
               same ? "bit for bit" : "DIFFER");
        CHECK(same);
        pair_free(&w), pair_free(&b);
        free(x), free(a), free(r);
    }
    ops->destroy(be);
}

int main(void) {
    ops = gptx_cpu_backend_ops();
    shape_all_threads(GPTX_PRECISION_FP32, 37, 96, 3); /* head size 32 */
    shape_all_threads(GPTX_PRECISION_FP32, 20, 128, 2); /* head size 64 */
    shape_all_threads(GPTX_PRECISION_FP32, 9, 30, 5);   /* head size 6: no full lane */
    check_gemv(GPTX_PRECISION_FP32);
    if (gptx_features() & GPTX_FEATURE_DNNL) {
        shape_all_threads(GPTX_PRECISION_BF16_PURE, 37, 96, 3);
        shape_all_threads(GPTX_PRECISION_BF16_PURE, 20, 128, 2);
        check_gemv(GPTX_PRECISION_BF16_PURE);
        check_gemv_bits();
    } else {
        printf("bf16: no oneDNN in this build, skipped\n");
    }
    return check_exit("test_attention_kv");
}
