/* The sampler: options, the Philox stream position, and host scratch around
 * the backend-independent math in sampling.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "options.h"
#include "sampling.h"

struct gptx_sampler {
    gptx_sampler_options opts;
    uint64_t counter; /* draws made so far = the next draw's Philox counter */
    double *weights;  /* (cap) scratch for sampling.h */
    int32_t *order;   /* (cap) */
    size_t cap;
};

void gptx_sampler_options_init(gptx_sampler_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->temperature = 1.0f;
    o->top_k = 0;
    o->top_p = 1.0f;
    o->seed = 0;
    o->stream = 0;
}

static int validate(const gptx_sampler_options *o) {
    if (!(o->temperature >= 0.0f) || !isfinite(o->temperature))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.temperature is %g; must be finite and >= 0 (0 = greedy)",
                         (double)o->temperature);
    if (o->top_k < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.top_k is %d; must be >= 0 (0 = off)", o->top_k);
    if (!(o->top_p > 0.0f && o->top_p <= 1.0f))
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.top_p is %g; must be in (0, 1] (1 = off)",
                         (double)o->top_p);
    return GPTX_OK;
}

int gptx_sampler_create(gptx_sampler **out, const gptx_sampler_options *in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    gptx_sampler_options o;
    gptx_sampler_options_init(&o);
    if (in)
        GPTX_TRY(gptx_read_options(&o, sizeof o, in, in->struct_size, "sampler options",
                                   "gptx_sampler_options_init"));
    GPTX_TRY(validate(&o));
    gptx_sampler *s = calloc(1, sizeof *s);
    if (!s) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    s->opts = o;
    *out = s;
    return GPTX_OK;
}

void gptx_sampler_destroy(gptx_sampler *s) {
    if (!s) return;
    free(s->weights);
    free(s->order);
    free(s);
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

int gptx_sampler_sample(gptx_sampler *s, const float *logits, int n_logits, int vocab_size,
                        int32_t *token) {
    GPTX_CHECK_NULL(s);
    GPTX_CHECK_NULL(logits);
    GPTX_CHECK_NULL(token);
    if (vocab_size <= 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "vocab_size is %d; must be > 0", vocab_size);
    if (n_logits < vocab_size)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "n_logits is %d; must be >= vocab_size %d", n_logits,
                         vocab_size);
    const gptx_sampler_options *o = &s->opts;
    if (o->temperature > 0.0f) GPTX_TRY(ensure_scratch(s, (size_t)vocab_size));

    /* Columns [vocab_size, n_logits) are never read: padding cannot be chosen. */
    double u = gptx_sampling_uniform(o->seed, o->stream, s->counter);
    int32_t t = -1;
    int bad = 0;
    int rc = gptx_sample_row(logits, vocab_size, (double)o->temperature, o->top_k,
                             (double)o->top_p, u, s->weights, s->order, &t, &bad);
    switch (rc) {
    case GPTX_SAMPLE_OK: break;
    case GPTX_SAMPLE_NAN:
        return GPTX_FAIL(GPTX_ERR_NON_FINITE, "logits[%d] is NaN (vocab_size %d); nothing was drawn",
                         bad, vocab_size);
    case GPTX_SAMPLE_POS_INF:
        return GPTX_FAIL(GPTX_ERR_NON_FINITE, "logits[%d] is +inf (vocab_size %d); nothing was drawn",
                         bad, vocab_size);
    default:
        return GPTX_FAIL(GPTX_ERR_NON_FINITE,
                         "all logits in [0, vocab_size = %d) are -inf; nothing was drawn",
                         vocab_size);
    }
    s->counter++; /* only a successful draw moves the stream, greedy included */
    *token = t;
    return GPTX_OK;
}

int gptx_sampler_get_state(const gptx_sampler *s, gptx_sampler_state *state) {
    GPTX_CHECK_NULL(s);
    GPTX_CHECK_NULL(state);
    state->seed = s->opts.seed;
    state->stream = s->opts.stream;
    state->counter = s->counter;
    return GPTX_OK;
}

int gptx_sampler_set_state(gptx_sampler *s, const gptx_sampler_state *state) {
    GPTX_CHECK_NULL(s);
    GPTX_CHECK_NULL(state);
    s->opts.seed = state->seed;
    s->opts.stream = state->stream;
    s->counter = state->counter;
    return GPTX_OK;
}
