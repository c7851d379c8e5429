#include "gptx/gptx.h"
#include "module.h"

/* CMakeLists.txt names the SONAME and the package version; the header must agree. */
#if defined(GPTX_BUILD_ABI_VERSION) && GPTX_BUILD_ABI_VERSION != GPTX_ABI_VERSION
#error "GPTX_ABI_VERSION in include/gptx/gptx.h differs from GPTX_ABI_VERSION in CMakeLists.txt"
#endif
#if defined(GPTX_BUILD_VERSION_NUMBER) && GPTX_BUILD_VERSION_NUMBER != GPTX_VERSION_NUMBER
#error "the project VERSION in CMakeLists.txt differs from GPTX_VERSION_* in include/gptx/gptx.h"
#endif

const char *gptx_version(void) { return GPTX_VERSION_STRING; }

void gptx_version_numbers(int *major, int *minor, int *patch) {
    if (major) *major = GPTX_VERSION_MAJOR;
    if (minor) *minor = GPTX_VERSION_MINOR;
    if (patch) *patch = GPTX_VERSION_PATCH;
}

/* CUDA, NCCL and MPI come in modules (lib/core/module.h): a feature is there
 * when its module loads on this machine (looked up once, on first use). */
unsigned gptx_features(void) {
    unsigned f = GPTX_FEATURE_CPU | GPTX_FEATURE_BLAS;
    const gptx_module_exports *cuda = gptx_module_lookup("cuda");
    if (cuda) f |= GPTX_FEATURE_CUDA;
    if (cuda && cuda->nccl_create) f |= GPTX_FEATURE_NCCL;
    if (gptx_module_lookup("mpi")) f |= GPTX_FEATURE_MPI;
#ifdef GPTX_HAVE_DNNL
    f |= GPTX_FEATURE_DNNL;
#endif
    return f;
}
