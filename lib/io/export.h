/* The exports of a model to other tools' formats (export_hf.c, export_llmc.c):
 * what both refuse. */
#ifndef GPTX_EXPORT_H
#define GPTX_EXPORT_H

#include "gptx/gptx.h"

/* GPTX_ERR_UNSUPPORTED when the config holds what a format without a padded
 * vocabulary cannot express (padded logits in the softmax); format names
 * the target in the message, func (the public call) starts it. */
int gptx_export_check_common(const gptx_model_config *c, const char *format, const char *func);

#endif
