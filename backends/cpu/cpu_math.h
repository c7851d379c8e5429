/* Branch-free float exp and tanh that compilers vectorize (libm's expf and
 * tanhf are scalar calls). exp: Cephes' range reduction and degree-5
 * polynomial, max relative error ~2e-7 on [-87, 88]; inputs below -87
 * (e^-87 ~ 1.6e-38) give exactly 0, so -inf gives 0 as it must; NaN stays NaN; inputs above 88 saturate at e^88. tanh from
 * exp: absolute error ~2e-7. Deterministic: the same bits on every thread
 * count, as everything else in the CPU backend. */
#ifndef GPTX_CPU_MATH_H
#define GPTX_CPU_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Hot loops are compiled three times (AVX-512, AVX2, the x86-64-v2 baseline)
 * and the loader picks the widest the CPU has (GNU ifunc). Every clone
 * computes the same bits: the library is built with -ffp-contract=off (no FMA
 * is formed), the math below is branch-free per element, and reductions keep
 * a fixed number of lanes combined in a fixed order, whatever the vector
 * width. GPTX_NO_MULTIVERSION builds the baseline only. Cloned functions
 * carry the gptx_ prefix even when static: clang emits each one's ifunc
 * resolver ("<name>.resolver") as a global symbol of libgptx.a. A cloned
 * function that other files call is static (gptx_cpu_<name>_hot) behind a
 * plain gptx_cpu_<name> that calls it: clang 14 names the dispatcher of an
 * extern clone "<name>.ifunc", so calls from other files found no symbol. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(GPTX_NO_MULTIVERSION)
#define GPTX_CPU_HOT __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPTX_CPU_HOT
#endif

static inline float gptx_expf(float x) {
    float xc = x > -87.0f ? x : -87.0f; /* also maps NaN to a finite value... */
    xc = xc < 88.0f ? xc : 88.0f;
    float n = floorf(xc * 1.44269504088896341f + 0.5f); /* round(x / ln 2) */
    float r = xc - n * 0.693359375f;                     /* ln 2 split in two parts */
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    float y = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n, n in [-126, 127] */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    y = x < -87.0f ? 0.0f : y * scale;
    return x == x ? y : x; /* ...so NaN is passed on here */
}

static inline float gptx_tanhf(float x) {
    /* 1 - 2 / (e^{2x} + 1): saturates cleanly at +-1 */
    return 1.0f - 2.0f / (gptx_expf(2.0f * x) + 1.0f);
}

/* Row reductions: GPTX_LANES independent partial results (element j goes to
 * lane j % GPTX_LANES), combined in lane order. The compiler vectorizes the
 * lanes and no add chain bounds the speed, while every clone and every
 * thread count gives the same bits. */
#define GPTX_LANES 16

static inline float gptx_lanes_total(const float *acc) {
    float s = 0.0f;
    for (int k = 0; k < GPTX_LANES; k++) s += acc[k];
    return s;
}

/* sum_j x[j] */
static inline float gptx_sum(const float *x, int n) {
    float acc[GPTX_LANES] = {0};
    int j = 0;
    for (; j + GPTX_LANES <= n; j += GPTX_LANES)
        for (int k = 0; k < GPTX_LANES; k++) acc[k] += x[j + k];
    for (; j < n; j++) acc[j % GPTX_LANES] += x[j];
    return gptx_lanes_total(acc);
}

/* Float order as int32 order (sign-magnitude -> two's complement), so a max
 * is an integer max, which compilers vectorize (a float max reduction they
 * do not, as maxps differs from a > b ? a : b on NaN and signed zeros). */
static inline int32_t gptx_order_key(float f) {
    int32_t i;
    memcpy(&i, &f, sizeof i);
    return i >= 0 ? i : i ^ 0x7fffffff;
}

/* max_j x[j] (n >= 1) */
static inline float gptx_max(const float *x, int n) {
    int32_t m[GPTX_LANES];
    for (int k = 0; k < GPTX_LANES; k++) m[k] = INT32_MIN;
    int j = 0;
    for (; j + GPTX_LANES <= n; j += GPTX_LANES)
        for (int k = 0; k < GPTX_LANES; k++) {
            int32_t key = gptx_order_key(x[j + k]);
            m[k] = key > m[k] ? key : m[k];
        }
    for (; j < n; j++) {
        int32_t key = gptx_order_key(x[j]);
        m[0] = key > m[0] ? key : m[0];
    }
    int32_t best = m[0];
    for (int k = 1; k < GPTX_LANES; k++) best = m[k] > best ? m[k] : best;
    best = best >= 0 ? best : best ^ 0x7fffffff;
    float mx;
    memcpy(&mx, &best, sizeof mx);
    return mx;
}

#endif
