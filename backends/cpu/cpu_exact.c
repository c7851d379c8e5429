/* Rank-invariant gradient sums on the CPU (lib/core/exact_bins.h): fold a
 * gradient into the per-element bins, raise windows to the ranks' common
 * ones, read the sums back. A task takes whole chunks, so the windows and
 * bins of a chunk have one writer; the results depend on the values alone. */
#include <stdint.h>

#include "cpu_kernels.h"
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

static void chunk_raise(int64_t *bins, size_t lo, size_t hi, int32_t from, int32_t to) {
    if (to <= from || from == EXACT_EMPTY) return; /* an empty chunk holds zeros */
    for (size_t i = lo; i < hi; i++) gptx_exact_raise(bins + EXACT_LEVELS * i, from, to);
}

static void fold_task(void *vp, int task) {
    exact_args *a = vp;
    size_t c0, c1;
    task_chunks(a, task, &c0, &c1);
    for (size_t c = c0; c < c1; c++) {
        size_t lo = c * EXACT_CHUNK, hi = lo + EXACT_CHUNK < a->n ? lo + EXACT_CHUNK : a->n;
        int32_t top = a->win[c];
        if (top == EXACT_NONFINITE) continue;
        for (size_t i = lo; i < hi; i++) {
            int32_t t = gptx_exact_top(a->x[i]);
            if (t > top) top = t;
        }
        if (top == EXACT_NONFINITE || top == EXACT_EMPTY) {
            a->win[c] = top;
            continue;
        }
        chunk_raise(a->bins, lo, hi, a->win[c], top);
        a->win[c] = top;
        for (size_t i = lo; i < hi; i++)
            if (a->x[i] != 0.0f) gptx_exact_add(a->bins + EXACT_LEVELS * i, top, a->x[i]);
    }
}

static void raise_task(void *vp, int task) {
    exact_args *a = vp;
    size_t c0, c1;
    task_chunks(a, task, &c0, &c1);
    for (size_t c = c0; c < c1; c++) {
        size_t lo = c * EXACT_CHUNK, hi = lo + EXACT_CHUNK < a->n ? lo + EXACT_CHUNK : a->n;
        if (a->to[c] <= a->win[c]) continue;
        if (a->to[c] != EXACT_NONFINITE) chunk_raise(a->bins, lo, hi, a->win[c], a->to[c]);
        a->win[c] = a->to[c];
    }
}

static void value_task(void *vp, int task) {
    exact_args *a = vp;
    size_t c0, c1;
    task_chunks(a, task, &c0, &c1);
    for (size_t c = c0; c < c1; c++) {
        size_t lo = c * EXACT_CHUNK, hi = lo + EXACT_CHUNK < a->n ? lo + EXACT_CHUNK : a->n;
        for (size_t i = lo; i < hi; i++)
            a->out[i] = gptx_exact_value(a->bins + EXACT_LEVELS * i, a->win[c]);
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
