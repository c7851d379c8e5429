/* AdamW over the model's flat parameter buffer (or one rank's shard of it):
 * one fused backend pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "model.h"
#include "optimizer.h"
#include "abi_struct.h"
#include "op_profile.h"
#include "param_storage.h"


GPTX_HANDLE_FIRST(gptx_optimizer);

static const gptx_adamw_options adamw_defaults = {
    .struct_size = GPTX_ADAMW_OPTIONS_SIZE,
    .lr = 3e-4f,
    .beta1 = 0.9f,
    .beta2 = 0.95f,
    .eps = 1e-8f,
    .weight_decay = 0.1f,
    .grad_clip = 1.0f,
    .decay_policy = GPTX_DECAY_MATRICES,
    .rounding_seed = 0,
};

int gptx_adamw_options_init_sized(gptx_adamw_options *o, size_t size) {
    return gptx_struct_init(o, size, &adamw_defaults, &gptx_desc_adamw_options, __func__, "opts");
}

static int validate(const gptx_adamw_options *o) {
    if (!(o->lr >= 0.0f && o->lr <= GPTX_ADAMW_LR_MAX))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.lr is %g; must be in [0, %g]", (double)o->lr,
                         (double)GPTX_ADAMW_LR_MAX);
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.beta1 is %g; must be in [0, 1)", (double)o->beta1);
    if (!(o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.beta2 is %g; must be in [0, 1)", (double)o->beta2);
    if (!(o->eps > 0.0f) || !isfinite(o->eps))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.eps is %g; must be finite and > 0", (double)o->eps);
    if (!(o->weight_decay >= 0.0f) || !isfinite(o->weight_decay))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.weight_decay is %g; must be finite and >= 0",
                         (double)o->weight_decay);
    if (!(o->grad_clip >= 0.0f) || !isfinite(o->grad_clip))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.grad_clip is %g; must be finite and >= 0 (0 = off)",
                         (double)o->grad_clip);
    if (o->decay_policy < GPTX_DECAY_MATRICES || o->decay_policy > GPTX_DECAY_NONE)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.decay_policy is %d; expected GPTX_DECAY_*",
                         o->decay_policy);
    return GPTX_OK;
}

/* The optimizer's release (handle.h); its model, and the communicator of a
 * sharded one, are released after it. */
static void release_optimizer(gptx_handle *h) {
    gptx_optimizer *opt = (gptx_optimizer *)h;
    gptx_context *ctx = opt->model->ctx;
    if (opt->m) ctx->ops->free(ctx->be, opt->m);
    if (opt->v) ctx->ops->free(ctx->be, opt->v);
    free(opt->ranges);
    free(opt->range_tensor);
    gptx_op_profile_detach(opt->profiled);
    if (opt->comm) gptx_handle_unref((gptx_handle *)opt->comm);
}

void gptx_optimizer_destroy(gptx_optimizer *opt) {
    gptx_handle_destroy(opt, GPTX_KIND_OPTIMIZER, "opt", __func__);
}

void gptx_optimizer_set_decay(gptx_optimizer *opt) {
    const gptx_adamw_options *o = &opt->opts;
    const gptx_layout *L = &opt->model->layout;
    for (int r = 0; r < opt->nranges; r++) {
        const gptx_param_desc *t = &L->tensors[opt->range_tensor[r]];
        int decays = o->decay_policy == GPTX_DECAY_ALL ||
                     (o->decay_policy == GPTX_DECAY_MATRICES && t->ndim == 2);
        opt->ranges[r].weight_decay = decays ? o->weight_decay : 0.0f;
    }
}

int gptx_optimizer_restore(gptx_optimizer *opt, const float *m_host, const float *v_host,
                           int64_t step, const gptx_adamw_options *opts) {
    gptx_context *ctx = opt->model->ctx;
    size_t off = opt->shard_offset, cnt = opt->shard_count;
    if (cnt > 0) GPTX_TRY(gptx_param_upload(ctx, opt->m, m_host + off, cnt));
    if (cnt > 0) GPTX_TRY(gptx_param_upload(ctx, opt->v, v_host + off, cnt));
    opt->step = step;
    opt->opts = *opts;
    gptx_optimizer_set_decay(opt);
    return GPTX_OK;
}

