/* Regular files only, of bounded size (see file_read.h). */
#define _DEFAULT_SOURCE /* S_IFSOCK */
#include "file_read.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

const char *gptx_file_kind(unsigned mode) {
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO (named pipe)";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    case S_IFLNK: return "a symbolic link";
    default: return "not a regular file";
    }
}

int gptx_file_open_regular(const char *path, const char *what, int *fd, uint64_t *size) {
    *fd = -1;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO would otherwise wait for a writer; it has
     * no effect on the reads of a regular file */
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (d < 0) return GPTX_FAIL(GPTX_ERR_IO, "cannot open %s '%s': %s", what, path, strerror(errno));
    struct stat st;
    if (fstat(d, &st) != 0) {
        int e = errno;
        close(d);
        return GPTX_FAIL(GPTX_ERR_IO, "cannot stat %s '%s': %s", what, path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(d);
        return GPTX_FAIL(GPTX_ERR_IO, "%s '%s' is %s, not a regular file", what, path,
                         gptx_file_kind(st.st_mode));
    }
    *fd = d;
    *size = (uint64_t)st.st_size;
    return GPTX_OK;
}

static int too_large(const char *path, const char *what, uint64_t size, size_t max_bytes) {
    return GPTX_FAIL(GPTX_ERR_IO, "%s '%s' is %llu bytes, over the limit of %zu bytes for %s files",
                     what, path, (unsigned long long)size, max_bytes, what);
}

/* Reads up to cap bytes; *got is what there was (less at the end). */
static int read_up_to(int fd, unsigned char *b, size_t cap, size_t *got) {
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        n += (size_t)r;
    }
    *got = n;
    return 0;
}

int gptx_file_read_whole(const char *path, const char *what, size_t max_bytes,
                         unsigned char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    int fd;
    uint64_t size;
    GPTX_TRY(gptx_file_open_regular(path, what, &fd, &size));
    if (size > max_bytes) {
        close(fd);
        return too_large(path, what, size, max_bytes);
    }
    /* one byte more than the file: a file that grew is seen, up to the bound */
    size_t cap = (size_t)size < max_bytes ? (size_t)size + 1 : max_bytes + 1;
    unsigned char *b = malloc(cap + 1);
    if (!b) {
        close(fd);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory reading %s '%s' (%llu bytes)",
                         what, path, (unsigned long long)size);
    }
    size_t got = 0;
    int failed = read_up_to(fd, b, cap, &got);
    int e = errno;
    close(fd);
    int rc = GPTX_OK;
    if (failed)
        rc = GPTX_FAIL(GPTX_ERR_IO, "error reading %s '%s': %s", what, path, strerror(e));
    else if (got > max_bytes)
        rc = GPTX_FAIL(GPTX_ERR_IO, "%s '%s' grew past %zu bytes, the limit for %s files, while "
                                    "being read", what, path, max_bytes, what);
    if (rc != GPTX_OK) {
        free(b);
        return rc;
    }
    b[got] = '\0';
    *buf = b;
    *len = got;
    return GPTX_OK;
}
