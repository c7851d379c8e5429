/* The sampler: options, the Philox stream position, and host scratch around
 * the backend-independent math in sampling.h. Sampling runs here, on host
 * logits, for every backend (a generator downloads its row first); the
 * penalties' history is the caller's (a generator passes its window), so a
 * sampler holds no tokens and its state stays (seed, stream, counter). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "abi_struct.h"
#include "handle.h"
#include "sampling.h"

struct gptx_sampler {
    gptx_handle h;    /* first (handle.h) */
    gptx_sampler_options opts;
    uint64_t counter; /* draws made so far = the next draw's Philox counter */
    double *weights;  /* (cap) scratch for sampling.h */
    int32_t *order;   /* (cap) */
    size_t cap;
    float *penalized; /* (pcap) the row after the penalties */
    int32_t *counts;  /* (pcap) all 0 between calls */
    size_t pcap;
};

GPTX_HANDLE_FIRST(gptx_sampler);

static const gptx_sampler_options sampler_defaults = {
    .struct_size = GPTX_SAMPLER_OPTIONS_SIZE,
    .temperature = 1.0f,
    .top_k = 0,
    .top_p = 1.0f,
    .seed = 0,
    .stream = 0,
    .repetition_penalty = 1.0f,
    .frequency_penalty = 0.0f,
    .presence_penalty = 0.0f,
    .penalty_window = GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT,
    .min_p = 0.0f,
};

int gptx_sampler_options_init_sized(gptx_sampler_options *o, size_t size) {
    return gptx_struct_init(o, size, &sampler_defaults, &gptx_desc_sampler_options, __func__,
                            "opts");
}

int gptx_sampler_state_init_sized(gptx_sampler_state *state, size_t size) {
    static const gptx_sampler_state zero = {.struct_size = GPTX_SAMPLER_STATE_SIZE};
    return gptx_struct_init(state, size, &zero, &gptx_desc_sampler_state, __func__, "state");
}

/* func: the public call, the start of the message. */
static int validate(const gptx_sampler_options *o, const char *func) {
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "opts.temperature is %g; must be finite and >= 0 (0 = greedy)",
                         (double)o->temperature);
    if (o->top_k < 0)
        return gptx_fail(GPTX_ERR_INVALID, func, "opts.top_k is %d; must be >= 0 (0 = off)",
                         o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return gptx_fail(GPTX_ERR_INVALID, func, "opts.top_p is %g; must be in (0, 1] (1 = off)",
                         (double)o->top_p);
    if (!(o->repetition_penalty > 0.0f) || !isfinite(o->repetition_penalty))
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "opts.repetition_penalty is %g; must be finite and > 0 (1 = off)",
                         (double)o->repetition_penalty);
    if (!(o->frequency_penalty >= 0.0f) || !isfinite(o->frequency_penalty))
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "opts.frequency_penalty is %g; must be finite and >= 0 (0 = off)",
                         (double)o->frequency_penalty);
    if (!(o->presence_penalty >= 0.0f) || !isfinite(o->presence_penalty))
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "opts.presence_penalty is %g; must be finite and >= 0 (0 = off)",
                         (double)o->presence_penalty);
    if (o->penalty_window < 1)
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "opts.penalty_window is %d; must be >= 1 (default %d)", o->penalty_window,
                         GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT);
    if (!(o->min_p >= 0.0f && o->min_p <= 1.0f))
        return gptx_fail(GPTX_ERR_INVALID, func, "opts.min_p is %g; must be in [0, 1] (0 = off)",
                         (double)o->min_p);
    return GPTX_OK;
}

static void release_sampler(gptx_handle *h) {
    gptx_sampler *s = (gptx_sampler *)h;
    free(s->weights);
    free(s->order);
    free(s->penalized);
    free(s->counts);
}

int gptx_sampler_create(gptx_sampler **out, const gptx_sampler_options *in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    gptx_sampler_options o = sampler_defaults;
    if (in) GPTX_TRY(gptx_struct_read(&o, in, &gptx_desc_sampler_options, __func__, "opts"));
    GPTX_TRY(validate(&o, __func__));
    gptx_sampler *s = calloc(1, sizeof *s);
    if (!s) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&s->h, GPTX_KIND_SAMPLER, NULL, NULL, release_sampler);
    s->opts = o;
    *out = s;
    return GPTX_OK;
}

void gptx_sampler_destroy(gptx_sampler *s) {
    gptx_handle_destroy(s, GPTX_KIND_SAMPLER, "s", __func__);
}

static int ensure_scratch(gptx_sampler *s, size_t n) {
    if (n <= s->cap) return GPTX_OK;
    double *w = malloc(n * sizeof *w);
    int32_t *o = malloc(n * sizeof *o);
    if (!w || !o) {
        free(w);
        free(o);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (scratch for %zu tokens)", n);
    }
    free(s->weights);
    free(s->order);
    s->weights = w;
    s->order = o;
    s->cap = n;
    return GPTX_OK;
}

static int ensure_penalty_scratch(gptx_sampler *s, size_t n, const char *func) {
    if (n <= s->pcap) return GPTX_OK;
    float *p = malloc(n * sizeof *p);
    int32_t *c = calloc(n, sizeof *c);
    if (!p || !c) {
        free(p);
        free(c);
        return gptx_fail(GPTX_ERR_NO_MEMORY, func,
                         "out of host memory (penalty scratch for %zu tokens)", n);
    }
    free(s->penalized);
    free(s->counts);
    s->penalized = p;
    s->counts = c;
    s->pcap = n;
    return GPTX_OK;
}

