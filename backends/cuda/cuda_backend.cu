/* CUDA backend: lifetime, the caching allocator, host <-> device copies and
 * the fixed-order reductions to the host.
 *
 * Streams: every kernel runs on one compute stream, so device buffers need
 * no further ordering among kernels. Uploads run on a copy stream: it first
 * waits for the compute stream (a buffer may still be read by queued
 * kernels), copies from pinned staging buffers, and the compute stream then
 * waits for the copy. The host returns as soon as the copy is queued, so it
 * can prepare the next batch while the device computes. Downloads wait for
 * the device (the caller reads the result at once). */
#include "cuda_internal.h"

extern "C" {
#include "bf16_round.h"
}

#define STAGE_BYTES ((size_t)4 << 20)         /* one upload staging buffer */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt workspace */
#define REDUCE_CHUNK 65536                    /* elements per block of a sum */
#define REDUCE_THREADS 256

/* ---- small helpers ---------------------------------------------------------- */

GPTX_CUDA_FN int gptx_cuda_enter(gptx_backend *be) {
    if (be->ndevices > 1) GPTX_CUDA_TRY(cudaSetDevice(be->device));
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_pinned_reserve(gptx_cuda_pinned *p, size_t bytes) {
    if (p->pending) {
        GPTX_CUDA_TRY(cudaEventSynchronize(p->done));
        p->pending = 0;
    }
    if (p->cap >= bytes) return GPTX_OK;
    size_t cap = p->cap ? p->cap : 4096;
    while (cap < bytes) cap *= 2;
    if (p->host) cudaFreeHost(p->host);
    p->host = NULL;
    p->cap = 0;
    cudaError_t e = cudaMallocHost(&p->host, cap);
    if (e != cudaSuccess) {
        p->host = NULL;
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "cannot allocate %zu bytes of pinned host memory: %s",
                         cap, cudaGetErrorString(e));
    }
    p->cap = cap;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_pinned_mark(gptx_cuda_pinned *p, cudaStream_t stream) {
    GPTX_CUDA_TRY(cudaEventRecord(p->done, stream));
    p->pending = 1;
    return GPTX_OK;
}

static void pinned_free(gptx_cuda_pinned *p) {
    if (p->host) cudaFreeHost(p->host);
    if (p->done) cudaEventDestroy(p->done);
    memset(p, 0, sizeof *p);
}

/* The old scratch block while a graph is being captured: nodes captured so
 * far use it, so it stays with that graph (graph_drop frees it). */
static int scratch_retire(gptx_backend *be) {
    gptx_cuda_graph *g = &be->graph[be->capture_segment];
    if (g->nretired == g->retired_cap) {
        int cap = g->retired_cap ? 2 * g->retired_cap : 4;
        void **r = (void **)realloc(g->retired, (size_t)cap * sizeof *r);
        if (!r) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        g->retired = r;
        g->retired_cap = cap;
    }
    g->retired[g->nretired++] = be->scratch;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_scratch(gptx_backend *be, size_t bytes, void **ptr) {
    if (bytes > be->scratch_bytes) {
        /* the old block goes back to the cache; kernels already queued on the
         * compute stream finish with it before any later user touches it. A
         * capture's nodes are not queued but recorded: then it is retired. */
        if (be->capture_segment >= 0 && be->scratch)
            GPTX_TRY(scratch_retire(be));
        else
            gptx_cuda_cache_free(&be->cache, be->scratch);
        /* the other captured graphs bake the old address in */
        for (int i = 0; i < GPTX_CUDA_GRAPH_SEGMENTS; i++)
            if (i != be->capture_segment) be->graph[i].stale = 1;
        be->scratch = NULL;
        be->scratch_bytes = 0;
        size_t want = bytes < GPTX_CUDA_SCRATCH_MIN ? GPTX_CUDA_SCRATCH_MIN : bytes;
        GPTX_TRY(gptx_cuda_cache_alloc(&be->cache, want, 1, &be->scratch));
        be->scratch_bytes = want;
    }
    *ptr = be->scratch;
    return GPTX_OK;
}

/* ---- raw device memory for the cache ------------------------------------------ */

static int raw_alloc(void *user, size_t bytes, void **ptr) {
    (void)user;
    cudaError_t e = cudaMalloc(ptr, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* clear the (non-sticky) allocation error */
        *ptr = NULL;
        return 1;
    }
    return 0;
}

static void raw_free(void *user, void *ptr) {
    (void)user;
    cudaFree(ptr);
}

static void quiesce(void *user) {
    (void)user;
    cudaDeviceSynchronize();
}

/* ---- options from the environment ----------------------------------------------- */

/* The policy in effect: options.precision (DEFAULT = bf16 mixed), unless
 * the environment overrides it for programs that do not set the option:
 * GPTX_CUDA_PRECISION = fp32 | tf32 | bf16 | bf16_pure, or GPTX_CUDA_TF32 = 1
 * (tf32, when GPTX_CUDA_PRECISION is unset). */
static int resolve_precision(const gptx_context_options *opts, int *precision) {
    const char *p = getenv("GPTX_CUDA_PRECISION");
    const char *t = getenv("GPTX_CUDA_TF32");
    *precision = opts->precision == GPTX_PRECISION_DEFAULT ? GPTX_PRECISION_BF16 : opts->precision;
    if (t && *t && strcmp(t, "0") != 0 && strcmp(t, "1") != 0)
        return GPTX_FAIL(GPTX_ERR_INVALID, "environment GPTX_CUDA_TF32 is '%s'; expected 0 or 1",
                         t);
    if (p && *p) {
        int v = gptx_precision_from_name(p);
        if (v <= GPTX_PRECISION_DEFAULT) {
            gptx_clear_error();
            return GPTX_FAIL(GPTX_ERR_INVALID,
                             "environment GPTX_CUDA_PRECISION is '%s'; expected fp32, tf32, bf16 "
                             "or bf16_pure",
                             p);
        }
        *precision = v;
    } else if (t && strcmp(t, "1") == 0) {
        *precision = GPTX_PRECISION_TF32;
    }
    return GPTX_OK;
}

/* The tensor-core attention's tile configuration for the default table:
 * GPTX_CUDA_FLASH_TILES = 1..GPTX_CUDA_FLASH_VARIANTS (docs/cuda.md), 1
 * when unset; so a whole training step can be timed in each. */
static int resolve_flash_tiles(int *variant) {
    const char *e = getenv("GPTX_CUDA_FLASH_TILES");
    *variant = 1;
    if (!e || !*e) return GPTX_OK;
    char *end = NULL;
    long v = strtol(e, &end, 10);
    if (*end || v < 1 || v > GPTX_CUDA_FLASH_VARIANTS)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "environment GPTX_CUDA_FLASH_TILES is '%s'; expected 1..%d", e,
                         GPTX_CUDA_FLASH_VARIANTS);
    *variant = (int)v;
    return GPTX_OK;
}

/* ---- lifetime ----------------------------------------------------------------- */

GPTX_CUDA_FN void gptx_cuda_destroy(gptx_backend *be) {
    if (!be) return;
    if (be->ndevices > 1) cudaSetDevice(be->device);
    if (be->compute) cudaStreamSynchronize(be->compute);
    if (be->copy) cudaStreamSynchronize(be->copy);
    gptx_cuda_graphs_release(be);
    gptx_cuda_cache_destroy(&be->cache); /* scratch included */
    if (be->lt_workspace) cudaFree(be->lt_workspace);
    if (be->lt) cublasLtDestroy(be->lt);
    pinned_free(&be->stage[0]);
    pinned_free(&be->stage[1]);
    pinned_free(&be->partials);
    pinned_free(&be->small);
    pinned_free(&be->ids);
    if (be->ev_compute) cudaEventDestroy(be->ev_compute);
    if (be->ev_copy) cudaEventDestroy(be->ev_copy);
    if (be->compute) cudaStreamDestroy(be->compute);
    if (be->copy) cudaStreamDestroy(be->copy);
    free(be->bucket_counts);
    for (int i = 0; i < GPTX_CUDA_ADAMW_TABLES; i++) free(be->adamw[i].host); /* dev: the cache's */
    free(be->adamw_build);
    free(be);
}

static int create_streams(gptx_backend *be) {
    GPTX_CUDA_TRY(cudaStreamCreateWithFlags(&be->compute, cudaStreamNonBlocking));
    GPTX_CUDA_TRY(cudaStreamCreateWithFlags(&be->copy, cudaStreamNonBlocking));
    GPTX_CUDA_TRY(cudaEventCreateWithFlags(&be->ev_compute, cudaEventDisableTiming));
    GPTX_CUDA_TRY(cudaEventCreateWithFlags(&be->ev_copy, cudaEventDisableTiming));
    gptx_cuda_pinned *pins[] = {&be->stage[0], &be->stage[1], &be->partials, &be->small, &be->ids};
    for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++)
        GPTX_CUDA_TRY(cudaEventCreateWithFlags(&pins[i]->done, cudaEventDisableTiming));
    return GPTX_OK;
}

