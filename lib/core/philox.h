/*
 * Philox4x32-10 counter-based random numbers (Salmon et al., SC'11).
 * Plain C99 with no state: compiles in host C and in CUDA device code, so
 * every backend draws the same numbers for the same (key, counter).
 */
#ifndef GPTX_PHILOX_H
#define GPTX_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__)
#define GPTX_PHILOX_FN static __host__ __device__ inline
#else
#define GPTX_PHILOX_FN static inline
#endif

typedef struct gptx_philox4 {
    uint32_t v[4];
} gptx_philox4;

GPTX_PHILOX_FN uint32_t gptx_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
    uint64_t p = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(p >> 32);
    return (uint32_t)p;
}

/* 10 rounds on counter (c0..c3) with key (k0, k1). */
GPTX_PHILOX_FN gptx_philox4 gptx_philox4x32_10(gptx_philox4 ctr, uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        uint32_t hi0, hi1;
        uint32_t lo0 = gptx_mulhilo32(0xD2511F53u, ctr.v[0], &hi0);
        uint32_t lo1 = gptx_mulhilo32(0xCD9E8D57u, ctr.v[2], &hi1);
        gptx_philox4 next;
        next.v[0] = hi1 ^ ctr.v[1] ^ k0;
        next.v[1] = lo1;
        next.v[2] = hi0 ^ ctr.v[3] ^ k1;
        next.v[3] = lo0;
        ctr = next;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return ctr;
}

/* Block of 4 numbers at (seed, stream, counter). */
GPTX_PHILOX_FN gptx_philox4 gptx_philox_block(uint64_t seed, uint64_t stream, uint64_t counter) {
    gptx_philox4 c;
    c.v[0] = (uint32_t)counter;
    c.v[1] = (uint32_t)(counter >> 32);
    c.v[2] = (uint32_t)stream;
    c.v[3] = (uint32_t)(stream >> 32);
    return gptx_philox4x32_10(c, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Uniform float in (0, 1]: 24 random bits, never 0 (safe for log). */
GPTX_PHILOX_FN float gptx_uniform_open0(uint32_t x) {
    return ((float)(x >> 8) + 1.0f) * (1.0f / 16777216.0f);
}

#endif
