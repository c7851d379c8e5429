/* Causal flash attention on tensor cores (FlashAttention-2's tiling) for
 * bf16 activations at head size 64 and 128: products on mma.sync m16n8k16
 * (bf16 in, fp32 accumulation), operands from shared memory through
 * ldmatrix, K/V (or Q/dO) tiles double-buffered with cp.async, online
 * softmax in fp32 with the log-sum-exp kept for the backward.
 *
 * A block is 4 warps; each warp owns 16 rows of the block's 64 and holds
 * their fp32 accumulators in registers (C fragments, cuda_mma.h). Scores are
 * kept in the log2 domain (s * scale * log2 e, exp2); the saved lse is the
 * natural one.
 *
 *   forward  (B*NH, T/64 query tiles): S = Q K^T, masked, online softmax,
 *            O += P V with P rounded to bf16 (its C fragments are the A
 *            operand directly), O / l rounded to bf16, lse = m + log l.
 *            The KV-cache path of generation is the same kernel with K/V
 *            read from the cache and query rows at positions pos0..: key
 *            tiles sit at the same absolute positions, and a tile that is
 *            wholly masked for a row changes nothing of it (scale 1, add 0),
 *            so a row gets the same bits whichever block computes it.
 *   backward, deterministic (no atomics; each output element one writer):
 *            dK/dV kernel over key tiles: S^T = K Q^T, P^T = exp(S^T - lse),
 *            dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q;
 *            dQ kernel over query tiles: S, P, dP as above, dQ += dS K.
 *            D = rowsum(dO * O) comes from cuda_attention.cu.
 *
 * Shared-memory tiles are rows of HS bf16 whose 16-byte chunks are XOR-
 * swizzled by row (swz), so the 8 rows an ldmatrix reads fall in 8 different
 * bank groups. The host (cuda_attention.cu) takes this path only for bf16
 * activations, head size 64 or 128, C % 8 == 0 and 16-byte aligned buffers
 * (cp.async and the vector stores need it; x86 would hide a misaligned
 * access, the emulation does not). */
#include "cuda_mma.h"

#define FLASH_WARPS 4
#define FLASH_THREADS (FLASH_WARPS * 32)
#define FLASH_ROWS 64 /* rows of a block's own tile (queries, or keys for dK/dV): 16 per warp */
#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f

/* Query tile of the dK/dV kernel: smaller at head size 128, where dK and dV
 * take 128 accumulator registers per thread. */
#define FLASH_BWD_BQ(HS) ((HS) == 64 ? 64 : 32)

/* Shared-memory bytes of each kernel. */
#define FLASH_FWD_SMEM(HS) (5 * FLASH_ROWS * (HS) * 2)
#define FLASH_BWD_KV_SMEM(HS)                                                                      \
    ((2 * FLASH_ROWS + 4 * FLASH_BWD_BQ(HS)) * (HS) * 2 + 4 * FLASH_BWD_BQ(HS) * 4)
#define FLASH_BWD_Q_SMEM(HS) (6 * FLASH_ROWS * (HS) * 2)

/* Element (r, c) of a tile of HS-wide rows: 16-byte chunk c / 8 XOR row % 8. */
template <int HS> static __device__ __forceinline__ int swz(int r, int c) {
    return r * HS + (((c >> 3) ^ (r & 7)) << 3) + (c & 7);
}

/* Rows [0, NROWS) of a tile from src (row stride ld), rows >= valid
 * zero-filled, as 16-byte asynchronous copies by the whole block: a thread
 * copies chunk threadIdx.x % (HS / 8) of every (FLASH_THREADS / (HS / 8))-th
 * row, so its swizzle is the same in every pass and its addresses step by
 * constants (the copies are issued inside the tile loops). */
