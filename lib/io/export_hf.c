/*
 * Export to a Hugging Face GPT-2 folder (the layout transformers'
 * GPT2LMHeadModel.from_pretrained reads), the mirror of import.c's reader:
 *
 *   <dir>/model.safetensors  F32 tensors named "transformer.<gptx name>";
 *                            Conv1D weights (c_attn, attn.c_proj, c_fc,
 *                            mlp.c_proj) transposed to (in, out); wte (and
 *                            an untied "lm_head.weight", unprefixed) cut to
 *                            the real vocabulary (the padded rows are
 *                            dropped); a model without qkv bias gets a zero
 *                            "attn.c_attn.bias" (GPT-2 has no bias switch);
 *                            __metadata__ {"format": "pt"} as transformers
 *                            asks.
 *   <dir>/config.json        every GPT2Config field gptx's config implies.
 *
 * Both files are written atomically (atomic_file.h), the weights first.
 * Values are read as fp32 through the model's parameter download (the
 * fp32 master weights, or the bf16 parameters converted, under any
 * precision policy). The tokenizer files are the programs' business
 * (gptx-export copies them).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomic_file.h"
#include "errors.h"
#include "export.h"
#include "handle.h"
#include "model.h"
#include "param_storage.h"
#include "foreign_layout.h"
#include "safetensors.h"

/* Every message starts with the public call's name, whichever helper found it. */
#define HF_FAIL(status, ...) gptx_fail((status), "gptx_model_export_hf", __VA_ARGS__)

int gptx_export_check_common(const gptx_model_config *c, const char *format, const char *func) {
    if (!c->mask_padded_logits && c->padded_vocab_size > c->vocab_size)
        return gptx_fail(GPTX_ERR_UNSUPPORTED, func,
                         "the model's %d padded vocabulary rows take part in its softmax "
                         "(mask_padded_logits 0); %s has no padded vocabulary, so the export "
                         "would change the model's probabilities",
                         c->padded_vocab_size - c->vocab_size, format);
    return GPTX_OK;
}

/* The writer's fetch state; each entry's src is its layout tensor (NULL: a
 * zero bias). */
typedef struct hf_src {
    const gptx_model *m;
    float *scratch; /* the largest Conv1D weight */
} hf_src;

static int hf_fetch(void *ud, const gptx_st_entry *e, float *dst) {
    const hf_src *s = ud;
    const gptx_param_desc *d = e->src;
    if (!d) { /* a bias gptx's config leaves out */
        memset(dst, 0, e->numel * sizeof *dst);
        return GPTX_OK;
    }
    gptx_context *ctx = s->m->ctx;
    const float *at = gptx_param_at(ctx, s->m->params, d->offset);
    if (!gptx_hf_is_conv1d(d->name)) /* wte / lm_head: the first V rows, contiguous */
        return gptx_param_download(ctx, dst, at, e->numel);
    GPTX_TRY(gptx_param_download(ctx, s->scratch, at, d->numel));
    /* (out, in) -> (in, out): dst[i][o] = src[o][i] */
    size_t out = (size_t)d->shape[0], in = (size_t)d->shape[1];
    for (size_t o = 0; o < out; o++)
        for (size_t i = 0; i < in; i++) dst[i * out + o] = s->scratch[o * in + i];
    return GPTX_OK;
}

/* The shortest decimal text that reads back to the same float. */
static void float_text(float x, char *buf, size_t len) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(buf, len, "%.*g", prec, (double)x);
        if (strtof(buf, NULL) == x) return;
    }
}

static int write_config(const gptx_model_config *c, const char *path) {
    char eps[32], eot[16], buf[2048];
    float_text(c->layernorm_eps, eps, sizeof eps);
    /* GPT-2's <|endoftext|>, when the vocabulary holds it */
    if (c->vocab_size > 50256) snprintf(eot, sizeof eot, "50256");
    else snprintf(eot, sizeof eot, "null");
    int n = snprintf(buf, sizeof buf,
                     "{\n"
                     "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     "  \"model_type\": \"gpt2\",\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"n_positions\": %d,\n"
                     "  \"n_ctx\": %d,\n"
                     "  \"n_embd\": %d,\n"
                     "  \"n_layer\": %d,\n"
                     "  \"n_head\": %d,\n"
                     "  \"n_inner\": %d,\n"
                     "  \"activation_function\": \"gelu_new\",\n"
                     "  \"layer_norm_epsilon\": %s,\n"
                     "  \"resid_pdrop\": 0.0,\n"
                     "  \"embd_pdrop\": 0.0,\n"
                     "  \"attn_pdrop\": 0.0,\n"
                     "  \"initializer_range\": 0.02,\n"
                     "  \"scale_attn_weights\": true,\n"
                     "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                     "  \"reorder_and_upcast_attn\": false,\n"
                     "  \"use_cache\": true,\n"
                     "  \"tie_word_embeddings\": %s,\n"
                     "  \"bos_token_id\": %s,\n"
                     "  \"eos_token_id\": %s,\n"
                     "  \"torch_dtype\": \"float32\",\n"
                     "  \"gptx_version\": \"%s\"\n"
                     "}\n",
                     c->vocab_size, c->context_length, c->context_length, c->n_embd, c->n_layer,
                     c->n_head, 4 * c->n_embd, eps, c->tied_head ? "true" : "false", eot, eot,
                     gptx_version());
    if (n < 0 || (size_t)n >= sizeof buf) /* cannot happen: every field is bounded */
        return HF_FAIL(GPTX_ERR_STATE, "config.json does not fit its buffer");
    gptx_afile f;
    GPTX_TRY(gptx_afile_open(&f, path));
    GPTX_TRY(gptx_afile_write(&f, buf, (size_t)n));
    return gptx_afile_commit(&f);
}

