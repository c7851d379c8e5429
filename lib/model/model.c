/* GPT-2 model: configuration, parameters, forward and backward passes.
 * Backend-independent: every computation goes through the model's own copy
 * of the context's backend table (m->ops, with the kernel variants the
 * backend chose for it), one op per step of the layer loop. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "model.h"
#include "abi_struct.h"
#include "op_profile.h"
#include "param_storage.h"
#include "philox.h"

GPTX_HANDLE_FIRST(gptx_model);

#define OPS(m) (&(m)->ops)
#define BE(m) ((m)->be)

/* ---- configuration -------------------------------------------------------- */

int gptx_model_config_init_sized(gptx_model_config *cfg, size_t size) {
    static const gptx_model_config gpt2_124m = {
        .struct_size = GPTX_MODEL_CONFIG_SIZE,
        .vocab_size = 50257,
        .padded_vocab_size = 50304,
        .context_length = 1024,
        .n_layer = 12,
        .n_head = 12,
        .n_embd = 768,
        .qkv_bias = 1,
        .tied_head = 1,
        .mask_padded_logits = 1,
        .layernorm_eps = 1e-5f,
    };
    return gptx_struct_init(cfg, size, &gpt2_124m, &gptx_desc_model_config, __func__, "cfg");
}

static int check_flag(const char *name, int v) {
    if (v != 0 && v != 1) return GPTX_FAIL(GPTX_ERR_INVALID, "config.%s is %d; expected 0 or 1", name, v);
    return GPTX_OK;
}

static int check_positive(const char *name, int v) {
    if (v <= 0) return GPTX_FAIL(GPTX_ERR_INVALID, "config.%s is %d; must be > 0", name, v);
    return GPTX_OK;
}

static int validate_config(gptx_model_config *c) {
    GPTX_TRY(check_positive("vocab_size", c->vocab_size));
    GPTX_TRY(check_positive("context_length", c->context_length));
    GPTX_TRY(check_positive("n_layer", c->n_layer));
    GPTX_TRY(check_positive("n_head", c->n_head));
    GPTX_TRY(check_positive("n_embd", c->n_embd));
    if (c->padded_vocab_size == 0) c->padded_vocab_size = c->vocab_size;
    if (c->padded_vocab_size < c->vocab_size)
        return GPTX_FAIL(GPTX_ERR_INVALID, "config.padded_vocab_size is %d; must be >= vocab_size %d",
                         c->padded_vocab_size, c->vocab_size);
    if (c->n_embd % c->n_head != 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "config.n_embd %d is not divisible by n_head %d",
                         c->n_embd, c->n_head);
    if (c->n_layer > 4096 || c->n_embd > (1 << 20) / 4 || c->context_length > (1 << 24))
        return GPTX_FAIL(GPTX_ERR_INVALID, "config sizes are unreasonably large");
    if (!(c->layernorm_eps > 0.0f) || !isfinite(c->layernorm_eps))
        return GPTX_FAIL(GPTX_ERR_INVALID, "config.layernorm_eps is %g; must be finite and > 0",
                         (double)c->layernorm_eps);
    GPTX_TRY(check_flag("qkv_bias", c->qkv_bias));
    GPTX_TRY(check_flag("tied_head", c->tied_head));
    GPTX_TRY(check_flag("mask_padded_logits", c->mask_padded_logits));
    return GPTX_OK;
}

/* ---- lifetime ----------------------------------------------------------- */

static void free_activations(gptx_model *m) {
    if (m->act_buf) OPS(m)->free(BE(m), m->act_buf);
    m->act_buf = NULL;
    free(m->acts);
    m->acts = NULL;
    m->act_B = m->act_T = 0;
    m->act_size = 0;
}

/* The model's release (handle.h): when it was destroyed and no optimizer
 * or generator uses it any more. */
static void release_model(gptx_handle *h) {
    gptx_model *m = (gptx_model *)h;
    free_activations(m);
    if (m->params) OPS(m)->free(BE(m), m->params);
    if (m->grads) OPS(m)->free(BE(m), m->grads);
    if (m->wcopy) OPS(m)->free(BE(m), m->wcopy);
    gptx_model_exact_release(m);
    free(m->grad_sumsq);
    gptx_op_profile_detach(m->profiled);
    gptx_layout_free(&m->layout);
}

/* What the ops fuse into backward (backend.h grad_fusion). Both fusions
 * call the backend between the ops of the backward segment, so a backend
 * that captures segments into graphs gets neither. */
static int init_grad_fusion(gptx_model *m) {
    const gptx_backend_ops *ops = &m->ops;
    unsigned f = ops->grad_fusion && !ops->graph_begin ? ops->grad_fusion(m->be) : 0u;
    /* rank-invariant: a backward's own sums of squares are not the sum's */
    if (!ops->grad_sumsq || m->ctx->opts.rank_invariant) f &= ~(unsigned)GPTX_GRAD_FUSE_NORM;
    if (!ops->grad_overwrite) f &= ~(unsigned)GPTX_GRAD_FUSE_ZERO;
    m->grad_fusion = f;
    if (!(f & GPTX_GRAD_FUSE_NORM)) return GPTX_OK;
    m->grad_sumsq = calloc((size_t)m->layout.ntensors, sizeof *m->grad_sumsq);
    if (!m->grad_sumsq) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    return GPTX_OK;
}

int gptx_model_create(gptx_model **out, gptx_context *ctx, const gptx_model_config *cfg_in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(cfg_in);
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    GPTX_TRY(gptx_struct_read(&cfg, cfg_in, &gptx_desc_model_config, __func__, "cfg"));
    GPTX_TRY(validate_config(&cfg));

    gptx_backend_ops ops;
    gptx_kernel_variants variants;
    GPTX_TRY(gptx_context_instance_ops(ctx, &ops, &variants));
    {
        gptx_backend_storage st;
        gptx_context_storage(ctx, &st);
        if (st.res_bytes != st.act_bytes && !ops.act_from_res)
            return GPTX_FAIL(GPTX_ERR_BACKEND, "backend '%s' lacks act_from_res", ops.name);
    }
    gptx_model *m = calloc(1, sizeof *m);
    if (!m) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&m->h, GPTX_KIND_MODEL, &ctx->h, NULL, release_model);
    m->ctx = ctx;
    m->cfg = cfg;
    m->ops = ops;
    m->variants = variants;
    int rc = gptx_op_profile_attach(ctx, &m->ops, &m->be, &m->profiled);
    if (rc != GPTX_OK) {
        gptx_model_destroy(m);
        return rc;
    }
    gptx_backend_storage st;
    gptx_context_storage(ctx, &st);
    m->act_bytes = st.act_bytes;
    m->res_bytes = st.res_bytes;
    m->wcopy_bytes = st.wcopy_bytes;
    m->param_bytes = st.param_bytes;
    m->wcopy_stale = 1;
    rc = gptx_layout_build(&m->layout, &cfg);
    if (rc == GPTX_OK) rc = ctx->ops->alloc(ctx->be, m->layout.nparams * m->param_bytes, (void **)&m->params);
    if (rc == GPTX_OK && m->wcopy_bytes)
        rc = ctx->ops->alloc(ctx->be, m->layout.nparams * m->wcopy_bytes, &m->wcopy);
    if (rc == GPTX_OK) rc = ctx->ops->alloc(ctx->be, m->layout.nparams * sizeof(float), (void **)&m->grads);
    if (rc == GPTX_OK) rc = gptx_param_fill(ctx, m->params, 0.0f, m->layout.nparams);
    if (rc == GPTX_OK) rc = ctx->ops->fill_f32(ctx->be, m->grads, 0.0f, m->layout.nparams);
    if (rc == GPTX_OK) rc = init_grad_fusion(m);
    if (rc == GPTX_OK) rc = gptx_model_exact_create(m);
    if (rc != GPTX_OK) {
        gptx_model_destroy(m);
        return rc;
    }
    *out = m;
    return GPTX_OK;
}

