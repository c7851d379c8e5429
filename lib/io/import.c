/*
 * Imports of other tools' GPT-2 files into a new model:
 *
 * Hugging Face safetensors: names "h.0.attn.c_attn.weight" (optionally under
 *   "transformer."), F32, F16 or BF16. Conv1D weights (c_attn, attn.c_proj,
 *   c_fc, mlp.c_proj) are stored (in, out) and are transposed to our
 *   (out, in); wte (V, C) fills the first V rows of the padded wte; the
 *   attention buffers "attn.bias" / "attn.masked_bias" are ignored. The
 *   heads, the LayerNorm eps and the tied head come from the config.json
 *   beside the weights (hf_config.c) and/or the caller's cfg, which must
 *   agree. nanoGPT's state_dict saved as safetensors is read too: names
 *   under "_orig_mod.transformer.", nn.Linear weights (out, in) taken as
 *   they are, and without biases (bias=False) every bias 0.
 * llm.c model files (gpt2_124M.bin): 256 int32 header [20240326, version,
 *   maxT, V, L, NH, C, Vp, ...], then the 16 parameter arrays in llm.c order,
 *   each stacked over layers, weights already (out, in). Version 3 is fp32,
 *   version 5 bf16.
 *
 * As in checkpoint.c, every tensor is checked before the model is created and
 * the model is built in a host buffer, so a failure leaves nothing behind.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "errors.h"
#include "hf_config.h"
#include "model.h"
#include "param_storage.h"
#include "abi_struct.h"
#include "foreign_layout.h"
#include "safetensors.h"

static int check_finite(const char *label, const char *name, const float *x, size_t n) {
    for (size_t k = 0; k < n; k++)
        if (!isfinite(x[k]))
            return GPTX_FAIL(GPTX_ERR_NON_FINITE, "'%s': tensor '%s' element %zu is %g", label, name,
                             k, (double)x[k]);
    return GPTX_OK;
}

/* ---- Hugging Face ------------------------------------------------------------ */

/* How the file lays out a GPT-2: transformers' names and Conv1D weights, or
 * nanoGPT's state_dict (nn.Linear weights, "_orig_mod." from torch.compile,
 * no biases when trained with bias=False). */
typedef struct hf_plan {
    const char *prefix;      /* before "wte.weight": "", "transformer.", "_orig_mod.transformer." */
    const char *head_prefix; /* before "lm_head.weight": "" or "_orig_mod." */
    int linear;              /* 1: weights (out, in) as nn.Linear (nanoGPT) */
    int no_bias;             /* 1: no LayerNorm or Linear biases in the file (taken as 0) */
    char (*names)[GPTX_NAME_MAX + 32]; /* file name of each layout tensor */
    const gptx_st_tensor **src;        /* its tensor in the file */
    const gptx_st_tensor *lm_head;     /* the head in the file, or NULL */
} hf_plan;

/* A bias that nanoGPT's bias=False leaves out (the qkv bias is qkv_bias). */
static int hf_optional_bias(const hf_plan *plan, const char *name) {
    return plan->no_bias && gptx_name_ends_with(name, ".bias") &&
           !gptx_name_ends_with(name, "c_attn.bias");
}

/* The file name and (in, out)-aware shape of layout tensor i. */
static void hf_expect(const gptx_layout *L, const gptx_model_config *c, int i, const hf_plan *plan,
                      char *name, size_t len, int64_t shape[2]) {
    const gptx_param_desc *d = &L->tensors[i];
    int is_head = !c->tied_head && i == L->lm_head;
    snprintf(name, len, "%s%s", is_head ? plan->head_prefix : plan->prefix, d->name);
    shape[0] = d->shape[0];
    shape[1] = d->shape[1];
    if (i == L->wte || is_head) shape[0] = c->vocab_size; /* unpadded in the file */
    if (gptx_hf_is_conv1d(d->name) && !plan->linear) {
        shape[0] = d->shape[1];
        shape[1] = d->shape[0];
    }
}

static int hf_is_ignored(const char *name, const char *prefix) {
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) != 0 || strncmp(name + p, "h.", 2) != 0) return 0;
    return gptx_name_ends_with(name, ".attn.bias") || gptx_name_ends_with(name, ".attn.masked_bias");
}

/* Layout tensor i against the file's: present (or left out on purpose),
 * a float dtype, the expected shape. */
