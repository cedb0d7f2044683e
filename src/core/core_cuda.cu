/*
 * The CUDA twin of the core: device selection and probing, the context's stream, pinned and
 * device memory, 2-D copies, and the kernels behind sw_image_convert and sw_image_stats_compute
 * (CPU references in image.c).
 */
#include "core/core_cuda.h"
#include "spotwave/rng.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>
#include <cub/block/block_reduce.cuh>

#include <math.h>
#include <type_traits>
#include <stdio.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   ctx
#define SW_CUDA_STAGE NULL

static cudaStream_t stream_of(const sw_context *ctx)
{
    return (cudaStream_t)ctx->stream;
}

/* ------------------------------------------------------------------ devices and context */

extern "C" int sw_cuda_device_count_reason(char *reason, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (reason)
            snprintf(reason, n, "%s",
                     e == cudaErrorNoDevice ? "no CUDA device found"
                     : e == cudaErrorInsufficientDriver
                         ? "no CUDA driver (or one too old for this build)"
                         : cudaGetErrorString(e));
        cudaGetLastError(); /* clear the sticky-free error state */
        return 0;
    }
    if (count == 0 && reason)
        snprintf(reason, n, "no CUDA device found");
    return count;
}

__global__ void probe_kernel(int *out)
{
    *out = 42;
}

/*
 * Makes ctx use its device, or explains in ctx->error why it cannot (always SW_ENODEV, so that
 * AUTO falls back to the CPU). On failure nothing is left allocated and ctx->stream is NULL.
 */
