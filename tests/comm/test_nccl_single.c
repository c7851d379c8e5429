/* The NCCL engine with one rank (label gpu; built where the engine is, run by
 * tests/gpu/run_all.sh on the one-GPU machine): a smoke test of the engine's
 * NCCL calls, since the data-parallel tests need two processes (mpirun) and
 * the device machine has one GPU.
 *
 * World size 1 normally reaches no NCCL function: GPTX_COMM_AUTO picks the
 * single engine, and the front end (lib/comm) returns before the engine for
 * the host all-reduce, the broadcast, the gradient average, ZeRO-1's
 * reduce-scatter and all-gather and the overlapped buckets. So, without
 * changing lib/:
 *  1. the public API as a one-process torchrun-style launch uses it (RANK 0,
 *     WORLD_SIZE 1), with gptx_comm_options.engine forced to GPTX_COMM_NCCL:
 *     creation (ncclGetUniqueId, a non-blocking ncclCommInitRankConfig, the
 *     engine's stream and events), gptx_comm_barrier (the one public call that
 *     reaches NCCL at world size 1: a one-value ncclAllReduce through pinned
 *     staging), and a training step's calls (gradient average, overlapped
 *     backward, ZeRO-1 step), which must give the bits of a run without a
 *     communicator;
 *  2. every entry of the engine once, called through its table
 *     (lib/comm/comm_engine.h): host all-reduce of doubles and int64 with
 *     sum, max and min, broadcast, the gradient all-reduce with a plain and a
 *     pre-multiplied sum (ncclRedOpCreatePreMulSum), ZeRO-1's ncclReduceScatter
 *     and ncclAllGather, and an overlapped bucket started and tested until
 *     done. With one rank each result is its input times the scale, exactly
 *     (the scales are powers of two).
 * Not reached with one rank: the uneven-shard paths (grouped ncclReduce /
 * ncclBroadcast; count % 1 is always 0), the id over MPI or the TCP
 * rendezvous, and a peer that dies or hangs (the timeout and the abort).
 * Exit 77 without a CUDA device.
 *
 * The buffer of part 2 is 3 Mi + 5 floats: NCCL's own one-rank kernel left
 * the last 5 of them unscaled on an H200 (tests/gpu/emu/nccl_emu.h says
 * why), so the engine scales one rank's buffer itself. Each check compares
 * what it reads back, then takes the device's values as the next check's
 * input, so a wrong entry is reported once, not again by every entry after.
 *
 * Built twice: against the real module (label gpu) and, as
 * test_nccl_single_emu (label emu, CI), against the backend and engine
 * compiled for the CPU emulation with NCCL emulated for one rank
 * (nccl_emu.h reproduces NCCL 2.28's one-rank partition). The emulated
 * engine is not reachable through gptx_comm_create (the front end finds
 * NCCL in the cuda module), so there part 1 is skipped and part 2 makes the
 * engine itself (gptx_comm_nccl_create). */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "comm_internal.h"
#include "context.h"
#include "test_util.h"
#ifdef GPTX_TEST_CUDA_EMU
#include "cuda_nccl.h"
#include "cuda_test_util.h"
#endif

#ifndef SKIP_EXIT
#define SKIP_EXIT 77
#endif

#ifndef GPTX_TEST_CUDA_EMU
/* ---- helpers ---------------------------------------------------------------------------- */

static void launch_one_rank(void) {
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    setenv("LOCAL_RANK", "0", 1);
    setenv("LOCAL_WORLD_SIZE", "1", 1);
    /* unused with one rank (no rendezvous), set as a launcher would */
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29531", 1);
}

static int nccl_comm(gptx_comm **comm, gptx_context *ctx) {
    gptx_comm_options o;
    gptx_comm_options_init(&o);
    o.engine = GPTX_COMM_NCCL;
    o.timeout_seconds = 60;
    return gptx_comm_create(comm, ctx, &o);
}

static gptx_model_config smoke_config(void) {
    gptx_model_config c = small_config(); /* 2 layers, 2 heads, width 16 */
    c.n_embd = 32;
    return c;
}