static int hf_check_tensor(const gptx_st_file *f, const gptx_layout *L, const gptx_model_config *c,
                           hf_plan *plan, int i) {
    const char *lab = f->src.label;
    int64_t shape[2];
    hf_expect(L, c, i, plan, plan->names[i], sizeof plan->names[i], shape);
    int is_head = !c->tied_head && i == L->lm_head;
    const gptx_st_tensor *t = is_head && !plan->lm_head ? NULL : gptx_st_find(f, plan->names[i]);
    plan->src[i] = t;
    if (is_head && !plan->lm_head) return GPTX_OK; /* copied from wte */
    if (hf_optional_bias(plan, L->tensors[i].name)) {
        if (t)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has '%s' but no '%sh.0.ln_1.bias': a file "
                             "has all of GPT-2's biases or none (nanoGPT's bias=False)", lab,
                             t->name, plan->prefix);
        return GPTX_OK; /* zero, as nanoGPT's model computes without it */
    }
    if (!t)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no tensor '%s' (a GPT-2 with %d layers needs it)",
                         lab, plan->names[i], c->n_layer);
    if (t->dtype == GPTX_ST_OTHER)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "'%s': tensor '%s' has dtype %s; import reads F32, "
                         "F16 and BF16", lab, t->name, t->dtype_name);
    int nd = L->tensors[i].ndim;
    if (t->ndim == nd && t->shape[0] == shape[0] && (nd == 1 || t->shape[1] == shape[1]))
        return GPTX_OK;
    char got[160], want[64];
    gptx_st_shape_str(t->shape, t->ndim, got, sizeof got);
    gptx_st_shape_str(shape, nd, want, sizeof want);
    return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has shape %s; expected %s%s", lab, t->name,
                     got, want, !gptx_hf_is_conv1d(t->name) ? ""
                                : plan->linear ? " (nn.Linear: out, in)" : " (Conv1D: in, out)");
}

static int hf_check(const gptx_st_file *f, const gptx_layout *L, const gptx_model_config *c,
                    hf_plan *plan) {
    const char *lab = f->src.label;
    for (int i = 0; i < L->ntensors; i++) GPTX_TRY(hf_check_tensor(f, L, c, plan, i));
    if (plan->lm_head && c->tied_head) {
        const gptx_st_tensor *t = plan->lm_head;
        if (t->dtype == GPTX_ST_OTHER || t->ndim != 2 || t->shape[0] != c->vocab_size ||
            t->shape[1] != c->n_embd)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' is not (%d, %d) float", lab,
                             t->name, c->vocab_size, c->n_embd);
    }
    /* anything else is not part of a GPT-2 */
    for (size_t k = 0; k < f->ntensors; k++) {
        const gptx_st_tensor *t = &f->tensors[k];
        if (hf_is_ignored(t->name, plan->prefix) || t == plan->lm_head) continue;
        int known = 0;
        for (int i = 0; i < L->ntensors && !known; i++) known = plan->src[i] == t;
        if (!known)
            return GPTX_FAIL(GPTX_ERR_FORMAT,
                             "'%s' holds tensor '%.80s', which is not part of a GPT-2 with %d layers",
                             lab, t->name, c->n_layer);
    }
    return GPTX_OK;
}

/* Layout tensor i from the file into dst (Conv1D weights transposed). */
static int hf_read_tensor(const gptx_st_file *f, const gptx_model *m, const hf_plan *plan, int i,
                          float *host, float *scratch) {
    const gptx_layout *L = &m->layout;
    const gptx_param_desc *d = &L->tensors[i];
    const gptx_st_tensor *t = plan->src[i];
    float *dst = host + d->offset;
    if (!t) { /* an untied head absent from the file starts as a copy of wte; a bias left out is 0 */
        if (i == L->lm_head) memcpy(dst, host + L->tensors[L->wte].offset, d->numel * sizeof *dst);
        return GPTX_OK;
    }
    if (i == L->wte || i == L->lm_head) /* rows [V, Vp) stay 0 */
        GPTX_TRY(gptx_st_read_f32(f, t, dst, (size_t)m->cfg.vocab_size * (size_t)m->cfg.n_embd));
    else if (!gptx_hf_is_conv1d(d->name) || plan->linear)
        GPTX_TRY(gptx_st_read_f32(f, t, dst, d->numel));
    else {
        GPTX_TRY(gptx_st_read_f32(f, t, scratch, d->numel));
        /* (in, out) -> (out, in): dst[o][i] = src[i][o] */
        size_t out = (size_t)d->shape[0], in = (size_t)d->shape[1];
        for (size_t r = 0; r < in; r++)
            for (size_t col = 0; col < out; col++) dst[col * in + r] = scratch[r * out + col];
    }
    return check_finite(f->src.label, t->name, dst, d->numel);
}

