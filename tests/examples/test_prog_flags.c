/* The programs' flag parser (examples/common/prog_flags.c): every kind
 * parsed and range-checked, one wording for every refusal (captured from
 * stderr), the nearest flag suggested, a flag given twice refused, --help
 * printed from the table with the defaults, and format/set round trips. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "prog_flags.h"

typedef struct opts {
    const char *model, *backend;
    int steps, mode, verbose;
    long long max_tokens;
    float lr;
    double frac;
    unsigned long long seed;
} opts;

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(opts, field, name, kind, lo, hi, choices, arg, help, bits, 0)
static const prog_flag rows[] = {
    PROG_SECTION("input:"),
    ROW(model, "--model", PROG_FLAG_STR, 0, 0, NULL, "FILE", "the model", PROG_FLAG_NO_DEFAULT),
    ROW(backend, "--backend", PROG_FLAG_CHOICE, 0, 0, "cpu|cuda|auto", NULL, "where it runs", 0),
    ROW(mode, "--mode", PROG_FLAG_INDEX, 0, 0, "fast|exact", NULL, "how", 0),
    PROG_SECTION("numbers:"),
    ROW(steps, "--steps", PROG_FLAG_INT, 1, 1000, NULL, NULL, "optimizer steps\nsecond line", 0),
    ROW(max_tokens, "--max-tokens", PROG_FLAG_I64, 2, 1e15, NULL, NULL, "at most", 0),
    ROW(lr, "--lr", PROG_FLAG_FLOAT, 0, 10, NULL, NULL, "learning rate", PROG_FLAG_OPEN_LO),
    ROW(frac, "--val-fraction", PROG_FLAG_DOUBLE, 0, 0.9, NULL, NULL, "held out", 0),
    ROW(seed, "--seed", PROG_FLAG_U64, 0, 0, NULL, NULL, "seed", 0),
    ROW(verbose, "--verbose", PROG_FLAG_SWITCH, 0, 1, NULL, NULL, "say more", 0),
};
static const prog_cli cli = {"gptx-test", "usage: gptx-test [options]\n", rows,
                             sizeof rows / sizeof rows[0], "the end\n"};
static const opts defaults = {NULL, "cpu", 10, 0, 0, 100, 0.5f, 0.1, 1337};

static char captured[4096];

/* Runs the parser on a command line (words split at spaces), capturing
 * stderr and stdout into captured. */
static int parse(opts *o, unsigned char *given, const char *line) {
    char copy[512], *argv[32] = {"gptx-test"};
    int argc = 1;
    snprintf(copy, sizeof copy, "%s", line);
    for (char *w = strtok(copy, " "); w && argc < 31; w = strtok(NULL, " ")) argv[argc++] = w;
    *o = defaults;
    fflush(stdout);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved_err = dup(2), saved_out = dup(1);
    dup2(fileno(tmp), 2);
    dup2(fileno(tmp), 1);
    int rc = prog_flags_parse(&cli, o, given, argc, argv, &defaults);
    fflush(stdout);
    fflush(stderr);
    dup2(saved_err, 2);
    dup2(saved_out, 1);
    close(saved_err);
    close(saved_out);
    rewind(tmp);
    size_t n = fread(captured, 1, sizeof captured - 1, tmp);
    captured[n] = '\0';
    fclose(tmp);
    return rc;
}

static void refused(const char *line, const char *message) {
    opts o;
    int rc = parse(&o, NULL, line);
    if (rc != -1 || strcmp(captured, message) != 0) {
        fprintf(stderr, "'%s': rc %d, printed '%s'; expected -1 and '%s'\n", line, rc, captured,
                message);
        check_failures++;
    }
}

