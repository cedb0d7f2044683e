/*
 * FFT phase screens on the GPU: the twin of screen_cpu in turbulence.c (Lane, Glindemann &
 * Dainty 1992 with Johansson & Gavel 1994 subharmonics; turbulence.h). The same Fourier
 * coefficients (sw_screen_coefficient in turbulence_internal.h, one thread per frequency bin,
 * drawn from the counter-based RNG), an inverse double-complex FFT (cuFFT Z2Z, unnormalised, like
 * FFTW_BACKWARD) on the context's stream, and a kernel that takes the real part, adds the
 * subharmonic terms Re(c exp(2 pi i (fx u + fy v))) less their grid mean, and scales to OPD.
 */
#include "sim/turbulence_internal.h"

#include <cuda_runtime.h>
#include <cufft.h>

#include <math.h>
#include <stdint.h>

/* The subharmonics travel by value as a kernel argument (at most 64 terms, 2 KiB). */
typedef struct screen_terms {
    int32_t n;
    int32_t nterms;
    double dx;
    double sh_mean;
    double tilt_x, tilt_y;
    double opd_per_rad;
    sw_screen_term t[SW_SCREEN_MAX_TERMS];
} screen_terms;

__global__ void coefficients_kernel(sw_screen_spec s, cufftDoubleComplex *buf)
{
    const int32_t kx = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (kx >= s.n)
        return;
    for (int32_t ky = (int32_t)blockIdx.y; ky < s.n; ky += (int32_t)gridDim.y) {
        double re, im;
        sw_screen_coefficient(&s, kx, ky, &re, &im);
        cufftDoubleComplex c;
        c.x = re;
        c.y = im;
        buf[(size_t)ky * (size_t)s.n + (size_t)kx] = c;
    }
}

__global__ void finish_kernel(screen_terms p, const cufftDoubleComplex *buf, double *out)
{
    const int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= p.n)
        return;
    const double u = ((double)i - 0.5 * (double)(p.n - 1)) * p.dx;
    for (int32_t k = (int32_t)blockIdx.y; k < p.n; k += (int32_t)gridDim.y) {
        const double v = ((double)k - 0.5 * (double)(p.n - 1)) * p.dx;
        const size_t at = (size_t)k * (size_t)p.n + (size_t)i;
        double w = buf[at].x + p.tilt_x * u + p.tilt_y * v;
        for (int32_t t = 0; t < p.nterms; t++) {
            double sn, cs;
            sincospi(2.0 * (p.t[t].fx * u + p.t[t].fy * v), &sn, &cs);
            w += p.t[t].re * cs - p.t[t].im * sn;
        }
        out[at] = (w - p.sh_mean) * p.opd_per_rad;
    }
}

static const char *cufft_error(cufftResult r)
{
    switch (r) {
    case CUFFT_SUCCESS: return "success";
    case CUFFT_INVALID_PLAN: return "invalid plan";
    case CUFFT_ALLOC_FAILED: return "allocation failed";
    case CUFFT_INVALID_VALUE: return "invalid value";
    case CUFFT_INTERNAL_ERROR: return "internal error";
    case CUFFT_EXEC_FAILED: return "execution failed";
    case CUFFT_SETUP_FAILED: return "setup failed";
    case CUFFT_INVALID_SIZE: return "invalid size";
    default: return "cuFFT error";
    }
}

extern "C" sw_status sw_phase_screen_cuda(sw_context *ctx, const sw_screen_spec *spec,
                                          double *host_out)
{
    const int32_t n = spec->n;
    const size_t count = (size_t)n * (size_t)n;
    cudaStream_t stream = (cudaStream_t)sw_context_stream(ctx);
    cufftDoubleComplex *buf = NULL;
    double *out = NULL;
    cufftHandle plan = 0;
    int have_plan = 0;
    sw_status st = SW_OK;
    cufftResult fr;
    dim3 grid((unsigned)((n + 127) / 128), (unsigned)(n < 4096 ? n : 4096));
    screen_terms terms;

    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return sw_fail(ctx, SW_ECUDA, "phase screen: cannot select the CUDA device: %s",
                       cudaGetErrorString(e));
    e = cudaMalloc((void **)&buf, count * sizeof *buf);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&out, count * sizeof *out);
    if (e != cudaSuccess) {
        st = sw_fail(ctx, e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,
                     "phase screen: cannot allocate %dx%d samples on the GPU: %s", (int)n, (int)n,
                     cudaGetErrorString(e));
        goto done;
    }
    fr = cufftPlan2d(&plan, n, n, CUFFT_Z2Z);
    if (fr != CUFFT_SUCCESS) {
        st = sw_fail(ctx, fr == CUFFT_ALLOC_FAILED ? SW_ENOMEM : SW_ECUDA,
                     "phase screen: cuFFT cannot plan a %dx%d transform: %s", (int)n, (int)n,
                     cufft_error(fr));
        goto done;
    }
    have_plan = 1;
    fr = cufftSetStream(plan, stream);
    if (fr != CUFFT_SUCCESS) {
        st = sw_fail(ctx, SW_ECUDA, "phase screen: cufftSetStream failed: %s", cufft_error(fr));
        goto done;
    }

    coefficients_kernel<<<grid, 128, 0, stream>>>(*spec, buf);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
        st = sw_fail(ctx, SW_ECUDA, "phase screen: coefficient kernel launch failed: %s",
                     cudaGetErrorString(e));
        goto done;
    }
    fr = cufftExecZ2Z(plan, buf, buf, CUFFT_INVERSE);
    if (fr != CUFFT_SUCCESS) {
        st = sw_fail(ctx, SW_ECUDA, "phase screen: cufftExecZ2Z failed: %s", cufft_error(fr));
        goto done;
    }
    terms.n = n;
    terms.nterms = spec->nterms;
    terms.dx = spec->dx;
    terms.sh_mean = spec->sh_mean;
    terms.tilt_x = spec->tilt_x;
    terms.tilt_y = spec->tilt_y;
    terms.opd_per_rad = spec->opd_per_rad;
    for (int32_t t = 0; t < SW_SCREEN_MAX_TERMS; t++)
        terms.t[t] = spec->terms[t];
    finish_kernel<<<grid, 128, 0, stream>>>(terms, buf, out);
    e = cudaGetLastError();
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(host_out, out, count * sizeof *out, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess)
        st = sw_fail(ctx, SW_ECUDA, "phase screen: GPU computation failed: %s",
                     cudaGetErrorString(e));
done:
    if (have_plan)
        cufftDestroy(plan);
    cudaFree(buf);
    cudaFree(out);
    return st;
}
