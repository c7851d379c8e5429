/*
 * gptx checkpoints: safetensors files with canonical tensor names and gptx
 * metadata. "model" files hold the weights; "training" files add the AdamW
 * moments as "optimizer.m.<name>" / "optimizer.v.<name>" and the positions of
 * the optimizer, schedule, sampler and data loaders in __metadata__. A
 * sharded (ZeRO-1) optimizer's moments are gathered to full vectors when
 * saving and sliced when loading, so its files are the same as any other.
 *
 * Loading validates everything (structure, metadata, names, dtypes, shapes,
 * finiteness) and reads all data into host buffers before it changes any
 * object, so a failing load leaves the model and the train state untouched.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_internal.h"
#include "errors.h"
#include "model.h"
#include "optimizer.h"
#include "param_storage.h"
#include "abi_struct.h"
#include "safetensors.h"
#include "checksum.h"

#define FORMAT_NAME "gptx"
#define FORMAT_VERSION "1"
#define PREFIX_M "optimizer.m."
#define PREFIX_V "optimizer.v."

/* ---- metadata --------------------------------------------------------------- */

enum { META_MAX = 64, META_KEY = 32, META_VAL = 48 };

typedef struct meta_list {
    char key[META_MAX][META_KEY];
    char val[META_MAX][META_VAL];
    const char *kv[2 * META_MAX];
    size_t n;
} meta_list;

static void meta_add(meta_list *l, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void meta_add(meta_list *l, const char *key, const char *fmt, ...) {
    if (l->n >= META_MAX) return; /* cannot happen: the key set is fixed and small */
    snprintf(l->key[l->n], META_KEY, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->val[l->n], META_VAL, fmt, ap);
    va_end(ap);
    l->kv[2 * l->n] = l->key[l->n];
    l->kv[2 * l->n + 1] = l->val[l->n];
    l->n++;
}

static void meta_add_config(meta_list *l, const gptx_model_config *c) {
    meta_add(l, "vocab_size", "%d", c->vocab_size);
    meta_add(l, "padded_vocab_size", "%d", c->padded_vocab_size);
    meta_add(l, "context_length", "%d", c->context_length);
    meta_add(l, "n_layer", "%d", c->n_layer);
    meta_add(l, "n_head", "%d", c->n_head);
    meta_add(l, "n_embd", "%d", c->n_embd);
    meta_add(l, "qkv_bias", "%d", c->qkv_bias);
    meta_add(l, "tied_head", "%d", c->tied_head);
    meta_add(l, "mask_padded_logits", "%d", c->mask_padded_logits);
    meta_add(l, "layernorm_eps", "%.9g", (double)c->layernorm_eps); /* round-trips a float */
}

static const char *decay_policy_name(int p) {
    return p == GPTX_DECAY_ALL ? "all" : p == GPTX_DECAY_NONE ? "none" : "matrices";
}

/* Strict parsers: the whole string must be the number. */
static int meta_get(const gptx_st_file *f, const char *key, const char **out) {
    *out = gptx_st_meta(f, key);
    if (!*out)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': metadata key '%s' is missing", f->src.label, key);
    return GPTX_OK;
}

static int meta_i64(const gptx_st_file *f, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const char *s;
    GPTX_TRY(meta_get(f, key, &s));
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': metadata %s is \"%.40s\"; expected an integer in "
                         "[%lld, %lld]", f->src.label, key, s, (long long)lo, (long long)hi);
    *out = v;
    return GPTX_OK;
}

static int meta_int(const gptx_st_file *f, const char *key, int lo, int hi, int *out) {
    int64_t v = 0;
    GPTX_TRY(meta_i64(f, key, lo, hi, &v));
    *out = (int)v;
    return GPTX_OK;
}

static int meta_u64(const gptx_st_file *f, const char *key, uint64_t *out) {
    const char *s;
    GPTX_TRY(meta_get(f, key, &s));
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': metadata %s is \"%.40s\"; expected an unsigned "
                         "integer", f->src.label, key, s);
    *out = v;
    return GPTX_OK;
}

static int meta_float(const gptx_st_file *f, const char *key, float *out) {
    const char *s;
    GPTX_TRY(meta_get(f, key, &s));
    char *end = NULL;
    float v = strtof(s, &end);
    if (end == s || *end || !isfinite(v))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': metadata %s is \"%.40s\"; expected a finite number",
                         f->src.label, key, s);
    *out = v;
    return GPTX_OK;
}

static int meta_has(const gptx_st_file *f, const char *key) { return gptx_st_meta(f, key) != NULL; }

/* ---- the file's identity and model config ------------------------------------ */

static int read_precision(const gptx_st_file *f, int *precision);

/* Files since 0.3 carry checksums (checksum.h): of the metadata, checked
 * here, and of every tensor, checked as it is read (read_group). */
static int has_checksums(const gptx_st_file *f) {
    return gptx_st_meta(f, GPTX_CHECKSUM_ALG_KEY) != NULL && gptx_checksums_verified();
}

static int parse_sum(const char *s, uint64_t *out) {
    char *end = NULL;
    if (!s || strlen(s) != 16) return 0;
    errno = 0;
    *out = strtoull(s, &end, 16);
    return !errno && end && *end == '\0';
}

