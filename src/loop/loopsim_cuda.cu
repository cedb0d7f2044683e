/*
 * The science camera of the closed-loop simulator on the GPU (loopsim.c has the design and the
 * CPU twin). Per frame, on the context's stream, nothing allocated:
 *   1. the residual W over the n x n pupil square (pinned host floats, um) is copied in;
 *   2. lp_field: the 2n x 2n field, A exp(2 pi i W / lambda) on the pupil samples (A = 1), 0
 *      elsewhere (the zero padding);
 *   3. cufftExecC2C (float, in place);
 *   4. lp_intensity: |E|^2, its maximum (block reduction, then atomicMax on the float's bits, which
 *      order like the values for non-negative floats) and, past the warm-up, the long-exposure
 *      sum in double;
 *   5. the maximum is copied to pinned host memory; sw_loop_psf_gpu_peak waits for the stream.
 * The long exposure's maximum (lp_dmax, atomicMax on the bits of non-negative doubles) is formed
 * only when asked for.
 */
#include "core/core_internal.h"
#include "loop/loop_internal.h"

#include <cuda_runtime.h>
#include <cufft.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LP_THREADS 256

#define LP_CU(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return sw_fail(g->ctx, e_ == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,         \
                           "loop: CUDA call %s failed: %s", #call, cudaGetErrorString(e_));        \
    } while (0)

struct sw_loop_psf_gpu {
    sw_context *ctx;
    cudaStream_t stream;
    int32_t n, n2;
    float kw;   /* 2 pi / lambda, rad per um */
    int blocks; /* grid of the element-wise kernels */
    cufftHandle plan;
    int have_plan;
    cufftComplex *field;       /* n2^2 */
    float *res;                /* n^2 residual (device) */
    uint8_t *mask;             /* n^2 */
    double *acc;               /* n2^2 long exposure */
    unsigned int *dmax;        /* the frame's maximum, float bits */
    unsigned long long *dlmax; /* the long exposure's maximum, double bits */
    float *hres;               /* pinned n^2 input */
    unsigned int *hmax;        /* pinned */
    unsigned long long *hlmax; /* pinned */
};

__global__ void lp_field(const float *__restrict__ res, const uint8_t *__restrict__ mask, int32_t n,
                         int32_t n2, float kw, cufftComplex *__restrict__ field)
{
    const int64_t total = (int64_t)n2 * n2;
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < total;
         s += (int64_t)gridDim.x * blockDim.x) {
        const int32_t i = (int32_t)(s % n2), k = (int32_t)(s / n2);
        cufftComplex e;
        e.x = 0.0f;
        e.y = 0.0f;
        if (i < n && k < n) {
            const int64_t p = (int64_t)k * n + i;
            if (mask[p]) {
                float sn, cs;
                sincosf(kw * res[p], &sn, &cs);
                e.x = cs;
                e.y = sn;
            }
        }
        field[s] = e;
    }
}

__global__ void lp_intensity(const cufftComplex *__restrict__ field, int64_t total, int accumulate,
                             double *__restrict__ acc, unsigned int *__restrict__ dmax)
{
    __shared__ float red[LP_THREADS];
    float mx = 0.0f;
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < total;
         s += (int64_t)gridDim.x * blockDim.x) {
        const cufftComplex e = field[s];
        const float v = e.x * e.x + e.y * e.y;
        mx = fmaxf(mx, v);
        if (accumulate)
            acc[s] += (double)v;
    }
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int w = LP_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicMax(dmax, __float_as_uint(red[0]));
}

__global__ void lp_dmax(const double *__restrict__ acc, int64_t total,
                        unsigned long long *__restrict__ dmax)
{
    __shared__ double red[LP_THREADS];
    double mx = 0.0;
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < total;
         s += (int64_t)gridDim.x * blockDim.x)
        mx = fmax(mx, acc[s]);
    red[threadIdx.x] = mx;
    __syncthreads();
    for (int w = LP_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            red[threadIdx.x] = fmax(red[threadIdx.x], red[threadIdx.x + w]);
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicMax(dmax, (unsigned long long)__double_as_longlong(red[0]));
}

extern "C" void sw_loop_psf_gpu_destroy(sw_loop_psf_gpu *g)
{
    if (!g)
        return;
    if (g->have_plan)
        cufftDestroy(g->plan);
    cudaFree(g->field);
    cudaFree(g->res);
    cudaFree(g->mask);
    cudaFree(g->acc);
    cudaFree(g->dmax);
    cudaFree(g->dlmax);
    cudaFreeHost(g->hres);
    cudaFreeHost(g->hmax);
    cudaFreeHost(g->hlmax);
    free(g);
}

