/* Rank-invariant gradient accumulation (gptx_context_options.rank_invariant;
 * docs/distributed.md, "Rank-invariant training"). Each backward's gradient
 * is folded into integer bins (lib/core/exact_bins.h) instead of added in
 * fp32, so the accumulated gradient -- and, once the communicator has added
 * the ranks' bins as integers, the global one -- does not depend on the
 * order of the backward passes nor on how they were split over micro-steps
 * and ranks. The backend does the arithmetic (backend.h exact_*). */
#include "exact_bins.h"
#include "model.h"

#define OPS(m) (&(m)->ops)
#define BE(m) ((m)->be)

int gptx_model_exact_create(gptx_model *m) {
    gptx_context *ctx = m->ctx;
    if (!ctx->opts.rank_invariant) return GPTX_OK;
    const gptx_backend_ops *o = OPS(m);
    if (!o->exact_fold || !o->exact_raise || !o->exact_value)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "rank_invariant: backend '%s' has no rank-invariant gradient sums",
                         o->name);
    size_t n = m->layout.nparams, chunks = gptx_exact_chunks(n);
    GPTX_TRY(o->alloc(BE(m), n * EXACT_LEVELS * sizeof(int64_t), (void **)&m->exact_bins));
    GPTX_TRY(o->alloc(BE(m), chunks * sizeof(int32_t), (void **)&m->exact_win));
    return gptx_model_exact_clear(m);
}

void gptx_model_exact_release(gptx_model *m) {
    if (m->exact_bins) OPS(m)->free(BE(m), m->exact_bins);
    if (m->exact_win) OPS(m)->free(BE(m), m->exact_win);
}

/* zero bits are an empty sum (EXACT_EMPTY = 0): the fp32 fill writes them */
int gptx_model_exact_clear(gptx_model *m) {
    if (!m->exact_bins) return GPTX_OK;
    size_t n = m->layout.nparams, chunks = gptx_exact_chunks(n);
    _Static_assert(sizeof(int64_t) == 2 * sizeof(float) && sizeof(int32_t) == sizeof(float),
                   "the bins are cleared as floats");
    GPTX_TRY(OPS(m)->fill_f32(BE(m), (float *)m->exact_bins, 0.0f, 2 * EXACT_LEVELS * n));
    GPTX_TRY(OPS(m)->fill_f32(BE(m), (float *)m->exact_win, 0.0f, chunks));
    m->exact_dirty = 0;
    return GPTX_OK;
}

/* The backward about to run writes its own gradient: from zero (folded
 * into its first writes where the backend offers it). */
int gptx_model_exact_before_backward(gptx_model *m) {
    if (!m->exact_bins) return GPTX_OK;
    if (m->grad_fusion & GPTX_GRAD_FUSE_ZERO) {
        m->grads_zero_pending = 1;
        return GPTX_OK;
    }
    m->grads_zero_pending = 0;
    return OPS(m)->fill_f32(BE(m), m->grads, 0.0f, m->layout.nparams);
}

int gptx_model_exact_fold(gptx_model *m) {
    if (!m->exact_bins) return GPTX_OK;
    GPTX_TRY(OPS(m)->exact_fold(BE(m), m->exact_bins, m->exact_win, m->grads,
                                m->layout.nparams));
    m->exact_dirty = 1;
    gptx_model_grads_changed(m); /* grads is one pass's, not the sum's */
    return GPTX_OK;
}

int gptx_model_exact_to_grads(gptx_model *m) {
    if (!m->exact_bins) return GPTX_OK;
    GPTX_TRY(OPS(m)->exact_value(BE(m), m->grads, m->exact_bins, m->exact_win,
                                 m->layout.nparams));
    m->exact_dirty = 0;
    m->grads_zero_pending = 0;
    gptx_model_grads_changed(m);
    return GPTX_OK;
}
