/*
 * The private backend interface: one table of function pointers per backend.
 * lib/ calls only through this table and never knows which backend runs.
 *
 * Buffers are opaque device pointers obtained from alloc(). Shapes are noted
 * as (rows, cols). Every op returns a gptx_status and sets the error message
 * on failure.
 *
 * Storage classes (see `storage` below). The pointer types stay `float *`,
 * but what an op reads or writes through an argument depends on its class:
 *   parameters, gradients, AdamW moments, per-row statistics (LayerNorm
 *   mean/rstd, log-sum-exp, losses): fp32 always;
 *   activations (marked [act]: layer inputs/outputs, qkv, logits and their
 *   gradients): storage.act_bytes per element (4 = fp32, 2 = bf16);
 *   the residual stream (marked [res]: the embedding output, each block's
 *   sums and their gradient): storage.res_bytes per element (fp32 under the
 *   bf16 mixed policy, as torch.autocast keeps it; the activation type
 *   otherwise);
 *   weights read by the matrix products (marked [w]): the parameter buffer
 *   itself when storage.wcopy_bytes is 0, else the compute copy of the
 *   weights (wcopy_bytes per element) that lib/ keeps in step with the
 *   parameters through convert_weights. The embedding and LayerNorm ops read
 *   the parameters themselves ([p]: the fp32 master under bf16 mixed, as
 *   torch.autocast, which rounds only the products' operands).
 * Parameters and AdamW moments (marked [p]) take storage.param_bytes per
 * element (4 = fp32, 2 = bf16 under the pure-bf16 policy); lib/ moves them
 * with upload_param / download_param / fill_param, which convert to and
 * from host fp32. Gradients stay fp32 under every policy.
 * lib/ never dereferences device pointers and carves views in bytes, so it
 * does not need to know what the element types are.
 */
#ifndef GPTX_BACKEND_H
#define GPTX_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"
#include "gptx/gptx_experimental.h"

typedef struct gptx_backend gptx_backend; /* backend-private state */
typedef struct gptx_backend_ops gptx_backend_ops;

/* Kernel variants for ablation studies (the experimental
 * gptx_context_set_variant): which implementation each op of a model or
 * optimizer instance uses. The defaults are the production ops. */
typedef struct gptx_kernel_variants {
    int attention;       /* gptx_attention_impl */
    int fused_qkv;       /* 0/1 */
    int fused_norm_gelu; /* 0/1 */
    int fused_adamw;     /* 0/1 */
    int attention_tiles; /* 0 = the backend's own; else a backend's tile configuration */
} gptx_kernel_variants;

/* Backend capabilities (backend_ops.capabilities). */
enum {
    GPTX_BACKEND_CAP_HOST_MEMORY = 1u << 0, /* buffers are host memory the CPU may read */
    GPTX_BACKEND_CAP_CUDA_DEVICE = 1u << 1, /* buffers are memory of CUDA device opts.device;
                                               ops run on compute_stream */
};

/* Gradient fusions a backend instance offers (backend_ops.grad_fusion). */
enum {
    GPTX_GRAD_FUSE_NORM = 1u << 0, /* grad_sumsq: per-tensor sums of squares during backward */
    GPTX_GRAD_FUSE_ZERO = 1u << 1, /* grad_overwrite: zero_grad folded into the first write */
};

/* Device memory an instance's ops need besides the model's activations
 * (backend_ops.op_buffers), in bytes, each a multiple of 64. */
typedef struct gptx_op_buffers {
    size_t attention_state; /* per layer, from attention_forward to its backward */
    size_t attention_work;  /* scratch shared by the attention ops of every layer */
    size_t qkv_work;        /* scratch shared by qkv_forward / qkv_backward */
} gptx_op_buffers;

/* A contiguous range of the flat parameter buffer with its own weight decay. */
typedef struct gptx_param_range {
    size_t offset;
    size_t count;
    float weight_decay;
} gptx_param_range;

typedef struct gptx_adamw_hyper {
    float lr, beta1, beta2, eps;
    float bias_correction1; /* 1 - beta1^t */
    float bias_correction2; /* 1 - beta2^t */
    float grad_scale;       /* multiplies every gradient (global-norm clipping) */
    /* stochastic rounding of bf16 parameters/moments: Philox key (seed, step) */
    uint64_t rounding_seed;
    int64_t step; /* this update's number, 1 for the first */
} gptx_adamw_hyper;

