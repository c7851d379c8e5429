/* The rank-invariant sums (lib/core/exact_bins.h through the CPU backend's
 * exact_fold / exact_raise / exact_value), against an independent exact
 * reference: a 448-bit two's-complement fixed-point accumulator that holds
 * any sum of fp32 values exactly, rounded once to fp32 here by its own code.
 *   - sums of terms within 2^-40 of their chunk's largest equal the exact sum
 *     correctly rounded, bit for bit (random signs and exponents, cancelling
 *     pairs, subnormals, values near FLT_MAX);
 *   - the same terms folded in another order, or split into groups folded
 *     apart (as ranks do) and combined by raising the windows to the highest
 *     and adding the bins as integers, give the same bits;
 *   - terms over a range wider than the window stay within the stated bound
 *     |result - exact| <= 0.5 ulp(result) + n 2^-64 max|term|;
 *   - an inf or NaN term turns its chunk, and only it, into NaN; a sum past
 *     FLT_MAX reads +-inf; zeros stay +0;
 *   - results do not depend on the thread count (1 and 3 threads).
 * Each element of a buffer is a separate sum: element i of fold k is term k
 * of sum i, so one buffer of n elements checks n sums at once. */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "exact_bins.h"
#include "exact_ref.h"

/* ---- the sums under test ---------------------------------------------------------------- */

typedef struct {
    const gptx_backend_ops *ops;
    gptx_backend *be;
} cpu;

typedef struct {
    int64_t *bins;
    int32_t *win;
    size_t n;
} sums;

static sums sums_new(size_t n) {
    sums s = {calloc(n * EXACT_LEVELS, sizeof(int64_t)), calloc(gptx_exact_chunks(n), 4), n};
    return s;
}

static void sums_free(sums *s) {
    free(s->bins);
    free(s->win);
}

/* b += a, as the communicator does: both raised to the higher window, then
 * the levels added as integers */
static void sums_merge(cpu *c, sums *b, sums *a) {
    size_t chunks = gptx_exact_chunks(a->n);
    int32_t *to = malloc(chunks * 4);
    for (size_t i = 0; i < chunks; i++) to[i] = a->win[i] > b->win[i] ? a->win[i] : b->win[i];
    CHECK_OK(c->ops->exact_raise(c->be, a->bins, a->win, to, a->n));
    CHECK_OK(c->ops->exact_raise(c->be, b->bins, b->win, to, b->n));
    for (size_t i = 0; i < EXACT_LEVELS * a->n; i++) b->bins[i] += a->bins[i];
    free(to);
}

static float *value(cpu *c, sums *s) {
    float *out = malloc(s->n * sizeof *out);
    CHECK_OK(c->ops->exact_value(c->be, out, s->bins, s->win, s->n));
    return out;
}

/* xorshift64* */
static uint64_t rng(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

/* A term with a random sign and mantissa and an exponent in [lo, hi]. */
static float term(uint64_t *s, int lo, int hi) {
    uint64_t r = rng(s);
    float m = 1.0f + (float)(r >> 41) / 8388608.0f;
    int e = lo + (int)((r >> 8) % (uint64_t)(hi - lo + 1));
    float x = ldexpf(m, e);
    return r & 1u ? -x : x;
}

/* K folds of n sums; terms[k * n + i] is term k of sum i */
static sums fold_all(cpu *c, const float *terms, const int *order, int K, size_t n) {
    sums s = sums_new(n);
    for (int k = 0; k < K; k++)
        CHECK_OK(c->ops->exact_fold(c->be, s.bins, s.win, terms + (size_t)order[k] * n, n));
    return s;
}

static int same(const float *a, const float *b, size_t n, const char *what) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], 4) != 0;
    printf("  %-60s %s\n", what, bad ? "DIFFER" : "bitwise equal");
    if (bad) fprintf(stderr, "%s: %zu of %zu differ\n", what, bad, n);
    CHECK(bad == 0);
    return bad == 0;
}

static float *reference(const float *terms, int K, size_t n) {
    float *ref = malloc(n * sizeof *ref);
    for (size_t i = 0; i < n; i++) {
        wide a = {{0}};
        for (int k = 0; k < K; k++) wide_add(&a, terms[(size_t)k * n + i]);
        ref[i] = wide_round(a);
    }
    return ref;
}

