/*
 * gptx-tokenize: turns a text file into llm.c token shards with the GPT-2
 * tokenizer:
 *
 *   gptx-tokenize --input book.txt --out-dir shards
 *     -> shards/book_train.bin (first 90% of the tokens), shards/book_val.bin (last 10%)
 *
 * Both are links into shards/book.shards, which a run switches to its own
 * new folder only once both files are written: the pair is replaced as one
 * unit (gptx_tokenize_pair.h).
 *
 * The file is read and encoded in blocks, each cut where the GPT-2
 * pre-tokenizer always has a piece boundary (see safe_cut), so the ids are
 * exactly those of encoding the whole file at once while only the ids (not
 * the text) are held in memory. Every flag is listed by --help.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gptx/gptx.h"
#include "prog_error.h"
#include "prog_data.h"
#include "prog_text.h"
#include "gptx_tokenize_pair.h"


typedef struct {
    const char *input, *out_dir, *prefix, *encoder, *vocab;
    double val_fraction;
    int eot, special;
    size_t chunk_bytes;
} tokenize_args;

static void usage(void) {
    printf("usage: gptx-tokenize --input FILE --out-dir DIR [options]\n"
           "Encodes FILE with the GPT-2 tokenizer and writes llm.c token shards\n"
           "DIR/NAME_train.bin (the first tokens) and DIR/NAME_val.bin (the last ones):\n"
           "links into DIR/NAME.shards, switched to a new folder once both are written,\n"
           "so a failure leaves the old pair whole.\n"
           "  --input FILE        text to encode (any bytes; invalid UTF-8 is encoded byte-wise)\n"
           "  --out-dir DIR       output directory, created if missing\n"
           "  --prefix NAME       shard name prefix (default: FILE's name without extension)\n"
           "  --val-fraction X    share of the tokens, taken from the end, that go to\n"
           "                      NAME_val.bin; in [0, 1) (default 0.1; 0 = empty val shard)\n"
           "  --eot               start the token stream with <|endoftext|> (id 50256), as\n"
           "                      llm.c does before each document\n"
           PROG_SPECIAL_TOKENS_HELP
           "  --special           the same as --special-tokens allow (its older spelling)\n"
           "  --encoder PATH      GPT-2 encoder.json (default %s/gpt2/encoder.json)\n"
           "  --vocab PATH        GPT-2 vocab.bpe (default %s/gpt2/vocab.bpe)\n"
           "  --chunk-bytes N     bytes read and encoded per block (default 4194304); the ids\n"
           "                      do not depend on it\n"
           "  --help              this text\n",
           prog_data_dir(), prog_data_dir());
}

static int parse_args(int argc, char **argv, tokenize_args *a) {
    *a = (tokenize_args){.encoder = prog_data_path("gpt2/encoder.json"),
                         .vocab = prog_data_path("gpt2/vocab.bpe"),
                         .val_fraction = 0.1,
                         .chunk_bytes = 4u << 20};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage();
            exit(0);
        }
        if (!strcmp(k, "--version")) {
            printf("gptx-tokenize %s\n", gptx_version());
            exit(0);
        }
        if (!strcmp(k, "--eot")) {
            a->eot = 1;
            continue;
        }
        if (!strcmp(k, "--special")) {
            a->special = 1;
            continue;
        }
        int known = !strcmp(k, "--input") || !strcmp(k, "--out-dir") || !strcmp(k, "--prefix") ||
                    !strcmp(k, "--encoder") || !strcmp(k, "--vocab") ||
                    !strcmp(k, "--special-tokens") ||
                    !strcmp(k, "--val-fraction") || !strcmp(k, "--chunk-bytes");
        if (!known) {
            fprintf(stderr, "gptx-tokenize: unknown option '%s' (see --help)\n", k);
            return -1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-tokenize: %s needs a value (see --help)\n", k);
            return -1;
        }
        const char *v = argv[++i];
        char *end = NULL;
        if (!strcmp(k, "--input")) a->input = v;
        else if (!strcmp(k, "--out-dir")) a->out_dir = v;
        else if (!strcmp(k, "--prefix")) a->prefix = v;
        else if (!strcmp(k, "--encoder")) a->encoder = v;
        else if (!strcmp(k, "--vocab")) a->vocab = v;
        else if (!strcmp(k, "--special-tokens")) {
            if (prog_special_tokens_parse("gptx-tokenize", v, &a->special)) return -1;
        } else if (!strcmp(k, "--val-fraction")) {
            errno = 0;
            a->val_fraction = strtod(v, &end);
            if (errno || *end || end == v || !(a->val_fraction >= 0.0 && a->val_fraction < 1.0)) {
                fprintf(stderr, "gptx-tokenize: --val-fraction is '%s'; expected a number in [0, 1)\n",
                        v);
                return -1;
            }
        } else {
            errno = 0;
            unsigned long long n = strtoull(v, &end, 10);
            if (errno || *end || end == v || v[0] == '-' || n < 64 || n > (1ull << 30)) {
                fprintf(stderr, "gptx-tokenize: --chunk-bytes is '%s'; expected 64 .. 2^30\n", v);
                return -1;
            }
            a->chunk_bytes = (size_t)n;
        }
    }
    if (!a->input || !a->out_dir) {
        fprintf(stderr, "gptx-tokenize: --input and --out-dir are required (see --help)\n");
        return -1;
    }
    if (a->prefix && (!a->prefix[0] || strchr(a->prefix, '/'))) {
        fprintf(stderr, "gptx-tokenize: --prefix '%s' must be a non-empty name without '/'\n",
                a->prefix);
        return -1;
    }
    return 0;
}

/* mkdir -p */
static int make_dirs(const char *path) {
    size_t n = strlen(path);
    char *p = malloc(n + 1);
    if (!p) return -1;
    memcpy(p, path, n + 1);
    int rc = 0;
    for (size_t i = 1; i <= n && rc == 0; i++) {
        if (p[i] != '/' && p[i] != '\0') continue;
        char c = p[i];
        p[i] = '\0';
        struct stat st;
        if (stat(p, &st) != 0) {
            if (mkdir(p, 0777) != 0 && errno != EEXIST) rc = -1;
        } else if (!S_ISDIR(st.st_mode)) {
            errno = ENOTDIR;
            rc = -1;
        }
        p[i] = c;
    }
    free(p);
    return rc;
}

