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
 * captured segment fails there as it would on a device, and invalidates the
 * capture (as does cudaFree).
 *
 * Two device-side hazards, through the backend table (graph_begin/end
 * bracketing matmul_backward's bias gradient, whose column sum takes the
 * backend's scratch; the emulation's smallest scratch is 4 KiB):
 *   - the scratch outgrows its block inside a capture: the graph's earlier
 *     nodes still use the old block, so it must not go back to the cache
 *     while the graph lives (a buffer allocated next of that size class
 *     would be overwritten by every replay);
 *   - out of device memory inside a capture (emulation only: a budget): the
 *     allocator must not release its cache then (waiting for the device
 *     invalidates the capture); the capture ends cleanly, the cache is
 *     released after it, graph_end asks for a rerun, the rerun succeeds, and
 *     the key is not captured again. */
#include <math.h>

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

/* ---- device-side hazards, through the backend table ------------------------------ */

#define HC 8   /* input width */
#define HOC 64 /* output width: the bias gradient's columns */
enum { N_SMALL = 1024, N_BIG = 8192 }; /* column-sum scratch 4 KiB (16 chunks of 64 rows: fits 4), 32 KiB */

#ifdef GPTX_TEST_CUDA_EMU
void gptx_cuda_emu_set_mem_limit(size_t bytes);
size_t gptx_cuda_emu_mem_used(void);
#endif

typedef struct {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    float *dout, *inp, *w, *dw, *db_small, *db_big; /* device */
    float *h_dout;                                   /* host (N_BIG, HOC) */
} hazard;

static float *hz_buffer(hazard *h, size_t n, const float *src) {
    void *p = NULL;
    CHECK_OK(h->ops->alloc(h->be, n * sizeof(float), &p));
    if (p && src) CHECK_OK(h->ops->upload_f32(h->be, p, src, n));
    if (p && !src) CHECK_OK(h->ops->fill_f32(h->be, p, 0.0f, n));
    return p;
}

static int hz_open(hazard *h) {
    memset(h, 0, sizeof *h);
    h->ops = cuda_test_ops();
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    o.precision = GPTX_PRECISION_FP32; /* dout as uploaded: fp32 activations */
    o.cuda_graphs = 1;
    cuda_test_precision(NULL);
    int rc = h->ops->create(&h->be, &o);
    if (rc != GPTX_OK) return rc;
    h->h_dout = malloc((size_t)N_BIG * HOC * sizeof *h->h_dout);
    float *in = malloc((size_t)N_BIG * HC * sizeof *in), w[HOC * HC];
    test_fill(h->h_dout, (size_t)N_BIG * HOC, 3, -1.0f, 1.0f);
    test_fill(in, (size_t)N_BIG * HC, 4, -1.0f, 1.0f);
    test_fill(w, HOC * HC, 5, -1.0f, 1.0f);
    h->dout = hz_buffer(h, (size_t)N_BIG * HOC, h->h_dout);
    h->inp = hz_buffer(h, (size_t)N_BIG * HC, in);
    h->w = hz_buffer(h, HOC * HC, w);
    h->dw = hz_buffer(h, HOC * HC, NULL);
    h->db_small = hz_buffer(h, HOC, NULL);
    h->db_big = hz_buffer(h, HOC, NULL);
    free(in);
    return GPTX_OK;
}

static void hz_close(hazard *h) {
    float *bufs[] = {h->dout, h->inp, h->w, h->dw, h->db_small, h->db_big};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) h->ops->free(h->be, bufs[i]);
    h->ops->destroy(h->be);
    free(h->h_dout);
}

/* db += column sums of the first n rows of dout (dw accumulates too) */
static int hz_op(hazard *h, int n) {
    return h->ops->matmul_backward(h->be, NULL, h->dw, n == N_BIG ? h->db_big : h->db_small,
                                   h->dout, h->inp, h->w, n, HC, HOC);
}

/* db (downloaded) == times x the column sums of n rows of dout */
static void hz_check_bias(hazard *h, int n, int times, const char *what) {
    float got[HOC];
    CHECK_OK(h->ops->download_f32(h->be, got, n == N_BIG ? h->db_big : h->db_small, HOC));
    size_t bad = 0;
    for (int c = 0; c < HOC; c++) {
        double want = 0.0, mag = 0.0;
        for (int r = 0; r < n; r++) {
            want += h->h_dout[(size_t)r * HOC + c];
            mag += fabs(h->h_dout[(size_t)r * HOC + c]);
        }
        bad += !(fabs(got[c] - times * want) <= 1e-5 * times * mag);
    }
    printf("  %s: %zu of %d bias-gradient columns off %d x their sum\n", what, bad, HOC, times);
    CHECK(bad == 0);
}

