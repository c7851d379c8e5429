/* Files the library reads: each is checked to be a regular file before
 * anything is read from it, opened without blocking (a FIFO or a device at
 * the path is an error, not a wait or an endless stream), and a file read
 * whole has a bound, per kind of file, checked before its bytes are. */
#ifndef GPTX_FILE_READ_H
#define GPTX_FILE_READ_H

#include <stddef.h>
#include <stdint.h>

/* The bounds of files read whole (docs/reliability.md): far above what the
 * formats need (GPT-2's encoder.json is 1.0 MB, its vocab.bpe 0.46 MB). */
#define GPTX_MAX_ENCODER_JSON_BYTES ((size_t)64 << 20)
#define GPTX_MAX_VOCAB_BPE_BYTES ((size_t)64 << 20)

/* "a directory", "a FIFO (named pipe)", "a character device", ... for a
 * stat mode that is not a regular file's. */
const char *gptx_file_kind(unsigned mode);

/* Opens path for reading: *fd and *size of a regular file, or GPTX_ERR_IO
 * naming `what`, the path and what is there instead. */
int gptx_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size);

/* The whole of a regular file of at most max_bytes, NUL-terminated (the NUL
 * not counted in *len); *buf is malloc'ed. A larger file is GPTX_ERR_IO
 * naming both sizes; one that grows while being read is cut at the bound
 * and refused the same way. */
int gptx_file_read_whole(const char *path, const char *what, size_t max_bytes,
                         unsigned char **buf, size_t *len);

#endif
