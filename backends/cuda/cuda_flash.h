/* Causal flash attention on tensor cores (FlashAttention-2's tiling) at head
 * size 64 and 128, for two element types E:
 *   bf16 (the bf16 policies): products on mma.sync m16n8k16 (bf16 in, fp32
 *        accumulation), operands from shared memory through ldmatrix;
 *   fp32 (the tf32 policy): products on mma.sync m16n8k8 .tf32 (fp32
 *        accumulation), each tile rounded to tf32 in shared memory once it
 *        lands (cvt.rna), operands through 16-byte loads with k in pairs
 *        (cuda_mma.h), P and dS rounded to tf32 as operands.
 * K/V (or Q/dO) tiles double-buffered with cp.async, online softmax in fp32
 * with the log-sum-exp kept for the backward.
 *
 * Each warp owns 16 rows (MT = 2: 32) of its block's tile and holds their
 * fp32 accumulators in registers (C fragments, cuda_mma.h). Scores are kept
 * in the log2 domain (s * scale * log2 e, exp2); the saved lse is the
 * natural one.
 *
 *   forward  (B*NH, query tiles): S = Q K^T, masked, online softmax over key
 *            tiles of 64, O += P V with P rounded to E's operand precision,
 *            O / l stored as E, lse = m + log l. The KV-cache path of
 *            generation is the same kernel with K/V read from the cache and
 *            query rows at positions pos0..: key tiles sit at the same
 *            absolute positions, and a tile that is wholly masked for a row
 *            changes nothing of it (scale 1, add 0), so a row gets the same
 *            bits whichever block -- and whichever tile configuration below --
 *            computes it.
 *   backward, deterministic (no atomics; each output element one writer):
 *            dK/dV kernel over key tiles: S^T = K Q^T, P^T = exp(S^T - lse),
 *            dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO, dK += dS^T Q;
 *            dQ kernel over query tiles: S, P, dP as above, dQ += dS K.
 *            D = rowsum(dO * O) comes from cuda_attention.cu. Every
 *            accumulation runs over 16 (tf32: 8) rows of the other side per
 *            mma in increasing order, whatever the tile sizes: a row's bits
 *            do not depend on them.
 *
 * Tile configurations (flash_variants below) are template parameters; each
 * can be chosen at run time (GPTX_VARIANT_ATTENTION_TILES, or the
 * environment's GPTX_CUDA_FLASH_TILES for the backend's default), so a
 * device can sweep them in one call (gptx-bench-attention --variant all).
 *
 * Shared-memory tiles are rows of HS elements whose 16-byte chunks are XOR-
 * swizzled by row (swz), so the 8 rows an ldmatrix reads, or the rows and
 * columns a tf32 fragment load touches, fall in different bank groups. The
 * host (cuda_attention.cu) takes this path for bf16 or tf32 activations,
 * head size 64 or 128, C % 8 == 0 and 16-byte aligned buffers (cp.async and
 * the vector stores need it; x86 would hide a misaligned access, the
 * emulation does not).
 *
 * Layout: this header holds the kernels, the configurations and their
 * launches; cuda_flash_<type>_<head size>.cu instantiate one element type
 * and head size each (GPTX_FLASH_INSTANCE), so a parallel build compiles
 * the four at once; cuda_flash.cu is the host side. */
#ifndef GPTX_CUDA_FLASH_H
#define GPTX_CUDA_FLASH_H

#include "cuda_mma.h"


#define FLASH_LOG2E 1.4426950408889634f
#define FLASH_LN2 0.6931471805599453f
#define FLASH_KT 64 /* the forward's key tile: the online softmax's step */

/* ---- tile configurations ---------------------------------------------------------- */

/* Each line: id, name; forward warps and m-tiles per warp (head size 64 /
 * 128); dK/dV warps and query tile (64 / 128); dQ warps and key tile (64 /
 * 128; tf32 at 128 takes at most 32, for shared memory); pipeline (0: the
 * next tile issued before the barrier, a second barrier after the compute;
 * 1: one barrier per tile, the next tile issued after it). Every line gives
 * the same bits (test_cuda_flash compares them); 1 is the configuration of
 * 0.7.x and the default (docs/cuda.md says why, and what a device must
 * decide). */
#define GPTX_FLASH_VARIANT_LIST(X)                                                                 \
    X(1, "base", 4, 1, 1, 4, 64, 32, 4, 64, 64, 0)                                                \
    X(2, "pipe1", 4, 1, 1, 4, 64, 32, 4, 64, 64, 1)                                               \
    X(3, "w8", 8, 1, 1, 8, 64, 32, 8, 64, 64, 1)                                                  \
    X(4, "m2", 4, 2, 1, 4, 32, 16, 4, 32, 32, 1)                                                  \
    X(5, "w8m2", 8, 2, 1, 8, 32, 16, 8, 32, 32, 1)

/* ---- element types ---------------------------------------------------------------- */

