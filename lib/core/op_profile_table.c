/* The timing decorator over an instance's backend table (op_profile.h): a
 * wrapper for every entry. The op entries time the call and forward it; the
 * others only forward it. Each receives the stand-in as its backend
 * argument and calls the instance's real entry with the real backend. */
#include <stdlib.h>

#include "errors.h"
#include "op_profile.h"

/* What a decorated table's entries receive as `be`. */
struct gptx_profiled {
    gptx_backend_ops inner; /* the instance's own table (variants applied) */
    gptx_backend *be;       /* the context's backend instance */
    gptx_op_profiler *prof;
};

static const gptx_profiled *stand_in(const gptx_backend *be) {
    return (const gptx_profiled *)(const void *)be;
}

/* A timed entry: `params` names the backend argument `be`; the real entry is
 * called with the real backend and the arguments after it (`...`); key
 * c and oc and flops are expressions over the parameters. */
#define TIMED(entry, params, key_c, key_oc, flops, ...)                                 \
    static int w_##entry params {                                                       \
        const gptx_profiled *s = stand_in(be);                                          \
        gptx_op_mark mark;                                                              \
        GPTX_TRY(gptx_op_profiler_begin(s->prof, &mark));                               \
        int rc = s->inner.entry(s->be, __VA_ARGS__);                                    \
        const gptx_op_key key = {#entry, (key_c), (key_oc)};                            \
        return gptx_op_profiler_end(s->prof, &mark, &key, (flops), rc);                 \
    }
/* Entries that do no work on buffers (lifetime, memory, events, queries):
 * forwarded, not timed. PASS0: no argument but the backend; PASS_VOID: no
 * result. */
#define PASS(ret, entry, params, ...)                                                   \
    static ret w_##entry params { return stand_in(be)->inner.entry(stand_in(be)->be, __VA_ARGS__); }
#define PASS0(ret, entry, params)                                                       \
    static ret w_##entry params { return stand_in(be)->inner.entry(stand_in(be)->be); }
#define PASS_VOID(entry, params, ...)                                                   \
    static void w_##entry params { stand_in(be)->inner.entry(stand_in(be)->be, __VA_ARGS__); }

/* ---- products (one report line per shape; flops 2 per multiply-add) ---- */

/* dinp is optional in the backward products: without it, one product */
static double backward_flops(const void *dinp, int N, int C, int OC) {
    return (dinp ? 4.0 : 2.0) * N * C * OC;
}

TIMED(matmul_forward,
      (gptx_backend *be, float *out, const float *inp, const float *w, const float *bias, int N,
       int C, int OC),
      C, OC, 2.0 * N * C * OC, out, inp, w, bias, N, C, OC)
TIMED(matmul_backward,
      (gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
       const float *inp, const float *w, int N, int C, int OC),
      C, OC, backward_flops(dinp, N, C, OC), dinp, dw, dbias, dout, inp, w, N, C, OC)
TIMED(qkv_forward,
      (gptx_backend *be, float *qkv, const float *inp, const float *w, const float *bias,
       void *work, int N, int C),
      C, 3 * C, 2.0 * N * C * 3 * C, qkv, inp, w, bias, work, N, C)
TIMED(qkv_backward,
      (gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dqkv,
       const float *inp, const float *w, void *work, int N, int C),
      C, 3 * C, backward_flops(dinp, N, C, 3 * C), dinp, dw, dbias, dqkv, inp, w, work, N, C)
TIMED(matmul_gelu_forward,
      (gptx_backend *be, float *out, float *pre, const float *inp, const float *w,
       const float *bias, int N, int C, int OC),
      C, OC, 2.0 * N * C * OC, out, pre, inp, w, bias, N, C, OC)
TIMED(matmul_backward_dgelu,
      (gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dout,
       const float *inp, const float *w, const float *pre, int N, int C, int OC),
      C, OC, backward_flops(dinp, N, C, OC), dinp, dw, dbias, dout, inp, w, pre, N, C, OC)

/* ---- attention: the products of causal attention, counted as the flash
 * kernels compute them: forward QK^T and PV over the T(T+1)/2 (query, key)
 * pairs of each row block, backward those recomputed plus dV, dP, dQ, dK
 * (five products); 2 flops per multiply-add, C = NH * head size ---- */