void gptx_model_destroy(gptx_model *m) { gptx_handle_destroy(m, GPTX_KIND_MODEL, "m", __func__); }

int gptx_model_get_config(const gptx_model *m, gptx_model_config *cfg) {
    GPTX_CHECK_HANDLE(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(cfg);
    return gptx_struct_write(cfg, &m->cfg, &gptx_desc_model_config, __func__, "cfg");
}

/* ---- initialisation ------------------------------------------------------- */

/* Fills a host buffer with N(0, std) from Philox at (seed, stream = tensor). */
static void normal_fill(float *dst, size_t n, float std, uint64_t seed, uint64_t stream) {
    for (size_t i = 0; i < n; i += 4) {
        gptx_philox4 r = gptx_philox_block(seed, stream, i / 4);
        float z[4];
        for (int k = 0; k < 4; k += 2) {
            float u1 = gptx_uniform_open0(r.v[k]), u2 = gptx_uniform_open0(r.v[k + 1]);
            float rad = sqrtf(-2.0f * logf(u1));
            z[k] = rad * cosf(6.28318530718f * u2);
            z[k + 1] = rad * sinf(6.28318530718f * u2);
        }
        for (size_t k = 0; k < 4 && i + k < n; k++) dst[i + k] = z[k] * std;
    }
}

static int is_residual_projection(const char *name) {
    size_t n = strlen(name);
    const char *a = "attn.c_proj.weight", *b = "mlp.c_proj.weight";
    return (n >= strlen(a) && strcmp(name + n - strlen(a), a) == 0) ||
           (n >= strlen(b) && strcmp(name + n - strlen(b), b) == 0);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

int gptx_model_init_random(gptx_model *m, uint64_t seed) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    size_t maxn = 0;
    for (int i = 0; i < m->layout.ntensors; i++)
        if (m->layout.tensors[i].numel > maxn) maxn = m->layout.tensors[i].numel;
    float *host = malloc(maxn * sizeof *host);
    if (!host) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu floats)", maxn);
    float resid_std = 0.02f / sqrtf(2.0f * (float)m->cfg.n_layer);
    int rc = GPTX_OK;
    for (int i = 0; i < m->layout.ntensors && rc == GPTX_OK; i++) {
        const gptx_param_desc *t = &m->layout.tensors[i];
        if (t->ndim == 2) {
            normal_fill(host, t->numel, is_residual_projection(t->name) ? resid_std : 0.02f, seed,
                        (uint64_t)i);
            /* padded vocabulary rows start at zero */
            if (i == m->layout.wte || i == m->layout.lm_head) {
                size_t C = (size_t)m->cfg.n_embd;
                memset(host + (size_t)m->cfg.vocab_size * C, 0,
                       (size_t)(m->cfg.padded_vocab_size - m->cfg.vocab_size) * C * sizeof *host);
            }
        } else {
            float v = ends_with(t->name, ".weight") ? 1.0f : 0.0f; /* LayerNorm gain, biases */
            for (size_t k = 0; k < t->numel; k++) host[k] = v;
        }
        rc = gptx_param_upload(m->ctx, gptx_param_at(m->ctx, m->params, t->offset), host, t->numel);
    }
    free(host);
    gptx_model_params_changed(m);
    if (rc == GPTX_OK) rc = gptx_model_zero_grad(m);
    m->phase = GPTX_PHASE_NONE;
    return rc;
}

int gptx_model_zero_grad(gptx_model *m) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    gptx_model_grads_changed(m);
    GPTX_TRY(gptx_model_exact_clear(m));
    /* folded into the next backward's first writes: one full write pass
     * less per step (bf16 on the CPU); any other reader fills first */
    if (m->grad_fusion & GPTX_GRAD_FUSE_ZERO) {
        m->grads_zero_pending = 1;
        return GPTX_OK;
    }
    return OPS(m)->fill_f32(BE(m), m->grads, 0.0f, m->layout.nparams);
}

int gptx_model_grads_materialize(gptx_model *m) {
    if (m->exact_dirty) return gptx_model_exact_to_grads(m); /* the bins' sum */
    if (!m->grads_zero_pending) return GPTX_OK;
    GPTX_TRY(OPS(m)->fill_f32(BE(m), m->grads, 0.0f, m->layout.nparams));
    m->grads_zero_pending = 0;
    return GPTX_OK;
}

void gptx_model_grads_changed(gptx_model *m) { m->grad_sumsq_valid = 0; }

int gptx_model_grad_sumsq(const gptx_model *m, double *sumsq) {
    if (!m->grad_sumsq_valid || m->grads_zero_pending) return 0;
    double s = 0.0;
    for (int i = 0; i < m->layout.ntensors; i++) s += m->grad_sumsq[i]; /* fixed order */
    *sumsq = s;
    return 1;
}

/* ---- activations ------------------------------------------------------------ */

/* Carves views for (B, T) out of one buffer; with base == NULL only counts
 * bytes. Views are carved in bytes: activations take m->act_bytes per element
 * (the backend's activation type, lib/core/backend.h), the residual stream
 * m->res_bytes, ids and per-row statistics 4; every view starts on a 64-byte
 * boundary. */
