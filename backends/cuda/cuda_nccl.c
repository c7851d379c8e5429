/* The NCCL engine (CUDA data parallelism): one process per GPU, gradients
 * reduced in place in device memory. The communicator is non-blocking
 * (ncclConfig_t.blocking = 0) so every wait polls ncclCommGetAsyncError and
 * the stream under one deadline; a dead or hung peer becomes
 * GPTX_ERR_BACKEND and destroy() then aborts the communicator instead of
 * waiting for it.
 *
 * ZeRO-1 uses ncclReduceScatter / ncclAllGather (grouped ncclReduce /
 * ncclBroadcast for uneven shards); overlapped buckets run ncclAllReduce on
 * the engine's stream, ordered after the compute stream by cudaEvents.
 * Host values (metrics, barrier, broadcast) go through a pinned staging
 * buffer with asynchronous copies, and the host polls an event under the
 * same deadline: a copy into pageable memory would block the host until the
 * collective ends, so a dead peer would hang it past any timeout.
 *
 * Ran once on one GPU (an H200, one rank: tests/comm/test_nccl_single.c);
 * its one-rank logic runs in CI on the CPU emulation (test_nccl_single_emu,
 * tests/gpu/emu/nccl_emu.h); the multi-rank paths have not run. Valid C and
 * C++: the emulation compiles it into its C++ unit. */
#ifdef GPTX_CUDA_EMU
/* compiled into the emulated backend's C++ unit (tests/gpu/emu), after its
 * CUDA runtime: NCCL for one rank */
#include "nccl_emu.h"
#define GPTX_NCCL_STATIC_ASSERT static_assert
#else
#include <cuda_runtime.h>
#include <nccl.h>
#define GPTX_NCCL_STATIC_ASSERT _Static_assert
#endif
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_nccl.h"
#include "cuda_ops.h"
#include "errors.h"

/* prefix of every message of this engine */
#define ENGINE_WHERE "gptx_comm (nccl)"

GPTX_NCCL_STATIC_ASSERT(sizeof(ncclUniqueId) == COMM_NCCL_ID_BYTES, "ncclUniqueId size changed");

typedef struct nccl_engine {
    comm_engine base;
    const gptx_backend_ops *ops; /* the context's backend: its stream, synchronize */
    gptx_backend *be;
    ncclComm_t comm;
    cudaStream_t stream; /* collectives run here, after the context's work */
    int device;
    double timeout_s;
    void *scratch; /* device copy of host values (metrics, barrier, broadcast) */
    size_t scratch_bytes;
    void *pinned; /* page-locked host copy of those values */
    size_t pinned_bytes;
    cudaEvent_t host_done; /* recorded after the copy back to `pinned` */
} nccl_engine;

static int cuda_error(cudaError_t err, const char *what) {
    return gptx_fail(GPTX_ERR_BACKEND, ENGINE_WHERE, "%s failed: %s (%s)", what,
                     cudaGetErrorName(err), cudaGetErrorString(err));
}

