/* bf16 matrix products on oneDNN's matmul primitive (cpu_dnnl.h). */
#include "cpu_dnnl.h"

#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>

#include <oneapi/dnnl/dnnl_version.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_runtime.h"
#include "cpu_bf16.h"
#include "errors.h"

/* Two functions of the OpenMP API, from the runtime oneDNN was built on
 * (libgomp, linked by cmake/GptxDnnl.cmake); declared here so that nothing in
 * gptx is compiled with -fopenmp. */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

/* Every oneDNN call runs with the calling thread's OpenMP team size at 1
 * (oneDNN also reads it when a primitive is created, to plan its work):
 * the pool is the only parallelism, and the caller's setting is restored. */
static int omp_single_enter(void) {
    int prev = omp_get_max_threads();
    if (prev != 1) omp_set_num_threads(1);
    return prev;
}

static void omp_single_leave(int prev) {
    if (prev != 1) omp_set_num_threads(prev);
}

/* ---- oneDNN 2.x / 3.x ---------------------------------------------------------------
 * 2.x: a memory descriptor is a struct the caller owns, and a primitive
 * descriptor is made from an op descriptor (dnnl_matmul_desc_init). 3.x: a
 * descriptor is a handle to destroy, and the matmul primitive descriptor is
 * made directly (dnnl_matmul_primitive_desc_create). md_t is what an entry
 * keeps; MD(m) the pointer/handle the API takes. cmake/GptxDnnl.cmake
 * accepts 2.6+ and 3.x. */
#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t md_t;
typedef const_dnnl_memory_desc_t md_arg;
#define MD(m) (m)
#else
typedef dnnl_memory_desc_t md_t;
typedef const dnnl_memory_desc_t *md_arg;
#define MD(m) (&(m))
#endif

static dnnl_status_t md_strided(md_t *md, const dnnl_dims_t dims, dnnl_data_type_t dt,
                                const dnnl_dims_t strides) {
#if DNNL_VERSION_MAJOR >= 3
    return dnnl_memory_desc_create_with_strides(md, 2, dims, dt, strides);
#else
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
#endif
}

static void md_free(md_t *md) {
#if DNNL_VERSION_MAJOR >= 3
    if (*md) dnnl_memory_desc_destroy(*md);
    *md = NULL;
#else
    (void)md;
#endif
}

/* pd for c = a @ b [+ bias] (bias NULL: none) */
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, dnnl_engine_t engine, md_t *a, md_t *b,
                               md_t *bias, md_t *c, const_dnnl_primitive_attr_t attr) {
#if DNNL_VERSION_MAJOR >= 3
    return dnnl_matmul_primitive_desc_create(pd, engine, *a, *b, bias ? *bias : NULL, *c, attr);
#else
    dnnl_matmul_desc_t md;
    dnnl_status_t st = dnnl_matmul_desc_init(&md, a, b, bias, c);
    return st == dnnl_success ? dnnl_primitive_desc_create(pd, &md, attr, engine, NULL) : st;
#endif
}

