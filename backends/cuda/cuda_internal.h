/* CUDA backend internals shared by the .cu files of backends/cuda: the
 * backend state, launch and error helpers. With GPTX_CUDA_EMU the same code
 * compiles as plain C++ against the tests' CPU emulation (tests/gpu/emu). */
#ifndef GPTX_CUDA_INTERNAL_H
#define GPTX_CUDA_INTERNAL_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPTX_CUDA_EMU
/* the tests' CPU emulation (tests/gpu/emu/cuda_emu.h) supplies the CUDA API
 * subset, GPTX_CUDA_FN, GPTX_LAUNCH and GPTX_CUDA_MAX_BLOCKS */
#include "cuda_emu.h"
#else
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define GPTX_CUDA_FN
#define GPTX_LAUNCH(kernel, grid, block, stream, ...)                                              \
    kernel<<<(grid), (block), 0, (stream)>>>(__VA_ARGS__)
/* with `smem` bytes of dynamic shared memory, reached in the kernel through
 * GPTX_DYNAMIC_SMEM (above 48 KiB the kernel's
 * cudaFuncAttributeMaxDynamicSharedMemorySize must have been raised) */
#define GPTX_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)                                   \
    kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
#define GPTX_DYNAMIC_SMEM(name) extern __shared__ __align__(128) unsigned char name[]
#endif

extern "C" {
#include "cuda_cache.h"
#include "cuda_ops.h"
#include "errors.h"
}

/* Activation storage: float, or bf16 under the bf16 policies. Kernels that
 * touch activations are templates over the element type and compute in
 * fp32: gptx_ld widens, gptx_st rounds to nearest even. */
typedef __nv_bfloat16 gptx_bf16;
static __device__ __forceinline__ float gptx_ld(float x) { return x; }
static __device__ __forceinline__ float gptx_ld(gptx_bf16 x) { return __bfloat162float(x); }
static __device__ __forceinline__ void gptx_st(float *p, float v) { *p = v; }
static __device__ __forceinline__ void gptx_st(gptx_bf16 *p, float v) { *p = __float2bfloat16(v); }
static __device__ __forceinline__ int gptx_imin(int a, int b) { return a < b ? a : b; }
/* the sum of v over a warp, a butterfly: every lane ends with the same bits,
 * in an order fixed by the lane numbers */
