/* numerics_check: the classic counterexamples of numerical reproducibility,
 * reproduced with the library. Each case prints what it shows and the exit
 * status is the number of cases where the library's behaviour disagrees. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx.h>

#include "prog_flags.h"

static int failures = 0;

/* Prints a gptx error and counts the case as failed. */
static int gx(int rc, const char *what) {
    if (rc != GPTX_OK) {
        printf("  error: %s: %s (%s)\n", what, gptx_status_name(rc), gptx_last_error());
        failures++;
    }
    return rc;
}
#define GX(call)                                  \
    do {                                          \
        if (gx((call), #call) != GPTX_OK) goto done; \
    } while (0)

static void verdict(int ok, const char *claim) {
    printf("  %s: %s\n", ok ? "ok" : "DISAGREES", claim);
    if (!ok) failures++;
}

static int make_context(gptx_context **ctx, int threads) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = threads;
    o.deterministic = 1;
    return gptx_context_create(ctx, &o);
}

static gptx_model_config tiny_config(int vocab, int padded) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = vocab;
    c.padded_vocab_size = padded;
    c.context_length = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    return c;
}

static void print_draws(const char *what, const int32_t *d, int n) {
    printf("  %-34s", what);
    for (int i = 0; i < n; i++) printf(" %3d", (int)d[i]);
    printf("\n");
}

/* ---- 1: same seed and call order replay; one extra draw shifts the rest ---- */

enum { ROW = 1000, DRAWS = 6 };

static int draw(gptx_sampler *s, const float *row, int32_t *out, int n) {
    for (int i = 0; i < n; i++) {
        int rc = gptx_sampler_sample(s, row, ROW, ROW, &out[i]);
        if (rc != GPTX_OK) return rc;
    }
    return GPTX_OK;
}

static void case_replay(void) {
    printf("1. Same seed and call order replay the same random numbers; one extra draw\n"
           "   shifts everything after it. (Sampler draws from %d equally likely tokens,\n"
           "   so each token is a random number in [0, %d).)\n", ROW, ROW);
    static float row[ROW]; /* all logits 0: uniform */
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.seed = 2024;
    gptx_sampler *s1 = NULL, *s2 = NULL, *s3 = NULL;
    int32_t first[DRAWS + 1], again[DRAWS], shifted[DRAWS], resumed[3];
    GX(gptx_sampler_create(&s1, &so));
    GX(gptx_sampler_create(&s2, &so));
    GX(gptx_sampler_create(&s3, &so));
    GX(draw(s1, row, first, DRAWS + 1)); /* the 7th only to show the shift */
    GX(draw(s2, row, again, DRAWS));
    int32_t extra;
    GX(draw(s3, row, &extra, 1)); /* one extra call first */
    GX(draw(s3, row, shifted, DRAWS));
    print_draws("seed 2024 (and a 7th draw):", first, DRAWS + 1);
    print_draws("seed 2024 again:", again, DRAWS);
    print_draws("seed 2024, one extra draw first:", shifted, DRAWS);
    verdict(memcmp(first, again, sizeof again) == 0, "the replay gives the same six numbers");
    int same_pos = 0;
    for (int i = 0; i < DRAWS; i++) same_pos += shifted[i] == first[i];
    verdict(same_pos < DRAWS, "after one extra draw the six numbers change");
    verdict(memcmp(shifted, first + 1, sizeof shifted) == 0,
            "they are the first run's numbers shifted by one (counter-based stream)");
    /* the state is the position: restoring it replays from there */
    gptx_sampler_state st;
    gptx_sampler_state_init(&st);
    st.seed = so.seed;
    st.stream = so.stream;
    st.counter = 3;
    GX(gptx_sampler_set_state(s2, &st));
    GX(draw(s2, row, resumed, 3));
    verdict(memcmp(resumed, first + 3, sizeof resumed) == 0,
            "set_state(counter 3) replays numbers 4..6");
done:
    gptx_sampler_destroy(s1);
    gptx_sampler_destroy(s2);
    gptx_sampler_destroy(s3);
}

