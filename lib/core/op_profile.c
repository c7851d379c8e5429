/* The per-op profiler: calls, flops and time per backend op (and per shape
 * for the products), timed with device events where the backend has them,
 * else with the host clock; and the experimental calls that enable, read
 * and reset it (gptx_experimental.h, docs/timing.md). */
#include "op_profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"

/* Intervals held unread at most. Past this the profiler reads them all (one
 * wait for the device per PENDING_MAX ops), so the events alive and the
 * memory stay bounded when nobody reads the report. A GPT-2 124M step issues
 * 183 ops (fp32; 208 under bf16): about 40 steps between two such waits. */
#define PENDING_MAX 8192
/* Events alive at most: two per unread interval, one for the call running,
 * one being recorded; the pool holds them all, so returning one never fails. */
#define EVENTS_MAX (2 * PENDING_MAX + 2)

struct gptx_op_profiler {
    const gptx_backend_ops *ops; /* the context's table: the events */
    gptx_backend *be;
    int events;                  /* device events; 0: the host clock */
    gptx_op_stat *lines;         /* (cap) the report, in order of first call */
    int nlines, cap;
    /* with events: intervals recorded and not read yet */
    void **start, **stop; /* (PENDING_MAX) */
    int *line;            /* (PENDING_MAX) the report line each belongs to */
    int npending;
    void **pool; /* (EVENTS_MAX) events free for reuse */
    int npool;
};

static int now_seconds(double *t) {
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return GPTX_FAIL(GPTX_ERR_BACKEND, "clock_gettime(CLOCK_MONOTONIC) failed");
    *t = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return GPTX_OK;
}

int gptx_op_profiler_create(gptx_op_profiler **out, const gptx_backend_ops *ops,
                            gptx_backend *be) {
    *out = NULL;
    gptx_op_profiler *p = calloc(1, sizeof *p);
    if (!p) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    p->ops = ops;
    p->be = be;
    p->events = ops->event_create && ops->event_record && ops->event_elapsed &&
                ops->event_destroy;
    if (p->events) { /* all at once, so the wrappers never allocate for events */
        p->start = malloc(PENDING_MAX * sizeof *p->start);
        p->stop = malloc(PENDING_MAX * sizeof *p->stop);
        p->line = malloc(PENDING_MAX * sizeof *p->line);
        p->pool = malloc(EVENTS_MAX * sizeof *p->pool);
        if (!p->start || !p->stop || !p->line || !p->pool) {
            gptx_op_profiler_destroy(p);
            return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%d events)", EVENTS_MAX);
        }
    }
    *out = p;
    return GPTX_OK;
}

/* Every unread interval's events back to the pool, unread. */
static void drop_pending(gptx_op_profiler *p) {
    for (int i = 0; i < p->npending; i++) {
        p->pool[p->npool++] = p->start[i];
        p->pool[p->npool++] = p->stop[i];
    }
    p->npending = 0;
}

void gptx_op_profiler_destroy(gptx_op_profiler *p) {
    if (!p) return;
    if (p->pool) {
        drop_pending(p);
        for (int i = 0; i < p->npool; i++) p->ops->event_destroy(p->be, p->pool[i]);
    }
    free(p->start);
    free(p->stop);
    free(p->line);
    free(p->pool);
    free(p->lines);
    free(p);
}

/* The report line of key, appended (zero) on its first call. */
static int find_line(gptx_op_profiler *p, const gptx_op_key *key, int *index) {
    for (int i = 0; i < p->nlines; i++) {
        const gptx_op_stat *s = &p->lines[i];
        if (s->op == key->op && s->c == key->c && s->oc == key->oc) {
            *index = i;
            return GPTX_OK;
        }
    }
    if (p->nlines == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        gptx_op_stat *l = realloc(p->lines, (size_t)cap * sizeof *l);
        if (!l) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (%d report lines)", cap);
        p->lines = l;
        p->cap = cap;
    }
    p->lines[p->nlines] = (gptx_op_stat){.op = key->op, .c = key->c, .oc = key->oc};
    *index = p->nlines++;
    return GPTX_OK;
}

/* An event from the pool (or a new one), recorded on the compute stream. */
static int record_event(gptx_op_profiler *p, void **ev) {
    void *e = NULL;
    if (p->npool > 0)
        e = p->pool[--p->npool];
    else
        GPTX_TRY(p->ops->event_create(p->be, &e));
    int rc = p->ops->event_record(p->be, e);
    if (rc != GPTX_OK) {
        p->pool[p->npool++] = e;
        return rc;
    }
    *ev = e;
    return GPTX_OK;
}

