/*
 * gptx-bench-gemm-ceiling: the best model FLOP/s a training step could reach
 * with OpenBLAS at the model's own matrix shapes.
 *
 * Replays, back to back and with nothing else running, exactly the cblas_sgemm
 * calls the CPU backend makes for the weight matrices of one training step
 * (backends/cpu/cpu_ops.c): per matrix (OC, C) over N = B*T rows, the forward
 * product out = in * W^T (NT), the input gradient din = dout * W (NN) and the
 * accumulated weight gradient dW += dout^T * in (TN). Layers hold c_attn
 * (3C, C), attn.c_proj (C, C), mlp.c_fc (4C, C) and mlp.c_proj (C, 4C); then
 * lm_head (Vp, C). The attention products (6*L*T*C per token, 1.6 % of the
 * small config's FLOPs) are not replayed.
 *
 * Two ways to use the threads: OpenBLAS's own threading, and the way the CPU
 * backend runs them (backends/cpu/cpu_gemm.c: OpenBLAS single-threaded, each
 * product cut along M or N into one part per thread).
 *
 * The printed rate is those products' FLOPs divided by their time: a step
 * that also runs LayerNorm, attention, GELU, the cross-entropy and AdamW can
 * only be slower, so rate / (sgemm 2048^3 rate) bounds the fraction of the
 * sgemm rate any implementation that uses OpenBLAS for its products reaches.
 *
 * --lib onednn: the same products on oneDNN's f32 matmul with its own OpenMP
 * threads (one primitive per product shape, made before the timing); the
 * split mode is not replayed there (gptx's fixed oneDNN tiles are measured
 * by gptx-bench-train with GPTX_CPU_FP32_GEMM=onednn). Built where gptx is
 * built with oneDNN.
 */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_common.h"
#include "prog_flags.h"
#include "prog_presets.h"
#ifdef GPTX_BENCH_DNNL
#include "bench_dnnl.h"

/* --lib onednn: one primitive per product shape, made on first use (the
 * warm-up pass) */
static int use_onednn;
static dnnl_engine_t dnnl_eng;
static dnnl_stream_t dnnl_strm;
static struct {
    int key[9];
    bench_dnnl_mm mm;
} dnnl_cache[32];
static int dnnl_ncache;
static const char *dnnl_impl = "?";

static void onednn_gemm(int ta, int tb, int M, int N, int K, const float *A, int lda,
                        const float *B, int ldb, float beta, float *C, int ldc) {
    int key[9] = {ta, tb, M, N, K, lda, ldb, ldc, beta != 0.0f};
    int i = 0;
    while (i < dnnl_ncache && memcmp(dnnl_cache[i].key, key, sizeof key) != 0) i++;
    if (i == dnnl_ncache) {
        if (dnnl_ncache == 32 ||
            bench_dnnl_create(&dnnl_cache[i].mm, dnnl_eng, dnnl_f32, ta, tb, M, N, K, lda, ldb,
                              ldc, beta != 0.0f) != dnnl_success) {
            fprintf(stderr, "gptx-bench-gemm-ceiling: oneDNN's f32 matmul could not be created\n");
            exit(1);
        }
        memcpy(dnnl_cache[i].key, key, sizeof key);
        dnnl_impl = dnnl_cache[i].mm.impl;
        dnnl_ncache++;
    }
    if (bench_dnnl_run(&dnnl_cache[i].mm, dnnl_eng, dnnl_strm, A, B, C) != dnnl_success) {
        fprintf(stderr, "gptx-bench-gemm-ceiling: oneDNN's f32 matmul failed\n");
        exit(1);
    }
}
#endif

typedef struct {
    const char *name;
    int B, T, L, C, Vp;
} model_shape;

/* from a preset of every gptx program (examples/common/prog_presets.c) */
static model_shape shape_of(const prog_preset *p) {
    return (model_shape){p->name, p->batch, p->context, p->n_layer, p->n_embd, 50304};
}

static int split_threads = 0; /* > 0: cut each product into this many parts */

typedef struct {
    int ta, tb, M, N, K, part, nparts;
    float beta;
    const float *A, *B;
    float *C;
    int lda, ldb, ldc;
} part_args;

static int part_start(int dim, int part, int nparts) {
    return part >= nparts ? dim : (int)((int64_t)dim * part / nparts) & ~15;
}

static void *run_part(void *vp) {
    part_args *a = vp;
    int split_n = a->N > a->M, dim = split_n ? a->N : a->M;
    int lo = part_start(dim, a->part, a->nparts), hi = part_start(dim, a->part + 1, a->nparts);
    const float *A = a->A, *B = a->B;
    float *C = a->C;
    int M = a->M, N = a->N;
    if (split_n) {
        B += a->tb ? (size_t)lo * a->ldb : (size_t)lo;
        C += lo;
        N = hi - lo;
    } else {
        A += a->ta ? (size_t)lo : (size_t)lo * a->lda;
        C += (size_t)lo * a->ldc;
        M = hi - lo;
    }
    if (hi > lo)
        cblas_sgemm(CblasRowMajor, a->ta ? CblasTrans : CblasNoTrans,
                    a->tb ? CblasTrans : CblasNoTrans, M, N, a->K, 1.0f, A, a->lda, B, a->ldb,
                    a->beta, C, a->ldc);
    return NULL;
}

