/* gptx_tokenize_shards.h */
#define _POSIX_C_SOURCE 200809L
#include "gptx_tokenize_shards.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prog_error.h"
#include "prog_files.h"
#include "gptx_tokenize_split.h"

/* The first line of a manifest and a progress record: their layout. */
#define SHARDS_FORMAT "gptx-tokenize shards 2"
#define SHARDS_FORMAT_1 "gptx-tokenize shards 1" /* before 0.7: the first shard was validation */

enum { TRAIN = 0, VAL = 1 };
static const char *const kind_name[2] = {"train", "val"};

/* "NAME_train_%06ld.bin" or "NAME_val_%06ld.bin" in DIR: one numbering for
 * both, in the order they are written */
static char *shard_path(const shards_args *a, long k, int kind) {
    size_t len = strlen(a->out_dir) + strlen(a->name) + 40;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s_%s_%06ld.bin", a->out_dir, a->name, kind_name[kind], k);
    return p;
}

/* NAME.pending_<k>.bin: what a run resumed after its k-th shard holds but
 * has not written to a shard yet (the other kind's partial shard, the rest
 * of the piece being routed) */
static char *pending_path(const shards_args *a, long k) {
    size_t len = strlen(a->out_dir) + strlen(a->name) + 40;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s.pending_%06ld.bin", a->out_dir, a->name, k);
    return p;
}

static char *record_path(const shards_args *a, const char *ext) {
    size_t len = strlen(a->out_dir) + strlen(a->name) + strlen(ext) + 3;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s.%s", a->out_dir, a->name, ext);
    return p;
}

/* The index of a shard of NAME called `file` (or, with pending, of its
 * NAME.pending_<k>.bin), or -1. */
static long file_index(const char *name, const char *file, int pending) {
    size_t n = strlen(name);
    if (strncmp(file, name, n)) return -1;
    const char *p = file + n;
    if (pending && strncmp(p, ".pending_", 9) == 0) p += 9;
    else if (!pending && !strncmp(p, "_val_", 5)) p += 5;
    else if (!pending && !strncmp(p, "_train_", 7)) p += 7;
    else return -1;
    long k = 0;
    for (int i = 0; i < 6; i++, p++) {
        if (*p < '0' || *p > '9') return -1;
        k = 10 * k + (*p - '0');
    }
    return strcmp(p, ".bin") ? -1 : k;
}

/* Shards of NAME in DIR (pending: its NAME.pending_*.bin instead): how
 * many, and the first name found (for messages). With remove_from >= 0,
 * those with an index >= remove_from are removed. */
static long scan_files(const shards_args *a, char *first, size_t cap, long remove_from,
                       int pending) {
    DIR *d = opendir(a->out_dir);
    long n = 0, lowest = -1;
    if (first && cap) first[0] = '\0';
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        long k = file_index(a->name, e->d_name, pending);
        if (k < 0) continue;
        if (remove_from >= 0 && k >= remove_from) {
            size_t len = strlen(a->out_dir) + strlen(e->d_name) + 2;
            char *p = malloc(len);
            if (p) snprintf(p, len, "%s/%s", a->out_dir, e->d_name);
            if (p) unlink(p);
            free(p);
            continue;
        }
        if (first && (lowest < 0 || k < lowest)) {
            snprintf(first, cap, "%s", e->d_name);
            lowest = k;
        }
        n++;
    }
    if (d) closedir(d);
    return n;
}

static long scan_shards(const shards_args *a, char *first, size_t cap, long remove_from) {
    return scan_files(a, first, cap, remove_from, 0);
}

static void put_escaped(FILE *f, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\') fputs("\\\\", f);
        else if (c == '\n') fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
        else fputc(c, f);
    }
}

/* The settings and inputs a resumed run must share, one per line. */
static char *config_text(const shards_args *a) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fprintf(f, "%s\nshard_tokens %lld\nspecial_tokens %s\neot_each_document 1\n",
            SHARDS_FORMAT, a->shard_tokens, a->s.special ? "allow" : "text");
    /* the held-out split (gptx_tokenize_split.h) */
    char x[32];
    for (int digits = 1; digits <= 17; digits++) { /* the shortest text of the same double */
        snprintf(x, sizeof x, "%.*g", digits, a->val_fraction);
        if (strtod(x, NULL) == a->val_fraction) break;
    }
    fprintf(f, "val_fraction %s\nval_seed %llu\nval_piece_tokens %d\n", x,
            (unsigned long long)a->seed, SPLIT_PIECE_TOKENS);
    fputs("doc_separator ", f);
    if (a->s.sep) put_escaped(f, a->s.sep, a->s.sep_len);
    else fputs("(none)", f);
    fputc('\n', f);
    for (size_t i = 0; i < a->s.in->n; i++) {
        fprintf(f, "input %llu ", (unsigned long long)a->s.in->sizes[i]);
        put_escaped(f, a->s.in->paths[i], strlen(a->s.in->paths[i]));
        fputc('\n', f);
    }
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* The shards written so far: their kind and size, in order. */
typedef struct {
    long long count;
    int kind;
} shard_rec;

