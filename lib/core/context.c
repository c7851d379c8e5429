#include "context.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "abi_struct.h"
#include "module.h"
#include "op_profile.h"

GPTX_HANDLE_FIRST(gptx_context);

static const gptx_context_options context_defaults = {
    .struct_size = GPTX_CONTEXT_OPTIONS_SIZE,
    .backend = GPTX_BACKEND_AUTO,
    .device = 0,
    .num_threads = 0,
    .deterministic = 1,
    .precision = GPTX_PRECISION_DEFAULT,
    .stochastic_rounding = 0,
    .cuda_graphs = 0,
    .rank_invariant = 0,
};

static const gptx_kernel_variants variant_defaults = {
    .attention = GPTX_ATTENTION_FLASH, .fused_qkv = 1, .fused_norm_gelu = 1, .fused_adamw = 1};

int gptx_context_options_init_sized(gptx_context_options *opts, size_t size) {
    return gptx_struct_init(opts, size, &context_defaults, &gptx_desc_context_options, __func__,
                            "opts");
}

int gptx_memory_stats_init_sized(gptx_memory_stats *stats, size_t size) {
    static const gptx_memory_stats zero = {.struct_size = GPTX_MEMORY_STATS_SIZE};
    return gptx_struct_init(stats, size, &zero, &gptx_desc_memory_stats, __func__, "stats");
}

static int read_context_options(gptx_context_options *dst, const gptx_context_options *src) {
    *dst = context_defaults;
    if (!src) return GPTX_OK;
    return gptx_struct_read(dst, src, &gptx_desc_context_options, "gptx_context_create", "opts");
}

static int resolved_precision(const gptx_context *ctx) {
    return ctx->ops->precision ? ctx->ops->precision(ctx->be) : GPTX_PRECISION_FP32;
}

int gptx_context_precision(const gptx_context *ctx) {
    GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    return ctx->precision;
}

/* The context's release (handle.h): runs when it was destroyed and the
 * last object made from it is gone. */
static void release_context(gptx_handle *h) {
    gptx_context *ctx = (gptx_context *)h;
    gptx_op_profiler_destroy(ctx->profiler); /* its events, before the backend */
    ctx->ops->destroy(ctx->be);
    pthread_mutex_destroy(&ctx->mu);
}

static int init_lock(pthread_mutex_t *mu) {
    pthread_mutexattr_t a;
    int rc = pthread_mutexattr_init(&a);
    if (rc == 0) rc = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    if (rc == 0) rc = pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
    return rc;
}

/* A context around a backend instance that was just created (taken over). */
static int wrap_backend(gptx_context **out, const gptx_backend_ops *ops, gptx_backend *be,
                        const gptx_context_options *opts) {
    gptx_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx || init_lock(&ctx->mu) != 0) {
        free(ctx);
        ops->destroy(be);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (context and its lock)");
    }
    gptx_handle_init(&ctx->h, GPTX_KIND_CONTEXT, NULL, &ctx->mu, release_context);
    ctx->ops = ops;
    ctx->be = be;
    ctx->opts = *opts;
    ctx->precision = resolved_precision(ctx);
    ctx->variants = variant_defaults;
    *out = ctx;
    gptx_clear_error();
    return GPTX_OK;
}

