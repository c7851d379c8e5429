/* Model-level behaviour on the CPU backend: initialisation, parameter table,
 * padded-vocabulary masking, determinism across thread counts, gradient
 * accumulation, the fused forward_backward, memory accounting and a short
 * training run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_util.h"

static float *get_param(gptx_model *m, const char *name, size_t *n) {
    int idx;
    gptx_tensor_info info;
    gptx_tensor_info_init(&info);
    if (gptx_model_find_tensor(m, name, &idx) || gptx_model_tensor_info(m, idx, &info)) return NULL;
    float *p = malloc(info.numel * sizeof *p);
    if (gptx_model_get_parameter(m, name, p, info.numel)) { free(p); return NULL; }
    *n = info.numel;
    return p;
}

static void stats(const float *x, size_t n, double *mean, double *std) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) { s += x[i]; s2 += (double)x[i] * x[i]; }
    *mean = s / n;
    *std = sqrt(s2 / n - *mean * *mean);
}

static void test_tensor_table(gptx_context *ctx) {
    gptx_model_config c = small_config();
    c.tied_head = 0;
    c.qkv_bias = 0;
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c)) { check_failures++; return; }
    const char *expect[] = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                            "h.0.attn.c_attn.weight", "h.0.attn.c_proj.weight",
                            "h.0.attn.c_proj.bias", "h.0.ln_2.weight", "h.0.ln_2.bias",
                            "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias", "h.0.mlp.c_proj.weight",
                            "h.0.mlp.c_proj.bias"};
    int n = gptx_model_num_tensors(m);
    CHECK(n == 2 + 2 * 11 + 2 + 1);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        CHECK_OK(gptx_model_tensor_info(m, i, &info));
        if (i < (int)(sizeof expect / sizeof expect[0])) CHECK(strcmp(info.name, expect[i]) == 0);
        size_t numel = 1;
        for (int d = 0; d < info.ndim; d++) numel *= (size_t)info.shape[d];
        CHECK(numel == info.numel);
        total += info.numel;
        if (strcmp(info.name, "h.1.mlp.c_proj.weight") == 0)
            CHECK(info.ndim == 2 && info.shape[0] == 16 && info.shape[1] == 64); /* (out, in) */
        if (strcmp(info.name, "lm_head.weight") == 0)
            CHECK(i == n - 1 && info.shape[0] == 64 && info.shape[1] == 16);
    }
    CHECK(total == gptx_model_num_parameters(m));
    /* C=16, Vp=64, T=16, L=2, untied, no qkv bias */
    size_t layer = 2 * 16 + 3 * 16 * 16 + 16 * 16 + 16 + 2 * 16 + 4 * 16 * 16 + 4 * 16 +
                   16 * 4 * 16 + 16;
    CHECK(total == 64 * 16 + 16 * 16 + 2 * layer + 2 * 16 + 64 * 16);
    gptx_model_destroy(m);
}

