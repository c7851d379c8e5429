/* Shared set-up for unit tests: a CPU context and a small model. */
#ifndef GPTX_TEST_UTIL_H
#define GPTX_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "gptx/gptx.h"

static inline int make_cpu_context(gptx_context **ctx, int threads) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = threads;
    o.deterministic = 1;
    return gptx_context_create(ctx, &o);
}

/* A 2-thread CPU context under a precision policy; a failure counts as a
 * failed check (message printed) and gives NULL. */
static inline gptx_context *make_policy_context(int precision) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 2;
    o.precision = precision;
    gptx_context *ctx = NULL;
    if (gptx_context_create(&ctx, &o) != GPTX_OK) {
        fprintf(stderr, "context: %s\n", gptx_last_error());
        check_failures++;
    }
    return ctx;
}

/* A sampler with these options; a failure to create it counts as a failed check. */
static inline gptx_sampler *make_sampler(float temperature, int top_k, float top_p,
                                         uint64_t seed) {
    gptx_sampler_options o;
    gptx_sampler_options_init(&o);
    o.temperature = temperature;
    o.top_k = top_k;
    o.top_p = top_p;
    o.seed = seed;
    gptx_sampler *s = NULL;
    if (gptx_sampler_create(&s, &o) != GPTX_OK) {
        fprintf(stderr, "gptx_sampler_create: %s\n", gptx_last_error());
        check_failures++;
    }
    return s;
}

/* vocab 50 padded to 64, context 16, 2 layers, 2 heads, width 16. */
static inline gptx_model_config small_config(void) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 50;
    c.padded_vocab_size = 64;
    c.context_length = 16;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 16;
    return c;
}

/* Deterministic pseudo-random ids in [0, vocab). */
static inline void fill_tokens(int32_t *ids, size_t n, int vocab, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)vocab);
    }
}

/* AdamW steps (lr 1e-2) on a repeating sequence, B 4 x T 16, vocab >= 50:
 * afterwards greedy decoding has clear winners rather than the near-ties of
 * a freshly initialised model. */
static inline int train_on_pattern(gptx_model *m, int steps) {
    gptx_optimizer *opt = NULL;
    gptx_adamw_options o;
    gptx_adamw_options_init(&o);
    o.lr = 1e-2f;
    int rc = gptx_optimizer_create(&opt, m, &o);
    if (rc != GPTX_OK) return rc;
    int32_t in[4 * 16], tg[4 * 16];
    for (int b = 0; b < 4; b++)
        for (int t = 0; t < 16; t++) {
            in[b * 16 + t] = (int32_t)(((b * 17 + t) * 7) % 50);
            tg[b * 16 + t] = (int32_t)(((b * 17 + t + 1) * 7) % 50);
        }
    for (int step = 0; step < steps && rc == GPTX_OK; step++) {
        rc = gptx_model_zero_grad(m);
        if (rc == GPTX_OK) rc = gptx_model_forward(m, in, tg, 4, 16, NULL);
        if (rc == GPTX_OK) rc = gptx_model_backward(m, 1.0f);
        if (rc == GPTX_OK) rc = gptx_optimizer_step(opt, m, NULL);
    }
    gptx_optimizer_destroy(opt);
    return rc;
}

/* Every parameter (gradients = 0) or gradient (1) of m, in canonical order,
 * concatenated into one malloc'ed buffer; NULL on failure. */
static inline float *model_values(gptx_model *m, int gradients) {
    size_t n = gptx_model_num_parameters(m), at = 0;
    float *v = malloc(n * sizeof *v);
    for (int i = 0; v && i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info ti;
        gptx_tensor_info_init(&ti);
        int rc = gptx_model_tensor_info(m, i, &ti);
        if (rc == GPTX_OK)
            rc = gradients ? gptx_model_get_gradient(m, ti.name, v + at, ti.numel)
                           : gptx_model_get_parameter(m, ti.name, v + at, ti.numel);
        if (rc != GPTX_OK) {
            free(v);
            return NULL;
        }
        at += ti.numel;
    }
    return v;
}

/* FNV-1a of n bytes, folded to a non-negative int64 (for MAX/MIN collectives). */
/* A malloc'd copy of the named parameter (fp32), its element count in *n;
 * NULL when the model has no such tensor. */
static inline float *param_copy(const gptx_model *m, const char *name, size_t *n) {
    int idx;
    gptx_tensor_info info;
    gptx_tensor_info_init(&info);
    if (gptx_model_find_tensor(m, name, &idx) != GPTX_OK ||
        gptx_model_tensor_info(m, idx, &info) != GPTX_OK)
        return NULL;
    float *p = malloc(info.numel * sizeof *p);
    if (p) gptx_model_get_parameter(m, name, p, info.numel);
    if (n) *n = info.numel;
    return p;
}

static inline int64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return (int64_t)(h >> 1);
}

#endif