static double causal_pairs(int B, int T) { return (double)B * T * (T + 1.0) / 2.0; }

TIMED(attention_forward,
      (gptx_backend *be, float *out, float *lse, void *state, void *work, const float *qkv, int B,
       int T, int C, int NH),
      0, 0, 4.0 * C * causal_pairs(B, T), out, lse, state, work, qkv, B, T, C, NH)
TIMED(attention_backward,
      (gptx_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out,
       const float *lse, const void *state, void *work, int B, int T, int C, int NH),
      0, 0, 10.0 * C * causal_pairs(B, T), dqkv, dout, qkv, out, lse, state, work, B, T, C, NH)
/* n new rows at positions pos0 ..: n * pos0 + n (n + 1) / 2 pairs */
TIMED(attention_kv_forward,
      (gptx_backend *be, float *out, float *lse, const float *qkv, float *kcache, float *vcache,
       int n, int pos0, int cap, int C, int NH),
      0, 0, 4.0 * C * ((double)n * pos0 + causal_pairs(1, n)), out, lse, qkv, kcache, vcache, n,
      pos0, cap, C, NH)

/* ---- the other ops (no flops counted) ---- */

TIMED(embedding_forward,
      (gptx_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe,
       int B, int T, int C),
      0, 0, 0.0, out, inp, wte, wpe, B, T, C)
TIMED(embedding_backward,
      (gptx_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B,
       int T, int C),
      0, 0, 0.0, dwte, dwpe, dout, inp, B, T, C)
TIMED(layernorm_forward,
      (gptx_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w,
       const float *b, int N, int C, float eps),
      0, 0, 0.0, out, mean, rstd, inp, w, b, N, C, eps)
TIMED(layernorm_backward,
      (gptx_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
       const float *w, const float *mean, const float *rstd, int N, int C),
      0, 0, 0.0, dinp, dw, db, dout, inp, w, mean, rstd, N, C)
TIMED(residual_layernorm_forward,
      (gptx_backend *be, float *residual, float *out, float *mean, float *rstd, const float *a,
       const float *b, const float *w, const float *bias, int N, int C, float eps),
      0, 0, 0.0, residual, out, mean, rstd, a, b, w, bias, N, C, eps)
TIMED(gelu_forward, (gptx_backend *be, float *out, const float *inp, size_t n), 0, 0, 0.0, out,
      inp, n)
TIMED(gelu_backward,
      (gptx_backend *be, float *dinp, const float *inp, const float *dout, size_t n), 0, 0, 0.0,
      dinp, inp, dout, n)
TIMED(residual_forward, (gptx_backend *be, float *out, const float *a, const float *b, size_t n),
      0, 0, 0.0, out, a, b, n)
TIMED(crossentropy_forward,
      (gptx_backend *be, float *losses, float *lse, float *logits, const int32_t *targets, int N,
       int V, int Vp, int mask_padded),
      0, 0, 0.0, losses, lse, logits, targets, N, V, Vp, mask_padded)
TIMED(crossentropy_backward,
      (gptx_backend *be, float *logits, const float *lse, const int32_t *targets, int N, int V,
       int Vp, float dloss),
      0, 0, 0.0, logits, lse, targets, N, V, Vp, dloss)
TIMED(crossentropy_fused,
      (gptx_backend *be, float *losses, float *lse, float *logits, const int32_t *targets, int N,
       int V, int Vp, int mask_padded, float dloss),
      0, 0, 0.0, losses, lse, logits, targets, N, V, Vp, mask_padded, dloss)
TIMED(sum_to_host, (gptx_backend *be, double *host_sum, const float *x, size_t n), 0, 0, 0.0,
      host_sum, x, n)
TIMED(sum_squares_to_host, (gptx_backend *be, double *host_sum, const float *x, size_t n), 0, 0,
      0.0, host_sum, x, n)
TIMED(adamw,
      (gptx_backend *be, float *params, const float *grads, float *m, float *v,
       const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h),
      0, 0, 0.0, params, grads, m, v, ranges, nranges, h)
TIMED(adamw_copy,
      (gptx_backend *be, float *params, float *copy, const float *grads, float *m, float *v,
       const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h),
      0, 0, 0.0, params, copy, grads, m, v, ranges, nranges, h)
