/*
 * The CUDA twin of the Zernike fit (seed 001 section 3.3: the fit of the slopes by the
 * derivatives of the Zernike polynomials; zfit.c builds the derivative matrix, factorises it on
 * the host and is the CPU reference).
 *
 * At create (zfit.c calls sw_zfit_gpu_create once the host plan is complete) everything a run
 * needs is made: the cuBLAS and cuSOLVER handles bound to the context's stream, the compact
 * matrices (Dc for residuals; P = (W^(1/2) Dc)^+ for PINV; for QR W^(1/2) Dc factorised in place
 * by cusolverDnDgeqrf), the row tables, and the buffers of a max_frames batch. A run allocates
 * nothing. Per run, all on the context's stream:
 *   1. zf_gather: the used rows of every frame as doubles, raw (S) and weighted (B), and a flag
 *      per frame that has a used lenslet flagged 0 or a non-finite slope;
 *   2. PINV: C = P B (cublasDgemv for one frame, cublasDgemm for a batch);
 *      QR:   B = Q^T B (cusolverDnDormqr), R C = B[0:m] (cublasDtrsm), the batch as columns;
 *   3. zf_residual (when asked): sum over the rows of (Dc c - s)^2 per frame;
 *   4. zf_finish: the coefficients (piston 0) and residuals in the caller's layout.
 * Host arrays are copied in before 1 and out after 4. The per-frame flags are then read back
 * (one wait for the stream, on every path) and each flagged frame is fitted on the host on its
 * own reduced system (sw_zfit_host_frame, LAPACKE_dgels), its slopes and flags copied from the
 * device when they live there, its results written over the batch's. So a run on device memory
 * has finished when it returns, too.
 */
#include "zernike/zfit_internal.h"
#include "core/cuda_util.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "zernike fit"

#define ZF_THREADS 256

struct zf_gpu {
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    cudaStream_t stream;
    int32_t *row_pos, *row_l; /* nrow */
    double *row_w;            /* nrow */
    double *Dc;               /* nrow x m */
    double *P;                /* PINV: m x nrow */
    double *qr, *tau;         /* QR: nrow x m factors, m reflectors */
    double *qwork;            /* cuSOLVER workspace */
    int lqwork;
    int *info;
    double *B, *S; /* nrow x max_frames */
    double *C;     /* m x max_frames (PINV) */
    double *acc;   /* max_frames sums of squared residuals */
    int *flags;    /* max_frames */
    float *slopes; /* staging of host slopes: max_frames x 2 n */
    uint8_t *valid;
    double *coef, *res; /* device outputs for host arrays */
    int *flags_h;       /* pinned */
    float *hs;          /* pinned: one frame's slopes */
    uint8_t *hv;        /* pinned: one frame's flags */
    double *hc;         /* pinned: one frame's J coefficients and residual */
};

__global__ void zf_gather(const float *__restrict__ slopes, const uint8_t *__restrict__ valid,
                          const int32_t *__restrict__ row_pos, const int32_t *__restrict__ row_l,
                          const double *__restrict__ row_w, int32_t nrow, int32_t n2, int32_t nl,
                          double *__restrict__ S, double *__restrict__ B, int *__restrict__ flags)
{
    int32_t r = blockIdx.x * blockDim.x + threadIdx.x, f = blockIdx.y;
    if (r >= nrow)
        return;
    float s = slopes[(size_t)f * n2 + row_pos[r]];
    int ok = isfinite(s) && (valid == NULL || valid[(size_t)f * nl + row_l[r]] != 0);
    S[(size_t)f * nrow + r] = s;
    B[(size_t)f * nrow + r] = row_w[r] * (double)s;
    if (!ok)
        flags[f] = 1;
}

