/*
 * gptx-bench-tokenizer: single-thread encoding throughput of the GPT-2
 * tokenizer on one text file (default: the bundled data/middlemarch.txt).
 *
 * Prints load time, then MB/s (10^6 bytes of input per second) and tokens/s
 * of the median of --runs timed encodes, after one untimed warm-up encode.
 * bench/tokenizer/tiktoken_bench.py measures tiktoken the same way.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"
#include "prog_data.h"

#include "../bench_common.h"


static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gptx-bench-tokenizer: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = realloc(buf, cap *= 2);
        if (!nb) free(buf);
        buf = nb;
    }
    fclose(f);
    *len = n;
    return buf;
}

static void usage(void) {
    printf("usage: gptx-bench-tokenizer [options]\n"
           "  --file PATH     text to encode (default %s/middlemarch.txt)\n"
           "  --runs N        timed encodes; the median is reported (default 7)\n"
           "  --special       encode with allow_special = 1 (default 0, like encode_ordinary)\n"
           "  --encoder PATH  encoder.json (default %s/gpt2/encoder.json)\n"
           "  --vocab PATH    vocab.bpe (default %s/gpt2/vocab.bpe)\n",
           prog_data_dir(), prog_data_dir(), prog_data_dir());
}

int main(int argc, char **argv) {
    const char *file = prog_data_path("middlemarch.txt");
    const char *encoder = prog_data_path("gpt2/encoder.json");
    const char *vocab = prog_data_path("gpt2/vocab.bpe");
    int runs = 7, special = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage();
            return 0;
        }
        if (!strcmp(k, "--special")) {
            special = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-bench-tokenizer: %s needs a value (see --help)\n", k);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(k, "--file")) file = v;
        else if (!strcmp(k, "--encoder")) encoder = v;
        else if (!strcmp(k, "--vocab")) vocab = v;
        else if (!strcmp(k, "--runs")) {
            char *end;
            long r = strtol(v, &end, 10);
            if (*end || r < 1 || r > 1000) {
                fprintf(stderr, "gptx-bench-tokenizer: bad --runs '%s'\n", v);
                return 2;
            }
            runs = (int)r;
        } else {
            fprintf(stderr, "gptx-bench-tokenizer: unknown option %s (see --help)\n", k);
            return 2;
        }
    }
    size_t len = 0;
    char *text = read_all(file, &len);
    if (!text) return 1;
    double t0 = bench_now_s();
    gptx_tokenizer *tok = NULL;
    int rc = gptx_tokenizer_load_gpt2(&tok, encoder, vocab);
    double load_s = bench_now_s() - t0;
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-bench-tokenizer: %s\n", gptx_last_error());
        free(text);
        return 1;
    }
    int32_t *ids = malloc((len ? len : 1) * sizeof *ids);
    double *secs = malloc((size_t)runs * sizeof *secs);
    size_t n = 0;
    if (!ids || !secs) {
        fprintf(stderr, "gptx-bench-tokenizer: out of memory\n");
        return 1;
    }
    for (int r = -1; r < runs; r++) { /* r = -1: warm-up */
        t0 = bench_now_s();
        rc = gptx_tokenizer_encode(tok, text, len, special, ids, len, &n);
        double dt = bench_now_s() - t0;
        if (rc != GPTX_OK) {
            fprintf(stderr, "gptx-bench-tokenizer: %s\n", gptx_last_error());
            return 1;
        }
        if (r >= 0) secs[r] = dt;
    }
    qsort(secs, (size_t)runs, sizeof *secs, bench_cmp_double);
    double med = secs[runs / 2];
    printf("file %s: %zu bytes -> %zu tokens\n", file, len, n);
    printf("load %.1f ms\n", 1e3 * load_s);
    printf("gptx encode: median %.2f ms over %d runs (min %.2f, max %.2f): %.2f MB/s, %.3g tokens/s\n",
           1e3 * med, runs, 1e3 * secs[0], 1e3 * secs[runs - 1], (double)len / med / 1e6,
           (double)n / med);
    free(secs);
    free(ids);
    free(text);
    gptx_tokenizer_destroy(tok);
    return 0;
}
