/* Imports: a Hugging Face GPT-2 safetensors file (Conv1D weights stored
 * (in, out), unpadded wte, attention buffers, optional "transformer." prefix,
 * F32 / F16 / BF16) and an llm.c model file (version 3 fp32, version 5 bf16),
 * both written here from a model's parameters, import to a model with the
 * same parameters (after the same rounding) and bitwise the same logits.
 * The PyTorch fixture odd_tied_bias goes through both formats and gives its
 * reference logits. Malformed files give clear errors. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt_util.h"
#include "fixture.h"
#include "safetensors.h"
#include "test_util.h"

static gptx_context *ctx;
static const scratch_dir *dir;

static gptx_model_config config_of(const gptx_model *m) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c);
    return c;
}


static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int is_conv1d(const char *name) {
    return ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
           ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight");
}

/* Rounds every parameter through dtype (so it equals what an import of a
 * file in that dtype must produce). */
static void round_params(gptx_model *m, int dtype) {
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        float *p = param_copy(m, info.name, NULL);
        for (size_t k = 0; k < info.numel; k++)
            p[k] = dtype == GPTX_ST_F16 ? gptx_f16_to_f32(gptx_f32_to_f16(p[k]))
                                        : gptx_bf16_to_f32(gptx_f32_to_bf16(p[k]));
        gptx_model_set_parameter(m, info.name, p, info.numel);
        free(p);
    }
}

/* Padded vocabulary rows of wte (and an untied lm_head) set to zero: an
 * import fills only the first V rows. */
static void zero_padded_rows(gptx_model *m) {
    gptx_model_config c = config_of(m);
    const char *names[2] = {"wte.weight", "lm_head.weight"};
    for (int i = 0; i < 2; i++) {
        size_t n = 0;
        float *p = param_copy(m, names[i], &n);
        if (!p) continue;
        memset(p + (size_t)c.vocab_size * c.n_embd, 0,
               (n - (size_t)c.vocab_size * c.n_embd) * sizeof *p);
        gptx_model_set_parameter(m, names[i], p, n);
        free(p);
    }
}

/* ---- writing a Hugging Face file ------------------------------------------------------ */

typedef struct hf_opts {
    const char *prefix;
    int dtype;
    int buffers;       /* attn.bias / attn.masked_bias buffers */
    int head_for_tied; /* also write lm_head.weight (= wte) for a tied model */
    int untransposed;  /* 1: Conv1D written (out, in) as nn.Linear (nanoGPT); 2: c_attn only */
    const char *head_prefix; /* before lm_head.weight (nanoGPT compiled: "_orig_mod.") */
    int no_bias;       /* 1: no .bias tensor (nanoGPT's bias=False); 2: only ln_1's left out */
} hf_opts;

static int fetch_host(void *ud, const gptx_st_entry *e, float *dst) {
    (void)ud;
    memcpy(dst, e->src, e->numel * sizeof *dst);
    return GPTX_OK;
}

