/* Reader for the PyTorch reference fixtures; see fixture.h. */
#include "fixture.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (err == NULL || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Reads the whole file into a malloc'ed buffer. */
static int read_file(const char *path, unsigned char **buf, size_t *len, char *err,
                     size_t errlen)
{
    *buf = NULL;
    *len = 0;
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        set_err(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *data = malloc(cap);
    if (data == NULL) {
        fclose(fp);
        set_err(err, errlen, "%s: out of memory", path);
        return -1;
    }
    for (;;) {
        if (n == cap) {
            if (cap > ((size_t)-1) / 2) {
                free(data);
                fclose(fp);
                set_err(err, errlen, "%s: file too large", path);
                return -1;
            }
            unsigned char *bigger = realloc(data, cap * 2);
            if (bigger == NULL) {
                free(data);
                fclose(fp);
                set_err(err, errlen, "%s: out of memory", path);
                return -1;
            }
            data = bigger;
            cap *= 2;
        }
        size_t got = fread(data + n, 1, cap - n, fp);
        n += got;
        if (got == 0)
            break;
    }
    int failed = ferror(fp);
    fclose(fp);
    if (failed) {
        free(data);
        set_err(err, errlen, "%s: read error", path);
        return -1;
    }
    *buf = data;
    *len = n;
    return 0;
}

typedef struct cursor {
    const unsigned char *p;
    size_t len, pos;
} cursor;

static int take_u32(cursor *c, uint32_t *v)
{
    if (c->len - c->pos < 4)
        return -1;
    const unsigned char *b = c->p + c->pos;
    *v = (uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) | ((uint32_t)b[3] << 24);
    c->pos += 4;
    return 0;
}

void fixture_free(fixture *f)
{
    if (f == NULL)
        return;
    for (int i = 0; i < f->n_entries; i++) {
        free(f->entries[i].name);
        free(f->entries[i].f32);
        free(f->entries[i].i32);
    }
    free(f->entries);
    f->entries = NULL;
    f->n_entries = 0;
}

int fixture_load(const char *path, fixture *out, char *err, size_t errlen)
{
    if (out == NULL || path == NULL) {
        set_err(err, errlen, "fixture_load: NULL argument");
        return -1;
    }
    out->n_entries = 0;
    out->entries = NULL;

    unsigned char *buf;
    size_t len;
    if (read_file(path, &buf, &len, err, errlen) != 0)
        return -1;

    cursor c = {buf, len, 0};
    uint32_t version, n_entries;
    if (len < 8 || memcmp(buf, FIXTURE_MAGIC, 8) != 0) {
        set_err(err, errlen, "%s: not a gptx fixture (bad magic, expected \"%s\")", path,
                FIXTURE_MAGIC);
        goto fail;
    }
    c.pos = 8;
    if (take_u32(&c, &version) != 0 || take_u32(&c, &n_entries) != 0) {
        set_err(err, errlen, "%s: truncated header (%zu bytes)", path, len);
        goto fail;
    }
    if (version != FIXTURE_VERSION) {
        set_err(err, errlen, "%s: unsupported fixture version %u (expected %u)", path,
                (unsigned)version, FIXTURE_VERSION);
        goto fail;
    }
    /* Every entry needs at least 12 bytes: a cheap bound before allocating. */
    if (n_entries > (len - c.pos) / 12 || n_entries > 1000000u) {
        set_err(err, errlen, "%s: entry count %u does not fit a %zu-byte file", path,
                (unsigned)n_entries, len);
        goto fail;
    }
    out->entries = calloc(n_entries ? n_entries : 1, sizeof(fixture_entry));
    if (out->entries == NULL) {
        set_err(err, errlen, "%s: out of memory", path);
        goto fail;
    }

    for (uint32_t i = 0; i < n_entries; i++) {
        size_t start = c.pos;
        uint32_t name_len, dtype, ndim;
        if (take_u32(&c, &name_len) != 0) {
            set_err(err, errlen, "%s: truncated at entry %u (offset %zu): missing name length",
                    path, (unsigned)i, start);
            goto fail;
        }
        if (name_len == 0 || name_len > FIXTURE_MAX_NAME) {
            set_err(err, errlen, "%s: entry %u (offset %zu): bad name length %u", path,
                    (unsigned)i, start, (unsigned)name_len);
            goto fail;
        }
        if (len - c.pos < name_len) {
            set_err(err, errlen, "%s: truncated in the name of entry %u (offset %zu)", path,
                    (unsigned)i, start);
            goto fail;
        }
        fixture_entry *e = &out->entries[i];
        out->n_entries = (int)i + 1; /* so that fixture_free releases this entry */
        e->name = malloc(name_len + 1);
        if (e->name == NULL) {
            set_err(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        memcpy(e->name, buf + c.pos, name_len);
        e->name[name_len] = '\0';
        c.pos += name_len;
        if (strlen(e->name) != name_len) {
            set_err(err, errlen, "%s: entry %u (offset %zu): name contains a NUL byte", path,
                    (unsigned)i, start);
            goto fail;
        }
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(out->entries[j].name, e->name) == 0) {
                set_err(err, errlen, "%s: duplicate entry \"%s\"", path, e->name);
                goto fail;
            }
        }
        if (take_u32(&c, &dtype) != 0 || take_u32(&c, &ndim) != 0) {
            set_err(err, errlen, "%s: truncated in the header of entry \"%s\"", path, e->name);
            goto fail;
        }
        if (dtype != FIXTURE_F32 && dtype != FIXTURE_I32) {
            set_err(err, errlen, "%s: entry \"%s\": unknown dtype %u", path, e->name,
                    (unsigned)dtype);
            goto fail;
        }
        if (ndim > FIXTURE_MAX_DIMS) {
            set_err(err, errlen, "%s: entry \"%s\": ndim %u exceeds %d", path, e->name,
                    (unsigned)ndim, FIXTURE_MAX_DIMS);
            goto fail;
        }
        e->dtype = (int)dtype;
        e->ndim = (int)ndim;
        size_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            uint32_t s;
            if (take_u32(&c, &s) != 0) {
                set_err(err, errlen, "%s: truncated in the shape of entry \"%s\"", path, e->name);
                goto fail;
            }
            e->shape[d] = (int64_t)s;
            if (s != 0 && numel > ((size_t)-1) / 4 / s) {
                set_err(err, errlen, "%s: entry \"%s\": shape overflows", path, e->name);
                goto fail;
            }
            numel *= s;
        }
        e->numel = numel;
        size_t nbytes = numel * 4;
        if (len - c.pos < nbytes) {
            set_err(err, errlen,
                    "%s: truncated in the data of entry \"%s\" (needs %zu bytes at offset %zu, "
                    "file has %zu)",
                    path, e->name, nbytes, c.pos, len);
            goto fail;
        }
        void *data = malloc(nbytes ? nbytes : 1);
        if (data == NULL) {
            set_err(err, errlen, "%s: out of memory", path);
            goto fail;
        }
        if (dtype == FIXTURE_F32)
            e->f32 = data;
        else
            e->i32 = data;
        for (size_t k = 0; k < numel; k++) {
            uint32_t v = 0;
            (void)take_u32(&c, &v); /* size checked above */
            if (dtype == FIXTURE_F32)
                memcpy(&e->f32[k], &v, 4);
            else
                memcpy(&e->i32[k], &v, 4);
        }
    }
    if (c.pos != len) {
        set_err(err, errlen, "%s: %zu unexpected trailing bytes after %u entries", path,
                len - c.pos, (unsigned)n_entries);
        goto fail;
    }
    free(buf);
    return 0;

fail:
    free(buf);
    fixture_free(out);
    return -1;
}

