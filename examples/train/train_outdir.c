/* train_outdir.h */
#include "train_outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "gptx/gptx.h"
#include "prog_files.h"
#include "train_ckpts.h"
#include "train_options.h"

/* The pid that holds an flock on (dev, ino), from /proc/locks (Linux:
 * "1: FLOCK  ADVISORY  WRITE 6342 fe:00:5374127 0 EOF"); 0 if unknown. */
static long flock_owner(dev_t dev, ino_t ino) {
    FILE *f = fopen("/proc/locks", "r");
    char line[256], kind[16];
    long pid = 0, found = 0;
    unsigned maj, min;
    unsigned long long in;
    while (f && !found && fgets(line, sizeof line, f))
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", kind, &pid, &maj, &min, &in) == 5 &&
            !strcmp(kind, "FLOCK") && maj == major(dev) && min == minor(dev) && in == ino)
            found = pid;
    if (f) fclose(f);
    return found;
}

static int refuse_busy(const char *out_dir, long pid, const char *pid_text) {
    char p[32];
    if (pid > 0) snprintf(p, sizeof p, "%ld", pid);
    fprintf(stderr, "gptx-train: --out-dir %s is in use by another gptx-train (pid %s); wait for "
                    "it to finish or give another --out-dir\n",
            out_dir, pid > 0 ? p : pid_text && pid_text[0] ? pid_text : "unknown");
    return -1;
}

/* The fallback: .gptx-train.lock, holding the owner's pid for the message. */
static int lock_file(train_outdir *d) {
    snprintf(d->file, sizeof d->file, "%s/.gptx-train.lock", d->dir);
    /* O_NOFOLLOW: a link there is not ours; the pid written below would
     * land in whatever it names */
    int fd = open(d->file, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        fprintf(stderr, "gptx-train: cannot create %s: %s\n", d->file, strerror(errno));
        return -1;
    }
    struct stat st;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || fstat(fd, &st) != 0) {
        char owner[32] = "";
        ssize_t n = pread(fd, owner, sizeof owner - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        close(fd);
        return refuse_busy(d->dir, 0, owner);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) { /* only for messages */ }
    d->fd = fd;
    d->lock_is_file = 1;
    d->file_dev = st.st_dev;
    d->file_ino = st.st_ino;
    return 0;
}

int outdir_lock(train_outdir *d, const char *out_dir) {
    memset(d, 0, sizeof *d);
    d->fd = -1;
    snprintf(d->dir, sizeof d->dir, "%s", out_dir);
    int fd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(stderr, "gptx-train: cannot open --out-dir %s: %s\n", out_dir, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    d->dev = st.st_dev;
    d->ino = st.st_ino;
    /* GPTX_TRAIN_TEST_LOCK=file: the fallback, for its test */
    const char *test = getenv("GPTX_TRAIN_TEST_LOCK");
    int use_file = test && !strcmp(test, "file");
    if (!use_file && flock(fd, LOCK_EX | LOCK_NB) == 0) {
        d->fd = fd;
        return 0;
    }
    int err = use_file ? EBADF : errno;
    close(fd);
    if (err == EWOULDBLOCK) return refuse_busy(out_dir, flock_owner(st.st_dev, st.st_ino), NULL);
    return lock_file(d); /* EBADF, ENOLCK, EOPNOTSUPP: no flock on folders here */
}

static int same(const char *path, dev_t dev, ino_t ino) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_dev == dev && st.st_ino == ino;
}

int outdir_held(train_outdir *d) {
    if (d->fd < 0) return 0; /* nothing locked: a rank that writes nothing */
    if (d->lost) return -1;
    const char *gone = !same(d->dir, d->dev, d->ino) ? "the folder"
                       : d->lock_is_file && !same(d->file, d->file_dev, d->file_ino)
                           ? "its lock file .gptx-train.lock"
                           : NULL;
    if (!gone) return 0;
    d->lost = 1;
    fprintf(stderr, "\ngptx-train: --out-dir %s: %s was removed or replaced while this run held "
                    "it, so another process may be writing there now; stopping without writing "
                    "anything more\n", d->dir, gone);
    return -1;
}

void outdir_release(train_outdir *d) {
    if (d->fd >= 0) close(d->fd); /* drops the lock */
    d->fd = -1;
}

void outdir_new_run_id(char out[17]) {
    unsigned long long x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&x, sizeof x, 1, f) != 1) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (unsigned long long)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (unsigned long long)ts.tv_sec ^
            (unsigned long long)getpid() << 32;
    }
    if (f) fclose(f);
    snprintf(out, 17, "%016llx", x);
}

/* ---- whose files ------------------------------------------------------------ */

/* The run's files: these names, `latest` and every numbered checkpoint
 * (checkpoint-N.safetensors, train_ckpts.h) found in the folder. */