int gptx_context_create(gptx_context **out, const gptx_context_options *opts_in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    gptx_context_options opts;
    GPTX_TRY(read_context_options(&opts, opts_in));
    if (opts.num_threads < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.num_threads is %d; must be >= 0",
                         opts.num_threads);
    if (opts.precision < GPTX_PRECISION_DEFAULT || opts.precision > GPTX_PRECISION_BF16_PURE)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.precision is %d; expected GPTX_PRECISION_*",
                         opts.precision);
    if (opts.cuda_graphs & ~1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.cuda_graphs is %d; expected 0 or 1",
                         opts.cuda_graphs);
    if (opts.rank_invariant & ~1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.rank_invariant is %d; expected 0 or 1",
                         opts.rank_invariant);
    if (opts.deterministic & ~1) /* only 0 and 1 have a meaning; 5 is a mistake */
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.deterministic is %d; expected 0 or 1",
                         opts.deterministic);
    if (opts.stochastic_rounding & ~1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.stochastic_rounding is %d; expected 0 or 1",
                         opts.stochastic_rounding);
    if (opts.stochastic_rounding && opts.precision != GPTX_PRECISION_BF16_PURE)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "options.stochastic_rounding needs GPTX_PRECISION_BF16_PURE (precision "
                         "is %s)", gptx_precision_name(opts.precision));
    if (opts.device < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.device is %d; must be >= 0", opts.device);

    const gptx_backend_ops *ops = NULL;
    const gptx_module_exports *cuda = NULL;
    switch (opts.backend) {
    case GPTX_BACKEND_CPU: ops = gptx_cpu_backend_ops(); break;
    case GPTX_BACKEND_CUDA:
        GPTX_TRY(gptx_module_get("cuda", "gptx_context_create (backend 'cuda')", &cuda));
        ops = cuda->backend_ops;
        break;
    case GPTX_BACKEND_AUTO:
        ops = gptx_cpu_backend_ops();
        /* a backend that cannot do what the options ask is not a candidate */
        if ((cuda = gptx_module_lookup("cuda")) != NULL &&
            (!opts.rank_invariant || cuda->backend_ops->exact_fold)) {
            gptx_backend *probe = NULL;
            int probe_rc = cuda->backend_ops->create(&probe, &opts);
            /* a malformed CUDA setting (GPTX_CUDA_* environment, device
             * index) is the caller's error, not a missing device */
            if (probe_rc == GPTX_ERR_INVALID) return probe_rc;
            if (probe_rc != GPTX_OK) gptx_clear_error(); /* no device: the CPU it is */
            if (probe_rc == GPTX_OK) return wrap_backend(out, cuda->backend_ops, probe, &opts);
        }
        break;
    default:
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.backend is %d; expected GPTX_BACKEND_*",
                         opts.backend);
    }

    return gptx_context_create_on(out, &opts, ops);
}

int gptx_context_create_on(gptx_context **out, const gptx_context_options *opts,
                           const gptx_backend_ops *ops) {
    if (opts->rank_invariant && !(ops->exact_fold && ops->exact_raise && ops->exact_value))
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "options.rank_invariant: backend '%s' has no rank-invariant gradient "
                         "sums in this version (the CPU backend has them: docs/distributed.md)",
                         ops->name);
    gptx_backend *be = NULL;
    GPTX_TRY(ops->create(&be, opts));
    return wrap_backend(out, ops, be, opts);
}

void gptx_context_destroy(gptx_context *ctx) {
    gptx_handle_destroy(ctx, GPTX_KIND_CONTEXT, "ctx", __func__);
}

const char *gptx_context_backend_name(const gptx_context *ctx) {
    if (gptx_handle_check(ctx, GPTX_KIND_CONTEXT, "ctx", __func__) != GPTX_OK) return "";
    return ctx->ops->name;
}

int gptx_context_num_threads(const gptx_context *ctx) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    return ctx->ops->num_threads(ctx->be);
}

int gptx_context_get_options(const gptx_context *ctx, gptx_context_options *opts) {
    GPTX_CHECK_HANDLE(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(opts);
    return gptx_struct_write(opts, &ctx->opts, &gptx_desc_context_options, __func__, "opts");
}

int gptx_context_info_init_sized(gptx_context_info *info, size_t size) {
    static const gptx_context_info empty = {.struct_size = GPTX_CONTEXT_INFO_SIZE};
    return gptx_struct_init(info, size, &empty, &gptx_desc_context_info, __func__, "info");
}

void gptx_context_describe(const gptx_context *ctx, gptx_context_info *full) {
    gptx_context_info_init(full);
    snprintf(full->backend, sizeof full->backend, "%s", ctx->ops->name);
    full->precision = ctx->precision;
    full->num_threads = ctx->ops->num_threads(ctx->be);
    snprintf(full->products, sizeof full->products, "unknown");
    if (ctx->ops->describe) ctx->ops->describe(ctx->be, full);
}

int gptx_context_get_info(const gptx_context *ctx, gptx_context_info *info) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(info);
    GPTX_TRY(gptx_struct_check_size(info->struct_size, &gptx_desc_context_info, __func__, "info"));
    gptx_context_info full;
    gptx_context_describe(ctx, &full);
    return gptx_struct_write(info, &full, &gptx_desc_context_info, __func__, "info");
}

int gptx_context_memory(const gptx_context *ctx, gptx_memory_stats *stats) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(stats);
    GPTX_TRY(gptx_struct_check_size(stats->struct_size, &gptx_desc_memory_stats, __func__,
                                    "stats"));
    gptx_memory_stats full;
    gptx_memory_stats_init(&full);
    GPTX_TRY(ctx->ops->memory_stats(ctx->be, &full));
    return gptx_struct_write(stats, &full, &gptx_desc_memory_stats, __func__, "stats");
}

