/* The precision policy as a context option and its record in checkpoints:
 * the CPU backend accepts only fp32; model and training files record the
 * policy they were written under ("precision" in __metadata__), readable
 * with gptx_checkpoint_precision; a file written under another policy loads
 * (values converted) and keeps its record; an unknown record is a format
 * error. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "safetensors.h"
#include "test_util.h"

static void test_options(void) {
    gptx_context *ctx = NULL;
    gptx_context_options o;
    gptx_context_options_init(&o);
    CHECK(o.precision == GPTX_PRECISION_DEFAULT && o.stochastic_rounding == 0);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 1;
    REQUIRE_OK_VOID(gptx_context_create(&ctx, &o));
    CHECK(gptx_context_precision(ctx) == GPTX_PRECISION_FP32); /* DEFAULT resolved */
    gptx_context_destroy(ctx);
    o.precision = GPTX_PRECISION_FP32;
    REQUIRE_OK_VOID(gptx_context_create(&ctx, &o));
    CHECK(gptx_context_precision(ctx) == GPTX_PRECISION_FP32);
    gptx_context_destroy(ctx);
    /* tf32 is a CUDA policy; bf16 and bf16_pure need oneDNN in the build */
    o.precision = GPTX_PRECISION_TF32;
    ctx = NULL;
    CHECK(gptx_context_create(&ctx, &o) == GPTX_ERR_UNSUPPORTED && ctx == NULL);
    CHECK_MSG("tf32");
    CHECK_MSG("fp32, bf16 and bf16_pure");
    int bf16[] = {GPTX_PRECISION_BF16, GPTX_PRECISION_BF16_PURE};
    for (int i = 0; i < 2; i++) {
        o.precision = bf16[i];
        ctx = NULL;
        int rc = gptx_context_create(&ctx, &o);
        if (gptx_features() & GPTX_FEATURE_DNNL) {
            CHECK(rc == GPTX_OK && gptx_context_precision(ctx) == bf16[i]);
        } else {
            CHECK(rc == GPTX_ERR_UNSUPPORTED && ctx == NULL);
            CHECK_MSG(gptx_precision_name(bf16[i]));
            CHECK_MSG("no oneDNN");
        }
        gptx_context_destroy(ctx);
    }
    o.precision = 5;
    CHECK(gptx_context_create(&ctx, &o) == GPTX_ERR_INVALID);
    CHECK_MSG("options.precision is 5");
    o.precision = GPTX_PRECISION_FP32;
    o.stochastic_rounding = 1;
    CHECK(gptx_context_create(&ctx, &o) == GPTX_ERR_INVALID);
    CHECK_MSG("BF16_PURE");
    o.stochastic_rounding = 2;
    CHECK(gptx_context_create(&ctx, &o) == GPTX_ERR_INVALID);
    CHECK(gptx_context_precision(NULL) == GPTX_ERR_NULL);

    const char *names[] = {"default", "fp32", "tf32", "bf16", "bf16_pure"};
    for (int p = 0; p <= GPTX_PRECISION_BF16_PURE; p++) {
        CHECK(strcmp(gptx_precision_name(p), names[p]) == 0);
        CHECK(gptx_precision_from_name(names[p]) == p);
    }
    CHECK(gptx_precision_name(-1) == NULL && gptx_precision_name(5) == NULL);
    CHECK(gptx_precision_from_name("fp16") == GPTX_ERR_INVALID);
    CHECK(gptx_precision_from_name(NULL) == GPTX_ERR_NULL);
}

/* Rewrites the file's `"precision":"fp32"` record in place (same length). */
static int patch_precision(const char *src, const char *dst, const char *value4) {
    size_t n = 0;
    unsigned char *b = read_all(src, &n);
    if (!b) return -1;
    const char *key = "\"precision\":\"fp32\"";
    size_t klen = strlen(key);
    int done = -1;
    for (size_t i = 0; i + klen <= n && i < 65536; i++) {
        if (memcmp(b + i, key, klen) == 0) {
            memcpy(b + i + klen - 5, value4, 4);
            done = write_all(dst, b, n);
            break;
        }
    }
    free(b);
    return done;
}