int main(void) {
    opts o;
    unsigned char given[sizeof rows / sizeof rows[0]];

    /* every kind, both spellings of a value */
    CHECK(parse(&o, given, "--model m.bin --backend cuda --mode exact --steps 7 --max-tokens "
                           "5000000000 --lr=0.25 --val-fraction 0.9 --seed 18446744073709551615 "
                           "--verbose") == 0);
    CHECK(!strcmp(captured, ""));
    CHECK(!strcmp(o.model, "m.bin") && !strcmp(o.backend, "cuda") && o.mode == 1);
    CHECK(o.steps == 7 && o.max_tokens == 5000000000LL && o.lr == 0.25f && o.frac == 0.9);
    CHECK(o.seed == 18446744073709551615ULL && o.verbose == 1);
    CHECK(given[0] == 0 && given[1] == 1 && given[5] == 1 && given[10] == 1);
    CHECK(parse(&o, given, "--steps 3") == 0 && o.steps == 3 && o.lr == 0.5f && !given[7]);

    /* one wording for every refusal */
    refused("--modle x", "gptx-test: --modle: unknown option; did you mean --model? (see --help)\n");
    refused("--max-token 5", "gptx-test: --max-token: unknown option; did you mean --max-tokens? "
                             "(see --help)\n");
    refused("--valfrac 1", "gptx-test: --valfrac: unknown option (see --help)\n");
    refused("--val 0.1", "gptx-test: --val: unknown option; did you mean --val-fraction? "
                         "(see --help)\n");
    refused("--ste 1", "gptx-test: --ste: unknown option; did you mean --steps? (see --help)\n");
    refused("model.bin", "gptx-test: model.bin: unexpected argument (flags start with --) "
                         "(see --help)\n");
    refused("--steps", "gptx-test: --steps: needs a value (see --help)\n");
    refused("--steps 0", "gptx-test: --steps 0: expected an integer from 1 to 1000 (see --help)\n");
    refused("--steps 5x", "gptx-test: --steps 5x: expected an integer from 1 to 1000 (see --help)\n");
    refused("--steps 99999999999999999999", "gptx-test: --steps 99999999999999999999: expected an "
                                            "integer from 1 to 1000 (see --help)\n");
    refused("--lr 0", "gptx-test: --lr 0: expected a number in (0, 10] (see --help)\n");
    /* below float's least denormal: stored as 0, so outside (0, 10] (a fuzz find) */
    refused("--lr 3e-48", "gptx-test: --lr 3e-48: expected a number in (0, 10] (see --help)\n");
    refused("--lr nan", "gptx-test: --lr nan: expected a number in (0, 10] (see --help)\n");
    refused("--lr 10.5", "gptx-test: --lr 10.5: expected a number in (0, 10] (see --help)\n");
    refused("--val-fraction -0.1", "gptx-test: --val-fraction -0.1: expected a number in [0, 0.9] "
                                   "(see --help)\n");
    refused("--backend gpu", "gptx-test: --backend gpu: expected one of cpu, cuda or auto "
                             "(see --help)\n");
    refused("--mode slow", "gptx-test: --mode slow: expected one of fast or exact (see --help)\n");
    refused("--seed -1", "gptx-test: --seed -1: expected an integer >= 0 (see --help)\n");
    refused("--steps 2 --steps 3", "gptx-test: --steps: given twice (see --help)\n");
    refused("--verbose=1", "gptx-test: --verbose 1: takes no value (see --help)\n");
    refused("--model=", "gptx-test: --model: needs a non-empty value (see --help)\n");

    /* --help from the table, --version */
    CHECK(parse(&o, NULL, "--help") == 1);
    const char *want_help =
        "usage: gptx-test [options]\n"
        "input:\n"
        "  --model FILE            the model\n"
        "  --backend NAME          where it runs (default cpu)\n"
        "  --mode NAME             how (default fast)\n"
        "numbers:\n"
        "  --steps N               optimizer steps\n"
        "                          second line (default 10)\n"
        "  --max-tokens N          at most (default 100)\n"
        "  --lr X                  learning rate (default 0.5)\n"
        "  --val-fraction X        held out (default 0.1)\n"
        "  --seed N                seed (default 1337)\n"
        "  --verbose               say more\n"
        "the end\n";
    if (strcmp(captured, want_help)) {
        fprintf(stderr, "--help printed:\n%s\nexpected:\n%s\n", captured, want_help);
        check_failures++;
    }
    CHECK(parse(&o, NULL, "--steps 3 --version") == 1 && !strncmp(captured, "gptx-test ", 10));

    /* format -> set reads back the same value, for every kind */
    opts a = defaults, b = defaults;
    a.model = "x";
    a.backend = "auto";
    a.mode = 1;
    a.lr = 0.1f + 1e-8f;
    a.frac = 1.0 / 3.0;
    a.max_tokens = 123456789012LL;
    a.seed = 42;
    for (size_t i = 0; i < cli.n_flags; i++) {
        char buf[64];
        const char *v = prog_flags_format(&rows[i], &a, buf, sizeof buf);
        if (rows[i].kind == PROG_FLAG_SECTION) CHECK(v == NULL);
        if (v) CHECK(prog_flags_set(&cli, &rows[i], &b, v) == 0);
    }
    CHECK(!strcmp(b.model, "x") && !strcmp(b.backend, "auto") && b.mode == 1);
    CHECK(b.lr == a.lr && b.frac == a.frac && b.max_tokens == a.max_tokens && b.seed == 42);
    CHECK(prog_flags_find(&cli, "input:") == NULL && prog_flags_find(&cli, "--lr") == &rows[7]);
    return check_exit("test_prog_flags");
}
