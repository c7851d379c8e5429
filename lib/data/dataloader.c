/* Data loader: windows of T+1 tokens from shard files (or memory), shuffled
 * per epoch by a counter-based generator, split into disjoint equal shares
 * across data-parallel ranks, optionally prepared one batch ahead by a
 * background thread. Rules in docs/data.md.
 *
 * Windows never cross file boundaries: file f with n_f tokens has
 * floor((n_f - (T+1)) / stride) + 1 windows (0 if n_f < T+1), numbered after
 * those of files 0..f-1. An epoch's global order is the identity, or a
 * Fisher-Yates permutation driven by Philox(key = seed, stream = epoch), so
 * any epoch's order is recomputed directly. Rank r takes global positions
 * r, r + W, r + 2W, ... below W * floor(total / W); the rest are leftover. */
#include "dataloader.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "errors.h"
#include "abi_struct.h"
#include "philox.h"
#include "safetensors.h"
#include "shard.h"

/* One of the two batch buffers: rows x T inputs and targets. */
typedef struct batch_slot {
    int32_t *inputs;  /* (B, T) */
    int32_t *targets; /* (B, T) */
    int64_t epoch, batch;
    int rows;
} batch_slot;

/* What the prefetch thread is asked to prepare. */
typedef struct batch_job {
    int slot;
    int64_t epoch, batch;
    uint64_t seed;
} batch_job;

struct gptx_dataloader {
    gptx_handle h;     /* first (handle.h); its parent is ctx when there is one */
    gptx_context *ctx; /* may be NULL */
    gptx_dataloader_options o; /* stride resolved (never 0) */

    /* data, immutable after create */
    size_t n_files;
    int32_t **file_tokens; /* [n_files] */
    size_t *file_len;      /* [n_files] tokens */
    int64_t *file_win;     /* [n_files + 1] prefix sums of windows per file */
    int64_t total_tokens, total_windows, rank_windows, leftover_windows;
    int64_t batches_per_epoch, last_batch_rows;
    uint64_t data_hash;

    /* global order of the epoch perm_epoch under perm_seed (shuffle only);
     * touched only by whoever fills batches (the prefetch thread when on) */
    int64_t *perm;
    int64_t perm_epoch;
    uint64_t perm_seed;

    /* batch buffers: one allocation, pinned with a CUDA context */
    void *slot_mem;
    int slot_mem_pinned;
    batch_slot slots[2];
    int handed; /* slot whose pointers the caller holds, -1 none */

    /* caller's position: the next batch next() returns; main thread only */
    int64_t epoch, batch;
    uint64_t seed;

    /* prefetch thread (o.prefetch = 1) */
    int sync_ready; /* mu and cv initialised */
    int thread_started;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;        /* under mu: the thread exits */
    int job_posted;  /* under mu: `job` waits for the thread */
    int job_running; /* under mu: the thread is filling `job` */
    int job_done;    /* under mu: `done` holds a finished job */
    batch_job job, done;
    atomic_int cancel; /* read by the thread while filling: drop the job */
};

GPTX_HANDLE_FIRST(gptx_dataloader);

/* ---- options -------------------------------------------------------------- */

static const gptx_dataloader_options loader_defaults = {
    .struct_size = GPTX_DATALOADER_OPTIONS_SIZE,
    .batch_size = 4,
    .seq_len = 64,
    .stride = 0,
    .shuffle = 0,
    .seed = 0,
    .drop_last = 1,
    .rank = 0,
    .world_size = 1,
    .vocab_size = 0,
    .prefetch = 0,
};

int gptx_dataloader_options_init_sized(gptx_dataloader_options *o, size_t size) {
    return gptx_struct_init(o, size, &loader_defaults, &gptx_desc_dataloader_options, __func__,
                            "opts");
}

int gptx_dataloader_state_init_sized(gptx_dataloader_state *state, size_t size) {
    static const gptx_dataloader_state zero = {.struct_size = GPTX_DATALOADER_STATE_SIZE};
    return gptx_struct_init(state, size, &zero, &gptx_desc_dataloader_state, __func__, "state");
}

/* Errors found while creating name the public entry point, not the helper. */
#define CREATE_FAIL(status, ...) gptx_fail((status), fn, __VA_ARGS__)

