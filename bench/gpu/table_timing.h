/* Device time of calls through the backend table, for the programs that
 * call it directly (gptx-bench-attention, gptx-bench-bandwidth): each timed
 * call between two events recorded on the compute stream (device time, no
 * host gaps counted), the median of iters after warmup untimed calls.
 * Header-only; the includer has backend.h and bench_common.h. */
#ifndef GPTX_TABLE_TIMING_H
#define GPTX_TABLE_TIMING_H

#include <stdlib.h>

#include "backend.h"
#include "errors.h"

typedef int (*table_call)(void *arg);

/* before (may be NULL) runs ahead of each timed call, outside its events */
static inline int table_time_median(const gptx_backend_ops *ops, gptx_backend *be, void *ev0,
                                    void *ev1, int warmup, int iters, table_call before,
                                    table_call call, void *arg, double *median) {
    for (int i = 0; i < warmup; i++) GPTX_TRY(call(arg));
    double *t = malloc((size_t)iters * sizeof *t);
    if (!t) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = GPTX_OK;
    for (int i = 0; i < iters && rc == GPTX_OK; i++) {
        if (before) rc = before(arg);
        if (rc == GPTX_OK) rc = ops->event_record(be, ev0);
        if (rc == GPTX_OK) rc = call(arg);
        if (rc == GPTX_OK) rc = ops->event_record(be, ev1);
        if (rc == GPTX_OK) rc = ops->event_elapsed(be, ev0, ev1, &t[i]);
    }
    if (rc == GPTX_OK) *median = bench_median(t, iters);
    free(t);
    return rc;
}

#endif
