/* Timer for throughput reports: every start/stop interval is kept; the
 * first (cold) one is reported apart from the rest (steady). On a backend
 * with events, start and stop record device events instead of synchronizing,
 * and the intervals are resolved when they are read. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi_struct.h"
#include "context.h"
#include "errors.h"

struct gptx_timer {
    gptx_handle h;     /* first (handle.h); its parent is ctx when there is one */
    gptx_context *ctx; /* NULL: host clock only */
    int events;        /* the context's backend records events */
    int scope;
    int running;
    double started;  /* seconds on CLOCK_MONOTONIC */
    double *seconds; /* (cap) one per finished interval */
    int64_t *tokens; /* (cap) */
    size_t n, cap;
    /* with events: interval i < n is resolved when i < resolved; else its
     * (start, stop) events are still held */
    void **ev_start, **ev_stop; /* (cap) */
    size_t resolved;
    void *cur_start; /* the running interval's start event */
    void **pool;     /* events free for reuse */
    size_t npool, pool_cap;
};

GPTX_HANDLE_FIRST(gptx_timer);

static int now_seconds(double *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return GPTX_FAIL(GPTX_ERR_BACKEND, "clock_gettime(CLOCK_MONOTONIC) failed");
    *t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return GPTX_OK;
}

static void release_timer(gptx_handle *h);

int gptx_timer_create(gptx_timer **out, gptx_context *ctx, int scope) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    if (scope != GPTX_TIMER_TRAINING_STEPS && scope != GPTX_TIMER_END_TO_END)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "scope is %d; expected GPTX_TIMER_TRAINING_STEPS or GPTX_TIMER_END_TO_END",
                         scope);
    if (ctx) GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    gptx_timer *t = calloc(1, sizeof *t);
    if (!t) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&t->h, GPTX_KIND_TIMER, ctx ? &ctx->h : NULL, NULL, release_timer);
    t->ctx = ctx;
    t->events = ctx && ctx->ops->event_record != NULL;
    t->scope = scope;
    *out = t;
    return GPTX_OK;
}

static void drop_event(gptx_timer *t, void *ev) {
    if (ev) t->ctx->ops->event_destroy(t->ctx->be, ev);
}

/* The timer's release (handle.h): its events go back to the context's
 * backend, under the context's lock. */
static void release_timer(gptx_handle *h) {
    gptx_timer *t = (gptx_timer *)h;
    if (t->events) {
        for (size_t i = t->resolved; i < t->n; i++) {
            drop_event(t, t->ev_start[i]);
            drop_event(t, t->ev_stop[i]);
        }
        for (size_t i = 0; i < t->npool; i++) drop_event(t, t->pool[i]);
        drop_event(t, t->cur_start);
    }
    free(t->ev_start);
    free(t->ev_stop);
    free(t->pool);
    free(t->seconds);
    free(t->tokens);
}

void gptx_timer_destroy(gptx_timer *t) { gptx_handle_destroy(t, GPTX_KIND_TIMER, "t", __func__); }

/* Queued work of the timer's context finishes before the host clock is read
 * (the call holds the context's lock; its user may have destroyed the
 * context handle, which the timer keeps alive). */
static int synchronize(gptx_timer *t) {
    return t->ctx ? t->ctx->ops->synchronize(t->ctx->be) : GPTX_OK;
}

/* An event from the pool (or a new one), recorded on the compute stream. */
static int record_event(gptx_timer *t, void **ev) {
    gptx_backend *be = t->ctx->be;
    void *e = NULL;
    if (t->npool > 0)
        e = t->pool[--t->npool];
    else
        GPTX_TRY(t->ctx->ops->event_create(be, &e));
    int rc = t->ctx->ops->event_record(be, e);
    if (rc != GPTX_OK) {
        t->pool[t->npool++] = e; /* pool_cap >= every event ever created */
        return rc;
    }
    *ev = e;
    return GPTX_OK;
}

/* Room in the pool for every event the timer holds, so returning one
 * never fails. */
static int reserve_pool(gptx_timer *t, size_t held) {
    if (held <= t->pool_cap) return GPTX_OK;
    size_t cap = t->pool_cap ? 2 * t->pool_cap : 64;
    while (cap < held) cap *= 2;
    void **p = realloc(t->pool, cap * sizeof *p);
    if (!p) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu events)", cap);
    t->pool = p;
    t->pool_cap = cap;
    return GPTX_OK;
}

