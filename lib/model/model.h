/* Model internals shared by model.c, model_layout.c and optimizer.c. */
#ifndef GPTX_MODEL_H
#define GPTX_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "context.h"

#define GPTX_NAME_MAX 48

/* One named parameter tensor: a view into the flat parameter buffer. */
typedef struct gptx_param_desc {
    char name[GPTX_NAME_MAX];
    int ndim;
    int64_t shape[2];
    size_t numel;
    size_t offset; /* elements from the start of the flat buffer */
} gptx_param_desc;

/* Indexes into the descriptor table for one transformer block. */
typedef struct gptx_layer_params {
    int ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
    int ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
} gptx_layer_params;

typedef struct gptx_layout {
    gptx_param_desc *tensors;
    int ntensors;
    size_t nparams;
    int wte, wpe, lnf_w, lnf_b, lm_head; /* lm_head == wte when tied */
    gptx_layer_params *layers;
} gptx_layout;

/* Builds the canonical parameter table for a validated config. */
int gptx_layout_build(gptx_layout *layout, const gptx_model_config *cfg);
void gptx_layout_free(gptx_layout *layout);
/* Index of a tensor by name, -1 if absent. */
int gptx_layout_find(const gptx_layout *layout, const char *name);

/* Activations saved by forward for backward, one set per layer, each a view
 * into one activation buffer sized for (B, T). */
typedef struct gptx_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (BT, C), (BT), (BT) */
    float *qkv;                       /* (BT, 3C) */
    float *atty, *att_lse;            /* (BT, C), (B, NH, T) */
    float *attproj, *residual2;       /* (BT, C) */
    float *ln2, *ln2_mean, *ln2_rstd; /* (BT, C), (BT), (BT) */
    float *fch, *fch_gelu;            /* (BT, 4C) */
    float *fcproj, *residual3;        /* (BT, C) */
    void *att_state;                  /* the backend's per-layer attention state (op_buffers) */
} gptx_layer_acts;

typedef enum { GPTX_PHASE_NONE, GPTX_PHASE_FORWARD, GPTX_PHASE_BACKWARD } gptx_phase;

struct gptx_model {
    gptx_handle h;     /* first (handle.h); its parent is ctx */
    gptx_context *ctx;
    gptx_model_config cfg;
    gptx_layout layout;
    /* flat device buffers, layout.nparams each: params [p] (param_bytes
     * per element, lib/core/param_storage.h), grads fp32 */
    float *params, *grads;
    size_t param_bytes;
    /* the backend's compute copy of the weights (NULL when the ops read the
     * parameters), wcopy_bytes per element; refreshed before the next
     * forward pass whenever the parameters changed */
    void *wcopy;
    size_t wcopy_bytes;
    int wcopy_stale;

    /* activations, (re)allocated when B*T grows; act_bytes per element of
     * an activation tensor (the backend's storage) */
    int act_B, act_T;
    size_t act_bytes;
    size_t res_bytes; /* per element of the residual stream (encoded, residual2/3, dresidual) */
    size_t act_size; /* bytes in act_buf */
    void *act_buf;
    int32_t *inputs, *targets; /* (BT) device copies */
    float *encoded;            /* (BT, C) */
    gptx_layer_acts *acts;     /* n_layer */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits;             /* (BT, Vp); becomes dlogits in backward */
    int dlogits_ready;         /* the last forward left dlogits, not logits (forward_backward) */
    float *losses;              /* (BT) */
    float *loss_lse;            /* (3 BT): lse, then backend statistics */
    /* backward scratch */
    float *dresidual, *dln, *datty, *dqkv, *dfch, *dfch_gelu;
    float *dres_act; /* dresidual in the activation type, when res_bytes differs */
    int dres_act_ready; /* dres_act already holds the current dresidual (layernorm_backward_act) */
    void *att_work, *qkv_work; /* the ops' shared scratch (op_buffers), NULL when none */
    /* the table this model runs on: the context's, with the kernel variants
     * of the context at creation applied by the backend (instance_ops), and
     * the backend argument its entries take: the context's instance, or,
     * profiled, the timing decorator's stand-in (profiled, lib/core/op_profile.h) */
    gptx_backend_ops ops;
    gptx_kernel_variants variants;
    gptx_backend *be;
    struct gptx_profiled *profiled;

    uint64_t params_version; /* counts gptx_model_params_changed calls */

    /* Gradient fusions the ops offer (backend.h grad_fusion, GPTX_GRAD_FUSE_*;
     * 0 under fp32 on the CPU, and on CUDA). ZERO: zero_grad only marks the
     * gradients pending and the next backward's first write of each tensor
     * overwrites it; whatever else reads or writes the gradients calls
     * gptx_model_grads_materialize first. NORM: backward leaves each
     * tensor's sum of squares in grad_sumsq (ntensors), valid until anything
     * else writes the gradients (gptx_model_grads_changed). */
    unsigned grad_fusion;
    int grads_zero_pending;
    double *grad_sumsq;
    int grad_sumsq_count; /* tensors summed by the backward in progress or last */
    int grad_sumsq_valid;

