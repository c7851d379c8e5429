/* gptx-tokenize end to end: bad flags and files exit non-zero with a message;
 * the shards it writes have llm.c's format, split train/val as asked, and
 * hold exactly the ids of encoding the whole text at once (the tool encodes
 * block by block), which decode back to the text. The pair is replaced as
 * one unit: a write that fails (a file size limit standing in for a full
 * disk) leaves the old pair whole, never one new shard beside an old one.
 *
 * usage: test_tokenize_tool GPTX_TOKENIZE TEXT_FILE DATA_GPT2_DIR */
#include <dirent.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

extern char **environ;

static const char *tool;
static char encoder_path[1024], vocab_path[1024];

/* Runs the tool with argv (NULL-terminated, without argv[0]) and returns its
 * exit status, or -1 if it did not exit normally (a crash). */
static int run_tool(const char *const *args) {
    const char *argv[32] = {tool};
    int n = 1;
    for (; args[n - 1] && n < 31; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid;
    if (posix_spawn(&pid, tool, NULL, NULL, (char *const *)argv, environ) != 0) return -2;
    int st;
    if (waitpid(pid, &st, 0) != pid) return -2;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The same with writes limited to `bytes` per file (RLIMIT_FSIZE, SIGXFSZ
 * ignored: a write past it fails with EFBIG, as on a full disk). */
static int run_tool_limited(const char *const *args, rlim_t bytes) {
    const char *argv[32] = {tool};
    int n = 1;
    for (; args[n - 1] && n < 31; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {bytes, bytes};
        signal(SIGXFSZ, SIG_IGN); /* kept across exec */
        if (setrlimit(RLIMIT_FSIZE, &rl) == 0) execv(tool, (char *const *)argv);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -2;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define EXPECT_EXIT(want, ...)                                                              \
    do {                                                                                    \
        const char *args_[] = {__VA_ARGS__, NULL};                                          \
        int got_ = run_tool(args_);                                                         \
        if (got_ != (want)) {                                                               \
            fprintf(stderr, "%s:%d: gptx-tokenize %s ... exited %d, expected %d\n", __FILE__, \
                    __LINE__, args_[0], got_, (want));                                      \
            check_failures++;                                                               \
        }                                                                                   \
    } while (0)

/* Parses an llm.c shard by hand (independently of gptx_shard_read): 256
 * little-endian int32 (magic 20240520, version 1, count), then count uint16. */
static int32_t *read_shard(const char *path, size_t *n) {
    size_t len;
    unsigned char *b = check_read_file(path, &len);
    *n = 0;
    if (!b || len < 1024) {
        fprintf(stderr, "%s: missing or shorter than its header\n", path);
        free(b);
        return NULL;
    }
    int32_t h[3];
    for (int i = 0; i < 3; i++)
        h[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                         (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24);
    if (h[0] != 20240520 || h[1] != 1 || h[2] < 0 || len != 1024 + 2 * (size_t)h[2]) {
        fprintf(stderr, "%s: bad header (magic %d, version %d, count %d, %zu bytes)\n", path, h[0],
                h[1], h[2], len);
        free(b);
        return NULL;
    }
    *n = (size_t)h[2];
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; ids && i < *n; i++)
        ids[i] = (int32_t)(b[1024 + 2 * i] | b[1024 + 2 * i + 1] << 8);
    free(b);
    return ids;
}

/* Checks DIR/NAME_{train,val}.bin against `text`: the ids are
 * [EOT if eot] + encode(text, special), split with round(n * val_fraction)
 * at the end. */
static void check_shards(const gptx_tokenizer *tok, const char *dir, const char *name,
                         const unsigned char *text, size_t len, int eot, int special,
                         double val_fraction) {
    char path[1024];
    size_t nt = 0, nv = 0;
    snprintf(path, sizeof path, "%s/%s_train.bin", dir, name);
    int32_t *train = read_shard(path, &nt);
    snprintf(path, sizeof path, "%s/%s_val.bin", dir, name);
    int32_t *val = read_shard(path, &nv);
    int32_t *want = malloc((len + 2) * sizeof *want);
    CHECK(train && val && want);
    if (!train || !val || !want) {
        check_failures++;
        goto done;
    }
    size_t nw = 0;
    if (eot) want[nw++] = gptx_tokenizer_eot_token(tok);
    size_t ne = 0;
    CHECK_OK(gptx_tokenizer_encode(tok, (const char *)text, len, special, want + nw, len, &ne));
    nw += ne;
    CHECK(nt + nv == nw);
    CHECK(nv == (size_t)((double)nw * val_fraction + 0.5));
    if (nt + nv == nw) {
        CHECK(memcmp(train, want, nt * sizeof *want) == 0);
        CHECK(memcmp(val, want + nt, nv * sizeof *want) == 0);
    }
    /* decoding the two shards one after the other gives the text back */
    char *back = malloc(len + 64);
    size_t bt = 0, bv = 0, skip = eot ? 1 : 0;
    if (back && nt >= skip) {
        CHECK_OK(gptx_tokenizer_decode(tok, train + skip, nt - skip, back, len + 64, &bt));
        CHECK_OK(gptx_tokenizer_decode(tok, val, nv, back + bt, len + 64 - bt, &bv));
        /* with special, EOT decodes to its text "<|endoftext|>" again */
        CHECK(bt + bv == len && memcmp(back, text, len) == 0);
    }
    free(back);
done:
    free(train);
    free(val);
    free(want);
}

/* A split's ids, as a reader opening DIR/NAME_split.bin finds them. */
static int32_t *read_split(const char *dir, const char *name, const char *split, size_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s_%s.bin", dir, name, split);
    return read_shard(path, n);
}

/* Whether DIR/NAME's pair holds exactly these ids. */
static int pair_is(const char *dir, const char *name, const int32_t *train, size_t nt,
                   const int32_t *val, size_t nv) {
    size_t mt = 0, mv = 0;
    int32_t *t = read_split(dir, name, "train", &mt), *v = read_split(dir, name, "val", &mv);
    int same = t && v && mt == nt && mv == nv && !memcmp(t, train, nt * sizeof *t) &&
               !memcmp(v, val, nv * sizeof *v);
    free(t);
    free(v);
    return same;
}

static int entries(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
    if (d) closedir(d);
    return n;
}

static int is_link(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

static void write_file(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f) fclose(f);
}

/* The pair as one unit: a failed write of either shard (a file size limit,
 * like a full disk) leaves the old pair, whole, and no litter; a good run
 * replaces both and removes the old pair's folder and dead runs' folders;
 * shards of the older layout (plain files) become the links; a name that is
 * a folder is refused before anything changes. */
static void test_pair(const gptx_tokenizer *tok, const char *input, const unsigned char *text,
                      size_t len) {
    CHECK(system("rm -rf tok_pair") == 0); /* a fresh folder (ctest reruns in place) */
    write_file("tok_small.txt", text, len < 3000 ? len : 3000);
    const char *dir = "tok_pair";
    const char *small[] = {"--input", "tok_small.txt", "--out-dir", dir, "--prefix", "p",
                           "--encoder", encoder_path, "--vocab", vocab_path, NULL};
    CHECK(run_tool(small) == 0);
    size_t nt = 0, nv = 0;
    int32_t *train = read_split(dir, "p", "train", &nt), *val = read_split(dir, "p", "val", &nv);
    CHECK(train && val && entries(dir) == 4); /* p.shards, its folder, the two links */
    /* the whole text, 90 % for val: train (2 KB) fits in 8 KiB, val (10 KB)
     * does not; then 10 % for val: train (9 KB) does not */
    const char *fractions[] = {"0.9", "0.1"};
    for (int i = 0; i < 2; i++) {
        const char *big[] = {"--input", input, "--out-dir", dir, "--prefix", "p",
                             "--val-fraction", fractions[i], "--encoder", encoder_path,
                             "--vocab", vocab_path, NULL};
        int rc = run_tool_limited(big, 8192);
        if (rc != 1) fprintf(stderr, "limited write, val fraction %s: exit %d\n", fractions[i], rc);
        CHECK(rc == 1);
        if (!pair_is(dir, "p", train, nt, val, nv))
            fprintf(stderr, "val fraction %s: the pair after a failed write is not the old one\n",
                    fractions[i]);
        CHECK(pair_is(dir, "p", train, nt, val, nv));
        CHECK(entries(dir) == 4);
    }
    /* a folder of a dead run on this host (killed before its switch) */
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    char host[256] = "", litter[1400];
    gethostname(host, sizeof host - 1);
    snprintf(litter, sizeof litter, "%s/p.shards.%s.%ld.7", dir, host[0] ? host : "localhost",
             (long)dead);
    CHECK(mkdir(litter, 0777) == 0);
    strcat(litter, "/p_train.bin");
    write_file(litter, "x", 1);
    const char *whole[] = {"--input", input, "--out-dir", dir, "--prefix", "p",
                           "--encoder", encoder_path, "--vocab", vocab_path, NULL};
    CHECK(run_tool(whole) == 0);
    check_shards(tok, dir, "p", text, len, 0, 0, 0.1);
    CHECK(entries(dir) == 4); /* the old pair's folder and the dead run's are gone */
    /* the older layout: the shards themselves (token shards: a file of the
     * user's at the name is refused, example_path_rules_inputs_outputs),
     * replaced by the links */
    const int32_t one = 7;
    CHECK(gptx_shard_write("tok_pair/old_train.bin", &one, 1) == GPTX_OK);
    CHECK(gptx_shard_write("tok_pair/old_val.bin", &one, 1) == GPTX_OK);
    const char *old[] = {"--input", "tok_small.txt", "--out-dir", dir, "--prefix", "old",
                         "--encoder", encoder_path, "--vocab", vocab_path, NULL};
    CHECK(run_tool(old) == 0);
    check_shards(tok, dir, "old", text, len < 3000 ? len : 3000, 0, 0, 0.1);
    CHECK(is_link("tok_pair/old_train.bin") && is_link("tok_pair/old_val.bin"));
    /* a name taken by a folder is refused, nothing switched or left */
    CHECK(mkdir("tok_pair/x_val.bin", 0777) == 0);
    const char *taken[] = {"--input", "tok_small.txt", "--out-dir", dir, "--prefix", "x",
                           "--encoder", encoder_path, "--vocab", vocab_path, NULL};
    CHECK(run_tool(taken) == 1);
    CHECK(entries(dir) == 4 + 4 + 1); /* p's, old's, and the folder x_val.bin */
    free(train);
    free(val);
    remove("tok_small.txt");
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s GPTX_TOKENIZE TEXT_FILE DATA_GPT2_DIR\n", argv[0]);
        return 2;
    }
    tool = argv[1];
    const char *input = argv[2];
    snprintf(encoder_path, sizeof encoder_path, "%s/encoder.json", argv[3]);
    snprintf(vocab_path, sizeof vocab_path, "%s/vocab.bpe", argv[3]);
    gptx_tokenizer *tok = NULL;
    REQUIRE_OK(gptx_tokenizer_load_gpt2(&tok, encoder_path, vocab_path));
    size_t len = 0;
    unsigned char *text = check_read_file(input, &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", input);
        return 1;
    }

    /* usage errors exit 2, missing or bad files 1 */
    EXPECT_EXIT(0, "--help");
    EXPECT_EXIT(2, "--bogus");
    EXPECT_EXIT(2, "--out-dir", "tok_out");
    EXPECT_EXIT(2, "--input", input);
    EXPECT_EXIT(2, "--input", input, "--out-dir");
    EXPECT_EXIT(2, "--input", input, "--out-dir", "tok_out", "--val-fraction", "1");
    EXPECT_EXIT(2, "--input", input, "--out-dir", "tok_out", "--val-fraction", "-0.1");
    EXPECT_EXIT(2, "--input", input, "--out-dir", "tok_out", "--val-fraction", "abc");
    EXPECT_EXIT(2, "--input", input, "--out-dir", "tok_out", "--chunk-bytes", "0");
    EXPECT_EXIT(2, "--input", input, "--out-dir", "tok_out", "--prefix", "a/b");
    EXPECT_EXIT(1, "--input", "no/such/file.txt", "--out-dir", "tok_out");
    EXPECT_EXIT(1, "--input", input, "--out-dir", "tok_out", "--encoder", "no/such/encoder.json");
    EXPECT_EXIT(1, "--input", input, "--out-dir", "tok_out", "--vocab", encoder_path);
    EXPECT_EXIT(1, "--input", input, "--out-dir", input); /* a file, not a directory */

    /* the bundled text in 1000-byte blocks, with EOT first, a quarter for val */
    EXPECT_EXIT(0, "--input", input, "--out-dir", "tok_out/nested", "--prefix", "verdict",
                "--val-fraction", "0.25", "--eot", "--chunk-bytes", "1000", "--encoder",
                encoder_path, "--vocab", vocab_path);
    check_shards(tok, "tok_out/nested", "verdict", text, len, 1, 0, 0.25);

    /* special tokens, invalid UTF-8, long lines, default prefix and fraction */
    static const char odd[] =
        "first line\nsecond<|endoftext|>third\n\xff\xfe bytes \xe2\x82\n"
        "x\ny\n\n  spaced  \n\t\ttabs\n<|endoftext|>\nend with no newline";
    FILE *f = fopen("tok_odd.txt", "wb");
    CHECK(f && fwrite(odd, 1, sizeof odd - 1, f) == sizeof odd - 1);
    if (f) fclose(f);
    for (int special = 0; special <= 1; special++) {
        const char *args[] = {"--input", "tok_odd.txt", "--out-dir", "tok_out", "--chunk-bytes",
                              "64", special ? "--special" : NULL, NULL};
        CHECK(run_tool(args) == 0);
        check_shards(tok, "tok_out", "tok_odd", (const unsigned char *)odd, sizeof odd - 1, 0,
                     special, 0.1);
    }
    /* an empty file gives two empty shards */
    f = fopen("tok_empty.txt", "wb");
    if (f) fclose(f);
    EXPECT_EXIT(0, "--input", "tok_empty.txt", "--out-dir", "tok_out", "--val-fraction", "0");
    check_shards(tok, "tok_out", "tok_empty", (const unsigned char *)"", 0, 0, 0, 0.0);

    test_pair(tok, input, text, len);

    remove("tok_odd.txt");
    remove("tok_empty.txt");
    free(text);
    gptx_tokenizer_destroy(tok);
    return check_exit("test_tokenize_tool");
}
