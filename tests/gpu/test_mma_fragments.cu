/* The warp-level matrix instructions of backends/cuda/cuda_mma.h, one at a
 * time, against plain host arithmetic: every fragment layout the tensor-core
 * kernels use (mma m16n8k16 bf16 with A from ldmatrix.x4, B from ldmatrix
 * x2/x4 with and without .trans, A made of two C fragments, C in and D out
 * by the fragment table), mma m16n8k8 tf32 (the PTX table element by
 * element, the kernels' 16-byte row loads with k in pairs, a C fragment as
 * the A fragment with B read down its rows in pairs, cvt.rna.tf32.f32 against
 * its definition) and cp.async with zero fill and group waits.
 *
 * Built twice: with nvcc for a device (label gpu; run_all.sh runs it first,
 * so a wrong layout table shows in seconds) and as C++ on the CPU emulation
 * (label emu; tests/gpu/emu/test_mma_fragments_emu.cpp), where it checks the
 * emulation's tables. The layout cases use small integers, whose sums are
 * exact in fp32 on any hardware, so they must agree bit for bit; the random
 * case states the accumulation bound: |d - exact| <= 4 * 2^-23 * sum |a b| +
 * 2^-23 |c| per instruction (the emulation rounds once; tensor cores
 * truncate, see cuda_emu_mma.h). Each block runs 4 warps with their own
 * data, so a lane or warp mixed up anywhere shows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_mma.h"

#define WARPS 4
#define THREADS (WARPS * 32)

enum {
    CASE_X4_X2 = 0,
    CASE_X4_X2T,
    CASE_X4_X4,
    CASE_X4_X4T,
    CASE_C_TO_A,
    CASE_TF32_TABLE,
    CASE_TF32_ROWS,
    CASE_TF32_C_TO_A,
    NCASES
};
static const char *case_names[NCASES] = {
    "A ldmatrix.x4, B ldmatrix.x2 (B^T row-major)", "A ldmatrix.x4, B ldmatrix.x2.trans (B row-major)",
    "A ldmatrix.x4, B ldmatrix.x4 (two n8 tiles)", "A ldmatrix.x4, B ldmatrix.x4.trans (two n8 tiles)",
    "A from two C fragments (S = A1 B1 rounded to bf16), then D = S B2 + C",
    "tf32 m16n8k8: A (16x8) and B (8x8) element by element, the PTX table",
    "tf32 m16n8k8 x2: A rows and B^T rows by 16-byte loads, k in pairs (two n8 tiles)",
    "tf32: A from C fragments (S = A1 B1 rounded to tf32), B2 down its rows in pairs"};
static __host__ __device__ int is_tf32(int which) { return which >= CASE_TF32_TABLE; }
/* n8 tiles of D a case writes */
static int case_tiles(int which) {
    return which == CASE_X4_X4 || which == CASE_X4_X4T || which == CASE_TF32_ROWS ? 2 : 1;
}

/* Per warp: A (16x16), B as (16 x 16) k-by-n row-major and its transpose
 * Bt (16 n x 16 k), A2/B2 for the chained case, C (16x16 fp32); outputs D
 * (16x16 fp32: both n8 tiles where a case has two). */
struct warp_data {
    gptx_bf16 a[16 * 16], b[16 * 16], bt[16 * 16], b2[16 * 8];
    float fa[16 * 16], fb[16 * 16], fbt[16 * 16], fb2[16 * 8]; /* the tf32 cases' fp32 inputs */
    float c[16 * 16], d[16 * 16];
};

/* C fragment of tile n8 (columns 8 n8 ..) of a 16x16 row-major fp32 matrix */
static __device__ void load_c(float c[4], const float *m, int n8) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; i++) c[i] = m[(g + (i >= 2 ? 8 : 0)) * 16 + n8 * 8 + 2 * q + (i & 1)];
}
static __device__ void store_c(float *m, const float d[4], int n8) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    for (int i = 0; i < 4; i++) m[(g + (i >= 2 ? 8 : 0)) * 16 + n8 * 8 + 2 * q + (i & 1)] = d[i];
}

/* Row address of lane l for an x4 load of the four 8x8 quarters of a 16x16
 * row-major tile in the order (rows 0-7, cols 0-7), (8-15, 0-7), (0-7,
 * 8-15), (8-15, 8-15): the A fragment's register order. */
