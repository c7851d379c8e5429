/* The application's own record in a training checkpoint
 * (gptx_train_state.user_metadata, gptx_checkpoint_user_metadata): stored
 * verbatim (newlines, quotes, backslashes, UTF-8) and read back; its length
 * can be asked first; a buffer one byte short is GPTX_ERR_SHAPE and is not
 * written past; model files and checkpoints saved without it are
 * GPTX_ERR_NOT_FOUND; strings the format cannot hold (invalid UTF-8, longer
 * than GPTX_USER_METADATA_MAX) are refused before anything is written, and
 * loading a checkpoint leaves the caller's pointer alone. Also the other
 * counts of a training file's metadata: never negative. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "test_util.h"

static const char record[] =
    "gptx-train run configuration 1\n--text /data/\"quoted\" \\ path\n--prompt Ünïcödé ✓ 𝄞\n"
    "best_val_loss 5.25\n";

static void test_roundtrip(gptx_model *m, gptx_optimizer *opt, const scratch_dir *d) {
    const char *path = scratch_file(d, "ckpt.safetensors");
    gptx_train_state st;
    gptx_train_state_init(&st);
    CHECK(st.user_metadata == NULL); /* the default: none */
    st.optimizer = opt;
    st.user_metadata = record;
    CHECK_OK(gptx_checkpoint_save(m, &st, path));

    size_t len = 0;
    CHECK_STATUS(gptx_checkpoint_user_metadata(path, NULL, 0, &len), GPTX_ERR_SHAPE);
    CHECK(len == strlen(record));
    char *buf = malloc(len + 8);
    if (!buf) return;
    memset(buf, 0x5A, len + 8);
    /* one byte short (no room for the NUL): refused, nothing written */
    CHECK_STATUS(gptx_checkpoint_user_metadata(path, buf, len, &len), GPTX_ERR_SHAPE);
    CHECK_MSG("takes");
    CHECK((unsigned char)buf[0] == 0x5A && (unsigned char)buf[len - 1] == 0x5A);
    CHECK_OK(gptx_checkpoint_user_metadata(path, buf, len + 1, &len));
    CHECK(len == strlen(record) && memcmp(buf, record, len + 1) == 0);
    CHECK((unsigned char)buf[len + 1] == 0x5A);
    free(buf);

    /* loading restores the training state and leaves user_metadata as it was */
    gptx_train_state in;
    gptx_train_state_init(&in);
    in.optimizer = opt;
    const char *mine = "the caller's";
    in.user_metadata = mine;
    CHECK_OK(gptx_checkpoint_load(m, &in, path));
    CHECK(in.user_metadata == mine);

    CHECK_STATUS(gptx_checkpoint_user_metadata(path, NULL, 0, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_checkpoint_user_metadata(path, NULL, 4, &len), GPTX_ERR_NULL);
}

static void test_absent(gptx_model *m, gptx_optimizer *opt, const scratch_dir *d) {
    size_t len = 99;
    char buf[16];
    const char *plain = scratch_file(d, "plain.safetensors");
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    CHECK_OK(gptx_checkpoint_save(m, &st, plain));
    CHECK_STATUS(gptx_checkpoint_user_metadata(plain, buf, sizeof buf, &len), GPTX_ERR_NOT_FOUND);
    CHECK_MSG("saved without st->user_metadata");

    const char *model = scratch_file(d, "model.safetensors");
    CHECK_OK(gptx_model_save(m, model));
    CHECK_STATUS(gptx_checkpoint_user_metadata(model, buf, sizeof buf, &len), GPTX_ERR_NOT_FOUND);
    CHECK_MSG("a model file");

    CHECK_STATUS(gptx_checkpoint_user_metadata(scratch_file(d, "missing"), buf, sizeof buf, &len),
                 GPTX_ERR_IO);
}