/* E's elements per 16-byte chunk and the chunk's swizzle key for row r: the
 * 8 rows of an ldmatrix (bf16) in 8 bank groups; for fp32, both the
 * 16-byte row loads (rows 2p and 2p+1 of one quarter-warp in opposite
 * halves of the banks) and the 32-bit column loads (rows 2q, q = 0..3, in 4
 * different bank-group pairs). */
template <typename E> struct flash_el;
template <> struct flash_el<gptx_bf16> {
    enum { CH = 8, SHIFT = 3 };
    static __device__ __forceinline__ int key(int r) { return r & 7; }
};
template <> struct flash_el<float> {
    enum { CH = 4, SHIFT = 2 };
    static __device__ __forceinline__ int key(int r) { return (r & 7) ^ ((r & 1) << 2); }
};

/* Element (r, c) of a tile of HS-wide rows: chunk c / CH XOR key(r). */
template <typename E, int HS> static __device__ __forceinline__ int swz(int r, int c) {
    typedef flash_el<E> F;
    return r * HS + (((c >> F::SHIFT) ^ F::key(r)) << F::SHIFT) + (c & (F::CH - 1));
}

/* Rows [0, NROWS) of a tile from src (row stride ld), rows >= valid
 * zero-filled, as 16-byte asynchronous copies by the block's kThreads
 * threads: a thread copies chunk threadIdx.x % (HS / CH) of every (kThreads /
 * (HS / CH))-th row (the copies are issued inside the tile loops). */
template <typename E, int HS, int NROWS, int kThreads>
static __device__ __forceinline__ void tile_load(E *tile, const E *src, long long ld, int valid) {
    const int CPR = HS / flash_el<E>::CH, RP = kThreads / CPR; /* chunks per row, rows per pass */
    static_assert(NROWS % RP == 0, "a tile is a whole number of passes");
    int r = (int)threadIdx.x / CPR, c = ((int)threadIdx.x % CPR) * flash_el<E>::CH;
    const E *from = src + r * ld + c;
#pragma unroll
    for (int it = 0; it < NROWS / RP; it++) {
        int ok = r + it * RP < valid;
        gptx_cp_async16(tile + swz<E, HS>(r + it * RP, c), ok ? from + it * RP * ld : src,
                        ok ? 16 : 0);
    }
}

/* A landed tile made into operands: nothing for bf16; fp32 is rounded to
 * tf32 in place, each thread its own copies of tile_load (visible to it
 * after its wait_group; to the others after the barrier that follows). */
template <int HS, int NROWS, int kThreads>
static __device__ __forceinline__ void tile_round(gptx_bf16 *, int) {}
template <int HS, int NROWS, int kThreads>
static __device__ __forceinline__ void tile_round(float *tile, int valid) {
    const int CPR = HS / 4, RP = kThreads / CPR;
    int r = (int)threadIdx.x / CPR, c = ((int)threadIdx.x % CPR) * 4;
#pragma unroll
    for (int it = 0; it < NROWS / RP; it++) {
        if (r + it * RP >= valid) continue; /* zero-filled: already tf32 */
        uint32_t *p = (uint32_t *)(tile + swz<float, HS>(r + it * RP, c)), w[4];
        gptx_lds128(w, p);
        for (int i = 0; i < 4; i++) {
            float f;
            memcpy(&f, &w[i], 4);
            w[i] = gptx_tf32_bits(f);
        }
        gptx_copy16(p, w);
    }
}

/* ---- fragments and warp products: bf16 ----------------------------------------------- */

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

/* acc[m] (16 x 8N) += rows ra + 16m.. of tile a (16 x HS each) times rows
 * rb..rb+8N-1 of tile b transposed: a warp's S = Q K^T for its M m-tiles,
 * each fragment of b loaded once for all of them. */
template <int HS, int M, int N>
static __device__ __forceinline__ void mma_rows_rows(float (*acc)[N][4], const gptx_bf16 *ta,
                                                     int ra, const gptx_bf16 *tb, int rb) {
    lane_pos qa = lane_quarters(), pb = lane_pairs();
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        uint32_t a[M][4];
#pragma unroll
        for (int m = 0; m < M; m++) gptx_ldmatrix_x4(a[m], ta + lane_at<HS>(qa, ra + 16 * m, kk * 16));
#pragma unroll
        for (int j = 0; j < N; j += 2) {
            uint32_t b[4];
            gptx_ldmatrix_x4(b, tb + lane_at<HS>(pb, rb + j * 8, kk * 16));
#pragma unroll
            for (int m = 0; m < M; m++) {
                gptx_mma_bf16_16816(acc[m][j], a[m], b, acc[m][j]);
                gptx_mma_bf16_16816(acc[m][j + 1], a[m], b + 2, acc[m][j + 1]);
            }
        }
    }
}

/* acc[m] (16 x HS) += p[m] (16 x 16K, C fragments, rounded to bf16) times
 * rows rb..rb+16K-1 of tile b: a warp's O += P V (B read down the columns). */