static const char *const run_files[] = {"metrics.jsonl", CKPT_OLD_NAME, "model.safetensors",
                                        "best.safetensors", "loss.svg", CKPT_LATEST};
enum { N_RUN_FILES = sizeof run_files / sizeof run_files[0], METRICS = 0, LATEST = 5 };

int outdir_unlink_link(const char *path) {
    return prog_replace_link("gptx-train", path);
}

/* The first bytes of a regular file (NUL-terminated; "" when it cannot be
 * read): never waits on a FIFO. */
static void read_head(const char *path, char *out, size_t cap) {
    const char *why;
    int fd = prog_open_regular(path, SIZE_MAX - 1, &why);
    ssize_t n = fd >= 0 ? read(fd, out, cap - 1) : -1;
    if (fd >= 0) close(fd);
    out[n > 0 ? n : 0] = '\0';
}

/* The run id in metrics.jsonl's first record ("" if none: a file from
 * before run ids, or no file). */
static void metrics_run_id(const char *path, char *out, size_t cap) {
    char line[8192];
    read_head(path, line, sizeof line);
    line[strcspn(line, "\n")] = '\0';
    const char *p = strstr(line, "\"run_id\": \"");
    out[0] = '\0';
    if (p) snprintf(out, cap, "%.*s", (int)strcspn(p + 11, "\""), p + 11);
}

/* The run id of the checkpoint `latest` names ("" if none). */
static void latest_run_id(const train_outdir *d, const char *path, char *out, size_t cap) {
    char name[CKPT_NAME_MAX + 8], target[4300];
    int64_t step;
    read_head(path, name, sizeof name);
    name[strcspn(name, "\r\n")] = '\0';
    out[0] = '\0';
    if (!ckpt_parse_name(name, &step)) return;
    snprintf(target, sizeof target, "%s/%s", d->dir, name);
    ckpt_run_id(target, out, cap);
}

/* The names of the run's files present in the folder (fixed ones first,
 * then numbered checkpoints), malloc'ed; NULL with *n = -1 after a message. */
static char **list_run_files(const train_outdir *d, int *n) {
    DIR *dir = opendir(d->dir);
    if (!dir) {
        fprintf(stderr, "gptx-train: cannot read --out-dir %s: %s\n", d->dir, strerror(errno));
        *n = -1;
        return NULL;
    }
    char **names = NULL;
    int count = 0, cap = 0, fail = 0;
    for (int i = 0; i < N_RUN_FILES + 1 && !fail;) {
        const char *name = NULL;
        struct dirent *e = NULL;
        if (i < N_RUN_FILES) {
            name = run_files[i++];
        } else if ((e = readdir(dir))) {
            int64_t step;
            if (!ckpt_parse_name(e->d_name, &step)) continue;
            name = e->d_name;
        } else {
            break;
        }
        if (count == cap) {
            char **grown = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!grown) { fail = 1; break; }
            names = grown;
        }
        if (!(names[count] = strdup(name))) fail = 1;
        else count++;
    }
    closedir(dir);
    if (fail) {
        fprintf(stderr, "gptx-train: out of memory listing --out-dir %s\n", d->dir);
        for (int i = 0; i < count; i++) free(names[i]);
        free(names);
        *n = -1;
        return NULL;
    }
    *n = count;
    return names;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Whether run file `name` in dir belongs to another run than run_id. */
static int others(const train_outdir *d, const char *name, const char *run_id, int resuming) {
    char path[4300], id[64];
    snprintf(path, sizeof path, "%s/%s", d->dir, name);
    struct stat st; /* a folder, FIFO or device there: run_files_writable refuses it */
    if (lstat(path, &st) != 0 || !(S_ISREG(st.st_mode) || S_ISLNK(st.st_mode))) return 0;
    if (!resuming) return 1; /* a new run: any run file (or a link in its place) is another's */
    /* a link is never the run's own file: it is replaced, its target left alone */
    if (!S_ISREG(st.st_mode) || !run_id[0]) return 0;
    int64_t step;
    /* only metrics, the checkpoints and latest (by its checkpoint) name their run */
    if (!strcmp(name, run_files[METRICS])) metrics_run_id(path, id, sizeof id);
    else if (!strcmp(name, CKPT_LATEST)) latest_run_id(d, path, id, sizeof id);
    else if (!strcmp(name, CKPT_OLD_NAME) || ckpt_parse_name(name, &step))
        ckpt_run_id(path, id, sizeof id);
    else return 0;
    return id[0] && strcmp(id, run_id) != 0;
}

/* What the run writes must be a regular file, a link (which the run
 * replaces by its own file) or absent: a folder, FIFO or device at any of
 * its names, the numbered checkpoints' included, is found now, not when a
 * save or the final plot fails after hours of training. 0, or -1 after the
 * message. */
