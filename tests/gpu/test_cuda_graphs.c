/* CUDA-graph capture of the training step (context option cuda_graphs):
 * the same training run with graphs off and on must give the same bits,
 * and the capture bookkeeping must follow the (shapes, buffers) signature.
 * Model: 2 layers, C 32, 2 heads, V 67 (padded 80), T 16; fp32 and bf16.
 *
 *   phase 1  5 steps at B 2 (forward, backward, AdamW): with graphs on the
 *            forward and backward segments run normally in step 1, are
 *            captured in step 2 and replayed from step 3;
 *   phase 2  3 steps at B 1: a new signature, captured again;
 *   phase 3  3 steps at B 2 with one ignored target in each batch: the
 *            loss scale changes (fewer counted tokens), captured again;
 *   then     a forward pass without targets and the logits.
 * Every step's loss, the final parameters and the logits are compared bit
 * for bit between the two runs; the graphs-off context and the CPU report
 * no captures. On the emulation a capture records the launches (arguments
 * by value) and a replay runs them again; a synchronizing call inside a
 * captured segment fails there as it would on a device. */
#include "check.h"
#include "cuda_test_util.h"

#define V 67
#define VP 80
#define T 16
#define STEPS 11

static int make_model(gptx_context *ctx, gptx_model **m, gptx_optimizer **opt) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = V;
    c.padded_vocab_size = VP;
    c.context_length = T;
    c.n_layer = 2;
    c.n_head = 2;
    c.n_embd = 32;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-2f;
    int rc = gptx_model_create(m, ctx, &c);
    if (rc == GPTX_OK) rc = gptx_model_init_random(*m, 7);
    if (rc == GPTX_OK) rc = gptx_optimizer_create(opt, *m, &ao);
    return rc;
}

static int batch_of(int s) { return s >= 5 && s < 8 ? 1 : 2; }

/* The run of the header; losses (STEPS), params (all), logits (2 T VP),
 * captures after phases 1, 2 and 3 in caps[3]. */
static int train(gptx_context *ctx, float *losses, float **params, float *logits,
                 int64_t caps[3], int64_t *replays) {
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    int rc = make_model(ctx, &m, &opt);
    int32_t in[2 * T], tg[2 * T];
    for (int s = 0; s < STEPS && rc == GPTX_OK; s++) {
        int B = batch_of(s);
        for (int i = 0; i < B * T; i++) {
            in[i] = (s * 13 + i * 7) % V;
            tg[i] = (s * 5 + i * 3 + 1) % V;
        }
        if (s >= 8) tg[3] = -1; /* an ignored target: another loss scale */
        rc = gptx_model_zero_grad(m);
        if (rc == GPTX_OK) rc = gptx_model_forward_backward(m, in, tg, B, T, 1.0f, &losses[s]);
        if (rc == GPTX_OK) rc = gptx_optimizer_step(opt, m, NULL);
        if (rc == GPTX_OK && (s == 4 || s == 7 || s == 10))
            rc = gptx_context_graph_counts(ctx, &caps[s == 4 ? 0 : s == 7 ? 1 : 2], replays);
    }
    if (rc == GPTX_OK) rc = gptx_model_forward(m, in, NULL, 2, T, NULL);
    if (rc == GPTX_OK) rc = gptx_model_get_logits(m, logits, (size_t)2 * T * VP);
    size_t np = m ? gptx_model_num_parameters(m) : 0;
    *params = malloc((np ? np : 1) * sizeof **params);
    size_t off = 0;
    for (int i = 0; m && rc == GPTX_OK && i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        rc = gptx_model_tensor_info(m, i, &info);
        if (rc == GPTX_OK) rc = gptx_model_get_parameter(m, info.name, *params + off, info.numel);
        off += info.numel;
    }
    if (rc != GPTX_OK) fprintf(stderr, "training failed: %s\n", gptx_last_error());
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    return rc;
}

static gptx_context *graphs_context(const char *precision, int graphs, int *rc) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.precision = cuda_test_precision_value(precision);
    o.cuda_graphs = graphs;
    gptx_context *ctx = NULL;
    *rc = cuda_test_context_opts(&ctx, &o);
    return ctx;
}

static int compare(const char *precision) {
    int rc = GPTX_OK;
    gptx_context *off = graphs_context(precision, 0, &rc);
    if (rc != GPTX_OK) return rc;
    gptx_context *on = graphs_context(precision, 1, &rc);
    if (rc != GPTX_OK) {
        gptx_context_destroy(off);
        return rc;
    }
    float loss_off[STEPS], loss_on[STEPS];
    static float logits_off[2 * T * VP], logits_on[2 * T * VP];
    float *p_off = NULL, *p_on = NULL;
    int64_t caps_off[3] = {0}, caps_on[3] = {0}, rep_off = 0, rep_on = 0;
    CHECK_OK(train(off, loss_off, &p_off, logits_off, caps_off, &rep_off));
    CHECK_OK(train(on, loss_on, &p_on, logits_on, caps_on, &rep_on));
    size_t np = 0;
    {
        gptx_model *m = NULL;
        gptx_optimizer *opt = NULL;
        CHECK_OK(make_model(off, &m, &opt));
        np = m ? gptx_model_num_parameters(m) : 0;
        gptx_optimizer_destroy(opt);
        gptx_model_destroy(m);
    }
    CHECK(memcmp(loss_off, loss_on, sizeof loss_on) == 0);
    CHECK(np > 0 && memcmp(p_off, p_on, np * sizeof *p_on) == 0);
    CHECK(memcmp(logits_off, logits_on, sizeof logits_on) == 0);
    /* off: nothing captured; on: both segments captured in phase 1 and
     * replayed, and each signature change captured again */
    CHECK(caps_off[2] == 0 && rep_off == 0);
    /* per signature: run, capture, replay; two segments: 2 captures per
     * phase, 2 x (5 - 2) + 2 x (3 - 2) + 2 x (3 - 2) replays */
    CHECK(caps_on[0] == 2 && caps_on[1] == 4 && caps_on[2] == 6);
    CHECK(rep_on == 10);
    printf("%s: losses %.6f .. %.6f bitwise equal with graphs off/on; captures %lld/%lld/%lld, "
           "replays %lld\n",
           precision, (double)loss_on[0], (double)loss_on[STEPS - 1], (long long)caps_on[0],
           (long long)caps_on[1], (long long)caps_on[2], (long long)rep_on);
    free(p_off);
    free(p_on);
    gptx_context_destroy(off);
    gptx_context_destroy(on);
    return GPTX_OK;
}

int main(void) {
    int rc = compare("fp32");
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip("test_cuda_graphs");
    REQUIRE_OK(rc);
    REQUIRE_OK(compare("bf16"));
    /* the CPU ignores the option and captures nothing; 2 is invalid */
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.cuda_graphs = 1;
    gptx_context *cpu = NULL;
    CHECK_OK(gptx_context_create(&cpu, &o));
    int64_t c = -1, r = -1;
    CHECK_OK(gptx_context_graph_counts(cpu, &c, &r));
    CHECK(c == 0 && r == 0);
    gptx_context_destroy(cpu);
    o.cuda_graphs = 2;
    CHECK_STATUS(gptx_context_create(&cpu, &o), GPTX_ERR_INVALID);
    return check_exit("test_cuda_graphs");
}
