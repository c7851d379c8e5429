/* The CPU backend's kernels: what cpu_table.c dispatches to, implemented by
 * cpu_ops.c, cpu_ops_bf16.c, cpu_attention*.c, cpu_gemm.c, cpu_gemv.c and
 * variants/. They run on the runtime below them (cpu_runtime.h) and never
 * call back up into the table. Private to backends/cpu. */
#ifndef GPTX_CPU_KERNELS_H
#define GPTX_CPU_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_runtime.h"

/* AdamW's one pass over every parameter range, for both storage types
 * (cpu_ops.c, cpu_ops_bf16.c): the span [start, start + total) the ranges
 * cover, split evenly across tasks (0 when empty), and a task's slice. */
static inline size_t gptx_cpu_adamw_span(const gptx_param_range *ranges, int nranges,
                                         size_t *start) {
    size_t lo = SIZE_MAX, hi = 0;
    for (int r = 0; r < nranges; r++) {
        if (ranges[r].offset < lo) lo = ranges[r].offset;
        if (ranges[r].offset + ranges[r].count > hi) hi = ranges[r].offset + ranges[r].count;
    }
    *start = lo;
    return nranges <= 0 || hi <= lo ? 0 : hi - lo;
}

typedef struct {
    size_t s0, s1;            /* the elements of the range this task updates */
    float decay, step, rsbc2; /* 1 - lr wd, lr / (1 - beta1^t), 1 / sqrt(1 - beta2^t) */
} gptx_cpu_adamw_slice;

/* The part of range rg inside the task's [lo, hi); 0 when there is none. */
static inline int gptx_cpu_adamw_slice_of(const gptx_param_range *rg, const gptx_adamw_hyper *h,
                                          size_t lo, size_t hi, gptx_cpu_adamw_slice *s) {
    size_t r0 = rg->offset, r1 = r0 + rg->count;
    s->s0 = r0 > lo ? r0 : lo;
    s->s1 = r1 < hi ? r1 : hi;
    s->decay = 1.0f - h->lr * rg->weight_decay;
    s->step = h->lr / h->bias_correction1;
    s->rsbc2 = 1.0f / sqrtf(h->bias_correction2);
    return s->s0 < s->s1;
}

/* The fp32 kernels' tasks and rows (cpu_ops.c), also run by the bf16
 * kernels (cpu_ops_bf16.c) on converted copies, so that a bf16 op computes
 * exactly what the fp32 op computes from the widened inputs. A task with
 * ntasks = 1 covers everything its arguments name. */
typedef struct {
    float *out, *mean, *rstd;
    const float *inp, *w, *b;
    int N, C;
    float eps;
    int ntasks;
} gptx_cpu_ln_fwd_args;
typedef struct {
    float *dinp, *dw, *db;
    const float *dout, *inp, *w, *mean, *rstd;
    int N, C;
    int ntasks;
    int overwrite; /* dw and db = the sums instead of += (be->grad_overwrite) */
} gptx_cpu_ln_bwd_args;
typedef struct {
    float *out;
    const float *x, *y;
    size_t n;
    int ntasks;
} gptx_cpu_ew_args;
typedef struct {
    float *losses, *logits; /* logits: (N, Vp), or NULL when rows come from elsewhere */
    float *stats;           /* 3N: lse, max, sum per row */
    const int32_t *targets;
    int N, V, Vp, mask;
    float dloss;
    int ntasks;
} gptx_cpu_ce_args;
void gptx_cpu_ln_fwd_task(void *vp, int task);
void gptx_cpu_ln_bwd_rows_task(void *vp, int task);
void gptx_cpu_ln_bwd_cols_task(void *vp, int task);
void gptx_cpu_gelu_fwd_task(void *vp, int task);
void gptx_cpu_gelu_bwd_task(void *vp, int task);
void gptx_cpu_residual_task(void *vp, int task);
void gptx_cpu_ce_row_forward(gptx_cpu_ce_args *a, size_t n, float *row, int store_exp);
void gptx_cpu_ce_row_gradient(gptx_cpu_ce_args *a, size_t n, float *row, int exp_done);

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
/* cpu_exact.c: rank-invariant sums (backend.h exact_*) */
int gptx_cpu_exact_fold(gptx_backend *be, int64_t *bins, int32_t *win, const float *x, size_t n);
int gptx_cpu_exact_raise(gptx_backend *be, int64_t *bins, int32_t *win, const int32_t *to,
                         size_t n);
int gptx_cpu_exact_value(gptx_backend *be, float *out, const int64_t *bins, const int32_t *win,
                         size_t n);
/* The library of the fp32 products, from GPTX_CPU_FP32_GEMM: "openblas" 0,
 * "onednn" 1 (an error where gptx is built without oneDNN), unset or "auto"
 * 1 only where oneDNN is built in, the CPU has AVX-512 and OpenBLAS's kernel
 * (its core name) does not use it; anything else an error. The rule apart, on
 * its inputs, so a test sees every case on any CPU. */
int gptx_cpu_fp32_gemm_choice(int *use_dnnl);
int gptx_cpu_fp32_gemm_decide(const char *env, int have_dnnl, int cpu_avx512, const char *core,
                              int *use_dnnl);
/* Row-major sgemm (cblas argument order; trans_* are 0/1) run by the pool:
 * one single-threaded OpenBLAS call per thread on a slice of M or N, or
 * oneDNN's f32 matmul on fixed tiles (be->fp32_dnnl), so the bits do not
 * depend on the thread count (cpu_gemm.c). */
