/* The generator (gptx.h): its logits against a full forward pass over the
 * same window at every generated position, past the window's end too; the
 * same tokens with and without the cache; feeding in pieces; the window
 * options; a parameter change noticed; reset; the statistics; the cache in
 * the memory report; the bf16 policy's tolerance; every argument error.
 *
 * The criterion for the logits: |cached - full| <= 1e-5 * max(1, max |full|)
 * over the real columns, padded columns -inf on both (fp32). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_util.h"

enum { V = 50, VP = 64, CTX = 16, C = 16 };

static gptx_generator *make_generator(gptx_model *m, int window, int keep, int use_cache) {
    gptx_generator_options o;
    gptx_generator_options_init(&o);
    o.window = window;
    o.keep = keep;
    o.use_cache = use_cache;
    gptx_generator *g = NULL;
    if (gptx_generator_create(&g, m, &o) != GPTX_OK) {
        fprintf(stderr, "gptx_generator_create: %s\n", gptx_last_error());
        check_failures++;
    }
    return g;
}

/* The last row of a full forward pass over the generator's window. */
static int full_last_logits(gptx_model *m, const gptx_generator *g, float *last) {
    int32_t win[CTX];
    int len = 0;
    int rc = gptx_generator_window(g, win, CTX, &len);
    float *all = malloc((size_t)CTX * VP * sizeof *all);
    if (!all) return GPTX_ERR_NO_MEMORY;
    if (rc == GPTX_OK) rc = gptx_model_forward(m, win, NULL, 1, len, NULL);
    if (rc == GPTX_OK) rc = gptx_model_get_logits(m, all, (size_t)len * VP);
    if (rc == GPTX_OK) memcpy(last, all + (size_t)(len - 1) * VP, VP * sizeof *last);
    free(all);
    return rc;
}

/* max |a - b| / max(1, max |b|) over the real columns; the padded ones must
 * be -inf in both when masked. */
static double logits_error(const float *a, const float *b, int masked) {
    double worst = 0.0, scale = 1.0;
    for (int j = 0; j < V; j++) scale = fmax(scale, fabs(b[j]));
    for (int j = 0; j < VP; j++) {
        if (j >= V && masked) {
            if (!(isinf(a[j]) && a[j] < 0 && isinf(b[j]) && b[j] < 0)) worst = INFINITY;
            continue;
        }
        worst = fmax(worst, fabs((double)a[j] - b[j]) / scale);
    }
    return worst;
}

/* At every step of a greedy and a sampled run of 40 tokens (the window of 16
 * slides several times), the generator's logits against the full pass. */
static double check_every_position(gptx_model *m, int window, int keep, float temperature,
                                   double tol, const char *label) {
    gptx_generator *g = make_generator(m, window, keep, 1);
    gptx_sampler *s = make_sampler(temperature, 0, 1.0f, 99);
    int32_t prompt[5], tok;
    fill_tokens(prompt, 5, V, 11);
    float got[VP], want[VP];
    double worst = 0.0;
    CHECK_OK(gptx_generator_feed(g, prompt, 5));
    for (int i = 0; i < 40; i++) {
        CHECK_OK(gptx_generator_logits(g, got, VP));
        CHECK_OK(full_last_logits(m, g, want));
        worst = fmax(worst, logits_error(got, want, 1));
        CHECK_OK(gptx_generator_next(g, s, &tok));
        CHECK(tok >= 0 && tok < V);
    }
    gptx_generator_stats st;
    gptx_generator_stats_init(&st);
    CHECK_OK(gptx_generator_get_stats(g, &st));
    printf("%s (window %d, keep %d): 40 positions, worst |cached - full| / max(1, max|logit|) "
           "%.3g (tolerance %g); %lld slides, %lld positions recomputed\n",
           label, st.window, st.keep, worst, tol, (long long)st.slides,
           (long long)st.recomputed_positions);
    CHECK(worst <= tol);
    CHECK(st.slides >= 1);
    gptx_sampler_destroy(s);
    gptx_generator_destroy(g);
    return worst;
}

