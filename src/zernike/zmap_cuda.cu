/*
 * Wavefront maps on the GPU (seed 001 section 3.4), the twin of zmap.c: the basis maps Z_j live
 * in device memory (float or __half, layout in zmap_internal.h) and W = sum_j c_j Z_j is one
 * memory-bound pass over them. The seed's two optimisations:
 *   1. the coefficients are kept in shared memory, loaded once per block;
 *   2. the maps are read as half (2 bytes a value) and summed in float.
 * Each thread makes SW_ZMAP_VEC = 8 neighbouring pixels of a row: one 16-byte load per map in
 * half (uint4 = 4 half2), two float4 in float, so the loads are wide and coalesced; a group
 * wholly outside the stored span only writes NaN. The kernel's time is the bytes of the maps
 * over the memory bandwidth: J * npix * (2 or 4) bytes.
 * Also: the direct method (polynomials evaluated on the fly in double, zmap_internal.h) and the
 * modulo-1 display of sw_zmap_wrap.
 */
#include "core/core_internal.h"
#include "zernike/zmap_internal.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#define THREADS 256

static sw_status cuda_fail(sw_context *ctx, cudaError_t e, const char *what)
{
    return sw_fail(ctx, e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,
                   "wavefront map: %s: %s", what, cudaGetErrorString(e));
}

/* ------------------------------------------------------------------ plan memory */

extern "C" sw_status sw_zmap_cuda_alloc(sw_zmap_plan *plan)
{
    sw_context *ctx = plan->ctx;
    const int32_t n = plan->p.size;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot select the CUDA device");
    int4 *rows = (int4 *)malloc((size_t)n * sizeof *rows);
    if (!rows)
        return sw_fail(ctx, SW_ENOMEM, "wavefront map: out of host memory for the rows");
    for (int32_t k = 0; k < n; k++)
        rows[k] = make_int4(plan->row_a[k], plan->row_len[k], plan->row_off[k], 0);
    const size_t elem = plan->p.half ? sizeof(__half) : sizeof(float);
    const size_t bytes = (size_t)plan->npix * elem * (size_t)plan->terms;
    cudaStream_t s = (cudaStream_t)ctx->stream;
    e = cudaMalloc(&plan->d_rows, (size_t)n * sizeof *rows);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(plan->d_rows, rows, (size_t)n * sizeof *rows, cudaMemcpyHostToDevice,
                            s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    free(rows);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot upload the row table");
    e = cudaMalloc(&plan->d_basis, bytes);
    if (e != cudaSuccess)
        return sw_fail(ctx, e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,
                       "wavefront map: cannot allocate %.1f MB of basis maps on the GPU: %s",
                       (double)bytes / 1e6, cudaGetErrorString(e));
    return SW_OK;
}

extern "C" sw_status sw_zmap_cuda_upload(sw_zmap_plan *plan, int32_t j0, int32_t nj,
                                         const void *host)
{
    const size_t elem = plan->p.half ? sizeof(__half) : sizeof(float);
    const size_t per_map = (size_t)plan->npix * elem;
    cudaStream_t s = (cudaStream_t)plan->ctx->stream;
    cudaError_t e = cudaMemcpyAsync((char *)plan->d_basis + (size_t)j0 * per_map, host,
                                    (size_t)nj * per_map, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s); /* the host buffer is reused for the next map */
    return e == cudaSuccess ? SW_OK : cuda_fail(plan->ctx, e, "cannot upload a basis map");
}

extern "C" void sw_zmap_cuda_free(sw_zmap_plan *plan)
{
    if (plan->d_rows || plan->d_basis)
        cudaSetDevice(plan->ctx->device);
    cudaFree(plan->d_rows);
    cudaFree(plan->d_basis);
    plan->d_rows = NULL;
    plan->d_basis = NULL;
}

/* ------------------------------------------------------------------ the map from the basis */

typedef struct zmap_args {
    int32_t size;   /* map side */
    int32_t groups; /* groups of SW_ZMAP_VEC pixels per row: ceil(size / 8) */
    int32_t nterms;
    int64_t npix; /* stored pixels per map */
    float c[SW_ZMAP_MAX_TERMS];
} zmap_args;

__device__ __forceinline__ void add_half8(float *acc, uint4 v, float c)
{
    const __half2 *h = reinterpret_cast<const __half2 *>(&v);
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const float2 f = __half22float2(h[u]);
        acc[2 * u] = fmaf(c, f.x, acc[2 * u]);
        acc[2 * u + 1] = fmaf(c, f.y, acc[2 * u + 1]);
    }
}

