/* The MPI module, libgptx_mpi.so: the MPI engine for CPU data parallelism
 * (mpi_engine.c), loaded by lib/comm/comm.c when a world of several ranks needs
 * it. It links the MPI library; libgptx does not. */
#include "module_host.h"
#include "mpi_engine.h"

const gptx_module_exports *gptx_module_entry(const gptx_module_host *host) {
    static const gptx_module_exports exports = {
        .abi = GPTX_MODULE_ABI,
        .version = GPTX_VERSION_NUMBER,
        .name = "mpi",
        .mpi_create = gptx_comm_mpi_create,
    };
    return gptx_module_host_set(host) ? &exports : NULL;
}
