/* safetensors reader and writer, and fp16/bf16 conversion (see safetensors.h). */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomic_file.h"
#include "checksum.h"
#include "errors.h"
#include "file_read.h"
#include "shard.h"

/* ---- byte source ------------------------------------------------------------ */

int gptx_src_open_file(gptx_src *s, const char *path) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->label = path;
    /* a regular file (not a FIFO that would block, nor a device without end) */
    return gptx_file_open_regular(path, "file", &s->fd, &s->size);
}

void gptx_src_open_memory(gptx_src *s, const void *data, size_t size, const char *label) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->label = label ? label : "<memory>";
    s->mem = data;
    s->size = size;
}

void gptx_src_close(gptx_src *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

int gptx_src_read(const gptx_src *s, uint64_t offset, void *dst, size_t n, const char *what) {
    if (offset > s->size || n > s->size - offset)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' is truncated: %s needs bytes [%llu, %llu) but the file has %llu bytes",
                         s->label, what, (unsigned long long)offset,
                         (unsigned long long)(offset + n), (unsigned long long)s->size);
    if (s->mem) {
        if (n) memcpy(dst, s->mem + offset, n);
        return GPTX_OK;
    }
    unsigned char *p = dst;
    while (n > 0) {
        size_t want = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = pread(s->fd, p, want, (off_t)offset);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0)
            return GPTX_FAIL(GPTX_ERR_IO, "reading %s from '%s' failed: %s", what, s->label,
                             strerror(errno));
        if (r == 0)
            return GPTX_FAIL(GPTX_ERR_IO, "'%s' ended early while reading %s (changed on disk?)",
                             s->label, what);
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return GPTX_OK;
}

/* ---- dtypes ----------------------------------------------------------------- */

static int host_is_little_endian(void) {
    uint16_t x = 1;
    unsigned char c;
    memcpy(&c, &x, 1);
    return c == 1;
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float gptx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) { /* zero or subnormal: mant * 2^-24, exact in fp32 */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13)); /* inf, nan */
    return bits_f32(sign | ((exp + 112u) << 23) | (mant << 13));
}

float gptx_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t gptx_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* nan */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                                    /* below 2^-14: subnormal half */
        float v = nearbyintf(bits_f32(a) * 0x1p24f);          /* exact scaling, then RNE */
        return (uint16_t)(sign | (uint16_t)v);
    }
    uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) >> 13; /* round to nearest even */
    return (uint16_t)(sign | (uint16_t)(r - (112u << 10)));
}

uint16_t gptx_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

const char *gptx_st_dtype_name(int dtype) {
    switch (dtype) {
    case GPTX_ST_F32: return "F32";
    case GPTX_ST_F16: return "F16";
    case GPTX_ST_BF16: return "BF16";
    default: return "?";
    }
}

static size_t dtype_size(int dtype) { return dtype == GPTX_ST_F32 ? 4 : 2; }

int gptx_src_read_f32(const gptx_src *s, uint64_t offset, int dtype, float *dst, size_t count,
                      const char *what) {
    if (dtype != GPTX_ST_F32 && dtype != GPTX_ST_F16 && dtype != GPTX_ST_BF16)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "%s in '%s': cannot convert its dtype to F32", what,
                         s->label);
    size_t es = dtype_size(dtype);
    if (count > SIZE_MAX / es) return GPTX_FAIL(GPTX_ERR_FORMAT, "%s is too large", what);
    if (dtype == GPTX_ST_F32 && host_is_little_endian())
        return gptx_src_read(s, offset, dst, count * es, what);
    enum { CHUNK = 4096 };
    unsigned char buf[CHUNK * 4];
    for (size_t i = 0; i < count; i += CHUNK) {
        size_t k = count - i < CHUNK ? count - i : CHUNK;
        GPTX_TRY(gptx_src_read(s, offset + (uint64_t)i * es, buf, k * es, what));
        for (size_t j = 0; j < k; j++) {
            const unsigned char *b = buf + j * es;
            if (dtype == GPTX_ST_F32)
                dst[i + j] = bits_f32((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                                      (uint32_t)b[3] << 24);
            else if (dtype == GPTX_ST_F16)
                dst[i + j] = gptx_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
            else
                dst[i + j] = gptx_bf16_to_f32((uint16_t)(b[0] | b[1] << 8));
        }
    }
    return GPTX_OK;
}

