/* llm.c token shard format constants (see lib/io/shard.c and docs/data.md). */
#ifndef GPTX_SHARD_H
#define GPTX_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"

#define GPTX_SHARD_MAGIC 20240520u
#define GPTX_SHARD_VERSION 1
#define GPTX_SHARD_HEADER_BYTES 1024 /* 256 little-endian int32 */
#define GPTX_SHARD_MAX_ID 65535      /* tokens are uint16 */

struct gptx_src;
/* gptx_shard_read on an opened source (a file or memory: the fuzzer's entry).
 * The same checks and messages; the source's label names it. */
int gptx_shard_read_src(const struct gptx_src *src, int32_t **tokens, size_t *n);
/* "an llm.c token shard (magic 20240520)" and the like for the first
 * header word of llm.c's files, or NULL: what a file given for another
 * purpose is, for errors. */
const char *gptx_llmc_magic_name(uint32_t magic);

#endif
