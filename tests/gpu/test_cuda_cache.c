/* The CUDA backend's caching allocator (backends/cuda/cuda_cache.c) over a
 * malloc-backed raw allocator with a byte budget: size classes, reuse
 * without new raw allocations in a steady state, the allocated / reserved /
 * peak accounting, internal (scratch) blocks, release-and-retry when the raw
 * allocator runs out, and clean teardown (ASan checks the leaks). */
#define GPTX_CUDA_FN static __attribute__((unused))
#include "cuda_cache.c"

#include "check.h"

typedef struct {
    size_t used, budget;
    int quiesced;
} raw_state;

/* Each block starts with a 16-byte header holding its size, so raw_free can
 * give the budget back. */
static int raw_alloc(void *user, size_t bytes, void **ptr) {
    raw_state *s = user;
    if (s->used + bytes > s->budget) return 1;
    char *base = malloc(bytes + 16);
    if (!base) return 1;
    *(size_t *)base = bytes;
    s->used += bytes;
    *ptr = base + 16;
    return 0;
}

static void raw_free(void *user, void *ptr) {
    raw_state *s = user;
    char *base = (char *)ptr - 16;
    s->used -= *(size_t *)base;
    free(base);
}

static void quiesce(void *user) { ((raw_state *)user)->quiesced++; }

static void test_classes(void) {
    /* a class serves its request, wastes at most 1/8, and is a fixed point */
    size_t probes[] = {
        0, 1, 512, 513, 1000, 4096, 4097, 123457, (size_t)497 << 20, ((size_t)1 << 40) + 3};
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
        size_t b = probes[i], c = gptx_cuda_cache_class_size(b);
        CHECK(c >= b);
        CHECK(c >= 512);
        if (b > 512) CHECK((double)(c - b) <= (double)b / 8.0);
        CHECK(gptx_cuda_cache_class_size(c) == c);
        CHECK(bucket_of(c) >= 0 && bucket_of(c) < GPTX_CUDA_CACHE_BUCKETS);
    }
    /* classes are monotonic and distinct classes land in distinct buckets */
    size_t prev = 0;
    int prev_bucket = -1;
    for (size_t b = 1; b < ((size_t)1 << 22); b = b * 9 / 8 + 1) {
        size_t c = gptx_cuda_cache_class_size(b);
        CHECK(c >= prev);
        if (c != prev) {
            CHECK(bucket_of(c) > prev_bucket);
            prev_bucket = bucket_of(c);
        }
        prev = c;
    }
    CHECK(gptx_cuda_cache_class_size(SIZE_MAX) == 0); /* overflow: refused */
}

static void test_accounting(void) {
    raw_state rs = {0, (size_t)64 << 20, 0};
    gptx_cuda_cache c;
    gptx_cuda_cache_init(&c, raw_alloc, raw_free, quiesce, &rs);
    void *a = NULL, *b = NULL, *s = NULL;
    CHECK_OK(gptx_cuda_cache_alloc(&c, 1000, 0, &a));
    CHECK_OK(gptx_cuda_cache_alloc(&c, 3 << 20, 0, &b));
    CHECK_OK(gptx_cuda_cache_alloc(&c, 5000, 1, &s)); /* internal scratch */
    CHECK(a && b && s && a != b);
    CHECK(c.allocated == 1000 + (3u << 20));
    CHECK(c.internal == 5000);
    CHECK(c.peak == c.allocated);
    CHECK(c.reserved == gptx_cuda_cache_class_size(1000) + gptx_cuda_cache_class_size(3 << 20) +
                            gptx_cuda_cache_class_size(5000));
    CHECK(c.raw_allocs == 3);
    uint64_t reserved = c.reserved;

    /* steady state: free and allocate the same sizes again, many times */
    for (int i = 0; i < 100; i++) {
        CHECK(gptx_cuda_cache_free(&c, b) == 0);
        CHECK(c.allocated == 1000);
        void *b2 = NULL;
        CHECK_OK(gptx_cuda_cache_alloc(&c, (3 << 20) - 7, 0, &b2)); /* same class */
        CHECK(b2 == b);
        b = b2;
    }
    CHECK(c.raw_allocs == 3);
    CHECK(c.reserved == reserved);
    CHECK(c.peak == 1000 + (3u << 20));
    gptx_cuda_cache_reset_peak(&c);
    CHECK(c.peak == c.allocated);

    /* unknown pointers are refused, NULL is a no-op */
    int x;
    CHECK(gptx_cuda_cache_free(&c, &x) == -1);
    CHECK(gptx_cuda_cache_free(&c, NULL) == 0);

    /* a request that does not fit: cached blocks are released, then retried */
    CHECK(gptx_cuda_cache_free(&c, b) == 0);
    CHECK(gptx_cuda_cache_free(&c, s) == 0);
    CHECK(c.internal == 0);
    void *big = NULL;
    rs.budget = rs.used + ((size_t)1 << 20); /* room for 1 MiB more only */
    CHECK_OK(gptx_cuda_cache_alloc(&c, (size_t)4 << 20, 0, &big));
    CHECK(rs.quiesced == 1);
    CHECK(big != NULL);
    /* and one that cannot fit at all fails cleanly */
    void *huge = (void *)1;
    CHECK_STATUS(gptx_cuda_cache_alloc(&c, (size_t)1 << 30, 0, &huge), GPTX_ERR_NO_MEMORY);
    CHECK(huge == NULL);
    CHECK(strstr(gptx_last_error(), "device memory") != NULL);

    gptx_cuda_cache_destroy(&c); /* live blocks a and big too */
    CHECK(c.reserved == 0);
    CHECK(c.allocated == 0);
    CHECK(c.raw_allocs == c.raw_frees);
    CHECK(rs.used == 0);
}

/* many live blocks: the hash chains keep every pointer findable */
static void test_many(void) {
    raw_state rs = {0, (size_t)256 << 20, 0};
    gptx_cuda_cache c;
    gptx_cuda_cache_init(&c, raw_alloc, raw_free, quiesce, &rs);
    enum { N = 3000 };
    static void *p[N];
    for (int i = 0; i < N; i++)
        CHECK_OK(gptx_cuda_cache_alloc(&c, (size_t)(i % 37) * 100 + 1, 0, &p[i]));
    for (int i = 0; i < N; i += 2) CHECK(gptx_cuda_cache_free(&c, p[i]) == 0);
    for (int i = 0; i < N; i += 2)
        CHECK_OK(gptx_cuda_cache_alloc(&c, (size_t)(i % 37) * 100 + 1, 0, &p[i]));
    CHECK(c.raw_allocs == N); /* the second round reused the freed blocks */
    for (int i = 0; i < N; i++) CHECK(gptx_cuda_cache_free(&c, p[i]) == 0);
    CHECK(c.allocated == 0);
    CHECK(gptx_cuda_cache_release(&c) > 0);
    CHECK(c.reserved == 0);
    CHECK(rs.used == 0);
    gptx_cuda_cache_destroy(&c);
}

int main(void) {
    test_classes();
    test_accounting();
    test_many();
    return check_exit("test_cuda_cache");
}