/* The draw, after the history's last penalty_window tokens (func names the
 * public call in messages). */
static int sample(gptx_sampler *s, const float *logits, int n_logits, int vocab_size,
                  const int32_t *history, int n_history, int32_t *token, const char *func) {
    if (vocab_size <= 0)
        return gptx_fail(GPTX_ERR_INVALID, func, "vocab_size is %d; must be > 0", vocab_size);
    if (n_logits < vocab_size)
        return gptx_fail(GPTX_ERR_SHAPE, func, "n_logits is %d; must be >= vocab_size %d",
                         n_logits, vocab_size);
    if (n_history < 0)
        return gptx_fail(GPTX_ERR_INVALID, func, "n_history is %d; must be >= 0", n_history);
    if (n_history > 0 && !history)
        return gptx_fail(GPTX_ERR_NULL, func, "history is NULL with n_history %d", n_history);
    for (int i = 0; i < n_history; i++)
        if (history[i] < 0 || history[i] >= vocab_size)
            return gptx_fail(GPTX_ERR_TOKEN_RANGE, func, "history[%d] is %d; must be in [0, %d)",
                             i, (int)history[i], vocab_size);
    const gptx_sampler_options *o = &s->opts;
    if (o->temperature > 0.0f) GPTX_TRY(ensure_scratch(s, (size_t)vocab_size));
    int n_pen = n_history < o->penalty_window ? n_history : o->penalty_window;
    if (n_pen > 0 && (o->repetition_penalty != 1.0f || o->frequency_penalty != 0.0f ||
                      o->presence_penalty != 0.0f)) {
        GPTX_TRY(ensure_penalty_scratch(s, (size_t)vocab_size, func));
        gptx_sampling_penalize(logits, vocab_size, history + (n_history - n_pen), n_pen,
                               (double)o->repetition_penalty, (double)o->frequency_penalty,
                               (double)o->presence_penalty, s->penalized, s->counts);
        logits = s->penalized; /* all off (the defaults): the caller's row, as before 0.6.0 */
    }

    /* Columns [vocab_size, n_logits) are never read: padding cannot be chosen. */
    double u = gptx_sampling_uniform(o->seed, o->stream, s->counter);
    int32_t t = -1;
    int bad = 0;
    int rc = gptx_sample_row_min_p(logits, vocab_size, (double)o->temperature, o->top_k,
                                   (double)o->top_p, (double)o->min_p, u, s->weights, s->order,
                                   &t, &bad);
    switch (rc) {
    case GPTX_SAMPLE_OK: break;
    case GPTX_SAMPLE_NAN:
        return gptx_fail(GPTX_ERR_NON_FINITE, func,
                         "logits[%d] is NaN (vocab_size %d); nothing was drawn", bad, vocab_size);
    case GPTX_SAMPLE_POS_INF:
        return gptx_fail(GPTX_ERR_NON_FINITE, func,
                         "logits[%d] is +inf (vocab_size %d); nothing was drawn", bad, vocab_size);
    default:
        return gptx_fail(GPTX_ERR_NON_FINITE, func,
                         "all logits in [0, vocab_size = %d) are -inf; nothing was drawn",
                         vocab_size);
    }
    s->counter++; /* only a successful draw moves the stream, greedy included */
    *token = t;
    return GPTX_OK;
}

int gptx_sampler_sample(gptx_sampler *s, const float *logits, int n_logits, int vocab_size,
                        int32_t *token) {
    GPTX_ENTER(s, GPTX_KIND_SAMPLER);
    GPTX_CHECK_NULL(logits);
    GPTX_CHECK_NULL(token);
    return sample(s, logits, n_logits, vocab_size, NULL, 0, token, __func__);
}

int gptx_sampler_sample_history(gptx_sampler *s, const float *logits, int n_logits,
                                int vocab_size, const int32_t *history, int n_history,
                                int32_t *token) {
    GPTX_ENTER(s, GPTX_KIND_SAMPLER);
    GPTX_CHECK_NULL(logits);
    GPTX_CHECK_NULL(token);
    return sample(s, logits, n_logits, vocab_size, history, n_history, token, __func__);
}

int gptx_sampler_get_state(const gptx_sampler *s, gptx_sampler_state *state) {
    GPTX_ENTER(s, GPTX_KIND_SAMPLER);
    GPTX_CHECK_NULL(state);
    gptx_sampler_state full;
    gptx_sampler_state_init(&full);
    full.seed = s->opts.seed;
    full.stream = s->opts.stream;
    full.counter = s->counter;
    return gptx_struct_write(state, &full, &gptx_desc_sampler_state, __func__, "state");
}

int gptx_sampler_get_options(const gptx_sampler *s, gptx_sampler_options *opts) {
    GPTX_ENTER(s, GPTX_KIND_SAMPLER);
    GPTX_CHECK_NULL(opts);
    return gptx_struct_write(opts, &s->opts, &gptx_desc_sampler_options, __func__, "opts");
}

int gptx_sampler_set_state(gptx_sampler *s, const gptx_sampler_state *state) {
    GPTX_ENTER(s, GPTX_KIND_SAMPLER);
    GPTX_CHECK_NULL(state);
    gptx_sampler_state full;
    gptx_sampler_state_init(&full);
    GPTX_TRY(gptx_struct_read(&full, state, &gptx_desc_sampler_state, __func__, "state"));
    s->opts.seed = full.seed;
    s->opts.stream = full.stream;
    s->counter = full.counter;
    return GPTX_OK;
}
