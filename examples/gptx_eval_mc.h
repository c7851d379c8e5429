/* gptx-eval --multiple-choice: HellaSwag-style completion scoring
 * (gptx_eval_mc.c). */
#ifndef GPTX_EVAL_MC_H
#define GPTX_EVAL_MC_H

#include <stddef.h>
#include <stdint.h>

#include "gptx/gptx.h"

#define EVAL_MC_MAX_ENDINGS 16

/* One example: the context, its endings and the right one's index. */
typedef struct eval_mc_example {
    char *ctx;
    char *endings[EVAL_MC_MAX_ENDINGS];
    int n_endings;
    int label;
} eval_mc_example;

/* Parses one JSONL line (HellaSwag's layout: "ctx", "endings", "label"; other
 * keys ignored). 0 on success; else -1 with the reason in err. */
int eval_mc_parse_line(const char *line, size_t len, eval_mc_example *ex, char *err,
                       size_t err_cap);
void eval_mc_example_free(eval_mc_example *ex);

typedef struct eval_mc_result {
    size_t examples, correct, correct_norm;
    size_t rows, truncated_rows; /* rows (endings) scored; rows cut to the context */
    size_t passes;               /* forward passes */
} eval_mc_result;

typedef struct eval_mc_options {
    const char *path;    /* the JSONL file */
    const char *details; /* NULL, or a JSONL file of every ending's losses */
    int T;               /* positions per row at most (<= the model's context) */
    int batch_rows;      /* rows per forward pass (endings of whole examples; >= 1 example) */
    int special;         /* <|endoftext|> in the text: 1 = the special token */
} eval_mc_options;

/* Scores every example of o->path; 0 done, else 1 with a message printed
 * (the file's line named for a bad line). */
int eval_mc_run(gptx_model *m, const gptx_tokenizer *tok, const eval_mc_options *o,
                eval_mc_result *r);

#endif
