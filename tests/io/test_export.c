/* Exports (gptx_model_export_hf, gptx_model_export_llmc): a model with
 * random values in every parameter, for tied and untied heads, with and
 * without qkv bias, with and without a padded vocabulary, exported and
 * imported again (gptx_model_import_hf / _llmc) holds the same parameters
 * bit for bit (llm.c bf16: the bf16-rounded ones); the files are what the
 * other tools read (HF names, Conv1D (in, out), metadata format "pt",
 * config.json keys; llm.c header and size); and what the formats cannot hold
 * is refused with nothing written. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
#include "ckpt_util.h"
#include "safetensors.h"
#include "test_util.h"

static gptx_context *ctx;
static scratch_dir dir;


/* Every parameter random in [-1, 1) (biases, LayerNorms included), the
 * padded rows of wte / lm_head zero (as training with masked logits keeps
 * them): an export of a padded model drops those rows. */
static void randomize(gptx_model *m, uint32_t seed) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c);
    uint32_t x = seed * 2654435761u + 7u;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        float *p = malloc(info.numel * sizeof *p);
        for (size_t k = 0; k < info.numel; k++) {
            x = x * 1664525u + 1013904223u;
            p[k] = (float)((x >> 8) & 0xFFFF) / 32768.0f - 1.0f + (float)(x >> 24) * 1e-7f;
        }
        if (!strcmp(info.name, "wte.weight") || !strcmp(info.name, "lm_head.weight"))
            memset(p + (size_t)c.vocab_size * c.n_embd, 0,
                   (info.numel - (size_t)c.vocab_size * c.n_embd) * sizeof *p);
        gptx_model_set_parameter(m, info.name, p, info.numel);
        free(p);
    }
}

static gptx_model *make_model_in(gptx_context *in, int tied, int bias, int padded, uint32_t seed) {
    gptx_model_config c = small_config();
    c.vocab_size = 50;
    c.padded_vocab_size = padded ? 64 : 50;
    c.tied_head = tied;
    c.qkv_bias = bias;
    gptx_model *m = NULL;
    if (gptx_model_create(&m, in, &c) != GPTX_OK) {
        fprintf(stderr, "gptx_model_create: %s\n", gptx_last_error());
        check_failures++;
        return NULL;
    }
    randomize(m, seed);
    return m;
}

static gptx_model *make_model(int tied, int bias, int padded, uint32_t seed) {
    return make_model_in(ctx, tied, bias, padded, seed);
}

/* Every parameter of a equals b's (after bf16 rounding when bf16); b may
 * hold a c_attn.bias a lacks: it must be zero. Returns 1 when so. */
static int same_values(const gptx_model *a, const gptx_model *b, int bf16) {
    int ok = 1;
    for (int i = 0; i < gptx_model_num_tensors(b); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(b, i, &info);
        size_t nb = 0, na = 0;
        float *pb = param_copy(b, info.name, &nb), *pa = param_copy(a, info.name, &na);
        if (!pa) { /* only the zero biases an export adds */
            int zero = strstr(info.name, "attn.c_attn.bias") != NULL;
            for (size_t k = 0; zero && k < nb; k++) zero = pb[k] == 0.0f;
            if (!zero) fprintf(stderr, "  '%s': not in the source, and not zero\n", info.name);
            ok &= zero;
        } else if (na != nb) {
            fprintf(stderr, "  '%s': %zu elements, expected %zu\n", info.name, nb, na);
            ok = 0;
        } else {
            for (size_t k = 0; k < na; k++) {
                float want = bf16 ? gptx_bf16_to_f32(gptx_f32_to_bf16(pa[k])) : pa[k];
                if (memcmp(&want, &pb[k], sizeof want) != 0) {
                    fprintf(stderr, "  '%s'[%zu]: %.9g, expected %.9g\n", info.name, k,
                            (double)pb[k], (double)want);
                    ok = 0;
                    break;
                }
            }
        }
        free(pa);
        free(pb);
    }
    /* and nothing of a is missing from b */
    for (int i = 0; i < gptx_model_num_tensors(a); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(a, i, &info);
        int idx;
        if (gptx_model_find_tensor(b, info.name, &idx) != GPTX_OK) {
            fprintf(stderr, "  '%s': missing after the round trip\n", info.name);
            ok = 0;
        }
    }
    return ok;
}

