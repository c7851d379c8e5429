/* gptx-eval --multiple-choice: completion-style scoring of HellaSwag-like
 * examples, as llm.c's dev/data/hellaswag.py does it.
 *
 * An example is a context and endings (4 in HellaSwag); row i holds the
 * tokens of the context, then those of " " + ending i (each encoded on its
 * own). The model reads the row once; the cross-entropy of each ending token
 * given everything before it is summed over the ending (acc: the ending of
 * lowest sum is the answer) and averaged over its tokens (acc_norm: the
 * lowest mean). The endings of one or several whole examples are the rows of
 * one forward pass, padded at the end to the longest: attention is causal,
 * so the padding changes no scored position, and only the ending's
 * positions are read. A row longer than T + 1 tokens keeps its last T + 1
 * (the start of the context is dropped, the ending is scored whole); an
 * ending of more than T tokens is refused. */
#define _POSIX_C_SOURCE 200809L
#include "gptx_eval_mc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_error.h"
#include "prog_files.h"

#define PROG "gptx-eval"

/* ---- a JSON reader for one line ---------------------------------------- */

typedef struct jp {
    const char *p, *end;
    char *err;
    size_t err_cap;
} jp;

static int jfail(jp *j, const char *what) {
    snprintf(j->err, j->err_cap, "%s", what);
    return -1;
}

static void ws(jp *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n'))
        j->p++;
}

static int hex4(jp *j, unsigned *out) {
    if (j->end - j->p < 4) return jfail(j, "a \\u escape is cut short");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return jfail(j, "a \\u escape has a character that is not hexadecimal");
    }
    *out = v;
    return 0;
}

