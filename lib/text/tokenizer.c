/* GPT-2 byte-level BPE tokenizer, token for token equal to tiktoken's "gpt2".
 *
 * encode: text -> segments between "<|endoftext|>" (only with allow_special)
 *         -> pieces (PCRE2 pre-tokenizer; invalid UTF-8 runs are pieces of
 *            their own) -> ids (whole-piece lookup, else rank-ordered merges).
 * decode: ids -> concatenated token bytes.
 *
 * Ranks: tiktoken's rank of a token is its id, and two adjacent parts merge
 * whenever their concatenated bytes form a token. The pair table therefore
 * holds every split (prefix id, suffix id) -> id of every token, not only the
 * 50000 pairs listed in vocab.bpe; vocab.bpe is checked against encoder.json
 * exactly as tiktoken's data_gym_to_mergeable_bpe_ranks does.
 *
 * The tokenizer is immutable after loading, so one instance may encode and
 * decode from many threads at once; every call keeps its scratch on its own
 * stack (or heap, for pieces longer than TOK_SMALL_PIECE bytes).
 */
#define PCRE2_CODE_UNIT_WIDTH 8

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "file_read.h"
#include "handle.h"
#include "tokenizer_internal.h"

#ifndef PCRE2_MATCH_INVALID_UTF
#error "gptx needs PCRE2 >= 10.34 (PCRE2_MATCH_INVALID_UTF)"
#endif

/* The GPT-2 pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s spelled out as Unicode White_Space, which is what \s means in
 * tiktoken's regex engine. PCRE2's own \s (with UCP) also matches U+180E and
 * so would split "a\u180Eb" differently from tiktoken. */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}" \
           "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                                   "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

static const char eot_text[] = "<|endoftext|>";

/* Open-addressing slot of the bytes -> id table; id < 0 means empty. */
typedef struct {
    uint32_t hash; /* high bits of the 64-bit hash, to skip most memcmp calls */
    int32_t id;
} tok_slot;

/* Slot of the pair table: (left id, right id) -> merged id. */
typedef struct {
    uint64_t key; /* left << 32 | right */
    int32_t id;   /* < 0: empty */
} pair_slot;

struct gptx_tokenizer {
    gptx_handle h;  /* first (handle.h); never exclusive: nothing changes after loading */
    int vocab_size; /* entries of encoder.json, EOT included */
    int eot;
    uint32_t *offsets;       /* (vocab_size + 1): token i is bytes[offsets[i], offsets[i+1]) */
    unsigned char *bytes;
    tok_slot *tokens;        /* ordinary tokens by their bytes (EOT excluded) */
    size_t tokens_mask;
    pair_slot *pairs;
    size_t pairs_mask;
    int32_t byte_id[256];    /* id of each single byte */
    pcre2_code *re;
    int jit;                 /* 1 when the pattern was JIT-compiled */
};

GPTX_HANDLE_FIRST(gptx_tokenizer);

/* ---- hashing -------------------------------------------------------------- */

static inline uint64_t mix64(uint64_t h) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

static inline uint64_t hash_bytes(const unsigned char *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)n * 0xc2b2ae3d27d4eb4full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t w = 0;
        for (size_t i = 0; i < n; i++) w |= (uint64_t)p[i] << (8 * i);
        h = (h ^ w) * 0x94d049bb133111ebull;
    }
    return mix64(h);
}

