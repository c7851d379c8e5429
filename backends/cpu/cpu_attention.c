/* Causal self-attention, flash style: the forward pass keeps only each query
 * row's log-sum-exp; the backward pass recomputes the probabilities block by
 * block. Nothing of size (B, NH, T, T) is stored: a task's scratch is two
 * (BLOCK, T) tiles, so activation memory grows linearly with T.
 *
 * Tasks are (batch, head) pairs run on the thread pool; inside a task the
 * tile products are single-threaded OpenBLAS sgemm calls (bf16: oneDNN bf16
 * products on the task's worker, below), so each output has one writer and
 * the result does not depend on the thread count. */
#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_bf16.h"
#include "cpu_math.h"
#include "errors.h"
#ifdef GPTX_HAVE_DNNL
#include "cpu_dnnl.h"
#endif

#define BLOCK 64 /* query rows per tile */

typedef struct {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *outc, *lsec;
    int B, T, C, NH;
    float *scratch; /* per task: 2 * BLOCK * T floats */
} attn_args;

/* One (batch, head): its q, k, v rows (and dq, dk, dv) ld_qkv floats apart,
 * its out, dout and saved-out rows ld_o apart, and its T log-sum-exps. The
 * fp32 tasks point into the (B, T, 3C) and (B, T, C) buffers. */
typedef struct {
    const float *q, *k, *v, *dout, *outc;
    float *out, *dq, *dk, *dv;
    float *lse;
    const float *lsec;
    size_t ld_qkv, ld_o;
} head_view;

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

/* Forward of one head: out = softmax(q k^T * scale, causal) v, lse per row.
 * S: BLOCK * T floats. */
static void attn_fwd_head(const head_view *hv, int T, int hs, float *S) {
    float scale = 1.0f / sqrtf((float)hs);
    int ldq = (int)hv->ld_qkv, ldo = (int)hv->ld_o;
    for (int t0 = 0; t0 < T; t0 += BLOCK) {
        int nq = T - t0 < BLOCK ? T - t0 : BLOCK, nk = t0 + nq; /* keys 0 .. t0+nq-1 */
        // S (nq, nk) = Q_blk @ K^T * scale
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale,
                    hv->q + (size_t)t0 * ldq, ldq, hv->k, ldq, 0.0f, S, nk);
        for (int i = 0; i < nq; i++) {
            float *p = S + (size_t)i * nk;
            int t = t0 + i;
            float mx = gptx_cpu_attn_row_max(p, t + 1);
            float sum = gptx_cpu_exp_row_causal(p, nk, t, mx), inv = 1.0f / sum;
            for (int s = 0; s <= t; s++) p[s] *= inv;
            hv->lse[t] = mx + logf(sum);
        }
        // O_blk (nq, hs) = P @ V
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, S, nk, hv->v,
                    ldq, 0.0f, hv->out + (size_t)t0 * ldo, ldo);
    }
}

/* Backward of one head: dq, dk, dv (overwritten) from dout, recomputing the
 * probabilities from q, k and the saved lse. P: 2 * BLOCK * T floats. */