template <int HS, int M, int K>
static __device__ __forceinline__ void mma_frags_cols(float (*acc)[HS / 8][4],
                                                      float (*p)[2 * K][4], const gptx_bf16 *tb,
                                                      int rb) {
    lane_pos qb = lane_quarters();
#pragma unroll
    for (int kk = 0; kk < K; kk++) {
        uint32_t a[M][4];
#pragma unroll
        for (int m = 0; m < M; m++) gptx_mma_c_to_a(a[m], p[m][2 * kk], p[m][2 * kk + 1]);
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn += 2) {
            uint32_t b[4];
            gptx_ldmatrix_x4_trans(b, tb + lane_at<HS>(qb, rb + kk * 16, dn * 8));
#pragma unroll
            for (int m = 0; m < M; m++) {
                gptx_mma_bf16_16816(acc[m][dn], a[m], b, acc[m][dn]);
                gptx_mma_bf16_16816(acc[m][dn + 1], a[m], b + 2, acc[m][dn + 1]);
            }
        }
    }
}

/* ---- fragments and warp products: tf32 ----------------------------------------------- */

/* As above for fp32 tiles already rounded to tf32: 16-byte row loads, k in
 * pairs (cuda_mma.h); lane (g, q) reads chunk q of each 16-column block. */
template <int HS, int M, int N>
static __device__ __forceinline__ void mma_rows_rows(float (*acc)[N][4], const float *ta, int ra,
                                                     const float *tb, int rb) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    /* at head size 128, all 8 blocks unrolled let ptxas hoist every load and
     * spill the dQ kernel (20 bytes): 4 at a time keep it in registers */
#pragma unroll(HS > 64 ? 4 : HS / 16)
    for (int kb = 0; kb < HS / 16; kb++) {
        uint32_t a[M][2][4];
#pragma unroll
        for (int m = 0; m < M; m++)
            gptx_tf32_rows_a(a[m], ta + swz<float, HS>(ra + 16 * m + g, 16 * kb + 4 * q),
                             ta + swz<float, HS>(ra + 16 * m + g + 8, 16 * kb + 4 * q));
#pragma unroll
        for (int j = 0; j < N; j++) {
            uint32_t b[2][2];
            gptx_tf32_rows_b(b, tb + swz<float, HS>(rb + 8 * j + g, 16 * kb + 4 * q));
#pragma unroll
            for (int m = 0; m < M; m++)
#pragma unroll
                for (int s = 0; s < 2; s++) gptx_mma_tf32_1688(acc[m][j], a[m][s], b[s], acc[m][j]);
        }
    }
}

/* k8 step j takes rows rb + 8j + 2q (as k = q) and + 1 (as k = q + 4) of
 * tile b, the order in which the C fragment p[m][j] holds its columns. */
template <int HS, int M, int K>
static __device__ __forceinline__ void mma_frags_cols(float (*acc)[HS / 8][4],
                                                      float (*p)[2 * K][4], const float *tb,
                                                      int rb) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const uint32_t *t = (const uint32_t *)tb;
#pragma unroll
    for (int j = 0; j < 2 * K; j++) {
        uint32_t a[M][4];
#pragma unroll
        for (int m = 0; m < M; m++) gptx_mma_c_to_a_tf32(a[m], p[m][j]);
        int r = rb + 8 * j + 2 * q;
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) {
            uint32_t b[2] = {t[swz<float, HS>(r, 8 * dn + g)], t[swz<float, HS>(r + 1, 8 * dn + g)]};
#pragma unroll
            for (int m = 0; m < M; m++) gptx_mma_tf32_1688(acc[m][dn], a[m], b, acc[m][dn]);
        }
    }
}

/* ---- stores and row reductions ------------------------------------------------------ */

/* Two neighbouring elements of a row into a staging tile, as E. */
static __device__ __forceinline__ void stage_pair(gptx_bf16 *p, float lo, float hi) {
    *(uint32_t *)p = gptx_pack_bf16x2(lo, hi);
}
static __device__ __forceinline__ void stage_pair(float *p, float lo, float hi) {
    p[0] = lo;
    p[1] = hi;
}

/* Rows r0..r0+15 of acc (16 x HS) times mul[0] (row g) / mul[1] (row g+8),
 * as E, into dst rows 0..valid-1 (row stride ld): staged through the warp's
 * own rows of `stage` so each lane stores whole 16-byte chunks. */
