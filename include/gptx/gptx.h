/*
 * gptx — train and sample GPT-2-style language models from C.
 *
 * Stable public API. Every handle is opaque; every fallible call returns a
 * gptx_status (0 = ok, negative = error) and leaves a readable message for the
 * calling thread in gptx_last_error(). Options structs carry their own size
 * (set by the matching *_init function) so fields can be appended later
 * without breaking the ABI.
 */
#ifndef GPTX_GPTX_H
#define GPTX_GPTX_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32) && defined(GPTX_BUILDING_SHARED)
#define GPTX_API __declspec(dllexport)
#elif defined(_WIN32) && !defined(GPTX_STATIC)
#define GPTX_API __declspec(dllimport)
#elif defined(__GNUC__) || defined(__clang__)
#define GPTX_API __attribute__((visibility("default")))
#else
#define GPTX_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version and features                                                     */
/* ------------------------------------------------------------------------ */

#define GPTX_VERSION_MAJOR 0
#define GPTX_VERSION_MINOR 1
#define GPTX_VERSION_PATCH 0
#define GPTX_VERSION_STRING "0.1.0"
/* Monotonic integer for compile-time comparisons: 0.1.0 -> 100. */
#define GPTX_VERSION_NUMBER \
    (GPTX_VERSION_MAJOR * 10000 + GPTX_VERSION_MINOR * 100 + GPTX_VERSION_PATCH)

/* Runtime version of the loaded library ("0.1.0"). */
GPTX_API const char *gptx_version(void);
/* Runtime version as (major, minor, patch); any pointer may be NULL. */
GPTX_API void gptx_version_numbers(int *major, int *minor, int *patch);

/* What this build of the library contains (bitmask of gptx_feature). */
typedef enum gptx_feature {
    GPTX_FEATURE_CPU = 1u << 0,  /* fp32 CPU reference backend (always) */
    GPTX_FEATURE_BLAS = 1u << 1, /* CPU matrix products through BLAS */
    GPTX_FEATURE_CUDA = 1u << 2, /* CUDA backend compiled in */
    GPTX_FEATURE_NCCL = 1u << 3, /* NCCL communicator compiled in */
    GPTX_FEATURE_MPI = 1u << 4   /* MPI communicator compiled in */
} gptx_feature;
GPTX_API unsigned gptx_features(void);

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                  */
/* ------------------------------------------------------------------------ */

typedef enum gptx_status {
    GPTX_OK = 0,
    GPTX_ERR_NULL = -1,          /* a required pointer or handle was NULL */
    GPTX_ERR_INVALID = -2,       /* an argument value is invalid (size <= 0, bad enum, ...) */
    GPTX_ERR_SHAPE = -3,         /* sizes do not fit (B*T, buffer counts, tensor shapes) */
    GPTX_ERR_TOKEN_RANGE = -4,   /* a token or target id is outside the vocabulary */
    GPTX_ERR_NO_MEMORY = -5,     /* host or device allocation failed */
    GPTX_ERR_NON_FINITE = -6,    /* loss or gradient norm is NaN or infinite */
    GPTX_ERR_MISMATCH = -7,      /* objects that do not belong together (optimizer/model) */
    GPTX_ERR_STATE = -8,         /* call out of order (backward before forward, ...) */
    GPTX_ERR_UNSUPPORTED = -9,   /* backend or feature not available in this build/machine */
    GPTX_ERR_NOT_FOUND = -10,    /* no such name (parameter, ...) */
    GPTX_ERR_BACKEND = -11,      /* the backend (BLAS, CUDA, ...) reported a failure */
    GPTX_ERR_IO = -12,           /* reading or writing a file failed */
    GPTX_ERR_FORMAT = -13        /* a file is corrupt, truncated or of the wrong version */
} gptx_status;

/* Message describing the last error on the calling thread ("" if none).
 * The pointer stays valid until the next gptx call on the same thread. */
GPTX_API const char *gptx_last_error(void);
/* Clears the calling thread's last error message. */
GPTX_API void gptx_clear_error(void);
/* Symbolic name of a status ("GPTX_ERR_SHAPE"), or "GPTX_UNKNOWN". */
GPTX_API const char *gptx_status_name(int status);

/* ------------------------------------------------------------------------ */
/* Context: backend, device, threads, memory accounting                     */
/* ------------------------------------------------------------------------ */

typedef struct gptx_context gptx_context;

