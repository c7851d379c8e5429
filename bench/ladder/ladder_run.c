#include "ladder_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"
#include "gptx/gptx_experimental.h"

#include "../bench_common.h"

int ladder_runner_init(ladder_runner *r, const ladder_params *p, const ladder_data *data) {
    memset(r, 0, sizeof *r);
    r->p = p;
    r->data = data;
    size_t rows = (size_t)p->shape.batch * p->shape.seq;
    r->scratch = malloc(rows * (size_t)p->shape.padded_vocab * sizeof *r->scratch);
    if (!r->scratch) {
        fprintf(stderr, "gptx-bench: out of host memory for the logits\n");
        return -1;
    }
    return 0;
}

void ladder_runner_free(ladder_runner *r) {
    free(r->base_logits);
    free(r->scratch);
    memset(r, 0, sizeof *r);
}

/* A failing call ends the row; its message is kept for the report. */
#define ROW_TRY(call)                                                                  \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != GPTX_OK) {                                                          \
            if (rc_ == GPTX_ERR_NON_FINITE) res->finite = 0;                           \
            snprintf(res->error, sizeof res->error, "%s: %s", gptx_status_name(rc_),   \
                     gptx_last_error());                                               \
            goto done;                                                                 \
        }                                                                              \
    } while (0)

/* zero_grad + forward with targets + backward + AdamW: the timed unit */
static int train_step(gptx_model *m, gptx_optimizer *opt, const ladder_data *d, int64_t step,
                      int B, int T, int fused_ce) {
    const int32_t *in = ladder_data_batch(d, step, B, T);
    float loss = 0.0f;
    int rc = gptx_model_zero_grad(m);
    if (rc == GPTX_OK && fused_ce) rc = gptx_model_forward_backward(m, in, in + 1, B, T, 1.0f, &loss);
    if (rc == GPTX_OK && !fused_ce) rc = gptx_model_forward(m, in, in + 1, B, T, &loss);
    if (rc == GPTX_OK && !fused_ce) rc = gptx_model_backward(m, 1.0f);
    if (rc == GPTX_OK) rc = gptx_optimizer_step(opt, m, NULL);
    return rc;
}

/* max |a - b| and max |a - b| / max |a| over the first `cols` columns of each
 * of `rows` rows; b has `ldb` columns per row. A value finite on one side
 * only, or NaN, makes the error infinite. */
static void logits_error(const float *a, const float *b, size_t rows, size_t cols, size_t ldb,
                         double *max_abs, double *max_rel) {
    double worst = 0.0, scale = 0.0;
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) {
            double x = a[r * cols + c], y = b[r * ldb + c];
            if (!isfinite(x) || !isfinite(y)) {
                if (x != y) worst = INFINITY; /* NaN != NaN too */
                continue;
            }
            worst = fmax(worst, fabs(x - y));
            scale = fmax(scale, fabs(x));
        }
    *max_abs = worst;
    *max_rel = worst / fmax(scale, 1e-30);
}

/* mean cross-entropy of `rows` rows of `cols` logits against targets, in
 * double (masked columns are -inf and drop out of the sum) */
static double cross_entropy(const float *logits, size_t rows, size_t cols,
                            const int32_t *targets) {
    double total = 0.0;
    for (size_t r = 0; r < rows; r++) {
        const float *row = logits + r * cols;
        double mx = -INFINITY, sum = 0.0;
        for (size_t c = 0; c < cols; c++) mx = fmax(mx, row[c]);
        for (size_t c = 0; c < cols; c++) sum += exp((double)row[c] - mx);
        total += mx + log(sum) - row[targets[r]];
    }
    return total / (double)rows;
}

