/* Entries of the CUDA backend's table (lib/core/backend.h), defined in the .cu
 * files of backends/cuda and collected by cuda_table.c. C linkage, no CUDA
 * types: the table is plain C. */
#ifndef GPTX_CUDA_OPS_H
#define GPTX_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifndef GPTX_CUDA_FN
#define GPTX_CUDA_FN
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* cuda_backend.cu: lifetime, memory, copies, reductions */
GPTX_CUDA_FN int gptx_cuda_create(gptx_backend **out, const gptx_context_options *opts);
GPTX_CUDA_FN void gptx_cuda_destroy(gptx_backend *be);
GPTX_CUDA_FN int gptx_cuda_num_threads(const gptx_backend *be);
GPTX_CUDA_FN int gptx_cuda_precision(const gptx_backend *be);
GPTX_CUDA_FN void gptx_cuda_storage(const gptx_backend *be, gptx_backend_storage *out);
GPTX_CUDA_FN int gptx_cuda_download_act(gptx_backend *be, float *host, const float *src, size_t n);
GPTX_CUDA_FN int gptx_cuda_fill_act(gptx_backend *be, float *dst, float value, size_t n);
GPTX_CUDA_FN int gptx_cuda_convert_weights(gptx_backend *be, float *copy, const float *params,
                                           size_t n);
GPTX_CUDA_FN void *gptx_cuda_compute_stream(gptx_backend *be);
/* cuda_events.cu: timer events on the compute stream */
GPTX_CUDA_FN int gptx_cuda_event_create(gptx_backend *be, void **ev);
GPTX_CUDA_FN void gptx_cuda_event_destroy(gptx_backend *be, void *ev);
GPTX_CUDA_FN int gptx_cuda_event_record(gptx_backend *be, void *ev);
GPTX_CUDA_FN int gptx_cuda_event_elapsed(gptx_backend *be, void *start, void *stop,
                                         double *seconds);
/* cuda_graph.cu: capture and replay of lib/'s op sequences */
GPTX_CUDA_FN int gptx_cuda_graph_begin(gptx_backend *be, int segment, const uint64_t *key,
                                       int nkey, int *replayed);
GPTX_CUDA_FN int gptx_cuda_graph_end(gptx_backend *be, int segment, int status, int *rerun);
GPTX_CUDA_FN int gptx_cuda_act_from_res(gptx_backend *be, float *dst, const float *src, size_t n);
GPTX_CUDA_FN int gptx_cuda_layernorm_backward_act(gptx_backend *be, float *dinp, float *dinp_act,
                                                  float *dw, float *db, const float *dout,
                                                  const float *inp, const float *w,
                                                  const float *mean, const float *rstd, int N,
                                                  int C);
GPTX_CUDA_FN void gptx_cuda_describe(const gptx_backend *be, gptx_context_info *info);
GPTX_CUDA_FN void gptx_cuda_graph_counts(const gptx_backend *be, int64_t *captures,
                                         int64_t *replays);
GPTX_CUDA_FN int gptx_cuda_matmul_gelu_forward(gptx_backend *be, float *out, float *pre,
                                               const float *inp, const float *w,
                                               const float *bias, int N, int C, int OC);
GPTX_CUDA_FN int gptx_cuda_matmul_backward_dgelu(gptx_backend *be, float *dinp, float *dw,
                                                 float *dbias, const float *dout,
                                                 const float *inp, const float *w,
                                                 const float *pre, int N, int C, int OC);
GPTX_CUDA_FN int gptx_cuda_residual_layernorm_forward(gptx_backend *be, float *residual, float *out,
                                                      float *mean, float *rstd, const float *a,
                                                      const float *b, const float *w,
                                                      const float *bias, int N, int C, float eps);
GPTX_CUDA_FN int gptx_cuda_upload_param(gptx_backend *be, float *dst, const float *host, size_t n);
GPTX_CUDA_FN int gptx_cuda_download_param(gptx_backend *be, float *host, const float *src,
                                          size_t n);
GPTX_CUDA_FN int gptx_cuda_fill_param(gptx_backend *be, float *dst, float value, size_t n);
GPTX_CUDA_FN int gptx_cuda_alloc(gptx_backend *be, size_t bytes, void **ptr);
GPTX_CUDA_FN void gptx_cuda_free(gptx_backend *be, void *ptr);
GPTX_CUDA_FN int gptx_cuda_memory_stats(const gptx_backend *be, gptx_memory_stats *stats);
GPTX_CUDA_FN int gptx_cuda_reset_peak(gptx_backend *be);
GPTX_CUDA_FN int gptx_cuda_synchronize(gptx_backend *be);
GPTX_CUDA_FN int gptx_cuda_upload_f32(gptx_backend *be, float *dst, const float *host, size_t n);
GPTX_CUDA_FN int gptx_cuda_download_f32(gptx_backend *be, float *host, const float *src, size_t n);
GPTX_CUDA_FN int gptx_cuda_upload_i32(gptx_backend *be, int32_t *dst, const int32_t *host,
                                      size_t n);
GPTX_CUDA_FN int gptx_cuda_fill_f32(gptx_backend *be, float *dst, float value, size_t n);
GPTX_CUDA_FN int gptx_cuda_host_alloc_pinned(gptx_backend *be, size_t bytes, void **ptr);
GPTX_CUDA_FN void gptx_cuda_host_free_pinned(gptx_backend *be, void *ptr);
GPTX_CUDA_FN int gptx_cuda_sum_to_host(gptx_backend *be, double *host_sum, const float *x,
                                       size_t n);
