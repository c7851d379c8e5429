/*
 * gptx-bench: the ablation ladder of training-speed optimizations, one
 * change at a time, with a numerics check on every row (docs/ablation.md).
 *
 *   gptx-bench --config small --mode cumulative --threads 2
 *
 * Rows: the textbook fp32 baseline (naive attention, separate Q/K/V
 * products, step-by-step LayerNorm/GELU, per-tensor AdamW, vocab 50257,
 * batch B), then flash attention, fused QKV, fused LN/GELU, fused AdamW,
 * padded vocab 50304 (masked) and batch 2B — each on top of the previous row
 * (cumulative) or alone on top of the baseline (isolated) — then the
 * CUDA-only rows as n/a. Every row starts from a fresh context and model
 * (same seed, same parameters), trains N steps on the same tokens, and is
 * compared with the baseline; a row outside its tolerance is a FAIL and
 * the exit status is 1.
 *
 * Output: a Markdown table on stdout; PREFIX.csv, PREFIX.json, PREFIX.svg
 * (tokens/s bar chart) and PREFIX.tokens.bin (the token stream as an llm.c
 * shard, for bench/torch_ladder.py).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gptx/gptx.h"
#include "prog_data.h"
#include "prog_flags.h"
#include "prog_presets.h"
#include "ladder/ladder.h"
#include "ladder/ladder_data.h"
#include "ladder/ladder_report.h"
#include "ladder/ladder_rows.h"
#include "ladder/ladder_run.h"

#include "bench_common.h"


typedef struct {
    ladder_params p;
    const char *out_prefix;
    const char *text;
    const char *tokenizer_dir;
    const char *config;
    unsigned long long seed;
    char prefix_buf[256];
} bench_args;

static int apply_config(bench_args *a, const char *name) {
    ladder_shape *s = &a->p.shape;
    const prog_preset *p = prog_preset_find(name);
    /* step counts sized so that both modes of small and gpt2-124M-short, and
     * bench/torch_ladder.py beside them, take about 15 minutes on 2 cores */
    if (p && strcmp(name, "micro") == 0) {
        a->p.warmup = 1, a->p.steps = 5, a->p.repeats = 3;
    } else if (p && strcmp(name, "small") == 0) {
        a->p.warmup = 1, a->p.steps = 1, a->p.repeats = 7;
    } else if (p && strcmp(name, "gpt2-124M-short") == 0) {
        a->p.warmup = 0, a->p.steps = 1, a->p.repeats = 3;
    } else {
        return prog_usage_error("gptx-bench", "--config", name,
                                "expected micro, small or gpt2-124M-short (the presets the "
                                "ladder is sized for)");
    }
    *s = (ladder_shape){p->name, 50257, 50304, p->context, p->n_layer, p->n_head, p->n_embd,
                        p->batch};
    return 0;
}

#define ROW(field, name, kind, lo, hi, choices, arg, help, bits) \
    PROG_FLAG_ROW(bench_args, field, name, kind, lo, hi, choices, arg, help, bits, 0)
