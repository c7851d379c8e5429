/* Warp-level matrix instructions for the tensor-core kernels (sm_80 and
 * later), as device helpers with one meaning on the GPU and in the tests'
 * CPU emulation (tests/gpu/emu/cuda_emu_mma.h implements each one as a
 * warp-collective operation from the PTX ISA's fragment tables):
 *
 *   gptx_mma_bf16_16816(d, a, b, c)   D (16x8) = A (16x16) B (16x8) + C, bf16 in, fp32
 *                                     accumulation (mma.sync.aligned.m16n8k16.row.col);
 *   gptx_ldmatrix_x{1,2,4}[_trans]    one to four 8x8 b16 matrices from shared memory
 *                                     (ldmatrix.sync.aligned.m8n8): lane i gives the
 *                                     address of row i % 8 of matrix i / 8;
 *   gptx_cp_async16(dst, src, bytes)  16-byte asynchronous copy global -> shared, the
 *                                     last 16 - bytes zero-filled (cp.async.cg);
 *   gptx_cp_async_commit / _wait<N>   close a group of copies / wait until at most N
 *                                     groups are still in flight;
 *   gptx_mma_tf32_1688(d, a, b, c)    D (16x8) = A (16x8) B (8x8) + C, tf32 in (fp32 bit
 *                                     patterns whose low 13 bits are zero), fp32
 *                                     accumulation (mma.sync.aligned.m16n8k8.row.col,
 *                                     .tf32); gptx_tf32_bits rounds an fp32 to tf32
 *                                     (cvt.rna.tf32.f32: nearest, ties away from zero).
 *
 * Fragment layouts (PTX ISA 9.7.14.5.8, m16n8k16 with .bf16; g = lane / 4,
 * q = lane % 4; element pairs are packed low half first):
 *   A (16x16, row-major): reg 0 (g, 2q..2q+1), reg 1 (g+8, 2q..), reg 2 (g, 2q+8..),
 *                         reg 3 (g+8, 2q+8..);
 *   B (16x8, "col"):      reg 0 (rows 2q..2q+1, col g), reg 1 (rows 2q+8..2q+9, col g);
 *   C/D (16x8, fp32):     c0, c1 (g, 2q..2q+1), c2, c3 (g+8, 2q..2q+1).
 * So the C fragments of two neighbouring 16x8 tiles are the A fragment of
 * one 16x16 tile: what flash attention multiplies its probabilities with
 * without a trip through shared memory (gptx_mma_c_to_a).
 *
 * m16n8k8 with .tf32 (PTX ISA 9.7.14.5.7; one element per register):
 *   A (16x8):  a0 (g, q), a1 (g+8, q), a2 (g, q+4), a3 (g+8, q+4);
 *   B (8x8):   b0 (row q, col g), b1 (row q+4, col g);   C/D as above.
 * ldmatrix moves b16 elements, so it cannot gather these 32-bit fragments;
 * the tf32 kernels read shared memory with 16-byte loads instead and let k
 * run in another order: the sum over k of a product is the same for any
 * order both operands share. A lane's 16-byte load of row r, columns
 * 4q..4q+3 of a 16-column block, serves two k8 steps: step s takes column
 * 4q + 2s as k = q and 4q + 2s + 1 as k = q + 4 (gptx_tf32_rows). Where k
 * runs down a tile's rows (P V), step j takes row 8j + 2q as k = q and 8j +
 * 2q + 1 as k = q + 4 -- the order in which a C fragment holds its columns,
 * so a C fragment is an A fragment as it stands (gptx_mma_c_to_a_tf32).
 *
 * Every helper must be reached by all 32 lanes of the warp together (the
 * emulation aborts otherwise); addresses are 16-byte aligned (ldmatrix rows,
 * cp.async source and destination: the emulation checks, x86 would hide it). */
#ifndef GPTX_CUDA_MMA_H
#define GPTX_CUDA_MMA_H

#include "cuda_internal.h"

/* A bf16's bits, and two floats rounded to nearest even and packed as a
 * bf16x2 register (lo in the low half). */
static __device__ __forceinline__ uint32_t gptx_bf16_bits(gptx_bf16 h) {
#ifdef GPTX_CUDA_EMU
    return h.x;
#else
    return __bfloat16_as_ushort(h);
#endif
}
static __device__ __forceinline__ uint32_t gptx_pack_bf16x2(float lo, float hi) {
    return gptx_bf16_bits(__float2bfloat16(lo)) | (gptx_bf16_bits(__float2bfloat16(hi)) << 16);
}

/* 16 bytes from src to dst, both 16-byte aligned (one vector load and
 * store; the emulation checks the alignment a device would fault on). */
static __device__ __forceinline__ void gptx_copy16(void *dst, const void *src) {
#ifdef GPTX_CUDA_EMU
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16) {
        fprintf(stderr, "cuda emu: 16-byte copy from %p to %p is not 16-byte aligned\n", src, dst);
        abort();
    }
    memcpy(dst, src, 16);
#else
    *(uint4 *)dst = *(const uint4 *)src;
#endif
}

/* Four 32-bit words from 16-byte aligned shared memory (one 16-byte load). */
static __device__ __forceinline__ void gptx_lds128(uint32_t r[4], const void *p) {
#ifdef GPTX_CUDA_EMU
    if ((uintptr_t)p % 16) {
        fprintf(stderr, "cuda emu: 16-byte shared load at %p is not 16-byte aligned\n", p);
        abort();
    }
    memcpy(r, p, 16);
#else
    uint4 v = *(const uint4 *)p;
    r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
#endif
}