extern "C" sw_status sw_cuda_context_init(sw_context *ctx)
{
    char why[200];
    int count = sw_cuda_device_count_reason(why, sizeof why);
    if (count == 0)
        return sw_fail(ctx, SW_ENODEV, "%s", why);
    if (ctx->device >= count)
        return sw_fail(ctx, SW_ENODEV, "CUDA device %d requested but only %d present", ctx->device,
                       count);
    cudaDeviceProp p;
    memset(&p, 0, sizeof p);
    const char *step = "cudaSetDevice";
    cudaStream_t s = NULL;
    int *d = NULL, h = 0;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e == cudaSuccess) {
        step = "cudaGetDeviceProperties";
        e = cudaGetDeviceProperties(&p, ctx->device);
    }
    if (e == cudaSuccess) {
        step = "cudaStreamCreate";
        e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    }
    /* Probe: a kernel built for this binary's architectures must run on the device. */
    if (e == cudaSuccess) {
        step = "a probe kernel";
        e = cudaMalloc(&d, sizeof *d);
    }
    if (e == cudaSuccess) {
        probe_kernel<<<1, 1, 0, s>>>(d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (d)
        cudaFree(d);
    if (e != cudaSuccess || h != 42) {
        sw_status st = sw_fail(ctx, SW_ENODEV,
                               "CUDA device %d (%.180s, compute capability %d.%d) is not usable: "
                               "%s failed: %s",
                               ctx->device, p.name[0] ? p.name : "unknown", p.major, p.minor, step,
                               e != cudaSuccess ? cudaGetErrorString(e) : "wrong value");
        cudaGetLastError();
        if (s)
            cudaStreamDestroy(s);
        ctx->stream = NULL;
        return st;
    }
    ctx->stream = (void *)s;
    ctx->multiprocessors = p.multiProcessorCount;
    snprintf(ctx->reason, sizeof ctx->reason,
             "CUDA device %d (%.180s, compute capability %d.%d) usable", ctx->device, p.name,
             p.major, p.minor);
    return SW_OK;
}

extern "C" void sw_cuda_context_release(sw_context *ctx)
{
    cudaSetDevice(ctx->device);
    if (ctx->stream) {
        cudaStreamSynchronize(stream_of(ctx));
        cudaStreamDestroy(stream_of(ctx));
    }
    cudaFree(ctx->scratch); /* cudaFree(NULL) is a no-op */
    cudaFree(ctx->stage[0]);
    cudaFree(ctx->stage[1]);
    ctx->stream = NULL;
    ctx->scratch = ctx->stage[0] = ctx->stage[1] = NULL;
    ctx->scratch_size = ctx->stage_size[0] = ctx->stage_size[1] = 0;
}

extern "C" sw_status sw_cuda_device_info(sw_context *ctx, sw_device_info *out)
{
    cudaDeviceProp p;
    SW_CU(cudaSetDevice(ctx->device));
    SW_CU(cudaGetDeviceProperties(&p, ctx->device));
    size_t free_b = 0, total_b = 0;
    SW_CU(cudaMemGetInfo(&free_b, &total_b));
    out->ordinal = ctx->device;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->total_memory = total_b;
    out->free_memory = free_b;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->multiprocessors = p.multiProcessorCount;
    SW_CU(cudaDriverGetVersion(&out->driver_version));
    SW_CU(cudaRuntimeGetVersion(&out->runtime_version));
    return SW_OK;
}

extern "C" sw_status sw_cuda_synchronize(sw_context *ctx)
{
    SW_CU(cudaSetDevice(ctx->device));
    SW_CU(cudaStreamSynchronize(stream_of(ctx)));
    return SW_OK;
}

/* Grows the context's device scratch buffer (used for reduction partials and counters). */
static sw_status ensure_scratch(sw_context *ctx, size_t bytes)
{
    if (ctx->scratch_size >= bytes)
        return SW_OK;
    if (ctx->scratch) {
        SW_CU(cudaStreamSynchronize(stream_of(ctx)));
        cudaFree(ctx->scratch);
        ctx->scratch = NULL;
        ctx->scratch_size = 0;
    }
    SW_CU(cudaMalloc(&ctx->scratch, bytes));
    ctx->scratch_size = bytes;
    return SW_OK;
}

extern "C" sw_status sw_cuda_staging_image(sw_context *ctx, int slot, int32_t width, int32_t height,
                                           sw_pixel_type t, sw_image *out)
{
    size_t row = (size_t)width * sw_pixel_size(t);
    size_t stride = (row + 255) / 256 * 256; /* rows aligned as cudaMallocPitch would */
    size_t bytes = stride * (size_t)height;
    SW_CU(cudaSetDevice(ctx->device));
    if (ctx->stage_size[slot] < bytes) {
        SW_CU(cudaStreamSynchronize(stream_of(ctx)));
        cudaFree(ctx->stage[slot]);
        ctx->stage[slot] = NULL;
        ctx->stage_size[slot] = 0;
        SW_CU(cudaMalloc(&ctx->stage[slot], bytes));
        ctx->stage_size[slot] = bytes;
    }
    out->width = width;
    out->height = height;
    out->stride = stride;
    out->type = t;
    out->memory = SW_MEM_DEVICE;
    out->owned = 0;
    out->data = ctx->stage[slot];
    return SW_OK;
}

/* ------------------------------------------------------------------ memory */

extern "C" void *sw_cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    memset(p, 0, bytes);
    return p;
}

extern "C" sw_status sw_cuda_host_register(sw_context *ctx, void *p, size_t bytes)
{
    SW_CU(cudaSetDevice(ctx->device));
    const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return sw_fail(ctx, SW_ECUDA, "cudaHostRegister of %zu bytes: %s", bytes,
                       cudaGetErrorString(e));
    }
    return SW_OK;
}

extern "C" void sw_cuda_host_unregister(void *p)
{
    if (p && cudaHostUnregister(p) != cudaSuccess)
        cudaGetLastError();
}

