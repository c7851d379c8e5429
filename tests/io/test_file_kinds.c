/* What is at a path decides what a save or a load does with it
 * (lib/io/atomic_file.h, lib/io/file_read.h; issue 25, items 4, 6, 11):
 * - a save to a symbolic link (absolute, relative to the link's folder, a
 *   chain, a dangling one) writes the file the link points to, atomically in
 *   that file's folder, and the link stays the same link;
 * - a save to a FIFO, a device, a link to a device or a loop of links is
 *   GPTX_ERR_IO naming what is there, and nothing is replaced, for
 *   gptx_model_save, gptx_checkpoint_save and gptx_shard_write alike; a
 *   FIFO put at the path during a save is not replaced either;
 * - a load of a FIFO or a device is GPTX_ERR_IO at once (never a wait for a
 *   writer, never an endless read);
 * - llm.c's shards and state files given as a model are named. */
#define _DEFAULT_SOURCE /* mkfifo, symlink, mknod, makedev */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "atomic_file.h"
#include "check.h"
#include "ckpt_util.h"
#include "test_util.h"

static const char *p_(const scratch_dir *d, const char *name) { return scratch_file(d, name); }

static int is_link_to(const char *link, const char *target) {
    struct stat st;
    char buf[512];
    ssize_t n = readlink(link, buf, sizeof buf - 1);
    if (lstat(link, &st) != 0 || !S_ISLNK(st.st_mode) || n < 0) return 0;
    buf[n] = '\0';
    return strcmp(buf, target) == 0;
}

static int kind_is(const char *path, unsigned kind) {
    struct stat st;
    return lstat(path, &st) == 0 && (st.st_mode & S_IFMT) == kind;
}

/* The model at path loads and holds m's parameters. */
static int holds(gptx_context *ctx, const char *path, const gptx_model *m) {
    gptx_model *back = NULL;
    int ok = gptx_model_load(&back, ctx, path) == GPTX_OK && same_params(back, m);
    gptx_model_destroy(back);
    return ok;
}

static void test_links(gptx_context *ctx, const scratch_dir *d, gptx_model *m1, gptx_model *m2) {
    CHECK(mkdir(p_(d, "real"), 0755) == 0);
    /* absolute */
    char abs_target[400];
    snprintf(abs_target, sizeof abs_target, "%s", p_(d, "real/a.safetensors"));
    CHECK_OK(gptx_model_save(m1, abs_target));
    CHECK(symlink(abs_target, p_(d, "abs")) == 0);
    CHECK_OK(gptx_model_save(m2, p_(d, "abs")));
    CHECK(is_link_to(p_(d, "abs"), abs_target));
    CHECK(kind_is(abs_target, S_IFREG) && holds(ctx, abs_target, m2));
    /* relative: to the link's folder, not to the working folder */
    CHECK(symlink("real/r.safetensors", p_(d, "rel")) == 0);
    CHECK(write_all(p_(d, "real/r.safetensors"), "old", 3) == 0);
    CHECK_OK(gptx_model_save(m1, p_(d, "rel")));
    CHECK(is_link_to(p_(d, "rel"), "real/r.safetensors"));
    CHECK(holds(ctx, p_(d, "real/r.safetensors"), m1));
    /* a chain of two links */
    CHECK(symlink("rel", p_(d, "chain")) == 0);
    CHECK_OK(gptx_model_save(m2, p_(d, "chain")));
    CHECK(is_link_to(p_(d, "chain"), "rel") && is_link_to(p_(d, "rel"), "real/r.safetensors"));
    CHECK(holds(ctx, p_(d, "real/r.safetensors"), m2));
    /* dangling: the file it names is created (as "> link" in a shell does) */
    CHECK(symlink("real/new.safetensors", p_(d, "dangling")) == 0);
    CHECK_OK(gptx_model_save(m1, p_(d, "dangling")));
    CHECK(is_link_to(p_(d, "dangling"), "real/new.safetensors"));
    CHECK(holds(ctx, p_(d, "real/new.safetensors"), m1));
    /* a training checkpoint and a shard through a link */
    gptx_train_state st;
    gptx_train_state_init(&st);
    CHECK_OK(gptx_checkpoint_save(m1, &st, p_(d, "chain")));
    CHECK(is_link_to(p_(d, "chain"), "rel"));
    int32_t ids[4] = {1, 2, 3, 4};
    CHECK(symlink("real/s.bin", p_(d, "shard")) == 0);
    CHECK_OK(gptx_shard_write(p_(d, "shard"), ids, 4));
    CHECK(is_link_to(p_(d, "shard"), "real/s.bin") && kind_is(p_(d, "real/s.bin"), S_IFREG));
    /* a loop of links */
    CHECK(symlink("loop_b", p_(d, "loop_a")) == 0 && symlink("loop_a", p_(d, "loop_b")) == 0);
    CHECK_STATUS(gptx_model_save(m1, p_(d, "loop_a")), GPTX_ERR_IO);
    CHECK_MSG("symbolic links");
    CHECK(is_link_to(p_(d, "loop_a"), "loop_b"));
    scratch_dir real;
    snprintf(real.path, sizeof real.path, "%s", p_(d, "real"));
    CHECK(!scratch_has_temp(d) && !scratch_has_temp(&real));
    scratch_remove(&real);
}

