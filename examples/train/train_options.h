/* gptx-train's command line: every flag, its default and its validation. */
#ifndef GPTX_TRAIN_OPTIONS_H
#define GPTX_TRAIN_OPTIONS_H

#include <stdint.h>

typedef enum { SCHEDULE_COSINE, SCHEDULE_LINEAR, SCHEDULE_CONSTANT } lr_schedule;

typedef struct train_options {
    /* data */
    const char *text;          /* text file, tokenized with the GPT-2 tokenizer */
    const char *train_shards;  /* comma-separated llm.c shards (instead of text) */
    const char *val_shards;
    float val_fraction;        /* of the text held out for validation */
    const char *encoder, *vocab;
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
    const char *resume;        /* checkpoint path to resume from */
    /* machine */
    const char *backend, *precision;
    int stochastic_rounding; /* 0/1, with precision bf16_pure */
    int threads;
    uint64_t seed;
    float comm_timeout;        /* data parallel: seconds a collective may wait */
    int zero1;                 /* 1: optimizer state sharded over the ranks (ZeRO-1) */
    float overlap_mib;         /* > 0: backward overlapped with buckets of this many MiB */
} train_options;

/* Parses argv into opts. Returns 0 on success, 1 after --help (exit 0),
 * -1 after printing one clear message about a bad flag (exit 2). */
int train_options_parse(train_options *opts, int argc, char **argv);

#endif
