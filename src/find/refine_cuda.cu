/*
 * Position refinement on the GPU (refine.h, refine_internal.h): a group of G lanes per spot
 * (G = 16 by default: two spots per warp; 32 is the first kernel's one warp per spot, 8 four
 * spots per warp). The G lanes stride over the stamp's pixels and add their sums with shuffles
 * within the group (every lane of the group gets the total, so all of them take the same
 * decisions); the per-pixel arithmetic and every decision are refine_spot.h's and
 * refine_model.h's, shared with the CPU. The groups of a warp run their own spots: their
 * shuffles, votes and syncs name only the group's lanes, so a group that takes another branch
 * (another number of fit passes, a failed spot) does not wait for or disturb the others. A block
 * holds 4 warps and its spots' scratch (the annulus' keys and digit counts, the fit's and the
 * window's per-column and per-row factors, the radial bins, the fit's Levenberg-Marquardt state,
 * which the group's first lane steps) in shared memory.
 *
 * Why groups: a 13 x 13 stamp has 169 pixels, 6 rounds of 32 lanes (12 % idle), and every pass
 * ends in a reduction of 23 doubles (5 shuffle steps) and a Levenberg-Marquardt step by one
 * lane while the other 31 wait; with 16 lanes per spot a round wastes 4 %, a reduction takes 4
 * steps for two spots at once, and two spots' steps run side by side.
 *
 * SPOTWAVE_REFINE_LANES = 32 | 16 | 8 (read when a plan is made) picks G, for measurement
 * (bench/bench_refine.c); the results agree to rounding (the sums are added in another order).
 */
#include "find/refine_internal.h"
#include "find/refine_model.h" /* here, not inside the namespaces below */
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <new>
#include <stdlib.h>

namespace
{

/* The lanes of this thread's group of G (all 32 for G = 32). */
template <int G> __device__ inline unsigned sw_group_mask()
{
    constexpr unsigned lanes = G == 32 ? 0xffffffffu : (1u << (G & 31)) - 1u;
    return lanes << ((threadIdx.x & 31u) & ~(unsigned)(G - 1));
}

template <int G> __device__ inline int32_t sw_group_lane()
{
    return (int32_t)(threadIdx.x & (unsigned)(G - 1));
}

/* Every lane of the group gets the sum (max) over the group: butterfly shuffles. */
template <int G, typename T> __device__ inline void sw_group_sum(T *p, int n)
{
    const unsigned m = sw_group_mask<G>();
    for (int i = 0; i < n; ++i) {
        T v = p[i];
        for (int o = G / 2; o > 0; o >>= 1)
            v += __shfl_xor_sync(m, v, o);
        p[i] = v;
    }
}

template <int G> __device__ inline void sw_group_max(double *p)
{
    const unsigned m = sw_group_mask<G>();
    double v = *p;
    for (int o = G / 2; o > 0; o >>= 1)
        v = fmax(v, __shfl_xor_sync(m, v, o));
    *p = v;
}

#if __CUDA_ARCH__ >= 800
template <int G> __device__ inline uint32_t sw_group_umin(uint32_t v)
{
    return __reduce_min_sync(sw_group_mask<G>(), v);
}
template <int G> __device__ inline uint32_t sw_group_umax(uint32_t v)
{
    return __reduce_max_sync(sw_group_mask<G>(), v);
}
template <int G> __device__ inline uint32_t sw_group_usum(uint32_t v)
{
    return __reduce_add_sync(sw_group_mask<G>(), v);
}
#else
template <int G> __device__ inline uint32_t sw_group_umin(uint32_t v)
{
    const unsigned m = sw_group_mask<G>();
    for (int o = G / 2; o > 0; o >>= 1)
        v = min(v, __shfl_xor_sync(m, v, o));
    return v;
}
template <int G> __device__ inline uint32_t sw_group_umax(uint32_t v)
{
    const unsigned m = sw_group_mask<G>();
    for (int o = G / 2; o > 0; o >>= 1)
        v = max(v, __shfl_xor_sync(m, v, o));
    return v;
}
template <int G> __device__ inline uint32_t sw_group_usum(uint32_t v)
{
    const unsigned m = sw_group_mask<G>();
    for (int o = G / 2; o > 0; o >>= 1)
        v += __shfl_xor_sync(m, v, o);
    return v;
}
#endif

/* The sum of v over the group's lanes below this one (exclusive prefix sum). */
template <int G> __device__ inline uint32_t sw_group_uscan(uint32_t v)
{
    const unsigned m = sw_group_mask<G>();
    const int lane = sw_group_lane<G>();
    uint32_t t = v;
    for (int o = 1; o < G; o <<= 1) {
        const uint32_t u = __shfl_up_sync(m, t, o, G);
        if (lane >= o)
            t += u;
    }
    return t - v;
}

/* Compaction: the group's lanes with ok get consecutive slots from *n in lane order. */
template <int G> __device__ inline int32_t sw_group_slot(int ok, int32_t *n)
{
    const unsigned m = __ballot_sync(sw_group_mask<G>(), ok) & sw_group_mask<G>();
    const int32_t slot = *n + __popc(m & ((1u << (threadIdx.x & 31u)) - 1u));
    *n += __popc(m);
    return slot;
}

} // namespace

