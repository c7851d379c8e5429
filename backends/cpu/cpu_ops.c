/* CPU fp32 kernels (everything except attention). Every reduction runs in a
 * fixed order that does not depend on the number of threads: work is split
 * so that each output element has exactly one writer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_math.h"
#include "errors.h"

/* Column blocks for reductions over rows (bias/LayerNorm/embedding grads). */
#define COL_BLOCK 64
/* Fixed chunk for whole-buffer reductions: partial sums per chunk, then the
 * partials in chunk order, so the result is the same for any thread count. */
#define REDUCE_CHUNK 65536

/* ---- embedding -------------------------------------------------------- */

typedef struct {
    float *out;
    const int32_t *inp;
    const float *wte, *wpe;
    int T, C;
    size_t rows;
    int ntasks;
} embed_fwd_args;

static void embed_fwd_task(void *vp, int task) {
    embed_fwd_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->rows, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        const float *te = a->wte + (size_t)a->inp[n] * a->C;
        const float *pe = a->wpe + (n % (size_t)a->T) * a->C;
        float *o = a->out + n * a->C;
        for (int c = 0; c < a->C; c++) o[c] = te[c] + pe[c];
    }
}

int gptx_cpu_embedding_forward(gptx_backend *be, float *out, const int32_t *inp, const float *wte,
                               const float *wpe, int B, int T, int C) {
    embed_fwd_args a = {out, inp, wte, wpe, T, C, (size_t)B * T, 0};
    a.ntasks = gptx_cpu_ntasks(be, a.rows);
    gptx_threadpool_run(be->pool, a.ntasks, embed_fwd_task, &a);
    return GPTX_OK;
}

typedef struct {
    float *dwte, *dwpe;
    const float *dout;
    const int32_t *inp;
    int B, T, C;
} embed_bwd_args;

/* Task = one block of COL_BLOCK channels, visiting rows in order. */
static void embed_bwd_task(void *vp, int task) {
    embed_bwd_args *a = vp;
    int c0 = task * COL_BLOCK, c1 = c0 + COL_BLOCK < a->C ? c0 + COL_BLOCK : a->C;
    for (int b = 0; b < a->B; b++) {
        for (int t = 0; t < a->T; t++) {
            size_t n = (size_t)b * a->T + t;
            const float *d = a->dout + n * a->C;
            float *gte = a->dwte + (size_t)a->inp[n] * a->C;
            float *gpe = a->dwpe + (size_t)t * a->C;
            for (int c = c0; c < c1; c++) {
                gte[c] += d[c];
                gpe[c] += d[c];
            }
        }
    }
}

int gptx_cpu_embedding_backward(gptx_backend *be, float *dwte, float *dwpe, const float *dout,
                                const int32_t *inp, int B, int T, int C) {
    embed_bwd_args a = {dwte, dwpe, dout, inp, B, T, C};
    gptx_threadpool_run(be->pool, (C + COL_BLOCK - 1) / COL_BLOCK, embed_bwd_task, &a);
    return GPTX_OK;
}

/* ---- layernorm ---------------------------------------------------------- */


GPTX_CPU_HOT static void gptx_cpu_ln_fwd_task_hot(void *vp, int task) {
    gptx_cpu_ln_fwd_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->inp + n * a->C;
        float *o = a->out + n * a->C;
        float m = gptx_sum(x, a->C) / (float)a->C;
        float acc[GPTX_LANES] = {0};
        int j = 0;
        for (; j + GPTX_LANES <= a->C; j += GPTX_LANES)
            for (int k = 0; k < GPTX_LANES; k++) acc[k] += (x[j + k] - m) * (x[j + k] - m);
        for (; j < a->C; j++) acc[j % GPTX_LANES] += (x[j] - m) * (x[j] - m);
        float var = gptx_lanes_total(acc) / (float)a->C;
        float s = 1.0f / sqrtf(var + a->eps);
        for (int c = 0; c < a->C; c++) o[c] = (x[c] - m) * s * a->w[c] + a->b[c];
        a->mean[n] = m;
        a->rstd[n] = s;
    }
}
void gptx_cpu_ln_fwd_task(void *vp, int task) {
    gptx_cpu_ln_fwd_task_hot(vp, task);
}

