/* A small fixed pthread pool: run(ntasks) calls fn(arg, i) for every i once.
 * Tasks are independent; which thread runs which task never changes results
 * because every caller partitions work so each output has one writer. */
#ifndef GPTX_CPU_THREADPOOL_H
#define GPTX_CPU_THREADPOOL_H

typedef struct gptx_threadpool gptx_threadpool;
typedef void (*gptx_task_fn)(void *arg, int task);

/* nthreads >= 1 (the caller's thread counts as one). */
int gptx_threadpool_create(gptx_threadpool **out, int nthreads);
void gptx_threadpool_destroy(gptx_threadpool *pool);
int gptx_threadpool_size(const gptx_threadpool *pool);
void gptx_threadpool_run(gptx_threadpool *pool, int ntasks, gptx_task_fn fn, void *arg);

#endif