template <typename E, int HS>
static __device__ __forceinline__ void store_rows(E *dst, long long ld, int valid,
                                                  float (*acc)[4], const float mul[2], E *stage,
                                                  int r0) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int CH = flash_el<E>::CH;
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) {
        stage_pair(stage + swz<E, HS>(r0 + g, dn * 8 + 2 * q), acc[dn][0] * mul[0],
                   acc[dn][1] * mul[0]);
        stage_pair(stage + swz<E, HS>(r0 + g + 8, dn * 8 + 2 * q), acc[dn][2] * mul[1],
                   acc[dn][3] * mul[1]);
    }
    __syncwarp();
    for (int i = lane; i < 16 * (HS / CH); i += 32) {
        int r = i / (HS / CH), c = (i % (HS / CH)) * CH;
        if (r < valid) gptx_copy16(dst + r * ld + c, stage + swz<E, HS>(r0 + r, c));
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

/* The tile loop's step between two tiles: PIPE 0 issues the next tile
 * (next(), which commits) before waiting for this one, and the caller puts
 * a second barrier after its compute; PIPE 1 waits for this tile, meets the
 * others at the one barrier -- after which nobody reads the buffer the
 * previous tile used -- and issues the next tile into that buffer. round()
 * makes the landed tile into operands (tile_round) before the barrier. */
template <int PIPE, class Next, class Round>
static __device__ __forceinline__ void tile_step(bool more, Next next, Round round) {
    if (PIPE == 0) {
        if (more) {
            next();
            gptx_cp_async_wait<1>();
        } else {
            gptx_cp_async_wait<0>();
        }
        round();
        __syncthreads();
    } else {
        gptx_cp_async_wait<0>();
        round();
        __syncthreads();
        if (more) next();
    }
}

/* ---- forward --------------------------------------------------------------------- */

typedef struct flash_fwd_params {
    const void *q, *k, *v; /* row 0 of batch 0, head 0 (E) */
    void *o;
    float *lse;
    long long q_b, q_h, k_b, k_h, o_b, o_h, lse_b, lse_h; /* offsets per batch, per head */
    int ldq, ldk, ldo;                                    /* row strides (v: ldk) */
    int nq, pos0, NH;  /* query rows, position of query row 0, heads */
    float scale_log2;  /* softmax scale * log2 e */
} flash_fwd_params;

/* One key tile of an m-tile's online softmax: s (16 x 64 raw scores q.k,
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
    for (int j = 0; j < FLASH_KT / 8; j++)
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
    for (int j = 0; j < FLASH_KT / 8; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s[j][i] = exp2f(fmaf(s[j][i], scale_log2, -base[i >= 2]));
            sum[i >= 2] += s[j][i];
        }
    l[0] += sum[0];
    l[1] += sum[1];
}

/* Shared-memory bytes of the forward: Q (its rows), 2 x (K, V) tiles. */
template <typename E, int HS, int W, int MT> struct flash_fwd_cfg {
    static constexpr int kThreads = 32 * W, kRows = 16 * W * MT;
    static constexpr int kSmem = (kRows + 4 * FLASH_KT) * HS * (int)sizeof(E);
};

/* Grid (query tiles, B * NH), W warps of MT m-tiles; the last query tile (the
 * most keys) first. */
template <typename E, int HS, int W, int MT, int PIPE>
static __global__ void __launch_bounds__(32 * W) k_flash_forward(flash_fwd_params p) {
    typedef flash_fwd_cfg<E, HS, W, MT> CFG;
    const int kRows = CFG::kRows, kThreads = CFG::kThreads, KT = FLASH_KT;
    GPTX_DYNAMIC_SMEM(smem);
    E *qs = (E *)smem, *ks = qs + kRows * HS, *vs = ks + 2 * KT * HS;
    int b = blockIdx.y / p.NH, h = blockIdx.y % p.NH;
    int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;
    int rows = gptx_imin(kRows, p.nq - q0), nkeys = p.pos0 + q0 + rows;
    int ntiles = (nkeys + KT - 1) / KT;
    const E *k = (const E *)p.k + b * p.k_b + h * p.k_h, *v = (const E *)p.v + b * p.k_b + h * p.k_h;
    const E *qrow = (const E *)p.q + b * p.q_b + h * p.q_h + (long long)q0 * p.ldq;
    tile_load<E, HS, kRows, kThreads>(qs, qrow, p.ldq, rows);
    tile_load<E, HS, KT, kThreads>(ks, k, p.ldk, gptx_imin(KT, nkeys));
    tile_load<E, HS, KT, kThreads>(vs, v, p.ldk, gptx_imin(KT, nkeys));
    gptx_cp_async_commit();

    int w = threadIdx.x / 32, g = (threadIdx.x % 32) / 4, r0 = 16 * MT * w;
    int first = p.pos0 + q0 + r0; /* position of the warp's first row */
    float o[MT][HS / 8][4], m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
#pragma unroll
        for (int dn = 0; dn < HS / 8; dn++) o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.0f;
    }
    for (int j = 0; j < ntiles; j++) {
        int buf = (j & 1) * KT * HS, k0 = j * KT, nb = KT * HS - buf, k1 = k0 + KT;
        tile_step<PIPE>(
            j + 1 < ntiles,
            [&] { /* the next tile into the other buffer, while this one computes */
                tile_load<E, HS, KT, kThreads>(ks + nb, k + (long long)k1 * p.ldk, p.ldk, nkeys - k1);
                tile_load<E, HS, KT, kThreads>(vs + nb, v + (long long)k1 * p.ldk, p.ldk, nkeys - k1);
                gptx_cp_async_commit();
            },
            [&] {
                if (j == 0) tile_round<HS, kRows, kThreads>(qs, rows);
                tile_round<HS, KT, kThreads>(ks + buf, nkeys - k0);
                tile_round<HS, KT, kThreads>(vs + buf, nkeys - k0);
            });
        /* else every key of the tile is masked for the warp's rows */
        if (r0 < rows && k0 <= first + 16 * MT - 1) {
            float s[MT][KT / 8][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int jn = 0; jn < KT / 8; jn++)
                    s[mt][jn][0] = s[mt][jn][1] = s[mt][jn][2] = s[mt][jn][3] = 0.0f;
            mma_rows_rows<HS, MT, KT / 8>(s, qs, r0, ks + buf, 0);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                int f = first + 16 * mt;
                softmax_tile<HS>(s[mt], m[mt], l[mt], o[mt], p.scale_log2, f + g, k0,
                                 k0 + KT - 1 > f);
            }
            mma_frags_cols<HS, MT, KT / 16>(o, s, vs + buf, 0);
        }
        if (PIPE == 0) __syncthreads(); /* the buffer is read before the next-but-one tile lands */
    }
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        int rm = r0 + 16 * mt;
        if (rm >= rows) break;
        float inv[2], lt[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            lt[r] = quad_sum(l[mt][r]);
            inv[r] = 1.0f / lt[r];
        }
        store_rows<E, HS>((E *)p.o + b * p.o_b + h * p.o_h + (long long)(q0 + rm) * p.ldo, p.ldo,
                          rows - rm, o[mt], inv, qs, rm);
        if (threadIdx.x % 4 == 0) {
            float *lse = p.lse + b * p.lse_b + h * p.lse_h + q0 + rm;
            for (int r = 0; r < 2; r++)
                if (rm + g + 8 * r < rows)
                    lse[g + 8 * r] = (m[mt][r] * p.scale_log2 + log2f(lt[r])) * FLASH_LN2;
        }
    }
}

