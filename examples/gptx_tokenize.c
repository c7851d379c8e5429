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
 *     -> shards/NAME_train_000000.bin, ..., NAME_val_000007.bin, ..., NAME.manifest
 *        (gptx_tokenize_shards.h: fixed-size shards, resumable; validation held
 *        out from the whole corpus: gptx_tokenize_split.h)
 *
 * The text is read and encoded in blocks on --threads threads, each cut
 * where the GPT-2 pre-tokenizer always has a piece boundary
 * (gptx_tokenize_stream.h), so the ids are exactly those of encoding each
 * document at once. Every flag is listed by --help.
 */
#define _DEFAULT_SOURCE /* realpath */
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
#include "prog_flags.h"


typedef struct {
    const char *input, *out_dir, *prefix, *encoder, *vocab, *doc_separator, *special_tokens;
    double val_fraction;
    long long seed;
    int eot, special, threads, resume;
    long long chunk_bytes;
    long long shard_tokens; /* 0: the train/val pair */
} tokenize_args;

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(tokenize_args, field, name, kind, lo, hi, choices, arg, help, bits, 0)
static const prog_flag flags[] = {
    ROW(input, "--input", PROG_FLAG_STR, 0, 0, NULL, "LIST",
        "text to encode (any bytes; invalid UTF-8 is\n"
        "encoded byte-wise): files, glob patterns and\n"
        "folders (their regular files, not recursive,\n"
        "hidden ones skipped), comma-separated, sorted by\n"
        "path; several files need --shard-tokens", PROG_FLAG_NO_DEFAULT),
    ROW(out_dir, "--out-dir", PROG_FLAG_STR, 0, 0, NULL, "DIR",
        "output directory, created if missing", PROG_FLAG_NO_DEFAULT),
    ROW(prefix, "--prefix", PROG_FLAG_STR, 0, 0, NULL, "NAME",
        "shard name prefix (default: the first file's\n"
        "name without its extension)", PROG_FLAG_NO_DEFAULT),
    ROW(val_fraction, "--val-fraction", PROG_FLAG_DOUBLE, 0, 1, NULL, "X",
        "validation, in [0, 1): one file's pair: the share\n"
        "of the tokens, from the end, in NAME_val.bin (0 =\n"
        "an empty val shard); --shard-tokens: the share of\n"
        "pieces (a document, or 4096 tokens of a longer\n"
        "one) held out into NAME_val_*.bin, drawn from the\n"
        "whole corpus by a hash of their tokens", 0),
    ROW(seed, "--seed", PROG_FLAG_I64, 0, 9.2e18, NULL, "N",
        "(--shard-tokens) the key of the validation hash:\n"
        "another seed, another held-out set", 0),
    ROW(eot, "--eot", PROG_FLAG_SWITCH, 0, 0, NULL, NULL,
        "one file's pair: start the tokens with\n"
        "<|endoftext|> (50256), as llm.c does before each\n"
        "document (always so with --shard-tokens)", 0),
    ROW(shard_tokens, "--shard-tokens", PROG_FLAG_I64, 1, 2147483647, NULL, "N",
        "shards of N tokens (llm.c uses 100000000), each\n"
        "document after <|endoftext|>: NAME_train_*.bin\n"
        "and NAME_val_*.bin (--val-fraction), numbered in\n"
        "the order written, then NAME.manifest; memory: 8\n"
        "bytes a token of one shard", PROG_FLAG_NO_DEFAULT),
    ROW(doc_separator, "--doc-separator", PROG_FLAG_STR, 0, 0, NULL, "S",
        "(--shard-tokens) a document also ends at each S\n"
        "in a file, S dropped; escapes \\n \\t \\r \\\\ \\xHH",
        PROG_FLAG_NO_DEFAULT),
    ROW(resume, "--resume", PROG_FLAG_SWITCH, 0, 0, NULL, NULL,
        "(--shard-tokens) continue DIR's unfinished run\n"
        "(shards, no NAME.manifest) after its last shard;\n"
        "without it such a folder is refused", 0),
    ROW(threads, "--threads", PROG_FLAG_INT, 1, 1024, NULL, "N",
        "threads that encode (default: every core); the\n"
        "ids do not depend on it", PROG_FLAG_NO_DEFAULT),
    ROW(special_tokens, "--special-tokens", PROG_FLAG_CHOICE, 0, 0, PROG_SPECIAL_TOKENS_CHOICES,
        "R", "how \"<|endoftext|>\" in the text is read: text\n"
        "(as its 13 characters) or allow (as the\n"
        "end-of-text token 50256)", 0),
    ROW(special, "--special", PROG_FLAG_SWITCH, 0, 0, NULL, NULL,
        "the same as --special-tokens allow (its older\n"
        "spelling)", 0),
    ROW(encoder, "--encoder", PROG_FLAG_STR, 0, 0, NULL, "PATH", "GPT-2 encoder.json", 0),
    ROW(vocab, "--vocab", PROG_FLAG_STR, 0, 0, NULL, "PATH", "GPT-2 vocab.bpe", 0),
    ROW(chunk_bytes, "--chunk-bytes", PROG_FLAG_I64, 64, 1 << 30, NULL, "N",
        "bytes read and encoded per block; the ids do not\n"
        "depend on it", 0),
};
#undef ROW

