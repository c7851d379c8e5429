/* CPU emulation of the CUDA subset the backend uses, for tests on machines
 * without a GPU (compiled as C++20 with GPTX_CUDA_EMU; never part of the
 * library).
 *
 * What it models:
 *   - kernels: every thread of a block runs as a cooperative fiber
 *     (ucontext) on one OS thread; blocks run one after another. __shared__
 *     becomes `static` (one copy, shared by the block that is running).
 *     __syncthreads() and warp shuffles are barriers: a fiber runs until it
 *     waits at one, then the next fiber runs. GPTX_CUDA_EMU_ORDER=reverse
 *     resumes fibers in reverse order, which exposes a missing barrier (a
 *     read that only works when the writer happened to run first);
 *     =warps (=warps-reverse) always resumes the lowest (highest) runnable
 *     thread, so a warp runs ahead of the others up to a block barrier,
 *     which exposes a buffer overwritten while another warp still reads it
 *     (with GPTX_CUDA_EMU_CP_ASYNC=eager: a prefetch without the barrier
 *     that should hold it back). A barrier
 *     that some threads of the block never reach is reported and aborts.
 *   - runtime: device memory is host memory; streams and events are
 *     synchronous no-ops; GPTX_CUDA_EMU_DEVICES=0 reports no device and
 *     GPTX_CUDA_EMU_MEM_LIMIT=<bytes> makes cudaMalloc fail beyond a budget.
 *   - cuBLASLt: cublasLtMatmul computes D = alpha op(A) op(B) + beta C (+ bias
 *     per row of D) literally from the documented column-major definition,
 *     with inputs rounded to bf16 / tf32 for the fast compute types; A/B and
 *     C/D may be fp32 or bf16 (__nv_bfloat16, round to nearest even).
 * What it cannot model: real concurrency between threads or streams, the
 * memory model, performance, and anything the real compiler or driver does. */
#ifndef GPTX_CUDA_EMU_H
#define GPTX_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

#include <functional>
#include <unordered_map>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

inline uint3 gptx_emu_threadIdx, gptx_emu_blockIdx;
inline dim3 gptx_emu_blockDim, gptx_emu_gridDim;
#define threadIdx gptx_emu_threadIdx
#define blockIdx gptx_emu_blockIdx
#define blockDim gptx_emu_blockDim
#define gridDim gptx_emu_gridDim

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
/* explicitly rounded arithmetic, never contracted into a fused multiply-add
 * (the emulation is compiled with -ffp-contract=off) */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }

/* ---- bf16 (cuda_bf16.h subset) ------------------------------------------- */

/* The top 16 bits of an fp32; conversions round to nearest, ties to even,
 * and keep NaN a (quiet) NaN, like __float2bfloat16. */
struct __nv_bfloat16 {
    uint16_t x;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    __nv_bfloat16 h;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        h.x = (uint16_t)((u >> 16) | 0x40u);
        return h;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    h.x = (uint16_t)(u >> 16);
    return h;
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    uint32_t u = (uint32_t)h.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- runtime ------------------------------------------------------------ */

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901
} cudaError_t;
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3
} cudaMemcpyKind;
/* Graph capture records what a capturing stream is given, in order, and a
 * launch of the instantiated graph replays it. */
struct gptx_emu_graph_t {
    std::vector<std::function<void()>> ops;
    unsigned long long breaks; /* gptx_emu_capture_breaks when the capture began */
};
struct gptx_emu_stream_t {
    gptx_emu_graph_t *capture; /* non-NULL while capturing */
};
/* Streams are synchronous, so an event is reached when it is recorded: it
 * keeps the host time of that moment. */
struct gptx_emu_event_t {
    unsigned flags;
    int recorded;
    double seconds;
};
typedef gptx_emu_stream_t *cudaStream_t;
typedef gptx_emu_event_t *cudaEvent_t;
typedef gptx_emu_graph_t *cudaGraph_t;
typedef gptx_emu_graph_t *cudaGraphExec_t;
#define cudaStreamNonBlocking 1u
#define cudaEventDefault 0u
#define cudaEventDisableTiming 2u
typedef enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
} cudaStreamCaptureMode;
/* streams capturing now: a synchronizing call then fails, as on a device,
 * and invalidates the captures (as does cudaFree, which may synchronize):
 * cudaStreamEndCapture then fails with cudaErrorStreamCaptureInvalidated */
