/* gptx-train's loop: at each step, what is due (validation, a sample, a
 * checkpoint), then one optimizer step; after the last step (or a stop),
 * only what is due. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_error.h"
#include "train_ckpts.h"
#include "train_dp.h"
#include "train_run.h"

/* Ctrl-C (SIGINT), and SIGTERM, which service managers and job schedulers
 * send first (issue 34, item 10): the run ends after the step in progress,
 * as if it were the last (validation, checkpoint, model, plot), and exits
 * with status 128 + the signal (130, 143). */
static volatile sig_atomic_t interrupted;
static void on_stop_signal(int sig) {
    interrupted = sig;
}

int run_interrupted(void) {
    return interrupted;
}

static void watch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND; /* a second one kills at once */
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGINT);
    sigaddset(&sa.sa_mask, SIGTERM);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Whether to stop now: 1 after Ctrl-C or when rank 0 could not write its
 * metrics (local_failure), as if the step were the last; 2 at once, writing
 * nothing more, when rank 0 no longer holds --out-dir (lost). Every rank
 * must agree, or their collectives would part ways (mpirun forwards the
 * signal, but not at the same step). */
static int stop_requested(gptx_comm *comm, int W, int local_failure, int lost) {
    double flag = lost ? 2 : interrupted || local_failure;
    if (W <= 1) return (int)flag;
    if (gptx_comm_allreduce_f64(comm, &flag, 1, GPTX_COMM_MAX) != GPTX_OK) return 2;
    return (int)flag;
}

/* Before a file is written into --out-dir: rank 0 still holds it (the
 * folder and its lock were not removed or replaced); every rank learns it.
 * 0, or -1 after rank 0's message. */
int run_out_dir_held(train_run *run) {
    return run_agree(run, train_report_held(&run->rep) == 0, "holding --out-dir");
}

