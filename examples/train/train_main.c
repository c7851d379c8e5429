/*
 * gptx-train: the project's main job. With no arguments it trains a tiny GPT
 * on the bundled data/the-verdict.txt (GPT-2 BPE tokens) on the CPU and
 * prints a sample continuation of "Every effort moves you".
 * `gptx-train --help` lists every flag.
 *
 * Data parallel with no change: under `mpirun -np N` (CPU, MPI engine) or
 * torchrun-style variables (CUDA, NCCL engine) every rank trains on its own
 * share of each global batch, gradients are averaged by token count, and
 * rank 0 alone prints, samples and writes checkpoints (docs/distributed.md).
 *
 * main is the list of stages over one run state (train_run.h): each stage
 * stops the run after its message, and run_close frees what was opened and
 * returns the exit status (0, 1 on failure, 2 for a bad flag, 130 after
 * Ctrl-C, 143 after SIGTERM).
 */
#include "train_run.h"

int main(int argc, char **argv) {
    train_run run = {.world = 1, .rep = {.dir = {.fd = -1}}, .next_unit = -1}; /* the report closes unopened too */
    if (run_parse(&run, argc, argv) == 0 &&   /* flags, --resume's configuration, launcher */
        run_open_machine(&run) == 0 &&        /* context, communicator */
        run_open_tokenizer(&run) == 0 &&      /* GPT-2 BPE */
        run_open_init_from(&run) == 0 &&      /* --init-from's model: the shape of the data */
        run_open_data(&run) == 0 &&           /* loaders, data hash, unigram baseline, steps */
        run_open_model(&run) == 0 &&          /* model, AdamW, sampler, --resume's checkpoint */
        run_open_output(&run) == 0 &&         /* out-dir, metrics, header */
        run_loop(&run) == 0)                  /* evaluate, sample, checkpoint, step */
        run_finish(&run);                     /* sample, model, plot, summary; the status */
    return run_close(&run);
}