static void test_refused(gptx_model *m, const scratch_dir *d) {
    const char *path = scratch_file(d, "bad.safetensors");
    gptx_train_state st;
    gptx_train_state_init(&st);
    const char *bad_utf8[] = {"ok then \xff", "\xc3", "\xe2\x9c", "\xc0\x80", "a\xed\x80z"};
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
        st.user_metadata = bad_utf8[i];
        CHECK_STATUS(gptx_checkpoint_save(m, &st, path), GPTX_ERR_INVALID);
        CHECK_MSG("not valid UTF-8");
    }
    size_t big = (size_t)GPTX_USER_METADATA_MAX + 1;
    char *s = malloc(big + 1);
    if (!s) return;
    memset(s, 'x', big);
    s[big] = '\0';
    st.user_metadata = s;
    CHECK_STATUS(gptx_checkpoint_save(m, &st, path), GPTX_ERR_INVALID);
    CHECK_MSG("GPTX_USER_METADATA_MAX");
    s[big - 1] = '\0'; /* exactly the maximum is fine */
    CHECK_OK(gptx_checkpoint_save(m, &st, path));
    size_t len = 0;
    CHECK_STATUS(gptx_checkpoint_user_metadata(path, NULL, 0, &len), GPTX_ERR_SHAPE);
    CHECK(len == GPTX_USER_METADATA_MAX);
    free(s);
    CHECK(access(scratch_file(d, "bad.safetensors"), F_OK) == 0);
}

/* The schedule position and token count are counts: negative ones are
 * refused when saving, and a file that has them (damaged, hand-edited) does
 * not load. The file is edited in place: "200" -> "-20" keeps its length. */
static void test_negative_counts(gptx_model *m, gptx_optimizer *opt, const scratch_dir *d) {
    const char *path = scratch_file(d, "counts.safetensors");
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    st.tokens_seen = -1;
    CHECK_STATUS(gptx_checkpoint_save(m, &st, path), GPTX_ERR_INVALID);
    CHECK_MSG("negative");
    const char *keys[] = {"tokens_seen", "lr_schedule_step"};
    for (int k = 0; k < 2; k++) {
        st.tokens_seen = 200;
        st.lr_schedule_step = 200;
        CHECK_OK(gptx_checkpoint_save(m, &st, path));
        size_t n = 0;
        unsigned char *b = read_all(path, &n);
        if (!b) {
            check_failures++;
            return;
        }
        char want[64];
        snprintf(want, sizeof want, "\"%s\":\"200\"", keys[k]);
        unsigned char *at = NULL;
        for (size_t i = 0; i + strlen(want) <= n && !at; i++)
            if (!memcmp(b + i, want, strlen(want))) at = b + i;
        CHECK(at != NULL);
        if (at) memcpy(at + strlen(want) - 4, "-20", 3);
        FILE *f = fopen(path, "wb");
        if (f) {
            fwrite(b, 1, n, f);
            fclose(f);
        }
        free(b);
        gptx_train_state in;
        gptx_train_state_init(&in);
        in.optimizer = opt;
        CHECK_STATUS(gptx_checkpoint_load(m, &in, path), GPTX_ERR_FORMAT);
        CHECK_MSG("checksum"); /* the edit is damage to the checksummed metadata */
        setenv("GPTX_SKIP_CHECKSUMS", "1", 1); /* and the range check behind it */
        CHECK_STATUS(gptx_checkpoint_load(m, &in, path), GPTX_ERR_FORMAT);
        CHECK_MSG(keys[k]);
        unsetenv("GPTX_SKIP_CHECKSUMS");
    }
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    gptx_optimizer *opt = NULL;
    gptx_adamw_options ao;
    gptx_adamw_options_init(&ao);
    REQUIRE_OK(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(m, 3));
    REQUIRE_OK(gptx_optimizer_create(&opt, m, &ao));
    scratch_dir dir;
    if (scratch_make(&dir, "usermeta") != 0) return 1;
    test_roundtrip(m, opt, &dir);
    test_absent(m, opt, &dir);
    test_refused(m, &dir);
    test_negative_counts(m, opt, &dir);
    scratch_remove(&dir);
    gptx_optimizer_destroy(opt);
    gptx_model_destroy(m);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_user_metadata");
}
