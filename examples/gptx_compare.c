/* gptx-compare: the same model and batch in two contexts (backends, thread
 * counts, kernel variants), compared layer by layer: logits -> softmax ->
 * sampled tokens. Exit status 0 = within tolerance, 1 = outside, 2 = error. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx.h>
#include <gptx/gptx_experimental.h>

#include "prog_error.h"
#include "prog_presets.h"

/* One side: context options and the kernel variants set on the context. */
typedef struct side_spec {
    gptx_context_options co;
    int attention, fused_qkv, fused_norm_gelu;
} side_spec;

static void usage(void) {
    printf(
        "usage: gptx-compare [options]\n"
        "Runs one model on one fixed, seeded batch in two contexts and prints the\n"
        "layered comparison (logits -> softmax -> sampled tokens); side a is the\n"
        "reference. Exit status: 0 within tolerance, 1 outside it, 2 error.\n"
        "\n"
        "sides:\n"
        "  --a SPEC, --b SPEC     backend[:N][:precision][:variant...] (default cpu:1 and\n"
        "                         cpu:2); precision fp32, tf32, bf16, bf16_pure\n"
        "                         backend cpu, cuda or auto; N = CPU threads (0 = all\n"
        "                         cores) or the CUDA device; variants: naive (attention\n"
        "                         with explicit probabilities), split-qkv, unfused\n"
        "                         (step-by-step LayerNorm/GELU), e.g. cpu:1:naive\n"
        "  --deterministic 0|1    the contexts' deterministic option (default 1)\n"
        "model:\n"
        "  --model FILE           load a gptx safetensors model in both contexts\n"
        "  --preset NAME          without --model: a preset of every gptx program (default\n"
        "                         tiny; gptx-train --help lists them): its shape and context\n"
        "  --layers N --heads N --width N --context N   override the preset\n"
        "  --vocab-size N         real vocabulary (default 50257)\n"
        "  --padded-vocab N       rows of wte (default 50304)\n"
        "  --no-mask              padded logits take part in the softmax\n"
        "  --init-seed N          initialisation seed (default 1337)\n"
        "  --perturb NAME:I:D     add D to element I of parameter NAME on side b only\n"
        "batch:\n"
        "  --batch N              rows B (default 4)\n"
        "  --seq N                tokens per row T (default min(context, 64))\n"
        "  --data-seed N          seed of the token ids (default 1)\n"
        "comparison:\n"
        "  --positions N          compare the last N positions of each row (default all)\n"
        "  --draws N              sampler draws per position (default 1)\n"
        "  --temperature X --top-k N --top-p X --sample-seed N   the shared sampler\n"
        "                         (default 1, 0, 1, 0)\n"
        "  --tolerance NAME       exact (default: every layer bitwise / zero mismatches),\n"
        "                         fp32 (logits 1e-4 as tests/reference, probabilities\n"
        "                         2e-4, KL 2e-8, tokens and argmax 1%% of draws / rows)\n"
        "                         or bf16 (fp32 against a bf16 policy: logits 0.2,\n"
        "                         probabilities 0.03, KL 1e-3, tokens 40%%, argmax 5%%)\n"
        "  --atol X --rtol X --prob-atol X --kl-tol X\n"
        "  --max-token-mismatches N --max-argmax-mismatches N   override the preset\n");
}

static int bad(const char *flag, const char *value, const char *why) {
    fprintf(stderr, "gptx-compare: %s %s: %s (see --help)\n", flag, value ? value : "", why);
    return -1;
}

static int parse_long(const char *flag, const char *v, long lo, long hi, long *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (!end || end == v || *end || errno || x < lo || x > hi) {
        char why[96];
        snprintf(why, sizeof why, "expected an integer in [%ld, %ld]", lo, hi);
        return bad(flag, v, why);
    }
    *out = x;
    return 0;
}

static int parse_int(const char *flag, const char *v, int lo, int *out) {
    long x = 0;
    if (parse_long(flag, v, lo, 1000000000L, &x)) return -1;
    *out = (int)x;
    return 0;
}

static int parse_u64(const char *flag, const char *v, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (!end || end == v || *end || errno || v[0] == '-')
        return bad(flag, v, "expected an unsigned integer");
    *out = (uint64_t)x;
    return 0;
}

