/* Matrix products through cuBLASLt, always with fp32 accumulation. By
 * policy: fp32 (fp32 data, CUBLAS_COMPUTE_32F), tf32 (fp32 data, inputs
 * rounded to TF32 on tensor cores), bf16 / bf16_pure (bf16 activations and
 * weight copy in, bf16 activations out, fp32 weight gradients accumulated
 * in place: CUBLAS_COMPUTE_32F with CUDA_R_16BF A/B). The forward bias is
 * cuBLASLt's BIAS epilogue (bias of D's type); the bias gradient is the
 * fixed-order column sum of cuda_ops.cu.
 *
 * cuBLASLt is column-major: a row-major (R, K) matrix with leading
 * dimension K is the column-major (K, R) matrix, its transpose. Each
 * row-major product below is written as the column-major product of the
 * transposes:
 *   forward  out (N, OC) = inp (N, C) @ w (OC, C)^T
 *            column-major: out^T (OC x N) = op_T(w^T: C x OC) * inp^T (C x N)
 *   dinp     dinp (N, C) = dout (N, OC) @ w (OC, C)
 *            column-major: dinp^T (C x N) = w^T (C x OC) * dout^T (OC x N)
 *   dw      dw (OC, C) += dout (N, OC)^T @ inp (N, C)
 *            column-major: dw^T (C x OC) += inp^T (C x N) * op_T(dout^T: OC x N) */
#include "cuda_internal.h"

/* Largest power of two (<= 256) dividing the address: the alignment the
 * heuristic may assume. */
static uint32_t alignment_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al /= 2;
    return al;
}