/* ---- 2: float addition is not associative; fixed orders make it repeatable ---- */

static void case_associativity(void) {
    printf("\n2. float32 addition is not associative, so a sum's value depends on its\n"
           "   order; the CPU backend fixes every reduction order, so thread counts\n"
           "   cannot change results.\n");
    volatile float a = 1e8f, b = -1e8f, c = 1.0f; /* volatile: no constant folding */
    float left = (a + b) + c, right = a + (b + c);
    printf("  (1e8 + -1e8) + 1 = %g   1e8 + (-1e8 + 1) = %g   (-1e8 + 1 rounds to -1e8:\n"
           "  float spacing at 1e8 is 8)\n", (double)left, (double)right);
    verdict(left == 1.0f && right == 0.0f, "the two groupings give 1 and 0");
    /* what a reduction split by thread count does to the same numbers */
    volatile float x[4] = {1e8f, 1.0f, -1e8f, 1.0f};
    float one = 0.0f;
    for (int i = 0; i < 4; i++) one += x[i];
    float half0 = x[0] + x[1], half1 = x[2] + x[3], two = half0 + half1;
    printf("  sum of [1e8, 1, -1e8, 1]: one thread in order %g, two halves %g\n", (double)one,
           (double)two);
    verdict(one != two, "a reduction split by thread count changes the result");

    gptx_context *c1 = NULL, *c2 = NULL;
    gptx_model *m1 = NULL, *m2 = NULL;
    gptx_model_config cfg = tiny_config(64, 64);
    enum { B = 2, T = 16 };
    int32_t in[B * T];
    for (int i = 0; i < B * T; i++) in[i] = (i * 37 + 11) % 64;
    GX(make_context(&c1, 1));
    GX(make_context(&c2, 2));
    GX(gptx_model_create(&m1, c1, &cfg));
    GX(gptx_model_create(&m2, c2, &cfg));
    GX(gptx_model_init_random(m1, 5));
    GX(gptx_model_init_random(m2, 5));
    gptx_compare_report r;
    gptx_compare_report_init(&r);
    GX(gptx_compare_models(m1, m2, in, B, T, NULL, &r));
    printf("  model logits at 1 and 2 threads: max abs diff %g, bitwise equal: %s\n",
           r.logits_max_abs, r.bitwise_equal ? "yes" : "no");
    verdict(r.bitwise_equal == 1, "the library's logits do not depend on the thread count");
done:
    gptx_model_destroy(m1);
    gptx_model_destroy(m2);
    gptx_context_destroy(c1);
    gptx_context_destroy(c2);
}

/* ---- 3: a padded logit of 100 wins argmax until padded logits are masked ---- */

enum { V3 = 10, VP3 = 16, PAD_ID = 12 };

/* ln_f weight 0 and bias e_0 make the final hidden state e_0 at every
 * position, so (tied head) logit[v] = wte[v][0]; then wte[PAD_ID][0] = 100. */
