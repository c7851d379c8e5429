/* The CUDA backend compiled as plain C++ against cuda_emu.h (beside this file):
 * its kernels run on the CPU (one fiber per GPU thread), so the tests can
 * execute the backend's logic on machines without a GPU. One translation
 * unit: every backend function is static except gptx_cuda_emu_backend_ops,
 * so this library links next to a libgptx that holds the real backend. */
#define GPTX_CUDA_EMU 1
#define GPTX_CUDA_FN static __attribute__((unused))

#include "cuda_internal.h"

extern "C" {
#include "cuda_cache.c"
#include "cuda_nccl.c" /* the NCCL engine, over nccl_emu.h: one rank */
#include "cuda_table.c"
}

#include "cuda_attention.cu"
#include "cuda_backend.cu"
#include "cuda_events.cu"
#include "cuda_flash.cu"
#include "cuda_flash_bf16_128.cu"
#include "cuda_flash_bf16_64.cu"
#include "cuda_flash_tf32_128.cu"
#include "cuda_flash_tf32_64.cu"
#include "cuda_graph.cu"
#include "cuda_matmul.cu"
#include "cuda_ops.cu"

/* For the tests of out-of-memory paths: the emulated device's budget (0: none)
 * and what is allocated now. */
extern "C" void gptx_cuda_emu_set_mem_limit(size_t bytes) {
    gptx_emu_mem.limit = bytes;
    gptx_emu_mem.limit_read = 1;
}
extern "C" size_t gptx_cuda_emu_mem_used(void) { return gptx_emu_mem.used; }

/* Vector accesses the kernels made so far (backends/cuda/cuda_vec.h counts
 * them under the emulation): the tests check that aligned buffers take the
 * vector path and unaligned ones the scalar path. */
extern "C" unsigned long long gptx_cuda_emu_vector_accesses(void) { return gptx_emu_vec_accesses; }
