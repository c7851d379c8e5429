/*
 * Rank-invariant sums of fp32 values (issue 36; docs/distributed.md,
 * "Rank-invariant training"): a sum whose bits do not depend on the order of
 * its terms, nor on how they are split into partial sums, because every term
 * is cut at fixed bit positions and the pieces are added as integers.
 *
 * Positions. A finite fp32 value is m * 2^e with an integer m < 2^24 and
 * e >= -149; its bits sit at positions p .. p + 23 with p = e + EXACT_BIAS
 * (EXACT_BIAS = 192: the lowest bit of the smallest subnormal is position 43,
 * the top bit of FLT_MAX position 319). Bin b holds positions [32 b, 32 b +
 * 32), bins 1 .. 9; bin 0 holds nothing, so a window of 0 (EXACT_EMPTY) is a
 * chunk no nonzero term has reached, and zero-filled bins and windows are an
 * empty sum.
 *
 * Windows. Values are summed in chunks of EXACT_CHUNK consecutive elements
 * (a layout fact, fixed by the buffer alone). A chunk keeps three bins per
 * element, its window: levels 0, 1, 2 = bins top, top - 1, top - 2, as
 * signed int64 sums of the pieces (stored level-major: level k of element i
 * at bins[k n + i] of an n-element buffer) (each piece < 2^32 in magnitude, so up to
 * 2^31 terms cannot overflow). top is the highest bin any term of the chunk
 * has reached so far; a term with a higher bit raises it, and the levels that
 * fall below the new window are dropped. A piece below the window is dropped
 * too. So, whatever the order and the grouping, what the window keeps is
 * exactly the sum, over every term, of its pieces in the final window's
 * three bins: the final window depends only on the largest term, and two
 * partial sums combine by raising both to the higher window and adding the
 * levels as integers.
 *
 * Accuracy. Let the chunk's top bin be t, so its largest |term| is at least
 * 2^(32 t - EXACT_BIAS). A term loses at most the bits below position
 * 32 (t - 2), i.e. less than 2^(32 (t - 2) - EXACT_BIAS), truncated toward
 * zero; the result is then rounded once to fp32 (nearest even). So for n
 * terms |result - exact sum| <= 0.5 ulp(result) + n 2^-64 max|term|: every
 * term within 2^-40 of the chunk's largest is kept whole, and the result is
 * the exact sum correctly rounded, never worse than a float sum in any
 * order. A non-finite term marks its chunk (EXACT_NONFINITE), whose values
 * then read back as NaN; a sum beyond FLT_MAX reads back as +-inf (the
 * rounding of the exact value). Neither is silent: the optimizer refuses a
 * non-finite gradient norm.
 *
 * Plain C, no state: the CPU backend runs it, and CUDA device code can.
 */
#ifndef GPTX_EXACT_BINS_H
#define GPTX_EXACT_BINS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define GPTX_EXACT_FN static __host__ __device__ inline
#else
#define GPTX_EXACT_FN static inline
#endif

#define EXACT_CHUNK 1024     /* elements per window */
#define EXACT_LEVELS 3       /* bins kept per element */
#define EXACT_BIAS 192       /* position of the bit 2^0 */
#define EXACT_EMPTY 0        /* a chunk no nonzero term has reached */
#define EXACT_NONFINITE 1000 /* a chunk with an inf or NaN term (above every bin) */

/* The chunk count of n elements. */
GPTX_EXACT_FN size_t gptx_exact_chunks(size_t n) { return (n + EXACT_CHUNK - 1) / EXACT_CHUNK; }

/* The window a term x needs: the bin of its top bit (for a subnormal, that
 * of the largest subnormal: an upper bound, a function of x alone like the
 * rest); EXACT_EMPTY for a zero, EXACT_NONFINITE for inf and NaN.
 * Branch-free, so a chunk's maximum vectorizes. */
GPTX_EXACT_FN int32_t gptx_exact_top(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    int32_t ex = (int32_t)((u >> 23) & 0xffu);
    int32_t top = ((ex ? ex : 1) - 150 + 23 + EXACT_BIAS) / 32;
    top = (u << 1) == 0 ? EXACT_EMPTY : top;
    return ex == 0xff ? EXACT_NONFINITE : top;
}

/* x's signed pieces in the bins of window `top`: p[0], p[1], p[2] for bins
 * top, top - 1, top - 2 (each under 2^32 in magnitude); pieces below the
 * window are dropped (truncation toward zero). x finite, its top bin <= top;
 * a zero gives zeros. Shifts by lane amounts and no branch: a loop of it
 * vectorizes (AVX2's variable 64-bit shifts). */