static int run_files_writable(const train_outdir *d, char **files, int count) {
    for (int i = 0; i < count; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s", d->dir, files[i]);
        struct stat st;
        if (lstat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) continue;
        fprintf(stderr, "gptx-train: --out-dir %s: its %s is %s, not a regular file: the run "
                        "could not write it; remove it or give another --out-dir\n", d->dir,
                files[i], S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode)
                ? "a FIFO (named pipe)" : "a device or socket");
        return -1;
    }
    return 0;
}

/* A run file that is one of the run's inputs (the same file: a --text,
 * shard, --init-from or tokenizer file kept in --out-dir) would be replaced
 * or removed by the run, --overwrite or not: refused, naming both (the
 * checkpoint --resume continues from stays, and is not counted). 0, or -1
 * after the message. */
static int inputs_apart(const train_outdir *d, char **files, int count, const struct stat *keep,
                        const outdir_inputs *in) {
    for (int i = 0; in && i < count; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s", d->dir, files[i]);
        struct stat st; /* a link there is replaced, never written through */
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (keep && st.st_dev == keep->st_dev && st.st_ino == keep->st_ino) continue;
        for (int k = 0; k < in->n; k++) {
            if (in->ids[k].dev != st.st_dev || in->ids[k].ino != st.st_ino) continue;
            fprintf(stderr, "gptx-train: --out-dir %s: its %s is this run's %s %s: the run "
                            "would replace it (a run's inputs and outputs never overlap); give "
                            "another --out-dir, or copy the file out of the folder\n", d->dir,
                    files[i], in->ids[k].flag, in->ids[k].path);
            return -1;
        }
    }
    return 0;
}

/* Appends name to the list of another run's files (the first few named,
 * then a count). */
static void note(char *names, size_t cap, int n, const char *name, int *more) {
    if (n >= 8) {
        (*more)++;
        return;
    }
    snprintf(names + strlen(names), cap - strlen(names), "%s%s", n ? ", " : "", name);
}

int outdir_claim(train_outdir *d, const char *run_id, const char *resume, int overwrite,
                 const outdir_inputs *inputs, int *fresh) {
    const int resuming = resume != NULL;
    struct stat rs;
    int keep = resume && stat(resume, &rs) == 0; /* the checkpoint being resumed stays */
    char names[1024] = "";
    int n = 0, more = 0, has_checkpoint = 0, count = 0;
    *fresh = 0;
    char **files = list_run_files(d, &count);
    if (count < 0) return -1;
    unsigned char *theirs = calloc((size_t)count + 1, 1);
    if (!theirs) {
        free_names(files, count);
        fprintf(stderr, "gptx-train: out of memory listing --out-dir %s\n", d->dir);
        return -1;
    }
    if (inputs_apart(d, files, count, keep ? &rs : NULL, inputs) != 0) {
        free(theirs);
        free_names(files, count);
        return -1;
    }
    for (int i = 0; i < count; i++) {
        if (!(theirs[i] = (unsigned char)others(d, files[i], run_id, resuming))) continue;
        int64_t step;
        note(names, sizeof names, n++, files[i], &more);
        has_checkpoint |= !strcmp(files[i], CKPT_OLD_NAME) || ckpt_parse_name(files[i], &step);
    }
    if (more)
        snprintf(names + strlen(names), sizeof names - strlen(names), " and %d more", more);
    int rc = 0;
    if (n == 0) {
        rc = run_files_writable(d, files, count);
    } else if (!overwrite) {
        fprintf(stderr, "gptx-train: --out-dir %s holds another run's files (%s): this run would "
                        "%s them; give --overwrite to replace them%s%s%s, or another --out-dir\n",
                d->dir, names, resuming ? "mix its records with" : "replace",
                has_checkpoint && !resuming ? ", --resume " : "",
                has_checkpoint && !resuming ? d->dir : "",
                has_checkpoint && !resuming ? " to continue that run" : "");
        rc = -1;
    } else {
        /* the fixed files all go (no file of the other run stays); numbered
         * checkpoints only when they are another run's: this run's stay */
        for (int i = 0; i < count && rc == 0; i++) {
            int64_t step;
            if (i >= N_RUN_FILES && !theirs[i] && ckpt_parse_name(files[i], &step)) continue;
            char path[4300];
            snprintf(path, sizeof path, "%s/%s", d->dir, files[i]);
            if (keep && same(path, rs.st_dev, rs.st_ino)) continue;
            if (unlink(path) != 0 && errno != ENOENT) {
                fprintf(stderr, "gptx-train: --overwrite: cannot remove %s: %s\n", path,
                        strerror(errno));
                rc = -1;
            }
        }
        if (rc == 0) {
            printf("--overwrite: removed the other run's files from %s (%s)\n", d->dir, names);
            *fresh = 1;
            rc = run_files_writable(d, files, count);
        }
    }
    free(theirs);
    free_names(files, count);
    return rc;
}
