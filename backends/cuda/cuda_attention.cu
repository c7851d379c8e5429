/* Causal self-attention, flash style, computed in fp32 whatever the
 * activation type A (float or bf16: q, k, v and the gradients are widened
 * when loaded and rounded when stored; the log-sum-exp stays fp32): the
 * forward pass keeps each
 * query row's log-sum-exp (B, NH, T) -- the CPU backend's layout -- and the
 * backward pass recomputes the probabilities from q, k and that statistic.
 * No (B, NH, T, T) buffer and no float mask; no atomics (dK/dV and dQ come
 * from two kernels that each own their outputs), so results are bitwise
 * repeatable.
 *
 * Kept simple on purpose: one thread per query row (forward, dQ) or key row
 * (dK/dV), the row's vectors in registers (HS: head size rounded up to 16,
 * 32, 64 or 128, zero-padded), tiles of the other side staged in shared
 * memory and read by all threads at once (broadcast). Each thread runs an
 * online softmax over its row, rescaling its sums whenever the running
 * maximum grows. */
#include "cuda_internal.h"

#define ROWS 64 /* rows (threads) per block */
#define TILE 32 /* rows of the other side per shared-memory tile */

/* Loads rows [r0, r0 + TILE) of one head's part (0 q, 1 k, 2 v) of qkv
 * (b's (T, 3C) slab) into tile (TILE, HS), zero outside [0, T) x [0, hs). */
template <int HS, typename A>
static __device__ __forceinline__ void load_tile(float (*tile)[HS], const A *slab, int part, int r0,
                                                 int T, int C, int h, int hs) {
    for (int idx = threadIdx.x; idx < TILE * HS; idx += ROWS) {
        int j = idx / HS, i = idx % HS, r = r0 + j;
        tile[j][i] = (r < T && i < hs)
                         ? gptx_ld(slab[(size_t)r * 3 * C + (size_t)part * C + h * hs + i])
                         : 0.0f;
    }
}

/* Key row (k, v) of query row q's online softmax: the running maximum m, sum
 * l and output o are rescaled when the maximum grows. The loop of both
 * k_attention_forward and k_attention_kv, whose prefill must give the
 * training kernel's bits: every rounding is spelled out (__fmaf_rn,
 * __fmul_rn, __fadd_rn), so nvcc cannot contract the two copies differently. */
template <int HS>
static __device__ __forceinline__ void attn_online_step(const float *q, const float *k,
                                                        const float *v, float scale, float *m,
                                                        float *l, float *o) {
    float d = 0.0f;
#pragma unroll
    for (int i = 0; i < HS; i++) d = __fmaf_rn(q[i], k[i], d);
    d = __fmul_rn(d, scale);
    if (d > *m) {                  /* new running max: rescale what was summed so far */
        float corr = expf(*m - d); /* 0 for the first key (m = -inf) */
        *l = __fmul_rn(*l, corr);
#pragma unroll
        for (int i = 0; i < HS; i++) o[i] = __fmul_rn(o[i], corr);
        *m = d;
    }
    float p = expf(d - *m);
    *l = __fadd_rn(*l, p);
#pragma unroll
    for (int i = 0; i < HS; i++) o[i] = __fmaf_rn(p, v[i], o[i]);
}

/* The row's output o / l (its first hs of HS values) and log-sum-exp. */
template <int HS, typename A>
static __device__ __forceinline__ void attn_row_store(A *dst, float *lse, const float *o, float m,
                                                      float l, int hs) {
    float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < HS; i++)
        if (i < hs) gptx_st(&dst[i], __fmul_rn(o[i], inv));
    *lse = __fadd_rn(m, logf(l));
}

