/* gptx-tokenize --shard-tokens N: a corpus into fixed-size llm.c shards
 *
 *   DIR/NAME_train_000000.bin   N tokens a shard, train and validation
 *   ...                         numbered together in the order written; the
 *   DIR/NAME_val_000003.bin     last of each kind shorter. Validation is
 *   ...                         held out from the whole corpus, piece by
 *                               piece (gptx_tokenize_split.h)
 *   DIR/NAME.manifest           written last: the run is finished
 *   DIR/NAME.progress           while it runs: the shards done, where the
 *   DIR/NAME.pending_<k>.bin    input continues after them, and the ids
 *                               read but not in a shard yet
 *
 * Each shard is written atomically (whole or absent). A folder with shards
 * of NAME but no NAME.manifest is an unfinished run: refused, naming what
 * is there, or with --resume continued after its last recorded shard (the
 * same inputs and settings, checked; the ids those of an uninterrupted
 * run). A finished run's shards are replaced by a new run. Before 0.7 the
 * first shard was validation (NAME_val_000000.bin, format
 * "gptx-tokenize shards 1"): such a finished run is replaced by the next;
 * an unfinished one cannot be continued. */
#ifndef GPTX_TOKENIZE_SHARDS_H
#define GPTX_TOKENIZE_SHARDS_H

#include "gptx_tokenize_stream.h"

typedef struct shards_args {
    stream_args s;          /* inputs, tokenizer, documents, threads */
    const char *out_dir, *name;
    long long shard_tokens;
    double val_fraction;    /* the share of pieces held out (gptx_tokenize_split.h) */
    unsigned long long seed; /* the split's hash key */
    int resume;
} shards_args;

/* 0 done, 1 after a message (the exit status). */
int tokenize_shards(shards_args *a);

#endif
