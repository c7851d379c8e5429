/* gptx-train's data: --text (tokenized here, the tail held out for
 * validation) or llm.c shards, the loaders over it, the hash that tells a
 * resumed run it trains on the same data, and the unigram baseline (of the
 * text's splits, or of the train and val shards). */
#define _GNU_SOURCE /* memmem */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prog_files.h"
#include "prog_inputs.h"
#include "train_run.h"

/* A list of files, globs and folders (prog_inputs.h), sorted: 0, or -1
 * after a message. */
static int expand_paths(const char *flag, const char *list, char ***out, int *n) {
    prog_inputs in;
    if (prog_inputs_expand("gptx-train", flag, list, &in)) return -1;
    free(in.sizes);
    *out = in.paths;
    *n = (int)in.n;
    return 0;
}

void free_paths(char **paths, int n) {
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

/* FNV-1a, 64 bits: tells the data a run trained on from other data. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define HASH_START 0xcbf29ce484222325ull

/* Hash of every byte of the files, in order: 0, or -1 after a message. */
static int hash_files(char **paths, int n, uint64_t *out) {
    uint64_t h = HASH_START;
    static unsigned char buf[1 << 16];
    for (int i = 0; i < n; i++) {
        FILE *f = prog_open_read("gptx-train", "the shard", paths[i]);
        if (!f) return -1;
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) h = hash_bytes(h, buf, got);
        int err = ferror(f);
        fclose(f);
        if (err) {
            fprintf(stderr, "gptx-train: cannot read %s\n", paths[i]);
            return -1;
        }
        h = hash_bytes(h, "\0", 1); /* file boundaries count */
    }
    *out = h;
    return 0;
}

/* The unigram baseline: the cross-entropy on the validation tokens of
 * predicting each with its frequency among the training tokens (add-one
 * smoothed over the real vocabulary): the loss a model that ignores the
 * context gets; a trained model should be well below it. Counted in
 * pieces (a text's two splits, or shard after shard). */
typedef struct {
    double *count; /* per id, over the training tokens */
    double n_train, nll;
    size_t targets;
    int vocab;
} unigram;

static int unigram_open(unigram *u, int vocab) {
    *u = (unigram){calloc((size_t)vocab, sizeof(double)), 0, 0, 0, vocab};
    return u->count ? 0 : -1;
}

static void unigram_train(unigram *u, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < u->vocab) u->count[ids[i]] += 1;
    u->n_train += (double)n;
}

/* Validation tokens of one file (or split): every token after its first
 * is a target, as the loader's windows have them. */
static void unigram_val(unigram *u, const int32_t *ids, size_t n) {
    double total = u->n_train + u->vocab;
    for (size_t i = 1; i < n; i++)
        u->nll -= log((ids[i] >= 0 && ids[i] < u->vocab ? u->count[ids[i]] + 1 : 1) / total);
    u->targets += n > 1 ? n - 1 : 0;
}

static double unigram_close(unigram *u) {
    free(u->count);
    return u->targets ? u->nll / (double)u->targets : NAN;
}

static double unigram_baseline(const int32_t *train, size_t n_train, const int32_t *val,
                               size_t n_val, int vocab) {
    unigram u;
    if (unigram_open(&u, vocab)) return NAN;
    unigram_train(&u, train, n_train);
    unigram_val(&u, val, n_val);
    return unigram_close(&u);
}

/* The same over shard files, one in memory at a time (rank 0 reports it).
 * NAN when a shard cannot be read again or memory is short: a figure for
 * the record, not a reason to stop. */
static double unigram_shards(const train_run *run) {
    unigram u;
    if (run->n_val_paths == 0 || unigram_open(&u, run->o.vocab_size)) return NAN;
    int ok = 1;
    for (int k = 0; k < run->n_train_paths + run->n_val_paths && ok; k++) {
        int train = k < run->n_train_paths;
        int32_t *ids = NULL;
        size_t n = 0;
        const char *path = train ? run->train_paths[k] : run->val_paths[k - run->n_train_paths];
        ok = gptx_shard_read(path, &ids, &n) == GPTX_OK;
        if (ok && train) unigram_train(&u, ids, n);
        else if (ok) unigram_val(&u, ids, n);
        gptx_free(ids);
    }
    double loss = unigram_close(&u);
    return ok ? loss : NAN;
}

/* Training: each rank its own disjoint share of every epoch, shuffled, with
 * the next batch read ahead. Validation: every rank reads all of it and
 * evaluates its own batches (dp_evaluate), in order. */
static void loader_options(const train_run *run, gptx_dataloader_options *lo,
                           gptx_dataloader_options *vo) {
    gptx_dataloader_options_init(lo);
    lo->batch_size = run->o.batch;
    lo->seq_len = run->o.context;
    lo->seed = run->o.seed;
    lo->vocab_size = run->o.vocab_size;
    *vo = *lo;
    /* --rank-invariant: every rank sees the one global order and reads its
     * micro-batches of each step by their index (train_loop.c) */
    lo->rank = run->o.rank_invariant ? 0 : run->rank;
    lo->world_size = run->o.rank_invariant ? 1 : run->world;
    lo->shuffle = 1;
    lo->drop_last = 1;
    lo->prefetch = 1;
    vo->shuffle = 0;
    vo->drop_last = 0;
    vo->prefetch = 0;
}