static void attn_bwd_head(const head_view *hv, int T, int hs, float *P) {
    float *dP = P + (size_t)BLOCK * T;
    float scale = 1.0f / sqrtf((float)hs);
    int ldq = (int)hv->ld_qkv, ldo = (int)hv->ld_o;
    for (int t = 0; t < T; t++) {
        memset(hv->dk + (size_t)t * ldq, 0, (size_t)hs * sizeof(float));
        memset(hv->dv + (size_t)t * ldq, 0, (size_t)hs * sizeof(float));
    }
    for (int t0 = 0; t0 < T; t0 += BLOCK) {
        int nq = T - t0 < BLOCK ? T - t0 : BLOCK, nk = t0 + nq;
        const float *dO = hv->dout + (size_t)t0 * ldo;
        // P (nq, nk) = exp(Q_blk @ K^T * scale - lse), causal
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, scale,
                    hv->q + (size_t)t0 * ldq, ldq, hv->k, ldq, 0.0f, P, nk);
        for (int i = 0; i < nq; i++)
            gptx_cpu_exp_row_causal(P + (size_t)i * nk, nk, t0 + i, hv->lsec[t0 + i]);
        // dV (nk, hs) += P^T @ dO_blk
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, P, nk, dO, ldo,
                    1.0f, hv->dv, ldq);
        // dP (nq, nk) = dO_blk @ V^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, hs, 1.0f, dO, ldo, hv->v,
                    ldq, 0.0f, dP, nk);
        // dS = P * (dP - D) * scale, D = dO . O per row
        for (int i = 0; i < nq; i++) {
            const float *o = hv->outc + (size_t)(t0 + i) * ldo;
            const float *g = dO + (size_t)i * ldo;
            float D = gptx_cpu_attn_dot(g, o, hs);
            float *ds = dP + (size_t)i * nk;
            const float *p = P + (size_t)i * nk;
            for (int s = 0; s < nk; s++) ds[s] = p[s] * (ds[s] - D) * scale;
        }
        // dQ_blk (nq, hs) = dS @ K; dK (nk, hs) += dS^T @ Q_blk
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, hs, nk, 1.0f, dP, nk, hv->k,
                    ldq, 0.0f, hv->dq + (size_t)t0 * ldq, ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hs, nq, 1.0f, dP, nk,
                    hv->q + (size_t)t0 * ldq, ldq, 1.0f, hv->dk, ldq);
    }
}

/* The fp32 head (b, h) of task: views into the model's own buffers. */
static head_view fp32_head(const attn_args *a, int task) {
    int C = a->C, T = a->T, NH = a->NH, hs = C / NH;
    int b = task / NH, h = task % NH;
    size_t qoff = (size_t)b * T * 3 * C + (size_t)h * hs, ooff = (size_t)b * T * C + (size_t)h * hs;
    size_t loff = ((size_t)b * NH + h) * T;
    head_view v = {.ld_qkv = 3 * (size_t)C, .ld_o = (size_t)C};
    if (a->qkv) v.q = a->qkv + qoff, v.k = v.q + C, v.v = v.q + 2 * C;
    if (a->dqkv) v.dq = a->dqkv + qoff, v.dk = v.dq + C, v.dv = v.dq + 2 * C;
    if (a->out) v.out = a->out + ooff;
    if (a->dout) v.dout = a->dout + ooff;
    if (a->outc) v.outc = a->outc + ooff;
    if (a->lse) v.lse = a->lse + loff;
    if (a->lsec) v.lsec = a->lsec + loff;
    return v;
}

static void attn_fwd_task(void *vp, int task) {
    attn_args *a = vp;
    head_view v = fp32_head(a, task);
    attn_fwd_head(&v, a->T, a->C / a->NH, a->scratch + (size_t)task * 2 * BLOCK * a->T);
}

static void attn_bwd_task(void *vp, int task) {
    attn_args *a = vp;
    head_view v = fp32_head(a, task);
    attn_bwd_head(&v, a->T, a->C / a->NH, a->scratch + (size_t)task * 2 * BLOCK * a->T);
}

