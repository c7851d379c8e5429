/* gptx-eval: the loss and perplexity of a model on a text or a token shard.
 *
 * The tokens are cut into windows of --seq T + 1 that overlap by one token,
 * so every token but the first is predicted exactly once, from the tokens
 * before it in its window (at most T); the last, shorter window takes the
 * rest. The loss is the mean cross-entropy over all predicted tokens, in
 * nats; the perplexity is its exponential. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gptx/gptx.h"
#include "prog_data.h"
#include "prog_error.h"
#include "prog_files.h"
#include "prog_inputs.h"
#include "prog_model.h"
#include "prog_text.h"

static void usage(void) {
    printf("usage: gptx-eval --model PATH (--text FILE | --tokens SHARD) [options]\n"
           "  --model PATH        a gptx model or checkpoint, a Hugging Face GPT-2 folder\n"
           "                      (model.safetensors + config.json) or an llm.c .bin model\n"
           "  --text FILE         text to score, GPT-2 BPE tokens; - = standard input\n"
           "  --tokens SHARDS     llm.c token shards (gptx-tokenize's output) instead of --text:\n"
           "                      files, globs, folders, comma-separated, read in sorted order\n"
           PROG_SPECIAL_TOKENS_HELP
           "  --special           the same as --special-tokens allow (its older spelling)\n"
           "  --seq T             positions per window, <= the model's context (default: context)\n"
           "  --batch B           windows per forward pass (default 4)\n"
           "  --max-tokens N      score only the first N tokens (default: all)\n"
           "  --backend NAME      cpu (default), cuda or auto\n"
           "  --threads N         CPU threads, 0 = all cores (default 0)\n"
           "  --encoder FILE --vocab FILE   GPT-2 tokenizer files (default %s/gpt2/...)\n"
           "  --json FILE         also write the results as JSON\n"
           "  --version           the library version\n",
           prog_data_dir());
}

static int number(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    double x = strtod(v, &end);
    if (!end || *end || !(x >= lo && x <= hi) || x != floor(x)) {
        fprintf(stderr, "gptx-eval: %s %s: expected an integer in [%.0f, %.0f]\n", flag, v, lo,
                hi);
        return -1;
    }
    *out = x;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Mean loss of `rows` windows of T + 1 tokens starting T apart at ids. */
