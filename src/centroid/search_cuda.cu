/*
 * The GPU twin of the centroid search (search.h; seed 001 Sec. 3.2.1 "GPU implementation of
 * PAPyCS"): PAPYCS and CoM, one warp per spot, and the discarding stage, one thread per spot per
 * criterion. search.c is the reference; the arithmetic both share is search_model.h and this file
 * is compiled with -fmad=false, so the centroids, intensities and statuses are bit-identical to
 * the CPU's.
 *
 *   search_kernel      Algorithms 1-2: blocks of 32 x SEARCH_WARPS threads, warp w of block b
 *                      searches spot b * SEARCH_WARPS + w. Per step every lane builds the same
 *                      window (sw_sm_window_make), sums its columns (sw_sm_lane_sums: columns
 *                      4t + q + 128r, u8 through 32-bit loads where aligned, rows unrolled by 4
 *                      so several loads are in flight), and the four quantities are reduced by
 *                      the butterfly of interleaved __shfl_xor_sync (Algorithm 2 line 19); then
 *                      every lane finishes the step alike (sw_sm_finish) and moves its centre.
 *   contrast_kernel    discarding, criterion 1 (one thread per spot)
 *   spacing_kernel     criterion 2, reading criterion 1's flags
 *   isolated_kernel    criterion 3, reading criterion 2's flags, and the finish (NaN for spots
 *                      that are not OK); without the criteria only the finish.
 * Each criterion reads the previous one's flags from another buffer, so the result does not
 * depend on the order in which threads run.
 */
#include "centroid/search_internal.h"
#include "centroid/search_model.h"
#include "core/core_cuda.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#define SW_CU(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return sw_fail(plan->ctx, e_ == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,      \
                           "search: CUDA call %s failed: %s", #call, cudaGetErrorString(e_));      \
    } while (0)

#define SEARCH_FULL  0xffffffffu
#define SEARCH_WARPS 4   /* spots (warps) per block: SPOTS_PER_BLOCK of Algorithm 1 */
#define SPOT_THREADS 256 /* discarding kernels: threads per block                   */

static cudaStream_t stream_of(const sw_search_plan *plan)
{
    return (cudaStream_t)sw_context_stream(plan->ctx);
}

/* ---------------------------------------------------------------- PAPYCS / CoM */

/* Step 2 for this lane, for the pixel type of the launch. */
template <int TYPE>
__device__ __forceinline__ void lane_sums(const void *frame, size_t stride, const sw_sm_window *w,
                                          int lane, sw_sm_sums *out)
{
    if (TYPE == SW_PIX_U8)
        sw_sm_lane_u8(frame, stride, w, lane, out);
    else if (TYPE == SW_PIX_U16)
        sw_sm_lane_u16(frame, stride, w, lane, out);
    else
        sw_sm_lane_f32(frame, stride, w, lane, out);
}