static int check_meta_checksum(const gptx_st_file *f) {
    const char *alg = gptx_st_meta(f, GPTX_CHECKSUM_ALG_KEY);
    if (!alg) return GPTX_OK; /* written before checksums existed */
    if (strcmp(alg, GPTX_CHECKSUM_NAME) != 0)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': checksum_algorithm is \"%.24s\"; this library "
                         "knows " GPTX_CHECKSUM_NAME " (a file from a newer gptx, or damaged)",
                         f->src.label, alg);
    if (!gptx_checksums_verified()) return GPTX_OK;
    uint64_t want = 0, got = 0;
    if (!parse_sum(gptx_st_meta(f, GPTX_CHECKSUM_META_KEY), &want))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': metadata " GPTX_CHECKSUM_META_KEY " is missing or not 16 "
                         "hex digits (the file is damaged)", f->src.label);
    GPTX_TRY(gptx_st_meta_checksum(f, GPTX_CHECKSUM_META_KEY, &got));
    if (got != want)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': the metadata does not match its checksum (the "
                         "file is damaged: a disk or transfer error, or an edit)", f->src.label);
    return GPTX_OK;
}

static int check_identity(const gptx_st_file *f, int *is_training) {
    const char *L = f->src.label, *s;
    s = gptx_st_meta(f, "format");
    if (!s || strcmp(s, FORMAT_NAME) != 0)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' is not a gptx checkpoint (__metadata__.format is %s%s%s); Hugging "
                         "Face files load with gptx_model_import_hf", L, s ? "\"" : "",
                         s ? s : "missing", s ? "\"" : "");
    GPTX_TRY(meta_get(f, "format_version", &s));
    if (strcmp(s, FORMAT_VERSION) != 0)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': format_version is \"%.20s\"; this library reads "
                         FORMAT_VERSION, L, s);
    GPTX_TRY(meta_get(f, "dtype", &s));
    if (strcmp(s, "float32") != 0)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "'%s': dtype is \"%.20s\"; this library reads float32",
                         L, s);
    GPTX_TRY(meta_get(f, "kind", &s));
    if (strcmp(s, "model") != 0 && strcmp(s, "training") != 0)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': kind is \"%.20s\"; expected \"model\" or \"training\"",
                         L, s);
    *is_training = strcmp(s, "training") == 0;
    int precision;
    GPTX_TRY(read_precision(f, &precision));
    return check_meta_checksum(f);
}

/* The policy the file was written under: its "precision" key, fp32 for
 * files from before the key existed (everything was fp32 then). */
static int read_precision(const gptx_st_file *f, int *precision) {
    const char *s = gptx_st_meta(f, "precision");
    *precision = GPTX_PRECISION_FP32;
    if (!s) return GPTX_OK;
    int p = gptx_precision_from_name(s);
    if (p <= GPTX_PRECISION_DEFAULT) {
        gptx_clear_error();
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s': metadata precision is \"%.20s\"; expected fp32, tf32, bf16 or "
                         "bf16_pure", f->src.label, s);
    }
    *precision = p;
    return GPTX_OK;
}

int gptx_checkpoint_precision(const char *path, int *precision) {
    GPTX_CHECK_NULL(path);
    GPTX_CHECK_NULL(precision);
    gptx_st_file f;
    GPTX_TRY(gptx_st_open(&f, path));
    int is_training = 0, p = GPTX_PRECISION_FP32;
    int rc = check_identity(&f, &is_training);
    if (rc == GPTX_OK) rc = read_precision(&f, &p);
    gptx_st_close(&f);
    if (rc == GPTX_OK) *precision = p;
    return rc;
}

int gptx_ckpt_check_config(const gptx_model_config *c, const char *label) {
    const char *bad = NULL;
    long long v = 0;
#define BAD_IF(cond, field)                                                    \
    if (!bad && (cond)) {                                                      \
        bad = #field;                                                          \
        v = c->field;                                                          \
    }
    BAD_IF(c->vocab_size <= 0, vocab_size);
    BAD_IF(c->padded_vocab_size < c->vocab_size, padded_vocab_size);
    BAD_IF(c->context_length <= 0 || c->context_length > (1 << 24), context_length);
    BAD_IF(c->n_layer <= 0 || c->n_layer > 4096, n_layer);
    BAD_IF(c->n_head <= 0, n_head);
    BAD_IF(c->n_embd <= 0 || c->n_embd > (1 << 20) / 4 || c->n_embd % c->n_head != 0, n_embd);
    BAD_IF(c->qkv_bias != 0 && c->qkv_bias != 1, qkv_bias);
    BAD_IF(c->tied_head != 0 && c->tied_head != 1, tied_head);
    BAD_IF(c->mask_padded_logits != 0 && c->mask_padded_logits != 1, mask_padded_logits);
#undef BAD_IF
    if (bad)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': the model config in the file is invalid: %s = %lld",
                         label, bad, v);
    if (!(c->layernorm_eps > 0.0f) || !isfinite(c->layernorm_eps))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': the model config in the file is invalid: "
                         "layernorm_eps = %g", label, (double)c->layernorm_eps);
    return GPTX_OK;
}

static int read_config(const gptx_st_file *f, gptx_model_config *c) {
    gptx_model_config_init(c);
    GPTX_TRY(meta_int(f, "vocab_size", 1, INT32_MAX, &c->vocab_size));
    GPTX_TRY(meta_int(f, "padded_vocab_size", 1, INT32_MAX, &c->padded_vocab_size));
    GPTX_TRY(meta_int(f, "context_length", 1, INT32_MAX, &c->context_length));
    GPTX_TRY(meta_int(f, "n_layer", 1, INT32_MAX, &c->n_layer));
    GPTX_TRY(meta_int(f, "n_head", 1, INT32_MAX, &c->n_head));
    GPTX_TRY(meta_int(f, "n_embd", 1, INT32_MAX, &c->n_embd));
    GPTX_TRY(meta_int(f, "qkv_bias", 0, 1, &c->qkv_bias));
    GPTX_TRY(meta_int(f, "tied_head", 0, 1, &c->tied_head));
    GPTX_TRY(meta_int(f, "mask_padded_logits", 0, 1, &c->mask_padded_logits));
    GPTX_TRY(meta_float(f, "layernorm_eps", &c->layernorm_eps));
    return gptx_ckpt_check_config(c, f->src.label);
}