/* ---- backward -------------------------------------------------------------------- */

typedef struct flash_bwd_params {
    const void *qkv, *dout; /* E */
    void *dqkv;
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

/* Shared-memory bytes of the dK/dV kernel: K, V (its rows), 2 x (Q, dO),
 * 2 x (lse, D); of the dQ kernel: Q, dO (its rows), 2 x (K, V). */
template <typename E, int HS, int W, int BQ> struct flash_kv_cfg {
    static constexpr int kThreads = 32 * W, kRows = 16 * W;
    static constexpr int kSmem = (2 * kRows + 4 * BQ) * HS * (int)sizeof(E) + 4 * BQ * 4;
};
template <typename E, int HS, int W, int KT> struct flash_q_cfg {
    static constexpr int kThreads = 32 * W, kRows = 16 * W;
    static constexpr int kSmem = (2 * kRows + 4 * KT) * HS * (int)sizeof(E);
};

/* Query rows t0..t0+BQ-1 of (b, h) for the dK/dV kernel: Q and dO tiles
 * (asynchronous), lse in the log2 domain and D (plain stores; +inf and 0
 * past T, so those rows get p = 0). */
template <typename E, int HS, int BQ, int kThreads>
static __device__ __forceinline__ void bwd_kv_load(const flash_bwd_params &p, int bh, int t0,
                                                   E *qs, E *dos, float *ls, float *ds) {
    const E *q = (const E *)p.qkv + bwd_qkv_offset(p, bh) + (long long)t0 * 3 * p.C;
    const E *d = (const E *)p.dout + bwd_out_offset(p, bh) + (long long)t0 * p.C;
    tile_load<E, HS, BQ, kThreads>(qs, q, 3 * p.C, p.T - t0);
    tile_load<E, HS, BQ, kThreads>(dos, d, p.C, p.T - t0);
    for (int i = threadIdx.x; i < BQ; i += kThreads) {
        int t = t0 + i;
        ls[i] = t < p.T ? p.lse[(long long)bh * p.T + t] * FLASH_LOG2E : INFINITY;
        ds[i] = t < p.T ? p.dsum[(long long)bh * p.T + t] : 0.0f;
    }
}

/* Grid (key tiles, B * NH): block = 16 W keys, query tiles of BQ from the
 * block's first key to T. */
template <typename E, int HS, int W, int BQ, int PIPE>
static __global__ void __launch_bounds__(32 * W) k_flash_backward_kv(flash_bwd_params p) {
    typedef flash_kv_cfg<E, HS, W, BQ> CFG;
    const int kRows = CFG::kRows, kThreads = CFG::kThreads;
    GPTX_DYNAMIC_SMEM(smem);
    E *ks = (E *)smem, *vs = ks + kRows * HS, *qs = vs + kRows * HS;
    E *dos = qs + 2 * BQ * HS;
    float *ls = (float *)(dos + 2 * BQ * HS), *ds = ls + 2 * BQ;
    int bh = blockIdx.y, s0 = blockIdx.x * kRows, krows = gptx_imin(kRows, p.T - s0);
    long long off = bwd_qkv_offset(p, bh) + (long long)s0 * 3 * p.C;
    const E *qkv = (const E *)p.qkv;
    tile_load<E, HS, kRows, kThreads>(ks, qkv + off + p.C, 3 * p.C, krows);
    tile_load<E, HS, kRows, kThreads>(vs, qkv + off + 2 * p.C, 3 * p.C, krows);
    int ntiles = (p.T - s0 + BQ - 1) / BQ; /* queries before s0 see none of these keys */
    bwd_kv_load<E, HS, BQ, kThreads>(p, bh, s0, qs, dos, ls, ds);
    gptx_cp_async_commit();

    int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4, r0 = 16 * w;
    int ws = s0 + r0; /* the warp's first key */
    float dk[1][HS / 8][4], dv[1][HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++)
        for (int i = 0; i < 4; i++) dk[0][dn][i] = dv[0][dn][i] = 0.0f;
    for (int j = 0; j < ntiles; j++) {
        int cur = j & 1, t0 = s0 + j * BQ, nx = cur ^ 1;
        tile_step<PIPE>(
            j + 1 < ntiles,
            [&] {
                bwd_kv_load<E, HS, BQ, kThreads>(p, bh, t0 + BQ, qs + nx * BQ * HS,
                                                dos + nx * BQ * HS, ls + nx * BQ, ds + nx * BQ);
                gptx_cp_async_commit();
            },
            [&] {
                if (j == 0) {
                    tile_round<HS, kRows, kThreads>(ks, krows);
                    tile_round<HS, kRows, kThreads>(vs, krows);
                }
                tile_round<HS, BQ, kThreads>(qs + cur * BQ * HS, p.T - t0);
                tile_round<HS, BQ, kThreads>(dos + cur * BQ * HS, p.T - t0);
            });
        if (r0 < krows && t0 + BQ - 1 >= ws) { /* else no query of the tile sees these keys */
            const E *qt = qs + cur * BQ * HS, *dt = dos + cur * BQ * HS;
            const float *lt = ls + cur * BQ, *dst = ds + cur * BQ;
            float st[1][BQ / 8][4], dpt[1][BQ / 8][4];
#pragma unroll
            for (int jn = 0; jn < BQ / 8; jn++)
                for (int i = 0; i < 4; i++) st[0][jn][i] = dpt[0][jn][i] = 0.0f;
            mma_rows_rows<HS, 1, BQ / 8>(st, ks, r0, qt, 0);  /* S^T = K Q^T */
            mma_rows_rows<HS, 1, BQ / 8>(dpt, vs, r0, dt, 0); /* dP^T = V dO^T */
#pragma unroll
            for (int jn = 0; jn < BQ / 8; jn++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int s = ws + g + (i >= 2 ? 8 : 0), c = 8 * jn + 2 * q + (i & 1);
                    float pr = t0 + c < s ? 0.0f : exp2f(fmaf(st[0][jn][i], p.scale_log2, -lt[c]));
                    st[0][jn][i] = pr;
                    dpt[0][jn][i] = pr * (dpt[0][jn][i] - dst[c]); /* dS^T */
                }
            mma_frags_cols<HS, 1, BQ / 16>(dv, st, dt, 0);  /* dV += P^T dO */
            mma_frags_cols<HS, 1, BQ / 16>(dk, dpt, qt, 0); /* dK += dS^T Q */
        }
        if (PIPE == 0) __syncthreads();
    }
    if (r0 >= krows) return;
    E *dst = (E *)p.dqkv + off + (long long)r0 * 3 * p.C;
    const float one[2] = {1.0f, 1.0f}, sc[2] = {p.scale, p.scale};
    store_rows<E, HS>(dst + p.C, 3 * p.C, krows - r0, dk[0], sc, ks, r0);
    store_rows<E, HS>(dst + 2 * p.C, 3 * p.C, krows - r0, dv[0], one, vs, r0);
}

/* Grid (query tiles, B * NH): block = 16 W queries over key tiles of KT up
 * to its last query; the last query tile (the most keys) first. */
template <typename E, int HS, int W, int KT, int PIPE>
static __global__ void __launch_bounds__(32 * W) k_flash_backward_q(flash_bwd_params p) {
    typedef flash_q_cfg<E, HS, W, KT> CFG;
    const int kRows = CFG::kRows, kThreads = CFG::kThreads;
    GPTX_DYNAMIC_SMEM(smem);
    E *qs = (E *)smem, *dos = qs + kRows * HS, *ks = dos + kRows * HS;
    E *vs = ks + 2 * KT * HS;
    int bh = blockIdx.y, t0 = (gridDim.x - 1 - blockIdx.x) * kRows;
    int rows = gptx_imin(kRows, p.T - t0), nkeys = t0 + rows;
    int ntiles = (nkeys + KT - 1) / KT;
    const E *slab = (const E *)p.qkv + bwd_qkv_offset(p, bh);
    tile_load<E, HS, kRows, kThreads>(qs, slab + (long long)t0 * 3 * p.C, 3 * p.C, rows);
    const E *drow = (const E *)p.dout + bwd_out_offset(p, bh) + (long long)t0 * p.C;
    tile_load<E, HS, kRows, kThreads>(dos, drow, p.C, rows);
    tile_load<E, HS, KT, kThreads>(ks, slab + p.C, 3 * p.C, gptx_imin(KT, nkeys));
    tile_load<E, HS, KT, kThreads>(vs, slab + 2 * p.C, 3 * p.C, gptx_imin(KT, nkeys));
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
    float dq[1][HS / 8][4];
#pragma unroll
    for (int dn = 0; dn < HS / 8; dn++) dq[0][dn][0] = dq[0][dn][1] = dq[0][dn][2] = dq[0][dn][3] = 0.0f;
    for (int j = 0; j < ntiles; j++) {
        int buf = (j & 1) * KT * HS, k0 = j * KT, nb = KT * HS - buf, k1 = k0 + KT;
        tile_step<PIPE>(
            j + 1 < ntiles,
            [&] {
                const E *krow = slab + (long long)k1 * 3 * p.C;
                tile_load<E, HS, KT, kThreads>(ks + nb, krow + p.C, 3 * p.C, nkeys - k1);
                tile_load<E, HS, KT, kThreads>(vs + nb, krow + 2 * p.C, 3 * p.C, nkeys - k1);
                gptx_cp_async_commit();
            },
            [&] {
                if (j == 0) {
                    tile_round<HS, kRows, kThreads>(qs, rows);
                    tile_round<HS, kRows, kThreads>(dos, rows);
                }
                tile_round<HS, KT, kThreads>(ks + buf, nkeys - k0);
                tile_round<HS, KT, kThreads>(vs + buf, nkeys - k0);
            });
        if (r0 < rows && k0 <= wt + 15) {
            float s[1][KT / 8][4], dp[1][KT / 8][4];
#pragma unroll
            for (int jn = 0; jn < KT / 8; jn++)
                for (int i = 0; i < 4; i++) s[0][jn][i] = dp[0][jn][i] = 0.0f;
            mma_rows_rows<HS, 1, KT / 8>(s, qs, r0, ks + buf, 0);   /* S = Q K^T */
            mma_rows_rows<HS, 1, KT / 8>(dp, dos, r0, vs + buf, 0); /* dP = dO V^T */
#pragma unroll
            for (int jn = 0; jn < KT / 8; jn++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    int r = i >= 2, t = wt + g + 8 * r, s_ = k0 + 8 * jn + 2 * q + (i & 1);
                    float pr = s_ > t ? 0.0f : exp2f(fmaf(s[0][jn][i], p.scale_log2, -l2[r]));
                    dp[0][jn][i] = pr * (dp[0][jn][i] - dd[r]); /* dS */
                }
            mma_frags_cols<HS, 1, KT / 16>(dq, dp, ks + buf, 0); /* dQ += dS K */
        }
        if (PIPE == 0) __syncthreads();
    }
    if (r0 >= rows) return;
    const float sc[2] = {p.scale, p.scale};
    store_rows<E, HS>((E *)p.dqkv + bwd_qkv_offset(p, bh) + (long long)wt * 3 * p.C, 3 * p.C,
                      rows - r0, dq[0], sc, qs, r0);
}

/* ---- host: one tile configuration -------------------------------------------------- */

/* The three kernels of one configuration for E and HS: their shared memory,
 * the attribute that lets them take it, their launches. */
template <typename E, int HS, int FW, int FM, int KW, int BQ, int QW, int KT, int PIPE>
struct flash_set {
    typedef flash_fwd_cfg<E, HS, FW, FM> F;
    typedef flash_kv_cfg<E, HS, KW, BQ> KV;
    typedef flash_q_cfg<E, HS, QW, KT> Q;
    static int smem(void) {
        int a = F::kSmem, b = KV::kSmem, c = Q::kSmem;
        return a > b ? (a > c ? a : c) : (b > c ? b : c);
    }
    static int init(void) {
        GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_forward<E, HS, FW, FM, PIPE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, F::kSmem));
        GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_backward_kv<E, HS, KW, BQ, PIPE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, KV::kSmem));
        GPTX_CUDA_TRY(cudaFuncSetAttribute(k_flash_backward_q<E, HS, QW, KT, PIPE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize, Q::kSmem));
        return GPTX_OK;
    }
    static void forward(gptx_backend *be, const flash_fwd_params &p, int batches) {
        dim3 grid((unsigned)((p.nq + F::kRows - 1) / F::kRows), (unsigned)(batches * p.NH));
        auto kern = &k_flash_forward<E, HS, FW, FM, PIPE>;
        GPTX_LAUNCH_SMEM(kern, grid, F::kThreads, F::kSmem, be->compute, p);
    }
    static void backward(gptx_backend *be, const flash_bwd_params &p, int bnh) {
        dim3 gkv((unsigned)((p.T + KV::kRows - 1) / KV::kRows), (unsigned)bnh);
        dim3 gq((unsigned)((p.T + Q::kRows - 1) / Q::kRows), (unsigned)bnh);
        auto kv = &k_flash_backward_kv<E, HS, KW, BQ, PIPE>;
        auto q = &k_flash_backward_q<E, HS, QW, KT, PIPE>;
        GPTX_LAUNCH_SMEM(kv, gkv, KV::kThreads, KV::kSmem, be->compute, p);
        GPTX_LAUNCH_SMEM(q, gq, Q::kThreads, Q::kSmem, be->compute, p);
    }
};