static int parse_double(const char *flag, const char *v, double lo, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!end || end == v || *end || errno || !(x >= lo)) {
        char why[64];
        snprintf(why, sizeof why, "expected a number >= %g", lo);
        return bad(flag, v, why);
    }
    *out = x;
    return 0;
}

/* One side: backend[:N][:precision][:variant...] -> context options. */
static int parse_side(const char *flag, const char *spec, side_spec *side) {
    gptx_context_options *co = &side->co;
    char buf[128];
    if (strlen(spec) >= sizeof buf) return bad(flag, spec, "too long");
    strcpy(buf, spec);
    char *save = NULL, *tok = strtok_r(buf, ":", &save);
    if (!tok) return bad(flag, spec, "expected backend[:N][:precision][:variant...]");
    if (!strcmp(tok, "cpu")) co->backend = GPTX_BACKEND_CPU;
    else if (!strcmp(tok, "cuda")) co->backend = GPTX_BACKEND_CUDA;
    else if (!strcmp(tok, "auto")) co->backend = GPTX_BACKEND_AUTO;
    else return bad(flag, spec, "backend must be cpu, cuda or auto");
    int field = 1;
    while ((tok = strtok_r(NULL, ":", &save)) != NULL) {
        if (field++ == 1 && tok[0] >= '0' && tok[0] <= '9') {
            int n = 0;
            if (parse_int(flag, tok, 0, &n)) return -1;
            if (co->backend == GPTX_BACKEND_CPU) co->num_threads = n;
            else co->device = n;
        } else if (!strcmp(tok, "naive")) {
            side->attention = GPTX_ATTENTION_NAIVE;
        } else if (!strcmp(tok, "split-qkv")) {
            side->fused_qkv = 0;
        } else if (!strcmp(tok, "unfused")) {
            side->fused_norm_gelu = 0;
        } else if (gptx_precision_from_name(tok) >= 0) {
            co->precision = gptx_precision_from_name(tok);
        } else {
            gptx_clear_error();
            return bad(flag, spec, "expected a precision (fp32, tf32, bf16, bf16_pure) or a "
                                   "variant (naive, split-qkv, unfused)");
        }
    }
    return 0;
}

typedef struct cli {
    side_spec ca, cb;
    const char *spec_a, *spec_b;
    const char *model_path;
    gptx_model_config cfg;
    uint64_t init_seed, data_seed;
    const char *perturb;
    int B, T;
    gptx_compare_options cmp;
    gptx_sampler_options samp;
    const char *tolerance;
    /* explicit tolerance overrides; < 0 = from the preset */
    double atol, rtol, prob_atol, kl_tol;
    long max_tok, max_arg;
} cli;

/* A preset of every gptx program (examples/common/prog_presets.c). */
static int apply_preset(gptx_model_config *c, const char *name) {
    const prog_preset *p = prog_preset_find(name);
    if (!p) {
        char why[160];
        snprintf(why, sizeof why, "expected %s", prog_preset_names());
        return bad("--preset", name, why);
    }
    c->n_layer = p->n_layer, c->n_head = p->n_head, c->n_embd = p->n_embd;
    c->context_length = p->context;
    return 0;
}