/* Reads every unread interval into its line: waits for the last one's work.
 * On a failure the intervals not read yet stay held. */
static int resolve(gptx_op_profiler *p) {
    while (p->npending > 0) {
        int i = p->npending - 1;
        double sec = 0.0;
        GPTX_TRY(p->ops->event_elapsed(p->be, p->start[i], p->stop[i], &sec));
        p->lines[p->line[i]].seconds += sec;
        p->pool[p->npool++] = p->start[i];
        p->pool[p->npool++] = p->stop[i];
        p->npending--;
    }
    return GPTX_OK;
}

int gptx_op_profiler_begin(gptx_op_profiler *p, gptx_op_mark *mark) {
    mark->start = NULL;
    mark->t0 = 0.0;
    if (p->events) return record_event(p, &mark->start);
    return now_seconds(&mark->t0);
}

/* The end of a call timed with events: its stop event, held with the start
 * until the report is read. */
static int end_events(gptx_op_profiler *p, const gptx_op_mark *mark, int line) {
    int rc = p->npending == PENDING_MAX ? resolve(p) : GPTX_OK;
    void *stop = NULL;
    if (rc == GPTX_OK) rc = record_event(p, &stop);
    if (rc != GPTX_OK) {
        p->pool[p->npool++] = mark->start;
        return rc;
    }
    p->start[p->npending] = mark->start;
    p->stop[p->npending] = stop;
    p->line[p->npending++] = line;
    return GPTX_OK;
}

static int end_host(gptx_op_profiler *p, const gptx_op_mark *mark, int line) {
    double t1 = 0.0;
    GPTX_TRY(now_seconds(&t1));
    p->lines[line].seconds += t1 - mark->t0;
    return GPTX_OK;
}

int gptx_op_profiler_end(gptx_op_profiler *p, const gptx_op_mark *mark, const gptx_op_key *key,
                         double flops, int status) {
    int line = 0;
    int rc = find_line(p, key, &line);
    if (rc != GPTX_OK) {
        if (mark->start) p->pool[p->npool++] = mark->start;
    } else {
        p->lines[line].calls++;
        p->lines[line].flops += flops;
        rc = p->events ? end_events(p, mark, line) : end_host(p, mark, line);
    }
    return status != GPTX_OK ? status : rc;
}

/* ---- the experimental API ------------------------------------------------- */

int gptx_context_set_profiling(gptx_context *ctx, int on) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    if (on != 0 && on != 1) return GPTX_FAIL(GPTX_ERR_INVALID, "on is %d; expected 0 or 1", on);
    if (on && !ctx->profiler) GPTX_TRY(gptx_op_profiler_create(&ctx->profiler, ctx->ops, ctx->be));
    ctx->profiling = on;
    return GPTX_OK;
}

static int check_enabled(const gptx_context *ctx, const char *func) {
    if (ctx->profiler) return GPTX_OK;
    return gptx_fail(GPTX_ERR_STATE, func,
                     "profiling was never enabled on this context (gptx_context_set_profiling)");
}

int gptx_context_get_op_profile(gptx_context *ctx, gptx_op_stat *stats, int capacity, int *count,
                                int *clock) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(count);
    *count = 0;
    if (capacity < 0) return GPTX_FAIL(GPTX_ERR_INVALID, "capacity is %d; must be >= 0", capacity);
    if (capacity > 0) GPTX_CHECK_NULL(stats);
    GPTX_TRY(check_enabled(ctx, __func__));
    gptx_op_profiler *p = ctx->profiler;
    GPTX_TRY(resolve(p));
    int n = capacity < p->nlines ? capacity : p->nlines;
    if (n > 0) memcpy(stats, p->lines, (size_t)n * sizeof *stats);
    *count = p->nlines;
    if (clock) *clock = p->events ? GPTX_PROFILE_DEVICE_EVENTS : GPTX_PROFILE_HOST_CLOCK;
    return GPTX_OK;
}

int gptx_context_reset_op_profile(gptx_context *ctx) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    GPTX_TRY(check_enabled(ctx, __func__));
    drop_pending(ctx->profiler);
    ctx->profiler->nlines = 0;
    return GPTX_OK;
}