/* Sums whose terms all lie within 2^-40 of their chunk's largest: exact. */
static void test_exact_and_invariant(cpu *c, int lo, int hi, const char *what) {
    enum { K = 24 };
    size_t n = 3 * EXACT_CHUNK + 77; /* a partial last chunk */
    float *terms = malloc((size_t)K * n * sizeof *terms);
    uint64_t st = 0x9E3779B97F4A7C15ull ^ (uint64_t)(lo * 131 + hi);
    for (size_t j = 0; j < (size_t)K * n; j++) terms[j] = term(&st, lo, hi);
    for (size_t i = 0; i < n; i += 7) /* cancelling pairs: an exact zero somewhere */
        terms[n + i] = -terms[i];
    int order[K], rev[K];
    for (int k = 0; k < K; k++) order[k] = k, rev[k] = K - 1 - k;
    printf("%s (terms 2^%d .. 2^%d, %d per sum, %zu sums)\n", what, lo, hi + 1, K, n);
    sums a = fold_all(c, terms, order, K, n), b = fold_all(c, terms, rev, K, n);
    float *ref = reference(terms, K, n), *va = value(c, &a), *vb = value(c, &b);
    same(va, ref, n, "in order vs the exact sum correctly rounded");
    same(vb, va, n, "reversed vs in order");
    /* three "ranks": terms 0..8, 9..19, 20..23, then merged in two orders */
    int p0[] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, p1[] = {9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19},
        p2[] = {20, 21, 22, 23};
    sums r0 = fold_all(c, terms, p0, 9, n), r1 = fold_all(c, terms, p1, 11, n),
         r2 = fold_all(c, terms, p2, 4, n);
    sums_merge(c, &r2, &r0);
    sums_merge(c, &r2, &r1);
    float *vm = value(c, &r2);
    same(vm, va, n, "3 groups folded apart and merged vs in order");
    sums s[] = {a, b, r0, r1, r2};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) sums_free(&s[i]);
    free(terms);
    free(ref);
    free(va);
    free(vb);
    free(vm);
}

/* Large terms that cancel, leaving small ones whose bits reach the
 * window's lowest level: the sum is small and must still be exact (a lost
 * level shows here, while sums that stay large round it away). */
static void test_cancellation(cpu *c) {
    enum { K = 6 };
    size_t n = EXACT_CHUNK + 5;
    float *terms = malloc((size_t)K * n * sizeof *terms);
    uint64_t st = 1234;
    for (size_t i = 0; i < n; i++) {
        terms[i] = term(&st, 9, 10);
        terms[n + i] = -terms[i];
        for (int k = 2; k < K; k++) terms[(size_t)k * n + i] = term(&st, -32, -26);
    }
    int order[K] = {0, 1, 2, 3, 4, 5}, mixed[K] = {2, 0, 4, 3, 1, 5};
    printf("cancelling terms 2^9 .. 2^11 and small ones 2^-32 .. 2^-25, %zu sums\n", n);
    sums a = fold_all(c, terms, order, K, n), b = fold_all(c, terms, mixed, K, n);
    float *ref = reference(terms, K, n), *va = value(c, &a), *vb = value(c, &b);
    same(va, ref, n, "the small remainder vs the exact sum correctly rounded");
    same(vb, va, n, "another order vs in order");
    sums_free(&a);
    sums_free(&b);
    free(terms);
    free(ref);
    free(va);
    free(vb);
}