static int parse_args(cli *o, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage();
            exit(0);
        }
        if (!strcmp(k, "--version")) {
            printf("gptx-compare %s\n", gptx_version());
            exit(0);
        }
        if (!strcmp(k, "--no-mask")) {
            o->cfg.mask_padded_logits = 0;
            continue;
        }
        if (i + 1 >= argc) return bad(k, NULL, "needs a value (or unknown option)");
        const char *v = argv[++i];
        int rc = 0, d = 0;
        if (!strcmp(k, "--a")) o->spec_a = v;
        else if (!strcmp(k, "--b")) o->spec_b = v;
        else if (!strcmp(k, "--deterministic")) {
            rc = parse_int(k, v, 0, &d);
            if (!rc && d > 1) rc = bad(k, v, "expected 0 or 1");
            o->ca.co.deterministic = o->cb.co.deterministic = d;
        } else if (!strcmp(k, "--model")) o->model_path = v;
        else if (!strcmp(k, "--preset")) rc = apply_preset(&o->cfg, v);
        else if (!strcmp(k, "--layers")) rc = parse_int(k, v, 1, &o->cfg.n_layer);
        else if (!strcmp(k, "--heads")) rc = parse_int(k, v, 1, &o->cfg.n_head);
        else if (!strcmp(k, "--width")) rc = parse_int(k, v, 1, &o->cfg.n_embd);
        else if (!strcmp(k, "--context")) rc = parse_int(k, v, 1, &o->cfg.context_length);
        else if (!strcmp(k, "--vocab-size")) rc = parse_int(k, v, 1, &o->cfg.vocab_size);
        else if (!strcmp(k, "--padded-vocab")) rc = parse_int(k, v, 1, &o->cfg.padded_vocab_size);
        else if (!strcmp(k, "--init-seed")) rc = parse_u64(k, v, &o->init_seed);
        else if (!strcmp(k, "--perturb")) o->perturb = v;
        else if (!strcmp(k, "--batch")) rc = parse_int(k, v, 1, &o->B);
        else if (!strcmp(k, "--seq")) rc = parse_int(k, v, 1, &o->T);
        else if (!strcmp(k, "--data-seed")) rc = parse_u64(k, v, &o->data_seed);
        else if (!strcmp(k, "--positions")) rc = parse_int(k, v, 0, &o->cmp.positions);
        else if (!strcmp(k, "--draws")) rc = parse_int(k, v, 1, &o->cmp.draws_per_position);
        else if (!strcmp(k, "--temperature")) {
            double x = 0;
            rc = parse_double(k, v, 0.0, &x);
            o->samp.temperature = (float)x;
        } else if (!strcmp(k, "--top-k")) rc = parse_int(k, v, 0, &o->samp.top_k);
        else if (!strcmp(k, "--top-p")) {
            double x = 0;
            rc = parse_double(k, v, 0.0, &x);
            o->samp.top_p = (float)x;
        } else if (!strcmp(k, "--sample-seed")) rc = parse_u64(k, v, &o->samp.seed);
        else if (!strcmp(k, "--tolerance")) {
            if (strcmp(v, "exact") && strcmp(v, "fp32") && strcmp(v, "bf16"))
                rc = bad(k, v, "expected exact, fp32 or bf16");
            o->tolerance = v;
        } else if (!strcmp(k, "--atol")) rc = parse_double(k, v, 0.0, &o->atol);
        else if (!strcmp(k, "--rtol")) rc = parse_double(k, v, 0.0, &o->rtol);
        else if (!strcmp(k, "--prob-atol")) rc = parse_double(k, v, 0.0, &o->prob_atol);
        else if (!strcmp(k, "--kl-tol")) rc = parse_double(k, v, 0.0, &o->kl_tol);
        else if (!strcmp(k, "--max-token-mismatches"))
            rc = parse_long(k, v, 0, 1000000000L, &o->max_tok);
        else if (!strcmp(k, "--max-argmax-mismatches"))
            rc = parse_long(k, v, 0, 1000000000L, &o->max_arg);
        else rc = bad(k, v, "unknown option");
        if (rc) return -1;
    }
    if (parse_side("--a", o->spec_a, &o->ca) || parse_side("--b", o->spec_b, &o->cb)) return -1;
    return 0;
}

/* Tolerances: the preset, then the explicit flags. */
static void set_tolerances(cli *o, int64_t rows, int64_t draws) {
    gptx_compare_options *c = &o->cmp;
    if (!strcmp(o->tolerance, "fp32")) {
        /* |dlogit| <= 1e-4 moves each p_i by at most p_i * 2e-4 (the logit and
         * the log-sum-exp), and KL ~ 1/2 Var(dlogit) <= 1/2 (2e-4)^2 */
        c->logits_atol = 1e-4;
        c->prob_atol = 2e-4;
        c->kl_tol = 2e-8;
        c->max_token_mismatches = (draws + 99) / 100;
        c->max_argmax_mismatches = (rows + 99) / 100;
    } else if (!strcmp(o->tolerance, "bf16")) {
        /* fp32 against a bf16 policy (docs/numerics.md: a trained 4-layer
         * model gave max |dlogit| 0.055 / 0.086 for bf16 / bf16_pure, max
         * |dp| 0.011, KL max 4.6e-4, argmax 5 of 256 rows; a sampled token
         * differs in 20-25 % of coupled draws at temperature 1): about 2x */
        c->logits_atol = 0.2;
        c->prob_atol = 0.03;
        c->kl_tol = 1e-3;
        c->max_token_mismatches = (draws * 40 + 99) / 100;
        c->max_argmax_mismatches = (rows * 5 + 99) / 100;
    }
    if (o->atol >= 0) c->logits_atol = o->atol;
    if (o->rtol >= 0) c->logits_rtol = o->rtol;
    if (o->prob_atol >= 0) c->prob_atol = o->prob_atol;
    if (o->kl_tol >= 0) c->kl_tol = o->kl_tol;
    if (o->max_tok >= 0) c->max_token_mismatches = o->max_tok;
    if (o->max_arg >= 0) c->max_argmax_mismatches = o->max_arg;
}

