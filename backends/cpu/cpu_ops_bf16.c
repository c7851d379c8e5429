/* The CPU kernels on bf16 storage (the bf16 and bf16_pure policies,
 * docs/precision.md). The residual stream ([res] arguments: the embedding
 * output, the block sums, their gradient) is fp32 under bf16 mixed, as
 * torch.autocast keeps it, and bf16 under bf16_pure (be->res_f32); so are
 * the LayerNorm and embedding weights ([p]: the parameters themselves, the
 * fp32 master under bf16 mixed, which autocast does not round either). Each op
 * widens its bf16 inputs to fp32 (exact), runs
 * the fp32 kernel's own code on them (cpu_ops.c: the same tasks, on a
 * worker's converted rows or a converted copy), and rounds its bf16 outputs
 * once (cpu_bf16.h). So an op's result is exactly the fp32 op's on the
 * widened inputs, rounded; it keeps the fp32 kernels' properties (the same
 * bits for any thread count and instruction-set clone), and test_cpu_bf16
 * checks it bit for bit. Statistics (LayerNorm mean and rstd, log-sum-exp,
 * losses), gradients and fp32 parameters stay fp32. The matrix products go
 * to oneDNN (cpu_dnnl.c). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_round.h"
#include "cpu_kernels.h"
#include "cpu_bf16.h"
#include "cpu_math.h"
#include "errors.h"
#ifdef GPTX_HAVE_DNNL
#include "cpu_dnnl.h"
#endif

typedef uint16_t bf16;

/* Rows (or elements) a worker converts at a time: a few tens of KB per
 * buffer, so the converted copy stays in L1/L2 between conversion and use. */
#define ROW_CHUNK 8
#define EW_CHUNK 4096
#define COL_BLOCK 64 /* as cpu_ops.c's column reductions */

/* ---- whole-buffer conversions --------------------------------------------------- */

typedef struct {
    void *dst;
    const void *src;
    size_t n;
    float value;
    int ntasks;
} convert_args;

static void narrow_task(void *vp, int task) {
    convert_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    gptx_cpu_bf16_narrow((bf16 *)a->dst + lo, (const float *)a->src + lo, hi - lo);
}

static void widen_task(void *vp, int task) {
    convert_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    gptx_cpu_bf16_widen((float *)a->dst + lo, (const bf16 *)a->src + lo, hi - lo);
}

static void fill_task(void *vp, int task) {
    convert_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->n, a->ntasks, task, &lo, &hi);
    bf16 v = gptx_cpu_f32_to_bf16(a->value), *d = a->dst;
    for (size_t i = lo; i < hi; i++) d[i] = v;
}

static void run_convert(gptx_backend *be, gptx_task_fn fn, void *dst, const void *src, size_t n,
                        float value) {
    convert_args a = {dst, src, n, value, gptx_cpu_ntasks(be, (n + 65535) / 65536)};
    gptx_threadpool_run(be->pool, a.ntasks, fn, &a);
}

int gptx_cpu_bf16_buffer_from_f32(gptx_backend *be, void *dst, const float *src, size_t n) {
    run_convert(be, narrow_task, dst, src, n, 0.0f);
    return GPTX_OK;
}

int gptx_cpu_bf16_buffer_to_f32(gptx_backend *be, float *dst, const void *src, size_t n) {
    run_convert(be, widen_task, dst, src, n, 0.0f);
    return GPTX_OK;
}

int gptx_cpu_bf16_buffer_fill(gptx_backend *be, void *dst, float value, size_t n) {
    run_convert(be, fill_task, dst, NULL, n, value);
    return GPTX_OK;
}

int gptx_cpu_act_from_res(gptx_backend *be, float *dst, const float *src, size_t n) {
    if (be->res_f32) return gptx_cpu_bf16_buffer_from_f32(be, dst, src, n);
    memcpy(dst, src, n * (be->act_bf16 ? sizeof(bf16) : sizeof(float)));
    return GPTX_OK;
}

/* n bf16 values widened into scratch; NULL (message set) when out of memory. */
static float *widened(gptx_backend *be, float *scratch, const float *src, size_t n) {
    if (scratch) gptx_cpu_bf16_buffer_to_f32(be, scratch, src, n);
    return scratch;
}

/* ---- embedding ------------------------------------------------------------------ */