/* The pd's scratchpad descriptor, kept by the caller. */
static dnnl_status_t md_scratch(md_t *out, const_dnnl_primitive_desc_t pd) {
#if DNNL_VERSION_MAJOR >= 3
    return dnnl_memory_desc_clone(out, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
#else
    *out = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return dnnl_success;
#endif
}

static dnnl_status_t post_sum(dnnl_post_ops_t post) {
#if DNNL_VERSION_MAJOR >= 3
    return dnnl_post_ops_append_sum(post, 1.0f, 0, dnnl_data_type_undef);
#else
    return dnnl_post_ops_append_sum(post, 1.0f);
#endif
}

typedef struct {
    int M, N, K;
    size_t a_row, a_col, b_row, b_col, ldc;
    int c_f32, accumulate, bias;
    int ab_f32; /* fp32 inputs (A32, B32) */
} prim_key;

/* Field by field: a key's padding (after K) is not initialized. */
static int key_eq(const prim_key *x, const prim_key *y) {
    return x->M == y->M && x->N == y->N && x->K == y->K && x->a_row == y->a_row &&
           x->a_col == y->a_col && x->b_row == y->b_row && x->b_col == y->b_col &&
           x->ldc == y->ldc && x->c_f32 == y->c_f32 && x->accumulate == y->accumulate &&
           x->bias == y->bias && x->ab_f32 == y->ab_f32;
}

typedef struct {
    prim_key key;
    dnnl_primitive_t prim;
    md_t a, b, c, bias, scratch;
    size_t scratch_bytes;
} prim_entry;

static void entry_free(prim_entry *e) {
    if (e->prim) dnnl_primitive_destroy(e->prim);
    md_free(&e->a);
    md_free(&e->b);
    md_free(&e->c);
    md_free(&e->bias);
    md_free(&e->scratch);
    memset(e, 0, sizeof *e);
}

/* Distinct tile shapes of a model's products: a few per weight matrix. */
#define CACHE_CAP 256

struct gptx_cpu_dnnl {
    dnnl_engine_t engine;
    int nworkers;
    dnnl_stream_t *streams; /* one per worker */
    void **scratch;         /* one scratchpad per worker */
    size_t scratch_bytes;
    float **tile;           /* one fp32 tile per worker for epilogues, allocated on first use */
    prim_entry cache[CACHE_CAP];
    int ncache, evict;
    /* 1: this oneDNN has no bf16 matmul for this CPU (oneDNN 2.6 needs
     * AVX-512; an AVX2 CPU gets dnnl_unimplemented): every tile is widened to
     * fp32 and multiplied by OpenBLAS instead (run_tile_widened) */
    int widen;
    char describe[160];
    /* the cache, scratch and tile buffers for gptx_cpu_dnnl_matmul_worker,
     * whose callers run concurrently on the pool's workers */
    pthread_mutex_t lock;
    int lock_ready;

    char describe_f32[160];
};

static int dnnl_failed(dnnl_status_t st, const char *what) {
    return GPTX_FAIL(st == dnnl_out_of_memory ? GPTX_ERR_NO_MEMORY : GPTX_ERR_BACKEND,
                     "oneDNN: %s failed (dnnl_status_t %d)", what, (int)st);
}

#define DNNL_TRY(call)                                              \
    do {                                                            \
        dnnl_status_t dnnl_try_st_ = (call);                        \
        if (dnnl_try_st_ != dnnl_success) {                         \
            rc = dnnl_failed(dnnl_try_st_, #call);                  \
            goto done;                                              \
        }                                                           \
    } while (0)

static int make_primitive(gptx_cpu_dnnl *d, const prim_key *k, prim_entry *e) {
    int rc = GPTX_OK;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post = NULL;
    dnnl_primitive_desc_t pd = NULL;
    memset(e, 0, sizeof *e);
    e->key = *k;
    dnnl_dims_t da = {k->M, k->K}, sa = {(dnnl_dim_t)k->a_row, (dnnl_dim_t)k->a_col};
    dnnl_dims_t db = {k->K, k->N}, sb = {(dnnl_dim_t)k->b_row, (dnnl_dim_t)k->b_col};
    dnnl_dims_t dc = {k->M, k->N}, sc = {(dnnl_dim_t)k->ldc, 1};
    dnnl_dims_t dbias = {1, k->N}, sbias = {k->N, 1};
    dnnl_data_type_t ab = k->ab_f32 ? dnnl_f32 : dnnl_bf16;
    DNNL_TRY(md_strided(&e->a, da, ab, sa));
    DNNL_TRY(md_strided(&e->b, db, ab, sb));
    DNNL_TRY(md_strided(&e->c, dc, k->c_f32 ? dnnl_f32 : dnnl_bf16, sc));
    if (k->bias) DNNL_TRY(md_strided(&e->bias, dbias, dnnl_bf16, sbias));
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
    if (k->accumulate) {
        DNNL_TRY(dnnl_post_ops_create(&post));
        DNNL_TRY(post_sum(post));
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, post));
    }
    DNNL_TRY(matmul_pd(&pd, d->engine, &e->a, &e->b, k->bias ? &e->bias : NULL, &e->c, attr));
    DNNL_TRY(md_scratch(&e->scratch, pd));
    e->scratch_bytes = dnnl_memory_desc_get_size(MD(e->scratch));
    DNNL_TRY(dnnl_primitive_create(&e->prim, pd));
done:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    if (rc != GPTX_OK) entry_free(e);
    return rc;
}

