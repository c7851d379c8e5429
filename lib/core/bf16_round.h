/* Rounding fp32 to bf16, shared by host and device code (like philox.h):
 * round to nearest even, and stochastic rounding whose random bits come
 * from Philox keyed by (seed, step, element index), so a run is
 * reproducible. Stochastic rounding rounds up with probability equal to
 * the discarded fraction of an ulp: E[result] = x, so an update smaller
 * than half an ulp, which round-to-nearest always loses, is kept in
 * expectation (the point of the pure-bf16 policy's optional mode). */
#ifndef GPTX_BF16_ROUND_H
#define GPTX_BF16_ROUND_H

#include <stdint.h>
#include <string.h>

#include "philox.h"

#if defined(__CUDACC__)
#define GPTX_BF16_FN static __host__ __device__ inline
#else
#define GPTX_BF16_FN static inline
#endif

GPTX_BF16_FN uint32_t gptx_bf16_bits_of(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

GPTX_BF16_FN float gptx_bf16_widen(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* NaN stays a quiet NaN (never rounds into infinity) */
GPTX_BF16_FN int gptx_bf16_is_nan_bits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

GPTX_BF16_FN uint16_t gptx_bf16_round_nearest(float x) {
    uint32_t u = gptx_bf16_bits_of(x);
    if (gptx_bf16_is_nan_bits(u)) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Rounds the magnitude up with probability (discarded 16 bits) / 2^16,
 * using the low 16 bits of r. Exact values and infinities are unchanged. */
GPTX_BF16_FN uint16_t gptx_bf16_round_stochastic(float x, uint32_t r) {
    uint32_t u = gptx_bf16_bits_of(x);
    if (gptx_bf16_is_nan_bits(u)) return (uint16_t)((u >> 16) | 0x40u);
    if ((u & 0x7fffffffu) == 0x7f800000u) return (uint16_t)(u >> 16);
    u += r & 0xffffu;
    return (uint16_t)(u >> 16);
}

/* The random bits for element `index` at optimizer step `step`. */
GPTX_BF16_FN uint32_t gptx_bf16_sr_bits(uint64_t seed, uint64_t step, uint64_t index) {
    return gptx_philox_block(seed, step, index / 4).v[index % 4];
}

#endif
