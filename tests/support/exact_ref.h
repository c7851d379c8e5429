/* An exact sum of fp32 values for the tests of the rank-invariant sums
 * (lib/core/exact_bins.h): a 448-bit two's-complement fixed-point number,
 * bit 0 = 2^-200, which holds any sum of up to 2^100 fp32 values exactly,
 * and its own rounding to fp32 (nearest even, subnormals). Independent of
 * the library's bins and windows by construction: one wide integer, no
 * cutting, no windows. */
#ifndef GPTX_TEST_EXACT_REF_H
#define GPTX_TEST_EXACT_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define LIMBS 7
#define REF_BIAS 200
typedef struct {
    uint64_t w[LIMBS];
} wide;

static inline void wide_add_shifted(wide *a, uint64_t m, int shift, int neg) {
    /* v = m << shift as a LIMBS-word number, then a += v or a -= v */
    wide v = {{0}};
    int q = shift / 64, r = shift % 64;
    v.w[q] = m << r;
    if (r && q + 1 < LIMBS) v.w[q + 1] = m >> (64 - r);
    if (neg) { /* two's complement of v */
        uint64_t carry = 1;
        for (int i = 0; i < LIMBS; i++) {
            uint64_t x = ~v.w[i] + carry;
            carry = carry && x == 0;
            v.w[i] = x;
        }
    }
    uint64_t carry = 0;
    for (int i = 0; i < LIMBS; i++) {
        uint64_t s = a->w[i] + v.w[i];
        uint64_t c1 = s < a->w[i];
        uint64_t t = s + carry;
        uint64_t c2 = t < s;
        a->w[i] = t;
        carry = c1 | c2;
    }
}

static inline void wide_add(wide *a, float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t ex = (u >> 23) & 0xffu;
    uint64_t m = u & 0x7fffffu;
    int e = -149;
    if (ex) {
        m |= 0x800000u;
        e = (int)ex - 150;
    }
    if (m) wide_add_shifted(a, m, e + REF_BIAS, (int)(u >> 31));
}

static inline int wide_bit(const wide *a, int i) { return (int)((a->w[i / 64] >> (i % 64)) & 1u); }

/* a rounded once to fp32, nearest even; from the bits alone */
static inline float wide_round(wide a) {
    int neg = (int)(a.w[LIMBS - 1] >> 63);
    if (neg) { /* magnitude */
        uint64_t carry = 1;
        for (int i = 0; i < LIMBS; i++) {
            uint64_t x = ~a.w[i] + carry;
            carry = carry && x == 0;
            a.w[i] = x;
        }
    }
    int msb = LIMBS * 64 - 1;
    while (msb >= 0 && !wide_bit(&a, msb)) msb--;
    if (msb < 0) return 0.0f;
    int lsb = msb - 23;
    if (lsb < REF_BIAS - 149) lsb = REF_BIAS - 149; /* subnormal spacing */
    uint64_t mant = 0;
    for (int i = msb; i >= lsb; i--) mant = mant << 1 | (uint64_t)wide_bit(&a, i);
    int guard = lsb > 0 && wide_bit(&a, lsb - 1), sticky = 0;
    for (int i = lsb - 2; i >= 0 && !sticky; i--) sticky = wide_bit(&a, i);
    if (guard && (sticky || (mant & 1u))) mant++;
    float r = ldexpf((float)mant, lsb - REF_BIAS);
    return neg ? -r : r;
}

#endif
