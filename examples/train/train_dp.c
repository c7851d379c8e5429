#include "train_dp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* Batch b's loss sum and token count, into slot b. */
static int eval_batch(gptx_model *model, gptx_dataloader *val, const gptx_dataloader_state *st,
                      int b, int T, double *sum, double *count) {
    gptx_dataloader_state at = *st; /* batch b of epoch 0, in the loader's own seed */
    at.epoch = 0;
    at.batch = b;
    const int32_t *in, *tg;
    int rows, rc;
    float l;
    int64_t c;
    if ((rc = gptx_dataloader_set_state(val, &at))) return rc;
    if ((rc = gptx_dataloader_next(val, &in, &tg, &rows, NULL))) return rc;
    if ((rc = gptx_model_forward(model, in, tg, rows, T, &l))) return rc;
    if ((rc = gptx_model_num_loss_tokens(model, &c))) return rc;
    sum[b] = (double)l * (double)c;
    count[b] = (double)c;
    return GPTX_OK;
}

int dp_evaluate(gptx_comm *comm, gptx_model *model, gptx_dataloader *val, int n_batches, int T,
                double *loss, int64_t *tokens) {
    gptx_dataloader_state st;
    gptx_dataloader_state_init(&st);
    int rc = gptx_dataloader_get_state(val, &st);
    if (rc) return rc;
    gptx_dataloader_info info;
    gptx_dataloader_info_init(&info);
    if ((rc = gptx_dataloader_info_get(val, &info))) return rc;
    if (info.batches_per_epoch < n_batches) n_batches = (int)info.batches_per_epoch;
    const int rank = gptx_comm_rank(comm), world = gptx_comm_world_size(comm);
    /* a slot per batch, 0 where another rank evaluates it: the all-reduce
     * then adds zeros (exact), and the batches are added up in their own
     * order, the same bits whatever the number of ranks */
    double *slots = calloc(2 * (size_t)n_batches + 1, sizeof *slots);
    if (!slots) return GPTX_ERR_NO_MEMORY;
    double *sum = slots, *count = slots + n_batches;
    for (int b = rank; b < n_batches && rc == GPTX_OK; b += world)
        rc = eval_batch(model, val, &st, b, T, sum, count);
    /* counts travel as doubles: exact below 2^53 tokens */
    if (rc == GPTX_OK && world > 1)
        rc = gptx_comm_allreduce_f64(comm, slots, 2 * (size_t)n_batches, GPTX_COMM_SUM);
    double total = 0, n = 0;
    for (int b = 0; rc == GPTX_OK && b < n_batches; b++) {
        total += sum[b];
        n += count[b];
    }
    free(slots);
    if (rc) return rc;
    *loss = n > 0 ? total / n : NAN;
    *tokens = (int64_t)n;
    return GPTX_OK;
}

int dp_agree(gptx_comm *comm, int ok, const char *what) {
    if (gptx_comm_world_size(comm) == 1) return ok ? GPTX_OK : GPTX_ERR_STATE;
    int64_t failed = ok ? 0 : 1;
    int rc = gptx_comm_allreduce_i64(comm, &failed, 1, GPTX_COMM_SUM);
    if (rc) {
        fprintf(stderr, "gptx-train: rank %d: %s\n", gptx_comm_rank(comm), gptx_last_error());
        return rc;
    }
    if (failed) {
        fprintf(stderr, "gptx-train: rank %d: %lld rank(s) failed during %s; stopping\n",
                gptx_comm_rank(comm), (long long)failed, what);
        return GPTX_ERR_STATE;
    }
    return GPTX_OK;
}
