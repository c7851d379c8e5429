#define _POSIX_C_SOURCE 200809L /* mkdtemp, nanosleep */
/* Data loader: window contents, stride, file boundaries, per-epoch shuffling,
 * disjoint rank shares, drop_last, exact resume (shuffle, prefetch, epoch
 * boundaries), files vs memory, pinned buffers, and every bad option. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "context.h"
#include "dataloader.h"
#include "test_util.h"

static char dir[256];

static gptx_dataloader_state loader_state(int64_t epoch, int64_t batch, uint64_t seed) {
    gptx_dataloader_state s;
    gptx_dataloader_state_init(&s);
    s.epoch = epoch;
    s.batch = batch;
    s.seed = seed;
    return s;
}

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

static gptx_dataloader_options opts_bt(int B, int T) {
    gptx_dataloader_options o;
    gptx_dataloader_options_init(&o);
    o.batch_size = B;
    o.seq_len = T;
    return o;
}

/* ids 0..n-1: a window is identified by its first input id. */
static int32_t *iota(size_t n) {
    int32_t *t = malloc(n * sizeof *t);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)i;
    return t;
}

static gptx_dataloader_info info_of(const gptx_dataloader *dl) {
    gptx_dataloader_info in;
    gptx_dataloader_info_init(&in);
    CHECK_OK(gptx_dataloader_info_get(dl, &in));
    return in;
}

/* Reads one epoch's batches; appends each row's first input id to starts.
 * Also checks inputs are consecutive ids and targets are inputs shifted by
 * one (valid for iota data only). Returns the number of rows read. */
static int64_t read_epoch_starts(gptx_dataloader *dl, int T, int64_t *starts, int iota_data,
                                 int64_t want_epoch) {
    gptx_dataloader_info in = info_of(dl);
    int64_t k = 0;
    for (int64_t b = 0; b < in.batches_per_epoch; b++) {
        const int32_t *x = NULL, *y = NULL;
        int rows = -1;
        int64_t ep = -1;
        CHECK_OK(gptx_dataloader_next(dl, &x, &y, &rows, &ep));
        CHECK(ep == want_epoch);
        if (!x || !y || rows <= 0) return k;
        for (int r = 0; r < rows; r++) {
            if (iota_data) {
                int ok = 1;
                for (int t = 0; t < T; t++) {
                    ok &= x[r * T + t] == x[r * T] + t;
                    ok &= y[r * T + t] == x[r * T + t] + 1;
                }
                CHECK(ok);
            }
            starts[k++] = x[r * T];
        }
    }
    return k;
}

static void test_windows_and_stride(void) {
    const int T = 8;
    int32_t *ids = iota(100);
    /* non-overlapping default: starts 0, 8, ..., windows of 9 tokens:
     * floor((100 - 9) / 8) + 1 = 12 */
    gptx_dataloader_options o = opts_bt(1, T);
    o.drop_last = 0;
    gptx_dataloader *dl = NULL;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, 100, &o));
    gptx_dataloader_info in = info_of(dl);
    CHECK(in.total_tokens == 100 && in.total_windows == 12 && in.rank_windows == 12);
    CHECK(in.leftover_windows == 0 && in.batches_per_epoch == 12 && in.last_batch_rows == 1);
    int64_t starts[64];
    CHECK(read_epoch_starts(dl, T, starts, 1, 0) == 12);
    for (int i = 0; i < 12; i++) CHECK(starts[i] == 8 * i);
    gptx_dataloader_destroy(dl);

    /* explicit overlapping stride 3: floor((100 - 9) / 3) + 1 = 31 windows */
    o.stride = 3;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, 100, &o));
    in = info_of(dl);
    CHECK(in.total_windows == 31);
    CHECK(read_epoch_starts(dl, T, starts, 1, 0) == 31);
    for (int i = 0; i < 31; i++) CHECK(starts[i] == 3 * i);
    CHECK(starts[30] + T + 1 <= 100);
    gptx_dataloader_destroy(dl);

    /* exactly T+1 tokens: one window */
    o.stride = 0;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, T + 1, &o));
    CHECK(info_of(dl).total_windows == 1);
    gptx_dataloader_destroy(dl);
    free(ids);
}

static void write_shard(const char *name, const int32_t *t, size_t n, char *path_out) {
    snprintf(path_out, 512, "%s/%s", dir, name);
    CHECK_OK(gptx_shard_write(path_out, t, n));
}

