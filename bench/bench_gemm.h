/* What the reference-rate programs share (gptx-bench-sgemm for fp32,
 * gptx-bench-bf16gemm for bf16): their flags, the median of N x N x N
 * product timings as GFLOP/s, the report lines and the JSON file. Each
 * program keeps only the library it times. Header-only, after
 * bench_common.h. */
#ifndef GPTX_BENCH_GEMM_H
#define GPTX_BENCH_GEMM_H

#include "bench_common.h"
#include "prog_flags.h"

typedef struct {
    int threads, n, warmup, reps;
    const char *json;
    const char *lib; /* gptx-bench-sgemm --lib: openblas or onednn */
} bench_gemm_args;

/* Parses argv into a with the programs' flag parser (defaults: 0 threads =
 * the library's own, n 2048, 3 warm-up, 10 timed calls). Returns -1 to go
 * on, or the exit status: 0 after --help/--version, 2 after a bad flag.
 * threads_help says what --threads sets. */
static inline int bench_gemm_parse_lib(bench_gemm_args *a, const char *prog,
                                       const char *threads_help, const char *lib_help, int argc,
                                       char **argv) {
    static const bench_gemm_args defaults = {0, 2048, 3, 10, NULL, "openblas"};
#define ROW(field, name, kind, lo, hi, arg, help, bits) \
    PROG_FLAG_ROW(bench_gemm_args, field, name, kind, lo, hi, NULL, arg, help, bits, 0)
    const prog_flag rows[] = {
        ROW(threads, "--threads", PROG_FLAG_INT, 0, 1000000, NULL, threads_help, 0),
        ROW(n, "--n", PROG_FLAG_INT, 1, 1000000, NULL, "matrix size", 0),
        ROW(warmup, "--warmup", PROG_FLAG_INT, 0, 1000000, NULL, "untimed calls", 0),
        ROW(reps, "--reps", PROG_FLAG_INT, 1, 1000000, NULL, "timed calls", 0),
        ROW(json, "--json", PROG_FLAG_STR, 0, 0, "FILE", "also write the figures to FILE", 0),
        /* last: only with lib_help */
        PROG_FLAG_ROW(bench_gemm_args, lib, "--lib", PROG_FLAG_CHOICE, 0, 0, "openblas|onednn",
                      "LIB", lib_help, 0, 0),
    };
#undef ROW
    char synopsis[128];
    snprintf(synopsis, sizeof synopsis, "usage: %s [options]\n", prog);
    size_t nrows = sizeof rows / sizeof rows[0] - (lib_help ? 0 : 1);
    const prog_cli cli = {prog, synopsis, rows, nrows, NULL};
    *a = defaults;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    return rc == 0 ? -1 : rc == 1 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
}

static inline int bench_gemm_parse(bench_gemm_args *a, const char *prog, const char *threads_help,
                                   int argc, char **argv) {
    return bench_gemm_parse_lib(a, prog, threads_help, NULL, argc, argv);
}

typedef struct {
    double median_s, min_s, max_s, gflops, gflops_best;
} bench_gemm_rate;

/* Sorts the reps timings t and rates them at 2 n^3 FLOPs per call. */
static inline bench_gemm_rate bench_gemm_rate_of(double *t, int reps, int n) {
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    double flop = 2.0 * (double)n * n * n;
    return (bench_gemm_rate){med, t[0], t[reps - 1], flop / med * 1e-9, flop / t[0] * 1e-9};
}

static inline void bench_gemm_print(const bench_gemm_rate *r, double checksum) {
    printf("time        : median %.5f s (min %.5f, max %.5f)\n", r->median_s, r->min_s, r->max_s);
    printf("rate        : %.2f GFLOP/s median (best %.2f)  [checksum %.4g]\n", r->gflops,
           r->gflops_best, checksum);
}

/* The figures as JSON, with one more string field (key: value) naming what
 * ran. Returns the exit status: 0, or 1 when the file cannot be written. */
static inline int bench_gemm_write_json(const bench_gemm_args *a, const char *prog, int threads,
                                        const bench_gemm_rate *r, const char *key,
                                        const char *value) {
    if (!a->json) return 0;
    FILE *f = fopen(a->json, "w");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, a->json, strerror(errno));
        return 1;
    }
    fprintf(f,
            "{\n  \"threads\": %d, \"n\": %d, \"warmup\": %d, \"reps\": %d,\n"
            "  \"median_s\": %.6f, \"min_s\": %.6f, \"max_s\": %.6f,\n"
            "  \"gflops\": %.4f, \"gflops_best\": %.4f,\n  \"%s\": \"%s\"\n}\n",
            threads, a->n, a->warmup, a->reps, r->median_s, r->min_s, r->max_s, r->gflops,
            r->gflops_best, key, value);
    return fclose(f) == 0 ? 0 : 1;
}

#endif
