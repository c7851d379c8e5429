/* Compiled into every program (gptx_program in cmake/GptxPrograms.cmake):
 * a program's exit ends the process without running the shared libraries'
 * destructors, and a file size limit is an error, not a death.
 *
 * Why: a pthread build of OpenBLAS starts a worker thread per core when it
 * is loaded, before main (gptx never uses them: it runs OpenBLAS
 * single-threaded inside its own pool), and each worker takes a 128 MiB work
 * buffer at once, retrying forever when that fails. Under an address-space
 * limit (ulimit -v) the worker spins, and OpenBLAS's destructor, which joins
 * its workers at exit, then waits forever: the program printed its error and
 * never ended. Everything a program writes is complete before it exits
 * (saves are fsync'ed and renamed, logs flushed); stdio buffers are flushed
 * here. OPENBLAS_NUM_THREADS=1 keeps OpenBLAS from starting the workers. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* on_exit */
#endif
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* A write past a file size limit (ulimit -f, RLIMIT_FSIZE) raises SIGXFSZ,
 * whose default action kills the process (exit 153) with no message, in the
 * middle of a save: the temp file stays. Ignored, the write fails with
 * EFBIG instead, and the library's error path names the file, removes its
 * temp file and leaves the old one whole (issue 34, item 7). */
__attribute__((constructor)) static void prog_fsize_is_an_error(void) { signal(SIGXFSZ, SIG_IGN); }

/* The sanitizers check for leaks in a handler of their own, registered
 * before this one (which would skip it); and they need far more address
 * space than any limit this guards against. */
#if defined(__SANITIZE_ADDRESS__)
#define PROG_EXIT_KEEP_HANDLERS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PROG_EXIT_KEEP_HANDLERS 1
#endif
#endif

#ifndef PROG_EXIT_KEEP_HANDLERS
/* Runs after the handlers registered later (the program's, a module's) and
 * before the ones registered earlier, among them the libraries' destructors. */
static void exit_now(int status, void *arg) {
    (void)arg;
    fflush(NULL);
    _exit(status);
}

__attribute__((constructor)) static void prog_exit_setup(void) { on_exit(exit_now, NULL); }
#endif
