/* The round trip gptx -> transformers / llm.c -> gptx (docs/export.md,
 * "Round trip"): what transformers, llm.c and PyTorch computed once
 * (tests/examples/roundtrip/gen_roundtrip.py, fixtures in
 * tests/examples/data/roundtrip/) against what gptx computes now.
 *
 *   roundtrip_check model MODEL EXPECT
 *       MODEL in any format the programs read (prog_model.h); EXPECT.txt
 *       holds the probe's ids, the positions whose logits are in
 *       EXPECT.logits (float32, real vocabulary), the mean loss of the
 *       probe's next-token targets, and a greedy continuation of the
 *       probe's first ids. The logits within 1e-4, the loss within 2e-5,
 *       the greedy ids equal.
 *   roundtrip_check ids ENCODER VOCAB TEXT COUNT FNV
 *       gptx's ids of TEXT (<|endoftext|> as text) are COUNT ids whose
 *       FNV-1a 64 (each id 4 bytes, little-endian) is FNV: the ids
 *       transformers' tokenizer gave.
 *   roundtrip_check decode ENCODER VOCAB TEXT FNV
 *       gptx's decoding of its ids of TEXT hashes (FNV-1a 64 of the bytes)
 *       to FNV: what llm.c's tokenizer (gpt2_tokenizer.bin) decoded.
 * Exit 0 when everything agrees, 1 otherwise (naming what differs), 2 for
 * a bad command line or fixture. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gptx/gptx.h>

#include "prog_files.h"
#include "prog_model.h"

#define MAX_IDS 1024
#define LOGIT_TOL 1e-4
#define LOSS_TOL 2e-5

typedef struct {
    int32_t probe[MAX_IDS];
    int n_probe, positions[16], n_pos, prompt, greedy[MAX_IDS], n_greedy;
    double loss;
} expect;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
#define FNV_START 0xcbf29ce484222325ull

/* "key v v v" lines: the ints after key into out (at most cap). -1 when absent. */
static int ints(const char *text, const char *key, int *out, int cap) {
    size_t k = strlen(key);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, key, k) || l[k] != ' ') continue;
        int n = 0;
        char *end;
        for (const char *p = l + k; n < cap; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            out[n++] = (int)v;
        }
        return n;
    }
    return -1;
}

static int read_expect(const char *prefix, expect *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s.txt", prefix);
    size_t len;
    char *t = prog_read_file("roundtrip_check", "the expectations", path, &len);
    if (!t) return -1;
    e->n_probe = ints(t, "probe", e->probe, MAX_IDS);
    e->n_pos = ints(t, "positions", e->positions, 16);
    e->n_greedy = ints(t, "greedy", e->greedy, MAX_IDS);
    int one[1];
    e->prompt = ints(t, "prompt", one, 1) == 1 ? one[0] : -1;
    const char *l = strstr(t, "\nloss ");
    e->loss = l ? strtod(l + 6, NULL) : NAN;
    free(t);
    if (e->n_probe < 2 || e->n_pos < 1 || e->n_greedy < 1 || e->prompt < 1 || isnan(e->loss)) {
        fprintf(stderr, "roundtrip_check: %s lacks probe, positions, prompt, greedy or loss\n", path);
        return -1;
    }
    return 0;
}

/* The logits of ids[0, T) at every position (real vocabulary V of Vp). */
static float *logits_of(gptx_model *m, const int32_t *ids, int T, int Vp) {
    float *out = malloc((size_t)T * (size_t)Vp * sizeof *out);
    if (!out || gptx_model_forward(m, ids, NULL, 1, T, NULL) != GPTX_OK ||
        gptx_model_get_logits(m, out, (size_t)T * (size_t)Vp) != GPTX_OK) {
        fprintf(stderr, "roundtrip_check: forward: %s\n", gptx_last_error());
        free(out);
        return NULL;
    }
    return out;
}

static int argmax(const float *row, int V) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    return best;
}

static int check_logits(const char *prefix, const expect *e, const float *got, int V, int Vp) {
    char path[4096];
    snprintf(path, sizeof path, "%s.logits", prefix);
    size_t len;
    char *raw = prog_read_file("roundtrip_check", "the logits", path, &len);
    if (!raw) return -1;
    int bad = len != (size_t)e->n_pos * (size_t)V * sizeof(float);
    double worst = 0;
    for (int i = 0; i < e->n_pos && !bad; i++) {
        const float *want = (const float *)raw + (size_t)i * (size_t)V;
        const float *row = got + (size_t)e->positions[i] * (size_t)Vp;
        for (int v = 0; v < V; v++) worst = fmax(worst, fabs((double)row[v] - want[v]));
    }
    free(raw);
    if (bad) {
        fprintf(stderr, "roundtrip_check: %s is %zu bytes, not %d positions of %d logits\n", path,
                len, e->n_pos, V);
        return -1;
    }
    printf("  logits at %d positions: max |difference| %.3g (tolerance %g)\n", e->n_pos, worst,
           LOGIT_TOL);
    return worst <= LOGIT_TOL ? 0 : 1;
}

