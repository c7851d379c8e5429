/* gptx-bench-sampler: the sampler's cost per call on the CPU at GPT-2's
 * vocabulary (50257 padded to 50304, logits uniform in [-5, 5]), median of
 * --calls calls per option set: the table of docs/sampling.md, and the 0.6.0
 * controls (penalties over a window of a 1024-token history, min-p).
 * Usage: gptx-bench-sampler [--calls N]. Run it on a quiet machine. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "gptx/gptx.h"
#include "prog_flags.h"

#define PROG "gptx-bench-sampler"
enum { V = 50257, VP = 50304, HIST = 1024 };

typedef struct {
    const char *name;
    float t, p, rep, freq, pres, min_p;
    int k, window;
} cfg;

typedef struct {
    int calls;
} bench_args;

int main(int argc, char **argv) {
    bench_args a = {40};
    const bench_args defaults = a;
    const prog_flag rows[] = {
        PROG_FLAG_ROW(bench_args, calls, "--calls", PROG_FLAG_INT, 1, 100000, NULL, NULL,
                      "timed calls per option set (the median is printed)", 0, 0),
    };
    const prog_cli cli = {PROG,
                          "usage: " PROG " [options]\n"
                          "Times the sampler per call at GPT-2's vocabulary.\n",
                          rows, sizeof rows / sizeof rows[0], NULL};
    int prc = prog_flags_parse(&cli, &a, NULL, argc, argv, &defaults);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    int calls = a.calls;
    float *row = malloc(VP * sizeof *row);
    int32_t *hist = malloc(HIST * sizeof *hist);
    double *ms = malloc((size_t)calls * sizeof *ms);
    if (!row || !hist || !ms) return 1;
    uint32_t x = 12345u;
    for (int i = 0; i < VP; i++) {
        x = x * 1664525u + 1013904223u;
        row[i] = -5.0f + 10.0f * (float)(x >> 8) / 16777216.0f;
    }
    for (int i = 0; i < HIST; i++) {
        x = x * 1664525u + 1013904223u;
        hist[i] = (int32_t)((x >> 8) % V);
    }
    const cfg cfgs[] = {
        {"greedy", 0, 1, 1, 0, 0, 0, 0, 64},
        {"temperature 1", 1, 1, 1, 0, 0, 0, 0, 64},
        {"temperature 1, top-k 40", 1, 1, 1, 0, 0, 0, 40, 64},
        {"temperature 1, top-p 0.9", 1, 0.9f, 1, 0, 0, 0, 0, 64},
        {"temperature 0.8, top-k 40, top-p 0.95", 0.8f, 0.95f, 1, 0, 0, 0, 40, 64},
        {"temperature 1, min-p 0.05", 1, 1, 1, 0, 0, 0.05f, 0, 64},
        {"greedy, repetition 1.3 (window 64)", 0, 1, 1.3f, 0, 0, 0, 0, 64},
        {"temperature 1, all penalties (window 64)", 1, 1, 1.3f, 0.5f, 0.5f, 0, 0, 64},
        {"temperature 1, all penalties (window 1024)", 1, 1, 1.3f, 0.5f, 0.5f, 0, 0, 1024},
        {"T 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties (64)", 0.8f, 0.95f, 1.3f, 0.5f, 0.5f,
         0.05f, 40, 64},
    };
    printf("%-58s %s\n", "options", "median ms per call");
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        gptx_sampler_options o;
        gptx_sampler_options_init(&o);
        o.temperature = cfgs[c].t;
        o.top_k = cfgs[c].k;
        o.top_p = cfgs[c].p;
        o.repetition_penalty = cfgs[c].rep;
        o.frequency_penalty = cfgs[c].freq;
        o.presence_penalty = cfgs[c].pres;
        o.min_p = cfgs[c].min_p;
        o.penalty_window = cfgs[c].window;
        gptx_sampler *s = NULL;
        if (gptx_sampler_create(&s, &o) != GPTX_OK) {
            fprintf(stderr, PROG ": %s\n", gptx_last_error());
            return 1;
        }
        int32_t tok;
        for (int i = 0; i < calls + 2; i++) { /* 2 warm-up calls */
            double t0 = bench_now_s();
            if (gptx_sampler_sample_history(s, row, VP, V, hist, HIST, &tok) != GPTX_OK) {
                fprintf(stderr, PROG ": %s\n", gptx_last_error());
                return 1;
            }
            if (i >= 2) ms[i - 2] = (bench_now_s() - t0) * 1e3;
        }
        printf("%-58s %.3f\n", cfgs[c].name, bench_median(ms, calls));
        gptx_sampler_destroy(s);
    }
    free(row);
    free(hist);
    free(ms);
    return 0;
}
