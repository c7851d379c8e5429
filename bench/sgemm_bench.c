/*
 * gptx-bench-sgemm: the machine's reference matrix-product rate.
 *
 * Times OpenBLAS cblas_sgemm (row-major, C = A * B, all N x N, fp32) after
 * warm-up; reports the median (and min/max) of --reps calls as GFLOP/s with
 * 2*N^3 FLOPs per call. The thread count is set with
 * openblas_set_num_threads(--threads).
 *
 * --lib onednn: oneDNN's f32 matmul instead (the same product, one primitive
 * with oneDNN's own OpenMP threads, --threads of them), the library
 * GPTX_CPU_FP32_GEMM=onednn puts under gptx's fp32 products; built where
 * gptx is built with oneDNN.
 */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_gemm.h"
#ifdef GPTX_BENCH_DNNL
#include "bench_dnnl.h"
#endif

#ifdef GPTX_BENCH_DNNL
/* The same product (NN, row-major) on one oneDNN f32 matmul primitive. */
static int time_onednn(const bench_gemm_args *opt, float *A, float *B, float *C, double *t) {
    int n = opt->n;
    if (opt->threads > 0) omp_set_num_threads(opt->threads);
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    bench_dnnl_mm mm;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&stream, eng, dnnl_stream_default_flags) != dnnl_success ||
        bench_dnnl_create(&mm, eng, dnnl_f32, 0, 0, n, n, n, n, n, n, 0) != dnnl_success) {
        fprintf(stderr, "gptx-bench-sgemm: oneDNN's f32 matmul could not be created\n");
        return 1;
    }
    for (int i = 0; i < opt->warmup + opt->reps; i++) {
        double t0 = bench_now_s();
        if (bench_dnnl_run(&mm, eng, stream, A, B, C) != dnnl_success) {
            fprintf(stderr, "gptx-bench-sgemm: oneDNN's f32 matmul failed\n");
            return 1;
        }
        if (i >= opt->warmup) t[i - opt->warmup] = bench_now_s() - t0;
    }
    bench_gemm_rate r = bench_gemm_rate_of(t, opt->reps, n);
    double checksum = 0.0;
    for (size_t i = 0; i < (size_t)n * n; i += 4097) checksum += C[i];
    printf("gptx-bench-sgemm: %s f32 matmul, kernel %s\n", bench_dnnl_version(), mm.impl);
    printf("threads     : %d (OpenMP, oneDNN's own threading)\n", omp_get_max_threads());
    printf("problem     : matmul row-major NN, %d x %d x %d fp32, %d warm-up, %d timed\n", n, n,
           n, opt->warmup, opt->reps);
    bench_gemm_print(&r, checksum);
    char what[128];
    snprintf(what, sizeof what, "%s %s", bench_dnnl_version(), mm.impl);
    int rc = bench_gemm_write_json(opt, "gptx-bench-sgemm", omp_get_max_threads(), &r, "onednn",
                                   what);
    dnnl_primitive_destroy(mm.prim);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    free(A);
    free(B);
    free(C);
    free(t);
    return rc;
}
#endif

int main(int argc, char **argv) {
    bench_gemm_args opt;
    int rc = bench_gemm_parse_lib(&opt, "gptx-bench-sgemm",
                                  "threads of the library (openblas_set_num_threads or OpenMP's "
                                  "for oneDNN); 0 = its default",
                                  "the library timed: openblas or onednn", argc, argv);
    if (rc >= 0) return rc;
    int n = opt.n, warmup = opt.warmup, reps = opt.reps;
    int onednn = strcmp(opt.lib, "onednn") == 0;
#ifndef GPTX_BENCH_DNNL
    if (onednn) {
        fprintf(stderr, "gptx-bench-sgemm: --lib onednn: this build has no oneDNN\n");
        return 2;
    }
#endif
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
#ifdef GPTX_BENCH_DNNL
    if (onednn) return time_onednn(&opt, A, B, C, t);
#endif
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
