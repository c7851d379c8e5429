/*
 * The safetensors container: reader, writer, dtype conversion.
 *
 *   uint64 LE  N                 header length
 *   N bytes    JSON header       {"__metadata__": {str: str},
 *                                 "<name>": {"dtype": "F32", "shape": [...],
 *                                            "data_offsets": [begin, end]}, ...}
 *   data       raw little-endian tensor bytes; offsets are relative to here
 *
 * The reader validates the whole structure when opening (header bounds, JSON,
 * dtypes, shapes, offsets in range, no overlap, no gap, no trailing bytes), so
 * callers only check names, dtypes and shapes against what they expect.
 * Also here: the byte source (file or memory) shared with the llm.c importer,
 * and the internal entry points of checkpoint.c and import.c that work on an
 * already opened source (used by the public functions and the fuzzer).
 */
#ifndef GPTX_SAFETENSORS_H
#define GPTX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"

/* Header length limit: far above any real model's header (GPT-2: ~15 KB). */
#define GPTX_ST_MAX_HEADER (100u * 1000u * 1000u)
#define GPTX_ST_MAX_DIMS 8

/* ---- byte source: a file (read with pread) or a memory buffer ------------ */

typedef struct gptx_src {
    const char *label; /* the path (or a description), for messages; not owned */
    int fd;            /* -1 for a memory source */
    const unsigned char *mem;
    uint64_t size;
} gptx_src;

int gptx_src_open_file(gptx_src *s, const char *path);
void gptx_src_open_memory(gptx_src *s, const void *data, size_t size, const char *label);
void gptx_src_close(gptx_src *s);
/* n bytes at offset; GPTX_ERR_FORMAT naming `what` if they are past the end. */
int gptx_src_read(const gptx_src *s, uint64_t offset, void *dst, size_t n, const char *what);

/* ---- dtypes -------------------------------------------------------------- */

typedef enum gptx_st_dtype {
    GPTX_ST_F32 = 0,
    GPTX_ST_F16 = 1,
    GPTX_ST_BF16 = 2,
    GPTX_ST_OTHER = 3 /* a valid safetensors dtype gptx does not convert (I64, F64, ...) */
} gptx_st_dtype;

float gptx_f16_to_f32(uint16_t h);
float gptx_bf16_to_f32(uint16_t b);
uint16_t gptx_f32_to_f16(float f);  /* round to nearest even; overflow -> inf */
uint16_t gptx_f32_to_bf16(float f); /* round to nearest even */
const char *gptx_st_dtype_name(int dtype);

/* count elements of `dtype` (F32, F16 or BF16) at byte offset, converted to
 * fp32 into dst. Reads in chunks: no second buffer of the tensor's size. */
int gptx_src_read_f32(const gptx_src *s, uint64_t offset, int dtype, float *dst, size_t count,
                      const char *what);

/* ---- reader -------------------------------------------------------------- */

typedef struct gptx_st_tensor {
    const char *name;       /* owned by the file */
    int dtype;              /* gptx_st_dtype */
    const char *dtype_name; /* as written in the header ("F32", "I64", ...) */
    int ndim;
    int64_t shape[GPTX_ST_MAX_DIMS];
    uint64_t numel;
    uint64_t begin, end; /* bytes, relative to the data section */
} gptx_st_tensor;

typedef struct gptx_st_file {
    gptx_src src;
    uint64_t data_start; /* 8 + header length */
    uint64_t data_size;
    void *json;                /* the parsed header (json_t *) */
    gptx_st_tensor *tensors;   /* sorted by name */
    size_t ntensors;
} gptx_st_file;

/* Parses and validates the header of an open source; on success f owns src
 * (gptx_st_close closes it), on failure src is left open for the caller. */
int gptx_st_parse(gptx_st_file *f, const gptx_src *src);
/* Opens and validates a file. */
int gptx_st_open(gptx_st_file *f, const char *path);
void gptx_st_close(gptx_st_file *f);
const gptx_st_tensor *gptx_st_find(const gptx_st_file *f, const char *name);
/* Value of a __metadata__ key, or NULL. */
const char *gptx_st_meta(const gptx_st_file *f, const char *key);
/* gptx_checksum_pairs of every __metadata__ entry but skip_key. */
int gptx_st_meta_checksum(const gptx_st_file *f, const char *skip_key, uint64_t *out);
/* A tensor's data as fp32 (F32, F16 or BF16 in the file); count == numel. */
int gptx_st_read_f32(const gptx_st_file *f, const gptx_st_tensor *t, float *dst, size_t count);
/* "[a, b, c]" */
void gptx_st_shape_str(const int64_t *shape, int ndim, char *buf, size_t len);

/* ---- writer -------------------------------------------------------------- */

typedef struct gptx_st_entry {
    const char *name;
    int dtype; /* on disk: GPTX_ST_F32, F16 or BF16 (converted from fp32) */
    int ndim;
    int64_t shape[GPTX_ST_MAX_DIMS];
    size_t numel;
    const void *src; /* handed back to fetch */
} gptx_st_entry;

/* Fills dst with the entry's numel fp32 values. */
typedef int (*gptx_st_fetch_fn)(void *ud, const gptx_st_entry *e, float *dst);

/* Writes entries in the given order, __metadata__ from meta_kv (n_meta pairs
 * of key, value), atomically (see atomic_file.h). The header is padded with
 * spaces to a multiple of 8 bytes so the data section is aligned. */
int gptx_st_write(const char *path, const gptx_st_entry *entries, size_t n,
                  const char *const *meta_kv, size_t n_meta, gptx_st_fetch_fn fetch, void *ud);
/* The same, with checksums (checksum.h) in the metadata: every entry's, summed
 * while it is written (entries must be F32), and the metadata's; the header
 * is written with placeholders of the same length and filled in at the end. */
int gptx_st_write_summed(const char *path, const gptx_st_entry *entries, size_t n,
                         const char *const *meta_kv, size_t n_meta, gptx_st_fetch_fn fetch,
                         void *ud);

/* ---- loaders on an open source (checkpoint.c, import.c) ------------------ */

/* GPTX_ERR_FORMAT naming the first field of a config read from a file that
 * gptx_model_create would reject (checked before anything is allocated). */
int gptx_ckpt_check_config(const gptx_model_config *c, const char *label);

int gptx_ckpt_model_load_st(gptx_model **out, gptx_context *ctx, const gptx_st_file *f);
int gptx_ckpt_load_weights_st(gptx_model *model, const gptx_st_file *f);
int gptx_ckpt_load_st(gptx_model *model, gptx_train_state *st, const gptx_st_file *f);
/* hc: the folder's config.json (hf_config.h), or NULL when there is none */
struct gptx_hf_config;
int gptx_import_hf_st(gptx_model **out, gptx_context *ctx, const gptx_st_file *f,
                      const gptx_model_config *cfg, const struct gptx_hf_config *hc);
int gptx_import_llmc_src(gptx_model **out, gptx_context *ctx, const gptx_src *src);

#endif
