/*
 * The GPU renderers of the Shack-Hartmann simulator (CPU twins, truth and the physics in
 * shsim.c; the per-sample formulas in sh_model.h):
 *
 *   GEOMETRIC    one thread block per drawn lenslet: the block evaluates the spot's separable
 *                weights (pixel-integrated Gaussian, psf.h, or the pixel-averaged sinc^2) once
 *                into shared memory, then its threads add flux wx(k) wy(j) over the ROI with
 *                float atomics (neighbouring ROIs may overlap).
 *   DIFFRACTION  per chunk of lenslets: field_kernel writes each lenslet's tile of
 *                A exp(i phi) (Goodman Eq. 4-17 sampled, sh_model.h) into a zero-padded N x N
 *                slot; one batched single-precision cuFFT C2C (plan made at create) transforms
 *                the chunk; intensity_smem_kernel (one block per lenslet, intensity_kernel for
 *                very large patches) box-sums |E|^2 over os x os focal samples per detector
 *                pixel and adds it to the image with float atomics. The cuFFT kernel takes
 *                ~3/4 of the time (H100, 64 x 64: ~1.7 TB/s, not DRAM-bound).
 * The spot positions, tilts and scales are computed on the host (shsim.c, when the OPD changes)
 * and uploaded with the OPD before the kernels; CUDA events time the kernels only.
 *
 * Device OPD (sw_shsim_set_opd_device): sh_resample_kernel interpolates the caller's device map
 * onto the pupil grid (one thread per sample, sw_wavefront_sample's rule: sh_model.h's
 * sw_shm_bilinear_f, positions rounded as on the host), in double for the gradients and in float
 * for field_kernel; sh_lens_kernel (one block per drawn lenslet) sums the model's weighted
 * gradients (sw_shm_grad1) over the lenslet's samples with a block reduction in double and
 * writes the renderer's input with sw_sh_lens_finish (sh_internal.h), the host's formulas.
 */
#include "sim/sh_internal.h"
#include "sim/sh_model.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>
#include <cufft.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "SH simulator"

/* Field slots per chunk: at most this many bytes in each of the two FFT buffers. */
#define SW_SH_CHUNK_BYTES ((size_t)256 << 20)

typedef struct shsim_gpu {
    sw_sh_gspot *spots; /* GEOMETRIC: nlit */
    sw_sh_dlens *lens;  /* DIFFRACTION: nlit */
    float *amp;         /* nlit * tile * tile */
    float *opd;         /* gw * gh */
    cufftComplex *in;   /* chunk * N * N, zero outside the tiles */
    cufftComplex *fft;  /* chunk * N * N */
    cufftHandle plan_full, plan_rest;
    int have_full, have_rest;
    int chunk, rest;  /* lenslets per chunk, in the last chunk */
    int threads;      /* GEOMETRIC threads per block */
    sw_event_pair ev; /* around the last run's rendering */
    int timed;
    /* device OPD (sw_shsim_set_opd_device) */
    double *opd_d; /* gw * gh, for the gradients */
    uint8_t *need; /* gw * gh, shsim.c's need */
    float *cover;  /* GEOMETRIC: gw * gh sample weights */
    int32_t *base; /* 2 nlit: first sample (column, row) of each lenslet's block of samples */
    double *ref;   /* 2 nlit: reference positions */
    double *flux;  /* nlit: the spot's flux */
    int resample_blocks;
} shsim_gpu;

static cudaStream_t stream_of(const sw_shsim *plan)
{
    return (cudaStream_t)sw_context_stream(plan->ctx);
}

/* ------------------------------------------------------------------ kernels */

