/* gptx-train's option parser (examples/train/train_options.c; fuzz_util.h).
 *
 * Input: the arguments after the program name, each ended by a NUL byte
 * (at most 32). gptx_fuzz_train_options_check runs the property that
 * tests/examples/test_train_options_fuzz.c checks on random command lines:
 * the parser returns 0, 1 or -1, and an accepted command line's saved
 * configuration resumes to one with the same numbers that saves to the
 * same text, byte for byte. A broken property abort()s. The parser prints
 * its messages; run the fuzzer with -close_fd_mask=3 (fuzz/run_fuzz.sh does). */
#include "fuzz_train_options.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"

#define MAX_ARGS 32

static char *format(const train_options *o) {
    size_t n = train_options_format(o, NULL, 0);
    char *s = malloc(n + 1);
    if (!s) abort();
    train_options_format(o, s, n + 1);
    return s;
}

/* The numbers themselves, not only their text: a float printed short would
 * still format the same after the round trip. */
static int same_numbers(const train_options *a, const train_options *b) {
    return a->lr == b->lr && a->val_fraction == b->val_fraction &&
           a->min_lr_frac == b->min_lr_frac && a->weight_decay == b->weight_decay &&
           a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->grad_clip == b->grad_clip &&
           a->temperature == b->temperature && a->top_p == b->top_p &&
           a->comm_timeout == b->comm_timeout && a->overlap_mib == b->overlap_mib &&
           a->seed == b->seed && a->layers == b->layers && a->batch == b->batch &&
           a->steps == b->steps && a->epochs == b->epochs && a->schedule == b->schedule;
}

int gptx_fuzz_train_options_check(int argc, char **argv, FILE *err) {
    train_options o;
    int rc = train_options_parse(&o, argc, argv);
    if (rc < -1 || rc > 1) return GPTX_FUZZ_TRAIN_MISMATCH;
    if (rc != 0) return rc;
    char *first = format(&o), *copy = strdup(first);
    if (!copy) abort();
    train_options cli, back;
    char *none[] = {"gptx-train"};
    if (train_options_parse(&cli, 1, none) != 0) abort(); /* the defaults must parse */
    int result = GPTX_FUZZ_TRAIN_MISMATCH;
    if (train_options_resume(&back, &cli, copy, "fuzz.safetensors") == 0) {
        char *second = format(&back);
        if (same_numbers(&o, &back) && strcmp(first, second) == 0) result = 0;
        else if (err)
            fprintf(err, "round trip differs:\n--- saved\n%s--- resumed\n%s", first, second);
        free(second);
    } else if (err) {
        fprintf(err, "the saved configuration does not resume:\n%s", first);
    }
    free(first);
    free(copy);
    return result;
}

int gptx_fuzz_train_options(const uint8_t *data, size_t size) {
    char *text = gptx_fuzz_strndup(data, size);
    char *argv[MAX_ARGS + 1];
    int argc = 0;
    argv[argc++] = "gptx-train";
    /* the text holds one more NUL at its end: a missing last NUL ends it too */
    for (size_t at = 0; at < size && argc <= MAX_ARGS; at += strlen(text + at) + 1)
        argv[argc++] = text + at;
    int rc = gptx_fuzz_train_options_check(argc, argv, stderr);
    free(text);
    if (rc == GPTX_FUZZ_TRAIN_MISMATCH) abort();
    return rc == 0;
}

int gptx_fuzz_train_options_seeds(const char *dir) {
    static const char *const seeds[][24] = {
        {"seed_preset", "--preset", "shakespeare", "--steps", "20", "--lr", "3e-4"},
        {"seed_model_flags", "--layers", "2", "--heads", "2", "--width", "64", "--context", "32",
         "--batch", "4", "--lr-schedule", "linear", "--warmup", "5", "--min-lr-frac", "0.1",
         "--seed", "18446744073709551615"},
        {"seed_paths", "--text", "caf\xc3\xa9 a\\nb.txt", "--out-dir", "out\ndir", "--prompt",
         "Once\\", "--sample-every", "10", "--top-k", "40", "--top-p", "0.9", "--temperature",
         "0.8"},
        {"seed_shards", "--train-shards", "a.bin,b.bin", "--val-shards", "v.bin", "--epochs", "2",
         "--precision", "bf16_pure", "--stochastic-rounding", "1", "--threads", "3"},
        {"seed_parallel", "--zero1", "1", "--comm-timeout", "30", "--grad-accum", "4",
         "--weight-decay", "0", "--beta2", "0.95", "--grad-clip", "0"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        gptx_fuzz_part p[24];
        size_t n = 0;
        for (size_t k = 1; k < 24 && seeds[i][k]; k++)
            p[n++] = (gptx_fuzz_part){(const uint8_t *)seeds[i][k], strlen(seeds[i][k]) + 1};
        rc |= gptx_fuzz_write_seed(dir, seeds[i][0], p, n, NULL, 0); /* each with its NUL */
    }
    return rc;
}
