/* The sampling controls of 0.6.0 (docs/sampling.md): repetition, frequency
 * and presence penalties over a window of the history, and min-p.
 *   - each formula on hand-made logits, with exact expected values;
 *   - the window's edge (a token just outside it is not penalised);
 *   - the order penalties -> temperature -> top-k -> top-p -> min-p;
 *   - the same seed, stream, history and call order replay the same tokens,
 *     also after a state restore; greedy with penalties is deterministic;
 *   - padded ids are never returned, even when every real id is penalised;
 *   - the defaults draw exactly what gptx_sampler_sample draws;
 *   - invalid options and histories are refused with a message;
 *   - the generator passes its window (prompt included) as the history. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sampling.h"
#include "test_util.h"

typedef struct {
    float t, rep, freq, pres, min_p, top_p;
    int top_k, window;
    uint64_t seed, stream;
} opts_t;

static opts_t base(float t) {
    opts_t o = {t, 1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0, GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT, 5, 0};
    return o;
}

static gptx_sampler *make(opts_t x) {
    gptx_sampler_options o;
    gptx_sampler_options_init(&o);
    o.temperature = x.t;
    o.repetition_penalty = x.rep;
    o.frequency_penalty = x.freq;
    o.presence_penalty = x.pres;
    o.min_p = x.min_p;
    o.top_p = x.top_p;
    o.top_k = x.top_k;
    o.penalty_window = x.window;
    o.seed = x.seed;
    o.stream = x.stream;
    gptx_sampler *s = NULL;
    if (gptx_sampler_create(&s, &o) != GPTX_OK) {
        fprintf(stderr, "gptx_sampler_create: %s\n", gptx_last_error());
        check_failures++;
    }
    return s;
}

static void check_message_mentions(const char *needle, int line) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "line %d: message '%s' does not mention '%s'\n", line, gptx_last_error(),
                needle);
        check_failures++;
    }
}

/* The message names the public call first, then what was wrong. */
static void check_message_starts(const char *prefix, int line) {
    if (strncmp(gptx_last_error(), prefix, strlen(prefix)) != 0) {
        fprintf(stderr, "line %d: message '%s' does not start with '%s'\n", line,
                gptx_last_error(), prefix);
        check_failures++;
    }
}