/* How a backend stores each class of tensor under the context's precision. */
typedef struct gptx_backend_storage {
    size_t act_bytes;   /* bytes per activation element: 4 (fp32) or 2 (bf16) */
    size_t wcopy_bytes; /* 0: ops read the parameters; else bytes per element
                         * of the compute copy of the weights */
    size_t param_bytes; /* bytes per element of [p] buffers: 4 (fp32) or 2 (bf16) */
    size_t res_bytes;   /* bytes per element of [res] buffers; 0 = act_bytes */
} gptx_backend_storage;

struct gptx_backend_ops {
    const char *name;

    /* lifetime */
    int (*create)(gptx_backend **out, const gptx_context_options *opts);
    void (*destroy)(gptx_backend *be);
    int (*num_threads)(const gptx_backend *be);
    /* what the instance's buffers are (GPTX_BACKEND_CAP_*): what a
     * communicator engine asks instead of which backend it is */
    unsigned (*capabilities)(const gptx_backend *be);

    /* memory */
    int (*alloc)(gptx_backend *be, size_t bytes, void **ptr);
    void (*free)(gptx_backend *be, void *ptr);
    int (*memory_stats)(const gptx_backend *be, gptx_memory_stats *stats);
    int (*reset_peak)(gptx_backend *be);
    int (*synchronize)(gptx_backend *be);

    /* copies between host fp32 / int32 and device buffers */
    int (*upload_f32)(gptx_backend *be, float *dst, const float *host, size_t n);
    int (*download_f32)(gptx_backend *be, float *host, const float *src, size_t n);
    int (*upload_i32)(gptx_backend *be, int32_t *dst, const int32_t *host, size_t n);
    int (*fill_f32)(gptx_backend *be, float *dst, float value, size_t n);

    /* [res] out (B*T, C) = [p] wte[inp] + [p] wpe[t] */
    int (*embedding_forward)(gptx_backend *be, float *out, const int32_t *inp, const float *wte,
                             const float *wpe, int B, int T, int C);
    /* dwte[inp] += [res] dout, dwpe[t] += sum over b of dout */
    int (*embedding_backward)(gptx_backend *be, float *dwte, float *dwpe, const float *dout,
                              const int32_t *inp, int B, int T, int C);
    /* [act] out (N, C) = normalize([res] inp) * [p] w + [p] b, saves mean and rstd (N) */
    int (*layernorm_forward)(gptx_backend *be, float *out, float *mean, float *rstd,
                             const float *inp, const float *w, const float *b, int N, int C,
                             float eps);
    /* [res] dinp += ..., dw += ..., db += ... ([act] dout, [res] inp, [p] w) */
    int (*layernorm_backward)(gptx_backend *be, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int N, int C);
    /* out (N, OC) = inp (N, C) @ w^T (w is (OC, C)) + bias (OC, may be NULL) */
    int (*matmul_forward)(gptx_backend *be, float *out, const float *inp, const float *w,
                          const float *bias, int N, int C, int OC);
    /* dinp = dout @ w (overwrites; may be NULL), dw += dout^T @ inp, dbias += sum dout */
    int (*matmul_backward)(gptx_backend *be, float *dinp, float *dw, float *dbias,
                           const float *dout, const float *inp, const float *w, int N, int C,
                           int OC);
    /* QKV projection (the one product whose variants differ): qkv (N, 3C)
     * = inp (N, C) @ w^T + bias (w (3C, C), bias (3C) or NULL). */
    int (*qkv_forward)(gptx_backend *be, float *qkv, const float *inp, const float *w,
                       const float *bias, void *work, int N, int C); /* work: qkv_work */
    /* dinp (N, C) = dqkv @ w (overwrites), dw and dbias accumulate */
    int (*qkv_backward)(gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dqkv,
                        const float *inp, const float *w, void *work, int N, int C);
    /* causal self-attention from fused qkv (B, T, 3C) into out (B, T, C);
     * lse (B, NH, T) receives each row's softmax log-sum-exp for backward;
     * state is this layer's attention_state (op_buffers), work the
     * attention_work */
    int (*attention_forward)(gptx_backend *be, float *out, float *lse, void *state, void *work,
                             const float *qkv, int B, int T, int C, int NH);
    /* dqkv (B, T, 3C) = gradient (overwrites), from qkv, lse and state */
    int (*attention_backward)(gptx_backend *be, float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *lse, const void *state, void *work,
                              int B, int T, int C, int NH);
    /* tanh-approximated GELU */
    int (*gelu_forward)(gptx_backend *be, float *out, const float *inp, size_t n);
    /* dinp = gelu'(inp) * dout (overwrites) */
    int (*gelu_backward)(gptx_backend *be, float *dinp, const float *inp, const float *dout,
                         size_t n);
    /* [res] out = [res] a + [act] b */
    int (*residual_forward)(gptx_backend *be, float *out, const float *a, const float *b,
                            size_t n);
    /* logits (N, Vp): columns [V, Vp) set to -inf when mask_padded; losses (N)
     * per row (0 for ignored targets); lse (3N): each row's log-sum-exp in
     * [0, N), then 2N floats the backend may use for other per-row
     * statistics it needs in backward (the CPU backend: max, sum of exps). */
    int (*crossentropy_forward)(gptx_backend *be, float *losses, float *lse, float *logits,
                                const int32_t *targets, int N, int V, int Vp, int mask_padded);
    /* logits (N, Vp) overwritten with d(dloss * sum of row losses)/dlogits */
    int (*crossentropy_backward)(gptx_backend *be, float *logits, const float *lse,
                                 const int32_t *targets, int N, int V, int Vp, float dloss);
    /* Sum of losses in a fixed order (deterministic), into host memory. */
    int (*sum_to_host)(gptx_backend *be, double *host_sum, const float *x, size_t n);
    /* Sum of squares of x in a fixed order, into host memory. */
    int (*sum_squares_to_host)(gptx_backend *be, double *host_sum, const float *x, size_t n);
    /* One fused AdamW pass over every range of params/grads/m/v ([p] params,
     * m, v; fp32 grads). */
    int (*adamw)(gptx_backend *be, float *params, const float *grads, float *m, float *v,
                 const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h);