/* Device times of the intervals not yet read; waits for their stop events. */
static int resolve(gptx_timer *t) {
    while (t->resolved < t->n) {
        size_t i = t->resolved;
        double sec = 0.0;
        GPTX_TRY(t->ctx->ops->event_elapsed(t->ctx->be, t->ev_start[i], t->ev_stop[i], &sec));
        t->seconds[i] = sec;
        t->pool[t->npool++] = t->ev_start[i];
        t->pool[t->npool++] = t->ev_stop[i];
        t->ev_start[i] = t->ev_stop[i] = NULL;
        t->resolved++;
    }
    return GPTX_OK;
}

int gptx_timer_start(gptx_timer *t) {
    GPTX_ENTER(t, GPTX_KIND_TIMER);
    if (t->running)
        return GPTX_FAIL(GPTX_ERR_STATE, "the timer is already running (interval %zu); stop it first",
                         t->n);
    if (t->events) {
        /* two events per interval at most, plus this one */
        GPTX_TRY(reserve_pool(t, 2 * (t->n - t->resolved) + t->npool + 3));
        GPTX_TRY(record_event(t, &t->cur_start));
        t->running = 1;
        return GPTX_OK;
    }
    /* work queued before start belongs to no interval */
    GPTX_TRY(synchronize(t));
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
    if (t->events) {
        void **a = realloc(t->ev_start, cap * sizeof *a);
        if (!a) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu intervals)", cap);
        t->ev_start = a;
        void **b = realloc(t->ev_stop, cap * sizeof *b);
        if (!b) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%zu intervals)", cap);
        t->ev_stop = b;
    }
    t->cap = cap;
    return GPTX_OK;
}

int gptx_timer_stop(gptx_timer *t, int64_t tokens) {
    GPTX_ENTER(t, GPTX_KIND_TIMER);
    if (!t->running) return GPTX_FAIL(GPTX_ERR_STATE, "stop without a matching start");
    if (tokens < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "tokens is %lld; must be >= 0 (the timer keeps running)",
                         (long long)tokens);
    if (t->events) {
        GPTX_TRY(grow(t));
        GPTX_TRY(reserve_pool(t, 2 * (t->n + 1 - t->resolved) + t->npool + 1));
        void *stop = NULL;
        GPTX_TRY(record_event(t, &stop));
        t->ev_start[t->n] = t->cur_start;
        t->ev_stop[t->n] = stop;
        t->cur_start = NULL;
        t->seconds[t->n] = 0.0; /* resolved when read */
        t->tokens[t->n] = tokens;
        t->n++;
        t->running = 0;
        return GPTX_OK;
    }
    /* queued device work of the interval finishes inside it */
    GPTX_TRY(synchronize(t));
    double end = 0.0;
    GPTX_TRY(now_seconds(&end));
    GPTX_TRY(grow(t));
    t->seconds[t->n] = end - t->started;
    t->tokens[t->n] = tokens;
    t->n++;
    t->running = 0;
    return GPTX_OK;
}

int gptx_timer_report_init_sized(gptx_timer_report *r, size_t size) {
    static const gptx_timer_report zero = {.struct_size = GPTX_TIMER_REPORT_SIZE};
    return gptx_struct_init(r, size, &zero, &gptx_desc_timer_report, __func__, "r");
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int gptx_timer_get_report(const gptx_timer *t, gptx_timer_report *r) {
    GPTX_ENTER(t, GPTX_KIND_TIMER);
    GPTX_CHECK_NULL(r);
    GPTX_TRY(gptx_struct_check_size(r->struct_size, &gptx_desc_timer_report, __func__, "r"));
    /* reading resolves pending events: the cached times are not part of
     * the timer's observable state (the timer is never a const object) */
    if (t->events) GPTX_TRY(resolve((gptx_timer *)t));
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
    return gptx_struct_write(r, &full, &gptx_desc_timer_report, __func__, "r");
}

int gptx_timer_interval(const gptx_timer *t, int64_t index, double *seconds, int64_t *tokens) {
    GPTX_ENTER(t, GPTX_KIND_TIMER);
    if (index < 0 || (uint64_t)index >= (uint64_t)t->n)
        return GPTX_FAIL(GPTX_ERR_INVALID, "index is %lld; the timer has %zu finished intervals",
                         (long long)index, t->n);
    if (t->events && seconds) GPTX_TRY(resolve((gptx_timer *)t));
    if (seconds) *seconds = t->seconds[index];
    if (tokens) *tokens = t->tokens[index];
    return GPTX_OK;
}
