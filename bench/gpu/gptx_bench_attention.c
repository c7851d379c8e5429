/*
 * gptx-bench-attention: the CUDA backend's causal attention alone, forward
 * and backward, on its two kernel sets under the bf16 policy:
 *   tensor cores  the default table (backends/cuda/cuda_flash.cu: mma.sync
 *                 m16n8k16, head size 64 and 128);
 *   CUDA cores    the table of the GPTX_ATTENTION_FLASH_SIMT variant
 *                 (instance_ops), the fp32 kernels of cuda_attention.cu.
 * It calls the backend table directly (no model, no context), as the GPU
 * tests do (tests/gpu/cuda_test_util.h): the cuda module's table in a real
 * build, the CPU emulation's with GPTX_TEST_CUDA_EMU (a logic check only:
 * emulated times mean nothing).
 *
 * Each call is timed on the device with the backend's event entries
 * (event_record before and after it, event_elapsed), after --warmup untimed
 * calls; the figure is the median of --iters. The backward is timed after
 * one forward (it reads out and lse) and overwrites dqkv each time, so the
 * calls are independent. FLOPs counted are the useful ones of causal
 * attention: forward 4 B H hs T(T+1)/2 (QK^T and PV over the keys s <= t),
 * backward twice that (dV, dP, dQ, dK; the recomputed QK^T not counted), the
 * convention of FlashAttention-2's benchmarks.
 *
 * The two sets' outputs are compared as a sanity check: at head size 64 and
 * 128 they must differ somewhere (else the tensor-core kernels fell back to
 * the CUDA-core ones, which would make the comparison meaningless: exit 1).
 *
 * Exit status: 0, 1 on an error, 2 on a usage error, 77 without a device.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16_round.h"
#include "cuda_test_util.h"
#include "errors.h"

#include "../bench_common.h"
#include "prog_flags.h"
#include "table_timing.h"

#define PROG "gptx-bench-attention"

typedef struct {
    int batch, heads, seq, head_size, warmup, iters;
    const char *json;
} att_args;

/* device buffers of one shape: qkv (B, T, 3C), out and dout (B, T, C),
 * dqkv (B, T, 3C) in bf16; lse (B, NH, T) fp32; the ops' state and work */
typedef struct {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    void *qkv, *out, *dout, *dqkv, *lse, *state, *work;
    void *ev_start, *ev_stop;
} att_env;

/* one kernel set's medians, and its outputs (host bf16 bits) for the comparison */
typedef struct {
    const char *name;
    double fwd_s, bwd_s;
    uint16_t *out, *dqkv;
} att_result;

#define ROW(field, name, lo, hi, arg, help) \
    PROG_FLAG_ROW(att_args, field, name, PROG_FLAG_INT, lo, hi, NULL, arg, help, 0, 0)
static const prog_flag flag_rows[] = {
    ROW(batch, "--batch", 1, 4096, "B", "rows"),
    ROW(heads, "--heads", 1, 256, "H", "heads"),
    ROW(seq, "--seq", 1, 65536, "T", "positions"),
    ROW(head_size, "--head-size", 2, 128, "HS", "head size, even (GPT-2's is 64)"),
    ROW(warmup, "--warmup", 0, 100000, NULL, "untimed calls"),
    ROW(iters, "--iters", 1, 100000, NULL, "timed calls (their median)"),
    PROG_FLAG_ROW(att_args, json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE",
                  "also write the figures to FILE", 0, 0),
};
#undef ROW

/* 0 to go on, 1 after --help/--version, -1 after a message. */
static int parse_args(att_args *a, int argc, char **argv) {
    static const att_args defaults = {8, 12, 1024, 64, 3, 20, NULL};
    static const prog_cli cli = {PROG, "usage: " PROG " [options]\n"
                                       "bf16 causal attention, tensor-core and CUDA-core kernels, "
                                       "forward and backward.\n",
                                 flag_rows, sizeof flag_rows / sizeof flag_rows[0], NULL};
    *a = defaults;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    if (rc) return rc;
    /* even: the buffers move as fp32 words (see upload_bf16) */
    if (a->head_size % 2) {
        char v[16];
        snprintf(v, sizeof v, "%d", a->head_size);
        return prog_usage_error(PROG, "--head-size", v, "must be even");
    }
    return 0;
}

