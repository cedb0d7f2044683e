/*
 * The closed-loop simulator's GPU side (loopsim.c has the design and the CPU twin). Everything on
 * the context's stream, nothing allocated per frame.
 *
 * Phase (sw_loop_gpu): per frame, the host writes the screen window as floats into a pinned
 * buffer and the applied commands into another; sw_loop_gpu_upload queues both copies; the DM
 * shaper (dm_cuda.cu, device arrays: queued only) writes the surface phi_u into a device
 * buffer; lg_residual forms residual = W - phi_u over the phase grid (float, the SH simulator's
 * and the science camera's input) and, over the pupil samples, per-block sums of the residual
 * and its square in double (fixed block order: the host adds the blocks' partials in order
 * after the frame's synchronisation, so the RMS is deterministic).
 *
 * Science camera (sw_loop_psf_gpu), reading the device residual in place:
 *   1. lp_field: the 2n x 2n field, A exp(2 pi i W / lambda) on the pupil samples (A = 1), 0
 *      elsewhere (the zero padding);
 *   2. cufftExecC2C (float, in place);
 *   3. lp_intensity: |E|^2, its maximum (block reduction, then atomicMax on the float's bits, which
 *      order like the values for non-negative floats) and, past the warm-up, the long-exposure
 *      sum in double;
 *   4. the maximum is copied to pinned host memory, read once the stream has been waited for.
 * The long exposure's maximum (lp_dmax, atomicMax on the bits of non-negative doubles) is formed
 * only when asked for.
 */
#include "core/core_internal.h"
#include "loop/loop_internal.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>
#include <cufft.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LP_THREADS 256

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   g->ctx
#define SW_CUDA_STAGE "loop"

struct sw_loop_psf_gpu {
    sw_context *ctx;
    cudaStream_t stream;
    int32_t n, n2;
    float kw;   /* 2 pi / lambda, rad per um */
    int blocks; /* grid of the element-wise kernels */
    cufftHandle plan;
    int have_plan;
    cufftComplex *field;       /* n2^2 */
    uint8_t *mask;             /* n^2 */
    double *acc;               /* n2^2 long exposure */
    unsigned int *dmax;        /* the frame's maximum, float bits */
    unsigned long long *dlmax; /* the long exposure's maximum, double bits */
    unsigned int *hmax;        /* pinned */
    unsigned long long *hlmax; /* pinned */
};

