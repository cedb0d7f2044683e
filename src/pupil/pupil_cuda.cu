/*
 * The GPU twin of the pupil tracker (pupil.h steps 0-9; seed 001 Sec. 3.1 "GPU implementation of
 * Pupil Tracking"). pupil_cpu.c is the reference; the arithmetic both share is pupil_model.h, and
 * this file is compiled with -fmad=false, so everything up to the RANSAC winner is bit-identical
 * to the CPU's (the 8-bit images, the split, the thresholds, the border lists in the same order,
 * the votes and the winner); the refinement sums are added in another order (1e-6 px).
 *
 * One kernel per step, all on the context's stream (sw_context_stream):
 *   step 0  pp_row_sums_kernel    one warp per row (8 rows per block of 256): the frame mean's
 *                                 row sums in pupil_model.h's order (SW_PM_MEAN_*)
 *           pp_scale_kernel       one block of 1024: the total (the model's tree), the scale
 *                                 (and the fixed split)
 *           pp_to_u8_kernel       one thread per pixel (grid-stride): sw_pm_to_u8
 *   step 1  pp_gauss_rows_kernel  tiles of 128 x 2 pixels (block 128 x 2) in shared memory with
 *           pp_gauss_cols_kernel  a halo of r; tiles of 32 x 64 (block 32 x 8, 8 rows per thread)
 *                                 (the seed's optimisations 1 separable, 2 shared memory,
 *                                 3 template unrolling for the default radius 4, 4 8-bit data)
 *   step 2  pp_colsum_kernel      32 x 64 pixel blocks (block 32 x 8), one 64-bit atomic per
 *                                 column and block
 *           pp_split_kernel       one block of 1024: the boxed profile and its argmin
 *   step 3  pp_hist_kernel        per-region histograms in shared memory (block 256, grid-stride)
 *           pp_otsu_kernel        one block of 256 per region: exact integer prefix sums, the
 *                                 criterion per t, the argmax
 *   step 4  pp_morph_rows_kernel  as the Gaussian's tiles, max (dilation; the threshold fused into
 *           pp_morph_cols_kernel  its first pass) or min (erosion), windows clipped to the
 *                                 region and the image
 *   step 5  cub::DeviceSelect::If over (x, y) = (i % width, i / width), i counting the frame's
 *                                 pixels, one call per region: the border pixels of the region
 *                                 in raster order (the selection keeps the order)
 *   step 6  pp_vote_kernel        one warp per candidate (8 per block of 256): lane 0 builds the
 *                                 candidate, the lanes test 32 border points at a time, votes
 *                                 counted with __ballot_sync + __popc (seed's optimisation 3),
 *                                 an atomicMax of the packed (votes, index) per region
 *   7-9     pp_fit_kernel         one block of 256 per region: the refinement's sums (per-thread
 *                                 partials, warp shuffles, shared memory), the solve, the
 *                                 inliers, the verdict, written into mapped host memory (seed's
 *                                 optimisation 4: no device-to-host copy of the result)
 *   mask    pp_lenslet_kernel     one thread per lenslet
 * Everything after the frame's copy into the plan's buffer is one CUDA graph, captured on the
 * first run and launched per frame; the host waits once, at the end.
 *
 * A frame whose automatic scale is 0 (SW_PUPIL_EMPTY_FRAME) runs through the same kernels: its
 * 8-bit image is all 0, so the regions have no threshold, the masks are empty and no border
 * pixel is found; the fit kernel then reports EMPTY_FRAME for every pupil.
 */
#include "pupil/pupil_internal.h"

#include <cuda_runtime.h>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SW_CU(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return sw_fail(plan->ctx, e_ == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,      \
                           "pupil: CUDA call %s failed: %s", #call, cudaGetErrorString(e_));       \
    } while (0)

#define SW_TRY(expr)                                                                               \
    do {                                                                                           \
        sw_status st_ = (expr);                                                                    \
        if (st_ != SW_OK)                                                                          \
            return st_;                                                                            \
    } while (0)

#define PP_FULL 0xffffffffu

#define PP_SUM_WARPS   8   /* step 0: rows per block of the row sums (one warp each)     */
#define PP_PIX         256 /* per-pixel and histogram kernels: threads per block         */
#define PP_ROW_BX      128 /* row filters: tile columns (threads in x)                   */
#define PP_ROW_BY      2   /* row filters: tile rows (threads in y)                      */
#define PP_COL_BX      32  /* column filters: tile columns (threads in x)                */
#define PP_COL_BY      8   /* column filters: threads in y                               */
#define PP_COL_RPT     8   /* column filters: output rows per thread                     */
#define PP_COL_TH      (PP_COL_BY * PP_COL_RPT) /* column filters: tile rows (64)   */
#define PP_ROW_THREADS (PP_ROW_BX * PP_ROW_BY)  /* row filters: threads per block  */
#define PP_COL_THREADS (PP_COL_BX * PP_COL_BY)  /* column filters: threads per block */
#define PP_HALO        SW_PUPIL_MAX_RADIUS      /* room for the largest radius            */
#define PP_SPLIT       1024 /* step 2: threads of the split block                         */
#define PP_VOTE_WARPS  8    /* step 6: candidates per block                               */
#define PP_FIT         256  /* steps 7-9: threads per region                              */
#define PP_DEFAULT_R   4    /* the radius with its own unrolled kernels (seed: radius 4)  */

/* What the kernels find per frame, in device memory (zeroed at init). */
struct pp_state {
    double scale;               /* step 0: the 8-bit conversion factor (0: empty frame)     */
    int32_t split;              /* step 2: first column of region 1 (width with one pupil)  */
    int32_t thr[2];             /* step 3: Otsu thresholds, -1 when none                    */
    long long nborder[2];       /* step 5: border pixels per region (CUB's counts)          */
    unsigned long long best[2]; /* step 6: sw_pm_pack_vote of the winner, 0 when none       */
};

/* The Gaussian's Q16 weights, passed by value (kernel parameters live in constant memory; a
 * __constant__ array would be shared by every plan of the process). */
struct pp_taps {
    uint32_t w[SW_PUPIL_MAX_TAPS];
};

/* What the fitting kernels (steps 6-9) read, by value. */
struct pp_fit_args {
    int32_t width, height, n_pupils, candidates, refine_iterations;
    double inlier_px, min_r, max_r, min_coverage;
    int64_t npix;            /* the stride between the regions' border lists (pairs) */
    const float *randoms;    /* candidates x 5 */
    const int2 *border;      /* n_pupils x npix (x, y) pairs */
    pp_state *st;            /* the frame's state */
    sw_pupil_result *result; /* the mapped host result: its device address */
    sw_pupil_ellipse *pupils;        /* device copy of the pupils, for the lenslet mask */
};

