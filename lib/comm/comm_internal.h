/* The communicator's engine interface (lib/comm/comm.c is the front end) and the
 * TCP rendezvous that starts NCCL without MPI. */
#ifndef GPTX_COMM_INTERNAL_H
#define GPTX_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "gptx/gptx.h"
#include "handle.h"

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

/* The public handle (lib/comm/comm.c), shared with comm_zero.c, comm_buckets.c
 * and checkpoint.c. */
struct gptx_comm {
    gptx_handle h; /* first (handle.h); its parent is ctx */
    gptx_context *ctx;
    gptx_comm_options opts; /* as created (defaults filled in) */
    comm_engine *engine;
    comm_engine *bootstrap; /* MPI engine that started an NCCL engine under mpirun, or NULL */
    double timeout_s;       /* the engine's limit per collective (0 = none) */
    int failed;             /* a collective failed: the engine is not used again */
    char failure[256];      /* the first failure's message */
    float *staging;         /* host copy of the gradients (host engine, device context) */
    size_t staging_count;
};

/* GPTX_ERR_STATE (reported as func) when an earlier collective failed. */
int gptx_comm_usable(const gptx_comm *c, const char *func);
/* The checks every gradient reduction makes (reported as func): local_tokens
 * >= 0, the model on the communicator's context, the communicator usable. */
int gptx_comm_check_reduction(const gptx_comm *c, const gptx_model *model, int64_t local_tokens,
                              const char *func);
/* Marks the communicator failed when rc is an engine error; returns rc. */
int gptx_comm_engine_result(gptx_comm *c, int rc);
/* 1 when the engine works on the context's own buffers (no host staging). */
int gptx_comm_engine_takes_model_buffers(const gptx_comm *c);

/* The token weighting shared by every gradient reduction: one collective
 * (two when the counts differ) gives *scale = local_tokens / sum of all
 * ranks' tokens, *uniform = 1 when every rank passed the same count, and
 * *total (0 when no rank had a target). Reported as func. */
int gptx_comm_token_scale(gptx_comm *c, int64_t local_tokens, const char *func, float *scale,
                          int *uniform, int64_t *total);

/* All ranks' shards (comm_shard) of host[0..count) copied to every rank;
 * stages through a context buffer for an engine that takes device memory. */
int gptx_comm_allgather_host(gptx_comm *c, float *host, size_t count);

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

/* TCP rendezvous: an all-gather of one fixed-size blob per rank through rank
 * 0, which listens at addr:port. all receives world_size * len bytes, rank
 * r's blob at r * len. Ranks may start in any order: the others retry the
 * connection until rank 0 listens. Fails with GPTX_ERR_BACKEND naming the
 * missing ranks when the exchange is not complete after timeout_s (0 = no
 * limit), GPTX_ERR_INVALID for a bad port or address, GPTX_ERR_MISMATCH when
 * peers disagree on world size or blob size. */
int gptx_comm_rendezvous_allgather(const char *addr, int port, int rank, int world_size,
                                   const void *blob, size_t len, void *all, double timeout_s);

/* 1 when the connected socket fd has the same local and peer address: a
 * connect() to an unused local port in the ephemeral range that the kernel
 * answered with its own source port. */
int gptx_comm_socket_connected_to_itself(int fd);

#endif
