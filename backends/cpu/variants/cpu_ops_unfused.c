/* Step-by-step ("teaching") LayerNorm and GELU: one pass per formula term,
 * each materialising its intermediate in memory, as a framework without
 * kernel fusion executes them. Same function as the fused kernels in
 * cpu_ops.c; used by the ablation benchmark to measure what fusion saves. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cpu_kernels.h"
#include "errors.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */

typedef enum {
    P_ROW_MEAN,      /* r[n] = mean_c x[n, c] */
    P_CENTER,        /* y = x - r[n] */
    P_ROW_RSTD,      /* r2[n] = 1 / sqrt(mean_c y^2 + eps) */
    P_SCALE_ROWS,    /* y = x * r[n] */
    P_AFFINE,        /* y = x * w[c] + b[c] */
    P_MUL_COLS,      /* y = x * w[c] */
    P_ROW_MEAN_PROD, /* r[n] = mean_c x * z */
    P_LN_DINP        /* dinp += r2[n] * (x - r[n] - z * r3[n]) */
} row_pass;

typedef struct {
    row_pass pass;
    float *y, *r, *r2, *r3;
    const float *x, *z, *w, *b;
    int N, C;
    float eps;
    int ntasks;
} row_args;

static void row_task(void *vp, int task) {
    row_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    int C = a->C;
    for (size_t n = lo; n < hi; n++) {
        const float *x = a->x + n * C;
        float *y = a->y ? a->y + n * C : NULL;
        float s = 0.0f;
        switch (a->pass) {
        case P_ROW_MEAN:
            for (int c = 0; c < C; c++) s += x[c];
            a->r[n] = s / (float)C;
            break;
        case P_CENTER:
            for (int c = 0; c < C; c++) y[c] = x[c] - a->r[n];
            break;
        case P_ROW_RSTD:
            for (int c = 0; c < C; c++) s += x[c] * x[c];
            a->r2[n] = 1.0f / sqrtf(s / (float)C + a->eps);
            break;
        case P_SCALE_ROWS:
            for (int c = 0; c < C; c++) y[c] = x[c] * a->r[n];
            break;
        case P_AFFINE:
            for (int c = 0; c < C; c++) y[c] = x[c] * a->w[c] + a->b[c];
            break;
        case P_MUL_COLS:
            for (int c = 0; c < C; c++) y[c] = x[c] * a->w[c];
            break;
        case P_ROW_MEAN_PROD: {
            const float *z = a->z + n * C;
            for (int c = 0; c < C; c++) s += x[c] * z[c];
            a->r[n] = s / (float)C;
            break;
        }
        case P_LN_DINP: {
            const float *z = a->z + n * C;
            for (int c = 0; c < C; c++) y[c] += a->r2[n] * (x[c] - a->r[n] - z[c] * a->r3[n]);
            break;
        }
        }
    }
}

static void run_rows(gptx_backend *be, row_args a) {
    a.ntasks = gptx_cpu_ntasks(be, (size_t)a.N);
    gptx_threadpool_run(be->pool, a.ntasks, row_task, &a);
}

int gptx_cpu_layernorm_forward_unfused(gptx_backend *be, float *out, float *mean, float *rstd,
                                       const float *inp, const float *w, const float *b, int N,
                                       int C, float eps) {
    float *centered = malloc((size_t)N * C * sizeof *centered);
    if (!centered) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    run_rows(be, (row_args){.pass = P_ROW_MEAN, .r = mean, .x = inp, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_CENTER, .y = centered, .r = mean, .x = inp, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_ROW_RSTD, .r2 = rstd, .x = centered, .N = N, .C = C, .eps = eps});
    run_rows(be, (row_args){.pass = P_SCALE_ROWS, .y = out, .r = rstd, .x = centered, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_AFFINE, .y = out, .x = out, .w = w, .b = b, .N = N, .C = C});
    free(centered);
    return GPTX_OK;
}

typedef struct {
    float *dw, *db;
    const float *dout, *xhat;
    int N, C;
} ln_cols_args;

static void ln_cols_task(void *vp, int task) {
    ln_cols_args *a = vp;
    int c0 = task * 64, c1 = c0 + 64 < a->C ? c0 + 64 : a->C;
    for (size_t n = 0; n < (size_t)a->N; n++)
        for (int c = c0; c < c1; c++) {
            a->dw[c] += a->dout[n * a->C + c] * a->xhat[n * a->C + c];
            a->db[c] += a->dout[n * a->C + c];
        }
}