/* Persistent workers (as the pool's): a new thread's first OpenBLAS call
 * allocates its buffers, which must not be timed. */
static pthread_barrier_t start_bar, done_bar;
static part_args jobs[64];
static int quit;

static void *worker(void *vp) {
    int p = (int)(intptr_t)vp;
    for (;;) {
        pthread_barrier_wait(&start_bar);
        if (quit) return NULL;
        run_part(&jobs[p]);
        pthread_barrier_wait(&done_bar);
    }
}

static void sgemm(int ta, int tb, int M, int N, int K, const float *A, int lda, const float *B,
                  int ldb, float beta, float *C, int ldc) {
#ifdef GPTX_BENCH_DNNL
    if (use_onednn) {
        onednn_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    if (split_threads <= 1) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    for (int p = 0; p < split_threads; p++)
        jobs[p] = (part_args){ta, tb, M, N, K, p, split_threads, beta, A, B, C, lda, ldb, ldc};
    pthread_barrier_wait(&start_bar);
    run_part(&jobs[0]);
    pthread_barrier_wait(&done_bar);
}

/* The three products of one weight matrix, as cpu_ops.c issues them. */
static void weight_products(int N, int C, int OC, const float *in, const float *w, float *out,
                            float *din, float *dw) {
    sgemm(0, 1, N, OC, C, in, C, w, C, 0.0f, out, OC);
    sgemm(0, 0, N, C, OC, out, OC, w, C, 0.0f, din, C);
    sgemm(1, 0, OC, C, N, out, OC, in, C, 1.0f, dw, C);
}

static float *filled(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    if (!x) return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
    }
    return x;
}

typedef struct {
    const char *config;
    int threads, warmup, reps;
    const char *json;
    const char *lib;
} ceiling_args;

