/*
 * gptx-bench-bandwidth: every memory-bound op of the CUDA backend, alone, at
 * GPT-2 124M's shapes (C 768, T 1024, V 50257 padded to 50304, 12 layers)
 * for each batch of --batches (default 8 and 64), against the device's copy
 * ceiling measured in the same run: how far each op is from moving its
 * bytes at the speed of a device-to-device copy (issue 33: within 1.5x).
 *
 * It calls the backend table directly, as the GPU tests and
 * gptx-bench-attention do (tests/gpu/cuda_test_util.h): the cuda module's
 * table, or the CPU emulation's with GPTX_TEST_CUDA_EMU (a logic check at
 * tiny sizes: emulated times mean nothing).
 *
 * Bytes are the op's minimal traffic: every input read once and every
 * output written once, at its storage class's size (backend.h: activations
 * act_bytes, the residual stream res_bytes, parameters and moments
 * param_bytes, the weight copy wcopy_bytes, gradients and statistics 4);
 * an output the op accumulates into (+=) is read and written; a gather
 * (embedding rows) counts each distinct row once. Launch-sized vectors
 * (LayerNorm weights, biases) are counted too, however small.
 *
 * Time: the median of --iters calls after --warmup, each between two backend
 * events on the compute stream; before each timed call --flush-mib MiB are
 * filled (outside the events), so no op reads its inputs from the L2 that its
 * previous call left there. The copy ceiling: cudaMemcpyAsync device to
 * device of --copy-mib MiB on the same stream, timed the same way, its bytes
 * counted read plus written. floor = bytes / ceiling; ratio = time / floor.
 * The bias gradient (the column sums of dout inside matmul_backward; the
 * table has no entry of its own) is timed as matmul_backward with dbias
 * minus matmul_backward without it (dinp NULL): a difference of medians.
 * embedding_backward and sum_squares_to_host include the host work between
 * their launches (an id copy and counting sort; the sum's download).
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

#ifndef GPTX_TEST_CUDA_EMU
#include <cuda_runtime_api.h>
#endif

#define PROG "gptx-bench-bandwidth"
#define MAX_BATCHES 8
#define GOAL_RATIO 1.5 /* issue 33: every memory-bound op within 1.5x of its floor */

typedef struct {
    const char *precision, *batches, *json;
    int seq, width, layers, vocab, padded_vocab, warmup, iters, copy_mib, flush_mib;
} bw_args;

#define ROW(field, name, lo, hi, arg, help) \
    PROG_FLAG_ROW(bw_args, field, name, PROG_FLAG_INT, lo, hi, NULL, arg, help, 0, 0)
static const prog_flag flag_rows[] = {
    PROG_FLAG_ROW(bw_args, precision, "--precision", PROG_FLAG_CHOICE, 0, 0,
                  "fp32|tf32|bf16|bf16_pure", NULL, "the backend's precision policy", 0, 0),
    PROG_FLAG_ROW(bw_args, batches, "--batches", PROG_FLAG_STR, 0, 0, NULL, "B,B,...",
                  "rows of T per step, each timed in turn", 0, 0),
    ROW(seq, "--seq", 1, 65536, "T", "positions"),
    ROW(width, "--width", 8, 65536, "C", "width, a multiple of 8"),
    ROW(layers, "--layers", 1, 1000, "L", "layers (the parameter count AdamW runs over)"),
    ROW(vocab, "--vocab", 2, 1000000, "V", "vocabulary"),
    ROW(padded_vocab, "--padded-vocab", 2, 1000000, "Vp", "logit columns (at least V, even)"),
    ROW(warmup, "--warmup", 0, 100000, NULL, "untimed calls per op"),
    ROW(iters, "--iters", 1, 100000, NULL, "timed calls per op (their median)"),
    ROW(copy_mib, "--copy-mib", 1, 65536, "MiB", "the ceiling's device-to-device copy"),
    ROW(flush_mib, "--flush-mib", 0, 65536, "MiB", "filled before each timed call (0: none)"),
    PROG_FLAG_ROW(bw_args, json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE",
                  "also write the figures to FILE", 0, 0),
};
#undef ROW

/* the batches of --batches, ascending order not required */
typedef struct {
    int n, b[MAX_BATCHES], max;
} bw_batches;