    /* OPTIONAL precision entries. NULL = fp32 everywhere: precision() is
     * GPTX_PRECISION_FP32, storage is {4, 0, 4}, and the act/weight copies are
     * never called. */
    /* the policy in effect (a gptx_precision, DEFAULT resolved) */
    int (*precision)(const gptx_backend *be);
    void (*storage)(const gptx_backend *be, gptx_backend_storage *out);
    /* host fp32 (n) <- [act] src (n), converting */
    int (*download_act)(gptx_backend *be, float *host, const float *src, size_t n);
    /* [act] dst (n) = value */
    int (*fill_act)(gptx_backend *be, float *dst, float value, size_t n);
    /* [act] dst (n) = [res] src (n), rounded: the residual gradient as the
     * dout of the projections' products. Needed when res_bytes differs from
     * act_bytes (then lib/ calls it; NULL otherwise). */
    int (*act_from_res)(gptx_backend *be, float *dst, const float *src, size_t n);
    /* layernorm_backward that also leaves [act] dinp_act (N, C) = what
     * act_from_res makes of the updated dinp, written while each row is at
     * hand instead of by a second pass. NULL: lib/ calls layernorm_backward
     * then act_from_res. */
    int (*layernorm_backward_act)(gptx_backend *be, float *dinp, float *dinp_act, float *dw,
                                  float *db, const float *dout, const float *inp, const float *w,
                                  const float *mean, const float *rstd, int N, int C);
    /* [w] copy (n) = params (n) rounded to the copy's type */
    int (*convert_weights)(gptx_backend *be, float *copy, const float *params, size_t n);
    /* adamw that also stores every parameter it updates into [w] copy (the
     * compute copy, same offsets as params) as convert_weights rounds it, in
     * the same pass: the copy of an updated element is then current without
     * a second pass over the parameters. NULL: lib/ calls adamw and then
     * convert_weights before the next forward pass. */
    int (*adamw_copy)(gptx_backend *be, float *params, float *copy, const float *grads, float *m,
                      float *v, const gptx_param_range *ranges, int nranges,
                      const gptx_adamw_hyper *h);
    /* [p] dst (n) <- host fp32 (rounded to nearest even when [p] is bf16);
     * host fp32 (n) <- [p] src (exact); [p] dst (n) = value. NULL: [p] is
     * fp32 and lib/ uses upload_f32 / download_f32 / fill_f32. */
    int (*upload_param)(gptx_backend *be, float *dst, const float *host, size_t n);
    int (*download_param)(gptx_backend *be, float *host, const float *src, size_t n);
    int (*fill_param)(gptx_backend *be, float *dst, float value, size_t n);

    /* OPTIONAL: what computes, for gptx_context_get_info (NULL: products
     * "unknown", bf16_native 0); fills info->bf16_native and info->products. */
    void (*describe)(const gptx_backend *be, gptx_context_info *info);

