/* Whole-file reads and the writes of the programs' own records. */
#ifndef GPTX_PROG_FILES_H
#define GPTX_PROG_FILES_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* Every file a program reads is opened here first (docs/reliability.md,
 * "Path rules"): path for reading, only when it is a regular file (or a link
 * to one) of at most max bytes; a FIFO is refused at once, never waited on.
 * The descriptor (blocking), or -1 with *why saying what is there ("a FIFO
 * (named pipe), not a regular file", "it is N bytes, over the limit of M",
 * strerror). */
int prog_open_regular(const char *path, size_t max, const char **why);
/* The same as a stream, or NULL after "<prog>: cannot read <what> <path>:
 * <why>" on stderr. */
FILE *prog_open_read(const char *prog, const char *what, const char *path);
/* Before a program writes path in a folder it manages (gptx-train's run
 * folder, gptx-tokenize's shards): a symbolic link there is removed, so the
 * write makes the program's own file and never goes through the link into
 * another folder (docs/reliability.md, path rule 4). 0, or -1 after
 * "<prog>: cannot replace the link <path> ...". */
int prog_replace_link(const char *prog, const char *path);
/* "a folder", "a FIFO (named pipe)", "a symbolic link", "a device", ... */
const char *prog_file_kind(mode_t mode);

/* The bytes of a regular file, or of standard input when path is "-",
 * NUL-terminated (not counted in *len). NULL after printing
 * "<prog>: cannot read <what> <path>: <why>" on stderr: a missing file, a
 * directory, FIFO or device (not a regular file; a FIFO is not waited on),
 * a read error, no memory. */
char *prog_read_file(const char *prog, const char *what, const char *path, size_t *len);
/* The same, refusing a file (or input) of more than max bytes, and saying
 * so, before it is read. */
char *prog_read_file_max(const char *prog, const char *what, const char *path, size_t max,
                         size_t *len);

/* A file composed in memory, then saved whole through gptx_file_save (a
 * temp file renamed over it: the old file or the new one, a link kept and
 * its target replaced, a FIFO, device or folder refused). */
typedef struct prog_out {
    FILE *f; /* write here (open_memstream) */
    char *buf;
    size_t len;
} prog_out;
/* 0, or -1 after "<prog>: cannot write <path>: out of memory". */
int prog_out_open(prog_out *o, const char *prog, const char *path);
/* Saves what was written to o->f as path; frees o either way. 0, or -1
 * after "<prog>: cannot write <what> <path>: <the library's reason>". */
int prog_out_save(prog_out *o, const char *prog, const char *what, const char *path);
/* path opened for appending rows (created when absent; emptied first when
 * truncate), only when it is a regular file or absent: a FIFO is refused,
 * not waited on, and a device, folder or symbolic link refused. NULL after
 * a message. */
FILE *prog_open_rows(const char *prog, const char *what, const char *path, int truncate);
#endif
