/* CPU reference backend: fp32, OpenBLAS for matrix products, a pthread pool
 * for everything else. Private to backends/cpu. */
#ifndef GPTX_CPU_BACKEND_H
#define GPTX_CPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_threadpool.h"

struct gptx_backend {
    gptx_threadpool *pool;
    int nthreads;
    uint64_t allocated, reserved, peak;
};

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

/* Kernels (cpu_ops.c, cpu_attention.c), matching gptx_backend_ops entries. */
int gptx_cpu_embedding_forward(gptx_backend *be, float *out, const int32_t *inp, const float *wte,
                               const float *wpe, int B, int T, int C);
int gptx_cpu_embedding_backward(gptx_backend *be, float *dwte, float *dwpe, const float *dout,
                                const int32_t *inp, int B, int T, int C);
int gptx_cpu_layernorm_forward(gptx_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C,
                               float eps);
int gptx_cpu_layernorm_backward(gptx_backend *be, float *dinp, float *dw, float *db,
                                const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, int N, int C);
int gptx_cpu_matmul_forward(gptx_backend *be, float *out, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC);
int gptx_cpu_matmul_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w, int N, int C,
                             int OC);
int gptx_cpu_attention_forward(gptx_backend *be, float *out, float *lse, const float *qkv, int B,
                               int T, int C, int NH);
int gptx_cpu_attention_backward(gptx_backend *be, float *dqkv, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int C, int NH);
int gptx_cpu_gelu_forward(gptx_backend *be, float *out, const float *inp, size_t n);
int gptx_cpu_gelu_backward(gptx_backend *be, float *dinp, const float *inp, const float *dout,
                           size_t n);
int gptx_cpu_residual_forward(gptx_backend *be, float *out, const float *a, const float *b,
                              size_t n);
int gptx_cpu_crossentropy_forward(gptx_backend *be, float *losses, float *lse, float *logits,
                                  const int32_t *targets, int N, int V, int Vp, int mask_padded);
int gptx_cpu_crossentropy_backward(gptx_backend *be, float *logits, const float *lse,
                                   const int32_t *targets, int N, int V, int Vp, float dloss);
int gptx_cpu_crossentropy_fused(gptx_backend *be, float *losses, float *lse, float *logits,
                                const int32_t *targets, int N, int V, int Vp, int mask_padded,
                                float dloss);
int gptx_cpu_sum_to_host(gptx_backend *be, double *host_sum, const float *x, size_t n);
int gptx_cpu_sum_squares_to_host(gptx_backend *be, double *host_sum, const float *x, size_t n);
/* Row-major sgemm (cblas argument order; trans_* are 0/1) run by the pool:
 * one single-threaded OpenBLAS call per thread on a slice of M or N, so the
 * bits do not depend on the thread count (cpu_gemm.c). */
void gptx_cpu_sgemm(gptx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                    const float *A, int lda, const float *B, int ldb, float beta, float *C,
                    int ldc);
/* OpenBLAS runs single-threaded under gptx (a process-wide setting): the
 * pool supplies the parallelism. */
void gptx_cpu_blas_single(void);
/* Kernel variants for ablations (cpu_ops_unfused.c, cpu_attention_naive.c). */
int gptx_cpu_attention_naive_forward(gptx_backend *be, float *out, float *att, const float *mask,
                                     const float *qkv, int B, int T, int C, int NH);
int gptx_cpu_attention_naive_backward(gptx_backend *be, float *dqkv, float *datt,
                                      const float *dout, const float *qkv, const float *att,
                                      int B, int T, int C, int NH);
int gptx_cpu_layernorm_forward_unfused(gptx_backend *be, float *out, float *mean, float *rstd,
                                       const float *inp, const float *w, const float *b, int N,
                                       int C, float eps);
int gptx_cpu_layernorm_backward_unfused(gptx_backend *be, float *dinp, float *dw, float *db,
                                        const float *dout, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int N, int C);
int gptx_cpu_gelu_forward_unfused(gptx_backend *be, float *out, const float *inp, size_t n);
int gptx_cpu_gelu_backward_unfused(gptx_backend *be, float *dinp, const float *inp,
                                   const float *dout, size_t n);
int gptx_cpu_qkv_interleave(gptx_backend *be, float *qkv, const float *q, const float *k,
                            const float *v, int N, int C);
int gptx_cpu_qkv_split(gptx_backend *be, float *q, float *k, float *v, const float *qkv, int N,
                       int C);
int gptx_cpu_adamw(gptx_backend *be, float *params, const float *grads, float *m, float *v,
                   const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h);

#endif
