/* gptx_tokenize_pair.h */
#include "gptx_tokenize_pair.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prog_files.h"

/* printf into a new string (NULL when out of memory) */
static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    int n = vsnprintf(NULL, 0, f, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s) return NULL;
    va_start(ap, f);
    vsnprintf(s, (size_t)n + 1, f, ap);
    va_end(ap);
    return s;
}

static void host_name(char *buf, size_t cap) {
    if (gethostname(buf, cap) != 0 || !buf[0]) snprintf(buf, cap, "localhost");
    buf[cap - 1] = '\0';
    for (char *c = buf; *c; c++)
        if (*c == '/') *c = '_';
}

/* A run's folder and whatever is in it (its shards, a temp file of a write
 * cut short); nothing below it is a folder. */
static void remove_folder(const char *path) {
    DIR *d = opendir(path);
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char *f = fmt("%s/%s", path, e->d_name);
        if (f) unlink(f);
        free(f);
    }
    if (d) closedir(d);
    rmdir(path);
}

static int replaceable(const char *path);

int pair_check(const char *dir, const char *name) {
    for (int i = 0; i < 2; i++) {
        char *path = fmt("%s/%s_%s.bin", dir, name, i ? "val" : "train");
        int err = path ? replaceable(path) : ENOMEM;
        if (err)
            fprintf(stderr, "gptx-tokenize: %s: %s%s\n", path ? path : name, strerror(err),
                    err == EEXIST ? " (not a link or a token shard: not this program's to "
                                    "replace; remove it or choose another --prefix)" : "");
        free(path);
        if (err) return -1;
    }
    return 0;
}

int pair_begin(shard_pair *p, const char *dir, const char *name) {
    *p = (shard_pair){0};
    if (pair_check(dir, name) != 0) return -1;
    char host[256];
    host_name(host, sizeof host);
    p->dir = fmt("%s", dir);
    p->name = fmt("%s", name);
    for (unsigned n = (unsigned)time(NULL) & 0xffffff; p->dir && p->name; n++) {
        free(p->gen);
        free(p->gen_path);
        p->gen = fmt("%s.shards.%s.%ld.%x", name, host, (long)getpid(), n);
        p->gen_path = p->gen ? fmt("%s/%s", dir, p->gen) : NULL;
        if (!p->gen_path) break;
        if (mkdir(p->gen_path, 0777) == 0) return 0;
        if (errno != EEXIST) {
            fprintf(stderr, "gptx-tokenize: cannot create %s: %s\n", p->gen_path, strerror(errno));
            return -1;
        }
    }
    fprintf(stderr, "gptx-tokenize: out of memory\n");
    return -1;
}

char *pair_new_file(const shard_pair *p, const char *split) {
    return fmt("%s/%s_%s.bin", p->gen_path, p->name, split);
}

/* path becomes a symlink to target, replacing what is there in one step
 * (rename); nothing is done if it already is that link. 0 or an errno. */
static int link_as(const char *path, const char *target) {
    char have[4096];
    ssize_t n = readlink(path, have, sizeof have - 1);
    if (n >= 0 && (size_t)n == strlen(target) && !memcmp(have, target, (size_t)n)) return 0;
    char *tmp = fmt("%s.tmp.%ld", path, (long)getpid());
    if (!tmp) return ENOMEM;
    unlink(tmp); /* a leftover of a run with our pid */
    int err = symlink(target, tmp) != 0 ? errno : rename(tmp, path) != 0 ? errno : 0;
    if (err) unlink(tmp);
    free(tmp);
    return err;
}

/* The folder the NAME.shards link names now, if it is a run's folder
 * ("NAME.shards.*", no '/'), else "". */
static void current_gen(const shard_pair *p, const char *link, char *out, size_t cap) {
    ssize_t n = readlink(link, out, cap - 1);
    out[n > 0 ? n : 0] = '\0';
    size_t k = strlen(p->name);
    if (strchr(out, '/') || strncmp(out, p->name, k) || strncmp(out + k, ".shards.", 8))
        out[0] = '\0';
}

/* Whether a regular file is an llm.c token shard (magic 20240520): what an
 * older gptx-tokenize wrote at the pair's names. */
