/* ZeRO-1: the optimizer's moments sharded over a communicator. Each rank
 * keeps m and v for its shard of the flat parameter buffer only (comm_shard:
 * about nparams / W floats each); a step is reduce-scatter of the
 * token-weighted gradients -> global norm from the shards' sums of squares
 * -> AdamW on this rank's shard -> all-gather of the parameters. */
#include <math.h>

#include "comm_internal.h"
#include "errors.h"
#include "model.h"
#include "optimizer.h"
#include "param_storage.h"

int gptx_optimizer_create_sharded(gptx_optimizer **out, gptx_model *model,
                                  const gptx_adamw_options *opts, gptx_comm *comm) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_ENTER(comm, GPTX_KIND_COMM);
    if (model->ctx != comm->ctx)
        return GPTX_FAIL(GPTX_ERR_MISMATCH,
                         "the model belongs to another context than the communicator");
    GPTX_TRY(gptx_comm_usable(comm, __func__));
    if (!gptx_comm_engine_takes_model_buffers(comm))
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "a sharded optimizer needs an engine that works on the context's buffers; "
                         "the '%s' engine stages a '%s' context's gradients through host memory "
                         "(use the NCCL engine, or gptx_optimizer_create)",
                         comm->engine->ops->name, model->ctx->ops->name);
    if (gptx_param_bytes(model->ctx) != sizeof(float))
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "a sharded optimizer needs fp32 parameters (its all-gather and the "
                         "gathered checkpoint moments are fp32); this context stores them as %s "
                         "(use gptx_optimizer_create)",
                         gptx_precision_name(model->ctx->precision));
    size_t lo, hi;
    comm_shard(model->layout.nparams, comm->engine->world_size, comm->engine->rank, &lo, &hi);
    GPTX_TRY(gptx_optimizer_create_part(out, model, opts, lo, hi - lo, __func__));
    gptx_handle_retain(&comm->h); /* released with the optimizer */
    (*out)->comm = comm;
    return GPTX_OK;
}

int gptx_optimizer_get_shard(const gptx_optimizer *opt, size_t *offset, size_t *count) {
    GPTX_CHECK_HANDLE(opt, GPTX_KIND_OPTIMIZER);
    GPTX_CHECK_NULL(offset);
    GPTX_CHECK_NULL(count);
    *offset = opt->shard_offset;
    *count = opt->shard_count;
    return GPTX_OK;
}

/* rank_invariant: every rank adds all ranks' bins (gptx_comm_exact_sum) and
 * takes the norm of the whole sum in one pass, as gptx_optimizer_step does:
 * the same bits on every rank, for every world size and for an unsharded
 * optimizer (a norm from the shards' sums would depend on where the shards
 * end); then AdamW on this rank's shard and the all-gather. */
static int sharded_exact_step(gptx_optimizer *opt, gptx_model *model, float *grad_norm) {
    gptx_comm *c = opt->comm;
    comm_engine *e = c->engine;
    size_t n = model->layout.nparams;
    double sumsq = 0.0;
    GPTX_TRY(gptx_comm_exact_sum(c, model));
    GPTX_TRY(opt->ops.sum_squares_to_host(opt->be, &sumsq, model->grads, n));
    float norm = (float)sqrt(sumsq);
    if (grad_norm) *grad_norm = norm;
    GPTX_TRY(gptx_optimizer_update(opt, norm, "gptx_optimizer_step_sharded"));
    if (e->world_size > 1)
        GPTX_TRY(gptx_comm_engine_result(c, e->ops->allgather(e, model->params, n)));
    return GPTX_OK;
}

int gptx_optimizer_step_sharded(gptx_optimizer *opt, gptx_model *model, int64_t local_tokens,
                                float *grad_norm) {
    GPTX_ENTER(opt, GPTX_KIND_OPTIMIZER);
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    if (model != opt->model)
        return GPTX_FAIL(GPTX_ERR_MISMATCH, "the optimizer was created for another model");
    if (!opt->comm)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "the optimizer is not sharded: create it with "
                         "gptx_optimizer_create_sharded, or use gptx_comm_average_gradients "
                         "and gptx_optimizer_step");
    if (local_tokens < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "local_tokens is %lld; must be >= 0",
                         (long long)local_tokens);
    gptx_comm *c = opt->comm;
    GPTX_HOLD(c, GPTX_KIND_COMM); /* its user may have destroyed it: the optimizer keeps it */
    GPTX_TRY(gptx_comm_usable(c, __func__));
    comm_engine *e = c->engine;
    gptx_context *ctx = model->ctx;
    size_t n = model->layout.nparams;
    float *grads = model->grads + opt->shard_offset;
    double sumsq = 0.0;
    if (model->exact_bins) /* the full sum on every rank, its norm below */
        return sharded_exact_step(opt, model, grad_norm);
    GPTX_TRY(gptx_model_grads_materialize(model)); /* a pending zero_grad */
    if (e->world_size > 1) {
        gptx_model_grads_changed(model);
        float scale = 0.0f;
        int uniform = 0;
        int64_t total = 0;
        GPTX_TRY(gptx_comm_token_scale(c, local_tokens, __func__, &scale, &uniform, &total));
        if (total == 0) /* nobody had a target: the mean gradient is 0 everywhere */
            GPTX_TRY(ctx->ops->fill_f32(ctx->be, model->grads, 0.0f, n));
        else
            GPTX_TRY(gptx_comm_engine_result(
                c, e->ops->reduce_scatter_grads(e, model->grads, n, scale, uniform)));
    }
    if (opt->shard_count > 0)
        GPTX_TRY(opt->ops.sum_squares_to_host(opt->be, &sumsq, grads, opt->shard_count));
    if (e->world_size > 1) /* added up in one order: the same norm on every rank */
        GPTX_TRY(gptx_comm_engine_result(c, e->ops->allreduce_host(e, &sumsq, 1, COMM_F64,
                                                              GPTX_COMM_SUM)));
    float norm = (float)sqrt(sumsq);
    if (grad_norm) *grad_norm = norm;
    /* a non-finite norm is the same on every rank: nobody updates, nobody gathers */
    GPTX_TRY(gptx_optimizer_update(opt, norm, __func__));
    if (e->world_size > 1)
        GPTX_TRY(gptx_comm_engine_result(c, e->ops->allgather(e, model->params, n)));
    return GPTX_OK;
}
