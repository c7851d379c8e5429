/* The GPT-2 model on the CUDA backend (fp32, and the bf16 mixed policy)
 * against the CPU backend, through the public API: logits with padded-vocabulary masking,
 * loss, every gradient, AdamW steps, a smaller batch after a larger one, the
 * separate-QKV variant, generation, the data loader's pinned buffers; plus
 * bitwise repeatability, the memory report (no new device allocation in the
 * steady state) and the unsupported variants.
 *
 * Tolerances (a = CUDA, r = CPU): logits |a - r| <= 1e-4 max|r|, masked
 * columns -inf on both; loss |a - r| <= 1e-5 |r|; gradients per tensor
 * max|a - r| <= 1e-4 max|r|; parameters after 3 steps per tensor
 * ||a - r|| <= 1e-4 ||r|| (the attention key bias left out, as in
 * tests/reference: it has no gradient, only amplified round-off).
 * bf16 mixed (bf16 activations, logits and weight copy; fp32 master weights,
 * gradients, moments and statistics): every bound above scaled for bf16's
 * 2^-8 relative rounding of each stored activation: logits 2e-2 max|r|,
 * loss 1e-3 |r|, gradients 5e-2 max|r|, parameters after 3 steps
 * 1.5e-1 ||r|| (a zero-initialised bias holds nothing but three AdamW
 * updates, each about lr in size whatever the gradient's magnitude, so its
 * relative error is that of the gradients' signs and ratios: 8.2e-2 on the
 * emulation); the masked columns are still exactly -inf. Measured on the
 * emulation: logits 6.7e-3, loss 3.8e-5, gradients 1.4e-2. */
#include <unistd.h>

#include "check.h"
#include "cuda_test_util.h"
#include "model.h"
#include "optimizer.h"
#include "test_util.h"

typedef struct {
    double logits, loss, grads, params;
} tolerances;
static const tolerances TOL_FP32 = {1e-4, 1e-5, 1e-4, 1e-4};
static const tolerances TOL_BF16 = {2e-2, 1e-3, 5e-2, 1.5e-1};

static int make_cuda(gptx_context **ctx, int fused_qkv, int attention, const char *precision) {
#ifdef GPTX_TEST_CUDA_EMU
    int rc = cuda_test_context(ctx, precision);
#else
    cuda_test_precision(NULL);
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    o.precision = cuda_test_precision_value(precision);
    int rc = gptx_context_create(ctx, &o);
#endif
    if (rc == GPTX_OK) rc = gptx_context_set_variant(*ctx, GPTX_VARIANT_FUSED_QKV, fused_qkv);
    if (rc == GPTX_OK) rc = gptx_context_set_variant(*ctx, GPTX_VARIANT_ATTENTION, attention);
    return rc;
}

typedef struct {
    float *logits, *params, *grads;
    float loss;
    size_t nlogits, nparams;
} snapshot;

static void read_tensors(gptx_model *m, float *dst, int grads) {
    size_t off = 0;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        CHECK_OK(gptx_model_tensor_info(m, i, &info));
        if (grads)
            CHECK_OK(gptx_model_get_gradient(m, info.name, dst + off, info.numel));
        else
            CHECK_OK(gptx_model_get_parameter(m, info.name, dst + off, info.numel));
        off += info.numel;
    }
}

/* forward + logits + backward, then `steps` AdamW steps on the same batch */
static int run(gptx_context *ctx, const gptx_model_config *cfg, int B, int T, int steps,
               snapshot *s) {
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    int rc = gptx_model_create(&m, ctx, cfg);
    if (rc != GPTX_OK) return rc;
    CHECK_OK(gptx_model_init_random(m, 1234));
    size_t BT = (size_t)B * T;
    int32_t *in = malloc(BT * sizeof *in), *tg = malloc(BT * sizeof *tg);
    fill_tokens(in, BT, cfg->vocab_size, 5);
    fill_tokens(tg, BT, cfg->vocab_size, 6);
    tg[1] = GPTX_IGNORE_INDEX;
    s->nlogits = BT * (size_t)(cfg->padded_vocab_size ? cfg->padded_vocab_size : cfg->vocab_size);
    s->nparams = gptx_model_num_parameters(m);
    s->logits = malloc(s->nlogits * sizeof(float));
    s->params = malloc(s->nparams * sizeof(float));
    s->grads = malloc(s->nparams * sizeof(float));
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-3f;
    CHECK_OK(gptx_optimizer_create(&opt, m, &ao));
    /* a larger batch first, so the real one re-carves the activations */
    int32_t *big = malloc(4 * BT * sizeof *big);
    fill_tokens(big, 4 * BT, cfg->vocab_size, 7);
    CHECK_OK(gptx_model_forward(m, big, big, B * 2, T, NULL));
    CHECK_OK(gptx_model_zero_grad(m));
    CHECK_OK(gptx_model_forward(m, in, tg, B, T, &s->loss));
    CHECK_OK(gptx_model_get_logits(m, s->logits, s->nlogits));
    CHECK_OK(gptx_model_backward(m, 1.0f));
    CHECK_STATUS(gptx_model_get_logits(m, s->logits, s->nlogits), GPTX_ERR_STATE);
    read_tensors(m, s->grads, 1);
    for (int i = 0; i < steps; i++) {
        CHECK_OK(gptx_model_zero_grad(m));
        CHECK_OK(gptx_model_forward(m, in, tg, B, T, NULL));
        CHECK_OK(gptx_model_backward(m, 1.0f));
        CHECK_OK(gptx_optimizer_step(opt, m, NULL));
    }
    read_tensors(m, s->params, 0);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    free(in);
    free(tg);
    free(big);
    return GPTX_OK;
}