static size_t carve_activations(gptx_model *m, char *base, int B, int T) {
    size_t BT = (size_t)B * T, C = (size_t)m->cfg.n_embd, NH = (size_t)m->cfg.n_head;
    size_t Vp = (size_t)m->cfg.padded_vocab_size, off = 0, A = m->act_bytes, R = m->res_bytes;
    gptx_op_buffers ob = {0}; /* what the backend's ops need besides */
    if (m->ops.op_buffers) m->ops.op_buffers(BE(m), &m->variants, B, T, (int)C, (int)NH, &ob);
#define TAKE_BYTES(ptr, n, esz)                               \
    do {                                                      \
        if (base) (ptr) = (void *)(base + off);               \
        off += ((size_t)(n) * (esz) + 63) / 64 * 64;          \
    } while (0)
#define TAKE(ptr, n) TAKE_BYTES(ptr, n, A)          /* activation type */
#define TAKE32(ptr, n) TAKE_BYTES(ptr, n, 4)        /* ids, statistics: 4 bytes */
#define TAKE_RES(ptr, n) TAKE_BYTES(ptr, n, R)      /* the residual stream */
    TAKE32(m->inputs, BT);
    TAKE32(m->targets, BT);
    TAKE_RES(m->encoded, BT * C);
    for (int l = 0; l < m->cfg.n_layer; l++) {
        gptx_layer_acts *a = base ? &m->acts[l] : &(gptx_layer_acts){0};
        TAKE(a->ln1, BT * C);
        TAKE32(a->ln1_mean, BT);
        TAKE32(a->ln1_rstd, BT);
        TAKE(a->qkv, 3 * BT * C);
        TAKE(a->atty, BT * C);
        TAKE32(a->att_lse, BT * NH);
        TAKE_RES(a->residual2, BT * C);
        TAKE(a->ln2, BT * C);
        TAKE32(a->ln2_mean, BT);
        TAKE32(a->ln2_rstd, BT);
        TAKE(a->fch, 4 * BT * C);
        TAKE(a->fch_gelu, 4 * BT * C);
        TAKE_RES(a->residual3, BT * C);
        a->att_state = NULL;
        if (ob.attention_state) TAKE_BYTES(a->att_state, ob.attention_state, 1);
    }
    m->att_work = m->qkv_work = NULL;
    if (ob.attention_work) TAKE_BYTES(m->att_work, ob.attention_work, 1);
    if (ob.qkv_work) TAKE_BYTES(m->qkv_work, ob.qkv_work, 1);
    /* one projection output shared by every layer: only its sum with the
     * residual is needed later */
    float *proj = NULL;
    TAKE(proj, BT * C);
    if (base)
        for (int l = 0; l < m->cfg.n_layer; l++) m->acts[l].attproj = m->acts[l].fcproj = proj;
    TAKE(m->lnf, BT * C);
    TAKE32(m->lnf_mean, BT);
    TAKE32(m->lnf_rstd, BT);
    TAKE(m->logits, BT * Vp);
    TAKE32(m->losses, BT);
    TAKE32(m->loss_lse, 3 * BT); /* lse + 2 backend statistics per row */
    TAKE_RES(m->dresidual, BT * C);
    if (R != A) TAKE(m->dres_act, BT * C);
    TAKE(m->dln, BT * C);
    TAKE(m->datty, BT * C);
    TAKE(m->dqkv, 3 * BT * C);
    TAKE(m->dfch, 4 * BT * C);
    TAKE(m->dfch_gelu, 4 * BT * C);
#undef TAKE
#undef TAKE32
#undef TAKE_RES
#undef TAKE_BYTES
    return off;
}

static int ensure_activations(gptx_model *m, int B, int T) {
    size_t n = carve_activations(m, NULL, B, T);
    if (m->act_buf && n <= m->act_size) {
        /* a smaller batch fits: re-carve the views for (B, T) */
        carve_activations(m, m->act_buf, B, T);
        return GPTX_OK;
    }
    free_activations(m);
    m->acts = calloc((size_t)m->cfg.n_layer, sizeof *m->acts);
    if (!m->acts) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = OPS(m)->alloc(BE(m), n, &m->act_buf);
    if (rc != GPTX_OK) {
        free(m->acts);
        m->acts = NULL;
        return rc;
    }
    m->act_B = B;
    m->act_T = T;
    m->act_size = n;
    carve_activations(m, m->act_buf, B, T);
    return GPTX_OK;
}

/* ---- forward ---------------------------------------------------------------- */

/* The weights the ops read ([w] in lib/core/backend.h): the parameters, or the
 * backend's compute copy of them. */
#define PARAM(m, idx) weight_at(m, (m)->layout.tensors[idx].offset)
/* [p]: the parameter itself (the fp32 master under bf16 mixed), for the ops
 * that take LayerNorm and embedding weights (lib/core/backend.h) */
#define MASTER(m, idx) gptx_param_at((m)->ctx, (m)->params, (m)->layout.tensors[idx].offset)
#define GRAD(m, idx) ((m)->grads + (m)->layout.tensors[idx].offset)
#define PARAM_OR_NULL(m, idx) ((idx) < 0 ? NULL : PARAM(m, idx))
#define GRAD_OR_NULL(m, idx) ((idx) < 0 ? NULL : GRAD(m, idx))

static const float *weight_at(const gptx_model *m, size_t elems) {
    if (!m->wcopy) return gptx_param_at(m->ctx, m->params, elems);
    return gptx_model_copy_at(m, elems);
}

/* `elems` elements past a residual-stream view */
static const float *res_offset(const gptx_model *m, const float *a, size_t elems) {
    return (const float *)((const char *)a + elems * m->res_bytes);
}

void gptx_model_params_changed(gptx_model *m) {
    m->wcopy_stale = 1;
    m->params_version++;
}

void gptx_model_params_and_copy_changed(gptx_model *m) {
    m->params_version++;
    m->wcopy_stale = 0;
}

float *gptx_model_copy_at(const gptx_model *m, size_t elems) {
    if (!m->wcopy) return NULL;
    return (float *)((char *)m->wcopy + elems * m->wcopy_bytes);
}

int gptx_model_restore_weights(gptx_model *m, const float *host) {
    GPTX_HOLD(m, GPTX_KIND_MODEL); /* a new model's first upload: the context's lock */
    gptx_context *ctx = m->ctx;
    m->phase = GPTX_PHASE_NONE;
    gptx_model_params_changed(m);
    gptx_model_grads_changed(m);
    GPTX_TRY(gptx_param_upload(ctx, m->params, host, m->layout.nparams));
    GPTX_TRY(ctx->ops->fill_f32(ctx->be, m->grads, 0.0f, m->layout.nparams));
    m->grads_zero_pending = 0;
    return gptx_model_exact_clear(m);
}

/* Brings the compute copy of the weights up to date with the parameters. */
static int refresh_weights(gptx_model *m) {
    if (!m->wcopy || !m->wcopy_stale) return GPTX_OK;
    GPTX_TRY(OPS(m)->convert_weights(BE(m), m->wcopy, m->params, m->layout.nparams));
    m->wcopy_stale = 0;
    return GPTX_OK;
}

static int download_act(const gptx_model *m, float *host, const float *src, size_t n) {
    if (OPS(m)->download_act) return OPS(m)->download_act(BE(m), host, src, n);
    return OPS(m)->download_f32(BE(m), host, src, n);
}

static int check_ids(const char *what, const int32_t *ids, size_t n, int vocab, int allow_ignore,
                     int64_t *counted) {
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t v = ids[i];
        if (allow_ignore && v == GPTX_IGNORE_INDEX) continue;
        if (v < 0 || v >= vocab)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "%s[%zu] is %d; must be in [0, %d)%s", what, i,
                             (int)v, vocab, allow_ignore ? " or GPTX_IGNORE_INDEX" : "");
        count++;
    }
    if (counted) *counted = count;
    return GPTX_OK;
}

/* Layer l's keys and values in a generation cache (gptx_model_kv_bytes):
 * K then V, (NH, cap, C / NH) each, per layer. */
static float *kv_at(const gptx_model *m, const gptx_kv *kv, int l, int which) {
    size_t per = (size_t)kv->cap * m->cfg.n_embd * m->act_bytes;
    return (float *)((char *)kv->base + ((size_t)l * 2 + (size_t)which) * per);
}