/* the clip norm's per-tensor sums inside backward (grad_fusion) */
TIMED(grad_sumsq, (gptx_backend *be, double *host_sum, const float *grad, size_t n), 0, 0, 0.0,
      host_sum, grad, n)
TIMED(grad_overwrite, (gptx_backend *be, int on), 0, 0, 0.0, on)
/* rank-invariant gradient sums: a fold per backward, the rest per step */
TIMED(exact_fold, (gptx_backend *be, int64_t *bins, int32_t *win, const float *x, size_t n), 0, 0,
      0.0, bins, win, x, n)
TIMED(exact_raise,
      (gptx_backend *be, int64_t *bins, int32_t *win, const int32_t *to, size_t n), 0, 0, 0.0,
      bins, win, to, n)
TIMED(exact_value,
      (gptx_backend *be, float *out, const int64_t *bins, const int32_t *win, size_t n), 0, 0,
      0.0, out, bins, win, n)
TIMED(layernorm_backward_act,
      (gptx_backend *be, float *dinp, float *dinp_act, float *dw, float *db, const float *dout,
       const float *inp, const float *w, const float *mean, const float *rstd, int N, int C),
      0, 0, 0.0, dinp, dinp_act, dw, db, dout, inp, w, mean, rstd, N, C)

/* copies, fills and conversions: the step's uploads of ids, zero_grad, the
 * bf16 weight copy */
TIMED(upload_f32, (gptx_backend *be, float *dst, const float *host, size_t n), 0, 0, 0.0, dst,
      host, n)
TIMED(download_f32, (gptx_backend *be, float *host, const float *src, size_t n), 0, 0, 0.0, host,
      src, n)
TIMED(upload_i32, (gptx_backend *be, int32_t *dst, const int32_t *host, size_t n), 0, 0, 0.0, dst,
      host, n)
TIMED(fill_f32, (gptx_backend *be, float *dst, float value, size_t n), 0, 0, 0.0, dst, value, n)
TIMED(download_act, (gptx_backend *be, float *host, const float *src, size_t n), 0, 0, 0.0, host,
      src, n)
TIMED(fill_act, (gptx_backend *be, float *dst, float value, size_t n), 0, 0, 0.0, dst, value, n)
TIMED(act_from_res, (gptx_backend *be, float *dst, const float *src, size_t n), 0, 0, 0.0, dst,
      src, n)
TIMED(convert_weights, (gptx_backend *be, float *copy, const float *params, size_t n), 0, 0, 0.0,
      copy, params, n)
TIMED(upload_param, (gptx_backend *be, float *dst, const float *host, size_t n), 0, 0, 0.0, dst,
      host, n)
TIMED(download_param, (gptx_backend *be, float *host, const float *src, size_t n), 0, 0, 0.0,
      host, src, n)
TIMED(fill_param, (gptx_backend *be, float *dst, float value, size_t n), 0, 0, 0.0, dst, value, n)

/* ---- forwarded, not timed ---- */

PASS0(int, num_threads, (const gptx_backend *be))
PASS0(unsigned, capabilities, (const gptx_backend *be))
PASS(int, alloc, (gptx_backend *be, size_t bytes, void **ptr), bytes, ptr)
PASS_VOID(free, (gptx_backend *be, void *ptr), ptr)
PASS(int, memory_stats, (const gptx_backend *be, gptx_memory_stats *stats), stats)
PASS0(int, reset_peak, (gptx_backend *be))
PASS0(int, synchronize, (gptx_backend *be))
PASS0(int, precision, (const gptx_backend *be))
PASS0(unsigned, grad_fusion, (const gptx_backend *be))
PASS_VOID(storage, (const gptx_backend *be, gptx_backend_storage *out), out)
PASS_VOID(describe, (const gptx_backend *be, gptx_context_info *info), info)
PASS(int, host_alloc_pinned, (gptx_backend *be, size_t bytes, void **ptr), bytes, ptr)
PASS_VOID(host_free_pinned, (gptx_backend *be, void *ptr), ptr)
PASS(int, instance_ops, (const gptx_backend *be, const gptx_kernel_variants *v,
                         gptx_backend_ops *ops), v, ops)
