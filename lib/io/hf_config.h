/* A Hugging Face GPT-2 config.json, as gptx_model_import_hf reads it: the
 * settings the weights cannot tell (heads, LayerNorm eps, tied head) and the
 * sizes they must agree with. Missing keys take transformers' GPT2Config
 * defaults, so a folder imports as transformers would build it. */
#ifndef GPTX_HF_CONFIG_H
#define GPTX_HF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* GPT-2's config.json is under 1 KB; the bound only stops a wrong file. */
#define GPTX_MAX_HF_CONFIG_BYTES ((size_t)16 << 20)

typedef struct gptx_hf_config {
    const char *label;   /* the config's path, for messages (not owned) */
    int n_head;          /* n_head / num_attention_heads (default 12) */
    float layernorm_eps; /* layer_norm_epsilon (default 1e-5) */
    int tied_head;       /* tie_word_embeddings (default true) */
    /* what the weights must hold, -1 where the config does not say */
    int64_t vocab_size, n_positions, n_embd, n_layer;
} gptx_hf_config;

/* Parses the text of a config.json (len bytes). GPTX_ERR_FORMAT naming the
 * key for what is not JSON, a value of the wrong kind, a head count outside
 * [1, 4096], an eps that is not a positive finite number, or two spellings
 * of one key that disagree (n_head, num_attention_heads);
 * GPTX_ERR_UNSUPPORTED for a model gptx does not compute: model_type other
 * than gpt2, activation_function other than the tanh GELU (gelu_new,
 * gelu_pytorch_tanh), scale_attn_weights false,
 * scale_attn_by_inverse_layer_idx true. */
int gptx_hf_config_parse(gptx_hf_config *hc, const char *json, size_t len, const char *label);

/* Reads and parses the config.json at path (a regular file, bounded). */
int gptx_hf_config_read(gptx_hf_config *hc, const char *path);

#endif
