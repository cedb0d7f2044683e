/*
 * The detector model on the GPU: the twin of detector.c, pixel for pixel the same formula and
 * the same counter-based draws (noise.h), so a seed gives the same noise on the CPU and the GPU:
 *   e   = electrons + sky + dark
 *   e   = Poisson(e)                      (shot noise, when on)
 *   e   = min(e, full_well)               (when full_well > 0)
 *   e  += read_noise * N(0, 1)
 *   adu = e / gain + bias, rounded to nearest and clamped for u8 / u16 outputs.
 */
#include "sim/noise.h"
#include "sim/sim_internal.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

template <typename T> __device__ __forceinline__ T adc(double adu);
template <> __device__ __forceinline__ float adc<float>(double adu)
{
    return (float)adu;
}
template <> __device__ __forceinline__ uint8_t adc<uint8_t>(double adu)
{
    return (uint8_t)fmin(fmax(rint(adu), 0.0), 255.0);
}
template <> __device__ __forceinline__ uint16_t adc<uint16_t>(double adu)
{
    return (uint16_t)fmin(fmax(rint(adu), 0.0), 65535.0);
}
template <> __device__ __forceinline__ uint32_t adc<uint32_t>(double adu)
{
    return (uint32_t)fmin(fmax(rint(adu), 0.0), 4294967295.0);
}

template <typename T>
__global__ void detector_kernel(const float *in, size_t in_pitch, T *out, size_t out_pitch,
                                int width, int height, sw_detector d)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= width)
        return;
    for (int y = blockIdx.y; y < height; y += gridDim.y) {
        uint64_t i = (uint64_t)y * (uint64_t)width + (uint64_t)x;
        double e = (double)((const float *)((const char *)in + (size_t)y * in_pitch))[x] + d.sky_e +
                   d.dark_e;
        if (d.shot_noise)
            e = sw_noise_poisson(e, d.seed, i);
        if (d.full_well_e > 0.0)
            e = fmin(e, d.full_well_e);
        if (d.read_noise_e > 0.0)
            e += d.read_noise_e * sw_noise_normal(d.seed, i);
        double adu = e / d.gain_e_per_adu + d.bias_adu;
        ((T *)((char *)out + (size_t)y * out_pitch))[x] = adc<T>(adu);
    }
}

extern "C" sw_status sw_detector_apply_cuda(sw_context *ctx, const sw_detector *d,
                                            const sw_image *electrons, sw_image *out)
{
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess)
        return sw_fail(ctx, SW_ECUDA, "detector: cannot select the CUDA device: %s",
                       cudaGetErrorString(e));
    cudaStream_t s = (cudaStream_t)sw_context_stream(ctx);
    dim3 grid((unsigned)((electrons->width + 255) / 256),
              (unsigned)(electrons->height < 2048 ? electrons->height : 2048));
    const float *in = (const float *)electrons->data;
    switch (out->type) {
    case SW_PIX_U8:
        detector_kernel<uint8_t><<<grid, 256, 0, s>>>(in, electrons->stride, (uint8_t *)out->data,
                                                      out->stride, out->width, out->height, *d);
        break;
    case SW_PIX_U16:
        detector_kernel<uint16_t><<<grid, 256, 0, s>>>(in, electrons->stride, (uint16_t *)out->data,
                                                       out->stride, out->width, out->height, *d);
        break;
    case SW_PIX_U32:
        detector_kernel<uint32_t><<<grid, 256, 0, s>>>(in, electrons->stride, (uint32_t *)out->data,
                                                       out->stride, out->width, out->height, *d);
        break;
    case SW_PIX_F32:
        detector_kernel<float><<<grid, 256, 0, s>>>(in, electrons->stride, (float *)out->data,
                                                    out->stride, out->width, out->height, *d);
        break;
    default:
        return sw_fail(ctx, SW_EINVAL, "detector: output type %s is not supported on the GPU",
                       sw_pixel_type_string(out->type));
    }
    e = cudaGetLastError();
    if (e != cudaSuccess)
        return sw_fail(ctx, SW_ECUDA, "detector kernel launch failed: %s", cudaGetErrorString(e));
    return SW_OK;
}
