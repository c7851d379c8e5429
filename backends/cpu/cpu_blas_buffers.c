/* OpenBLAS's work buffers, taken before they are needed, so that a lack of
 * memory is an error rather than a hang.
 *
 * OpenBLAS (0.3.21 to at least 0.3.28, driver/others/memory.c) gives every
 * product that packs its operands a work buffer of BUFFER_SIZE bytes
 * (128 MiB on x86-64, fixed when OpenBLAS is built) from a table of buffers:
 * one per thread in builds with USE_TLS, else one table for the process,
 * where a buffer is reused by whichever thread is free. A new buffer is
 * allocated when every existing one is in use, and when that allocation
 * fails OpenBLAS retries it forever: under an address-space limit
 * (ulimit -v) the product never returns and a core spins.
 *
 * So a context's threads take their buffers when the context is created,
 * all at once (so a shared table holds one per thread), each after checking
 * that a mapping of that size can be had: a failed check is
 * GPTX_ERR_NO_MEMORY. A thread outside the pool that calls the context (the
 * caller, when it is not the one that created it) does the same before its
 * first product. The lock keeps threads warming together from taking each
 * other's room between the check and OpenBLAS's allocation, and each of them
 * has its malloc arena before any check: a thread's first malloc maps 64 MiB
 * for its arena (128 MiB for a moment), which, landing between another
 * thread's check and its allocation, made OpenBLAS spin (test_blas_oom hung
 * about once in 50 runs, two at a time). Other threads of the application
 * can still take the room in that window of microseconds. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <cblas.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cpu_runtime.h"
#include "errors.h"

/* OpenBLAS's allocator of work buffers: exported by every OpenBLAS, declared
 * in its internal common.h, not in cblas.h. */
void *blas_memory_alloc(int procpos);
void blas_memory_free(void *buffer);

/* BUFFER_SIZE plus OpenBLAS's header and alignment */
#define BLAS_BUFFER_BYTES (((size_t)128 << 20) + ((size_t)1 << 20))

static _Thread_local int blas_ready; /* this thread has taken a buffer once */
static pthread_mutex_t room_lock = PTHREAD_MUTEX_INITIALIZER;

/* A buffer from OpenBLAS's table (NULL when there is no room for one): an
 * existing free one, or a new one after the check that it can be had. */
static void *take_buffer(void) {
    pthread_mutex_lock(&room_lock);
    void *room = mmap(NULL, BLAS_BUFFER_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                      -1, 0);
    void *buf = NULL;
    if (room != MAP_FAILED) {
        munmap(room, BLAS_BUFFER_BYTES);
        buf = blas_memory_alloc(0);
    }
    pthread_mutex_unlock(&room_lock);
    return buf;
}

/* This thread's malloc arena, made now if it has none (glibc makes one at a
 * thread's first malloc): what it maps is then taken before the check. The
 * volatile keeps the compiler from dropping the pair. */
static void settle_arena(void) {
    void *volatile p = malloc(64);
    free(p);
}

static int no_room(int nthreads) {
    return GPTX_FAIL(GPTX_ERR_NO_MEMORY,
                     "out of host memory: OpenBLAS needs %zu MiB of address space for each thread "
                     "that multiplies matrices (%d here), and cannot have them (a memory limit, "
                     "ulimit -v?)", BLAS_BUFFER_BYTES >> 20, nthreads);
}

int gptx_cpu_blas_max_threads(void) {
    const char *cfg = openblas_get_config();
    const char *at = cfg ? strstr(cfg, "MAX_THREADS=") : NULL;
    long n = at ? strtol(at + strlen("MAX_THREADS="), NULL, 10) : 0;
    return n > 0 && n <= (1 << 20) ? (int)(2 * n - 1) : 0;
}

/* the most threads a context may ask for, or 8 per core if that is more */
#define GPTX_CPU_MAX_THREADS 1024

long gptx_cpu_cores_online(void) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online < 1 ? 1 : online;
}

/* A ceiling, so that a typo costs an error rather than minutes of spawning
 * threads (oversubscribing by 8x is already useless for throughput), and no
 * more than OpenBLAS can serve. */
int gptx_cpu_thread_limit(void) {
    long online = gptx_cpu_cores_online();
    long ceiling = online * 8 > GPTX_CPU_MAX_THREADS ? online * 8 : GPTX_CPU_MAX_THREADS;
    int blas = gptx_cpu_blas_max_threads();
    return blas > 0 && blas < ceiling ? blas : (int)ceiling;
}

static void blas_single(void) {
    if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
}

int gptx_cpu_blas_enter(void) {
    blas_single();
    if (blas_ready) return GPTX_OK;
    settle_arena();
    void *buf = take_buffer();
    if (!buf) return no_room(1);
    blas_memory_free(buf);
    blas_ready = 1;
    return GPTX_OK;
}

typedef struct {
    atomic_int settled, holding, failed;
    int n;
} warm_run;

/* Every task has its arena before any task checks for room, and holds its
 * buffer until every task holds one: a shared table then has one per
 * thread, and each thread runs exactly one task. */
static void warm_task(void *vp, int task) {
    (void)task;
    warm_run *w = vp;
    settle_arena();
    atomic_fetch_add(&w->settled, 1);
    while (atomic_load(&w->settled) < w->n) sched_yield();
    void *buf = take_buffer();
    if (!buf) atomic_store(&w->failed, 1);
    atomic_fetch_add(&w->holding, 1);
    while (atomic_load(&w->holding) < w->n) sched_yield();
    if (buf) {
        blas_memory_free(buf);
        blas_ready = 1;
    }
}

int gptx_cpu_blas_warm_pool(gptx_backend *be) {
    blas_single();
    warm_run w = {.n = be->nthreads};
    gptx_threadpool_run(be->pool, be->nthreads, warm_task, &w);
    return atomic_load(&w.failed) ? no_room(be->nthreads) : GPTX_OK;
}