void ladder_run_row(ladder_runner *r, const ladder_row *row, ladder_result *res) {
    const ladder_params *p = r->p;
    const ladder_shape *s = &p->shape;
    memset(res, 0, sizeof *res);
    res->finite = 1;
    res->logits_max_abs = res->logits_max_rel = res->loss_diff = NAN;
    res->eval_loss = NAN;
    int B = s->batch * row->v.batch_mult, T = s->seq;
    int Vp = row->v.padded_vocab ? s->padded_vocab : s->vocab;
    res->B = B;
    res->tokens_per_step = (int64_t)B * T;

    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_optimizer *opt = NULL;
    gptx_timer *timer = NULL;

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = p->threads;
    co.precision = row->v.precision;
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    cfg.vocab_size = s->vocab;
    cfg.padded_vocab_size = Vp;
    cfg.context_length = T;
    cfg.n_layer = s->layers;
    cfg.n_head = s->heads;
    cfg.n_embd = s->width;
    cfg.qkv_bias = 1;
    cfg.tied_head = 1;
    cfg.mask_padded_logits = 1;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);

    /* cold start: everything from nothing to the end of the first step */
    double t0 = bench_now_s();
    ROW_TRY(gptx_context_create(&ctx, &co));
    ROW_TRY(gptx_context_set_variant(ctx, GPTX_VARIANT_ATTENTION, row->v.attention));
    ROW_TRY(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_QKV, row->v.fused_qkv));
    ROW_TRY(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_NORM_GELU, row->v.fused_norm_gelu));
    ROW_TRY(gptx_context_set_variant(ctx, GPTX_VARIANT_FUSED_ADAMW, row->v.fused_adamw));
    res->threads = gptx_context_num_threads(ctx);
    ROW_TRY(gptx_model_create(&model, ctx, &cfg));
    ROW_TRY(gptx_model_init_random(model, p->seed));
    ROW_TRY(gptx_optimizer_create(&opt, model, &ao));
    ROW_TRY(gptx_timer_create(&timer, ctx, GPTX_TIMER_TRAINING_STEPS));
    res->create_s = bench_now_s() - t0;
    int64_t step = 0;
    ROW_TRY(gptx_timer_start(timer));
    ROW_TRY(train_step(model, opt, r->data, step++, B, T, row->v.fused_ce));
    ROW_TRY(gptx_timer_stop(timer, res->tokens_per_step));
    res->cold_start_s = bench_now_s() - t0;
    ROW_TRY(gptx_timer_interval(timer, 0, &res->first_step_s, NULL));

    for (int w = 0; w < p->warmup; w++) ROW_TRY(train_step(model, opt, r->data, step++, B, T, row->v.fused_ce));
    /* each repeat is one timer interval of `steps` steps */
    for (int rep = 0; rep < p->repeats; rep++) {
        ROW_TRY(gptx_timer_start(timer));
        for (int i = 0; i < p->steps; i++) ROW_TRY(train_step(model, opt, r->data, step++, B, T, row->v.fused_ce));
        ROW_TRY(gptx_timer_stop(timer, res->tokens_per_step * p->steps));
    }
    gptx_timer_report tr;
    gptx_timer_report_init(&tr);
    ROW_TRY(gptx_timer_get_report(timer, &tr));
    double per_repeat = (double)res->tokens_per_step * p->steps;
    res->repeats = tr.intervals - 1;
    res->repeat_median_s = tr.steady_median_seconds;
    res->tps_median = per_repeat / tr.steady_median_seconds;
    res->tps_min = per_repeat / tr.steady_max_seconds;
    res->tps_max = per_repeat / tr.steady_min_seconds;
    gptx_memory_stats mem;
    gptx_memory_stats_init(&mem);
    ROW_TRY(gptx_context_memory(ctx, &mem));
    res->peak_bytes = mem.peak;

    /* numerics 1: held-out loss after all N training steps, recomputed in
     * double from the logits: the float loss would round differences below
     * ~1e-6 away */
    float eval_loss = NAN;
    int base_rows = s->batch;
    const ladder_data *d = r->data;
    size_t n_rows = (size_t)base_rows * T;
    ROW_TRY(gptx_model_forward(model, d->eval_inputs, d->eval_targets, base_rows, T, &eval_loss));
    ROW_TRY(gptx_model_get_logits(model, r->scratch, n_rows * (size_t)Vp));
    res->eval_loss = cross_entropy(r->scratch, n_rows, (size_t)Vp, d->eval_targets);
    if (!isfinite(eval_loss) || !isfinite(res->eval_loss)) res->finite = 0;

    /* numerics 2: the freshly initialised model (same seed: same parameters)
     * on the held-out batch, against the baseline's logits */
    ROW_TRY(gptx_model_init_random(model, p->seed));
    ROW_TRY(gptx_model_forward(model, d->eval_inputs, NULL, base_rows, T, NULL));
    ROW_TRY(gptx_model_get_logits(model, r->scratch, n_rows * (size_t)Vp));
    if (row->is_baseline) {
        /* the reference: keep the first vocab columns of each row */
        free(r->base_logits);
        r->base_logits = malloc(n_rows * (size_t)s->vocab * sizeof *r->base_logits);
        if (!r->base_logits) {
            snprintf(res->error, sizeof res->error, "out of host memory for the logits");
            goto done;
        }
        for (size_t i = 0; i < n_rows; i++)
            memcpy(r->base_logits + i * s->vocab, r->scratch + i * (size_t)Vp,
                   (size_t)s->vocab * sizeof(float));
        r->base_eval_loss = res->eval_loss;
        res->logits_max_abs = res->logits_max_rel = res->loss_diff = 0.0;
    } else if (!r->base_logits) {
        snprintf(res->error, sizeof res->error, "the baseline row failed: nothing to compare with");
        goto done;
    } else {
        logits_error(r->base_logits, r->scratch, n_rows, (size_t)s->vocab, (size_t)Vp,
                     &res->logits_max_abs, &res->logits_max_rel);
        res->loss_diff = fabs(res->eval_loss - r->base_eval_loss);
    }
    res->ran = 1;

done:
    if (!res->ran && row->is_baseline) {
        free(r->base_logits);
        r->base_logits = NULL;
    }
    res->pass = res->ran && res->finite;
    if (res->pass && !row->is_baseline) {
        /* comparisons written so that NaN fails */
        int logits_ok = res->logits_max_abs <= row->logits_tol;
        int loss_ok = row->loss_tol < 0 || res->loss_diff <= row->loss_tol;
        res->pass = logits_ok && loss_ok;
    }
    gptx_timer_destroy(timer);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
}