GPTX_CUDA_FN int gptx_cuda_sum_squares_to_host(gptx_backend *be, double *host_sum, const float *x,
                                               size_t n);

/* cuda_ops.cu: embedding, LayerNorm, elementwise, cross-entropy, AdamW */
GPTX_CUDA_FN int gptx_cuda_embedding_forward(gptx_backend *be, float *out, const int32_t *inp,
                                             const float *wte, const float *wpe, int B, int T,
                                             int C);
GPTX_CUDA_FN int gptx_cuda_embedding_backward(gptx_backend *be, float *dwte, float *dwpe,
                                              const float *dout, const int32_t *inp, int B, int T,
                                              int C);
GPTX_CUDA_FN int gptx_cuda_layernorm_forward(gptx_backend *be, float *out, float *mean, float *rstd,
                                             const float *inp, const float *w, const float *b,
                                             int N, int C, float eps);
GPTX_CUDA_FN int gptx_cuda_layernorm_backward(gptx_backend *be, float *dinp, float *dw, float *db,
                                              const float *dout, const float *inp, const float *w,
                                              const float *mean, const float *rstd, int N, int C);
GPTX_CUDA_FN int gptx_cuda_gelu_forward(gptx_backend *be, float *out, const float *inp, size_t n);
GPTX_CUDA_FN int gptx_cuda_gelu_backward(gptx_backend *be, float *dinp, const float *inp,
                                         const float *dout, size_t n);
GPTX_CUDA_FN int gptx_cuda_residual_forward(gptx_backend *be, float *out, const float *a,
                                            const float *b, size_t n);
GPTX_CUDA_FN int gptx_cuda_crossentropy_forward(gptx_backend *be, float *losses, float *lse,
                                                float *logits, const int32_t *targets, int N, int V,
                                                int Vp, int mask_padded);
GPTX_CUDA_FN int gptx_cuda_crossentropy_fused(gptx_backend *be, float *losses, float *lse,
                                              float *logits, const int32_t *targets, int N, int V,
                                              int Vp, int mask_padded, float dloss);
GPTX_CUDA_FN int gptx_cuda_crossentropy_backward(gptx_backend *be, float *logits, const float *lse,
                                                 const int32_t *targets, int N, int V, int Vp,
                                                 float dloss);
GPTX_CUDA_FN int gptx_cuda_adamw(gptx_backend *be, float *params, const float *grads, float *m,
                                 float *v, const gptx_param_range *ranges, int nranges,
                                 const gptx_adamw_hyper *h);
GPTX_CUDA_FN int gptx_cuda_adamw_copy(gptx_backend *be, float *params, float *copy,
                                      const float *grads, float *m, float *v,
                                      const gptx_param_range *ranges, int nranges,
                                      const gptx_adamw_hyper *h);
GPTX_CUDA_FN int gptx_cuda_qkv_interleave(gptx_backend *be, float *qkv, const float *q,
                                          const float *k, const float *v, int N, int C);
GPTX_CUDA_FN int gptx_cuda_qkv_split(gptx_backend *be, float *q, float *k, float *v,
                                     const float *qkv, int N, int C);

/* cuda_matmul.cu: cuBLASLt products, bias gradient */
GPTX_CUDA_FN int gptx_cuda_matmul_forward(gptx_backend *be, float *out, const float *inp,
                                          const float *w, const float *bias, int N, int C, int OC);
GPTX_CUDA_FN int gptx_cuda_matmul_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                           const float *dout, const float *inp, const float *w,
                                           int N, int C, int OC);

/* cuda_attention.cu: causal flash attention. flash: GPTX_CUDA_FLASH_SIMT
 * always the CUDA-core kernels (the GPTX_ATTENTION_FLASH_SIMT variant);
 * otherwise the tensor-core kernels (cuda_flash.cu) where they apply, in
 * the backend's tile configuration (GPTX_CUDA_FLASH_DEFAULT) or in
 * configuration 1..GPTX_CUDA_FLASH_VARIANTS (GPTX_VARIANT_ATTENTION_TILES) */
#define GPTX_CUDA_FLASH_SIMT 0
#define GPTX_CUDA_FLASH_DEFAULT (-1)
#define GPTX_CUDA_FLASH_VARIANTS 5
GPTX_CUDA_FN int gptx_cuda_attention_forward(gptx_backend *be, float *out, float *lse,
                                             const float *qkv, int B, int T, int C, int NH,
                                             int flash);
GPTX_CUDA_FN int gptx_cuda_attention_backward(gptx_backend *be, float *dqkv, const float *dout,
                                              const float *qkv, const float *out, const float *lse,
                                              int B, int T, int C, int NH, int flash);
GPTX_CUDA_FN int gptx_cuda_attention_kv_forward(gptx_backend *be, float *out, float *lse,
                                                const float *qkv, float *kcache, float *vcache,
                                                int n, int pos0, int cap, int C, int NH,
                                                int flash);
/* cuda_flash.cu: the name of tile configuration 1..GPTX_CUDA_FLASH_VARIANTS, else NULL */
GPTX_CUDA_FN const char *gptx_cuda_flash_variant_name(int variant);

/* cuda_table.c (the emulation renames it: tests/gpu/emu/cuda_emu.h) */
const gptx_backend_ops *gptx_cuda_backend_ops(void);

/* cuda_ops.cu, for the NCCL engine: x *= s (one rounding each) on `stream`,
 * queued (no wait) */
GPTX_CUDA_FN int gptx_cuda_scale_f32_on(void *stream, float *x, size_t n, float s);

#ifdef __cplusplus
}
#endif

#endif