static void snapshot_free(snapshot *s) {
    free(s->logits);
    free(s->params);
    free(s->grads);
}

static double maxabs(const float *x, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* per tensor: max|a - r| <= tol max|r| (norm = 0) or ||a - r|| <= tol ||r||;
 * returns the worst error (tol < 0: measure only, print nothing) */
static double compare_tensors(gptx_model *layout, const float *r, const float *a, double tol,
                              int norm, const char *what) {
    size_t off = 0;
    double worst = 0;
    for (int i = 0; i < gptx_model_num_tensors(layout); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(layout, i, &info);
        double e;
        /* the attention key bias gets no gradient (softmax ignores it): its
         * fp32 gradient is round-off that AdamW amplifies, differently for
         * every summation order (see tests/reference/test_reference.c) */
        size_t key_lo = 0, key_hi = 0, nl = strlen(info.name);
        if (nl > 17 && strcmp(info.name + nl - 17, ".attn.c_attn.bias") == 0) {
            key_lo = info.numel / 3;
            key_hi = 2 * info.numel / 3;
        }
        if (norm) {
            double dd = 0, rr = 0;
            for (size_t k = 0; k < info.numel; k++) {
                if (k >= key_lo && k < key_hi) continue;
                double d = (double)a[off + k] - r[off + k];
                dd += d * d;
                rr += (double)r[off + k] * r[off + k];
            }
            e = sqrt(dd) / (sqrt(rr) > 1e-30 ? sqrt(rr) : 1.0);
        } else {
            double dmax = 0;
            for (size_t k = 0; k < info.numel; k++) {
                double d = fabs((double)a[off + k] - r[off + k]);
                if (!(d <= dmax)) dmax = d;
            }
            double sc = maxabs(r + off, info.numel);
            e = dmax / (sc > 1e-12 ? sc : 1.0);
        }
        if (tol >= 0 && !(e <= tol)) {
            fprintf(stderr, "  %s %s: error %.3g > %.3g\n", what, info.name, e, tol);
            check_failures++;
        }
        if (!(e <= worst)) worst = e;
        off += info.numel;
    }
    if (tol >= 0) printf("  %-10s worst per-tensor error %.3g (tol %.3g)\n", what, worst, tol);
    return worst;
}

/* logits ||a - r|| / ||r|| over the finite ones */
static double logits_error(const snapshot *r, const snapshot *a) {
    double dd = 0, rr = 0;
    for (size_t i = 0; i < r->nlogits; i++)
        if (isfinite(r->logits[i]) && isfinite(a->logits[i])) {
            double d = (double)a->logits[i] - r->logits[i];
            dd += d * d;
            rr += (double)r->logits[i] * r->logits[i];
        }
    return sqrt(dd / (rr > 0 ? rr : 1));
}

/* The tensor-core attention (head size 64 or 128 under bf16 or tf32) rounds
 * where the CUDA-core kernels do not: P before P V and dS before its two
 * products are bf16 (tf32) operands, as in FlashAttention-2, and under tf32
 * q, k, v and dO are rounded to tf32 as well. It may cost accuracy, not
 * much: against CPU fp32, its logits and gradients must stay within 1.5
 * times the error of the same model with the CUDA-core attention
 * (GPTX_ATTENTION_FLASH_SIMT; measured on the emulation at head size 64:
 * bf16 1.007 and 1.036, tf32 1.033 and 1.108). Both runs are on the emulation, so the
 * check does not depend on the machine's CPU. Checked by mutation: dS
 * without D in the dK/dV kernel gives a gradient ratio of 3.8, dQ without
 * the softmax scale 60; a causal mask off by one fails compare_runs first. */
static void compare_attention_paths(gptx_context *cpu, gptx_model_config cfg, int B, int T,
                                    gptx_context *tc, gptx_context *simt, const char *policy) {
    snapshot r = {0}, a = {0}, s = {0};
    CHECK_OK(run(cpu, &cfg, B, T, 3, &r));
    CHECK_OK(run(tc, &cfg, B, T, 3, &a));
    CHECK_OK(run(simt, &cfg, B, T, 3, &s));
    gptx_model *layout = NULL;
    CHECK_OK(gptx_model_create(&layout, cpu, &cfg));
    if (r.logits && a.logits && s.logits && layout) {
        double l_ar = logits_error(&r, &a), l_sr = logits_error(&r, &s);
        double g_ar = compare_tensors(layout, r.grads, a.grads, -1, 1, "");
        double g_sr = compare_tensors(layout, r.grads, s.grads, -1, 1, "");
        printf("head size %d, %s: error to cpu fp32 with tensor-core / CUDA-core attention\n"
               "  logits     %.3g / %.3g (ratio %.3f, at most 1.5)\n"
               "  gradients  %.3g / %.3g (ratio %.3f, at most 1.5)\n",
               cfg.n_embd / cfg.n_head, policy, l_ar, l_sr, l_ar / l_sr, g_ar, g_sr, g_ar / g_sr);
        CHECK(l_ar <= 1.5 * l_sr);
        CHECK(g_ar <= 1.5 * g_sr);
    } else {
        check_failures++;
    }
    gptx_model_destroy(layout);
    snapshot_free(&r);
    snapshot_free(&a);
    snapshot_free(&s);
}

/* Two independent implementations of the bf16 policy, this backend's and the
 * CPU backend's (oneDNN products, CPU kernels), against each other and
 * against fp32: they round the same values at the same places, so they must
 * agree far more closely than either does with fp32. They differ where an
 * fp32 value lies so near a bf16 rounding boundary that the two summation
 * orders of a product round it apart: few elements, each by one bf16 ulp,
 * so the measure is the relative norm of the difference (a maximum would
 * see one such ulp as large as bf16's whole error). Pass (before 0.7.0):
 * logits and gradients at most a third of the smaller error to fp32 (the emulation,
 * whose products sum in the same order per tile as one fp32 loop, agrees
 * exactly on the logits and to 1.4e-7 on the gradients, against 5e-3 and
 * 1.3e-2 to fp32). A third, not less: on a device cuBLASLt sums in its own
 * order and its GELU epilogue may use a faster tanh (or the erf form, up to
 * 4.7e-4 apart), which moves a few percent of the GELU outputs across a bf16
 * rounding boundary; an implementation that does not round where the CPU
 * does (bf16 computed as fp32) is still far outside (ratio ~1).
 * Since 0.7.0 the CPU's bf16 attention rounds P and dS to bf16 (tensor-core
 * numerics) while the CUDA-core attention these head sizes take does not:
 * attention's roundings now differ, and the two implementations measure
 * 0.54, 0.59 (logits) and 0.69, 0.67 (gradients) of the smaller error to
 * fp32 on the emulation (they were exact and 1.4e-7 before). Pass: at most
 * 0.8 of it, still below an implementation that rounds nowhere (~1). At head
 * size 64 the tensor cores round P unnormalized, the CPU normalized: 0.95
 * apart, so no configuration here compares attention's roundings. */
static void compare_bf16_implementations(gptx_context *cpu, gptx_model_config cfg, int B, int T,
                                         gptx_context *cu_bf16, const char *label) {
    gptx_context *cpu_bf16 = NULL;
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 2;
    o.precision = GPTX_PRECISION_BF16;
    if (gptx_context_create(&cpu_bf16, &o) != GPTX_OK) {
        printf("%s: no CPU bf16 policy in this build (%s)\n", label, gptx_last_error());
        return;
    }
    snapshot r = {0}, c = {0}, a = {0};
    CHECK_OK(run(cpu, &cfg, B, T, 3, &r));
    CHECK_OK(run(cpu_bf16, &cfg, B, T, 3, &c));
    CHECK_OK(run(cu_bf16, &cfg, B, T, 3, &a));
    gptx_model *layout = NULL;
    CHECK_OK(gptx_model_create(&layout, cpu, &cfg));
    if (r.logits && c.logits && a.logits && layout) {
        double l_ar = logits_error(&r, &a), l_cr = logits_error(&r, &c), l_ac = logits_error(&c, &a);
        double g_ar = compare_tensors(layout, r.grads, a.grads, -1, 1, "");
        double g_cr = compare_tensors(layout, r.grads, c.grads, -1, 1, "");
        double g_ac = compare_tensors(layout, c.grads, a.grads, -1, 1, "");
        double p_ar = compare_tensors(layout, r.params, a.params, -1, 1, "");
        double p_cr = compare_tensors(layout, r.params, c.params, -1, 1, "");
        double p_ac = compare_tensors(layout, c.params, a.params, -1, 1, "");
        printf("%s, bf16 policy: cuda vs cpu fp32 / cpu bf16 vs cpu fp32 / cuda vs cpu bf16\n"
               "  logits     %.3g / %.3g / %.3g (relative norm of the difference)\n"
               "  gradients  %.3g / %.3g / %.3g (worst tensor, relative norm)\n"
               "  parameters %.3g / %.3g / %.3g after 3 steps (worst tensor norm)\n",
               label, l_ar, l_cr, l_ac, g_ar, g_cr, g_ac, p_ar, p_cr, p_ac);
        CHECK(l_ac <= fmin(l_ar, l_cr) * 0.8);
        CHECK(g_ac <= fmin(g_ar, g_cr) * 0.8);
    } else {
        check_failures++;
    }
    gptx_model_destroy(layout);
    snapshot_free(&r);
    snapshot_free(&c);
    snapshot_free(&a);
    gptx_context_destroy(cpu_bf16);
}

static void compare_runs(gptx_context *cpu, gptx_context *cu, gptx_model_config cfg, int B, int T,
                         const char *label) {
    const tolerances *tol =
        gptx_context_precision(cu) == GPTX_PRECISION_BF16 ? &TOL_BF16 : &TOL_FP32;
    printf("%s (%s)\n", label, gptx_precision_name(gptx_context_precision(cu)));
    snapshot r = {0}, a = {0}, a2 = {0};
    CHECK_OK(run(cpu, &cfg, B, T, 3, &r));
    CHECK_OK(run(cu, &cfg, B, T, 3, &a));
    CHECK_OK(run(cu, &cfg, B, T, 3, &a2));
    gptx_model *layout = NULL;
    CHECK_OK(gptx_model_create(&layout, cpu, &cfg));
    if (!r.logits || !a.logits || !a2.logits || !layout) {
        check_failures++;
        return;
    }
    double lmax = maxabs(r.logits, r.nlogits), ld = 0;
    size_t masked_bad = 0;
    for (size_t i = 0; i < r.nlogits; i++) {
        if (isinf(r.logits[i]) || isinf(a.logits[i])) {
            masked_bad += r.logits[i] != a.logits[i];
            continue;
        }
        double d = fabs((double)a.logits[i] - r.logits[i]);
        if (!(d <= ld)) ld = d;
    }
    printf("  logits     max|d| %.3g = %.3g max|r| (tol %.3g max|r|), -inf mismatches %zu\n", ld,
           ld / lmax, tol->logits, masked_bad);
    CHECK(ld <= tol->logits * lmax);
    CHECK(masked_bad == 0);
    printf("  loss       cpu %.9g cuda %.9g (rel %.3g, tol %.3g)\n", (double)r.loss, (double)a.loss,
           fabs(a.loss - r.loss) / fabs(r.loss), tol->loss);
    CHECK(fabs(a.loss - r.loss) <= tol->loss * fabs(r.loss));
    compare_tensors(layout, r.grads, a.grads, tol->grads, 0, "gradients");
    compare_tensors(layout, r.params, a.params, tol->params, 1, "parameters");
    int same = memcmp(a.logits, a2.logits, a.nlogits * 4) == 0 &&
               memcmp(a.grads, a2.grads, a.nparams * 4) == 0 &&
               memcmp(a.params, a2.params, a.nparams * 4) == 0 && a.loss == a2.loss;
    printf("  repeat run %s\n", same ? "bitwise equal" : "DIFFERS");
    CHECK(same);
    gptx_model_destroy(layout);
    snapshot_free(&r);
    snapshot_free(&a);
    snapshot_free(&a2);
}

static void test_memory(gptx_context *cu) {
    gptx_model_config cfg = small_config();
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    CHECK_OK(gptx_model_create(&m, cu, &cfg));
    CHECK_OK(gptx_model_init_random(m, 3));
    CHECK_OK(gptx_optimizer_create(&opt, m, NULL));
    int32_t in[32], tg[32];
    fill_tokens(in, 32, cfg.vocab_size, 1);
    fill_tokens(tg, 32, cfg.vocab_size, 2);
    gptx_memory_stats st[4];
    for (int step = 0; step < 4; step++) {
        CHECK_OK(gptx_model_zero_grad(m));
        CHECK_OK(gptx_model_forward(m, in, tg, 2, 16, NULL));
        CHECK_OK(gptx_model_backward(m, 1.0f));
        CHECK_OK(gptx_optimizer_step(opt, m, NULL));
        gptx_memory_stats_init(&st[step]);
        CHECK_OK(gptx_context_memory(cu, &st[step]));
    }
    size_t np = gptx_model_num_parameters(m);
    printf("memory: allocated %llu reserved %llu peak %llu (4 x params = %zu bytes)\n",
           (unsigned long long)st[3].allocated, (unsigned long long)st[3].reserved,
           (unsigned long long)st[3].peak, 16 * np);
    CHECK(st[3].allocated >= 16 * np); /* params, grads, m, v at least */
    CHECK(st[3].reserved >= st[3].allocated);
    CHECK(st[3].peak >= st[3].allocated);
    /* steady state: nothing new is taken from the device */
    CHECK(st[1].reserved == st[2].reserved && st[2].reserved == st[3].reserved);
    CHECK(st[1].allocated == st[3].allocated);
    CHECK_OK(gptx_context_reset_peak_memory(cu));
    gptx_memory_stats now;
    gptx_memory_stats_init(&now);
    CHECK_OK(gptx_context_memory(cu, &now));
    CHECK(now.peak == now.allocated);
    CHECK_OK(gptx_context_synchronize(cu));
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    CHECK_OK(gptx_context_memory(cu, &now));
    CHECK(now.allocated == 0);
    CHECK(now.reserved >= st[3].reserved); /* kept in the cache */
}

static void test_generate_and_loader(gptx_context *cpu, gptx_context *cu) {
    gptx_model_config cfg = small_config();
    gptx_model *mc = NULL, *mg = NULL;
    CHECK_OK(gptx_model_create(&mc, cpu, &cfg));
    CHECK_OK(gptx_model_create(&mg, cu, &cfg));
    CHECK_OK(gptx_model_init_random(mc, 9));
    CHECK_OK(gptx_model_init_random(mg, 9));
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = 0.0f; /* greedy */
    gptx_sampler *sc = NULL, *sg = NULL;
    CHECK_OK(gptx_sampler_create(&sc, &so));
    CHECK_OK(gptx_sampler_create(&sg, &so));
    int32_t prompt[3] = {1, 2, 3}, oc[30], og[30]; /* past the window of 16 */
    CHECK_OK(gptx_generate(mc, sc, prompt, 3, 30, oc));
    CHECK_OK(gptx_generate(mg, sg, prompt, 3, 30, og));
    CHECK(memcmp(oc, og, sizeof oc) == 0);
    printf("generate: greedy tokens %s\n", memcmp(oc, og, sizeof oc) == 0 ? "equal" : "DIFFER");

    /* the data loader takes pinned host memory from a CUDA context */
    int32_t tokens[400];
    fill_tokens(tokens, 400, cfg.vocab_size, 4);
    gptx_dataloader_options lo;
    gptx_dataloader_options_init(&lo);
    lo.batch_size = 2;
    lo.seq_len = 16;
    gptx_dataloader *dl = NULL;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, cu, tokens, 400, &lo));
    for (int i = 0; i < 3 && dl; i++) {
        const int32_t *in = NULL, *tg = NULL;
        int rows = 0;
        float lg = 0, lc = 0;
        CHECK_OK(gptx_dataloader_next(dl, &in, &tg, &rows, NULL));
        CHECK_OK(gptx_model_forward(mg, in, tg, rows, 16, &lg));
        CHECK_OK(gptx_model_forward(mc, in, tg, rows, 16, &lc));
        CHECK(fabs(lg - lc) <= 1e-5 * fabs(lc));
    }
    gptx_dataloader_destroy(dl);
    gptx_sampler_destroy(sc);
    gptx_sampler_destroy(sg);
    gptx_model_destroy(mc);
    gptx_model_destroy(mg);
}

