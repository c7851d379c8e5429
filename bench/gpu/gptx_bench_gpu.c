/*
 * gptx-bench-gpu: training throughput of the CUDA backend on GPT-2 124M
 * (vocab 50257 padded to 50304, T 1024, 12 layers, 12 heads, width 768; tied
 * head, qkv bias, masked padded logits), at the largest power-of-two batch
 * that fits unless --batch is given.
 *
 * One timed step = zero_grad + gptx_model_forward_backward (the fused
 * classifier: the cross-entropy's forward and gradient in one pass over the
 * logits, as gptx-train steps) + AdamW step (default options: clip 1.0,
 * weight decay on matrices), then gptx_context_synchronize. --fused 0 calls
 * gptx_model_forward then gptx_model_backward instead (two passes). The tokens are a fixed pseudo-random batch in
 * host memory (uploaded by every forward, as a training loop does).
 *
 * Reported separately:
 *   cold:   context creation (device, streams, cuBLASLt handle and workspace)
 *           and the first step at the chosen batch (model, optimizer and
 *           activation allocation, cuBLASLt heuristics, first launches);
 *           batch sizes that did not fit are listed, not timed;
 *   capture: with --graphs 1 (context option cuda_graphs), the second step,
 *           which captures the step's kernel sequences as CUDA graphs and
 *           launches them (the first step runs them normally, a graph is
 *           captured when a signature repeats); warm-up is then at least 2;
 *   steady: median / min / max of --steps steps after --warmup more;
 *   repeatable: with --repeat 1 (the default), a second run from the same
 *           initialisation on the same batch, as many steps, must give
 *           every step's loss and the final parameters bit for bit (a
 *           hash of them): gptx promises run-to-run repeatable steps, which
 *           none of its peers (PyTorch, llm.c) offers; a difference is
 *           printed and makes the exit status 1 (the JSON is written first).
 *
 * Model FLOPs per token (as bench/gptx_bench_train.c and
 * bench/gpu/torch_gpu_bench.py count them): 6 * P_mat + 6 * L * T * C, where
 * P_mat is every weight matrix used in a product (c_attn, attn c_proj, c_fc,
 * mlp c_proj per layer, and the padded head once). MFU = model FLOP/s /
 * 989e12 (H100/H200 SXM dense bf16 peak) whatever the precision; the
 * precision policy is --precision (the context option; bf16 = bf16
 * activations with fp32 master weights, the default).
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"
#include "gptx/gptx_experimental.h"

#include "../bench_common.h"
#include "prog_flags.h"

#ifdef GPTX_BENCH_CUDA_EMU
/* test build (tests/gpu): the backend's CPU emulation, which the library
 * cannot select, on its own table */
#include "context.h"
const gptx_backend_ops *gptx_cuda_emu_backend_ops(void);
static int create_context(gptx_context **out, const gptx_context_options *o) {
    return gptx_context_create_on(out, o, gptx_cuda_emu_backend_ops());
}
#else
#define create_context gptx_context_create
#endif

#define PEAK_FLOPS 989e12

typedef struct {
    const char *precision, *json;
    int batch, max_batch, seq, layers, heads, width, vocab, padded_vocab, warmup, steps;
    int graphs, fused, repeat;
} bench_args;

#define ROW(field, name, lo, hi, arg, help, bits) \
    PROG_FLAG_ROW(bench_args, field, name, PROG_FLAG_INT, lo, hi, NULL, arg, help, bits, 0)
