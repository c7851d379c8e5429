/* The CPU backend's hot loops run as AVX-512, AVX2 or baseline clones
 * (GPTX_CPU_HOT, backends/cpu/cpu_math.h), chosen by the CPU at load time.
 * They must give the same bits, or results would change from one machine to
 * the next. This test compiles the same loops (exp, tanh, a 16-lane sum) for
 * each instruction set this CPU has, with FMA allowed, under the library's
 * floating-point flags, and compares every output bit with the baseline. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "cpu_math.h"

#define N (1 << 20)
#define LANES 16

#define DEFINE_KERNELS(suffix, attr)                                                 \
    attr static void exp_tanh_##suffix(const float *x, float *e, float *t, int n) {  \
        for (int i = 0; i < n; i++) {                                                \
            e[i] = gptx_expf(x[i]);                                                  \
            t[i] = gptx_tanhf(x[i]);                                                 \
        }                                                                            \
    }                                                                                \
    attr static float lane_sum_##suffix(const float *x, int n) {                     \
        float acc[LANES] = {0};                                                      \
        int j = 0;                                                                   \
        for (; j + LANES <= n; j += LANES)                                           \
            for (int k = 0; k < LANES; k++) acc[k] += x[j + k] * 1.5f + 0.25f;       \
        float s = 0.0f;                                                              \
        for (int k = 0; k < LANES; k++) s += acc[k];                                 \
        return s;                                                                    \
    }

DEFINE_KERNELS(base, )
DEFINE_KERNELS(avx2, __attribute__((target("avx2,fma"))))
DEFINE_KERNELS(avx512, __attribute__((target("avx512f,fma"))))

static float x[N], e0[N], t0[N], e1[N], t1[N];

static void compare(const char *isa, float s0, float s1) {
    size_t bad = 0;
    for (int i = 0; i < N; i++)
        if (memcmp(&e0[i], &e1[i], 4) || memcmp(&t0[i], &t1[i], 4)) {
            if (bad++ < 3)
                fprintf(stderr, "%s: x=%a exp %a vs %a, tanh %a vs %a\n", isa, (double)x[i],
                        (double)e0[i], (double)e1[i], (double)t0[i], (double)t1[i]);
        }
    CHECK(bad == 0);
    CHECK(memcmp(&s0, &s1, sizeof s0) == 0);
    printf("%s: %zu of %d exp/tanh values differ from the baseline; lane sum %s\n", isa, bad, N,
           memcmp(&s0, &s1, sizeof s0) ? "differs" : "equal");
}

int main(void) {
    uint32_t r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        x[i] = ((float)(r >> 8) / 16777216.0f - 0.5f) * 200.0f; /* [-100, 100] */
    }
    const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-40f,
                              -87.0f, -87.5f, 88.0f, 88.7f, 1e-8f, -1e-8f};
    memcpy(x, specials, sizeof specials);

    exp_tanh_base(x, e0, t0, N);
    float s0 = lane_sum_base(x + 64, N - 64);
    int ran = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        exp_tanh_avx2(x, e1, t1, N);
        compare("avx2", s0, lane_sum_avx2(x + 64, N - 64));
        ran++;
    }
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) {
        exp_tanh_avx512(x, e1, t1, N);
        compare("avx512f", s0, lane_sum_avx512(x + 64, N - 64));
        ran++;
    }
    if (!ran) {
        printf("this CPU has neither AVX2 nor AVX-512: nothing to compare\n");
        return 77;
    }
    return check_exit("test_cpu_math_isa");
}