int gptx_cpu_layernorm_forward(gptx_backend *be, float *out, float *mean, float *rstd,
                               const float *inp, const float *w, const float *b, int N, int C,
                               float eps) {
    gptx_cpu_ln_fwd_args a = {out, mean, rstd, inp, w, b, N, C, eps, gptx_cpu_ntasks(be, (size_t)N)};
    gptx_threadpool_run(be->pool, a.ntasks, gptx_cpu_ln_fwd_task, &a);
    return GPTX_OK;
}


/* Pass 1, per row: dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w. */
GPTX_CPU_HOT static void gptx_cpu_ln_bwd_rows_task_hot(void *vp, int task) {
    gptx_cpu_ln_bwd_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->inp + n * a->C, *d = a->dout + n * a->C;
        float *dx = a->dinp + n * a->C;
        float m = a->mean[n], s = a->rstd[n];
        float gacc[GPTX_LANES] = {0}, gxacc[GPTX_LANES] = {0};
        int j = 0;
        for (; j + GPTX_LANES <= a->C; j += GPTX_LANES)
            for (int k = 0; k < GPTX_LANES; k++) {
                float g = d[j + k] * a->w[j + k];
                gacc[k] += g;
                gxacc[k] += g * (x[j + k] - m) * s;
            }
        for (; j < a->C; j++) {
            float g = d[j] * a->w[j];
            gacc[j % GPTX_LANES] += g;
            gxacc[j % GPTX_LANES] += g * (x[j] - m) * s;
        }
        float gsum = gptx_lanes_total(gacc) / (float)a->C;
        float gxsum = gptx_lanes_total(gxacc) / (float)a->C;
        for (int c = 0; c < a->C; c++) {
            float xhat = (x[c] - m) * s;
            dx[c] += s * (d[c] * a->w[c] - gsum - xhat * gxsum);
        }
    }
}
void gptx_cpu_ln_bwd_rows_task(void *vp, int task) {
    gptx_cpu_ln_bwd_rows_task_hot(vp, task);
}

/* Pass 2, per block of channels: dw += sum_n dout * xhat, db += sum_n dout. */
GPTX_CPU_HOT static void gptx_cpu_ln_bwd_cols_task_hot(void *vp, int task) {
    gptx_cpu_ln_bwd_args *a = vp;
    int c0 = task * COL_BLOCK, c1 = c0 + COL_BLOCK < a->C ? c0 + COL_BLOCK : a->C;
    float dw[COL_BLOCK] = {0}, db[COL_BLOCK] = {0};
    for (size_t n = 0; n < (size_t)a->N; n++) {
        const float *x = a->inp + n * a->C, *d = a->dout + n * a->C;
        float m = a->mean[n], s = a->rstd[n];
        for (int c = c0; c < c1; c++) {
            dw[c - c0] += d[c] * (x[c] - m) * s;
            db[c - c0] += d[c];
        }
    }
    if (a->overwrite) { /* zero_grad folded in: the first write of this backward */
        for (int c = c0; c < c1; c++) {
            a->dw[c] = dw[c - c0];
            a->db[c] = db[c - c0];
        }
        return;
    }
    for (int c = c0; c < c1; c++) {
        a->dw[c] += dw[c - c0];
        a->db[c] += db[c - c0];
    }
}
void gptx_cpu_ln_bwd_cols_task(void *vp, int task) {
    gptx_cpu_ln_bwd_cols_task_hot(vp, task);
}

int gptx_cpu_layernorm_backward(gptx_backend *be, float *dinp, float *dw, float *db,
                                const float *dout, const float *inp, const float *w,
                                const float *mean, const float *rstd, int N, int C) {
    gptx_cpu_ln_bwd_args a = {dinp, dw, db, dout, inp, w, mean, rstd, N, C,
                              gptx_cpu_ntasks(be, (size_t)N), be->grad_overwrite};
    gptx_threadpool_run(be->pool, a.ntasks, gptx_cpu_ln_bwd_rows_task, &a);
    gptx_threadpool_run(be->pool, (C + COL_BLOCK - 1) / COL_BLOCK, gptx_cpu_ln_bwd_cols_task, &a);
    return GPTX_OK;
}

/* ---- matmul --------------------------------------------------------------- */

typedef struct {
    float *out;
    const float *bias;
    int N, OC;
    int ntasks;
} bias_fill_args;

static void bias_fill_task(void *vp, int task) {
    bias_fill_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) memcpy(a->out + n * a->OC, a->bias, (size_t)a->OC * sizeof(float));
}

