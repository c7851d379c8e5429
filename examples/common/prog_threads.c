/* prog_threads.h */
#include "prog_threads.h"

#include <stdio.h>

#include "gptx/gptx_experimental.h"
#include "prog_flags.h"

int prog_threads_check(const char *prog, int threads) {
    int most = gptx_cpu_max_threads();
    if (threads <= most) return 0;
    char value[32], why[200];
    snprintf(value, sizeof value, "%d", threads);
    snprintf(why, sizeof why, "must be in [0, %d] on this machine (0 = one per core; the most "
             "threads gptx's CPU backend and its OpenBLAS run here)", most);
    return prog_usage_error(prog, "--threads", value, why);
}
