/* gptx-op-profile: where a training step's time goes, per backend op and per
 * op group, on any backend. It enables the library's per-op profiler
 * (gptx_context_set_profiling, include/gptx/gptx_experimental.h) before
 * creating the model and its optimizer, runs --warmup steps, forgets them,
 * runs --steps more and prints the report. A step is what gptx-train does:
 * zero_grad, gptx_model_forward_backward, the AdamW step, on a fixed
 * pseudo-random batch already in host memory. --batch replaces the preset's
 * rows per step, so the profile is the one of a benchmark's own batch
 * (gptx-bench-gpu's 64). Links the public library only. */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"
#include "gptx/gptx_experimental.h"

#include "bench_common.h"
#include "op_profile_report.h"
#include "prog_flags.h"
#include "prog_presets.h"

#define SKIP_EXIT 77 /* --backend cuda without a device: nothing to profile */

typedef struct args {
    const char *backend, *config, *precision;
    int threads, warmup, steps, batch;
} args;

#define ROW(field, name, kind, lo, hi, choices, arg, help) \
    PROG_FLAG_ROW(args, field, name, kind, lo, hi, choices, arg, help, 0, 0)
static const prog_flag rows[] = {
    ROW(backend, "--backend", PROG_FLAG_CHOICE, 0, 0, "cpu|cuda", NULL, "where the step runs"),
    ROW(config, "--config", PROG_FLAG_STR, 0, 0, NULL, "PRESET", "the model and batch (below)"),
    ROW(precision, "--precision", PROG_FLAG_CHOICE, 0, 0, "fp32|bf16|bf16_pure", NULL,
        "the context's precision policy"),
    ROW(threads, "--threads", PROG_FLAG_INT, 0, 1000000, NULL, NULL,
        "CPU threads, 0 = all online cores (CPU only)"),
    ROW(warmup, "--warmup", PROG_FLAG_INT, 0, 1000000, NULL, NULL, "untimed steps"),
    ROW(steps, "--steps", PROG_FLAG_INT, 1, 1000000, NULL, NULL, "profiled steps"),
    ROW(batch, "--batch", PROG_FLAG_INT, 0, 1000000, NULL, "B",
        "rows per step; 0 = the preset's (below)"),
};
#undef ROW

/* 0 to go on, 1 after --help/--version, -1 after a message. */
static int parse_args(args *a, int argc, char **argv) {
    static const args defaults = {"cpu", "small", "fp32", 0, 2, 5, 0};
    static const prog_cli cli = {"gptx-op-profile",
                                 "usage: gptx-op-profile [options]\n"
                                 "Time per operation of a training step, by the library's "
                                 "profiler.\n",
                                 rows, sizeof rows / sizeof rows[0], "presets:\n"};
    *a = defaults;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    if (rc == 1) prog_presets_print(stdout, "  ");
    return rc;
}

#define CK(call)                                                                          \
    do {                                                                                  \
        int ck_rc_ = (call);                                                              \
        if (ck_rc_ != GPTX_OK) {                                                          \
            fprintf(stderr, "gptx-op-profile: %s: %s (%s)\n", #call, gptx_last_error(),   \
                    gptx_status_name(ck_rc_));                                            \
            return 1;                                                                     \
        }                                                                                 \
    } while (0)

/* The context, profiling on. A CUDA context that cannot be had here (no
 * device, no module) is SKIP_EXIT, anything else 1. */
static int open_context(gptx_context **ctx, const args *a) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = strcmp(a->backend, "cuda") ? GPTX_BACKEND_CPU : GPTX_BACKEND_CUDA;
    o.num_threads = a->threads;
    o.precision = gptx_precision_from_name(a->precision); /* checked by parse_args */
    int rc = gptx_context_create(ctx, &o);
    if (rc == GPTX_ERR_UNSUPPORTED && o.backend == GPTX_BACKEND_CUDA) {
        fprintf(stderr, "gptx-op-profile: no CUDA backend here, nothing to profile: %s\n",
                gptx_last_error());
        return SKIP_EXIT;
    }
    CK(rc);
    CK(gptx_context_set_profiling(*ctx, 1)); /* before the model: it is wrapped at creation */
    return 0;
}

/* A fixed pseudo-random batch (xorshift64*), B*T + 1 ids: inputs and the
 * targets one position on. */
static int32_t *make_tokens(size_t n) {
    int32_t *t = malloc(n * sizeof *t);
    uint64_t x = 1234;
    for (size_t i = 0; t && i < n; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        t[i] = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % 50257u);
    }
    return t;
}

static int step(gptx_model *m, gptx_optimizer *o, const int32_t *tok, const prog_preset *p) {
    CK(gptx_model_zero_grad(m));
    CK(gptx_model_forward_backward(m, tok, tok + 1, p->batch, p->context, 1.0f, NULL));
    CK(gptx_optimizer_step(o, m, NULL));
    return 0;
}