int gptx_context_reset_peak_memory(gptx_context *ctx) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    return ctx->ops->reset_peak(ctx->be);
}

int gptx_context_synchronize(gptx_context *ctx) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    return ctx->ops->synchronize(ctx->be);
}

static const char *const variant_names[] = {NULL, "attention", "fused_qkv", "fused_norm_gelu",
                                            "fused_adamw", "attention_tiles"};

static int *variant_slot(gptx_kernel_variants *v, int variant) {
    switch (variant) {
    case GPTX_VARIANT_ATTENTION: return &v->attention;
    case GPTX_VARIANT_FUSED_QKV: return &v->fused_qkv;
    case GPTX_VARIANT_FUSED_NORM_GELU: return &v->fused_norm_gelu;
    case GPTX_VARIANT_FUSED_ADAMW: return &v->fused_adamw;
    case GPTX_VARIANT_ATTENTION_TILES: return &v->attention_tiles;
    default: return NULL;
    }
}

int gptx_context_set_variant(gptx_context *ctx, int variant, int value) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    int *slot = variant_slot(&ctx->variants, variant);
    if (!slot)
        return GPTX_FAIL(GPTX_ERR_INVALID, "variant is %d; expected GPTX_VARIANT_*", variant);
    if (variant == GPTX_VARIANT_ATTENTION && value != GPTX_ATTENTION_FLASH &&
        value != GPTX_ATTENTION_NAIVE && value != GPTX_ATTENTION_FLASH_SIMT)
        return GPTX_FAIL(GPTX_ERR_INVALID, "attention variant is %d; expected GPTX_ATTENTION_*",
                         value);
    /* the backend checks which configurations it has (gptx_model_create) */
    if (variant == GPTX_VARIANT_ATTENTION_TILES && (value < 0 || value > 64))
        return GPTX_FAIL(GPTX_ERR_INVALID, "variant attention_tiles is %d; expected 0..64",
                         value);
    if (variant != GPTX_VARIANT_ATTENTION && variant != GPTX_VARIANT_ATTENTION_TILES &&
        value != 0 && value != 1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "variant %s is %d; expected 0 or 1",
                         variant_names[variant], value);
    *slot = value;
    return GPTX_OK;
}

int gptx_context_get_variant(const gptx_context *ctx, int variant, int *value) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    GPTX_CHECK_NULL(value);
    const int *slot = variant_slot((gptx_kernel_variants *)&ctx->variants, variant);
    if (!slot)
        return GPTX_FAIL(GPTX_ERR_INVALID, "variant is %d; expected GPTX_VARIANT_*", variant);
    *value = *slot;
    return GPTX_OK;
}

int gptx_context_instance_ops(const gptx_context *ctx, gptx_backend_ops *ops,
                              gptx_kernel_variants *v) {
    *ops = *ctx->ops;
    *v = ctx->variants;
    if (!memcmp(v, &variant_defaults, sizeof *v)) return GPTX_OK;
    if (!ctx->ops->instance_ops)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "backend '%s' offers no kernel variants (attention %d, fused_qkv %d, "
                         "fused_norm_gelu %d, fused_adamw %d, attention_tiles %d)",
                         ctx->ops->name, v->attention, v->fused_qkv, v->fused_norm_gelu,
                         v->fused_adamw, v->attention_tiles);
    return ctx->ops->instance_ops(ctx->be, v, ops);
}

void gptx_kernel_variants_forward_text(const gptx_kernel_variants *v, char *buf, size_t cap) {
    snprintf(buf, cap, "attention=%s qkv=%s norm_gelu=%s",
             v->attention == GPTX_ATTENTION_NAIVE ? "naive" : "flash",
             v->fused_qkv ? "fused" : "split", v->fused_norm_gelu ? "fused" : "unfused");
}

int gptx_context_graph_counts(const gptx_context *ctx, int64_t *captures, int64_t *replays) {
    GPTX_ENTER(ctx, GPTX_KIND_CONTEXT);
    int64_t c = 0, r = 0;
    if (ctx->ops->graph_counts) ctx->ops->graph_counts(ctx->be, &c, &r);
    if (captures) *captures = c;
    if (replays) *replays = r;
    return GPTX_OK;
}

int gptx_cpu_max_threads(void) {
    const gptx_backend_ops *ops = gptx_cpu_backend_ops();
    return ops->max_threads ? ops->max_threads() : INT_MAX;
}
