/*
 * gptx-bench-train: throughput of full training steps on the CPU backend.
 *
 * One timed step = gptx_model_zero_grad + gptx_model_forward (with targets)
 * + gptx_model_backward(1.0f) + gptx_optimizer_step (AdamW, default options:
 * global-norm clipping at 1.0, weight decay on matrices). The token batch is a
 * fixed pseudo-random one (xorshift64*, fixed seed) already in host memory, so
 * no data loading is timed.
 *
 * The first step is reported on its own ("cold"): it allocates the
 * activation buffer and touches every page for the first time. It counts as
 * the first of the --warmup untimed steps. After warm-up, --steps steps are
 * timed one by one with clock_gettime(CLOCK_MONOTONIC); the median, minimum
 * and maximum are reported, together with the median time of each phase.
 *
 * Model FLOPs per token (fwd + bwd), the usual "6N + attention" estimate:
 *   6 * P_mat + 6 * n_layer * T * n_embd
 * where P_mat is the number of elements of every weight matrix that takes
 * part in a matrix product: per layer attn.c_attn (3C x C), attn.c_proj
 * (C x C), mlp.c_fc (4C x C), mlp.c_proj (C x 4C), plus the output head
 * (padded_vocab x C; with a tied head that is wte, counted once). wpe, and
 * with an untied head wte, are lookups, not products, and are not counted;
 * neither are biases, LayerNorm, GELU, softmax or the optimizer.
 * The attention term 6*L*T*C is causal QK^T and AV (2*2*T*C per token
 * forward when not masked, halved by the causal mask, times 3 for fwd+bwd).
 *
 * With --peak FILE (gptx-bench-peak's JSON) or --peak-gflops X the model
 * GFLOP/s is also reported as % of the machine's peak: the fp32 FMA peak
 * under fp32, the AVX512_BF16 one under the bf16 policies.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "gptx/gptx.h"

#include "bench_common.h"
#include "prog_flags.h"
#include "prog_presets.h"

typedef struct {
    const char *config;
    int batch, seq, layers, heads, width, vocab, padded_vocab;
    int threads, warmup, steps;
    const char *json;
    unsigned long long seed;
    int separate; /* 1: gptx_model_forward + gptx_model_backward instead of forward_backward */
    const char *precision;   /* gptx_precision_name */
    int stochastic_rounding; /* bf16_pure's AdamW rounding */
    double peak_gflops;      /* --peak-gflops: the run's peak, 0 = none */
    const char *peak;        /* --peak: gptx-bench-peak's JSON file */
} bench_args;

/* A preset of examples/common/prog_presets.c: the model and its batch. */
static int apply_config(bench_args *a, const char *name) {
    const prog_preset *p = prog_preset_lookup("gptx-bench-train", "--config", name);
    if (!p) return -1;
    a->vocab = 50257, a->padded_vocab = 50304, a->seq = p->context;
    a->layers = p->n_layer, a->heads = p->n_head, a->width = p->n_embd, a->batch = p->batch;
    a->config = p->name;
    return 0;
}

static double tv_seconds(const struct timeval *tv) {
    return (double)tv->tv_sec + 1e-6 * (double)tv->tv_usec;
}

