/* gptx_generate against a reference loop over the public API (a full
 * forward pass over the window, logits of the last row, the sampler; the
 * window kept as gptx.h's generator options say), its argument checks, the
 * last-position forward against the full one, and that the model is usable
 * (and honest about its logits) afterwards. test_generator.c checks the
 * generator itself. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model.h"
#include "test_util.h"

/* The window of the generator options: a token arriving at a full window
 * (the context length L) first leaves only the last `keep` tokens. */
static void window_append(int32_t *win, int *len, int L, int keep, int32_t tok) {
    if (*len == L) {
        memmove(win, win + L - keep, (size_t)keep * sizeof *win);
        *len = keep;
    }
    win[(*len)++] = tok;
}

/* What gptx_generate promises, spelled out with the public API: keep =
 * L / 2 is its default; keep = L - 1 is the one-token slide of gptx 0.1.
 * A prompt longer than L is cropped to its last L tokens first. */
static int reference_generate(gptx_model *m, gptx_sampler *s, const int32_t *prompt, int n_prompt,
                              int n_new, int keep, int32_t *out) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    int rc0 = gptx_model_get_config(m, &c);
    if (rc0 != GPTX_OK) return rc0;
    int L = c.context_length, Vp = c.padded_vocab_size, len = 0;
    int32_t *win = malloc((size_t)L * sizeof *win);
    float *logits = malloc((size_t)L * Vp * sizeof *logits);
    int rc = win && logits ? GPTX_OK : GPTX_ERR_NO_MEMORY;
    for (int i = 0; i < n_prompt && rc == GPTX_OK; i++) window_append(win, &len, L, L - 1, prompt[i]);
    for (int i = 0; i < n_new && rc == GPTX_OK; i++) {
        rc = gptx_model_forward(m, win, NULL, 1, len, NULL);
        if (rc == GPTX_OK) rc = gptx_model_get_logits(m, logits, (size_t)len * Vp);
        if (rc == GPTX_OK)
            rc = gptx_sampler_sample(s, logits + (size_t)(len - 1) * Vp, Vp, c.vocab_size, &out[i]);
        if (rc == GPTX_OK) window_append(win, &len, L, keep, out[i]);
    }
    free(win);
    free(logits);
    return rc;
}

static void compare_with_reference(gptx_model *m, float temperature, int top_k, float top_p,
                                   int n_prompt, int n_new, const char *label) {
    int32_t prompt[64], got[64], want[64];
    fill_tokens(prompt, (size_t)n_prompt, 50, 77u + (uint32_t)n_prompt);
    gptx_sampler *a = make_sampler(temperature, top_k, top_p, 31337);
    gptx_sampler *b = make_sampler(temperature, top_k, top_p, 31337);
    CHECK_OK(gptx_generate(m, a, prompt, n_prompt, n_new, got));
    CHECK_OK(reference_generate(m, b, prompt, n_prompt, n_new, 16 / 2, want));
    int same = 1, distinct = 0;
    for (int i = 0; i < n_new; i++) {
        same &= got[i] == want[i];
        distinct += i > 0 && got[i] != got[i - 1];
        CHECK(got[i] >= 0 && got[i] < 50);
    }
    if (!same) {
        fprintf(stderr, "%s: generate differs from the reference loop\n", label);
        check_failures++;
    }
    gptx_sampler_state sa, sb;
    gptx_sampler_state_init(&sa);
    gptx_sampler_state_init(&sb);
    CHECK_OK(gptx_sampler_get_state(a, &sa));
    CHECK_OK(gptx_sampler_get_state(b, &sb));
    CHECK(sa.counter == (uint64_t)n_new && sb.counter == (uint64_t)n_new);
    printf("%s: %d tokens, %d changes between neighbours\n", label, n_new, distinct);
    gptx_sampler_destroy(a);
    gptx_sampler_destroy(b);
}