template <int HS, int NROWS>
static __device__ __forceinline__ void tile_load(gptx_bf16 *tile, const gptx_bf16 *src,
                                                 long long ld, int valid) {
    const int CH = HS / 8, RP = FLASH_THREADS / CH; /* chunks per row, rows per pass */
    int r = (int)threadIdx.x / CH, c = ((int)threadIdx.x % CH) * 8;
    gptx_bf16 *dst = tile + swz<HS>(r, c);
    const gptx_bf16 *from = src + r * ld + c;
#pragma unroll
    for (int it = 0; it < NROWS / RP; it++) {
        int ok = r + it * RP < valid;
        gptx_cp_async16(dst + it * RP * HS, ok ? from + it * RP * ld : src, ok ? 16 : 0);
    }
}

/* ---- fragments and warp products ---------------------------------------------------- */

/* Where a lane's ldmatrix row address lies in a 16x16 block of a tile, in
 * the two orders the fragments take: "quarters" (rows lane % 8 + 8 ((lane / 8)
 * % 2), chunk lane / 16: A, and B read down the columns) and "pairs" (rows
 * lane % 8 + 8 (lane / 16), chunk (lane / 8) % 2: B read along the rows).
 * The chunk is kept already XORed with row % 8 (= lane % 8 for blocks that
 * start at a multiple of 8 rows): the block's column c0 (a multiple of 16)
 * then enters as x ^ (c0 / 8), the lane's chunk bit and c0 / 8 never
 * overlapping -- one XOR per load instead of the whole swizzle. */
typedef struct lane_pos {
    int row, x;
} lane_pos;
static __device__ __forceinline__ lane_pos lane_quarters(void) {
    int l = threadIdx.x % 32;
    lane_pos p = {l % 8 + ((l / 8) % 2) * 8, (l / 16) ^ (l % 8)};
    return p;
}
static __device__ __forceinline__ lane_pos lane_pairs(void) {
    int l = threadIdx.x % 32;
    lane_pos p = {l % 8 + (l / 16) * 8, ((l / 8) % 2) ^ (l % 8)};
    return p;
}
/* = swz(r0 + p.row, c0 + the lane's chunk * 8) for r0 % 8 == 0, c0 % 16 == 0 */
template <int HS> static __device__ __forceinline__ int lane_at(lane_pos p, int r0, int c0) {
    return (r0 + p.row) * HS + ((p.x ^ (c0 >> 3)) << 3);
}

/* acc (16 x 8N) += rows ra.. of tile a (16 x HS) times rows rb..rb+8N-1 of
 * tile b transposed: a warp's S = Q K^T (A in quarters, B in pairs). */
template <int HS, int N>
static __device__ __forceinline__ void mma_rows_rows(float (*acc)[4], const gptx_bf16 *ta, int ra,
                                                     const gptx_bf16 *tb, int rb) {
    lane_pos qa = lane_quarters(), pb = lane_pairs();
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[4];
        gptx_ldmatrix_x4(a, ta + lane_at<HS>(qa, ra, kk * 16));
#pragma unroll
        for (int j = 0; j < N; j += 2) {
            uint32_t b[4];
            gptx_ldmatrix_x4(b, tb + lane_at<HS>(pb, rb + j * 8, kk * 16));
            gptx_mma_bf16_16816(acc[j], a, b, acc[j]);
            gptx_mma_bf16_16816(acc[j + 1], a, b + 2, acc[j + 1]);
        }
    }
}

/* acc (16 x HS) += p (16 x 16K, C fragments, rounded to bf16) times rows
 * rb..rb+16K-1 of tile b: a warp's O += P V (B read down the columns). */
template <int HS, int K>
static __device__ __forceinline__ void mma_frags_cols(float (*acc)[4], float (*p)[4],
                                                      const gptx_bf16 *tb, int rb) {
    lane_pos qb = lane_quarters();
#pragma unroll
    for (int kk = 0; kk < K; kk++) {
        uint32_t a[4];
        gptx_mma_c_to_a(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn += 2) {
            uint32_t b[4];
            gptx_ldmatrix_x4_trans(b, tb + lane_at<HS>(qb, rb + kk * 16, dn * 8));
            gptx_mma_bf16_16816(acc[dn], a, b, acc[dn]);
            gptx_mma_bf16_16816(acc[dn + 1], a, b + 2, acc[dn + 1]);
        }
    }
}

