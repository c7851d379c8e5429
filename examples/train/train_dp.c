#include "train_dp.h"

#include <math.h>
#include <stdio.h>

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
    double sum = 0;
    int64_t count = 0;
    for (int b = rank; b < n_batches; b += world) {
        /* batch b of epoch 0, in the loader's own seed */
        gptx_dataloader_state at = st;
        at.epoch = 0;
        at.batch = b;
        const int32_t *in, *tg;
        int rows;
        float l;
        int64_t c;
        if ((rc = gptx_dataloader_set_state(val, &at))) return rc;
        if ((rc = gptx_dataloader_next(val, &in, &tg, &rows, NULL))) return rc;
        if ((rc = gptx_model_forward(model, in, tg, rows, T, &l))) return rc;
        if ((rc = gptx_model_num_loss_tokens(model, &c))) return rc;
        sum += (double)l * (double)c;
        count += c;
    }
    if (world > 1) {
        /* count travels as a double: exact below 2^53 tokens */
        double totals[2] = {sum, (double)count};
        if ((rc = gptx_comm_allreduce_f64(comm, totals, 2, GPTX_COMM_SUM))) return rc;
        sum = totals[0];
        count = (int64_t)totals[1];
    }
    *loss = count ? sum / (double)count : NAN;
    *tokens = count;
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