int gptx_cpu_matmul_forward(gptx_backend *be, float *out, const float *inp, const float *w,
                            const float *bias, int N, int C, int OC) {
    if (N == 1) return gptx_cpu_gemv(be, out, inp, w, bias, C, OC); /* one token (cpu_gemv.c) */
    float beta = 0.0f;
    if (bias) {
        bias_fill_args a = {out, bias, N, OC, gptx_cpu_ntasks(be, (size_t)N)};
        gptx_threadpool_run(be->pool, a.ntasks, bias_fill_task, &a);
        beta = 1.0f;
    }
    // (N, C) @ (OC, C)^T -> (N, OC)
    GPTX_TRY(gptx_cpu_sgemm(be, 0, 1, N, OC, C, 1.0f, inp, C, w, C, beta, out, OC));
    return GPTX_OK;
}

typedef struct {
    float *dbias;
    const float *dout;
    int N, OC;
} dbias_args;

GPTX_CPU_HOT static void gptx_cpu_dbias_task(void *vp, int task) {
    dbias_args *a = vp;
    int c0 = task * COL_BLOCK, c1 = c0 + COL_BLOCK < a->OC ? c0 + COL_BLOCK : a->OC;
    float acc[COL_BLOCK] = {0};
    for (size_t n = 0; n < (size_t)a->N; n++) {
        const float *d = a->dout + n * a->OC;
        for (int c = c0; c < c1; c++) acc[c - c0] += d[c];
    }
    for (int c = c0; c < c1; c++) a->dbias[c] += acc[c - c0];
}

int gptx_cpu_matmul_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                             const float *dout, const float *inp, const float *w, int N, int C,
                             int OC) {
    if (dinp) {
        // (N, OC) @ (OC, C) -> (N, C)
        GPTX_TRY(gptx_cpu_sgemm(be, 0, 0, N, C, OC, 1.0f, dout, OC, w, C, 0.0f, dinp, C));
    }
    // (N, OC)^T @ (N, C) -> (OC, C), accumulated
    GPTX_TRY(gptx_cpu_sgemm(be, 1, 0, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dw, C));
    if (dbias) {
        dbias_args a = {dbias, dout, N, OC};
        gptx_threadpool_run(be->pool, (OC + COL_BLOCK - 1) / COL_BLOCK, gptx_cpu_dbias_task, &a);
    }
    return GPTX_OK;
}

/* ---- elementwise ---------------------------------------------------------- */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */


GPTX_CPU_HOT static void gptx_cpu_gelu_fwd_task_hot(void *vp, int task) {
    gptx_cpu_ew_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        float x = a->x[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        a->out[i] = 0.5f * x * (1.0f + gptx_tanhf(u));
    }
}
void gptx_cpu_gelu_fwd_task(void *vp, int task) {
    gptx_cpu_gelu_fwd_task_hot(vp, task);
}

GPTX_CPU_HOT static void gptx_cpu_gelu_bwd_task_hot(void *vp, int task) {
    gptx_cpu_ew_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        float x = a->x[i];
        float u = GELU_SCALE * (x + 0.044715f * x * x * x);
        float th = gptx_tanhf(u);
        float sech2 = 1.0f - th * th;
        float grad = 0.5f * (1.0f + th) +
                     0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        a->out[i] = grad * a->y[i];
    }
}
void gptx_cpu_gelu_bwd_task(void *vp, int task) {
    gptx_cpu_gelu_bwd_task_hot(vp, task);
}

GPTX_CPU_HOT static void gptx_cpu_residual_task_hot(void *vp, int task) {
    gptx_cpu_ew_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    for (size_t i = lo; i < hi; i++) a->out[i] = a->x[i] + a->y[i];
}
void gptx_cpu_residual_task(void *vp, int task) {
    gptx_cpu_residual_task_hot(vp, task);
}

static int run_elementwise(gptx_backend *be, gptx_task_fn fn, float *out, const float *x,
                           const float *y, size_t n) {
    gptx_cpu_ew_args a = {out, x, y, n, gptx_cpu_ntasks(be, (n + 4095) / 4096)};
    gptx_threadpool_run(be->pool, a.ntasks, fn, &a);
    return GPTX_OK;
}

