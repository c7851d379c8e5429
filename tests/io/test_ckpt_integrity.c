/* Integrity: a damaged byte anywhere in a gptx file is either a clear error
 * or provably harmless (the loaded model is bit for bit the saved one, with
 * the same configuration; with the metadata under a checksum too, every case
 * here turns out to be an error). A model file is damaged at every 4 KiB-th byte
 * and at every 61st byte of its header, each once with one flipped bit and
 * once with all eight; every damage in the tensor data must be an error (the
 * per-tensor checksums), and the damage to a training checkpoint's moments
 * too. GPTX_SKIP_CHECKSUMS=1 turns the check off (the damaged value loads). */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "checksum.h"
#include "safetensors.h"
#include "test_util.h"

static gptx_context *ctx;
static gptx_model_config cfg;

static int same_config(const gptx_model *m) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    if (gptx_model_get_config(m, &c) != GPTX_OK) return 0;
    return c.vocab_size == cfg.vocab_size && c.padded_vocab_size == cfg.padded_vocab_size &&
           c.context_length == cfg.context_length && c.n_layer == cfg.n_layer &&
           c.n_head == cfg.n_head && c.n_embd == cfg.n_embd && c.qkv_bias == cfg.qkv_bias &&
           c.tied_head == cfg.tied_head && c.mask_padded_logits == cfg.mask_padded_logits &&
           c.layernorm_eps == cfg.layernorm_eps;
}

typedef struct outcome {
    int errors, harmless, silent, data_loaded;
} outcome;

/* Writes good with byte `at` xor `mask` and loads it as a model. */
static void damage_one(const scratch_dir *d, const unsigned char *good, size_t n, size_t at,
                       unsigned char mask, uint64_t data_start, gptx_model *orig, outcome *o) {
    unsigned char *b = malloc(n);
    if (!b) return;
    memcpy(b, good, n);
    b[at] ^= mask;
    const char *path = scratch_file(d, "damaged.safetensors");
    write_all(path, b, n);
    free(b);
    gptx_model *m = NULL;
    int rc = gptx_model_load(&m, ctx, path);
    if (rc != GPTX_OK) {
        if (!strstr(gptx_last_error(), "damaged.safetensors")) {
            fprintf(stderr, "byte %zu ^ 0x%02x: the message does not name the file: %s\n", at, mask,
                    gptx_last_error());
            check_failures++;
        }
        o->errors++;
        return;
    }
    if (at >= data_start) o->data_loaded++;
    if (same_params(m, orig) && same_config(m)) {
        o->harmless++;
    } else {
        fprintf(stderr, "byte %zu ^ 0x%02x: loaded, but the model differs\n", at, mask);
        o->silent++;
    }
    gptx_model_destroy(m);
}

static void test_model_file(const scratch_dir *d) {
    gptx_model *orig = NULL;
    if (gptx_model_create(&orig, ctx, &cfg) != GPTX_OK || gptx_model_init_random(orig, 9)) {
        check_failures++;
        return;
    }
    const char *path = scratch_file(d, "good.safetensors");
    CHECK_OK(gptx_model_save(orig, path));
    size_t n = 0;
    unsigned char *good = read_all(path, &n);
    gptx_st_file f;
    if (!good || gptx_st_open(&f, path) != GPTX_OK) {
        check_failures++;
        free(good);
        gptx_model_destroy(orig);
        return;
    }
    uint64_t data_start = f.data_start;
    gptx_st_close(&f);
    outcome o = {0};
    int cases = 0;
    for (int pass = 0; pass < 2; pass++) {
        unsigned char mask = pass ? 0xFF : 0x10;
        for (size_t at = 0; at < n; at += 4096, cases++)
            damage_one(d, good, n, at, mask, data_start, orig, &o);
        for (size_t at = 1; at < data_start; at += 61, cases++)
            damage_one(d, good, n, at, mask, data_start, orig, &o);
        damage_one(d, good, n, n - 1, mask, data_start, orig, &o); /* the last value's top byte */
        cases++;
    }
    printf("model file of %zu bytes (header %llu): %d damaged copies: %d errors, %d harmless, "
           "%d silent\n", n, (unsigned long long)data_start, cases, o.errors, o.harmless, o.silent);
    CHECK(o.silent == 0);
    CHECK(o.data_loaded == 0); /* every damage to tensor data is caught */
    CHECK(o.errors > 0);

    /* the documented way out: the damaged value loads */
    size_t at = (size_t)data_start + (n - (size_t)data_start) / 2;
    setenv("GPTX_SKIP_CHECKSUMS", "1", 1);
    outcome skip = {0};
    damage_one(d, good, n, at, 0x01, data_start, orig, &skip);
    unsetenv("GPTX_SKIP_CHECKSUMS");
    CHECK(skip.data_loaded == 1 && skip.silent == 1);
    outcome again = {0};
    damage_one(d, good, n, at, 0x01, data_start, orig, &again);
    CHECK(again.errors == 1);
    CHECK_MSG("does not match its checksum");
    free(good);
    gptx_model_destroy(orig);
}