/* Runs B*NH tasks with single-threaded products inside them. */
static int run_heads(gptx_backend *be, attn_args *a, gptx_task_fn fn) {
    int ntasks = a->B * a->NH;
    a->scratch = malloc((size_t)ntasks * 2 * BLOCK * a->T * sizeof(float));
    if (!a->scratch) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for attention scratch");
    /* tasks are (batch, head) pairs: the pool supplies the parallelism */
    int rc = gptx_cpu_blas_enter();
    if (rc == GPTX_OK) gptx_threadpool_run(be->pool, ntasks, fn, a);
    free(a->scratch);
    return rc;
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

/* ---- bf16 storage ----------------------------------------------------------------- */

#ifdef GPTX_HAVE_DNNL
/* Flash attention as on a GPU's tensor cores (FlashAttention-2, PyTorch's
 * SDPA): every tile product takes bf16 operands and accumulates in fp32 on
 * oneDNN's bf16 matmul, run on the task's own worker
 * (gptx_cpu_dnnl_matmul_worker: fixed tiles, so the bits do not depend on
 * the thread count). q, k, v, dout and out are read in place from the bf16
 * buffers. The scores, the softmax and its statistics (row max and sum, lse),
 * D = dO . O and the dK, dV accumulators stay fp32; the probabilities P are
 * rounded to bf16 before P V and P^T dO, dS before dS K and dS^T Q; out and
 * dq are rounded once from their products, dk and dv once from their fp32
 * accumulators. */
typedef struct {
    uint16_t *out, *dqkv;
    const uint16_t *qkv, *dout, *outc;
    float *lse;
    const float *lsec;
    int T, C, NH;
    gptx_backend *be;
    float *scratch;
    size_t per_worker;
    atomic_int status; /* first failing product's status, 0 = none */
} attn_bf16_args;

/* Per worker, in floats: S and dP (BLOCK, T), P and dS in bf16 (BLOCK, T
 * each), the fp32 dK and dV (T, hs), a row of dO and of O (hs each). */
static size_t bf16_per_worker(int T, int hs) {
    return 3 * (size_t)BLOCK * T + 2 * (size_t)T * hs + 2 * (size_t)hs;
}

/* C (M, N) [+]= A (M, K) B (K, N): element (i, j) of A at a[i * ar + j * ac],
 * of B at b[i * br + j * bc]; C fp32 or (c_f32 = 0) rounded once to bf16. */
static int tile_product(attn_bf16_args *a, int worker, int M, int N, int K, const uint16_t *A,
                        size_t ar, size_t ac, const uint16_t *B, size_t br, size_t bc, void *C,
                        size_t ldc, int c_f32, int accumulate) {
    gptx_cpu_matmul mm = {.M = M, .N = N, .K = K, .A = A, .a_row = ar, .a_col = ac, .B = B,
                          .b_row = br, .b_col = bc, .C = C, .ldc = ldc, .c_f32 = c_f32,
                          .accumulate = accumulate};
    int rc = gptx_cpu_dnnl_matmul_worker(a->be, worker, &mm);
    if (rc != GPTX_OK) {
        int none = 0;
        atomic_compare_exchange_strong(&a->status, &none, rc);
    }
    return rc;
}

/* rows (BLOCK rows of n) of p rounded to bf16 */
static void round_rows(uint16_t *dst, const float *p, int rows, int n) {
    gptx_cpu_bf16_narrow(dst, p, (size_t)rows * n);
}

static void attn_fwd_head_bf16(attn_bf16_args *a, int worker, const uint16_t *q, uint16_t *out,
                               float *lse, int hs, float *S, uint16_t *P) {
    int T = a->T;
    size_t ldq = 3 * (size_t)a->C, ldo = (size_t)a->C;
    const uint16_t *k = q + a->C, *v = q + 2 * (size_t)a->C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int t0 = 0; t0 < T; t0 += BLOCK) {
        int nq = T - t0 < BLOCK ? T - t0 : BLOCK, nk = t0 + nq;
        // S (nq, nk) = Q_blk @ K^T (fp32), then * scale
        if (tile_product(a, worker, nq, nk, hs, q + (size_t)t0 * ldq, ldq, 1, k, 1, ldq, S,
                         (size_t)nk, 1, 0) != GPTX_OK)
            return;
        for (int i = 0; i < nq; i++) {
            float *p = S + (size_t)i * nk;
            int t = t0 + i;
            for (int s = 0; s <= t; s++) p[s] *= scale;
            float mx = gptx_cpu_attn_row_max(p, t + 1);
            float sum = gptx_cpu_exp_row_causal(p, nk, t, mx), inv = 1.0f / sum;
            for (int s = 0; s <= t; s++) p[s] *= inv;
            lse[t] = mx + logf(sum);
        }
        round_rows(P, S, nq, nk);
        // O_blk (nq, hs) = bf16(P) @ V, rounded once into out
        if (tile_product(a, worker, nq, hs, nk, P, (size_t)nk, 1, v, ldq, 1,
                         out + (size_t)t0 * ldo, ldo, 0, 0) != GPTX_OK)
            return;
    }
}

