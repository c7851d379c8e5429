/* The MPI engine (CPU data parallelism). Errors return (MPI_ERRORS_RETURN on
 * our duplicate of MPI_COMM_WORLD) and become gptx statuses; every
 * collective is started non-blocking and waited for with a deadline, so a
 * rank that hangs or vanished turns into GPTX_ERR_BACKEND instead of a hang.
 * Gradients are summed by reduce-scatter + all-gather: each element is added
 * up on exactly one rank and then copied, so every rank holds the same bits
 * whatever algorithm the MPI library picks. ZeRO-1 uses the two halves on
 * their own; overlapped buckets run the pair non-blocking, progressed by
 * MPI_Test while backward goes on. A wait that nears its deadline pings every
 * peer on a communicator of its own, so a timeout names the peers that are
 * unreachable, stopped or hung, by rank and host. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "errors.h"
#include "mpi_engine.h"

/* prefix of every message of this engine */
#define ENGINE_WHERE "gptx_comm (mpi)"

/* Largest piece of the gradient buffer per reduce-scatter/all-gather round:
 * MPI counts are int, and smaller rounds bound the per-rank chunk. */
#define MPI_SEGMENT ((size_t)1 << 26)

/* Probe message tags and the room for a host name in the timeout message. */
#define PROBE_PING 1
#define PROBE_PONG 2
#define PROBE_HOST_BYTES 64

/* The liveness check. Pings and answers are 1-int messages (the round) that
 * any poll of this engine receives with MPI_Iprobe + MPI_Recv, so nothing is
 * left posted; sends stay in flight per peer and a new one goes out only
 * when the last one has left. */
typedef struct mpi_probe {
    MPI_Comm comm, starting; /* starting: comm until its duplication completes */
    char (*host)[PROBE_HOST_BYTES]; /* every rank's processor name */
    int round;                      /* of this rank's latest check */
    double started;                 /* when it started (CLOCK_MONOTONIC s) */
    int *ping_out, *pong_out;       /* per peer: the round in the message in flight */
    MPI_Request *ping_req, *pong_req;
    int *answered; /* per peer: answered this check */
} mpi_probe;

typedef struct mpi_engine {
    comm_engine base;
    MPI_Comm comm;
    /* the buckets' all-gathers: each starts when its reduce-scatter is seen
     * finished, which differs between ranks, so they get a communicator of
     * their own and start in bucket order (ag_next) to match everywhere */
    MPI_Comm comm_ag;
    unsigned long buckets_started, ag_next;
    double timeout_s;
    int *counts, *displs; /* world_size each: this round's chunks */
    mpi_probe probe;
} mpi_engine;

/* MPI is initialized once per process; the last engine finalizes it when
 * gptx initialized it. */
static pthread_mutex_t g_mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_mpi_users;
static int g_mpi_owned;

static int mpi_error(int err, const char *what) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS) len = 0;
    text[len] = '\0';
    return gptx_fail(GPTX_ERR_BACKEND, ENGINE_WHERE, "%s failed: MPI error %d (%s)", what, err,
                     len ? text : "no description");
}

#define MPI_TRY(call, what)                                                                        \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS) return mpi_error(mpi_rc_, (what));                             \
    } while (0)

typedef struct {
    mpi_engine *e;
    MPI_Request *req;
    const char *what;
} request_poll;

