/* See variant_ops.h. */
#include "variant_ops.h"

#include "errors.h"

static size_t round64(size_t n) { return (n + 63) / 64 * 64; }

size_t gptx_qkv_separate_work_bytes(size_t act_bytes, int N, int C) {
    return 4 * round64((size_t)N * (size_t)C * act_bytes);
}

/* The i-th (N, C) activation buffer of the workspace: q, k, v, then a spare. */
static float *work_at(const gptx_qkv_separate_ops *o, void *work, int i, int N, int C) {
    return (float *)((char *)work + (size_t)i * round64((size_t)N * (size_t)C * o->act_bytes));
}

/* `elems` elements past a weight view */
static const float *w_at(const gptx_qkv_separate_ops *o, const float *w, size_t elems) {
    return (const float *)((const char *)w + elems * o->w_bytes);
}

int gptx_qkv_separate_forward(const gptx_qkv_separate_ops *o, gptx_backend *be, float *qkv,
                              const float *inp, const float *w, const float *bias, void *work,
                              int N, int C) {
    size_t CC = (size_t)C * C;
    for (int i = 0; i < 3; i++) // (N, C) each
        GPTX_TRY(o->matmul_forward(be, work_at(o, work, i, N, C), inp, w_at(o, w, i * CC),
                                   bias ? w_at(o, bias, (size_t)i * C) : NULL, N, C, C));
    return o->interleave(be, qkv, work_at(o, work, 0, N, C), work_at(o, work, 1, N, C),
                         work_at(o, work, 2, N, C), N, C);
}

int gptx_qkv_separate_backward(const gptx_qkv_separate_ops *o, gptx_backend *be, float *dinp,
                               float *dw, float *dbias, const float *dqkv, const float *inp,
                               const float *w, void *work, int N, int C) {
    size_t CC = (size_t)C * C;
    float *d[3] = {work_at(o, work, 0, N, C), work_at(o, work, 1, N, C),
                   work_at(o, work, 2, N, C)};
    float *dtmp = work_at(o, work, 3, N, C);
    GPTX_TRY(o->split(be, d[0], d[1], d[2], dqkv, N, C));
    for (int i = 0; i < 3; i++) { /* dinp = dq @ Wq + dk @ Wk + dv @ Wv, in that order */
        GPTX_TRY(o->matmul_backward(be, i == 0 ? dinp : dtmp, dw + i * CC,
                                    dbias ? dbias + (size_t)i * C : NULL, d[i], inp,
                                    w_at(o, w, i * CC), N, C, C));
        if (i > 0) GPTX_TRY(o->residual_forward(be, dinp, dinp, dtmp, (size_t)N * C));
    }
    return GPTX_OK;
}

int gptx_adamw_per_tensor(gptx_adamw_fn adamw, gptx_backend *be, float *params,
                          const float *grads, float *m, float *v,
                          const gptx_param_range *ranges, int nranges,
                          const gptx_adamw_hyper *h) {
    for (int r = 0; r < nranges; r++)
        GPTX_TRY(adamw(be, params, grads, m, v, &ranges[r], 1, h));
    return GPTX_OK;
}