typedef struct {
    bf16 *out;
    const int32_t *inp;
    const bf16 *wte, *wpe;
    int T, C;
    size_t rows;
    int ntasks;
} embed_args;

/* bf16_pure: out = wte[token] + wpe[t], one fp32 add of the widened
 * weights, rounded */
GPTX_CPU_HOT static void gptx_cpu_embed_bf16_task(void *vp, int task) {
    embed_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->rows, a->ntasks, task, &lo, &hi);
    for (size_t n = lo; n < hi; n++) {
        const bf16 *te = a->wte + (size_t)a->inp[n] * a->C;
        const bf16 *pe = a->wpe + (n % (size_t)a->T) * a->C;
        bf16 *o = a->out + n * a->C;
        for (int c = 0; c < a->C; c++)
            o[c] = gptx_cpu_f32_to_bf16(gptx_cpu_bf16_to_f32(te[c]) + gptx_cpu_bf16_to_f32(pe[c]));
    }
}

int gptx_cpu_embedding_forward_bf16(gptx_backend *be, float *out, const int32_t *inp,
                                    const float *wte, const float *wpe, int B, int T, int C) {
    /* bf16 mixed: fp32 master weights into the fp32 residual stream, the fp32 op */
    if (be->res_f32) return gptx_cpu_embedding_forward(be, out, inp, wte, wpe, B, T, C);
    embed_args a = {(bf16 *)out, inp, (const bf16 *)wte, (const bf16 *)wpe, T, C,
                    (size_t)B * T, 0};
    a.ntasks = gptx_cpu_ntasks(be, a.rows);
    gptx_threadpool_run(be->pool, a.ntasks, gptx_cpu_embed_bf16_task, &a);
    return GPTX_OK;
}

int gptx_cpu_embedding_backward_bf16(gptx_backend *be, float *dwte, float *dwpe,
                                     const float *dout, const int32_t *inp, int B, int T, int C) {
    if (be->res_f32) return gptx_cpu_embedding_backward(be, dwte, dwpe, dout, inp, B, T, C);
    size_t n = (size_t)B * T * C;
    float *d = widened(be, gptx_cpu_scratch(be, n * sizeof(float)), dout, n);
    if (!d) return GPTX_ERR_NO_MEMORY;
    return gptx_cpu_embedding_backward(be, dwte, dwpe, d, inp, B, T, C);
}

/* ---- layernorm ------------------------------------------------------------------ */

typedef struct {
    bf16 *out;
    float *mean, *rstd;
    const void *inp; /* [res]: fp32 rows (inp_f32) or bf16 */
    int inp_f32;
    const float *w, *b; /* widened */
    int N, C;
    float eps;
    float *rows; /* per worker: 2 * ROW_CHUNK * C */
} ln_bf16_args;

static void ln_fwd_item(void *vp, int worker, size_t item) {
    ln_bf16_args *a = vp;
    size_t r0 = item * ROW_CHUNK, nr = (size_t)a->N - r0 < ROW_CHUNK ? (size_t)a->N - r0 : ROW_CHUNK;
    size_t C = (size_t)a->C;
    float *x = a->rows + (size_t)worker * 2 * ROW_CHUNK * C, *y = x + ROW_CHUNK * C;
    if (a->inp_f32)
        x = (float *)a->inp + r0 * C; /* read in place */
    else
        gptx_cpu_bf16_widen(x, (const bf16 *)a->inp + r0 * C, nr * C);
    gptx_cpu_ln_fwd_args f = {y, a->mean + r0, a->rstd + r0, x, a->w, a->b, (int)nr, a->C,
                              a->eps, 1};
    gptx_cpu_ln_fwd_task(&f, 0);
    gptx_cpu_bf16_narrow(a->out + r0 * C, y, nr * C);
}

int gptx_cpu_layernorm_forward_bf16(gptx_backend *be, float *out, float *mean, float *rstd,
                                    const float *inp, const float *w, const float *b, int N,
                                    int C, float eps) {
    size_t per = 2 * ROW_CHUNK * (size_t)C;
    float *s = gptx_cpu_scratch(be, ((size_t)be->nthreads * per + 2 * (size_t)C) * sizeof(float));
    if (!s) return GPTX_ERR_NO_MEMORY;
    const float *w32 = w, *b32 = b; /* [p]: fp32 unless bf16_pure */
    if (be->param_bf16) {
        float *wb = s + (size_t)be->nthreads * per;
        gptx_cpu_bf16_widen(wb, (const bf16 *)w, (size_t)C);
        gptx_cpu_bf16_widen(wb + C, (const bf16 *)b, (size_t)C);
        w32 = wb, b32 = wb + C;
    }
    ln_bf16_args a = {(bf16 *)out, mean, rstd, inp, be->res_f32, w32, b32, N, C, eps, s};
    gptx_cpu_run_items(be, ((size_t)N + ROW_CHUNK - 1) / ROW_CHUNK, ln_fwd_item, &a);
    return GPTX_OK;
}

