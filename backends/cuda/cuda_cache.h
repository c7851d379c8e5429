/* Caching device allocator: size-class free lists over a raw allocator
 * (cudaMalloc in the backend, malloc in the CPU unit test), so that the
 * steady state of training never calls the raw allocator.
 *
 * Plain C with no CUDA dependency. Every block is one raw allocation of its
 * class size; a freed block goes to its class's free list and is handed out
 * again for any request of the same class. Classes: 512 bytes and below are
 * one class; above, each octave (2^k, 2^(k+1)] has 8 classes of 2^k / 8 bytes,
 * so a block wastes at most 12.5 % of its request.
 *
 * Not thread-safe: the backend calls it from the thread that drives the
 * context (like every other backend entry). Blocks are reused in stream
 * order: the backend runs all kernels on one compute stream, so a block freed
 * and handed out again is only touched by later work on that stream. */
#ifndef GPTX_CUDA_CACHE_H
#define GPTX_CUDA_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifndef GPTX_CUDA_FN
#define GPTX_CUDA_FN
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Returns 0 and a block of `bytes`, or non-zero when the system is out of memory. */
typedef int (*gptx_cuda_raw_alloc_fn)(void *user, size_t bytes, void **ptr);
typedef void (*gptx_cuda_raw_free_fn)(void *user, void *ptr);
/* Called before cached blocks are returned to the system (the backend waits
 * for the device there, so no queued kernel still uses them). */
typedef void (*gptx_cuda_quiesce_fn)(void *user);

#define GPTX_CUDA_CACHE_BUCKETS 512 /* 64 octaves x 8 classes */
#define GPTX_CUDA_CACHE_LIVE_SLOTS 1024

typedef struct gptx_cuda_block {
    void *ptr;
    size_t size;      /* class size: bytes held from the raw allocator */
    size_t requested; /* bytes asked for (live blocks) */
    int internal;     /* backend scratch: not in `allocated` */
    struct gptx_cuda_block *next;
} gptx_cuda_block;

typedef struct gptx_cuda_cache {
    gptx_cuda_raw_alloc_fn raw_alloc;
    gptx_cuda_raw_free_fn raw_free;
    gptx_cuda_quiesce_fn quiesce;
    void *user;
    gptx_cuda_block *free_lists[GPTX_CUDA_CACHE_BUCKETS];
    gptx_cuda_block *live[GPTX_CUDA_CACHE_LIVE_SLOTS]; /* chained hash on the pointer */
    uint64_t allocated;                                /* bytes requested by live library buffers */
    uint64_t internal;                                 /* bytes requested by live backend scratch */
    uint64_t reserved;              /* bytes held from the raw allocator (live + cached) */
    uint64_t peak;                  /* highest `allocated` since init or reset_peak */
    uint64_t raw_allocs, raw_frees; /* calls to the raw allocator */
    int hold_cached;                /* no release-and-retry (a graph capture is open) */
} gptx_cuda_cache;

/* The class size that serves a request of `bytes` (>= bytes; 0 on overflow). */
GPTX_CUDA_FN size_t gptx_cuda_cache_class_size(size_t bytes);
GPTX_CUDA_FN void gptx_cuda_cache_init(gptx_cuda_cache *c, gptx_cuda_raw_alloc_fn raw_alloc,
                                       gptx_cuda_raw_free_fn raw_free, gptx_cuda_quiesce_fn quiesce,
                                       void *user);
/* GPTX_OK or GPTX_ERR_NO_MEMORY (message set). When the raw allocator fails,
 * the cached blocks are released and the request is retried once, unless
 * c->hold_cached is set (a CUDA graph is being captured: waiting for the
 * device or freeing memory then would invalidate the capture), when the
 * request fails at once and the caller releases later. */
GPTX_CUDA_FN int gptx_cuda_cache_alloc(gptx_cuda_cache *c, size_t bytes, int internal, void **ptr);
/* Returns the block to its free list. 0, or -1 for a pointer it did not hand
 * out (ignored). NULL is a no-op. */
GPTX_CUDA_FN int gptx_cuda_cache_free(gptx_cuda_cache *c, void *ptr);
/* Returns every cached (free) block to the raw allocator; bytes released. */
GPTX_CUDA_FN size_t gptx_cuda_cache_release(gptx_cuda_cache *c);
/* Releases everything, live blocks included. */
GPTX_CUDA_FN void gptx_cuda_cache_destroy(gptx_cuda_cache *c);
GPTX_CUDA_FN void gptx_cuda_cache_reset_peak(gptx_cuda_cache *c);

#ifdef __cplusplus
}
#endif

#endif
