/* Model files: save -> load gives the same config, bitwise the same weights
 * and logits; the file is plain safetensors with the documented metadata;
 * a file for another config is a mismatch; fp16/bf16 conversion is exact. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "safetensors.h"
#include "test_util.h"

static void test_dtype_conversion(void) {
    CHECK(gptx_f16_to_f32(0x3c00) == 1.0f);
    CHECK(gptx_f16_to_f32(0xc000) == -2.0f);
    CHECK(gptx_f16_to_f32(0x7bff) == 65504.0f);
    CHECK(gptx_f16_to_f32(0x0001) == 0x1p-24f);
    CHECK(gptx_f16_to_f32(0x0400) == 0x1p-14f);
    CHECK(gptx_f16_to_f32(0x7c00) == INFINITY);
    CHECK(isnan(gptx_f16_to_f32(0x7e00)));
    CHECK(gptx_f16_to_f32(0x8000) == 0.0f && signbit(gptx_f16_to_f32(0x8000)));
    /* every half converts to float and back unchanged */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gptx_f16_to_f32((uint16_t)h);
        if (isnan(f) ? !isnan(gptx_f16_to_f32(gptx_f32_to_f16(f))) : gptx_f32_to_f16(f) != h) bad++;
        float b = gptx_bf16_to_f32((uint16_t)h);
        if (isnan(b) ? !isnan(gptx_bf16_to_f32(gptx_f32_to_bf16(b))) : gptx_f32_to_bf16(b) != h) bad++;
    }
    CHECK(bad == 0);
    /* round to nearest, ties to even */
    CHECK(gptx_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);
    CHECK(gptx_f32_to_f16(1.0f + 3 * 0x1p-11f) == 0x3c02);
    CHECK(gptx_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01);
    CHECK(gptx_f32_to_f16(65519.0f) == 0x7bff);
    CHECK(gptx_f32_to_f16(65520.0f) == 0x7c00);
    CHECK(gptx_f32_to_f16(-1e30f) == 0xfc00);
    CHECK(gptx_f32_to_f16(0x1p-25f) == 0x0000);
    CHECK(gptx_f32_to_f16(3 * 0x1p-25f) == 0x0002);
    CHECK(gptx_f32_to_f16(0x1p-14f - 0x1p-26f) == 0x0400); /* rounds up into the normals */
    CHECK(gptx_f32_to_bf16(1.0f) == 0x3f80);
    CHECK(gptx_f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
    CHECK(gptx_f32_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3f82);
    CHECK(gptx_bf16_to_f32(0xbf80) == -1.0f);
}

static int configs_equal(const gptx_model_config *a, const gptx_model_config *b) {
    return a->vocab_size == b->vocab_size && a->padded_vocab_size == b->padded_vocab_size &&
           a->context_length == b->context_length && a->n_layer == b->n_layer &&
           a->n_head == b->n_head && a->n_embd == b->n_embd && a->qkv_bias == b->qkv_bias &&
           a->tied_head == b->tied_head && a->mask_padded_logits == b->mask_padded_logits &&
           a->layernorm_eps == b->layernorm_eps;
}

/* Logits of a fixed batch (B=2, T=8); malloc'ed. */
static float *logits_of(gptx_model *m, size_t *n) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c);
    int32_t ids[16];
    fill_tokens(ids, 16, c.vocab_size, 7);
    *n = (size_t)16 * (size_t)c.padded_vocab_size;
    float *out = malloc(*n * sizeof *out);
    if (gptx_model_forward(m, ids, NULL, 2, 8, NULL) != GPTX_OK ||
        gptx_model_get_logits(m, out, *n) != GPTX_OK) {
        free(out);
        return NULL;
    }
    return out;
}

