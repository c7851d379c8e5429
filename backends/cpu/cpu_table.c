/* CPU backend: its ops table, the dispatch of each op to the fp32 kernel or
 * its bf16 form, lifetime, copies and description. Calls down into the
 * kernels (cpu_kernels.h) and the runtime (cpu_runtime.h); nothing calls
 * back up into it but lib/ through the table. */
#include "cpu_kernels.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_bf16.h"
#include "errors.h"
#ifdef GPTX_HAVE_DNNL
#include "cpu_dnnl.h"
#endif

/* The policy the options ask for, or why the CPU backend cannot give it. */
static int cpu_policy(const gptx_context_options *opts, int *precision) {
    int p = opts->precision == GPTX_PRECISION_DEFAULT ? GPTX_PRECISION_FP32 : opts->precision;
    const char *name = gptx_precision_name(p) ? gptx_precision_name(p) : "invalid";
    *precision = p;
    if (p == GPTX_PRECISION_FP32) return GPTX_OK;
    if (p == GPTX_PRECISION_BF16 || p == GPTX_PRECISION_BF16_PURE) {
#ifdef GPTX_HAVE_DNNL
        return GPTX_OK;
#else
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "options.precision is %s, but this build of gptx has no oneDNN for the "
                         "cpu backend's bf16 products (build with libdnnl-dev installed, or "
                         "-DGPTX_DNNL=ON)", name);
#endif
    }
    return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                     "options.precision is %s; the cpu backend offers fp32, bf16 and bf16_pure",
                     name);
}

static int cpu_create(gptx_backend **out, const gptx_context_options *opts) {
    *out = NULL;
    int precision = GPTX_PRECISION_FP32;
    GPTX_TRY(cpu_policy(opts, &precision));
    int n = opts->num_threads, most = gptx_cpu_thread_limit();
    long online = gptx_cpu_cores_online();
    if (n > most)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "options.num_threads is %d; the cpu backend runs at most %d threads "
                         "on this machine (%ld cores online%s; 0 = one per core)",
                         n, most, online, most == gptx_cpu_blas_max_threads()
                         ? ", and OpenBLAS's table of work buffers serves no more" : "");
    if (n == 0) n = online < most ? (int)online : most;
    gptx_backend *be = calloc(1, sizeof *be);
    if (!be) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = gptx_threadpool_create(&be->pool, n);
    if (rc != GPTX_OK) {
        free(be);
        return rc;
    }
    be->nthreads = n;
    be->precision = precision;
    be->act_bf16 = precision == GPTX_PRECISION_BF16 || precision == GPTX_PRECISION_BF16_PURE;
    be->param_bf16 = precision == GPTX_PRECISION_BF16_PURE;
    be->stochastic_rounding = be->param_bf16 && opts->stochastic_rounding;
    be->res_f32 = be->act_bf16 && !be->param_bf16;
    /* The context's thread count governs the products too: the pool splits
     * them and OpenBLAS (and oneDNN) run single-threaded inside its tasks
     * (cpu_gemm.c, cpu_dnnl.c). Each thread takes OpenBLAS's work buffer now,
     * so that a memory limit is an error here, not a hang at the first product. */
    rc = gptx_cpu_blas_warm_pool(be);
    if (rc == GPTX_OK) rc = gptx_cpu_fp32_gemm_choice(&be->fp32_dnnl);
#ifdef GPTX_HAVE_DNNL
    if (rc == GPTX_OK && (be->act_bf16 || be->fp32_dnnl)) rc = gptx_cpu_dnnl_create(&be->dnnl, n);
#endif
    if (rc != GPTX_OK) {
        gptx_threadpool_destroy(be->pool);
        free(be);
        return rc;
    }
    *out = be;
    return GPTX_OK;
}

static void cpu_destroy(gptx_backend *be) {
    if (!be) return;
#ifdef GPTX_HAVE_DNNL
    gptx_cpu_dnnl_destroy(be->dnnl);
#endif
    free(be->scratch);
    gptx_threadpool_destroy(be->pool);
    free(be);
}

static int cpu_num_threads(const gptx_backend *be) { return be->nthreads; }

static int cpu_memory_stats(const gptx_backend *be, gptx_memory_stats *stats) {
    GPTX_TRY(gptx_cpu_memory_stats(be, stats));
#ifdef GPTX_HAVE_DNNL
    stats->reserved += gptx_cpu_dnnl_scratch_bytes(be->dnnl); /* oneDNN's scratchpads */
#endif
    return GPTX_OK;
}

static int cpu_synchronize(gptx_backend *be) { return GPTX_OK; }

