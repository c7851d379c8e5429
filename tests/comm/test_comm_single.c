/* World size 1 without a launcher: the "single" engine is chosen, its
 * collectives leave every value and gradient bit unchanged, and each entry
 * point rejects bad arguments. Also the launcher variables: precedence,
 * defaults, and a clear error for each malformed or inconsistent one. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_util.h"

static const char *const launcher_vars[] = {
    "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

static void clear_launcher(void) {
    for (size_t i = 0; i < sizeof launcher_vars / sizeof *launcher_vars; i++)
        unsetenv(launcher_vars[i]);
}

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

static void test_detect(void) {
    gptx_comm_launch_info li;
    clear_launcher();
    gptx_comm_launch_info_init(&li);
    CHECK_OK(gptx_comm_detect_launch(&li));
    CHECK(li.launcher == GPTX_LAUNCHER_NONE && li.rank == 0 && li.world_size == 1 &&
          li.local_rank == 0 && li.local_world_size == 1);
    CHECK_STATUS(gptx_comm_detect_launch(NULL), GPTX_ERR_NULL);

    setenv("WORLD_SIZE", "4", 1);
    setenv("RANK", "3", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    CHECK_OK(gptx_comm_detect_launch(&li));
    CHECK(li.launcher == GPTX_LAUNCHER_TORCHRUN && li.rank == 3 && li.world_size == 4 &&
          li.local_rank == 1 && li.local_world_size == 2);
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    CHECK_OK(gptx_comm_detect_launch(&li));
    CHECK(li.local_rank == 3 && li.local_world_size == 0); /* one node assumed */

    /* mpirun's variables win over torchrun-style ones */
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    CHECK_OK(gptx_comm_detect_launch(&li));
    CHECK(li.launcher == GPTX_LAUNCHER_MPI && li.rank == 1 && li.world_size == 2 &&
          li.local_rank == 1 && li.local_world_size == 2);
    clear_launcher();
    setenv("PMI_SIZE", "3", 1);
    setenv("PMI_RANK", "2", 1);
    CHECK_OK(gptx_comm_detect_launch(&li));
    CHECK(li.launcher == GPTX_LAUNCHER_MPI && li.rank == 2 && li.world_size == 3);

    /* malformed or inconsistent values name the variable */
    struct { const char *rank, *size, *local, *needle; } bad[] = {
        {"3", "2", NULL, "RANK"},       {"-1", "2", NULL, "RANK"},
        {"0", "0", NULL, "WORLD_SIZE"}, {"x1", "2", NULL, "RANK"},
        {"1", "2x", NULL, "WORLD_SIZE"}, {NULL, "2", NULL, "RANK"},
        {"1", NULL, NULL, "WORLD_SIZE"}, {"1", "2", "5", "LOCAL_RANK"},
        {"1", "99999999999", NULL, "WORLD_SIZE"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        clear_launcher();
        if (bad[i].rank) setenv("RANK", bad[i].rank, 1);
        if (bad[i].size) setenv("WORLD_SIZE", bad[i].size, 1);
        if (bad[i].local) setenv("LOCAL_RANK", bad[i].local, 1);
        gptx_comm_launch_info_init(&li);
        CHECK_STATUS(gptx_comm_detect_launch(&li), GPTX_ERR_INVALID);
        check_message_mentions(bad[i].needle);
        CHECK(li.world_size == 1); /* untouched on failure */
    }
    clear_launcher();
}

/* Bytes of every gradient, for bitwise comparisons. */
static float *all_gradients(gptx_model *m) {
    size_t n = gptx_model_num_parameters(m), at = 0;
    float *g = malloc(n * sizeof *g);
    for (int i = 0; g && i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info ti;
        gptx_tensor_info_init(&ti);
        if (gptx_model_tensor_info(m, i, &ti) != GPTX_OK ||
            gptx_model_get_gradient(m, ti.name, g + at, ti.numel) != GPTX_OK) {
            free(g);
            return NULL;
        }
        at += ti.numel;
    }
    return g;
}