static int nccl_error(nccl_engine *e, ncclResult_t r, const char *what) {
    const char *last = e && e->comm ? ncclGetLastError(e->comm) : ncclGetLastError(NULL);
    return gptx_fail(GPTX_ERR_BACKEND, ENGINE_WHERE, "%s failed: %s%s%s", what,
                     ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t cuda_rc_ = (call);                                                             \
        if (cuda_rc_ != cudaSuccess) return cuda_error(cuda_rc_, what);                            \
    } while (0)

/* Waits until the communicator has no call in flight and, when stream_too,
 * the engine's stream is idle (or, given an event, the event has completed);
 * fails on an asynchronous NCCL error or when the deadline passes. */
typedef struct {
    nccl_engine *e;
    int stream_too;
    cudaEvent_t event;
    const char *what;
} done_poll;

static int test_done(void *arg, int *done) {
    done_poll *p = (done_poll *)arg;
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(p->e->comm, &async);
    if (r != ncclSuccess) return nccl_error(p->e, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) return nccl_error(p->e, async, p->what);
    if (async == ncclSuccess) {
        cudaError_t q = p->event        ? cudaEventQuery(p->event)
                        : p->stream_too ? cudaStreamQuery(p->e->stream)
                                        : cudaSuccess;
        if (q == cudaSuccess) *done = 1;
        else if (q != cudaErrorNotReady) return cuda_error(q, p->what);
    }
    return GPTX_OK;
}

static int wait_done(nccl_engine *e, int stream_too, const char *what) {
    done_poll p = {e, stream_too, NULL, what};
    return gptx_comm_poll_until_done(&e->base, test_done, &p, e->timeout_s, ENGINE_WHERE, what);
}

static int wait_event(nccl_engine *e, cudaEvent_t event, const char *what) {
    done_poll p = {e, 1, event, what};
    return gptx_comm_poll_until_done(&e->base, test_done, &p, e->timeout_s, ENGINE_WHERE, what);
}

/* An NCCL call on the non-blocking communicator: ncclInProgress means
 * "being enqueued", which must finish before the next NCCL call. */
static int nccl_call(nccl_engine *e, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return GPTX_OK;
    if (r == ncclInProgress) return wait_done(e, 0, what);
    return nccl_error(e, r, what);
}

static void nccl_destroy(comm_engine *base, int failed) {
    nccl_engine *e = (nccl_engine *)base;
    cudaSetDevice(e->device);
    if (e->comm) {
        ncclResult_t r = failed ? ncclInternalError : ncclCommFinalize(e->comm);
        int clean = (r == ncclSuccess || r == ncclInProgress) &&
                    wait_done(e, 0, "ncclCommFinalize") == GPTX_OK;
        if (clean)
            ncclCommDestroy(e->comm);
        else
            ncclCommAbort(e->comm); /* never wait for peers that may be gone */
    }
    if (e->stream) cudaStreamDestroy(e->stream);
    if (e->host_done) cudaEventDestroy(e->host_done);
    if (e->scratch) cudaFree(e->scratch);
    if (e->pinned) cudaFreeHost(e->pinned);
    free(e);
}

/* *p holds at least `bytes` (alloc and release: device or pinned memory). */
static int grow(void **p, size_t *have, size_t bytes, cudaError_t (*alloc)(void **, size_t),
                cudaError_t (*release)(void *), const char *what) {
    if (*have >= bytes) return GPTX_OK;
    if (*p) release(*p);
    *p = NULL;
    *have = 0;
    CUDA_TRY(alloc(p, bytes), what);
    *have = bytes;
    return GPTX_OK;
}

/* The device scratch and its pinned host twin, at least `bytes` each (the
 * previous host collective has completed: nothing still uses them). */
static int ensure_scratch(nccl_engine *e, size_t bytes) {
    GPTX_TRY(grow(&e->scratch, &e->scratch_bytes, bytes, cudaMalloc, cudaFree,
                  "cudaMalloc (communicator scratch)"));
    return grow(&e->pinned, &e->pinned_bytes, bytes, cudaMallocHost, cudaFreeHost,
                "cudaMallocHost (communicator staging)");
}

static ncclRedOp_t nccl_op(gptx_comm_op op) {
    return op == GPTX_COMM_MAX ? ncclMax : op == GPTX_COMM_MIN ? ncclMin : ncclSum;
}

/* One collective in place over `bytes` of host data: a broadcast from
 * root (root >= 0) or an allreduce of count values of type with op. Staged
 * through pinned memory so that both copies are asynchronous; the host then
 * polls the event recorded after the copy back, under the deadline. */
typedef struct {
    int root; /* >= 0: broadcast */
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
    const char *what;
} host_collective;

static int run_host_collective(nccl_engine *e, void *data, size_t bytes, const host_collective *c) {
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    GPTX_TRY(ensure_scratch(e, bytes));
    memcpy(e->pinned, data, bytes);
    CUDA_TRY(cudaMemcpyAsync(e->scratch, e->pinned, bytes, cudaMemcpyHostToDevice, e->stream),
             "cudaMemcpyAsync (to device)");
    ncclResult_t r =
        c->root >= 0
            ? ncclBroadcast(e->scratch, e->scratch, bytes, ncclUint8, c->root, e->comm, e->stream)
            : ncclAllReduce(e->scratch, e->scratch, c->count, c->type, c->op, e->comm, e->stream);
    GPTX_TRY(nccl_call(e, r, c->root >= 0 ? "ncclBroadcast" : "ncclAllReduce"));
    CUDA_TRY(cudaMemcpyAsync(e->pinned, e->scratch, bytes, cudaMemcpyDeviceToHost, e->stream),
             "cudaMemcpyAsync (to host)");
    CUDA_TRY(cudaEventRecord(e->host_done, e->stream), "cudaEventRecord (host copy)");
    GPTX_TRY(wait_event(e, e->host_done, c->what));
    memcpy(data, e->pinned, bytes);
    return GPTX_OK;
}

static int nccl_allreduce_host(comm_engine *base, void *values, size_t count, comm_dtype type,
                               gptx_comm_op op) {
    host_collective c = {-1, count, type == COMM_F64 ? ncclFloat64 : ncclInt64, nccl_op(op),
                         "allreduce"};
    return run_host_collective((nccl_engine *)base, values, count * 8, &c);
}

static int nccl_barrier(comm_engine *base) {
    int64_t one = 1; /* NCCL has no barrier: a one-value allreduce is one */
    return nccl_allreduce_host(base, &one, 1, COMM_I64, GPTX_COMM_SUM);
}

static int nccl_broadcast(comm_engine *base, void *data, size_t bytes, int root) {
    host_collective c = {root, bytes, ncclUint8, ncclSum, "broadcast"};
    return run_host_collective((nccl_engine *)base, data, bytes, &c);
}

/* One rank: the sum over the world is the rank's own buffer, so a reduction
 * with NCCL's pre-multiplied sum is buf *= scale. Done by our kernel rather
 * than by NCCL, whose one-rank path (ncclLaunchOneRank in 2.28) splits the
 * buffer over min(32, bytes / 16 KiB) blocks of alignUp(count / blocks, 4)
 * floats and leaves the remainder unscaled when count / blocks is already a
 * multiple of 4: 3 Mi + 5 floats came back with their last 5 values
 * unchanged on an H200 (issue 33). Queued on the engine's stream after the
 * context's work; `done`, when given, is recorded after it. */
static int one_rank_scale(nccl_engine *e, float *buf, size_t count, float scale,
                          cudaEvent_t done) {
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    if (scale != 1.0f) GPTX_TRY(gptx_cuda_scale_f32_on(e->stream, buf, count, scale));
    if (done) CUDA_TRY(cudaEventRecord(done, e->stream), "cudaEventRecord (bucket)");
    return GPTX_OK;
}

/* buf is the model's device gradient buffer. The context's queued work is
 * finished first (the backend table has no stream or event to order
 * against), then one in-place allreduce with NCCL's pre-multiplied sum does
 * the token weighting without a kernel of ours: sum_r scale_r * buf_r. NCCL
 * finishes each element on one rank and forwards it (ring and tree), so the
 * ranks agree bitwise. */
static int nccl_allreduce_grads(comm_engine *base, float *buf, size_t count, float scale,
                                int uniform) {
    nccl_engine *e = (nccl_engine *)base;
    (void)uniform;
    GPTX_TRY(e->ops->synchronize(e->be));
    if (e->base.world_size == 1) {
        GPTX_TRY(one_rank_scale(e, buf, count, scale, NULL));
        return wait_done(e, 1, "gradient allreduce (one rank)");
    }
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    ncclRedOp_t op = ncclSum;
    int custom = scale != 1.0f;
    if (custom)
        GPTX_TRY(nccl_call(
            e, ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat32, ncclScalarHostImmediate, e->comm),
            "ncclRedOpCreatePreMulSum"));
    int rc = nccl_call(e, ncclAllReduce(buf, buf, count, ncclFloat32, op, e->comm, e->stream),
                       "ncclAllReduce (gradients)");
    if (rc == GPTX_OK) rc = wait_done(e, 1, "gradient allreduce");
    if (custom && rc == GPTX_OK)
        rc = nccl_call(e, ncclRedOpDestroy(op, e->comm), "ncclRedOpDestroy");
    return rc;
}