/* Cached and uncached generators draw the same tokens, past the window's end. */
static void check_cache_vs_none(gptx_model *m, int keep, float temperature, int top_k) {
    enum { N = 40 };
    int32_t prompt[7], a[N], b[N];
    fill_tokens(prompt, 7, V, 5);
    for (int use_cache = 0; use_cache < 2; use_cache++) {
        gptx_generator *g = make_generator(m, 0, keep, use_cache);
        gptx_sampler *s = make_sampler(temperature, top_k, 1.0f, 1234);
        CHECK_OK(gptx_generator_feed(g, prompt, 7));
        for (int i = 0; i < N; i++) CHECK_OK(gptx_generator_next(g, s, use_cache ? &b[i] : &a[i]));
        gptx_sampler_destroy(s);
        gptx_generator_destroy(g);
    }
    int differ = 0;
    for (int i = 0; i < N; i++) differ += a[i] != b[i];
    printf("keep %d, temperature %g, top-k %d: %d of %d tokens differ with and without the cache\n",
           keep, (double)temperature, top_k, differ, N);
    CHECK(differ == 0);
}

/* A prompt fed in one call, in pieces, or token by token with the logits
 * read in between: the same window and the same logits. */
static void check_feeding(gptx_model *m) {
    int32_t prompt[25];
    fill_tokens(prompt, 25, V, 21);
    float ref[VP], got[VP];
    gptx_generator *g = make_generator(m, 0, -1, 1);
    CHECK_OK(gptx_generator_feed(g, prompt, 25)); /* slides once while it is fed */
    CHECK_OK(gptx_generator_logits(g, ref, VP));
    int32_t win_a[CTX], win_b[CTX];
    int len_a = 0, len_b = 0;
    CHECK_OK(gptx_generator_window(g, win_a, CTX, &len_a));
    CHECK(len_a == 9); /* full at 16; the 17th and the 25th token each leave 8 + 1 */
    CHECK_OK(gptx_generator_reset(g));
    double worst = 0.0;
    for (int i = 0; i < 25; i++) {
        CHECK_OK(gptx_generator_feed(g, prompt + i, 1));
        if (i % 3 == 0) CHECK_OK(gptx_generator_logits(g, got, VP));
    }
    CHECK_OK(gptx_generator_logits(g, got, VP));
    CHECK_OK(gptx_generator_window(g, win_b, CTX, &len_b));
    CHECK(len_a == len_b && memcmp(win_a, win_b, (size_t)len_a * sizeof *win_a) == 0);
    worst = logits_error(got, ref, 1);
    printf("prompt of 25 fed at once or token by token: window %d tokens both, logits differ by "
           "%.3g\n",
           len_a, worst);
    CHECK(worst <= 1e-5);
    gptx_generator_destroy(g);
}

/* The window option below the context length, and keep 0. */
static void check_window_option(gptx_model *m) {
    gptx_generator *g = make_generator(m, 6, 0, 1);
    gptx_sampler *s = make_sampler(1.0f, 0, 1.0f, 3);
    int32_t prompt[3] = {1, 2, 3}, tok, win[CTX];
    float got[VP], want[VP];
    int len = 0, maxlen = 0;
    double worst = 0.0;
    CHECK_OK(gptx_generator_feed(g, prompt, 3));
    for (int i = 0; i < 20; i++) {
        CHECK_OK(gptx_generator_next(g, s, &tok));
        CHECK_OK(gptx_generator_window(g, win, CTX, &len));
        if (len > maxlen) maxlen = len;
        CHECK_OK(gptx_generator_logits(g, got, VP));
        CHECK_OK(full_last_logits(m, g, want));
        worst = fmax(worst, logits_error(got, want, 1));
    }
    printf("window 6, keep 0: longest window %d, worst logits error %.3g\n", maxlen, worst);
    CHECK(maxlen == 6 && worst <= 1e-5);
    gptx_sampler_destroy(s);
    gptx_generator_destroy(g);
}

/* A change of the parameters between two calls is seen by the next one. */
static void check_parameter_change(gptx_model *m) {
    gptx_generator *g = make_generator(m, 0, -1, 1);
    int32_t prompt[9];
    fill_tokens(prompt, 9, V, 8);
    float before[VP], after[VP], want[VP], bias[C], saved[C];
    CHECK_OK(gptx_generator_feed(g, prompt, 9));
    CHECK_OK(gptx_generator_logits(g, before, VP));
    CHECK_OK(gptx_model_get_parameter(m, "h.0.mlp.c_proj.bias", saved, C));
    /* not a uniform shift: the next LayerNorm would remove it */
    for (int k = 0; k < C; k++) bias[k] = saved[k] + 0.5f * (float)(k % 3 - 1);
    CHECK_OK(gptx_model_set_parameter(m, "h.0.mlp.c_proj.bias", bias, C));
    CHECK_OK(gptx_generator_logits(g, after, VP));
    CHECK_OK(full_last_logits(m, g, want));
    gptx_generator_stats st;
    gptx_generator_stats_init(&st);
    CHECK_OK(gptx_generator_get_stats(g, &st));
    printf("parameter change: logits moved by %.3g, %.3g from the new full pass; %lld positions "
           "recomputed\n",
           logits_error(after, before, 1), logits_error(after, want, 1),
           (long long)st.recomputed_positions);
    CHECK(logits_error(after, before, 1) > 1e-3);
    CHECK(logits_error(after, want, 1) <= 1e-5);
    CHECK(st.recomputed_positions == 9);
    CHECK_OK(gptx_model_set_parameter(m, "h.0.mlp.c_proj.bias", saved, C));
    gptx_generator_destroy(g);
}

