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
 *   gptx-tokenize --input 'corpus/part-?.txt,more/' --out-dir shards --shard-tokens 100000000
 *     -> shards/NAME_val_000000.bin, NAME_train_000001.bin, ..., NAME.manifest
 *        (gptx_tokenize_shards.h: fixed-size shards, resumable)
 *
 * The text is read and encoded in blocks on --threads threads, each cut
 * where the GPT-2 pre-tokenizer always has a piece boundary
 * (gptx_tokenize_stream.h), so the ids are exactly those of encoding each
 * document at once. Every flag is listed by --help.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gptx/gptx.h"
#include "prog_error.h"
#include "prog_data.h"
#include "prog_text.h"
#include "gptx_tokenize_pair.h"
#include "gptx_tokenize_shards.h"
#include "prog_inputs.h"


typedef struct {
    const char *input, *out_dir, *prefix, *encoder, *vocab, *doc_separator;
    double val_fraction;
    int eot, special, threads, resume, val_fraction_given;
    size_t chunk_bytes;
    long long shard_tokens; /* 0: the train/val pair */
} tokenize_args;

static void usage(void) {
    printf("usage: gptx-tokenize --input FILE --out-dir DIR [options]\n"
           "       gptx-tokenize --input LIST --out-dir DIR --shard-tokens N [options]\n"
           "Encodes text with the GPT-2 tokenizer into llm.c token shards.\n"
           "One FILE: DIR/NAME_train.bin (the first tokens) and DIR/NAME_val.bin (the\n"
           "last ones): links into DIR/NAME.shards, switched to a new folder once both\n"
           "are written, so a failure leaves the old pair whole.\n"
           "With --shard-tokens N: every document (a file, or a part of one between\n"
           "--doc-separator) after <|endoftext|>, in shards of N tokens:\n"
           "DIR/NAME_val_000000.bin (the first N: validation), NAME_train_000001.bin,\n"
           "..., then DIR/NAME.manifest once all are written.\n"
           "  --input LIST        text to encode (any bytes; invalid UTF-8 is encoded\n"
           "                      byte-wise): files, glob patterns and folders (their\n"
           "                      regular files, not recursive, hidden ones skipped),\n"
           "                      comma-separated, sorted by path; several need\n"
           "                      --shard-tokens\n"
           "  --out-dir DIR       output directory, created if missing\n"
           "  --prefix NAME       shard name prefix (default: the file's name without\n"
           "                      extension; with several files, the first one's)\n"
           "  --shard-tokens N    tokens per shard, 1 .. 2^31-1 (llm.c uses 100000000);\n"
           "                      memory: 4 bytes a token of one shard\n"
           "  --doc-separator S   (with --shard-tokens) a document ends at each S inside a\n"
           "                      file, S dropped; escapes \\n \\t \\r \\\\ \\xHH\n"
           "  --resume            (with --shard-tokens) continue the unfinished run in DIR\n"
           "                      (shards but no NAME.manifest) after its last shard; a\n"
           "                      run without it refuses such a folder\n"
           "  --threads N         threads that encode (default: every core); the ids do\n"
           "                      not depend on it\n"
           "  --val-fraction X    share of the tokens, taken from the end, that go to\n"
           "                      NAME_val.bin; in [0, 1) (default 0.1; 0 = empty val shard)\n"
           "  --eot               start the token stream with <|endoftext|> (id 50256), as\n"
           "                      llm.c does before each document (always, with\n"
           "                      --shard-tokens)\n"
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
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    a->threads = cores > 0 ? (int)(cores > 256 ? 256 : cores) : 1;
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
        if (!strcmp(k, "--resume")) {
            a->resume = 1;
            continue;
        }
        int known = !strcmp(k, "--input") || !strcmp(k, "--out-dir") || !strcmp(k, "--prefix") ||
                    !strcmp(k, "--encoder") || !strcmp(k, "--vocab") ||
                    !strcmp(k, "--special-tokens") ||
                    !strcmp(k, "--val-fraction") || !strcmp(k, "--chunk-bytes") ||
                    !strcmp(k, "--shard-tokens") || !strcmp(k, "--threads") ||
                    !strcmp(k, "--doc-separator");
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
        else if (!strcmp(k, "--doc-separator")) a->doc_separator = v;
        else if (!strcmp(k, "--shard-tokens") || !strcmp(k, "--threads")) {
            int shard = !strcmp(k, "--shard-tokens");
            errno = 0;
            long long n = strtoll(v, &end, 10);
            long long hi = shard ? 2147483647ll : 1024;
            if (errno || *end || end == v || n < 1 || n > hi) {
                fprintf(stderr, "gptx-tokenize: %s is '%s'; expected 1 .. %lld\n", k, v, hi);
                return -1;
            }
            if (shard) a->shard_tokens = n;
            else a->threads = (int)n;
        }
        else if (!strcmp(k, "--special-tokens")) {
            if (prog_special_tokens_parse("gptx-tokenize", v, &a->special)) return -1;
        } else if (!strcmp(k, "--val-fraction")) {
            errno = 0;
            a->val_fraction = strtod(v, &end);
            a->val_fraction_given = 1;
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
    if (!a->shard_tokens && (a->doc_separator || a->resume)) {
        fprintf(stderr, "gptx-tokenize: %s needs --shard-tokens (see --help)\n",
                a->resume ? "--resume" : "--doc-separator");
        return -1;
    }
    if (a->shard_tokens && (a->val_fraction_given || a->eot)) {
        fprintf(stderr, "gptx-tokenize: %s is for one file's train/val pair; with "
                        "--shard-tokens the first shard is validation and every document "
                        "starts with <|endoftext|> (see --help)\n",
                a->eot ? "--eot" : "--val-fraction");
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

typedef struct {
    int32_t *ids;
    size_t n, cap;
} id_vec;

/* The pair's sink: every id, in memory. */
static int append(void *ctx, const stream_pos *pos, const int32_t *ids, size_t n) {
    id_vec *v = ctx;
    (void)pos;
    if (v->cap - v->n < n) {
        size_t cap = v->cap ? v->cap : 1024;
        while (cap - v->n < n) {
            if (cap > SIZE_MAX / 2 / sizeof *v->ids) cap = 0;
            if (!cap) break;
            cap *= 2;
        }
        int32_t *p = cap ? realloc(v->ids, cap * sizeof *p) : NULL;
        if (!p) {
            fprintf(stderr, "gptx-tokenize: out of memory\n");
            return -1;
        }
        v->ids = p;
        v->cap = cap;
    }
    memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
    return 0;
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
    prog_inputs in;
    int irc = prog_inputs_expand("gptx-tokenize", "--input", a.input, &in);
    if (irc != 0) return irc == -2 ? 2 : 1;
    if (in.n > 1 && !a.shard_tokens) {
        fprintf(stderr, "gptx-tokenize: --input %s: %zu files; several files need "
                        "--shard-tokens (see --help)\n", a.input, in.n);
        prog_inputs_free(&in);
        return 2;
    }
    char *sep = NULL;
    size_t sep_len = 0;
    if (a.doc_separator &&
        prog_doc_separator_parse("gptx-tokenize", a.doc_separator, &sep, &sep_len) != 0) {
        prog_inputs_free(&in);
        return 2;
    }
    gptx_tokenizer *tok = NULL;
    if (gptx_tokenizer_load_gpt2(&tok, a.encoder, a.vocab) != GPTX_OK) {
        fprintf(stderr, "gptx-tokenize: cannot load the GPT-2 tokenizer: %s\n", prog_error_text());
        prog_inputs_free(&in);
        free(sep);
        return 1;
    }
    char *prefix = a.prefix ? NULL : default_prefix(in.paths[0]);
    const char *name = a.prefix ? a.prefix : prefix;
    id_vec v = {NULL, 0, 0};
    int status = 1;
    stream_args sa = {.in = &in, .tok = tok, .special = a.special, .eot = a.eot,
                      .sep = sep, .sep_len = sep_len, .chunk_bytes = a.chunk_bytes,
                      .threads = a.threads, .progress = isatty(2),
                      .start = {0, 0, 1}};
    if (!name) {
        fprintf(stderr, "gptx-tokenize: out of memory\n");
        goto done;
    }
    if (make_dirs(a.out_dir) != 0) {
        fprintf(stderr, "gptx-tokenize: cannot create --out-dir %s: %s\n", a.out_dir,
                strerror(errno));
        goto done;
    }
    if (a.shard_tokens) {
        sa.eot = 1;
        shards_args sh = {.s = sa, .out_dir = a.out_dir, .name = name,
                          .shard_tokens = a.shard_tokens, .resume = a.resume};
        status = tokenize_shards(&sh);
        goto done;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (stream_encode(&sa, append, &v) != 0) goto done;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (a.eot && v.n == 0 && append(&v, NULL, (int32_t[]){gptx_tokenizer_eot_token(tok)}, 1))
        goto done; /* an empty file: its EOT, as before */
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%s: %llu bytes -> %zu tokens in %.2f s (<|endoftext|>: %s)\n", in.paths[0],
           (unsigned long long)in.total_bytes, v.n, secs, prog_special_tokens_name(a.special));
    size_t n_val = (size_t)((double)v.n * a.val_fraction + 0.5);
    if (n_val > v.n) n_val = v.n;
    if (write_pair(a.out_dir, name, &v, n_val) != 0) goto done;
    status = 0;
done:
    free(v.ids);
    free(prefix);
    free(sep);
    prog_inputs_free(&in);
    gptx_tokenizer_destroy(tok);
    return status;
}
