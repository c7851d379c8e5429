/* Atomic writes: a save that fails at any point (simulated full disk at
 * several byte counts, missing directory, target that is a directory,
 * read-only directory) returns GPTX_ERR_IO, leaves the previous checkpoint
 * byte-for-byte in place and loadable, and leaves no temp file behind. */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "atomic_file.h"
#include "check.h"
#include "ckpt_util.h"
#include "safetensors.h"
#include "test_util.h"

static void test_afile_basics(const scratch_dir *dir) {
    gptx_afile f;
    const char *p = scratch_file(dir, "plain.bin");
    CHECK_OK(gptx_afile_open(&f, p));
    CHECK(scratch_has_temp(dir));
    CHECK_OK(gptx_afile_write(&f, "abc", 3));
    gptx_afile_abort(&f);
    CHECK(!scratch_has_temp(dir) && access(p, F_OK) != 0);
    gptx_afile_abort(&f); /* twice is harmless */
    CHECK_STATUS(gptx_afile_write(&f, "x", 1), GPTX_ERR_STATE);
    CHECK_OK(gptx_afile_open(&f, p));
    CHECK_OK(gptx_afile_write(&f, "abcd", 4));
    /* a header filled in afterwards: only bytes already written may change */
    CHECK_OK(gptx_afile_pwrite(&f, 1, "XY", 2));
    CHECK_STATUS(gptx_afile_pwrite(&f, 3, "XY", 2), GPTX_ERR_STATE);
    CHECK_OK(gptx_afile_commit(&f));
    size_t n = 0;
    unsigned char *b = read_all(p, &n);
    CHECK(b && n == 4 && memcmp(b, "aXYd", 4) == 0);
    free(b);
    CHECK(!scratch_has_temp(dir));
    unlink(p);
}

static void test_failing_saves(gptx_context *ctx, const scratch_dir *dir) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL, *check = NULL, *v1 = NULL;
    gptx_optimizer *opt = NULL, *check_opt = NULL;
    REQUIRE_OK_VOID(gptx_model_create(&m, ctx, &c));
    REQUIRE_OK_VOID(gptx_model_create(&v1, ctx, &c));
    REQUIRE_OK_VOID(gptx_model_create(&check, ctx, &c));
    REQUIRE_OK_VOID(gptx_optimizer_create(&opt, m, NULL));
    REQUIRE_OK_VOID(gptx_optimizer_create(&check_opt, check, NULL));
    CHECK_OK(gptx_model_init_random(m, 1));
    CHECK_OK(gptx_model_init_random(v1, 1));
    gptx_train_state st;
    gptx_train_state_init(&st);
    st.optimizer = opt;
    st.tokens_seen = 100;
    const char *path = scratch_file(dir, "ckpt.safetensors");
    CHECK_OK(gptx_checkpoint_save(m, &st, path));
    size_t n1 = 0;
    unsigned char *v1_bytes = read_all(path, &n1);
    CHECK(v1_bytes && n1 > 1000);
    if (!v1_bytes) goto done;

    /* the new save differs in every tensor */
    CHECK_OK(gptx_model_init_random(m, 2));
    st.tokens_seen = 200;
    gptx_st_file f;
    CHECK_OK(gptx_st_open(&f, path));
    uint64_t header_end = f.data_start;
    gptx_st_close(&f);
    const int64_t fail_at[] = {0, 1, 8, 20, (int64_t)header_end, (int64_t)header_end + 3,
                               (int64_t)n1 / 2, (int64_t)n1 - 1};
    for (size_t i = 0; i < sizeof fail_at / sizeof fail_at[0]; i++) {
        gptx_afile_fail_after_for_testing(fail_at[i]);
        CHECK_STATUS(gptx_checkpoint_save(m, &st, path), GPTX_ERR_IO);
        CHECK_MSG("ckpt.safetensors");
        gptx_afile_fail_after_for_testing(-1);
        size_t n = 0;
        unsigned char *now = read_all(path, &n);
        CHECK(now && n == n1 && memcmp(now, v1_bytes, n1) == 0);
        free(now);
        CHECK(!scratch_has_temp(dir));
        CHECK(scratch_count(dir) == 1);
        gptx_train_state cs;
        gptx_train_state_init(&cs);
        cs.optimizer = check_opt;
        CHECK_OK(gptx_checkpoint_load(check, &cs, path));
        CHECK(cs.tokens_seen == 100);
        CHECK(same_params(check, v1));
    }
    /* the same save without the failure replaces the file */
    CHECK_OK(gptx_checkpoint_save(m, &st, path));
    CHECK_OK(gptx_model_load_weights(check, path));
    CHECK(same_params(check, m));
    CHECK(scratch_count(dir) == 1 && !scratch_has_temp(dir));

    /* a directory that does not exist */
    CHECK_STATUS(gptx_model_save(m, scratch_file(dir, "no/such/dir/x.safetensors")), GPTX_ERR_IO);
    CHECK_MSG("no/such/dir' does not exist"); /* the folder, not the temporary file */
    CHECK(strstr(gptx_last_error(), ".tmp.") == NULL);
    /* a "folder" that is a file */
    CHECK_STATUS(gptx_model_save(m, scratch_file(dir, "ckpt.safetensors/x.safetensors")),
                 GPTX_ERR_IO);
    CHECK_MSG("ckpt.safetensors' is not a folder");
    /* the target is a directory: refused before anything is written */
    const char *sub = scratch_file(dir, "subdir");
    CHECK(mkdir(sub, 0755) == 0);
    CHECK_STATUS(gptx_model_save(m, sub), GPTX_ERR_IO);
    CHECK_MSG("it is a directory, not a regular file");
    CHECK(!scratch_has_temp(dir));
    /* a read-only directory (root may write anyway: then it must just work) */
    CHECK(chmod(sub, 0555) == 0);
    const char *ro = scratch_file(dir, "subdir/x.safetensors");
    if (access(sub, W_OK) != 0) {
        CHECK_STATUS(gptx_model_save(m, ro), GPTX_ERR_IO);
        CHECK(access(ro, F_OK) != 0);
    } else {
        CHECK_OK(gptx_model_save(m, ro));
        unlink(ro);
    }
    chmod(sub, 0755);
    rmdir(sub);