/* The backward reads every row for each column block: it runs on widened
 * copies of dout and, for a bf16 residual stream, of inp and dinp (up to
 * 3 N C floats of scratch). */
int gptx_cpu_layernorm_backward_bf16(gptx_backend *be, float *dinp, float *dw, float *db,
                                     const float *dout, const float *inp, const float *w,
                                     const float *mean, const float *rstd, int N, int C) {
    size_t n = (size_t)N * C, copies = be->res_f32 ? 1 : 3;
    float *s = gptx_cpu_scratch(be, (copies * n + (size_t)C) * sizeof(float));
    if (!s) return GPTX_ERR_NO_MEMORY;
    float *d = s;
    const float *x = inp, *w32 = w;
    float *dx = dinp;
    gptx_cpu_bf16_buffer_to_f32(be, d, dout, n);
    if (!be->res_f32) {
        x = s + n, dx = s + 2 * n;
        gptx_cpu_bf16_buffer_to_f32(be, (float *)x, inp, n);
        gptx_cpu_bf16_buffer_to_f32(be, dx, dinp, n);
    }
    if (be->param_bf16) { /* [p] bf16 */
        gptx_cpu_bf16_widen(s + copies * n, (const bf16 *)w, (size_t)C);
        w32 = s + copies * n;
    }
    GPTX_TRY(gptx_cpu_layernorm_backward(be, dx, dw, db, d, x, w32, mean, rstd, N, C));
    return be->res_f32 ? GPTX_OK : gptx_cpu_bf16_buffer_from_f32(be, dinp, dx, n);
}

/* ---- elementwise ---------------------------------------------------------------- */

typedef struct {
    void *out;
    const void *x, *y; /* y may be NULL */
    int f32;           /* out and x are fp32 (a residual-stream sum), y bf16 */
    size_t n;
    gptx_task_fn fp32_task;
    float *bufs; /* per worker: 3 * EW_CHUNK */
} ew_bf16_args;

static void ew_item(void *vp, int worker, size_t item) {
    ew_bf16_args *a = vp;
    size_t lo = item * EW_CHUNK, len = a->n - lo < EW_CHUNK ? a->n - lo : EW_CHUNK;
    float *x = a->bufs + (size_t)worker * 3 * EW_CHUNK, *y = x + EW_CHUNK, *o = y + EW_CHUNK;
    if (a->f32) {
        x = (float *)a->x + lo;
        o = (float *)a->out + lo;
    } else {
        gptx_cpu_bf16_widen(x, (const bf16 *)a->x + lo, len);
    }
    if (a->y) gptx_cpu_bf16_widen(y, (const bf16 *)a->y + lo, len);
    gptx_cpu_ew_args f = {o, x, a->y ? y : NULL, len, 1};
    a->fp32_task(&f, 0);
    if (!a->f32) gptx_cpu_bf16_narrow((bf16 *)a->out + lo, o, len);
}

static int run_ew(gptx_backend *be, gptx_task_fn fp32_task, float *out, const float *x,
                  const float *y, size_t n, int f32) {
    float *bufs = gptx_cpu_scratch(be, (size_t)be->nthreads * 3 * EW_CHUNK * sizeof(float));
    if (!bufs) return GPTX_ERR_NO_MEMORY;
    ew_bf16_args a = {out, x, y, f32, n, fp32_task, bufs};
    gptx_cpu_run_items(be, (n + EW_CHUNK - 1) / EW_CHUNK, ew_item, &a);
    return GPTX_OK;
}

int gptx_cpu_gelu_forward_bf16(gptx_backend *be, float *out, const float *inp, size_t n) {
    return run_ew(be, gptx_cpu_gelu_fwd_task, out, inp, NULL, n, 0);
}

