/* prog_files.h */
#define _POSIX_C_SOURCE 200809L
#include "prog_files.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

char *prog_read_file(const char *prog, const char *what, const char *path, size_t *len) {
    int is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot read %s %s: %s\n", prog, what, path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (!is_stdin && (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))) {
        fprintf(stderr, "%s: cannot read %s %s: not a regular file\n", prog, what, path);
        fclose(f);
        return NULL;
    }
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
    } while (got > 0);
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
