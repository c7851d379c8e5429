/* Narrowing and widening of bf16 buffers (cpu_bf16.h). */
#include "cpu_bf16.h"

#include <stdlib.h>

#include "cpu_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GPTX_HAVE_BF16_INTRINSICS 1
#endif

GPTX_CPU_HOT static void gptx_cpu_bf16_narrow_c_hot(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = gptx_cpu_f32_to_bf16(src[i]);
}
void gptx_cpu_bf16_narrow_c(uint16_t *dst, const float *src, size_t n) {
    gptx_cpu_bf16_narrow_c_hot(dst, src, n);
}

GPTX_CPU_HOT static void gptx_cpu_bf16_widen_hot(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = gptx_cpu_bf16_to_f32(src[i]);
}
void gptx_cpu_bf16_widen(float *dst, const uint16_t *src, size_t n) {
    gptx_cpu_bf16_widen_hot(dst, src, n);
}

#ifdef GPTX_HAVE_BF16_INTRINSICS
__attribute__((target("avx512f,avx512bf16,avx512vl"))) static void narrow_avx512bf16(
    uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), (__m256i)h);
    }
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(k, src + i));
        _mm256_mask_storeu_epi16(dst + i, k, (__m256i)h);
    }
}
#endif

int gptx_cpu_bf16_decide(int cpu_supports, const char *env) {
    if (env && env[0] == '0' && env[1] == '\0') return 0;
    return cpu_supports != 0; /* __builtin_cpu_supports gives the feature's bit, e.g. 16 */
}

int gptx_cpu_bf16_hardware(void) {
    static int cached = -1; /* a benign race: every thread computes the same value */
    if (cached < 0) {
        int supports = 0;
#ifdef GPTX_HAVE_BF16_INTRINSICS
        __builtin_cpu_init();
        supports = __builtin_cpu_supports("avx512bf16");
#endif
        cached = gptx_cpu_bf16_decide(supports, getenv("GPTX_CPU_BF16_HW"));
    }
    return cached;
}

int gptx_cpu_bf16_narrow_hw(uint16_t *dst, const float *src, size_t n) {
#ifdef GPTX_HAVE_BF16_INTRINSICS
    if (gptx_cpu_bf16_hardware()) {
        narrow_avx512bf16(dst, src, n);
        return 1;
    }
#endif
    (void)dst;
    (void)src;
    (void)n;
    return 0;
}

void gptx_cpu_bf16_narrow(uint16_t *dst, const float *src, size_t n) {
    if (!gptx_cpu_bf16_narrow_hw(dst, src, n)) gptx_cpu_bf16_narrow_c(dst, src, n);
}
