/* gptx-op-profile: where a training step's time goes, per backend op.
 * Built with -DGPTX_BENCH_OP_PROFILE=ON (bench/CMakeLists.txt): the static
 * library with op_profile_wrap.c's --wrap timers. Same step and data scheme
 * as gptx-bench-train. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"
#include "prog_presets.h"

void prof_reset(void);
void prof_print(int steps, double step_time, double zero_grad_time);

static double tnow(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define CK(x)                                                                       \
    do {                                                                            \
        int r_ = (x);                                                               \
        if (r_ != GPTX_OK) {                                                        \
            fprintf(stderr, "%s failed: %s: %s\n", #x, gptx_status_name(r_),        \
                    gptx_last_error());                                             \
            return 1;                                                               \
        }                                                                           \
    } while (0)

int main(int argc, char **argv) {
    const char *config = "small";
    const char *precision = "fp32";
    int threads = 2, warmup = 2, steps = 5;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 == argc) argv[i] = "--help"; /* a flag without its value */
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--warmup")) warmup = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--precision")) precision = argv[i + 1];
        else {
            fprintf(stderr, "usage: gptx-op-profile [--config PRESET (small, gpt2-124M-short, ...)] "
                            "[--threads N] [--warmup N] [--steps N] [--precision fp32|bf16|bf16_pure]\n");
            return 2;
        }
    }
    const prog_preset *p = prog_preset_find(config); /* the presets of every program */
    if (!p) {
        fprintf(stderr, "unknown --config %s (%s)\n", config, prog_preset_names());
        return 2;
    }
    if (warmup < 1) warmup = 1;
    if (steps < 1) steps = 1;
    int B = p->batch, T = p->context, L = p->n_layer, NH = p->n_head, C = p->n_embd;

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = threads;
    co.precision = gptx_precision_from_name(precision);
    gptx_context *ctx;
    CK(gptx_context_create(&ctx, &co));
    gptx_model_config cfg;
    gptx_model_config_init(&cfg); /* 50257 padded to 50304, tied, qkv bias, masked */
    cfg.context_length = T;
    cfg.n_layer = L;
    cfg.n_head = NH;
    cfg.n_embd = C;
    gptx_model *m;
    CK(gptx_model_create(&m, ctx, &cfg));
    CK(gptx_model_init_random(m, 42));
    gptx_optimizer *o;
    CK(gptx_optimizer_create(&o, m, NULL));
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T + 1));
    if (!in) return 1;
    uint64_t x = 1234;
    for (int i = 0; i <= B * T; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        in[i] = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % 50257u);
    }
    double tz = 0.0, t0 = 0.0;
    for (int s = 0; s < warmup + steps; s++) {
        if (s == warmup) {
            prof_reset();
            tz = 0.0;
            t0 = tnow();
        }
        double a = tnow();
        CK(gptx_model_zero_grad(m));
        tz += tnow() - a;
        float loss;
        CK(gptx_model_forward_backward(m, in, in + 1, B, T, 1.0f, &loss)); /* as the trainer */
        CK(gptx_optimizer_step(o, m, NULL));
    }
    double per = (tnow() - t0) / steps;
    printf("%s, %d threads: %.4f s/step (mean of %d steps after %d warm-up)\n", config, threads,
           per, steps, warmup);
    prof_print(steps, per, tz / steps);
    gptx_optimizer_destroy(o);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    free(in);
    return 0;
}