/* Generation on the CUDA backend through the generator: at every one of 40
 * positions (the window of 16 slides) the cached logits against a full
 * forward pass over the window, and (same_tokens) the same tokens with and
 * without the cache. Tolerance relative to max(1, max |logit|): 1e-5 fp32,
 * 2e-2 bf16. The tokens are compared in fp32 only: in bf16 the cached path's
 * (1, C) products and the full pass's (T, C) ones may sum in other orders on
 * a device, and a bf16 ulp of difference can move a sampled token. */
static void test_generator(gptx_context *cu, int n_embd, double tol, int same_tokens,
                           const char *label) {
    gptx_model_config cfg = small_config();
    cfg.n_embd = n_embd; /* 128 with 2 heads: head size 64, the tensor-core attention in bf16 */
    enum { VP = 64, CTX = 16, N = 40 };
    gptx_model *m = NULL;
    CHECK_OK(gptx_model_create(&m, cu, &cfg));
    CHECK_OK(gptx_model_init_random(m, 5));
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.seed = 77;
    int32_t prompt[5] = {3, 1, 4, 1, 5}, toks[2][N], win[CTX];
    float got[VP], *all = malloc((size_t)CTX * VP * sizeof *all);
    double worst = 0.0;
    for (int use_cache = 1; use_cache >= 0; use_cache--) {
        gptx_generator_options go;
        gptx_generator_options_init(&go);
        go.use_cache = use_cache;
        gptx_generator *g = NULL;
        gptx_sampler *s = NULL;
        CHECK_OK(gptx_generator_create(&g, m, &go));
        CHECK_OK(gptx_sampler_create(&s, &so));
        CHECK_OK(gptx_generator_feed(g, prompt, 5));
        for (int i = 0; i < N && g && s; i++) {
            if (use_cache) {
                int len = 0;
                CHECK_OK(gptx_generator_logits(g, got, VP));
                CHECK_OK(gptx_generator_window(g, win, CTX, &len));
                CHECK_OK(gptx_model_forward(m, win, NULL, 1, len, NULL));
                CHECK_OK(gptx_model_get_logits(m, all, (size_t)len * VP));
                const float *want = all + (size_t)(len - 1) * VP;
                double scale = 1.0, err = 0.0;
                for (int j = 0; j < cfg.vocab_size; j++) scale = fmax(scale, fabs(want[j]));
                for (int j = 0; j < cfg.vocab_size; j++) err = fmax(err, fabs(got[j] - want[j]));
                for (int j = cfg.vocab_size; j < VP; j++) CHECK(isinf(got[j]) && got[j] < 0);
                worst = fmax(worst, err / scale);
            }
            CHECK_OK(gptx_generator_next(g, s, &toks[use_cache][i]));
        }
        gptx_sampler_destroy(s);
        gptx_generator_destroy(g);
    }
    int differ = 0;
    for (int i = 0; i < N; i++) differ += toks[0][i] != toks[1][i];
    printf("generator (%s): 40 positions, cached vs full logits %.3g (tolerance %g); %d of %d "
           "tokens differ without the cache\n",
           label, worst, tol, differ, N);
    CHECK(worst <= tol && (differ == 0 || !same_tokens));
    free(all);
    gptx_model_destroy(m);
}