static int attention_forward(gptx_model *m, gptx_layer_acts *a, int l, int B, int T,
                             const gptx_kv *kv) {
    int C = m->cfg.n_embd, NH = m->cfg.n_head;
    if (kv) /* B = 1: the rows at positions kv->pos0 .. kv->pos0 + T - 1 */
        return OPS(m)->attention_kv_forward(BE(m), a->atty, a->att_lse, a->qkv, kv_at(m, kv, l, 0),
                                            kv_at(m, kv, l, 1), T, kv->pos0, kv->cap, C, NH);
    return OPS(m)->attention_forward(BE(m), a->atty, a->att_lse, a->att_state, m->att_work, a->qkv,
                                     B, T, C, NH);
}

/* The weight copy, then the embedding of the ids already uploaded to
 * m->inputs: (B, T) ids -> m->encoded (B*T, C). Not part of a graph
 * segment: the backend may copy the ids to the host here. */
static int embed_forward_at(gptx_model *m, int B, int T, int pos0) {
    const gptx_layout *L = &m->layout;
    GPTX_TRY(refresh_weights(m));
    /* positions pos0 .. pos0 + T - 1: the wpe view starts at row pos0 */
    const float *wpe = gptx_param_at(m->ctx, m->params,
                                     m->layout.tensors[L->wpe].offset + (size_t)pos0 * m->cfg.n_embd);
    return OPS(m)->embedding_forward(BE(m), m->encoded, m->inputs, MASTER(m, L->wte), wpe, B, T,
                                     m->cfg.n_embd); // -> (BT, C)
}

static int embed_forward(gptx_model *m, int B, int T) { return embed_forward_at(m, B, T, 0); }

/* Every transformer block on m->encoded: -> residual stream (B*T, C),
 * returned in *out. With kv (generation, B = 1), attention runs over the
 * cache and stores these rows' keys and values in it. */
static int blocks_forward(gptx_model *m, int B, int T, const gptx_kv *kv, const float **out) {
    const gptx_backend_ops *ops = OPS(m);
    gptx_backend *be = BE(m);
    const gptx_layout *L = &m->layout;
    int C = m->cfg.n_embd, N = B * T;
    size_t BTC = (size_t)N * C;
    float eps = m->cfg.layernorm_eps;
    const float *residual = m->encoded;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const gptx_layer_params *p = &L->layers[l];
        gptx_layer_acts *a = &m->acts[l];
        /* ln1 of layers > 0 came with the previous layer's residual */
        if (l == 0)
            GPTX_TRY(ops->layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, residual,
                                            MASTER(m, p->ln1_w), MASTER(m, p->ln1_b), N, C, eps));
        GPTX_TRY(ops->qkv_forward(be, a->qkv, a->ln1, PARAM(m, p->qkv_w),
                                  PARAM_OR_NULL(m, p->qkv_b), m->qkv_work, N, C)); // (BT, 3C)
        GPTX_TRY(attention_forward(m, a, l, B, T, kv)); // (BT, C)
        GPTX_TRY(ops->matmul_forward(be, a->attproj, a->atty, PARAM(m, p->attn_proj_w),
                                     PARAM(m, p->attn_proj_b), N, C, C));
        GPTX_TRY(ops->residual_layernorm_forward(be, a->residual2, a->ln2, a->ln2_mean,
                                                 a->ln2_rstd, residual, a->attproj,
                                                 MASTER(m, p->ln2_w), MASTER(m, p->ln2_b), N, C,
                                                 eps));
        // (BT, 4C) pre-activation and its GELU
        GPTX_TRY(ops->matmul_gelu_forward(be, a->fch_gelu, a->fch, a->ln2, PARAM(m, p->fc_w),
                                          PARAM(m, p->fc_b), N, C, 4 * C));
        GPTX_TRY(ops->matmul_forward(be, a->fcproj, a->fch_gelu, PARAM(m, p->fc_proj_w),
                                     PARAM(m, p->fc_proj_b), N, 4 * C, C)); // (BT, C)
        if (l + 1 < m->cfg.n_layer) {
            /* the next layer's ln1 (ln_f stays separate: generation needs only its last row) */
            const gptx_layer_params *pn = &L->layers[l + 1];
            gptx_layer_acts *an = &m->acts[l + 1];
            GPTX_TRY(ops->residual_layernorm_forward(be, a->residual3, an->ln1, an->ln1_mean,
                                                     an->ln1_rstd, a->residual2, a->fcproj,
                                                     MASTER(m, pn->ln1_w), MASTER(m, pn->ln1_b),
                                                     N, C, eps));
        } else {
            GPTX_TRY(ops->residual_forward(be, a->residual3, a->residual2, a->fcproj, BTC));
        }
        residual = a->residual3;
    }
    *out = residual;
    return GPTX_OK;
}

static int transformer_forward(gptx_model *m, int B, int T, const float **out) {
    GPTX_TRY(embed_forward(m, B, T));
    return blocks_forward(m, B, T, NULL, out);
}

/* ---- graph segments ----------------------------------------------------------- */

/* Segments the backend may capture and replay (backend.h graph_begin). */
enum { SEGMENT_FORWARD = 0, SEGMENT_BACKWARD = 1 };
#define GPTX_SEGMENT_KEY_MAX 16 /* at most what backends accept (CUDA: 24) */

/* The words of a segment's key common to both: everything its ops bake in
 * besides per-segment scalars (shapes, buffer addresses, model shape). */
static int segment_key(const gptx_model *m, uint64_t *k, int B, int T) {
    const gptx_model_config *c = &m->cfg;
    int n = 0;
    k[n++] = (uint64_t)B;
    k[n++] = (uint64_t)T;
    k[n++] = (uint64_t)(uintptr_t)m->act_buf;
    k[n++] = (uint64_t)m->act_size;
    k[n++] = (uint64_t)(uintptr_t)m->params;
    k[n++] = (uint64_t)(uintptr_t)m->grads;
    k[n++] = (uint64_t)(uintptr_t)m->wcopy;
    k[n++] = (uint64_t)c->n_layer;
    k[n++] = (uint64_t)c->n_head;
    k[n++] = (uint64_t)c->n_embd;
    k[n++] = (uint64_t)c->vocab_size;
    k[n++] = (uint64_t)c->padded_vocab_size;
    k[n++] = (uint64_t)(c->mask_padded_logits | c->tied_head << 1 | c->qkv_bias << 2);
    return n;
}

static uint64_t float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* Runs fn(m, arg) as segment seg: issued normally, captured, or replayed
 * by the backend (then fn does not run). */
static int run_segment(gptx_model *m, int seg, const uint64_t *key, int nkey,
                       int (*fn)(gptx_model *, const void *), const void *arg) {
    const gptx_backend_ops *ops = OPS(m);
    if (!ops->graph_begin) return fn(m, arg);
    int replayed = 0, rerun = 0;
    GPTX_TRY(ops->graph_begin(BE(m), seg, key, nkey, &replayed));
    if (replayed) return GPTX_OK;
    int rc = ops->graph_end(BE(m), seg, fn(m, arg), &rerun);
    return rerun ? fn(m, arg) : rc; /* a capture abandoned: nothing of it ran */
}

/* Segment FORWARD: the blocks, ln_f, lm_head and the cross-entropy. */
typedef struct forward_args {
    int B, T;
    int targets;   /* targets uploaded */
    int fused;     /* crossentropy_fused with dloss */
    float dloss;
} forward_args;

