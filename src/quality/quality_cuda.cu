/*
 * Image quality from the wavefront on the GPU, the twin of quality.c's CPU run (quality.h): the
 * pupil function from the Zernike terms at the pupil samples (one thread a sample), cuFFT
 * (double complex, in place), the PSF |F|^2 normalised, a second transform for the OTF, and the
 * reductions (the PSF's maximum and the CSF-weighted sums of the visual Strehl ratios) in one
 * block each. The results agree with the CPU's to rounding (the transforms differ).
 */
#include "core/core_internal.h"
#include "core/cuda_util.h"
#include "quality/quality_internal.h"

#include <cuda_runtime.h>
#include <cufft.h>

#include <math.h>
#include <stdint.h>

#define THREADS    256
#define RED_THREAD 1024

static sw_status cuda_fail(sw_context *ctx, cudaError_t e, const char *what)
{
    return sw_fail(ctx, e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA, "PSF plan: %s: %s",
                   what, cudaGetErrorString(e));
}

static sw_status cufft_fail(sw_context *ctx, cufftResult r, const char *what)
{
    return sw_fail(ctx, r == CUFFT_ALLOC_FAILED ? SW_ENOMEM : SW_ECUDA,
                   "PSF plan: %s: cuFFT error %d", what, (int)r);
}

static unsigned blocks_for(int64_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

extern "C" void sw_psf_cuda_free(sw_psf_plan *plan)
{
    if (plan->have_cufft)
        cufftDestroy((cufftHandle)plan->cufft_plan);
    plan->have_cufft = 0;
    cudaFree(plan->d_idx);
    cudaFree(plan->d_basis);
    cudaFree(plan->d_csf);
    cudaFree(plan->d_field);
    cudaFree(plan->d_coef);
    cudaFree(plan->d_sums);
    cudaFree(plan->d_psf);
    cudaFree(plan->d_mtf);
    plan->d_idx = plan->d_basis = plan->d_csf = plan->d_field = plan->d_coef = plan->d_sums = NULL;
    plan->d_psf = plan->d_mtf = NULL;
}

extern "C" sw_status sw_psf_cuda_alloc(sw_psf_plan *plan)
{
    sw_context *ctx = plan->ctx;
    const size_t N = (size_t)plan->p.size, NN = N * N, np = (size_t)plan->npix;
    const size_t nb = np * (size_t)plan->terms;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot select the CUDA device");
    if ((e = cudaMalloc(&plan->d_idx, np * sizeof(int32_t))) != cudaSuccess ||
        (e = cudaMalloc(&plan->d_basis, nb * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&plan->d_csf, NN * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&plan->d_field, NN * sizeof(cufftDoubleComplex))) != cudaSuccess ||
        (e = cudaMalloc(&plan->d_coef, (size_t)plan->terms * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&plan->d_sums, SW_PSF_SUMS * sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc((void **)&plan->d_psf, NN * sizeof(float))) != cudaSuccess ||
        (e = cudaMalloc((void **)&plan->d_mtf, NN * sizeof(float))) != cudaSuccess)
        return cuda_fail(ctx, e, "device memory");
    if ((e = sw_cuda_h2d(plan->d_idx, plan->idx, np * sizeof(int32_t))) != cudaSuccess ||
        (e = sw_cuda_h2d(plan->d_basis, plan->basis, nb * sizeof(double))) != cudaSuccess ||
        (e = sw_cuda_h2d(plan->d_csf, plan->csf, NN * sizeof(double))) != cudaSuccess)
        return cuda_fail(ctx, e, "upload");
    cufftHandle h;
    cufftResult r = cufftPlan2d(&h, (int)N, (int)N, CUFFT_Z2Z);
    if (r != CUFFT_SUCCESS)
        return cufft_fail(ctx, r, "cufftPlan2d");
    plan->cufft_plan = (int)h;
    plan->have_cufft = 1;
    if ((r = cufftSetStream(h, (cudaStream_t)ctx->stream)) != CUFFT_SUCCESS)
        return cufft_fail(ctx, r, "cufftSetStream");
    return SW_OK;
}

/* The pupil function at the samples: exp(i k W), W = sum_j c_j Z_j. */
__global__ void pupil_kernel(const int32_t *idx, const double *basis, const double *coef,
                             int32_t terms, int32_t npix, double k, cufftDoubleComplex *field)
{
    extern __shared__ double c[];
    for (int32_t j = threadIdx.x; j < terms; j += blockDim.x)
        c[j] = coef[j];
    __syncthreads();
    const int32_t s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= npix)
        return;
    double w = 0.0;
    for (int32_t j = 0; j < terms; j++)
        if (c[j] != 0.0)
            w += c[j] * basis[(size_t)j * (size_t)npix + (size_t)s];
    double sn, cs;
    sincos(k * w, &sn, &cs);
    field[idx[s]] = make_cuDoubleComplex(cs, sn);
}

/* |F|^2 / npix^2 into the field (real) and the centred f32 PSF. */
__global__ void intensity_kernel(cufftDoubleComplex *field, int32_t n, double norm, float *psf)
{
    const int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= (int64_t)n * n)
        return;
    const cufftDoubleComplex f = field[q];
    const double I = (f.x * f.x + f.y * f.y) * norm;
    field[q] = make_cuDoubleComplex(I, 0.0);
    const int32_t u = (int32_t)(q % n), v = (int32_t)(q / n);
    psf[(size_t)((v + n / 2) % n) * n + (u + n / 2) % n] = (float)I;
}

