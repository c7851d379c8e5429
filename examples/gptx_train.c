/*
 * gptx-train: the example trainer. With no arguments it trains a small GPT on
 * the bundled data/the-verdict.txt on the CPU and prints a sample
 * continuation of "Every effort moves you".
 *
 * Tokens are bytes (vocabulary 256) in this version; every flag is listed by
 * --help.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"

#ifndef GPTX_DATA_DIR
#define GPTX_DATA_DIR "data"
#endif

typedef struct {
    const char *data;
    const char *preset;
    int steps, batch, seq, threads, eval_every, eval_batches, sample_tokens;
    int layers, heads, width;
    float lr, weight_decay, grad_clip, val_fraction;
    int warmup;
    unsigned long long seed;
    const char *prompt;
} train_args;

static void usage(void) {
    printf("usage: gptx-train [options]\n"
           "  --data FILE        text to train on (default %s/the-verdict.txt)\n"
           "  --preset NAME      tiny (default) | small\n"
           "  --layers N --heads N --width N   override the preset's sizes\n"
           "  --steps N          optimizer steps (default 600)\n"
           "  --batch N          rows per batch (default 8)\n"
           "  --seq N            tokens per row = context length (default 64)\n"
           "  --lr X             peak learning rate (default 3e-3)\n"
           "  --warmup N         linear warm-up steps, then cosine decay to 10%% (default 20)\n"
           "  --weight-decay X   AdamW weight decay on matrices (default 0.1)\n"
           "  --grad-clip X      global-norm clip, 0 = off (default 1.0)\n"
           "  --val-fraction X   tail of the text held out for validation (default 0.1)\n"
           "  --eval-every N     validation interval in steps (default 50)\n"
           "  --eval-batches N   batches per validation (default 4)\n"
           "  --sample-tokens N  tokens to generate at the end (default 200)\n"
           "  --prompt TEXT      prompt for the sample (default \"Every effort moves you\")\n"
           "  --threads N        CPU threads, 0 = all cores (default 0)\n"
           "  --seed N           random seed (default 1337)\n",
           GPTX_DATA_DIR);
}

static int parse_args(int argc, char **argv, train_args *a) {
    *a = (train_args){.data = GPTX_DATA_DIR "/the-verdict.txt", .preset = "tiny", .steps = 600,
                      .batch = 8, .seq = 64, .threads = 0, .eval_every = 50, .eval_batches = 4,
                      .sample_tokens = 200, .lr = 3e-3f, .weight_decay = 0.1f, .grad_clip = 1.0f,
                      .val_fraction = 0.1f, .warmup = 20, .seed = 1337,
                      .prompt = "Every effort moves you"};
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) {
            usage();
            exit(0);
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-train: %s needs a value (see --help)\n", k);
            return -1;
        }
        const char *v = argv[++i];
        char *end = NULL;
        errno = 0;
        double num = strtod(v, &end);
        int numeric = end && *end == '\0' && errno == 0;
#define INT_FLAG(name, field)                                                        \
    if (!strcmp(k, name)) {                                                          \
        if (!numeric || num != (int)num) goto bad;                                   \
        a->field = (int)num;                                                         \
        continue;                                                                    \
    }
#define FLOAT_FLAG(name, field)                                                      \
    if (!strcmp(k, name)) {                                                          \
        if (!numeric) goto bad;                                                      \
        a->field = (float)num;                                                       \
        continue;                                                                    \
    }
        INT_FLAG("--steps", steps) INT_FLAG("--batch", batch) INT_FLAG("--seq", seq)
        INT_FLAG("--threads", threads) INT_FLAG("--eval-every", eval_every)
        INT_FLAG("--eval-batches", eval_batches) INT_FLAG("--sample-tokens", sample_tokens)
        INT_FLAG("--layers", layers) INT_FLAG("--heads", heads) INT_FLAG("--width", width)
        INT_FLAG("--warmup", warmup)
        FLOAT_FLAG("--lr", lr) FLOAT_FLAG("--weight-decay", weight_decay)
        FLOAT_FLAG("--grad-clip", grad_clip) FLOAT_FLAG("--val-fraction", val_fraction)
        if (!strcmp(k, "--data")) { a->data = v; continue; }
        if (!strcmp(k, "--preset")) { a->preset = v; continue; }
        if (!strcmp(k, "--prompt")) { a->prompt = v; continue; }
        if (!strcmp(k, "--seed")) {
            if (!numeric || num < 0) goto bad;
            a->seed = (unsigned long long)num;
            continue;
        }
        fprintf(stderr, "gptx-train: unknown option %s (see --help)\n", k);
        return -1;
    bad:
        fprintf(stderr, "gptx-train: bad value '%s' for %s\n", v, k);
        return -1;
    }
#undef INT_FLAG
#undef FLOAT_FLAG
    if (a->steps < 1 || a->batch < 1 || a->seq < 2 || a->eval_every < 1 || a->eval_batches < 1 ||
        a->sample_tokens < 0 || a->warmup < 0 || !(a->val_fraction > 0 && a->val_fraction < 1)) {
        fprintf(stderr, "gptx-train: sizes must be positive and --val-fraction in (0, 1)\n");
        return -1;
    }
    return 0;
}

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gptx-train: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            unsigned char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* xorshift64*: the example's own batch sampler and token sampler. */
static unsigned long long rng_next(unsigned long long *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

/* Random windows of seq+1 bytes from tokens[lo, hi). */
static void make_batch(const unsigned char *text, size_t lo, size_t hi, int B, int T,
                       unsigned long long *rng, int32_t *in, int32_t *tg) {
    for (int b = 0; b < B; b++) {
        size_t start = lo + (size_t)(rng_next(rng) % (hi - lo - (size_t)T));
        for (int t = 0; t < T; t++) {
            in[b * T + t] = text[start + t];
            tg[b * T + t] = text[start + t + 1];
        }
    }
}

static float lr_at(const train_args *a, int step) {
    if (step < a->warmup) return a->lr * (float)(step + 1) / (float)a->warmup;
    float progress = (float)(step - a->warmup) / (float)(a->steps - a->warmup > 1 ? a->steps - a->warmup : 1);
    return a->lr * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * progress)));
}