/* ---- reader ----------------------------------------------------------------- */

/* Every dtype of the safetensors spec, with its element size in bytes. */
static const struct {
    const char *name;
    int dtype;
    unsigned size;
} known_dtypes[] = {
    {"F32", GPTX_ST_F32, 4},    {"F16", GPTX_ST_F16, 2},     {"BF16", GPTX_ST_BF16, 2},
    {"F64", GPTX_ST_OTHER, 8},  {"I64", GPTX_ST_OTHER, 8},   {"U64", GPTX_ST_OTHER, 8},
    {"I32", GPTX_ST_OTHER, 4},  {"U32", GPTX_ST_OTHER, 4},   {"I16", GPTX_ST_OTHER, 2},
    {"U16", GPTX_ST_OTHER, 2},  {"I8", GPTX_ST_OTHER, 1},    {"U8", GPTX_ST_OTHER, 1},
    {"BOOL", GPTX_ST_OTHER, 1}, {"F8_E5M2", GPTX_ST_OTHER, 1}, {"F8_E4M3", GPTX_ST_OTHER, 1},
};

static int read_json_u64(json_t *v, uint64_t *out) {
    if (!json_is_integer(v) || json_integer_value(v) < 0) return 0;
    *out = (uint64_t)json_integer_value(v);
    return 1;
}

/* One header entry "<name>": {"dtype", "shape", "data_offsets"}. */
static int parse_entry(const gptx_src *src, const char *name, json_t *v, gptx_st_tensor *t) {
    const char *L = src->label;
    if (!json_is_object(v))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': header entry '%s' is not an object", L, name);
    t->name = name;
    json_t *jd = json_object_get(v, "dtype");
    if (!json_is_string(jd))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has no \"dtype\" string", L, name);
    const char *ds = json_string_value(jd);
    unsigned es = 0;
    for (size_t i = 0; i < sizeof known_dtypes / sizeof known_dtypes[0]; i++)
        if (strcmp(ds, known_dtypes[i].name) == 0) {
            t->dtype = known_dtypes[i].dtype;
            t->dtype_name = known_dtypes[i].name;
            es = known_dtypes[i].size;
        }
    if (!es)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has unknown dtype \"%.32s\"", L, name,
                         ds);
    json_t *js = json_object_get(v, "shape");
    if (!json_is_array(js))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has no \"shape\" array", L, name);
    if (json_array_size(js) > GPTX_ST_MAX_DIMS)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has %zu dimensions; at most %d", L,
                         name, json_array_size(js), GPTX_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        uint64_t dim;
        if (!read_json_u64(json_array_get(js, (size_t)d), &dim) || dim > ((uint64_t)1 << 62))
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' shape[%d] is not a valid size", L,
                             name, d);
        t->shape[d] = (int64_t)dim;
        if (dim != 0 && numel > (((uint64_t)1 << 62) / es) / dim)
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has too many elements", L, name);
        numel *= dim;
    }
    t->numel = numel;
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !read_json_u64(json_array_get(jo, 0), &t->begin) ||
        !read_json_u64(json_array_get(jo, 1), &t->end))
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s': tensor '%s' needs \"data_offsets\": [begin, end] (integers >= 0)", L,
                         name);
    if (t->end < t->begin)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': tensor '%s' has data_offsets [%llu, %llu] (end < begin)",
                         L, name, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != numel * es) {
        char shp[128];
        gptx_st_shape_str(t->shape, t->ndim, shp, sizeof shp);
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s': tensor '%s' (%s %s) spans %llu bytes; its shape needs %llu", L, name,
                         t->dtype_name, shp, (unsigned long long)(t->end - t->begin),
                         (unsigned long long)(numel * es));
    }
    return GPTX_OK;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gptx_st_tensor *x = *(const gptx_st_tensor *const *)a, *y = *(const gptx_st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const gptx_st_tensor *)a)->name, ((const gptx_st_tensor *)b)->name);
}

/* Tensors must tile the data section exactly: no overlap, no gap, nothing
 * after the last one (as the safetensors spec requires), none past the end. */