typedef enum gptx_backend_kind {
    GPTX_BACKEND_AUTO = 0, /* CUDA when compiled in and a device is present, else CPU */
    GPTX_BACKEND_CPU = 1,
    GPTX_BACKEND_CUDA = 2
} gptx_backend_kind;

typedef struct gptx_context_options {
    size_t struct_size;   /* set by gptx_context_options_init */
    int backend;          /* gptx_backend_kind */
    int device;           /* device ordinal (CUDA); ignored on CPU */
    int num_threads;      /* CPU worker threads incl. BLAS; 0 = number of online cores */
    int deterministic;    /* 1 = bitwise repeatable results (CPU: also across thread counts) */
} gptx_context_options;

GPTX_API void gptx_context_options_init(gptx_context_options *opts);
/* opts may be NULL for the defaults. */
GPTX_API int gptx_context_create(gptx_context **out, const gptx_context_options *opts);
GPTX_API void gptx_context_destroy(gptx_context *ctx);
/* Backend that was selected: "cpu" or "cuda". */
GPTX_API const char *gptx_context_backend_name(const gptx_context *ctx);
GPTX_API int gptx_context_num_threads(const gptx_context *ctx);

/* Memory the library holds through this context, in bytes.
 * allocated: bytes in live buffers (parameters, gradients, optimizer state,
 *            activations, scratch) as requested by the library;
 * reserved:  bytes the backend's allocator holds from the system for them
 *            (>= allocated: alignment padding, cached blocks);
 * peak:      highest value of `allocated` since creation or the last reset.
 * Host-side bookkeeping (handles, name tables) is not included. */
typedef struct gptx_memory_stats {
    size_t struct_size;
    uint64_t allocated;
    uint64_t reserved;
    uint64_t peak;
} gptx_memory_stats;

GPTX_API void gptx_memory_stats_init(gptx_memory_stats *stats);
GPTX_API int gptx_context_memory(const gptx_context *ctx, gptx_memory_stats *stats);
GPTX_API int gptx_context_reset_peak_memory(gptx_context *ctx);
/* Waits until all queued work of the context has finished. */
GPTX_API int gptx_context_synchronize(gptx_context *ctx);

/* ------------------------------------------------------------------------ */
/* Model                                                                    */
/* ------------------------------------------------------------------------ */

typedef struct gptx_model gptx_model;

/* Targets equal to this value are ignored by the loss (not counted in the mean). */
#define GPTX_IGNORE_INDEX (-1)

typedef struct gptx_model_config {
    size_t struct_size;     /* set by gptx_model_config_init */
    int vocab_size;         /* real vocabulary, e.g. 50257 */
    int padded_vocab_size;  /* rows of wte / lm_head; 0 = same as vocab_size */
    int context_length;     /* maximum T (rows of wpe) */
    int n_layer;
    int n_head;
    int n_embd;             /* width C; must be divisible by n_head */
    int qkv_bias;           /* 1 = attn.c_attn has a bias */
    int tied_head;          /* 1 = lm_head shares wte; 0 = separate lm_head.weight */
    int mask_padded_logits; /* 1 = padded logits are -inf (objective == unpadded one) */
    float layernorm_eps;
} gptx_model_config;

/* Fills the GPT-2 124M configuration (50257 padded to 50304, masked). */
GPTX_API void gptx_model_config_init(gptx_model_config *cfg);

GPTX_API int gptx_model_create(gptx_model **out, gptx_context *ctx, const gptx_model_config *cfg);
GPTX_API void gptx_model_destroy(gptx_model *model);
GPTX_API int gptx_model_get_config(const gptx_model *model, gptx_model_config *cfg);

/* GPT-2 initialisation from a seed: weights N(0, 0.02), residual projections
 * (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2*n_layer)), biases 0, LayerNorm
 * weight 1, padded vocabulary rows 0. Also zeroes the gradients. */
GPTX_API int gptx_model_init_random(gptx_model *model, uint64_t seed);

/* Forward pass on a batch of B rows of T tokens (T <= context_length).
 * inputs: B*T token ids in [0, vocab_size). targets: NULL (no loss), or B*T ids
 * in [0, vocab_size) or GPTX_IGNORE_INDEX. With targets, *loss (if not NULL)
 * receives the mean cross-entropy over the non-ignored targets.
 * Returns GPTX_ERR_NON_FINITE if the loss is NaN or infinite. */
GPTX_API int gptx_model_forward(gptx_model *model, const int32_t *inputs, const int32_t *targets,
                                int B, int T, float *loss);
