/*
 * gptx-bench-bf16gemm: the machine's reference bf16 matrix-product rate, as
 * gptx-bench-sgemm is the fp32 one.
 *
 * Times one oneDNN matmul primitive (C = A * B^T, all N x N row-major, B
 * stored as nn.Linear's weight; bf16 inputs, fp32 accumulation and output)
 * after warm-up, with oneDNN's own
 * threading (OpenMP, --threads of them): the best the vendor library does
 * with the whole problem, which gptx's fixed-tile products are compared
 * with. Reports the median (and best) of --reps calls as GFLOP/s with 2*N^3
 * FLOPs per call, and the kernel oneDNN chose (e.g. brg:avx512_core_amx_bf16).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_dnnl.h"
#include "bench_gemm.h"

#define DNNL_CHECK(call)                                                               \
    do {                                                                               \
        dnnl_status_t st_ = (call);                                                    \
        if (st_ != dnnl_success) {                                                     \
            fprintf(stderr, "gptx-bench-bf16gemm: %s failed (%d)\n", #call, (int)st_); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

int main(int argc, char **argv) {
    bench_gemm_args opt;
    int rc = bench_gemm_parse(&opt, "gptx-bench-bf16gemm",
                              "OpenMP threads for oneDNN; 0 = its default", argc, argv);
    if (rc >= 0) return rc;
    int n = opt.n, warmup = opt.warmup, reps = opt.reps;
    if (opt.threads > 0) omp_set_num_threads(opt.threads);

    size_t nn = (size_t)n * n;
    uint16_t *A = malloc(nn * 2), *B = malloc(nn * 2);
    float *C = malloc(nn * sizeof *C);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!A || !B || !C || !t) {
        fprintf(stderr, "gptx-bench-bf16gemm: out of host memory\n");
        return 1;
    }
    unsigned x = 12345u;
    for (size_t i = 0; i < nn; i++) { /* bf16 of uniform values in [-0.5, 0.5) */
        x = x * 1664525u + 1013904223u;
        float a = (float)(x >> 8) / 16777216.0f - 0.5f;
        x = x * 1664525u + 1013904223u;
        float b = (float)(x >> 8) / 16777216.0f - 0.5f;
        uint32_t ua, ub;
        memcpy(&ua, &a, 4);
        memcpy(&ub, &b, 4);
        A[i] = (uint16_t)(ua >> 16);
        B[i] = (uint16_t)(ub >> 16);
    }
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    DNNL_CHECK(dnnl_engine_create(&eng, dnnl_cpu, 0));
    DNNL_CHECK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
    /* B as nn.Linear stores its weight, (N, K) row-major: the layout of the
     * model's products, and the faster one (970 against 820 GFLOP/s on AMX) */
    bench_dnnl_mm mm;
    DNNL_CHECK(bench_dnnl_create(&mm, eng, dnnl_bf16, 0, 1, n, n, n, n, n, n, 0));
    const char *impl = mm.impl;
    for (int i = 0; i < warmup; i++) {
        DNNL_CHECK(bench_dnnl_run(&mm, eng, stream, A, B, C));
    }
    for (int i = 0; i < reps; i++) {
        double t0 = bench_now_s();
        DNNL_CHECK(bench_dnnl_run(&mm, eng, stream, A, B, C));
        t[i] = bench_now_s() - t0;
    }
    bench_gemm_rate r = bench_gemm_rate_of(t, reps, n);
    double checksum = 0.0;
    for (size_t i = 0; i < nn; i += 4097) checksum += C[i];
    const dnnl_version_t *ver = dnnl_version();

    printf("gptx-bench-bf16gemm: oneDNN %d.%d.%d, kernel %s\n", ver->major, ver->minor,
           ver->patch, impl);
    printf("threads     : %d (OpenMP, oneDNN's own threading)\n", omp_get_max_threads());
    printf("problem     : matmul C = A B^T row-major, %d x %d x %d, bf16 inputs, fp32 "
           "accumulation and output, %d warm-up, %d timed\n",
           n, n, n, warmup, reps);
    bench_gemm_print(&r, checksum);
    rc = bench_gemm_write_json(&opt, "gptx-bench-bf16gemm", omp_get_max_threads(), &r, "kernel",
                               impl);
    dnnl_primitive_destroy(mm.prim);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    free(A);
    free(B);
    free(C);
    free(t);
    return rc;
}