/* bf16 mixed: activations take half the bytes; parameters stay fp32 (a value
 * set is read back exactly, not rounded to bf16); the last-position logits
 * of generation match the last row of a full forward pass (to one bf16 ulp); a checkpoint
 * records the policy and loads into an fp32 CPU model unchanged. */
static void test_bf16_storage(gptx_context *cpu, gptx_context *bf) {
    gptx_model_config cfg = small_config();
    gptx_model *m = NULL;
    CHECK_OK(gptx_model_create(&m, bf, &cfg));
    if (!m) return;
    CHECK_OK(gptx_model_init_random(m, 11));
    CHECK(m->act_bytes == 2 && m->wcopy_bytes == 2 && m->wcopy != NULL);
    float v[3] = {1.0f + 0x1p-12f, -3.0f, 0.1f};
    gptx_tensor_info info;
    gptx_tensor_info_init(&info);
    CHECK_OK(gptx_model_tensor_info(m, 2, &info)); /* h.0.ln_1.weight */
    float *row = malloc(info.numel * sizeof *row), *back = malloc(info.numel * sizeof *back);
    CHECK_OK(gptx_model_get_parameter(m, info.name, row, info.numel));
    memcpy(row, v, sizeof v);
    CHECK_OK(gptx_model_set_parameter(m, info.name, row, info.numel));
    CHECK_OK(gptx_model_get_parameter(m, info.name, back, info.numel));
    CHECK(memcmp(back, v, sizeof v) == 0); /* the fp32 master, not its bf16 copy */

    int T = 7, Vp = cfg.padded_vocab_size;
    int32_t in[7] = {3, 1, 4, 1, 5, 9, 2};
    float *full = malloc((size_t)T * Vp * sizeof *full), *last = malloc((size_t)Vp * sizeof *last);
    CHECK_OK(gptx_model_forward(m, in, NULL, 1, T, NULL));
    CHECK_OK(gptx_model_get_logits(m, full, (size_t)T * Vp));
    CHECK_OK(gptx_model_forward_last_logits(m, in, T, T, last));
    /* not bitwise: lm_head is a (1, C) product here and a (T, C) one in the
     * full pass, and cuBLASLt may take another kernel (summation order) per
     * shape. The rows under it are the same kernels at the same shapes, so
     * a logit may differ by the two fp32 sums' rounding (at most 2 C 2^-24
     * = 2e-6 of sum |x w| for C = 16; allowed: 1e-4 of the row's largest
     * logit) plus one bf16 ulp (<= 2^-7 of the larger value) from the bf16
     * store. Another row's logits differ by far more. */
    const float *want = full + (size_t)(T - 1) * Vp;
    double lmax = 0.0;
    size_t off_bound = 0;
    for (int j = 0; j < Vp; j++)
        if (isfinite(want[j])) lmax = fmax(lmax, fabs(want[j]));
    for (int j = 0; j < Vp; j++) {
        if (isinf(want[j]) || isinf(last[j])) {
            off_bound += want[j] != last[j];
            continue;
        }
        double ulp = 0x1p-7 * fmax(fabs(want[j]), fabs(last[j]));
        off_bound += !(fabs(last[j] - want[j]) <= ulp + 1e-4 * lmax);
    }
    printf("bf16 last-position logits vs the full pass's last row: %zu of %d beyond one bf16 ulp\n",
           off_bound, Vp);
    CHECK(off_bound == 0);
    int bf16_exact = 1;
    for (int j = 0; j < Vp; j++) {
        uint32_t u;
        memcpy(&u, &full[j], 4);
        bf16_exact &= (u & 0xffffu) == 0; /* the logits were stored as bf16 */
    }
    CHECK(bf16_exact);
    free(full);
    free(last);

    char path[] = "/tmp/gptx_bf16_ckpt_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    CHECK_OK(gptx_model_save(m, path));
    int p = 0;
    CHECK_OK(gptx_checkpoint_precision(path, &p));
    CHECK(p == GPTX_PRECISION_BF16);
    gptx_model *mc = NULL;
    CHECK_OK(gptx_model_load(&mc, cpu, path));
    if (mc) {
        CHECK_OK(gptx_model_get_parameter(mc, info.name, back, info.numel));
        CHECK(memcmp(back, v, sizeof v) == 0);
    }
    free(row);
    free(back);
    remove(path);
    gptx_model_destroy(mc);
    gptx_model_destroy(m);
    printf("bf16 storage: 2-byte activations and weight copy, fp32 master, checkpoint records bf16\n");
}

