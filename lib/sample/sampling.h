/*
 * Sampling math: one token from one row of logits.
 *
 * Plain C99 with no allocation, no recursion and no libm: compiles in host C
 * and in CUDA device code (GPTX_SAMPLING_FN adds __host__ __device__), so a
 * kernel that runs gptx_sample_row on one thread picks the same token as the
 * CPU for the same row and uniform. That rests on three things:
 *   - every step is a fixed sequential loop over the row (no parallel sums);
 *   - only IEEE-754 correctly rounded +, -, *, / in double are used, with no
 *     fused multiply-add: on the device GPTX_S_MUL/GPTX_S_ADD are the _rn
 *     intrinsics, which nvcc never contracts; on the host the file is compiled
 *     as ISO C (GCC: -ffp-contract=off by default) and clang gets the
 *     FP_CONTRACT pragma below;
 *   - exp is our own (gptx_sampling_exp), not the platform's.
 *
 * Order of the filters: penalties -> temperature -> top-k -> top-p -> min-p
 * -> draw.
 *   penalties (gptx_sampling_penalize) rewrite the logits of the tokens seen
 *   in the history, before anything else (the greedy argmax included);
 *   weight w[i] = exp((logit[i] - max) / temperature) for the real vocabulary;
 *   top-k keeps the k best tokens; top-p keeps, of what is left, the shortest
 *   prefix (best first) whose weight reaches top_p times the mass left after
 *   top-k; min-p drops, of what is left, the tokens with w[i] < min_p (the
 *   best has w = 1, so that is probability < min_p times the largest, before
 *   or after renormalising); the draw picks by inverse CDF with one uniform u
 *   in (0, 1].
 * "Best first" is logit descending, then id ascending: a strict total order,
 * so any correct sort gives the same candidate list (a heap is used here).
 */
#ifndef GPTX_SAMPLING_H
#define GPTX_SAMPLING_H

#include <stdint.h>

#include "philox.h"

#if defined(__CUDACC__)
#define GPTX_SAMPLING_FN static __host__ __device__ inline
#else
#define GPTX_SAMPLING_FN static inline
#endif

#if defined(__CUDA_ARCH__)
#define GPTX_S_MUL(a, b) __dmul_rn((a), (b))
#define GPTX_S_ADD(a, b) __dadd_rn((a), (b))
#else
#define GPTX_S_MUL(a, b) ((a) * (b))
#define GPTX_S_ADD(a, b) ((a) + (b))
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
#endif

/* Results of gptx_sample_row; *bad receives the offending index. */
enum {
    GPTX_SAMPLE_OK = 0,
    GPTX_SAMPLE_NAN = 1,     /* logits[*bad] is NaN */
    GPTX_SAMPLE_POS_INF = 2, /* logits[*bad] is +inf */
    GPTX_SAMPLE_ALL_NEG_INF = 3 /* every logit of the real vocabulary is -inf */
};

/* The draw's uniform: words 0 and 1 of the Philox block at (seed, stream,
 * counter) give 53 bits, mapped to (0, 1] (never 0, so a token of zero
 * probability is never picked). Words 2 and 3 are unused. */
GPTX_SAMPLING_FN double gptx_sampling_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    gptx_philox4 r = gptx_philox_block(seed, stream, counter);
    uint64_t bits = ((uint64_t)r.v[0] << 21) | (uint64_t)(r.v[1] >> 11); /* 53 bits */
    return (double)(bits + 1u) * (1.0 / 9007199254740992.0);           /* / 2^53 */
}

/* exp(x) in double, from +, -, * only (same bits on every IEEE machine).
 * Returns 0 for x < -708 (and -inf): such weights are below 1e-307 of the
 * largest one. Domain used here: x <= 0; valid up to x = 709.
 * Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-13 Taylor
 * polynomial (truncation error < 5e-18); relative error a few ulp. */
GPTX_SAMPLING_FN double gptx_sampling_exp(double x) {
    if (!(x >= -708.0)) return 0.0;
    if (x > 709.0) x = 709.0;
    const double inv_ln2 = 1.4426950408889634;
    const double ln2_hi = 6.93147180369123816490e-01; /* low bits zero: n * ln2_hi is exact */
    const double ln2_lo = 1.90821492927058770002e-10;
    double t = GPTX_S_ADD(GPTX_S_MUL(x, inv_ln2), 0.5);
    int n = (int)t; /* floor(t) without libm: truncate, then fix negatives */
    if ((double)n > t) n -= 1;
    double dn = (double)n;
    double r = GPTX_S_ADD(GPTX_S_ADD(x, -GPTX_S_MUL(dn, ln2_hi)), -GPTX_S_MUL(dn, ln2_lo));
    /* Horner on 1/k!, k = 13 down to 0 */
    double p = 1.6059043836821613e-10;
#define GPTX_SAMPLING_HORNER(ck) p = GPTX_S_ADD(GPTX_S_MUL(p, r), (ck))
    GPTX_SAMPLING_HORNER(2.08767569878681e-09);
    GPTX_SAMPLING_HORNER(2.505210838544172e-08);
    GPTX_SAMPLING_HORNER(2.755731922398589e-07);
    GPTX_SAMPLING_HORNER(2.7557319223985893e-06);
    GPTX_SAMPLING_HORNER(2.48015873015873e-05);
    GPTX_SAMPLING_HORNER(0.0001984126984126984);
    GPTX_SAMPLING_HORNER(0.001388888888888889);
    GPTX_SAMPLING_HORNER(0.008333333333333333);
    GPTX_SAMPLING_HORNER(0.041666666666666664);
    GPTX_SAMPLING_HORNER(0.16666666666666666);
    GPTX_SAMPLING_HORNER(0.5);
    GPTX_SAMPLING_HORNER(1.0);
    GPTX_SAMPLING_HORNER(1.0);
#undef GPTX_SAMPLING_HORNER
    /* 2^n for n in [-1021, 1023], built from its bits */
    uint64_t bits = (uint64_t)(n + 1023) << 52;
#if defined(__CUDA_ARCH__)
    double scale = __longlong_as_double((long long)bits);
#else
    union {
        uint64_t u;
        double d;
    } pun;
    pun.u = bits;
    double scale = pun.d;
#endif
    return GPTX_S_MUL(p, scale);
}