/* Files of 50, 7 and 33 tokens with T = 4: windows stay inside a file. */
static void test_file_boundaries(void) {
    const int T = 4;
    int32_t a[50], b[7], c[33];
    for (int i = 0; i < 50; i++) a[i] = 1000 + i;
    for (int i = 0; i < 7; i++) b[i] = 2000 + i;
    for (int i = 0; i < 33; i++) c[i] = 3000 + i;
    char pa[512], pb[512], pc[512];
    write_shard("fa.bin", a, 50, pa);
    write_shard("fb.bin", b, 7, pb);
    write_shard("fc.bin", c, 33, pc);
    const char *paths[3] = {pa, pb, pc};
    gptx_dataloader_options o = opts_bt(1, T);
    o.drop_last = 0;
    gptx_dataloader *dl = NULL;
    CHECK_OK(gptx_dataloader_create_from_files(&dl, NULL, paths, 3, &o));
    gptx_dataloader_info in = info_of(dl);
    /* 50: (50-5)/4+1 = 12; 7: (7-5)/4+1 = 1; 33: (33-5)/4+1 = 8 */
    CHECK(in.total_tokens == 90 && in.total_windows == 21);
    int64_t starts[32];
    CHECK(read_epoch_starts(dl, T, starts, 1, 0) == 21);
    for (int i = 0; i < 12; i++) CHECK(starts[i] == 1000 + 4 * i);
    CHECK(starts[12] == 2000);
    for (int i = 0; i < 8; i++) CHECK(starts[13 + i] == 3000 + 4 * i);
    gptx_dataloader_destroy(dl);

    /* a file shorter than T+1 contributes no window (T = 7: b has 7 tokens) */
    o = opts_bt(1, 7);
    o.drop_last = 0;
    CHECK_OK(gptx_dataloader_create_from_files(&dl, NULL, paths, 3, &o));
    in = info_of(dl);
    CHECK(in.total_windows == (50 - 8) / 7 + 1 + (33 - 8) / 7 + 1);
    gptx_dataloader_destroy(dl);
    /* ... and data where no window fits at all is an error */
    o = opts_bt(1, 60);
    CHECK_STATUS(gptx_dataloader_create_from_files(&dl, NULL, paths, 3, &o), GPTX_ERR_SHAPE);
    check_message_mentions("no window");
    CHECK(dl == NULL);
}

static int is_permutation_of_stride(const int64_t *starts, int64_t n, int stride) {
    char *seen = calloc((size_t)n, 1);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t w = starts[i] / stride;
        if (starts[i] % stride != 0 || w < 0 || w >= n || seen[w]) ok = 0;
        else seen[w] = 1;
    }
    free(seen);
    return ok;
}

static void test_shuffle(void) {
    const int T = 4, N = 4 * 200 + 1; /* 200 windows */
    int32_t *ids = iota(N);
    gptx_dataloader_options o = opts_bt(5, T);
    o.shuffle = 1;
    o.seed = 1234;
    gptx_dataloader *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(gptx_dataloader_create_from_tokens(&a, NULL, ids, N, &o));
    CHECK_OK(gptx_dataloader_create_from_tokens(&b, NULL, ids, N, &o));
    o.seed = 1235;
    CHECK_OK(gptx_dataloader_create_from_tokens(&c, NULL, ids, N, &o));
    CHECK(info_of(a).total_windows == 200 && info_of(a).batches_per_epoch == 40);
    int64_t e0[200], e1[200], b0[200], b1[200], c0[200];
    CHECK(read_epoch_starts(a, T, e0, 1, 0) == 200);
    CHECK(read_epoch_starts(a, T, e1, 1, 1) == 200);
    CHECK(read_epoch_starts(b, T, b0, 1, 0) == 200);
    CHECK(read_epoch_starts(b, T, b1, 1, 1) == 200);
    CHECK(read_epoch_starts(c, T, c0, 1, 0) == 200);
    CHECK(is_permutation_of_stride(e0, 200, T));
    CHECK(is_permutation_of_stride(e1, 200, T));
    CHECK(is_permutation_of_stride(c0, 200, T));
    CHECK(memcmp(e0, e1, sizeof e0) != 0); /* reshuffled per epoch */
    CHECK(memcmp(e0, b0, sizeof e0) == 0); /* reproducible */
    CHECK(memcmp(e1, b1, sizeof e1) == 0);
    CHECK(memcmp(e0, c0, sizeof e0) != 0); /* depends on the seed */
    int moved = 0;
    for (int i = 0; i < 200; i++) moved += e0[i] != 4 * i;
    CHECK(moved > 150);
    /* the order is a fixed function of (seed, epoch): pinned so a change
     * of the algorithm (which breaks resuming old checkpoints) is noticed */
    static const int64_t golden[8] = {340, 272, 300, 476, 256, 396, 228, 224};
    int same = 1;
    for (int i = 0; i < 8; i++) same &= e0[i] == golden[i];
    if (!same) {
        fprintf(stderr, "epoch 0 order changed:");
        for (int i = 0; i < 8; i++) fprintf(stderr, " %lld", (long long)e0[i]);
        fprintf(stderr, "\n");
    }
    CHECK(same);
    gptx_dataloader_destroy(a);
    gptx_dataloader_destroy(b);
    gptx_dataloader_destroy(c);

    /* shuffle off: identity order in every epoch */
    o.shuffle = 0;
    CHECK_OK(gptx_dataloader_create_from_tokens(&a, NULL, ids, N, &o));
    CHECK(read_epoch_starts(a, T, e0, 1, 0) == 200);
    CHECK(read_epoch_starts(a, T, e1, 1, 1) == 200);
    for (int i = 0; i < 200; i++) CHECK(e0[i] == 4 * i && e1[i] == 4 * i);
    gptx_dataloader_destroy(a);
    free(ids);
}

