/* Replays a fuzz corpus folder (seeds and every input a fuzzer ever crashed
 * on) through a target's entry function, the one its libFuzzer binary
 * calls: under ASan/UBSan this is the regression test of the fuzzers'
 * findings. Seeds ("seed_*") must also be accepted, so they stay valid
 * starting points for the fuzzer. Needs _POSIX_C_SOURCE 200809L (strdup). */
#ifndef GPTX_TEST_FUZZ_REPLAY_H
#define GPTX_TEST_FUZZ_REPLAY_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gptx/gptx.h"

static int fuzz_replay_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every file of dir, in name order, through one(); seed_ok(name, accepted)
 * judges each seed. Returns the number of failures (unreadable files, seeds
 * not accepted, fewer than min_seeds seeds). */
static int fuzz_replay_dir(const char *dir, int (*one)(const uint8_t *, size_t),
                           int (*seed_ok)(const char *name, int accepted), int min_seeds) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", dir);
        return 1;
    }
    char *names[4096];
    int n = 0, failures = 0, seeds = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 4096)
        if (e->d_name[0] != '.') names[n++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, fuzz_replay_cmp);
    for (int i = 0; i < n; i++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        size_t len = 0;
        unsigned char *data = check_read_file(p, &len);
        if (!data) {
            fprintf(stderr, "cannot read %s\n", p);
            failures++;
        } else {
            printf("%-44s %7zu bytes", names[i], len);
            fflush(stdout); /* the name shows even when the input aborts */
            int accepted = one(data, len);
            printf("  accepted %d\n", accepted);
            if (strncmp(names[i], "seed_", 5) == 0) {
                seeds++;
                if (!seed_ok(names[i], accepted)) {
                    fprintf(stderr,
                            "%s: seed accepted %d time(s), not as expected (last error: %s)\n",
                            names[i], accepted, gptx_last_error());
                    failures++;
                }
            }
        }
        free(data);
        free(names[i]);
    }
    if (seeds < min_seeds) {
        fprintf(stderr, "%s: %d seed(s), expected at least %d\n", dir, seeds, min_seeds);
        failures++;
    }
    return failures;
}

#endif
