/* The library's reading of a Hugging Face config.json (fuzz_util.h).
 *
 * Input: the text of config.json. gptx_hf_config_parse (lib/io/hf_config.c,
 * what gptx_model_import_hf runs on the config.json beside the weights)
 * reads it; a config it accepts then imports a small Hugging Face model
 * (GPTX_FUZZ_HF_WEIGHTS: width 4, so 1, 2 or 4 heads fit; an untied head,
 * so seeds say "tie_word_embeddings": false) with cfg NULL, the folder's
 * settings. An accepted config has 1..4096 heads and a positive eps, and a
 * model imported with it carries exactly its settings; anything else
 * abort()s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "hf_config.h"
#include "safetensors.h"

#ifndef GPTX_FUZZ_HF_WEIGHTS
#error "GPTX_FUZZ_HF_WEIGHTS must name a small Hugging Face model.safetensors"
#endif

static gptx_context *ctx;
static gptx_st_file weights;

static void broken(const char *what) {
    fprintf(stderr, "config.json: %s (last error: %s)\n", what, gptx_last_error());
    abort();
}

static void setup(void) {
    if (ctx) return;
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 1;
    if (gptx_context_create(&ctx, &o) != GPTX_OK || gptx_st_open(&weights, GPTX_FUZZ_HF_WEIGHTS))
        broken("cannot set up the harness"); /* not the input's fault */
}

int gptx_fuzz_hf_config(const uint8_t *data, size_t size) {
    setup();
    gptx_hf_config hc;
    int accepted = 0;
    if (gptx_hf_config_parse(&hc, (const char *)data, size, "<fuzz input>") == GPTX_OK) {
        accepted++;
        if (hc.n_head < 1 || hc.n_head > 4096) broken("accepted a head count outside [1, 4096]");
        if (!(hc.layernorm_eps > 0)) broken("accepted an eps that is not positive");
        gptx_model *m = NULL;
        if (gptx_import_hf_st(&m, ctx, &weights, NULL, &hc) == GPTX_OK) {
            accepted++;
            gptx_model_config got;
            gptx_model_config_init(&got);
            gptx_model_get_config(m, &got);
            if (got.n_head != hc.n_head || got.layernorm_eps != hc.layernorm_eps ||
                got.tied_head != hc.tied_head)
                broken("the imported model differs from the parsed settings");
        }
        gptx_model_destroy(m);
    }
    return accepted;
}

int gptx_fuzz_hf_config_seeds(const char *dir) {
    static const char *const seeds[][2] = {
        {"seed_gpt2_config.json",
         "{\n  \"activation_function\": \"gelu_new\",\n"
         "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
         "  \"attn_pdrop\": 0.1,\n  \"bos_token_id\": 50256,\n  \"eos_token_id\": 50256,\n"
         "  \"layer_norm_epsilon\": 1e-05,\n  \"model_type\": \"gpt2\",\n  \"n_ctx\": 4,\n"
         "  \"n_embd\": 4,\n  \"n_head\": 2,\n  \"n_layer\": 1,\n  \"n_positions\": 4,\n"
         "  \"tie_word_embeddings\": false,\n  \"vocab_size\": 8\n}\n"},
        {"seed_attention_heads.json",
         "{\"num_attention_heads\":4,\"layer_norm_epsilon\":1e-6,\"tie_word_embeddings\":false}"},
        {"seed_one_head.json",
         "{ \"tie_word_embeddings\" : false , \"n_head\" :\t1 ,\r\n"
         " \"layer_norm_epsilon\": 0.001 }"},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        gptx_fuzz_part p = {(const uint8_t *)seeds[i][1], strlen(seeds[i][1])};
        rc |= gptx_fuzz_write_seed(dir, seeds[i][0], &p, 1, NULL, 0);
    }
    return rc;
}
