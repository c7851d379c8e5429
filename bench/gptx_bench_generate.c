/*
 * gptx-bench-generate: generation speed of the CPU backend, with the
 * key/value cache and without it, next to the memory-bandwidth bound.
 *
 * Model: GPT-2 124M shape (12 layers, 12 heads, width 768, context 1024,
 * vocab 50257 padded to 50304, tied head), random initialisation (seed 42)
 * or --model FILE; batch 1; greedy decoding (the sampler's cost is part of
 * each step). A prompt of --prompt random ids, then --new tokens:
 *   prefill  the pass over the prompt (the generator's first logits);
 *   decode   each later token: one position of the model with the cache;
 *            with --uncached-tokens K > 0, also K tokens without the cache
 *            (the whole window per token: gptx 0.1's generation), timed the
 *            same way;
 *   bound    bytes a decode step must read from memory (every weight matrix
 *            once, lm_head = wte once, plus the cached keys and values at
 *            the run's mean position) / the machine's read bandwidth,
 *            measured in the same run by summing a buffer of that size and
 *            one of 2 GiB (beyond the caches) on --threads threads.
 * --save-model FILE writes the weights (gptx safetensors) for
 * bench/torch_bench_generate.py to load, so both run the same numbers.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "gptx/gptx.h"
#include "prog_flags.h"

#define PROG "gptx-bench-generate"

typedef struct {
    int threads, prompt, n_new, uncached;
    const char *precision, *json, *model, *save;
} args;

static int parse(args *a, int argc, char **argv) {
    static const args defaults = {2, 64, 256, 0, "fp32", NULL, NULL, NULL};
#define ROW(field, name, kind, lo, hi, choices, arg, help) \
    PROG_FLAG_ROW(args, field, name, kind, lo, hi, choices, arg, help, 0, 0)
    static const prog_flag rows[] = {
        ROW(threads, "--threads", PROG_FLAG_INT, 0, 4096, NULL, NULL, "CPU threads, 0 = all cores"),
        ROW(prompt, "--prompt", PROG_FLAG_INT, 1, 1024, NULL, NULL, "random prompt ids"),
        ROW(n_new, "--new", PROG_FLAG_INT, 2, 1 << 20, NULL, NULL, "tokens generated"),
        ROW(uncached, "--uncached-tokens", PROG_FLAG_INT, 0, 1 << 20, NULL, "K",
            "also K tokens without the key/value cache"),
        ROW(precision, "--precision", PROG_FLAG_CHOICE, 0, 0, "fp32|bf16|bf16_pure", NULL,
            "the context's precision policy"),
        ROW(model, "--model", PROG_FLAG_STR, 0, 0, NULL, "FILE",
            "weights to load (default: GPT-2 124M shape, random)"),
        ROW(save, "--save-model", PROG_FLAG_STR, 0, 0, NULL, "FILE",
            "write the weights for bench/torch_bench_generate.py"),
        ROW(json, "--json", PROG_FLAG_STR, 0, 0, NULL, "FILE", "also write the figures to FILE"),
    };
#undef ROW
    static const prog_cli cli = {PROG, "usage: " PROG " [options]\n"
                                       "Generation speed with and without the key/value cache.\n",
                                 rows, sizeof rows / sizeof rows[0], NULL};
    *a = defaults;
    int rc = prog_flags_parse(&cli, a, NULL, argc, argv, &defaults);
    return rc == 0 ? -1 : rc == 1 ? PROG_EXIT_OK : PROG_EXIT_USAGE;
}

/* ---- read bandwidth ----------------------------------------------------------- */

typedef struct {
    const float *p;
    size_t n;
    double sum;
} read_part;

static void *read_task(void *vp) {
    read_part *r = vp;
    float acc[16] = {0};
    size_t i = 0;
    for (; i + 16 <= r->n; i += 16)
        for (int k = 0; k < 16; k++) acc[k] += r->p[i + k];
    double s = 0.0;
    for (int k = 0; k < 16; k++) s += acc[k];
    r->sum = s;
    return NULL;
}

/* Median GB/s of 5 reads of buf (bytes) split across threads. */
static double read_bandwidth(const float *buf, size_t bytes, int threads, double *checksum) {
    size_t n = bytes / sizeof(float);
    double t[5];
    read_part parts[64];
    pthread_t tid[64];
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = bench_now_s();
        for (int k = 0; k < threads; k++) {
            size_t lo = n * (size_t)k / (size_t)threads, hi = n * (size_t)(k + 1) / (size_t)threads;
            parts[k] = (read_part){buf + lo, hi - lo, 0.0};
            pthread_create(&tid[k], NULL, read_task, &parts[k]);
        }
        for (int k = 0; k < threads; k++) pthread_join(tid[k], NULL);
        t[rep] = bench_now_s() - t0;
        for (int k = 0; k < threads; k++) *checksum += parts[k].sum;
    }
    return (double)bytes / bench_median(t, 5) * 1e-9;
}

