/* The corpus replay test of one fuzz target, compiled once per target with
 * GPTX_FUZZ_ONE and GPTX_FUZZ_SEEDS naming its functions (fuzz/fuzz_util.h)
 * and GPTX_FUZZ_SEED_MIN what a seed must return (default 1).
 *
 *   <test> DIR                 replay every file (fuzz_replay.h)
 *   <test> DIR --write-seeds   (re)create the seed files in DIR */
#define _POSIX_C_SOURCE 200809L
#include "fuzz_replay.h"

#include "fuzz_util.h"
#include "gptx/gptx.h"

#ifndef GPTX_FUZZ_SEED_MIN
#define GPTX_FUZZ_SEED_MIN 1
#endif

static int seed_ok(const char *name, int accepted) {
    (void)name;
    return accepted >= GPTX_FUZZ_SEED_MIN;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR [--write-seeds]\n", argv[0]);
        return 2;
    }
    if (argc == 3 && strcmp(argv[2], "--write-seeds") == 0) return GPTX_FUZZ_SEEDS(argv[1]) ? 1 : 0;
    int failures = fuzz_replay_dir(argv[1], GPTX_FUZZ_ONE, seed_ok, 3);
    if (failures) fprintf(stderr, "%s: %d failure(s)\n", argv[0], failures);
    return failures ? 1 : 0;
}
