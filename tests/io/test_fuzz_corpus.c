/* Replays every file of the fuzz corpus (tests/io/corpus: the seed
 * files and any input the fuzzer ever crashed on) through the fuzzer's own
 * entry point, gptx_fuzz_one_input (tests/support/fuzz_replay.h). Under
 * ASan/UBSan this is the regression test for the bugs the fuzzer found.
 * Seeds ("seed_*") must be accepted by exactly the loaders they are made
 * for, so they stay valid starting points for the fuzzer (and match its
 * fixed model).
 *
 *   test_fuzz_corpus DIR                 replay
 *   test_fuzz_corpus DIR --write-seeds   (re)create the seed files in DIR */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "fuzz_entry.h"
#include "fuzz_replay.h"
#include "safetensors.h"

static int fetch_host(void *ud, const gptx_st_entry *e, float *dst) {
    (void)ud;
    memcpy(dst, e->src, e->numel * sizeof *dst);
    return GPTX_OK;
}

/* A Hugging Face style F16 file of the model (Conv1D weights transposed). */
static int write_hf_seed(const gptx_model *m, const char *path) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c);
    int nt = gptx_model_num_tensors(m);
    gptx_st_entry *e = calloc((size_t)nt + 1, sizeof *e);
    float **bufs = calloc((size_t)nt + 1, sizeof *bufs);
    char(*names)[80] = calloc((size_t)nt + 1, sizeof *names);
    for (int i = 0; i < nt; i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        float *p = malloc(info.numel * sizeof *p), *t = malloc(info.numel * sizeof *t);
        gptx_model_get_parameter(m, info.name, p, info.numel);
        snprintf(names[i], sizeof names[i], "%s", info.name);
        e[i] = (gptx_st_entry){names[i], GPTX_ST_F16, info.ndim, {info.shape[0], info.shape[1]},
                               info.numel, p};
        const char *n = info.name;
        int conv = strstr(n, "c_attn.weight") || strstr(n, "c_proj.weight") || strstr(n, "c_fc.weight");
        if (conv) {
            size_t out = (size_t)info.shape[0], in = (size_t)info.shape[1];
            for (size_t r = 0; r < out; r++)
                for (size_t k = 0; k < in; k++) t[k * out + r] = p[r * in + k];
            e[i].shape[0] = (int64_t)in;
            e[i].shape[1] = (int64_t)out;
            e[i].src = t;
            free(p);
            p = t;
        } else {
            free(t);
        }
        if (strcmp(n, "wte.weight") == 0 || strcmp(n, "lm_head.weight") == 0) {
            e[i].shape[0] = c.vocab_size;
            e[i].numel = (size_t)c.vocab_size * (size_t)c.n_embd;
        }
        bufs[i] = p;
    }
    static float masked = -1e4f;
    e[nt] = (gptx_st_entry){"h.0.attn.masked_bias", GPTX_ST_F16, 0, {0}, 1, &masked};
    const char *meta[] = {"format", "pt"};
    int rc = gptx_st_write(path, e, (size_t)nt + 1, meta, 1, fetch_host, NULL);
    for (int i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    free(names);
    free(e);
    return rc;
}

/* llm.c files need a tied head: the same sizes with tied_head = 1. */
static int write_llmc_seed(gptx_context *ctx, const char *path, int version) {
    gptx_model_config c = gptx_fuzz_config();
    c.tied_head = 1;
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK) return -1;
    gptx_model_init_random(m, 2);
    int32_t header[256] = {20240326, version, c.context_length, c.vocab_size, c.n_layer,
                           c.n_head, c.n_embd, c.padded_vocab_size};
    FILE *f = fopen(path, "wb");
    fwrite(header, sizeof header, 1, f);
    /* one layer: llm.c's order equals the canonical tensor order here */
    const char *order[16] = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                             "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias",
                             "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias", "h.0.ln_2.weight",
                             "h.0.ln_2.bias", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
                             "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias", "ln_f.weight",
                             "ln_f.bias"};
    for (int k = 0; k < 16; k++) {
        int idx;
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_find_tensor(m, order[k], &idx);
        gptx_model_tensor_info(m, idx, &info);
        float *p = malloc(info.numel * sizeof *p);
        gptx_model_get_parameter(m, order[k], p, info.numel);
        for (size_t i = 0; i < info.numel; i++) {
            if (version == 3) {
                fwrite(&p[i], 4, 1, f);
            } else {
                uint16_t b = gptx_f32_to_bf16(p[i]);
                fwrite(&b, 2, 1, f);
            }
        }
        free(p);
    }
    gptx_model_destroy(m);
    return fclose(f);
}

static int write_seeds(const char *dir) {
    gptx_context *ctx = NULL;
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    gptx_model_config c = gptx_fuzz_config();
    REQUIRE_OK(gptx_context_create(&ctx, NULL));
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 1));
    REQUIRE_OK(gptx_optimizer_create(&opt, m, NULL));
    /* one step so the moments are not all zero */
    int32_t ids[4] = {1, 2, 3, 4}, tgt[4] = {2, 3, 4, 5};
    REQUIRE_OK(gptx_model_forward(m, ids, tgt, 1, 4, NULL));
    REQUIRE_OK(gptx_model_backward(m, 1.0f));
    REQUIRE_OK(gptx_optimizer_step(opt, m, NULL));
    char p[512];
    snprintf(p, sizeof p, "%s/seed_model.safetensors", dir);
    REQUIRE_OK(gptx_model_save(m, p));
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    st.lr_schedule_step = 1;
    st.tokens_seen = 4;
    snprintf(p, sizeof p, "%s/seed_training.safetensors", dir);
    REQUIRE_OK(gptx_checkpoint_save(m, &st, p));
    snprintf(p, sizeof p, "%s/seed_hf_f16.safetensors", dir);
    REQUIRE_OK(write_hf_seed(m, p));
    snprintf(p, sizeof p, "%s/seed_llmc_v3.bin", dir);
    if (write_llmc_seed(ctx, p, 3) != 0) return 1;
    snprintf(p, sizeof p, "%s/seed_llmc_v5.bin", dir);
    if (write_llmc_seed(ctx, p, 5) != 0) return 1;
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    printf("seeds written to %s\n", dir);
    return 0;
}

/* How many of the five loaders each seed must pass: a model file loads as
 * weights and as a new model (gptx_checkpoint_load wants optimizer state it
 * lacks); a training file also restores the optimizer; the others import. */
static int expected_accepts(const char *name) {
    if (strcmp(name, "seed_model.safetensors") == 0) return 2;
    if (strcmp(name, "seed_training.safetensors") == 0) return 3;
    return 1;
}

static int seed_ok(const char *name, int accepted) { return accepted == expected_accepts(name); }

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [--write-seeds]\n", argv[0]);
        return 2;
    }
    if (argc == 3 && strcmp(argv[2], "--write-seeds") == 0) return write_seeds(argv[1]);
    check_failures += fuzz_replay_dir(argv[1], gptx_fuzz_one_input, seed_ok, 5);
    gptx_fuzz_cleanup();
    return check_exit("test_fuzz_corpus");
}
