/* Backward with the gradient average overlapped: model backward reports each
 * region of the flat gradient buffer as it becomes final (from the end of the
 * buffer to its start, lib/model/model.h); regions are collected into buckets of
 * about bucket_bytes and each bucket's reduction is started at once, so it
 * runs while backward goes on with the earlier layers. The result is that of
 * gptx_model_backward + gptx_comm_average_gradients. */
#include <stdio.h>
#include <stdlib.h>

#include "comm_internal.h"
#include "errors.h"
#include "model.h"

#define DEFAULT_BUCKET_BYTES ((size_t)4 << 20)
/* no bucket above this many floats (MPI counts are int) */
#define MAX_BUCKET_FLOATS ((size_t)1 << 26)

typedef struct bucketer {
    gptx_comm *comm;
    float *grads;
    size_t pending_lo, pending_hi; /* final, not yet started: [lo, hi) */
    size_t bucket_floats;
    float scale;
    int uniform;
    void **inflight; /* engine handles, oldest first; NULL once finished */
    int ninflight, cap, first_open;
    int started; /* buckets started (for the caller's statistics) */
} bucketer;

/* Tests the unfinished buckets once each (MPI progresses them only inside
 * its calls); *all_done = 1 when none is left. */
static int progress(bucketer *b, int *all_done) {
    comm_engine *e = b->comm->engine;
    for (int i = b->first_open; i < b->ninflight; i++) {
        if (!b->inflight[i]) continue;
        int done = 0;
        GPTX_TRY(gptx_comm_engine_result(b->comm, e->ops->bucket_test(e, b->inflight[i], &done)));
        if (done) b->inflight[i] = NULL;
    }
    while (b->first_open < b->ninflight && !b->inflight[b->first_open]) b->first_open++;
    *all_done = b->first_open == b->ninflight;
    return GPTX_OK;
}

static int test_all(void *arg, int *done) { return progress(arg, done); }

/* Starts the pending region's reduction, in pieces of at most MAX_BUCKET_FLOATS. */
static int launch(bucketer *b) {
    comm_engine *e = b->comm->engine;
    while (b->pending_hi > b->pending_lo) {
        size_t n = b->pending_hi - b->pending_lo;
        if (n > MAX_BUCKET_FLOATS) n = MAX_BUCKET_FLOATS;
        size_t lo = b->pending_hi - n;
        if (b->ninflight == b->cap) {
            int cap = b->cap ? 2 * b->cap : 16;
            void **p = realloc(b->inflight, (size_t)cap * sizeof *p);
            if (!p) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
            b->inflight = p;
            b->cap = cap;
        }
        void *h = NULL;
        GPTX_TRY(gptx_comm_engine_result(
            b->comm, e->ops->bucket_start(e, b->grads + lo, n, b->scale, b->uniform, &h)));
        b->inflight[b->ninflight++] = h;
        b->started++;
        b->pending_hi = lo;
    }
    return GPTX_OK;
}

/* The model's hook: region [offset, offset + count) is final. */
static int on_ready(void *arg, size_t offset, size_t count) {
    bucketer *b = arg;
    if (offset + count != b->pending_lo)
        return GPTX_FAIL(GPTX_ERR_STATE, "gradient region [%zu, %zu) is not next to [%zu, ...)",
                         offset, offset + count, b->pending_lo);
    b->pending_lo = offset;
    if (b->pending_hi - b->pending_lo >= b->bucket_floats) GPTX_TRY(launch(b));
    int all_done = 0;
    return progress(b, &all_done);
}

static void release_all(bucketer *b) {
    comm_engine *e = b->comm->engine;
    for (int i = 0; i < b->ninflight; i++)
        if (b->inflight[i]) e->ops->bucket_release(e, b->inflight[i]);
    free(b->inflight);
}

int gptx_comm_backward(gptx_comm *comm, gptx_model *model, float loss_scale,
                       int64_t local_tokens, size_t bucket_bytes) {
    GPTX_ENTER(comm, GPTX_KIND_COMM);
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_TRY(gptx_comm_check_reduction(comm, model, local_tokens, __func__));
    GPTX_TRY(gptx_model_backward_check(model, loss_scale, __func__));
    comm_engine *e = comm->engine;
    if (e->world_size == 1 && !model->exact_bins)
        return gptx_model_backward_hooked(model, loss_scale, NULL, NULL, __func__);
    if (!gptx_comm_engine_takes_model_buffers(comm) || model->exact_bins) {
        /* the gradients go through host staging, or a rank_invariant model
         * adds the whole pass exactly first: nothing to overlap */
        GPTX_TRY(gptx_model_backward_hooked(model, loss_scale, NULL, NULL, __func__));
        return gptx_comm_average_gradients(comm, model, local_tokens);
    }
    bucketer b = {0};
    b.comm = comm;
    b.grads = model->grads;
    b.pending_lo = b.pending_hi = model->layout.nparams;
    size_t floats = (bucket_bytes ? bucket_bytes : DEFAULT_BUCKET_BYTES) / sizeof(float);
    b.bucket_floats = floats > 0 ? floats : 1;
    int64_t total = 0;
    /* the weights must be known before the first bucket leaves */
    GPTX_TRY(gptx_comm_token_scale(comm, local_tokens, __func__, &b.scale, &b.uniform, &total));
    if (total == 0) { /* nobody had a target: the mean is empty, use 0 on every rank */
        GPTX_TRY(gptx_model_backward_hooked(model, loss_scale, NULL, NULL, __func__));
        gptx_model_grads_changed(model);
        return model->ctx->ops->fill_f32(model->ctx->be, model->grads, 0.0f,
                                         model->layout.nparams);
    }
    int rc = gptx_model_backward_hooked(model, loss_scale, on_ready, &b, __func__);
    if (rc == GPTX_OK && b.pending_lo != 0)
        rc = GPTX_FAIL(GPTX_ERR_STATE, "backward left gradients [0, %zu) unreported",
                       b.pending_lo);
    if (rc == GPTX_OK) rc = launch(&b);
    if (rc == GPTX_OK)
        rc = gptx_comm_engine_result(
            comm, gptx_comm_poll_until_done(e, test_all, &b, comm->timeout_s, "gptx_comm_backward",
                                            "overlapped gradient buckets"));
    if (rc != GPTX_OK && !comm->failed && b.ninflight > b.first_open) {
        /* buckets other ranks may still wait for: this communicator is done */
        comm->failed = 1;
        snprintf(comm->failure, sizeof comm->failure, "%s", gptx_last_error());
    }
    release_all(&b);
    return rc;
}
