/* llm.c token shards and the data loader over them (fuzz_util.h).
 *
 * Input: 12 option bytes, then up to 4 shard files separated by "GPTXSHARD".
 * Each shard goes through gptx_shard_read_src (gptx_shard_read's checks on
 * memory), then all of them through gptx_dataloader_create_from_srcs (the
 * loader gptx_dataloader_create_from_files builds). A loader that is
 * created must hand out batches it promises: rows in [1, B] (B except an
 * epoch's last batch without drop_last), ids in range, targets = inputs
 * shifted by one, and the same batch again after restoring a saved
 * position. A broken promise abort()s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataloader.h"
#include "fuzz_util.h"
#include "safetensors.h"
#include "shard.h"

#define OPTION_BYTES 12
#define MAX_SHARDS 4
#define MAX_BATCHES 24 /* next() calls per input: two epochs of small data */
static const char sep[] = "GPTXSHARD";

static void broken(const char *what) {
    fprintf(stderr, "data loader: %s (last error: %s)\n", what, gptx_last_error());
    abort();
}

/* Small shapes, so one input takes microseconds; invalid ranks and strides
 * stay possible, so the option checks are fuzzed too. */
static void read_options(const uint8_t *b, gptx_dataloader_options *o) {
    gptx_dataloader_options_init(o);
    o->batch_size = 1 + b[0] % 4;
    o->seq_len = 1 + b[1] % 32;
    o->stride = b[2] % 40; /* 0 = seq_len */
    o->shuffle = b[3] & 1;
    o->drop_last = b[3] >> 1 & 1;
    o->prefetch = b[3] >> 2 & 1;
    o->world_size = 1 + b[4] % 3;
    o->rank = b[5] % 4;
    o->vocab_size = b[6] | b[7] << 8;
    o->seed = (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 | (uint64_t)b[11] << 24;
}

static void check_batch(const gptx_dataloader_options *o, const int32_t *in, const int32_t *tg,
                        int rows, int last_of_epoch) {
    if (rows < 1 || rows > o->batch_size || (rows != o->batch_size && !last_of_epoch))
        broken("a batch has the wrong number of rows");
    const int T = o->seq_len;
    const int32_t top = o->vocab_size ? o->vocab_size : 65536;
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < T; t++) {
            int32_t a = in[r * T + t], b = tg[r * T + t];
            if (a < 0 || a >= top || b < 0 || b >= top) broken("an id out of range");
            if (t + 1 < T && b != in[r * T + t + 1])
                broken("targets are not inputs shifted by one");
        }
}

static void check_loader(gptx_dataloader *dl, const gptx_dataloader_options *o) {
    gptx_dataloader_info info;
    gptx_dataloader_info_init(&info);
    if (gptx_dataloader_info_get(dl, &info) != GPTX_OK || info.batches_per_epoch < 1)
        broken("a loader without batches");
    int64_t calls = 2 * info.batches_per_epoch + 1;
    if (calls > MAX_BATCHES) calls = MAX_BATCHES;
    const size_t bt = (size_t)o->batch_size * (size_t)o->seq_len;
    int32_t *saved = malloc(2 * bt * sizeof *saved);
    if (!saved) abort();
    gptx_dataloader_state mark;
    gptx_dataloader_state_init(&mark);
    int saved_rows = 0;
    for (int64_t i = 0; i < calls; i++) {
        if (i == calls / 2 && gptx_dataloader_get_state(dl, &mark) != GPTX_OK)
            broken("get_state fails");
        const int32_t *in, *tg;
        int rows = 0;
        int64_t epoch = -1;
        if (gptx_dataloader_next(dl, &in, &tg, &rows, &epoch) != GPTX_OK) broken("next fails");
        if (epoch != i / info.batches_per_epoch) broken("the epoch count is off");
        check_batch(o, in, tg, rows, (i + 1) % info.batches_per_epoch == 0);
        if (i == calls / 2) {
            memcpy(saved, in, bt * sizeof *in);
            memcpy(saved + bt, tg, bt * sizeof *tg);
            saved_rows = rows;
        }
    }
    const int32_t *in, *tg;
    int rows = 0;
    if (gptx_dataloader_set_state(dl, &mark) != GPTX_OK ||
        gptx_dataloader_next(dl, &in, &tg, &rows, NULL) != GPTX_OK || rows != saved_rows ||
        memcmp(saved, in, (size_t)rows * (size_t)o->seq_len * sizeof *in) != 0 ||
        memcmp(saved + bt, tg, (size_t)rows * (size_t)o->seq_len * sizeof *tg) != 0)
        broken("a restored position does not give the same batch");
    mark.batch = info.batches_per_epoch; /* one past the end: refused, not a crash */
    if (gptx_dataloader_set_state(dl, &mark) == GPTX_OK) broken("a batch past the end is accepted");
    free(saved);
}

