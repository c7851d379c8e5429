/* Every CUDA backend kernel against the CPU backend (the fp32 reference) on
 * random inputs at odd shapes, through the two backend tables directly.
 *
 * Tolerances (a = CUDA, r = CPU; a NaN always fails; -inf must match -inf):
 *   exact (bitwise): fill, upload/download, embedding forward, embedding
 *     backward of tokens with at most 64 positions (same additions in the
 *     same order), residual, QKV layout, AdamW (the CPU's arithmetic with
 *     every rounding spelled out; the CPU is built without contraction;
 *     pure bf16 against the CPU's fp32 update rounded on the host); the fused
 *     residual + LayerNorm against the backend's separate ops (and its
 *     residual against the CPU's; its LayerNorm has LayerNorm's tolerances);
 *     AdamW with the bf16 weight copy refreshed against AdamW then
 *     convert_weights; every kernel's scalar path against its vector path;
 *   embedding backward of a token with more positions (summed in chunks):
 *     |a - r| <= (n + 64 + m + 2) 2^-24 S, S = sum of the column's |terms|
 *     (test_embedding_text);
 *   elementwise |a - r| <= atol + rtol |r|: GELU (1e-6, 1e-5), LayerNorm
 *     (1e-5 scale, 1e-4), attention (1e-5 scale, 1e-4), cross-entropy
 *     loss and log-sum-exp (1e-5, 3e-5), logit gradient (1e-7, 1e-5);
 *   matrix products |a - r| <= e * S, S = sum_k |x_k| |w_k| (+ |bias|) of
 *     that element, e = 1e-5 (fp32), 2e-3 (tf32), 1e-2 (bf16): each input
 *     rounded to the compute type's precision (2^-11, 2^-8) twice, plus fp32
 *     accumulation;
 *   sums in double: |a - r| <= 1e-12 sum |x|.
 * "scale" is the largest |r| of that output. Repeat runs of the
 * accumulating kernels must give the same bits (no atomics). */
#define _POSIX_C_SOURCE 200809L
#include "bf16_round.h"
#include "check.h"
#include "cuda_test_util.h"

typedef struct {
    const gptx_backend_ops *cpu_ops, *cu_ops;
    gptx_backend *cpu, *cu;
    const char *precision;
} pair;

static int verbose = 1;

/* ---- memory helpers --------------------------------------------------------- */

static void *dalloc(pair *p, size_t bytes) {
    void *d = NULL;
    int rc = p->cu_ops->alloc(p->cu, bytes ? bytes : 4, &d);
    if (rc != GPTX_OK) {
        fprintf(stderr, "device alloc of %zu bytes failed: %s\n", bytes, gptx_last_error());
        exit(1);
    }
    return d;
}

static float *dup_f(pair *p, const float *h, size_t n) {
    float *d = dalloc(p, n * sizeof *d);
    CHECK_OK(p->cu_ops->upload_f32(p->cu, d, h, n));
    return d;
}

static int32_t *dup_i(pair *p, const int32_t *h, size_t n) {
    int32_t *d = dalloc(p, n * sizeof *d);
    CHECK_OK(p->cu_ops->upload_i32(p->cu, d, h, n));
    return d;
}

static float *down(pair *p, const float *d, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof *h);
    CHECK_OK(p->cu_ops->download_f32(p->cu, h, d, n));
    return h;
}

static void dfree(pair *p, void *d) { p->cu_ops->free(p->cu, d); }

static float *hcopy(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static float *hrand(size_t n, uint64_t seed, float lo, float hi) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    test_fill(x, n, seed, lo, hi);
    return x;
}

/* ---- comparisons ------------------------------------------------------------- */

static double max_abs(const float *x, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(x[i]) && fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* |got - ref| <= atol + rtol |ref| elementwise; bound (may be NULL) adds a
 * per-element allowance. Returns 1 when it passes. */
static int compare_b(const char *what, const float *ref, const float *got, size_t n, double atol,
                     double rtol, const double *bound) {
    double worst = 0.0, worst_ratio = 0.0;
    size_t at = 0, bad = 0;
    for (size_t i = 0; i < n; i++) {
        double r = ref[i], a = got[i];
        double tol = atol + rtol * fabs(r) + (bound ? bound[i] : 0.0);
        int ok;
        if (isinf(r) || isinf(a)) {
            ok = r == a;
        } else {
            double d = fabs(a - r);
            ok = d <= tol; /* NaN fails */
            if (!(d <= worst) || isnan(d)) {
                worst = d;
                at = i;
            }
            double ratio = tol > 0 ? d / tol : (d > 0 ? INFINITY : 0.0);
            if (!(ratio <= worst_ratio)) worst_ratio = ratio;
        }
        if (!ok) {
            if (bad < 3)
                fprintf(stderr, "    %s[%zu]: got %.9g, reference %.9g (tol %.3g)\n", what, i, a, r,
                        tol);
            bad++;
            if (!(fabs(a - r) <= worst)) at = i;
        }
    }
    if (verbose || bad)
        printf("    %-28s n %-9zu max|d| %.3g (err/tol %.3g)%s\n", what, n, worst, worst_ratio,
               bad ? "  FAIL" : "");
    (void)at;
    CHECK(bad == 0);
    return bad == 0;
}

static int compare(const char *what, const float *ref, const float *got, size_t n, double atol,
                   double rtol) {
    return compare_b(what, ref, got, n, atol, rtol, NULL);
}

static int same_bits(const char *what, const float *a, const float *b, size_t n) {
    int same = memcmp(a, b, n * sizeof *a) == 0;
    if (verbose || !same) printf("    %-28s %s\n", what, same ? "bitwise equal" : "DIFFER  FAIL");
    CHECK(same);
    return same;
}

/* e for the matrix products of this precision */
static double matmul_eps(const char *precision) {
    if (precision && strcmp(precision, "bf16") == 0) return 1e-2;
    if (precision && strcmp(precision, "tf32") == 0) return 2e-3;
    return 1e-5;
}

/* ---- copies and fill ------------------------------------------------------------ */

static void test_copies(pair *p) {
    printf("  copies and fill\n");
    size_t sizes[] = {1, 3, 4097, (size_t)5 << 20}; /* the last crosses two staging buffers */
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        float *h = hrand(n, 11 + s, -3, 3);
        float *d = dup_f(p, h, n);
        float *back = down(p, d, n);
        same_bits("upload/download", h, back, n);
        CHECK_OK(p->cu_ops->fill_f32(p->cu, d, 0.5f, n));
        float *f = down(p, d, n);
        for (size_t i = 0; i < n; i++) h[i] = 0.5f;
        same_bits("fill 0.5", h, f, n);
        free(f);
        CHECK_OK(p->cu_ops->fill_f32(p->cu, d, 0.0f, n));
        f = down(p, d, n);
        memset(h, 0, n * sizeof *h);
        same_bits("fill 0", h, f, n);
        free(f);
        free(back);
        free(h);
        dfree(p, d);
    }
}

/* ---- embedding ------------------------------------------------------------------- */

static void test_embedding(pair *p) {
    int shapes[][4] = {{1, 1, 8, 5}, {2, 37, 24, 7}, {3, 65, 96, 1000}, {4, 33, 33, 3}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], V = shapes[si][3];
        size_t BT = (size_t)B * T, BTC = BT * C;
        printf("  embedding B %d T %d C %d V %d\n", B, T, C, V);
        int32_t *ids = malloc(BT * sizeof *ids);
        for (size_t i = 0; i < BT; i++) ids[i] = (int32_t)((i * 7919u + si) % (unsigned)V);
        float *wte = hrand((size_t)V * C, 1, -1, 1), *wpe = hrand((size_t)T * C, 2, -1, 1);
        float *ref = malloc(BTC * sizeof *ref);
        CHECK_OK(p->cpu_ops->embedding_forward(p->cpu, ref, ids, wte, wpe, B, T, C));
        int32_t *dids = dup_i(p, ids, BT);
        float *dwte_in = dup_f(p, wte, (size_t)V * C), *dwpe_in = dup_f(p, wpe, (size_t)T * C);
        float *dout = dalloc(p, BTC * sizeof(float));
        CHECK_OK(p->cu_ops->embedding_forward(p->cu, dout, dids, dwte_in, dwpe_in, B, T, C));
        float *got = down(p, dout, BTC);
        same_bits("forward", ref, got, BTC);
        free(got);

        /* backward accumulates into non-zero gradients */
        float *g = hrand(BTC, 3, -1, 1);
        float *gte = hrand((size_t)V * C, 4, -1, 1), *gpe = hrand((size_t)T * C, 5, -1, 1);
        float *rte = hcopy(gte, (size_t)V * C), *rpe = hcopy(gpe, (size_t)T * C);
        CHECK_OK(p->cpu_ops->embedding_backward(p->cpu, rte, rpe, g, ids, B, T, C));
        float *dg = dup_f(p, g, BTC);
        float *dte = dup_f(p, gte, (size_t)V * C), *dpe = dup_f(p, gpe, (size_t)T * C);
        /* ids cached by the forward pass */
        CHECK_OK(p->cu_ops->embedding_backward(p->cu, dte, dpe, dg, dids, B, T, C));
        float *ate = down(p, dte, (size_t)V * C), *ape = down(p, dpe, (size_t)T * C);
        same_bits("backward dwte", rte, ate, (size_t)V * C);
        same_bits("backward dwpe", rpe, ape, (size_t)T * C);
        free(ate);
        free(ape);

        /* new ids uploaded into the same buffer: the cached copy must not be used */
        for (size_t i = 0; i < BT; i++) ids[i] = (int32_t)((i * 31u + 5u) % (unsigned)V);
        CHECK_OK(p->cu_ops->upload_i32(p->cu, dids, ids, BT));
        memcpy(rte, gte, (size_t)V * C * sizeof *rte);
        memcpy(rpe, gpe, (size_t)T * C * sizeof *rpe);
        CHECK_OK(p->cpu_ops->embedding_backward(p->cpu, rte, rpe, g, ids, B, T, C));
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dte, gte, (size_t)V * C));
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dpe, gpe, (size_t)T * C));
        CHECK_OK(p->cu_ops->embedding_backward(p->cu, dte, dpe, dg, dids, B, T, C));
        ate = down(p, dte, (size_t)V * C);
        same_bits("backward after new ids", rte, ate, (size_t)V * C);
        free(ate);

        dfree(p, dids);
        dfree(p, dwte_in);
        dfree(p, dwpe_in);
        dfree(p, dout);
        dfree(p, dg);
        dfree(p, dte);
        dfree(p, dpe);
        free(ids);
        free(wte);
        free(wpe);
        free(ref);
        free(g);
        free(gte);
        free(gpe);
        free(rte);
        free(rpe);
    }
}

/* ---- embedding backward on tokenized text -------------------------------------------------- */

#ifndef GPTX_TEST_DATA_DIR
#define GPTX_TEST_DATA_DIR "data"
#endif
#define EMB_CHUNK 64 /* positions one block adds serially: backends/cuda/cuda_ops.cu */