/* dQ's key tile: the line's, at most 32 for fp32 at head size 128 (Q, dO and
 * two K, V tiles of 64 would need 192 KiB; an A100 block gets 163). */
template <typename E, int HS> static constexpr int flash_q_kt(int kt64, int kt128) {
    return HS == 64 ? kt64 : sizeof(E) == 4 && kt128 > 32 ? 32 : kt128;
}

/* Calls op.run<flash_set<...>>() for the configuration `variant` (1..N). */
template <typename E, int HS, class Op> static int flash_dispatch(int variant, Op &op) {
    switch (variant) {
#define FLASH_CASE(id, name, fw, fm64, fm128, kw, bq64, bq128, qw, kt64, kt128, pipe)            \
    case id:                                                                                       \
        return op.template run<flash_set<E, HS, fw, HS == 64 ? fm64 : fm128, kw,                   \
                                         HS == 64 ? bq64 : bq128, qw,                              \
                                         flash_q_kt<E, HS>(kt64, kt128), pipe>>();
        GPTX_FLASH_VARIANT_LIST(FLASH_CASE)
#undef FLASH_CASE
    }
    return GPTX_FAIL(GPTX_ERR_INVALID, "attention tile variant %d; expected 1..%d", variant,
                     GPTX_CUDA_FLASH_VARIANTS);
}

