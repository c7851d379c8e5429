/* Corrupt, truncated and inconsistent files: every validation gives its own
 * clear error (status and a message naming the file and the offending
 * tensor or key), never a crash, and never changes the model.
 *
 * Cases are made from a valid checkpoint: its header is edited with jansson
 * and the file is rebuilt (tensors re-laid out contiguously unless the case
 * is about the layout itself), or its bytes are cut or overwritten. */
#define _POSIX_C_SOURCE 200809L
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ckpt_util.h"
#include "safetensors.h"
#include "test_util.h"

static gptx_context *ctx;
static gptx_model *model;      /* loads go into this one */
static float *model_params;    /* its parameters before any load */
static size_t model_nparams;
static unsigned char *good;    /* a valid model file */
static size_t good_len;
static uint64_t good_data_start;
static const scratch_dir *dir;

/* ---- building files --------------------------------------------------------------- */

typedef struct bytes {
    unsigned char *p;
    size_t n;
} bytes;

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* header text + data -> file bytes */
static bytes assemble(const char *header, size_t hlen, const unsigned char *data, size_t dlen) {
    bytes b;
    b.n = 8 + hlen + dlen;
    b.p = calloc(b.n ? b.n : 1, 1);
    put_u64(b.p, hlen);
    memcpy(b.p + 8, header, hlen);
    if (dlen) memcpy(b.p + 8 + hlen, data, dlen);
    return b;
}

static json_t *good_header(void) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | good[i];
    return json_loadb((const char *)good + 8, (size_t)hlen, 0, NULL);
}

/* Re-lays out every tensor of `h` contiguously in key order, copying its
 * bytes from the valid file (by its name there; zero if it is not there),
 * and returns the new file. Keeps the header's shapes and dtypes. */
static bytes relayout(json_t *h) {
    json_t *orig = good_header();
    size_t total = 0;
    const char *k;
    json_t *v;
    json_object_foreach(h, k, v) {
        if (strcmp(k, "__metadata__") == 0) continue;
        json_t *o = json_object_get(v, "data_offsets");
        total += (size_t)(json_integer_value(json_array_get(o, 1)) -
                          json_integer_value(json_array_get(o, 0)));
    }
    unsigned char *data = calloc(total ? total : 1, 1);
    size_t off = 0;
    json_object_foreach(h, k, v) {
        if (strcmp(k, "__metadata__") == 0) continue;
        json_t *o = json_object_get(v, "data_offsets");
        size_t len = (size_t)(json_integer_value(json_array_get(o, 1)) -
                              json_integer_value(json_array_get(o, 0)));
        json_t *src = json_object_get(orig, k);
        if (src) {
            json_t *so = json_object_get(src, "data_offsets");
            size_t sb = (size_t)json_integer_value(json_array_get(so, 0));
            size_t sl = (size_t)json_integer_value(json_array_get(so, 1)) - sb;
            memcpy(data + off, good + good_data_start + sb, sl < len ? sl : len);
        }
        json_array_set_new(o, 0, json_integer((json_int_t)off));
        json_array_set_new(o, 1, json_integer((json_int_t)(off + len)));
        off += len;
    }
    char *text = json_dumps(h, JSON_COMPACT);
    bytes b = assemble(text, strlen(text), data, total);
    free(text);
    free(data);
    json_decref(orig);
    return b;
}

/* Header edited in place (offsets untouched): for layout errors. */
static bytes with_header(json_t *h) {
    char *text = json_dumps(h, JSON_COMPACT);
    bytes b = assemble(text, strlen(text), good + good_data_start, good_len - good_data_start);
    free(text);
    return b;
}

static void set_meta(json_t *h, const char *key, const char *value) {
    json_t *m = json_object_get(h, "__metadata__");
    if (value) json_object_set_new(m, key, json_string(value));
    else json_object_del(m, key);
}

static void set_shape(json_t *h, const char *name, int64_t d0, int64_t d1) {
    json_t *s = json_array();
    json_array_append_new(s, json_integer(d0));
    if (d1 >= 0) json_array_append_new(s, json_integer(d1));
    json_object_set_new(json_object_get(h, name), "shape", s);
}

