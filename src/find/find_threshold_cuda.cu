/*
 * The dispersion thresholds of the find stage on the GPU: the twins of find_threshold.c
 * (find.h "DISPERSION" and "DISPERSION_EXTENDED"; seed 003 for the brute-force window kernel,
 * DIALS algorithms/image/threshold/local.h for the rest). The per-pixel value, validity and
 * decisions are find_model.h's, in double precision; this file is compiled with -fmad=false, so
 * they round exactly as on the host and both backends decide every pixel identically.
 *
 * Window sums, exact integers like the CPU's tables: count, sum of values and sum of squared
 * values over the window's pixels that enter the sums (valid and below 2^24, find.h). Two ways:
 *   BRUTE  the seed's kernel_filter: one thread per pixel loops over its (2kx+1)(2ky+1) window,
 *          reading the frame through the read-only cache. Fixed for find.h's semantics: the
 *          plan's mask, the overload, the 2^24 rule, the gain, min_count, the sum of squares in
 *          64 bits (the seed's uint32 sum wraps once a 7x7 window averages ~9400 counts).
 *   TILED  a block of 32 x 8 threads takes a tile of TW = 64 columns x TH rows (TH = 32, or 16 / 8
 *          when the shared memory of a large kernel asks for it). It loads the tile and its halo
 *          (kx columns, ky rows on each side) once into shared memory, consecutive lanes reading
 *          consecutive pixels in their own width (8, 16 or 32 bits: coalesced, no widened copy
 *          of the frame), with value, validity and summability decided once per pixel.
 *          Then the column sums of every tile column over the 2ky+1 rows of each output row
 *          (count u16, sum u32 -- at most 31 x 2^24 -- and squares u64), then per output pixel
 *          the sum of 2kx+1 column sums, and the decision. Per pixel this is (2ky+1) + (2kx+1)
 *          shared-memory additions instead of the brute force's (2kx+1)(2ky+1) frame reads.
 *
 * DISPERSION_EXTENDED, four launches (the window kernel of either kind for both window passes):
 *   1. window pass with (kx, ky): per pixel the state bits DISP (in D: dispersed, or invalid --
 *      sw_fm_decide_extended_1, DIALS keeps masked pixels from eroding) and VALID;
 *   2. erosion, separable: the core is the valid pixels with no pixel outside D within Chebyshev
 *      radius min(kx, ky) - 1, pixels outside the image counting as in D. That is exactly DIALS's
 *      "chamfer distance >= min(kx, ky)" (find_threshold.c): the chamfer gives the exact
 *      Chebyshev distance to the nearest in-image pixel outside D (out-of-image neighbours are
 *      max_distance, larger than any in-image distance). A box minimum is separable: a row pass
 *      (into d_strong, free until the last pass) and a column pass (into the core array);
 *   3.-4. window pass with (kx + 2, ky + 2) over the background (valid, not core, below 2^24),
 *      counts and sums only, and the final decision sw_fm_decide_extended_2.
 *
 * The valid and strong counts are reduced per block (warp shuffles, then shared atomics) and
 * added to d_counts with one atomicAdd per block and counter. Everything is queued on the given
 * stream; nothing is allocated or synchronised in a run.
 */
#include "find/find_internal.h"
#include "find/find_model.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <new>
#include <stdint.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "find"