/* fp32 to tf32 (cvt.rna.tf32.f32): the nearest value with 10 fraction bits,
 * ties away from zero, as an fp32 bit pattern whose low 13 bits are zero. */
static __device__ __forceinline__ uint32_t gptx_tf32_bits(float x) {
#ifdef GPTX_CUDA_EMU
    return gptx_emu::tf32_rna(x);
#else
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
#endif
}

/* Two k8 steps of tf32 operands from 16-byte loads of rows (pre-rounded tf32
 * bits, columns 4q..4q+3 of a 16-column block at lo and hi; see the top):
 * A from rows g (lo) and g+8 (hi), a[s] for step s; B from row g (col n = g)
 * alone, b[s] for step s. */
static __device__ __forceinline__ void gptx_tf32_rows_a(uint32_t a[2][4], const void *lo,
                                                        const void *hi) {
    uint32_t x[4], y[4];
    gptx_lds128(x, lo);
    gptx_lds128(y, hi);
    for (int s = 0; s < 2; s++) {
        a[s][0] = x[2 * s];
        a[s][1] = y[2 * s];
        a[s][2] = x[2 * s + 1];
        a[s][3] = y[2 * s + 1];
    }
}
static __device__ __forceinline__ void gptx_tf32_rows_b(uint32_t b[2][2], const void *row) {
    uint32_t x[4];
    gptx_lds128(x, row);
    for (int s = 0; s < 2; s++) {
        b[s][0] = x[2 * s];
        b[s][1] = x[2 * s + 1];
    }
}

/* The C fragment (16x8 fp32) of one tile as the A fragment of a k8 step
 * whose k = q is column 2q and k = q + 4 column 2q + 1, rounded to tf32. */
static __device__ __forceinline__ void gptx_mma_c_to_a_tf32(uint32_t a[4], const float c[4]) {
    a[0] = gptx_tf32_bits(c[0]);
    a[1] = gptx_tf32_bits(c[2]);
    a[2] = gptx_tf32_bits(c[1]);
    a[3] = gptx_tf32_bits(c[3]);
}

/* The A fragment (16x16) of the C fragments lo (columns 0-7) and hi
 * (columns 8-15), rounded to bf16. */
static __device__ __forceinline__ void gptx_mma_c_to_a(uint32_t a[4], const float lo[4],
                                                       const float hi[4]) {
    a[0] = gptx_pack_bf16x2(lo[0], lo[1]);
    a[1] = gptx_pack_bf16x2(lo[2], lo[3]);
    a[2] = gptx_pack_bf16x2(hi[0], hi[1]);
    a[3] = gptx_pack_bf16x2(hi[2], hi[3]);
}

#ifdef GPTX_CUDA_EMU

/* tests/gpu/emu/cuda_emu_mma.h */
static __device__ __forceinline__ void gptx_mma_bf16_16816(float d[4], const uint32_t a[4],
                                                           const uint32_t b[2], const float c[4]) {
    gptx_emu::mma_bf16_16816(d, a, b, c);
}
static __device__ __forceinline__ void gptx_mma_tf32_1688(float d[4], const uint32_t a[4],
                                                          const uint32_t b[2], const float c[4]) {
    gptx_emu::mma_tf32_1688(d, a, b, c);
}
static __device__ __forceinline__ void gptx_ldmatrix_x4(uint32_t r[4], const void *row) {
    gptx_emu::ldmatrix(r, 4, 0, row);
}
static __device__ __forceinline__ void gptx_ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    gptx_emu::ldmatrix(r, 4, 1, row);
}
static __device__ __forceinline__ void gptx_ldmatrix_x2(uint32_t r[2], const void *row) {
    gptx_emu::ldmatrix(r, 2, 0, row);
}
static __device__ __forceinline__ void gptx_ldmatrix_x2_trans(uint32_t r[2], const void *row) {
    gptx_emu::ldmatrix(r, 2, 1, row);
}
static __device__ __forceinline__ void gptx_cp_async16(void *dst, const void *src, int bytes) {
    gptx_emu::cp_async16(dst, src, bytes);
}
static __device__ __forceinline__ void gptx_cp_async_commit(void) { gptx_emu::cp_async_commit(); }
template <int N> static __device__ __forceinline__ void gptx_cp_async_wait(void) {
    gptx_emu::cp_async_wait(N);
}

#else

static __device__ __forceinline__ void gptx_mma_bf16_16816(float d[4], const uint32_t a[4],
                                                           const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
static __device__ __forceinline__ void gptx_mma_tf32_1688(float d[4], const uint32_t a[4],
                                                          const uint32_t b[2], const float c[4]) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
                   "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
static __device__ __forceinline__ unsigned gptx_smem_addr(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void gptx_ldmatrix_x4(uint32_t r[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(gptx_smem_addr(row))
                 : "memory");
}
static __device__ __forceinline__ void gptx_ldmatrix_x4_trans(uint32_t r[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(gptx_smem_addr(row))
                 : "memory");
}
static __device__ __forceinline__ void gptx_ldmatrix_x2(uint32_t r[2], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(gptx_smem_addr(row))
                 : "memory");
}
static __device__ __forceinline__ void gptx_ldmatrix_x2_trans(uint32_t r[2], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(gptx_smem_addr(row))
                 : "memory");
}
static __device__ __forceinline__ void gptx_cp_async16(void *dst, const void *src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(gptx_smem_addr(dst)),
                 "l"(src), "r"(bytes)
                 : "memory");
}
static __device__ __forceinline__ void gptx_cp_async_commit(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> static __device__ __forceinline__ void gptx_cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

#endif

#endif
