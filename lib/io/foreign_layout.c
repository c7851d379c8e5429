#include "foreign_layout.h"

#include <string.h>

const char *const gptx_llmc_names[GPTX_LLMC_NTENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

int gptx_llmc_per_layer(int k) { return k >= 2 && k <= 13; }

int gptx_llmc_index(const gptx_layout *L, int k, int l) {
    const gptx_layer_params *p = &L->layers[l];
    switch (k) {
    case 0: return L->wte;
    case 1: return L->wpe;
    case 2: return p->ln1_w;
    case 3: return p->ln1_b;
    case 4: return p->qkv_w;
    case 5: return p->qkv_b;
    case 6: return p->attn_proj_w;
    case 7: return p->attn_proj_b;
    case 8: return p->ln2_w;
    case 9: return p->ln2_b;
    case 10: return p->fc_w;
    case 11: return p->fc_b;
    case 12: return p->fc_proj_w;
    case 13: return p->fc_proj_b;
    case 14: return L->lnf_w;
    default: return L->lnf_b;
    }
}

int gptx_name_ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

int gptx_hf_is_conv1d(const char *name) {
    return gptx_name_ends_with(name, ".attn.c_attn.weight") ||
           gptx_name_ends_with(name, ".attn.c_proj.weight") ||
           gptx_name_ends_with(name, ".mlp.c_fc.weight") ||
           gptx_name_ends_with(name, ".mlp.c_proj.weight");
}