int gptx_optimizer_create_part(gptx_optimizer **out, gptx_model *model,
                               const gptx_adamw_options *in, size_t offset, size_t count,
                               const char *func) {
    *out = NULL;
    gptx_adamw_options o = adamw_defaults;
    if (in) GPTX_TRY(gptx_struct_read(&o, in, &gptx_desc_adamw_options, func, "opts"));
    GPTX_TRY(validate(&o));

    gptx_backend_ops ops;
    gptx_kernel_variants variants;
    GPTX_TRY(gptx_context_instance_ops(model->ctx, &ops, &variants));
    gptx_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&opt->h, GPTX_KIND_OPTIMIZER, &model->h, NULL, release_optimizer);
    opt->model = model;
    opt->opts = o;
    opt->ops = ops;
    opt->fused_copy = offset == 0 && count == model->layout.nparams && ops.adamw_copy != NULL;
    int rc = gptx_op_profile_attach(model->ctx, &opt->ops, &opt->be, &opt->profiled);
    if (rc != GPTX_OK) {
        gptx_optimizer_destroy(opt);
        return rc;
    }
    opt->shard_offset = offset;
    opt->shard_count = count;
    const gptx_layout *L = &model->layout;
    opt->ranges = calloc((size_t)L->ntensors, sizeof *opt->ranges);
    opt->range_tensor = calloc((size_t)L->ntensors, sizeof *opt->range_tensor);
    if (!opt->ranges || !opt->range_tensor) {
        gptx_optimizer_destroy(opt);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    /* each tensor's overlap with the part, split at its bounds */
    for (int i = 0; i < L->ntensors; i++) {
        const gptx_param_desc *t = &L->tensors[i];
        size_t lo = t->offset > offset ? t->offset : offset;
        size_t hi = t->offset + t->numel < offset + count ? t->offset + t->numel : offset + count;
        if (hi <= lo) continue;
        opt->ranges[opt->nranges] = (gptx_param_range){lo - offset, hi - lo, 0.0f};
        opt->range_tensor[opt->nranges++] = i;
    }
    gptx_optimizer_set_decay(opt);
    gptx_context *ctx = model->ctx;
    size_t n = count > 0 ? count : 1; /* a rank may own nothing */
    size_t bytes = n * gptx_param_bytes(ctx); /* [p] buffers */
    rc = ctx->ops->alloc(ctx->be, bytes, (void **)&opt->m);
    if (rc == GPTX_OK) rc = ctx->ops->alloc(ctx->be, bytes, (void **)&opt->v);
    if (rc == GPTX_OK) rc = gptx_param_fill(ctx, opt->m, 0.0f, n);
    if (rc == GPTX_OK) rc = gptx_param_fill(ctx, opt->v, 0.0f, n);
    if (rc != GPTX_OK) {
        gptx_optimizer_destroy(opt);
        return rc;
    }
    *out = opt;
    return GPTX_OK;
}

int gptx_optimizer_create(gptx_optimizer **out, gptx_model *model, const gptx_adamw_options *in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    return gptx_optimizer_create_part(out, model, in, 0, model->layout.nparams, __func__);
}