inline int gptx_emu_capturing;
inline unsigned long long gptx_emu_capture_breaks;
static inline cudaError_t gptx_emu_capture_break(void) {
    if (!gptx_emu_capturing) return cudaSuccess;
    gptx_emu_capture_breaks++;
    return cudaErrorStreamCaptureUnsupported;
}

struct cudaDeviceProp {
    char name[256];
    int major, minor;
    int multiProcessorCount;
    size_t totalGlobalMem;
    size_t sharedMemPerBlockOptin;
};

struct gptx_emu_memory {
    size_t used, limit;
    int limit_read;
};
inline gptx_emu_memory gptx_emu_mem;

static inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInsufficientDriver:
        return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    }
    return "unknown error";
}
static inline const char *cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : "cudaError (emulated)";
}
/* the error of the last launch (a launch into an invalidated capture) */
inline cudaError_t gptx_emu_last_error;
static inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = gptx_emu_last_error;
    gptx_emu_last_error = cudaSuccess;
    return e;
}
static inline cudaError_t cudaGetDeviceCount(int *n) {
    const char *e = getenv("GPTX_CUDA_EMU_DEVICES");
    *n = e ? atoi(e) : 1;
    return *n > 0 ? cudaSuccess : cudaErrorNoDevice;
}
static inline cudaError_t cudaSetDevice(int d) {
    return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
static inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int d) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "gptx CPU emulation");
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->totalGlobalMem = (size_t)1 << 34;
    p->sharedMemPerBlockOptin = 227 * 1024; /* sm_90 */
    return cudaSuccess;
}
static inline cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
static inline cudaError_t cudaDriverGetVersion(int *v) {
    *v = 13000;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new gptx_emu_stream_t();
    return cudaSuccess;
}
static inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
/* s captures, and something since its capture began invalidated it */
static inline int gptx_emu_capture_invalid(cudaStream_t s) {
    return s && s->capture && s->capture->breaks != gptx_emu_capture_breaks;
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    (void)s;
    return gptx_emu_capture_break();
}
static inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) {
    return cudaSuccess;
}
static inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    *e = new gptx_emu_event_t();
    (*e)->flags = flags;
    return cudaSuccess;
}
static inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
static inline void gptx_emu_event_reach(cudaEvent_t e) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    e->seconds = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    e->recorded = 1;
}
static inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (gptx_emu_capture_invalid(s)) return cudaErrorStreamCaptureInvalidated;
    if (s && s->capture)
        s->capture->ops.push_back([e]() { gptx_emu_event_reach(e); });
    else
        gptx_emu_event_reach(e);
    return cudaSuccess;
}
static inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return gptx_emu_capture_break(); }
/* synchronous streams: work is done once queued, a recorded event reached */
static inline cudaError_t cudaEventQuery(cudaEvent_t e) {
    return e->recorded ? cudaSuccess : cudaErrorNotReady;
}
static inline cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }
static inline cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if ((a->flags | b->flags) & cudaEventDisableTiming) return cudaErrorInvalidResourceHandle;
    if (!a->recorded || !b->recorded) return cudaErrorInvalidResourceHandle;
    *ms = (float)((b->seconds - a->seconds) * 1e3);
    return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize(void) { return gptx_emu_capture_break(); }
static inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (s->capture) return cudaErrorInvalidValue;
    s->capture = new gptx_emu_graph_t();
    s->capture->breaks = gptx_emu_capture_breaks;
    gptx_emu_capturing++;
    return cudaSuccess;
}
static inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!s->capture) return cudaErrorInvalidValue;
    gptx_emu_graph_t *c = s->capture;
    s->capture = NULL;
    gptx_emu_capturing--;
    if (c->breaks != gptx_emu_capture_breaks) {
        delete c;
        *g = NULL;
        return cudaErrorStreamCaptureInvalidated;
    }
    *g = c;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t g,
                                               unsigned long long) {
    *exec = new gptx_emu_graph_t(*g);
    return cudaSuccess;
}
static inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t g) {
    delete g;
    return cudaSuccess;
}
static inline cudaError_t cudaGraphLaunch(cudaGraphExec_t g, cudaStream_t s) {
    if (s->capture) return cudaErrorStreamCaptureUnsupported;
    for (const std::function<void()> &op : g->ops) op();
    return cudaSuccess;
}

