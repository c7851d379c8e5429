/* Shared by the tests that drive the CPU backend's table directly
 * (test_cpu_bf16, test_attention_kv): a backend of a given precision and
 * thread count, and random fp32 and bf16 tensors. Include after check.h. */
#ifndef GPTX_TESTS_CPU_BACKEND_UTIL_H
#define GPTX_TESTS_CPU_BACKEND_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_bf16.h"

#define SKIP_EXIT 77

typedef uint16_t bf16;

static const gptx_backend_ops *ops; /* set by main: gptx_cpu_backend_ops() */

static uint32_t rng = 2024u;
static inline float frand(void) { /* [-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) * (1.0 / 8388608.0) - 1.0);
}

static inline gptx_backend *make_backend(int precision, int threads) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.precision = precision;
    o.num_threads = threads;
    gptx_backend *be = NULL;
    if (ops->create(&be, &o) != GPTX_OK) {
        fprintf(stderr, "backend: %s\n", gptx_last_error());
        exit(1);
    }
    return be;
}

/* A bf16 tensor and its exact fp32 widening. */
typedef struct {
    bf16 *h;
    float *f;
    size_t n;
} pair;

static inline pair pair_rand(size_t n, float scale) {
    pair p = {malloc(n * sizeof(bf16)), malloc(n * sizeof(float)), n};
    for (size_t i = 0; i < n; i++) {
        p.h[i] = gptx_cpu_f32_to_bf16(frand() * scale);
        p.f[i] = gptx_cpu_bf16_to_f32(p.h[i]);
    }
    return p;
}

static inline void pair_free(pair *p) {
    free(p->h);
    free(p->f);
}

static inline float *floats_rand(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static inline float *floats_copy(const float *s, size_t n) {
    float *p = malloc(n * sizeof *p);
    memcpy(p, s, n * sizeof *p);
    return p;
}

#endif