static int parse_batches(const char *s, bw_batches *out) {
    out->n = 0;
    out->max = 0;
    const char *p = s;
    while (*p && out->n < MAX_BATCHES) {
        char *end = NULL;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > 4096 || (*end && *end != ',')) break;
        out->b[out->n++] = (int)v;
        if (v > out->max) out->max = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*p || out->n == 0)
        return prog_usage_error(PROG, "--batches", s,
                                "must be up to 8 comma-separated batches in 1..4096");
    return 0;
}

/* 0 to go on, 1 after --help/--version, -1 after a message. */
static int parse_args(bw_args *a, bw_batches *bs, int argc, char **argv) {
    static const bw_args defaults = {"bf16", "8,64", NULL, 1024, 768, 12, 50257, 50304,
                                     3, 20, 1024, 256};
    static const prog_cli cli = {PROG, "usage: " PROG " [options]\n"
                                       "The CUDA backend's memory-bound ops alone, against the "
                                       "device-to-device copy ceiling.\n",
                                 flag_rows, sizeof flag_rows / sizeof flag_rows[0], NULL};
    *a = defaults;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    if (rc) return rc;
    char v[32];
    if (a->width % 8) {
        snprintf(v, sizeof v, "%d", a->width);
        return prog_usage_error(PROG, "--width", v, "must be a multiple of 8");
    }
    if (a->padded_vocab < a->vocab || a->padded_vocab % 2) {
        snprintf(v, sizeof v, "%d", a->padded_vocab);
        return prog_usage_error(PROG, "--padded-vocab", v, "must be even and at least --vocab");
    }
    return parse_batches(a->batches, bs);
}

/* ---- the device buffers ----------------------------------------------------------- */

/* Buffers for the largest batch (smaller ones use their leading rows), and
 * the bytes per element of each storage class. */
typedef struct {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    size_t act, res, par, wcp; /* bytes per element: activations, residual, [p], [w] */
    int C, T, V, Vp;
    size_t P; /* parameters AdamW runs over (GPT-2's layout at these shapes) */
    void *res_a, *res_b, *res_c, *act_a, *act_b, *act_c, *mean, *rstd, *w, *bias, *dw, *db;
    void *wmat, *logits, *targets, *ids, *losses, *lse, *params, *grads, *m, *v, *wcopy;
    void *wte, *wpe, *dwte, *dwpe, *copy_src, *copy_dst, *flush, *ev0, *ev1;
    size_t copy_bytes, flush_n;
} bw_env;

static size_t gpt2_parameters(const bw_args *a) {
    size_t C = (size_t)a->width;
    size_t block = 12 * C * C + 13 * C; /* qkv, proj, fc, proj with biases; two LayerNorms */
    return (size_t)a->padded_vocab * C + (size_t)a->seq * C + (size_t)a->layers * block + 2 * C;
}

static int alloc(bw_env *e, size_t bytes, void **p) {
    *p = NULL;
    return e->ops->alloc(e->be, bytes ? bytes : 64, p);
}

/* Pseudo-random values in [lo, hi) into n elements of elem bytes (4: fp32,
 * 2: bf16 bits, two per uploaded word: n even), through a host block reused for
 * every 1 Mi elements: the data is never zeros (METHOD: zeros can run
 * faster than real data). */
#define UPLOAD_BLOCK ((size_t)1 << 20)
static int upload(bw_env *e, void *dst, size_t n, size_t elem, float lo, float hi, uint64_t seed) {
    float *f = malloc(UPLOAD_BLOCK * sizeof *f);
    uint16_t *h = malloc(UPLOAD_BLOCK * sizeof *h);
    int rc = f && h ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) test_fill(f, UPLOAD_BLOCK, seed, lo, hi);
    for (size_t i = 0; i < UPLOAD_BLOCK && rc == GPTX_OK; i++) h[i] = gptx_bf16_round_nearest(f[i]);
    for (size_t off = 0; off < n && rc == GPTX_OK; off += UPLOAD_BLOCK) {
        size_t k = n - off < UPLOAD_BLOCK ? n - off : UPLOAD_BLOCK;
        char *d = (char *)dst + off * elem;
        if (elem == 4) rc = e->ops->upload_f32(e->be, (float *)d, f, k);
        else rc = e->ops->upload_f32(e->be, (float *)d, (const float *)h, (k + 1) / 2);
    }
    free(f);
    free(h);
    return rc;
}