static int make_model(gptx_model **m, gptx_context *ctx, const gptx_model_config *c) {
    int rc = gptx_model_create(m, ctx, c);
    return rc == GPTX_OK ? gptx_model_init_random(*m, 7) : rc;
}

/* zero_grad, then forward on a fixed batch (B 2, T 16): backward is the caller's */
static int forward(gptx_model *m) {
    int32_t in[32], tg[32];
    fill_tokens(in, 32, 50, 3);
    fill_tokens(tg, 32, 50, 4);
    int rc = gptx_model_zero_grad(m);
    return rc == GPTX_OK ? gptx_model_forward(m, in, tg, 2, 16, NULL) : rc;
}

static int same_values(gptx_model *a, gptx_model *b, int gradients, const char *what) {
    float *x = model_values(a, gradients), *y = model_values(b, gradients);
    size_t n = gptx_model_num_parameters(a), k = 0;
    for (size_t i = 0; x && y && i < n; i++) k += memcmp(&x[i], &y[i], sizeof x[i]) != 0;
    int ok = x && y && k == 0;
    printf("  %-52s %s\n", what, ok ? "bitwise equal" : "DIFFER");
    if (!ok) fprintf(stderr, "%s: %zu of %zu values differ\n", what, k, n);
    free(x);
    free(y);
    return ok;
}

/* ---- 1. the public API -------------------------------------------------------------------- */

static int test_public(gptx_context *ctx, gptx_comm *comm) {
    CHECK(strcmp(gptx_comm_engine_name(comm), "nccl") == 0);
    CHECK(gptx_comm_rank(comm) == 0 && gptx_comm_world_size(comm) == 1);
    CHECK_OK(gptx_comm_barrier(comm));
    double d[3] = {1.5, -2.25, 3.0};
    int64_t i64[2] = {7, -9};
    CHECK_OK(gptx_comm_allreduce_f64(comm, d, 3, GPTX_COMM_SUM));
    CHECK_OK(gptx_comm_allreduce_i64(comm, i64, 2, GPTX_COMM_MAX));
    char blob[4] = "abc";
    CHECK_OK(gptx_comm_broadcast(comm, blob, sizeof blob, 0));
    CHECK(d[0] == 1.5 && d[2] == 3.0 && i64[1] == -9 && strcmp(blob, "abc") == 0);

    gptx_model_config c = smoke_config();
    gptx_model *m = NULL, *ref = NULL;
    REQUIRE_OK(make_model(&m, ctx, &c));
    REQUIRE_OK(make_model(&ref, ctx, &c));
    /* average after backward; overlapped backward; both against a plain backward */
    REQUIRE_OK(forward(m));
    REQUIRE_OK(gptx_model_backward(m, 1.0f));
    REQUIRE_OK(forward(ref));
    REQUIRE_OK(gptx_model_backward(ref, 1.0f));
    CHECK_OK(gptx_comm_average_gradients(comm, m, 32));
    CHECK(same_values(m, ref, 1, "gradient average vs none"));
    REQUIRE_OK(forward(m));
    CHECK_OK(gptx_comm_backward(comm, m, 1.0f, 32, 1024));
    CHECK(same_values(m, ref, 1, "overlapped backward (1 KiB buckets) vs backward"));
    /* ZeRO-1 (no clipping, so the norm's summation order cannot matter) */
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.grad_clip = 0;
    gptx_optimizer *zo = NULL, *po = NULL;
    REQUIRE_OK(gptx_optimizer_create_sharded(&zo, m, &ao, comm));
    REQUIRE_OK(gptx_optimizer_create(&po, ref, &ao));
    size_t off = 1, count = 0;
    CHECK_OK(gptx_optimizer_get_shard(zo, &off, &count));
    CHECK(off == 0 && count == gptx_model_num_parameters(m));
    CHECK_OK(gptx_optimizer_step_sharded(zo, m, 32, NULL));
    CHECK_OK(gptx_optimizer_step(po, ref, NULL));
    CHECK(same_values(m, ref, 0, "ZeRO-1 step vs AdamW step (parameters)"));
    CHECK_OK(gptx_comm_barrier(comm));
    gptx_optimizer_destroy(zo);
    gptx_optimizer_destroy(po);
    gptx_model_destroy(m);
    gptx_model_destroy(ref);
    return 0;
}