/* --train-shards (and --val-shards): the hash covers every byte of both. */
static int open_shards(train_run *run, const gptx_dataloader_options *lo,
                       const gptx_dataloader_options *vo) {
    const train_options *o = &run->o;
    run->data_name = o->train_shards;
    if (expand_paths("--train-shards", o->train_shards, &run->train_paths, &run->n_train_paths))
        return -1;
    for (int i = 0; i < run->n_train_paths; i++)
        if (run_note_input(run, "--train-shards", run->train_paths[i])) return -1;
    if (hash_files(run->train_paths, run->n_train_paths, &run->data_hash)) return -1;
    TRY(run, gptx_dataloader_create_from_files(&run->train, run->ctx,
                                               (const char *const *)run->train_paths,
                                               run->n_train_paths, lo));
    if (!o->val_shards) return 0;
    if (expand_paths("--val-shards", o->val_shards, &run->val_paths, &run->n_val_paths))
        return -1;
    for (int i = 0; i < run->n_val_paths; i++)
        if (run_note_input(run, "--val-shards", run->val_paths[i])) return -1;
    uint64_t vh = 0;
    if (hash_files(run->val_paths, run->n_val_paths, &vh)) return -1;
    run->data_hash = hash_bytes(run->data_hash, &vh, sizeof vh);
    TRY(run, gptx_dataloader_create_from_files(&run->val, run->ctx,
                                               (const char *const *)run->val_paths,
                                               run->n_val_paths, vo));
    if (run->rank == 0) run->unigram = unigram_shards(run);
    return 0;
}

/* The tokens of --text, grown as documents are added. */
typedef struct {
    int32_t *ids;
    size_t n, cap;
    size_t *doc_end; /* where each document's tokens end */
    size_t n_docs, cap_docs;
} text_ids;

static int add_document(train_run *run, text_ids *t, const char *text, size_t len, int eot) {
    if (t->cap - t->n < len + 1) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap - t->n < len + 1) cap *= 2;
        int32_t *ids = realloc(t->ids, cap * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "gptx-train: out of memory for %zu token ids\n", cap);
            return -1;
        }
        t->ids = ids;
        t->cap = cap;
    }
    if (t->n_docs == t->cap_docs) {
        size_t cap = t->cap_docs ? 2 * t->cap_docs : 64;
        size_t *ends = realloc(t->doc_end, cap * sizeof *ends);
        if (!ends) {
            fprintf(stderr, "gptx-train: out of memory\n");
            return -1;
        }
        t->doc_end = ends;
        t->cap_docs = cap;
    }
    if (eot) t->ids[t->n++] = gptx_tokenizer_eot_token(run->tok);
    size_t m = 0;
    TRY(run, gptx_tokenizer_encode(run->tok, text, len, train_options_allow_special(&run->o),
                                   t->ids + t->n, t->cap - t->n, &m));
    t->n += m;
    t->doc_end[t->n_docs++] = t->n;
    return 0;
}

/* A file's documents: itself, or its parts between separators (an empty
 * one skipped, EOT and all). */
static int add_file(train_run *run, text_ids *t, const char *text, size_t len, const char *sep,
                    size_t sep_len) {
    if (!run->text_docs) return add_document(run, t, text, len, 0); /* a run saved before 0.6 */
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *q = sep ? memmem(p, (size_t)(end - p), sep, sep_len) : NULL;
        size_t n = q ? (size_t)(q - p) : (size_t)(end - p);
        if (n > 0 && add_document(run, t, p, n, 1)) return -1;
        p = q ? q + sep_len : end;
    }
    return 0;
}

/* Where validation starts: with several documents, whole ones from the end
 * (sorted by path, then their place in the file) until they hold at least
 * --val-fraction of the tokens, when that is at most twice the share and
 * leaves one for training; otherwise (one document, or documents too big
 * for the share) the tail of the tokens. */
static size_t text_split(train_run *run, const text_ids *t) {
    size_t n = t->n, want = n - (size_t)((double)n * (1.0 - run->o.val_fraction));
    run->val_docs = 0;
    if (!run->text_docs || t->n_docs < 2) return n - want;
    for (size_t d = t->n_docs - 1; d >= 1; d--) { /* documents d .. n_docs-1 held out */
        size_t held = n - t->doc_end[d - 1];
        if (held >= want) {
            if (held > 2 * want) break; /* too few documents for the share: the tail */
            run->val_docs = (int64_t)(t->n_docs - d);
            return t->doc_end[d - 1];
        }
    }
    return n - want;
}

