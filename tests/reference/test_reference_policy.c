/* The PyTorch float64 reference fixtures (tests/reference, format in its
 * README.md) through a backend's precision policies: fp32, tf32 (CUDA only),
 * bf16 (mixed: bf16 activations and weight copy, fp32 master weights and
 * moments) and bf16_pure (CPU here: bf16 parameters and moments too). Built
 * twice: test_reference_cpu (the CPU backend, tests/reference) and
 * test_reference_cuda(_emu) (GPTX_TEST_POLICY_CUDA, tests/gpu).
 *
 *   usage: test_reference_<backend> [--precision NAME|all] FIXTURE...
 *
 * Each fixture also records PyTorch's own bf16 error on it (torch.autocast
 * on the CPU, bf16 products with fp32 master weights: make_fixtures.py);
 * under bf16 the logits error must be no larger than autocast's, and both
 * are printed side by side.
 *
 * Same procedure as tests/reference/test_reference.c: load the params, forward
 * with targets and backward(1), compare logits, loss and every gradient; then
 * n_steps AdamW steps on the same batch, comparing each step's loss and the
 * final parameters. b = reference, a = CUDA; NaN fails everything.
 *
 * Tolerances, per precision (fp32 = the CPU test's; bf16/tf32 scaled to the
 * rounding of stored activations / product inputs, 2^-8 / 2^-11, with margin
 * over the errors the CPU emulation of the backend shows; bf16 mixed on the
 * emulation, worst fixture: logits 2.7e-3, gradients 1.5e-2, final 1.9e-2):
 *                        fp32      tf32      bf16    bf16_pure
 *   logits |a - b|       1e-4      2e-3      2e-2    5e-2     (b = -inf needs a = -inf)
 *   loss rel             1e-5      5e-4      5e-3    1e-2
 *   gradients            1e-4      5e-3      5e-2    1e-1     max|a - b| / max|b| per tensor
 *   step losses rel      1e-4      1e-3      1e-2    2e-2
 *   final params norm    1e-4      2e-2      6e-2    1e-1     ||a - b|| / ||b|| per tensor
 *   final elementwise    1e-4 max(|b|, 1e-2) + 2e-2 lr (fp32 only; key bias
 *                        [C, 2C) of c_attn.bias: 0.1 lr n_steps)
 * The key bias is left out of the norms: it has no gradient, only round-off
 * that AdamW amplifies (see tests/reference/README.md). AdamW amplifies
 * the products' rounding the same way wherever a gradient is small: with
 * lr 3e-3 over 10 steps, 1 % of the elements moving the other way is a 1e-2
 * relative change, hence the loose final-parameter bounds below fp32
 * (emulation, worst fixture: tf32 6.8e-3, bf16 1.9e-2). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "fixture.h"
#include "fixture_gptx.h"

#ifdef GPTX_TEST_POLICY_CUDA
#include "cuda_test_util.h"
#define POLICY_KIND CUDA_TEST_KIND
static int policy_context(gptx_context **ctx, const char *precision) {
    return cuda_test_context(ctx, precision);
}
static int policy_skip(void) { return cuda_test_skip("test_reference_cuda"); }
static void policy_done(void) { cuda_test_precision(NULL); }
#else
#define POLICY_KIND "the cpu backend"
static int policy_context(gptx_context **ctx, const char *precision) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 2;
    o.precision = gptx_precision_from_name(precision ? precision : "fp32");
    return gptx_context_create(ctx, &o);
}
static int policy_skip(void) {
    printf("test_reference_cpu: no bf16 policies in this build (no oneDNN)\n");
    return 77;
}
static void policy_done(void) {}
#endif

typedef struct {
    const char *precision;
    double logits_abs, loss_rel, grad_rel, step_rel, final_norm, final_elem;
} tolerances;

static const tolerances TOLS[] = {
    {"fp32", 1e-4, 1e-5, 1e-4, 1e-4, 1e-4, 1e-4},
    {"tf32", 2e-3, 5e-4, 5e-3, 1e-3, 2e-2, 0},
    {"bf16", 2e-2, 5e-3, 5e-2, 1e-2, 6e-2, 0},
    {"bf16_pure", 5e-2, 1e-2, 1e-1, 2e-2, 1e-1, 0},
};

/* make_fixtures.py's yardstick/autocast_bf16: the C test's measures of
 * PyTorch's bf16 autocast run against the same float64 reference */
