/* The cuda module, libgptx_cuda.so: the CUDA backend's table (cuda_table.c)
 * and, when built with NCCL, the NCCL engine beside it (cuda_nccl.c). It
 * links the CUDA runtime, cuBLASLt and NCCL; libgptx links none of them and
 * loads this module when a context asks for the cuda backend (lib/core/module.h). */
#include "cuda_ops.h"
#include "module_host.h"
#ifdef GPTX_HAVE_NCCL
#include "cuda_nccl.h"
#endif

const gptx_module_exports *gptx_module_entry(const gptx_module_host *host) {
    static gptx_module_exports exports = {
        .abi = GPTX_MODULE_ABI,
        .version = GPTX_VERSION_NUMBER,
        .name = "cuda",
#ifdef GPTX_HAVE_NCCL
        .nccl_check = gptx_comm_nccl_check_context,
        .nccl_unique_id = gptx_comm_nccl_unique_id,
        .nccl_create = gptx_comm_nccl_create,
#endif
    };
    if (!gptx_module_host_set(host)) return NULL;
    exports.backend_ops = gptx_cuda_backend_ops();
    return &exports;
}