static int is_shard(const char *path) {
    const char *why;
    int fd = prog_open_regular(path, SIZE_MAX - 1, &why);
    unsigned char b[4] = {0};
    int ok = fd >= 0 && read(fd, b, 4) == 4 &&
             ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
              (uint32_t)b[3] << 24) == 20240520u;
    if (fd >= 0) close(fd);
    return ok;
}

/* A file name the switch will point at the pair must be absent, a link
 * (replaced, its target left alone) or the shard an older gptx-tokenize
 * wrote there: anything else (a folder, a FIFO, a file of the user's) is
 * not ours to replace, and is refused before anything changes. */
static int replaceable(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : errno;
    return S_ISLNK(st.st_mode) || (S_ISREG(st.st_mode) && is_shard(path)) ? 0 : EEXIST;
}

/* Folders of runs on this host whose process is gone and that no link
 * names (killed before their switch): "NAME.shards.HOST.PID.N". */
static void remove_dead_runs(const shard_pair *p, const char *keep) {
    char host[256];
    host_name(host, sizeof host);
    char *prefix = fmt("%s.shards.%s.", p->name, host);
    DIR *d = prefix ? opendir(p->dir) : NULL;
    for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
        const char *s = e->d_name;
        if (strncmp(s, prefix, strlen(prefix)) || !strcmp(s, keep) || !strcmp(s, p->gen)) continue;
        char *end = NULL;
        long pid = strtol(s + strlen(prefix), &end, 10);
        if (pid <= 0 || !end || *end != '.' || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to tell */
        char *path = fmt("%s/%s", p->dir, s);
        if (path) remove_folder(path);
        free(path);
    }
    if (d) closedir(d);
    free(prefix);
}

static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY);
    if (fd >= 0) {
        fsync(fd); /* the renames outlive a power cut */
        close(fd);
    }
}

/* Removes the folder the link named before the switch, and those of runs
 * on this host that died before theirs. */
static void remove_old(const shard_pair *p, const char *old) {
    if (old[0] && strcmp(old, p->gen)) {
        char *path = fmt("%s/%s", p->dir, old);
        if (path) remove_folder(path);
        free(path);
    }
    remove_dead_runs(p, p->gen);
}

int pair_commit(shard_pair *p) {
    char old[4096] = "";
    char *link = fmt("%s/%s.shards", p->dir, p->name);
    char *train = fmt("%s/%s_train.bin", p->dir, p->name);
    char *val = fmt("%s/%s_val.bin", p->dir, p->name);
    char *train_to = fmt("%s.shards/%s_train.bin", p->name, p->name);
    char *val_to = fmt("%s.shards/%s_val.bin", p->name, p->name);
    int err = link && train && val && train_to && val_to ? 0 : ENOMEM;
    const char *what = p->dir;
    if (!err && ((what = train, err = replaceable(train)) == 0) &&
        ((what = val, err = replaceable(val)) == 0)) {
        current_gen(p, link, old, sizeof old);
        what = link;
        err = link_as(link, p->gen); /* the switch: the old pair or the new one */
    }
    if (!err) {
        free(p->gen_path); /* switched in: pair_end must leave it */
        p->gen_path = NULL;
        /* the file links, made once; a folder from before this layout holds
         * the shards themselves, replaced one after the other this once */
        if ((what = train, err = link_as(train, train_to)) == 0)
            what = val, err = link_as(val, val_to);
    }
    if (err)
        fprintf(stderr, "gptx-tokenize: cannot put the new shards in place: %s: %s%s\n", what,
                strerror(err), err == EEXIST ? " (not a link or a token shard: left as it is)"
                                             : "");
    sync_dir(p->dir);
    if (!err) remove_old(p, old);
    free(link);
    free(train);
    free(val);
    free(train_to);
    free(val_to);
    return err ? -1 : 0;
}

void pair_end(shard_pair *p) {
    if (p->gen_path) remove_folder(p->gen_path);
    free(p->dir);
    free(p->name);
    free(p->gen);
    free(p->gen_path);
    *p = (shard_pair){0};
}
