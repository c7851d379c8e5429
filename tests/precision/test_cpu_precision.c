/* The bf16 and bf16_pure policies of the CPU backend through the public API,
 * against the fp32 reference on the same backend (docs/precision.md). Model
 * and stream: tests/precision/policy_util.h.
 *
 *   storage     bytes per parameter of model + optimizer: fp32 16, bf16 18
 *               (4 master + 4 gradient + 8 moments + 2 copy), bf16_pure 10;
 *   logits      one forward: masked columns -inf on both, max |d| at most
 *               2e-2 of max |logit| (bf16 keeps 8 significant bits);
 *   training    50 steps at lr 3e-3: per-step loss gap to fp32 at most 1e-2
 *               relative (bf16, stochastic bf16_pure) and 1e-1 (bf16_pure
 *               rounding to nearest, which drops the updates below half an
 *               ulp and drifts away: 5.8e-2 after 50 steps, against 2.4e-3
 *               with stochastic rounding); the losses fall;
 *   small       4 steps at lr 1e-5 under bf16_pure: the change of the weight
 *   updates     matrices projected on fp32's: round to nearest < 0.5 (most
 *               updates are below half an ulp and lost), stochastic rounding
 *               in [0.7, 1.3] (kept in expectation);
 *   bits        a bf16 run gives the same parameters bit for bit when
 *               repeated and on 1, 2 or 3 threads;
 *   checkpoint  a training file written under bf16 or bf16_pure records the
 *               policy, loads into an fp32 model as the stored values, and a
 *               run resumed from it takes its next steps bit for bit like the
 *               run that continued.
 * Exits 77 in builds without oneDNN (the policies are unavailable). */
#include <unistd.h>

#include "policy_util.h"

static int make_ctx(gptx_context **ctx, int precision, int stochastic, int threads) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = threads;
    o.precision = precision;
    o.stochastic_rounding = stochastic;
    return gptx_context_create(ctx, &o);
}

static void test_storage(gptx_context *const ctx[3]) {
    static const char *const names[3] = {"fp32", "bf16", "bf16_pure"};
    static const double per_param[3] = {16, 18, 10};
    for (int k = 0; k < 3; k++) {
        size_t before = policy_allocated(ctx[k]);
        policy_run r;
        NEED(policy_run_open(&r, ctx[k], 1e-3f, 0));
        size_t np = gptx_model_num_parameters(r.m);
        double bytes = (double)(policy_allocated(ctx[k]) - before) / (double)np;
        printf("storage %-9s %.2f bytes per parameter (expected %.0f)\n", names[k], bytes,
               per_param[k]);
        CHECK(bytes >= per_param[k] && bytes < per_param[k] + 0.5);
        policy_run_close(&r);
    }
}

static void test_logits(gptx_context *fp32, gptx_context *bf16) {
    enum { B = POLICY_B, T = POLICY_T, VP = POLICY_VP };
    policy_run a, b;
    NEED(policy_run_open(&a, fp32, 1e-3f, 0));
    NEED(policy_run_open(&b, bf16, 1e-3f, 0));
    int32_t in[B * T];
    memcpy(in, policy_stream, sizeof in);
    static float la[B * T * VP], lb[B * T * VP];
    CHECK_OK(gptx_model_forward(a.m, in, NULL, B, T, NULL));
    CHECK_OK(gptx_model_forward(b.m, in, NULL, B, T, NULL));
    CHECK_OK(gptx_model_get_logits(a.m, la, B * T * VP));
    CHECK_OK(gptx_model_get_logits(b.m, lb, B * T * VP));
    double worst = 0, scale = 0;
    int masks = 1;
    for (int i = 0; i < B * T * VP; i++) {
        if (i % VP >= POLICY_V) {
            masks &= isinf(la[i]) && la[i] < 0 && la[i] == lb[i];
            continue;
        }
        worst = fmax(worst, fabs((double)la[i] - lb[i]));
        scale = fmax(scale, fabs((double)la[i]));
    }
    printf("logits: bf16 vs fp32 max |d| %.3g = %.2e of max |logit|; masked columns -inf: %s\n",
           worst, worst / scale, masks ? "yes" : "NO");
    CHECK(masks && worst <= 2e-2 * scale);
    policy_run_close(&a);
    policy_run_close(&b);
}