static double probe_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* 1 when no send is in flight in *req (it may start another). */
static int send_idle(MPI_Request *req) {
    int done = 1;
    if (*req != MPI_REQUEST_NULL && MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return 0;
    return done;
}

/* Receives every probe message of one tag that has arrived; 0 or an MPI error. */
static int probe_receive(mpi_probe *p, int tag, int rank) {
    for (;;) {
        int flag = 0, round = 0;
        MPI_Status st;
        int rc = MPI_Iprobe(MPI_ANY_SOURCE, tag, p->comm, &flag, &st);
        if (rc != MPI_SUCCESS || !flag) return rc;
        int src = st.MPI_SOURCE;
        rc = MPI_Recv(&round, 1, MPI_INT, src, tag, p->comm, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return rc;
        if (src == rank) continue;
        if (tag == PROBE_PONG) {
            /* the answer to the latest ping this peer was sent */
            if (round >= p->ping_out[src] && p->round > 0) p->answered[src] = 1;
        } else if (send_idle(&p->pong_req[src])) { /* else an answer is on its way */
            p->pong_out[src] = round;
            rc = MPI_Isend(&p->pong_out[src], 1, MPI_INT, src, PROBE_PONG, p->comm,
                           &p->pong_req[src]);
            if (rc != MPI_SUCCESS) return rc;
        }
    }
}

/* Answers the peers' pings and collects the answers to ours: part of every
 * poll of this engine. Best effort: a failure here never fails the wait. */
static void probe_service(mpi_engine *e) {
    if (e->probe.comm == MPI_COMM_NULL) return;
    if (probe_receive(&e->probe, PROBE_PING, e->base.rank) == MPI_SUCCESS)
        probe_receive(&e->probe, PROBE_PONG, e->base.rank);
}

static void mpi_probe_start(comm_engine *base) {
    mpi_engine *e = (mpi_engine *)base;
    mpi_probe *p = &e->probe;
    if (p->comm == MPI_COMM_NULL) return;
    p->round++;
    p->started = probe_now();
    for (int q = 0; q < e->base.world_size; q++) {
        p->answered[q] = 0;
        /* a ping still in flight from an earlier check stays the one to answer */
        if (q == e->base.rank || !send_idle(&p->ping_req[q])) continue;
        p->ping_out[q] = p->round;
        if (MPI_Isend(&p->ping_out[q], 1, MPI_INT, q, PROBE_PING, p->comm, &p->ping_req[q]) !=
            MPI_SUCCESS)
            p->ping_req[q] = MPI_REQUEST_NULL;
    }
}

/* Appends "rank R (host H)" for every peer with answered == want to buf. */
static size_t probe_list(const mpi_engine *e, int want, char *buf, size_t n, size_t at) {
    const mpi_probe *p = &e->probe;
    int listed = 0;
    for (int q = 0; q < e->base.world_size && at < n; q++) {
        if (q == e->base.rank || p->answered[q] != want) continue;
        int w = snprintf(buf + at, n - at, "%s%d (host %s)", listed++ ? ", " : "", q, p->host[q]);
        at = w < 0 ? n : at + (size_t)w;
    }
    return at < n ? at : n;
}

static void mpi_probe_report(comm_engine *base, char *buf, size_t n) {
    mpi_engine *e = (mpi_engine *)base;
    mpi_probe *p = &e->probe;
    if (p->comm == MPI_COMM_NULL || p->round == 0 || n == 0) return;
    probe_service(e);
    int silent = 0, peers = e->base.world_size - 1;
    for (int q = 0; q < e->base.world_size; q++) silent += q != e->base.rank && !p->answered[q];
    double secs = probe_now() - p->started;
    if (silent == 0) {
        snprintf(buf, n,
                 "every other rank answered a liveness check within %.2f s, so all are running "
                 "and reachable: one called a different collective, or is that much slower",
                 secs);
        return;
    }
    int w = snprintf(buf, n, "no answer to a liveness check within %.2f s from rank%s ", secs,
                     silent > 1 ? "s" : "");
    size_t at = w < 0 ? n : (size_t)w;
    at = probe_list(e, 0, buf, n, at < n ? at : n);
    w = at < n ? snprintf(buf + at, n - at, ": %s unreachable, stopped or hung",
                          silent > 1 ? "they are" : "it is")
               : 0;
    at = w < 0 ? n : at + (size_t)w;
    if (silent < peers && at < n) {
        w = snprintf(buf + at, n - at, " (answered: rank%s ", peers - silent > 1 ? "s" : "");
        at = w < 0 ? n : at + (size_t)w;
        at = probe_list(e, 1, buf, n, at < n ? at : n);
        if (at < n) snprintf(buf + at, n - at, ")");
    }
}

static int test_request(void *arg, int *done) {
    request_poll *p = arg;
    int rc = MPI_Test(p->req, done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && !*done) probe_service(p->e);
    return rc == MPI_SUCCESS ? GPTX_OK : mpi_error(rc, p->what);
}

/* Drives a request to completion, or fails once the deadline has passed. */
static int wait_request(mpi_engine *e, MPI_Request *req, const char *what) {
    request_poll p = {e, req, what};
    return gptx_comm_poll_until_done(&e->base, test_request, &p, e->timeout_s, ENGINE_WHERE, what);
}

/* 1 when no probe message of ours is in flight any more; waits up to 1 s for
 * them (the peers are alive when the engine is destroyed without failure). */
static int probe_quiet(mpi_engine *e) {
    mpi_probe *p = &e->probe;
    if (!p->ping_req) return 1;
    double until = probe_now() + 1.0;
    for (;;) {
        int busy = 0;
        for (int q = 0; q < e->base.world_size; q++)
            busy += !send_idle(&p->ping_req[q]) + !send_idle(&p->pong_req[q]);
        if (!busy) return 1;
        if (probe_now() > until) return 0;
        probe_service(e);
    }
}

static void probe_free(mpi_engine *e, int failed) {
    mpi_probe *p = &e->probe;
    /* a message still in flight keeps its buffer: then nothing is freed */
    if (failed || !probe_quiet(e)) return;
    if (p->comm != MPI_COMM_NULL) MPI_Comm_free(&p->comm);
    free(p->host);
    free(p->ping_out);
    free(p->pong_out);
    free(p->ping_req);
    free(p->pong_req);
    free(p->answered);
}

static void mpi_destroy(comm_engine *base, int failed) {
    mpi_engine *e = (mpi_engine *)base;
    /* after a failure the peers may be gone: freeing the communicator or
     * finalizing could wait for them, so the process leaves MPI as it is */
    probe_free(e, failed);
    if (!failed && e->comm_ag != MPI_COMM_NULL) MPI_Comm_free(&e->comm_ag);
    if (!failed && e->comm != MPI_COMM_NULL) MPI_Comm_free(&e->comm);
    pthread_mutex_lock(&g_mpi_lock);
    g_mpi_users--;
    if (g_mpi_users == 0 && g_mpi_owned && !failed) {
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized) MPI_Finalize();
    }
    pthread_mutex_unlock(&g_mpi_lock);
    free(e->counts);
    free(e->displs);
    free(e);
}

static int mpi_barrier(comm_engine *base) {
    mpi_engine *e = (mpi_engine *)base;
    MPI_Request req;
    MPI_TRY(MPI_Ibarrier(e->comm, &req), "MPI_Ibarrier");
    return wait_request(e, &req, "barrier");
}

static MPI_Op mpi_op(gptx_comm_op op) {
    return op == GPTX_COMM_MAX ? MPI_MAX : op == GPTX_COMM_MIN ? MPI_MIN : MPI_SUM;
}

static int mpi_allreduce_host(comm_engine *base, void *values, size_t count, comm_dtype type,
                              gptx_comm_op op) {
    mpi_engine *e = (mpi_engine *)base;
    if (count > (size_t)INT32_MAX)
        return GPTX_FAIL(GPTX_ERR_INVALID, "count is %zu; at most %d host values per call", count,
                         INT32_MAX);
    MPI_Datatype dt = type == COMM_F64 ? MPI_DOUBLE : MPI_INT64_T;
    MPI_Request req;
    if (type == COMM_F64 && op == GPTX_COMM_SUM) {
        /* a rounded sum: add up on rank 0 and broadcast, so all ranks agree bitwise */
        void *send = e->base.rank == 0 ? MPI_IN_PLACE : values;
        MPI_TRY(MPI_Ireduce(send, values, (int)count, dt, MPI_SUM, 0, e->comm, &req),
                "MPI_Ireduce");
        GPTX_TRY(wait_request(e, &req, "allreduce (sum of doubles)"));
        MPI_TRY(MPI_Ibcast(values, (int)count, dt, 0, e->comm, &req), "MPI_Ibcast");
        return wait_request(e, &req, "allreduce (sum of doubles)");
    }
    MPI_TRY(MPI_Iallreduce(MPI_IN_PLACE, values, (int)count, dt, mpi_op(op), e->comm, &req),
            "MPI_Iallreduce");
    return wait_request(e, &req, "allreduce");
}

static int mpi_broadcast(comm_engine *base, void *data, size_t bytes, int root) {
    mpi_engine *e = (mpi_engine *)base;
    unsigned char *p = data;
    while (bytes > 0) {
        size_t n = bytes < (size_t)1 << 30 ? bytes : (size_t)1 << 30;
        MPI_Request req;
        MPI_TRY(MPI_Ibcast(p, (int)n, MPI_BYTE, root, e->comm, &req), "MPI_Ibcast");
        GPTX_TRY(wait_request(e, &req, "broadcast"));
        p += n;
        bytes -= n;
    }
    return GPTX_OK;
}

/* This round's pieces [at, at + n) of every rank's shard (comm_shard of the
 * whole count): counts/displs relative to at; ranks outside get 0. */
static void round_parts(mpi_engine *e, size_t count, size_t at, size_t n) {
    for (int i = 0; i < e->base.world_size; i++) {
        size_t lo, hi;
        comm_shard(count, e->base.world_size, i, &lo, &hi);
        if (lo < at) lo = at;
        if (hi > at + n) hi = at + n;
        e->counts[i] = hi > lo ? (int)(hi - lo) : 0;
        e->displs[i] = hi > lo ? (int)(lo - at) : 0;
    }
}

static int mpi_reduce_scatter_grads(comm_engine *base, float *buf, size_t count, float scale,
                                    int uniform) {
    mpi_engine *e = (mpi_engine *)base;
    const int r = e->base.rank;
    if (!uniform && scale != 1.0f)
        for (size_t i = 0; i < count; i++) buf[i] *= scale; /* this rank's token weight */
    for (size_t at = 0; at < count; at += MPI_SEGMENT) {
        size_t n = count - at < MPI_SEGMENT ? count - at : MPI_SEGMENT;
        float *seg = buf + at;
        round_parts(e, count, at, n);
        MPI_Request req;
        /* in place: rank r's summed piece lands at the start of seg */
        MPI_TRY(
            MPI_Ireduce_scatter(MPI_IN_PLACE, seg, e->counts, MPI_FLOAT, MPI_SUM, e->comm, &req),
            "MPI_Ireduce_scatter");
        GPTX_TRY(wait_request(e, &req, "gradient reduce-scatter"));
        if (uniform && scale != 1.0f)
            for (int i = 0; i < e->counts[r]; i++) seg[i] *= scale; /* 1/W of the pass */
        if (e->displs[r] > 0) memmove(seg + e->displs[r], seg, (size_t)e->counts[r] * sizeof *seg);
    }
    return GPTX_OK;
}

static int mpi_allgather(comm_engine *base, float *buf, size_t count) {
    mpi_engine *e = (mpi_engine *)base;
    for (size_t at = 0; at < count; at += MPI_SEGMENT) {
        size_t n = count - at < MPI_SEGMENT ? count - at : MPI_SEGMENT;
        round_parts(e, count, at, n);
        MPI_Request req;
        MPI_TRY(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf + at, e->counts, e->displs,
                                MPI_FLOAT, e->comm, &req),
                "MPI_Iallgatherv");
        GPTX_TRY(wait_request(e, &req, "all-gather"));
    }
    return GPTX_OK;
}