static int cpu_upload_f32(gptx_backend *be, float *dst, const float *host, size_t n) {
    memcpy(dst, host, n * sizeof *dst);
    return GPTX_OK;
}

static int cpu_download_f32(gptx_backend *be, float *host, const float *src, size_t n) {
    memcpy(host, src, n * sizeof *src);
    return GPTX_OK;
}

static int cpu_upload_i32(gptx_backend *be, int32_t *dst, const int32_t *host, size_t n) {
    memcpy(dst, host, n * sizeof *dst);
    return GPTX_OK;
}

/* ---- precision: the policy's storage and the bf16 conversions -------------------- */

static int cpu_precision(const gptx_backend *be) { return be->precision; }

static void cpu_storage(const gptx_backend *be, gptx_backend_storage *out) {
    out->act_bytes = be->act_bf16 ? 2 : 4;
    /* bf16: the ops read a bf16 copy of the fp32 master weights; bf16_pure:
     * the bf16 parameters themselves */
    out->wcopy_bytes = be->act_bf16 && !be->param_bf16 ? 2 : 0;
    out->param_bytes = be->param_bf16 ? 2 : 4;
    out->res_bytes = be->res_f32 ? 4 : out->act_bytes;
}

static int cpu_download_act(gptx_backend *be, float *host, const float *src, size_t n) {
    return be->act_bf16 ? gptx_cpu_bf16_buffer_to_f32(be, host, src, n) : cpu_download_f32(be, host, src, n);
}

static int cpu_fill_act(gptx_backend *be, float *dst, float value, size_t n) {
    return be->act_bf16 ? gptx_cpu_bf16_buffer_fill(be, dst, value, n) : gptx_cpu_fill_f32(be, dst, value, n);
}

static int cpu_convert_weights(gptx_backend *be, float *copy, const float *params, size_t n) {
    if (!be->act_bf16 || be->param_bf16)
        return GPTX_FAIL(GPTX_ERR_STATE, "the %s policy keeps no weight copy",
                         gptx_precision_name(be->precision));
    return gptx_cpu_bf16_buffer_from_f32(be, copy, params, n);
}

static int cpu_upload_param(gptx_backend *be, float *dst, const float *host, size_t n) {
    return be->param_bf16 ? gptx_cpu_bf16_buffer_from_f32(be, dst, host, n)
                          : cpu_upload_f32(be, dst, host, n);
}

static int cpu_download_param(gptx_backend *be, float *host, const float *src, size_t n) {
    return be->param_bf16 ? gptx_cpu_bf16_buffer_to_f32(be, host, src, n)
                          : cpu_download_f32(be, host, src, n);
}

static int cpu_fill_param(gptx_backend *be, float *dst, float value, size_t n) {
    return be->param_bf16 ? gptx_cpu_bf16_buffer_fill(be, dst, value, n) : gptx_cpu_fill_f32(be, dst, value, n);
}

static void cpu_describe(const gptx_backend *be, gptx_context_info *info) {
    info->bf16_native = gptx_cpu_bf16_hardware();
#ifdef GPTX_HAVE_DNNL
    if (be->dnnl && be->act_bf16) {
        snprintf(info->products, sizeof info->products, "%s", gptx_cpu_dnnl_describe(be->dnnl));
        return;
    }
    if (be->fp32_dnnl) {
        snprintf(info->products, sizeof info->products, "%s",
                 gptx_cpu_dnnl_describe_f32(be->dnnl));
        return;
    }
#endif
    /* "OpenBLAS 0.3.21 NO_LAPACKE ...": the version is the first two words */
    const char *cfg = openblas_get_config();
    int len = 0;
    for (int words = 0; cfg && cfg[len] && words < 2; len++)
        if (cfg[len] == ' ' && ++words == 2) break;
    snprintf(info->products, sizeof info->products, "%.*s sgemm (%s)", len, cfg ? cfg : "OpenBLAS",
             openblas_get_corename());
}

/* ---- ops: the fp32 kernels, or their bf16 forms under the bf16 policies ---------- */

#define CPU_OP(name, params, args)                                                         \
    static int cpu_##name params {                                                         \
        return be->act_bf16 ? gptx_cpu_##name##_bf16 args : gptx_cpu_##name args;          \
    }

CPU_OP(embedding_forward, (gptx_backend *be, float *out, const int32_t *inp, const float *wte,
                           const float *wpe, int B, int T, int C),
       (be, out, inp, wte, wpe, B, T, C))
CPU_OP(embedding_backward, (gptx_backend *be, float *dwte, float *dwpe, const float *dout,
                            const int32_t *inp, int B, int T, int C),
       (be, dwte, dwpe, dout, inp, B, T, C))
