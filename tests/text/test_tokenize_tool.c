/* gptx-tokenize end to end: bad flags and files exit non-zero with a message;
 * the shards it writes have llm.c's format, split train/val as asked, and
 * hold exactly the ids of encoding the whole text at once (the tool encodes
 * block by block), which decode back to the text.
 *
 * usage: test_tokenize_tool GPTX_TOKENIZE TEXT_FILE DATA_GPT2_DIR */
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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

    remove("tok_odd.txt");
    remove("tok_empty.txt");
    free(text);
    gptx_tokenizer_destroy(tok);
    return check_exit("test_tokenize_tool");
}