/* The GPT-2 ids of data/the-verdict.txt (NULL when the files cannot be read). */
static int32_t *verdict_ids(gptx_tokenizer **tok, size_t *n) {
    char enc[1024], voc[1024], txt[1024];
    snprintf(enc, sizeof enc, "%s/gpt2/encoder.json", GPTX_TEST_DATA_DIR);
    snprintf(voc, sizeof voc, "%s/gpt2/vocab.bpe", GPTX_TEST_DATA_DIR);
    snprintf(txt, sizeof txt, "%s/the-verdict.txt", GPTX_TEST_DATA_DIR);
    FILE *f = fopen(txt, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", txt);
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    size_t got = fread(text, 1, (size_t)len, f);
    fclose(f);
    int32_t *ids = malloc((size_t)len * sizeof *ids);
    int rc = gptx_tokenizer_load_gpt2(tok, enc, voc);
    if (rc == GPTX_OK) rc = gptx_tokenizer_encode(*tok, text, got, 0, ids, got, n);
    free(text);
    if (rc != GPTX_OK) {
        fprintf(stderr, "tokenizing %s: %s\n", txt, gptx_last_error());
        free(ids);
        return NULL;
    }
    return ids;
}

/* How long the serial chain of the embedding backward is on B x T positions
 * of the text (repeated to fill): before, one block per token added all of
 * its positions (the largest bucket); now a block adds at most EMB_CHUNK,
 * and a split token's partial rows are then added in order. */
static void embedding_chain_figures(gptx_tokenizer *tok, const int32_t *ids, size_t n, int B,
                                    int T) {
    size_t BT = (size_t)B * T, distinct = 0, split = 0, blocks = 0;
    int V = gptx_tokenizer_vocab_size(tok), top = 0;
    int32_t *counts = calloc((size_t)V, sizeof *counts);
    for (size_t i = 0; i < BT; i++) counts[ids[i % n]]++;
    for (int v = 0; v < V; v++) {
        if (!counts[v]) continue;
        distinct++;
        blocks += ((size_t)counts[v] + EMB_CHUNK - 1) / EMB_CHUNK;
        split += counts[v] > EMB_CHUNK;
        if (counts[v] > counts[top]) top = v;
    }
    const char *bytes = "";
    size_t blen = 0;
    gptx_tokenizer_token_bytes(tok, top, &bytes, &blen);
    int after = counts[top] < EMB_CHUNK ? counts[top] : EMB_CHUNK;
    int partials = (counts[top] + EMB_CHUNK - 1) / EMB_CHUNK;
    printf("  embedding backward, B %d T %d of the-verdict.txt (%zu tokens, repeated): %zu distinct "
           "tokens, largest bucket %d positions (token %d '%.*s'); longest serial chain %d row "
           "additions before, %d now plus %d partial rows added in order; blocks %zu before, %zu "
           "now (%zu tokens split)\n",
           B, T, n, distinct, counts[top], top, (int)blen, bytes, counts[top], after,
           partials > 1 ? partials : 0, distinct, blocks, split);
    free(counts);
}

/* One token's row of dwte against the CPU's: bitwise when it has at most
 * EMB_CHUNK positions (the same additions in the same order); else the
 * chunked order's bound. The CPU adds d0 + x_1 + ... + x_n in order (error
 * <= n u S, u = 2^-24, S = |d0| + sum |x_j| of that column); the device
 * sums m = ceil(n / L) chunks of at most L = EMB_CHUNK terms each from
 * zero ((L - 1) u S), then d0 and the m partials in order (m u S): so
 * |a - r| <= (n + L + m + 2) u S, the 2 covering second-order terms.
 * Returns the worst |a - r| / (u S). */
static double embedding_row_check(const float *a, const float *r, const double *S, int count,
                                   int C, size_t *bad) {
    double worst = 0.0, u = 0x1p-24;
    if (count <= EMB_CHUNK) {
        *bad += memcmp(a, r, (size_t)C * sizeof *a) != 0;
        return 0.0;
    }
    int m = (count + EMB_CHUNK - 1) / EMB_CHUNK;
    double k = count + EMB_CHUNK + m + 2;
    for (int c = 0; c < C; c++) {
        double d = fabs((double)a[c] - r[c]), ratio = S[c] > 0 ? d / (u * S[c]) : d;
        *bad += !(ratio <= k);
        if (ratio > worst) worst = ratio;
    }
    return worst;
}

/* Tokenized text, not uniform ids: the-verdict.txt's first B x T = 4096
 * GPT-2 tokens, where frequent tokens (',', ' the', '.') cover more than
 * EMB_CHUNK positions and are split. C 36 moves in groups, C 33 element by
 * element. dwpe and the rows of absent or rarer tokens bitwise; the split
 * tokens within the bound above; a repeat run bitwise. */
static void test_embedding_text(pair *p) {
    gptx_tokenizer *tok = NULL;
    size_t n = 0;
    int32_t *text = verdict_ids(&tok, &n);
    CHECK(text != NULL && n > 0);
    if (!text) return;
    embedding_chain_figures(tok, text, n, 64, 1024);
    int B = 4, T = 1024, V = gptx_tokenizer_vocab_size(tok), Cs[] = {36, 33};
    size_t BT = (size_t)B * T;
    int32_t *ids = malloc(BT * sizeof *ids), *counts = calloc((size_t)V, sizeof *counts);
    for (size_t i = 0; i < BT; i++) counts[ids[i] = text[i % n]]++;
    size_t split = 0;
    for (int v = 0; v < V; v++) split += counts[v] > EMB_CHUNK;
    printf("  embedding backward on the-verdict.txt, B %d T %d: %zu tokens split into chunks\n", B,
           T, split);
    CHECK(split > 0);
    for (size_t ci = 0; ci < sizeof Cs / sizeof Cs[0]; ci++) {
        int C = Cs[ci];
        size_t BTC = BT * C, VC = (size_t)V * C;
        float *g = hrand(BTC, 301 + ci, -1, 1), *gte = hrand(VC, 302, -1, 1),
              *gpe = hrand((size_t)T * C, 303, -1, 1);
        float *rte = hcopy(gte, VC), *rpe = hcopy(gpe, (size_t)T * C);
        CHECK_OK(p->cpu_ops->embedding_backward(p->cpu, rte, rpe, g, ids, B, T, C));
        double *S = malloc(VC * sizeof *S);
        for (size_t i = 0; i < VC; i++) S[i] = fabs(gte[i]);
        for (size_t i = 0; i < BT; i++)
            for (int c = 0; c < C; c++) S[(size_t)ids[i] * C + c] += fabs(g[i * C + c]);
        int32_t *dids = dup_i(p, ids, BT);
        float *dg = dup_f(p, g, BTC), *dte = dup_f(p, gte, VC), *dpe = dup_f(p, gpe, (size_t)T * C);
        CHECK_OK(p->cu_ops->embedding_backward(p->cu, dte, dpe, dg, dids, B, T, C));
        float *ate = down(p, dte, VC), *ape = down(p, dpe, (size_t)T * C);
        size_t bad = 0;
        double worst = 0.0;
        for (int v = 0; v < V; v++) {
            double w = embedding_row_check(ate + (size_t)v * C, rte + (size_t)v * C,
                                           S + (size_t)v * C, counts[v], C, &bad);
            if (w > worst) worst = w;
        }
        printf("    C %d: split tokens' worst |a - r| / (2^-24 S) = %.3g; %zu rows or elements "
               "outside\n",
               C, worst, bad);
        CHECK(bad == 0);
        same_bits("dwpe", rpe, ape, (size_t)T * C);
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dte, gte, VC));
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dpe, gpe, (size_t)T * C));
        CHECK_OK(p->cu_ops->embedding_backward(p->cu, dte, dpe, dg, dids, B, T, C));
        float *ate2 = down(p, dte, VC);
        same_bits("dwte repeat", ate, ate2, VC);
        void *dev[] = {dids, dg, dte, dpe};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {g, gte, gpe, rte, rpe, S, ate, ape, ate2};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
    free(ids);
    free(counts);
    free(text);
    gptx_tokenizer_destroy(tok);
}

/* ---- LayerNorm -------------------------------------------------------------------- */

static void test_layernorm(pair *p) {
    /* C 1600 and 1030: longer than the 1024 columns a warp keeps in
     * registers (read again per pass); 1030 and 33 not a whole number of
     * 16-byte groups (element by element) */
    int shapes[][2] = {{1, 8}, {7, 24}, {257, 100}, {33, 768}, {300, 33}, {5, 1600}, {3, 1030},
                       {2100, 24}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t NC = (size_t)N * C;
        printf("  layernorm N %d C %d\n", N, C);
        float *x = hrand(NC, 21 + si, -2, 3), *w = hrand(C, 22, 0.5f, 1.5f),
              *b = hrand(C, 23, -1, 1);
        float *out = malloc(NC * sizeof *out), *mean = malloc(N * sizeof *mean),
              *rstd = malloc(N * sizeof *rstd);
        CHECK_OK(p->cpu_ops->layernorm_forward(p->cpu, out, mean, rstd, x, w, b, N, C, 1e-5f));
        float *dx = dup_f(p, x, NC), *dw = dup_f(p, w, C), *db = dup_f(p, b, C);
        float *dout = dalloc(p, NC * 4), *dmean = dalloc(p, N * 4), *drstd = dalloc(p, N * 4);
        CHECK_OK(p->cu_ops->layernorm_forward(p->cu, dout, dmean, drstd, dx, dw, db, N, C, 1e-5f));
        float *a = down(p, dout, NC), *am = down(p, dmean, N), *ar = down(p, drstd, N);
        compare("forward out", out, a, NC, 1e-5 * max_abs(out, NC), 1e-4);
        compare("forward mean", mean, am, N, 1e-6 * max_abs(mean, N) + 1e-7, 1e-4);
        compare("forward rstd", rstd, ar, N, 0, 1e-4);

        /* backward from the CPU's saved statistics, accumulating */
        float *g = hrand(NC, 24, -1, 1);
        float *gin = hrand(NC, 25, -1, 1), *gw = hrand(C, 26, -1, 1), *gb = hrand(C, 27, -1, 1);
        float *rin = hcopy(gin, NC), *rw = hcopy(gw, C), *rb = hcopy(gb, C);
        CHECK_OK(p->cpu_ops->layernorm_backward(p->cpu, rin, rw, rb, g, x, w, mean, rstd, N, C));
        float *dg = dup_f(p, g, NC), *din = dup_f(p, gin, NC), *dgw = dup_f(p, gw, C),
              *dgb = dup_f(p, gb, C);
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dmean, mean, N));
        CHECK_OK(p->cu_ops->upload_f32(p->cu, drstd, rstd, N));
        CHECK_OK(
            p->cu_ops->layernorm_backward(p->cu, din, dgw, dgb, dg, dx, dw, dmean, drstd, N, C));
        float *ain = down(p, din, NC), *aw = down(p, dgw, C), *ab = down(p, dgb, C);
        compare("backward dinp", rin, ain, NC, 1e-5 * max_abs(rin, NC), 1e-4);
        compare("backward dw", rw, aw, C, 1e-5 * max_abs(rw, C), 1e-4);
        compare("backward db", rb, ab, C, 1e-5 * max_abs(rb, C), 1e-4);
        /* determinism: the same call again from the same inputs */
        CHECK_OK(p->cu_ops->upload_f32(p->cu, din, gin, NC));
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dgw, gw, C));
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dgb, gb, C));
        CHECK_OK(
            p->cu_ops->layernorm_backward(p->cu, din, dgw, dgb, dg, dx, dw, dmean, drstd, N, C));
        float *ain2 = down(p, din, NC), *aw2 = down(p, dgw, C);
        same_bits("backward repeat dinp", ain, ain2, NC);
        same_bits("backward repeat dw", aw, aw2, C);
        free(ain2);
        free(aw2);

        void *dev[] = {dx, dw, db, dout, dmean, drstd, dg, din, dgw, dgb};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {x,   w,  b,  out, mean, rstd, a,   am, ar, g,
                        gin, gw, gb, rin, rw,   rb,   ain, aw, ab};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* The column sums behind every bias gradient and LayerNorm's dw, db
 * (cuda_ops.cu), on values whose every partial sum is exact in fp32
 * (multiples of 1/64, |x| <= 1, at most 2^24 / 64 rows): whatever the order,
 * the result must be the exact sum, so a row summed twice or never, or a
 * partial lost, shows. Two paths:
 *   - layernorm_backward with mean 0, rstd 1, input 1 and weight 1: then
 *     dw += sum of dout * (1 - 0) * 1 and db += sum of dout, both exact; up
 *     to 1024 columns the sums fused into the rows' kernel (blocks of >= 16
 *     rows, at most 512 blocks), beyond it the separate column sums;
 *   - matmul_backward's bias gradient (input width 4): the separate column
 *     sums (chunks of >= 64 rows over 8 lanes, at most 256 chunks).
 * Shapes: one chunk; a chunk ending mid-lane; more chunks than the final
 * pass's 128 lanes (N 2100: 132 fused blocks; N 20000: 250 chunks of 80
 * rows, 500 blocks of 40, also chunks longer than their minimum); several
 * column blocks and a partial group (C 1030, 260, 33). */
