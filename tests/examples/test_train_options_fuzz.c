/* gptx-train's option parser on random command lines (issue 16's "every
 * parser fuzzed", as a property test that runs in every build): 200,000
 * argument vectors drawn from the real flags, values of every kind (numbers
 * in and out of range, huge, negative, empty, garbage bytes, escapes and
 * newlines) and stray words. For each: the parser returns 0, 1 or -1 and
 * never crashes; whenever it accepts one, its saved configuration
 * (train_options_format) resumes (train_options_resume) to a configuration
 * with the same numbers that formats to the same text, byte for byte
 * (gptx_fuzz_train_options_check, which the fuzz target runs on its inputs).
 * Messages go to /dev/null. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_train_options.h"

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
    FILE *err = fdopen(saved_err, "w");
    if (!err) return 1;
    long counts[3] = {0, 0, 0}, failures = 0;
    char *argv[16];
    for (int iter = 0; iter < 200000; iter++) {
        int argc = 1 + (int)(next() % 12);
        argv[0] = "gptx-train";
        for (int i = 1; i < argc; i++)
            argv[i] = (char *)(next() % 2 ? PICK(flags) : PICK(values));
        if (next() % 17 == 0) argv[1 + next() % (unsigned)(argc > 1 ? argc - 1 : 1)] = "--help";
        /* the fuzz target's own check (fuzz/fuzz_train_options.c) */
        int rc = gptx_fuzz_train_options_check(argc, argv, failures < 3 ? err : NULL);
        if (rc == GPTX_FUZZ_TRAIN_MISMATCH) failures++;
        else counts[rc + 1]++;
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
    /* --special-tokens: text unless given; a saved configuration without the
     * flag (a run from before it, which read the tag as the EOT token)
     * resumes reading it so */
    {
        char *none[] = {"gptx-train"}, *allow[] = {"gptx-train", "--special-tokens", "allow"};
        train_options cli, o, back;
        char old_record[] = "--lr 0.001\n--seed 5\n", new_record[] = "--special-tokens text\n";
        if (train_options_parse(&cli, 1, none) != 0 || strcmp(cli.special_tokens, "text") ||
            train_options_allow_special(&cli))
            failures++;
        if (train_options_parse(&o, 3, allow) != 0 || !train_options_allow_special(&o)) failures++;
        if (train_options_resume(&back, &cli, old_record, "old.safetensors") != 0 ||
            !train_options_allow_special(&back))
            failures++;
        if (train_options_resume(&back, &cli, new_record, "new.safetensors") != 0 ||
            train_options_allow_special(&back))
            failures++;
    }
    dprintf(saved_out, "200000 command lines: %ld accepted (each saved and resumed identically), "
                       "%ld refused, %ld help/version; %ld failures\n",
            counts[1], counts[0], counts[2], failures);
    return failures == 0 && counts[1] > 1000 && counts[0] > 1000 ? 0 : 1;
}
