/*
 * gptx-bench-attention: the CUDA backend's causal attention alone, forward
 * and backward, on its two kernel sets under the bf16 policy (or tf32,
 * --precision tf32: fp32 activations, tf32 operands):
 *   tensor cores  the default table (backends/cuda/cuda_flash.cu: mma.sync
 *                 m16n8k16 bf16 or m16n8k8 tf32, head size 64 and 128), and
 *                 with --variant each tile configuration asked for
 *                 (GPTX_VARIANT_ATTENTION_TILES through instance_ops; "all":
 *                 every one the backend has), each timed and compared with
 *                 the default bit for bit (they must agree);
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
    const char *json, *precision, *variant;
} att_args;

#define MAX_TILES 64 /* tile configurations probed (GPTX_VARIANT_ATTENTION_TILES 1..) */

/* device buffers of one shape: qkv (B, T, 3C), out and dout (B, T, C),
 * dqkv (B, T, 3C) in bf16; lse (B, NH, T) fp32; the ops' state and work */
typedef struct {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    size_t es; /* bytes of an activation: 2 (bf16) or 4 (tf32: fp32) */
    void *qkv, *out, *dqkv, *dout, *lse, *state, *work;
    void *ev_start, *ev_stop;
} att_env;

/* one kernel set's medians, and its outputs (host bits) for the comparison */
typedef struct {
    char name[32];
    int tiles; /* GPTX_VARIANT_ATTENTION_TILES, 0 for the default and the CUDA cores */
    double fwd_s, bwd_s;
    void *out, *dqkv;
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
    PROG_FLAG_ROW(att_args, precision, "--precision", PROG_FLAG_CHOICE, 0, 0, "bf16|tf32", NULL,
                  "the policy: bf16 activations, or fp32 ones with tf32 operands", 0, 0),
    PROG_FLAG_ROW(att_args, variant, "--variant", PROG_FLAG_STR, 0, 0, NULL, "all|N[,N...]",
                  "also time these tile configurations of the tensor-core kernels\n"
                  "(GPTX_VARIANT_ATTENTION_TILES; docs/cuda.md lists them)",
                  PROG_FLAG_NO_DEFAULT, 0),
};
#undef ROW

/* 0 to go on, 1 after --help/--version, -1 after a message. */
static int parse_args(att_args *a, int argc, char **argv) {
    static const att_args defaults = {8, 12, 1024, 64, 3, 20, NULL, "bf16", NULL};
    static const prog_cli cli = {PROG, "usage: " PROG " [options]\n"
                                       "causal attention (bf16 or tf32), tensor-core and CUDA-core "
                                       "kernels, forward and backward.\n",
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

/* Pseudo-random values in [-1, 1) into dst (n even), as bf16 or fp32: the
 * host bits go through the fp32 upload, which copies 4-byte words unchanged. */
static int upload_act(att_env *e, void *dst, size_t n, uint64_t seed) {
    uint16_t *h = malloc(n * sizeof *h);
    float *f = malloc(n * sizeof *f);
    int rc = h && f ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) {
        test_fill(f, n, seed, -1.0f, 1.0f);
        for (size_t i = 0; i < n; i++) h[i] = gptx_bf16_round_nearest(f[i]);
        rc = e->es == 2 ? e->ops->upload_f32(e->be, dst, (const float *)h, n / 2)
                        : e->ops->upload_f32(e->be, dst, f, n);
    }
    free(h);
    free(f);
    return rc;
}

static void *download_act(att_env *e, const void *src, size_t n) {
    void *h = malloc(n * e->es);
    if (h && e->ops->download_f32(e->be, (float *)h, src, n * e->es / 4) != GPTX_OK) {
        free(h);
        return NULL;
    }
    return h;
}

/* element i of a downloaded buffer, widened */
static double act_at(const att_env *e, const void *buf, size_t i) {
    if (e->es == 2) return gptx_bf16_widen(((const uint16_t *)buf)[i]);
    return ((const float *)buf)[i];
}

static int alloc_one(att_env *e, size_t bytes, void **p) {
    *p = NULL;
    return bytes ? e->ops->alloc(e->be, bytes, p) : GPTX_OK;
}

static int env_alloc(att_env *e, const att_args *a) {
    int C = a->heads * a->head_size;
    gptx_op_buffers ob = {0, 0, 0};
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH, 1, 1, 1, 0};
    if (e->ops->op_buffers) e->ops->op_buffers(e->be, &v, a->batch, a->seq, C, a->heads, &ob);
    size_t lse = (size_t)a->batch * a->heads * a->seq * sizeof(float);
    GPTX_TRY(alloc_one(e, n_qkv(a) * e->es, &e->qkv));
    GPTX_TRY(alloc_one(e, n_out(a) * e->es, &e->out));
    GPTX_TRY(alloc_one(e, n_out(a) * e->es, &e->dout));
    GPTX_TRY(alloc_one(e, n_qkv(a) * e->es, &e->dqkv));
    GPTX_TRY(alloc_one(e, lse, &e->lse));
    GPTX_TRY(alloc_one(e, ob.attention_state, &e->state));
    GPTX_TRY(alloc_one(e, ob.attention_work, &e->work));
    GPTX_TRY(upload_act(e, e->qkv, n_qkv(a), 1));
    GPTX_TRY(upload_act(e, e->dout, n_out(a), 2));
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
    r->out = download_act(e, e->out, n_out(a));
    r->dqkv = download_act(e, e->dqkv, n_qkv(a));
    if (!r->out || !r->dqkv) return GPTX_FAIL(GPTX_ERR_BACKEND, "downloading the outputs failed");
    return GPTX_OK;
}