/* Rows r0..r0+15 of acc (16 x HS) times mul[0] (row g) / mul[1] (row g+8),
 * rounded to bf16, into dst rows 0..valid-1 (row stride ld): staged through
 * the warp's own rows of `stage` so each lane stores whole 16-byte chunks. */
template <int HS>
static __device__ __forceinline__ void store_rows(gptx_bf16 *dst, long long ld, int valid,
                                                  float (*acc)[4], const float mul[2],
                                                  gptx_bf16 *stage, int r0) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) {
        uint32_t lo = gptx_pack_bf16x2(acc[dn][0] * mul[0], acc[dn][1] * mul[0]);
        uint32_t hi = gptx_pack_bf16x2(acc[dn][2] * mul[1], acc[dn][3] * mul[1]);
        *(uint32_t *)(stage + swz<HS>(r0 + g, dn * 8 + 2 * q)) = lo;
        *(uint32_t *)(stage + swz<HS>(r0 + g + 8, dn * 8 + 2 * q)) = hi;
    }
    __syncwarp();
    for (int i = lane; i < 16 * (HS / 8); i += 32) {
        int r = i / (HS / 8), c = (i % (HS / 8)) * 8;
        if (r < valid) gptx_copy16(dst + r * ld + c, stage + swz<HS>(r0 + r, c));
    }
    __syncwarp();
}

/* The sum (or max) of a lane's value over the four lanes holding a row. */
static __device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
static __device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

/* ---- forward --------------------------------------------------------------------- */

typedef struct flash_fwd_params {
    const gptx_bf16 *q, *k, *v; /* row 0 of batch 0, head 0 */
    gptx_bf16 *o;
    float *lse;
    long long q_b, q_h, k_b, k_h, o_b, o_h, lse_b, lse_h; /* offsets per batch, per head */
    int ldq, ldk, ldo;                                    /* row strides (v: ldk) */
    int nq, pos0, NH;  /* query rows, position of query row 0, heads */
    float scale_log2;  /* softmax scale * log2 e */
} flash_fwd_params;

/* One key tile of a warp's online softmax: s (16 x 64 raw scores q.k,
 * columns from key k0) causally masked (query row g at position row), the
 * running maximum m (of raw scores: the scale is positive) and sum l of rows
 * g, g+8 updated, o rescaled, and s replaced by the probabilities
 * exp2(s * scale_log2 - m * scale_log2), one FFMA and one ex2 each. */
template <int HS>
static __device__ __forceinline__ void softmax_tile(float (*s)[4], float m[2], float l[2],
                                                    float (*o)[4], float scale_log2, int row,
                                                    int k0, int mask) {
    int q = threadIdx.x % 4;
    float mx[2] = {-INFINITY, -INFINITY}, base[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < FLASH_ROWS / 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            if (mask && k0 + 8 * j + 2 * q + (i & 1) > row + (i >= 2 ? 8 : 0)) s[j][i] = -INFINITY;
            mx[i >= 2] = fmaxf(mx[i >= 2], s[j][i]);
        }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        float mn = fmaxf(m[r], quad_max(mx[r]));
        /* a row with nothing yet keeps base 0: exp2(-inf) = 0 */
        base[r] = mn == -INFINITY ? 0.0f : mn * scale_log2;
        float corr = exp2f(m[r] * scale_log2 - base[r]);
        m[r] = mn;
        l[r] *= corr;
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            o[dn][2 * r] *= corr;
            o[dn][2 * r + 1] *= corr;
        }
    }
#pragma unroll
    for (int j = 0; j < FLASH_ROWS / 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s[j][i] = exp2f(fmaf(s[j][i], scale_log2, -base[i >= 2]));
            sum[i >= 2] += s[j][i];
        }
    l[0] += sum[0];
    l[1] += sum[1];
}

/* Grid (query tiles, B * NH), 4 warps; the last query tile (the most keys)
 * first. */
