/* The per-op profiler on the CUDA backend (lib/core/op_profile.c), whose
 * ops are timed with device events. The context runs on a copy of the
 * backend's table whose event entries count their calls, so the test sees
 * how the profiler uses them:
 *   - every profiled call records two events on the compute stream, and no
 *     interval is read (event_elapsed) before the report is; reading it
 *     reads each interval once, and the report says device events;
 *   - the call counts are those the model's shape gives
 *     (tests/support/op_profile_expect.h), under fp32 and bf16 (the weight
 *     copy and the residual conversions then appear); each time > 0;
 *   - graphs: the context has cuda_graphs = 1; the profiled model captures
 *     nothing and issues every op each step, while an unprofiled model on
 *     the same context captures and replays, with the same losses bit for
 *     bit; its steps add nothing to the report.
 * Model: 2 layers, C 32, 2 heads, V 67 (padded 80), B 2, T 16. */
#include "check.h"
#include "cuda_test_util.h"
#include "op_profile_expect.h"
#include "param_storage.h"

#include <gptx/gptx_experimental.h>

#define B 2
#define T 16
#define STEPS 3
#define MAX_LINES 64

/* the backend's table with its event entries counted */
static gptx_backend_ops counted;
static int64_t n_record, n_elapsed;

static int count_record(gptx_backend *be, void *ev) {
    n_record++;
    return cuda_test_ops()->event_record(be, ev);
}

static int count_elapsed(gptx_backend *be, void *start, void *stop, double *seconds) {
    n_elapsed++;
    return cuda_test_ops()->event_elapsed(be, start, stop, seconds);
}

static gptx_model_config model_config(void) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 67;
    c.padded_vocab_size = 80;
    c.context_length = T;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    return c;
}

static int make_model(gptx_context *ctx, gptx_model **m, gptx_optimizer **opt) {
    gptx_model_config c = model_config();
    int rc = gptx_model_create(m, ctx, &c);
    if (rc == GPTX_OK) rc = gptx_model_init_random(*m, 7);
    if (rc == GPTX_OK) rc = gptx_optimizer_create(opt, *m, NULL);
    return rc;
}

/* n training steps; their losses into loss (may be NULL). */
static int train(gptx_model *m, gptx_optimizer *opt, int n, float *loss) {
    int32_t tok[B * T + 1];
    for (int i = 0; i <= B * T; i++) tok[i] = (i * 7 + 3) % 67;
    for (int s = 0; s < n; s++) {
        float l = 0.0f;
        int rc = gptx_model_zero_grad(m);
        if (rc == GPTX_OK) rc = gptx_model_forward_backward(m, tok, tok + 1, B, T, 1.0f, &l);
        if (rc == GPTX_OK) rc = gptx_optimizer_step(opt, m, NULL);
        if (rc != GPTX_OK) return rc;
        if (loss) loss[s] = l;
    }
    return GPTX_OK;
}

/* The report of the profiled model's steps; *calls = their sum. */
static void check_report(gptx_context *ctx, int64_t *calls) {
    gptx_op_stat s[MAX_LINES];
    int n = 0, clock = 0;
    CHECK_OK(gptx_context_get_op_profile(ctx, s, MAX_LINES, &n, &clock));
    CHECK(clock == GPTX_PROFILE_DEVICE_EVENTS);
    gptx_model_config c = model_config();
    gptx_backend_storage st;
    gptx_context_storage(ctx, &st);
    expect_line want[32];
    int nwant = expect_step_lines(&c, ctx->ops, ctx->be, &st, want);
    check_profile_lines(s, n, want, nwant, STEPS);
    *calls = 0;
    for (int i = 0; i < n; i++) {
        CHECK(s[i].seconds > 0.0);
        *calls += s[i].calls;
    }
}

static int check_policy(const char *precision) {
    printf("%s\n", precision);
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    o.precision = cuda_test_precision_value(precision);
    o.cuda_graphs = 1;
    cuda_test_precision(NULL);
    gptx_context *ctx = NULL;
    int rc = gptx_context_create_on(&ctx, &o, &counted);
    if (rc == GPTX_ERR_UNSUPPORTED) return SKIP_EXIT;
    REQUIRE_OK(rc);
    gptx_model *pm = NULL, *um = NULL;
    gptx_optimizer *popt = NULL, *uopt = NULL;
    float ploss[STEPS], uloss[STEPS];
    int64_t captures = -1, replays = -1, calls = 0;

    REQUIRE_OK(gptx_context_set_profiling(ctx, 1));
    REQUIRE_OK(make_model(ctx, &pm, &popt));
    REQUIRE_OK(gptx_context_set_profiling(ctx, 0)); /* the next model is not profiled */
    REQUIRE_OK(make_model(ctx, &um, &uopt));
    /* the profiled model: one step, forgotten, then STEPS */
    REQUIRE_OK(train(pm, popt, 1, NULL));
    CHECK_OK(gptx_context_reset_op_profile(ctx)); /* drops its intervals unread */
    n_record = n_elapsed = 0;
    REQUIRE_OK(train(pm, popt, STEPS, ploss));
    CHECK_OK(gptx_context_graph_counts(ctx, &captures, &replays));
    CHECK(captures == 0 && replays == 0); /* every op issued, none hidden in a replay */
    CHECK(n_elapsed == 0);                /* nothing read before the report */
    int64_t recorded = n_record;
    check_report(ctx, &calls);
    printf("  %lld calls in %d steps: %lld events recorded, %lld intervals read\n",
           (long long)calls, STEPS, (long long)recorded, (long long)n_elapsed);
    CHECK(recorded == 2 * calls);
    CHECK(n_elapsed == calls);

    /* the unprofiled one, the same steps: graphs captured and replayed,
     * the same losses, nothing added to the report */
    REQUIRE_OK(train(um, uopt, 1, NULL));
    REQUIRE_OK(train(um, uopt, STEPS, uloss));
    CHECK_OK(gptx_context_graph_counts(ctx, &captures, &replays));
    CHECK(captures > 0 && replays > 0);
    CHECK(memcmp(ploss, uloss, sizeof ploss) == 0);
    CHECK(n_record == recorded);
    int64_t again = 0;
    check_report(ctx, &again);
    CHECK(again == calls);
    gptx_optimizer_destroy(uopt);
    gptx_model_destroy(um);
    gptx_optimizer_destroy(popt);
    gptx_model_destroy(pm);
    gptx_context_destroy(ctx);
    return 0;
}

int main(void) {
    if (!cuda_test_ops()) return 1;
    counted = *cuda_test_ops();
    counted.event_record = count_record;
    counted.event_elapsed = count_elapsed;
    int rc = check_policy("fp32");
    if (rc == SKIP_EXIT) return cuda_test_skip("test_cuda_profile");
    if (rc == 0) rc = check_policy("bf16");
    if (rc) return rc;
    return check_exit("test_cuda_profile");
}
