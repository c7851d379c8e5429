/* CPU backend: lifetime, memory accounting, copies and the ops table. */
#define _GNU_SOURCE /* madvise */
#include "cpu_backend.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "errors.h"

/* Every buffer starts with a header that remembers its size, so free() can
 * keep the accounting exact; 64 bytes keeps the payload cache-line aligned. */
#define CPU_ALLOC_ALIGN 64
/* Buffers from 4 MiB up start on a 2 MiB boundary and ask for transparent
 * huge pages (where the system leaves THP to madvise): the streaming ops and
 * the packing inside sgemm walk hundreds of MB per step, and 4 KiB pages
 * cost them a TLB miss every 4 KiB. */
#define CPU_HUGE_MIN ((size_t)4 << 20)
#define CPU_HUGE_ALIGN ((size_t)2 << 20)

static int cpu_create(gptx_backend **out, const gptx_context_options *opts) {
    *out = NULL;
    if (opts->precision != GPTX_PRECISION_DEFAULT && opts->precision != GPTX_PRECISION_FP32)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the cpu backend computes in fp32 only; options.precision is %s",
                         gptx_precision_name(opts->precision) ? gptx_precision_name(opts->precision)
                                                              : "invalid");
    int n = opts->num_threads;
    if (n == 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (int)online : 1;
    }
    gptx_backend *be = calloc(1, sizeof *be);
    if (!be) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = gptx_threadpool_create(&be->pool, n);
    if (rc != GPTX_OK) {
        free(be);
        return rc;
    }
    be->nthreads = n;
    /* The context's thread count governs the products too: the pool splits
     * them and OpenBLAS itself runs single-threaded (cpu_gemm.c). */
    gptx_cpu_blas_single();
    *out = be;
    return GPTX_OK;
}

static void cpu_destroy(gptx_backend *be) {
    if (!be) return;
    gptx_threadpool_destroy(be->pool);
    free(be);
}

static int cpu_num_threads(const gptx_backend *be) { return be->nthreads; }

static int cpu_alloc(gptx_backend *be, size_t bytes, void **ptr) {
    *ptr = NULL;
    size_t rounded = (bytes + CPU_ALLOC_ALIGN - 1) / CPU_ALLOC_ALIGN * CPU_ALLOC_ALIGN;
    if (rounded < bytes || rounded > SIZE_MAX - CPU_ALLOC_ALIGN)
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "allocation of %zu bytes is too large", bytes);
    void *base = NULL;
    int huge = rounded >= CPU_HUGE_MIN;
    if (posix_memalign(&base, huge ? CPU_HUGE_ALIGN : CPU_ALLOC_ALIGN, rounded + CPU_ALLOC_ALIGN) !=
            0 ||
        !base)
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "cannot allocate %zu bytes of host memory", bytes);
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(base, rounded + CPU_ALLOC_ALIGN, MADV_HUGEPAGE); /* advice only */
#endif
    ((size_t *)base)[0] = bytes;
    ((size_t *)base)[1] = rounded + CPU_ALLOC_ALIGN;
    be->allocated += bytes;
    be->reserved += rounded + CPU_ALLOC_ALIGN;
    if (be->allocated > be->peak) be->peak = be->allocated;
    *ptr = (char *)base + CPU_ALLOC_ALIGN;
    return GPTX_OK;
}

static void cpu_free(gptx_backend *be, void *ptr) {
    if (!ptr) return;
    char *base = (char *)ptr - CPU_ALLOC_ALIGN;
    be->allocated -= ((size_t *)base)[0];
    be->reserved -= ((size_t *)base)[1];
    free(base);
}

static int cpu_memory_stats(const gptx_backend *be, gptx_memory_stats *stats) {
    stats->allocated = be->allocated;
    stats->reserved = be->reserved;
    stats->peak = be->peak;
    return GPTX_OK;
}

static int cpu_reset_peak(gptx_backend *be) {
    be->peak = be->allocated;
    return GPTX_OK;
}

static int cpu_synchronize(gptx_backend *be) { return GPTX_OK; }

static int cpu_upload_f32(gptx_backend *be, float *dst, const float *host, size_t n) {
    memcpy(dst, host, n * sizeof *dst);
    return GPTX_OK;
}

static int cpu_download_f32(gptx_backend *be, float *host, const float *src, size_t n) {
    memcpy(host, src, n * sizeof *src);
    return GPTX_OK;
}

static int cpu_upload_i32(gptx_backend *be, int32_t *dst, const int32_t *host, size_t n) {
    memcpy(dst, host, n * sizeof *dst);
    return GPTX_OK;
}

typedef struct {
    float *dst;
    float value;
    size_t n;
    int ntasks;
} fill_args;

static void fill_task(void *vp, int task) {
    fill_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    if (a->value == 0.0f) {
        memset(a->dst + lo, 0, (hi - lo) * sizeof *a->dst);
    } else {
        for (size_t i = lo; i < hi; i++) a->dst[i] = a->value;
    }
}

/* On every thread: one core does not saturate memory bandwidth (zero_grad
 * of GPT-2 124M's 496 MB of gradients took 61 ms on one thread). */
static int cpu_fill_f32(gptx_backend *be, float *dst, float value, size_t n) {
    fill_args a = {dst, value, n, gptx_cpu_ntasks(be, (n + 65535) / 65536)};
    gptx_threadpool_run(be->pool, a.ntasks, fill_task, &a);
    return GPTX_OK;
}

static const gptx_backend_ops cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .destroy = cpu_destroy,
    .num_threads = cpu_num_threads,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memory_stats = cpu_memory_stats,
    .reset_peak = cpu_reset_peak,
    .synchronize = cpu_synchronize,
    .upload_f32 = cpu_upload_f32,
    .download_f32 = cpu_download_f32,
    .upload_i32 = cpu_upload_i32,
    .fill_f32 = cpu_fill_f32,
    .embedding_forward = gptx_cpu_embedding_forward,
    .embedding_backward = gptx_cpu_embedding_backward,
    .layernorm_forward = gptx_cpu_layernorm_forward,
    .layernorm_backward = gptx_cpu_layernorm_backward,
    .matmul_forward = gptx_cpu_matmul_forward,
    .matmul_backward = gptx_cpu_matmul_backward,
    .attention_forward = gptx_cpu_attention_forward,
    .attention_backward = gptx_cpu_attention_backward,
    .gelu_forward = gptx_cpu_gelu_forward,
    .gelu_backward = gptx_cpu_gelu_backward,
    .residual_forward = gptx_cpu_residual_forward,
    .crossentropy_forward = gptx_cpu_crossentropy_forward,
    .crossentropy_backward = gptx_cpu_crossentropy_backward,
    .crossentropy_fused = gptx_cpu_crossentropy_fused,
    .sum_to_host = gptx_cpu_sum_to_host,
    .sum_squares_to_host = gptx_cpu_sum_squares_to_host,
    .adamw = gptx_cpu_adamw,
    .attention_naive_forward = gptx_cpu_attention_naive_forward,
    .attention_naive_backward = gptx_cpu_attention_naive_backward,
    .layernorm_forward_unfused = gptx_cpu_layernorm_forward_unfused,
    .layernorm_backward_unfused = gptx_cpu_layernorm_backward_unfused,
    .gelu_forward_unfused = gptx_cpu_gelu_forward_unfused,
    .gelu_backward_unfused = gptx_cpu_gelu_backward_unfused,
    .qkv_interleave = gptx_cpu_qkv_interleave,
    .qkv_split = gptx_cpu_qkv_split,
};

const gptx_backend_ops *gptx_cpu_backend_ops(void) { return &cpu_ops; }
