/* gptx-tokenize --shard-tokens's held-out validation, drawn from the whole
 * corpus (docs/data.md):
 *
 *   the token stream is cut into pieces: each document (from its
 *   <|endoftext|>) in pieces of at most SPLIT_PIECE_TOKENS ids, so a short
 *   document is one piece and a long one (a book) many; a piece is
 *   validation when a seeded hash of its ids falls below the fraction.
 *
 * Content decides, not position or name: the split does not depend on the
 * order of the files, on threads or blocks, on where a run resumed, and
 * identical pieces (a repeated licence text) always land on the same side.
 * A piece is complete when it is full or the next document starts, so the
 * caller needs no lookahead beyond one piece. */
#ifndef GPTX_TOKENIZE_SPLIT_H
#define GPTX_TOKENIZE_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#define SPLIT_PIECE_TOKENS 4096

typedef struct splitter {
    double fraction; /* the share of pieces held out, in [0, 1) */
    uint64_t seed;
    int32_t eot;     /* a document starts at each end-of-text id */
    int32_t piece[SPLIT_PIECE_TOKENS];
    size_t n;        /* ids of the piece so far */
} splitter;

/* Takes ids[0, n) until a piece completes: returns how many it took, and
 * sets *done when the piece (s->piece, s->n ids) is complete and must be
 * routed (then split_take_piece empties it). At the end of the input the
 * caller routes what is left (s->n > 0). */
size_t split_feed(splitter *s, const int32_t *ids, size_t n, int *done);

/* 1 when the piece belongs to validation. */
int split_is_val(const splitter *s, const int32_t *ids, size_t n);

/* Empties the piece after it was routed. */
void split_take_piece(splitter *s);

#endif