static int forward_segment(gptx_model *m, const void *arg) {
    const forward_args *f = arg;
    const gptx_backend_ops *ops = OPS(m);
    gptx_backend *be = BE(m);
    const gptx_layout *L = &m->layout;
    int C = m->cfg.n_embd, V = m->cfg.vocab_size;
    int Vp = m->cfg.padded_vocab_size, N = f->B * f->T;
    const float *residual = NULL;
    GPTX_TRY(blocks_forward(m, f->B, f->T, NULL, &residual));
    GPTX_TRY(ops->layernorm_forward(be, m->lnf, m->lnf_mean, m->lnf_rstd, residual, MASTER(m, L->lnf_w),
                           MASTER(m, L->lnf_b), N, C, m->cfg.layernorm_eps));
    GPTX_TRY(ops->matmul_forward(be, m->logits, m->lnf, PARAM(m, L->lm_head), NULL, N, C,
                                 Vp)); // (BT, Vp)
    if (f->fused)
        return ops->crossentropy_fused(be, m->losses, m->loss_lse, m->logits, m->targets, N, V, Vp,
                                       m->cfg.mask_padded_logits, f->dloss);
    return ops->crossentropy_forward(be, f->targets ? m->losses : NULL, m->loss_lse, m->logits,
                                     f->targets ? m->targets : NULL, N, V, Vp,
                                     m->cfg.mask_padded_logits);
}

/* The forward pass; with fused_scale (targets required), the cross-entropy
 * also leaves d(fused_scale * mean loss)/dlogits in the logits buffer, for
 * gptx_model_forward_backward. */
static int forward_impl(gptx_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                        float *loss, const float *fused_scale, const char *func) {
    if (B <= 0) return gptx_fail(GPTX_ERR_INVALID, func, "B is %d; must be > 0", B);
    if (T <= 0) return gptx_fail(GPTX_ERR_INVALID, func, "T is %d; must be > 0", T);
    if (T > m->cfg.context_length)
        return gptx_fail(GPTX_ERR_SHAPE, func, "T is %d; exceeds the context length %d", T,
                         m->cfg.context_length);
    if ((int64_t)B * T > (1 << 24))
        return gptx_fail(GPTX_ERR_SHAPE, func, "B*T is %lld; at most %d rows per batch",
                         (long long)B * T, 1 << 24);
    size_t BT = (size_t)B * T;
    int64_t counted = 0;
    GPTX_TRY(check_ids("inputs", inputs, BT, m->cfg.vocab_size, 0, NULL));
    if (targets) GPTX_TRY(check_ids("targets", targets, BT, m->cfg.vocab_size, 1, &counted));

    m->phase = GPTX_PHASE_NONE;
    GPTX_TRY(ensure_activations(m, B, T));
    const gptx_backend_ops *ops = OPS(m);
    gptx_backend *be = BE(m);

    GPTX_TRY(ops->upload_i32(be, m->inputs, inputs, BT));
    if (targets) GPTX_TRY(ops->upload_i32(be, m->targets, targets, BT));
    GPTX_TRY(embed_forward(m, B, T));
    /* the same expression as in backward, so both paths scale alike */
    float dloss = fused_scale && counted > 0 ? *fused_scale / (float)counted : 0.0f;
    forward_args fa = {B, T, targets != NULL, fused_scale != NULL, dloss};
    uint64_t key[GPTX_SEGMENT_KEY_MAX];
    int nkey = segment_key(m, key, B, T);
    key[nkey++] = (uint64_t)(fa.targets | fa.fused << 1);
    key[nkey++] = float_bits(fa.fused ? dloss : 0.0f);
    GPTX_TRY(run_segment(m, SEGMENT_FORWARD, key, nkey, forward_segment, &fa));
    m->B = B;
    m->T = T;
    m->have_targets = targets != NULL;
    m->loss_tokens = targets ? counted : 0;
    m->loss = 0.0f;
    if (targets) {
        double sum = 0.0;
        GPTX_TRY(ops->sum_to_host(be, &sum, m->losses, BT));
        m->loss = counted > 0 ? (float)(sum / (double)counted) : 0.0f;
        if (loss) *loss = m->loss;
        if (!isfinite(m->loss))
            return gptx_fail(GPTX_ERR_NON_FINITE, func, "loss is %g (not finite)",
                             (double)m->loss);
    }
    m->dlogits_ready = fused_scale != NULL;
    m->phase = GPTX_PHASE_FORWARD;
    return GPTX_OK;
}

int gptx_model_forward(gptx_model *m, const int32_t *inputs, const int32_t *targets, int B, int T,
                       float *loss) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(inputs);
    return forward_impl(m, inputs, targets, B, T, loss, NULL, __func__);
}

int gptx_model_forward_backward(gptx_model *m, const int32_t *inputs, const int32_t *targets,
                                int B, int T, float loss_scale, float *loss) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(inputs);
    GPTX_CHECK_NULL(targets);
    if (!isfinite(loss_scale))
        return GPTX_FAIL(GPTX_ERR_INVALID, "loss_scale is %g; must be finite", (double)loss_scale);
    GPTX_TRY(forward_impl(m, inputs, targets, B, T, loss, &loss_scale, __func__));
    return gptx_model_backward_hooked(m, loss_scale, NULL, NULL, __func__);
}

/* ---- generation: logits of the last position only ---------------------------- */

/* ln_f and lm_head on row T - 1 of the residual stream alone, masked like the
 * full forward pass, into host_logits (padded_vocab_size). */
static int last_row_logits(gptx_model *m, const float *residual, int T, float *host_logits) {
    const gptx_backend_ops *ops = OPS(m);
    gptx_backend *be = BE(m);
    const gptx_layout *L = &m->layout;
    int C = m->cfg.n_embd, V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size;
    size_t last = (size_t)(T - 1) * C;
    /* last row only: (1, C) -> ln_f -> (1, Vp) logits in row 0 of the buffer */
    GPTX_TRY(ops->layernorm_forward(be, m->lnf, m->lnf_mean, m->lnf_rstd, res_offset(m, residual, last),
                           MASTER(m, L->lnf_w), MASTER(m, L->lnf_b), 1, C, m->cfg.layernorm_eps));
    GPTX_TRY(ops->matmul_forward(be, m->logits, m->lnf, PARAM(m, L->lm_head), NULL, 1, C, Vp));
    /* masks the padded columns exactly as the full forward pass does */
    GPTX_TRY(ops->crossentropy_forward(be, NULL, m->loss_lse, m->logits, NULL, 1, V, Vp,
                                       m->cfg.mask_padded_logits));
    return download_act(m, host_logits, m->logits, (size_t)Vp);
}

/* The same transformer as gptx_model_forward, for one row of T tokens, then
 * ln_f and lm_head on the last position alone (generation needs no other row:
 * lm_head is most of the cost for small models, (T, C) @ (C, Vp)). */