static void set_bytes(json_t *h, const char *name, int64_t nbytes) {
    json_t *o = json_object_get(json_object_get(h, name), "data_offsets");
    json_array_set_new(o, 1, json_integer(json_integer_value(json_array_get(o, 0)) + nbytes));
}

/* ---- expectations ------------------------------------------------------------------ */

/* The file must fail gptx_model_load_weights with `status` and a message
 * holding both needles (and the file name), leave the model unchanged, and
 * fail (not crash) in every other loader too. */
static void expect_fail(int line, bytes b, int status, const char *needle1, const char *needle2) {
    const char *path = scratch_file(dir, "case.safetensors");
    if (write_all(path, b.p, b.n) != 0) {
        check_failures++;
        free(b.p);
        return;
    }
    int rc = gptx_model_load_weights(model, path);
    const char *msg = gptx_last_error();
    int ok = rc == status && strstr(msg, "case.safetensors") && (!needle1 || strstr(msg, needle1)) &&
             (!needle2 || strstr(msg, needle2));
    if (!ok) {
        fprintf(stderr, "line %d: got %s '%s'; expected %s mentioning '%s' and '%s'\n", line,
                gptx_status_name(rc), msg, gptx_status_name(status), needle1 ? needle1 : "",
                needle2 ? needle2 : "");
        check_failures++;
    }
    size_t n = 0;
    float *now = all_params(model, &n);
    if (!now || n != model_nparams || memcmp(now, model_params, n * sizeof *now) != 0) {
        fprintf(stderr, "line %d: the failed load changed the model\n", line);
        check_failures++;
    }
    free(now);
    gptx_model *m = (gptx_model *)1;
    if (gptx_model_load(&m, ctx, path) == GPTX_OK || m != NULL) {
        fprintf(stderr, "line %d: gptx_model_load accepted the file\n", line);
        check_failures++;
        gptx_model_destroy(m == (gptx_model *)1 ? NULL : m);
    }
    gptx_train_state st;
    gptx_train_state_init(&st);
    if (gptx_checkpoint_load(model, &st, path) == GPTX_OK) {
        fprintf(stderr, "line %d: gptx_checkpoint_load accepted the file\n", line);
        check_failures++;
    }
    free(b.p);
}
#define EXPECT_FAIL(b, status, n1, n2) expect_fail(__LINE__, (b), (status), (n1), (n2))

static void test_container_errors(void) {
    unsigned char tiny[5] = {1, 2, 3, 4, 5};
    EXPECT_FAIL(assemble("", 0, NULL, 0), GPTX_ERR_FORMAT, "header length is 0", NULL);
    bytes b = {malloc(5), 5};
    memcpy(b.p, tiny, 5);
    EXPECT_FAIL(b, GPTX_ERR_FORMAT, "8-byte", NULL);

    /* header length: huge, larger than the file, too small */
    b.n = good_len;
    b.p = malloc(b.n);
    memcpy(b.p, good, good_len);
    put_u64(b.p, (uint64_t)1 << 40);
    EXPECT_FAIL(b, GPTX_ERR_FORMAT, "header length", "1099511627776");
    b.p = malloc(good_len);
    memcpy(b.p, good, good_len);
    put_u64(b.p, good_len - 7);
    EXPECT_FAIL(b, GPTX_ERR_FORMAT, "exceeds the file size", NULL);
    b.p = malloc(good_len);
    memcpy(b.p, good, good_len);
    put_u64(b.p, 1);
    EXPECT_FAIL(b, GPTX_ERR_FORMAT, "header length is 1", NULL);
    /* header length pointing inside the JSON */
    b.p = malloc(good_len);
    memcpy(b.p, good, good_len);
    put_u64(b.p, 40);
    EXPECT_FAIL(b, GPTX_ERR_FORMAT, "not valid JSON", NULL);

    /* header text */
    const char *trailing_control = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],"
                                   "\"data_offsets\":[0,4]}} \x01";
    const char *garbage[] = {"{\"a\":", "\xff\xfe garbage", "{\"x\":1}}", "{\"a\":{},\"a\":{}}",
                             "[1,2]", "\"text\"", trailing_control};
    const char *needles[] = {"not valid JSON", "not valid JSON", "not valid JSON", "duplicate",
                             "not a JSON object", "not valid JSON", "not valid JSON"};
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++)
        EXPECT_FAIL(assemble(garbage[i], strlen(garbage[i]), NULL, 0), GPTX_ERR_FORMAT, needles[i],
                    NULL);
    const char *nul = "{\"a\":1}\0  ";
    EXPECT_FAIL(assemble(nul, 10, NULL, 0), GPTX_ERR_FORMAT, "not valid JSON", NULL);

    /* malformed entries */
    struct {
        const char *json, *n1;
    } entries[] = {
        {"{\"t\":5}", "not an object"},
        {"{\"t\":{\"shape\":[1],\"data_offsets\":[0,4]}}", "dtype"},
        {"{\"t\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", "unknown dtype"},
        {"{\"t\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", "shape"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", "shape[0]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", "shape[0]"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}",
         "9 dimensions"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904,4],\"data_offsets\":[0,4]}}",
         "too many elements"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", "data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", "data_offsets"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", "end < begin"},
        {"{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", "spans 4 bytes"},
        {"{\"__metadata__\":[1],\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         "__metadata__"},
        {"{\"__metadata__\":{\"k\":1},\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
         "__metadata__ value of 'k'"},
    };
    unsigned char four[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        EXPECT_FAIL(assemble(entries[i].json, strlen(entries[i].json), four, 4), GPTX_ERR_FORMAT,
                    entries[i].n1, NULL);
    /* a well-formed container that is not a gptx file */
    const char *plain = "{\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    EXPECT_FAIL(assemble(plain, strlen(plain), four, 4), GPTX_ERR_FORMAT, "not a gptx checkpoint",
                "import_hf");
}

