/* The gptx side of scripts/check_hf_export.sh (outside CI): makes test
 * models and dumps gptx's logits for the comparison with transformers.
 *
 *   export_logits make OUT TIED BIAS PADDED
 *       a small model (vocab 1000, 2 layers, 4 heads, width 64, context 64;
 *       padded to 1024 when PADDED) with every parameter random (LayerNorm
 *       weights near 1), saved as a gptx file
 *   export_logits logits MODEL OUT ID...
 *       runs the gptx model file MODEL on the token ids (B 1) and writes the
 *       logits of the real vocabulary, (T, V) little-endian fp32, to OUT
 *
 * Built by the script: cc -I include scripts/export_logits.c -L<build> -lgptx. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx.h>

static int fail(const char *what) {
    fprintf(stderr, "export_logits: %s: %s\n", what, gptx_last_error());
    return 1;
}

static gptx_context *cpu(void) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.precision = GPTX_PRECISION_FP32;
    gptx_context *ctx = NULL;
    return gptx_context_create(&ctx, &o) == GPTX_OK ? ctx : NULL;
}

static int make(const char *out, int tied, int bias, int padded) {
    gptx_context *ctx = cpu();
    if (!ctx) return fail("context");
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 1000;
    c.padded_vocab_size = padded ? 1024 : 1000;
    c.context_length = 64;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 64;
    c.tied_head = tied;
    c.qkv_bias = bias;
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK) return fail("model");
    if (gptx_model_init_random(m, 7) != GPTX_OK) return fail("init");
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        float *p = malloc(info.numel * sizeof *p);
        gptx_model_get_parameter(m, info.name, p, info.numel);
        int is_ln_w = strstr(info.name, "ln_") && strstr(info.name, ".weight");
        int is_bias = strstr(info.name, ".bias") != NULL;
        for (size_t k = 0; k < info.numel; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            float u = (float)((x >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f; /* [-0.5, 0.5) */
            if (is_ln_w) p[k] = 1.0f + 0.4f * u;
            else if (is_bias) p[k] = 0.2f * u;
            else p[k] += 0.05f * u; /* padded rows too: masked in gptx, dropped by the export */
        }
        gptx_model_set_parameter(m, info.name, p, info.numel);
        free(p);
    }
    if (gptx_model_save(m, out) != GPTX_OK) return fail(out);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return 0;
}

static int logits(const char *path, const char *out, int n, char **ids) {
    gptx_context *ctx = cpu();
    if (!ctx) return fail("context");
    gptx_model *m = NULL;
    if (gptx_model_load(&m, ctx, path) != GPTX_OK) return fail(path);
    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c);
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)atoi(ids[i]);
    size_t count = (size_t)n * (size_t)c.padded_vocab_size;
    float *lg = malloc(count * sizeof *lg);
    if (gptx_model_forward(m, tok, NULL, 1, n, NULL) != GPTX_OK) return fail("forward");
    if (gptx_model_get_logits(m, lg, count) != GPTX_OK) return fail("logits");
    FILE *f = fopen(out, "wb");
    if (!f) return fail(out);
    for (int t = 0; t < n; t++)
        fwrite(lg + (size_t)t * c.padded_vocab_size, sizeof *lg, (size_t)c.vocab_size, f);
    fclose(f);
    printf("%d %d\n", n, c.vocab_size);
    free(tok);
    free(lg);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "make"))
        return make(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (argc >= 5 && !strcmp(argv[1], "logits")) return logits(argv[2], argv[3], argc - 4, argv + 4);
    fprintf(stderr, "usage: export_logits make OUT TIED BIAS PADDED | logits MODEL OUT ID...\n");
    return 2;
}
