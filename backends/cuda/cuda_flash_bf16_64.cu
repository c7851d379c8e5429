/* The tensor-core attention's kernels for bf16 at head size 64, every
 * tile configuration (cuda_flash.h); one of four units so a parallel build
 * compiles them at once. */
#include "cuda_flash.h"

GPTX_FLASH_INSTANCE(gptx_bf16, 64, bf16_64)