static void test_init(gptx_context *ctx) {
    gptx_model_config c = small_config();
    c.n_embd = 64;
    c.n_layer = 4;
    c.n_head = 4;
    gptx_model *a = NULL, *b = NULL;
    if (gptx_model_create(&a, ctx, &c) || gptx_model_create(&b, ctx, &c)) { check_failures++; return; }
    CHECK_OK(gptx_model_init_random(a, 7));
    CHECK_OK(gptx_model_init_random(b, 7));
    size_t n1, n2;
    float *fc = get_param(a, "h.2.mlp.c_fc.weight", &n1);
    float *proj = get_param(a, "h.2.mlp.c_proj.weight", &n2);
    double mean, std;
    stats(fc, n1, &mean, &std);
    CHECK(fabs(mean) < 2e-3 && fabs(std - 0.02) < 1e-3);
    stats(proj, n2, &mean, &std);
    CHECK(fabs(std - 0.02 / sqrt(8.0)) < 5e-4);
    size_t n3, n4;
    float *wte = get_param(a, "wte.weight", &n3);
    int padded_zero = 1;
    for (size_t i = (size_t)c.vocab_size * 64; i < n3; i++) padded_zero &= wte[i] == 0.0f;
    CHECK(padded_zero);
    float *ln = get_param(a, "h.0.ln_1.weight", &n4);
    CHECK(ln[0] == 1.0f && ln[63] == 1.0f);
    free(ln);
    ln = get_param(a, "h.0.ln_1.bias", &n4);
    CHECK(ln[0] == 0.0f);
    free(ln);
    float *fc_b = get_param(b, "h.2.mlp.c_fc.weight", &n1);
    CHECK(memcmp(fc, fc_b, n1 * sizeof(float)) == 0); /* same seed, same numbers */
    free(fc_b);
    CHECK_OK(gptx_model_init_random(b, 8));
    fc_b = get_param(b, "h.2.mlp.c_fc.weight", &n1);
    CHECK(memcmp(fc, fc_b, n1 * sizeof(float)) != 0);
    free(fc); free(fc_b); free(proj); free(wte);
    gptx_model_destroy(a);
    gptx_model_destroy(b);
}

/* Copies every parameter of src into dst; row counts of vocab tensors may differ. */
static void copy_params(gptx_model *dst, gptx_model *src) {
    int n = gptx_model_num_tensors(src);
    for (int i = 0; i < n; i++) {
        gptx_tensor_info si, di;
        gptx_tensor_info_init(&si);
        gptx_tensor_info_init(&di);
        int idx;
        gptx_model_tensor_info(src, i, &si);
        if (gptx_model_find_tensor(dst, si.name, &idx)) { check_failures++; continue; }
        gptx_model_tensor_info(dst, idx, &di);
        float *buf = calloc(si.numel > di.numel ? si.numel : di.numel, sizeof *buf);
        gptx_model_get_parameter(src, si.name, buf, si.numel);
        CHECK_OK(gptx_model_set_parameter(dst, si.name, buf, di.numel)); /* prefix rows */
        free(buf);
    }
}

/* Masked padding computes exactly the unpadded objective; unmasked does not. */
static void test_padded_vocab(gptx_context *ctx) {
    gptx_model_config cp = small_config(), cu = small_config(), cn = small_config();
    cu.padded_vocab_size = cu.vocab_size;
    cn.mask_padded_logits = 0;
    gptx_model *padded = NULL, *unpadded = NULL, *unmasked = NULL;
    if (gptx_model_create(&padded, ctx, &cp) || gptx_model_create(&unpadded, ctx, &cu) ||
        gptx_model_create(&unmasked, ctx, &cn)) { check_failures++; return; }
    CHECK_OK(gptx_model_init_random(padded, 11));
    /* give the padded rows large values: masking must make them irrelevant */
    size_t n;
    float *wte = get_param(padded, "wte.weight", &n);
    for (size_t i = (size_t)cp.vocab_size * 16; i < n; i++) wte[i] = 0.5f;
    CHECK_OK(gptx_model_set_parameter(padded, "wte.weight", wte, n));
    copy_params(unpadded, padded);
    copy_params(unmasked, padded);
    int32_t in[32], tg[32];
    fill_tokens(in, 32, cp.vocab_size, 21);
    fill_tokens(tg, 32, cp.vocab_size, 22);
    float lp, lu, ln;
    CHECK_OK(gptx_model_forward(padded, in, tg, 2, 16, &lp));
    CHECK_OK(gptx_model_forward(unpadded, in, tg, 2, 16, &lu));
    CHECK_OK(gptx_model_forward(unmasked, in, tg, 2, 16, &ln));
    CHECK(fabsf(lp - lu) <= 1e-6f * fabsf(lu));
    CHECK(fabsf(ln - lu) > 1e-3f); /* the unmasked variant is a different objective */
    CHECK_OK(gptx_model_backward(padded, 1.0f));
    CHECK_OK(gptx_model_backward(unpadded, 1.0f));
    float *gp = malloc(n * sizeof *gp), *gu = malloc(n * sizeof *gu);
    CHECK_OK(gptx_model_get_gradient(padded, "wte.weight", gp, n));
    CHECK_OK(gptx_model_get_gradient(unpadded, "wte.weight", gu, (size_t)cu.vocab_size * 16));
    double worst = 0;
    for (size_t i = 0; i < (size_t)cu.vocab_size * 16; i++) worst = fmax(worst, fabs(gp[i] - gu[i]));
    CHECK(worst < 1e-6);
    int pad_grad_zero = 1;
    for (size_t i = (size_t)cp.vocab_size * 16; i < n; i++) pad_grad_zero &= gp[i] == 0.0f;
    CHECK(pad_grad_zero);
    gptx_model_config got;
    gptx_model_config_init(&got);
    CHECK_OK(gptx_model_get_config(unmasked, &got));
    CHECK(got.mask_padded_logits == 0 && got.padded_vocab_size == 64);
    free(wte); free(gp); free(gu);
    gptx_model_destroy(padded);
    gptx_model_destroy(unpadded);
    gptx_model_destroy(unmasked);
}