const fixture_entry *fixture_find(const fixture *f, const char *name)
{
    if (f == NULL || name == NULL)
        return NULL;
    for (int i = 0; i < f->n_entries; i++)
        if (strcmp(f->entries[i].name, name) == 0)
            return &f->entries[i];
    return NULL;
}

const fixture_entry *fixture_get(const fixture *f, const char *name, int dtype, size_t numel,
                                 char *err, size_t errlen)
{
    const fixture_entry *e = fixture_find(f, name);
    if (e == NULL) {
        set_err(err, errlen, "missing entry \"%s\"", name);
        return NULL;
    }
    if (e->dtype != dtype) {
        set_err(err, errlen, "entry \"%s\" has dtype %s, expected %s", name,
                e->dtype == FIXTURE_F32 ? "float32" : "int32",
                dtype == FIXTURE_F32 ? "float32" : "int32");
        return NULL;
    }
    if (numel != 0 && e->numel != numel) {
        set_err(err, errlen, "entry \"%s\" has %zu elements, expected %zu", name, e->numel,
                numel);
        return NULL;
    }
    return e;
}

void fixture_shape_str(const fixture_entry *e, char *buf, size_t buflen)
{
    if (buf == NULL || buflen == 0)
        return;
    size_t n = 0;
    buf[0] = '\0';
    n += (size_t)snprintf(buf + n, buflen - n, "[");
    for (int d = 0; d < e->ndim && n < buflen; d++)
        n += (size_t)snprintf(buf + n, buflen - n, d ? ", %lld" : "%lld", (long long)e->shape[d]);
    if (n < buflen)
        snprintf(buf + n, buflen - n, "]");
}