int gptx_cpu_gelu_forward(gptx_backend *be, float *out, const float *inp, size_t n) {
    return run_elementwise(be, gptx_cpu_gelu_fwd_task, out, inp, NULL, n);
}

int gptx_cpu_gelu_backward(gptx_backend *be, float *dinp, const float *inp, const float *dout,
                           size_t n) {
    return run_elementwise(be, gptx_cpu_gelu_bwd_task, dinp, inp, dout, n);
}

int gptx_cpu_residual_forward(gptx_backend *be, float *out, const float *a, const float *b,
                              size_t n) {
    return run_elementwise(be, gptx_cpu_residual_task, out, a, b, n);
}

/* ---- softmax cross-entropy ------------------------------------------------ */


GPTX_CPU_HOT static float gptx_cpu_row_max(const float *row, int n) { return gptx_max(row, n); }

/* sum_j exp(row[j] - shift); with dst, also dst[j] = exp(row[j] - shift)
 * (dst may be row): both paths give the same sum. Column j goes to lane
 * j % GPTX_LANES, tail included. prefetch (may be NULL): the next row. */
GPTX_CPU_HOT static float gptx_cpu_row_sum_exp(const float *row, float *dst, int n, float shift,
                                      const float *prefetch) {
    float acc[GPTX_LANES] = {0};
    int j = 0;
    if (dst)
        for (; j + GPTX_LANES <= n; j += GPTX_LANES) {
            if (prefetch) __builtin_prefetch(prefetch + j, 0, 3);
            for (int k = 0; k < GPTX_LANES; k++) {
                float e = gptx_expf(row[j + k] - shift);
                dst[j + k] = e;
                acc[k] += e;
            }
        }
    else
        for (; j + GPTX_LANES <= n; j += GPTX_LANES) {
            if (prefetch) __builtin_prefetch(prefetch + j, 0, 3);
            for (int k = 0; k < GPTX_LANES; k++) acc[k] += gptx_expf(row[j + k] - shift);
        }
    for (; j < n; j++) {
        float e = gptx_expf(row[j] - shift);
        if (dst) dst[j] = e;
        acc[j % GPTX_LANES] += e;
    }
    return gptx_lanes_total(acc);
}

/* Per-row statistics carried from forward to backward in the lse buffer
 * (3N floats): lse, then the row max and the sum of exp(logit - max). */
typedef struct {
    float *lse, *max, *sum;
} ce_stats;

static ce_stats ce_stats_of(float *lse, int N) {
    return (ce_stats){lse, lse + N, lse + 2 * (size_t)N};
}

/* Row n's forward on row (its logits): masks the padded columns, saves the
 * statistics and the loss. With store_exp (fused), the softmax numerators
 * exp(logit - max) replace the logits (0 in masked columns) for
 * gptx_cpu_ce_row_gradient. */
void gptx_cpu_ce_row_forward(gptx_cpu_ce_args *a, size_t n, float *row, int store_exp) {
    int ncols = a->mask ? a->V : a->Vp; /* columns inside the softmax */
    if (a->mask)
        for (int j = a->V; j < a->Vp; j++) row[j] = -INFINITY;
    int32_t t = a->targets ? a->targets[n] : GPTX_IGNORE_INDEX;
    float target_logit = t == GPTX_IGNORE_INDEX ? 0.0f : row[t];
    /* the next row streams in from memory while this one is computed (rows
     * of a->logits; a row converted elsewhere has no next) */
    const float *next = a->logits && n + 1 < (size_t)a->N ? a->logits + (n + 1) * a->Vp : NULL;
    float mx = gptx_cpu_row_max(row, ncols);
    float sum = gptx_cpu_row_sum_exp(row, store_exp ? row : NULL, ncols, mx, next);
    if (store_exp && a->mask)
        for (int j = a->V; j < a->Vp; j++) row[j] = 0.0f;
    float lse = mx + logf(sum);
    ce_stats st = ce_stats_of(a->stats, a->N);
    st.lse[n] = lse;
    st.max[n] = mx;
    st.sum[n] = sum;
    if (a->targets) a->losses[n] = t == GPTX_IGNORE_INDEX ? 0.0f : lse - target_logit;
}

/* Row n (at row) becomes d(dloss * loss_n)/dlogits = dloss * (softmax - onehot), in
 * place: softmax_j = exp(x_j - max) * (1 / sum), from the logits (exp_done
 * 0; masked columns hold -inf and give 0) or from ce_row_forward's stored
 * numerators (exp_done 1). Both give the same bits. */