int gptx_cpu_sgemm(gptx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc);
/* out (OC) = w (OC, C) x (C) [+ bias]: one row's product, by fixed blocks of
 * rows on the pool (cpu_gemv.c). The bf16 form reads bf16 w and bias, an
 * fp32 x, and writes the fp32 result. */
int gptx_cpu_gemv(gptx_backend *be, float *out, const float *x, const float *w, const float *bias,
                  int C, int OC);
int gptx_cpu_gemv_bf16(gptx_backend *be, float *out, const float *x, const uint16_t *w,
                       const uint16_t *bias, int C, int OC);
/* gptx_cpu_gemv_bf16's C loop on the calling thread, for the test that the
 * AVX-512 form gives the same bits */
void gptx_cpu_gemv_bf16_reference(float *out, const float *x, const uint16_t *w,
                                  const uint16_t *bias, int C, int OC);
/* backend.h attention_kv_forward, both storage types (cpu_attention_kv.c) */
int gptx_cpu_attention_kv_forward(gptx_backend *be, float *out, float *lse, const float *qkv,
                                  float *kcache, float *vcache, int n, int pos0, int cap, int C,
                                  int NH);
/* Kernel variants for ablations (variants/): the instance table and its
 * buffers (cpu_variants.c), and the kernels behind them (cpu_ops_unfused.c,
 * cpu_attention_naive.c). */
int gptx_cpu_instance_ops(const gptx_backend *be, const gptx_kernel_variants *v,
                          gptx_backend_ops *ops);
void gptx_cpu_op_buffers(const gptx_backend *be, const gptx_kernel_variants *v, int B, int T,
                         int C, int NH, gptx_op_buffers *out);
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

/* bf16 storage (cpu_ops_bf16.c, cpu_attention.c): the same entries with every
 * [act] and [w] argument bf16 (uint16_t behind the float pointers), [p] bf16
 * when be->param_bf16. cpu_table.c picks them when be->act_bf16. */
int gptx_cpu_embedding_forward_bf16(gptx_backend *be, float *out, const int32_t *inp,
                                    const float *wte, const float *wpe, int B, int T, int C);
int gptx_cpu_embedding_backward_bf16(gptx_backend *be, float *dwte, float *dwpe,
                                     const float *dout, const int32_t *inp, int B, int T, int C);
int gptx_cpu_layernorm_forward_bf16(gptx_backend *be, float *out, float *mean, float *rstd,
                                    const float *inp, const float *w, const float *b, int N,
                                    int C, float eps);
int gptx_cpu_layernorm_backward_bf16(gptx_backend *be, float *dinp, float *dw, float *db,
                                     const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C);
int gptx_cpu_matmul_forward_bf16(gptx_backend *be, float *out, const float *inp, const float *w,
                                 const float *bias, int N, int C, int OC);
int gptx_cpu_matmul_backward_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                  const float *dout, const float *inp, const float *w, int N,
                                  int C, int OC);
/* the GELU fused into the products around it (backend.h's optional
 * entries): one rounding of the fp32 result, as a fused epilogue */
int gptx_cpu_matmul_gelu_forward_bf16(gptx_backend *be, float *out, float *pre, const float *inp,
                                      const float *w, const float *bias, int N, int C, int OC);
int gptx_cpu_matmul_backward_dgelu_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                        const float *dout, const float *inp, const float *w,
                                        const float *pre, int N, int C, int OC);
int gptx_cpu_attention_forward_bf16(gptx_backend *be, float *out, float *lse, const float *qkv,
                                    int B, int T, int C, int NH);
int gptx_cpu_attention_backward_bf16(gptx_backend *be, float *dqkv, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH);
int gptx_cpu_gelu_forward_bf16(gptx_backend *be, float *out, const float *inp, size_t n);
int gptx_cpu_gelu_backward_bf16(gptx_backend *be, float *dinp, const float *inp,
                                const float *dout, size_t n);
int gptx_cpu_residual_forward_bf16(gptx_backend *be, float *out, const float *a, const float *b,
                                   size_t n);
int gptx_cpu_crossentropy_forward_bf16(gptx_backend *be, float *losses, float *lse,
                                       float *logits, const int32_t *targets, int N, int V,
                                       int Vp, int mask_padded);
int gptx_cpu_crossentropy_backward_bf16(gptx_backend *be, float *logits, const float *lse,
                                        const int32_t *targets, int N, int V, int Vp,
                                        float dloss);
int gptx_cpu_crossentropy_fused_bf16(gptx_backend *be, float *losses, float *lse, float *logits,
                                     const int32_t *targets, int N, int V, int Vp,
                                     int mask_padded, float dloss);
int gptx_cpu_adamw_bf16(gptx_backend *be, float *params, const float *grads, float *m, float *v,
                        const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h);
/* host fp32 <-> bf16 buffers, on the pool */
int gptx_cpu_bf16_buffer_from_f32(gptx_backend *be, void *dst, const float *src, size_t n);
int gptx_cpu_bf16_buffer_to_f32(gptx_backend *be, float *dst, const void *src, size_t n);
int gptx_cpu_bf16_buffer_fill(gptx_backend *be, void *dst, float value, size_t n);
/* The backend's [res] type (fp32 or bf16) to its [act] type (bf16). */
int gptx_cpu_act_from_res(gptx_backend *be, float *dst, const float *src, size_t n);

#endif
