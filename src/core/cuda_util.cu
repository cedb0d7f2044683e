/*
 * What the .cu files share (cuda_util.h): the failures of CUDA calls as messages, device lists
 * freed, cuBLAS handles, event pairs for timing, and the captured graphs of the real-time stages.
 */
#include "core/cuda_util.h"

/* the functions below take the context and the stage as ctx and stage */
#define SW_CUDA_CTX   ctx
#define SW_CUDA_STAGE stage

sw_status sw_cuda_fail_call(sw_context *ctx, const char *stage, const char *call, cudaError_t e)
{
    const sw_status st = e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA;
    if (!stage)
        return sw_fail(ctx, st, "CUDA call %s failed: %s", call, cudaGetErrorString(e));
    return sw_fail(ctx, st, "%s: CUDA call %s failed: %s", stage, call, cudaGetErrorString(e));
}

sw_status sw_cuda_fail_status(sw_context *ctx, const char *stage, const char *lib, const char *call,
                              int code, int nomem)
{
    const sw_status st = nomem ? SW_ENOMEM : SW_ECUDA;
    if (!stage)
        return sw_fail(ctx, st, "%s call %s failed (%d)", lib, call, code);
    return sw_fail(ctx, st, "%s: %s call %s failed (%d)", stage, lib, call, code);
}

void sw_cuda_free_all(void *const *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            cudaFree(p[i]);
}

sw_status sw_cublas_create(sw_context *ctx, const char *stage, cudaStream_t s, size_t ws_bytes,
                           cublasHandle_t *blas, void **ws)
{
    SW_CUBLAS(cublasCreate(blas));
    SW_CUBLAS(cublasSetStream(*blas, s));
    SW_CU(cudaMalloc(ws, ws_bytes));
    SW_CUBLAS(cublasSetWorkspace(*blas, *ws, ws_bytes));
    return SW_OK;
}

sw_status sw_event_pair_create(sw_context *ctx, const char *stage, sw_event_pair *ev)
{
    SW_CU(cudaEventCreate(&ev->t0));
    SW_CU(cudaEventCreate(&ev->t1));
    return SW_OK;
}

void sw_event_pair_destroy(sw_event_pair *ev)
{
    if (ev->t0)
        cudaEventDestroy(ev->t0);
    if (ev->t1)
        cudaEventDestroy(ev->t1);
    ev->t0 = ev->t1 = NULL;
}

double sw_event_pair_us(const sw_event_pair *ev)
{
    float ms = 0.0f;
    if (cudaEventSynchronize(ev->t1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, ev->t0, ev->t1) != cudaSuccess)
        return -1.0;
    return 1e3 * (double)ms;
}

sw_status sw_graph_begin(sw_context *ctx, const char *stage, cudaStream_t s)
{
    SW_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    return SW_OK;
}

sw_status sw_graph_end(sw_graph *g, sw_context *ctx, const char *stage, const char *what,
                       cudaStream_t s, sw_status body, int upload)
{
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (body != SW_OK || e != cudaSuccess) {
        if (graph)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        if (body != SW_OK)
            return body;
        return sw_fail(ctx, SW_ECUDA, "%s: capturing the %s's graph failed: %s", stage, what,
                       cudaGetErrorString(e));
    }
    const cudaError_t ei = cudaGraphInstantiate(&g->exec, graph, 0);
    if (ei != cudaSuccess) {
        cudaGraphDestroy(graph);
        g->exec = NULL;
        cudaGetLastError();
        return sw_fail(ctx, SW_ECUDA, "%s: instantiating the %s's graph failed: %s", stage, what,
                       cudaGetErrorString(ei));
    }
    g->graph = graph;
    if (upload)
        SW_CU(cudaGraphUpload(g->exec, s));
    return SW_OK;
}

void sw_graph_destroy(sw_graph *g)
{
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    g->exec = NULL;
    g->graph = NULL;
}
