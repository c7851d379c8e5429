/* Ablation variants composed from a backend's own ops, shared by the CPU and
 * CUDA backends (their instance_ops plug them in).
 *
 * The separate-Q, K, V variant of the QKV projection: three
 * (C, C) products with the weight's row blocks [Wq; Wk; Wv], then a concat
 * into the (N, 3C) layout attention reads; backward splits dqkv and adds the
 * three input gradients. Same function as one (3C, C) product, other
 * rounding order. */
#ifndef GPTX_VARIANT_OPS_H
#define GPTX_VARIANT_OPS_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The ops the composition runs on, and the element sizes of its operands. */
typedef struct gptx_qkv_separate_ops {
    int (*matmul_forward)(gptx_backend *be, float *out, const float *inp, const float *w,
                          const float *bias, int N, int C, int OC);
    int (*matmul_backward)(gptx_backend *be, float *dinp, float *dw, float *dbias,
                           const float *dout, const float *inp, const float *w, int N, int C,
                           int OC);
    int (*residual_forward)(gptx_backend *be, float *out, const float *a, const float *b,
                            size_t n);
    int (*interleave)(gptx_backend *be, float *qkv, const float *q, const float *k,
                      const float *v, int N, int C);
    int (*split)(gptx_backend *be, float *q, float *k, float *v, const float *qkv, int N, int C);
    size_t act_bytes; /* per activation element */
    size_t w_bytes;   /* per element of the weights the products read */
} gptx_qkv_separate_ops;

/* Workspace bytes: q, k, v and one more (N, C) activation, each on a 64-byte
 * boundary. */
size_t gptx_qkv_separate_work_bytes(size_t act_bytes, int N, int C);

int gptx_qkv_separate_forward(const gptx_qkv_separate_ops *o, gptx_backend *be, float *qkv,
                              const float *inp, const float *w, const float *bias, void *work,
                              int N, int C);
int gptx_qkv_separate_backward(const gptx_qkv_separate_ops *o, gptx_backend *be, float *dinp,
                               float *dw, float *dbias, const float *dqkv, const float *inp,
                               const float *w, void *work, int N, int C);

/* AdamW dispatched once per tensor (range), the unfused variant of a
 * backend's one-pass adamw: the same arithmetic, one launch per range. */
typedef int (*gptx_adamw_fn)(gptx_backend *be, float *params, const float *grads, float *m,
                             float *v, const gptx_param_range *ranges, int nranges,
                             const gptx_adamw_hyper *h);
int gptx_adamw_per_tensor(gptx_adamw_fn adamw, gptx_backend *be, float *params,
                          const float *grads, float *m, float *v,
                          const gptx_param_range *ranges, int nranges,
                          const gptx_adamw_hyper *h);

#ifdef __cplusplus
}
#endif

#endif