/* ---- report ------------------------------------------------------------------------- */

static double forward_flops(const att_args *a) {
    return 4.0 * a->batch * a->heads * a->head_size * ((double)a->seq * (a->seq + 1) / 2.0);
}

/* elements that differ, and the largest difference relative to the largest |value| */
static size_t compare_bits(const att_env *e, const void *x, const void *y, size_t n, double *rel) {
    size_t k = 0;
    double worst = 0.0, big = 0.0;
    for (size_t i = 0; i < n; i++) {
        double u = act_at(e, x, i), v = act_at(e, y, i);
        k += memcmp((const char *)x + i * e->es, (const char *)y + i * e->es, e->es) != 0;
        if (fabs(u - v) > worst) worst = fabs(u - v);
        if (fabs(v) > big) big = fabs(v);
    }
    *rel = big > 0 ? worst / big : worst;
    return k;
}

/* elements of out and dqkv in which two sets differ */
static size_t sets_differ(const att_env *e, const att_args *a, const att_result *x,
                          const att_result *y, double rel[2]) {
    return compare_bits(e, x->out, y->out, n_out(a), &rel[0]) +
           compare_bits(e, x->dqkv, y->dqkv, n_qkv(a), &rel[1]);
}

static void print_set(const att_result *r, const att_args *a) {
    double f = forward_flops(a);
    printf("  %-13s forward  %9.3f ms %8.2f TFLOP/s   backward %9.3f ms %8.2f TFLOP/s", r->name,
           r->fwd_s * 1e3, f / r->fwd_s * 1e-12, r->bwd_s * 1e3, 2.0 * f / r->bwd_s * 1e-12);
}

static void json_set(FILE *f, const char *key, const att_result *r, const att_args *a) {
    double fl = forward_flops(a);
    fprintf(f,
            "\"%s\": {\"forward_s\": %.9g, \"forward_tflops\": %.6g, \"backward_s\": %.9g, "
            "\"backward_tflops\": %.6g}",
            key, r->fwd_s, fl / r->fwd_s * 1e-12, r->bwd_s, 2.0 * fl / r->bwd_s * 1e-12);
}

/* everything measured: the default and CUDA-core sets, then the tile
 * configurations asked for with their differences from the default */
typedef struct {
    att_result tc, cc;
    att_result *tiles;
    size_t *tile_diff;
    int ntiles;
} att_run;