/* A valid file written for another model is a mismatch, not corruption. */
static int compare_config(const gptx_st_file *f, const gptx_model_config *want) {
    gptx_model_config c;
    GPTX_TRY(read_config(f, &c));
    const struct { const char *name; int file, model; } fields[] = {
        {"vocab_size", c.vocab_size, want->vocab_size},
        {"padded_vocab_size", c.padded_vocab_size, want->padded_vocab_size},
        {"context_length", c.context_length, want->context_length},
        {"n_layer", c.n_layer, want->n_layer},
        {"n_head", c.n_head, want->n_head},
        {"n_embd", c.n_embd, want->n_embd},
        {"qkv_bias", c.qkv_bias, want->qkv_bias},
        {"tied_head", c.tied_head, want->tied_head},
        {"mask_padded_logits", c.mask_padded_logits, want->mask_padded_logits},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (fields[i].file != fields[i].model)
            return GPTX_FAIL(GPTX_ERR_MISMATCH, "'%s' was saved with %s = %d; the model has %d",
                             f->src.label, fields[i].name, fields[i].file, fields[i].model);
    if (c.layernorm_eps != want->layernorm_eps)
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "'%s' was saved with layernorm_eps = %.9g; the model has %.9g",
                         f->src.label, (double)c.layernorm_eps, (double)want->layernorm_eps);
    return GPTX_OK;
}

/* ---- tensors ------------------------------------------------------------------ */

typedef struct tensor_group {
    const char *prefix; /* "" for the weights, PREFIX_M / PREFIX_V for the moments */
    float *host;        /* destination, nparams floats (NULL: check only) */
} tensor_group;

static void group_name(char *buf, size_t len, const char *prefix, const char *name) {
    snprintf(buf, len, "%s%s", prefix, name);
}

/* Every expected tensor is present with dtype F32 and the model's shape, and
 * the file holds nothing else. Nothing is read. */
static int check_tensor_set(const gptx_st_file *f, const gptx_layout *L, int with_moments) {
    const char *lab = f->src.label;
    const char *prefixes[3] = {"", PREFIX_M, PREFIX_V};
    int ngroups = with_moments ? 3 : 1;
    size_t missing = 0;
    char first_missing[GPTX_NAME_MAX + 16] = "";
    for (int g = 0; g < ngroups; g++) {
        for (int i = 0; i < L->ntensors; i++) {
            const gptx_param_desc *d = &L->tensors[i];
            char name[GPTX_NAME_MAX + 16];
            group_name(name, sizeof name, prefixes[g], d->name);
            const gptx_st_tensor *t = gptx_st_find(f, name);
            if (!t) {
                if (!missing++) snprintf(first_missing, sizeof first_missing, "%s", name);
                continue;
            }
            if (t->dtype != GPTX_ST_F32)
                return GPTX_FAIL(t->dtype == GPTX_ST_OTHER ? GPTX_ERR_UNSUPPORTED : GPTX_ERR_FORMAT,
                                 "'%s': tensor '%s' has dtype %s; gptx checkpoints hold F32 only",
                                 lab, name, t->dtype_name);
            int same = t->ndim == d->ndim;
            for (int k = 0; same && k < d->ndim; k++) same = t->shape[k] == d->shape[k];
            if (!same) {
                char got[160], want[64];
                gptx_st_shape_str(t->shape, t->ndim, got, sizeof got);
                gptx_st_shape_str(d->shape, d->ndim, want, sizeof want);
                return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has shape %s; the model needs %s",
                                 lab, name, got, want);
            }
        }
    }
    if (missing)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no tensor '%s' (%zu expected tensor%s missing)",
                         lab, first_missing, missing, missing == 1 ? "" : "s");
    size_t expected = (size_t)ngroups * (size_t)L->ntensors;
    if (f->ntensors != expected) {
        /* find one to name: a tensor that is not the model's (under a group prefix) */
        for (size_t i = 0; i < f->ntensors; i++) {
            const char *n = f->tensors[i].name, *base = n;
            if (with_moments && strncmp(n, PREFIX_M, strlen(PREFIX_M)) == 0) base = n + strlen(PREFIX_M);
            else if (with_moments && strncmp(n, PREFIX_V, strlen(PREFIX_V)) == 0) base = n + strlen(PREFIX_V);
            if (gptx_layout_find(L, base) < 0)
                return GPTX_FAIL(GPTX_ERR_FORMAT,
                                 "'%s' holds unexpected tensor '%.80s' (%zu tensors, the model needs "
                                 "%zu)", lab, n, f->ntensors, expected);
        }
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' holds %zu tensors; expected %zu", lab, f->ntensors,
                         expected);
    }
    return GPTX_OK;
}