/* Passes and timings, the cache in the memory report, reset. */
static void check_stats_memory_reset(gptx_context *ctx, gptx_model *m) {
    gptx_memory_stats m0, m1, m2;
    gptx_memory_stats_init(&m0);
    gptx_memory_stats_init(&m1);
    gptx_memory_stats_init(&m2);
    CHECK_OK(gptx_context_memory(ctx, &m0));
    gptx_generator *g = make_generator(m, 0, -1, 1);
    CHECK_OK(gptx_context_memory(ctx, &m1));
    gptx_generator_stats st;
    gptx_generator_stats_init(&st);
    CHECK_OK(gptx_generator_get_stats(g, &st));
    size_t expect = 2 /* layers */ * 2 /* K, V */ * (size_t)CTX * C * sizeof(float);
    printf("cache: %zu bytes (expected %zu), context allocated %llu -> %llu\n", st.cache_bytes,
           expect, (unsigned long long)m0.allocated, (unsigned long long)m1.allocated);
    CHECK(st.cache_bytes == expect && m1.allocated - m0.allocated == expect);
    CHECK(st.window == CTX && st.keep == CTX / 2 && st.use_cache == 1);
    gptx_sampler *s = make_sampler(0.0f, 0, 1.0f, 1);
    int32_t prompt[4] = {4, 5, 6, 7}, tok;
    CHECK_OK(gptx_generator_feed(g, prompt, 4));
    for (int i = 0; i < 6; i++) CHECK_OK(gptx_generator_next(g, s, &tok));
    CHECK_OK(gptx_generator_get_stats(g, &st));
    /* the prompt in one pass; 5 sampled tokens fed back (the 6th is never run) */
    CHECK(st.tokens == 10 && st.prefill_passes == 1 && st.prefill_tokens == 4);
    CHECK(st.decode_passes == 5 && st.positions == 9 && st.slides == 0);
    CHECK(st.prefill_seconds > 0.0 && st.decode_seconds > 0.0);
    CHECK_OK(gptx_generator_reset(g));
    int len = -1;
    CHECK_OK(gptx_generator_window(g, NULL, 0, &len));
    CHECK(len == 0);
    CHECK_OK(gptx_generator_get_stats(g, &st));
    CHECK(st.tokens == 0 && st.decode_passes == 0 && st.cache_bytes == expect);
    CHECK_STATUS(gptx_generator_next(g, s, &tok), GPTX_ERR_STATE);
    gptx_generator_destroy(g);
    CHECK_OK(gptx_context_memory(ctx, &m2));
    CHECK(m2.allocated == m0.allocated);
    /* gptx_generate leaves nothing allocated either */
    int32_t out[20];
    CHECK_OK(gptx_generate(m, s, prompt, 4, 20, out));
    CHECK_OK(gptx_context_memory(ctx, &m2));
    CHECK(m2.allocated == m0.allocated);
    gptx_sampler_destroy(s);
}