static int has(const char *text, const char *needle) {
    if (text && strstr(text, needle)) return 1;
    fprintf(stderr, "  config.json lacks '%s'\n", needle);
    return 0;
}

static void hf_round_trip(int tied, int bias, int padded) {
    fprintf(stderr, "hf: tied %d, bias %d, padded %d\n", tied, bias, padded);
    gptx_model *m = make_model(tied, bias, padded, 11u + (unsigned)(tied * 4 + bias * 2 + padded));
    if (!m) return;
    char name[64];
    snprintf(name, sizeof name, "hf_%d%d%d", tied, bias, padded);
    const char *out = scratch_file(&dir, name);
    CHECK_OK(gptx_model_export_hf(m, out));
    char st_path[400], cfg_path[400];
    snprintf(st_path, sizeof st_path, "%s/model.safetensors", out);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", out);

    /* the file as transformers reads it */
    gptx_st_file f;
    if (gptx_st_open(&f, st_path) == GPTX_OK) {
        const char *fmt = gptx_st_meta(&f, "format");
        CHECK(fmt && strcmp(fmt, "pt") == 0);
        const gptx_st_tensor *t = gptx_st_find(&f, "transformer.h.1.attn.c_attn.weight");
        CHECK(t && t->ndim == 2 && t->shape[0] == 16 && t->shape[1] == 48); /* (in, out) */
        t = gptx_st_find(&f, "transformer.h.0.mlp.c_proj.weight");
        CHECK(t && t->ndim == 2 && t->shape[0] == 64 && t->shape[1] == 16);
        t = gptx_st_find(&f, "transformer.wte.weight");
        CHECK(t && t->shape[0] == 50); /* padded rows dropped */
        t = gptx_st_find(&f, "lm_head.weight");
        CHECK(tied ? t == NULL : t != NULL && t->shape[0] == 50);
        CHECK(gptx_st_find(&f, "transformer.h.0.attn.c_attn.bias") != NULL);
        CHECK(gptx_st_find(&f, "wte.weight") == NULL);
        gptx_st_close(&f);
    } else {
        fprintf(stderr, "  cannot open %s: %s\n", st_path, gptx_last_error());
        check_failures++;
    }
    size_t len = 0;
    char *cfg = (char *)check_read_file(cfg_path, &len);
    CHECK(has(cfg, "\"model_type\": \"gpt2\""));
    CHECK(has(cfg, "\"architectures\": [\"GPT2LMHeadModel\"]"));
    CHECK(has(cfg, "\"vocab_size\": 50,"));
    CHECK(has(cfg, "\"n_positions\": 16,"));
    CHECK(has(cfg, "\"n_ctx\": 16,"));
    CHECK(has(cfg, "\"n_embd\": 16,"));
    CHECK(has(cfg, "\"n_layer\": 2,"));
    CHECK(has(cfg, "\"n_head\": 2,"));
    CHECK(has(cfg, "\"n_inner\": 64,"));
    CHECK(has(cfg, "\"layer_norm_epsilon\": 1e-05,"));
    CHECK(has(cfg, "\"activation_function\": \"gelu_new\""));
    CHECK(has(cfg, tied ? "\"tie_word_embeddings\": true" : "\"tie_word_embeddings\": false"));
    free(cfg);

    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c); /* what the files cannot hold: padding, n_head */
    gptx_model *back = NULL;
    CHECK_OK(gptx_model_import_hf(&back, ctx, st_path, &c));
    if (back) {
        CHECK(same_values(m, back, 0));
        gptx_model_config cb;
        gptx_model_config_init(&cb);
        gptx_model_get_config(back, &cb);
        CHECK(cb.tied_head == tied && cb.padded_vocab_size == c.padded_vocab_size);
    }
    /* a second export over the first replaces it */
    CHECK_OK(gptx_model_export_hf(m, out));
    gptx_model_destroy(back);
    gptx_model_destroy(m);
}