/* Grid (ceil(T / ROWS), B * NH); thread = query row t. */
template <int HS, typename A>
static __global__ void __launch_bounds__(ROWS)
    k_attention_forward(A *out, float *lse, const A *qkv, int T, int C, int NH, float scale) {
    __shared__ float ks[TILE][HS], vs[TILE][HS];
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int t0 = blockIdx.x * ROWS, t = t0 + threadIdx.x;
    int valid = t < T;
    const A *slab = qkv + (size_t)b * T * 3 * C;
    float q[HS], o[HS];
#pragma unroll
    for (int i = 0; i < HS; i++) {
        q[i] = valid && i < hs ? gptx_ld(slab[(size_t)t * 3 * C + h * hs + i]) : 0.0f;
        o[i] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int t_last = t0 + ROWS - 1 < T - 1 ? t0 + ROWS - 1 : T - 1; /* same for the whole block */
    for (int s0 = 0; s0 <= t_last; s0 += TILE) {
        __syncthreads(); /* the previous tile is consumed */
        load_tile<HS, A>(ks, slab, 1, s0, T, C, h, hs);
        load_tile<HS, A>(vs, slab, 2, s0, T, C, h, hs);
        __syncthreads();
        if (!valid || s0 > t) continue;
        for (int j = 0; j < TILE && s0 + j <= t; j++)
            attn_online_step<HS>(q, ks[j], vs[j], scale, &m, &l, o);
    }
    if (valid)
        attn_row_store<HS>(out + ((size_t)b * T + t) * C + h * hs, &lse[(size_t)bh * T + t], o,
                           m, l, hs);
}

/* ---- generation: attention over a key/value cache (backend.h attention_kv_forward) ---- */

/* The new rows' keys and values into the cache (NH, cap, hs) each, at
 * positions pos0 .. pos0 + n - 1. */
template <typename A>
static __global__ void k_kv_store(A *kc, A *vc, const A *qkv, int n, int pos0, int cap, int C,
                                  int NH) {
    int hs = C / NH;
    size_t total = (size_t)n * C;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        size_t i = idx / C, c = idx % C, h = c / hs, d = c % hs;
        size_t dst = (h * cap + (size_t)pos0 + i) * hs + d;
        kc[dst] = qkv[i * 3 * C + C + c];
        vc[dst] = qkv[i * 3 * C + 2 * C + c];
    }
}

/* Cached rows [r0, r0 + TILE) of one head ((cap, hs) at base) into tile,
 * zero at and after row `rows`. */
template <int HS, typename A>
static __device__ __forceinline__ void load_cache_tile(float (*tile)[HS], const A *base, int r0,
                                                       int rows, int hs) {
    for (int idx = threadIdx.x; idx < TILE * HS; idx += ROWS) {
        int j = idx / HS, i = idx % HS, r = r0 + j;
        tile[j][i] = (r < rows && i < hs) ? gptx_ld(base[(size_t)r * hs + i]) : 0.0f;
    }
}

/* Grid (ceil(n / ROWS), NH); thread = new row i at position pos0 + i, over
 * the cached keys and values. The loop of k_attention_forward: with pos0 = 0
 * the same bits. Kept as simple as that kernel (one thread per query row):
 * decoding one token runs NH threads, a GPU performance item for later. */