int gptx_cpu_gelu_backward_bf16(gptx_backend *be, float *dinp, const float *inp,
                                const float *dout, size_t n) {
    return run_ew(be, gptx_cpu_gelu_bwd_task, dinp, inp, dout, n, 0);
}

int gptx_cpu_residual_forward_bf16(gptx_backend *be, float *out, const float *a, const float *b,
                                   size_t n) {
    /* [res] out = [res] a + [act] b */
    return run_ew(be, gptx_cpu_residual_task, out, a, b, n, be->res_f32);
}

/* ---- matrix products ------------------------------------------------------------ */

#ifdef GPTX_HAVE_DNNL
/* One row (a token being generated): the fp32 product (OC) by cpu_gemv.c,
 * in scratch, for the caller to round once. */
static int row_product(gptx_backend *be, float **res, const float *inp, const float *w,
                       const float *bias, int C, int OC) {
    float *s = gptx_cpu_scratch(be, ((size_t)OC + (size_t)C) * sizeof(float));
    if (!s) return GPTX_ERR_NO_MEMORY;
    gptx_cpu_bf16_widen(s + OC, (const bf16 *)inp, (size_t)C);
    GPTX_TRY(gptx_cpu_gemv_bf16(be, s, s + OC, (const bf16 *)w, (const bf16 *)bias, C, OC));
    *res = s;
    return GPTX_OK;
}

int gptx_cpu_matmul_forward_bf16(gptx_backend *be, float *out, const float *inp, const float *w,
                                 const float *bias, int N, int C, int OC) {
    if (N == 1) {
        float *s = NULL;
        GPTX_TRY(row_product(be, &s, inp, w, bias, C, OC));
        gptx_cpu_bf16_narrow((bf16 *)out, s, (size_t)OC);
        return GPTX_OK;
    }
    // (N, C) @ (OC, C)^T + bias -> (N, OC)
    gptx_cpu_matmul mm = {.M = N, .N = OC, .K = C,
                          .A = (const bf16 *)inp, .a_row = (size_t)C, .a_col = 1,
                          .B = (const bf16 *)w, .b_row = 1, .b_col = (size_t)C,
                          .C = out, .ldc = (size_t)OC, .c_f32 = 0, .accumulate = 0,
                          .bias = (const bf16 *)bias};
    return gptx_cpu_dnnl_matmul(be, &mm);
}

typedef struct {
    float *dbias;
    const bf16 *dout;
    int N, OC;
    int overwrite; /* dbias = the sums (be->grad_overwrite) */
} dbias_bf16_args;

/* dbias += column sums of dout, in the order of cpu_ops.c's fp32 task */
GPTX_CPU_HOT static void gptx_cpu_dbias_bf16_task(void *vp, int task) {
    dbias_bf16_args *a = vp;
    int c0 = task * COL_BLOCK, c1 = c0 + COL_BLOCK < a->OC ? c0 + COL_BLOCK : a->OC;
    float acc[COL_BLOCK] = {0};
    for (size_t n = 0; n < (size_t)a->N; n++) {
        const bf16 *d = a->dout + n * a->OC;
        for (int c = c0; c < c1; c++) acc[c - c0] += gptx_cpu_bf16_to_f32(d[c]);
    }
    if (a->overwrite)
        for (int c = c0; c < c1; c++) a->dbias[c] = acc[c - c0];
    else
        for (int c = c0; c < c1; c++) a->dbias[c] += acc[c - c0];
}

int gptx_cpu_matmul_backward_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                  const float *dout, const float *inp, const float *w, int N,
                                  int C, int OC) {
    if (dinp) {
        // (N, OC) @ (OC, C) -> (N, C), bf16
        gptx_cpu_matmul mm = {.M = N, .N = C, .K = OC,
                              .A = (const bf16 *)dout, .a_row = (size_t)OC, .a_col = 1,
                              .B = (const bf16 *)w, .b_row = (size_t)C, .b_col = 1,
                              .C = dinp, .ldc = (size_t)C, .c_f32 = 0};
        GPTX_TRY(gptx_cpu_dnnl_matmul(be, &mm));
    }
    // (N, OC)^T @ (N, C) -> (OC, C), accumulated into the fp32 gradient, or
    // stored over it when zero_grad is folded into this first write
    gptx_cpu_matmul mw = {.M = OC, .N = C, .K = N,
                          .A = (const bf16 *)dout, .a_row = 1, .a_col = (size_t)OC,
                          .B = (const bf16 *)inp, .b_row = (size_t)C, .b_col = 1,
                          .C = dw, .ldc = (size_t)C, .c_f32 = 1,
                          .accumulate = !be->grad_overwrite};
    GPTX_TRY(gptx_cpu_dnnl_matmul(be, &mw));
    if (dbias) {
        dbias_bf16_args a = {dbias, (const bf16 *)dout, N, OC, be->grad_overwrite};
        gptx_threadpool_run(be->pool, (OC + COL_BLOCK - 1) / COL_BLOCK, gptx_cpu_dbias_bf16_task,
                            &a);
    }
    return GPTX_OK;
}
/* The GELU as the products' epilogue, on each fp32 tile while it is in cache
 * (cpu_dnnl.h): the same per-element arithmetic as the separate kernels, one
 * rounding of the unrounded product. */