static const prog_flag flag_rows[] = {
    PROG_FLAG_ROW(bench_args, precision, "--precision", PROG_FLAG_CHOICE, 0, 0,
                  "fp32|tf32|bf16|bf16_pure", NULL, "the context's precision policy", 0, 0),
    ROW(batch, "--batch", 0, 1000000, "B", "rows per step; 0 = the largest power of two\n"
                                          "<= --max-batch that fits", 0),
    ROW(max_batch, "--max-batch", 1, 1000000, "B", "the largest batch tried", 0),
    ROW(seq, "--seq", 1, 1000000, "T", "positions", 0),
    ROW(layers, "--layers", 1, 1000000, "L", "layers (GPT-2 124M's)", 0),
    ROW(heads, "--heads", 1, 1000000, "H", "heads", 0),
    ROW(width, "--width", 1, 1000000, "C", "width", 0),
    ROW(vocab, "--vocab", 1, 1000000, "V", "vocabulary", 0),
    ROW(padded_vocab, "--padded-vocab", 1, 1000000, "Vp", "rows of wte/lm_head (at least V)", 0),
    ROW(warmup, "--warmup", 1, 1000000, NULL, "untimed steps, the cold one included", 0),
    ROW(steps, "--steps", 1, 1000000, NULL, "timed steps", 0),
    ROW(graphs, "--graphs", 0, 1, "0|1", "1 = CUDA graphs", 0),
    ROW(fused, "--fused", 0, 1, "0|1", "1 = forward and backward in one call", 0),
    ROW(repeat, "--repeat", 0, 1, "0|1", "1 = run again from the same init: same bits?", 0),
    PROG_FLAG_ROW(bench_args, json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE",
                  "also write the figures to FILE", 0, 0),
};
#undef ROW

/* 0 to go on, 1 after --help/--version, -1 after a message. */
static int parse_args(bench_args *a, int argc, char **argv) {
    static const prog_cli cli = {"gptx-bench-gpu",
                                 "usage: gptx-bench-gpu [options]\n"
                                 "Training steps on a CUDA device, model FLOP/s and MFU.\n",
                                 flag_rows, sizeof flag_rows / sizeof flag_rows[0], NULL};
    const bench_args defaults = *a;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    if (rc) return rc;
    if (a->padded_vocab < a->vocab) a->padded_vocab = a->vocab;
    return 0;
}

static int step(gptx_context *ctx, gptx_model *m, gptx_optimizer *opt, const int32_t *in,
                const int32_t *tg, int B, int T, int fused, float *loss) {
    int rc = gptx_model_zero_grad(m);
    if (rc == GPTX_OK && fused) rc = gptx_model_forward_backward(m, in, tg, B, T, 1.0f, loss);
    if (rc == GPTX_OK && !fused) rc = gptx_model_forward(m, in, tg, B, T, loss);
    if (rc == GPTX_OK && !fused) rc = gptx_model_backward(m, 1.0f);
    if (rc == GPTX_OK) rc = gptx_optimizer_step(opt, m, NULL);
    if (rc == GPTX_OK) rc = gptx_context_synchronize(ctx);
    return rc;
}

/* weight-matrix elements used in products: every 2-D tensor but wpe (and
 * wte when the head is untied) */
static double matmul_params(const gptx_model *m) {
    int idx = -1, untied = gptx_model_find_tensor(m, "lm_head.weight", &idx) == GPTX_OK;
    gptx_clear_error();
    double sum = 0;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        if (gptx_model_tensor_info(m, i, &info) != GPTX_OK || info.ndim != 2) continue;
        if (!strcmp(info.name, "wpe.weight") || (untied && !strcmp(info.name, "wte.weight")))
            continue;
        sum += (double)info.numel;
    }
    return sum;
}

/* FNV-1a over every parameter's fp32 bits, in tensor order: equal hashes of
 * two runs mean (but for a collision) equal parameters. */
static int params_hash(const gptx_model *m, uint64_t *hash) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        int rc = gptx_model_tensor_info(m, i, &info);
        if (rc != GPTX_OK) return rc;
        float *v = malloc(info.numel * sizeof *v);
        if (!v) return GPTX_ERR_NO_MEMORY;
        rc = gptx_model_get_parameter(m, info.name, v, info.numel);
        const unsigned char *b = (const unsigned char *)v;
        for (size_t k = 0; rc == GPTX_OK && k < info.numel * sizeof *v; k++)
            h = (h ^ b[k]) * 0x100000001b3ull;
        free(v);
        if (rc != GPTX_OK) return rc;
    }
    *hash = h;
    return GPTX_OK;
}

