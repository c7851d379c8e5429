/* gptx-train's output: the live progress line, the metrics file (JSON lines)
 * and the loss-curve SVG. */
#ifndef GPTX_TRAIN_REPORT_H
#define GPTX_TRAIN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "train_outdir.h"

typedef struct train_point {
    int64_t step;
    int64_t tokens_seen;
    double loss;
} train_point;

typedef struct train_report {
    int silent;       /* data-parallel ranks other than 0: no output, no files */
    int world_size;   /* > 1: numbers are labelled global (all ranks) or local */
    int tty;          /* stdout is a terminal: one progress line, redrawn */
    int log_every;    /* plain lines otherwise */
    int line_open;    /* a progress line is on screen without a newline */
    FILE *metrics;    /* JSON lines */
    char metrics_path[4096];
    int write_errno;    /* the first failed write of metrics (0: none) */
    int write_reported; /* its message was printed */
    int warned_climb;   /* the run's loss climbing was warned (also before a resume) */
    train_outdir dir;   /* the out-dir and its lock (rank 0) */
    train_point *train, *val;
    size_t n_train, n_val, cap_train, cap_val;
} train_report;

/* Who the run is, for what --out-dir already holds (train_outdir.h). */
typedef struct train_report_claim {
    const char *run_id; /* this run's id ("" unknown: a checkpoint from before run ids) */
    const char *resume; /* the --resume checkpoint, NULL for a new run */
    int overwrite;      /* --overwrite: another run's files are removed, not refused */
    const outdir_inputs *inputs; /* what the run reads: never one of its outputs */
} train_report_claim;

/* Opens out_dir/metrics.jsonl (creating and locking out_dir, checking whose
 * files it holds). resume_step >= 0: a run resumed at that step, which keeps
 * the file's rows up to it (they also feed the plot) and appends; -1: a new
 * file. Returns 0 or -1 with a message. rank > 0 makes a silent report
 * (every call below does nothing); world_size > 1 labels the printed
 * numbers global. */
int train_report_open(train_report *r, const char *out_dir, int log_every, int rank,
                      int world_size, int64_t resume_step, const train_report_claim *claim);
/* Closes the file; -1 (after a message) if any write of it failed. */
int train_report_close(train_report *r);
/* 0 while every metrics row was written and flushed; -1 after printing,
 * once, which file failed and why (a full disk). */
int train_report_ok(train_report *r);
/* 0 while the run still holds --out-dir (always on silent ranks); -1 once
 * the folder or its lock file was removed or replaced: nothing more may be
 * written there (train_outdir.h). Metrics rows check it themselves. */
int train_report_held(train_report *r);

/* One optimizer step: progress line (terminal) or a plain line every log_every steps. */
void train_report_step(train_report *r, int64_t step, int64_t total_steps, float loss,
                       float lr, float grad_norm, int64_t tokens_seen, double step_seconds,
                       double steady_tokens_per_second, double eta_seconds, uint64_t mem_peak);
/* A validation result (printed on its own line). */
/* What the run is: the first record of metrics.jsonl ("type": "config"). */
typedef struct {
    const char *version, *backend, *precision, *data, *init_from, *resume, *schedule;
    int threads, n_layer, n_head, n_embd, context, vocab, padded_vocab, batch, grad_accum,
        world_size, warmup;
    size_t parameters;
    long long train_tokens, tokens_per_step, steps;
    double lr, min_lr_frac, weight_decay, grad_clip, beta1, beta2;
    unsigned long long seed, data_hash;
    double unigram_val_loss; /* NAN: not computed (no validation data) */
    const char *flags;       /* the run configuration, as saved in checkpoints */
    const char *run_id;      /* the run's id: every record and checkpoint of one run has it */
} train_config_record;
void train_report_config(train_report *r, const train_config_record *c);

void train_report_val(train_report *r, int64_t step, int64_t tokens_seen, double val_loss,
                      int64_t val_tokens);
/* A warning about the run (its loss diverging or not finite): a line in
 * the log and a "warning" row in metrics.jsonl with the step, the loss
 * (null when not finite) and the text. */
void train_report_warning(train_report *r, int64_t step, double loss, const char *text);
/* The loss the run started from: its first train row (step 1's, kept from
 * before a resume in the same folder; else the resumed run's first), NAN
 * before any. */
double train_report_first_loss(const train_report *r);
/* Any other line: closes an open progress line first. */
void train_report_line(train_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Writes the loss curves (train and val against steps, tokens seen on the top axis). */
int train_report_write_svg(const train_report *r, const char *path);

#endif