static int create_blas(gptx_backend *be) {
    cublasStatus_t s = cublasLtCreate(&be->lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        be->lt = NULL;
        return GPTX_FAIL(GPTX_ERR_BACKEND, "cublasLtCreate failed (status %d)", (int)s);
    }
    cudaError_t e = cudaMalloc(&be->lt_workspace, LT_WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        be->lt_workspace = NULL;
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "cannot allocate the %zu-byte cuBLASLt workspace: %s",
                         LT_WORKSPACE_BYTES, cudaGetErrorString(e));
    }
    be->lt_workspace_bytes = LT_WORKSPACE_BYTES;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_create(gptx_backend **out, const gptx_context_options *opts) {
    *out = NULL;
    int precision = GPTX_PRECISION_FP32, flash_tiles = 1;
    GPTX_TRY(resolve_precision(opts, &precision));
    GPTX_TRY(resolve_flash_tiles(&flash_tiles));
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    }
    if (n <= 0) return GPTX_FAIL(GPTX_ERR_UNSUPPORTED, "no CUDA device: none found");
    if (opts->device >= n)
        return GPTX_FAIL(GPTX_ERR_INVALID,
                         "options.device is %d; this machine has %d CUDA device(s)", opts->device,
                         n);
    GPTX_CUDA_TRY(cudaSetDevice(opts->device));
    cudaDeviceProp prop;
    GPTX_CUDA_TRY(cudaGetDeviceProperties(&prop, opts->device));
    if (prop.major < 8)
        return GPTX_FAIL(GPTX_ERR_UNSUPPORTED,
                         "CUDA device %d (%s) has compute capability %d.%d; this build needs 8.0 "
                         "or newer",
                         opts->device, prop.name, prop.major, prop.minor);

    gptx_backend *be = (gptx_backend *)calloc(1, sizeof *be);
    if (!be) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    be->device = opts->device;
    be->ndevices = n;
    snprintf(be->device_name, sizeof be->device_name, "%s", prop.name);
    be->cc_major = prop.major;
    be->cc_minor = prop.minor;
    be->sm_count = prop.multiProcessorCount;
    be->smem_optin = (int)prop.sharedMemPerBlockOptin;
    be->flash_variant = flash_tiles;
    be->precision = precision;
    be->act_bf16 = precision == GPTX_PRECISION_BF16 || precision == GPTX_PRECISION_BF16_PURE;
    be->param_bf16 = precision == GPTX_PRECISION_BF16_PURE;
    be->stochastic_rounding = be->param_bf16 && opts->stochastic_rounding;
    be->res_f32 = be->act_bf16 && !be->param_bf16;
    be->deterministic = opts->deterministic;
    be->graphs = opts->cuda_graphs;
    be->capture_segment = -1;
    gptx_cuda_cache_init(&be->cache, raw_alloc, raw_free, quiesce, be);
    int rc = create_streams(be);
    if (rc == GPTX_OK) rc = create_blas(be);
    if (rc == GPTX_OK) rc = gptx_cuda_flash_init(be);
    if (rc != GPTX_OK) {
        gptx_cuda_destroy(be);
        return rc;
    }
    *out = be;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_precision(const gptx_backend *be) { return be->precision; }