/* World sizes 1..4, shuffle on: rank shares are disjoint, equal in size,
 * cover total - leftover windows, and every rank has the same batch count. */
static void test_ranks(void) {
    const int T = 2, nwin = 103;
    const size_t N = (size_t)T * nwin + 1;
    int32_t *ids = iota(N);
    for (int drop = 0; drop <= 1; drop++) {
        for (int W = 1; W <= 4; W++) {
            char *seen = calloc(nwin, 1);
            int64_t visited = 0, dup = 0, bpe0 = -1, rw0 = -1;
            for (int r = 0; r < W; r++) {
                gptx_dataloader_options o = opts_bt(3, T);
                o.shuffle = 1;
                o.seed = 99;
                o.world_size = W;
                o.rank = r;
                o.drop_last = drop;
                o.prefetch = r & 1;
                gptx_dataloader *dl = NULL;
                CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
                if (!dl) continue;
                gptx_dataloader_info in = info_of(dl);
                CHECK(in.total_windows == nwin);
                CHECK(in.rank_windows == nwin / W);
                CHECK(in.leftover_windows == nwin - W * (nwin / W));
                int64_t want_bpe = drop ? in.rank_windows / 3 : (in.rank_windows + 2) / 3;
                CHECK(in.batches_per_epoch == want_bpe);
                if (r == 0) {
                    bpe0 = in.batches_per_epoch;
                    rw0 = in.rank_windows;
                }
                CHECK(in.batches_per_epoch == bpe0 && in.rank_windows == rw0);
                int64_t starts[200];
                int64_t k = read_epoch_starts(dl, T, starts, 1, 0);
                CHECK(k == (drop ? 3 * in.batches_per_epoch : in.rank_windows));
                for (int64_t i = 0; i < k; i++) {
                    int64_t w = starts[i] / T;
                    if (seen[w]) dup++;
                    seen[w] = 1;
                    visited++;
                }
                gptx_dataloader_destroy(dl);
            }
            CHECK(dup == 0);
            int64_t share = nwin / W;
            CHECK(visited == (drop ? (int64_t)W * (share / 3) * 3 : (int64_t)W * share));
            if (!drop) {
                /* with shuffle the leftover windows are random ones; their
                 * number is exactly total - W * share */
                int64_t unseen = 0;
                for (int i = 0; i < nwin; i++) unseen += !seen[i];
                CHECK(unseen == nwin - W * share);
            }
            free(seen);
        }
    }
    free(ids);
}

