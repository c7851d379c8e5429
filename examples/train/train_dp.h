/* gptx-train's data-parallel pieces: validation spread over the ranks and a
 * barrier that carries a status. tests/comm checks them against a single
 * process. With one rank (the "single" engine) they do exactly what the
 * single-process trainer did, in the same order. */
#ifndef GPTX_TRAIN_DP_H
#define GPTX_TRAIN_DP_H

#include <stdint.h>

#include "gptx/gptx.h"

/* Token-weighted mean loss over the first n_batches batches of val (from its
 * start; fewer if the data has fewer), the same windows a single process
 * evaluates: rank r runs batches r, r + W, r + 2W, ... and one allreduce
 * gathers each batch's loss sum and token count into its own slot; the
 * slots are then added in batch order, so every rank gets the same *loss
 * and *tokens, and the same bits for any number of ranks. val must be
 * created with world_size 1 on every rank (each rank reads the whole
 * validation data). */
int dp_evaluate(gptx_comm *comm, gptx_model *model, gptx_dataloader *val, int n_batches, int T,
                double *loss, int64_t *tokens);

/* A barrier that also tells every rank whether some rank failed: returns
 * GPTX_OK when every rank passed ok = 1, else GPTX_ERR_STATE after printing
 * how many ranks failed (the failing rank has printed its own error), or the
 * collective's own error. With one rank: GPTX_OK iff ok. */
int dp_agree(gptx_comm *comm, int ok, const char *what);

#endif