static cublasComputeType_t compute_type(const gptx_backend *be) {
    return be->precision == GPTX_PRECISION_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

#define LT_TRY(call)                                                                               \
    do {                                                                                           \
        cublasStatus_t lt_status_ = (call);                                                        \
        if (lt_status_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            rc = GPTX_FAIL(GPTX_ERR_BACKEND, "%s failed (cuBLAS status %d)", #call,                \
                           (int)lt_status_);                                                       \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* GELU epilogues: none; forward (D = GELU(product + bias), the GELU input
 * written to aux); backward (D = product * GELU'(aux)). */
enum { LT_GELU_NONE = 0, LT_GELU_FWD = 1, LT_GELU_BWD = 2 };

/* GPTX_CUDA_LT_REPORT set (and not 0): one line on stderr per product shape
 * when the heuristic is asked, saying what it chose, so a device run can
 * check per shape that no product runs a poor configuration (issue 33: a
 * backward product measured at 133 TFLOP/s). Cold path only: a shape is
 * asked once and cached. */
static void lt_report(int transa, int transb, int m, int n, int k, float beta, int bias, int gelu,
                      cudaDataType_t td, const cublasLtMatmulHeuristicResult_t *res) {
    const char *v = getenv("GPTX_CUDA_LT_REPORT");
    if (!v || !*v || !strcmp(v, "0")) return;
    int32_t id = -1, splitk = -1;
    uint32_t tile = 0, stages = 0, red = 0, swz = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(&res->algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&res->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile,
                                         sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&res->algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages,
                                         sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&res->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                         sizeof splitk, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&res->algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red,
                                         sizeof red, &w);
    cublasLtMatmulAlgoConfigGetAttribute(&res->algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz,
                                         sizeof swz, &w);
    const char *epi = gelu == LT_GELU_FWD ? (bias ? "gelu_aux_bias" : "gelu_aux")
                      : gelu == LT_GELU_BWD ? "dgelu"
                      : bias                ? "bias"
                                            : "none";
    fprintf(stderr,
            "gptx cuBLASLt: m %d n %d k %d op %c%c beta %g D %s epilogue %s: algo %d tile %u "
            "stages %u splitK %d reduction %u swizzle %u workspace %zu B waves %.2f\n",
            m, n, k, transa ? 'T' : 'N', transb ? 'T' : 'N', (double)beta,
            td == CUDA_R_16BF ? "bf16" : "fp32", epi, (int)id, tile, stages, (int)splitk, red, swz,
            res->workspaceSize, (double)res->wavesCount);
}

/* D (m x n, ld ldd) = op(A) (m x k) * op(B) (k x n) + beta * D, plus bias[i]
 * on row i of D when bias is not NULL, then the GELU epilogue `gelu` with
 * its aux matrix (m x n, ld ldd, D's type). Column-major; A and B of type
 * tab, D (and the bias) of type td. */
static int lt_matmul_epi(gptx_backend *be, int transa, int transb, int m, int n, int k,
                         const void *A, int lda, const void *B, int ldb, void *D, int ldd,
                         float beta, const void *bias, cudaDataType_t tab, cudaDataType_t td,
                         int gelu, const void *aux) {
    int rc = GPTX_OK;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    float alpha = 1.0f;
    cublasComputeType_t ct = compute_type(be);
    uint32_t al_a = alignment_of(A), al_b = alignment_of(B), al_d = alignment_of(D);
    uint32_t al_x = aux ? alignment_of(aux) : 0;
    int key[16] = {transa,       transb,       m,         n,         k,         lda,
                   ldb,          ldd,          beta != 0.0f, bias != NULL, (int)al_a, (int)al_b,
                   (int)al_d,    (int)ct,      (int)tab | (int)td << 8, gelu | (int)al_x << 4};
    const cublasLtMatmulAlgo_t *algo = NULL;

    LT_TRY(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
    {
        int32_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    }
    if (bias || gelu) {
        uint32_t epi = gelu == LT_GELU_FWD ? (bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                                   : CUBLASLT_EPILOGUE_GELU_AUX)
                       : gelu == LT_GELU_BWD ? CUBLASLT_EPILOGUE_DGELU
                                             : CUBLASLT_EPILOGUE_BIAS;
        LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (bias)
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof bias));
        if (gelu) {
            /* the GELU input matrix, D's type (the default aux type) and
             * D's shape; its ld must be a multiple of 8 (cublasLt.h) */
            int64_t aux_ld = ldd;
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                                  &aux, sizeof aux));
            LT_TRY(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                  &aux_ld, sizeof aux_ld));
        }
    }
    /* layouts describe the stored matrices, before op() */
    LT_TRY(cublasLtMatrixLayoutCreate(&la, tab, transa ? k : m, transa ? m : k, lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&lb, tab, transb ? n : k, transb ? k : n, ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&ld, td, m, n, ldd));

    for (int i = 0; i < GPTX_CUDA_ALGO_CACHE && !algo; i++) {
        if (!be->algos[i].valid || memcmp(be->algos[i].key, key, sizeof key) != 0) continue;
        if (be->algos[i].valid == 2) { /* remembered: no algorithm */
            rc = GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "cuBLASLt has no algorithm for m %d n %d k %d", m,
                           n, k);
            goto done;
        }
        algo = &be->algos[i].algo;
    }
    if (!algo) {
        LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = be->lt_workspace_bytes;
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
        LT_TRY(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        memset(&res, 0, sizeof res);
        cublasStatus_t hs =
            cublasLtMatmulAlgoGetHeuristic(be->lt, op, la, lb, ld, ld, pref, 1, &res, &found);
        if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED) {
            rc = GPTX_FAIL(GPTX_ERR_BACKEND, "cublasLtMatmulAlgoGetHeuristic failed (status %d)",
                           (int)hs);
            goto done;
        }
        gptx_cuda_algo *slot = &be->algos[be->algo_next];
        be->algo_next = (be->algo_next + 1) % GPTX_CUDA_ALGO_CACHE;
        memcpy(slot->key, key, sizeof key);
        if (hs != CUBLAS_STATUS_SUCCESS || found < 1) {
            slot->valid = 2;
            rc = GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                           "cuBLASLt has no algorithm for m %d n %d k %d (trans %d%d, alignment "
                           "%u/%u/%u bytes, bias %d, gelu %d)",
                           m, n, k, transa, transb, al_a, al_b, al_d, bias != NULL, gelu);
            goto done;
        }
        lt_report(transa, transb, m, n, k, beta, bias != NULL, gelu, td, &res);
        slot->valid = 1;
        slot->algo = res.algo;
        algo = &slot->algo;
    }
    /* C and D are the same buffer with the same layout (in place) */
    LT_TRY(cublasLtMatmul(be->lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, algo,
                          be->lt_workspace, be->lt_workspace_bytes, be->compute));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return rc;
}

static int lt_matmul(gptx_backend *be, int transa, int transb, int m, int n, int k, const void *A,
                     int lda, const void *B, int ldb, void *D, int ldd, float beta,
                     const void *bias, cudaDataType_t tab, cudaDataType_t td) {
    return lt_matmul_epi(be, transa, transb, m, n, k, A, lda, B, ldb, D, ldd, beta, bias, tab, td,
                         LT_GELU_NONE, NULL);
}

/* out[n, oc] += bias[oc]: used when the epilogue is not (unaligned bias, no
 * epilogue algorithm for the shape). */
template <typename A>
static __global__ void k_add_bias(A *out, const A *bias, int OC, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        gptx_st(&out[i], gptx_ld(out[i]) + gptx_ld(bias[i % (size_t)OC]));
}