__global__ void geometric_kernel(const sw_sh_gspot *spots, int roi, int sinc2, double sigma,
                                 double z, int os, float *img, size_t pitch, int width, int height)
{
    extern __shared__ double w[]; /* flux * wx[roi], wy[roi] */
    const sw_sh_gspot s = spots[blockIdx.x];
    if (!(s.flux > 0.0) || s.x0 >= width || s.y0 >= height || s.x0 + roi <= 0 || s.y0 + roi <= 0)
        return; /* the whole block leaves: no barrier is skipped by some threads only */
    for (int k = threadIdx.x; k < 2 * roi; k += blockDim.x)
        w[k] = k < roi ? s.flux * sw_shm_axis_weight(sinc2, (double)k - s.dx, sigma, z, os)
                       : sw_shm_axis_weight(sinc2, (double)(k - roi) - s.dy, sigma, z, os);
    __syncthreads();
    const int k0 = s.x0 < 0 ? -s.x0 : 0, k1 = s.x0 + roi > width ? width - s.x0 : roi;
    const int j0 = s.y0 < 0 ? -s.y0 : 0, j1 = s.y0 + roi > height ? height - s.y0 : roi;
    const int cols = k1 - k0, n = cols * (j1 - j0);
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        const int k = k0 + t % cols, j = j0 + t / cols;
        float *row = (float *)((char *)img + (size_t)(s.y0 + j) * pitch);
        atomicAdd(row + s.x0 + k, (float)(w[k] * w[roi + j]));
    }
}

/* One chunk, for patches too large for intensity_smem_kernel's shared memory: the patch pixels of
 * slot L (blockIdx.y), each the sum of |E|^2 over its os x os focal samples (sub-sample
 * m = m_c + k lies in pixel floor(m / os)), scaled and added. */
__global__ void intensity_kernel(const sw_sh_dlens *lens, const cufftComplex *fft, int n, int os,
                                 int pw, float *img, size_t pitch, int width, int height)
{
    const int L = blockIdx.y;
    const sw_sh_dlens d = lens[L];
    if (d.px0 == SW_SH_OFF)
        return;
    const cufftComplex *f = fft + (size_t)L * n * n;
    const int kmin = -(n / 2), kmax = (n - 1) / 2;
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < pw * pw; s += gridDim.x * blockDim.x) {
        const int px = d.px0 + s % pw, py = d.py0 + s / pw;
        if (px < 0 || py < 0 || px >= width || py >= height)
            continue;
        double sum = 0.0;
        for (int jy = 0; jy < os; jy++) {
            const int ky = py * os + jy - d.my;
            if (ky < kmin || ky > kmax)
                continue;
            const cufftComplex *row = f + (size_t)sw_shm_fft_a(ky, n) * n;
            for (int jx = 0; jx < os; jx++) {
                const int kx = px * os + jx - d.mx;
                if (kx < kmin || kx > kmax)
                    continue;
                const cufftComplex v = row[sw_shm_fft_a(kx, n)];
                sum += (double)v.x * v.x + (double)v.y * v.y;
            }
        }
        if (sum > 0.0)
            atomicAdd((float *)((char *)img + (size_t)py * pitch) + px, (float)(sum * d.scale));
    }
}

/* One chunk: slot L (blockIdx.y) gets lenslet L's tile of fields at the top-left of its N x N
 * slot, one thread per tile sample (blockIdx.x, threadIdx.x); the rest of the slot stays zero
 * (set at create). */
__global__ void field_kernel(const sw_sh_dlens *lens, const float *amp, const float *opd, int gw,
                             int tile, int n, double kw, cufftComplex *in)
{
    const int L = blockIdx.y;
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= tile * tile)
        return;
    const sw_sh_dlens d = lens[L];
    const int ta = s % tile, tb = s / tile;
    const double A = amp[(size_t)L * tile * tile + s];
    double re = 0.0, im = 0.0;
    if (A > 0.0 && d.px0 != SW_SH_OFF) {
        const double c = 0.5 * (double)(tile - 1);
        sw_shm_field(A, (double)opd[(size_t)(d.gy0 + tb) * gw + d.gx0 + ta], kw, d.ax, d.ay,
                     (double)ta - c, (double)tb - c, &re, &im);
    }
    in[(size_t)L * n * n + (size_t)tb * n + ta] = make_cuFloatComplex((float)re, (float)im);
}