/* ---- the bf16 weight copy after AdamW ------------------------------------------------------ */

/* Whether the model's bf16 weight copy is what convert_weights makes of the
 * fp32 master now, bit for bit. */
static int copy_matches_master(gptx_model *m) {
    gptx_context *ctx = m->ctx;
    size_t n = m->layout.nparams;
    void *tmp = NULL;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    CHECK_OK(ctx->ops->alloc(ctx->be, n * m->wcopy_bytes, &tmp));
    CHECK_OK(ctx->ops->convert_weights(ctx->be, tmp, m->params, n));
    CHECK_OK(ctx->ops->download_act(ctx->be, a, m->wcopy, n));
    CHECK_OK(ctx->ops->download_act(ctx->be, b, tmp, n));
    int same = memcmp(a, b, n * sizeof *a) == 0;
    ctx->ops->free(ctx->be, tmp);
    free(a);
    free(b);
    return same;
}

typedef enum { OPT_FUSED, OPT_PER_TENSOR, OPT_ZERO, OPT_PART } copy_opt;

/* 3 training steps; before each step the last tensor (ln_f.bias, outside a
 * part optimizer's first half) is set, which leaves the copy stale. The
 * optimizers that update every parameter with the fused entry must leave
 * the copy current (all of it: the set tensor too); the others leave it
 * stale. After a last forward pass the copy matches the master in every
 * case. params and logits receive the final values. */