GPTX_CPU_HOT static void gptx_cpu_ce_row_gradient_hot(gptx_cpu_ce_args *a, size_t n,
                                                     float *row, int exp_done) {
    int32_t t = a->targets[n];
    if (t == GPTX_IGNORE_INDEX) {
        memset(row, 0, (size_t)a->Vp * sizeof *row);
        return;
    }
    ce_stats st = ce_stats_of(a->stats, a->N);
    float mx = st.max[n], scale = a->dloss / st.sum[n];
    if (exp_done)
        for (int j = 0; j < a->Vp; j++) row[j] = row[j] * scale;
    else
        for (int j = 0; j < a->Vp; j++) row[j] = gptx_expf(row[j] - mx) * scale;
    row[t] -= a->dloss;
}
void gptx_cpu_ce_row_gradient(gptx_cpu_ce_args *a, size_t n, float *row, int exp_done) {
    gptx_cpu_ce_row_gradient_hot(a, n, row, exp_done);
}

static void ce_fwd_task(void *vp, int task) {
    gptx_cpu_ce_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) gptx_cpu_ce_row_forward(a, n, a->logits + n * a->Vp, 0);
}

static void ce_bwd_task(void *vp, int task) {
    gptx_cpu_ce_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) gptx_cpu_ce_row_gradient(a, n, a->logits + n * a->Vp, 0);
}

/* Both per row while the row is in cache: one trip through memory and one
 * exp per logit instead of two; the same bits as the two passes. */
static void ce_fused_task(void *vp, int task) {
    gptx_cpu_ce_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        float *row = a->logits + n * a->Vp;
        gptx_cpu_ce_row_forward(a, n, row, 1);
        gptx_cpu_ce_row_gradient(a, n, row, 1);
    }
}

int gptx_cpu_crossentropy_forward(gptx_backend *be, float *losses, float *lse, float *logits,
                                  const int32_t *targets, int N, int V, int Vp, int mask_padded) {
    gptx_cpu_ce_args a = {losses, logits, lse, targets, N, V, Vp, mask_padded, 0.0f,
                 gptx_cpu_ntasks(be, (size_t)N)};
    gptx_threadpool_run(be->pool, a.ntasks, ce_fwd_task, &a);
    return GPTX_OK;
}

int gptx_cpu_crossentropy_backward(gptx_backend *be, float *logits, const float *lse,
                                   const int32_t *targets, int N, int V, int Vp, float dloss) {
    /* reads only the statistics of crossentropy_forward */
    gptx_cpu_ce_args a = {NULL, logits, (float *)lse, targets, N, V, Vp, 0, dloss,
                 gptx_cpu_ntasks(be, (size_t)N)};
    gptx_threadpool_run(be->pool, a.ntasks, ce_bwd_task, &a);
    return GPTX_OK;
}

int gptx_cpu_crossentropy_fused(gptx_backend *be, float *losses, float *lse, float *logits,
                                const int32_t *targets, int N, int V, int Vp, int mask_padded,
                                float dloss) {
    gptx_cpu_ce_args a = {losses, logits, lse, targets, N, V, Vp, mask_padded, dloss,
                 gptx_cpu_ntasks(be, (size_t)N)};
    gptx_threadpool_run(be->pool, a.ntasks, ce_fused_task, &a);
    return GPTX_OK;
}

/* ---- reductions ------------------------------------------------------------- */

typedef struct {
    const float *x;
    size_t n;
    double *partials;
    int squares;
} redugptx_cpu_ce_args;

/* A full chunk is read as four quarter streams at once: one sequential
 * stream per core leaves bandwidth unused here (a 496 MB sum of squares on 2
 * threads: 33 -> 24 ms alone). 8 double lanes per stream (32 in all):
 * no add chain bounds the speed. The order of every sum is fixed by the
 * chunk alone, so the result does not depend on the thread count. */
#define QUARTER (REDUCE_CHUNK / 4)

