/* prog_model.h: the format is told by what is at the path, not by a flag. */
#define _POSIX_C_SOURCE 200809L
#include "prog_model.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include "prog_error.h"
#include "prog_files.h"

#define LLMC_MAGIC 20240326
#define PROG_MAX_CONFIG_BYTES ((size_t)16 << 20) /* GPT-2's config.json: under 1 KB */

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

/* The number after "key": in a flat JSON object (HF's config.json). */
static int json_number(const char *json, const char *key, double *out) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) return 0;
    p += strlen(quoted);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return 0;
    char *end = NULL;
    double v = strtod(p, &end);
    if (end == p) return 0;
    *out = v;
    return 1;
}

/* true/false after "key": (default when absent) */
static int json_bool(const char *json, const char *key, int dflt) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) return dflt;
    p += strlen(quoted);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ':') p++;
    return strncmp(p, "true", 4) == 0 ? 1 : strncmp(p, "false", 5) == 0 ? 0 : dflt;
}

static int fail(const char *prog, const char *path, int rc) {
    fprintf(stderr, "%s: %s\n", prog, prog_error_text());
    return rc;
}

int prog_hf_config_parse(const char *json, gptx_model_config *c) {
    double n_head = 0, eps = 1e-5;
    int have_heads = json_number(json, "n_head", &n_head) ||
                     json_number(json, "num_attention_heads", &n_head);
    json_number(json, "layer_norm_epsilon", &eps);
    gptx_model_config_init(c);
    c->tied_head = json_bool(json, "tie_word_embeddings", 1); /* transformers' default */
    c->padded_vocab_size = 0; /* = the file's vocabulary */
    /* NaN fails both comparisons (fuzz finding: "n_head": nan reached the int cast) */
    if (!have_heads || !(n_head >= 1 && n_head <= 4096) || n_head != (int)n_head) return -1;
    c->n_head = (int)n_head;
    c->layernorm_eps = (float)eps;
    return 0;
}

static int open_hf(const char *prog, gptx_model **out, gptx_context *ctx, const char *weights,
                   const char *config) {
    size_t len = 0;
    char *json = prog_read_file_max(prog, "the Hugging Face config", config, PROG_MAX_CONFIG_BYTES,
                                    &len);
    if (!json) return GPTX_ERR_IO;
    gptx_model_config c;
    int bad = prog_hf_config_parse(json, &c);
    free(json);
    if (bad) {
        fprintf(stderr, "%s: %s has no usable \"n_head\"\n", prog, config);
        return GPTX_ERR_FORMAT;
    }
    int rc = gptx_model_import_hf(out, ctx, weights, &c);
    return rc == GPTX_OK ? rc : fail(prog, weights, rc);
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
        return open_hf(prog, out, ctx, weights, config);
    }
    if (!exists(path)) {
        fprintf(stderr, "%s: no model at %s\n", prog, path);
        return GPTX_ERR_IO;
    }
    if (llmc_file(path)) {
        *format = "llm.c";
        int rc = gptx_model_import_llmc(out, ctx, path);
        return rc == GPTX_OK ? rc : fail(prog, path, rc);
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
        return open_hf(prog, out, ctx, path, config);
    }
    return fail(prog, path, rc);
}
