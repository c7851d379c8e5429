/*
 * gptx — train and sample GPT-2-style language models from C.
 *
 * Stable public API. Every handle is opaque; every fallible call returns a
 * gptx_status (0 = ok, negative = error) and leaves a readable message for the
 * calling thread in gptx_last_error(). Every struct that crosses the ABI
 * follows one contract ("Structs" below, docs/abi.md): the caller's header
 * declares its size, the library never reads or writes past it, so fields can
 * be appended without breaking programs built against an older header.
 * Kernel variants for ablations and other knobs without that promise live in
 * <gptx/gptx_experimental.h>.
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
#define GPTX_VERSION_MINOR 7
#define GPTX_VERSION_PATCH 0
#define GPTX_VERSION_STRING "0.7.0"
/* Monotonic integer for compile-time comparisons: 0.7.0 -> 700. */
#define GPTX_VERSION_NUMBER \
    (GPTX_VERSION_MAJOR * 10000 + GPTX_VERSION_MINOR * 100 + GPTX_VERSION_PATCH)
/* The ABI generation: the N of the SONAME libgptx.so.N. It changes only when
 * a program built against an older header of this library could break. */
#define GPTX_ABI_VERSION 1

/* Runtime version of the loaded library ("0.3.0"). */
GPTX_API const char *gptx_version(void);
/* Runtime version as (major, minor, patch); any pointer may be NULL. */
GPTX_API void gptx_version_numbers(int *major, int *minor, int *patch);

/* What this build of the library contains (bitmask of gptx_feature). */
typedef enum gptx_feature {
    GPTX_FEATURE_CPU = 1u << 0,  /* fp32 CPU reference backend (always) */
    GPTX_FEATURE_BLAS = 1u << 1, /* CPU matrix products through BLAS */
    GPTX_FEATURE_CUDA = 1u << 2, /* the CUDA backend's module loads here (libgptx_cuda.so) */
    GPTX_FEATURE_NCCL = 1u << 3, /* ... and holds the NCCL communicator */
    GPTX_FEATURE_MPI = 1u << 4,  /* the MPI communicator's module loads here (libgptx_mpi.so) */
    GPTX_FEATURE_DNNL = 1u << 5  /* CPU bf16 policies (products through oneDNN) compiled in */
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
    GPTX_ERR_FORMAT = -13,       /* a file is corrupt, truncated or of the wrong version */
    GPTX_ERR_MISUSE = -14,       /* (0.5.0) a handle that is not a live object of its type:
                                  * destroyed, of another type, or never created */
    GPTX_ERR_BUSY = -15          /* (0.5.0) another thread is inside a call on the same
                                  * object; nothing was done ("Threads and lifetimes") */
} gptx_status;

/* Message describing the last error on the calling thread ("" if none).
 * The pointer stays valid until the next gptx call on the same thread. */
GPTX_API const char *gptx_last_error(void);
/* Clears the calling thread's last error message. */
GPTX_API void gptx_clear_error(void);
/* Symbolic name of a status ("GPTX_ERR_SHAPE"), or "GPTX_UNKNOWN". */
GPTX_API const char *gptx_status_name(int status);

/* ------------------------------------------------------------------------ */
/* Structs: the contract every struct of this header follows                */
/* ------------------------------------------------------------------------ */

/* Each struct below starts with `size_t struct_size`: how many bytes of it
 * the caller's header declares, which is the end of its last field
 * (GPTX_<TYPE>_SIZE), not sizeof (whose tail padding could hide a field
 * appended later). Fill it with the struct's *_init macro, which passes that
 * size to the library for you, then set the fields you want:
 *     gptx_context_options o;
 *     gptx_context_options_init(&o);   // o.struct_size = GPTX_CONTEXT_OPTIONS_SIZE
 *     o.num_threads = 2;
 * The rules, for every struct (inputs, outputs, saved state):
 *   - the library never reads or writes a byte at or past struct_size;
 *   - input fields past struct_size (a program built against an older
 *     header) take the defaults *_init gives them;
 *   - outputs are written up to min(struct_size, the library's size);
 *     struct_size itself is left as the caller set it;
 *   - a struct_size below the end of the first field is GPTX_ERR_INVALID
 *     (usually a struct that was never initialised); one larger than the
 *     library knows (a program built against a newer header) is
 *     GPTX_ERR_UNSUPPORTED, and its *_init zeroes the bytes it does not know.
 * *_init returns GPTX_OK or one of those statuses. Fields are only ever
 * appended, and GPTX_<TYPE>_SIZE moves to the new last field. */
#define GPTX_STRUCT_END(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

/* ------------------------------------------------------------------------ */
/* Threads and lifetimes: the rules for every object                        */
/* ------------------------------------------------------------------------ */

/* Threads. Any object may be used from any thread, and different objects
 * from different threads at the same time, under these rules:
 *   - model, optimizer, generator, sampler, data loader, timer, communicator:
 *     one call at a time on each. A call that overlaps another thread's call
 *     on the same object, or on an object it works through (a generator's or
 *     an optimizer's model, gptx_generate's sampler, a train state's
 *     optimizer, sampler and loaders), does nothing and returns
 *     GPTX_ERR_BUSY at once; it never waits and never computes on the other
 *     call's state, and retrying later is safe. Calls that only read what is
 *     fixed at creation run beside any call: gptx_model_get_config,
 *     _num_parameters, _num_tensors, _tensor_info, _find_tensor,
 *     gptx_optimizer_get_shard, gptx_dataloader_info_get, _get_options,
 *     gptx_comm_get_options, _engine_name, _rank, _world_size, _local_rank,
 *     _local_world_size.
 *   - The check is per call: a sequence that belongs together (a forward
 *     pass, then gptx_model_get_logits; gradients, then the optimizer's step)
 *     is the caller's to keep together. Use one object from one thread at a
 *     time, or hold a lock of your own around the sequence.
 *   - context: any number of threads. Every call that runs on its backend
 *     (a call on the context, or on a model, optimizer, generator or timer
 *     made from it) holds the context's lock, so such calls
 *     take turns (they wait; they are not refused): several models of one
 *     context may be used from several threads, one call at a time, each
 *     with the results it would have alone. Models of different contexts
 *     run in parallel. gptx_compare_models holds both models throughout and
 *     each context only while its model runs there.
 *   - tokenizer: nothing changes after loading; any number of threads may
 *     encode and decode with one tokenizer at once.
 *   - gptx_last_error() and gptx_clear_error() are per thread.
 *
 * Lifetimes. An object made from another keeps it alive: a model, data
 * loader, timer or communicator its context; an optimizer or generator its
 * model; a sharded optimizer its communicator. So destroy calls may come
 * in any order. gptx_*_destroy ends the handle at once (any later call with
 * it is GPTX_ERR_MISUSE), and the object's memory goes when the last object
 * made from it is destroyed too: a generator whose model was destroyed goes
 * on generating with that model, while calls that name the destroyed model
 * (gptx_optimizer_step(opt, model)) are refused. A destroy while another
 * thread is inside a call on the object does nothing (the calling thread's
 * gptx_last_error() says so): finish the calls on an object first. The MPI
 * engine finalizes MPI when its communicator is released, i.e. after the
 * last sharded optimizer on it is destroyed too.
 *
 * Handle checks. Every handle carries a magic value checked on entry to
 * every call and changed by its destroy (SQLite's habit): a handle that was
 * destroyed, one of another type, or a pointer to memory that holds no gptx
 * object is GPTX_ERR_MISUSE with a message naming the argument, not a
 * crash; a second destroy does nothing and sets the message. Calls that
 * return a value instead of a status return their empty value (0, -1 or "")
 * and set the message. Limits: the library keeps a destroyed object's
 * memory (marked dead) only until 64 more objects have been released in the
 * process; a handle destroyed longer ago than that points to freed memory,
 * and using it is undefined behaviour like any use after free (the memory
 * may hold a new object by then). The check catches mistakes; it is no
 * substitute for not using a handle after its destroy. NULL is
 * GPTX_ERR_NULL, and gptx_*_destroy(NULL) does nothing. */