static int write_hf(const gptx_model *m, const char *path, hf_opts o) {
    gptx_model_config c = config_of(m);
    int nt = gptx_model_num_tensors(m);
    size_t cap = (size_t)nt + 2 * (size_t)c.n_layer + 1, n = 0;
    gptx_st_entry *e = calloc(cap, sizeof *e);
    char(*names)[80] = calloc(cap, sizeof *names);
    float **bufs = calloc(cap, sizeof *bufs);
    size_t V = (size_t)c.vocab_size, C = (size_t)c.n_embd, T = (size_t)c.context_length;
    for (int i = 0; i < nt; i++, n++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        if ((o.no_bias == 1 && ends_with(info.name, ".bias")) ||
            (o.no_bias == 2 && ends_with(info.name, "ln_1.bias"))) {
            n--;
            continue;
        }
        float *p = param_copy(m, info.name, NULL);
        int is_head = strcmp(info.name, "lm_head.weight") == 0;
        const char *hp = o.head_prefix ? o.head_prefix : "";
        snprintf(names[n], sizeof names[n], "%s%s", is_head ? hp : o.prefix, info.name);
        e[n].name = names[n];
        e[n].dtype = o.dtype;
        e[n].ndim = info.ndim;
        e[n].shape[0] = info.shape[0];
        e[n].shape[1] = info.shape[1];
        e[n].numel = info.numel;
        int linear = o.untransposed == 1 || (o.untransposed == 2 && ends_with(info.name, "c_attn.weight"));
        if (is_conv1d(info.name) && !linear) {
            size_t out = (size_t)info.shape[0], in = (size_t)info.shape[1];
            float *t = malloc(info.numel * sizeof *t);
            for (size_t r = 0; r < out; r++)
                for (size_t k = 0; k < in; k++) t[k * out + r] = p[r * in + k];
            free(p);
            p = t;
            e[n].shape[0] = (int64_t)in;
            e[n].shape[1] = (int64_t)out;
        }
        if (strcmp(info.name, "wte.weight") == 0 || is_head) {
            e[n].shape[0] = (int64_t)V;
            e[n].numel = V * C;
        }
        bufs[n] = p;
        e[n].src = p;
        if (strcmp(info.name, "wte.weight") == 0 && o.head_for_tied && c.tied_head) {
            n++;
            snprintf(names[n], sizeof names[n], "%slm_head.weight", o.head_prefix ? o.head_prefix : "");
            e[n] = e[n - 1];
            e[n].name = names[n];
        }
    }
    if (o.buffers) {
        for (int l = 0; l < c.n_layer; l++) {
            float *mask = malloc(T * T * sizeof *mask);
            for (size_t r = 0; r < T; r++)
                for (size_t k = 0; k < T; k++) mask[r * T + k] = k <= r ? 1.0f : 0.0f;
            snprintf(names[n], sizeof names[n], "%sh.%d.attn.bias", o.prefix, l);
            e[n] = (gptx_st_entry){names[n], o.dtype, 4, {1, 1, (int64_t)T, (int64_t)T}, T * T, mask};
            bufs[n++] = mask;
            float *mb = malloc(sizeof *mb);
            *mb = -1e4f;
            snprintf(names[n], sizeof names[n], "%sh.%d.attn.masked_bias", o.prefix, l);
            e[n] = (gptx_st_entry){names[n], o.dtype, 0, {0}, 1, mb};
            bufs[n++] = mb;
        }
    }
    const char *meta[] = {"format", "pt"};
    int rc = gptx_st_write(path, e, n, meta, 1, fetch_host, NULL);
    for (size_t i = 0; i < cap; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(e);
    return rc;
}

/* ---- writing an llm.c file --------------------------------------------------------------- */

static int write_llmc(const gptx_model *m, const char *path, int version) {
    gptx_model_config c = config_of(m);
    int32_t header[256] = {20240326, version, c.context_length, c.vocab_size, c.n_layer,
                           c.n_head, c.n_embd, c.padded_vocab_size};
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fwrite(header, sizeof header, 1, f); /* the test host is little endian */
    static const char *const per_layer[12] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int k = 0; k < 16; k++) {
        int nl = k >= 2 && k <= 13 ? c.n_layer : 1;
        for (int l = 0; l < nl; l++) {
            char name[80];
            if (k == 0) snprintf(name, sizeof name, "wte.weight");
            else if (k == 1) snprintf(name, sizeof name, "wpe.weight");
            else if (k == 14) snprintf(name, sizeof name, "ln_f.weight");
            else if (k == 15) snprintf(name, sizeof name, "ln_f.bias");
            else snprintf(name, sizeof name, "h.%d.%s", l, per_layer[k - 2]);
            size_t n = 0;
            float *p = param_copy(m, name, &n);
            if (!p) {
                fclose(f);
                return -1;
            }
            for (size_t i = 0; i < n; i++) {
                if (version == 3) {
                    fwrite(&p[i], 4, 1, f);
                } else {
                    uint16_t b = gptx_f32_to_bf16(p[i]);
                    fwrite(&b, 2, 1, f);
                }
            }
            free(p);
        }
    }
    return fclose(f);
}

/* ---- comparisons ------------------------------------------------------------------------ */