/* A pre-multiplied sum for this rank's token weight (plain sum for 1). */
static int weight_op(nccl_engine *e, float scale, ncclRedOp_t *op) {
    *op = ncclSum;
    if (scale == 1.0f) return GPTX_OK;
    return nccl_call(
        e, ncclRedOpCreatePreMulSum(op, &scale, ncclFloat32, ncclScalarHostImmediate, e->comm),
        "ncclRedOpCreatePreMulSum");
}

static int drop_op(nccl_engine *e, ncclRedOp_t op) {
    if (op == ncclSum) return GPTX_OK;
    return nccl_call(e, ncclRedOpDestroy(op, e->comm), "ncclRedOpDestroy");
}

/* ZeRO-1 reduce-scatter in place over the model's device gradients: equal
 * shards use ncclReduceScatter (rank r's output at its own offset); uneven
 * ones (count % W != 0) a group of W ncclReduce calls, one per shard owner,
 * since NCCL has no reduce-scatter with counts. */
static int nccl_reduce_scatter_grads(comm_engine *base, float *buf, size_t count, float scale,
                                     int uniform) {
    nccl_engine *e = (nccl_engine *)base;
    (void)uniform;
    const int W = e->base.world_size;
    GPTX_TRY(e->ops->synchronize(e->be));
    if (W == 1) { /* the one shard is the whole buffer */
        GPTX_TRY(one_rank_scale(e, buf, count, scale, NULL));
        return wait_done(e, 1, "gradient reduce-scatter (one rank)");
    }
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    ncclRedOp_t op;
    GPTX_TRY(weight_op(e, scale, &op));
    int rc;
    if (count % (size_t)W == 0) {
        size_t chunk = count / (size_t)W;
        rc = nccl_call(e,
                       ncclReduceScatter(buf, buf + (size_t)e->base.rank * chunk, chunk,
                                         ncclFloat32, op, e->comm, e->stream),
                       "ncclReduceScatter (gradients)");
    } else {
        rc = nccl_call(e, ncclGroupStart(), "ncclGroupStart");
        for (int i = 0; i < W && rc == GPTX_OK; i++) {
            size_t lo, hi;
            comm_shard(count, W, i, &lo, &hi);
            rc = nccl_call(e,
                           ncclReduce(buf + lo, buf + lo, hi - lo, ncclFloat32, op, i, e->comm,
                                      e->stream),
                           "ncclReduce (gradient shard)");
        }
        if (rc == GPTX_OK) rc = nccl_call(e, ncclGroupEnd(), "ncclGroupEnd");
    }
    if (rc == GPTX_OK) rc = wait_done(e, 1, "gradient reduce-scatter");
    if (rc == GPTX_OK) rc = drop_op(e, op);
    return rc;
}