static int measure_bandwidth(size_t bytes, int threads, double *gbps) {
    float *buf = malloc(bytes);
    if (!buf) return -1;
    for (size_t i = 0; i < bytes / sizeof(float); i++) buf[i] = (float)(i & 1023) * 1e-3f;
    double checksum = 0.0;
    read_bandwidth(buf, bytes, threads, &checksum); /* first touch, warm-up */
    *gbps = read_bandwidth(buf, bytes, threads, &checksum);
    free(buf);
    return checksum == 12345.678 ? 1 : 0; /* keeps the sums alive */
}

/* ---- generation ------------------------------------------------------------- */

typedef struct {
    double prefill_s, decode_s;
    long long prefill_tokens, decode_tokens, slides;
    int32_t first[8]; /* the first tokens generated, to compare with PyTorch's */
} gen_result;

static int generate(gptx_model *m, const int32_t *prompt, int n_prompt, int n_new, int use_cache,
                    gen_result *r) {
    gptx_generator_options go;
    gptx_generator_options_init(&go);
    go.use_cache = use_cache;
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = 0.0f;
    gptx_generator *g = NULL;
    gptx_sampler *s = NULL;
    int rc = gptx_generator_create(&g, m, &go);
    if (!rc) rc = gptx_sampler_create(&s, &so);
    if (!rc) rc = gptx_generator_feed(g, prompt, n_prompt);
    int32_t tok;
    for (int i = 0; i < n_new && !rc; i++) {
        rc = gptx_generator_next(g, s, &tok);
        if (i < 8) r->first[i] = tok;
    }
    gptx_generator_stats st;
    gptx_generator_stats_init(&st);
    if (!rc) rc = gptx_generator_get_stats(g, &st);
    if (!rc) {
        r->prefill_s = st.prefill_seconds;
        r->prefill_tokens = st.prefill_tokens;
        r->decode_s = st.decode_seconds;
        r->decode_tokens = st.decode_passes;
        r->slides = st.slides;
    }
    gptx_sampler_destroy(s);
    gptx_generator_destroy(g);
    return rc;
}

#define CK(call)                                                                             \
    do {                                                                                     \
        int ck_ = (call);                                                                    \
        if (ck_ != GPTX_OK) {                                                                \
            fprintf(stderr, PROG ": %s: %s (%s)\n", #call, gptx_last_error(),                \
                    gptx_status_name(ck_));                                                  \
            return 1;                                                                        \
        }                                                                                    \
    } while (0)

