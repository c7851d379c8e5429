/* prog_inputs.h */
#define _POSIX_C_SOURCE 200809L
#include "prog_inputs.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prog_files.h"

typedef struct {
    prog_inputs *in;
    size_t cap;
} builder;

static int add(builder *b, const char *path, uint64_t size) {
    if (b->in->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 16;
        char **p = realloc(b->in->paths, cap * sizeof *p);
        if (p) b->in->paths = p;
        uint64_t *s = p ? realloc(b->in->sizes, cap * sizeof *s) : NULL;
        if (s) b->in->sizes = s;
        if (!p || !s) return -1;
        b->cap = cap;
    }
    char *copy = strdup(path);
    if (!copy) return -1;
    b->in->paths[b->in->n] = copy;
    b->in->sizes[b->in->n++] = size;
    return 0;
}

static int oom(const char *prog) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return -1;
}

/* A folder's regular files (not recursive, hidden ones skipped). */
static int add_folder(const char *prog, const char *flag, const char *dir, builder *b) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: %s %s: cannot read the folder: %s\n", prog, flag, dir,
                strerror(errno));
        return -1;
    }
    size_t before = b->in->n;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.') continue;
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        char *path = malloc(len);
        if (!path) {
            rc = oom(prog);
            break;
        }
        int slash = dir[0] && dir[strlen(dir) - 1] == '/';
        snprintf(path, len, "%s%s%s", dir, slash ? "" : "/", e->d_name);
        struct stat st;
        if (stat(path, &st) != 0) {
            fprintf(stderr, "%s: %s %s: %s\n", prog, flag, path, strerror(errno));
            rc = -1;
        } else if (S_ISREG(st.st_mode)) {
            if (add(b, path, (uint64_t)st.st_size)) rc = oom(prog);
        } else if (!S_ISDIR(st.st_mode)) {
            fprintf(stderr, "%s: %s %s: not a regular file (in the folder %s)\n", prog, flag,
                    path, dir);
            rc = -1;
        }
        free(path);
    }
    closedir(d);
    if (rc == 0 && b->in->n == before) {
        fprintf(stderr, "%s: %s %s: the folder holds no regular file (hidden files and "
                        "subfolders are skipped)\n", prog, flag, dir);
        rc = -1;
    }
    return rc;
}

/* One path: a regular file or a folder. */
static int add_path(const char *prog, const char *flag, const char *path, builder *b) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: %s %s: %s\n", prog, flag, path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode)) return add_folder(prog, flag, path, b);
    if (!S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: %s %s: not a regular file or a folder\n", prog, flag, path);
        return -1;
    }
    return add(b, path, (uint64_t)st.st_size) ? oom(prog) : 0;
}

static int add_entry(const char *prog, const char *flag, const char *entry, builder *b) {
    if (!entry[0]) {
        fprintf(stderr, "%s: %s: an empty entry in the list (two commas, or one at an end)\n",
                prog, flag);
        return -2;
    }
    if (!strpbrk(entry, "*?[")) return add_path(prog, flag, entry, b);
    glob_t g;
    int grc = glob(entry, 0, NULL, &g);
    if (grc == GLOB_NOMATCH) {
        fprintf(stderr, "%s: %s %s: no file matches the pattern\n", prog, flag, entry);
        return -1;
    }
    if (grc != 0) {
        fprintf(stderr, "%s: %s %s: %s\n", prog, flag, entry,
                grc == GLOB_NOSPACE ? "out of memory" : "cannot read a folder of the pattern");
        if (grc != GLOB_NOSPACE) globfree(&g);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++)
        rc = add_path(prog, flag, g.gl_pathv[i], b);
    globfree(&g);
    return rc;
}

typedef struct {
    char *path;
    uint64_t size;
} entry;

static int by_path(const void *a, const void *b) {
    return strcmp(((const entry *)a)->path, ((const entry *)b)->path);
}