/* Trains `steps` steps and returns the final parameters (caller frees). */
static float *train(int threads, int steps, float *losses, size_t *nparams) {
    gptx_context *ctx = NULL;
    if (make_cpu_context(&ctx, threads)) return NULL;
    gptx_model_config c = small_config();
    c.n_embd = 96; /* above the 64-column blocks, several tasks per op */
    c.n_head = 3;
    c.vocab_size = 300;
    c.padded_vocab_size = 320;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 3e-3f;
    if (gptx_model_create(&m, ctx, &c) || gptx_model_init_random(m, 5) ||
        gptx_optimizer_create(&opt, m, &ao))
        return NULL;
    int32_t in[4 * 16], tg[4 * 16];
    for (int s = 0; s < steps; s++) {
        fill_tokens(in, 64, c.vocab_size, 100 + s);
        memcpy(tg, in + 1, 63 * sizeof *tg);
        tg[63] = 0;
        CHECK_OK(gptx_model_zero_grad(m));
        CHECK_OK(gptx_model_forward(m, in, tg, 4, 16, &losses[s]));
        CHECK_OK(gptx_model_backward(m, 1.0f));
        CHECK_OK(gptx_optimizer_step(opt, m, NULL));
    }
    size_t n = gptx_model_num_parameters(m);
    float *all = malloc(n * sizeof *all);
    size_t off = 0;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        gptx_model_get_parameter(m, info.name, all + off, info.numel);
        off += info.numel;
    }
    *nparams = n;
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return all;
}

static void test_determinism_across_threads(void) {
    float l1[5], l2[5];
    size_t n1 = 0, n2 = 0;
    float *p1 = train(1, 5, l1, &n1), *p2 = train(2, 5, l2, &n2);
    CHECK(p1 && p2 && n1 == n2);
    if (p1 && p2) {
        CHECK(memcmp(l1, l2, sizeof l1) == 0);
        CHECK(memcmp(p1, p2, n1 * sizeof *p1) == 0);
    }
    free(p1);
    free(p2);
}