static inline size_t table_size_for(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* Id of the ordinary token with these bytes, or -1. */
static inline int32_t lookup_token(const gptx_tokenizer *t, const unsigned char *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    uint32_t tag = (uint32_t)(h >> 32);
    for (size_t i = (size_t)h & t->tokens_mask;; i = (i + 1) & t->tokens_mask) {
        const tok_slot *s = &t->tokens[i];
        if (s->id < 0) return -1;
        if (s->hash == tag) {
            uint32_t a = t->offsets[s->id], b = t->offsets[s->id + 1];
            if (b - a == n && memcmp(t->bytes + a, p, n) == 0) return s->id;
        }
    }
}

/* Inserts id under its bytes; returns the id already there, or -1. */
static int32_t insert_token(gptx_tokenizer *t, int32_t id) {
    const unsigned char *p = t->bytes + t->offsets[id];
    size_t n = t->offsets[id + 1] - t->offsets[id];
    int32_t old = lookup_token(t, p, n);
    if (old >= 0) return old;
    uint64_t h = hash_bytes(p, n);
    size_t i = (size_t)h & t->tokens_mask;
    while (t->tokens[i].id >= 0) i = (i + 1) & t->tokens_mask;
    t->tokens[i] = (tok_slot){(uint32_t)(h >> 32), id};
    return -1;
}

static inline uint64_t pair_key(int32_t a, int32_t b) {
    return (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
}

/* Merged id of two adjacent parts, or -1 if they do not merge. */
static inline int32_t lookup_pair(const gptx_tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = pair_key(a, b);
    for (size_t i = (size_t)mix64(key) & t->pairs_mask;; i = (i + 1) & t->pairs_mask) {
        const pair_slot *s = &t->pairs[i];
        if (s->id < 0) return -1;
        if (s->key == key) return s->id;
    }
}

static void insert_pair(gptx_tokenizer *t, int32_t a, int32_t b, int32_t id) {
    uint64_t key = pair_key(a, b);
    size_t i = (size_t)mix64(key) & t->pairs_mask;
    for (; t->pairs[i].id >= 0; i = (i + 1) & t->pairs_mask)
        if (t->pairs[i].key == key) return; /* a+b has one id: the same entry */
    t->pairs[i] = (pair_slot){key, id};
}

/* ---- GPT-2's byte <-> unicode alphabet ------------------------------------ */

/* GPT-2's byte -> code point table (bytes_to_unicode in encoder.py). */
static void byte_to_codepoint(uint32_t table[256]) {
    /* printable Latin-1 maps to itself; the other 68 bytes to 256, 257, ... */
    uint32_t next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        table[b] = printable ? (uint32_t)b : next++;
    }
}

#define ALPHABET_END 324 /* code points used by the alphabet are < 324 */

/* Decodes a data-gym string (UTF-8 of alphabet code points) into bytes.
 * Returns the byte count, or -1 at the first code point outside the
 * alphabet. out has room for n bytes (never more are needed). */
static long decode_data_gym(const int16_t *cp_to_byte, const unsigned char *s, size_t n,
                            unsigned char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i++];
        if (c >= 0x80) { /* only 2-byte sequences (U+0080..U+07FF) can be in the alphabet */
            if (c < 0xC2 || c > 0xDF || i >= n || (s[i] & 0xC0) != 0x80) return -1;
            c = (c & 0x1F) << 6 | (s[i++] & 0x3Fu);
        }
        if (c >= ALPHABET_END || cp_to_byte[c] < 0) return -1;
        out[o++] = (unsigned char)cp_to_byte[c];
    }
    return (long)o;
}

/* ---- loading ----------------------------------------------------------------- */