__device__ __forceinline__ void add_float4(float *acc, float4 v, float c)
{
    acc[0] = fmaf(c, v.x, acc[0]);
    acc[1] = fmaf(c, v.y, acc[1]);
    acc[2] = fmaf(c, v.z, acc[2]);
    acc[3] = fmaf(c, v.w, acc[3]);
}

/* One thread: pixels i0 .. i0 + 7 of row k. */
template <bool HALF>
__global__ void __launch_bounds__(THREADS)
    zmap_kernel(zmap_args a, const int4 *__restrict__ rows, const void *__restrict__ basis,
                char *__restrict__ out, size_t stride)
{
    /* Seed optimisation 1: the coefficients, loaded once per block, read from shared memory. */
    __shared__ float sc[SW_ZMAP_MAX_TERMS];
    for (int t = (int)threadIdx.x; t < a.nterms; t += (int)blockDim.x)
        sc[t] = a.c[t];
    __syncthreads();

    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)a.size * a.groups)
        return;
    const int32_t k = (int32_t)(id / a.groups);
    const int32_t i0 = (int32_t)(id - (int64_t)k * a.groups) * SW_ZMAP_VEC;
    const int4 r = rows[k]; /* (first stored pixel, stored length, offset, -) */
    float acc[SW_ZMAP_VEC];
    if (i0 >= r.x && i0 < r.x + r.y) {
#pragma unroll
        for (int u = 0; u < SW_ZMAP_VEC; u++)
            acc[u] = 0.0f;
        const int64_t at = (int64_t)r.z + (i0 - r.x); /* a multiple of 8: aligned vectors */
        if (HALF) {
            /* Seed optimisation 2: half maps, float sums. */
            const uint4 *b =
                reinterpret_cast<const uint4 *>(reinterpret_cast<const __half *>(basis)) + at / 8;
            const int64_t step = a.npix / 8;
#pragma unroll 4
            for (int32_t j = 0; j < a.nterms; j++)
                add_half8(acc, __ldg(b + (int64_t)j * step), sc[j]);
        } else {
            const float4 *b = reinterpret_cast<const float4 *>(basis) + at / 4;
            const int64_t step = a.npix / 4;
#pragma unroll 4
            for (int32_t j = 0; j < a.nterms; j++) {
                const float4 v0 = __ldg(b + (int64_t)j * step);
                const float4 v1 = __ldg(b + (int64_t)j * step + 1);
                add_float4(acc, v0, sc[j]);
                add_float4(acc + 4, v1, sc[j]);
            }
        }
    } else {
#pragma unroll
        for (int u = 0; u < SW_ZMAP_VEC; u++)
            acc[u] = __int_as_float(0x7fc00000); /* NaN: outside the pupil */
    }
    float *o = reinterpret_cast<float *>(out + (size_t)k * stride) + i0;
    if (i0 + SW_ZMAP_VEC <= a.size && (reinterpret_cast<uintptr_t>(o) & 15u) == 0) {
        reinterpret_cast<float4 *>(o)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        reinterpret_cast<float4 *>(o)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    } else {
#pragma unroll
        for (int u = 0; u < SW_ZMAP_VEC; u++)
            if (i0 + u < a.size)
                o[u] = acc[u];
    }
}

static unsigned blocks_for(int64_t n)
{
    return (unsigned)((n + THREADS - 1) / THREADS);
}

extern "C" sw_status sw_zmap_cuda_run(sw_zmap_plan *plan, const float *c, int32_t nterms,
                                      sw_image *out)
{
    sw_context *ctx = plan->ctx;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot select the CUDA device");
    zmap_args a;
    a.size = plan->p.size;
    a.groups = (plan->p.size + SW_ZMAP_VEC - 1) / SW_ZMAP_VEC;
    a.nterms = nterms;
    a.npix = plan->npix;
    for (int32_t j = 0; j < SW_ZMAP_MAX_TERMS; j++)
        a.c[j] = j < nterms ? c[j] : 0.0f;
    const unsigned blocks = blocks_for((int64_t)a.size * a.groups);
    cudaStream_t s = (cudaStream_t)ctx->stream;
    if (plan->p.half)
        zmap_kernel<true><<<blocks, THREADS, 0, s>>>(a, (const int4 *)plan->d_rows, plan->d_basis,
                                                     (char *)out->data, out->stride);
    else
        zmap_kernel<false><<<blocks, THREADS, 0, s>>>(a, (const int4 *)plan->d_rows, plan->d_basis,
                                                      (char *)out->data, out->stride);
    e = cudaGetLastError();
    return e == cudaSuccess ? SW_OK : cuda_fail(ctx, e, "map kernel launch failed");
}

/* ------------------------------------------------------------------ the direct method */