/* Accumulates into the gradients d(loss_scale * mean loss)/d(parameters) of
 * the last forward pass, which must have had targets. Overwrites the logits. */
GPTX_API int gptx_model_backward(gptx_model *model, float loss_scale);
GPTX_API int gptx_model_zero_grad(gptx_model *model);

/* Logits of the last forward pass, (B, T, padded_vocab_size) row-major fp32.
 * Masked padded columns hold -INFINITY. count must equal B*T*padded_vocab.
 * Not available after backward (it reuses the buffer for the logit gradient). */
GPTX_API int gptx_model_get_logits(const gptx_model *model, float *dst, size_t count);
/* Number of targets counted by the last forward pass's loss. */
GPTX_API int gptx_model_num_loss_tokens(const gptx_model *model, int64_t *count);

/* Parameters, by canonical Hugging Face GPT-2 names ("wte.weight",
 * "h.3.attn.c_attn.weight", "lm_head.weight", ...). Weight matrices use
 * nn.Linear orientation (out_features, in_features). */
GPTX_API size_t gptx_model_num_parameters(const gptx_model *model); /* elements */
GPTX_API int gptx_model_num_tensors(const gptx_model *model);

#define GPTX_MAX_DIMS 4
typedef struct gptx_tensor_info {
    size_t struct_size;
    const char *name;  /* owned by the model */
    int ndim;
    int64_t shape[GPTX_MAX_DIMS];
    size_t numel;
} gptx_tensor_info;

GPTX_API void gptx_tensor_info_init(gptx_tensor_info *info);
GPTX_API int gptx_model_tensor_info(const gptx_model *model, int index, gptx_tensor_info *info);
/* Index of a tensor by name, or GPTX_ERR_NOT_FOUND. */
GPTX_API int gptx_model_find_tensor(const gptx_model *model, const char *name, int *index);
/* Copy a parameter or its gradient as host fp32; count must equal numel. */
GPTX_API int gptx_model_get_parameter(const gptx_model *model, const char *name, float *dst,
                                      size_t count);
GPTX_API int gptx_model_set_parameter(gptx_model *model, const char *name, const float *src,
                                      size_t count);
GPTX_API int gptx_model_get_gradient(const gptx_model *model, const char *name, float *dst,
                                     size_t count);

/* ------------------------------------------------------------------------ */
/* Optimizer: AdamW, fused over all parameters                              */
/* ------------------------------------------------------------------------ */

typedef struct gptx_optimizer gptx_optimizer;

typedef enum gptx_decay_policy {
    GPTX_DECAY_MATRICES = 0, /* weight decay on 2-D tensors only (default) */
    GPTX_DECAY_ALL = 1,
    GPTX_DECAY_NONE = 2
} gptx_decay_policy;

typedef struct gptx_adamw_options {
    size_t struct_size; /* set by gptx_adamw_options_init */
    float lr;           /* default 3e-4 */
    float beta1;        /* default 0.9 */
    float beta2;        /* default 0.95 */
    float eps;          /* default 1e-8 */
    float weight_decay; /* default 0.1, decoupled (AdamW) */
    float grad_clip;    /* clip the global L2 norm to this; 0 = off (default 1.0) */
    int decay_policy;   /* gptx_decay_policy */
} gptx_adamw_options;

GPTX_API void gptx_adamw_options_init(gptx_adamw_options *opts);
GPTX_API int gptx_optimizer_create(gptx_optimizer **out, gptx_model *model,
                                   const gptx_adamw_options *opts);
GPTX_API void gptx_optimizer_destroy(gptx_optimizer *opt);
/* One AdamW update of `model` (which must be the model the optimizer was
 * created for) from its accumulated gradients, with bias correction.
 * *grad_norm (if not NULL) receives the global gradient L2 norm before
 * clipping. If the norm is not finite nothing is updated and
 * GPTX_ERR_NON_FINITE is returned. */
GPTX_API int gptx_optimizer_step(gptx_optimizer *opt, gptx_model *model, float *grad_norm);
GPTX_API int gptx_optimizer_set_lr(gptx_optimizer *opt, float lr);
GPTX_API int gptx_optimizer_get_lr(const gptx_optimizer *opt, float *lr);
/* Number of updates applied so far. */
GPTX_API int gptx_optimizer_get_step(const gptx_optimizer *opt, int64_t *step);

#ifdef __cplusplus
}
#endif

#endif /* GPTX_GPTX_H */