static void test_column_sums(pair *p) {
    int shapes[][2] = {{1, 5}, {70, 33}, {2100, 40}, {20000, 260}, {3, 1030}}; /* C >= 4 */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t NC = (size_t)N * C;
        printf("  column sums N %d C %d\n", N, C);
        float *g = malloc(NC * sizeof *g), *acc = malloc(C * sizeof *acc);
        double *want = calloc(C, sizeof *want);
        uint64_t st = 77 + si;
        for (size_t i = 0; i < NC; i++) g[i] = (float)(int)test_uniform(&st, -64, 65) / 64.0f;
        for (int c = 0; c < C; c++) want[c] = acc[c] = (float)(c % 7 - 3) / 64.0f;
        for (size_t i = 0; i < NC; i++) want[i % C] += g[i];
        float *ones = malloc(NC * sizeof *ones), *zeros = calloc(NC, sizeof *zeros);
        for (size_t i = 0; i < NC; i++) ones[i] = 1.0f;
        float *dg = dup_f(p, g, NC), *dx = dup_f(p, ones, NC), *dw = dup_f(p, ones, C),
              *dm = dup_f(p, zeros, N), *dr = dup_f(p, ones, N), *din = dup_f(p, zeros, NC),
              *dgw = dup_f(p, acc, C), *dgb = dup_f(p, acc, C);
        CHECK_OK(p->cu_ops->layernorm_backward(p->cu, din, dgw, dgb, dg, dx, dw, dm, dr, N, C));
        float *aw = down(p, dgw, C), *ab = down(p, dgb, C);
        /* the bias gradient of a product of input width 4 (dinp, dw unused) */
        float *dbias = dup_f(p, acc, C), *dwin = dup_f(p, zeros, (size_t)C * 4),
              *dwt = dup_f(p, zeros, (size_t)C * 4), *dpin = dalloc(p, (size_t)N * 16);
        /* inp: the first N x 4 of dx's ones (C >= 4 here) */
        CHECK_OK(p->cu_ops->matmul_backward(p->cu, dpin, dwin, dbias, dg, dx, dwt, N, 4, C));
        float *abias = down(p, dbias, C);
        size_t bad = 0, bad_bias = 0;
        for (int c = 0; aw && ab && abias && c < C; c++) {
            bad += aw[c] != (float)want[c] || ab[c] != (float)want[c];
            bad_bias += abias[c] != (float)want[c];
        }
        if (bad || bad_bias)
            fprintf(stderr,
                    "column sums N %d C %d: %zu LayerNorm and %zu bias columns not exact\n", N, C,
                    bad, bad_bias);
        CHECK(aw && ab && abias && bad == 0 && bad_bias == 0);
        void *dev[] = {dg, dx, dw, dm, dr, din, dgw, dgb, dbias, dwin, dwt, dpin};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {g, acc, want, ones, zeros, aw, ab, abias};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* Fused residual-add + LayerNorm against the CPU's residual_forward then
 * layernorm_forward (residual bitwise, the rest LayerNorm's tolerances), and
 * against the CUDA backend's own separate ops bit for bit. */
static void test_residual_layernorm(pair *p) {
    int shapes[][2] = {{1, 8}, {9, 40}, {257, 100}, {33, 768}, {5, 1600}, {4, 1030}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1];
        size_t NC = (size_t)N * C;
        printf("  residual_layernorm N %d C %d\n", N, C);
        float *xa = hrand(NC, 61 + si, -2, 3), *xb = hrand(NC, 62 + si, -1, 1);
        float *w = hrand(C, 63, 0.5f, 1.5f), *b = hrand(C, 64, -1, 1);
        float *res = malloc(NC * sizeof *res), *out = malloc(NC * sizeof *out),
              *mean = malloc(N * sizeof *mean), *rstd = malloc(N * sizeof *rstd);
        CHECK_OK(p->cpu_ops->residual_forward(p->cpu, res, xa, xb, NC));
        CHECK_OK(p->cpu_ops->layernorm_forward(p->cpu, out, mean, rstd, res, w, b, N, C, 1e-5f));
        float *da = dup_f(p, xa, NC), *db_ = dup_f(p, xb, NC), *dw = dup_f(p, w, C),
              *dbias = dup_f(p, b, C);
        float *dres = dalloc(p, NC * 4), *dout = dalloc(p, NC * 4), *dmean = dalloc(p, N * 4),
              *drstd = dalloc(p, N * 4);
        CHECK_OK(p->cu_ops->residual_layernorm_forward(p->cu, dres, dout, dmean, drstd, da, db_, dw,
                                                       dbias, N, C, 1e-5f));
        float *ares = down(p, dres, NC), *aout = down(p, dout, NC), *am = down(p, dmean, N),
              *ar = down(p, drstd, N);
        same_bits("fused residual", res, ares, NC);
        compare("fused out", out, aout, NC, 1e-5 * max_abs(out, NC), 1e-4);
        compare("fused mean", mean, am, N, 1e-6 * max_abs(mean, N) + 1e-7, 1e-4);
        compare("fused rstd", rstd, ar, N, 0, 1e-4);
        /* the separate CUDA ops give the same bits */
        CHECK_OK(p->cu_ops->residual_forward(p->cu, dres, da, db_, NC));
        CHECK_OK(p->cu_ops->layernorm_forward(p->cu, dout, dmean, drstd, dres, dw, dbias, N, C,
                                              1e-5f));
        float *sout = down(p, dout, NC), *sm = down(p, dmean, N), *sr = down(p, drstd, N);
        same_bits("fused vs separate out", sout, aout, NC);
        same_bits("fused vs separate mean", sm, am, N);
        same_bits("fused vs separate rstd", sr, ar, N);
        void *dev[] = {da, db_, dw, dbias, dres, dout, dmean, drstd};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {xa, xb, w, b, res, out, mean, rstd, ares, aout, am, ar, sout, sm, sr};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* ---- matrix products --------------------------------------------------------------- */

/* S[n, o] = sum_c |x[n, c]| |w[o, c]| + |bias[o]| (forward) */
static double *bound_fwd(const float *x, const float *w, const float *bias, int N, int C, int OC,
                         double e) {
    double *s = malloc((size_t)N * OC * sizeof *s);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = bias ? fabs(bias[o]) : 0.0;
            for (int c = 0; c < C; c++)
                acc += fabs(x[(size_t)n * C + c]) * fabs(w[(size_t)o * C + c]);
            s[(size_t)n * OC + o] = e * acc;
        }
    return s;
}

static void test_matmul(pair *p) {
    int shapes[][3] = {{1, 8, 8}, {7, 24, 72}, {37, 100, 33}, {130, 64, 257}, {64, 768, 96}};
    double e = matmul_eps(p->precision);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
        size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
        printf("  matmul N %d C %d OC %d (%s)\n", N, C, OC, p->precision);
        float *x = hrand(NC, 31 + si, -1, 1), *w = hrand(OCC, 32, -1, 1);
        /* one spare element in front: a bias only 4-byte aligned takes the
         * non-epilogue path */
        float *bias = hrand(OC + 1, 33, -1, 1);
        float *dx = dup_f(p, x, NC), *dw = dup_f(p, w, OCC), *dbias = dup_f(p, bias, OC + 1);
        float *dout = dalloc(p, NO * 4);
        for (int variant = 0; variant < 3; variant++) {
            const float *hb = variant == 0 ? NULL : variant == 1 ? bias : bias + 1;
            const float *db = variant == 0 ? NULL : variant == 1 ? dbias : dbias + 1;
            const char *name = variant == 0   ? "forward, no bias"
                               : variant == 1 ? "forward, bias"
                                              : "forward, bias +4B";
            float *ref = malloc(NO * sizeof *ref);
            CHECK_OK(p->cpu_ops->matmul_forward(p->cpu, ref, x, w, hb, N, C, OC));
            CHECK_OK(p->cu_ops->fill_f32(p->cu, dout, NAN, NO)); /* overwritten entirely */
            CHECK_OK(p->cu_ops->matmul_forward(p->cu, dout, dx, dw, db, N, C, OC));
            float *got = down(p, dout, NO);
            double *bd = bound_fwd(x, w, hb, N, C, OC, e);
            compare_b(name, ref, got, NO, 0, 0, bd);
            free(bd);
            free(ref);
            free(got);
        }
        /* backward: dinp overwritten (or NULL), dw and dbias accumulate */
        float *g = hrand(NO, 34, -1, 1);
        float *gw0 = hrand(OCC, 35, -1, 1), *gb0 = hrand(OC, 36, -1, 1);
        float *rin = malloc(NC * sizeof *rin), *rw = hcopy(gw0, OCC), *rb = hcopy(gb0, OC);
        CHECK_OK(p->cpu_ops->matmul_backward(p->cpu, rin, rw, rb, g, x, w, N, C, OC));
        float *dg = dup_f(p, g, NO), *din = dalloc(p, NC * 4), *dgw = dup_f(p, gw0, OCC),
              *dgb = dup_f(p, gb0, OC);
        CHECK_OK(p->cu_ops->fill_f32(p->cu, din, NAN, NC));
        CHECK_OK(p->cu_ops->matmul_backward(p->cu, din, dgw, dgb, dg, dx, dw, N, C, OC));
        float *ain = down(p, din, NC), *aw = down(p, dgw, OCC), *ab = down(p, dgb, OC);
        /* bounds: dinp[n, c] = sum_o g[n, o] w[o, c]; dw[o, c] = sum_n g[n, o] x[n, c] */
        double *bin = malloc(NC * sizeof *bin), *bw = malloc(OCC * sizeof *bw),
               *bb = malloc(OC * sizeof *bb);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double s = 0;
                for (int o = 0; o < OC; o++)
                    s += fabs(g[(size_t)n * OC + o]) * fabs(w[(size_t)o * C + c]);
                bin[(size_t)n * C + c] = e * s;
            }
        for (int o = 0; o < OC; o++) {
            double sb = 0;
            for (int c = 0; c < C; c++) {
                double s = fabs(gw0[(size_t)o * C + c]);
                for (int n = 0; n < N; n++)
                    s += fabs(g[(size_t)n * OC + o]) * fabs(x[(size_t)n * C + c]);
                bw[(size_t)o * C + c] = e * s;
            }
            sb = fabs(gb0[o]);
            for (int n = 0; n < N; n++) sb += fabs(g[(size_t)n * OC + o]);
            bb[o] = 1e-5 * sb; /* plain fp32 column sum */
        }
        compare_b("backward dinp", rin, ain, NC, 0, 0, bin);
        compare_b("backward dw (accumulated)", rw, aw, OCC, 0, 0, bw);
        compare_b("backward dbias (accumulated)", rb, ab, OC, 0, 0, bb);
        /* dinp NULL: only dw; and determinism of the repeat */
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dgw, gw0, OCC));
        CHECK_OK(p->cu_ops->matmul_backward(p->cu, NULL, dgw, NULL, dg, dx, dw, N, C, OC));
        float *aw2 = down(p, dgw, OCC);
        same_bits("backward repeat dw", aw, aw2, OCC);
        free(aw2);

        void *dev[] = {dx, dw, dbias, dout, dg, din, dgw, dgb};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {x, w, bias, g, gw0, gb0, rin, rw, rb, ain, aw, ab, bin, bw, bb};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* The products with a GELU epilogue against the CPU's product then GELU:
 * pre within the product bound e*S, the GELU output and the GELU'd dinp
 * within 1.13 (max |gelu'|) times it, plus 1e-6 + 1e-5 relative for the GELU
 * itself. OC (forward) or C (backward) not a multiple of 8 takes the
 * separate-ops fallback (our tanhf kernel: those bounds); with
 * GPTX_CUDA_EMU_NO_EPILOGUE every shape does. Where cuBLASLt's epilogue may
 * compute the GELU, its tanh is not ours: it may be a hardware approximation
 * (PTX tanh.approx.f32, relative error 2^-10.99) or the erf form, so a
 * relative tanh error of eps_t = 2^-10 is allowed on top (both fit: the erf
 * form is within 3.5e-4 of it in these units):
 *   gelu(x) = x/2 (1 + t):            + eps_t |x| / 2
 *   gelu'(x) = (1 + t)/2 + x/2 (1 - t^2) u'(x), u' = s (1 + 3 a x^2):
 *                                      + eps_t (1/2 + |x| u'(x)) |dinp before gelu'|
 * A GELU with another constant (0.044715 -> 0.05 moves it by 2.7e-3 at x = 2)
 * is still outside. */
#define GELU_EPI_TANH_EPS 0x1p-10

static double gelu_epi_forward(double x) { return GELU_EPI_TANH_EPS * 0.5 * fabs(x); }

static double gelu_epi_backward(double x, double d) {
    double du = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x);
    return GELU_EPI_TANH_EPS * (0.5 + fabs(x) * du) * fabs(d);
}
static void test_matmul_gelu(pair *p) {
    int shapes[][3] = {{7, 24, 72}, {37, 100, 33}, {16, 40, 64}};
    double e = matmul_eps(p->precision);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1], OC = shapes[si][2];
        size_t NC = (size_t)N * C, NO = (size_t)N * OC, OCC = (size_t)OC * C;
        printf("  matmul+gelu N %d C %d OC %d (%s)\n", N, C, OC, p->precision);
        float *x = hrand(NC, 71 + si, -1, 1), *w = hrand(OCC, 72, -1, 1),
              *bias = hrand(OC, 73, -1, 1);
        float *rpre = malloc(NO * sizeof *rpre), *rout = malloc(NO * sizeof *rout);
        CHECK_OK(p->cpu_ops->matmul_forward(p->cpu, rpre, x, w, bias, N, C, OC));
        CHECK_OK(p->cpu_ops->gelu_forward(p->cpu, rout, rpre, NO));
        float *dx = dup_f(p, x, NC), *dw = dup_f(p, w, OCC), *db = dup_f(p, bias, OC);
        float *dpre = dalloc(p, NO * 4), *dout = dalloc(p, NO * 4);
        CHECK_OK(p->cu_ops->fill_f32(p->cu, dpre, NAN, NO));
        CHECK_OK(p->cu_ops->fill_f32(p->cu, dout, NAN, NO));
        CHECK_OK(p->cu_ops->matmul_gelu_forward(p->cu, dout, dpre, dx, dw, db, N, C, OC));
        float *apre = down(p, dpre, NO), *aout = down(p, dout, NO);
        double *bd = bound_fwd(x, w, bias, N, C, OC, e);
        compare_b("forward pre-activation", rpre, apre, NO, 0, 0, bd);
        for (size_t i = 0; i < NO; i++)
            bd[i] = 1.13 * bd[i] + (OC % 8 == 0 ? gelu_epi_forward(rpre[i]) : 0.0);
        compare_b("forward gelu", rout, aout, NO, 1e-6, 1e-5, bd);
        free(bd);

        /* backward of a product whose input is gelu(pre): pre (N, C) */
        float *pre = hrand(NC, 74 + si, -3, 3), *inp = malloc(NC * sizeof *inp);
        CHECK_OK(p->cpu_ops->gelu_forward(p->cpu, inp, pre, NC));
        float *g = hrand(NO, 75, -1, 1), *gw0 = hrand(OCC, 76, -1, 1), *gb0 = hrand(OC, 77, -1, 1);
        float *rt = malloc(NC * sizeof *rt), *rin = malloc(NC * sizeof *rin), *rw = hcopy(gw0, OCC),
              *rb = hcopy(gb0, OC);
        CHECK_OK(p->cpu_ops->matmul_backward(p->cpu, rt, rw, rb, g, inp, w, N, C, OC));
        CHECK_OK(p->cpu_ops->gelu_backward(p->cpu, rin, pre, rt, NC));
        float *dg = dup_f(p, g, NO), *dinp = dup_f(p, inp, NC), *dp = dup_f(p, pre, NC),
              *din = dalloc(p, NC * 4), *dgw = dup_f(p, gw0, OCC), *dgb = dup_f(p, gb0, OC);
        CHECK_OK(p->cu_ops->fill_f32(p->cu, din, NAN, NC));
        CHECK_OK(p->cu_ops->matmul_backward_dgelu(p->cu, din, dgw, dgb, dg, dinp, dw, dp, N, C, OC));
        float *ain = down(p, din, NC), *aw = down(p, dgw, OCC), *ab = down(p, dgb, OC);
        double *bin = malloc(NC * sizeof *bin), *bw = malloc(OCC * sizeof *bw),
               *bb = malloc(OC * sizeof *bb);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double sum = 0;
                for (int o = 0; o < OC; o++)
                    sum += fabs(g[(size_t)n * OC + o]) * fabs(w[(size_t)o * C + c]);
                size_t i = (size_t)n * C + c;
                bin[i] = 1.13 * e * sum + (C % 8 == 0 ? gelu_epi_backward(pre[i], rt[i]) : 0.0);
            }
        for (int o = 0; o < OC; o++) {
            for (int c = 0; c < C; c++) {
                double sum = fabs(gw0[(size_t)o * C + c]);
                for (int n = 0; n < N; n++)
                    sum += fabs(g[(size_t)n * OC + o]) * fabs(inp[(size_t)n * C + c]);
                bw[(size_t)o * C + c] = e * sum;
            }
            double sb = fabs(gb0[o]);
            for (int n = 0; n < N; n++) sb += fabs(g[(size_t)n * OC + o]);
            bb[o] = 1e-5 * sb;
        }
        compare_b("backward dinp * gelu'", rin, ain, NC, 1e-6, 1e-5, bin);
        compare_b("backward dw (accumulated)", rw, aw, OCC, 0, 0, bw);
        compare_b("backward dbias (accumulated)", rb, ab, OC, 0, 0, bb);
        void *dev[] = {dx, dw, db, dpre, dout, dg, dinp, dp, din, dgw, dgb};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {x,  w,   bias, rpre, rout, apre, aout, pre, inp, g,   gw0, gb0,
                        rt, rin, rw,   rb,   ain,  aw,   ab,   bin, bw,  bb};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* ---- attention ---------------------------------------------------------------------- */

