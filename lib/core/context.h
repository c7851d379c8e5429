/* The context: one backend instance, the options it was created with, the
 * precision policy the backend resolved, and the experimental kernel
 * variants and profiling that new models and optimizers take. */
#ifndef GPTX_CONTEXT_H
#define GPTX_CONTEXT_H

#include "backend.h"

struct gptx_context {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    gptx_context_options opts;
    int precision; /* opts.precision with DEFAULT resolved by the backend */
    gptx_kernel_variants variants;
    /* per-op profiling (op_profile.h): whether instances created now are
     * profiled, and the profiler they report to (NULL until first enabled) */
    int profiling;
    struct gptx_op_profiler *profiler;
};

/* A context on the backend table `ops` with validated options (what
 * gptx_context_create does once it has chosen the table; the CUDA emulation
 * tests use it with their own table). */
int gptx_context_create_on(gptx_context **out, const gptx_context_options *opts,
                           const gptx_backend_ops *ops);

/* The table a model or optimizer created now runs on: a copy of the
 * context's, with the entries the context's variants change replaced by the
 * backend (backend.h instance_ops); *v receives the variants. */
int gptx_context_instance_ops(const gptx_context *ctx, gptx_backend_ops *ops,
                              gptx_kernel_variants *v);

/* "attention=flash qkv=fused norm_gelu=fused" (the forward variants). */
void gptx_kernel_variants_forward_text(const gptx_kernel_variants *v, char *buf, size_t cap);

#endif
