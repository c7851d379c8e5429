/* Per-op timing wrappers for gptx-op-profile. Linked with -Wl,--wrap=<symbol>
 * around every CPU backend kernel and gptx_cpu_sgemm (the products issued
 * by the matmul ops; attention's per-tile products run inside the pool and
 * count as attention), so the library sources are compiled unchanged. Not
 * thread-safe: the wrapped functions are called from the calling thread only. Depends on the private backend interface
 * (backends/cpu/cpu_backend.h) and must follow it when that changes. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "cpu_backend.h"

void prof_reset(void);
void prof_print(int steps, double step_time, double zero_grad_time);

#define MAXK 64
static const char *names[MAXK];
static double acc[MAXK], fl[MAXK];
static long cnt[MAXK];
static int nk;
static double tnow(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static int slot(const char *n) {
    for (int i = 0; i < nk; i++) if (strcmp(names[i], n) == 0) return i;
    names[nk] = n; return nk++;
}
static void add(const char *n, double dt, double flops) { int k = slot(n); acc[k] += dt; cnt[k]++; fl[k] += flops; }
void prof_reset(void) { memset(acc, 0, sizeof acc); memset(cnt, 0, sizeof cnt); memset(fl, 0, sizeof fl); }
static double sum_prefix(const char *pfx) {
    double t = 0.0;
    for (int i = 0; i < nk; i++)
        if (strncmp(names[i], pfx, strlen(pfx)) == 0) t += acc[i];
    return t;
}

/* Per-op table (averages per step), then a grouped summary. */
void prof_print(int steps, double step_time, double zero_grad_time) {
    double tot = 0.0;
    for (int i = 0; i < nk; i++)
        if (strncmp(names[i], "  sgemm", 7) != 0 && strncmp(names[i], "  onednn", 8) != 0)
            tot += acc[i];
    printf("%-40s %10s %7s %7s %9s\n", "op (per step)", "ms", "%step", "calls", "GFLOP/s");
    for (int i = 0; i < nk; i++) {
        if (!cnt[i]) continue;
        printf("%-40s %10.2f %6.1f%% %7.1f", names[i], 1e3 * acc[i] / steps,
               100 * acc[i] / steps / step_time, (double)cnt[i] / steps);
        if (fl[i] > 0) printf(" %9.1f", fl[i] / acc[i] * 1e-9);
        printf("\n");
    }
    printf("%-40s %10.2f %6.1f%%\n", "sum of wrapped ops", 1e3 * tot / steps,
           100 * tot / steps / step_time);
    double sg = sum_prefix("  sgemm") + sum_prefix("  onednn"), mm = sum_prefix("matmul_");
    struct { const char *name; double t; } g[] = {
        {"products (sgemm, or oneDNN under bf16)", sg},
        {"matmul ops outside the products (bias, dbias)", mm - sg},
        {"attention_backward", sum_prefix("attention_backward")},
        {"attention_forward", sum_prefix("attention_forward")},
        {"cross-entropy fwd+bwd", sum_prefix("crossentropy_")},
        {"GELU fwd+bwd", sum_prefix("gelu_")},
        {"grad norm + AdamW", sum_prefix("sum_squares") + sum_prefix("adamw")},
        {"LayerNorm, residual, embedding, loss sum",
         sum_prefix("layernorm_") + sum_prefix("residual_") + sum_prefix("embedding_") +
             sum_prefix("sum_to_host")},
        {"zero_grad", zero_grad_time * steps},
    };
    int ng = (int)(sizeof g / sizeof g[0]);
    double known = 0.0;
    printf("\n| group | ms/step | %% of step |\n|---|---:|---:|\n");
    for (int i = 0; i < ng; i++) {
        known += g[i].t;
        printf("| %s | %.0f | %.0f %% |\n", g[i].name, 1e3 * g[i].t / steps,
               100 * g[i].t / steps / step_time);
    }
    double rest = step_time * steps - known;
    printf("| other (unwrapped fills, dispatch) | %.0f | %.0f %% |\n", 1e3 * rest / steps,
           100 * rest / steps / step_time);
}

static const char *mm_kind(int N, int C, int OC) {
    if (OC > 8 * C && OC > 20000) return "lm_head";
    if (OC == 3 * C) return "qkv (c_attn)";
    if (OC == 4 * C) return "mlp.c_fc";
    if (C == 4 * OC) return "mlp.c_proj";
    if (C == OC) return "attn.c_proj";
    return "other";
}