/* The plan's device state (plan->gpu). */
struct pp_gpu {
    void *frame;                /* the plan's type, tight rows */
    uint8_t *img8, *tmp8;       /* tight u8 images: the 8-bit input, scratch */
    uint8_t *smooth8, *closed8; /* the smoothed image, the closed mask */
    double *row_sums;           /* height */
    unsigned long long *colsum; /* width */
    unsigned int *hist;         /* 2 x 256 */
    int2 *border;               /* n_pupils x npix */
    float *randoms;             /* candidates x 5 */
    pp_state *st;               /* the frame's state */
    sw_pupil_ellipse *pupils;           /* 2: device copy of the result's pupils */
    uint8_t *lenslet;           /* nx x ny (with a geometry) */
    void *cub_temp;             /* step 5's CUB storage */
    size_t cub_bytes;
    sw_pupil_result *h_result; /* mapped pinned host memory */
    sw_pupil_result *d_result; /* its device address */
    cudaGraph_t graph;         /* steps 0-9 and the mask, captured on the first run */
    cudaGraphExec_t exec;
};

static pp_gpu *gpu_of(const sw_pupil_plan *plan)
{
    return (pp_gpu *)plan->gpu;
}

static cudaStream_t stream_of(const sw_pupil_plan *plan)
{
    return (cudaStream_t)sw_context_stream(plan->ctx);
}

/* The region r of the frame: columns [x0, x1) (pupil.h step 2). */
__device__ __forceinline__ void pp_region_cols(int32_t split, int32_t width, int r, int32_t *x0,
                                               int32_t *x1)
{
    *x0 = r == 0 ? 0 : split;
    *x1 = r == 0 ? split : width;
}

/* A 1-D grid-stride launch: enough blocks of `threads` to fill the device a few times over. */
static unsigned grid1(const sw_pupil_plan *plan, int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    const int64_t most =
        8 * (int64_t)(plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 32);
    if (b > most)
        b = most;
    return (unsigned)(b > 0 ? b : 1);
}

/* ================================================================== step 0: 8-bit input */

/* Row sums of the frame mean (pupil_model.h SW_PM_MEAN_*): lane j adds x = j, j + 32, ... in
 * order (NaN and Inf as 0), then the 5 butterfly rounds s_j + s_(j xor o). One warp per row. */
template <typename T>
__global__ void __launch_bounds__(PP_SUM_WARPS * 32)
    pp_row_sums_kernel(const T *frame, int32_t width, int32_t height, double *row_sums)
{
    const int lane = threadIdx.x & 31;
    const int32_t y = (int32_t)blockIdx.x * PP_SUM_WARPS + (int32_t)(threadIdx.x >> 5);
    if (y >= height)
        return; /* the whole warp */
    const T *row = frame + (size_t)y * (size_t)width;
    double a = 0.0;
    for (int32_t x = lane; x < width; x += SW_PM_MEAN_LANES)
        a += sw_pm_finite_or_zero((double)row[x]);
    for (int o = SW_PM_MEAN_LANES / 2; o >= 1; o /= 2)
        a = a + __shfl_xor_sync(PP_FULL, a, o);
    if (lane == 0)
        row_sums[y] = a;
}

/* The total of the row sums (pupil_model.h: slot i adds rows i, i + 1024, ... in order, then the
 * tree slot_i + slot_(i + o)) and the scale: input_scale when > 0, else sw_pm_auto_scale. Also
 * writes the split when it is not found per frame (split_fixed >= 0: the fixed split, or the
 * width with one pupil). One block of SW_PM_MEAN_SLOTS threads. */
__global__ void __launch_bounds__(SW_PM_MEAN_SLOTS)
    pp_scale_kernel(const double *row_sums, int32_t height, int64_t npix, double input_scale,
                    int32_t split_fixed, pp_state *st)
{
    __shared__ double s[SW_PM_MEAN_SLOTS];
    const int i = threadIdx.x;
    if (i == 0 && split_fixed >= 0)
        st->split = split_fixed;
    if (input_scale > 0.0) {
        if (i == 0)
            st->scale = input_scale;
        return; /* the whole block */
    }
    double a = 0.0;
    for (int32_t y = i; y < height; y += SW_PM_MEAN_SLOTS)
        a += row_sums[y];
    s[i] = a;
    __syncthreads();
    for (int o = SW_PM_MEAN_SLOTS / 2; o >= 1; o /= 2) {
        if (i < o)
            s[i] = s[i] + s[i + o];
        __syncthreads();
    }
    if (i == 0)
        st->scale = sw_pm_auto_scale(s[0], npix);
}

/* u8 = sw_pm_to_u8(v, scale), one thread per pixel (the seed's optimisation 4: everything after
 * this works on 8-bit data). */
template <typename T>
__global__ void __launch_bounds__(PP_PIX)
    pp_to_u8_kernel(const T *frame, int64_t npix, const pp_state *st, uint8_t *img8)
{
    const double scale = st->scale;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < npix; i += stride)
        img8[i] = sw_pm_to_u8((double)frame[i], scale);
}

/* ================================================================== step 1: Gaussian */

/* sum_k w_k v_(k) over the 2r + 1 taps of a shared-memory line (stride between taps `step`):
 * unrolled for a compile-time radius R >= 0 (the seed's optimisation 3), a loop for R < 0. */
template <int R>
__device__ __forceinline__ uint32_t pp_taps_sum(const uint8_t *v, int step, int rr,
                                                const pp_taps &t)
{
    uint32_t acc = 0;
    if (R >= 0) {
#pragma unroll
        for (int k = 0; k <= 2 * R; k++)
            acc += t.w[k] * (uint32_t)v[k * step];
    } else {
        for (int k = 0; k <= 2 * rr; k++)
            acc += t.w[k] * (uint32_t)v[k * step];
    }
    return acc;
}

/* Step 1, rows: out(x, y) = sw_pm_gauss_finish(sum_k w_k in(clamp(x - r + k), y)). A block's
 * tile of PP_ROW_BX x PP_ROW_BY pixels is read once into shared memory with r pixels on each
 * side (the edge pixel repeated beyond the image). R: the radius at compile time, or -1 (rr). */
template <int R>
__global__ void __launch_bounds__(PP_ROW_THREADS)
    pp_gauss_rows_kernel(const uint8_t *in, uint8_t *out, int32_t width, int32_t height, int rr,
                         pp_taps taps)
{
    __shared__ uint8_t tile[PP_ROW_BY][PP_ROW_BX + 2 * PP_HALO];
    const int r = R >= 0 ? R : rr;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int32_t xb = (int32_t)blockIdx.x * PP_ROW_BX;
    const int32_t y = (int32_t)blockIdx.y * PP_ROW_BY + ty;
    const uint8_t *row = in + (size_t)min(y, height - 1) * (size_t)width;
    for (int i = tx; i < PP_ROW_BX + 2 * r; i += PP_ROW_BX)
        tile[ty][i] = row[min(max(xb - r + i, 0), width - 1)];
    __syncthreads();
    const int32_t x = xb + tx;
    if (x < width && y < height)
        out[(size_t)y * (size_t)width + x] =
            sw_pm_gauss_finish(pp_taps_sum<R>(&tile[ty][tx], 1, r, taps));
}