static void test_attention(pair *p) {
    int shapes[][4] = {{1, 1, 8, 1},    {2, 37, 24, 3},  {1, 65, 96, 4}, {2, 70, 128, 2},
                       {1, 33, 128, 1}, {1, 130, 64, 1}, {1, 97, 60, 3}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int B = shapes[si][0], T = shapes[si][1], C = shapes[si][2], NH = shapes[si][3];
        size_t BT = (size_t)B * T, n3 = BT * 3 * C, nout = BT * C, nl = (size_t)B * NH * T;
        printf("  attention B %d T %d C %d NH %d (head size %d)\n", B, T, C, NH, C / NH);
        float *qkv = hrand(n3, 41 + si, -2, 2);
        float *out = malloc(nout * sizeof *out), *lse = malloc(nl * sizeof *lse);
        CHECK_OK(p->cpu_ops->attention_forward(p->cpu, out, lse, NULL, NULL, qkv, B, T, C, NH));
        float *dqkv_in = dup_f(p, qkv, n3), *dout = dalloc(p, nout * 4), *dlse = dalloc(p, nl * 4);
        CHECK_OK(p->cu_ops->attention_forward(p->cu, dout, dlse, NULL, NULL, dqkv_in, B, T, C, NH));
        float *a = down(p, dout, nout), *al = down(p, dlse, nl);
        compare("forward out", out, a, nout, 1e-5 * max_abs(out, nout), 1e-4);
        compare("forward lse", lse, al, nl, 1e-5 * max_abs(lse, nl), 1e-5);

        float *g = hrand(nout, 42, -1, 1);
        float *rd = malloc(n3 * sizeof *rd);
        CHECK_OK(p->cpu_ops->attention_backward(p->cpu, rd, g, qkv, out, lse, NULL, NULL, B, T, C, NH));
        float *dg = dup_f(p, g, nout), *dd = dalloc(p, n3 * 4);
        CHECK_OK(p->cu_ops->fill_f32(p->cu, dd, NAN, n3)); /* every element must be written */
        CHECK_OK(p->cu_ops->attention_backward(p->cu, dd, dg, dqkv_in, dout, dlse, NULL, NULL, B, T, C, NH));
        float *ad = down(p, dd, n3);
        compare("backward dqkv", rd, ad, n3, 1e-5 * max_abs(rd, n3), 1e-4);
        CHECK_OK(p->cu_ops->attention_backward(p->cu, dd, dg, dqkv_in, dout, dlse, NULL, NULL, B, T, C, NH));
        float *ad2 = down(p, dd, n3);
        same_bits("backward repeat", ad, ad2, n3);

        void *dev[] = {dqkv_in, dout, dlse, dg, dd};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {qkv, out, lse, a, al, g, rd, ad, ad2};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
    /* head size above the kernels' limit: a clear error, not a crash */
    float *d = dalloc(p, 4 * 136 * 4);
    CHECK_STATUS(p->cu_ops->attention_forward(p->cu, d, d, NULL, NULL, d, 1, 1, 136, 1), GPTX_ERR_UNSUPPORTED);
    dfree(p, d);
}

/* The cached attention of generation: rows fed from position 0, then 5 at
 * once, then one by one, against the CPU's full attention (the attention
 * tolerances); the prefill equals the CUDA training kernel bit for bit and
 * the cache holds every row's key and value. */
static void test_attention_kv(pair *p) {
    int shapes[][3] = {{37, 24, 3}, {70, 128, 2}, {33, 60, 3}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int T = shapes[si][0], C = shapes[si][1], NH = shapes[si][2], P = T / 3, hs = C / NH;
        size_t n3 = (size_t)T * 3 * C, nout = (size_t)T * C, nl = (size_t)NH * T;
        printf("  attention_kv T %d C %d NH %d (head size %d), %d rows prefilled\n", T, C, NH, hs, P);
        float *qkv = hrand(n3, 61 + si, -2, 2);
        float *out = malloc(nout * sizeof *out), *lse = malloc(nl * sizeof *lse);
        CHECK_OK(p->cpu_ops->attention_forward(p->cpu, out, lse, NULL, NULL, qkv, 1, T, C, NH));
        float *dq = dup_f(p, qkv, n3), *dout = dalloc(p, nout * 4), *dlse = dalloc(p, nl * 4);
        float *dpre = dalloc(p, (size_t)P * C * 4);
        float *kc = dalloc(p, nout * 4), *vc = dalloc(p, nout * 4);
        CHECK_OK(p->cu_ops->attention_forward(p->cu, dpre, dlse, NULL, NULL, dq, 1, P, C, NH));
        CHECK_OK(p->cu_ops->attention_kv_forward(p->cu, dout, dlse, dq, kc, vc, P, 0, T, C, NH));
        for (int r = P; r < T;) {
            int n = r == P ? 5 : 1;
            CHECK_OK(p->cu_ops->attention_kv_forward(p->cu, dout + (size_t)r * C, dlse,
                                                     dq + (size_t)r * 3 * C, kc, vc, n, r, T, C,
                                                     NH));
            r += n;
        }
        float *a = down(p, dout, nout), *pre = down(p, dpre, (size_t)P * C);
        float *ak = down(p, kc, nout), *av = down(p, vc, nout);
        compare("kv rows vs CPU full attention", out, a, nout, 1e-5 * max_abs(out, nout), 1e-4);
        same_bits("kv prefill vs attention_forward", pre, a, (size_t)P * C);
        size_t bad = 0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < hs; d++) {
                    size_t c = ((size_t)h * T + t) * hs + d, q = (size_t)t * 3 * C + (size_t)h * hs + d;
                    bad += ak[c] != qkv[q + C] || av[c] != qkv[q + 2 * C];
                }
        CHECK(bad == 0);
        CHECK_STATUS(p->cu_ops->attention_kv_forward(p->cu, dout, dlse, dq, kc, vc, 2, T - 1, T, C,
                                                     NH),
                     GPTX_ERR_SHAPE);
        void *dev[] = {dq, dout, dlse, dpre, kc, vc};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {qkv, out, lse, a, pre, ak, av};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* ---- elementwise --------------------------------------------------------------------- */

static void test_elementwise(pair *p) {
    size_t sizes[] = {1, 1001, 300007};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        printf("  elementwise n %zu\n", n);
        float *x = hrand(n, 51 + si, -6, 6), *y = hrand(n, 52, -1, 1);
        float *r = malloc(n * sizeof *r);
        float *dx = dup_f(p, x, n), *dy = dup_f(p, y, n), *dr = dalloc(p, n * 4);
        CHECK_OK(p->cpu_ops->gelu_forward(p->cpu, r, x, n));
        CHECK_OK(p->cu_ops->gelu_forward(p->cu, dr, dx, n));
        float *a = down(p, dr, n);
        compare("gelu forward", r, a, n, 1e-6, 1e-5);
        free(a);
        CHECK_OK(p->cpu_ops->gelu_backward(p->cpu, r, x, y, n));
        CHECK_OK(p->cu_ops->gelu_backward(p->cu, dr, dx, dy, n));
        a = down(p, dr, n);
        /* the CPU reference's tanh is a vectorized approximation (abs error ~2e-7,
         * backends/cpu/cpu_math.h); GELU's derivative scales that by up to ~15
         * at |x| = 6 */
        compare("gelu backward", r, a, n, 5e-6, 1e-5);
        free(a);
        CHECK_OK(p->cpu_ops->residual_forward(p->cpu, r, x, y, n));
        CHECK_OK(p->cu_ops->residual_forward(p->cu, dr, dx, dy, n));
        a = down(p, dr, n);
        same_bits("residual", r, a, n);
        free(a);
        dfree(p, dx);
        dfree(p, dy);
        dfree(p, dr);
        free(x);
        free(y);
        free(r);
    }
    /* The separate-Q, K, V instance (the interleave of three (C, C)
     * products, backends/common/variant_ops.c) against the one (3C, C)
     * product: the same function within the product bound. A misplaced
     * column would be off by the size of the values. */
    int N = 37, C = 24;
    size_t NC = (size_t)N * C;
    gptx_kernel_variants sep = {GPTX_ATTENTION_FLASH, 0, 1, 1, 0};
    gptx_backend_ops inst = *p->cu_ops;
    CHECK_OK(p->cu_ops->instance_ops(p->cu, &sep, &inst));
    gptx_op_buffers ob = {0, 0, 0};
    p->cu_ops->op_buffers(p->cu, &sep, 1, N, C, 1, &ob);
    CHECK(ob.qkv_work >= 4 * NC * sizeof(float));
    size_t CC3 = 3 * (size_t)C * C;
    float *x = hrand(NC, 53, -1, 1), *w = hrand(CC3, 54, -1, 1), *b = hrand(3 * (size_t)C, 55, -1, 1);
    float *dx = dup_f(p, x, NC), *dw = dup_f(p, w, CC3), *db = dup_f(p, b, 3 * (size_t)C);
    float *d1 = dalloc(p, 3 * NC * 4), *d2 = dalloc(p, 3 * NC * 4), *work = dalloc(p, ob.qkv_work);
    CHECK_OK(p->cu_ops->qkv_forward(p->cu, d1, dx, dw, db, NULL, N, C));
    CHECK_OK(inst.qkv_forward(p->cu, d2, dx, dw, db, work, N, C));
    float *one = down(p, d1, 3 * NC), *three = down(p, d2, 3 * NC);
    /* two roundings of the same sums: twice the product bound */
    double *bd = bound_fwd(x, w, b, N, C, 3 * C, 2e-5);
    compare_b("separate qkv forward", one, three, 3 * NC, 0, 0, bd);
    void *dev[] = {dx, dw, db, d1, d2, work};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
    void *host[] = {x, w, b, one, three, bd};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* ---- cross-entropy ------------------------------------------------------------------- */

static void test_crossentropy(pair *p) {
    int shapes[][4] = {{1, 5, 5, 0},
                       {7, 101, 128, 1},
                       {7, 101, 128, 0},
                       {13, 1000, 1024, 1},
                       {3, 50257, 50304, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], V = shapes[si][1], Vp = shapes[si][2], mask = shapes[si][3];
        size_t NV = (size_t)N * Vp;
        printf("  cross-entropy N %d V %d Vp %d mask %d\n", N, V, Vp, mask);
        float *logits = hrand(NV, 61 + si, -8, 8);
        int32_t *tg = malloc(N * sizeof *tg);
        for (int i = 0; i < N; i++) tg[i] = (int32_t)((i * 37 + 3) % V);
        if (N > 2) tg[1] = GPTX_IGNORE_INDEX;
        float *rl = hcopy(logits, NV), *rloss = malloc(N * 4), *rlse = malloc(3 * N * 4);
        CHECK_OK(p->cpu_ops->crossentropy_forward(p->cpu, rloss, rlse, rl, tg, N, V, Vp, mask));
        float *dl = dup_f(p, logits, NV), *dloss = dalloc(p, N * 4), *dlse = dalloc(p, 3 * N * 4);
        int32_t *dtg = dup_i(p, tg, N);
        CHECK_OK(p->cu_ops->crossentropy_forward(p->cu, dloss, dlse, dl, dtg, N, V, Vp, mask));
        float *al = down(p, dl, NV), *aloss = down(p, dloss, N), *alse = down(p, dlse, N);
        same_bits("forward logits (masked -inf)", rl, al, NV);
        /* the CPU sums up to 50257 exponentials sequentially: most of the
         * difference is its rounding */
        compare("forward losses", rloss, aloss, N, 1e-5, 3e-5);
        compare("forward lse", rlse, alse, N, 1e-5, 3e-5);
        /* without targets: only the mask and lse */
        CHECK_OK(p->cu_ops->upload_f32(p->cu, dl, logits, NV));
        CHECK_OK(p->cu_ops->crossentropy_forward(p->cu, NULL, dlse, dl, NULL, N, V, Vp, mask));
        float *alse2 = down(p, dlse, N);
        same_bits("forward lse without targets", alse, alse2, N);
        free(alse2);

        float dl_scale = 1.0f / (float)N;
        CHECK_OK(p->cpu_ops->crossentropy_backward(p->cpu, rl, rlse, tg, N, V, Vp, dl_scale));
        CHECK_OK(p->cu_ops->crossentropy_backward(p->cu, dl, dlse, dtg, N, V, Vp, dl_scale));
        float *ag = down(p, dl, NV);
        compare("backward dlogits", rl, ag, NV, 1e-7, 1e-5);
        if (N > 2) {
            int zero = 1;
            for (int j = 0; j < Vp; j++) zero &= ag[(size_t)Vp + j] == 0.0f;
            CHECK(zero); /* ignored row */
        }
        void *dev[] = {dl, dloss, dlse, dtg};
        for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
        void *host[] = {logits, tg, rl, rloss, rlse, al, aloss, alse, ag};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
}

/* ---- reductions and AdamW -------------------------------------------------------------- */

static void test_sums(pair *p) {
    size_t sizes[] = {1, 65535, 65537, 200003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *x = hrand(n, 71 + si, -3, 3);
        float *dx = dup_f(p, x, n);
        double rs = 0, rq = 0, as = 0, aq = 0, as2 = 0, absum = 0;
        for (size_t i = 0; i < n; i++) absum += fabs(x[i]) + (double)x[i] * x[i];
        CHECK_OK(p->cpu_ops->sum_to_host(p->cpu, &rs, x, n));
        CHECK_OK(p->cpu_ops->sum_squares_to_host(p->cpu, &rq, x, n));
        CHECK_OK(p->cu_ops->sum_to_host(p->cu, &as, dx, n));
        CHECK_OK(p->cu_ops->sum_squares_to_host(p->cu, &aq, dx, n));
        CHECK_OK(p->cu_ops->sum_to_host(p->cu, &as2, dx, n));
        printf("  sums n %zu: sum %.17g vs %.17g, squares %.17g vs %.17g\n", n, as, rs, aq, rq);
        CHECK(fabs(as - rs) <= 1e-12 * absum);
        CHECK(fabs(aq - rq) <= 1e-12 * absum);
        CHECK(memcmp(&as, &as2, sizeof as) == 0);
        dfree(p, dx);
        free(x);
    }
}

static void test_adamw(pair *p) {
    printf("  adamw\n");
    size_t n = 20000;
    /* unsorted ranges, one empty, one gap [9000, 9100) left alone */
    gptx_param_range ranges[] = {
        {9100, 10900, 0.0f}, {0, 5000, 0.1f}, {5000, 0, 0.1f}, {5000, 4000, 0.05f}};
    gptx_adamw_hyper h = {
        1e-3f, 0.9f, 0.95f, 1e-8f, 1.0f - 0.9f * 0.9f * 0.9f, 1.0f - 0.95f * 0.95f * 0.95f, 0.7f, 0, 3};
    float *pr = hrand(n, 81, -1, 1), *g = hrand(n, 82, -1e-2f, 1e-2f),
          *m = hrand(n, 83, -1e-3f, 1e-3f), *v = hrand(n, 84, 0, 1e-5f);
    float *rp = hcopy(pr, n), *rm = hcopy(m, n), *rv = hcopy(v, n);
    float *dp = dup_f(p, pr, n), *dg = dup_f(p, g, n), *dm = dup_f(p, m, n), *dv = dup_f(p, v, n);
    for (int rep = 0; rep < 3; rep++) {
        CHECK_OK(p->cpu_ops->adamw(p->cpu, rp, g, rm, rv, ranges, 4, &h));
        CHECK_OK(p->cu_ops->adamw(p->cu, dp, dg, dm, dv, ranges, 4, &h));
    }
    float *ap = down(p, dp, n), *am = down(p, dm, n), *av = down(p, dv, n);
    same_bits("params", rp, ap, n);
    same_bits("m", rm, am, n);
    same_bits("v", rv, av, n);
    same_bits("gap untouched", pr + 9000, ap + 9000, 100);
    void *dev[] = {dp, dg, dm, dv};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) dfree(p, dev[i]);
    void *host[] = {pr, g, m, v, rp, rm, rv, ap, am, av};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

/* A CUDA backend instance of its own, with these context options (NULL when
 * it cannot be made: a failed check). */
static gptx_backend *own_backend(pair *p, int precision, int graphs, int stochastic) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    o.precision = precision;
    o.cuda_graphs = graphs;
    o.stochastic_rounding = stochastic;
    gptx_backend *be = NULL;
    CHECK_OK(p->cu_ops->create(&be, &o));
    return be;
}

/* One AdamW step on both backends; on the CUDA side inside graph segment 2
 * of `be` when graph is set (graph_begin replays, captures or runs it). */
static void adamw_both(pair *p, gptx_backend *be, int graph, float *rp, const float *g, float *rm,
                       float *rv, float *dp, const float *dg, float *dm, float *dv,
                       const gptx_param_range *ranges, int nranges, const gptx_adamw_hyper *h) {
    CHECK_OK(p->cpu_ops->adamw(p->cpu, rp, g, rm, rv, ranges, nranges, h));
    int replayed = 0;
    uint64_t key[1] = {42};
    if (graph) CHECK_OK(p->cu_ops->graph_begin(be, 2, key, 1, &replayed));
    if (replayed) return;
    int rc = p->cu_ops->adamw(be, dp, dg, dm, dv, ranges, nranges, h);
    int rerun = 0;
    if (graph) rc = p->cu_ops->graph_end(be, 2, rc, &rerun);
    CHECK_OK(rc);
    CHECK(rerun == 0); /* the capture failed (a host wait?) and nothing ran */
}

/* AdamW's range table stays on the device: with CUDA graphs on, the fourth
 * of 4 steps over the same ranges is captured as a graph (a host wait in the
 * step would fail the capture, on the emulation as on a device) and the
 * fifth replays it; then other ranges (the table is uploaded again), and a
 * single range (passed by value), against the CPU each time. */
static void test_adamw_table(pair *p) {
    printf("  adamw: table kept on the device, captured in a graph\n");
    gptx_backend *be = own_backend(p, GPTX_PRECISION_FP32, 1, 0);
    if (!be) return;
    size_t n = 20000;
    gptx_param_range ranges[] = {{0, 7000, 0.1f}, {7000, 13000, 0.0f}};
    gptx_param_range other[] = {{0, 7000, 0.0f}, {7000, 6000, 0.1f}, {13000, 7000, 0.05f}};
    gptx_param_range single[] = {{3000, 15000, 0.1f}};
    gptx_adamw_hyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.271f, 0.142625f, 1.0f, 0, 1};
    float *pr = hrand(n, 91, -1, 1), *g = hrand(n, 92, -1e-2f, 1e-2f), *z = calloc(n, 4);
    float *rp = hcopy(pr, n), *rm = hcopy(z, n), *rv = hcopy(z, n);
    float *dp = NULL, *dg = NULL, *dm = NULL, *dv = NULL;
    float **bufs[] = {&dp, &dg, &dm, &dv};
    for (size_t i = 0; i < 4; i++) CHECK_OK(p->cu_ops->alloc(be, n * 4, (void **)bufs[i]));
    if (!dp || !dg || !dm || !dv) exit(1);
    CHECK_OK(p->cu_ops->upload_f32(be, dp, pr, n));
    CHECK_OK(p->cu_ops->upload_f32(be, dg, g, n));
    CHECK_OK(p->cu_ops->fill_f32(be, dm, 0.0f, n));
    CHECK_OK(p->cu_ops->fill_f32(be, dv, 0.0f, n));
    for (int step = 0; step < 5; step++) /* plain, plain, first sight, capture, replay */
        adamw_both(p, be, step >= 2, rp, g, rm, rv, dp, dg, dm, dv, ranges, 2, &h);
    int64_t captures = 0, replays = 0;
    p->cu_ops->graph_counts(be, &captures, &replays);
    printf("    graph: %lld captured, %lld replayed\n", (long long)captures, (long long)replays);
    CHECK(captures == 1 && replays == 1);
    adamw_both(p, be, 0, rp, g, rm, rv, dp, dg, dm, dv, other, 3, &h);
    adamw_both(p, be, 0, rp, g, rm, rv, dp, dg, dm, dv, single, 1, &h);
    adamw_both(p, be, 0, rp, g, rm, rv, dp, dg, dm, dv, ranges, 2, &h);
    float *ap = malloc(n * 4), *am = malloc(n * 4), *av = malloc(n * 4);
    CHECK_OK(p->cu_ops->download_f32(be, ap, dp, n));
    CHECK_OK(p->cu_ops->download_f32(be, am, dm, n));
    CHECK_OK(p->cu_ops->download_f32(be, av, dv, n));
    same_bits("params", rp, ap, n);
    same_bits("m", rm, am, n);
    same_bits("v", rv, av, n);
    void *dev[] = {dp, dg, dm, dv};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) p->cu_ops->free(be, dev[i]);
    void *host[] = {pr, g, z, rp, rm, rv, ap, am, av};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    p->cu_ops->destroy(be);
}

