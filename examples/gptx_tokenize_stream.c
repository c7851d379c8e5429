/* gptx_tokenize_stream.h */
#define _GNU_SOURCE /* memmem */
#include "gptx_tokenize_stream.h"

#include "prog_files.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "prog_error.h"

static int is_graphic_ascii(unsigned char c) { return c > 0x20 && c < 0x7F; }

/* Just after a newline that has a visible ASCII character on each side
 * ("x\nY"): the GPT-2 pattern always has a piece boundary on both sides of
 * such a newline (only whitespace alternatives match '\n', its run is this
 * one character, and no alternative looks behind), so encoding the blocks
 * separately gives the same ids as encoding the whole text. */
size_t stream_safe_cut(const unsigned char *buf, size_t len) {
    for (size_t i = len; i >= 3; i--)
        if (buf[i - 2] == '\n' && is_graphic_ascii(buf[i - 1]) && is_graphic_ascii(buf[i - 3]))
            return i - 1;
    return 0;
}

/* ---- the reader: files in order, cut into segments of documents -------- */

typedef struct {
    const stream_args *a;
    uint64_t fi;       /* the file open (or next) */
    FILE *f;
    uint64_t off;      /* file offset of buf[0] */
    unsigned char *buf;
    size_t have, cap;
    int eof, doc_start;
    size_t scanned;    /* the separator is not in buf[0, scanned + sep_len - 1) */
    uint64_t done_before; /* bytes of the files before fi */
    int started;
} reader;

static int reader_open(reader *r) {
    const char *path = r->a->in->paths[r->fi];
    r->f = prog_open_read("gptx-tokenize", "--input", path); /* a FIFO is not waited on */
    if (!r->f) return -1;
    r->off = 0;
    r->doc_start = 1;
    if (!r->started && (r->a->start.off > 0 || !r->a->start.doc_start)) {
        if (fseeko(r->f, (off_t)r->a->start.off, SEEK_SET) != 0) {
            fprintf(stderr, "gptx-tokenize: cannot seek in --input %s: %s\n", path,
                    strerror(errno));
            return -1;
        }
        r->off = r->a->start.off;
        r->doc_start = r->a->start.doc_start;
    }
    r->started = 1;
    r->have = r->scanned = 0;
    r->eof = 0;
    return 0;
}

/* The next segment buf[0, *len): 1, or 0 at the end of the inputs, -1 after
 * a message. *consume bytes are dropped after it (the separator too);
 * *ends_doc: a document starts after them. */
static int reader_segment(reader *r, size_t *len, size_t *consume, int *ends_doc) {
    const stream_args *a = r->a;
    for (;;) {
        if (!r->f) {
            if (r->fi >= a->in->n) return 0;
            if (reader_open(r)) return -1;
        }
        if (r->eof && r->have == 0) { /* the file is done */
            fclose(r->f);
            r->f = NULL;
            r->done_before += a->in->sizes[r->fi];
            r->fi++;
            continue;
        }
        if (a->sep && r->have >= a->sep_len) {
            const unsigned char *p =
                memmem(r->buf + r->scanned, r->have - r->scanned, a->sep, a->sep_len);
            if (p) {
                *len = (size_t)(p - r->buf);
                *consume = *len + a->sep_len;
                *ends_doc = 1;
                return 1;
            }
            r->scanned = r->have - a->sep_len + 1;
        }
        if (r->eof) {
            *len = *consume = r->have;
            *ends_doc = 1;
            return 1;
        }
        if (r->have >= a->chunk_bytes) {
            /* a separator may start in the last sep_len - 1 bytes: not cut there */
            size_t hold = a->sep ? a->sep_len - 1 : 0;
            size_t cut = stream_safe_cut(r->buf, r->have - (hold < r->have ? hold : r->have));
            if (cut > 0) {
                *len = *consume = cut;
                *ends_doc = 0;
                return 1;
            }
        }
        if (r->cap - r->have < a->chunk_bytes) { /* no cut point yet: read on */
            size_t cap = r->cap ? 2 * r->cap : 2 * a->chunk_bytes;
            unsigned char *nb = r->cap > SIZE_MAX / 4 ? NULL : realloc(r->buf, cap);
            if (!nb) {
                fprintf(stderr, "gptx-tokenize: out of memory\n");
                return -1;
            }
            r->buf = nb;
            r->cap = cap;
        }
        size_t got = fread(r->buf + r->have, 1, a->chunk_bytes, r->f);
        if (got < a->chunk_bytes) {
            if (ferror(r->f)) {
                fprintf(stderr, "gptx-tokenize: error reading %s\n", a->in->paths[r->fi]);
                return -1;
            }
            r->eof = 1;
        }
        r->have += got;
    }
}