/* storage type of activations and of the weights the products read */
static cudaDataType_t act_type(const gptx_backend *be) {
    return be->act_bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

GPTX_CUDA_FN int gptx_cuda_matmul_forward(gptx_backend *be, float *out, const float *inp,
                                          const float *w, const float *bias, int N, int C, int OC) {
    GPTX_TRY(gptx_cuda_enter(be));
    /* the epilogue reads the bias vectorised: only offered for 16-byte aligned
     * biases, and dropped for shapes cuBLASLt has no epilogue algorithm for */
    int epilogue = bias && alignment_of(bias) >= 16;
    cudaDataType_t t = act_type(be);
    int rc = lt_matmul(be, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, epilogue ? bias : NULL, t,
                       t);
    if (rc == GPTX_ERR_UNSUPPORTED && epilogue) {
        gptx_clear_error();
        epilogue = 0;
        rc = lt_matmul(be, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, NULL, t, t);
    }
    GPTX_TRY(rc);
    if (bias && !epilogue) {
        size_t total = (size_t)N * OC;
        GPTX_LAUNCH_ACT(k_add_bias, gptx_cuda_blocks(total, 256), 256, be->compute, (act_t *)out,
                        (const act_t *)bias, OC, total);
        GPTX_CUDA_LAUNCHED("add_bias");
    }
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_matmul_backward(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                           const float *dout, const float *inp, const float *w,
                                           int N, int C, int OC) {
    GPTX_TRY(gptx_cuda_enter(be));
    cudaDataType_t t = act_type(be);
    if (dinp) GPTX_TRY(lt_matmul(be, 0, 0, C, N, OC, w, C, dout, OC, dinp, C, 0.0f, NULL, t, t));
    /* weight gradients stay fp32 under every policy */
    GPTX_TRY(lt_matmul(be, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, NULL, t, CUDA_R_32F));
    if (dbias) GPTX_TRY(gptx_cuda_column_sums(be, dbias, NULL, dout, NULL, NULL, NULL, N, OC));
    return GPTX_OK;
}

/* pre (N, OC) = inp @ w^T + bias, out = GELU(pre), in one product with the
 * GELU_AUX(_BIAS) epilogue when cuBLASLt offers it for the shape (aux ld =
 * OC a multiple of 8, 16-byte aligned buffers and bias), else the separate
 * product and GELU kernel. */
GPTX_CUDA_FN int gptx_cuda_matmul_gelu_forward(gptx_backend *be, float *out, float *pre,
                                               const float *inp, const float *w,
                                               const float *bias, int N, int C, int OC) {
    GPTX_TRY(gptx_cuda_enter(be));
    cudaDataType_t t = act_type(be);
    int fused = OC % 8 == 0 && alignment_of(pre) >= 16 && alignment_of(out) >= 16 &&
                (!bias || alignment_of(bias) >= 16);
    if (fused) {
        int rc = lt_matmul_epi(be, 1, 0, OC, N, C, w, C, inp, C, out, OC, 0.0f, bias, t, t,
                               LT_GELU_FWD, pre);
        if (rc == GPTX_OK) return GPTX_OK;
        if (rc != GPTX_ERR_UNSUPPORTED) return rc;
        gptx_clear_error(); /* no algorithm with this epilogue: separate ops */
    }
    GPTX_TRY(gptx_cuda_matmul_forward(be, pre, inp, w, bias, N, C, OC));
    return gptx_cuda_gelu_forward(be, out, pre, (size_t)N * OC);
}

/* matmul_backward of a product whose input was GELU(pre): dinp (N, C) =
 * (dout @ w) * GELU'(pre) in one product with the DGELU epilogue when
 * offered (aux ld = C a multiple of 8, aligned), else the product then the
 * GELU-backward kernel. The bias gradient is the fixed-order column sum,
 * not DGELU_BGRAD: that epilogue overwrites in D's type, while the fp32
 * gradient must accumulate. */
GPTX_CUDA_FN int gptx_cuda_matmul_backward_dgelu(gptx_backend *be, float *dinp, float *dw,
                                                 float *dbias, const float *dout,
                                                 const float *inp, const float *w,
                                                 const float *pre, int N, int C, int OC) {
    GPTX_TRY(gptx_cuda_enter(be));
    cudaDataType_t t = act_type(be);
    int fused = C % 8 == 0 && alignment_of(pre) >= 16 && alignment_of(dinp) >= 16;
    int done = 0;
    if (fused) {
        int rc = lt_matmul_epi(be, 0, 0, C, N, OC, w, C, dout, OC, dinp, C, 0.0f, NULL, t, t,
                               LT_GELU_BWD, pre);
        if (rc != GPTX_OK && rc != GPTX_ERR_UNSUPPORTED) return rc;
        if (rc == GPTX_ERR_UNSUPPORTED) gptx_clear_error();
        done = rc == GPTX_OK;
    }
    if (!done) {
        GPTX_TRY(lt_matmul(be, 0, 0, C, N, OC, w, C, dout, OC, dinp, C, 0.0f, NULL, t, t));
        /* in place: the kernel reads dout[i] before writing dinp[i] */
        GPTX_TRY(gptx_cuda_gelu_backward(be, dinp, pre, dinp, (size_t)N * C));
    }
    GPTX_TRY(lt_matmul(be, 0, 1, C, OC, N, inp, C, dout, OC, dw, C, 1.0f, NULL, t, CUDA_R_32F));
    if (dbias) GPTX_TRY(gptx_cuda_column_sums(be, dbias, NULL, dout, NULL, NULL, NULL, N, OC));
    return GPTX_OK;
}
