/* gptx-train's run: one struct holds everything a run opens, computes and
 * reports, and main is the list of stages over it (train_main.c). Each stage
 * returns 0, or -1 after its message; run_close then frees whatever was
 * opened and returns run->status, the exit status. */
#ifndef GPTX_TRAIN_RUN_H
#define GPTX_TRAIN_RUN_H

#include <stdint.h>

#include "gptx/gptx.h"
#include "prog_error.h"
#include "train_ckpts.h"
#include "train_options.h"
#include "train_report.h"

typedef struct train_run {
    int status; /* the exit status: 2 until the flags are read, 1 until the run finishes */
    /* the configuration: flags, or --resume's saved record with the flags it lets change */
    train_options o;
    char *saved, *saved_flags; /* --resume: the whole record, and the copy o points into */
    char *record;              /* the run configuration in the last checkpoint written */
    const char *resume_arg;    /* --resume as given: a checkpoint file or a run's folder */
    ckpt_candidates resume_list; /* --resume DIR: the checkpoints to try, best first */
    char *resume_folder;       /* --resume without --out-dir: the run's folder (o.out_dir) */
    outdir_inputs inputs;      /* every file the run reads: none may be one it writes */
    int resume_at;             /* the one o.resume names now */
    char run_id[17];           /* names the run in its records and checkpoints */
    int run_id_unknown;        /* resumed from a checkpoint saved before run ids */
    /* the machine */
    gptx_comm_launch_info launch; /* the launcher (if any): rank, device, threads */
    gptx_context *ctx;
    gptx_comm *comm;
    int rank, world;
    char rank_label[48]; /* "" with one process, " (rank R of W)" in a data-parallel run */
    double t_start;      /* for the whole run's time, set-up included */
    /* the data */
    gptx_tokenizer *tok;
    char *text;      /* --text's bytes, and its tokens (both splits) */
    int32_t *tokens;
    char **train_paths, **val_paths; /* --train-shards / --val-shards, split at commas */
    int n_train_paths, n_val_paths;
    const char *data_name; /* --text or --train-shards, for messages */
    int64_t text_tokens;   /* --text: its tokens, both splits, without the EOTs added; 0 with shards */
    int text_docs;         /* --text: 1 each document after an EOT; 0 a run saved before 0.6 (as is) */
    int64_t n_docs, val_docs; /* --text: documents, and those held out (0: the tail of one) */
    uint64_t data_hash;    /* FNV-1a of the data: a resumed run must train on the same */
    double unigram;        /* the unigram baseline's validation loss, NAN without validation */
    gptx_dataloader *train, *val;
    gptx_dataloader_info ti;
    /* the model and its training */
    gptx_model *model;
    gptx_optimizer *opt;
    gptx_sampler *sampler;
    gptx_train_state ts; /* what a checkpoint holds besides the weights */
    gptx_timer *step_timer, *e2e_timer;
    train_report rep;
    /* progress */
    int64_t total_steps, step, start_step, tokens_seen;
    double best_val, val_loss;
    int64_t val_tokens;
    float loss; /* the last step's training loss (global) */
    int64_t next_unit; /* --rank-invariant: the micro-batch the loader gives next (-1: unknown) */
    float test_grad_scale; /* tests only (GPTX_TRAIN_TEST_POISON_WHAT=grad): 0 = 1/K */
} train_run;

/* The stages, in the order main runs them. */
int run_parse(train_run *run, int argc, char **argv); /* train_config.c */
int run_open_machine(train_run *run);                 /* train_setup.c */
int run_open_tokenizer(train_run *run);               /* train_setup.c */
int run_open_init_from(train_run *run);               /* train_setup.c */
int run_open_data(train_run *run);                    /* train_data.c */
int run_open_model(train_run *run);                   /* train_setup.c */
int run_open_output(train_run *run);                  /* train_setup.c */
int run_loop(train_run *run);                         /* train_loop.c */
int run_finish(train_run *run);                       /* train_finish.c */
int run_close(train_run *run);                        /* train_run.c */

/* The error rules every stage follows (train_run.c). */

/* Prints a library error with the rank label; returns -1. */
int run_fail(const train_run *run, int rc);
/* Every rank learns whether each rank was ok (a barrier that carries the
 * status; with one process: just ok). 0, or -1 when some rank was not. */
int run_agree(const train_run *run, int ok, const char *what);
/* After an action on some ranks: prints this rank's failure "while what",
 * then run_agree on its success. */
int run_settle(const train_run *run, int rc, const char *what);

/* A library call that must succeed: otherwise the stage stops (after the
 * message), and so does the run. */
#define TRY(run, call)                                                                       \
    do {                                                                                     \
        int rc_ = (call);                                                                    \
        if (rc_ != GPTX_OK) return run_fail(run, rc_);                                       \
    } while (0)

/* Runs `call` on rank 0 only (sampling, checkpoints); the other ranks wait
 * at a barrier that also tells them whether it failed. */
#define ON_RANK0(run, call, what)                                                            \
    do {                                                                                     \
        if (run_settle(run, (run)->rank == 0 ? (call) : GPTX_OK, what) != 0) return -1;      \
    } while (0)

/* Shared by the stages. */
char *run_record(const train_run *run);   /* train_config.c: what a checkpoint stores */
int run_check_saved(train_run *run);      /* train_config.c: --resume, same data and ranks */
int run_resume_fallback(train_run *run, int rc); /* train_config.c: --resume DIR, the previous */
int run_resume_reread(train_run *run);    /* train_config.c: the record of the one now tried */
const char *schedule_name(lr_schedule s); /* train_config.c: "cosine", "linear", "constant" */
void free_paths(char **paths, int n);     /* train_data.c */
int run_sample(train_run *run);           /* train_loop.c: a continuation of --prompt */
int run_interrupted(void);                /* train_loop.c: SIGINT or SIGTERM came (0: none) */
int run_out_dir_held(train_run *run);     /* train_loop.c: before a write into --out-dir */
/* train_run.c: before rank 0 saves path in --out-dir, a link there is
 * removed (the run writes its own file, never through a link); every rank
 * learns whether it could. 0, or -1 after the message. */
int run_own_path(const train_run *run, const char *path);
/* train_run.c: path is an input of the run,
 * by identity (outdir_claim refuses to write over it). 0, or -1 when out of
 * memory. */
int run_note_input(train_run *run, const char *flag, const char *path);
double now_seconds(void);                 /* train_run.c */
int global_timing(gptx_comm *comm, gptx_timer_report *r); /* train_run.c: over all ranks */

#endif
