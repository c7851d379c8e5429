/* gptx-compare: the same model and batch in two contexts (backends, thread
 * counts, kernel variants), compared layer by layer: logits -> softmax ->
 * sampled tokens. Exit status 0 = within tolerance, 1 = outside it or the work
 * failed, 2 = a wrong command line (prog_flags.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx.h>
#include <gptx/gptx_experimental.h>

#include "prog_error.h"
#include "prog_flags.h"
#include "prog_presets.h"

/* One side: context options and the kernel variants set on the context. */
typedef struct side_spec {
    gptx_context_options co;
    int attention, fused_qkv, fused_norm_gelu;
} side_spec;

#define PROG "gptx-compare"

static int bad(const char *flag, const char *value, const char *why) {
    return prog_usage_error(PROG, flag, value, why);
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
            if (co->backend == GPTX_BACKEND_CPU && n > gptx_cpu_max_threads()) {
                char why[96];
                snprintf(why, sizeof why, "the CPU threads must be in [0, %d] on this machine",
                         gptx_cpu_max_threads());
                return bad(flag, spec, why);
            }
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
    const prog_preset *p = prog_preset_lookup(PROG, "--preset", name);
    if (!p) return -1;
    c->n_layer = p->n_layer, c->n_head = p->n_head, c->n_embd = p->n_embd;
    c->context_length = p->context;
    return 0;
}

