/* The communicator's engine interface: what an engine (the single engine in
 * lib/comm/comm.c, the MPI engine in backends/mpi, the NCCL engine beside the
 * CUDA backend) implements and is given. Engines include this file alone,
 * never comm_internal.h (the front end's handle), so the NCCL engine also
 * compiles as C++ in the CUDA emulation's unit (tests/gpu/emu). */
#ifndef GPTX_COMM_ENGINE_H
#define GPTX_COMM_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gptx/gptx.h"

typedef enum comm_dtype { COMM_F64, COMM_I64 } comm_dtype;

typedef struct comm_engine_ops comm_engine_ops;

/* Every engine's state starts with this header. */
typedef struct comm_engine {
    const comm_engine_ops *ops;
    int rank, world_size;
    int local_rank, local_world_size;
    /* 1: allreduce_grads takes the context's own buffers (device pointers of
     * a CUDA context); 0: it takes host memory. */
    int device_buffers;
} comm_engine;

/* Every entry returns a gptx_status and sets the message on failure; after a
 * failure the front end stops using the engine and destroys it with
 * failed = 1 (release without talking to the other ranks). */
struct comm_engine_ops {
    const char *name;
    void (*destroy)(comm_engine *e, int failed);
    int (*barrier)(comm_engine *e);
    /* in place over count host values */
    int (*allreduce_host)(comm_engine *e, void *values, size_t count, comm_dtype type,
                          gptx_comm_op op);
    /* bytes of host memory from root to every rank */
    int (*broadcast_host)(comm_engine *e, void *data, size_t bytes, int root);
    /* buf (count floats) becomes sum over ranks of scale_r * buf_r, the same
     * bits on every rank. uniform = 1 promises that every rank passes the same
     * scale (an engine may then scale the sum instead of each term). */
    int (*allreduce_grads)(comm_engine *e, float *buf, size_t count, float scale, int uniform);

    /* ZeRO-1 halves of allreduce_grads over buf (count floats, the full flat
     * vector on every rank), split into shards by comm_shard(): */
    /* rank r's shard of buf becomes sum over ranks of scale_r * buf_r (same
     * bits as allreduce_grads gives there); the rest of buf is left undefined */
    int (*reduce_scatter_grads)(comm_engine *e, float *buf, size_t count, float scale,
                                int uniform);
    /* every rank's shard of buf is copied into buf on every rank */
    int (*allgather)(comm_engine *e, float *buf, size_t count);

    /* Overlapped reduction of one bucket (backward still running): start the
     * same reduction as allreduce_grads, then test until *done (the handle
     * is freed then). Buckets are started in the same order on every rank
     * and several may be in flight. release frees an unfinished handle
     * after a failure, without communicating. */
    int (*bucket_start)(comm_engine *e, float *buf, size_t count, float scale, int uniform,
                        void **handle);
    int (*bucket_test)(comm_engine *e, void *handle, int *done);
    void (*bucket_release)(comm_engine *e, void *handle);

    /* Liveness check (optional, may be NULL): when a wait nears its
     * deadline, probe_start asks every peer for a sign of life on a channel
     * of its own (the engine's tests answer peers' checks while they poll);
     * at the deadline probe_report writes which peers answered into buf,
     * so the timeout message names the unreachable ones. */
    void (*probe_start)(comm_engine *e);
    void (*probe_report)(comm_engine *e, char *buf, size_t n);
};

/* Rank r's shard of a count-element vector: [lo, hi), the first count % W
 * ranks one element longer. Every engine and the sharded optimizer use it. */
static inline void comm_shard(size_t count, int world_size, int rank, size_t *lo, size_t *hi) {
    size_t W = (size_t)world_size, r = (size_t)rank, base = count / W, extra = count % W;
    *lo = r * base + (r < extra ? r : extra);
    *hi = *lo + base + (r < extra);
}

/* What an engine is created from: the launch, the deadline, and what an
 * engine may use of the context's backend (its table and instance, the
 * device, what kind of memory its buffers are: backend.h capabilities);
 * never the context itself, whose layout is the core's business. */
typedef struct comm_setup {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    int device;
    unsigned caps; /* GPTX_BACKEND_CAP_* of the context's backend */
    gptx_comm_launch_info launch;
    double timeout_s; /* 0 = no limit */
} comm_setup;

/* The engines in modules (lib/core/module.h): backends/mpi/mpi_engine.c and the
 * NCCL engine beside the CUDA backend (backends/cuda/cuda_nccl.c). */
#define COMM_NCCL_ID_BYTES 128

/* Polls test(arg, &done) until done: the first 256 polls spin, then the
 * waiter sleeps with a growing pause of at most 100 us so it leaves the core
 * to ranks still computing. A failing test is returned as it is; after
 * timeout_s (0 = no limit) it fails with GPTX_ERR_BACKEND naming `what`,
 * `where` and e's rank. With an engine that has a liveness check, the check
 * starts COMM_PROBE_LEAD(timeout_s) before the deadline and the message
 * names the peers that did not answer. Shared by every engine. */
int gptx_comm_poll_until_done(comm_engine *e, int (*test)(void *arg, int *done), void *arg,
                              double timeout_s, const char *where, const char *what);

/* How long before a wait's deadline the liveness check starts: a quarter of
 * the timeout, at most 2 s (a peer in a poll loop answers within
 * milliseconds; one that is computing, hung or cut off does not). */
#define COMM_PROBE_LEAD(timeout_s) ((timeout_s) / 4 < 2.0 ? (timeout_s) / 4 : 2.0)

#endif
