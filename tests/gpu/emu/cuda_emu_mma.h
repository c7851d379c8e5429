/* The warp-level matrix instructions of backends/cuda/cuda_mma.h on the CPU
 * emulation (included by cuda_emu.h). Each is implemented from the PTX ISA's
 * tables of which lane holds which element, as a warp-collective operation:
 * every lane deposits its operands, waits at the warp's barrier, computes its
 * own part of the result from the operands of the lanes that own them, and
 * waits again before anyone may deposit the next ones.
 *
 *   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA 9.7.14.5.8):
 *     A (16x16): reg j of lane l holds rows g, g+8 (j odd), columns 2q, 2q+1
 *       (+8 for j >= 2); B (16x8): reg j holds rows 2q, 2q+1 (+8 for j = 1) of
 *       column g; C/D: c0, c1 at (g, 2q..2q+1), c2, c3 at (g+8, 2q..2q+1);
 *       g = l / 4, q = l % 4, the lower-numbered element in the low half.
 *     Numerics: the 16 products are exact (bf16 x bf16 fits in fp32) and are
 *     summed with C in double, then rounded once to fp32 (nearest even). The
 *     hardware's accumulation is not IEEE: it aligns the addends to the
 *     largest exponent and truncates (Fasi et al., "Numerical behavior of
 *     NVIDIA tensor cores", 2021), so a device may differ by a few units of
 *     2^-23 of the magnitude sum per instruction; tests allow that.
 *   mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (9.7.14.5.7):
 *     A (16x8): a0 (g, q), a1 (g+8, q), a2 (g, q+4), a3 (g+8, q+4); B (8x8):
 *       b0 (row q, col g), b1 (row q+4, col g); C/D as for m16n8k16. One tf32
 *       per 32-bit register: an fp32 bit pattern of which the tensor core
 *       reads the sign, the exponent and 10 fraction bits. A kernel must
 *       round its operands (cvt.rna.tf32.f32); the emulation aborts on an
 *       operand with any of the 13 low bits set, since what a device makes of
 *       them is not specified. Numerics as m16n8k16: the 8 products exact,
 *       summed with C in double, rounded once.
 *   cvt.rna.tf32.f32 (9.7.9.21): round to 10 fraction bits, to nearest, ties
 *     away from zero: add half an ulp of tf32 to the magnitude's bits and
 *     clear the 13 low bits (overflow to infinity as the carry reaches the
 *     exponent); infinities unchanged, NaN stays a NaN.
 *   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16 (9.7.14.5.15):
 *     lane i gives the address of row i % 8 of matrix i / 8 (16-byte
 *     aligned); register m of lane l receives row l / 4, columns 2(l % 4) and
 *     2(l % 4) + 1 of matrix m, or with .trans column l / 4 of rows 2(l % 4)
 *     and 2(l % 4) + 1.
 *   cp.async.cg.shared.global [dst], [src], 16, bytes (9.7.9.25): a 16-byte
 *     copy (both addresses 16-byte aligned), bytes read and the rest zeroed.
 *     A copy becomes visible at the issuing thread's cp.async.wait_group that
 *     covers its group (GPTX_CUDA_EMU_CP_ASYNC=late, the default: a kernel
 *     that reads before waiting, or reads another thread's copy without a
 *     barrier after that thread's wait, sees stale shared memory), or at once
 *     (=eager: a copy into a buffer that another warp has not finished
 *     reading overwrites what that warp then reads). Both are schedules a
 *     device may choose. wait_group N completes every committed group but the
 *     N most recent; copies issued after the last commit belong to no group
 *     and stay pending. */
#ifndef GPTX_CUDA_EMU_MMA_H
#define GPTX_CUDA_EMU_MMA_H

