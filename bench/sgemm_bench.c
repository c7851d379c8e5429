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

#include "bench_gemm.h"

int main(int argc, char **argv) {
    bench_gemm_args opt;
    int rc = bench_gemm_parse(&opt, "gptx-bench-sgemm",
                              "openblas_set_num_threads(N); 0 = leave OpenBLAS's default", argc,
                              argv);
    if (rc >= 0) return rc;
    int n = opt.n, warmup = opt.warmup, reps = opt.reps;
    if (opt.threads > 0) openblas_set_num_threads(opt.threads);

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
    bench_gemm_rate r = bench_gemm_rate_of(t, reps, n);
    double checksum = 0.0;
    for (size_t i = 0; i < nn; i += 4097) checksum += C[i];

    printf("gptx-bench-sgemm: OpenBLAS %s (core %s)\n", openblas_get_config(),
           openblas_get_corename());
    printf("threads     : %d (openblas_get_num_threads)\n", openblas_get_num_threads());
    printf("problem     : cblas_sgemm row-major NN, %d x %d x %d fp32, %d warm-up, %d timed\n", n,
           n, n, warmup, reps);
    bench_gemm_print(&r, checksum);
    rc = bench_gemm_write_json(&opt, "gptx-bench-sgemm", openblas_get_num_threads(), &r,
                               "openblas_config", openblas_get_config());
    free(A);
    free(B);
    free(C);
    free(t);
    return rc;
}
