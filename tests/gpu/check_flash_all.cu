/* Every kernel of the tensor-core attention in one unit, for
 * check_flash_ptx.sh (the backend compiles the four units apart). */
#include "cuda_flash_bf16_64.cu"
#include "cuda_flash_bf16_128.cu"
#include "cuda_flash_tf32_64.cu"
#include "cuda_flash_tf32_128.cu"