enum {
    YS_LOGITS,
    YS_LOSS,
    YS_GRAD,
    YS_STEP,
    YS_FINAL_REL,
    YS_FINAL_RATIO,
    YS_FINAL_NORM,
    YS_LOGITS_RMS, /* ||a - b|| / ||b|| over the finite logits */
    YS_COUNT
};


static double worse(double acc, double v) {
    return isnan(v) || isnan(acc) ? NAN : v > acc ? v : acc;
}

static int is_key_bias(const char *name, size_t k, size_t numel) {
    size_t nl = strlen(name);
    return nl > 17 && strcmp(name + nl - 17, ".attn.c_attn.bias") == 0 && k >= numel / 3 &&
           k < 2 * numel / 3;
}

static int run_fixture(const char *path, const tolerances *tol) {
    char err[512];
    fixture fx;
    if (fixture_load(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        return 1;
    }
    const char *label = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int fails = 0;
    const fixture_entry *ecfg = fixture_get(&fx, "config", FIXTURE_I32, CF_COUNT, err, sizeof err);
    const fixture_entry *ehy = fixture_get(&fx, "hyper", FIXTURE_F32, HY_COUNT, err, sizeof err);
    if (!ecfg || !ehy) {
        fprintf(stderr, "%s: bad fixture\n", label);
        fixture_free(&fx);
        return 1;
    }
    const int32_t *cf = ecfg->i32;
    const float *hy = ehy->f32;
    int B = cf[CF_B], T = cf[CF_T], Vp = cf[CF_VP], n_steps = cf[CF_STEPS];
    size_t BT = (size_t)B * T, nlog = BT * (size_t)Vp;
    const fixture_entry *einp = fixture_get(&fx, "inputs", FIXTURE_I32, BT, err, sizeof err);
    const fixture_entry *etgt = fixture_get(&fx, "targets", FIXTURE_I32, BT, err, sizeof err);
    const fixture_entry *elog = fixture_get(&fx, "logits", FIXTURE_F32, nlog, err, sizeof err);
    const fixture_entry *eloss = fixture_get(&fx, "loss", FIXTURE_F32, 1, err, sizeof err);
    const fixture_entry *esteps =
        fixture_get(&fx, "step_losses", FIXTURE_F32, (size_t)n_steps, err, sizeof err);
    if (!einp || !etgt || !elog || !eloss || !esteps) {
        fprintf(stderr, "%s: bad fixture: %s\n", label, err);
        fixture_free(&fx);
        return 1;
    }

    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    float *buf = NULL, *logits = malloc(nlog * sizeof *logits);
    double logits_abs = 0, loss_rel = 0, grad_rel = 0, step_rel = 0, final_norm = 0, final_elem = 0;
    double logits_dd = 0, logits_bb = 0;
    int rc = policy_context(&ctx, tol->precision);
    if (rc != GPTX_OK) {
        fprintf(stderr, "%s: %s context: %s\n", label, tol->precision, gptx_last_error());
        fails++;
        goto done;
    }
    gptx_model_config cfg;
    fixture_model_config(&cfg, cf, hy);
    if ((rc = gptx_model_create(&m, ctx, &cfg)) != GPTX_OK) {
        fprintf(stderr, "%s: model: %s\n", label, gptx_last_error());
        fails++;
        goto done;
    }
    buf = malloc(gptx_model_num_parameters(m) * sizeof *buf);
    /* parameters */
    for (int i = 0; i < fx.n_entries; i++) {
        const fixture_entry *e = &fx.entries[i];
        if (strncmp(e->name, "param/", 6) == 0)
            CHECK_OK(gptx_model_set_parameter(m, e->name + 6, e->f32, e->numel));
    }
    float loss = 0;
    CHECK_OK(gptx_model_zero_grad(m));
    CHECK_OK(gptx_model_forward(m, einp->i32, etgt->i32, B, T, &loss));
    CHECK_OK(gptx_model_get_logits(m, logits, nlog));
    for (size_t k = 0; k < nlog; k++) {
        float b = elog->f32[k], a = logits[k];
        if (isinf(b) || isinf(a)) {
            if (a != b) {
                fails++;
                if (fails < 5)
                    fprintf(stderr, "%s: logits[%zu] %g, reference %g\n", label, k, a, b);
            }
            continue;
        }
        logits_abs = worse(logits_abs, fabs((double)a - b));
        logits_dd += ((double)a - b) * ((double)a - b);
        logits_bb += (double)b * b;
    }
    double logits_rms = sqrt(logits_dd / (logits_bb > 0 ? logits_bb : 1));
    loss_rel = fabs((double)loss - eloss->f32[0]) / fabs(eloss->f32[0]);
    CHECK_OK(gptx_model_backward(m, 1.0f));
    for (int i = 0; i < fx.n_entries; i++) {
        const fixture_entry *e = &fx.entries[i];
        if (strncmp(e->name, "grad/", 5) != 0) continue;
        CHECK_OK(gptx_model_get_gradient(m, e->name + 5, buf, e->numel));
        double gmax = 0, dmax = 0;
        for (size_t k = 0; k < e->numel; k++) {
            gmax = fmax(gmax, fabs(e->f32[k]));
            dmax = worse(dmax, fabs((double)buf[k] - e->f32[k]));
        }
        grad_rel = worse(grad_rel, dmax / fmax(gmax, 1e-6));
    }

    gptx_adamw_options ao;
    fixture_adamw_options(&ao, hy);
    CHECK_OK(gptx_optimizer_create(&opt, m, &ao));
    for (int i = 0; i < fx.n_entries; i++) {
        const fixture_entry *e = &fx.entries[i];
        if (strncmp(e->name, "param/", 6) == 0)
            CHECK_OK(gptx_model_set_parameter(m, e->name + 6, e->f32, e->numel));
    }
    for (int s = 0; s < n_steps && opt; s++) {
        float sl = 0;
        CHECK_OK(gptx_model_zero_grad(m));
        CHECK_OK(gptx_model_forward(m, einp->i32, etgt->i32, B, T, &sl));
        CHECK_OK(gptx_model_backward(m, 1.0f));
        CHECK_OK(gptx_optimizer_step(opt, m, NULL));
        step_rel = worse(step_rel, fabs((double)sl - esteps->f32[s]) / fabs(esteps->f32[s]));
    }
    for (int i = 0; i < fx.n_entries; i++) {
        const fixture_entry *e = &fx.entries[i];
        if (strncmp(e->name, "final/", 6) != 0) continue;
        const char *name = e->name + 6;
        CHECK_OK(gptx_model_get_parameter(m, name, buf, e->numel));
        double dd = 0, bb = 0;
        for (size_t k = 0; k < e->numel; k++) {
            double b = e->f32[k], d = fabs((double)buf[k] - b);
            int key = is_key_bias(name, k, e->numel);
            if (!key) {
                dd += d * d;
                bb += b * b;
            }
            if (tol->final_elem > 0) {
                double t = key ? 0.1 * hy[HY_LR] * n_steps
                               : tol->final_elem * fmax(fabs(b), 1e-2) + 2e-2 * hy[HY_LR];
                final_elem = worse(final_elem, d / t);
            }
        }
        final_norm = worse(final_norm, bb > 0 ? sqrt(dd / bb) : sqrt(dd));
    }

    int ok = logits_abs <= tol->logits_abs && loss_rel <= tol->loss_rel &&
             grad_rel <= tol->grad_rel && step_rel <= tol->step_rel &&
             final_norm <= tol->final_norm && final_elem <= 1.0 && fails == 0;
    const fixture_entry *eys =
        fixture_get(&fx, "yardstick/autocast_bf16", FIXTURE_F32, YS_COUNT, err, sizeof err);
    printf("%-24s %s logits max|d| %.2e (%.0e)  loss rel %.2e (%.0e)  grad %.2e (%.0e)  "
           "step-loss rel %.2e (%.0e)  final norm %.2e (%.0e)  final err/tol %.3f  %s\n",
           label, tol->precision, logits_abs, tol->logits_abs, loss_rel, tol->loss_rel, grad_rel,
           tol->grad_rel, step_rel, tol->step_rel, final_norm, tol->final_norm, final_elem,
           ok ? "ok" : "FAIL");
    if (eys && strncmp(tol->precision, "bf16", 4) == 0) {
        const float *y = eys->f32;
        printf("%-24s   logits relative norm %.2e; PyTorch bf16 autocast on this fixture: "
               "logits %.2e (relative norm %.2e)  loss rel %.2e  grad %.2e  step-loss rel %.2e  "
               "final norm %.2e\n",
               "", logits_rms, (double)y[YS_LOGITS], (double)y[YS_LOGITS_RMS], (double)y[YS_LOSS],
               (double)y[YS_GRAD], (double)y[YS_STEP], (double)y[YS_FINAL_NORM]);
        /* The bf16 policy (fp32 master weights and residual stream, as
         * autocast) is held to it on the relative norm of the logits error:
         * both round the logits to bf16, so their largest error is mostly
         * which logit happens to lie nearest a rounding boundary. */
        if (strcmp(tol->precision, "bf16") == 0 && !(logits_rms <= y[YS_LOGITS_RMS])) {
            printf("%-24s   FAIL: logits error (relative norm) %.2e above PyTorch autocast's "
                   "%.2e\n",
                   "", logits_rms, (double)y[YS_LOGITS_RMS]);
            ok = 0;
        }
    }
    if (!ok) fails++;
done:
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    free(buf);
    free(logits);
    fixture_free(&fx);
    return fails != 0;
}

int main(int argc, char **argv) {
    const char *which = "all";
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--precision") == 0) {
        which = argv[2];
        first = 3;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [--precision fp32|tf32|bf16|bf16_pure|all] FIXTURE...\n", argv[0]);
        return 2;
    }
    gptx_context *probe = NULL;
    int rc = policy_context(&probe, strcmp(which, "all") ? which : NULL);
    if (rc == GPTX_ERR_UNSUPPORTED) return policy_skip();
    gptx_context_destroy(probe);
    printf("gptx %s, PyTorch reference fixtures on %s\n", gptx_version(), POLICY_KIND);
    int failed = 0, ran = 0;
    for (size_t t = 0; t < sizeof TOLS / sizeof TOLS[0]; t++) {
        if (strcmp(which, "all") != 0 && strcmp(which, TOLS[t].precision) != 0) continue;
        gptx_context *ctx = NULL;
        if (policy_context(&ctx, TOLS[t].precision) == GPTX_ERR_UNSUPPORTED) {
            printf("%s: not offered here (%s)\n", TOLS[t].precision, gptx_last_error());
            if (strcmp(which, "all") == 0) continue;
        }
        gptx_context_destroy(ctx);
        for (int i = first; i < argc; i++) {
            failed += run_fixture(argv[i], &TOLS[t]);
            ran++;
        }
    }
    policy_done();
    if (ran == 0) {
        fprintf(stderr, "unknown precision '%s'\n", which);
        return 2;
    }
    if (failed || check_failures) {
        printf("%d of %d run(s) FAILED\n", failed, ran);
        return 1;
    }
    printf("all %d run(s) passed\n", ran);
    return 0;
}