/* Strict total order of candidates: a before b when a is "better". */
GPTX_SAMPLING_FN int gptx_sampling_better(const float *logits, int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
}

/* Restores the heap property below position i of heap[0..n) (best at 0). */
GPTX_SAMPLING_FN void gptx_sampling_sift_down(const float *logits, int32_t *heap, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, best = i;
        if (l < n && gptx_sampling_better(logits, heap[l], heap[best])) best = l;
        if (l + 1 < n && gptx_sampling_better(logits, heap[l + 1], heap[best])) best = l + 1;
        if (best == i) return;
        int32_t tmp = heap[i];
        heap[i] = heap[best];
        heap[best] = tmp;
        i = best;
    }
}

GPTX_SAMPLING_FN void gptx_sampling_heapify(const float *logits, int32_t *heap, int n) {
    for (int i = n / 2 - 1; i >= 0; i--) gptx_sampling_sift_down(logits, heap, n, i);
}

/* Pops the best of heap[0..n) into position n-1 (heapsort step): after j
 * pops from a heap of n, idx[n-1], idx[n-2], ..., idx[n-j] are the j best. */
GPTX_SAMPLING_FN void gptx_sampling_pop(const float *logits, int32_t *heap, int n) {
    int32_t top = heap[0];
    heap[0] = heap[n - 1];
    heap[n - 1] = top;
    gptx_sampling_sift_down(logits, heap, n - 1, 0);
}

/* Greedy: the largest logit of [0, vocab), lowest id on ties. */
GPTX_SAMPLING_FN int gptx_sample_argmax(const float *logits, int vocab, int32_t *token, int *bad) {
    int best = -1;
    for (int i = 0; i < vocab; i++) {
        float v = logits[i];
        if (v != v) {
            *bad = i;
            return GPTX_SAMPLE_NAN;
        }
        if (v > 3.40282347e+38f) { /* +inf */
            *bad = i;
            return GPTX_SAMPLE_POS_INF;
        }
        if (v < -3.40282347e+38f) continue; /* -inf: never chosen */
        if (best < 0 || v > logits[best]) best = i;
    }
    if (best < 0) {
        *bad = 0;
        return GPTX_SAMPLE_ALL_NEG_INF;
    }
    *token = best;
    return GPTX_SAMPLE_OK;
}

/* Picks by inverse CDF over cand[0..n) visited as cand[base - j] for
 * j = 0..n-1 (step = -1, the heap's popped order) or cand[base + j] (step =
 * +1); with cand == NULL the candidates are the ids base + step*j themselves.
 * The first candidate with w > 0 whose running sum reaches u * total wins. */
GPTX_SAMPLING_FN int32_t gptx_sampling_draw(const double *w, const int32_t *cand, int base, int step,
                                            int n, double u) {
    double total = 0.0;
    for (int j = 0; j < n; j++) {
        int32_t id = cand ? cand[base + step * j] : (int32_t)(base + step * j);
        total = GPTX_S_ADD(total, w[id]);
    }
    double target = GPTX_S_MUL(u, total), cum = 0.0;
    int32_t last = -1;
    for (int j = 0; j < n; j++) {
        int32_t id = cand ? cand[base + step * j] : (int32_t)(base + step * j);
        if (!(w[id] > 0.0)) continue;
        cum = GPTX_S_ADD(cum, w[id]);
        last = id;
        if (cum >= target) return id;
    }
    return last; /* not reached: the same sum in the same order ends at total >= target */
}

/* The penalties: out[i] = logits[i] for i in [0, vocab), except that each
 * distinct id of hist[0..n) (all in [0, vocab)), seen c times there, gets
 *   l = logits[id];  l = l > 0 ? l / rep : l * rep;   (rep = 1: unchanged)
 *   l = l - (freq * c + pres);
 * in double, rounded to float once. A finite logit stays finite (clamped to
 * +-FLT_MAX); -inf stays -inf, NaN and +inf stay (the draw refuses them).
 * count: scratch of vocab int32, all 0 on entry and left all 0. */