GPTX_CPU_HOT static void gptx_cpu_reduce_task(void *vp, int task) {
    redugptx_cpu_ce_args *a = vp;
    size_t lo = (size_t)task * REDUCE_CHUNK;
    size_t hi = lo + REDUCE_CHUNK < a->n ? lo + REDUCE_CHUNK : a->n;
    const float *x = a->x + lo;
    double acc[4][8] = {{0}};
    if (hi - lo == REDUCE_CHUNK) {
        if (a->squares) {
            for (size_t i = 0; i < QUARTER; i += 8)
                for (int q = 0; q < 4; q++)
                    for (int k = 0; k < 8; k++)
                        acc[q][k] += (double)x[q * QUARTER + i + k] * x[q * QUARTER + i + k];
        } else {
            for (size_t i = 0; i < QUARTER; i += 8)
                for (int q = 0; q < 4; q++)
                    for (int k = 0; k < 8; k++) acc[q][k] += x[q * QUARTER + i + k];
        }
    } else { /* the last, shorter chunk: one stream */
        size_t len = hi - lo, i = 0;
        for (; i + 8 <= len; i += 8)
            for (int k = 0; k < 8; k++)
                acc[0][k] += a->squares ? (double)x[i + k] * x[i + k] : (double)x[i + k];
        for (; i < len; i++) acc[0][i % 8] += a->squares ? (double)x[i] * x[i] : (double)x[i];
    }
    double s = 0.0;
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 8; k++) s += acc[q][k];
    a->partials[task] = s;
}

static int reduce(gptx_backend *be, double *out, const float *x, size_t n, int squares) {
    size_t nchunks = (n + REDUCE_CHUNK - 1) / REDUCE_CHUNK;
    if (nchunks > (size_t)INT32_MAX) return GPTX_FAIL(GPTX_ERR_SHAPE, "buffer of %zu elements is too large", n);
    double stack[64];
    double *partials = nchunks <= 64 ? stack : malloc(nchunks * sizeof *partials);
    if (!partials) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    redugptx_cpu_ce_args a = {x, n, partials, squares};
    gptx_threadpool_run(be->pool, (int)nchunks, gptx_cpu_reduce_task, &a);
    double s = 0.0;
    for (size_t i = 0; i < nchunks; i++) s += partials[i];
    if (partials != stack) free(partials);
    *out = s;
    return GPTX_OK;
}

int gptx_cpu_sum_to_host(gptx_backend *be, double *host_sum, const float *x, size_t n) {
    return reduce(be, host_sum, x, n, 0);
}

int gptx_cpu_sum_squares_to_host(gptx_backend *be, double *host_sum, const float *x, size_t n) {
    return reduce(be, host_sum, x, n, 1);
}

/* ---- AdamW ------------------------------------------------------------------ */

typedef struct {
    float *p;
    const float *g;
    float *m, *v;
    const gptx_param_range *ranges;
    int nranges;
    const gptx_adamw_hyper *h;
    size_t start, total;
    int ntasks;
} adamw_args;

/* One pass over a contiguous slice of the flat buffers, crossing tensor
 * boundaries; each tensor keeps its own weight decay. */
GPTX_CPU_HOT static void gptx_cpu_adamw_task(void *vp, int task) {
    adamw_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->total, a->ntasks, task, &lo, &hi);
    const gptx_adamw_hyper *h = a->h;
    gptx_cpu_adamw_slice sl;
    for (int r = 0; r < a->nranges; r++) {
        if (!gptx_cpu_adamw_slice_of(&a->ranges[r], h, a->start + lo, a->start + hi, &sl))
            continue;
        for (size_t i = sl.s0; i < sl.s1; i++) {
            float g = a->g[i] * h->grad_scale;
            float m = h->beta1 * a->m[i] + (1.0f - h->beta1) * g;
            float v = h->beta2 * a->v[i] + (1.0f - h->beta2) * g * g;
            a->m[i] = m;
            a->v[i] = v;
            a->p[i] = a->p[i] * sl.decay - sl.step * m / (sqrtf(v) * sl.rsbc2 + h->eps);
        }
    }
}

int gptx_cpu_adamw(gptx_backend *be, float *params, const float *grads, float *m, float *v,
                   const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h) {
    size_t start, total = gptx_cpu_adamw_span(ranges, nranges, &start);
    if (total == 0) return GPTX_OK;
    adamw_args a = {params, grads, m, v, ranges, nranges, h, start, total,
                    gptx_cpu_ntasks(be, (total + 16383) / 16384)};
    gptx_threadpool_run(be->pool, a.ntasks, gptx_cpu_adamw_task, &a);
    return GPTX_OK;
}