GPTX_EXACT_FN void gptx_exact_pieces(float x, int32_t top, int64_t p[EXACT_LEVELS]) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t ex = (u >> 23) & 0xffu;
    uint64_t m = (u & 0x7fffffu) | (ex ? 0x800000u : 0u);
    int32_t s = (ex ? (int32_t)ex - 150 : -149) + EXACT_BIAS - 32 * (top - 2);
    int64_t neg = -(int64_t)(u >> 31); /* 0 or -1 */
    for (int k = 0; k < EXACT_LEVELS; k++) {
        /* x's lowest bit relative to the bin's lowest: up >= 32 puts all of m
         * above the bin, down >= 24 all of it below */
        int32_t t = s - 32 * (EXACT_LEVELS - 1 - k);
        uint32_t up = (uint32_t)(t > 0 ? (t < 40 ? t : 40) : 0);
        uint32_t down = (uint32_t)(t < 0 ? (-t < 31 ? -t : 31) : 0);
        int64_t v = (int64_t)(((m << up) >> down) & 0xffffffffu);
        p[k] = (v ^ neg) - neg;
    }
}

/* Moves an element's levels from window `from` to the higher window `to`:
 * the levels that fall below it are dropped. */
GPTX_EXACT_FN void gptx_exact_raise(int64_t *lvl, int32_t from, int32_t to) {
    int s = to - from;
    if (s <= 0) return;
    for (int k = EXACT_LEVELS - 1; k >= 0; k--) lvl[k] = k - s >= 0 ? lvl[k - s] : 0;
}

/* The value of an element's levels in window `top`, rounded once to fp32
 * (nearest, ties to even). */
GPTX_EXACT_FN float gptx_exact_value(const int64_t *lvl, int32_t top) {
    if (top == EXACT_NONFINITE) return NAN;
    if (top == EXACT_EMPTY) return 0.0f;
    __extension__ typedef unsigned __int128 u128;
    /* v = lvl0 2^64 + lvl1 2^32 + lvl2 as a 128-bit two's complement
     * number: the carries moved up (each |lvl| < 2^63, |v| < 2^127), then
     * its sign and magnitude without a branch */
    int64_t c1 = lvl[1] + (lvl[2] >> 32), c0 = lvl[0] + (c1 >> 32);
    uint64_t lo = (uint64_t)c1 << 32 | ((uint64_t)lvl[2] & 0xffffffffu), hi = (uint64_t)c0;
    uint64_t sign = (uint64_t)(c0 >> 63); /* all ones when negative */
    lo ^= sign;
    hi ^= sign;
    lo += sign & 1u;
    hi += lo < (sign & 1u);
    if ((hi | lo) == 0) return 0.0f;
    u128 a = (u128)hi << 64 | lo;
    int msb = hi ? 127 - __builtin_clzll(hi) : 63 - __builtin_clzll(lo);
    int scale = 32 * (top - 2) - EXACT_BIAS; /* value of bit 0 of a: 2^scale */
    /* keep 24 bits from msb down, but no bit below 2^-149 (subnormals) */
    int lsb = msb - 23;
    if (lsb + scale < -149) lsb = -149 - scale;
    uint64_t mant;
    if (lsb <= 0) {
        mant = (uint64_t)(a << -lsb); /* exact: every bit kept */
    } else { /* nearest, ties to even: the dropped bits against half */
        mant = (uint64_t)(a >> lsb);
        u128 rest = a << (128 - lsb), half = (u128)1 << 127;
        mant += (rest > half) | ((rest == half) & (mant & 1u));
    }
    /* the float's bits: mant (<= 2^24) times 2^(lsb + scale); the value is
     * normal when mant has its 24th bit (exponent field e + 127 + 23), else
     * subnormal (field 0, mant < 2^23); a carry to 2^24 moves the exponent
     * up by one, and past 254 the result is +-inf */
    int e = lsb + scale;
    uint32_t bits;
    if (mant >> 24) { /* 2^24 after rounding up */
        mant >>= 1;
        e++;
    }
    if (mant >> 23) {
        int field = e + 127 + 23;
        bits = field >= 255 ? 0x7f800000u : (uint32_t)field << 23 | ((uint32_t)mant & 0x7fffffu);
    } else {
        bits = (uint32_t)mant; /* subnormal: lsb + scale == -149 */
    }
    bits |= (uint32_t)(sign & 1u) << 31;
    float r;
    memcpy(&r, &bits, 4);
    return r;
}

#endif