GPTX_SAMPLING_FN void gptx_sampling_penalize(const float *logits, int vocab, const int32_t *hist,
                                             int n, double rep, double freq, double pres,
                                             float *out, int32_t *count) {
    const double fmax = 3.40282346638528859812e+38; /* FLT_MAX */
    for (int i = 0; i < vocab; i++) out[i] = logits[i];
    for (int j = 0; j < n; j++) count[hist[j]]++;
    for (int j = 0; j < n; j++) {
        int32_t id = hist[j];
        if (count[id] == 0) continue; /* done at its first occurrence */
        double l = (double)logits[id];
        int finite = l >= -fmax && l <= fmax;
        if (rep != 1.0) l = l > 0.0 ? l / rep : GPTX_S_MUL(l, rep);
        l = GPTX_S_ADD(l, -GPTX_S_ADD(GPTX_S_MUL(freq, (double)count[id]), pres));
        if (finite && l < -fmax) l = -fmax;
        if (finite && l > fmax) l = fmax;
        out[id] = (float)l;
        count[id] = 0;
    }
}

/*
 * One token from logits[0..vocab) (the caller never passes padded columns).
 *   temperature: 0 = greedy (argmax, lowest id on ties; top_k/top_p and u are
 *                not used), else > 0.
 *   top_k:       0 or >= the number of candidates = off.
 *   top_p:       in (0, 1]; 1 = off.
 *   min_p:       in [0, 1]; 0 = off.
 *   u:           uniform in (0, 1] (gptx_sampling_uniform).
 *   w, idx:      scratch of vocab doubles and vocab int32 (temperature > 0).
 * A logit that is NaN or +inf is an error (*bad = its index); -inf is a
 * token of probability 0; a row of only -inf is an error.
 */
GPTX_SAMPLING_FN int gptx_sample_row_min_p(const float *logits, int vocab, double temperature,
                                           int top_k, double top_p, double min_p, double u,
                                           double *w, int32_t *idx, int32_t *token, int *bad) {
    int32_t best = 0;
    int rc = gptx_sample_argmax(logits, vocab, &best, bad); /* also validates the row */
    if (rc != GPTX_SAMPLE_OK || temperature == 0.0) {
        if (rc == GPTX_SAMPLE_OK) *token = best;
        return rc;
    }
    /* temperature: weights relative to the largest logit (the best has w = 1) */
    double mx = (double)logits[best];
    for (int i = 0; i < vocab; i++)
        w[i] = gptx_sampling_exp(((double)logits[i] - mx) / temperature);

    int use_p = top_p < 1.0;
    int n = 0; /* candidates: tokens of non-zero weight */
    for (int i = 0; i < vocab; i++)
        if (w[i] > 0.0) idx[n++] = i;
    int use_k = top_k > 0 && top_k < n;
    if (!use_k && !use_p) {
        if (min_p > 0.0) /* min-p: tokens below min_p of the best (w = 1) get weight 0 */
            for (int i = 0; i < vocab; i++)
                if (w[i] < min_p) w[i] = 0.0;
        *token = gptx_sampling_draw(w, NULL, 0, 1, vocab, u);
        return GPTX_SAMPLE_OK;
    }

    gptx_sampling_heapify(logits, idx, n);
    int kept = 0; /* popped so far: idx[n-1], ..., idx[n-kept], best first */
    double mass = 0.0;
    if (use_k) {
        for (; kept < top_k; kept++) {
            gptx_sampling_pop(logits, idx, n - kept);
            mass = GPTX_S_ADD(mass, w[idx[n - 1 - kept]]);
        }
    } else {
        for (int i = 0; i < vocab; i++) mass = GPTX_S_ADD(mass, w[i]); /* id order */
    }
    if (use_p) {
        /* shortest best-first prefix of the top-k set (or of everything)
         * whose weight reaches top_p * mass; always at least one token */
        double need = GPTX_S_MUL(top_p, mass), cum = 0.0;
        int limit = use_k ? top_k : n, m = 0;
        while (m < limit) {
            if (m == kept) {
                gptx_sampling_pop(logits, idx, n - kept);
                kept++;
            }
            cum = GPTX_S_ADD(cum, w[idx[n - 1 - m]]);
            m++;
            if (cum >= need) break;
        }
        kept = m;
    }
    if (min_p > 0.0) /* the kept prefix is best first: drop its tail below min_p */
        while (kept > 1 && w[idx[n - kept]] < min_p) kept--;
    *token = gptx_sampling_draw(w, idx, n - 1, -1, kept, u);
    return GPTX_SAMPLE_OK;
}

/* gptx_sample_row_min_p with min-p off: the draw of gptx 0.5. */
GPTX_SAMPLING_FN int gptx_sample_row(const float *logits, int vocab, double temperature, int top_k,
                                     double top_p, double u, double *w, int32_t *idx,
                                     int32_t *token, int *bad) {
    return gptx_sample_row_min_p(logits, vocab, temperature, top_k, top_p, 0.0, u, w, idx, token,
                                 bad);
}

#endif
