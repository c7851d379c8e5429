/* Temp file + fsync + rename + directory fsync (see atomic_file.h). */
#include "atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"

static _Atomic int64_t fail_after = -1;

void gptx_afile_fail_after_for_testing(int64_t bytes) { atomic_store(&fail_after, bytes); }

static void release(gptx_afile *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    free(f->path);
    free(f->tmp_path);
    f->path = f->tmp_path = NULL;
}

void gptx_afile_abort(gptx_afile *f) {
    if (!f) return;
    if (f->fd >= 0 && f->tmp_path) {
        close(f->fd);
        f->fd = -1;
        unlink(f->tmp_path);
    }
    release(f);
}

/* This host's name, for temp names: on a shared folder, only this host can
 * tell whether a pid is alive. */
static void host_name(char *buf, size_t cap) {
    if (gethostname(buf, cap) != 0 || !buf[0]) snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '/' || *c == '.') *c = '_'; /* one path component, no extra dots */
}

/* Removes "<path>.tmp.<this host>.<pid>" files whose writer is dead (a
 * process killed in the middle of a save leaves one, up to the size of the
 * file): the next save of the same path cleans up after it. */
static void remove_stale_temps(const char *path, const char *host) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dlen = slash ? (size_t)(slash - path) : 0;
    char dir[4096], prefix[4096], victim[8192];
    if (dlen >= sizeof dir) return;
    if (slash) memcpy(dir, path, dlen);
    snprintf(dir + dlen, sizeof dir - dlen, "%s", slash ? (dlen ? "" : "/") : ".");
    int plen = snprintf(prefix, sizeof prefix, "%s.tmp.%s.", base, host);
    if (plen <= 0 || (size_t)plen >= sizeof prefix) return;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0) continue;
        char *end = NULL;
        errno = 0;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (errno || !end || *end || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to know */
        snprintf(victim, sizeof victim, "%s/%s", dir, e->d_name);
        unlink(victim);
    }
    closedir(d);
}

int gptx_afile_open(gptx_afile *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    if (!path || !path[0]) return GPTX_FAIL(GPTX_ERR_INVALID, "path is empty");
    size_t n = strlen(path);
    f->path = malloc(n + 1);
    char host[72];
    host_name(host, sizeof host);
    size_t tcap = n + strlen(host) + 40;
    f->tmp_path = malloc(tcap);
    if (!f->path || !f->tmp_path) {
        release(f);
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    }
    memcpy(f->path, path, n + 1);
    /* same directory as the target, so rename() never crosses file systems */
    snprintf(f->tmp_path, tcap, "%s.tmp.%s.%ld", path, host, (long)getpid());
    remove_stale_temps(path, host);
    f->fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        int e = errno;
        /* say it in terms of what the caller asked for: the folder, or the file */
        char *slash = strrchr(f->path, '/');
        struct stat st;
        if (slash && slash != f->path) *slash = '\0';
        const char *dir = slash ? (slash == f->path ? "/" : f->path) : ".";
        int rc;
        if (e == ENOENT || e == ENOTDIR || (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)))
            rc = GPTX_FAIL(GPTX_ERR_IO, "cannot write '%s': the folder '%s' %s (%s)", path, dir,
                           e == ENOENT ? "does not exist" : "is not a folder", strerror(e));
        else
            rc = GPTX_FAIL(GPTX_ERR_IO, "cannot write '%s' (its temporary file in '%s'): %s", path,
                           dir, strerror(e));
        release(f);
        return rc;
    }
    return GPTX_OK;
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

/* The directory entry of the rename must reach the disk too. */
static int fsync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir;
    if (!slash) {
        dir = malloc(2);
        if (dir) memcpy(dir, ".", 2);
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        dir = malloc(n + 1);
        if (dir) {
            memcpy(dir, path, n);
            dir[n] = '\0';
        }
    }
    if (!dir) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    int rc = GPTX_OK;
    if (fd < 0) {
        rc = GPTX_FAIL(GPTX_ERR_IO, "cannot open directory '%s' to sync it: %s", dir,
                       strerror(errno));
    } else {
        /* some file systems cannot sync directories; the rename is done anyway */
        if (fsync(fd) != 0 && errno != EINVAL && errno != ENOTSUP && errno != EROFS)
            rc = GPTX_FAIL(GPTX_ERR_IO, "fsync of directory '%s' failed: %s", dir, strerror(errno));
        close(fd);
    }
    free(dir);
    return rc;
}

int gptx_afile_commit(gptx_afile *f) {
    if (f->fd < 0) {
        release(f);
        return GPTX_FAIL(GPTX_ERR_STATE, "the file is not open");
    }
    if (fsync(f->fd) != 0) {
        int rc = GPTX_FAIL(GPTX_ERR_IO, "fsync of '%s' failed: %s", f->tmp_path, strerror(errno));
        gptx_afile_abort(f);
        return rc;
    }
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) {
        int rc = GPTX_FAIL(GPTX_ERR_IO, "closing '%s' failed: %s", f->tmp_path, strerror(errno));
        unlink(f->tmp_path);
        release(f);
        return rc;
    }
    if (rename(f->tmp_path, f->path) != 0) {
        int rc = GPTX_FAIL(GPTX_ERR_IO, "cannot rename '%s' to '%s': %s", f->tmp_path, f->path,
                           strerror(errno));
        unlink(f->tmp_path);
        release(f);
        return rc;
    }
    int rc = fsync_parent_dir(f->path);
    release(f);
    return rc;
}