/* refine_spot.h once per group width, each in its own namespace (its scratch and functions). */
#define SW_RS_FN          __device__ static inline
#define SW_RS_LANE        sw_group_lane<SW_RS_G>()
#define SW_RS_LANES       SW_RS_G
#define SW_RS_SUM(p, n)   sw_group_sum<SW_RS_G>((p), (n))
#define SW_RS_MAX(p)      sw_group_max<SW_RS_G>(p)
#define SW_RS_UMIN(p)     (*(p) = sw_group_umin<SW_RS_G>(*(p)))
#define SW_RS_UMAX(p)     (*(p) = sw_group_umax<SW_RS_G>(*(p)))
#define SW_RS_USUM(p)     (*(p) = sw_group_usum<SW_RS_G>(*(p)))
#define SW_RS_USCAN(p)    (*(p) = sw_group_uscan<SW_RS_G>(*(p)))
#define SW_RS_UINC(p)     atomicAdd((p), 1u)
#define SW_RS_SLOT(ok, n) sw_group_slot<SW_RS_G>((ok), (n))
#define SW_RS_ADD(p, v)   atomicAdd((p), (v))
#define SW_RS_SYNC()      __syncwarp(sw_group_mask<SW_RS_G>())

#define SW_RS_G 32
namespace g32
{
#include "find/refine_spot.h"
}
#undef SW_RS_G
#undef SW_REFINE_SPOT_H

#define SW_RS_G 16
namespace g16
{
#include "find/refine_spot.h"
}
#undef SW_RS_G
#undef SW_REFINE_SPOT_H

/* four spots per warp, 16 per block: 512 annulus keys and 16 stamp pixels each keep the block
 * within 48 KB (the fit reads a larger stamp from the frame on every pass) */
#undef SW_RS_ANNULUS_KEEP
#define SW_RS_ANNULUS_KEEP 512
#undef SW_RS_STAMP_KEEP
#define SW_RS_STAMP_KEEP 16
#define SW_RS_G          8
namespace g8
{
#include "find/refine_spot.h"
}
#undef SW_RS_G

namespace
{

constexpr int WARPS = 4; /* warps per block */

/* The configuration of either instance (the same fields). */
template <class C> C config_of(const sw_refine_plan *plan)
{
    C c;
    c.method = plan->p.method;
    c.background = plan->p.background;
    c.annulus_in = plan->p.annulus_in;
    c.annulus_out = plan->p.annulus_out;
    c.max_iter = plan->p.max_iter;
    c.clip_sigma = plan->p.clip_sigma;
    c.beta = plan->beta;
    return c;
}

/* The result every run downloads: what sw_refine_run writes back to the spots. */
__device__ inline void pack(const sw_refine_result &r, sw_refine_packed *p)
{
    p->x = r.x;
    p->y = r.y;
    p->x_var = r.x_var;
    p->y_var = r.y_var;
    p->flags = r.flags;
    p->pad = 0;
}

/* One kernel per group width and method: with the method a constant the compiler keeps only that
 * method's path, so that MOFFAT's per-pixel quadrature does not raise GAUSS's and XWIN's register
 * count. */
#define REFINE_KERNEL(NS, G, MINBLOCKS)                                                            \
    template <int METHOD>                                                                          \
    __global__ void __launch_bounds__(32 * WARPS, MINBLOCKS)                                       \
        refine_kernel_##NS(sw_rm_frame f, NS::sw_rs_config c, const sw_refine_seed *seeds,         \
                           int64_t n, sw_refine_packed *packed, sw_refine_result *out)             \
    {                                                                                              \
        c.method = METHOD;                                                                         \
        __shared__ NS::sw_rs_scratch scratch[WARPS * (32 / G)];                                    \
        const int group = (int)(threadIdx.x / G);                                                  \
        const int64_t spot = (int64_t)blockIdx.x * (WARPS * (32 / G)) + group;                     \
        if (spot >= n)                                                                             \
            return; /* the whole group */                                                          \
        sw_refine_result r;                                                                        \
        NS::sw_rs_refine(&f, &c, &seeds[spot], &scratch[group], &r);                               \
        if ((threadIdx.x & (G - 1)) == 0) {                                                        \
            pack(r, &packed[spot]);                                                                \
            if (out)                                                                               \
                out[spot] = r;                                                                     \
        }                                                                                          \
    }

/* 5 blocks a SM: at most 96 registers, 20 warps a SM (the double-precision kernel's 146 held
 * 12); came in with the float sums and was not measured alone (BENCHMARKS.md issue 23). g8's
 * 48 KB of shared memory holds 4 blocks; the bound only caps its registers. */
REFINE_KERNEL(g32, 32, 5)
REFINE_KERNEL(g16, 16, 5)
REFINE_KERNEL(g8, 8, 5)