void __real_gptx_cpu_sgemm(gptx_backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *Cm, int ldc);
void __wrap_gptx_cpu_sgemm(gptx_backend *be, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *Cm, int ldc) {
    double t0 = tnow();
    __real_gptx_cpu_sgemm(be, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Cm, ldc);
    double dt = tnow() - t0;
    static char buf[MAXK][96]; static int nb;
    char key[96];
    snprintf(key, sizeof key, "  sgemm %s%s %dx%dx%d", ta ? "T" : "N", tb ? "T" : "N", M, N, K);
    int k; for (k = 0; k < nb; k++) if (!strcmp(buf[k], key)) break;
    if (k == nb) { strcpy(buf[nb++], key); }
    add(buf[k], dt, 2.0 * M * N * K);
}

#define W(ret, name, params, args, label, flops) \
    ret __real_##name params; \
    ret __wrap_##name params { double t0 = tnow(); ret r = __real_##name args; add(label, tnow() - t0, flops); return r; }
/* the same op under the bf16 policies: the same label, a _bf16 symbol */
#define W2(ret, name, params, args, label, flops) \
    W(ret, name, params, args, label, flops) \
    W(ret, name##_bf16, params, args, label, flops)

#ifdef GPTX_HAVE_DNNL
#include "cpu_dnnl.h"
int __real_gptx_cpu_dnnl_matmul(gptx_backend *be, const gptx_cpu_matmul *mm);
int __wrap_gptx_cpu_dnnl_matmul(gptx_backend *be, const gptx_cpu_matmul *mm) {
    double t0 = tnow();
    int r = __real_gptx_cpu_dnnl_matmul(be, mm);
    double dt = tnow() - t0;
    static char buf[MAXK][96]; static int nb;
    char key[96];
    snprintf(key, sizeof key, "  onednn %s %dx%dx%d%s", mm->a_col == 1 ? "N" : "T", mm->M, mm->N,
             mm->K, mm->accumulate ? " +=" : "");
    int k; for (k = 0; k < nb; k++) if (!strcmp(buf[k], key)) break;
    if (k == nb) { strcpy(buf[nb++], key); }
    add(buf[k], dt, 2.0 * mm->M * mm->N * mm->K);
    return r;
}
#endif

W2(int, gptx_cpu_embedding_forward, (gptx_backend *be, float *out, const int32_t *inp, const float *wte, const float *wpe, int B, int T, int C), (be, out, inp, wte, wpe, B, T, C), "embedding_forward", 0)
W2(int, gptx_cpu_embedding_backward, (gptx_backend *be, float *dwte, float *dwpe, const float *dout, const int32_t *inp, int B, int T, int C), (be, dwte, dwpe, dout, inp, B, T, C), "embedding_backward", 0)
W2(int, gptx_cpu_layernorm_forward, (gptx_backend *be, float *out, float *mean, float *rstd, const float *inp, const float *w, const float *b, int N, int C, float eps), (be, out, mean, rstd, inp, w, b, N, C, eps), "layernorm_forward", 0)
W2(int, gptx_cpu_layernorm_backward, (gptx_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w, const float *mean, const float *rstd, int N, int C), (be, dinp, dw, db, dout, inp, w, mean, rstd, N, C), "layernorm_backward", 0)
W2(int, gptx_cpu_attention_forward, (gptx_backend *be, float *out, float *lse, const float *qkv, int B, int T, int C, int NH), (be, out, lse, qkv, B, T, C, NH), "attention_forward", 2.0 * B * T * T * C)
W2(int, gptx_cpu_attention_backward, (gptx_backend *be, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse, int B, int T, int C, int NH), (be, dqkv, dout, qkv, out, lse, B, T, C, NH), "attention_backward", 4.0 * B * T * T * C)
W2(int, gptx_cpu_gelu_forward, (gptx_backend *be, float *out, const float *inp, size_t n), (be, out, inp, n), "gelu_forward", 0)
W2(int, gptx_cpu_gelu_backward, (gptx_backend *be, float *dinp, const float *inp, const float *dout, size_t n), (be, dinp, inp, dout, n), "gelu_backward", 0)
W2(int, gptx_cpu_residual_forward, (gptx_backend *be, float *out, const float *a, const float *b, size_t n), (be, out, a, b, n), "residual_forward", 0)
W2(int, gptx_cpu_crossentropy_forward, (gptx_backend *be, float *losses, float *lse, float *logits, const int32_t *targets, int N, int V, int Vp, int mask_padded), (be, losses, lse, logits, targets, N, V, Vp, mask_padded), "crossentropy_forward", 0)
W2(int, gptx_cpu_crossentropy_backward, (gptx_backend *be, float *logits, const float *lse, const int32_t *targets, int N, int V, int Vp, float dloss), (be, logits, lse, targets, N, V, Vp, dloss), "crossentropy_backward", 0)
W2(int, gptx_cpu_crossentropy_fused, (gptx_backend *be, float *losses, float *lse, float *logits, const int32_t *targets, int N, int V, int Vp, int mask_padded, float dloss), (be, losses, lse, logits, targets, N, V, Vp, mask_padded, dloss), "crossentropy_fused", 0)
W(int, gptx_cpu_sum_to_host, (gptx_backend *be, double *host_sum, const float *x, size_t n), (be, host_sum, x, n), "sum_to_host (loss)", 0)
W(int, gptx_cpu_sum_squares_to_host, (gptx_backend *be, double *host_sum, const float *x, size_t n), (be, host_sum, x, n), "sum_squares_to_host (grad norm)", 0)
W2(int, gptx_cpu_adamw, (gptx_backend *be, float *params, const float *grads, float *m, float *v, const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h), (be, params, grads, m, v, ranges, nranges, h), "adamw", 0)

static char labels[32][64]; static int nl;
static const char *label(const char *pfx, const char *kind) {
    char key[64]; snprintf(key, sizeof key, "%s %s", pfx, kind);
    for (int i = 0; i < nl; i++) if (!strcmp(labels[i], key)) return labels[i];
    strcpy(labels[nl], key); return labels[nl++];
}
#define WMM(suffix) \
int __real_gptx_cpu_matmul_forward##suffix(gptx_backend *be, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC); \
int __wrap_gptx_cpu_matmul_forward##suffix(gptx_backend *be, float *out, const float *inp, const float *w, const float *bias, int N, int C, int OC) { \
    double t0 = tnow(); int r = __real_gptx_cpu_matmul_forward##suffix(be, out, inp, w, bias, N, C, OC); \
    add(label("matmul_forward", mm_kind(N, C, OC)), tnow() - t0, 2.0 * N * C * OC); return r; \
} \
int __real_gptx_cpu_matmul_backward##suffix(gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC); \
int __wrap_gptx_cpu_matmul_backward##suffix(gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, int N, int C, int OC) { \
    double t0 = tnow(); int r = __real_gptx_cpu_matmul_backward##suffix(be, dinp, dw, dbias, dout, inp, w, N, C, OC); \
    add(label("matmul_backward", mm_kind(N, C, OC)), tnow() - t0, (dinp ? 4.0 : 2.0) * N * C * OC); return r; \
}
WMM()
WMM(_bf16)