static __device__ const gptx_bf16 *quarter_row(const gptx_bf16 *tile, int lane) {
    int m = lane / 8, r = lane % 8;
    return tile + (r + (m % 2) * 8) * 16 + (m / 2) * 8;
}

/* The tf32 cases: A (16x16 row-major), B (16x16, k by n), Bt (n by k) and B2
 * (16 k by 8 n) rounded to tf32 into shared memory, then the fragments of
 * cuda_mma.h. */
static __device__ void tf32_fragments(warp_data *wd, int which, uint32_t *sa, uint32_t *sbt,
                                      uint32_t *sb2) {
    int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    for (int i = lane; i < 256; i += 32) {
        sa[i] = gptx_tf32_bits(wd->fa[i]);
        sbt[i] = gptx_tf32_bits(wd->fbt[i]);
        if (i < 128) sb2[i] = gptx_tf32_bits(wd->fb2[i]);
    }
    __syncwarp();
    float c[4], d[4];
    if (which == CASE_TF32_TABLE) { /* A (16 x k 0-7), B (k 0-7 x n 0-7) by the table */
        uint32_t a[4] = {gptx_tf32_bits(wd->fa[g * 16 + q]), gptx_tf32_bits(wd->fa[(g + 8) * 16 + q]),
                         gptx_tf32_bits(wd->fa[g * 16 + q + 4]),
                         gptx_tf32_bits(wd->fa[(g + 8) * 16 + q + 4])};
        uint32_t b[2] = {gptx_tf32_bits(wd->fb[q * 16 + g]), gptx_tf32_bits(wd->fb[(q + 4) * 16 + g])};
        load_c(c, wd->c, 0);
        gptx_mma_tf32_1688(d, a, b, c);
        store_c(wd->d, d, 0);
        return;
    }
    /* S (16 x 16) = A Bt^T over k 0-15: lane (g, q) loads columns 4q..4q+3 */
    uint32_t a[2][4], b[2][2][2];
    gptx_tf32_rows_a(a, sa + g * 16 + 4 * q, sa + (g + 8) * 16 + 4 * q);
    for (int n8 = 0; n8 < 2; n8++) gptx_tf32_rows_b(b[n8], sbt + (n8 * 8 + g) * 16 + 4 * q);
    float s[2][4];
    for (int n8 = 0; n8 < 2; n8++) {
        if (which == CASE_TF32_ROWS) load_c(s[n8], wd->c, n8);
        else s[n8][0] = s[n8][1] = s[n8][2] = s[n8][3] = 0.0f;
        for (int st = 0; st < 2; st++) gptx_mma_tf32_1688(s[n8], a[st], b[n8][st], s[n8]);
    }
    if (which == CASE_TF32_ROWS) {
        for (int n8 = 0; n8 < 2; n8++) store_c(wd->d, s[n8], n8);
        return;
    }
    load_c(c, wd->c, 0); /* D = S B2 + C: step j is S's tile j, B2 rows 8j + 2q, 8j + 2q + 1 */
    for (int j = 0; j < 2; j++) {
        uint32_t pa[4], pb[2] = {sb2[(8 * j + 2 * q) * 8 + g], sb2[(8 * j + 2 * q + 1) * 8 + g]};
        gptx_mma_c_to_a_tf32(pa, s[j]);
        gptx_mma_tf32_1688(c, pa, pb, c);
    }
    store_c(wd->d, c, 0);
}