/* ---- buffers ----------------------------------------------------------------------- */

static size_t n_qkv(const att_args *a) {
    return (size_t)a->batch * a->seq * 3 * a->heads * a->head_size;
}
static size_t n_out(const att_args *a) {
    return (size_t)a->batch * a->seq * a->heads * a->head_size;
}

/* Pseudo-random bf16 values in [-1, 1) into dst (n even): the host bits go
 * through the fp32 upload, which copies 4-byte words unchanged. */
static int upload_bf16(att_env *e, void *dst, size_t n, uint64_t seed) {
    uint16_t *h = malloc(n * sizeof *h);
    float *f = malloc(n * sizeof *f);
    int rc = h && f ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) {
        test_fill(f, n, seed, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) h[i] = gptx_bf16_round_nearest(f[i]);
        rc = e->ops->upload_f32(e->be, dst, (const float *)h, n / 2);
    }
    free(h);
    free(f);
    return rc;
}

static uint16_t *download_bf16(att_env *e, const void *src, size_t n) {
    uint16_t *h = malloc(n * sizeof *h);
    if (h && e->ops->download_f32(e->be, (float *)h, src, n / 2) != GPTX_OK) {
        free(h);
        return NULL;
    }
    return h;
}

static int alloc_one(att_env *e, size_t bytes, void **p) {
    *p = NULL;
    return bytes ? e->ops->alloc(e->be, bytes, p) : GPTX_OK;
}

static int env_alloc(att_env *e, const att_args *a) {
    int C = a->heads * a->head_size;
    gptx_op_buffers ob = {0, 0, 0};
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH, 1, 1, 1};
    if (e->ops->op_buffers) e->ops->op_buffers(e->be, &v, a->batch, a->seq, C, a->heads, &ob);
    size_t lse = (size_t)a->batch * a->heads * a->seq * sizeof(float);
    GPTX_TRY(alloc_one(e, n_qkv(a) * 2, &e->qkv));
    GPTX_TRY(alloc_one(e, n_out(a) * 2, &e->out));
    GPTX_TRY(alloc_one(e, n_out(a) * 2, &e->dout));
    GPTX_TRY(alloc_one(e, n_qkv(a) * 2, &e->dqkv));
    GPTX_TRY(alloc_one(e, lse, &e->lse));
    GPTX_TRY(alloc_one(e, ob.attention_state, &e->state));
    GPTX_TRY(alloc_one(e, ob.attention_work, &e->work));
    GPTX_TRY(upload_bf16(e, e->qkv, n_qkv(a), 1));
    GPTX_TRY(upload_bf16(e, e->dout, n_out(a), 2));
    GPTX_TRY(e->ops->event_create(e->be, &e->ev_start));
    return e->ops->event_create(e->be, &e->ev_stop);
}

static void env_free(att_env *e) {
    void *bufs[] = {e->qkv, e->out, e->dout, e->dqkv, e->lse, e->state, e->work};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) e->ops->free(e->be, bufs[i]);
    if (e->ev_start) e->ops->event_destroy(e->be, e->ev_start);
    if (e->ev_stop) e->ops->event_destroy(e->be, e->ev_stop);
}

/* ---- timing ------------------------------------------------------------------------- */

static int call_forward(att_env *e, const gptx_backend_ops *ops, const att_args *a) {
    return ops->attention_forward(e->be, e->out, e->lse, e->state, e->work, e->qkv, a->batch,
                                  a->seq, a->heads * a->head_size, a->heads);
}

static int call_backward(att_env *e, const gptx_backend_ops *ops, const att_args *a) {
    return ops->attention_backward(e->be, e->dqkv, e->dout, e->qkv, e->out, e->lse, e->state,
                                   e->work, a->batch, a->seq, a->heads * a->head_size, a->heads);
}