GPTX_CUDA_FN void gptx_cuda_storage(const gptx_backend *be, gptx_backend_storage *out) {
    out->act_bytes = be->act_bf16 ? sizeof(gptx_bf16) : sizeof(float);
    /* bf16 mixed reads a bf16 copy of the fp32 master; pure bf16 reads the
     * (bf16) parameters themselves */
    out->wcopy_bytes = be->act_bf16 && !be->param_bf16 ? sizeof(gptx_bf16) : 0;
    out->param_bytes = be->param_bf16 ? sizeof(gptx_bf16) : sizeof(float);
    out->res_bytes = be->act_bf16 && !be->res_f32 ? sizeof(gptx_bf16) : sizeof(float);
}

GPTX_CUDA_FN int gptx_cuda_num_threads(const gptx_backend *be) {
    (void)be;
    return 1; /* host threads driving the device */
}

/* ---- memory ------------------------------------------------------------------ */

GPTX_CUDA_FN int gptx_cuda_alloc(gptx_backend *be, size_t bytes, void **ptr) {
    *ptr = NULL;
    GPTX_TRY(gptx_cuda_enter(be));
    return gptx_cuda_cache_alloc(&be->cache, bytes, 0, ptr);
}

GPTX_CUDA_FN void gptx_cuda_free(gptx_backend *be, void *ptr) {
    if (!ptr) return;
    /* ids cached for embedding_backward may live in this buffer */
    be->ids_dev = NULL;
    gptx_cuda_cache_free(&be->cache, ptr);
}

