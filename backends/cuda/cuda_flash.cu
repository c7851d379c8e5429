/* The tensor-core attention's host side: which calls take it, the tile
 * configuration each runs, the launches of the kernels (cuda_flash.h; one
 * unit per element type and head size, cuda_flash_<type>_<head size>.cu). */
#include "cuda_flash.h"

/* ---- host ------------------------------------------------------------------------ */

static const char *const flash_names[] = {
#define FLASH_NAME(id, name, ...) name,
    GPTX_FLASH_VARIANT_LIST(FLASH_NAME)
#undef FLASH_NAME
};

GPTX_CUDA_FN const char *gptx_cuda_flash_variant_name(int variant) {
    return variant >= 1 && variant <= GPTX_CUDA_FLASH_VARIANTS ? flash_names[variant - 1] : NULL;
}

/* Every kernel of the element type of the backend's policy may take its
 * shared memory (cuda_flash.h, flash_init_op); at backend creation. */
GPTX_CUDA_FN int gptx_cuda_flash_init(gptx_backend *be) {
    be->flash_unfit = 0;
    if (be->act_bf16) {
        GPTX_TRY(gptx_cuda_flash_init_bf16_64(be));
        return gptx_cuda_flash_init_bf16_128(be);
    }
    if (be->precision != GPTX_PRECISION_TF32) return GPTX_OK;
    GPTX_TRY(gptx_cuda_flash_init_tf32_64(be));
    return gptx_cuda_flash_init_tf32_128(be);
}

static int aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* Whether the tensor-core kernels take this call (see the top of the file):
 * bf16 activations, or fp32 ones under the tf32 policy. */
GPTX_CUDA_FN int gptx_cuda_flash_eligible(const gptx_backend *be, int C, int NH,
                                          const void *const *bufs, int nbufs) {
    int hs = C / NH;
    if (!be->act_bf16 && be->precision != GPTX_PRECISION_TF32) return 0;
    if ((hs != 64 && hs != 128) || C % 8 != 0) return 0;
    for (int i = 0; i < nbufs; i++)
        if (!aligned16(bufs[i])) return 0;
    return 1;
}

/* The configuration a call runs: variant (GPTX_CUDA_FLASH_DEFAULT: the
 * backend's), checked against what fits the device. */
static int flash_pick(const gptx_backend *be, int variant, int *out) {
    int v = variant == GPTX_CUDA_FLASH_DEFAULT ? be->flash_variant : variant;
    if (v < 1 || v > GPTX_CUDA_FLASH_VARIANTS)
        return GPTX_FAIL(GPTX_ERR_INVALID, "attention tile variant %d; expected 1..%d", v,
                         GPTX_CUDA_FLASH_VARIANTS);
    if (be->flash_unfit & (1u << v))
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "attention tile variant %d (%s) needs more shared memory per block than "
                         "%s offers (%d bytes)",
                         v, flash_names[v - 1], be->device_name, be->smem_optin);
    *out = v;
    return GPTX_OK;
}

static int launch_fwd(gptx_backend *be, int variant, const flash_fwd_params &p, int hs,
                      int batches) {
    int v = 0;
    GPTX_TRY(flash_pick(be, variant, &v));
    if (be->act_bf16)
        return hs == 64 ? gptx_cuda_flash_forward_bf16_64(be, v, &p, batches)
                        : gptx_cuda_flash_forward_bf16_128(be, v, &p, batches);
    return hs == 64 ? gptx_cuda_flash_forward_tf32_64(be, v, &p, batches)
                    : gptx_cuda_flash_forward_tf32_128(be, v, &p, batches);
}

static int launch_bwd(gptx_backend *be, int v, const flash_bwd_params &p, int hs, int bnh) {
    if (be->act_bf16)
        return hs == 64 ? gptx_cuda_flash_backward_bf16_64(be, v, &p, bnh)
                        : gptx_cuda_flash_backward_bf16_128(be, v, &p, bnh);
    return hs == 64 ? gptx_cuda_flash_backward_tf32_64(be, v, &p, bnh)
                    : gptx_cuda_flash_backward_tf32_128(be, v, &p, bnh);
}

/* Training forward: qkv (B, T, 3C), out (B, T, C), lse (B, NH, T). */
GPTX_CUDA_FN int gptx_cuda_flash_forward(gptx_backend *be, int variant, float *out, float *lse,
                                         const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t es = be->act_bf16 ? 2 : 4;
    const char *q = (const char *)qkv;
    flash_fwd_params p = {q, q + C * es, q + 2 * C * es, out, lse,
                          (long long)T * 3 * C, hs, (long long)T * 3 * C, hs, (long long)T * C, hs,
                          (long long)NH * T, T, 3 * C, 3 * C, C, T, 0, NH,
                          FLASH_LOG2E / sqrtf((float)hs)};
    GPTX_TRY(launch_fwd(be, variant, p, hs, B));
    GPTX_CUDA_LAUNCHED("flash_attention_forward");
    return GPTX_OK;
}

/* Generation: n new rows (qkv (n, 3C)) at positions pos0.., keys and values
 * from the cache (NH, cap, hs) each, already holding positions 0..pos0+n-1. */
GPTX_CUDA_FN int gptx_cuda_flash_kv_forward(gptx_backend *be, int variant, float *out,
                                            float *lse, const float *qkv, const float *kcache,
                                            const float *vcache, int n, int pos0, int cap, int C,
                                            int NH) {
    int hs = C / NH;
    flash_fwd_params p = {qkv, kcache, vcache, out, lse, 0, hs, 0, (long long)cap * hs, 0, hs, 0,
                          n, 3 * C, hs, C, n, pos0, NH, FLASH_LOG2E / sqrtf((float)hs)};
    GPTX_TRY(launch_fwd(be, variant, p, hs, 1));
    GPTX_CUDA_LAUNCHED("flash_attention_kv");
    return GPTX_OK;
}

/* Backward from D (B, NH, T) = rowsum(dout * out): dqkv overwritten. */
GPTX_CUDA_FN int gptx_cuda_flash_backward(gptx_backend *be, int variant, float *dqkv,
                                          const float *dout, const float *qkv, const float *lse,
                                          const float *dsum, int B, int T, int C, int NH) {
    int hs = C / NH, v = 0;
    GPTX_TRY(flash_pick(be, variant, &v));
    float scale = 1.0f / sqrtf((float)hs);
    flash_bwd_params p = {qkv, dout, dqkv, lse, dsum, T, C, NH, hs, scale, scale * FLASH_LOG2E};
    GPTX_TRY(launch_bwd(be, v, p, hs, B * NH));
    GPTX_CUDA_LAUNCHED("flash_attention_backward");
    return GPTX_OK;
}