typedef struct {
    shards_args *a;
    char *config;
    int32_t *buf[2];     /* the train and the val shard being filled (room for a piece more) */
    size_t fill[2];
    splitter *split;     /* the piece being cut (gptx_tokenize_split.h) */
    long k;              /* the next shard's index */
    uint64_t skip;       /* ids at the start already in shards or pending (resume) */
    shard_rec *recs;
    size_t nrecs, caprecs;
    int kill_after;      /* test hook: SIGKILL once this many shards are written */
} writer;

static int save_text(const char *path, const char *what, const char *text) {
    if (prog_replace_link("gptx-tokenize", path) != 0) return -1; /* never through a link */
    if (gptx_file_save(path, text, strlen(text)) != GPTX_OK) {
        fprintf(stderr, "gptx-tokenize: cannot write %s %s: %s\n", what, path, prog_error_text());
        return -1;
    }
    return 0;
}

static int add_rec(writer *w, int kind, long long count) {
    if (w->nrecs == w->caprecs) {
        size_t cap = w->caprecs ? 2 * w->caprecs : 64;
        shard_rec *r = realloc(w->recs, cap * sizeof *r);
        if (!r) {
            fprintf(stderr, "gptx-tokenize: out of memory\n");
            return -1;
        }
        w->recs = r;
        w->caprecs = cap;
    }
    w->recs[w->nrecs++] = (shard_rec){count, kind};
    return 0;
}

/* After shard k-1: the ids not in a shard yet, the other kind's partial
 * shard then the rest of the piece (n ids for `kind`), as
 * NAME.pending_<k>.bin; then the record of where the input continues, which
 * names it; then the previous pending file goes. */
static int save_progress(writer *w, int kind, const stream_pos *pos, uint64_t consumed,
                         const int32_t *rest, size_t n) {
    int other = !kind;
    size_t first = w->fill[other];
    memcpy(w->buf[other] + first, rest, n * sizeof *rest); /* past its fill: room for a piece */
    char *pp = pending_path(w->a, w->k), *old = pending_path(w->a, w->k - 1);
    char *rpath = record_path(w->a, "progress"), *rec = NULL;
    size_t len = 0;
    FILE *f = pp && old && rpath ? open_memstream(&rec, &len) : NULL;
    int rc = -1;
    if (!f) {
        fprintf(stderr, "gptx-tokenize: out of memory\n");
    } else {
        fprintf(f, "%sshards_done %ld\nresume %llu %llu %d %llu\npending %s %zu %s %zu\n", w->config,
                w->k, (unsigned long long)pos->file, (unsigned long long)pos->off, pos->doc_start,
                (unsigned long long)consumed, kind_name[other], first, kind_name[kind], n);
        for (size_t i = 0; i < w->nrecs; i++)
            fprintf(f, "count %s %lld\n", kind_name[w->recs[i].kind], w->recs[i].count);
        fclose(f);
        if (prog_replace_link("gptx-tokenize", pp) != 0) /* never through a link */
            ;
        else if (gptx_shard_write(pp, w->buf[other], first + n) != GPTX_OK)
            fprintf(stderr, "gptx-tokenize: %s\n", prog_error_text());
        else if (rec && save_text(rpath, "the progress record", rec) == 0)
            rc = 0;
    }
    if (rc == 0 && old) unlink(old);
    free(rec);
    free(rpath);
    free(pp);
    free(old);
    return rc;
}

/* Writes the shard of `kind` filled, then (pos: not the end) the progress
 * record, with rest[0, n) the ids of the piece still to come after it. */