/* The cached primitive for k, created on first use (caller thread only). */
static int lookup(gptx_cpu_dnnl *d, const prim_key *k, prim_entry **out) {
    for (int i = 0; i < d->ncache; i++)
        if (key_eq(&d->cache[i].key, k)) {
            *out = &d->cache[i];
            return GPTX_OK;
        }
    int slot = d->ncache < CACHE_CAP ? d->ncache++ : d->evict++ % CACHE_CAP;
    entry_free(&d->cache[slot]);
    int rc = make_primitive(d, k, &d->cache[slot]);
    if (rc != GPTX_OK) {
        if (slot == d->ncache - 1) d->ncache--;
        return rc;
    }
    *out = &d->cache[slot];
    return GPTX_OK;
}

static int grow_scratch(gptx_cpu_dnnl *d, size_t bytes) {
    if (bytes <= d->scratch_bytes) return GPTX_OK;
    for (int w = 0; w < d->nworkers; w++) {
        free(d->scratch[w]);
        d->scratch[w] = malloc(bytes);
        if (!d->scratch[w]) {
            d->scratch_bytes = 0;
            return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (oneDNN scratchpad of %zu "
                                                 "bytes)", bytes);
        }
    }
    d->scratch_bytes = bytes;
    return GPTX_OK;
}

/* The workers' fp32 tiles for epilogues, allocated once at the full tile size. */
static int tile_buffers(gptx_cpu_dnnl *d) {
    if (d->tile[0]) return GPTX_OK;
    for (int w = 0; w < d->nworkers; w++) {
        d->tile[w] = malloc((size_t)GPTX_DNNL_TILE_M * GPTX_DNNL_TILE_N * sizeof(float));
        if (!d->tile[w]) {
            for (int v = 0; v < w; v++) free(d->tile[v]), d->tile[v] = NULL;
            return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (oneDNN product tiles of "
                                                 "%zu bytes)",
                             (size_t)GPTX_DNNL_TILE_M * GPTX_DNNL_TILE_N * sizeof(float));
        }
    }
    return GPTX_OK;
}

/* ---- one product ------------------------------------------------------------- */

typedef struct {
    gptx_cpu_dnnl *d;
    const gptx_cpu_matmul *mm;
    prim_entry *prim[2][2]; /* [m tail][n tail] */
    int tiles_m, tiles_n;
    int last_m, last_n;     /* rows and columns of the last tile row and column */
    atomic_int next;
    atomic_int status; /* first failing dnnl_status_t, 0 = none */
} matmul_run;