/* Each formula, exactly (values chosen so that every result is a float). */
static void test_penalize_formulas(void) {
    const float lg[6] = {2.0f, -1.0f, 0.5f, 3.0f, -INFINITY, 0.0f};
    const int32_t hist[5] = {0, 1, 0, 4, 5}; /* id 0 twice, 1, 4 (-inf), 5 (0) once */
    int32_t count[6] = {0};
    float out[6];
    struct {
        double rep, freq, pres;
        float want[6];
    } cases[] = {
        /* repetition: positive / r, negative * r, 0 stays 0, unseen unchanged */
        {2.0, 0.0, 0.0, {1.0f, -2.0f, 0.5f, 3.0f, -INFINITY, 0.0f}},
        {0.5, 0.0, 0.0, {4.0f, -0.5f, 0.5f, 3.0f, -INFINITY, 0.0f}},
        /* frequency x count, presence once */
        {1.0, 0.5, 0.0, {1.0f, -1.5f, 0.5f, 3.0f, -INFINITY, -0.5f}},
        {1.0, 0.0, 0.25, {1.75f, -1.25f, 0.5f, 3.0f, -INFINITY, -0.25f}},
        /* all three: repetition first, then l - (freq * count + presence) */
        {2.0, 0.5, 0.25, {-0.25f, -2.75f, 0.5f, 3.0f, -INFINITY, -0.75f}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        gptx_sampling_penalize(lg, 6, hist, 5, cases[c].rep, cases[c].freq, cases[c].pres, out,
                               count);
        for (int i = 0; i < 6; i++)
            if (!(out[i] == cases[c].want[i])) {
                fprintf(stderr, "penalize case %zu: out[%d] = %.9g, want %.9g\n", c, i,
                        (double)out[i], (double)cases[c].want[i]);
                check_failures++;
            }
        for (int i = 0; i < 6; i++) CHECK(count[i] == 0);
    }
    /* a finite logit stays finite at the extremes; -inf stays -inf */
    const float big[3] = {-3e38f, 3e38f, -INFINITY};
    const int32_t h3[3] = {0, 1, 2};
    gptx_sampling_penalize(big, 3, h3, 3, 4.0, 0.0, 0.0, out, count);
    CHECK(out[0] == -FLT_MAX && out[1] == 7.5e37f && out[2] == -INFINITY);
    gptx_sampling_penalize(big, 3, h3, 3, 0.25, 0.0, 0.0, out, count);
    CHECK(out[0] == -7.5e37f && out[1] == FLT_MAX && out[2] == -INFINITY);
    gptx_sampling_penalize(big, 3, h3, 3, 1.0, 1e38, 1e38, out, count);
    CHECK(out[0] == -FLT_MAX && isfinite(out[1]) && out[2] == -INFINITY);
}

static int32_t greedy(opts_t o, const float *lg, int n, const int32_t *hist, int nh) {
    gptx_sampler *s = make(o);
    int32_t t = -1;
    CHECK_OK(gptx_sampler_sample_history(s, lg, n, n, hist, nh, &t));
    gptx_sampler_destroy(s);
    return t;
}

/* Through the sampler, greedy: each penalty moves the argmax exactly where its
 * formula says, and only the last penalty_window tokens count. */
static void test_greedy_and_window(void) {
    const float lg[4] = {5.0f, 4.5f, 1.0f, 0.0f};
    opts_t o = base(0.0f);
    const int32_t h0[1] = {0};
    CHECK(greedy(o, lg, 4, h0, 1) == 0); /* all off */
    o.rep = 1.1f; /* 5 / 1.1 = 4.545 > 4.5 */
    CHECK(greedy(o, lg, 4, h0, 1) == 0);
    o.rep = 1.12f; /* 5 / 1.12 = 4.464 < 4.5 */
    CHECK(greedy(o, lg, 4, h0, 1) == 1);

    const float lf[3] = {3.0f, 2.2f, 0.0f};
    const int32_t h00[2] = {0, 0}, h0000[4] = {0, 0, 0, 0};
    o = base(0.0f);
    o.freq = 0.5f; /* 3 - 0.5 = 2.5 > 2.2; 3 - 1 = 2 < 2.2 */
    CHECK(greedy(o, lf, 3, h0, 1) == 0);
    CHECK(greedy(o, lf, 3, h00, 2) == 1);
    o = base(0.0f);
    o.pres = 0.5f; /* 3 - 0.5 = 2.5, however many times */
    CHECK(greedy(o, lf, 3, h0000, 4) == 0);
    o.pres = 0.9f; /* 2.1 < 2.2 */
    CHECK(greedy(o, lf, 3, h0, 1) == 1);

    /* the window: the last 2 tokens of {0, 3, 3} do not hold 0 */
    o = base(0.0f);
    o.rep = 2.0f;
    o.window = 2;
    const int32_t out_edge[3] = {0, 3, 3}, in_edge[3] = {3, 0, 3};
    CHECK(greedy(o, lg, 4, out_edge, 3) == 0);
    CHECK(greedy(o, lg, 4, in_edge, 3) == 1);
    o.window = 3;
    CHECK(greedy(o, lg, 4, out_edge, 3) == 1);
    /* counting is over the window too: {0, 0, 2} with window 2 counts 0 once */
    o = base(0.0f);
    o.freq = 0.5f;
    o.window = 2;
    const int32_t h002[3] = {0, 0, 2};
    CHECK(greedy(o, lf, 3, h002, 3) == 0);
    o.window = 3;
    CHECK(greedy(o, lf, 3, h002, 3) == 1);

    /* greedy with penalties: deterministic, whatever the seed */
    o = base(0.0f);
    o.rep = 1.12f;
    int32_t first = greedy(o, lg, 4, h0, 1);
    for (uint64_t seed = 0; seed < 5; seed++) {
        o.seed = seed;
        CHECK(greedy(o, lg, 4, h0, 1) == first);
    }
}

/* Sampled draws equal gptx_sample_row_min_p on the hand-penalised row with
 * the same uniform: penalties come before temperature (with a frequency
 * penalty, (l - f) / T differs from l / T - f). */
static void test_penalties_before_temperature(void) {
    const float lg[5] = {1.0f, 0.5f, 0.0f, -0.5f, -1.0f};
    const int32_t hist[3] = {0, 0, 2};
    /* freq 0.5, pres 0.25: id 0: 1 - 1.25 = -0.25; id 2: 0 - 0.75 = -0.75 */
    const float want_lg[5] = {-0.25f, 0.5f, -0.75f, -0.5f, -1.0f};
    /* the wrong order (temperature first, T = 0.5): id 0: 2 - 1.25 = 0.75 */
    const float wrong_lg[5] = {0.375f, 0.5f, -0.375f, -0.5f, -1.0f};
    opts_t o = base(0.5f);
    o.freq = 0.5f;
    o.pres = 0.25f;
    o.seed = 21;
    gptx_sampler *s = make(o);
    double w[5];
    int32_t idx[5];
    int differs = 0;
    for (uint64_t d = 0; d < 400; d++) {
        int32_t got = -1, want = -2, wrong = -3;
        int bad = 0;
        CHECK_OK(gptx_sampler_sample_history(s, lg, 5, 5, hist, 3, &got));
        double u = gptx_sampling_uniform(21, 0, d);
        CHECK(gptx_sample_row_min_p(want_lg, 5, 0.5, 0, 1.0, 0.0, u, w, idx, &want, &bad) == 0);
        CHECK(gptx_sample_row_min_p(wrong_lg, 5, 1.0, 0, 1.0, 0.0, u, w, idx, &wrong, &bad) == 0);
        if (got != want) {
            fprintf(stderr, "draw %d: got %d, want %d\n", (int)d, (int)got, (int)want);
            check_failures++;
            break;
        }
        differs += want != wrong;
    }
    CHECK(differs > 0); /* the check can tell the two orders apart */
    gptx_sampler_destroy(s);
}

/* min-p keeps w >= min_p (w = exp((l - max) / T), the best 1) after top-k
 * and top-p. */
static void test_min_p(void) {
    const float lg[5] = {0.0f, -0.5f, -1.0f, -2.0f, -3.0f};
    double w[5];
    int32_t idx[5], t = -1;
    int bad = 0;
    /* min_p 0.2: exp(-1) = 0.368 stays, exp(-2) = 0.135 goes; u = 1 picks the
     * last kept token */
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 0, 1.0, 0.2, 1.0, w, idx, &t, &bad) == 0 && t == 2);
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 0, 1.0, 0.0, 1.0, w, idx, &t, &bad) == 0 && t == 4);
    /* the probability of token 0 among the kept: 1 / (1 + e^-0.5 + e^-1) */
    double w1 = gptx_sampling_exp(-0.5), w2 = gptx_sampling_exp(-1.0);
    double edge = 1.0 / (1.0 + w1 + w2), edge2 = (1.0 + w1) / (1.0 + w1 + w2);
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 0, 1.0, 0.2, edge - 1e-12, w, idx, &t, &bad) == 0 &&
          t == 0);
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 0, 1.0, 0.2, edge + 1e-12, w, idx, &t, &bad) == 0 &&
          t == 1);
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 0, 1.0, 0.2, edge2 + 1e-12, w, idx, &t, &bad) == 0 &&
          t == 2);
    /* the same through the heap path (top-k 4 keeps more than min-p) */
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 4, 1.0, 0.2, 1.0, w, idx, &t, &bad) == 0 && t == 2);
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 4, 1.0, 0.2, edge + 1e-12, w, idx, &t, &bad) == 0 &&
          t == 1);
    /* temperature first: at T = 2, id 3 has w = exp(-1) = 0.368 >= 0.3 (at
     * T = 1, exp(-2) = 0.135: dropped) */
    CHECK(gptx_sample_row_min_p(lg, 5, 2.0, 0, 1.0, 0.3, 1.0, w, idx, &t, &bad) == 0 && t == 3);
    CHECK(gptx_sample_row_min_p(lg, 5, 1.0, 0, 1.0, 0.3, 1.0, w, idx, &t, &bad) == 0 && t == 2);
    /* min_p 1: only the best (and its ties) */
    const float tie[4] = {1.0f, 2.0f, 2.0f, 0.0f};
    CHECK(gptx_sample_row_min_p(tie, 4, 1.0, 0, 1.0, 1.0, 1.0, w, idx, &t, &bad) == 0 && t == 2);
    CHECK(gptx_sample_row_min_p(tie, 4, 1.0, 0, 1.0, 1.0, 0.4, w, idx, &t, &bad) == 0 && t == 1);

    /* top-p before min-p: w = {1, 0.8, 0.1, 0.1, 0.1}, top_p 0.55 keeps
     * {0, 1} (1.8 >= 0.55 * 2.1), min_p 0.5 keeps both; min-p first would
     * leave {0, 1} of mass 1.8, and top-p then only {0} (1 >= 0.99) */
    const float lp[5] = {0.0f, -0.22314355f, -2.30258509f, -2.30258509f, -2.30258509f};
    CHECK(gptx_sample_row_min_p(lp, 5, 1.0, 0, 0.55, 0.5, 1.0, w, idx, &t, &bad) == 0 && t == 1);
    /* through the sampler: the same tokens as the row function */
    opts_t o = base(1.0f);
    o.min_p = 0.5f;
    o.top_p = 0.55f;
    o.seed = 3;
    gptx_sampler *s = make(o);
    int seen1 = 0;
    for (uint64_t d = 0; d < 200; d++) {
        int32_t got = -1, want = -2;
        CHECK_OK(gptx_sampler_sample(s, lp, 5, 5, &got));
        double u = gptx_sampling_uniform(3, 0, d);
        CHECK(gptx_sample_row_min_p(lp, 5, 1.0, 0, 0.55, 0.5, u, w, idx, &want, &bad) == 0);
        CHECK(got == want && got <= 1);
        seen1 += got == 1;
    }
    CHECK(seen1 > 0);
    gptx_sampler_destroy(s);
}