/* ------------------------------------------------------------------------ */
/* Context: backend, device, threads, memory accounting                     */
/* ------------------------------------------------------------------------ */

/* Any number of threads; calls that run on the backend take turns on the
 * context's lock. Kept alive by the objects made from it ("Threads and
 * lifetimes" above). */
typedef struct gptx_context gptx_context;

typedef enum gptx_backend_kind {
    GPTX_BACKEND_AUTO = 0, /* CUDA when compiled in and a device is present, else CPU */
    GPTX_BACKEND_CPU = 1,
    GPTX_BACKEND_CUDA = 2
} gptx_backend_kind;

typedef struct gptx_context_options {
    size_t struct_size;   /* filled by gptx_context_options_init */
    int backend;          /* gptx_backend_kind */
    int device;           /* device ordinal (CUDA); ignored on CPU */
    int num_threads;      /* CPU worker threads incl. BLAS; 0 = number of online cores */
    int deterministic;    /* 1 = bitwise repeatable results (CPU: also across thread counts);
                           * 0 or 1, anything else is GPTX_ERR_INVALID */
    /* Numeric precision policy (gptx_precision; docs/precision.md). The CPU
     * backend offers FP32 (its default) and, in builds with oneDNN
     * (GPTX_FEATURE_DNNL), BF16 and BF16_PURE; CUDA all of them. */
    int precision;
    /* 1 = BF16_PURE rounds each updated parameter and moment stochastically
     * (reproducible: keyed by seed, step and index); 0 = round to nearest
     * even. Only valid with GPTX_PRECISION_BF16_PURE. */
    int stochastic_rounding;
    /* 1 = the CUDA backend captures the fixed kernel sequences of a training
     * micro-step as CUDA graphs once a (shapes, buffers) signature repeats,
     * and replays them (docs/cuda.md); results are unchanged. 0 (default) or
     * 1; the CPU backend ignores it. */
    int cuda_graphs;
    /* 1 = rank-invariant training (docs/distributed.md, "Rank-invariant
     * training"): every backward pass's gradient is added exactly (integer
     * bins, rounded once when read), so the accumulated gradient, and the
     * sum gptx_comm_average_gradients forms over the ranks, do not depend on
     * the order or the split of the backward passes over micro-steps and
     * ranks; the communicator then adds the ranks' gradients without
     * token weighting (weight each pass with its loss_scale). Costs 24
     * bytes per parameter and a pass per backward. 0 (default) or 1; the CPU
     * backend only (GPTX_ERR_UNSUPPORTED on CUDA; AUTO takes the CPU).
     * Since 0.8. */
    int rank_invariant;
} gptx_context_options;
#define GPTX_CONTEXT_OPTIONS_SIZE GPTX_STRUCT_END(gptx_context_options, rank_invariant)

typedef enum gptx_precision {
    GPTX_PRECISION_DEFAULT = 0,  /* the backend's default: CPU fp32, CUDA bf16 (mixed) */
    GPTX_PRECISION_FP32 = 1,     /* fp32 everywhere */
    GPTX_PRECISION_TF32 = 2,     /* fp32 storage; matrix products take TF32 inputs */
    GPTX_PRECISION_BF16 = 3,     /* bf16 activations and weight copy; fp32 master weights,
                                  * gradients and AdamW moments */
    GPTX_PRECISION_BF16_PURE = 4 /* bf16 parameters and moments too (update computed in fp32) */
} gptx_precision;

/* Defaults: backend AUTO, device 0, num_threads 0, deterministic 1,
 * precision DEFAULT, stochastic_rounding 0, cuda_graphs 0, rank_invariant 0. */
GPTX_API int gptx_context_options_init_sized(gptx_context_options *opts, size_t size);
#define gptx_context_options_init(opts) \
    gptx_context_options_init_sized((opts), GPTX_CONTEXT_OPTIONS_SIZE)
/* opts may be NULL for the defaults. */
GPTX_API int gptx_context_create(gptx_context **out, const gptx_context_options *opts);
/* The options the context was created with (defaults filled in); opts must
 * have been filled by gptx_context_options_init. */
GPTX_API int gptx_context_get_options(const gptx_context *ctx, gptx_context_options *opts);
GPTX_API void gptx_context_destroy(gptx_context *ctx);
/* Backend that was selected: "cpu" or "cuda". */
GPTX_API const char *gptx_context_backend_name(const gptx_context *ctx);
GPTX_API int gptx_context_num_threads(const gptx_context *ctx);
/* The precision policy in effect (a gptx_precision, never DEFAULT: the
 * backend's choice is resolved), or a negative status. */
GPTX_API int gptx_context_precision(const gptx_context *ctx);
/* "fp32", "tf32", "bf16", "bf16_pure", "default"; NULL for other values. */
GPTX_API const char *gptx_precision_name(int precision);
/* The gptx_precision for a name of gptx_precision_name, or GPTX_ERR_INVALID. */
GPTX_API int gptx_precision_from_name(const char *name);

/* What computes under this context, for reports and benchmarks. */
typedef struct gptx_context_info {
    size_t struct_size;  /* filled by gptx_context_info_init */
    char backend[16];    /* "cpu" or "cuda" */
    int precision;       /* the policy in effect (gptx_context_precision) */
    int num_threads;     /* the context's threads (CPU) */
    /* 1 = the hardware converts and multiplies bf16 itself (CPU: AVX512_BF16,
     * with AMX-BF16 where oneDNN finds it; CUDA: compute capability 8.0 or
     * newer); 0 = bf16 would be emulated (slower, the same results) */
    int bf16_native;
    /* what runs the matrix products under this policy, e.g. "OpenBLAS 0.3.21
     * sgemm (SkylakeX)" or "oneDNN 2.6.3 brg:avx512_core_amx_bf16" */
    char products[96];
} gptx_context_info;
#define GPTX_CONTEXT_INFO_SIZE GPTX_STRUCT_END(gptx_context_info, products)

GPTX_API int gptx_context_info_init_sized(gptx_context_info *info, size_t size);
#define gptx_context_info_init(info) gptx_context_info_init_sized((info), GPTX_CONTEXT_INFO_SIZE)
GPTX_API int gptx_context_get_info(const gptx_context *ctx, gptx_context_info *info);

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
#define GPTX_MEMORY_STATS_SIZE GPTX_STRUCT_END(gptx_memory_stats, peak)

GPTX_API int gptx_memory_stats_init_sized(gptx_memory_stats *stats, size_t size);
#define gptx_memory_stats_init(stats) gptx_memory_stats_init_sized((stats), GPTX_MEMORY_STATS_SIZE)
GPTX_API int gptx_context_memory(const gptx_context *ctx, gptx_memory_stats *stats);
GPTX_API int gptx_context_reset_peak_memory(gptx_context *ctx);
/* Waits until all queued work of the context has finished. */
GPTX_API int gptx_context_synchronize(gptx_context *ctx);

/* ------------------------------------------------------------------------ */
/* Model                                                                    */
/* ------------------------------------------------------------------------ */

/* One call at a time (else GPTX_ERR_BUSY), the configuration and tensor
 * queries excepted; keeps its context alive, and is kept alive by its
 * optimizers and generators ("Threads and lifetimes"). */
typedef struct gptx_model gptx_model;

/* Targets equal to this value are ignored by the loss (not counted in the mean). */
#define GPTX_IGNORE_INDEX (-1)