/* In place over a device buffer (parameters after the sharded update):
 * ncclAllGather for equal shards, else one ncclBroadcast per shard owner. */
static int nccl_allgather(comm_engine *base, float *buf, size_t count) {
    nccl_engine *e = (nccl_engine *)base;
    const int W = e->base.world_size;
    if (W == 1) return GPTX_OK; /* this rank's shard is the whole buffer */
    GPTX_TRY(e->ops->synchronize(e->be));
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    int rc;
    if (count % (size_t)W == 0) {
        size_t chunk = count / (size_t)W;
        rc = nccl_call(e,
                       ncclAllGather(buf + (size_t)e->base.rank * chunk, buf, chunk, ncclFloat32,
                                     e->comm, e->stream),
                       "ncclAllGather");
    } else {
        rc = nccl_call(e, ncclGroupStart(), "ncclGroupStart");
        for (int i = 0; i < W && rc == GPTX_OK; i++) {
            size_t lo, hi;
            comm_shard(count, W, i, &lo, &hi);
            rc = nccl_call(
                e, ncclBroadcast(buf + lo, buf + lo, hi - lo, ncclFloat32, i, e->comm, e->stream),
                "ncclBroadcast (shard)");
        }
        if (rc == GPTX_OK) rc = nccl_call(e, ncclGroupEnd(), "ncclGroupEnd");
    }
    if (rc == GPTX_OK) rc = wait_done(e, 1, "all-gather");
    return rc;
}