/* Appends code point cp as UTF-8 to buf (room for 4 bytes assured). */
static size_t put_utf8(char *buf, unsigned cp) {
    if (cp < 0x80) { buf[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        buf[0] = (char)(0xC0 | cp >> 6);
        buf[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | cp >> 12);
        buf[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        buf[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    buf[0] = (char)(0xF0 | cp >> 18);
    buf[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    buf[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    buf[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string at j->p (the opening quote); *out = its text (malloc'd,
 * NUL-terminated; no NUL inside) or skipped when out is NULL. */
static int jstring(jp *j, char **out) {
    if (j->p >= j->end || *j->p != '"') return jfail(j, "expected a string");
    j->p++;
    /* the decoded text is never longer than the escaped one */
    char *buf = out ? malloc((size_t)(j->end - j->p) + 1) : NULL;
    if (out && !buf) return jfail(j, "out of memory");
    size_t n = 0;
    for (;;) {
        if (j->p >= j->end) { free(buf); return jfail(j, "a string is not closed"); }
        unsigned char c = (unsigned char)*j->p++;
        if (c == '"') break;
        if (c < 0x20) { free(buf); return jfail(j, "a string holds a raw control character"); }
        if (c != '\\') {
            if (buf) buf[n] = (char)c;
            n++;
            continue;
        }
        if (j->p >= j->end) { free(buf); return jfail(j, "a string is not closed"); }
        char e = *j->p++;
        unsigned cp = 0;
        switch (e) {
        case '"': cp = '"'; break;
        case '\\': cp = '\\'; break;
        case '/': cp = '/'; break;
        case 'b': cp = '\b'; break;
        case 'f': cp = '\f'; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'u':
            if (hex4(j, &cp)) { free(buf); return -1; }
            if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
                unsigned lo = 0;
                if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u') {
                    free(buf);
                    return jfail(j, "a \\u high surrogate without its low half");
                }
                j->p += 2;
                if (hex4(j, &lo)) { free(buf); return -1; }
                if (lo < 0xDC00 || lo > 0xDFFF) {
                    free(buf);
                    return jfail(j, "a \\u high surrogate without its low half");
                }
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                free(buf);
                return jfail(j, "a \\u low surrogate without its high half");
            }
            if (cp == 0) { free(buf); return jfail(j, "a string holds \\u0000"); }
            break;
        default: free(buf); return jfail(j, "a string has an unknown escape");
        }
        /* an escape of 2 or 6 (12 for a pair) characters gives at most 3 (4) bytes */
        if (buf) n += put_utf8(buf + n, cp);
        else n += 4;
    }
    if (buf) {
        buf[n] = '\0';
        *out = buf;
    }
    return 0;
}

static int jnumber(jp *j, double *out) {
    const char *s = j->p;
    if (j->p < j->end && *j->p == '-') j->p++;
    while (j->p < j->end && strchr("0123456789+-.eE", *j->p)) j->p++;
    if (j->p == s) return jfail(j, "expected a value");
    char tmp[64];
    size_t n = (size_t)(j->p - s);
    if (n >= sizeof tmp) return jfail(j, "a number is too long");
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    char *e = NULL;
    double x = strtod(tmp, &e);
    if (!e || *e) return jfail(j, "a number is malformed");
    if (out) *out = x;
    return 0;
}

static int jskip(jp *j, int depth);

static int jword(jp *j, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n)) return jfail(j, "expected a value");
    j->p += n;
    return 0;
}

/* Skips any value; nesting deeper than 64 is refused. */
static int jskip(jp *j, int depth) {
    if (depth > 64) return jfail(j, "values are nested more than 64 deep");
    ws(j);
    if (j->p >= j->end) return jfail(j, "expected a value");
    char c = *j->p;
    if (c == '"') return jstring(j, NULL);
    if (c == 't') return jword(j, "true");
    if (c == 'f') return jword(j, "false");
    if (c == 'n') return jword(j, "null");
    if (c == '[' || c == '{') {
        char close = c == '[' ? ']' : '}';
        j->p++;
        ws(j);
        if (j->p < j->end && *j->p == close) { j->p++; return 0; }
        for (;;) {
            ws(j);
            if (c == '{') {
                if (jstring(j, NULL)) return -1;
                ws(j);
                if (j->p >= j->end || *j->p != ':') return jfail(j, "expected ':' after a key");
                j->p++;
            }
            if (jskip(j, depth + 1)) return -1;
            ws(j);
            if (j->p < j->end && *j->p == ',') { j->p++; continue; }
            if (j->p < j->end && *j->p == close) { j->p++; return 0; }
            return jfail(j, c == '[' ? "expected ',' or ']' in an array"
                                     : "expected ',' or '}' in an object");
        }
    }
    return jnumber(j, NULL);
}

void eval_mc_example_free(eval_mc_example *ex) {
    free(ex->ctx);
    for (int i = 0; i < ex->n_endings; i++) free(ex->endings[i]);
    memset(ex, 0, sizeof *ex);
}

int eval_mc_parse_line(const char *line, size_t len, eval_mc_example *ex, char *err,
                       size_t err_cap) {
    memset(ex, 0, sizeof *ex);
    jp j = {line, line + len, err, err_cap};
    int have_label = 0, have_endings = 0, have_ctx = 0;
    double label = -1;
    ws(&j);
    if (j.p >= j.end || *j.p != '{') return jfail(&j, "not a JSON object");
    j.p++;
    ws(&j);
    if (j.p < j.end && *j.p == '}') {
        j.p++;
    } else {
        for (;;) {
            ws(&j);
            char *key = NULL;
            if (jstring(&j, &key)) goto bad;
            ws(&j);
            if (j.p >= j.end || *j.p != ':') {
                free(key);
                jfail(&j, "expected ':' after a key");
                goto bad;
            }
            j.p++;
            ws(&j);
            int rc = 0;
            int *seen = !strcmp(key, "ctx") ? &have_ctx : !strcmp(key, "label") ? &have_label
                        : !strcmp(key, "endings") ? &have_endings : NULL;
            if (seen && *seen) { /* which one would count? neither: refused (issue 34, item 9) */
                snprintf(err, err_cap, "\"%s\" appears twice in the object", key);
                free(key);
                goto bad;
            }
            if (!strcmp(key, "ctx")) {
                have_ctx = 1;
                if (j.p < j.end && *j.p == '"') rc = jstring(&j, &ex->ctx);
                else rc = jfail(&j, "\"ctx\" is not a string");
            } else if (!strcmp(key, "label") && (j.p >= j.end || !strchr("\"-0123456789", *j.p))) {
                rc = jfail(&j, "\"label\" is not a number: expected an ending's index");
            } else if (!strcmp(key, "label")) {
                if (j.p < j.end && *j.p == '"') { /* some copies hold it as "3" */
                    char *s = NULL, *e = NULL;
                    rc = jstring(&j, &s);
                    if (!rc) {
                        label = strtod(s, &e);
                        if (!*s || *e) label = -0.5;
                    }
                    free(s);
                } else {
                    rc = jnumber(&j, &label);
                }
                have_label = 1;
            } else if (!strcmp(key, "endings")) {
                have_endings = 1;
                if (j.p >= j.end || *j.p != '[') {
                    free(key);
                    jfail(&j, "\"endings\" is not an array of strings");
                    goto bad;
                }
                j.p++;
                ws(&j);
                if (j.p < j.end && *j.p == ']') {
                    j.p++;
                } else {
                    for (;;) {
                        ws(&j);
                        if (ex->n_endings == EVAL_MC_MAX_ENDINGS) {
                            free(key);
                            snprintf(err, err_cap, "\"endings\" has more than %d strings",
                                     EVAL_MC_MAX_ENDINGS);
                            goto bad;
                        }
                        if (j.p >= j.end || *j.p != '"') {
                            free(key);
                            jfail(&j, "\"endings\" is not an array of strings");
                            goto bad;
                        }
                        if (jstring(&j, &ex->endings[ex->n_endings])) {
                            free(key);
                            goto bad;
                        }
                        ex->n_endings++;
                        ws(&j);
                        if (j.p < j.end && *j.p == ',') { j.p++; continue; }
                        if (j.p < j.end && *j.p == ']') { j.p++; break; }
                        free(key);
                        jfail(&j, "expected ',' or ']' in \"endings\"");
                        goto bad;
                    }
                }
            } else {
                rc = jskip(&j, 1);
            }
            free(key);
            if (rc) goto bad;
            ws(&j);
            if (j.p < j.end && *j.p == ',') { j.p++; continue; }
            if (j.p < j.end && *j.p == '}') { j.p++; break; }
            jfail(&j, "expected ',' or '}' after a value");
            goto bad;
        }
    }
    ws(&j);
    if (j.p != j.end) { jfail(&j, "text after the object"); goto bad; }
    if (!ex->ctx) { jfail(&j, "no \"ctx\""); goto bad; }
    if (!have_endings) { jfail(&j, "no \"endings\""); goto bad; }
    if (!have_label) { jfail(&j, "no \"label\""); goto bad; }
    if (ex->n_endings < 2) {
        snprintf(err, err_cap, "\"endings\" has %d string%s; at least 2 are needed",
                 ex->n_endings, ex->n_endings == 1 ? "" : "s");
        goto bad;
    }
    if (!(label >= 0 && label < ex->n_endings && label == floor(label))) {
        snprintf(err, err_cap, "\"label\" is not an ending's index (0 to %d)", ex->n_endings - 1);
        goto bad;
    }
    ex->label = (int)label;
    return 0;
bad:
    eval_mc_example_free(ex);
    return -1;
}

/* ---- scoring ------------------------------------------------------------ */

/* One row: an ending of an example, as tokens. */
typedef struct mc_row {
    int32_t *ids;   /* the row's tokens after any cut (context, then ending) */
    int n;          /* tokens in ids (<= T + 1) */
    int first;      /* index in ids of the ending's first token (>= 1) */
    int ending;     /* tokens of the ending */
    double sum;     /* summed cross-entropy of the ending's tokens */
} mc_row;

typedef struct mc_item {
    eval_mc_example ex;
    size_t line;
    mc_row rows[EVAL_MC_MAX_ENDINGS];
} mc_item;

static int encode(const gptx_tokenizer *tok, const char *s, int special, int32_t **ids, int *n) {
    size_t len = strlen(s), cap = len + 1, got = 0;
    *ids = malloc(cap * sizeof **ids);
    if (!*ids) return GPTX_ERR_NO_MEMORY;
    int rc = gptx_tokenizer_encode(tok, s, len, special, *ids, cap, &got);
    *n = (int)got;
    return rc;
}

/* Tokens of item's rows; 0, or 1 after a message. */
static int make_rows(const gptx_tokenizer *tok, const eval_mc_options *o, int vocab, mc_item *it,
                     eval_mc_result *r) {
    int32_t *ctx = NULL;
    int nc = 0, status = 1;
    if (encode(tok, it->ex.ctx, o->special, &ctx, &nc) != GPTX_OK) {
        fprintf(stderr, "%s: %s line %zu: %s\n", PROG, o->path, it->line, prog_error_text());
        goto done;
    }
    if (nc == 0) {
        fprintf(stderr, "%s: %s line %zu: \"ctx\" is empty (no token to predict the ending "
                        "from)\n", PROG, o->path, it->line);
        goto done;
    }
    for (int e = 0; e < it->ex.n_endings; e++) {
        size_t len = strlen(it->ex.endings[e]);
        char *s = malloc(len + 2);
        if (!s) goto oom;
        s[0] = ' ';
        memcpy(s + 1, it->ex.endings[e], len + 1);
        int32_t *end = NULL;
        int ne = 0;
        int rc = encode(tok, s, o->special, &end, &ne);
        free(s);
        if (rc != GPTX_OK) {
            free(end);
            fprintf(stderr, "%s: %s line %zu: %s\n", PROG, o->path, it->line, prog_error_text());
            goto done;
        }
        if (ne > o->T) {
            free(end);
            fprintf(stderr, "%s: %s line %zu: ending %d has %d tokens, more than the %d "
                            "positions of a row (--seq, or the model's context)\n",
                    PROG, o->path, it->line, e, ne, o->T);
            goto done;
        }
        int total = nc + ne, cut = total > o->T + 1 ? total - (o->T + 1) : 0;
        mc_row *row = &it->rows[e];
        row->n = total - cut;
        row->first = nc - cut;
        row->ending = ne;
        row->ids = malloc((size_t)row->n * sizeof *row->ids);
        if (!row->ids) { free(end); goto oom; }
        memcpy(row->ids, ctx + cut, (size_t)(nc - cut) * sizeof *ctx);
        memcpy(row->ids + (nc - cut), end, (size_t)ne * sizeof *end);
        free(end);
        for (int i = 0; i < row->n; i++)
            if (row->ids[i] >= vocab) {
                fprintf(stderr, "%s: %s line %zu: token id %d is outside the model's vocabulary "
                                "of %d ids (the text is encoded with the GPT-2 tokenizer)\n",
                        PROG, o->path, it->line, (int)row->ids[i], vocab);
                goto done;
            }
        if (cut) r->truncated_rows++;
    }
    status = 0;
    goto done;
oom:
    fprintf(stderr, "%s: %s line %zu: out of memory\n", PROG, o->path, it->line);
done:
    free(ctx);
    return status;
}

static void free_item(mc_item *it) {
    for (int e = 0; e < EVAL_MC_MAX_ENDINGS; e++) free(it->rows[e].ids);
    eval_mc_example_free(&it->ex);
    memset(it, 0, sizeof *it);
}

/* One forward pass over the rows of items[0..n); fills every row's sum. */
static int score_items(gptx_model *m, int Vp, mc_item *items, int n, eval_mc_result *r) {
    int rows = 0, Tb = 1;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < items[i].ex.n_endings; e++) {
            rows++;
            if (items[i].rows[e].n - 1 > Tb) Tb = items[i].rows[e].n - 1;
        }
    int32_t *in = calloc((size_t)rows * Tb, sizeof *in);
    float *logits = malloc((size_t)rows * Tb * (size_t)Vp * sizeof *logits);
    if (!in || !logits) {
        free(in);
        free(logits);
        fprintf(stderr, "%s: out of memory for the logits of %d rows of %d positions (lower "
                        "--batch)\n", PROG, rows, Tb);
        return 1;
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < items[i].ex.n_endings; e++, k++) /* the rest stays 0: padding */
            memcpy(in + (size_t)k * Tb, items[i].rows[e].ids,
                   (size_t)(items[i].rows[e].n - 1) * sizeof *in);
    int rc = gptx_model_forward(m, in, NULL, rows, Tb, NULL);
    if (rc == GPTX_OK) rc = gptx_model_get_logits(m, logits, (size_t)rows * Tb * (size_t)Vp);
    if (rc != GPTX_OK) {
        fprintf(stderr, "%s: %s\n", PROG, prog_error_text());
        free(in);
        free(logits);
        return 1;
    }
    r->passes++;
    k = 0;
    for (int i = 0; i < n; i++)
        for (int e = 0; e < items[i].ex.n_endings; e++, k++) {
            mc_row *row = &items[i].rows[e];
            double sum = 0;
            /* position t predicts ids[t + 1]: the ending's tokens ids[first..n) */
            for (int t = row->first - 1; t < row->n - 1; t++) {
                const float *l = logits + ((size_t)k * Tb + (size_t)t) * (size_t)Vp;
                double mx = -INFINITY, s = 0;
                for (int v = 0; v < Vp; v++)
                    if (l[v] > mx) mx = l[v];
                for (int v = 0; v < Vp; v++) s += exp((double)l[v] - mx);
                sum += mx + log(s) - (double)l[row->ids[t + 1]];
            }
            row->sum = sum;
        }
    free(in);
    free(logits);
    return 0;
}

/* The counts of items[0..n) and their lines of the details file. */
static int tally(mc_item *items, int n, FILE *details, eval_mc_result *r) {
    for (int i = 0; i < n; i++) {
        mc_item *it = &items[i];
        int pred = 0, pred_norm = 0;
        for (int e = 1; e < it->ex.n_endings; e++) {
            /* the first of equal losses, as torch's argmin */
            if (it->rows[e].sum < it->rows[pred].sum) pred = e;
            if (it->rows[e].sum / it->rows[e].ending <
                it->rows[pred_norm].sum / it->rows[pred_norm].ending)
                pred_norm = e;
        }
        r->examples++;
        r->rows += (size_t)it->ex.n_endings;
        r->correct += pred == it->ex.label;
        r->correct_norm += pred_norm == it->ex.label;
        if (details) {
            fprintf(details, "{\"line\": %zu, \"label\": %d, \"pred\": %d, \"pred_norm\": %d, "
                             "\"tokens\": [", it->line, it->ex.label, pred, pred_norm);
            for (int e = 0; e < it->ex.n_endings; e++)
                fprintf(details, "%s%d", e ? ", " : "", it->rows[e].ending);
            fprintf(details, "], \"sum\": [");
            for (int e = 0; e < it->ex.n_endings; e++)
                fprintf(details, "%s%.6f", e ? ", " : "", it->rows[e].sum);
            fprintf(details, "], \"mean\": [");
            for (int e = 0; e < it->ex.n_endings; e++)
                fprintf(details, "%s%.6f", e ? ", " : "", it->rows[e].sum / it->rows[e].ending);
            fprintf(details, "]}\n");
        }
    }
    return 0;
}

int eval_mc_run(gptx_model *m, const gptx_tokenizer *tok, const eval_mc_options *o,
                eval_mc_result *r) {
    memset(r, 0, sizeof *r);
    gptx_model_config c;
    gptx_model_config_init(&c);
    if (gptx_model_get_config(m, &c) != GPTX_OK) {
        fprintf(stderr, "%s: %s\n", PROG, prog_error_text());
        return 1;
    }
    int Vp = c.padded_vocab_size > 0 ? c.padded_vocab_size : c.vocab_size;
    size_t len = 0;
    char *text = prog_read_file(PROG, "--multiple-choice", o->path, &len);
    if (!text) return 1;
    /* a UTF-8 byte order mark (some editors and exports write one) is not
     * part of the first line's object */
    size_t bom = len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3) ? 3 : 0;
    /* the examples of one pass, and room for the one read after them */
    int cap = o->batch_rows / 2 + 2;
    mc_item *items = calloc((size_t)cap, sizeof *items);
    prog_out details = {0};
    int status = 1, n = 0, rows = 0;
    if (!items) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        goto done;
    }
    if (o->details && prog_out_open(&details, PROG, o->details)) goto done;
    size_t line = 0;
    for (const char *p = text + bom, *end = text + len; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end, *s = p, *q = p;
        p = nl ? nl + 1 : end;
        line++;
        while (q < stop && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        if (q == stop) continue; /* a blank line */
        char err[160];
        mc_item *it = &items[n];
        if (eval_mc_parse_line(s, (size_t)(stop - s), &it->ex, err, sizeof err)) {
            fprintf(stderr, "%s: %s line %zu: %s\n", PROG, o->path, line, err);
            goto done;
        }
        it->line = line;
        if (make_rows(tok, o, c.vocab_size, it, r)) {
            free_item(it);
            goto done;
        }
        /* the pending examples make a pass when this one would not fit with them */
        if (n > 0 && rows + it->ex.n_endings > o->batch_rows) {
            if (score_items(m, Vp, items, n, r)) goto done;
            tally(items, n, details.f, r);
            for (int i = 0; i < n; i++) free_item(&items[i]);
            items[0] = items[n];
            memset(&items[n], 0, sizeof items[n]);
            n = 0;
            rows = 0;
        }
        rows += items[n].ex.n_endings;
        n++;
    }
    if (n > 0) {
        if (score_items(m, Vp, items, n, r)) goto done;
        tally(items, n, details.f, r);
    }
    if (r->examples == 0) {
        fprintf(stderr, "%s: %s has no examples\n", PROG, o->path);
        goto done;
    }
    if (o->details && prog_out_save(&details, PROG, "--details", o->details)) goto done;
    status = 0;
done:
    if (details.f) {
        fclose(details.f);
        free(details.buf);
    }
    for (int i = 0; items && i <= n && i < cap; i++) free_item(&items[i]);
    free(items);
    free(text);
    return status;
}