static float *logits_for(gptx_model *m, const int32_t *ids, int B, int T, size_t *n) {
    gptx_model_config c = config_of(m);
    *n = (size_t)B * T * (size_t)c.padded_vocab_size;
    float *out = malloc(*n * sizeof *out);
    if (gptx_model_forward(m, ids, NULL, B, T, NULL) != GPTX_OK ||
        gptx_model_get_logits(m, out, *n) != GPTX_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* Same config, bitwise the same parameters and logits. */
static void check_same_model(int line, gptx_model *want, gptx_model *got) {
    if (!got) {
        fprintf(stderr, "line %d: no model\n", line);
        check_failures++;
        return;
    }
    gptx_model_config a = config_of(want), b = config_of(got);
    int ok = a.vocab_size == b.vocab_size && a.padded_vocab_size == b.padded_vocab_size &&
             a.context_length == b.context_length && a.n_layer == b.n_layer && a.n_head == b.n_head &&
             a.n_embd == b.n_embd && a.qkv_bias == b.qkv_bias && a.tied_head == b.tied_head &&
             a.mask_padded_logits == b.mask_padded_logits;
    ok = ok && same_params(want, got);
    int32_t ids[2 * 8];
    fill_tokens(ids, 16, a.vocab_size, 3);
    size_t n1 = 0, n2 = 0;
    float *l1 = logits_for(want, ids, 2, a.context_length < 8 ? a.context_length : 8, &n1);
    float *l2 = logits_for(got, ids, 2, a.context_length < 8 ? a.context_length : 8, &n2);
    ok = ok && l1 && l2 && n1 == n2 && memcmp(l1, l2, n1 * sizeof *l1) == 0;
    free(l1);
    free(l2);
    if (!ok) {
        fprintf(stderr, "line %d: the imported model differs from the original\n", line);
        check_failures++;
    }
}

static gptx_model *make_model(gptx_model_config c, uint64_t seed) {
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK) return NULL;
    gptx_model_init_random(m, seed);
    return m;
}

static void test_hf(void) {
    const char *path = scratch_file(dir, "hf.safetensors");
    struct {
        gptx_model_config cfg;
        hf_opts o;
    } cases[5];
    gptx_model_config untied = small_config();
    untied.tied_head = 0;
    untied.qkv_bias = 0;
    cases[0].cfg = small_config();
    cases[0].o = (hf_opts){"transformer.", GPTX_ST_F32, 1, 0, 0, NULL, 0};
    cases[1].cfg = small_config();
    cases[1].o = (hf_opts){"", GPTX_ST_F16, 1, 1, 0, NULL, 0};
    cases[2].cfg = small_config();
    cases[2].o = (hf_opts){"", GPTX_ST_BF16, 0, 0, 0, NULL, 0};
    cases[3].cfg = untied;
    cases[3].o = (hf_opts){"transformer.", GPTX_ST_F32, 0, 0, 0, NULL, 0};
    cases[4].cfg = untied;
    cases[4].o = (hf_opts){"", GPTX_ST_F16, 1, 0, 0, NULL, 0};
    for (int i = 0; i < 5; i++) {
        gptx_model *want = make_model(cases[i].cfg, 20 + (uint64_t)i), *got = NULL;
        if (!want) {
            check_failures++;
            continue;
        }
        zero_padded_rows(want);
        if (cases[i].o.dtype != GPTX_ST_F32) round_params(want, cases[i].o.dtype);
        CHECK(write_hf(want, path, cases[i].o) == GPTX_OK);
        CHECK_OK(gptx_model_import_hf(&got, ctx, path, &cases[i].cfg));
        check_same_model(__LINE__ * 100 + i, want, got);
        gptx_model_destroy(got);
        gptx_model_destroy(want);
    }

    /* an untied import of a tied file: the head starts as a copy of wte */
    gptx_model *tied = make_model(small_config(), 5), *got = NULL;
    zero_padded_rows(tied);
    CHECK(write_hf(tied, path, (hf_opts){"", GPTX_ST_F32, 0, 0, 0, NULL, 0}) == GPTX_OK);
    gptx_model_config c = small_config();
    c.tied_head = 0;
    CHECK_OK(gptx_model_import_hf(&got, ctx, path, &c));
    if (got) {
        size_t n1, n2;
        float *w = param_copy(got, "wte.weight", &n1), *h = param_copy(got, "lm_head.weight", &n2);
        CHECK(w && h && n1 == n2 && memcmp(w, h, n1 * sizeof *w) == 0);
        free(w);
        free(h);
    }
    gptx_model_destroy(got);
    got = NULL;

    /* errors */
    gptx_model *out = (gptx_model *)1;
    c = small_config();
    c.n_head = 3;
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, &c), GPTX_ERR_INVALID);
    CHECK_MSG("n_head");
    CHECK(out == NULL);
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, NULL), GPTX_ERR_INVALID); /* 12 heads */
    c = small_config();
    c.padded_vocab_size = 40;
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, &c), GPTX_ERR_INVALID);
    CHECK_MSG("padded_vocab_size");
    /* orientations mixed: c_attn (3C, C) as nn.Linear, c_fc (C, 4C) as Conv1D */
    CHECK(write_hf(tied, path, (hf_opts){"", GPTX_ST_F32, 0, 0, 2, NULL, 0}) == GPTX_OK);
    c = small_config();
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, &c), GPTX_ERR_FORMAT);
    CHECK_MSG("h.0.mlp.c_fc.weight");
    CHECK_MSG("nn.Linear");
    /* a tied import of a file whose lm_head differs from wte */
    gptx_model_config uc = small_config();
    uc.tied_head = 0;
    gptx_model *u = make_model(uc, 8);
    zero_padded_rows(u);
    CHECK(write_hf(u, path, (hf_opts){"", GPTX_ST_F32, 0, 0, 0, NULL, 0}) == GPTX_OK);
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, &c), GPTX_ERR_MISMATCH);
    CHECK_MSG("lm_head.weight");
    gptx_model_destroy(u);
    /* a gptx checkpoint is not a Hugging Face file (no Conv1D layout) */
    const char *g = scratch_file(dir, "gptx.safetensors");
    CHECK_OK(gptx_model_save(tied, g));
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, g, &c), GPTX_ERR_FORMAT);
    CHECK_MSG("gptx_model_load");
    /* no wte at all */
    const char *meta[] = {"format", "pt"};
    float one = 1.0f;
    gptx_st_entry only = {"h.0.ln_1.weight", GPTX_ST_F32, 1, {1}, 1, &one};
    CHECK_OK(gptx_st_write(path, &only, 1, meta, 1, fetch_host, NULL));
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, &c), GPTX_ERR_FORMAT);
    CHECK_MSG("wte.weight");
    gptx_model_destroy(tied);
}

