/* --threads: one bound, the CPU backend's (gptx_cpu_max_threads), checked
 * when the flags are read, before any context (and so any OpenBLAS buffer)
 * exists, in the user's terms (issue 34, item 6). */
#ifndef GPTX_PROG_THREADS_H
#define GPTX_PROG_THREADS_H

/* 0 when threads (0 = one per core) is at most the bound; else -1 after
 * "<prog>: --threads N: must be in [0, MAX] on this machine ... (see
 * --help)" on stderr: a usage error (exit 2). Nothing is printed on
 * standard output. */
int prog_threads_check(const char *prog, int threads);

#endif
