/*
 * Reader for the PyTorch reference fixtures (*.gptxfix) written by
 * make_fixtures.py. The format is described in README.md next to this file:
 *
 *   char magic[8] = "GPTXFIX1"; uint32 version = 1; uint32 n_entries;
 *   n_entries times: uint32 name_len; char name[name_len];
 *                    uint32 dtype (0 = float32, 1 = int32);
 *                    uint32 ndim; uint32 shape[ndim]; data (little endian)
 *
 * C11, no dependencies beyond the standard library; independent of host
 * endianness. The whole file is validated on load: a truncated, oversized or
 * otherwise malformed file is rejected with a message naming the file, the
 * entry and the byte offset.
 */
#ifndef GPTX_TESTS_FIXTURE_H
#define GPTX_TESTS_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#define FIXTURE_MAGIC "GPTXFIX1"
#define FIXTURE_VERSION 1u
#define FIXTURE_MAX_DIMS 8
#define FIXTURE_MAX_NAME 1024

typedef enum fixture_dtype {
    FIXTURE_F32 = 0,
    FIXTURE_I32 = 1
} fixture_dtype;

typedef struct fixture_entry {
    char *name;                        /* NUL-terminated copy of the entry name */
    int dtype;                         /* fixture_dtype */
    int ndim;                          /* 0 .. FIXTURE_MAX_DIMS */
    int64_t shape[FIXTURE_MAX_DIMS];
    size_t numel;                      /* product of shape (1 for ndim == 0) */
    float *f32;                        /* data when dtype == FIXTURE_F32, else NULL */
    int32_t *i32;                      /* data when dtype == FIXTURE_I32, else NULL */
} fixture_entry;

typedef struct fixture {
    int n_entries;
    fixture_entry *entries;            /* in file order */
} fixture;

/* Loads `path` into `out` (which need not be initialised). Returns 0 on
 * success; on failure returns -1, leaves `out` empty (safe to free) and writes
 * a message into err (if err != NULL and errlen > 0). */
int fixture_load(const char *path, fixture *out, char *err, size_t errlen);

/* Frees everything owned by `f` and empties it. Safe on an empty fixture. */
void fixture_free(fixture *f);

/* Entry called `name`, or NULL. */
const fixture_entry *fixture_find(const fixture *f, const char *name);

/* Entry called `name` that has the given dtype and `numel` elements (numel 0 =
 * any count); NULL otherwise, with a reason in err. */
const fixture_entry *fixture_get(const fixture *f, const char *name, int dtype, size_t numel,
                                 char *err, size_t errlen);

/* Writes "[d0, d1, ...]" for the entry's shape into buf. */
void fixture_shape_str(const fixture_entry *e, char *buf, size_t buflen);

#endif /* GPTX_TESTS_FIXTURE_H */
