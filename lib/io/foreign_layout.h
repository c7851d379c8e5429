/* What the llm.c and Hugging Face GPT-2 files look like from gptx's
 * parameter layout: shared by their importers (import.c) and exporters
 * (export_llmc.c, export_hf.c), so a read and a write cannot disagree. */
#ifndef GPTX_FOREIGN_LAYOUT_H
#define GPTX_FOREIGN_LAYOUT_H

#include "model.h"

/* llm.c model files (train_gpt2.c's gpt2_build_from_checkpoint): a header
 * of 256 int32 (magic, version 3 fp32 / 5 bf16, maxT, V, L, NH, C, Vp),
 * then 16 arrays in this order, the per-layer ones stacked over layers. */
#define GPTX_LLMC_MAGIC 20240326
#define GPTX_LLMC_HEADER_INTS 256
#define GPTX_LLMC_HEADER_BYTES (GPTX_LLMC_HEADER_INTS * 4)
enum { GPTX_LLMC_NTENSORS = 16 };

/* llm.c's name of array k (its ParameterTensors field). */
extern const char *const gptx_llmc_names[GPTX_LLMC_NTENSORS];
/* 1 when array k is stacked over the layers (ln1w .. fcprojb). */
int gptx_llmc_per_layer(int k);
/* gptx's layout index of llm.c array k, layer l for the stacked ones (-1
 * where the layout has no such tensor: a bias the model leaves out). */
int gptx_llmc_index(const gptx_layout *L, int k, int l);

/* name ends with suffix. */
int gptx_name_ends_with(const char *name, const char *suffix);
/* A Hugging Face Conv1D weight (c_attn, attn c_proj, c_fc, mlp c_proj):
 * stored (in, out), the transpose of gptx's (out, in). */
int gptx_hf_is_conv1d(const char *name);

#endif