/* Reads one group into host memory at the layout's offsets; all values must be finite. */
static int read_group(const gptx_st_file *f, const gptx_layout *L, const tensor_group *g) {
    for (int i = 0; i < L->ntensors; i++) {
        const gptx_param_desc *d = &L->tensors[i];
        char name[GPTX_NAME_MAX + 16];
        group_name(name, sizeof name, g->prefix, d->name);
        const gptx_st_tensor *t = gptx_st_find(f, name);
        if (!t) return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has no tensor '%s'", f->src.label, name);
        float *dst = g->host + d->offset;
        GPTX_TRY(gptx_st_read_f32(f, t, dst, d->numel));
        if (has_checksums(f)) {
            char key[GPTX_NAME_MAX + 32];
            snprintf(key, sizeof key, GPTX_CHECKSUM_PREFIX "%s", name);
            uint64_t want = 0;
            if (!parse_sum(gptx_st_meta(f, key), &want))
                return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': metadata %s is missing or not 16 hex "
                                 "digits (the file is damaged)", f->src.label, key);
            if (gptx_checksum_f32(dst, d->numel) != want)
                return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' does not match its checksum "
                                 "(the file is damaged: a disk or transfer error); "
                                 "GPTX_SKIP_CHECKSUMS=1 loads it anyway", f->src.label, name);
        }
        for (size_t k = 0; k < d->numel; k++)
            if (!isfinite(dst[k]))
                return GPTX_FAIL(GPTX_ERR_NON_FINITE, "'%s': tensor '%s' element %zu is %g",
                                 f->src.label, name, k, (double)dst[k]);
    }
    return GPTX_OK;
}

static float *host_alloc(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }

/* ---- training metadata --------------------------------------------------------- */

typedef struct train_meta {
    int has_optimizer;
    int64_t opt_step;
    gptx_adamw_options opts;
    int has_schedule;
    int64_t lr_schedule_step, tokens_seen;
    int has_sampler;
    gptx_sampler_state sampler;
    int has_loader[2];
    gptx_dataloader_state loader[2];
} train_meta;

static const char *const loader_key[2] = {"train_loader", "val_loader"};

static int read_loader(const gptx_st_file *f, const char *prefix, gptx_dataloader_state *s) {
    char k[META_KEY];
    snprintf(k, sizeof k, "%s.epoch", prefix);
    GPTX_TRY(meta_i64(f, k, 0, INT64_MAX, &s->epoch));
    snprintf(k, sizeof k, "%s.batch", prefix);
    GPTX_TRY(meta_i64(f, k, 0, INT64_MAX, &s->batch));
    snprintf(k, sizeof k, "%s.seed", prefix);
    return meta_u64(f, k, &s->seed);
}

/* Nothing recorded: no optimizer, schedule, sampler or loader positions. */
static void train_meta_clear(train_meta *tm) {
    memset(tm, 0, sizeof *tm);
    gptx_sampler_state_init(&tm->sampler);
    for (int i = 0; i < 2; i++) gptx_dataloader_state_init(&tm->loader[i]);
}

static int read_train_meta(const gptx_st_file *f, train_meta *tm) {
    train_meta_clear(tm);
    const char *L = f->src.label;
    tm->has_schedule = meta_has(f, "lr_schedule_step");
    if (tm->has_schedule) {
        /* counts: a negative one is a damaged or hand-edited file */
        GPTX_TRY(meta_i64(f, "lr_schedule_step", 0, INT64_MAX, &tm->lr_schedule_step));
        GPTX_TRY(meta_i64(f, "tokens_seen", 0, INT64_MAX, &tm->tokens_seen));
    }
    const char *opt = gptx_st_meta(f, "optimizer");
    if (opt) {
        if (strcmp(opt, "adamw") != 0)
            return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "'%s': optimizer is \"%.20s\"; expected \"adamw\"",
                             L, opt);
        tm->has_optimizer = 1;
        gptx_adamw_options *o = &tm->opts;
        gptx_adamw_options_init(o);
        GPTX_TRY(meta_i64(f, "optimizer.step", 0, INT64_MAX, &tm->opt_step));
        GPTX_TRY(meta_float(f, "optimizer.lr", &o->lr));
        GPTX_TRY(meta_float(f, "optimizer.beta1", &o->beta1));
        GPTX_TRY(meta_float(f, "optimizer.beta2", &o->beta2));
        GPTX_TRY(meta_float(f, "optimizer.eps", &o->eps));
        GPTX_TRY(meta_float(f, "optimizer.weight_decay", &o->weight_decay));
        GPTX_TRY(meta_float(f, "optimizer.grad_clip", &o->grad_clip));
        /* absent in files from before it was recorded: 0, the default */
        if (meta_has(f, "optimizer.rounding_seed"))
            GPTX_TRY(meta_u64(f, "optimizer.rounding_seed", &o->rounding_seed));
        const char *p;
        GPTX_TRY(meta_get(f, "optimizer.decay_policy", &p));
        if (strcmp(p, "matrices") == 0) o->decay_policy = GPTX_DECAY_MATRICES;
        else if (strcmp(p, "all") == 0) o->decay_policy = GPTX_DECAY_ALL;
        else if (strcmp(p, "none") == 0) o->decay_policy = GPTX_DECAY_NONE;
        else
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': optimizer.decay_policy is \"%.20s\"; expected "
                             "matrices, all or none", L, p);
        /* the same limits gptx_optimizer_create enforces */
        if (!(o->lr >= 0.0f && o->lr <= GPTX_ADAMW_LR_MAX) || !(o->beta1 >= 0.0f && o->beta1 < 1.0f) ||
            !(o->beta2 >= 0.0f && o->beta2 < 1.0f) || !(o->eps > 0.0f) ||
            !(o->weight_decay >= 0.0f) || !(o->grad_clip >= 0.0f))
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': the optimizer hyperparameters are out of range "
                             "(lr %g, betas %g %g, eps %g, weight_decay %g, grad_clip %g)", L,
                             (double)o->lr, (double)o->beta1, (double)o->beta2, (double)o->eps,
                             (double)o->weight_decay, (double)o->grad_clip);
    }
    tm->has_sampler = meta_has(f, "sampler.seed");
    if (tm->has_sampler) {
        GPTX_TRY(meta_u64(f, "sampler.seed", &tm->sampler.seed));
        GPTX_TRY(meta_u64(f, "sampler.stream", &tm->sampler.stream));
        GPTX_TRY(meta_u64(f, "sampler.counter", &tm->sampler.counter));
    }
    for (int i = 0; i < 2; i++) {
        char k[META_KEY];
        snprintf(k, sizeof k, "%s.epoch", loader_key[i]);
        tm->has_loader[i] = meta_has(f, k);
        if (tm->has_loader[i]) GPTX_TRY(read_loader(f, loader_key[i], &tm->loader[i]));
    }
    return GPTX_OK;
}

