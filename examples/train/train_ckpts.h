/* gptx-train's checkpoint files in --out-dir: step-numbered checkpoints
 * (checkpoint-00000500.safetensors), the `latest` record that names the
 * newest durable one, retention (--keep-checkpoints) and the choice of the
 * checkpoint that --resume DIR continues from (docs/checkpoints.md). */
#ifndef GPTX_TRAIN_CKPTS_H
#define GPTX_TRAIN_CKPTS_H

#include <stddef.h>
#include <stdint.h>

/* The name of the latest record in --out-dir. */
#define CKPT_LATEST "latest"
/* The single checkpoint of gptx-train before 0.6.0 (still resumed). */
#define CKPT_OLD_NAME "checkpoint.safetensors"
/* Bytes of the longest name ckpt_parse_name takes (18 digits), with its NUL. */
#define CKPT_NAME_MAX 42

/* "checkpoint-%08lld.safetensors": 8 digits at least, so names sort by step
 * (up to step 99999999; wider steps still parse). */
void ckpt_name(char *out, size_t cap, int64_t step);

/* 1 when name is a numbered checkpoint's (*step gets its step), else 0. */
int ckpt_parse_name(const char *name, int64_t *step);

/* The run id a checkpoint's record names ("" when none or unreadable). */
void ckpt_run_id(const char *path, char *out, size_t cap);

/* Writes DIR/latest naming the checkpoint of `step` (atomically: the old
 * record or the new one). Call only once that checkpoint is durable. 0, or
 * -1 after a message. */
int ckpt_write_latest(const char *dir, int64_t step);

/* --keep-checkpoints keep (> 0): removes the oldest numbered checkpoints of
 * run run_id at steps up to `step` until keep of them remain. Only files
 * named checkpoint-N.safetensors whose record names run_id are counted or
 * removed (never another run's, never model/best/checkpoint.safetensors);
 * those past `step` (left by an earlier try of this run, replaced when it
 * gets there) stay. 0, or -1 after a message (a file that cannot be
 * removed). */
int ckpt_retain(const char *dir, const char *run_id, int64_t step, int keep);

/* --resume DIR: the checkpoints to try, best first: the one `latest` names,
 * then the numbered ones below it, newest first; without a usable `latest`
 * every numbered one, newest first; then the old layout's
 * checkpoint.safetensors. Only regular files of the folder count (a link to
 * another run's checkpoint is not this run's); latest_why says why a
 * `latest` that is there cannot be used (read without waiting on a FIFO).
 * paths are malloc'ed "DIR/name". 0 (n may be 0), or -1 when out of
 * memory or the folder cannot be read (after a message). */
typedef struct ckpt_candidates {
    char **paths;
    int n;
    int from_latest; /* paths[0] is the one latest names */
    char latest_why[200]; /* not "": `latest` is there but cannot be used, and why */
} ckpt_candidates;
int ckpt_candidates_list(const char *dir, ckpt_candidates *c);
void ckpt_candidates_free(ckpt_candidates *c);

#endif
