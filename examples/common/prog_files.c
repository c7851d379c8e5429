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

const char *prog_file_kind(mode_t mode) {
    return S_ISREG(mode) ? "a regular file" : S_ISDIR(mode) ? "a folder"
           : S_ISFIFO(mode) ? "a FIFO (named pipe)" : S_ISLNK(mode) ? "a symbolic link"
           : S_ISSOCK(mode) ? "a socket" : "a device";
}

int prog_open_regular(const char *path, size_t max, const char **why) {
    /* O_NONBLOCK: a FIFO at the path is refused below instead of waiting
     * for a writer; then reads block as usual */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    static _Thread_local char text[96];
    *why = NULL;
    if (fd < 0) *why = strerror(errno);
    else if (fstat(fd, &st) != 0) *why = strerror(errno);
    else if (!S_ISREG(st.st_mode)) {
        snprintf(text, sizeof text, "%s, not a regular file", prog_file_kind(st.st_mode));
        *why = text;
    } else if ((uint64_t)st.st_size > max) {
        snprintf(text, sizeof text, "it is %lld bytes, over the limit of %zu",
                 (long long)st.st_size, max);
        *why = text;
    } else if (fcntl(fd, F_SETFL, 0) != 0) *why = strerror(errno);
    if (*why && fd >= 0) close(fd);
    return *why ? -1 : fd;
}

int prog_replace_link(const char *prog, const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode) || unlink(path) == 0 || errno == ENOENT)
        return 0;
    fprintf(stderr, "%s: cannot replace the link %s by the program's own file: %s\n", prog, path,
            strerror(errno));
    return -1;
}

/* The file at path for reading, or NULL after a message. */
static FILE *open_regular(const char *prog, const char *what, const char *path, size_t max) {
    const char *why = NULL;
    int fd = prog_open_regular(path, max, &why);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (fd >= 0 && !f) why = strerror(errno);
    if (!f) {
        fprintf(stderr, "%s: cannot read %s %s: %s\n", prog, what, path, why);
        if (fd >= 0) close(fd);
    }
    return f;
}

FILE *prog_open_read(const char *prog, const char *what, const char *path) {
    return open_regular(prog, what, path, SIZE_MAX - 1);
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
    /* O_NOFOLLOW: rows go to the file at path, never through a link */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0666);
    struct stat st;
    const char *why = NULL;
    if (fd < 0)
        why = errno == ENXIO   ? "a FIFO (named pipe), not a regular file"
              : errno == ELOOP ? "a symbolic link, not a regular file"
                               : strerror(errno);
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