/* One bucket on the engine's stream, ordered after the compute stream's
 * work so far by an event (no host wait); `done` is recorded after it. */
typedef struct nccl_bucket {
    cudaEvent_t ready, done;
} nccl_bucket;

static void nccl_bucket_release(comm_engine *base, void *handle) {
    (void)base;
    nccl_bucket *b = (nccl_bucket *)handle;
    if (!b) return;
    if (b->ready) cudaEventDestroy(b->ready);
    if (b->done) cudaEventDestroy(b->done);
    free(b);
}

static int bucket_enqueue(nccl_engine *e, nccl_bucket *b, float *buf, size_t count, float scale) {
    CUDA_TRY(cudaSetDevice(e->device), "cudaSetDevice");
    CUDA_TRY(cudaEventCreateWithFlags(&b->ready, cudaEventDisableTiming), "cudaEventCreate");
    CUDA_TRY(cudaEventCreateWithFlags(&b->done, cudaEventDisableTiming), "cudaEventCreate");
    void *compute = e->ops->compute_stream ? e->ops->compute_stream(e->be) : NULL;
    if (compute) {
        CUDA_TRY(cudaEventRecord(b->ready, (cudaStream_t)compute), "cudaEventRecord (compute)");
        CUDA_TRY(cudaStreamWaitEvent(e->stream, b->ready, 0), "cudaStreamWaitEvent");
    } else {
        GPTX_TRY(e->ops->synchronize(e->be));
    }
    if (e->base.world_size == 1) return one_rank_scale(e, buf, count, scale, b->done);
    ncclRedOp_t op;
    GPTX_TRY(weight_op(e, scale, &op));
    int rc = nccl_call(e, ncclAllReduce(buf, buf, count, ncclFloat32, op, e->comm, e->stream),
                       "ncclAllReduce (bucket)");
    /* an operator may be destroyed once the last call using it returned */
    if (rc == GPTX_OK) rc = drop_op(e, op);
    if (rc != GPTX_OK) return rc;
    CUDA_TRY(cudaEventRecord(b->done, e->stream), "cudaEventRecord (bucket)");
    return GPTX_OK;
}

static int nccl_bucket_start(comm_engine *base, float *buf, size_t count, float scale,
                             int uniform, void **handle) {
    nccl_engine *e = (nccl_engine *)base;
    (void)uniform;
    *handle = NULL;
    nccl_bucket *b = (nccl_bucket *)calloc(1, sizeof *b);
    if (!b) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = bucket_enqueue(e, b, buf, count, scale);
    if (rc != GPTX_OK) {
        nccl_bucket_release(base, b);
        return rc;
    }
    *handle = b;
    return GPTX_OK;
}