int main(int argc, char **argv) {
    ceiling_args a = {"small", 0, 1, 5, NULL, "openblas"};
    const ceiling_args defaults = a;
#define ROW(field, name, kind, lo, hi, arg, help) \
    PROG_FLAG_ROW(ceiling_args, field, name, kind, lo, hi, NULL, arg, help, 0, 0)
    const prog_flag rows[] = {
        ROW(config, "--config", PROG_FLAG_STR, 0, 0, "PRESET", "the model's shape (a preset)"),
        ROW(threads, "--threads", PROG_FLAG_INT, 0, 100000, NULL, "threads, 0 = OpenBLAS's own"),
        ROW(warmup, "--warmup", PROG_FLAG_INT, 0, 100000, NULL, "untimed passes"),
        ROW(reps, "--reps", PROG_FLAG_INT, 1, 100000, NULL, "timed passes"),
        ROW(json, "--json", PROG_FLAG_STR, 0, 0, "FILE", "also write the figures to FILE"),
        PROG_FLAG_ROW(ceiling_args, lib, "--lib", PROG_FLAG_CHOICE, 0, 0, "openblas|onednn", "LIB",
                      "the library: openblas or onednn (its own threads only)", 0, 0),
    };
#undef ROW
    const prog_cli cli = {"gptx-bench-gemm-ceiling",
                          "usage: gptx-bench-gemm-ceiling [options]\n"
                          "The products of one training step's weight matrices, alone.\n",
                          rows, sizeof rows / sizeof rows[0], NULL};
    int prc = prog_flags_parse(&cli, &a, NULL, argc, argv, &defaults);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    const prog_preset *preset = prog_preset_lookup(cli.name, "--config", a.config);
    if (!preset) return PROG_EXIT_USAGE;
    int onednn = strcmp(a.lib, "onednn") == 0;
#ifdef GPTX_BENCH_DNNL
    use_onednn = onednn;
    if (onednn) {
        if (a.threads > 0) omp_set_num_threads(a.threads);
        if (dnnl_engine_create(&dnnl_eng, dnnl_cpu, 0) != dnnl_success ||
            dnnl_stream_create(&dnnl_strm, dnnl_eng, dnnl_stream_default_flags) != dnnl_success) {
            fprintf(stderr, "gptx-bench-gemm-ceiling: no oneDNN CPU engine\n");
            return 1;
        }
    }
#else
    if (onednn) {
        fprintf(stderr, "gptx-bench-gemm-ceiling: --lib onednn: this build has no oneDNN\n");
        return PROG_EXIT_USAGE;
    }
#endif
    model_shape chosen = shape_of(preset);
    const model_shape *s = &chosen;
    int threads = a.threads, warmup = a.warmup, reps = a.reps;
    const char *json = a.json;
    int N = s->B * s->T, C = s->C, Vp = s->Vp;
    int layer_oc[4] = {3 * C, C, 4 * C, C}, layer_c[4] = {C, C, C, 4 * C};
    size_t wmax = (size_t)Vp * C, omax = (size_t)N * Vp, imax = (size_t)N * 4 * C;
    float *w = filled(wmax, 1), *dw = filled(wmax, 2), *out = filled(omax, 3);
    float *in = filled(imax, 4), *din = filled(imax, 5);
    double *t = malloc((size_t)reps * sizeof *t);
    if (!w || !dw || !out || !in || !din || !t) {
        fprintf(stderr, "gptx-bench-gemm-ceiling: out of host memory\n");
        return 1;
    }
    double flop = 0.0;
    for (int k = 0; k < 4; k++) flop += 6.0 * N * (double)layer_oc[k] * layer_c[k];
    flop = flop * s->L + 6.0 * N * (double)Vp * C;
    double lm_flop = 6.0 * N * (double)Vp * C;
    int lib_threads = threads > 0 ? threads : openblas_get_num_threads();
#ifdef GPTX_BENCH_DNNL
    if (onednn) lib_threads = omp_get_max_threads();
#endif
    printf("gptx-bench-gemm-ceiling: %s (B %d, T %d, L %d, C %d, Vp %d), %d threads%s\n", s->name,
           s->B, s->T, s->L, C, Vp, lib_threads, onednn ? ", oneDNN f32 matmul" : "");
    printf("products    : %d weight matrices x 3 sgemm (forward, input grad, weight grad), "
           "%.2f GFLOP per step\n", 4 * s->L + 1, flop * 1e-9);
    double ceiling[2] = {0.0, 0.0};

    for (int mode = 0; mode < (onednn ? 1 : 2); mode++) {
        /* mode 0: OpenBLAS threads; mode 1: single-threaded OpenBLAS, one part per thread */
        int nthr = threads > 0 ? threads : openblas_get_num_threads();
        openblas_set_num_threads(mode ? 1 : nthr);
        split_threads = mode ? (nthr < 64 ? nthr : 64) : 0;
        pthread_t th[64];
        if (split_threads > 1) {
            pthread_barrier_init(&start_bar, NULL, (unsigned)split_threads);
            pthread_barrier_init(&done_bar, NULL, (unsigned)split_threads);
            for (int p = 1; p < split_threads; p++)
                pthread_create(&th[p], NULL, worker, (void *)(intptr_t)p);
        }
        double t_lm = 0.0;
        for (int r = -warmup; r < reps; r++) {
            double t0 = bench_now_s();
            for (int l = 0; l < s->L; l++)
                for (int k = 0; k < 4; k++)
                    weight_products(N, layer_c[k], layer_oc[k], in, w, out, din, dw);
            double t1 = bench_now_s();
            weight_products(N, C, Vp, in, w, out, din, dw);
            double t2 = bench_now_s();
            if (r >= 0) {
                t[r] = t2 - t0;
                t_lm += t2 - t1;
            }
        }
        qsort(t, (size_t)reps, sizeof *t, bench_cmp_double);
        double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        printf("%-11s : median %.4f s per step's products (min %.4f, max %.4f, %d reps); "
               "lm_head %.1f GFLOP/s\n", mode ? "gptx split" : onednn ? "onednn mt" : "openblas mt",
               med, t[0],
               t[reps - 1], reps, lm_flop * reps / t_lm * 1e-9);
        printf("ceiling     : %.2f GFLOP/s median (best %.2f)\n", flop / med * 1e-9,
               flop / t[0] * 1e-9);
        ceiling[mode] = flop / med * 1e-9;
        if (split_threads > 1) {
            quit = 1;
            pthread_barrier_wait(&start_bar);
            for (int p = 1; p < split_threads; p++) pthread_join(th[p], NULL);
            pthread_barrier_destroy(&start_bar);
            pthread_barrier_destroy(&done_bar);
        }
    }
#ifdef GPTX_BENCH_DNNL
    if (onednn) printf("kernel      : %s %s (lm_head's weight gradient)\n", bench_dnnl_version(),
                       dnnl_impl);
#endif
    if (json) {
        FILE *f = fopen(json, "w");
        if (!f) {
            fprintf(stderr, "gptx-bench-gemm-ceiling: cannot write %s: %s\n", json, strerror(errno));
            return 1;
        }
        if (onednn) /* one mode: the library's own threads */
            fprintf(f,
                    "{\n  \"config\": \"%s\", \"threads\": %d, \"reps\": %d, \"gflop\": %.4f,\n"
                    "  \"ceiling_onednn_threads_gflops\": %.4f\n}\n",
                    s->name, threads, reps, flop * 1e-9, ceiling[0]);
        else
            fprintf(f,
                    "{\n  \"config\": \"%s\", \"threads\": %d, \"reps\": %d, \"gflop\": %.4f,\n"
                    "  \"ceiling_openblas_threads_gflops\": %.4f,\n"
                    "  \"ceiling_split_gflops\": %.4f\n}\n",
                    s->name, threads, reps, flop * 1e-9, ceiling[0], ceiling[1]);
        fclose(f);
    }
    free(w);
    free(dw);
    free(out);
    free(in);
    free(din);
    free(t);
    return 0;
}
