/* Attention over a key/value cache, for generation (backend.h
 * attention_kv_forward): the new rows' keys and values are stored in the
 * cache at their positions, then each new query attends over every cached
 * position up to its own.
 *
 * A prefill from position 0 runs the flash attention of training on the new
 * rows (the same bits as the full forward pass over them). Rows after
 * cached positions (decoding) run the direct form here: per (row, head), the
 * scores against every cached key, their softmax, the weighted sum of the
 * values; fp32 arithmetic on widened keys and values under the bf16
 * policies, the probabilities rounded to bf16 before the weighted sum (as
 * the training kernel's P V), one rounding of the output. Items are (row, head) pairs, each
 * computed by one worker: the result does not depend on the thread count. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_bf16.h"
#include "cpu_math.h"
#include "errors.h"

typedef struct {
    const void *qkv; /* (n, 3C) */
    void *out;       /* (n, C) */
    const void *kc, *vc; /* (NH, cap, hs) each */
    int n, pos0, cap, C, NH, bf16;
    float *scratch; /* per worker: kv_scratch_floats */
} kv_args;

/* per worker: the scores (cap), the query and the output (2 hs) */
static size_t kv_scratch_floats(int cap, int hs) { return (size_t)cap + 2 * (size_t)hs; }

/* s[j] = (q . K[j]) * scale for j < keys; K rows hs apart */
GPTX_CPU_HOT static void gptx_cpu_kv_scores(float *s, const float *q, const float *K, int keys,
                                            int hs, float scale) {
    for (int j = 0; j < keys; j++) {
        const float *k = K + (size_t)j * hs;
        float acc[GPTX_LANES] = {0};
        int d = 0;
        for (; d + GPTX_LANES <= hs; d += GPTX_LANES)
            for (int l = 0; l < GPTX_LANES; l++) acc[l] += q[d + l] * k[d + l];
        for (; d < hs; d++) acc[d % GPTX_LANES] += q[d] * k[d];
        s[j] = gptx_lanes_total(acc) * scale;
    }
}

/* The same two loops on bf16 keys and values, widened as they are read
 * (exact: the same products and sums as widening them first). */
GPTX_CPU_HOT static void gptx_cpu_kv_scores_bf16(float *s, const float *q, const uint16_t *K,
                                                 int keys, int hs, float scale) {
    for (int j = 0; j < keys; j++) {
        const uint16_t *k = K + (size_t)j * hs;
        float acc[GPTX_LANES] = {0};
        int d = 0;
        for (; d + GPTX_LANES <= hs; d += GPTX_LANES)
            for (int l = 0; l < GPTX_LANES; l++) acc[l] += q[d + l] * gptx_cpu_bf16_to_f32(k[d + l]);
        for (; d < hs; d++) acc[d % GPTX_LANES] += q[d] * gptx_cpu_bf16_to_f32(k[d]);
        s[j] = gptx_lanes_total(acc) * scale;
    }
}

GPTX_CPU_HOT static void gptx_cpu_kv_weighted_bf16(float *o, const float *p, const uint16_t *V,
                                                   int keys, int hs) {
    memset(o, 0, (size_t)hs * sizeof *o);
    for (int j = 0; j < keys; j++) {
        const uint16_t *v = V + (size_t)j * hs;
        for (int d = 0; d < hs; d++) o[d] += p[j] * gptx_cpu_bf16_to_f32(v[d]);
    }
}

/* s[j] = exp(s[j] - shift) for j < n; returns the sum */
GPTX_CPU_HOT static float gptx_cpu_kv_exp(float *s, int n, float shift) {
    float acc[GPTX_LANES] = {0};
    int j = 0;
    for (; j + GPTX_LANES <= n; j += GPTX_LANES)
        for (int k = 0; k < GPTX_LANES; k++) acc[k] += s[j + k] = gptx_expf(s[j + k] - shift);
    for (; j < n; j++) acc[j % GPTX_LANES] += s[j] = gptx_expf(s[j] - shift);
    return gptx_lanes_total(acc);
}

/* o (hs) = sum over j < keys of p[j] V[j], in key order */
GPTX_CPU_HOT static void gptx_cpu_kv_weighted(float *o, const float *p, const float *V, int keys,
                                              int hs) {
    memset(o, 0, (size_t)hs * sizeof *o);
    for (int j = 0; j < keys; j++) {
        const float *v = V + (size_t)j * hs;
        for (int d = 0; d < hs; d++) o[d] += p[j] * v[d];
    }
}