/* Fills offsets/bytes/eot/vocab_size from encoder.json's {token: id} object. */
static int load_encoder(gptx_tokenizer *t, const unsigned char *text, size_t len, const char *path,
                        const int16_t *cp_to_byte) {
    json_error_t jerr;
    json_t *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &jerr);
    /* jansson names every fault of the text; a failed allocation inside its
     * parser often leaves the error unset (line -1, no text): not the file's fault */
    if (!root && (json_error_code(&jerr) == json_error_out_of_memory || !jerr.text[0]))
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory parsing encoder.json '%s' "
                         "(%zu bytes)", path, len);
    if (!root)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "encoder.json '%s' is not valid JSON (line %d: %s)", path,
                         jerr.line, jerr.text);
    int rc = GPTX_OK;
    unsigned char **tok_bytes = NULL; /* per id, pointing into one scratch block */
    uint32_t *tok_len = NULL;
    unsigned char *scratch = NULL;
    size_t n = json_is_object(root) ? json_object_size(root) : 0;
    if (!json_is_object(root) || n < 257 || n > (size_t)INT32_MAX / 2) {
        rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                       "encoder.json '%s' must be an object of at least 257 \"token\": id entries "
                       "(found %s with %zu)", path, json_is_object(root) ? "an object" : "no object",
                       n);
        goto done;
    }
    size_t key_bytes = 0;
    for (void *it = json_object_iter(root); it; it = json_object_iter_next(root, it))
        key_bytes += json_object_iter_key_len(it);
    tok_bytes = calloc(n, sizeof *tok_bytes);
    tok_len = calloc(n, sizeof *tok_len);
    scratch = malloc(key_bytes + 1);
    if (!tok_bytes || !tok_len || !scratch) {
        rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory loading '%s'", path);
        goto done;
    }
    t->vocab_size = (int)n;
    t->eot = -1;
    size_t used = 0;
    for (void *it = json_object_iter(root); it; it = json_object_iter_next(root, it)) {
        const char *key = json_object_iter_key(it);
        size_t klen = json_object_iter_key_len(it);
        json_t *v = json_object_iter_value(it);
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || (size_t)id >= n) {
            rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                           "encoder.json '%s': the id of \"%.40s\" must be an integer in [0, %zu)",
                           path, key, n);
            goto done;
        }
        if (tok_bytes[id]) {
            rc = GPTX_FAIL(GPTX_ERR_FORMAT, "encoder.json '%s': id %lld is used twice (\"%.40s\")",
                           path, (long long)id, key);
            goto done;
        }
        long blen;
        if (klen == sizeof eot_text - 1 && memcmp(key, eot_text, klen) == 0) {
            t->eot = (int)id;
            memcpy(scratch + used, key, klen);
            blen = (long)klen;
        } else {
            blen = decode_data_gym(cp_to_byte, (const unsigned char *)key, klen, scratch + used);
            if (blen <= 0) {
                rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                               "encoder.json '%s': token \"%.40s\" (id %lld) is empty or has a "
                               "character outside GPT-2's byte alphabet", path, key, (long long)id);
                goto done;
            }
        }
        tok_bytes[id] = scratch + used;
        tok_len[id] = (uint32_t)blen;
        used += (size_t)blen;
    }
    if (t->eot < 0) {
        rc = GPTX_FAIL(GPTX_ERR_FORMAT, "encoder.json '%s' has no \"%s\" token", path, eot_text);
        goto done;
    }
    if (used > UINT32_MAX) {
        rc = GPTX_FAIL(GPTX_ERR_FORMAT, "encoder.json '%s': tokens hold %zu bytes; at most 4 GiB",
                       path, used);
        goto done;
    }
    /* ids are unique and each < n, so all of [0, n) is present: pack them */
    t->offsets = malloc((n + 1) * sizeof *t->offsets);
    t->bytes = malloc(used ? used : 1);
    if (!t->offsets || !t->bytes) {
        rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory loading '%s'", path);
        goto done;
    }
    uint32_t off = 0;
    for (size_t i = 0; i < n; i++) {
        t->offsets[i] = off;
        memcpy(t->bytes + off, tok_bytes[i], tok_len[i]);
        off += tok_len[i];
    }
    t->offsets[n] = off;
done:
    free(tok_bytes);
    free(tok_len);
    free(scratch);
    json_decref(root);
    return rc;
}

/* Builds the bytes -> id table and the byte ids; checks the 256 bytes. */
static int build_token_table(gptx_tokenizer *t, const char *path) {
    size_t cap = table_size_for((size_t)t->vocab_size);
    t->tokens = malloc(cap * sizeof *t->tokens);
    if (!t->tokens) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    for (size_t i = 0; i < cap; i++) t->tokens[i].id = -1;
    t->tokens_mask = cap - 1;
    for (int32_t id = 0; id < t->vocab_size; id++) {
        if (id == t->eot) continue;
        int32_t old = insert_token(t, id);
        if (old >= 0)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "encoder.json '%s': ids %d and %d have the same bytes",
                             path, old, id);
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = lookup_token(t, &c, 1);
        if (t->byte_id[b] < 0 || t->byte_id[b] >= 256)
            return GPTX_FAIL(GPTX_ERR_FORMAT,
                             "encoder.json '%s': byte 0x%02x must be a token with an id below 256 "
                             "(it is %d)", path, b, t->byte_id[b]);
    }
    return GPTX_OK;
}

