/* See fuzz_entry.h. */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "fuzz_entry.h"

#include <stdlib.h>

#include "safetensors.h"

static gptx_context *ctx;
static gptx_model *model;
static gptx_optimizer *opt;

gptx_model_config gptx_fuzz_config(void) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.vocab_size = 8;
    c.padded_vocab_size = 12;
    c.context_length = 4;
    c.n_layer = 1;
    c.n_head = 1;
    c.n_embd = 4;
    c.tied_head = 0;
    return c;
}

static int setup(void) {
    if (model) return 0;
    /* past the checksums, which would stop nearly every mutated gptx file
     * before the checks the fuzzer is here to reach (test_ckpt_integrity
     * covers the checksums) */
    setenv("GPTX_SKIP_CHECKSUMS", "1", 1);
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 1;
    gptx_model_config c = gptx_fuzz_config();
    if (gptx_context_create(&ctx, &o) != GPTX_OK || gptx_model_create(&model, ctx, &c) != GPTX_OK ||
        gptx_optimizer_create(&opt, model, NULL) != GPTX_OK) {
        gptx_fuzz_cleanup();
        return -1;
    }
    return 0;
}

void gptx_fuzz_cleanup(void) {
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(model);
    gptx_context_destroy(ctx);
    opt = NULL;
    model = NULL;
    ctx = NULL;
}

int gptx_fuzz_one_input(const uint8_t *data, size_t size) {
    if (setup() != 0) abort(); /* not the input's fault: the harness is broken */
    int accepted = 0;
    gptx_src src;
    gptx_src_open_memory(&src, data, size, "<fuzz input>");
    gptx_st_file f;
    if (gptx_st_parse(&f, &src) == GPTX_OK) {
        accepted += gptx_ckpt_load_weights_st(model, &f) == GPTX_OK;
        gptx_train_state st;
        gptx_train_state_init(&st);
        st.optimizer = opt;
        accepted += gptx_ckpt_load_st(model, &st, &f) == GPTX_OK;
        gptx_model *m = NULL;
        if (gptx_ckpt_model_load_st(&m, ctx, &f) == GPTX_OK) accepted++;
        gptx_model_destroy(m);
        m = NULL;
        gptx_model_config c = gptx_fuzz_config();
        c.padded_vocab_size = 0; /* = the file's vocabulary */
        if (gptx_import_hf_st(&m, ctx, &f, &c, NULL) == GPTX_OK) accepted++;
        gptx_model_destroy(m);
        gptx_st_close(&f);
    }
    gptx_model *m = NULL;
    if (gptx_import_llmc_src(&m, ctx, &src) == GPTX_OK) accepted++;
    gptx_model_destroy(m);
    return accepted;
}
