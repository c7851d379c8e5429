/* CUDA kernels other than matrix products and attention: embedding,
 * LayerNorm, GELU, residual, softmax cross-entropy, AdamW, QKV layout.
 *
 * Written to be obviously correct first: one thread per output element or
 * one warp / block per row, and no atomics anywhere, so
 * every result is bitwise repeatable. Reductions over rows (bias, LayerNorm
 * and embedding gradients) run in an order fixed by the shapes alone.
 * Activations are `T` (float, or bf16 under the bf16 policies: see
 * cuda_internal.h); every kernel computes in fp32, and statistics and
 * gradients of parameters are fp32 always; parameters and the AdamW state
 * are fp32, or bf16 under the pure-bf16 policy.
 *
 * These kernels are bound by memory bandwidth, so they move data in groups
 * of 16 bytes (cuda_vec.h) wherever the host finds the buffers aligned and
 * the rows a whole number of groups; otherwise the same groups are moved
 * element by element, in the same order, with the same bits. */
#include "cuda_vec.h"

extern "C" {
#include "bf16_round.h"
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define ROW_THREADS 256 /* warp-per-row kernels: 8 rows per block */
/* row values a lane of a LayerNorm warp keeps in registers: rows of up to
 * 32 * LN_REG_FLOATS = 1024 columns are read from memory once; longer rows
 * are read again for each pass, in chunks of that size */
#define LN_REG_FLOATS 32
#define CE_THREADS 512
#define ADAMW_CHUNK 4096 /* elements per AdamW block */
#define ADAMW_THREADS 256
#define ELEM_THREADS 256
/* Embedding backward: positions one block adds serially. A token with more
 * positions is split into chunks of this many, summed into partial rows and
 * then added in order (a frequent token of real text covers thousands of
 * positions of a batch: docs/cuda.md). */
#define EMB_CHUNK 64
#define EMB_THREADS 256
#define EMB_G 4 /* columns per thread: one fp32 group */

/* ---- embedding ------------------------------------------------------------- */

/* [res] out = [p] wte + wpe: both the residual type R */
template <typename R>
static __global__ void k_embedding_forward(R *out, const int32_t *inp, const R *wte, const R *wpe,
                                           int T, int C, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (size_t)C, c = i % (size_t)C;
        gptx_st(&out[i], gptx_ld(wte[(size_t)inp[n] * C + c]) + gptx_ld(wpe[(n % (size_t)T) * C + c]));
    }
}

GPTX_CUDA_FN int gptx_cuda_embedding_forward(gptx_backend *be, float *out, const int32_t *inp,
                                             const float *wte, const float *wpe, int B, int T,
                                             int C) {
    GPTX_TRY(gptx_cuda_enter(be));
    size_t BT = (size_t)B * T, total = BT * C;
    GPTX_LAUNCH_RES(k_embedding_forward, gptx_cuda_blocks(total, 256), 256, be->compute,
                    (res_t *)out, inp, (const res_t *)wte, (const res_t *)wpe, T, C, total);
    GPTX_CUDA_LAUNCHED("embedding_forward");
    /* copy the ids to the host now, while the device works, so backward can
     * bucket them by token without waiting */
    GPTX_TRY(gptx_cuda_pinned_reserve(&be->ids, BT * sizeof(int32_t)));
    GPTX_CUDA_TRY(cudaMemcpyAsync(be->ids.host, inp, BT * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  be->compute));
    GPTX_TRY(gptx_cuda_pinned_mark(&be->ids, be->compute));
    be->ids_dev = inp;
    be->ids_count = BT;
    return GPTX_OK;
}

/* dwpe[t, c] += sum over b (in order) of dout[b, t, c] */
template <typename A>
static __global__ void k_embedding_backward_wpe(float *dwpe, const A *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; b++) acc += gptx_ld(dout[(size_t)b * total + i]);
        dwpe[i] = acc;
    }
}

/* Block s adds the positions pos[seg_start[s] .. seg_start[s + 1]) of token
 * seg_tok[s], in increasing order, into one destination row: dwte's own row
 * when the token has at most EMB_CHUNK positions (seg_slot[s] < 0: the CPU
 * backend's additions in its order, so the same bits), else the partial row
 * seg_slot[s] of part, from zero. Every destination row has one writer. */
template <typename R>
static __global__ void __launch_bounds__(EMB_THREADS)
    k_embedding_backward_wte(float *dwte, float *part, const R *dout, const int32_t *pos,
                             const int32_t *seg_tok, const int32_t *seg_start,
                             const int32_t *seg_slot, int C, bool vec) {
    int s = blockIdx.x, slot = seg_slot[s], j0 = seg_start[s], j1 = seg_start[s + 1];
    float *dst = slot < 0 ? dwte + (size_t)seg_tok[s] * C : part + (size_t)slot * C;
    for (int c = threadIdx.x * EMB_G; c < C; c += EMB_THREADS * EMB_G) {
        int n = gptx_imin(EMB_G, C - c);
        float acc[EMB_G] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (slot < 0) gptx_ld_group(acc, dst + c, n, vec);
        for (int j = j0; j < j1; j++) {
            float d[EMB_G];
            gptx_ld_group(d, dout + (size_t)pos[j] * C + c, n, vec);
#pragma unroll
            for (int e = 0; e < EMB_G; e++) acc[e] += d[e];
        }
        gptx_st_group(dst + c, acc, n, vec);
    }
}

/* dwte[long_tok[t]] += its partial rows long_first[t] .. long_first[t + 1] - 1,
 * in that order: one block per token that was split into chunks. */
static __global__ void __launch_bounds__(EMB_THREADS)
    k_embedding_backward_combine(float *dwte, const float *part, const int32_t *long_tok,
                                 const int32_t *long_first, int C, bool vec) {
    int t = blockIdx.x;
    float *row = dwte + (size_t)long_tok[t] * C;
    for (int c = threadIdx.x * EMB_G; c < C; c += EMB_THREADS * EMB_G) {
        int n = gptx_imin(EMB_G, C - c);
        float acc[EMB_G];
        gptx_ld_group(acc, row + c, n, vec);
        for (int k = long_first[t]; k < long_first[t + 1]; k++) {
            float d[EMB_G];
            gptx_ld_group(d, part + (size_t)k * C + c, n, vec);
#pragma unroll
            for (int e = 0; e < EMB_G; e++) acc[e] += d[e];
        }
        gptx_st_group(row + c, acc, n, vec);
    }
}

/* The ids of the last forward pass on the host: embedding_forward's copy
 * when it still describes this buffer, else copied now. */
static int embedding_ids_on_host(gptx_backend *be, const int32_t *inp, size_t BT,
                                 const int32_t **ids) {
    if (be->ids_dev != inp || be->ids_count != BT) {
        GPTX_TRY(gptx_cuda_pinned_reserve(&be->ids, BT * sizeof(int32_t)));
        GPTX_CUDA_TRY(cudaMemcpyAsync(be->ids.host, inp, BT * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, be->compute));
        GPTX_TRY(gptx_cuda_pinned_mark(&be->ids, be->compute));
        be->ids_dev = inp;
        be->ids_count = BT;
    }
    GPTX_TRY(gptx_cuda_pinned_reserve(&be->ids, BT * sizeof(int32_t))); /* waits for the copy */
    *ids = (const int32_t *)be->ids.host;
    return GPTX_OK;
}

/* Positions per token id into be->bucket_counts (ncounts = largest id + 1). */
static int embedding_counts(gptx_backend *be, const int32_t *ids, size_t BT, size_t *ncounts) {
    int32_t maxid = -1;
    for (size_t n = 0; n < BT; n++) {
        if (ids[n] < 0)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "inp[%zu] is %d; must be >= 0", n, (int)ids[n]);
        if (ids[n] > maxid) maxid = ids[n];
    }
    *ncounts = (size_t)maxid + 1;
    if (*ncounts > be->bucket_counts_cap) {
        int32_t *nc = (int32_t *)realloc(be->bucket_counts, *ncounts * sizeof *nc);
        if (!nc) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        be->bucket_counts = nc;
        be->bucket_counts_cap = *ncounts;
    }
    memset(be->bucket_counts, 0, *ncounts * sizeof *be->bucket_counts);
    for (size_t n = 0; n < BT; n++) be->bucket_counts[ids[n]]++;
    return GPTX_OK;
}

/* How the positions split into blocks: nseg segments (one block each), of
 * which nslots write partial rows, for nlong tokens split into chunks. */
typedef struct emb_plan {
    size_t nseg, nlong, nslots;
} emb_plan;

static size_t emb_chunks(int32_t count) { return ((size_t)count + EMB_CHUNK - 1) / EMB_CHUNK; }

static emb_plan embedding_plan(const int32_t *counts, size_t ncounts) {
    emb_plan p = {0, 0, 0};
    for (size_t v = 0; v < ncounts; v++) {
        size_t k = emb_chunks(counts[v]);
        p.nseg += k;
        if (k > 1) {
            p.nlong++;
            p.nslots += k;
        }
    }
    return p;
}

