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
 * The printed rate is those products' FLOPs divided by their time: a step
 * that also runs LayerNorm, attention, GELU, the cross-entropy and AdamW can
 * only be slower, so rate / (sgemm 2048^3 rate) bounds the fraction of the
 * sgemm rate any implementation that uses OpenBLAS for its products reaches.
 */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

typedef struct {
    const char *name;
    int B, T, L, C, Vp;
} model_shape;

static const model_shape shapes[] = {
    {"small", 4, 256, 4, 256, 50304},
    {"gpt2-124M-short", 2, 256, 12, 768, 50304},
};

/* The three products of one weight matrix, as cpu_ops.c issues them. */
static void weight_products(int N, int C, int OC, const float *in, const float *w, float *out,
                            float *din, float *dw) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, in, C, w, C, 0.0f, out,
                OC);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, out, OC, w, C, 0.0f,
                din, C);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, out, OC, in, C, 1.0f, dw,
                C);
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

int main(int argc, char **argv) {
    const model_shape *s = &shapes[0];
    int threads = 0, warmup = 1, reps = 5;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            printf("usage: gptx-bench-gemm-ceiling [--config small|gpt2-124M-short] [--threads N]"
                   " [--warmup N] [--reps N]\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-bench-gemm-ceiling: unknown or incomplete option '%s'\n", f);
            return 2;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (strcmp(f, "--config") == 0) {
            s = NULL;
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++)
                if (strcmp(v, shapes[k].name) == 0) s = &shapes[k];
            if (!s) {
                fprintf(stderr, "gptx-bench-gemm-ceiling: unknown --config '%s'\n", v);
                return 2;
            }
            continue;
        }
        errno = 0;
        long n = strtol(v, &end, 10);
        if (errno || !end || *end || n < 0 || n > 100000) {
            fprintf(stderr, "gptx-bench-gemm-ceiling: %s expects a small integer, got '%s'\n", f, v);
            return 2;
        }
        if (strcmp(f, "--threads") == 0) threads = (int)n;
        else if (strcmp(f, "--warmup") == 0) warmup = (int)n;
        else if (strcmp(f, "--reps") == 0 && n > 0) reps = (int)n;
        else {
            fprintf(stderr, "gptx-bench-gemm-ceiling: unknown or invalid option '%s'\n", f);
            return 2;
        }
    }
    if (threads > 0) openblas_set_num_threads(threads);

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
    double t_lm = 0.0;
    for (int r = -warmup; r < reps; r++) {
        double t0 = now_s();
        for (int l = 0; l < s->L; l++)
            for (int k = 0; k < 4; k++)
                weight_products(N, layer_c[k], layer_oc[k], in, w, out, din, dw);
        double t1 = now_s();
        weight_products(N, C, Vp, in, w, out, din, dw);
        double t2 = now_s();
        if (r >= 0) {
            t[r] = t2 - t0;
            t_lm += t2 - t1;
        }
    }
    qsort(t, (size_t)reps, sizeof *t, cmp_double);
    double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    double lm_flop = 6.0 * N * (double)Vp * C;
    printf("gptx-bench-gemm-ceiling: %s (B %d, T %d, L %d, C %d, Vp %d), OpenBLAS %d threads\n",
           s->name, s->B, s->T, s->L, C, Vp, openblas_get_num_threads());
    printf("products    : %d weight matrices x 3 sgemm (forward, input grad, weight grad), "
           "%.2f GFLOP per step\n", 4 * s->L + 1, flop * 1e-9);
    printf("time        : median %.4f s per step's products (min %.4f, max %.4f, %d reps)\n",
           med, t[0], t[reps - 1], reps);
    printf("lm_head     : %.1f GFLOP/s (mean)\n", lm_flop * reps / t_lm * 1e-9);
    printf("ceiling     : %.2f GFLOP/s median (best %.2f)\n", flop / med * 1e-9,
           flop / t[0] * 1e-9);
    free(w);
    free(dw);
    free(out);
    free(in);
    free(din);
    free(t);
    return 0;
}
