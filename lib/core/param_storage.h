/* Parameter-class buffers ([p] in backend.h: parameters and AdamW moments)
 * as the backend stores them: fp32, or bf16 under the pure-bf16 policy.
 * lib/ never looks inside; it sizes, offsets and copies them through these
 * helpers, which fall back to the fp32 entries when the backend has no
 * [p] entries. */
#ifndef GPTX_PARAM_STORAGE_H
#define GPTX_PARAM_STORAGE_H

#include <stddef.h>

#include "context.h"

/* The backend's storage classes ({4, 0, 4} when it reports none). */
void gptx_context_storage(const gptx_context *ctx, gptx_backend_storage *out);
/* Bytes per element of a [p] buffer. */
size_t gptx_param_bytes(const gptx_context *ctx);
/* The view `elems` elements past the start of a [p] buffer. */
float *gptx_param_at(const gptx_context *ctx, float *base, size_t elems);
int gptx_param_upload(gptx_context *ctx, float *dst, const float *host, size_t n);
int gptx_param_download(gptx_context *ctx, float *host, const float *src, size_t n);
int gptx_param_fill(gptx_context *ctx, float *dst, float value, size_t n);

#endif
