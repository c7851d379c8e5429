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

/* "NAME_val_000000.bin" or "NAME_train_%06ld.bin" in DIR */
static char *shard_path(const shards_args *a, long k) {
    size_t len = strlen(a->out_dir) + strlen(a->name) + 40;
    char *p = malloc(len);
    if (p)
        snprintf(p, len, "%s/%s_%s_%06ld.bin", a->out_dir, a->name, k ? "train" : "val", k);
    return p;
}

static char *record_path(const shards_args *a, const char *ext) {
    size_t len = strlen(a->out_dir) + strlen(a->name) + strlen(ext) + 3;
    char *p = malloc(len);
    if (p) snprintf(p, len, "%s/%s.%s", a->out_dir, a->name, ext);
    return p;
}

/* The index of a shard of NAME called `file`, or -1. */
static long shard_index(const char *name, const char *file) {
    size_t n = strlen(name);
    if (strncmp(file, name, n) || file[n] != '_') return -1;
    const char *p = file + n + 1;
    int val = !strncmp(p, "val_", 4);
    if (!val && strncmp(p, "train_", 6)) return -1;
    p += val ? 4 : 6;
    long k = 0;
    for (int i = 0; i < 6; i++, p++) {
        if (*p < '0' || *p > '9') return -1;
        k = 10 * k + (*p - '0');
    }
    if (strcmp(p, ".bin") || (val != (k == 0))) return -1;
    return k;
}

/* Shards of NAME in DIR: how many, and the first name found (for messages).
 * With remove_from >= 0, those with an index >= remove_from are removed. */