static const prog_cli cli = {
    "gptx-tokenize",
    "usage: gptx-tokenize --input FILE --out-dir DIR [options]\n"
    "       gptx-tokenize --input LIST --out-dir DIR --shard-tokens N [options]\n"
    "Encodes text with the GPT-2 tokenizer into llm.c token shards.\n"
    "One FILE: DIR/NAME_train.bin (the first tokens) and DIR/NAME_val.bin (the\n"
    "last ones): links into DIR/NAME.shards, switched to a new folder once both\n"
    "are written, so a failure leaves the old pair whole.\n"
    "With --shard-tokens N: many files, fixed-size shards, resumable.\n",
    flags, sizeof flags / sizeof flags[0], NULL};

static int given(const unsigned char *g, const char *name) {
    const prog_flag *f = prog_flags_find(&cli, name);
    return f && g[f - flags];
}

/* 0 go on, 1 done (--help, --version), -1 usage error (exit 2). */
static int parse_args(int argc, char **argv, tokenize_args *a) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    *a = (tokenize_args){.encoder = prog_data_path("gpt2/encoder.json"),
                         .vocab = prog_data_path("gpt2/vocab.bpe"),
                         .special_tokens = "text",
                         .val_fraction = 0.1,
                         .seed = 1337,
                         .threads = cores > 0 ? (int)(cores > 256 ? 256 : cores) : 1,
                         .chunk_bytes = 4 << 20};
    const tokenize_args defaults = *a;
    unsigned char g[sizeof flags / sizeof flags[0]];
    int rc = prog_flags_parse(&cli, a, g, argc, argv, &defaults);
    if (rc) return rc;
    if (!a->input || !a->out_dir)
        return prog_usage_error("gptx-tokenize", a->input ? "--out-dir" : "--input", NULL,
                                "required");
    if (a->val_fraction >= 1.0) {
        char v[32];
        snprintf(v, sizeof v, "%g", a->val_fraction);
        return prog_usage_error("gptx-tokenize", "--val-fraction", v,
                                "expected a number in [0, 1)");
    }
    a->special = a->special || !strcmp(a->special_tokens, "allow");
    if (!a->shard_tokens && (a->doc_separator || a->resume))
        return prog_usage_error("gptx-tokenize", a->resume ? "--resume" : "--doc-separator",
                                NULL, "needs --shard-tokens");
    if (a->shard_tokens && a->eot)
        return prog_usage_error("gptx-tokenize", "--eot", NULL,
                                "is for one file's train/val pair; with --shard-tokens every "
                                "document starts with <|endoftext|>");
    if (!a->shard_tokens && given(g, "--seed"))
        return prog_usage_error("gptx-tokenize", "--seed", NULL,
                                "needs --shard-tokens (one file's pair holds out its tail)");
    if (a->prefix && strchr(a->prefix, '/'))
        return prog_usage_error("gptx-tokenize", "--prefix", a->prefix,
                                "must be a name without '/'");
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

/* Whether base is a file name a run of NAME writes, replaces or removes in
 * its --out-dir: the pair NAME_train.bin, NAME_val.bin, the shards
 * NAME_train_N.bin, NAME_val_N.bin, NAME.manifest, NAME.progress. */
static int output_name(const char *name, const char *base) {
    size_t n = strlen(name), b = strlen(base);
    if (strncmp(base, name, n) != 0) return 0;
    const char *rest = base + n;
    if (!strcmp(rest, ".manifest") || !strcmp(rest, ".progress")) return 1;
    return (!strncmp(rest, "_train", 6) || !strncmp(rest, "_val", 4)) && b > 4 &&
           !strcmp(base + b - 4, ".bin");
}

