/* Tokenizer internals reachable from tests (tests/text/) and fuzz/. */
#ifndef GPTX_TOKENIZER_INTERNAL_H
#define GPTX_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"

/* Pieces up to this many bytes use the quadratic merge loop (tiktoken's);
 * longer ones a heap, so a megabyte of letters without a space stays
 * O(n log n). Both give identical ids. */
#define TOK_SMALL_PIECE 128

/* Byte-pair encodes one piece of n >= 1 bytes into out (room for n ids)
 * without the whole-piece lookup; *count receives the number of ids.
 * `large` picks the algorithm regardless of n (tests compare the two). */
int gptx_tok_bpe_piece(const gptx_tokenizer *tok, const unsigned char *piece, size_t n, int large,
                       int32_t *out, size_t *count);

/* gptx_tokenizer_load_gpt2 on the files' bytes (the fuzzer's entry: no temp
 * files). The names stand for the files in messages. */
int gptx_tok_load_gpt2_mem(gptx_tokenizer **out, const void *encoder_json, size_t encoder_len,
                           const char *encoder_name, const void *vocab_bpe, size_t vocab_len,
                           const char *vocab_name);

#endif