/* A fixed pseudo-random batch in host memory: inputs and the targets one
 * position on (xorshift64*). */
static int make_batch(size_t BT, int vocab, int32_t **in, int32_t **tg) {
    free(*in);
    free(*tg);
    *in = malloc(BT * sizeof **in);
    *tg = malloc(BT * sizeof **tg);
    if (!*in || !*tg) return GPTX_ERR_NO_MEMORY;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i <= BT; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        int32_t tok = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)vocab);
        if (i < BT) (*in)[i] = tok;
        if (i > 0) (*tg)[i - 1] = tok;
    }
    return GPTX_OK;
}

/* What one run needs: the model and its optimizer on the context, the batch. */
typedef struct bench_run {
    gptx_context *ctx;
    const gptx_model_config *cfg;
    const bench_args *a;
    int B;
    const int32_t *in, *tg;
    gptx_model *m;
    gptx_optimizer *opt;
} bench_run;

static void run_release(bench_run *r) {
    gptx_optimizer_destroy(r->opt);
    gptx_model_destroy(r->m);
    r->opt = NULL;
    r->m = NULL;
}

/* A fresh model (seed 42) and AdamW, and the first step (its loss in *loss). */
static int run_open(bench_run *r, float *loss) {
    int rc = gptx_model_create(&r->m, r->ctx, r->cfg);
    if (rc == GPTX_OK) rc = gptx_model_init_random(r->m, 42);
    if (rc == GPTX_OK) rc = gptx_optimizer_create(&r->opt, r->m, NULL);
    if (rc == GPTX_OK) rc = step(r->ctx, r->m, r->opt, r->in, r->tg, r->B, r->cfg->context_length,
                                 r->a->fused, loss);
    return rc;
}

/* Steps k = 1 .. n-1 after the first: losses[k], and each one's wall time
 * into times[k] when times is not NULL. */
static int run_steps(bench_run *r, int n, float *losses, double *times) {
    int rc = GPTX_OK;
    for (int k = 1; k < n && rc == GPTX_OK; k++) {
        double t0 = bench_now_s();
        rc = step(r->ctx, r->m, r->opt, r->in, r->tg, r->B, r->cfg->context_length, r->a->fused,
                  &losses[k]);
        if (times) times[k] = bench_now_s() - t0;
    }
    return rc;
}

/* The largest batch that fits (or --batch): the model opened on it and its
 * first step taken (losses[0], *cold its wall time); 1 after a message. */
static int fit_batch(bench_run *r, int32_t **in, int32_t **tg, float *loss0, double *cold) {
    const bench_args *a = r->a;
    int rc = GPTX_OK;
    for (r->B = a->batch ? a->batch : a->max_batch; r->B >= 1; r->B = a->batch ? 0 : r->B / 2) {
        if (make_batch((size_t)r->B * a->seq, a->vocab, in, tg) != GPTX_OK) {
            fprintf(stderr, "gptx-bench-gpu: out of host memory\n");
            return 1;
        }
        r->in = *in;
        r->tg = *tg;
        double t0 = bench_now_s();
        rc = run_open(r, loss0);
        *cold = bench_now_s() - t0;
        if (rc == GPTX_OK) return 0;
        printf("batch %-4d  : does not fit (%s: %s)\n", r->B, gptx_status_name(rc),
               gptx_last_error());
        fflush(stdout);
        run_release(r);
        if (rc != GPTX_ERR_NO_MEMORY) break;
    }
    fprintf(stderr, "gptx-bench-gpu: no batch size fits\n");
    return 1;
}

