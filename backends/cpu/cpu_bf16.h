/* bf16 storage on the CPU backend: conversions and what the CPU offers.
 *
 * The conversion is the one VCVTNEPS2BF16 (AVX512_BF16) performs: round to
 * nearest even, input and output denormals flushed to signed zero, NaN kept
 * quiet (its top 16 bits with the quiet bit set). Where the CPU has the
 * instruction it does the narrowing; elsewhere the same function in plain C
 * gives the same bits (test_cpu_bf16). This differs from lib/core/bf16_round.h
 * (the CUDA backend's rounding) for denormal inputs only, |x| < 2^-126.
 * Widening is exact: the 16 bits become the top half of the fp32 value. */
#ifndef GPTX_CPU_BF16_H
#define GPTX_CPU_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline float gptx_cpu_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* One value, as VCVTNEPS2BF16 converts it. Branch-free (selects of values
 * computed either way), so loops of it vectorize in every clone. */
static inline uint16_t gptx_cpu_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint32_t mag = u & 0x7fffffffu;
    uint32_t nan = (u >> 16) | 0x40u;                           /* NaN: quiet */
    uint32_t zero = (u >> 16) & 0x8000u;                        /* zero, denormal */
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;  /* normal, infinity */
    uint32_t r = mag > 0x7f800000u ? nan : mag < 0x00800000u ? zero : rounded;
    return (uint16_t)r;
}

/* dst[i] = bf16(src[i]) for n values, with the instruction when the CPU has
 * it (and use_hardware is left on), else in C; the same bits either way. */
void gptx_cpu_bf16_narrow(uint16_t *dst, const float *src, size_t n);
/* dst[i] = src[i] widened, n values (exact). */
void gptx_cpu_bf16_widen(float *dst, const uint16_t *src, size_t n);

/* Both paths, for the test that compares them: the C one always, the
 * instruction one only when gptx_cpu_bf16_hardware() (returns 0 without). */
void gptx_cpu_bf16_narrow_c(uint16_t *dst, const float *src, size_t n);
int gptx_cpu_bf16_narrow_hw(uint16_t *dst, const float *src, size_t n);

/* 1 when the CPU converts and multiplies bf16 natively (AVX512_BF16 or
 * AMX-BF16) and GPTX_CPU_BF16_HW is not 0, which makes gptx behave as if it
 * had neither (oneDNN is capped below both too: cpu_dnnl.c). */
int gptx_cpu_bf16_hardware(void);
/* Its decision, 0 or 1, from __builtin_cpu_supports("avx512bf16") (nonzero
 * when present: the feature's bit, not 1) and GPTX_CPU_BF16_HW's value (or
 * NULL); apart so a test sees it on any CPU. */
int gptx_cpu_bf16_decide(int cpu_supports, const char *env);

#endif
