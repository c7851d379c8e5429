#include "ladder_rows.h"

#include <stdio.h>
#include <string.h>

#include "gptx/gptx.h"
#include "gptx/gptx_experimental.h"

/* One optimization of the ladder: what it switches and what it may cost
 * numerically. The tolerances are for fp32 results compared with the
 * baseline on the same parameters and data; docs/ablation.md lists the
 * errors measured on each config (logits ~30x, losses >= 1000x below). */
typedef struct {
    const char *key;
    const char *name;
    const char *change;
    void (*apply)(ladder_variant *v);
    double logits_tol; /* max |Δ logit| of a freshly initialised model */
    double loss_tol;   /* |Δ eval loss| after N steps; < 0: not comparable */
} ladder_change;

static void to_flash(ladder_variant *v) { v->attention = GPTX_ATTENTION_FLASH; }
static void to_fused_qkv(ladder_variant *v) { v->fused_qkv = 1; }
static void to_fused_norm_gelu(ladder_variant *v) { v->fused_norm_gelu = 1; }
static void to_fused_adamw(ladder_variant *v) { v->fused_adamw = 1; }
static void to_fused_ce(ladder_variant *v) { v->fused_ce = 1; }
static void to_padded(ladder_variant *v) { v->padded_vocab = 1; }
static void to_batch2(ladder_variant *v) { v->batch_mult = 2; }
static void to_bf16(ladder_variant *v) { v->precision = GPTX_PRECISION_BF16; }
static void to_bf16_pure(ladder_variant *v) { v->precision = GPTX_PRECISION_BF16_PURE; }

/* Reordered float sums (attention, products, LayerNorm statistics) change
 * logits by ~1e-6 and the held-out loss after a few AdamW steps by far less
 * than 1e-4; the tolerances leave room for larger models but stay below the
 * effect of real bugs (unmasked padded logits at 0 raise the loss by about
 * 47/50257 = 9e-4). The AdamW and cross-entropy changes do the same
 * arithmetic per element: exact. A bigger batch trains on twice the tokens: its loss is reported,
 * not compared; its logits (the same fixed batch) must still agree. */
static const ladder_change changes[] = {
    {"flash_attention", "flash attention",
     "attention: naive (B,NH,T,T) + float mask -> flash-style", to_flash, 1e-4, 1e-4},
    {"fused_qkv", "fused QKV", "Q, K, V: three products + concat -> one (3C, C) product",
     to_fused_qkv, 1e-4, 1e-4},
    {"fused_norm_gelu", "fused LN/GELU", "LayerNorm/GELU: step-by-step passes -> fused kernels",
     to_fused_norm_gelu, 1e-4, 1e-4},
    {"fused_adamw", "fused AdamW", "AdamW: one pass per tensor -> one pass over all parameters",
     to_fused_adamw, 0.0, 0.0},
    {"fused_ce", "fused cross-entropy",
     "cross-entropy: forward pass, then gradient pass -> one pass over the logits",
     to_fused_ce, 0.0, 0.0},
    {"padded_vocab", "padded vocab", "vocab 50257 -> padded 50304, padded logits masked",
     to_padded, 1e-4, 1e-4},
    {"batch_2x", "batch 2B", "batch B -> 2B rows per step (twice the tokens per update)",
     to_batch2, 1e-4, -1.0},
};
#define N_CHANGES (sizeof changes / sizeof changes[0])

/* The precision policies (CPU: builds with oneDNN). They run on the fused
 * kernels only (the textbook variants are fp32 kernels), so in the isolated
 * ladder they are measured on every fp32 change at once, next to a row of
 * just those. bf16 keeps 8 significant bits (2^-9 relative per rounding):
 * the largest logit change of a fresh model over the held-out batch was
 * 1.2e-2 (small) and 2.3e-2 (gpt2-124M-short) under bf16, 1.5e-2 and 3.5e-2
 * under bf16_pure; the held-out loss after a few steps moved by up to 6e-4
 * (bf16) and 1.1e-2 (bf16_pure, whose rounded updates drift). docs/ablation.md */
static const ladder_change policies[] = {
    {"bf16", "bf16 policy",
     "fp32 -> bf16 mixed: bf16 products and activations; fp32 master, moments, residual",
     to_bf16, 3e-2, 3e-2},
    {"bf16_pure", "bf16_pure policy", "-> bf16 parameters and AdamW moments too",
     to_bf16_pure, 5e-2, 1e-1},
};
#define N_POLICIES (sizeof policies / sizeof policies[0])

static const char *const cuda_rows[][2] = {
    {"tf32", "TF32 matmul policy"},
    {"pinned_host", "pinned host buffers"},
    {"async_copies", "async host-to-device copies"},
    {"cuda_graph", "CUDA graph"},
};
#define N_CUDA (sizeof cuda_rows / sizeof cuda_rows[0])

static ladder_variant baseline_variant(void) {
    return (ladder_variant){.attention = GPTX_ATTENTION_NAIVE,
                            .fused_qkv = 0,
                            .fused_norm_gelu = 0,
                            .fused_adamw = 0,
                            .fused_ce = 0,
                            .padded_vocab = 0,
                            .batch_mult = 1,
                            .precision = GPTX_PRECISION_FP32};
}