/* The table the kernels read (int32 words): pos (BT, positions sorted by
 * token, increasing within a token) | seg_tok | seg_slot (nseg) | seg_start
 * (nseg + 1) | long_tok (nlong) | long_first (nlong + 1). counts becomes the
 * counting sort's cursor. */
static void embedding_table(int32_t *counts, size_t ncounts, const int32_t *ids, size_t BT,
                            const emb_plan *p, int32_t *words) {
    int32_t *pos = words, *seg_tok = pos + BT, *seg_slot = seg_tok + p->nseg;
    int32_t *seg_start = seg_slot + p->nseg, *long_tok = seg_start + p->nseg + 1;
    int32_t *long_first = long_tok + p->nlong;
    int32_t start = 0, slot = 0;
    size_t s = 0, t = 0;
    for (size_t v = 0; v < ncounts; v++) {
        int32_t c = counts[v];
        size_t k = emb_chunks(c);
        if (k > 1) {
            long_tok[t] = (int32_t)v;
            long_first[t++] = slot;
        }
        for (size_t i = 0; i < k; i++, s++) {
            seg_tok[s] = (int32_t)v;
            seg_slot[s] = k > 1 ? slot++ : -1;
            seg_start[s] = start + (int32_t)(i * EMB_CHUNK);
        }
        counts[v] = start; /* becomes the next free slot of bucket v */
        start += c;
    }
    seg_start[p->nseg] = start;
    long_first[p->nlong] = slot;
    for (size_t n = 0; n < BT; n++) pos[counts[ids[n]]++] = (int32_t)n;
}

GPTX_CUDA_FN int gptx_cuda_embedding_backward(gptx_backend *be, float *dwte, float *dwpe,
                                              const float *dout, const int32_t *inp, int B, int T,
                                              int C) {
    GPTX_TRY(gptx_cuda_enter(be));
    size_t BT = (size_t)B * T;
    if (BT > 0x7fffffffu) return GPTX_FAIL(GPTX_ERR_SHAPE, "B*T %zu is too large", BT);
    GPTX_LAUNCH_RES(k_embedding_backward_wpe, gptx_cuda_blocks((size_t)T * C, 256), 256,
                    be->compute, dwpe, (const res_t *)dout, B, T, C);
    GPTX_CUDA_LAUNCHED("embedding_backward_wpe");
    if (BT == 0 || C <= 0) return GPTX_OK;

    const int32_t *ids = NULL;
    size_t ncounts = 0;
    GPTX_TRY(embedding_ids_on_host(be, inp, BT, &ids));
    GPTX_TRY(embedding_counts(be, ids, BT, &ncounts));
    emb_plan p = embedding_plan(be->bucket_counts, ncounts);
    size_t words = BT + 3 * p.nseg + 2 * p.nlong + 2;
    GPTX_TRY(gptx_cuda_pinned_reserve(&be->small, words * sizeof(int32_t)));
    embedding_table(be->bucket_counts, ncounts, ids, BT, &p, (int32_t *)be->small.host);

    /* scratch: the partial rows (fp32, 16-byte aligned), then the table */
    size_t part_bytes = (p.nslots * (size_t)C * sizeof(float) + 15) / 16 * 16;
    void *dev = NULL;
    GPTX_TRY(gptx_cuda_scratch(be, part_bytes + words * sizeof(int32_t), &dev));
    float *part = (float *)dev;
    int32_t *tab = (int32_t *)((char *)dev + part_bytes);
    GPTX_CUDA_TRY(cudaMemcpyAsync(tab, be->small.host, words * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, be->compute));
    GPTX_TRY(gptx_cuda_pinned_mark(&be->small, be->compute));
    const int32_t *seg_tok = tab + BT, *seg_slot = seg_tok + p.nseg, *seg_start = seg_slot + p.nseg;
    const int32_t *long_tok = seg_start + p.nseg + 1, *long_first = long_tok + p.nlong;

    bool vec = C % EMB_G == 0 && gptx_vec_ptr(dwte, EMB_G, 4) && gptx_vec_ptr(part, EMB_G, 4) &&
               gptx_vec_ptr(dout, EMB_G, gptx_cuda_res_bytes(be));
    GPTX_LAUNCH_RES(k_embedding_backward_wte, (unsigned)p.nseg, EMB_THREADS, be->compute, dwte,
                    part, (const res_t *)dout, tab, seg_tok, seg_start, seg_slot, C, vec);
    GPTX_CUDA_LAUNCHED("embedding_backward_wte");
    if (p.nlong == 0) return GPTX_OK;
    GPTX_LAUNCH(k_embedding_backward_combine, (unsigned)p.nlong, EMB_THREADS, be->compute, dwte,
                (const float *)part, long_tok, long_first, C, vec);
    GPTX_CUDA_LAUNCHED("embedding_backward_combine");
    return GPTX_OK;
}

/* ---- LayerNorm ---------------------------------------------------------------- */

/* f(j, c, n) for each group a lane owns, in order: group j of each chunk of
 * 32 * W * NV columns, its n columns from column c (the last may be short). */
template <int W, int NV, typename F>
static __device__ __forceinline__ void ln_groups(int C, int lane, F f) {
    for (int c0 = 0; c0 < C; c0 += 32 * W * NV) {
#pragma unroll
        for (int j = 0; j < NV; j++) {
            int c = c0 + (lane + 32 * j) * W, n = gptx_imin(W, C - c);
            if (n > 0) f(j, c, n);
        }
    }
}

/* One warp normalises the row x of C columns into o: mean, then variance of
 * the centred values (two passes, like the CPU backend), then the affine
 * output; lane 0 saves the mean and 1/std. The columns come in groups of
 * W = 16 / sizeof(R): lane l owns groups l, l + 32, l + 64, ... and sums its
 * elements in that order, whether a group moves as one vector (vec) or
 * element by element, so both give the same bits. first(v, c, n) delivers
 * the n columns of the group at column c for the first pass (plain: a load
 * of x; fused: the residual sum, stored); a row of at most 32 *
 * LN_REG_FLOATS columns stays in registers for the other two passes,
 * longer rows are loaded again from x. Two kernels inline this helper and
 * must agree bit for bit (the fused residual + LayerNorm and the plain one),
 * so every rounding is spelled out: nvcc may contract a * b + c into an FMA
 * in one kernel and not in the other, never an __fmul_rn / __fadd_rn. */