/* Each element is added up on exactly one rank (its shard's) and copied to
 * the others: every rank holds the same bits whatever MPI's algorithm. */
static int mpi_allreduce_grads(comm_engine *base, float *buf, size_t count, float scale,
                               int uniform) {
    GPTX_TRY(mpi_reduce_scatter_grads(base, buf, count, scale, uniform));
    return mpi_allgather(base, buf, count);
}

/* One bucket in flight: a reduce-scatter, then (started by the test that
 * sees it finish) an all-gather, both in place over the bucket; the bucket
 * is split into shards of its own. */
typedef struct mpi_bucket {
    float *buf;
    size_t count;
    float scale;
    /* 0: reduce-scatter in flight, 2: it finished but the all-gather waits
     * for its turn, 1: all-gather in flight */
    int uniform, phase;
    unsigned long seq;  /* start order */
    MPI_Request req;
    int *counts, *displs;
} mpi_bucket;

static void mpi_bucket_release(comm_engine *base, void *handle) {
    (void)base;
    mpi_bucket *b = handle;
    if (!b) return;
    /* an unfinished request after a failure is left to MPI (the peers may be
     * gone; MPI_Cancel does not apply to collectives) */
    free(b->counts);
    free(b->displs);
    free(b);
}

static int mpi_bucket_start(comm_engine *base, float *buf, size_t count, float scale, int uniform,
                            void **handle) {
    mpi_engine *e = (mpi_engine *)base;
    const int W = e->base.world_size;
    *handle = NULL;
    if (count > (size_t)INT32_MAX)
        return GPTX_FAIL(GPTX_ERR_INVALID, "bucket of %zu floats; at most %d", count, INT32_MAX);
    mpi_bucket *b = calloc(1, sizeof *b);
    if (b) b->counts = calloc((size_t)W, sizeof *b->counts);
    if (b) b->displs = calloc((size_t)W, sizeof *b->displs);
    if (!b || !b->counts || !b->displs) {
        mpi_bucket_release(base, b);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    b->buf = buf;
    b->count = count;
    b->scale = scale;
    b->uniform = uniform;
    b->seq = e->buckets_started;
    for (int i = 0; i < W; i++) {
        size_t lo, hi;
        comm_shard(count, W, i, &lo, &hi);
        b->counts[i] = (int)(hi - lo);
        b->displs[i] = (int)lo;
    }
    if (!uniform && scale != 1.0f)
        for (size_t i = 0; i < count; i++) buf[i] *= scale;
    int rc = MPI_Ireduce_scatter(MPI_IN_PLACE, buf, b->counts, MPI_FLOAT, MPI_SUM, e->comm,
                                 &b->req);
    if (rc != MPI_SUCCESS) {
        mpi_bucket_release(base, b);
        return mpi_error(rc, "MPI_Ireduce_scatter (bucket)");
    }
    e->buckets_started++;
    *handle = b;
    return GPTX_OK;
}

static int mpi_bucket_test(comm_engine *base, void *handle, int *done) {
    mpi_engine *e = (mpi_engine *)base;
    mpi_bucket *b = handle;
    const int r = e->base.rank;
    *done = 0;
    int finished = b->phase == 2;
    if (!finished) MPI_TRY(MPI_Test(&b->req, &finished, MPI_STATUS_IGNORE), "MPI_Test (bucket)");
    if (!finished) {
        probe_service(e);
        return GPTX_OK;
    }
    if (b->phase == 1) {
        mpi_bucket_release(base, b);
        *done = 1;
        return GPTX_OK;
    }
    if (b->seq != e->ag_next) { /* an earlier bucket's all-gather must start first */
        b->phase = 2;
        return GPTX_OK;
    }
    float *own = b->buf; /* rank r's summed piece is at the start */
    if (b->uniform && b->scale != 1.0f)
        for (int i = 0; i < b->counts[r]; i++) own[i] *= b->scale;
    if (b->displs[r] > 0)
        memmove(b->buf + b->displs[r], own, (size_t)b->counts[r] * sizeof *own);
    b->phase = 1;
    e->ag_next++;
    MPI_TRY(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b->buf, b->counts, b->displs,
                            MPI_FLOAT, e->comm_ag, &b->req),
            "MPI_Iallgatherv (bucket)");
    return GPTX_OK;
}