static void test_matches_reference(gptx_model *m) {
    compare_with_reference(m, 0.0f, 0, 1.0f, 3, 10, "greedy");
    compare_with_reference(m, 1.0f, 0, 1.0f, 3, 10, "T=1");
    /* prompt + new > context length 16: the window slides */
    compare_with_reference(m, 0.0f, 0, 1.0f, 5, 30, "greedy, cropped");
    compare_with_reference(m, 1.0f, 0, 1.0f, 5, 30, "T=1, cropped");
    compare_with_reference(m, 0.8f, 5, 0.9f, 5, 30, "T=0.8 top-k 5 top-p 0.9, cropped");
    /* the prompt alone exceeds the context: cropped to its last 16 tokens
     * (37: the generator's own rule would leave 13, tokens 24..36) */
    compare_with_reference(m, 1.0f, 0, 1.0f, 37, 6, "T=1, long prompt");
    compare_with_reference(m, 0.0f, 0, 1.0f, 1, 1, "greedy, one token");
}

static void test_errors(gptx_model *m) {
    gptx_sampler *s = make_sampler(1.0f, 0, 1.0f, 1);
    int32_t prompt[4] = {1, 2, 3, 4}, out[4] = {-7, -7, -7, -7};
    CHECK_STATUS(gptx_generate(NULL, s, prompt, 4, 2, out), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generate(m, NULL, prompt, 4, 2, out), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generate(m, s, NULL, 4, 2, out), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generate(m, s, prompt, 4, 2, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_generate(m, s, prompt, 0, 2, out), GPTX_ERR_INVALID);
    CHECK_MSG("n_prompt is 0");
    CHECK_STATUS(gptx_generate(m, s, prompt, 4, -1, out), GPTX_ERR_INVALID);
    CHECK_MSG("n_new is -1");
    prompt[2] = 50;
    CHECK_STATUS(gptx_generate(m, s, prompt, 4, 2, out), GPTX_ERR_TOKEN_RANGE);
    CHECK_MSG("prompt[2] is 50");
    prompt[2] = -1;
    CHECK_STATUS(gptx_generate(m, s, prompt, 4, 2, out), GPTX_ERR_TOKEN_RANGE);
    CHECK_MSG("prompt[2] is -1");
    prompt[2] = 3;
    CHECK(out[0] == -7 && out[1] == -7);
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    CHECK_OK(gptx_sampler_get_state(s, &st));
    CHECK(st.counter == 0); /* rejected calls draw nothing */
    CHECK_OK(gptx_generate(m, s, prompt, 4, 0, NULL)); /* nothing to do */
    CHECK_OK(gptx_generate(m, s, prompt, 4, 0, out));
    CHECK(out[0] == -7);
    gptx_sampler_destroy(s);
}

/* The last-position path against the full forward pass, and the model's
 * state afterwards. */
static void test_last_logits(gptx_model *m) {
    enum { T = 12, Vp = 64 };
    int32_t ids[T];
    fill_tokens(ids, T, 50, 5);
    float *full = malloc((size_t)T * Vp * sizeof *full), last[Vp];
    if (!full) {
        CHECK(0);
        return;
    }
    CHECK_OK(gptx_model_forward(m, ids, NULL, 1, T, NULL));
    CHECK_OK(gptx_model_get_logits(m, full, (size_t)T * Vp));
    CHECK_OK(gptx_model_forward_last_logits(m, ids, T, 0, last));
    double worst = 0.0;
    for (int j = 0; j < Vp; j++) {
        float a = full[(size_t)(T - 1) * Vp + j], b = last[j];
        if (j >= 50) {
            CHECK(isinf(b) && b < 0); /* masked like the full pass */
            continue;
        }
        double d = fabs((double)a - (double)b);
        if (d > worst) worst = d;
    }
    printf("last-position logits vs full forward: max |diff| %.3g\n", worst);
    CHECK(worst <= 1e-5);
    /* no forward pass stands any more: get_logits and backward refuse */
    CHECK_STATUS(gptx_model_get_logits(m, full, (size_t)T * Vp), GPTX_ERR_STATE);
    CHECK_STATUS(gptx_model_backward(m, 1.0f), GPTX_ERR_STATE);
    /* argument checks of the internal entry point */
    CHECK_STATUS(gptx_model_forward_last_logits(m, ids, 0, 0, last), GPTX_ERR_SHAPE);
    CHECK_STATUS(gptx_model_forward_last_logits(m, ids, 17, 0, last), GPTX_ERR_SHAPE);
    ids[3] = 99;
    CHECK_STATUS(gptx_model_forward_last_logits(m, ids, T, 0, last), GPTX_ERR_TOKEN_RANGE);
    ids[3] = 1;

    /* after generate, a batched training step still works (the activations
     * are re-carved for the larger batch) */
    gptx_sampler *s = make_sampler(1.0f, 0, 1.0f, 3);
    int32_t out[8];
    CHECK_OK(gptx_generate(m, s, ids, T, 8, out));
    CHECK_STATUS(gptx_model_get_logits(m, full, (size_t)T * Vp), GPTX_ERR_STATE);
    int32_t in[2 * 16], tg[2 * 16];
    fill_tokens(in, 32, 50, 8);
    fill_tokens(tg, 32, 50, 9);
    float loss = 0.0f;
    CHECK_OK(gptx_model_forward(m, in, tg, 2, 16, &loss));
    CHECK(isfinite(loss) && loss > 0.0f);
    CHECK_OK(gptx_model_backward(m, 1.0f));
    gptx_sampler_destroy(s);
    free(full);
}

/* Unmasked padding whose logits are the largest: still never generated. */
static void test_unmasked_padding(gptx_context *ctx) {
    gptx_model_config c = small_config();
    c.mask_padded_logits = 0;
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK || gptx_model_init_random(m, 4) != GPTX_OK) {
        CHECK(0);
        gptx_model_destroy(m);
        return;
    }
    /* padded rows of the tied wte/lm_head = 5 x the mean of the real rows'
     * direction: their logits dominate every position */
    size_t C = 16, n = 64 * C;
    float *wte = malloc(n * sizeof *wte);
    if (!wte) {
        CHECK(0);
        gptx_model_destroy(m);
        return;
    }
    CHECK_OK(gptx_model_get_parameter(m, "wte.weight", wte, n));
    float ln_b[16];
    for (size_t k = 0; k < C; k++) ln_b[k] = 1.0f; /* ln_f output ~ +1 in every channel */
    CHECK_OK(gptx_model_set_parameter(m, "ln_f.bias", ln_b, C));
    for (size_t r = 50; r < 64; r++)
        for (size_t k = 0; k < C; k++) wte[r * C + k] = 10.0f;
    CHECK_OK(gptx_model_set_parameter(m, "wte.weight", wte, n));
    int32_t prompt[3] = {1, 2, 3}, out[20];
    /* the full forward confirms a padded column wins the unrestricted argmax */
    float logits[3 * 64];
    CHECK_OK(gptx_model_forward(m, prompt, NULL, 1, 3, NULL));
    CHECK_OK(gptx_model_get_logits(m, logits, 3 * 64));
    int best = 0;
    for (int j = 1; j < 64; j++)
        if (logits[2 * 64 + j] > logits[2 * 64 + best]) best = j;
    CHECK(best >= 50);
    for (int greedy = 0; greedy < 2; greedy++) {
        gptx_sampler *s = make_sampler(greedy ? 0.0f : 1.0f, 0, 1.0f, 8);
        CHECK_OK(gptx_generate(m, s, prompt, 3, 20, out));
        for (int i = 0; i < 20; i++) CHECK(out[i] >= 0 && out[i] < 50);
        gptx_sampler_destroy(s);
    }
    free(wte);
    gptx_model_destroy(m);
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 42));
    REQUIRE_OK(train_on_pattern(m, 30));
    test_matches_reference(m);
    test_errors(m);
    test_last_logits(m);
    test_unmasked_padding(ctx);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return check_exit("test_generate");
}
