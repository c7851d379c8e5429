/* The property of gptx-train's option parser, shared by its fuzz target
 * (fuzz_train_options.c) and tests/examples/test_train_options_fuzz.c. */
#ifndef GPTX_FUZZ_TRAIN_OPTIONS_H
#define GPTX_FUZZ_TRAIN_OPTIONS_H

#include <stdio.h>

#include "train/train_options.h"

#define GPTX_FUZZ_TRAIN_MISMATCH 2

/* Parses argv (argv[0] the program). Returns the parser's result: 0
 * accepted (and its saved configuration resumed to the same one), 1
 * --help/--version, -1 refused; or GPTX_FUZZ_TRAIN_MISMATCH when the parser
 * returned something else or an accepted configuration did not come back
 * the same (both texts then written to err, when not NULL). */
int gptx_fuzz_train_options_check(int argc, char **argv, FILE *err);

#endif