/* --text: tokenized whole (every file, sorted; each document after an EOT),
 * the validation share held out (text_split). */
static int open_text(train_run *run, const gptx_dataloader_options *lo,
                     const gptx_dataloader_options *vo) {
    const train_options *o = &run->o;
    const int T = o->context;
    run->data_name = o->text;
    /* a run saved before 0.6 records no text_documents: it goes on with the
     * old layout (one file as it is) */
    char docs[16] = "";
    run->text_docs = !run->saved || (train_saved_get(run->saved, "text_documents", docs,
                                                     sizeof docs) == 0 && atoi(docs) == 1);
    if (getenv("GPTX_TRAIN_TEST_LAYOUT_0_5")) run->text_docs = 0; /* test hook: a 0.5 run */
    prog_inputs in = {0};
    static char dash[] = "-";
    static char *stdin_path[] = {dash};
    static uint64_t stdin_size[] = {0};
    if (!strcmp(o->text, "-")) /* standard input, one text (prog_read_file) */
        in = (prog_inputs){stdin_path, stdin_size, 1, 0};
    else if (prog_inputs_expand("gptx-train", "--text", o->text, &in))
        return -1;
    if (prog_inputs_check_text("gptx-train", "--text", &in)) { /* not shards, models, records */
        if (in.paths != stdin_path) prog_inputs_free(&in);
        return -1;
    }
    char *sep = NULL;
    size_t sep_len = 0;
    text_ids t = {0};
    int rc = -1;
    if (o->doc_separator &&
        prog_doc_separator_parse("gptx-train", o->doc_separator, &sep, &sep_len))
        goto done;
    if (!run->text_docs && (in.n != 1 || sep)) {
        fprintf(stderr, "gptx-train: --resume: the run was saved before gptx 0.6 and trains on "
                        "one text file as it is; --text %s is %zu files%s\n", o->text, in.n,
                sep ? " (and --doc-separator)" : "");
        goto done;
    }
    for (size_t i = 0; i < in.n; i++) {
        size_t len = 0;
        /* a regular file, read to the end without error (not a folder or a device) */
        if (run_note_input(run, "--text", in.paths[i])) goto done;
        char *text = prog_read_file("gptx-train", "--text", in.paths[i], &len);
        if (!text) goto done;
        int bad = add_file(run, &t, text, len, sep, sep_len);
        free(text);
        if (bad) goto done; /* after a message */
    }
    size_t own = t.n - (run->text_docs ? t.n_docs : 0); /* without the EOTs added */
    size_t n = t.n, split = text_split(run, &t);
    run->n_docs = (int64_t)t.n_docs;
    if (split < (size_t)T + 1 || n - split < (size_t)T + 1) {
        fprintf(stderr, "gptx-train: --text %s has %zu tokens; with --context %d and "
                        "--val-fraction %g both splits need at least %d\n",
                o->text, n, T, (double)o->val_fraction, T + 1);
        goto done;
    }
    run->tokens = t.ids;
    t.ids = NULL;
    run->text_tokens = (int64_t)own;
    /* the tokens (so the tokenizer files count too) and where validation starts */
    const int32_t *tokens = run->tokens;
    run->data_hash = hash_bytes(hash_bytes(run->data_hash, tokens, n * sizeof *tokens), &split,
                                sizeof split);
    run->unigram = unigram_baseline(tokens, split, tokens + split, n - split, o->vocab_size);
    int lrc = gptx_dataloader_create_from_tokens(&run->train, run->ctx, tokens, split, lo);
    if (lrc == GPTX_OK)
        lrc = gptx_dataloader_create_from_tokens(&run->val, run->ctx, tokens + split, n - split,
                                                 vo);
    rc = lrc == GPTX_OK ? 0 : run_fail(run, lrc);
done:
    free(t.ids);
    free(t.doc_end);
    free(sep);
    if (in.paths != stdin_path) prog_inputs_free(&in);
    return rc;
}

/* The loaders, and the run's length: --steps, or --epochs over the
 * training windows (rounded up to whole optimizer steps). */
int run_open_data(train_run *run) {
    const train_options *o = &run->o;
    gptx_dataloader_options lo, vo;
    loader_options(run, &lo, &vo);
    run->data_hash = HASH_START;
    run->unigram = NAN;
    if (o->train_shards && o->doc_separator) {
        fprintf(stderr, "gptx-train: --doc-separator is for --text, not --train-shards (shards "
                        "hold tokens: gptx-tokenize --doc-separator)\n");
        return -1;
    }
    if ((o->train_shards ? open_shards(run, &lo, &vo) : open_text(run, &lo, &vo)) != 0)
        return -1;
    gptx_dataloader_info_init(&run->ti);
    TRY(run, gptx_dataloader_info_get(run->train, &run->ti));
    run->total_steps = o->steps;
    if (o->epochs)
        run->total_steps = (o->epochs * run->ti.batches_per_epoch + o->grad_accum - 1) /
                           o->grad_accum;
    return 0;
}
