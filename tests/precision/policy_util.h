/* What the precision-policy tests of every backend share (tests/precision,
 * tests/gpu/test_cuda_pure.c): a small model on a learnable token stream,
 * training runs, parameter read-back, and the measures of how two runs
 * differ. Model: 2 layers, C 32, 2 heads, V 67 (padded 80), B 2, T 16. */
#ifndef GPTX_TEST_POLICY_UTIL_H
#define GPTX_TEST_POLICY_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gptx/gptx.h"

#define POLICY_V 67
#define POLICY_VP 80
#define POLICY_B 2
#define POLICY_T 16

/* REQUIRE_OK for functions without a result */
#define NEED(call)                                                                                 \
    do {                                                                                           \
        int need_rc_ = (call);                                                                     \
        CHECK_OK(need_rc_);                                                                        \
        if (need_rc_ != GPTX_OK) return;                                                           \
    } while (0)

static int32_t policy_stream[4000];

/* Mostly a fixed successor rule, every tenth token random: a model learns it
 * within a few steps, so losses fall and runs can be compared. */
static void policy_make_stream(void) {
    uint64_t r = 42;
    policy_stream[0] = 1;
    for (size_t i = 1; i < sizeof policy_stream / sizeof policy_stream[0]; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        policy_stream[i] = (r >> 33) % 10 == 0 ? (int32_t)((r >> 40) % POLICY_V)
                                                : (policy_stream[i - 1] * 3 + 1) % POLICY_V;
    }
}

static void policy_config(gptx_model_config *c) {
    gptx_model_config_init(c);
    c->vocab_size = POLICY_V;
    c->padded_vocab_size = POLICY_VP;
    c->context_length = POLICY_T;
    c->n_layer = 2;
    c->n_head = 2;
    c->n_embd = 32;
}

typedef struct policy_run {
    gptx_model *m;
    gptx_optimizer *opt;
} policy_run;

static int policy_run_open(policy_run *r, gptx_context *ctx, float lr, uint64_t seed) {
    memset(r, 0, sizeof *r);
    gptx_model_config c;
    policy_config(&c);
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = lr;
    ao.rounding_seed = seed;
    int rc = gptx_model_create(&r->m, ctx, &c);
    if (rc == GPTX_OK) rc = gptx_model_init_random(r->m, 2024);
    if (rc == GPTX_OK) rc = gptx_optimizer_create(&r->opt, r->m, &ao);
    return rc;
}

static void policy_run_close(policy_run *r) {
    gptx_optimizer_destroy(r->opt);
    gptx_model_destroy(r->m);
}

/* steps [s0, s0 + n), each on its own batch of the stream */
static int policy_run_steps(policy_run *r, int s0, int n, float *losses) {
    enum { B = POLICY_B, T = POLICY_T };
    int32_t in[B * T], tg[B * T];
    size_t len = sizeof policy_stream / sizeof policy_stream[0];
    int rc = GPTX_OK;
    for (int s = s0; s < s0 + n && rc == GPTX_OK; s++) {
        for (int b = 0; b < B; b++) {
            size_t start = ((size_t)(s * B + b) * 37) % (len - T - 1);
            memcpy(in + b * T, policy_stream + start, T * sizeof *in);
            memcpy(tg + b * T, policy_stream + start + 1, T * sizeof *tg);
        }
        float loss = 0;
        rc = gptx_model_zero_grad(r->m);
        if (rc == GPTX_OK) rc = gptx_model_forward(r->m, in, tg, B, T, &loss);
        if (rc == GPTX_OK) rc = gptx_model_backward(r->m, 1.0f);
        if (rc == GPTX_OK) rc = gptx_optimizer_step(r->opt, r->m, NULL);
        if (losses) losses[s - s0] = loss;
    }
    if (rc != GPTX_OK) fprintf(stderr, "training failed: %s\n", gptx_last_error());
    return rc;
}

/* All parameters in tensor order into a new host array; *mat marks the
 * elements of 2-D tensors. */
static float *policy_params(gptx_model *m, unsigned char **mat) {
    float *p = malloc(gptx_model_num_parameters(m) * sizeof *p);
    if (mat) *mat = malloc(gptx_model_num_parameters(m));
    size_t off = 0;
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        CHECK_OK(gptx_model_tensor_info(m, i, &info));
        CHECK_OK(gptx_model_get_parameter(m, info.name, p + off, info.numel));
        if (mat) memset(*mat + off, info.ndim == 2, info.numel);
        off += info.numel;
    }
    return p;
}

static size_t policy_allocated(gptx_context *ctx) {
    gptx_memory_stats st;
    gptx_memory_stats_init(&st);
    CHECK_OK(gptx_context_memory(ctx, &st));
    return st.allocated;
}

/* largest |x - ref| / ref over n steps (NaN counts as the worst) */
static double policy_max_gap(const float *x, const float *ref, int n) {
    double g = 0;
    for (int s = 0; s < n; s++) {
        double d = fabs((double)x[s] - ref[s]) / ref[s];
        if (!(d <= g)) g = d;
    }
    return g;
}

static double policy_mean4(const float *x) { return ((double)x[0] + x[1] + x[2] + x[3]) / 4; }

/* projection of (after - before) onto the reference change, 2-D tensors only:
 * 1 = moved as the reference moved, 0 = did not move */
static double policy_projection(const float *after, const float *before, const float *ref_after,
                                const float *ref_before, const unsigned char *mat, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!mat[i]) continue;
        double d = (double)after[i] - before[i], dr = (double)ref_after[i] - ref_before[i];
        num += d * dr;
        den += dr * dr;
    }
    return den > 0 ? num / den : 0;
}

#endif
