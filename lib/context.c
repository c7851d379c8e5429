#include "context.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "options.h"

void gptx_context_options_init(gptx_context_options *opts) {
    if (!opts) return;
    memset(opts, 0, sizeof *opts);
    opts->struct_size = sizeof *opts;
    opts->backend = GPTX_BACKEND_AUTO;
    opts->device = 0;
    opts->num_threads = 0;
    opts->deterministic = 1;
    opts->attention = GPTX_ATTENTION_FLASH;
    opts->fused_qkv = 1;
    opts->fused_norm_gelu = 1;
    opts->fused_adamw = 1;
    opts->precision = GPTX_PRECISION_DEFAULT;
    opts->stochastic_rounding = 0;
    opts->cuda_graphs = 0;
}

void gptx_memory_stats_init(gptx_memory_stats *stats) {
    if (!stats) return;
    memset(stats, 0, sizeof *stats);
    stats->struct_size = sizeof *stats;
}

static int read_context_options(gptx_context_options *dst, const gptx_context_options *src) {
    gptx_context_options_init(dst);
    if (!src) return GPTX_OK;
    return gptx_read_options(dst, sizeof *dst, src, src->struct_size, "context options",
                             "gptx_context_options_init");
}

static int resolved_precision(const gptx_context *ctx) {
    return ctx->ops->precision ? ctx->ops->precision(ctx->be) : GPTX_PRECISION_FP32;
}

static const char *const precision_names[] = {"default", "fp32", "tf32", "bf16", "bf16_pure"};

const char *gptx_precision_name(int precision) {
    if (precision < 0 || precision > GPTX_PRECISION_BF16_PURE) return NULL;
    return precision_names[precision];
}

int gptx_precision_from_name(const char *name) {
    GPTX_CHECK_NULL(name);
    for (int i = 0; i <= GPTX_PRECISION_BF16_PURE; i++)
        if (strcmp(name, precision_names[i]) == 0) return i;
    return GPTX_FAIL(GPTX_ERR_INVALID,
                     "precision '%.40s'; expected default, fp32, tf32, bf16 or bf16_pure", name);
}

int gptx_context_precision(const gptx_context *ctx) {
    if (!ctx) return GPTX_FAIL(GPTX_ERR_NULL, "argument 'ctx' is NULL");
    return ctx->precision;
}

int gptx_context_create(gptx_context **out, const gptx_context_options *opts_in) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    gptx_context_options opts;
    GPTX_TRY(read_context_options(&opts, opts_in));
    if (opts.num_threads < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.num_threads is %d; must be >= 0",
                         opts.num_threads);
    if (opts.attention != GPTX_ATTENTION_FLASH && opts.attention != GPTX_ATTENTION_NAIVE)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.attention is %d; expected GPTX_ATTENTION_*",
                         opts.attention);
    if ((opts.fused_qkv | opts.fused_norm_gelu | opts.fused_adamw) & ~1)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "options.fused_qkv/fused_norm_gelu/fused_adamw are %d/%d/%d; expected 0 or 1",
                         opts.fused_qkv, opts.fused_norm_gelu, opts.fused_adamw);
    if (opts.precision < GPTX_PRECISION_DEFAULT || opts.precision > GPTX_PRECISION_BF16_PURE)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.precision is %d; expected GPTX_PRECISION_*",
                         opts.precision);
    if (opts.cuda_graphs & ~1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.cuda_graphs is %d; expected 0 or 1",
                         opts.cuda_graphs);
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
    switch (opts.backend) {
    case GPTX_BACKEND_CPU: ops = gptx_cpu_backend_ops(); break;
    case GPTX_BACKEND_CUDA:
#ifdef GPTX_HAVE_CUDA
        ops = gptx_cuda_backend_ops();
        break;
#else
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "backend 'cuda' requested but this build has no CUDA backend");
#endif
    case GPTX_BACKEND_AUTO:
        ops = gptx_cpu_backend_ops();
#ifdef GPTX_HAVE_CUDA
        {
            gptx_backend *probe = NULL;
            const gptx_backend_ops *cuda = gptx_cuda_backend_ops();
            int probe_rc = cuda->create(&probe, &opts);
            /* a malformed CUDA setting (GPTX_CUDA_* environment, device
             * index) is the caller's error, not a missing device */
            if (probe_rc == GPTX_ERR_INVALID) return probe_rc;
            if (probe_rc != GPTX_OK) gptx_clear_error(); /* no device: the CPU it is */
            if (probe_rc == GPTX_OK) {
                gptx_context *ctx = calloc(1, sizeof *ctx);
                if (!ctx) {
                    cuda->destroy(probe);
                    return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
                }
                ctx->ops = cuda;
                ctx->be = probe;
                ctx->opts = opts;
                ctx->precision = resolved_precision(ctx);
                *out = ctx;
                gptx_clear_error();
                return GPTX_OK;
            }
        }
#endif
        break;
    default:
        return GPTX_FAIL(GPTX_ERR_INVALID, "options.backend is %d; expected GPTX_BACKEND_*",
                         opts.backend);
    }

    gptx_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = ops->create(&ctx->be, &opts);
    if (rc != GPTX_OK) {
        free(ctx);
        return rc;
    }
    ctx->ops = ops;
    ctx->opts = opts;
    ctx->precision = resolved_precision(ctx);
    *out = ctx;
    return GPTX_OK;
}

void gptx_context_destroy(gptx_context *ctx) {
    if (!ctx) return;
    ctx->ops->destroy(ctx->be);
    free(ctx);
}

const char *gptx_context_backend_name(const gptx_context *ctx) {
    return ctx ? ctx->ops->name : "";
}

int gptx_context_num_threads(const gptx_context *ctx) {
    if (!ctx) return GPTX_FAIL(GPTX_ERR_NULL, "argument 'ctx' is NULL");
    return ctx->ops->num_threads(ctx->be);
}

int gptx_context_memory(const gptx_context *ctx, gptx_memory_stats *stats) {
    GPTX_CHECK_NULL(ctx);
    GPTX_CHECK_NULL(stats);
    if (stats->struct_size != sizeof *stats)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "stats.struct_size is %zu; call gptx_memory_stats_init first",
                         stats->struct_size);
    return ctx->ops->memory_stats(ctx->be, stats);
}

int gptx_context_reset_peak_memory(gptx_context *ctx) {
    GPTX_CHECK_NULL(ctx);
    return ctx->ops->reset_peak(ctx->be);
}

int gptx_context_synchronize(gptx_context *ctx) {
    GPTX_CHECK_NULL(ctx);
    return ctx->ops->synchronize(ctx->be);
}

int gptx_context_graph_counts(const gptx_context *ctx, int64_t *captures, int64_t *replays) {
    GPTX_CHECK_NULL(ctx);
    int64_t c = 0, r = 0;
    if (ctx->ops->graph_counts) ctx->ops->graph_counts(ctx->be, &c, &r);
    if (captures) *captures = c;
    if (replays) *replays = r;
    return GPTX_OK;
}
