/* Private view of a data loader for checkpoint code: what a saved position
 * refers to, so a resume can refuse a loader over different data or shapes. */
#ifndef GPTX_DATALOADER_H
#define GPTX_DATALOADER_H

#include <stdint.h>

#include "gptx/gptx.h"

typedef struct gptx_dataloader_geometry {
    int batch_size, seq_len, stride; /* stride after resolving 0 -> seq_len */
    int shuffle, drop_last, rank, world_size;
    int64_t n_files;
    int64_t total_tokens;
    int64_t total_windows;
    int64_t batches_per_epoch;
    /* FNV-1a-style 64-bit hash, one step per value, over the file count,
     * then per file its token count and ids: equal data in equal file order
     * gives equal hashes. */
    uint64_t data_hash;
} gptx_dataloader_geometry;

/* Fills *g; dl must not be NULL. */
void gptx_dataloader_geometry_get(const gptx_dataloader *dl, gptx_dataloader_geometry *g);

struct gptx_src;
/* gptx_dataloader_create_from_files over opened sources (files or memory: the
 * fuzzer's entry); the same checks, messages name each source's label. */
int gptx_dataloader_create_from_srcs(gptx_dataloader **out, gptx_context *ctx,
                                     const struct gptx_src *srcs, int n_srcs,
                                     const gptx_dataloader_options *opts);

#endif