/* Pure-bf16 AdamW (bf16 parameters and moments, in groups of 8 where a
 * range's start allows) against the CPU's fp32 update of the widened values,
 * each result rounded on the host: to nearest even, or stochastically with
 * the Philox words (seed, step, element) 0, 1, 2. Bit for bit: the update's
 * roundings are spelled out on the device and the CPU is built without
 * contraction. Ranges start aligned (0, 4096) and not (1001, 9003). */
static void test_adamw_pure(pair *p) {
    for (int stochastic = 0; stochastic < 2; stochastic++) {
        printf("  adamw, pure bf16, %s rounding\n", stochastic ? "stochastic" : "nearest");
        gptx_backend *be = own_backend(p, GPTX_PRECISION_BF16_PURE, 0, stochastic);
        if (!be) return;
        size_t n = 20003;
        gptx_param_range ranges[] = {{0, 1001, 0.1f}, {1001, 3095, 0.0f}, {4096, 4907, 0.1f},
                                     {9003, 11000, 0.05f}};
        gptx_adamw_hyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.05f, 0.8f, 1234, 3};
        float *pr = hrand(n, 321, -1, 1), *g = hrand(n, 322, -5e-2f, 5e-2f),
              *m = hrand(n, 323, -1e-2f, 1e-2f), *v = hrand(n, 324, 0, 1e-3f);
        float *host[] = {pr, m, v}, *dev[3], *dg = NULL;
        CHECK_OK(p->cu_ops->alloc(be, n * 4, (void **)&dg));
        CHECK_OK(p->cu_ops->upload_f32(be, dg, g, n));
        for (int k = 0; k < 3; k++) { /* stored bf16; read back widened, exactly */
            CHECK_OK(p->cu_ops->alloc(be, n * 2, (void **)&dev[k]));
            CHECK_OK(p->cu_ops->upload_param(be, dev[k], host[k], n));
            CHECK_OK(p->cu_ops->download_param(be, host[k], dev[k], n));
        }
        CHECK_OK(p->cu_ops->adamw(be, dev[0], dg, dev[1], dev[2], ranges, 4, &h));
        CHECK_OK(p->cpu_ops->adamw(p->cpu, pr, g, m, v, ranges, 4, &h));
        float *got = malloc(n * 4);
        const char *names[] = {"params", "m", "v"};
        for (int k = 0; k < 3; k++) {
            for (size_t i = 0; i < n; i++) {
                uint16_t b = gptx_bf16_round_nearest(host[k][i]);
                if (stochastic)
                    b = gptx_bf16_round_stochastic(
                        host[k][i], gptx_philox_block(h.rounding_seed, (uint64_t)h.step, i).v[k]);
                host[k][i] = gptx_bf16_widen(b);
            }
            CHECK_OK(p->cu_ops->download_param(be, got, dev[k], n));
            same_bits(names[k], host[k], got, n);
            p->cu_ops->free(be, dev[k]);
        }
        p->cu_ops->free(be, dg);
        free(got);
        free(pr);
        free(g);
        free(m);
        free(v);
        p->cu_ops->destroy(be);
    }
}