static void test_training(gptx_context *const ctx[4]) {
    enum { STEPS = 50 };
    static const char *const names[4] = {"fp32", "bf16", "pure rne", "pure sr"};
    float loss[4][STEPS];
    for (int k = 0; k < 4; k++) {
        policy_run r;
        NEED(policy_run_open(&r, ctx[k], 3e-3f, 11));
        CHECK_OK(policy_run_steps(&r, 0, STEPS, loss[k]));
        policy_run_close(&r);
    }
    printf("training, lr 3e-3, loss per step (every 5th) and the gap to fp32:\n"
           "step      fp32       bf16 (gap)            pure rne (gap)        pure sr (gap)\n");
    for (int s = 0; s < STEPS; s += 5) {
        printf("%4d  %.6f", s, (double)loss[0][s]);
        for (int k = 1; k < 4; k++)
            printf("   %.6f (%+.1e)", (double)loss[k][s],
                   ((double)loss[k][s] - loss[0][s]) / loss[0][s]);
        printf("\n");
    }
    static const double tol[4] = {0, 1e-2, 1e-1, 1e-2};
    for (int k = 1; k < 4; k++) {
        double g = policy_max_gap(loss[k], loss[0], STEPS);
        printf("largest relative loss gap over %d steps, %s: %.3g (tolerance %.0e)\n", STEPS,
               names[k], g, tol[k]);
        CHECK(g <= tol[k]);
    }
    for (int k = 0; k < 4; k++) CHECK(policy_mean4(loss[k] + STEPS - 4) < 0.8 * policy_mean4(loss[k]));
}

static void test_small_updates(gptx_context *fp32, gptx_context *rne, gptx_context *sr) {
    enum { STEPS = 4 };
    gptx_context *ctx[3] = {fp32, rne, sr};
    float *before[3], *after[3];
    unsigned char *mat = NULL;
    size_t n = 0;
    for (int k = 0; k < 3; k++) {
        policy_run r;
        NEED(policy_run_open(&r, ctx[k], 1e-5f, 11));
        n = gptx_model_num_parameters(r.m);
        before[k] = policy_params(r.m, k == 0 ? &mat : NULL);
        CHECK_OK(policy_run_steps(&r, 0, STEPS, NULL));
        after[k] = policy_params(r.m, NULL);
        policy_run_close(&r);
    }
    double p_rne = policy_projection(after[1], before[1], after[0], before[0], mat, n);
    double p_sr = policy_projection(after[2], before[2], after[0], before[0], mat, n);
    size_t moved[3] = {0}, nmat = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mat[i]) continue;
        nmat++;
        for (int k = 0; k < 3; k++) moved[k] += after[k][i] != before[k][i];
    }
    printf("small updates, lr 1e-5, %d steps, %zu matrix weights: change projected on fp32's: "
           "rne %.3f (%zu moved), sr %.3f (%zu moved), fp32 moved %zu; pass rne < 0.5, sr in "
           "[0.7, 1.3]\n",
           STEPS, nmat, p_rne, moved[1], p_sr, moved[2], moved[0]);
    CHECK(p_rne < 0.5);
    CHECK(p_sr >= 0.7 && p_sr <= 1.3);
    for (int k = 0; k < 3; k++) free(before[k]), free(after[k]);
    free(mat);
}

static float *params_after(gptx_context *ctx, int steps) {
    policy_run r;
    if (policy_run_open(&r, ctx, 3e-3f, 5) != GPTX_OK) return NULL;
    float *p = policy_run_steps(&r, 0, steps, NULL) == GPTX_OK ? policy_params(r.m, NULL) : NULL;
    policy_run_close(&r);
    return p;
}

static void test_bits(void) {
    int differ = 0;
    float *ref = NULL;
    size_t n = 0;
    for (int threads = 1; threads <= 3; threads++) {
        for (int rep = 0; rep < (threads == 2 ? 2 : 1); rep++) {
            gptx_context *ctx = NULL;
            NEED(make_ctx(&ctx, GPTX_PRECISION_BF16, 0, threads));
            policy_run r;
            NEED(policy_run_open(&r, ctx, 3e-3f, 5));
            n = gptx_model_num_parameters(r.m);
            policy_run_close(&r);
            float *p = params_after(ctx, 5);
            CHECK(p != NULL);
            if (!ref) {
                ref = p;
            } else if (p) {
                differ |= memcmp(p, ref, n * sizeof *p) != 0;
                free(p);
            }
            gptx_context_destroy(ctx);
        }
    }
    printf("bf16: 5 steps on 1, 2 (twice) and 3 threads: %s\n",
           differ ? "DIFFER" : "the same parameters bit for bit");
    CHECK(!differ);
    free(ref);
}

