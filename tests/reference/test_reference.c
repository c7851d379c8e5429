/*
 * test_reference: compares gptx's CPU backend with PyTorch float64 reference
 * fixtures (written by make_fixtures.py, format in README.md).
 *
 *   usage: test_reference FIXTURE.gptxfix [FIXTURE.gptxfix ...]
 *
 * For each fixture: build the model from `config`, load `param/<name>`
 * (checking that the model's tensor list has exactly the fixture's names,
 * order and shapes), run forward with targets and backward(1), compare logits,
 * loss and every gradient; then reset the parameters and run n_steps of
 * {zero_grad, forward, backward(1), AdamW step} on the same batch, comparing
 * the loss before every step and every parameter at the end.
 *
 * Tolerances (also in README.md, section "Tolerances"); b = reference,
 * a = gptx; every comparison also fails on NaN:
 *   logits       |a - b| <= 1e-4 for finite b; b == -inf requires a == -inf
 *   loss         |a - b| <= 1e-5 * |b|
 *   gradients    per tensor: max|a - b| <= 1e-4 * max(max|b|, 1e-6)
 *                (max|b| over that tensor's reference gradient)
 *   step losses  |a - b| <= 1e-4 * |b|, each of the n_steps
 *   final params element-wise |a - b| <= 1e-4 * max(|b|, 1e-2) + 2e-2 * lr,
 *                except the key part [C, 2C) of h.<i>.attn.c_attn.bias, where
 *                |a - b| <= 0.1 * lr * n_steps (see below); and per tensor
 *                ||a - b||_2 <= 1e-4 * ||b||_2 (key bias left out of both norms).
 * The additive 2e-2 * lr covers Adam's amplification of fp32 round-off in
 * gradients that are not much larger than adam_eps; the key bias gets no
 * gradient at all (softmax is invariant to it), so its fp32 gradient is pure
 * round-off and AdamW moves it by round-off / adam_eps * lr per step, which
 * depends on the implementation's summation order. The per-tensor norm
 * criterion catches small systematic errors that the element-wise slack
 * allows (weight decay on the wrong tensors changes them by lr*wd*n_steps
 * ~ 1e-3 relative).
 *
 * Printed per fixture: logits max abs error, loss relative error, worst
 * gradient error over its tensor's max|g|, worst step-loss relative error,
 * worst final-parameter error |a - b| / max(|b|, 1e-2) (outside the key
 * bias), the worst ratio error / tolerance of the element-wise final check,
 * and the worst per-tensor ||a - b|| / ||b|| of the final parameters.
 *
 * Exit status: 0 when every fixture passes, 1 otherwise.
 */
#include "fixture.h"
#include "fixture_gptx.h"

#include <gptx/gptx.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_LOGITS_ABS 1e-4
#define TOL_LOSS_REL 1e-5
#define TOL_GRAD_REL 1e-4
#define TOL_GRAD_FLOOR 1e-6
#define TOL_STEP_LOSS_REL 1e-4
#define TOL_FINAL_REL 1e-4
#define TOL_FINAL_FLOOR 1e-2
#define TOL_FINAL_LR 2e-2
#define TOL_KEY_BIAS_LR_STEPS 0.1
#define TOL_FINAL_NORM_REL 1e-4
#define MAX_REPORTS 8 /* failure lines printed per check */


typedef struct run_state {
    const char *label;  /* fixture name for messages */
    int failures;       /* failed comparisons */
    int reports;        /* failure lines printed for the current check */
    /* observed maxima */
    double logits_abs, loss_rel, grad_rel, step_rel, final_rel, final_ratio, final_norm;
} run_state;