static dnnl_status_t run_tile(matmul_run *r, int worker, int tile) {
    const gptx_cpu_matmul *mm = r->mm;
    int ti = tile / r->tiles_n, tj = tile % r->tiles_n;
    size_t m0 = (size_t)ti * GPTX_DNNL_TILE_M, n0 = (size_t)tj * GPTX_DNNL_TILE_N;
    prim_entry *e = r->prim[ti == r->tiles_m - 1][tj == r->tiles_n - 1];
    size_t csize = mm->c_f32 ? sizeof(float) : sizeof(uint16_t);
    void *c = mm->epilogue ? (void *)r->d->tile[worker]
                           : (char *)mm->C + (m0 * mm->ldc + n0) * csize;
    const void *a = mm->A32 ? (const void *)(mm->A32 + m0 * mm->a_row)
                            : (const void *)(mm->A + m0 * mm->a_row);
    const void *b = mm->B32 ? (const void *)(mm->B32 + n0 * mm->b_col)
                            : (const void *)(mm->B + n0 * mm->b_col);
    void *handles[5] = {(void *)a, (void *)b, c,
                        mm->bias ? (void *)(mm->bias + n0) : NULL, r->d->scratch[worker]};
    md_arg mds[5] = {MD(e->a), MD(e->b), MD(e->c), MD(e->bias),
                                       MD(e->scratch)};
    const int args[5] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST, DNNL_ARG_BIAS,
                         DNNL_ARG_SCRATCHPAD};
    dnnl_exec_arg_t exec[5];
    int n = 0;
    dnnl_status_t st = dnnl_success;
    for (int i = 0; i < 5 && st == dnnl_success; i++) {
        if (i == 3 && !mm->bias) continue;
        exec[n].arg = args[i];
        st = dnnl_memory_create(&exec[n].memory, mds[i], r->d->engine, handles[i]);
        if (st == dnnl_success) n++;
    }
    if (st == dnnl_success) st = dnnl_primitive_execute(e->prim, r->d->streams[worker], n, exec);
    if (st == dnnl_success) st = dnnl_stream_wait(r->d->streams[worker]);
    for (int i = 0; i < n; i++) dnnl_memory_destroy(exec[i].memory);
    if (st == dnnl_success && mm->epilogue) {
        int rows = ti == r->tiles_m - 1 ? r->last_m : GPTX_DNNL_TILE_M;
        int cols = tj == r->tiles_n - 1 ? r->last_n : GPTX_DNNL_TILE_N;
        mm->epilogue(mm->epilogue_ctx, worker, c, rows, cols, m0, n0);
    }
    return st;
}

/* K is taken WIDEN_KC at a time, so the fp32 copies of a tile's operands
 * stay small whatever K is (a weight gradient's K is the batch's positions). */
#define WIDEN_KC 512

static void widen_block(float *dst, const uint16_t *src, int rows, int cols, size_t row_stride,
                        size_t col_stride) {
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            dst[(size_t)i * cols + j] =
                gptx_cpu_bf16_to_f32(src[(size_t)i * row_stride + (size_t)j * col_stride]);
}

/* The same product as a oneDNN tile, on CPUs without its bf16 kernels: the
 * bf16 operands are exact in fp32, so an fp32 sgemm of their widened copies
 * is the product oneDNN computes (fp32 accumulation), the sum in another
 * order; the bias is added and the result rounded once, as oneDNN does. The
 * K blocks are fixed, so the bits still depend on the shape alone. */
static void run_tile_widened(matmul_run *r, int worker, int tile) {
    const gptx_cpu_matmul *mm = r->mm;
    int ti = tile / r->tiles_n, tj = tile % r->tiles_n;
    size_t m0 = (size_t)ti * GPTX_DNNL_TILE_M, n0 = (size_t)tj * GPTX_DNNL_TILE_N;
    int rows = ti == r->tiles_m - 1 ? r->last_m : GPTX_DNNL_TILE_M;
    int cols = tj == r->tiles_n - 1 ? r->last_n : GPTX_DNNL_TILE_N;
    float *acc = r->d->tile[worker];
    float *a = r->d->scratch[worker], *b = a + (size_t)GPTX_DNNL_TILE_M * WIDEN_KC;
    for (int k0 = 0; k0 < mm->K; k0 += WIDEN_KC) {
        int kc = mm->K - k0 < WIDEN_KC ? mm->K - k0 : WIDEN_KC;
        widen_block(a, mm->A + m0 * mm->a_row + (size_t)k0 * mm->a_col, rows, kc, mm->a_row,
                    mm->a_col);
        widen_block(b, mm->B + (size_t)k0 * mm->b_row + n0 * mm->b_col, kc, cols, mm->b_row,
                    mm->b_col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, kc, 1.0f, a, kc, b,
                    cols, k0 ? 1.0f : 0.0f, acc, cols);
    }
    if (mm->bias)
        for (int i = 0; i < rows; i++)
            for (int j = 0; j < cols; j++)
                acc[(size_t)i * cols + j] += gptx_cpu_bf16_to_f32(mm->bias[n0 + (size_t)j]);
    if (mm->epilogue) {
        mm->epilogue(mm->epilogue_ctx, worker, acc, rows, cols, m0, n0);
        return;
    }
    for (int i = 0; i < rows; i++) {
        const float *src = acc + (size_t)i * cols;
        size_t at = (m0 + (size_t)i) * mm->ldc + n0;
        if (!mm->c_f32) {
            gptx_cpu_bf16_narrow((uint16_t *)mm->C + at, src, (size_t)cols);
        } else if (mm->accumulate) {
            float *c = (float *)mm->C + at;
            for (int j = 0; j < cols; j++) c[j] += src[j];
        } else {
            memcpy((float *)mm->C + at, src, (size_t)cols * sizeof(float));
        }
    }
}

