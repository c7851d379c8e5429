// The README's C++ consumer (install_downstream): the C header from C++, a
// CPU context and the library's version.
#include <gptx/gptx.h>

#include <cstdio>

int main() {
    gptx_context_options o;
    gptx_context_options_init(&o);
    o.backend = GPTX_BACKEND_CPU;
    gptx_context *ctx = nullptr;
    if (gptx_context_create(&ctx, &o) != GPTX_OK) {
        std::fprintf(stderr, "app_cxx: %s\n", gptx_last_error());
        return 1;
    }
    std::printf("app_cxx: gptx %s\n", gptx_version());
    gptx_context_destroy(ctx);
    return 0;
}