static int score(gptx_model *m, const int32_t *ids, int rows, int T, int32_t *in, int32_t *tg,
                 double *sum) {
    for (int r = 0; r < rows; r++) {
        memcpy(in + (size_t)r * T, ids + (size_t)r * T, (size_t)T * sizeof *in);
        memcpy(tg + (size_t)r * T, ids + (size_t)r * T + 1, (size_t)T * sizeof *tg);
    }
    float loss = 0.0f;
    int rc = gptx_model_forward(m, in, tg, rows, T, &loss);
    if (rc == GPTX_OK) *sum += (double)loss * rows * T;
    return rc;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *tokens_path = NULL, *json_path = NULL;
    const char *backend = "cpu";
    const char *encoder = prog_data_path("gpt2/encoder.json"), *vocab = prog_data_path("gpt2/vocab.bpe");
    double seq = 0, batch = 4, max_tokens = 0, threads = 0;
    int special = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) { usage(); return 0; }
        if (!strcmp(k, "--version")) { printf("gptx-eval %s\n", gptx_version()); return 0; }
        if (!strcmp(k, "--special")) { special = 1; continue; }
        const char *known[] = {"--model", "--text", "--tokens", "--seq", "--batch", "--max-tokens",
                               "--backend", "--threads", "--encoder", "--vocab", "--json",
                               "--special-tokens"};
        int is_known = 0;
        for (size_t j = 0; j < sizeof known / sizeof known[0]; j++) is_known |= !strcmp(k, known[j]);
        if (!is_known) {
            fprintf(stderr, "gptx-eval: unknown option %s (see --help)\n", k);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-eval: %s needs a value (see --help)\n", k);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(k, "--model")) model_path = v;
        else if (!strcmp(k, "--text")) text_path = v;
        else if (!strcmp(k, "--tokens")) tokens_path = v;
        else if (!strcmp(k, "--backend")) backend = v;
        else if (!strcmp(k, "--encoder")) encoder = v;
        else if (!strcmp(k, "--vocab")) vocab = v;
        else if (!strcmp(k, "--json")) json_path = v;
        else if (!strcmp(k, "--special-tokens"))
            rc = prog_special_tokens_parse("gptx-eval", v, &special);
        else if (!strcmp(k, "--seq")) rc = number(k, v, 1, 1 << 20, &seq);
        else if (!strcmp(k, "--batch")) rc = number(k, v, 1, 4096, &batch);
        else if (!strcmp(k, "--max-tokens")) rc = number(k, v, 2, 1e15, &max_tokens);
        else if (!strcmp(k, "--threads")) rc = number(k, v, 0, 4096, &threads);
        if (rc) return 2;
    }
    if (!model_path || (!text_path) == (!tokens_path)) {
        fprintf(stderr, "gptx-eval: --model and one of --text or --tokens are required (see "
                        "--help)\n");
        return 2;
    }
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto")) {
        fprintf(stderr, "gptx-eval: --backend %s: expected cpu, cuda or auto\n", backend);
        return 2;
    }

    int status = 1, rc = GPTX_OK;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_tokenizer *tok = NULL;
    int32_t *ids = NULL, *in = NULL, *tg = NULL;
    char *text = NULL;
    size_t n = 0;
    const char *format = "";

    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = !strcmp(backend, "cuda") ? GPTX_BACKEND_CUDA
                 : !strcmp(backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co.num_threads = (int)threads;
    if ((rc = gptx_context_create(&ctx, &co))) goto fail;
    if (prog_model_open("gptx-eval", &model, ctx, model_path, &format) != GPTX_OK) goto done;
    gptx_model_config c;
    gptx_model_config_init(&c);
    if ((rc = gptx_model_get_config(model, &c))) goto fail;

    if (text_path) {
        size_t len = 0;
        if (!(text = prog_read_file("gptx-eval", "--text", text_path, &len))) goto done;
        if ((rc = gptx_tokenizer_load_gpt2(&tok, encoder, vocab))) goto fail;
        ids = malloc((len ? len : 1) * sizeof *ids);
        if (!ids) {
            fprintf(stderr, "gptx-eval: out of memory for %zu token ids\n", len);
            goto done;
        }
        if ((rc = gptx_tokenizer_encode(tok, text, len, special, ids, len ? len : 1, &n))) goto fail;
    } else { /* shards (a list, globs, folders: prog_inputs.h), one after the other */
        prog_inputs shards;
        if (prog_inputs_expand("gptx-eval", "--tokens", tokens_path, &shards)) goto done;
        for (size_t i = 0; i < shards.n && rc == GPTX_OK; i++) {
            int32_t *part = NULL;
            size_t m = 0;
            if ((rc = gptx_shard_read(shards.paths[i], &part, &m))) break;
            int32_t *all = realloc(ids, (n + m + 1) * sizeof *all);
            if (all) {
                ids = all;
                memcpy(ids + n, part, m * sizeof *part);
                n += m;
            }
            gptx_free(part);
            if (!all) {
                fprintf(stderr, "gptx-eval: out of memory for %zu token ids\n", n + m);
                prog_inputs_free(&shards);
                goto done;
            }
        }
        prog_inputs_free(&shards);
        if (rc) goto fail;
    }
    if (max_tokens > 0 && n > (size_t)max_tokens) n = (size_t)max_tokens;
    if (n < 2) {
        fprintf(stderr, "gptx-eval: %s has %zu token%s: at least 2 are needed (one to predict "
                        "from, one to predict)\n",
                text_path ? text_path : tokens_path, n, n == 1 ? "" : "s");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c.vocab_size) {
            fprintf(stderr, "gptx-eval: token %zu is id %d, outside the model's vocabulary of %d "
                            "ids%s\n",
                    i, (int)ids[i], c.vocab_size,
                    text_path ? " (the text was encoded with the GPT-2 tokenizer)" : "");
            goto done;
        }
    int T = seq > 0 ? (int)seq : c.context_length;
    if (T > c.context_length) {
        fprintf(stderr, "gptx-eval: --seq %d is above the model's context length %d\n", T,
                c.context_length);
        goto done;
    }
    int B = (int)batch;
    in = malloc((size_t)B * T * sizeof *in);
    tg = malloc((size_t)B * T * sizeof *tg);
    if (!in || !tg) {
        fprintf(stderr, "gptx-eval: out of memory for a batch of %d x %d\n", B, T);
        goto done;
    }

    size_t predicted = n - 1, full = predicted / (size_t)T, done_w = 0;
    int rest = (int)(predicted % (size_t)T);
    double sum = 0.0, t0 = now_s();
    while (done_w < full) {
        int rows = full - done_w < (size_t)B ? (int)(full - done_w) : B;
        if ((rc = score(model, ids + done_w * (size_t)T, rows, T, in, tg, &sum))) goto fail;
        done_w += (size_t)rows;
    }
    if (rest > 0 && (rc = score(model, ids + full * (size_t)T, 1, rest, in, tg, &sum))) goto fail;
    double secs = now_s() - t0, loss = sum / (double)predicted, ppl = exp(loss);

    printf("model    : %s (%s; %d layers, width %d, %d heads, context %d, vocabulary %d)\n",
           model_path, format, c.n_layer, c.n_embd, c.n_head, c.context_length, c.vocab_size);
    printf("data     : %s, %zu tokens%s%s\n", text_path ? text_path : tokens_path, n,
           text_path ? " (GPT-2 BPE; <|endoftext|>: " : " (llm.c shard)",
           text_path ? (special ? "allow)" : "text)") : "");
    printf("windows  : %zu of %d predicted tokens%s; each token predicted once, from at most %d "
           "before it\n",
           full, T, rest ? " + 1 shorter" : "", T);
    printf("loss     : %.4f nats/token over %zu predicted tokens; perplexity %.2f\n", loss,
           predicted, ppl);
    printf("time     : %.2f s (%.0f tokens/s)\n", secs, secs > 0 ? (double)predicted / secs : 0.0);
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        int ok = f && fprintf(f,
                              "{\"model\": \"%s\", \"format\": \"%s\", \"tokens\": %zu, "
                              "\"predicted\": %zu, \"seq\": %d, \"loss\": %.6f, "
                              "\"perplexity\": %.6f, \"seconds\": %.3f}\n",
                              model_path, format, n, predicted, T, loss, ppl, secs) > 0;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok) {
            fprintf(stderr, "gptx-eval: cannot write --json %s\n", json_path);
            goto done;
        }
    }
    status = 0;
    goto done;
fail:
    fprintf(stderr, "gptx-eval: %s\n", prog_error_text());
done:
    free(in);
    free(tg);
    free(ids);
    free(text);
    gptx_tokenizer_destroy(tok);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return status;
}
