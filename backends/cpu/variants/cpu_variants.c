/* The CPU backend's kernel variants for ablation studies (the experimental
 * gptx_context_set_variant): instance_ops gives a model or optimizer its
 * own copy of the table with these entries in place of the production ops,
 * and op_buffers sizes what they need. Each computes the same function as
 * the op it replaces (tests/model/test_variants.c): naive attention with
 * (B, NH, T, T) probabilities kept per layer, separate Q, K, V products,
 * step-by-step LayerNorm and GELU, and AdamW dispatched per tensor. fp32
 * only. */
#include <math.h>

#include "../cpu_kernels.h"
#include "errors.h"
#include "variant_ops.h"

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

/* ---- naive attention: work = the (T, T) float mask, then dscores --------------- */

static size_t mask_bytes(int T) { return round64((size_t)T * T * sizeof(float)); }

static int naive_forward(gptx_backend *be, float *out, float *lse, void *state, void *work,
                         const float *qkv, int B, int T, int C, int NH) {
    (void)lse;
    /* additive causal mask: 0 on and below the diagonal, -inf above */
    float *mask = work;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) mask[(size_t)i * T + j] = j <= i ? 0.0f : -INFINITY;
    return gptx_cpu_attention_naive_forward(be, out, state, mask, qkv, B, T, C, NH);
}

static int naive_backward(gptx_backend *be, float *dqkv, const float *dout, const float *qkv,
                          const float *out, const float *lse, const void *state, void *work,
                          int B, int T, int C, int NH) {
    (void)out;
    (void)lse;
    float *datt = (float *)((char *)work + mask_bytes(T));
    return gptx_cpu_attention_naive_backward(be, dqkv, datt, dout, qkv, state, B, T, C, NH);
}

/* ---- separate Q, K, V (backends/common/variant_ops.c) ------------------------- */

static const gptx_qkv_separate_ops separate_ops = {
    .matmul_forward = gptx_cpu_matmul_forward,
    .matmul_backward = gptx_cpu_matmul_backward,
    .residual_forward = gptx_cpu_residual_forward,
    .interleave = gptx_cpu_qkv_interleave,
    .split = gptx_cpu_qkv_split,
    .act_bytes = 4,
    .w_bytes = 4,
};

static int separate_qkv_forward(gptx_backend *be, float *qkv, const float *inp, const float *w,
                                const float *bias, void *work, int N, int C) {
    return gptx_qkv_separate_forward(&separate_ops, be, qkv, inp, w, bias, work, N, C);
}

static int separate_qkv_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                 const float *dqkv, const float *inp, const float *w, void *work,
                                 int N, int C) {
    return gptx_qkv_separate_backward(&separate_ops, be, dinp, dw, dbias, dqkv, inp, w, work, N,
                                      C);
}

/* ---- step-by-step LayerNorm and GELU, and the ops built on them ---------------- */

static int unfused_residual_layernorm(gptx_backend *be, float *residual, float *out, float *mean,
                                      float *rstd, const float *a, const float *b, const float *w,
                                      const float *bias, int N, int C, float eps) {
    GPTX_TRY(gptx_cpu_residual_forward(be, residual, a, b, (size_t)N * C));
    return gptx_cpu_layernorm_forward_unfused(be, out, mean, rstd, residual, w, bias, N, C, eps);
}

static int unfused_matmul_gelu(gptx_backend *be, float *out, float *pre, const float *inp,
                               const float *w, const float *bias, int N, int C, int OC) {
    GPTX_TRY(gptx_cpu_matmul_forward(be, pre, inp, w, bias, N, C, OC));
    return gptx_cpu_gelu_forward_unfused(be, out, pre, (size_t)N * OC);
}

static int unfused_matmul_dgelu(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                const float *dout, const float *inp, const float *w,
                                const float *pre, int N, int C, int OC) {
    GPTX_TRY(gptx_cpu_matmul_backward(be, dinp, dw, dbias, dout, inp, w, N, C, OC));
    return gptx_cpu_gelu_backward_unfused(be, dinp, pre, dinp, (size_t)N * C); /* in place */
}

/* ---- AdamW, one dispatch per tensor -------------------------------------------- */

static int adamw_per_tensor(gptx_backend *be, float *params, const float *grads, float *m,
                            float *v, const gptx_param_range *ranges, int nranges,
                            const gptx_adamw_hyper *h) {
    return gptx_adamw_per_tensor(gptx_cpu_adamw, be, params, grads, m, v, ranges, nranges, h);
}

/* ---- the instance ----------------------------------------------------------------- */

int gptx_cpu_instance_ops(const gptx_backend *be, const gptx_kernel_variants *v,
                          gptx_backend_ops *ops) {
    if (be->act_bf16 || be->param_bf16)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the cpu backend offers its kernel variants under the fp32 policy only "
                         "(the context's policy is %s)",
                         gptx_precision_name(be->precision));
    if (v->attention == GPTX_ATTENTION_FLASH_SIMT)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "GPTX_ATTENTION_FLASH_SIMT is a variant of the cuda "
                                               "backend; the cpu backend has no tensor cores to "
                                               "leave out");
    if (v->attention_tiles)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "attention tile configuration %d is a variant of "
                                               "the cuda backend's tensor-core attention; the cpu "
                                               "backend has one",
                         v->attention_tiles);
    if (v->attention == GPTX_ATTENTION_NAIVE) {
        ops->attention_forward = naive_forward;
        ops->attention_backward = naive_backward;
    }
    if (!v->fused_qkv) {
        ops->qkv_forward = separate_qkv_forward;
        ops->qkv_backward = separate_qkv_backward;
    }
    if (!v->fused_norm_gelu) {
        ops->layernorm_forward = gptx_cpu_layernorm_forward_unfused;
        ops->layernorm_backward = gptx_cpu_layernorm_backward_unfused;
        ops->residual_layernorm_forward = unfused_residual_layernorm;
        ops->matmul_gelu_forward = unfused_matmul_gelu;
        ops->matmul_backward_dgelu = unfused_matmul_dgelu;
    }
    if (!v->fused_adamw) ops->adamw = adamw_per_tensor;
    return GPTX_OK;
}

void gptx_cpu_op_buffers(const gptx_backend *be, const gptx_kernel_variants *v, int B, int T,
                         int C, int NH, gptx_op_buffers *out) {
    (void)be;
    size_t BT = (size_t)B * T;
    if (v->attention == GPTX_ATTENTION_NAIVE) {
        size_t probs = round64(BT * (size_t)NH * T * sizeof(float)); /* (B, NH, T, T) */
        out->attention_state = probs;
        out->attention_work = mask_bytes(T) + probs;
    }
    if (!v->fused_qkv) out->qkv_work = gptx_qkv_separate_work_bytes(sizeof(float), (int)BT, C);
}
