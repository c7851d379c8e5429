/* Shared set-up for unit tests: a CPU context and a small model. */
#ifndef GPTX_TEST_UTIL_H
#define GPTX_TEST_UTIL_H

#include <stdint.h>
#include <stdlib.h>

#include "gptx/gptx.h"

static inline int make_cpu_context(gptx_context **ctx, int threads) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = threads;
    o.deterministic = 1;
    return gptx_context_create(ctx, &o);
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

#endif