static int check_tiling(const gptx_st_file *f) {
    const char *L = f->src.label;
    size_t n = f->ntensors;
    const gptx_st_tensor **order = malloc((n ? n : 1) * sizeof *order);
    if (!order) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    for (size_t i = 0; i < n; i++) order[i] = &f->tensors[i];
    qsort(order, n, sizeof *order, cmp_by_offset);
    uint64_t expected = 0;
    int rc = GPTX_OK;
    for (size_t i = 0; i < n && rc == GPTX_OK; i++) {
        const gptx_st_tensor *t = order[i];
        /* in offset order, the first tensor past the end is the one a
         * truncation cut */
        if (t->end > f->data_size)
            rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                           "'%s' is truncated or corrupt: tensor '%s' needs data bytes [%llu, %llu) "
                           "but the data section has only %llu bytes",
                           L, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                           (unsigned long long)f->data_size);
        else if (t->begin < expected)
            rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                           "'%s': tensor '%s' bytes [%llu, %llu) overlap tensor '%s' [%llu, %llu)",
                           L, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                           order[i - 1]->name, (unsigned long long)order[i - 1]->begin,
                           (unsigned long long)order[i - 1]->end);
        else if (t->begin > expected)
            rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                           "'%s': gap in the data section: tensor '%s' starts at byte %llu, "
                           "the previous data ends at %llu",
                           L, t->name, (unsigned long long)t->begin, (unsigned long long)expected);
        expected = t->end;
    }
    if (rc == GPTX_OK && expected != f->data_size)
        rc = GPTX_FAIL(GPTX_ERR_FORMAT,
                       "'%s': %llu unexpected bytes after the last tensor (data section %llu bytes)",
                       L, (unsigned long long)(f->data_size - expected),
                       (unsigned long long)f->data_size);
    free(order);
    return rc;
}

static int parse_header(gptx_st_file *f, const char *hdr, size_t len) {
    const char *L = f->src.label;
    json_error_t err;
    json_t *root = json_loadb(hdr, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': the header is not valid JSON: %s (byte %d)", L,
                         err.text, err.position);
    f->json = root;
    if (!json_is_object(root))
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': the header is not a JSON object", L);
    json_t *meta = json_object_get(root, "__metadata__");
    if (meta) {
        if (!json_is_object(meta))
            return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': __metadata__ is not an object", L);
        const char *k;
        json_t *v;
        json_object_foreach(meta, k, v) {
            if (!json_is_string(v))
                return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s': __metadata__ value of '%s' is not a string",
                                 L, k);
        }
    }
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0) continue;
        GPTX_TRY(parse_entry(&f->src, k, v, &f->tensors[f->ntensors]));
        f->ntensors++;
    }
    GPTX_TRY(check_tiling(f));
    qsort(f->tensors, f->ntensors, sizeof *f->tensors, cmp_by_name);
    return GPTX_OK;
}

static int parse_file(gptx_st_file *f, const gptx_src *src) {
    const char *L = src->label;
    if (src->size < 8)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s' is %llu bytes; a safetensors file starts with an 8-byte header length",
                         L, (unsigned long long)src->size);
    unsigned char b[8];
    GPTX_TRY(gptx_src_read(src, 0, b, 8, "the header length"));
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    const char *llmc = gptx_llmc_magic_name((uint32_t)(n & 0xffffffffu));
    if (llmc && (n < 2 || n > GPTX_ST_MAX_HEADER)) /* docs/checkpoints.md: named, not guessed at */
        return GPTX_FAIL(GPTX_ERR_FORMAT, "'%s' is %s, not a safetensors file%s", L, llmc,
                         (uint32_t)n == 20240326u ? "; gptx_model_import_llmc (or the programs' --model) "
                                          "reads llm.c models" : "");
    if (n < 2 || n > GPTX_ST_MAX_HEADER)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s': header length is %llu; must be in [2, %u] (not a safetensors file?)",
                         L, (unsigned long long)n, GPTX_ST_MAX_HEADER);
    if (n > src->size - 8)
        return GPTX_FAIL(GPTX_ERR_FORMAT,
                         "'%s': header length %llu exceeds the file size %llu - 8 (truncated?)", L,
                         (unsigned long long)n, (unsigned long long)src->size);
    f->data_start = 8 + n;
    f->data_size = src->size - 8 - n;
    char *hdr = malloc((size_t)n);
    if (!hdr) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory (header of %llu bytes)",
                               (unsigned long long)n);
    int rc = gptx_src_read(src, 8, hdr, (size_t)n, "the header");
    if (rc == GPTX_OK) rc = parse_header(f, hdr, (size_t)n);
    free(hdr);
    return rc;
}