template <int HS, typename A>
static __global__ void __launch_bounds__(ROWS)
    k_attention_kv(A *out, float *lse, const A *qkv, const A *kc, const A *vc, int n, int pos0,
                   int cap, int C, int NH, float scale) {
    __shared__ float ks[TILE][HS], vs[TILE][HS];
    int h = blockIdx.y, hs = C / NH;
    int i0 = blockIdx.x * ROWS, i = i0 + threadIdx.x;
    int valid = i < n, t = pos0 + i, rows = pos0 + n;
    const A *kh = kc + (size_t)h * cap * hs, *vh = vc + (size_t)h * cap * hs;
    float q[HS], o[HS];
#pragma unroll
    for (int d = 0; d < HS; d++) {
        q[d] = valid && d < hs ? gptx_ld(qkv[(size_t)i * 3 * C + h * hs + d]) : 0.0f;
        o[d] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int t_last = pos0 + (i0 + ROWS - 1 < n - 1 ? i0 + ROWS - 1 : n - 1);
    for (int s0 = 0; s0 <= t_last; s0 += TILE) {
        __syncthreads(); /* the previous tile is consumed */
        load_cache_tile<HS, A>(ks, kh, s0, rows, hs);
        load_cache_tile<HS, A>(vs, vh, s0, rows, hs);
        __syncthreads();
        if (!valid || s0 > t) continue;
        for (int j = 0; j < TILE && s0 + j <= t; j++)
            attn_online_step<HS>(q, ks[j], vs[j], scale, &m, &l, o);
    }
    if (valid)
        attn_row_store<HS>(out + (size_t)i * C + h * hs, &lse[(size_t)h * n + i], o, m, l, hs);
}

/* Dsum[bh, t] = dout[b, t, head h] . out[b, t, head h] (= sum_s p_s dout.v_s).
 * One warp per row: its lanes read the head's columns side by side (a row's
 * bytes in one or two coalesced accesses, where a thread per row touched a
 * different cache line per element at every step) and add them in a butterfly. */
template <typename A>
static __global__ void k_attention_dsum(float *dsum, const A *dout, const A *out, int B, int T,
                                        int C, int NH) {
    int hs = C / NH, lane = (int)(threadIdx.x % 32);
    size_t total = (size_t)B * NH * T, warps = (size_t)gridDim.x * blockDim.x / 32;
    /* the loop is uniform across a warp: blockDim.x is a multiple of 32 */
    for (size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; i < total; i += warps) {
        size_t t = i % T, bh = i / T, b = bh / NH, h = bh % NH;
        const A *d = dout + (b * T + t) * C + h * hs, *o = out + (b * T + t) * C + h * hs;
        float s = 0.0f;
        for (int k = lane; k < hs; k += 32) s += gptx_ld(d[k]) * gptx_ld(o[k]);
        s = gptx_warp_sum(s);
        if (lane == 0) dsum[i] = s;
    }
}

/* Grid (ceil(T / ROWS), B * NH); thread = key row s, over query rows t >= s:
 *   p = exp(q_t . k_s * scale - lse_t);  dv_s += p dout_t;
 *   ds = p (dout_t . v_s - Dsum_t) scale; dk_s += ds q_t. */
template <int HS, typename A>
static __global__ void __launch_bounds__(ROWS)
    k_attention_backward_kv(A *dqkv, const A *dout, const A *qkv, const float *lse,
                            const float *dsum, int T, int C, int NH, float scale) {
    __shared__ float qs[TILE][HS], ds_[TILE][HS], ls[TILE], dss[TILE];
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int s0 = blockIdx.x * ROWS, s = s0 + threadIdx.x;
    int valid = s < T;
    const A *slab = qkv + (size_t)b * T * 3 * C;
    const A *dslab = dout + (size_t)b * T * C;
    float k[HS], v[HS], dk[HS], dv[HS];
#pragma unroll
    for (int i = 0; i < HS; i++) {
        k[i] = valid && i < hs ? gptx_ld(slab[(size_t)s * 3 * C + C + h * hs + i]) : 0.0f;
        v[i] = valid && i < hs ? gptx_ld(slab[(size_t)s * 3 * C + 2 * C + h * hs + i]) : 0.0f;
        dk[i] = dv[i] = 0.0f;
    }
    for (int q0 = s0; q0 < T; q0 += TILE) { /* queries before s0 see none of these keys */
        __syncthreads();
        load_tile<HS, A>(qs, slab, 0, q0, T, C, h, hs);
        for (int idx = threadIdx.x; idx < TILE * HS; idx += ROWS) {
            int j = idx / HS, i = idx % HS, r = q0 + j;
            ds_[j][i] = (r < T && i < hs) ? gptx_ld(dslab[(size_t)r * C + h * hs + i]) : 0.0f;
        }
        for (int j = threadIdx.x; j < TILE; j += ROWS) {
            int r = q0 + j;
            ls[j] = r < T ? lse[(size_t)bh * T + r] : 0.0f;
            dss[j] = r < T ? dsum[(size_t)bh * T + r] : 0.0f;
        }
        __syncthreads();
        if (!valid) continue;
        for (int j = 0; j < TILE; j++) {
            int t = q0 + j;
            if (t >= T || t < s) continue;
            float qk = 0.0f, dpv = 0.0f;
#pragma unroll
            for (int i = 0; i < HS; i++) {
                qk += qs[j][i] * k[i];
                dpv += ds_[j][i] * v[i];
            }
            float p = expf(qk * scale - ls[j]);
            float dsc = p * (dpv - dss[j]) * scale;
#pragma unroll
            for (int i = 0; i < HS; i++) {
                dv[i] += p * ds_[j][i];
                dk[i] += dsc * qs[j][i];
            }
        }
    }
    if (valid) {
        A *dst = dqkv + ((size_t)b * T + s) * 3 * C + h * hs;
#pragma unroll
        for (int i = 0; i < HS; i++) {
            if (i >= hs) continue;
            gptx_st(&dst[C + i], dk[i]);
            gptx_st(&dst[2 * C + i], dv[i]);
        }
    }
}

/* Grid (ceil(T / ROWS), B * NH); thread = query row t, over key rows s <= t:
 *   dq_t += p (dout_t . v_s - Dsum_t) scale k_s. */
template <int HS, typename A>
static __global__ void __launch_bounds__(ROWS)
    k_attention_backward_q(A *dqkv, const A *dout, const A *qkv, const float *lse,
                           const float *dsum, int T, int C, int NH, float scale) {
    __shared__ float ks[TILE][HS], vs[TILE][HS];
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int t0 = blockIdx.x * ROWS, t = t0 + threadIdx.x;
    int valid = t < T;
    const A *slab = qkv + (size_t)b * T * 3 * C;
    float q[HS], d[HS], dq[HS];
#pragma unroll
    for (int i = 0; i < HS; i++) {
        q[i] = valid && i < hs ? gptx_ld(slab[(size_t)t * 3 * C + h * hs + i]) : 0.0f;
        d[i] = valid && i < hs ? gptx_ld(dout[((size_t)b * T + t) * C + h * hs + i]) : 0.0f;
        dq[i] = 0.0f;
    }
    float l = valid ? lse[(size_t)bh * T + t] : 0.0f;
    float D = valid ? dsum[(size_t)bh * T + t] : 0.0f;
    int t_last = t0 + ROWS - 1 < T - 1 ? t0 + ROWS - 1 : T - 1;
    for (int s0 = 0; s0 <= t_last; s0 += TILE) {
        __syncthreads();
        load_tile<HS, A>(ks, slab, 1, s0, T, C, h, hs);
        load_tile<HS, A>(vs, slab, 2, s0, T, C, h, hs);
        __syncthreads();
        if (!valid || s0 > t) continue;
        for (int j = 0; j < TILE; j++) {
            if (s0 + j > t) break;
            float qk = 0.0f, dpv = 0.0f;
#pragma unroll
            for (int i = 0; i < HS; i++) {
                qk += q[i] * ks[j][i];
                dpv += d[i] * vs[j][i];
            }
            float p = expf(qk * scale - l);
            float dsc = p * (dpv - D) * scale;
#pragma unroll
            for (int i = 0; i < HS; i++) dq[i] += dsc * ks[j][i];
        }
    }
    if (valid) {
        A *dst = dqkv + ((size_t)b * T + t) * 3 * C + h * hs;
#pragma unroll
        for (int i = 0; i < HS; i++)
            if (i < hs) gptx_st(&dst[i], dq[i]);
    }
}

/* The padded head size the kernels are instantiated for; 0 = unsupported. */
static int padded_head_size(int hs) {
    return hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : hs <= 128 ? 128 : 0;
}

static int check_shape(int B, int T, int C, int NH, int *HS) {
    if (B <= 0 || T <= 0 || NH <= 0 || C <= 0 || C % NH != 0)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "attention shape B %d T %d C %d NH %d", B, T, C, NH);
    *HS = padded_head_size(C / NH);
    if (!*HS)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "attention head size %d; the CUDA kernels support at most 128", C / NH);
    if ((size_t)B * NH > 65535)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "B * NH = %lld is above 65535", (long long)B * NH);
    return GPTX_OK;
}