/* Checks vocab.bpe: after an optional "#version" line, merge i ("a b") must
 * produce token 256 + i and every ordinary token must come from a merge or
 * be a single byte (tiktoken's own consistency check). */
static int check_merges(gptx_tokenizer *t, const unsigned char *text, size_t len, const char *path,
                        const int16_t *cp_to_byte) {
    unsigned char *buf = malloc(len + 1);
    if (!buf) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int rc = GPTX_OK;
    size_t pos = 0, line_no = 0, merges = 0;
    while (pos < len) {
        const unsigned char *line = text + pos;
        const unsigned char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - line) : len - pos;
        pos += ll + (nl ? 1 : 0);
        line_no++;
        if (ll && line[ll - 1] == '\r') ll--;
        if (line_no == 1 && ll >= 8 && memcmp(line, "#version", 8) == 0) continue;
        if (ll == 0) continue;
        const unsigned char *sp = memchr(line, ' ', ll);
        long la = sp ? decode_data_gym(cp_to_byte, line, (size_t)(sp - line), buf) : -1;
        long lb = la > 0 ? decode_data_gym(cp_to_byte, sp + 1, ll - (size_t)(sp - line) - 1,
                                           buf + la)
                         : -1;
        if (la <= 0 || lb <= 0) {
            rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                           "vocab.bpe '%s' line %zu: expected two tokens of GPT-2's byte alphabet "
                           "separated by one space", path, line_no);
            goto done;
        }
        int32_t a = lookup_token(t, buf, (size_t)la), b = lookup_token(t, buf + la, (size_t)lb);
        int32_t ab = lookup_token(t, buf, (size_t)(la + lb));
        if (a < 0 || b < 0 || ab != (int32_t)(256 + merges)) {
            rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                           "vocab.bpe '%s' line %zu: merge %zu must join two tokens into token %zu of "
                           "encoder.json (ids %d + %d -> %d); the files do not belong together",
                           path, line_no, merges, 256 + merges, a, b, ab);
            goto done;
        }
        merges++;
    }
    if (256 + merges + 1 != (size_t)t->vocab_size) {
        rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                       "vocab.bpe '%s' has %zu merges; encoder.json's %d tokens need %d (256 bytes + "
                       "merges + %s)", path, merges, t->vocab_size, t->vocab_size - 257, eot_text);
        goto done;
    }
done:
    free(buf);
    return rc;
}

/* Every split of every token whose halves are tokens: (prefix, suffix) -> token. */
static int build_pair_table(gptx_tokenizer *t) {
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            size_t cap = table_size_for(count);
            t->pairs = malloc(cap * sizeof *t->pairs);
            if (!t->pairs) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
            for (size_t i = 0; i < cap; i++) t->pairs[i].id = -1;
            t->pairs_mask = cap - 1;
        }
        for (int32_t id = 0; id < t->vocab_size; id++) {
            if (id == t->eot) continue;
            const unsigned char *p = t->bytes + t->offsets[id];
            size_t n = t->offsets[id + 1] - t->offsets[id];
            for (size_t k = 1; k < n; k++) {
                int32_t a = lookup_token(t, p, k);
                if (a < 0) continue;
                int32_t b = lookup_token(t, p + k, n - k);
                if (b < 0) continue;
                if (pass == 0) count++;
                else insert_pair(t, a, b, id);
            }
        }
    }
    return GPTX_OK;
}

static int compile_pattern(gptx_tokenizer *t) {
    int err;
    PCRE2_SIZE err_off;
    /* MATCH_INVALID_UTF: invalid UTF-8 never matches, so it ends up in the
     * gaps between matches instead of making the match fail. */
    t->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &err_off, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(err, msg, sizeof msg);
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "PCRE2 cannot compile the GPT-2 pattern at offset %zu: %s (PCRE2 >= 10.34 "
                         "with Unicode support is required)", (size_t)err_off, (const char *)msg);
    }
    t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    return GPTX_OK;
}

