/* Caching device allocator: bookkeeping only (see cuda_cache.h). */
#include "cuda_cache.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"

#define MIN_CLASS 512

/* Bucket of a class size: octave k (size in (2^k, 2^(k+1)]) times 8 plus the
 * sub-class; sizes <= 512 share bucket 0. */
static int bucket_of(size_t size) {
    if (size <= MIN_CLASS) return 0;
    int k = 0;
    while (k < 63 && ((size_t)1 << (k + 1)) < size) k++;
    size_t step = ((size_t)1 << k) / 8;
    int sub = (int)((size - ((size_t)1 << k) + step - 1) / step) - 1; /* 0..7 */
    int b = k * 8 + sub;
    return b < GPTX_CUDA_CACHE_BUCKETS ? b : GPTX_CUDA_CACHE_BUCKETS - 1;
}

GPTX_CUDA_FN size_t gptx_cuda_cache_class_size(size_t bytes) {
    if (bytes <= MIN_CLASS) return MIN_CLASS;
    int k = 0;
    while (k < 63 && ((size_t)1 << (k + 1)) < bytes) k++;
    if (k >= 63) return 0;
    size_t step = ((size_t)1 << k) / 8;
    size_t n = (bytes + step - 1) / step; /* 9..16 steps of 2^k / 8 */
    return n * step;
}

static size_t live_slot(const void *ptr) {
    uintptr_t p = (uintptr_t)ptr;
    p ^= p >> 17;
    p *= (uintptr_t)0x9E3779B97F4A7C15ull;
    return (size_t)(p >> 7) % GPTX_CUDA_CACHE_LIVE_SLOTS;
}

GPTX_CUDA_FN void gptx_cuda_cache_init(gptx_cuda_cache *c, gptx_cuda_raw_alloc_fn raw_alloc,
                                       gptx_cuda_raw_free_fn raw_free, gptx_cuda_quiesce_fn quiesce,
                                       void *user) {
    memset(c, 0, sizeof *c);
    c->raw_alloc = raw_alloc;
    c->raw_free = raw_free;
    c->quiesce = quiesce;
    c->user = user;
}

GPTX_CUDA_FN size_t gptx_cuda_cache_release(gptx_cuda_cache *c) {
    size_t released = 0;
    int any = 0;
    for (int b = 0; b < GPTX_CUDA_CACHE_BUCKETS && !any; b++) any = c->free_lists[b] != NULL;
    if (!any) return 0;
    if (c->quiesce) c->quiesce(c->user);
    for (int b = 0; b < GPTX_CUDA_CACHE_BUCKETS; b++) {
        gptx_cuda_block *blk = c->free_lists[b];
        while (blk) {
            gptx_cuda_block *next = blk->next;
            c->raw_free(c->user, blk->ptr);
            c->raw_frees++;
            c->reserved -= blk->size;
            released += blk->size;
            free(blk);
            blk = next;
        }
        c->free_lists[b] = NULL;
    }
    return released;
}

GPTX_CUDA_FN int gptx_cuda_cache_alloc(gptx_cuda_cache *c, size_t bytes, int internal, void **ptr) {
    *ptr = NULL;
    size_t size = gptx_cuda_cache_class_size(bytes);
    if (size == 0)
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "allocation of %zu bytes is too large", bytes);
    int b = bucket_of(size);
    gptx_cuda_block *blk = NULL;
    /* a bucket holds one class size, except the last, which collects the rest */
    for (gptx_cuda_block **pp = &c->free_lists[b]; *pp; pp = &(*pp)->next) {
        if ((*pp)->size == size) {
            blk = *pp;
            *pp = blk->next;
            break;
        }
    }
    if (!blk) {
        blk = (gptx_cuda_block *)calloc(1, sizeof *blk);
        if (!blk) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        void *p = NULL;
        int rc = c->raw_alloc(c->user, size, &p);
        if (rc != 0 && !c->hold_cached && gptx_cuda_cache_release(c) > 0)
            rc = c->raw_alloc(c->user, size, &p);
        if (rc != 0 || !p) {
            free(blk);
            return GPTX_FAIL(GPTX_ERR_NO_MEMORY,
                             "cannot allocate %zu bytes of device memory (%llu bytes reserved%s)",
                             bytes, (unsigned long long)c->reserved,
                             c->hold_cached ? ", cached blocks kept: a CUDA graph is being captured"
                                            : "");
        }
        c->raw_allocs++;
        blk->ptr = p;
        blk->size = size;
        c->reserved += size;
    }
    blk->requested = bytes;
    blk->internal = internal;
    size_t s = live_slot(blk->ptr);
    blk->next = c->live[s];
    c->live[s] = blk;
    if (internal) {
        c->internal += bytes;
    } else {
        c->allocated += bytes;
        if (c->allocated > c->peak) c->peak = c->allocated;
    }
    *ptr = blk->ptr;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_cache_free(gptx_cuda_cache *c, void *ptr) {
    if (!ptr) return 0;
    size_t s = live_slot(ptr);
    for (gptx_cuda_block **pp = &c->live[s]; *pp; pp = &(*pp)->next) {
        gptx_cuda_block *blk = *pp;
        if (blk->ptr != ptr) continue;
        *pp = blk->next;
        if (blk->internal) {
            c->internal -= blk->requested;
        } else {
            c->allocated -= blk->requested;
        }
        int b = bucket_of(blk->size);
        blk->next = c->free_lists[b];
        c->free_lists[b] = blk;
        return 0;
    }
    return -1;
}

GPTX_CUDA_FN void gptx_cuda_cache_destroy(gptx_cuda_cache *c) {
    for (size_t s = 0; s < GPTX_CUDA_CACHE_LIVE_SLOTS; s++) {
        while (c->live[s]) {
            void *p = c->live[s]->ptr;
            gptx_cuda_cache_free(c, p);
        }
    }
    gptx_cuda_cache_release(c);
}

GPTX_CUDA_FN void gptx_cuda_cache_reset_peak(gptx_cuda_cache *c) { c->peak = c->allocated; }
