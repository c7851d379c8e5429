/* The model presets every shipped program knows (gptx-train, gptx-compare,
 * gptx-bench-train, ...): one table, so a name means one model everywhere. */
#ifndef GPTX_PROG_PRESETS_H
#define GPTX_PROG_PRESETS_H

#include <stddef.h>
#include <stdio.h>

typedef struct prog_preset {
    const char *name;
    int n_layer, n_head, n_embd, context; /* the model; context = T of a training row */
    /* gptx-train's recipe: rows per step, optimizer steps, peak lr, warm-up
     * steps, and the bundled text (in the data folder) it trains on */
    int batch, steps;
    float lr;
    int warmup;
    const char *text;
    const char *use;  /* what it is for, one line */
    const char *time; /* measured on 2 cores, for --help */
} prog_preset;

/* The preset called name, or NULL. */
const prog_preset *prog_preset_find(const char *name);

/* "tiny, shakespeare, ..." for messages. */
const char *prog_preset_names(void);
/* prog_preset_find, or NULL after "<prog>: <flag> <name>: expected <the
 * names> (see --help)" on stderr: the programs' usage wording
 * (prog_flags.h), for a --config/--preset flag. */
const prog_preset *prog_preset_lookup(const char *prog, const char *flag, const char *name);

/* Parameters of the preset's model with the GPT-2 vocabulary padded to
 * padded_vocab (tied head: wte, wpe, the blocks, the final LayerNorm). */
size_t prog_preset_parameters(const prog_preset *p, int padded_vocab);

/* The table for --help: name, shape, parameters, recipe and measured time,
 * each line starting with indent. */
void prog_presets_print(FILE *out, const char *indent);

#endif
