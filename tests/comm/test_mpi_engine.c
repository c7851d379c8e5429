/* The MPI engine's gradient entries called through its table
 * (lib/comm/comm_engine.h), under mpirun -np 2 and 3, on buffers whose
 * length leaves a tail in every partition the engine makes: the shards
 * (count % W != 0) and the engine's rounds of 2^26 floats (MPI_SEGMENT in
 * backends/mpi/mpi_engine.c). NCCL's one-rank kernel once lost exactly such
 * a tail (5 values of 3 Mi + 5, issue 33): every value of every entry is
 * checked here, the last ones included.
 *
 * Rank r's buffer holds v_r[i] = ((i % 2001) - 1000) / 64 + r and is
 * weighted by s_r: sums of two or three such terms times powers of two are
 * exact in fp32, so each result must equal sum_r s_r * v_r[i] bit for bit:
 *   - allreduce_grads, uniform (every rank 0.5) and not (s_r = 2^-r);
 *   - reduce_scatter_grads (this rank's shard, comm_shard), then allgather
 *     (the whole buffer);
 *   - an overlapped bucket (bucket_start, bucket_test until done).
 * Buffers: 3 Mi + 5 floats, and 2^26 + 5 (two rounds, the second of 5). */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm_internal.h"
#include "mpi_check.h"
#include "test_util.h"

static int R, W;

static float term(size_t i, int rank) { return (float)((int)(i % 2001) - 1000) / 64.0f + rank; }

static void fill(float *buf, size_t n) {
    for (size_t i = 0; i < n; i++) buf[i] = term(i, R);
}

/* Whether buf[lo, hi) holds sum_r scale(r) * v_r exactly; reports the first
 * wrong index. */
static int exact(const float *buf, size_t lo, size_t hi, float (*scale)(int), const char *what,
                 size_t n) {
    size_t bad = 0, first = hi;
    for (size_t i = lo; i < hi; i++) {
        float want = 0.0f;
        for (int r = 0; r < W; r++) want += scale(r) * term(i, r);
        if (memcmp(&want, &buf[i], sizeof want) != 0) {
            if (!bad) first = i;
            bad++;
        }
    }
    if (R == 0 || bad)
        printf("  rank %d: %-44s n %-9zu %s\n", R, what, n, bad ? "WRONG" : "exact");
    if (bad)
        fprintf(stderr, "rank %d: %s: %zu of [%zu, %zu) wrong, the first at %zu\n", R, what, bad,
                lo, hi, first);
    return bad == 0;
}

static float half(int r) { return (void)r, 0.5f; }
static float by_rank(int r) { return 1.0f / (float)(1 << r); }

static int check_entries(comm_engine *e, float *buf, size_t n) {
    int ok = 1;
    fill(buf, n);
    CHECK_OK(e->ops->allreduce_grads(e, buf, n, 0.5f, 1));
    ok &= exact(buf, 0, n, half, "allreduce_grads, uniform 0.5", n);
    fill(buf, n);
    CHECK_OK(e->ops->allreduce_grads(e, buf, n, by_rank(R), 0));
    ok &= exact(buf, 0, n, by_rank, "allreduce_grads, 2^-rank", n);
    fill(buf, n);
    size_t lo, hi;
    comm_shard(n, W, R, &lo, &hi);
    CHECK_OK(e->ops->reduce_scatter_grads(e, buf, n, by_rank(R), 0));
    ok &= exact(buf, lo, hi, by_rank, "reduce_scatter_grads (own shard)", n);
    CHECK_OK(e->ops->allgather(e, buf, n));
    ok &= exact(buf, 0, n, by_rank, "allgather after it", n);
    fill(buf, n);
    void *h = NULL;
    int done = 0;
    CHECK_OK(e->ops->bucket_start(e, buf, n, 0.5f, 1, &h));
    time_t until = time(NULL) + 60;
    while (h && !done && time(NULL) < until)
        if (e->ops->bucket_test(e, h, &done) != GPTX_OK) break;
    if (h && !done) e->ops->bucket_release(e, h);
    CHECK(done);
    ok &= done && exact(buf, 0, n, half, "bucket, uniform 0.5", n);
    CHECK(ok);
    return ok ? 0 : 1;
}

int main(void) {
    gptx_context *ctx = NULL;
    gptx_comm *comm = NULL;
    if (mpi_check_start(&ctx, &comm, &R, &W, 2, 3)) return 1;
    const size_t sizes[] = {((size_t)3 << 20) + 5, ((size_t)1 << 26) + 5};
    float *buf = malloc(sizes[1] * sizeof *buf);
    int rc = buf ? 0 : 1;
    for (int k = 0; k < 2 && !rc; k++) rc = check_entries(comm->engine, buf, sizes[k]);
    free(buf);
    return mpi_check_exit(comm, ctx, rc, "test_mpi_engine", R, W);
}
