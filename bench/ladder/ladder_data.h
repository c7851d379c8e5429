/* The fixed data of every row: a text tokenized with the GPT-2 tokenizer,
 * split into a training stream and a held-out batch. */
#ifndef GPTX_BENCH_LADDER_DATA_H
#define GPTX_BENCH_LADDER_DATA_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t *tokens; /* (n) the whole text */
    size_t n;
    size_t n_train;  /* tokens[0, n_train) train; the rest is the held-out batch */
    const int32_t *eval_inputs, *eval_targets; /* (B*T) each, held out */
} ladder_data;

/* Tokenizes text_path with the GPT-2 files in tokenizer_dir (encoder.json,
 * vocab.bpe) and keeps the last B*T+1 tokens apart as the held-out batch.
 * The rest must hold a batch of max_rows*T+1 tokens. Prints what failed and
 * returns -1 on error. */
int ladder_data_load(ladder_data *d, const char *text_path, const char *tokenizer_dir, int B,
                     int T, int max_rows);
void ladder_data_free(ladder_data *d);

/* Inputs of training step `step` with `rows` rows of T tokens: consecutive
 * windows of the training stream, in order, starting again at the beginning
 * when the stream is used up; the targets are the inputs shifted by one
 * token (inputs + 1). The same step and rows give the same batch in every row. */
const int32_t *ladder_data_batch(const ladder_data *d, int64_t step, int rows, int T);

#endif