/* Inputs and outputs never overlap (issue 34, item 4): an input that is a
 * file this run writes or removes in --out-dir (by its real path: through
 * a link, the pair's NAME.shards folders too) is refused before anything
 * is read or written. 0, or -1 after a message. */
static int inputs_apart(const prog_inputs *in, const char *out_dir, const char *name) {
    char *od = realpath(out_dir, NULL); /* none yet: no input is in it */
    int rc = 0;
    for (size_t i = 0; od && i < in->n && rc == 0; i++) {
        char *rp = realpath(in->paths[i], NULL);
        char *slash = rp ? strrchr(rp, '/') : NULL;
        if (!slash) {
            free(rp);
            continue;
        }
        *slash = '\0'; /* rp: its folder, slash + 1: its name */
        char *up = strrchr(rp, '/');
        size_t n = strlen(name);
        int in_pair = up && !strncmp(up + 1, name, n) && !strncmp(up + 1 + n, ".shards", 7) &&
                      (size_t)(up - rp) == strlen(od) && !strncmp(rp, od, (size_t)(up - rp));
        if ((!strcmp(rp, od) && output_name(name, slash + 1)) || in_pair) {
            fprintf(stderr, "gptx-tokenize: --input %s is one of the files this run writes in "
                            "--out-dir %s (NAME %s): inputs and outputs never overlap; choose "
                            "another --out-dir or --prefix\n", in->paths[i], out_dir, name);
            rc = -1;
        }
        free(rp);
    }
    free(od);
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
    int prc = parse_args(argc, argv, &a);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    prog_inputs in;
    int irc = prog_inputs_expand("gptx-tokenize", "--input", a.input, &in);
    if (irc != 0) return irc == -2 ? PROG_EXIT_USAGE : PROG_EXIT_FAILURE;
    if (in.n > 1 && !a.shard_tokens) {
        fprintf(stderr, "gptx-tokenize: --input %s: %zu files; several files need "
                        "--shard-tokens (see --help)\n", a.input, in.n);
        prog_inputs_free(&in);
        return PROG_EXIT_USAGE;
    }
    char *sep = NULL;
    size_t sep_len = 0;
    if (a.doc_separator &&
        prog_doc_separator_parse("gptx-tokenize", a.doc_separator, &sep, &sep_len) != 0) {
        prog_inputs_free(&in);
        return PROG_EXIT_USAGE;
    }
    gptx_tokenizer *tok = NULL;
    if (gptx_tokenizer_load_gpt2(&tok, a.encoder, a.vocab) != GPTX_OK) {
        fprintf(stderr, "gptx-tokenize: cannot load the GPT-2 tokenizer: %s\n", prog_error_text());
        prog_inputs_free(&in);
        free(sep);
        return PROG_EXIT_FAILURE;
    }
    char *prefix = a.prefix ? NULL : default_prefix(in.paths[0]);
    const char *name = a.prefix ? a.prefix : prefix;
    id_vec v = {NULL, 0, 0};
    int status = PROG_EXIT_FAILURE;
    stream_args sa = {.in = &in, .tok = tok, .special = a.special, .eot = a.eot,
                      .sep = sep, .sep_len = sep_len, .chunk_bytes = (size_t)a.chunk_bytes,
                      .threads = a.threads, .progress = isatty(2),
                      .start = {0, 0, 1}};
    if (!name) {
        fprintf(stderr, "gptx-tokenize: out of memory\n");
        goto done;
    }
    /* nothing read as text is an output: of this run, or any shard or record */
    if (inputs_apart(&in, a.out_dir, name) != 0 ||
        prog_inputs_check_text("gptx-tokenize", "--input", &in) != 0)
        goto done;
    if (make_dirs(a.out_dir) != 0) {
        fprintf(stderr, "gptx-tokenize: cannot create --out-dir %s: %s\n", a.out_dir,
                strerror(errno));
        goto done;
    }
    if (a.shard_tokens) {
        sa.eot = 1;
        shards_args sh = {.s = sa, .out_dir = a.out_dir, .name = name,
                          .shard_tokens = a.shard_tokens, .val_fraction = a.val_fraction,
                          .seed = (unsigned long long)a.seed, .resume = a.resume};
        status = tokenize_shards(&sh);
        goto done;
    }
    if (pair_check(a.out_dir, name) != 0) goto done; /* before the text is read */
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