static __global__ void k_fragments(warp_data *data, int which) {
    __shared__ __align__(16) gptx_bf16 sa[WARPS][16 * 16], sb[WARPS][16 * 16], sbt[WARPS][16 * 16];
    __shared__ __align__(16) uint32_t ta[WARPS][16 * 16], tbt[WARPS][16 * 16], tb2[WARPS][16 * 8];
    int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    warp_data *wd = &data[blockIdx.x * WARPS + w];
    if (is_tf32(which)) {
        tf32_fragments(wd, which, ta[w], tbt[w], tb2[w]);
        return;
    }
    for (int i = lane; i < 256; i += 32) {
        sa[w][i] = wd->a[i];
        sb[w][i] = wd->b[i];
        sbt[w][i] = wd->bt[i];
    }
    __syncwarp();
    uint32_t a[4], b[4];
    gptx_ldmatrix_x4(a, quarter_row(sa[w], lane));
    float c[4], d[4];
    if (which == CASE_X4_X2 || which == CASE_X4_X2T) {
        if (which == CASE_X4_X2) /* Bt rows n 0-7: matrix 0 cols k 0-7, matrix 1 cols 8-15 */
            gptx_ldmatrix_x2(b, sbt[w] + (lane % 8) * 16 + ((lane / 8) % 2) * 8);
        else /* B rows k: matrix 0 rows 0-7, matrix 1 rows 8-15, cols n 0-7 */
            gptx_ldmatrix_x2_trans(b, sb[w] + ((lane % 8) + ((lane / 8) % 2) * 8) * 16);
        load_c(c, wd->c, 0);
        gptx_mma_bf16_16816(d, a, b, c);
        store_c(wd->d, d, 0);
    } else if (which == CASE_X4_X4 || which == CASE_X4_X4T) {
        if (which == CASE_X4_X4) /* Bt (n, k): (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, ..) */
            gptx_ldmatrix_x4(b, sbt[w] + ((lane % 8) + (lane / 16) * 8) * 16 + ((lane / 8) % 2) * 8);
        else /* B (k, n): (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15) */
            gptx_ldmatrix_x4_trans(b, quarter_row(sb[w], lane));
        for (int n8 = 0; n8 < 2; n8++) {
            load_c(c, wd->c, n8);
            gptx_mma_bf16_16816(d, a, b + 2 * n8, c);
            store_c(wd->d, d, n8);
        }
    } else { /* S = A B (two tiles), S as the A fragment of D = S B2 + C */
        gptx_ldmatrix_x4_trans(b, quarter_row(sb[w], lane));
        float s0[4] = {0, 0, 0, 0}, s1[4] = {0, 0, 0, 0};
        gptx_mma_bf16_16816(s0, a, b, s0);
        gptx_mma_bf16_16816(s1, a, b + 2, s1);
        uint32_t s[4];
        gptx_mma_c_to_a(s, s0, s1);
        int g = lane / 4, q = lane % 4; /* B2 (16 x 8) fragment straight from global memory */
        uint32_t b2[2];
        for (int j = 0; j < 2; j++)
            b2[j] = gptx_bf16_bits(wd->b2[(2 * q + 8 * j) * 8 + g]) |
                    (gptx_bf16_bits(wd->b2[(2 * q + 1 + 8 * j) * 8 + g]) << 16);
        load_c(c, wd->c, 0);
        gptx_mma_bf16_16816(d, s, b2, c);
        store_c(wd->d, d, 0);
    }
}

/* cp.async: thread t copies 16 bytes of which t % 17 come from src (the rest
 * zero) into group 0, then 16 full bytes into group 1; wait_group 1 must
 * have landed group 0 (checked through shared memory after a barrier), then
 * wait_group 0 group 1. */
static __global__ void k_cp_async(unsigned char *out0, unsigned char *out1,
                                  const unsigned char *src) {
    __shared__ __align__(16) unsigned char s0[THREADS * 16], s1[THREADS * 16];
    int t = threadIdx.x;
    for (int i = 0; i < 16; i++) s0[16 * t + i] = 0xAB; /* stale contents the zero fill replaces */
    __syncthreads();
    gptx_cp_async16(s0 + 16 * t, src + 16 * t, t % 17);
    gptx_cp_async_commit();
    gptx_cp_async16(s1 + 16 * t, src + 16 * (THREADS + t), 16);
    gptx_cp_async_commit();
    gptx_cp_async_wait<1>();
    __syncthreads();
    int r = (t + 32) % THREADS; /* another warp's copy: visible after its wait and the barrier */
    for (int i = 0; i < 16; i++) out0[16 * t + i] = s0[16 * r + i];
    gptx_cp_async_wait<0>();
    __syncthreads();
    for (int i = 0; i < 16; i++) out1[16 * t + i] = s1[16 * r + i];
}

/* ---- host ------------------------------------------------------------------------- */

static int failures;

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static float bf(gptx_bf16 h) { return __bfloat162float(h); }