__global__ void lp_field(const float *__restrict__ res, int64_t stride,
                         const uint8_t *__restrict__ mask, int32_t n, int32_t n2, float kw,
                         cufftComplex *__restrict__ field)
{
    const int64_t total = (int64_t)n2 * n2;
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < total;
         s += (int64_t)gridDim.x * blockDim.x) {
        const int32_t i = (int32_t)(s % n2), k = (int32_t)(s / n2);
        cufftComplex e;
        e.x = 0.0f;
        e.y = 0.0f;
        if (i < n && k < n) {
            if (mask[(int64_t)k * n + i]) {
                float sn, cs;
                sincosf(kw * res[(int64_t)k * stride + i], &sn, &cs);
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
    cudaFree(g->mask);
    cudaFree(g->acc);
    cudaFree(g->dmax);
    cudaFree(g->dlmax);
    cudaFreeHost(g->hmax);
    cudaFreeHost(g->hlmax);
    free(g);
}

static sw_status psf_setup(sw_loop_psf_gpu *g, const uint8_t *mask)
{
    const size_t n = (size_t)g->n * g->n, n2 = (size_t)g->n2 * g->n2;
    SW_CU(cudaMalloc((void **)&g->field, n2 * sizeof(cufftComplex)));
    SW_CU(cudaMalloc((void **)&g->mask, n));
    SW_CU(cudaMalloc((void **)&g->acc, n2 * sizeof(double)));
    SW_CU(cudaMalloc((void **)&g->dmax, sizeof(unsigned int)));
    SW_CU(cudaMalloc((void **)&g->dlmax, sizeof(unsigned long long)));
    SW_CU(cudaHostAlloc((void **)&g->hmax, sizeof(unsigned int), cudaHostAllocDefault));
    SW_CU(cudaHostAlloc((void **)&g->hlmax, sizeof(unsigned long long), cudaHostAllocDefault));
    SW_CU(cudaMemcpyAsync(g->mask, mask, n, cudaMemcpyHostToDevice, g->stream));
    SW_CU(cudaMemsetAsync(g->acc, 0, n2 * sizeof(double), g->stream));
    SW_CUFFT(cufftPlan2d(&g->plan, g->n2, g->n2, CUFFT_C2C));
    g->have_plan = 1;
    SW_CUFFT(cufftSetStream(g->plan, g->stream));
    SW_CU(cudaStreamSynchronize(g->stream));
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

extern "C" sw_status sw_loop_psf_gpu_enqueue(sw_loop_psf_gpu *g, const float *res, int64_t stride,
                                             int accumulate)
{
    const int64_t total = (int64_t)g->n2 * g->n2;
    SW_CU(cudaMemsetAsync(g->dmax, 0, sizeof(unsigned int), g->stream));
    lp_field<<<g->blocks, LP_THREADS, 0, g->stream>>>(res, stride, g->mask, g->n, g->n2, g->kw,
                                                      g->field);
    SW_CU(cudaGetLastError());
    SW_CUFFT(cufftExecC2C(g->plan, g->field, g->field, CUFFT_FORWARD));
    lp_intensity<<<g->blocks, LP_THREADS, 0, g->stream>>>(g->field, total, accumulate, g->acc,
                                                          g->dmax);
    SW_CU(cudaGetLastError());
    SW_CU(
        cudaMemcpyAsync(g->hmax, g->dmax, sizeof(unsigned int), cudaMemcpyDeviceToHost, g->stream));
    return SW_OK;
}

extern "C" sw_status sw_loop_psf_gpu_peak(sw_loop_psf_gpu *g, int wait, double *peak)
{
    if (wait)
        SW_CU(cudaStreamSynchronize(g->stream));
    float v;
    const unsigned int bits = *g->hmax;
    memcpy(&v, &bits, sizeof v);
    *peak = (double)v;
    return SW_OK;
}

extern "C" sw_status sw_loop_psf_gpu_long_peak(sw_loop_psf_gpu *g, double *peak)
{
    const int64_t total = (int64_t)g->n2 * g->n2;
    SW_CU(cudaMemsetAsync(g->dlmax, 0, sizeof(unsigned long long), g->stream));
    lp_dmax<<<g->blocks, LP_THREADS, 0, g->stream>>>(g->acc, total, g->dlmax);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->hlmax, g->dlmax, sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                          g->stream));
    SW_CU(cudaStreamSynchronize(g->stream));
    double v;
    const unsigned long long bits = *g->hlmax;
    memcpy(&v, &bits, sizeof v);
    *peak = v;
    return SW_OK;
}

/* ================================================================== phase grid */

struct sw_loop_gpu {
    sw_context *ctx;
    cudaStream_t stream;
    int32_t gw, nact;
    int blocks;    /* lg_residual's grid: one partial pair per block */
    float *turb;   /* gw^2 device: the screen window (um) */
    float *surf;   /* gw^2 device: the mirror surface */
    float *res;    /* gw^2 device: the residual */
    float *cmd;    /* nact device: the applied commands */
    uint8_t *mask; /* gw^2 device: 1 on the pupil samples */
    double *part;  /* 2 blocks device: per-block sums */
    float *hturb;  /* pinned gw^2 */
    float *hcmd;   /* pinned nact */
    double *hpart; /* pinned 2 blocks */
};

/* residual = turb - surf over the grid; per-block sums of the residual and its square over the
 * pupil samples (double), in part[2 b], part[2 b + 1]. */
__global__ void lg_residual(const float *__restrict__ turb, const float *__restrict__ surf,
                            const uint8_t *__restrict__ mask, int64_t total,
                            float *__restrict__ res, double *__restrict__ part)
{
    __shared__ double r1[LP_THREADS], r2[LP_THREADS];
    double s1 = 0.0, s2 = 0.0;
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < total;
         s += (int64_t)gridDim.x * blockDim.x) {
        const double v = (double)turb[s] - (double)surf[s];
        res[s] = (float)v;
        if (mask[s]) {
            s1 += v;
            s2 += v * v;
        }
    }
    r1[threadIdx.x] = s1;
    r2[threadIdx.x] = s2;
    __syncthreads();
    for (int w = LP_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            r1[threadIdx.x] += r1[threadIdx.x + w];
            r2[threadIdx.x] += r2[threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = r1[0];
        part[2 * blockIdx.x + 1] = r2[0];
    }
}

extern "C" void sw_loop_gpu_destroy(sw_loop_gpu *g)
{
    if (!g)
        return;
    cudaSetDevice(g->ctx->device);
    cudaStreamSynchronize(g->stream);
    cudaFree(g->turb);
    cudaFree(g->surf);
    cudaFree(g->res);
    cudaFree(g->cmd);
    cudaFree(g->mask);
    cudaFree(g->part);
    cudaFreeHost(g->hturb);
    cudaFreeHost(g->hcmd);
    cudaFreeHost(g->hpart);
    free(g);
}

static sw_status lg_setup(sw_loop_gpu *g, const uint8_t *mask)
{
    const size_t n = (size_t)g->gw * g->gw;
    SW_CU(cudaSetDevice(g->ctx->device));
    SW_CU(cudaMalloc((void **)&g->turb, n * sizeof(float)));
    SW_CU(cudaMalloc((void **)&g->surf, n * sizeof(float)));
    SW_CU(cudaMalloc((void **)&g->res, n * sizeof(float)));
    SW_CU(cudaMalloc((void **)&g->cmd, (size_t)g->nact * sizeof(float)));
    SW_CU(cudaMalloc((void **)&g->mask, n));
    SW_CU(cudaMalloc((void **)&g->part, 2 * (size_t)g->blocks * sizeof(double)));
    SW_CU(cudaHostAlloc((void **)&g->hturb, n * sizeof(float), cudaHostAllocDefault));
    SW_CU(cudaHostAlloc((void **)&g->hcmd, (size_t)g->nact * sizeof(float), cudaHostAllocDefault));
    SW_CU(cudaHostAlloc((void **)&g->hpart, 2 * (size_t)g->blocks * sizeof(double),
                        cudaHostAllocDefault));
    memset(g->hturb, 0, n * sizeof(float));
    memset(g->hpart, 0, 2 * (size_t)g->blocks * sizeof(double));
    SW_CU(cudaMemcpyAsync(g->mask, mask, n, cudaMemcpyHostToDevice, g->stream));
    SW_CU(cudaMemsetAsync(g->surf, 0, n * sizeof(float), g->stream));
    SW_CU(cudaMemsetAsync(g->res, 0, n * sizeof(float), g->stream));
    SW_CU(cudaStreamSynchronize(g->stream));
    return SW_OK;
}

extern "C" sw_status sw_loop_gpu_create(sw_context *ctx, int32_t gw, const uint8_t *mask,
                                        int32_t nact, sw_loop_gpu **out)
{
    *out = NULL;
    if (gw < 1 || gw > 16384 || nact < 1 || !mask)
        return sw_fail(ctx, SW_EINVAL, "loop: phase grid of %d samples, %d actuators", (int)gw,
                       (int)nact);
    sw_loop_gpu *g = (sw_loop_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "loop: out of memory");
    g->ctx = ctx;
    g->stream = (cudaStream_t)sw_context_stream(ctx);
    g->gw = gw;
    g->nact = nact;
    const int64_t total = (int64_t)gw * gw;
    const int64_t b = (total + LP_THREADS - 1) / LP_THREADS;
    const int64_t cap = 8 * (int64_t)(ctx->multiprocessors > 0 ? ctx->multiprocessors : 16);
    g->blocks = (int)(b < cap ? b : cap);
    sw_status st = lg_setup(g, mask);
    if (st != SW_OK) {
        sw_loop_gpu_destroy(g);
        return st;
    }
    *out = g;
    return SW_OK;
}

extern "C" float *sw_loop_gpu_turb_input(sw_loop_gpu *g)
{
    return g->hturb;
}

extern "C" float *sw_loop_gpu_commands(sw_loop_gpu *g)
{
    return g->cmd;
}

extern "C" float *sw_loop_gpu_surface(sw_loop_gpu *g)
{
    return g->surf;
}

extern "C" const float *sw_loop_gpu_residual(sw_loop_gpu *g)
{
    return g->res;
}

extern "C" sw_status sw_loop_gpu_upload(sw_loop_gpu *g, const float *commands)
{
    memcpy(g->hcmd, commands, (size_t)g->nact * sizeof(float));
    SW_CU(cudaSetDevice(g->ctx->device));
    SW_CU(cudaMemcpyAsync(g->turb, g->hturb, (size_t)g->gw * g->gw * sizeof(float),
                          cudaMemcpyHostToDevice, g->stream));
    SW_CU(cudaMemcpyAsync(g->cmd, g->hcmd, (size_t)g->nact * sizeof(float), cudaMemcpyHostToDevice,
                          g->stream));
    return SW_OK;
}

extern "C" sw_status sw_loop_gpu_residual_run(sw_loop_gpu *g)
{
    lg_residual<<<g->blocks, LP_THREADS, 0, g->stream>>>(g->turb, g->surf, g->mask,
                                                         (int64_t)g->gw * g->gw, g->res, g->part);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->hpart, g->part, 2 * (size_t)g->blocks * sizeof(double),
                          cudaMemcpyDeviceToHost, g->stream));
    return SW_OK;
}

extern "C" void sw_loop_gpu_residual_sums(const sw_loop_gpu *g, double *s1, double *s2)
{
    double a = 0.0, b = 0.0;
    for (int i = 0; i < g->blocks; i++) {
        a += g->hpart[2 * i];
        b += g->hpart[2 * i + 1];
    }
    *s1 = a;
    *s2 = b;
}

extern "C" sw_status sw_loop_gpu_download_surface(sw_loop_gpu *g, float *host)
{
    SW_CU(cudaSetDevice(g->ctx->device));
    SW_CU(cudaMemcpyAsync(host, g->surf, (size_t)g->gw * g->gw * sizeof(float),
                          cudaMemcpyDeviceToHost, g->stream));
    SW_CU(cudaStreamSynchronize(g->stream));
    return SW_OK;
}