static void release_tokenizer(gptx_handle *h) {
    gptx_tokenizer *tok = (gptx_tokenizer *)h;
    pcre2_code_free(tok->re);
    free(tok->offsets);
    free(tok->bytes);
    free(tok->tokens);
    free(tok->pairs);
}

void gptx_tokenizer_destroy(gptx_tokenizer *tok) {
    gptx_handle_destroy(tok, GPTX_KIND_TOKENIZER, "tok", __func__);
}

int gptx_tok_load_gpt2_mem(gptx_tokenizer **out, const void *encoder_json, size_t encoder_len,
                           const char *encoder_name, const void *vocab_bpe, size_t vocab_len,
                           const char *vocab_name) {
    *out = NULL;
    gptx_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&t->h, GPTX_KIND_TOKENIZER, NULL, NULL, release_tokenizer);
    uint32_t b2c[256];
    int16_t c2b[ALPHABET_END];
    byte_to_codepoint(b2c);
    for (int i = 0; i < ALPHABET_END; i++) c2b[i] = -1;
    for (int b = 0; b < 256; b++) c2b[b2c[b]] = (int16_t)b;
    int rc = load_encoder(t, encoder_json, encoder_len, encoder_name, c2b);
    if (rc == GPTX_OK) rc = build_token_table(t, encoder_name);
    if (rc == GPTX_OK) rc = check_merges(t, vocab_bpe, vocab_len, vocab_name, c2b);
    if (rc == GPTX_OK) rc = build_pair_table(t);
    if (rc == GPTX_OK) rc = compile_pattern(t);
    if (rc != GPTX_OK) {
        gptx_tokenizer_destroy(t);
        return rc;
    }
    *out = t;
    return GPTX_OK;
}

int gptx_tokenizer_load_gpt2(gptx_tokenizer **out, const char *encoder_json_path,
                             const char *vocab_bpe_path) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_NULL(encoder_json_path);
    GPTX_CHECK_NULL(vocab_bpe_path);
    unsigned char *enc = NULL, *bpe = NULL;
    size_t enc_len = 0, bpe_len = 0;
    /* regular files of bounded size (a FIFO or /dev/zero is an error) */
    int rc = gptx_file_read_whole(encoder_json_path, "encoder.json", GPTX_MAX_ENCODER_JSON_BYTES,
                                  &enc, &enc_len);
    if (rc == GPTX_OK)
        rc = gptx_file_read_whole(vocab_bpe_path, "vocab.bpe", GPTX_MAX_VOCAB_BPE_BYTES, &bpe,
                                  &bpe_len);
    if (rc == GPTX_OK)
        rc = gptx_tok_load_gpt2_mem(out, enc, enc_len, encoder_json_path, bpe, bpe_len,
                                    vocab_bpe_path);
    free(enc);
    free(bpe);
    return rc;
}

int gptx_tokenizer_vocab_size(const gptx_tokenizer *tok) {
    if (gptx_handle_check(tok, GPTX_KIND_TOKENIZER, "tok", __func__) != GPTX_OK) return 0;
    return tok->vocab_size;
}

int gptx_tokenizer_eot_token(const gptx_tokenizer *tok) {
    if (gptx_handle_check(tok, GPTX_KIND_TOKENIZER, "tok", __func__) != GPTX_OK) return -1;
    return tok->eot;
}

/* ---- byte-pair merging --------------------------------------------------- */

/* tiktoken's loop: merge the leftmost adjacent pair of lowest rank until no
 * pair merges. O(n^2), fastest for the short pieces of ordinary text.
 * ids: (n) parts in, merged parts out; returns the part count. */