/* Step 1, columns: as the rows, along y. A block's tile is PP_COL_BX columns x PP_COL_TH rows
 * (each thread PP_COL_RPT of them) plus r rows above and below. */
template <int R>
__global__ void __launch_bounds__(PP_COL_THREADS)
    pp_gauss_cols_kernel(const uint8_t *in, uint8_t *out, int32_t width, int32_t height, int rr,
                         pp_taps taps)
{
    __shared__ uint8_t tile[PP_COL_TH + 2 * PP_HALO][PP_COL_BX];
    const int r = R >= 0 ? R : rr;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int32_t x = (int32_t)blockIdx.x * PP_COL_BX + tx;
    const int32_t yb = (int32_t)blockIdx.y * PP_COL_TH;
    const int32_t xc = min(x, width - 1);
    for (int i = ty; i < PP_COL_TH + 2 * r; i += PP_COL_BY)
        tile[i][tx] = in[(size_t)min(max(yb - r + i, 0), height - 1) * (size_t)width + xc];
    __syncthreads();
    if (x >= width)
        return;
    for (int j = 0; j < PP_COL_RPT; j++) {
        const int iy = ty + j * PP_COL_BY;
        const int32_t y = yb + iy;
        if (y >= height)
            break;
        out[(size_t)y * (size_t)width + x] =
            sw_pm_gauss_finish(pp_taps_sum<R>(&tile[iy][tx], PP_COL_BX, r, taps));
    }
}

/* ================================================================== step 2: binocular split */

/* Column sums of the smoothed image: each block sums PP_COL_TH rows of PP_COL_BX columns and
 * adds them to colsum (zeroed first) with one 64-bit atomic per column (integers: any order). */
__global__ void __launch_bounds__(PP_COL_THREADS)
    pp_colsum_kernel(const uint8_t *smooth, int32_t width, int32_t height,
                     unsigned long long *colsum)
{
    __shared__ unsigned int part[PP_COL_BY][PP_COL_BX];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int32_t x = (int32_t)blockIdx.x * PP_COL_BX + tx;
    const int32_t yb = (int32_t)blockIdx.y * PP_COL_TH;
    unsigned int s = 0;
    if (x < width)
        for (int j = 0; j < PP_COL_RPT; j++) {
            const int32_t y = yb + ty + j * PP_COL_BY;
            if (y < height)
                s += smooth[(size_t)y * (size_t)width + x];
        }
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && x < width) {
        unsigned long long t = 0;
        for (int j = 0; j < PP_COL_BY; j++)
            t += part[j][tx];
        atomicAdd(&colsum[x], t);
    }
}

/* (P, distance to the middle, x) a is better than b: the smaller profile, then the nearer to the
 * middle (distance |2 x - width|: to the real width / 2), then the smaller x (pupil.h "Binocular
 * split"). */
__device__ __forceinline__ bool pp_split_better(unsigned long long pa, int32_t da, int32_t xa,
                                                unsigned long long pb, int32_t db, int32_t xb)
{
    if (pa != pb)
        return pa < pb;
    if (da != db)
        return da < db;
    return xa < xb;
}

/* Step 2 (split_x < 0, two pupils): P(x) = sum of colsum over x - h .. x + h (h = max(4,
 * width / 64), clipped), split = the best x in [width / 4, 3 width / 4). One block. */
__global__ void __launch_bounds__(PP_SPLIT)
    pp_split_kernel(const unsigned long long *colsum, int32_t width, pp_state *st)
{
    __shared__ unsigned long long sp[PP_SPLIT];
    __shared__ int32_t sd[PP_SPLIT], sx[PP_SPLIT];
    const int t = threadIdx.x;
    const int32_t h = width / 64 > 4 ? width / 64 : 4;
    const int32_t lo = width / 4, hi = (3 * width) / 4;
    unsigned long long bp = ULLONG_MAX;
    int32_t bd = INT_MAX, bx = INT_MAX;
    for (int32_t x = lo + t; x < hi; x += PP_SPLIT) {
        const int32_t a = max(x - h, 0), b = min(x + h, width - 1);
        unsigned long long p = 0;
        for (int32_t c = a; c <= b; c++)
            p += colsum[c];
        const int32_t d = abs(2 * x - width); /* to the real middle, as pupil_cpu.c */
        if (pp_split_better(p, d, x, bp, bd, bx)) {
            bp = p;
            bd = d;
            bx = x;
        }
    }
    sp[t] = bp;
    sd[t] = bd;
    sx[t] = bx;
    __syncthreads();
    for (int o = PP_SPLIT / 2; o >= 1; o /= 2) {
        if (t < o && pp_split_better(sp[t + o], sd[t + o], sx[t + o], sp[t], sd[t], sx[t])) {
            sp[t] = sp[t + o];
            sd[t] = sd[t + o];
            sx[t] = sx[t + o];
        }
        __syncthreads();
    }
    if (t == 0)
        st->split = sx[0];
}

/* ================================================================== step 3: Otsu */

/* The regions' 256-bin histograms of the smoothed image (hist zeroed first): shared-memory
 * counts per block, then one global atomic per non-empty bin. Grid (gx, gy) strides over columns
 * and rows. */
__global__ void __launch_bounds__(PP_PIX)
    pp_hist_kernel(const uint8_t *smooth, int32_t width, int32_t height, const pp_state *st,
                   unsigned int *hist)
{
    __shared__ unsigned int sh[512];
    for (int i = threadIdx.x; i < 512; i += PP_PIX)
        sh[i] = 0;
    __syncthreads();
    const int32_t split = st->split;
    for (int32_t y = blockIdx.y; y < height; y += gridDim.y) {
        const uint8_t *row = smooth + (size_t)y * (size_t)width;
        for (int32_t x = (int32_t)(blockIdx.x * PP_PIX + threadIdx.x); x < width;
             x += (int32_t)(gridDim.x * PP_PIX))
            atomicAdd(&sh[(x >= split ? 256 : 0) + row[x]], 1u);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 512; i += PP_PIX)
        if (sh[i])
            atomicAdd(&hist[i], sh[i]);
}

/* Otsu's threshold of region blockIdx.x (sw_pm_otsu in parallel): exact int64 prefix sums
 * n0(t), S0(t), the criterion sw_pm_otsu_criterion per t in 0..254, the largest with the
 * smallest t on ties; -1 when no t has a criterion >= 0. One block of 256 threads per region. */