int gptx_optimizer_update(gptx_optimizer *opt, float norm, const char *func) {
    gptx_model *model = opt->model;
    if (!isfinite(norm))
        return gptx_fail(GPTX_ERR_NON_FINITE, func,
                         "gradient norm is %g; no parameter was updated (step %lld)", (double)norm,
                         (long long)opt->step);
    gptx_context *ctx = model->ctx;
    const gptx_adamw_options *o = &opt->opts;
    int64_t t = opt->step + 1;
    gptx_adamw_hyper h;
    h.lr = o->lr;
    h.beta1 = o->beta1;
    h.beta2 = o->beta2;
    h.eps = o->eps;
    h.bias_correction1 = (float)(1.0 - pow(o->beta1, (double)t));
    h.bias_correction2 = (float)(1.0 - pow(o->beta2, (double)t));
    /* same rule as torch.nn.utils.clip_grad_norm_ */
    h.grad_scale = 1.0f;
    if (o->grad_clip > 0.0f && norm > o->grad_clip) h.grad_scale = o->grad_clip / (norm + 1e-6f);
    h.rounding_seed = o->rounding_seed;
    h.step = t;
    float *params = gptx_param_at(ctx, model->params, opt->shard_offset);
    const float *grads = model->grads + opt->shard_offset; /* gradients are always fp32 */
    /* with the copy's refresh fused in, every parameter and its copy are
     * written in one pass; otherwise the copy follows before the next
     * forward (convert_weights) */
    float *copy = opt->fused_copy ? gptx_model_copy_at(model, opt->shard_offset) : NULL;
    if (opt->nranges > 0 && copy)
        GPTX_TRY(opt->ops.adamw_copy(opt->be, params, copy, grads, opt->m, opt->v, opt->ranges,
                                     opt->nranges, &h));
    else if (opt->nranges > 0)
        GPTX_TRY(opt->ops.adamw(opt->be, params, grads, opt->m, opt->v, opt->ranges, opt->nranges,
                                &h));
    opt->step = t;
    model->phase = GPTX_PHASE_NONE; /* saved activations no longer match */
    if (copy)
        gptx_model_params_and_copy_changed(model);
    else
        gptx_model_params_changed(model);
    return GPTX_OK;
}

int gptx_optimizer_step(gptx_optimizer *opt, gptx_model *model, float *grad_norm) {
    GPTX_ENTER(opt, GPTX_KIND_OPTIMIZER);
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    if (model != opt->model)
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "the optimizer was created for another model");
    if (opt->comm)
        return GPTX_FAIL(GPTX_ERR_STATE,
                         "this optimizer is sharded over a communicator (ZeRO-1): step it with "
                         "gptx_optimizer_step_sharded, which also averages the gradients");
    GPTX_TRY(gptx_model_grads_materialize(model)); /* a step right after zero_grad */
    /* the norm of THIS step's gradients: the per-tensor sums the last
     * backward left (bf16 on the CPU, no pass of its own), else one pass */
    double sumsq = 0.0;
    if (!gptx_model_grad_sumsq(model, &sumsq))
        GPTX_TRY(opt->ops.sum_squares_to_host(opt->be, &sumsq, model->grads,
                                              model->layout.nparams));
    float norm = (float)sqrt(sumsq);
    if (grad_norm) *grad_norm = norm;
    return gptx_optimizer_update(opt, norm, __func__);
}

int gptx_optimizer_set_lr(gptx_optimizer *opt, float lr) {
    GPTX_ENTER(opt, GPTX_KIND_OPTIMIZER);
    if (!(lr >= 0.0f && lr <= GPTX_ADAMW_LR_MAX)) /* NaN fails both */
        return GPTX_FAIL(GPTX_ERR_INVALID, "lr is %g; must be in [0, %g]", (double)lr,
                         (double)GPTX_ADAMW_LR_MAX);
    opt->opts.lr = lr;
    return GPTX_OK;
}

int gptx_optimizer_get_lr(const gptx_optimizer *opt, float *lr) {
    GPTX_ENTER(opt, GPTX_KIND_OPTIMIZER);
    GPTX_CHECK_NULL(lr);
    *lr = opt->opts.lr;
    return GPTX_OK;
}

int gptx_optimizer_get_step(const gptx_optimizer *opt, int64_t *step) {
    GPTX_ENTER(opt, GPTX_KIND_OPTIMIZER);
    GPTX_CHECK_NULL(step);
    *step = opt->step;
    return GPTX_OK;
}

int gptx_optimizer_get_options(const gptx_optimizer *opt, gptx_adamw_options *opts) {
    GPTX_ENTER(opt, GPTX_KIND_OPTIMIZER);
    GPTX_CHECK_NULL(opts);
    return gptx_struct_write(opts, &opt->opts, &gptx_desc_adamw_options, __func__, "opts");
}