static int check_greedy(gptx_model *m, const expect *e, int V, int Vp) {
    int32_t ids[MAX_IDS];
    memcpy(ids, e->probe, (size_t)e->prompt * sizeof *ids);
    int n = e->prompt;
    for (int k = 0; k < e->n_greedy; k++, n++) {
        float *l = logits_of(m, ids, n, Vp);
        if (!l) return -1;
        ids[n] = argmax(l + (size_t)(n - 1) * (size_t)Vp, V);
        free(l);
        if (ids[n] != e->greedy[k]) {
            printf("  greedy token %d: gptx %d, the reference %d\n", k, (int)ids[n], e->greedy[k]);
            return 1;
        }
    }
    printf("  greedy: the same %d tokens after a prompt of %d\n", e->n_greedy, e->prompt);
    return 0;
}

static int check_model(gptx_context *ctx, const char *model_path, const char *prefix) {
    expect e;
    if (read_expect(prefix, &e)) return 2;
    gptx_model *m = NULL;
    const char *format = "";
    if (prog_model_open("roundtrip_check", &m, ctx, model_path, &format) != GPTX_OK) return 1;
    gptx_model_config c;
    gptx_model_config_init(&c);
    gptx_model_get_config(m, &c);
    int T = e.n_probe - 1, rc = 1;
    printf("%s (%s; vocabulary %d) against %s:\n", model_path, format, c.vocab_size, prefix);
    float *l = T <= c.context_length ? logits_of(m, e.probe, T, c.padded_vocab_size) : NULL;
    float loss = NAN;
    if (l && gptx_model_forward(m, e.probe, e.probe + 1, 1, T, &loss) == GPTX_OK) {
        int a = check_logits(prefix, &e, l, c.vocab_size, c.padded_vocab_size);
        printf("  loss: gptx %.7f, the reference %.7f\n", (double)loss, e.loss);
        int b = fabs((double)loss - e.loss) <= LOSS_TOL ? 0 : 1;
        int g = check_greedy(m, &e, c.vocab_size, c.padded_vocab_size);
        rc = a < 0 || g < 0 ? 2 : (a || b || g);
    }
    free(l);
    gptx_model_destroy(m);
    return rc;
}

/* gptx's ids of a text file: ids (malloc'ed), *n. */
static int32_t *text_ids(const char *enc, const char *voc, const char *path, size_t *n,
                         gptx_tokenizer **tok) {
    size_t len;
    char *text = prog_read_file("roundtrip_check", "the text", path, &len);
    int32_t *ids = text ? malloc((len + 1) * sizeof *ids) : NULL;
    if (!ids || gptx_tokenizer_load_gpt2(tok, enc, voc) != GPTX_OK ||
        gptx_tokenizer_encode(*tok, text, len, 0, ids, len + 1, n) != GPTX_OK) {
        fprintf(stderr, "roundtrip_check: %s: %s\n", path, gptx_last_error());
        free(ids);
        ids = NULL;
    }
    free(text);
    return ids;
}

static int check_ids(char **argv, int decode) {
    gptx_tokenizer *tok = NULL;
    size_t n = 0;
    int32_t *ids = text_ids(argv[2], argv[3], argv[4], &n, &tok);
    if (!ids) return 2;
    uint64_t h = FNV_START;
    if (!decode) {
        for (size_t i = 0; i < n; i++) h = fnv(h, &(uint32_t){(uint32_t)ids[i]}, 4);
    }
    for (size_t i = 0; decode && i < n; i++) { /* token by token, as llm.c prints them */
        const char *b;
        size_t len;
        gptx_tokenizer_token_bytes(tok, ids[i], &b, &len);
        h = fnv(h, b, len);
    }
    char got[32];
    snprintf(got, sizeof got, "%016llx", (unsigned long long)h);
    const char *want = argv[decode ? 5 : 6];
    int ok = !strcmp(got, want) && (decode || strtoull(argv[5], NULL, 10) == n);
    printf("%s %s: %zu ids, %s %s (reference: %s%s%s)\n", decode ? "decode" : "ids", argv[4], n,
           decode ? "decoded bytes" : "ids", got, decode ? "" : argv[5], decode ? "" : " ids, ",
           want);
    free(ids);
    gptx_tokenizer_destroy(tok);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "model")) {
        gptx_context_options o;
        gptx_context_options_init(&o);
        o.backend = GPTX_BACKEND_CPU;
        o.num_threads = 2;
        gptx_context *ctx = NULL;
        if (gptx_context_create(&ctx, &o) != GPTX_OK) return 2;
        int rc = check_model(ctx, argv[2], argv[3]);
        gptx_context_destroy(ctx);
        return rc;
    }
    if (argc == 7 && !strcmp(argv[1], "ids")) return check_ids(argv, 0);
    if (argc == 6 && !strcmp(argv[1], "decode")) return check_ids(argv, 1);
    fprintf(stderr, "usage: roundtrip_check model MODEL EXPECT | ids ENCODER VOCAB TEXT COUNT FNV "
                    "| decode ENCODER VOCAB TEXT FNV\n");
    return 2;
}
