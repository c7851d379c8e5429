#include "cpu_threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

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
    int active;        /* workers still inside the current generation */
    unsigned long generation;
    int shutdown;
};

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
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->shutdown && p->generation == seen) pthread_cond_wait(&p->wake, &p->mu);
        if (p->shutdown) break;
        seen = p->generation;
        pthread_mutex_unlock(&p->mu);
        run_tasks(p);
        pthread_mutex_lock(&p->mu);
        if (--p->active == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
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
            if (pthread_create(&p->threads[i], NULL, worker_main, p) != 0) {
                p->nthreads = i + 1; /* only i workers exist */
                gptx_threadpool_destroy(p);
                return GPTX_FAIL(GPTX_ERR_BACKEND, "pthread_create failed for worker %d", i);
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
        p->shutdown = 1;
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
    p->active = p->nthreads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);

    run_tasks(p);

    pthread_mutex_lock(&p->mu);
    while (p->active > 0) pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
