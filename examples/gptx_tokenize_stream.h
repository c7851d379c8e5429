/* gptx-tokenize's encoder: a sorted list of text files read in blocks and
 * encoded on several threads, the ids handed over in input order, exactly
 * those of encoding each document whole.
 *
 * Documents: each file is one, or with a separator each part of a file
 * between two separators (the separator itself is dropped); an empty
 * document is skipped. With eot, each document's ids start with the
 * end-of-text token (llm.c, nanoGPT).
 *
 * Blocks: a document is cut where the GPT-2 pre-tokenizer always has a
 * piece boundary (stream_safe_cut) and at its own ends, so the ids do not
 * depend on the block size, the thread count or where a run resumed.
 * Memory: about threads x (5 x block bytes) plus the reader's buffer (a
 * document without any cut point is held whole). */
#ifndef GPTX_TOKENIZE_STREAM_H
#define GPTX_TOKENIZE_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"
#include "prog_inputs.h"

/* A place in the input where encoding can start again. */
typedef struct stream_pos {
    uint64_t file;  /* index in the inputs */
    uint64_t off;   /* byte offset in that file */
    int doc_start;  /* a document starts here (its EOT comes first) */
} stream_pos;

/* Gets each block's ids in order; pos is where the block starts. Returns 0
 * to go on, -1 to stop (after its own message). */
typedef int (*stream_sink)(void *ctx, const stream_pos *pos, const int32_t *ids, size_t n);

typedef struct stream_args {
    const prog_inputs *in;
    const gptx_tokenizer *tok;
    int special;            /* "<|endoftext|>" in the text is the token */
    int eot;                /* EOT before each document */
    const char *sep;        /* document separator, or NULL */
    size_t sep_len;
    size_t chunk_bytes;     /* block size */
    int threads;
    int progress;           /* a progress line on stderr (a terminal) */
    stream_pos start;       /* where to begin (all 0 with doc_start 1: the start) */
} stream_args;

/* Encodes everything from a->start on. 0, or -1 after a message. */
int stream_encode(const stream_args *a, stream_sink sink, void *ctx);

/* The last position in buf[0, len) where a block may end (0 if none). */
size_t stream_safe_cut(const unsigned char *buf, size_t len);

#endif