/* Learning rate for optimizer step `step` (0-based) of `total`. */
static float lr_at(const train_options *o, int64_t step, int64_t total) {
    if (step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    if (o->schedule == SCHEDULE_CONSTANT) return o->lr;
    double span = (double)(total - o->warmup);
    double progress = span > 1 ? (double)(step - o->warmup) / (span - 1) : 1.0;
    double min_lr = o->lr * o->min_lr_frac;
    double frac = o->schedule == SCHEDULE_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
    return (float)(min_lr + (o->lr - min_lr) * frac);
}

/* A continuation of --prompt, printed and logged (rank 0 calls it). */
int run_sample(train_run *run) {
    const train_options *o = &run->o;
    size_t plen = strlen(o->prompt), n_ids = 0;
    int32_t *ids = malloc((plen + 1) * sizeof *ids);
    int32_t *out = malloc(((size_t)o->sample_tokens + 1) * sizeof *out);
    char *text = NULL;
    int rc = !ids || !out ? GPTX_ERR_NO_MEMORY : GPTX_OK;
    if (!rc)
        rc = gptx_tokenizer_encode(run->tok, o->prompt, plen, train_options_allow_special(o), ids,
                                   plen + 1, &n_ids);
    if (!rc && n_ids == 0) {
        ids[0] = gptx_tokenizer_eot_token(run->tok); /* an empty prompt starts from <|endoftext|> */
        n_ids = 1;
    }
    if (!rc) rc = gptx_generate(run->model, run->sampler, ids, (int)n_ids, o->sample_tokens, out);
    size_t need = 0;
    if (!rc) {
        rc = gptx_tokenizer_decode(run->tok, out, (size_t)o->sample_tokens, NULL, 0, &need);
        if (rc == GPTX_ERR_SHAPE) rc = GPTX_OK; /* asked for the size */
    }
    if (!rc && !(text = malloc(need + 1))) rc = GPTX_ERR_NO_MEMORY;
    if (!rc) rc = gptx_tokenizer_decode(run->tok, out, (size_t)o->sample_tokens, text, need, &need);
    if (!rc) {
        text[need] = '\0';
        train_report_line(&run->rep, "step %lld | sample: %s%s\n", (long long)run->step,
                          o->prompt, text);
    }
    free(ids);
    free(out);
    free(text);
    return rc;
}

/* Validation every --eval-every steps and at the end; with --save-best,
 * the model at each new best. */
static int evaluate(train_run *run, int last) {
    const train_options *o = &run->o;
    if (!run->val || !((o->eval_every > 0 && run->step % o->eval_every == 0) || last)) return 0;
    /* --eval-batches counts global batches: W per-rank batches of --batch rows
     * each, the windows one process with the global batch evaluates; with
     * --rank-invariant the global batch has no per-rank part: batches of
     * --batch rows, whatever the number of ranks */
    int n_eval = o->rank_invariant ? o->eval_batches : o->eval_batches * run->world;
    TRY(run, dp_evaluate(run->comm, run->model, run->val, n_eval, o->context, &run->val_loss,
                         &run->val_tokens));
    train_report_val(&run->rep, run->step, run->tokens_seen, run->val_loss, run->val_tokens);
    if (!(run->val_loss < run->best_val)) return 0;
    run->best_val = run->val_loss; /* the same on every rank: dp_evaluate is global */
    if (!o->save_best || run->step == 0) return 0;
    if (run_out_dir_held(run) != 0) return -1;
    char best[4096];
    snprintf(best, sizeof best, "%s/best.safetensors", o->out_dir);
    if (run_own_path(run, best) != 0) return -1;
    ON_RANK0(run, gptx_model_save(run->model, best), "writing the best model");
    train_report_line(&run->rep, "step %lld | best validation loss so far: model %s\n",
                      (long long)run->step, best);
    return 0;
}

/* GPTX_TRAIN_TEST_KILL_BEFORE_LATEST=N (tests only): the process kills
 * itself once the checkpoint of step N is durable, before `latest` names it
 * (a crash at the worst moment). */
static void test_kill_before_latest(const train_run *run) {
    const char *at = getenv("GPTX_TRAIN_TEST_KILL_BEFORE_LATEST");
    if (at && atoll(at) == run->step) raise(SIGKILL);
}

/* The checkpoint: every --checkpoint-every steps and at the end (when the
 * flag was given, or the run stops early), never at the step a resumed run
 * started from (that checkpoint is on disk already). Each is a new file
 * DIR/checkpoint-<step>.safetensors; once it is durable, DIR/latest names
 * it, and only then --keep-checkpoints removes this run's oldest ones. */
static int checkpoint(train_run *run, int stop, int last) {
    const train_options *o = &run->o;
    if (!((o->checkpoint_every >= 0 || stop) && run->step > run->start_step &&
          ((o->checkpoint_every > 0 && run->step % o->checkpoint_every == 0) || last)))
        return 0;
    char name[CKPT_NAME_MAX + 8], path[4200];
    ckpt_name(name, sizeof name, run->step);
    snprintf(path, sizeof path, "%s/%s", o->out_dir, name);
    run->ts.lr_schedule_step = run->step;
    run->ts.tokens_seen = run->tokens_seen;
    free(run->record);
    if (!(run->record = run_record(run))) TRY(run, GPTX_ERR_NO_MEMORY);
    run->ts.user_metadata = run->record;
    if (run_out_dir_held(run) != 0 || run_own_path(run, path) != 0) return -1;
    if (o->zero1) { /* collective: the moments are gathered, rank 0 writes */
        if (run_settle(run, gptx_checkpoint_save(run->model, &run->ts, path),
                       "writing the checkpoint") != 0)
            return -1;
    } else {
        ON_RANK0(run, gptx_checkpoint_save(run->model, &run->ts, path), "writing the checkpoint");
    }
    if (run->rank == 0) test_kill_before_latest(run);
    if (run_out_dir_held(run) != 0) return -1;
    int ok = run->rank != 0 || (ckpt_write_latest(o->out_dir, run->step) == 0 &&
                                ckpt_retain(o->out_dir, run->run_id, run->step,
                                            o->keep_checkpoints) == 0);
    if (run_agree(run, ok, "recording the checkpoint") != 0) return -1;
    train_report_line(&run->rep, "step %lld | checkpoint %s (gptx-train --resume %s continues "
                      "the run)\n", (long long)run->step, path, o->out_dir);
    return 0;
}

/* Data parallel with --overlap: the bucket size in bytes (0: gradients
 * averaged after backward). */
static size_t overlap_bytes(const train_run *run) {
    if (run->world <= 1 || run->o.overlap_mib <= 0) return 0;
    size_t overlap = (size_t)((double)run->o.overlap_mib * 1048576.0);
    return overlap == 0 ? 1 : overlap;
}

/* A forward pass's outcome: 1 when its loss was not finite (the library
 * refuses it: GPTX_ERR_NON_FINITE), 0 when it succeeded, -1 after the
 * message of any other failure. */
static int pass_result(const train_run *run, int rc) {
    if (rc == GPTX_ERR_NON_FINITE) {
        gptx_clear_error(); /* a result the run reports itself (watch_loss) */
        return 1;
    }
    return rc == GPTX_OK ? 0 : run_fail(run, rc);
}

/* Data parallel: whether any rank's loss was not finite. Every rank calls
 * it once a step, before the step's next collective, so all stop together.
 * 1, 0, or -1 after a failed collective. */
static int any_nonfinite(train_run *run, int mine) {
    if (run->world <= 1) return mine;
    int64_t flag = mine;
    TRY(run, gptx_comm_allreduce_i64(run->comm, &flag, 1, GPTX_COMM_MAX));
    return flag > 0;
}

/* A stop signal between micro-batches of one process: the step is
 * abandoned, as nothing of it is applied before AdamW, and the data loader
 * goes back to where the step started, so the run stops at the state before
 * it (a step of many micro-batches may outlast a job scheduler's grace
 * period). Data parallel, every rank finishes the step (they agree on the
 * stop at its end). 1 abandoned, 0 not, -1 after a failure. */
static int abandon_step(train_run *run, const gptx_dataloader_state *start, int64_t tokens) {
    if (!interrupted || run->world > 1) return 0;
    TRY(run, gptx_dataloader_set_state(run->train, start));
    TRY(run, gptx_timer_stop(run->step_timer, tokens));
    TRY(run, gptx_timer_stop(run->e2e_timer, tokens));
    return 1;
}

/* --grad-accum micro-batches, forward and backward, gradients summed with
 * weight 1/K; the step timer starts once the first one's data is ready.
 * 0, 1 when a loss was not finite (*loss_sum is it; with --overlap the
 * ranks have agreed on it), 2 when a stop signal abandoned the step, -1
 * after a failure. */
static int micro_batches(train_run *run, size_t overlap, int64_t *step_tokens,
                         double *loss_sum) {
    const int K = run->o.grad_accum, T = run->o.context;
    gptx_dataloader_state start;
    gptx_dataloader_state_init(&start);
    TRY(run, gptx_dataloader_get_state(run->train, &start));
    for (int k = 0; k < K; k++) {
        int a = k > 0 ? abandon_step(run, &start, *step_tokens) : 0;
        if (a) return a < 0 ? -1 : 2;
        float l;
        const int32_t *in, *tg;
        int rows, r;
        TRY(run, gptx_dataloader_next(run->train, &in, &tg, &rows, NULL));
        if (k == 0) TRY(run, gptx_timer_start(run->step_timer));
        *step_tokens += (int64_t)rows * T;
        if (overlap && k == K - 1) { /* reduces buckets while backward runs */
            r = pass_result(run, gptx_model_forward(run->model, in, tg, rows, T, &l));
            if (r >= 0) r = any_nonfinite(run, r); /* before the buckets' collectives */
            if (r) return *loss_sum = l, r;
            TRY(run, gptx_comm_backward(run->comm, run->model, 1.0f / (float)K, *step_tokens,
                                        overlap));
        } else { /* cross-entropy and its gradient in one pass */
            float scale = run->test_grad_scale > 0 ? run->test_grad_scale : 1.0f / (float)K;
            r = pass_result(run, gptx_model_forward_backward(run->model, in, tg, rows, T, scale,
                                                             &l));
            if (r > 0 && overlap) r = any_nonfinite(run, r); /* what the others ask at K - 1 */
            if (r) return *loss_sum = l, r;
        }
        *loss_sum += l;
    }
    return 0;
}

/* Rank r's share [lo, hi) of the K micro-batches of a --rank-invariant
 * step: the first K % W ranks one more (lib/comm's comm_shard rule). */
static void unit_share(int K, int W, int r, int *lo, int *hi) {
    int base = K / W, extra = K % W;
    *lo = r * base + (r < extra ? r : extra);
    *hi = *lo + base + (r < extra);
}

/* The loader at micro-batch g of the global order (set only when it is not
 * there already: a rank's micro-batches are consecutive within a step). */
static int seek_unit(train_run *run, int64_t g) {
    if (g == run->next_unit) return GPTX_OK;
    gptx_dataloader_state st;
    gptx_dataloader_state_init(&st);
    int rc = gptx_dataloader_get_state(run->train, &st);
    if (rc != GPTX_OK) return rc;
    st.epoch = g / run->ti.batches_per_epoch;
    st.batch = g % run->ti.batches_per_epoch;
    return gptx_dataloader_set_state(run->train, &st);
}

/* --rank-invariant: a step is micro-batches step * K + k, k < K, of the one
 * global order; this rank runs its share, each with weight 1/K (every
 * micro-batch has --batch rows: drop_last), and the library adds their
 * gradients exactly. losses[k] gets micro-batch k's loss (0 for the
 * others'). 0, 1 when a loss was not finite (*bad is it), 2 when a stop
 * signal abandoned the step (one process), -1 after a failure. */
static int invariant_micro_batches(train_run *run, double *losses, int64_t *step_tokens,
                                   double *bad) {
    const int K = run->o.grad_accum, T = run->o.context;
    int lo, hi;
    unit_share(K, run->world, run->rank, &lo, &hi);
    gptx_dataloader_state start;
    gptx_dataloader_state_init(&start);
    TRY(run, gptx_dataloader_get_state(run->train, &start));
    if (lo == hi) TRY(run, gptx_timer_start(run->step_timer)); /* a rank with none */
    for (int k = lo; k < hi; k++) {
        int a = k > lo ? abandon_step(run, &start, *step_tokens) : 0;
        if (a) {
            run->next_unit = -1; /* the loader was set back */
            return a < 0 ? -1 : 2;
        }
        int64_t g = run->step * K + k;
        const int32_t *in, *tg;
        int rows;
        float l;
        TRY(run, seek_unit(run, g));
        TRY(run, gptx_dataloader_next(run->train, &in, &tg, &rows, NULL));
        run->next_unit = g + 1;
        if (k == lo) TRY(run, gptx_timer_start(run->step_timer));
        *step_tokens += (int64_t)rows * T;
        int r = pass_result(run, gptx_model_forward_backward(run->model, in, tg, rows, T,
                                                             1.0f / (float)K, &l));
        if (r) return *bad = l, r;
        losses[k] = l;
    }
    return 0;
}

/* The step's loss: micro-batch k's in slot k, the others' slots 0 on this
 * rank; gathered (adding zeros is exact) and added in k order, so the bits
 * do not depend on the number of ranks. */
static int invariant_loss(train_run *run, double *losses, double *loss) {
    const int K = run->o.grad_accum;
    if (run->world > 1) TRY(run, gptx_comm_allreduce_f64(run->comm, losses, K, GPTX_COMM_SUM));
    double s = 0;
    for (int k = 0; k < K; k++) s += losses[k];
    *loss = s / K;
    return 0;
}

/* AdamW on the summed gradients: the global token-weighted mean. 0, 1 when
 * the (global) gradient norm was not finite and nothing was updated, -1
 * after a failure. */
static int update(train_run *run, size_t overlap, int64_t step_tokens, float *norm) {
    if (run->o.zero1) /* reduce-scatter, AdamW on this rank's shard, all-gather */
        return pass_result(run, gptx_optimizer_step_sharded(run->opt, run->model, step_tokens,
                                                            norm));
    /* every rank: the global token-weighted mean gradient (no-op for one rank) */
    if (!overlap) TRY(run, gptx_comm_average_gradients(run->comm, run->model, step_tokens));
    return pass_result(run, gptx_optimizer_step(run->opt, run->model, norm));
}

/* The step's line and metrics row: loss, tokens and speed global (token-
 * weighted loss, all ranks' tokens, the slowest rank's time; with
 * --rank-invariant the loss is global already). */
static int report_step(train_run *run, float lr, float norm, int64_t step_tokens, double dt) {
    gptx_timer_report tr;
    gptx_timer_report_init(&tr);
    TRY(run, gptx_timer_get_report(run->step_timer, &tr));
    const int64_t local_tokens = step_tokens;
    if (run->world > 1) {
        double sums[2] = {(double)run->loss * (double)step_tokens, (double)step_tokens};
        TRY(run, gptx_comm_allreduce_f64(run->comm, sums, 2, GPTX_COMM_SUM));
        TRY(run, gptx_comm_allreduce_f64(run->comm, &dt, 1, GPTX_COMM_MAX));
        TRY(run, global_timing(run->comm, &tr));
        if (!run->o.rank_invariant) run->loss = (float)(sums[0] / sums[1]);
        step_tokens = (int64_t)sums[1];
    }
    run->tokens_seen += step_tokens;
    double tps = tr.steady_seconds > 0 ? tr.steady_tokens_per_second : step_tokens / dt;
    double step_s = tr.steady_seconds > 0 ? tr.steady_median_seconds : dt;
    gptx_memory_stats ms;
    gptx_memory_stats_init(&ms);
    TRY(run, gptx_context_memory(run->ctx, &ms));
    train_report_step(&run->rep, run->step + 1, run->total_steps, run->loss, lr, norm,
                      run->tokens_seen, dt, tps,
                      step_s * (double)(run->total_steps - run->step - 1), ms.peak);
    TRY(run, gptx_timer_stop(run->e2e_timer, local_tokens));
    return 0;
}

/* A loss that is not finite ends the run at once: the warning (log and
 * metrics), then no validation, checkpoint, model or plot of this state, so
 * the last checkpoint stays the last good one. Returns -1 (exit status 1). */
static int stop_nonfinite(train_run *run, int in_loss, double loss, float norm) {
    char text[400];
    const long long step = (long long)run->step + 1;
    if (!in_loss)
        snprintf(text, sizeof text, "the gradient norm at step %lld is %g (not finite; the loss "
                 "was %.4f)", step, (double)norm, loss);
    else if (isfinite(loss)) /* data parallel: this rank's was finite */
        snprintf(text, sizeof text, "the training loss of another rank at step %lld is not "
                 "finite", step);
    else /* nan, not -nan: the sign of a NaN means nothing here */
        snprintf(text, sizeof text, "the training loss at step %lld is %s (not finite)", step,
                 isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
    snprintf(text + strlen(text), sizeof text - strlen(text),
             ": the run stops here and writes no checkpoint or model of this state (the last "
             "checkpoint is the last good one); a lower --lr, more --warmup or --grad-clip may "
             "help");
    train_report_warning(&run->rep, step, in_loss ? NAN : loss, text);
    fprintf(stderr, "%sgptx-train%s: %s\n", prog_error_lead(), run->rank_label, text);
    return -1;
}

/* Once a run: a loss far above the one the run started from (twice it,
 * over the steps so far or those kept from before a resume) means it is
 * diverging; the run goes on, as it may recover, but says so. */
static void watch_climb(train_run *run) {
    train_report *r = &run->rep;
    double start = train_report_first_loss(r);
    if (r->warned_climb || !(start > 0) || !((double)run->loss > 2 * start)) return;
    r->warned_climb = 1;
    char text[300];
    snprintf(text, sizeof text, "the loss %.4f is more than twice the %.4f the run started "
             "from: training is diverging (a lower --lr, more --warmup or --grad-clip may help)",
             (double)run->loss, start);
    train_report_warning(r, run->step + 1, run->loss, text);
}

/* GPTX_TRAIN_TEST_POISON_STEP=N (tests only; GPTX_TRAIN_TEST_POISON_RANK=R
 * for one rank): before step N, wte is set to +-3e38, so that step's loss
 * overflows, through the library's real refusal of a non-finite loss. With
 * GPTX_TRAIN_TEST_POISON_WHAT=grad the loss stays finite and that step's
 * gradients are scaled by 3e38 instead of 1/K: the gradient norm overflows,
 * through the optimizer's real refusal. */
static int test_poison(train_run *run) {
    const char *at = getenv("GPTX_TRAIN_TEST_POISON_STEP");
    const char *rank = getenv("GPTX_TRAIN_TEST_POISON_RANK");
    const char *what = getenv("GPTX_TRAIN_TEST_POISON_WHAT");
    run->test_grad_scale = 0;
    if (!at || atoll(at) != run->step + 1 || (rank && atoi(rank) != run->rank)) return 0;
    if (what && !strcmp(what, "grad")) {
        run->test_grad_scale = 3e38f;
        return 0;
    }
    size_t n = (size_t)run->o.padded_vocab * (size_t)run->o.width;
    float *w = malloc(n * sizeof *w);
    if (!w) TRY(run, GPTX_ERR_NO_MEMORY);
    for (size_t i = 0; i < n; i++) w[i] = i % 3 ? 3e38f : -3e38f;
    int rc = gptx_model_set_parameter(run->model, "wte.weight", w, n);
    free(w);
    TRY(run, rc);
    return 0;
}

/* One optimizer step: grad_accum micro-batches, then AdamW. 0, 1 when a
 * stop signal abandoned it (nothing applied), -1 after a failure. */
static int train_step(train_run *run) {
    size_t overlap = overlap_bytes(run);
    float lr = lr_at(&run->o, run->step, run->total_steps), norm = 0;
    int64_t step_tokens = 0;
    double loss_sum = 0;
    TRY(run, gptx_optimizer_set_lr(run->opt, lr));
    TRY(run, gptx_model_zero_grad(run->model));
    if (test_poison(run) != 0) return -1;
    double t0 = now_seconds(), *losses = NULL;
    if (run->o.rank_invariant && !(losses = calloc((size_t)run->o.grad_accum, sizeof *losses)))
        TRY(run, GPTX_ERR_NO_MEMORY);
    int r = losses ? invariant_micro_batches(run, losses, &step_tokens, &loss_sum)
                   : micro_batches(run, overlap, &step_tokens, &loss_sum);
    if (r == 2) { /* abandoned (one process: no collective follows) */
        free(losses);
        return 1;
    }
    if (r >= 0 && !overlap) r = any_nonfinite(run, r); /* before the gradients' collectives */
    double loss = loss_sum / run->o.grad_accum;
    if (r == 0 && losses) r = invariant_loss(run, losses, &loss) != 0 ? -1 : 0;
    free(losses);
    if (r != 0) return r < 0 ? -1 : stop_nonfinite(run, 1, loss_sum, norm);
    if ((r = update(run, overlap, step_tokens, &norm)) != 0)
        return r < 0 ? -1 : stop_nonfinite(run, 0, loss, norm);
    TRY(run, gptx_timer_stop(run->step_timer, step_tokens));
    double dt = now_seconds() - t0;
    run->loss = (float)loss;
    if (report_step(run, lr, norm, step_tokens, dt) != 0) return -1;
    watch_climb(run);
    return 0;
}

/* Step by step to --steps, or to an earlier stop that every rank agrees on
 * (Ctrl-C, a metrics file that cannot be written), which then counts as the
 * last step. The end-to-end timer takes each iteration whole. */
int run_loop(train_run *run) {
    run->val_loss = NAN;
    run->val_tokens = 0;
    run->loss = NAN;
    watch_stop_signals();
    run->start_step = run->step; /* a resumed run's checkpoint is already on disk */
    for (;; run->step++) {
        int stop = run->step < run->total_steps
                       ? stop_requested(run->comm, run->world, train_report_ok(&run->rep) != 0,
                                        train_report_held(&run->rep) != 0)
                       : 0;
        if (stop == 2) return -1; /* the folder is not ours any more: not one more write */
        int last = run->step == run->total_steps || stop;
        if (stop) {
            train_report_line(&run->rep, "step %lld | %s: validating, writing the checkpoint, "
                              "the model and the plot\n", (long long)run->step,
                              interrupted == SIGTERM ? "terminated (SIGTERM)"
                              : interrupted          ? "interrupted"
                                                     : "stopping");
            run->total_steps = run->step;
        }
        TRY(run, gptx_timer_start(run->e2e_timer));
        if (evaluate(run, last) != 0) return -1;
        if (run->o.sample_every > 0 && run->step > 0 && run->step % run->o.sample_every == 0 &&
            !last)
            ON_RANK0(run, run_sample(run), "sampling");
        if (checkpoint(run, stop, last) != 0) return -1;
        if (last) {
            TRY(run, gptx_timer_stop(run->e2e_timer, 0));
            return 0;
        }
        int r = train_step(run);
        if (r < 0) return -1;
        if (r > 0) run->step--; /* abandoned: the loop stops at this step's start */
    }
}