    /* OPTIONAL (may be NULL, e.g. CPU: callers fall back to malloc/free):
     * page-locked host memory for fast asynchronous uploads (data loader batches). */
    int (*host_alloc_pinned)(gptx_backend *be, size_t bytes, void **ptr);
    void (*host_free_pinned)(gptx_backend *be, void *ptr);

    /* [res] residual (N, C) = [res] a + [act] b, then [act] out (N, C) =
     * LayerNorm(residual) as layernorm_forward computes it from the stored
     * residual, saving mean and rstd (N): one op, fused or not as the
     * backend decides. The backward needs no entry: layernorm_backward
     * accumulates into dinp, and that buffer is the gradient of the
     * residual, of a and of b alike. */
    int (*residual_layernorm_forward)(gptx_backend *be, float *residual, float *out, float *mean,
                                      float *rstd, const float *a, const float *b, const float *w,
                                      const float *bias, int N, int C, float eps);

    /* The MLP's product with its GELU, one op each way. Forward: [act] pre
     * (N, OC) = inp @ w^T + bias, out = gelu(pre). Backward of a product
     * whose input was inp = gelu(pre) (N, C): as matmul_backward, but dinp
     * (overwritten) = (dout @ w) * gelu'(pre). */
    int (*matmul_gelu_forward)(gptx_backend *be, float *out, float *pre, const float *inp,
                               const float *w, const float *bias, int N, int C, int OC);
    int (*matmul_backward_dgelu)(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                 const float *dout, const float *inp, const float *w,
                                 const float *pre, int N, int C, int OC);

    /* Cross-entropy forward and backward in one pass over the logits, with
     * the same results bit for bit as crossentropy_forward, then
     * crossentropy_backward; used by gptx_model_forward_backward, where
     * nobody reads the logits. */
    int (*crossentropy_fused)(gptx_backend *be, float *losses, float *lse, float *logits,
                              const int32_t *targets, int N, int V, int Vp, int mask_padded,
                              float dloss);

    /* OPTIONAL kernel variants for ablation studies (NULL: the backend offers
     * the defaults only). A model or optimizer runs on its own copy of the
     * table: instance_ops replaces the entries of *ops (a copy of this table)
     * that the variants change, or fails with GPTX_ERR_UNSUPPORTED naming
     * what the backend does not offer. lib/ never looks at the variants. */
    int (*instance_ops)(const gptx_backend *be, const gptx_kernel_variants *v,
                        gptx_backend_ops *ops);
    /* OPTIONAL (NULL: none): device memory the ops of an instance with
     * variants v need for a batch (B, T), added to *out (zeroed by the
     * caller). */
    void (*op_buffers)(const gptx_backend *be, const gptx_kernel_variants *v, int B, int T, int C,
                       int NH, gptx_op_buffers *out);

    /* OPTIONAL (NULL: the backend runs everything in order on the host):
     * the stream all ops are queued on (a cudaStream_t), so a communicator
     * can order its own stream after the work queued so far without
     * synchronizing the context (overlapped gradient buckets). */
    void *(*compute_stream)(gptx_backend *be);

    /* OPTIONAL attention over a key/value cache, for generation (NULL:
     * generation runs the whole window for every token). qkv (n, 3C) [act]
     * holds the rows of positions pos0 .. pos0 + n - 1 (pos0 + n <= cap);
     * their keys and values are stored into kcache and vcache [act] (NH, cap,
     * C / NH) each at those positions, and out (n, C) [act] receives each
     * row's causal attention over cached positions 0 .. its own. lse (NH, n)
     * fp32 is scratch the backend may use (the layer's att_lse). With pos0 =
     * 0 the result equals attention_forward's on the same rows. */
    int (*attention_kv_forward)(gptx_backend *be, float *out, float *lse, const float *qkv,
                                float *kcache, float *vcache, int n, int pos0, int cap, int C,
                                int NH);

    /* OPTIONAL device-side timing (NULL: the timer synchronizes the context
     * and reads the host clock). An event is recorded on the compute stream
     * behind the work queued so far; event_elapsed waits until `stop` has
     * been reached and returns the device time between the two events. */
    int (*event_create)(gptx_backend *be, void **ev);
    void (*event_destroy)(gptx_backend *be, void *ev);
    int (*event_record)(gptx_backend *be, void *ev);
    int (*event_elapsed)(gptx_backend *be, void *start, void *stop, double *seconds);