extern "C" void sw_cuda_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" void sw_cuda_device_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" sw_status sw_cuda_image_alloc(sw_context *ctx, sw_image *img)
{
    size_t pitch = 0;
    void *p = NULL;
    size_t row = (size_t)img->width * sw_pixel_size(img->type);
    SW_CU(cudaSetDevice(ctx->device));
    cudaError_t e = cudaMallocPitch(&p, &pitch, row, (size_t)img->height);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return sw_fail(ctx, SW_ENOMEM, "out of device memory allocating a %dx%d %s image: %s",
                       img->width, img->height, sw_pixel_type_string(img->type),
                       cudaGetErrorString(e));
    }
    e = cudaMemset2DAsync(p, pitch, 0, row, (size_t)img->height, stream_of(ctx));
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(stream_of(ctx));
    if (e != cudaSuccess) {
        cudaFree(p);
        return sw_fail(ctx, SW_ECUDA, "clearing a device image failed: %s", cudaGetErrorString(e));
    }
    img->data = p;
    img->stride = pitch;
    img->memory = SW_MEM_DEVICE;
    img->owned = 1;
    return SW_OK;
}

extern "C" sw_status sw_cuda_image_copy(sw_context *ctx, const sw_image *src, sw_image *dst)
{
    SW_CU(cudaSetDevice(ctx->device));
    size_t row = (size_t)src->width * sw_pixel_size(src->type);
    SW_CU(cudaMemcpy2DAsync(dst->data, dst->stride, src->data, src->stride, row,
                            (size_t)src->height, cudaMemcpyDefault, stream_of(ctx)));
    if (src->memory != SW_MEM_DEVICE || dst->memory != SW_MEM_DEVICE)
        SW_CU(cudaStreamSynchronize(stream_of(ctx)));
    return SW_OK;
}

/* ------------------------------------------------------------------ kernels */

#define SW_BLOCK 256

/* Launch shape for a per-pixel kernel: threads along rows, blocks along x then grid-stride rows.
 * About 8 resident blocks per SM keep enough loads in flight to stream at memory speed. */
static dim3 pixel_grid(const sw_context *ctx, int32_t width, int32_t height)
{
    int sms = ctx->multiprocessors > 0 ? ctx->multiprocessors : 1;
    unsigned gx = (unsigned)((width + SW_BLOCK - 1) / SW_BLOCK);
    unsigned want = (unsigned)sms * 8u;
    unsigned gy = want > gx ? want / gx : 1u;
    if (gy > (unsigned)height)
        gy = (unsigned)height;
    if (gy > 65535u)
        gy = 65535u;
    return dim3(gx, gy, 1);
}

template <typename T>
__device__ __forceinline__ const T *row_ptr(const void *base, size_t stride, int y)
{
    return (const T *)((const char *)base + (size_t)y * stride);
}

/* Rows a thread loads before it uses any of them: several independent loads in flight per
 * thread are what lets a streaming kernel approach memory bandwidth. */
#define SW_ROWS 4

/* Calls f(y, value) for pixel column x of every row this block owns (rows blockIdx.y,
 * blockIdx.y + gridDim.y, ...), loading SW_ROWS rows at a time. */
template <typename S, typename F>
__device__ __forceinline__ void for_each_row(const void *src, size_t stride, int x, int h, F f)
{
    const int step = gridDim.y;
    int y = blockIdx.y;
    for (; y + (SW_ROWS - 1) * step < h; y += SW_ROWS * step) {
        S v[SW_ROWS];
#pragma unroll
        for (int k = 0; k < SW_ROWS; k++)
            v[k] = row_ptr<S>(src, stride, y + k * step)[x];
#pragma unroll
        for (int k = 0; k < SW_ROWS; k++)
            f(y + k * step, v[k]);
    }
    for (; y < h; y += step)
        f(y, row_ptr<S>(src, stride, y)[x]);
}

/* Counts NaN/Inf f32 pixels (guard before conversion to an integer type). */
__global__ void count_nonfinite_kernel(const void *src, size_t stride, int32_t w, int32_t h,
                                       unsigned long long *count)
{
    typedef cub::BlockReduce<unsigned long long, SW_BLOCK> Reduce;
    __shared__ typename Reduce::TempStorage tmp;
    unsigned long long bad = 0;
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < w)
        for_each_row<float>(src, stride, x, h, [&](int, float v) { bad += !isfinite(v); });
    unsigned long long total = Reduce(tmp).Sum(bad);
    if (threadIdx.x == 0 && total)
        atomicAdd(count, total);
}