/* cvt.rna.tf32.f32 on the host, from its definition: 10 fraction bits,
 * nearest, ties away from zero (finite inputs) */
static float tf(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) < 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}

static uint64_t rng = 88172645463325252ull;
static double uniform(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}
/* small integers (exact products and sums) or random reals */
static float draw(int exact, int lo, int hi) {
    if (exact) return (float)(lo + (int)(uniform() * (hi - lo + 1)));
    return (float)(2.0 * uniform() - 1.0) * (float)hi;
}

static void fill(warp_data *wd, int exact) {
    for (int i = 0; i < 256; i++) {
        wd->a[i] = __float2bfloat16(draw(exact, -3, 3));
        wd->b[i] = __float2bfloat16(draw(exact, -3, 3));
        wd->c[i] = draw(exact, -50, 50);
        wd->d[i] = -12345.0f;
    }
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++) wd->bt[n * 16 + k] = wd->b[k * 16 + n];
    for (int i = 0; i < 128; i++) wd->b2[i] = __float2bfloat16(draw(exact, -2, 2));
    /* tf32: small integers, or reals with all 23 fraction bits (rounding matters) */
    for (int i = 0; i < 256; i++) {
        wd->fa[i] = draw(exact, -3, 3);
        wd->fb[i] = draw(exact, -3, 3);
    }
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++) wd->fbt[n * 16 + k] = wd->fb[k * 16 + n];
    for (int i = 0; i < 128; i++) wd->fb2[i] = draw(exact, -2, 2);
}

/* The tf32 cases' expected D and bound (see expect) */
static void expect_tf32(const warp_data *wd, int which, double *want, double *bound) {
    int K = which == CASE_TF32_TABLE ? 8 : 16;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8 * case_tiles(which); n++) {
            double acc = wd->c[r * 16 + n], mag = 0.0, flip = 0.0;
            for (int k = 0; k < K; k++) {
                double x = tf(wd->fa[r * 16 + k]), y = tf(wd->fb[k * 16 + n]);
                if (which == CASE_TF32_C_TO_A) { /* S (r, k) in fp32, rounded to tf32, times B2 */
                    double sd = 0.0;
                    for (int j = 0; j < 16; j++) sd += (double)tf(wd->fa[r * 16 + j]) * tf(wd->fb[j * 16 + k]);
                    x = tf((float)sd);
                    y = tf(wd->fb2[k * 8 + n]);
                    flip += ldexp(fabs(x * y), -10); /* a device's S may round to the next tf32 */
                }
                acc += x * y;
                mag += fabs(x * y);
            }
            want[r * 16 + n] = acc;
            bound[r * 16 + n] = 4 * ldexp(mag, -23) + ldexp(fabs(wd->c[r * 16 + n]), -23) + flip;
        }
}

/* The expected D (n8 tiles: 1 or 2) and the bound on |d - expected|. */
static void expect(const warp_data *wd, int which, double *want, double *bound) {
    if (is_tf32(which)) {
        expect_tf32(wd, which, want, bound);
        return;
    }
    int tiles = case_tiles(which);
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8 * tiles; n++) {
            double acc = wd->c[r * 16 + n], mag = 0.0;
            for (int k = 0; k < 16; k++) {
                double x = bf(wd->a[r * 16 + k]), y = bf(wd->b[k * 16 + n]);
                if (which == CASE_C_TO_A) { /* S (r, k) rounded to bf16, times B2 (k, n) */
                    double s = 0.0;
                    for (int j = 0; j < 16; j++) s += (double)bf(wd->a[r * 16 + j]) * bf(wd->b[j * 16 + k]);
                    x = bf(__float2bfloat16((float)s));
                    y = bf(wd->b2[k * 8 + n]);
                }
                acc += x * y;
                mag += fabs(x * y);
            }
            want[r * 16 + n] = acc;
            bound[r * 16 + n] = 4 * ldexp(mag, -23) + ldexp(fabs(wd->c[r * 16 + n]), -23);
        }
}

