/* Precision policy names. Part of the base layer with the error messages:
 * the backends name policies in their messages and call nothing else of lib/. */
#include <string.h>

#include "errors.h"

static const char *const precision_names[] = {"default", "fp32", "tf32", "bf16", "bf16_pure"};

const char *gptx_precision_name(int precision) {
    if (precision < 0 || precision > GPTX_PRECISION_BF16_PURE) return NULL;
    return precision_names[precision];
}

int gptx_precision_from_name(const char *name) {
    GPTX_CHECK_NULL(name);
    for (int i = 0; i <= GPTX_PRECISION_BF16_PURE; i++)
        if (strcmp(name, precision_names[i]) == 0) return i;
    return GPTX_FAIL(GPTX_ERR_INVALID,
                     "precision '%.40s'; expected default, fp32, tf32, bf16 or bf16_pure", name);
}