template <typename D> struct pixel_limits;
template <> struct pixel_limits<uint8_t> {
    static __device__ double max()
    {
        return 255.0;
    }
};
template <> struct pixel_limits<uint16_t> {
    static __device__ double max()
    {
        return 65535.0;
    }
};
template <> struct pixel_limits<uint32_t> {
    static __device__ double max()
    {
        return 4294967295.0;
    }
};

/* out = in * scale + offset; integers rounded to nearest-even and clamped (image.c store_row). */
template <typename S, typename D>
__global__ void convert_kernel(const void *src, size_t sstride, void *dst, size_t dstride,
                               int32_t w, int32_t h, double scale, double offset,
                               unsigned long long *clipped)
{
    typedef cub::BlockReduce<unsigned long long, SW_BLOCK> Reduce;
    __shared__ typename Reduce::TempStorage tmp;
    unsigned long long clip = 0;
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < w) {
        for_each_row<S>(src, sstride, x, h, [&](int y, S in) {
            double v = __dadd_rn(__dmul_rn((double)in, scale), offset);
            D *out = (D *)((char *)dst + (size_t)y * dstride);
            if constexpr (std::is_floating_point<D>::value) {
                out[x] = (D)v;
            } else {
                v = rint(v);
                if (v < 0.0) {
                    v = 0.0;
                    clip++;
                } else if (v > pixel_limits<D>::max()) {
                    v = pixel_limits<D>::max();
                    clip++;
                }
                out[x] = (D)v;
            }
        });
    }
    if (clipped) {
        unsigned long long total = Reduce(tmp).Sum(clip);
        if (threadIdx.x == 0 && total)
            atomicAdd(clipped, total);
    }
}

extern "C" sw_status sw_cuda_count_nonfinite(sw_context *ctx, const sw_image *src, int64_t *count)
{
    SW_CU(cudaSetDevice(ctx->device));
    sw_status st = ensure_scratch(ctx, sizeof(unsigned long long));
    if (st != SW_OK)
        return st;
    unsigned long long *d = (unsigned long long *)ctx->scratch, h = 0;
    SW_CU(cudaMemsetAsync(d, 0, sizeof *d, stream_of(ctx)));
    count_nonfinite_kernel<<<pixel_grid(ctx, src->width, src->height), SW_BLOCK, 0,
                             stream_of(ctx)>>>(src->data, src->stride, src->width, src->height, d);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, stream_of(ctx)));
    SW_CU(cudaStreamSynchronize(stream_of(ctx)));
    *count = (int64_t)h;
    return SW_OK;
}

template <typename S>
static void launch_convert_to(sw_context *ctx, const sw_image *src, sw_image *dst, double scale,
                              double offset, unsigned long long *clipped)
{
    dim3 grid = pixel_grid(ctx, src->width, src->height);
    cudaStream_t s = stream_of(ctx);
#define SW_LAUNCH(D)                                                                               \
    convert_kernel<S, D><<<grid, SW_BLOCK, 0, s>>>(src->data, src->stride, dst->data, dst->stride, \
                                                   src->width, src->height, scale, offset,         \
                                                   clipped)
    switch (dst->type) {
    case SW_PIX_U8: SW_LAUNCH(uint8_t); break;
    case SW_PIX_U16: SW_LAUNCH(uint16_t); break;
    case SW_PIX_U32: SW_LAUNCH(uint32_t); break;
    case SW_PIX_F32: SW_LAUNCH(float); break;
    }
#undef SW_LAUNCH
}