/* The process's thread count (Linux: /proc/self/status), -1 if unknown. */
static int process_threads(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int n = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "Threads:", 8) == 0) n = atoi(line + 8);
    fclose(f);
    return n;
}

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(bench_args, field, name, kind, lo, hi, choices, arg, help, bits, 0)
static const prog_flag rows[] = {
    ROW(config, "--config", PROG_FLAG_STR, 0, 0, NULL, "PRESET",
        "a preset of every gptx program (below): its model, T and batch B\n"
        "(the benchmark of docs/benchmarks.md is small)", 0),
    ROW(config, "--preset", PROG_FLAG_STR, 0, 0, NULL, "PRESET", "the same as --config",
        PROG_FLAG_HIDDEN),
    ROW(threads, "--threads", PROG_FLAG_INT, 0, 1000000, NULL, NULL,
        "context num_threads (0 = all online cores)", 0),
    ROW(warmup, "--warmup", PROG_FLAG_INT, 1, 1000000, NULL, NULL,
        "untimed steps before timing, the cold first step included", 0),
    ROW(steps, "--steps", PROG_FLAG_INT, 1, 1000000, NULL, NULL, "timed steps", 0),
    ROW(batch, "--batch", PROG_FLAG_INT, 1, 1000000, NULL, "B", "rows per step (the preset's)",
        PROG_FLAG_NO_DEFAULT),
    ROW(seq, "--seq", PROG_FLAG_INT, 1, 1000000, NULL, "T", "tokens per row (the preset's)",
        PROG_FLAG_NO_DEFAULT),
    ROW(layers, "--layers", PROG_FLAG_INT, 1, 1000000, NULL, "L", "(the preset's)",
        PROG_FLAG_NO_DEFAULT),
    ROW(heads, "--heads", PROG_FLAG_INT, 1, 1000000, NULL, "H", "(the preset's)",
        PROG_FLAG_NO_DEFAULT),
    ROW(width, "--width", PROG_FLAG_INT, 1, 1000000, NULL, "C", "(the preset's)",
        PROG_FLAG_NO_DEFAULT),
    ROW(vocab, "--vocab", PROG_FLAG_INT, 1, 1000000000, NULL, "V", "vocabulary", 0),
    ROW(padded_vocab, "--padded-vocab", PROG_FLAG_INT, 0, 1000000000, NULL, "Vp",
        "rows of wte/lm_head; 0 = --vocab", 0),
    ROW(seed, "--seed", PROG_FLAG_U64, 0, 0, NULL, "S", "initialisation and data seed", 0),
    ROW(json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE", "also write the results as JSON to FILE",
        0),
    ROW(separate, "--separate", PROG_FLAG_INT, 0, 1, NULL, "0|1",
        "1 = gptx_model_forward, then gptx_model_backward (forward and backward\n"
        "timed apart); 0 = gptx_model_forward_backward, the cross-entropy and its\n"
        "gradient in one pass (same numbers bit for bit)", 0),
    ROW(precision, "--precision", PROG_FLAG_CHOICE, 0, 0, "fp32|bf16|bf16_pure", "P",
        "docs/precision.md", 0),
    ROW(stochastic_rounding, "--stochastic-rounding", PROG_FLAG_INT, 0, 1, NULL, "0|1",
        "1 = bf16_pure's AdamW rounds stochastically", 0),
    ROW(peak_gflops, "--peak-gflops", PROG_FLAG_DOUBLE, 0, 1e9, NULL, "X",
        "the machine's peak for this run's precision and threads, GFLOP/s:\n"
        "model GFLOP/s is also reported as % of it (0 = none)", 0),
    ROW(peak, "--peak", PROG_FLAG_STR, 0, 0, NULL, "FILE",
        "the same from gptx-bench-peak --json FILE: its fp32 figure under fp32, its\n"
        "bf16 one under the bf16 policies (none without AVX512_BF16), scaled per\n"
        "thread when its thread count differs", 0),
};
#undef ROW
enum { N_ROWS = sizeof rows / sizeof rows[0] };

/* Flags first, then the preset fills the shape flags not given (explicit
 * overrides win whatever their position). 0, 1 after --help/--version, -1
 * after a message. */
static int parse_args(bench_args *a, int argc, char **argv) {
    static const prog_cli cli = {
        "gptx-bench-train",
        "usage: gptx-bench-train [options]\n"
        "Times full training steps (forward, backward, AdamW) of the library.\n",
        rows, N_ROWS, "presets (the time is gptx-train's recipe, not this benchmark):\n"};
    const bench_args defaults = *a;
    unsigned char given[N_ROWS];
    int rc = prog_flags_parse(&cli, a, given, argc, argv, &defaults);
    if (rc == 1) prog_presets_print(stdout, "  ");
    if (rc) return rc;
    bench_args flags = *a;
    if (apply_config(a, a->config) != 0) return -1;
    for (int i = 0; i < N_ROWS; i++) /* what the command line gave wins over the preset */
        if (given[i] && rows[i].kind == PROG_FLAG_INT)
            *(int *)((char *)a + rows[i].offset) = *(const int *)((const char *)&flags + rows[i].offset);
    if (a->padded_vocab == 0) a->padded_vocab = a->vocab;
    if (a->peak && a->peak_gflops > 0)
        return prog_usage_error("gptx-bench-train", "--peak-gflops", NULL,
                                "give --peak FILE or --peak-gflops X, not both");
    return 0;
}

