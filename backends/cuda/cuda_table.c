/* The CUDA backend's table, and its kernel variants: the separate-QKV
 * projection (backends/common/variant_ops.c over this backend's products)
 * and AdamW per tensor are offered, attention on CUDA cores only
 * (GPTX_ATTENTION_FLASH_SIMT) and the tensor-core attention's tile
 * configurations (GPTX_VARIANT_ATTENTION_TILES); naive attention and the step-by-step
 * LayerNorm/GELU are not (GPTX_ERR_UNSUPPORTED when a context asks for
 * them). Entries are in declaration order (this file is also compiled as
 * C++20 by the CPU-emulation tests). */
#include "cuda_ops.h"
#include "errors.h"
#include "variant_ops.h"

/* Flash attention keeps nothing beyond lse and needs no workspace. The
 * default takes the tensor-core kernels where they apply (bf16 or tf32, head
 * size 64 or 128) in the backend's tile configuration; the
 * GPTX_ATTENTION_FLASH_SIMT variant keeps the CUDA-core ones, and
 * GPTX_VARIANT_ATTENTION_TILES picks configuration N (the _tN entries). */
#define ATTENTION_OPS(suffix, flash)                                                               \
    static int cuda_attention_forward##suffix(gptx_backend *be, float *out, float *lse,           \
                                              void *state, void *work, const float *qkv, int B,    \
                                              int T, int C, int NH) {                              \
        (void)state;                                                                               \
        (void)work;                                                                                \
        return gptx_cuda_attention_forward(be, out, lse, qkv, B, T, C, NH, flash);                 \
    }                                                                                              \
    static int cuda_attention_backward##suffix(                                                    \
        gptx_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,      \
        const float *lse, const void *state, void *work, int B, int T, int C, int NH) {            \
        (void)state;                                                                               \
        (void)work;                                                                                \
        return gptx_cuda_attention_backward(be, dqkv, dout, qkv, out, lse, B, T, C, NH, flash);    \
    }                                                                                              \
    static int cuda_attention_kv_forward##suffix(gptx_backend *be, float *out, float *lse,        \
                                                 const float *qkv, float *kcache, float *vcache,   \
                                                 int n, int pos0, int cap, int C, int NH) {        \
        return gptx_cuda_attention_kv_forward(be, out, lse, qkv, kcache, vcache, n, pos0, cap, C,  \
                                              NH, flash);                                          \
    }
ATTENTION_OPS(, GPTX_CUDA_FLASH_DEFAULT)
ATTENTION_OPS(_simt, GPTX_CUDA_FLASH_SIMT)
ATTENTION_OPS(_t1, 1)
ATTENTION_OPS(_t2, 2)
ATTENTION_OPS(_t3, 3)
ATTENTION_OPS(_t4, 4)
ATTENTION_OPS(_t5, 5)
#undef ATTENTION_OPS

/* The three attention entries of one variant. */
typedef struct attention_entries {
    int (*forward)(gptx_backend *, float *, float *, void *, void *, const float *, int, int, int,
                   int);
    int (*backward)(gptx_backend *, float *, const float *, const float *, const float *,
                    const float *, const void *, void *, int, int, int, int);
    int (*kv_forward)(gptx_backend *, float *, float *, const float *, float *, float *, int, int,
                      int, int, int);
} attention_entries;
static const attention_entries tile_entries[GPTX_CUDA_FLASH_VARIANTS] = {
    {cuda_attention_forward_t1, cuda_attention_backward_t1, cuda_attention_kv_forward_t1},
    {cuda_attention_forward_t2, cuda_attention_backward_t2, cuda_attention_kv_forward_t2},
    {cuda_attention_forward_t3, cuda_attention_backward_t3, cuda_attention_kv_forward_t3},
    {cuda_attention_forward_t4, cuda_attention_backward_t4, cuda_attention_kv_forward_t4},
    {cuda_attention_forward_t5, cuda_attention_backward_t5, cuda_attention_kv_forward_t5}};

static void set_attention(gptx_backend_ops *ops, const attention_entries *e) {
    ops->attention_forward = e->forward;
    ops->attention_backward = e->backward;
    ops->attention_kv_forward = e->kv_forward;
}