extern "C" sw_status sw_cuda_convert(sw_context *ctx, const sw_image *src, sw_image *dst,
                                     double scale, double offset, size_t *clipped)
{
    SW_CU(cudaSetDevice(ctx->device));
    unsigned long long *d = NULL;
    if (clipped) {
        sw_status st = ensure_scratch(ctx, sizeof *d);
        if (st != SW_OK)
            return st;
        d = (unsigned long long *)ctx->scratch;
        SW_CU(cudaMemsetAsync(d, 0, sizeof *d, stream_of(ctx)));
    }
    switch (src->type) {
    case SW_PIX_U8: launch_convert_to<uint8_t>(ctx, src, dst, scale, offset, d); break;
    case SW_PIX_U16: launch_convert_to<uint16_t>(ctx, src, dst, scale, offset, d); break;
    case SW_PIX_U32: launch_convert_to<uint32_t>(ctx, src, dst, scale, offset, d); break;
    case SW_PIX_F32: launch_convert_to<float>(ctx, src, dst, scale, offset, d); break;
    }
    SW_CU(cudaGetLastError());
    if (clipped) {
        unsigned long long h = 0;
        SW_CU(cudaMemcpyAsync(&h, d, sizeof h, cudaMemcpyDeviceToHost, stream_of(ctx)));
        SW_CU(cudaStreamSynchronize(stream_of(ctx)));
        *clipped = (size_t)h;
    }
    return SW_OK;
}

/* Statistics partial: the device twin of image.c's stats_acc (same Chan merge). */
struct stats_acc {
    long long n, n_nan, n_inf;
    double min, max, mean, m2;
};

struct stats_merge {
    __host__ __device__ stats_acc operator()(const stats_acc &a, const stats_acc &b) const
    {
        stats_acc r;
        r.n_nan = a.n_nan + b.n_nan;
        r.n_inf = a.n_inf + b.n_inf;
        if (b.n == 0) {
            r.n = a.n;
            r.min = a.min;
            r.max = a.max;
            r.mean = a.mean;
            r.m2 = a.m2;
            return r;
        }
        if (a.n == 0) {
            r.n = b.n;
            r.min = b.min;
            r.max = b.max;
            r.mean = b.mean;
            r.m2 = b.m2;
            return r;
        }
        double n = (double)(a.n + b.n);
        double delta = b.mean - a.mean;
        r.n = a.n + b.n;
        r.min = fmin(a.min, b.min);
        r.max = fmax(a.max, b.max);
        r.mean = a.mean + delta * ((double)b.n / n);
        r.m2 = a.m2 + b.m2 + delta * delta * ((double)a.n * (double)b.n / n);
        return r;
    }
};

/* One pass: each thread accumulates shifted sums over its pixels (shift = its first finite
 * value), turns them into (n, mean, M2), and the block merges with cub::BlockReduce. */
template <typename S>
__global__ void stats_kernel(const void *src, size_t stride, int32_t w, int32_t h,
                             stats_acc *partials)
{
    typedef cub::BlockReduce<stats_acc, SW_BLOCK> Reduce;
    __shared__ typename Reduce::TempStorage tmp;
    stats_acc a;
    a.n = a.n_nan = a.n_inf = 0;
    a.min = INFINITY;
    a.max = -INFINITY;
    a.mean = a.m2 = 0.0;
    double shift = 0.0, s = 0.0, ss = 0.0;
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x < w) {
        for_each_row<S>(src, stride, x, h, [&](int, S in) {
            double v = (double)in;
            if (isnan(v)) {
                a.n_nan++;
            } else if (isinf(v)) {
                a.n_inf++;
            } else {
                if (a.n == 0)
                    shift = v;
                double d = v - shift;
                s += d;
                ss += d * d;
                a.n++;
                a.min = fmin(a.min, v);
                a.max = fmax(a.max, v);
            }
        });
    }
    if (a.n) {
        a.mean = shift + s / (double)a.n;
        a.m2 = fmax(ss - s * s / (double)a.n, 0.0);
    }
    stats_acc b = Reduce(tmp).Reduce(a, stats_merge());
    if (threadIdx.x == 0)
        partials[blockIdx.y * gridDim.x + blockIdx.x] = b;
}