static int test_single_engine(void) {
    clear_launcher();
    gptx_context *ctx = NULL, *ctx2 = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    REQUIRE_OK(make_cpu_context(&ctx2, 1));
    gptx_comm *comm = NULL;
    REQUIRE_OK(gptx_comm_create(&comm, ctx, NULL));
    CHECK(strcmp(gptx_comm_engine_name(comm), "single") == 0);
    CHECK(gptx_comm_rank(comm) == 0 && gptx_comm_world_size(comm) == 1);
    CHECK(gptx_comm_local_rank(comm) == 0 && gptx_comm_local_world_size(comm) == 1);
    CHECK(gptx_comm_rank(NULL) == -1 && gptx_comm_world_size(NULL) == -1);
    CHECK(gptx_comm_local_rank(NULL) == -1 && gptx_comm_local_world_size(NULL) == -1);
    CHECK(strcmp(gptx_comm_engine_name(NULL), "") == 0);

    /* collectives over one rank change nothing */
    CHECK_OK(gptx_comm_barrier(comm));
    double d[3] = {1.5, -2.0, NAN};
    int64_t i64[2] = {7, -9};
    for (int op = GPTX_COMM_SUM; op <= GPTX_COMM_MIN; op++) {
        CHECK_OK(gptx_comm_allreduce_f64(comm, d, 3, op));
        CHECK_OK(gptx_comm_allreduce_i64(comm, i64, 2, op));
    }
    CHECK(d[0] == 1.5 && d[1] == -2.0 && isnan(d[2]) && i64[0] == 7 && i64[1] == -9);
    char blob[4] = "abc";
    CHECK_OK(gptx_comm_broadcast(comm, blob, sizeof blob, 0));
    CHECK(strcmp(blob, "abc") == 0);
    CHECK_OK(gptx_comm_allreduce_f64(comm, NULL, 0, GPTX_COMM_SUM)); /* nothing to do */

    /* argument errors */
    CHECK_STATUS(gptx_comm_barrier(NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_allreduce_f64(NULL, d, 1, GPTX_COMM_SUM), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_allreduce_i64(comm, NULL, 1, GPTX_COMM_SUM), GPTX_ERR_NULL);
    check_message_mentions("values");
    CHECK_STATUS(gptx_comm_allreduce_f64(comm, d, 1, 7), GPTX_ERR_INVALID);
    check_message_mentions("op is 7");
    CHECK_STATUS(gptx_comm_broadcast(comm, blob, 1, 1), GPTX_ERR_INVALID);
    check_message_mentions("root is 1");
    CHECK_STATUS(gptx_comm_broadcast(comm, NULL, 1, 0), GPTX_ERR_NULL);

    /* the gradient average over one rank is the gradient itself, bit for bit */
    gptx_model_config cfg = small_config();
    gptx_model *m = NULL, *m2 = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &cfg));
    REQUIRE_OK(gptx_model_create(&m2, ctx2, &cfg));
    REQUIRE_OK(gptx_model_init_random(m, 5));
    int32_t in[2 * 8], tg[2 * 8];
    fill_tokens(in, 16, cfg.vocab_size, 1);
    fill_tokens(tg, 16, cfg.vocab_size, 2);
    float loss = 0;
    REQUIRE_OK(gptx_model_forward(m, in, tg, 2, 8, &loss));
    REQUIRE_OK(gptx_model_backward(m, 1.0f));
    float *before = all_gradients(m);
    CHECK_OK(gptx_comm_average_gradients(comm, m, 16));
    CHECK_OK(gptx_comm_average_gradients(comm, m, 0)); /* one rank: its count does not matter */
    float *after = all_gradients(m);
    CHECK(before && after &&
          memcmp(before, after, gptx_model_num_parameters(m) * sizeof *before) == 0);
    CHECK_STATUS(gptx_comm_average_gradients(comm, m, -1), GPTX_ERR_INVALID);
    check_message_mentions("local_tokens is -1");
    CHECK_STATUS(gptx_comm_average_gradients(NULL, m, 1), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_average_gradients(comm, NULL, 1), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_average_gradients(comm, m2, 1), GPTX_ERR_MISMATCH);
    check_message_mentions("context");
    free(before);
    free(after);
    gptx_model_destroy(m);
    gptx_model_destroy(m2);
    gptx_comm_destroy(comm);
    gptx_comm_destroy(NULL);

    /* options */
    gptx_comm_options o;
    gptx_comm_options_init(&o);
    CHECK(o.engine == GPTX_COMM_AUTO && o.timeout_seconds == 600.0);
    comm = (gptx_comm *)1;
    CHECK_STATUS(gptx_comm_create(NULL, ctx, &o), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_comm_create(&comm, NULL, &o), GPTX_ERR_NULL);
    CHECK(comm == NULL);
    o.engine = 9;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_INVALID);
    check_message_mentions("engine");
    gptx_comm_options_init(&o);
    o.timeout_seconds = -1;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_INVALID);
    check_message_mentions("timeout_seconds");
    o.timeout_seconds = NAN;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_INVALID);
    gptx_comm_options_init(&o);
    o.struct_size = 0;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_INVALID);
    check_message_mentions("struct_size");

    /* torchrun-style variables with world size 1 need nothing */
    setenv("WORLD_SIZE", "1", 1);
    setenv("RANK", "0", 1);
    CHECK_OK(gptx_comm_create(&comm, ctx, NULL));
    CHECK(comm && strcmp(gptx_comm_engine_name(comm), "single") == 0);
    gptx_comm_destroy(comm);

    /* ... with world size 2 on a CPU context they are an error that says what to do */
    setenv("WORLD_SIZE", "2", 1);
    comm = (gptx_comm *)1;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, NULL), GPTX_ERR_UNSUPPORTED);
    check_message_mentions("mpirun -np 2");
    CHECK(comm == NULL);
    /* a malformed variable fails creation */
    setenv("RANK", "2", 1);
    CHECK_STATUS(gptx_comm_create(&comm, ctx, NULL), GPTX_ERR_INVALID);
    /* ... unless the single engine is asked for, which ignores the launcher */
    gptx_comm_options_init(&o);
    o.engine = GPTX_COMM_SINGLE;
    CHECK_OK(gptx_comm_create(&comm, ctx, &o));
    CHECK(comm && gptx_comm_world_size(comm) == 1 && gptx_comm_rank(comm) == 0);
    gptx_comm_destroy(comm);
    clear_launcher();

    /* NCCL needs a CUDA context (whether or not this build has NCCL) */
    o.engine = GPTX_COMM_NCCL;
    CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_UNSUPPORTED);
    check_message_mentions((gptx_features() & GPTX_FEATURE_NCCL) ? "CUDA context" : "NCCL");
    if (!(gptx_features() & GPTX_FEATURE_MPI)) {
        o.engine = GPTX_COMM_MPI;
        CHECK_STATUS(gptx_comm_create(&comm, ctx, &o), GPTX_ERR_UNSUPPORTED);
        check_message_mentions("GPTX_MPI");
    }
    gptx_context_destroy(ctx);
    gptx_context_destroy(ctx2);
    return 0;
}