/* ---- saving ---------------------------------------------------------------------- */

typedef struct save_ctx {
    gptx_context *ctx;
    const float *host[2]; /* gathered moments of a sharded optimizer (host), or NULL */
    size_t nparams;
} save_ctx;

static int in_host(const save_ctx *sc, const float *p) {
    for (int k = 0; k < 2; k++)
        if (sc->host[k] && p >= sc->host[k] && p < sc->host[k] + sc->nparams) return 1;
    return 0;
}

/* entry->src is a device pointer into params or a moment buffer, or a
 * pointer into the gathered host moments */
static int fetch_device(void *ud, const gptx_st_entry *e, float *dst) {
    const save_ctx *sc = ud;
    if (in_host(sc, (const float *)e->src)) {
        memcpy(dst, e->src, e->numel * sizeof(float));
        return GPTX_OK;
    }
    return gptx_param_download(sc->ctx, dst, (const float *)e->src, e->numel);
}

typedef struct train_view {
    gptx_optimizer *optimizer;
    const float *moments[2]; /* full host copies of a sharded optimizer's m, v; else NULL */
    gptx_sampler *sampler;
    gptx_dataloader *loader[2];
    int64_t lr_schedule_step, tokens_seen;
    const char *user_metadata; /* checked by check_user_metadata, or NULL */
} train_view;

#define USER_KEY "user"

/* The application's string must fit the format: JSON strings are UTF-8. */
static int check_user_metadata(const char *s) {
    if (!s) return GPTX_OK;
    size_t n = strnlen(s, (size_t)GPTX_USER_METADATA_MAX + 1);
    if (n > GPTX_USER_METADATA_MAX)
        return GPTX_FAIL(GPTX_ERR_INVALID, "st->user_metadata is longer than "
                         "GPTX_USER_METADATA_MAX (%u bytes)", (unsigned)GPTX_USER_METADATA_MAX);
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) { /* UTF-8: a lead byte, then its continuation bytes */
        int more = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1 : (*p & 0xF0) == 0xE0 ? 2
                   : (*p & 0xF8) == 0xF0 ? 3 : -1;
        if (more < 0 || (more == 1 && *p < 0xC2) || end - p <= more)
            return GPTX_FAIL(GPTX_ERR_INVALID, "st->user_metadata is not valid UTF-8 (byte %zu)",
                             (size_t)(p - (const unsigned char *)s));
        for (int k = 1; k <= more; k++)
            if ((p[k] & 0xC0) != 0x80)
                return GPTX_FAIL(GPTX_ERR_INVALID, "st->user_metadata is not valid UTF-8 "
                                 "(byte %zu)", (size_t)(p + k - (const unsigned char *)s));
        p += more + 1;
    }
    return GPTX_OK;
}