/* One block per (row chunk, frame): sum of (Dc c - s)^2 over the chunk into acc[f]. */
__global__ void zf_residual(const double *__restrict__ Dc, const double *__restrict__ C,
                            int32_t ldc, const double *__restrict__ S, int32_t nrow, int32_t m,
                            double *__restrict__ acc)
{
    __shared__ double c[128];
    __shared__ double part[ZF_THREADS / 32];
    int32_t f = blockIdx.y;
    for (int32_t j = threadIdx.x; j < m; j += blockDim.x)
        c[j] = C[(size_t)f * ldc + j];
    __syncthreads();
    double e2 = 0.0;
    int32_t r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < nrow) {
        double e = -S[(size_t)f * nrow + r];
        for (int32_t j = 0; j < m; j++)
            e += Dc[(size_t)j * nrow + r] * c[j];
        e2 = e * e;
    }
    for (int o = 16; o > 0; o >>= 1)
        e2 += __shfl_down_sync(0xffffffffu, e2, o);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = e2;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++)
            t += part[w];
        atomicAdd(acc + f, t);
    }
}

__global__ void zf_finish(const double *__restrict__ C, int32_t ldc, int32_t J,
                          const double *__restrict__ acc, int32_t nrow, double *__restrict__ coef,
                          double *__restrict__ res)
{
    int32_t f = blockIdx.x;
    for (int32_t j = threadIdx.x; j < J; j += blockDim.x)
        coef[(size_t)f * J + j] = j == 0 ? 0.0 : C[(size_t)f * ldc + j - 1];
    if (res && threadIdx.x == 0)
        res[f] = sqrt(acc[f] / nrow);
}

template <typename T> static cudaError_t zf_alloc(T **p, size_t count)
{
    return cudaMalloc((void **)p, (count ? count : 1) * sizeof(T));
}

extern "C" void sw_zfit_gpu_destroy(sw_zfit_plan *plan)
{
    zf_gpu *g = (zf_gpu *)plan->gpu;
    if (!g)
        return;
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->solver)
        cusolverDnDestroy(g->solver);
    SW_CUDA_FREE(g->row_pos, g->row_l, g->row_w, g->Dc, g->P, g->qr, g->tau, g->qwork, g->info,
                 g->B, g->S, g->C, g->acc, g->flags, g->slopes, g->valid, g->coef, g->res);
    void *pinned[] = {g->flags_h, g->hs, g->hv, g->hc};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        if (pinned[i])
            cudaFreeHost(pinned[i]);
    free(g);
    plan->gpu = NULL;
}