__global__ void __launch_bounds__(256) pp_otsu_kernel(const unsigned int *hist, pp_state *st)
{
    __shared__ long long cn[256], cs[256];
    __shared__ double bc[256];
    __shared__ int bt[256];
    const int r = blockIdx.x, t = threadIdx.x;
    const long long hv = (long long)hist[r * 256 + t];
    cn[t] = hv;
    cs[t] = hv * t;
    __syncthreads();
    for (int o = 1; o < 256; o *= 2) { /* inclusive scan (Hillis-Steele) */
        const long long a = t >= o ? cn[t - o] : 0, b = t >= o ? cs[t - o] : 0;
        __syncthreads();
        cn[t] += a;
        cs[t] += b;
        __syncthreads();
    }
    const int64_t N = cn[255], ST = cs[255];
    bc[t] = t < 255 ? sw_pm_otsu_criterion(N, ST, cn[t], cs[t]) : -1.0;
    bt[t] = t;
    __syncthreads();
    for (int o = 128; o >= 1; o /= 2) {
        if (t < o && (bc[t + o] > bc[t] || (bc[t + o] == bc[t] && bt[t + o] < bt[t]))) {
            bc[t] = bc[t + o];
            bt[t] = bt[t + o];
        }
        __syncthreads();
    }
    if (t == 0)
        st->thr[r] = bc[0] >= 0.0 ? bt[0] : -1;
}

/* ================================================================== step 4: close */

#define PP_DILATE 0 /* maximum */
#define PP_ERODE  1 /* minimum */

/* Combines a 0/1 tap into the window's maximum (OP = PP_DILATE) or minimum (PP_ERODE); taps
 * outside the window leave it alone. */
template <int OP> __device__ __forceinline__ uint8_t pp_morph_add(uint8_t acc, uint8_t v, bool in)
{
    if (!in)
        return acc;
    return OP == PP_DILATE ? (uint8_t)(acc | v) : (uint8_t)(acc & v);
}

/* Step 4, rows: the maximum (dilation) or minimum (erosion) of the 0/1 mask over x - r .. x + r,
 * clipped to the pixel's region [x0, x1) (pupil.h: a pupil cut by the image edge or the split is
 * not eroded from outside). THRESH: the first dilation pass, whose input is the smoothed image
 * and whose mask is v > t of the pixel's region (the region's Otsu threshold; no threshold, -1:
 * an empty mask). Tiles as pp_gauss_rows_kernel. */
template <int R, int OP, bool THRESH>
__global__ void __launch_bounds__(PP_ROW_THREADS)
    pp_morph_rows_kernel(const uint8_t *in, uint8_t *out, int32_t width, int32_t height, int rr,
                         const pp_state *st)
{
    __shared__ uint8_t tile[PP_ROW_BY][PP_ROW_BX + 2 * PP_HALO];
    const int r = R >= 0 ? R : rr;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int32_t split = st->split;
    const int32_t xb = (int32_t)blockIdx.x * PP_ROW_BX;
    const int32_t y = (int32_t)blockIdx.y * PP_ROW_BY + ty;
    const uint8_t *row = in + (size_t)min(y, height - 1) * (size_t)width;
    int32_t t0 = 0, t1 = 0;
    if (THRESH) {
        t0 = st->thr[0];
        t1 = st->thr[1];
    }
    for (int i = tx; i < PP_ROW_BX + 2 * r; i += PP_ROW_BX) {
        const int32_t xx = min(max(xb - r + i, 0), width - 1);
        uint8_t v = row[xx];
        if (THRESH) {
            const int32_t t = xx < split ? t0 : t1;
            v = (uint8_t)(t >= 0 && (int32_t)v > t);
        }
        tile[ty][i] = v;
    }
    __syncthreads();
    const int32_t x = xb + tx;
    if (x >= width || y >= height)
        return;
    const int32_t x0 = x < split ? 0 : split, x1 = x < split ? split : width;
    const uint8_t *v = &tile[ty][tx];
    uint8_t acc = OP == PP_DILATE ? 0 : 1;
    if (R >= 0) {
#pragma unroll
        for (int k = 0; k <= 2 * R; k++) {
            const int32_t xx = x - R + k;
            acc = pp_morph_add<OP>(acc, v[k], xx >= x0 && xx < x1);
        }
    } else {
        for (int k = 0; k <= 2 * r; k++) {
            const int32_t xx = x - r + k;
            acc = pp_morph_add<OP>(acc, v[k], xx >= x0 && xx < x1);
        }
    }
    out[(size_t)y * (size_t)width + x] = acc;
}

/* Step 4, columns: as the rows along y, the window clipped to the image's rows (a column lies in
 * one region). Tiles as pp_gauss_cols_kernel. */
template <int R, int OP>
__global__ void __launch_bounds__(PP_COL_THREADS)
    pp_morph_cols_kernel(const uint8_t *in, uint8_t *out, int32_t width, int32_t height, int rr)
{
    __shared__ uint8_t tile[PP_COL_TH + 2 * PP_HALO][PP_COL_BX];
    const int r = R >= 0 ? R : rr;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int32_t x = (int32_t)blockIdx.x * PP_COL_BX + tx;
    const int32_t yb = (int32_t)blockIdx.y * PP_COL_TH;
    const int32_t xc = min(x, width - 1);
    for (int i = ty; i < PP_COL_TH + 2 * r; i += PP_COL_BY)
        tile[i][tx] = in[(size_t)min(max(yb - r + i, 0), height - 1) * (size_t)width + xc];
    __syncthreads();
    if (x >= width)
        return;
    for (int j = 0; j < PP_COL_RPT; j++) {
        const int iy = ty + j * PP_COL_BY;
        const int32_t y = yb + iy;
        if (y >= height)
            break;
        uint8_t acc = OP == PP_DILATE ? 0 : 1;
        if (R >= 0) {
#pragma unroll
            for (int k = 0; k <= 2 * R; k++) {
                const int32_t yy = y - R + k;
                acc = pp_morph_add<OP>(acc, tile[iy + k][tx], yy >= 0 && yy < height);
            }
        } else {
            for (int k = 0; k <= 2 * r; k++) {
                const int32_t yy = y - r + k;
                acc = pp_morph_add<OP>(acc, tile[iy + k][tx], yy >= 0 && yy < height);
            }
        }
        out[(size_t)y * (size_t)width + x] = acc;
    }
}

/* ================================================================== step 5: border pixels */

/* Pixel index -> (x, y): the input of the selection, so that the list holds the pairs. */
struct pp_to_xy {
    int32_t width;
    __host__ __device__ int2 operator()(int i) const
    {
        return make_int2(i % width, i / width);
    }
};

/* A border pixel of region r (pupil.h step 5): in the region, inside the closed mask, with an
 * outside 8-neighbour in the region (neighbours beyond the region or the image do not count). */
