/*
 * Imports of other tools' GPT-2 files into a new model:
 *
 * Hugging Face safetensors: names "h.0.attn.c_attn.weight" (optionally under
 *   "transformer."), F32, F16 or BF16. Conv1D weights (c_attn, attn.c_proj,
 *   c_fc, mlp.c_proj) are stored (in, out) and are transposed to our
 *   (out, in); wte (V, C) fills the first V rows of the padded wte; the
 *   attention buffers "attn.bias" / "attn.masked_bias" are ignored.
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

#include "errors.h"
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

typedef struct hf_plan {
    const char *prefix; /* "" or "transformer." */
    char (*names)[GPTX_NAME_MAX + 16]; /* file name of each layout tensor */
    const gptx_st_tensor **src;        /* its tensor in the file */
    const gptx_st_tensor *lm_head;     /* "lm_head.weight" in the file, or NULL */
} hf_plan;

/* The file name and (in, out)-aware shape of layout tensor i. */
static void hf_expect(const gptx_layout *L, const gptx_model_config *c, int i, const char *prefix,
                      char *name, size_t len, int64_t shape[2]) {
    const gptx_param_desc *d = &L->tensors[i];
    int is_head = !c->tied_head && i == L->lm_head;
    snprintf(name, len, "%s%s", is_head ? "" : prefix, d->name);
    shape[0] = d->shape[0];
    shape[1] = d->shape[1];
    if (i == L->wte || is_head) shape[0] = c->vocab_size; /* unpadded in the file */
    if (gptx_hf_is_conv1d(d->name)) {
        shape[0] = d->shape[1];
        shape[1] = d->shape[0];
    }
}

static int hf_is_ignored(const char *name, const char *prefix) {
    size_t p = strlen(prefix);
    if (strncmp(name, prefix, p) != 0 || strncmp(name + p, "h.", 2) != 0) return 0;
    return gptx_name_ends_with(name, ".attn.bias") || gptx_name_ends_with(name, ".attn.masked_bias");
}

static int hf_check(const gptx_st_file *f, const gptx_layout *L, const gptx_model_config *c,
                    hf_plan *plan, int head_from_file) {
    const char *lab = f->src.label;
    for (int i = 0; i < L->ntensors; i++) {
        int64_t shape[2];
        hf_expect(L, c, i, plan->prefix, plan->names[i], sizeof plan->names[i], shape);
        int is_head = !c->tied_head && i == L->lm_head;
        const gptx_st_tensor *t = is_head && !head_from_file ? NULL : gptx_st_find(f, plan->names[i]);
        plan->src[i] = t;
        if (is_head && !head_from_file) continue; /* copied from wte */
        if (!t)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no tensor '%s' (a GPT-2 with %d layers needs it)",
                             lab, plan->names[i], c->n_layer);
        if (t->dtype == GPTX_ST_OTHER)
            return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                             "'%s': tensor '%s' has dtype %s; import reads F32, F16 and BF16", lab,
                             t->name, t->dtype_name);
        int nd = L->tensors[i].ndim;
        int same = t->ndim == nd && t->shape[0] == shape[0] && (nd == 1 || t->shape[1] == shape[1]);
        if (!same) {
            char got[160], want[64];
            gptx_st_shape_str(t->shape, t->ndim, got, sizeof got);
            gptx_st_shape_str(shape, nd, want, sizeof want);
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has shape %s; expected %s%s", lab,
                             t->name, got, want, gptx_hf_is_conv1d(t->name) ? " (Conv1D: in, out)" : "");
        }
    }
    if (plan->lm_head && c->tied_head) {
        const gptx_st_tensor *t = plan->lm_head;
        if (t->dtype == GPTX_ST_OTHER || t->ndim != 2 || t->shape[0] != c->vocab_size ||
            t->shape[1] != c->n_embd)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor 'lm_head.weight' is not (%d, %d) float",
                             lab, c->vocab_size, c->n_embd);
    }
    /* anything else is not part of a GPT-2 */
    for (size_t k = 0; k < f->ntensors; k++) {
        const char *n = f->tensors[k].name;
        if (hf_is_ignored(n, plan->prefix)) continue;
        if (strcmp(n, "lm_head.weight") == 0 && plan->lm_head) continue;
        int known = 0;
        for (int i = 0; i < L->ntensors && !known; i++) known = strcmp(n, plan->names[i]) == 0;
        if (!known)
            return GPTX_FAIL(GPTX_ERR_FORMAT,
                             "'%s' holds tensor '%.80s', which is not part of a GPT-2 with %d layers",
                             lab, n, c->n_layer);
    }
    return GPTX_OK;
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
    size_t VC = (size_t)c->vocab_size * (size_t)c->n_embd;
    for (int i = 0; i < L->ntensors && rc == GPTX_OK; i++) {
        const gptx_param_desc *d = &L->tensors[i];
        const gptx_st_tensor *t = plan->src[i];
        float *dst = host + d->offset;
        if (!t) { /* untied head absent from the file: starts as a copy of wte */
            memcpy(dst, host + L->tensors[L->wte].offset, d->numel * sizeof *dst);
            continue;
        }
        if (gptx_hf_is_conv1d(d->name)) {
            rc = gptx_st_read_f32(f, t, scratch, d->numel);
            if (rc != GPTX_OK) break;
            /* (in, out) -> (out, in): dst[o][i] = src[i][o] */
            size_t out = (size_t)d->shape[0], in = (size_t)d->shape[1];
            for (size_t r = 0; r < in; r++)
                for (size_t col = 0; col < out; col++) dst[col * in + r] = scratch[r * out + col];
        } else if (i == L->wte || i == L->lm_head) {
            rc = gptx_st_read_f32(f, t, dst, VC); /* rows [V, Vp) stay 0 */
        } else {
            rc = gptx_st_read_f32(f, t, dst, d->numel);
        }
        if (rc == GPTX_OK) rc = check_finite(f->src.label, t->name, dst, d->numel);
    }
    /* a tied model may still carry lm_head.weight: it must be wte */
    if (rc == GPTX_OK && plan->lm_head && c->tied_head) {
        rc = gptx_st_read_f32(f, plan->lm_head, scratch, VC);
        if (rc == GPTX_OK && memcmp(scratch, host + L->tensors[L->wte].offset, VC * sizeof(float)))
            rc = GPTX_FAIL(GPTX_ERR_MISMATCH, "'%s': lm_head.weight differs from wte.weight; import "
                           "with cfg.tied_head = 0 to keep both", f->src.label);
    }
    free(scratch);
    return rc;
}