static void test_drop_last(void) {
    const int T = 3;
    const size_t N = 3 * 10 + 1; /* 10 windows */
    int32_t *ids = iota(N);
    gptx_dataloader_options o = opts_bt(4, T);
    gptx_dataloader *dl = NULL;
    const int32_t *x, *y;
    int rows;
    int64_t ep;
    /* drop_last = 1: 2 full batches, windows 8 and 9 are never returned */
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
    gptx_dataloader_info in = info_of(dl);
    CHECK(in.batches_per_epoch == 2 && in.last_batch_rows == 4);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(gptx_dataloader_next(dl, &x, &y, &rows, &ep));
        CHECK(rows == 4);
        CHECK(ep == (i == 2));
        CHECK(x[0] == (i == 2 ? 0 : 12 * i));
    }
    gptx_dataloader_destroy(dl);
    /* drop_last = 0: a third batch of 2 rows, then epoch 1 */
    o.drop_last = 0;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
    in = info_of(dl);
    CHECK(in.batches_per_epoch == 3 && in.last_batch_rows == 2);
    int want_rows[4] = {4, 4, 2, 4};
    int want_first[4] = {0, 12, 24, 0};
    for (int i = 0; i < 4; i++) {
        CHECK_OK(gptx_dataloader_next(dl, &x, &y, &rows, &ep));
        CHECK(rows == want_rows[i] && x[0] == want_first[i] && ep == (i == 3));
    }
    CHECK(x[3] == 3 && y[3] == 4 && x[2] == 2 && y[2] == 3);
    gptx_dataloader_destroy(dl);
    /* drop_last = 1 with fewer windows than world_size * B: clear error */
    o.drop_last = 1;
    o.world_size = 3;
    o.rank = 2;
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o), GPTX_ERR_SHAPE);
    check_message_mentions("world_size * batch_size = 12");
    /* drop_last = 0 is fine then (3 windows per rank, one partial batch) */
    o.drop_last = 0;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
    in = info_of(dl);
    CHECK(in.rank_windows == 3 && in.batches_per_epoch == 1 && in.last_batch_rows == 3);
    CHECK(in.leftover_windows == 1);
    gptx_dataloader_destroy(dl);
    /* fewer windows than ranks: an error even without drop_last */
    o.world_size = 11;
    o.rank = 0;
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o), GPTX_ERR_SHAPE);
    check_message_mentions("fewer than world_size 11");
    free(ids);
}

/* A recorded batch: rows, epoch and contents. */
typedef struct rec {
    int rows;
    int64_t epoch;
    int32_t x[4 * 5], y[4 * 5];
} rec;

static void record(gptx_dataloader *dl, rec *r, int T) {
    const int32_t *x = NULL, *y = NULL;
    memset(r, 0, sizeof *r);
    CHECK_OK(gptx_dataloader_next(dl, &x, &y, &r->rows, &r->epoch));
    if (x && y && r->rows > 0) {
        memcpy(r->x, x, (size_t)r->rows * T * sizeof *x);
        memcpy(r->y, y, (size_t)r->rows * T * sizeof *y);
    }
}

static int same_rec(const rec *a, const rec *b) {
    return a->rows == b->rows && a->epoch == b->epoch && memcmp(a->x, b->x, sizeof a->x) == 0 &&
           memcmp(a->y, b->y, sizeof a->y) == 0;
}

/* get_state at every position of an uninterrupted run (3+ epochs, shuffle,
 * drop_last = 0, with and without prefetch, 2 ranks); set_state into a fresh
 * loader and into the same one must replay the same batches. */