static int save_file(const gptx_model *m, const train_view *tv, const char *path) {
    const gptx_layout *L = &m->layout;
    meta_list *meta = calloc(1, sizeof *meta);
    int ngroups = tv && tv->optimizer ? 3 : 1;
    size_t n = (size_t)ngroups * (size_t)L->ntensors;
    gptx_st_entry *e = calloc(n, sizeof *e);
    char(*names)[GPTX_NAME_MAX + 16] = calloc(n, sizeof *names);
    int rc = GPTX_OK;
    if (!meta || !e || !names) {
        rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        goto done;
    }
    meta_add(meta, "format", FORMAT_NAME);
    meta_add(meta, "format_version", FORMAT_VERSION);
    meta_add(meta, "gptx_version", "%s", gptx_version());
    meta_add(meta, "kind", "%s", tv ? "training" : "model");
    meta_add(meta, "dtype", "float32");
    /* values are always written as fp32; this says what precision they had */
    meta_add(meta, "precision", "%s", gptx_precision_name(m->ctx->precision));
    if (m->ctx->precision == GPTX_PRECISION_BF16_PURE)
        meta_add(meta, "stochastic_rounding", "%d", m->ctx->opts.stochastic_rounding);
    meta_add_config(meta, &m->cfg);
    if (tv) {
        meta_add(meta, "lr_schedule_step", "%" PRId64, tv->lr_schedule_step);
        meta_add(meta, "tokens_seen", "%" PRId64, tv->tokens_seen);
        if (tv->optimizer) {
            const gptx_adamw_options *o = &tv->optimizer->opts;
            meta_add(meta, "optimizer", "adamw");
            meta_add(meta, "optimizer.step", "%" PRId64, tv->optimizer->step);
            meta_add(meta, "optimizer.lr", "%.9g", (double)o->lr);
            meta_add(meta, "optimizer.beta1", "%.9g", (double)o->beta1);
            meta_add(meta, "optimizer.beta2", "%.9g", (double)o->beta2);
            meta_add(meta, "optimizer.eps", "%.9g", (double)o->eps);
            meta_add(meta, "optimizer.weight_decay", "%.9g", (double)o->weight_decay);
            meta_add(meta, "optimizer.grad_clip", "%.9g", (double)o->grad_clip);
            meta_add(meta, "optimizer.decay_policy", "%s", decay_policy_name(o->decay_policy));
            meta_add(meta, "optimizer.rounding_seed", "%" PRIu64, o->rounding_seed);
        }
        if (tv->sampler) {
            gptx_sampler_state s;
            gptx_sampler_state_init(&s);
            rc = gptx_sampler_get_state(tv->sampler, &s);
            if (rc != GPTX_OK) goto done;
            meta_add(meta, "sampler.seed", "%" PRIu64, s.seed);
            meta_add(meta, "sampler.stream", "%" PRIu64, s.stream);
            meta_add(meta, "sampler.counter", "%" PRIu64, s.counter);
        }
        for (int i = 0; i < 2; i++) {
            if (!tv->loader[i]) continue;
            gptx_dataloader_state s;
            gptx_dataloader_state_init(&s);
            rc = gptx_dataloader_get_state(tv->loader[i], &s);
            if (rc != GPTX_OK) goto done;
            char k[META_KEY];
            snprintf(k, sizeof k, "%s.epoch", loader_key[i]);
            meta_add(meta, k, "%" PRId64, s.epoch);
            snprintf(k, sizeof k, "%s.batch", loader_key[i]);
            meta_add(meta, k, "%" PRId64, s.batch);
            snprintf(k, sizeof k, "%s.seed", loader_key[i]);
            meta_add(meta, k, "%" PRIu64, s.seed);
        }
        if (tv->user_metadata) { /* verbatim: no copy into a slot */
            if (meta->n >= META_MAX) { /* cannot happen: the key set is fixed and small */
                rc = GPTX_FAIL(GPTX_ERR_STATE, "too many metadata keys for user_metadata");
                goto done;
            }
            meta->kv[2 * meta->n] = USER_KEY;
            meta->kv[2 * meta->n + 1] = tv->user_metadata;
            meta->n++;
        }
    }
    const char *prefixes[3] = {"", PREFIX_M, PREFIX_V};
    for (int g = 0; g < ngroups; g++) {
        /* gathered host moments exist only for sharded optimizers, which need fp32
         * parameters (comm_zero.c), so gptx_param_at's element size fits them too */
        float *base = g == 0 ? m->params : tv->moments[g - 1] ? (float *)tv->moments[g - 1]
                                                 : g == 1 ? tv->optimizer->m : tv->optimizer->v;
        for (int i = 0; i < L->ntensors; i++) {
            const gptx_param_desc *d = &L->tensors[i];
            size_t k = (size_t)g * (size_t)L->ntensors + (size_t)i;
            group_name(names[k], sizeof names[k], prefixes[g], d->name);
            e[k].name = names[k];
            e[k].dtype = GPTX_ST_F32;
            e[k].ndim = d->ndim;
            for (int j = 0; j < d->ndim; j++) e[k].shape[j] = d->shape[j];
            e[k].numel = d->numel;
            e[k].src = gptx_param_at(m->ctx, base, d->offset);
        }
    }
    save_ctx sc = {m->ctx, {tv ? tv->moments[0] : NULL, tv ? tv->moments[1] : NULL}, L->nparams};
    /* checksums (checksum.h) summed while the values are written */
    rc = gptx_st_write_summed(path, e, n, meta->kv, meta->n, fetch_device, &sc);
done:
    free(meta);
    free(e);
    free(names);
    return rc;
}

int gptx_model_save(const gptx_model *model, const char *path) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(path);
    return save_file(model, NULL, path);
}

int gptx_train_state_init_sized(gptx_train_state *st, size_t size) {
    static const gptx_train_state nothing = {.struct_size = GPTX_TRAIN_STATE_SIZE};
    return gptx_struct_init(st, size, &nothing, &gptx_desc_train_state, __func__, "st");
}

/* Copies the caller's train state (any struct_size from an older header). */
static int read_train_state(const gptx_train_state *st, gptx_train_state *out,
                            const char *func) {
    gptx_train_state_init(out);
    if (!st) return GPTX_OK;
    return gptx_struct_read(out, st, &gptx_desc_train_state, func, "st");
}

/* The objects of a train state, held for a whole save or load: no other
 * thread steps the optimizer or draws from a loader or the sampler while
 * their state is written or restored. */
typedef struct state_guards {
    gptx_guard g[4];
} state_guards;

static void leave_state(state_guards *sg) {
    for (int i = 3; i >= 0; i--) gptx_guard_leave(&sg->g[i]);
}

static int enter_state(state_guards *sg, const gptx_train_state *s, const char *func) {
    const void *obj[4] = {s->optimizer, s->sampler, s->train_loader, s->val_loader};
    static const gptx_kind kind[4] = {GPTX_KIND_OPTIMIZER, GPTX_KIND_SAMPLER,
                                      GPTX_KIND_DATALOADER, GPTX_KIND_DATALOADER};
    static const char *const name[4] = {"st->optimizer", "st->sampler", "st->train_loader",
                                        "st->val_loader"};
    for (int i = 0; i < 4; i++)
        if (obj[i])
            GPTX_TRY(gptx_guard_enter(&sg->g[i], obj[i], kind[i], GPTX_GUARD_CHECK, name[i], func));
    return GPTX_OK;
}