static int check_flag(const char *fn, const char *name, int v) {
    if (v != 0 && v != 1)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.%s is %d; expected 0 or 1", name, v);
    return GPTX_OK;
}

static int validate(const char *fn, gptx_dataloader_options *o) {
    if (o->batch_size <= 0)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.batch_size is %d; must be > 0", o->batch_size);
    if (o->seq_len <= 0)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.seq_len is %d; must be > 0", o->seq_len);
    if (o->stride < 0)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.stride is %d; must be > 0 (or 0 = seq_len)",
                           o->stride);
    GPTX_TRY(check_flag(fn, "shuffle", o->shuffle));
    GPTX_TRY(check_flag(fn, "drop_last", o->drop_last));
    GPTX_TRY(check_flag(fn, "prefetch", o->prefetch));
    if (o->world_size < 1)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.world_size is %d; must be >= 1", o->world_size);
    if (o->rank < 0 || o->rank >= o->world_size)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.rank is %d; must be in [0, world_size %d)",
                           o->rank, o->world_size);
    if (o->vocab_size < 0)
        return CREATE_FAIL(GPTX_ERR_INVALID, "opts.vocab_size is %d; must be >= 0 (0 = no check)",
                           o->vocab_size);
    /* rows * T ids are handed out as int counts; keep B*(T+1) well inside int */
    if ((int64_t)o->batch_size * ((int64_t)o->seq_len + 1) > (int64_t)INT_MAX / 2)
        return CREATE_FAIL(GPTX_ERR_SHAPE, "opts.batch_size %d x (seq_len %d + 1) is too large",
                           o->batch_size, o->seq_len);
    if (o->stride == 0) o->stride = o->seq_len;
    return GPTX_OK;
}

/* ---- shuffling ------------------------------------------------------------ */

/* 64-bit draws from Philox(seed, stream), block after block. */
typedef struct draw_stream {
    uint64_t seed, stream, counter;
    gptx_philox4 block;
    int used; /* 64-bit halves of `block` already taken (2 = need a new block) */
} draw_stream;

static uint64_t draw_u64(draw_stream *s) {
    if (s->used == 2) {
        s->block = gptx_philox_block(s->seed, s->stream, s->counter++);
        s->used = 0;
    }
    uint64_t v = (uint64_t)s->block.v[2 * s->used] | (uint64_t)s->block.v[2 * s->used + 1] << 32;
    s->used++;
    return v;
}

/* Uniform in [0, bound) without modulo bias (rejects the top 2^64 mod bound). */
static uint64_t draw_below(draw_stream *s, uint64_t bound) {
    uint64_t threshold = (0 - bound) % bound; /* 2^64 mod bound */
    for (;;) {
        uint64_t r = draw_u64(s);
        if (r >= threshold) return r % bound;
    }
}

/* perm = the global window order of `epoch` (Fisher-Yates, back to front).
 * Returns 0 when cancelled (perm is then invalid). */