int gptx_fuzz_shard(const uint8_t *data, size_t size) {
    uint8_t opt[OPTION_BYTES] = {0};
    size_t head = size < OPTION_BYTES ? size : OPTION_BYTES;
    memcpy(opt, data, head);
    gptx_fuzz_part p[MAX_SHARDS];
    size_t n = gptx_fuzz_split(data + head, size - head, sep, sizeof sep - 1, p, MAX_SHARDS);
    gptx_src srcs[MAX_SHARDS];
    for (size_t i = 0; i < n; i++) { /* each shard alone: the loader stops at a bad one */
        gptx_src_open_memory(&srcs[i], p[i].data, p[i].size, "<fuzz shard>");
        int32_t *t = NULL;
        size_t len = 0;
        if (gptx_shard_read_src(&srcs[i], &t, &len) == GPTX_OK) {
            for (size_t k = 0; k < len; k++)
                if (t[k] < 0 || t[k] > GPTX_SHARD_MAX_ID) broken("a shard id out of range");
        }
        free(t);
    }
    gptx_dataloader_options o;
    read_options(opt, &o);
    gptx_dataloader *dl = NULL;
    int accepted = gptx_dataloader_create_from_srcs(&dl, NULL, srcs, (int)n, &o) == GPTX_OK;
    if (accepted) {
        gptx_dataloader_get_options(dl, &o); /* stride 0 resolved */
        check_loader(dl, &o);
    }
    gptx_dataloader_destroy(dl);
    return accepted; /* the loader took every shard */
}

/* ---- seeds ------------------------------------------------------------------ */

/* A shard of n tokens (ids i * mul % mod) appended at buf; returns its size. */
static size_t put_shard(uint8_t *buf, size_t n, unsigned mul, unsigned mod) {
    memset(buf, 0, GPTX_SHARD_HEADER_BYTES);
    const uint32_t head[3] = {GPTX_SHARD_MAGIC, GPTX_SHARD_VERSION, (uint32_t)n};
    for (int w = 0; w < 3; w++)
        for (int k = 0; k < 4; k++) buf[4 * w + k] = (uint8_t)(head[w] >> (8 * k));
    for (size_t i = 0; i < n; i++) {
        unsigned v = (unsigned)(i * mul % mod);
        buf[GPTX_SHARD_HEADER_BYTES + 2 * i] = (uint8_t)v;
        buf[GPTX_SHARD_HEADER_BYTES + 2 * i + 1] = (uint8_t)(v >> 8);
    }
    return GPTX_SHARD_HEADER_BYTES + 2 * n;
}

/* options, then shards of the given token counts */
static int write_shard_seed(const char *dir, const char *name, const uint8_t opt[OPTION_BYTES],
                            const size_t *counts, size_t n_shards) {
    uint8_t *buf = malloc(MAX_SHARDS * (GPTX_SHARD_HEADER_BYTES + 2 * 512));
    if (!buf) abort();
    gptx_fuzz_part parts[MAX_SHARDS + 1];
    size_t at = 0;
    for (size_t i = 0; i < n_shards; i++) {
        size_t len = put_shard(buf + at, counts[i], 7 + 2 * (unsigned)i, 50257);
        parts[i] = (gptx_fuzz_part){buf + at, len};
        at += len;
    }
    /* the options are glued to the first shard: no separator between them */
    uint8_t *first = malloc(OPTION_BYTES + parts[0].size);
    if (!first) abort();
    memcpy(first, opt, OPTION_BYTES);
    memcpy(first + OPTION_BYTES, parts[0].data, parts[0].size);
    parts[0] = (gptx_fuzz_part){first, OPTION_BYTES + parts[0].size};
    int rc = gptx_fuzz_write_seed(dir, name, parts, n_shards, sep, sizeof sep - 1);
    free(first);
    free(buf);
    return rc;
}

int gptx_fuzz_shard_seeds(const char *dir) {
    /* B 2, T 8, stride = T, drop_last, vocab 50257 (0xC451), seed 1 */
    const uint8_t plain[OPTION_BYTES] = {1, 7, 0, 2, 0, 0, 0x51, 0xC4, 1, 0, 0, 0};
    /* B 3, T 5, stride 3, shuffle, no drop_last, prefetch, 2 ranks (rank 1), no vocab check */
    const uint8_t mixed[OPTION_BYTES] = {2, 4, 3, 5, 1, 1, 0, 0, 42, 0, 0, 0};
    const size_t one[1] = {100}, three[3] = {40, 7, 61}, four[4] = {9, 9, 30, 0};
    int rc = write_shard_seed(dir, "seed_one_shard", plain, one, 1);
    rc |= write_shard_seed(dir, "seed_three_shards", mixed, three, 3);
    rc |= write_shard_seed(dir, "seed_four_shards_one_empty", mixed, four, 4);
    return rc;
}
