/* The sampler: option checks, Philox replay and extra-draw shift, state
 * save/restore, padded vocabulary, non-finite rows, tie-breaks, the filter
 * order and the resulting frequencies, and sampling.h against a plain
 * qsort-based reference on GPT-2-sized rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sampling.h"

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

static gptx_sampler *make(float temperature, int top_k, float top_p, uint64_t seed,
                          uint64_t stream) {
    gptx_sampler_options o;
    gptx_sampler_options_init(&o);
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    o.stream = stream;
    gptx_sampler *s = NULL;
    int rc = gptx_sampler_create(&s, &o);
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx_sampler_create: %s\n", gptx_last_error());
        check_failures++;
    }
    return s;
}

static uint64_t counter_of(const gptx_sampler *s) {
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    CHECK_OK(gptx_sampler_get_state(s, &st));
    return st.counter;
}

/* Deterministic pseudo-random floats in [lo, hi). */
static void fill_uniform(float *x, size_t n, float lo, float hi, uint32_t seed) {
    uint32_t v = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        v = v * 1664525u + 1013904223u;
        x[i] = lo + (hi - lo) * (float)(v >> 8) / 16777216.0f;
    }
}

static void test_options(void) {
    gptx_sampler *s = (gptx_sampler *)1;
    gptx_sampler_options o;
    CHECK_STATUS(gptx_sampler_create(NULL, NULL), GPTX_ERR_NULL);
    CHECK_OK(gptx_sampler_create(&s, NULL)); /* defaults */
    gptx_sampler_destroy(s);
    gptx_sampler_destroy(NULL);

    struct { float t; int k; float p; const char *field, *value; } bad[] = {
        {-0.5f, 0, 1.0f, "temperature", "-0.5"}, {NAN, 0, 1.0f, "temperature", "nan"},
        {INFINITY, 0, 1.0f, "temperature", "inf"}, {1.0f, -3, 1.0f, "top_k", "-3"},
        {1.0f, 0, 0.0f, "top_p", "is 0"},          {1.0f, 0, 1.5f, "top_p", "1.5"},
        {1.0f, 0, -0.1f, "top_p", "-0.1"},         {1.0f, 0, NAN, "top_p", "nan"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gptx_sampler_options_init(&o);
        o.temperature = bad[i].t;
        o.top_k = bad[i].k;
        o.top_p = bad[i].p;
        s = (gptx_sampler *)1;
        CHECK_STATUS(gptx_sampler_create(&s, &o), GPTX_ERR_INVALID);
        CHECK(s == NULL);
        check_message_mentions(bad[i].field);
        check_message_mentions(bad[i].value);
    }
    gptx_sampler_options_init(&o);
    o.struct_size = 0;
    CHECK_STATUS(gptx_sampler_create(&s, &o), GPTX_ERR_INVALID);
    check_message_mentions("struct_size");
    /* edge values that are valid */
    gptx_sampler_options_init(&o);
    o.temperature = 0.0f;
    o.top_p = 1.0f;
    o.top_k = 100000;
    CHECK_OK(gptx_sampler_create(&s, &o));
    gptx_sampler_destroy(s);
}

static void test_call_errors(void) {
    gptx_sampler *s = make(1.0f, 0, 1.0f, 1, 0);
    float row[8] = {0};
    int32_t tok = 77;
    CHECK_STATUS(gptx_sampler_sample(NULL, row, 8, 8, &tok), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_sample(s, NULL, 8, 8, &tok), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_sample(s, row, 8, 8, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_sample(s, row, 8, 0, &tok), GPTX_ERR_INVALID);
    check_message_mentions("vocab_size is 0");
    CHECK_STATUS(gptx_sampler_sample(s, row, 4, 8, &tok), GPTX_ERR_SHAPE);
    check_message_mentions("n_logits is 4");
    CHECK(tok == 77);
    CHECK(counter_of(s) == 0); /* failed calls draw nothing */
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    CHECK_STATUS(gptx_sampler_get_state(s, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_get_state(NULL, &st), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_set_state(s, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_set_state(NULL, &st), GPTX_ERR_NULL);
    gptx_sampler_destroy(s);
}

#define V 50
#define VP 64

/* Same seed and call order replay; one extra draw shifts what follows. */
static void test_replay_and_shift(void) {
    float row[VP];
    for (int i = 0; i < VP; i++) row[i] = 0.0f; /* uniform: draws are informative */
    int32_t a[7], b[7], extra = -1;
    gptx_sampler *s1 = make(1.0f, 0, 1.0f, 1234, 5);
    for (int i = 0; i < 7; i++) CHECK_OK(gptx_sampler_sample(s1, row, VP, V, &a[i]));
    gptx_sampler_destroy(s1);

    gptx_sampler *s2 = make(1.0f, 0, 1.0f, 1234, 5);
    for (int i = 0; i < 6; i++) CHECK_OK(gptx_sampler_sample(s2, row, VP, V, &b[i]));
    for (int i = 0; i < 6; i++) CHECK(a[i] == b[i]);
    gptx_sampler_destroy(s2);

    /* an extra draw after the 2nd: the caller's draws 3.. are a[3..] */
    gptx_sampler *s3 = make(1.0f, 0, 1.0f, 1234, 5);
    CHECK_OK(gptx_sampler_sample(s3, row, VP, V, &b[0]));
    CHECK_OK(gptx_sampler_sample(s3, row, VP, V, &b[1]));
    CHECK_OK(gptx_sampler_sample(s3, row, VP, V, &extra));
    for (int i = 2; i < 6; i++) CHECK_OK(gptx_sampler_sample(s3, row, VP, V, &b[i]));
    CHECK(b[0] == a[0] && b[1] == a[1] && extra == a[2]);
    int shifted_differs = 0;
    for (int i = 2; i < 6; i++) {
        CHECK(b[i] == a[i + 1]);
        shifted_differs |= b[i] != a[i];
    }
    CHECK(shifted_differs); /* the shift is visible for this seed */
    CHECK(counter_of(s3) == 7);
    gptx_sampler_destroy(s3);

    /* another stream (or seed) is another sequence */
    gptx_sampler *s4 = make(1.0f, 0, 1.0f, 1234, 6), *s5 = make(1.0f, 0, 1.0f, 1235, 5);
    int diff_stream = 0, diff_seed = 0;
    for (int i = 0; i < 7; i++) {
        int32_t x, y;
        CHECK_OK(gptx_sampler_sample(s4, row, VP, V, &x));
        CHECK_OK(gptx_sampler_sample(s5, row, VP, V, &y));
        diff_stream |= x != a[i];
        diff_seed |= y != a[i];
    }
    CHECK(diff_stream && diff_seed);
    gptx_sampler_destroy(s4);
    gptx_sampler_destroy(s5);

    /* the i-th draw's uniform is Philox (seed, stream, counter = i), words 0-1 */
    double u = gptx_sampling_uniform(1234, 5, 0);
    gptx_philox4 r = gptx_philox_block(1234, 5, 0);
    uint64_t bits = ((uint64_t)r.v[0] << 21) | (r.v[1] >> 11);
    CHECK(u == (double)(bits + 1) / 9007199254740992.0);
    CHECK(u > 0.0 && u <= 1.0);
    /* with a uniform row the inverse CDF picks floor-ish of u * V */
    CHECK(a[0] == (int32_t)ceil(u * V) - 1);
}

static void test_state(void) {
    float row[VP];
    fill_uniform(row, VP, -2.0f, 2.0f, 3);
    gptx_sampler *s = make(0.8f, 10, 0.95f, 99, 1);
    int32_t t, first[4], again[4];
    for (int i = 0; i < 3; i++) CHECK_OK(gptx_sampler_sample(s, row, VP, V, &t));
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    CHECK_OK(gptx_sampler_get_state(s, &st));
    CHECK(st.seed == 99 && st.stream == 1 && st.counter == 3);
    for (int i = 0; i < 4; i++) CHECK_OK(gptx_sampler_sample(s, row, VP, V, &first[i]));
    CHECK_OK(gptx_sampler_set_state(s, &st));
    for (int i = 0; i < 4; i++) CHECK_OK(gptx_sampler_sample(s, row, VP, V, &again[i]));
    for (int i = 0; i < 4; i++) CHECK(first[i] == again[i]);
    /* restoring into a sampler built with another seed continues the same way */
    gptx_sampler *o = make(0.8f, 10, 0.95f, 7, 0);
    CHECK_OK(gptx_sampler_set_state(o, &st));
    for (int i = 0; i < 4; i++) {
        CHECK_OK(gptx_sampler_sample(o, row, VP, V, &t));
        CHECK(t == first[i]);
    }
    gptx_sampler_state st2;
    gptx_sampler_state_init(&st2);
    CHECK_OK(gptx_sampler_get_state(o, &st2));
    CHECK(st2.seed == 99 && st2.stream == 1 && st2.counter == 7);
    gptx_sampler_destroy(s);
    gptx_sampler_destroy(o);

    /* greedy consumes one counter per call too */
    gptx_sampler *g = make(0.0f, 0, 1.0f, 1, 0);
    for (int i = 0; i < 5; i++) CHECK_OK(gptx_sampler_sample(g, row, VP, V, &t));
    CHECK(counter_of(g) == 5);
    gptx_sampler_destroy(g);
}

static int argmax_real(const float *row) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

/* Padded columns are never chosen, whatever they hold. */
static void test_padded_columns(void) {
    float row[VP];
    fill_uniform(row, VP, -1.0f, 1.0f, 11);
    for (int i = V; i < VP; i++) row[i] = 100.0f;
    row[V + 3] = NAN; /* not read either */
    struct { float t; int k; float p; } cfg[] = {
        {0.0f, 0, 1.0f}, {1.0f, 0, 1.0f}, {5.0f, 0, 1.0f}, {1.0f, 60, 1.0f},
        {1.0f, 0, 0.999f}, {3.0f, 64, 0.99f}, {1.0f, 1, 1.0f},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        gptx_sampler *s = make(cfg[c].t, cfg[c].k, cfg[c].p, 5, 0);
        for (int i = 0; i < 300; i++) {
            int32_t t = -1;
            CHECK_OK(gptx_sampler_sample(s, row, VP, V, &t));
            CHECK(t >= 0 && t < V);
            if (cfg[c].t == 0.0f || cfg[c].k == 1) CHECK(t == argmax_real(row));
        }
        gptx_sampler_destroy(s);
    }
}

static void test_non_finite(void) {
    float row[VP];
    fill_uniform(row, VP, -1.0f, 1.0f, 12);
    for (int greedy = 0; greedy < 2; greedy++) {
        gptx_sampler *s = make(greedy ? 0.0f : 1.0f, 0, 1.0f, 5, 0);
        int32_t t = 123;
        row[17] = NAN;
        CHECK_STATUS(gptx_sampler_sample(s, row, VP, V, &t), GPTX_ERR_NON_FINITE);
        check_message_mentions("logits[17] is NaN");
        row[17] = INFINITY;
        CHECK_STATUS(gptx_sampler_sample(s, row, VP, V, &t), GPTX_ERR_NON_FINITE);
        check_message_mentions("logits[17] is +inf");
        float neg[VP];
        for (int i = 0; i < VP; i++) neg[i] = i < V ? -INFINITY : 1.0f;
        CHECK_STATUS(gptx_sampler_sample(s, neg, VP, V, &t), GPTX_ERR_NON_FINITE);
        check_message_mentions("-inf");
        CHECK(t == 123);
        CHECK(counter_of(s) == 0); /* nothing drawn on error */
        /* -inf tokens are allowed and never drawn */
        neg[9] = 0.0f;
        neg[31] = 0.5f;
        for (int i = 0; i < 200; i++) {
            CHECK_OK(gptx_sampler_sample(s, neg, VP, V, &t));
            CHECK(t == 9 || t == 31);
        }
        row[17] = 0.0f;
        gptx_sampler_destroy(s);
    }
}

/* Equal logits: greedy and top-k keep the lower ids. */
static void test_ties(void) {
    float row[10];
    for (int i = 0; i < 10; i++) row[i] = 1.0f;
    row[7] = row[3] = 2.0f;
    gptx_sampler *g = make(0.0f, 0, 1.0f, 1, 0), *k1 = make(1.0f, 1, 1.0f, 1, 0);
    int32_t t;
    CHECK_OK(gptx_sampler_sample(g, row, 10, 10, &t));
    CHECK(t == 3);
    CHECK_OK(gptx_sampler_sample(k1, row, 10, 10, &t));
    CHECK(t == 3);
    gptx_sampler_destroy(g);
    gptx_sampler_destroy(k1);
    for (int i = 0; i < 10; i++) row[i] = 0.25f;
    gptx_sampler *k3 = make(1.0f, 3, 1.0f, 2, 0), *p = make(1.0f, 0, 0.25f, 2, 0);
    int seen[10] = {0}, seen_p[10] = {0};
    for (int i = 0; i < 600; i++) {
        CHECK_OK(gptx_sampler_sample(k3, row, 10, 10, &t));
        seen[t]++;
        CHECK_OK(gptx_sampler_sample(p, row, 10, 10, &t));
        seen_p[t]++;
    }
    for (int i = 0; i < 10; i++) {
        CHECK(i < 3 ? seen[i] > 100 : seen[i] == 0);
        CHECK(i < 3 ? seen_p[i] > 100 : seen_p[i] == 0); /* 0.1 + 0.1 + 0.1 >= 0.25 */
    }
    gptx_sampler_destroy(k3);
    gptx_sampler_destroy(p);
}

/* Frequencies over n draws vs expected probabilities (|diff| < tol). */
static void check_freq(float temperature, int top_k, float top_p, const double *want,
                       const char *label) {
    const double p[4] = {0.5, 0.3, 0.15, 0.05};
    float row[4];
    for (int i = 0; i < 4; i++) row[i] = (float)log(p[i]);
    gptx_sampler *s = make(temperature, top_k, top_p, 2024, 0);
    const int n = 20000;
    int count[4] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t = -1;
        CHECK_OK(gptx_sampler_sample(s, row, 4, 4, &t));
        if (t >= 0 && t < 4) count[t]++;
    }
    for (int i = 0; i < 4; i++) {
        double f = (double)count[i] / n;
        /* 5 sigma of a binomial frequency, and exact zeros stay zero */
        double tol = 5.0 * sqrt(want[i] * (1.0 - want[i]) / n) + 1e-9;
        if (fabs(f - want[i]) > tol || (want[i] == 0.0 && count[i] != 0)) {
            fprintf(stderr, "%s: token %d frequency %.4f, expected %.4f\n", label, i, f, want[i]);
            check_failures++;
        }
    }
    gptx_sampler_destroy(s);
}

static void test_frequencies(void) {
    const double plain[4] = {0.5, 0.3, 0.15, 0.05};
    check_freq(1.0f, 0, 1.0f, plain, "T=1");
    double t2[4], z = 0.0;
    for (int i = 0; i < 4; i++) z += sqrt(plain[i]);
    for (int i = 0; i < 4; i++) t2[i] = sqrt(plain[i]) / z;
    check_freq(2.0f, 0, 1.0f, t2, "T=2");
    const double k2[4] = {0.625, 0.375, 0.0, 0.0};
    check_freq(1.0f, 2, 1.0f, k2, "top_k=2");
    check_freq(1.0f, 0, 0.75f, k2, "top_p=0.75");
    const double p85[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
    check_freq(1.0f, 0, 0.85f, p85, "top_p=0.85");
    const double only0[4] = {1.0, 0.0, 0.0, 0.0};
    check_freq(1.0f, 0, 0.4f, only0, "top_p=0.4");
    /* order: top-k, then top-p on the renormalised top-k mass (0.6 of 0.8
     * = 0.48 <= 0.5: token 0 alone; top-p first would keep {0, 1}) */
    check_freq(1.0f, 2, 0.6f, only0, "top_k=2 top_p=0.6");
    /* order: temperature, then top-p (T=2 gives 0.379, 0.294, ...: 0.45
     * needs two tokens; top-p before temperature would keep token 0 alone) */
    const double t2p[4] = {t2[0] / (t2[0] + t2[1]), t2[1] / (t2[0] + t2[1]), 0.0, 0.0};
    check_freq(2.0f, 0, 0.45f, t2p, "T=2 top_p=0.45");
}

/* ---- sampling.h against a straightforward reference ----------------------- */

static const float *ref_logits;
static int ref_cmp(const void *pa, const void *pb) {
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (ref_logits[a] != ref_logits[b]) return ref_logits[a] > ref_logits[b] ? -1 : 1;
    return a < b ? -1 : 1;
}

/* Same definitions as sampling.h, written with qsort over the whole row. */
static int32_t ref_sample(const float *lg, int n, double temp, int top_k, double top_p, double u,
                          double *w, int32_t *ids) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (lg[i] > lg[best]) best = i;
    if (temp == 0.0) return best;
    int m = 0;
    for (int i = 0; i < n; i++) {
        w[i] = gptx_sampling_exp(((double)lg[i] - (double)lg[best]) / temp);
        if (w[i] > 0.0) ids[m++] = i;
    }
    ref_logits = lg;
    qsort(ids, (size_t)m, sizeof *ids, ref_cmp);
    int use_k = top_k > 0 && top_k < m, use_p = top_p < 1.0;
    if (!use_k && !use_p) { /* id order */
        double tot = 0.0, cum = 0.0;
        for (int i = 0; i < n; i++) tot += w[i];
        for (int i = 0; i < n; i++) {
            if (w[i] <= 0.0) continue;
            cum += w[i];
            if (cum >= u * tot) return i;
        }
        return -1;
    }
    int keep = use_k ? top_k : m;
    double mass = 0.0;
    if (use_k)
        for (int j = 0; j < keep; j++) mass += w[ids[j]];
    else
        for (int i = 0; i < n; i++) mass += w[i];
    if (use_p) {
        double cum = 0.0;
        int j = 0;
        while (j < keep) {
            cum += w[ids[j++]];
            if (cum >= top_p * mass) break;
        }
        keep = j;
    }
    double tot = 0.0, cum = 0.0;
    for (int j = 0; j < keep; j++) tot += w[ids[j]];
    for (int j = 0; j < keep; j++) {
        cum += w[ids[j]];
        if (cum >= u * tot) return ids[j];
    }
    return -1;
}

static void test_against_reference(void) {
    const int n = 50257;
    float *lg = malloc((size_t)n * sizeof *lg);
    double *w = malloc((size_t)n * sizeof *w), *w2 = malloc((size_t)n * sizeof *w2);
    int32_t *ids = malloc((size_t)n * sizeof *ids), *ids2 = malloc((size_t)n * sizeof *ids2);
    if (!lg || !w || !w2 || !ids || !ids2) {
        CHECK(0);
        goto done;
    }
    struct { double t; int k; double p; } cfg[] = {
        {1.0, 0, 1.0}, {0.7, 40, 1.0}, {1.0, 0, 0.9}, {0.9, 50, 0.95}, {1.3, 0, 0.5},
        {0.0, 0, 1.0}, {1.0, 200, 0.3}, {0.05, 0, 0.99},
    };
    int mismatches = 0, calls = 0;
    for (int row = 0; row < 6; row++) {
        fill_uniform(lg, (size_t)n, -8.0f, 8.0f, 100u + (uint32_t)row);
        if (row >= 3) /* coarse values: many exact ties */
            for (int i = 0; i < n; i++) lg[i] = floorf(lg[i]);
        if (row == 5)
            for (int i = 0; i < n; i += 3) lg[i] = -INFINITY;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
            for (uint64_t d = 0; d < 4; d++) {
                double u = gptx_sampling_uniform(7, (uint64_t)row, d + 4 * c);
                int32_t got = -1;
                int bad = -1;
                int rc = gptx_sample_row(lg, n, cfg[c].t, cfg[c].k, cfg[c].p, u, w, ids, &got, &bad);
                int32_t want = ref_sample(lg, n, cfg[c].t, cfg[c].k, cfg[c].p, u, w2, ids2);
                calls++;
                if (rc != GPTX_SAMPLE_OK || got != want) {
                    if (mismatches++ < 5)
                        fprintf(stderr, "row %d cfg %zu draw %d: got %d want %d (rc %d)\n", row, c,
                                (int)d, (int)got, (int)want, rc);
                }
            }
    }
    CHECK(mismatches == 0);
    CHECK(calls == 6 * 8 * 4);
done:
    free(lg);
    free(w);
    free(w2);
    free(ids);
    free(ids2);
}

/* Our exp agrees with the C library's to a few ulp over the used domain. */
static void test_exp(void) {
    double worst = 0.0;
    for (int i = 0; i <= 200000; i++) {
        double x = -708.0 * (double)i / 200000.0;
        double want = exp(x), got = gptx_sampling_exp(x);
        double rel = fabs(got - want) / want;
        if (rel > worst) worst = rel;
    }
    printf("gptx_sampling_exp: max relative error %.3g on [-708, 0]\n", worst);
    CHECK(worst < 1e-15);
    CHECK(gptx_sampling_exp(0.0) == 1.0);
    CHECK(gptx_sampling_exp(-709.0) == 0.0);
    CHECK(gptx_sampling_exp(-INFINITY) == 0.0);
    CHECK(fabs(gptx_sampling_exp(1.0) - exp(1.0)) < 1e-15 * exp(1.0));
}

int main(void) {
    test_options();
    test_call_errors();
    test_replay_and_shift();
    test_state();
    test_padded_columns();
    test_non_finite();
    test_ties();
    test_frequencies();
    test_against_reference();
    test_exp();
    return check_exit("test_sampler");
}
