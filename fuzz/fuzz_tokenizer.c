/* Two tokenizer targets (fuzz_util.h):
 *
 * gptx_fuzz_tok_files: the input is encoder.json NUL vocab.bpe [NUL text],
 *   loaded by gptx_tok_load_gpt2_mem (what gptx_tokenizer_load_gpt2 runs on
 *   the files' bytes); a tokenizer that loads must round-trip the text.
 * gptx_fuzz_tok_roundtrip: the input is text for the real GPT-2 tokenizer
 *   (GPTX_FUZZ_GPT2_DIR, loaded once).
 *
 * The round trip checks what gptx.h promises of encode and decode, for
 * allow_special 0 and 1: decode(encode(x)) == x; ids in [0, vocab); the EOT
 * id exactly once per "<|endoftext|>" with 1 and never with 0; capacity
 * len always enough, a smaller one GPTX_ERR_SHAPE with the count needed
 * (ids and bytes); decoding in two calls joins to the same bytes; both merge
 * algorithms give the same ids on a short piece. A broken promise abort()s,
 * so libFuzzer keeps the input. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tokenizer_internal.h"

#ifndef GPTX_FUZZ_GPT2_DIR
#error "GPTX_FUZZ_GPT2_DIR must name the folder of encoder.json and vocab.bpe"
#endif

static const char eot_text[] = "<|endoftext|>";
static const char nul = '\0'; /* between the files: neither may contain one */

static void broken(const char *what, size_t len, int allow_special) {
    fprintf(stderr,
            "tokenizer round trip: %s (%zu input bytes, allow_special %d; last error: %s)\n",
            what, len, allow_special, gptx_last_error());
    abort();
}

/* Non-overlapping "<|endoftext|>" in x, left to right (as encode finds them). */
static size_t count_eot(const char *x, size_t len) {
    const size_t k = sizeof eot_text - 1;
    size_t n = 0;
    for (size_t i = 0; i + k <= len;) {
        if (memcmp(x + i, eot_text, k) == 0) {
            n++;
            i += k;
        } else {
            i++;
        }
    }
    return n;
}

static void check_decode(const gptx_tokenizer *tok, const int32_t *ids, size_t k, const char *x,
                         size_t len, char *back, int allow) {
    size_t need = 0;
    int rc = gptx_tokenizer_decode(tok, ids, k, NULL, 0, &need);
    if (need != len || rc != (len ? GPTX_ERR_SHAPE : GPTX_OK))
        broken("decode with capacity 0 does not report the size", len, allow);
    size_t got = 0;
    if (gptx_tokenizer_decode(tok, ids, k, back, len, &got) != GPTX_OK || got != len ||
        memcmp(back, x, len) != 0)
        broken("decode(encode(x)) != x", len, allow);
    size_t half = k / 2, a = 0, b = 0;
    if (gptx_tokenizer_decode(tok, ids, half, back, len, &a) != GPTX_OK ||
        gptx_tokenizer_decode(tok, ids + half, k - half, back + a, len - a, &b) != GPTX_OK ||
        a + b != len || memcmp(back, x, len) != 0)
        broken("decoding in two calls differs", len, allow);
}

static void check_encode(const gptx_tokenizer *tok, const char *x, size_t len, int allow,
                         int32_t *ids, char *back) {
    size_t k = 0;
    if (gptx_tokenizer_encode(tok, x, len, allow, ids, len, &k) != GPTX_OK)
        broken("encode with capacity len fails", len, allow);
    if (k > len || (len > 0 && k == 0)) broken("id count outside [1, len]", len, allow);
    const int32_t vocab = gptx_tokenizer_vocab_size(tok), eot = gptx_tokenizer_eot_token(tok);
    size_t eots = 0;
    for (size_t i = 0; i < k; i++) {
        if (ids[i] < 0 || ids[i] >= vocab) broken("id out of range", len, allow);
        eots += ids[i] == eot;
    }
    if (eots != (allow ? count_eot(x, len) : 0)) broken("wrong number of EOT ids", len, allow);
    if (k > 0) {
        size_t need = 0;
        int rc = gptx_tokenizer_encode(tok, x, len, allow, k > 1 ? ids : NULL, k - 1, &need);
        if (rc != GPTX_ERR_SHAPE || need != k)
            broken("capacity below the count is not GPTX_ERR_SHAPE with the count", len, allow);
        /* the short call may have written ids: encode again for the decode checks */
        if (gptx_tokenizer_encode(tok, x, len, allow, ids, len, &k) != GPTX_OK)
            broken("encode is not repeatable", len, allow);
    }
    check_decode(tok, ids, k, x, len, back, allow);
}