/* n elements of a cache or qkv buffer from element `at`, as fp32 */
static const float *as_f32(const kv_args *a, const void *base, size_t at, size_t n, float *buf) {
    if (!a->bf16) return (const float *)base + at;
    gptx_cpu_bf16_widen(buf, (const uint16_t *)base + at, n);
    return buf;
}

static void kv_item(void *vp, int worker, size_t item) {
    const kv_args *a = vp;
    int C = a->C, NH = a->NH, hs = C / NH, cap = a->cap;
    int i = (int)(item / (size_t)NH), h = (int)(item % (size_t)NH);
    int keys = a->pos0 + i + 1; /* causal: positions 0 .. pos0 + i */
    float *s = a->scratch + (size_t)worker * kv_scratch_floats(cap, hs);
    float *qb = s + cap, *o = qb + hs;
    const float *q = as_f32(a, a->qkv, (size_t)i * 3 * C + (size_t)h * hs, (size_t)hs, qb);
    size_t head = (size_t)h * cap * hs;
    float scale = 1.0f / sqrtf((float)hs);
    if (a->bf16)
        gptx_cpu_kv_scores_bf16(s, q, (const uint16_t *)a->kc + head, keys, hs, scale);
    else
        gptx_cpu_kv_scores(s, q, (const float *)a->kc + head, keys, hs, scale);
    float mx = s[0];
    for (int j = 1; j < keys; j++) mx = s[j] > mx ? s[j] : mx;
    float inv = 1.0f / gptx_cpu_kv_exp(s, keys, mx);
    if (a->bf16) { /* P normalized and rounded to bf16 before P V, as the training kernel */
        for (int j = 0; j < keys; j++)
            s[j] = gptx_cpu_bf16_to_f32(gptx_cpu_f32_to_bf16(s[j] * inv));
        gptx_cpu_kv_weighted_bf16(o, s, (const uint16_t *)a->vc + head, keys, hs);
    } else {
        gptx_cpu_kv_weighted(o, s, (const float *)a->vc + head, keys, hs);
        for (int d = 0; d < hs; d++) o[d] *= inv;
    }
    size_t dst = (size_t)i * C + (size_t)h * hs;
    if (a->bf16)
        gptx_cpu_bf16_narrow((uint16_t *)a->out + dst, o, (size_t)hs);
    else
        memcpy((float *)a->out + dst, o, (size_t)hs * sizeof *o);
}

int gptx_cpu_attention_kv_forward(gptx_backend *be, float *out, float *lse, const float *qkv,
                                  float *kcache, float *vcache, int n, int pos0, int cap, int C,
                                  int NH) {
    if (n <= 0 || pos0 < 0 || pos0 + n > cap || C % NH != 0)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "attention_kv_forward: rows %d at position %d of a cache "
                                         "of %d (C %d, NH %d)",
                         n, pos0, cap, C, NH);
    int hs = C / NH;
    size_t esz = be->act_bf16 ? 2 : 4;
    /* the new rows' keys and values at positions pos0 .. pos0 + n - 1 */
    for (int i = 0; i < n; i++)
        for (int h = 0; h < NH; h++) {
            size_t src = ((size_t)i * 3 * C + (size_t)C + (size_t)h * hs) * esz;
            size_t dst = ((size_t)h * cap + (size_t)(pos0 + i)) * hs * esz;
            memcpy((char *)kcache + dst, (const char *)qkv + src, (size_t)hs * esz);
            memcpy((char *)vcache + dst, (const char *)qkv + src + (size_t)C * esz,
                   (size_t)hs * esz);
        }
    if (pos0 == 0) /* nothing cached before these rows: the training kernel */
        return be->act_bf16 ? gptx_cpu_attention_forward_bf16(be, out, lse, qkv, 1, n, C, NH)
                            : gptx_cpu_attention_forward(be, out, lse, qkv, 1, n, C, NH);
    float *scratch =
        gptx_cpu_scratch(be, (size_t)be->nthreads * kv_scratch_floats(cap, hs) * sizeof(float));
    if (!scratch) return GPTX_ERR_NO_MEMORY;
    kv_args a = {qkv, out, kcache, vcache, n, pos0, cap, C, NH, be->act_bf16, scratch};
    gptx_cpu_run_items(be, (size_t)n * NH, kv_item, &a);
    return GPTX_OK;
}
