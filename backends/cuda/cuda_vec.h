/* Vector loads and stores for the bandwidth-bound kernels (cuda_ops.cu).
 *
 * A group is N consecutive elements of one type, moved in accesses of
 * min(16, N * sizeof(T)) bytes (8 or 16; wider groups are split into 16-byte
 * accesses): one ld.global.v4 / v2 instead of N scalar loads. A device faults
 * on a misaligned vector access, while x86 does not, so the choice is made
 * on the host, per call, from the pointers and the sizes (gptx_vec_ptr):
 * a kernel receives `vec` and otherwise moves the same group one element at
 * a time, in the same order, so both paths give the same bits. Under the
 * CPU emulation every vector access checks its alignment and aborts, as a
 * device would fault, and is counted (gptx_cuda_emu_vector_accesses, for the
 * tests that check which path was taken). */
#ifndef GPTX_CUDA_VEC_H
#define GPTX_CUDA_VEC_H

#include "cuda_internal.h"

#ifdef GPTX_CUDA_EMU
struct alignas(16) gptx_w16 {
    uint32_t w[4];
};
struct alignas(8) gptx_w8 {
    uint32_t w[2];
};
/* vector accesses made so far (all kernels, all threads) */
inline unsigned long long gptx_emu_vec_accesses;
static inline void gptx_vec_fail(const char *what, const void *p, size_t bytes) {
    fprintf(stderr,
            "cuda emu: %s of %zu bytes at %p in block (%u,%u,%u) thread (%u,%u,%u): a device "
            "faults on a misaligned vector access; the host must choose the scalar path\n",
            what, bytes, p, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
            threadIdx.z);
    abort();
}
/* one access of W at p: checked and counted */
template <typename W> static inline W gptx_vload(const void *p) {
    if ((uintptr_t)p % sizeof(W) != 0) gptx_vec_fail("vector load", p, sizeof(W));
    gptx_emu_vec_accesses++;
    return *reinterpret_cast<const W *>(p);
}
template <typename W> static inline void gptx_vstore(void *p, W w) {
    if ((uintptr_t)p % sizeof(W) != 0) gptx_vec_fail("vector store", p, sizeof(W));
    gptx_emu_vec_accesses++;
    *reinterpret_cast<W *>(p) = w;
}
#else
typedef uint4 gptx_w16;
typedef uint2 gptx_w8;
/* The cache operators are the defaults (.ca, .wb); the intrinsics pin one
 * vector instruction per access, where nvcc split a plain store of a
 * memcpy-built uint4 into four scalar ones (k_adamw, nvcc 13). */
template <typename W> static __device__ __forceinline__ W gptx_vload(const void *p) {
    return __ldca(reinterpret_cast<const W *>(p));
}
template <typename W> static __device__ __forceinline__ void gptx_vstore(void *p, W w) {
    __stwb(reinterpret_cast<W *>(p), w);
}
#endif

/* ---- device: whole groups ------------------------------------------------------- */

/* N elements of T at p, as stored (p aligned to the access size). */
template <int N, typename T>
static __device__ __forceinline__ void gptx_vld_raw(T (&e)[N], const T *p) {
    constexpr int bytes = N * (int)sizeof(T);
    static_assert(bytes == 8 || bytes % 16 == 0, "a group is 8 bytes or a multiple of 16");
    if constexpr (bytes == 8) {
        gptx_w8 w = gptx_vload<gptx_w8>(p);
        memcpy(e, &w, 8);
    } else {
#pragma unroll
        for (int k = 0; k < bytes / 16; k++) {
            gptx_w16 w = gptx_vload<gptx_w16>(reinterpret_cast<const char *>(p) + 16 * k);
            memcpy(reinterpret_cast<char *>(e) + 16 * k, &w, 16);
        }
    }
}

template <int N, typename T>
static __device__ __forceinline__ void gptx_vst_raw(T *p, const T (&e)[N]) {
    constexpr int bytes = N * (int)sizeof(T);
    static_assert(bytes == 8 || bytes % 16 == 0, "a group is 8 bytes or a multiple of 16");
    if constexpr (bytes == 8) {
        gptx_w8 w;
        memcpy(&w, e, 8);
        gptx_vstore(p, w);
    } else {
#pragma unroll
        for (int k = 0; k < bytes / 16; k++) {
            gptx_w16 w;
            memcpy(&w, reinterpret_cast<const char *>(e) + 16 * k, 16);
            gptx_vstore(reinterpret_cast<char *>(p) + 16 * k, w);
        }
    }
}

/* The value a store of v into a T reads back as (bf16: rounded to nearest even). */
template <typename T> static __device__ __forceinline__ float gptx_rounded(float v) {
    T t;
    gptx_st(&t, v);
    return gptx_ld(t);
}

/* ---- device: a group, vector or one element at a time ------------------------------ */

/* Elements [0, n) of the group at p, widened to fp32: one vector access when
 * vec (the host checked the alignment; then n == N), else element by
 * element (tails, unaligned buffers). Elements from n on read as 0. */
template <int N, typename T>
static __device__ __forceinline__ void gptx_ld_group(float (&f)[N], const T *p, int n, bool vec) {
    if (vec) {
#ifdef GPTX_CUDA_EMU
        if (n != N) gptx_vec_fail("vector load of a partial group", p, (size_t)n * sizeof(T));
#endif
        T e[N];
        gptx_vld_raw(e, p);
#pragma unroll
        for (int i = 0; i < N; i++) f[i] = gptx_ld(e[i]);
        return;
    }
#pragma unroll
    for (int i = 0; i < N; i++) f[i] = i < n ? gptx_ld(p[i]) : 0.0f;
}

/* Stores elements [0, n) of f into the group at p (rounded to T). */
template <int N, typename T>
static __device__ __forceinline__ void gptx_st_group(T *p, const float (&f)[N], int n, bool vec) {
    if (vec) {
#ifdef GPTX_CUDA_EMU
        if (n != N) gptx_vec_fail("vector store of a partial group", p, (size_t)n * sizeof(T));
#endif
        T e[N];
#pragma unroll
        for (int i = 0; i < N; i++) gptx_st(&e[i], f[i]);
        gptx_vst_raw(p, e);
        return;
    }
#pragma unroll
    for (int i = 0; i < N; i++)
        if (i < n) gptx_st(&p[i], f[i]);
}

/* ---- host: the choice ------------------------------------------------------------ */

/* Whether groups of n elements of elem bytes, starting at p, may be moved in
 * vector accesses: p aligned to min(16, n * elem). NULL (an absent operand)
 * does not stand in the way. */
static inline bool gptx_vec_ptr(const void *p, size_t n, size_t elem) {
    size_t bytes = n * elem < 16 ? n * elem : 16;
    return p == NULL || (uintptr_t)p % bytes == 0;
}

/* Bytes per element of the backend's activations and residual stream. */
static inline size_t gptx_cuda_act_bytes(const gptx_backend *be) { return be->act_bf16 ? 2 : 4; }
static inline size_t gptx_cuda_res_bytes(const gptx_backend *be) {
    return be->act_bf16 && !be->res_f32 ? 2 : 4;
}

#endif