/* A sharded optimizer's m and v as full host vectors on every rank: each
 * rank contributes its shard (collective). */
static int gather_moments(gptx_optimizer *o, float *host[2]) {
    gptx_context *ctx = o->model->ctx;
    size_t np = o->model->layout.nparams;
    for (int k = 0; k < 2; k++) {
        host[k] = host_alloc(np);
        if (!host[k]) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", np);
        memset(host[k], 0, np * sizeof(float));
        if (o->shard_count > 0)
            GPTX_TRY(ctx->ops->download_f32(ctx->be, host[k] + o->shard_offset,
                                            k == 0 ? o->m : o->v, o->shard_count));
        GPTX_TRY(gptx_comm_allgather_host(o->comm, host[k], np));
    }
    return GPTX_OK;
}

int gptx_checkpoint_save(const gptx_model *model, const gptx_train_state *st, const char *path) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(path);
    gptx_train_state s;
    GPTX_TRY(read_train_state(st, &s, "gptx_checkpoint_save"));
    state_guards sg __attribute__((cleanup(leave_state))) = {0};
    GPTX_TRY(enter_state(&sg, &s, __func__));
    if (s.optimizer && s.optimizer->model != model)
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "st->optimizer was created for another model");
    if (s.lr_schedule_step < 0 || s.tokens_seen < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "st->lr_schedule_step (%" PRId64 ") and st->tokens_seen "
                         "(%" PRId64 ") are counts; neither may be negative",
                         s.lr_schedule_step, s.tokens_seen);
    GPTX_TRY(check_user_metadata(s.user_metadata));
    train_view tv = {s.optimizer, {NULL, NULL}, s.sampler, {s.train_loader, s.val_loader},
                     s.lr_schedule_step, s.tokens_seen, s.user_metadata};
    if (!s.optimizer || !s.optimizer->comm) return save_file(model, &tv, path);
    /* sharded (ZeRO-1): collective gather, then rank 0 alone writes the same
     * file an unsharded optimizer would */
    GPTX_HOLD(s.optimizer->comm, GPTX_KIND_COMM); /* a collective */
    GPTX_TRY(gptx_comm_usable(s.optimizer->comm, __func__));
    float *host[2] = {NULL, NULL};
    int rc = gather_moments(s.optimizer, host);
    if (rc == GPTX_OK && s.optimizer->comm->engine->rank == 0) {
        tv.moments[0] = host[0];
        tv.moments[1] = host[1];
        rc = save_file(model, &tv, path);
    }
    free(host[0]);
    free(host[1]);
    return rc;
}

/* ---- loading --------------------------------------------------------------------- */

/* Reads the weights into a host buffer (and checks them) for model m. */
static int load_weights_host(const gptx_st_file *f, const gptx_layout *L, float **host) {
    *host = host_alloc(L->nparams);
    if (!*host) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", L->nparams);
    tensor_group g = {"", *host};
    int rc = read_group(f, L, &g);
    if (rc != GPTX_OK) {
        free(*host);
        *host = NULL;
    }
    return rc;
}

static int file_has_moments(const gptx_st_file *f, int is_training) {
    return is_training && gptx_st_meta(f, "optimizer") != NULL;
}

int gptx_ckpt_load_weights_st(gptx_model *m, const gptx_st_file *f) {
    int training = 0;
    GPTX_TRY(check_identity(f, &training));
    GPTX_TRY(compare_config(f, &m->cfg));
    GPTX_TRY(check_tensor_set(f, &m->layout, file_has_moments(f, training)));
    float *host = NULL;
    GPTX_TRY(load_weights_host(f, &m->layout, &host));
    int rc = gptx_model_restore_weights(m, host);
    free(host);
    return rc;
}

int gptx_ckpt_model_load_st(gptx_model **out, gptx_context *ctx, const gptx_st_file *f) {
    int training = 0;
    GPTX_TRY(check_identity(f, &training));
    gptx_model_config cfg;
    GPTX_TRY(read_config(f, &cfg));
    /* check the tensors against the config before allocating the model: a
     * header cannot make us allocate more than the file holds */
    gptx_layout L;
    GPTX_TRY(gptx_layout_build(&L, &cfg));
    int rc = check_tensor_set(f, &L, file_has_moments(f, training));
    gptx_layout_free(&L);
    GPTX_TRY(rc);
    gptx_model *m = NULL;
    GPTX_TRY(gptx_model_create(&m, ctx, &cfg));
    float *host = NULL;
    rc = load_weights_host(f, &m->layout, &host);
    if (rc == GPTX_OK) rc = gptx_model_restore_weights(m, host);
    free(host);
    if (rc != GPTX_OK) {
        gptx_model_destroy(m);
        return rc;
    }
    *out = m;
    return GPTX_OK;
}

int gptx_model_load(gptx_model **out, gptx_context *ctx, const char *path) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(path);
    gptx_st_file f;
    GPTX_TRY(gptx_st_open(&f, path));
    int rc = gptx_ckpt_model_load_st(out, ctx, &f);
    gptx_st_close(&f);
    return rc;
}

int gptx_model_load_weights(gptx_model *model, const char *path) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(path);
    gptx_st_file f;
    GPTX_TRY(gptx_st_open(&f, path));
    int rc = gptx_ckpt_load_weights_st(model, &f);
    gptx_st_close(&f);
    return rc;
}

/* Sets the loaders and the sampler, or none of them: earlier ones are put
 * back when a later one refuses its state. */