CPU_OP(layernorm_forward, (gptx_backend *be, float *out, float *mean, float *rstd,
                           const float *inp, const float *w, const float *b, int N, int C,
                           float eps),
       (be, out, mean, rstd, inp, w, b, N, C, eps))
CPU_OP(layernorm_backward, (gptx_backend *be, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w,
                            const float *mean, const float *rstd, int N, int C),
       (be, dinp, dw, db, dout, inp, w, mean, rstd, N, C))
CPU_OP(matmul_forward, (gptx_backend *be, float *out, const float *inp, const float *w,
                        const float *bias, int N, int C, int OC),
       (be, out, inp, w, bias, N, C, OC))
CPU_OP(matmul_backward, (gptx_backend *be, float *dinp, float *dw, float *dbias,
                         const float *dout, const float *inp, const float *w, int N, int C,
                         int OC),
       (be, dinp, dw, dbias, dout, inp, w, N, C, OC))
CPU_OP(gelu_forward, (gptx_backend *be, float *out, const float *inp, size_t n),
       (be, out, inp, n))
CPU_OP(gelu_backward, (gptx_backend *be, float *dinp, const float *inp, const float *dout,
                       size_t n),
       (be, dinp, inp, dout, n))
CPU_OP(residual_forward, (gptx_backend *be, float *out, const float *a, const float *b,
                          size_t n),
       (be, out, a, b, n))
CPU_OP(crossentropy_forward, (gptx_backend *be, float *losses, float *lse, float *logits,
                              const int32_t *targets, int N, int V, int Vp, int mask_padded),
       (be, losses, lse, logits, targets, N, V, Vp, mask_padded))
CPU_OP(crossentropy_backward, (gptx_backend *be, float *logits, const float *lse,
                               const int32_t *targets, int N, int V, int Vp, float dloss),
       (be, logits, lse, targets, N, V, Vp, dloss))
CPU_OP(crossentropy_fused, (gptx_backend *be, float *losses, float *lse, float *logits,
                            const int32_t *targets, int N, int V, int Vp, int mask_padded,
                            float dloss),
       (be, losses, lse, logits, targets, N, V, Vp, mask_padded, dloss))

/* The GELU fused into its products: under fp32 the separate kernels in the
 * same order (so the same bits as without the entries); under bf16 the
 * fp32 product goes through the GELU before its one rounding, as the CUDA
 * backend's cuBLASLt epilogues do, so the two backends round alike. */
static int cpu_matmul_gelu_forward(gptx_backend *be, float *out, float *pre, const float *inp,
                                   const float *w, const float *bias, int N, int C, int OC) {
    if (be->act_bf16) return gptx_cpu_matmul_gelu_forward_bf16(be, out, pre, inp, w, bias, N, C, OC);
    GPTX_TRY(gptx_cpu_matmul_forward(be, pre, inp, w, bias, N, C, OC));
    return gptx_cpu_gelu_forward(be, out, pre, (size_t)N * OC);
}

static int cpu_matmul_backward_dgelu(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                     const float *dout, const float *inp, const float *w,
                                     const float *pre, int N, int C, int OC) {
    if (be->act_bf16)
        return gptx_cpu_matmul_backward_dgelu_bf16(be, dinp, dw, dbias, dout, inp, w, pre, N, C,
                                                   OC);
    GPTX_TRY(gptx_cpu_matmul_backward(be, dinp, dw, dbias, dout, inp, w, N, C, OC));
    return gptx_cpu_gelu_backward(be, dinp, pre, dinp, (size_t)N * C); /* elementwise, in place */
}

/* AdamW: the fp32 kernel for fp32 parameters (fp32 and bf16 mixed) */
static int cpu_adamw(gptx_backend *be, float *params, const float *grads, float *m, float *v,
                     const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h) {
    return be->param_bf16 ? gptx_cpu_adamw_bf16(be, params, grads, m, v, ranges, nranges, h)
                          : gptx_cpu_adamw(be, params, grads, m, v, ranges, nranges, h);
}

/* The flash-style attention needs no state beyond lse and no workspace. */
static int cpu_attention_forward(gptx_backend *be, float *out, float *lse, void *state, void *work,
                                 const float *qkv, int B, int T, int C, int NH) {
    (void)state;
    (void)work;
    return be->act_bf16 ? gptx_cpu_attention_forward_bf16(be, out, lse, qkv, B, T, C, NH)
                        : gptx_cpu_attention_forward(be, out, lse, qkv, B, T, C, NH);
}