static void fail_msg(run_state *st, const char *fmt, ...)
{
    st->failures++;
    if (st->reports++ >= MAX_REPORTS) {
        if (st->reports == MAX_REPORTS + 1)
            fprintf(stderr, "%s: FAIL ... (further failures of this check not shown)\n",
                    st->label);
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: FAIL ", st->label);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* Reports a failed gptx call with the library's message. */
static void call_failed(run_state *st, const char *what, int rc)
{
    fprintf(stderr, "%s: ERROR %s returned %d (%s): %s\n", st->label, what, rc,
            gptx_status_name(rc), gptx_last_error());
    st->failures++;
}

static double fmax_nan(double acc, double v)
{
    /* Propagates NaN so that a NaN error shows in the summary line. */
    if (isnan(v) || isnan(acc))
        return NAN;
    return v > acc ? v : acc;
}

static const char *basename_of(const char *path)
{
    const char *s = strrchr(path, '/');
#ifdef _WIN32
    const char *b = strrchr(path, '\\');
    if (b != NULL && (s == NULL || b > s))
        s = b;
#endif
    return s ? s + 1 : path;
}

/* Index -> "[i, j]" of an element of a tensor with the entry's shape. */
static void index_str(const fixture_entry *e, size_t flat, char *buf, size_t buflen)
{
    size_t idx[FIXTURE_MAX_DIMS];
    for (int d = e->ndim - 1; d >= 0; d--) {
        size_t s = (size_t)e->shape[d];
        idx[d] = s ? flat % s : 0;
        flat = s ? flat / s : 0;
    }
    size_t n = (size_t)snprintf(buf, buflen, "[");
    for (int d = 0; d < e->ndim && n < buflen; d++)
        n += (size_t)snprintf(buf + n, buflen - n, d ? ", %zu" : "%zu", idx[d]);
    if (n < buflen)
        snprintf(buf + n, buflen - n, "]");
}

/* Final-parameter tolerances of one tensor. */
typedef struct final_tol {
    double lr;
    int n_steps;
    size_t key_lo, key_hi; /* elements [key_lo, key_hi) are key bias (empty if equal) */
} final_tol;

static int compare_final(run_state *st, const fixture_entry *ref, const float *got,
                         const final_tol *ft)
{
    char where[96];
    int bad = 0;
    double ss_diff = 0.0, ss_ref = 0.0;
    for (size_t k = 0; k < ref->numel; k++) {
        double b = ref->f32[k], a = got[k];
        double d = fabs(a - b);
        int key = k >= ft->key_lo && k < ft->key_hi;
        if (!key) {
            ss_diff += d * d;
            ss_ref += b * b;
        }
        double tol = key ? TOL_KEY_BIAS_LR_STEPS * ft->lr * ft->n_steps
                         : TOL_FINAL_REL * fmax(fabs(b), TOL_FINAL_FLOOR) + TOL_FINAL_LR * ft->lr;
        if (!key)
            st->final_rel = fmax_nan(st->final_rel, d / fmax(fabs(b), TOL_FINAL_FLOOR));
        st->final_ratio = fmax_nan(st->final_ratio, d / tol);
        if (!(d <= tol)) {
            index_str(ref, k, where, sizeof where);
            fail_msg(st, "final parameter %s%s: got %.9g, reference %.9g, |diff| %.3g > tol %.3g%s",
                     ref->name + strlen("final/"), where, a, b, d, tol,
                     key ? " (key bias)" : "");
            bad = 1;
        }
    }
    double norm_rel = ss_ref > 0.0 ? sqrt(ss_diff / ss_ref) : sqrt(ss_diff);
    st->final_norm = fmax_nan(st->final_norm, norm_rel);
    if (!(norm_rel <= TOL_FINAL_NORM_REL)) {
        fail_msg(st, "final parameter %s: ||diff|| / ||reference|| = %.3g > %.3g",
                 ref->name + strlen("final/"), norm_rel, TOL_FINAL_NORM_REL);
        bad = 1;
    }
    return bad;
}

static int run_fixture(const char *path)
{
    char err[512];
    char label[256];
    snprintf(label, sizeof label, "%s", basename_of(path));
    char *dot = strrchr(label, '.');
    if (dot != NULL && strcmp(dot, ".gptxfix") == 0)
        *dot = '\0';

    run_state st;
    memset(&st, 0, sizeof st);
    st.label = label;

    fixture fx;
    if (fixture_load(path, &fx, err, sizeof err) != 0) {
        fprintf(stderr, "%s: ERROR %s\n", label, err);
        printf("%-24s FAIL (cannot load the fixture, see the message above)\n", label);
        return 1;
    }

    int result = 1, printed = 0;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_optimizer *opt = NULL;
    float *buf = NULL, *logits = NULL;
    const fixture_entry **params = NULL;

    /* ---- configuration ---- */
    const fixture_entry *ecfg = fixture_get(&fx, "config", FIXTURE_I32, CF_COUNT, err, sizeof err);
    const fixture_entry *ehy = ecfg ? fixture_get(&fx, "hyper", FIXTURE_F32, HY_COUNT, err,
                                                  sizeof err)
                                    : NULL;
    if (ecfg == NULL || ehy == NULL) {
        fprintf(stderr, "%s: ERROR bad fixture: %s\n", label, err);
        goto done;
    }
    const int32_t *cf = ecfg->i32;
    const float *hy = ehy->f32;
    const int V = cf[CF_V], Vp = cf[CF_VP], B = cf[CF_B], T = cf[CF_T], C = cf[CF_C];
    const int n_steps = cf[CF_STEPS];
    if (V <= 0 || Vp < V || B <= 0 || T <= 0 || C <= 0 || n_steps <= 0 || cf[CF_L] <= 0) {
        fprintf(stderr, "%s: ERROR bad fixture: implausible config\n", label);
        goto done;
    }
    const size_t BT = (size_t)B * (size_t)T;
    const size_t n_logits = BT * (size_t)Vp;

    const fixture_entry *einp = fixture_get(&fx, "inputs", FIXTURE_I32, BT, err, sizeof err);
    const fixture_entry *etgt = einp ? fixture_get(&fx, "targets", FIXTURE_I32, BT, err, sizeof err)
                                     : NULL;
    const fixture_entry *elog = etgt ? fixture_get(&fx, "logits", FIXTURE_F32, n_logits, err,
                                                   sizeof err)
                                     : NULL;
    const fixture_entry *eloss = elog ? fixture_get(&fx, "loss", FIXTURE_F32, 1, err, sizeof err)
                                      : NULL;
    const fixture_entry *esteps = eloss ? fixture_get(&fx, "step_losses", FIXTURE_F32,
                                                      (size_t)n_steps, err, sizeof err)
                                        : NULL;
    if (esteps == NULL) {
        fprintf(stderr, "%s: ERROR bad fixture: %s\n", label, err);
        goto done;
    }

    /* Parameters in file order; every one needs grad/ and final/ twins. */
    params = calloc((size_t)fx.n_entries, sizeof *params);
    if (params == NULL) {
        fprintf(stderr, "%s: ERROR out of memory\n", label);
        goto done;
    }
    int n_params = 0;
    size_t max_numel = 0;
    for (int i = 0; i < fx.n_entries; i++) {
        const fixture_entry *e = &fx.entries[i];
        if (strncmp(e->name, "param/", 6) != 0)
            continue;
        if (e->dtype != FIXTURE_F32) {
            fprintf(stderr, "%s: ERROR bad fixture: %s is not float32\n", label, e->name);
            goto done;
        }
        char other[FIXTURE_MAX_NAME + 16];
        const char *prefixes[2] = {"grad/", "final/"};
        for (int p = 0; p < 2; p++) {
            snprintf(other, sizeof other, "%s%s", prefixes[p], e->name + 6);
            if (fixture_get(&fx, other, FIXTURE_F32, e->numel, err, sizeof err) == NULL) {
                fprintf(stderr, "%s: ERROR bad fixture: %s\n", label, err);
                goto done;
            }
        }
        params[n_params++] = e;
        if (e->numel > max_numel)
            max_numel = e->numel;
    }
    if (n_params == 0) {
        fprintf(stderr, "%s: ERROR bad fixture: no param/ entries\n", label);
        goto done;
    }
    buf = malloc(max_numel * sizeof *buf);
    logits = malloc(n_logits * sizeof *logits);
    if (buf == NULL || logits == NULL) {
        fprintf(stderr, "%s: ERROR out of memory\n", label);
        goto done;
    }

    /* ---- context and model ---- */
    gptx_context_options copts;
    gptx_context_options_init(&copts);
    copts.backend = GPTX_BACKEND_CPU;
    copts.deterministic = 1;
    /* the test's own switch (ctest reference_pytorch_rank_invariant): the
     * gradients through the exact sums (docs/distributed.md), same bounds */
    const char *ri = getenv("GPTX_TEST_RANK_INVARIANT");
    copts.rank_invariant = ri && !strcmp(ri, "1");
    int rc = gptx_context_create(&ctx, &copts);
    if (rc != GPTX_OK) {
        call_failed(&st, "gptx_context_create", rc);
        goto done;
    }
    if (copts.rank_invariant) { /* the option really in effect */
        gptx_context_options got;
        gptx_context_options_init(&got);
        if (gptx_context_get_options(ctx, &got) != GPTX_OK || got.rank_invariant != 1)
            fail_msg(&st, "the context does not report rank_invariant = 1");
        else
            printf("%s: rank_invariant = 1 (gradients through the exact sums)\n", label);
    }

    gptx_model_config mc;
    fixture_model_config(&mc, cf, hy);
    rc = gptx_model_create(&model, ctx, &mc);
    if (rc != GPTX_OK) {
        call_failed(&st, "gptx_model_create", rc);
        goto done;
    }

    /* Tensor list: same names, order and shapes as the fixture. */
    int n_tensors = gptx_model_num_tensors(model);
    if (n_tensors < 0) {
        call_failed(&st, "gptx_model_num_tensors", n_tensors);
        goto done;
    }
    if (n_tensors != n_params) {
        fail_msg(&st, "model has %d tensors, fixture has %d parameters", n_tensors, n_params);
    }
    for (int i = 0; i < n_params && i < n_tensors; i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        rc = gptx_model_tensor_info(model, i, &info);
        if (rc != GPTX_OK) {
            call_failed(&st, "gptx_model_tensor_info", rc);
            goto done;
        }
        const fixture_entry *e = params[i];
        const char *want = e->name + 6;
        int same = info.name != NULL && strcmp(info.name, want) == 0 && info.ndim == e->ndim &&
                   info.numel == e->numel;
        for (int d = 0; same && d < e->ndim; d++)
            same = info.shape[d] == e->shape[d];
        if (!same) {
            char shp[128];
            fixture_shape_str(e, shp, sizeof shp);
            fail_msg(&st, "tensor %d: model has \"%s\" (ndim %d, %zu elements), fixture expects "
                          "\"%s\" %s",
                     i, info.name ? info.name : "(null)", info.ndim, info.numel, want, shp);
        }
    }
    if (st.failures)
        goto done; /* nothing below is meaningful with a different tensor list */
    st.reports = 0;

    for (int i = 0; i < n_params; i++) {
        rc = gptx_model_set_parameter(model, params[i]->name + 6, params[i]->f32,
                                      params[i]->numel);
        if (rc != GPTX_OK) {
            call_failed(&st, params[i]->name, rc);
            goto done;
        }
    }

    /* ---- forward ---- */
    float loss = 0.0f;
    if ((rc = gptx_model_zero_grad(model)) != GPTX_OK ||
        (rc = gptx_model_forward(model, einp->i32, etgt->i32, B, T, &loss)) != GPTX_OK) {
        call_failed(&st, "zero_grad/forward", rc);
        goto done;
    }
    if ((rc = gptx_model_get_logits(model, logits, n_logits)) != GPTX_OK) {
        call_failed(&st, "gptx_model_get_logits", rc);
        goto done;
    }
    for (size_t k = 0; k < n_logits; k++) {
        double b = elog->f32[k], a = logits[k];
        int ok;
        if (isinf(elog->f32[k]) && elog->f32[k] < 0) {
            ok = isinf(logits[k]) && logits[k] < 0;
        } else {
            double d = fabs(a - b);
            st.logits_abs = fmax_nan(st.logits_abs, d);
            ok = d <= TOL_LOGITS_ABS;
        }
        if (!ok) {
            size_t v = k % (size_t)Vp, t = (k / (size_t)Vp) % (size_t)T, bb = k / ((size_t)Vp * T);
            fail_msg(&st, "logits[%zu, %zu, %zu]: got %.9g, reference %.9g", bb, t, v, a, b);
        }
    }
    st.reports = 0;
    {
        double b = eloss->f32[0];
        st.loss_rel = fmax_nan(st.loss_rel, fabs(loss - b) / fabs(b));
        if (!(fabs(loss - b) <= TOL_LOSS_REL * fabs(b)))
            fail_msg(&st, "loss: got %.9g, reference %.9g", (double)loss, b);
    }
    {
        int64_t n_tok = -1, want = 0;
        for (size_t k = 0; k < BT; k++)
            want += etgt->i32[k] != GPTX_IGNORE_INDEX;
        if ((rc = gptx_model_num_loss_tokens(model, &n_tok)) != GPTX_OK) {
            call_failed(&st, "gptx_model_num_loss_tokens", rc);
            goto done;
        }
        if (n_tok != want)
            fail_msg(&st, "num_loss_tokens: got %lld, expected %lld", (long long)n_tok,
                     (long long)want);
    }

    /* ---- backward ---- */
    if ((rc = gptx_model_backward(model, 1.0f)) != GPTX_OK) {
        call_failed(&st, "gptx_model_backward", rc);
        goto done;
    }
    for (int i = 0; i < n_params; i++) {
        const char *name = params[i]->name + 6;
        char gname[FIXTURE_MAX_NAME + 16];
        snprintf(gname, sizeof gname, "grad/%s", name);
        const fixture_entry *eg = fixture_find(&fx, gname);
        if ((rc = gptx_model_get_gradient(model, name, buf, eg->numel)) != GPTX_OK) {
            call_failed(&st, gname, rc);
            goto done;
        }
        double gmax = 0.0, dmax = 0.0;
        size_t kmax = 0;
        for (size_t k = 0; k < eg->numel; k++)
            gmax = fmax(gmax, fabs((double)eg->f32[k]));
        for (size_t k = 0; k < eg->numel; k++) {
            double d = fabs((double)buf[k] - eg->f32[k]);
            if (isnan(d) || d > dmax) {
                dmax = d;
                kmax = k;
                if (isnan(d))
                    break;
            }
        }
        double scale = fmax(gmax, TOL_GRAD_FLOOR);
        st.grad_rel = fmax_nan(st.grad_rel, dmax / scale);
        if (!(dmax <= TOL_GRAD_REL * scale)) {
            char where[96];
            index_str(eg, kmax, where, sizeof where);
            fail_msg(&st, "gradient %s: max|diff| %.3g > %.3g (= 1e-4 * max|g| %.3g); worst at "
                          "%s: got %.9g, reference %.9g",
                     name, dmax, TOL_GRAD_REL * scale, gmax, where, (double)buf[kmax],
                     (double)eg->f32[kmax]);
        }
    }
    st.reports = 0;

    /* ---- AdamW steps ---- */
    gptx_adamw_options ao;
    fixture_adamw_options(&ao, hy);
    if ((rc = gptx_optimizer_create(&opt, model, &ao)) != GPTX_OK) {
        call_failed(&st, "gptx_optimizer_create", rc);
        goto done;
    }
    for (int i = 0; i < n_params; i++) {
        rc = gptx_model_set_parameter(model, params[i]->name + 6, params[i]->f32,
                                      params[i]->numel);
        if (rc != GPTX_OK) {
            call_failed(&st, params[i]->name, rc);
            goto done;
        }
    }
    for (int s = 0; s < n_steps; s++) {
        float step_loss = 0.0f, gnorm = 0.0f;
        if ((rc = gptx_model_zero_grad(model)) != GPTX_OK) {
            call_failed(&st, "gptx_model_zero_grad", rc);
            goto done;
        }
        if ((rc = gptx_model_forward(model, einp->i32, etgt->i32, B, T, &step_loss)) != GPTX_OK) {
            call_failed(&st, "gptx_model_forward", rc);
            goto done;
        }
        if ((rc = gptx_model_backward(model, 1.0f)) != GPTX_OK) {
            call_failed(&st, "gptx_model_backward", rc);
            goto done;
        }
        if ((rc = gptx_optimizer_step(opt, model, &gnorm)) != GPTX_OK) {
            call_failed(&st, "gptx_optimizer_step", rc);
            goto done;
        }
        double b = esteps->f32[s];
        double d = fabs(step_loss - b);
        st.step_rel = fmax_nan(st.step_rel, d / fabs(b));
        if (!(d <= TOL_STEP_LOSS_REL * fabs(b)))
            fail_msg(&st, "step %d loss: got %.9g, reference %.9g", s, (double)step_loss, b);
    }
    st.reports = 0;
    {
        int64_t steps_done = -1;
        if ((rc = gptx_optimizer_get_step(opt, &steps_done)) != GPTX_OK) {
            call_failed(&st, "gptx_optimizer_get_step", rc);
            goto done;
        }
        if (steps_done != n_steps)
            fail_msg(&st, "optimizer step count: got %lld, expected %d", (long long)steps_done,
                     n_steps);
    }
    for (int i = 0; i < n_params; i++) {
        const char *name = params[i]->name + 6;
        char fname[FIXTURE_MAX_NAME + 16];
        snprintf(fname, sizeof fname, "final/%s", name);
        const fixture_entry *ef = fixture_find(&fx, fname);
        if ((rc = gptx_model_get_parameter(model, name, buf, ef->numel)) != GPTX_OK) {
            call_failed(&st, fname, rc);
            goto done;
        }
        final_tol ft = {hy[HY_LR], n_steps, 0, 0};
        size_t nl = strlen(name);
        const char *suffix = ".attn.c_attn.bias";
        size_t sl = strlen(suffix);
        if (nl > sl && strcmp(name + nl - sl, suffix) == 0 && ef->numel == 3 * (size_t)C) {
            ft.key_lo = (size_t)C;
            ft.key_hi = 2 * (size_t)C;
        }
        compare_final(&st, ef, buf, &ft);
    }

    printf("%-24s logits max|d| %.2e  loss rel %.2e  grad max|d|/max|g| %.2e  "
           "step-loss rel %.2e  final rel %.2e  (err/tol %.3f)  final norm rel %.2e  %s\n",
           label, st.logits_abs, st.loss_rel, st.grad_rel, st.step_rel, st.final_rel,
           st.final_ratio, st.final_norm, st.failures ? "FAIL" : "ok");
    printed = 1;
    result = st.failures ? 1 : 0;

done:
    if (!printed)
        printf("%-24s FAIL (stopped early, see the messages above)\n", label);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    free(buf);
    free(logits);
    free(params);
    fixture_free(&fx);
    return result;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FIXTURE.gptxfix [FIXTURE.gptxfix ...]\n", argv[0]);
        return 2;
    }
    printf("gptx %s, PyTorch reference fixtures\n", gptx_version());
    int failed = 0;
    for (int i = 1; i < argc; i++)
        failed += run_fixture(argv[i]) != 0;
    if (failed) {
        printf("%d of %d fixture(s) FAILED\n", failed, argc - 1);
        return 1;
    }
    printf("all %d fixture(s) passed\n", argc - 1);
    return 0;
}