namespace
{

/* Launch shape: blocks of BX x BY threads; the tiled kernel's tiles are TW columns wide. */
constexpr int BX = 32;
constexpr int BY = 8;
constexpr int TW = 64;

/* The three window passes. */
enum { MODE_BASIC = 0, MODE_EXT1 = 1, MODE_EXT2 = 2 };

/* State bits of extended pass 1 (the state array). */
enum { ST_DISP = 1, ST_VALID = 2 };

/* Flags of a tile pixel in shared memory. */
enum { F_VALID = 1, F_SUM = 2, F_CORE = 4 };

struct thr_gpu {
    uint8_t *mask;  /* npix copy of plan->mask, or NULL                  */
    float *gain;    /* npix copy of plan->gain_map, or NULL              */
    uint8_t *state; /* npix: extended pass-1 bits (NULL for DISPERSION)   */
    uint8_t *core;  /* npix: extended core, 1/0 (NULL for DISPERSION)     */
    int th[3];      /* tiled: rows per tile, per mode                      */
    size_t smem[3]; /* tiled: dynamic shared memory per block, per mode    */
};

struct targs {
    const char *frame; /* device frame, row 0                               */
    size_t stride;     /* bytes per row                                      */
    int w, h;
    const uint8_t *mask;   /* or NULL                                       */
    const float *gain_map; /* or NULL: gain                                 */
    double gain, overload, threshold, sigma_b, sigma_s;
    int min_count;
    int kx, ky;                 /* this pass's window half-sizes                 */
    const uint8_t *core;        /* MODE_EXT2: the core                           */
    uint8_t *out;               /* BASIC / EXT2: strong 1/0; EXT1: state bits     */
    unsigned long long *counts; /* [valid, strong] or NULL (not for EXT1)     */
};

/* ---------------------------------------------------------------- per pixel */

__device__ __forceinline__ uint32_t value_of(uint8_t r, double ovl, int *valid)
{
    return sw_fm_value_int(r, ovl, valid);
}
__device__ __forceinline__ uint32_t value_of(uint16_t r, double ovl, int *valid)
{
    return sw_fm_value_int(r, ovl, valid);
}
__device__ __forceinline__ uint32_t value_of(uint32_t r, double ovl, int *valid)
{
    return sw_fm_value_int(r, ovl, valid);
}
__device__ __forceinline__ uint32_t value_of(float r, double ovl, int *valid)
{
    return sw_fm_value_f32(r, ovl, valid);
}

/* Pixel (x, y) in the image: its value (find_model.h) and validity (with the plan's mask). */
template <typename T>
__device__ __forceinline__ uint32_t pixel(const targs &a, int x, int y, int *valid)
{
    const T *row = reinterpret_cast<const T *>(a.frame + (size_t)y * a.stride);
    uint32_t v = value_of(__ldg(row + x), a.overload, valid);
    if (a.mask && !__ldg(a.mask + (size_t)y * a.w + x))
        *valid = 0;
    return v;
}

/* Whether a pixel enters this pass's window sums: valid and below 2^24; in the background pass
 * (extended step 3) also outside the core. */
template <int MODE> __device__ __forceinline__ bool summable(uint32_t v, int valid, int core)
{
    return valid && sw_fm_summable(v) && !(MODE == MODE_EXT2 && core);
}

/* The decision of pixel (x, y) from its window sums, written to a.out; counts for BASIC / EXT2. */
template <int MODE>
__device__ __forceinline__ void decide(const targs &a, int x, int y, uint32_t v, int valid,
                                       int core, int m, uint64_t s, uint64_t q, int &nvalid,
                                       int &nstrong)
{
    const size_t i = (size_t)y * a.w + x;
    const double g = a.gain_map ? (double)__ldg(a.gain_map + i) : a.gain;
    if (MODE == MODE_EXT1) {
        int d = sw_fm_decide_extended_1(valid, m, s, q, g, a.min_count, a.sigma_b);
        a.out[i] = (uint8_t)((d ? ST_DISP : 0) | (valid ? ST_VALID : 0));
        return;
    }
    int st = MODE == MODE_BASIC
                 ? sw_fm_decide_dispersion(valid, v, m, s, q, g, a.min_count, a.threshold,
                                           a.sigma_b, a.sigma_s)
                 : sw_fm_decide_extended_2(valid, core, v, m, s, g, a.threshold, a.sigma_s);
    a.out[i] = (uint8_t)st;
    nvalid += valid != 0;
    nstrong += st != 0;
}

/* Adds the block's valid and strong counts to counts[0], counts[1]: a warp reduction, shared
 * atomics across the warps, one global atomic per counter. All threads of the block call it. */
template <int MODE>
__device__ __forceinline__ void block_counts(unsigned long long *counts, int nvalid, int nstrong)
{
    if (MODE == MODE_EXT1 || !counts) /* uniform over the block */
        return;
    __shared__ unsigned int bv, bs;
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    if (tid == 0) {
        bv = 0;
        bs = 0;
    }
    __syncthreads();
    for (int o = 16; o > 0; o >>= 1) {
        nvalid += __shfl_down_sync(0xffffffffu, nvalid, o);
        nstrong += __shfl_down_sync(0xffffffffu, nstrong, o);
    }
    if ((tid & 31) == 0) {
        atomicAdd(&bv, (unsigned int)nvalid);
        atomicAdd(&bs, (unsigned int)nstrong);
    }
    __syncthreads();
    if (tid == 0) {
        if (bv)
            atomicAdd(counts, (unsigned long long)bv);
        if (bs)
            atomicAdd(counts + 1, (unsigned long long)bs);
    }
}

/* ---------------------------------------------------------------- BRUTE */

/* One thread per pixel sums its whole window (seed 003's kernel_filter). Blocks BX x BY. */
template <typename T, int MODE> __global__ void __launch_bounds__(BX *BY) k_brute(targs a)
{
    const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;
    int nvalid = 0, nstrong = 0;
    if (x < a.w && y < a.h) {
        const int xa = max(x - a.kx, 0), xb = min(x + a.kx, a.w - 1);
        const int ya = max(y - a.ky, 0), yb = min(y + a.ky, a.h - 1);
        int m = 0;
        uint64_t s = 0, q = 0;
        for (int yy = ya; yy <= yb; ++yy)
            for (int xx = xa; xx <= xb; ++xx) {
                int ok;
                uint32_t v = pixel<T>(a, xx, yy, &ok);
                int core = MODE == MODE_EXT2 ? __ldg(a.core + (size_t)yy * a.w + xx) : 0;
                if (summable<MODE>(v, ok, core)) {
                    m += 1;
                    s += v;
                    if (MODE != MODE_EXT2)
                        q += (uint64_t)v * v;
                }
            }
        int valid;
        uint32_t v = pixel<T>(a, x, y, &valid);
        int core = MODE == MODE_EXT2 ? __ldg(a.core + (size_t)y * a.w + x) : 0;
        decide<MODE>(a, x, y, v, valid, core, m, s, q, nvalid, nstrong);
    }
    block_counts<MODE>(a.counts, nvalid, nstrong);
}

/* ---------------------------------------------------------------- TILED */

/* Dynamic shared memory of a tiled block: column sums of squares (u64; not in EXT2), column
 * sums (u32), tile values (u32), column counts (u16), tile flags (u8), in that order (each
 * array's offset a multiple of its element size). */
__host__ __device__ inline size_t tiled_smem(int mode, int th, int kx, int ky)
{
    size_t hw = (size_t)(TW + 2 * kx), hh = (size_t)(th + 2 * ky);
    return (mode != MODE_EXT2 ? th * hw * 8 : 0) + th * hw * 4 + hh * hw * 4 + th * hw * 2 +
           hh * hw;
}

template <typename T, int MODE> __global__ void __launch_bounds__(BX *BY) k_tiled(targs a, int th)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int kx = a.kx, ky = a.ky;
    const int hw = TW + 2 * kx, hh = th + 2 * ky;
    const int x0 = blockIdx.x * TW, y0 = blockIdx.y * th;
    const int tx = threadIdx.x, ty = threadIdx.y;