static int build_permutation(gptx_dataloader *dl, int64_t epoch, uint64_t seed) {
    int64_t n = dl->total_windows;
    int64_t *p = dl->perm;
    dl->perm_epoch = -1;
    for (int64_t i = 0; i < n; i++) p[i] = i;
    draw_stream s = {seed, (uint64_t)epoch, 0, {{0, 0, 0, 0}}, 2};
    for (int64_t i = n - 1; i > 0; i--) {
        if ((i & 0xffff) == 0 && atomic_load_explicit(&dl->cancel, memory_order_relaxed))
            return 0;
        int64_t j = (int64_t)draw_below(&s, (uint64_t)i + 1);
        int64_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    dl->perm_epoch = epoch;
    dl->perm_seed = seed;
    return 1;
}

/* ---- batches -------------------------------------------------------------- */

/* First token of global window w: which file, and where in it. */
static const int32_t *window_start(const gptx_dataloader *dl, int64_t w) {
    size_t lo = 0, hi = dl->n_files; /* file_win[lo] <= w < file_win[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (dl->file_win[mid] <= w) lo = mid;
        else hi = mid;
    }
    return dl->file_tokens[lo] + (size_t)(w - dl->file_win[lo]) * (size_t)dl->o.stride;
}

static int rows_of_batch(const gptx_dataloader *dl, int64_t batch) {
    int64_t left = dl->rank_windows - batch * dl->o.batch_size;
    return left < dl->o.batch_size ? (int)left : dl->o.batch_size;
}

/* Fills slot with batch `batch` of `epoch`. Returns 0 when cancelled. */
static int fill_batch(gptx_dataloader *dl, batch_slot *slot, int64_t epoch, int64_t batch,
                      uint64_t seed) {
    if (dl->o.shuffle && (dl->perm_epoch != epoch || dl->perm_seed != seed))
        if (!build_permutation(dl, epoch, seed)) return 0;
    const size_t T = (size_t)dl->o.seq_len;
    const int64_t W = dl->o.world_size, r = dl->o.rank;
    int rows = rows_of_batch(dl, batch);
    for (int i = 0; i < rows; i++) {
        int64_t q = batch * dl->o.batch_size + i; /* this rank's window index */
        int64_t pos = q * W + r;                  /* position in the global order */
        int64_t w = dl->o.shuffle ? dl->perm[pos] : pos;
        const int32_t *src = window_start(dl, w);
        memcpy(slot->inputs + (size_t)i * T, src, T * sizeof *src);
        memcpy(slot->targets + (size_t)i * T, src + 1, T * sizeof *src);
    }
    slot->epoch = epoch;
    slot->batch = batch;
    slot->rows = rows;
    return 1;
}

/* ---- prefetch thread ------------------------------------------------------ */

static void *prefetch_main(void *arg) {
    gptx_dataloader *dl = arg;
    pthread_mutex_lock(&dl->mu);
    for (;;) {
        while (!dl->stop && !dl->job_posted) pthread_cond_wait(&dl->cv, &dl->mu);
        if (dl->stop) break;
        batch_job job = dl->job;
        dl->job_posted = 0;
        dl->job_running = 1;
        pthread_mutex_unlock(&dl->mu);
        int ok = fill_batch(dl, &dl->slots[job.slot], job.epoch, job.batch, job.seed);
        pthread_mutex_lock(&dl->mu);
        dl->job_running = 0;
        if (ok && !atomic_load(&dl->cancel)) {
            dl->done = job;
            dl->job_done = 1;
        }
        pthread_cond_broadcast(&dl->cv);
    }
    pthread_mutex_unlock(&dl->mu);
    return NULL;
}

/* Asks the thread to prepare the caller's next batch into the slot the
 * caller does not hold. */
static void post_job(gptx_dataloader *dl) {
    pthread_mutex_lock(&dl->mu);
    dl->job.slot = dl->handed == 0 ? 1 : 0;
    dl->job.epoch = dl->epoch;
    dl->job.batch = dl->batch;
    dl->job.seed = dl->seed;
    dl->job_posted = 1;
    dl->job_done = 0;
    pthread_cond_broadcast(&dl->cv);
    pthread_mutex_unlock(&dl->mu);
}

/* Drops any pending or running job and waits until the thread is idle. */
static void cancel_jobs(gptx_dataloader *dl) {
    atomic_store(&dl->cancel, 1);
    pthread_mutex_lock(&dl->mu);
    dl->job_posted = 0;
    while (dl->job_running) pthread_cond_wait(&dl->cv, &dl->mu);
    dl->job_done = 0;
    atomic_store(&dl->cancel, 0);
    pthread_mutex_unlock(&dl->mu);
}

/* ---- create / destroy ----------------------------------------------------- */

/* The loader's release (handle.h), under its context's lock when it has one
 * (pinned batch memory goes back to the backend). */
static void release_loader(gptx_handle *h) {
    gptx_dataloader *dl = (gptx_dataloader *)h;
    if (dl->thread_started) {
        atomic_store(&dl->cancel, 1);
        pthread_mutex_lock(&dl->mu);
        dl->stop = 1;
        pthread_cond_broadcast(&dl->cv);
        pthread_mutex_unlock(&dl->mu);
        pthread_join(dl->thread, NULL);
    }
    if (dl->sync_ready) {
        pthread_cond_destroy(&dl->cv);
        pthread_mutex_destroy(&dl->mu);
    }
    if (dl->slot_mem) {
        if (dl->slot_mem_pinned) dl->ctx->ops->host_free_pinned(dl->ctx->be, dl->slot_mem);
        else free(dl->slot_mem);
    }
    for (size_t f = 0; f < dl->n_files; f++) free(dl->file_tokens[f]);
    free(dl->file_tokens);
    free(dl->file_len);
    free(dl->file_win);
    free(dl->perm);
}

void gptx_dataloader_destroy(gptx_dataloader *dl) {
    gptx_handle_destroy(dl, GPTX_KIND_DATALOADER, "dl", __func__);
}

/* A loader with options read and validated, room for n_files, no data yet. */
static int begin_create(const char *fn, gptx_dataloader **out, gptx_context *ctx,
                        const gptx_dataloader_options *in, size_t n_files) {
    if (ctx) GPTX_TRY(gptx_handle_check(ctx, GPTX_KIND_CONTEXT, "ctx", fn));
    gptx_dataloader_options o = loader_defaults;
    if (in) GPTX_TRY(gptx_struct_read(&o, in, &gptx_desc_dataloader_options, fn, "opts"));
    GPTX_TRY(validate(fn, &o));
    gptx_dataloader *dl = calloc(1, sizeof *dl);
    if (!dl) return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_handle_init(&dl->h, GPTX_KIND_DATALOADER, ctx ? &ctx->h : NULL, NULL, release_loader);
    dl->ctx = ctx;
    dl->o = o;
    dl->handed = -1;
    dl->perm_epoch = -1;
    dl->seed = o.seed;
    dl->file_tokens = calloc(n_files, sizeof *dl->file_tokens);
    dl->file_len = calloc(n_files, sizeof *dl->file_len);
    dl->file_win = calloc(n_files + 1, sizeof *dl->file_win);
    if (!dl->file_tokens || !dl->file_len || !dl->file_win) {
        gptx_dataloader_destroy(dl);
        return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    /* n_files counts only loaded files, so destroy frees exactly those */
    *out = dl;
    return GPTX_OK;
}

static uint64_t fnv_mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

/* Every id in [0, vocab) (vocab 0: any id >= 0); `what` names the source. */
static int check_ids(const char *fn, gptx_dataloader *dl, const int32_t *t, size_t n,
                     const char *what, int quote) {
    int32_t vocab = dl->o.vocab_size;
    uint64_t h = fnv_mix(dl->data_hash, n);
    for (size_t i = 0; i < n; i++) {
        if (t[i] < 0 || (vocab > 0 && t[i] >= vocab)) {
            const char *q = quote ? "'" : "";
            if (vocab > 0)
                return CREATE_FAIL(GPTX_ERR_TOKEN_RANGE,
                                   "%s%s%s: token at offset %zu is %d; "
                                   "must be in [0, vocab_size %d)",
                                   q, what, q, i, (int)t[i], (int)vocab);
            return CREATE_FAIL(GPTX_ERR_TOKEN_RANGE,
                               "%s%s%s: token at offset %zu is %d; must be >= 0", q, what, q, i,
                               (int)t[i]);
        }
        h = fnv_mix(h, (uint32_t)t[i]);
    }
    dl->data_hash = h;
    return GPTX_OK;
}

/* Counts windows and shares, allocates buffers, starts the thread. */
static int finish_create(const char *fn, gptx_dataloader *dl) {
    const gptx_dataloader_options *o = &dl->o;
    const int64_t T1 = (int64_t)o->seq_len + 1;
    dl->file_win[0] = 0;
    for (size_t f = 0; f < dl->n_files; f++) {
        int64_t n = (int64_t)dl->file_len[f];
        int64_t w = n >= T1 ? (n - T1) / o->stride + 1 : 0;
        dl->total_tokens += n;
        dl->file_win[f + 1] = dl->file_win[f] + w;
    }
    dl->total_windows = dl->file_win[dl->n_files];
    const int64_t W = o->world_size, B = o->batch_size;
    if (dl->total_windows == 0)
        return CREATE_FAIL(GPTX_ERR_SHAPE,
                           "no window of seq_len + 1 = %lld tokens fits in the data (%lld "
                           "tokens in %zu file(s); each window must lie inside one file)",
                           (long long)T1, (long long)dl->total_tokens, dl->n_files);
    dl->rank_windows = dl->total_windows / W;
    dl->leftover_windows = dl->total_windows - dl->rank_windows * W;
    if (o->drop_last && dl->rank_windows < B)
        return CREATE_FAIL(GPTX_ERR_SHAPE,
                           "%lld windows give each of world_size %d rank(s) %lld; with "
                           "drop_last = 1 a rank needs batch_size %d (total_windows must be "
                           ">= world_size * batch_size = %lld)",
                           (long long)dl->total_windows, o->world_size, (long long)dl->rank_windows,
                           o->batch_size, (long long)(W * B));
    if (dl->rank_windows == 0)
        return CREATE_FAIL(GPTX_ERR_SHAPE,
                           "%lld windows are fewer than world_size %d; some rank would get none",
                           (long long)dl->total_windows, o->world_size);
    if (o->drop_last) {
        dl->batches_per_epoch = dl->rank_windows / B;
        dl->last_batch_rows = B;
    } else {
        dl->batches_per_epoch = (dl->rank_windows + B - 1) / B;
        dl->last_batch_rows = dl->rank_windows - (dl->batches_per_epoch - 1) * B;
    }

    if (o->shuffle) {
        if ((uint64_t)dl->total_windows > SIZE_MAX / sizeof *dl->perm ||
            !(dl->perm = malloc((size_t)dl->total_windows * sizeof *dl->perm)))
            return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "cannot allocate the order of %lld windows",
                               (long long)dl->total_windows);
    }

    size_t bt = (size_t)o->batch_size * (size_t)o->seq_len;
    size_t bytes = 4 * bt * sizeof(int32_t); /* 2 slots x (inputs, targets) */
    gptx_context *ctx = dl->ctx;
    if (ctx && ctx->ops->host_alloc_pinned && ctx->ops->host_free_pinned) {
        gptx_guard g __attribute__((cleanup(gptx_guard_leave))) = {0}; /* the context's lock */
        GPTX_TRY(gptx_guard_enter(&g, ctx, GPTX_KIND_CONTEXT, 0, "ctx", fn));
        GPTX_TRY(ctx->ops->host_alloc_pinned(ctx->be, bytes, &dl->slot_mem));
        dl->slot_mem_pinned = 1;
    } else {
        dl->slot_mem = malloc(bytes);
        if (!dl->slot_mem) return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    int32_t *m = dl->slot_mem;
    for (int s = 0; s < 2; s++) {
        dl->slots[s].inputs = m + (size_t)(2 * s) * bt;
        dl->slots[s].targets = m + (size_t)(2 * s + 1) * bt;
        dl->slots[s].epoch = dl->slots[s].batch = -1;
    }

    atomic_init(&dl->cancel, 0);
    if (o->prefetch) {
        pthread_mutex_init(&dl->mu, NULL);
        pthread_cond_init(&dl->cv, NULL);
        dl->sync_ready = 1;
        int rc = pthread_create(&dl->thread, NULL, prefetch_main, dl);
        if (rc != 0)
            return CREATE_FAIL(GPTX_ERR_NO_MEMORY, "cannot start the prefetch thread: %s",
                               strerror(rc));
        dl->thread_started = 1;
        post_job(dl);
    }
    return GPTX_OK;
}

/* Reads shard i of a create call's sources; *label names it in messages. */
typedef int (*shard_reader)(const void *sources, int i, int32_t **t, size_t *n, const char **label);

/* A loader over n shards read one at a time (only one file open at once). */
static int create_from_shards(const char *fn, gptx_dataloader **out, gptx_context *ctx,
                              const void *sources, int n, shard_reader read,
                              const gptx_dataloader_options *opts) {
    gptx_dataloader *dl = NULL;
    GPTX_TRY(begin_create(fn, &dl, ctx, opts, (size_t)n));
    dl->data_hash = fnv_mix(0xcbf29ce484222325ull, (uint64_t)n);
    int rc = GPTX_OK;
    for (int i = 0; i < n && rc == GPTX_OK; i++) {
        int32_t *t = NULL;
        size_t len = 0;
        const char *label = NULL;
        rc = read(sources, i, &t, &len, &label);
        if (rc != GPTX_OK) break;
        dl->file_tokens[i] = t;
        dl->file_len[i] = len;
        dl->n_files = (size_t)i + 1;
        rc = check_ids(fn, dl, t, len, label, 1);
    }
    if (rc == GPTX_OK) rc = finish_create(fn, dl);
    if (rc != GPTX_OK) {
        gptx_dataloader_destroy(dl);
        return rc;
    }
    *out = dl;
    return GPTX_OK;
}

static int read_path(const void *sources, int i, int32_t **t, size_t *n, const char **label) {
    const char *const *paths = sources;
    *label = paths[i];
    return gptx_shard_read(paths[i], t, n);
}

static int read_src(const void *sources, int i, int32_t **t, size_t *n, const char **label) {
    const gptx_src *srcs = sources;
    *label = srcs[i].label;
    return gptx_shard_read_src(&srcs[i], t, n);
}

int gptx_dataloader_create_from_files(gptx_dataloader **out, gptx_context *ctx,
                                      const char *const *paths, int n_paths,
                                      const gptx_dataloader_options *opts) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_NULL(paths);
    if (n_paths <= 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "n_paths is %d; at least one file is needed", n_paths);
    for (int i = 0; i < n_paths; i++)
        if (!paths[i]) return GPTX_FAIL(GPTX_ERR_NULL, "paths[%d] is NULL", i);
    return create_from_shards(__func__, out, ctx, paths, n_paths, read_path, opts);
}

int gptx_dataloader_create_from_srcs(gptx_dataloader **out, gptx_context *ctx,
                                     const gptx_src *srcs, int n_srcs,
                                     const gptx_dataloader_options *opts) {
    *out = NULL;
    if (n_srcs <= 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "n_srcs is %d; at least one shard is needed", n_srcs);
    return create_from_shards("gptx_dataloader_create_from_files", out, ctx, srcs, n_srcs,
                              read_src, opts);
}

int gptx_dataloader_create_from_tokens(gptx_dataloader **out, gptx_context *ctx,
                                       const int32_t *tokens, size_t n,
                                       const gptx_dataloader_options *opts) {
    GPTX_CHECK_NULL(out);
    *out = NULL;
    GPTX_CHECK_NULL(tokens);
    gptx_dataloader *dl = NULL;
    GPTX_TRY(begin_create(__func__, &dl, ctx, opts, 1));
    dl->data_hash = fnv_mix(0xcbf29ce484222325ull, 1);
    int rc = check_ids(__func__, dl, tokens, n, "tokens", 0);
    if (rc == GPTX_OK) {
        dl->file_tokens[0] = malloc(n ? n * sizeof *tokens : 1);
        if (!dl->file_tokens[0]) {
            rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "cannot copy %zu tokens", n);
        } else {
            memcpy(dl->file_tokens[0], tokens, n * sizeof *tokens);
            dl->file_len[0] = n;
            dl->n_files = 1;
        }
    }
    if (rc == GPTX_OK) rc = finish_create(__func__, dl);
    if (rc != GPTX_OK) {
        gptx_dataloader_destroy(dl);
        return rc;
    }
    *out = dl;
    return GPTX_OK;
}

/* ---- queries -------------------------------------------------------------- */

int gptx_dataloader_info_init_sized(gptx_dataloader_info *info, size_t size) {
    static const gptx_dataloader_info zero = {.struct_size = GPTX_DATALOADER_INFO_SIZE};
    return gptx_struct_init(info, size, &zero, &gptx_desc_dataloader_info, __func__, "info");
}

int gptx_dataloader_info_get(const gptx_dataloader *dl, gptx_dataloader_info *info) {
    GPTX_CHECK_HANDLE(dl, GPTX_KIND_DATALOADER);
    GPTX_CHECK_NULL(info);
    gptx_dataloader_info full;
    gptx_dataloader_info_init(&full);
    full.total_tokens = dl->total_tokens;
    full.total_windows = dl->total_windows;
    full.rank_windows = dl->rank_windows;
    full.leftover_windows = dl->leftover_windows;
    full.batches_per_epoch = dl->batches_per_epoch;
    full.last_batch_rows = dl->last_batch_rows;
    return gptx_struct_write(info, &full, &gptx_desc_dataloader_info, __func__, "info");
}

int gptx_dataloader_get_options(const gptx_dataloader *dl, gptx_dataloader_options *opts) {
    GPTX_CHECK_HANDLE(dl, GPTX_KIND_DATALOADER);
    GPTX_CHECK_NULL(opts);
    return gptx_struct_write(opts, &dl->o, &gptx_desc_dataloader_options, __func__, "opts");
}

void gptx_dataloader_geometry_get(const gptx_dataloader *dl, gptx_dataloader_geometry *g) {
    memset(g, 0, sizeof *g);
    g->batch_size = dl->o.batch_size;
    g->seq_len = dl->o.seq_len;
    g->stride = dl->o.stride;
    g->shuffle = dl->o.shuffle;
    g->drop_last = dl->o.drop_last;
    g->rank = dl->o.rank;
    g->world_size = dl->o.world_size;
    g->n_files = (int64_t)dl->n_files;
    g->total_tokens = dl->total_tokens;
    g->total_windows = dl->total_windows;
    g->batches_per_epoch = dl->batches_per_epoch;
    g->data_hash = dl->data_hash;
}

/* ---- iteration ------------------------------------------------------------ */

int gptx_dataloader_next(gptx_dataloader *dl, const int32_t **inputs, const int32_t **targets,
                         int *rows, int64_t *epoch) {
    GPTX_ENTER(dl, GPTX_KIND_DATALOADER);
    GPTX_CHECK_NULL(inputs);
    GPTX_CHECK_NULL(targets);
    if (dl->epoch == INT64_MAX)
        return GPTX_FAIL(GPTX_ERR_STATE, "the epoch counter is exhausted");
    batch_slot *s;
    if (dl->o.prefetch) {
        pthread_mutex_lock(&dl->mu);
        while (!dl->job_done) pthread_cond_wait(&dl->cv, &dl->mu);
        batch_job done = dl->done;
        dl->job_done = 0;
        pthread_mutex_unlock(&dl->mu);
        s = &dl->slots[done.slot];
        dl->handed = done.slot;
    } else {
        s = &dl->slots[0];
        fill_batch(dl, s, dl->epoch, dl->batch, dl->seed); /* never cancelled here */
        dl->handed = 0;
    }
    *inputs = s->inputs;
    *targets = s->targets;
    if (rows) *rows = s->rows;
    if (epoch) *epoch = s->epoch;
    /* advance; after the last batch the next epoch begins */
    if (++dl->batch == dl->batches_per_epoch) {
        dl->batch = 0;
        dl->epoch++;
    }
    if (dl->o.prefetch) post_job(dl);
    return GPTX_OK;
}

int gptx_dataloader_get_state(const gptx_dataloader *dl, gptx_dataloader_state *state) {
    GPTX_ENTER(dl, GPTX_KIND_DATALOADER);
    GPTX_CHECK_NULL(state);
    gptx_dataloader_state full;
    gptx_dataloader_state_init(&full);
    full.epoch = dl->epoch;
    full.batch = dl->batch;
    full.seed = dl->seed;
    return gptx_struct_write(state, &full, &gptx_desc_dataloader_state, __func__, "state");
}

int gptx_dataloader_set_state(gptx_dataloader *dl, const gptx_dataloader_state *state_in) {
    GPTX_ENTER(dl, GPTX_KIND_DATALOADER);
    GPTX_CHECK_NULL(state_in);
    gptx_dataloader_state full;
    gptx_dataloader_state_init(&full);
    GPTX_TRY(gptx_struct_read(&full, state_in, &gptx_desc_dataloader_state, __func__, "state"));
    const gptx_dataloader_state *state = &full;
    if (state->epoch < 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "state.epoch is %lld; must be >= 0",
                         (long long)state->epoch);
    if (state->batch < 0 || state->batch >= dl->batches_per_epoch)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "state.batch is %lld; must be in [0, batches_per_epoch %lld) (was the "
                         "state saved by a loader with other data or options?)",
                         (long long)state->batch, (long long)dl->batches_per_epoch);
    if (dl->o.prefetch) cancel_jobs(dl);
    dl->epoch = state->epoch;
    dl->batch = state->batch;
    dl->seed = state->seed;
    if (dl->o.prefetch) post_job(dl);
    return GPTX_OK;
}
