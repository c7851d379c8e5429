/* train_ckpts.h */
#include "train_ckpts.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gptx/gptx.h"
#include "prog_files.h"
#include "train_options.h"
#include "train_outdir.h"

static const char PREFIX[] = "checkpoint-", SUFFIX[] = ".safetensors";

void ckpt_name(char *out, size_t cap, int64_t step) {
    snprintf(out, cap, "%s%08lld%s", PREFIX, (long long)step, SUFFIX);
}

int ckpt_parse_name(const char *name, int64_t *step) {
    size_t n = strlen(name), p = sizeof PREFIX - 1, s = sizeof SUFFIX - 1;
    if (n < p + 8 + s || n > p + 18 + s || strncmp(name, PREFIX, p) != 0 ||
        strcmp(name + n - s, SUFFIX) != 0)
        return 0;
    long long v = 0;
    for (size_t i = p; i < n - s; i++) {
        if (name[i] < '0' || name[i] > '9') return 0;
        v = v * 10 + (name[i] - '0');
    }
    *step = v;
    return 1;
}

void ckpt_run_id(const char *path, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    if (gptx_checkpoint_user_metadata(path, NULL, 0, &n) != GPTX_ERR_SHAPE) {
        gptx_clear_error();
        return;
    }
    char *saved = malloc(n + 1);
    if (saved && gptx_checkpoint_user_metadata(path, saved, n + 1, &n) == GPTX_OK &&
        train_saved_get(saved, "run_id", out, cap) != 0)
        out[0] = '\0';
    gptx_clear_error();
    free(saved);
}

int ckpt_write_latest(const char *dir, int64_t step) {
    char name[CKPT_NAME_MAX + 8], path[4200];
    ckpt_name(name, sizeof name, step);
    strcat(name, "\n");
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_LATEST);
    if (outdir_unlink_link(path) != 0) return -1; /* never written through a link */
    int rc = gptx_file_save(path, name, strlen(name));
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-train: cannot write %s: %s (%s)\n", path, gptx_last_error(),
                gptx_status_name(rc));
        return -1;
    }
    return 0;
}

/* The numbered checkpoints in dir: their steps, ascending. NULL with *n = 0
 * when there are none; NULL with *n = -1 after a message. */
typedef struct { int64_t step; char name[CKPT_NAME_MAX + 8]; } numbered;
static int by_step(const void *a, const void *b) {
    int64_t x = ((const numbered *)a)->step, y = ((const numbered *)b)->step;
    return x < y ? -1 : x > y;
}
static numbered *list_numbered(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "gptx-train: cannot read the folder %s: %s\n", dir, strerror(errno));
        *n = -1;
        return NULL;
    }
    numbered *list = NULL;
    int cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int64_t step;
        if (!ckpt_parse_name(e->d_name, &step)) continue;
        if (*n == cap) {
            numbered *grown = realloc(list, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *list);
            if (!grown) {
                fprintf(stderr, "gptx-train: out of memory listing %s\n", dir);
                free(list);
                closedir(d);
                *n = -1;
                return NULL;
            }
            list = grown;
        }
        list[*n].step = step;
        memcpy(list[*n].name, e->d_name, strlen(e->d_name) + 1); /* parsed: it fits */
        (*n)++;
    }
    closedir(d);
    if (*n > 1) qsort(list, (size_t)*n, sizeof *list, by_step);
    return list;
}

