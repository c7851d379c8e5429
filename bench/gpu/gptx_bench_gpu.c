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
 *   steady: median / min / max of --steps steps after --warmup more.
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
    int graphs, fused;
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

int main(int argc, char **argv) {
    bench_args a = {"bf16", NULL, 0, 512, 1024, 12, 12, 768, 50257, 50304, 3, 10, 0, 1};
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    if (a.graphs && a.warmup < 2) a.warmup = 2; /* the capture step is not timed as steady */
    int precision = gptx_precision_from_name(a.precision);
    if (precision <= GPTX_PRECISION_DEFAULT) {
        fprintf(stderr, "gptx-bench-gpu: --precision %s; expected fp32, tf32, bf16 or bf16_pure\n",
                a.precision);
        return 2;
    }

    int T = a.seq;
    double t_ctx = bench_now_s();
    gptx_context *ctx = NULL;
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CUDA;
    co.precision = precision;
    co.cuda_graphs = a.graphs;
    int rc = create_context(&ctx, &co);
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-bench-gpu: no CUDA context: %s (%s)\n", gptx_last_error(),
                gptx_status_name(rc));
        return 1;
    }
    t_ctx = bench_now_s() - t_ctx;

    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    cfg.vocab_size = a.vocab;
    cfg.padded_vocab_size = a.padded_vocab;
    cfg.context_length = T;
    cfg.n_layer = a.layers;
    cfg.n_head = a.heads;
    cfg.n_embd = a.width;
    printf("gptx-bench-gpu (gptx %s, backend %s, precision %s, CUDA graphs %s, %s)\n",
           gptx_version(), gptx_context_backend_name(ctx),
           gptx_precision_name(gptx_context_precision(ctx)), a.graphs ? "on" : "off",
           a.fused ? "fused forward+backward" : "forward then backward");
    printf("config      : vocab %d (padded %d), T %d, layers %d, heads %d, width %d\n", a.vocab,
           a.padded_vocab, T, a.layers, a.heads, a.width);
    printf("cold        : context creation %.3f s (device, streams, cuBLASLt handle + workspace)\n",
           t_ctx);
    fflush(stdout);

    /* the batch: given, or the largest power of two that fits */
    int B = a.batch ? a.batch : a.max_batch;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    int32_t *in = NULL, *tg = NULL;
    float loss0 = 0, loss = 0;
    double cold = 0;
    for (; B >= 1; B = a.batch ? 0 : B / 2) {
        size_t BT = (size_t)B * T;
        free(in);
        free(tg);
        in = malloc(BT * sizeof *in);
        tg = malloc(BT * sizeof *tg);
        if (!in || !tg) {
            fprintf(stderr, "gptx-bench-gpu: out of host memory\n");
            return 1;
        }
        uint64_t x = 0x9E3779B97F4A7C15ull;
        for (size_t i = 0; i <= BT; i++) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            int32_t tok = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)a.vocab);
            if (i < BT) in[i] = tok;
            if (i > 0) tg[i - 1] = tok;
        }
        double t0 = bench_now_s();
        rc = gptx_model_create(&m, ctx, &cfg);
        if (rc == GPTX_OK) rc = gptx_model_init_random(m, 42);
        if (rc == GPTX_OK) rc = gptx_optimizer_create(&opt, m, NULL);
        if (rc == GPTX_OK) rc = step(ctx, m, opt, in, tg, B, T, a.fused, &loss0);
        if (rc == GPTX_OK) {
            cold = bench_now_s() - t0;
            break;
        }
        printf("batch %-4d  : does not fit (%s: %s)\n", B, gptx_status_name(rc), gptx_last_error());
        fflush(stdout);
        gptx_optimizer_destroy(opt);
        gptx_model_destroy(m);
        opt = NULL;
        m = NULL;
        if (rc != GPTX_ERR_NO_MEMORY) break;
    }
    if (!m || B < 1) {
        fprintf(stderr, "gptx-bench-gpu: no batch size fits\n");
        gptx_context_destroy(ctx);
        return 1;
    }
    size_t BT = (size_t)B * T;
    double pmat = matmul_params(m);
    double fpt = 6.0 * pmat + 6.0 * a.layers * (double)T * a.width;
    printf("batch       : %d x %d = %zu tokens per step%s\n", B, T, BT,
           a.batch ? "" : " (largest power of two that fits)");
    printf("parameters  : %zu, %.0f in products; model FLOPs %.4g per token\n",
           gptx_model_num_parameters(m), pmat, fpt);
    printf("cold        : first step %.3f s (model, optimizer, activations, cuBLASLt heuristics)\n",
           cold);
    fflush(stdout);

    double capture = 0;
    for (int i = 1; i < a.warmup && rc == GPTX_OK; i++) {
        double t0 = bench_now_s();
        rc = step(ctx, m, opt, in, tg, B, T, a.fused, &loss);
        if (i == 1) capture = bench_now_s() - t0;
    }
    if (a.graphs && rc == GPTX_OK)
        printf("cold        : second step %.3f s (graph capture, instantiation, first launch)\n",
               capture);
    double *times = malloc((size_t)a.steps * sizeof *times);
    for (int i = 0; i < a.steps && rc == GPTX_OK; i++) {
        double t0 = bench_now_s();
        rc = step(ctx, m, opt, in, tg, B, T, a.fused, &loss);
        times[i] = bench_now_s() - t0;
    }
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-bench-gpu: step failed: %s\n", gptx_last_error());
        return 1;
    }
    double *sorted = malloc((size_t)a.steps * sizeof *sorted);
    memcpy(sorted, times, (size_t)a.steps * sizeof *sorted);
    qsort(sorted, (size_t)a.steps, sizeof *sorted, bench_cmp_double);
    double med =
        a.steps % 2 ? sorted[a.steps / 2] : 0.5 * (sorted[a.steps / 2 - 1] + sorted[a.steps / 2]);
    double tok_s = (double)BT / med, mfu = fpt * tok_s / PEAK_FLOPS;
    gptx_memory_stats mem;
    gptx_memory_stats_init(&mem);
    gptx_context_memory(ctx, &mem);
    int64_t captures = 0, replays = 0;
    gptx_context_graph_counts(ctx, &captures, &replays);
    printf("steady      : median %.4f s/step (min %.4f, max %.4f) over %d steps\n", med, sorted[0],
           sorted[a.steps - 1], a.steps);
    printf("graphs      : %s, %lld captured, %lld replays\n", a.graphs ? "on" : "off",
           (long long)captures, (long long)replays);
    printf("throughput  : %.0f tokens/s, %.1f model TFLOP/s, MFU %.1f %% of 989 TFLOP/s\n", tok_s,
           fpt * tok_s * 1e-12, 100.0 * mfu);
    printf("loss        : %.4f (first step) -> %.4f (last step)\n", (double)loss0, (double)loss);
    printf("memory      : allocated %.2f GiB, peak %.2f GiB, reserved %.2f GiB (device, through "
           "the context)\n",
           mem.allocated / 1073741824.0, mem.peak / 1073741824.0, mem.reserved / 1073741824.0);
    if (a.json) {
        FILE *f = fopen(a.json, "w");
        if (f) {
            fprintf(f,
                    "{\"implementation\": \"gptx\", \"version\": \"%s\", \"precision\": \"%s\", "
                    "\"batch\": %d, \"seq\": %d, \"layers\": %d, \"heads\": %d, \"width\": %d, "
                    "\"vocab\": %d, \"padded_vocab\": %d, \"flops_per_token\": %.0f, "
                    "\"context_create_s\": %.6f, \"cold_step_s\": %.6f, \"step_median_s\": %.6f, "
                    "\"step_min_s\": %.6f, \"step_max_s\": %.6f, \"tokens_per_s\": %.1f, "
                    "\"mfu\": %.5f, \"mem_allocated\": %llu, \"mem_peak\": %llu, "
                    "\"mem_reserved\": %llu, \"loss_first\": %.6f, \"loss_last\": %.6f, "
                    "\"graphs\": %d, \"fused\": %d, \"capture_step_s\": %.6f, "
                    "\"graph_captures\": %lld, \"graph_replays\": %lld}\n",
                    gptx_version(), a.precision, B, T, a.layers, a.heads, a.width, a.vocab,
                    a.padded_vocab, fpt, t_ctx, cold, med, sorted[0], sorted[a.steps - 1], tok_s,
                    mfu, (unsigned long long)mem.allocated, (unsigned long long)mem.peak,
                    (unsigned long long)mem.reserved, (double)loss0, (double)loss, a.graphs,
                    a.fused, capture, (long long)captures, (long long)replays);
            fclose(f);
        } else {
            fprintf(stderr, "gptx-bench-gpu: cannot write %s: %s\n", a.json, strerror(errno));
        }
    }
    free(times);
    free(sorted);
    free(in);
    free(tg);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return 0;
}