/* One AdamW step of each flavour on a bf16 backend: `fused` (params, m, v,
 * copy) by adamw_copy, inside graph segment 2 when graph is set, and `plain`
 * by adamw then convert_weights over all n. */
typedef struct {
    float *p, *m, *v, *copy;
} adamw_set;

static void adamw_copy_step(pair *p, gptx_backend *be, int graph, adamw_set *fused,
                            adamw_set *plain, const float *dg, size_t n,
                            const gptx_param_range *ranges, int nranges,
                            const gptx_adamw_hyper *h) {
    int replayed = 0;
    uint64_t key[1] = {43};
    if (graph) CHECK_OK(p->cu_ops->graph_begin(be, 2, key, 1, &replayed));
    if (!replayed) {
        int rc = p->cu_ops->adamw_copy(be, fused->p, fused->copy, dg, fused->m, fused->v, ranges,
                                       nranges, h);
        int rerun = 0;
        if (graph) rc = p->cu_ops->graph_end(be, 2, rc, &rerun);
        CHECK_OK(rc);
        CHECK(rerun == 0); /* the capture failed and nothing ran */
    }
    CHECK_OK(p->cu_ops->adamw(be, plain->p, dg, plain->m, plain->v, ranges, nranges, h));
    CHECK_OK(p->cu_ops->convert_weights(be, plain->copy, plain->p, n));
}

