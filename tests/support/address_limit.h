/* For the tests that run under an address-space limit (RLIMIT_AS): the
 * limit is set relative to what the process has mapped already, and such a
 * test is skipped under ASan, whose shadow memory needs far more address
 * space than any limit (UNDER_ASAN). */
#ifndef GPTX_TEST_ADDRESS_LIMIT_H
#define GPTX_TEST_ADDRESS_LIMIT_H

#include <stddef.h>
#include <stdio.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

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