PASS_VOID(op_buffers, (const gptx_backend *be, const gptx_kernel_variants *v, int B, int T,
                        int C, int NH, gptx_op_buffers *out), v, B, T, C, NH, out)
PASS0(void *, compute_stream, (gptx_backend *be))
PASS(int, event_create, (gptx_backend *be, void **ev), ev)
PASS_VOID(event_destroy, (gptx_backend *be, void *ev), ev)
PASS(int, event_record, (gptx_backend *be, void *ev), ev)
PASS(int, event_elapsed, (gptx_backend *be, void *start, void *stop, double *seconds), start,
     stop, seconds)
PASS_VOID(graph_counts, (const gptx_backend *be, int64_t *captures, int64_t *replays), captures,
     replays)

/* Every entry with a wrapper; with the five the decorated table leaves NULL
 * (create, destroy, graph_begin, graph_end, max_threads) they are the whole
 * table, which
 * the assertion below checks, so an entry added to backend.h cannot be
 * forgotten here: its real function would receive the stand-in. */
#define WRAPPED_ENTRIES(X)                                                                \
    X(matmul_forward) X(matmul_backward) X(qkv_forward) X(qkv_backward)                    \
    X(matmul_gelu_forward) X(matmul_backward_dgelu) X(attention_forward)                  \
    X(attention_backward) X(attention_kv_forward) X(embedding_forward)                    \
    X(embedding_backward) X(layernorm_forward) X(layernorm_backward)                      \
    X(residual_layernorm_forward) X(gelu_forward) X(gelu_backward) X(residual_forward)    \
    X(crossentropy_forward) X(crossentropy_backward) X(crossentropy_fused) X(sum_to_host)  \
    X(sum_squares_to_host) X(adamw) X(adamw_copy) X(layernorm_backward_act) X(upload_f32) X(download_f32) X(upload_i32)           \
    X(fill_f32) X(download_act) X(fill_act) X(act_from_res) X(convert_weights)            \
    X(upload_param) X(download_param) X(fill_param) X(num_threads) X(capabilities)        \
    X(alloc) X(free) X(memory_stats) X(reset_peak) X(synchronize) X(precision) X(storage) \
    X(describe) X(host_alloc_pinned) X(host_free_pinned) X(instance_ops) X(op_buffers)    \
    X(compute_stream) X(event_create) X(event_destroy) X(event_record) X(event_elapsed)   \
    X(graph_counts) X(grad_fusion) X(grad_sumsq) X(grad_overwrite) X(exact_fold)          \
    X(exact_raise) X(exact_value)
#define COUNT_ENTRY(entry) +1
enum { WRAPPED = 0 WRAPPED_ENTRIES(COUNT_ENTRY), LEFT_NULL = 5 };
_Static_assert(sizeof(gptx_backend_ops) ==
                   sizeof(const char *) + (WRAPPED + LEFT_NULL) * sizeof(void (*)(void)),
               "an entry of gptx_backend_ops has no wrapper in op_profile_table.c");

/* Present entries take their wrapper, absent ones stay NULL (optional
 * entries keep their meaning). */
static void decorate(gptx_backend_ops *ops) {
#define INSTALL(entry) if (ops->entry) ops->entry = w_##entry;
    WRAPPED_ENTRIES(INSTALL)
#undef INSTALL
    /* an instance never creates or destroys the backend; without graph
     * entries the model issues every op, so none hides in a replay */
    ops->create = NULL;
    ops->destroy = NULL;
    ops->graph_begin = NULL;
    ops->graph_end = NULL;
    ops->max_threads = NULL; /* a question for create, before any instance */
}

int gptx_op_profile_attach(const gptx_context *ctx, gptx_backend_ops *ops, gptx_backend **be,
                           gptx_profiled **handle) {
    *be = ctx->be;
    *handle = NULL;
    if (!ctx->profiling) return GPTX_OK;
    gptx_profiled *s = malloc(sizeof *s);
    if (!s) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    s->inner = *ops;
    s->be = ctx->be;
    s->prof = ctx->profiler;
    decorate(ops);
    *be = (gptx_backend *)(void *)s;
    *handle = s;
    return GPTX_OK;
}

void gptx_op_profile_detach(gptx_profiled *handle) { free(handle); }