static void reader_consume(reader *r, size_t n, int ends_doc) {
    memmove(r->buf, r->buf + n, r->have - n);
    r->have -= n;
    r->off += n;
    r->scanned = r->scanned > n ? r->scanned - n : 0;
    r->doc_start = ends_doc;
}

/* ---- jobs: a block of segments, encoded by one thread ------------------ */

typedef struct {
    size_t off, len;
    int eot;
} segment;

typedef struct {
    unsigned char *text;
    size_t len, cap;
    segment *seg;
    size_t nseg, segcap;
    stream_pos pos;
    int32_t *ids;
    size_t n, idcap;
    int rc;
    char msg[512]; /* the library's message (thread-local in the thread that failed) */
} job;

static int job_add(job *j, const unsigned char *p, size_t len, int eot) {
    if (j->cap - j->len < len) {
        size_t cap = j->cap ? j->cap : 4096;
        while (cap - j->len < len) cap *= 2;
        unsigned char *t = realloc(j->text, cap);
        if (!t) return -1;
        j->text = t;
        j->cap = cap;
    }
    if (j->nseg == j->segcap) {
        size_t cap = j->segcap ? 2 * j->segcap : 16;
        segment *s = realloc(j->seg, cap * sizeof *s);
        if (!s) return -1;
        j->seg = s;
        j->segcap = cap;
    }
    memcpy(j->text + j->len, p, len);
    j->seg[j->nseg++] = (segment){j->len, len, eot};
    j->len += len;
    return 0;
}

/* 1: a job filled (about chunk_bytes), 0: the end, -1 after a message. */
static int job_fill(reader *r, job *j) {
    j->len = j->nseg = 0;
    while (j->len < r->a->chunk_bytes) {
        size_t len = 0, consume = 0;
        int ends = 0, rc = reader_segment(r, &len, &consume, &ends);
        if (rc < 0) return -1;
        if (rc == 0) break;
        if (len > 0) { /* an empty document is skipped, EOT and all */
            if (j->nseg == 0) j->pos = (stream_pos){r->fi, r->off, r->doc_start};
            if (job_add(j, r->buf, len, r->a->eot && r->doc_start)) {
                fprintf(stderr, "gptx-tokenize: out of memory\n");
                return -1;
            }
        }
        reader_consume(r, consume, ends);
    }
    return j->nseg > 0;
}

static void job_encode(const stream_args *a, job *j) {
    size_t need = j->len + j->nseg;
    j->n = 0;
    j->rc = GPTX_OK;
    if (j->idcap < need) {
        int32_t *ids = realloc(j->ids, need * sizeof *ids);
        if (!ids) {
            j->rc = GPTX_ERR_NO_MEMORY;
            snprintf(j->msg, sizeof j->msg, "out of memory");
            return;
        }
        j->ids = ids;
        j->idcap = need;
    }
    for (size_t s = 0; s < j->nseg && j->rc == GPTX_OK; s++) {
        if (j->seg[s].eot) j->ids[j->n++] = gptx_tokenizer_eot_token(a->tok);
        size_t m = 0;
        j->rc = gptx_tokenizer_encode(a->tok, (const char *)j->text + j->seg[s].off,
                                      j->seg[s].len, a->special, j->ids + j->n, j->idcap - j->n,
                                      &m);
        j->n += m;
    }
    if (j->rc != GPTX_OK) snprintf(j->msg, sizeof j->msg, "%s", prog_error_text());
}

