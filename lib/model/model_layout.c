/* Canonical parameter table: Hugging Face GPT-2 names, nn.Linear orientation,
 * one contiguous region per tensor inside the flat parameter buffer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "model.h"

static int add_tensor(gptx_layout *L, const char *name, int ndim, int64_t d0, int64_t d1) {
    gptx_param_desc *t = &L->tensors[L->ntensors];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->numel = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
    t->offset = L->nparams;
    L->nparams += t->numel;
    return L->ntensors++;
}

static int add_layer_tensor(gptx_layout *L, int layer, const char *suffix, int ndim, int64_t d0,
                            int64_t d1) {
    char name[GPTX_NAME_MAX];
    snprintf(name, sizeof name, "h.%d.%s", layer, suffix);
    return add_tensor(L, name, ndim, d0, d1);
}

int gptx_layout_build(gptx_layout *L, const gptx_model_config *cfg) {
    memset(L, 0, sizeof *L);
    int nl = cfg->n_layer;
    int64_t C = cfg->n_embd, Vp = cfg->padded_vocab_size;
    int max_tensors = 5 + 12 * nl;
    L->tensors = calloc((size_t)max_tensors, sizeof *L->tensors);
    L->layers = calloc((size_t)nl, sizeof *L->layers);
    if (!L->tensors || !L->layers) {
        gptx_layout_free(L);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    L->wte = add_tensor(L, "wte.weight", 2, Vp, C);
    L->wpe = add_tensor(L, "wpe.weight", 2, cfg->context_length, C);
    for (int l = 0; l < nl; l++) {
        gptx_layer_params *p = &L->layers[l];
        p->ln1_w = add_layer_tensor(L, l, "ln_1.weight", 1, C, 0);
        p->ln1_b = add_layer_tensor(L, l, "ln_1.bias", 1, C, 0);
        p->qkv_w = add_layer_tensor(L, l, "attn.c_attn.weight", 2, 3 * C, C);
        p->qkv_b = cfg->qkv_bias ? add_layer_tensor(L, l, "attn.c_attn.bias", 1, 3 * C, 0) : -1;
        p->attn_proj_w = add_layer_tensor(L, l, "attn.c_proj.weight", 2, C, C);
        p->attn_proj_b = add_layer_tensor(L, l, "attn.c_proj.bias", 1, C, 0);
        p->ln2_w = add_layer_tensor(L, l, "ln_2.weight", 1, C, 0);
        p->ln2_b = add_layer_tensor(L, l, "ln_2.bias", 1, C, 0);
        p->fc_w = add_layer_tensor(L, l, "mlp.c_fc.weight", 2, 4 * C, C);
        p->fc_b = add_layer_tensor(L, l, "mlp.c_fc.bias", 1, 4 * C, 0);
        p->fc_proj_w = add_layer_tensor(L, l, "mlp.c_proj.weight", 2, C, 4 * C);
        p->fc_proj_b = add_layer_tensor(L, l, "mlp.c_proj.bias", 1, C, 0);
    }
    L->lnf_w = add_tensor(L, "ln_f.weight", 1, C, 0);
    L->lnf_b = add_tensor(L, "ln_f.bias", 1, C, 0);
    L->lm_head = cfg->tied_head ? L->wte : add_tensor(L, "lm_head.weight", 2, Vp, C);
    return GPTX_OK;
}

void gptx_layout_free(gptx_layout *L) {
    free(L->tensors);
    free(L->layers);
    memset(L, 0, sizeof *L);
}

int gptx_layout_find(const gptx_layout *L, const char *name) {
    for (int i = 0; i < L->ntensors; i++)
        if (strcmp(L->tensors[i].name, name) == 0) return i;
    return -1;
}
