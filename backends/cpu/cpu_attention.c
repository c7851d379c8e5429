/* Causal self-attention, flash style: the forward pass keeps only each query
 * row's log-sum-exp; the backward pass recomputes the probabilities one row
 * at a time. Nothing of size (B, NH, T, T) is ever stored, so activation
 * memory grows linearly with T (scratch: one row of T floats per task). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "errors.h"

typedef struct {
    float *out, *lse, *dqkv;
    const float *qkv, *dout, *outc, *lsec;
    int B, T, C, NH;
    float *scratch; /* ntasks * T floats */
    int ntasks_per_bh; /* forward: row blocks per (b, h) */
} attn_args;

static inline float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Task = (b, h, block of query rows). */
static void attn_fwd_task(void *vp, int task) {
    attn_args *a = vp;
    int C = a->C, C3 = 3 * C, T = a->T, hs = C / a->NH;
    int bh = task / a->ntasks_per_bh, blk = task % a->ntasks_per_bh;
    int b = bh / a->NH, h = bh % a->NH;
    size_t lo, hi;
    gptx_cpu_split((size_t)T, a->ntasks_per_bh, blk, &lo, &hi);
    float *p = a->scratch + (size_t)task * T;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = a->qkv + (size_t)b * T * C3;
    for (size_t t = lo; t < hi; t++) {
        const float *q = base + t * C3 + h * hs;
        float mx = -INFINITY;
        for (size_t s = 0; s <= t; s++) {
            const float *k = base + s * C3 + C + h * hs;
            p[s] = dot(q, k, hs) * scale;
            mx = p[s] > mx ? p[s] : mx;
        }
        float sum = 0.0f;
        for (size_t s = 0; s <= t; s++) {
            p[s] = expf(p[s] - mx);
            sum += p[s];
        }
        float inv = 1.0f / sum;
        float *o = a->out + ((size_t)b * T + t) * C + h * hs;
        memset(o, 0, (size_t)hs * sizeof *o);
        for (size_t s = 0; s <= t; s++) {
            const float *v = base + s * C3 + 2 * C + h * hs;
            float w = p[s] * inv;
            for (int i = 0; i < hs; i++) o[i] += w * v[i];
        }
        a->lse[((size_t)b * a->NH + h) * T + t] = mx + logf(sum);
    }
}

int gptx_cpu_attention_forward(gptx_backend *be, float *out, float *lse, const float *qkv, int B,
                               int T, int C, int NH) {
    int nbh = B * NH;
    /* enough tasks to keep every thread busy even when B*NH is small */
    int per = (be->nthreads * 4 + nbh - 1) / nbh;
    if (per > T) per = T;
    if (per < 1) per = 1;
    int ntasks = nbh * per;
    float *scratch = malloc((size_t)ntasks * T * sizeof *scratch);
    if (!scratch) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for attention scratch");
    attn_args a = {.out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .C = C, .NH = NH,
                   .scratch = scratch, .ntasks_per_bh = per};
    gptx_threadpool_run(be->pool, ntasks, attn_fwd_task, &a);
    free(scratch);
    return GPTX_OK;
}

/* Task = one (b, h): dk and dv accumulate over query rows in order. */
static void attn_bwd_task(void *vp, int task) {
    attn_args *a = vp;
    int C = a->C, C3 = 3 * C, T = a->T, hs = C / a->NH;
    int b = task / a->NH, h = task % a->NH;
    float *p = a->scratch + (size_t)task * T;
    float scale = 1.0f / sqrtf((float)hs);
    const float *base = a->qkv + (size_t)b * T * C3;
    float *dbase = a->dqkv + (size_t)b * T * C3;
    for (int t = 0; t < T; t++) {
        float *dq = dbase + (size_t)t * C3 + h * hs;
        memset(dq, 0, (size_t)hs * sizeof *dq);
        memset(dbase + (size_t)t * C3 + C + h * hs, 0, (size_t)hs * sizeof(float));
        memset(dbase + (size_t)t * C3 + 2 * C + h * hs, 0, (size_t)hs * sizeof(float));
    }
    for (int t = 0; t < T; t++) {
        const float *q = base + (size_t)t * C3 + h * hs;
        const float *dout = a->dout + ((size_t)b * T + t) * C + h * hs;
        const float *o = a->outc + ((size_t)b * T + t) * C + h * hs;
        float *dq = dbase + (size_t)t * C3 + h * hs;
        float lse = a->lsec[((size_t)b * a->NH + h) * T + t];
        /* D = sum_s p_s * (dout . v_s) = dout . out */
        float D = dot(dout, o, hs);
        for (int s = 0; s <= t; s++) {
            const float *k = base + (size_t)s * C3 + C + h * hs;
            const float *v = base + (size_t)s * C3 + 2 * C + h * hs;
            float pr = expf(dot(q, k, hs) * scale - lse);
            float *dv = dbase + (size_t)s * C3 + 2 * C + h * hs;
            for (int i = 0; i < hs; i++) dv[i] += pr * dout[i];
            p[s] = pr * (dot(dout, v, hs) - D) * scale; /* dscore, pre-scaled */
        }
        for (int s = 0; s <= t; s++) {
            const float *k = base + (size_t)s * C3 + C + h * hs;
            float *dk = dbase + (size_t)s * C3 + C + h * hs;
            float ds = p[s];
            for (int i = 0; i < hs; i++) {
                dq[i] += ds * k[i];
                dk[i] += ds * q[i];
            }
        }
    }
}

int gptx_cpu_attention_backward(gptx_backend *be, float *dqkv, const float *dout,
                                const float *qkv, const float *out, const float *lse, int B,
                                int T, int C, int NH) {
    int ntasks = B * NH;
    float *scratch = malloc((size_t)ntasks * T * sizeof *scratch);
    if (!scratch) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for attention scratch");
    attn_args a = {.dqkv = dqkv, .qkv = qkv, .dout = dout, .outc = out, .lsec = lse, .B = B,
                   .T = T, .C = C, .NH = NH, .scratch = scratch};
    gptx_threadpool_run(be->pool, ntasks, attn_bwd_task, &a);
    free(scratch);
    return GPTX_OK;
}