/* A training checkpoint: a byte of the second moments damaged. */
static void test_training_file(const scratch_dir *d) {
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    if (gptx_model_create(&m, ctx, &cfg) || gptx_model_init_random(m, 4) ||
        gptx_optimizer_create(&opt, m, &ao) || train_on_pattern(m, 2)) {
        check_failures++;
        gptx_model_destroy(m);
        return;
    }
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    const char *path = scratch_file(d, "train.safetensors");
    CHECK_OK(gptx_checkpoint_save(m, &st, path));
    gptx_st_file f;
    size_t n = 0;
    unsigned char *b = read_all(path, &n);
    if (b && gptx_st_open(&f, path) == GPTX_OK) {
        const gptx_st_tensor *t = gptx_st_find(&f, "optimizer.v.wte.weight");
        CHECK(t != NULL);
        if (t) b[f.data_start + t->begin + 5] ^= 0x04;
        gptx_st_close(&f);
        write_all(path, b, n);
        gptx_train_state in;
        gptx_train_state_init(&in);
        in.optimizer = opt;
        CHECK_STATUS(gptx_checkpoint_load(m, &in, path), GPTX_ERR_FORMAT);
        CHECK_MSG("optimizer.v.wte.weight");
    } else {
        check_failures++;
    }
    free(b);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
}

/* The sum itself: every single-bit flip of a vector changes it, and so do
 * damages a plain sum of words misses (two words swapped, a zero appended). */
static void test_checksum_function(void) {
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)i * 0.37f - 3.0f;
    uint64_t base = gptx_checksum_f32(x, 64);
    int missed = 0;
    for (int i = 0; i < 64; i++)
        for (int b = 0; b < 32; b++) {
            uint32_t u;
            memcpy(&u, &x[i], 4);
            u ^= 1u << b;
            float saved = x[i];
            memcpy(&x[i], &u, 4);
            missed += gptx_checksum_f32(x, 64) == base;
            x[i] = saved;
        }
    CHECK(missed == 0);
    float swapped[64];
    memcpy(swapped, x, sizeof x);
    memcpy(swapped, x + 2, 2 * sizeof *x); /* words 0 and 1 exchanged */
    memcpy(swapped + 2, x, 2 * sizeof *x);
    CHECK(gptx_checksum_f32(swapped, 64) != base);
    float longer[65];
    memcpy(longer, x, sizeof x);
    longer[64] = 0.0f;
    CHECK(gptx_checksum_f32(longer, 65) != base);
    CHECK(gptx_checksum_bytes("ab", 2) != gptx_checksum_bytes("ba", 2));
    CHECK(gptx_checksum_bytes("a", 1) != gptx_checksum_bytes("a\0", 2));
}

/* A training file's user metadata (gptx-train's run configuration) is under
 * the metadata checksum: a damaged digit of "--lr 0.001" cannot resume a run
 * with another learning rate. */
static void test_user_metadata_damage(const scratch_dir *d) {
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &cfg) || gptx_model_init_random(m, 4)) {
        check_failures++;
        return;
    }
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.user_metadata = "--lr 0.001\n";
    const char *path = scratch_file(d, "user.safetensors");
    CHECK_OK(gptx_checkpoint_save(m, &st, path));
    size_t n = 0;
    unsigned char *b = read_all(path, &n);
    unsigned char *at = NULL;
    for (size_t i = 0; b && i + 10 <= n && !at; i++)
        if (!memcmp(b + i, "--lr 0.001", 10)) at = b + i;
    CHECK(at != NULL);
    if (at) {
        at[9] = '3';
        write_all(path, b, n);
        char buf[64];
        size_t len = 0;
        CHECK_STATUS(gptx_checkpoint_user_metadata(path, buf, sizeof buf, &len), GPTX_ERR_FORMAT);
        CHECK_MSG("metadata does not match its checksum");
        gptx_train_state in;
        gptx_train_state_init(&in);
        CHECK_STATUS(gptx_checkpoint_load(m, &in, path), GPTX_ERR_FORMAT);
    }
    free(b);
    gptx_model_destroy(m);
}

int main(void) {
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    cfg = small_config();
    scratch_dir dir;
    if (scratch_make(&dir, "integrity") != 0) return 1;
    test_model_file(&dir);
    test_training_file(&dir);
    test_user_metadata_damage(&dir);
    test_checksum_function();
    scratch_remove(&dir);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_integrity");
}