struct pp_is_border {
    const uint8_t *closed;
    const pp_state *st;
    int32_t width, height;
    int r;
    __device__ bool operator()(const int2 &p) const
    {
        int32_t x0, x1;
        pp_region_cols(st->split, width, r, &x0, &x1);
        if (p.x < x0 || p.x >= x1 || !closed[(size_t)p.y * (size_t)width + p.x])
            return false;
        for (int dy = -1; dy <= 1; dy++) {
            const int32_t y = p.y + dy;
            if (y < 0 || y >= height)
                continue;
            for (int dx = -1; dx <= 1; dx++) {
                const int32_t x = p.x + dx;
                if ((dx || dy) && x >= x0 && x < x1 && !closed[(size_t)y * (size_t)width + x])
                    return true;
            }
        }
        return false;
    }
};

typedef thrust::transform_iterator<pp_to_xy, thrust::counting_iterator<int>, int2> pp_xy_iter;

static pp_xy_iter pp_pixels(int32_t width)
{
    return pp_xy_iter(thrust::counting_iterator<int>(0), pp_to_xy{width});
}

/* ================================================================== step 6: RANSAC votes */

__device__ __forceinline__ sw_pm_region pp_region(const pp_fit_args &a, int r)
{
    int32_t x0, x1;
    pp_region_cols(a.st->split, a.width, r, &x0, &x1);
    return sw_pm_region_make(x0, x1, a.height, a.inlier_px);
}

/* One warp per candidate k of region blockIdx.y: lane 0 builds it (sw_pm_candidate with the
 * plan's random numbers: the seed's optimisation 2), the lanes test border points lane,
 * lane + 32, ... (sw_pm_vote on the float coordinates), the warp counts its votes with
 * __ballot_sync + __popc (the seed's optimisation 3), and lane 0 offers sw_pm_pack_vote to the
 * region's best (atomicMax: most votes, then the lowest index). Regions with fewer than 5 border
 * points and unusable candidates do nothing. */
