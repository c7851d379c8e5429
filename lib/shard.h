/* llm.c token shard format constants (see lib/shard.c and docs/data.md). */
#ifndef GPTX_SHARD_H
#define GPTX_SHARD_H

#include "gptx/gptx.h"

#define GPTX_SHARD_MAGIC 20240520u
#define GPTX_SHARD_VERSION 1
#define GPTX_SHARD_HEADER_BYTES 1024 /* 256 little-endian int32 */
#define GPTX_SHARD_MAX_ID 65535      /* tokens are uint16 */

#endif