static int flush_shard(writer *w, int kind, const stream_pos *pos, uint64_t consumed,
                       const int32_t *rest, size_t n) {
    char *path = shard_path(w->a, w->k, kind);
    if (!path) {
        fprintf(stderr, "gptx-tokenize: out of memory\n");
        return -1;
    }
    /* a link at a shard's name (to another corpus's shard) is replaced, not written through */
    int rc = GPTX_ERR_IO;
    if (prog_replace_link("gptx-tokenize", path) == 0 &&
        (rc = gptx_shard_write(path, w->buf[kind], w->fill[kind])) != GPTX_OK)
        fprintf(stderr, "gptx-tokenize: %s\n", prog_error_text());
    free(path);
    if (rc != GPTX_OK || add_rec(w, kind, (long long)w->fill[kind])) return -1;
    w->k++;
    w->fill[kind] = 0;
    if (w->kill_after > 0 && w->k >= w->kill_after) raise(SIGKILL); /* before its record */
    return pos ? save_progress(w, kind, pos, consumed, rest, n) : 0;
}

/* A piece to its side, a shard written each time one fills. */
static int route(writer *w, const int32_t *ids, size_t n, const stream_pos *pos,
                 uint64_t consumed) {
    int kind = split_is_val(w->split, ids, n) ? VAL : TRAIN;
    size_t cap = (size_t)w->a->shard_tokens;
    for (size_t i = 0; i < n;) {
        size_t m = n - i < cap - w->fill[kind] ? n - i : cap - w->fill[kind];
        memcpy(w->buf[kind] + w->fill[kind], ids + i, m * sizeof *ids);
        w->fill[kind] += m;
        i += m;
        if (w->fill[kind] == cap && flush_shard(w, kind, pos, consumed, ids + i, n - i)) return -1;
    }
    return 0;
}

static int sink(void *ctx, const stream_pos *pos, const int32_t *ids, size_t n) {
    writer *w = ctx;
    size_t i = 0;
    if (w->skip) {
        i = w->skip < n ? (size_t)w->skip : n;
        w->skip -= i;
    }
    while (i < n) {
        int done = 0;
        i += split_feed(w->split, ids + i, n - i, &done);
        if (!done) continue;
        if (route(w, w->split->piece, w->split->n, pos, i)) return -1;
        split_take_piece(w->split);
    }
    return 0;
}

/* The saved record's settings and inputs (the lines before "shards_done"
 * or "shard ") against this run's. */
static int same_config(const char *rec, const char *config) {
    return !strncmp(rec, config, strlen(config)) &&
           (!strncmp(rec + strlen(config), "shards_done ", 12) ||
            !strncmp(rec + strlen(config), "shard ", 6));
}

static int kind_of(const char *name) {
    return !strcmp(name, "val") ? VAL : !strcmp(name, "train") ? TRAIN : -1;
}

/* The shards of the record (its "count KIND N" lines after p). 0, or -1. */
static int read_counts(writer *w, const char *p, long done) {
    for (long i = 0; i < done; i++) {
        char kind[8] = "";
        long long c = 0;
        int u = 0;
        if (sscanf(p, "count %7s %lld\n%n", kind, &c, &u) != 2 || u == 0 || kind_of(kind) < 0 ||
            add_rec(w, kind_of(kind), c))
            return -1;
        p += u;
    }
    return 0;
}

/* NAME.pending_<done>.bin into the two shards being filled. 0, or -1. */
static int read_pending(writer *w, long done, const char *k1, size_t n1, const char *k2,
                        size_t n2) {
    char *pp = pending_path(w->a, done);
    int32_t *ids = NULL;
    size_t n = 0;
    int a = kind_of(k1), b = kind_of(k2), rc = -1;
    if (pp && a >= 0 && b == !a && n1 <= (size_t)w->a->shard_tokens &&
        n2 <= SPLIT_PIECE_TOKENS && gptx_shard_read(pp, &ids, &n) == GPTX_OK && n == n1 + n2) {
        memcpy(w->buf[a], ids, n1 * sizeof *ids);
        memcpy(w->buf[b], ids + n1, n2 * sizeof *ids);
        w->fill[a] = n1;
        w->fill[b] = n2;
        rc = 0;
    }
    gptx_free(ids);
    free(pp);
    return rc;
}

/* The unfinished run's record: where to go on. 0, 1 (no record: from the
 * start), -1 after a message. */
