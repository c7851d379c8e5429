/* The tensor-core attention's kernels for tf32 (fp32 activations) at head size 128, every
 * tile configuration (cuda_flash.h); one of four units so a parallel build
 * compiles them at once. */
#include "cuda_flash.h"

GPTX_FLASH_INSTANCE(float, 128, tf32_128)