/* The attention entries of variants v. */
static int attention_variant(const gptx_kernel_variants *v, gptx_backend_ops *ops) {
    static const attention_entries simt = {cuda_attention_forward_simt,
                                           cuda_attention_backward_simt,
                                           cuda_attention_kv_forward_simt};
    if (v->attention_tiles < 0 || v->attention_tiles > GPTX_CUDA_FLASH_VARIANTS)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "attention tile configuration %d; the cuda backend has 1..%d (0: its "
                         "default)",
                         v->attention_tiles, GPTX_CUDA_FLASH_VARIANTS);
    if (v->attention == GPTX_ATTENTION_FLASH_SIMT && v->attention_tiles)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "attention tile configuration %d is of the tensor-core kernels, which "
                         "GPTX_ATTENTION_FLASH_SIMT leaves out",
                         v->attention_tiles);
    if (v->attention == GPTX_ATTENTION_FLASH_SIMT) set_attention(ops, &simt);
    if (v->attention_tiles) set_attention(ops, &tile_entries[v->attention_tiles - 1]);
    return GPTX_OK;
}

/* The QKV projection: one (3C, C) product. */
static int cuda_qkv_forward(gptx_backend *be, float *qkv, const float *inp, const float *w,
                            const float *bias, void *work, int N, int C) {
    (void)work;
    return gptx_cuda_matmul_forward(be, qkv, inp, w, bias, N, C, 3 * C);
}

static int cuda_qkv_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                             const float *dqkv, const float *inp, const float *w, void *work,
                             int N, int C) {
    (void)work;
    return gptx_cuda_matmul_backward(be, dinp, dw, dbias, dqkv, inp, w, N, C, 3 * C);
}

/* ---- kernel variants ------------------------------------------------------------ */

/* The separate-QKV composition over this backend's products, with the
 * element sizes of its precision policy. */
static gptx_qkv_separate_ops separate_ops(const gptx_backend *be) {
    gptx_backend_storage st = {4, 0, 4, 0};
    gptx_cuda_storage(be, &st);
    gptx_qkv_separate_ops o = {gptx_cuda_matmul_forward, gptx_cuda_matmul_backward,
                               gptx_cuda_residual_forward, gptx_cuda_qkv_interleave,
                               gptx_cuda_qkv_split, st.act_bytes,
                               st.wcopy_bytes ? st.wcopy_bytes : st.param_bytes};
    return o;
}

static int cuda_qkv_forward_separate(gptx_backend *be, float *qkv, const float *inp,
                                     const float *w, const float *bias, void *work, int N, int C) {
    gptx_qkv_separate_ops o = separate_ops(be);
    return gptx_qkv_separate_forward(&o, be, qkv, inp, w, bias, work, N, C);
}

static int cuda_qkv_backward_separate(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                      const float *dqkv, const float *inp, const float *w,
                                      void *work, int N, int C) {
    gptx_qkv_separate_ops o = separate_ops(be);
    return gptx_qkv_separate_backward(&o, be, dinp, dw, dbias, dqkv, inp, w, work, N, C);
}

static int cuda_adamw_per_tensor(gptx_backend *be, float *params, const float *grads, float *m,
                                 float *v, const gptx_param_range *ranges, int nranges,
                                 const gptx_adamw_hyper *h) {
    return gptx_adamw_per_tensor(gptx_cuda_adamw, be, params, grads, m, v, ranges, nranges, h);
}

static int cuda_instance_ops(const gptx_backend *be, const gptx_kernel_variants *v,
                             gptx_backend_ops *ops) {
    if (v->attention == GPTX_ATTENTION_NAIVE || !v->fused_norm_gelu)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the cuda backend offers neither naive attention nor the step-by-step "
                         "LayerNorm/GELU variants (attention %d, fused_norm_gelu %d)",
                         v->attention, v->fused_norm_gelu);
    GPTX_TRY(attention_variant(v, ops));
    if (!v->fused_qkv) {
        gptx_backend_storage st = {4, 0, 4, 0};
        gptx_cuda_storage(be, &st);
        /* the composition adds the three input gradients with residual_forward,
         * whose operands must then share one type */
        if (st.res_bytes && st.res_bytes != st.act_bytes)
            return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                             "the separate Q, K, V variant needs the residual stream in the "
                             "activation type; the context's %s policy keeps it wider",
                             gptx_precision_name(gptx_cuda_precision(be)));
        ops->qkv_forward = cuda_qkv_forward_separate;
        ops->qkv_backward = cuda_qkv_backward_separate;
    }
    if (!v->fused_adamw) {
        /* the unfused baseline: one launch per tensor, then convert_weights */
        ops->adamw = cuda_adamw_per_tensor;
        ops->adamw_copy = NULL;
    }
    return GPTX_OK;
}