/* The flags as given (prog_flags.h), applied to cli by parse_args. */
typedef struct cmp_args {
    const char *a, *b, *model, *preset, *perturb, *tolerance;
    int deterministic, layers, heads, width, context, vocab_size, padded_vocab, no_mask;
    unsigned long long init_seed, data_seed, sample_seed;
    int batch, seq, positions, draws, top_k;
    double temperature, top_p, atol, rtol, prob_atol, kl_tol;
    long long max_tok, max_arg;
} cmp_args;

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(cmp_args, field, name, kind, lo, hi, choices, arg, help, bits, 0)
#define BIG 1e9
static const prog_flag cmp_rows[] = {
    PROG_SECTION("sides:"),
    ROW(a, "--a", PROG_FLAG_STR, 0, 0, NULL, "SPEC",
        "side a, the reference: backend[:N][:precision][:variant...];\n"
        "precision fp32, tf32, bf16, bf16_pure; backend cpu, cuda or\n"
        "auto; N = CPU threads (0 = all cores) or the CUDA device;\n"
        "variants: naive (attention with explicit probabilities),\n"
        "split-qkv, unfused (step-by-step LayerNorm/GELU), e.g.\n"
        "cpu:1:naive", 0),
    ROW(b, "--b", PROG_FLAG_STR, 0, 0, NULL, "SPEC", "side b, the same form", 0),
    ROW(deterministic, "--deterministic", PROG_FLAG_INT, 0, 1, NULL, "0|1",
        "the contexts' deterministic option", 0),
    PROG_SECTION("model:"),
    ROW(model, "--model", PROG_FLAG_STR, 0, 0, NULL, "FILE",
        "load a gptx safetensors model in both contexts", 0),
    ROW(preset, "--preset", PROG_FLAG_STR, 0, 0, NULL, "NAME",
        "without --model: a preset of every gptx program (gptx-train\n"
        "--help lists them): its shape and context", 0),
    ROW(layers, "--layers", PROG_FLAG_INT, 1, BIG, NULL, "N", "override the preset's layers",
        PROG_FLAG_NO_DEFAULT),
    ROW(heads, "--heads", PROG_FLAG_INT, 1, BIG, NULL, "N", "... heads", PROG_FLAG_NO_DEFAULT),
    ROW(width, "--width", PROG_FLAG_INT, 1, BIG, NULL, "N", "... width", PROG_FLAG_NO_DEFAULT),
    ROW(context, "--context", PROG_FLAG_INT, 1, BIG, NULL, "N", "... context",
        PROG_FLAG_NO_DEFAULT),
    ROW(vocab_size, "--vocab-size", PROG_FLAG_INT, 1, BIG, NULL, "N", "real vocabulary", 0),
    ROW(padded_vocab, "--padded-vocab", PROG_FLAG_INT, 1, BIG, NULL, "N", "rows of wte", 0),
    ROW(no_mask, "--no-mask", PROG_FLAG_SWITCH, 0, 0, NULL, NULL,
        "padded logits take part in the softmax", 0),
    ROW(init_seed, "--init-seed", PROG_FLAG_U64, 0, 0, NULL, "N", "initialisation seed", 0),
    ROW(perturb, "--perturb", PROG_FLAG_STR, 0, 0, NULL, "NAME:I:D",
        "add D to element I of parameter NAME on side b only", 0),
    PROG_SECTION("batch:"),
    ROW(batch, "--batch", PROG_FLAG_INT, 1, BIG, NULL, "N", "rows B", 0),
    ROW(seq, "--seq", PROG_FLAG_INT, 1, BIG, NULL, "N",
        "tokens per row T (default min(context, 64))", PROG_FLAG_NO_DEFAULT),
    ROW(data_seed, "--data-seed", PROG_FLAG_U64, 0, 0, NULL, "N", "seed of the token ids", 0),
    PROG_SECTION("comparison:"),
    ROW(positions, "--positions", PROG_FLAG_INT, 0, BIG, NULL, "N",
        "compare the last N positions of each row (0 = all)", 0),
    ROW(draws, "--draws", PROG_FLAG_INT, 1, BIG, NULL, "N", "sampler draws per position", 0),
    ROW(temperature, "--temperature", PROG_FLAG_DOUBLE, 0, 1e6, NULL, "X",
        "the shared sampler's temperature", 0),
    ROW(top_k, "--top-k", PROG_FLAG_INT, 0, BIG, NULL, "N", "... top-k (0 = off)", 0),
    ROW(top_p, "--top-p", PROG_FLAG_DOUBLE, 0, 1, NULL, "X", "... top-p", 0),
    ROW(sample_seed, "--sample-seed", PROG_FLAG_U64, 0, 0, NULL, "N", "... seed", 0),
    ROW(tolerance, "--tolerance", PROG_FLAG_CHOICE, 0, 0, "exact|fp32|bf16", "NAME",
        "exact: every layer bitwise / zero mismatches; fp32: logits\n"
        "1e-4 as tests/reference, probabilities 2e-4, KL 2e-8, tokens\n"
        "and argmax 1% of draws / rows; bf16 (fp32 against a bf16\n"
        "policy): logits 0.2, probabilities 0.03, KL 1e-3, tokens\n"
        "40%, argmax 5%", 0),
    ROW(atol, "--atol", PROG_FLAG_DOUBLE, 0, 1e300, NULL, "X",
        "override the tolerance's logits atol", PROG_FLAG_NO_DEFAULT),
    ROW(rtol, "--rtol", PROG_FLAG_DOUBLE, 0, 1e300, NULL, "X", "... logits rtol",
        PROG_FLAG_NO_DEFAULT),
    ROW(prob_atol, "--prob-atol", PROG_FLAG_DOUBLE, 0, 1e300, NULL, "X", "... probabilities atol",
        PROG_FLAG_NO_DEFAULT),
    ROW(kl_tol, "--kl-tol", PROG_FLAG_DOUBLE, 0, 1e300, NULL, "X", "... KL tolerance",
        PROG_FLAG_NO_DEFAULT),
    ROW(max_tok, "--max-token-mismatches", PROG_FLAG_I64, 0, BIG, NULL, "N",
        "... sampled tokens that may differ", PROG_FLAG_NO_DEFAULT),
    ROW(max_arg, "--max-argmax-mismatches", PROG_FLAG_I64, 0, BIG, NULL, "N",
        "... argmax rows that may differ", PROG_FLAG_NO_DEFAULT),
};
#undef ROW
#undef BIG

