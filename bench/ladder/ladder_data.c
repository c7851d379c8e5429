#include "ladder_data.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "gptx-bench: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 1 << 16;
            char *nb = realloc(buf, nc);
            if (!nb) {
                free(buf);
                fclose(f);
                fprintf(stderr, "gptx-bench: out of host memory reading %s\n", path);
                return NULL;
            }
            buf = nb;
            cap = nc;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "gptx-bench: error reading %s\n", path);
        return NULL;
    }
    *len = n;
    return buf;
}

int ladder_data_load(ladder_data *d, const char *text_path, const char *tokenizer_dir, int B,
                     int T, int max_rows) {
    memset(d, 0, sizeof *d);
    char enc[4096], bpe[4096];
    snprintf(enc, sizeof enc, "%s/encoder.json", tokenizer_dir);
    snprintf(bpe, sizeof bpe, "%s/vocab.bpe", tokenizer_dir);
    gptx_tokenizer *tok = NULL;
    int rc = gptx_tokenizer_load_gpt2(&tok, enc, bpe);
    if (rc != GPTX_OK) {
        fprintf(stderr, "gptx-bench: loading the tokenizer from %s failed: %s\n", tokenizer_dir,
                gptx_last_error());
        return -1;
    }
    size_t len = 0;
    char *text = read_file(text_path, &len);
    if (!text) {
        gptx_tokenizer_destroy(tok);
        return -1;
    }
    /* len ids always suffice (see gptx_tokenizer_encode) */
    d->tokens = malloc((len ? len : 1) * sizeof *d->tokens);
    if (!d->tokens) {
        fprintf(stderr, "gptx-bench: out of host memory\n");
        rc = -1;
    } else {
        rc = gptx_tokenizer_encode(tok, text, len, 0, d->tokens, len, &d->n);
        if (rc != GPTX_OK)
            fprintf(stderr, "gptx-bench: tokenizing %s failed: %s\n", text_path,
                    gptx_last_error());
    }
    free(text);
    gptx_tokenizer_destroy(tok);
    if (rc != GPTX_OK) {
        ladder_data_free(d);
        return -1;
    }
    size_t eval_n = (size_t)B * T + 1, train_need = (size_t)max_rows * T + 1;
    if (d->n < eval_n + train_need) {
        fprintf(stderr,
                "gptx-bench: %s has %zu tokens; this config needs %zu (a held-out batch of %zu "
                "and a training batch of %zu): use --text with a longer file\n",
                text_path, d->n, eval_n + train_need, eval_n, train_need);
        ladder_data_free(d);
        return -1;
    }
    d->n_train = d->n - eval_n;
    d->eval_inputs = d->tokens + d->n_train;
    d->eval_targets = d->eval_inputs + 1;
    return 0;
}

void ladder_data_free(ladder_data *d) {
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

const int32_t *ladder_data_batch(const ladder_data *d, int64_t step, int rows, int T) {
    size_t per_batch = (size_t)rows * T;
    /* batches that fit, each needing one token more for the last target */
    size_t batches = (d->n_train - 1) / per_batch;
    return d->tokens + (size_t)(step % (int64_t)batches) * per_batch;
}