static void test_resume(void) {
    const int T = 5, B = 4;
    const size_t N = 5 * 23 + 3; /* 23 windows -> 11 per rank, 3 batches (4, 4, 3) */
    int32_t *ids = malloc(N * sizeof *ids);
    fill_tokens(ids, N, 50, 3);
    enum { STEPS = 11 };
    for (int mode = 0; mode < 4; mode++) {
        gptx_dataloader_options o = opts_bt(B, T);
        o.shuffle = 1;
        o.seed = 77;
        o.drop_last = 0;
        o.world_size = 2;
        o.rank = 1;
        o.vocab_size = 50;
        o.prefetch = mode & 1;
        int restore_prefetch = (mode >> 1) & 1;
        gptx_dataloader *dl = NULL;
        CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
        if (!dl) continue;
        CHECK(info_of(dl).batches_per_epoch == 3);
        rec run[STEPS];
        gptx_dataloader_state st[STEPS];
        for (int i = 0; i < STEPS; i++) {
            gptx_dataloader_state_init(&st[i]);
            CHECK_OK(gptx_dataloader_get_state(dl, &st[i]));
            record(dl, &run[i], T);
        }
        CHECK(run[2].rows == 3 && run[3].epoch == 1 && run[10].epoch == 3);
        CHECK(st[3].epoch == 1 && st[3].batch == 0 && st[4].batch == 1 && st[0].seed == 77);
        CHECK(!same_rec(&run[0], &run[3])); /* epoch 1 is reshuffled */
        /* a fresh loader (prefetch or not) resumed at each position */
        o.prefetch = restore_prefetch;
        o.seed = 5; /* the state's seed wins */
        for (int cut = 0; cut < STEPS; cut++) {
            gptx_dataloader *r = NULL;
            CHECK_OK(gptx_dataloader_create_from_tokens(&r, NULL, ids, N, &o));
            if (!r) continue;
            rec first; /* read one batch under seed 5 first: its order must not linger */
            record(r, &first, T);
            CHECK_OK(gptx_dataloader_set_state(r, &st[cut]));
            gptx_dataloader_state now;
            gptx_dataloader_state_init(&now);
            CHECK_OK(gptx_dataloader_get_state(r, &now));
            CHECK(now.epoch == st[cut].epoch && now.batch == st[cut].batch && now.seed == 77);
            for (int i = cut; i < STEPS; i++) {
                rec got;
                record(r, &got, T);
                CHECK(same_rec(&got, &run[i]));
            }
            gptx_dataloader_destroy(r);
        }
        /* the same loader rewound (a prefetched batch is in flight) */
        for (int cut = STEPS - 1; cut >= 0; cut -= 3) {
            CHECK_OK(gptx_dataloader_set_state(dl, &st[cut]));
            rec got;
            record(dl, &got, T);
            CHECK(same_rec(&got, &run[cut]));
        }
        /* jumping straight to a later epoch needs no replay */
        gptx_dataloader_state far = loader_state(3, 1, 77);
        CHECK_OK(gptx_dataloader_set_state(dl, &far));
        rec got;
        record(dl, &got, T);
        CHECK(same_rec(&got, &run[10]));
        gptx_dataloader_destroy(dl);
    }
    free(ids);
}

/* The batch handed out stays intact while the thread prepares the next one:
 * after a pause it still equals the batch of a loader without prefetch. */
static void test_prefetch_buffers(void) {
    const int T = 16, B = 8;
    const size_t N = 16 * 400 + 1;
    int32_t *ids = iota(N);
    gptx_dataloader_options o = opts_bt(B, T);
    o.shuffle = 1;
    o.prefetch = 1;
    gptx_dataloader *dl = NULL, *ref = NULL;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
    o.prefetch = 0;
    CHECK_OK(gptx_dataloader_create_from_tokens(&ref, NULL, ids, N, &o));
    o.prefetch = 1;
    int bad = 0;
    for (int i = 0; i < 120 && dl && ref; i++) { /* 2+ epochs of 50 batches */
        const int32_t *x, *y, *rx, *ry;
        int rows, rrows;
        CHECK_OK(gptx_dataloader_next(dl, &x, &y, &rows, NULL));
        CHECK_OK(gptx_dataloader_next(ref, &rx, &ry, &rrows, NULL));
        if (i % 4 == 0) {
            struct timespec ts = {0, 1000000}; /* let the thread finish the next batch */
            nanosleep(&ts, NULL);
        }
        bad += rows != rrows || memcmp(x, rx, (size_t)rows * T * sizeof *x) != 0 ||
               memcmp(y, ry, (size_t)rows * T * sizeof *y) != 0;
    }
    CHECK(bad == 0);
    gptx_dataloader_destroy(dl);
    gptx_dataloader_destroy(ref);
    /* destroy right after create (a job in flight) and after set_state */
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
    gptx_dataloader_destroy(dl);
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
    gptx_dataloader_state s = loader_state(7, 3, 1);
    CHECK_OK(gptx_dataloader_set_state(dl, &s));
    gptx_dataloader_destroy(dl);
    free(ids);
}

/* set_state while the thread is still building a large epoch order (about
 * 30 ms for 1.5M windows; pauses of 0.25..16 ms land inside it): the stale
 * job is dropped and the batch after set_state is the right one. */
