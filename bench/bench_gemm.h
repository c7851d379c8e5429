/* What the reference-rate programs share (gptx-bench-sgemm for fp32,
 * gptx-bench-bf16gemm for bf16): their flags, the median of N x N x N
 * product timings as GFLOP/s, the report lines and the JSON file. Each
 * program keeps only the library it times. Header-only, after
 * bench_common.h. */
#ifndef GPTX_BENCH_GEMM_H
#define GPTX_BENCH_GEMM_H

#include "bench_common.h"

typedef struct {
    int threads, n, warmup, reps;
    const char *json;
} bench_gemm_args;

/* Parses argv into a (defaults: 0 threads = the library's own, n 2048, 3
 * warm-up, 10 timed calls). Returns -1 to go on, or the exit status: 0 after
 * --help, 2 after a bad flag. threads_help says what --threads sets. */
static inline int bench_gemm_parse(bench_gemm_args *a, const char *prog, const char *threads_help,
                                   int argc, char **argv) {
    *a = (bench_gemm_args){0, 2048, 3, 10, NULL};
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            printf("usage: %s [--threads N] [--n N] [--warmup N] [--reps N] [--json FILE]\n"
                   "  --threads  %s\n"
                   "  --n        matrix size (default 2048)\n"
                   "  --warmup   untimed calls (default 3)\n"
                   "  --reps     timed calls (default 10)\n"
                   "  --json     also write the figures to FILE\n",
                   prog, threads_help);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s: unknown or incomplete option '%s'\n", prog, f);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(f, "--threads") == 0) rc = bench_parse_int(prog, f, v, 0, 1000000, &a->threads);
        else if (strcmp(f, "--n") == 0) rc = bench_parse_int(prog, f, v, 1, 1000000, &a->n);
        else if (strcmp(f, "--warmup") == 0) rc = bench_parse_int(prog, f, v, 0, 1000000, &a->warmup);
        else if (strcmp(f, "--reps") == 0) rc = bench_parse_int(prog, f, v, 1, 1000000, &a->reps);
        else if (strcmp(f, "--json") == 0) a->json = v;
        else {
            fprintf(stderr, "%s: unknown option '%s'\n", prog, f);
            return 2;
        }
        if (rc) return 2;
    }
    return -1;
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
