#include "checksum.h"

#include <stdlib.h>
#include <string.h>

#define START 0x6a09e667f3bcc908ull
#define MIX_K 0x9e3779b97f4a7c15ull /* odd: multiplying by it is a bijection */

static inline uint64_t step(uint64_t h, uint64_t w) {
    h = (h ^ w) * MIX_K;
    return h ^ (h >> 31); /* a right xorshift is invertible too */
}

static inline uint64_t finish(uint64_t h, uint64_t n) {
    h = step(h, n);
    h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

static inline uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

uint64_t gptx_checksum_f32(const float *x, size_t n) {
    uint64_t h = START;
    size_t i = 0;
    for (; i + 1 < n; i += 2) h = step(h, (uint64_t)bits(x[i]) | (uint64_t)bits(x[i + 1]) << 32);
    if (i < n) h = step(h, bits(x[i]));
    return finish(h, n);
}

uint64_t gptx_checksum_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = START;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w = 0;
        for (int k = 7; k >= 0; k--) w = w << 8 | b[i + (size_t)k];
        h = step(h, w);
    }
    if (i < n) {
        uint64_t w = 0;
        for (size_t k = n; k > i; k--) w = w << 8 | b[k - 1];
        h = step(h, w);
    }
    return finish(h, n);
}

uint64_t gptx_checksum_pairs(const char *const *kv, size_t n, const char *skip_key, int *ok) {
    size_t *order = malloc((n ? n : 1) * sizeof *order), m = 0, bytes = 0;
    *ok = order != NULL;
    if (!order) return 0;
    for (size_t i = 0; i < n; i++) {
        if (skip_key && !strcmp(kv[2 * i], skip_key)) continue;
        order[m++] = i;
        bytes += strlen(kv[2 * i]) + strlen(kv[2 * i + 1]) + 2;
    }
    /* insertion sort: a few hundred keys, and no shared state (qsort would need one) */
    for (size_t j = 1; j < m; j++) {
        size_t v = order[j], k = j;
        for (; k > 0 && strcmp(kv[2 * order[k - 1]], kv[2 * v]) > 0; k--) order[k] = order[k - 1];
        order[k] = v;
    }
    char *buf = malloc(bytes ? bytes : 1);
    uint64_t h = 0;
    if (buf) {
        size_t at = 0;
        for (size_t j = 0; j < m; j++)
            for (int part = 0; part < 2; part++) {
                const char *s = kv[2 * order[j] + (size_t)part];
                size_t len = strlen(s) + 1;
                memcpy(buf + at, s, len);
                at += len;
            }
        h = gptx_checksum_bytes(buf, at);
    }
    *ok = buf != NULL;
    free(buf);
    free(order);
    return h;
}

int gptx_checksums_verified(void) {
    const char *v = getenv("GPTX_SKIP_CHECKSUMS");
    return !(v && !strcmp(v, "1"));
}