namespace gptx_emu {

enum warp_op { WARP_OP_MMA = 1, WARP_OP_LDMATRIX = 2, WARP_OP_MMA_TF32 = 3 };

/* What one lane deposits for a collective matrix instruction. */
struct warp_operands {
    int op;
    uint32_t a[4], b[2];
    float c[4];
    const unsigned char *row;
};
inline warp_operands warp_ops[32][32];

/* The calling lane's warp, which must hold 32 threads. */
static inline unsigned full_warp(const char *what) {
    unsigned w = linear_tid() / 32;
    if (g.warp_bar[w].count != 32) {
        fprintf(stderr, "cuda emu: %s needs all 32 lanes of a warp; warp %u of the block has %u\n",
                what, w, g.warp_bar[w].count);
        abort();
    }
    return w;
}

/* Deposit, then wait for the warp: every lane must be at the same kind of
 * instruction (a divergent warp would pair different instructions up). */
static inline void warp_gather(unsigned w, unsigned lane, const warp_operands &mine) {
    warp_ops[w][lane] = mine;
    wait_at(&g.warp_bar[w]);
    for (unsigned l = 0; l < 32; l++)
        if (warp_ops[w][l].op != mine.op) {
            fprintf(stderr, "cuda emu: warp %u: lane %u is at another warp-collective "
                            "instruction than lane %u (divergent mma/ldmatrix)\n",
                    w, l, lane);
            abort();
        }
}

static inline float bf16_lo(uint32_t r) {
    uint32_t u = r << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline float bf16_hi(uint32_t r) {
    uint32_t u = r & 0xffff0000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Element (row, k) of the warp's A, (k, col) of its B. */
static inline float mma_a(unsigned w, unsigned row, unsigned k) {
    uint32_t r = warp_ops[w][(row % 8) * 4 + (k % 8) / 2].a[(row >= 8) + 2 * (k >= 8)];
    return k & 1 ? bf16_hi(r) : bf16_lo(r);
}
static inline float mma_b(unsigned w, unsigned k, unsigned col) {
    uint32_t r = warp_ops[w][col * 4 + (k % 8) / 2].b[k >= 8];
    return k & 1 ? bf16_hi(r) : bf16_lo(r);
}

/* Element (i, j) of the warp's A or B, by its fragment table. */
typedef float (*mma_element)(unsigned w, unsigned i, unsigned j);

/* D (16x8) = A (16xK) B (Kx8) + C for the warp (instruction `op`): each lane
 * deposits its operands, computes its four elements of D from the lanes
 * that own A's and B's (the K exact products summed with C in double,
 * rounded once), and waits for the others to have read them. */
static inline void mma_16x8(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                            int op, unsigned K, mma_element ea, mma_element eb) {
    unsigned w = full_warp("mma.sync"), lane = linear_tid() % 32;
    warp_operands mine = {};
    mine.op = op;
    memcpy(mine.a, a, sizeof mine.a);
    memcpy(mine.b, b, sizeof mine.b);
    memcpy(mine.c, c, sizeof mine.c);
    warp_gather(w, lane, mine);
    float out[4];
    for (unsigned i = 0; i < 4; i++) {
        unsigned row = lane / 4 + (i >= 2 ? 8 : 0), col = (lane % 4) * 2 + (i & 1);
        double acc = mine.c[i]; /* C has D's layout: this lane's own element */
        for (unsigned k = 0; k < K; k++) acc += (double)ea(w, row, k) * eb(w, k, col);
        out[i] = (float)acc;
    }
    wait_at(&g.warp_bar[w]); /* everyone has read the operands */
    memcpy(d, out, sizeof out); /* d may be c */
}

static inline void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                  const float c[4]) {
    mma_16x8(d, a, b, c, WARP_OP_MMA, 16, mma_a, mma_b);
}

static inline uint32_t tf32_rna(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) & 0xffffe000u; /* NaN */
    if ((u & 0x7fffffffu) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}

static inline float tf32_value(uint32_t r, const char *what, unsigned lane, unsigned reg) {
    if (r & 0x1fffu) {
        fprintf(stderr, "cuda emu: mma .tf32: %s register %u of lane %u is 0x%08x, not a tf32 "
                        "(13 low bits set): round it with cvt.rna.tf32.f32\n",
                what, reg, lane, r);
        abort();
    }
    float f;
    memcpy(&f, &r, 4);
    return f;
}

/* Element (row, k) of the warp's tf32 A (16x8), (k, col) of its B (8x8). */
static inline float mma_a_tf32(unsigned w, unsigned row, unsigned k) {
    unsigned lane = (row % 8) * 4 + k % 4, reg = (row >= 8) + 2 * (k >= 4);
    return tf32_value(warp_ops[w][lane].a[reg], "A", lane, reg);
}
static inline float mma_b_tf32(unsigned w, unsigned k, unsigned col) {
    unsigned lane = col * 4 + k % 4, reg = k >= 4;
    return tf32_value(warp_ops[w][lane].b[reg], "B", lane, reg);
}

static inline void mma_tf32_1688(float d[4], const uint32_t a[4], const uint32_t b[2],
                                 const float c[4]) {
    mma_16x8(d, a, b, c, WARP_OP_MMA_TF32, 8, mma_a_tf32, mma_b_tf32);
}

static inline void ldmatrix(uint32_t *r, int count, int trans, const void *row) {
    unsigned w = full_warp("ldmatrix"), lane = linear_tid() % 32;
    if (lane < (unsigned)count * 8 && (!row || (uintptr_t)row % 16 != 0)) {
        fprintf(stderr, "cuda emu: ldmatrix: lane %u gives row address %p, not 16-byte aligned\n",
                lane, row);
        abort();
    }
    warp_operands mine = {};
    mine.op = WARP_OP_LDMATRIX;
    mine.row = (const unsigned char *)row;
    warp_gather(w, lane, mine);
    uint32_t out[4];
    for (int m = 0; m < count; m++) {
        if (!trans) {
            memcpy(&out[m], warp_ops[w][m * 8 + lane / 4].row + (lane % 4) * 4, 4);
        } else {
            uint16_t lo, hi;
            memcpy(&lo, warp_ops[w][m * 8 + 2 * (lane % 4)].row + (lane / 4) * 2, 2);
            memcpy(&hi, warp_ops[w][m * 8 + 2 * (lane % 4) + 1].row + (lane / 4) * 2, 2);
            out[m] = (uint32_t)lo | ((uint32_t)hi << 16);
        }
    }
    wait_at(&g.warp_bar[w]);
    memcpy(r, out, (size_t)count * sizeof *r);
}

/* ---- cp.async ----------------------------------------------------------------- */

struct cp_copy {
    unsigned char *dst;
    const unsigned char *src;
    int bytes;
    unsigned group; /* the number of commits before it was issued */
};
struct cp_thread {
    unsigned long long serial; /* the block it belongs to */
    unsigned committed;
    std::vector<cp_copy> pending;
};
inline cp_thread cp_threads[1024];
inline int cp_mode; /* 0 unread, 1 late, 2 eager */

static inline cp_thread &cp_self(void) {
    cp_thread &t = cp_threads[linear_tid()];
    if (t.serial != g.block_serial) { /* a new block: nothing of the last one is pending */
        t.serial = g.block_serial;
        t.committed = 0;
        t.pending.clear();
    }
    return t;
}

static inline void cp_land(const cp_copy &c) {
    if (c.bytes) memcpy(c.dst, c.src, (size_t)c.bytes);
    memset(c.dst + c.bytes, 0, (size_t)(16 - c.bytes));
}

static inline void cp_async16(void *dst, const void *src, int bytes) {
    if (!cp_mode) {
        const char *e = getenv("GPTX_CUDA_EMU_CP_ASYNC");
        cp_mode = e && strcmp(e, "eager") == 0 ? 2 : 1;
    }
    if (bytes < 0 || bytes > 16 || !dst || (uintptr_t)dst % 16 != 0 ||
        (bytes > 0 && (!src || (uintptr_t)src % 16 != 0))) {
        fprintf(stderr, "cuda emu: cp.async of %d bytes from %p to %p: addresses must be 16-byte "
                        "aligned and 0 <= bytes <= 16\n",
                bytes, src, dst);
        abort();
    }
    cp_thread &t = cp_self();
    cp_copy c = {(unsigned char *)dst, (const unsigned char *)src, bytes, t.committed};
    if (cp_mode == 2)
        cp_land(c);
    else
        t.pending.push_back(c);
}

static inline void cp_async_commit(void) { cp_self().committed++; }

static inline void cp_async_wait(int n) {
    cp_thread &t = cp_self();
    unsigned done_below = t.committed > (unsigned)n ? t.committed - (unsigned)n : 0;
    size_t keep = 0;
    for (size_t i = 0; i < t.pending.size(); i++) {
        if (t.pending[i].group < done_below)
            cp_land(t.pending[i]);
        else
            t.pending[keep++] = t.pending[i];
    }
    t.pending.resize(keep);
}

} // namespace gptx_emu

#endif
