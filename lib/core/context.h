/* The context: one backend instance, the options it was created with, the
 * precision policy the backend resolved, and the experimental kernel
 * variants and profiling that new models and optimizers take. */
#ifndef GPTX_CONTEXT_H
#define GPTX_CONTEXT_H

#include "backend.h"
#include "handle.h"

struct gptx_context {
    gptx_handle h; /* first: every handle's magic is at offset 0 (handle.h) */
    /* held by every call that reaches the backend, through the context or an
     * object made from it: the backend's thread pool, stream, staging
     * buffers and allocator serve one call at a time (recursive: calls nest) */
    pthread_mutex_t mu;
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

/* gptx_context_get_info's facts, for the library's own use on a context it
 * holds (its user may have destroyed the handle); the caller holds its lock. */
void gptx_context_describe(const gptx_context *ctx, gptx_context_info *full);

/* "attention=flash qkv=fused norm_gelu=fused" (the forward variants). */
void gptx_kernel_variants_forward_text(const gptx_kernel_variants *v, char *buf, size_t cap);

#endif
