/* gptx-train's end: the final sample, the trained model, the loss curve,
 * and the summary lines (timing, memory, final losses). */
#include <math.h>
#include <stdio.h>

#include "train_run.h"

/* The two timing lines: training steps alone, and end to end (data parallel:
 * all ranks' tokens over the slowest rank's time). */
static void report_timing(train_run *run, const gptx_timer_report *tr,
                          const gptx_timer_report *er) {
    const int W = run->world;
    const char *glabel = W > 1 ? ", global: all ranks' tokens over the slowest rank's time" : "";
    train_report_line(&run->rep,
        "timing, training steps only (forward+backward+%sAdamW, data ready%s): cold first step "
        "%.3f s; steady %lld steps, median step %.3f s, %.0f tokens/s on average\n",
        W > 1 ? "gradient average+" : "", glabel, tr->cold_seconds,
        (long long)(tr->intervals > 0 ? tr->intervals - 1 : 0), tr->steady_median_seconds,
        tr->steady_tokens_per_second);
    train_report_line(&run->rep,
        "timing, end to end (steps, data, eval, sampling, checkpoints%s): cold %.3f s; steady "
        "%.1f s over %lld intervals, %.0f tokens/s; whole run incl. set-up %.1f s%s\n",
        glabel, er->cold_seconds, er->steady_seconds,
        (long long)(er->intervals > 0 ? er->intervals - 1 : 0),
        er->steady_seconds > 0 ? (double)er->steady_tokens / er->steady_seconds : 0.0,
        now_seconds() - run->t_start, W > 1 ? " (rank 0)" : "");
}

/* Timing, memory (rank 0's buffers) and the final losses. */
static int report_summary(train_run *run) {
    const int W = run->world;
    gptx_timer_report tr, er;
    gptx_timer_report_init(&tr);
    gptx_timer_report_init(&er);
    TRY(run, gptx_timer_get_report(run->step_timer, &tr));
    TRY(run, gptx_timer_get_report(run->e2e_timer, &er));
    if (W > 1) {
        TRY(run, global_timing(run->comm, &tr));
        TRY(run, global_timing(run->comm, &er));
    }
    gptx_memory_stats ms;
    gptx_memory_stats_init(&ms);
    TRY(run, gptx_context_memory(run->ctx, &ms));
    report_timing(run, &tr, &er);
    train_report_line(&run->rep,
        "memory (library buffers%s): allocated %.1f MiB, reserved %.1f MiB, peak %.1f MiB\n",
        W > 1 ? ", local: rank 0's" : "", ms.allocated / 1048576.0, ms.reserved / 1048576.0,
        ms.peak / 1048576.0);
    char base[64] = "";
    if (isfinite(run->unigram))
        snprintf(base, sizeof base, " (unigram baseline %.4f)", run->unigram);
    if (!run->val) /* not "val loss nan": there was nothing to validate on */
        train_report_line(&run->rep, "final: train loss%s %.4f, no validation loss (no "
                          "--val-shards)\n", W > 1 ? " (global)" : "", (double)run->loss);
    else
        train_report_line(&run->rep, "final: train loss%s %.4f, val loss%s %.4f%s\n",
                          W > 1 ? " (global)" : "", (double)run->loss, W > 1 ? " (global)" : "",
                          run->val_loss, base);
    return 0;
}

/* After the last step: a sample (not after Ctrl-C), the model, weights only
 * (gptx-generate reads it), always, and the loss curve. Sets the exit
 * status: 1 when the plot could not be written, 130 after Ctrl-C, 143 after
 * SIGTERM. */
int run_finish(train_run *run) {
    const train_options *o = &run->o;
    if (o->sample_tokens > 0 && !run_interrupted())
        ON_RANK0(run, run_sample(run), "sampling");
    if (run_out_dir_held(run) != 0) return -1; /* the model and the plot go there */
    char model_path[4096];
    snprintf(model_path, sizeof model_path, "%s/model.safetensors", o->out_dir);
    if (run_own_path(run, model_path) != 0) return -1;
    ON_RANK0(run, gptx_model_save(run->model, model_path), "writing the model");
    train_report_line(&run->rep, "model: %s (gptx-generate --model %s)\n", model_path,
                      model_path);
    char svg[4096];
    snprintf(svg, sizeof svg, "%s/loss.svg", o->out_dir);
    int svg_failed = run_own_path(run, svg) != 0 || train_report_write_svg(&run->rep, svg) != 0;
    if (!svg_failed)
        train_report_line(&run->rep, "loss curve: %s, metrics: %s/metrics.jsonl\n", svg,
                          o->out_dir);
    if (report_summary(run) != 0) return -1;
    run->status = svg_failed ? 1 : run_interrupted() ? 128 + run_interrupted() : 0;
    return 0;
}