typedef struct {
    bf16 *out, *pre;  /* forward: pre = round(x), out = round(gelu(x)) */
    const bf16 *dpre; /* backward: out = round(x * gelu'(widen(dpre))) */
    size_t ld;        /* row length of out, pre and dpre */
} gelu_epilogue_args;

static void gelu_epilogue(void *vp, int worker, const float *tile, int rows, int cols,
                          size_t m0, size_t n0) {
    (void)worker;
    const gelu_epilogue_args *a = vp;
    float t[GPTX_DNNL_TILE_N], o[GPTX_DNNL_TILE_N];
    for (int r = 0; r < rows; r++) {
        const float *x = tile + (size_t)r * (size_t)cols;
        size_t off = (m0 + (size_t)r) * a->ld + n0;
        if (a->pre) { /* forward: GELU of the unrounded pre-activation */
            gptx_cpu_ew_args f = {o, x, NULL, (size_t)cols, 1};
            gptx_cpu_gelu_fwd_task(&f, 0);
            gptx_cpu_bf16_narrow(a->pre + off, x, (size_t)cols);
        } else { /* backward: gelu'(stored pre) times the unrounded product */
            gptx_cpu_bf16_widen(t, a->dpre + off, (size_t)cols);
            gptx_cpu_ew_args f = {o, t, x, (size_t)cols, 1};
            gptx_cpu_gelu_bwd_task(&f, 0);
        }
        gptx_cpu_bf16_narrow(a->out + off, o, (size_t)cols);
    }
}

static int product_with_gelu(gptx_backend *be, gptx_cpu_matmul mm, bf16 *out, bf16 *pre,
                             const bf16 *dpre) {
    gelu_epilogue_args e = {out, pre, dpre, (size_t)mm.N};
    mm.epilogue = gelu_epilogue;
    mm.epilogue_ctx = &e;
    return gptx_cpu_dnnl_matmul(be, &mm);
}

int gptx_cpu_matmul_gelu_forward_bf16(gptx_backend *be, float *out, float *pre, const float *inp,
                                      const float *w, const float *bias, int N, int C, int OC) {
    if (N == 1) { /* one row: the epilogue on pieces of at most a tile's width */
        float *s = NULL;
        GPTX_TRY(row_product(be, &s, inp, w, bias, C, OC));
        gelu_epilogue_args e = {(bf16 *)out, (bf16 *)pre, NULL, (size_t)OC};
        for (int n0 = 0; n0 < OC; n0 += GPTX_DNNL_TILE_N)
            gelu_epilogue(&e, 0, s + n0, 1, OC - n0 < GPTX_DNNL_TILE_N ? OC - n0 : GPTX_DNNL_TILE_N,
                          0, (size_t)n0);
        return GPTX_OK;
    }
    gptx_cpu_matmul mm = {.M = N, .N = OC, .K = C,
                          .A = (const bf16 *)inp, .a_row = (size_t)C, .a_col = 1,
                          .B = (const bf16 *)w, .b_row = 1, .b_col = (size_t)C,
                          .bias = (const bf16 *)bias};
    return product_with_gelu(be, mm, (bf16 *)out, (bf16 *)pre, NULL);
}

