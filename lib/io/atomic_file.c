/* Temp file + fsync + rename + folder fsync (see atomic_file.h). */
#define _DEFAULT_SOURCE /* O_DIRECTORY, O_NOFOLLOW, readlink */
#include "atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "file_read.h"

#define MAX_LINKS 40 /* the kernel's own limit on a chain of symbolic links */

static _Atomic int64_t fail_after = -1;

void gptx_afile_fail_after_for_testing(int64_t bytes) { atomic_store(&fail_after, bytes); }

static void release(gptx_afile *f) {
    if (f->fd >= 0) close(f->fd);
    if (f->dir_fd >= 0) close(f->dir_fd);
    f->fd = f->dir_fd = -1;
    free(f->path);
    free(f->name);
    free(f->tmp_name);
    free(f->tmp_path);
    f->path = f->name = f->tmp_name = f->tmp_path = NULL;
}

void gptx_afile_abort(gptx_afile *f) {
    if (!f) return;
    if (f->fd >= 0 && f->tmp_name) {
        close(f->fd);
        f->fd = -1;
        unlinkat(f->dir_fd, f->tmp_name, 0);
    }
    release(f);
}

static char *copy_n(const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (c) {
        memcpy(c, s, n);
        c[n] = '\0';
    }
    return c;
}

/* Where the symbolic link at `link` points, as a path usable from here: a
 * relative target is relative to the link's folder. NULL when out of
 * memory or unreadable (errno says which). */
static char *link_target(const char *link) {
    char buf[PATH_MAX];
    ssize_t n = readlink(link, buf, sizeof buf);
    if (n < 0) return NULL;
    if ((size_t)n >= sizeof buf) {
        errno = ENAMETOOLONG;
        return NULL;
    }
    const char *slash = strrchr(link, '/');
    size_t dlen = buf[0] == '/' || !slash ? 0 : (size_t)(slash - link) + 1;
    char *t = malloc(dlen + (size_t)n + 1);
    if (!t) return NULL;
    memcpy(t, link, dlen);
    memcpy(t + dlen, buf, (size_t)n);
    t[dlen + (size_t)n] = '\0';
    return t;
}

/* What a save of `path` replaces (see atomic_file.h): *out is path, or the
 * end of its chain of links; a path that cannot be looked at is left to the
 * open to report. */
static int save_target(const char *path, char **out) {
    char *cur = copy_n(path, strlen(path));
    for (int links = 0; cur; links++) {
        struct stat st;
        if (lstat(cur, &st) != 0 || S_ISREG(st.st_mode)) {
            *out = cur;
            return GPTX_OK;
        }
        int rc = GPTX_OK;
        if (!S_ISLNK(st.st_mode))
            rc = GPTX_FAIL(GPTX_ERR_IO, "cannot save to '%s'%s%s%s: it is %s, not a regular file",
                           path, strcmp(cur, path) ? " (a link to '" : "",
                           strcmp(cur, path) ? cur : "", strcmp(cur, path) ? "')" : "",
                           gptx_file_kind(st.st_mode));
        else if (links == MAX_LINKS)
            rc = GPTX_FAIL(GPTX_ERR_IO, "cannot save to '%s': more than %d symbolic links in a "
                                        "chain", path, MAX_LINKS);
        char *next = rc == GPTX_OK ? link_target(cur) : NULL;
        if (rc == GPTX_OK && !next)
            rc = errno == ENOMEM ? GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory")
                                 : GPTX_FAIL(GPTX_ERR_IO, "cannot read the symbolic link '%s': %s",
                                             cur, strerror(errno));
        free(cur);
        if (rc != GPTX_OK) return rc;
        cur = next;
    }
    return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
}

/* This host's name, for temp names: on a shared folder, only this host can
 * tell whether a pid is alive. */
static void host_name(char *buf, size_t cap) {
    if (gethostname(buf, cap) != 0 || !buf[0]) snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '/' || *c == '.') *c = '_'; /* one path component, no extra dots */
}

/* Removes "<name>.tmp.<this host>.<pid>" files whose writer is dead (a
 * process killed in the middle of a save leaves one, up to the size of the
 * file): the next save of the same path cleans up after it. */