/* One chunk, one block per slot L (blockIdx.x): the block reads the whole N x N transform with
 * coalesced float4 loads (two samples each, SW_SH_PF loads in flight per thread, streaming: the
 * data is read once), adds |E|^2 in float into a shared pw x pw patch (array index a lies in
 * patch column colpix[a], row index b in patch row rowpix[b]), then adds the patch's non-zero
 * pixels, scaled, to the image with float atomics. */
#define SW_SH_PF 8
__global__ void __launch_bounds__(256)
    intensity_smem_kernel(const sw_sh_dlens *lens, const cufftComplex *fft, int n, int os, int pw,
                          float *img, size_t pitch, int width, int height)
{
    extern __shared__ float sh[];
    float *patch = sh;
    int *colpix = (int *)(sh + pw * pw), *rowpix = colpix + n;
    const int L = blockIdx.x;
    const sw_sh_dlens d = lens[L];
    if (d.px0 == SW_SH_OFF)
        return;
    for (int i = threadIdx.x; i < pw * pw; i += blockDim.x)
        patch[i] = 0.0f;
    for (int a = threadIdx.x; a < n; a += blockDim.x) {
        const int k = sw_shm_fft_k(a, n);
        colpix[a] = (int)(sw_shm_floor_div((int64_t)d.mx + k, os) - d.px0);
        rowpix[a] = (int)(sw_shm_floor_div((int64_t)d.my + k, os) - d.py0);
    }
    __syncthreads();
    const cufftComplex *f = fft + (size_t)L * n * n;
    if ((n & 1) == 0) {
        const float4 *f4 = (const float4 *)f;
        const int half = n / 2, total = n * half, step = blockDim.x;
        for (int e0 = threadIdx.x; e0 < total; e0 += SW_SH_PF * step) {
            float4 v[SW_SH_PF];
#pragma unroll
            for (int u = 0; u < SW_SH_PF; u++) {
                const int e = e0 + u * step;
                v[u] = e < total ? __ldcs(f4 + e) : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < SW_SH_PF; u++) {
                const int e = e0 + u * step;
                if (e < total) {
                    const int b = e / half, a = 2 * (e - b * half);
                    float *prow = patch + rowpix[b] * pw;
                    const float p0 = v[u].x * v[u].x + v[u].y * v[u].y;
                    const float p1 = v[u].z * v[u].z + v[u].w * v[u].w;
                    const int c0 = colpix[a], c1 = colpix[a + 1];
                    if (c0 == c1) {
                        atomicAdd(prow + c0, p0 + p1);
                    } else {
                        atomicAdd(prow + c0, p0);
                        atomicAdd(prow + c1, p1);
                    }
                }
            }
        }
    } else {
        for (int e = threadIdx.x; e < n * n; e += blockDim.x) {
            const cufftComplex v = f[e];
            const int b = e / n, a = e - b * n;
            atomicAdd(patch + rowpix[b] * pw + colpix[a], v.x * v.x + v.y * v.y);
        }
    }
    __syncthreads();
    const float scale = (float)d.scale;
    for (int i = threadIdx.x; i < pw * pw; i += blockDim.x) {
        const int px = d.px0 + i % pw, py = d.py0 + i / pw;
        const float v = patch[i];
        if (v > 0.0f && px >= 0 && py >= 0 && px < width && py < height)
            atomicAdd((float *)((char *)img + (size_t)py * pitch) + px, v * scale);
    }
}

/* Device OPD, step 1: sample s = (i, k) of the pupil grid (at u = gu0 + i h, v = gv0 + k h) of
 * the caller's map (nu x nv floats at spacing sp from (u0, v0)), for the samples in use (need),
 * 0 elsewhere; double copy for the gradients, float copy (if any) for field_kernel. */
