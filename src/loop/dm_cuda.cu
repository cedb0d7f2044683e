/*
 * The GPU twins of dm.c's runs: the shaper (seed 002 Eq. 12 on a grid, out = Fy U Fx^T as two
 * cuBLAS sgemm) and the projector (u = P c, Eq. 13 / 15 applied, one cuBLAS sgemv). dm.c builds
 * the matrices on the host; this file uploads them at create and runs on the context's stream
 * with a cuBLAS handle of its own. Host and pinned arrays are staged through the plan's device
 * buffers and the call waits for the result; device arrays are read and written in place and the
 * work is only queued (no allocation, no synchronisation: capturable into a graph).
 */
#include "core/core_internal.h"
#include "loop/loop_internal.h"
#include "core/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   ctx
#define SW_CUDA_STAGE "dm"

/* cuBLAS's workspace, the plan's own so that a captured run allocates nothing */
#define DM_BLAS_WS ((size_t)1 << 20)

/* ================================================================== shaper */

struct dm_shaper_gpu {
    cublasHandle_t blas;
    void *blas_ws;
    float *Fx, *Fy; /* width x nax and height x nay, row-major (dm.c's)            */
    float *T;       /* nay x width row-major: U Fx^T                               */
    float *in;      /* staging for host commands, nax nay                          */
    float *out;     /* staging for a host output, width x height                   */
};

extern "C" void sw_dm_shaper_gpu_destroy(sw_dm_shaper *s)
{
    dm_shaper_gpu *g = (dm_shaper_gpu *)s->gpu;
    if (!g)
        return;
    cudaSetDevice(s->ctx->device);
    cudaStreamSynchronize((cudaStream_t)s->ctx->stream);
    if (g->blas)
        cublasDestroy(g->blas);
    SW_CUDA_FREE(g->blas_ws, g->Fx, g->Fy, g->T, g->in, g->out);
    free(g);
    s->gpu = NULL;
}

extern "C" sw_status sw_dm_shaper_gpu_create(sw_dm_shaper *s)
{
    sw_context *ctx = s->ctx;
    dm_shaper_gpu *g = (dm_shaper_gpu *)calloc(1, sizeof(dm_shaper_gpu));
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "dm shaper: out of memory");
    s->gpu = g; /* sw_dm_shaper_gpu_destroy frees what is made below, also after a failure */
    SW_CU(cudaSetDevice(ctx->device));
    const size_t W = (size_t)s->grid.width, H = (size_t)s->grid.height;
    const size_t nax = (size_t)s->nax, nay = (size_t)s->nay;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    SW_CU(sw_cuda_upload(&g->Fx, s->Fx, W * nax, st));
    SW_CU(sw_cuda_upload(&g->Fy, s->Fy, H * nay, st));
    SW_CU(sw_cuda_alloc(&g->T, nay * W));
    SW_CU(sw_cuda_alloc(&g->in, nax * nay));
    SW_CU(sw_cuda_alloc(&g->out, W * H));
    SW_CU(cudaStreamSynchronize(st));
    return sw_cublas_create(ctx, SW_CUDA_STAGE, st, DM_BLAS_WS, &g->blas, &g->blas_ws);
}