/* ---- the folder's config.json ------------------------------------------------------------ */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* transformers' config.json for the model of test_hf_config, `extra` keys
 * first (they win: JSON objects here have no duplicate keys, so extra
 * replaces a default by leaving it out of `rest`). */
static void write_config(const char *folder, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", folder);
    write_text(path, text);
}

#define CFG_SIZES "\"model_type\": \"gpt2\", \"vocab_size\": 50, \"n_positions\": 16, " \
                  "\"n_embd\": 48, \"n_layer\": 2, \"activation_function\": \"gelu_new\""

/* Issue 35, item 2: a width-48 model of 4 heads (12 would divide 48 as
 * well) with eps 1e-6 and an untied head imports as itself from its folder,
 * whatever cfg leaves to the folder; a cfg that contradicts config.json,
 * and a config.json that contradicts the weights, are refused. */
static void test_hf_config(void) {
    const char *folder = scratch_file(dir, "hf_folder");
    char weights[512];
    snprintf(weights, sizeof weights, "%s/model.safetensors", folder);
    CHECK(mkdir(folder, 0755) == 0);
    gptx_model_config c = small_config();
    c.n_embd = 48;
    c.n_head = 4;
    c.tied_head = 0;
    c.layernorm_eps = 1e-6f;
    gptx_model *want = make_model(c, 41), *got = NULL, *out = NULL;
    zero_padded_rows(want);
    CHECK(write_hf(want, weights, (hf_opts){"transformer.", GPTX_ST_F32, 1, 0, 0, NULL, 0}) == GPTX_OK);
    write_config(folder, "{" CFG_SIZES ", \"n_head\": 4, \"layer_norm_epsilon\": 1e-06, "
                         "\"tie_word_embeddings\": false}");
    gptx_model_config leave = small_config(); /* the programs' cfg: all but the padding left */
    leave.n_head = 0;
    leave.layernorm_eps = 0.0f;
    leave.tied_head = -1;
    CHECK_OK(gptx_model_import_hf(&got, ctx, folder, &leave));
    check_same_model(__LINE__, want, got);
    gptx_model_destroy(got);
    got = NULL;
    /* NULL: the folder's settings (the file path finds config.json beside it) */
    CHECK_OK(gptx_model_import_hf(&got, ctx, weights, NULL));
    gptx_model_config g = got ? config_of(got) : small_config();
    CHECK(g.n_head == 4 && g.layernorm_eps == 1e-6f && g.tied_head == 0);
    gptx_model_destroy(got);
    got = NULL;
    /* cfg saying what the folder says is fine; saying otherwise is refused */
    CHECK_OK(gptx_model_import_hf(&got, ctx, folder, &c));
    check_same_model(__LINE__, want, got);
    gptx_model_destroy(got);
    gptx_model_config other = c;
    other.n_head = 12;
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, folder, &other), GPTX_ERR_MISMATCH);
    CHECK_MSG("cfg.n_head is 12");
    CHECK_MSG("config.json' says 4");
    other = c;
    other.tied_head = 1;
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, folder, &other), GPTX_ERR_MISMATCH);
    CHECK_MSG("tied_head");
    other = c;
    other.layernorm_eps = 1e-5f;
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, folder, &other), GPTX_ERR_MISMATCH);
    CHECK_MSG("layernorm_eps");
    /* transformers' other spelling; and its defaults (12 heads, tied) */
    write_config(folder, "{" CFG_SIZES ", \"num_attention_heads\": 4, \"layer_norm_epsilon\": "
                         "1e-06, \"tie_word_embeddings\": false}");
    CHECK_OK(gptx_model_import_hf(&got, ctx, folder, &leave));
    check_same_model(__LINE__, want, got);
    gptx_model_destroy(got);
    got = NULL;
    write_config(folder, "{" CFG_SIZES "}");
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, folder, NULL), GPTX_ERR_MISMATCH);
    CHECK_MSG("lm_head.weight differs"); /* tied by default: the file's head is not wte */
    /* config.json against the weights, and what gptx does not compute */
    static const struct { const char *json; int status; const char *msg; } bad[] = {
        {"{" CFG_SIZES ", \"n_head\": 4, \"n_layer\": 3}", GPTX_ERR_FORMAT, "n_layer"},
        {"{\"n_head\": 4, \"n_positions\": 1024}", GPTX_ERR_FORMAT, "n_positions 1024"},
        {"{\"n_head\": 4, \"num_attention_heads\": 2}", GPTX_ERR_FORMAT, "disagree"},
        {"{\"n_head\": 4, \"tie_word_embeddings\": \"yes\"}", GPTX_ERR_FORMAT, "true or false"},
        {"{\"n_head\": \"4\"}", GPTX_ERR_FORMAT, "whole number"},
        {"{\"n_head\": 4, \"layer_norm_epsilon\": -1}", GPTX_ERR_FORMAT, "layer_norm_epsilon"},
        {"{\"n_head\": 4, \"activation_function\": \"relu\"}", GPTX_ERR_UNSUPPORTED, "relu"},
        {"{\"n_head\": 4, \"model_type\": \"llama\"}", GPTX_ERR_UNSUPPORTED, "llama"},
        {"{\"n_head\": 4, \"scale_attn_weights\": false}", GPTX_ERR_UNSUPPORTED, "scale_attn"},
        {"[4]", GPTX_ERR_FORMAT, "JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_config(folder, bad[i].json);
        CHECK_STATUS(gptx_model_import_hf(&out, ctx, folder, &leave), bad[i].status);
        CHECK_MSG(bad[i].msg);
        CHECK(out == NULL);
    }
    /* without config.json: a folder is refused; a file takes cfg, and cfg
     * cannot leave a setting to a config that is not there */
    char config[512];
    snprintf(config, sizeof config, "%s/config.json", folder);
    CHECK(unlink(config) == 0);
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, folder, &c), GPTX_ERR_IO);
    CHECK_MSG("without config.json");
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, weights, &leave), GPTX_ERR_INVALID);
    CHECK_MSG("cfg.n_head 0");
    CHECK_OK(gptx_model_import_hf(&got, ctx, weights, &c));
    check_same_model(__LINE__, want, got);
    gptx_model_destroy(got);
    gptx_model_destroy(want);
}