GPTX_CUDA_FN void gptx_cuda_describe(const gptx_backend *be, gptx_context_info *info) {
    info->bf16_native = be->cc_major >= 8; /* bf16 tensor cores from Ampere on */
    snprintf(info->products, sizeof info->products, "cuBLASLt on %.60s (sm_%d%d)", be->device_name,
             be->cc_major, be->cc_minor);
}

GPTX_CUDA_FN int gptx_cuda_memory_stats(const gptx_backend *be, gptx_memory_stats *stats) {
    stats->allocated = be->cache.allocated;
    stats->reserved = be->cache.reserved + be->lt_workspace_bytes;
    stats->peak = be->cache.peak;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_reset_peak(gptx_backend *be) {
    gptx_cuda_cache_reset_peak(&be->cache);
    return GPTX_OK;
}

GPTX_CUDA_FN void *gptx_cuda_compute_stream(gptx_backend *be) { return (void *)be->compute; }

GPTX_CUDA_FN int gptx_cuda_synchronize(gptx_backend *be) {
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_CUDA_TRY(cudaStreamSynchronize(be->copy));
    GPTX_CUDA_TRY(cudaStreamSynchronize(be->compute));
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_host_alloc_pinned(gptx_backend *be, size_t bytes, void **ptr) {
    *ptr = NULL;
    GPTX_TRY(gptx_cuda_enter(be));
    cudaError_t e = cudaMallocHost(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        *ptr = NULL;
        return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "cannot allocate %zu bytes of pinned host memory: %s",
                         bytes, cudaGetErrorString(e));
    }
    return GPTX_OK;
}

GPTX_CUDA_FN void gptx_cuda_host_free_pinned(gptx_backend *be, void *ptr) {
    (void)be;
    if (ptr) cudaFreeHost(ptr);
}

/* ---- copies ------------------------------------------------------------------ */

/* Host -> device through the staging buffers on the copy stream. The host
 * buffer may be reused as soon as this returns. With `narrow`, host holds
 * bytes / 2 floats that are rounded to bf16 (nearest even) into the staging
 * buffer, and `bytes` counts the device side. */
static int upload_staged(gptx_backend *be, void *dst, const void *host, size_t bytes, int narrow) {
    if (bytes == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    /* write-after-read: kernels queued so far may still read dst */
    GPTX_CUDA_TRY(cudaEventRecord(be->ev_compute, be->compute));
    GPTX_CUDA_TRY(cudaStreamWaitEvent(be->copy, be->ev_compute, 0));
    for (size_t off = 0; off < bytes; off += STAGE_BYTES) {
        size_t len = bytes - off < STAGE_BYTES ? bytes - off : STAGE_BYTES;
        gptx_cuda_pinned *st = &be->stage[be->stage_next];
        be->stage_next ^= 1;
        GPTX_TRY(gptx_cuda_pinned_reserve(st, STAGE_BYTES));
        if (narrow) {
            const float *src = (const float *)host + off / sizeof(uint16_t);
            uint16_t *h = (uint16_t *)st->host;
            for (size_t i = 0; i < len / sizeof(uint16_t); i++) h[i] = gptx_bf16_round_nearest(src[i]);
        } else {
            memcpy(st->host, (const char *)host + off, len);
        }
        GPTX_CUDA_TRY(
            cudaMemcpyAsync((char *)dst + off, st->host, len, cudaMemcpyHostToDevice, be->copy));
        GPTX_TRY(gptx_cuda_pinned_mark(st, be->copy));
    }
    /* read-after-write: later kernels see the data */
    GPTX_CUDA_TRY(cudaEventRecord(be->ev_copy, be->copy));
    GPTX_CUDA_TRY(cudaStreamWaitEvent(be->compute, be->ev_copy, 0));
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_upload_f32(gptx_backend *be, float *dst, const float *host, size_t n) {
    return upload_staged(be, dst, host, n * sizeof(float), 0);
}

GPTX_CUDA_FN int gptx_cuda_upload_i32(gptx_backend *be, int32_t *dst, const int32_t *host,
                                      size_t n) {
    /* the ids cached for embedding_backward are stale if this overwrites them */
    if (be->ids_dev && dst < be->ids_dev + be->ids_count && be->ids_dev < dst + n)
        be->ids_dev = NULL;
    return upload_staged(be, dst, host, n * sizeof(int32_t), 0);
}

GPTX_CUDA_FN int gptx_cuda_download_f32(gptx_backend *be, float *host, const float *src, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_CUDA_TRY(cudaEventRecord(be->ev_compute, be->compute));
    GPTX_CUDA_TRY(cudaStreamWaitEvent(be->copy, be->ev_compute, 0));
    GPTX_CUDA_TRY(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, be->copy));
    GPTX_CUDA_TRY(cudaStreamSynchronize(be->copy));
    return GPTX_OK;
}

template <typename A>
static __global__ void k_fill(A *dst, float value, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        gptx_st(&dst[i], value);
}

/* dst (bf16) = src (fp32), rounded to nearest even */
static __global__ void k_to_bf16(gptx_bf16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        gptx_st(&dst[i], src[i]);
}

GPTX_CUDA_FN int gptx_cuda_fill_f32(gptx_backend *be, float *dst, float value, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    if (value == 0.0f && !signbit(value)) {
        GPTX_CUDA_TRY(cudaMemsetAsync(dst, 0, n * sizeof(float), be->compute));
        return GPTX_OK;
    }
    GPTX_LAUNCH(k_fill<float>, gptx_cuda_blocks(n, 256), 256, be->compute, dst, value, n);
    GPTX_CUDA_LAUNCHED("fill");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_fill_act(gptx_backend *be, float *dst, float value, size_t n) {
    if (!be->act_bf16) return gptx_cuda_fill_f32(be, dst, value, n);
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_LAUNCH(k_fill<gptx_bf16>, gptx_cuda_blocks(n, 256), 256, be->compute, (gptx_bf16 *)dst,
                value, n);
    GPTX_CUDA_LAUNCHED("fill_act");
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_convert_weights(gptx_backend *be, float *copy, const float *params,
                                           size_t n) {
    if (!be->act_bf16 || be->param_bf16)
        return GPTX_FAIL(GPTX_ERR_STATE, "convert_weights: this context keeps no weight copy");
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_LAUNCH(k_to_bf16, gptx_cuda_blocks(n, 256), 256, be->compute, (gptx_bf16 *)copy, params,
                n);
    GPTX_CUDA_LAUNCHED("convert_weights");
    return GPTX_OK;
}

/* bf16 to the host: comes down as is (half the bytes) into the pinned
 * partials buffer and is widened on the host, exactly. */
static int download_bf16(gptx_backend *be, float *host, const float *src, size_t n) {
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_TRY(gptx_cuda_pinned_reserve(&be->partials, n * sizeof(uint16_t)));
    GPTX_CUDA_TRY(cudaMemcpyAsync(be->partials.host, src, n * sizeof(uint16_t),
                                  cudaMemcpyDeviceToHost, be->compute));
    GPTX_CUDA_TRY(cudaStreamSynchronize(be->compute));
    const uint16_t *h = (const uint16_t *)be->partials.host;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)h[i] << 16;
        memcpy(&host[i], &u, sizeof u);
    }
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_download_act(gptx_backend *be, float *host, const float *src,
                                        size_t n) {
    if (!be->act_bf16) return gptx_cuda_download_f32(be, host, src, n);
    return download_bf16(be, host, src, n);
}

/* Parameters and moments ([p]): bf16 under the pure policy, else fp32. */
GPTX_CUDA_FN int gptx_cuda_upload_param(gptx_backend *be, float *dst, const float *host,
                                        size_t n) {
    if (!be->param_bf16) return gptx_cuda_upload_f32(be, dst, host, n);
    return upload_staged(be, dst, host, n * sizeof(uint16_t), 1);
}

GPTX_CUDA_FN int gptx_cuda_download_param(gptx_backend *be, float *host, const float *src,
                                          size_t n) {
    if (!be->param_bf16) return gptx_cuda_download_f32(be, host, src, n);
    return download_bf16(be, host, src, n);
}

GPTX_CUDA_FN int gptx_cuda_fill_param(gptx_backend *be, float *dst, float value, size_t n) {
    if (!be->param_bf16) return gptx_cuda_fill_f32(be, dst, value, n);
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_LAUNCH(k_fill<gptx_bf16>, gptx_cuda_blocks(n, 256), 256, be->compute, (gptx_bf16 *)dst,
                value, n);
    GPTX_CUDA_LAUNCHED("fill_param");
    return GPTX_OK;
}

/* ---- fixed-order sums ---------------------------------------------------------- */

/* Block b sums elements [b * REDUCE_CHUNK, (b + 1) * REDUCE_CHUNK) in double:
 * each thread a fixed strided subset, then a fixed tree. The partition
 * depends only on n, so the result is the same on every run and device. */
static __global__ void __launch_bounds__(REDUCE_THREADS)
    k_reduce_partials(double *partials, const float *x, size_t n, int squares) {
    __shared__ double buf[REDUCE_THREADS];
    size_t lo = (size_t)blockIdx.x * REDUCE_CHUNK;
    size_t hi = lo + REDUCE_CHUNK < n ? lo + REDUCE_CHUNK : n;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += REDUCE_THREADS) {
        double v = (double)x[i];
        s += squares ? v * v : v;
    }
    buf[threadIdx.x] = s;
    __syncthreads();
    for (int stride = REDUCE_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = buf[0];
}

static int reduce_to_host(gptx_backend *be, double *out, const float *x, size_t n, int squares) {
    *out = 0.0;
    if (n == 0) return GPTX_OK;
    GPTX_TRY(gptx_cuda_enter(be));
    size_t nblocks = (n + REDUCE_CHUNK - 1) / REDUCE_CHUNK;
    if (nblocks > 0x7fffffffu)
        return GPTX_FAIL(GPTX_ERR_SHAPE, "buffer of %zu elements is too large", n);
    void *dev = NULL;
    GPTX_TRY(gptx_cuda_scratch(be, nblocks * sizeof(double), &dev));
    GPTX_LAUNCH(k_reduce_partials, (unsigned)nblocks, REDUCE_THREADS, be->compute, (double *)dev, x,
                n, squares);
    GPTX_CUDA_LAUNCHED("reduce_partials");
    GPTX_TRY(gptx_cuda_pinned_reserve(&be->partials, nblocks * sizeof(double)));
    GPTX_CUDA_TRY(cudaMemcpyAsync(be->partials.host, dev, nblocks * sizeof(double),
                                  cudaMemcpyDeviceToHost, be->compute));
    GPTX_CUDA_TRY(cudaStreamSynchronize(be->compute));
    const double *p = (const double *)be->partials.host;
    double s = 0.0;
    for (size_t i = 0; i < nblocks; i++) s += p[i]; /* chunk order, like the CPU backend */
    *out = s;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_sum_to_host(gptx_backend *be, double *host_sum, const float *x,
                                       size_t n) {
    return reduce_to_host(be, host_sum, x, n, 0);
}

GPTX_CUDA_FN int gptx_cuda_sum_squares_to_host(gptx_backend *be, double *host_sum, const float *x,
                                               size_t n) {
    return reduce_to_host(be, host_sum, x, n, 1);
}