static int nccl_bucket_test(comm_engine *base, void *handle, int *done) {
    nccl_engine *e = (nccl_engine *)base;
    nccl_bucket *b = (nccl_bucket *)handle;
    *done = 0;
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(e->comm, &async);
    if (r != ncclSuccess) return nccl_error(e, r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress)
        return nccl_error(e, async, "gradient bucket");
    cudaError_t q = cudaEventQuery(b->done);
    if (q == cudaErrorNotReady) return GPTX_OK;
    if (q != cudaSuccess) return cuda_error(q, "cudaEventQuery (bucket)");
    nccl_bucket_release(base, b);
    *done = 1;
    return GPTX_OK;
}

static const comm_engine_ops nccl_ops = {
    .name = "nccl",
    .destroy = nccl_destroy,
    .barrier = nccl_barrier,
    .allreduce_host = nccl_allreduce_host,
    .broadcast_host = nccl_broadcast,
    .allreduce_grads = nccl_allreduce_grads,
    .reduce_scatter_grads = nccl_reduce_scatter_grads,
    .allgather = nccl_allgather,
    .bucket_start = nccl_bucket_start,
    .bucket_test = nccl_bucket_test,
    .bucket_release = nccl_bucket_release,
    .probe_start = NULL, /* NCCL has no side channel to probe peers on */
    .probe_report = NULL,
};

int gptx_comm_nccl_check_context(const comm_setup *s) {
    if (!(s->caps & GPTX_BACKEND_CAP_CUDA_DEVICE))
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "the NCCL engine needs a CUDA context; this context's backend is '%s' "
                         "(CPU data parallelism uses the MPI engine, started by mpirun)",
                         s->ops->name);
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "the NCCL engine found no usable CUDA device (%s)",
                         err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    if (s->device >= n)
        return GPTX_FAIL(GPTX_ERR_INVALID, "the context's device is %d but only %d are visible",
                         s->device, n);
    return GPTX_OK;
}

int gptx_comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]) {
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) return nccl_error(NULL, r, "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    return GPTX_OK;
}

int gptx_comm_nccl_create(comm_engine **out, const comm_setup *s,
                          const unsigned char id[COMM_NCCL_ID_BYTES]) {
    GPTX_TRY(gptx_comm_nccl_check_context(s));
    nccl_engine *e = (nccl_engine *)calloc(1, sizeof *e);
    if (!e) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    e->base.ops = &nccl_ops;
    e->base.rank = s->launch.rank;
    e->base.world_size = s->launch.world_size;
    e->base.local_rank = s->launch.local_rank;
    e->base.local_world_size = s->launch.local_world_size;
    e->base.device_buffers = 1;
    e->ops = s->ops;
    e->be = s->be;
    e->device = s->device;
    e->timeout_s = s->timeout_s;
    int rc = GPTX_OK;
    cudaError_t ce = cudaSetDevice(e->device);
    if (ce == cudaSuccess) ce = cudaStreamCreateWithFlags(&e->stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&e->host_done, cudaEventDisableTiming);
    if (ce != cudaSuccess) rc = cuda_error(ce, "cudaSetDevice/cudaStreamCreate/cudaEventCreate");
    if (rc == GPTX_OK) {
        ncclUniqueId u;
        memcpy(&u, id, sizeof u);
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0; /* so start-up and every collective can time out */
        ncclResult_t r =
            ncclCommInitRankConfig(&e->comm, e->base.world_size, u, e->base.rank, &cfg);
        if (r != ncclSuccess && r != ncclInProgress) {
            e->comm = NULL;
            rc = nccl_error(NULL, r, "ncclCommInitRankConfig");
        } else {
            rc = wait_done(e, 0, "NCCL start-up (ncclCommInitRankConfig)");
        }
    }
    if (rc != GPTX_OK) {
        nccl_destroy(&e->base, 1);
        return rc;
    }
    *out = &e->base;
    return GPTX_OK;
}
