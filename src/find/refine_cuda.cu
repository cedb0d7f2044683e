/*
 * Position refinement on the GPU (refine.h, refine_internal.h): one warp per spot. The 32 lanes
 * stride over the stamp's pixels and add their sums with warp shuffles (every lane gets the
 * total, so all lanes take the same decisions); the per-pixel arithmetic and every decision are
 * refine_spot.h's and refine_model.h's, shared with the CPU. A block holds 4 warps and their
 * scratch (the annulus' keys and digit counts, the fit's and the window's per-column and per-row
 * factors, the radial bins, the fit's Levenberg-Marquardt state, which lane 0 steps) in shared
 * memory; 3 blocks fit an SM (148 registers, no spills; 4 would spill).
 */
#include "find/refine_internal.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <new>

#define SW_RS_FN          __device__ static inline
#define SW_RS_LANE        ((int32_t)(threadIdx.x & 31u))
#define SW_RS_LANES       32
#define SW_RS_SUM(p, n)   sw_warp_sum((p), (n))
#define SW_RS_MAX(p)      sw_warp_max(p)
#define SW_RS_UMIN(p)     (*(p) = sw_warp_umin(*(p)))
#define SW_RS_UMAX(p)     (*(p) = sw_warp_umax(*(p)))
#define SW_RS_USUM(p)     (*(p) = sw_warp_usum(*(p)))
#define SW_RS_USCAN(p)    (*(p) = sw_warp_uscan(*(p)))
#define SW_RS_UINC(p)     atomicAdd((p), 1u)
#define SW_RS_SLOT(ok, n) sw_warp_slot((ok), (n))
#define SW_RS_ADD(p, v)   atomicAdd((p), (v))
#define SW_RS_SYNC()      __syncwarp()

