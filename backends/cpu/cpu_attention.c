/* Causal self-attention, flash style: the forward pass keeps only each query
 * row's log-sum-exp; the backward pass recomputes the probabilities block by
 * block. Nothing of size (B, NH, T, T) is stored: a task's scratch is two
 * (BLOCK, T) tiles, so activation memory grows linearly with T.
 *
 * Tasks are (batch, head) pairs run on the thread pool; inside a task the
 * tile products are single-threaded OpenBLAS sgemm calls, so each output has
 * one writer and the result does not depend on the thread count. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_math.h"
#include "errors.h"

#define BLOCK 64 /* query rows per tile */

typedef struct {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *outc, *lsec;
    int B, T, C, NH;
    float *scratch; /* per task: 2 * BLOCK * T floats */
} attn_args;

/* p[s] = exp(p[s] - shift) for s <= last, 0 after it; returns the sum. */
GPTX_CPU_HOT static float gptx_cpu_exp_row_causal(float *p, int T, int last, float shift) {
    float acc[GPTX_LANES] = {0};
    int s = 0;
    for (; s + GPTX_LANES <= last + 1; s += GPTX_LANES)
        for (int k = 0; k < GPTX_LANES; k++) acc[k] += p[s + k] = gptx_expf(p[s + k] - shift);
    for (; s <= last; s++) acc[s % GPTX_LANES] += p[s] = gptx_expf(p[s] - shift);
    for (; s < T; s++) p[s] = 0.0f;
    return gptx_lanes_total(acc);
}

/* The vectorized reductions of cpu_math.h, in the widest clone the CPU runs
 * (names unique across files: clang gives target_clones resolvers external
 * names even for static functions). */
GPTX_CPU_HOT static float gptx_cpu_attn_row_max(const float *p, int n) { return gptx_max(p, n); }

GPTX_CPU_HOT static float gptx_cpu_attn_dot(const float *x, const float *y, int n) {
    float acc[GPTX_LANES] = {0};
    int j = 0;
    for (; j + GPTX_LANES <= n; j += GPTX_LANES)
        for (int k = 0; k < GPTX_LANES; k++) acc[k] += x[j + k] * y[j + k];
    for (; j < n; j++) acc[j % GPTX_LANES] += x[j] * y[j];
    return gptx_lanes_total(acc);
}

static void attn_fwd_task(void *vp, int task) {
    attn_args *a = vp;
    int C = a->C, C3 = 3 * C, T = a->T, NH = a->NH, hs = C / NH;
    int b = task / NH, h = task % NH;
    float *S = a->scratch + (size_t)task * 2 * BLOCK * T;
    float scale = 1.0f / sqrtf((float)hs);
    const float *q = a->qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
    for (int t0 = 0; t0 < T; t0 += BLOCK) {
        int nq = T - t0 < BLOCK ? T - t0 : BLOCK, nk = t0 + nq; /* keys 0 .. t0+nq-1 */
        // S (nq, nk) = Q_blk @ K^T * scale
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale,
                    q + (size_t)t0 * C3, C3, k, C3, 0.0f, S, nk);
        for (int i = 0; i < nq; i++) {
            float *p = S + (size_t)i * nk;
            int t = t0 + i;
            float mx = gptx_cpu_attn_row_max(p, t + 1);
            float sum = gptx_cpu_exp_row_causal(p, nk, t, mx), inv = 1.0f / sum;
            for (int s = 0; s <= t; s++) p[s] *= inv;
            a->lse[((size_t)b * NH + h) * T + t] = mx + logf(sum);
        }
        // O_blk (nq, hs) = P @ V
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, S, nk, v, C3,
                    0.0f, a->out + ((size_t)b * T + t0) * C + h * hs, C);
    }
}

static void attn_bwd_task(void *vp, int task) {
    attn_args *a = vp;
    int C = a->C, C3 = 3 * C, T = a->T, NH = a->NH, hs = C / NH;
    int b = task / NH, h = task % NH;
    float *P = a->scratch + (size_t)task * 2 * BLOCK * T, *dP = P + (size_t)BLOCK * T;
    float scale = 1.0f / sqrtf((float)hs);
    const float *q = a->qkv + (size_t)b * T * C3 + h * hs, *k = q + C, *v = q + 2 * C;
    float *dq = a->dqkv + (size_t)b * T * C3 + h * hs, *dk = dq + C, *dv = dq + 2 * C;
    for (int t = 0; t < T; t++) {
        memset(dk + (size_t)t * C3, 0, (size_t)hs * sizeof(float));
        memset(dv + (size_t)t * C3, 0, (size_t)hs * sizeof(float));
    }
    for (int t0 = 0; t0 < T; t0 += BLOCK) {
        int nq = T - t0 < BLOCK ? T - t0 : BLOCK, nk = t0 + nq;
        const float *dO = a->dout + ((size_t)b * T + t0) * C + h * hs;
        // P (nq, nk) = exp(Q_blk @ K^T * scale - lse), causal
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale,
                    q + (size_t)t0 * C3, C3, k, C3, 0.0f, P, nk);
        for (int i = 0; i < nq; i++)
            gptx_cpu_exp_row_causal(P + (size_t)i * nk, nk, t0 + i,
                           a->lsec[((size_t)b * NH + h) * T + t0 + i]);
        // dV (nk, hs) += P^T @ dO_blk
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, P, nk, dO, C, 1.0f,
                    dv, C3);
        // dP (nq, nk) = dO_blk @ V^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dO, C, v, C3, 0.0f,
                    dP, nk);
        // dS = P * (dP - D) * scale, D = dO . O per row
        for (int i = 0; i < nq; i++) {
            const float *o = a->outc + ((size_t)b * T + t0 + i) * C + h * hs;
            const float *g = dO + (size_t)i * C;
            float D = gptx_cpu_attn_dot(g, o, hs);
            float *ds = dP + (size_t)i * nk;
            const float *p = P + (size_t)i * nk;
            for (int s = 0; s < nk; s++) ds[s] = p[s] * (ds[s] - D) * scale;
        }
        // dQ_blk (nq, hs) = dS @ K; dK (nk, hs) += dS^T @ Q_blk
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, dP, nk, k, C3,
                    0.0f, dq + (size_t)t0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, dP, nk,
                    q + (size_t)t0 * C3, C3, 1.0f, dk, C3);
    }
}

/* Runs B*NH tasks with single-threaded products inside them. */
static int run_heads(gptx_backend *be, attn_args *a, gptx_task_fn fn) {
    int ntasks = a->B * a->NH;
    a->scratch = malloc((size_t)ntasks * 2 * BLOCK * a->T * sizeof(float));
    if (!a->scratch) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for attention scratch");
    gptx_cpu_blas_single(); /* tasks are (batch, head) pairs: the pool supplies the parallelism */
    gptx_threadpool_run(be->pool, ntasks, fn, a);
    free(a->scratch);
    return GPTX_OK;
}

int gptx_cpu_attention_forward(gptx_backend *be, float *out, float *lse, const float *qkv, int B,
                               int T, int C, int NH) {
    attn_args a = {.out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH};
    return run_heads(be, &a, attn_fwd_task);
}

int gptx_cpu_attention_backward(gptx_backend *be, float *dqkv, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int C, int NH) {
    attn_args a = {.dqkv = dqkv, .qkv = qkv, .dout = dout, .outc = out, .lsec = lse, .B = B,
                   .T = T, .C = C, .NH = NH};
    return run_heads(be, &a, attn_bwd_task);
}