static void test_prefetch_cancel(void) {
    const size_t N = 1500001; /* T = 1: 1.5M windows */
    int32_t *ids = iota(N);
    gptx_dataloader_options o = opts_bt(2, 1);
    o.shuffle = 1;
    o.seed = 8;
    gptx_dataloader *ref = NULL, *dl = NULL;
    CHECK_OK(gptx_dataloader_create_from_tokens(&ref, NULL, ids, N, &o));
    o.prefetch = 1;
    const int32_t *x, *y, *rx, *ry;
    int64_t ep = -1;
    int bad = 0;
    for (int i = 0; i < 14 && ref; i++) {
        CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, ids, N, &o));
        if (!dl) break;
        struct timespec ts = {0, 250000L << (i / 2)};
        nanosleep(&ts, NULL);
        /* epoch 0 again (even i): a half-built order of epoch 0 must not be reused */
        gptx_dataloader_state s = loader_state(i & 1, 5, 8);
        CHECK_OK(gptx_dataloader_set_state(dl, &s));
        CHECK_OK(gptx_dataloader_set_state(ref, &s));
        CHECK_OK(gptx_dataloader_next(dl, &x, &y, NULL, &ep));
        CHECK_OK(gptx_dataloader_next(ref, &rx, &ry, NULL, NULL));
        bad += ep != (i & 1) || memcmp(x, rx, 2 * sizeof *x) != 0 ||
               memcmp(y, ry, 2 * sizeof *y) != 0;
        gptx_dataloader_destroy(dl);
    }
    CHECK(bad == 0);
    gptx_dataloader_destroy(ref);
    free(ids);
}

/* One shard read through files, and the same ids from memory. */
static void test_files_vs_tokens(void) {
    const size_t N = 3000;
    int32_t *ids = malloc(N * sizeof *ids);
    fill_tokens(ids, N, 50257, 11);
    char path[512];
    write_shard("same.bin", ids, N, path);
    const char *paths[1] = {path};
    gptx_dataloader_options o = opts_bt(3, 7);
    o.shuffle = 1;
    o.seed = 4;
    o.stride = 5;
    o.vocab_size = 50257;
    o.prefetch = 1;
    gptx_dataloader *f = NULL, *m = NULL;
    CHECK_OK(gptx_dataloader_create_from_files(&f, NULL, paths, 1, &o));
    o.prefetch = 0;
    CHECK_OK(gptx_dataloader_create_from_tokens(&m, NULL, ids, N, &o));
    if (f && m) {
        gptx_dataloader_info fi = info_of(f), mi = info_of(m);
        CHECK(memcmp(&fi, &mi, sizeof fi) == 0);
        int64_t steps = 2 * fi.batches_per_epoch + 5;
        int differ = 0;
        for (int64_t i = 0; i < steps; i++) {
            const int32_t *fx, *fy, *mx, *my;
            int fr, mr;
            int64_t fe, me;
            CHECK_OK(gptx_dataloader_next(f, &fx, &fy, &fr, &fe));
            CHECK_OK(gptx_dataloader_next(m, &mx, &my, &mr, &me));
            differ += fr != mr || fe != me || memcmp(fx, mx, (size_t)fr * 7 * 4) != 0 ||
                      memcmp(fy, my, (size_t)fr * 7 * 4) != 0;
        }
        CHECK(differ == 0);
        gptx_dataloader_geometry gf, gm;
        gptx_dataloader_geometry_get(f, &gf);
        gptx_dataloader_geometry_get(m, &gm);
        CHECK(gf.data_hash == gm.data_hash && gf.total_windows == gm.total_windows);
        CHECK(gf.stride == 5 && gf.n_files == 1);
    }
    gptx_dataloader_destroy(f);
    gptx_dataloader_destroy(m);
    /* the hash notices one changed id */
    ids[1234] ^= 1;
    CHECK_OK(gptx_dataloader_create_from_tokens(&m, NULL, ids, N, &o));
    CHECK_OK(gptx_dataloader_create_from_files(&f, NULL, paths, 1, &o));
    if (f && m) {
        gptx_dataloader_geometry gf, gm;
        gptx_dataloader_geometry_get(f, &gf);
        gptx_dataloader_geometry_get(m, &gm);
        CHECK(gf.data_hash != gm.data_hash);
    }
    gptx_dataloader_destroy(f);
    gptx_dataloader_destroy(m);
    free(ids);
}