__global__ void sh_resample_kernel(const float *__restrict__ map, int32_t nu, int32_t nv, double sp,
                                   double u0, double v0, const uint8_t *__restrict__ need,
                                   int32_t gw, int64_t total, double gu0, double gv0, double h,
                                   double *__restrict__ opd_d, float *__restrict__ opd_f)
{
    for (int64_t s = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; s < total;
         s += (int64_t)gridDim.x * blockDim.x) {
        double w = 0.0;
        if (need[s]) {
            const double u = SW_SHM_MAD((double)(s % gw), h, gu0);
            const double v = SW_SHM_MAD((double)(s / gw), h, gv0);
            w = sw_shm_bilinear_f(map, nu, nv, (u - u0) / sp, (v - v0) / sp);
        }
        opd_d[s] = w;
        if (opd_f)
            opd_f[s] = (float)w;
    }
}

/* Device OPD, step 2: drawn lenslet i = blockIdx.x. Its side x side samples start at
 * (base[2i], base[2i + 1]); weights from the grid (GEOMETRIC: cover) or from the lenslet's tile
 * (DIFFRACTION: amp). The block sums w, w dW/du, w dW/dv (double), then thread 0 turns the sums
 * into the spot (sw_sh_lens_finish, as shsim.c's prepare). */
#define SW_SH_LENS_THREADS 128
__global__ void __launch_bounds__(SW_SH_LENS_THREADS)
    sh_lens_kernel(sw_sh_kconst c, int geometric, int32_t side, const int32_t *__restrict__ base,
                   const float *__restrict__ cover, const float *__restrict__ amp,
                   const double *__restrict__ opd, int32_t gw, const double *__restrict__ ref,
                   const double *__restrict__ flux, sw_sh_gspot *__restrict__ spots,
                   sw_sh_dlens *__restrict__ lens)
{
    __shared__ double red[3][SW_SH_LENS_THREADS];
    const int32_t i = blockIdx.x, gx0 = base[2 * i], gy0 = base[2 * i + 1];
    const int32_t n = side * side;
    double sw = 0.0, sx = 0.0, sy = 0.0;
    for (int32_t t = threadIdx.x; t < n; t += blockDim.x) {
        const int32_t a = t % side, b = t / side;
        const size_t at = (size_t)(gy0 + b) * gw + (size_t)(gx0 + a);
        const double wt = geometric ? (double)cover[at] : (double)amp[(size_t)i * n + t];
        if (wt > 0.0) {
            sw += wt;
            sx += wt * sw_shm_grad1(opd, at, 1, c.h);
            sy += wt * sw_shm_grad1(opd, at, (size_t)gw, c.h);
        }
    }
    red[0][threadIdx.x] = sw;
    red[1][threadIdx.x] = sx;
    red[2][threadIdx.x] = sy;
    __syncthreads();
    for (int w = SW_SH_LENS_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            red[0][threadIdx.x] += red[0][threadIdx.x + w];
            red[1][threadIdx.x] += red[1][threadIdx.x + w];
            red[2][threadIdx.x] += red[2][threadIdx.x + w];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double gx, gy, x, y;
        sw_sh_gspot gs;
        sw_sh_dlens dl;
        sw_sh_lens_finish(&c, geometric, red[0][0], red[1][0], red[2][0], ref[2 * i],
                          ref[2 * i + 1], gx0, gy0, flux[i], &gx, &gy, &x, &y, &gs, &dl);
        if (geometric)
            spots[i] = gs;
        else
            lens[i] = dl;
    }
}

/* ------------------------------------------------------------------ plan */

static void free_device_opd(shsim_gpu *g)
{
    cudaFree(g->opd_d);
    cudaFree(g->need);
    cudaFree(g->cover);
    cudaFree(g->base);
    cudaFree(g->ref);
    cudaFree(g->flux);
    g->opd_d = NULL;
    g->need = NULL;
    g->cover = NULL;
    g->base = NULL;
    g->ref = NULL;
    g->flux = NULL;
}

