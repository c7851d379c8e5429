/* The ladder's results as a Markdown table (stdout), CSV, JSON and an SVG
 * bar chart of tokens/s per row. */
#ifndef GPTX_BENCH_LADDER_REPORT_H
#define GPTX_BENCH_LADDER_REPORT_H

#include <stdio.h>

#include "ladder.h"

typedef struct {
    const ladder_params *p;
    const ladder_row *rows;
    const ladder_result *res; /* one per row; unused for n/a rows */
    int n;
    const char *text_path;
    size_t n_tokens, n_train, n_eval; /* the data's split */
    char cpu[128];                    /* CPU model name */
    int online_cpus;
    char load_start[64], load_end[64]; /* /proc/loadavg's first three fields */
    double wall_s;                     /* the whole ladder */
} ladder_report;

/* Token budget of the comparison: N steps of the baseline batch. */
int64_t ladder_report_budget(const ladder_report *r);

void ladder_report_markdown(const ladder_report *r, FILE *out);
/* Return 0, or -1 after printing why the file could not be written. */
int ladder_report_csv(const ladder_report *r, const char *path);
int ladder_report_json(const ladder_report *r, const char *path);
int ladder_report_svg(const ladder_report *r, const char *path);

#endif