/* Default prefix: the input's file name without its last extension. */
static char *default_prefix(const char *input) {
    const char *base = strrchr(input, '/');
    base = base ? base + 1 : input;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) n = (size_t)(dot - base);
    if (n == 0) {
        base = "tokens";
        n = 6;
    }
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, base, n);
        p[n] = '\0';
    }
    return p;
}

static int is_graphic_ascii(unsigned char c) { return c > 0x20 && c < 0x7F; }

/* The last position in buf[0, len) where a block may end: just after a
 * newline that has a visible ASCII character on each side ("x\nY"). The
 * GPT-2 pattern always has a piece boundary on both sides of such a newline
 * (only whitespace alternatives match '\n', its run is this one character,
 * and no alternative looks behind), so encoding the blocks separately gives
 * the same ids as encoding the whole text. Returns 0 if there is none. */
static size_t safe_cut(const unsigned char *buf, size_t len) {
    for (size_t i = len; i >= 3; i--)
        if (buf[i - 2] == '\n' && is_graphic_ascii(buf[i - 1]) && is_graphic_ascii(buf[i - 3]))
            return i - 1;
    return 0;
}

typedef struct {
    int32_t *ids;
    size_t n, cap;
} id_vec;

static int reserve(id_vec *v, size_t more) {
    if (v->cap - v->n >= more) return 0;
    size_t cap = v->cap ? v->cap : 1024;
    while (cap - v->n < more) {
        if (cap > SIZE_MAX / 2 / sizeof *v->ids) return -1;
        cap *= 2;
    }
    int32_t *ids = realloc(v->ids, cap * sizeof *ids);
    if (!ids) return -1;
    v->ids = ids;
    v->cap = cap;
    return 0;
}