/* The device-OPD path's buffers (sw_shsim_set_opd_device), made and filled by its first call. */
static sw_status fill_device_opd(sw_shsim *plan, shsim_gpu *g)
{
    const size_t ng = (size_t)plan->gw * plan->gh, nlit = (size_t)plan->nlit;
    const int geometric = plan->p.model == SW_SH_GEOMETRIC;
    const sw_sh_geometry *geo = &plan->p.geom;
    SW_CU(cudaMalloc(&g->opd_d, ng * sizeof(double)));
    SW_CU(cudaMalloc(&g->need, ng));
    SW_CU(cudaMalloc(&g->base, (2 * nlit + 2) * sizeof(int32_t)));
    SW_CU(cudaMalloc(&g->ref, (2 * nlit + 2) * sizeof(double)));
    SW_CU(cudaMalloc(&g->flux, (nlit + 1) * sizeof(double)));
    cudaStream_t s = stream_of(plan);
    if (geometric)
        SW_CU(cudaMalloc(&g->cover, ng * sizeof(float)));
    /* copies on the context's stream, waited for below (before the host arrays are freed) */
    SW_CU(cudaMemcpyAsync(g->need, plan->need, ng, cudaMemcpyHostToDevice, s));
    if (geometric)
        SW_CU(
            cudaMemcpyAsync(g->cover, plan->cover, ng * sizeof(float), cudaMemcpyHostToDevice, s));
    int32_t *base = (int32_t *)malloc((2 * nlit + 2) * sizeof(int32_t));
    double *ref = (double *)malloc((3 * nlit + 3) * sizeof(double)), *flux = ref + 2 * nlit + 2;
    if (!base || !ref) {
        free(base);
        free(ref);
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory");
    }
    const int32_t q = plan->p.samples;
    for (size_t i = 0; i < nlit; i++) {
        const int32_t l = plan->lit[i], ix = l % geo->nx, iy = l / geo->nx;
        base[2 * i] = geometric ? 1 + ix * q : plan->tile_g[2 * i];
        base[2 * i + 1] = geometric ? 1 + iy * q : plan->tile_g[2 * i + 1];
        sw_sh_reference(geo, ix, iy, &ref[2 * i], &ref[2 * i + 1]);
        flux[i] = geometric ? plan->p.flux_e * plan->illum[l] : plan->p.flux_e;
    }
    cudaError_t e = nlit > 0 ? cudaMemcpyAsync(g->base, base, 2 * nlit * sizeof(int32_t),
                                               cudaMemcpyHostToDevice, s)
                             : cudaSuccess;
    if (e == cudaSuccess && nlit > 0)
        e = cudaMemcpyAsync(g->ref, ref, 2 * nlit * sizeof(double), cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess && nlit > 0)
        e = cudaMemcpyAsync(g->flux, flux, nlit * sizeof(double), cudaMemcpyHostToDevice, s);
    const cudaError_t w = cudaStreamSynchronize(s);
    if (e == cudaSuccess)
        e = w;
    free(base);
    free(ref);
    SW_CU(e);
    const int64_t b = ((int64_t)ng + 255) / 256;
    const int64_t cap =
        8 * (int64_t)(plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 16);
    g->resample_blocks = (int)(b < cap ? b : cap);
    return SW_OK;
}