static void test_checkpoint(gptx_context *ctx, gptx_context *fp32, int precision) {
    char path[] = "/tmp/gptx_cpu_bf16_ckpt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0) return;
    close(fd);
    policy_run keep, res;
    NEED(policy_run_open(&keep, ctx, 3e-3f, 7));
    CHECK_OK(policy_run_steps(&keep, 0, 3, NULL));
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = keep.opt;
    CHECK_OK(gptx_checkpoint_save(keep.m, &st, path));
    int recorded = -1;
    CHECK_OK(gptx_checkpoint_precision(path, &recorded));
    CHECK(recorded == precision);
    size_t n = gptx_model_num_parameters(keep.m);
    float *saved = policy_params(keep.m, NULL);
    gptx_model *m32 = NULL;
    CHECK_OK(gptx_model_load(&m32, fp32, path));
    if (m32) {
        float *p32 = policy_params(m32, NULL);
        CHECK(memcmp(p32, saved, n * sizeof *p32) == 0);
        free(p32);
    }
    gptx_model_destroy(m32);
    NEED(policy_run_open(&res, ctx, 0.5f, 99)); /* the file's hyperparameters win */
    gptx_train_state st2;
    gptx_train_state_init(&st2);
    st2.optimizer = res.opt;
    CHECK_OK(gptx_checkpoint_load(res.m, &st2, path));
    CHECK_OK(policy_run_steps(&keep, 3, 3, NULL));
    CHECK_OK(policy_run_steps(&res, 3, 3, NULL));
    float *pk = policy_params(keep.m, NULL), *pr = policy_params(res.m, NULL);
    int same = memcmp(pk, pr, n * sizeof *pk) == 0;
    printf("checkpoint under %s: recorded, loads into fp32 exactly, 3 resumed steps %s\n",
           gptx_precision_name(precision), same ? "bitwise equal" : "DIFFER");
    CHECK(same);
    free(saved), free(pk), free(pr);
    remove(path);
    policy_run_close(&keep);
    policy_run_close(&res);
}

int main(void) {
    if (!(gptx_features() & GPTX_FEATURE_DNNL)) {
        printf("test_cpu_precision: this build has no oneDNN: no bf16 policies to test\n");
        return 77;
    }
    policy_make_stream();
    gptx_context *fp32 = NULL, *bf16 = NULL, *rne = NULL, *sr = NULL;
    REQUIRE_OK(make_ctx(&fp32, GPTX_PRECISION_FP32, 0, 2));
    REQUIRE_OK(make_ctx(&bf16, GPTX_PRECISION_BF16, 0, 2));
    REQUIRE_OK(make_ctx(&rne, GPTX_PRECISION_BF16_PURE, 0, 2));
    REQUIRE_OK(make_ctx(&sr, GPTX_PRECISION_BF16_PURE, 1, 2));
    gptx_context_info info;
    gptx_context_info_init(&info);
    CHECK_OK(gptx_context_get_info(bf16, &info));
    printf("cpu bf16 policies: products %s, bf16 in hardware: %s\n", info.products,
           info.bf16_native ? "yes" : "no (emulated)");
    gptx_context *three[3] = {fp32, bf16, rne}, *four[4] = {fp32, bf16, rne, sr};
    test_storage(three);
    test_logits(fp32, bf16);
    test_training(four);
    test_small_updates(fp32, rne, sr);
    test_bits();
    test_checkpoint(bf16, fp32, GPTX_PRECISION_BF16);
    test_checkpoint(sr, fp32, GPTX_PRECISION_BF16_PURE);
    gptx_context_destroy(fp32);
    gptx_context_destroy(bf16);
    gptx_context_destroy(rne);
    gptx_context_destroy(sr);
    return check_exit("test_cpu_precision");
}