/* Exact-size host blocks (so AddressSanitizer, when the tests are built
 * with it, sees any access outside a buffer); sizes are kept aside for the
 * budget. */
inline std::unordered_map<void *, size_t> gptx_emu_sizes;
static inline cudaError_t gptx_emu_malloc(void **p, size_t bytes) {
    if (!gptx_emu_mem.limit_read) {
        const char *e = getenv("GPTX_CUDA_EMU_MEM_LIMIT");
        gptx_emu_mem.limit = e ? (size_t)strtoull(e, NULL, 10) : 0;
        gptx_emu_mem.limit_read = 1;
    }
    *p = NULL;
    if (gptx_emu_mem.limit && gptx_emu_mem.used + bytes > gptx_emu_mem.limit)
        return cudaErrorMemoryAllocation;
    void *q = NULL;
    if (posix_memalign(&q, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
    /* garbage, like fresh device memory: a kernel that reads before it
     * writes gives NaN-laden results instead of zeros */
    memset(q, 0xFF, bytes);
    gptx_emu_sizes[q] = bytes;
    gptx_emu_mem.used += bytes;
    *p = q;
    return cudaSuccess;
}
static inline void gptx_emu_free(void *p) {
    if (!p) return;
    auto it = gptx_emu_sizes.find(p);
    if (it != gptx_emu_sizes.end()) {
        gptx_emu_mem.used -= it->second;
        gptx_emu_sizes.erase(it);
    }
    free(p);
}
static inline cudaError_t cudaMalloc(void **p, size_t bytes) { return gptx_emu_malloc(p, bytes); }
static inline cudaError_t cudaFree(void *p) {
    gptx_emu_capture_break(); /* it frees anyway, as the device would after its implicit sync */
    gptx_emu_free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = NULL;
    return posix_memalign(p, 256, bytes ? bytes : 1) == 0 ? cudaSuccess : cudaErrorMemoryAllocation;
}
static inline cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}
static inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total) {
    *total = gptx_emu_mem.limit ? gptx_emu_mem.limit : (size_t)1 << 34;
    *free_b = *total - gptx_emu_mem.used;
    return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind,
                                          cudaStream_t s) {
    if (gptx_emu_capture_invalid(s)) return cudaErrorStreamCaptureInvalidated;
    if (s && s->capture)
        s->capture->ops.push_back([=]() {
            if (n) memmove(dst, src, n);
        });
    else if (n)
        memmove(dst, src, n);
    return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s) {
    if (gptx_emu_capture_invalid(s)) return cudaErrorStreamCaptureInvalidated;
    if (s && s->capture)
        s->capture->ops.push_back([=]() {
            if (n) memset(dst, v, n);
        });
    else if (n)
        memset(dst, v, n);
    return cudaSuccess;
}

/* ---- kernels as fibers ---------------------------------------------------- */