static const comm_engine_ops mpi_ops = {
    .name = "mpi",
    .destroy = mpi_destroy,
    .barrier = mpi_barrier,
    .allreduce_host = mpi_allreduce_host,
    .broadcast_host = mpi_broadcast,
    .allreduce_grads = mpi_allreduce_grads,
    .reduce_scatter_grads = mpi_reduce_scatter_grads,
    .allgather = mpi_allgather,
    .bucket_start = mpi_bucket_start,
    .bucket_test = mpi_bucket_test,
    .bucket_release = mpi_bucket_release,
    .probe_start = mpi_probe_start,
    .probe_report = mpi_probe_report,
};

/* Initializes MPI for gptx when the program has not; counts the users. */
static int mpi_acquire(void) {
    int finalized = 0, initialized = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return GPTX_FAIL(GPTX_ERR_STATE,
                         "MPI was already finalized in this process (MPI cannot restart): keep one "
                         "communicator for the whole run");
    MPI_Initialized(&initialized);
    if (!initialized) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Init_thread");
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        g_mpi_owned = 1;
    }
    g_mpi_users++;
    return GPTX_OK;
}

/* Every rank's host name, and the liveness check's own communicator. */
static int probe_setup(mpi_engine *e) {
    mpi_probe *p = &e->probe;
    size_t W = (size_t)e->base.world_size;
    p->host = calloc(W, sizeof *p->host);
    p->ping_out = calloc(W, sizeof *p->ping_out);
    p->pong_out = calloc(W, sizeof *p->pong_out);
    p->ping_req = malloc(W * sizeof *p->ping_req);
    p->pong_req = malloc(W * sizeof *p->pong_req);
    p->answered = calloc(W, sizeof *p->answered);
    if (!p->host || !p->ping_out || !p->pong_out || !p->ping_req || !p->pong_req || !p->answered)
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    for (size_t q = 0; q < W; q++) p->ping_req[q] = p->pong_req[q] = MPI_REQUEST_NULL;
    char name[MPI_MAX_PROCESSOR_NAME + 1] = "";
    int len = 0;
    if (MPI_Get_processor_name(name, &len) != MPI_SUCCESS || len <= 0) snprintf(name, 2, "?");
    snprintf(p->host[e->base.rank], PROBE_HOST_BYTES, "%.*s", PROBE_HOST_BYTES - 1, name);
    MPI_Request req;
    MPI_TRY(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p->host, PROBE_HOST_BYTES, MPI_CHAR,
                           e->comm, &req),
            "MPI_Iallgather (host names)");
    GPTX_TRY(wait_request(e, &req, "communicator start-up (host names)"));
    for (size_t q = 0; q < W; q++) p->host[q][PROBE_HOST_BYTES - 1] = '\0';
    /* the handle may not be used (by the polls' probe_service) before the
     * duplication completes */
    MPI_TRY(MPI_Comm_idup(e->comm, &p->starting, &req), "MPI_Comm_idup");
    GPTX_TRY(wait_request(e, &req, "communicator start-up (MPI_Comm_idup)"));
    MPI_TRY(MPI_Comm_set_errhandler(p->starting, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    p->comm = p->starting;
    return GPTX_OK;
}

static int mpi_setup(mpi_engine *e, const comm_setup *s) {
    MPI_Request req;
    MPI_TRY(MPI_Comm_idup(MPI_COMM_WORLD, &e->comm, &req), "MPI_Comm_idup");
    GPTX_TRY(wait_request(e, &req, "communicator start-up (MPI_Comm_idup)"));
    MPI_TRY(MPI_Comm_set_errhandler(e->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_idup(e->comm, &e->comm_ag, &req), "MPI_Comm_idup");
    GPTX_TRY(wait_request(e, &req, "communicator start-up (MPI_Comm_idup)"));
    MPI_TRY(MPI_Comm_set_errhandler(e->comm_ag, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_TRY(MPI_Comm_rank(e->comm, &e->base.rank), "MPI_Comm_rank");
    MPI_TRY(MPI_Comm_size(e->comm, &e->base.world_size), "MPI_Comm_size");
    const gptx_comm_launch_info *li = &s->launch;
    if (li->launcher != GPTX_LAUNCHER_NONE && li->world_size != e->base.world_size)
        return GPTX_FAIL(GPTX_ERR_MISMATCH,
                         "the launcher variables say %d ranks but MPI's world has %d process(es)%s",
                         li->world_size, e->base.world_size,
                         li->launcher == GPTX_LAUNCHER_TORCHRUN
                             ? ": the MPI engine needs its ranks started by mpirun"
                             : "");
    MPI_Comm node;
    MPI_TRY(MPI_Comm_split_type(e->comm, MPI_COMM_TYPE_SHARED, e->base.rank, MPI_INFO_NULL, &node),
            "MPI_Comm_split_type");
    int rc = MPI_Comm_rank(node, &e->base.local_rank);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_size(node, &e->base.local_world_size);
    MPI_Comm_free(&node);
    if (rc != MPI_SUCCESS) return mpi_error(rc, "MPI_Comm_rank/size (node)");
    e->counts = calloc((size_t)e->base.world_size, sizeof *e->counts);
    e->displs = calloc((size_t)e->base.world_size, sizeof *e->displs);
    if (!e->counts || !e->displs) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    return probe_setup(e);
}

int gptx_comm_mpi_create(comm_engine **out, const comm_setup *s) {
    mpi_engine *e = calloc(1, sizeof *e);
    if (!e) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    e->base.ops = &mpi_ops;
    e->base.device_buffers = 0;
    e->comm = MPI_COMM_NULL;
    e->comm_ag = MPI_COMM_NULL;
    e->probe.comm = e->probe.starting = MPI_COMM_NULL;
    e->timeout_s = s->timeout_s;
    pthread_mutex_lock(&g_mpi_lock);
    int rc = mpi_acquire();
    pthread_mutex_unlock(&g_mpi_lock);
    if (rc != GPTX_OK) {
        free(e);
        return rc;
    }
    rc = mpi_setup(e, s);
    if (rc != GPTX_OK) {
        /* a world-size mismatch is a clean state (everyone got here); a
         * timeout is not: then MPI is left without talking to the peers */
        mpi_destroy(&e->base, rc != GPTX_ERR_MISMATCH); /* sets no message */
        return rc;
    }
    *out = &e->base;
    return GPTX_OK;
}