int gptx_model_forward_last_logits(gptx_model *m, const int32_t *inputs, int T, int T_reserve,
                                   float *host_logits) {
    GPTX_CHECK_NULL(m);
    GPTX_CHECK_NULL(inputs);
    GPTX_CHECK_NULL(host_logits);
    int Tmax = m->cfg.context_length;
    if (T <= 0 || T > Tmax)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "T is %d; must be in [1, context length %d]", T, Tmax);
    GPTX_TRY(check_ids("inputs", inputs, (size_t)T, m->cfg.vocab_size, 0, NULL));

    /* the activations are about to hold this call's data: no forward pass
     * remains for backward or get_logits */
    m->phase = GPTX_PHASE_NONE;
    /* sized once for the longest context the caller will need, so a context
     * that grows by one token per call does not reallocate every time */
    int reserve = T_reserve < T ? T : (T_reserve > Tmax ? Tmax : T_reserve);
    if (!m->act_buf || (size_t)reserve > (size_t)m->act_B * m->act_T)
        GPTX_TRY(ensure_activations(m, 1, reserve));
    GPTX_TRY(ensure_activations(m, 1, T)); /* re-carves the views for (1, T) */

    GPTX_TRY(OPS(m)->upload_i32(BE(m), m->inputs, inputs, (size_t)T));
    const float *residual = NULL;
    GPTX_TRY(transformer_forward(m, 1, T, &residual));
    return last_row_logits(m, residual, T, host_logits);
}

size_t gptx_model_kv_bytes(const gptx_model *m, int cap) {
    return (size_t)m->cfg.n_layer * 2 * (size_t)cap * m->cfg.n_embd * m->act_bytes;
}

int gptx_model_forward_kv(gptx_model *m, const gptx_kv *kv, const int32_t *tokens, int n,
                          float *host_logits) {
    if (!OPS(m)->attention_kv_forward)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "the %s backend has no cached attention",
                         OPS(m)->name);
    if (n <= 0 || kv->pos0 < 0 || kv->pos0 + n > kv->cap || kv->cap > m->cfg.context_length)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "%d tokens at position %d of a window of %d (context "
                                         "length %d)",
                         n, kv->pos0, kv->cap, m->cfg.context_length);
    GPTX_TRY(check_ids("tokens", tokens, (size_t)n, m->cfg.vocab_size, 0, NULL));
    m->phase = GPTX_PHASE_NONE;
    GPTX_TRY(ensure_activations(m, 1, n));
    GPTX_TRY(OPS(m)->upload_i32(BE(m), m->inputs, tokens, (size_t)n));
    GPTX_TRY(embed_forward_at(m, 1, n, kv->pos0));
    const float *residual = NULL;
    GPTX_TRY(blocks_forward(m, 1, n, kv, &residual));
    return last_row_logits(m, residual, n, host_logits);
}

/* ---- backward --------------------------------------------------------------- */

/* The residual gradient as a projection product's dout: dresidual itself,
 * or, with a wider residual stream (bf16 mixed), its rounded copy in the
 * activation type (what autocast's bf16 product sees too). */
static int dresidual_as_act(gptx_model *m, size_t n, const float **out) {
    *out = m->dresidual;
    if (m->res_bytes == m->act_bytes) return GPTX_OK;
    if (!m->dres_act_ready)
        GPTX_TRY(OPS(m)->act_from_res(BE(m), m->dres_act, m->dresidual, n));
    m->dres_act_ready = 0;
    *out = m->dres_act;
    return GPTX_OK;
}

/* A LayerNorm backward into dresidual. When a product takes the residual
 * gradient next (act_next) and it needs rounding to the activation type, the
 * backend may write that copy in the same pass (layernorm_backward_act);
 * dresidual_as_act then finds it ready. */
static int ln_backward_residual(gptx_model *m, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean,
                                const float *rstd, int N, int C, int act_next) {
    const gptx_backend_ops *ops = OPS(m);
    m->dres_act_ready = 0;
    if (act_next && m->res_bytes != m->act_bytes && ops->layernorm_backward_act) {
        GPTX_TRY(ops->layernorm_backward_act(BE(m), m->dresidual, m->dres_act, dw, db, dout, inp,
                                             w, mean, rstd, N, C));
        m->dres_act_ready = 1;
        return GPTX_OK;
    }
    return ops->layernorm_backward(BE(m), m->dresidual, dw, db, dout, inp, w, mean, rstd, N, C);
}

int gptx_model_backward_check(const gptx_model *m, float loss_scale, const char *func) {
    if (m->phase != GPTX_PHASE_FORWARD)
        return gptx_fail(GPTX_ERR_STATE, func, "backward needs a successful forward pass first%s",
                         m->phase == GPTX_PHASE_BACKWARD ? " (backward already ran on it)" : "");
    if (!m->have_targets)
        return gptx_fail(GPTX_ERR_STATE, func,
                         "the last forward pass had no targets, so there is no loss");
    if (!isfinite(loss_scale))
        return gptx_fail(GPTX_ERR_INVALID, func, "loss_scale is %g; must be finite",
                         (double)loss_scale);
    return GPTX_OK;
}

/* Region [first tensor of layer l, first tensor after it) of the flat buffer. */
static void layer_region(const gptx_model *m, int l, size_t *lo, size_t *hi) {
    const gptx_layout *L = &m->layout;
    *lo = L->tensors[L->layers[l].ln1_w].offset;
    *hi = l + 1 < m->cfg.n_layer ? L->tensors[L->layers[l + 1].ln1_w].offset
                                 : L->tensors[L->lnf_w].offset;
}

int gptx_model_backward(gptx_model *m, float loss_scale) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    return gptx_model_backward_hooked(m, loss_scale, NULL, NULL, __func__);
}

typedef struct backward_args {
    gptx_grads_ready_fn ready; /* NULL in a segment */
    void *arg;
    int ce_backward; /* the cross-entropy backward is still to run */
    float dloss;
} backward_args;

static int backward_segment(gptx_model *m, const void *args);

/* Gradient tensor idx is final for this backward: with the norm fused,
 * its sum of squares now, while the op's writes are still in cache. */
static int grad_final(gptx_model *m, int idx) {
    if (!(m->grad_fusion & GPTX_GRAD_FUSE_NORM) || m->grad_sumsq_count < 0 || idx < 0)
        return GPTX_OK;
    const gptx_param_desc *t = &m->layout.tensors[idx];
    GPTX_TRY(OPS(m)->grad_sumsq(BE(m), &m->grad_sumsq[idx], m->grads + t->offset, t->numel));
    m->grad_sumsq_count++;
    return GPTX_OK;
}

/* The backward segment (graph or not), with a pending zero_grad folded into
 * its first writes: every gradient it writes is written once, so the
 * backend overwrites instead of accumulating until it ends. The embedding
 * backward adds to the rows of the batch's ids only: lib/ fills wpe (and an
 * untied wte) first; a tied wte was overwritten by the lm_head product and
 * takes the embedding's rows on top. */
