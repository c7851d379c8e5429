/* gptx_tokenize_split.h */
#include "gptx_tokenize_split.h"

size_t split_feed(splitter *s, const int32_t *ids, size_t n, int *done) {
    *done = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == s->eot && s->n > 0) { /* the next document: this piece ends before it */
            *done = 1;
            return i;
        }
        s->piece[s->n++] = ids[i];
        if (s->n == SPLIT_PIECE_TOKENS) {
            *done = 1;
            return i + 1;
        }
    }
    return n;
}

/* splitmix64's finalizer: every input bit moves every output bit */
static uint64_t mix(uint64_t h) {
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

int split_is_val(const splitter *s, const int32_t *ids, size_t n) {
    uint64_t h = mix(s->seed + 0x9e3779b97f4a7c15ull);
    for (size_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001b3ull;
    h = mix(h ^ n);
    /* the top 53 bits as a uniform number in [0, 1) */
    return (double)(h >> 11) * 0x1.0p-53 < s->fraction;
}

void split_take_piece(splitter *s) { s->n = 0; }