/* zmap.c's sw_zmap_inside with the same roundings (no fused multiply-add). */
__device__ __forceinline__ bool inside_dev(int32_t size, double o2, int32_t i, int32_t k, double *x,
                                           double *y)
{
    const double s = (double)size;
    *x = __dadd_rn(__ddiv_rn((double)(2 * (int64_t)i + 1), s), -1.0);
    *y = __dadd_rn(__ddiv_rn((double)(2 * (int64_t)k + 1), s), -1.0);
    const double r2 = __dadd_rn(__dmul_rn(*x, *x), __dmul_rn(*y, *y));
    return r2 <= 1.0 && r2 >= o2;
}

/* One thread per pixel: W = sum_k A_k(t) Re(w^k) + B_k(t) Im(w^k), in double. */
__global__ void __launch_bounds__(THREADS)
    direct_kernel(sw_zmap_poly poly, int32_t size, double o2, char *__restrict__ out, size_t stride)
{
    __shared__ sw_zmap_poly sp; /* the polynomial coefficients, as the seed's optimisation 1 */
    {
        const int *src = reinterpret_cast<const int *>(&poly);
        int *dst = reinterpret_cast<int *>(&sp);
        for (int t = (int)threadIdx.x; t < (int)(sizeof poly / sizeof(int)); t += (int)blockDim.x)
            dst[t] = src[t];
    }
    __syncthreads();
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)size * size)
        return;
    const int32_t k = (int32_t)(id / size), i = (int32_t)(id - (int64_t)k * size);
    double x, y;
    float v = __int_as_float(0x7fc00000);
    if (inside_dev(size, o2, i, k, &x, &y)) {
        const double t = x * x + y * y;
        double cw = 1.0, sw = 0.0, w = 0.0;
        for (int kk = 0; kk <= sp.kmax; kk++) {
            if (kk > 0) {
                const double c2 = cw * x - sw * y;
                sw = cw * y + sw * x;
                cw = c2;
            }
            const int d = sp.deg[kk];
            double pa = sp.a[kk][d], pb = sp.b[kk][d];
            for (int p = d - 1; p >= 0; p--) {
                pa = fma(pa, t, sp.a[kk][p]);
                pb = fma(pb, t, sp.b[kk][p]);
            }
            w += pa * cw + pb * sw;
        }
        v = (float)w;
    }
    reinterpret_cast<float *>(out + (size_t)k * stride)[i] = v;
}

extern "C" sw_status sw_zmap_cuda_direct(sw_zmap_plan *plan, const sw_zmap_poly *poly,
                                         sw_image *out)
{
    sw_context *ctx = plan->ctx;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot select the CUDA device");
    const int32_t n = plan->p.size;
    const double o2 = plan->p.obscuration * plan->p.obscuration;
    direct_kernel<<<blocks_for((int64_t)n * n), THREADS, 0, (cudaStream_t)ctx->stream>>>(
        *poly, n, o2, (char *)out->data, out->stride);
    e = cudaGetLastError();
    return e == cudaSuccess ? SW_OK : cuda_fail(ctx, e, "direct map kernel launch failed");
}

/* ------------------------------------------------------------------ display */

/* zmap.c's wrap_value with the same roundings. */
__global__ void wrap_kernel(const char *__restrict__ map, size_t map_stride, int32_t width,
                            int32_t height, double wl, char *__restrict__ out, size_t out_stride)
{
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)width * height)
        return;
    const int32_t k = (int32_t)(id / width), i = (int32_t)(id - (int64_t)k * width);
    const float w = reinterpret_cast<const float *>(map + (size_t)k * map_stride)[i];
    uint8_t r = 0;
    if (isfinite(w)) {
        const double q = __ddiv_rn((double)w, wl);
        const double f = __dsub_rn(q, floor(q));
        const double v = nearbyint(__dmul_rn(f, 255.0));
        r = (uint8_t)(v > 255.0 ? 255.0 : v);
    }
    reinterpret_cast<uint8_t *>(out + (size_t)k * out_stride)[i] = r;
}

extern "C" sw_status sw_zmap_cuda_wrap(sw_context *ctx, const sw_image *map, double wavelength_um,
                                       sw_image *out)
{
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return cuda_fail(ctx, e, "cannot select the CUDA device");
    const int64_t n = (int64_t)map->width * map->height;
    wrap_kernel<<<blocks_for(n), THREADS, 0, (cudaStream_t)ctx->stream>>>(
        (const char *)map->data, map->stride, map->width, map->height, wavelength_um,
        (char *)out->data, out->stride);
    e = cudaGetLastError();
    return e == cudaSuccess ? SW_OK : cuda_fail(ctx, e, "wrap kernel launch failed");
}
