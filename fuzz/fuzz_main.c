/* The libFuzzer side of every target, compiled once per target with
 * GPTX_FUZZ_ONE naming its entry (fuzz_util.h); the same entry is what the
 * corpus replay test (tests/support/fuzz_replay.c) calls. */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)GPTX_FUZZ_ONE(data, size);
    return 0;
}