static int backward_body(gptx_model *m, backward_args *ba) {
    int overwrite = m->grads_zero_pending;
    if (overwrite) GPTX_TRY(OPS(m)->grad_overwrite(BE(m), 1));
    m->grads_zero_pending = 0; /* from here on the buffer is what the ops leave */
    int rc;
    /* the hook queues gradient reductions between layers: no graph then */
    if (ba->ready) rc = backward_segment(m, ba);
    else {
        uint64_t key[GPTX_SEGMENT_KEY_MAX];
        int nkey = segment_key(m, key, m->B, m->T);
        key[nkey++] = (uint64_t)ba->ce_backward;
        key[nkey++] = float_bits(ba->ce_backward ? ba->dloss : 0.0f);
        rc = run_segment(m, SEGMENT_BACKWARD, key, nkey, backward_segment, ba);
    }
    if (!overwrite) return rc;
    int off = OPS(m)->grad_overwrite(BE(m), 0);
    if (rc == GPTX_OK) rc = off;
    const gptx_layout *L = &m->layout;
    if (rc == GPTX_OK)
        rc = OPS(m)->fill_f32(BE(m), GRAD(m, L->wpe), 0.0f, L->tensors[L->wpe].numel);
    if (rc == GPTX_OK && !m->cfg.tied_head)
        rc = OPS(m)->fill_f32(BE(m), GRAD(m, L->wte), 0.0f, L->tensors[L->wte].numel);
    if (rc != GPTX_OK) /* the tensors not reached still hold what zero_grad cleared */
        (void)OPS(m)->fill_f32(BE(m), m->grads, 0.0f, m->layout.nparams);
    return rc;
}

int gptx_model_backward_hooked(gptx_model *m, float loss_scale, gptx_grads_ready_fn ready,
                               void *arg, const char *func) {
    GPTX_TRY(gptx_model_backward_check(m, loss_scale, func));
    if (ready && m->exact_bins) /* lib/comm never asks: its buckets fall back */
        return gptx_fail(GPTX_ERR_UNSUPPORTED, func,
                         "overlapped gradient buckets reduce fp32 gradients as backward makes "
                         "them; a rank_invariant context adds every pass first");
    backward_args ba = {ready, arg, !m->dlogits_ready,
                        m->loss_tokens > 0 ? loss_scale / (float)m->loss_tokens : 0.0f};
    /* a hook reduces each region as it becomes final: it must see the
     * accumulated gradients, and they change after their sums */
    if (ready) GPTX_TRY(gptx_model_grads_materialize(m));
    m->grad_sumsq_valid = 0;
    m->grad_sumsq_count = ready ? -1 : 0; /* -1: no sums this backward */
    m->phase = GPTX_PHASE_BACKWARD; /* logits are overwritten from here on */
    m->dlogits_ready = 0;
    GPTX_TRY(gptx_model_exact_before_backward(m)); /* this pass's own gradient, from zero */
    GPTX_TRY(backward_body(m, &ba));
    const gptx_layout *L = &m->layout;
    /* not in the segment: the backend buckets the ids on the host */
    GPTX_TRY(OPS(m)->embedding_backward(BE(m), GRAD(m, L->wte), GRAD(m, L->wpe), m->dresidual,
                                        m->inputs, m->B, m->T, m->cfg.n_embd));
    /* wte (also a tied head) and wpe are final only now */
    GPTX_TRY(grad_final(m, L->wte));
    GPTX_TRY(grad_final(m, L->wpe));
    m->grad_sumsq_valid = m->grad_sumsq_count == L->ntensors;
    GPTX_TRY(gptx_model_exact_fold(m)); /* rank-invariant: into the exact sum */
    if (ready) { /* wte, wpe: the start of the buffer */
        size_t hi = m->cfg.n_layer > 0 ? L->tensors[L->layers[0].ln1_w].offset
                                       : L->tensors[L->lnf_w].offset;
        GPTX_TRY(ready(arg, 0, hi));
    }
    return GPTX_OK;
}

/* Segment BACKWARD (or, with a hook, the same ops without a graph): from
 * the logits' gradient down to dresidual of the embedding. */
static int backward_segment(gptx_model *m, const void *args) {
    const backward_args *ba = args;
    gptx_grads_ready_fn ready = ba->ready;
    void *arg = ba->arg;
    const gptx_backend_ops *ops = OPS(m);
    gptx_backend *be = BE(m);
    const gptx_layout *L = &m->layout;
    int B = m->B, T = m->T, C = m->cfg.n_embd, NH = m->cfg.n_head;
    int V = m->cfg.vocab_size, Vp = m->cfg.padded_vocab_size, N = B * T;
    size_t BTC = (size_t)N * C;
    /* else gptx_model_forward_backward's cross-entropy did it */
    if (ba->ce_backward)
        GPTX_TRY(ops->crossentropy_backward(be, m->logits, m->loss_lse, m->targets, N, V, Vp,
                                            ba->dloss));
    const float *last = m->cfg.n_layer > 0 ? m->acts[m->cfg.n_layer - 1].residual3 : m->encoded;
    GPTX_TRY(ops->matmul_backward(be, m->dln, GRAD(m, L->lm_head), NULL, m->logits, m->lnf,
                                  PARAM(m, L->lm_head), N, C, Vp));
    if (!m->cfg.tied_head) GPTX_TRY(grad_final(m, L->lm_head)); /* tied: after the embedding */
    GPTX_TRY(ops->fill_act && m->res_bytes == m->act_bytes
                 ? ops->fill_act(be, m->dresidual, 0.0f, BTC)
                 : ops->fill_f32(be, m->dresidual, 0.0f, BTC)); /* [res] fp32 or the act type */
    GPTX_TRY(ln_backward_residual(m, GRAD(m, L->lnf_w), GRAD(m, L->lnf_b), m->dln, last,
                                  MASTER(m, L->lnf_w), m->lnf_mean, m->lnf_rstd, N, C,
                                  m->cfg.n_layer > 0));
    GPTX_TRY(grad_final(m, L->lnf_w));
    GPTX_TRY(grad_final(m, L->lnf_b));
    /* ln_f (and an untied lm_head, which follows it) are final; a tied head
     * is wte, which the embedding backward still adds to */
    if (ready) {
        size_t lo = L->tensors[L->lnf_w].offset;
        size_t hi = m->cfg.tied_head ? L->tensors[L->lnf_b].offset + L->tensors[L->lnf_b].numel
                                     : L->nparams;
        GPTX_TRY(ready(arg, lo, hi - lo));
    }
    for (int l = m->cfg.n_layer - 1; l >= 0; l--) {
        const gptx_layer_params *p = &L->layers[l];
        gptx_layer_acts *a = &m->acts[l];
        const float *residual = l == 0 ? m->encoded : m->acts[l - 1].residual3;
        /* residual3 = residual2 + fcproj: dfcproj = dresidual */
        const float *dproj = NULL;
        GPTX_TRY(dresidual_as_act(m, BTC, &dproj));
        // dfch = (dresidual @ W) * gelu'(fch)
        GPTX_TRY(ops->matmul_backward_dgelu(be, m->dfch, GRAD(m, p->fc_proj_w),
                                            GRAD(m, p->fc_proj_b), dproj, a->fch_gelu,
                                            PARAM(m, p->fc_proj_w), a->fch, N, 4 * C, C));
        GPTX_TRY(grad_final(m, p->fc_proj_w));
        GPTX_TRY(grad_final(m, p->fc_proj_b));
        GPTX_TRY(ops->matmul_backward(be, m->dln, GRAD(m, p->fc_w), GRAD(m, p->fc_b), m->dfch, a->ln2,
                                      PARAM(m, p->fc_w), N, C, 4 * C));
        GPTX_TRY(grad_final(m, p->fc_w));
        GPTX_TRY(grad_final(m, p->fc_b));
        GPTX_TRY(ln_backward_residual(m, GRAD(m, p->ln2_w), GRAD(m, p->ln2_b), m->dln,
                                      a->residual2, MASTER(m, p->ln2_w), a->ln2_mean,
                                      a->ln2_rstd, N, C, 1));
        GPTX_TRY(grad_final(m, p->ln2_w));
        GPTX_TRY(grad_final(m, p->ln2_b));
        /* residual2 = residual + attproj: dattproj = dresidual */
        GPTX_TRY(dresidual_as_act(m, BTC, &dproj));
        GPTX_TRY(ops->matmul_backward(be, m->datty, GRAD(m, p->attn_proj_w), GRAD(m, p->attn_proj_b),
                                      dproj, a->atty, PARAM(m, p->attn_proj_w), N, C, C));
        GPTX_TRY(grad_final(m, p->attn_proj_w));
        GPTX_TRY(grad_final(m, p->attn_proj_b));
        GPTX_TRY(ops->attention_backward(be, m->dqkv, m->datty, a->qkv, a->atty, a->att_lse,
                                         a->att_state, m->att_work, B, T, C, NH));
        GPTX_TRY(ops->qkv_backward(be, m->dln, GRAD(m, p->qkv_w), GRAD_OR_NULL(m, p->qkv_b),
                                   m->dqkv, a->ln1, PARAM(m, p->qkv_w), m->qkv_work, N, C));
        GPTX_TRY(grad_final(m, p->qkv_w));
        GPTX_TRY(grad_final(m, p->qkv_b)); /* -1 without a bias: nothing */
        GPTX_TRY(ln_backward_residual(m, GRAD(m, p->ln1_w), GRAD(m, p->ln1_b), m->dln, residual,
                                      MASTER(m, p->ln1_w), a->ln1_mean, a->ln1_rstd, N, C,
                                      l > 0));
        GPTX_TRY(grad_final(m, p->ln1_w));
        GPTX_TRY(grad_final(m, p->ln1_b));
        if (ready) {
            size_t lo, hi;
            layer_region(m, l, &lo, &hi);
            GPTX_TRY(ready(arg, lo, hi - lo));
        }
    }
    return GPTX_OK;
}