/* [p] buffers through upload_param (bf16 under the pure policy) when there is one */
static int upload_param(bw_env *e, void *dst, size_t n, float lo, float hi, uint64_t seed) {
    if (!e->ops->upload_param) return upload(e, dst, n, 4, lo, hi, seed);
    float *f = malloc(UPLOAD_BLOCK * sizeof *f);
    int rc = f ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    if (rc == GPTX_OK) test_fill(f, UPLOAD_BLOCK, seed, lo, hi);
    for (size_t off = 0; off < n && rc == GPTX_OK; off += UPLOAD_BLOCK) {
        size_t k = n - off < UPLOAD_BLOCK ? n - off : UPLOAD_BLOCK;
        rc = e->ops->upload_param(e->be, (float *)((char *)dst + off * e->par), f, k);
    }
    free(f);
    return rc;
}

/* token ids uniform in [0, V): the model benchmarks' kind of batch */
static int upload_ids(bw_env *e, void *dst, size_t n, uint64_t seed) {
    int32_t *h = malloc(n * sizeof *h);
    if (!h) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(test_uniform(&s, 0.0f, 1.0f) * (float)e->V) % e->V;
    int rc = e->ops->upload_i32(e->be, (int32_t *)dst, h, n);
    free(h);
    return rc;
}

static int env_alloc_rows(bw_env *e, size_t N) {
    size_t C = (size_t)e->C, NC = N * C;
    GPTX_TRY(alloc(e, NC * e->res, &e->res_a));
    GPTX_TRY(alloc(e, NC * e->res, &e->res_b));
    GPTX_TRY(alloc(e, NC * e->res, &e->res_c));
    GPTX_TRY(alloc(e, 4 * NC * e->act, &e->act_a));
    GPTX_TRY(alloc(e, 4 * NC * e->act, &e->act_b));
    GPTX_TRY(alloc(e, 4 * NC * e->act, &e->act_c));
    GPTX_TRY(alloc(e, N * 4, &e->mean));
    GPTX_TRY(alloc(e, N * 4, &e->rstd));
    GPTX_TRY(alloc(e, N * (size_t)e->Vp * e->act, &e->logits));
    GPTX_TRY(alloc(e, N * 4, &e->targets));
    GPTX_TRY(alloc(e, N * 4, &e->ids));
    GPTX_TRY(alloc(e, N * 4, &e->losses));
    return alloc(e, 3 * N * 4, &e->lse);
}

static int env_alloc_params(bw_env *e) {
    size_t C = (size_t)e->C, P = e->P;
    GPTX_TRY(alloc(e, 4 * C * e->par, &e->w));
    GPTX_TRY(alloc(e, 4 * C * e->par, &e->bias));
    GPTX_TRY(alloc(e, 4 * C * C * 4, &e->dw));
    GPTX_TRY(alloc(e, 4 * C * 4, &e->db));
    GPTX_TRY(alloc(e, 4 * C * C * (e->wcp ? e->wcp : e->par), &e->wmat));
    GPTX_TRY(alloc(e, P * e->par, &e->params));
    GPTX_TRY(alloc(e, P * 4, &e->grads));
    GPTX_TRY(alloc(e, P * e->par, &e->m));
    GPTX_TRY(alloc(e, P * e->par, &e->v));
    GPTX_TRY(alloc(e, P * (e->wcp ? e->wcp : 4), &e->wcopy));
    GPTX_TRY(alloc(e, (size_t)e->Vp * C * e->par, &e->wte));
    GPTX_TRY(alloc(e, (size_t)e->T * C * e->par, &e->wpe));
    GPTX_TRY(alloc(e, (size_t)e->Vp * C * 4, &e->dwte));
    return alloc(e, (size_t)e->T * C * 4, &e->dwpe);
}

