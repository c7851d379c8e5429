/* Runs one row of the ladder: a fresh context and model with the row's
 * kernel variants, the timed training steps, then the numerics against the
 * baseline row (which must run first and becomes the reference). */
#ifndef GPTX_BENCH_LADDER_RUN_H
#define GPTX_BENCH_LADDER_RUN_H

#include "ladder.h"
#include "ladder_data.h"

typedef struct {
    const ladder_params *p;
    const ladder_data *data;
    float *base_logits;    /* (B*T, vocab) of the baseline's fresh model; NULL until it ran */
    double base_eval_loss; /* the baseline's eval loss after N steps */
    float *scratch;        /* (B*T, padded_vocab) logits of the row being checked */
} ladder_runner;

int ladder_runner_init(ladder_runner *r, const ladder_params *p, const ladder_data *data);
void ladder_runner_free(ladder_runner *r);

/* Runs row (available rows only) and fills res; a failure is recorded in
 * res (error, pass = 0), never fatal. */
void ladder_run_row(ladder_runner *r, const ladder_row *row, ladder_result *res);

#endif