static int copy_run(gptx_context *ctx, copy_opt kind, float *params, float *logits) {
    gptx_model_config cfg = small_config();
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    gptx_comm *comm = NULL;
    REQUIRE_OK(gptx_model_create(&m, ctx, &cfg));
    REQUIRE_OK(gptx_model_init_random(m, 21));
    size_t n = gptx_model_num_parameters(m);
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = 1e-2f;
    if (kind == OPT_ZERO) {
        REQUIRE_OK(gptx_comm_create(&comm, ctx, NULL)); /* one rank: the shard is everything */
        REQUIRE_OK(gptx_optimizer_create_sharded(&opt, m, &ao, comm));
    } else if (kind == OPT_PART) {
        REQUIRE_OK(gptx_optimizer_create_part(&opt, m, &ao, 0, n / 2, __func__));
    } else {
        REQUIRE_OK(gptx_optimizer_create(&opt, m, &ao));
    }
    gptx_tensor_info last;
    gptx_tensor_info_init(&last);
    CHECK_OK(gptx_model_tensor_info(m, gptx_model_num_tensors(m) - 1, &last));
    float *row = malloc(last.numel * sizeof *row);
    int32_t in[32], tg[32];
    fill_tokens(in, 32, cfg.vocab_size, 31);
    fill_tokens(tg, 32, cfg.vocab_size, 32);
    int whole = kind == OPT_FUSED || kind == OPT_ZERO, current = 1;
    for (int step = 0; step < 3; step++) {
        CHECK_OK(gptx_model_zero_grad(m));
        CHECK_OK(gptx_model_forward(m, in, tg, 2, 16, NULL));
        CHECK_OK(gptx_model_backward(m, 1.0f));
        for (size_t i = 0; i < last.numel; i++) row[i] = 0.01f * (float)(step + 1) * (float)i;
        CHECK_OK(gptx_model_set_parameter(m, last.name, row, last.numel));
        if (kind == OPT_ZERO)
            CHECK_OK(gptx_optimizer_step_sharded(opt, m, 32, NULL));
        else
            CHECK_OK(gptx_optimizer_step(opt, m, NULL));
        CHECK(m->wcopy_stale == !whole);
        if (whole) current &= copy_matches_master(m);
    }
    CHECK(current);
    CHECK_OK(gptx_model_forward(m, in, NULL, 2, 16, NULL));
    CHECK(copy_matches_master(m));
    CHECK_OK(gptx_model_get_logits(m, logits, 32 * (size_t)cfg.padded_vocab_size));
    read_tensors(m, params, 0);
    free(row);
    gptx_optimizer_destroy(opt);
    gptx_comm_destroy(comm);
    gptx_model_destroy(m);
    return 0;
}

