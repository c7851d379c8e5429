/* Small helpers every benchmark program shares: a monotonic clock, sorting
 * and medians of timings, and integer flags. Header-only (static inline), so
 * each program stays one translation unit plus the library. The includer
 * defines _POSIX_C_SOURCE (clock_gettime) first. */
#ifndef GPTX_BENCH_COMMON_H
#define GPTX_BENCH_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* CLOCK_MONOTONIC seconds: immune to wall-clock steps. */
static inline double bench_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* qsort comparator for doubles, ascending. */
static inline int bench_cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median of n > 0 values (sorts a copy; mean of the middle pair when n is
 * even); NAN when out of memory. */
static inline double bench_median(const double *v, int n) {
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return NAN;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

/* Parses the value s of --flag as an integer in [min, max]; on anything else
 * prints "prog: --flag expects ..." and returns -1. */
static inline int bench_parse_int(const char *prog, const char *flag, const char *s, int min,
                                  int max, int *out) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "%s: %s expects an integer in [%d, %d], got '%s'\n", prog, flag, min, max,
                s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* The value of "key" in a small flat JSON text (a benchmark's own output):
 * 1 and *out for a number, 0 for null, -1 when the key is absent or holds
 * anything else. Enough for the figures one benchmark reads from another
 * (gptx-bench-train --peak reads gptx-bench-peak's file). */
static inline int bench_json_number(const char *text, const char *key, double *out) {
    size_t klen = strlen(key);
    for (const char *p = strchr(text, '"'); p; p = strchr(p + 1, '"')) {
        if (strncmp(p + 1, key, klen) != 0 || p[1 + klen] != '"') continue;
        const char *v = p + 2 + klen;
        while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
        if (*v != ':') continue; /* the same text as a value, not a key */
        v++;
        while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r') v++;
        if (strncmp(v, "null", 4) == 0) return 0;
        char *end = NULL;
        errno = 0;
        double x = strtod(v, &end);
        if (end == v || errno) return -1;
        *out = x;
        return 1;
    }
    return -1;
}

#endif