#define FLASH_COUNT(...) +1
static_assert(0 GPTX_FLASH_VARIANT_LIST(FLASH_COUNT) == GPTX_CUDA_FLASH_VARIANTS,
              "cuda_ops.h's GPTX_CUDA_FLASH_VARIANTS counts the lines of GPTX_FLASH_VARIANT_LIST");
#undef FLASH_COUNT

/* ---- one element type and head size: the host's entry points ------------------------ */

/* Lets each kernel take its dynamic shared memory (above 48 KiB needs the
 * attribute); once per backend instance, at creation. A configuration that
 * needs more than the device gives one block is marked unfit
 * (be->flash_unfit) and refused when asked for. */
struct flash_init_op {
    gptx_backend *be;
    int variant;
    template <class S> int run(void) {
        if (S::smem() > be->smem_optin) {
            be->flash_unfit |= 1u << variant;
            return GPTX_OK;
        }
        return S::init();
    }
};
struct flash_fwd_op {
    gptx_backend *be;
    const flash_fwd_params *p;
    int batches;
    template <class S> int run(void) {
        S::forward(be, *p, batches);
        return GPTX_OK;
    }
};
struct flash_bwd_op {
    gptx_backend *be;
    const flash_bwd_params *p;
    int bnh;
    template <class S> int run(void) {
        S::backward(be, *p, bnh);
        return GPTX_OK;
    }
};