int gptx_import_hf_st(gptx_model **out, gptx_context *ctx, const gptx_st_file *f,
                      const gptx_model_config *cfg_in) {
    const char *lab = f->src.label;
    gptx_model_config c;
    gptx_model_config_init(&c);
    if (cfg_in)
        GPTX_TRY(gptx_struct_read(&c, cfg_in, &gptx_desc_model_config, "gptx_model_import_hf",
                                  "cfg"));
    hf_plan plan = {"", NULL, NULL, gptx_st_find(f, "lm_head.weight")};
    if (gptx_st_find(f, "transformer.wte.weight")) plan.prefix = "transformer.";
    char name[GPTX_NAME_MAX + 16];
    snprintf(name, sizeof name, "%swte.weight", plan.prefix);
    const gptx_st_tensor *wte = gptx_st_find(f, name);
    snprintf(name, sizeof name, "%swpe.weight", plan.prefix);
    const gptx_st_tensor *wpe = gptx_st_find(f, name);
    if (!wte || !wpe)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no wte.weight and wpe.weight: not a GPT-2 file", lab);
    if (wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] ||
        wte->shape[0] > INT32_MAX || wpe->shape[0] > INT32_MAX || wte->shape[1] > INT32_MAX)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': wte.weight and wpe.weight must be (V, C) and (T, C)",
                         lab);
    int n_layer = 0;
    for (;; n_layer++) {
        snprintf(name, sizeof name, "%sh.%d.ln_1.weight", plan.prefix, n_layer);
        if (!gptx_st_find(f, name) || n_layer > 4096) break;
    }
    snprintf(name, sizeof name, "%sh.0.attn.c_attn.bias", plan.prefix);
    /* the file's shapes give the sizes; cfg gives what it cannot */
    c.vocab_size = (int)wte->shape[0];
    c.context_length = (int)wpe->shape[0];
    c.n_embd = (int)wte->shape[1];
    c.n_layer = n_layer;
    c.qkv_bias = gptx_st_find(f, name) != NULL;
    if (c.padded_vocab_size == 0) c.padded_vocab_size = c.vocab_size;
    if (n_layer == 0) return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no layer h.0", lab);
    if (c.padded_vocab_size < c.vocab_size)
        return GPTX_FAIL(GPTX_ERR_INVALID, "cfg.padded_vocab_size is %d; the file's vocabulary is %d",
                         c.padded_vocab_size, c.vocab_size);
    if (c.n_head <= 0 || c.n_embd % c.n_head != 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "cfg.n_head is %d; must divide the file's n_embd %d",
                         c.n_head, c.n_embd);
    /* untied without lm_head.weight in the file: the head starts as a copy
     * of wte (untying a pretrained model) */
    GPTX_TRY(gptx_ckpt_check_config(&c, lab));

    gptx_layout L;
    GPTX_TRY(gptx_layout_build(&L, &c));
    plan.names = calloc((size_t)L.ntensors, sizeof *plan.names);
    plan.src = calloc((size_t)L.ntensors, sizeof *plan.src);
    int rc = plan.names && plan.src ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) rc = hf_check(f, &L, &c, &plan, plan.lm_head != NULL);
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

int gptx_model_import_hf(gptx_model **out, gptx_context *ctx, const char *path,
                         const gptx_model_config *cfg) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(path);
    gptx_st_file f;
    GPTX_TRY(gptx_st_open(&f, path));
    int rc = gptx_import_hf_st(out, ctx, &f, cfg);
    gptx_st_close(&f);
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