static uint32_t le32(const unsigned char *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static void llmc_round_trip(int bias, int padded, int bf16) {
    fprintf(stderr, "llmc: bias %d, padded %d, bf16 %d\n", bias, padded, bf16);
    gptx_model *m = make_model(1, bias, padded, 21u + (unsigned)(bias * 4 + padded * 2 + bf16));
    if (!m) return;
    char name[64];
    snprintf(name, sizeof name, "m_%d%d%d.bin", bias, padded, bf16);
    const char *out = scratch_file(&dir, name);
    CHECK_OK(gptx_model_export_llmc(m, out, bf16 ? GPTX_PRECISION_BF16 : GPTX_PRECISION_FP32));
    size_t len = 0;
    unsigned char *b = read_all(out, &len);
    int Vp = padded ? 64 : 50, C = 16, L = 2, T = 16;
    /* llm.c's fill_in_parameter_sizes, qkvb always there */
    size_t nparams = (size_t)Vp * C + (size_t)T * C +
                     (size_t)L * (C + C + 3 * C * C + 3 * C + C * C + C + C + C + 4 * C * C +
                              4 * C + 4 * C * C + C) + 2 * (size_t)C;
    CHECK(b && len == 1024 + nparams * (bf16 ? 2 : 4));
    if (b && len >= 1024) {
        uint32_t want[8] = {20240326u, bf16 ? 5u : 3u, 16, 50, 2, 2, 16, (uint32_t)Vp};
        for (int i = 0; i < 8; i++) CHECK(le32(b + 4 * i) == want[i]);
        int zero = 1;
        for (int i = 8; i < 256; i++) zero &= le32(b + 4 * i) == 0;
        CHECK(zero);
    }
    free(b);
    gptx_model *back = NULL;
    CHECK_OK(gptx_model_import_llmc(&back, ctx, out));
    if (back) CHECK(same_values(m, back, bf16));
    gptx_model_destroy(back);
    gptx_model_destroy(m);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void refusals(void) {
    fprintf(stderr, "refusals\n");
    gptx_model *untied = make_model(0, 1, 1, 5), *tied = make_model(1, 1, 1, 6);
    if (!untied || !tied) goto done;
    /* llm.c has no untied head */
    const char *bin = scratch_file(&dir, "untied.bin");
    CHECK_STATUS(gptx_model_export_llmc(untied, bin, GPTX_PRECISION_FP32), GPTX_ERR_UNSUPPORTED);
    CHECK_MSG("untied");
    CHECK_MSG("--format hf");
    CHECK(!exists(bin));
    /* dtypes llm.c has no version for */
    CHECK_STATUS(gptx_model_export_llmc(tied, bin, GPTX_PRECISION_TF32), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_model_export_llmc(tied, bin, 77), GPTX_ERR_INVALID);
    CHECK(!exists(bin));
    CHECK_STATUS(gptx_model_export_llmc(tied, NULL, GPTX_PRECISION_FP32), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_export_hf(tied, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_export_hf(NULL, bin), GPTX_ERR_NULL);
    /* a file where the folder goes */
    const char *file = scratch_file(&dir, "a_file");
    CHECK(write_all(file, "x", 1) == 0);
    CHECK_STATUS(gptx_model_export_hf(tied, file), GPTX_ERR_IO);
    CHECK_MSG("not a folder");
    /* a folder where config.json goes: nothing written, not even the weights */
    const char *hf = scratch_file(&dir, "hf_blocked");
    char p[400];
    CHECK(mkdir(hf, 0777) == 0);
    snprintf(p, sizeof p, "%s/config.json", hf);
    CHECK(mkdir(p, 0777) == 0);
    CHECK_STATUS(gptx_model_export_hf(tied, hf), GPTX_ERR_IO);
    CHECK_MSG("config.json");
    snprintf(p, sizeof p, "%s/model.safetensors", hf);
    CHECK(!exists(p));
    snprintf(p, sizeof p, "%s/config.json", hf);
    rmdir(p);
    rmdir(hf);
    /* a folder whose parent is missing */
    snprintf(p, sizeof p, "%s/no/such", dir.path);
    CHECK_STATUS(gptx_model_export_hf(tied, p), GPTX_ERR_IO);
    /* padded logits in the softmax: neither format can hold them */
    gptx_model_config c = small_config();
    c.mask_padded_logits = 0;
    gptx_model *unmasked = NULL;
    CHECK_OK(gptx_model_create(&unmasked, ctx, &c));
    const char *hf2 = scratch_file(&dir, "hf_unmasked");
    CHECK_STATUS(gptx_model_export_hf(unmasked, hf2), GPTX_ERR_UNSUPPORTED);
    CHECK_MSG("mask_padded_logits");
    CHECK(!exists(hf2));
    CHECK_STATUS(gptx_model_export_llmc(unmasked, bin, GPTX_PRECISION_FP32), GPTX_ERR_UNSUPPORTED);
    gptx_model_destroy(unmasked);
    /* llm.c's epsilon is fixed; HF holds any */
    c = small_config();
    c.layernorm_eps = 1e-6f;
    gptx_model *eps = NULL;
    CHECK_OK(gptx_model_create(&eps, ctx, &c));
    CHECK_STATUS(gptx_model_export_llmc(eps, bin, GPTX_PRECISION_FP32), GPTX_ERR_UNSUPPORTED);
    CHECK_MSG("layernorm_eps");
    CHECK(!exists(bin));
    const char *hf3 = scratch_file(&dir, "hf_eps");
    CHECK_OK(gptx_model_export_hf(eps, hf3));
    snprintf(p, sizeof p, "%s/config.json", hf3);
    size_t len;
    char *cfg = (char *)check_read_file(p, &len);
    CHECK(has(cfg, "\"layer_norm_epsilon\": 1e-06,"));
    free(cfg);
    gptx_model_destroy(eps);
done:
    gptx_model_destroy(untied);
    gptx_model_destroy(tied);
}

/* Under the bf16 policies (with oneDNN) the export writes the parameters as
 * the model gives them in fp32: the fp32 master weights (bf16), the bf16
 * parameters widened (bf16_pure); an fp32 import gets exactly those. */
static void precision_exports(void) {
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        fprintf(stderr, "precision: no oneDNN in this build, bf16 policies skipped\n");
        return;
    }
    int policies[2] = {GPTX_PRECISION_BF16, GPTX_PRECISION_BF16_PURE};
    for (int i = 0; i < 2; i++) {
        fprintf(stderr, "precision %s\n", gptx_precision_name(policies[i]));
        gptx_context_options o;
        gptx_context_options_init(&o);
        o.backend = GPTX_BACKEND_CPU;
        o.num_threads = 1;
        o.precision = policies[i];
        gptx_context *bctx = NULL;
        if (gptx_context_create(&bctx, &o) != GPTX_OK) {
            fprintf(stderr, "  context: %s\n", gptx_last_error());
            check_failures++;
            continue;
        }
        gptx_model *m = make_model_in(bctx, 1, 1, 1, 31u + (unsigned)i), *back = NULL;
        char name[64];
        snprintf(name, sizeof name, "prec_%d", i);
        const char *hf = scratch_file(&dir, name);
        char st_path[400];
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", hf);
        gptx_model_config c;
        gptx_model_config_init(&c);
        if (m) gptx_model_get_config(m, &c);
        if (m && gptx_model_export_hf(m, hf) == GPTX_OK &&
            gptx_model_import_hf(&back, ctx, st_path, &c) == GPTX_OK) {
            CHECK(same_values(m, back, 0));
        } else {
            fprintf(stderr, "  hf export/import: %s\n", gptx_last_error());
            check_failures++;
        }
        gptx_model_destroy(back);
        back = NULL;
        snprintf(name, sizeof name, "prec_%d.bin", i);
        const char *bin = scratch_file(&dir, name);
        if (m && gptx_model_export_llmc(m, bin, GPTX_PRECISION_FP32) == GPTX_OK &&
            gptx_model_import_llmc(&back, ctx, bin) == GPTX_OK) {
            CHECK(same_values(m, back, 0));
        } else {
            fprintf(stderr, "  llmc export/import: %s\n", gptx_last_error());
            check_failures++;
        }
        gptx_model_destroy(back);
        gptx_model_destroy(m);
        gptx_context_destroy(bctx);
    }
}

/* Removes what the round trips left (one level of sub-folders). */
static void remove_tree(const char *path) {
    DIR *d = opendir(path);
    if (!d) {
        unlink(path);
        return;
    }
    struct dirent *e;
    char p[600];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        remove_tree(p);
    }
    closedir(d);
    rmdir(path);
}

int main(void) {
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    if (scratch_make(&dir, "export") != 0) return 1;
    for (int tied = 0; tied <= 1; tied++)
        for (int bias = 0; bias <= 1; bias++)
            for (int padded = 0; padded <= 1; padded++) hf_round_trip(tied, bias, padded);
    for (int bias = 0; bias <= 1; bias++)
        for (int padded = 0; padded <= 1; padded++)
            for (int bf16 = 0; bf16 <= 1; bf16++) llmc_round_trip(bias, padded, bf16);
    refusals();
    precision_exports();
    remove_tree(dir.path);
    gptx_context_destroy(ctx);
    return check_exit("test_export");
}
