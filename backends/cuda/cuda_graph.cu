/* CUDA-graph capture of the op sequences lib/ brackets with graph_begin /
 * graph_end (context option cuda_graphs). A sequence runs normally the first
 * time its key is seen; the second time in a row it is captured on the
 * compute stream, instantiated and launched; from then on it is replayed
 * while the key stays the same. When the backend scratch moves (it only
 * grows), the other graphs are captured again, with the key kept; a scratch
 * that grows during a capture keeps its old block alive with that graph.
 *
 * While a capture is open nothing may wait for the device or free device
 * memory (that would invalidate it): the caching allocator then fails a
 * request it cannot serve instead of releasing its cached blocks. A capture
 * that fails -- out of memory, or invalidated -- is ended and dropped before
 * anything of it ran; after an out-of-memory the cached blocks are released
 * once the capture is over, and lib/ is told to issue the ops again
 * uncaptured (graph_end's *rerun). That key is then not captured again until
 * it changes, so a step that barely fits does not pay a failed capture each
 * time. */
#include "cuda_internal.h"

/* The graph's executable and the scratch blocks it kept, let go. */
static void graph_forget_exec(gptx_backend *be, gptx_cuda_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
    for (int i = 0; i < g->nretired; i++) gptx_cuda_cache_free(&be->cache, g->retired[i]);
    g->nretired = 0;
}

static void graph_drop(gptx_backend *be, gptx_cuda_graph *g) {
    graph_forget_exec(be, g);
    g->nkey = 0;
    g->backoff = 0;
}

GPTX_CUDA_FN void gptx_cuda_graphs_release(gptx_backend *be) {
    for (int i = 0; i < GPTX_CUDA_GRAPH_SEGMENTS; i++) {
        graph_drop(be, &be->graph[i]);
        free(be->graph[i].retired);
        be->graph[i].retired = NULL;
        be->graph[i].retired_cap = 0;
    }
}

static int capture_start(gptx_backend *be, int segment) {
    GPTX_CUDA_TRY(cudaStreamBeginCapture(be->compute, cudaStreamCaptureModeRelaxed));
    be->graph[segment].capturing = 1;
    be->capture_segment = segment;
    be->cache.hold_cached = 1;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_graph_begin(gptx_backend *be, int segment, const uint64_t *key,
                                       int nkey, int *replayed) {
    *replayed = 0;
    if (!be->graphs) return GPTX_OK;
    if (segment < 0 || segment >= GPTX_CUDA_GRAPH_SEGMENTS || nkey <= 0 ||
        nkey > GPTX_CUDA_GRAPH_KEY)
        return GPTX_FAIL(GPTX_ERR_INVALID, "graph segment %d with %d key words", segment, nkey);
    GPTX_TRY(gptx_cuda_enter(be));
    gptx_cuda_graph *g = &be->graph[segment];
    if (be->capture_segment >= 0)
        return GPTX_FAIL(GPTX_ERR_STATE, "graph segment %d begins while segment %d is capturing",
                         segment, be->capture_segment);
    if (g->stale) { /* the ops bake in the scratch address too (column sums, attention) */
        graph_forget_exec(be, g);
        g->stale = 0;
    }
    int same = g->nkey == nkey && memcmp(g->key, key, (size_t)nkey * sizeof *key) == 0;
    if (same && g->exec) {
        GPTX_CUDA_TRY(cudaGraphLaunch(g->exec, be->compute));
        be->graph_replays++;
        *replayed = 1;
        return GPTX_OK;
    }
    if (same && !g->backoff) return capture_start(be, segment); /* seen once: capture */
    if (same) return GPTX_OK; /* its capture failed: run normally */
    graph_drop(be, g); /* a new signature: run it once normally */
    memcpy(g->key, key, (size_t)nkey * sizeof *key);
    g->nkey = nkey;
    return GPTX_OK;
}

/* Ends the capture, keeping the graph only when the ops succeeded. */
static void capture_stop(gptx_backend *be, gptx_cuda_graph *g, int status, cudaGraph_t *graph) {
    g->capturing = 0;
    be->capture_segment = -1;
    be->cache.hold_cached = 0;
    *graph = NULL;
    cudaError_t e = cudaStreamEndCapture(be->compute, graph);
    if (status != GPTX_OK || e != cudaSuccess) {
        if (*graph) cudaGraphDestroy(*graph);
        *graph = NULL;
        cudaGetLastError(); /* an invalidated capture leaves a non-sticky error */
    }
}

/* A capture that failed before anything of it ran: dropped, the key kept
 * with backoff; after an out-of-memory the cache is released (legal now). */
static int capture_abandon(gptx_backend *be, gptx_cuda_graph *g, int status, int *rerun) {
    int nkey = g->nkey;
    graph_drop(be, g);
    g->nkey = nkey;
    g->backoff = 1;
    if (status == GPTX_ERR_NO_MEMORY) gptx_cuda_cache_release(&be->cache);
    if (status == GPTX_OK || status == GPTX_ERR_NO_MEMORY) {
        *rerun = 1; /* another status would come back the same: report it */
        gptx_clear_error();
        return GPTX_OK;
    }
    return status;
}

GPTX_CUDA_FN int gptx_cuda_graph_end(gptx_backend *be, int segment, int status, int *rerun) {
    *rerun = 0;
    if (!be->graphs || segment < 0 || segment >= GPTX_CUDA_GRAPH_SEGMENTS) return status;
    gptx_cuda_graph *g = &be->graph[segment];
    if (!g->capturing) return status;
    cudaGraph_t graph = NULL;
    capture_stop(be, g, status, &graph);
    if (!graph) return capture_abandon(be, g, status, rerun);
    g->stale = 0; /* a scratch grown during the capture is the one it uses */
    cudaError_t e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        g->exec = NULL;
        return capture_abandon(be, g, GPTX_OK, rerun);
    }
    be->graph_captures++;
    /* captured work did not run: run it now */
    GPTX_CUDA_TRY(cudaGraphLaunch(g->exec, be->compute));
    return GPTX_OK;
}

GPTX_CUDA_FN void gptx_cuda_graph_counts(const gptx_backend *be, int64_t *captures,
                                         int64_t *replays) {
    *captures = be->graph_captures;
    *replays = be->graph_replays;
}