static void check_errors(gptx_model *m) {
    gptx_generator *g = NULL;
    gptx_generator_options o;
    gptx_generator_options_init(&o);
    CHECK(o.window == 0 && o.keep == -1 && o.use_cache == 1);
    CHECK_STATUS(gptx_generator_create(NULL, m, &o), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generator_create(&g, NULL, &o), GPTX_ERR_NULL);
    o.window = CTX + 1;
    CHECK_STATUS(gptx_generator_create(&g, m, &o), GPTX_ERR_INVALID);
    CHECK_MSG("opts.window is 17");
    o.window = -1;
    CHECK_STATUS(gptx_generator_create(&g, m, &o), GPTX_ERR_INVALID);
    o.window = 0;
    o.keep = CTX;
    CHECK_STATUS(gptx_generator_create(&g, m, &o), GPTX_ERR_INVALID);
    CHECK_MSG("opts.keep is 16");
    o.keep = -2;
    CHECK_STATUS(gptx_generator_create(&g, m, &o), GPTX_ERR_INVALID);
    o.keep = -1;
    o.use_cache = 2;
    CHECK_STATUS(gptx_generator_create(&g, m, &o), GPTX_ERR_INVALID);
    o.use_cache = 1;
    o.struct_size = GPTX_GENERATOR_OPTIONS_SIZE + 8; /* a newer header */
    CHECK_STATUS(gptx_generator_create(&g, m, &o), GPTX_ERR_UNSUPPORTED);
    CHECK(g == NULL);
    CHECK_OK(gptx_generator_create(&g, m, NULL));
    gptx_sampler *s = make_sampler(1.0f, 0, 1.0f, 2);
    int32_t toks[3] = {1, 2, 3}, tok = -7;
    float logits[VP];
    CHECK_STATUS(gptx_generator_logits(g, logits, VP), GPTX_ERR_STATE);
    CHECK_MSG("empty");
    CHECK_STATUS(gptx_generator_next(g, s, &tok), GPTX_ERR_STATE);
    CHECK(tok == -7);
    CHECK_STATUS(gptx_generator_feed(g, toks, 0), GPTX_ERR_INVALID);
    CHECK_MSG("n is 0");
    CHECK_STATUS(gptx_generator_feed(g, NULL, 3), GPTX_ERR_NULL);
    toks[1] = V;
    CHECK_STATUS(gptx_generator_feed(g, toks, 3), GPTX_ERR_TOKEN_RANGE);
    CHECK_MSG("tokens[1] is 50");
    toks[1] = -1;
    CHECK_STATUS(gptx_generator_feed(g, toks, 3), GPTX_ERR_TOKEN_RANGE);
    toks[1] = 2;
    int len = -1;
    CHECK_OK(gptx_generator_window(g, NULL, 0, &len));
    CHECK(len == 0); /* a rejected feed appends nothing */
    CHECK_OK(gptx_generator_feed(g, toks, 3));
    CHECK_STATUS(gptx_generator_logits(g, logits, VP - 1), GPTX_ERR_SHAPE);
    CHECK_STATUS(gptx_generator_logits(g, NULL, VP), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generator_next(g, NULL, &tok), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generator_next(g, s, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generator_window(g, NULL, 3, &len), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generator_window(g, toks, 3, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generator_reset(NULL), GPTX_ERR_NULL);
    gptx_generator_stats st;
    gptx_generator_stats_init(&st);
    CHECK_STATUS(gptx_generator_get_stats(NULL, &st), GPTX_ERR_NULL);
    st.struct_size = 4;
    CHECK_STATUS(gptx_generator_get_stats(g, &st), GPTX_ERR_INVALID);
    CHECK_OK(gptx_generator_next(g, s, &tok));
    CHECK(tok >= 0 && tok < V);
    gptx_generator_destroy(NULL);
    gptx_generator_destroy(g);
    gptx_sampler_destroy(s);
}

/* Under the bf16 policy (products and activations bf16), a wider model
 * (width 128, head size 64) trained a little: the cached logits against a
 * full bf16 pass, within bf16's tolerance. */
static void check_bf16(void) {
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        printf("bf16: no oneDNN in this build, skipped\n");
        return;
    }
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = 2;
    co.precision = GPTX_PRECISION_BF16;
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_model_config c = small_config();
    c.n_embd = 128;
    CHECK_OK(gptx_context_create(&ctx, &co));
    CHECK_OK(gptx_model_create(&m, ctx, &c));
    CHECK_OK(gptx_model_init_random(m, 7));
    CHECK_OK(train_on_pattern(m, 10));
    check_every_position(m, 0, -1, 0.0f, 2e-2, "bf16 policy, width 128, greedy");
    check_every_position(m, 0, -1, 1.0f, 2e-2, "bf16 policy, width 128, T=1");
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 42));
    REQUIRE_OK(train_on_pattern(m, 30));
    check_every_position(m, 0, -1, 0.0f, 1e-5, "greedy");
    check_every_position(m, 0, -1, 1.0f, 1e-5, "T=1");
    check_every_position(m, 0, CTX - 1, 1.0f, 1e-5, "T=1, one-token slides");
    check_cache_vs_none(m, -1, 0.0f, 0);
    check_cache_vs_none(m, -1, 1.0f, 0);
    check_cache_vs_none(m, 3, 0.8f, 5);
    check_cache_vs_none(m, CTX - 1, 1.0f, 0);
    check_feeding(m);
    check_window_option(m);
    check_parameter_change(m);
    check_stats_memory_reset(ctx, m);
    check_errors(m);
    check_bf16();
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return check_exit("test_generator");
}