extern "C" sw_status sw_zfit_gpu_create(sw_zfit_plan *plan)
{
    zf_gpu *g = (zf_gpu *)calloc(1, sizeof(zf_gpu));
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "zernike fit: out of memory");
    plan->gpu = g;
    SW_CU(cudaSetDevice(plan->ctx->device));
    g->stream = (cudaStream_t)plan->ctx->stream;
    SW_CUBLAS(cublasCreate(&g->blas));
    SW_CUBLAS(cublasSetStream(g->blas, g->stream));
    SW_CUSOLVER(cusolverDnCreate(&g->solver));
    SW_CUSOLVER(cusolverDnSetStream(g->solver, g->stream));

    int32_t nrow = plan->nrow, m = plan->m, F = plan->p.max_frames, n2 = 2 * plan->n;
    size_t nm = (size_t)nrow * m, nf = (size_t)nrow * F;
    SW_CU(zf_alloc(&g->row_pos, nrow));
    SW_CU(zf_alloc(&g->row_l, nrow));
    SW_CU(zf_alloc(&g->row_w, nrow));
    SW_CU(zf_alloc(&g->Dc, nm));
    SW_CU(zf_alloc(&g->B, nf));
    SW_CU(zf_alloc(&g->S, nf));
    SW_CU(zf_alloc(&g->C, (size_t)m * F));
    SW_CU(zf_alloc(&g->acc, F));
    SW_CU(zf_alloc(&g->flags, F));
    SW_CU(zf_alloc(&g->slopes, (size_t)F * n2));
    SW_CU(zf_alloc(&g->valid, (size_t)F * plan->nl));
    SW_CU(zf_alloc(&g->coef, (size_t)F * plan->J));
    SW_CU(zf_alloc(&g->res, F));
    SW_CU(zf_alloc(&g->info, 1));
    SW_CU(cudaHostAlloc((void **)&g->flags_h, (size_t)F * sizeof(int), cudaHostAllocDefault));
    SW_CU(cudaHostAlloc((void **)&g->hs, (size_t)(n2 ? n2 : 1) * sizeof(float),
                        cudaHostAllocDefault));
    SW_CU(cudaHostAlloc((void **)&g->hv, (size_t)plan->nl, cudaHostAllocDefault));
    SW_CU(cudaHostAlloc((void **)&g->hc, (size_t)(plan->J + 1) * sizeof(double),
                        cudaHostAllocDefault));

    SW_CU(cudaMemcpyAsync(g->row_pos, plan->row_pos, nrow * sizeof(int32_t), cudaMemcpyHostToDevice,
                          g->stream));
    SW_CU(cudaMemcpyAsync(g->row_l, plan->row_l, nrow * sizeof(int32_t), cudaMemcpyHostToDevice,
                          g->stream));
    SW_CU(cudaMemcpyAsync(g->row_w, plan->row_w, nrow * sizeof(double), cudaMemcpyHostToDevice,
                          g->stream));
    SW_CU(cudaMemcpyAsync(g->Dc, plan->Dc, nm * sizeof(double), cudaMemcpyHostToDevice, g->stream));
    if (plan->p.method == SW_ZFIT_PINV) {
        SW_CU(zf_alloc(&g->P, nm));
        SW_CU(
            cudaMemcpyAsync(g->P, plan->P, nm * sizeof(double), cudaMemcpyHostToDevice, g->stream));
    } else {
        SW_CU(zf_alloc(&g->qr, nm));
        SW_CU(zf_alloc(&g->tau, m));
        SW_CU(cudaMemcpyAsync(g->qr, plan->Aw, nm * sizeof(double), cudaMemcpyHostToDevice,
                              g->stream));
        int lgeqrf = 0, lormqr = 0;
        SW_CUSOLVER(cusolverDnDgeqrf_bufferSize(g->solver, nrow, m, g->qr, nrow, &lgeqrf));
        SW_CUSOLVER(cusolverDnDormqr_bufferSize(g->solver, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, nrow, F,
                                                m, g->qr, nrow, g->tau, g->B, nrow, &lormqr));
        g->lqwork = lgeqrf > lormqr ? lgeqrf : lormqr;
        SW_CU(zf_alloc(&g->qwork, (size_t)g->lqwork));
        SW_CUSOLVER(cusolverDnDgeqrf(g->solver, nrow, m, g->qr, nrow, g->tau, g->qwork, g->lqwork,
                                     g->info));
        int info = 0;
        SW_CU(cudaMemcpyAsync(&info, g->info, sizeof(int), cudaMemcpyDeviceToHost, g->stream));
        SW_CU(cudaStreamSynchronize(g->stream));
        if (info != 0)
            return sw_fail(plan->ctx, SW_EINTERNAL, "zernike fit: cusolverDnDgeqrf info %d", info);
    }
    SW_CU(cudaStreamSynchronize(g->stream));
    return SW_OK;
}