static int env_fill(bw_env *e, size_t N) {
    size_t C = (size_t)e->C, NC = N * C, P = e->P;
    GPTX_TRY(upload(e, e->res_a, NC, e->res, -1.0f, 1.0f, 1));
    GPTX_TRY(upload(e, e->res_b, NC, e->res, -1.0f, 1.0f, 2));
    GPTX_TRY(upload(e, e->act_a, 4 * NC, e->act, -1.0f, 1.0f, 3));
    GPTX_TRY(upload(e, e->act_b, 4 * NC, e->act, -1.0f, 1.0f, 4));
    GPTX_TRY(upload(e, e->logits, N * (size_t)e->Vp, e->act, -4.0f, 4.0f, 5));
    GPTX_TRY(upload_param(e, e->w, 4 * C, 0.5f, 1.5f, 6));
    GPTX_TRY(upload_param(e, e->bias, 4 * C, -0.1f, 0.1f, 7));
    GPTX_TRY(upload(e, e->wmat, 4 * C * C, e->wcp ? e->wcp : e->par, -0.05f, 0.05f, 8));
    GPTX_TRY(upload(e, e->dw, 4 * C * C, 4, -0.01f, 0.01f, 9));
    GPTX_TRY(upload(e, e->db, 4 * C, 4, -0.01f, 0.01f, 10));
    GPTX_TRY(upload_param(e, e->params, P, -0.1f, 0.1f, 11));
    GPTX_TRY(upload(e, e->grads, P, 4, -0.01f, 0.01f, 12));
    GPTX_TRY(upload_param(e, e->m, P, -1e-3f, 1e-3f, 13));
    GPTX_TRY(upload_param(e, e->v, P, 1e-8f, 1e-5f, 14));
    GPTX_TRY(upload_param(e, e->wte, (size_t)e->Vp * C, -0.1f, 0.1f, 15));
    GPTX_TRY(upload_param(e, e->wpe, (size_t)e->T * C, -0.1f, 0.1f, 16));
    GPTX_TRY(upload(e, e->dwte, (size_t)e->Vp * C, 4, -0.01f, 0.01f, 17));
    GPTX_TRY(upload(e, e->dwpe, (size_t)e->T * C, 4, -0.01f, 0.01f, 18));
    GPTX_TRY(upload_ids(e, e->targets, N, 19));
    GPTX_TRY(upload_ids(e, e->ids, N, 20));
    /* mean and rstd as the forward leaves them, for the backward */
    return e->ops->layernorm_forward(e->be, e->act_c, e->mean, e->rstd, e->res_a, e->w, e->bias,
                                     (int)N, e->C, 1e-5f);
}

static int env_alloc(bw_env *e, const bw_args *a, size_t Nmax) {
    gptx_backend_storage st = {4, 0, 4, 0};
    if (e->ops->storage) e->ops->storage(e->be, &st);
    e->act = st.act_bytes;
    e->res = st.res_bytes ? st.res_bytes : st.act_bytes;
    e->par = st.param_bytes;
    e->wcp = st.wcopy_bytes;
    e->C = a->width;
    e->T = a->seq;
    e->V = a->vocab;
    e->Vp = a->padded_vocab;
    e->P = gpt2_parameters(a);
    e->copy_bytes = (size_t)a->copy_mib << 20;
    e->flush_n = ((size_t)a->flush_mib << 20) / 4;
    GPTX_TRY(env_alloc_rows(e, Nmax));
    GPTX_TRY(env_alloc_params(e));
    GPTX_TRY(alloc(e, e->copy_bytes, &e->copy_src));
    GPTX_TRY(alloc(e, e->copy_bytes, &e->copy_dst));
    GPTX_TRY(upload(e, e->copy_src, e->copy_bytes / 4, 4, -1.0f, 1.0f, 21));
    if (e->flush_n) GPTX_TRY(alloc(e, e->flush_n * 4, &e->flush));
    GPTX_TRY(e->ops->event_create(e->be, &e->ev0));
    GPTX_TRY(e->ops->event_create(e->be, &e->ev1));
    return env_fill(e, Nmax);
}

static void env_free(bw_env *e) {
    void *bufs[] = {e->res_a,  e->res_b,   e->res_c,  e->act_a,    e->act_b,    e->act_c,
                    e->mean,   e->rstd,    e->w,      e->bias,     e->dw,       e->db,
                    e->wmat,   e->logits,  e->targets, e->ids,     e->losses,   e->lse,
                    e->params, e->grads,   e->m,      e->v,        e->wcopy,    e->wte,
                    e->wpe,    e->dwte,    e->dwpe,   e->copy_src, e->copy_dst, e->flush};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) e->ops->free(e->be, bufs[i]);
    if (e->ev0) e->ops->event_destroy(e->be, e->ev0);
    if (e->ev1) e->ops->event_destroy(e->be, e->ev1);
}

/* ---- the ops ------------------------------------------------------------------------ */

/* One op at batch B: its call, and its minimal bytes (see the header). */
typedef struct bw_case bw_case;
typedef int (*bw_call)(bw_env *e, const bw_case *c);
struct bw_case {
    const char *name;
    bw_call call, base; /* base: a call without the op, subtracted (the bias gradient) */
    int B, N, OC;
    double bytes;
    size_t distinct; /* distinct token ids of the batch (embedding rows) */
};

