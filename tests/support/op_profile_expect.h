/* What the per-op profiler must report for training steps (zero_grad,
 * gptx_model_forward_backward, gptx_optimizer_step) of a model, derived from
 * the model's shape and the table it runs on, not from the profiler: shared
 * by the CPU test (tests/core/test_op_profile.c) and the emulated CUDA one
 * (tests/gpu/test_cuda_profile.c). */
#ifndef GPTX_TEST_OP_PROFILE_EXPECT_H
#define GPTX_TEST_OP_PROFILE_EXPECT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"
#include "check.h"
#include "gptx/gptx_experimental.h"

typedef struct expect_line {
    const char *op;
    int c, oc;
    int64_t calls; /* per step */
} expect_line;

/* The report lines of one step of model cfg on table ops with storage st:
 * into out (room for 32), returns their number. Per step, with L layers,
 * width C and padded vocabulary Vp (lib/model/model.c): */
static inline int expect_step_lines(const gptx_model_config *cfg, const gptx_backend_ops *ops,
                                    const gptx_backend *be, const gptx_backend_storage *st,
                                    expect_line *out) {
    int64_t L = cfg->n_layer;
    /* the gradient fusions (backend.h grad_fusion) the model takes: the
     * norm's per-tensor sums in backward instead of one pass (one call per
     * tensor), zero_grad folded into the backward (overwrite on and off,
     * then wpe and an untied wte filled before the embedding backward) */
    unsigned fusion = ops->grad_fusion && !ops->graph_begin ? ops->grad_fusion(be) : 0u;
    int fuse_norm = (fusion & GPTX_GRAD_FUSE_NORM) && ops->grad_sumsq;
    int fuse_zero = (fusion & GPTX_GRAD_FUSE_ZERO) && ops->grad_overwrite;
    int64_t ntensors = 4 + L * (11 + (cfg->qkv_bias != 0)) + !cfg->tied_head;
    int C = cfg->n_embd, Vp = cfg->padded_vocab_size;
    /* the backward's dresidual is zeroed with fill_act when the residual
     * stream has the activation type and the backend has it */
    int fill_act = ops->fill_act && st->res_bytes == st->act_bytes;
    /* the bf16 weight copy refreshed inside AdamW (the optimizer covers every
     * parameter here), and the residual gradient's activation-type copy
     * written by the LayerNorm backward where a product takes it next (all
     * but layer 0's ln_1), when the backend has those entries */
    int fused_copy = st->wcopy_bytes && ops->adamw_copy;
    int wider_res = st->res_bytes != st->act_bytes;
    int ln_act = wider_res && ops->layernorm_backward_act;
    int n = 0;
#define EXPECT(name, c_, oc_, k)                                          \
    do {                                                                  \
        if ((k) > 0) out[n++] = (expect_line){(name), (c_), (oc_), (k)}; \
    } while (0)
    /* zero_grad, or with it folded: wpe (+ an untied wte); (+ dresidual) */
    EXPECT("fill_f32", 0, 0, (fuse_zero ? 1 + !cfg->tied_head : 1) + !fill_act);
    EXPECT("grad_overwrite", 0, 0, fuse_zero ? 2 : 0);
    EXPECT("fill_act", 0, 0, fill_act);       /* dresidual */
    EXPECT("upload_i32", 0, 0, 2);            /* inputs, targets */
    EXPECT("convert_weights", 0, 0, st->wcopy_bytes && !fused_copy ? 1 : 0); /* after AdamW */
    EXPECT("embedding_forward", 0, 0, 1);
    EXPECT("layernorm_forward", 0, 0, 2);     /* ln_1 of layer 0, ln_f */
    EXPECT("qkv_forward", C, 3 * C, L);
    EXPECT("attention_forward", 0, 0, L);
    EXPECT("matmul_forward", C, C, L);        /* attn.c_proj */
    EXPECT("residual_layernorm_forward", 0, 0, 2 * L - 1); /* + ln_2, + next ln_1 */
    EXPECT("matmul_gelu_forward", C, 4 * C, L);
    EXPECT("matmul_forward", 4 * C, C, L);    /* mlp.c_proj */
    EXPECT("residual_forward", 0, 0, 1);      /* the last block's */
    EXPECT("matmul_forward", C, Vp, 1);       /* lm_head */
    EXPECT("crossentropy_fused", 0, 0, 1);
    EXPECT("sum_to_host", 0, 0, 1);           /* the loss */
    EXPECT("matmul_backward", C, Vp, 1);
    EXPECT("layernorm_backward", 0, 0, ln_act ? 1 : 2 * L + 1);
    EXPECT("layernorm_backward_act", 0, 0, ln_act ? 2 * L : 0);
    EXPECT("act_from_res", 0, 0, wider_res && !ln_act ? 2 * L : 0);
    EXPECT("matmul_backward_dgelu", 4 * C, C, L);
    EXPECT("matmul_backward", C, 4 * C, L);
    EXPECT("matmul_backward", C, C, L);
    EXPECT("attention_backward", 0, 0, L);
    EXPECT("qkv_backward", C, 3 * C, L);
    EXPECT("embedding_backward", 0, 0, 1);
    EXPECT("grad_sumsq", 0, 0, fuse_norm ? ntensors : 0); /* the gradient norm, fused */
    EXPECT("sum_squares_to_host", 0, 0, !fuse_norm);      /* or its own pass */
    EXPECT("adamw", 0, 0, !fused_copy);
    EXPECT("adamw_copy", 0, 0, fused_copy);
#undef EXPECT
    return n;
}

/* Every expected line present with steps times its calls, and no other. */
static inline void check_profile_lines(const gptx_op_stat *got, int ngot, const expect_line *want,
                                       int nwant, int steps) {
    int found = 0;
    for (int i = 0; i < nwant; i++) {
        const gptx_op_stat *s = NULL;
        for (int k = 0; k < ngot && !s; k++)
            if (!strcmp(got[k].op, want[i].op) && got[k].c == want[i].c &&
                got[k].oc == want[i].oc)
                s = &got[k];
        if (!s) {
            fprintf(stderr, "no report line for %s %dx%d\n", want[i].op, want[i].c, want[i].oc);
            check_failures++;
            continue;
        }
        found++;
        if (s->calls != want[i].calls * steps) {
            fprintf(stderr, "%s %dx%d: %lld calls, expected %lld\n", s->op, s->c, s->oc,
                    (long long)s->calls, (long long)(want[i].calls * steps));
            check_failures++;
        }
    }
    if (found != ngot) {
        fprintf(stderr, "the report has %d lines, expected %d:\n", ngot, nwant);
        for (int k = 0; k < ngot; k++)
            fprintf(stderr, "  %s %dx%d %lld\n", got[k].op, got[k].c, got[k].oc,
                    (long long)got[k].calls);
        check_failures++;
    }
}

#endif
