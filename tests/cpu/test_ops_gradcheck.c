/* Each backend op on its own: the analytic backward against central finite
 * differences of the forward op. The objective is L = sum(out * R) for a
 * random R, evaluated in double; derivatives are checked along random
 * directions and for individual elements. Uses the private backend table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"

static const gptx_backend_ops *ops;
static gptx_backend *be;

static uint32_t rng_state = 12345u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)((rng_state >> 8) * (1.0 / 8388608.0) - 1.0);
}
static float *rand_buf(size_t n, float scale) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}
static float *zeros(size_t n) { return calloc(n, sizeof(float)); }
static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* Evaluates L(x) = forward objective; x is modified in place during the check. */
typedef double (*objective_fn)(void *ctx);

/* Compares analytic gradient g of L w.r.t. x (n elements) against finite
 * differences: 3 random directions plus up to 8 single elements. */
static void gradcheck(const char *what, objective_fn L, void *ctx, float *x, const float *g,
                      size_t n, float eps, double tol) {
    float *x0 = malloc(n * sizeof *x0);
    memcpy(x0, x, n * sizeof *x0);
    double worst = 0;
    for (int trial = 0; trial < 3 + 8; trial++) {
        float *dir = zeros(n);
        if (trial < 3) {
            for (size_t i = 0; i < n; i++) dir[i] = frand();
        } else {
            dir[(size_t)(trial - 3) * 7919u % n] = 1.0f;
        }
        for (size_t i = 0; i < n; i++) x[i] = x0[i] + eps * dir[i];
        double lp = L(ctx);
        for (size_t i = 0; i < n; i++) x[i] = x0[i] - eps * dir[i];
        double lm = L(ctx);
        memcpy(x, x0, n * sizeof *x);
        double num = (lp - lm) / (2.0 * eps), ana = dot(g, dir, n);
        double err = fabs(num - ana) / fmax(1.0, fabs(ana));
        if (err > worst) worst = err;
        free(dir);
    }
    printf("  %-28s worst relative error %.2e (tolerance %.0e)\n", what, worst, tol);
    if (!(worst <= tol)) {
        fprintf(stderr, "gradcheck %s failed: %.3e > %.0e\n", what, worst, tol);
        check_failures++;
    }
    free(x0);
}