static __device__ __forceinline__ float gptx_warp_sum(float v) {
    for (int o = 16; o > 0; o /= 2) v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Launches kernel<act_t> with act_t the backend's activation type; the
 * arguments cast activation pointers to (act_t *). Needs `be` in scope. */
#define GPTX_LAUNCH_ACT(kernel, grid, block, stream, ...)                                          \
    do {                                                                                           \
        if (be->act_bf16) {                                                                        \
            typedef gptx_bf16 act_t;                                                               \
            GPTX_LAUNCH(kernel<act_t>, grid, block, stream, __VA_ARGS__);                          \
        } else {                                                                                   \
            typedef float act_t;                                                                   \
            GPTX_LAUNCH(kernel<act_t>, grid, block, stream, __VA_ARGS__);                          \
        }                                                                                          \
    } while (0)

/* The residual stream ([res], lib/core/backend.h: the embedding output, the
 * block sums, their gradient) and the LayerNorm and embedding weights ([p])
 * share one type: fp32, except under bf16_pure. GPTX_LAUNCH_RES launches
 * kernel<res_t>, GPTX_LAUNCH_ACT_RES kernel<act_t, res_t>. */
#define GPTX_LAUNCH_RES(kernel, grid, block, stream, ...)                                          \
    do {                                                                                           \
        if (be->act_bf16 && !be->res_f32) {                                                        \
            typedef gptx_bf16 res_t;                                                               \
            GPTX_LAUNCH(kernel<res_t>, grid, block, stream, __VA_ARGS__);                          \
        } else {                                                                                   \
            typedef float res_t;                                                                   \
            GPTX_LAUNCH(kernel<res_t>, grid, block, stream, __VA_ARGS__);                          \
        }                                                                                          \
    } while (0)
#define GPTX_LAUNCH_ACT_RES(kernel, grid, block, stream, ...)                                      \
    do {                                                                                           \
        if (!be->act_bf16) {                                                                       \
            typedef float act_t;                                                                   \
            typedef float res_t;                                                                   \
            auto gptx_kernel_ = &kernel<act_t, res_t>; /* one macro argument */                \
            GPTX_LAUNCH(gptx_kernel_, grid, block, stream, __VA_ARGS__);                          \
        } else if (be->res_f32) {                                                                  \
            typedef gptx_bf16 act_t;                                                               \
            typedef float res_t;                                                                   \
            auto gptx_kernel_ = &kernel<act_t, res_t>; /* one macro argument */                \
            GPTX_LAUNCH(gptx_kernel_, grid, block, stream, __VA_ARGS__);                          \
        } else {                                                                                   \
            typedef gptx_bf16 act_t;                                                               \
            typedef gptx_bf16 res_t;                                                               \
            auto gptx_kernel_ = &kernel<act_t, res_t>; /* one macro argument */                \
            GPTX_LAUNCH(gptx_kernel_, grid, block, stream, __VA_ARGS__);                          \
        }                                                                                          \
    } while (0)

/* Page-locked host buffer reused across calls. An asynchronous copy that
 * reads or writes it records `done`; the next reserve waits for it, so the
 * host never touches the buffer while a copy still uses it. */
typedef struct gptx_cuda_pinned {
    void *host;
    size_t cap;
    cudaEvent_t done;
    int pending;
} gptx_cuda_pinned;

/* One cached cuBLASLt heuristic answer. */
typedef struct gptx_cuda_algo {
    int valid; /* 0 empty, 1 algo, 2 no algorithm for this key */
    int key[16];
    cublasLtMatmulAlgo_t algo;
} gptx_cuda_algo;

#define GPTX_CUDA_ALGO_CACHE 64

/* AdamW's range table on the device, kept while the ranges stay the same:
 * the step then neither uploads nor waits for the host. */
#define GPTX_CUDA_ADAMW_TABLES 4
typedef struct gptx_cuda_adamw_table {
    void *host;   /* the table as built (malloc), to recognise it */
    void *dev;    /* its device copy */
    size_t bytes; /* 0: slot unused */
    size_t cap;   /* bytes held by host and dev */
    uint64_t used; /* last use, for eviction */
} gptx_cuda_adamw_table;

/* One captured op sequence of lib/ (graph_begin/graph_end). */
#define GPTX_CUDA_GRAPH_SEGMENTS 4
#define GPTX_CUDA_GRAPH_KEY 24
typedef struct gptx_cuda_graph {
    uint64_t key[GPTX_CUDA_GRAPH_KEY]; /* lib/'s signature of the sequence */
    int nkey;                          /* 0: none seen yet */
    cudaGraphExec_t exec; /* NULL: the key was seen once, not captured */
    int capturing;
    int stale;   /* the backend scratch moved: exec may use a freed block */
    int backoff; /* a capture of this key failed: run it normally until the key changes */
    /* scratch blocks the scratch outgrew during this graph's capture: its
     * earlier nodes use them, so they live as long as the graph */
    void **retired;
    int nretired, retired_cap;
} gptx_cuda_graph;

struct gptx_backend {
    int device, ndevices;
    char device_name[256];
    int cc_major, cc_minor, sm_count;
    int precision;     /* gptx_precision in effect (DEFAULT resolved) */
    int act_bf16;      /* activations and the weight copy are bf16 (BF16 policies) */
    int param_bf16;    /* parameters and AdamW moments are bf16 (BF16_PURE) */
    int res_f32;       /* the residual stream stays fp32 (bf16 mixed, as torch.autocast) */
    int stochastic_rounding; /* BF16_PURE AdamW rounds stochastically */
    int deterministic; /* context option (every kernel here is deterministic) */
    cudaStream_t compute, copy;
    cudaEvent_t ev_compute, ev_copy;
    cublasLtHandle_t lt;
    void *lt_workspace;
    size_t lt_workspace_bytes;
    gptx_cuda_algo algos[GPTX_CUDA_ALGO_CACHE];
    int algo_next;
    gptx_cuda_cache cache;
    /* per-op device scratch (stream-ordered: reused by the next op) */
    void *scratch;
    size_t scratch_bytes;
    gptx_cuda_pinned stage[2]; /* upload staging, alternating */
    int stage_next;
    gptx_cuda_pinned partials; /* reduction partials, device -> host */
    gptx_cuda_pinned small;    /* small tables host -> device (buckets, AdamW ranges) */
    gptx_cuda_adamw_table adamw[GPTX_CUDA_ADAMW_TABLES];
    void *adamw_build; /* host, the table being built */
    size_t adamw_build_cap;
    uint64_t adamw_clock;
    /* token ids of the last embedding_forward, copied to the host
     * asynchronously so embedding_backward can bucket them without a stall */
    gptx_cuda_pinned ids;
    const int32_t *ids_dev;
    size_t ids_count;
    int32_t *bucket_counts; /* host, for the counting sort */
    size_t bucket_counts_cap;
    int graphs; /* context option cuda_graphs */
    gptx_cuda_graph graph[GPTX_CUDA_GRAPH_SEGMENTS];
    int capture_segment; /* the segment being captured, -1 when none */
    int64_t graph_captures, graph_replays;
    /* tensor-core attention (cuda_flash.cu): the tile configuration of the
     * default table (1..GPTX_CUDA_FLASH_VARIANTS; environment
     * GPTX_CUDA_FLASH_TILES), the device's shared memory per block, and the
     * configurations that need more (bit v) */
    int flash_variant;
    int smem_optin;
    unsigned flash_unfit;
};

/* GPTX_ERR_BACKEND naming the CUDA call that failed. */
#define GPTX_CUDA_TRY(call)                                                                        \
    do {                                                                                           \
        cudaError_t gptx_cuda_err_ = (call);                                                       \
        if (gptx_cuda_err_ != cudaSuccess)                                                         \
            return GPTX_FAIL(GPTX_ERR_BACKEND, "%s failed: %s", #call,                             \
                             cudaGetErrorString(gptx_cuda_err_));                                  \
    } while (0)

/* After a launch: configuration errors surface here, execution errors at
 * the next synchronizing call. */
#define GPTX_CUDA_LAUNCHED(what)                                                                   \
    do {                                                                                           \
        cudaError_t gptx_cuda_err_ = cudaGetLastError();                                           \
        if (gptx_cuda_err_ != cudaSuccess)                                                         \
            return GPTX_FAIL(GPTX_ERR_BACKEND, "kernel %s: %s", (what),                            \
                             cudaGetErrorString(gptx_cuda_err_));                                  \
    } while (0)

/* The smallest op scratch (the emulation sets less, so tests see it grow). */
#ifndef GPTX_CUDA_SCRATCH_MIN
#define GPTX_CUDA_SCRATCH_MIN ((size_t)1 << 20)
#endif

/* Blocks for a grid-stride loop over n items (at least 1, at most a cap;
 * the CPU emulation sets a small cap so every thread loops). */
#ifndef GPTX_CUDA_MAX_BLOCKS
#define GPTX_CUDA_MAX_BLOCKS ((size_t)1 << 20)
#endif
static inline unsigned gptx_cuda_blocks(size_t n, unsigned threads) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > GPTX_CUDA_MAX_BLOCKS) b = GPTX_CUDA_MAX_BLOCKS;
    return (unsigned)b;
}