/* Same seed, stream, history and call order: the same tokens; a restored
 * state replays; another stream differs. The history grows with each draw,
 * as in generation. */
static void run(gptx_sampler *s, const float *lg, int n, int32_t *hist, int start, int steps) {
    for (int i = start; i < start + steps; i++)
        CHECK_OK(gptx_sampler_sample_history(s, lg, n, n, hist, i, &hist[i]));
}

static void test_replay(void) {
    enum { N = 16, STEPS = 60 };
    float lg[N];
    for (int i = 0; i < N; i++) lg[i] = (float)(i % 5) * 0.7f - (float)i * 0.05f;
    opts_t o = base(0.9f);
    o.rep = 1.3f;
    o.freq = 0.2f;
    o.pres = 0.3f;
    o.window = 7;
    o.min_p = 0.05f;
    o.top_k = 12;
    o.seed = 77;
    o.stream = 2;
    int32_t a[STEPS], b[STEPS], c[STEPS];
    gptx_sampler *s1 = make(o), *s2 = make(o);
    run(s1, lg, N, a, 0, STEPS);
    run(s2, lg, N, b, 0, 30);
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    CHECK_OK(gptx_sampler_get_state(s2, &st));
    run(s2, lg, N, b, 30, STEPS - 30);
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_OK(gptx_sampler_set_state(s2, &st)); /* resume at 30 with the same history */
    memcpy(c, a, 30 * sizeof *c);
    run(s2, lg, N, c, 30, STEPS - 30);
    CHECK(memcmp(a, c, sizeof a) == 0);
    o.stream = 3;
    gptx_sampler *s3 = make(o);
    run(s3, lg, N, c, 0, STEPS);
    CHECK(memcmp(a, c, sizeof a) != 0);
    gptx_sampler_destroy(s1);
    gptx_sampler_destroy(s2);
    gptx_sampler_destroy(s3);
}