#endif /* part 1 */

/* ---- 2. every engine entry --------------------------------------------------------------- */

typedef struct {
    gptx_context *ctx;
    comm_engine *e;
    float *dev;  /* device buffer of n floats */
    float *host; /* what it holds */
    size_t n;
} engine_env;

/* dev times `factor` must equal host times factor, bit for bit (factor a
 * power of two); then host holds what dev holds, so the next check judges
 * only its own entry */
static void expect_scaled(engine_env *v, float factor, const char *what) {
    float *got = malloc(v->n * sizeof *got);
    size_t bad = 0, first = v->n;
    if (!got || v->ctx->ops->download_f32(v->ctx->be, got, v->dev, v->n) != GPTX_OK) bad = v->n;
    for (size_t i = 0; got && bad < v->n && i < v->n; i++) {
        float want = v->host[i] * factor;
        int wrong = memcmp(&got[i], &want, sizeof want) != 0;
        if (wrong && first == v->n) first = i;
        bad += wrong;
    }
    printf("  %-52s %s\n", what, bad ? "WRONG" : "exact");
    if (bad)
        fprintf(stderr, "%s: %zu of %zu values wrong, the first at index %zu\n", what, bad, v->n,
                first);
    CHECK(bad == 0);
    if (got && bad < v->n) memcpy(v->host, got, v->n * sizeof *got);
    free(got);
}

static void engine_host_values(comm_engine *e) {
    const gptx_comm_op ops[] = {GPTX_COMM_SUM, GPTX_COMM_MAX, GPTX_COMM_MIN};
    for (int k = 0; k < 3; k++) {
        double d[3] = {1.5, -2.25, 1e300};
        int64_t i[3] = {INT64_MAX / 2, -9, 0};
        CHECK_OK(e->ops->allreduce_host(e, d, 3, COMM_F64, ops[k]));
        CHECK_OK(e->ops->allreduce_host(e, i, 3, COMM_I64, ops[k]));
        CHECK(d[0] == 1.5 && d[1] == -2.25 && d[2] == 1e300);
        CHECK(i[0] == INT64_MAX / 2 && i[1] == -9 && i[2] == 0);
    }
    unsigned char blob[100];
    for (int k = 0; k < 100; k++) blob[k] = (unsigned char)(k * 7);
    CHECK_OK(e->ops->broadcast_host(e, blob, sizeof blob, 0));
    int same = 1;
    for (int k = 0; k < 100; k++) same &= blob[k] == (unsigned char)(k * 7);
    CHECK(same);
    CHECK_OK(e->ops->barrier(e));
    printf("  %-52s %s\n", "host all-reduce (f64, i64; sum, max, min), broadcast",
           same ? "unchanged" : "CHANGED");
}

/* a bucket started on the engine's stream, tested until done (10 s at most) */
static void engine_bucket(engine_env *v, float scale) {
    void *h = NULL;
    CHECK_OK(v->e->ops->bucket_start(v->e, v->dev, v->n, scale, 1, &h));
    int done = 0;
    time_t until = time(NULL) + 10;
    while (h && !done && time(NULL) < until) {
        int rc = v->e->ops->bucket_test(v->e, h, &done);
        CHECK_OK(rc);
        if (rc != GPTX_OK) break;
    }
    if (h && !done) v->e->ops->bucket_release(v->e, h);
    CHECK(done);
}