static int hf_read(const gptx_st_file *f, const gptx_model *m, const hf_plan *plan, float *host) {
    const gptx_layout *L = &m->layout;
    const gptx_model_config *c = &m->cfg;
    size_t maxn = 1;
    for (int i = 0; i < L->ntensors; i++)
        if (L->tensors[i].numel > maxn) maxn = L->tensors[i].numel;
    float *scratch = malloc(maxn * sizeof *scratch);
    if (!scratch) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", maxn);
    int rc = GPTX_OK;
    for (int i = 0; i < L->ntensors && rc == GPTX_OK; i++)
        rc = hf_read_tensor(f, m, plan, i, host, scratch);
    /* a tied model may still carry lm_head.weight: it must be wte */
    size_t VC = (size_t)c->vocab_size * (size_t)c->n_embd;
    if (rc == GPTX_OK && plan->lm_head && c->tied_head) {
        rc = gptx_st_read_f32(f, plan->lm_head, scratch, VC);
        if (rc == GPTX_OK && memcmp(scratch, host + L->tensors[L->wte].offset, VC * sizeof(float)))
            rc = GPTX_FAIL(GPTX_ERR_MISMATCH, "'%s': lm_head.weight differs from wte.weight; import "
                           "with cfg.tied_head = 0 to keep both", f->src.label);
    }
    free(scratch);
    return rc;
}

/* The file's layout: its name prefix, the weights' orientation, biases. */
static int hf_find_layout(const gptx_st_file *f, hf_plan *plan, const gptx_st_tensor **wte,
                          const gptx_st_tensor **wpe) {
    static const char *const prefixes[] = {"", "transformer.", "_orig_mod.transformer."};
    char name[GPTX_NAME_MAX + 32];
    const char *format = gptx_st_meta(f, "format");
    if (format && !strcmp(format, "gptx")) /* same names and orientation, its own config */
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' is a gptx file: gptx_model_load reads it",
                         f->src.label);
    *wte = NULL;
    for (size_t k = 0; k < sizeof prefixes / sizeof prefixes[0] && !*wte; k++) {
        plan->prefix = prefixes[k];
        snprintf(name, sizeof name, "%swte.weight", plan->prefix);
        *wte = gptx_st_find(f, name);
    }
    snprintf(name, sizeof name, "%swpe.weight", plan->prefix);
    *wpe = gptx_st_find(f, name);
    if (!*wte || !*wpe)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no wte.weight and wpe.weight: not a GPT-2 file",
                         f->src.label);
    plan->head_prefix = strncmp(plan->prefix, "_orig_mod.", 10) ? "" : "_orig_mod.";
    snprintf(name, sizeof name, "%slm_head.weight", plan->head_prefix);
    plan->lm_head = gptx_st_find(f, name);
    /* c_attn is (C, 3C) as Conv1D and (3C, C) as nn.Linear: the file's orientation */
    snprintf(name, sizeof name, "%sh.0.attn.c_attn.weight", plan->prefix);
    const gptx_st_tensor *qkv = gptx_st_find(f, name);
    plan->linear = qkv && qkv->ndim == 2 && qkv->shape[1] == (*wte)->shape[1] &&
                   qkv->shape[0] == 3 * (*wte)->shape[1];
    snprintf(name, sizeof name, "%sh.0.ln_1.bias", plan->prefix);
    plan->no_bias = gptx_st_find(f, name) == NULL;
    return GPTX_OK;
}