static int ln_fwd(bw_env *e, const bw_case *c) {
    return e->ops->layernorm_forward(e->be, e->act_a, e->mean, e->rstd, e->res_a, e->w, e->bias,
                                     c->N, e->C, 1e-5f);
}
static int res_ln_fwd(bw_env *e, const bw_case *c) {
    return e->ops->residual_layernorm_forward(e->be, e->res_c, e->act_c, e->mean, e->rstd,
                                              e->res_a, e->act_a, e->w, e->bias, c->N, e->C,
                                              1e-5f);
}
static int ln_bwd(bw_env *e, const bw_case *c) {
    return e->ops->layernorm_backward(e->be, e->res_b, e->dw, e->db, e->act_a, e->res_a, e->w,
                                      e->mean, e->rstd, c->N, e->C);
}
static int ln_bwd_act(bw_env *e, const bw_case *c) {
    return e->ops->layernorm_backward_act(e->be, e->res_b, e->act_c, e->dw, e->db, e->act_a,
                                          e->res_a, e->w, e->mean, e->rstd, c->N, e->C);
}
/* matmul_backward of (N, C) -> (N, OC) with and without the bias gradient */
static int mm_bwd_bias(bw_env *e, const bw_case *c) {
    return e->ops->matmul_backward(e->be, NULL, e->dw, e->db, e->act_a, e->act_b, e->wmat, c->N,
                                   e->C, c->OC);
}
static int mm_bwd_nobias(bw_env *e, const bw_case *c) {
    return e->ops->matmul_backward(e->be, NULL, e->dw, NULL, e->act_a, e->act_b, e->wmat, c->N,
                                   e->C, c->OC);
}
static int gelu_fwd(bw_env *e, const bw_case *c) {
    return e->ops->gelu_forward(e->be, e->act_b, e->act_a, (size_t)c->N * 4 * e->C);
}
static int gelu_bwd(bw_env *e, const bw_case *c) {
    return e->ops->gelu_backward(e->be, e->act_c, e->act_a, e->act_b, (size_t)c->N * 4 * e->C);
}
static int residual(bw_env *e, const bw_case *c) {
    return e->ops->residual_forward(e->be, e->res_c, e->res_a, e->act_a, (size_t)c->N * e->C);
}
static int act_from_res(bw_env *e, const bw_case *c) {
    return e->ops->act_from_res(e->be, e->act_c, e->res_a, (size_t)c->N * e->C);
}
static int ce_fused(bw_env *e, const bw_case *c) {
    return e->ops->crossentropy_fused(e->be, e->losses, e->lse, e->logits, e->targets, c->N, e->V,
                                      e->Vp, 1, 1.0f / (float)c->N);
}
static gptx_adamw_hyper adamw_hyper(void) {
    gptx_adamw_hyper h = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 1.0f, 0, 1};
    return h;
}
static int adamw(bw_env *e, const bw_case *c) {
    (void)c;
    gptx_param_range r = {0, e->P, 0.1f};
    gptx_adamw_hyper h = adamw_hyper();
    return e->ops->adamw(e->be, e->params, e->grads, e->m, e->v, &r, 1, &h);
}
static int adamw_copy(bw_env *e, const bw_case *c) {
    (void)c;
    gptx_param_range r = {0, e->P, 0.1f};
    gptx_adamw_hyper h = adamw_hyper();
    return e->ops->adamw_copy(e->be, e->params, e->wcopy, e->grads, e->m, e->v, &r, 1, &h);
}
static int grad_norm(bw_env *e, const bw_case *c) {
    (void)c;
    double s = 0.0;
    return e->ops->sum_squares_to_host(e->be, &s, e->grads, e->P);
}
static int zero_grad(bw_env *e, const bw_case *c) {
    (void)c;
    return e->ops->fill_f32(e->be, e->grads, 1e-3f, e->P); /* lib/ fills 0; not timed on zeros */
}
static int emb_fwd(bw_env *e, const bw_case *c) {
    return e->ops->embedding_forward(e->be, e->res_c, e->ids, e->wte, e->wpe, c->B, e->T, e->C);
}
static int emb_bwd(bw_env *e, const bw_case *c) {
    return e->ops->embedding_backward(e->be, e->dwte, e->dwpe, e->res_a, e->ids, c->B, e->T,
                                      e->C);
}