    unsigned char *p = smem;
    uint64_t *cq = reinterpret_cast<uint64_t *>(p);
    if (MODE != MODE_EXT2)
        p += (size_t)th * hw * 8;
    uint32_t *cs = reinterpret_cast<uint32_t *>(p);
    p += (size_t)th * hw * 4;
    uint32_t *tv = reinterpret_cast<uint32_t *>(p);
    p += (size_t)hh * hw * 4;
    uint16_t *cm = reinterpret_cast<uint16_t *>(p);
    p += (size_t)th * hw * 2;
    uint8_t *tf = p;

    /* The first two steps walk their rectangles (hh x hw, th x hw) in raster order, 256
     * consecutive entries at a time: every lane busy, consecutive lanes on consecutive pixels
     * (coalesced loads of each pixel's own width, conflict-free shared memory). */
    const int nt = BX * BY, tid = ty * BX + tx;
    const int step_r = nt / hw, step_c = nt % hw;

    /* 1. The tile and its halo: value and flags of every pixel, once. */
    for (int e = tid, r = tid / hw, c = tid % hw; e < hh * hw; e += nt) {
        const int gx = x0 - kx + c, gy = y0 - ky + r;
        uint32_t v = 0;
        unsigned f = 0;
        if (gx >= 0 && gx < a.w && gy >= 0 && gy < a.h) {
            int ok;
            v = pixel<T>(a, gx, gy, &ok);
            const int core = MODE == MODE_EXT2 ? __ldg(a.core + (size_t)gy * a.w + gx) : 0;
            f = (ok ? F_VALID : 0u) | (summable<MODE>(v, ok, core) ? F_SUM : 0u) |
                (core ? F_CORE : 0u);
        }
        tv[e] = v;
        tf[e] = (uint8_t)f;
        r += step_r;
        c += step_c;
        if (c >= hw) {
            c -= hw;
            r += 1;
        }
    }
    __syncthreads();