int gptx_cpu_layernorm_backward_unfused(gptx_backend *be, float *dinp, float *dw, float *db,
                                        const float *dout, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int N, int C) {
    size_t NC = (size_t)N * C;
    float *xhat = malloc(NC * sizeof *xhat), *dxhat = malloc(NC * sizeof *dxhat);
    float *m1 = malloc((size_t)N * sizeof *m1), *m2 = malloc((size_t)N * sizeof *m2);
    if (!xhat || !dxhat || !m1 || !m2) {
        free(xhat); free(dxhat); free(m1); free(m2);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    /* xhat = (x - mean) * rstd, recomputed in two passes */
    run_rows(be, (row_args){.pass = P_CENTER, .y = xhat, .r = (float *)mean, .x = inp, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_SCALE_ROWS, .y = xhat, .r = (float *)rstd, .x = xhat, .N = N, .C = C});
    ln_cols_args ca = {dw, db, dout, xhat, N, C};
    gptx_threadpool_run(be->pool, (C + 63) / 64, ln_cols_task, &ca);
    run_rows(be, (row_args){.pass = P_MUL_COLS, .y = dxhat, .x = dout, .w = w, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_ROW_MEAN, .r = m1, .x = dxhat, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_ROW_MEAN_PROD, .r = m2, .x = dxhat, .z = xhat, .N = N, .C = C});
    run_rows(be, (row_args){.pass = P_LN_DINP, .y = dinp, .r = m1, .r2 = (float *)rstd, .r3 = m2,
                            .x = dxhat, .z = xhat, .N = N, .C = C});
    free(xhat); free(dxhat); free(m1); free(m2);
    return GPTX_OK;
}

/* ---- GELU, one pass per term ---------------------------------------------- */

typedef enum { G_CUBE, G_INNER, G_TANH, G_OUT, G_SECH2, G_LOCAL, G_MUL } gelu_pass;

typedef struct {
    gelu_pass pass;
    float *y;
    const float *x, *z;
    size_t n;
    int ntasks;
} gelu_args;

static void gelu_task(void *vp, int task) {
    gelu_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        float x = a->x[i];
        switch (a->pass) {
        case G_CUBE: a->y[i] = x * x * x; break;                            /* x^3 */
        case G_INNER: a->y[i] = GELU_SCALE * (x + 0.044715f * a->z[i]); break; /* s (x + c x^3) */
        case G_TANH: a->y[i] = tanhf(a->z[i]); break;
        case G_OUT: a->y[i] = 0.5f * x * (1.0f + a->z[i]); break;
        case G_SECH2: a->y[i] = 1.0f - a->z[i] * a->z[i]; break;
        case G_LOCAL: /* y holds tanh, z holds sech^2 */
            a->y[i] = 0.5f * (1.0f + a->y[i]) +
                      0.5f * x * a->z[i] * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
            break;
        case G_MUL: a->y[i] = a->y[i] * a->z[i]; break;
        }
    }
}

static void run_gelu(gptx_backend *be, gelu_pass p, float *y, const float *x, const float *z,
                     size_t n) {
    gelu_args a = {p, y, x, z, n, gptx_cpu_ntasks(be, (n + 4095) / 4096)};
    gptx_threadpool_run(be->pool, a.ntasks, gelu_task, &a);
}

int gptx_cpu_gelu_forward_unfused(gptx_backend *be, float *out, const float *inp, size_t n) {
    float *t = malloc(n * sizeof *t);
    if (!t) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    run_gelu(be, G_CUBE, t, inp, NULL, n);
    run_gelu(be, G_INNER, t, inp, t, n);
    run_gelu(be, G_TANH, t, inp, t, n);
    run_gelu(be, G_OUT, out, inp, t, n);
    free(t);
    return GPTX_OK;
}

int gptx_cpu_gelu_backward_unfused(gptx_backend *be, float *dinp, const float *inp,
                                   const float *dout, size_t n) {
    float *t = malloc(n * sizeof *t), *sech2 = malloc(n * sizeof *sech2);
    if (!t || !sech2) {
        free(t);
        free(sech2);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    run_gelu(be, G_CUBE, t, inp, NULL, n);
    run_gelu(be, G_INNER, t, inp, t, n);
    run_gelu(be, G_TANH, t, inp, t, n);
    run_gelu(be, G_SECH2, sech2, inp, t, n);
    run_gelu(be, G_LOCAL, t, inp, sech2, n);
    run_gelu(be, G_MUL, t, inp, dout, n); /* before dinp is written: it may be dout */
    memcpy(dinp, t, n * sizeof *dinp);
    free(t);
    free(sech2);
    return GPTX_OK;
}

/* ---- separate Q, K, V buffers ------------------------------------------------ */

typedef struct {
    float *qkv, *q, *k, *v;
    int N, C, split, ntasks;
} qkv_args;

static void qkv_task(void *vp, int task) {
    qkv_args *a = vp;
    size_t lo, hi, C = (size_t)a->C;
    gptx_cpu_split((size_t)a->N, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        float *row = a->qkv + n * 3 * C;
        if (a->split) {
            memcpy(a->q + n * C, row, C * sizeof(float));
            memcpy(a->k + n * C, row + C, C * sizeof(float));
            memcpy(a->v + n * C, row + 2 * C, C * sizeof(float));
        } else {
            memcpy(row, a->q + n * C, C * sizeof(float));
            memcpy(row + C, a->k + n * C, C * sizeof(float));
            memcpy(row + 2 * C, a->v + n * C, C * sizeof(float));
        }
    }
}

int gptx_cpu_qkv_interleave(gptx_backend *be, float *qkv, const float *q, const float *k,
                            const float *v, int N, int C) {
    qkv_args a = {qkv, (float *)q, (float *)k, (float *)v, N, C, 0, gptx_cpu_ntasks(be, (size_t)N)};
    gptx_threadpool_run(be->pool, a.ntasks, qkv_task, &a);
    return GPTX_OK;
}

int gptx_cpu_qkv_split(gptx_backend *be, float *q, float *k, float *v, const float *qkv, int N,
                       int C) {
    qkv_args a = {(float *)qkv, q, k, v, N, C, 1, gptx_cpu_ntasks(be, (size_t)N)};
    gptx_threadpool_run(be->pool, a.ntasks, qkv_task, &a);
    return GPTX_OK;
}