static void matmul_worker(void *vp, int worker) {
    matmul_run *r = vp;
    int prev = omp_single_enter();
    int ntiles = r->tiles_m * r->tiles_n;
    for (int t = atomic_fetch_add(&r->next, 1); t < ntiles; t = atomic_fetch_add(&r->next, 1)) {
        if (r->d->widen && !r->mm->A32) {
            run_tile_widened(r, worker, t);
            continue;
        }
        dnnl_status_t st = run_tile(r, worker, t);
        if (st != dnnl_success) {
            int none = 0;
            atomic_compare_exchange_strong(&r->status, &none, (int)st);
        }
    }
    omp_single_leave(prev);
}

int gptx_cpu_dnnl_matmul(gptx_backend *be, const gptx_cpu_matmul *mm) {
    gptx_cpu_dnnl *d = be->dnnl;
    if (mm->M <= 0 || mm->N <= 0 || mm->K <= 0) return GPTX_OK;
    matmul_run r = {.d = d, .mm = mm};
    r.tiles_m = (mm->M + GPTX_DNNL_TILE_M - 1) / GPTX_DNNL_TILE_M;
    r.tiles_n = (mm->N + GPTX_DNNL_TILE_N - 1) / GPTX_DNNL_TILE_N;
    int tm = mm->M < GPTX_DNNL_TILE_M ? mm->M : GPTX_DNNL_TILE_M;
    int tn = mm->N < GPTX_DNNL_TILE_N ? mm->N : GPTX_DNNL_TILE_N;
    int last_m = mm->M - (r.tiles_m - 1) * GPTX_DNNL_TILE_M;
    int last_n = mm->N - (r.tiles_n - 1) * GPTX_DNNL_TILE_N;
    r.last_m = last_m;
    r.last_n = last_n;
    int widen = d->widen && !mm->A32;
    int rc = mm->epilogue || widen ? tile_buffers(d) : GPTX_OK;
    if (rc != GPTX_OK) return rc;
    if (widen) {
        GPTX_TRY(gptx_cpu_blas_enter());
        rc = grow_scratch(d, (size_t)(GPTX_DNNL_TILE_M + GPTX_DNNL_TILE_N) * WIDEN_KC *
                                 sizeof(float));
        if (rc != GPTX_OK) return rc;
        int nworkers = r.tiles_m * r.tiles_n < d->nworkers ? r.tiles_m * r.tiles_n : d->nworkers;
        gptx_threadpool_run(be->pool, nworkers, matmul_worker, &r);
        return GPTX_OK;
    }
    int prev = omp_single_enter();
    size_t scratch = 0;
    for (int i = 0; i < 2 && rc == GPTX_OK; i++)
        for (int j = 0; j < 2 && rc == GPTX_OK; j++) {
            int cols = j ? last_n : tn;
            /* an epilogue's tile is packed: leading dimension = its columns */
            prim_key k = {i ? last_m : tm, cols, mm->K, mm->a_row, mm->a_col, mm->b_row,
                          mm->b_col, mm->epilogue ? (size_t)cols : mm->ldc,
                          mm->epilogue ? 1 : mm->c_f32, mm->epilogue ? 0 : mm->accumulate,
                          mm->bias != NULL, mm->A32 != NULL};
            rc = lookup(d, &k, &r.prim[i][j]);
            if (rc == GPTX_OK && r.prim[i][j]->scratch_bytes > scratch)
                scratch = r.prim[i][j]->scratch_bytes;
        }
    omp_single_leave(prev);
    if (rc == GPTX_OK) rc = grow_scratch(d, scratch);
    if (rc != GPTX_OK) return rc;
    int nworkers = r.tiles_m * r.tiles_n < d->nworkers ? r.tiles_m * r.tiles_n : d->nworkers;
    gptx_threadpool_run(be->pool, nworkers, matmul_worker, &r);
    int st = atomic_load(&r.status);
    if (st != 0)
        return dnnl_failed((dnnl_status_t)st, "dnnl_primitive_execute (a matrix product tile)");
    return GPTX_OK;
}