__global__ void __launch_bounds__(PP_VOTE_WARPS * 32) pp_vote_kernel(const pp_fit_args a)
{
    const int lane = threadIdx.x & 31, r = blockIdx.y;
    const int32_t k = (int32_t)blockIdx.x * PP_VOTE_WARPS + (int32_t)(threadIdx.x >> 5);
    const long long n = a.st->nborder[r];
    if (k >= a.candidates || n < 5)
        return; /* the whole warp */
    const sw_pm_region reg = pp_region(a, r);
    const int32_t *xy = (const int32_t *)(a.border + (size_t)r * (size_t)a.npix);
    float cf[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int usable = 0;
    if (lane == 0) {
        double c[6];
        usable = sw_pm_candidate(&reg, xy, (int64_t)n, a.randoms + (size_t)5 * (size_t)k, a.min_r,
                                 a.max_r, c, cf);
    }
    usable = __shfl_sync(PP_FULL, usable, 0);
    if (!usable)
        return; /* the whole warp */
#pragma unroll
    for (int m = 0; m < 6; m++)
        cf[m] = __shfl_sync(PP_FULL, cf[m], 0);
    int votes = 0;
    for (long long base = 0; base < n; base += 32) {
        const long long i = base + lane;
        int v = 0;
        if (i < n)
            v = sw_pm_vote(cf, sw_pm_uf(&reg, xy[2 * i]), sw_pm_vf(&reg, xy[2 * i + 1]), reg.tol2);
        votes += __popc(__ballot_sync(PP_FULL, v));
    }
    if (lane == 0)
        atomicMax(&a.st->best[r], sw_pm_pack_vote(votes, k));
}

/* ================================================================== steps 7-9: the fit */

/* Sums v over the block (PP_FIT threads): warp shuffles, then the warps' partials in part;
 * thread 0 gets the total. */
__device__ __forceinline__ double pp_warp_sum(double v)
{
    for (int o = 16; o >= 1; o /= 2)
        v += __shfl_down_sync(PP_FULL, v, o);
    return v;
}

/* A pupil not found before any ellipse (steps 0-6): the failure, no geometry. */
__device__ void pp_not_found(sw_pupil_ellipse *o, sw_pupil_failure f)
{
    o->valid = 0;
    o->failure = f;
    o->cx_px = o->cy_px = o->a_px = o->b_px = o->angle_deg = NAN;
    o->inliers = 0;
    o->candidate = -1;
    o->votes = 0;
}

/* Steps 7-9 for region blockIdx.x (the order of pupil_model.h's "Steps 6-9 in one place"): the
 * early verdicts (EMPTY_FRAME, NO_CONTRAST, FEW_BORDER, NO_ELLIPSE), else the winner's conic
 * (sw_pm_candidate again), refine_iterations rounds of the weighted least squares (per-thread
 * partial sums of sw_pm_refine_add, reduced over the block; thread 0 solves and keeps the conic
 * only when it is an ellipse, else stops), the inliers of the final conic, the ellipse and the
 * verdict (sw_pm_ellipse_out, sw_pm_judge). Thread 0 writes the pupil into the mapped result
 * (the seed's optimisation 4) and into the device copy; block 0 also the frame's fields. */
__global__ void __launch_bounds__(PP_FIT) pp_fit_kernel(const pp_fit_args a)
{
    __shared__ double part[PP_FIT / 32][SW_PM_NACC];
    __shared__ double c_sh[6];
    __shared__ int go;
    const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const pp_state *st = a.st;
    const sw_pm_region reg = pp_region(a, r);
    const long long n = st->nborder[r];
    const int32_t thr = st->thr[r];
    const double scale = st->scale;
    const unsigned long long best = st->best[r];
    const int32_t *xy = (const int32_t *)(a.border + (size_t)r * (size_t)a.npix);

    sw_pupil_ellipse o;
    memset(&o, 0, sizeof o);
    o.border = (int32_t)n;
    o.threshold = thr;
    o.x0 = reg.x0;
    o.x1 = reg.x1;

    sw_pupil_failure early = SW_PUPIL_OK;
    if (!(scale > 0.0))
        early = SW_PUPIL_EMPTY_FRAME;
    else if (thr < 0)
        early = SW_PUPIL_NO_CONTRAST;
    else if (n < 5)
        early = SW_PUPIL_FEW_BORDER;
    else if (best == 0)
        early = SW_PUPIL_NO_ELLIPSE;

    if (early == SW_PUPIL_OK) { /* the same for every thread of the block */
        if (tid == 0) {
            const int32_t k = sw_pm_packed_index(best);
            double c[6];
            float cf[6];
            sw_pm_candidate(&reg, xy, (int64_t)n, a.randoms + (size_t)5 * (size_t)k, a.min_r,
                            a.max_r, c, cf); /* usable: it won */
            for (int m = 0; m < 6; m++)
                c_sh[m] = c[m];
        }
        __syncthreads();
        /* Step 7: the refinement. */
        for (int it = 0; it < a.refine_iterations; it++) {
            double c[6], acc[SW_PM_NACC];
            for (int m = 0; m < 6; m++)
                c[m] = c_sh[m];
            for (int m = 0; m < SW_PM_NACC; m++)
                acc[m] = 0.0;
            for (long long i = tid; i < n; i += PP_FIT)
                sw_pm_refine_add(c, sw_pm_u(&reg, xy[2 * i]), sw_pm_v(&reg, xy[2 * i + 1]),
                                 reg.tol2d, acc);
            for (int m = 0; m < SW_PM_NACC; m++) {
                const double s = pp_warp_sum(acc[m]);
                if (lane == 0)
                    part[warp][m] = s;
            }
            __syncthreads();
            if (tid == 0) {
                double tot[SW_PM_NACC], cn[6], uc, vc, ra, rb;
                for (int m = 0; m < SW_PM_NACC; m++) {
                    double s = 0.0;
                    for (int w = 0; w < PP_FIT / 32; w++)
                        s += part[w][m];
                    tot[m] = s;
                }
                go = sw_pm_refine_solve(tot, cn) && sw_pm_conic_axes(cn, &uc, &vc, &ra, &rb);
                if (go)
                    for (int m = 0; m < 6; m++)
                        c_sh[m] = cn[m];
            }
            __syncthreads();
            if (!go)
                break; /* the whole block: go was read after the barrier */
        }
        /* Step 9's inliers of the final conic. */
        double c[6];
        for (int m = 0; m < 6; m++)
            c[m] = c_sh[m];
        double cnt = 0.0; /* exact: counts below 2^53 */
        for (long long i = tid; i < n; i += PP_FIT) {
            double g2;
            cnt += sw_pm_inlier(c, sw_pm_u(&reg, xy[2 * i]), sw_pm_v(&reg, xy[2 * i + 1]),
                                reg.tol2d, &g2);
        }
        cnt = pp_warp_sum(cnt);
        __syncthreads(); /* part is free again */
        if (lane == 0)
            part[warp][0] = cnt;
        __syncthreads();
        if (tid == 0) {
            double total = 0.0;
            for (int w = 0; w < PP_FIT / 32; w++)
                total += part[w][0];
            o.inliers = (int32_t)total;
            o.candidate = sw_pm_packed_index(best);
            o.votes = sw_pm_packed_votes(best);
            /* Steps 8-9. */
            const int ok = sw_pm_ellipse_out(&reg, c, &o);
            sw_pm_judge(&o, ok, a.min_r, a.max_r, a.min_coverage);
        }
    } else if (tid == 0) {
        pp_not_found(&o, early);
        if (early == SW_PUPIL_EMPTY_FRAME)
            o.threshold = -1; /* as pupil_cpu.c: nothing to track, whatever the steps made */
    }
    if (tid == 0) {
        a.result->pupil[r] = o;
        a.pupils[r] = o;
        if (r == 0) {
            a.result->n_pupils = a.n_pupils;
            a.result->scale = scale;
            a.result->split_x = st->split;
        }
    }
}

/* ================================================================== the lenslet mask */

/* One thread per lenslet: sw_pm_lenslet_value of the frame's pupils (device copy). */
__global__ void __launch_bounds__(PP_PIX)
    pp_lenslet_kernel(sw_sh_geometry g, const sw_pupil_ellipse *pupils, int32_t n_pupils, int rule,
                      uint8_t *mask)
{
    const int32_t n = g.nx * g.ny;
    const int32_t i = (int32_t)(blockIdx.x * PP_PIX + threadIdx.x);
    if (i >= n)
        return;
    mask[i] =
        sw_pm_lenslet_value(&g, i % g.nx, i / g.nx, pupils, n_pupils, (sw_pupil_lenslet_rule)rule);
}

/* ================================================================== the frame's graph */

/* Step 0's kernels for the frame type T. */
template <typename T> static sw_status pp_enqueue_input(sw_pupil_plan *plan, cudaStream_t s)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    const T *frame = (const T *)g->frame;
    if (!(p->input_scale > 0.0)) {
        pp_row_sums_kernel<T><<<(unsigned)((p->height + PP_SUM_WARPS - 1) / PP_SUM_WARPS),
                                PP_SUM_WARPS * 32, 0, s>>>(frame, p->width, p->height, g->row_sums);
        SW_CU(cudaGetLastError());
    }
    const int32_t split_fixed = p->n_pupils == 1 ? p->width : p->split_x; /* < 0: found */
    pp_scale_kernel<<<1, SW_PM_MEAN_SLOTS, 0, s>>>(g->row_sums, p->height, plan->npix,
                                                   p->input_scale, split_fixed, g->st);
    SW_CU(cudaGetLastError());
    pp_to_u8_kernel<T>
        <<<grid1(plan, plan->npix, PP_PIX), PP_PIX, 0, s>>>(frame, plan->npix, g->st, g->img8);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Step 1 with the radius R at compile time (or -1: the plan's). */
template <int R> static sw_status pp_enqueue_gauss(sw_pupil_plan *plan, cudaStream_t s)
{
    pp_gpu *g = gpu_of(plan);
    const int32_t w = plan->p.width, h = plan->p.height;
    pp_taps taps;
    memset(&taps, 0, sizeof taps);
    for (int k = 0; k < plan->n_taps; k++)
        taps.w[k] = plan->gauss_w[k];
    const dim3 br(PP_ROW_BX, PP_ROW_BY),
        gr((w + PP_ROW_BX - 1) / PP_ROW_BX, (h + PP_ROW_BY - 1) / PP_ROW_BY);
    const dim3 bc(PP_COL_BX, PP_COL_BY),
        gc((w + PP_COL_BX - 1) / PP_COL_BX, (h + PP_COL_TH - 1) / PP_COL_TH);
    pp_gauss_rows_kernel<R><<<gr, br, 0, s>>>(g->img8, g->tmp8, w, h, plan->p.gauss_radius, taps);
    SW_CU(cudaGetLastError());
    pp_gauss_cols_kernel<R>
        <<<gc, bc, 0, s>>>(g->tmp8, g->smooth8, w, h, plan->p.gauss_radius, taps);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Step 4 with the radius R at compile time (or -1): smooth8 -(threshold, dilate rows)-> tmp8
 * -(dilate columns)-> closed8 -(erode rows)-> tmp8 -(erode columns)-> closed8. */
template <int R> static sw_status pp_enqueue_close(sw_pupil_plan *plan, cudaStream_t s)
{
    pp_gpu *g = gpu_of(plan);
    const int32_t w = plan->p.width, h = plan->p.height;
    const int rr = plan->p.close_radius;
    const dim3 br(PP_ROW_BX, PP_ROW_BY),
        gr((w + PP_ROW_BX - 1) / PP_ROW_BX, (h + PP_ROW_BY - 1) / PP_ROW_BY);
    const dim3 bc(PP_COL_BX, PP_COL_BY),
        gc((w + PP_COL_BX - 1) / PP_COL_BX, (h + PP_COL_TH - 1) / PP_COL_TH);
    pp_morph_rows_kernel<R, PP_DILATE, true>
        <<<gr, br, 0, s>>>(g->smooth8, g->tmp8, w, h, rr, g->st);
    SW_CU(cudaGetLastError());
    pp_morph_cols_kernel<R, PP_DILATE><<<gc, bc, 0, s>>>(g->tmp8, g->closed8, w, h, rr);
    SW_CU(cudaGetLastError());
    pp_morph_rows_kernel<R, PP_ERODE, false>
        <<<gr, br, 0, s>>>(g->closed8, g->tmp8, w, h, rr, g->st);
    SW_CU(cudaGetLastError());
    pp_morph_cols_kernel<R, PP_ERODE><<<gc, bc, 0, s>>>(g->tmp8, g->closed8, w, h, rr);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Everything after the frame's copy, in order, on stream s (captured into the graph). */
static sw_status pp_enqueue_frame(sw_pupil_plan *plan, cudaStream_t s)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    const int32_t w = p->width, h = p->height;
    const int np = p->n_pupils;

    /* Step 0 */
    switch (p->type) {
    case SW_PIX_U8: SW_TRY(pp_enqueue_input<uint8_t>(plan, s)); break;
    case SW_PIX_U16: SW_TRY(pp_enqueue_input<uint16_t>(plan, s)); break;
    case SW_PIX_U32: SW_TRY(pp_enqueue_input<uint32_t>(plan, s)); break;
    default: SW_TRY(pp_enqueue_input<float>(plan, s)); break;
    }

    /* Step 1 */
    if (p->gauss_radius == PP_DEFAULT_R)
        SW_TRY(pp_enqueue_gauss<PP_DEFAULT_R>(plan, s));
    else
        SW_TRY(pp_enqueue_gauss<-1>(plan, s));

    /* Step 2 (one pupil or a fixed split: written by pp_scale_kernel) */
    if (np == 2 && p->split_x < 0) {
        SW_CU(cudaMemsetAsync(g->colsum, 0, (size_t)w * sizeof(unsigned long long), s));
        const dim3 bc(PP_COL_BX, PP_COL_BY),
            gc((w + PP_COL_BX - 1) / PP_COL_BX, (h + PP_COL_TH - 1) / PP_COL_TH);
        pp_colsum_kernel<<<gc, bc, 0, s>>>(g->smooth8, w, h, g->colsum);
        SW_CU(cudaGetLastError());
        pp_split_kernel<<<1, PP_SPLIT, 0, s>>>(g->colsum, w, g->st);
        SW_CU(cudaGetLastError());
    }

    /* Step 3 */
    SW_CU(cudaMemsetAsync(g->hist, 0, 512 * sizeof(unsigned int), s));
    {
        const int sms = plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 32;
        const int gx = (w + PP_PIX - 1) / PP_PIX < 8 ? (w + PP_PIX - 1) / PP_PIX : 8;
        int gy = 4 * sms / gx;
        gy = gy < 1 ? 1 : gy > h ? h : gy;
        pp_hist_kernel<<<dim3((unsigned)gx, (unsigned)gy), PP_PIX, 0, s>>>(g->smooth8, w, h, g->st,
                                                                           g->hist);
        SW_CU(cudaGetLastError());
    }
    pp_otsu_kernel<<<(unsigned)np, 256, 0, s>>>(g->hist, g->st);
    SW_CU(cudaGetLastError());

    /* Step 4 */
    if (p->close_radius == PP_DEFAULT_R)
        SW_TRY(pp_enqueue_close<PP_DEFAULT_R>(plan, s));
    else
        SW_TRY(pp_enqueue_close<-1>(plan, s));

    /* Step 5: one order-keeping selection per region */
    for (int r = 0; r < np; r++) {
        size_t bytes = g->cub_bytes;
        const pp_is_border pred = {g->closed8, g->st, w, h, r};
        long long *count = (long long *)((char *)g->st + offsetof(pp_state, nborder)) + r;
        SW_CU(cub::DeviceSelect::If(g->cub_temp, bytes, pp_pixels(w),
                                    g->border + (size_t)r * plan->npix, count, plan->npix, pred,
                                    s));
    }

    /* Step 6 */
    pp_fit_args a;
    memset(&a, 0, sizeof a);
    a.width = w;
    a.height = h;
    a.n_pupils = np;
    a.candidates = p->candidates;
    a.refine_iterations = p->refine_iterations;
    a.inlier_px = p->inlier_px;
    a.min_r = p->min_radius_px;
    a.max_r = p->max_radius_px; /* resolved by pupil.c */
    a.min_coverage = p->min_coverage;
    a.npix = plan->npix;
    a.randoms = g->randoms;
    a.border = g->border;
    a.st = g->st;
    a.result = g->d_result;
    a.pupils = g->pupils;
    SW_CU(cudaMemsetAsync((char *)g->st + offsetof(pp_state, best), 0,
                          2 * sizeof(unsigned long long), s));
    pp_vote_kernel<<<dim3((unsigned)(p->candidates / PP_VOTE_WARPS), (unsigned)np),
                     PP_VOTE_WARPS * 32, 0, s>>>(a);
    SW_CU(cudaGetLastError());

    /* Steps 7-9 */
    pp_fit_kernel<<<(unsigned)np, PP_FIT, 0, s>>>(a);
    SW_CU(cudaGetLastError());

    /* The lenslet mask */
    if (plan->has_geom) {
        const int64_t nl = (int64_t)plan->geom.nx * plan->geom.ny;
        pp_lenslet_kernel<<<(unsigned)((nl + PP_PIX - 1) / PP_PIX), PP_PIX, 0, s>>>(
            plan->geom, g->pupils, np, (int)p->lenslet_rule, g->lenslet);
        SW_CU(cudaGetLastError());
    }
    return SW_OK;
}

/* Captures pp_enqueue_frame into the plan's graph (the capture is always ended, also when a
 * call inside failed, so that the stream is usable again). */
static sw_status pp_capture(sw_pupil_plan *plan)
{
    pp_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const sw_status st = pp_enqueue_frame(plan, s);
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(s, &graph);
    if (st != SW_OK) {
        if (graph)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        return st;
    }
    if (e != cudaSuccess) {
        if (graph)
            cudaGraphDestroy(graph);
        return sw_fail(plan->ctx, SW_ECUDA, "pupil: capturing the frame's graph failed: %s",
                       cudaGetErrorString(e));
    }
    g->graph = graph;
    SW_CU(cudaGraphInstantiate(&g->exec, g->graph, 0));
    return SW_OK;
}

/* ================================================================== the API */

extern "C" void sw_pupil_gpu_free(sw_pupil_plan *plan)
{
    pp_gpu *g = gpu_of(plan);
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    cudaStreamSynchronize(stream_of(plan));
    if (g->exec)
        cudaGraphExecDestroy(g->exec);
    if (g->graph)
        cudaGraphDestroy(g->graph);
    cudaFree(g->frame);
    cudaFree(g->img8);
    cudaFree(g->tmp8);
    cudaFree(g->smooth8);
    cudaFree(g->closed8);
    cudaFree(g->row_sums);
    cudaFree(g->colsum);
    cudaFree(g->hist);
    cudaFree(g->border);
    cudaFree(g->randoms);
    cudaFree(g->st);
    cudaFree(g->pupils);
    cudaFree(g->lenslet);
    cudaFree(g->cub_temp);
    if (g->h_result)
        cudaFreeHost(g->h_result);
    free(g);
    plan->gpu = NULL;
}

/* cudaMalloc of n elements (at least one). */
template <typename V> static sw_status pp_alloc(sw_pupil_plan *plan, V **dst, size_t n)
{
    SW_CU(cudaMalloc((void **)dst, (n ? n : 1) * sizeof(V)));
    return SW_OK;
}

extern "C" sw_status sw_pupil_gpu_init(sw_pupil_plan *plan)
{
    const sw_pupil_params *p = &plan->p;
    pp_gpu *g = (pp_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "pupil: out of memory");
    plan->gpu = g;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));

    const size_t npix = (size_t)plan->npix, w = (size_t)p->width, h = (size_t)p->height;
    const size_t np = (size_t)p->n_pupils;
    SW_CU(cudaMalloc(&g->frame, npix * sw_pixel_size(p->type)));
    SW_TRY(pp_alloc(plan, &g->img8, npix));
    SW_TRY(pp_alloc(plan, &g->tmp8, npix));
    SW_TRY(pp_alloc(plan, &g->smooth8, npix));
    SW_TRY(pp_alloc(plan, &g->closed8, npix));
    SW_TRY(pp_alloc(plan, &g->row_sums, h));
    SW_TRY(pp_alloc(plan, &g->colsum, w));
    SW_TRY(pp_alloc(plan, &g->hist, (size_t)512));
    SW_TRY(pp_alloc(plan, &g->border, np * npix));
    SW_TRY(pp_alloc(plan, &g->randoms, (size_t)p->candidates * 5));
    SW_TRY(pp_alloc(plan, &g->st, (size_t)1));
    SW_TRY(pp_alloc(plan, &g->pupils, (size_t)2));
    SW_CU(cudaMemsetAsync(g->st, 0, sizeof(pp_state), s));
    SW_CU(cudaMemsetAsync(g->pupils, 0, 2 * sizeof(sw_pupil_ellipse), s));
    SW_CU(cudaMemsetAsync(g->border, 0, np * npix * sizeof(int2), s));
    if (plan->has_geom) {
        const size_t nl = (size_t)plan->geom.nx * (size_t)plan->geom.ny;
        SW_TRY(pp_alloc(plan, &g->lenslet, nl));
        SW_CU(cudaMemsetAsync(g->lenslet, 0, nl, s));
    }
    /* Step 6's random numbers, uploaded once (the seed's optimisation 2). */
    SW_CU(cudaMemcpyAsync(g->randoms, plan->randoms, (size_t)p->candidates * 5 * sizeof(float),
                          cudaMemcpyHostToDevice, s));

    /* Step 5's CUB storage, for a selection over the whole frame. */
    {
        const pp_is_border pred = {g->closed8, g->st, p->width, p->height, 0};
        long long *count = (long long *)((char *)g->st + offsetof(pp_state, nborder));
        size_t bytes = 0;
        SW_CU(cub::DeviceSelect::If(nullptr, bytes, pp_pixels(p->width), g->border, count,
                                    plan->npix, pred, s));
        g->cub_bytes = bytes;
        SW_CU(cudaMalloc(&g->cub_temp, bytes ? bytes : 1));
    }

    /* The result: mapped pinned host memory, written by the fit kernel (seed's optimisation 4). */
    SW_CU(cudaHostAlloc((void **)&g->h_result, sizeof(sw_pupil_result), cudaHostAllocMapped));
    memset(g->h_result, 0, sizeof(sw_pupil_result));
    SW_CU(cudaHostGetDevicePointer((void **)&g->d_result, g->h_result, 0));
    SW_CU(cudaStreamSynchronize(s)); /* plan->randoms is the host's, it may be read again */
    return SW_OK;
}

extern "C" sw_status sw_pupil_gpu_run(sw_pupil_plan *plan, const sw_image *frame,
                                      sw_pupil_result *result)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    const size_t row = (size_t)p->width * sw_pixel_size(p->type);
    SW_CU(cudaMemcpy2DAsync(
        g->frame, row, frame->data, frame->stride, row, (size_t)p->height,
        frame->memory == SW_MEM_DEVICE ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, s));
    if (!g->exec)
        SW_TRY(pp_capture(plan));
    SW_CU(cudaGraphLaunch(g->exec, s));
    if (plan->has_geom && plan->lenslet_mask)
        SW_CU(cudaMemcpyAsync(plan->lenslet_mask, g->lenslet,
                              (size_t)plan->geom.nx * (size_t)plan->geom.ny, cudaMemcpyDeviceToHost,
                              s));
    SW_CU(cudaStreamSynchronize(s));
    *result = *g->h_result;
    plan->last = *result;
    plan->have_frame = 1;
    return SW_OK;
}