int main(int argc, char **argv) {
    args a;
    int prc = parse(&a, argc, argv);
    if (prc >= 0) return prc;
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = GPTX_BACKEND_CPU;
    co.num_threads = a.threads;
    co.precision = gptx_precision_from_name(a.precision);
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    CK(gptx_context_create(&ctx, &co));
    if (a.model) {
        CK(gptx_model_load(&m, ctx, a.model));
    } else {
        gptx_model_config cfg;
        gptx_model_config_init(&cfg); /* GPT-2 124M */
        CK(gptx_model_create(&m, ctx, &cfg));
        CK(gptx_model_init_random(m, 42));
    }
    if (a.save) CK(gptx_model_save(m, a.save));
    gptx_model_config cfg;
    gptx_model_config_init(&cfg);
    CK(gptx_model_get_config(m, &cfg));
    gptx_context_info info;
    gptx_context_info_init(&info);
    CK(gptx_context_get_info(ctx, &info));

    int32_t *prompt = malloc((size_t)a.prompt * sizeof *prompt);
    if (!prompt) return 1;
    uint64_t x = 1234;
    for (int i = 0; i < a.prompt; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        prompt[i] = (int32_t)(((x * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)cfg.vocab_size);
    }
    /* bytes a decode step reads: the weight matrices once, and the keys and
     * values of the cached positions (at the run's mean position) */
    size_t wbytes = info.precision == GPTX_PRECISION_FP32 ? 4 : 2;
    double C = cfg.n_embd, pmat = (double)cfg.n_layer * 12 * C * C + (double)cfg.padded_vocab_size * C;
    double mean_pos = a.prompt + a.n_new / 2.0;
    if (mean_pos > cfg.context_length) mean_pos = cfg.context_length;
    double weight_bytes = pmat * (double)wbytes;
    double kv_bytes = 2.0 * cfg.n_layer * mean_pos * C * (double)wbytes;

    gen_result warm, cached, uncached = {0};
    CK(generate(m, prompt, a.prompt, 8, 1, &warm)); /* first touch of the buffers */
    CK(generate(m, prompt, a.prompt, a.n_new, 1, &cached));
    if (a.uncached > 0) CK(generate(m, prompt, a.prompt, a.uncached + 1, 0, &uncached));
    double bw_model = 0.0, bw_big = 0.0;
    if (measure_bandwidth((size_t)(weight_bytes + kv_bytes), a.threads ? a.threads : 2, &bw_model) <
            0 ||
        measure_bandwidth((size_t)2 << 30, a.threads ? a.threads : 2, &bw_big) < 0) {
        fprintf(stderr, PROG ": out of memory for the bandwidth buffers\n");
        return 1;
    }
    double decode_tps = cached.decode_tokens / cached.decode_s;
    double prefill_tps = cached.prefill_tokens / cached.prefill_s;
    double uncached_tps = a.uncached > 0 ? uncached.decode_tokens / uncached.decode_s : 0.0;
    double bound_tps = bw_big * 1e9 / (weight_bytes + kv_bytes);
    double bound_model_tps = bw_model * 1e9 / (weight_bytes + kv_bytes);

    printf(PROG ": gptx %s, CPU backend, %d threads, precision %s, products %s (bf16 in hardware: "
           "%s)\n",
           gptx_version(), gptx_context_num_threads(ctx), gptx_precision_name(info.precision),
           info.products, info.bf16_native ? "yes" : "no");
    printf("model       : %s, %d layers, %d heads, width %d, context %d, vocab %d (padded %d), "
           "%zu parameters\n",
           a.model ? a.model : "random init (seed 42)", cfg.n_layer, cfg.n_head, cfg.n_embd,
           cfg.context_length, cfg.vocab_size, cfg.padded_vocab_size, gptx_model_num_parameters(m));
    printf("run         : batch 1, prompt %d tokens, %d new tokens, greedy; %lld window slides\n",
           a.prompt, a.n_new, cached.slides);
    printf("prefill     : %lld tokens in %.4f s = %.1f tokens/s\n", cached.prefill_tokens,
           cached.prefill_s, prefill_tps);
    printf("decode      : %lld tokens in %.4f s = %.2f tokens/s (%.2f ms/token), key/value cache\n",
           cached.decode_tokens, cached.decode_s, decode_tps, 1e3 / decode_tps);
    if (a.uncached > 0)
        printf("no cache    : %lld tokens in %.4f s = %.3f tokens/s (%.1f ms/token): the cache is "
               "%.1fx faster\n",
               uncached.decode_tokens, uncached.decode_s, uncached_tps, 1e3 / uncached_tps,
               decode_tps / uncached_tps);
    printf("first tokens: [%d, %d, %d, %d, %d, %d, %d, %d]\n", cached.first[0], cached.first[1],
           cached.first[2], cached.first[3], cached.first[4], cached.first[5], cached.first[6],
           cached.first[7]);
    printf("bytes/token : %.1f MB weights (%zu bytes each) + %.1f MB keys/values at position %.0f\n",
           weight_bytes * 1e-6, wbytes, kv_bytes * 1e-6, mean_pos);
    printf("bandwidth   : %.1f GB/s reading 2 GiB, %.1f GB/s reading %.0f MB (%d threads)\n", bw_big,
           bw_model, (weight_bytes + kv_bytes) * 1e-6, a.threads ? a.threads : 2);
    printf("bound       : %.1f tokens/s at 2 GiB bandwidth (decode at %.0f %% of it, %.2fx the "
           "bound's time), %.1f at the model-sized buffer's\n",
           bound_tps, 100 * decode_tps / bound_tps, bound_tps / decode_tps, bound_model_tps);
    if (a.json) {
        FILE *f = fopen(a.json, "w");
        if (!f) {
            fprintf(stderr, PROG ": cannot write %s\n", a.json);
            return 1;
        }
        fprintf(f,
                "{\n  \"implementation\": \"gptx\", \"version\": \"%s\", \"precision\": \"%s\",\n"
                "  \"threads\": %d, \"prompt\": %d, \"new\": %d, \"products\": \"%s\",\n"
                "  \"prefill_tokens\": %lld, \"prefill_s\": %.6f, \"prefill_tokens_per_s\": %.3f,\n"
                "  \"decode_tokens\": %lld, \"decode_s\": %.6f, \"decode_tokens_per_s\": %.4f,\n"
                "  \"uncached_tokens\": %lld, \"uncached_s\": %.6f, \"uncached_tokens_per_s\": %.5f,\n"
                "  \"weight_bytes\": %.0f, \"kv_bytes\": %.0f, \"bandwidth_2gib_gbps\": %.3f,\n"
                "  \"bandwidth_model_gbps\": %.3f, \"bound_tokens_per_s\": %.3f\n}\n",
                gptx_version(), gptx_precision_name(info.precision),
                gptx_context_num_threads(ctx), a.prompt, a.n_new, info.products,
                cached.prefill_tokens, cached.prefill_s, prefill_tps, cached.decode_tokens,
                cached.decode_s, decode_tps, uncached.decode_tokens, uncached.decode_s,
                uncached_tps, weight_bytes, kv_bytes, bw_big, bw_model, bound_tps);
        fclose(f);
    }
    free(prompt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return 0;
}
