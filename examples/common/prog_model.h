/* Opening a model in any of the formats users have, for the programs. */
#ifndef GPTX_PROG_MODEL_H
#define GPTX_PROG_MODEL_H

#include <stddef.h>

#include "gptx/gptx.h"

/* path is one of:
 *   - a gptx file (gptx_model_save's model, or a training checkpoint);
 *   - a Hugging Face GPT-2 folder: model.safetensors and config.json (n_head,
 *     layer_norm_epsilon), or its model.safetensors with config.json beside it;
 *   - an llm.c model file (gpt2_124M.bin style: magic 20240326).
 * *format gets "gptx", "Hugging Face" or "llm.c". On failure, prints
 * "<prog>: <path>: <why>" on stderr and returns the status. */
int prog_model_open(const char *prog, gptx_model **out, gptx_context *ctx, const char *path,
                    const char **format);

/* The import settings of a Hugging Face config.json's text (NUL-terminated):
 * n_head (or num_attention_heads), layer_norm_epsilon (default 1e-5),
 * tie_word_embeddings (default true); the rest of *c is
 * gptx_model_config_init's, padded_vocab_size 0 (the file's vocabulary).
 * 0, or -1 with why (cap bytes) saying what is wrong: no usable n_head (a
 * whole number in [1, 4096]), a number that is not a number, or a
 * tie_word_embeddings that is not true or false ("yes", "1"). */
int prog_hf_config_parse(const char *json, gptx_model_config *c, char *why, size_t cap);

#endif