/* gptx_cuda_flash_{init,forward,backward}_SUFFIX for element type E and
 * head size HS: every configuration's kernels (init), or configuration v's
 * launches. */
#define GPTX_FLASH_INSTANCE(E, HS, SUFFIX)                                                         \
    GPTX_CUDA_FN int gptx_cuda_flash_init_##SUFFIX(gptx_backend *be) {                             \
        for (int v = 1; v <= GPTX_CUDA_FLASH_VARIANTS; v++) {                                      \
            flash_init_op op = {be, v};                                                            \
            GPTX_TRY((flash_dispatch<E, HS>(v, op)));                                              \
        }                                                                                          \
        return GPTX_OK;                                                                            \
    }                                                                                              \
    GPTX_CUDA_FN int gptx_cuda_flash_forward_##SUFFIX(gptx_backend *be, int v,                     \
                                                      const flash_fwd_params *p, int batches) {    \
        flash_fwd_op op = {be, p, batches};                                                        \
        return flash_dispatch<E, HS>(v, op);                                                       \
    }                                                                                              \
    GPTX_CUDA_FN int gptx_cuda_flash_backward_##SUFFIX(gptx_backend *be, int v,                    \
                                                       const flash_bwd_params *p, int bnh) {       \
        flash_bwd_op op = {be, p, bnh};                                                            \
        return flash_dispatch<E, HS>(v, op);                                                       \
    }

#define GPTX_FLASH_DECLARE(SUFFIX)                                                                 \
    GPTX_CUDA_FN int gptx_cuda_flash_init_##SUFFIX(gptx_backend *be);                              \
    GPTX_CUDA_FN int gptx_cuda_flash_forward_##SUFFIX(gptx_backend *be, int v,                     \
                                                      const flash_fwd_params *p, int batches);     \
    GPTX_CUDA_FN int gptx_cuda_flash_backward_##SUFFIX(gptx_backend *be, int v,                    \
                                                       const flash_bwd_params *p, int bnh);
GPTX_FLASH_DECLARE(bf16_64)
GPTX_FLASH_DECLARE(bf16_128)
GPTX_FLASH_DECLARE(tf32_64)
GPTX_FLASH_DECLARE(tf32_128)
#undef GPTX_FLASH_DECLARE

#endif
