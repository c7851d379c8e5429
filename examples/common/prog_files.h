/* Whole-file reads for the programs. */
#ifndef GPTX_PROG_FILES_H
#define GPTX_PROG_FILES_H

#include <stddef.h>

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

#endif