/* LayerNorm backward that also writes the updated residual gradient rounded
 * to bf16 (layernorm_backward_act, bf16 mixed: fp32 residual, bf16
 * activations) against layernorm_backward then act_from_res, bit for bit:
 * dinp and its bf16 copy; at C 96 (groups) and 33 (element by element), and
 * with the copy one element off alignment (element by element again). */
static void test_layernorm_act(pair *p) {
    gptx_backend *be = own_backend(p, GPTX_PRECISION_BF16, 0, 0);
    if (!be) return;
    int shapes[][3] = {{37, 96, 0}, {21, 33, 0}, {19, 96, 1}}; /* N, C, copy offset */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], C = shapes[si][1], off = shapes[si][2];
        size_t n = (size_t)N * C;
        float *hd = hrand(n, 400 + si, -1, 1), *hx = hrand(n, 410 + si, -2, 2);
        float *hdi = hrand(n, 420 + si, -1, 1), *hw = hrand(C, 430 + si, 0.5f, 1.5f);
        float *hm = hrand(N, 440 + si, -0.2f, 0.2f), *hr = hrand(N, 450 + si, 0.5f, 2.0f);
        float *res = NULL, *dout = NULL, *x = NULL, *w = NULL, *mean = NULL, *rstd = NULL;
        float *d1 = NULL, *d2 = NULL, *a1 = NULL, *a2 = NULL, *g[4] = {NULL, NULL, NULL, NULL};
        float **all[] = {&res, &dout, &x, &w, &mean, &rstd, &d1, &d2, &a1, &a2,
                         &g[0], &g[1], &g[2], &g[3]};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            CHECK_OK(p->cu_ops->alloc(be, (n + 8) * 4, (void **)all[i]));
        CHECK_OK(p->cu_ops->upload_f32(be, res, hd, n));
        CHECK_OK(p->cu_ops->act_from_res(be, dout, res, n)); /* dout: bf16 */
        CHECK_OK(p->cu_ops->upload_f32(be, x, hx, n));
        CHECK_OK(p->cu_ops->upload_f32(be, w, hw, C));
        CHECK_OK(p->cu_ops->upload_f32(be, mean, hm, N));
        CHECK_OK(p->cu_ops->upload_f32(be, rstd, hr, N));
        CHECK_OK(p->cu_ops->upload_f32(be, d1, hdi, n));
        CHECK_OK(p->cu_ops->upload_f32(be, d2, hdi, n));
        for (int k = 0; k < 4; k++) CHECK_OK(p->cu_ops->fill_f32(be, g[k], 0.0f, C));
        float *act1 = (float *)((char *)a1 + 2 * off); /* [act]: bf16 elements */
        CHECK_OK(p->cu_ops->fill_act(be, act1, NAN, n));
        CHECK_OK(p->cu_ops->layernorm_backward_act(be, d1, act1, g[0], g[1], dout, x, w, mean,
                                                   rstd, N, C));
        CHECK_OK(p->cu_ops->layernorm_backward(be, d2, g[2], g[3], dout, x, w, mean, rstd, N, C));
        CHECK_OK(p->cu_ops->act_from_res(be, a2, d2, n));
        float *r1 = down(p, d1, n), *r2 = down(p, d2, n);
        float *b1 = malloc(n * 4), *b2 = malloc(n * 4);
        CHECK_OK(p->cu_ops->download_act(be, b1, act1, n));
        CHECK_OK(p->cu_ops->download_act(be, b2, a2, n));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += memcmp(&r1[i], &r2[i], 4) != 0 || memcmp(&b1[i], &b2[i], 4) != 0;
        printf("  layernorm backward with the bf16 residual gradient, N %d C %d%s: %zu of %zu "
               "differ from layernorm_backward then act_from_res\n",
               N, C, off ? " (copy unaligned)" : "", bad, n);
        CHECK(bad == 0);
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) p->cu_ops->free(be, *all[i]);
        void *host[] = {hd, hx, hdi, hw, hm, hr, r1, r2, b1, b2};
        for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
    }
    p->cu_ops->destroy(be);
}

/* The bf16 weight copy refreshed inside AdamW (adamw_copy) against AdamW
 * followed by convert_weights, bit for bit: parameters, moments and the
 * copy, over ranges that cover every element (as the optimizer's do) with
 * unaligned starts (element by element) and aligned ones (groups). Steps 3
 * to 5 run in a CUDA graph (the fourth captures, the fifth replays); then
 * other ranges and a single one. The fused copy starts as NaN, so an
 * element it failed to write shows. */
static void test_adamw_copy(pair *p) {
    printf("  adamw with the bf16 weight copy refreshed in the same pass\n");
    gptx_backend *be = own_backend(p, GPTX_PRECISION_BF16, 1, 0);
    if (!be) return;
    size_t n = 20000;
    gptx_param_range ranges[] = {{0, 7001, 0.1f}, {7001, 5999, 0.0f}, {13000, 7000, 0.05f}};
    gptx_param_range other[] = {{0, 4096, 0.0f}, {4096, 15903, 0.1f}, {19999, 1, 0.1f}};
    gptx_param_range single[] = {{0, 20000, 0.1f}};
    gptx_adamw_hyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.271f, 0.142625f, 0.8f, 0, 1};
    float *pr = hrand(n, 311, -1, 1), *g = hrand(n, 312, -1e-2f, 1e-2f);
    adamw_set set[2];
    float *dg = NULL;
    CHECK_OK(p->cu_ops->alloc(be, n * 4, (void **)&dg));
    CHECK_OK(p->cu_ops->upload_f32(be, dg, g, n));
    for (int s = 0; s < 2; s++) {
        float **f[] = {&set[s].p, &set[s].m, &set[s].v, &set[s].copy};
        for (size_t i = 0; i < 4; i++) CHECK_OK(p->cu_ops->alloc(be, n * 4, (void **)f[i]));
        CHECK_OK(p->cu_ops->upload_f32(be, set[s].p, pr, n));
        CHECK_OK(p->cu_ops->fill_f32(be, set[s].m, 0.0f, n));
        CHECK_OK(p->cu_ops->fill_f32(be, set[s].v, 0.0f, n));
        CHECK_OK(p->cu_ops->fill_act(be, set[s].copy, NAN, n));
    }
    for (int step = 0; step < 5; step++) /* plain, plain, first sight, capture, replay */
        adamw_copy_step(p, be, step >= 2, &set[0], &set[1], dg, n, ranges, 3, &h);
    int64_t captures = 0, replays = 0;
    p->cu_ops->graph_counts(be, &captures, &replays);
    printf("    graph: %lld captured, %lld replayed\n", (long long)captures, (long long)replays);
    CHECK(captures == 1 && replays == 1);
    adamw_copy_step(p, be, 0, &set[0], &set[1], dg, n, other, 3, &h);
    adamw_copy_step(p, be, 0, &set[0], &set[1], dg, n, single, 1, &h);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    const char *names[] = {"params", "m", "v"};
    for (int k = 0; k < 3; k++) {
        float *fa = k == 0 ? set[0].p : k == 1 ? set[0].m : set[0].v;
        float *fb = k == 0 ? set[1].p : k == 1 ? set[1].m : set[1].v;
        CHECK_OK(p->cu_ops->download_f32(be, a, fa, n));
        CHECK_OK(p->cu_ops->download_f32(be, b, fb, n));
        same_bits(names[k], b, a, n);
    }
    CHECK_OK(p->cu_ops->download_act(be, a, set[0].copy, n));
    CHECK_OK(p->cu_ops->download_act(be, b, set[1].copy, n));
    same_bits("copy vs convert_weights", b, a, n);
    /* a policy without a copy refuses */
    CHECK_STATUS(p->cu_ops->adamw_copy(p->cu, set[0].p, set[0].copy, dg, set[0].m, set[0].v,
                                       single, 1, &h),
                 GPTX_ERR_STATE);
    for (int s = 0; s < 2; s++) {
        void *dev[] = {set[s].p, set[s].m, set[s].v, set[s].copy};
        for (size_t i = 0; i < 4; i++) p->cu_ops->free(be, dev[i]);
    }
    p->cu_ops->free(be, dg);
    free(a);
    free(b);
    free(pr);
    free(g);
    p->cu_ops->destroy(be);
}

/* ---- vector and scalar paths ------------------------------------------------------------ */

#ifdef GPTX_TEST_CUDA_EMU
unsigned long long gptx_cuda_emu_vector_accesses(void); /* tests/gpu/emu/cuda_emu_backend.cpp */
#endif

/* 16-byte accesses the emulated kernels made so far (not observable on a device: 0). */
static unsigned long long vector_accesses(void) {
#ifdef GPTX_TEST_CUDA_EMU
    return gptx_cuda_emu_vector_accesses();
#else
    return 0;
#endif
}

/* The device buffers of one case, each `off` elements past the start of its
 * block: off 0 is 16-byte aligned (the allocator's blocks are), off 1 only
 * 4-byte aligned, which must send every kernel down its scalar path. */
typedef struct {
    pair *p;
    int off;
    void *blocks[24];
    int n;
} views;

static float *view_of(views *v, const float *h, size_t n) {
    CHECK(v->n < 24);
    float *base = dalloc(v->p, (n + 1) * sizeof(float));
    v->blocks[v->n++] = base;
    float *d = base + v->off;
    if (h) CHECK_OK(v->p->cu_ops->upload_f32(v->p->cu, d, h, n));
    return d;
}

static void views_free(views *v) {
    for (int i = 0; i < v->n; i++) dfree(v->p, v->blocks[i]);
}

/* A case's outputs, downloaded one after another. */
typedef struct {
    float *x;
    size_t n;
} results;

static void keep(views *v, results *r, const float *d, size_t n) {
    float *h = down(v->p, d, n);
    r->x = realloc(r->x, (r->n + n) * sizeof *r->x);
    memcpy(r->x + r->n, h, n * sizeof *h);
    r->n += n;
    free(h);
}

/* LayerNorm forward and backward (with its column sums), C a whole number of groups */
static void case_layernorm(views *v, results *r) {
    int N = 9, C = 64;
    size_t NC = (size_t)N * C;
    float *x = hrand(NC, 201, -2, 3), *w = hrand(C, 202, 0.5f, 1.5f), *b = hrand(C, 203, -1, 1);
    float *g = hrand(NC, 204, -1, 1), *gin = hrand(NC, 205, -1, 1), *gw = hrand(C, 206, -1, 1);
    float *dx = view_of(v, x, NC), *dw = view_of(v, w, C), *db = view_of(v, b, C);
    float *dout = view_of(v, NULL, NC), *dm = view_of(v, NULL, N), *dr = view_of(v, NULL, N);
    CHECK_OK(v->p->cu_ops->layernorm_forward(v->p->cu, dout, dm, dr, dx, dw, db, N, C, 1e-5f));
    keep(v, r, dout, NC);
    keep(v, r, dm, N);
    keep(v, r, dr, N);
    float *dg = view_of(v, g, NC), *din = view_of(v, gin, NC), *dgw = view_of(v, gw, C),
          *dgb = view_of(v, gw, C);
    CHECK_OK(v->p->cu_ops->layernorm_backward(v->p->cu, din, dgw, dgb, dg, dx, dw, dm, dr, N, C));
    keep(v, r, din, NC);
    keep(v, r, dgw, C);
    keep(v, r, dgb, C);
    void *host[] = {x, w, b, g, gin, gw};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
}