/* The peak a run is set against (see --peak). */
typedef struct {
    double gflops;      /* for this run's precision and threads; 0 = none */
    const char *kind;   /* "fp32", "bf16" */
    const char *source; /* the file, "--peak-gflops" or NULL */
    int from_threads;   /* the file's thread count when scaled, else 0 */
} run_peak;

/* Reads gptx-bench-peak's JSON file into the per-thread figures of kind
 * (all threads, one thread) and its thread count. 0, or 1 after a message. */
static int read_peak_file(const char *path, const char *kind, double *all, double *one,
                          int *threads) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "gptx-bench-train: --peak %s: %s\n", path, strerror(errno));
        return 1;
    }
    char text[16384];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char k_all[64], k_one[64];
    snprintf(k_all, sizeof k_all, "%s_peak_gflops", kind);
    snprintf(k_one, sizeof k_one, "%s_peak_1t_gflops", kind);
    double t = 0;
    int ra = bench_json_number(text, k_all, all), ro = bench_json_number(text, k_one, one);
    if (ra < 0 || ro < 0 || bench_json_number(text, "threads", &t) != 1 || t < 1) {
        fprintf(stderr, "gptx-bench-train: --peak %s: not a gptx-bench-peak JSON file (no %s, "
                "%s and threads)\n", path, k_all, k_one);
        return 1;
    }
    if (ra == 0 || ro == 0) *all = *one = 0; /* null: this CPU has none */
    *threads = (int)t;
    return 0;
}

static double vmin(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] < m ? v[i] : m;
    return m;
}

static double vmax(const double *v, int n) {
    double m = v[0];
    for (int i = 1; i < n; i++) m = v[i] > m ? v[i] : m;
    return m;
}

#define CHECK(call)                                                                      \
    do {                                                                                 \
        int rc_ = (call);                                                                \
        if (rc_ != GPTX_OK) {                                                            \
            fprintf(stderr, "gptx-bench-train: %s failed: %s (%d): %s\n", #call,         \
                    gptx_status_name(rc_), rc_, gptx_last_error());                       \
            goto fail;                                                                   \
        }                                                                                \
    } while (0)

enum { PH_ZERO, PH_FWD, PH_BWD, PH_OPT, PH_N };
/* with forward_backward, "forward" is both passes and "backward" is 0 */
static const char *phase_names[PH_N] = {"zero_grad", "forward", "backward", "optimizer"};
static int separate_passes = 0;

/* One training step; ph (if not NULL) receives the time of each phase. */
static int train_step(gptx_model *model, gptx_optimizer *opt, gptx_context *ctx,
                      const int32_t *inp, const int32_t *tgt, int B, int T, float *loss,
                      double ph[PH_N]) {
    double t0 = bench_now_s();
    int rc = gptx_model_zero_grad(model);
    if (rc != GPTX_OK) return rc;
    double t1 = bench_now_s();
    double t2;
    if (separate_passes) {
        rc = gptx_model_forward(model, inp, tgt, B, T, loss);
        if (rc != GPTX_OK) return rc;
        t2 = bench_now_s();
        rc = gptx_model_backward(model, 1.0f);
    } else {
        rc = gptx_model_forward_backward(model, inp, tgt, B, T, 1.0f, loss);
        t2 = bench_now_s();
    }
    if (rc != GPTX_OK) return rc;
    double t3 = bench_now_s();
    rc = gptx_optimizer_step(opt, model, NULL);
    if (rc != GPTX_OK) return rc;
    rc = gptx_context_synchronize(ctx);
    if (rc != GPTX_OK) return rc;
    double t4 = bench_now_s();
    if (ph) {
        ph[PH_ZERO] = t1 - t0;
        ph[PH_FWD] = t2 - t1;
        ph[PH_BWD] = t3 - t2;
        ph[PH_OPT] = t4 - t3;
    }
    return GPTX_OK;
}