/* Terms over a range wider than the window: within the bound. */
static void test_bound(cpu *c) {
    enum { K = 40 };
    size_t n = EXACT_CHUNK;
    float *terms = malloc((size_t)K * n * sizeof *terms);
    uint64_t st = 77;
    for (size_t j = 0; j < (size_t)K * n; j++) terms[j] = term(&st, -120, 90);
    int order[K];
    for (int k = 0; k < K; k++) order[k] = k;
    sums a = fold_all(c, terms, order, K, n);
    float *got = value(c, &a), *ref = reference(terms, K, n);
    double mx = 0, worst = 0; /* one chunk: its window follows the largest of all its terms */
    for (size_t j = 0; j < (size_t)K * n; j++) mx = fmax(mx, fabs((double)terms[j]));
    for (size_t i = 0; i < n; i++) {
        /* ref is within 0.5 ulp of the exact sum, the result within 0.5 ulp
         * of its truncated sum: 1 ulp plus what the window drops */
        double ulp = (double)nextafterf(fabsf(got[i]), INFINITY) - fabs((double)got[i]);
        double bound = ulp + (double)K * ldexp(mx, -64);
        worst = fmax(worst, fabs((double)got[i] - (double)ref[i]) / bound);
    }
    printf("terms 2^-120 .. 2^91 in one chunk: worst error / bound %.3g\n", worst);
    CHECK(worst <= 1.0);
    sums_free(&a);
    free(terms);
    free(got);
    free(ref);
}

static void test_special(cpu *c) {
    size_t n = 2 * EXACT_CHUNK;
    float *x = calloc(n, sizeof *x), *y = calloc(n, sizeof *y);
    sums s = sums_new(n);
    x[5] = NAN;                  /* chunk 0: NaN */
    x[EXACT_CHUNK + 1] = FLT_MAX; /* chunk 1: past FLT_MAX after two folds */
    y[EXACT_CHUNK + 1] = FLT_MAX;
    x[EXACT_CHUNK + 2] = 1.0f;
    y[EXACT_CHUNK + 2] = -1.0f; /* an exact zero: +0 */
    CHECK_OK(c->ops->exact_fold(c->be, s.bins, s.win, x, n));
    CHECK_OK(c->ops->exact_fold(c->be, s.bins, s.win, y, n));
    float *v = value(c, &s);
    CHECK(isnan(v[0]) && isnan(v[EXACT_CHUNK - 1]));
    CHECK(isinf(v[EXACT_CHUNK + 1]) && v[EXACT_CHUNK + 1] > 0);
    CHECK(v[EXACT_CHUNK + 2] == 0.0f && !signbit(v[EXACT_CHUNK + 2]));
    CHECK(v[EXACT_CHUNK + 3] == 0.0f);
    printf("NaN chunk, overflow to +inf, exact zero +0: %s\n",
           isnan(v[0]) && isinf(v[EXACT_CHUNK + 1]) ? "as stated" : "WRONG");
    sums_free(&s);
    free(x);
    free(y);
    free(v);
}

static int make_cpu(cpu *c, int threads) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = threads;
    c->ops = gptx_cpu_backend_ops();
    return c->ops->create(&c->be, &o);
}

/* The same folds on 1 and 3 threads. */
static int test_threads(void) {
    cpu c1, c3;
    REQUIRE_OK(make_cpu(&c1, 1));
    REQUIRE_OK(make_cpu(&c3, 3));
    size_t n = 5 * EXACT_CHUNK + 3;
    float *terms = malloc(6 * n * sizeof *terms);
    uint64_t st = 5;
    for (size_t j = 0; j < 6 * n; j++) terms[j] = term(&st, -60, 20);
    int order[] = {0, 1, 2, 3, 4, 5};
    sums a = fold_all(&c1, terms, order, 6, n), b = fold_all(&c3, terms, order, 6, n);
    float *va = value(&c1, &a), *vb = value(&c3, &b);
    same(va, vb, n, "1 thread vs 3 threads");
    sums_free(&a);
    sums_free(&b);
    free(terms);
    free(va);
    free(vb);
    c1.ops->destroy(c1.be);
    c3.ops->destroy(c3.be);
    return 0;
}

int main(void) {
    cpu c;
    REQUIRE_OK(make_cpu(&c, 2));
    test_exact_and_invariant(&c, -10, 10, "ordinary magnitudes");
    test_exact_and_invariant(&c, -149, -118, "subnormals and the smallest normals");
    test_exact_and_invariant(&c, 100, 122, "near FLT_MAX");
    test_cancellation(&c);
    test_bound(&c);
    test_special(&c);
    test_threads();
    c.ops->destroy(c.be);
    return check_exit("test_exact_sum");
}
