/*
 * gptx-generate: prompt -> continuation from a saved model
 * (gptx_model_save / gptx-train's checkpoint), with the library's sampler.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"

#ifndef GPTX_DATA_DIR
#define GPTX_DATA_DIR "data"
#endif

static void usage(void) {
    printf("usage: gptx-generate --model FILE [options]\n"
           "  --model FILE        gptx safetensors model or training checkpoint (required)\n"
           "  --prompt TEXT       text to continue (default \"Every effort moves you\")\n"
           "  --max-tokens N      tokens to generate (default 64)\n"
           "  --temperature X     0 = greedy (default 0.8)\n"
           "  --top-k N           0 = off (default 40)\n"
           "  --top-p X           1 = off (default 1)\n"
           "  --seed N            sampler seed (default 1337)\n"
           "  --backend NAME      cpu (default), cuda or auto\n"
           "  --threads N         CPU threads, 0 = all cores (default 0)\n"
           "  --encoder FILE --vocab FILE   GPT-2 tokenizer files (default %s/gpt2/...)\n",
           GPTX_DATA_DIR);
}

static int number(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!end || *end || errno || !isfinite(x) || x < lo || x > hi) {
        fprintf(stderr, "gptx-generate: %s %s: expected a number in [%g, %g]\n", flag, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt = "Every effort moves you", *backend = "cpu";
    const char *encoder = GPTX_DATA_DIR "/gpt2/encoder.json", *vocab = GPTX_DATA_DIR "/gpt2/vocab.bpe";
    double max_tokens = 64, temperature = 0.8, top_k = 40, top_p = 1.0, seed = 1337, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *k = argv[i];
        if (!strcmp(k, "--help") || !strcmp(k, "-h")) { usage(); return 0; }
        if (i + 1 >= argc) {
            fprintf(stderr, "gptx-generate: %s needs a value (see --help)\n", k);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(k, "--model")) model_path = v;
        else if (!strcmp(k, "--prompt")) prompt = v;
        else if (!strcmp(k, "--backend")) backend = v;
        else if (!strcmp(k, "--encoder")) encoder = v;
        else if (!strcmp(k, "--vocab")) vocab = v;
        else if (!strcmp(k, "--max-tokens")) rc = number(k, v, 0, 1e6, &max_tokens);
        else if (!strcmp(k, "--temperature")) rc = number(k, v, 0, 100, &temperature);
        else if (!strcmp(k, "--top-k")) rc = number(k, v, 0, 1e9, &top_k);
        else if (!strcmp(k, "--top-p")) rc = number(k, v, 1e-6, 1, &top_p);
        else if (!strcmp(k, "--seed")) rc = number(k, v, 0, 9007199254740992.0, &seed);
        else if (!strcmp(k, "--threads")) rc = number(k, v, 0, 4096, &threads);
        else {
            fprintf(stderr, "gptx-generate: unknown option %s (see --help)\n", k);
            return 2;
        }
        if (rc) return 2;
    }
    if (!model_path) {
        fprintf(stderr, "gptx-generate: --model FILE is required (see --help)\n");
        return 2;
    }
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto")) {
        fprintf(stderr, "gptx-generate: --backend %s: expected cpu, cuda or auto\n", backend);
        return 2;
    }

    int status = 1, rc;
    gptx_context *ctx = NULL;
    gptx_model *model = NULL;
    gptx_tokenizer *tok = NULL;
    gptx_sampler *sampler = NULL;
    size_t plen = strlen(prompt), n_ids = 0, n_new = (size_t)max_tokens, need = 0;
    int32_t *ids = malloc((plen + 1) * sizeof *ids), *out = malloc((n_new + 1) * sizeof *out);
    char *text = NULL;
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.backend = !strcmp(backend, "cuda") ? GPTX_BACKEND_CUDA
                 : !strcmp(backend, "auto") ? GPTX_BACKEND_AUTO : GPTX_BACKEND_CPU;
    co.num_threads = (int)threads;
    gptx_sampler_options so;
    gptx_sampler_options_init(&so);
    so.temperature = (float)temperature;
    so.top_k = (int)top_k;
    so.top_p = (float)top_p;
    so.seed = (uint64_t)seed;
    if (!ids || !out) goto done;
    if ((rc = gptx_context_create(&ctx, &co)) || (rc = gptx_model_load(&model, ctx, model_path)) ||
        (rc = gptx_tokenizer_load_gpt2(&tok, encoder, vocab)) ||
        (rc = gptx_sampler_create(&sampler, &so)) ||
        (rc = gptx_tokenizer_encode(tok, prompt, plen, 0, ids, plen + 1, &n_ids)))
        goto fail;
    if (n_ids == 0) ids[n_ids++] = gptx_tokenizer_eot_token(tok);
    if ((rc = gptx_generate(model, sampler, ids, (int)n_ids, (int)n_new, out))) goto fail;
    rc = gptx_tokenizer_decode(tok, out, n_new, NULL, 0, &need);
    if (rc && rc != GPTX_ERR_SHAPE) goto fail;
    if (!(text = malloc(need + 1))) goto done;
    if ((rc = gptx_tokenizer_decode(tok, out, n_new, text, need, &need))) goto fail;
    fwrite(prompt, 1, plen, stdout);
    fwrite(text, 1, need, stdout);
    putchar('\n');
    status = 0;
    goto done;
fail:
    fprintf(stderr, "gptx-generate: %s (%s)\n", gptx_last_error(), gptx_status_name(rc));
done:
    free(text);
    free(ids);
    free(out);
    gptx_sampler_destroy(sampler);
    gptx_tokenizer_destroy(tok);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    return status;
}