/* [act] o from the [res] row x with [p] weights (the residual type R) */
template <typename A, typename R, typename First>
static __device__ __forceinline__ void ln_row(A *o, float *mean, float *rstd, const R *x,
                                              const R *w, const R *b, size_t row, int C,
                                              float eps, bool vec, First first) {
    constexpr int W = 16 / sizeof(R), NV = LN_REG_FLOATS / W;
    int lane = threadIdx.x % 32;
    bool kept = C <= 32 * W * NV; /* the whole row stays in xs */
    float xs[NV][W];
    float s = 0.0f;
    ln_groups<W, NV>(C, lane, [&](int j, int c, int n) {
        first(xs[j], c, n);
#pragma unroll
        for (int e = 0; e < W; e++)
            if (e < n) s = __fadd_rn(s, xs[j][e]);
    });
    float m = gptx_warp_sum(s) / (float)C;
    float v = 0.0f;
    ln_groups<W, NV>(C, lane, [&](int j, int c, int n) {
        if (!kept) gptx_ld_group(xs[j], x + c, n, vec);
#pragma unroll
        for (int e = 0; e < W; e++) {
            float d = __fsub_rn(xs[j][e], m);
            if (e < n) v = __fmaf_rn(d, d, v);
        }
    });
    float r = 1.0f / sqrtf(__fadd_rn(gptx_warp_sum(v) / (float)C, eps));
    ln_groups<W, NV>(C, lane, [&](int j, int c, int n) {
        if (!kept) gptx_ld_group(xs[j], x + c, n, vec);
        float wv[W], bv[W], y[W];
        gptx_ld_group(wv, w + c, n, vec);
        gptx_ld_group(bv, b + c, n, vec);
#pragma unroll
        for (int e = 0; e < W; e++)
            y[e] = __fmaf_rn(__fmul_rn(__fsub_rn(xs[j][e], m), r), wv[e], bv[e]);
        gptx_st_group(o + c, y, n, vec);
    });
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

/* One warp per row. */
template <typename A, typename R>
static __global__ void __launch_bounds__(ROW_THREADS)
    k_layernorm_forward(A *out, float *mean, float *rstd, const R *inp, const R *w, const R *b,
                        int N, int C, float eps, bool vec) {
    constexpr int W = 16 / sizeof(R);
    size_t row = (size_t)blockIdx.x * (ROW_THREADS / 32) + threadIdx.x / 32;
    if (row >= (size_t)N) return; /* whole warp: no barrier follows */
    const R *x = inp + row * C;
    auto load = [&](float(&v)[W], int c, int n) { gptx_ld_group(v, x + c, n, vec); };
    ln_row(out + row * C, mean, rstd, x, w, b, row, C, eps, vec, load);
}

/* Host: whether a LayerNorm row of C columns moves in vector groups: C a
 * multiple of the group (W = 16 / residual bytes) and every operand aligned
 * for its group (the activations' group is W elements of their type). */
static bool ln_vec(const gptx_backend *be, int C, const void *act0, const void *act1,
                   const void *res0, const void *res1, const void *res2, const void *res3) {
    size_t rb = gptx_cuda_res_bytes(be), ab = gptx_cuda_act_bytes(be), W = 16 / rb;
    return C % (int)W == 0 && gptx_vec_ptr(act0, W, ab) && gptx_vec_ptr(act1, W, ab) &&
           gptx_vec_ptr(res0, W, rb) && gptx_vec_ptr(res1, W, rb) && gptx_vec_ptr(res2, W, rb) &&
           gptx_vec_ptr(res3, W, rb);
}

GPTX_CUDA_FN int gptx_cuda_layernorm_forward(gptx_backend *be, float *out, float *mean, float *rstd,
                                             const float *inp, const float *w, const float *b,
                                             int N, int C, float eps) {
    GPTX_TRY(gptx_cuda_enter(be));
    unsigned blocks = (unsigned)(((size_t)N + ROW_THREADS / 32 - 1) / (ROW_THREADS / 32));
    bool vec = ln_vec(be, C, out, NULL, inp, w, b, NULL);
    GPTX_LAUNCH_ACT_RES(k_layernorm_forward, blocks, ROW_THREADS, be->compute, (act_t *)out, mean,
                        rstd, (const res_t *)inp, (const res_t *)w, (const res_t *)b, N, C, eps,
                        vec);
    GPTX_CUDA_LAUNCHED("layernorm_forward");
    return GPTX_OK;
}

/* Fused residual-add + LayerNorm, one warp per row: each group of
 * residual = a + b is stored and kept as it reads back (rounded to the
 * residual type, as a separate residual kernel would leave it) for the
 * statistics, so the result is the separate ops' bit for bit and backward
 * sees what forward normalised. A row longer than the registers hold is
 * read back from the lane's own stores. */
template <typename A, typename R>
static __global__ void __launch_bounds__(ROW_THREADS)
    k_residual_layernorm_forward(R *resid, A *out, float *mean, float *rstd, const R *a,
                                 const A *b, const R *w, const R *bias, int N, int C, float eps,
                                 bool vec) {
    constexpr int W = 16 / sizeof(R);
    size_t row = (size_t)blockIdx.x * (ROW_THREADS / 32) + threadIdx.x / 32;
    if (row >= (size_t)N) return; /* whole warp: no barrier follows */
    R *x = resid + row * C;
    const R *xa = a + row * C;
    const A *xb = b + row * C;
    auto add = [&](float(&v)[W], int c, int n) {
        float u[W];
        gptx_ld_group(v, xa + c, n, vec);
        gptx_ld_group(u, xb + c, n, vec);
#pragma unroll
        for (int e = 0; e < W; e++) v[e] = __fadd_rn(v[e], u[e]);
        gptx_st_group(x + c, v, n, vec);
#pragma unroll
        for (int e = 0; e < W; e++) v[e] = gptx_rounded<R>(v[e]);
    };
    ln_row(out + row * C, mean, rstd, (const R *)x, w, bias, row, C, eps, vec, add);
}

GPTX_CUDA_FN int gptx_cuda_residual_layernorm_forward(gptx_backend *be, float *residual, float *out,
                                                      float *mean, float *rstd, const float *a,
                                                      const float *b, const float *w,
                                                      const float *bias, int N, int C, float eps) {
    GPTX_TRY(gptx_cuda_enter(be));
    unsigned blocks = (unsigned)(((size_t)N + ROW_THREADS / 32 - 1) / (ROW_THREADS / 32));
    bool vec = ln_vec(be, C, out, b, residual, a, w, bias);
    GPTX_LAUNCH_ACT_RES(k_residual_layernorm_forward, blocks, ROW_THREADS, be->compute,
                        (res_t *)residual, (act_t *)out, mean, rstd, (const res_t *)a,
                        (const act_t *)b, (const res_t *)w, (const res_t *)bias, N, C, eps, vec);
    GPTX_CUDA_LAUNCHED("residual_layernorm_forward");
    return GPTX_OK;
}

/* One warp, one row: dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * g = dout * w, xhat = (x - mean) * rstd. Groups of W = 16 / sizeof(R)
 * columns as in ln_row; g and xhat of a row of up to 32 * LN_REG_FLOATS
 * columns stay in registers between the two passes, longer rows are loaded
 * again. dact (may be NULL): the updated dinp also rounded to the activation
 * type, what act_from_res would make of it -- the residual gradient as the
 * next product's dout, written while the row is in registers instead of by
 * another pass over it. sdw, sdb (may be NULL): the warp's own rows of
 * shared memory, where each lane adds dout * xhat and dout of the columns
 * it owns (the fused column sums of k_layernorm_backward_fused). */
template <typename A, typename R>
static __device__ __forceinline__ void ln_bwd_row(R *dinp, A *dact, const A *dout, const R *inp,
                                                  const R *w, const float *mean,
                                                  const float *rstd, size_t row, int C, bool vec,
                                                  float *sdw, float *sdb) {
    constexpr int W = 16 / sizeof(R), NV = LN_REG_FLOATS / W;
    int lane = threadIdx.x % 32;
    const R *x = inp + row * C;
    const A *d = dout + row * C;
    R *dx = dinp + row * C;
    float m = mean[row], r = rstd[row];
    bool kept = C <= 32 * W * NV;
    float g[NV][W], xh[NV][W];
    /* g and xhat of the group at column c */
    auto load = [&](int j, int c, int n, bool sums) {
        float dv[W], xv[W], wv[W];
        gptx_ld_group(dv, d + c, n, vec);
        gptx_ld_group(xv, x + c, n, vec);
        gptx_ld_group(wv, w + c, n, vec);
#pragma unroll
        for (int e = 0; e < W; e++) {
            g[j][e] = dv[e] * wv[e];
            xh[j][e] = (xv[e] - m) * r;
        }
        if (sums)
#pragma unroll
            for (int e = 0; e < W; e++)
                if (e < n) {
                    sdw[c + e] += dv[e] * xh[j][e];
                    sdb[c + e] += dv[e];
                }
    };
    float gs = 0.0f, gxs = 0.0f;
    ln_groups<W, NV>(C, lane, [&](int j, int c, int n) {
        load(j, c, n, sdw != NULL);
#pragma unroll
        for (int e = 0; e < W; e++) { /* elements past n are 0 */
            gs += g[j][e];
            gxs += g[j][e] * xh[j][e];
        }
    });
    gs = gptx_warp_sum(gs) / (float)C;
    gxs = gptx_warp_sum(gxs) / (float)C;
    ln_groups<W, NV>(C, lane, [&](int j, int c, int n) {
        if (!kept) load(j, c, n, false);
        float o[W];
        gptx_ld_group(o, dx + c, n, vec);
#pragma unroll
        for (int e = 0; e < W; e++) o[e] += r * (g[j][e] - gs - xh[j][e] * gxs);
        gptx_st_group(dx + c, o, n, vec);
        if (dact) {
#pragma unroll
            for (int e = 0; e < W; e++) o[e] = gptx_rounded<R>(o[e]); /* as stored in dinp */
            gptx_st_group(dact + row * C + c, o, n, vec);
        }
    });
}

/* one warp per row; dw and db by the separate column sums (rows longer
 * than a warp keeps in registers) */
template <typename A, typename R>
static __global__ void __launch_bounds__(ROW_THREADS)
    k_layernorm_backward_rows(R *dinp, A *dact, const A *dout, const R *inp, const R *w,
                              const float *mean, const float *rstd, int N, int C, bool vec) {
    size_t row = (size_t)blockIdx.x * (ROW_THREADS / 32) + threadIdx.x / 32;
    if (row >= (size_t)N) return;
    ln_bwd_row(dinp, dact, dout, inp, w, mean, rstd, row, C, vec, (float *)NULL, (float *)NULL);
}

/* LayerNorm backward with its column sums fused (rows of up to 32 *
 * LN_REG_FLOATS columns): block b takes rows [b * rows, (b + 1) * rows),
 * warp k of it rows k, k + LN_FUSED_WARPS, ... in increasing order, and
 * adds dout * xhat and dout of each into its own rows of shared memory
 * while the row is in registers; then the warps' sums, in warp order, are
 * the block's partial rows of dw and db, which k_colsum_final adds up. dout
 * and the input are read once, instead of again by the separate column
 * sums (38 of ~140 MB per call at GPT-2 124M, B 8). The order of every
 * addition is fixed by N and C. */
#define LN_FUSED_WARPS 4
#define LN_FUSED_PARTS 512 /* at most this many blocks, so partial rows */
#define LN_FUSED_MIN_ROWS 16
template <typename A, typename R>
static __global__ void __launch_bounds__(32 * LN_FUSED_WARPS)
    k_layernorm_backward_fused(R *dinp, A *dact, float *part, float *part2, const A *dout,
                               const R *inp, const R *w, const float *mean, const float *rstd,
                               int N, int C, int rows, bool vec) {
    constexpr int W = 16 / sizeof(R), NV = LN_REG_FLOATS / W;
    __shared__ float sums[2][LN_FUSED_WARPS][32 * LN_REG_FLOATS];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *sdw = sums[0][warp], *sdb = sums[1][warp];
    ln_groups<W, NV>(C, lane, [&](int, int c, int n) {
        for (int e = 0; e < n; e++) sdw[c + e] = sdb[c + e] = 0.0f;
    });
    size_t r0 = (size_t)blockIdx.x * rows, r1 = r0 + rows < (size_t)N ? r0 + rows : (size_t)N;
    for (size_t row = r0 + warp; row < r1; row += LN_FUSED_WARPS)
        ln_bwd_row(dinp, dact, dout, inp, w, mean, rstd, row, C, vec, sdw, sdb);
    __syncthreads();
    for (int c = threadIdx.x; c < C; c += 32 * LN_FUSED_WARPS) {
        float tw = 0.0f, tb = 0.0f;
#pragma unroll
        for (int k = 0; k < LN_FUSED_WARPS; k++) {
            tw += sums[0][k][c];
            tb += sums[1][k][c];
        }
        part[(size_t)blockIdx.x * C + c] = tw;
        part2[(size_t)blockIdx.x * C + c] = tb;
    }
}

static int ln_fused_rows(int N) {
    int per = (N + LN_FUSED_PARTS - 1) / LN_FUSED_PARTS;
    per = (per + LN_FUSED_WARPS - 1) / LN_FUSED_WARPS * LN_FUSED_WARPS;
    return per > LN_FUSED_MIN_ROWS ? per : LN_FUSED_MIN_ROWS;
}

/* Column sums (bias gradients, LayerNorm's dw and db): acc[c] += sum over
 * the N rows of x[row, c]. Bandwidth-bound, and deterministic: the order of
 * every addition is fixed by N and C alone (never by the launch or the
 * timing), so the bits repeat run to run. Two passes, each spread over the
 * whole device:
 *   pass 1: block (k, cb), COLSUM_LANES x 32 threads, sums the chunk k of
 *     rows [k * rows, (k + 1) * rows) of the 32 column groups of cb (a group
 *     is 16 bytes of x: 8 bf16 or 4 fp32 columns, so a warp reads 512
 *     contiguous bytes of a row). Lane l adds rows l, l + LANES, ... of the
 *     chunk in increasing order, then the lanes' sums are added in lane
 *     order through shared memory: one partial row per chunk.
 *   pass 2: block j, 2 column groups of 4 partial columns x 128 lanes: lane
 *     l adds partials l, l + 128, ... in order, then the lanes' sums in lane
 *     order, added to acc. (With 8 groups x 32 lanes, 24 blocks at C = 768,
 *     each lane 16 dependent loads deep, this pass took 18 us of a 66 us
 *     LayerNorm backward at B 8 on an H200; now 96 blocks, 4 loads deep.)
 * rows is a multiple of COLSUM_LANES chosen so that there are at most
 * COLSUM_PARTS chunks, and at least COLSUM_MIN_ROWS rows per chunk
 * (colsum_rows): at GPT-2 124M's N = 8192, C = 768 (bf16) pass 1 runs 128 x 3
 * blocks of 256 threads, 8 rows per thread; at N = 65536, 256 x 3 blocks, 32
 * rows each. Before, a thread summed a 256-row chunk of 8 columns alone: 32
 * blocks of 96 working threads at N = 8192, and one block for the partials
 * (issue 33: layernorm_backward_act was 22 % of a B 8 step on an H200).
 * With x2 (LayerNorm: x = dout, x2 = its input) the pass sums
 * dout * (x2 - mean) * rstd into part and dout into part2 in the same order. */
#define COLSUM_LANES 8
#define COLSUM_PARTS 256
#define COLSUM_MIN_ROWS 64
#define COLSUM_FINAL_LANES 128
#define COLSUM_FINAL_GROUPS 2 /* of 4 columns: 8 columns per final block */

static int colsum_rows(int N) {
    int per = (N + COLSUM_PARTS - 1) / COLSUM_PARTS;
    per = (per + COLSUM_LANES - 1) / COLSUM_LANES * COLSUM_LANES;
    return per > COLSUM_MIN_ROWS ? per : COLSUM_MIN_ROWS;
}

/* x: [act] (a gradient); x2: [res] (a LayerNorm input) or NULL */
template <typename A, typename R>
static __global__ void __launch_bounds__(32 * COLSUM_LANES)
    k_colsum_partial(float *part, float *part2, const A *x, const R *x2, const float *mean,
                     const float *rstd, int N, int C, int rows, bool vec) {
    constexpr int G = 16 / sizeof(A), SPAN = 32 * G;
    __shared__ float lanes[2][COLSUM_LANES][SPAN];
    int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    int c0 = blockIdx.y * SPAN, c = c0 + tx * G, n = gptx_imin(G, C - c);
    int r0 = blockIdx.x * rows, r1 = gptx_imin(r0 + rows, N);
    float a[G], a2[G];
#pragma unroll
    for (int e = 0; e < G; e++) a[e] = a2[e] = 0.0f;
    if (n > 0) {
#pragma unroll 4
        for (int k = r0 + ty; k < r1; k += COLSUM_LANES) {
            float d[G];
            gptx_ld_group(d, x + (size_t)k * C + c, n, vec);
            if (x2) {
                float u[G];
                gptx_ld_group(u, x2 + (size_t)k * C + c, n, vec);
                float m = mean[k], r = rstd[k];
#pragma unroll
                for (int e = 0; e < G; e++) {
                    a[e] += d[e] * (u[e] - m) * r;
                    a2[e] += d[e];
                }
            } else {
#pragma unroll
                for (int e = 0; e < G; e++) a[e] += d[e];
            }
        }
    }
#pragma unroll
    for (int e = 0; e < G; e++) {
        lanes[0][ty][tx * G + e] = a[e];
        lanes[1][ty][tx * G + e] = a2[e];
    }
    __syncthreads();
    /* thread j adds column j % SPAN of sum j / SPAN over the lanes, in order */
    for (int j = threadIdx.x; j < (x2 ? 2 : 1) * SPAN; j += 32 * COLSUM_LANES) {
        int which = j / SPAN, col = j % SPAN;
        if (c0 + col >= C) continue;
        float t = 0.0f;
#pragma unroll
        for (int l = 0; l < COLSUM_LANES; l++) t += lanes[which][l][col];
        (which ? part2 : part)[(size_t)blockIdx.x * C + c0 + col] = t;
    }
}

/* Pass 2: acc[c] += the sum of the nparts partials of column c (and acc2 of
 * part2's), in the order the file comment gives. */
static __global__ void __launch_bounds__(COLSUM_FINAL_LANES * COLSUM_FINAL_GROUPS)
    k_colsum_final(float *acc, float *acc2, const float *part, const float *part2, int nparts,
                   int C, bool vec) {
    constexpr int SPAN = 4 * COLSUM_FINAL_GROUPS;
    __shared__ float lanes[2][COLSUM_FINAL_LANES][SPAN];
    int tx = threadIdx.x % COLSUM_FINAL_GROUPS, ty = threadIdx.x / COLSUM_FINAL_GROUPS;
    int c0 = blockIdx.x * SPAN, c = c0 + tx * 4, n = gptx_imin(4, C - c);
    float a[4] = {0.0f, 0.0f, 0.0f, 0.0f}, a2[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (n > 0) {
        for (int k = ty; k < nparts; k += COLSUM_FINAL_LANES) {
            float u[4];
            gptx_ld_group(u, part + (size_t)k * C + c, n, vec);
#pragma unroll
            for (int e = 0; e < 4; e++) a[e] += u[e];
            if (part2) {
                gptx_ld_group(u, part2 + (size_t)k * C + c, n, vec);
#pragma unroll
                for (int e = 0; e < 4; e++) a2[e] += u[e];
            }
        }
    }
#pragma unroll
    for (int e = 0; e < 4; e++) {
        lanes[0][ty][tx * 4 + e] = a[e];
        lanes[1][ty][tx * 4 + e] = a2[e];
    }
    __syncthreads();
    int j = threadIdx.x, which = j / SPAN, col = j % SPAN;
    if (which > (part2 ? 1 : 0) || c0 + col >= C) return; /* no barrier follows */
    float t = 0.0f;
#pragma unroll 16
    for (int l = 0; l < COLSUM_FINAL_LANES; l++) t += lanes[which][l][col];
    float *dst = (which ? acc2 : acc) + c0 + col;
    *dst += t;
}

/* Pass 2 over nparts partial rows of C columns (part2 may be NULL). */
static int colsum_final(gptx_backend *be, float *acc, float *acc2, const float *part,
                        const float *part2, int nparts, int C) {
    bool vec = C % 4 == 0 && gptx_vec_ptr(part, 4, 4) && gptx_vec_ptr(part2, 4, 4);
    unsigned blocks = (unsigned)(((size_t)C + 4 * COLSUM_FINAL_GROUPS - 1) /
                                 (4 * COLSUM_FINAL_GROUPS));
    GPTX_LAUNCH(k_colsum_final, blocks, COLSUM_FINAL_LANES * COLSUM_FINAL_GROUPS, be->compute,
                acc, acc2, part, part2, nparts, C, vec);
    GPTX_CUDA_LAUNCHED("colsum_final");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_column_sums(gptx_backend *be, float *acc, float *acc2, const float *x,
                                       const float *x2, const float *mean, const float *rstd, int N,
                                       int C) {
    if (N <= 0 || C <= 0) return GPTX_OK;
    size_t ab = gptx_cuda_act_bytes(be), G = 16 / ab;
    int rows = colsum_rows(N), nparts = (N + rows - 1) / rows;
    size_t cblocks = ((size_t)C + 32 * G - 1) / (32 * G);
    if (cblocks > 65535) return GPTX_FAIL(GPTX_ERR_SHAPE, "%d columns are too many", C);
    size_t per = (size_t)nparts * C;
    void *dev = NULL;
    GPTX_TRY(gptx_cuda_scratch(be, (x2 ? 2 : 1) * per * sizeof(float), &dev));
    float *part = (float *)dev, *part2 = x2 ? part + per : NULL;
    bool vec = C % (int)G == 0 && gptx_vec_ptr(x, G, ab) &&
               gptx_vec_ptr(x2, G, gptx_cuda_res_bytes(be));
    dim3 grid((unsigned)nparts, (unsigned)cblocks);
    GPTX_LAUNCH_ACT_RES(k_colsum_partial, grid, 32 * COLSUM_LANES, be->compute, part, part2,
                        (const act_t *)x, (const res_t *)x2, mean, rstd, N, C, rows, vec);
    GPTX_CUDA_LAUNCHED("colsum_partial");
    return colsum_final(be, acc, acc2, part, part2, nparts, C);
}

GPTX_CUDA_FN int gptx_cuda_layernorm_backward_act(gptx_backend *be, float *dinp, float *dinp_act,
                                                  float *dw, float *db, const float *dout,
                                                  const float *inp, const float *w,
                                                  const float *mean, const float *rstd, int N,
                                                  int C) {
    GPTX_TRY(gptx_cuda_enter(be));
    if (N <= 0) return GPTX_OK;
    bool vec = ln_vec(be, C, dout, dinp_act, dinp, inp, w, NULL);
    if (C > 32 * LN_REG_FLOATS) { /* rows read twice: the separate column sums */
        unsigned blocks = (unsigned)(((size_t)N + ROW_THREADS / 32 - 1) / (ROW_THREADS / 32));
        GPTX_LAUNCH_ACT_RES(k_layernorm_backward_rows, blocks, ROW_THREADS, be->compute,
                            (res_t *)dinp, (act_t *)dinp_act, (const act_t *)dout,
                            (const res_t *)inp, (const res_t *)w, mean, rstd, N, C, vec);
        GPTX_CUDA_LAUNCHED("layernorm_backward_rows");
        return gptx_cuda_column_sums(be, dw, db, dout, inp, mean, rstd, N, C);
    }
    int rows = ln_fused_rows(N), nparts = (N + rows - 1) / rows;
    size_t per = (size_t)nparts * C;
    void *dev = NULL;
    GPTX_TRY(gptx_cuda_scratch(be, 2 * per * sizeof(float), &dev));
    float *part = (float *)dev, *part2 = part + per;
    GPTX_LAUNCH_ACT_RES(k_layernorm_backward_fused, (unsigned)nparts, 32 * LN_FUSED_WARPS,
                        be->compute, (res_t *)dinp, (act_t *)dinp_act, part, part2,
                        (const act_t *)dout, (const res_t *)inp, (const res_t *)w, mean, rstd, N,
                        C, rows, vec);
    GPTX_CUDA_LAUNCHED("layernorm_backward_fused");
    return colsum_final(be, dw, db, part, part2, nparts, C);
}

GPTX_CUDA_FN int gptx_cuda_layernorm_backward(gptx_backend *be, float *dinp, float *dw, float *db,
                                              const float *dout, const float *inp, const float *w,
                                              const float *mean, const float *rstd, int N, int C) {
    return gptx_cuda_layernorm_backward_act(be, dinp, NULL, dw, db, dout, inp, w, mean, rstd, N,
                                            C);
}

/* ---- elementwise ---------------------------------------------------------------- */

/* out[i] = f(x[i], y[i]) for i < n (y NULL: f(x[i], 0)), in groups of G
 * elements (G = 16 / sizeof(A) of the kernel's activation type A, never
 * wider than its other operands), grid-stride; the last group, when n is
 * not a multiple of G, and every group of an unaligned buffer move element
 * by element. */
template <int G, typename O, typename X, typename Y, typename F>
static __device__ __forceinline__ void elem_map(O *out, const X *x, const Y *y, size_t n, bool vec,
                                                F f) {
    size_t ngroups = (n + G - 1) / G;
    for (size_t gi = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gi < ngroups;
         gi += (size_t)gridDim.x * blockDim.x) {
        size_t i = gi * G;
        int k = n - i < (size_t)G ? (int)(n - i) : G;
        bool v = vec && k == G;
        float a[G], b[G];
        gptx_ld_group(a, x + i, k, v);
        if (y) gptx_ld_group(b, y + i, k, v);
#pragma unroll
        for (int e = 0; e < G; e++) a[e] = f(a[e], y ? b[e] : 0.0f);
        gptx_st_group(out + i, a, k, v);
    }
}

static __device__ __forceinline__ float gelu_fwd(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
}

static __device__ __forceinline__ float gelu_grad(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}

template <typename A>
static __global__ void k_gelu_forward(A *out, const A *inp, size_t n, bool vec) {
    elem_map<16 / sizeof(A)>(out, inp, (const A *)NULL, n, vec,
                             [](float x, float) { return gelu_fwd(x); });
}

template <typename A>
static __global__ void k_gelu_backward(A *dinp, const A *inp, const A *dout, size_t n, bool vec) {
    elem_map<16 / sizeof(A)>(dinp, inp, dout, n, vec,
                             [](float x, float d) { return gelu_grad(x) * d; });
}

/* [res] out = [res] a + [act] b */
template <typename A, typename R>
static __global__ void k_residual_forward(R *out, const R *a, const A *b, size_t n, bool vec) {
    /* __fadd_rn: = the fused residual + LayerNorm kernel's */
    elem_map<16 / sizeof(A)>(out, a, b, n, vec, [](float x, float y) { return __fadd_rn(x, y); });
}

/* x[i] = x[i] * s, one rounding: what NCCL's pre-multiplied sum does to a
 * rank's contribution (the NCCL engine's one-rank path, cuda_nccl.c) */
static __global__ void k_scale_f32(float *x, size_t n, float s, bool vec) {
    elem_map<4>(x, (const float *)x, (const float *)NULL, n, vec,
                [s](float v, float) { return __fmul_rn(v, s); });
}

/* Host: the operands of an elementwise kernel are moved in 16-byte accesses
 * (a group of 16 / act bytes elements is 16 bytes of an activation and 16
 * or 32 of an fp32 residual): each must be 16-byte aligned. */
static bool elem_vec(const void *p0, const void *p1, const void *p2) {
    return gptx_vec_ptr(p0, 16, 1) && gptx_vec_ptr(p1, 16, 1) && gptx_vec_ptr(p2, 16, 1);
}

static unsigned elem_blocks(const gptx_backend *be, size_t n) {
    size_t G = 16 / gptx_cuda_act_bytes(be);
    return gptx_cuda_blocks((n + G - 1) / G, ELEM_THREADS);
}

GPTX_CUDA_FN int gptx_cuda_gelu_forward(gptx_backend *be, float *out, const float *inp, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = elem_vec(out, inp, NULL);
    GPTX_LAUNCH_ACT(k_gelu_forward, elem_blocks(be, n), ELEM_THREADS, be->compute, (act_t *)out,
                    (const act_t *)inp, n, vec);
    GPTX_CUDA_LAUNCHED("gelu_forward");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_gelu_backward(gptx_backend *be, float *dinp, const float *inp,
                                         const float *dout, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = elem_vec(dinp, inp, dout);
    GPTX_LAUNCH_ACT(k_gelu_backward, elem_blocks(be, n), ELEM_THREADS, be->compute, (act_t *)dinp,
                    (const act_t *)inp, (const act_t *)dout, n, vec);
    GPTX_CUDA_LAUNCHED("gelu_backward");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_scale_f32_on(void *stream, float *x, size_t n, float s) {
    if (n == 0) return GPTX_OK;
    GPTX_LAUNCH(k_scale_f32, gptx_cuda_blocks((n + 3) / 4, ELEM_THREADS), ELEM_THREADS,
                (cudaStream_t)stream, x, n, s, gptx_vec_ptr(x, 4, 4));
    GPTX_CUDA_LAUNCHED("scale_f32");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_residual_forward(gptx_backend *be, float *out, const float *a,
                                            const float *b, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = elem_vec(out, a, b);
    GPTX_LAUNCH_ACT_RES(k_residual_forward, elem_blocks(be, n), ELEM_THREADS, be->compute,
                        (res_t *)out, (const res_t *)a, (const act_t *)b, n, vec);
    GPTX_CUDA_LAUNCHED("residual_forward");
    return GPTX_OK;
}

/* [act] dst = [res] src, rounded */
template <typename A, typename R>
static __global__ void k_act_from_res(A *dst, const R *src, size_t n, bool vec) {
    elem_map<16 / sizeof(A)>(dst, src, (const R *)NULL, n, vec, [](float x, float) { return x; });
}

GPTX_CUDA_FN int gptx_cuda_act_from_res(gptx_backend *be, float *dst, const float *src, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = elem_vec(dst, src, NULL);
    GPTX_LAUNCH_ACT_RES(k_act_from_res, elem_blocks(be, n), ELEM_THREADS, be->compute,
                        (act_t *)dst, (const res_t *)src, n, vec);
    GPTX_CUDA_LAUNCHED("act_from_res");
    return GPTX_OK;
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

/* (m1, s1) and (m2, s2) are running (max, sum of exp(x - max)) pairs. The
 * cross-entropy helpers are inlined into the fused classifier and into the
 * two separate kernels, which must agree bit for bit: their roundings are
 * spelled out (__fmul_rn / __fadd_rn), so nvcc cannot contract them into
 * FMAs differently in the two places. */
static __device__ __forceinline__ void lse_combine(float *m, float *s, float m2, float s2) {
    float mx = fmaxf(*m, m2);
    if (mx == -INFINITY) return; /* both empty */
    *s = __fadd_rn(__fmul_rn(*s, expf(*m - mx)), __fmul_rn(s2, expf(m2 - mx)));
    *m = mx;
}

/* One logit into a running (max, sum of exp(x - max)) pair. */
static __device__ __forceinline__ void lse_push(float *m, float *s, float x) {
    if (x == -INFINITY) return; /* weight 0 */
    if (x > *m) {
        *s = __fadd_rn(__fmul_rn(*s, expf(*m - x)), 1.0f);
        *m = x;
    } else {
        *s = __fadd_rn(*s, expf(x - *m)); /* NaN propagates through here */
    }
}

/* One block per row: masks [V, Vp) to -inf when asked, then the row's
 * log-sum-exp over the columns inside the softmax in one pass (running max
 * and sum per thread, then a fixed tree), then the row's loss (thread 0).
 * Columns come in groups of G = 16 / sizeof(A), group k to thread
 * k % CE_THREADS; a group lying wholly inside the softmax moves as one
 * vector when vec (the host found the row aligned), the group across the
 * mask's edge element by element, so no thread reads a masked column while
 * another stores its -inf. Returns the log-sum-exp to every thread of the
 * block. */
template <typename A>
static __device__ __forceinline__ float ce_row_forward(float *losses, float *lse, A *row,
                                                       const int32_t *targets, int V, int Vp,
                                                       int mask, bool vec) {
    constexpr int G = 16 / sizeof(A);
    __shared__ float sm[CE_THREADS], ss[CE_THREADS];
    if (mask)
        for (int j = V + threadIdx.x; j < Vp; j += CE_THREADS) gptx_st(&row[j], -INFINITY);
    int ncols = mask ? V : Vp;
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x * G; c < ncols; c += CE_THREADS * G) {
        int n = gptx_imin(G, ncols - c);
        float x[G];
        gptx_ld_group(x, row + c, n, vec && n == G);
#pragma unroll
        for (int e = 0; e < G; e++)
            if (e < n) lse_push(&m, &s, x[e]);
    }
    sm[threadIdx.x] = m;
    ss[threadIdx.x] = s;
    __syncthreads();
    for (int stride = CE_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) {
            float mm = sm[threadIdx.x], s2 = ss[threadIdx.x];
            lse_combine(&mm, &s2, sm[threadIdx.x + stride], ss[threadIdx.x + stride]);
            sm[threadIdx.x] = mm;
            ss[threadIdx.x] = s2;
        }
        __syncthreads();
    }
    float l = __fadd_rn(sm[0], logf(ss[0])); /* the same value in every thread */
    if (threadIdx.x == 0) {
        lse[blockIdx.x] = l;
        if (targets) {
            int32_t t = targets[blockIdx.x];
            losses[blockIdx.x] = t == GPTX_IGNORE_INDEX ? 0.0f : __fsub_rn(l, gptx_ld(row[t]));
        }
    }
    return l;
}

template <typename A>
static __global__ void __launch_bounds__(CE_THREADS)
    k_crossentropy_forward(float *losses, float *lse, A *logits, const int32_t *targets, int V,
                           int Vp, int mask, bool vec) {
    ce_row_forward(losses, lse, logits + (size_t)blockIdx.x * Vp, targets, V, Vp, mask, vec);
}

/* logits row -> dloss * (softmax - onehot(target)); zeros for ignored rows.
 * Masked columns hold -inf, so their gradient is exp(-inf) = 0. Groups of
 * G = 16 / sizeof(A) columns, each read and written by one thread. */
template <typename A>
static __device__ __forceinline__ void ce_row_backward(A *row, float l, int32_t t, int Vp,
                                                       float dloss, bool vec) {
    constexpr int G = 16 / sizeof(A);
    for (int c = threadIdx.x * G; c < Vp; c += blockDim.x * G) {
        int n = gptx_imin(G, Vp - c);
        float x[G];
        gptx_ld_group(x, row + c, n, vec && n == G);
#pragma unroll
        for (int e = 0; e < G; e++) {
            float g = 0.0f;
            if (t != GPTX_IGNORE_INDEX) {
                g = __fmul_rn(expf(x[e] - l), dloss);
                if (c + e == t) g = __fsub_rn(g, dloss);
            }
            x[e] = g;
        }
        gptx_st_group(row + c, x, n, vec && n == G);
    }
}

template <typename A>
static __global__ void k_crossentropy_backward(A *logits, const float *lse, const int32_t *targets,
                                               int Vp, float dloss, bool vec) {
    ce_row_backward(logits + (size_t)blockIdx.x * Vp, lse[blockIdx.x], targets[blockIdx.x], Vp,
                    dloss, vec);
}

/* The fused classifier: forward and gradient of a row in one block, while
 * the row is in cache; the same operations as the two kernels above, so the
 * same bits. */
template <typename A>
static __global__ void __launch_bounds__(CE_THREADS)
    k_crossentropy_fused(float *losses, float *lse, A *logits, const int32_t *targets, int V,
                         int Vp, int mask, float dloss, bool vec) {
    A *row = logits + (size_t)blockIdx.x * Vp;
    float l = ce_row_forward(losses, lse, row, targets, V, Vp, mask, vec);
    __syncthreads(); /* thread 0 has read row[target] for the loss; the masked -inf are stored */
    ce_row_backward(row, l, targets[blockIdx.x], Vp, dloss, vec);
}

/* Host: rows of Vp logits in vector groups: Vp a multiple of the group and
 * the buffer 16-byte aligned, so every row starts aligned. */
static bool ce_vec(const gptx_backend *be, const float *logits, int Vp) {
    return Vp % (int)(16 / gptx_cuda_act_bytes(be)) == 0 && gptx_vec_ptr(logits, 16, 1);
}

GPTX_CUDA_FN int gptx_cuda_crossentropy_forward(gptx_backend *be, float *losses, float *lse,
                                                float *logits, const int32_t *targets, int N, int V,
                                                int Vp, int mask_padded) {
    if (N <= 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = ce_vec(be, logits, Vp);
    GPTX_LAUNCH_ACT(k_crossentropy_forward, (unsigned)N, CE_THREADS, be->compute, losses, lse,
                    (act_t *)logits, targets, V, Vp, mask_padded, vec);
    GPTX_CUDA_LAUNCHED("crossentropy_forward");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_crossentropy_fused(gptx_backend *be, float *losses, float *lse,
                                              float *logits, const int32_t *targets, int N, int V,
                                              int Vp, int mask_padded, float dloss) {
    if (N <= 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = ce_vec(be, logits, Vp);
    GPTX_LAUNCH_ACT(k_crossentropy_fused, (unsigned)N, CE_THREADS, be->compute, losses, lse,
                    (act_t *)logits, targets, V, Vp, mask_padded, dloss, vec);
    GPTX_CUDA_LAUNCHED("crossentropy_fused");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_crossentropy_backward(gptx_backend *be, float *logits, const float *lse,
                                                 const int32_t *targets, int N, int V, int Vp,
                                                 float dloss) {
    if (N <= 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    bool vec = ce_vec(be, logits, Vp);
    GPTX_LAUNCH_ACT(k_crossentropy_backward, (unsigned)N, CE_THREADS, be->compute, (act_t *)logits,
                    lse, targets, Vp, dloss, vec);
    GPTX_CUDA_LAUNCHED("crossentropy_backward");
    return GPTX_OK;
}

/* ---- AdamW over all ranges in one launch -------------------------------------------- */

typedef struct adamw_range_dev {
    unsigned long long offset, count;
    float weight_decay;
    unsigned block_start; /* first block of this range */
    unsigned vec;         /* the host found every operand of the range aligned for groups */
    unsigned unused;      /* zero: tables are compared bytewise */
} adamw_range_dev;

/* Block b belongs to the last range whose block_start <= b (ranges without
 * blocks are left out of the table) and updates ADAMW_CHUNK of its elements.
 * A single range comes by value (`one`; tab may be NULL). */
static __device__ adamw_range_dev adamw_block_range(const adamw_range_dev *tab, int nranges,
                                                    adamw_range_dev one, unsigned b) {
    if (nranges == 1) return one;
    int lo = 0, hi = nranges - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tab[mid].block_start <= b)
            lo = mid;
        else
            hi = mid - 1;
    }
    return tab[lo];
}

/* What a block's elements share: its range, its elements [e0, e1) of the
 * range, the end ev of the part it moves in groups, and the step's factors. */
typedef struct adamw_block {
    adamw_range_dev r;
    unsigned long long e0, e1, ev;
    float decay, step, rsbc2;
} adamw_block;

static __device__ adamw_block adamw_block_of(const adamw_range_dev *tab, int nranges,
                                             adamw_range_dev one, const gptx_adamw_hyper &h,
                                             int group) {
    adamw_block k;
    unsigned b = blockIdx.x;
    k.r = adamw_block_range(tab, nranges, one, b);
    k.e0 = (unsigned long long)(b - k.r.block_start) * ADAMW_CHUNK;
    k.e1 = k.e0 + ADAMW_CHUNK < k.r.count ? k.e0 + ADAMW_CHUNK : k.r.count;
    /* e0 is a multiple of ADAMW_CHUNK, so a group from an aligned range start stays aligned */
    k.ev = k.r.vec ? k.e0 + (k.e1 - k.e0) / group * group : k.e0;
    k.decay = __fsub_rn(1.0f, __fmul_rn(h.lr, k.r.weight_decay));
    k.step = h.lr / h.bias_correction1;
    k.rsbc2 = 1.0f / sqrtf(h.bias_correction2);
    return k;
}

/* One element's update, the CPU backend's arithmetic with every rounding
 * spelled out: it is inlined in the group and the scalar loop of each
 * kernel, and the kernel that also refreshes the weight copy must give the
 * plain kernel's bits, so nvcc must not contract it differently anywhere. */
static __device__ __forceinline__ void adamw_elem(float *p, float *m, float *v, float g,
                                                  const gptx_adamw_hyper &h,
                                                  const adamw_block &k) {
    g = __fmul_rn(g, h.grad_scale);
    float mi = __fadd_rn(__fmul_rn(h.beta1, *m), __fmul_rn(1.0f - h.beta1, g));
    float vi = __fadd_rn(__fmul_rn(h.beta2, *v), __fmul_rn(__fmul_rn(1.0f - h.beta2, g), g));
    float den = __fadd_rn(__fmul_rn(sqrtf(vi), k.rsbc2), h.eps);
    *p = __fsub_rn(__fmul_rn(*p, k.decay), __fmul_rn(k.step, mi) / den);
    *m = mi;
    *v = vi;
}

/* fp32 parameters and moments. With copy (the bf16 policy's compute copy of
 * the weights), each updated parameter is also stored there rounded to
 * nearest even, as convert_weights would: the copy is refreshed in the same
 * pass. Groups of 4 where the range's operands are aligned. */
static __global__ void __launch_bounds__(ADAMW_THREADS)
    k_adamw(float *params, gptx_bf16 *copy, const float *grads, float *m, float *v,
            const adamw_range_dev *tab, int nranges, adamw_range_dev one, gptx_adamw_hyper h) {
    adamw_block k = adamw_block_of(tab, nranges, one, h, 4);
    for (unsigned long long e = k.e0 + threadIdx.x * 4ull; e < k.ev; e += ADAMW_THREADS * 4) {
        size_t i = (size_t)(k.r.offset + e);
        float p[4], g[4], mi[4], vi[4];
        gptx_ld_group(p, params + i, 4, true);
        gptx_ld_group(g, grads + i, 4, true);
        gptx_ld_group(mi, m + i, 4, true);
        gptx_ld_group(vi, v + i, 4, true);
#pragma unroll
        for (int j = 0; j < 4; j++) adamw_elem(&p[j], &mi[j], &vi[j], g[j], h, k);
        gptx_st_group(params + i, p, 4, true);
        gptx_st_group(m + i, mi, 4, true);
        gptx_st_group(v + i, vi, 4, true);
        if (copy) gptx_st_group(copy + i, p, 4, true);
    }
    for (unsigned long long e = k.ev + threadIdx.x; e < k.e1; e += ADAMW_THREADS) {
        size_t i = (size_t)(k.r.offset + e);
        float p = params[i], mi = m[i], vi = v[i];
        adamw_elem(&p, &mi, &vi, grads[i], h, k);
        params[i] = p;
        m[i] = mi;
        v[i] = vi;
        if (copy) gptx_st(&copy[i], p);
    }
}

/* Element i of the pure-bf16 update: the fp32 update above on the widened
 * values, each result rounded back to nearest even, or stochastically with
 * the words 0, 1, 2 of the Philox block (rounding_seed, step, element
 * index) for p, m and v, so a run is reproducible and independent of the
 * launch configuration. */
static __device__ __forceinline__ void adamw_elem_bf16(uint16_t *p, uint16_t *m, uint16_t *v,
                                                       float g, size_t i,
                                                       const gptx_adamw_hyper &h,
                                                       const adamw_block &k, int stochastic) {
    float pi = gptx_bf16_widen(*p), mi = gptx_bf16_widen(*m), vi = gptx_bf16_widen(*v);
    adamw_elem(&pi, &mi, &vi, g, h, k);
    if (stochastic) {
        gptx_philox4 rnd = gptx_philox_block(h.rounding_seed, (uint64_t)h.step, i);
        *p = gptx_bf16_round_stochastic(pi, rnd.v[0]);
        *m = gptx_bf16_round_stochastic(mi, rnd.v[1]);
        *v = gptx_bf16_round_stochastic(vi, rnd.v[2]);
    } else {
        *p = gptx_bf16_round_nearest(pi);
        *m = gptx_bf16_round_nearest(mi);
        *v = gptx_bf16_round_nearest(vi);
    }
}

/* Pure bf16: parameters and moments stored bf16 (raw bits), gradients fp32;
 * groups of 8 (16 bytes of each bf16 operand, 32 of the gradients). */
static __global__ void __launch_bounds__(ADAMW_THREADS)
    k_adamw_bf16(uint16_t *params, const float *grads, uint16_t *m, uint16_t *v,
                 const adamw_range_dev *tab, int nranges, adamw_range_dev one, gptx_adamw_hyper h,
                 int stochastic) {
    adamw_block k = adamw_block_of(tab, nranges, one, h, 8);
    for (unsigned long long e = k.e0 + threadIdx.x * 8ull; e < k.ev; e += ADAMW_THREADS * 8) {
        size_t i = (size_t)(k.r.offset + e);
        uint16_t p[8], mi[8], vi[8];
        float g[8];
        gptx_vld_raw(p, params + i);
        gptx_vld_raw(mi, m + i);
        gptx_vld_raw(vi, v + i);
        gptx_ld_group(g, grads + i, 8, true);
#pragma unroll
        for (int j = 0; j < 8; j++) adamw_elem_bf16(&p[j], &mi[j], &vi[j], g[j], i + j, h, k, stochastic);
        gptx_vst_raw(params + i, p);
        gptx_vst_raw(m + i, mi);
        gptx_vst_raw(v + i, vi);
    }
    for (unsigned long long e = k.ev + threadIdx.x; e < k.e1; e += ADAMW_THREADS) {
        size_t i = (size_t)(k.r.offset + e);
        adamw_elem_bf16(&params[i], &m[i], &v[i], grads[i], i, h, k, stochastic);
    }
}

/* The device copy of the table `bytes` at be->adamw_build: a kept slot when
 * one holds the same table (no copy, no host wait: the usual step), else
 * uploaded into the least recently used slot (the first step, or another
 * optimizer's ranges on this context). */
static int adamw_table_device(gptx_backend *be, size_t bytes, const adamw_range_dev **dev) {
    gptx_cuda_adamw_table *slot = &be->adamw[0];
    be->adamw_clock++;
    for (int i = 0; i < GPTX_CUDA_ADAMW_TABLES; i++) {
        gptx_cuda_adamw_table *t = &be->adamw[i];
        if (t->bytes == bytes && memcmp(t->host, be->adamw_build, bytes) == 0) {
            t->used = be->adamw_clock;
            *dev = (const adamw_range_dev *)t->dev;
            return GPTX_OK;
        }
        if (t->used < slot->used) slot = t;
    }
    slot->bytes = 0;
    if (slot->cap < bytes) {
        /* kernels queued on the compute stream finish with the old block
         * before any later user of the cache touches it */
        gptx_cuda_cache_free(&be->cache, slot->dev);
        free(slot->host);
        slot->dev = NULL;
        slot->cap = 0;
        slot->host = malloc(bytes);
        if (!slot->host) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        GPTX_TRY(gptx_cuda_cache_alloc(&be->cache, bytes, 1, &slot->dev));
        slot->cap = bytes;
    }
    GPTX_TRY(gptx_cuda_pinned_reserve(&be->small, bytes));
    memcpy(be->small.host, be->adamw_build, bytes);
    GPTX_CUDA_TRY(
        cudaMemcpyAsync(slot->dev, be->small.host, bytes, cudaMemcpyHostToDevice, be->compute));
    GPTX_TRY(gptx_cuda_pinned_mark(&be->small, be->compute));
    memcpy(slot->host, be->adamw_build, bytes);
    slot->bytes = bytes;
    slot->used = be->adamw_clock;
    *dev = (const adamw_range_dev *)slot->dev;
    return GPTX_OK;
}

/* Host: whether range [off, ...) of every operand is aligned for AdamW's
 * groups (4 fp32 or 8 bf16 parameters; the copy's 4 bf16 take 8 bytes). */
static bool adamw_range_vec(const gptx_backend *be, const float *params, const void *copy,
                            const float *grads, const float *m, const float *v, size_t off) {
    size_t pb = be->param_bf16 ? 2 : 4, W = 16 / pb;
    const char *p = (const char *)params, *mm = (const char *)m, *vv = (const char *)v;
    return gptx_vec_ptr(p + off * pb, W, pb) && gptx_vec_ptr(mm + off * pb, W, pb) &&
           gptx_vec_ptr(vv + off * pb, W, pb) && gptx_vec_ptr(grads + off, W, 4) &&
           (copy == NULL || gptx_vec_ptr((const char *)copy + off * 2, W, 2));
}

/* The launch's range table in be->adamw_build: the ranges with elements,
 * each with its first block and whether it moves in groups. Returns the
 * number of entries; *blocks the grid. */
static int adamw_build_table(gptx_backend *be, float *params, const void *copy, const float *grads,
                             const float *m, const float *v, const gptx_param_range *ranges,
                             int nranges, unsigned long long *blocks) {
    adamw_range_dev *tab = (adamw_range_dev *)be->adamw_build;
    int nt = 0;
    *blocks = 0;
    for (int i = 0; i < nranges; i++) {
        if (ranges[i].count == 0) continue;
        memset(&tab[nt], 0, sizeof tab[nt]); /* compared bytewise */
        tab[nt].offset = ranges[i].offset;
        tab[nt].count = ranges[i].count;
        tab[nt].weight_decay = ranges[i].weight_decay;
        tab[nt].block_start = (unsigned)*blocks;
        tab[nt].vec = adamw_range_vec(be, params, copy, grads, m, v, ranges[i].offset);
        *blocks += (ranges[i].count + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
        nt++;
    }
    return nt;
}

/* AdamW over the ranges, and the weight copy's refresh when copy is set. */
static int adamw_launch(gptx_backend *be, float *params, void *copy, const float *grads, float *m,
                        float *v, const gptx_param_range *ranges, int nranges,
                        const gptx_adamw_hyper *h) {
    if (nranges <= 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    size_t need = (size_t)nranges * sizeof(adamw_range_dev);
    if (need > be->adamw_build_cap) {
        void *nb = realloc(be->adamw_build, need);
        if (!nb) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        be->adamw_build = nb;
        be->adamw_build_cap = need;
    }
    unsigned long long blocks = 0;
    int nt = adamw_build_table(be, params, copy, grads, m, v, ranges, nranges, &blocks);
    if (nt == 0) return GPTX_OK;
    if (blocks > 0x7fffffffull)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "AdamW over %llu blocks is too large", blocks);
    /* one range (the per-tensor variant) goes by value: no table at all */
    const adamw_range_dev *tab = (const adamw_range_dev *)be->adamw_build, *dev = NULL;
    if (nt > 1) GPTX_TRY(adamw_table_device(be, (size_t)nt * sizeof *tab, &dev));
    adamw_range_dev one = tab[0];
    gptx_adamw_hyper hv = *h; /* by value: a captured launch must not read the caller's */
    if (be->param_bf16)
        GPTX_LAUNCH(k_adamw_bf16, (unsigned)blocks, ADAMW_THREADS, be->compute,
                    (uint16_t *)params, grads, (uint16_t *)m, (uint16_t *)v, dev, nt, one, hv,
                    be->stochastic_rounding);
    else
        GPTX_LAUNCH(k_adamw, (unsigned)blocks, ADAMW_THREADS, be->compute, params,
                    (gptx_bf16 *)copy, grads, m, v, dev, nt, one, hv);
    GPTX_CUDA_LAUNCHED("adamw");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_adamw(gptx_backend *be, float *params, const float *grads, float *m,
                                 float *v, const gptx_param_range *ranges, int nranges,
                                 const gptx_adamw_hyper *h) {
    return adamw_launch(be, params, NULL, grads, m, v, ranges, nranges, h);
}

GPTX_CUDA_FN int gptx_cuda_adamw_copy(gptx_backend *be, float *params, float *copy,
                                      const float *grads, float *m, float *v,
                                      const gptx_param_range *ranges, int nranges,
                                      const gptx_adamw_hyper *h) {
    if (!be->act_bf16 || be->param_bf16)
        return GPTX_FAIL(GPTX_ERR_STATE, "adamw_copy: the %s policy keeps no weight copy",
                         gptx_precision_name(be->precision));
    return adamw_launch(be, params, copy, grads, m, v, ranges, nranges, h);
}

/* ---- QKV layout (separate-QKV ablation variant) ------------------------------------------ */

template <typename A>
static __global__ void k_qkv_layout(A *qkv, A *q, A *k, A *v, int C, size_t total, int split) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (3 * (size_t)C), j = i % (3 * (size_t)C);
        size_t part = j / (size_t)C, c = j % (size_t)C;
        A *src = part == 0 ? q : part == 1 ? k : v;
        if (split)
            src[n * C + c] = qkv[i];
        else
            qkv[i] = src[n * C + c];
    }
}

GPTX_CUDA_FN int gptx_cuda_qkv_interleave(gptx_backend *be, float *qkv, const float *q,
                                          const float *k, const float *v, int N, int C) {
    GPTX_TRY(gptx_cuda_enter(be));
    size_t total = (size_t)N * 3 * C;
    if (total == 0) return GPTX_OK;
    GPTX_LAUNCH_ACT(k_qkv_layout, gptx_cuda_blocks(total, 256), 256, be->compute, (act_t *)qkv,
                    (act_t *)q, (act_t *)k, (act_t *)v, C, total, 0);
    GPTX_CUDA_LAUNCHED("qkv_interleave");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_qkv_split(gptx_backend *be, float *q, float *k, float *v,
                                     const float *qkv, int N, int C) {
    GPTX_TRY(gptx_cuda_enter(be));
    size_t total = (size_t)N * 3 * C;
    if (total == 0) return GPTX_OK;
    GPTX_LAUNCH_ACT(k_qkv_layout, gptx_cuda_blocks(total, 256), 256, be->compute, (act_t *)qkv,
                    (act_t *)q, (act_t *)k, (act_t *)v, C, total, 1);
    GPTX_CUDA_LAUNCHED("qkv_split");
    return GPTX_OK;
}