done:
    free(v1_bytes);
    gptx_optimizer_destroy(opt);
    gptx_optimizer_destroy(check_opt);
    gptx_model_destroy(m);
    gptx_model_destroy(v1);
    gptx_model_destroy(check);
}

/* Temp files of writers killed mid-save: the next save of the same path on
 * this host removes those whose pid is dead, and only those (a live
 * writer's, another host's, another file's stay). */
static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("half a checkpoint", f);
        fclose(f);
    }
}

static void test_stale_temps(gptx_context *ctx, const scratch_dir *dir) {
    gptx_model_config c = small_config();
    gptx_model *m = NULL;
    if (gptx_model_create(&m, ctx, &c) != GPTX_OK) {
        check_failures++;
        return;
    }
    char host[72];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *ch = host; *ch; ch++)
        if (*ch == '/' || *ch == '.') *ch = '_';
    pid_t child = fork(); /* a pid that is certainly dead once reaped */
    if (child == 0) _exit(0);
    waitpid(child, NULL, 0);
    const char *path = scratch_file(dir, "stale.safetensors");
    char dead[512], alive[512], other_host[512], other_file[512];
    snprintf(dead, sizeof dead, "%s.tmp.%s.%ld", path, host, (long)child);
    snprintf(alive, sizeof alive, "%s.tmp.%s.%ld", path, host, (long)getppid());
    snprintf(other_host, sizeof other_host, "%s.tmp.otherhost%s.%ld", path, host, (long)child);
    snprintf(other_file, sizeof other_file, "%s.tmp.%s.%ld", scratch_file(dir, "else.safetensors"),
             host, (long)child);
    touch(dead);
    touch(alive);
    touch(other_host);
    touch(other_file);
    CHECK_OK(gptx_model_save(m, path));
    CHECK(access(dead, F_OK) != 0);
    CHECK(access(alive, F_OK) == 0 && access(other_host, F_OK) == 0 &&
          access(other_file, F_OK) == 0);
    unlink(alive);
    unlink(other_host);
    unlink(other_file);
    unlink(path);
    gptx_model_destroy(m);
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    scratch_dir dir;
    if (scratch_make(&dir, "atomic") != 0) return 1;
    test_afile_basics(&dir);
    test_failing_saves(ctx, &dir);
    test_stale_temps(ctx, &dir);
    scratch_remove(&dir);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_atomic");
}
