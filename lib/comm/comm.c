/* The communicator front end: launcher detection, engine choice, argument
 * checks, the "single" engine (world size 1, no-op collectives) and the
 * model-level gradient average. The engines (comm_mpi.c, comm_nccl.c) only
 * move numbers. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_internal.h"
#include "module.h"
#include "context.h"
#include "errors.h"
#include "model.h"
#include "abi_struct.h"

/* helpers report under the public function's name */
#define DETECT_FAIL(status, ...) gptx_fail((status), "gptx_comm_detect_launch", __VA_ARGS__)
#define CREATE_FAIL(status, ...) gptx_fail((status), "gptx_comm_create", __VA_ARGS__)

/* ---- launcher detection ----------------------------------------------------- */

GPTX_HANDLE_FIRST(gptx_comm);

int gptx_comm_launch_info_init_sized(gptx_comm_launch_info *info, size_t size) {
    static const gptx_comm_launch_info one_process = {
        .struct_size = GPTX_COMM_LAUNCH_INFO_SIZE,
        .launcher = GPTX_LAUNCHER_NONE,
        .rank = 0,
        .world_size = 1,
        .local_rank = 0,
        .local_world_size = 1,
    };
    return gptx_struct_init(info, size, &one_process, &gptx_desc_comm_launch_info, __func__,
                            "info");
}

/* Reads an integer variable; *present = 0 when unset or empty. */
static int env_int(const char *name, int *value, int *present) {
    const char *s = getenv(name);
    *present = s && *s;
    if (!*present) return GPTX_OK;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < INT_MIN || v > INT_MAX)
        return DETECT_FAIL(GPTX_ERR_INVALID, "environment variable %s is '%s'; expected an integer",
                           name, s);
    *value = (int)v;
    return GPTX_OK;
}

/* Reads one launcher's four variables (local_size_var may be NULL). */
static int read_launcher(gptx_comm_launch_info *li, const char *rank_var, const char *size_var,
                         const char *local_var, const char *local_size_var) {
    int have_rank, have_size, have_local, have_lsize = 0;
    GPTX_TRY(env_int(rank_var, &li->rank, &have_rank));
    GPTX_TRY(env_int(size_var, &li->world_size, &have_size));
    GPTX_TRY(env_int(local_var, &li->local_rank, &have_local));
    if (local_size_var) GPTX_TRY(env_int(local_size_var, &li->local_world_size, &have_lsize));
    if (!have_size || !have_rank)
        return DETECT_FAIL(GPTX_ERR_INVALID, "%s is set but %s is not; a launcher sets both",
                           have_size ? size_var : rank_var, have_size ? rank_var : size_var);
    if (li->world_size < 1)
        return DETECT_FAIL(GPTX_ERR_INVALID, "environment variable %s is %d; must be >= 1",
                           size_var, li->world_size);
    if (li->rank < 0 || li->rank >= li->world_size)
        return DETECT_FAIL(GPTX_ERR_INVALID, "environment variable %s is %d; must be in [0, %s %d)",
                           rank_var, li->rank, size_var, li->world_size);
    if (!have_local) li->local_rank = li->rank; /* one node assumed */
    if (!have_lsize) li->local_world_size = 0;
    if (li->local_rank < 0 || li->local_rank > li->rank ||
        (li->local_world_size > 0 && li->local_rank >= li->local_world_size))
        return DETECT_FAIL(GPTX_ERR_INVALID, "environment variable %s is %d; must be in [0, %d]%s",
                           local_var, li->local_rank, li->rank,
                           li->local_world_size > 0 ? " and below the node's process count" : "");
    if (li->local_world_size < 0 || li->local_world_size > li->world_size)
        return DETECT_FAIL(GPTX_ERR_INVALID, "environment variable %s is %d; must be in [0, %d]",
                           local_size_var, li->local_world_size, li->world_size);
    return GPTX_OK;
}