/* The two merge algorithms on the whole input as one piece. */
static void check_merge_algorithms(const gptx_tokenizer *tok, const char *x, size_t len) {
    if (len == 0 || len > TOK_SMALL_PIECE) return;
    int32_t a[TOK_SMALL_PIECE], b[TOK_SMALL_PIECE];
    size_t na = 0, nb = 0;
    const unsigned char *u = (const unsigned char *)x;
    if (gptx_tok_bpe_piece(tok, u, len, 0, a, &na) != GPTX_OK ||
        gptx_tok_bpe_piece(tok, u, len, 1, b, &nb) != GPTX_OK || na != nb ||
        memcmp(a, b, na * sizeof *a) != 0)
        broken("the small and large merge loops differ", len, 0);
}

static void check_roundtrip(const gptx_tokenizer *tok, const char *x, size_t len) {
    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    char *back = malloc(len ? len : 1);
    if (!ids || !back) abort();
    check_encode(tok, x, len, 0, ids, back);
    check_encode(tok, x, len, 1, ids, back);
    check_merge_algorithms(tok, x, len);
    free(ids);
    free(back);
}

/* ---- tokenizer files ----------------------------------------------------- */

int gptx_fuzz_tok_files(const uint8_t *data, size_t size) {
    gptx_fuzz_part p[3];
    size_t n = gptx_fuzz_split(data, size, &nul, 1, p, 3);
    if (n < 2) return 0;
    gptx_tokenizer *tok = NULL;
    if (gptx_tok_load_gpt2_mem(&tok, p[0].data, p[0].size, "<fuzz encoder.json>", p[1].data,
                               p[1].size, "<fuzz vocab.bpe>") != GPTX_OK)
        return 0;
    static const char sample[] = "Hello world, it's 2024!\n\n<|endoftext|> caf\xc3\xa9 \xff";
    if (n == 3) check_roundtrip(tok, (const char *)p[2].data, p[2].size);
    else check_roundtrip(tok, sample, sizeof sample - 1);
    gptx_tokenizer_destroy(tok);
    return 1;
}

/* GPT-2's byte -> code point table (the alphabet of both files). */
static void byte_to_codepoint(unsigned table[256]) {
    unsigned next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        table[b] = printable ? (unsigned)b : next++;
    }
}

/* bytes in the alphabet, as UTF-8 (JSON-escaped when json); returns length */
static size_t put_token(char *out, const unsigned *b2c, const char *bytes, size_t n, int json) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = b2c[(unsigned char)bytes[i]];
        if (json && (c == '"' || c == '\\')) out[o++] = '\\';
        if (c < 0x80) {
            out[o++] = (char)c;
        } else {
            out[o++] = (char)(0xC0 | c >> 6);
            out[o++] = (char)(0x80 | (c & 0x3F));
        }
    }
    return o;
}

/* A small tokenizer: the 256 bytes, `merges` merges of the list, EOT (its
 * id moved up by eot_shift: 1 makes it one past the last id); its vocab.bpe
 * with or without the version line, with \n or \r\n. */
