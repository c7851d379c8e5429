/* The communicator's front end (lib/comm/comm.c): the public handle and what
 * comm_zero.c, comm_buckets.c and checkpoint.c share of it, over the engine
 * interface (comm_engine.h); and the TCP rendezvous that starts NCCL without
 * MPI. */
#ifndef GPTX_COMM_INTERNAL_H
#define GPTX_COMM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm_engine.h"
#include "gptx/gptx.h"
#include "handle.h"

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

/* A rank_invariant model's gradients summed over the ranks exactly
 * (comm_exact.c): no token weighting; grads then holds the sum, the same
 * bits on every rank whatever the split of the backward passes. */
int gptx_comm_exact_sum(gptx_comm *c, gptx_model *m);

/* All ranks' shards (comm_shard) of host[0..count) copied to every rank;
 * stages through a context buffer for an engine that takes device memory. */
int gptx_comm_allgather_host(gptx_comm *c, float *host, size_t count);

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