typedef int (*att_call)(att_env *, const gptx_backend_ops *, const att_args *);

/* one call of a kernel set, as table_time_median calls it */
typedef struct {
    att_env *e;
    const gptx_backend_ops *ops;
    const att_args *a;
    att_call call;
} att_timed;

static int timed_call(void *arg) {
    att_timed *t = arg;
    return t->call(t->e, t->ops, t->a);
}

/* --warmup untimed calls, then the median of --iters calls, each between
 * two events on the compute stream (table_timing.h) */
static int time_calls(att_env *e, const gptx_backend_ops *ops, const att_args *a, att_call call,
                      double *median_s) {
    att_timed t = {e, ops, a, call};
    return table_time_median(e->ops, e->be, e->ev_start, e->ev_stop, a->warmup, a->iters, NULL,
                             timed_call, &t, median_s);
}

/* forward timed, then backward timed (after the forward it reads), then the
 * outputs downloaded */
static int run_set(att_env *e, const gptx_backend_ops *ops, const att_args *a, att_result *r) {
    GPTX_TRY(time_calls(e, ops, a, call_forward, &r->fwd_s));
    GPTX_TRY(call_forward(e, ops, a));
    GPTX_TRY(time_calls(e, ops, a, call_backward, &r->bwd_s));
    GPTX_TRY(e->ops->synchronize(e->be));
    r->out = download_bf16(e, e->out, n_out(a));
    r->dqkv = download_bf16(e, e->dqkv, n_qkv(a));
    if (!r->out || !r->dqkv) return GPTX_FAIL(GPTX_ERR_BACKEND, "downloading the outputs failed");
    return GPTX_OK;
}

/* ---- report ------------------------------------------------------------------------- */

static double forward_flops(const att_args *a) {
    return 4.0 * a->batch * a->heads * a->head_size * ((double)a->seq * (a->seq + 1) / 2.0);
}

/* elements that differ, and the largest difference relative to the largest |value| */
static size_t compare_bits(const uint16_t *x, const uint16_t *y, size_t n, double *rel) {
    size_t k = 0;
    double worst = 0.0, big = 0.0;
    for (size_t i = 0; i < n; i++) {
        double u = gptx_bf16_widen(x[i]), v = gptx_bf16_widen(y[i]);
        k += x[i] != y[i];
        if (fabs(u - v) > worst) worst = fabs(u - v);
        if (fabs(v) > big) big = fabs(v);
    }
    *rel = big > 0 ? worst / big : worst;
    return k;
}

static void print_set(const att_result *r, const att_args *a) {
    double f = forward_flops(a);
    printf("  %-13s forward  %9.3f ms %8.2f TFLOP/s   backward %9.3f ms %8.2f TFLOP/s\n", r->name,
           r->fwd_s * 1e3, f / r->fwd_s * 1e-12, r->bwd_s * 1e3, 2.0 * f / r->bwd_s * 1e-12);
}

static void json_set(FILE *f, const char *key, const att_result *r, const att_args *a) {
    double fl = forward_flops(a);
    fprintf(f,
            "\"%s\": {\"forward_s\": %.9g, \"forward_tflops\": %.6g, \"backward_s\": %.9g, "
            "\"backward_tflops\": %.6g}",
            key, r->fwd_s, fl / r->fwd_s * 1e-12, r->bwd_s, 2.0 * fl / r->bwd_s * 1e-12);
}

static int write_json(const char *path, const att_args *a, const att_result *tc,
                      const att_result *cc, size_t ndiff) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f,
            "{\"bench\": \"attention\", \"backend\": \"%s\", \"precision\": \"bf16\", "
            "\"batch\": %d, \"heads\": %d, \"seq\": %d, \"head_size\": %d, \"warmup\": %d, "
            "\"iters\": %d, \"forward_flop\": %.6g, \"backward_flop\": %.6g, ",
            CUDA_TEST_KIND, a->batch, a->heads, a->seq, a->head_size, a->warmup, a->iters,
            forward_flops(a), 2.0 * forward_flops(a));
    json_set(f, "tensor_cores", tc, a);
    fprintf(f, ", ");
    json_set(f, "cuda_cores", cc, a);
    fprintf(f, ", \"speedup_forward\": %.6g, \"speedup_backward\": %.6g, \"elements_differ\": %zu}\n",
            cc->fwd_s / tc->fwd_s, cc->bwd_s / tc->bwd_s, ndiff);
    return fclose(f) == 0 ? 0 : 1;
}

