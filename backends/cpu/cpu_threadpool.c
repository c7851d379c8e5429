#include "cpu_threadpool.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

struct gptx_threadpool {
    int nthreads;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    pthread_cond_t done;
    /* the job being run; generation changes once per run() */
    gptx_task_fn fn;
    void *arg;
    int ntasks;
    atomic_int next_task;
    atomic_int active; /* workers still inside the current generation */
    atomic_ulong generation;
    atomic_int shutdown;
};

/* How long a thread polls before it blocks: a worker for the next job, the
 * caller for the workers to finish. Generating one token issues ~180 short
 * ops back to back; waking a blocked thread costs tens of microseconds on a
 * VM, more than many of those ops. Past the budget everybody blocks, so an
 * idle pool uses no CPU (docs/benchmarks.md measures both). */
#define GPTX_POOL_SPIN 2000

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_tasks(gptx_threadpool *p) {
    for (;;) {
        int i = atomic_fetch_add(&p->next_task, 1);
        if (i >= p->ntasks) break;
        p->fn(p->arg, i);
    }
}

static void *worker_main(void *vp) {
    gptx_threadpool *p = vp;
    unsigned long seen = 0;
    for (;;) {
        for (int i = 0; i < GPTX_POOL_SPIN && atomic_load(&p->generation) == seen &&
                        !atomic_load(&p->shutdown);
             i++)
            cpu_relax();
        pthread_mutex_lock(&p->mu);
        while (!atomic_load(&p->shutdown) && atomic_load(&p->generation) == seen)
            pthread_cond_wait(&p->wake, &p->mu);
        pthread_mutex_unlock(&p->mu);
        if (atomic_load(&p->shutdown)) break;
        seen = atomic_load(&p->generation);
        run_tasks(p);
        if (atomic_fetch_sub(&p->active, 1) == 1) { /* the last one out */
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

int gptx_threadpool_create(gptx_threadpool **out, int nthreads) {
    *out = NULL;
    if (nthreads < 1) nthreads = 1;
    gptx_threadpool *p = calloc(1, sizeof *p);
    if (!p) return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
    p->nthreads = nthreads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    if (nthreads > 1) {
        p->threads = calloc((size_t)nthreads - 1, sizeof *p->threads);
        if (!p->threads) {
            gptx_threadpool_destroy(p);
            return GPTX_FAIL(GPTX_ERR_NO_MEMORY, "out of host memory");
        }
        for (int i = 0; i < nthreads - 1; i++) {
            int e = pthread_create(&p->threads[i], NULL, worker_main, p);
            if (e != 0) {
                p->nthreads = i + 1; /* only i workers exist */
                gptx_threadpool_destroy(p);
                /* EAGAIN: no memory for the thread's stack, or a limit on threads */
                return GPTX_FAIL(e == EAGAIN ? GPTX_ERR_NO_MEMORY : GPTX_ERR_BACKEND,
                                 "cannot start thread %d of %d: %s%s", i + 2, nthreads,
                                 strerror(e), e == EAGAIN ? " (out of memory, or a limit on "
                                                            "threads: ulimit -v, ulimit -u)" : "");
            }
        }
    }
    *out = p;
    return GPTX_OK;
}

void gptx_threadpool_destroy(gptx_threadpool *p) {
    if (!p) return;
    if (p->threads) {
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->shutdown, 1);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->nthreads - 1; i++) pthread_join(p->threads[i], NULL);
        free(p->threads);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p);
}

int gptx_threadpool_size(const gptx_threadpool *p) { return p->nthreads; }

void gptx_threadpool_run(gptx_threadpool *p, int ntasks, gptx_task_fn fn, void *arg) {
    if (ntasks <= 0) return;
    if (p->nthreads == 1 || ntasks == 1) {
        for (int i = 0; i < ntasks; i++) fn(arg, i);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->ntasks = ntasks;
    atomic_store(&p->next_task, 0);
    atomic_store(&p->active, p->nthreads - 1);
    atomic_fetch_add(&p->generation, 1); /* publishes the job (seq_cst) */
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p);

    for (int i = 0; i < GPTX_POOL_SPIN && atomic_load(&p->active) > 0; i++) cpu_relax();
    pthread_mutex_lock(&p->mu);
    while (atomic_load(&p->active) > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