/* The instantiation for the padded head size HS and activation type A
 * (taken through a pointer: a template-id with two arguments would split
 * the launch macro's arguments). */
template <typename A>
static void launch_forward(gptx_backend *be, int HS, dim3 grid, A *out, float *lse, const A *qkv,
                           int T, int C, int NH, float scale) {
    void (*kern)(A *, float *, const A *, int, int, int, float) =
        HS == 16   ? k_attention_forward<16, A>
        : HS == 32 ? k_attention_forward<32, A>
        : HS == 64 ? k_attention_forward<64, A>
                   : k_attention_forward<128, A>;
    GPTX_LAUNCH(kern, grid, ROWS, be->compute, out, lse, qkv, T, C, NH, scale);
}

template <typename A>
static void launch_backward(gptx_backend *be, int HS, dim3 grid, A *dqkv, const A *dout,
                            const A *qkv, const float *lse, const float *dsum, int T, int C,
                            int NH, float scale) {
    typedef void (*kernel_t)(A *, const A *, const A *, const float *, const float *, int, int,
                             int, float);
    kernel_t kv = HS == 16   ? k_attention_backward_kv<16, A>
                  : HS == 32 ? k_attention_backward_kv<32, A>
                  : HS == 64 ? k_attention_backward_kv<64, A>
                             : k_attention_backward_kv<128, A>;
    kernel_t q = HS == 16   ? k_attention_backward_q<16, A>
                 : HS == 32 ? k_attention_backward_q<32, A>
                 : HS == 64 ? k_attention_backward_q<64, A>
                            : k_attention_backward_q<128, A>;
    GPTX_LAUNCH(kv, grid, ROWS, be->compute, dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
    GPTX_LAUNCH(q, grid, ROWS, be->compute, dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
}

GPTX_CUDA_FN int gptx_cuda_attention_forward(gptx_backend *be, float *out, float *lse,
                                             const float *qkv, int B, int T, int C, int NH,
                                             int flash) {
    int HS = 0;
    GPTX_TRY(check_shape(B, T, C, NH, &HS));
    GPTX_TRY(gptx_cuda_enter(be));
    const void *bufs[] = {out, qkv};
    if (flash != GPTX_CUDA_FLASH_SIMT && gptx_cuda_flash_eligible(be, C, NH, bufs, 2))
        return gptx_cuda_flash_forward(be, flash, out, lse, qkv, B, T, C, NH);
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((unsigned)((T + ROWS - 1) / ROWS), (unsigned)(B * NH));
    if (be->act_bf16)
        launch_forward<gptx_bf16>(be, HS, grid, (gptx_bf16 *)out, lse, (const gptx_bf16 *)qkv, T, C,
                                  NH, scale);
    else
        launch_forward<float>(be, HS, grid, out, lse, qkv, T, C, NH, scale);
    GPTX_CUDA_LAUNCHED("attention_forward");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_attention_backward(gptx_backend *be, float *dqkv, const float *dout,
                                              const float *qkv, const float *out, const float *lse,
                                              int B, int T, int C, int NH, int flash) {
    int HS = 0;
    GPTX_TRY(check_shape(B, T, C, NH, &HS));
    GPTX_TRY(gptx_cuda_enter(be));
    float scale = 1.0f / sqrtf((float)(C / NH));
    size_t rows = (size_t)B * NH * T;
    void *dev = NULL;
    GPTX_TRY(gptx_cuda_scratch(be, rows * sizeof(float), &dev));
    float *dsum = (float *)dev;
    GPTX_LAUNCH_ACT(k_attention_dsum, gptx_cuda_blocks(rows * 32, 256), 256, be->compute, dsum,
                    (const act_t *)dout, (const act_t *)out, B, T, C, NH);
    GPTX_CUDA_LAUNCHED("attention_dsum");
    const void *bufs[] = {dqkv, dout, qkv};
    if (flash != GPTX_CUDA_FLASH_SIMT && gptx_cuda_flash_eligible(be, C, NH, bufs, 3))
        return gptx_cuda_flash_backward(be, flash, dqkv, dout, qkv, lse, dsum, B, T, C, NH);
    dim3 grid((unsigned)((T + ROWS - 1) / ROWS), (unsigned)(B * NH));
    if (be->act_bf16)
        launch_backward<gptx_bf16>(be, HS, grid, (gptx_bf16 *)dqkv, (const gptx_bf16 *)dout,
                                   (const gptx_bf16 *)qkv, lse, dsum, T, C, NH, scale);
    else
        launch_backward<float>(be, HS, grid, dqkv, dout, qkv, lse, dsum, T, C, NH, scale);
    GPTX_CUDA_LAUNCHED("attention_backward");
    return GPTX_OK;
}

template <typename A>
static void launch_kv(gptx_backend *be, int HS, dim3 grid, A *out, float *lse, const A *qkv,
                      const A *kc, const A *vc, int n, int pos0, int cap, int C, int NH,
                      float scale) {
    void (*kern)(A *, float *, const A *, const A *, const A *, int, int, int, int, int, float) =
        HS == 16   ? k_attention_kv<16, A>
        : HS == 32 ? k_attention_kv<32, A>
        : HS == 64 ? k_attention_kv<64, A>
                   : k_attention_kv<128, A>;
    GPTX_LAUNCH(kern, grid, ROWS, be->compute, out, lse, qkv, kc, vc, n, pos0, cap, C, NH, scale);
}

GPTX_CUDA_FN int gptx_cuda_attention_kv_forward(gptx_backend *be, float *out, float *lse,
                                                const float *qkv, float *kcache, float *vcache,
                                                int n, int pos0, int cap, int C, int NH,
                                                int flash) {
    int HS = 0;
    GPTX_TRY(check_shape(1, n, C, NH, &HS));
    if (pos0 < 0 || pos0 + n > cap)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "attention_kv_forward: rows %d at position %d of a "
                                         "cache of %d",
                         n, pos0, cap);
    GPTX_TRY(gptx_cuda_enter(be));
    size_t elems = (size_t)n * C;
    GPTX_LAUNCH_ACT(k_kv_store, gptx_cuda_blocks(elems, 256), 256, be->compute, (act_t *)kcache,
                    (act_t *)vcache, (const act_t *)qkv, n, pos0, cap, C, NH);
    GPTX_CUDA_LAUNCHED("kv_store");
    const void *bufs[] = {out, qkv, kcache, vcache};
    if (flash != GPTX_CUDA_FLASH_SIMT && gptx_cuda_flash_eligible(be, C, NH, bufs, 4))
        return gptx_cuda_flash_kv_forward(be, flash, out, lse, qkv, kcache, vcache, n, pos0, cap,
                                          C, NH);
    float scale = 1.0f / sqrtf((float)(C / NH));
    dim3 grid((unsigned)((n + ROWS - 1) / ROWS), (unsigned)NH);
    if (be->act_bf16)
        launch_kv<gptx_bf16>(be, HS, grid, (gptx_bf16 *)out, lse, (const gptx_bf16 *)qkv,
                             (const gptx_bf16 *)kcache, (const gptx_bf16 *)vcache, n, pos0, cap, C,
                             NH, scale);
    else
        launch_kv<float>(be, HS, grid, out, lse, qkv, kcache, vcache, n, pos0, cap, C, NH, scale);
    GPTX_CUDA_LAUNCHED("attention_kv");
    return GPTX_OK;
}