/* The defaults (and penalties set to their off values explicitly) draw
 * exactly what gptx_sampler_sample draws, whatever the history. */
static void test_defaults_unchanged(void) {
    enum { N = 40 };
    float lg[N];
    for (int i = 0; i < N; i++) lg[i] = (float)((i * 7) % 11) * 0.3f;
    int32_t hist[N];
    for (int i = 0; i < N; i++) hist[i] = (i * 3) % N;
    gptx_sampler_options d;
    gptx_sampler_options_init(&d);
    CHECK(d.repetition_penalty == 1.0f && d.frequency_penalty == 0.0f &&
          d.presence_penalty == 0.0f && d.min_p == 0.0f &&
          d.penalty_window == GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT);
    gptx_sampler *plain = make_sampler(0.8f, 10, 0.95f, 9);
    opts_t o = base(0.8f);
    o.top_k = 10;
    o.top_p = 0.95f;
    o.seed = 9;
    gptx_sampler *hs = make(o);
    for (int i = 0; i < 100; i++) {
        int32_t x = -1, y = -2;
        CHECK_OK(gptx_sampler_sample(plain, lg, N, N, &x));
        CHECK_OK(gptx_sampler_sample_history(hs, lg, N, N, hist, N, &y));
        if (x != y) {
            fprintf(stderr, "draw %d: %d without history, %d with\n", i, (int)x, (int)y);
            check_failures++;
            break;
        }
    }
    gptx_sampler_destroy(plain);
    gptx_sampler_destroy(hs);
}