#define TRY(call)                                                                       \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != GPTX_OK) {                                                           \
            fprintf(stderr, "gptx-compare: %s: %s\n", gptx_status_name(rc_), prog_error_text()); \
            goto done;                                                                  \
        }                                                                               \
    } while (0)

static int create_side(gptx_context **ctx, const side_spec *s) {
    int rc = gptx_context_create(ctx, &s->co);
    if (rc == GPTX_OK) rc = gptx_context_set_variant(*ctx, GPTX_VARIANT_ATTENTION, s->attention);
    if (rc == GPTX_OK) rc = gptx_context_set_variant(*ctx, GPTX_VARIANT_FUSED_QKV, s->fused_qkv);
    if (rc == GPTX_OK)
        rc = gptx_context_set_variant(*ctx, GPTX_VARIANT_FUSED_NORM_GELU, s->fused_norm_gelu);
    return rc;
}

/* Copies every parameter of src into dst (the contexts may differ). */
static int copy_parameters(gptx_model *dst, const gptx_model *src) {
    int n = gptx_model_num_tensors(src);
    for (int i = 0; i < n; i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        int rc = gptx_model_tensor_info(src, i, &info);
        if (rc != GPTX_OK) return rc;
        float *buf = malloc(info.numel * sizeof *buf);
        if (!buf) return GPTX_ERR_NO_MEMORY;
        rc = gptx_model_get_parameter(src, info.name, buf, info.numel);
        if (rc == GPTX_OK) rc = gptx_model_set_parameter(dst, info.name, buf, info.numel);
        free(buf);
        if (rc != GPTX_OK) return rc;
    }
    return GPTX_OK;
}

/* --perturb NAME:I:D on one model. */
static int perturb(gptx_model *m, const char *spec) {
    char name[128];
    const char *c2 = strrchr(spec, ':');
    const char *c1 = NULL;
    for (const char *p = spec; c2 && p < c2; p++)
        if (*p == ':') c1 = p;
    if (!c1 || (size_t)(c1 - spec) >= sizeof name) return bad("--perturb", spec, "expected NAME:I:D");
    memcpy(name, spec, (size_t)(c1 - spec));
    name[c1 - spec] = '\0';
    char *end = NULL;
    errno = 0;
    unsigned long long idx = strtoull(c1 + 1, &end, 10);
    if (end != c2 || errno) return bad("--perturb", spec, "I must be an element index");
    double delta = strtod(c2 + 1, &end);
    if (!end || end == c2 + 1 || *end || !isfinite(delta))
        return bad("--perturb", spec, "D must be a finite number");
    int t = 0;
    gptx_tensor_info info;
    gptx_tensor_info_init(&info);
    if (gptx_model_find_tensor(m, name, &t) != GPTX_OK || gptx_model_tensor_info(m, t, &info) != GPTX_OK)
        return bad("--perturb", spec, "no such parameter");
    if (idx >= info.numel) return bad("--perturb", spec, "index past the end of the tensor");
    float *buf = malloc(info.numel * sizeof *buf);
    if (!buf) return bad("--perturb", spec, "out of memory");
    int rc = gptx_model_get_parameter(m, name, buf, info.numel);
    float before = buf[idx];
    buf[idx] += (float)delta;
    if (rc == GPTX_OK) rc = gptx_model_set_parameter(m, name, buf, info.numel);
    if (rc == GPTX_OK)
        printf("side b: %s[%llu] %.9g -> %.9g\n", name, idx, (double)before, (double)buf[idx]);
    free(buf);
    return rc == GPTX_OK ? 0 : bad("--perturb", spec, prog_error_text());
}