/* ---- layernorm ---- */
typedef struct { int N, C; float *inp, *w, *b, *out, *mean, *rstd, *R; } ln_case;
static double ln_obj(void *vp) {
    ln_case *c = vp;
    ops->layernorm_forward(be, c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 1e-5f);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void check_layernorm(void) {
    ln_case c = {.N = 5, .C = 24};
    size_t NC = (size_t)c.N * c.C;
    c.inp = rand_buf(NC, 2.0f);
    c.w = rand_buf((size_t)c.C, 1.0f);
    c.b = rand_buf((size_t)c.C, 1.0f);
    c.out = zeros(NC); c.mean = zeros((size_t)c.N); c.rstd = zeros((size_t)c.N);
    c.R = rand_buf(NC, 1.0f);
    float *dinp = zeros(NC), *dw = zeros((size_t)c.C), *db = zeros((size_t)c.C);
    ln_obj(&c);
    ops->layernorm_backward(be, dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    gradcheck("layernorm d/dinp", ln_obj, &c, c.inp, dinp, NC, 1e-2f, 2e-3);
    gradcheck("layernorm d/dweight", ln_obj, &c, c.w, dw, (size_t)c.C, 1e-2f, 2e-3);
    gradcheck("layernorm d/dbias", ln_obj, &c, c.b, db, (size_t)c.C, 1e-2f, 2e-3);
    free(c.inp); free(c.w); free(c.b); free(c.out); free(c.mean); free(c.rstd); free(c.R);
    free(dinp); free(dw); free(db);
}

/* ---- matmul ---- */
typedef struct { int N, C, OC; float *inp, *w, *bias, *out, *R; } mm_case;
static double mm_obj(void *vp) {
    mm_case *c = vp;
    ops->matmul_forward(be, c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}
static void check_matmul(void) {
    mm_case c = {.N = 7, .C = 13, .OC = 11};
    c.inp = rand_buf((size_t)c.N * c.C, 1.0f);
    c.w = rand_buf((size_t)c.OC * c.C, 1.0f);
    c.bias = rand_buf((size_t)c.OC, 1.0f);
    c.out = zeros((size_t)c.N * c.OC);
    c.R = rand_buf((size_t)c.N * c.OC, 1.0f);
    float *dinp = zeros((size_t)c.N * c.C), *dw = zeros((size_t)c.OC * c.C), *db = zeros((size_t)c.OC);
    ops->matmul_backward(be, dinp, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
    gradcheck("matmul d/dinp", mm_obj, &c, c.inp, dinp, (size_t)c.N * c.C, 1e-2f, 1e-3);
    gradcheck("matmul d/dweight", mm_obj, &c, c.w, dw, (size_t)c.OC * c.C, 1e-2f, 1e-3);
    gradcheck("matmul d/dbias", mm_obj, &c, c.bias, db, (size_t)c.OC, 1e-2f, 1e-3);
    /* accumulation: a second backward adds the same weight gradient again */
    float *dw2 = malloc((size_t)c.OC * c.C * sizeof *dw2);
    memcpy(dw2, dw, (size_t)c.OC * c.C * sizeof *dw2);
    ops->matmul_backward(be, dinp, dw2, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
    double worst = 0;
    for (size_t i = 0; i < (size_t)c.OC * c.C; i++) worst = fmax(worst, fabs(dw2[i] - 2 * dw[i]));
    CHECK(worst < 1e-5);
    free(dw2);
    free(c.inp); free(c.w); free(c.bias); free(c.out); free(c.R); free(dinp); free(dw); free(db);
}

/* ---- attention ---- */
typedef struct { int B, T, C, NH; float *qkv, *out, *lse, *R; } at_case;
static double at_obj(void *vp) {
    at_case *c = vp;
    ops->attention_forward(be, c->out, c->lse, NULL, NULL, c->qkv, c->B, c->T, c->C, c->NH);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void check_attention(void) {
    at_case c = {.B = 2, .T = 7, .C = 12, .NH = 3};
    size_t n = (size_t)c.B * c.T * c.C;
    c.qkv = rand_buf(3 * n, 1.5f);
    c.out = zeros(n); c.lse = zeros((size_t)c.B * c.NH * c.T);
    c.R = rand_buf(n, 1.0f);
    float *dqkv = zeros(3 * n);
    at_obj(&c);
    ops->attention_backward(be, dqkv, c.R, c.qkv, c.out, c.lse, NULL, NULL, c.B, c.T, c.C, c.NH);
    gradcheck("attention d/dqkv", at_obj, &c, c.qkv, dqkv, 3 * n, 1e-2f, 2e-3);
    /* causality: output row t must not change when a later token's k or v changes */
    float *before = malloc(n * sizeof *before);
    memcpy(before, c.out, n * sizeof *before);
    c.qkv[(size_t)(c.T - 1) * 3 * c.C + c.C + 1] += 5.0f;      /* k of the last token, b = 0 */
    c.qkv[(size_t)(c.T - 1) * 3 * c.C + 2 * c.C + 1] += 5.0f;  /* v of the last token */
    at_obj(&c);
    CHECK(memcmp(before, c.out, (size_t)(c.T - 1) * c.C * sizeof(float)) == 0);
    free(before);
    free(c.qkv); free(c.out); free(c.lse); free(c.R); free(dqkv);
}

/* ---- gelu ---- */
typedef struct { size_t n; float *inp, *out, *R; } ge_case;
static double ge_obj(void *vp) {
    ge_case *c = vp;
    ops->gelu_forward(be, c->out, c->inp, c->n);
    return dot(c->out, c->R, c->n);
}
static void check_gelu(void) {
    ge_case c = {.n = 50};
    c.inp = rand_buf(c.n, 4.0f);
    c.out = zeros(c.n);
    c.R = rand_buf(c.n, 1.0f);
    float *dinp = zeros(c.n);
    ops->gelu_backward(be, dinp, c.inp, c.R, c.n);
    gradcheck("gelu d/dinp", ge_obj, &c, c.inp, dinp, c.n, 1e-2f, 1e-3);
    /* reference values of the tanh approximation */
    float x[3] = {-1.0f, 0.5f, 2.0f}, y[3];
    ops->gelu_forward(be, y, x, 3);
    CHECK(fabsf(y[0] - -0.15880801f) < 1e-6f && fabsf(y[1] - 0.34571401f) < 1e-6f &&
          fabsf(y[2] - 1.95459769f) < 1e-6f);
    free(c.inp); free(c.out); free(c.R); free(dinp);
}

/* ---- embedding ---- */
typedef struct { int B, T, C, V; int32_t *ids; float *wte, *wpe, *out, *R; } em_case;
static double em_obj(void *vp) {
    em_case *c = vp;
    ops->embedding_forward(be, c->out, c->ids, c->wte, c->wpe, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void check_embedding(void) {
    em_case c = {.B = 2, .T = 5, .C = 6, .V = 9};
    int32_t ids[10] = {1, 4, 4, 0, 8, 3, 1, 1, 7, 2};
    c.ids = ids;
    c.wte = rand_buf((size_t)c.V * c.C, 1.0f);
    c.wpe = rand_buf((size_t)c.T * c.C, 1.0f);
    c.out = zeros((size_t)c.B * c.T * c.C);
    c.R = rand_buf((size_t)c.B * c.T * c.C, 1.0f);
    float *dwte = zeros((size_t)c.V * c.C), *dwpe = zeros((size_t)c.T * c.C);
    ops->embedding_backward(be, dwte, dwpe, c.R, c.ids, c.B, c.T, c.C);
    gradcheck("embedding d/dwte", em_obj, &c, c.wte, dwte, (size_t)c.V * c.C, 1e-2f, 1e-3);
    gradcheck("embedding d/dwpe", em_obj, &c, c.wpe, dwpe, (size_t)c.T * c.C, 1e-2f, 1e-3);
    free(c.wte); free(c.wpe); free(c.out); free(c.R); free(dwte); free(dwpe);
}

/* ---- softmax cross-entropy ---- */
typedef struct { int N, V, Vp, mask; float *logits, *work, *losses, *lse; int32_t *targets; } ce_case;
static double ce_obj(void *vp) {
    ce_case *c = vp;
    memcpy(c->work, c->logits, (size_t)c->N * c->Vp * sizeof(float));
    ops->crossentropy_forward(be, c->losses, c->lse, c->work, c->targets, c->N, c->V, c->Vp, c->mask);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s;
}
static void check_crossentropy(int mask) {
    ce_case c = {.N = 4, .V = 10, .Vp = 16, .mask = mask};
    int32_t targets[4] = {3, GPTX_IGNORE_INDEX, 9, 0};
    c.targets = targets;
    size_t n = (size_t)c.N * c.Vp;
    c.logits = rand_buf(n, 3.0f);
    c.work = zeros(n); c.losses = zeros((size_t)c.N); c.lse = zeros(3 * (size_t)c.N); /* lse + backend statistics */
    ce_obj(&c);
    CHECK(c.losses[1] == 0.0f); /* ignored target */
    if (mask) CHECK(isinf(c.work[c.V]) && c.work[c.V] < 0);
    /* the loss of row 0 by hand, in double */
    double mx = -1e30, s = 0;
    int cols = mask ? c.V : c.Vp;
    for (int j = 0; j < cols; j++) mx = fmax(mx, c.logits[j]);
    for (int j = 0; j < cols; j++) s += exp(c.logits[j] - mx);
    CHECK(fabs((mx + log(s) - c.logits[3]) - c.losses[0]) < 1e-5);
    ops->crossentropy_backward(be, c.work, c.lse, c.targets, c.N, c.V, c.Vp, 1.0f);
    float *grad = malloc(n * sizeof *grad); /* the objective reuses c.work */
    memcpy(grad, c.work, n * sizeof *grad);
    gradcheck(mask ? "crossentropy (masked) d/dlogits" : "crossentropy (unmasked) d/dlogits",
              ce_obj, &c, c.logits, grad, n, 1e-2f, 1e-3);
    for (int i = 0; i < c.N; i++)
        for (int j = mask ? c.V : c.Vp; j < c.Vp; j++) CHECK(grad[(size_t)i * c.Vp + j] == 0.0f);
    for (int j = 0; j < c.Vp; j++) CHECK(grad[(size_t)1 * c.Vp + j] == 0.0f); /* ignored row */
    free(grad);
    free(c.logits); free(c.work); free(c.losses); free(c.lse);
}

/* ---- AdamW against a double-precision reference ---- */
static void check_adamw(void) {
    size_t n = 40;
    float *p = rand_buf(n, 1.0f), *g = rand_buf(n, 1.0f), *m = rand_buf(n, 0.1f), *v = zeros(n);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(frand()) * 0.01f;
    double pd[40], md[40], vd[40];
    for (size_t i = 0; i < n; i++) { pd[i] = p[i]; md[i] = m[i]; vd[i] = v[i]; }
    gptx_param_range ranges[2] = {{0, 25, 0.1f}, {25, 15, 0.0f}};
    gptx_adamw_hyper h = {1e-2f, 0.9f, 0.95f, 1e-8f, 1.0f - 0.9f * 0.9f, 1.0f - 0.95f * 0.95f, 0.5f, 0, 1};
    ops->adamw(be, p, g, m, v, ranges, 2, &h);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double wd = i < 25 ? 0.1 : 0.0, gi = g[i] * 0.5;
        md[i] = 0.9 * md[i] + 0.1 * gi;
        vd[i] = 0.95 * vd[i] + 0.05 * gi * gi;
        double mh = md[i] / (1 - 0.81), vh = vd[i] / (1 - 0.9025);
        pd[i] = pd[i] - 1e-2 * (mh / (sqrt(vh) + 1e-8) + wd * pd[i]);
        worst = fmax(worst, fabs(pd[i] - p[i]) + fabs(md[i] - m[i]) + fabs(vd[i] - v[i]));
    }
    printf("  %-28s worst abs error %.2e\n", "adamw vs double reference", worst);
    CHECK(worst < 1e-6);
    free(p); free(g); free(m); free(v);
}

static void check_reductions(void) {
    size_t n = 200003; /* several fixed chunks and a ragged tail */
    float *x = rand_buf(n, 1.0f);
    double ref = 0, ref2 = 0, s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) { ref += x[i]; ref2 += (double)x[i] * x[i]; }
    ops->sum_to_host(be, &s, x, n);
    ops->sum_squares_to_host(be, &s2, x, n);
    CHECK(fabs(s - ref) < 1e-8 * n && fabs(s2 - ref2) < 1e-8 * n);
    free(x);
}

int main(void) {
    ops = gptx_cpu_backend_ops();
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.num_threads = 2;
    if (ops->create(&be, &o) != GPTX_OK) return 1;
    check_layernorm();
    check_matmul();
    check_attention();
    check_gelu();
    check_embedding();
    check_crossentropy(1);
    check_crossentropy(0);
    check_adamw();
    check_reductions();
    ops->destroy(be);
    return check_exit("test_ops_gradcheck");
}