/* The distinct ids among the first n of the batch (host copy of the device buffer). */
static int distinct_ids(bw_env *e, size_t n, size_t *out) {
    float *h = malloc(n * sizeof *h);
    unsigned char *seen = calloc((size_t)e->V, 1);
    int rc = h && seen ? e->ops->download_f32(e->be, h, (const float *)e->ids, n)
                       : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    size_t k = 0;
    for (size_t i = 0; rc == GPTX_OK && i < n; i++) {
        int32_t id;
        memcpy(&id, &h[i], sizeof id);
        if (id >= 0 && id < e->V && !seen[id]) {
            seen[id] = 1;
            k++;
        }
    }
    *out = k;
    free(h);
    free(seen);
    return rc;
}

/* The cases of batch B, in the step's order, with their bytes; *n set. */
static int make_cases(const bw_env *e, int B, size_t distinct, bw_case *cs, int *n) {
    double N = (double)B * e->T, C = e->C, a = (double)e->act, r = (double)e->res;
    double p = (double)e->par, w = e->wcp ? (double)e->wcp : p, P = (double)e->P;
    double NC = N * C, Vp = e->Vp, T = e->T, U = (double)distinct;
    int k = 0;
#define CASE(nm, fn, base, oc, by) cs[k++] = (bw_case){nm, fn, base, B, (int)N, oc, by, distinct}
    CASE("embedding_forward", emb_fwd, NULL, 0, U * C * p + T * C * p + 4 * N + NC * r);
    CASE("layernorm_forward", ln_fwd, NULL, 0, NC * (r + a) + 8 * N + 2 * C * p);
    if (e->ops->residual_layernorm_forward)
        CASE("residual_layernorm_forward", res_ln_fwd, NULL, 0,
             NC * (2 * r + 2 * a) + 8 * N + 2 * C * p);
    CASE("gelu_forward", gelu_fwd, NULL, 0, 2 * 4 * NC * a);
    CASE("residual_forward", residual, NULL, 0, NC * (2 * r + a));
    CASE("crossentropy_fused", ce_fused, NULL, 0, 2 * N * Vp * a + 12 * N);
    CASE("bias gradient, OC = 4C", mm_bwd_bias, mm_bwd_nobias, 4 * e->C, 4 * NC * a + 8 * 4 * C);
    CASE("gelu_backward", gelu_bwd, NULL, 0, 3 * 4 * NC * a);
    CASE("bias gradient, OC = C", mm_bwd_bias, mm_bwd_nobias, e->C, NC * a + 8 * C);
    CASE("layernorm_backward", ln_bwd, NULL, 0, NC * (a + 3 * r) + 8 * N + C * p + 16 * C);
    if (e->ops->layernorm_backward_act)
        CASE("layernorm_backward_act", ln_bwd_act, NULL, 0,
             NC * (2 * a + 3 * r) + 8 * N + C * p + 16 * C);
    if (e->ops->act_from_res) CASE("act_from_res", act_from_res, NULL, 0, NC * (r + a));
    CASE("embedding_backward", emb_bwd, NULL, 0, NC * r + 4 * N + 8 * U * C + 8 * T * C);
    CASE("fill_f32 (zero_grad)", zero_grad, NULL, 0, 4 * P);
    CASE("sum_squares_to_host (norm)", grad_norm, NULL, 0, 4 * P);
    CASE("adamw", adamw, NULL, 0, P * (6 * p + 4));
    if (e->ops->adamw_copy && e->wcp)
        CASE("adamw_copy", adamw_copy, NULL, 0, P * (6 * p + 4 + w));
#undef CASE
    *n = k;
    return GPTX_OK;
}

/* ---- timing ------------------------------------------------------------------------- */

static int flush_l2(bw_env *e) {
    return e->flush_n ? e->ops->fill_f32(e->be, e->flush, 0.5f, e->flush_n) : GPTX_OK;
}

/* the ceiling's copy, on the compute stream the events are recorded on */
static int copy_call(bw_env *e, const bw_case *c) {
    (void)c;
#ifdef GPTX_TEST_CUDA_EMU
    memmove(e->copy_dst, e->copy_src, e->copy_bytes); /* emulated device memory is host memory */
    return GPTX_OK;
#else
    cudaStream_t s = e->ops->compute_stream ? (cudaStream_t)e->ops->compute_stream(e->be) : 0;
    cudaError_t err = cudaMemcpyAsync(e->copy_dst, e->copy_src, e->copy_bytes,
                                      cudaMemcpyDeviceToDevice, s);
    if (err != cudaSuccess)
        return GPTX_FAIL(GPTX_ERR_BACKEND, "cudaMemcpyAsync device to device: %s",
                         cudaGetErrorString(err));
    return GPTX_OK;
#endif
}