static int rig_padded_logit(gptx_model *m) {
    int C = 16;
    float lnw[16] = {0}, lnb[16] = {0};
    lnb[0] = 1.0f;
    int rc = gptx_model_set_parameter(m, "ln_f.weight", lnw, (size_t)C);
    if (rc == GPTX_OK) rc = gptx_model_set_parameter(m, "ln_f.bias", lnb, (size_t)C);
    float *wte = malloc((size_t)VP3 * C * sizeof *wte);
    if (!wte) return GPTX_ERR_NO_MEMORY;
    if (rc == GPTX_OK) rc = gptx_model_get_parameter(m, "wte.weight", wte, (size_t)VP3 * C);
    wte[PAD_ID * C] = 100.0f;
    if (rc == GPTX_OK) rc = gptx_model_set_parameter(m, "wte.weight", wte, (size_t)VP3 * C);
    free(wte);
    return rc;
}

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static void case_padded(void) {
    printf("\n3. A padded-vocabulary logit of 100 wins the model's argmax and dominates\n"
           "   its softmax until padded logits are masked (vocab %d padded to %d; the\n"
           "   padded row %d of the tied wte is rigged to give logit 100).\n", V3, VP3, PAD_ID);
    gptx_context *ctx = NULL;
    gptx_model *m[2] = {NULL, NULL};
    gptx_sampler *s = NULL;
    enum { T = 4 };
    int32_t in[T] = {1, 2, 3, 4}, tg[T] = {2, 3, 4, 5};
    float logits[T * VP3];
    GX(make_context(&ctx, 1));
    for (int masked = 0; masked <= 1; masked++) {
        gptx_model_config cfg = tiny_config(V3, VP3);
        cfg.mask_padded_logits = masked;
        GX(gptx_model_create(&m[masked], ctx, &cfg));
        GX(gptx_model_init_random(m[masked], 3));
        GX(rig_padded_logit(m[masked]));
        float loss = 0.0f;
        GX(gptx_model_forward(m[masked], in, tg, 1, T, &loss));
        GX(gptx_model_get_logits(m[masked], logits, sizeof logits / sizeof logits[0]));
        const float *last = logits + (T - 1) * VP3;
        int best = argmax(last, VP3);
        printf("  mask_padded_logits = %d: logit[%d] = %g, argmax over all %d columns = %d,"
               " loss %.4f\n", masked, PAD_ID, (double)last[PAD_ID], VP3, best, (double)loss);
        if (!masked) {
            verdict(best == PAD_ID, "unmasked: the padded id wins the argmax");
            verdict(loss > 90.0f, "unmasked: the padded logit takes nearly all the probability "
                                  "(loss ~ 100)");
        } else {
            int all_inf = 1;
            for (int t = 0; t < T; t++)
                for (int v = V3; v < VP3; v++) all_inf &= isinf(logits[t * VP3 + v]) && logits[t * VP3 + v] < 0;
            verdict(all_inf, "masked: every padded logit is -inf");
            verdict(best < V3, "masked: the argmax is a real token");
            verdict(loss < 5.0f, "masked: the loss is that of the real vocabulary (~ ln 10)");
        }
        /* the sampler never returns a padded id, greedy or not */
        int padded_drawn = 0;
        for (int greedy = 0; greedy <= 1; greedy++) {
            gptx_sampler_options so;
            gptx_sampler_options_init(&so);
            so.temperature = greedy ? 0.0f : 1.0f;
            so.seed = 7;
            GX(gptx_sampler_create(&s, &so));
            for (int i = 0; i < 1000; i++) {
                int32_t tok = -1;
                GX(gptx_sampler_sample(s, last, VP3, V3, &tok));
                padded_drawn += tok < 0 || tok >= V3;
            }
            gptx_sampler_destroy(s);
            s = NULL;
        }
        printf("  gptx_sampler (temperature 1 and greedy, 1000 draws each): %d padded ids\n",
               padded_drawn);
        verdict(padded_drawn == 0, "the sampler never returns an id >= vocab_size");
    }
done:
    gptx_sampler_destroy(s);
    gptx_model_destroy(m[0]);
    gptx_model_destroy(m[1]);
    gptx_context_destroy(ctx);
}

/* ---- 4: averaging per-shard mean gradients ---- */

enum { V4 = 32, T4 = 8 };

/* Mean-loss gradient of one batch, all parameters flattened into g. */
static int gradient(gptx_model *m, const int32_t *in, const int32_t *tg, int B, float *g,
                    int64_t *ntok) {
    int rc = gptx_model_zero_grad(m);
    if (rc == GPTX_OK) rc = gptx_model_forward(m, in, tg, B, T4, NULL);
    if (rc == GPTX_OK) rc = gptx_model_num_loss_tokens(m, ntok);
    if (rc == GPTX_OK) rc = gptx_model_backward(m, 1.0f);
    size_t off = 0;
    for (int i = 0; rc == GPTX_OK && i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        rc = gptx_model_tensor_info(m, i, &info);
        if (rc == GPTX_OK) rc = gptx_model_get_gradient(m, info.name, g + off, info.numel);
        off += info.numel;
    }
    return rc;
}

