/* One oneDNN matmul for the reference-rate programs (gptx-bench-bf16gemm,
 * gptx-bench-sgemm --lib onednn, gptx-bench-gemm-ceiling --lib onednn),
 * with oneDNN's own OpenMP threads: C (M, N) = op(A) (M, K) op(B) (K, N)
 * [+ C], row-major, strides as cblas's (lda, ldb, ldc; ta/tb transposed).
 * Builds on oneDNN 2.6+ and 3.x (the API differences as in
 * backends/cpu/cpu_dnnl.c). Header-only, after bench_common.h; built where
 * GPTX_HAVE_DNNL. */
#ifndef GPTX_BENCH_DNNL_H
#define GPTX_BENCH_DNNL_H

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
#include <stdio.h>

/* the OpenMP runtime oneDNN runs on (libgomp) */
int omp_get_max_threads(void);
void omp_set_num_threads(int n);

typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_desc_t md[3]; /* 3.x: handles (never destroyed: a few per program) */
    char impl[64];            /* the kernel oneDNN chose, e.g. "brg:avx512_core" */
} bench_dnnl_mm;

static inline dnnl_status_t bench_dnnl_md(dnnl_memory_desc_t *md, dnnl_dim_t r, dnnl_dim_t c,
                                          dnnl_data_type_t dt, dnnl_dim_t sr, dnnl_dim_t sc) {
    dnnl_dims_t d = {r, c}, s = {sr, sc};
#if DNNL_VERSION_MAJOR >= 3
    return dnnl_memory_desc_create_with_strides(md, 2, d, dt, s);
#else
    return dnnl_memory_desc_init_by_strides(md, 2, d, dt, s);
#endif
}

#if DNNL_VERSION_MAJOR >= 3
#define BENCH_DNNL_MD(m) (m)
#else
#define BENCH_DNNL_MD(m) (&(m))
#endif

/* The primitive for one product shape; accumulate: C += (a sum post-op). */
static inline dnnl_status_t bench_dnnl_create(bench_dnnl_mm *mm, dnnl_engine_t eng,
                                              dnnl_data_type_t in, int ta, int tb, int M, int N,
                                              int K, int lda, int ldb, int ldc, int accumulate) {
    dnnl_status_t st = bench_dnnl_md(&mm->md[0], M, K, in, ta ? 1 : lda, ta ? lda : 1);
    if (st == dnnl_success) st = bench_dnnl_md(&mm->md[1], K, N, in, tb ? 1 : ldb, tb ? ldb : 1);
    if (st == dnnl_success) st = bench_dnnl_md(&mm->md[2], M, N, dnnl_f32, ldc, 1);
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post = NULL;
    if (st == dnnl_success && accumulate) {
        st = dnnl_primitive_attr_create(&attr);
        if (st == dnnl_success) st = dnnl_post_ops_create(&post);
#if DNNL_VERSION_MAJOR >= 3
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(post, 1.0f, 0, dnnl_data_type_undef);
#else
        if (st == dnnl_success) st = dnnl_post_ops_append_sum(post, 1.0f);
#endif
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, post);
    }
    dnnl_primitive_desc_t pd = NULL;
#if DNNL_VERSION_MAJOR >= 3
    if (st == dnnl_success)
        st = dnnl_matmul_primitive_desc_create(&pd, eng, mm->md[0], mm->md[1], NULL, mm->md[2],
                                               attr);
#else
    dnnl_matmul_desc_t desc;
    if (st == dnnl_success) st = dnnl_matmul_desc_init(&desc, &mm->md[0], &mm->md[1], NULL,
                                                       &mm->md[2]);
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, eng, NULL);
#endif
    const char *impl = "?";
    if (st == dnnl_success) dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
    snprintf(mm->impl, sizeof mm->impl, "%s", impl ? impl : "?");
    if (st == dnnl_success) st = dnnl_primitive_create(&mm->prim, pd);
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post) dnnl_post_ops_destroy(post);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

static inline dnnl_status_t bench_dnnl_run(const bench_dnnl_mm *mm, dnnl_engine_t eng,
                                           dnnl_stream_t stream, const void *A, const void *B,
                                           float *C) {
    void *h[3] = {(void *)A, (void *)B, C};
    const int arg[3] = {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST};
    dnnl_exec_arg_t ex[3];
    int n = 0;
    dnnl_status_t st = dnnl_success;
    for (; n < 3 && st == dnnl_success; n++) {
        ex[n].arg = arg[n];
        st = dnnl_memory_create(&ex[n].memory, BENCH_DNNL_MD(mm->md[n]), eng, h[n]);
        if (st != dnnl_success) break;
    }
    if (st == dnnl_success) st = dnnl_primitive_execute(mm->prim, stream, 3, ex);
    if (st == dnnl_success) st = dnnl_stream_wait(stream);
    for (int i = 0; i < n && i < 3; i++) dnnl_memory_destroy(ex[i].memory);
    return st;
}

static inline const char *bench_dnnl_version(void) {
    static char v[32];
    const dnnl_version_t *ver = dnnl_version();
    snprintf(v, sizeof v, "oneDNN %d.%d.%d", ver->major, ver->minor, ver->patch);
    return v;
}

#endif