static void test_token_range(void) {
    int32_t t[40];
    for (int i = 0; i < 40; i++) t[i] = i;
    t[37] = 40;
    char pa[512], pb[512];
    write_shard("ok.bin", t, 30, pa);
    write_shard("range.bin", t, 40, pb);
    const char *paths[2] = {pa, pb};
    gptx_dataloader_options o = opts_bt(1, 4);
    o.vocab_size = 40;
    gptx_dataloader *dl = (gptx_dataloader *)1;
    CHECK_STATUS(gptx_dataloader_create_from_files(&dl, NULL, paths, 2, &o), GPTX_ERR_TOKEN_RANGE);
    CHECK(dl == NULL);
    check_message_mentions("gptx_dataloader_create_from_files: '");
    check_message_mentions("range.bin");
    check_message_mentions("offset 37");
    check_message_mentions("is 40");
    check_message_mentions("vocab_size 40");
    o.vocab_size = 41;
    CHECK_OK(gptx_dataloader_create_from_files(&dl, NULL, paths, 2, &o));
    gptx_dataloader_destroy(dl);
    o.vocab_size = 40;
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, t, 40, &o), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("tokens: token at offset 37 is 40");
    t[37] = -3;
    o.vocab_size = 0;
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, t, 40, &o), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("-3");
    /* a bad file is reported as the shard reader reports it */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope.bin", dir);
    paths[1] = missing;
    CHECK_STATUS(gptx_dataloader_create_from_files(&dl, NULL, paths, 2, &o), GPTX_ERR_IO);
    check_message_mentions("nope.bin");
}