#undef REFINE_KERNEL

/* Lanes per spot. Measured (bench_refine, 10^4 spots, 13 x 13 stamps, H200, 2026-11-27; kernel
 * us for 32 / 16 / 8 lanes): GAUSS none 417 / 340 / 325, XWIN none 324 / 442 / 609, XWIN annulus
 * 230 / 283 / 449, GAUSS annulus 555 / 616 / 843. So 16 for a fit without a background step
 * (GAUSS, MOFFAT with background none), 32 otherwise. SPOTWAVE_REFINE_LANES=32|16|8 overrides
 * (for measuring). */
int lanes_for(const sw_refine_plan *plan)
{
    const char *e = getenv("SPOTWAVE_REFINE_LANES");
    if (e && (atoi(e) == 32 || atoi(e) == 16 || atoi(e) == 8))
        return atoi(e);
    return plan->p.method != SW_REFINE_XWIN && plan->p.background == SW_BACKGROUND_NONE ? 16 : 32;
}

struct refine_gpu {
    uint8_t *mask;
    float *mesh;
    sw_refine_seed *seeds;
    sw_refine_packed *packed;
    sw_refine_result *results;
    int64_t capacity;
    int lanes; /* per spot: 32, 16 or 8 */
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
    cudaFree(g->packed);
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
    g->lanes = lanes_for(plan);
    const size_t n = (size_t)plan->p.width * (size_t)plan->p.height;
    if (plan->mask) {
        SW_CU(cudaMalloc(&g->mask, n));
        SW_CU(sw_cuda_h2d(g->mask, plan->mask, n));
    }
    if (plan->mesh)
        SW_CU(cudaMalloc(&g->mesh, (size_t)plan->mesh_nx * (size_t)plan->mesh_ny * sizeof(float)));
    SW_CU(cudaEventCreate(&g->start));
    SW_CU(cudaEventCreate(&g->stop));
    return SW_OK;
}

sw_status sw_refine_gpu_run(sw_refine_plan *plan, const sw_image *frame, int64_t n, int full)
{
    refine_gpu *g = gpu_of(plan);
    cudaStream_t s = static_cast<cudaStream_t>(plan->ctx->stream);
    if (n > g->capacity) {
        SW_CU(cudaStreamSynchronize(s));
        cudaFree(g->seeds);
        cudaFree(g->packed);
        cudaFree(g->results);
        g->seeds = nullptr;
        g->packed = nullptr;
        g->results = nullptr;
        g->capacity = 0;
        SW_CU(cudaMalloc(&g->seeds, (size_t)plan->capacity * sizeof(sw_refine_seed)));
        SW_CU(cudaMalloc(&g->packed, (size_t)plan->capacity * sizeof(sw_refine_packed)));
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
    SW_CU(cudaMemcpyAsync(g->seeds, plan->seeds, (size_t)n * sizeof(sw_refine_seed),
                          cudaMemcpyHostToDevice, s));
    sw_refine_result *out = full ? g->results : nullptr;
    const int64_t per_block = (int64_t)WARPS * (32 / g->lanes);
    const unsigned blocks = (unsigned)((n + per_block - 1) / per_block);
    SW_CU(cudaEventRecord(g->start, s));
    /* the kernel of the plan's group width and method */
#define REFINE_LAUNCH(NS)                                                                          \
    do {                                                                                           \
        const NS::sw_rs_config c = config_of<NS::sw_rs_config>(plan);                              \
        if (c.method == SW_REFINE_XWIN)                                                            \
            refine_kernel_##NS<SW_REFINE_XWIN>                                                     \
                <<<blocks, 32 * WARPS, 0, s>>>(f, c, g->seeds, n, g->packed, out);                 \
        else if (c.method == SW_REFINE_MOFFAT)                                                     \
            refine_kernel_##NS<SW_REFINE_MOFFAT>                                                   \
                <<<blocks, 32 * WARPS, 0, s>>>(f, c, g->seeds, n, g->packed, out);                 \
        else                                                                                       \
            refine_kernel_##NS<SW_REFINE_GAUSS>                                                    \
                <<<blocks, 32 * WARPS, 0, s>>>(f, c, g->seeds, n, g->packed, out);                 \
    } while (0)
    if (g->lanes == 32)
        REFINE_LAUNCH(g32);
    else if (g->lanes == 8)
        REFINE_LAUNCH(g8);
    else
        REFINE_LAUNCH(g16);
#undef REFINE_LAUNCH
    SW_CU(cudaGetLastError());
    SW_CU(cudaEventRecord(g->stop, s));
    /* one pinned copy of what the spots get; the details only when the caller asked for them */
    SW_CU(cudaMemcpyAsync(plan->packed, g->packed, (size_t)n * sizeof(sw_refine_packed),
                          cudaMemcpyDeviceToHost, s));
    if (full)
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

int sw_refine_gpu_lanes(sw_refine_plan *plan)
{
    refine_gpu *g = plan && plan->gpu ? gpu_of(plan) : nullptr;
    return g ? g->lanes : 0;
}