/* The sizes the file's tensors give. */
static int hf_sizes(const gptx_st_file *f, const hf_plan *plan, const gptx_st_tensor *wte,
                    const gptx_st_tensor *wpe, gptx_model_config *c) {
    const char *lab = f->src.label;
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] ||
        wte->shape[0] > INT32_MAX || wpe->shape[0] > INT32_MAX || wte->shape[1] > INT32_MAX)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': wte.weight and wpe.weight must be (V, C) and (T, C)",
                         lab);
    char name[GPTX_NAME_MAX + 32];
    int n_layer = 0;
    for (;; n_layer++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", plan->prefix, n_layer);
        if (!gptx_st_find(f, name) || n_layer > 4096) break;
    }
    if (n_layer == 0) return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no layer h.0", lab);
    snprintf(name, sizeof name, "%sh.0.attn.c_attn.bias", plan->prefix);
    c->vocab_size = (int)wte->shape[0];
    c->context_length = (int)wpe->shape[0];
    c->n_embd = (int)wte->shape[1];
    c->n_layer = n_layer;
    c->qkv_bias = gptx_st_find(f, name) != NULL;
    return GPTX_OK;
}

/* config.json's sizes against the weights': a folder whose parts disagree. */
static int hf_config_agrees(const gptx_hf_config *hc, const gptx_model_config *c, const char *lab) {
    const struct { const char *key; int64_t said; int has; const char *what; } k[] = {
        {"vocab_size", hc->vocab_size, c->vocab_size, "rows of wte.weight"},
        {"n_positions", hc->n_positions, c->context_length, "rows of wpe.weight"},
        {"n_embd", hc->n_embd, c->n_embd, "columns of wte.weight"},
        {"n_layer", hc->n_layer, c->n_layer, "layers"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (k[i].said >= 0 && k[i].said != k[i].has)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' says %s %lld; '%s' has %d %s", hc->label,
                             k[i].key, (long long)k[i].said, lab, k[i].has, k[i].what);
    return GPTX_OK;
}

/* One setting the weights cannot tell: cfg's value (`mine`, `unset` when
 * the caller leaves it to the file), config.json's (`theirs`) or both,
 * which must then agree. */
#define HF_SETTING(field, unset, fmt)                                                          \
    do {                                                                                       \
        if (!hc && c->field == (unset))                                                        \
            return GPTX_FAIL(GPTX_ERR_INVALID, "cfg." #field " " fmt " means config.json's, "  \
                             "and there is none beside '%s'", c->field, lab);                  \
        if (hc && c->field == (unset)) c->field = hc->field;                                   \
        else if (hc && c->field != hc->field)                                                  \
            return GPTX_FAIL(GPTX_ERR_MISMATCH, "cfg." #field " is " fmt "; '%s' says " fmt    \
                             ": pass cfg NULL, or cfg." #field " " fmt ", to take the "        \
                             "folder's", c->field, hc->label, hc->field, unset);               \
    } while (0)

/* The model's settings: cfg's, config.json's, and the file's sizes. */
static int hf_settings(gptx_model_config *c, const gptx_model_config *cfg_in,
                       const gptx_hf_config *hc, const char *lab) {
    gptx_model_config_init(c);
    if (cfg_in) {
        GPTX_TRY(gptx_struct_read(c, cfg_in, &gptx_desc_model_config, "gptx_model_import_hf",
                                  "cfg"));
    } else if (hc) { /* NULL: the folder's settings */
        c->n_head = 0;
        c->layernorm_eps = 0.0f;
        c->tied_head = -1;
    }
    HF_SETTING(n_head, 0, "%d");
    HF_SETTING(layernorm_eps, 0.0f, "%g");
    HF_SETTING(tied_head, -1, "%d");
    return GPTX_OK;
}
#undef HF_SETTING

int gptx_import_hf_st(gptx_model **out, gptx_context *ctx, const gptx_st_file *f,
                      const gptx_model_config *cfg_in, const gptx_hf_config *hc) {
    const char *lab = f->src.label;
    gptx_model_config c;
    GPTX_TRY(hf_settings(&c, cfg_in, hc, lab));
    hf_plan plan = {0};
    const gptx_st_tensor *wte = NULL, *wpe = NULL;
    GPTX_TRY(hf_find_layout(f, &plan, &wte, &wpe));
    GPTX_TRY(hf_sizes(f, &plan, wte, wpe, &c));
    if (hc) GPTX_TRY(hf_config_agrees(hc, &c, lab));
    if (c.padded_vocab_size == 0) c.padded_vocab_size = c.vocab_size;
    if (c.padded_vocab_size < c.vocab_size)
        return GPTX_FAIL(GPTX_ERR_INVALID, "cfg.padded_vocab_size is %d; the file's vocabulary is %d",
                         c.padded_vocab_size, c.vocab_size);
    if (c.n_head <= 0 || c.n_embd % c.n_head != 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "%s n_head is %d; must divide the file's n_embd %d",
                         hc ? "the" : "cfg's", c.n_head, c.n_embd);
    /* untied without lm_head.weight in the file: the head starts as a copy
     * of wte (untying a pretrained model) */
    GPTX_TRY(gptx_ckpt_check_config(&c, lab));

    gptx_layout L;
    GPTX_TRY(gptx_layout_build(&L, &c));
    plan.names = calloc((size_t)L.ntensors, sizeof *plan.names);
    plan.src = calloc((size_t)L.ntensors, sizeof *plan.src);
    int rc = plan.names && plan.src ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) rc = hf_check(f, &L, &c, &plan);
    gptx_layout_free(&L);
    gptx_model *m = NULL;
    float *host = NULL;
    if (rc == GPTX_OK) rc = gptx_model_create(&m, ctx, &c);
    if (rc == GPTX_OK) {
        host = calloc(m->layout.nparams ? m->layout.nparams : 1, sizeof *host);
        if (!host) rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", m->layout.nparams);
    }
    if (rc == GPTX_OK) rc = hf_read(f, m, &plan, host);
    if (rc == GPTX_OK) rc = gptx_model_restore_weights(m, host);
    free(host);
    free(plan.names);
    free(plan.src);
    if (rc != GPTX_OK) {
        gptx_model_destroy(m);
        return rc;
    }
    *out = m;
    return GPTX_OK;
}

