/* Rank-invariant gradient sums on the CPU (lib/core/exact_bins.h): fold a
 * gradient into the per-element bins, raise windows to the ranks' common
 * ones, read the sums back. A task takes whole chunks, so the windows and
 * bins of a chunk have one writer; the results depend on the values alone.
 * The bins are level-major (level k of element i at bins[k n + i]) and the
 * per-element work is integer and branch-free, so the fold's two loops
 * vectorize in the widest clone the CPU runs (cpu_math.h's GPTX_CPU_HOT):
 * integer arithmetic gives every clone the same bits. */
#include <stdint.h>

#include "cpu_kernels.h"
#include "cpu_math.h"
#include "exact_bins.h"

typedef struct {
    int64_t *bins;
    int32_t *win;
    const int32_t *to;
    const float *x;
    float *out;
    size_t n;
    int ntasks;
} exact_args;

/* The chunks [c0, c1) of task `task`. */
static void task_chunks(const exact_args *a, int task, size_t *c0, size_t *c1) {
    gptx_cpu_split(gptx_exact_chunks(a->n), a->ntasks, task, c0, c1);
}

static void chunk_span(const exact_args *a, size_t c, size_t *lo, size_t *hi) {
    *lo = c * EXACT_CHUNK;
    *hi = *lo + EXACT_CHUNK < a->n ? *lo + EXACT_CHUNK : a->n;
}

/* Elements [lo, hi) of the bins from window `from` to the higher `to`. */
static void chunk_raise(int64_t *bins, size_t n, size_t lo, size_t hi, int32_t from, int32_t to) {
    if (to <= from || from == EXACT_EMPTY) return; /* an empty chunk holds zeros */
    for (size_t i = lo; i < hi; i++) {
        int64_t l[EXACT_LEVELS];
        for (int k = 0; k < EXACT_LEVELS; k++) l[k] = bins[k * n + i];
        gptx_exact_raise(l, from, to);
        for (int k = 0; k < EXACT_LEVELS; k++) bins[k * n + i] = l[k];
    }
}

/* The window x[lo, hi) needs, at least `top`. */
GPTX_CPU_HOT static int32_t gptx_cpu_exact_chunk_top(const float *x, size_t lo, size_t hi,
                                                     int32_t top) {
    for (size_t i = lo; i < hi; i++) {
        int32_t t = gptx_exact_top(x[i]);
        top = t > top ? t : top;
    }
    return top;
}

GPTX_CPU_HOT static void gptx_cpu_exact_chunk_add(int64_t *restrict l0, int64_t *restrict l1,
                                                  int64_t *restrict l2, const float *restrict x,
                                                  size_t m, int32_t top) {
    for (size_t i = 0; i < m; i++) {
        int64_t p[EXACT_LEVELS];
        gptx_exact_pieces(x[i], top, p);
        l0[i] += p[0];
        l1[i] += p[1];
        l2[i] += p[2];
    }
}

static void fold_task(void *vp, int task) {
    exact_args *a = vp;
    size_t c0, c1, lo, hi, n = a->n;
    task_chunks(a, task, &c0, &c1);
    for (size_t c = c0; c < c1; c++) {
        chunk_span(a, c, &lo, &hi);
        int32_t was = a->win[c];
        if (was == EXACT_NONFINITE) continue;
        int32_t top = gptx_cpu_exact_chunk_top(a->x, lo, hi, was);
        a->win[c] = top;
        if (top == EXACT_NONFINITE || top == EXACT_EMPTY) continue;
        chunk_raise(a->bins, n, lo, hi, was, top);
        gptx_cpu_exact_chunk_add(a->bins + lo, a->bins + n + lo, a->bins + 2 * n + lo, a->x + lo,
                                 hi - lo, top);
    }
}

static void raise_task(void *vp, int task) {
    exact_args *a = vp;
    size_t c0, c1, lo, hi;
    task_chunks(a, task, &c0, &c1);
    for (size_t c = c0; c < c1; c++) {
        if (a->to[c] <= a->win[c]) continue;
        chunk_span(a, c, &lo, &hi);
        if (a->to[c] != EXACT_NONFINITE) chunk_raise(a->bins, a->n, lo, hi, a->win[c], a->to[c]);
        a->win[c] = a->to[c];
    }
}

static void value_task(void *vp, int task) {
    exact_args *a = vp;
    size_t c0, c1, lo, hi, n = a->n;
    task_chunks(a, task, &c0, &c1);
    for (size_t c = c0; c < c1; c++) {
        chunk_span(a, c, &lo, &hi);
        for (size_t i = lo; i < hi; i++) {
            int64_t l[EXACT_LEVELS] = {a->bins[i], a->bins[n + i], a->bins[2 * n + i]};
            a->out[i] = gptx_exact_value(l, a->win[c]);
        }
    }
}

static int run(gptx_backend *be, exact_args *a, gptx_task_fn fn) {
    if (a->n == 0) return GPTX_OK;
    a->ntasks = gptx_cpu_ntasks(be, gptx_exact_chunks(a->n));
    gptx_threadpool_run(be->pool, a->ntasks, fn, a);
    return GPTX_OK;
}

int gptx_cpu_exact_fold(gptx_backend *be, int64_t *bins, int32_t *win, const float *x, size_t n) {
    exact_args a = {bins, win, NULL, x, NULL, n, 0};
    return run(be, &a, fold_task);
}

int gptx_cpu_exact_raise(gptx_backend *be, int64_t *bins, int32_t *win, const int32_t *to,
                         size_t n) {
    exact_args a = {bins, win, to, NULL, NULL, n, 0};
    return run(be, &a, raise_task);
}

int gptx_cpu_exact_value(gptx_backend *be, float *out, const int64_t *bins, const int32_t *win,
                         size_t n) {
    exact_args a = {(int64_t *)bins, (int32_t *)win, NULL, NULL, out, n, 0};
    return run(be, &a, value_task);
}