    /* 2. Column sums over the 2ky+1 rows of each output row: entry (r, c) sums the tile rows
     * r .. r + 2ky of column c. */
    for (int e = tid; e < th * hw; e += nt) {
        uint32_t m = 0, s = 0;
        uint64_t q = 0;
        for (int d = 0; d <= 2 * ky; ++d) {
            const int t = e + d * hw;
            const uint32_t in = (tf[t] & F_SUM) ? 1u : 0u;
            const uint32_t u = in ? tv[t] : 0u;
            m += in;
            s += u;
            if (MODE != MODE_EXT2)
                q += (uint64_t)u * u;
        }
        cm[e] = (uint16_t)m;
        cs[e] = s;
        if (MODE != MODE_EXT2)
            cq[e] = q;
    }
    __syncthreads();

    /* 3. Row sums of 2kx+1 columns, and the decision. */
    int nvalid = 0, nstrong = 0;
    for (int r = ty; r < th; r += BY) {
        const int y = y0 + r;
        for (int c = tx; c < TW; c += BX) {
            const int x = x0 + c;
            if (x >= a.w || y >= a.h)
                continue;
            int m = 0;
            uint64_t s = 0, q = 0;
            for (int d = 0; d <= 2 * kx; ++d) {
                const int e = r * hw + c + d;
                m += cm[e];
                s += cs[e];
                if (MODE != MODE_EXT2)
                    q += cq[e];
            }
            const int e = (r + ky) * hw + c + kx;
            decide<MODE>(a, x, y, tv[e], tf[e] & F_VALID, (tf[e] & F_CORE) != 0, m, s, q, nvalid,
                         nstrong);
        }
    }
    block_counts<MODE>(a.counts, nvalid, nstrong);
}

/* ---------------------------------------------------------------- erosion */

/* Row pass: tmp = 1 when every pixel within [x - r, x + r] of the row is in D (pixels outside
 * the image count as in D). */
__global__ void __launch_bounds__(BX *BY)
    k_erode_rows(const uint8_t *state, uint8_t *tmp, int w, int h, int r)
{
    const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const uint8_t *row = state + (size_t)y * w;
    const int xa = max(x - r, 0), xb = min(x + r, w - 1);
    unsigned all = ST_DISP;
    for (int xx = xa; xx <= xb; ++xx)
        all &= __ldg(row + xx);
    tmp[(size_t)y * w + x] = (uint8_t)(all & ST_DISP ? 1 : 0);
}

/* Column pass: core = valid and tmp = 1 over [y - r, y + r] (rows outside the image count as in
 * D). */
__global__ void __launch_bounds__(BX *BY)
    k_erode_cols(const uint8_t *tmp, const uint8_t *state, uint8_t *core, int w, int h, int r)
{
    const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;
    if (x >= w || y >= h)
        return;
    const size_t i = (size_t)y * w + x;
    const int ya = max(y - r, 0), yb = min(y + r, h - 1);
    unsigned all = (__ldg(state + i) & ST_VALID) ? 1u : 0u;
    for (int yy = ya; yy <= yb && all; ++yy)
        all &= __ldg(tmp + (size_t)yy * w + x);
    core[i] = (uint8_t)all;
}

/* ---------------------------------------------------------------- launches */

thr_gpu *gpu_of(const sw_find_plan *plan)
{
    return static_cast<thr_gpu *>(plan->thr_gpu);
}