/* Two half-batches with loss_scale 0.5 accumulate the full batch's gradient. */
static void test_grad_accumulation(gptx_context *ctx) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) || gptx_model_init_random(m, 9)) { check_failures++; return; }
    int32_t in[64], tg[64];
    fill_tokens(in, 64, c.vocab_size, 31);
    fill_tokens(tg, 64, c.vocab_size, 32);
    size_t n = 16 * 16 * 3 * 16; /* h.0.attn.c_attn.weight */
    float *full = malloc(n * sizeof *full), *acc = malloc(n * sizeof *acc);
    CHECK_OK(gptx_model_zero_grad(m));
    CHECK_OK(gptx_model_forward(m, in, tg, 4, 16, NULL));
    CHECK_OK(gptx_model_backward(m, 1.0f));
    CHECK_OK(gptx_model_get_gradient(m, "h.0.attn.c_attn.weight", full, 3 * 16 * 16));
    CHECK_OK(gptx_model_zero_grad(m));
    CHECK_OK(gptx_model_forward(m, in, tg, 2, 16, NULL));
    CHECK_OK(gptx_model_backward(m, 0.5f));
    CHECK_OK(gptx_model_forward(m, in + 32, tg + 32, 2, 16, NULL));
    CHECK_OK(gptx_model_backward(m, 0.5f));
    CHECK_OK(gptx_model_get_gradient(m, "h.0.attn.c_attn.weight", acc, 3 * 16 * 16));
    double worst = 0, scale = 0;
    for (size_t i = 0; i < 3 * 16 * 16; i++) {
        worst = fmax(worst, fabs(full[i] - acc[i]));
        scale = fmax(scale, fabs(full[i]));
    }
    CHECK(scale > 0 && worst <= 1e-5 * fmax(1.0, scale));
    free(full);
    free(acc);
    gptx_model_destroy(m);
}

/* gptx_model_forward_backward == forward + backward, bit for bit: masked and
 * unmasked padding, ignored targets, a negative scale, accumulation. */
static void test_forward_backward_fused(gptx_context *ctx) {
    for (int masked = 0; masked <= 1; masked++) {
        gptx_model_config c = small_config();
        c.mask_padded_logits = masked;
        gptx_model *a = NULL, *b = NULL;
        if (gptx_model_create(&a, ctx, &c) || gptx_model_create(&b, ctx, &c) ||
            gptx_model_init_random(a, 5) || gptx_model_init_random(b, 5)) {
            check_failures++;
            return;
        }
        int32_t in[64], tg[64];
        fill_tokens(in, 64, c.vocab_size, 41);
        fill_tokens(tg, 64, c.vocab_size, 42);
        tg[3] = tg[17] = tg[40] = GPTX_IGNORE_INDEX;
        const float scales[2] = {1.0f, -0.5f};
        float la[2], lb[2];
        CHECK_OK(gptx_model_zero_grad(a));
        CHECK_OK(gptx_model_zero_grad(b));
        for (int k = 0; k < 2; k++) {
            CHECK_OK(gptx_model_forward(a, in + 32 * k, tg + 32 * k, 2, 16, &la[k]));
            CHECK_OK(gptx_model_backward(a, scales[k]));
            CHECK_OK(gptx_model_forward_backward(b, in + 32 * k, tg + 32 * k, 2, 16, scales[k],
                                                 &lb[k]));
            CHECK(memcmp(&la[k], &lb[k], sizeof la[k]) == 0);
        }
        size_t n = gptx_model_num_parameters(a);
        float *ga = model_values(a, 1), *gb = model_values(b, 1);
        size_t differ = 0;
        double gmax = 0;
        for (size_t i = 0; i < n; i++) {
            differ += memcmp(&ga[i], &gb[i], sizeof ga[i]) != 0;
            gmax = fmax(gmax, fabs(ga[i]));
        }
        printf("forward_backward (%s padding): losses %.6f %.6f, %zu of %zu gradient values "
               "differ from forward + backward\n", masked ? "masked" : "unmasked",
               (double)lb[0], (double)lb[1], differ, n);
        CHECK(differ == 0 && gmax > 0);
        /* the logits buffer holds their gradient now, and backward already ran */
        float *logits = malloc(32 * 64 * sizeof *logits);
        CHECK_STATUS(gptx_model_get_logits(b, logits, 32 * 64), GPTX_ERR_STATE);
        CHECK_STATUS(gptx_model_backward(b, 1.0f), GPTX_ERR_STATE);
        free(logits);
        /* bad arguments, and a non-finite loss before any gradient changes */
        CHECK_STATUS(gptx_model_forward_backward(b, in, NULL, 2, 16, 1.0f, NULL), GPTX_ERR_NULL);
        CHECK_STATUS(gptx_model_forward_backward(b, in, tg, 2, 16, NAN, NULL), GPTX_ERR_INVALID);
        float huge_w[16]; /* finite, but ln_f's output overflows to inf */
        for (int i = 0; i < 16; i++) huge_w[i] = 3e38f;
        CHECK_OK(gptx_model_set_parameter(b, "ln_f.weight", huge_w, 16));
        float lossv = 0.0f;
        CHECK_STATUS(gptx_model_forward_backward(b, in, tg, 2, 16, 1.0f, &lossv),
                     GPTX_ERR_NON_FINITE);
        CHECK(!isfinite(lossv));
        float *gc = model_values(b, 1);
        CHECK(memcmp(gb, gc, n * sizeof *gb) == 0);
        free(ga);
        free(gb);
        free(gc);
        gptx_model_destroy(a);
        gptx_model_destroy(b);
    }
}