/* the products with the GELU fused in (bf16 policies; under fp32 they are
 * the separate, wrapped kernels above) */
int __real_gptx_cpu_matmul_gelu_forward_bf16(gptx_backend *be, float *out, float *pre, const float *inp, const float *w, const float *bias, int N, int C, int OC);
int __wrap_gptx_cpu_matmul_gelu_forward_bf16(gptx_backend *be, float *out, float *pre, const float *inp, const float *w, const float *bias, int N, int C, int OC) {
    double t0 = tnow(); int r = __real_gptx_cpu_matmul_gelu_forward_bf16(be, out, pre, inp, w, bias, N, C, OC);
    add(label("matmul_forward", "mlp.c_fc +GELU"), tnow() - t0, 2.0 * N * C * OC); return r;
}
int __real_gptx_cpu_matmul_backward_dgelu_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, const float *pre, int N, int C, int OC);
int __wrap_gptx_cpu_matmul_backward_dgelu_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias, const float *dout, const float *inp, const float *w, const float *pre, int N, int C, int OC) {
    double t0 = tnow(); int r = __real_gptx_cpu_matmul_backward_dgelu_bf16(be, dinp, dw, dbias, dout, inp, w, pre, N, C, OC);
    add(label("matmul_backward", "mlp.c_proj +dGELU"), tnow() - t0, 4.0 * N * C * OC); return r;
}
