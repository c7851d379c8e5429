/* lib/core/bf16_round.h: round to nearest even agrees with the checkpoint
 * converter; stochastic rounding keeps exact values, is unbiased, and is
 * reproducible per (seed, step, index); and the reason it exists: a
 * parameter stored in bf16 that receives an update far below half an ulp
 * every step never moves with round-to-nearest, while with stochastic
 * rounding it follows the fp32 trajectory in expectation. (The update is
 * fixed here to isolate the rounding; the CUDA pure-bf16 policy's AdamW uses
 * these helpers, tested at the model level by test_cuda_pure.) */
#include <math.h>
#include <stdio.h>

#include "bf16_round.h"
#include "check.h"
#include "safetensors.h"

static void test_nearest(void) {
    int bad = 0;
    uint32_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 1664525u + 1013904223u;
        float x;
        memcpy(&x, &s, 4);
        if (isnan(x)) continue;
        bad += gptx_bf16_round_nearest(x) != gptx_f32_to_bf16(x);
    }
    CHECK(bad == 0);
    CHECK(gptx_bf16_round_nearest(1.0f + 0x1p-8f) == 0x3f80); /* tie to even */
    CHECK(gptx_bf16_round_nearest(1.0f + 3 * 0x1p-8f) == 0x3f82);
    CHECK(isnan(gptx_bf16_widen(gptx_bf16_round_nearest(NAN))));
}

static void test_stochastic(void) {
    /* exact values and infinities never move, whatever the bits */
    float exact[] = {1.0f, -3.5f, 0.0f, 0x1p-100f, INFINITY, -INFINITY};
    for (int i = 0; i < 6; i++)
        for (uint32_t r = 0; r < 65536; r += 4093)
            CHECK(gptx_bf16_widen(gptx_bf16_round_stochastic(exact[i], r)) == exact[i]);
    CHECK(isnan(gptx_bf16_widen(gptx_bf16_round_stochastic(NAN, 0xffffu))));
    /* 1 + 0.3 ulp (ulp 2^-7 at 1): rounds up 30 % of the time, both
     * neighbours only, mean = x */
    float x = 1.0f + 0.3f * 0x1p-7f, lo = 1.0f, hi = 1.0f + 0x1p-7f;
    int n = 100000, up = 0, other = 0;
    double mean = 0;
    for (int i = 0; i < n; i++) {
        float y = gptx_bf16_widen(gptx_bf16_round_stochastic(x, gptx_bf16_sr_bits(7, 1, i)));
        up += y == hi;
        other += y != hi && y != lo;
        mean += y;
    }
    mean /= n;
    printf("stochastic rounding of 1 + 0.3 ulp: up %.4f (expect 0.3), mean - x %.2e\n",
           (double)up / n, mean - x);
    CHECK(other == 0);
    CHECK(fabs((double)up / n - 0.3) < 0.01);
    CHECK(fabs(mean - x) < 2e-5);
    /* negative values: symmetric */
    float yn = gptx_bf16_widen(gptx_bf16_round_stochastic(-x, 0xffffu));
    CHECK(yn == -hi);
    CHECK(gptx_bf16_widen(gptx_bf16_round_stochastic(-x, 0)) == -lo);
}

/* N parameters at 1.0, each step w -= 1e-4 (0.013 ulp below 1.0): fp32
 * reaches 1 - steps * 1e-4; bf16 with round-to-nearest stays at 1.0. */
static void test_small_updates(void) {
    enum { N = 4096, STEPS = 200 };
    static uint16_t rn[N], sr[N], sr2[N];
    for (int i = 0; i < N; i++) rn[i] = sr[i] = sr2[i] = gptx_bf16_round_nearest(1.0f);
    float f32 = 1.0f;
    for (int t = 1; t <= STEPS; t++) {
        f32 -= 1e-4f;
        for (int i = 0; i < N; i++) {
            rn[i] = gptx_bf16_round_nearest(gptx_bf16_widen(rn[i]) - 1e-4f);
            sr[i] = gptx_bf16_round_stochastic(gptx_bf16_widen(sr[i]) - 1e-4f,
                                               gptx_bf16_sr_bits(42, (uint64_t)t, (uint64_t)i));
            sr2[i] = gptx_bf16_round_stochastic(gptx_bf16_widen(sr2[i]) - 1e-4f,
                                                gptx_bf16_sr_bits(42, (uint64_t)t, (uint64_t)i));
        }
    }
    double mrn = 0, msr = 0;
    for (int i = 0; i < N; i++) {
        mrn += gptx_bf16_widen(rn[i]);
        msr += gptx_bf16_widen(sr[i]);
    }
    mrn /= N;
    msr /= N;
    printf("after %d updates of -1e-4: fp32 %.6f, bf16 nearest %.6f, bf16 stochastic mean %.6f\n",
           STEPS, (double)f32, mrn, msr);
    CHECK(mrn == 1.0);                       /* every update lost */
    CHECK(fabs(msr - (double)f32) < 1e-3);   /* kept in expectation */
    CHECK(memcmp(sr, sr2, sizeof sr) == 0);  /* same keys, same bits */
    CHECK(gptx_bf16_sr_bits(42, 3, 5) != gptx_bf16_sr_bits(43, 3, 5));
    CHECK(gptx_bf16_sr_bits(42, 3, 5) != gptx_bf16_sr_bits(42, 4, 5));
}

int main(void) {
    test_nearest();
    test_stochastic();
    test_small_updates();
    return check_exit("test_bf16_round");
}