/* one call of a case, as table_time_median calls it; the L2 flushed before it */
typedef struct {
    bw_env *e;
    const bw_case *c;
    bw_call call;
} bw_timed;

static int timed_call(void *arg) {
    bw_timed *t = arg;
    return t->call(t->e, t->c);
}

static int timed_flush(void *arg) { return flush_l2(((bw_timed *)arg)->e); }

/* --warmup untimed calls, then the median of --iters, each between two
 * events (table_timing.h), the L2 flushed before each */
static int time_call(bw_env *e, const bw_args *a, bw_call call, const bw_case *c, double *med) {
    bw_timed t = {e, c, call};
    return table_time_median(e->ops, e->be, e->ev0, e->ev1, a->warmup, a->iters, timed_flush,
                             timed_call, &t, med);
}

/* the case's time: its call's median, less its base call's */
static int time_case(bw_env *e, const bw_args *a, const bw_case *c, double *sec) {
    GPTX_TRY(time_call(e, a, c->call, c, sec));
    if (!c->base) return GPTX_OK;
    double base = 0.0;
    GPTX_TRY(time_call(e, a, c->base, c, &base));
    *sec -= base;
    return GPTX_OK;
}

/* ---- report ------------------------------------------------------------------------- */

typedef struct {
    bw_case c;
    double sec;
} bw_result;

static void print_row(const bw_result *r, double ceiling) {
    double floor_s = r->c.bytes / ceiling, ratio = r->sec / floor_s;
    printf("  %-28s %10.2f MB %10.2f us %9.1f GB/s %9.2f us %7.2fx%s\n", r->c.name,
           r->c.bytes * 1e-6, r->sec * 1e6, r->sec > 0 ? r->c.bytes / r->sec * 1e-9 : 0.0,
           floor_s * 1e6, ratio, ratio > GOAL_RATIO ? "  > 1.5x" : "");
}

static int write_json(const char *path, const bw_env *e, const bw_args *a, double copy_s,
                      const bw_result *res, int n) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    double ceiling = 2.0 * (double)e->copy_bytes / copy_s;
    fprintf(f,
            "{\"bench\": \"bandwidth\", \"backend\": \"%s\", \"precision\": \"%s\", "
            "\"act_bytes\": %zu, \"res_bytes\": %zu, \"param_bytes\": %zu, \"wcopy_bytes\": %zu, "
            "\"width\": %d, \"seq\": %d, \"vocab\": %d, \"padded_vocab\": %d, \"parameters\": %zu, "
            "\"warmup\": %d, \"iters\": %d, \"flush_mib\": %d, \"copy_bytes\": %zu, "
            "\"copy_s\": %.9g, \"copy_bytes_per_s\": %.6g, \"goal_ratio\": %.2f, \"ops\": [",
            CUDA_TEST_KIND, a->precision, e->act, e->res, e->par, e->wcp, e->C, e->T, e->V, e->Vp,
            e->P, a->warmup, a->iters, a->flush_mib, 2 * e->copy_bytes, copy_s, ceiling,
            GOAL_RATIO);
    for (int i = 0; i < n; i++) {
        double floor_s = res[i].c.bytes / ceiling;
        fprintf(f,
                "%s{\"batch\": %d, \"op\": \"%s\", \"bytes\": %.0f, \"time_s\": %.9g, "
                "\"bytes_per_s\": %.6g, \"floor_s\": %.9g, \"ratio\": %.4g}",
                i ? ", " : "", res[i].c.B, res[i].c.name, res[i].c.bytes, res[i].sec,
                res[i].sec > 0 ? res[i].c.bytes / res[i].sec : 0.0, floor_s,
                res[i].sec / floor_s);
    }
    fprintf(f, "]}\n");
    return fclose(f) == 0 ? 0 : 1;
}

/* the ops over the goal, and the worst */
static void print_verdict(const bw_result *res, int n, double ceiling) {
    int over = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        double ratio = res[i].sec * ceiling / res[i].c.bytes;
        over += ratio > GOAL_RATIO;
        if (ratio > res[worst].sec * ceiling / res[worst].c.bytes) worst = i;
    }
    printf("%d of %d op timings within %.1fx of bytes / copy ceiling; the worst: %s at B %d, "
           "%.2fx\n",
           n - over, n, GOAL_RATIO, res[worst].c.name, res[worst].c.B,
           res[worst].sec * ceiling / res[worst].c.bytes);
}