int main(int argc, char **argv) {
    cli o;
    memset(&o, 0, sizeof o);
    gptx_context_options_init(&o.ca.co);
    gptx_context_options_init(&o.cb.co);
    o.ca.co.backend = o.cb.co.backend = GPTX_BACKEND_CPU;
    o.ca.attention = o.cb.attention = GPTX_ATTENTION_FLASH;
    o.ca.fused_qkv = o.cb.fused_qkv = o.ca.fused_norm_gelu = o.cb.fused_norm_gelu = 1;
    o.spec_a = "cpu:1";
    o.spec_b = "cpu:2";
    gptx_model_config_init(&o.cfg);
    apply_preset(&o.cfg, "tiny");
    o.init_seed = 1337;
    o.data_seed = 1;
    o.B = 4;
    gptx_compare_options_init(&o.cmp);
    gptx_sampler_options_init(&o.samp);
    o.tolerance = "exact";
    o.atol = o.rtol = o.prob_atol = o.kl_tol = -1.0;
    o.max_tok = o.max_arg = -1;
    if (parse_args(&o, argc, argv)) return 2;

    int status = 2;
    gptx_context *ca = NULL, *cb = NULL;
    gptx_model *ma = NULL, *mb = NULL;
    int32_t *inputs = NULL;
    TRY(create_side(&ca, &o.ca));
    TRY(create_side(&cb, &o.cb));
    if (o.model_path) {
        TRY(gptx_model_load(&ma, ca, o.model_path));
        TRY(gptx_model_load(&mb, cb, o.model_path));
    } else {
        TRY(gptx_model_create(&ma, ca, &o.cfg));
        TRY(gptx_model_init_random(ma, o.init_seed));
        TRY(gptx_model_create(&mb, cb, &o.cfg));
        TRY(copy_parameters(mb, ma));
    }
    if (o.perturb && perturb(mb, o.perturb)) goto done;
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    TRY(gptx_model_get_config(ma, &cfg));
    int T = o.T ? o.T : (cfg.context_length < 64 ? cfg.context_length : 64);
    if (T > cfg.context_length) {
        fprintf(stderr, "gptx-compare: --seq %d exceeds the context length %d\n", T,
                cfg.context_length);
        goto done;
    }
    /* a fixed batch: ids from a 64-bit LCG seeded by --data-seed */
    size_t BT = (size_t)o.B * T;
    inputs = malloc(BT * sizeof *inputs);
    if (!inputs) goto done;
    uint64_t x = o.data_seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < BT; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        inputs[i] = (int32_t)((x >> 33) % (uint64_t)cfg.vocab_size);
    }
    int P = o.cmp.positions ? o.cmp.positions : T;
    set_tolerances(&o, (int64_t)o.B * P, (int64_t)o.B * P * o.cmp.draws_per_position);
    o.cmp.sampler = &o.samp;
    o.cmp.label_a = o.spec_a;
    o.cmp.label_b = o.spec_b;
    printf("model: %s, %d layers, %d heads, width %d, vocab %d (padded %d, %s), %zu parameters\n",
           o.model_path ? o.model_path : "random init", cfg.n_layer, cfg.n_head, cfg.n_embd,
           cfg.vocab_size, cfg.padded_vocab_size, cfg.mask_padded_logits ? "masked" : "unmasked",
           gptx_model_num_parameters(ma));
    printf("batch: B %d x T %d, data seed %llu; tolerance preset %s\n", o.B, T,
           (unsigned long long)o.data_seed, o.tolerance);
    gptx_compare_report r;
    gptx_compare_report_init(&r);
    TRY(gptx_compare_models(ma, mb, inputs, o.B, T, &o.cmp, &r));
    char text[GPTX_COMPARE_TEXT_MAX];
    TRY(gptx_compare_report_format(&r, text, sizeof text, NULL));
    fputs(text, stdout);
    status = r.pass ? 0 : 1;
done:
    free(inputs);
    gptx_model_destroy(ma);
    gptx_model_destroy(mb);
    gptx_context_destroy(ca);
    gptx_context_destroy(cb);
    return status;
}
