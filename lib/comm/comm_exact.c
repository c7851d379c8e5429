/* The ranks' rank-invariant gradients added up (gptx_context_options.
 * rank_invariant; model_exact.c): every rank raises each chunk's window to
 * the highest any rank reached (an all-reduce of maxima), then the bins are
 * added as integers (an all-reduce of int64 sums: associative, so any
 * algorithm gives every rank the same bits), and each rank reads the sum
 * back rounded once. The result depends only on the set of backward passes
 * folded on all ranks together, not on which rank folded which. The bins
 * and windows are host memory: only the CPU backend offers these sums. */
#include <stdlib.h>

#include "comm_internal.h"
#include "exact_bins.h"
#include "model.h"

/* values per collective: far below an engine's int count limit */
#define EXACT_PIECE ((size_t)1 << 26)

static int allreduce_i64(gptx_comm *c, int64_t *v, size_t count, gptx_comm_op op) {
    comm_engine *e = c->engine;
    for (size_t at = 0; at < count; at += EXACT_PIECE) {
        size_t k = count - at < EXACT_PIECE ? count - at : EXACT_PIECE;
        GPTX_TRY(gptx_comm_engine_result(c, e->ops->allreduce_host(e, v + at, k, COMM_I64, op)));
    }
    return GPTX_OK;
}

/* The chunks' common windows: the highest on any rank. */
static int common_windows(gptx_comm *c, gptx_model *m) {
    size_t n = m->layout.nparams, chunks = gptx_exact_chunks(n);
    int64_t *w = malloc(chunks * sizeof *w);
    int32_t *to = malloc(chunks * sizeof *to);
    int rc = w && to ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    for (size_t i = 0; rc == GPTX_OK && i < chunks; i++) w[i] = m->exact_win[i];
    if (rc == GPTX_OK) rc = allreduce_i64(c, w, chunks, GPTX_COMM_MAX);
    for (size_t i = 0; rc == GPTX_OK && i < chunks; i++) to[i] = (int32_t)w[i];
    if (rc == GPTX_OK) rc = m->ops.exact_raise(m->be, m->exact_bins, m->exact_win, to, n);
    free(w);
    free(to);
    return rc;
}

int gptx_comm_exact_sum(gptx_comm *c, gptx_model *m) {
    if (c->engine->world_size > 1) {
        GPTX_TRY(common_windows(c, m));
        GPTX_TRY(allreduce_i64(c, m->exact_bins, EXACT_LEVELS * m->layout.nparams,
                               GPTX_COMM_SUM));
    }
    return gptx_model_exact_to_grads(m);
}
