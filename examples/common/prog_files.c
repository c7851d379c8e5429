/* prog_files.h */
#define _POSIX_C_SOURCE 200809L
#include "prog_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gptx/gptx.h"
#include "prog_error.h"

/* The file at path for reading, or NULL after a message. O_NONBLOCK: a
 * FIFO at the path is refused below instead of waiting for a writer. */
static FILE *open_regular(const char *prog, const char *what, const char *path, size_t max) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    const char *why = NULL;
    if (fd < 0) why = strerror(errno);
    else if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    if (why) {
        fprintf(stderr, "%s: cannot read %s %s: %s\n", prog, what, path, why);
        if (fd >= 0) close(fd);
        return NULL;
    }
    if ((uint64_t)st.st_size > max) {
        fprintf(stderr, "%s: cannot read %s %s: it is %lld bytes, over the limit of %zu\n", prog,
                what, path, (long long)st.st_size, max);
        close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot read %s %s: %s\n", prog, what, path, strerror(errno));
        close(fd);
    }
    return f;
}

char *prog_read_file(const char *prog, const char *what, const char *path, size_t *len) {
    return prog_read_file_max(prog, what, path, SIZE_MAX - 1, len);
}

char *prog_read_file_max(const char *prog, const char *what, const char *path, size_t max,
                         size_t *len) {
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : open_regular(prog, what, path, max);
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap = cap ? cap * 2 : 1 << 16);
            if (!nb) {
                fprintf(stderr, "%s: cannot read %s %s: out of memory at %zu bytes\n", prog, what,
                        path, n);
                free(buf);
                if (!is_stdin) fclose(f);
                return NULL;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
    } while (got > 0 && n <= max);
    if (n > max) { /* standard input, or a file that grew while being read */
        fprintf(stderr, "%s: cannot read %s %s: over the limit of %zu bytes\n", prog, what, path,
                max);
        free(buf);
        if (!is_stdin) fclose(f);
        return NULL;
    }
    int failed = ferror(f);
    if (!is_stdin) fclose(f);
    if (failed) {
        fprintf(stderr, "%s: cannot read %s %s: read error after %zu bytes\n", prog, what, path, n);
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

int prog_out_open(prog_out *o, const char *prog, const char *path) {
    o->buf = NULL;
    o->len = 0;
    o->f = open_memstream(&o->buf, &o->len);
    if (o->f) return 0;
    fprintf(stderr, "%s: cannot write %s: out of memory\n", prog, path);
    return -1;
}

int prog_out_save(prog_out *o, const char *prog, const char *what, const char *path) {
    int failed = ferror(o->f) | (fclose(o->f) != 0); /* fclose sets buf and len */
    int rc = failed ? GPTX_ERR_NO_MEMORY : gptx_file_save(path, o->buf, o->len);
    free(o->buf);
    o->buf = NULL;
    o->f = NULL;
    if (rc == GPTX_OK) return 0;
    fprintf(stderr, "%s%s: cannot write %s %s: %s\n", prog_error_lead(), prog, what, path,
            failed ? "out of memory" : prog_error_text());
    return -1;
}

FILE *prog_open_rows(const char *prog, const char *what, const char *path, int truncate) {
    /* O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of waiting */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_CLOEXEC, 0666);
    struct stat st;
    const char *why = NULL;
    if (fd < 0) why = errno == ENXIO ? "a FIFO (named pipe), not a regular file" : strerror(errno);
    else if (fstat(fd, &st) != 0) why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) why = "not a regular file";
    else if (truncate && ftruncate(fd, 0) != 0) why = strerror(errno);
    else if (fcntl(fd, F_SETFL, O_APPEND) != 0) why = strerror(errno); /* blocking writes */
    FILE *f = why ? NULL : fdopen(fd, "a");
    if (!f) {
        fprintf(stderr, "%s: cannot write %s %s: %s\n", prog, what, path,
                why ? why : strerror(errno));
        if (fd >= 0) close(fd);
    }
    return f;
}
