/*
 * gptx — experimental API: kernel variants for ablation studies and CUDA
 * graph counters.
 *
 * Nothing here is covered by the ABI promise of <gptx/gptx.h>: keys, values
 * and functions may change or disappear in any release, and a program that
 * uses them should be rebuilt against each new header. The functions are
 * exported under the symbol version GPTX_EXPERIMENTAL, apart from the stable
 * GPTX_1, and the ABI records in abi/ leave them out. Knobs are keys of one
 * setter, so adding one never grows a stable struct (zstd's experimental
 * parameters follow the same idea).
 */
#ifndef GPTX_GPTX_EXPERIMENTAL_H
#define GPTX_GPTX_EXPERIMENTAL_H

#include <gptx/gptx.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel variants. Each computes the same function as the default within the
 * tolerances in docs/ablation.md; the defaults are the fast paths. */
typedef enum gptx_variant {
    GPTX_VARIANT_ATTENTION = 1,       /* gptx_attention_impl (default GPTX_ATTENTION_FLASH) */
    GPTX_VARIANT_FUSED_QKV = 2,       /* 1 = one (3C, C) product (default); 0 = separate Q, K,
                                       * V products + concat */
    GPTX_VARIANT_FUSED_NORM_GELU = 3, /* 1 = fused LayerNorm/GELU kernels (default); 0 =
                                       * step-by-step passes */
    GPTX_VARIANT_FUSED_ADAMW = 4      /* 1 = one AdamW pass over all parameters (default);
                                       * 0 = one pass per tensor */
} gptx_variant;

typedef enum gptx_attention_impl {
    GPTX_ATTENTION_FLASH = 0,     /* per-row log-sum-exp saved, probabilities recomputed (on
                                   * CUDA: tensor cores where they apply) */
    GPTX_ATTENTION_NAIVE = 1,     /* explicit (B, NH, T, T) probabilities and a float causal mask */
    GPTX_ATTENTION_FLASH_SIMT = 2 /* CUDA only: flash attention in fp32 on CUDA cores, never
                                   * the tensor-core kernels (their reference and baseline) */
} gptx_attention_impl;

/* Sets a variant of ctx for the models and optimizers created afterwards
 * (those that exist keep the variants they were created with).
 * GPTX_ERR_INVALID for an unknown key or value. A backend without a variant
 * fails at gptx_model_create (GPTX_ERR_UNSUPPORTED). */
GPTX_API int gptx_context_set_variant(gptx_context *ctx, int variant, int value);
GPTX_API int gptx_context_get_variant(const gptx_context *ctx, int variant, int *value);
/* How many graphs the context captured and how many times it replayed one
 * (gptx_context_options.cuda_graphs); both 0 on the CPU and with graphs off.
 * Either pointer may be NULL. */
GPTX_API int gptx_context_graph_counts(const gptx_context *ctx, int64_t *captures,
                                       int64_t *replays);

#ifdef __cplusplus
}
#endif

#endif /* GPTX_GPTX_EXPERIMENTAL_H */