/* One product on the calling pool worker (cpu_dnnl.h): the tiles of
 * gptx_cpu_dnnl_matmul, one after the other, so the same bits. Other workers
 * may be in here at the same time: the shared state is touched under the
 * lock, a full cache is never evicted (a missing primitive is made for this
 * call only), and a scratchpad larger than the shared ones is this call's
 * own, since the others' may be in use. */
int gptx_cpu_dnnl_matmul_worker(gptx_backend *be, int worker, const gptx_cpu_matmul *mm) {
    gptx_cpu_dnnl *d = be->dnnl;
    if (mm->M <= 0 || mm->N <= 0 || mm->K <= 0) return GPTX_OK;
    matmul_run r = {.d = d, .mm = mm};
    r.tiles_m = (mm->M + GPTX_DNNL_TILE_M - 1) / GPTX_DNNL_TILE_M;
    r.tiles_n = (mm->N + GPTX_DNNL_TILE_N - 1) / GPTX_DNNL_TILE_N;
    r.last_m = mm->M - (r.tiles_m - 1) * GPTX_DNNL_TILE_M;
    r.last_n = mm->N - (r.tiles_n - 1) * GPTX_DNNL_TILE_N;
    prim_entry own[2][2];
    int owned[2][2] = {{0}}, prev = omp_single_enter();
    size_t scratch = 0;
    pthread_mutex_lock(&d->lock);
    int rc = mm->epilogue || d->widen ? tile_buffers(d) : GPTX_OK;
    if (rc == GPTX_OK && d->widen) /* the same size every time: grows once, before any use */
        rc = grow_scratch(d, (size_t)(GPTX_DNNL_TILE_M + GPTX_DNNL_TILE_N) * WIDEN_KC *
                                 sizeof(float));
    for (int i = 0; i < 2 && rc == GPTX_OK && !d->widen; i++)
        for (int j = 0; j < 2 && rc == GPTX_OK; j++) {
            int cols = j ? r.last_n : (mm->N < GPTX_DNNL_TILE_N ? mm->N : GPTX_DNNL_TILE_N);
            prim_key k = {i ? r.last_m : (mm->M < GPTX_DNNL_TILE_M ? mm->M : GPTX_DNNL_TILE_M),
                          cols, mm->K, mm->a_row, mm->a_col, mm->b_row, mm->b_col,
                          mm->epilogue ? (size_t)cols : mm->ldc, mm->epilogue ? 1 : mm->c_f32,
                          mm->epilogue ? 0 : mm->accumulate, mm->bias != NULL, mm->A32 != NULL};
            int cached = d->ncache < CACHE_CAP;
            for (int c = 0; c < d->ncache && !cached; c++)
                cached = key_eq(&d->cache[c].key, &k);
            if (cached) {
                rc = lookup(d, &k, &r.prim[i][j]);
            } else {
                rc = make_primitive(d, &k, &own[i][j]);
                if (own[i][j].prim) owned[i][j] = 1, r.prim[i][j] = &own[i][j];
            }
            if (rc == GPTX_OK && r.prim[i][j]->scratch_bytes > scratch)
                scratch = r.prim[i][j]->scratch_bytes;
        }
    pthread_mutex_unlock(&d->lock);
    void *mine = d->scratch[worker], *tmp = NULL; /* as grown above */
    if (rc == GPTX_OK && scratch > d->scratch_bytes) { /* only grown by the pool form */
        tmp = malloc(scratch);
        if (!tmp) rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (oneDNN scratchpad)");
        d->scratch[worker] = tmp;
    }
    if (rc == GPTX_OK) matmul_worker(&r, worker); /* takes every tile in order */
    d->scratch[worker] = mine;
    free(tmp);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            if (owned[i][j]) dnnl_primitive_destroy(own[i][j].prim);
    omp_single_leave(prev);
    int st = atomic_load(&r.status);
    if (rc == GPTX_OK && st != 0)
        rc = dnnl_failed((dnnl_status_t)st, "dnnl_primitive_execute (a matrix product tile)");
    return rc;
}