static int run_case(warp_data *dev, warp_data *host, int blocks, int which, int exact) {
    int n = blocks * WARPS;
    for (int i = 0; i < n; i++) fill(&host[i], exact);
    CU(cudaMemcpyAsync(dev, host, (size_t)n * sizeof *host, cudaMemcpyHostToDevice, 0));
    GPTX_LAUNCH(k_fragments, blocks, THREADS, 0, dev, which);
    CU(cudaGetLastError());
    CU(cudaDeviceSynchronize());
    warp_data *got = (warp_data *)malloc((size_t)n * sizeof *got);
    CU(cudaMemcpyAsync(got, dev, (size_t)n * sizeof *got, cudaMemcpyDeviceToHost, 0));
    CU(cudaDeviceSynchronize());
    int tiles = case_tiles(which), bad = 0;
    double worst = 0.0, want[256], bound[256];
    for (int i = 0; i < n; i++) {
        expect(&host[i], which, want, bound);
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8 * tiles; c++) {
                double d = got[i].d[r * 16 + c], e = fabs(d - want[r * 16 + c]);
                double ratio = exact ? (e == 0.0 ? 0.0 : INFINITY) : e / bound[r * 16 + c];
                if (!(ratio <= 1.0)) {
                    if (bad++ < 4)
                        fprintf(stderr, "  warp %d D(%d, %d) = %.9g, expected %.9g\n", i, r, c, d,
                                want[r * 16 + c]);
                }
                if (ratio > worst) worst = ratio;
            }
    }
    free(got);
    printf("%-4s %-8s %s: %s", bad ? "FAIL" : "ok", exact ? "exact" : "random", case_names[which],
           bad ? "" : "");
    if (exact)
        printf("%s\n", bad ? "wrong elements" : "bit for bit");
    else
        printf("largest error %.3f of the bound%s\n", worst, bad ? " (exceeded)" : "");
    return bad != 0;
}

static int run_cp_async(void) {
    size_t n = (size_t)THREADS * 16;
    unsigned char *src = (unsigned char *)malloc(2 * n), *o0 = (unsigned char *)malloc(n),
                  *o1 = (unsigned char *)malloc(n);
    for (size_t i = 0; i < 2 * n; i++) src[i] = (unsigned char)(1 + i % 251);
    unsigned char *dsrc, *d0, *d1;
    CU(cudaMalloc((void **)&dsrc, 2 * n));
    CU(cudaMalloc((void **)&d0, n));
    CU(cudaMalloc((void **)&d1, n));
    CU(cudaMemcpyAsync(dsrc, src, 2 * n, cudaMemcpyHostToDevice, 0));
    GPTX_LAUNCH(k_cp_async, 1, THREADS, 0, d0, d1, (const unsigned char *)dsrc);
    CU(cudaGetLastError());
    CU(cudaMemcpyAsync(o0, d0, n, cudaMemcpyDeviceToHost, 0));
    CU(cudaMemcpyAsync(o1, d1, n, cudaMemcpyDeviceToHost, 0));
    CU(cudaDeviceSynchronize());
    int bad = 0;
    for (int t = 0; t < THREADS; t++) {
        int r = (t + 32) % THREADS;
        for (int i = 0; i < 16; i++) {
            unsigned char want0 = i < r % 17 ? src[16 * r + i] : 0;
            bad += o0[16 * t + i] != want0;
            bad += o1[16 * t + i] != src[n + 16 * r + i];
        }
    }
    printf("%-4s cp.async 16 bytes with zero fill, two groups, wait_group 1 then 0: %s\n",
           bad ? "FAIL" : "ok", bad ? "wrong bytes" : "every byte");
    cudaFree(dsrc);
    cudaFree(d0);
    cudaFree(d1);
    free(src);
    free(o0);
    free(o1);
    return bad != 0;
}

int main(void) {
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("test_mma_fragments: SKIPPED, no CUDA device\n");
        return 77;
    }
    int blocks = 3;
    warp_data *host = (warp_data *)malloc((size_t)blocks * WARPS * sizeof *host), *dev = NULL;
    CU(cudaMalloc((void **)&dev, (size_t)blocks * WARPS * sizeof *dev));
    for (int which = 0; which < NCASES; which++) failures += run_case(dev, host, blocks, which, 1);
    for (int which = 0; which < NCASES; which++) failures += run_case(dev, host, blocks, which, 0);
    failures += run_cp_async();
    cudaFree(dev);
    free(host);
    printf("test_mma_fragments: %s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
