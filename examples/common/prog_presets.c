#include "prog_presets.h"

#include <stdio.h>
#include <string.h>

/* Times: `gptx-train --preset NAME --threads 2` with its recipe, whole run
 * (tokenizing, steps, validation every 50 steps, the sample, saving), fp32,
 * on a 2-core AMD EPYC Zen 3 (AVX2); the two 124M presets from 3 steps
 * (docs/programs.md "Presets"). */
static const prog_preset presets[] = {
    {"micro", 2, 2, 64, 32, 4, 50, 1e-3f, 5, "the-verdict.txt",
     "smoke tests: a model that runs in seconds and learns little", "2 cores: 4 s whole run; val loss 8.80 (unigram 8.34)"},
    {"tiny", 4, 4, 128, 64, 8, 300, 1e-3f, 20, "the-verdict.txt",
     "the default: a first run on a short story", "2 cores: 1m26s whole run; val loss 6.47 (unigram 8.34)"},
    {"shakespeare", 4, 4, 192, 128, 8, 300, 2e-3f, 20, "tinyshakespeare.txt",
     "minutes on tinyshakespeare, well below its unigram baseline", "2 cores: 4m04s whole run; val loss 5.75 (unigram 6.51)"},
    {"small", 4, 4, 256, 256, 4, 300, 1e-3f, 20, "middlemarch.txt",
     "the benchmark model (bench/, docs/benchmarks.md)", "2 cores: 5m05s whole run; val loss 4.60 (unigram 6.25)"},
    {"gpt2-124M-short", 12, 12, 768, 256, 2, 300, 6e-4f, 20, "middlemarch.txt",
     "GPT-2 small's shape on 256-token rows (the second benchmark)", "2 cores: 3.5 s a step, about 18 min for the recipe"},
    {"gpt2-124M", 12, 12, 768, 1024, 8, 300, 6e-4f, 20, "middlemarch.txt",
     "GPT-2 small (124M), for a GPU or weights to fine-tune", "2 cores: 55 s a step, about 4.6 h for the recipe"},
};
enum { N_PRESETS = sizeof presets / sizeof presets[0] };

const prog_preset *prog_preset_find(const char *name) {
    for (int i = 0; name && i < N_PRESETS; i++)
        if (!strcmp(presets[i].name, name)) return &presets[i];
    return NULL;
}

const char *prog_preset_names(void) {
    return "micro, tiny, shakespeare, small, gpt2-124M-short or gpt2-124M";
}

size_t prog_preset_parameters(const prog_preset *p, int padded_vocab) {
    size_t C = (size_t)p->n_embd;
    size_t block = 12 * C * C + 13 * C; /* 2 LayerNorms, qkv, proj, fc, fc proj */
    return (size_t)padded_vocab * C + (size_t)p->context * C + (size_t)p->n_layer * block + 2 * C;
}

void prog_presets_print(FILE *out, const char *indent) {
    for (int i = 0; i < N_PRESETS; i++) {
        const prog_preset *p = &presets[i];
        double m = (double)prog_preset_parameters(p, 50304) / 1e6;
        fprintf(out, "%s%-16s %d layers, %d heads, width %d, T %d: %.1fM parameters\n", indent,
                p->name, p->n_layer, p->n_head, p->n_embd, p->context, m);
        fprintf(out, "%s%-16s %s\n", indent, "", p->use);
        fprintf(out, "%s%-16s %d steps, batch %d x %d, lr %g, %s\n", indent, "",
                p->steps, p->batch, p->context, (double)p->lr, p->text);
        fprintf(out, "%s%-16s %s\n", indent, "", p->time);
    }
}

const prog_preset *prog_preset_lookup(const char *prog, const char *flag, const char *name) {
    const prog_preset *p = prog_preset_find(name);
    if (!p)
        fprintf(stderr, "%s: %s %s: expected %s (see --help)\n", prog, flag, name ? name : "",
                prog_preset_names());
    return p;
}
