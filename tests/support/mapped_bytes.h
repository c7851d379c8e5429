/* The tests that run under an address-space limit (RLIMIT_AS) set it
 * relative to what the process has mapped already. */
#ifndef GPTX_TEST_MAPPED_BYTES_H
#define GPTX_TEST_MAPPED_BYTES_H

#include <stddef.h>
#include <stdio.h>

/* The process's mapped bytes now (VmSize of /proc/self/status; 0 if unread). */
static inline size_t mapped_bytes(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    size_t kib = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %zu kB", &kib) == 1) break;
    if (f) fclose(f);
    return kib << 10;
}

#endif
