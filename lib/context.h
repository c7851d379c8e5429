/* The context: one backend instance and the options it was created with. */
#ifndef GPTX_CONTEXT_H
#define GPTX_CONTEXT_H

#include "backend.h"

struct gptx_context {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    gptx_context_options opts;
};

#endif
