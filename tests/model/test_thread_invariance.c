/* Deterministic mode promises the same bits for every thread count. The
 * matrix products are where that is easiest to lose: the CPU backend splits
 * them across threads, and every output element must still be summed in one
 * order. This test runs the products at the shapes the benchmark models use
 * (and odd ones) with 1, 2 and 3 threads and compares every bit; the
 * model-level check at small sizes is in test_model. Run again with
 * GPTX_CPU_FP32_GEMM=onednn (test_thread_invariance_onednn), it first checks
 * that the products do run on oneDNN's f32 matmul. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "check.h"

typedef struct {
    int N, C, OC;
} shape;

static const shape shapes[] = {
    {1024, 256, 768},   /* small: c_attn */
    {1024, 1024, 256},  /* small: mlp.c_proj */
    {1024, 256, 50304}, /* small: lm_head over the padded vocabulary */
    {512, 768, 3072},   /* gpt2-124M: mlp.c_fc */
    {1000, 250, 777},   /* odd sizes */
    {37, 24, 72},       /* reference-fixture sizes (small-matrix paths) */
};

static uint32_t rng = 99u;
static float *rand_buf(size_t n) {
    float *p = malloc(n * sizeof *p);
    for (size_t i = 0; i < n; i++) {
        rng = rng * 1664525u + 1013904223u;
        p[i] = (float)((rng >> 8) * (1.0 / 8388608.0) - 1.0);
    }
    return p;
}

typedef struct {
    float *out, *dinp, *dw, *db;
} results;

static int run(const gptx_backend_ops *ops, int threads, const shape *s, const float *inp,
               const float *w, const float *bias, const float *dout, results *r) {
    gptx_backend *be = NULL;
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.num_threads = threads;
    o.deterministic = 1;
    if (ops->create(&be, &o) != GPTX_OK) return -1;
    size_t no = (size_t)s->N * s->OC, ni = (size_t)s->N * s->C, nw = (size_t)s->OC * s->C;
    r->out = malloc(no * sizeof(float));
    r->dinp = malloc(ni * sizeof(float));
    r->dw = malloc(nw * sizeof(float));
    r->db = malloc((size_t)s->OC * sizeof(float));
    /* accumulation into non-zero gradients, as in gradient accumulation */
    for (size_t i = 0; i < nw; i++) r->dw[i] = 0.5f;
    for (int i = 0; i < s->OC; i++) r->db[i] = 0.25f;
    int rc = ops->matmul_forward(be, r->out, inp, w, bias, s->N, s->C, s->OC);
    if (rc == GPTX_OK)
        rc = ops->matmul_backward(be, r->dinp, r->dw, r->db, dout, inp, w, s->N, s->C, s->OC);
    ops->destroy(be);
    return rc;
}

static void release(results *r) {
    free(r->out);
    free(r->dinp);
    free(r->dw);
    free(r->db);
}

static size_t differing(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof *a) != 0;
    return d;
}

int main(void) {
    const gptx_backend_ops *ops = gptx_cpu_backend_ops();
    const char *lib = getenv("GPTX_CPU_FP32_GEMM");
    if (lib && strcmp(lib, "onednn") == 0) {
        gptx_backend *be = NULL;
        gptx_context_options o;
        gptx_context_options_init(&o);
        REQUIRE_OK(ops->create(&be, &o));
        gptx_context_info info;
        gptx_context_info_init(&info);
        ops->describe(be, &info);
        printf("fp32 products: %s\n", info.products);
        CHECK(strncmp(info.products, "oneDNN ", 7) == 0 && strstr(info.products, " f32"));
        ops->destroy(be);
    }
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const shape *s = &shapes[k];
        size_t no = (size_t)s->N * s->OC, ni = (size_t)s->N * s->C, nw = (size_t)s->OC * s->C;
        float *inp = rand_buf(ni), *w = rand_buf(nw), *bias = rand_buf((size_t)s->OC);
        float *dout = rand_buf(no);
        results ref;
        REQUIRE_OK(run(ops, 1, s, inp, w, bias, dout, &ref));
        for (int threads = 2; threads <= 3; threads++) {
            results r;
            REQUIRE_OK(run(ops, threads, s, inp, w, bias, dout, &r));
            size_t d_out = differing(ref.out, r.out, no), d_in = differing(ref.dinp, r.dinp, ni);
            size_t d_w = differing(ref.dw, r.dw, nw);
            size_t d_b = differing(ref.db, r.db, (size_t)s->OC);
            printf("N %5d C %4d OC %5d, %d threads: differing elements out %zu, dinp %zu, dw %zu, "
                   "dbias %zu\n", s->N, s->C, s->OC, threads, d_out, d_in, d_w, d_b);
            CHECK(d_out == 0 && d_in == 0 && d_w == 0 && d_b == 0);
            release(&r);
        }
        release(&ref);
        free(inp);
        free(w);
        free(bias);
        free(dout);
    }
    return check_exit("test_thread_invariance");
}
