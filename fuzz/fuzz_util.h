/* What the fuzz targets share: one input cut into parts (several files, or
 * argv), the seed files written back in the same framing, and the generic
 * declarations of the targets (fuzz_main.c and tests/support/fuzz_replay.c are
 * compiled once per target with GPTX_FUZZ_ONE / GPTX_FUZZ_SEEDS naming them). */
#ifndef GPTX_FUZZ_UTIL_H
#define GPTX_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

typedef struct gptx_fuzz_part {
    const uint8_t *data;
    size_t size;
} gptx_fuzz_part;

/* Cuts data at each occurrence of sep (sep_len bytes) into at most max
 * parts; the last part keeps the rest, separators included. Returns the
 * number of parts (>= 1: an input without sep is one part). */
size_t gptx_fuzz_split(const uint8_t *data, size_t size, const void *sep, size_t sep_len,
                       gptx_fuzz_part *parts, size_t max);

/* Writes parts joined by sep to dir/name (a seed); 0 or -1 after a message. */
int gptx_fuzz_write_seed(const char *dir, const char *name, const gptx_fuzz_part *parts,
                         size_t n, const void *sep, size_t sep_len);

/* A NUL-terminated copy of data (malloc'd), for parsers of C strings.
 * Never NULL: out of memory is the harness's failure (abort). */
char *gptx_fuzz_strndup(const uint8_t *data, size_t size);

/* Each target: one input through its parsers. Returns how many of them
 * accepted it (0: refused everywhere, which is fine); a crash, a sanitizer
 * report or an abort() on a broken property is a bug. */
int gptx_fuzz_one_input(const uint8_t *data, size_t size); /* fuzz_entry.h: checkpoints */
int gptx_fuzz_tok_files(const uint8_t *data, size_t size);
int gptx_fuzz_tok_roundtrip(const uint8_t *data, size_t size);
int gptx_fuzz_shard(const uint8_t *data, size_t size);
int gptx_fuzz_hf_config(const uint8_t *data, size_t size);
int gptx_fuzz_train_options(const uint8_t *data, size_t size);

/* Each target's seed files ("seed_*") written into dir: 0 or -1. */
int gptx_fuzz_tok_files_seeds(const char *dir);
int gptx_fuzz_tok_roundtrip_seeds(const char *dir);
int gptx_fuzz_shard_seeds(const char *dir);
int gptx_fuzz_hf_config_seeds(const char *dir);
int gptx_fuzz_train_options_seeds(const char *dir);

#endif
