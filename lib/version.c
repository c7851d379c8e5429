#include "gptx/gptx.h"

const char *gptx_version(void) { return GPTX_VERSION_STRING; }

void gptx_version_numbers(int *major, int *minor, int *patch) {
    if (major) *major = GPTX_VERSION_MAJOR;
    if (minor) *minor = GPTX_VERSION_MINOR;
    if (patch) *patch = GPTX_VERSION_PATCH;
}

unsigned gptx_features(void) {
    unsigned f = GPTX_FEATURE_CPU | GPTX_FEATURE_BLAS;
#ifdef GPTX_HAVE_CUDA
    f |= GPTX_FEATURE_CUDA;
#endif
#ifdef GPTX_HAVE_NCCL
    f |= GPTX_FEATURE_NCCL;
#endif
#ifdef GPTX_HAVE_MPI
    f |= GPTX_FEATURE_MPI;
#endif
    return f;
}
