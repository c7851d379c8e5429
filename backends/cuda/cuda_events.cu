/* CUDA events for gptx_timer: recorded on the compute stream, so timing an
 * interval costs no synchronization; the elapsed time is read later. */
#include "cuda_internal.h"

GPTX_CUDA_FN int gptx_cuda_event_create(gptx_backend *be, void **ev) {
    GPTX_TRY(gptx_cuda_enter(be));
    cudaEvent_t e = NULL;
    GPTX_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDefault)); /* timing enabled */
    *ev = (void *)e;
    return GPTX_OK;
}

GPTX_CUDA_FN void gptx_cuda_event_destroy(gptx_backend *be, void *ev) {
    if (be->ndevices > 1) cudaSetDevice(be->device);
    cudaEventDestroy((cudaEvent_t)ev);
}

GPTX_CUDA_FN int gptx_cuda_event_record(gptx_backend *be, void *ev) {
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_CUDA_TRY(cudaEventRecord((cudaEvent_t)ev, be->compute));
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_event_elapsed(gptx_backend *be, void *start, void *stop,
                                         double *seconds) {
    GPTX_TRY(gptx_cuda_enter(be));
    GPTX_CUDA_TRY(cudaEventSynchronize((cudaEvent_t)stop));
    float ms = 0.0f;
    GPTX_CUDA_TRY(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)stop));
    *seconds = (double)ms * 1e-3;
    return GPTX_OK;
}