int gptx_st_parse(gptx_st_file *f, const gptx_src *src) {
    memset(f, 0, sizeof *f);
    f->src = *src;
    int rc = parse_file(f, src);
    if (rc != GPTX_OK) {
        f->src.fd = -1; /* the caller keeps the source */
        gptx_st_close(f);
    }
    return rc;
}

int gptx_st_open(gptx_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->src.fd = -1;
    gptx_src src;
    GPTX_TRY(gptx_src_open_file(&src, path));
    int rc = gptx_st_parse(f, &src);
    if (rc != GPTX_OK) gptx_src_close(&src);
    return rc;
}

void gptx_st_close(gptx_st_file *f) {
    if (!f) return;
    gptx_src_close(&f->src);
    if (f->json) json_decref((json_t *)f->json);
    free(f->tensors);
    memset(f, 0, sizeof *f);
    f->src.fd = -1;
}

const gptx_st_tensor *gptx_st_find(const gptx_st_file *f, const char *name) {
    if (!f->tensors) return NULL;
    gptx_st_tensor key;
    key.name = name;
    return bsearch(&key, f->tensors, f->ntensors, sizeof *f->tensors, cmp_by_name);
}

const char *gptx_st_meta(const gptx_st_file *f, const char *key) {
    json_t *meta = json_object_get((json_t *)f->json, "__metadata__");
    json_t *v = meta ? json_object_get(meta, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int gptx_st_meta_checksum(const gptx_st_file *f, const char *skip_key, uint64_t *out) {
    json_t *meta = json_object_get((json_t *)f->json, "__metadata__");
    size_t n = meta ? json_object_size(meta) : 0;
    const char **kv = malloc((2 * n + 1) * sizeof *kv);
    if (!kv) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    size_t i = 0;
    const char *k;
    json_t *v;
    if (meta)
        json_object_foreach(meta, k, v) { /* the open checked that every value is a string */
            kv[2 * i] = k;
            kv[2 * i + 1] = json_string_value(v);
            i++;
        }
    int ok = 0;
    *out = gptx_checksum_pairs(kv, i, skip_key, &ok);
    free(kv);
    return ok ? GPTX_OK : GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
}

int gptx_st_read_f32(const gptx_st_file *f, const gptx_st_tensor *t, float *dst, size_t count) {
    if (count != t->numel)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "count is %zu; tensor '%s' has %llu elements", count,
                         t->name, (unsigned long long)t->numel);
    if (t->dtype == GPTX_ST_OTHER)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "'%s': tensor '%s' has dtype %s; only F32, F16 and BF16 can be loaded",
                         f->src.label, t->name, t->dtype_name);
    char what[96];
    snprintf(what, sizeof what, "tensor '%.64s'", t->name);
    return gptx_src_read_f32(&f->src, f->data_start + t->begin, t->dtype, dst, count, what);
}

void gptx_st_shape_str(const int64_t *shape, int ndim, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && n < len; d++)
        n += (size_t)snprintf(buf + n, len - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < len) snprintf(buf + n, len - n, "]");
}

/* ---- writer ----------------------------------------------------------------- */

static char *build_header(const gptx_st_entry *e, size_t n, const char *const *meta_kv,
                          size_t n_meta, size_t *len_out) {
    json_t *root = json_object(), *meta = json_object();
    int ok = root && meta;
    for (size_t i = 0; ok && i < n_meta; i++)
        ok = json_object_set_new(meta, meta_kv[2 * i], json_string(meta_kv[2 * i + 1])) == 0;
    if (ok && n_meta) ok = json_object_set(root, "__metadata__", meta) == 0;
    uint64_t off = 0;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *t = json_object(), *shape = json_array(), *offs = json_array();
        ok = t && shape && offs;
        for (int d = 0; ok && d < e[i].ndim; d++)
            ok = json_array_append_new(shape, json_integer((json_int_t)e[i].shape[d])) == 0;
        uint64_t bytes = (uint64_t)e[i].numel * dtype_size(e[i].dtype);
        ok = ok && json_array_append_new(offs, json_integer((json_int_t)off)) == 0 &&
             json_array_append_new(offs, json_integer((json_int_t)(off + bytes))) == 0 &&
             json_object_set_new(t, "dtype", json_string(gptx_st_dtype_name(e[i].dtype))) == 0 &&
             json_object_set(t, "shape", shape) == 0 && json_object_set(t, "data_offsets", offs) == 0 &&
             json_object_set(root, e[i].name, t) == 0;
        off += bytes;
        json_decref(t);
        json_decref(shape);
        json_decref(offs);
    }
    char *s = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(meta);
    json_decref(root);
    if (!s) return NULL;
    /* pad with spaces (JSON whitespace) so the data section starts 8-aligned */
    size_t len = strlen(s), padded = (len + 7) / 8 * 8;
    char *p = realloc(s, padded + 1);
    if (!p) {
        free(s);
        return NULL;
    }
    memset(p + len, ' ', padded - len);
    p[padded] = '\0';
    *len_out = padded;
    return p;
}