/* Reads and encodes the whole input into v; returns the bytes read or -1. */
static long long encode_file(const gptx_tokenizer *tok, const tokenize_args *a, id_vec *v) {
    FILE *f = fopen(a->input, "rb");
    if (!f) {
        fprintf(stderr, "gptx-tokenize: cannot open --input %s: %s\n", a->input, strerror(errno));
        return -1;
    }
    size_t cap = 2 * a->chunk_bytes, have = 0;
    unsigned char *buf = malloc(cap);
    long long total = 0;
    int eof = 0;
    if (a->eot && (reserve(v, 1) != 0 || !buf)) goto oom;
    if (a->eot) v->ids[v->n++] = gptx_tokenizer_eot_token(tok);
    while (buf && !(eof && have == 0)) {
        if (!eof) {
            if (cap - have < a->chunk_bytes) { /* no cut point yet: read on */
                unsigned char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
                if (!nb) goto oom;
                buf = nb;
                cap *= 2;
            }
            size_t got = fread(buf + have, 1, a->chunk_bytes, f);
            if (got < a->chunk_bytes) {
                if (ferror(f)) {
                    fprintf(stderr, "gptx-tokenize: error reading %s\n", a->input);
                    goto fail;
                }
                eof = 1;
            }
            have += got;
            total += (long long)got;
        }
        size_t cut = eof ? have : safe_cut(buf, have);
        if (cut == 0) continue;
        if (reserve(v, cut) != 0) goto oom;
        size_t n = 0;
        int rc = gptx_tokenizer_encode(tok, (const char *)buf, cut, a->special, v->ids + v->n,
                                       v->cap - v->n, &n);
        if (rc != GPTX_OK) {
            fprintf(stderr, "gptx-tokenize: encoding failed: %s\n", prog_error_text());
            goto fail;
        }
        v->n += n;
        memmove(buf, buf + cut, have - cut);
        have -= cut;
    }
    if (!buf) goto oom;
    free(buf);
    fclose(f);
    return total;
oom:
    fprintf(stderr, "gptx-tokenize: out of memory\n");
fail:
    free(buf);
    fclose(f);
    return -1;
}

/* Writes one split into the run's own folder (the pair is switched in
 * later, as one unit). */
static int write_shard(const shard_pair *pair, const char *split, const int32_t *ids, size_t n) {
    char *path = pair_new_file(pair, split);
    if (!path) {
        fprintf(stderr, "gptx-tokenize: out of memory\n");
        return -1;
    }
    int rc = gptx_shard_write(path, ids, n);
    if (rc != GPTX_OK) fprintf(stderr, "gptx-tokenize: %s\n", prog_error_text());
    free(path);
    return rc == GPTX_OK ? 0 : -1;
}

/* Both shards written into a new folder, then switched in together: after a
 * failure the folder still holds the old pair, whole (gptx_tokenize_pair.h). */
static int write_pair(const char *dir, const char *name, const id_vec *v, size_t n_val) {
    shard_pair pair;
    int rc = pair_begin(&pair, dir, name);
    if (!rc) rc = write_shard(&pair, "train", v->ids, v->n - n_val);
    if (!rc) rc = write_shard(&pair, "val", v->ids + (v->n - n_val), n_val);
    if (!rc) rc = pair_commit(&pair);
    if (!rc) {
        printf("wrote %s/%s_train.bin: %zu tokens\n", dir, name, v->n - n_val);
        printf("wrote %s/%s_val.bin: %zu tokens\n", dir, name, n_val);
        printf("(links into %s/%s.shards -> %s, switched as a pair)\n", dir, name, pair.gen);
    } else {
        fprintf(stderr, "gptx-tokenize: %s/%s_train.bin and %s_val.bin are unchanged\n", dir,
                name, name);
    }
    pair_end(&pair);
    return rc;
}

int main(int argc, char **argv) {
    tokenize_args a;
    if (parse_args(argc, argv, &a) != 0) return 2;
    gptx_tokenizer *tok = NULL;
    if (gptx_tokenizer_load_gpt2(&tok, a.encoder, a.vocab) != GPTX_OK) {
        fprintf(stderr, "gptx-tokenize: cannot load the GPT-2 tokenizer: %s\n", prog_error_text());
        return 1;
    }
    char *prefix = a.prefix ? NULL : default_prefix(a.input);
    const char *name = a.prefix ? a.prefix : prefix;
    id_vec v = {NULL, 0, 0};
    int status = 1;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    long long bytes = name ? encode_file(tok, &a, &v) : -1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (bytes < 0) goto done;
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%s: %lld bytes -> %zu tokens in %.2f s (<|endoftext|>: %s)\n", a.input, bytes, v.n,
           secs, prog_special_tokens_name(a.special));
    if (make_dirs(a.out_dir) != 0) {
        fprintf(stderr, "gptx-tokenize: cannot create --out-dir %s: %s\n", a.out_dir,
                strerror(errno));
        goto done;
    }
    size_t n_val = (size_t)((double)v.n * a.val_fraction + 0.5);
    if (n_val > v.n) n_val = v.n;
    if (write_pair(a.out_dir, name, &v, n_val) != 0) goto done;
    status = 0;
done:
    free(v.ids);
    free(prefix);
    gptx_tokenizer_destroy(tok);
    return status;
}