int gptx_cpu_matmul_backward_dgelu_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                        const float *dout, const float *inp, const float *w,
                                        const float *pre, int N, int C, int OC) {
    // dinp (N, C) = ((N, OC) @ (OC, C)) * gelu'(pre), rounded once
    gptx_cpu_matmul mm = {.M = N, .N = C, .K = OC,
                          .A = (const bf16 *)dout, .a_row = (size_t)OC, .a_col = 1,
                          .B = (const bf16 *)w, .b_row = (size_t)C, .b_col = 1};
    GPTX_TRY(product_with_gelu(be, mm, (bf16 *)dinp, NULL, (const bf16 *)pre));
    /* the weight and bias gradients as matmul_backward's (dinp done) */
    return gptx_cpu_matmul_backward_bf16(be, NULL, dw, dbias, dout, inp, w, N, C, OC);
}
#else
static int no_dnnl(void) {
    return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "this build of gptx has no oneDNN (GPTX_DNNL)");
}
int gptx_cpu_matmul_forward_bf16(gptx_backend *be, float *out, const float *inp, const float *w,
                                 const float *bias, int N, int C, int OC) {
    (void)be, (void)out, (void)inp, (void)w, (void)bias, (void)N, (void)C, (void)OC;
    return no_dnnl();
}
int gptx_cpu_matmul_backward_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                  const float *dout, const float *inp, const float *w, int N,
                                  int C, int OC) {
    (void)be, (void)dinp, (void)dw, (void)dbias, (void)dout, (void)inp, (void)w, (void)N;
    (void)C, (void)OC;
    return no_dnnl();
}
int gptx_cpu_matmul_gelu_forward_bf16(gptx_backend *be, float *out, float *pre, const float *inp,
                                      const float *w, const float *bias, int N, int C, int OC) {
    (void)be, (void)out, (void)pre, (void)inp, (void)w, (void)bias, (void)N, (void)C, (void)OC;
    return no_dnnl();
}
int gptx_cpu_matmul_backward_dgelu_bf16(gptx_backend *be, float *dinp, float *dw, float *dbias,
                                        const float *dout, const float *inp, const float *w,
                                        const float *pre, int N, int C, int OC) {
    (void)be, (void)dinp, (void)dw, (void)dbias, (void)dout, (void)inp, (void)w, (void)pre;
    (void)N, (void)C, (void)OC;
    return no_dnnl();
}
#endif

/* ---- softmax cross-entropy ------------------------------------------------------ */

/* What each row does: 0 forward (mask, statistics, loss), 1 backward, 2 both. */
typedef struct {
    gptx_cpu_ce_args ce; /* ce.logits = NULL: rows come from `rows` */
    bf16 *logits;
    int mode;
    float *rows; /* per worker: Vp floats */
} ce_bf16_args;

static const bf16 BF16_NEG_INF = 0xff80u;

static void ce_item(void *vp, int worker, size_t n) {
    ce_bf16_args *a = vp;
    size_t Vp = (size_t)a->ce.Vp;
    bf16 *row16 = a->logits + n * Vp;
    float *row = a->rows + (size_t)worker * Vp;
    gptx_cpu_bf16_widen(row, row16, Vp);
    if (a->mode == 0) { /* the logits stay; only the masked columns change */
        gptx_cpu_ce_row_forward(&a->ce, n, row, 0);
        if (a->ce.mask)
            for (size_t j = (size_t)a->ce.V; j < Vp; j++) row16[j] = BF16_NEG_INF;
        return;
    }
    if (a->mode == 2) gptx_cpu_ce_row_forward(&a->ce, n, row, 1);
    gptx_cpu_ce_row_gradient(&a->ce, n, row, a->mode == 2);
    gptx_cpu_bf16_narrow(row16, row, Vp);
}

static int run_ce(gptx_backend *be, float *losses, float *lse, float *logits,
                  const int32_t *targets, int N, int V, int Vp, int mask, float dloss, int mode) {
    float *rows = gptx_cpu_scratch(be, (size_t)be->nthreads * (size_t)Vp * sizeof(float));
    if (!rows) return GPTX_ERR_NO_MEMORY;
    ce_bf16_args a = {{losses, NULL, lse, targets, N, V, Vp, mask, dloss, 1}, (bf16 *)logits,
                      mode, rows};
    gptx_cpu_run_items(be, (size_t)N, ce_item, &a);
    return GPTX_OK;
}

int gptx_cpu_crossentropy_forward_bf16(gptx_backend *be, float *losses, float *lse,
                                       float *logits, const int32_t *targets, int N, int V,
                                       int Vp, int mask_padded) {
    return run_ce(be, losses, lse, logits, targets, N, V, Vp, mask_padded, 0.0f, 0);
}

