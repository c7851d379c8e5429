/* The pure-bf16 policy (GPTX_PRECISION_BF16_PURE) on the CUDA backend:
 * parameters and AdamW moments stored bf16, the update computed in fp32 and
 * rounded to nearest even (RNE) or stochastically (SR), gradients fp32.
 * Model: 2 layers, C 32, 2 heads, V 67 (padded 80), B 2, T 16.
 *
 *   storage    a value set is read back rounded to bf16 (nearest even); the
 *              parameters and moments take half the bytes of bf16 mixed;
 *   training   16 steps at lr 1e-2, CPU fp32 vs pure RNE vs pure SR: the
 *              relative loss gap at most 5e-2 at every step (bf16 weights
 *              carry 8 significant bits: 2^-9 relative per rounding, and the
 *              activations are bf16 too; the emulation measured 2.3e-2) and
 *              the loss falls (mean of the last 4 steps < 0.95 x the first 4);
 *   small      4 steps at lr 1e-5, far below half an ulp of most weights:
 *   updates    with RNE the weight matrices barely move, with SR they move
 *              as in fp32 in expectation. Measured as the projection of each
 *              run's change onto the CPU fp32 run's change, over the 2-D
 *              tensors: r = sum(d . d_cpu) / sum(d_cpu . d_cpu). Pass: RNE
 *              r < 0.5, SR r in [0.7, 1.3];
 *   repeat     an SR run repeated with the same rounding seed gives the same
 *              bits; another seed gives other bits;
 *   checkpoint a training file records bf16_pure, stochastic rounding and the
 *              seed; it loads into a CPU model as the widened bf16 values, and
 *              resuming from it takes the next SR step bit for bit like the
 *              run that continued. */
#include <unistd.h>

#include "bf16_round.h"
#include "check.h"
#include "cuda_test_util.h"
#include "policy_util.h"

static int pure_context(gptx_context **ctx, int stochastic) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.precision = GPTX_PRECISION_BF16_PURE;
    o.stochastic_rounding = stochastic;
    return cuda_test_context_opts(ctx, &o);
}

static void test_storage(gptx_context *rne, gptx_context *mixed) {
    policy_run a, b;
    size_t a0 = policy_allocated(rne), b0 = policy_allocated(mixed);
    NEED(policy_run_open(&a, rne, 1e-3f, 0));
    NEED(policy_run_open(&b, mixed, 1e-3f, 0));
    size_t pa = policy_allocated(rne) - a0, pb = policy_allocated(mixed) - b0;
    size_t np = gptx_model_num_parameters(a.m);
    /* pure: 2 (params) + 4 (grads) + 2 + 2 (moments); mixed: 4 + 4 + 8 + 2 (copy) */
    printf("storage: %zu parameters, model + optimizer %zu bytes (pure) vs %zu (bf16 mixed)\n", np,
           pa, pb);
    CHECK(pa < pb && pa <= np * 10 + 4096 && pb >= np * 18);
    float v[32], back[32];
    test_fill(v, 32, 5, -3, 3);
    CHECK_OK(gptx_model_set_parameter(a.m, "ln_f.weight", v, 32));
    CHECK_OK(gptx_model_get_parameter(a.m, "ln_f.weight", back, 32));
    int exact = 1;
    for (int i = 0; i < 32; i++) exact &= back[i] == gptx_bf16_widen(gptx_bf16_round_nearest(v[i]));
    CHECK(exact);
    policy_run_close(&a);
    policy_run_close(&b);
}

static void test_training(gptx_context *cpu, gptx_context *rne, gptx_context *sr) {
    enum { STEPS = 16 };
    float lc[STEPS], lr[STEPS], ls[STEPS];
    gptx_context *ctxs[3] = {cpu, rne, sr};
    float *out[3] = {lc, lr, ls};
    for (int k = 0; k < 3; k++) {
        policy_run r;
        NEED(policy_run_open(&r, ctxs[k], 1e-2f, 11));
        CHECK_OK(policy_run_steps(&r, 0, STEPS, out[k]));
        policy_run_close(&r);
    }
    printf("training, lr 1e-2:\nstep   cpu fp32    pure rne    pure sr\n");
    for (int s = 0; s < STEPS; s++)
        printf("%4d   %.6f    %.6f    %.6f\n", s, (double)lc[s], (double)lr[s], (double)ls[s]);
    double gr = policy_max_gap(lr, lc, STEPS), gs = policy_max_gap(ls, lc, STEPS);
    printf("loss gap, max over steps, relative to the CPU: rne %.3g, sr %.3g (tol 5e-2)\n", gr, gs);
    CHECK(gr <= 5e-2);
    CHECK(gs <= 5e-2);
    /* the losses are per batch, so noisy: mean of the last 4 against the first 4 */
    CHECK(policy_mean4(lc + STEPS - 4) < 0.95 * policy_mean4(lc));
    CHECK(policy_mean4(lr + STEPS - 4) < 0.95 * policy_mean4(lr));
    CHECK(policy_mean4(ls + STEPS - 4) < 0.95 * policy_mean4(ls));
}