/* ---- lifetime ----------------------------------------------------------------- */

/* dnnl_unimplemented where this oneDNN has no bf16 matmul for this CPU. */
static dnnl_status_t probe_bf16(gptx_cpu_dnnl *d) {
    md_t a, b, c;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b), memset(&c, 0, sizeof c);
    dnnl_dims_t da = {GPTX_DNNL_TILE_M, 256}, sa = {256, 1};
    dnnl_dims_t db = {256, GPTX_DNNL_TILE_N}, sb = {GPTX_DNNL_TILE_N, 1};
    dnnl_dims_t dc = {GPTX_DNNL_TILE_M, GPTX_DNNL_TILE_N}, sc = {GPTX_DNNL_TILE_N, 1};
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t st = md_strided(&a, da, dnnl_bf16, sa);
    if (st == dnnl_success) st = md_strided(&b, db, dnnl_bf16, sb);
    if (st == dnnl_success) st = md_strided(&c, dc, dnnl_f32, sc);
    if (st == dnnl_success) st = matmul_pd(&pd, d->engine, &a, &b, NULL, &c, NULL);
    if (pd) dnnl_primitive_desc_destroy(pd);
    md_free(&a), md_free(&b), md_free(&c);
    return st;
}

/* The kernel oneDNN picks for a bf16 product tile on this CPU, or, where it
 * has none, the widened products that stand in for it. */
/* " <impl>" of the cached primitive for k, or "" */
static void impl_of(gptx_cpu_dnnl *d, const prim_key *k, char *out, size_t size) {
    prim_entry *e = NULL;
    const char *impl = NULL;
    const_dnnl_primitive_desc_t pd = NULL;
    if (lookup(d, k, &e) == GPTX_OK &&
        dnnl_primitive_get_primitive_desc(e->prim, &pd) == dnnl_success &&
        dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success && impl)
        snprintf(out, size, " %s", impl);
    gptx_clear_error();
}

static void describe(gptx_cpu_dnnl *d) {
    const dnnl_version_t *v = dnnl_version();
    int n = snprintf(d->describe, sizeof d->describe, "oneDNN %d.%d.%d", v->major, v->minor,
                     v->patch);
    /* GPTX_CPU_BF16_WIDEN=1: the widened products even where oneDNN has
     * bf16 kernels (so that CPUs with them test the fallback too) */
    const char *env = getenv("GPTX_CPU_BF16_WIDEN");
    if ((env && strcmp(env, "1") == 0) || probe_bf16(d) == dnnl_unimplemented) {
        d->widen = 1;
        snprintf(d->describe + n, sizeof d->describe - (size_t)n,
                 " (no bf16 matmul for this CPU: bf16 products widened to fp32 sgemm)");
        return;
    }
    prim_key k = {GPTX_DNNL_TILE_M, GPTX_DNNL_TILE_N, 256, 256, 1, 1, 256, GPTX_DNNL_TILE_N,
                  1, 0, 0, 0};
    impl_of(d, &k, d->describe + n, sizeof d->describe - (size_t)n);
}

