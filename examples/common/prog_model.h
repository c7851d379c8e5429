/* Opening a model in any of the formats users have, for the programs. */
#ifndef GPTX_PROG_MODEL_H
#define GPTX_PROG_MODEL_H

#include <stddef.h>

#include "gptx/gptx.h"

/* path is one of:
 *   - a gptx file (gptx_model_save's model, or a training checkpoint);
 *   - a Hugging Face GPT-2 folder: model.safetensors and config.json (the
 *     library reads n_head, layer_norm_epsilon, tie_word_embeddings from it),
 *     or its model.safetensors with config.json beside it;
 *   - an llm.c model file (gpt2_124M.bin style: magic 20240326).
 * *format gets "gptx", "Hugging Face" or "llm.c". On failure, prints
 * "<prog>: <path>: <why>" on stderr and returns the status. */
int prog_model_open(const char *prog, gptx_model **out, gptx_context *ctx, const char *path,
                    const char **format);

#endif
