/* libFuzzer target for the checkpoint and import loaders (see fuzz_entry.h). */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_entry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)gptx_fuzz_one_input(data, size);
    return 0;
}
