/* Helpers for the checkpoint tests: a scratch directory, whole-file I/O,
 * comparing all parameters of two models. Include after defining
 * _POSIX_C_SOURCE 200809L (mkdtemp, dirent). */
#ifndef GPTX_CKPT_UTIL_H
#define GPTX_CKPT_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "gptx/gptx.h"

typedef struct scratch_dir {
    char path[256];
} scratch_dir;

static inline int scratch_make(scratch_dir *d, const char *tag) {
    const char *base = getenv("TMPDIR");
    snprintf(d->path, sizeof d->path, "%s/gptx_%s_XXXXXX", base && base[0] ? base : "/tmp", tag);
    return mkdtemp(d->path) ? 0 : -1;
}

/* "<dir>/<name>" in a static rotating buffer (enough for a few at once) */
static inline const char *scratch_file(const scratch_dir *d, const char *name) {
    static char bufs[8][320];
    static int next = 0;
    char *b = bufs[next++ % 8];
    snprintf(b, 320, "%s/%s", d->path, name);
    return b;
}

/* Number of entries in the directory (excluding . and ..). */
static inline int scratch_count(const scratch_dir *d) {
    DIR *dir = opendir(d->path);
    if (!dir) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
    closedir(dir);
    return n;
}

/* Any entry whose name contains ".tmp." (an atomic write left behind). */
static inline int scratch_has_temp(const scratch_dir *d) {
    DIR *dir = opendir(d->path);
    if (!dir) return 0;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (strstr(e->d_name, ".tmp.")) found = 1;
    closedir(dir);
    return found;
}

/* Removes the directory's files (one level) and the directory. */
static inline void scratch_remove(scratch_dir *d) {
    DIR *dir = opendir(d->path);
    if (dir) {
        struct dirent *e;
        char p[600];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            snprintf(p, sizeof p, "%s/%s", d->path, e->d_name);
            if (unlink(p) != 0) rmdir(p);
        }
        closedir(dir);
    }
    rmdir(d->path);
}

static inline unsigned char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(len > 0 ? (size_t)len : 1);
    if (buf && len > 0 && fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    return buf;
}

static inline int write_all(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int rc = fclose(f);
    return w == n && rc == 0 ? 0 : -1;
}

/* All parameters of a model, concatenated in tensor order (malloc'ed). */
static inline float *all_params(const gptx_model *m, size_t *n) {
    *n = gptx_model_num_parameters(m);
    float *buf = malloc(*n * sizeof *buf);
    size_t off = 0;
    for (int i = 0; buf && i < gptx_model_num_tensors(m); i++) {
        gptx_tensor_info info;
        gptx_tensor_info_init(&info);
        gptx_model_tensor_info(m, i, &info);
        gptx_model_get_parameter(m, info.name, buf + off, info.numel);
        off += info.numel;
    }
    return buf;
}

/* 1 when both models hold bitwise identical parameters. */
static inline int same_params(const gptx_model *a, const gptx_model *b) {
    size_t na, nb;
    float *pa = all_params(a, &na), *pb = all_params(b, &nb);
    int same = pa && pb && na == nb && memcmp(pa, pb, na * sizeof *pa) == 0;
    free(pa);
    free(pb);
    return same;
}

/* REQUIRE_OK for void helpers: records the failure and returns. */
#define REQUIRE_OK_VOID(call)                                                        \
    do {                                                                             \
        int require_rc_ = (call);                                                    \
        if (require_rc_ != GPTX_OK) {                                                \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    gptx_status_name(require_rc_), gptx_last_error());               \
            check_failures++;                                                        \
            return;                                                                  \
        }                                                                            \
    } while (0)

#endif
