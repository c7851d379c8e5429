#define _POSIX_C_SOURCE 200809L /* mkdtemp, popen, setrlimit */
/* llm.c token shards: exact bytes on disk, round trip, atomic replacement,
 * and a clear GPTX_ERR_FORMAT / GPTX_ERR_IO for every kind of bad file. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "test_util.h"

static char dir[256];

static void check_message_mentions(const char *needle) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "message '%s' does not mention '%s'\n", gptx_last_error(), needle);
        check_failures++;
    }
}

static void path_in_dir(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/%s", dir, name);
}

static int write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

/* Whole file into a malloc'ed buffer. */
static unsigned char *slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(size > 0 ? (size_t)size : 1);
    if (buf && fread(buf, 1, (size_t)size, f) != (size_t)size) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) *n = (size_t)size;
    return buf;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* No "<path>.tmp.*" file may survive a call. */
static int count_temp_files(void) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '\\.tmp\\.' || true", dir);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    int n = -1;
    if (fscanf(p, "%d", &n) != 1) n = -1;
    pclose(p);
    return n;
}

static void test_round_trip(void) {
    char path[512];
    path_in_dir(path, sizeof path, "a.bin");
    enum { N = 70001 }; /* more than one write chunk */
    int32_t *ids = malloc(N * sizeof *ids);
    fill_tokens(ids, N, 65536, 7);
    ids[0] = 0;
    ids[1] = 65535;
    ids[2] = 258; /* 0x0102: catches swapped bytes */
    CHECK_OK(gptx_shard_write(path, ids, N));

    /* the bytes are exactly llm.c's layout */
    size_t size = 0;
    unsigned char *raw = slurp(path, &size);
    CHECK(raw && size == 1024 + 2 * (size_t)N);
    if (raw && size == 1024 + 2 * (size_t)N) {
        CHECK(le32(raw) == 20240520u);
        CHECK(le32(raw + 4) == 1);
        CHECK(le32(raw + 8) == (uint32_t)N);
        int rest_zero = 1;
        for (size_t i = 12; i < 1024; i++) rest_zero &= raw[i] == 0;
        CHECK(rest_zero);
        CHECK(raw[1024 + 4] == 0x02 && raw[1024 + 5] == 0x01); /* little-endian uint16 */
        CHECK(raw[1024 + 2] == 0xff && raw[1024 + 3] == 0xff);
    }
    free(raw);

    int32_t *back = NULL;
    size_t n = 0;
    CHECK_OK(gptx_shard_read(path, &back, &n));
    CHECK(n == N);
    CHECK(back && memcmp(back, ids, N * sizeof *ids) == 0);
    gptx_free(back);

    /* empty shard */
    CHECK_OK(gptx_shard_write(path, NULL, 0));
    back = NULL;
    n = 123;
    CHECK_OK(gptx_shard_read(path, &back, &n));
    CHECK(n == 0);
    gptx_free(back);
    gptx_free(NULL);
    CHECK(count_temp_files() == 0);
    free(ids);
}

static void test_atomic_write(void) {
    char path[512];
    path_in_dir(path, sizeof path, "keep.bin");
    int32_t old_ids[5] = {1, 2, 3, 4, 5};
    CHECK_OK(gptx_shard_write(path, old_ids, 5));
    size_t old_size = 0;
    unsigned char *old_bytes = slurp(path, &old_size);

    /* an id out of range: error names index and value, old file intact */
    int32_t bad[4] = {10, 20, 65536, 30};
    CHECK_STATUS(gptx_shard_write(path, bad, 4), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("tokens[2]");
    check_message_mentions("65536");
    bad[2] = -1;
    CHECK_STATUS(gptx_shard_write(path, bad, 4), GPTX_ERR_TOKEN_RANGE);
    check_message_mentions("-1");
    size_t size = 0;
    unsigned char *now = slurp(path, &size);
    CHECK(now && size == old_size && memcmp(now, old_bytes, size) == 0);
    free(now);
    CHECK(count_temp_files() == 0);

    /* the target cannot be replaced (it is a non-empty directory): the
     * temp file is removed and the directory stays */
    char dpath[512];
    path_in_dir(dpath, sizeof dpath, "isdir");
    char inner[600];
    snprintf(inner, sizeof inner, "%s/x", dpath);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && touch '%s'", dpath, inner);
    CHECK(system(cmd) == 0);
    CHECK_STATUS(gptx_shard_write(dpath, old_ids, 5), GPTX_ERR_IO);
    check_message_mentions("it is a directory, not a regular file");
    CHECK(access(inner, F_OK) == 0);
    CHECK(count_temp_files() == 0);

    /* a directory that does not exist */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.bin", dir);
    CHECK_STATUS(gptx_shard_write(missing, old_ids, 5), GPTX_ERR_IO);
    check_message_mentions("No such file");

    /* a write that fails half-way (file size limit: write() gets EFBIG):
     * the old file is intact and no temp file is left */
    struct rlimit saved;
    if (getrlimit(RLIMIT_FSIZE, &saved) == 0) {
        void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = saved;
        lim.rlim_cur = 4096;
        if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
            enum { BIG = 20000 };
            int32_t *big = calloc(BIG, sizeof *big);
            int rc = gptx_shard_write(path, big, BIG);
            setrlimit(RLIMIT_FSIZE, &saved);
            CHECK_STATUS(rc, GPTX_ERR_IO);
            check_message_mentions("File too large"); /* the OS reason is passed on */
            now = slurp(path, &size);
            CHECK(now && size == old_size && memcmp(now, old_bytes, size) == 0);
            free(now);
            CHECK(count_temp_files() == 0);
            free(big);
        }
        signal(SIGXFSZ, old_handler);
    }

    /* a successful write replaces the old content */
    int32_t new_ids[3] = {9, 8, 7};
    CHECK_OK(gptx_shard_write(path, new_ids, 3));
    int32_t *back = NULL;
    size_t n = 0;
    CHECK_OK(gptx_shard_read(path, &back, &n));
    CHECK(n == 3 && back && back[0] == 9 && back[2] == 7);
    gptx_free(back);
    free(old_bytes);
}