template <int TYPE>
__global__ void __launch_bounds__(32 * SEARCH_WARPS)
    search_kernel(const void *__restrict__ frame, size_t stride, int32_t width, int32_t height,
                  int32_t n, const double *__restrict__ sx, const double *__restrict__ sy,
                  const uint8_t *__restrict__ active, int32_t smax, int32_t smin, double *x,
                  double *y, double *intensity, uint8_t *status)
{
    int lane = threadIdx.x & 31;
    int32_t k = (int32_t)blockIdx.x * SEARCH_WARPS + (int32_t)(threadIdx.x >> 5);
    if (k >= n)
        return; /* the whole warp */
    if (!active[k]) {
        if (lane == 0) {
            status[k] = SW_SPOT_INACTIVE;
            x[k] = NAN;
            y[k] = NAN;
            intensity[k] = NAN;
        }
        return;
    }
    sw_sm_spot sp;
    if (sw_sm_spot_start(&sp, sx[k], sy[k])) {
        /* Algorithm 2 line 7: the pyramid of windows (warp-uniform control flow). */
        for (int32_t s = smax; s >= smin; --s) {
            sw_sm_window w;
            double ncx = sp.cx, ncy = sp.cy, s0 = 0.0;
            int r;
            if (!sw_sm_window_make(sp.cx, sp.cy, (double)s, width, height, &w)) {
                r = SW_SM_STEP_EMPTY;
            } else {
                sw_sm_sums t;
                lane_sums<TYPE>(frame, stride, &w, lane, &t);
                /* The butterfly, the four shuffles interleaved (seed optimisation 1). */
#pragma unroll
                for (int o = 16; o >= 1; o >>= 1) {
                    sw_sm_sums other;
                    other.s0 = __shfl_xor_sync(SEARCH_FULL, t.s0, o);
                    other.sx = __shfl_xor_sync(SEARCH_FULL, t.sx, o);
                    other.sy = __shfl_xor_sync(SEARCH_FULL, t.sy, o);
                    other.m = __shfl_xor_sync(SEARCH_FULL, t.m, o);
                    t = sw_sm_combine(t, other);
                }
                r = sw_sm_finish(&w, &t, &ncx, &ncy, &s0);
            }
            if (!sw_sm_spot_update(&sp, r, ncx, ncy, s0))
                break;
        }
    }
    if (lane == 0) {
        uint8_t st = sw_sm_spot_status(&sp);
        status[k] = st;
        x[k] = st == SW_SPOT_OK ? sp.cx : NAN;
        y[k] = st == SW_SPOT_OK ? sp.cy : NAN;
        intensity[k] = st == SW_SPOT_OK ? sp.s0 : NAN;
    }
}

extern "C" sw_status sw_search_gpu_search(sw_search_plan *plan, const sw_image *frame,
                                          const double *sx, const double *sy, const uint8_t *active,
                                          double *x, double *y, double *intensity, uint8_t *status)
{
    const sw_search_params *p = &plan->p;
    int32_t smax = p->window_px;
    int32_t smin = p->algorithm == SW_SEARCH_COM ? smax : p->min_window_px;
    unsigned blocks = (unsigned)((p->nspots + SEARCH_WARPS - 1) / SEARCH_WARPS);
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    if (p->type == SW_PIX_U8)
        search_kernel<SW_PIX_U8><<<blocks, 32 * SEARCH_WARPS, 0, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nspots, sx, sy, active, smax, smin,
            x, y, intensity, status);
    else if (p->type == SW_PIX_U16)
        search_kernel<SW_PIX_U16><<<blocks, 32 * SEARCH_WARPS, 0, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nspots, sx, sy, active, smax, smin,
            x, y, intensity, status);
    else
        search_kernel<SW_PIX_F32><<<blocks, 32 * SEARCH_WARPS, 0, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nspots, sx, sy, active, smax, smin,
            x, y, intensity, status);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* ---------------------------------------------------------------- discarding stage */

__global__ void contrast_kernel(const void *__restrict__ frame, size_t stride, int type,
                                int32_t width, int32_t height, int32_t n, const double *x,
                                const double *y, const uint8_t *status, double contrast,
                                uint8_t *flag1)
{
    int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= n)
        return;
    uint8_t s = status[k];
    if (s == SW_SPOT_OK &&
        !sw_sm_contrast_ok(frame, stride, (sw_pixel_type)type, width, height, x[k], y[k], contrast))
        s = SW_SPOT_EMPTY;
    flag1[k] = s;
}

__global__ void spacing_kernel(const uint8_t *flag1, const double *x, const double *y, int32_t nx,
                               int32_t ny, double lo, double hi, uint8_t *flag2)
{
    int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= nx * ny)
        return;
    flag2[k] = sw_sm_discard_spacing(flag1, x, y, k, nx, ny, lo, hi);
}

/* Criterion 3 (when flag2 is not NULL) and the finish. */
__global__ void isolated_kernel(const uint8_t *flag2, int32_t n, int32_t nx, int32_t ny, double *x,
                                double *y, double *intensity, uint8_t *status)
{
    int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= n)
        return;
    uint8_t s = flag2 ? sw_sm_discard_isolated(flag2, k, nx, ny) : status[k];
    status[k] = s;
    if (s != SW_SPOT_OK) {
        x[k] = NAN;
        y[k] = NAN;
        intensity[k] = NAN;
    }
}