static int write_json(const char *path, const att_args *a, const att_run *r, size_t ndiff) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f,
            "{\"bench\": \"attention\", \"backend\": \"%s\", \"precision\": \"%s\", "
            "\"batch\": %d, \"heads\": %d, \"seq\": %d, \"head_size\": %d, \"warmup\": %d, "
            "\"iters\": %d, \"forward_flop\": %.6g, \"backward_flop\": %.6g, ",
            CUDA_TEST_KIND, a->precision, a->batch, a->heads, a->seq, a->head_size, a->warmup,
            a->iters, forward_flops(a), 2.0 * forward_flops(a));
    json_set(f, "tensor_cores", &r->tc, a);
    fprintf(f, ", ");
    json_set(f, "cuda_cores", &r->cc, a);
    fprintf(f, ", \"speedup_forward\": %.6g, \"speedup_backward\": %.6g, \"elements_differ\": %zu, "
               "\"tiles\": [",
            r->cc.fwd_s / r->tc.fwd_s, r->cc.bwd_s / r->tc.bwd_s, ndiff);
    for (int i = 0; i < r->ntiles; i++) {
        fprintf(f, "%s{\"id\": %d, ", i ? ", " : "", r->tiles[i].tiles);
        json_set(f, "time", &r->tiles[i], a);
        fprintf(f, ", \"elements_differ_from_default\": %zu}", r->tile_diff[i]);
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? 0 : 1;
}

/* the tile configurations, each against the default; 1 when one differs */
static int report_tiles(const att_args *a, const att_run *r) {
    int bad = 0;
    for (int i = 0; i < r->ntiles; i++) {
        print_set(&r->tiles[i], a);
        printf("   %s\n", r->tile_diff[i] ? "DIFFERS from the default" : "= default, bitwise");
        if (r->tile_diff[i]) {
            fprintf(stderr, PROG ": tile configuration %d differs from the default in %zu "
                            "elements; every configuration must give the same bits\n",
                    r->tiles[i].tiles, r->tile_diff[i]);
            bad = 1;
        }
    }
    return bad;
}

/* prints every set and the speed-up; 1 when the tensor-core set did not run
 * or a tile configuration gave other bits */
static int report(const att_env *e, const att_args *a, const att_run *r) {
    double rel[2] = {0, 0};
    size_t d = sets_differ(e, a, &r->tc, &r->cc, rel);
    print_set(&r->tc, a);
    printf("\n");
    print_set(&r->cc, a);
    printf("\n");
    printf("  speed-up (tensor cores over CUDA cores): forward %.2fx, backward %.2fx\n",
           r->cc.fwd_s / r->tc.fwd_s, r->cc.bwd_s / r->tc.bwd_s);
    printf("  the two sets differ in %zu of %zu output elements (largest difference, of the "
           "largest value: out %.3g, dqkv %.3g)\n",
           d, n_out(a) + n_qkv(a), rel[0], rel[1]);
    int bad = report_tiles(a, r);
    int rc = a->json ? write_json(a->json, a, r, d) : 0;
    int tensor_sizes = a->head_size == 64 || a->head_size == 128;
    if (d == 0 && tensor_sizes && a->seq > 1) {
        fprintf(stderr, PROG ": the tensor-core kernels gave the CUDA-core kernels' bits: they "
                        "did not run (a fallback), so there is nothing to compare\n");
        return 1;
    }
    if (!tensor_sizes)
        printf("  head size %d: no tensor-core kernels (they take 64 and 128); both sets are "
               "the CUDA-core kernels\n", a->head_size);
    return bad ? 1 : rc;
}

/* ---- tile configurations ----------------------------------------------------------------- */

/* The table of tile configuration k in *ops; GPTX_OK or the backend's refusal */
static int tile_ops(const att_env *e, int k, gptx_backend_ops *ops) {
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH, 1, 1, 1, k};
    *ops = *e->ops;
    return e->ops->instance_ops(e->be, &v, ops);
}

/* --variant as configuration ids into ids (at most MAX_TILES): "all" is
 * every one the backend accepts; -1 after a message */
static int parse_tiles(const att_env *e, const char *spec, int *ids) {
    gptx_backend_ops ops;
    int n = 0;
    if (!spec) return 0;
    if (strcmp(spec, "all") == 0) {
        while (n < MAX_TILES && tile_ops(e, n + 1, &ops) == GPTX_OK) ids[n] = n + 1, n++;
        return n;
    }
    for (const char *p = spec; *p && n < MAX_TILES;) {
        char *end = NULL;
        long k = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || k < 1 || k > MAX_TILES ||
            tile_ops(e, (int)k, &ops) != GPTX_OK) {
            fprintf(stderr, PROG ": --variant '%s': expected all or tile configurations the backend "
                            "has, comma-separated (%s)\n",
                    spec, gptx_last_error());
            return -1;
        }
        ids[n++] = (int)k;
        p = *end ? end + 1 : end;
    }
    return n;
}

