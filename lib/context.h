/* The context: one backend instance, the options it was created with and
 * the precision policy the backend resolved. */
#ifndef GPTX_CONTEXT_H
#define GPTX_CONTEXT_H

#include "backend.h"

struct gptx_context {
    const gptx_backend_ops *ops;
    gptx_backend *be;
    gptx_context_options opts;
    int precision; /* opts.precision with DEFAULT resolved by the backend */
};

#endif