static void test_layout_errors(void) {
    json_t *h;
    /* offsets past the end of the data section */
    h = good_header();
    json_t *o = json_object_get(json_object_get(h, "ln_f.bias"), "data_offsets");
    json_int_t e = json_integer_value(json_array_get(o, 1));
    json_array_set_new(o, 0, json_integer(e + 1000000));
    json_array_set_new(o, 1, json_integer(e + 1000000 + 64));
    EXPECT_FAIL(with_header(h), GPTX_ERR_FORMAT, "ln_f.bias", "data section has only");
    json_decref(h);
    /* two tensors on the same bytes */
    h = good_header();
    json_object_set(json_object_get(h, "h.0.ln_1.bias"), "data_offsets",
                    json_object_get(json_object_get(h, "h.0.ln_1.weight"), "data_offsets"));
    EXPECT_FAIL(with_header(h), GPTX_ERR_FORMAT, "overlap", "h.0.ln_1.");
    json_decref(h);
    /* a hole, and bytes after the last tensor */
    h = good_header();
    o = json_object_get(json_object_get(h, "wte.weight"), "data_offsets");
    json_array_set_new(o, 0, json_integer(4));
    json_array_set_new(o, 1, json_integer(4 + 64 * 16 * 4));
    EXPECT_FAIL(with_header(h), GPTX_ERR_FORMAT, "wte.weight", NULL);
    json_decref(h);
    bytes b = {malloc(good_len + 4), good_len + 4};
    memcpy(b.p, good, good_len);
    memset(b.p + good_len, 0, 4);
    EXPECT_FAIL(b, GPTX_ERR_FORMAT, "4 unexpected bytes", NULL);
}

