/* gptx-train's --out-dir: one run at a time holds it, and a new run does not
 * replace another run's files unless told to.
 *
 * The lock is an flock on the folder itself (opened O_DIRECTORY): nothing
 * can be deleted out from under it, and the kernel drops it when the run
 * ends, however it ends. Where folders cannot be flock'ed (NFS emulates
 * flock with POSIX locks, which need a file open for writing) the lock is
 * the file .gptx-train.lock, and since a file can be deleted, the run
 * checks before every write that its path still names the locked file. In
 * both cases it also checks that --out-dir still names the folder it
 * locked (not one moved away and replaced): a run that finds its lock gone
 * stops at once, writing nothing more. */
#ifndef GPTX_TRAIN_OUTDIR_H
#define GPTX_TRAIN_OUTDIR_H

#include <sys/types.h>

typedef struct train_outdir {
    int fd;           /* what holds the lock; -1: none */
    int lock_is_file; /* 1: the .gptx-train.lock fallback */
    char dir[4096];   /* --out-dir */
    char file[4200];  /* the fallback's lock file */
    dev_t dev, file_dev; /* the folder (and the lock file) as locked */
    ino_t ino, file_ino;
    int lost; /* found no longer held (reported once) */
} train_outdir;

/* Locks out_dir (which exists). Refused, naming the holder's pid, when
 * another gptx-train holds it. 0, or -1 after a message. */
int outdir_lock(train_outdir *d, const char *out_dir);

/* 0 while the lock still holds out_dir; -1 (after one message) once the
 * folder or the lock file was removed or replaced. */
int outdir_held(train_outdir *d);

void outdir_release(train_outdir *d);

/* The files a run reads (--text, shards, --init-from, the tokenizer), by
 * identity: none of them may be one the run writes or removes. */
typedef struct outdir_input {
    dev_t dev;
    ino_t ino;
    const char *flag, *path; /* for the message */
} outdir_input;
typedef struct outdir_inputs {
    outdir_input *ids;
    int n, cap;
} outdir_inputs;

/* Before the run writes path (a file of its folder): a symbolic link there
 * is removed, so the run writes its own file and never through the link
 * into another folder (another run's checkpoint, a user's file: issue 34,
 * item 2). 0, or -1 after a message. */
int outdir_unlink_link(const char *path);

/* Whose files out_dir holds, before the run writes any. run_id names this
 * run (a resumed run the checkpoint's; "" for one saved before run ids).
 * The run files are metrics.jsonl, checkpoint.safetensors (the layout
 * before 0.6.0), model.safetensors, best.safetensors, loss.svg, latest and
 * every numbered checkpoint-N.safetensors.
 *   - a new run (resume NULL): any of them is another run's;
 *   - a resumed run: metrics.jsonl and the checkpoints are another run's
 *     when they name another run id, latest when the checkpoint it names
 *     does.
 * A link at a run file's name is another run's for a new run, and for a
 * resumed one a name the run replaces by its own file. A run file that is
 * one of the run's inputs (but the --resume checkpoint) is refused, with
 * --overwrite too. Without overwrite another run's files are refused,
 * naming them (and suggesting --resume DIR); with it they are removed
 * (never the --resume file itself, nor a numbered checkpoint of this run)
 * and *fresh is set: a resumed run then starts its records anew. Then each
 * run file (the numbered checkpoints' names too) must be a regular file, a
 * link or absent (a folder, FIFO or device there is refused before the
 * first step). 0, or -1 after a message. */
int outdir_claim(train_outdir *d, const char *run_id, const char *resume, int overwrite,
                 const outdir_inputs *inputs, int *fresh);

/* A new run id: 16 hex digits from /dev/urandom (or the clock and pid). */
void outdir_new_run_id(char out[17]);

#endif