/* A valid 4-token shard's bytes, to corrupt. */
static void good_bytes(unsigned char *b) {
    memset(b, 0, 1024 + 8);
    b[0] = 20240520u & 0xff;
    b[1] = (20240520u >> 8) & 0xff;
    b[2] = (20240520u >> 16) & 0xff;
    b[3] = (20240520u >> 24) & 0xff;
    b[4] = 1;
    b[8] = 4;
    for (int i = 0; i < 4; i++) b[1024 + 2 * i] = (unsigned char)(i + 1);
}

static void expect_read_error(const char *path, int status, const char *mention1,
                              const char *mention2) {
    int32_t *t = (int32_t *)1;
    size_t n = 99;
    CHECK_STATUS(gptx_shard_read(path, &t, &n), status);
    CHECK(t == NULL && n == 0);
    if (mention1) check_message_mentions(mention1);
    if (mention2) check_message_mentions(mention2);
}

static void test_bad_files(void) {
    char path[512];
    path_in_dir(path, sizeof path, "bad.bin");
    unsigned char b[1024 + 16];

    good_bytes(b);
    CHECK(write_bytes(path, b, 1024 + 8) == 0);
    int32_t *t = NULL;
    size_t n = 0;
    CHECK_OK(gptx_shard_read(path, &t, &n));
    CHECK(n == 4 && t && t[3] == 4);
    gptx_free(t);

    /* wrong magic: says what the file looks like and what is expected */
    good_bytes(b);
    b[0] = 20240326u & 0xff; /* llm.c model checkpoint magic */
    b[1] = (20240326u >> 8) & 0xff;
    CHECK(write_bytes(path, b, 1024 + 8) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "model checkpoint", "20240520");
    CHECK(write_bytes(path, "hello, this is just some text\n", 30) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "text file", "expected an llm.c token shard");

    /* wrong version */
    good_bytes(b);
    b[4] = 2;
    CHECK(write_bytes(path, b, 1024 + 8) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "version 2", "supported: version 1");

    /* truncated token data, truncated header, trailing bytes */
    good_bytes(b);
    CHECK(write_bytes(path, b, 1024 + 7) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "1031 bytes", "1032 bytes");
    check_message_mentions("bad.bin");
    CHECK(write_bytes(path, b, 100) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "header", "truncated");
    CHECK(write_bytes(path, b, 1024 + 10) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "1034 bytes", "trailing");
    CHECK(write_bytes(path, b, 0) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "0 bytes", NULL);
    /* negative count in the header */
    good_bytes(b);
    b[11] = 0x80;
    CHECK(write_bytes(path, b, 1024 + 8) == 0);
    expect_read_error(path, GPTX_ERR_FORMAT, "negative", NULL);

    /* I/O errors and bad arguments */
    char missing[600];
    snprintf(missing, sizeof missing, "%s/missing.bin", dir);
    expect_read_error(missing, GPTX_ERR_IO, "missing.bin", "No such file");
    expect_read_error(dir, GPTX_ERR_IO, "not a regular file", NULL);
    expect_read_error("", GPTX_ERR_INVALID, "empty", NULL);
    expect_read_error(NULL, GPTX_ERR_NULL, "path", NULL);
    CHECK_STATUS(gptx_shard_read(path, NULL, &n), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_shard_read(path, &t, NULL), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_shard_write("", NULL, 0), GPTX_ERR_INVALID);
    check_message_mentions("empty");
    CHECK_STATUS(gptx_shard_write(NULL, NULL, 0), GPTX_ERR_NULL);
    CHECK_STATUS(gptx_shard_write(path, NULL, 3), GPTX_ERR_NULL);
    check_message_mentions("tokens");
    /* the header count is an int32: checked before any id is read */
    int32_t one = 1;
    CHECK_STATUS(gptx_shard_write(path, &one, (size_t)INT32_MAX + 1), GPTX_ERR_SHAPE);
    check_message_mentions("2147483648");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/gptx_test_shard.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_atomic_write();
    test_bad_files();
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return check_exit("test_shard");
}
