/* Per-op profiling (the experimental gptx_context_set_profiling): a timing
 * decorator over the backend table a model or optimizer runs on, and the
 * profiler its wrappers report to, one per context.
 *
 * How a wrapper reaches the profiler: an entry of the table receives only
 * the backend argument, so a profiled instance runs on a decorated copy of
 * its table together with a stand-in for that argument (gptx_profiled: the
 * instance's own table, the context's backend and the profiler). Every entry
 * of the decorated table unwraps the stand-in and forwards to the real entry
 * with the real backend; the op entries also time the call. With profiling
 * off nothing is decorated: the instance keeps the context's backend and its
 * own table, so the profiler costs nothing then. */
#ifndef GPTX_OP_PROFILE_H
#define GPTX_OP_PROFILE_H

#include "context.h"

/* ---- the profiler (op_profile.c) ----------------------------------------- */

typedef struct gptx_op_profiler gptx_op_profiler;

/* A profiler timing the ops of backend instance be (the context's): with
 * device events when ops has event_record, else with the host clock. */
int gptx_op_profiler_create(gptx_op_profiler **out, const gptx_backend_ops *ops,
                            gptx_backend *be);
/* Destroys its events (through ops, so before the backend goes). */
void gptx_op_profiler_destroy(gptx_op_profiler *p);

/* What a report line is kept under: the table entry's name (a static
 * string, compared by address), and for the products their width in and
 * out (0 otherwise). */
typedef struct gptx_op_key {
    const char *op;
    int c, oc;
} gptx_op_key;

/* The start of one op call: a host time, or an event recorded before it. */
typedef struct gptx_op_mark {
    double t0;
    void *start;
} gptx_op_mark;

/* Marks the start of a call (records an event on the compute stream, or
 * reads the clock). A failure means the op must not be issued. */
int gptx_op_profiler_begin(gptx_op_profiler *p, gptx_op_mark *mark);
/* Marks its end: counts the call and its flops under key, and adds its time
 * (the host clock now, or an event whose interval is read later). Returns
 * status, the op's own, when that is a failure, else the profiler's. */
int gptx_op_profiler_end(gptx_op_profiler *p, const gptx_op_mark *mark, const gptx_op_key *key,
                         double flops, int status);

/* ---- the decorator (op_profile_table.c) ---------------------------------- */

typedef struct gptx_profiled gptx_profiled;

/* What an instance about to run on *ops (its copy of the table, variants
 * applied) passes as the backend argument: ctx->be, with *handle NULL and
 * *ops left alone when ctx does not profile; else the stand-in, with *ops
 * the timing decorator over the old *ops and *handle what
 * gptx_op_profile_detach frees (the instance must not outlive ctx). The
 * decorated table issues no graphs (graph_begin and graph_end are NULL), so
 * every op goes through a wrapper and is timed. */
int gptx_op_profile_attach(const gptx_context *ctx, gptx_backend_ops *ops, gptx_backend **be,
                           gptx_profiled **handle);
void gptx_op_profile_detach(gptx_profiled *handle);

#endif
