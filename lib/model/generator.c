/* The generator (gptx.h): a window of tokens at positions 0 .. len - 1 and,
 * for the first `cached` of them, every layer's keys and values.
 *
 * Feeding only appends to the window; the model runs when logits are needed,
 * over the positions [cached, len) in one pass (gptx_model_forward_kv). Causal
 * attention makes a position's keys and values a function of the tokens at
 * positions 0 .. itself alone, so the cache always equals what a full forward
 * pass over the current window computes, however the tokens were fed. Two
 * events empty it: a token arriving at a full window (GPT-2's positions are
 * absolute: the kept tokens move to new positions and are recomputed) and a
 * change of the model's parameters (noticed through the model's parameter
 * version). Without the cache (use_cache 0) every logits request runs the
 * whole window, as gptx 0.1 did for each token: the reference. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi_struct.h"
#include "errors.h"
#include "model.h"

struct gptx_generator {
    gptx_handle h;       /* first (handle.h); its parent is model */
    gptx_model *model;
    int window, keep, use_cache;
    gptx_kv kv;          /* base NULL without the cache */
    int32_t *tokens;     /* window tokens (window) */
    int len, cached;     /* tokens in the window; positions with keys and values */
    int redo;            /* front positions whose tokens were computed before the cache emptied */
    int fresh;           /* tokens appended since the logits were last computed */
    float *logits;       /* padded_vocab_size: after token len - 1 when logits_valid */
    int logits_valid;
    uint64_t version;    /* model->params_version the cache was computed with */
    gptx_generator_stats stats;
};

GPTX_HANDLE_FIRST(gptx_generator);

int gptx_generator_options_init_sized(gptx_generator_options *opts, size_t size) {
    static const gptx_generator_options defaults = {
        .struct_size = GPTX_GENERATOR_OPTIONS_SIZE, .window = 0, .keep = -1, .use_cache = 1};
    return gptx_struct_init(opts, size, &defaults, &gptx_desc_generator_options, __func__, "opts");
}

int gptx_generator_stats_init_sized(gptx_generator_stats *stats, size_t size) {
    static const gptx_generator_stats zero = {.struct_size = GPTX_GENERATOR_STATS_SIZE};
    return gptx_struct_init(stats, size, &zero, &gptx_desc_generator_stats, __func__, "stats");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void clear_stats(gptx_generator *g) {
    gptx_generator_stats s = {.struct_size = GPTX_GENERATOR_STATS_SIZE};
    s.cache_bytes = g->kv.base ? gptx_model_kv_bytes(g->model, g->window) : 0;
    s.window = g->window;
    s.keep = g->keep;
    s.use_cache = g->use_cache;
    g->stats = s;
}

/* The generator's release (handle.h); its model is released after it. */
static void release_generator(gptx_handle *h) {
    gptx_generator *g = (gptx_generator *)h;
    if (g->kv.base) g->model->ctx->ops->free(g->model->ctx->be, g->kv.base);
    free(g->tokens);
    free(g->logits);
}

int gptx_generator_create(gptx_generator **out, gptx_model *model,
                          const gptx_generator_options *opts) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    gptx_generator_options o;
    gptx_generator_options_init(&o);
    if (opts) GPTX_TRY(gptx_struct_read(&o, opts, &gptx_desc_generator_options, __func__, "opts"));
    int ctx_len = model->cfg.context_length;
    if (o.window < 0 || o.window > ctx_len)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.window is %d; must be in [0, context length %d]",
                         o.window, ctx_len);
    int window = o.window ? o.window : ctx_len;
    if (o.keep < -1 || o.keep >= window)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.keep is %d; must be -1 or in [0, window - 1 = %d]",
                         o.keep, window - 1);
    if (o.use_cache != 0 && o.use_cache != 1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.use_cache is %d; expected 0 or 1", o.use_cache);
    const gptx_backend_ops *ops = model->ctx->ops;
    if (o.use_cache && !ops->attention_kv_forward)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the %s backend has no cached attention; use opts.use_cache = 0",
                         ops->name);
    gptx_generator *g = calloc(1, sizeof *g);
    if (!g) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&g->h, GPTX_KIND_GENERATOR, &model->h, NULL, release_generator);
    g->model = model;
    g->window = window;
    g->keep = o.keep >= 0 ? o.keep : window / 2;
    g->use_cache = o.use_cache;
    g->tokens = malloc((size_t)window * sizeof *g->tokens);
    g->logits = malloc((size_t)model->cfg.padded_vocab_size * sizeof *g->logits);
    if (!g->tokens || !g->logits) {
        gptx_generator_destroy(g);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (window %d, vocab %d)", window,
                         model->cfg.padded_vocab_size);
    }
    if (g->use_cache) {
        g->kv.cap = window;
        int rc = ops->alloc(model->ctx->be, gptx_model_kv_bytes(model, window), &g->kv.base);
        if (rc != GPTX_OK) {
            g->kv.base = NULL;
            gptx_generator_destroy(g);
            return rc;
        }
    }
    clear_stats(g);
    *out = g;
    return GPTX_OK;
}

void gptx_generator_destroy(gptx_generator *g) {
    gptx_handle_destroy(g, GPTX_KIND_GENERATOR, "g", __func__);
}

int gptx_generator_reset(gptx_generator *g) {
    GPTX_ENTER(g, GPTX_KIND_GENERATOR);
    g->len = g->cached = g->redo = g->fresh = 0;
    g->logits_valid = 0;
    clear_stats(g);
    return GPTX_OK;
}