namespace
{

/* Every lane gets the sum (max) over the warp: butterfly shuffles. */
__device__ inline void sw_warp_sum(double *p, int n)
{
    for (int i = 0; i < n; ++i) {
        double v = p[i];
        for (int o = 16; o > 0; o >>= 1)
            v += __shfl_xor_sync(0xffffffffu, v, o);
        p[i] = v;
    }
}

__device__ inline void sw_warp_max(double *p)
{
    double v = *p;
    for (int o = 16; o > 0; o >>= 1)
        v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    *p = v;
}

#if __CUDA_ARCH__ >= 800
__device__ inline uint32_t sw_warp_umin(uint32_t v)
{
    return __reduce_min_sync(0xffffffffu, v);
}
__device__ inline uint32_t sw_warp_umax(uint32_t v)
{
    return __reduce_max_sync(0xffffffffu, v);
}
__device__ inline uint32_t sw_warp_usum(uint32_t v)
{
    return __reduce_add_sync(0xffffffffu, v);
}
#else
__device__ inline uint32_t sw_warp_umin(uint32_t v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline uint32_t sw_warp_umax(uint32_t v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline uint32_t sw_warp_usum(uint32_t v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
#endif

/* The sum of v over the lanes below this one (exclusive prefix sum). */
__device__ inline uint32_t sw_warp_uscan(uint32_t v)
{
    const int lane = (int)(threadIdx.x & 31u);
    uint32_t t = v;
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t u = __shfl_up_sync(0xffffffffu, t, o);
        if (lane >= o)
            t += u;
    }
    return t - v;
}

/* Compaction: the lanes with ok get consecutive slots from *n in lane order. */
__device__ inline int32_t sw_warp_slot(int ok, int32_t *n)
{
    const unsigned m = __ballot_sync(0xffffffffu, ok);
    const int32_t slot = *n + __popc(m & ((1u << (threadIdx.x & 31u)) - 1u));
    *n += __popc(m);
    return slot;
}

} // namespace

#include "find/refine_spot.h"

namespace
{

constexpr int WARPS = 4; /* warps (spots) per block */

/* One kernel per method: with the method a constant the compiler keeps only that method's path,
 * so that MOFFAT's per-pixel quadrature does not raise GAUSS's and XWIN's register count. */
template <int METHOD>
__global__ void __launch_bounds__(32 * WARPS, 3)
    refine_kernel(sw_rm_frame f, sw_rs_config c, const sw_refine_seed *seeds, int64_t n,
                  sw_refine_result *out)
{
    __shared__ sw_rs_scratch scratch[WARPS];
    const int warp = (int)(threadIdx.x >> 5);
    const int64_t spot = (int64_t)blockIdx.x * WARPS + warp;
    if (spot >= n)
        return; /* the whole warp */
    c.method = METHOD;
    sw_refine_result r;
    sw_rs_refine(&f, &c, &seeds[spot], &scratch[warp], &r);
    if ((threadIdx.x & 31u) == 0)
        out[spot] = r;
}

struct refine_gpu {
    uint8_t *mask;
    float *mesh;
    sw_refine_seed *seeds;
    sw_refine_result *results;
    int64_t capacity;
    cudaEvent_t start, stop;
    float last_ms;
};

refine_gpu *gpu_of(sw_refine_plan *plan)
{
    return static_cast<refine_gpu *>(plan->gpu);
}

} // namespace

#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "refine"

void sw_refine_gpu_destroy(sw_refine_plan *plan)
{
    refine_gpu *g = gpu_of(plan);
    if (!g)
        return;
    cudaStreamSynchronize(static_cast<cudaStream_t>(plan->ctx->stream));
    cudaFree(g->mask);
    cudaFree(g->mesh);
    cudaFree(g->seeds);
    cudaFree(g->results);
    if (g->start)
        cudaEventDestroy(g->start);
    if (g->stop)
        cudaEventDestroy(g->stop);
    delete g;
    plan->gpu = nullptr;
}

sw_status sw_refine_gpu_create(sw_refine_plan *plan)
{
    refine_gpu *g = new (std::nothrow) refine_gpu();
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "refine: out of memory");
    plan->gpu = g;
    const size_t n = (size_t)plan->p.width * (size_t)plan->p.height;
    if (plan->mask) {
        SW_CU(cudaMalloc(&g->mask, n));
        SW_CU(cudaMemcpy(g->mask, plan->mask, n, cudaMemcpyHostToDevice));
    }
    if (plan->mesh)
        SW_CU(cudaMalloc(&g->mesh, (size_t)plan->mesh_nx * (size_t)plan->mesh_ny * sizeof(float)));
    SW_CU(cudaEventCreate(&g->start));
    SW_CU(cudaEventCreate(&g->stop));
    return SW_OK;
}

sw_status sw_refine_gpu_run(sw_refine_plan *plan, const sw_image *frame, int64_t n)
{
    refine_gpu *g = gpu_of(plan);
    cudaStream_t s = static_cast<cudaStream_t>(plan->ctx->stream);
    if (n > g->capacity) {
        SW_CU(cudaStreamSynchronize(s));
        cudaFree(g->seeds);
        cudaFree(g->results);
        g->seeds = nullptr;
        g->results = nullptr;
        g->capacity = 0;
        SW_CU(cudaMalloc(&g->seeds, (size_t)plan->capacity * sizeof(sw_refine_seed)));
        SW_CU(cudaMalloc(&g->results, (size_t)plan->capacity * sizeof(sw_refine_result)));
        g->capacity = plan->capacity;
    }
    sw_rm_frame f;
    memset(&f, 0, sizeof(f));
    f.data = frame->data;
    f.stride = frame->stride;
    f.type = frame->type;
    f.width = frame->width;
    f.height = frame->height;
    f.mask = g->mask;
    f.overload = plan->overload;
    sw_rm_frame_detector(&f, plan->p.bias, plan->p.gain, plan->p.read_noise);
    if (plan->p.background == SW_BACKGROUND_MESH) {
        const size_t m = (size_t)plan->mesh_nx * (size_t)plan->mesh_ny * sizeof(float);
        SW_CU(cudaMemcpyAsync(g->mesh, plan->mesh, m, cudaMemcpyHostToDevice, s));
        f.mesh = g->mesh;
        f.mesh_nx = plan->mesh_nx;
        f.mesh_ny = plan->mesh_ny;
        f.mesh_box = plan->p.mesh_size;
    }
    sw_rs_config c;
    c.method = plan->p.method;
    c.background = plan->p.background;
    c.annulus_in = plan->p.annulus_in;
    c.annulus_out = plan->p.annulus_out;
    c.max_iter = plan->p.max_iter;
    c.clip_sigma = plan->p.clip_sigma;
    c.beta = plan->beta;
    SW_CU(cudaMemcpyAsync(g->seeds, plan->seeds, (size_t)n * sizeof(sw_refine_seed),
                          cudaMemcpyHostToDevice, s));
    const int64_t blocks = (n + WARPS - 1) / WARPS;
    SW_CU(cudaEventRecord(g->start, s));
    if (c.method == SW_REFINE_XWIN)
        refine_kernel<SW_REFINE_XWIN>
            <<<(unsigned)blocks, 32 * WARPS, 0, s>>>(f, c, g->seeds, n, g->results);
    else if (c.method == SW_REFINE_MOFFAT)
        refine_kernel<SW_REFINE_MOFFAT>
            <<<(unsigned)blocks, 32 * WARPS, 0, s>>>(f, c, g->seeds, n, g->results);
    else
        refine_kernel<SW_REFINE_GAUSS>
            <<<(unsigned)blocks, 32 * WARPS, 0, s>>>(f, c, g->seeds, n, g->results);
    SW_CU(cudaGetLastError());
    SW_CU(cudaEventRecord(g->stop, s));
    SW_CU(cudaMemcpyAsync(plan->results, g->results, (size_t)n * sizeof(sw_refine_result),
                          cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    SW_CU(cudaEventElapsedTime(&g->last_ms, g->start, g->stop));
    return SW_OK;
}

double sw_refine_gpu_kernel_us(sw_refine_plan *plan)
{
    refine_gpu *g = plan && plan->gpu ? gpu_of(plan) : nullptr;
    return g ? 1000.0 * (double)g->last_ms : -1.0;
}
