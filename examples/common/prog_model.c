/* prog_model.h: the format is told by what is at the path, not by a flag. */
#define _POSIX_C_SOURCE 200809L
#include "prog_model.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "prog_error.h"

#define LLMC_MAGIC 20240326

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static int llmc_file(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO: no wait for a writer */
    int32_t magic = 0;
    int ok = fd >= 0 && read(fd, &magic, sizeof magic) == (ssize_t)sizeof magic &&
             magic == LLMC_MAGIC;
    if (fd >= 0) close(fd);
    return ok;
}

static int fail(const char *prog, int rc) {
    fprintf(stderr, "%s: %s\n", prog, prog_error_text());
    return rc;
}

/* A Hugging Face folder, or its model.safetensors: the library reads the
 * config.json beside the weights (heads, eps, tied head); the vocabulary is
 * the file's, unpadded. */
static int open_hf(const char *prog, gptx_model **out, gptx_context *ctx, const char *path) {
    gptx_model_config c;
    gptx_model_config_init(&c);
    c.padded_vocab_size = 0;
    c.n_head = 0; /* 0, 0, -1: the folder's */
    c.layernorm_eps = 0.0f;
    c.tied_head = -1;
    int rc = gptx_model_import_hf(out, ctx, path, &c);
    return rc == GPTX_OK ? rc : fail(prog, rc);
}

int prog_model_open(const char *prog, gptx_model **out, gptx_context *ctx, const char *path,
                    const char **format) {
    *out = NULL;
    char weights[4096], config[4096];
    if (is_dir(path)) {
        *format = "Hugging Face";
        snprintf(weights, sizeof weights, "%s/model.safetensors", path);
        snprintf(config, sizeof config, "%s/config.json", path);
        if (!exists(weights) || !exists(config)) {
            fprintf(stderr, "%s: %s is a folder without %s: expected a Hugging Face GPT-2 folder "
                            "(model.safetensors and config.json)%s\n",
                    prog, path, exists(weights) ? "config.json" : "model.safetensors",
                    exists(weights) ? "; for a gptx model give the file itself" : "");
            return GPTX_ERR_IO;
        }
        return open_hf(prog, out, ctx, path);
    }
    if (!exists(path)) {
        fprintf(stderr, "%s: no model at %s\n", prog, path);
        return GPTX_ERR_IO;
    }
    if (llmc_file(path)) {
        *format = "llm.c";
        int rc = gptx_model_import_llmc(out, ctx, path);
        return rc == GPTX_OK ? rc : fail(prog, rc);
    }
    *format = "gptx";
    int rc = gptx_model_load(out, ctx, path);
    if (rc == GPTX_OK) return rc;
    /* not a gptx file: a Hugging Face model.safetensors with its config.json beside it? */
    const char *slash = strrchr(path, '/');
    int dir_len = slash ? (int)(slash - path) : 1;
    snprintf(config, sizeof config, "%.*s/config.json", dir_len, slash ? path : ".");
    if (rc == GPTX_ERR_FORMAT && exists(config)) {
        *format = "Hugging Face";
        return open_hf(prog, out, ctx, path);
    }
    return fail(prog, rc);
}