extern "C" sw_status sw_zfit_gpu_run(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid,
                                     int32_t frames, sw_memory memory, double *coef,
                                     double *residual)
{
    zf_gpu *g = (zf_gpu *)plan->gpu;
    cudaStream_t st = g->stream;
    int32_t nrow = plan->nrow, m = plan->m, J = plan->J, n2 = 2 * plan->n, nl = plan->nl;
    int dev = memory == SW_MEM_DEVICE;
    SW_CU(cudaSetDevice(plan->ctx->device));

    const float *d_slopes = slopes;
    const uint8_t *d_valid = valid;
    double *d_coef = coef, *d_res = residual;
    if (!dev) {
        SW_CU(cudaMemcpyAsync(g->slopes, slopes, (size_t)frames * n2 * sizeof(float),
                              cudaMemcpyHostToDevice, st));
        d_slopes = g->slopes;
        if (valid) {
            SW_CU(
                cudaMemcpyAsync(g->valid, valid, (size_t)frames * nl, cudaMemcpyHostToDevice, st));
            d_valid = g->valid;
        }
        d_coef = g->coef;
        d_res = residual ? g->res : NULL;
    }

    SW_CU(cudaMemsetAsync(g->flags, 0, (size_t)frames * sizeof(int), st));
    dim3 grid((unsigned)((nrow + ZF_THREADS - 1) / ZF_THREADS), (unsigned)frames);
    zf_gather<<<grid, ZF_THREADS, 0, st>>>(d_slopes, d_valid, g->row_pos, g->row_l, g->row_w, nrow,
                                           n2, nl, g->S, g->B, g->flags);
    SW_CU(cudaGetLastError());

    const double one = 1.0, zero = 0.0;
    const double *C;
    int32_t ldc;
    if (plan->p.method == SW_ZFIT_PINV) {
        if (frames == 1)
            SW_CUBLAS(
                cublasDgemv(g->blas, CUBLAS_OP_N, m, nrow, &one, g->P, m, g->B, 1, &zero, g->C, 1));
        else
            SW_CUBLAS(cublasDgemm(g->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, frames, nrow, &one, g->P, m,
                                  g->B, nrow, &zero, g->C, m));
        C = g->C;
        ldc = m;
    } else {
        SW_CUSOLVER(cusolverDnDormqr(g->solver, CUBLAS_SIDE_LEFT, CUBLAS_OP_T, nrow, frames, m,
                                     g->qr, nrow, g->tau, g->B, nrow, g->qwork, g->lqwork,
                                     g->info));
        SW_CUBLAS(cublasDtrsm(g->blas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
                              CUBLAS_DIAG_NON_UNIT, m, frames, &one, g->qr, nrow, g->B, nrow));
        C = g->B;
        ldc = nrow;
    }
    if (residual) {
        SW_CU(cudaMemsetAsync(g->acc, 0, (size_t)frames * sizeof(double), st));
        zf_residual<<<grid, ZF_THREADS, 0, st>>>(g->Dc, C, ldc, g->S, nrow, m, g->acc);
        SW_CU(cudaGetLastError());
    }
    zf_finish<<<frames, 128, 0, st>>>(C, ldc, J, g->acc, nrow, d_coef, d_res);
    SW_CU(cudaGetLastError());
    if (!dev) {
        SW_CU(cudaMemcpyAsync(coef, g->coef, (size_t)frames * J * sizeof(double),
                              cudaMemcpyDeviceToHost, st));
        if (residual)
            SW_CU(cudaMemcpyAsync(residual, g->res, (size_t)frames * sizeof(double),
                                  cudaMemcpyDeviceToHost, st));
    }
    SW_CU(cudaMemcpyAsync(g->flags_h, g->flags, (size_t)frames * sizeof(int),
                          cudaMemcpyDeviceToHost, st));
    SW_CU(cudaStreamSynchronize(st));

    /* frames with invalid lenslets: on the host, on their own reduced systems */
    for (int32_t f = 0; f < frames; f++) {
        if (!g->flags_h[f])
            continue;
        if (!dev) {
            sw_zfit_host_frame(plan, slopes + (size_t)f * n2, valid ? valid + (size_t)f * nl : NULL,
                               coef + (size_t)f * J, residual ? residual + f : NULL);
            continue;
        }
        SW_CU(cudaMemcpyAsync(g->hs, slopes + (size_t)f * n2, (size_t)n2 * sizeof(float),
                              cudaMemcpyDeviceToHost, st));
        if (valid)
            SW_CU(cudaMemcpyAsync(g->hv, valid + (size_t)f * nl, (size_t)nl, cudaMemcpyDeviceToHost,
                                  st));
        SW_CU(cudaStreamSynchronize(st));
        sw_zfit_host_frame(plan, g->hs, valid ? g->hv : NULL, g->hc, g->hc + J);
        SW_CU(cudaMemcpyAsync(coef + (size_t)f * J, g->hc, (size_t)J * sizeof(double),
                              cudaMemcpyHostToDevice, st));
        if (residual)
            SW_CU(cudaMemcpyAsync(residual + f, g->hc + J, sizeof(double), cudaMemcpyHostToDevice,
                                  st));
        SW_CU(cudaStreamSynchronize(st));
    }
    return SW_OK;
}
