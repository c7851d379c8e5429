/* gptx-bench-checkpoint: what the checksums cost. Saves a preset's model (and
 * a training checkpoint with its AdamW moments) REPS times, then loads each
 * REPS times with the checksums verified and with GPTX_SKIP_CHECKSUMS=1, and
 * prints the median seconds and MB/s of each. The files go to --dir (page
 * cache warm after the first write: this times the library, not the disk).
 *   gptx-bench-checkpoint [--config PRESET] [--dir DIR] [--reps N] [--threads N] */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gptx/gptx.h"

#include "bench_common.h"
#include "prog_flags.h"
#include "prog_presets.h"

#define CK(call)                                                                       \
    do {                                                                               \
        int rc_ = (call);                                                              \
        if (rc_ != GPTX_OK) {                                                          \
            fprintf(stderr, "gptx-bench-checkpoint: %s: %s\n", #call, gptx_last_error()); \
            return 1;                                                                  \
        }                                                                              \
    } while (0)

static double file_mb(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (double)st.st_size / 1e6 : 0;
}

typedef struct {
    const char *config, *dir;
    int reps, threads;
} ckpt_args;

int main(int argc, char **argv) {
    ckpt_args a = {"gpt2-124M", "/tmp", 3, 2};
    const ckpt_args defaults = a;
#define ROW(field, name, kind, lo, hi, arg, help) \
    PROG_FLAG_ROW(ckpt_args, field, name, kind, lo, hi, NULL, arg, help, 0, 0)
    const prog_flag rows[] = {
        ROW(config, "--config", PROG_FLAG_STR, 0, 0, "PRESET", "the model's shape (a preset)"),
        ROW(dir, "--dir", PROG_FLAG_STR, 0, 0, "DIR", "where the files are written"),
        ROW(reps, "--reps", PROG_FLAG_INT, 1, 100, NULL, "timed saves and loads"),
        ROW(threads, "--threads", PROG_FLAG_INT, 0, 100000, NULL, "CPU threads, 0 = all cores"),
    };
#undef ROW
    const prog_cli cli = {"gptx-bench-checkpoint",
                          "usage: gptx-bench-checkpoint [options]\n"
                          "Times saving and loading a model and a training checkpoint.\n",
                          rows, sizeof rows / sizeof rows[0], NULL};
    int prc = prog_flags_parse(&cli, &a, NULL, argc, argv, &defaults);
    if (prc) return prc > 0 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
    const prog_preset *p = prog_preset_lookup(cli.name, "--config", a.config);
    if (!p) return PROG_EXIT_USAGE;
    const char *dir = a.dir;
    int reps = a.reps, threads = a.threads;
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = threads;
    gptx_context *ctx;
    CK(gptx_context_create(&ctx, &co));
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    cfg.n_layer = p->n_layer, cfg.n_head = p->n_head, cfg.n_embd = p->n_embd;
    cfg.context_length = p->context;
    gptx_model *m;
    gptx_optimizer *opt;
    CK(gptx_model_create(&m, ctx, &cfg));
    CK(gptx_model_init_random(m, 1));
    CK(gptx_optimizer_create(&opt, m, NULL));
    char model_path[4096], train_path[4096];
    snprintf(model_path, sizeof model_path, "%s/bench_model.safetensors", dir);
    snprintf(train_path, sizeof train_path, "%s/bench_train.safetensors", dir);
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    double t[100];
    printf("preset %s: %zu parameters, %d threads; median of %d\n", p->name,
           gptx_model_num_parameters(m), threads, reps);
    for (int kind = 0; kind < 2; kind++) {
        const char *path = kind ? train_path : model_path;
        for (int r = 0; r < reps; r++) {
            double t0 = bench_now_s();
            CK(kind ? gptx_checkpoint_save(m, &st, path) : gptx_model_save(m, path));
            t[r] = bench_now_s() - t0;
        }
        double mb = file_mb(path), save = bench_median(t, reps);
        printf("%-8s %8.1f MB  save (checksums computed) %.3f s = %6.0f MB/s\n",
               kind ? "training" : "model", mb, save, mb / save);
        for (int skip = 0; skip < 2; skip++) {
            if (skip) setenv("GPTX_SKIP_CHECKSUMS", "1", 1);
            for (int r = 0; r < reps; r++) {
                double t0 = bench_now_s();
                if (kind) {
                    gptx_train_state in;
                    gptx_train_state_init(&in);
                    in.optimizer = opt;
                    CK(gptx_checkpoint_load(m, &in, path));
                } else {
                    CK(gptx_model_load_weights(m, path));
                }
                t[r] = bench_now_s() - t0;
            }
            unsetenv("GPTX_SKIP_CHECKSUMS");
            double load = bench_median(t, reps);
            printf("%-8s %8s     load, checksums %-8s %.3f s = %6.0f MB/s\n", "", "",
                   skip ? "skipped" : "verified", load, mb / load);
        }
        remove(path);
    }
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return 0;
}