/* Appends one token: at a full window, the last `keep` move to the front. */
static void append(gptx_generator *g, int32_t tok) {
    if (g->len == g->window) {
        int drop = g->len - g->keep, done = g->cached > g->redo ? g->cached : g->redo;
        memmove(g->tokens, g->tokens + drop, (size_t)g->keep * sizeof *g->tokens);
        g->len = g->keep;
        g->redo = done - drop < 0 ? 0 : done - drop;
        g->cached = 0; /* new positions: every kept token's keys and values change */
        g->stats.slides++;
    }
    g->fresh++;
    g->tokens[g->len++] = tok;
    g->logits_valid = 0;
    g->stats.tokens++;
}

int gptx_generator_feed(gptx_generator *g, const int32_t *tokens, int n) {
    GPTX_ENTER(g, GPTX_KIND_GENERATOR);
    GPTX_CHECK_NULL(tokens);
    if (n < 1) return GPTX_FAIL(GPTX_ERR_INVALID, "n is %d; must be >= 1", n);
    int V = g->model->cfg.vocab_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "tokens[%d] is %d; must be in [0, %d)", i,
                             (int)tokens[i], V);
    for (int i = 0; i < n; i++) append(g, tokens[i]);
    return GPTX_OK;
}

/* Brings the logits up to date with the window. The model runs on its own
 * activations: no other call on it may overlap (its user may have destroyed
 * the handle; the generator keeps the model alive). */
static int compute(gptx_generator *g, const char *func) {
    if (g->len == 0)
        return gptx_fail(GPTX_ERR_STATE, func, "the window is empty: feed a prompt first");
    gptx_model *m = g->model;
    gptx_guard hold __attribute__((cleanup(gptx_guard_leave))) = {0};
    GPTX_TRY(gptx_guard_enter(&hold, m, GPTX_KIND_MODEL, 0, "the generator's model", func));
    if (g->version != m->params_version) { /* the parameters changed under the cache */
        if (g->cached > g->redo) g->redo = g->cached;
        g->cached = 0;
        g->logits_valid = 0;
        g->version = m->params_version;
    }
    if (g->logits_valid) return GPTX_OK;
    double t0 = now_s();
    int rc, first = g->use_cache ? g->cached : 0, n = g->len - first;
    if (g->use_cache) {
        g->kv.pos0 = first;
        rc = gptx_model_forward_kv(m, &g->kv, g->tokens + first, n, g->logits);
    } else {
        rc = gptx_model_forward_last_logits(m, g->tokens, g->len, g->window, g->logits);
    }
    if (rc != GPTX_OK) {
        g->cached = 0; /* the cache may be half written */
        return rc;
    }
    double dt = now_s() - t0;
    if (g->fresh == 1 && g->stats.prefill_passes + g->stats.decode_passes > 0) {
        g->stats.decode_passes++; /* the logits after one sampled or fed token */
        g->stats.decode_seconds += dt;
    } else {
        g->stats.prefill_passes++;
        g->stats.prefill_tokens += g->fresh;
        g->stats.prefill_seconds += dt;
    }
    g->stats.positions += n;
    g->stats.recomputed_positions += g->redo;
    g->redo = g->fresh = 0;
    g->cached = g->use_cache ? g->len : 0;
    g->logits_valid = 1;
    return GPTX_OK;
}

int gptx_generator_logits(gptx_generator *g, float *logits, size_t count) {
    GPTX_ENTER(g, GPTX_KIND_GENERATOR);
    GPTX_CHECK_NULL(logits);
    size_t Vp = (size_t)g->model->cfg.padded_vocab_size;
    if (count < Vp)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "count is %zu; the logits are %zu (padded vocabulary)",
                         count, Vp);
    GPTX_TRY(compute(g, __func__));
    memcpy(logits, g->logits, Vp * sizeof *logits);
    return GPTX_OK;
}

int gptx_generator_next(gptx_generator *g, gptx_sampler *sampler, int32_t *token) {
    GPTX_ENTER(g, GPTX_KIND_GENERATOR);
    GPTX_CHECK_NULL(sampler);
    GPTX_CHECK_NULL(token);
    GPTX_TRY(compute(g, __func__));
    const gptx_model_config *c = &g->model->cfg;
    int32_t tok;
    /* the penalties' history is the window, prompt included (on every backend:
     * the row is on the host) */
    GPTX_TRY(gptx_sampler_sample_history(sampler, g->logits, c->padded_vocab_size, c->vocab_size,
                                         g->tokens, g->len, &tok));
    append(g, tok);
    *token = tok;
    return GPTX_OK;
}

int gptx_generator_window(const gptx_generator *g, int32_t *tokens, size_t count, int *len) {
    GPTX_ENTER(g, GPTX_KIND_GENERATOR);
    GPTX_CHECK_NULL(len);
    if (count > 0) GPTX_CHECK_NULL(tokens);
    size_t n = count < (size_t)g->len ? count : (size_t)g->len;
    if (n) memcpy(tokens, g->tokens, n * sizeof *tokens);
    *len = g->len;
    return GPTX_OK;
}

int gptx_generator_get_stats(const gptx_generator *g, gptx_generator_stats *stats) {
    GPTX_ENTER(g, GPTX_KIND_GENERATOR);
    GPTX_CHECK_NULL(stats);
    return gptx_struct_write(stats, &g->stats, &gptx_desc_generator_stats, __func__, "stats");
}