static void attn_bwd_head_bf16(attn_bf16_args *a, int worker, const uint16_t *q, uint16_t *dq,
                               const uint16_t *dout, const uint16_t *outc, const float *lse,
                               int hs, float *S) {
    int T = a->T;
    size_t ldq = 3 * (size_t)a->C, ldo = (size_t)a->C, th = (size_t)T * hs;
    const uint16_t *k = q + a->C, *v = q + 2 * (size_t)a->C;
    float *dP = S + (size_t)BLOCK * T;
    uint16_t *P = (uint16_t *)(dP + (size_t)BLOCK * T), *dS = P + (size_t)BLOCK * T;
    float *dK = (float *)(dS + (size_t)BLOCK * T), *dV = dK + th, *gr = dV + th, *orow = gr + hs;
    float scale = 1.0f / sqrtf((float)hs);
    memset(dK, 0, 2 * th * sizeof(float));
    for (int t0 = 0; t0 < T; t0 += BLOCK) {
        int nq = T - t0 < BLOCK ? T - t0 : BLOCK, nk = t0 + nq;
        const uint16_t *dO = dout + (size_t)t0 * ldo;
        // P (nq, nk) = exp(Q_blk @ K^T * scale - lse), causal; fp32, and rounded
        if (tile_product(a, worker, nq, nk, hs, q + (size_t)t0 * ldq, ldq, 1, k, 1, ldq, S,
                         (size_t)nk, 1, 0) != GPTX_OK)
            return;
        for (int i = 0; i < nq; i++) {
            float *p = S + (size_t)i * nk;
            for (int s = 0; s <= t0 + i; s++) p[s] *= scale;
            gptx_cpu_exp_row_causal(p, nk, t0 + i, lse[t0 + i]);
        }
        round_rows(P, S, nq, nk);
        // dV (nk, hs) += bf16(P)^T @ dO_blk
        if (tile_product(a, worker, nk, hs, nq, P, 1, (size_t)nk, dO, ldo, 1, dV, (size_t)hs, 1,
                         1) != GPTX_OK)
            return;
        // dP (nq, nk) = dO_blk @ V^T
        if (tile_product(a, worker, nq, nk, hs, dO, ldo, 1, v, 1, ldq, dP, (size_t)nk, 1, 0) !=
            GPTX_OK)
            return;
        // dS = P * (dP - D) * scale with the fp32 P, D = dO . O per row; then rounded
        for (int i = 0; i < nq; i++) {
            gptx_cpu_bf16_widen(gr, dO + (size_t)i * ldo, (size_t)hs);
            gptx_cpu_bf16_widen(orow, outc + (size_t)(t0 + i) * ldo, (size_t)hs);
            float D = gptx_cpu_attn_dot(gr, orow, hs);
            float *ds = dP + (size_t)i * nk;
            const float *p = S + (size_t)i * nk;
            for (int s = 0; s < nk; s++) ds[s] = p[s] * (ds[s] - D) * scale;
        }
        round_rows(dS, dP, nq, nk);
        // dQ_blk (nq, hs) = bf16(dS) @ K, rounded once into dq
        if (tile_product(a, worker, nq, hs, nk, dS, (size_t)nk, 1, k, ldq, 1,
                         dq + (size_t)t0 * ldq, ldq, 0, 0) != GPTX_OK)
            return;
        // dK (nk, hs) += bf16(dS)^T @ Q_blk
        if (tile_product(a, worker, nk, hs, nq, dS, 1, (size_t)nk, q + (size_t)t0 * ldq, ldq, 1,
                         dK, (size_t)hs, 1, 1) != GPTX_OK)
            return;
    }
    for (int t = 0; t < T; t++) {
        gptx_cpu_bf16_narrow(dq + a->C + (size_t)t * ldq, dK + (size_t)t * hs, (size_t)hs);
        gptx_cpu_bf16_narrow(dq + 2 * (size_t)a->C + (size_t)t * ldq, dV + (size_t)t * hs,
                             (size_t)hs);
    }
}