/* Number of elements of the weight matrices used in matrix products (see top). */
static int count_matmul_params(const gptx_model *model, double *out) {
    int n = gptx_model_num_tensors(model);
    if (n < 0) return n;
    int lm_head = -1, rc;
    rc = gptx_model_find_tensor(model, "lm_head.weight", &lm_head);
    int untied = rc == GPTX_OK;
    gptx_clear_error();
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        rc = gptx_model_tensor_info(model, i, &info);
        if (rc != GPTX_OK) return rc;
        if (info.ndim != 2) continue;
        if (strcmp(info.name, "wpe.weight") == 0) continue;
        if (untied && strcmp(info.name, "wte.weight") == 0) continue;
        sum += (double)info.numel;
    }
    *out = sum;
    return GPTX_OK;
}

int main(int argc, char **argv) {
    bench_args a = {0};
    apply_config(&a, "small");
    a.threads = 0;
    a.warmup = 2;
    a.steps = 10;
    a.seed = 1234;
    a.precision = "fp32";
    a.config = "small";
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    separate_passes = a.separate;
    if (!separate_passes) { /* one call: no backward phase of its own to report */
        phase_names[PH_FWD] = "forward+backward";
        phase_names[PH_BWD] = NULL;
    }
    int B = a.batch, T = a.seq;
    int explicit_shape = 0;
    {
        bench_args ref = {0};
        apply_config(&ref, a.config);
        explicit_shape = ref.batch != a.batch || ref.seq != a.seq || ref.layers != a.layers ||
                         ref.heads != a.heads || ref.width != a.width || ref.vocab != a.vocab ||
                         ref.padded_vocab != a.padded_vocab;
    }

    int status = 1;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_optimizer *opt = NULL;
    int32_t *inp = NULL, *tgt = NULL;
    double *steps = NULL, *phases[PH_N] = {NULL};

    gptx_context_options copts;
    gptx_context_options_init(&copts);
    copts.backend = GPTX_BACKEND_CPU;
    copts.num_threads = a.threads;
    copts.precision = gptx_precision_from_name(a.precision);
    copts.stochastic_rounding = a.stochastic_rounding;
    CHECK(gptx_context_create(&ctx, &copts));
    gptx_context_info info;
    gptx_context_info_init(&info);
    CHECK(gptx_context_get_info(ctx, &info));
    run_peak peak = {a.peak_gflops, info.precision == GPTX_PRECISION_FP32 ? "fp32" : "bf16",
                     a.peak_gflops > 0 ? "--peak-gflops" : NULL, 0};
    if (a.peak) {
        double all = 0, one = 0;
        int pthreads = 0, nt = gptx_context_num_threads(ctx);
        if (read_peak_file(a.peak, peak.kind, &all, &one, &pthreads)) goto fail;
        peak.source = a.peak;
        /* the file's figure for this thread count; another count scales it per
         * thread (FMA throughput is per core) */
        peak.gflops = nt == pthreads ? all : nt == 1 ? one : all / pthreads * nt;
        peak.from_threads = nt == pthreads || nt == 1 ? 0 : pthreads;
    }

    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    cfg.vocab_size = a.vocab;
    cfg.padded_vocab_size = a.padded_vocab;
    cfg.context_length = T;
    cfg.n_layer = a.layers;
    cfg.n_head = a.heads;
    cfg.n_embd = a.width;
    cfg.qkv_bias = 1;
    cfg.tied_head = 1;
    cfg.mask_padded_logits = 1;
    CHECK(gptx_model_create(&model, ctx, &cfg));
    CHECK(gptx_model_init_random(model, 42));
    gptx_adamw_options aopts;
    gptx_adamw_options_init(&aopts);
    CHECK(gptx_optimizer_create(&opt, model, &aopts));

    /* fixed data: xorshift64* tokens; the target of a position is the next
     * token of the same stream (as a language-model batch would be) */
    size_t BT = (size_t)B * T;
    inp = malloc(BT * sizeof *inp);
    tgt = malloc(BT * sizeof *tgt);
    steps = malloc((size_t)a.steps * sizeof *steps);
    for (int p = 0; p < PH_N; p++) phases[p] = malloc((size_t)a.steps * sizeof(double));
    if (!inp || !tgt || !steps || !phases[0] || !phases[1] || !phases[2] || !phases[3]) {
        fprintf(stderr, "gptx-bench-train: out of host memory\n");
        goto fail;
    }
    uint64_t x = a.seed ? a.seed : 0x9E3779B97F4A7C15ull;
    int32_t prev = 0;
    for (size_t i = 0; i <= BT; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        int32_t tok = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)a.vocab);
        if (i > 0) {
            inp[i - 1] = prev;
            tgt[i - 1] = tok;
        }
        prev = tok;
    }

    double pmat = 0.0;
    CHECK(count_matmul_params(model, &pmat));
    double flops_per_token = 6.0 * pmat + 6.0 * (double)a.layers * T * a.width;
    double flops_per_step = flops_per_token * (double)BT;

    printf("gptx-bench-train (gptx %s, backend %s, features 0x%x)\n", gptx_version(),
           gptx_context_backend_name(ctx), gptx_features());
    printf("config      : %s%s: vocab %d (padded %d), T %d (context_length %d), layers %d, "
           "heads %d, width %d, batch %d; tied head, qkv bias, masked padded logits\n",
           a.config, explicit_shape ? " (with overrides)" : "", a.vocab, a.padded_vocab, T, T,
           a.layers, a.heads, a.width, B);
    printf("parameters  : %zu total, %.0f in weight matrices used by matmuls (lm_head/wte once, "
           "no wpe)\n",
           gptx_model_num_parameters(model), pmat);
    printf("threads     : %d (context num_threads; the pool splits every product, which runs "
           "single-threaded inside its tasks)\n",
           gptx_context_num_threads(ctx));
    printf("precision   : %s%s; products: %s; bf16 in hardware: %s\n",
           gptx_precision_name(info.precision),
           info.precision == GPTX_PRECISION_BF16_PURE && a.stochastic_rounding
               ? " (stochastic rounding)" : "",
           info.products,
           info.bf16_native ? "yes" : "no (bf16 policies run emulated)");
    printf("passes      : %s\n", separate_passes
                                       ? "gptx_model_forward, then gptx_model_backward (--separate 1)"
                                       : "gptx_model_forward_backward (cross-entropy and its "
                                         "gradient in one pass)");
    printf("steps       : %d warm-up (cold first step included), %d timed\n", a.warmup, a.steps);
    printf("timing scope: training steps only: zero_grad+forward+backward+AdamW, data already in "
           "host memory\n");
    printf("model FLOPs : 6*%.0f + 6*%d*%d*%d = %.4g per token, %.4g per step\n", pmat, a.layers, T,
           a.width, flops_per_token, flops_per_step);
    fflush(stdout);

    float loss0 = 0.0f, loss = 0.0f;
    double cold_ph[PH_N];
    double t0 = bench_now_s();
    CHECK(train_step(model, opt, ctx, inp, tgt, B, T, &loss0, cold_ph));
    double cold = bench_now_s() - t0;
    if (separate_passes)
        printf("cold step   : %.4f s (forward %.4f, backward %.4f; includes activation allocation "
               "and first touch)\n",
               cold, cold_ph[PH_FWD], cold_ph[PH_BWD]);
    else
        printf("cold step   : %.4f s (forward+backward %.4f; includes activation allocation and "
               "first touch)\n",
               cold, cold_ph[PH_FWD]);
    fflush(stdout);
    for (int i = 1; i < a.warmup; i++) CHECK(train_step(model, opt, ctx, inp, tgt, B, T, &loss, NULL));
    struct rusage ru0;
    getrusage(RUSAGE_SELF, &ru0);
    double wall0 = bench_now_s();
    for (int i = 0; i < a.steps; i++) {
        double ph[PH_N];
        double s0 = bench_now_s();
        CHECK(train_step(model, opt, ctx, inp, tgt, B, T, &loss, ph));
        steps[i] = bench_now_s() - s0;
        for (int p = 0; p < PH_N; p++) phases[p][i] = ph[p];
    }

    double wall = bench_now_s() - wall0;
    struct rusage ru1;
    getrusage(RUSAGE_SELF, &ru1);
    double user_s = tv_seconds(&ru1.ru_utime) - tv_seconds(&ru0.ru_utime);
    double sys_s = tv_seconds(&ru1.ru_stime) - tv_seconds(&ru0.ru_stime);
    int os_threads = process_threads();
    double med = bench_median(steps, a.steps), mn = vmin(steps, a.steps), mx = vmax(steps, a.steps);
    double tok_s = (double)BT / med;
    double gflops = flops_per_step / med * 1e-9;
    gptx_memory_stats mem;
    gptx_memory_stats_init(&mem);
    CHECK(gptx_context_memory(ctx, &mem));
    struct rusage ru;
    long maxrss_kib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
    double ph_med[PH_N];
    for (int p = 0; p < PH_N; p++) ph_med[p] = bench_median(phases[p], a.steps);

    printf("steady state: median %.4f s/step (min %.4f, max %.4f) over %d steps\n", med, mn, mx,
           a.steps);
    printf("  phases (median):");
    for (int p = 0, first = 1; p < PH_N; p++)
        if (phase_names[p]) {
            printf("%s %s %.4f s (%.1f%%)", first ? "" : ",", phase_names[p], ph_med[p],
                   100.0 * ph_med[p] / med);
            first = 0;
        }
    printf("\n");
    printf("throughput  : %.1f tokens/s, %.2f model GFLOP/s\n", tok_s, gflops);
    double pct_peak = peak.gflops > 0 ? 100.0 * gflops / peak.gflops : -1.0;
    if (pct_peak >= 0) {
        char scaled[64] = "";
        if (peak.from_threads)
            snprintf(scaled, sizeof scaled, ", scaled per thread from %d threads",
                     peak.from_threads);
        printf("of peak     : %.1f %% of the %s peak %.2f GFLOP/s (%s%s)\n", pct_peak, peak.kind,
               peak.gflops, peak.source, scaled);
    } else if (peak.source) {
        printf("of peak     : - (%s has no %s peak: the CPU has no bf16 instructions)\n",
               peak.source, peak.kind);
    }
    printf("loss        : %.4f (first step) -> %.4f (last step)\n", (double)loss0, (double)loss);
    /* what the timed steps cost the machine: with nothing spinning beside the
     * pool, CPU time stays below threads x wall time and system time small */
    printf("cpu time    : user %.2f s + system %.2f s over %.2f s of timed steps (%.2f cores "
           "busy); %d threads in the process\n",
           user_s, sys_s, wall, (user_s + sys_s) / wall, os_threads);
    printf("memory      : allocated %.1f MiB, reserved %.1f MiB, peak %.1f MiB "
           "(gptx_context_memory: library buffers only); process max RSS %.1f MiB\n",
           mem.allocated / 1048576.0, mem.reserved / 1048576.0, mem.peak / 1048576.0,
           maxrss_kib / 1024.0);

    if (a.json) {
        FILE *f = fopen(a.json, "w");
        if (!f) {
            fprintf(stderr, "gptx-bench-train: cannot write %s: %s\n", a.json, strerror(errno));
            goto fail;
        }
        fprintf(f, "{\n  \"implementation\": \"gptx\",\n  \"version\": \"%s\",\n", gptx_version());
        fprintf(f, "  \"config\": \"%s\",\n  \"overrides\": %s, \"separate_passes\": %s,\n",
                a.config, explicit_shape ? "true" : "false", separate_passes ? "true" : "false");
        fprintf(f,
                "  \"vocab\": %d, \"padded_vocab\": %d, \"seq\": %d, \"layers\": %d, \"heads\": %d, "
                "\"width\": %d, \"batch\": %d,\n",
                a.vocab, a.padded_vocab, T, a.layers, a.heads, a.width, B);
        fprintf(f, "  \"threads\": %d, \"warmup\": %d, \"steps\": %d,\n",
                gptx_context_num_threads(ctx), a.warmup, a.steps);
        fprintf(f, "  \"precision\": \"%s\", \"stochastic_rounding\": %d, \"products\": \"%s\", "
                "\"bf16_native\": %s,\n",
                gptx_precision_name(info.precision), a.stochastic_rounding, info.products,
                info.bf16_native ? "true" : "false");
        fprintf(f, "  \"parameters\": %zu, \"matmul_parameters\": %.0f,\n",
                gptx_model_num_parameters(model), pmat);
        fprintf(f, "  \"flops_per_token\": %.0f, \"flops_per_step\": %.0f,\n", flops_per_token,
                flops_per_step);
        fprintf(f, "  \"cold_step_s\": %.6f,\n", cold);
        fprintf(f, "  \"step_median_s\": %.6f, \"step_min_s\": %.6f, \"step_max_s\": %.6f,\n", med,
                mn, mx);
        fprintf(f, "  \"step_times_s\": [");
        for (int i = 0; i < a.steps; i++) fprintf(f, "%s%.6f", i ? ", " : "", steps[i]);
        fprintf(f, "],\n  \"phase_median_s\": {");
        for (int p = 0, first = 1; p < PH_N; p++)
            if (phase_names[p]) {
                fprintf(f, "%s\"%s\": %.6f", first ? "" : ", ", phase_names[p], ph_med[p]);
                first = 0;
            }
        fprintf(f, "},\n");
        fprintf(f, "  \"tokens_per_s\": %.3f, \"gflops\": %.4f,\n", tok_s, gflops);
        if (pct_peak >= 0)
            fprintf(f, "  \"peak_gflops\": %.4f, \"pct_of_peak\": %.3f, ", peak.gflops, pct_peak);
        else
            fprintf(f, "  \"peak_gflops\": null, \"pct_of_peak\": null, ");
        fprintf(f, "\"peak_kind\": \"%s\", \"peak_scaled_from_threads\": %d, \"peak_source\": ",
                peak.kind, peak.from_threads);
        if (peak.source) {
            fputc('"', f);
            for (const char *c = peak.source; *c; c++)
                if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
                else fputc(*c, f);
            fprintf(f, "\",\n");
        } else {
            fprintf(f, "null,\n");
        }
        fprintf(f, "  \"cpu_user_s\": %.3f, \"cpu_system_s\": %.3f, \"timed_wall_s\": %.3f, "
                "\"process_threads\": %d,\n",
                user_s, sys_s, wall, os_threads);
        fprintf(f, "  \"loss_first\": %.6f, \"loss_last\": %.6f,\n", (double)loss0, (double)loss);
        fprintf(f,
                "  \"mem_allocated_bytes\": %llu, \"mem_reserved_bytes\": %llu, "
                "\"mem_peak_bytes\": %llu, \"max_rss_bytes\": %lld\n}\n",
                (unsigned long long)mem.allocated, (unsigned long long)mem.reserved,
                (unsigned long long)mem.peak, (long long)maxrss_kib * 1024);
        if (fclose(f) != 0) {
            fprintf(stderr, "gptx-bench-train: writing %s failed\n", a.json);
            goto fail;
        }
    }
    status = 0;
fail:
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    free(inp);
    free(tgt);
    free(steps);
    for (int p = 0; p < PH_N; p++) free(phases[p]);
    return status;
}