static void check_file_layout(const char *path, const gptx_model *m, const gptx_model_config *c) {
    gptx_st_file f;
    CHECK_OK(gptx_st_open(&f, path));
    if (!f.json) return;
    const char *v;
    CHECK((v = gptx_st_meta(&f, "format")) && strcmp(v, "gptx") == 0);
    CHECK((v = gptx_st_meta(&f, "format_version")) && strcmp(v, "1") == 0);
    CHECK((v = gptx_st_meta(&f, "kind")) && strcmp(v, "model") == 0);
    CHECK((v = gptx_st_meta(&f, "dtype")) && strcmp(v, "float32") == 0);
    CHECK((v = gptx_st_meta(&f, "gptx_version")) && strcmp(v, gptx_version()) == 0);
    CHECK((v = gptx_st_meta(&f, "n_embd")) && atoi(v) == c->n_embd);
    CHECK((v = gptx_st_meta(&f, "tied_head")) && atoi(v) == c->tied_head);
    CHECK((v = gptx_st_meta(&f, "layernorm_eps")) && strtof(v, NULL) == c->layernorm_eps);
    CHECK(gptx_st_meta(&f, "optimizer") == NULL);
    CHECK(f.data_start % 8 == 0);
    CHECK(f.ntensors == (size_t)gptx_model_num_tensors(m));
    CHECK((gptx_st_find(&f, "lm_head.weight") != NULL) == !c->tied_head);
    for (int i = 0; i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        const gptx_st_tensor *t = gptx_st_find(&f, info.name);
        CHECK(t && t->dtype == GPTX_ST_F32 && t->ndim == info.ndim && t->shape[0] == info.shape[0] &&
              (info.ndim == 1 || t->shape[1] == info.shape[1]));
    }
    gptx_st_close(&f);
}

static void test_roundtrip(gptx_context *ctx, const scratch_dir *dir, gptx_model_config c,
                           const char *label) {
    gptx_model *a = NULL, *b = NULL, *d = NULL;
    const char *path = scratch_file(dir, label);
    if (gptx_model_create(&a, ctx, &c) != GPTX_OK) {
        fprintf(stderr, "%s: create failed: %s\n", label, gptx_last_error());
        check_failures++;
        return;
    }
    CHECK_OK(gptx_model_init_random(a, 42));
    CHECK_OK(gptx_model_save(a, path));
    check_file_layout(path, a, &c);

    CHECK_OK(gptx_model_load(&b, ctx, path));
    if (b) {
        gptx_model_config ca, cb;
        gptx_model_config_init(&ca);
        gptx_model_config_init(&cb);
        gptx_model_get_config(a, &ca); /* normalised: padded 0 -> vocab */
        gptx_model_get_config(b, &cb);
        CHECK(configs_equal(&ca, &cb));
        CHECK(same_params(a, b));
        size_t na = 0, nb = 0;
        float *la = logits_of(a, &na), *lb = logits_of(b, &nb);
        CHECK(la && lb && na == nb && memcmp(la, lb, na * sizeof *la) == 0);
        free(la);
        free(lb);
    }
    /* into an existing model with other weights */
    CHECK_OK(gptx_model_create(&d, ctx, &c));
    CHECK_OK(gptx_model_init_random(d, 9));
    CHECK(!same_params(a, d));
    CHECK_OK(gptx_model_load_weights(d, path));
    CHECK(same_params(a, d));
    /* saving over an existing file replaces it */
    CHECK_OK(gptx_model_init_random(a, 43));
    CHECK_OK(gptx_model_save(a, path));
    CHECK_OK(gptx_model_load_weights(d, path));
    CHECK(same_params(a, d));
    CHECK(!scratch_has_temp(dir));
    gptx_model_destroy(a);
    gptx_model_destroy(b);
    gptx_model_destroy(d);
}

static void test_mismatch(gptx_context *ctx, const scratch_dir *dir) {
    gptx_model_config c = small_config();
    gptx_model *a = NULL, *b = NULL;
    const char *path = scratch_file(dir, "mismatch.safetensors");
    REQUIRE_OK_VOID(gptx_model_create(&a, ctx, &c));
    CHECK_OK(gptx_model_init_random(a, 1));
    CHECK_OK(gptx_model_save(a, path));
    struct {
        const char *field;
        gptx_model_config cfg;
    } cases[6];
    for (int i = 0; i < 6; i++) cases[i].cfg = small_config();
    cases[0].field = "n_embd", cases[0].cfg.n_embd = 32;
    cases[1].field = "mask_padded_logits", cases[1].cfg.mask_padded_logits = 0;
    cases[2].field = "layernorm_eps", cases[2].cfg.layernorm_eps = 1e-6f;
    cases[3].field = "tied_head", cases[3].cfg.tied_head = 0;
    cases[4].field = "vocab_size", cases[4].cfg.vocab_size = 49;
    cases[5].field = "n_head", cases[5].cfg.n_head = 4;
    for (int i = 0; i < 6; i++) {
        if (gptx_model_create(&b, ctx, &cases[i].cfg) != GPTX_OK) {
            check_failures++;
            continue;
        }
        CHECK_OK(gptx_model_init_random(b, 5));
        size_t n0;
        float *before = all_params(b, &n0);
        CHECK_STATUS(gptx_model_load_weights(b, path), GPTX_ERR_MISMATCH);
        CHECK_MSG(cases[i].field);
        CHECK_MSG("mismatch.safetensors");
        size_t n1;
        float *after = all_params(b, &n1);
        CHECK(before && after && memcmp(before, after, n0 * sizeof *before) == 0);
        free(before);
        free(after);
        gptx_model_destroy(b);
        b = NULL;
    }
    gptx_model_destroy(a);
}

