/* Optimizer internals, shared with the checkpoint code and the sharded
 * (ZeRO-1) step in comm_zero.c. */
#ifndef GPTX_OPTIMIZER_H
#define GPTX_OPTIMIZER_H

#include <stdint.h>

#include "backend.h"
#include "model.h"

/* The learning rates the optimizer takes: [0, GPTX_ADAMW_LR_MAX]. AdamW
 * moves each parameter by about lr per step whatever the gradient's scale,
 * so an lr of 10 already rewrites GPT-2's weights (of order 0.02-1) each
 * step; anything above is a typo (6e4 for 6e-4) or a runaway schedule, and
 * refusing it says so at once instead of a loss in the thousands later. The
 * same bound as gptx-train's --lr. */
#define GPTX_ADAMW_LR_MAX 10.0f

struct gptx_optimizer {
    gptx_handle h;     /* first (handle.h); its parent is model */
    gptx_model *model; /* the only model this optimizer may update */
    gptx_adamw_options opts;
    /* The part of the flat parameter buffer this optimizer updates: all of
     * it, or this rank's shard [shard_offset, shard_offset + shard_count)
     * when sharded over comm (ZeRO-1). m and v hold shard_count floats each
     * (device buffers); ranges are relative to shard_offset. */
    gptx_comm *comm; /* NULL: not sharded */
    size_t shard_offset, shard_count;
    float *m, *v;
    gptx_param_range *ranges;
    int *range_tensor; /* the layout tensor each range belongs to */
    int nranges;
    int64_t step;
    /* the table the gradient norm and AdamW run on: the context's with its
     * kernel variants at creation (backend.h instance_ops), and the backend
     * argument its entries take (the profiler's stand-in when profiled,
     * lib/core/op_profile.h) */
    gptx_backend_ops ops;
    gptx_backend *be;
    struct gptx_profiled *profiled;
    /* whether ops.adamw_copy may be used: the model keeps a compute copy
     * and this optimizer updates every parameter, so the copy is whole
     * afterwards (a ZeRO-1 shard is not: the gathered parameters still need
     * convert_weights) */
    int fused_copy;
};

/* Creates an optimizer over [offset, offset + count) of model's parameters;
 * errors are reported as func. */
int gptx_optimizer_create_part(gptx_optimizer **out, gptx_model *model,
                               const gptx_adamw_options *in, size_t offset, size_t count,
                               const char *func);
/* Weight decay per range from opts.decay_policy and opts.weight_decay. */
void gptx_optimizer_set_decay(gptx_optimizer *opt);
/* One AdamW update of the optimizer's part from grads at the given global
 * gradient norm (clipped by opts.grad_clip); fails with GPTX_ERR_NON_FINITE
 * (nothing updated) when the norm is not finite. Reported as func. */
int gptx_optimizer_update(gptx_optimizer *opt, float norm, const char *func);
/* A checkpoint's optimizer state: the moments m_host and v_host hold the
 * model's whole parameter count (a sharded optimizer takes its own slice),
 * step and opts are as saved; the weight decay per range follows opts. The
 * counters change only after both moments were uploaded. lib/io's
 * checkpoint code calls it instead of writing the optimizer's fields. */
int gptx_optimizer_restore(gptx_optimizer *opt, const float *m_host, const float *v_host,
                           int64_t step, const gptx_adamw_options *opts);

#endif
