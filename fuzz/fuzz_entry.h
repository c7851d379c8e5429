/* One fuzz input through every loader of gptx files. Shared by the libFuzzer
 * target (fuzz_checkpoint.c) and the corpus replay test
 * (tests/io/test_fuzz_corpus.c), so a crash found by the fuzzer is
 * replayed through exactly the same path. */
#ifndef GPTX_FUZZ_ENTRY_H
#define GPTX_FUZZ_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"

/* The fixed model inputs are loaded into: vocab 8 (padded 12), context 4,
 * 1 layer, 1 head, width 4, untied head: 364 parameters. */
gptx_model_config gptx_fuzz_config(void);

/* Feeds the bytes as a file to gptx_model_load_weights, gptx_checkpoint_load
 * (with an optimizer), gptx_model_load, gptx_model_import_hf and
 * gptx_model_import_llmc (in memory, through the same internal entry points
 * as the public functions). Returns the number of loaders that accepted the
 * input (0..5); anything else (a crash, a leak, a sanitizer report) is a bug. */
int gptx_fuzz_one_input(const uint8_t *data, size_t size);

/* Frees the context and model kept between inputs. */
void gptx_fuzz_cleanup(void);

#endif