template <typename T, int MODE>
sw_status window_pass(sw_find_plan *plan, const thr_gpu *g, const targs &a, sw_find_window win,
                      cudaStream_t s)
{
    const dim3 block(BX, BY);
    if (win == SW_FIND_WINDOW_BRUTE) {
        const dim3 grid((unsigned)((a.w + BX - 1) / BX), (unsigned)((a.h + BY - 1) / BY));
        k_brute<T, MODE><<<grid, block, 0, s>>>(a);
    } else {
        const int th = g->th[MODE];
        const dim3 grid((unsigned)((a.w + TW - 1) / TW), (unsigned)((a.h + th - 1) / th));
        k_tiled<T, MODE><<<grid, block, g->smem[MODE], s>>>(a, th);
    }
    SW_CU(cudaGetLastError());
    return SW_OK;
}

template <typename T>
sw_status run_typed(sw_find_plan *plan, const sw_image *frame, uint8_t *d_strong,
                    sw_find_window win, unsigned long long *d_counts, cudaStream_t s)
{
    const thr_gpu *g = gpu_of(plan);
    targs a;
    a.frame = static_cast<const char *>(frame->data);
    a.stride = frame->stride;
    a.w = plan->width;
    a.h = plan->height;
    a.mask = g->mask;
    a.gain_map = g->gain;
    a.gain = plan->p.gain;
    a.overload = plan->overload;
    a.threshold = plan->p.global_threshold;
    a.sigma_b = plan->p.sigma_background;
    a.sigma_s = plan->p.sigma_strong;
    a.min_count = plan->min_count;
    a.kx = plan->p.kernel_x;
    a.ky = plan->p.kernel_y;
    a.core = nullptr;
    if (plan->p.algorithm == SW_FIND_DISPERSION) {
        a.out = d_strong;
        a.counts = d_counts;
        return window_pass<T, MODE_BASIC>(plan, g, a, win, s);
    }
    /* 1. D and validity */
    a.out = g->state;
    a.counts = nullptr;
    SW_TRY((window_pass<T, MODE_EXT1>(plan, g, a, win, s)));
    /* 2. erosion: radius min(kx, ky) - 1, through d_strong */
    const int r = (a.kx < a.ky ? a.kx : a.ky) - 1;
    const dim3 block(BX, BY);
    const dim3 grid((unsigned)((a.w + BX - 1) / BX), (unsigned)((a.h + BY - 1) / BY));
    k_erode_rows<<<grid, block, 0, s>>>(g->state, d_strong, a.w, a.h, r);
    SW_CU(cudaGetLastError());
    k_erode_cols<<<grid, block, 0, s>>>(d_strong, g->state, g->core, a.w, a.h, r);
    SW_CU(cudaGetLastError());
    /* 3.-4. background sums over the wider window, final decision */
    a.kx += 2;
    a.ky += 2;
    a.core = g->core;
    a.out = d_strong;
    a.counts = d_counts;
    return window_pass<T, MODE_EXT2>(plan, g, a, win, s);
}

/* The tiled kernels' shared memory: the tallest tile (32, 16 or 8 rows) whose block fits the
 * device's opt-in limit. The kernel's limit on dynamic shared memory is raised to all the device
 * allows (less its static shared variables) rather than to this plan's need: the attribute
 * belongs to the kernel, not the plan, and another plan with a larger window may use the same
 * kernel. The limit reserves nothing: a launch takes only the memory it asks for. */
template <typename T, int MODE>
sw_status setup_tiled(sw_find_plan *plan, thr_gpu *g, int kx, int ky, int optin)
{
    cudaFuncAttributes fa;
    SW_CU(cudaFuncGetAttributes(&fa, k_tiled<T, MODE>));
    const size_t limit = (size_t)optin - fa.sharedSizeBytes;
    int th = 32;
    while (th > 8 && tiled_smem(MODE, th, kx, ky) > limit)
        th /= 2;
    const size_t bytes = tiled_smem(MODE, th, kx, ky);
    if (bytes > limit)
        return sw_fail(plan->ctx, SW_ECUDA,
                       "find: the tiled window of half-sizes %d x %d needs %zu bytes of shared "
                       "memory per block, the device allows %zu",
                       kx, ky, bytes, limit);
    SW_CU(cudaFuncSetAttribute(k_tiled<T, MODE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)limit));
    g->th[MODE] = th;
    g->smem[MODE] = bytes;
    return SW_OK;
}

