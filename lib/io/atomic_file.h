/* Atomic file replacement: the data goes to "<name>.tmp.<host>.<pid>" in the
 * folder of the file replaced, is fsync'ed, then renamed over it and the
 * folder is fsync'ed. A reader sees either the old file or the complete new
 * one; a failure at any point removes the temp file and keeps the old file.
 * A temp file of a writer that died (kill -9 mid-save) is removed by the
 * next save of the same path on the same host.
 *
 * What is replaced: the path itself when it is a regular file or absent;
 * for a symbolic link, the file the link points to (through a chain of
 * links), written in that file's folder, so the link stays a link (a shell's
 * "> link" does the same); a dangling link's target is created. Anything
 * else at the path (a folder, a FIFO, a device, a socket) is refused before
 * anything is written. The temp file is reached from an open handle of the
 * folder, so a path close to PATH_MAX needs no longer temp path. */
#ifndef GPTX_ATOMIC_FILE_H
#define GPTX_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct gptx_afile {
    int fd;         /* temp file, -1 when closed */
    int dir_fd;     /* the folder of the file replaced, -1 when closed */
    char *path;     /* the file replaced (a link's target), for messages */
    char *name;     /* its name in dir_fd */
    char *tmp_name; /* "<name>.tmp.<host>.<pid>" in dir_fd */
    char *tmp_path; /* the temp file's whole path, for messages */
    uint64_t written;
} gptx_afile;

/* Creates the temp file. On failure nothing is left behind. */
int gptx_afile_open(gptx_afile *f, const char *path);
/* Appends n bytes. On failure the temp file is removed (f is closed). */
int gptx_afile_write(gptx_afile *f, const void *data, size_t n);
/* Overwrites n bytes already written, at offset (a header filled in once
 * the data after it is known). On failure the temp file is removed. */
int gptx_afile_pwrite(gptx_afile *f, uint64_t offset, const void *data, size_t n);
/* fsync, rename over the final name, fsync the folder. Always closes f; on
 * failure the temp file is removed and the previous file is untouched. */
int gptx_afile_commit(gptx_afile *f);
/* Closes f and removes the temp file (no-op when already closed). */
void gptx_afile_abort(gptx_afile *f);

/* Test hook: the write that would take the total of bytes written past
 * `bytes` fails with GPTX_ERR_IO after writing the bytes up to it (a full
 * disk, simulated). -1 turns it off. Process-wide; for tests only. */
void gptx_afile_fail_after_for_testing(int64_t bytes);

#endif