static int apply_positions(gptx_train_state *s, const train_meta *tm) {
    gptx_dataloader *dl[2] = {s->train_loader, s->val_loader};
    gptx_dataloader_state old[2];
    for (int i = 0; i < 2; i++) gptx_dataloader_state_init(&old[i]);
    int done = 0, rc = GPTX_OK;
    for (; done < 2 && rc == GPTX_OK; done++) {
        if (!dl[done]) continue;
        rc = gptx_dataloader_get_state(dl[done], &old[done]);
        if (rc == GPTX_OK) rc = gptx_dataloader_set_state(dl[done], &tm->loader[done]);
        if (rc != GPTX_OK) break;
    }
    if (rc == GPTX_OK && s->sampler) rc = gptx_sampler_set_state(s->sampler, &tm->sampler);
    if (rc != GPTX_OK) {
        for (int i = 0; i < done; i++)
            if (dl[i]) (void)gptx_dataloader_set_state(dl[i], &old[i]);
    }
    return rc;
}

int gptx_ckpt_load_st(gptx_model *m, gptx_train_state *st_io, const gptx_st_file *f) {
    const char *L = f->src.label;
    gptx_train_state s;
    GPTX_TRY(read_train_state(st_io, &s, "gptx_checkpoint_load"));
    if (s.optimizer && s.optimizer->model != m)
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "st->optimizer was created for another model");
    int training = 0;
    GPTX_TRY(check_identity(f, &training));
    GPTX_TRY(compare_config(f, &m->cfg));
    train_meta tm;
    train_meta_clear(&tm);
    if (training) GPTX_TRY(read_train_meta(f, &tm));
    GPTX_TRY(check_tensor_set(f, &m->layout, tm.has_optimizer));
    /* everything the caller asks to restore must be in the file */
    const char *absent = s.optimizer && !tm.has_optimizer   ? "optimizer state"
                         : s.sampler && !tm.has_sampler     ? "sampler state"
                         : s.train_loader && !tm.has_loader[0] ? "train loader state"
                         : s.val_loader && !tm.has_loader[1]   ? "val loader state"
                                                                : NULL;
    if (absent)
        return GPTX_FAIL(GPTX_ERR_NOT_FOUND, "'%s' holds no %s (it is a %s file); pass NULL for it "
                         "in the train state", L, absent, training ? "training" : "model");

    size_t np = m->layout.nparams;
    float *params = NULL, *mom[2] = {NULL, NULL};
    int rc = load_weights_host(f, &m->layout, &params);
    for (int k = 0; k < 2 && rc == GPTX_OK && s.optimizer; k++) {
        mom[k] = host_alloc(np);
        tensor_group g = {k == 0 ? PREFIX_M : PREFIX_V, mom[k]};
        rc = mom[k] ? read_group(f, &m->layout, &g)
                    : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", np);
    }
    if (rc == GPTX_OK) rc = apply_positions(&s, &tm);
    /* from here on only backend copies can fail */
    if (rc == GPTX_OK) rc = gptx_model_restore_weights(m, params);
    if (rc == GPTX_OK && s.optimizer) /* a sharded one takes its slice of the moments */
        rc = gptx_optimizer_restore(s.optimizer, mom[0], mom[1], tm.opt_step, &tm.opts);
    if (rc == GPTX_OK && st_io && tm.has_schedule) {
        /* only the fields the caller's struct has (read_train_state checked its size) */
        size_t n = st_io->struct_size;
        if (n >= GPTX_STRUCT_END(gptx_train_state, lr_schedule_step))
            st_io->lr_schedule_step = tm.lr_schedule_step;
        if (n >= GPTX_STRUCT_END(gptx_train_state, tokens_seen))
            st_io->tokens_seen = tm.tokens_seen;
    }
    free(params);
    free(mom[0]);
    free(mom[1]);
    return rc;
}

int gptx_checkpoint_user_metadata(const char *path, char *buf, size_t cap, size_t *len) {
    GPTX_CHECK_NULL(path);
    GPTX_CHECK_NULL(len);
    if (!buf && cap > 0) return GPTX_FAIL(GPTX_ERR_NULL, "buf is NULL but cap is %zu", cap);
    gptx_st_file f;
    GPTX_TRY(gptx_st_open(&f, path));
    int is_training = 0;
    int rc = check_identity(&f, &is_training);
    const char *s = rc == GPTX_OK ? gptx_st_meta(&f, USER_KEY) : NULL;
    if (rc == GPTX_OK && !s)
        rc = GPTX_FAIL(GPTX_ERR_NOT_FOUND, "'%s' holds no user metadata (%s)", f.src.label,
                       is_training ? "saved without st->user_metadata" : "a model file");
    if (rc == GPTX_OK) {
        size_t n = strlen(s);
        *len = n;
        if (cap <= n)
            rc = GPTX_FAIL(GPTX_ERR_SHAPE, "the user metadata of '%s' takes %zu bytes and its "
                           "NUL; buf has %zu", f.src.label, n, cap);
        else
            memcpy(buf, s, n + 1);
    }
    gptx_st_close(&f);
    return rc;
}

int gptx_checkpoint_load(gptx_model *model, gptx_train_state *st, const char *path) {
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(path);
    gptx_train_state s;
    GPTX_TRY(read_train_state(st, &s, __func__));
    state_guards sg __attribute__((cleanup(leave_state))) = {0};
    GPTX_TRY(enter_state(&sg, &s, __func__));
    gptx_st_file f;
    GPTX_TRY(gptx_st_open(&f, path));
    int rc = gptx_ckpt_load_st(model, st, &f);
    gptx_st_close(&f);
    return rc;
}
