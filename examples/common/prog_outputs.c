/* prog_outputs.h */
#define _POSIX_C_SOURCE 200809L
#include "prog_outputs.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "prog_files.h"
#include "prog_flags.h"

static void add_one(prog_input_ids *ids, const char *flag, const char *path, const char *shown) {
    struct stat st;
    int n = ids->n;
    if (n >= (int)(sizeof ids->ids / sizeof ids->ids[0]) || stat(path, &st) != 0) return;
    ids->ids[n] = (prog_input_id){st.st_dev, st.st_ino, flag, shown};
    ids->n++;
}

void prog_input_add(prog_input_ids *ids, const char *flag, const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) {
        add_one(ids, flag, path, path);
        return;
    }
    /* a Hugging Face folder: what is read from it (the message names the folder) */
    static const char *const files[] = {"model.safetensors", "config.json"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/%s", path, files[i]);
        add_one(ids, flag, p, path);
    }
}

/* Whether st is the file of the program's standard output or error. */
static int own_stream(const struct stat *st) {
    for (int fd = 1; fd <= 2; fd++) {
        struct stat s;
        if (fstat(fd, &s) == 0 && s.st_dev == st->st_dev && s.st_ino == st->st_ino) return 1;
    }
    return 0;
}

int prog_output_check(const char *prog, const char *flag, const char *path, int overwrite,
                      const prog_input_ids *inputs) {
    struct stat ls, st;
    if (lstat(path, &ls) != 0) return 0; /* a new file */
    int target = stat(path, &st) == 0;   /* what a write reaches (a link's target) */
    for (int i = 0; target && inputs && i < inputs->n; i++) {
        const prog_input_id *in = &inputs->ids[i];
        if (in->dev != st.st_dev || in->ino != st.st_ino) continue;
        char why[4400];
        snprintf(why, sizeof why, "it is the input %s %s (the same file); a program never "
                 "writes over what it reads, --overwrite or not: give another path", in->flag,
                 in->path);
        prog_usage_error(prog, flag, path, why);
        return 2;
    }
    if (target && (!S_ISREG(st.st_mode) || own_stream(&st))) return 0; /* a stream */
    if (overwrite) return 0;
    fprintf(stderr, "%s: %s %s exists (%s%s): give --overwrite to replace it, or another path\n",
            prog, flag, path, prog_file_kind(ls.st_mode),
            S_ISLNK(ls.st_mode) ? ", whose target would be written" : "");
    return 1;
}