static const prog_flag flag_rows[] = {
    ROW(config, "--config", PROG_FLAG_CHOICE, 0, 0, "micro|small|gpt2-124M-short", NULL,
        "a preset of every gptx program (gptx-train --help lists them):\n"
        "micro:           V 50257, T 32,  L 2,  H 2,  C 64,  B 4 (smoke test)\n"
        "small:           V 50257, T 256, L 4,  H 4,  C 256, B 4\n"
        "gpt2-124M-short: V 50257, T 256, L 12, H 12, C 768, B 2\n"
        "(the padded-vocab rows use 50304)", 0),
    ROW(p.mode, "--mode", PROG_FLAG_CHOICE, 0, 0, "cumulative|isolated", NULL,
        "cumulative: each row adds one change to the previous row\n"
        "isolated:   each change alone against the baseline", 0),
    ROW(p.steps, "--steps", PROG_FLAG_INT, 1, 1000000, NULL, "S",
        "timed training steps per repeat (default: micro 5, small 1, gpt2 1)",
        PROG_FLAG_NO_DEFAULT),
    ROW(p.warmup, "--warmup", PROG_FLAG_INT, 0, 1000000, NULL, "W",
        "untimed steps after the cold first step (default: 1, gpt2 0)", PROG_FLAG_NO_DEFAULT),
    ROW(p.repeats, "--repeats", PROG_FLAG_INT, 1, 1000000, NULL, "R",
        "repeats of the timed steps; tokens/s median and min-max over them\n"
        "(default: micro 3, small 7, gpt2 3)", PROG_FLAG_NO_DEFAULT),
    ROW(p.threads, "--threads", PROG_FLAG_INT, 0, 1000000, NULL, NULL,
        "context num_threads, BLAS included (0 = all online cores)", 0),
    ROW(seed, "--seed", PROG_FLAG_U64, 0, 0, NULL, NULL,
        "parameter initialisation seed, the same for every row", 0),
    ROW(out_prefix, "--out-prefix", PROG_FLAG_STR, 0, 0, NULL, "P",
        "writes P.csv, P.json, P.svg, P.tokens.bin\n(default gptx-bench-CONFIG-MODE)",
        PROG_FLAG_NO_DEFAULT),
    ROW(text, "--text", PROG_FLAG_STR, 0, 0, NULL, "FILE", "training text", 0),
    ROW(tokenizer_dir, "--tokenizer-dir", PROG_FLAG_STR, 0, 0, NULL, "DIR",
        "GPT-2 encoder.json and vocab.bpe", 0),
    ROW(p.tolerance_scale, "--tolerance-scale", PROG_FLAG_DOUBLE, 0, 1e30, NULL, NULL,
        "multiplies every numerics tolerance (0 demands bitwise\n"
        "equality with the baseline, to see the FAIL path)", 0),
};
#undef ROW
enum { N_ROWS = sizeof flag_rows / sizeof flag_rows[0] };

/* 0 to go on, 1 after --help/--version, -1 after a message. */
static int parse_args(bench_args *a, int argc, char **argv) {
    static const prog_cli cli = {
        "gptx-bench",
        "usage: gptx-bench [options]\n"
        "The ablation ladder: one optimization at a time, with numerics checks "
        "(docs/ablation.md).\n",
        flag_rows, N_ROWS,
        "Exit status: 0 all rows pass, 1 a row failed its numerics or did not run, 2 usage.\n"};
    memset(a, 0, sizeof *a);
    a->p.mode = "cumulative";
    a->seed = 42;
    a->p.tolerance_scale = 1.0;
    a->text = prog_data_path("the-verdict.txt");
    a->tokenizer_dir = prog_data_path("gpt2");
    a->config = "small";
    bench_args defaults = *a;
    unsigned char given[N_ROWS];
    int rc = prog_flags_parse(&cli, a, given, argc, argv, &defaults);
    if (rc) return rc;
    /* the preset's step counts, then what the command line gave */
    bench_args flags = *a;
    if (apply_config(a, a->config) != 0) return -1;
    for (int i = 0; i < N_ROWS; i++)
        if (given[i] && flag_rows[i].kind == PROG_FLAG_INT)
            *(int *)((char *)a + flag_rows[i].offset) = *(const int *)((const char *)&flags + flag_rows[i].offset);
    a->p.seed = a->seed;
    if (!a->out_prefix) {
        snprintf(a->prefix_buf, sizeof a->prefix_buf, "gptx-bench-%s-%s", a->p.shape.name,
                 a->p.mode);
        a->out_prefix = a->prefix_buf;
    }
    return 0;
}