/* prints both sets and the speed-up; 1 when the tensor-core set did not run */
static int report(const att_args *a, const att_result *tc, const att_result *cc) {
    double rel_o = 0, rel_g = 0;
    size_t d = compare_bits(tc->out, cc->out, n_out(a), &rel_o) +
               compare_bits(tc->dqkv, cc->dqkv, n_qkv(a), &rel_g);
    print_set(tc, a);
    print_set(cc, a);
    printf("  speed-up (tensor cores over CUDA cores): forward %.2fx, backward %.2fx\n",
           cc->fwd_s / tc->fwd_s, cc->bwd_s / tc->bwd_s);
    printf("  the two sets differ in %zu of %zu output elements (largest difference, of the "
           "largest value: out %.3g, dqkv %.3g)\n",
           d, n_out(a) + n_qkv(a), rel_o, rel_g);
    int rc = a->json ? write_json(a->json, a, tc, cc, d) : 0;
    int tensor_sizes = a->head_size == 64 || a->head_size == 128;
    if (d == 0 && tensor_sizes && a->seq > 1) {
        fprintf(stderr, PROG ": the tensor-core kernels gave the CUDA-core kernels' bits: they "
                        "did not run (a fallback), so there is nothing to compare\n");
        return 1;
    }
    if (!tensor_sizes)
        printf("  head size %d: no tensor-core kernels (they take 64 and 128); both sets are "
               "the CUDA-core kernels\n", a->head_size);
    return rc;
}

/* ---- main ----------------------------------------------------------------------------- */

static int bench(att_env *e, const att_args *a, const gptx_backend_ops *simt) {
    att_result tc = {"tensor cores", 0, 0, NULL, NULL}, cc = {"CUDA cores", 0, 0, NULL, NULL};
    int rc = env_alloc(e, a);
    if (rc == GPTX_OK) rc = run_set(e, e->ops, a, &tc);
    if (rc == GPTX_OK) rc = run_set(e, simt, a, &cc);
    int out = 1;
    if (rc == GPTX_OK) out = report(a, &tc, &cc);
    else fprintf(stderr, PROG ": %s (%s)\n", gptx_last_error(), gptx_status_name(rc));
    free(tc.out), free(tc.dqkv), free(cc.out), free(cc.dqkv);
    env_free(e);
    return out;
}

int main(int argc, char **argv) {
    att_args a;
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    att_env e;
    memset(&e, 0, sizeof e);
    e.ops = cuda_test_ops();
    int rc = cuda_test_backend(&e.be, "bf16");
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip(PROG);
    if (rc != GPTX_OK) {
        fprintf(stderr, PROG ": CUDA backend (bf16): %s\n", gptx_last_error());
        return 1;
    }
    gptx_backend_ops simt = *e.ops;
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH_SIMT, 1, 1, 1};
    if (!e.ops->event_create || !e.ops->instance_ops ||
        e.ops->instance_ops(e.be, &v, &simt) != GPTX_OK) {
        fprintf(stderr, PROG ": the backend lacks events or the CUDA-core variant: %s\n",
                gptx_last_error());
        e.ops->destroy(e.be);
        return 1;
    }
    printf(PROG " on %s, bf16: B %d, H %d, T %d, head size %d (C %d); median of %d calls after "
                "%d warm-up; causal FLOPs: forward %.4g, backward %.4g\n",
           CUDA_TEST_KIND, a.batch, a.heads, a.seq, a.head_size, a.heads * a.head_size, a.iters,
           a.warmup, forward_flops(&a), 2.0 * forward_flops(&a));
    int out = bench(&e, &a, &simt);
    e.ops->destroy(e.be);
    return out;
}