int ladder_rows_build(const char *mode, double tolerance_scale, ladder_row *rows) {
    int cumulative = strcmp(mode, "cumulative") == 0;
    if (!cumulative && strcmp(mode, "isolated") != 0) return -1;
    int n = 0;
    ladder_row *b = &rows[n++];
    memset(b, 0, sizeof *b);
    b->key = "baseline";
    snprintf(b->label, sizeof b->label, "baseline (textbook fp32)");
    snprintf(b->change, sizeof b->change, "naive attention, separate QKV, step-by-step LN/GELU, "
                                          "per-tensor AdamW, vocab 50257");
    b->v = baseline_variant();
    b->available = 1;
    b->is_baseline = 1;
    for (size_t c = 0; c < N_CHANGES; c++) {
        const ladder_row *ref = cumulative ? &rows[n - 1] : &rows[0];
        ladder_row *r = &rows[n++];
        *r = *ref;
        r->is_baseline = 0;
        r->key = changes[c].key;
        snprintf(r->label, sizeof r->label, cumulative ? "+ %s" : "%s alone", changes[c].name);
        snprintf(r->change, sizeof r->change, "%s", changes[c].change);
        changes[c].apply(&r->v);
        /* errors of independent changes add up: so do their tolerances */
        r->logits_tol = (ref->is_baseline ? 0.0 : ref->logits_tol) +
                        changes[c].logits_tol * tolerance_scale;
        if (changes[c].loss_tol < 0 || (!ref->is_baseline && ref->loss_tol < 0))
            r->loss_tol = -1.0;
        else
            r->loss_tol = (ref->is_baseline ? 0.0 : ref->loss_tol) +
                          changes[c].loss_tol * tolerance_scale;
    }
    /* the policies: cumulative after every change; isolated on top of a row
     * with every fp32 change (their own reference) */
    int all_fp32 = n - 1;
    if (!cumulative) {
        ladder_row *r = &rows[n++];
        *r = rows[n - 2];
        r->is_baseline = 0;
        r->key = "all_fp32";
        snprintf(r->label, sizeof r->label, "every fp32 kernel change");
        snprintf(r->change, sizeof r->change,
                 "all of the above but the batch at once (the policies' reference)");
        r->v = baseline_variant();
        r->logits_tol = r->loss_tol = 0.0;
        for (size_t c = 0; c < N_CHANGES; c++) {
            if (changes[c].loss_tol < 0) continue; /* the batch: keep the loss comparable */
            changes[c].apply(&r->v);
            r->logits_tol += changes[c].logits_tol * tolerance_scale;
            r->loss_tol += changes[c].loss_tol * tolerance_scale;
        }
        all_fp32 = n - 1;
    }
    int have_dnnl = (gptx_features() & GPTX_FEATURE_DNNL) != 0;
    for (size_t c = 0; c < N_POLICIES; c++) {
        const ladder_row *ref = cumulative ? &rows[n - 1] : &rows[all_fp32];
        ladder_row *r = &rows[n++];
        *r = *ref;
        r->is_baseline = 0;
        r->key = policies[c].key;
        snprintf(r->label, sizeof r->label, cumulative ? "+ %s" : "%s on those",
                 policies[c].name);
        snprintf(r->change, sizeof r->change, "%s", policies[c].change);
        policies[c].apply(&r->v);
        r->logits_tol = ref->logits_tol + policies[c].logits_tol * tolerance_scale;
        r->loss_tol = ref->loss_tol < 0 ? -1.0 : ref->loss_tol + policies[c].loss_tol * tolerance_scale;
        if (!have_dnnl) {
            r->available = 0;
            r->na_reason = "n/a (this build has no oneDNN: no CPU bf16 policies)";
        }
    }
    for (size_t c = 0; c < N_CUDA; c++) {
        ladder_row *r = &rows[n++];
        memset(r, 0, sizeof *r);
        r->key = cuda_rows[c][0];
        snprintf(r->label, sizeof r->label, "%s", cuda_rows[c][1]);
        snprintf(r->change, sizeof r->change, "CUDA only");
        r->available = 0;
        /* the ladder runs on the CPU backend; a CUDA build still lacks the
         * context options these rows would switch */
        r->na_reason = (gptx_features() & GPTX_FEATURE_CUDA)
                           ? "n/a (CUDA rows not in gptx-bench yet: no context option)"
                           : "n/a (needs the CUDA backend)";
    }
    return n;
}

void ladder_variant_describe(const ladder_variant *v, const ladder_shape *s, char *buf,
                             size_t size) {
    snprintf(buf, size, "%s attention, %s QKV, %s LN/GELU, %s AdamW, vocab %d%s, batch %d, %s",
             v->attention == GPTX_ATTENTION_NAIVE ? "naive" : "flash",
             v->fused_qkv ? "fused" : "separate", v->fused_norm_gelu ? "fused" : "step-by-step",
             v->fused_adamw ? "fused" : "per-tensor",
             v->padded_vocab ? s->padded_vocab : s->vocab, v->padded_vocab ? " (masked)" : "",
             v->batch_mult * s->batch, gptx_precision_name(v->precision));
}
