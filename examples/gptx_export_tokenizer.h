/* The tokenizer files each ecosystem looks for beside a model gptx-export
 * writes (docs/export.md):
 *   Hugging Face: tokenizer_config.json (GPT2Tokenizer, the end-of-text
 *                 token as bos/eos/unk, model_max_length = the context),
 *                 beside vocab.json and merges.txt;
 *   llm.c:        gpt2_tokenizer.bin (tokenizer.h's format, version 2:
 *                 every token's bytes and the end-of-text id), the file
 *                 llm.c's programs open to print text. */
#ifndef GPTX_EXPORT_TOKENIZER_H
#define GPTX_EXPORT_TOKENIZER_H

#include <gptx/gptx.h>

/* dir/tokenizer_config.json for a model of context T. 0, or -1 after a
 * message. */
int export_hf_tokenizer_config(const char *prog, const gptx_tokenizer *tok, int T,
                               const char *dir);

/* gpt2_tokenizer.bin in the folder of model_path (llm.c reads it from
 * there). *written gets its path (malloc'ed). 0, or -1 after a message. */
int export_llmc_tokenizer(const char *prog, const gptx_tokenizer *tok, const char *model_path,
                          char **written);

#endif
