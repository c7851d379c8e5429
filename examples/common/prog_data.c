/* prog_data.h: the bundled data's folder, found from the program's own place. */
#define _DEFAULT_SOURCE /* realpath */
#define _POSIX_C_SOURCE 200809L
#include "prog_data.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef GPTX_DATA_FROM_BIN
#define GPTX_DATA_FROM_BIN "../share/gptx"
#endif
#ifndef GPTX_DATA_INSTALL_DIR
#define GPTX_DATA_INSTALL_DIR "/usr/local/share/gptx"
#endif
#ifndef PATH_MAX
#define PATH_MAX 4096
#endif

static int holds_tokenizer(const char *dir) {
    char probe[PATH_MAX];
    int n = snprintf(probe, sizeof probe, "%s/gpt2/encoder.json", dir);
    return n > 0 && (size_t)n < sizeof probe && access(probe, R_OK) == 0;
}

/* The folder of the running executable (Linux: /proc/self/exe), or "". */
static void exe_dir(char *out, size_t cap) {
    out[0] = '\0';
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) return;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (slash) *slash = '\0';
    else out[0] = '\0';
}

const char *prog_data_dir(void) {
    static char dir[PATH_MAX + 64];
    if (dir[0]) return dir;
    const char *env = getenv("GPTX_DATA_DIR");
    if (env && env[0]) {
        snprintf(dir, sizeof dir, "%s", env);
        return dir;
    }
    char bin[PATH_MAX];
    exe_dir(bin, sizeof bin);
    if (bin[0]) {
        int n = snprintf(dir, sizeof dir, "%s/%s", bin, GPTX_DATA_FROM_BIN);
        char canonical[PATH_MAX];
        if (n > 0 && (size_t)n < sizeof dir && holds_tokenizer(dir)) {
            if (realpath(dir, canonical)) snprintf(dir, sizeof dir, "%s", canonical); /* no "/.." */
            return dir;
        }
    }
    snprintf(dir, sizeof dir, "%s", GPTX_DATA_INSTALL_DIR);
    if (holds_tokenizer(dir)) return dir;
    snprintf(dir, sizeof dir, "data");
    return dir;
}

const char *prog_data_path(const char *name) {
    static char bufs[8][PATH_MAX + 128];
    static int next;
    char *b = bufs[next++ % 8];
    int n = snprintf(b, sizeof bufs[0], "%s/%s", prog_data_dir(), name);
    return n > 0 && (size_t)n < sizeof bufs[0] ? b : name; /* too long: let the open fail on name */
}