typedef struct {
    const stream_args *a;
    job *jobs;
    int n, first, step;
} worker;

static void *work(void *p) {
    worker *w = p;
    for (int i = w->first; i < w->n; i += w->step) job_encode(w->a, &w->jobs[i]);
    return NULL;
}

/* ---- progress on a terminal ------------------------------------------- */

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* skipped: the bytes a resumed run starts after (not in its rate) */
static void progress(uint64_t done, uint64_t total, uint64_t skipped, double t0, double t) {
    double mb = 1e-6 * (double)done;
    double rate = t > t0 && done > skipped ? 1e-6 * (double)(done - skipped) / (t - t0) : 0;
    double left = rate > 0 && total > done ? 1e-6 * (double)(total - done) / rate : 0;
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    fprintf(stderr, "\rgptx-tokenize: %.1f/%.1f MB (%d%%), %.1f MB/s, ETA %dm%02ds\x1b[K", mb,
            1e-6 * (double)total, pct > 100 ? 100 : pct, rate, (int)(left / 60),
            (int)left % 60);
    fflush(stderr);
}

int stream_encode(const stream_args *a, stream_sink sink, void *ctx) {
    int T = a->threads > 0 ? a->threads : 1;
    reader r = {.a = a, .fi = a->start.file, .doc_start = 1};
    job *jobs = calloc((size_t)T, sizeof *jobs);
    worker *w = calloc((size_t)T, sizeof *w);
    pthread_t *th = calloc((size_t)T, sizeof *th);
    int rc = jobs && w && th ? 0 : -1;
    if (rc) fprintf(stderr, "gptx-tokenize: out of memory\n");
    uint64_t skipped = 0; /* bytes before the start, for the progress line */
    for (uint64_t i = 0; i < a->start.file && i < a->in->n; i++) skipped += a->in->sizes[i];
    r.done_before = skipped;
    skipped += a->start.off;
    double t0 = now(), shown = t0;
    while (rc == 0) {
        int n = 0;
        for (; n < T; n++) {
            int got = job_fill(&r, &jobs[n]);
            if (got < 0) rc = -1;
            if (got <= 0) break;
        }
        if (rc || n == 0) break;
        int started = 0;
        for (int k = 1; k < n; k++) {
            w[k] = (worker){a, jobs, n, k, n};
            if (pthread_create(&th[k], NULL, work, &w[k]) != 0) break;
            started = k;
        }
        w[0] = (worker){a, jobs, n, 0, n};
        if (started < n - 1) /* a thread that did not start: its jobs here */
            for (int k = started + 1; k < n; k++) job_encode(a, &jobs[k]);
        work(&w[0]);
        for (int k = 1; k <= started; k++) pthread_join(th[k], NULL);
        for (int k = 0; k < n && rc == 0; k++) {
            if (jobs[k].rc != GPTX_OK) {
                fprintf(stderr, "gptx-tokenize: encoding %s failed: %s\n",
                        a->in->paths[jobs[k].pos.file], jobs[k].msg);
                rc = -1;
            } else {
                rc = sink(ctx, &jobs[k].pos, jobs[k].ids, jobs[k].n);
            }
        }
        double t = now();
        if (a->progress && t - shown >= 0.5) {
            progress(r.done_before + r.off, a->in->total_bytes, skipped, t0, t);
            shown = t;
        }
    }
    if (a->progress) {
        if (rc == 0) progress(a->in->total_bytes, a->in->total_bytes, skipped, t0, now());
        fputc('\n', stderr);
    }
    if (r.f) fclose(r.f);
    free(r.buf);
    for (int k = 0; jobs && k < T; k++) {
        free(jobs[k].text);
        free(jobs[k].seg);
        free(jobs[k].ids);
    }
    free(jobs);
    free(w);
    free(th);
    return rc;
}
