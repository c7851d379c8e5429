/* The communicator's engine interface (lib/comm.c is the front end) and the
 * TCP rendezvous that starts NCCL without MPI. */
#ifndef GPTX_COMM_INTERNAL_H
#define GPTX_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

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
};

/* What an engine is created from. */
typedef struct comm_setup {
    gptx_context *ctx;
    gptx_comm_launch_info launch;
    double timeout_s; /* 0 = no limit */
} comm_setup;

#ifdef GPTX_HAVE_MPI
/* Initializes MPI if needed and duplicates MPI_COMM_WORLD (errors return). */
int comm_mpi_create(comm_engine **out, const comm_setup *s);
#endif

#ifdef GPTX_HAVE_NCCL
#define COMM_NCCL_ID_BYTES 128
/* GPTX_ERR_UNSUPPORTED unless the context is a CUDA context with a device. */
int comm_nccl_check_context(const comm_setup *s);
/* A fresh ncclUniqueId (rank 0 makes it, every rank receives it). */
int comm_nccl_unique_id(unsigned char id[COMM_NCCL_ID_BYTES]);
int comm_nccl_create(comm_engine **out, const comm_setup *s,
                     const unsigned char id[COMM_NCCL_ID_BYTES]);
#endif

/* Polls test(arg, &done) until done: the first 256 polls spin, then the
 * waiter sleeps with a growing pause of at most 100 us so it leaves the core
 * to ranks still computing. A failing test is returned as it is; after
 * timeout_s (0 = no limit) it fails with GPTX_ERR_BACKEND naming `what`,
 * `where` and this rank. Shared by the MPI and NCCL engines. */
int comm_poll_until_done(int (*test)(void *arg, int *done), void *arg, double timeout_s,
                         const char *where, const char *what, int rank, int world_size);

/* TCP rendezvous: an all-gather of one fixed-size blob per rank through rank
 * 0, which listens at addr:port. all receives world_size * len bytes, rank
 * r's blob at r * len. Ranks may start in any order: the others retry the
 * connection until rank 0 listens. Fails with GPTX_ERR_BACKEND naming the
 * missing ranks when the exchange is not complete after timeout_s (0 = no
 * limit), GPTX_ERR_INVALID for a bad port or address, GPTX_ERR_MISMATCH when
 * peers disagree on world size or blob size. */
int comm_rendezvous_allgather(const char *addr, int port, int rank, int world_size,
                              const void *blob, size_t len, void *all, double timeout_s);

#endif