/* The figures of the steady steps: times[1..n) minus the warm-up. */
typedef struct bench_figures {
    double med, min, max, cold, capture, tok_s, mfu, fpt;
    float loss_first, loss_last;
    int repeatable; /* 1 yes, 0 no, -1 not checked */
    uint64_t hash;
} bench_figures;

static void steady_figures(const bench_args *a, const double *times, bench_figures *f) {
    const double *t = times + a->warmup; /* the timed steps */
    double *sorted = malloc((size_t)a->steps * sizeof *sorted);
    if (!sorted) return;
    memcpy(sorted, t, (size_t)a->steps * sizeof *sorted);
    qsort(sorted, (size_t)a->steps, sizeof *sorted, bench_cmp_double);
    f->min = sorted[0];
    f->max = sorted[a->steps - 1];
    f->med = bench_median(t, a->steps);
    free(sorted);
}

/* A second run from the same initialisation, as many steps: every loss and
 * the final parameters must be the first run's bits. *same = 1 or 0, and a
 * line saying which into msg. */
static int repeat_check(bench_run *r, int n, const float *losses, uint64_t hash, int *same,
                        char *msg, size_t msgsz) {
    float *again = calloc((size_t)n, sizeof *again);
    if (!again) return GPTX_ERR_NO_MEMORY;
    uint64_t h2 = 0;
    int rc = run_open(r, &again[0]);
    if (rc == GPTX_OK) rc = run_steps(r, n, again, NULL);
    if (rc == GPTX_OK) rc = params_hash(r->m, &h2);
    run_release(r);
    int k = 0;
    while (k < n && !memcmp(&losses[k], &again[k], sizeof *again)) k++;
    *same = k == n && h2 == hash;
    if (rc != GPTX_OK)
        snprintf(msg, msgsz, "not checked: the second run failed (%s)", gptx_last_error());
    else if (k < n)
        snprintf(msg, msgsz, "NO: step %d's loss %.9g on the first run, %.9g on the second", k + 1,
                 (double)losses[k], (double)again[k]);
    else if (!*same)
        snprintf(msg, msgsz, "NO: the same %d losses, but the parameters differ (hash %016llx "
                 "vs %016llx)", n, (unsigned long long)hash, (unsigned long long)h2);
    else
        snprintf(msg, msgsz, "yes: a second run from the same init gave the same %d losses and "
                 "parameters (hash %016llx), bit for bit", n, (unsigned long long)hash);
    free(again);
    return rc;
}

static void write_json(const bench_args *a, const bench_run *r, const bench_figures *f,
                       double t_ctx, const gptx_memory_stats *mem, int64_t captures,
                       int64_t replays) {
    FILE *out = fopen(a->json, "w");
    if (!out) {
        fprintf(stderr, "gptx-bench-gpu: cannot write %s: %s\n", a->json, strerror(errno));
        return;
    }
    char rep[8];
    snprintf(rep, sizeof rep, "%s", f->repeatable < 0 ? "null" : f->repeatable ? "true" : "false");
    fprintf(out,
            "{\"implementation\": \"gptx\", \"version\": \"%s\", \"precision\": \"%s\", "
            "\"batch\": %d, \"seq\": %d, \"layers\": %d, \"heads\": %d, \"width\": %d, "
            "\"vocab\": %d, \"padded_vocab\": %d, \"flops_per_token\": %.0f, "
            "\"context_create_s\": %.6f, \"cold_step_s\": %.6f, \"step_median_s\": %.6f, "
            "\"step_min_s\": %.6f, \"step_max_s\": %.6f, \"tokens_per_s\": %.1f, "
            "\"mfu\": %.5f, \"mem_allocated\": %llu, \"mem_peak\": %llu, "
            "\"mem_reserved\": %llu, \"loss_first\": %.6f, \"loss_last\": %.6f, "
            "\"graphs\": %d, \"fused\": %d, \"capture_step_s\": %.6f, "
            "\"graph_captures\": %lld, \"graph_replays\": %lld, \"bitwise_repeatable\": %s, "
            "\"params_hash\": \"%016llx\"}\n",
            gptx_version(), a->precision, r->B, a->seq, a->layers, a->heads, a->width, a->vocab,
            a->padded_vocab, f->fpt, t_ctx, f->cold, f->med, f->min, f->max, f->tok_s, f->mfu,
            (unsigned long long)mem->allocated, (unsigned long long)mem->peak,
            (unsigned long long)mem->reserved, (double)f->loss_first, (double)f->loss_last,
            a->graphs, a->fused, f->capture, (long long)captures, (long long)replays, rep,
            (unsigned long long)f->hash);
    fclose(out);
}