/* Every bias of the model set to 0 (nanoGPT's bias=False computes so). */
static void zero_biases(gptx_model *m) {
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        if (!ends_with(info.name, ".bias")) continue;
        float *z = calloc(info.numel, sizeof *z);
        gptx_model_set_parameter(m, info.name, z, info.numel);
        free(z);
    }
}

/* Item 7: nanoGPT's state_dict saved as safetensors (docs/checkpoints.md):
 * "_orig_mod.transformer." names from torch.compile, lm_head.weight beside
 * wte, nn.Linear weights (out, in), the causal-mask buffers, and with
 * bias=False no bias at all. */
static void test_hf_nanogpt(void) {
    const char *path = scratch_file(dir, "nano.safetensors");
    const hf_opts nano = {"_orig_mod.transformer.", GPTX_ST_F32, 1, 1, 1, "_orig_mod.", 1};
    gptx_model_config c = small_config();
    c.qkv_bias = 0;
    c.padded_vocab_size = 0;
    gptx_model *want = make_model(c, 51), *got = NULL, *out = NULL;
    zero_biases(want);
    CHECK(write_hf(want, path, nano) == GPTX_OK);
    CHECK_OK(gptx_model_import_hf(&got, ctx, path, &c));
    check_same_model(__LINE__, want, got);
    gptx_model_destroy(got);
    got = NULL;
    gptx_model_destroy(want);
    /* bias=True (model.py's default): nn.Linear with every bias */
    c.qkv_bias = 1;
    want = make_model(c, 52);
    hf_opts biased = nano;
    biased.no_bias = 0;
    CHECK(write_hf(want, path, biased) == GPTX_OK);
    CHECK_OK(gptx_model_import_hf(&got, ctx, path, &c));
    check_same_model(__LINE__, want, got);
    gptx_model_destroy(got);
    /* some biases but not all is no layout */
    biased.no_bias = 2;
    CHECK(write_hf(want, path, biased) == GPTX_OK);
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, path, &c), GPTX_ERR_FORMAT);
    CHECK_MSG("all of GPT-2's biases or none");
    gptx_model_destroy(want);
}

