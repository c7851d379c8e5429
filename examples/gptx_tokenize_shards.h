/* gptx-tokenize --shard-tokens N: a corpus into fixed-size llm.c shards
 *
 *   DIR/NAME_val_000000.bin     the first N tokens (llm.c's fineweb layout:
 *   DIR/NAME_train_000001.bin   the first shard is validation), then N
 *   ...                         tokens a shard, the last one shorter
 *   DIR/NAME.manifest           written last: the run is finished
 *   DIR/NAME.progress           while it runs: the shards done and where
 *                               the input continues after them
 *
 * Each shard is written atomically (whole or absent). A folder with shards
 * of NAME but no NAME.manifest is an unfinished run: refused, naming what
 * is there, or with --resume continued after its last recorded shard (the
 * same inputs and settings, checked; the ids those of an uninterrupted
 * run). A finished run's shards are replaced by a new run. */
#ifndef GPTX_TOKENIZE_SHARDS_H
#define GPTX_TOKENIZE_SHARDS_H

#include "gptx_tokenize_stream.h"

typedef struct shards_args {
    stream_args s;          /* inputs, tokenizer, documents, threads */
    const char *out_dir, *name;
    long long shard_tokens;
    int resume;
} shards_args;

/* 0 done, 1 after a message (the exit status). */
int tokenize_shards(shards_args *a);

#endif
