/* Wall-clock timer for throughput reports: every start/stop interval is kept;
 * the first (cold) one is reported apart from the rest (steady). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"

struct gptx_timer {
    gptx_context *ctx; /* NULL: host clock only */
    int scope;
    int running;
    double started; /* seconds on CLOCK_MONOTONIC */
    double *seconds; /* (cap) one per finished interval */
    int64_t *tokens; /* (cap) */
    size_t n, cap;
};

static int now_seconds(double *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return GPTX_FAIL(GPTX_ERR_BACKEND, "clock_gettime(CLOCK_MONOTONIC) failed");
    *t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return GPTX_OK;
}

int gptx_timer_create(gptx_timer **out, gptx_context *ctx, int scope) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    if (scope != GPTX_TIMER_TRAINING_STEPS && scope != GPTX_TIMER_END_TO_END)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "scope is %d; expected GPTX_TIMER_TRAINING_STEPS or GPTX_TIMER_END_TO_END",
                         scope);
    gptx_timer *t = calloc(1, sizeof *t);
    if (!t) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    t->ctx = ctx;
    t->scope = scope;
    *out = t;
    return GPTX_OK;
}

void gptx_timer_destroy(gptx_timer *t) {
    if (!t) return;
    free(t->seconds);
    free(t->tokens);
    free(t);
}

int gptx_timer_start(gptx_timer *t) {
    GPTX_CHECK_NULL(t);
    if (t->running)
        return GPTX_FAIL(GPTX_ERR_STATE, "the timer is already running (interval %zu); stop it first",
                         t->n);
    /* work queued before start belongs to no interval */
    if (t->ctx) GPTX_TRY(gptx_context_synchronize(t->ctx));
    GPTX_TRY(now_seconds(&t->started));
    t->running = 1;
    return GPTX_OK;
}

static int grow(gptx_timer *t) {
    if (t->n < t->cap) return GPTX_OK;
    size_t cap = t->cap ? 2 * t->cap : 64;
    double *s = realloc(t->seconds, cap * sizeof *s);
    if (!s) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu intervals)", cap);
    t->seconds = s;
    int64_t *k = realloc(t->tokens, cap * sizeof *k);
    if (!k) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu intervals)", cap);
    t->tokens = k;
    t->cap = cap;
    return GPTX_OK;
}

int gptx_timer_stop(gptx_timer *t, int64_t tokens) {
    GPTX_CHECK_NULL(t);
    if (!t->running) return GPTX_FAIL(GPTX_ERR_STATE, "stop without a matching start");
    if (tokens < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "tokens is %lld; must be >= 0 (the timer keeps running)",
                         (long long)tokens);
    /* queued device work of the interval finishes inside it */
    if (t->ctx) GPTX_TRY(gptx_context_synchronize(t->ctx));
    double end = 0.0;
    GPTX_TRY(now_seconds(&end));
    GPTX_TRY(grow(t));
    t->seconds[t->n] = end - t->started;
    t->tokens[t->n] = tokens;
    t->n++;
    t->running = 0;
    return GPTX_OK;
}

void gptx_timer_report_init(gptx_timer_report *r) {
    if (!r) return;
    memset(r, 0, sizeof *r);
    r->struct_size = sizeof *r;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int gptx_timer_get_report(const gptx_timer *t, gptx_timer_report *r) {
    GPTX_CHECK_NULL(t);
    GPTX_CHECK_NULL(r);
    if (r->struct_size <= sizeof(size_t) || r->struct_size > sizeof *r)
        return GPTX_FAIL(GPTX_ERR_INVALID, "r.struct_size is %zu; call gptx_timer_report_init first",
                         r->struct_size);
    gptx_timer_report full;
    gptx_timer_report_init(&full);
    full.scope = t->scope;
    full.intervals = (int64_t)t->n;
    if (t->n > 0) {
        full.cold_seconds = t->seconds[0];
        full.cold_tokens = t->tokens[0];
    }
    size_t ns = t->n > 1 ? t->n - 1 : 0; /* steady intervals: 1..n-1 */
    if (ns > 0) {
        double *sorted = malloc(ns * sizeof *sorted);
        if (!sorted) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu intervals)", ns);
        memcpy(sorted, t->seconds + 1, ns * sizeof *sorted);
        qsort(sorted, ns, sizeof *sorted, cmp_double);
        for (size_t i = 1; i < t->n; i++) { /* in interval order: a fixed sum */
            full.steady_seconds += t->seconds[i];
            full.steady_tokens += t->tokens[i];
        }
        full.steady_min_seconds = sorted[0];
        full.steady_max_seconds = sorted[ns - 1];
        full.steady_median_seconds =
            ns % 2 ? sorted[ns / 2] : 0.5 * (sorted[ns / 2 - 1] + sorted[ns / 2]);
        free(sorted);
        if (full.steady_seconds > 0.0)
            full.steady_tokens_per_second = (double)full.steady_tokens / full.steady_seconds;
    }
    size_t n = r->struct_size;
    memcpy(r, &full, n); /* a caller's older, shorter struct gets its fields */
    r->struct_size = n;
    return GPTX_OK;
}

int gptx_timer_interval(const gptx_timer *t, int64_t index, double *seconds, int64_t *tokens) {
    GPTX_CHECK_NULL(t);
    if (index < 0 || (uint64_t)index >= (uint64_t)t->n)
        return GPTX_FAIL(GPTX_ERR_INVALID, "index is %lld; the timer has %zu finished intervals",
                         (long long)index, t->n);
    if (seconds) *seconds = t->seconds[index];
    if (tokens) *tokens = t->tokens[index];
    return GPTX_OK;
}