namespace gptx_emu {

#define GPTX_EMU_STACK (128 * 1024)

struct barrier {
    unsigned count, arrived, gen;
};
struct fiber {
    ucontext_t ctx;
    int done;
    barrier *wait;
    unsigned wait_gen;
    uint3 tid;
};
struct state {
    ucontext_t sched;
    fiber *fibers;
    char *stacks;
    unsigned n, cap, cur;
    const std::function<void()> *fn;
    barrier block_bar;
    barrier warp_bar[32];
    uint64_t slots[32][32];
    int order; /* 0 unread, 1 forward, 2 reverse, 3 warps, 4 warps-reverse */
    unsigned long long block_serial; /* blocks run so far: per-block state resets when it moves */
    unsigned char *dsmem;            /* the launch's dynamic shared memory */
    size_t dsmem_bytes, dsmem_cap;
};
inline state g;

static inline void entry(void) {
    (*g.fn)();
    g.fibers[g.cur].done = 1; /* uc_link returns to the scheduler */
}

static inline void wait_at(barrier *b) {
    if (++b->arrived == b->count) { /* last one in releases the others */
        b->arrived = 0;
        b->gen++;
        return;
    }
    fiber &f = g.fibers[g.cur];
    f.wait = b;
    f.wait_gen = b->gen;
    swapcontext(&f.ctx, &g.sched);
}

static inline unsigned linear_tid(void) {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

static inline void run_block(void) {
    unsigned n = g.n;
    g.block_serial++;
    /* shared memory starts as garbage on a device: NaN bits for bf16 and fp32 */
    if (g.dsmem_bytes) memset(g.dsmem, 0xFF, g.dsmem_bytes);
    g.block_bar = barrier{n, 0, 0};
    for (unsigned w = 0; w < 32; w++) {
        unsigned lo = w * 32;
        g.warp_bar[w] = barrier{lo < n ? (n - lo < 32 ? n - lo : 32) : 0, 0, 0};
    }
    for (unsigned i = 0; i < n; i++) {
        fiber &f = g.fibers[i];
        f.done = 0;
        f.wait = NULL;
        f.tid.x = i % blockDim.x;
        f.tid.y = (i / blockDim.x) % blockDim.y;
        f.tid.z = i / (blockDim.x * blockDim.y);
        getcontext(&f.ctx);
        f.ctx.uc_stack.ss_sp = g.stacks + (size_t)i * GPTX_EMU_STACK;
        f.ctx.uc_stack.ss_size = GPTX_EMU_STACK;
        f.ctx.uc_link = &g.sched;
        makecontext(&f.ctx, entry, 0);
    }
    for (;;) {
        int left = 0, progressed = 0;
        for (unsigned k = 0; k < n; k++) {
            unsigned i = g.order == 2 || g.order == 4 ? n - 1 - k : k;
            fiber &f = g.fibers[i];
            if (f.done) continue;
            left = 1;
            if (f.wait && f.wait->gen == f.wait_gen) continue;
            f.wait = NULL;
            g.cur = i;
            threadIdx = f.tid;
            swapcontext(&g.sched, &f.ctx);
            progressed = 1;
            if (g.order >= 3) break; /* greedy: the first runnable thread again */
        }
        if (!left) break;
        if (!progressed) {
            fprintf(stderr,
                    "cuda emu: deadlock in block (%u,%u,%u): threads wait at a barrier or "
                    "shuffle that other threads of the block (or warp) never reach\n",
                    blockIdx.x, blockIdx.y, blockIdx.z);
            abort();
        }
    }
}

static inline void launch(dim3 grid, dim3 block, const std::function<void()> &fn,
                          size_t smem = 0, const void *kernel = NULL);

/* A launch on a stream: run now, or recorded (with its arguments, by
 * value) while the stream captures a graph. smem: bytes of dynamic shared
 * memory for `kernel` (its cudaFuncAttributeMaxDynamicSharedMemorySize
 * must allow more than 48 KiB, as on a device). */
static inline void launch_on(cudaStream_t s, dim3 grid, dim3 block, std::function<void()> fn,
                             size_t smem = 0, const void *kernel = NULL) {
    if (s && s->capture && s->capture->breaks != gptx_emu_capture_breaks) {
        gptx_emu_last_error = cudaErrorStreamCaptureInvalidated; /* as a device reports it */
        return;
    }
    if (s && s->capture)
        s->capture->ops.push_back(
            [grid, block, fn, smem, kernel]() { launch(grid, block, fn, smem, kernel); });
    else
        launch(grid, block, fn, smem, kernel);
}

/* cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) */
inline std::unordered_map<const void *, size_t> max_dynamic_smem;

static inline void set_dynamic_smem(size_t smem, const void *kernel) {
    size_t allowed = 48 * 1024;
    auto it = max_dynamic_smem.find(kernel);
    if (it != max_dynamic_smem.end()) allowed = it->second;
    if (smem > allowed) {
        fprintf(stderr, "cuda emu: launch with %zu bytes of dynamic shared memory; the kernel "
                        "allows %zu (cudaFuncSetAttribute)\n", smem, allowed);
        abort();
    }
    if (smem > g.dsmem_cap) {
        free(g.dsmem);
        g.dsmem = NULL;
        if (posix_memalign((void **)&g.dsmem, 128, smem) != 0) abort();
        g.dsmem_cap = smem;
    }
    g.dsmem_bytes = smem;
}

static inline void launch(dim3 grid, dim3 block, const std::function<void()> &fn, size_t smem,
                          const void *kernel) {
    set_dynamic_smem(smem, kernel);
    if (!g.order) {
        const char *o = getenv("GPTX_CUDA_EMU_ORDER");
        g.order = !o                             ? 1
                  : strcmp(o, "reverse") == 0       ? 2
                  : strcmp(o, "warps") == 0         ? 3
                  : strcmp(o, "warps-reverse") == 0 ? 4
                                                    : 1;
    }
    unsigned n = block.x * block.y * block.z;
    if (n == 0 || n > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
        grid.z > 65535) {
        fprintf(stderr, "cuda emu: invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)\n",
                grid.x, grid.y, grid.z, block.x, block.y, block.z);
        abort();
    }
    if (n > g.cap) {
        free(g.fibers);
        free(g.stacks);
        g.fibers = (fiber *)calloc(n, sizeof(fiber));
        g.stacks = (char *)malloc((size_t)n * GPTX_EMU_STACK);
        if (!g.fibers || !g.stacks) abort();
        g.cap = n;
    }
    g.n = n;
    g.fn = &fn;
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx.x = x;
                blockIdx.y = y;
                blockIdx.z = z;
                run_block();
            }
}

template <typename T> static inline T exchange(T v, unsigned src_lane) {
    static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a large type");
    unsigned t = linear_tid(), w = t / 32, lane = t % 32;
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    g.slots[w][lane] = bits;
    wait_at(&g.warp_bar[w]);
    if (src_lane < g.warp_bar[w].count) memcpy(&v, &g.slots[w][src_lane], sizeof v);
    wait_at(&g.warp_bar[w]);
    return v;
}

} // namespace gptx_emu