/* A folder: its model.safetensors and config.json (both needed). A file:
 * itself, and the config.json beside it when there is one. */
static int hf_paths(const char *path, char **weights, char **config) {
    struct stat st;
    int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    const char *slash = strrchr(path, '/');
    size_t n = strlen(path) + 32, d = dir ? strlen(path) : slash ? (size_t)(slash - path) : 0;
    *weights = malloc(n);
    *config = malloc(n);
    if (!*weights || !*config) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    snprintf(*weights, n, dir ? "%s/model.safetensors" : "%s", path);
    snprintf(*config, n, "%.*s%sconfig.json", (int)d, path, dir || slash ? "/" : "");
    if (dir && stat(*config, &st) != 0)
        return GPTX_FAIL(GPTX_ERR_IO, "'%s' is a folder without config.json: a Hugging Face GPT-2 "
                         "folder holds model.safetensors and config.json (to import the weights "
                         "alone, give the file and cfg)", path);
    if (!dir && stat(*config, &st) != 0) {
        free(*config); /* no config: cfg gives the settings */
        *config = NULL;
    }
    return GPTX_OK;
}

int gptx_model_import_hf(gptx_model **out, gptx_context *ctx, const char *path,
                         const gptx_model_config *cfg) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(path);
    char *weights = NULL, *config = NULL;
    gptx_hf_config hc;
    int rc = hf_paths(path, &weights, &config);
    if (rc == GPTX_OK && config) rc = gptx_hf_config_read(&hc, config);
    gptx_st_file f;
    if (rc == GPTX_OK) rc = gptx_st_open(&f, weights);
    if (rc == GPTX_OK) {
        rc = gptx_import_hf_st(out, ctx, &f, cfg, config ? &hc : NULL);
        gptx_st_close(&f);
    }
    free(weights);
    free(config);
    return rc;
}

/* ---- llm.c ---------------------------------------------------------------------- */

/* Walks the file's arrays in order. With host == NULL only checks the sizes:
 * names the first array that does not fit, or rejects trailing bytes. */