/* ---- inspection ------------------------------------------------------------- */

int gptx_model_get_logits(const gptx_model *m, float *dst, size_t count) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(dst);
    if (m->phase != GPTX_PHASE_FORWARD)
        return GPTX_FAIL(GPTX_ERR_STATE, "%s",
                         m->phase == GPTX_PHASE_BACKWARD
                             ? "logits were overwritten by backward; run forward again"
                             : "no forward pass has completed");
    size_t want = (size_t)m->B * m->T * m->cfg.padded_vocab_size;
    if (count != want)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "count is %zu; logits hold B*T*padded_vocab = %zu", count,
                         want);
    return download_act(m, dst, m->logits, count);
}

int gptx_model_num_loss_tokens(const gptx_model *m, int64_t *count) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(count);
    *count = m->loss_tokens;
    return GPTX_OK;
}

size_t gptx_model_num_parameters(const gptx_model *m) {
    if (gptx_handle_check(m, GPTX_KIND_MODEL, "m", __func__) != GPTX_OK) return 0;
    return m->layout.nparams;
}

int gptx_model_num_tensors(const gptx_model *m) {
    GPTX_CHECK_HANDLE(m, GPTX_KIND_MODEL);
    return m->layout.ntensors;
}

int gptx_tensor_info_init_sized(gptx_tensor_info *info, size_t size) {
    static const gptx_tensor_info zero = {.struct_size = GPTX_TENSOR_INFO_SIZE};
    return gptx_struct_init(info, size, &zero, &gptx_desc_tensor_info, __func__, "info");
}

int gptx_model_tensor_info(const gptx_model *m, int index, gptx_tensor_info *info) {
    GPTX_CHECK_HANDLE(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(info);
    GPTX_TRY(gptx_struct_check_size(info->struct_size, &gptx_desc_tensor_info, __func__, "info"));
    if (index < 0 || index >= m->layout.ntensors)
        return GPTX_FAIL(GPTX_ERR_INVALID, "index is %d; the model has %d tensors", index,
                         m->layout.ntensors);
    const gptx_param_desc *t = &m->layout.tensors[index];
    gptx_tensor_info full;
    gptx_tensor_info_init(&full);
    full.name = t->name;
    full.ndim = t->ndim;
    for (int d = 0; d < GPTX_MAX_DIMS; d++) full.shape[d] = d < t->ndim ? t->shape[d] : 0;
    full.numel = t->numel;
    return gptx_struct_write(info, &full, &gptx_desc_tensor_info, __func__, "info");
}

int gptx_model_find_tensor(const gptx_model *m, const char *name, int *index) {
    GPTX_CHECK_HANDLE(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(name);
    GPTX_CHECK_NULL(index);
    int i = gptx_layout_find(&m->layout, name);
    if (i < 0) return GPTX_FAIL(GPTX_ERR_NOT_FOUND, "no parameter named '%s'", name);
    *index = i;
    return GPTX_OK;
}

static int lookup(const gptx_model *m, const char *name, size_t count, const gptx_param_desc **out) {
    int i;
    GPTX_TRY(gptx_model_find_tensor(m, name, &i));
    const gptx_param_desc *t = &m->layout.tensors[i];
    if (count != t->numel)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "count is %zu; '%s' has %zu elements", count, name, t->numel);
    *out = t;
    return GPTX_OK;
}

int gptx_model_get_parameter(const gptx_model *m, const char *name, float *dst, size_t count) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(dst);
    const gptx_param_desc *t = NULL;
    GPTX_TRY(lookup(m, name, count, &t));
    return gptx_param_download(m->ctx, dst, gptx_param_at(m->ctx, m->params, t->offset), count);
}

int gptx_model_set_parameter(gptx_model *m, const char *name, const float *src, size_t count) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(src);
    const gptx_param_desc *t = NULL;
    GPTX_TRY(lookup(m, name, count, &t));
    for (size_t i = 0; i < count; i++)
        if (!isfinite(src[i]))
            return GPTX_FAIL(GPTX_ERR_NON_FINITE, "src[%zu] for '%s' is not finite", i, name);
    m->phase = GPTX_PHASE_NONE; /* saved activations no longer match */
    gptx_model_params_changed(m);
    return gptx_param_upload(m->ctx, gptx_param_at(m->ctx, m->params, t->offset), src, count);
}

int gptx_model_get_gradient(const gptx_model *m, const char *name, float *dst, size_t count) {
    GPTX_ENTER(m, GPTX_KIND_MODEL);
    GPTX_CHECK_NULL(dst);
    const gptx_param_desc *t = NULL;
    GPTX_TRY(lookup(m, name, count, &t));
    /* a pending zero_grad becomes the zeros it promised (the model's
     * gradients are unchanged as the caller sees them) */
    GPTX_TRY(gptx_model_grads_materialize((gptx_model *)m));
    return OPS(m)->download_f32(BE(m), dst, m->grads + t->offset, count);
}