/* --warmup steps, then --steps timed ones (wall clock, synchronized at both
 * ends) with the profile reset in between: *seconds per step. */
static int run_steps(gptx_context *ctx, gptx_model *m, gptx_optimizer *o, const int32_t *tok,
                     const prog_preset *p, const args *a, double *seconds) {
    for (int s = 0; s < a->warmup; s++)
        if (step(m, o, tok, p)) return 1;
    CK(gptx_context_synchronize(ctx));
    CK(gptx_context_reset_op_profile(ctx));
    double t0 = bench_now_s();
    for (int s = 0; s < a->steps; s++)
        if (step(m, o, tok, p)) return 1;
    CK(gptx_context_synchronize(ctx));
    *seconds = (bench_now_s() - t0) / a->steps;
    return 0;
}

static void print_header(gptx_context *ctx, const args *a, const prog_preset *p, double sec,
                         int clock) {
    int threads = gptx_context_num_threads(ctx);
    printf("gptx-op-profile: %s (%d layers, %d heads, width %d; B %d%s x T %d), %s backend, %s, "
           "%d thread%s\n",
           p->name, p->n_layer, p->n_head, p->n_embd, p->batch, a->batch ? " (--batch)" : "",
           p->context, gptx_context_backend_name(ctx), a->precision, threads,
           threads == 1 ? "" : "s");
    printf("step: %.4f s, wall clock per step (zero_grad, forward_backward, AdamW step), mean of "
           "%d after %d warm-up, synchronized at both ends\n", sec, a->steps, a->warmup);
    if (clock == GPTX_PROFILE_DEVICE_EVENTS)
        printf("op times: device time between events recorded on the compute stream before and "
               "after each op,\n  read after the steps (no synchronization per op); an op that "
               "waits for the host counts that wait\n");
    else
        printf("op times: host clock around each call of the backend table (the CPU backend "
               "finishes an op,\n  on all the context's threads, before it returns)\n");
    printf("products include their bias (and their GELU where fused); GFLOP/s counts 2 per "
           "multiply-add,\n  attention its causal products (backward: five, the recompute "
           "included)\n");
    printf("CUDA graphs: none; a profiled model issues every op (a replayed graph would hide "
           "them)\n\n");
}

static int print_report(gptx_context *ctx, const args *a, const prog_preset *p, double sec) {
    int n = 0, clock = 0;
    CK(gptx_context_get_op_profile(ctx, NULL, 0, &n, &clock));
    gptx_op_stat *lines = calloc((size_t)n + 1, sizeof *lines);
    if (!lines) return 1;
    int rc = gptx_context_get_op_profile(ctx, lines, n, &n, &clock);
    if (rc == GPTX_OK) {
        op_report r = {lines, n, a->steps, sec, p->n_embd, 50304};
        print_header(ctx, a, p, sec, clock);
        op_report_by_op(&r);
        printf("\n");
        op_report_by_group(&r);
    }
    free(lines);
    CK(rc);
    return 0;
}

/* The model of preset p (GPT-2's vocabulary padded to 50304, tied head),
 * its AdamW and the batch, then the steps and the report. */
static int profile(gptx_context *ctx, const args *a, const prog_preset *p) {
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    cfg.context_length = p->context;
    cfg.n_layer = p->n_layer;
    cfg.n_head = p->n_head;
    cfg.n_embd = p->n_embd;
    gptx_model *m = NULL;
    gptx_optimizer *o = NULL;
    int32_t *tok = make_tokens((size_t)p->batch * p->context + 1);
    double sec = 0.0;
    int rc = tok ? 0 : 1;
    if (!rc && gptx_model_create(&m, ctx, &cfg) != GPTX_OK) rc = 1;
    if (!rc && gptx_model_init_random(m, 42) != GPTX_OK) rc = 1;
    if (!rc && gptx_optimizer_create(&o, m, NULL) != GPTX_OK) rc = 1;
    if (rc && !tok) fprintf(stderr, "gptx-op-profile: out of host memory\n");
    else if (rc) fprintf(stderr, "gptx-op-profile: model set-up: %s\n", gptx_last_error());
    if (!rc) rc = run_steps(ctx, m, o, tok, p, a, &sec);
    if (!rc) rc = print_report(ctx, a, p, sec);
    gptx_optimizer_destroy(o);
    gptx_model_destroy(m);
    free(tok);
    return rc;
}

int main(int argc, char **argv) {
    args a;
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    const prog_preset *found = prog_preset_lookup("gptx-op-profile", "--config", a.config);
    if (!found) return PROG_EXIT_USAGE;
    prog_preset p = *found;
    if (a.batch) p.batch = a.batch;
    gptx_context *ctx = NULL;
    int rc = open_context(&ctx, &a);
    if (rc == 0) rc = profile(ctx, &a, &p);
    gptx_context_destroy(ctx);
    return rc;
}
