/* bf16 matrix products of the CPU backend on oneDNN's matmul primitive
 * (cpu_dnnl.c; built with GPTX_HAVE_DNNL). Inputs bf16, accumulation fp32,
 * output bf16 or fp32 (optionally accumulated into). Also the fp32 products
 * (fp32 inputs and output) where GPTX_CPU_FP32_GEMM=onednn chooses them over
 * OpenBLAS (cpu_gemm.c), on the same tiles.
 *
 * Every product is cut into tiles of a fixed shape (GPTX_DNNL_TILE_M x
 * GPTX_DNNL_TILE_N output elements, the last row and column of tiles
 * smaller), each computed over the full K by one primitive call on one pool
 * thread. The tile shapes depend on the product's shape only, never on the
 * thread count: oneDNN's kernels choose their blocking from the shape they
 * are given (the columns of a 1000x1700x3072 product cut into one part per
 * thread give other bits for 1, 2 and 3 threads; test_cpu_bf16 catches it),
 * so cutting by thread count would break deterministic mode.
 * Primitives are created once per (tile shape, strides, types) and kept.
 * oneDNN runs on OpenMP here; every call is made with the OpenMP thread
 * count of the calling thread set to 1, so oneDNN never starts threads of
 * its own and nothing spins beside the pool. */
#ifndef GPTX_CPU_DNNL_H
#define GPTX_CPU_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* 256 x 768 measured fastest of 64..512 x 256..1536 on AMX (Sapphire Rapids,
 * 2 threads): gpt2-124M-short bf16 670 tokens/s against 559 with 128 x 256;
 * small 4520 against 4240 (docs/benchmarks.md) */
#define GPTX_DNNL_TILE_M 256
#define GPTX_DNNL_TILE_N 768

typedef struct gptx_cpu_dnnl gptx_cpu_dnnl;

/* C (M, N) = A (M, K) @ B (K, N) [+ bias], or C += A @ B. Element (i, j) of
 * a matrix is at ptr[i * row_stride + j * col_stride] (so a transposed
 * operand is only other strides); C is row-major with leading dimension
 * ldc. */
typedef struct gptx_cpu_matmul {
    int M, N, K;
    const uint16_t *A;
    size_t a_row, a_col;
    const uint16_t *B;
    size_t b_row, b_col;
    void *C;
    size_t ldc;
    int c_f32;             /* 1: C is fp32; 0: bf16 (rounded once, as cpu_bf16.h) */
    int accumulate;        /* 1: C += A @ B (fp32 C only) */
    const uint16_t *bias;  /* (N) bf16 added before rounding, or NULL (not with accumulate) */
    /* Optional: each tile's fp32 result goes to the worker's tile buffer
     * (rows x cols, leading dimension cols) and epilogue finishes it there
     * while it is still in cache; C, ldc, c_f32 and accumulate are unused. */
    void (*epilogue)(void *ctx, int worker, const float *tile, int rows, int cols, size_t m0,
                     size_t n0);
    void *epilogue_ctx;
    /* fp32 inputs instead of A and B (then c_f32 = 1, no bias, no epilogue):
     * the fp32 product on oneDNN's f32 matmul, never widened */
    const float *A32, *B32;
} gptx_cpu_matmul;

/* nworkers = the pool's thread count (one stream and scratchpad each). */
int gptx_cpu_dnnl_create(gptx_cpu_dnnl **out, int nworkers);
void gptx_cpu_dnnl_destroy(gptx_cpu_dnnl *d);
/* "oneDNN 2.6.3 brg:avx512_core_amx_bf16": the version and the kernel
 * oneDNN picks for a bf16 product on this CPU. */
const char *gptx_cpu_dnnl_describe(const gptx_cpu_dnnl *d);
/* Bytes of the workers' scratchpads and tile buffers (counted as reserved
 * memory). */
size_t gptx_cpu_dnnl_scratch_bytes(const gptx_cpu_dnnl *d);
/* "oneDNN 3.2.0 f32 brg:avx2": the version and the kernel oneDNN picks for
 * an fp32 product tile (GPTX_CPU_FP32_GEMM=onednn); made on first call. */
const char *gptx_cpu_dnnl_describe_f32(gptx_cpu_dnnl *d);
/* Runs the product on the backend's pool (be->dnnl). */
int gptx_cpu_dnnl_matmul(gptx_backend *be, const gptx_cpu_matmul *mm);
/* The same product, the same tiles and bits, all on the calling thread: pool
 * worker `worker` (its stream and scratchpad), inside a task of the pool
 * (attention's per-head tile products). Safe to call from every worker at
 * once. */
int gptx_cpu_dnnl_matmul_worker(gptx_backend *be, int worker, const gptx_cpu_matmul *mm);

#endif