static size_t bpe_small(const gptx_tokenizer *t, int32_t *ids, size_t n) {
    int32_t rank[TOK_SMALL_PIECE]; /* rank[i]: id of ids[i] + ids[i+1], INT32_MAX if none */
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = lookup_pair(t, ids[i], ids[i + 1]);
        rank[i] = r < 0 ? INT32_MAX : r;
    }
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == INT32_MAX) break;
        ids[best] = rank[best];
        memmove(ids + best + 1, ids + best + 2, (n - best - 2) * sizeof *ids);
        memmove(rank + best + 1, rank + best + 2, (n - best - 2) * sizeof *rank);
        n--;
        if (best > 0) {
            int32_t r = lookup_pair(t, ids[best - 1], ids[best]);
            rank[best - 1] = r < 0 ? INT32_MAX : r;
        }
        if (best + 1 < n) {
            int32_t r = lookup_pair(t, ids[best], ids[best + 1]);
            rank[best] = r < 0 ? INT32_MAX : r;
        }
    }
    return n;
}

/* Heap entry: a candidate merge of the part starting at byte `pos` with its
 * right neighbour into token `rank`. Ordered by (rank, pos): the leftmost
 * lowest rank first, as in bpe_small. */
typedef struct {
    int32_t rank;
    size_t pos;
} merge_cand;