static int cpu_attention_backward(gptx_backend *be, float *dqkv, const float *dout,
                                  const float *qkv, const float *out, const float *lse,
                                  const void *state, void *work, int B, int T, int C, int NH) {
    (void)state;
    (void)work;
    return be->act_bf16
               ? gptx_cpu_attention_backward_bf16(be, dqkv, dout, qkv, out, lse, B, T, C, NH)
               : gptx_cpu_attention_backward(be, dqkv, dout, qkv, out, lse, B, T, C, NH);
}

/* The QKV projection: one (3C, C) product. */
static int cpu_qkv_forward(gptx_backend *be, float *qkv, const float *inp, const float *w,
                           const float *bias, void *work, int N, int C) {
    (void)work;
    return cpu_matmul_forward(be, qkv, inp, w, bias, N, C, 3 * C);
}

static int cpu_qkv_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                            const float *dqkv, const float *inp, const float *w, void *work, int N,
                            int C) {
    (void)work;
    return cpu_matmul_backward(be, dinp, dw, dbias, dqkv, inp, w, N, C, 3 * C);
}

/* The residual add, then its LayerNorm: the CPU has no fused kernel. */
static int cpu_residual_layernorm_forward(gptx_backend *be, float *residual, float *out,
                                          float *mean, float *rstd, const float *a,
                                          const float *b, const float *w, const float *bias, int N,
                                          int C, float eps) {
    GPTX_TRY(cpu_residual_forward(be, residual, a, b, (size_t)N * C));
    return cpu_layernorm_forward(be, out, mean, rstd, residual, w, bias, N, C, eps);
}

/* Gradient fusions (backend.h grad_fusion): under the bf16 policies only,
 * so that fp32 keeps the bits of the separate norm pass and zero fill. */
static unsigned cpu_grad_fusion(const gptx_backend *be) {
    return be->act_bf16 ? GPTX_GRAD_FUSE_NORM | GPTX_GRAD_FUSE_ZERO : 0u;
}

static int cpu_grad_overwrite(gptx_backend *be, int on) {
    be->grad_overwrite = be->act_bf16 && on;
    return GPTX_OK;
}

static unsigned cpu_capabilities(const gptx_backend *be) {
    (void)be;
    return GPTX_BACKEND_CAP_HOST_MEMORY;
}

static const gptx_backend_ops cpu_ops = {
    .name = "cpu",
    .create = cpu_create,
    .max_threads = gptx_cpu_thread_limit,
    .destroy = cpu_destroy,
    .num_threads = cpu_num_threads,
    .capabilities = cpu_capabilities,
    .alloc = gptx_cpu_alloc,
    .free = gptx_cpu_free,
    .memory_stats = cpu_memory_stats,
    .reset_peak = gptx_cpu_reset_peak,
    .synchronize = cpu_synchronize,
    .upload_f32 = cpu_upload_f32,
    .download_f32 = cpu_download_f32,
    .upload_i32 = cpu_upload_i32,
    .fill_f32 = gptx_cpu_fill_f32,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .crossentropy_forward = cpu_crossentropy_forward,
    .crossentropy_backward = cpu_crossentropy_backward,
    .crossentropy_fused = cpu_crossentropy_fused,
    .attention_kv_forward = gptx_cpu_attention_kv_forward,
    .sum_to_host = gptx_cpu_sum_to_host,
    .sum_squares_to_host = gptx_cpu_sum_squares_to_host,
    .adamw = cpu_adamw,
    .precision = cpu_precision,
    .storage = cpu_storage,
    .download_act = cpu_download_act,
    .fill_act = cpu_fill_act,
    .act_from_res = gptx_cpu_act_from_res,
    .convert_weights = cpu_convert_weights,
    .upload_param = cpu_upload_param,
    .download_param = cpu_download_param,
    .fill_param = cpu_fill_param,
    .describe = cpu_describe,
    .qkv_forward = cpu_qkv_forward,
    .qkv_backward = cpu_qkv_backward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .matmul_gelu_forward = cpu_matmul_gelu_forward,
    .matmul_backward_dgelu = cpu_matmul_backward_dgelu,
    .instance_ops = gptx_cpu_instance_ops,
    .op_buffers = gptx_cpu_op_buffers,
    .grad_fusion = cpu_grad_fusion,
    .grad_sumsq = gptx_cpu_sum_squares_to_host, /* the fixed chunk order of the full pass */
    .grad_overwrite = cpu_grad_overwrite,
    .exact_fold = gptx_cpu_exact_fold,
    .exact_raise = gptx_cpu_exact_raise,
    .exact_value = gptx_cpu_exact_value,
};

const gptx_backend_ops *gptx_cpu_backend_ops(void) { return &cpu_ops; }