extern "C" sw_status sw_dm_shaper_gpu_run(sw_dm_shaper *s, const float *commands, sw_memory memory,
                                          float *out)
{
    sw_context *ctx = s->ctx;
    dm_shaper_gpu *g = (dm_shaper_gpu *)s->gpu;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    SW_CU(cudaSetDevice(ctx->device));
    const int W = s->grid.width, H = s->grid.height, nax = s->nax, nay = s->nay;
    const int dev = memory == SW_MEM_DEVICE;
    const float *u = commands;
    float *o = out;
    if (!dev) {
        SW_CU(cudaMemcpyAsync(g->in, commands, (size_t)nax * nay * sizeof(float),
                              cudaMemcpyHostToDevice, st));
        u = g->in;
        o = g->out;
    }
    /* Column-major views of dm.c's row-major arrays: Fx is nax x width (Fx^T), U is nax x nay
     * (U^T), T is width x nay (T^T), Fy is nay x height (Fy^T), out is width x height.
     * T^T = Fx U^T = (Fx^T)^T U^T, then out^T = T^T Fy^T: the CPU's two products. */
    const float one = 1.0f, zero = 0.0f;
    SW_CUBLAS(cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, W, nay, nax, &one, g->Fx, nax, u, nax,
                          &zero, g->T, W));
    SW_CUBLAS(cublasSgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, W, H, nay, &one, g->T, W, g->Fy, nay,
                          &zero, o, W));
    if (!dev) {
        SW_CU(cudaMemcpyAsync(out, g->out, (size_t)W * H * sizeof(float), cudaMemcpyDeviceToHost,
                              st));
        SW_CU(cudaStreamSynchronize(st));
    }
    return SW_OK;
}

/* ================================================================== projector */

struct dm_projector_gpu {
    cublasHandle_t blas;
    void *blas_ws;
    float *P;   /* nact x nvalues row-major (= nvalues x nact column-major) */
    float *in;  /* staging: nvalues                                         */
    float *out; /* staging: nact                                            */
};

extern "C" void sw_projector_gpu_destroy(sw_projector *p)
{
    dm_projector_gpu *g = (dm_projector_gpu *)p->gpu;
    if (!g)
        return;
    cudaSetDevice(p->ctx->device);
    cudaStreamSynchronize((cudaStream_t)p->ctx->stream);
    if (g->blas)
        cublasDestroy(g->blas);
    SW_CUDA_FREE(g->blas_ws, g->P, g->in, g->out);
    free(g);
    p->gpu = NULL;
}

extern "C" sw_status sw_projector_gpu_create(sw_projector *p)
{
    sw_context *ctx = p->ctx;
    dm_projector_gpu *g = (dm_projector_gpu *)calloc(1, sizeof(dm_projector_gpu));
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "projector: out of memory");
    p->gpu = g; /* sw_projector_gpu_destroy frees what is made below, also after a failure */
    SW_CU(cudaSetDevice(ctx->device));
    cudaStream_t st = (cudaStream_t)ctx->stream;
    SW_CU(sw_cuda_upload(&g->P, p->P, (size_t)p->nact * p->nvalues, st));
    SW_CU(sw_cuda_alloc(&g->in, (size_t)p->nvalues));
    SW_CU(sw_cuda_alloc(&g->out, (size_t)p->nact));
    SW_CU(cudaStreamSynchronize(st));
    return sw_cublas_create(ctx, SW_CUDA_STAGE, st, DM_BLAS_WS, &g->blas, &g->blas_ws);
}

extern "C" sw_status sw_projector_gpu_run(sw_projector *p, const float *values, sw_memory memory,
                                          float *commands)
{
    sw_context *ctx = p->ctx;
    dm_projector_gpu *g = (dm_projector_gpu *)p->gpu;
    cudaStream_t st = (cudaStream_t)ctx->stream;
    SW_CU(cudaSetDevice(ctx->device));
    const int dev = memory == SW_MEM_DEVICE;
    const float *x = values;
    float *y = commands;
    if (!dev) {
        SW_CU(cudaMemcpyAsync(g->in, values, (size_t)p->nvalues * sizeof(float),
                              cudaMemcpyHostToDevice, st));
        x = g->in;
        y = g->out;
    }
    /* u = P c: P row-major is nvalues x nact column-major, so u = (that)^T c */
    const float one = 1.0f, zero = 0.0f;
    SW_CUBLAS(cublasSgemv(g->blas, CUBLAS_OP_T, p->nvalues, p->nact, &one, g->P, p->nvalues, x, 1,
                          &zero, y, 1));
    if (!dev) {
        SW_CU(cudaMemcpyAsync(commands, g->out, (size_t)p->nact * sizeof(float),
                              cudaMemcpyDeviceToHost, st));
        SW_CU(cudaStreamSynchronize(st));
    }
    return SW_OK;
}
