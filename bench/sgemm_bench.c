/*
 * gptx-bench-sgemm: the machine's reference matrix-product rate.
 *
 * Times OpenBLAS cblas_sgemm (row-major, C = A * B, all N x N, fp32) after
 * warm-up; reports the median (and min/max) of --reps calls as GFLOP/s with
 * 2*N^3 FLOPs per call. The thread count is set with
 * openblas_set_num_threads(--threads).
 */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"

static int parse_int(const char *flag, const char *s, int min, int *out) {
    return bench_parse_int("gptx-bench-sgemm", flag, s, min, 1000000, out);
}

int main(int argc, char **argv) {
    int threads = 0, n = 2048, warmup = 3, reps = 10;
    const char *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            printf("usage: gptx-bench-sgemm [--threads N] [--n N] [--warmup N] [--reps N] "
                   "[--json FILE]\n"
                   "  --threads  openblas_set_num_threads(N); 0 = leave OpenBLAS's default\n"
                   "  --n        matrix size (default 2048)\n"
                   "  --warmup   untimed calls (default 3)\n"
                   "  --reps     timed calls (default 10)\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-bench-sgemm: unknown or incomplete option '%s'\n", f);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(f, "--threads") == 0) rc = parse_int(f, v, 0, &threads);
        else if (strcmp(f, "--n") == 0) rc = parse_int(f, v, 1, &n);
        else if (strcmp(f, "--warmup") == 0) rc = parse_int(f, v, 0, &warmup);
        else if (strcmp(f, "--reps") == 0) rc = parse_int(f, v, 1, &reps);
        else if (strcmp(f, "--json") == 0) json = v;
        else {
            fprintf(stderr, "gptx-bench-sgemm: unknown option '%s'\n", f);
            return 2;
        }
        if (rc) return 2;
    }
    if (threads > 0) openblas_set_num_threads(threads);

    size_t nn = (size_t)n * n;
    float *A = malloc(nn * sizeof *A), *B = malloc(nn * sizeof *B), *C = malloc(nn * sizeof *C);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!A || !B || !C || !t) {
        fprintf(stderr, "gptx-bench-sgemm: out of host memory\n");
        return 1;
    }
    unsigned x = 12345u;
    for (size_t i = 0; i < nn; i++) {
        x = x * 1664525u + 1013904223u;
        A[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        x = x * 1664525u + 1013904223u;
        B[i] = (float)(x >> 8) / 16777216.0f - 0.5f;
        C[i] = 0.0f;
    }
    for (int i = 0; i < warmup; i++)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A, n, B, n, 0.0f, C, n);
        t[i] = bench_now_s() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    double flop = 2.0 * (double)n * n * n;
    double checksum = 0.0;
    for (size_t i = 0; i < nn; i += 4097) checksum += C[i];

    printf("gptx-bench-sgemm: OpenBLAS %s (core %s)\n", openblas_get_config(),
           openblas_get_corename());
    printf("threads     : %d (openblas_get_num_threads)\n", openblas_get_num_threads());
    printf("problem     : cblas_sgemm row-major NN, %d x %d x %d fp32, %d warm-up, %d timed\n", n,
           n, n, warmup, reps);
    printf("time        : median %.5f s (min %.5f, max %.5f)\n", med, t[0], t[reps - 1]);
    printf("rate        : %.2f GFLOP/s median (best %.2f)  [checksum %.4g]\n", flop / med * 1e-9,
           flop / t[0] * 1e-9, checksum);
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "gptx-bench-sgemm: cannot write %s: %s\n", json, strerror(errno));
            return 1;
        }
        fprintf(f,
                "{\n  \"threads\": %d, \"n\": %d, \"warmup\": %d, \"reps\": %d,\n"
                "  \"median_s\": %.6f, \"min_s\": %.6f, \"max_s\": %.6f,\n"
                "  \"gflops\": %.4f, \"gflops_best\": %.4f,\n  \"openblas_config\": \"%s\"\n}\n",
                openblas_get_num_threads(), n, warmup, reps, med, t[0], t[reps - 1],
                flop / med * 1e-9, flop / t[0] * 1e-9, openblas_get_config());
        fclose(f);
    }
    free(A);
    free(B);
    free(C);
    free(t);
    return 0;
}