extern "C" sw_status sw_shsim_gpu_set_opd(sw_shsim *plan, const float *opd, int32_t nu, int32_t nv,
                                          double spacing_um, double u0_um, double v0_um)
{
    shsim_gpu *g = (shsim_gpu *)plan->gpu;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    const int geometric = plan->p.model == SW_SH_GEOMETRIC;
    if (!g->opd_d) {
        const sw_status st = fill_device_opd(plan, g);
        if (st != SW_OK) {
            free_device_opd(g);
            return st;
        }
    }
    sh_resample_kernel<<<g->resample_blocks, 256, 0, s>>>(
        opd, nu, nv, spacing_um, u0_um, v0_um, g->need, plan->gw, (int64_t)plan->gw * plan->gh,
        plan->gu0, plan->gv0, plan->h, g->opd_d, geometric ? NULL : g->opd);
    SW_CU(cudaGetLastError());
    if (plan->nlit == 0)
        return SW_OK;
    sh_lens_kernel<<<(unsigned)plan->nlit, SW_SH_LENS_THREADS, 0, s>>>(
        plan->kc, geometric, geometric ? plan->p.samples : plan->tile, g->base, g->cover, g->amp,
        g->opd_d, plan->gw, g->ref, g->flux, g->spots, g->lens);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

extern "C" sw_status sw_shsim_gpu_create(sw_shsim *plan)
{
    SW_CU(cudaSetDevice(plan->ctx->device));
    shsim_gpu *g = (shsim_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory");
    plan->gpu = g;
    SW_TRY(sw_event_pair_create(SW_CUDA_CTX, SW_CUDA_STAGE, &g->ev));
    const size_t nlit = (size_t)plan->nlit;
    if (plan->p.model == SW_SH_GEOMETRIC) {
        const int roi = plan->p.roi_px;
        g->threads = roi * roi >= 256 ? 256 : 128;
        SW_CU(cudaMalloc(&g->spots, (nlit + 1) * sizeof(sw_sh_gspot)));
        return SW_OK;
    }
    const int n = plan->N, tile = plan->tile;
    const size_t slot = (size_t)n * n * sizeof(cufftComplex);
    size_t chunk = SW_SH_CHUNK_BYTES / slot;
    if (chunk < 1)
        chunk = 1;
    if (chunk > 65535)
        chunk = 65535;
    if (chunk > nlit)
        chunk = nlit > 0 ? nlit : 1;
    g->chunk = (int)chunk;
    g->rest = nlit > 0 ? (int)(nlit - (nlit - 1) / chunk * chunk) : 0;
    SW_CU(cudaMalloc(&g->lens, (nlit + 1) * sizeof(sw_sh_dlens)));
    SW_CU(cudaMalloc(&g->amp, (nlit * tile * tile + 1) * sizeof(float)));
    SW_CU(cudaMalloc(&g->opd, (size_t)plan->gw * plan->gh * sizeof(float)));
    SW_CU(cudaMalloc(&g->in, chunk * slot));
    SW_CU(cudaMalloc(&g->fft, chunk * slot));
    SW_CU(sw_cuda_memset_sync(g->in, 0, chunk * slot));
    if (nlit > 0)
        SW_CU(sw_cuda_h2d(g->amp, plan->amp, nlit * tile * tile * sizeof(float)));
    int dims[2] = {n, n};
    cudaStream_t s = stream_of(plan);
    SW_CUFFT(cufftPlanMany(&g->plan_full, 2, dims, NULL, 1, n * n, NULL, 1, n * n, CUFFT_C2C,
                           (int)chunk));
    g->have_full = 1;
    SW_CUFFT(cufftSetStream(g->plan_full, s));
    if (g->rest > 0 && g->rest != g->chunk) {
        SW_CUFFT(cufftPlanMany(&g->plan_rest, 2, dims, NULL, 1, n * n, NULL, 1, n * n, CUFFT_C2C,
                               g->rest));
        g->have_rest = 1;
        SW_CUFFT(cufftSetStream(g->plan_rest, s));
    }
    return SW_OK;
}

static sw_status upload(sw_shsim *plan, shsim_gpu *g)
{
    cudaStream_t s = stream_of(plan);
    const size_t nlit = (size_t)plan->nlit;
    if (plan->p.model == SW_SH_GEOMETRIC) {
        if (nlit > 0)
            SW_CU(cudaMemcpyAsync(g->spots, plan->gspots, nlit * sizeof(sw_sh_gspot),
                                  cudaMemcpyHostToDevice, s));
        return SW_OK;
    }
    if (nlit > 0)
        SW_CU(cudaMemcpyAsync(g->lens, plan->dlens, nlit * sizeof(sw_sh_dlens),
                              cudaMemcpyHostToDevice, s));
    SW_CU(cudaMemcpyAsync(g->opd, plan->opd_f, (size_t)plan->gw * plan->gh * sizeof(float),
                          cudaMemcpyHostToDevice, s));
    return SW_OK;
}

static sw_status launch(sw_shsim *plan, shsim_gpu *g, sw_image *out)
{
    cudaStream_t s = stream_of(plan);
    const int nlit = plan->nlit;
    float *img = (float *)out->data;
    if (nlit == 0)
        return SW_OK;
    if (plan->p.model == SW_SH_GEOMETRIC) {
        const int roi = plan->p.roi_px;
        geometric_kernel<<<(unsigned)nlit, g->threads, 2 * roi * sizeof(double), s>>>(
            g->spots, roi, plan->p.spot == SW_SH_SPOT_SINC2, plan->p.sigma_px, plan->z_px, plan->os,
            img, out->stride, out->width, out->height);
        SW_CU(cudaGetLastError());
        return SW_OK;
    }
    const int n = plan->N, tile = plan->tile, pw = plan->pw;
    const double kw = 2.0 * SW_SHM_PI / plan->p.wavelength_um;
    /* intensity_smem_kernel's shared patch and pixel maps; larger patches (N / os
     * over ~100 px) take the simple kernel */
    const size_t ismem = (size_t)pw * pw * sizeof(float) + 2 * (size_t)n * sizeof(int);
    const int use_smem = ismem <= 48 * 1024;
    const unsigned fblocks = (unsigned)((tile * tile + 63) / 64);
    for (int c0 = 0; c0 < nlit; c0 += g->chunk) {
        const int m = nlit - c0 < g->chunk ? nlit - c0 : g->chunk;
        field_kernel<<<dim3(fblocks, (unsigned)m), 64, 0, s>>>(
            g->lens + c0, g->amp + (size_t)c0 * tile * tile, g->opd, plan->gw, tile, n, kw, g->in);
        SW_CU(cudaGetLastError());
        SW_CUFFT(cufftExecC2C(m == g->chunk ? g->plan_full : g->plan_rest, g->in, g->fft,
                              CUFFT_FORWARD));
        if (use_smem)
            intensity_smem_kernel<<<(unsigned)m, 256, ismem, s>>>(
                g->lens + c0, g->fft, n, plan->os, pw, img, out->stride, out->width, out->height);
        else
            intensity_kernel<<<dim3((unsigned)((pw * pw + 255) / 256), (unsigned)m), 256, 0, s>>>(
                g->lens + c0, g->fft, n, plan->os, pw, img, out->stride, out->width, out->height);
        SW_CU(cudaGetLastError());
    }
    return SW_OK;
}

extern "C" sw_status sw_shsim_gpu_run(sw_shsim *plan, sw_image *out, int accumulate)
{
    shsim_gpu *g = (shsim_gpu *)plan->gpu;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    if (!accumulate)
        SW_CU(cudaMemset2DAsync(out->data, out->stride, 0, (size_t)out->width * sizeof(float),
                                (size_t)out->height, s));
    if (plan->gpu_stale) {
        sw_status st = upload(plan, g);
        if (st != SW_OK)
            return st;
        plan->gpu_stale = 0;
    }
    SW_CU(cudaEventRecord(g->ev.t0, s));
    sw_status st = launch(plan, g, out);
    if (st != SW_OK)
        return st;
    SW_CU(cudaEventRecord(g->ev.t1, s));
    g->timed = 1;
    return SW_OK;
}

extern "C" void sw_shsim_gpu_destroy(sw_shsim *plan)
{
    shsim_gpu *g = (shsim_gpu *)plan->gpu;
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    cudaStreamSynchronize(stream_of(plan));
    if (g->have_full)
        cufftDestroy(g->plan_full);
    if (g->have_rest)
        cufftDestroy(g->plan_rest);
    cudaFree(g->spots);
    cudaFree(g->lens);
    cudaFree(g->amp);
    cudaFree(g->opd);
    cudaFree(g->in);
    cudaFree(g->fft);
    free_device_opd(g);
    sw_event_pair_destroy(&g->ev);
    free(g);
    plan->gpu = NULL;
}

extern "C" double sw_shsim_gpu_render_us(sw_shsim *plan)
{
    shsim_gpu *g = (shsim_gpu *)plan->gpu;
    return g && g->timed ? sw_event_pair_us(&g->ev) : -1.0;
}