extern "C" sw_status sw_cuda_stats(sw_context *ctx, const sw_image *img, sw_image_stats *out)
{
    SW_CU(cudaSetDevice(ctx->device));
    dim3 grid = pixel_grid(ctx, img->width, img->height);
    size_t nblocks = (size_t)grid.x * grid.y;
    sw_status st = ensure_scratch(ctx, nblocks * sizeof(stats_acc));
    if (st != SW_OK)
        return st;
    stats_acc *d = (stats_acc *)ctx->scratch;
    cudaStream_t s = stream_of(ctx);
    switch (img->type) {
    case SW_PIX_U8:
        stats_kernel<uint8_t>
            <<<grid, SW_BLOCK, 0, s>>>(img->data, img->stride, img->width, img->height, d);
        break;
    case SW_PIX_U16:
        stats_kernel<uint16_t>
            <<<grid, SW_BLOCK, 0, s>>>(img->data, img->stride, img->width, img->height, d);
        break;
    case SW_PIX_U32:
        stats_kernel<uint32_t>
            <<<grid, SW_BLOCK, 0, s>>>(img->data, img->stride, img->width, img->height, d);
        break;
    case SW_PIX_F32:
        stats_kernel<float>
            <<<grid, SW_BLOCK, 0, s>>>(img->data, img->stride, img->width, img->height, d);
        break;
    }
    SW_CU(cudaGetLastError());
    /* The partials (one per block, ~1000) are merged on the host: a few tens of kB. */
    stats_acc *h = (stats_acc *)malloc(nblocks * sizeof *h);
    if (!h)
        return sw_fail(ctx, SW_ENOMEM, "out of memory reading statistics partials");
    cudaError_t e = cudaMemcpyAsync(h, d, nblocks * sizeof *h, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        free(h);
        return sw_fail(ctx, SW_ECUDA, "reading statistics partials failed: %s",
                       cudaGetErrorString(e));
    }
    stats_acc total = h[0];
    for (size_t i = 1; i < nblocks; i++)
        total = stats_merge()(total, h[i]);
    free(h);
    out->n_finite = total.n;
    out->n_nan = total.n_nan;
    out->n_inf = total.n_inf;
    if (total.n == 0) {
        out->min = out->max = out->mean = out->stddev = NAN;
        out->sum = 0.0;
    } else {
        out->min = total.min;
        out->max = total.max;
        out->mean = total.mean;
        out->sum = total.mean * (double)total.n;
        out->stddev = sqrt(total.m2 / (double)total.n);
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ random fill */

/* Same formula as image.c random_value, so the CPU and the GPU fill the same image. */
__global__ void fill_random_kernel(void *dst, size_t stride, int32_t w, int32_t h, uint64_t seed,
                                   uint64_t stream, int dist, double a, double b)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= w)
        return;
    for (int y = blockIdx.y; y < h; y += gridDim.y) {
        sw_rng4 r = sw_rng_draw(seed, stream, (uint64_t)y * (uint64_t)w + (uint64_t)x);
        float v;
        if (dist == SW_RANDOM_UNIFORM) {
            v = (float)__dadd_rn(a, __dmul_rn(b - a, sw_rng_u01(r.v[0], r.v[1])));
            if ((double)v >= b) /* keep [a, b) half-open, as image.c random_value */
                v = nextafterf(v, -INFINITY);
        } else {
            double z0, z1;
            sw_rng_normal2(r, &z0, &z1);
            v = (float)__dadd_rn(a, __dmul_rn(b, z0));
        }
        ((float *)((char *)dst + (size_t)y * stride))[x] = v;
    }
}

extern "C" sw_status sw_cuda_fill_random(sw_context *ctx, sw_image *img, uint64_t seed,
                                         uint64_t stream, int dist, double a, double b)
{
    SW_CU(cudaSetDevice(ctx->device));
    fill_random_kernel<<<pixel_grid(ctx, img->width, img->height), SW_BLOCK, 0, stream_of(ctx)>>>(
        img->data, img->stride, img->width, img->height, seed, stream, dist, a, b);
    SW_CU(cudaGetLastError());
    return SW_OK;
}