/* Each bad option: its own status and a message naming field and value. */
static void test_bad_options(void) {
    int32_t t[64];
    for (int i = 0; i < 64; i++) t[i] = i;
    struct {
        const char *mention;
        int status;
        int field; /* which option to break */
        int value;
    } cases[] = {
        {"gptx_dataloader_create_from_tokens: opts.batch_size is 0", GPTX_ERR_INVALID, 0, 0},
        {"opts.batch_size is -2", GPTX_ERR_INVALID, 0, -2},
        {"opts.seq_len is 0", GPTX_ERR_INVALID, 1, 0},
        {"opts.stride is -1", GPTX_ERR_INVALID, 2, -1},
        {"opts.shuffle is 2", GPTX_ERR_INVALID, 3, 2},
        {"opts.drop_last is -1", GPTX_ERR_INVALID, 4, -1},
        {"opts.world_size is 0", GPTX_ERR_INVALID, 5, 0},
        {"opts.rank is 1; must be in [0, world_size 1)", GPTX_ERR_INVALID, 6, 1},
        {"opts.rank is -1", GPTX_ERR_INVALID, 6, -1},
        {"opts.vocab_size is -5", GPTX_ERR_INVALID, 7, -5},
        {"opts.prefetch is 3", GPTX_ERR_INVALID, 8, 3},
        {"too large", GPTX_ERR_SHAPE, 9, 1 << 30},
    };
    const size_t nc = sizeof cases / sizeof cases[0];
    char msgs[16][256];
    for (size_t i = 0; i < nc; i++) {
        gptx_dataloader_options o = opts_bt(1, 4);
        int *f[] = {&o.batch_size, &o.seq_len,    &o.stride,     &o.shuffle,   &o.drop_last,
                    &o.world_size, &o.rank,       &o.vocab_size, &o.prefetch,  &o.batch_size};
        *f[cases[i].field] = cases[i].value;
        gptx_dataloader *dl = (gptx_dataloader *)1;
        CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, t, 64, &o), cases[i].status);
        CHECK(dl == NULL);
        check_message_mentions(cases[i].mention);
        snprintf(msgs[i], sizeof msgs[i], "%s", gptx_last_error());
        for (size_t j = 0; j < i; j++) CHECK(strcmp(msgs[i], msgs[j]) != 0);
    }
    gptx_dataloader_options o = opts_bt(1, 4);
    gptx_dataloader *dl = NULL;
    o.struct_size = 2;
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, t, 64, &o), GPTX_ERR_INVALID);
    check_message_mentions("struct_size");
    /* an older, shorter options struct keeps defaults for the rest */
    o = opts_bt(2, 4);
    o.struct_size = offsetof(gptx_dataloader_options, stride);
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, t, 64, &o));
    gptx_dataloader_destroy(dl);
    /* NULL options = defaults (B 4, T 64): 64 tokens hold no 65-token window */
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, t, 64, NULL), GPTX_ERR_SHAPE);
    check_message_mentions("seq_len + 1 = 65");

    o = opts_bt(1, 4);
    CHECK_STATUS(gptx_dataloader_create_from_tokens(NULL, NULL, t, 64, &o), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_dataloader_create_from_tokens(&dl, NULL, NULL, 64, &o), GPTX_ERR_NULL);
    check_message_mentions("tokens");
    const char *paths[2] = {"x", NULL};
    CHECK_STATUS(gptx_dataloader_create_from_files(&dl, NULL, NULL, 1, &o), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_dataloader_create_from_files(&dl, NULL, paths, 0, &o), GPTX_ERR_INVALID);
    check_message_mentions("n_paths is 0");
    CHECK_STATUS(gptx_dataloader_create_from_files(&dl, NULL, paths, 2, &o), GPTX_ERR_NULL);
    check_message_mentions("paths[1]");

    /* calls on a live loader */
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, NULL, t, 64, &o));
    const int32_t *x, *y;
    CHECK_STATUS(gptx_dataloader_next(NULL, &x, &y, NULL, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_dataloader_next(dl, NULL, &y, NULL, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_dataloader_next(dl, &x, NULL, NULL, NULL), GPTX_ERR_NULL);
    CHECK_OK(gptx_dataloader_next(dl, &x, &y, NULL, NULL)); /* rows, epoch optional */
    gptx_dataloader_info in;
    gptx_dataloader_info_init(&in);
    in.struct_size = 8;
    CHECK_STATUS(gptx_dataloader_info_get(dl, &in), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_dataloader_info_get(NULL, &in), GPTX_ERR_NULL);
    gptx_dataloader_state s;
    gptx_dataloader_state_init(&s);
    CHECK_STATUS(gptx_dataloader_get_state(dl, NULL), GPTX_ERR_NULL);
    CHECK_OK(gptx_dataloader_get_state(dl, &s));
    CHECK(s.epoch == 0 && s.batch == 1);
    s.batch = 15; /* 15 batches per epoch: 0..14 */
    CHECK_STATUS(gptx_dataloader_set_state(dl, &s), GPTX_ERR_INVALID);
    check_message_mentions("state.batch is 15");
    s.batch = 0;
    s.epoch = -1;
    CHECK_STATUS(gptx_dataloader_set_state(dl, &s), GPTX_ERR_INVALID);
    check_message_mentions("state.epoch is -1");
    CHECK_STATUS(gptx_dataloader_set_state(dl, NULL), GPTX_ERR_NULL);
    /* failed calls changed nothing */
    CHECK_OK(gptx_dataloader_get_state(dl, &s));
    CHECK(s.epoch == 0 && s.batch == 1);
    gptx_dataloader_destroy(dl);
    gptx_dataloader_destroy(NULL);
}

/* A backend with host_alloc_pinned gets the batch buffers from it. */
static size_t pinned_bytes, pinned_allocs, pinned_frees;
static int fake_pinned_alloc(gptx_backend *be, size_t bytes, void **p) {
    (void)be;
    pinned_bytes = bytes;
    pinned_allocs++;
    *p = malloc(bytes);
    return *p ? GPTX_OK : GPTX_ERR_NO_MEMORY;
}
static void fake_pinned_free(gptx_backend *be, void *p) {
    (void)be;
    pinned_frees++;
    free(p);
}

static void test_pinned(void) {
    gptx_context *ctx = NULL;
    if (make_cpu_context(&ctx, 1) != GPTX_OK) {
        CHECK(0);
        return;
    }
    int32_t *ids = iota(200);
    gptx_dataloader_options o = opts_bt(3, 5);
    o.prefetch = 1;
    gptx_dataloader *dl = NULL;
    /* the CPU backend has no pinned allocator: plain malloc */
    CHECK(ctx->ops->host_alloc_pinned == NULL);
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, ctx, ids, 200, &o));
    gptx_dataloader_destroy(dl);
    const gptx_backend_ops *cpu = ctx->ops;
    gptx_backend_ops fake = *cpu;
    fake.host_alloc_pinned = fake_pinned_alloc;
    fake.host_free_pinned = fake_pinned_free;
    ctx->ops = &fake;
    CHECK_OK(gptx_dataloader_create_from_tokens(&dl, ctx, ids, 200, &o));
    CHECK(pinned_allocs == 1 && pinned_bytes == 4 * 3 * 5 * sizeof(int32_t));
    const int32_t *x, *y;
    CHECK_OK(gptx_dataloader_next(dl, &x, &y, NULL, NULL));
    CHECK(x[0] == 0 && y[14] == 15);
    gptx_dataloader_destroy(dl);
    CHECK(pinned_frees == 1);
    ctx->ops = cpu;
    gptx_context_destroy(ctx);
    free(ids);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/gptx_test_dataloader.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_windows_and_stride();
    test_file_boundaries();
    test_shuffle();
    test_ranks();
    test_drop_last();
    test_resume();
    test_prefetch_buffers();
    test_prefetch_cancel();
    test_files_vs_tokens();
    test_token_range();
    test_bad_options();
    test_pinned();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_exit("test_dataloader");
}