static void test_refused(const scratch_dir *d, gptx_model *m) {
    gptx_train_state st;
    gptx_train_state_init(&st);
    int32_t ids[4] = {1, 2, 3, 4};
    const char *fifo = p_(d, "fifo");
    CHECK(mkfifo(fifo, 0644) == 0);
    CHECK_STATUS(gptx_model_save(m, fifo), GPTX_ERR_IO);
    CHECK_MSG("it is a FIFO (named pipe), not a regular file");
    CHECK_STATUS(gptx_checkpoint_save(m, &st, fifo), GPTX_ERR_IO);
    CHECK_MSG("FIFO");
    CHECK_STATUS(gptx_shard_write(fifo, ids, 4), GPTX_ERR_IO);
    CHECK_MSG("FIFO");
    CHECK(kind_is(fifo, S_IFIFO));
    /* a link to a device: the device is not replaced, nor the link */
    CHECK(symlink("/dev/null", p_(d, "to_null")) == 0);
    CHECK_STATUS(gptx_model_save(m, p_(d, "to_null")), GPTX_ERR_IO);
    CHECK_MSG("(a link to '/dev/null'): it is a character device");
    CHECK(is_link_to(p_(d, "to_null"), "/dev/null") && kind_is("/dev/null", S_IFCHR));
    /* a device node itself (where this user may make one: root) */
    const char *node = p_(d, "null_node");
    if (mknod(node, S_IFCHR | 0666, makedev(1, 3)) == 0) {
        CHECK_STATUS(gptx_model_save(m, node), GPTX_ERR_IO);
        CHECK_MSG("character device");
        CHECK(kind_is(node, S_IFCHR));
    }
    /* a FIFO made at the path while the save was being written */
    const char *late = p_(d, "late.safetensors");
    gptx_afile f;
    CHECK_OK(gptx_afile_open(&f, late));
    CHECK_OK(gptx_afile_write(&f, "data", 4));
    CHECK(mkfifo(late, 0644) == 0);
    CHECK_STATUS(gptx_afile_commit(&f), GPTX_ERR_IO);
    CHECK_MSG("it is now a FIFO");
    CHECK(kind_is(late, S_IFIFO));
    CHECK(!scratch_has_temp(d));
}

/* gptx_file_save, the writer programs use for their own records: the same
 * rules as the library's saves (a link kept, its target written; a FIFO or a
 * link to a device refused and left as it is). */