/* ---- main ----------------------------------------------------------------------------- */

/* every case of every batch into res (*n of them) */
static int run_batches(bw_env *e, const bw_args *a, const bw_batches *bs, double ceiling,
                       bw_result *res, int *n) {
    *n = 0;
    for (int b = 0; b < bs->n; b++) {
        size_t N = (size_t)bs->b[b] * e->T, distinct = 0;
        bw_case cs[24];
        int nc = 0;
        GPTX_TRY(distinct_ids(e, N, &distinct));
        GPTX_TRY(make_cases(e, bs->b[b], distinct, cs, &nc));
        printf("\nB %d (N %zu rows; %zu distinct token ids)\n", bs->b[b], N, distinct);
        printf("  %-28s %13s %13s %14s %12s %8s\n", "op", "bytes", "time", "achieved", "floor",
               "ratio");
        for (int i = 0; i < nc; i++) {
            res[*n].c = cs[i];
            GPTX_TRY(time_case(e, a, &cs[i], &res[*n].sec));
            print_row(&res[*n], ceiling);
            fflush(stdout);
            (*n)++;
        }
    }
    return GPTX_OK;
}

static int bench(bw_env *e, const bw_args *a, const bw_batches *bs) {
    bw_result *res = calloc((size_t)bs->n * 24, sizeof *res);
    int n = 0, out = 1;
    double copy_s = 0.0;
    int rc = res ? env_alloc(e, a, (size_t)bs->max * a->seq)
                 : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    bw_case none = {"copy", copy_call, NULL, 0, 0, 0, 0.0, 0};
    if (rc == GPTX_OK) rc = time_call(e, a, copy_call, &none, &copy_s);
    double ceiling = copy_s > 0 ? 2.0 * (double)e->copy_bytes / copy_s : 0.0;
    if (rc == GPTX_OK)
        printf("storage: activations %zu B, residual stream %zu B, parameters and moments %zu B, "
               "weight copy %zu B, gradients 4 B\n", e->act, e->res, e->par, e->wcp);
    if (rc == GPTX_OK)
        printf("copy ceiling: device-to-device copy of %d MiB, %.3f ms: %.1f GB/s (bytes read + "
               "written)\n", a->copy_mib, copy_s * 1e3, ceiling * 1e-9);
    if (rc == GPTX_OK) rc = run_batches(e, a, bs, ceiling, res, &n);
    if (rc == GPTX_OK) {
        printf("\n");
        print_verdict(res, n, ceiling);
        out = a->json ? write_json(a->json, e, a, copy_s, res, n) : 0;
    } else {
        fprintf(stderr, PROG ": %s (%s)\n", gptx_last_error(), gptx_status_name(rc));
    }
    free(res);
    env_free(e);
    return out;
}

int main(int argc, char **argv) {
    bw_args a;
    bw_batches bs;
    int prc = parse_args(&a, &bs, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    bw_env e;
    memset(&e, 0, sizeof e);
    e.ops = cuda_test_ops();
    int rc = cuda_test_backend(&e.be, a.precision);
    if (rc == GPTX_ERR_UNSUPPORTED) return cuda_test_skip(PROG);
    if (rc != GPTX_OK) {
        fprintf(stderr, PROG ": CUDA backend (%s): %s\n", a.precision, gptx_last_error());
        return 1;
    }
    if (!e.ops->event_create) {
        fprintf(stderr, PROG ": the backend has no events to time with\n");
        e.ops->destroy(e.be);
        return 1;
    }
    printf(PROG " on %s, %s: GPT-2 shapes C %d, T %d, V %d (padded %d), %zu parameters; median "
                "of %d calls after %d warm-up, %d MiB filled before each (L2 flush)\n",
           CUDA_TEST_KIND, a.precision, a.width, a.seq, a.vocab, a.padded_vocab,
           gpt2_parameters(&a), a.iters, a.warmup, a.flush_mib);
    printf("bytes: minimal traffic, each input read and each output written once (accumulated "
           "outputs both),\n  the embedding's rows once per distinct token; floor = bytes / copy "
           "ceiling; ratio = time / floor\n");
    int out = bench(&e, &a, &bs);
    e.ops->destroy(e.be);
    return out;
}