template <int HS>
static __global__ void __launch_bounds__(FLASH_THREADS) k_flash_forward(flash_fwd_params p) {
    GPTX_DYNAMIC_SMEM(smem);
    gptx_bf16 *qs = (gptx_bf16 *)smem, *ks = qs + FLASH_ROWS * HS, *vs = ks + 2 * FLASH_ROWS * HS;
    int b = blockIdx.y / p.NH, h = blockIdx.y % p.NH;
    int q0 = (gridDim.x - 1 - blockIdx.x) * FLASH_ROWS;
    int rows = gptx_imin(FLASH_ROWS, p.nq - q0), nkeys = p.pos0 + q0 + rows;
    int ntiles = (nkeys + FLASH_ROWS - 1) / FLASH_ROWS;
    const gptx_bf16 *k = p.k + b * p.k_b + h * p.k_h, *v = p.v + b * p.k_b + h * p.k_h;
    const gptx_bf16 *qrow = p.q + b * p.q_b + h * p.q_h + (long long)q0 * p.ldq;
    tile_load<HS, FLASH_ROWS>(qs, qrow, p.ldq, rows);
    tile_load<HS, FLASH_ROWS>(ks, k, p.ldk, gptx_imin(FLASH_ROWS, nkeys));
    tile_load<HS, FLASH_ROWS>(vs, v, p.ldk, gptx_imin(FLASH_ROWS, nkeys));
    gptx_cp_async_commit();

    int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, r0 = 16 * w;
    int first = p.pos0 + q0 + r0; /* position of the warp's first row */
    float o[HS / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    for (int j = 0; j < ntiles; j++) {
        int buf = (j & 1) * FLASH_ROWS * HS, k0 = j * FLASH_ROWS;
        if (j + 1 < ntiles) { /* the next tile into the other buffer, while this one computes */
            int nb = FLASH_ROWS * HS - buf, k1 = k0 + FLASH_ROWS;
            tile_load<HS, FLASH_ROWS>(ks + nb, k + (long long)k1 * p.ldk, p.ldk, nkeys - k1);
            tile_load<HS, FLASH_ROWS>(vs + nb, v + (long long)k1 * p.ldk, p.ldk, nkeys - k1);
            gptx_cp_async_commit();
            gptx_cp_async_wait<1>();
        } else {
            gptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (r0 < rows && k0 <= first + 15) { /* else every key of the tile is masked for the warp */
            float s[FLASH_ROWS / 8][4];
#pragma unroll
            for (int jn = 0; jn < FLASH_ROWS / 8; jn++)
                s[jn][0] = s[jn][1] = s[jn][2] = s[jn][3] = 0.0f;
            mma_rows_rows<HS, FLASH_ROWS / 8>(s, qs, r0, ks + buf, 0);
            softmax_tile<HS>(s, m, l, o, p.scale_log2, first + g, k0, k0 + FLASH_ROWS - 1 > first);
            mma_frags_cols<HS, FLASH_ROWS / 16>(o, s, vs + buf, 0);
        }
        __syncthreads(); /* the buffer is read before the next-but-one tile lands in it */
    }
    if (r0 >= rows) return;
    float inv[2], lt[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lt[r] = quad_sum(l[r]);
        inv[r] = 1.0f / lt[r];
    }
    store_rows<HS>(p.o + b * p.o_b + h * p.o_h + (long long)(q0 + r0) * p.ldo, p.ldo,
                   rows - r0, o, inv, qs, r0);
    if (threadIdx.x % 4 == 0) {
        float *lse = p.lse + b * p.lse_b + h * p.lse_h + q0 + r0;
        for (int r = 0; r < 2; r++)
            if (r0 + g + 8 * r < rows)
                lse[g + 8 * r] = (m[r] * p.scale_log2 + log2f(lt[r])) * FLASH_LN2;
    }
}

/* ---- backward -------------------------------------------------------------------- */

typedef struct flash_bwd_params {
    const gptx_bf16 *qkv, *dout;
    gptx_bf16 *dqkv;
    const float *lse, *dsum;
    int T, C, NH, hs;
    float scale, scale_log2;
} flash_bwd_params;

/* The (b, h) slab offsets: qkv-like (row stride 3C) and out-like (C). */
static __device__ __forceinline__ long long bwd_qkv_offset(const flash_bwd_params &p, int bh) {
    return (long long)(bh / p.NH) * p.T * 3 * p.C + (long long)(bh % p.NH) * p.hs;
}
static __device__ __forceinline__ long long bwd_out_offset(const flash_bwd_params &p, int bh) {
    return (long long)(bh / p.NH) * p.T * p.C + (long long)(bh % p.NH) * p.hs;
}

/* Query rows t0..t0+BQ-1 of (b, h) for the dK/dV kernel: Q and dO tiles
 * (asynchronous), lse in the log2 domain and D (plain stores; +inf and 0
 * past T, so those rows get p = 0). */
template <int HS, int BQ>
static __device__ __forceinline__ void bwd_kv_load(const flash_bwd_params &p, int bh, int t0,
                                                   gptx_bf16 *qs, gptx_bf16 *dos, float *ls,
                                                   float *ds) {
    const gptx_bf16 *q = p.qkv + bwd_qkv_offset(p, bh) + (long long)t0 * 3 * p.C;
    const gptx_bf16 *d = p.dout + bwd_out_offset(p, bh) + (long long)t0 * p.C;
    tile_load<HS, BQ>(qs, q, 3 * p.C, p.T - t0);
    tile_load<HS, BQ>(dos, d, p.C, p.T - t0);
    for (int i = threadIdx.x; i < BQ; i += FLASH_THREADS) {
        int t = t0 + i;
        ls[i] = t < p.T ? p.lse[(long long)bh * p.T + t] * FLASH_LOG2E : INFINITY;
        ds[i] = t < p.T ? p.dsum[(long long)bh * p.T + t] : 0.0f;
    }
}

/* Grid (key tiles, B * NH): block = 64 keys, query tiles of BQ from the
 * block's first key to T. */
template <int HS, int BQ>
static __global__ void __launch_bounds__(FLASH_THREADS) k_flash_backward_kv(flash_bwd_params p) {
    GPTX_DYNAMIC_SMEM(smem);
    gptx_bf16 *ks = (gptx_bf16 *)smem, *vs = ks + FLASH_ROWS * HS, *qs = vs + FLASH_ROWS * HS;
    gptx_bf16 *dos = qs + 2 * BQ * HS;
    float *ls = (float *)(dos + 2 * BQ * HS), *ds = ls + 2 * BQ;
    int bh = blockIdx.y, s0 = blockIdx.x * FLASH_ROWS, krows = gptx_imin(FLASH_ROWS, p.T - s0);
    long long off = bwd_qkv_offset(p, bh) + (long long)s0 * 3 * p.C;
    tile_load<HS, FLASH_ROWS>(ks, p.qkv + off + p.C, 3 * p.C, krows);
    tile_load<HS, FLASH_ROWS>(vs, p.qkv + off + 2 * p.C, 3 * p.C, krows);
    int ntiles = (p.T - s0 + BQ - 1) / BQ; /* queries before s0 see none of these keys */
    bwd_kv_load<HS, BQ>(p, bh, s0, qs, dos, ls, ds);
    gptx_cp_async_commit();

    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, r0 = 16 * w;
    int ws = s0 + r0; /* the warp's first key */
    float dk[HS / 8][4], dv[HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++)
        for (int i = 0; i < 4; i++) dk[dn][i] = dv[dn][i] = 0.0f;
    for (int j = 0; j < ntiles; j++) {
        int cur = j & 1, t0 = s0 + j * BQ;
        if (j + 1 < ntiles) {
            int nx = cur ^ 1;
            bwd_kv_load<HS, BQ>(p, bh, t0 + BQ, qs + nx * BQ * HS, dos + nx * BQ * HS,
                                ls + nx * BQ, ds + nx * BQ);
            gptx_cp_async_commit();
            gptx_cp_async_wait<1>();
        } else {
            gptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (r0 < krows && t0 + BQ - 1 >= ws) { /* else no query of the tile sees these keys */
            const gptx_bf16 *qt = qs + cur * BQ * HS, *dt = dos + cur * BQ * HS;
            const float *lt = ls + cur * BQ, *dst = ds + cur * BQ;
            float st[BQ / 8][4], dpt[BQ / 8][4];
#pragma unroll
            for (int jn = 0; jn < BQ / 8; jn++)
                for (int i = 0; i < 4; i++) st[jn][i] = dpt[jn][i] = 0.0f;
            mma_rows_rows<HS, BQ / 8>(st, ks, r0, qt, 0);  /* S^T = K Q^T */
            mma_rows_rows<HS, BQ / 8>(dpt, vs, r0, dt, 0); /* dP^T = V dO^T */
#pragma unroll
            for (int jn = 0; jn < BQ / 8; jn++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int s = ws + g + (i >= 2 ? 8 : 0), c = 8 * jn + 2 * q + (i & 1);
                    float pr = t0 + c < s ? 0.0f : exp2f(fmaf(st[jn][i], p.scale_log2, -lt[c]));
                    st[jn][i] = pr;
                    dpt[jn][i] = pr * (dpt[jn][i] - dst[c]); /* dS^T */
                }
            mma_frags_cols<HS, BQ / 16>(dv, st, dt, 0);  /* dV += P^T dO */
            mma_frags_cols<HS, BQ / 16>(dk, dpt, qt, 0); /* dK += dS^T Q */
        }
        __syncthreads();
    }
    if (r0 >= krows) return;
    gptx_bf16 *dst = p.dqkv + off + (long long)r0 * 3 * p.C;
    const float one[2] = {1.0f, 1.0f}, sc[2] = {p.scale, p.scale};
    store_rows<HS>(dst + p.C, 3 * p.C, krows - r0, dk, sc, ks, r0);
    store_rows<HS>(dst + 2 * p.C, 3 * p.C, krows - r0, dv, one, vs, r0);
}

/* Grid (query tiles, B * NH): block = 64 queries over key tiles up to its
 * last query; the last query tile (the most keys) first. */
template <int HS>
static __global__ void __launch_bounds__(FLASH_THREADS) k_flash_backward_q(flash_bwd_params p) {
    GPTX_DYNAMIC_SMEM(smem);
    gptx_bf16 *qs = (gptx_bf16 *)smem, *dos = qs + FLASH_ROWS * HS, *ks = dos + FLASH_ROWS * HS;
    gptx_bf16 *vs = ks + 2 * FLASH_ROWS * HS;
    int bh = blockIdx.y, t0 = (gridDim.x - 1 - blockIdx.x) * FLASH_ROWS;
    int rows = gptx_imin(FLASH_ROWS, p.T - t0), nkeys = t0 + rows;
    int ntiles = (nkeys + FLASH_ROWS - 1) / FLASH_ROWS;
    const gptx_bf16 *slab = p.qkv + bwd_qkv_offset(p, bh);
    tile_load<HS, FLASH_ROWS>(qs, slab + (long long)t0 * 3 * p.C, 3 * p.C, rows);
    const gptx_bf16 *drow = p.dout + bwd_out_offset(p, bh) + (long long)t0 * p.C;
    tile_load<HS, FLASH_ROWS>(dos, drow, p.C, rows);
    tile_load<HS, FLASH_ROWS>(ks, slab + p.C, 3 * p.C, gptx_imin(FLASH_ROWS, nkeys));
    tile_load<HS, FLASH_ROWS>(vs, slab + 2 * p.C, 3 * p.C, gptx_imin(FLASH_ROWS, nkeys));
    gptx_cp_async_commit();

    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, r0 = 16 * w;
    int wt = t0 + r0; /* the warp's first query */
    float l2[2], dd[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int t = wt + g + 8 * r;
        l2[r] = t < p.T ? p.lse[(long long)bh * p.T + t] * FLASH_LOG2E : INFINITY;
        dd[r] = t < p.T ? p.dsum[(long long)bh * p.T + t] : 0.0f;
    }
    float dq[HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) dq[dn][0] = dq[dn][1] = dq[dn][2] = dq[dn][3] = 0.0f;
    for (int j = 0; j < ntiles; j++) {
        int buf = (j & 1) * FLASH_ROWS * HS, k0 = j * FLASH_ROWS;
        if (j + 1 < ntiles) {
            int nb = FLASH_ROWS * HS - buf, k1 = k0 + FLASH_ROWS;
            const gptx_bf16 *krow = slab + (long long)k1 * 3 * p.C;
            tile_load<HS, FLASH_ROWS>(ks + nb, krow + p.C, 3 * p.C, nkeys - k1);
            tile_load<HS, FLASH_ROWS>(vs + nb, krow + 2 * p.C, 3 * p.C, nkeys - k1);
            gptx_cp_async_commit();
            gptx_cp_async_wait<1>();
        } else {
            gptx_cp_async_wait<0>();
        }
        __syncthreads();
        if (r0 < rows && k0 <= wt + 15) {
            float s[FLASH_ROWS / 8][4], dp[FLASH_ROWS / 8][4];
#pragma unroll
            for (int jn = 0; jn < FLASH_ROWS / 8; jn++)
                for (int i = 0; i < 4; i++) s[jn][i] = dp[jn][i] = 0.0f;
            mma_rows_rows<HS, FLASH_ROWS / 8>(s, qs, r0, ks + buf, 0);   /* S = Q K^T */
            mma_rows_rows<HS, FLASH_ROWS / 8>(dp, dos, r0, vs + buf, 0); /* dP = dO V^T */
#pragma unroll
            for (int jn = 0; jn < FLASH_ROWS / 8; jn++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int r = i >= 2, t = wt + g + 8 * r, s_ = k0 + 8 * jn + 2 * q + (i & 1);
                    float pr = s_ > t ? 0.0f : exp2f(fmaf(s[jn][i], p.scale_log2, -l2[r]));
                    dp[jn][i] = pr * (dp[jn][i] - dd[r]); /* dS */
                }
            mma_frags_cols<HS, FLASH_ROWS / 16>(dq, dp, ks + buf, 0); /* dQ += dS K */
        }
        __syncthreads();
    }
    if (r0 >= rows) return;
    const float sc[2] = {p.scale, p.scale};
    store_rows<HS>(p.dqkv + bwd_qkv_offset(p, bh) + (long long)wt * 3 * p.C, 3 * p.C, rows - r0,
                   dq, sc, qs, r0);
}

/* ---- host ------------------------------------------------------------------------ */

/* Lets each kernel take its dynamic shared memory (above 48 KiB needs the
 * attribute); once per backend instance, at creation. */
GPTX_CUDA_FN int gptx_cuda_flash_init(gptx_backend *be) {
    (void)be;
    GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_forward<64>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FLASH_FWD_SMEM(64)));
    GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_forward<128>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FLASH_FWD_SMEM(128)));
    GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_backward_kv<64, FLASH_BWD_BQ(64)>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FLASH_BWD_KV_SMEM(64)));
    GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_backward_kv<128, FLASH_BWD_BQ(128)>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FLASH_BWD_KV_SMEM(128)));
    GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_backward_q<64>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FLASH_BWD_Q_SMEM(64)));
    GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_backward_q<128>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       FLASH_BWD_Q_SMEM(128)));
    return GPTX_OK;
}