static sw_status psf_setup(sw_loop_psf_gpu *g, const uint8_t *mask)
{
    const size_t n = (size_t)g->n * g->n, n2 = (size_t)g->n2 * g->n2;
    LP_CU(cudaMalloc((void **)&g->field, n2 * sizeof(cufftComplex)));
    LP_CU(cudaMalloc((void **)&g->res, n * sizeof(float)));
    LP_CU(cudaMalloc((void **)&g->mask, n));
    LP_CU(cudaMalloc((void **)&g->acc, n2 * sizeof(double)));
    LP_CU(cudaMalloc((void **)&g->dmax, sizeof(unsigned int)));
    LP_CU(cudaMalloc((void **)&g->dlmax, sizeof(unsigned long long)));
    LP_CU(cudaHostAlloc((void **)&g->hres, n * sizeof(float), cudaHostAllocDefault));
    LP_CU(cudaHostAlloc((void **)&g->hmax, sizeof(unsigned int), cudaHostAllocDefault));
    LP_CU(cudaHostAlloc((void **)&g->hlmax, sizeof(unsigned long long), cudaHostAllocDefault));
    memset(g->hres, 0, n * sizeof(float));
    LP_CU(cudaMemcpyAsync(g->mask, mask, n, cudaMemcpyHostToDevice, g->stream));
    LP_CU(cudaMemsetAsync(g->acc, 0, n2 * sizeof(double), g->stream));
    cufftResult r = cufftPlan2d(&g->plan, g->n2, g->n2, CUFFT_C2C);
    if (r != CUFFT_SUCCESS)
        return sw_fail(g->ctx, r == CUFFT_ALLOC_FAILED ? SW_ENOMEM : SW_ECUDA,
                       "loop: cuFFT could not plan a %dx%d transform (%d)", (int)g->n2, (int)g->n2,
                       (int)r);
    g->have_plan = 1;
    if ((r = cufftSetStream(g->plan, g->stream)) != CUFFT_SUCCESS)
        return sw_fail(g->ctx, SW_ECUDA, "loop: cufftSetStream failed (%d)", (int)r);
    LP_CU(cudaStreamSynchronize(g->stream));
    return SW_OK;
}

extern "C" sw_status sw_loop_psf_gpu_create(sw_context *ctx, int32_t n, const uint8_t *mask,
                                            double wavelength_um, sw_loop_psf_gpu **out)
{
    *out = NULL;
    if (n < 1 || n > 8192 || !mask)
        return sw_fail(ctx, SW_EINVAL, "loop: science pupil of %d samples", (int)n);
    sw_loop_psf_gpu *g = (sw_loop_psf_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "loop: out of memory");
    g->ctx = ctx;
    g->stream = (cudaStream_t)sw_context_stream(ctx);
    g->n = n;
    g->n2 = 2 * n;
    g->kw = (float)(2.0 * 3.14159265358979323846 / wavelength_um);
    const int64_t total = (int64_t)g->n2 * g->n2;
    int64_t b = (total + LP_THREADS - 1) / LP_THREADS;
    const int64_t cap = 8 * (int64_t)(ctx->multiprocessors > 0 ? ctx->multiprocessors : 16);
    g->blocks = (int)(b < cap ? b : cap);
    sw_status st = psf_setup(g, mask);
    if (st != SW_OK) {
        sw_loop_psf_gpu_destroy(g);
        return st;
    }
    *out = g;
    return SW_OK;
}

extern "C" float *sw_loop_psf_gpu_input(sw_loop_psf_gpu *g)
{
    return g ? g->hres : NULL;
}

extern "C" sw_status sw_loop_psf_gpu_enqueue(sw_loop_psf_gpu *g, int accumulate)
{
    const size_t n = (size_t)g->n * g->n;
    const int64_t total = (int64_t)g->n2 * g->n2;
    LP_CU(cudaMemcpyAsync(g->res, g->hres, n * sizeof(float), cudaMemcpyHostToDevice, g->stream));
    LP_CU(cudaMemsetAsync(g->dmax, 0, sizeof(unsigned int), g->stream));
    lp_field<<<g->blocks, LP_THREADS, 0, g->stream>>>(g->res, g->mask, g->n, g->n2, g->kw,
                                                      g->field);
    LP_CU(cudaGetLastError());
    const cufftResult r = cufftExecC2C(g->plan, g->field, g->field, CUFFT_FORWARD);
    if (r != CUFFT_SUCCESS)
        return sw_fail(g->ctx, SW_ECUDA, "loop: cufftExecC2C failed (%d)", (int)r);
    lp_intensity<<<g->blocks, LP_THREADS, 0, g->stream>>>(g->field, total, accumulate, g->acc,
                                                          g->dmax);
    LP_CU(cudaGetLastError());
    LP_CU(
        cudaMemcpyAsync(g->hmax, g->dmax, sizeof(unsigned int), cudaMemcpyDeviceToHost, g->stream));
    return SW_OK;
}

extern "C" sw_status sw_loop_psf_gpu_peak(sw_loop_psf_gpu *g, double *peak)
{
    LP_CU(cudaStreamSynchronize(g->stream));
    float v;
    const unsigned int bits = *g->hmax;
    memcpy(&v, &bits, sizeof v);
    *peak = (double)v;
    return SW_OK;
}

extern "C" sw_status sw_loop_psf_gpu_long_peak(sw_loop_psf_gpu *g, double *peak)
{
    const int64_t total = (int64_t)g->n2 * g->n2;
    LP_CU(cudaMemsetAsync(g->dlmax, 0, sizeof(unsigned long long), g->stream));
    lp_dmax<<<g->blocks, LP_THREADS, 0, g->stream>>>(g->acc, total, g->dlmax);
    LP_CU(cudaGetLastError());
    LP_CU(cudaMemcpyAsync(g->hlmax, g->dlmax, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                          g->stream));
    LP_CU(cudaStreamSynchronize(g->stream));
    double v;
    const unsigned long long bits = *g->hlmax;
    memcpy(&v, &bits, sizeof v);
    *peak = v;
    return SW_OK;
}
