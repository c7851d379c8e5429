/* The CPU backend's runtime (cpu_runtime.h): the pool's item runner, memory
 * accounting, scratch and fills. */
#define _GNU_SOURCE /* madvise */
#include "cpu_runtime.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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

void *gptx_cpu_scratch(gptx_backend *be, size_t bytes) {
    if (bytes <= be->scratch_bytes) return be->scratch;
    free(be->scratch);
    be->allocated -= be->scratch_bytes;
    be->reserved -= be->scratch_bytes;
    be->scratch_bytes = 0;
    be->scratch = malloc(bytes);
    if (!be->scratch) {
        GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu bytes of conversion scratch)", bytes);
        return NULL;
    }
    be->scratch_bytes = bytes;
    be->allocated += bytes;
    be->reserved += bytes;
    if (be->allocated > be->peak) be->peak = be->allocated;
    return be->scratch;
}

typedef struct {
    gptx_cpu_item_fn fn;
    void *arg;
    size_t nitems;
    atomic_size_t next;
} items_run;

static void items_worker(void *vp, int worker) {
    items_run *r = vp;
    for (size_t i = atomic_fetch_add(&r->next, 1); i < r->nitems; i = atomic_fetch_add(&r->next, 1))
        r->fn(r->arg, worker, i);
}

void gptx_cpu_run_items(gptx_backend *be, size_t nitems, gptx_cpu_item_fn fn, void *arg) {
    if (nitems == 0) return;
    items_run r = {fn, arg, nitems, 0};
    int workers = nitems < (size_t)be->nthreads ? (int)nitems : be->nthreads;
    gptx_threadpool_run(be->pool, workers, items_worker, &r);
}

int gptx_cpu_alloc(gptx_backend *be, size_t bytes, void **ptr) {
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

void gptx_cpu_free(gptx_backend *be, void *ptr) {
    if (!ptr) return;
    char *base = (char *)ptr - CPU_ALLOC_ALIGN;
    be->allocated -= ((size_t *)base)[0];
    be->reserved -= ((size_t *)base)[1];
    free(base);
}

int gptx_cpu_reset_peak(gptx_backend *be) {
    be->peak = be->allocated;
    return GPTX_OK;
}

int gptx_cpu_memory_stats(const gptx_backend *be, gptx_memory_stats *stats) {
    stats->allocated = be->allocated;
    stats->reserved = be->reserved;
    stats->peak = be->peak;
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
int gptx_cpu_fill_f32(gptx_backend *be, float *dst, float value, size_t n) {
    fill_args a = {dst, value, n, gptx_cpu_ntasks(be, (n + 65535) / 65536)};
    gptx_threadpool_run(be->pool, a.ntasks, fill_task, &a);
    return GPTX_OK;
}