static int aligned16(const void *p) { return ((uintptr_t)p % 16) == 0; }

/* Whether the tensor-core kernels take this call (see the top of the file). */
GPTX_CUDA_FN int gptx_cuda_flash_eligible(const gptx_backend *be, int C, int NH,
                                          const void *const *bufs, int nbufs) {
    int hs = C / NH;
    if (!be->act_bf16 || (hs != 64 && hs != 128) || C % 8 != 0) return 0;
    for (int i = 0; i < nbufs; i++)
        if (!aligned16(bufs[i])) return 0;
    return 1;
}

static void launch_fwd(gptx_backend *be, const flash_fwd_params &p, int hs, int batches) {
    dim3 grid((unsigned)((p.nq + FLASH_ROWS - 1) / FLASH_ROWS), (unsigned)(batches * p.NH));
    if (hs == 64)
        GPTX_LAUNCH_SMEM(k_flash_forward<64>, grid, FLASH_THREADS, FLASH_FWD_SMEM(64), be->compute,
                         p);
    else
        GPTX_LAUNCH_SMEM(k_flash_forward<128>, grid, FLASH_THREADS, FLASH_FWD_SMEM(128),
                         be->compute, p);
}

/* Training forward: qkv (B, T, 3C), out (B, T, C), lse (B, NH, T). */
GPTX_CUDA_FN int gptx_cuda_flash_forward(gptx_backend *be, float *out, float *lse,
                                         const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    const gptx_bf16 *q = (const gptx_bf16 *)qkv;
    flash_fwd_params p = {q, q + C, q + 2 * C, (gptx_bf16 *)out, lse,
                          (long long)T * 3 * C, hs, (long long)T * 3 * C, hs, (long long)T * C, hs,
                          (long long)NH * T, T, 3 * C, 3 * C, C, T, 0, NH,
                          FLASH_LOG2E / sqrtf((float)hs)};
    launch_fwd(be, p, hs, B);
    GPTX_CUDA_LAUNCHED("flash_attention_forward");
    return GPTX_OK;
}