int gptx_cpu_dnnl_create(gptx_cpu_dnnl **out, int nworkers) {
    *out = NULL;
    /* GPTX_CPU_BF16_HW=0: oneDNN too runs without the bf16 instructions
     * (possible only before its first primitive in the process) */
    const char *env = getenv("GPTX_CPU_BF16_HW");
    if (env && strcmp(env, "0") == 0) (void)dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx512_core);
    gptx_cpu_dnnl *d = calloc(1, sizeof *d);
    if (!d) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    d->nworkers = nworkers;
    d->streams = calloc((size_t)nworkers, sizeof *d->streams);
    d->scratch = calloc((size_t)nworkers, sizeof *d->scratch);
    d->tile = calloc((size_t)nworkers, sizeof *d->tile);
    int rc = GPTX_OK;
    if (!d->streams || !d->scratch || !d->tile) {
        rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        goto done;
    }
    if (pthread_mutex_init(&d->lock, NULL) != 0) {
        rc = GPTX_FAIL(GPTX_ERR_BACKEND, "cannot create a mutex");
        goto done;
    }
    d->lock_ready = 1;
    DNNL_TRY(dnnl_engine_create(&d->engine, dnnl_cpu, 0));
    for (int w = 0; w < nworkers; w++)
        DNNL_TRY(dnnl_stream_create(&d->streams[w], d->engine, dnnl_stream_default_flags));
    int prev = omp_single_enter();
    describe(d);
    omp_single_leave(prev);
done:
    if (rc != GPTX_OK) {
        gptx_cpu_dnnl_destroy(d);
        return rc;
    }
    *out = d;
    return GPTX_OK;
}

void gptx_cpu_dnnl_destroy(gptx_cpu_dnnl *d) {
    if (!d) return;
    for (int i = 0; i < d->ncache; i++) entry_free(&d->cache[i]);
    for (int w = 0; d->streams && w < d->nworkers; w++)
        if (d->streams[w]) dnnl_stream_destroy(d->streams[w]);
    for (int w = 0; d->scratch && w < d->nworkers; w++) free(d->scratch[w]);
    for (int w = 0; d->tile && w < d->nworkers; w++) free(d->tile[w]);
    if (d->engine) dnnl_engine_destroy(d->engine);
    if (d->lock_ready) pthread_mutex_destroy(&d->lock);
    free(d->streams);
    free(d->scratch);
    free(d->tile);
    free(d);
}

const char *gptx_cpu_dnnl_describe(const gptx_cpu_dnnl *d) { return d ? d->describe : ""; }

const char *gptx_cpu_dnnl_describe_f32(gptx_cpu_dnnl *d) {
    if (!d) return "";
    if (!d->describe_f32[0]) { /* on first use: bf16 contexts make no f32 primitive */
        const dnnl_version_t *v = dnnl_version();
        int n = snprintf(d->describe_f32, sizeof d->describe_f32, "oneDNN %d.%d.%d f32", v->major,
                         v->minor, v->patch);
        prim_key k = {GPTX_DNNL_TILE_M, GPTX_DNNL_TILE_N, 256, 256, 1, 1, 256, GPTX_DNNL_TILE_N,
                      1, 0, 0, 1};
        int prev = omp_single_enter();
        impl_of(d, &k, d->describe_f32 + n, sizeof d->describe_f32 - (size_t)n);
        omp_single_leave(prev);
    }
    return d->describe_f32;
}

size_t gptx_cpu_dnnl_scratch_bytes(const gptx_cpu_dnnl *d) {
    if (!d) return 0;
    size_t tiles = d->tile[0] ? (size_t)GPTX_DNNL_TILE_M * GPTX_DNNL_TILE_N * sizeof(float) : 0;
    return (d->scratch_bytes + tiles) * (size_t)d->nworkers;
}