int gptx_cpu_crossentropy_backward_bf16(gptx_backend *be, float *logits, const float *lse,
                                        const int32_t *targets, int N, int V, int Vp,
                                        float dloss) {
    return run_ce(be, NULL, (float *)lse, logits, targets, N, V, Vp, 0, dloss, 1);
}

int gptx_cpu_crossentropy_fused_bf16(gptx_backend *be, float *losses, float *lse, float *logits,
                                     const int32_t *targets, int N, int V, int Vp,
                                     int mask_padded, float dloss) {
    return run_ce(be, losses, lse, logits, targets, N, V, Vp, mask_padded, dloss, 2);
}

/* ---- AdamW on bf16 parameters and moments (BF16_PURE) --------------------------- */

typedef struct {
    bf16 *p, *m, *v;
    const float *g;
    const gptx_param_range *ranges;
    int nranges;
    const gptx_adamw_hyper *h;
    int stochastic;
    size_t start, total;
    int ntasks;
} adamw_bf16_args;

/* The fp32 kernel's arithmetic on widened p, m, v (cpu_ops.c, and the CUDA
 * backend's k_adamw_bf16), each result rounded once: to nearest even, or
 * stochastically with words 0, 1, 2 of the Philox block (rounding_seed,
 * step, index) for p, m and v, as on CUDA. */
GPTX_CPU_HOT static void gptx_cpu_adamw_bf16_task(void *vp, int task) {
    adamw_bf16_args *a = vp;
    size_t lo, hi;
    gptx_cpu_split(a->total, a->ntasks, task, &lo, &hi);
    const gptx_adamw_hyper *h = a->h;
    gptx_cpu_adamw_slice sl;
    for (int r = 0; r < a->nranges; r++) {
        if (!gptx_cpu_adamw_slice_of(&a->ranges[r], h, a->start + lo, a->start + hi, &sl))
            continue;
        size_t s0 = sl.s0, s1 = sl.s1;
        float decay = sl.decay, step = sl.step, rsbc2 = sl.rsbc2;
/* the update of element i in fp32, from the widened p, m, v */
#define ADAMW_BF16_UPDATE(i)                                                                    \
    float g = a->g[i] * h->grad_scale;                                                         \
    float m = h->beta1 * gptx_cpu_bf16_to_f32(a->m[i]) + (1.0f - h->beta1) * g;                \
    float v = h->beta2 * gptx_cpu_bf16_to_f32(a->v[i]) + (1.0f - h->beta2) * g * g;            \
    float p = gptx_cpu_bf16_to_f32(a->p[i]) * decay - step * m / (sqrtf(v) * rsbc2 + h->eps)
        if (a->stochastic) {
            for (size_t i = s0; i < s1; i++) {
                ADAMW_BF16_UPDATE(i);
                gptx_philox4 rnd = gptx_philox_block(h->rounding_seed, (uint64_t)h->step, i);
                a->p[i] = gptx_bf16_round_stochastic(p, rnd.v[0]);
                a->m[i] = gptx_bf16_round_stochastic(m, rnd.v[1]);
                a->v[i] = gptx_bf16_round_stochastic(v, rnd.v[2]);
            }
        } else { /* a loop of its own, so that it vectorizes */
            for (size_t i = s0; i < s1; i++) {
                ADAMW_BF16_UPDATE(i);
                a->p[i] = gptx_cpu_f32_to_bf16(p);
                a->m[i] = gptx_cpu_f32_to_bf16(m);
                a->v[i] = gptx_cpu_f32_to_bf16(v);
            }
        }
#undef ADAMW_BF16_UPDATE
    }
}

int gptx_cpu_adamw_bf16(gptx_backend *be, float *params, const float *grads, float *m, float *v,
                        const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h) {
    size_t start, total = gptx_cpu_adamw_span(ranges, nranges, &start);
    if (total == 0) return GPTX_OK;
    adamw_bf16_args a = {(bf16 *)params, (bf16 *)m, (bf16 *)v, grads, ranges, nranges, h,
                         be->stochastic_rounding, start, total,
                         gptx_cpu_ntasks(be, (total + 16383) / 16384)};
    gptx_threadpool_run(be->pool, a.ntasks, gptx_cpu_adamw_bf16_task, &a);
    return GPTX_OK;
}
