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

/* Where the value of "key" starts in a flat JSON object (HF's config.json),
 * or NULL when the key is absent. */
static const char *json_value(const char *json, const char *key) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) return NULL;
    p += strlen(quoted);
    p += strspn(p, " \t\r\n");
    if (*p != ':') return NULL;
    return p + 1 + strspn(p + 1, " \t\r\n");
}

/* Whether a value ends at p (what may follow it in an object). */
static int value_ends(const char *p) {
    p += strspn(p, " \t\r\n");
    return *p == ',' || *p == '}' || *p == '\0';
}

/* The value's first characters, for a message. */
static void value_text(const char *v, char *why, size_t cap, const char *key, const char *want) {
    int n = (int)strcspn(v, ",}\r\n");
    snprintf(why, cap, "\"%s\" is %.*s%s; expected %s", key, n > 40 ? 40 : n, v,
             n > 40 ? "..." : "", want);
}

/* A number after "key": 1 found, 0 absent, -1 another kind of value. */
static int json_number(const char *json, const char *key, double *out, char *why, size_t cap) {
    const char *v = json_value(json, key);
    if (!v) return 0;
    char *end = NULL;
    double x = strtod(v, &end);
    if (end == v || !value_ends(end)) {
        value_text(v, why, cap, key, "a number");
        return -1;
    }
    *out = x;
    return 1;
}

/* true or false after "key" (dflt when absent); -1 for anything else: a
 * "yes" would otherwise silently become the default. */
static int json_bool(const char *json, const char *key, int dflt, char *why, size_t cap) {
    const char *v = json_value(json, key);
    if (!v) return dflt;
    if (!strncmp(v, "true", 4) && value_ends(v + 4)) return 1;
    if (!strncmp(v, "false", 5) && value_ends(v + 5)) return 0;
    value_text(v, why, cap, key, "true or false");
    return -1;
}

static int fail(const char *prog, const char *path, int rc) {
    fprintf(stderr, "%s: %s\n", prog, prog_error_text());
    return rc;
}

int prog_hf_config_parse(const char *json, gptx_model_config *c, char *why, size_t cap) {
    double n_head = 0, eps = 1e-5;
    gptx_model_config_init(c);
    c->padded_vocab_size = 0; /* = the file's vocabulary */
    int heads = json_number(json, "n_head", &n_head, why, cap);
    if (heads == 0) heads = json_number(json, "num_attention_heads", &n_head, why, cap);
    if (heads < 0 || json_number(json, "layer_norm_epsilon", &eps, why, cap) < 0) return -1;
    int tied = json_bool(json, "tie_word_embeddings", 1, why, cap); /* transformers' default */
    if (tied < 0) return -1;
    c->tied_head = tied;
    /* NaN fails both comparisons (fuzz finding: "n_head": nan reached the int cast) */
    if (heads == 0 || !(n_head >= 1 && n_head <= 4096) || n_head != (int)n_head) {
        snprintf(why, cap, "has no usable \"n_head\" (a whole number in [1, 4096])");
        return -1;
    }
    c->n_head = (int)n_head;
    c->layernorm_eps = (float)eps;
    if (!(c->layernorm_eps > 0) || !isfinite(c->layernorm_eps)) { /* the file's, not the model's */
        snprintf(why, cap, "\"layer_norm_epsilon\" is %g; expected a number > 0 (1e-05 in "
                 "GPT-2)", eps);
        return -1;
    }
    return 0;
}

static int open_hf(const char *prog, gptx_model **out, gptx_context *ctx, const char *weights,
                   const char *config) {
    size_t len = 0;
    char *json = prog_read_file_max(prog, "the Hugging Face config", config, PROG_MAX_CONFIG_BYTES,
                                    &len);
    if (!json) return GPTX_ERR_IO;
    gptx_model_config c;
    char why[160] = "";
    int bad = prog_hf_config_parse(json, &c, why, sizeof why);
    free(json);
    if (bad) {
        fprintf(stderr, "%s: %s: %s\n", prog, config, why);
        return GPTX_ERR_FORMAT;
    }
    int rc = gptx_model_import_hf(out, ctx, weights, &c);
    if (rc == GPTX_ERR_INVALID) { /* a setting of config.json that does not fit the weights */
        const char *msg = prog_error_text();
        fprintf(stderr, "%s: %s does not fit %s: %s%s\n", prog, config, weights,
                !strncmp(msg, "cfg.n_head", 10) ? "its \"n_head\"" : "",
                !strncmp(msg, "cfg.n_head", 10) ? msg + 10 : msg);
        return rc;
    }
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