static long scan_shards(const shards_args *a, char *first, size_t cap, long remove_from) {
    DIR *d = opendir(a->out_dir);
    long n = 0, lowest = -1;
    if (first && cap) first[0] = '\0';
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        long k = shard_index(a->name, e->d_name);
        if (k < 0) continue;
        if (remove_from >= 0 && k >= remove_from) {
            char *p = shard_path(a, k);
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
    fprintf(f, "gptx-tokenize shards 1\nshard_tokens %lld\nspecial_tokens %s\neot_each_document 1\n",
            a->shard_tokens, a->s.special ? "allow" : "text");
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

typedef struct {
    shards_args *a;
    char *config;
    int32_t *buf;
    size_t fill;
    long k;          /* the shard being filled */
    uint64_t skip;   /* ids at the start already in earlier shards (resume) */
    long long *counts;
    size_t ncounts, capcounts;
    int kill_after;  /* test hook: SIGKILL once this many shards are written */
} writer;

static int save_text(const char *path, const char *what, const char *text) {
    if (prog_replace_link("gptx-tokenize", path) != 0) return -1; /* never through a link */
    if (gptx_file_save(path, text, strlen(text)) != GPTX_OK) {
        fprintf(stderr, "gptx-tokenize: cannot write %s %s: %s\n", what, path, prog_error_text());
        return -1;
    }
    return 0;
}

/* Writes the shard filled, then the record of where the input continues. */
static int flush_shard(writer *w, const stream_pos *pos, uint64_t consumed) {
    char *path = shard_path(w->a, w->k);
    if (!path) {
        fprintf(stderr, "gptx-tokenize: out of memory\n");
        return -1;
    }
    /* a link at a shard's name (to another corpus's shard) is replaced, not written through */
    int rc = GPTX_ERR_IO;
    if (prog_replace_link("gptx-tokenize", path) == 0 &&
        (rc = gptx_shard_write(path, w->buf, w->fill)) != GPTX_OK)
        fprintf(stderr, "gptx-tokenize: %s\n", prog_error_text());
    free(path);
    if (rc != GPTX_OK) return -1;
    if (w->ncounts == w->capcounts) {
        size_t cap = w->capcounts ? 2 * w->capcounts : 64;
        long long *c = realloc(w->counts, cap * sizeof *c);
        if (!c) {
            fprintf(stderr, "gptx-tokenize: out of memory\n");
            return -1;
        }
        w->counts = c;
        w->capcounts = cap;
    }
    w->counts[w->ncounts++] = (long long)w->fill;
    w->k++;
    w->fill = 0;
    if (w->kill_after > 0 && w->k >= w->kill_after) raise(SIGKILL); /* before its record */
    if (!pos) return 0; /* the last shard: the manifest follows */
    char *rec = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rec, &len);
    char *rpath = record_path(w->a, "progress");
    if (!f || !rpath) {
        if (f) fclose(f);
        free(rec);
        free(rpath);
        fprintf(stderr, "gptx-tokenize: out of memory\n");
        return -1;
    }
    fprintf(f, "%sshards_done %ld\nresume %llu %llu %d %llu\n", w->config, w->k,
            (unsigned long long)pos->file, (unsigned long long)pos->off, pos->doc_start,
            (unsigned long long)consumed);
    for (size_t i = 0; i < w->ncounts; i++) fprintf(f, "count %lld\n", w->counts[i]);
    fclose(f);
    rc = rec ? save_text(rpath, "the progress record", rec) : -1;
    free(rec);
    free(rpath);
    return rc;
}

static int sink(void *ctx, const stream_pos *pos, const int32_t *ids, size_t n) {
    writer *w = ctx;
    size_t i = 0;
    if (w->skip) {
        i = w->skip < n ? (size_t)w->skip : n;
        w->skip -= i;
    }
    size_t cap = (size_t)w->a->shard_tokens;
    while (i < n) {
        size_t m = n - i < cap - w->fill ? n - i : cap - w->fill;
        memcpy(w->buf + w->fill, ids + i, m * sizeof *ids);
        w->fill += m;
        i += m;
        if (w->fill == cap && flush_shard(w, pos, i)) return -1;
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
    if (rec && !same_config(rec, w->config)) {
        fprintf(stderr, "gptx-tokenize: --resume: %s is of a run with other inputs or settings "
                        "(--input's files and sizes, --shard-tokens, --special-tokens, "
                        "--doc-separator must be the same); remove it and its shards to start "
                        "anew\n", path);
    } else if (rec) {
        const char *p = rec + strlen(w->config);
        long done = 0;
        unsigned long long fi = 0, off = 0, skip = 0;
        int doc = 0, used = 0;
        if (sscanf(p, "shards_done %ld\nresume %llu %llu %d %llu\n%n", &done, &fi, &off, &doc,
                   &skip, &used) == 5 && done > 0 && fi < w->a->s.in->n && used > 0) {
            rc = 0;
            p += used;
            for (long i = 0; i < done && rc == 0; i++) {
                long long c = 0;
                int u = 0;
                if (sscanf(p, "count %lld\n%n", &c, &u) != 1 || u == 0) rc = -1;
                else if (w->ncounts == w->capcounts) {
                    size_t cap = w->capcounts ? 2 * w->capcounts : 64;
                    while (cap < (size_t)done) cap *= 2;
                    long long *cc = realloc(w->counts, cap * sizeof *cc);
                    if (!cc) rc = -1;
                    else {
                        w->counts = cc;
                        w->capcounts = cap;
                    }
                }
                if (rc == 0) w->counts[w->ncounts++] = c;
                p += u;
            }
            *pos = (stream_pos){fi, off, doc};
            w->k = done;
            w->skip = skip;
        }
        if (rc) fprintf(stderr, "gptx-tokenize: --resume: %s is damaged\n", path);
    }
    free(rec);
    free(path);
    return rc;
}

int tokenize_shards(shards_args *a) {
    writer w = {.a = a};
    const char *hook = getenv("GPTX_TOKENIZE_TEST_KILL_AFTER");
    w.kill_after = hook ? atoi(hook) : 0;
    char *manifest = record_path(a, "manifest"), *progress_rec = record_path(a, "progress");
    w.config = config_text(a);
    w.buf = malloc((size_t)a->shard_tokens * sizeof *w.buf);
    int status = 1;
    if (!manifest || !progress_rec || !w.config || !w.buf) {
        fprintf(stderr, "gptx-tokenize: out of memory (--shard-tokens %lld needs %lld MB)\n",
                a->shard_tokens, a->shard_tokens * 4 / 1000000);
        goto done;
    }
    char first[512];
    if (access(manifest, F_OK) == 0) {
        size_t len = 0;
        char *rec = a->resume ? prog_read_file("gptx-tokenize", "the manifest", manifest, &len)
                              : NULL;
        int same = rec && same_config(rec, w.config);
        free(rec);
        if (a->resume && same) {
            printf("%s: the run is finished already; nothing to do\n", manifest);
            status = 0;
            goto done;
        }
        /* a finished run, replaced: its manifest goes first, so a kill
         * from here on leaves an unfinished run, never a wrong manifest */
        if (unlink(manifest) != 0 && errno != ENOENT) {
            fprintf(stderr, "gptx-tokenize: cannot remove %s: %s\n", manifest, strerror(errno));
            goto done;
        }
        unlink(progress_rec);
        scan_shards(a, NULL, 0, 0);
        printf("%s: replacing the finished run's shards\n", manifest);
    } else {
        long n = scan_shards(a, first, sizeof first, -1);
        int has_rec = access(progress_rec, F_OK) == 0;
        if ((n > 0 || has_rec) && !a->resume) {
            fprintf(stderr,
                    "gptx-tokenize: %s holds an unfinished run of %s (%ld shard%s, first %s%s, "
                    "no %s.manifest): --resume continues it; or remove them, or choose another "
                    "--prefix or --out-dir\n",
                    a->out_dir, a->name, n, n == 1 ? "" : "s", n ? first : "(none)",
                    has_rec ? ", and its .progress record" : "", a->name);
            goto done;
        }
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
    if (stream_encode(&a->s, sink, &w)) goto done;
    if (w.fill > 0 && flush_shard(&w, NULL, 0)) goto done;
    long long total = 0;
    for (size_t i = 0; i < w.ncounts; i++) total += w.counts[i];
    if (total == 0) {
        fprintf(stderr, "gptx-tokenize: --input has no text (every document is empty)\n");
        goto done;
    }
    scan_shards(a, NULL, 0, w.k); /* a longer earlier run's last shards */
    char *rec = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&rec, &len);
    if (!f) goto done;
    fputs(w.config, f);
    for (long k = 0; k < w.k; k++) {
        char *p = shard_path(a, k);
        fprintf(f, "shard %s %lld\n", p ? strrchr(p, '/') + 1 : "?", w.counts[k]);
        free(p);
    }
    fprintf(f, "tokens %lld\n", total);
    fclose(f);
    int saved = rec ? save_text(manifest, "the manifest", rec) : -1;
    free(rec);
    if (saved) goto done;
    unlink(progress_rec);
    printf("wrote %ld shard%s of at most %lld tokens in %s: %s_val_000000.bin (validation)%s, "
           "%lld tokens; %s\n",
           w.k, w.k == 1 ? "" : "s", a->shard_tokens, a->out_dir, a->name,
           w.k > 1 ? " and the train shards after it" : " only", total, manifest);
    status = 0;
done:
    free(manifest);
    free(progress_rec);
    free(w.config);
    free(w.buf);
    free(w.counts);
    return status;
}
