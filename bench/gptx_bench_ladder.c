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
    char prefix_buf[256];
} bench_args;

static void usage(FILE *f) {
    fprintf(f,
            "usage: gptx-bench [--config micro|small|gpt2-124M-short] [--mode cumulative|isolated]\n"
            "                  [--steps S] [--warmup W] [--repeats R] [--threads N] [--seed S]\n"
            "                  [--out-prefix P] [--text FILE] [--tokenizer-dir DIR]\n"
            "                  [--tolerance-scale X]\n"
            "\n"
            "  --config      a preset of every gptx program (gptx-train --help lists them):\n"
            "                micro:           V 50257, T 32,  L 2,  H 2,  C 64,  B 4 (smoke test)\n"
            "                small:           V 50257, T 256, L 4,  H 4,  C 256, B 4 (default)\n"
            "                gpt2-124M-short: V 50257, T 256, L 12, H 12, C 768, B 2\n"
            "                (the padded-vocab rows use 50304)\n"
            "  --mode        cumulative: each row adds one change to the previous row (default)\n"
            "                isolated:   each change alone against the baseline\n"
            "  --steps       timed training steps per repeat (default: micro 5, small 1, gpt2 1)\n"
            "  --warmup      untimed steps after the cold first step (default: 1, gpt2 0)\n"
            "  --repeats     repeats of the timed steps; tokens/s median and min-max over them\n"
            "                (default: micro 3, small 7, gpt2 3)\n"
            "  --threads     context num_threads, BLAS included (0 = all online cores; default 0)\n"
            "  --seed        parameter initialisation seed, the same for every row (default 42)\n"
            "  --out-prefix  writes P.csv, P.json, P.svg, P.tokens.bin\n"
            "                (default gptx-bench-CONFIG-MODE)\n"
            "  --text        training text (default %s/the-verdict.txt)\n"
            "  --tokenizer-dir  GPT-2 encoder.json and vocab.bpe (default %s/gpt2)\n"
            "  --tolerance-scale  multiplies every numerics tolerance (default 1; 0 demands\n"
            "                bitwise equality with the baseline, to see the FAIL path)\n"
            "Exit status: 0 all rows pass, 1 a row failed its numerics or did not run, 2 usage.\n",
            prog_data_dir(), prog_data_dir());
}

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
        fprintf(stderr, "gptx-bench: unknown --config '%s' (micro, small, gpt2-124M-short: the "
                        "presets the ladder is sized for)\n", name);
        return -1;
    }
    *s = (ladder_shape){p->name, 50257, 50304, p->context, p->n_layer, p->n_head, p->n_embd,
                        p->batch};
    return 0;
}

static int parse_int(const char *flag, const char *s, int min, int *out) {
    return bench_parse_int("gptx-bench", flag, s, min, 1000000, out);
}

static int parse_args(bench_args *a, int argc, char **argv) {
    memset(a, 0, sizeof *a);
    a->p.mode = "cumulative";
    a->p.seed = 42;
    a->p.tolerance_scale = 1.0;
    a->text = prog_data_path("the-verdict.txt");
    a->tokenizer_dir = prog_data_path("gpt2");
    const char *config = "small";
    /* the preset first, so explicit overrides win whatever their position */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--config") == 0) config = argv[i + 1];
    if (apply_config(a, config) != 0) return -1;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (strcmp(f, "--help") == 0 || strcmp(f, "-h") == 0) {
            usage(stdout);
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-bench: unknown option or missing value: '%s'\n", f);
            usage(stderr);
            return -1;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(f, "--config") == 0) continue; /* applied above */
        else if (strcmp(f, "--mode") == 0) {
            if (strcmp(v, "cumulative") != 0 && strcmp(v, "isolated") != 0) {
                fprintf(stderr, "gptx-bench: --mode is '%s'; expected cumulative or isolated\n", v);
                return -1;
            }
            a->p.mode = v;
        } else if (strcmp(f, "--steps") == 0) rc = parse_int(f, v, 1, &a->p.steps);
        else if (strcmp(f, "--warmup") == 0) rc = parse_int(f, v, 0, &a->p.warmup);
        else if (strcmp(f, "--repeats") == 0) rc = parse_int(f, v, 1, &a->p.repeats);
        else if (strcmp(f, "--threads") == 0) rc = parse_int(f, v, 0, &a->p.threads);
        else if (strcmp(f, "--seed") == 0) {
            char *end = NULL;
            errno = 0;
            a->p.seed = strtoull(v, &end, 0);
            if (errno || end == v || *end) {
                fprintf(stderr, "gptx-bench: --seed expects an unsigned integer, got '%s'\n", v);
                return -1;
            }
        } else if (strcmp(f, "--tolerance-scale") == 0) {
            char *end = NULL;
            a->p.tolerance_scale = strtod(v, &end);
            if (end == v || *end || !(a->p.tolerance_scale >= 0) ||
                !isfinite(a->p.tolerance_scale)) {
                fprintf(stderr, "gptx-bench: --tolerance-scale expects a number >= 0, got '%s'\n",
                        v);
                return -1;
            }
        } else if (strcmp(f, "--out-prefix") == 0) a->out_prefix = v;
        else if (strcmp(f, "--text") == 0) a->text = v;
        else if (strcmp(f, "--tokenizer-dir") == 0) a->tokenizer_dir = v;
        else {
            fprintf(stderr, "gptx-bench: unknown option '%s'\n", f);
            usage(stderr);
            return -1;
        }
        if (rc != 0) return -1;
    }
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
    if (parse_args(&a, argc, argv) != 0) return 2;
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