int ckpt_retain(const char *dir, const char *run_id, int64_t step, int keep) {
    if (keep <= 0) return 0; /* all are kept */
    int n;
    numbered *list = list_numbered(dir, &n);
    if (n < 0) return -1;
    /* this run's, up to this step: the newest `keep` of them stay */
    char path[4300], id[64];
    int mine = 0, rc = 0;
    for (int i = n - 1; i >= 0 && rc == 0; i--) {
        if (list[i].step > step) continue;
        snprintf(path, sizeof path, "%s/%s", dir, list[i].name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* not ours to remove */
        ckpt_run_id(path, id, sizeof id);
        if (!run_id[0] || strcmp(id, run_id) != 0) continue; /* another run's, or unreadable */
        if (++mine <= keep) continue;
        if (unlink(path) != 0 && errno != ENOENT) {
            fprintf(stderr, "gptx-train: --keep-checkpoints %d: cannot remove %s: %s\n", keep,
                    path, strerror(errno));
            rc = -1;
        }
    }
    free(list);
    return rc;
}

static int add(ckpt_candidates *c, const char *dir, const char *name) {
    char **grown = realloc(c->paths, (size_t)(c->n + 1) * sizeof *grown);
    if (!grown) return -1;
    c->paths = grown;
    size_t len = strlen(dir) + strlen(name) + 2;
    if (!(c->paths[c->n] = malloc(len))) return -1;
    snprintf(c->paths[c->n++], len, "%s/%s", dir, name);
    return 0;
}

/* The checkpoint name `latest` holds, or "" with *why saying why it cannot
 * be used ("" too when there is no `latest`). Read only when it is a
 * regular file of this folder: a link (to another run's checkpoint), a FIFO
 * (never waited on), a folder or a device is unusable, as is anything but
 * one line naming a numbered checkpoint of the folder (issue 34, items 2, 5
 * and 9). */
static void read_latest(const char *dir, char *out, size_t cap, int64_t *step, char *why,
                        size_t why_cap) {
    char path[4200], line[CKPT_NAME_MAX + 8] = "";
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_LATEST);
    out[0] = why[0] = '\0';
    struct stat st;
    if (lstat(path, &st) != 0) return; /* none: every numbered one is a candidate */
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, why_cap, "it is %s, not a regular file of the folder",
                 prog_file_kind(st.st_mode));
        return;
    }
    const char *err = NULL;
    int fd = prog_open_regular(path, CKPT_NAME_MAX + 1, &err);
    ssize_t n = fd >= 0 ? read(fd, line, sizeof line - 1) : -1;
    if (fd >= 0) close(fd);
    if (fd < 0 || n < 0) {
        snprintf(why, why_cap, "%s", fd < 0 ? err : strerror(errno));
        return;
    }
    line[n] = '\0';
    size_t len = strcspn(line, "\r\n");
    int one_line = line[len] == '\0' || !line[len + strspn(line + len, "\r\n")];
    line[len] = '\0';
    if (len == 0) {
        snprintf(why, why_cap, "it is empty");
    } else if (!one_line || !ckpt_parse_name(line, step) || (size_t)n >= sizeof line - 1) {
        for (char *c = line; *c; c++) /* shown as text: random bytes become '?' */
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) *c = '?';
        snprintf(why, why_cap, "it holds \"%.60s%s\", not the name of a checkpoint-N.safetensors "
                 "of the folder", line, strlen(line) > 60 ? "..." : "");
    } else {
        snprintf(out, cap, "%s", line);
    }
}

/* Whether dir/name is a file of the folder (not a link into another one, a
 * folder, FIFO or device). */
static int own_file(const char *dir, const char *name) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return lstat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int ckpt_candidates_list(const char *dir, ckpt_candidates *c) {
    memset(c, 0, sizeof *c);
    char latest[CKPT_NAME_MAX + 8];
    int64_t top = INT64_MAX;
    read_latest(dir, latest, sizeof latest, &top, c->latest_why, sizeof c->latest_why);
    int n, fail = 0;
    numbered *list = list_numbered(dir, &n);
    if (n < 0) return -1;
    char named[4300];
    struct stat st;
    snprintf(named, sizeof named, "%s/%s", dir, latest);
    if (latest[0] && lstat(named, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(c->latest_why, sizeof c->latest_why, "it names %s, which is %s, not a file of "
                 "the folder", latest, prog_file_kind(st.st_mode));
        top = INT64_MAX;
    } else if (latest[0]) {
        fail |= add(c, dir, latest); /* even when missing: the message names it */
        c->from_latest = 1;
    }
    for (int i = n - 1; i >= 0 && !fail; i--)
        if (list[i].step < top && own_file(dir, list[i].name))
            fail |= add(c, dir, list[i].name);
    if (!fail && own_file(dir, CKPT_OLD_NAME)) fail |= add(c, dir, CKPT_OLD_NAME);
    free(list);
    if (fail) {
        fprintf(stderr, "gptx-train: out of memory listing the checkpoints of %s\n", dir);
        ckpt_candidates_free(c);
        return -1;
    }
    return 0;
}

void ckpt_candidates_free(ckpt_candidates *c) {
    for (int i = 0; i < c->n; i++) free(c->paths[i]);
    free(c->paths);
    memset(c, 0, sizeof *c);
}