#define TRY(call)                                                                             \
    do {                                                                                      \
        int rc_ = (call);                                                                     \
        if (rc_ != GPTX_OK) {                                                                 \
            fprintf(stderr, "gptx-train: %s failed: %s: %s\n", #call, gptx_status_name(rc_),  \
                    gptx_last_error());                                                       \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv) {
    train_args a;
    if (parse_args(argc, argv, &a)) return 2;
    int L = 4, H = 4, C = 128;
    if (!strcmp(a.preset, "small")) { L = 6; H = 6; C = 192; }
    else if (strcmp(a.preset, "tiny")) {
        fprintf(stderr, "gptx-train: unknown preset '%s' (tiny, small)\n", a.preset);
        return 2;
    }
    if (a.layers) L = a.layers;
    if (a.heads) H = a.heads;
    if (a.width) C = a.width;

    size_t n = 0;
    unsigned char *text = read_file(a.data, &n);
    if (!text) return 1;
    size_t split = (size_t)((double)n * (1.0 - a.val_fraction));
    if (split < (size_t)a.seq + 2 || n - split < (size_t)a.seq + 2) {
        fprintf(stderr, "gptx-train: %s has %zu bytes; too short for --seq %d\n", a.data, n, a.seq);
        free(text);
        return 1;
    }

    int status = 1;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_optimizer *opt = NULL;
    int32_t *in = malloc((size_t)a.batch * a.seq * sizeof *in);
    int32_t *tg = malloc((size_t)a.batch * a.seq * sizeof *tg);
    float *logits = NULL;
    if (!in || !tg) goto done;

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = a.threads;
    TRY(gptx_context_create(&ctx, &co));
    gptx_model_config mc;
    gptx_model_config_init(&mc);
    mc.vocab_size = 256;
    mc.padded_vocab_size = 256;
    mc.context_length = a.seq;
    mc.n_layer = L;
    mc.n_head = H;
    mc.n_embd = C;
    TRY(gptx_model_create(&model, ctx, &mc));
    TRY(gptx_model_init_random(model, a.seed));
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    ao.lr = a.lr;
    ao.weight_decay = a.weight_decay;
    ao.grad_clip = a.grad_clip;
    TRY(gptx_optimizer_create(&opt, model, &ao));

    printf("gptx-train %s | backend %s, %d threads\n", gptx_version(),
           gptx_context_backend_name(ctx), gptx_context_num_threads(ctx));
    printf("data %s: %zu bytes (train %zu, val %zu), byte tokens (vocab 256)\n", a.data, n, split,
           n - split);
    printf("model: %d layers, %d heads, width %d, context %d, %zu parameters\n", L, H, C, a.seq,
           gptx_model_num_parameters(model));
    printf("batch %d x %d tokens, %d steps, lr %g (warm-up %d, cosine to 10%%)\n", a.batch, a.seq,
           a.steps, (double)a.lr, a.warmup);

    unsigned long long rng = a.seed * 0x9E3779B97F4A7C15ull + 1;
    double t_train = 0.0;
    for (int step = 0; step <= a.steps; step++) {
        if (step % a.eval_every == 0 || step == a.steps) {
            unsigned long long vrng = 42; /* the same validation windows every time */
            double vsum = 0.0;
            for (int i = 0; i < a.eval_batches; i++) {
                float vl;
                make_batch(text, split, n, a.batch, a.seq, &vrng, in, tg);
                TRY(gptx_model_forward(model, in, tg, a.batch, a.seq, &vl));
                vsum += vl;
            }
            printf("step %4d | val loss %.4f\n", step, vsum / a.eval_batches);
        }
        if (step == a.steps) break;
        double t0 = now_seconds();
        float loss, norm, lr = lr_at(&a, step);
        make_batch(text, 0, split, a.batch, a.seq, &rng, in, tg);
        TRY(gptx_optimizer_set_lr(opt, lr));
        TRY(gptx_model_zero_grad(model));
        TRY(gptx_model_forward(model, in, tg, a.batch, a.seq, &loss));
        TRY(gptx_model_backward(model, 1.0f));
        TRY(gptx_optimizer_step(opt, model, &norm));
        double dt = now_seconds() - t0;
        t_train += dt;
        if (step % 10 == 0 || step == a.steps - 1)
            printf("step %4d | train loss %.4f | lr %.2e | grad norm %.3f | %.0f ms | %.0f tok/s\n",
                   step, loss, (double)lr, (double)norm, dt * 1e3, a.batch * a.seq / dt);
    }
    printf("training steps only: %.1f s for %d steps, %.0f tok/s on average\n", t_train, a.steps,
           (double)a.steps * a.batch * a.seq / t_train);

    /* sample: top-k (k = 40, temperature 0.8) over the last position's logits */
    size_t plen = strlen(a.prompt);
    size_t total = plen + (size_t)a.sample_tokens;
    int32_t *ctx_ids = malloc(total * sizeof *ctx_ids);
    logits = malloc((size_t)a.seq * 256 * sizeof *logits);
    if (!ctx_ids || !logits) { free(ctx_ids); goto done; }
    for (size_t i = 0; i < plen; i++) ctx_ids[i] = (unsigned char)a.prompt[i];
    printf("sample:\n%s", a.prompt);
    unsigned long long srng = a.seed + 7;
    for (size_t len = plen; len < total; len++) {
        int T = len > (size_t)a.seq ? a.seq : (int)len;
        const int32_t *window = ctx_ids + len - (size_t)T;
        if (gptx_model_forward(model, window, NULL, 1, T, NULL) != GPTX_OK ||
            gptx_model_get_logits(model, logits, (size_t)T * 256) != GPTX_OK) {
            fprintf(stderr, "\ngptx-train: sampling failed: %s\n", gptx_last_error());
            free(ctx_ids);
            goto done;
        }
        const float *row = logits + (size_t)(T - 1) * 256;
        int top[40];
        for (int k = 0; k < 40; k++) {
            int best = -1;
            for (int j = 0; j < 256; j++) {
                int used = 0;
                for (int q = 0; q < k; q++) used |= top[q] == j;
                if (!used && (best < 0 || row[j] > row[best])) best = j;
            }
            top[k] = best;
        }
        double w[40], sum = 0;
        for (int k = 0; k < 40; k++) sum += w[k] = exp((row[top[k]] - row[top[0]]) / 0.8);
        double r = (double)(rng_next(&srng) >> 11) / 9007199254740992.0 * sum;
        int pick = top[39];
        for (int k = 0; k < 40; k++) {
            if (r < w[k]) { pick = top[k]; break; }
            r -= w[k];
        }
        ctx_ids[len] = pick;
        putchar(pick);
    }
    printf("\n");
    free(ctx_ids);
    status = 0;
done:
    free(logits);
    free(in);
    free(tg);
    free(text);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return status;
}