/* The PSF's maximum and its (first) index, one block. */
__global__ void max_kernel(const cufftDoubleComplex *field, int64_t nn, double *sums)
{
    __shared__ double best[RED_THREAD];
    __shared__ long long where[RED_THREAD];
    double b = -1.0;
    long long w = 0;
    for (int64_t q = threadIdx.x; q < nn; q += blockDim.x)
        if (field[q].x > b) {
            b = field[q].x;
            w = q;
        }
    best[threadIdx.x] = b;
    where[threadIdx.x] = w;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) {
            const double o = best[threadIdx.x + s];
            const long long ow = where[threadIdx.x + s];
            if (o > best[threadIdx.x] || (o == best[threadIdx.x] && ow < where[threadIdx.x])) {
                best[threadIdx.x] = o;
                where[threadIdx.x] = ow;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[0] = best[0];
        sums[1] = (double)where[0];
    }
}

/* The centred MTF and the CSF-weighted sums, one block (the normaliser is the OTF at 0). */
__global__ void otf_kernel(const cufftDoubleComplex *field, const double *csf, int32_t n,
                           float *mtf, double *sums)
{
    __shared__ double so[RED_THREAD], sm[RED_THREAD];
    const double otf0 = field[0].x;
    double a = 0.0, b = 0.0;
    const int64_t nn = (int64_t)n * n;
    for (int64_t q = threadIdx.x; q < nn; q += blockDim.x) {
        const double re = field[q].x / otf0, im = field[q].y / otf0;
        const double m = sqrt(re * re + im * im);
        a += csf[q] * re;
        b += csf[q] * m;
        const int32_t u = (int32_t)(q % n), v = (int32_t)(q / n);
        mtf[(size_t)((v + n / 2) % n) * n + (u + n / 2) % n] = (float)m;
    }
    so[threadIdx.x] = a;
    sm[threadIdx.x] = b;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) {
            so[threadIdx.x] += so[threadIdx.x + s];
            sm[threadIdx.x] += sm[threadIdx.x + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        sums[2] = so[0];
        sums[3] = sm[0];
    }
}

extern "C" sw_status sw_psf_cuda_run(sw_psf_plan *plan, const double *coef, sw_image *psf,
                                     sw_image *mtf, double *sums)
{
    sw_context *ctx = plan->ctx;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    const int32_t N = plan->p.size;
    const int64_t NN = (int64_t)N * N;
    cufftDoubleComplex *F = (cufftDoubleComplex *)plan->d_field;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot select the CUDA device");
    if ((e = cudaMemcpyAsync(plan->d_coef, coef, (size_t)plan->terms * sizeof(double),
                             cudaMemcpyHostToDevice, s)) != cudaSuccess ||
        (e = cudaMemsetAsync(F, 0, (size_t)NN * sizeof *F, s)) != cudaSuccess)
        return cuda_fail(ctx, e, "run");
    const double k = 2.0 * 3.14159265358979323846 / plan->p.wavelength_um;
    pupil_kernel<<<blocks_for(plan->npix), THREADS, (size_t)plan->terms * sizeof(double), s>>>(
        (const int32_t *)plan->d_idx, (const double *)plan->d_basis, (const double *)plan->d_coef,
        plan->terms, plan->npix, k, F);
    const cufftHandle h = (cufftHandle)plan->cufft_plan;
    cufftResult r = cufftExecZ2Z(h, F, F, CUFFT_FORWARD);
    if (r != CUFFT_SUCCESS)
        return cufft_fail(ctx, r, "cufftExecZ2Z");
    const double norm = 1.0 / ((double)plan->npix * (double)plan->npix);
    intensity_kernel<<<blocks_for(NN), THREADS, 0, s>>>(F, N, norm, plan->d_psf);
    double *d_sums = (double *)plan->d_sums;
    max_kernel<<<1, RED_THREAD, 0, s>>>(F, NN, d_sums);
    if ((r = cufftExecZ2Z(h, F, F, CUFFT_FORWARD)) != CUFFT_SUCCESS)
        return cufft_fail(ctx, r, "cufftExecZ2Z");
    otf_kernel<<<1, RED_THREAD, 0, s>>>(F, (const double *)plan->d_csf, N, plan->d_mtf, d_sums);
    if ((e = cudaGetLastError()) != cudaSuccess)
        return cuda_fail(ctx, e, "kernel launch");
    if ((e = cudaMemcpyAsync(sums, d_sums, SW_PSF_SUMS * sizeof(double), cudaMemcpyDeviceToHost,
                             s)) != cudaSuccess)
        return cuda_fail(ctx, e, "read back");
    sw_status st = SW_OK;
    sw_image view;
    if (psf && st == SW_OK) {
        (void)sw_image_wrap(plan->d_psf, N, N, 0, SW_PIX_F32, SW_MEM_DEVICE, &view);
        st = sw_image_copy(ctx, &view, psf);
    }
    if (mtf && st == SW_OK) {
        (void)sw_image_wrap(plan->d_mtf, N, N, 0, SW_PIX_F32, SW_MEM_DEVICE, &view);
        st = sw_image_copy(ctx, &view, mtf);
    }
    if (st != SW_OK)
        return st;
    if ((e = cudaStreamSynchronize(s)) != cudaSuccess)
        return cuda_fail(ctx, e, "run");
    return SW_OK;
}