static void remove_stale_temps(const gptx_afile *f, const char *host) {
    size_t plen = strlen(f->name) + strlen(host) + 6;
    char *prefix = malloc(plen + 1);
    int dfd = dup(f->dir_fd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d && dfd >= 0) close(dfd);
    if (!prefix || !d) {
        free(prefix);
        if (d) closedir(d);
        return;
    }
    snprintf(prefix, plen + 1, "%s.tmp.%s.", f->name, host);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, plen) != 0) continue;
        char *end = NULL;
        errno = 0;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (errno || !end || *end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to know */
        unlinkat(f->dir_fd, e->d_name, 0);
    }
    closedir(d);
    free(prefix);
}

/* f->path split into its folder (opened as f->dir_fd) and f->name. */
static int open_folder(gptx_afile *f, const char *path) {
    const char *slash = strrchr(f->path, '/');
    const char *name = slash ? slash + 1 : f->path;
    if (!name[0])
        return GPTX_FAIL(GPTX_ERR_INVALID, "cannot save to '%s': the path ends with '/' (a file "
                                           "name is needed)", path);
    char *dir = slash ? copy_n(f->path, slash == f->path ? 1 : (size_t)(slash - f->path))
                      : copy_n(".", 1);
    f->name = copy_n(name, strlen(name));
    if (!dir || !f->name) {
        free(dir);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    f->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int e = errno, rc = GPTX_OK;
    if (f->dir_fd < 0 && (e == ENOENT || e == ENOTDIR))
        rc = GPTX_FAIL(GPTX_ERR_IO, "cannot write '%s': the folder '%s' %s (%s)", path, dir,
                       e == ENOENT ? "does not exist" : "is not a folder", strerror(e));
    else if (f->dir_fd < 0)
        rc = GPTX_FAIL(GPTX_ERR_IO, "cannot write '%s': cannot open its folder '%s': %s", path,
                       dir, strerror(e));
    free(dir);
    return rc;
}

/* The temp file, in the target's folder: rename() never crosses file
 * systems. Opened through the folder's handle, its name is short. */
static int create_temp(gptx_afile *f, const char *path) {
    char host[72];
    host_name(host, sizeof host);
    size_t n = strlen(f->name) + strlen(host) + 32;
    f->tmp_name = malloc(n);
    size_t dlen = strlen(f->path) - strlen(f->name), tcap = dlen + n;
    f->tmp_path = malloc(tcap);
    if (!f->tmp_name || !f->tmp_path) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    snprintf(f->tmp_name, n, "%s.tmp.%s.%ld", f->name, host, (long)getpid());
    snprintf(f->tmp_path, tcap, "%.*s%s", (int)dlen, f->path, f->tmp_name);
    remove_stale_temps(f, host);
    f->fd = openat(f->dir_fd, f->tmp_name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
                   0644);
    if (f->fd < 0)
        return GPTX_FAIL(GPTX_ERR_IO, "cannot write '%s' (its temporary file '%s'): %s", path,
                         f->tmp_path, strerror(errno));
    return GPTX_OK;
}

int gptx_afile_open(gptx_afile *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = f->dir_fd = -1;
    if (!path || !path[0]) return GPTX_FAIL(GPTX_ERR_INVALID, "path is empty");
    int rc = save_target(path, &f->path);
    if (rc == GPTX_OK && strlen(f->path) >= PATH_MAX)
        rc = GPTX_FAIL(GPTX_ERR_IO, "cannot save to '%s': its path is %zu bytes long, the "
                                    "system's limit is %d (File name too long)",
                       f->path, strlen(f->path), PATH_MAX - 1);
    if (rc == GPTX_OK) rc = open_folder(f, path);
    if (rc == GPTX_OK) rc = create_temp(f, path);
    if (rc != GPTX_OK) release(f);
    return rc;
}

int gptx_afile_pwrite(gptx_afile *f, uint64_t offset, const void *data, size_t n) {
    if (f->fd < 0) return GPTX_FAIL(GPTX_ERR_STATE, "the file is not open");
    if (offset + n > f->written)
        return GPTX_FAIL(GPTX_ERR_STATE, "rewriting bytes %llu..%llu of '%s', which has %llu",
                         (unsigned long long)offset, (unsigned long long)(offset + n), f->tmp_path,
                         (unsigned long long)f->written);
    const unsigned char *p = data;
    while (n > 0) {
        ssize_t w = pwrite(f->fd, p, n, (off_t)offset);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int rc = GPTX_FAIL(GPTX_ERR_IO, "rewriting '%s' at byte %llu failed: %s", f->tmp_path,
                               (unsigned long long)offset, strerror(w < 0 ? errno : EIO));
            gptx_afile_abort(f);
            return rc;
        }
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return GPTX_OK;
}

int gptx_afile_write(gptx_afile *f, const void *data, size_t n) {
    if (f->fd < 0) return GPTX_FAIL(GPTX_ERR_STATE, "the file is not open");
    const unsigned char *p = data;
    size_t remaining = n;
    int64_t limit = atomic_load(&fail_after);
    int simulate = 0;
    if (limit >= 0 && f->written + n > (uint64_t)limit) {
        remaining = f->written >= (uint64_t)limit ? 0 : (size_t)((uint64_t)limit - f->written);
        simulate = 1;
    }
    while (remaining > 0) {
        ssize_t w = write(f->fd, p, remaining);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = w < 0 ? errno : ENOSPC;
            int rc = GPTX_FAIL(GPTX_ERR_IO, "writing '%s' failed after %llu bytes: %s", f->tmp_path,
                               (unsigned long long)f->written, strerror(e));
            gptx_afile_abort(f);
            return rc;
        }
        p += w;
        remaining -= (size_t)w;
        f->written += (uint64_t)w;
    }
    if (simulate) {
        int rc = GPTX_FAIL(GPTX_ERR_IO, "writing '%s' failed after %llu bytes: %s (test hook)",
                           f->tmp_path, (unsigned long long)f->written, strerror(ENOSPC));
        gptx_afile_abort(f);
        return rc;
    }
    return GPTX_OK;
}

