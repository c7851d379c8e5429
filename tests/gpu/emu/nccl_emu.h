/* The NCCL subset of backends/cuda/cuda_nccl.c on the CPU emulation, for a
 * world of one rank (the only world one process can make): the engine's
 * logic then runs in CI (test_nccl_single_emu) instead of only on a GPU.
 *
 * With one rank NCCL 2.28 runs no ring or tree: ncclLaunchOneRank
 * (src/enqueue.cc) copies sendbuff to recvbuff when they differ, and for a
 * pre-multiplied sum launches oneRankReduce (src/device/onerank.cu) on
 * min(32, ceil(bytes / 16 KiB)) blocks, block b scaling elements
 * [b * s, (b + 1) * s) with s = alignUp(count / blocks, 16 / elem_size),
 * clipped to count. Elements from blocks * s on are left as they were when
 * count / blocks is already a multiple of 16 / elem_size (3 Mi + 5 floats:
 * 32 blocks of 98 304, the last 5 untouched), which is what the one-rank
 * test saw on an H200. This file does the same, so the test fails here too
 * when the engine leaves a one-rank reduction to NCCL (issue 33).
 *
 * Calls complete at once (the emulated streams are synchronous), so
 * ncclInProgress is never returned. A world of more than one rank is
 * refused at ncclCommInitRankConfig. */
#ifndef GPTX_NCCL_EMU_H
#define GPTX_NCCL_EMU_H

#include <stdint.h>
#include <string.h>

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7
} ncclResult_t;
typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8
} ncclDataType_t;
/* values past ncclNumOps are operators made by ncclRedOpCreatePreMulSum */
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclNumOps = 5 } ncclRedOp_t;
typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct {
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER {1}

struct gptx_emu_nccl_comm {
    int nranks;
    float premul[8]; /* the scale of each live pre-multiplied operator */
    int live[8];
};
typedef gptx_emu_nccl_comm *ncclComm_t;

static inline const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    default: return "internal error - please report this issue to the NCCL developers";
    }
}
static inline const char *ncclGetLastError(ncclComm_t) { return ""; }

static inline ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "gptx-emu", 8);
    return ncclSuccess;
}
static inline ncclResult_t ncclCommInitRankConfig(ncclComm_t *c, int nranks, ncclUniqueId,
                                                  int rank, ncclConfig_t *) {
    if (nranks != 1 || rank != 0) return ncclInvalidUsage; /* one process: one rank */
    *c = new gptx_emu_nccl_comm();
    (*c)->nranks = 1;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommGetAsyncError(ncclComm_t, ncclResult_t *async) {
    *async = ncclSuccess;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
static inline ncclResult_t ncclCommDestroy(ncclComm_t c) {
    delete c;
    return ncclSuccess;
}
static inline ncclResult_t ncclCommAbort(ncclComm_t c) { return ncclCommDestroy(c); }
static inline ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
static inline ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

static inline ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                    ncclDataType_t type,
                                                    ncclScalarResidence_t where, ncclComm_t c) {
    if (type != ncclFloat32 || where != ncclScalarHostImmediate) return ncclInvalidArgument;
    for (int i = 0; i < 8; i++)
        if (!c->live[i]) {
            c->live[i] = 1;
            memcpy(&c->premul[i], scalar, sizeof(float));
            *op = (ncclRedOp_t)(ncclNumOps + i);
            return ncclSuccess;
        }
    return ncclInternalError;
}
static inline ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
    int i = (int)op - ncclNumOps;
    if (i < 0 || i >= 8 || !c->live[i]) return ncclInvalidArgument;
    c->live[i] = 0;
    return ncclSuccess;
}

static inline size_t gptx_emu_nccl_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
    }
}

/* ncclLaunchOneRank: a copy, or oneRankReduce's partition of a
 * pre-multiplied sum (the file comment); floats only, as the engine uses */
static inline ncclResult_t gptx_emu_nccl_one_rank(const void *src, void *dst, size_t count,
                                                  ncclDataType_t t, ncclRedOp_t op, ncclComm_t c) {
    size_t es = gptx_emu_nccl_size(t);
    int i = (int)op - ncclNumOps;
    if (i < 0) {
        if (src != dst) memmove(dst, src, count * es);
        return ncclSuccess;
    }
    if (i >= 8 || !c->live[i] || t != ncclFloat32) return ncclInvalidArgument;
    size_t blocks = (count * es + (16u << 10) - 1) / (16u << 10);
    if (blocks > 32) blocks = 32;
    size_t pack = 16 / es, per = (count / blocks + pack - 1) / pack * pack;
    const float *s = (const float *)src;
    float *d = (float *)dst;
    for (size_t b = 0; b < blocks; b++) {
        size_t lo = b * per < count ? b * per : count, hi = (b + 1) * per < count ? (b + 1) * per : count;
        for (size_t k = lo; k < hi; k++) d[k] = s[k] * c->premul[i];
    }
    return ncclSuccess;
}

static inline ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                         cudaStream_t) {
    return gptx_emu_nccl_one_rank(send, recv, count, t, op, c);
}
static inline ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t,
                                      ncclRedOp_t op, int root, ncclComm_t c, cudaStream_t s) {
    if (root != 0) return ncclInvalidArgument;
    return ncclAllReduce(send, recv, count, t, op, c, s);
}
static inline ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count,
                                             ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                             cudaStream_t s) {
    return ncclAllReduce(send, recv, count, t, op, c, s);
}
static inline ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, ncclComm_t c, cudaStream_t s) {
    return ncclAllReduce(send, recv, count, t, ncclSum, c, s);
}
static inline ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count,
                                         ncclDataType_t t, int root, ncclComm_t c,
                                         cudaStream_t s) {
    if (root != 0) return ncclInvalidArgument;
    return ncclAllReduce(send, recv, count, t, ncclSum, c, s);
}

#endif