/* "model name" of /proc/cpuinfo, or "unknown" */
static void cpu_name(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *c = strchr(line, ':');
        if (!c) break;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        snprintf(buf, n, "%s", c);
        buf[strcspn(buf, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* the three load averages of /proc/loadavg, or "unknown" */
static void load_average(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/proc/loadavg", "r");
    if (!f) return;
    double l1, l5, l15;
    if (fscanf(f, "%lf %lf %lf", &l1, &l5, &l15) == 3) snprintf(buf, n, "%.2f/%.2f/%.2f", l1, l5, l15);
    fclose(f);
}

static int write_outputs(const ladder_report *rep, const ladder_data *data, const char *prefix) {
    char path[4096];
    int rc = 0;
    snprintf(path, sizeof path, "%s.csv", prefix);
    rc |= ladder_report_csv(rep, path);
    snprintf(path, sizeof path, "%s.json", prefix);
    rc |= ladder_report_json(rep, path);
    snprintf(path, sizeof path, "%s.svg", prefix);
    rc |= ladder_report_svg(rep, path);
    /* the same tokens for bench/torch_ladder.py */
    snprintf(path, sizeof path, "%s.tokens.bin", prefix);
    if (gptx_shard_write(path, data->tokens, data->n) != GPTX_OK) {
        fprintf(stderr, "gptx-bench: writing %s failed: %s\n", path, gptx_last_error());
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv) {
    bench_args a;
    int prc = parse_args(&a, argc, argv);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    const ladder_shape *s = &a.p.shape;

    ladder_row rows[LADDER_MAX_ROWS];
    ladder_result res[LADDER_MAX_ROWS];
    memset(res, 0, sizeof res);
    int n = ladder_rows_build(a.p.mode, a.p.tolerance_scale, rows);
    if (n < 0) return 2;

    ladder_report rep;
    memset(&rep, 0, sizeof rep);
    rep.p = &a.p;
    rep.rows = rows;
    rep.res = res;
    rep.n = n;
    rep.text_path = a.text;
    cpu_name(rep.cpu, sizeof rep.cpu);
    rep.online_cpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
    load_average(rep.load_start, sizeof rep.load_start);

    ladder_data data;
    if (ladder_data_load(&data, a.text, a.tokenizer_dir, s->batch, s->seq, 2 * s->batch) != 0)
        return 1;
    rep.n_tokens = data.n;
    rep.n_train = data.n_train;
    rep.n_eval = data.n - data.n_train;

    ladder_runner runner;
    if (ladder_runner_init(&runner, &a.p, &data) != 0) {
        ladder_data_free(&data);
        return 1;
    }
    fprintf(stderr, "gptx-bench: config %s, mode %s, %lld steps per row\n", s->name, a.p.mode,
            (long long)ladder_total_steps(&a.p));
    double t0 = bench_now_s();
    int all_pass = 1;
    for (int i = 0; i < n; i++) {
        if (!rows[i].available) continue;
        double r0 = bench_now_s();
        ladder_run_row(&runner, &rows[i], &res[i]);
        all_pass &= res[i].pass;
        fprintf(stderr, "  row %2d %-28s %8.0f tokens/s  %s (%.1f s)%s%s\n", i, rows[i].label,
                res[i].ran ? res[i].tps_median : 0.0, res[i].pass ? "PASS" : "FAIL",
                bench_now_s() - r0, res[i].error[0] ? ": " : "", res[i].error);
    }
    rep.wall_s = bench_now_s() - t0;
    load_average(rep.load_end, sizeof rep.load_end);
    ladder_runner_free(&runner);

    ladder_report_markdown(&rep, stdout);
    fflush(stdout);
    int out_rc = write_outputs(&rep, &data, a.out_prefix);
    ladder_data_free(&data);
    if (out_rc != 0) return 1;
    fprintf(stderr, "gptx-bench: wrote %s.{csv,json,svg,tokens.bin}; %s\n", a.out_prefix,
            all_pass ? "all rows pass" : "FAIL: a row is outside its tolerance or did not run");
    return all_pass ? 0 : 1;
}