/* C linkage: internal symbols of the library carry plain gptx_ names. */
extern "C" {
/* Destroys the captured graphs (context teardown). */
GPTX_CUDA_FN void gptx_cuda_graphs_release(gptx_backend *be);
/* Makes the context's device current for the calling thread. */
GPTX_CUDA_FN int gptx_cuda_enter(gptx_backend *be);
/* Device scratch of at least `bytes`, valid until the next call (stream order). */
GPTX_CUDA_FN int gptx_cuda_scratch(gptx_backend *be, size_t bytes, void **ptr);
/* Waits for the buffer's pending copy, then grows it to `bytes`. */
GPTX_CUDA_FN int gptx_cuda_pinned_reserve(gptx_cuda_pinned *p, size_t bytes);
/* Records that a copy queued on `stream` uses the buffer. */
GPTX_CUDA_FN int gptx_cuda_pinned_mark(gptx_cuda_pinned *p, cudaStream_t stream);
/* Column sums of a row-major (N, C) activation-type matrix in fixed order into fp32 acc (C):
 * acc[c] += sum_n x[n, c] (x2 NULL), or for LayerNorm (x2 = inp):
 * acc[c] += sum_n x[n, c] * (x2[n, c] - mean[n]) * rstd[n] and
 * acc2[c] += sum_n x[n, c]. Two passes, no atomics. */
/* cuda_flash.cu: causal attention on tensor cores (bf16, head size 64 or
 * 128); gptx_cuda_flash_eligible says whether a call may take it. */
GPTX_CUDA_FN int gptx_cuda_flash_init(gptx_backend *be);
GPTX_CUDA_FN int gptx_cuda_flash_eligible(const gptx_backend *be, int C, int NH,
                                          const void *const *bufs, int nbufs);
/* variant: GPTX_CUDA_FLASH_DEFAULT or a tile configuration 1..N (cuda_ops.h) */
GPTX_CUDA_FN int gptx_cuda_flash_forward(gptx_backend *be, int variant, float *out, float *lse,
                                         const float *qkv, int B, int T, int C, int NH);
GPTX_CUDA_FN int gptx_cuda_flash_kv_forward(gptx_backend *be, int variant, float *out,
                                            float *lse, const float *qkv, const float *kcache,
                                            const float *vcache, int n, int pos0, int cap, int C,
                                            int NH);
GPTX_CUDA_FN int gptx_cuda_flash_backward(gptx_backend *be, int variant, float *dqkv,
                                          const float *dout, const float *qkv, const float *lse,
                                          const float *dsum, int B, int T, int C, int NH);
GPTX_CUDA_FN int gptx_cuda_column_sums(gptx_backend *be, float *acc, float *acc2, const float *x,
                                       const float *x2, const float *mean, const float *rstd, int N,
                                       int C);

}

#endif