static inline int cand_less(merge_cand a, merge_cand b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

/* Binary min-heap of candidates that grows as needed. */
typedef struct {
    merge_cand *h;
    size_t n, cap;
} cand_heap;

static int heap_push(cand_heap *q, merge_cand c) {
    if (q->n == q->cap) {
        size_t cap = q->cap < 16 ? 16 : q->cap + q->cap / 2;
        merge_cand *h = cap <= SIZE_MAX / sizeof *h ? realloc(q->h, cap * sizeof *h) : NULL;
        if (!h) return -1;
        q->h = h;
        q->cap = cap;
    }
    size_t i = q->n++;
    while (i > 0 && cand_less(c, q->h[(i - 1) / 2])) {
        q->h[i] = q->h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    q->h[i] = c;
    return 0;
}

static merge_cand heap_pop(cand_heap *q) {
    merge_cand top = q->h[0], last = q->h[--q->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->n) break;
        if (c + 1 < q->n && cand_less(q->h[c + 1], q->h[c])) c++;
        if (!cand_less(q->h[c], last)) break;
        q->h[i] = q->h[c];
        i = c;
    }
    if (q->n) q->h[i] = last;
    return top;
}

#define NONE SIZE_MAX

/* Pushes the candidate merge of part i with its right neighbour j, if any. */
static int push_pair(const gptx_tokenizer *t, cand_heap *q, const int32_t *ids, size_t i, size_t j) {
    if (i == NONE || j == NONE) return 0;
    int32_t r = lookup_pair(t, ids[i], ids[j]);
    return r < 0 ? 0 : heap_push(q, (merge_cand){r, i});
}

/* Same result as bpe_small in O(n log n): parts are a linked list over byte
 * positions; a heap holds candidate merges, checked when popped (stale ones
 * are skipped). ids: (n) parts in, merged parts out; returns the part count
 * or 0 when out of memory. */
static size_t bpe_large(const gptx_tokenizer *t, int32_t *ids, size_t n) {
    size_t *next = malloc(n * sizeof *next), *prev = malloc(n * sizeof *prev);
    cand_heap q = {NULL, 0, 0};
    size_t parts = 0;
    if (!next || !prev) goto done;
    for (size_t i = 0; i < n; i++) {
        next[i] = i + 1 < n ? i + 1 : NONE;
        prev[i] = i > 0 ? i - 1 : NONE;
        if (push_pair(t, &q, ids, i, next[i])) goto done;
    }
    while (q.n > 0) {
        merge_cand c = heap_pop(&q);
        size_t i = c.pos, j = next[i];
        if (ids[i] < 0 || j == NONE || lookup_pair(t, ids[i], ids[j]) != c.rank) continue; /* stale */
        ids[i] = c.rank;
        ids[j] = -1;
        next[i] = next[j];
        if (next[j] != NONE) prev[next[j]] = i;
        if (push_pair(t, &q, ids, prev[i], i) || push_pair(t, &q, ids, i, next[i])) goto done;
    }
    for (size_t i = 0; i != NONE; i = next[i]) ids[parts++] = ids[i];
done:
    free(next);
    free(prev);
    free(q.h);
    return parts;
}

int gptx_tok_bpe_piece(const gptx_tokenizer *tok, const unsigned char *piece, size_t n, int large,
                       int32_t *out, size_t *count) {
    GPTX_CHECK_NULL(tok);
    GPTX_CHECK_NULL(piece);
    GPTX_CHECK_NULL(out);
    GPTX_CHECK_NULL(count);
    if (n == 0 || (!large && n > TOK_SMALL_PIECE))
        return GPTX_FAIL(GPTX_ERR_INVALID, "piece length %zu is invalid for this algorithm", n);
    for (size_t i = 0; i < n; i++) out[i] = tok->byte_id[piece[i]];
    *count = large ? bpe_large(tok, out, n) : bpe_small(tok, out, n);
    if (*count == 0) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for a %zu-byte piece", n);
    return GPTX_OK;
}

/* ---- encoding -------------------------------------------------------------- */

/* Where ids go: written while they fit, always counted. */
typedef struct {
    int32_t *ids;
    size_t cap, n;
} id_sink;

static inline void sink_push(id_sink *s, int32_t id) {
    if (s->n < s->cap) s->ids[s->n] = id;
    s->n++;
}

static int encode_piece(const gptx_tokenizer *t, const unsigned char *p, size_t n, id_sink *s) {
    int32_t id = n == 1 ? t->byte_id[*p] : lookup_token(t, p, n);
    if (id >= 0) {
        sink_push(s, id);
        return GPTX_OK;
    }
    if (n <= TOK_SMALL_PIECE) {
        int32_t parts[TOK_SMALL_PIECE];
        for (size_t i = 0; i < n; i++) parts[i] = t->byte_id[p[i]];
        size_t k = bpe_small(t, parts, n);
        for (size_t i = 0; i < k; i++) sink_push(s, parts[i]);
        return GPTX_OK;
    }
    int32_t *parts = malloc(n * sizeof *parts);
    if (!parts) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for a %zu-byte piece", n);
    for (size_t i = 0; i < n; i++) parts[i] = t->byte_id[p[i]];
    size_t k = bpe_large(t, parts, n);
    for (size_t i = 0; i < k; i++) sink_push(s, parts[i]);
    free(parts);
    if (k == 0) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory for a %zu-byte piece", n);
    return GPTX_OK;
}

/* Pre-tokenizes text[start, end) (the regex sees `end` as the end of the
 * subject) and encodes each piece. Bytes between two matches are invalid
 * UTF-8 (every valid character starts some match) and form one piece. */
static int encode_ordinary(const gptx_tokenizer *t, const unsigned char *text, size_t start,
                           size_t end, pcre2_match_data *md, id_sink *s) {
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    size_t off = start;
    while (off < end) {
        int rc = t->jit ? pcre2_jit_match(t->re, text, end, off, 0, md, NULL)
                        : pcre2_match(t->re, text, end, off, 0, md, NULL);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && t->jit) /* e.g. JIT stack: interpreter */
            rc = pcre2_match(t->re, text, end, off, 0, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return encode_piece(t, text + off, end - off, s);
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return GPTX_FAIL(GPTX_ERR_BACKEND, "PCRE2 failed at byte %zu: %s", off,
                             (const char *)msg);
        }
        size_t ms = ov[0], me = ov[1];
        if (me <= ms || ms < off) /* the pattern never matches empty; be safe anyway */
            return GPTX_FAIL(GPTX_ERR_BACKEND, "PCRE2 returned an empty match at byte %zu", off);
        if (ms > off) GPTX_TRY(encode_piece(t, text + off, ms - off, s));
        GPTX_TRY(encode_piece(t, text + ms, me - ms, s));
        off = me;
    }
    return GPTX_OK;
}

