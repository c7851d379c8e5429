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

int main(int argc, char **argv) {
    const char *config = "gpt2-124M", *dir = "/tmp";
    int reps = 3, threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
        else if (!strcmp(argv[i], "--dir")) dir = argv[i + 1];
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    }
    const prog_preset *p = prog_preset_find(config);
    if (!p || reps < 1 || reps > 100) {
        fprintf(stderr, "usage: gptx-bench-checkpoint [--config PRESET (%s)] [--dir DIR] "
                        "[--reps 1..100] [--threads N]\n", prog_preset_names());
        return 2;
    }
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