static void test_hf_edited(void) {
    /* edit a valid F32 file: an extra tensor, a missing one */
    const char *path = scratch_file(dir, "hf2.safetensors");
    gptx_model *m = make_model(small_config(), 6), *out = NULL;
    zero_padded_rows(m);
    gptx_model_config c = small_config();
    CHECK(write_hf(m, path, (hf_opts){"", GPTX_ST_F32, 1, 0, 0, NULL, 0}) == GPTX_OK);
    gptx_st_file f;
    CHECK_OK(gptx_st_open(&f, path));
    size_t n = f.ntensors;
    gptx_st_entry *e = calloc(n + 1, sizeof *e);
    float **data = calloc(n + 1, sizeof *data);
    for (size_t i = 0; i < n; i++) {
        const gptx_st_tensor *t = &f.tensors[i];
        data[i] = malloc((t->numel ? t->numel : 1) * sizeof(float));
        CHECK_OK(gptx_st_read_f32(&f, t, data[i], t->numel));
        e[i] = (gptx_st_entry){t->name, GPTX_ST_F32, t->ndim, {0}, t->numel, data[i]};
        memcpy(e[i].shape, t->shape, sizeof e[i].shape);
    }
    const char *meta[] = {"format", "pt"};
    const char *edited = scratch_file(dir, "hf_edited.safetensors");
    /* extra */
    e[n] = e[0];
    e[n].name = "h.0.attn.rotary.weight";
    CHECK_OK(gptx_st_write(edited, e, n + 1, meta, 1, fetch_host, NULL));
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, edited, &c), GPTX_ERR_FORMAT);
    CHECK_MSG("h.0.attn.rotary.weight");
    /* missing: drop h.1.mlp.c_proj.bias */
    size_t k = 0;
    for (; k < n && strcmp(e[k].name, "h.1.mlp.c_proj.bias") != 0; k++) {}
    CHECK(k < n);
    gptx_st_entry saved = e[k];
    e[k] = e[n - 1];
    CHECK_OK(gptx_st_write(edited, e, n - 1, meta, 1, fetch_host, NULL));
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, edited, &c), GPTX_ERR_FORMAT);
    CHECK_MSG("h.1.mlp.c_proj.bias");
    e[k] = saved;
    gptx_st_close(&f);
    for (size_t i = 0; i < n + 1; i++) free(data[i]);
    free(data);
    free(e);
    gptx_model_destroy(m);
    CHECK(out == NULL);
}