static void cuda_op_buffers(const gptx_backend *be, const gptx_kernel_variants *v, int B, int T,
                            int C, int NH, gptx_op_buffers *out) {
    (void)NH;
    if (v->fused_qkv) return;
    gptx_backend_storage st = {4, 0, 4, 0};
    gptx_cuda_storage(be, &st);
    out->qkv_work = gptx_qkv_separate_work_bytes(st.act_bytes, B * T, C);
}

static unsigned cuda_capabilities(const gptx_backend *be) {
    (void)be;
    return GPTX_BACKEND_CAP_CUDA_DEVICE;
}

static const gptx_backend_ops cuda_table = {
    .name = "cuda",
    .create = gptx_cuda_create,
    .destroy = gptx_cuda_destroy,
    .num_threads = gptx_cuda_num_threads,
    .capabilities = cuda_capabilities,
    .alloc = gptx_cuda_alloc,
    .free = gptx_cuda_free,
    .memory_stats = gptx_cuda_memory_stats,
    .reset_peak = gptx_cuda_reset_peak,
    .synchronize = gptx_cuda_synchronize,
    .upload_f32 = gptx_cuda_upload_f32,
    .download_f32 = gptx_cuda_download_f32,
    .upload_i32 = gptx_cuda_upload_i32,
    .fill_f32 = gptx_cuda_fill_f32,
    .embedding_forward = gptx_cuda_embedding_forward,
    .embedding_backward = gptx_cuda_embedding_backward,
    .layernorm_forward = gptx_cuda_layernorm_forward,
    .layernorm_backward = gptx_cuda_layernorm_backward,
    .matmul_forward = gptx_cuda_matmul_forward,
    .matmul_backward = gptx_cuda_matmul_backward,
    .qkv_forward = cuda_qkv_forward,
    .qkv_backward = cuda_qkv_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .gelu_forward = gptx_cuda_gelu_forward,
    .gelu_backward = gptx_cuda_gelu_backward,
    .residual_forward = gptx_cuda_residual_forward,
    .crossentropy_forward = gptx_cuda_crossentropy_forward,
    .crossentropy_backward = gptx_cuda_crossentropy_backward,
    .sum_to_host = gptx_cuda_sum_to_host,
    .sum_squares_to_host = gptx_cuda_sum_squares_to_host,
    .adamw = gptx_cuda_adamw,
    .precision = gptx_cuda_precision,
    .storage = gptx_cuda_storage,
    .download_act = gptx_cuda_download_act,
    .fill_act = gptx_cuda_fill_act,
    .act_from_res = gptx_cuda_act_from_res,
    .layernorm_backward_act = gptx_cuda_layernorm_backward_act,
    .convert_weights = gptx_cuda_convert_weights,
    .adamw_copy = gptx_cuda_adamw_copy,
    .upload_param = gptx_cuda_upload_param,
    .download_param = gptx_cuda_download_param,
    .fill_param = gptx_cuda_fill_param,
    .describe = gptx_cuda_describe,
    .host_alloc_pinned = gptx_cuda_host_alloc_pinned,
    .host_free_pinned = gptx_cuda_host_free_pinned,
    .residual_layernorm_forward = gptx_cuda_residual_layernorm_forward,
    .matmul_gelu_forward = gptx_cuda_matmul_gelu_forward,
    .matmul_backward_dgelu = gptx_cuda_matmul_backward_dgelu,
    .crossentropy_fused = gptx_cuda_crossentropy_fused,
    .instance_ops = cuda_instance_ops,
    .op_buffers = cuda_op_buffers,
    .compute_stream = gptx_cuda_compute_stream,
    .attention_kv_forward = cuda_attention_kv_forward,
    .event_create = gptx_cuda_event_create,
    .event_destroy = gptx_cuda_event_destroy,
    .event_record = gptx_cuda_event_record,
    .event_elapsed = gptx_cuda_event_elapsed,
    .graph_begin = gptx_cuda_graph_begin,
    .graph_end = gptx_cuda_graph_end,
    .graph_counts = gptx_cuda_graph_counts,
    /* no gradient fusions: lib/ zeroes with fill_f32 and takes the norm in
     * one sum_squares_to_host pass (per-tensor host sums would synchronize) */
    .grad_fusion = NULL,
    .grad_sumsq = NULL,
    .grad_overwrite = NULL,
    .max_threads = NULL, /* its host threads: no bound of OpenBLAS's */
    /* no rank-invariant gradient sums yet: a rank_invariant context is
     * refused here (docs/distributed.md, "Rank-invariant training") */
    .exact_fold = NULL,
    .exact_raise = NULL,
    .exact_value = NULL,
};

const gptx_backend_ops *gptx_cuda_backend_ops(void) { return &cuda_table; }
