/* CUDA-graph capture of the op sequences lib/ brackets with graph_begin /
 * graph_end (context option cuda_graphs). A sequence runs normally the first
 * time its key is seen; the second time in a row it is captured on the
 * compute stream, instantiated and launched; from then on it is replayed
 * while the key stays the same. When the backend scratch moves (it only
 * grows), graphs are captured again, with the key kept. */
#include "cuda_internal.h"

static void graph_drop(gptx_cuda_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    g->exec = NULL;
    g->nkey = 0;
}

GPTX_CUDA_FN void gptx_cuda_graphs_release(gptx_backend *be) {
    for (int i = 0; i < GPTX_CUDA_GRAPH_SEGMENTS; i++) graph_drop(&be->graph[i]);
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
    if (g->capturing) return GPTX_FAIL(GPTX_ERR_STATE, "graph segment %d is capturing", segment);
    if (g->stale) { /* the ops bake in the scratch address too (column sums, attention) */
        if (g->exec) cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        g->stale = 0;
    }
    int same = g->nkey == nkey && memcmp(g->key, key, (size_t)nkey * sizeof *key) == 0;
    if (same && g->exec) {
        GPTX_CUDA_TRY(cudaGraphLaunch(g->exec, be->compute));
        be->graph_replays++;
        *replayed = 1;
        return GPTX_OK;
    }
    if (same) { /* seen once: capture this run of the sequence */
        GPTX_CUDA_TRY(cudaStreamBeginCapture(be->compute, cudaStreamCaptureModeRelaxed));
        g->capturing = 1;
        return GPTX_OK;
    }
    graph_drop(g); /* a new signature: run it once normally */
    memcpy(g->key, key, (size_t)nkey * sizeof *key);
    g->nkey = nkey;
    return GPTX_OK;
}

GPTX_CUDA_FN int gptx_cuda_graph_end(gptx_backend *be, int segment, int status) {
    if (!be->graphs || segment < 0 || segment >= GPTX_CUDA_GRAPH_SEGMENTS) return status;
    gptx_cuda_graph *g = &be->graph[segment];
    if (!g->capturing) return status;
    g->capturing = 0;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(be->compute, &graph);
    if (status != GPTX_OK || e != cudaSuccess) {
        if (graph) cudaGraphDestroy(graph);
        graph_drop(g);
        if (status != GPTX_OK) return status; /* the ops' own error */
        return GPTX_FAIL(GPTX_ERR_BACKEND, "cudaStreamEndCapture failed: %s",
                         cudaGetErrorString(e));
    }
    g->stale = 0; /* a scratch grown during the capture is the one it uses */
    e = cudaGraphInstantiate(&g->exec, graph, 0);
    cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        g->exec = NULL;
        graph_drop(g);
        return GPTX_FAIL(GPTX_ERR_BACKEND, "cudaGraphInstantiate failed: %s", cudaGetErrorString(e));
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