static void attn_bf16_item(void *vp, int worker, size_t item, int backward) {
    attn_bf16_args *a = vp;
    if (atomic_load(&a->status) != 0) return; /* a product failed: the op fails */
    int C = a->C, T = a->T, NH = a->NH, hs = C / NH;
    int b = (int)item / NH, h = (int)item % NH;
    size_t qoff = (size_t)b * T * 3 * C + (size_t)h * hs, ooff = (size_t)b * T * C + (size_t)h * hs;
    size_t loff = ((size_t)b * NH + h) * T;
    float *S = a->scratch + (size_t)worker * a->per_worker;
    if (!backward)
        attn_fwd_head_bf16(a, worker, a->qkv + qoff, a->out + ooff, a->lse + loff, hs, S,
                           (uint16_t *)(S + 2 * (size_t)BLOCK * T));
    else
        attn_bwd_head_bf16(a, worker, a->qkv + qoff, a->dqkv + qoff, a->dout + ooff,
                           a->outc + ooff, a->lsec + loff, hs, S);
}

static void attn_fwd_bf16_item(void *vp, int worker, size_t item) {
    attn_bf16_item(vp, worker, item, 0);
}

static void attn_bwd_bf16_item(void *vp, int worker, size_t item) {
    attn_bf16_item(vp, worker, item, 1);
}

static int run_heads_bf16(gptx_backend *be, attn_bf16_args *a, int B, gptx_cpu_item_fn fn) {
    a->be = be;
    a->per_worker = bf16_per_worker(a->T, a->C / a->NH);
    a->scratch = gptx_cpu_scratch(be, (size_t)be->nthreads * a->per_worker * sizeof(float));
    if (!a->scratch) return GPTX_ERR_NO_MEMORY;
    atomic_init(&a->status, 0);
    GPTX_TRY(gptx_cpu_blas_enter());
    gptx_cpu_run_items(be, (size_t)B * a->NH, fn, a);
    int st = atomic_load(&a->status);
    if (st != 0) /* the worker's message stays on its thread */
        return GPTX_FAIL(st, "attention: a bf16 tile product failed (status %d)", st);
    return GPTX_OK;
}

int gptx_cpu_attention_forward_bf16(gptx_backend *be, float *out, float *lse, const float *qkv,
                                    int B, int T, int C, int NH) {
    attn_bf16_args a = {.out = (uint16_t *)out, .qkv = (const uint16_t *)qkv, .lse = lse,
                        .T = T, .C = C, .NH = NH};
    return run_heads_bf16(be, &a, B, attn_fwd_bf16_item);
}

int gptx_cpu_attention_backward_bf16(gptx_backend *be, float *dqkv, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH) {
    attn_bf16_args a = {.dqkv = (uint16_t *)dqkv, .qkv = (const uint16_t *)qkv,
                        .dout = (const uint16_t *)dout, .outc = (const uint16_t *)out,
                        .lsec = lse, .T = T, .C = C, .NH = NH};
    return run_heads_bf16(be, &a, B, attn_bwd_bf16_item);
}
#else
int gptx_cpu_attention_forward_bf16(gptx_backend *be, float *out, float *lse, const float *qkv,
                                    int B, int T, int C, int NH) {
    (void)be, (void)out, (void)lse, (void)qkv, (void)B, (void)T, (void)C, (void)NH;
    return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "this build of gptx has no oneDNN (GPTX_DNNL)");
}

int gptx_cpu_attention_backward_bf16(gptx_backend *be, float *dqkv, const float *dout,
                                     const float *qkv, const float *out, const float *lse, int B,
                                     int T, int C, int NH) {
    (void)be, (void)dqkv, (void)dout, (void)qkv, (void)out, (void)lse, (void)B, (void)T;
    (void)C, (void)NH;
    return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "this build of gptx has no oneDNN (GPTX_DNNL)");
}
#endif