static int read_progress(writer *w, stream_pos *pos) {
    char *path = record_path(w->a, "progress");
    if (!path) return -1;
    if (access(path, F_OK) != 0) {
        free(path);
        return 1;
    }
    size_t len = 0;
    char *rec = prog_read_file("gptx-tokenize", "the progress record", path, &len);
    int rc = -1;
    if (rec && !strncmp(rec, SHARDS_FORMAT_1 "\n", strlen(SHARDS_FORMAT_1) + 1)) {
        fprintf(stderr, "gptx-tokenize: --resume: %s is of a gptx-tokenize before 0.7 (its first "
                        "shard is validation; now validation is held out from the whole "
                        "corpus): remove it and its shards to start anew\n", path);
    } else if (rec && !same_config(rec, w->config)) {
        fprintf(stderr, "gptx-tokenize: --resume: %s is of a run with other inputs or settings "
                        "(--input's files and sizes, --shard-tokens, --special-tokens, "
                        "--doc-separator, --val-fraction, --seed must be the same); remove it "
                        "and its shards to start anew\n", path);
    } else if (rec) {
        const char *p = rec + strlen(w->config);
        long done = 0;
        unsigned long long fi = 0, off = 0, skip = 0;
        size_t n1 = 0, n2 = 0;
        char k1[8] = "", k2[8] = "";
        int doc = 0, used = 0;
        if (sscanf(p, "shards_done %ld\nresume %llu %llu %d %llu\npending %7s %zu %7s %zu\n%n",
                   &done, &fi, &off, &doc, &skip, k1, &n1, k2, &n2, &used) == 9 && done > 0 &&
            fi < w->a->s.in->n && used > 0 && read_counts(w, p + used, done) == 0 &&
            read_pending(w, done, k1, n1, k2, n2) == 0) {
            rc = 0;
            *pos = (stream_pos){fi, off, doc};
            w->k = done;
            w->skip = skip;
        }
        if (rc) fprintf(stderr, "gptx-tokenize: --resume: %s (or its pending ids) is damaged\n",
                        path);
    }
    free(rec);
    free(path);
    return rc;
}

/* A finished run's manifest; 0 when the run was resumed to nothing to do
 * or the old run's files are out of the way, -1 after a message, 1 done. */
static int replace_finished(writer *w, const char *manifest, const char *progress_rec) {
    shards_args *a = w->a;
    size_t len = 0;
    char *rec = a->resume ? prog_read_file("gptx-tokenize", "the manifest", manifest, &len) : NULL;
    int same = rec && same_config(rec, w->config);
    free(rec);
    if (a->resume && same) {
        printf("%s: the run is finished already; nothing to do\n", manifest);
        return 1;
    }
    /* a finished run, replaced: its manifest goes first, so a kill
     * from here on leaves an unfinished run, never a wrong manifest */
    if (unlink(manifest) != 0 && errno != ENOENT) {
        fprintf(stderr, "gptx-tokenize: cannot remove %s: %s\n", manifest, strerror(errno));
        return -1;
    }
    unlink(progress_rec);
    scan_shards(a, NULL, 0, 0);
    scan_files(a, NULL, 0, 0, 1);
    printf("%s: replacing the finished run's shards\n", manifest);
    return 0;
}

/* Everything written: the last pieces routed, the partial shards written
 * (train, then val), what an earlier longer run left removed. 0, or -1. */
static int finish(writer *w) {
    if (w->split->n > 0 && route(w, w->split->piece, w->split->n, NULL, 0)) return -1;
    split_take_piece(w->split);
    for (int kind = TRAIN; kind <= VAL; kind++)
        if (w->fill[kind] > 0 && flush_shard(w, kind, NULL, 0, NULL, 0)) return -1;
    scan_shards(w->a, NULL, 0, w->k);
    return 0;
}

/* NAME.manifest, written last: the settings, the shards, the counts. */
static int write_manifest(writer *w, const char *manifest, long long total[2]) {
    char *rec = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rec, &len);
    if (!f) return -1;
    fputs(w->config, f);
    for (size_t k = 0; k < w->nrecs; k++) {
        char *p = shard_path(w->a, (long)k, w->recs[k].kind);
        fprintf(f, "shard %s %lld\n", p ? strrchr(p, '/') + 1 : "?", w->recs[k].count);
        free(p);
    }
    fprintf(f, "tokens %lld\ntrain_tokens %lld\nval_tokens %lld\n", total[TRAIN] + total[VAL],
            total[TRAIN], total[VAL]);
    fclose(f);
    int saved = rec ? save_text(manifest, "the manifest", rec) : -1;
    free(rec);
    return saved;
}

