/* Minimal test harness: CHECK records a failure and keeps going, so one run
 * reports every broken expectation; check_exit() turns them into the exit code. */
#ifndef GPTX_TEST_CHECK_H
#define GPTX_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gptx/gptx.h"

static int check_failures = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                        \
        }                                                                            \
    } while (0)

/* Expects a gptx call to return `want`; prints the library's message otherwise. */
#define CHECK_STATUS(call, want)                                                          \
    do {                                                                                  \
        int check_rc_ = (call);                                                           \
        if (check_rc_ != (want)) {                                                        \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (%s)\n", __FILE__, __LINE__, \
                    #call, gptx_status_name(check_rc_), gptx_status_name(want),           \
                    gptx_last_error());                                                   \
            check_failures++;                                                             \
        }                                                                                 \
    } while (0)

#define CHECK_OK(call) CHECK_STATUS(call, GPTX_OK)

/* Expects the calling thread's last error message to contain needle. */
static inline void check_message_has(const char *needle, int line) {
    if (!strstr(gptx_last_error(), needle)) {
        fprintf(stderr, "line %d: message '%s' does not mention '%s'\n", line, gptx_last_error(),
                needle);
        check_failures++;
    }
}
#define CHECK_MSG(needle) check_message_has((needle), __LINE__)

/* Stops the test when a set-up step fails (nothing after it can work). */
#define REQUIRE_OK(call)                                                            \
    do {                                                                            \
        int require_rc_ = (call);                                                   \
        if (require_rc_ != GPTX_OK) {                                               \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #call, \
                    gptx_status_name(require_rc_), gptx_last_error());              \
            return 1;                                                               \
        }                                                                           \
    } while (0)

static inline int check_exit(const char *name) {
    if (check_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

/* The bytes of a file, NUL-terminated (the NUL not counted in *len); NULL
 * when it cannot be read. */
static inline unsigned char *check_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = (unsigned char *)malloc(cap + 1); /* casts: also C++ (.cu tests) */
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        unsigned char *nb = (unsigned char *)realloc(buf, 2 * cap + 1);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    if (buf) buf[n] = 0;
    *len = n;
    return buf;
}

#endif
