/* Optimizer internals, shared with the checkpoint code. */
#ifndef GPTX_OPTIMIZER_H
#define GPTX_OPTIMIZER_H

#include <stdint.h>

#include "backend.h"
#include "model.h"

struct gptx_optimizer {
    gptx_model *model; /* the only model this optimizer may update */
    gptx_adamw_options opts;
    float *m, *v;      /* first and second moments, nparams each (device buffers) */
    gptx_param_range *ranges;
    int nranges;
    int64_t step;
};

#endif
