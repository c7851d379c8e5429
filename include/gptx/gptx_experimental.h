/*
 * gptx — experimental API: kernel variants for ablation studies, CUDA graph
 * counters and the per-op profiler.
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
    GPTX_VARIANT_FUSED_ADAMW = 4,     /* 1 = one AdamW pass over all parameters (default);
                                       * 0 = one pass per tensor */
    GPTX_VARIANT_ATTENTION_TILES = 5  /* 0 = the backend's tile configuration (default); CUDA:
                                       * 1..5 a tile configuration of the tensor-core attention
                                       * (docs/cuda.md; all give the same bits), for sweeps;
                                       * other backends have none (GPTX_ERR_UNSUPPORTED at
                                       * gptx_model_create) */
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

/* Per-op profiling (docs/timing.md, "Per-op profile"). With on = 1, the
 * models and optimizers created afterwards on ctx run every backend op
 * through a timing wrapper; those that exist keep how they were created (as
 * with variants), and on = 0 stops it for later ones. Off, nothing is
 * wrapped and nothing is paid. The clock: where the backend has device
 * events (CUDA), one recorded on the compute stream before and one after
 * each op, read only when the report is read (no synchronization per op);
 * else the host clock around the call (the CPU backend finishes an op
 * before it returns). A profiled model captures no CUDA graphs: a replayed
 * graph would issue no op to time. The report is the context's: every
 * profiled model and optimizer on it adds to it. GPTX_ERR_INVALID unless on
 * is 0 or 1. */
GPTX_API int gptx_context_set_profiling(gptx_context *ctx, int on);

typedef enum gptx_profile_clock {
    GPTX_PROFILE_HOST_CLOCK = 1,   /* CLOCK_MONOTONIC around each call */
    GPTX_PROFILE_DEVICE_EVENTS = 2 /* device time between events around each op */
} gptx_profile_clock;

/* One line of the report: every call of one backend op, and for the matrix
 * products one line per shape. */
typedef struct gptx_op_stat {
    const char *op;  /* the op's name in the backend table ("matmul_forward"); static */
    int c, oc;       /* products: width in and out (the op's C and OC); else 0 */
    int64_t calls;
    double seconds;  /* summed over the calls (device time with events) */
    double flops;    /* products and attention: their multiply-adds x 2, summed; else 0 */
} gptx_op_stat;

/* The report since profiling was enabled or last reset, in the order the
 * ops were first called: *count = its lines, of which the first
 * min(capacity, *count) are written to stats (stats may be NULL when
 * capacity is 0, to ask for the count). *clock (may be NULL) receives a
 * gptx_profile_clock. With device events this waits for the profiled work
 * to finish. GPTX_ERR_STATE when profiling was never enabled on ctx. */
GPTX_API int gptx_context_get_op_profile(gptx_context *ctx, gptx_op_stat *stats, int capacity,
                                         int *count, int *clock);
/* Forgets every line (profiling stays as it is); intervals not yet read are
 * dropped without waiting. GPTX_ERR_STATE when profiling was never enabled. */
GPTX_API int gptx_context_reset_op_profile(gptx_context *ctx);

/* The most threads a CPU context runs on this machine: options.num_threads
 * above it is GPTX_ERR_INVALID, and 0 (one per core) takes at most it. It
 * is max(1024, 8 per core), or less where the OpenBLAS gptx runs on serves
 * fewer threads (its work-buffer table: 2 x its build's MAX_THREADS, less
 * the caller's; 127 for a MAX_THREADS=64 build). A program checks its
 * --threads against it before creating a context. */
GPTX_API int gptx_cpu_max_threads(void);

#ifdef __cplusplus
}
#endif

#endif /* GPTX_GPTX_EXPERIMENTAL_H */