static void test_tensor_errors(void) {
    json_t *h;
    /* dtypes */
    h = good_header();
    json_object_set_new(json_object_get(h, "h.1.ln_2.bias"), "dtype", json_string("I32"));
    EXPECT_FAIL(relayout(h), GPTX_ERR_UNSUPPORTED, "h.1.ln_2.bias", "I32");
    json_decref(h);
    h = good_header();
    json_object_set_new(json_object_get(h, "h.1.ln_2.bias"), "dtype", json_string("F16"));
    set_bytes(h, "h.1.ln_2.bias", 16 * 2);
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "h.1.ln_2.bias", "F16");
    json_decref(h);
    /* shapes: same element count, other shape; other count */
    h = good_header();
    set_shape(h, "wpe.weight", 8, 32);
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "wpe.weight", "[8, 32]");
    json_decref(h);
    h = good_header();
    set_shape(h, "h.0.mlp.c_fc.bias", 32, -1);
    set_bytes(h, "h.0.mlp.c_fc.bias", 32 * 4);
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "h.0.mlp.c_fc.bias", "[64]");
    json_decref(h);
    h = good_header();
    set_shape(h, "ln_f.weight", 16, 1);
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "ln_f.weight", "[16, 1]");
    json_decref(h);
    /* missing, unexpected, renamed */
    h = good_header();
    json_object_del(h, "h.1.mlp.c_fc.bias");
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "has no tensor 'h.1.mlp.c_fc.bias'", "1 expected");
    json_decref(h);
    h = good_header();
    json_object_set_new(h, "extra.weight", json_deep_copy(json_object_get(h, "ln_f.bias")));
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "unexpected tensor 'extra.weight'", NULL);
    json_decref(h);
    h = good_header();
    json_object_set_new(h, "lm_head.weight", json_deep_copy(json_object_get(h, "wte.weight")));
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "unexpected tensor 'lm_head.weight'", NULL);
    json_decref(h);
    /* a non-finite weight */
    bytes b = {malloc(good_len), good_len};
    memcpy(b.p, good, good_len);
    memset(b.p + good_len - 8, 0xff, 4);
    EXPECT_FAIL(b, GPTX_ERR_NON_FINITE, "ln_f.bias", "element 14");
}