static int llmc_walk(const gptx_src *src, const gptx_layout *L, int n_layer, int dtype, float *host) {
    uint64_t off = GPTX_LLMC_HEADER_BYTES, es = dtype == GPTX_ST_F32 ? 4 : 2;
    for (int k = 0; k < GPTX_LLMC_NTENSORS; k++) {
        int nl = gptx_llmc_per_layer(k) ? n_layer : 1;
        for (int l = 0; l < nl; l++) {
            const gptx_param_desc *d = &L->tensors[gptx_llmc_index(L, k, l)];
            char what[128];
            if (gptx_llmc_per_layer(k))
                snprintf(what, sizeof what, "llm.c array %s, layer %d (%s)", gptx_llmc_names[k], l, d->name);
            else
                snprintf(what, sizeof what, "llm.c array %s (%s)", gptx_llmc_names[k], d->name);
            uint64_t bytes = (uint64_t)d->numel * es;
            if (!host) {
                if (off + bytes > src->size)
                    return GPTX_FAIL(GPTX_ERR_FORMAT,
                                     "'%s' is truncated: %s needs bytes [%llu, %llu) but the file "
                                     "has %llu bytes", src->label, what, (unsigned long long)off,
                                     (unsigned long long)(off + bytes),
                                     (unsigned long long)src->size);
            } else {
                float *dst = host + d->offset;
                GPTX_TRY(gptx_src_read_f32(src, off, dtype, dst, d->numel, what));
                GPTX_TRY(check_finite(src->label, d->name, dst, d->numel));
            }
            off += bytes;
        }
    }
    if (!host && off != src->size)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has %llu bytes after the last parameter (expected "
                         "exactly %llu bytes)", src->label, (unsigned long long)(src->size - off),
                         (unsigned long long)off);
    return GPTX_OK;
}

int gptx_import_llmc_src(gptx_model **out, gptx_context *ctx, const gptx_src *src) {
    const char *lab = src->label;
    if (src->size < GPTX_LLMC_HEADER_BYTES)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' is %llu bytes; an llm.c model file starts with a "
                         "1024-byte header", lab, (unsigned long long)src->size);
    unsigned char b[GPTX_LLMC_HEADER_BYTES];
    GPTX_TRY(gptx_src_read(src, 0, b, sizeof b, "the header"));
    int32_t h[8];
    for (int i = 0; i < 8; i++)
        h[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                         (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24);
    if (h[0] != GPTX_LLMC_MAGIC)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': magic is %d; an llm.c model file has %d%s", lab,
                         (int)h[0], GPTX_LLMC_MAGIC,
                         h[0] == 20240520 ? " (this is a token shard)" :
                         h[0] == 20240327 ? " (this is an llm.c optimizer state file)" : "");
    int dtype;
    if (h[1] == 3) dtype = GPTX_ST_F32;
    else if (h[1] == 5) dtype = GPTX_ST_BF16;
    else
        return GPTX_FAIL(h[1] == 1 || h[1] == 2 ? GPTX_ERR_UNSUPPORTED : GPTX_ERR_FORMAT,
                         "'%s': llm.c file version %d; gptx reads version 3 (fp32) and 5 (bf16)", lab,
                         (int)h[1]);
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.context_length = h[2];
    c.vocab_size = h[3];
    c.n_layer = h[4];
    c.n_head = h[5];
    c.n_embd = h[6];
    c.padded_vocab_size = h[7];
    /* llm.c's GPT-2: biased qkv, tied head, padded logits never in the softmax */
    c.qkv_bias = 1;
    c.tied_head = 1;
    c.mask_padded_logits = 1;
    c.layernorm_eps = 1e-5f;
    GPTX_TRY(gptx_ckpt_check_config(&c, lab));
    gptx_layout L;
    GPTX_TRY(gptx_layout_build(&L, &c));
    int rc = llmc_walk(src, &L, c.n_layer, dtype, NULL); /* sizes only */
    gptx_layout_free(&L);
    GPTX_TRY(rc);
    gptx_model *m = NULL;
    GPTX_TRY(gptx_model_create(&m, ctx, &c));
    float *host = malloc((m->layout.nparams ? m->layout.nparams : 1) * sizeof *host);
    rc = host ? llmc_walk(src, &m->layout, c.n_layer, dtype, host)
              : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", m->layout.nparams);
    if (rc == GPTX_OK) rc = gptx_model_restore_weights(m, host);
    free(host);
    if (rc != GPTX_OK) {
        gptx_model_destroy(m);
        return rc;
    }
    *out = m;
    return GPTX_OK;
}

int gptx_model_import_llmc(gptx_model **out, gptx_context *ctx, const char *path) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(path);
    gptx_src src;
    GPTX_TRY(gptx_src_open_file(&src, path));
    int rc = gptx_import_llmc_src(out, ctx, &src);
    gptx_src_close(&src);
    return rc;
}
