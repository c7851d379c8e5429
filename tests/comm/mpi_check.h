/* The end of every multi-rank test program: one verdict for all ranks. */
#ifndef GPTX_TEST_MPI_CHECK_H
#define GPTX_TEST_MPI_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "gptx/gptx.h"

/* The start of every multi-rank test program: a 1-thread CPU context and
 * the launch's communicator; *R, *W its rank and size, which must lie in
 * [lo, hi] (else a message naming mpirun -np). 0, or 1 after a message. */
static inline int mpi_check_start(gptx_context **ctx, gptx_comm **comm, int *R, int *W, int lo,
                                  int hi) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 1;
    if (gptx_context_create(ctx, &o) != GPTX_OK || gptx_comm_create(comm, *ctx, NULL) != GPTX_OK) {
        fprintf(stderr, "context or communicator: %s\n", gptx_last_error());
        return 1;
    }
    *R = gptx_comm_rank(*comm);
    *W = gptx_comm_world_size(*comm);
    if (*W < lo || *W > hi) {
        fprintf(stderr, "run with mpirun -np %d to %d (world size is %d)\n", lo, hi, *W);
        return 1;
    }
    return 0;
}

/* Sums the ranks' failures (rc != 0 counts as one), releases comm and ctx,
 * and returns the exit code: non-zero on every rank when any rank failed, so
 * mpirun's status (rank 0's, or the first non-zero) covers them all. */
static inline int mpi_check_exit(gptx_comm *comm, gptx_context *ctx, int rc, const char *test,
                                 int rank, int world) {
    int64_t failures = rc ? 1 : check_failures;
    if (gptx_comm_allreduce_i64(comm, &failures, 1, GPTX_COMM_SUM) != GPTX_OK) failures = 1;
    gptx_comm_destroy(comm);
    gptx_context_destroy(ctx);
    if (failures && !check_failures && !rc) {
        fprintf(stderr, "rank %d: another rank failed\n", rank);
        return 1;
    }
    if (rc) return rc;
    char name[96];
    snprintf(name, sizeof name, "%s (rank %d of %d)", test, rank, world);
    return check_exit(name);
}

#endif