/* The save may have taken minutes: the path is checked again just before
 * the rename, so what appeared there meanwhile is not replaced either. */
static int still_replaceable(const gptx_afile *f) {
    struct stat st;
    if (fstatat(f->dir_fd, f->name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISREG(st.st_mode))
        return GPTX_OK;
    return GPTX_FAIL(GPTX_ERR_IO, "cannot replace '%s': it is now %s, not a regular file",
                     f->path, gptx_file_kind(st.st_mode));
}

/* The folder entry of the rename must reach the disk too; some file
 * systems cannot sync folders, and the rename is done anyway. */
static int sync_folder(const gptx_afile *f) {
    if (fsync(f->dir_fd) == 0 || errno == EINVAL || errno == ENOTSUP || errno == EROFS)
        return GPTX_OK;
    return GPTX_FAIL(GPTX_ERR_IO, "fsync of the folder of '%s' failed: %s", f->path,
                     strerror(errno));
}

int gptx_afile_commit(gptx_afile *f) {
    if (f->fd < 0) {
        release(f);
        return GPTX_FAIL(GPTX_ERR_STATE, "the file is not open");
    }
    int rc = GPTX_OK;
    if (fsync(f->fd) != 0)
        rc = GPTX_FAIL(GPTX_ERR_IO, "fsync of '%s' failed: %s", f->tmp_path, strerror(errno));
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0 && rc == GPTX_OK)
        rc = GPTX_FAIL(GPTX_ERR_IO, "closing '%s' failed: %s", f->tmp_path, strerror(errno));
    if (rc == GPTX_OK) rc = still_replaceable(f);
    if (rc == GPTX_OK && renameat(f->dir_fd, f->tmp_name, f->dir_fd, f->name) != 0)
        rc = GPTX_FAIL(GPTX_ERR_IO, "cannot rename '%s' to '%s': %s", f->tmp_path, f->path,
                       strerror(errno));
    if (rc != GPTX_OK) unlinkat(f->dir_fd, f->tmp_name, 0);
    else rc = sync_folder(f);
    release(f);
    return rc;
}