static void test_small_updates(gptx_context *cpu, gptx_context *rne, gptx_context *sr) {
    enum { STEPS = 4 };
    const float lr = 1e-5f;
    gptx_context *ctxs[3] = {cpu, rne, sr};
    float *before[3], *after[3];
    unsigned char *mat = NULL;
    size_t n = 0;
    policy_run keep; /* the SR run, for the checkpoint test */
    for (int k = 0; k < 3; k++) {
        policy_run r;
        NEED(policy_run_open(&r, ctxs[k], lr, 11));
        n = gptx_model_num_parameters(r.m);
        before[k] = policy_params(r.m, k == 0 ? &mat : NULL);
        CHECK_OK(policy_run_steps(&r, 0, STEPS, NULL));
        after[k] = policy_params(r.m, NULL);
        if (k == 2)
            keep = r;
        else
            policy_run_close(&r);
    }
    double r_rne = policy_projection(after[1], before[1], after[0], before[0], mat, n);
    double r_sr = policy_projection(after[2], before[2], after[0], before[0], mat, n);
    size_t moved_rne = 0, moved_sr = 0, nmat = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mat[i]) continue;
        nmat++;
        moved_rne += after[1][i] != before[1][i];
        moved_sr += after[2][i] != before[2][i];
    }
    printf("small updates, lr %g, %d steps, %zu matrix weights: change projected on fp32's: "
           "rne %.3f (moved %zu), sr %.3f (moved %zu); pass rne < 0.5, sr in [0.7, 1.3]\n",
           (double)lr, STEPS, nmat, r_rne, moved_rne, r_sr, moved_sr);
    CHECK(r_rne < 0.5);
    CHECK(r_sr >= 0.7 && r_sr <= 1.3);

    /* repeat: same seed, same bits; another seed, other bits */
    for (int seed = 11; seed <= 12; seed++) {
        policy_run r;
        NEED(policy_run_open(&r, sr, lr, (uint64_t)seed));
        CHECK_OK(policy_run_steps(&r, 0, STEPS, NULL));
        float *p = policy_params(r.m, NULL);
        int same = memcmp(p, after[2], n * sizeof *p) == 0;
        printf("sr rerun with rounding seed %d: %s\n", seed, same ? "same bits" : "other bits");
        CHECK(seed == 11 ? same : !same);
        free(p);
        policy_run_close(&r);
    }

    /* checkpoint of the SR run after STEPS steps */
    char path[] = "/tmp/gptx_pure_ckpt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = keep.opt;
    CHECK_OK(gptx_checkpoint_save(keep.m, &st, path));
    int prec = 0;
    CHECK_OK(gptx_checkpoint_precision(path, &prec));
    CHECK(prec == GPTX_PRECISION_BF16_PURE);
    /* into a CPU model: the bf16 values, widened */
    gptx_model *mc = NULL;
    CHECK_OK(gptx_model_load(&mc, cpu, path));
    if (mc) {
        float *pc = policy_params(mc, NULL);
        CHECK(memcmp(pc, after[2], n * sizeof *pc) == 0);
        free(pc);
    }
    gptx_model_destroy(mc);
    /* resume into a fresh SR run (created with another seed: the file's wins) */
    policy_run res;
    NEED(policy_run_open(&res, sr, 0.5f, 99));
    gptx_train_state st2;
    gptx_train_state_init(&st2);
    st2.optimizer = res.opt;
    CHECK_OK(gptx_checkpoint_load(res.m, &st2, path));
    CHECK_OK(policy_run_steps(&keep, STEPS, 1, NULL));
    CHECK_OK(policy_run_steps(&res, STEPS, 1, NULL));
    float *pk = policy_params(keep.m, NULL), *pr = policy_params(res.m, NULL);
    int resumed = memcmp(pk, pr, n * sizeof *pk) == 0;
    CHECK(resumed);
    printf("checkpoint: records bf16_pure, loads into fp32 exactly, resumed SR step %s\n",
           resumed ? "bitwise equal" : "DIFFERS");
    free(pk);
    free(pr);
    remove(path);
    policy_run_close(&res);
    policy_run_close(&keep);
    for (int k = 0; k < 3; k++) {
        free(before[k]);
        free(after[k]);
    }
    free(mat);
}

int main(void) {
    policy_make_stream();
    gptx_context *cpu = NULL, *rne = NULL, *sr = NULL, *mixed = NULL;
    int rc = pure_context(&rne, 0);
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip("test_cuda_pure");
    REQUIRE_OK(rc);
    REQUIRE_OK(pure_context(&sr, 1));
    REQUIRE_OK(cuda_test_context(&mixed, "bf16"));
    REQUIRE_OK(cuda_test_cpu_context(&cpu));
    CHECK(gptx_context_precision(rne) == GPTX_PRECISION_BF16_PURE);
    printf("pure bf16 on %s\n", CUDA_TEST_KIND);
    test_storage(rne, mixed);
    test_training(cpu, rne, sr);
    test_small_updates(cpu, rne, sr);
    gptx_context_destroy(cpu);
    gptx_context_destroy(rne);
    gptx_context_destroy(sr);
    gptx_context_destroy(mixed);
    return check_exit("test_cuda_pure");
}