static void case_residual_layernorm(views *v, results *r) {
    int N = 5, C = 40;
    size_t NC = (size_t)N * C;
    float *xa = hrand(NC, 211, -2, 3), *xb = hrand(NC, 212, -1, 1);
    float *w = hrand(C, 213, 0.5f, 1.5f), *b = hrand(C, 214, -1, 1);
    float *da = view_of(v, xa, NC), *dbb = view_of(v, xb, NC), *dw = view_of(v, w, C),
          *db = view_of(v, b, C), *dres = view_of(v, NULL, NC), *dout = view_of(v, NULL, NC),
          *dm = view_of(v, NULL, N), *dr = view_of(v, NULL, N);
    CHECK_OK(v->p->cu_ops->residual_layernorm_forward(v->p->cu, dres, dout, dm, dr, da, dbb, dw, db,
                                                      N, C, 1e-5f));
    keep(v, r, dres, NC);
    keep(v, r, dout, NC);
    keep(v, r, dm, N);
    keep(v, r, dr, N);
    free(xa);
    free(xb);
    free(w);
    free(b);
}

/* GELU both ways and the residual over 1001 elements (the last group is short) */
static void case_elementwise(views *v, results *r) {
    size_t n = 1001;
    float *x = hrand(n, 221, -6, 6), *y = hrand(n, 222, -1, 1);
    float *dx = view_of(v, x, n), *dy = view_of(v, y, n), *dr = view_of(v, NULL, n);
    CHECK_OK(v->p->cu_ops->gelu_forward(v->p->cu, dr, dx, n));
    keep(v, r, dr, n);
    CHECK_OK(v->p->cu_ops->gelu_backward(v->p->cu, dr, dx, dy, n));
    keep(v, r, dr, n);
    CHECK_OK(v->p->cu_ops->residual_forward(v->p->cu, dr, dx, dy, n));
    keep(v, r, dr, n);
    free(x);
    free(y);
}

/* cross-entropy forward then backward, and the fused kernel, padded columns masked */
static void case_crossentropy(views *v, results *r) {
    int N = 3, V = 101, Vp = 128;
    size_t NV = (size_t)N * Vp;
    float *logits = hrand(NV, 231, -8, 8);
    int32_t tg[3] = {5, 100, 0};
    int32_t *dtg = dup_i(v->p, tg, 3);
    float *dl = view_of(v, logits, NV), *dloss = view_of(v, NULL, N), *dlse = view_of(v, NULL, 3 * N);
    CHECK_OK(v->p->cu_ops->crossentropy_forward(v->p->cu, dloss, dlse, dl, dtg, N, V, Vp, 1));
    keep(v, r, dl, NV);
    keep(v, r, dloss, N);
    keep(v, r, dlse, N);
    CHECK_OK(v->p->cu_ops->crossentropy_backward(v->p->cu, dl, dlse, dtg, N, V, Vp, 0.25f));
    keep(v, r, dl, NV);
    CHECK_OK(v->p->cu_ops->upload_f32(v->p->cu, dl, logits, NV));
    CHECK_OK(v->p->cu_ops->crossentropy_fused(v->p->cu, dloss, dlse, dl, dtg, N, V, Vp, 1, 0.25f));
    keep(v, r, dl, NV);
    keep(v, r, dloss, N);
    dfree(v->p, dtg);
    free(logits);
}

/* AdamW over ranges whose starts are multiples of 4 except one (1001) */
static void case_adamw(views *v, results *r) {
    size_t n = 5001;
    gptx_param_range ranges[] = {{0, 1000, 0.1f}, {1000, 1, 0.0f}, {1001, 3000, 0.0f},
                                 {4001, 1000, 0.05f}};
    gptx_adamw_hyper h = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.271f, 0.142625f, 0.7f, 0, 1};
    float *pr = hrand(n, 241, -1, 1), *g = hrand(n, 242, -1e-2f, 1e-2f),
          *m = hrand(n, 243, -1e-3f, 1e-3f), *vv = hrand(n, 244, 0, 1e-5f);
    float *dp = view_of(v, pr, n), *dg = view_of(v, g, n), *dm = view_of(v, m, n),
          *dv = view_of(v, vv, n);
    CHECK_OK(v->p->cu_ops->adamw(v->p->cu, dp, dg, dm, dv, ranges, 4, &h));
    keep(v, r, dp, n);
    keep(v, r, dm, n);
    keep(v, r, dv, n);
    free(pr);
    free(g);
    free(m);
    free(vv);
}

/* embedding backward with a token of 100 positions (split into chunks) */
static void case_embedding(views *v, results *r) {
    int B = 2, T = 100, C = 32, V = 11;
    size_t BT = (size_t)B * T, BTC = BT * C;
    int32_t ids[200];
    for (size_t i = 0; i < BT; i++) ids[i] = i % 2 ? (int32_t)((i * 7) % (size_t)V) : 0;
    int32_t *dids = dup_i(v->p, ids, BT);
    float *g = hrand(BTC, 251, -1, 1), *gte = hrand((size_t)V * C, 252, -1, 1),
          *gpe = hrand((size_t)T * C, 253, -1, 1);
    float *dg = view_of(v, g, BTC), *dte = view_of(v, gte, (size_t)V * C),
          *dpe = view_of(v, gpe, (size_t)T * C);
    CHECK_OK(v->p->cu_ops->embedding_backward(v->p->cu, dte, dpe, dg, dids, B, T, C));
    keep(v, r, dte, (size_t)V * C);
    keep(v, r, dpe, (size_t)T * C);
    dfree(v->p, dids);
    free(g);
    free(gte);
    free(gpe);
}

/* Each kernel family on 16-byte aligned buffers and on the same data one
 * element further (only 4-byte aligned): the host must pick the scalar path
 * for the second (a vector access there faults on a device and aborts the
 * emulation), and both paths must give the same bits. On the emulation the
 * aligned run must also have made vector accesses and the other none. */
static void test_vector_paths(pair *p) {
    printf("  vector and scalar paths (buffers 16-byte aligned, then offset by one element)\n");
    /* offset: the vector accesses the offset run still makes, on the
     * backend's own buffers: the column sums' second pass reads its scratch
     * (aligned whatever the inputs) in 16-byte loads, here 2 sums x 16 groups
     * of 4 columns x 1 partial row (N 9 is one chunk) */
    struct {
        const char *name;
        void (*fn)(views *, results *);
        unsigned long long offset;
    } cases[] = {{"layernorm + column sums", case_layernorm, 32},
                 {"residual + layernorm", case_residual_layernorm, 0},
                 {"gelu, residual", case_elementwise, 0},
                 {"cross-entropy", case_crossentropy, 0},
                 {"adamw", case_adamw, 0},
                 {"embedding backward", case_embedding, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        results r[2] = {{NULL, 0}, {NULL, 0}};
        unsigned long long count[2];
        for (int off = 0; off < 2; off++) {
            views v = {p, off, {NULL}, 0};
            unsigned long long before = vector_accesses();
            cases[c].fn(&v, &r[off]);
            count[off] = vector_accesses() - before;
            views_free(&v);
        }
        printf("    %-28s vector accesses: %llu aligned, %llu offset\n", cases[c].name, count[0],
               count[1]);
        CHECK(r[0].n == r[1].n && r[0].n > 0);
        same_bits(cases[c].name, r[0].x, r[1].x, r[0].n);
#ifdef GPTX_TEST_CUDA_EMU
        CHECK(count[0] > cases[c].offset && count[1] == cases[c].offset);
#endif
        free(r[0].x);
        free(r[1].x);
    }
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL; /* optional: one group by name */
    pair p;
    memset(&p, 0, sizeof p);
    p.cpu_ops = gptx_cpu_backend_ops();
    p.cu_ops = cuda_test_ops();
    gptx_context_options co;
    gptx_context_options_init(&co);
    co.num_threads = 2;
    if (p.cpu_ops->create(&p.cpu, &co) != GPTX_OK) {
        fprintf(stderr, "CPU backend: %s\n", gptx_last_error());
        return 1;
    }
    /* bf16 stores activations as bf16: covered at the model level (test_cuda_model,
     * test_reference_cuda, test_cuda_train), not by these fp32-buffer tests;
     * the bf16 AdamW kernels have their own backends here (test_adamw_copy,
     * test_adamw_pure) */
    const char *precisions[] = {"fp32", "tf32"};
    printf("test_cuda_kernels on %s\n", CUDA_TEST_KIND);
    for (int pi = 0; pi < 2; pi++) {
        p.precision = precisions[pi];
        int rc = cuda_test_backend(&p.cu, p.precision);
        if (rc == GPTX_ERR_UNSUPPORTED) {
            p.cpu_ops->destroy(p.cpu);
            return cuda_test_skip("test_cuda_kernels");
        }
        if (rc != GPTX_OK) {
            fprintf(stderr, "CUDA backend (%s): %s\n", p.precision, gptx_last_error());
            return 1;
        }
        printf("precision %s\n", p.precision);
        /* everything but the products is fp32 whatever the precision: run it once */
        if (pi == 0) {
            if (!only || !strcmp(only, "copies")) test_copies(&p);
            if (!only || !strcmp(only, "embedding")) test_embedding(&p);
            if (!only || !strcmp(only, "embedding")) test_embedding_text(&p);
            if (!only || !strcmp(only, "layernorm")) test_layernorm(&p);
            if (!only || !strcmp(only, "layernorm")) test_residual_layernorm(&p);
            if (!only || !strcmp(only, "layernorm")) test_layernorm_act(&p);
            if (!only || !strcmp(only, "layernorm")) test_column_sums(&p);
            if (!only || !strcmp(only, "attention")) test_attention(&p);
            if (!only || !strcmp(only, "attention")) test_attention_kv(&p);
            if (!only || !strcmp(only, "elementwise")) test_elementwise(&p);
            if (!only || !strcmp(only, "crossentropy")) test_crossentropy(&p);
            if (!only || !strcmp(only, "sums")) test_sums(&p);
            if (!only || !strcmp(only, "adamw")) test_adamw(&p);
            if (!only || !strcmp(only, "adamw")) test_adamw_table(&p);
            if (!only || !strcmp(only, "adamw")) test_adamw_copy(&p);
            if (!only || !strcmp(only, "adamw")) test_adamw_pure(&p);
            if (!only || !strcmp(only, "vector")) test_vector_paths(&p);
        }
        if (!only || !strcmp(only, "matmul")) test_matmul(&p);
        if (!only || !strcmp(only, "matmul")) test_matmul_gelu(&p);
        gptx_memory_stats st;
        gptx_memory_stats_init(&st);
        p.cu_ops->memory_stats(p.cu, &st);
        CHECK(st.allocated == 0); /* every test buffer was freed */
        p.cu_ops->destroy(p.cu);
        p.cu = NULL;
    }
    p.cpu_ops->destroy(p.cpu);
    cuda_test_precision(NULL);
    return check_exit("test_cuda_kernels");
}