static void encode(unsigned char *out, const float *src, size_t k, int dtype) {
    for (size_t j = 0; j < k; j++) {
        if (dtype == GPTX_ST_F32) {
            uint32_t u = f32_bits(src[j]);
            out[4 * j] = (unsigned char)u;
            out[4 * j + 1] = (unsigned char)(u >> 8);
            out[4 * j + 2] = (unsigned char)(u >> 16);
            out[4 * j + 3] = (unsigned char)(u >> 24);
        } else {
            uint16_t h = dtype == GPTX_ST_F16 ? gptx_f32_to_f16(src[j]) : gptx_f32_to_bf16(src[j]);
            out[2 * j] = (unsigned char)h;
            out[2 * j + 1] = (unsigned char)(h >> 8);
        }
    }
}

/* The header's checksum fields: their keys and values, and where each value
 * sits in the header, so the sums can be filled in after the data. */
typedef struct sum_plan {
    size_t n;                            /* entries; slot n is the metadata's */
    const char **kv;                     /* the caller's pairs, then ours */
    size_t nkv;
    char **keys;                         /* "checksum.<name>" */
    char (*vals)[17];                    /* 16 hex digits */
    size_t *at;                          /* byte offset of each value in the header */
} sum_plan;

static void sum_plan_free(sum_plan *p) {
    for (size_t i = 0; p->keys && i <= p->n; i++) free(p->keys[i]);
    free(p->kv);
    free(p->keys);
    free(p->vals);
    free(p->at);
}

static int sum_plan_make(sum_plan *p, const gptx_st_entry *e, size_t n, const char *const *meta_kv,
                         size_t n_meta) {
    memset(p, 0, sizeof *p);
    p->n = n;
    p->kv = malloc(2 * (n_meta + n + 2) * sizeof *p->kv);
    p->keys = calloc(n + 1, sizeof *p->keys);
    p->vals = calloc(n + 1, sizeof *p->vals);
    p->at = calloc(n + 1, sizeof *p->at);
    if (!p->kv || !p->keys || !p->vals || !p->at) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    memcpy(p->kv, meta_kv, 2 * n_meta * sizeof *p->kv);
    size_t k = n_meta;
    p->kv[2 * k] = GPTX_CHECKSUM_ALG_KEY;
    p->kv[2 * k + 1] = GPTX_CHECKSUM_NAME;
    k++;
    for (size_t i = 0; i <= n; i++, k++) {
        if (i < n && e[i].dtype != GPTX_ST_F32)
            return GPTX_FAIL(GPTX_ERR_INVALID, "entry '%s' is not F32; checksums cover fp32 values",
                             e[i].name);
        const char *name = i < n ? e[i].name : "__metadata__";
        size_t len = strlen(GPTX_CHECKSUM_PREFIX) + strlen(name) + 1;
        if (!(p->keys[i] = malloc(len))) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        snprintf(p->keys[i], len, "%s%s", GPTX_CHECKSUM_PREFIX, name);
        memset(p->vals[i], '0', 16); /* a placeholder as long as the sum */
        p->kv[2 * k] = p->keys[i];
        p->kv[2 * k + 1] = p->vals[i];
    }
    p->nkv = k;
    return GPTX_OK;
}

/* Finds each placeholder in the dumped header (keys are unique and plain). */
static int sum_plan_locate(sum_plan *p, const char *hdr) {
    for (size_t i = 0; i <= p->n; i++) {
        size_t len = strlen(p->keys[i]) + 8;
        char *pat = malloc(len);
        if (!pat) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        snprintf(pat, len, "\"%s\":\"", p->keys[i]);
        const char *hit = strstr(hdr, pat);
        size_t plen = strlen(pat);
        free(pat);
        if (!hit) return GPTX_FAIL(GPTX_ERR_STATE, "the header lost checksum field '%s'", p->keys[i]);
        p->at[i] = (size_t)(hit - hdr) + plen;
    }
    return GPTX_OK;
}