static void test_record(const scratch_dir *dir) {
    gptx_context *ctx = NULL;
    REQUIRE_OK_VOID(make_cpu_context(&ctx, 2));
    gptx_model *m = NULL, *back = NULL;
    gptx_model_config c = small_config();
    REQUIRE_OK_VOID(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK_VOID(gptx_model_init_random(m, 7));
    const char *model_path = scratch_file(dir, "m.safetensors");
    const char *train_path = scratch_file(dir, "t.safetensors");
    REQUIRE_OK_VOID(gptx_model_save(m, model_path));
    gptx_optimizer *opt = NULL;
    REQUIRE_OK_VOID(gptx_optimizer_create(&opt, m, NULL));
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    REQUIRE_OK_VOID(gptx_checkpoint_save(m, &st, train_path));

    /* written under fp32, recorded as such in the metadata */
    int p = -100;
    REQUIRE_OK_VOID(gptx_checkpoint_precision(model_path, &p));
    CHECK(p == GPTX_PRECISION_FP32);
    p = -100;
    REQUIRE_OK_VOID(gptx_checkpoint_precision(train_path, &p));
    CHECK(p == GPTX_PRECISION_FP32);
    gptx_st_file f;
    REQUIRE_OK_VOID(gptx_st_open(&f, model_path));
    const char *rec = gptx_st_meta(&f, "precision");
    CHECK(rec && strcmp(rec, "fp32") == 0);
    CHECK(gptx_st_meta(&f, "stochastic_rounding") == NULL); /* only for bf16_pure */
    gptx_st_close(&f);

    /* a file written under bf16 loads into an fp32 model: same values,
     * record still readable */
    const char *bf16_model = scratch_file(dir, "m_bf16.safetensors");
    const char *bf16_train = scratch_file(dir, "t_bf16.safetensors");
    REQUIRE_OK_VOID(patch_precision(model_path, bf16_model, "bf16") == 0 ? GPTX_OK : GPTX_ERR_IO);
    REQUIRE_OK_VOID(patch_precision(train_path, bf16_train, "bf16") == 0 ? GPTX_OK : GPTX_ERR_IO);
    REQUIRE_OK_VOID(gptx_checkpoint_precision(bf16_model, &p));
    CHECK(p == GPTX_PRECISION_BF16);
    REQUIRE_OK_VOID(gptx_checkpoint_precision(bf16_train, &p));
    CHECK(p == GPTX_PRECISION_BF16);
    REQUIRE_OK_VOID(gptx_model_load(&back, ctx, bf16_model));
    CHECK(same_params(m, back));
    CHECK_OK(gptx_model_init_random(m, 8)); /* changed, then restored by the load */
    REQUIRE_OK_VOID(gptx_checkpoint_load(m, &st, bf16_train));
    CHECK(same_params(m, back));
    /* saved again from this fp32 context: the new file says fp32 */
    const char *again = scratch_file(dir, "again.safetensors");
    REQUIRE_OK_VOID(gptx_model_save(back, again));
    REQUIRE_OK_VOID(gptx_checkpoint_precision(again, &p));
    CHECK(p == GPTX_PRECISION_FP32);

    /* an unknown record is a format error, for the query and for loads */
    const char *bad = scratch_file(dir, "m_bad.safetensors");
    REQUIRE_OK_VOID(patch_precision(model_path, bad, "fp64") == 0 ? GPTX_OK : GPTX_ERR_IO);
    p = -100;
    CHECK(gptx_checkpoint_precision(bad, &p) == GPTX_ERR_FORMAT && p == -100);
    CHECK_MSG("precision is \"fp64\"");
    CHECK(gptx_model_load_weights(back, bad) == GPTX_ERR_FORMAT);
    CHECK(gptx_checkpoint_precision(NULL, &p) == GPTX_ERR_NULL);
    CHECK(gptx_checkpoint_precision(model_path, NULL) == GPTX_ERR_NULL);
    CHECK(gptx_checkpoint_precision(scratch_file(dir, "missing"), &p) == GPTX_ERR_IO);

    gptx_optimizer_destroy(opt);
    gptx_model_destroy(back);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
}

int main(void) {
    /* the files are edited (their precision record patched): checksums off */
    setenv("GPTX_SKIP_CHECKSUMS", "1", 1);
    test_options();
    scratch_dir dir;
    if (scratch_make(&dir, "precision") != 0) {
        fprintf(stderr, "cannot create a scratch directory\n");
        return 1;
    }
    test_record(&dir);
    scratch_remove(&dir);
    return check_exit("test_ckpt_precision");
}
