/* Naive causal attention, the textbook formulation: scores for the full
 * (T, T) square per head from one matrix product, an additive float causal
 * mask, a row softmax, and the probabilities (B, NH, T, T) kept for
 * backward. Same function as the flash-style kernels in cpu_attention.c;
 * used by the ablation benchmark to show what the fused path saves in time
 * and memory. Matrix products go through OpenBLAS with strided heads. */
#include <math.h>
#include <string.h>

#include "../cpu_kernels.h"
#include "errors.h"

typedef struct {
    float *att;
    const float *mask;
    int T, ntasks;
    size_t rows;
} softmax_args;

/* att rows: att = softmax(att + mask) in place */
static void softmax_task(void *vp, int task) {
    softmax_args *a = vp;
    size_t lo, hi, T = (size_t)a->T;
    gptx_cpu_split(a->rows, a->ntasks, task, &lo, &hi);
    for (size_t r = lo; r < hi; r++) {
        float *row = a->att + r * T;
        const float *m = a->mask + (r % T) * T;
        float mx = -INFINITY;
        for (size_t s = 0; s < T; s++) {
            row[s] += m[s];
            mx = row[s] > mx ? row[s] : mx;
        }
        float sum = 0.0f;
        for (size_t s = 0; s < T; s++) sum += row[s] = expf(row[s] - mx);
        for (size_t s = 0; s < T; s++) row[s] /= sum;
    }
}

int gptx_cpu_attention_naive_forward(gptx_backend *be, float *out, float *att, const float *mask,
                                     const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            float *S = att + ((size_t)b * NH + h) * T * T;
            // (T, hs) @ (T, hs)^T -> (T, T), every entry, the masked ones too
            GPTX_TRY(gptx_cpu_sgemm(be, 0, 1, T, T, hs, scale, q, C3, q + C, C3, 0.0f, S, T));
        }
    softmax_args sa = {att, mask, T, 0, (size_t)B * NH * T};
    sa.ntasks = gptx_cpu_ntasks(be, sa.rows);
    gptx_threadpool_run(be->pool, sa.ntasks, softmax_task, &sa);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            // (T, T) @ (T, hs) -> (T, hs) into the head's columns of out
            GPTX_TRY(gptx_cpu_sgemm(be, 0, 0, T, hs, T, 1.0f, P, T, v, C3, 0.0f,
                                    out + (size_t)b * T * C + h * hs, C));
        }
    return GPTX_OK;
}

typedef struct {
    float *datt;
    const float *att;
    int T, ntasks;
    size_t rows;
} dsoftmax_args;

/* datt = att * (datt - sum_s att * datt), per row */
static void dsoftmax_task(void *vp, int task) {
    dsoftmax_args *a = vp;
    size_t lo, hi, T = (size_t)a->T;
    gptx_cpu_split(a->rows, a->ntasks, task, &lo, &hi);
    for (size_t r = lo; r < hi; r++) {
        float *d = a->datt + r * T;
        const float *p = a->att + r * T;
        float dot = 0.0f;
        for (size_t s = 0; s < T; s++) dot += p[s] * d[s];
        for (size_t s = 0; s < T; s++) d[s] = p[s] * (d[s] - dot);
    }
}

int gptx_cpu_attention_naive_backward(gptx_backend *be, float *dqkv, float *datt,
                                      const float *dout, const float *qkv, const float *att,
                                      int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;
            const float *P = att + ((size_t)b * NH + h) * T * T;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            float *dP = datt + ((size_t)b * NH + h) * T * T;
            float *dv = dqkv + (size_t)b * T * C3 + 2 * C + h * hs;
            // dV = P^T @ dO: (T, T)^T @ (T, hs)
            GPTX_TRY(gptx_cpu_sgemm(be, 1, 0, T, hs, T, 1.0f, P, T, dO, C, 0.0f, dv, C3));
            // dP = dO @ V^T: (T, hs) @ (T, hs)^T
            GPTX_TRY(gptx_cpu_sgemm(be, 0, 1, T, T, hs, 1.0f, dO, C, v, C3, 0.0f, dP, T));
        }
    dsoftmax_args da = {datt, att, T, 0, (size_t)B * NH * T};
    da.ntasks = gptx_cpu_ntasks(be, da.rows);
    gptx_threadpool_run(be->pool, da.ntasks, dsoftmax_task, &da);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * C3 + h * hs, *k = q + C;
            const float *dS = datt + ((size_t)b * NH + h) * T * T;
            float *dq = dqkv + (size_t)b * T * C3 + h * hs, *dk = dq + C;
            // dQ = dS @ K * scale, dK = dS^T @ Q * scale
            GPTX_TRY(gptx_cpu_sgemm(be, 0, 0, T, hs, T, scale, dS, T, k, C3, 0.0f, dq, C3));
            GPTX_TRY(gptx_cpu_sgemm(be, 1, 0, T, hs, T, scale, dS, T, q, C3, 0.0f, dk, C3));
        }
    return GPTX_OK;
}