int gptx_comm_detect_launch(gptx_comm_launch_info *info) {
    GPTX_CHECK_NULL(info);
    GPTX_TRY(gptx_struct_check_size(info->struct_size, &gptx_desc_comm_launch_info, __func__,
                                    "info"));
    gptx_comm_launch_info li;
    gptx_comm_launch_info_init(&li);
    int rc = GPTX_OK;
    if (getenv("OMPI_COMM_WORLD_SIZE")) {
        li.launcher = GPTX_LAUNCHER_MPI; /* Open MPI's mpirun */
        rc = read_launcher(&li, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                           "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
    } else if (getenv("PMI_SIZE")) {
        li.launcher = GPTX_LAUNCHER_MPI; /* MPICH / Intel MPI (Hydra) */
        rc = read_launcher(&li, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
    } else if (getenv("WORLD_SIZE") || getenv("RANK")) {
        li.launcher = GPTX_LAUNCHER_TORCHRUN;
        rc = read_launcher(&li, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    }
    if (rc != GPTX_OK) return rc;
    return gptx_struct_write(info, &li, &gptx_desc_comm_launch_info, __func__, "info");
}

/* ---- the single engine -------------------------------------------------------- */

static void single_destroy(comm_engine *e, int failed) {
    (void)failed;
    free(e);
}
static int single_barrier(comm_engine *e) {
    (void)e;
    return GPTX_OK;
}
static int single_allreduce_host(comm_engine *e, void *v, size_t n, comm_dtype t, gptx_comm_op op) {
    (void)e, (void)v, (void)n, (void)t, (void)op;
    return GPTX_OK;
}
static int single_broadcast(comm_engine *e, void *d, size_t n, int root) {
    (void)e, (void)d, (void)n, (void)root;
    return GPTX_OK;
}
static int single_allreduce_grads(comm_engine *e, float *b, size_t n, float s, int u) {
    (void)e, (void)b, (void)n, (void)s, (void)u;
    return GPTX_OK; /* the front end never calls it: the scale is always 1 */
}
static int single_allgather(comm_engine *e, float *b, size_t n) {
    (void)e, (void)b, (void)n;
    return GPTX_OK; /* the one shard is the whole vector */
}
static int single_bucket_start(comm_engine *e, float *b, size_t n, float s, int u, void **h) {
    (void)e, (void)b, (void)n, (void)s, (void)u;
    *h = NULL; /* never called: world size 1 runs a plain backward */
    return GPTX_OK;
}
static int single_bucket_test(comm_engine *e, void *h, int *done) {
    (void)e, (void)h;
    *done = 1;
    return GPTX_OK;
}
static void single_bucket_release(comm_engine *e, void *h) { (void)e, (void)h; }

static const comm_engine_ops single_ops = {
    .name = "single",
    .destroy = single_destroy,
    .barrier = single_barrier,
    .allreduce_host = single_allreduce_host,
    .broadcast_host = single_broadcast,
    .allreduce_grads = single_allreduce_grads,
    .reduce_scatter_grads = single_allreduce_grads,
    .allgather = single_allgather,
    .bucket_start = single_bucket_start,
    .bucket_test = single_bucket_test,
    .bucket_release = single_bucket_release,
};

static int single_create(comm_engine **out) {
    comm_engine *e = calloc(1, sizeof *e);
    if (!e) return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    e->ops = &single_ops;
    e->rank = 0;
    e->world_size = 1;
    e->local_rank = 0;
    e->local_world_size = 1;
    e->device_buffers = 1; /* nothing is ever moved */
    *out = e;
    return GPTX_OK;
}

/* ---- creation ------------------------------------------------------------------- */

static const gptx_comm_options comm_defaults = {
    .struct_size = GPTX_COMM_OPTIONS_SIZE,
    .engine = GPTX_COMM_AUTO,
    .timeout_seconds = 600.0,
};

int gptx_comm_options_init_sized(gptx_comm_options *opts, size_t size) {
    return gptx_struct_init(opts, size, &comm_defaults, &gptx_desc_comm_options, __func__,
                            "opts");
}

/* 1 when the context's buffers are host memory (a host engine reads them). */
static int context_on_host(const gptx_context *ctx) {
    return (ctx->ops->capabilities(ctx->be) & GPTX_BACKEND_CAP_HOST_MEMORY) != 0;
}


/* NCCL's unique id from rank 0 to every rank: over MPI when mpirun started
 * the ranks (the MPI engine stays as comm->bootstrap), else over the TCP
 * rendezvous at MASTER_ADDR:MASTER_PORT (GPTX_MASTER_PORT when set). */
static int share_nccl_id(gptx_comm *c, const comm_setup *s, const gptx_module_exports *cuda,
                         unsigned char id[COMM_NCCL_ID_BYTES]) {
    const gptx_comm_launch_info *li = &s->launch;
    /* the id and rank 0's verdict, so the others stop at once if it has none */
    unsigned char blob[COMM_NCCL_ID_BYTES + 1];
    memset(blob, 0, sizeof blob);
    int made = li->rank == 0 ? cuda->nccl_unique_id(blob) : GPTX_OK;
    if (li->world_size == 1) {
        memcpy(id, blob, COMM_NCCL_ID_BYTES);
        return made;
    }
    blob[COMM_NCCL_ID_BYTES] = made == GPTX_OK;
    int rc;
    if (li->launcher == GPTX_LAUNCHER_MPI) {
        const gptx_module_exports *mpi = NULL;
        rc = gptx_module_get("mpi", "gptx_comm_create", &mpi);
        if (rc == GPTX_OK) rc = mpi->mpi_create(&c->bootstrap, s);
        if (rc == GPTX_OK)
            rc = c->bootstrap->ops->broadcast_host(c->bootstrap, blob, sizeof blob, 0);
    } else {
        const char *addr = getenv("MASTER_ADDR");
        int port = 0, have_port = 0;
        /* torchrun's own agent listens at MASTER_PORT: GPTX_MASTER_PORT names another */
        GPTX_TRY(env_int("GPTX_MASTER_PORT", &port, &have_port));
        if (!have_port) GPTX_TRY(env_int("MASTER_PORT", &port, &have_port));
        if (!addr || !*addr || !have_port)
            return CREATE_FAIL(GPTX_ERR_INVALID,
                               "WORLD_SIZE is %d but %s is not set; torchrun-style launches need "
                               "MASTER_ADDR and MASTER_PORT (rank 0's host and a free port)",
                               li->world_size, !addr || !*addr ? "MASTER_ADDR" : "MASTER_PORT");
        unsigned char *all = malloc((size_t)li->world_size * sizeof blob);
        if (!all) return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        rc = gptx_comm_rendezvous_allgather(addr, port, li->rank, li->world_size, blob,
                                            sizeof blob, all, s->timeout_s);
        if (rc == GPTX_OK) memcpy(blob, all, sizeof blob); /* rank 0's */
        free(all);
    }
    if (made != GPTX_OK) return made; /* rank 0: its own message */
    if (rc != GPTX_OK) return rc;
    if (!blob[COMM_NCCL_ID_BYTES])
        return CREATE_FAIL(GPTX_ERR_BACKEND,
                           "rank 0 could not create NCCL's unique id (see its error); rank %d "
                           "stops too", li->rank);
    memcpy(id, blob, COMM_NCCL_ID_BYTES);
    return GPTX_OK;
}

/* The NCCL engine lives beside the CUDA backend, in the cuda module; NULL
 * when that module is missing or was built without NCCL. */
static const gptx_module_exports *nccl_module(void) {
    const gptx_module_exports *cuda = gptx_module_lookup("cuda");
    return cuda && cuda->nccl_create ? cuda : NULL;
}

static int create_nccl(gptx_comm *c, comm_setup *s) {
    const gptx_module_exports *cuda = nccl_module();
    if (!cuda) {
        const gptx_module_exports *x = NULL;
        GPTX_TRY(gptx_module_get("cuda", "gptx_comm_create (NCCL engine)", &x));
        return CREATE_FAIL(GPTX_ERR_UNSUPPORTED,
                           "the cuda module was built without the NCCL engine (it needs nccl.h "
                           "at configure time)");
    }
    GPTX_TRY(cuda->nccl_check(s));
    unsigned char id[COMM_NCCL_ID_BYTES];
    memset(id, 0, sizeof id);
    GPTX_TRY(share_nccl_id(c, s, cuda, id));
    return cuda->nccl_create(&c->engine, s, id);
}

static int create_engine(gptx_comm *c, comm_setup *s, int engine) {
    const gptx_comm_launch_info *li = &s->launch;
    int on_host = (s->caps & GPTX_BACKEND_CAP_HOST_MEMORY) != 0;
    if (engine == GPTX_COMM_AUTO) {
        if (li->world_size == 1) {
            engine = GPTX_COMM_SINGLE;
        } else if (!on_host) {
            /* NCCL on device buffers, else MPI staging the gradients through host memory */
            engine = nccl_module() ? GPTX_COMM_NCCL : GPTX_COMM_MPI;
        } else if (li->launcher == GPTX_LAUNCHER_TORCHRUN) {
            return CREATE_FAIL(GPTX_ERR_UNSUPPORTED,
                               "WORLD_SIZE is %d (torchrun-style variables) with a CPU context: "
                               "those variables start the NCCL engine, which needs a CUDA context; "
                               "for CPU data parallelism start the ranks with mpirun -np %d",
                               li->world_size, li->world_size);
        } else {
            engine = GPTX_COMM_MPI;
        }
    }
    switch (engine) {
    case GPTX_COMM_SINGLE:
        gptx_comm_launch_info_init(&s->launch);
        return single_create(&c->engine);
    case GPTX_COMM_MPI: {
        const gptx_module_exports *mpi = NULL;
        GPTX_TRY(gptx_module_get("mpi", "gptx_comm_create (MPI engine)", &mpi));
        return mpi->mpi_create(&c->engine, s);
    }
    case GPTX_COMM_NCCL:
        return create_nccl(c, s);
    default:
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.engine is %d; expected GPTX_COMM_*", engine);
    }
}

/* The communicator's release (handle.h): when it was destroyed and no
 * sharded optimizer uses it any more. */
static void release_comm(gptx_handle *h) {
    gptx_comm *comm = (gptx_comm *)h;
    if (comm->engine) comm->engine->ops->destroy(comm->engine, comm->failed);
    if (comm->bootstrap) comm->bootstrap->ops->destroy(comm->bootstrap, comm->failed);
    free(comm->staging);
}

int gptx_comm_create(gptx_comm **out, gptx_context *ctx, const gptx_comm_options *in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    gptx_comm_options o = comm_defaults;
    if (in) GPTX_TRY(gptx_struct_read(&o, in, &gptx_desc_comm_options, __func__, "opts"));
    if (o.engine < GPTX_COMM_AUTO || o.engine > GPTX_COMM_NCCL)
        return GPTX_FAIL(GPTX_ERR_INVALID, "opts.engine is %d; expected GPTX_COMM_*", o.engine);
    if (!(o.timeout_seconds >= 0.0) || o.timeout_seconds > 1e9)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "opts.timeout_seconds is %g; must be in [0, 1e9] (0 = no limit)",
                         o.timeout_seconds);
    comm_setup s;
    memset(&s, 0, sizeof s);
    s.ops = ctx->ops;
    s.be = ctx->be;
    s.device = ctx->opts.device;
    s.caps = ctx->ops->capabilities(ctx->be);
    s.timeout_s = o.timeout_seconds;
    gptx_comm_launch_info_init(&s.launch);
    if (o.engine != GPTX_COMM_SINGLE) GPTX_TRY(gptx_comm_detect_launch(&s.launch));

    gptx_comm *c = calloc(1, sizeof *c);
    if (!c) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&c->h, GPTX_KIND_COMM, &ctx->h, NULL, release_comm);
    c->ctx = ctx;
    c->opts = o;
    c->timeout_s = s.timeout_s;
    int rc = create_engine(c, &s, o.engine);
    if (rc != GPTX_OK) {
        /* a half-made start-up may have peers waiting: release without talking */
        c->failed = 1;
        gptx_comm_destroy(c);
        return rc;
    }
    *out = c;
    return GPTX_OK;
}

void gptx_comm_destroy(gptx_comm *comm) {
    gptx_handle_destroy(comm, GPTX_KIND_COMM, "comm", __func__);
}

/* ---- queries ---------------------------------------------------------------------- */

int gptx_comm_get_options(const gptx_comm *comm, gptx_comm_options *opts) {
    GPTX_CHECK_HANDLE(comm, GPTX_KIND_COMM);
    GPTX_CHECK_NULL(opts);
    return gptx_struct_write(opts, &comm->opts, &gptx_desc_comm_options, __func__, "opts");
}

/* The engine of a live communicator, NULL (message set) for anything else:
 * what the queries below answer from, fixed at creation. */
static const comm_engine *engine_of(const gptx_comm *comm, const char *func) {
    return gptx_handle_check(comm, GPTX_KIND_COMM, "comm", func) == GPTX_OK ? comm->engine : NULL;
}

const char *gptx_comm_engine_name(const gptx_comm *comm) {
    const comm_engine *e = engine_of(comm, __func__);
    return e ? e->ops->name : "";
}
int gptx_comm_rank(const gptx_comm *comm) {
    const comm_engine *e = engine_of(comm, __func__);
    return e ? e->rank : -1;
}
int gptx_comm_world_size(const gptx_comm *comm) {
    const comm_engine *e = engine_of(comm, __func__);
    return e ? e->world_size : -1;
}
int gptx_comm_local_rank(const gptx_comm *comm) {
    const comm_engine *e = engine_of(comm, __func__);
    return e ? e->local_rank : -1;
}
int gptx_comm_local_world_size(const gptx_comm *comm) {
    const comm_engine *e = engine_of(comm, __func__);
    return e ? e->local_world_size : -1;
}

/* ---- collectives --------------------------------------------------------------------- */

/* Refuses a communicator whose engine already failed once. */
int gptx_comm_usable(const gptx_comm *c, const char *func) {
    if (!c->failed) return GPTX_OK;
    return gptx_fail(GPTX_ERR_STATE, func,
                     "an earlier collective failed, so this communicator cannot be used again "
                     "(first failure: %s)",
                     c->failure);
}

int gptx_comm_check_reduction(const gptx_comm *c, const gptx_model *model, int64_t local_tokens,
                              const char *func) {
    if (local_tokens < 0)
        return gptx_fail(GPTX_ERR_INVALID, func, "local_tokens is %lld; must be >= 0",
                         (long long)local_tokens);
    if (model->ctx != c->ctx)
        return gptx_fail(GPTX_ERR_MISMATCH, func,
                         "the model belongs to another context than the communicator");
    return gptx_comm_usable(c, func);
}

/* Marks the communicator failed after an engine error (message already set). */
int gptx_comm_engine_result(gptx_comm *c, int rc) {
    if (rc != GPTX_OK && !c->failed) {
        c->failed = 1;
        snprintf(c->failure, sizeof c->failure, "%s", gptx_last_error());
    }
    return rc;
}

static int check_op(int op, const char *func) {
    if (op != GPTX_COMM_SUM && op != GPTX_COMM_MAX && op != GPTX_COMM_MIN)
        return gptx_fail(GPTX_ERR_INVALID, func, "op is %d; expected GPTX_COMM_SUM, _MAX or _MIN",
                         op);
    return GPTX_OK;
}

int gptx_comm_barrier(gptx_comm *comm) {
    GPTX_ENTER(comm, GPTX_KIND_COMM);
    GPTX_TRY(gptx_comm_usable(comm, __func__));
    return gptx_comm_engine_result(comm, comm->engine->ops->barrier(comm->engine));
}

static int allreduce_host(gptx_comm *comm, void *values, size_t count, int op, comm_dtype t,
                          const char *func) {
    gptx_guard g __attribute__((cleanup(gptx_guard_leave))) = {0};
    GPTX_TRY(gptx_guard_enter(&g, comm, GPTX_KIND_COMM, GPTX_GUARD_CHECK, "comm", func));
    if (!values && count > 0) return gptx_fail(GPTX_ERR_NULL, func, "argument 'values' is NULL");
    GPTX_TRY(check_op(op, func));
    GPTX_TRY(gptx_comm_usable(comm, func));
    if (count == 0 || comm->engine->world_size == 1) return GPTX_OK;
    return gptx_comm_engine_result(
        comm, comm->engine->ops->allreduce_host(comm->engine, values, count, t, (gptx_comm_op)op));
}

int gptx_comm_allreduce_f64(gptx_comm *comm, double *values, size_t count, int op) {
    return allreduce_host(comm, values, count, op, COMM_F64, __func__);
}

int gptx_comm_allreduce_i64(gptx_comm *comm, int64_t *values, size_t count, int op) {
    return allreduce_host(comm, values, count, op, COMM_I64, __func__);
}

int gptx_comm_broadcast(gptx_comm *comm, void *data, size_t bytes, int root) {
    GPTX_ENTER(comm, GPTX_KIND_COMM);
    if (!data && bytes > 0) return GPTX_FAIL(GPTX_ERR_NULL, "argument 'data' is NULL");
    if (root < 0 || root >= comm->engine->world_size)
        return GPTX_FAIL(GPTX_ERR_INVALID, "root is %d; must be in [0, world size %d)", root,
                         comm->engine->world_size);
    GPTX_TRY(gptx_comm_usable(comm, __func__));
    if (bytes == 0 || comm->engine->world_size == 1) return GPTX_OK;
    return gptx_comm_engine_result(
        comm, comm->engine->ops->broadcast_host(comm->engine, data, bytes, root));
}

/* ---- gradients ------------------------------------------------------------------------ */

int gptx_comm_engine_takes_model_buffers(const gptx_comm *c) {
    return c->engine->device_buffers || context_on_host(c->ctx);
}

/* The engine's view of the gradients: the model's own buffer, or a host copy
 * when the engine needs host memory and the context keeps them on a device. */
static int grads_for_engine(gptx_comm *c, gptx_model *m, float **buf) {
    size_t n = m->layout.nparams;
    if (gptx_comm_engine_takes_model_buffers(c)) {
        *buf = m->grads;
        return GPTX_OK;
    }
    if (c->staging_count < n) {
        float *s = realloc(c->staging, n * sizeof *s);
        if (!s)
            return gptx_fail(GPTX_ERR_NO_MEMORY, "gptx_comm_average_gradients",
                             "out of host memory (%zu gradients)", n);
        c->staging = s;
        c->staging_count = n;
    }
    *buf = c->staging;
    return c->ctx->ops->download_f32(c->ctx->be, c->staging, m->grads, n);
}

int gptx_comm_token_scale(gptx_comm *c, int64_t local_tokens, const char *func, float *scale,
                          int *uniform, int64_t *total) {
    comm_engine *e = c->engine;
    /* max and -min in one collective: equal counts (the usual case) need no sum */
    int64_t mm[2] = {local_tokens, -local_tokens};
    GPTX_TRY(gptx_comm_engine_result(c, e->ops->allreduce_host(e, mm, 2, COMM_I64, GPTX_COMM_MAX)));
    *uniform = mm[0] == -mm[1];
    if (mm[0] > INT64_MAX / e->world_size) /* every rank sees the same: all fail alike */
        return gptx_fail(GPTX_ERR_INVALID, func,
                         "local_tokens up to %lld overflow the global count", (long long)mm[0]);
    *total = mm[0] * e->world_size;
    if (!*uniform) {
        *total = local_tokens;
        GPTX_TRY(gptx_comm_engine_result(
            c, e->ops->allreduce_host(e, total, 1, COMM_I64, GPTX_COMM_SUM)));
    }
    *scale = *total > 0 ? (float)((double)local_tokens / (double)*total) : 0.0f;
    return GPTX_OK;
}

int gptx_comm_allgather_host(gptx_comm *c, float *host, size_t count) {
    comm_engine *e = c->engine;
    if (e->world_size == 1 || count == 0) return GPTX_OK;
    if (!e->device_buffers) return gptx_comm_engine_result(c, e->ops->allgather(e, host, count));
    /* the engine reduces device memory: stage through a context buffer */
    gptx_context *ctx = c->ctx;
    float *dev = NULL;
    int rc = ctx->ops->alloc(ctx->be, count * sizeof(float), (void **)&dev);
    if (rc != GPTX_OK) return rc;
    rc = ctx->ops->upload_f32(ctx->be, dev, host, count);
    if (rc == GPTX_OK) rc = gptx_comm_engine_result(c, e->ops->allgather(e, dev, count));
    if (rc == GPTX_OK) rc = ctx->ops->download_f32(ctx->be, host, dev, count);
    ctx->ops->free(ctx->be, dev);
    return rc;
}

int gptx_comm_average_gradients(gptx_comm *comm, gptx_model *model, int64_t local_tokens) {
    GPTX_ENTER(comm, GPTX_KIND_COMM);
    GPTX_ENTER(model, GPTX_KIND_MODEL);
    GPTX_TRY(gptx_comm_check_reduction(comm, model, local_tokens, __func__));
    comm_engine *e = comm->engine;
    if (model->exact_bins) return gptx_comm_exact_sum(comm, model); /* not token-weighted */
    if (e->world_size == 1) return GPTX_OK; /* the mean over one rank is its own gradient */
    GPTX_TRY(gptx_model_grads_materialize(model)); /* a pending zero_grad */
    gptx_model_grads_changed(model);
    float scale = 0.0f;
    int uniform = 0;
    int64_t total = 0;
    GPTX_TRY(gptx_comm_token_scale(comm, local_tokens, __func__, &scale, &uniform, &total));
    size_t n = model->layout.nparams;
    if (total == 0) /* nobody had a target: the mean is empty, use 0 on every rank */
        return model->ctx->ops->fill_f32(model->ctx->be, model->grads, 0.0f, n);
    float *buf = NULL;
    GPTX_TRY(grads_for_engine(comm, model, &buf));
    GPTX_TRY(gptx_comm_engine_result(comm, e->ops->allreduce_grads(e, buf, n, scale, uniform)));
    if (buf != model->grads)
        return model->ctx->ops->upload_f32(model->ctx->be, model->grads, buf, n);
    return GPTX_OK;
}

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int gptx_comm_poll_until_done(comm_engine *e, int (*test)(void *arg, int *done), void *arg,
                              double timeout_s, const char *where, const char *what) {
    double start = monotonic_seconds();
    double probe_at = timeout_s > 0 && e->ops->probe_start ? timeout_s - COMM_PROBE_LEAD(timeout_s)
                                                           : -1.0;
    long pause_ns = 1000;
    for (unsigned iter = 0;; iter++) {
        int done = 0;
        int rc = test(arg, &done);
        if (rc != GPTX_OK || done) return rc;
        if (iter < 256) continue;
        double waited = monotonic_seconds() - start;
        if (probe_at >= 0 && waited > probe_at) {
            e->ops->probe_start(e);
            probe_at = -1.0;
        }
        if (timeout_s > 0 && waited > timeout_s) {
            char peers[512] = "";
            if (e->ops->probe_report) e->ops->probe_report(e, peers, sizeof peers);
            return gptx_fail(GPTX_ERR_BACKEND, where,
                             "%s: the other ranks did not complete it within %g s (rank %d of "
                             "%d waited)%s%s; this communicator cannot be used again",
                             what, timeout_s, e->rank, e->world_size, peers[0] ? "; " : "",
                             peers[0] ? peers
                                      : ": a rank died, hangs, or called a different collective");
        }
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 100000) pause_ns *= 2;
    }
}
