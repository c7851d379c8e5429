/* tests/gpu/test_mma_fragments.cu compiled as C++ against the CPU emulation:
 * checks the emulation's fragment tables (the same test runs on a device). */
#define GPTX_CUDA_EMU 1
#define GPTX_CUDA_FN /* declarations only: the test calls none of the backend */
#include "test_mma_fragments.cu"
