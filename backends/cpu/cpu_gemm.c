/* Matrix products for the CPU backend: OpenBLAS sgemm, parallelized by the
 * backend's own thread pool instead of OpenBLAS's threads.
 *
 * Why not OpenBLAS's threading: (1) its threaded driver changes how an
 * output element's sum is formed with the thread count at some shapes (e.g.
 * 1000x250x777: different bits at 1 and 2 threads, test_thread_invariance),
 * which breaks deterministic mode; (2) its workers spin for a long time after
 * each product and compete for the cores with the pool's next op. Here every
 * product is cut along M or N only, into parts whose number and bounds depend
 * on the product's shape alone, never on the thread count; each part is a
 * single-threaded sgemm over the full K, and the pool's threads take parts
 * as they come. Cutting one part per thread is not enough: on AVX2 (OpenBLAS
 * Zen/Haswell kernels) an element's bits depend on the width of the sgemm it
 * is part of (columns 56..63 of a 64-column product differ from the same
 * columns inside a 512-column one), so only identical parts give identical
 * bits for every thread count. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cpu_kernels.h"
#include "errors.h"
#ifdef GPTX_HAVE_DNNL
#include "cpu_dnnl.h"
#endif

/* OpenBLAS core names whose sgemm kernel uses AVX-512 registers */
static int openblas_core_avx512(const char *core) {
    static const char *const wide[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
    for (size_t i = 0; core && i < sizeof wide / sizeof wide[0]; i++)
        if (strcasecmp(core, wide[i]) == 0) return 1;
    return 0;
}

int gptx_cpu_fp32_gemm_decide(const char *env, int have_dnnl, int cpu_avx512, const char *core,
                              int *use_dnnl) {
    *use_dnnl = 0;
    if (!env || !*env || strcmp(env, "auto") == 0) {
        /* Measured (docs/benchmarks.md, issue 27): where OpenBLAS runs its
         * widest kernel it wins (AVX2 EPYC: both 161 GFLOP/s at 2048^3, but
         * oneDNN on gptx's fixed tiles runs the 124M step 27 % slower), so
         * OpenBLAS, the reference, stays; an AVX-512 CPU whose
         * OpenBLAS runs a narrower kernel (OPENBLAS_CORETYPE=Haswell, or a
         * core OpenBLAS does not know) loses up to half its peak there, and
         * oneDNN's kernels do not depend on that setting. */
        *use_dnnl = have_dnnl && cpu_avx512 && !openblas_core_avx512(core);
        return GPTX_OK;
    }
    if (strcmp(env, "openblas") == 0) return GPTX_OK;
    if (strcmp(env, "onednn") == 0) {
        if (!have_dnnl)
            return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "GPTX_CPU_FP32_GEMM is onednn, but this build "
                                                   "of gptx has no oneDNN (cmake/GptxDnnl.cmake)");
        *use_dnnl = 1;
        return GPTX_OK;
    }
    return GPTX_FAIL(GPTX_ERR_INVALID,
                     "GPTX_CPU_FP32_GEMM is '%s'; it takes auto, openblas or onednn", env);
}

int gptx_cpu_fp32_gemm_choice(int *use_dnnl) {
#ifdef GPTX_HAVE_DNNL
    int have_dnnl = 1;
#else
    int have_dnnl = 0;
#endif
    __builtin_cpu_init();
    return gptx_cpu_fp32_gemm_decide(getenv("GPTX_CPU_FP32_GEMM"), have_dnnl,
                                     __builtin_cpu_supports("avx512f") != 0,
                                     openblas_get_corename(), use_dnnl);
}

typedef struct {
    int ta, tb, M, N, K;
    float alpha, beta;
    const float *A, *B;
    float *C;
    int lda, ldb, ldc;
    int split_n, nparts;
} gemm_args;

/* Parts are at least GEMM_PART_MIN wide (each part packs the other operand
 * again: about 3 % of a part's time at 256), at most GEMM_PARTS_MAX, and an
 * even number when more than one, so two threads share them evenly. */
#define GEMM_PART_MIN 256
#define GEMM_PARTS_MAX 16

static int gemm_parts(int dim) {
    int n = dim / GEMM_PART_MIN;
    if (n > GEMM_PARTS_MAX) n = GEMM_PARTS_MAX;
    if (n > 1 && n % 2) n--;
    return n < 1 ? 1 : n;
}

/* Part boundaries on multiples of 16 (whole kernel tiles) except the end. */
static int part_start(int dim, int part, int nparts) {
    if (part >= nparts) return dim;
    return (int)((int64_t)dim * part / nparts) & ~15;
}

static void gemm_task(void *vp, int part) {
    gemm_args *a = vp;
    int dim = a->split_n ? a->N : a->M;
    int lo = part_start(dim, part, a->nparts), hi = part_start(dim, part + 1, a->nparts);
    if (hi <= lo) return;
    const float *A = a->A, *B = a->B;
    float *C = a->C;
    int M = a->M, N = a->N;
    if (a->split_n) { /* columns lo..hi of C: rows (tb) or columns of B */
        B += a->tb ? (size_t)lo * a->ldb : (size_t)lo;
        C += lo;
        N = hi - lo;
    } else { /* rows lo..hi of C: rows of A, or columns when A is transposed */
        A += a->ta ? (size_t)lo : (size_t)lo * a->lda;
        C += (size_t)lo * a->ldc;
        M = hi - lo;
    }
    cblas_sgemm(CblasRowMajor, a->ta ? CblasTrans : CblasNoTrans, a->tb ? CblasTrans : CblasNoTrans,
                M, N, a->K, a->alpha, A, a->lda, B, a->ldb, a->beta, C, a->ldc);
}

int gptx_cpu_sgemm(gptx_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C,
                   int ldc) {
#ifdef GPTX_HAVE_DNNL
    /* oneDNN's f32 matmul on cpu_dnnl.c's fixed tiles (the bits depend on the
     * shape alone there too); alpha != 1 (only the naive attention variant)
     * and other betas stay on OpenBLAS */
    if (be->fp32_dnnl && alpha == 1.0f && (beta == 0.0f || beta == 1.0f) && K > 0) {
        gptx_cpu_matmul mm = {.M = M, .N = N, .K = K,
                              .A32 = A, .a_row = trans_a ? 1 : (size_t)lda,
                              .a_col = trans_a ? (size_t)lda : 1,
                              .B32 = B, .b_row = trans_b ? 1 : (size_t)ldb,
                              .b_col = trans_b ? (size_t)ldb : 1,
                              .C = C, .ldc = (size_t)ldc, .c_f32 = 1, .accumulate = beta == 1.0f};
        return gptx_cpu_dnnl_matmul(be, &mm);
    }
#endif
    GPTX_TRY(gptx_cpu_blas_enter());
    /* Cut the dimension whose operand is larger, so the smaller one is the
     * operand every part packs again. */
    gemm_args a = {trans_a, trans_b, M, N, K, alpha, beta, A, B, C, lda, ldb, ldc,
                   N > M, gemm_parts(N > M ? N : M)};
    gptx_threadpool_run(be->pool, a.nparts, gemm_task, &a);
    return GPTX_OK;
}