/* Nothing but a regular file (or a link to one, or nothing) may be where an
 * output goes: checked for both before either is written. */
static int check_target(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) return GPTX_OK; /* absent, or a dangling link: created */
    if (!S_ISREG(st.st_mode))
        return HF_FAIL(GPTX_ERR_IO, "'%s' exists and is not a regular file; the export "
                         "replaces only files", path);
    return GPTX_OK;
}

static int prepare_dir(const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return HF_FAIL(GPTX_ERR_IO, "'%s' exists and is not a folder; a Hugging Face "
                             "export is a folder", dir);
        return GPTX_OK;
    }
    if (errno != ENOENT)
        return HF_FAIL(GPTX_ERR_IO, "cannot reach folder '%s': %s", dir, strerror(errno));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return HF_FAIL(GPTX_ERR_IO, "cannot create folder '%s': %s", dir, strerror(errno));
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return HF_FAIL(GPTX_ERR_IO, "'%s' is not a folder", dir);
    return GPTX_OK;
}

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int export_hf(const gptx_model *m, const char *dir) {
    const gptx_model_config *c = &m->cfg;
    const gptx_layout *L = &m->layout;
    GPTX_TRY(gptx_export_check_common(c, "Hugging Face GPT-2", "gptx_model_export_hf"));
    if (!dir[0]) return HF_FAIL(GPTX_ERR_INVALID, "argument 'dir' is empty");
    char *st_path = join(dir, "model.safetensors"), *cfg_path = join(dir, "config.json");
    int n_extra = c->qkv_bias ? 0 : c->n_layer;
    size_t n = (size_t)L->ntensors + (size_t)n_extra;
    gptx_st_entry *e = calloc(n, sizeof *e);
    char(*names)[GPTX_NAME_MAX + 16] = calloc(n, sizeof *names);
    hf_src s = {m, NULL};
    int rc = GPTX_OK;
    if (!st_path || !cfg_path || !e || !names) {
        rc = HF_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        goto done;
    }
    size_t maxn = 1;
    for (int i = 0; i < L->ntensors; i++)
        if (gptx_hf_is_conv1d(L->tensors[i].name) && L->tensors[i].numel > maxn) maxn = L->tensors[i].numel;
    s.scratch = malloc(maxn * sizeof *s.scratch);
    if (!s.scratch) {
        rc = HF_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", maxn);
        goto done;
    }
    size_t k = 0;
    for (int i = 0; i < L->ntensors; i++) {
        const gptx_param_desc *d = &L->tensors[i];
        int is_head = !c->tied_head && i == L->lm_head;
        snprintf(names[k], sizeof names[k], "%s%s", is_head ? "" : "transformer.", d->name);
        e[k].name = names[k];
        e[k].dtype = GPTX_ST_F32;
        e[k].ndim = d->ndim;
        e[k].shape[0] = d->shape[0];
        e[k].shape[1] = d->shape[1];
        if (i == L->wte || is_head) e[k].shape[0] = c->vocab_size; /* padded rows dropped */
        if (gptx_hf_is_conv1d(d->name)) {
            e[k].shape[0] = d->shape[1];
            e[k].shape[1] = d->shape[0];
        }
        e[k].numel = (size_t)e[k].shape[0] * (size_t)(d->ndim == 2 ? e[k].shape[1] : 1);
        e[k].src = d;
        k++;
        if (!c->qkv_bias && gptx_name_ends_with(d->name, ".attn.c_attn.weight")) {
            /* HF's Conv1D always has a bias: zeros compute what gptx computes */
            snprintf(names[k], sizeof names[k], "transformer.%.*s.bias",
                     (int)(strlen(d->name) - strlen(".weight")), d->name);
            e[k].name = names[k];
            e[k].dtype = GPTX_ST_F32;
            e[k].ndim = 1;
            e[k].shape[0] = 3 * (int64_t)c->n_embd;
            e[k].numel = 3 * (size_t)c->n_embd;
            e[k].src = NULL;
            k++;
        }
    }
    static const char *const meta[] = {"format", "pt"};
    rc = prepare_dir(dir);
    if (rc == GPTX_OK) rc = check_target(st_path);
    if (rc == GPTX_OK) rc = check_target(cfg_path);
    if (rc == GPTX_OK) rc = gptx_st_write(st_path, e, k, meta, 1, hf_fetch, &s);
    if (rc == GPTX_OK) rc = write_config(c, cfg_path);
done:
    free(s.scratch);
    free(names);
    free(e);
    free(st_path);
    free(cfg_path);
    return rc;
}

int gptx_model_export_hf(const gptx_model *model, const char *dir) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(dir);
    return export_hf(model, dir);
}
