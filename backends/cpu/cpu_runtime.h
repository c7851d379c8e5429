/* The CPU backend's runtime: the backend's state, its thread pool, memory
 * accounting and scratch (cpu_runtime.c). Everything in backends/cpu calls
 * down into it; it calls nothing above it. Private to backends/cpu. */
#ifndef GPTX_CPU_RUNTIME_H
#define GPTX_CPU_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_threadpool.h"

struct gptx_cpu_dnnl;

struct gptx_backend {
    gptx_threadpool *pool;
    int nthreads;
    uint64_t allocated, reserved, peak;
    /* precision policy (docs/precision.md): fp32, or bf16 storage */
    int precision;           /* resolved gptx_precision */
    int act_bf16;            /* activations and the weights ops read are bf16 */
    int param_bf16;          /* parameters and AdamW moments are bf16 (BF16_PURE) */
    int stochastic_rounding; /* BF16_PURE's AdamW rounds stochastically */
    int res_f32;             /* the residual stream stays fp32 (bf16 mixed, as autocast) */
    struct gptx_cpu_dnnl *dnnl; /* bf16 products (cpu_dnnl.c), or fp32 ones with fp32_dnnl */
    int fp32_dnnl;              /* gptx_cpu_sgemm on oneDNN (GPTX_CPU_FP32_GEMM=onednn) */
    void *scratch;              /* bf16 kernels' conversion buffers (gptx_cpu_scratch) */
    int grad_overwrite;         /* parameter gradients are overwritten, not accumulated
                                 * (backend.h grad_overwrite; bf16 policies only) */
    size_t scratch_bytes;
};

/* A buffer of at least `bytes` for the op being run (caller thread; valid
 * until the next call), counted in the memory report; NULL when out of
 * memory (the message is set). */
void *gptx_cpu_scratch(gptx_backend *be, size_t bytes);

/* fn(arg, worker, item) for every item in [0, nitems), on at most
 * be->nthreads workers that take items in turn; worker in [0, nthreads)
 * names per-worker scratch. Each item's result depends on the item alone. */
typedef void (*gptx_cpu_item_fn)(void *arg, int worker, size_t item);
void gptx_cpu_run_items(gptx_backend *be, size_t nitems, gptx_cpu_item_fn fn, void *arg);

/* Splits [0, n) into ntasks nearly equal parts; part i is [*lo, *hi). */
static inline void gptx_cpu_split(size_t n, int ntasks, int i, size_t *lo, size_t *hi) {
    *lo = n * (size_t)i / (size_t)ntasks;
    *hi = n * (size_t)(i + 1) / (size_t)ntasks;
}

/* Number of tasks for n independent items: a few per thread, never more than n. */
static inline int gptx_cpu_ntasks(const struct gptx_backend *be, size_t n) {
    size_t t = (size_t)be->nthreads * 4;
    if (t > n) t = n;
    return t < 1 ? 1 : (int)t;
}

/* Memory: every buffer of the backend, counted in be->allocated/reserved/peak
 * (backend.h's alloc, free, memory_stats and reset_peak entries). */
int gptx_cpu_alloc(gptx_backend *be, size_t bytes, void **ptr);
void gptx_cpu_free(gptx_backend *be, void *ptr);
int gptx_cpu_memory_stats(const gptx_backend *be, gptx_memory_stats *stats);
int gptx_cpu_reset_peak(gptx_backend *be);
/* dst[i] = value for n floats, on every thread (backend.h fill_f32). */
int gptx_cpu_fill_f32(gptx_backend *be, float *dst, float value, size_t n);

/* OpenBLAS runs single-threaded under gptx (a process-wide setting): the
 * pool supplies the parallelism. Called before every product: it also makes
 * sure the calling thread has OpenBLAS's work buffer, GPTX_ERR_NO_MEMORY
 * where OpenBLAS would retry its allocation forever (cpu_blas_buffers.c). */
int gptx_cpu_blas_enter(void);
/* The same for every thread of be's pool, the caller's included (at create). */
int gptx_cpu_blas_warm_pool(gptx_backend *be);
/* The most pool threads OpenBLAS can serve, or 0 when it does not say.
 * Without USE_TLS it keeps one table of 2 x MAX_CPU_NUMBER work buffers
 * (its build's NUM_THREADS, which openblas_get_config() reports as
 * MAX_THREADS=N; OpenBLAS's USAGE.md), one per thread that multiplies at
 * once, the caller's too: past them it warns on stderr, then prints
 * "BLAS : Program is Terminated" on stdout for each product (0.3.21,
 * MAX_THREADS=64: 127 threads run clean, 128 warn, 700 printed 2,310 lines
 * into gptx-generate's text; issue 34, item 6). */
int gptx_cpu_blas_max_threads(void);
/* The most threads a context runs: max(1024, 8 per core), at most
 * gptx_cpu_blas_max_threads() (backend.h max_threads). */
int gptx_cpu_thread_limit(void);
/* Cores online (at least 1). */
long gptx_cpu_cores_online(void);

#endif