/* First occurrence of the EOT text in text[from, len), or len. */
static size_t find_eot(const unsigned char *text, size_t from, size_t len) {
    const size_t k = sizeof eot_text - 1;
    while (from + k <= len) {
        const unsigned char *lt = memchr(text + from, '<', len - from - k + 1);
        if (!lt) break;
        size_t at = (size_t)(lt - text);
        if (memcmp(lt, eot_text, k) == 0) return at;
        from = at + 1;
    }
    return len;
}

int gptx_tokenizer_encode(const gptx_tokenizer *tok, const char *text, size_t len,
                          int allow_special, int32_t *ids, size_t capacity, size_t *n_ids) {
    GPTX_CHECK_HANDLE(tok, GPTX_KIND_TOKENIZER);
    GPTX_CHECK_NULL(n_ids);
    *n_ids = 0;
    if (!text && len > 0)
        return GPTX_FAIL(GPTX_ERR_NULL, "argument 'text' is NULL but len is %zu", len);
    if (!ids && capacity > 0)
        return GPTX_FAIL(GPTX_ERR_NULL, "argument 'ids' is NULL but capacity is %zu", capacity);
    if (allow_special != 0 && allow_special != 1)
        return GPTX_FAIL(GPTX_ERR_INVALID, "allow_special is %d; expected 0 or 1", allow_special);
    id_sink s = {ids, capacity, 0};
    if (len == 0) return GPTX_OK;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    const unsigned char *u = (const unsigned char *)text;
    int rc = GPTX_OK;
    size_t pos = 0;
    while (rc == GPTX_OK && pos < len) {
        size_t stop = allow_special ? find_eot(u, pos, len) : len;
        rc = encode_ordinary(tok, u, pos, stop, md, &s);
        pos = stop;
        if (rc == GPTX_OK && pos < len) { /* at an EOT */
            sink_push(&s, tok->eot);
            pos += sizeof eot_text - 1;
        }
    }
    pcre2_match_data_free(md);
    if (rc != GPTX_OK) return rc;
    *n_ids = s.n;
    if (s.n > capacity)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "capacity is %zu ids; the text needs %zu", capacity, s.n);
    return GPTX_OK;
}

/* ---- decoding -------------------------------------------------------------- */

int gptx_tokenizer_decode(const gptx_tokenizer *tok, const int32_t *ids, size_t n, char *out,
                          size_t capacity, size_t *out_len) {
    GPTX_CHECK_HANDLE(tok, GPTX_KIND_TOKENIZER);
    GPTX_CHECK_NULL(out_len);
    *out_len = 0;
    if (!ids && n > 0) return GPTX_FAIL(GPTX_ERR_NULL, "argument 'ids' is NULL but n is %zu", n);
    if (!out && capacity > 0)
        return GPTX_FAIL(GPTX_ERR_NULL, "argument 'out' is NULL but capacity is %zu", capacity);
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok->vocab_size)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "ids[%zu] is %d; must be in [0, %d)", i,
                             (int)ids[i], tok->vocab_size);
        need += tok->offsets[ids[i] + 1] - tok->offsets[ids[i]];
    }
    *out_len = need;
    if (need > capacity)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "capacity is %zu bytes; the ids decode to %zu", capacity,
                         need);
    char *o = out;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = tok->offsets[ids[i]], b = tok->offsets[ids[i] + 1];
        memcpy(o, tok->bytes + a, b - a);
        o += b - a;
    }
    return GPTX_OK;
}

int gptx_tokenizer_token_bytes(const gptx_tokenizer *tok, int32_t id, const char **bytes,
                               size_t *len) {
    GPTX_CHECK_HANDLE(tok, GPTX_KIND_TOKENIZER);
    GPTX_CHECK_NULL(bytes);
    GPTX_CHECK_NULL(len);
    *bytes = NULL;
    *len = 0;
    if (id < 0 || id >= tok->vocab_size)
        return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE, "id is %d; must be in [0, %d)", (int)id,
                         tok->vocab_size);
    *bytes = (const char *)tok->bytes + tok->offsets[id];
    *len = tok->offsets[id + 1] - tok->offsets[id];
    return GPTX_OK;
}