static int test_engine(gptx_context *ctx, comm_engine *e) {
    engine_env v = {ctx, e, NULL, NULL, (size_t)3 * 1024 * 1024 + 5};
    CHECK(v.e->device_buffers == 1);
    engine_host_values(v.e);
    v.host = malloc(v.n * sizeof *v.host);
    if (!v.host) return 1;
    for (size_t i = 0; i < v.n; i++) v.host[i] = (float)((int)(i % 2001) - 1000) / 64.0f;
    REQUIRE_OK(ctx->ops->alloc(ctx->be, v.n * sizeof(float), (void **)&v.dev));
    REQUIRE_OK(ctx->ops->upload_f32(ctx->be, v.dev, v.host, v.n));
    CHECK_OK(v.e->ops->allreduce_grads(v.e, v.dev, v.n, 1.0f, 1));
    expect_scaled(&v, 1.0f, "gradient all-reduce, sum (3 Mi + 5 floats)");
    CHECK_OK(v.e->ops->allreduce_grads(v.e, v.dev, v.n, 0.5f, 0));
    expect_scaled(&v, 0.5f, "gradient all-reduce, pre-multiplied sum 0.5");
    CHECK_OK(v.e->ops->reduce_scatter_grads(v.e, v.dev, v.n, 0.25f, 1));
    expect_scaled(&v, 0.25f, "ZeRO-1 reduce-scatter, pre-multiplied sum 0.25");
    CHECK_OK(v.e->ops->allgather(v.e, v.dev, v.n));
    expect_scaled(&v, 1.0f, "ZeRO-1 all-gather");
    engine_bucket(&v, 2.0f);
    expect_scaled(&v, 2.0f, "overlapped bucket, pre-multiplied sum 2");
    ctx->ops->free(ctx->be, v.dev);
    free(v.host);
    return 0;
}

#ifdef GPTX_TEST_CUDA_EMU
/* The emulated engine, made as the front end would make it for one rank. */
static int emu_engine(comm_engine **e, gptx_context *ctx) {
    comm_setup s;
    memset(&s, 0, sizeof s);
    s.ops = ctx->ops;
    s.be = ctx->be;
    s.caps = GPTX_BACKEND_CAP_CUDA_DEVICE;
    gptx_comm_launch_info_init(&s.launch);
    s.launch.world_size = s.launch.local_world_size = 1;
    s.timeout_s = 60;
    unsigned char id[COMM_NCCL_ID_BYTES];
    GPTX_TRY(gptx_comm_nccl_unique_id(id));
    return gptx_comm_nccl_create(e, &s, id);
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(cuda_test_context(&ctx, NULL));
    comm_engine *e = NULL;
    REQUIRE_OK(emu_engine(&e, ctx));
    printf("test_nccl_single_emu: the engine on %s, one rank (part 1, the public calls, "
           "needs the cuda module: not here)\n",
           CUDA_TEST_KIND);
    int failed = test_engine(ctx, e);
    e->ops->destroy(e, failed);
    gptx_context_destroy(ctx);
    if (failed) check_failures++;
    return check_exit("test_nccl_single_emu");
}
#else
int main(void) {
    launch_one_rank();
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    gptx_context *ctx = NULL;
    int rc = gptx_context_create(&ctx, &o);
    if (rc == GPTX_ERR_UNSUPPORTED) {
        printf("test_nccl_single: SKIPPED, no usable CUDA device (%s)\n", gptx_last_error());
        return SKIP_EXIT;
    }
    REQUIRE_OK(rc);
    gptx_comm_launch_info li;
    gptx_comm_launch_info_init(&li);
    CHECK_OK(gptx_comm_detect_launch(&li));
    CHECK(li.launcher == GPTX_LAUNCHER_TORCHRUN && li.world_size == 1);
    gptx_comm *comm = NULL;
    REQUIRE_OK(nccl_comm(&comm, ctx));
    printf("test_nccl_single: engine %s, rank %d of %d\n", gptx_comm_engine_name(comm),
           gptx_comm_rank(comm), gptx_comm_world_size(comm));
    int failed = test_public(ctx, comm) || test_engine(ctx, comm->engine);
    gptx_comm_destroy(comm); /* ncclCommFinalize, then ncclCommDestroy */
    /* a second communicator on the same context: NCCL starts again */
    CHECK_OK(nccl_comm(&comm, ctx));
    if (comm) CHECK_OK(gptx_comm_barrier(comm));
    gptx_comm_destroy(comm);
    gptx_context_destroy(ctx);
    if (failed) check_failures++;
    return check_exit("test_nccl_single");
}
#endif