static void test_bad_arguments(gptx_context *ctx, const scratch_dir *dir) {
    gptx_model_config c = small_config();
    gptx_model *a = NULL, *out = (gptx_model *)1;
    REQUIRE_OK_VOID(gptx_model_create(&a, ctx, &c));
    CHECK_STATUS(gptx_model_save(NULL, "x"), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_save(a, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_save(a, ""), GPTX_ERR_INVALID);
    CHECK_STATUS(gptx_model_load(NULL, ctx, "x"), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_load(&out, NULL, "x"), GPTX_ERR_NULL);
    CHECK(out == NULL);
    CHECK_STATUS(gptx_model_load(&out, ctx, NULL), GPTX_ERR_NULL);
    const char *missing = scratch_file(dir, "does_not_exist.safetensors");
    out = (gptx_model *)1;
    CHECK_STATUS(gptx_model_load(&out, ctx, missing), GPTX_ERR_IO);
    CHECK(out == NULL);
    CHECK_MSG("does_not_exist.safetensors");
    CHECK_STATUS(gptx_model_load_weights(a, missing), GPTX_ERR_IO);
    CHECK_STATUS(gptx_model_load_weights(NULL, missing), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_load_weights(a, dir->path), GPTX_ERR_IO); /* a directory */
    CHECK_STATUS(gptx_model_import_hf(&out, ctx, missing, NULL), GPTX_ERR_IO);
    CHECK_STATUS(gptx_model_import_hf(NULL, ctx, missing, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_model_import_llmc(&out, ctx, missing), GPTX_ERR_IO);
    CHECK_STATUS(gptx_model_import_llmc(&out, NULL, missing), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_checkpoint_save(NULL, NULL, "x"), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_checkpoint_load(a, NULL, NULL), GPTX_ERR_NULL);
    gptx_train_state st;
    gptx_train_state_init(&st);
    gptx_train_state_init(NULL);
    CHECK(st.struct_size == sizeof st && st.optimizer == NULL && st.tokens_seen == 0);
    st.struct_size = 0;
    CHECK_STATUS(gptx_checkpoint_save(a, &st, scratch_file(dir, "never")), GPTX_ERR_INVALID);
    CHECK_MSG("struct_size");
    /* an optimizer of another model */
    gptx_model *other = NULL;
    gptx_optimizer *opt = NULL;
    CHECK_OK(gptx_model_create(&other, ctx, &c));
    CHECK_OK(gptx_optimizer_create(&opt, other, NULL));
    gptx_train_state_init(&st);
    st.optimizer = opt;
    CHECK_STATUS(gptx_checkpoint_save(a, &st, scratch_file(dir, "never")), GPTX_ERR_MISMATCH);
    CHECK(access(scratch_file(dir, "never"), F_OK) != 0);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(other);
    gptx_model_destroy(a);
}

int main(void) {
    test_dtype_conversion();
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 2));
    scratch_dir dir;
    if (scratch_make(&dir, "roundtrip") != 0) {
        fprintf(stderr, "cannot create a scratch directory\n");
        return 1;
    }
    test_roundtrip(ctx, &dir, small_config(), "tied_bias.safetensors");
    gptx_model_config c = small_config();
    c.tied_head = 0;
    c.qkv_bias = 0;
    c.layernorm_eps = 1.2345678e-5f; /* must survive the text form exactly */
    test_roundtrip(ctx, &dir, c, "untied_nobias.safetensors");
    c = small_config();
    c.padded_vocab_size = 0; /* = vocab */
    c.mask_padded_logits = 0;
    c.n_layer = 1;
    c.n_head = 4;
    test_roundtrip(ctx, &dir, c, "unpadded.safetensors");
    test_mismatch(ctx, &dir);
    test_bad_arguments(ctx, &dir);
    scratch_remove(&dir);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_roundtrip");
}