/* World size 1: a sharded optimizer owns everything and steps exactly like
 * gptx_optimizer_step; gptx_comm_backward is gptx_model_backward. Two runs
 * of 3 steps (one plain, one sharded + gptx_comm_backward) end bit-equal. */
static int test_single_zero_and_overlap(void) {
    clear_launcher();
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    gptx_comm *comm = NULL;
    REQUIRE_OK(gptx_comm_create(&comm, ctx, NULL));
    gptx_model_config cfg = small_config();
    gptx_model *m[2] = {NULL, NULL};
    gptx_optimizer *o[2] = {NULL, NULL};
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-2f;
    for (int k = 0; k < 2; k++) {
        REQUIRE_OK(gptx_model_create(&m[k], ctx, &cfg));
        REQUIRE_OK(gptx_model_init_random(m[k], 5));
    }
    REQUIRE_OK(gptx_optimizer_create(&o[0], m[0], &ao));
    REQUIRE_OK(gptx_optimizer_create_sharded(&o[1], m[1], &ao, comm));
    size_t off = 1, cnt = 0, n = gptx_model_num_parameters(m[1]);
    CHECK_OK(gptx_optimizer_get_shard(o[1], &off, &cnt));
    CHECK(off == 0 && cnt == n);
    int32_t in[2 * 8], tg[2 * 8];
    for (int s = 0; s < 3; s++) {
        fill_tokens(in, 16, cfg.vocab_size, 10u + (uint32_t)s);
        fill_tokens(tg, 16, cfg.vocab_size, 20u + (uint32_t)s);
        float loss = 0, norm[2] = {0, 0};
        for (int k = 0; k < 2; k++) {
            REQUIRE_OK(gptx_model_zero_grad(m[k]));
            REQUIRE_OK(gptx_model_forward(m[k], in, tg, 2, 8, &loss));
        }
        CHECK_OK(gptx_model_backward(m[0], 1.0f));
        CHECK_OK(gptx_comm_backward(comm, m[1], 1.0f, 16, 1));
        CHECK_OK(gptx_optimizer_step(o[0], m[0], &norm[0]));
        CHECK_OK(gptx_optimizer_step_sharded(o[1], m[1], 16, &norm[1]));
        CHECK(norm[0] == norm[1]);
    }
    float *p0 = malloc(n * sizeof *p0), *p1 = malloc(n * sizeof *p1);
    size_t at = 0;
    for (int i = 0; p0 && p1 && i < gptx_model_num_tensors(m[0]); i++) {
        gptx_tensor_info ti;
        gptx_tensor_info_init(&ti);
        CHECK_OK(gptx_model_tensor_info(m[0], i, &ti));
        CHECK_OK(gptx_model_get_parameter(m[0], ti.name, p0 + at, ti.numel));
        CHECK_OK(gptx_model_get_parameter(m[1], ti.name, p1 + at, ti.numel));
        at += ti.numel;
    }
    CHECK(p0 && p1 && memcmp(p0, p1, n * sizeof *p0) == 0);
    CHECK_STATUS(gptx_optimizer_step(o[1], m[1], NULL), GPTX_ERR_STATE);
    CHECK_STATUS(gptx_optimizer_step_sharded(o[0], m[0], 16, NULL), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_comm_backward(comm, m[0], 1.0f, 16, 0), GPTX_ERR_STATE);
    free(p0);
    free(p1);
    for (int k = 0; k < 2; k++) {
        gptx_optimizer_destroy(o[k]);
        gptx_model_destroy(m[k]);
    }
    gptx_comm_destroy(comm);
    gptx_context_destroy(ctx);
    return 0;
}

int main(void) {
    test_detect();
    if (test_single_engine()) return 1;
    if (test_single_zero_and_overlap()) return 1;
    return check_exit("test_comm_single");
}
