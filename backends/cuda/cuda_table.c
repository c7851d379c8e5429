/* The CUDA backend's table. The naive-attention and step-by-step
 * LayerNorm/GELU ablation variants are not offered (NULL: the model reports
 * GPTX_ERR_UNSUPPORTED when a context asks for them); the separate-QKV
 * variant is. Entries are in declaration order (this file is also compiled
 * as C++20 by the CPU-emulation tests). */
#include "cuda_ops.h"

static const gptx_backend_ops cuda_table = {
    .name = "cuda",
    .create = gptx_cuda_create,
    .destroy = gptx_cuda_destroy,
    .num_threads = gptx_cuda_num_threads,
    .alloc = gptx_cuda_alloc,
    .free = gptx_cuda_free,
    .memory_stats = gptx_cuda_memory_stats,
    .reset_peak = gptx_cuda_reset_peak,
    .synchronize = gptx_cuda_synchronize,
    .upload_f32 = gptx_cuda_upload_f32,
    .download_f32 = gptx_cuda_download_f32,
    .upload_i32 = gptx_cuda_upload_i32,
    .fill_f32 = gptx_cuda_fill_f32,
    .embedding_forward = gptx_cuda_embedding_forward,
    .embedding_backward = gptx_cuda_embedding_backward,
    .layernorm_forward = gptx_cuda_layernorm_forward,
    .layernorm_backward = gptx_cuda_layernorm_backward,
    .matmul_forward = gptx_cuda_matmul_forward,
    .matmul_backward = gptx_cuda_matmul_backward,
    .attention_forward = gptx_cuda_attention_forward,
    .attention_backward = gptx_cuda_attention_backward,
    .gelu_forward = gptx_cuda_gelu_forward,
    .gelu_backward = gptx_cuda_gelu_backward,
    .residual_forward = gptx_cuda_residual_forward,
    .crossentropy_forward = gptx_cuda_crossentropy_forward,
    .crossentropy_backward = gptx_cuda_crossentropy_backward,
    .sum_to_host = gptx_cuda_sum_to_host,
    .sum_squares_to_host = gptx_cuda_sum_squares_to_host,
    .adamw = gptx_cuda_adamw,
    .precision = gptx_cuda_precision,
    .storage = gptx_cuda_storage,
    .download_act = gptx_cuda_download_act,
    .fill_act = gptx_cuda_fill_act,
    .convert_weights = gptx_cuda_convert_weights,
    .upload_param = gptx_cuda_upload_param,
    .download_param = gptx_cuda_download_param,
    .fill_param = gptx_cuda_fill_param,
    .host_alloc_pinned = gptx_cuda_host_alloc_pinned,
    .host_free_pinned = gptx_cuda_host_free_pinned,
    .residual_layernorm_forward = gptx_cuda_residual_layernorm_forward,
    .matmul_gelu_forward = gptx_cuda_matmul_gelu_forward,
    .matmul_backward_dgelu = gptx_cuda_matmul_backward_dgelu,
    .attention_naive_forward = NULL,
    .attention_naive_backward = NULL,
    .layernorm_forward_unfused = NULL,
    .layernorm_backward_unfused = NULL,
    .gelu_forward_unfused = NULL,
    .gelu_backward_unfused = NULL,
    .qkv_interleave = gptx_cuda_qkv_interleave,
    .qkv_split = gptx_cuda_qkv_split,
    .compute_stream = gptx_cuda_compute_stream,
    .crossentropy_fused = NULL, /* lib/ runs crossentropy_forward, then _backward */
};

const gptx_backend_ops *gptx_cuda_backend_ops(void) { return &cuda_table; }