int prog_inputs_expand(const char *prog, const char *flag, const char *list, prog_inputs *out) {
    *out = (prog_inputs){0};
    builder b = {out, 0};
    char *copy = strdup(list ? list : "");
    if (!copy) return oom(prog);
    int rc = 0;
    char *start = copy;
    for (;;) {
        char *comma = strchr(start, ',');
        if (comma) *comma = '\0';
        if ((rc = add_entry(prog, flag, start, &b)) != 0 || !comma) break;
        start = comma + 1;
    }
    free(copy);
    entry *e = rc ? NULL : malloc((out->n ? out->n : 1) * sizeof *e);
    if (!e) {
        prog_inputs_free(out);
        return rc ? rc : oom(prog);
    }
    size_t n = out->n, m = 0;
    for (size_t i = 0; i < n; i++) e[i] = (entry){out->paths[i], out->sizes[i]};
    qsort(e, n, sizeof *e, by_path);
    out->total_bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (m > 0 && !strcmp(out->paths[m - 1], e[i].path)) {
            free(e[i].path); /* the same path twice: once */
            continue;
        }
        out->paths[m] = e[i].path;
        out->sizes[m++] = e[i].size;
        out->total_bytes += e[i].size;
    }
    out->n = m;
    free(e);
    return 0;
}

/* What a file's first bytes say it is when it is one of the formats the
 * programs write or read besides text, or NULL (text: any other bytes). */
static const char *binary_kind(const unsigned char *b, size_t n) {
    static const char record[] = "gptx-tokenize shards 1\n";
    if (n >= sizeof record - 1 && !memcmp(b, record, sizeof record - 1))
        return "a gptx-tokenize manifest or progress record";
    if (n < 4) return NULL;
    uint32_t magic = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
    if (magic == 20240520u) return "an llm.c token shard (magic 20240520)";
    if (magic == 20240326u) return "an llm.c model file (magic 20240326)";
    if (magic == 20240327u) return "an llm.c state file (magic 20240327)";
    if (magic == 20240328u) return "an llm.c tokenizer file (magic 20240328)";
    uint64_t header = 0; /* safetensors: the header's length (LE), then its JSON */
    for (int i = 7; n >= 9 && i >= 0; i--) header = header << 8 | b[i];
    if (n >= 9 && header >= 2 && header < ((uint64_t)1 << 30) && b[8] == '{')
        return "a safetensors file (a model or checkpoint)";
    return NULL;
}

int prog_inputs_check_text(const char *prog, const char *flag, const prog_inputs *in) {
    for (size_t i = 0; i < in->n; i++) {
        if (!strcmp(in->paths[i], "-")) continue; /* standard input: read as it comes */
        const char *why = NULL;
        int fd = prog_open_regular(in->paths[i], SIZE_MAX - 1, &why);
        if (fd < 0) {
            fprintf(stderr, "%s: %s %s: %s\n", prog, flag, in->paths[i], why);
            return -1;
        }
        unsigned char head[32];
        ssize_t n = read(fd, head, sizeof head);
        close(fd);
        const char *kind = n > 0 ? binary_kind(head, (size_t)n) : NULL;
        if (!kind) continue;
        fprintf(stderr, "%s: %s %s is %s, not text: a program's output is not read back as "
                        "text (token shards are read by gptx-train --train-shards and gptx-eval "
                        "--tokens); keep the outputs in another folder than the texts, or "
                        "list the texts\n", prog, flag, in->paths[i], kind);
        return -1;
    }
    return 0;
}

void prog_inputs_free(prog_inputs *in) {
    for (size_t i = 0; in->paths && i < in->n; i++) free(in->paths[i]);
    free(in->paths);
    free(in->sizes);
    *in = (prog_inputs){0};
}

static int hex(char c) {
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

int prog_doc_separator_parse(const char *prog, const char *value, char **out, size_t *len) {
    size_t n = strlen(value), m = 0;
    char *s = malloc(n + 1);
    if (!s) return oom(prog);
    const char *why = NULL;
    for (size_t i = 0; i < n && !why; i++) {
        if (value[i] != '\\') {
            s[m++] = value[i];
            continue;
        }
        char c = value[++i];
        if (c == 'n') s[m++] = '\n';
        else if (c == 't') s[m++] = '\t';
        else if (c == 'r') s[m++] = '\r';
        else if (c == '\\') s[m++] = '\\';
        else if (c == 'x' && hex(value[i + 1]) >= 0 && hex(value[i + 2]) >= 0) {
            s[m++] = (char)(hex(value[i + 1]) * 16 + hex(value[i + 2]));
            i += 2;
        } else
            why = "an unknown escape (known: \\n \\t \\r \\\\ \\xHH)";
    }
    if (!why && m == 0) why = "empty";
    if (why) {
        fprintf(stderr, "%s: --doc-separator %s: %s (see --help)\n", prog, value, why);
        free(s);
        return -1;
    }
    *out = s;
    *len = m;
    return 0;
}