/* The bf16 weight copy refreshed inside AdamW (adamw_copy): current after
 * every step of an optimizer over all parameters (plain, or ZeRO-1 over one
 * rank), stale for the per-tensor AdamW variant and for an optimizer over
 * part of the parameters (converted before the next forward pass); the
 * fused, per-tensor and ZeRO runs end with the same parameters and logits
 * bit for bit. */
static int test_bf16_copy_refresh(gptx_context *bf, gptx_context *bf_per_tensor) {
    gptx_model_config cfg = small_config();
    size_t np = 0, nl = 32 * (size_t)cfg.padded_vocab_size;
    {
        gptx_model *m = NULL;
        REQUIRE_OK(gptx_model_create(&m, bf, &cfg));
        np = gptx_model_num_parameters(m);
        gptx_model_destroy(m);
    }
    float *p[4], *l[4];
    const char *names[] = {"fused", "per-tensor", "zero-1, one rank", "part"};
    for (int k = 0; k < 4; k++) {
        p[k] = malloc(np * sizeof(float));
        l[k] = malloc(nl * sizeof(float));
        if (copy_run(k == OPT_PER_TENSOR ? bf_per_tensor : bf, (copy_opt)k, p[k], l[k])) return 1;
    }
    for (int k = 1; k < 3; k++) {
        int same = memcmp(p[0], p[k], np * sizeof(float)) == 0 &&
                   memcmp(l[0], l[k], nl * sizeof(float)) == 0;
        printf("bf16 weight copy: %s AdamW vs %s: parameters and logits %s\n", names[0], names[k],
               same ? "bitwise equal" : "DIFFER");
        CHECK(same);
    }
    for (int k = 0; k < 4; k++) {
        free(p[k]);
        free(l[k]);
    }
    return 0;
}

/* gptx_model_forward_backward (the fused classifier kernel) against forward
 * + backward on the same backend: the same loss and gradients, bit for bit. */
static void test_fused_classifier(gptx_context *cu, gptx_model_config cfg, const char *what) {
    gptx_model *a = NULL, *b = NULL;
    if (gptx_model_create(&a, cu, &cfg) || gptx_model_create(&b, cu, &cfg) ||
        gptx_model_init_random(a, 77) || gptx_model_init_random(b, 77)) {
        check_failures++;
        return;
    }
    enum { B = 2, T = 13 };
    int32_t in[B * T], tg[B * T];
    fill_tokens(in, B * T, cfg.vocab_size, 11);
    fill_tokens(tg, B * T, cfg.vocab_size, 12);
    tg[4] = GPTX_IGNORE_INDEX;
    float la = 0.0f, lb = 0.0f;
    CHECK_OK(gptx_model_zero_grad(a));
    CHECK_OK(gptx_model_zero_grad(b));
    CHECK_OK(gptx_model_forward(a, in, tg, B, T, &la));
    CHECK_OK(gptx_model_backward(a, 0.75f));
    CHECK_OK(gptx_model_forward_backward(b, in, tg, B, T, 0.75f, &lb));
    size_t n = gptx_model_num_parameters(a), differ = 0;
    float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
    read_tensors(a, ga, 1);
    read_tensors(b, gb, 1);
    for (size_t i = 0; i < n; i++) differ += memcmp(&ga[i], &gb[i], sizeof *ga) != 0;
    printf("  fused classifier, %s: loss %.6f vs %.6f, %zu of %zu gradient values differ\n", what,
           (double)la, (double)lb, differ, n);
    CHECK(memcmp(&la, &lb, sizeof la) == 0 && differ == 0);
    free(ga);
    free(gb);
    gptx_model_destroy(a);
    gptx_model_destroy(b);
}

