/* llm.c token shards: a 1024-byte header of 256 little-endian int32
 * ([0] magic 20240520, [1] version 1, [2] token count, rest 0), then the
 * tokens as little-endian uint16. Writes are atomic; reads verify everything. */
#include "shard.h"

#include <stdlib.h>
#include <string.h>

#include "atomic_file.h"
#include "errors.h"
#include "safetensors.h"

#define HEADER_WORDS 256
#define CHUNK_TOKENS 32768 /* tokens converted per write() */

static void put_le32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static uint32_t get_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int gptx_shard_write(const char *path, const int32_t *tokens, size_t n) {
    GPTX_CHECK_NULL(path);
    if (path[0] == '\0') return GPTX_FAIL(GPTX_ERR_INVALID, "path is empty");
    if (n > 0 && !tokens) return GPTX_FAIL(GPTX_ERR_NULL, "argument 'tokens' is NULL (n = %zu)", n);
    if (n > (size_t)INT32_MAX)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "n is %zu; a shard holds at most %d tokens", n, INT32_MAX);
    /* Validate everything before creating a file, so a bad id never leaves a trace. */
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > GPTX_SHARD_MAX_ID)
            return GPTX_FAIL(GPTX_ERR_TOKEN_RANGE,
                             "tokens[%zu] is %d; shard ids must be in [0, %d] (uint16)", i,
                             (int)tokens[i], GPTX_SHARD_MAX_ID);

    /* CHUNK_TOKENS * 2 bytes also hold the 1024-byte header */
    unsigned char *buf = malloc(CHUNK_TOKENS * 2);
    if (!buf) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    gptx_afile f;
    int rc = gptx_afile_open(&f, path);
    if (rc != GPTX_OK) {
        free(buf);
        return rc;
    }
    memset(buf, 0, GPTX_SHARD_HEADER_BYTES);
    put_le32(buf + 0, GPTX_SHARD_MAGIC);
    put_le32(buf + 4, GPTX_SHARD_VERSION);
    put_le32(buf + 8, (uint32_t)n);
    rc = gptx_afile_write(&f, buf, GPTX_SHARD_HEADER_BYTES);
    for (size_t i = 0; i < n && rc == GPTX_OK; i += CHUNK_TOKENS) {
        size_t m = n - i < CHUNK_TOKENS ? n - i : CHUNK_TOKENS;
        for (size_t j = 0; j < m; j++) {
            uint32_t v = (uint32_t)tokens[i + j];
            buf[2 * j] = (unsigned char)v;
            buf[2 * j + 1] = (unsigned char)(v >> 8);
        }
        rc = gptx_afile_write(&f, buf, 2 * m);
    }
    /* a failed write has already removed the temp file; commit renames it */
    if (rc == GPTX_OK) rc = gptx_afile_commit(&f);
    free(buf);
    return rc;
}

const char *gptx_llmc_magic_name(uint32_t magic) {
    switch (magic) {
    case 20240326u: return "an llm.c model checkpoint (magic 20240326)";
    case 20240327u: return "an llm.c debug state file (magic 20240327)";
    case 20240328u: return "an llm.c tokenizer file (magic 20240328)";
    case GPTX_SHARD_MAGIC: return "an llm.c token shard (magic 20240520)";
    case 20240527u: return "an llm.c training state file (magic 20240527)";
    default: return NULL;
    }
}

/* Names what a file with this first header word probably is, for errors. */
static const char *describe_magic(const unsigned char *head, size_t len) {
    const char *llmc = gptx_llmc_magic_name(get_le32(head));
    if (llmc) return llmc;
    if (head[0] == 0 && head[1] == 0x35 && head[2] == 0x4b && head[3] == 0x01)
        return "a big-endian llm.c shard (byte-swapped magic)";
    /* safetensors: u64 header length, then a JSON object */
    if (len >= 10 && head[8] == '{') return "a safetensors file";
    size_t printable = 0;
    for (size_t i = 0; i < len && i < 64; i++)
        if ((head[i] >= 0x20 && head[i] < 0x7f) || head[i] == '\n' || head[i] == '\r' ||
            head[i] == '\t')
            printable++;
    if (len > 0 && printable == (len < 64 ? len : 64)) return "a text file";
    return "not an llm.c shard";
}

int gptx_shard_read_src(const gptx_src *src, int32_t **tokens, size_t *n) {
    *tokens = NULL;
    *n = 0;
    const char *path = src->label;
    unsigned char head[GPTX_SHARD_HEADER_BYTES];
    size_t got = src->size < sizeof head ? (size_t)src->size : sizeof head;
    GPTX_TRY(gptx_src_read(src, 0, head, got, "the shard header"));
    long long size = (long long)src->size;
    if (got >= 4 && get_le32(head) != GPTX_SHARD_MAGIC)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' has magic %u and looks like %s; expected an llm.c token shard "
                         "(magic %u)",
                         path, get_le32(head), describe_magic(head, got), GPTX_SHARD_MAGIC);
    if (got < sizeof head)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' is %lld bytes, shorter than the %d-byte shard header (truncated)",
                         path, size, GPTX_SHARD_HEADER_BYTES);
    uint32_t version = get_le32(head + 4);
    if (version != GPTX_SHARD_VERSION)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' is shard version %u%s; supported: version %d (uint16 tokens)", path,
                         version, version == 2 ? " (llm.c's uint32 tokens)" : "",
                         GPTX_SHARD_VERSION);
    int32_t count = (int32_t)get_le32(head + 8);
    if (count < 0)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' has a negative token count %d in its header", path,
                         (int)count);
    long long expected = GPTX_SHARD_HEADER_BYTES + 2LL * count;
    if (size != expected)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' is %lld bytes but its header says %d tokens, i.e. %lld bytes (%s)",
                         path, size, (int)count, expected,
                         size < expected ? "truncated" : "trailing data");
    size_t cnt = (size_t)count;
    int32_t *out = malloc(cnt ? cnt * sizeof *out : 1);
    if (!out)
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "cannot allocate %zu tokens for '%s'", cnt, path);
    /* Read the uint16 tokens into the upper half of the int32 buffer and widen
     * in place, front to back: element i is written to bytes [4i, 4i+4), which
     * never reach a not-yet-read element (at 2*cnt + 2j for j > i). */
    unsigned char *raw = (unsigned char *)out + 2 * cnt;
    int rc = gptx_src_read(src, GPTX_SHARD_HEADER_BYTES, raw, 2 * cnt, "the tokens");
    if (rc != GPTX_OK) {
        free(out);
        return rc;
    }
    for (size_t i = 0; i < cnt; i++)
        out[i] = (int32_t)((uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8);
    *tokens = out;
    *n = cnt;
    return GPTX_OK;
}

int gptx_shard_read(const char *path, int32_t **tokens, size_t *n) {
    GPTX_CHECK_NULL(tokens);
    *tokens = NULL;
    GPTX_CHECK_NULL(n);
    *n = 0;
    GPTX_CHECK_NULL(path);
    if (path[0] == '\0') return GPTX_FAIL(GPTX_ERR_INVALID, "path is empty");
    gptx_src src;
    GPTX_TRY(gptx_src_open_file(&src, path));
    int rc = gptx_shard_read_src(&src, tokens, n);
    gptx_src_close(&src);
    return rc;
}

void gptx_free(void *ptr) { free(ptr); }