/* Padded columns are never returned: every real id penalised to the floor,
 * the padding's logits far above them. */
static void test_padded(void) {
    enum { V = 8, VP = 12 };
    float lg[VP];
    for (int i = 0; i < VP; i++) lg[i] = i < V ? (float)i : 1e30f;
    int32_t hist[V * 3];
    for (int i = 0; i < V * 3; i++) hist[i] = i % V;
    float temps[2] = {0.0f, 1.0f};
    for (int k = 0; k < 2; k++) {
        opts_t o = base(temps[k]);
        o.rep = 1e30f;
        o.freq = 1e30f;
        o.pres = 1e30f;
        o.min_p = 0.5f;
        gptx_sampler *s = make(o);
        for (int i = 0; i < 50; i++) {
            int32_t t = -1;
            CHECK_OK(gptx_sampler_sample_history(s, lg, VP, V, hist, V * 3, &t));
            CHECK(t >= 0 && t < V);
        }
        gptx_sampler_destroy(s);
    }
}

static void test_refusals(void) {
    struct {
        const char *field, *value;
        float rep, freq, pres, min_p;
        int window;
    } bad[] = {
        {"repetition_penalty", "is 0", 0.0f, 0, 0, 0, 64},
        {"repetition_penalty", "-1", -1.0f, 0, 0, 0, 64},
        {"repetition_penalty", "nan", NAN, 0, 0, 0, 64},
        {"repetition_penalty", "inf", INFINITY, 0, 0, 0, 64},
        {"frequency_penalty", "-0.5", 1, -0.5f, 0, 0, 64},
        {"frequency_penalty", "nan", 1, NAN, 0, 0, 64},
        {"frequency_penalty", "inf", 1, INFINITY, 0, 0, 64},
        {"presence_penalty", "-2", 1, 0, -2.0f, 0, 64},
        {"presence_penalty", "nan", 1, 0, NAN, 0, 64},
        {"min_p", "-0.1", 1, 0, 0, -0.1f, 64},
        {"min_p", "1.5", 1, 0, 0, 1.5f, 64},
        {"min_p", "nan", 1, 0, 0, NAN, 64},
        {"penalty_window", "is 0", 1, 0, 0, 0, 0},
        {"penalty_window", "-3", 1, 0, 0, 0, -3},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        gptx_sampler_options o;
        gptx_sampler_options_init(&o);
        o.repetition_penalty = bad[i].rep;
        o.frequency_penalty = bad[i].freq;
        o.presence_penalty = bad[i].pres;
        o.min_p = bad[i].min_p;
        o.penalty_window = bad[i].window;
        gptx_sampler *s = (gptx_sampler *)1;
        CHECK_STATUS(gptx_sampler_create(&s, &o), GPTX_ERR_INVALID);
        CHECK(s == NULL);
        check_message_mentions(bad[i].field, __LINE__);
        check_message_mentions(bad[i].value, __LINE__);
        check_message_starts("gptx_sampler_create: opts.", __LINE__);
    }
    /* the edges are accepted */
    opts_t ok = base(1.0f);
    ok.min_p = 1.0f;
    ok.window = 1;
    ok.rep = 1e-3f;
    gptx_sampler *s = make(ok);
    const float lg[4] = {1, 2, 3, 4};
    const int32_t h[2] = {1, 4};
    int32_t t = -1;
    CHECK_STATUS(gptx_sampler_sample_history(s, lg, 4, 4, h, 2, &t), GPTX_ERR_TOKEN_RANGE);
    check_message_starts("gptx_sampler_sample_history: history[1] is 4", __LINE__);
    CHECK_STATUS(gptx_sampler_sample_history(s, lg, 4, 4, h, -1, &t), GPTX_ERR_INVALID);
    check_message_mentions("n_history is -1", __LINE__);
    CHECK_STATUS(gptx_sampler_sample_history(s, lg, 4, 4, NULL, 2, &t), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_sample_history(s, NULL, 4, 4, h, 1, &t), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_sample_history(s, lg, 4, 4, h, 1, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_sampler_sample_history(NULL, lg, 4, 4, h, 1, &t), GPTX_ERR_NULL);
    CHECK(t == -1);
    const float nan_row[4] = {1, NAN, 3, 4};
    CHECK_STATUS(gptx_sampler_sample(s, nan_row, 4, 4, &t), GPTX_ERR_NON_FINITE);
    check_message_starts("gptx_sampler_sample: logits[1] is NaN", __LINE__);
    CHECK_STATUS(gptx_sampler_sample_history(s, nan_row, 4, 4, h, 1, &t), GPTX_ERR_NON_FINITE);
    check_message_starts("gptx_sampler_sample_history: logits[1] is NaN", __LINE__);
    CHECK_OK(gptx_sampler_sample_history(s, lg, 4, 4, NULL, 0, &t));
    CHECK_OK(gptx_sampler_sample_history(s, lg, 4, 4, h, 1, &t));
    /* a refused call does not move the stream */
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    CHECK_OK(gptx_sampler_get_state(s, &st));
    CHECK(st.counter == 2);
    gptx_sampler_options got;
    gptx_sampler_options_init(&got);
    CHECK_OK(gptx_sampler_get_options(s, &got));
    CHECK(got.min_p == 1.0f && got.penalty_window == 1 && got.repetition_penalty == 1e-3f);
    gptx_sampler_destroy(s);
}

/* The generator passes its window, prompt included: with a huge frequency
 * penalty and greedy, no token repeats one in the window (prompt included),
 * and every token equals a draw by hand from gptx_generator_logits with
 * gptx_generator_window as the history. gptx_generate does the same. */
static void test_generator_history(void) {
    enum { V = 50, VP = 64 };
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_model_config c = small_config();
    if (make_cpu_context(&ctx, 2) != GPTX_OK || gptx_model_create(&m, ctx, &c) != GPTX_OK) {
        CHECK(0);
        gptx_context_destroy(ctx);
        return;
    }
    CHECK_OK(gptx_model_init_random(m, 42));
    CHECK_OK(train_on_pattern(m, 30));
    opts_t o = base(0.0f);
    o.freq = 1e6f;
    o.window = 16; /* the context length: the whole window */
    gptx_sampler *s = make(o), *ref = make(o);
    gptx_generator *g = NULL;
    CHECK_OK(gptx_generator_create(&g, m, NULL));
    int32_t prompt[4] = {1, 2, 3, 4}, win[16], tok = -1, want = -2;
    float logits[VP];
    CHECK_OK(gptx_generator_feed(g, prompt, 4));
    for (int i = 0; i < 12; i++) { /* up to the full window of 16, no slide */
        int len = 0;
        CHECK_OK(gptx_generator_window(g, win, 16, &len));
        CHECK_OK(gptx_generator_logits(g, logits, VP));
        CHECK_OK(gptx_sampler_sample_history(ref, logits, VP, V, win, len, &want));
        CHECK_OK(gptx_generator_next(g, s, &tok));
        CHECK(tok == want);
        for (int j = 0; j < len; j++)
            if (win[j] == tok) {
                fprintf(stderr, "token %d at step %d repeats window[%d]\n", (int)tok, i, j);
                check_failures++;
            }
    }
    /* gptx_generate: the same 12 tokens */
    gptx_sampler *s2 = make(o);
    int32_t out[12];
    CHECK_OK(gptx_generate(m, s2, prompt, 4, 12, out));
    int32_t all[16];
    int len = 0;
    CHECK_OK(gptx_generator_window(g, all, 16, &len));
    CHECK(len == 16 && memcmp(out, all + 4, sizeof out) == 0);
    gptx_sampler_destroy(s);
    gptx_sampler_destroy(s2);
    gptx_sampler_destroy(ref);
    gptx_generator_destroy(g);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

int main(void) {
    test_penalize_formulas();
    test_greedy_and_window();
    test_penalties_before_temperature();
    test_min_p();
    test_replay();
    test_defaults_unchanged();
    test_padded();
    test_refusals();
    test_generator_history();
    return check_exit("test_sampler_controls");
}
