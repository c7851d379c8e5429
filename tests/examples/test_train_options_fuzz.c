/* gptx-train's option parser on random command lines (issue 16's "every
 * parser fuzzed", as a property test that runs in every build): 200,000
 * argument vectors drawn from the real flags, values of every kind (numbers
 * in and out of range, huge, negative, empty, garbage bytes, escapes and
 * newlines) and stray words. For each: the parser returns 0, 1 or -1 and
 * never crashes; whenever it accepts one, its saved configuration
 * (train_options_format) resumes (train_options_resume) to a configuration
 * with the same numbers that formats to the same text, byte for byte. Messages go to /dev/null. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train/train_options.h"

static const char *const flags[] = {
    "--text", "--train-shards", "--val-shards", "--val-fraction", "--encoder", "--vocab",
    "--preset", "--init-from", "--layers", "--heads", "--width", "--context", "--vocab-size",
    "--padded-vocab", "--batch", "--grad-accum", "--steps", "--epochs", "--warmup", "--lr",
    "--lr-schedule", "--min-lr-frac", "--weight-decay", "--beta1", "--beta2", "--grad-clip",
    "--eval-every", "--eval-batches", "--sample-every", "--sample-tokens", "--prompt",
    "--temperature", "--top-k", "--top-p", "--log-every", "--out-dir", "--checkpoint-every",
    "--save-best", "--backend", "--precision", "--stochastic-rounding", "--threads",
    "--comm-timeout", "--zero1", "--overlap", "--seed", "--nope", "-", "--", "x"};
static const char *const values[] = {
    "0", "1", "2", "-1", "7", "1e-3", "0.5", "1000000000", "1000000001", "99999999999999999999",
    "-0", "nan", "inf", "1e309", "", " ", "0x10", "3.", ".5", "cosine", "linear", "constant",
    "wavy", "cpu", "cuda", "auto", "fp32", "bf16", "bf16_pure", "tiny", "micro", "shakespeare",
    "gpt2-124M", "a\\nb", "a\nb", "\\", "\\\\n", "--steps", "18446744073709551615",
    "18446744073709551616", "caf\xc3\xa9", "\xff\xfe", "out dir", "0.123456789", "3.14159265",
    "0.000123456", "0.99999"};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
#define PICK(a) ((a)[next() % (sizeof(a) / sizeof((a)[0]))])

int main(void) {
    int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) return 1;
    long counts[3] = {0, 0, 0}, roundtrips = 0, failures = 0;
    char *argv[16];
    char *first = NULL, *second = NULL, *copy = NULL;
    for (int iter = 0; iter < 200000; iter++) {
        int argc = 1 + (int)(next() % 12);
        argv[0] = "gptx-train";
        for (int i = 1; i < argc; i++)
            argv[i] = (char *)(next() % 2 ? PICK(flags) : PICK(values));
        if (next() % 17 == 0) argv[1 + next() % (unsigned)(argc > 1 ? argc - 1 : 1)] = "--help";
        train_options o;
        int rc = train_options_parse(&o, argc, argv);
        if (rc < -1 || rc > 1) {
            failures++;
            continue;
        }
        counts[rc + 1]++;
        if (rc != 0) continue;
        size_t n = train_options_format(&o, NULL, 0);
        first = realloc(first, n + 1);
        copy = realloc(copy, n + 1);
        if (!first || !copy) return 1;
        train_options_format(&o, first, n + 1);
        memcpy(copy, first, n + 1);
        train_options cli;
        char *none[] = {"gptx-train"};
        if (train_options_parse(&cli, 1, none) != 0) return 1;
        train_options back;
        if (train_options_resume(&back, &cli, copy, "fuzz.safetensors") != 0) {
            failures++;
            continue;
        }
        size_t m = train_options_format(&back, NULL, 0);
        second = realloc(second, m + 1);
        if (!second) return 1;
        train_options_format(&back, second, m + 1);
        /* and the numbers themselves, not only their text: a float printed short
         * would still format the same after the round trip */
        int same = back.lr == o.lr && back.val_fraction == o.val_fraction &&
                   back.min_lr_frac == o.min_lr_frac && back.weight_decay == o.weight_decay &&
                   back.beta1 == o.beta1 && back.beta2 == o.beta2 && back.grad_clip == o.grad_clip &&
                   back.temperature == o.temperature && back.top_p == o.top_p &&
                   back.comm_timeout == o.comm_timeout && back.overlap_mib == o.overlap_mib &&
                   back.seed == o.seed && back.layers == o.layers && back.batch == o.batch &&
                   back.steps == o.steps && back.epochs == o.epochs && back.schedule == o.schedule;
        if (!same || m != n || memcmp(first, second, n) != 0) {
            failures++;
            if (failures < 4) {
                dprintf(saved_err, "round trip differs:\n--- saved\n%s--- resumed\n%s", first,
                        second);
            }
            continue;
        }
        roundtrips++;
    }
    /* each choice lands as itself (a round trip alone cannot tell) */
    const char *names[3] = {"cosine", "linear", "constant"};
    const lr_schedule want[3] = {SCHEDULE_COSINE, SCHEDULE_LINEAR, SCHEDULE_CONSTANT};
    for (int k = 0; k < 3; k++) {
        char *av[] = {"gptx-train", "--lr-schedule", (char *)names[k], "--backend", "auto"};
        train_options o;
        if (train_options_parse(&o, 5, av) != 0 || o.schedule != want[k] ||
            strcmp(o.backend, "auto") != 0)
            failures++;
    }
    free(first);
    free(second);
    free(copy);
    dprintf(saved_out, "200000 command lines: %ld accepted (%ld saved and resumed identically), "
                       "%ld refused, %ld help/version; %ld failures\n",
            counts[1], roundtrips, counts[0], counts[2], failures);
    return failures == 0 && counts[1] > 1000 && counts[0] > 1000 ? 0 : 1;
}
