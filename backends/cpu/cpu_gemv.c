/* Products of one row with a weight matrix, out (OC) = w (OC, C) x (C) +
 * bias: the shape of every product while a model generates one token at a
 * time. There the weights are read once per token, so the speed is the
 * memory's: a general matrix product with one row packs the weights first
 * (OpenBLAS sgemm with M = 1 read them at 4-5 GB/s on one core, sgemv at
 * 11), so these run matrix-vector kernels instead.
 *
 * The rows of w are cut into blocks of a fixed size, one pool item each:
 * every output is one dot product over the full C by one worker, the same
 * bits for any thread count. fp32: single-threaded OpenBLAS sgemv per
 * block. bf16: a dot product of widened weights with the widened row in
 * GPTX_LANES lanes, fp32 output (the caller rounds it once); an AVX-512 form
 * of the same arithmetic where the CPU has it (the same bits: test_attention_kv). */
#include <cblas.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cpu_bf16.h"
#include "cpu_math.h"
#include "errors.h"

#define GEMV_ROWS 128 /* rows of w per item */

typedef struct {
    float *out;
    const float *x;       /* (C) fp32 */
    const void *w, *bias; /* fp32, or bf16 */
    int C, OC;
} gemv_args;

static void gemv_f32_item(void *vp, int worker, size_t item) {
    (void)worker;
    const gemv_args *a = vp;
    int r0 = (int)item * GEMV_ROWS, rows = a->OC - r0 < GEMV_ROWS ? a->OC - r0 : GEMV_ROWS;
    const float *w = (const float *)a->w + (size_t)r0 * a->C;
    float beta = 0.0f;
    if (a->bias) { /* bias + the product, as the sgemm path adds them */
        memcpy(a->out + r0, (const float *)a->bias + r0, (size_t)rows * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemv(CblasRowMajor, CblasNoTrans, rows, a->C, 1.0f, w, a->C, a->x, 1, beta, a->out + r0,
                1);
}

int gptx_cpu_gemv(gptx_backend *be, float *out, const float *x, const float *w, const float *bias,
                  int C, int OC) {
    GPTX_TRY(gptx_cpu_blas_enter());
    gemv_args a = {out, x, w, bias, C, OC};
    gptx_cpu_run_items(be, ((size_t)OC + GEMV_ROWS - 1) / GEMV_ROWS, gemv_f32_item, &a);
    return GPTX_OK;
}

/* Row r's dot product, lane k summing the products of columns c with
 * c % GPTX_LANES == k in column order, the lanes then added in order; the
 * bias last. The AVX-512 form below computes exactly this. */
GPTX_CPU_HOT static void gptx_cpu_gemv_bf16_rows(float *out, const float *x, const uint16_t *w,
                                                 const uint16_t *bias, int C, int r0, int r1) {
    for (int r = r0; r < r1; r++) {
        const uint16_t *wr = w + (size_t)r * C;
        float acc[GPTX_LANES] = {0};
        int c = 0;
        for (; c + GPTX_LANES <= C; c += GPTX_LANES)
            for (int k = 0; k < GPTX_LANES; k++) acc[k] += gptx_cpu_bf16_to_f32(wr[c + k]) * x[c + k];
        for (; c < C; c++) acc[c % GPTX_LANES] += gptx_cpu_bf16_to_f32(wr[c]) * x[c];
        float s = gptx_lanes_total(acc);
        out[r] = bias ? s + gptx_cpu_bf16_to_f32(bias[r]) : s;
    }
}

void gptx_cpu_gemv_bf16_reference(float *out, const float *x, const uint16_t *w,
                                  const uint16_t *bias, int C, int OC) {
    gptx_cpu_gemv_bf16_rows(out, x, w, bias, C, 0, OC);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(GPTX_NO_MULTIVERSION)
#include <immintrin.h>
#define GPTX_GEMV_AVX512 1
/* The same sums, two rows at a time in 16-lane registers with the rows
 * ahead prefetched: the compiler's clone of the loop above used 8-lane
 * registers and one row, and read the weights at ~10 GB/s where this reads
 * 15-20 (2 cores, Sapphire Rapids). Multiplies and adds stay separate (no
 * FMA), so every lane rounds as in the C loop. */
__attribute__((target("avx512f"))) static void gemv_bf16_rows_avx512(float *out, const float *x,
                                                                    const uint16_t *w,
                                                                    const uint16_t *bias, int C,
                                                                    int r0, int r1) {
    int full = C / GPTX_LANES * GPTX_LANES;
    for (int r = r0; r < r1; r += 2) {
        int two = r + 1 < r1;
        const uint16_t *w0 = w + (size_t)r * C, *w1 = two ? w0 + C : w0;
        if (r + 6 < r1)
            for (int c = 0; c < 2 * C; c += 32) __builtin_prefetch(w0 + 6 * (size_t)C + c);
        __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
        for (int c = 0; c < full; c += GPTX_LANES) {
            __m512 xv = _mm512_loadu_ps(x + c);
            __m512i u0 = _mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w0 + c))), 16);
            __m512i u1 = _mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w1 + c))), 16);
            a0 = _mm512_add_ps(a0, _mm512_mul_ps(_mm512_castsi512_ps(u0), xv));
            a1 = _mm512_add_ps(a1, _mm512_mul_ps(_mm512_castsi512_ps(u1), xv));
        }
        float acc[2][GPTX_LANES];
        _mm512_storeu_ps(acc[0], a0);
        _mm512_storeu_ps(acc[1], a1);
        for (int i = 0; i <= two; i++) {
            const uint16_t *wr = i ? w1 : w0;
            for (int c = full; c < C; c++) acc[i][c % GPTX_LANES] += gptx_cpu_bf16_to_f32(wr[c]) * x[c];
            float s = gptx_lanes_total(acc[i]);
            out[r + i] = bias ? s + gptx_cpu_bf16_to_f32(bias[r + i]) : s;
        }
    }
}
#endif

static void gemv_bf16_item(void *vp, int worker, size_t item) {
    (void)worker;
    const gemv_args *a = vp;
    int r0 = (int)item * GEMV_ROWS, r1 = r0 + GEMV_ROWS < a->OC ? r0 + GEMV_ROWS : a->OC;
#ifdef GPTX_GEMV_AVX512
    if (__builtin_cpu_supports("avx512f")) {
        gemv_bf16_rows_avx512(a->out, a->x, a->w, a->bias, a->C, r0, r1);
        return;
    }
#endif
    gptx_cpu_gemv_bf16_rows(a->out, a->x, a->w, a->bias, a->C, r0, r1);
}

int gptx_cpu_gemv_bf16(gptx_backend *be, float *out, const float *x, const uint16_t *w,
                       const uint16_t *bias, int C, int OC) {
    gemv_args a = {out, x, w, bias, C, OC};
    gptx_cpu_run_items(be, ((size_t)OC + GEMV_ROWS - 1) / GEMV_ROWS, gemv_bf16_item, &a);
    return GPTX_OK;
}