static void test_memory_and_training(void) {
    gptx_context *ctx = NULL;
    if (make_cpu_context(&ctx, 2)) { check_failures++; return; }
    gptx_memory_stats s0, s1, s2, s3;
    gptx_memory_stats_init(&s0);
    s1 = s2 = s3 = s0;
    CHECK_OK(gptx_context_memory(ctx, &s0));
    CHECK(s0.allocated == 0 && s0.peak == 0);
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    if (gptx_model_create(&m, ctx, &c)) { check_failures++; return; }
    size_t P = gptx_model_num_parameters(m);
    CHECK_OK(gptx_context_memory(ctx, &s1));
    CHECK(s1.allocated == 2 * P * sizeof(float)); /* parameters + gradients */
    CHECK(s1.reserved >= s1.allocated && s1.peak == s1.allocated);
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-2f;
    CHECK_OK(gptx_optimizer_create(&opt, m, &ao));
    CHECK_OK(gptx_model_init_random(m, 1));
    int32_t in[64], tg[64];
    for (int i = 0; i < 64; i++) { in[i] = (i * 3) % 50; tg[i] = (i * 3 + 3) % 50; }
    float first = 0, last = 0;
    for (int s = 0; s < 30; s++) {
        CHECK_OK(gptx_model_zero_grad(m));
        CHECK_OK(gptx_model_forward(m, in, tg, 4, 16, &last));
        if (s == 0) first = last;
        CHECK_OK(gptx_model_backward(m, 1.0f));
        CHECK_OK(gptx_optimizer_step(opt, m, NULL));
    }
    CHECK(fabsf(first - logf(50.0f)) < 0.3f); /* starts near uniform */
    CHECK(last < 0.5f * first);                /* learns the repeating pattern */
    int64_t step = 0;
    CHECK_OK(gptx_optimizer_get_step(opt, &step));
    CHECK(step == 30);
    CHECK_OK(gptx_context_memory(ctx, &s2));
    CHECK(s2.allocated > 4 * P * sizeof(float)); /* + moments + activations */
    CHECK(s2.peak >= s2.allocated);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    CHECK_OK(gptx_context_memory(ctx, &s3));
    CHECK(s3.allocated == 0 && s3.reserved == 0 && s3.peak == s2.peak);
    CHECK_OK(gptx_context_reset_peak_memory(ctx));
    CHECK_OK(gptx_context_memory(ctx, &s3));
    CHECK(s3.peak == 0);
    gptx_context_destroy(ctx);
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    test_tensor_table(ctx);
    test_init(ctx);
    test_padded_vocab(ctx);
    test_grad_accumulation(ctx);
    test_forward_backward_fused(ctx);
    gptx_context_destroy(ctx);
    test_determinism_across_threads();
    test_memory_and_training();
    return check_exit("test_model");
}