/* ---- main ----------------------------------------------------------------------------- */

static void run_free(att_run *r) {
    free(r->tc.out), free(r->tc.dqkv), free(r->cc.out), free(r->cc.dqkv);
    for (int i = 0; i < r->ntiles; i++) free(r->tiles[i].out), free(r->tiles[i].dqkv);
    free(r->tiles);
    free(r->tile_diff);
}

/* times tile configuration ids[i] into r->tiles[i] and compares it with the default */
static int run_tile(att_env *e, const att_args *a, att_run *r, int i, int id) {
    gptx_backend_ops ops;
    double rel[2];
    GPTX_TRY(tile_ops(e, id, &ops));
    att_result *t = &r->tiles[i];
    snprintf(t->name, sizeof t->name, "tiles %d", id);
    t->tiles = id;
    GPTX_TRY(run_set(e, &ops, a, t));
    r->tile_diff[i] = sets_differ(e, a, &r->tc, t, rel);
    r->ntiles = i + 1;
    return GPTX_OK;
}

static int bench(att_env *e, const att_args *a, const gptx_backend_ops *simt, const int *ids,
                 int nids) {
    att_run r;
    memset(&r, 0, sizeof r);
    snprintf(r.tc.name, sizeof r.tc.name, "tensor cores");
    snprintf(r.cc.name, sizeof r.cc.name, "CUDA cores");
    r.tiles = calloc((size_t)nids + 1, sizeof *r.tiles);
    r.tile_diff = calloc((size_t)nids + 1, sizeof *r.tile_diff);
    int rc = r.tiles && r.tile_diff ? env_alloc(e, a) : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) rc = run_set(e, e->ops, a, &r.tc);
    if (rc == GPTX_OK) rc = run_set(e, simt, a, &r.cc);
    for (int i = 0; i < nids && rc == GPTX_OK; i++) rc = run_tile(e, a, &r, i, ids[i]);
    int out = 1;
    if (rc == GPTX_OK) out = report(e, a, &r);
    else fprintf(stderr, PROG ": %s (%s)\n", gptx_last_error(), gptx_status_name(rc));
    run_free(&r);
    env_free(e);
    return out;
}

/* the backend of --precision and its CUDA-core instance; 0, 77 (no device) or 1 */
static int open_backend(att_env *e, const att_args *a, gptx_backend_ops *simt) {
    memset(e, 0, sizeof *e);
    e->ops = cuda_test_ops();
    e->es = strcmp(a->precision, "bf16") == 0 ? 2 : 4;
    int rc = cuda_test_backend(&e->be, a->precision);
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip(PROG);
    if (rc != GPTX_OK) {
        fprintf(stderr, PROG ": CUDA backend (%s): %s\n", a->precision, gptx_last_error());
        return 1;
    }
    *simt = *e->ops;
    gptx_kernel_variants v = {GPTX_ATTENTION_FLASH_SIMT, 1, 1, 1, 0};
    if (!e->ops->event_create || !e->ops->instance_ops ||
        e->ops->instance_ops(e->be, &v, simt) != GPTX_OK) {
        fprintf(stderr, PROG ": the backend lacks events or the CUDA-core variant: %s\n",
                gptx_last_error());
        e->ops->destroy(e->be);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    att_args a;
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    att_env e;
    gptx_backend_ops simt;
    int rc = open_backend(&e, &a, &simt), ids[MAX_TILES];
    if (rc) return rc;
    int nids = parse_tiles(&e, a.variant, ids);
    if (nids < 0) {
        e.ops->destroy(e.be);
        return PROG_EXIT_USAGE;
    }
    printf(PROG " on %s, %s: B %d, H %d, T %d, head size %d (C %d); median of %d calls after "
                "%d warm-up; causal FLOPs: forward %.4g, backward %.4g; tile configurations "
                "timed besides the default: %d\n",
           CUDA_TEST_KIND, a.precision, a.batch, a.heads, a.seq, a.head_size,
           a.heads * a.head_size, a.iters, a.warmup, forward_flops(&a), 2.0 * forward_flops(&a),
           nids);
    int out = bench(&e, &a, &simt, ids, nids);
    e.ops->destroy(e.be);
    return out;
}