/* -1 go on, else the exit status (0 after --help/--version, 2 usage). */
static int parse_args(cli *o, int argc, char **argv) {
    static const prog_cli pcli = {
        PROG,
        "usage: " PROG " [options]\n"
        "Runs one model on one fixed, seeded batch in two contexts and prints the\n"
        "layered comparison (logits -> softmax -> sampled tokens); side a is the\n"
        "reference. Exit status: 0 within tolerance, 1 outside it or the work\n"
        "failed, 2 a wrong command line.\n",
        cmp_rows, sizeof cmp_rows / sizeof cmp_rows[0], NULL};
    cmp_args defaults = {0}, a;
    defaults.a = "cpu:1";
    defaults.b = "cpu:2";
    defaults.preset = "tiny";
    defaults.tolerance = "exact";
    defaults.deterministic = o->ca.co.deterministic;
    defaults.vocab_size = o->cfg.vocab_size;
    defaults.padded_vocab = o->cfg.padded_vocab_size;
    defaults.init_seed = o->init_seed;
    defaults.data_seed = o->data_seed;
    defaults.batch = o->B;
    defaults.positions = o->cmp.positions;
    defaults.draws = o->cmp.draws_per_position;
    defaults.temperature = o->samp.temperature;
    defaults.top_k = o->samp.top_k;
    defaults.top_p = o->samp.top_p;
    defaults.sample_seed = o->samp.seed;
    defaults.atol = defaults.rtol = defaults.prob_atol = defaults.kl_tol = -1.0;
    defaults.max_tok = defaults.max_arg = -1;
    a = defaults;
    unsigned char given[sizeof cmp_rows / sizeof cmp_rows[0]] = {0};
    int rc = prog_flags_parse(&pcli, &a, given, argc, argv, &defaults);
    if (rc) return rc == 1 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
#define GIVEN(name) given[prog_flags_find(&pcli, name) - cmp_rows]
    if (apply_preset(&o->cfg, a.preset)) return PROG_EXIT_USAGE;
    if (GIVEN("--layers")) o->cfg.n_layer = a.layers;
    if (GIVEN("--heads")) o->cfg.n_head = a.heads;
    if (GIVEN("--width")) o->cfg.n_embd = a.width;
    if (GIVEN("--context")) o->cfg.context_length = a.context;
#undef GIVEN
    o->cfg.vocab_size = a.vocab_size;
    o->cfg.padded_vocab_size = a.padded_vocab;
    if (a.no_mask) o->cfg.mask_padded_logits = 0;
    o->ca.co.deterministic = o->cb.co.deterministic = a.deterministic;
    o->spec_a = a.a;
    o->spec_b = a.b;
    o->model_path = a.model;
    o->perturb = a.perturb;
    o->init_seed = a.init_seed;
    o->data_seed = a.data_seed;
    o->B = a.batch;
    o->T = a.seq;
    o->cmp.positions = a.positions;
    o->cmp.draws_per_position = a.draws;
    o->samp.temperature = (float)a.temperature;
    o->samp.top_k = a.top_k;
    o->samp.top_p = (float)a.top_p;
    o->samp.seed = a.sample_seed;
    o->tolerance = a.tolerance;
    o->atol = a.atol, o->rtol = a.rtol, o->prob_atol = a.prob_atol, o->kl_tol = a.kl_tol;
    o->max_tok = (long)a.max_tok, o->max_arg = (long)a.max_arg;
    if (parse_side("--a", o->spec_a, &o->ca) || parse_side("--b", o->spec_b, &o->cb))
        return PROG_EXIT_USAGE;
    return -1;
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
    int parsed = parse_args(&o, argc, argv);
    if (parsed >= 0) return parsed;

    int status = PROG_EXIT_FAILURE;
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
    status = r.pass ? PROG_EXIT_OK : PROG_EXIT_FAILURE;
done:
    free(inputs);
    gptx_model_destroy(ma);
    gptx_model_destroy(mb);
    gptx_context_destroy(ca);
    gptx_context_destroy(cb);
    return status;
}
