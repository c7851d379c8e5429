/* Shared set-up for the CUDA backend tests. Each test is built twice:
 *   - against the real backend (label `gpu`): exits 77 (skipped) when no
 *     CUDA device is present;
 *   - with GPTX_TEST_CUDA_EMU (label `emu`): against the same backend sources
 *     compiled for the CPU emulation (tests/gpu/emu/cuda_emu_backend.cpp), which
 *     runs everywhere and checks the kernels' logic, not the GPU.
 * The precision policy is the context option (a name of
 * gptx_precision_name; NULL = fp32); GPTX_CUDA_PRECISION, which would
 * override it, is unset by these helpers. */
#ifndef GPTX_CUDA_TEST_UTIL_H
#define GPTX_CUDA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "context.h"
#include "gptx/gptx.h"

#define SKIP_EXIT 77

#ifdef GPTX_TEST_CUDA_EMU
const gptx_backend_ops *gptx_cuda_emu_backend_ops(void);
static inline const gptx_backend_ops *cuda_test_ops(void) { return gptx_cuda_emu_backend_ops(); }
#define CUDA_TEST_KIND "cuda (CPU emulation)"
#else
#include "module.h"
/* the cuda module's table (lib/core/module.h); NULL when the module is missing */
static inline const gptx_backend_ops *cuda_test_ops(void) {
    const gptx_module_exports *x = gptx_module_lookup("cuda");
    return x ? x->backend_ops : NULL;
}
#define CUDA_TEST_KIND "cuda"
#endif

/* Sets the environment override (NULL = unset): the error tests use it. */
static inline void cuda_test_precision(const char *precision) {
    if (precision)
        setenv("GPTX_CUDA_PRECISION", precision, 1);
    else
        unsetenv("GPTX_CUDA_PRECISION");
}

/* A backend instance of the table (no context). GPTX_ERR_UNSUPPORTED means
 * there is no device: the caller exits SKIP_EXIT. */
static inline int cuda_test_precision_value(const char *precision) {
    return precision ? gptx_precision_from_name(precision) : GPTX_PRECISION_FP32;
}

static inline int cuda_test_backend(gptx_backend **be, const char *precision) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CUDA;
    o.precision = cuda_test_precision_value(precision);
    cuda_test_precision(NULL);
    if (!cuda_test_ops()) { /* a CUDA build without its module is broken, not skipped */
        fprintf(stderr, "the cuda module (libgptx_cuda.so) does not load: set GPTX_MODULE_PATH\n");
        return GPTX_ERR_STATE;
    }
    return cuda_test_ops()->create(be, &o);
}

/* A context on the CUDA backend with options `o` (backend forced to CUDA).
 * The emulated backend cannot be selected through gptx_context_create (it
 * is not part of the library), so its context is made on its table. */
static inline int cuda_test_context_opts(gptx_context **out, const gptx_context_options *o) {
    *out = NULL;
    cuda_test_precision(NULL);
    gptx_context_options c = *o;
    c.backend = GPTX_BACKEND_CUDA;
#ifdef GPTX_TEST_CUDA_EMU
    return gptx_context_create_on(out, &c, cuda_test_ops());
#else
    return gptx_context_create(out, &c);
#endif
}

/* A context on the CUDA backend under `precision` (a name; NULL = fp32). */
static inline int cuda_test_context(gptx_context **out, const char *precision) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.precision = cuda_test_precision_value(precision);
    return cuda_test_context_opts(out, &o);
}

static inline int cuda_test_cpu_context(gptx_context **ctx) {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    o.num_threads = 2;
    return gptx_context_create(ctx, &o);
}

/* Prints the skip reason and returns SKIP_EXIT. */
static inline int cuda_test_skip(const char *name) {
    printf("%s: SKIPPED, no usable CUDA device (%s)\n", name, gptx_last_error());
    return SKIP_EXIT;
}

/* xorshift64*: uniform floats in [lo, hi). */
static inline float test_uniform(uint64_t *s, float lo, float hi) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    uint64_t r = *s * 0x2545F4914F6CDD1Dull;
    return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}

static inline void test_fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < n; i++) x[i] = test_uniform(&s, lo, hi);
}

#endif