static int write_tok_seed(const char *dir, const char *name, size_t merges, int version, int crlf,
                          size_t eot_shift, const char *text) {
    static const char *const pairs[][2] = {
        {"h", "e"}, {"t", "he"}, {" ", "the"}, {"i", "n"}, {" ", "in"}, {"e", "r"},
        {"o", "n"}, {" ", "t"}, {"a", "n"}, {"an", "d"}, {" ", "and"}, {"\n", "\n"},
        {"<", "|"}, {"'", "s"}, {" ", " "}, {"1", "2"}};
    if (merges > sizeof pairs / sizeof pairs[0]) return -1;
    unsigned b2c[256];
    byte_to_codepoint(b2c);
    size_t cap = 64 * 1024, e = 0, v = 0;
    char *enc = malloc(cap), *bpe = malloc(cap);
    if (!enc || !bpe) abort();
    enc[e++] = '{';
    for (int b = 0; b < 256; b++) {
        char byte = (char)b;
        enc[e++] = '"';
        e += put_token(enc + e, b2c, &byte, 1, 1);
        e += (size_t)snprintf(enc + e, cap - e, "\": %d, ", b);
    }
    if (version) v += (size_t)snprintf(bpe, cap, "#version: 0.2%s\n", crlf ? "\r" : "");
    for (size_t i = 0; i < merges; i++) {
        char joined[16];
        snprintf(joined, sizeof joined, "%s%s", pairs[i][0], pairs[i][1]);
        enc[e++] = '"';
        e += put_token(enc + e, b2c, joined, strlen(joined), 1);
        e += (size_t)snprintf(enc + e, cap - e, "\": %zu, ", 256 + i);
        v += put_token(bpe + v, b2c, pairs[i][0], strlen(pairs[i][0]), 0);
        bpe[v++] = ' ';
        v += put_token(bpe + v, b2c, pairs[i][1], strlen(pairs[i][1]), 0);
        v += (size_t)snprintf(bpe + v, cap - v, "%s\n", crlf ? "\r" : "");
    }
    e += (size_t)snprintf(enc + e, cap - e, "\"%s\": %zu}", eot_text, 256 + merges + eot_shift);
    gptx_fuzz_part parts[3] = {{(const uint8_t *)enc, e}, {(const uint8_t *)bpe, v},
                               {(const uint8_t *)text, text ? strlen(text) : 0}};
    int rc = gptx_fuzz_write_seed(dir, name, parts, text ? 3 : 2, &nul, 1);
    free(enc);
    free(bpe);
    return rc;
}

int gptx_fuzz_tok_files_seeds(const char *dir) {
    const char *text = "the cat and then in there's 12 \n\n<|endoftext|>  in the end";
    int rc = write_tok_seed(dir, "seed_16_merges", 16, 1, 0, 0, text);
    rc |= write_tok_seed(dir, "seed_crlf_no_version", 12, 0, 1, 0, text);
    rc |= write_tok_seed(dir, "seed_bytes_only", 0, 1, 0, 0, NULL);
    /* refused, at the bound of the id check (ids must be < the entry count) */
    rc |= write_tok_seed(dir, "edge_id_equals_count", 0, 1, 0, 1, NULL);
    return rc;
}

/* ---- the GPT-2 tokenizer's round trip ------------------------------------ */

static gptx_tokenizer *gpt2;

int gptx_fuzz_tok_roundtrip(const uint8_t *data, size_t size) {
    if (!gpt2 && gptx_tokenizer_load_gpt2(&gpt2, GPTX_FUZZ_GPT2_DIR "/encoder.json",
                                          GPTX_FUZZ_GPT2_DIR "/vocab.bpe") != GPTX_OK) {
        fprintf(stderr, "cannot load the GPT-2 tokenizer: %s\n", gptx_last_error());
        abort(); /* the harness, not the input */
    }
    check_roundtrip(gpt2, (const char *)data, size);
    return 1;
}

int gptx_fuzz_tok_roundtrip_seeds(const char *dir) {
    static const char *const texts[][2] = {
        {"seed_english",
         "It was a bright cold day in April, and the clocks were striking thirteen."},
        {"seed_unicode", "caf\xc3\xa9 na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 "
                         "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5 a\xe1\xa0\x8e" "b"},
        {"seed_invalid_utf8", "ab\xff\xfe cd \xc3 \xe4\xb8 \xed\xa0\x80 \xf4\x90\x80\x80 \x80x"},
        {"seed_special", "<|endoftext|>a<|endoftext|><|endoftext|> <|endoftext| <|endoftext|>"},
        {"seed_whitespace", "  \n\n\t x  \r\n   y\xc2\xa0\xe2\x80\x83z   "},
        {"seed_contractions", "I'll don't we're they've I'm he'd it's 'S 12345 3.14 $100"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        gptx_fuzz_part p = {(const uint8_t *)texts[i][1], strlen(texts[i][1])};
        rc |= gptx_fuzz_write_seed(dir, texts[i][0], &p, 1, NULL, 0);
    }
    char letters[300]; /* one piece above TOK_SMALL_PIECE: the heap merge loop */
    for (size_t i = 0; i < sizeof letters; i++) letters[i] = "abcdefghij"[i * 7 % 10];
    gptx_fuzz_part p = {(const uint8_t *)letters, sizeof letters};
    rc |= gptx_fuzz_write_seed(dir, "seed_long_word", &p, 1, NULL, 0);
    return rc;
}
