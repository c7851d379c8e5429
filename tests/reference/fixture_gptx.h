/* What a fixture's `config` and `hyper` entries mean to gptx (README.md):
 * the shared index names, and the model config and AdamW options they give.
 * Used by test_reference.c and test_reference_policy.c. */
#ifndef GPTX_TESTS_FIXTURE_GPTX_H
#define GPTX_TESTS_FIXTURE_GPTX_H

#include <stdint.h>

#include "gptx/gptx.h"

/* Indices into the `config` (int32) and `hyper` (float32) entries. */
enum { CF_V, CF_VP, CF_CTX, CF_L, CF_NH, CF_C, CF_QKV_BIAS, CF_TIED, CF_MASK, CF_B, CF_T,
       CF_STEPS, CF_COUNT };
enum { HY_LN_EPS, HY_LR, HY_BETA1, HY_BETA2, HY_EPS, HY_WD, HY_CLIP, HY_COUNT };

static inline void fixture_model_config(gptx_model_config *mc, const int32_t *cf,
                                        const float *hy) {
    gptx_model_config_init(mc);
    mc->vocab_size = cf[CF_V];
    mc->padded_vocab_size = cf[CF_VP];
    mc->context_length = cf[CF_CTX];
    mc->n_layer = cf[CF_L];
    mc->n_head = cf[CF_NH];
    mc->n_embd = cf[CF_C];
    mc->qkv_bias = cf[CF_QKV_BIAS];
    mc->tied_head = cf[CF_TIED];
    mc->mask_padded_logits = cf[CF_MASK];
    mc->layernorm_eps = hy[HY_LN_EPS];
}

/* AdamW as the fixture's PyTorch run: weight decay on 2-D tensors only. */
static inline void fixture_adamw_options(gptx_adamw_options *ao, const float *hy) {
    gptx_adamw_options_init(ao);
    ao->lr = hy[HY_LR];
    ao->beta1 = hy[HY_BETA1];
    ao->beta2 = hy[HY_BETA2];
    ao->eps = hy[HY_EPS];
    ao->weight_decay = hy[HY_WD];
    ao->grad_clip = hy[HY_CLIP];
    ao->decay_policy = GPTX_DECAY_MATRICES;
}

#endif /* GPTX_TESTS_FIXTURE_GPTX_H */
