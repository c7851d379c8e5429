/* gptx-tokenize's output folder: a train and a val shard that belong together
 * are replaced together or not at all.
 *
 *   DIR/NAME_train.bin -> NAME.shards/NAME_train.bin   symlinks, made once
 *   DIR/NAME_val.bin   -> NAME.shards/NAME_val.bin
 *   DIR/NAME.shards    -> NAME.shards.HOST.PID.N       the one link a run replaces
 *   DIR/NAME.shards.HOST.PID.N/NAME_train.bin, NAME_val.bin   one run's files
 *
 * A run writes both shards into a folder of its own (each file atomically,
 * by the library), then renames a new NAME.shards link over the old one.
 * rename(2) replaces a name in one step, so whoever opens DIR/NAME_train.bin
 * and DIR/NAME_val.bin (gptx-train, llm.c) finds the old pair or the new one,
 * whole, after a full disk, a crash or kill -9 at any point. The folder the
 * link left is removed, and so are those of runs on this host that died
 * before switching theirs in. (docs/data.md, "gptx-tokenize's folder") */
#ifndef GPTX_TOKENIZE_PAIR_H
#define GPTX_TOKENIZE_PAIR_H

typedef struct shard_pair {
    char *dir, *name; /* DIR and NAME */
    char *gen;        /* the new folder's name in DIR: NAME.shards.HOST.PID.N */
    char *gen_path;   /* DIR/gen */
} shard_pair;

/* Whether the pair's names in dir may be switched: each absent, a link
 * (replaced, its target left alone) or a token shard of an older
 * gptx-tokenize; a folder, FIFO or any other file is not this program's to
 * replace. Checked before the text is read. 0, or -1 after a message. */
int pair_check(const char *dir, const char *name);

/* Creates the run's own folder in dir (which must exist), after
 * pair_check. 0, or -1 after a message. */
int pair_begin(shard_pair *p, const char *dir, const char *name);

/* Where the run writes a split ("train", "val"): DIR/gen/NAME_split.bin,
 * malloc'ed (NULL when out of memory). */
char *pair_new_file(const shard_pair *p, const char *split);

/* Switches the new pair in (the NAME.shards link, then the two file links if
 * they are not those links yet) and removes the old pair's folder. 0, or -1
 * after a message, with the old pair still in place. */
int pair_commit(shard_pair *p);

/* Removes the run's folder and frees p (also after pair_commit, which leaves
 * nothing to remove). */
void pair_end(shard_pair *p);

#endif