static inline void __syncthreads(void) { gptx_emu::wait_at(&gptx_emu::g.block_bar); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    unsigned t = gptx_emu::linear_tid();
    gptx_emu::wait_at(&gptx_emu::g.warp_bar[t / 32]);
}
static inline void gptx_emu_check_mask(unsigned mask) {
    if (mask != 0xffffffffu) {
        fprintf(stderr, "cuda emu: only full-warp shuffles are modelled\n");
        abort();
    }
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    gptx_emu_check_mask(mask);
    unsigned lane = gptx_emu::linear_tid() % 32;
    unsigned src = (lane ^ (unsigned)lane_mask);
    if (src / (unsigned)width != lane / (unsigned)width) src = lane;
    return gptx_emu::exchange(v, src);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    gptx_emu_check_mask(mask);
    unsigned lane = gptx_emu::linear_tid() % 32;
    unsigned src = lane + delta;
    if (src / (unsigned)width != lane / (unsigned)width) src = lane;
    return gptx_emu::exchange(v, src);
}
template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
    gptx_emu_check_mask(mask);
    unsigned lane = gptx_emu::linear_tid() % 32;
    unsigned src =
        (lane / (unsigned)width) * (unsigned)width + (unsigned)src_lane % (unsigned)width;
    return gptx_emu::exchange(v, src);
}

/* ---- cuBLASLt ------------------------------------------------------------- */

typedef enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum cublasComputeType_t {
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77
} cublasComputeType_t;
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
    CUBLASLT_EPILOGUE_DGELU = 192
} cublasLtEpilogue_t;
typedef enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;
typedef enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