static int write_file(const char *path, const gptx_st_entry *entries, size_t n,
                      const char *const *meta_kv, size_t n_meta, gptx_st_fetch_fn fetch, void *ud,
                      sum_plan *sums) {
    size_t maxn = 1;
    for (size_t i = 0; i < n; i++) {
        if (entries[i].dtype != GPTX_ST_F32 && entries[i].dtype != GPTX_ST_F16 &&
            entries[i].dtype != GPTX_ST_BF16)
            return GPTX_FAIL(GPTX_ERR_INVALID, "entry '%s' has dtype %d; cannot write it",
                             entries[i].name, entries[i].dtype);
        if (entries[i].numel > maxn) maxn = entries[i].numel;
    }
    size_t hlen = 0;
    char *hdr = sums ? build_header(entries, n, sums->kv, sums->nkv, &hlen)
                     : build_header(entries, n, meta_kv, n_meta, &hlen);
    float *scratch = malloc(maxn * sizeof *scratch);
    enum { CHUNK = 16384 };
    unsigned char *bytes = malloc(CHUNK * 4);
    if (!hdr || !scratch || !bytes) {
        free(hdr);
        free(scratch);
        free(bytes);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory writing '%s'", path);
    }
    int rc = sums ? sum_plan_locate(sums, hdr) : GPTX_OK;
    gptx_afile af;
    if (rc == GPTX_OK) rc = gptx_afile_open(&af, path);
    if (rc == GPTX_OK) {
        unsigned char len8[8];
        for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
        rc = gptx_afile_write(&af, len8, 8);
        if (rc == GPTX_OK) rc = gptx_afile_write(&af, hdr, hlen);
        for (size_t i = 0; i < n && rc == GPTX_OK; i++) {
            rc = fetch(ud, &entries[i], scratch);
            if (rc == GPTX_OK && sums) /* summed as written: one pass over the values */
                snprintf(sums->vals[i], sizeof sums->vals[i], "%016llx",
                         (unsigned long long)gptx_checksum_f32(scratch, entries[i].numel));
            size_t es = dtype_size(entries[i].dtype);
            for (size_t j = 0; j < entries[i].numel && rc == GPTX_OK; j += CHUNK) {
                size_t k = entries[i].numel - j < CHUNK ? entries[i].numel - j : CHUNK;
                encode(bytes, scratch + j, k, entries[i].dtype);
                rc = gptx_afile_write(&af, bytes, k * es);
            }
        }
        if (rc == GPTX_OK && sums) {
            /* the metadata's sum covers the tensors' sums, now known */
            int ok = 0;
            uint64_t msum = gptx_checksum_pairs(sums->kv, sums->nkv, GPTX_CHECKSUM_META_KEY, &ok);
            if (!ok) rc = GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
            snprintf(sums->vals[n], sizeof sums->vals[n], "%016llx", (unsigned long long)msum);
            for (size_t i = 0; i <= n && rc == GPTX_OK; i++)
                rc = gptx_afile_pwrite(&af, 8 + sums->at[i], sums->vals[i], 16);
        }
        if (rc == GPTX_OK) {
            rc = gptx_afile_commit(&af);
        } else {
            /* keep the failing call's message; abort only removes the temp file */
            gptx_afile_abort(&af);
        }
    }
    free(hdr);
    free(scratch);
    free(bytes);
    return rc;
}

int gptx_st_write(const char *path, const gptx_st_entry *entries, size_t n,
                  const char *const *meta_kv, size_t n_meta, gptx_st_fetch_fn fetch, void *ud) {
    return write_file(path, entries, n, meta_kv, n_meta, fetch, ud, NULL);
}

int gptx_st_write_summed(const char *path, const gptx_st_entry *entries, size_t n,
                         const char *const *meta_kv, size_t n_meta, gptx_st_fetch_fn fetch,
                         void *ud) {
    sum_plan p;
    int rc = sum_plan_make(&p, entries, n, meta_kv, n_meta);
    if (rc == GPTX_OK) rc = write_file(path, entries, n, meta_kv, n_meta, fetch, ud, &p);
    sum_plan_free(&p);
    return rc;
}