static void print_header(const bench_args *a, gptx_context *ctx, double t_ctx) {
    printf("gptx-bench-gpu (gptx %s, backend %s, precision %s, CUDA graphs %s, %s)\n",
           gptx_version(), gptx_context_backend_name(ctx),
           gptx_precision_name(gptx_context_precision(ctx)), a->graphs ? "on" : "off",
           a->fused ? "fused forward+backward" : "forward then backward");
    printf("config      : vocab %d (padded %d), T %d, layers %d, heads %d, width %d\n", a->vocab,
           a->padded_vocab, a->seq, a->layers, a->heads, a->width);
    printf("cold        : context creation %.3f s (device, streams, cuBLASLt handle + workspace)\n",
           t_ctx);
    fflush(stdout);
}

static void print_figures(const bench_args *a, const bench_figures *f, const char *repeat_msg,
                          const gptx_memory_stats *mem, int64_t captures, int64_t replays) {
    printf("steady      : median %.4f s/step (min %.4f, max %.4f) over %d steps\n", f->med,
           f->min, f->max, a->steps);
    printf("graphs      : %s, %lld captured, %lld replays\n", a->graphs ? "on" : "off",
           (long long)captures, (long long)replays);
    printf("throughput  : %.0f tokens/s, %.1f model TFLOP/s, MFU %.1f %% of 989 TFLOP/s\n",
           f->tok_s, f->fpt * f->tok_s * 1e-12, 100.0 * f->mfu);
    printf("loss        : %.4f (first step) -> %.4f (last step)\n", (double)f->loss_first,
           (double)f->loss_last);
    printf("memory      : allocated %.2f GiB, peak %.2f GiB, reserved %.2f GiB (device, through "
           "the context)\n",
           mem->allocated / 1073741824.0, mem->peak / 1073741824.0, mem->reserved / 1073741824.0);
    printf("repeatable  : %s\n", repeat_msg);
}

static int open_context(const bench_args *a, int precision, gptx_context **ctx) {
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CUDA;
    co.precision = precision;
    co.cuda_graphs = a->graphs;
    int rc = create_context(ctx, &co);
    if (rc != GPTX_OK)
        fprintf(stderr, "gptx-bench-gpu: no CUDA context: %s (%s)\n", gptx_last_error(),
                gptx_status_name(rc));
    return rc;
}

/* Prints the figures (and checks repeatability): 0, or 1 when the steps did
 * not repeat. */
static int report(bench_run *r, const float *losses, const double *times, int n,
                  bench_figures *f, double t_ctx) {
    const bench_args *a = r->a;
    f->capture = a->warmup > 1 ? times[1] : 0.0;
    if (a->graphs)
        printf("cold        : second step %.3f s (graph capture, instantiation, first launch)\n",
               f->capture);
    steady_figures(a, times, f);
    f->tok_s = (double)r->B * a->seq / f->med;
    f->mfu = f->fpt * f->tok_s / PEAK_FLOPS;
    f->loss_first = losses[0];
    f->loss_last = losses[n - 1];
    gptx_memory_stats mem;
    int64_t captures = 0, replays = 0;
    char msg[200] = "not checked (--repeat 0)";
    /* the memory and graph counts of this run, before the second one adds its own */
    gptx_memory_stats_init(&mem);
    gptx_context_memory(r->ctx, &mem);
    gptx_context_graph_counts(r->ctx, &captures, &replays);
    if (a->repeat) {
        run_release(r);
        int same = 0;
        if (repeat_check(r, n, losses, f->hash, &same, msg, sizeof msg) == GPTX_OK)
            f->repeatable = same;
    }
    print_figures(a, f, msg, &mem, captures, replays);
    if (a->json) write_json(a, r, f, t_ctx, &mem, captures, replays);
    return f->repeatable == 0;
}