struct gptx_emu_lt_handle {
    int unused;
};
struct gptx_emu_lt_desc {
    cublasComputeType_t compute;
    int transa, transb, epilogue;
    const void *bias;
    int bias_type; /* -1: the type of D (the documented default) */
    void *aux;     /* GELU input: written by GELU_AUX(_BIAS), read by DGELU */
    int64_t aux_ld;
};
struct gptx_emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
};
/* Element i of a matrix of the given type, as fp32. */
static inline float gptx_emu_lt_get(const void *p, int type, size_t i) {
    if (type == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}
static inline void gptx_emu_lt_put(void *p, int type, size_t i, float v) {
    if (type == CUDA_R_16BF)
        ((__nv_bfloat16 *)p)[i] = __float2bfloat16(v);
    else
        ((float *)p)[i] = v;
}
struct gptx_emu_lt_pref {
    size_t workspace;
};
typedef gptx_emu_lt_handle *cublasLtHandle_t;
typedef gptx_emu_lt_desc *cublasLtMatmulDesc_t;
typedef gptx_emu_lt_layout *cublasLtMatrixLayout_t;
typedef gptx_emu_lt_pref *cublasLtMatmulPreference_t;
typedef struct cublasLtMatmulAlgo_t {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

/* what the emulation's one algorithm reports of itself */
typedef enum cublasLtMatmulAlgoConfigAttributes_t {
    CUBLASLT_ALGO_CONFIG_ID = 0,
    CUBLASLT_ALGO_CONFIG_TILE_ID = 1,
    CUBLASLT_ALGO_CONFIG_SPLITK_NUM = 2,
    CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME = 3,
    CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING = 4,
    CUBLASLT_ALGO_CONFIG_STAGES_ID = 6
} cublasLtMatmulAlgoConfigAttributes_t;
static inline cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const cublasLtMatmulAlgo_t *,
                                                                  cublasLtMatmulAlgoConfigAttributes_t a,
                                                                  void *buf, size_t bytes,
                                                                  size_t *written) {
    if (bytes != 4) return CUBLAS_STATUS_INVALID_VALUE;
    int32_t v = a == CUBLASLT_ALGO_CONFIG_SPLITK_NUM ? 1 : 0;
    memcpy(buf, &v, 4);
    *written = 4;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    *h = new gptx_emu_lt_handle();
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                                      cublasComputeType_t c, cudaDataType_t) {
    *d = new gptx_emu_lt_desc{c, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, -1,
                              NULL, 0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                                            cublasLtMatmulDescAttributes_t a,
                                                            const void *buf, size_t size) {
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        d->transa = *(const int32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        d->transb = *(const int32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
        if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        d->epilogue = (int)*(const uint32_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (size != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        d->bias = *(const void *const *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
        if (size != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        d->aux = *(void *const *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
        if (size != sizeof(int64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        d->aux_ld = *(const int64_t *)buf;
        break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        d->bias_type = *(const int32_t *)buf;
        break;
    }
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t t,
                                                        uint64_t rows, uint64_t cols, int64_t ld) {
    if (ld < (int64_t)rows) return CUBLAS_STATUS_INVALID_VALUE;
    if (t != CUDA_R_32F && t != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;
    *l = new gptx_emu_lt_layout{t, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new gptx_emu_lt_pref{0};
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}
static inline cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                     cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                     size_t size) {
    if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (size != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        p->workspace = (size_t) * (const uint64_t *)buf;
    } else if (size != sizeof(uint32_t)) {
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    return CUBLAS_STATUS_SUCCESS;
}
/* GPTX_CUDA_EMU_NO_EPILOGUE=1: no algorithm with any epilogue, as cuBLASLt
 * may answer for some shapes (exercises the backend's fallbacks). The GELU
 * epilogues also need what the header documents: the aux leading dimension
 * divisible by 8 and at least D's rows (checked by the heuristic against
 * D's layout), and a 16-byte aligned aux pointer (an assumption: the
 * documentation says only that the heuristic depends on its alignment). */
static inline cublasStatus_t
cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t,
                               cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                               cublasLtMatrixLayout_t ldl, cublasLtMatmulPreference_t, int requested,
                               cublasLtMatmulHeuristicResult_t *results, int *returned) {
    if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
    *returned = 0;
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && getenv("GPTX_CUDA_EMU_NO_EPILOGUE"))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX || d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
        d->epilogue == CUBLASLT_EPILOGUE_DGELU) {
        if (!d->aux || d->aux_ld % 8 != 0 || d->aux_ld < (int64_t)ldl->rows ||
            ((uintptr_t)d->aux % 16) != 0)
            return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    memset(&results[0], 0, sizeof results[0]);
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

/* Rounds to the compute type's input precision: bf16 keeps 8 significand
 * bits, tf32 11 (round to nearest even), like the tensor-core paths. */
static inline float gptx_emu_round_input(float x, cublasComputeType_t c) {
    int drop = c == CUBLAS_COMPUTE_32F_FAST_16BF ? 16 : c == CUBLAS_COMPUTE_32F_FAST_TF32 ? 13 : 0;
    if (!drop || !isfinite(x)) return x;
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t half = 1u << (drop - 1), lsb = (u >> drop) & 1u;
    u = (u + half - 1 + lsb) & ~((1u << drop) - 1);
    memcpy(&x, &u, 4);
    return x;
}

static inline cublasStatus_t gptx_emu_lt_matmul(cublasLtMatmulDesc_t d, const void *alpha,
                                                const void *A, cublasLtMatrixLayout_t la,
                                                const void *B, cublasLtMatrixLayout_t lb,
                                                const void *beta, const void *C,
                                                cublasLtMatrixLayout_t lc, void *D,
                                                cublasLtMatrixLayout_t ld);

/* Captured: the descriptors and the (host) scalars are copied, as the
 * library bakes them into the graph's nodes. */
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d,
                                            const void *alpha, const void *A,
                                            cublasLtMatrixLayout_t la, const void *B,
                                            cublasLtMatrixLayout_t lb, const void *beta,
                                            const void *C, cublasLtMatrixLayout_t lc, void *D,
                                            cublasLtMatrixLayout_t ld, const cublasLtMatmulAlgo_t *,
                                            void *, size_t, cudaStream_t s) {
    if (!s || !s->capture) return gptx_emu_lt_matmul(d, alpha, A, la, B, lb, beta, C, lc, D, ld);
    if (gptx_emu_capture_invalid(s)) return CUBLAS_STATUS_EXECUTION_FAILED;
    gptx_emu_lt_desc dc = *d;
    gptx_emu_lt_layout lac = *la, lbc = *lb, lcc = *lc, ldc = *ld;
    float al = *(const float *)alpha, bt = *(const float *)beta;
    s->capture->ops.push_back([=]() mutable {
        gptx_emu_lt_matmul(&dc, &al, A, &lac, B, &lbc, &bt, C, &lcc, D, &ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t gptx_emu_lt_matmul(cublasLtMatmulDesc_t d, const void *alpha,
                                                const void *A, cublasLtMatrixLayout_t la,
                                                const void *B, cublasLtMatrixLayout_t lb,
                                                const void *beta, const void *C,
                                                cublasLtMatrixLayout_t lc, void *D,
                                                cublasLtMatrixLayout_t ld) {
    /* op(A) is m x k, op(B) is k x n, C and D are m x n */
    uint64_t m = d->transa == CUBLAS_OP_N ? la->rows : la->cols;
    uint64_t k = d->transa == CUBLAS_OP_N ? la->cols : la->rows;
    uint64_t kb = d->transb == CUBLAS_OP_N ? lb->rows : lb->cols;
    uint64_t n = d->transb == CUBLAS_OP_N ? lb->cols : lb->rows;
    if (kb != k || ld->rows != m || ld->cols != n || lc->rows != m || lc->cols != n ||
        lc->ld != ld->ld)
        return CUBLAS_STATUS_INVALID_VALUE;
    int has_bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS ||
                   d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu_fwd = d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                   d->epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    int gelu_bwd = d->epilogue == CUBLASLT_EPILOGUE_DGELU;
    if (has_bias && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    if ((gelu_fwd || gelu_bwd) && (!d->aux || d->aux_ld < (int64_t)m))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* the type combinations the backend uses and cuBLASLt documents for
     * CUBLAS_COMPUTE_32F: A and B of one type; C and D of one type, fp32 or
     * that of A/B; bf16 inputs only with the plain 32F compute type */
    if (la->type != lb->type || lc->type != ld->type ||
        (ld->type != CUDA_R_32F && ld->type != la->type) ||
        (la->type == CUDA_R_16BF && d->compute != CUBLAS_COMPUTE_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int bias_type = d->bias_type < 0 ? (int)ld->type : d->bias_type;
    float al = *(const float *)alpha, be = *(const float *)beta;
    float *col = (float *)malloc(m * sizeof(float));
    if (!col) return CUBLAS_STATUS_NOT_SUPPORTED;
    for (uint64_t j = 0; j < n; j++) {
        for (uint64_t i = 0; i < m; i++) {
            float acc = 0.0f; /* fp32 accumulation, like the library */
            for (uint64_t p = 0; p < k; p++) {
                float x = gptx_emu_lt_get(A, la->type, d->transa == CUBLAS_OP_N ? i + p * la->ld
                                                                                  : p + i * la->ld);
                float y = gptx_emu_lt_get(B, lb->type, d->transb == CUBLAS_OP_N ? p + j * lb->ld
                                                                                  : j + p * lb->ld);
                acc += gptx_emu_round_input(x, d->compute) * gptx_emu_round_input(y, d->compute);
            }
            float v = al * acc;
            if (be != 0.0f) v += be * gptx_emu_lt_get(C, lc->type, i + j * lc->ld);
            if (has_bias) v += gptx_emu_lt_get(d->bias, bias_type, i);
            /* GELU epilogues, tanh approximation (the aux matrix, the GELU
             * input, has D's type; the GELU is applied to the fp32 value) */
            if (gelu_fwd) {
                gptx_emu_lt_put(d->aux, ld->type, i + j * d->aux_ld, v);
                v = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
            } else if (gelu_bwd) {
                float x = gptx_emu_lt_get(d->aux, ld->type, i + j * d->aux_ld);
                float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
                float th = tanhf(u);
                float du = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
                v *= 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
            }
            col[i] = v;
        }
        /* C may alias D: write the column after reading all of it; a bf16
         * D is rounded once, from the fp32 result */
        for (uint64_t i = 0; i < m; i++) gptx_emu_lt_put(D, ld->type, i + j * ld->ld, col[i]);
    }
    free(col);
    return CUBLAS_STATUS_SUCCESS;
}

/* What the backend's headers take from here (backends/cuda/cuda_internal.h):
 * every backend function static, launches as emulated grids (arguments by
 * value: a capturing stream keeps the launch for replay), few blocks per
 * grid-stride loop so every thread loops, and the table under its own name
 * so this library links next to the real backend. */
#ifndef GPTX_CUDA_FN
#define GPTX_CUDA_FN static __attribute__((unused))
#endif
#define GPTX_LAUNCH(kernel, grid, block, stream, ...)                                              \
    gptx_emu::launch_on((stream), (grid), (block), [=]() { kernel(__VA_ARGS__); })
#define GPTX_LAUNCH_SMEM(kernel, grid, block, smem, stream, ...)                                   \
    gptx_emu::launch_on((stream), (grid), (block), [=]() { kernel(__VA_ARGS__); }, (smem),        \
                        reinterpret_cast<const void *>(kernel))
/* the launch's dynamic shared memory (extern __shared__ on a device) */
#define GPTX_DYNAMIC_SMEM(name) unsigned char *name = gptx_emu::g.dsmem
#define GPTX_CUDA_MAX_BLOCKS ((size_t)16)
#define GPTX_CUDA_SCRATCH_MIN ((size_t)4096)
#define gptx_cuda_backend_ops gptx_cuda_emu_backend_ops

/* cudaFuncSetAttribute for the one attribute the backend sets */
typedef enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 } cudaFuncAttribute;
template <typename K>
static inline cudaError_t cudaFuncSetAttribute(K *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > 227 * 1024)
        return cudaErrorInvalidValue; /* sm_90: at most 227 KiB per block */
    gptx_emu::max_dynamic_smem[reinterpret_cast<const void *>(kernel)] = (size_t)value;
    return cudaSuccess;
}

/* mma.sync, ldmatrix, cp.async */
#include "cuda_emu_mma.h"

#endif