    /* Rank-invariant gradient sums (gptx_context_options.rank_invariant,
     * model_exact.c): every backward folds its gradient into exact bins
     * (EXACT_LEVELS int64 per parameter, one window per chunk); grads then
     * holds the last backward's own gradient until exact_dirty is cleared
     * by gptx_model_grads_materialize (the bins' sum, rounded once) or by
     * the communicator (the ranks' bins added first). NULL when off. */
    int64_t *exact_bins;
    int32_t *exact_win;
    int exact_dirty;

    int B, T;
    gptx_phase phase;
    int have_targets;
    int64_t loss_tokens;
    float loss;
};

/* Every write to m->params outside the ops of a forward/backward pass
 * (uploads, loads, optimizer steps) calls this: the compute copy of the
 * weights is refreshed before the next forward pass. */
void gptx_model_params_changed(gptx_model *m);
/* The same, for a write that also stored the compute copy of every
 * parameter (AdamW with the copy's refresh fused, over all of them): the
 * copy is current and no convert_weights follows. */
void gptx_model_params_and_copy_changed(gptx_model *m);
/* The compute copy at parameter element `elems`; NULL when there is none. */
float *gptx_model_copy_at(const gptx_model *m, size_t elems);
/* The model's weights become host[] (layout.nparams floats, in the layout's
 * order), as a load or an import restores them: uploaded, the compute copy
 * marked stale, the gradients zeroed and no pass in progress (the saved
 * activations are stale). Takes the context's lock (GPTX_HOLD): callable on
 * a model its caller has not entered. lib/io's checkpoint and import code
 * calls it instead of writing the model's buffers itself. */
int gptx_model_restore_weights(gptx_model *m, const float *host);

/* The gradients as they are: a zero_grad folded into the next backward
 * (grads_zero_pending) is carried out now with fill_f32. Everything that
 * reads or writes m->grads outside backward (get_gradient, the optimizer,
 * the communicator) calls it first. */
int gptx_model_grads_materialize(gptx_model *m);
/* Rank-invariant sums (model_exact.c): the bins and windows made (when the
 * context asks for them) and released; cleared (zero_grad, loads); the
 * float gradients zeroed for the next backward, which then holds only its
 * own gradient; that gradient folded in; the bins' value written to grads
 * (*what* the communicator calls after adding the ranks' bins). */
int gptx_model_exact_create(gptx_model *m);
void gptx_model_exact_release(gptx_model *m);
int gptx_model_exact_clear(gptx_model *m);
int gptx_model_exact_before_backward(gptx_model *m);
int gptx_model_exact_fold(gptx_model *m);
int gptx_model_exact_to_grads(gptx_model *m);

/* Anything that writes m->grads outside backward (all-reduce, fills, loads)
 * calls this: the sums of squares backward left no longer describe them. */
void gptx_model_grads_changed(gptx_model *m);
/* *sumsq = the squared gradient norm from the last backward's per-tensor
 * sums, added in tensor order; 0 (sumsq untouched) when there are none or
 * they are stale: the caller then makes the full sum_squares_to_host pass. */
int gptx_model_grad_sumsq(const gptx_model *m, double *sumsq);

/* For generation: runs the model on one row of T tokens (B = 1, T in
 * [1, context_length], ids checked) and writes the padded_vocab_size logits of
 * the last position only to host_logits, masked like gptx_model_forward's.
 * Activations are sized for max(T, T_reserve) rows (capped at the context
 * length) so a context growing by one token per call allocates once.
 * Leaves the model with no forward pass (get_logits and backward fail until
 * the next gptx_model_forward). */
int gptx_model_forward_last_logits(gptx_model *m, const int32_t *inputs, int T, int T_reserve,
                                   float *host_logits);

/* A generation cache of keys and values (lib/model/generator.c): cap positions,
 * gptx_model_kv_bytes(m, cap) bytes allocated through the context; pos0 is
 * where the next rows go (positions before it are filled). */
typedef struct gptx_kv {
    void *base;
    int cap, pos0;
} gptx_kv;

size_t gptx_model_kv_bytes(const gptx_model *m, int cap);
/* Runs n tokens at positions kv->pos0 .. kv->pos0 + n - 1 of a window whose
 * earlier positions are in the cache, stores their keys and values, and
 * writes the padded_vocab_size logits of the last one to host_logits (masked
 * like gptx_model_forward's). Leaves the model with no forward pass, as
 * gptx_model_forward_last_logits does. GPTX_ERR_UNSUPPORTED when the
 * backend has no cached attention. */
int gptx_model_forward_kv(gptx_model *m, const gptx_kv *kv, const int32_t *tokens, int n,
                          float *host_logits);

/* Called by backward each time a region [offset, offset + count) of the
 * flat gradient buffer is final: ln_f (+ an untied lm_head) first, then each
 * layer from the last, then the embeddings (+ a tied head). The regions are
 * contiguous, reported from the end of the buffer to its start, and cover it
 * exactly once. On a device the work that produced them may still be queued. */
typedef int (*gptx_grads_ready_fn)(void *arg, size_t offset, size_t count);

/* The checks of gptx_model_backward, without side effects (reported as func). */
int gptx_model_backward_check(const gptx_model *m, float loss_scale, const char *func);
/* gptx_model_backward with a hook (NULL: none); a failing hook stops backward. */
int gptx_model_backward_hooked(gptx_model *m, float loss_scale, gptx_grads_ready_fn ready,
                               void *arg, const char *func);

#endif
