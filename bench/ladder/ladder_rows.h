/* The rows of the ablation table: the textbook baseline, then one change at
 * a time (cumulative: on top of the previous row; isolated: alone on top of
 * the baseline), then the rows that need the CUDA backend, listed as n/a. */
#ifndef GPTX_BENCH_LADDER_ROWS_H
#define GPTX_BENCH_LADDER_ROWS_H

#include "ladder.h"

#define LADDER_MAX_ROWS 24

/* Fills rows[] for mode "cumulative" or "isolated"; returns the number of
 * rows, or -1 for an unknown mode. */
int ladder_rows_build(const char *mode, double tolerance_scale, ladder_row *rows);

/* "naive attention, separate QKV, step-by-step LN/GELU, unfused AdamW, vocab
 * 50257, batch 4": the kernels a variant selects, for the report. */
void ladder_variant_describe(const ladder_variant *v, const ladder_shape *s, char *buf,
                             size_t size);

#endif
