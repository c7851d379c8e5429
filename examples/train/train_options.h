/* gptx-train's command line: every flag, its default and its validation. */
#ifndef GPTX_TRAIN_OPTIONS_H
#define GPTX_TRAIN_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { SCHEDULE_COSINE, SCHEDULE_LINEAR, SCHEDULE_CONSTANT } lr_schedule;

typedef struct train_options {
    /* data */
    const char *text;          /* text files, globs, folders (prog_inputs.h), GPT-2 tokens */
    const char *train_shards;  /* comma-separated llm.c shards (instead of text) */
    const char *val_shards;
    float val_fraction;        /* of the text held out for validation */
    const char *encoder, *vocab;
    const char *special_tokens; /* "text" or "allow": "<|endoftext|>" in --text and --prompt */
    const char *doc_separator;  /* --text: a document also ends at each one (escapes: \n ...) */
    /* model */
    const char *preset;
    const char *init_from; /* --init-from: the model to fine-tune, NULL = a new one */
    int layers, heads, width, context, vocab_size, padded_vocab;
    /* optimization */
    int batch, grad_accum, steps, epochs, warmup;
    float lr, min_lr_frac, weight_decay, grad_clip, beta1, beta2;
    lr_schedule schedule;
    /* evaluation, sampling, output */
    int eval_every, eval_batches, sample_every, sample_tokens, top_k, log_every;
    float temperature, top_p;
    const char *prompt;
    const char *out_dir;
    int checkpoint_every;
    int keep_checkpoints;      /* > 0: this run's newest K numbered checkpoints stay; 0 = all */
    int save_best;             /* 1: DIR/best.safetensors at each new best validation loss */
    const char *resume;        /* checkpoint file (or, on the command line, folder) to resume */
    int overwrite;             /* --overwrite: another run's files in out_dir are replaced */
    /* machine */
    const char *backend, *precision;
    int stochastic_rounding; /* 0/1, with precision bf16_pure */
    int threads;
    uint64_t seed;
    float comm_timeout;        /* data parallel: seconds a collective may wait */
    int zero1;                 /* 1: optimizer state sharded over the ranks (ZeRO-1) */
    float overlap_mib;         /* > 0: backward overlapped with buckets of this many MiB */
    int rank_invariant;        /* 1: the same bits for any number of ranks (docs/distributed.md) */
    /* which flags the command line gave (directly or through --preset),
     * by their row in the table of train_options.c (sections included) */
    unsigned char given[96];
} train_options;

/* Parses argv into opts (the table of train_options.c on the programs' one
 * parser, examples/common/prog_flags.h), then fills what was not given from
 * the preset (default tiny). Returns 0 on success, 1 after --help or
 * --version (exit 0), -1 after printing one clear message about a bad flag
 * (exit 2). */
int train_options_parse(train_options *opts, int argc, char **argv);

/* 1 when "<|endoftext|>" in --text and --prompt is the end-of-text token
 * (--special-tokens allow), 0 when it is text (the default). */
int train_options_allow_special(const train_options *opts);

/* Whether the command line gave this flag ("--context"), directly or
 * through --preset. */
int train_options_given(const train_options *opts, const char *flag);

/* The run's configuration as a command line, one "--flag value" per line
 * (values escaped: \\ and \n), every flag a resumed run must keep or may
 * want back: what gptx-train stores in its checkpoints. Returns the length
 * written (as snprintf: the length needed if cap is too small). */
size_t train_options_format(const train_options *opts, char *buf, size_t cap);

/* --resume: run = the configuration saved in the checkpoint (saved, which
 * this parses in place and which must outlive run), then the flags of cli
 * that a resumed run may change (steps, intervals, output, threads, data
 * paths: the data is checked by its hash instead). A flag of cli that would
 * change what is computed (model, batch, optimizer, seed, precision, ...)
 * and differs from the saved value is refused with one message naming it.
 * Returns 0 or -1 after that message. */
int train_options_resume(train_options *run, const train_options *cli, char *saved,
                         const char *file);

/* The value of a line "key value" of a saved configuration that is not a
 * flag (data_hash, world_size, best_val_loss), unescaped into out; 0 if
 * found, -1 if not. */
int train_saved_get(const char *saved, const char *key, char *out, size_t cap);

#endif