/* Generation: n new rows (qkv (n, 3C)) at positions pos0.., keys and values
 * from the cache (NH, cap, hs) each, already holding positions 0..pos0+n-1. */
GPTX_CUDA_FN int gptx_cuda_flash_kv_forward(gptx_backend *be, float *out, float *lse,
                                            const float *qkv, const float *kcache,
                                            const float *vcache, int n, int pos0, int cap, int C,
                                            int NH) {
    int hs = C / NH;
    flash_fwd_params p = {(const gptx_bf16 *)qkv, (const gptx_bf16 *)kcache,
                          (const gptx_bf16 *)vcache, (gptx_bf16 *)out, lse, 0, hs, 0,
                          (long long)cap * hs, 0, hs, 0, n, 3 * C, hs, C, n, pos0, NH,
                          FLASH_LOG2E / sqrtf((float)hs)};
    launch_fwd(be, p, hs, 1);
    GPTX_CUDA_LAUNCHED("flash_attention_kv");
    return GPTX_OK;
}

/* Backward from D (B, NH, T) = rowsum(dout * out): dqkv overwritten. */
GPTX_CUDA_FN int gptx_cuda_flash_backward(gptx_backend *be, float *dqkv, const float *dout,
                                          const float *qkv, const float *lse, const float *dsum,
                                          int B, int T, int C, int NH) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    flash_bwd_params p = {(const gptx_bf16 *)qkv, (const gptx_bf16 *)dout, (gptx_bf16 *)dqkv, lse,
                          dsum, T, C, NH, hs, scale, scale * FLASH_LOG2E};
    dim3 grid((unsigned)((T + FLASH_ROWS - 1) / FLASH_ROWS), (unsigned)(B * NH));
    if (hs == 64) {
        GPTX_LAUNCH_SMEM((k_flash_backward_kv<64, FLASH_BWD_BQ(64)>), grid, FLASH_THREADS,
                         FLASH_BWD_KV_SMEM(64), be->compute, p);
        GPTX_LAUNCH_SMEM(k_flash_backward_q<64>, grid, FLASH_THREADS, FLASH_BWD_Q_SMEM(64),
                         be->compute, p);
    } else {
        GPTX_LAUNCH_SMEM((k_flash_backward_kv<128, FLASH_BWD_BQ(128)>), grid, FLASH_THREADS,
                         FLASH_BWD_KV_SMEM(128), be->compute, p);
        GPTX_LAUNCH_SMEM(k_flash_backward_q<128>, grid, FLASH_THREADS, FLASH_BWD_Q_SMEM(128),
                         be->compute, p);
    }
    GPTX_CUDA_LAUNCHED("flash_attention_backward");
    return GPTX_OK;
}
