/* gptx-op-profile's tables: a profiled step by op and by op group, from the
 * library's per-op report (gptx_context_get_op_profile). */
#ifndef GPTX_OP_PROFILE_REPORT_H
#define GPTX_OP_PROFILE_REPORT_H

#include "gptx/gptx_experimental.h"

typedef struct op_report {
    const gptx_op_stat *lines; /* in the order the ops were first called */
    int nlines;
    int steps;           /* profiled steps the lines cover */
    double step_seconds; /* wall time of one step, mean over them */
    int C, Vp;           /* the model's width and padded vocabulary: names the products */
} op_report;

/* One line per op (and per product shape): ms per step, % of the step,
 * calls per step, GFLOP/s where flops are counted. */
void op_report_by_op(const op_report *r);
/* The same time summed by group, then what no op accounts for. */
void op_report_by_group(const op_report *r);

#endif
