#include "param_storage.h"

void gptx_context_storage(const gptx_context *ctx, gptx_backend_storage *out) {
    out->act_bytes = sizeof(float);
    out->wcopy_bytes = 0;
    out->param_bytes = sizeof(float);
    out->res_bytes = 0;
    if (ctx->ops->storage) ctx->ops->storage(ctx->be, out);
    if (out->res_bytes == 0) out->res_bytes = out->act_bytes;
}

size_t gptx_param_bytes(const gptx_context *ctx) {
    gptx_backend_storage st;
    gptx_context_storage(ctx, &st);
    return st.param_bytes;
}

float *gptx_param_at(const gptx_context *ctx, float *base, size_t elems) {
    return (float *)((char *)base + elems * gptx_param_bytes(ctx));
}

int gptx_param_upload(gptx_context *ctx, float *dst, const float *host, size_t n) {
    if (ctx->ops->upload_param) return ctx->ops->upload_param(ctx->be, dst, host, n);
    return ctx->ops->upload_f32(ctx->be, dst, host, n);
}

int gptx_param_download(gptx_context *ctx, float *host, const float *src, size_t n) {
    if (ctx->ops->download_param) return ctx->ops->download_param(ctx->be, host, src, n);
    return ctx->ops->download_f32(ctx->be, host, src, n);
}

int gptx_param_fill(gptx_context *ctx, float *dst, float value, size_t n) {
    if (ctx->ops->fill_param) return ctx->ops->fill_param(ctx->be, dst, value, n);
    return ctx->ops->fill_f32(ctx->be, dst, value, n);
}