static void test_file_save(const scratch_dir *d) {
    CHECK(mkdir(p_(d, "rec"), 0755) == 0);
    CHECK(symlink("rec/metrics.jsonl", p_(d, "metrics_link")) == 0);
    CHECK_OK(gptx_file_save(p_(d, "metrics_link"), "{\"a\": 1}\n", 9));
    CHECK(is_link_to(p_(d, "metrics_link"), "rec/metrics.jsonl"));
    char buf[16] = {0};
    FILE *f = fopen(p_(d, "rec/metrics.jsonl"), "r");
    CHECK(f && fread(buf, 1, sizeof buf - 1, f) == 9 && !strcmp(buf, "{\"a\": 1}\n"));
    if (f) fclose(f);
    CHECK_OK(gptx_file_save(p_(d, "empty"), NULL, 0));
    CHECK(kind_is(p_(d, "empty"), S_IFREG));
    CHECK_STATUS(gptx_file_save(p_(d, "empty"), NULL, 3), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_file_save(p_(d, "fifo"), "x", 1), GPTX_ERR_IO); /* made by test_refused */
    CHECK_MSG("FIFO");
    CHECK(kind_is(p_(d, "fifo"), S_IFIFO));
    CHECK_STATUS(gptx_file_save(p_(d, "to_null"), "x", 1), GPTX_ERR_IO);
    CHECK(is_link_to(p_(d, "to_null"), "/dev/null"));
    CHECK(!scratch_has_temp(d));
}

/* Loads of what is not a regular file end at once: an alarm fails the test
 * where one would wait for a FIFO's writer. */
static void test_loads(gptx_context *ctx, const scratch_dir *d) {
    gptx_model *m = NULL;
    const char *fifo = p_(d, "fifo");
    alarm(20);
    CHECK_STATUS(gptx_model_load(&m, ctx, fifo), GPTX_ERR_IO);
    CHECK_MSG("is a FIFO (named pipe), not a regular file");
    CHECK_STATUS(gptx_model_import_llmc(&m, ctx, fifo), GPTX_ERR_IO);
    CHECK_MSG("FIFO");
    CHECK_STATUS(gptx_model_load(&m, ctx, "/dev/zero"), GPTX_ERR_IO);
    CHECK_MSG("'/dev/zero' is a character device, not a regular file");
    alarm(0);
    CHECK(m == NULL);
}

/* llm.c's other files given as a model: named by their magic (docs/checkpoints.md). */
static void test_llmc_magics(gptx_context *ctx, const scratch_dir *d) {
    struct {
        int32_t magic;
        const char *says;
    } cases[] = {{20240520, "is an llm.c token shard (magic 20240520), not a safetensors file"},
                 {20240327, "is an llm.c debug state file (magic 20240327)"},
                 {20240326, "gptx_model_import_llmc"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t head[256] = {cases[i].magic, i == 0 ? 1 : 3, 1000};
        const char *path = p_(d, "llmc.bin");
        CHECK(write_all(path, head, sizeof head) == 0);
        gptx_model *m = NULL;
        CHECK_STATUS(gptx_model_load(&m, ctx, path), GPTX_ERR_FORMAT);
        CHECK_MSG(cases[i].says);
        unlink(path);
    }
}

int main(void) {
    gptx_context *ctx = NULL;
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    scratch_dir dir;
    if (scratch_make(&dir, "kinds") != 0) return 1;
    gptx_model_config c = small_config();
    gptx_model *m1 = NULL, *m2 = NULL;
    REQUIRE_OK(gptx_model_create(&m1, ctx, &c));
    REQUIRE_OK(gptx_model_create(&m2, ctx, &c));
    REQUIRE_OK(train_on_pattern(m2, 1)); /* other parameters */
    test_links(ctx, &dir, m1, m2);
    test_refused(&dir, m1);
    test_file_save(&dir);
    test_loads(ctx, &dir);
    test_llmc_magics(ctx, &dir);
    gptx_model_destroy(m1);
    gptx_model_destroy(m2);
    scratch_remove(&dir);
    gptx_context_destroy(ctx);
    return check_exit("test_file_kinds");
}