/* max |x - ref| / max |ref| */
static double rel_error(const float *x, const float *ref, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs((double)x[i] - (double)ref[i]));
        den = fmax(den, fabs((double)ref[i]));
    }
    return num / den;
}

static void case_shards(void) {
    printf("\n4. Averaging per-shard mean gradients equals the global mean gradient for\n"
           "   equal shards but not for unequal ones; weighting each shard by its token\n"
           "   count fixes it. (Two shards of one row each; the second counts either all\n"
           "   %d targets or only 2, the rest GPTX_IGNORE_INDEX.)\n", T4);
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    float *buf = NULL;
    gptx_model_config cfg = tiny_config(V4, V4);
    GX(make_context(&ctx, 1));
    GX(gptx_model_create(&m, ctx, &cfg));
    GX(gptx_model_init_random(m, 11));
    size_t n = gptx_model_num_parameters(m);
    buf = malloc(5 * n * sizeof *buf);
    if (!buf) goto done;
    float *gA = buf, *gB = buf + n, *g = buf + 2 * n, *plain = buf + 3 * n, *weighted = buf + 4 * n;
    for (int unequal = 0; unequal <= 1; unequal++) {
        int32_t in[2 * T4], tg[2 * T4];
        for (int i = 0; i < 2 * T4; i++) {
            in[i] = (i * 7 + 3) % V4;
            tg[i] = (i * 7 + 10) % V4;
        }
        if (unequal)
            for (int t = T4 + 2; t < 2 * T4; t++) tg[t] = GPTX_IGNORE_INDEX; /* shard B: 2 targets */
        int64_t nA = 0, nB = 0, nAll = 0;
        GX(gradient(m, in, tg, 1, gA, &nA));
        GX(gradient(m, in + T4, tg + T4, 1, gB, &nB));
        GX(gradient(m, in, tg, 2, g, &nAll)); /* A and B as one batch */
        for (size_t i = 0; i < n; i++) {
            plain[i] = 0.5f * (gA[i] + gB[i]);
            weighted[i] = (float)(((double)nA * gA[i] + (double)nB * gB[i]) / (double)(nA + nB));
        }
        double e_plain = rel_error(plain, g, n), e_weighted = rel_error(weighted, g, n);
        printf("  %s shards: tokens %lld + %lld = %lld; rel. error vs global gradient: plain"
               " average %.3g, token-weighted %.3g\n", unequal ? "unequal" : "equal",
               (long long)nA, (long long)nB, (long long)nAll, e_plain, e_weighted);
        if (!unequal) {
            verdict(e_plain < 1e-5, "equal shards: the plain average is the global gradient "
                                    "(to float rounding)");
        } else {
            verdict(e_plain > 1e-2, "unequal shards: the plain average is not the global "
                                    "gradient");
        }
        verdict(e_weighted < 1e-5, "the token-weighted average is the global gradient");
    }
done:
    free(buf);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

int main(int argc, char **argv) {
    /* no flags but --help and --version (prog_flags.h) */
    static const prog_cli cli = {
        "numerics_check",
        "usage: numerics_check [--version]\n"
        "Runs the classic reproducibility counterexamples (RNG replay, float\n"
        "non-associativity, padded logits, shard averaging) on the library and\n"
        "says whether each agrees with its expectation. Exit status 0: all agree,\n"
        "1: a disagreement, 2: a wrong command line.\n",
        NULL, 0, NULL};
    char none = 0;
    int parsed = prog_flags_parse(&cli, &none, NULL, argc, argv, NULL);
    if (parsed) return parsed == 1 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    printf("numerics_check (gptx %s)\n\n", gptx_version());
    case_replay();
    case_associativity();
    case_padded();
    case_shards();
    printf("\n%s: %d disagreement(s)\n", failures ? "FAILED" : "all cases agree", failures);
    return failures ? PROG_EXIT_FAILURE : PROG_EXIT_OK;
}