static void test_metadata_errors(void) {
    struct {
        const char *key, *value;
        int status;
        const char *n1, *n2;
    } cases[] = {
        {"format", NULL, GPTX_ERR_FORMAT, "not a gptx checkpoint", "missing"},
        {"format", "safetensors", GPTX_ERR_FORMAT, "not a gptx checkpoint", "safetensors"},
        {"format_version", "2", GPTX_ERR_FORMAT, "format_version", "\"2\""},
        {"format_version", NULL, GPTX_ERR_FORMAT, "format_version", "missing"},
        {"dtype", "bfloat16", GPTX_ERR_UNSUPPORTED, "bfloat16", NULL},
        {"kind", "weights", GPTX_ERR_FORMAT, "kind", "weights"},
        {"n_embd", NULL, GPTX_ERR_FORMAT, "n_embd", "missing"},
        {"n_embd", "16x", GPTX_ERR_FORMAT, "n_embd", "16x"},
        {"n_embd", "", GPTX_ERR_FORMAT, "n_embd", NULL},
        {"n_embd", "99999999999", GPTX_ERR_FORMAT, "n_embd", NULL},
        {"n_embd", "0", GPTX_ERR_FORMAT, "n_embd", NULL},
        {"qkv_bias", "2", GPTX_ERR_FORMAT, "qkv_bias", NULL},
        {"layernorm_eps", "nan", GPTX_ERR_FORMAT, "layernorm_eps", NULL},
        {"layernorm_eps", "-1e-5", GPTX_ERR_FORMAT, "layernorm_eps", NULL},
        {"padded_vocab_size", "10", GPTX_ERR_FORMAT, "padded_vocab_size", NULL},
        {"n_head", "3", GPTX_ERR_FORMAT, "n_embd", NULL}, /* 16 % 3 != 0 */
        /* a valid config of another model */
        {"n_embd", "32", GPTX_ERR_MISMATCH, "n_embd = 32", "16"},
        {"n_layer", "3", GPTX_ERR_MISMATCH, "n_layer", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *h = good_header();
        set_meta(h, cases[i].key, cases[i].value);
        expect_fail(__LINE__ * 1000 + (int)i, relayout(h), cases[i].status, cases[i].n1, cases[i].n2);
        json_decref(h);
    }
    /* gptx_model_load trusts no config: one that the tensors do not match */
    json_t *h = good_header();
    set_meta(h, "n_layer", "3");
    bytes b = relayout(h);
    const char *path = scratch_file(dir, "three_layers.safetensors");
    CHECK(write_all(path, b.p, b.n) == 0);
    gptx_model *m = NULL;
    CHECK_STATUS(gptx_model_load(&m, ctx, path), GPTX_ERR_FORMAT);
    CHECK_MSG("h.2.");
    CHECK(m == NULL);
    free(b.p);
    json_decref(h);
    /* and a training file whose moments are missing */
    h = good_header();
    set_meta(h, "kind", "training");
    set_meta(h, "optimizer", "adamw");
    EXPECT_FAIL(relayout(h), GPTX_ERR_FORMAT, "optimizer.m.wte.weight", NULL);
    json_decref(h);
}

/* Every prefix of a valid file is rejected (each length through the header
 * and the first bytes of data, then every 37th); a cut inside a tensor's
 * data names that tensor. */
static void test_truncation(void) {
    const char *path = scratch_file(dir, "cut.safetensors");
    gptx_st_file f;
    CHECK_OK(gptx_st_open(&f, scratch_file(dir, "good.safetensors")));
    const gptx_st_tensor *t = gptx_st_find(&f, "h.0.attn.c_attn.weight");
    size_t mid = t ? (size_t)(f.data_start + (t->begin + t->end) / 2) : 0;
    gptx_st_close(&f);
    int accepted = 0, bad_status = 0;
    for (size_t n = 0; n < good_len; n += n < good_data_start + 64 ? 1 : 37) {
        if (n > mid && n - mid < 37) n = mid;
        if (write_all(path, good, n) != 0) continue;
        int rc = gptx_model_load_weights(model, path);
        if (rc == GPTX_OK) accepted++;
        else if (rc != GPTX_ERR_FORMAT) {
            if (!bad_status++)
                fprintf(stderr, "cut at %zu: %s %s\n", n, gptx_status_name(rc), gptx_last_error());
        }
        if (n == mid) {
            CHECK(rc == GPTX_ERR_FORMAT);
            CHECK_MSG("cut.safetensors");
            CHECK_MSG("h.0.attn.c_attn.weight");
            CHECK_MSG("truncated");
        }
    }
    CHECK(accepted == 0);
    CHECK(bad_status == 0);
    size_t n = 0;
    float *now = all_params(model, &n);
    CHECK(now && memcmp(now, model_params, n * sizeof *now) == 0);
    free(now);
}

int main(void) {
    /* every case edits a valid file: these are the format checks behind the
     * checksums, which would catch each edit first (test_ckpt_integrity) */
    setenv("GPTX_SKIP_CHECKSUMS", "1", 1);
    REQUIRE_OK(make_cpu_context(&ctx, 1));
    scratch_dir d;
    if (scratch_make(&d, "corrupt") != 0) return 1;
    dir = &d;
    gptx_model_config c = small_config();
    gptx_model *src = NULL;
    REQUIRE_OK(gptx_model_create(&src, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(src, 3));
    REQUIRE_OK(gptx_model_save(src, scratch_file(dir, "good.safetensors")));
    gptx_model_destroy(src);
    good = read_all(scratch_file(dir, "good.safetensors"), &good_len);
    if (!good) return 1;
    gptx_st_file f;
    REQUIRE_OK(gptx_st_open(&f, scratch_file(dir, "good.safetensors")));
    good_data_start = f.data_start;
    gptx_st_close(&f);
    REQUIRE_OK(gptx_model_create(&model, ctx, &c));
    REQUIRE_OK(gptx_model_init_random(model, 4));
    model_params = all_params(model, &model_nparams);

    /* the editing helpers reproduce a loadable file */
    json_t *h = good_header();
    bytes b = relayout(h);
    const char *same = scratch_file(dir, "relayout.safetensors");
    CHECK(write_all(same, b.p, b.n) == 0);
    gptx_model *m = NULL;
    CHECK_OK(gptx_model_load(&m, ctx, same));
    gptx_model_destroy(m);
    free(b.p);
    json_decref(h);

    test_container_errors();
    test_layout_errors();
    test_tensor_errors();
    test_metadata_errors();
    test_truncation();

    free(good);
    free(model_params);
    gptx_model_destroy(model);
    scratch_remove(&d);
    gptx_context_destroy(ctx);
    return check_exit("test_ckpt_corrupt");
}