    /* OPTIONAL replay of a fixed op sequence (NULL: lib/ always issues the
     * ops). lib/ brackets a segment with graph_begin / graph_end; key
     * (nkey words) names everything the segment's ops bake in: shapes,
     * buffer addresses, scalar arguments. graph_begin sets *replayed = 1
     * when it launched a graph recorded for this segment and key: lib/ then
     * skips the ops and does not call graph_end. Else (*replayed = 0) lib/
     * issues the ops, which must not touch the host (no downloads, no
     * synchronization, no uploads), and calls graph_end with their status,
     * also on failure (the backend may be capturing them). graph_end sets
     * *rerun = 1 when it abandoned a capture of the segment before any of
     * its ops ran (the capture failed, or ran out of memory: the backend has
     * released what it could): lib/ then issues the ops again, uncaptured. */
    int (*graph_begin)(gptx_backend *be, int segment, const uint64_t *key, int nkey,
                       int *replayed);
    int (*graph_end)(gptx_backend *be, int segment, int status, int *rerun);
    /* counts of graphs captured and replayed so far (both 0 when off) */
    void (*graph_counts)(const gptx_backend *be, int64_t *captures, int64_t *replays);

    /* OPTIONAL gradient fusions (NULL, or grad_fusion returning 0: none;
     * lib/ then zeroes the gradients with fill_f32 and takes the clip norm
     * with one sum_squares_to_host pass over all of them before AdamW).
     * grad_fusion says which the instance offers (GPTX_GRAD_FUSE_*); the
     * CPU backend offers both under the bf16 policies and none under fp32,
     * whose bits stay those of the separate passes. */
    unsigned (*grad_fusion)(const gptx_backend *be);
    /* GPTX_GRAD_FUSE_NORM: *host_sum = the sum of squares of grad (n fp32),
     * in a fixed order independent of the thread count, computed now (host
     * memory, no queue). lib/ calls it on each parameter gradient right
     * after the op that writes it last in a backward, while it is still in
     * cache, and adds the sums in the layout's tensor order for the clip
     * norm: the same norm as sum_squares_to_host over the whole buffer
     * within double rounding, without a pass of its own. */
    int (*grad_sumsq)(gptx_backend *be, double *host_sum, const float *grad, size_t n);
    /* GPTX_GRAD_FUSE_ZERO: while on, the ops that accumulate into parameter
     * gradients (dw and dbias of matmul_backward, matmul_backward_dgelu and
     * qkv_backward; dw and db of layernorm_backward and
     * layernorm_backward_act) overwrite them instead (beta 0, no read):
     * lib/ turns it on for a backward that follows a zero_grad and off
     * before embedding_backward, which always accumulates (it touches only
     * the rows of the batch's tokens). */
    int (*grad_overwrite)(gptx_backend *be, int on);
    /* (optional) The most threads create accepts in options.num_threads on
     * this machine (0 = one per core takes at most it); NULL: no bound. The
     * experimental gptx_cpu_max_threads reads the CPU backend's, so a
     * program can check its --threads before a context exists. */
    int (*max_threads)(void);

    /* OPTIONAL rank-invariant gradient sums (lib/core/exact_bins.h; NULL: a
     * context with gptx_context_options.rank_invariant is refused). n values
     * in chunks of EXACT_CHUNK; bins: EXACT_LEVELS int64 per value
     * (level-major: level k of value i at bins[k n + i]); win: one int32
     * per chunk, the chunk's window. Host
     * memory for the bins and windows of a backend without
     * GPTX_BACKEND_CAP_CUDA_DEVICE. Every result depends only on the
     * values, never on the thread count.
     * exact_fold: adds x into the bins, raising a chunk's window where x
     *   needs it (EXACT_NONFINITE for an inf or NaN);
     * exact_raise: raises every chunk's window to at least to[chunk];
     * exact_value: out = the bins' values, each rounded once to fp32. */
    int (*exact_fold)(gptx_backend *be, int64_t *bins, int32_t *win, const float *x, size_t n);
    int (*exact_raise)(gptx_backend *be, int64_t *bins, int32_t *win, const int32_t *to,
                       size_t n);
    int (*exact_value)(gptx_backend *be, float *out, const int64_t *bins, const int32_t *win,
                       size_t n);
};

/* The CPU backend is part of the core; the CUDA backend is a module
 * (lib/core/module.h). */
const gptx_backend_ops *gptx_cpu_backend_ops(void);

#endif