template <typename T> sw_status setup_typed(sw_find_plan *plan, thr_gpu *g, int optin)
{
    const int kx = plan->p.kernel_x, ky = plan->p.kernel_y;
    if (plan->p.algorithm == SW_FIND_DISPERSION)
        return setup_tiled<T, MODE_BASIC>(plan, g, kx, ky, optin);
    SW_TRY((setup_tiled<T, MODE_EXT1>(plan, g, kx, ky, optin)));
    return setup_tiled<T, MODE_EXT2>(plan, g, kx + 2, ky + 2, optin);
}

} // namespace

/* ---------------------------------------------------------------- API (find_internal.h) */

void sw_find_threshold_gpu_free(sw_find_plan *plan)
{
    thr_gpu *g = plan ? gpu_of(plan) : nullptr;
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    cudaFree(g->mask);
    cudaFree(g->gain);
    cudaFree(g->state);
    cudaFree(g->core);
    delete g;
    plan->thr_gpu = nullptr;
}

sw_status sw_find_threshold_gpu_init(sw_find_plan *plan)
{
    thr_gpu *g = new (std::nothrow) thr_gpu();
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "find: out of memory");
    plan->thr_gpu = g;
    SW_CU(cudaSetDevice(plan->ctx->device));
    const size_t n = (size_t)plan->npix;
    if (plan->mask) {
        SW_CU(cudaMalloc((void **)&g->mask, n));
        SW_CU(sw_cuda_h2d(g->mask, plan->mask, n));
    }
    if (plan->gain_map) {
        SW_CU(cudaMalloc((void **)&g->gain, n * sizeof(float)));
        SW_CU(sw_cuda_h2d(g->gain, plan->gain_map, n * sizeof(float)));
    }
    if (plan->p.algorithm == SW_FIND_DISPERSION_EXTENDED) {
        SW_CU(cudaMalloc((void **)&g->state, n));
        SW_CU(cudaMalloc((void **)&g->core, n));
    }
    int optin = 0;
    SW_CU(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, plan->ctx->device));
    switch (plan->p.type) {
    case SW_PIX_U8: return setup_typed<uint8_t>(plan, g, optin);
    case SW_PIX_U16: return setup_typed<uint16_t>(plan, g, optin);
    case SW_PIX_U32: return setup_typed<uint32_t>(plan, g, optin);
    case SW_PIX_F32: return setup_typed<float>(plan, g, optin);
    }
    return sw_fail(plan->ctx, SW_EINVAL, "find: pixel type %d is not supported", (int)plan->p.type);
}

sw_status sw_find_threshold_gpu(sw_find_plan *plan, const sw_image *frame, uint8_t *d_strong,
                                sw_find_window window, unsigned long long *d_counts, void *stream)
{
    if (!gpu_of(plan))
        return sw_fail(plan->ctx, SW_EINTERNAL, "find: the GPU threshold was not initialised");
    const size_t ps = sw_pixel_size(plan->p.type);
    if (!frame || frame->width != plan->width || frame->height != plan->height ||
        frame->type != plan->p.type || frame->memory != SW_MEM_DEVICE || !frame->data ||
        frame->stride % ps != 0 || (uintptr_t)frame->data % ps != 0)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "find: the GPU threshold needs a device %d x %d %s frame with pixel-aligned "
                       "rows",
                       plan->width, plan->height, sw_pixel_type_string(plan->p.type));
    if (!d_strong)
        return sw_fail(plan->ctx, SW_EINVAL, "find: the strong mask is NULL");
    if (window != SW_FIND_WINDOW_BRUTE)
        window = SW_FIND_WINDOW_TILED; /* AUTO: the tiled one (fewer operations per pixel) */
    SW_CU(cudaSetDevice(plan->ctx->device));
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (plan->p.type) {
    case SW_PIX_U8: return run_typed<uint8_t>(plan, frame, d_strong, window, d_counts, s);
    case SW_PIX_U16: return run_typed<uint16_t>(plan, frame, d_strong, window, d_counts, s);
    case SW_PIX_U32: return run_typed<uint32_t>(plan, frame, d_strong, window, d_counts, s);
    case SW_PIX_F32: return run_typed<float>(plan, frame, d_strong, window, d_counts, s);
    }
    return sw_fail(plan->ctx, SW_EINVAL, "find: pixel type %d is not supported", (int)plan->p.type);
}