extern "C" sw_status sw_search_discard_gpu(sw_search_plan *plan, const sw_image *frame, double *x,
                                           double *y, double *intensity, uint8_t *status)
{
    const sw_search_params *p = &plan->p;
    int32_t n = p->nspots;
    unsigned blocks = (unsigned)((n + SPOT_THREADS - 1) / SPOT_THREADS);
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    const uint8_t *flag2 = NULL;
    if (plan->discard) {
        double lo = p->min_spacing * p->pitch_px, hi = p->max_spacing * p->pitch_px;
        contrast_kernel<<<blocks, SPOT_THREADS, 0, s>>>(
            frame->data, frame->stride, (int)frame->type, frame->width, frame->height, n, x, y,
            status, p->discard_contrast, plan->d_flag1);
        SW_CU(cudaGetLastError());
        spacing_kernel<<<blocks, SPOT_THREADS, 0, s>>>(plan->d_flag1, x, y, p->nx, p->ny, lo, hi,
                                                       plan->d_flag2);
        SW_CU(cudaGetLastError());
        flag2 = plan->d_flag2;
    }
    isolated_kernel<<<blocks, SPOT_THREADS, 0, s>>>(flag2, n, p->nx, p->ny, x, y, intensity,
                                                    status);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* ---------------------------------------------------------------- plan buffers, copies */

extern "C" sw_status sw_search_gpu_create(sw_search_plan *plan)
{
    sw_context *ctx = plan->ctx;
    size_t n = (size_t)plan->p.nspots;
    SW_CU(cudaSetDevice(ctx->device));
    SW_CU(cudaMalloc((void **)&plan->d_sx, n * sizeof(double)));
    SW_CU(cudaMalloc((void **)&plan->d_sy, n * sizeof(double)));
    SW_CU(cudaMalloc((void **)&plan->d_x, n * sizeof(double)));
    SW_CU(cudaMalloc((void **)&plan->d_y, n * sizeof(double)));
    SW_CU(cudaMalloc((void **)&plan->d_int, n * sizeof(double)));
    SW_CU(cudaMalloc((void **)&plan->d_active, n));
    SW_CU(cudaMalloc((void **)&plan->d_status, n));
    SW_CU(cudaMalloc((void **)&plan->d_ones, n));
    SW_CU(cudaMalloc((void **)&plan->d_flag1, n));
    SW_CU(cudaMalloc((void **)&plan->d_flag2, n));
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaMemsetAsync(plan->d_ones, 1, n, s));
    SW_CU(cudaStreamSynchronize(s));
    sw_image *f = &plan->d_frame;
    f->width = plan->p.width;
    f->height = plan->p.height;
    f->type = plan->p.type;
    f->memory = SW_MEM_DEVICE;
    return sw_cuda_image_alloc(ctx, f);
}

extern "C" void sw_search_gpu_destroy(sw_search_plan *plan)
{
    cudaSetDevice(plan->ctx->device);
    sw_image_free(&plan->d_frame);
    void *bufs[] = {plan->d_sx,     plan->d_sy,     plan->d_x,    plan->d_y,     plan->d_int,
                    plan->d_active, plan->d_status, plan->d_ones, plan->d_flag1, plan->d_flag2};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; ++k)
        if (bufs[k])
            cudaFree(bufs[k]);
}

extern "C" sw_status sw_search_gpu_copy(sw_search_plan *plan, void *dst, const void *src,
                                        size_t bytes, int to_device)
{
    if (bytes == 0)
        return SW_OK;
    SW_CU(cudaMemcpyAsync(dst, src, bytes,
                          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                          stream_of(plan)));
    return SW_OK;
}

extern "C" int sw_search_gpu_is_device(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky-free error of an unknown pointer */
        return 0;
    }
    if (a.type == cudaMemoryTypeManaged)
        return 2;
    return a.type == cudaMemoryTypeDevice ? 1 : 0;
}