static void test_llmc(void) {
    const char *path = scratch_file(dir, "model.bin");
    gptx_model_config c = small_config(); /* tied, qkv bias, masked: llm.c's GPT-2 */
    for (int version = 3; version <= 5; version += 2) {
        gptx_model *want = make_model(c, 30 + (uint64_t)version), *got = NULL;
        if (version == 5) round_params(want, GPTX_ST_BF16);
        CHECK(write_llmc(want, path, version) == 0);
        CHECK_OK(gptx_model_import_llmc(&got, ctx, path));
        check_same_model(__LINE__ * 100 + version, want, got);
        gptx_model_destroy(got);
        gptx_model_destroy(want);
    }
    /* errors: header fields, truncation (naming the array), trailing bytes */
    gptx_model *m = make_model(c, 1), *out = (gptx_model *)1;
    CHECK(write_llmc(m, path, 3) == 0);
    size_t n = 0;
    unsigned char *good = read_all(path, &n);
    const char *bad = scratch_file(dir, "bad.bin");
    struct {
        int word, value, status;
        const char *needle;
    } hdr[] = {
        {0, 20240520, GPTX_ERR_FORMAT, "token shard"},
        {0, 1, GPTX_ERR_FORMAT, "magic"},
        {1, 1, GPTX_ERR_UNSUPPORTED, "version 1"},
        {1, 4, GPTX_ERR_FORMAT, "version 4"},
        {4, 0, GPTX_ERR_FORMAT, "n_layer"},
        {6, -16, GPTX_ERR_FORMAT, "n_embd"},
        {5, 3, GPTX_ERR_FORMAT, "n_embd"},
        {7, 10, GPTX_ERR_FORMAT, "padded_vocab_size"},
        {4, 3, GPTX_ERR_FORMAT, "truncated"}, /* claims 3 layers, holds 2 */
        {2, 8, GPTX_ERR_FORMAT, "after the last parameter"},
    };
    for (size_t i = 0; i < sizeof hdr / sizeof hdr[0]; i++) {
        unsigned char *b = malloc(n);
        memcpy(b, good, n);
        int32_t v = hdr[i].value;
        memcpy(b + 4 * hdr[i].word, &v, 4);
        CHECK(write_all(bad, b, n) == 0);
        free(b);
        out = (gptx_model *)1;
        CHECK_STATUS(gptx_model_import_llmc(&out, ctx, bad), hdr[i].status);
        CHECK_MSG(hdr[i].needle);
        CHECK_MSG("bad.bin");
        CHECK(out == NULL);
    }
    /* cut inside layer 1's fc weights */
    size_t C = 16, cut = 1024 + 4 * (64 * C + 16 * C + 2 * 2 * C + 2 * 3 * C * C + 2 * 3 * C +
                                     2 * C * C + 2 * C + 2 * 2 * C + 4 * C * C + 2 * C);
    CHECK(write_all(bad, good, cut) == 0);
    CHECK_STATUS(gptx_model_import_llmc(&out, ctx, bad), GPTX_ERR_FORMAT);
    CHECK_MSG("fcw, layer 1");
    CHECK_MSG("h.1.mlp.c_fc.weight");
    CHECK(write_all(bad, good, 1000) == 0);
    CHECK_STATUS(gptx_model_import_llmc(&out, ctx, bad), GPTX_ERR_FORMAT);
    CHECK_MSG("1024-byte header");
    /* a NaN in the data */
    unsigned char *b = malloc(n);
    memcpy(b, good, n);
    memset(b + n - 4, 0xff, 4);
    CHECK(write_all(bad, b, n) == 0);
    free(b);
    CHECK_STATUS(gptx_model_import_llmc(&out, ctx, bad), GPTX_ERR_NON_FINITE);
    CHECK_MSG("ln_f.bias");
    free(good);
    gptx_model_destroy(m);
}