/* graph_begin; ops (small, then big if both); graph_end: *rerun, status */
static int hz_segment(hazard *h, uint64_t key, int both, int *replayed, int *rerun,
                      int *op_status) {
    *rerun = 0;
    *op_status = GPTX_OK;
    int rc = h->ops->graph_begin(h->be, 0, &key, 1, replayed);
    if (rc != GPTX_OK || *replayed) return rc;
    int st = hz_op(h, N_SMALL);
    if (st == GPTX_OK && both) st = hz_op(h, N_BIG);
    *op_status = st;
    return h->ops->graph_end(h->be, 0, st, rerun);
}

static void test_scratch_growth_in_capture(void) {
    hazard h;
    if (hz_open(&h) != GPTX_OK) {
        fprintf(stderr, "hazard backend: %s\n", gptx_last_error());
        check_failures++;
        return;
    }
    printf("scratch grown inside a capture:\n");
    int rep = 0, rerun = 0, st = 0;
    CHECK_OK(hz_segment(&h, 42, 0, &rep, &rerun, &st)); /* new key: runs */
    CHECK_OK(hz_segment(&h, 42, 1, &rep, &rerun, &st)); /* captured; the scratch grows */
    CHECK(!rep && !rerun && st == GPTX_OK);
    /* a buffer of the old scratch's size class, then a replay */
    float *u = NULL, got[1024];
    CHECK_OK(h.ops->alloc(h.be, sizeof got, (void **)&u));
    CHECK_OK(h.ops->fill_f32(h.be, u, 7.0f, 1024));
    CHECK_OK(hz_segment(&h, 42, 1, &rep, &rerun, &st));
    CHECK(rep == 1);
    CHECK_OK(h.ops->download_f32(h.be, got, u, 1024));
    size_t hit = 0;
    for (int i = 0; i < 1024; i++) hit += got[i] != 7.0f;
    printf("  a buffer allocated after the capture: %zu of 1024 values overwritten by the replay\n",
           hit);
    CHECK(hit == 0);
    hz_check_bias(&h, N_SMALL, 3, "small sum (run, captured, replayed)");
    hz_check_bias(&h, N_BIG, 2, "large sum (captured, replayed)");
    int64_t caps = 0, reps = 0;
    h.ops->graph_counts(h.be, &caps, &reps);
    CHECK(caps == 1 && reps == 1);
    h.ops->free(h.be, u);
    hz_close(&h);
}

#ifdef GPTX_TEST_CUDA_EMU
static void test_oom_in_capture(void) {
    hazard h;
    if (hz_open(&h) != GPTX_OK) {
        check_failures++;
        return;
    }
    printf("out of device memory inside a capture (emulated budget):\n");
    int rep = 0, rerun = 0, st = 0;
    CHECK_OK(hz_segment(&h, 43, 0, &rep, &rerun, &st)); /* new key: runs */
    void *spare = NULL; /* a cached block the release can give back */
    CHECK_OK(h.ops->alloc(h.be, 65536, &spare));
    h.ops->free(h.be, spare);
    gptx_cuda_emu_set_mem_limit(gptx_cuda_emu_mem_used()); /* nothing more from the device */
    int rc = hz_segment(&h, 43, 1, &rep, &rerun, &st); /* captured: the scratch cannot grow */
    printf("  in the capture: the large sum %s; graph_end %s, rerun %d\n", gptx_status_name(st),
           gptx_status_name(rc), rerun);
    CHECK(st == GPTX_ERR_NO_MEMORY);
    CHECK(rc == GPTX_OK && rerun == 1);
    CHECK_OK(hz_op(&h, N_SMALL)); /* the rerun lib/ makes, uncaptured */
    CHECK_OK(hz_op(&h, N_BIG));
    CHECK_OK(hz_segment(&h, 43, 1, &rep, &rerun, &st)); /* the key again: not captured */
    CHECK(!rep && !rerun && st == GPTX_OK);
    int64_t caps = -1, reps = -1;
    h.ops->graph_counts(h.be, &caps, &reps);
    CHECK(caps == 0 && reps == 0);
    hz_check_bias(&h, N_SMALL, 3, "small sum (run, rerun, run)");
    hz_check_bias(&h, N_BIG, 2, "large sum (rerun, run)");
    gptx_cuda_emu_set_mem_limit(0);
    hz_close(&h);
}
#endif

int main(void) {
    int rc = compare("fp32");
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip("test_cuda_graphs");
    REQUIRE_OK(rc);
    REQUIRE_OK(compare("bf16"));
    test_scratch_growth_in_capture();
#ifdef GPTX_TEST_CUDA_EMU
    test_oom_in_capture();
#else
    printf("out of memory inside a capture: emulation only (it needs a device budget)\n");
#endif
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