extern "C" sw_status sw_pupil_gpu_images(sw_pupil_plan *plan, uint8_t *img8, uint8_t *smooth8,
                                         uint8_t *closed8)
{
    pp_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    const size_t n = (size_t)plan->npix;
    SW_CU(cudaSetDevice(plan->ctx->device));
    if (img8)
        SW_CU(cudaMemcpyAsync(img8, g->img8, n, cudaMemcpyDeviceToHost, s));
    if (smooth8)
        SW_CU(cudaMemcpyAsync(smooth8, g->smooth8, n, cudaMemcpyDeviceToHost, s));
    if (closed8)
        SW_CU(cudaMemcpyAsync(closed8, g->closed8, n, cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    return SW_OK;
}

extern "C" sw_status sw_pupil_gpu_border(sw_pupil_plan *plan, int32_t i, int32_t *xy,
                                         int64_t capacity, int64_t *count)
{
    pp_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    long long n = 0;
    SW_CU(cudaMemcpyAsync(&n, (char *)g->st + offsetof(pp_state, nborder) + (size_t)i * sizeof n,
                          sizeof n, cudaMemcpyDeviceToHost, s));
    SW_CU(cudaStreamSynchronize(s));
    const int64_t m = (int64_t)n < capacity ? (int64_t)n : capacity;
    if (m > 0) {
        SW_CU(cudaMemcpyAsync(xy, g->border + (size_t)i * (size_t)plan->npix,
                              (size_t)m * sizeof(int2), cudaMemcpyDeviceToHost, s));
        SW_CU(cudaStreamSynchronize(s));
    }
    *count = (int64_t)n;
    return SW_OK;
}

extern "C" const uint8_t *sw_pupil_gpu_lenslet_mask(const sw_pupil_plan *plan)
{
    const pp_gpu *g = gpu_of(plan);
    return g && plan->has_geom ? g->lenslet : NULL;
}