/* The PyTorch fixture's parameters through both formats give its logits. */
static void test_fixture(const char *fixture_path) {
    fixture fx;
    char err[256];
    if (fixture_load(fixture_path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "fixture: %s\n", err);
        check_failures++;
        return;
    }
    const fixture_entry *cfg = fixture_get(&fx, "config", FIXTURE_I32, 12, err, sizeof err);
    const fixture_entry *hy = fixture_get(&fx, "hyper", FIXTURE_F32, 7, err, sizeof err);
    const fixture_entry *in = fixture_find(&fx, "inputs");
    const fixture_entry *lg = fixture_find(&fx, "logits");
    if (!cfg || !hy || !in || !lg) {
        fprintf(stderr, "fixture: missing entries\n");
        check_failures++;
        fixture_free(&fx);
        return;
    }
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = cfg->i32[0];
    c.padded_vocab_size = cfg->i32[1];
    c.context_length = cfg->i32[2];
    c.n_layer = cfg->i32[3];
    c.n_head = cfg->i32[4];
    c.n_embd = cfg->i32[5];
    c.qkv_bias = cfg->i32[6];
    c.tied_head = cfg->i32[7];
    c.mask_padded_logits = cfg->i32[8];
    c.layernorm_eps = hy->f32[0];
    int B = cfg->i32[9], T = cfg->i32[10];
    gptx_model *ref = NULL, *hf = NULL, *llmc = NULL;
    if (gptx_model_create(&ref, ctx, &c) != GPTX_OK) {
        check_failures++;
        fixture_free(&fx);
        return;
    }
    for (int i = 0; i < fx.n_entries; i++)
        if (strncmp(fx.entries[i].name, "param/", 6) == 0)
            CHECK_OK(gptx_model_set_parameter(ref, fx.entries[i].name + 6, fx.entries[i].f32,
                                              fx.entries[i].numel));
    const char *llmc_path = scratch_file(dir, "fixture.bin");
    CHECK(write_llmc(ref, llmc_path, 3) == 0);
    CHECK_OK(gptx_model_import_llmc(&llmc, ctx, llmc_path));
    check_same_model(__LINE__, ref, llmc); /* the padded rows travel too */
    const char *hf_path = scratch_file(dir, "fixture.safetensors");
    CHECK(write_hf(ref, hf_path, (hf_opts){"transformer.", GPTX_ST_F32, 1, 0, 0, NULL, 0}) == GPTX_OK);
    CHECK_OK(gptx_model_import_hf(&hf, ctx, hf_path, &c));
    size_t n = (size_t)B * T * (size_t)c.padded_vocab_size, n1 = 0, n2 = 0;
    float *l_ref = logits_for(ref, in->i32, B, T, &n1);
    float *l_hf = hf ? logits_for(hf, in->i32, B, T, &n2) : NULL;
    CHECK(l_ref && l_hf && n1 == n && n2 == n && lg->numel == n);
    if (l_ref && l_hf && n1 == n && n2 == n && lg->numel == n) {
        /* HF files hold no padded rows; their logits are masked anyway */
        CHECK(memcmp(l_ref, l_hf, n * sizeof *l_ref) == 0);
        double worst = 0.0;
        int inf_ok = 1;
        for (size_t i = 0; i < n; i++) {
            float b = lg->f32[i];
            if (isinf(b)) inf_ok &= isinf(l_hf[i]) && l_hf[i] < 0;
            else if (fabs((double)l_hf[i] - b) > worst) worst = fabs((double)l_hf[i] - b);
        }
        CHECK(inf_ok);
        CHECK(worst <= 1e-4);
        printf("fixture %s: imported logits vs PyTorch max|d| %.3g\n", fixture_path, worst);
    }
    free(l_ref);
    free(l_hf);
    gptx_model_destroy(ref);
    gptx_model_destroy(hf);
    gptx_model_destroy(llmc);
    fixture_free(&fx);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s odd_tied_bias.gptxfix\n", argv[0]);
        return 2;
    }
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    scratch_dir d;
    if (scratch_make(&d, "import") != 0) return 1;
    dir = &d;
    test_hf();
    test_hf_config();
    test_hf_nanogpt();
    test_hf_edited();
    test_llmc();
    test_fixture(argv[1]);
    scratch_remove(&d);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_import");
}