/* The timed run (cold step, warm-up, --steps timed) and the repeat check;
 * 0, or 1 after a message (or when the steps did not repeat). */
static int bench(bench_run *r, int32_t **in, int32_t **tg, double t_ctx) {
    const bench_args *a = r->a;
    int n = a->warmup + a->steps;
    float *losses = calloc((size_t)n, sizeof *losses);
    double *times = calloc((size_t)n, sizeof *times);
    bench_figures f = {0};
    f.repeatable = -1;
    int out = !losses || !times;
    if (out) fprintf(stderr, "gptx-bench-gpu: out of host memory\n");
    if (!out) out = fit_batch(r, in, tg, &losses[0], &f.cold);
    if (!out) {
        size_t BT = (size_t)r->B * a->seq;
        double pmat = matmul_params(r->m);
        f.fpt = 6.0 * pmat + 6.0 * a->layers * (double)a->seq * a->width;
        printf("batch       : %d x %d = %zu tokens per step%s\n", r->B, a->seq, BT,
               a->batch ? "" : " (largest power of two that fits)");
        printf("parameters  : %zu, %.0f in products; model FLOPs %.4g per token\n",
               gptx_model_num_parameters(r->m), pmat, f.fpt);
        printf("cold        : first step %.3f s (model, optimizer, activations, cuBLASLt "
               "heuristics)\n", f.cold);
        fflush(stdout);
        int rc = run_steps(r, n, losses, times);
        if (rc == GPTX_OK) rc = params_hash(r->m, &f.hash);
        if (rc != GPTX_OK) {
            fprintf(stderr, "gptx-bench-gpu: step failed: %s\n", gptx_last_error());
            out = 1;
        }
    }
    if (!out) out = report(r, losses, times, n, &f, t_ctx);
    run_release(r);
    free(losses);
    free(times);
    return out;
}

int main(int argc, char **argv) {
    bench_args a = {"bf16", NULL, 0, 512, 1024, 12, 12, 768, 50257, 50304, 3, 10, 0, 1, 1};
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    if (a.graphs && a.warmup < 2) a.warmup = 2; /* the capture step is not timed as steady */
    int precision = gptx_precision_from_name(a.precision);
    if (precision <= GPTX_PRECISION_DEFAULT) {
        fprintf(stderr, "gptx-bench-gpu: --precision %s; expected fp32, tf32, bf16 or bf16_pure\n",
                a.precision);
        return 2;
    }
    double t_ctx = bench_now_s();
    gptx_context *ctx = NULL;
    if (open_context(&a, precision, &ctx) != GPTX_OK) return 1;
    t_ctx = bench_now_s() - t_ctx;
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    cfg.vocab_size = a.vocab;
    cfg.padded_vocab_size = a.padded_vocab;
    cfg.context_length = a.seq;
    cfg.n_layer = a.layers;
    cfg.n_head = a.heads;
    cfg.n_embd = a.width;
    print_header(&a, ctx, t_ctx);
    bench_run r = {ctx, &cfg, &a, 0, NULL, NULL, NULL, NULL};
    int32_t *in = NULL, *tg = NULL;
    int out = bench(&r, &in, &tg, t_ctx);
    free(in);
    free(tg);
    gptx_context_destroy(ctx);
    return out;
}