static void report(const writer *w, const char *manifest, const long long total[2],
                   const long shards[2]) {
    const shards_args *a = w->a;
    printf("wrote %ld shard%s of at most %lld tokens in %s: %ld train (%s_train_*.bin, %lld "
           "tokens) and %ld validation (%s_val_*.bin, %lld tokens: %.1f%%, pieces of at most "
           "%d tokens held out by --seed %llu); %s\n",
           w->k, w->k == 1 ? "" : "s", a->shard_tokens, a->out_dir, shards[TRAIN], a->name,
           total[TRAIN], shards[VAL], a->name, total[VAL],
           100.0 * (double)total[VAL] / (double)(total[TRAIN] + total[VAL]), SPLIT_PIECE_TOKENS,
           (unsigned long long)a->seed, manifest);
    if (a->val_fraction > 0 && total[VAL] == 0)
        fprintf(stderr, "gptx-tokenize: warning: --val-fraction %g drew no piece for validation "
                        "(%lld tokens are few pieces): raise --val-fraction or try another "
                        "--seed\n", a->val_fraction, total[TRAIN]);
}

/* The writer's buffers: two shards and a piece more each. 0, or -1. */
static int writer_open(writer *w, shards_args *a) {
    *w = (writer){.a = a};
    const char *hook = getenv("GPTX_TOKENIZE_TEST_KILL_AFTER");
    w->kill_after = hook ? atoi(hook) : 0;
    w->config = config_text(a);
    size_t cap = (size_t)a->shard_tokens + SPLIT_PIECE_TOKENS;
    w->buf[TRAIN] = malloc(cap * sizeof(int32_t));
    w->buf[VAL] = malloc(cap * sizeof(int32_t));
    w->split = calloc(1, sizeof *w->split);
    if (!w->config || !w->buf[TRAIN] || !w->buf[VAL] || !w->split) {
        fprintf(stderr, "gptx-tokenize: out of memory (--shard-tokens %lld needs %lld MB)\n",
                a->shard_tokens, a->shard_tokens * 8 / 1000000);
        return -1;
    }
    w->split->fraction = a->val_fraction;
    w->split->seed = a->seed;
    w->split->eot = gptx_tokenizer_eot_token(a->s.tok);
    return 0;
}

static void writer_close(writer *w) {
    free(w->config);
    free(w->buf[TRAIN]);
    free(w->buf[VAL]);
    free(w->split);
    free(w->recs);
}

/* A folder with shards of NAME but no manifest: refused without --resume.
 * 0, or -1 after a message. */
static int refuse_unfinished(const shards_args *a, const char *progress_rec) {
    char first[512];
    long n = scan_shards(a, first, sizeof first, -1);
    int has_rec = access(progress_rec, F_OK) == 0;
    if ((n == 0 && !has_rec) || a->resume) return 0;
    fprintf(stderr,
            "gptx-tokenize: %s holds an unfinished run of %s (%ld shard%s, first %s%s, "
            "no %s.manifest): --resume continues it; or remove them, or choose another "
            "--prefix or --out-dir\n",
            a->out_dir, a->name, n, n == 1 ? "" : "s", n ? first : "(none)",
            has_rec ? ", and its .progress record" : "", a->name);
    return -1;
}

int tokenize_shards(shards_args *a) {
    writer w;
    char *manifest = record_path(a, "manifest"), *progress_rec = record_path(a, "progress");
    int status = 1;
    if (writer_open(&w, a) != 0 || !manifest || !progress_rec) goto done;
    if (access(manifest, F_OK) == 0) {
        int rc = replace_finished(&w, manifest, progress_rec);
        if (rc) {
            status = rc > 0 ? 0 : 1;
            goto done;
        }
    } else if (refuse_unfinished(a, progress_rec) != 0) {
        goto done;
    }
    if (a->resume) {
        stream_pos pos = {0, 0, 1};
        int rc = read_progress(&w, &pos);
        if (rc < 0) goto done;
        if (rc == 0) {
            a->s.start = pos;
            printf("resuming after %ld shard%s, at byte %llu of %s\n", w.k, w.k == 1 ? "" : "s",
                   (unsigned long long)pos.off, a->s.in->paths[pos.file]);
        }
    }
    if (stream_encode(&a->s, sink, &w) || finish(&w)) goto done;
    long long total[2] = {0, 0};
    long shards[2] = {0, 0};
    for (size_t i = 0; i < w.nrecs; i++) {
        total[w.recs[i].kind] += w.recs[i].count;
        shards[w.recs[i].kind]++;
    }
    if (total[TRAIN] + total[VAL] == 0) {
        fprintf(stderr, "gptx-tokenize: --input has no text (every document is empty)\n");
        goto done;
    }
    if (write_manifest(&w, manifest, total)) goto done;
    unlink(progress_rec);
    scan_files(a, NULL, 0, 0, 1); /* the pending ids are all in shards now */
    report(&w, manifest, total, shards);
    status = 0;
done:
    free(manifest);
    free(progress_rec);
    writer_close(&w);
    return status;
}