int main(void) {
    gptx_context *cpu = NULL, *cu = NULL, *cu_sep = NULL, *cu_naive = NULL;
    gptx_context *bf = NULL, *bf_sep = NULL, *bf_simt = NULL, *bf_per_tensor = NULL;
    gptx_context *tf = NULL, *tf_simt = NULL;
    int rc = make_cuda(&cu, 1, GPTX_ATTENTION_FLASH, "fp32");
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip("test_cuda_model");
    if (rc != GPTX_OK) {
        fprintf(stderr, "cuda context: %s\n", gptx_last_error());
        return 1;
    }
    printf("test_cuda_model on %s (backend name '%s')\n", CUDA_TEST_KIND,
           gptx_context_backend_name(cu));
    CHECK(strcmp(gptx_context_backend_name(cu), "cuda") == 0);
    REQUIRE_OK(cuda_test_cpu_context(&cpu));
    REQUIRE_OK(make_cuda(&cu_sep, 0, GPTX_ATTENTION_FLASH, "fp32"));
    REQUIRE_OK(make_cuda(&cu_naive, 1, GPTX_ATTENTION_NAIVE, "fp32"));
    REQUIRE_OK(make_cuda(&bf, 1, GPTX_ATTENTION_FLASH, "bf16"));
    REQUIRE_OK(make_cuda(&bf_sep, 0, GPTX_ATTENTION_FLASH, "bf16"));
    REQUIRE_OK(make_cuda(&bf_simt, 1, GPTX_ATTENTION_FLASH_SIMT, "bf16"));
    REQUIRE_OK(make_cuda(&tf, 1, GPTX_ATTENTION_FLASH, "tf32"));
    REQUIRE_OK(make_cuda(&tf_simt, 1, GPTX_ATTENTION_FLASH_SIMT, "tf32"));
    REQUIRE_OK(make_cuda(&bf_per_tensor, 1, GPTX_ATTENTION_FLASH, "bf16"));
    REQUIRE_OK(gptx_context_set_variant(bf_per_tensor, GPTX_VARIANT_FUSED_ADAMW, 0));
    CHECK(gptx_context_precision(cu) == GPTX_PRECISION_FP32);
    CHECK(gptx_context_precision(bf) == GPTX_PRECISION_BF16);

    gptx_model_config a = small_config(); /* vocab 50 padded 64, masked, tied, qkv bias */
    compare_runs(cpu, cu, a, 2, 16, "tied head, padded vocabulary masked, B 2 T 16");
    gptx_model_config b = small_config();
    b.n_embd = 24;
    b.n_head = 3;
    b.tied_head = 0;
    b.qkv_bias = 0;
    b.mask_padded_logits = 0;
    compare_runs(cpu, cu, b, 3, 11, "untied, padded columns in the softmax, no qkv bias, B 3 T 11");
    compare_runs(cpu, cu_sep, a, 2, 16, "separate Q, K, V products (fused_qkv = 0)");
    compare_runs(cpu, bf, a, 2, 16, "tied head, padded vocabulary masked, B 2 T 16");
    compare_runs(cpu, bf, b, 3, 11, "untied, padded columns in the softmax, no qkv bias, B 3 T 11");
    {
        /* the separate-QKV variant sums its gradients with residual_forward,
         * and bf16 mixed keeps the residual stream fp32: refused up front */
        gptx_model *sep = NULL;
        CHECK_STATUS(gptx_model_create(&sep, bf_sep, &a), GPTX_ERR_UNSUPPORTED);
    }
    /* head size 64 under bf16: the tensor-core attention (cuda_flash.cu) in the model */
    gptx_model_config c = small_config();
    c.n_embd = 128;
    c.context_length = 48;
    c.n_layer = 1;
    compare_runs(cpu, bf, c, 2, 40, "head size 64 (tensor-core attention), B 2 T 40");
    compare_attention_paths(cpu, c, 2, 40, bf, bf_simt, "bf16");
    /* and under tf32: the tensor-core attention on tf32 operands (mma m16n8k8) */
    compare_attention_paths(cpu, c, 2, 40, tf, tf_simt, "tf32");
    compare_bf16_implementations(cpu, a, 2, 16, bf, "tied head, padded vocabulary masked");
    compare_bf16_implementations(cpu, b, 3, 11, bf, "untied, padded columns in the softmax");
    test_bf16_storage(cpu, bf);
    if (test_bf16_copy_refresh(bf, bf_per_tensor)) check_failures++;
    test_fused_classifier(cu, a, "fp32, padded vocabulary masked");
    test_fused_classifier(cu, b, "fp32, padded columns in the softmax");
    test_fused_classifier(bf, a, "bf16, padded vocabulary masked");

    gptx_model *m = NULL;
    CHECK_STATUS(gptx_model_create(&m, cu_naive, &a), GPTX_ERR_UNSUPPORTED);

    test_memory(cu);
    test_generate_and_loader(cpu, cu);
    test_generator(cu, 16, 1e-5, 1, "fp32");
    test_generator(bf, 16, 2e-2, 0, "bf16");
    test_generator(bf, 128, 2e-2, 0, "bf16, head size 64");

#ifndef GPTX_TEST_CUDA_EMU
    /* errors of the CUDA-specific settings */
    gptx_context *bad = NULL;
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    o.device = 4096;
    CHECK_STATUS(gptx_context_create(&bad, &o), GPTX_ERR_INVALID);
    o.device = 0;
    cuda_test_precision("bf17");
    CHECK_STATUS(gptx_context_create(&bad, &o), GPTX_ERR_INVALID);
    o.backend = GPTX_BACKEND_AUTO;
    CHECK_STATUS(gptx_context_create(&bad, &o), GPTX_ERR_INVALID);
    cuda_test_precision(NULL);
    CHECK_OK(gptx_context_create(&bad, &o)); /* AUTO picks the device */
    CHECK(bad && strcmp(gptx_context_backend_name(bad), "cuda") == 0);
    gptx_context_destroy(bad);
#endif
    gptx_context_destroy(bf);
    gptx_context_destroy(bf_sep);
    gptx_context_destroy(bf_simt);
    gptx_context_destroy(tf);
    gptx_context_destroy(tf_simt);
    gptx_context_destroy(bf_per_tensor);
    gptx_context_destroy(cu_naive);
    gptx_context_destroy(cu_sep);
    gptx_context_destroy(cu);
    gptx_context_destroy(cpu);
    return check_exit("test_cuda_model");
}