typedef struct gptx_model_config {
    size_t struct_size;     /* filled by gptx_model_config_init */
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
#define GPTX_MODEL_CONFIG_SIZE GPTX_STRUCT_END(gptx_model_config, layernorm_eps)

/* Fills the GPT-2 124M configuration (50257 padded to 50304, masked). */
GPTX_API int gptx_model_config_init_sized(gptx_model_config *cfg, size_t size);
#define gptx_model_config_init(cfg) gptx_model_config_init_sized((cfg), GPTX_MODEL_CONFIG_SIZE)

GPTX_API int gptx_model_create(gptx_model **out, gptx_context *ctx, const gptx_model_config *cfg);
GPTX_API void gptx_model_destroy(gptx_model *model);
/* The model's configuration (padded_vocab_size resolved); cfg must have
 * been filled by gptx_model_config_init. */
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
/* gptx_model_forward with targets, then gptx_model_backward(loss_scale), in
 * one call: the same loss and the same gradients, bit for bit, but the
 * softmax cross-entropy and its gradient are computed in one pass over the
 * logits (which is then all their buffer holds: gptx_model_get_logits fails
 * until the next forward). The usual training micro-step. targets must not be
 * NULL. A non-finite loss returns GPTX_ERR_NON_FINITE (and *loss) before any
 * gradient has been touched. */
GPTX_API int gptx_model_forward_backward(gptx_model *model, const int32_t *inputs,
                                         const int32_t *targets, int B, int T, float loss_scale,
                                         float *loss);
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
#define GPTX_TENSOR_INFO_SIZE GPTX_STRUCT_END(gptx_tensor_info, numel)

GPTX_API int gptx_tensor_info_init_sized(gptx_tensor_info *info, size_t size);
#define gptx_tensor_info_init(info) gptx_tensor_info_init_sized((info), GPTX_TENSOR_INFO_SIZE)
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

/* One call at a time (else GPTX_ERR_BUSY); a step also claims its model.
 * Keeps its model (and a sharded one its communicator) alive. */
typedef struct gptx_optimizer gptx_optimizer;

typedef enum gptx_decay_policy {
    GPTX_DECAY_MATRICES = 0, /* weight decay on 2-D tensors only (default) */
    GPTX_DECAY_ALL = 1,
    GPTX_DECAY_NONE = 2
} gptx_decay_policy;

typedef struct gptx_adamw_options {
    size_t struct_size; /* filled by gptx_adamw_options_init */
    float lr;           /* default 3e-4; in [0, 10] (also for set_lr): AdamW moves each
                         * weight by about lr a step, so more is a typo, not a choice */
    float beta1;        /* default 0.9 */
    float beta2;        /* default 0.95 */
    float eps;          /* default 1e-8 */
    float weight_decay; /* default 0.1, decoupled (AdamW) */
    float grad_clip;    /* clip the global L2 norm to this; 0 = off (default 1.0) */
    int decay_policy;   /* gptx_decay_policy */
    /* Philox key of the stochastic rounding of the pure-bf16 policy (context
     * option stochastic_rounding): draws are keyed by (rounding_seed, step,
     * element), so a run and its resumption from a checkpoint, which records
     * it, are reproducible. Default 0; unused under other policies. */
    uint64_t rounding_seed;
} gptx_adamw_options;
#define GPTX_ADAMW_OPTIONS_SIZE GPTX_STRUCT_END(gptx_adamw_options, rounding_seed)

GPTX_API int gptx_adamw_options_init_sized(gptx_adamw_options *opts, size_t size);
#define gptx_adamw_options_init(opts) \
    gptx_adamw_options_init_sized((opts), GPTX_ADAMW_OPTIONS_SIZE)
GPTX_API int gptx_optimizer_create(gptx_optimizer **out, gptx_model *model,
                                   const gptx_adamw_options *opts);
GPTX_API void gptx_optimizer_destroy(gptx_optimizer *opt);
/* One AdamW update of `model` (which must be the model the optimizer was
 * created for) from its accumulated gradients, with bias correction.
 * *grad_norm (if not NULL) receives the global gradient L2 norm before
 * clipping. If the norm is not finite nothing is updated and
 * GPTX_ERR_NON_FINITE is returned. */
GPTX_API int gptx_optimizer_step(gptx_optimizer *opt, gptx_model *model, float *grad_norm);
/* lr in [0, 10], as in gptx_adamw_options; otherwise GPTX_ERR_INVALID and
 * the rate in effect stays. */
GPTX_API int gptx_optimizer_set_lr(gptx_optimizer *opt, float lr);
GPTX_API int gptx_optimizer_get_lr(const gptx_optimizer *opt, float *lr);
/* Number of updates applied so far. */
GPTX_API int gptx_optimizer_get_step(const gptx_optimizer *opt, int64_t *step);
/* The options in effect (lr as last set); opts must have been filled by
 * gptx_adamw_options_init. */
GPTX_API int gptx_optimizer_get_options(const gptx_optimizer *opt, gptx_adamw_options *opts);

/* ------------------------------------------------------------------------ */
/* Tokenizer: GPT-2 byte-level BPE                                          */
/* ------------------------------------------------------------------------ */

/* Read-only after loading: any number of threads may use one at once. */
typedef struct gptx_tokenizer gptx_tokenizer;

/* Loads OpenAI's GPT-2 files (encoder.json, vocab.bpe). */
GPTX_API int gptx_tokenizer_load_gpt2(gptx_tokenizer **out, const char *encoder_json_path,
                                      const char *vocab_bpe_path);
GPTX_API void gptx_tokenizer_destroy(gptx_tokenizer *tok);
GPTX_API int gptx_tokenizer_vocab_size(const gptx_tokenizer *tok); /* 50257 for GPT-2 */
GPTX_API int gptx_tokenizer_eot_token(const gptx_tokenizer *tok);  /* 50256 for GPT-2 */

/* Encodes len bytes of text (any bytes: each maximal run of invalid UTF-8
 * is BPE-encoded as a piece of its own, so decode(encode(x)) == x; see
 * docs/tokenizer.md). With allow_special = 1, "<|endoftext|>" becomes the EOT
 * token; with 0 it is ordinary text (tiktoken's encode_ordinary).
 * A text of len bytes never needs more than len ids, so capacity >= len is
 * always enough; with less, GPTX_ERR_SHAPE is returned and *n_ids holds the
 * count needed. */
GPTX_API int gptx_tokenizer_encode(const gptx_tokenizer *tok, const char *text, size_t len,
                                   int allow_special, int32_t *ids, size_t capacity,
                                   size_t *n_ids);
/* Decodes ids to bytes (not NUL-terminated). With too small a capacity,
 * GPTX_ERR_SHAPE is returned and *out_len holds the size needed. Joining the
 * bytes of consecutive calls is lossless even when a call splits a UTF-8
 * character. */
GPTX_API int gptx_tokenizer_decode(const gptx_tokenizer *tok, const int32_t *ids, size_t n,
                                   char *out, size_t capacity, size_t *out_len);
/* The bytes of one token; *bytes stays owned by the tokenizer. */
GPTX_API int gptx_tokenizer_token_bytes(const gptx_tokenizer *tok, int32_t id, const char **bytes,
                                        size_t *len);

/* ------------------------------------------------------------------------ */
/* Token files (llm.c shard format) and the data loader                     */
/* ------------------------------------------------------------------------ */

/* llm.c shards: 256 int32 header (magic 20240520, version 1, token count),
 * then uint16 tokens. Writes atomically (temp file, fsync, rename); ids must
 * be in [0, 65535]. */
GPTX_API int gptx_shard_write(const char *path, const int32_t *tokens, size_t n);
/* Reads a whole shard; *tokens is malloc'ed (free with gptx_free). */
GPTX_API int gptx_shard_read(const char *path, int32_t **tokens, size_t *n);
/* Frees memory the library handed to the caller. */
GPTX_API void gptx_free(void *ptr);

/* One call at a time (else GPTX_ERR_BUSY), info and options excepted; a
 * batch stays valid until the loader's next call. Keeps its context (if
 * any) alive. */
typedef struct gptx_dataloader gptx_dataloader;

typedef struct gptx_dataloader_options {
    size_t struct_size; /* filled by gptx_dataloader_options_init */
    int batch_size;     /* B (default 4) */
    int seq_len;        /* T (default 64); a window is T+1 tokens */
    int stride;         /* tokens between window starts; 0 = T (non-overlapping) */
    int shuffle;        /* 1 = new window order each epoch, from seed and epoch */
    uint64_t seed;
    int drop_last;      /* 1 = drop the last partial batch of an epoch (default 1) */
    int rank;           /* data-parallel rank in [0, world_size) */
    int world_size;     /* ranks sharing the data: each gets disjoint windows */
    int vocab_size;     /* ids >= vocab_size are an error; 0 = no check */
    int prefetch;       /* 1 = a background thread prepares the next batch */
} gptx_dataloader_options;
#define GPTX_DATALOADER_OPTIONS_SIZE GPTX_STRUCT_END(gptx_dataloader_options, prefetch)

GPTX_API int gptx_dataloader_options_init_sized(gptx_dataloader_options *opts, size_t size);
#define gptx_dataloader_options_init(opts) \
    gptx_dataloader_options_init_sized((opts), GPTX_DATALOADER_OPTIONS_SIZE)
/* From llm.c shard files, read in the given order. ctx may be NULL; with a
 * CUDA context the batch buffers are pinned host memory. */
GPTX_API int gptx_dataloader_create_from_files(gptx_dataloader **out, gptx_context *ctx,
                                               const char *const *paths, int n_paths,
                                               const gptx_dataloader_options *opts);
/* From tokens in memory (copied). */
GPTX_API int gptx_dataloader_create_from_tokens(gptx_dataloader **out, gptx_context *ctx,
                                                const int32_t *tokens, size_t n,
                                                const gptx_dataloader_options *opts);
GPTX_API void gptx_dataloader_destroy(gptx_dataloader *dl);
/* The options the loader was created with (defaults filled in); opts must
 * have been filled by gptx_dataloader_options_init. */
GPTX_API int gptx_dataloader_get_options(const gptx_dataloader *dl,
                                         gptx_dataloader_options *opts);

typedef struct gptx_dataloader_info {
    size_t struct_size;
    int64_t total_tokens;       /* in all files */
    int64_t total_windows;      /* windows of T+1 tokens in the data */
    int64_t rank_windows;       /* windows this rank visits per epoch */
    int64_t leftover_windows;   /* windows no rank visits (equal shares, no repeats) */
    int64_t batches_per_epoch;  /* for this rank; the same on every rank */
    int64_t last_batch_rows;    /* rows in the last batch (B unless drop_last = 0) */
} gptx_dataloader_info;
#define GPTX_DATALOADER_INFO_SIZE GPTX_STRUCT_END(gptx_dataloader_info, last_batch_rows)

GPTX_API int gptx_dataloader_info_init_sized(gptx_dataloader_info *info, size_t size);
#define gptx_dataloader_info_init(info) \
    gptx_dataloader_info_init_sized((info), GPTX_DATALOADER_INFO_SIZE)
GPTX_API int gptx_dataloader_info_get(const gptx_dataloader *dl, gptx_dataloader_info *info);

/* Next batch: *inputs and *targets point to rows*T ids owned by the loader,
 * valid until the next call. At the end of an epoch the next epoch starts
 * (and reshuffles); *epoch (may be NULL) receives the batch's epoch. */
GPTX_API int gptx_dataloader_next(gptx_dataloader *dl, const int32_t **inputs,
                                  const int32_t **targets, int *rows, int64_t *epoch);

/* Position for exact resume: the next batch returned after set_state is the
 * batch that would have followed get_state. Fill it with
 * gptx_dataloader_state_init (all fields 0) before either call. */
typedef struct gptx_dataloader_state {
    size_t struct_size;
    int64_t epoch;
    int64_t batch; /* index of the next batch within the epoch */
    uint64_t seed;
} gptx_dataloader_state;
#define GPTX_DATALOADER_STATE_SIZE GPTX_STRUCT_END(gptx_dataloader_state, seed)

GPTX_API int gptx_dataloader_state_init_sized(gptx_dataloader_state *state, size_t size);
#define gptx_dataloader_state_init(state) \
    gptx_dataloader_state_init_sized((state), GPTX_DATALOADER_STATE_SIZE)

GPTX_API int gptx_dataloader_get_state(const gptx_dataloader *dl, gptx_dataloader_state *state);
GPTX_API int gptx_dataloader_set_state(gptx_dataloader *dl, const gptx_dataloader_state *state);

/* ------------------------------------------------------------------------ */
/* Sampler and generation                                                   */
/* ------------------------------------------------------------------------ */

/* One call at a time (else GPTX_ERR_BUSY), including its use by a
 * generator or gptx_generate. */
typedef struct gptx_sampler gptx_sampler;

typedef struct gptx_sampler_options {
    size_t struct_size; /* filled by gptx_sampler_options_init */
    float temperature;  /* 0 = greedy (argmax); default 1 */
    int top_k;          /* keep the k most likely tokens; 0 = off */
    float top_p;        /* nucleus: smallest set with mass >= top_p; 1 = off */
    uint64_t seed;
    uint64_t stream;    /* independent sequences for the same seed */
    /* 0.6.0: penalties on the tokens of the history (gptx_sampler_sample_history;
     * a generator passes its window, prompt included), then min-p. Order:
     * penalties -> temperature -> top-k -> top-p -> min-p -> draw
     * (docs/sampling.md). Defaults leave every draw as before. */
    float repetition_penalty; /* > 0; a seen token's logit l becomes l / r if l > 0, else l * r;
                               * 1 = off (default) */
    float frequency_penalty;  /* >= 0; l -= frequency_penalty * count; 0 = off (default) */
    float presence_penalty;   /* >= 0; l -= presence_penalty if count > 0; 0 = off (default) */
    int penalty_window;       /* >= 1: the penalties see the last penalty_window tokens of the
                               * history; default GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT */
    float min_p;              /* [0, 1]: keep tokens whose probability >= min_p times the
                               * largest; 0 = off (default) */
} gptx_sampler_options;
#define GPTX_SAMPLER_OPTIONS_SIZE GPTX_STRUCT_END(gptx_sampler_options, min_p)
#define GPTX_SAMPLER_PENALTY_WINDOW_DEFAULT 64

GPTX_API int gptx_sampler_options_init_sized(gptx_sampler_options *opts, size_t size);
#define gptx_sampler_options_init(opts) \
    gptx_sampler_options_init_sized((opts), GPTX_SAMPLER_OPTIONS_SIZE)
GPTX_API int gptx_sampler_create(gptx_sampler **out, const gptx_sampler_options *opts);
GPTX_API void gptx_sampler_destroy(gptx_sampler *s);
/* The options in effect (seed and stream as last restored by
 * gptx_sampler_set_state); opts must have been filled by
 * gptx_sampler_options_init. */
GPTX_API int gptx_sampler_get_options(const gptx_sampler *s, gptx_sampler_options *opts);
/* Draws one token from a row of n_logits logits (n_logits may be the padded
 * vocabulary); only ids < vocab_size are ever returned. Each call uses the
 * next Philox counter: the same seed, stream and call order replay the same
 * tokens on every backend. */
GPTX_API int gptx_sampler_sample(gptx_sampler *s, const float *logits, int n_logits, int vocab_size,
                                 int32_t *token);
/* The same draw after a history of n_history tokens (ids in [0, vocab_size),
 * oldest first; history may be NULL when n_history is 0): the penalties count
 * its last penalty_window tokens. gptx_sampler_sample is this call with no
 * history (the penalties then change nothing). The sampler keeps no history
 * of its own: the same history, seed, stream and call order draw the same
 * tokens. */
GPTX_API int gptx_sampler_sample_history(gptx_sampler *s, const float *logits, int n_logits,
                                         int vocab_size, const int32_t *history, int n_history,
                                         int32_t *token);

/* The stream position. Fill it with gptx_sampler_state_init (all fields 0)
 * before either call. */
typedef struct gptx_sampler_state {
    size_t struct_size;
    uint64_t seed;
    uint64_t stream;
    uint64_t counter; /* draws made so far */
} gptx_sampler_state;
#define GPTX_SAMPLER_STATE_SIZE GPTX_STRUCT_END(gptx_sampler_state, counter)

GPTX_API int gptx_sampler_state_init_sized(gptx_sampler_state *state, size_t size);
#define gptx_sampler_state_init(state) \
    gptx_sampler_state_init_sized((state), GPTX_SAMPLER_STATE_SIZE)

GPTX_API int gptx_sampler_get_state(const gptx_sampler *s, gptx_sampler_state *state);
GPTX_API int gptx_sampler_set_state(gptx_sampler *s, const gptx_sampler_state *state);

/* Appends n_new sampled tokens to a prompt of n_prompt tokens: out receives
 * n_new ids. Runs a gptx_generator with the default options (a key/value
 * cache over the model's context length; when the window is full it keeps
 * the last half, see gptx_generator_options.keep), fed the prompt's last
 * context_length tokens. */
GPTX_API int gptx_generate(gptx_model *model, gptx_sampler *sampler, const int32_t *prompt,
                           int n_prompt, int n_new, int32_t *out);

/* ------------------------------------------------------------------------ */
/* Generator: incremental generation over a key/value cache                 */
/* ------------------------------------------------------------------------ */

/* The tokens of a window (at most `window` of them, at positions 0, 1, ...)
 * with the keys and values of every layer for them, so that a new token
 * costs one position of the model, not the whole window. Feed tokens, read
 * the logits after the last one or sample the next token from them, reset.
 * The logits are always those of a full forward pass over the window as it
 * stands (docs/sampling.md: equal within 1e-5 in fp32); a change of the
 * model's parameters is noticed and the window recomputed. The cache is
 * allocated through the model's context (gptx_context_memory counts it);
 * the model's activation buffers are shared with training, so a generator
 * call leaves the model with no forward pass (run gptx_model_forward again
 * before gptx_model_backward or gptx_model_get_logits). */
/* One call at a time (else GPTX_ERR_BUSY); a call that computes logits
 * also claims its model, so it is GPTX_ERR_BUSY while another thread is in
 * a call on the model. Keeps its model alive. */
typedef struct gptx_generator gptx_generator;

typedef struct gptx_generator_options {
    size_t struct_size; /* filled by gptx_generator_options_init */
    int window;    /* positions the cache holds, <= the context length; 0 = context length */
    int keep;      /* when a token arrives at a full window, the last `keep` tokens stay (recomputed
                    * at positions 0 .. keep - 1) and the rest are dropped: GPT-2's positions are
                    * absolute, so the kept keys and values cannot be reused. In [0, window - 1];
                    * -1 (default) = window / 2: one recomputation per window / 2 new tokens;
                    * window - 1 slides one token at a time (a full pass per token). */
    int use_cache; /* 1 (default): keys and values are kept; 0: every token recomputes the whole
                    * window (the reference the cache is checked against) */
} gptx_generator_options;
#define GPTX_GENERATOR_OPTIONS_SIZE GPTX_STRUCT_END(gptx_generator_options, use_cache)

GPTX_API int gptx_generator_options_init_sized(gptx_generator_options *opts, size_t size);
#define gptx_generator_options_init(opts) \
    gptx_generator_options_init_sized((opts), GPTX_GENERATOR_OPTIONS_SIZE)

/* opts NULL = defaults. GPTX_ERR_UNSUPPORTED when use_cache is 1 and the
 * model's backend has no cached attention. */
GPTX_API int gptx_generator_create(gptx_generator **out, gptx_model *model,
                                   const gptx_generator_options *opts);
GPTX_API void gptx_generator_destroy(gptx_generator *g);
/* Empties the window (the cache memory stays allocated). */
GPTX_API int gptx_generator_reset(gptx_generator *g);
/* Appends n >= 1 tokens (ids in [0, vocab_size)) to the window. The model
 * runs when logits are next needed, over all new positions in one pass. */
GPTX_API int gptx_generator_feed(gptx_generator *g, const int32_t *tokens, int n);
/* The padded_vocab_size logits after the last token of the window (padded
 * columns -inf when masked), into logits (count >= padded_vocab_size).
 * GPTX_ERR_STATE on an empty window. */
GPTX_API int gptx_generator_logits(gptx_generator *g, float *logits, size_t count);
/* Samples the next token from the logits after the window's last token and
 * appends it to the window (the sampler's penalties see the window as its
 * history: gptx_sampler_sample_history); its own logits are computed only when a later
 * call needs them. GPTX_ERR_STATE on an empty window. */
GPTX_API int gptx_generator_next(gptx_generator *g, gptx_sampler *sampler, int32_t *token);
/* The window's tokens (*len of them; at most count are copied, tokens may be
 * NULL with count 0). */
GPTX_API int gptx_generator_window(const gptx_generator *g, int32_t *tokens, size_t count,
                                   int *len);

/* What the generator has done since it was created or reset. A pass is one
 * run of the model that brings the logits up to date: a decode pass follows
 * exactly one new token (sampled or fed) after an earlier pass, any other is
 * a prefill pass. Times are host wall clock around each pass, the logits'
 * download included. */
typedef struct gptx_generator_stats {
    size_t struct_size; /* filled by gptx_generator_stats_init */
    int64_t tokens;     /* tokens fed or sampled */
    int64_t prefill_passes;
    int64_t prefill_tokens; /* new tokens the prefill passes brought in */
    double prefill_seconds;
    int64_t decode_passes;
    double decode_seconds;
    int64_t positions;            /* positions the model ran (the whole window per pass without
                                   * the cache) */
    int64_t slides;               /* times a token arrived at a full window */
    int64_t recomputed_positions; /* positions run again whose tokens had been run before, after a
                                   * slide or a parameter change */
    size_t cache_bytes;           /* the key/value cache (0 without it) */
    int window, keep, use_cache;  /* the options in effect */
} gptx_generator_stats;
#define GPTX_GENERATOR_STATS_SIZE GPTX_STRUCT_END(gptx_generator_stats, use_cache)

GPTX_API int gptx_generator_stats_init_sized(gptx_generator_stats *stats, size_t size);
#define gptx_generator_stats_init(stats) \
    gptx_generator_stats_init_sized((stats), GPTX_GENERATOR_STATS_SIZE)
GPTX_API int gptx_generator_get_stats(const gptx_generator *g, gptx_generator_stats *stats);

/* ------------------------------------------------------------------------ */
/* Timer                                                                    */
/* ------------------------------------------------------------------------ */

/* One call at a time (else GPTX_ERR_BUSY); keeps its context (if any)
 * alive. */
typedef struct gptx_timer gptx_timer;

typedef enum gptx_timer_scope {
    GPTX_TIMER_TRAINING_STEPS = 0, /* forward, backward, optimizer only */
    GPTX_TIMER_END_TO_END = 1      /* also data, eval, sampling, checkpoints */
} gptx_timer_scope;

/* ctx may be NULL (host clock only); with a CPU context, start and stop
 * synchronize it so queued work is inside the interval; with a CUDA
 * context they record events on its stream (no synchronization) and an
 * interval is the device time between them, resolved when the report or
 * the interval is read (docs/timing.md). The timer keeps ctx alive. */
GPTX_API int gptx_timer_create(gptx_timer **out, gptx_context *ctx, int scope);
GPTX_API void gptx_timer_destroy(gptx_timer *t);
GPTX_API int gptx_timer_start(gptx_timer *t);
/* Ends the interval started last; tokens = tokens processed in it. */
GPTX_API int gptx_timer_stop(gptx_timer *t, int64_t tokens);

typedef struct gptx_timer_report {
    size_t struct_size;
    int scope;                 /* gptx_timer_scope */
    int64_t intervals;         /* all intervals, the cold one included */
    double cold_seconds;       /* the first interval (set-up, allocation, first use) */
    int64_t cold_tokens;
    double steady_seconds;     /* sum over intervals 2..n */
    int64_t steady_tokens;
    double steady_median_seconds;
    double steady_min_seconds;
    double steady_max_seconds;
    double steady_tokens_per_second; /* steady_tokens / steady_seconds */
} gptx_timer_report;
#define GPTX_TIMER_REPORT_SIZE GPTX_STRUCT_END(gptx_timer_report, steady_tokens_per_second)

GPTX_API int gptx_timer_report_init_sized(gptx_timer_report *r, size_t size);
#define gptx_timer_report_init(r) gptx_timer_report_init_sized((r), GPTX_TIMER_REPORT_SIZE)
GPTX_API int gptx_timer_get_report(const gptx_timer *t, gptx_timer_report *r);
/* One interval by index (0 = cold). */
GPTX_API int gptx_timer_interval(const gptx_timer *t, int64_t index, double *seconds,
                                 int64_t *tokens);

/* ------------------------------------------------------------------------ */
/* Checkpoints (safetensors)                                                */
/* ------------------------------------------------------------------------ */

/* Model weights with canonical names and gptx metadata; atomic write. */
GPTX_API int gptx_model_save(const gptx_model *model, const char *path);
/* Writes size bytes as the file at path the way gptx writes its own files:
 * a temporary file in the same folder, fsync, rename over path, fsync of the
 * folder, so a crash or a full disk leaves the old file or the new one
 * whole. A symbolic link at path is kept and the file it points to is
 * replaced (in that file's folder); anything else that is not a regular
 * file (a folder, FIFO, device, socket) is GPTX_ERR_IO before a byte is
 * written. gptx-train writes its metrics record and loss plot through it.
 * data may be NULL when size is 0. (Since 0.5.0.) */
GPTX_API int gptx_file_save(const char *path, const void *data, size_t size);
/* Creates a model from a gptx safetensors file (its config is in the file). */
GPTX_API int gptx_model_load(gptx_model **out, gptx_context *ctx, const char *path);
/* Loads weights into an existing model; names, shapes and dtypes must match. */
GPTX_API int gptx_model_load_weights(gptx_model *model, const char *path);
/* Imports a Hugging Face GPT-2 model (docs/checkpoints.md): path is a folder
 * (its model.safetensors and config.json) or the safetensors file (with the
 * config.json beside it when there is one). Sizes come from the tensors
 * (Conv1D weights transposed; nanoGPT's state_dict layout is read too);
 * n_head, layernorm_eps and tied_head from config.json (transformers'
 * defaults for keys it lacks), which must agree with the tensors. cfg gives
 * padded_vocab_size (0 = the file's vocabulary) and mask_padded_logits;
 * its n_head, layernorm_eps and tied_head must equal config.json's or be
 * 0, 0 and -1 (take the folder's): a cfg that contradicts config.json is
 * GPTX_ERR_MISMATCH. cfg NULL takes the folder's settings and
 * gptx_model_config_init's padding. Without a config.json, cfg (NULL: GPT-2
 * 124M's) gives the three settings. (config.json read since 0.7.0.) */
GPTX_API int gptx_model_import_hf(gptx_model **out, gptx_context *ctx, const char *path,
                                  const gptx_model_config *cfg);
/* Imports llm.c's gpt2_124M.bin model format. */
GPTX_API int gptx_model_import_llmc(gptx_model **out, gptx_context *ctx, const char *path);
/* Exports the model as a Hugging Face GPT-2 folder that transformers'
 * GPT2LMHeadModel.from_pretrained loads (docs/export.md): dir (created if
 * absent; its parent must exist) gets model.safetensors (F32, names
 * "transformer.h.0.attn.c_attn.weight" ..., the Conv1D weights transposed to
 * (in, out), wte cut to vocab_size rows: the padded rows are dropped; an
 * untied head as "lm_head.weight"; a model without qkv_bias gets zero
 * c_attn biases, as GPT-2 has no bias switch) and config.json (model_type
 * gpt2, the sizes, layer_norm_epsilon, activation gelu_new,
 * tie_word_embeddings, dropouts 0, ...), each written atomically, the
 * weights first. The tokenizer files (vocab.json, merges.txt) are not
 * written (gptx-export copies them). Refused before anything is written: a
 * dir that exists and is not a folder, a model.safetensors or config.json
 * in it that is not a regular file (GPTX_ERR_IO), and a model whose padded
 * logits take part in its softmax (mask_padded_logits 0 with
 * padded_vocab_size > vocab_size: GPTX_ERR_UNSUPPORTED). The values are the
 * parameters as fp32 under any precision policy. (Since 0.6.0.) */
GPTX_API int gptx_model_export_hf(const gptx_model *model, const char *dir);
/* Exports the model as an llm.c model file (the format
 * gptx_model_import_llmc and llm.c's gpt2_build_from_checkpoint read),
 * written atomically: a 256-int32 header (magic 20240326, version, maxT, V,
 * L, NH, C, Vp), then the parameters in llm.c's order with the padded
 * vocabulary rows kept. dtype GPTX_PRECISION_FP32 writes version 3 (fp32),
 * GPTX_PRECISION_BF16 version 5 (bf16, rounded to nearest even); any other
 * is GPTX_ERR_INVALID. A model without qkv_bias gets zero qkv biases.
 * Refused (GPTX_ERR_UNSUPPORTED): an untied head (llm.c has none; export
 * with gptx_model_export_hf), a layernorm_eps other than 1e-5 (llm.c's
 * fixed value), padded logits that take part in the softmax. (Since 0.6.0.) */
GPTX_API int gptx_model_export_llmc(const gptx_model *model, const char *path, int dtype);

/* Everything needed to resume training exactly. Any pointer except model
 * may be NULL; what is NULL is not saved (or not restored). lr_schedule_step
 * is the trainer's schedule position. user_metadata (since 0.3.0) is the
 * application's own record, such as its run configuration: a UTF-8 string
 * of at most GPTX_USER_METADATA_MAX bytes, stored verbatim in the file
 * (__metadata__ "user") by gptx_checkpoint_save and read back with
 * gptx_checkpoint_user_metadata; gptx_checkpoint_load leaves it as it is. */
typedef struct gptx_train_state {
    size_t struct_size;
    gptx_optimizer *optimizer;
    gptx_sampler *sampler;
    gptx_dataloader *train_loader;
    gptx_dataloader *val_loader;
    int64_t lr_schedule_step;
    int64_t tokens_seen;
    const char *user_metadata; /* NULL (the default): none */
} gptx_train_state;
#define GPTX_TRAIN_STATE_SIZE GPTX_STRUCT_END(gptx_train_state, user_metadata)
#define GPTX_USER_METADATA_MAX (1u << 20)

GPTX_API int gptx_train_state_init_sized(gptx_train_state *st, size_t size);
#define gptx_train_state_init(st) gptx_train_state_init_sized((st), GPTX_TRAIN_STATE_SIZE)
/* With a sharded optimizer (gptx_optimizer_create_sharded) in st the save is
 * collective: every rank of its communicator calls it, rank 0 writes. */
GPTX_API int gptx_checkpoint_save(const gptx_model *model, const gptx_train_state *st,
                                  const char *path);
GPTX_API int gptx_checkpoint_load(gptx_model *model, gptx_train_state *st, const char *path);
/* The precision policy a gptx model or training file was written under
 * (its metadata "precision"; files from before it was recorded are fp32).
 * Files load under any policy: the values are converted. */
GPTX_API int gptx_checkpoint_precision(const char *path, int *precision);
/* The user_metadata a training file was saved with. *len gets its length
 * in bytes (without the terminating NUL); buf gets it NUL-terminated when
 * cap > *len, else GPTX_ERR_SHAPE (buf may be NULL with cap 0 to ask the
 * length). A file saved without it (or a model file) is GPTX_ERR_NOT_FOUND. */
GPTX_API int gptx_checkpoint_user_metadata(const char *path, char *buf, size_t cap,
                                           size_t *len);

/* ------------------------------------------------------------------------ */
/* Numerics: layered comparison of two runs                                 */
/* ------------------------------------------------------------------------ */

/* Compares two runs of the same parameters on the same inputs (two
 * backends, precisions, kernel variants or thread counts), layer by layer;
 * side a is the reference:
 *   1. logits:  max |a - b| and max |a - b| / max(|a|, |b|) over all columns;
 *   2. softmax: each row's softmax over all n_logits columns (as the loss
 *               sees it; masked columns are -inf, probability 0), in double:
 *               max |p_a - p_b| and KL(p_a || p_b), mean and max over rows;
 *   3. tokens:  the shared sampler draws from each side's row with the same
 *               seed and counter (one uniform for both sides); counts draws
 *               whose tokens differ, and rows whose greedy argmax differs.
 * A comparison that runs returns GPTX_OK whatever it finds: report.pass
 * says whether every layer is within tolerance. See docs/numerics.md. */

typedef struct gptx_compare_options {
    size_t struct_size;  /* filled by gptx_compare_options_init */
    /* A logit passes when |a - b| <= logits_atol + logits_rtol * max(|a|, |b|);
     * equal infinities are equal, NaN never passes. Defaults 0: bitwise
     * equality, what the deterministic CPU backend gives across thread counts. */
    double logits_atol;
    double logits_rtol;
    double prob_atol;    /* max |p_a - p_b| allowed (default 0) */
    double kl_tol;       /* max over rows of KL(p_a || p_b) allowed, nats (default 0) */
    int64_t max_token_mismatches;  /* differing sampled draws allowed (default 0) */
    int64_t max_argmax_mismatches; /* rows whose argmax may differ (default 0) */
    /* Sampler for layer 3; NULL = gptx_sampler_options_init's defaults
     * (temperature 1, no top-k/top-p, seed 0, stream 0). */
    const gptx_sampler_options *sampler;
    int draws_per_position; /* draws from each row (default 1); draw k of the whole
                             * comparison uses Philox counter k on both sides */
    int positions;          /* gptx_compare_models: compare the last `positions`
                             * time steps of each row; 0 = all T (default) */
    const char *label_a;    /* free text copied into the report (e.g. a kernel */
    const char *label_b;    /* variant), truncated to 63 bytes; may be NULL */
} gptx_compare_options;
#define GPTX_COMPARE_OPTIONS_SIZE GPTX_STRUCT_END(gptx_compare_options, label_b)

GPTX_API int gptx_compare_options_init_sized(gptx_compare_options *opts, size_t size);
#define gptx_compare_options_init(opts) \
    gptx_compare_options_init_sized((opts), GPTX_COMPARE_OPTIONS_SIZE)

/* What ran on one side. This struct's layout is frozen; new per-side facts
 * are appended to gptx_compare_report instead. */
typedef struct gptx_compare_side {
    char backend[16];         /* "cpu", "cuda"; "external" (gptx_compare_logits) */
    char dtype[16];           /* the precision policy ("fp32", "bf16", ...); "unknown" for
                               * external logits */
    char library_version[16]; /* gptx_version() */
    char blas[128];           /* what ran the products (gptx_context_info.products), e.g.
                               * "oneDNN 2.6.3 brg:avx512_core_amx_bf16"; "unknown" */
    char cuda[32];            /* CUDA runtime version; "none" on the CPU backend */
    char label[64];           /* options.label_a / label_b, or "" */
    char kernels[64];         /* forward kernel variants of the context, e.g.
                               * "attention=flash qkv=fused norm_gelu=fused";
                               * "unknown" for external logits */
    int num_threads;          /* 0 = unknown */
    int deterministic;        /* the context's option; -1 = unknown */
} gptx_compare_side;

typedef struct gptx_compare_report {
    size_t struct_size; /* filled by gptx_compare_report_init */
    gptx_compare_side a, b;
    int64_t rows;       /* positions compared (B * positions for models) */
    int n_logits;       /* columns per row (the padded vocabulary) */
    int vocab_size;     /* real vocabulary: the sampler's and argmax's range */
    int bitwise_equal;  /* 1 = every logit has the same bits on both sides */
    int pass;           /* 1 = all three layers pass */

    /* layer 1: logits */
    int logits_pass;
    double logits_max_abs;     /* over elements where both are finite */
    double logits_max_rel;     /* |a - b| / max(|a|, |b|), same elements */
    int64_t logits_worst_row;  /* element of logits_max_abs (-1 if none) */
    int64_t logits_worst_col;
    int64_t logits_outside;    /* elements outside the tolerance, non-finite included */
    int64_t logits_nonfinite;  /* elements with a NaN, or an infinity on one side only */
    double logits_atol, logits_rtol; /* tolerance used */

    /* layer 2: softmax (double) */
    int softmax_pass;
    double prob_max_abs;
    double kl_mean, kl_max;    /* KL(p_a || p_b) over rows, nats */
    int64_t kl_worst_row;      /* -1 if none */
    int64_t softmax_invalid_rows; /* rows with NaN/+inf or all -inf on a side */
    double prob_atol, kl_tol;  /* tolerance used */

    /* layer 3: tokens from the shared sampler */
    int tokens_pass;
    int64_t token_draws;       /* rows * draws_per_position */
    int64_t token_mismatches;  /* draws whose tokens differ (or failed on a side) */
    int64_t argmax_mismatches; /* rows whose greedy token differs */
    int64_t max_token_mismatches, max_argmax_mismatches; /* tolerance used */
    float temperature;         /* sampler used */
    float top_p;
    int top_k;
    uint64_t seed;
    uint64_t stream;
} gptx_compare_report;
#define GPTX_COMPARE_REPORT_SIZE GPTX_STRUCT_END(gptx_compare_report, stream)

GPTX_API int gptx_compare_report_init_sized(gptx_compare_report *report, size_t size);
#define gptx_compare_report_init(report) \
    gptx_compare_report_init_sized((report), GPTX_COMPARE_REPORT_SIZE)

/* Runs gptx_model_forward (no targets) on a and b with the same B*T inputs
 * and compares their logits. a and b need equal configurations
 * (GPTX_ERR_MISMATCH otherwise) and may live in different contexts; a == b
 * is allowed. Each model's last forward pass is replaced. opts may be NULL. */
GPTX_API int gptx_compare_models(gptx_model *a, gptx_model *b, const int32_t *inputs, int B,
                                 int T, const gptx_compare_options *opts,
                                 gptx_compare_report *report);
/* The same layers for logits obtained elsewhere: a and b hold rows *
 * n_logits floats row-major; columns [vocab_size, n_logits) are padding
 * (compared and softmaxed, never sampled). The sides are described as
 * "external"; fill report->a / report->b afterwards to name them. */
GPTX_API int gptx_compare_logits(const float *a, const float *b, size_t rows, int n_logits,
                                 int vocab_size, const gptx_compare_options *opts,
                                 gptx_compare_report *report);

/* The report as readable text, NUL-terminated. With capacity too small,
 * GPTX_ERR_SHAPE is returned and *len holds the length needed (without the
 * NUL); GPTX_COMPARE_TEXT_MAX bytes are always enough. len may be NULL.
 * A report from an older, shorter header prints its missing fields as 0. */
#define GPTX_COMPARE_TEXT_MAX 4096
GPTX_API int gptx_compare_report_format(const gptx_compare_report *report, char *buf,
                                        size_t capacity, size_t *len);

/* ------------------------------------------------------------------------ */
/* Communicator: data-parallel training                                     */
/* ------------------------------------------------------------------------ */

/* One process per rank; every rank runs the same program and calls the
 * collectives below in the same order. A communicator is bound to the
 * context it was created with (the model buffers it reduces live there).
 * Engines: "single" (world size 1, no launcher: every collective is a no-op
 * and costs nothing), "mpi" (CPU contexts, started by mpirun) and "nccl"
 * (CUDA contexts, started by mpirun or with torchrun-style variables).
 * See docs/distributed.md. */
/* One call at a time (else GPTX_ERR_BUSY), the queries of rank, size and
 * options excepted; a collective on a model's gradients also claims the
 * model. Keeps its context alive; kept alive by sharded optimizers. */
typedef struct gptx_comm gptx_comm;

typedef enum gptx_comm_launcher {
    GPTX_LAUNCHER_NONE = 0,    /* no launcher variables: one process */
    GPTX_LAUNCHER_MPI = 1,     /* mpirun / mpiexec (OMPI_COMM_WORLD_* or PMI_* variables) */
    GPTX_LAUNCHER_TORCHRUN = 2 /* RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT */
} gptx_comm_launcher;

/* What the environment says about this process, read without starting any
 * engine: a program can pick its device (local_rank) or thread count
 * (cores / local_world_size) before creating its context. */
typedef struct gptx_comm_launch_info {
    size_t struct_size;   /* filled by gptx_comm_launch_info_init */
    int launcher;         /* gptx_comm_launcher */
    int rank;             /* in [0, world_size) */
    int world_size;
    int local_rank;       /* rank among the processes of this node */
    int local_world_size; /* processes on this node (0 = the launcher does not say) */
} gptx_comm_launch_info;
#define GPTX_COMM_LAUNCH_INFO_SIZE GPTX_STRUCT_END(gptx_comm_launch_info, local_world_size)

GPTX_API int gptx_comm_launch_info_init_sized(gptx_comm_launch_info *info, size_t size);
#define gptx_comm_launch_info_init(info) \
    gptx_comm_launch_info_init_sized((info), GPTX_COMM_LAUNCH_INFO_SIZE)
/* Reads the launcher variables. MPI launchers take precedence over
 * torchrun-style ones. GPTX_ERR_INVALID names a malformed or inconsistent
 * variable (RANK=3 with WORLD_SIZE=2, WORLD_SIZE without RANK, ...). */
GPTX_API int gptx_comm_detect_launch(gptx_comm_launch_info *info);

typedef enum gptx_comm_engine {
    GPTX_COMM_AUTO = 0,   /* single for world size 1; mpi for CPU, nccl for CUDA contexts */
    GPTX_COMM_SINGLE = 1, /* ignore the launcher: rank 0 of 1 */
    GPTX_COMM_MPI = 2,    /* needs a build with GPTX_FEATURE_MPI */
    GPTX_COMM_NCCL = 3    /* needs a build with GPTX_FEATURE_NCCL and a CUDA context */
} gptx_comm_engine;

typedef struct gptx_comm_options {
    size_t struct_size;     /* filled by gptx_comm_options_init */
    int engine;             /* gptx_comm_engine (default AUTO) */
    /* A collective, the barrier or the start-up that has not completed after
     * this many seconds fails with GPTX_ERR_BACKEND (a rank died, hangs or
     * skipped a collective); the communicator is unusable afterwards.
     * Default 600; 0 = wait forever. */
    double timeout_seconds;
} gptx_comm_options;
#define GPTX_COMM_OPTIONS_SIZE GPTX_STRUCT_END(gptx_comm_options, timeout_seconds)

GPTX_API int gptx_comm_options_init_sized(gptx_comm_options *opts, size_t size);
#define gptx_comm_options_init(opts) gptx_comm_options_init_sized((opts), GPTX_COMM_OPTIONS_SIZE)
/* Creates this process's communicator from the launcher variables; opts may
 * be NULL. A world size above 1 without an engine that can serve it (MPI not
 * compiled in, torchrun-style variables with a CPU context, ...) is
 * GPTX_ERR_UNSUPPORTED with a message that says what to do. The MPI engine
 * initializes MPI if the program has not (and finalizes it when the last
 * communicator is destroyed, so create at most one per process lifetime). */
GPTX_API int gptx_comm_create(gptx_comm **out, gptx_context *ctx, const gptx_comm_options *opts);
/* Not collective. After a failed collective, releases without waiting for
 * the other ranks. */
GPTX_API void gptx_comm_destroy(gptx_comm *comm);
/* The options the communicator was created with (defaults filled in); opts
 * must have been filled by gptx_comm_options_init. */
GPTX_API int gptx_comm_get_options(const gptx_comm *comm, gptx_comm_options *opts);
/* "single", "mpi" or "nccl" ("" for NULL). */
GPTX_API const char *gptx_comm_engine_name(const gptx_comm *comm);
/* Rank, world size, node-local rank and node-local size; -1 for NULL. */
GPTX_API int gptx_comm_rank(const gptx_comm *comm);
GPTX_API int gptx_comm_world_size(const gptx_comm *comm);
GPTX_API int gptx_comm_local_rank(const gptx_comm *comm);
GPTX_API int gptx_comm_local_world_size(const gptx_comm *comm);

/* Collectives: every rank must make the same calls with the same counts.
 * Results are bitwise identical on every rank. */
typedef enum gptx_comm_op { GPTX_COMM_SUM = 0, GPTX_COMM_MAX = 1, GPTX_COMM_MIN = 2 } gptx_comm_op;

GPTX_API int gptx_comm_barrier(gptx_comm *comm);
/* In place over count host values (metrics, counters, flags). */
GPTX_API int gptx_comm_allreduce_f64(gptx_comm *comm, double *values, size_t count, int op);
GPTX_API int gptx_comm_allreduce_i64(gptx_comm *comm, int64_t *values, size_t count, int op);
/* bytes of host memory from rank root to every rank. */
GPTX_API int gptx_comm_broadcast(gptx_comm *comm, void *data, size_t bytes, int root);

/* Makes every rank hold the global token-weighted mean gradient: with g_r the
 * gradients accumulated on rank r over local_tokens n_r targets (the mean
 * over its own targets, as backward leaves it), every rank ends with
 * sum_r n_r * g_r / sum_r n_r. Ranks may pass different counts (unequal
 * shards, ignored targets) and 0 (a rank with no targets contributes
 * nothing); if every rank passes 0 the gradients become 0. Call it once per
 * optimizer step, after the last backward and before gptx_optimizer_step;
 * ranks that then step identical optimizers keep bitwise identical
 * parameters. The model must belong to the communicator's context. */
GPTX_API int gptx_comm_average_gradients(gptx_comm *comm, gptx_model *model, int64_t local_tokens);

/* Backward overlapped with the gradient average: the same as
 * gptx_model_backward(model, loss_scale) followed by
 * gptx_comm_average_gradients(comm, model, local_tokens), but each group of
 * layers whose gradients are final ("bucket", about bucket_bytes; 0 = 4 MiB)
 * starts its reduction while backward still runs on the earlier layers.
 * Collective. local_tokens is this rank's target count for the whole
 * optimizer step (with accumulation: run the other micro-batches with
 * gptx_model_backward and only the last one with this call, as the
 * reductions must see the accumulated gradients). With world size 1 it is
 * gptx_model_backward. Results equal the non-overlapped path to fp32
 * rounding (buckets split the additions differently) and are bitwise equal
 * on every rank. Then call gptx_optimizer_step (not with a sharded
 * optimizer: its step reduces the gradients itself). */
GPTX_API int gptx_comm_backward(gptx_comm *comm, gptx_model *model, float loss_scale,
                                int64_t local_tokens, size_t bucket_bytes);

/* ZeRO-1: an optimizer whose AdamW moments are sharded over comm. Rank r
 * keeps m and v only for its shard of the flat parameter buffer (about
 * nparams / world size floats each; gptx_optimizer_get_shard says which).
 * The model must belong to comm's context; the optimizer keeps the
 * communicator alive. GPTX_ERR_UNSUPPORTED for an engine that stages a device
 * context's gradients through host memory (MPI engine with a CUDA context). */
GPTX_API int gptx_optimizer_create_sharded(gptx_optimizer **out, gptx_model *model,
                                           const gptx_adamw_options *opts, gptx_comm *comm);
/* [*offset, *offset + *count) of the flat parameter buffer is what this
 * optimizer updates: everything for an unsharded one. */
GPTX_API int gptx_optimizer_get_shard(const gptx_optimizer *opt, size_t *offset, size_t *count);
/* One step of a sharded optimizer, in place of gptx_comm_average_gradients
 * + gptx_optimizer_step (collective): reduce-scatter of the token-weighted
 * gradients (as gptx_comm_average_gradients weights them), the global norm
 * from the shards' sums of squares (for clipping; *grad_norm gets it), AdamW
 * on this rank's shard, all-gather of the parameters. Afterwards the
 * parameters are bitwise identical on every rank; the gradients outside this
 * rank's shard are unspecified. gptx_optimizer_step refuses a sharded
 * optimizer (GPTX_ERR_STATE) and this call an unsharded one
 * (GPTX_ERR_INVALID). With a sharded optimizer in st, gptx_checkpoint_save
 * is collective (every rank calls it; rank 0 writes the file, which equals
 * an unsharded optimizer's); gptx_checkpoint_load reads any training file
 * (sharded or not, any world size) on every rank, each keeping its slice. */
GPTX_API int gptx_optimizer_step_sharded(gptx_optimizer *opt, gptx_model *model,
                                         int64_t local_tokens, float *grad_norm);

#ifdef __cplusplus
}
#endif

#endif /* GPTX_GPTX_H */
