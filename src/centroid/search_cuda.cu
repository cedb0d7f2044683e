/*
 * The GPU twin of the centroid search (search.h; seed 001 Sec. 3.2.1 "GPU implementation of
 * PAPyCS"): PAPYCS and CoM, and the discarding stage, one thread per spot per criterion.
 * search.c is the reference; the arithmetic both share is search_model.h and this file is
 * compiled with -fmad=false, so the centroids, intensities and statuses are bit-identical to the
 * CPU's.
 *
 *   block_kernel       u8 and u16 frames (Algorithms 1-2): one block of 1-16 warps per spot.
 *                      The per-column sums over rows of an integer frame are exact integers, so
 *                      they are split over the block's warps in any way and added in any order.
 *                      The double part keeps search_model.h's arithmetic and order: each
 *                      column's sw_sm_col_finish and the products of sw_sm_lane_add (one thread
 *                      per column), their sums per lane in increasing column order and the
 *                      butterfly of __shfl_xor_sync (Algorithm 2 line 19: warp 0, lane t as the
 *                      model's lane t). The spot's neighbourhood is staged in shared memory once
 *                      (again when the centre leaves it), so a step reads no global memory.
 *   search_kernel      f32 frames (their column sums are double, order-dependent), and the
 *                      fallback where a block's box does not fit in shared memory: blocks of
 *                      32 x SEARCH_WARPS threads, warp w of block b searches spot
 *                      b * SEARCH_WARPS + w; per step every lane builds the same window
 *                      (sw_sm_window_make), sums its columns from global memory
 *                      (sw_sm_lane_sums: columns 4t + q + 128r), the butterfly, and every lane
 *                      finishes the step alike (sw_sm_finish).
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
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "search"

#define SEARCH_FULL  0xffffffffu
#define SEARCH_WARPS 4   /* spots (warps) per block: SPOTS_PER_BLOCK of Algorithm 1 */
#define SPOT_THREADS 256 /* discarding kernels: threads per block                   */

static cudaStream_t stream_of(const sw_search_plan *plan)
{
    return (cudaStream_t)sw_context_stream(plan->ctx);
}

/* ---------------------------------------------------------------- PAPYCS / CoM, one warp */

/* The f32 path (and the fallback when a block's box does not fit in shared memory). */
template <int TYPE>
__global__ void __launch_bounds__(32 * SEARCH_WARPS)
    search_kernel(const void *__restrict__ frame, size_t stride, int32_t width, int32_t height,
                  int32_t n, int32_t nx, int32_t ny, double f, const double *__restrict__ sx,
                  const double *__restrict__ sy, const uint8_t *__restrict__ active, int32_t smax,
                  int32_t smin, double *x, double *y, double *intensity, uint8_t *status)
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
        /* Algorithm 2 line 7: the pyramid of windows (warp-uniform control flow), from the
         * spot's first side (the neighbour window). */
        const int32_t s1 = sw_sm_first_side(sx, sy, k, nx, ny, f, smax, smin);
        for (int32_t s = s1; s >= smin; --s) {
            sw_sm_window w;
            double ncx = sp.cx, ncy = sp.cy, s0 = 0.0;
            int r;
            if (!sw_sm_window_make(sp.cx, sp.cy, (double)s, width, height, &w)) {
                r = SW_SM_STEP_EMPTY;
            } else {
                sw_sm_sums t;
                sw_sm_lane_sums_t<TYPE>(frame, stride, &w, lane, &t);
                t = sw_sm_warp_butterfly(t);
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

/* ---------------------------------------------------------------- PAPYCS / CoM, u8 and u16 */

/* The pixel type of a launch. */
template <int TYPE> struct block_pixel {
    typedef uint8_t type;
};
template <> struct block_pixel<SW_PIX_U16> {
    typedef uint16_t type;
};

/* What lane 0 of warp 0 tells the block after a step. The window is double-buffered by the
 * parity of the step: the block reads step n's while lane 0 writes step n + 1's. */
typedef struct block_ctl {
    sw_sm_window w[2]; /* the step's window (step 1 of search_model.h)                  */
    int32_t go;        /* 1: another step follows                                        */
    int32_t restage;   /* 1: the next window leaves the staged box: stage a new one      */
    int32_t bx0, by0;  /* the new box's origin (with restage)                            */
} block_ctl;

/* A uint32 as a double, exactly (2^52 + v is a double for every uint32 v): the same value as
 * (double)v, through the 64-bit adder, which has four times the conversion unit's throughput. */
__device__ __forceinline__ double block_u32_double(uint32_t v)
{
    return __hiloint2double(0x43300000, (int)v) - 4503599627370496.0;
}

__device__ __forceinline__ uint32_t block_warp_min(uint32_t v)
{
#if __CUDA_ARCH__ >= 800
    return __reduce_min_sync(SEARCH_FULL, v);
#else
    for (int o = 16; o >= 1; o >>= 1) {
        uint32_t u = __shfl_xor_sync(SEARCH_FULL, v, o);
        v = u < v ? u : v;
    }
    return v;
#endif
}

/* The first column (row) of a box of `side` pixels holding pixels lo - margin .., kept inside
 * the frame of `size` pixels where it can be. */
__device__ __forceinline__ int32_t block_box_origin(int32_t lo, int32_t margin, int32_t side,
                                                    int32_t size)
{
    int32_t b = lo - margin;
    if (b > size - side)
        b = size - side;
    return b < 0 ? 0 : b;
}

/* 1 when the window's pixels lie in the box at (bx0, by0) (windows never leave the frame, so
 * the part of the box beyond the frame does not matter). */
__device__ __forceinline__ int block_box_holds(const sw_sm_window *w, int32_t bx0, int32_t by0,
                                               int32_t side)
{
    return w->i0 >= bx0 && w->i1 < bx0 + side && w->j0 >= by0 && w->j1 < by0 + side;
}

/* Copies the frame's pixels [bx0, bx0 + side) x [by0, by0 + side) (clipped to the frame) into
 * the box, column-major: pixel (bx0 + i, by0 + j) at box[i * pitch + j], so that a thread walks
 * down its column at immediate offsets; pitch (>= side) is an odd number of 32-bit words, so that
 * the 32 lanes reading one row of 32 columns hit 32 banks. Every thread of the block takes a
 * share, 8 loads in flight each (the lanes read rows of the frame, coalesced). */
template <typename PIX>
__device__ __forceinline__ void block_stage(const void *frame, size_t stride, int32_t width,
                                            int32_t height, int32_t bx0, int32_t by0, int32_t side,
                                            int32_t pitch, PIX *box, int tid, int nthreads)
{
    const int32_t bw = min(side, width - bx0), bh = min(side, height - by0), n = bw * bh;
    const char *base = (const char *)frame + (size_t)by0 * stride + (size_t)bx0 * sizeof(PIX);
    for (int32_t e = tid; e < n; e += 8 * nthreads) {
        PIX v[8];
        int32_t at[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            int32_t idx = e + u * nthreads;
            at[u] = -1;
            if (idx < n) {
                int32_t row = idx / bw, col = idx - row * bw;
                v[u] = __ldg((const PIX *)(base + (size_t)row * stride) + col);
                at[u] = col * pitch + row;
            }
        }
#pragma unroll
        for (int u = 0; u < 8; ++u)
            if (at[u] >= 0)
                box[at[u]] = v[u];
    }
}

/* How the block splits a window of ncols columns: `cw` column slots per row group (8, 16 or a
 * multiple of 32, >= ncols) and nthreads / cw row groups. The launch makes nthreads >= cw. */
__device__ __forceinline__ void block_split(int32_t ncols, int nthreads, int32_t *cw,
                                            int32_t *groups)
{
    int32_t c = ncols <= 8 ? 8 : (ncols <= 16 ? 16 : (ncols + 31) & ~31);
    *cw = c;
    *groups = nthreads / c;
}

/*
 * Step 2, integer part (every thread). Thread tid takes column c = tid % cw of the window and
 * row group g = tid / cw, and sums the g-th of `groups` runs of the column's interior rows
 * 1 .. nr - 1 (r = j - j0): A = sum v, B = sum r v, exact in 32 bits for u8 and u16
 * (B <= 65535 * 255 * 256 / 2 < 2^32), so that the groups' partial sums add up to
 * search_model.h's A and B however the rows are split. The partials go to A_s, B_s [g cw + c].
 * Returns the minimum of the thread's pixels, the edge rows r = 0 (group 0) and r = nr (the last
 * group) included; all ones for a thread without pixels. `col` is the window's column 0 in the
 * (column-major) box.
 */
template <typename PIX>
__device__ __forceinline__ uint32_t block_columns(const PIX *col, int32_t pitch, int32_t ncols,
                                                  int32_t nr, int32_t cw, int32_t groups, int tid,
                                                  uint32_t *A_s, uint32_t *B_s)
{
    const int32_t g = tid / cw, c = tid - g * cw;
    uint32_t mn = 0xffffffffu;
    if (g >= groups || c >= ncols)
        return mn;
    const PIX *q = col + c * pitch;
    const int32_t run = (nr - 1 + groups - 1) / groups; /* rows a group (nr >= 1) */
    const int32_t lo = 1 + g * run, hi = min(lo + run, nr);
    uint32_t A = 0u, B = 0u;
    for (int32_t r = lo; r < hi; r += 8) { /* eight loads in flight */
        uint32_t v[8], a = 0u, b = 0u;
        if (r + 8 <= hi) {
#pragma unroll
            for (int u = 0; u < 8; ++u)
                v[u] = q[r + u];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                a += v[u];
                b += (uint32_t)u * v[u];
                mn = min(mn, v[u]);
            }
        } else {
#pragma unroll
            for (int u = 0; u < 8; ++u)
                v[u] = r + u < hi ? (uint32_t)q[r + u] : 0u;
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                a += v[u];
                b += (uint32_t)u * v[u];
                if (r + u < hi)
                    mn = min(mn, v[u]);
            }
        }
        A += a;
        B += (uint32_t)r * a + b; /* sum (r + u) v[u] */
    }
    if (g == 0)
        mn = min(mn, (uint32_t)q[0]);
    if (g == groups - 1)
        mn = min(mn, (uint32_t)q[nr]);
    A_s[g * cw + c] = A;
    B_s[g * cw + c] = B;
    return mn;
}

/*
 * Step 2, double part, per column (thread c < ncols of the block): the column's A and B from
 * the groups' partials, its edge rows v(j0), v(j1) from the box, then exactly the arithmetic of
 * search_model.h's sw_sm_lane_u8 / _u16 for that column (sw_sm_col_weight, sw_sm_col_finish)
 * and the three products of sw_sm_lane_add (sw_sm_col_terms), to T_s[c] (3 doubles).
 */
template <typename PIX>
__device__ __forceinline__ void
block_column_terms(const sw_sm_window *w, const PIX *col, int32_t pitch, int32_t cw, int32_t groups,
                   const uint32_t *A_s, const uint32_t *B_s, int c, double *T_s)
{
    const int32_t ncols = w->i1 - w->i0 + 1, nr = w->j1 - w->j0;
    if (c >= ncols)
        return;
    uint32_t A = 0u, B = 0u;
    for (int32_t g = 0; g < groups; g += 4) { /* four groups' loads in flight */
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            if (g + u < groups) {
                A += A_s[(g + u) * cw + c];
                B += B_s[(g + u) * cw + c];
            }
        }
    }
    const uint32_t e0 = col[c * pitch], e1 = nr > 0 ? (uint32_t)col[c * pitch + nr] : 0u;
    double wx, mx, col0, coly, t[3];
    sw_sm_col_weight(w, c, &wx, &mx);
    sw_sm_col_finish(w, block_u32_double(A), block_u32_double(B), block_u32_double(e0),
                     block_u32_double(e1), &col0, &coly);
    sw_sm_col_terms(wx, mx, col0, coly, t);
    T_s[3 * c] = t[0];
    T_s[3 * c + 1] = t[1];
    T_s[3 * c + 2] = t[2];
}

/*
 * Step 2, the lanes' sums, and step 3 (warp 0). Lane t adds the terms of its columns
 * c = 4t + q + 128r in increasing c (sw_sm_lane_add_terms), as search_model.h's lane t does;
 * the window minimum is the integer minimum of the warps' minima (mn: this lane's share), as
 * the butterfly's min would leave it. The butterfly is search_model.h's, except that a stage o
 * whose partner lanes t + o have no columns (and so hold exact zeros, which change no sum: a
 * lane's sums start at +0.0 and are never -0.0) is left out: lane 0 ends with the same bits;
 * it alone is used.
 */
__device__ __forceinline__ void block_window_sums(int32_t ncols, const double *T_s, uint32_t mn,
                                                  int lane, sw_sm_sums *out)
{
    sw_sm_sums s = {0.0, 0.0, 0.0, INFINITY};
    for (int32_t c0 = SW_SM_QUADS * lane; c0 < ncols; c0 += SW_SM_PASS) {
        const int32_t nq = min(ncols - c0, SW_SM_QUADS);
#pragma unroll
        for (int q = 0; q < SW_SM_QUADS; ++q)
            if (q < nq)
                sw_sm_lane_add_terms(&s, T_s + 3 * (c0 + q));
    }
    s.m = block_u32_double(block_warp_min(mn));
    const int32_t used = min((ncols + SW_SM_QUADS - 1) / SW_SM_QUADS, SW_SM_LANES);
#pragma unroll
    for (int o = 16; o >= 1; o >>= 1) {
        if (o >= used)
            continue;     /* lanes o..31 hold zeros: lane 0 would add +0.0 */
        sw_sm_sums other; /* the three shuffles interleaved (seed optimisation 1) */
        other.s0 = __shfl_xor_sync(SEARCH_FULL, s.s0, o);
        other.sx = __shfl_xor_sync(SEARCH_FULL, s.sx, o);
        other.sy = __shfl_xor_sync(SEARCH_FULL, s.sy, o);
        other.m = s.m;
        s = sw_sm_combine(s, other);
    }
    *out = s;
}

/* The result of spot k (thread 0). */
__device__ __forceinline__ void block_write(const sw_sm_spot *sp, int32_t k, double *x, double *y,
                                            double *intensity, uint8_t *status)
{
    uint8_t st = sw_sm_spot_status(sp);
    status[k] = st;
    x[k] = st == SW_SPOT_OK ? sp->cx : NAN;
    y[k] = st == SW_SPOT_OK ? sp->cy : NAN;
    intensity[k] = st == SW_SPOT_OK ? sp->s0 : NAN;
}

/*
 * PAPYCS / CoM of u8 and u16 frames: one block of NW warps per spot (Algorithm 1, the spot's
 * work spread over a block instead of a warp). The block stages the spot's neighbourhood (the
 * first window and a margin: a box of side x side pixels) in shared memory; then per step
 * (Algorithm 2 lines 8-19):
 *   a. every thread sums its share of the window's interior rows of one column and the warps'
 *      minima are taken (block_columns);                                        barrier;
 *   b. one thread per column forms the column's double terms (block_column_terms);
 *                                          barrier (a warp barrier for <= 32 columns);
 *   c. warp 0 adds them per lane and reduces the lanes by the butterfly (block_window_sums);
 *      lane 0 finishes the step (sw_sm_finish), updates the spot and makes the next window
 *      (sw_sm_window_make), noting whether it leaves the box;                   barrier;
 *   d. every thread reads the next window; when it leaves the box (the centre moved more than
 *      the margin) the block stages a box around it.
 * Control flow is uniform over the block; lane 0 of warp 0 holds the spot's state.
 * Dynamic shared memory: T_s (3 x 32 NW doubles), A_s, B_s (32 NW uint32 each), the box
 * (side columns of `pitch` pixels).
 */
template <int TYPE, int NW>
__global__ void __launch_bounds__(32 * NW, 32 / NW)
    block_kernel(const void *__restrict__ frame, size_t stride, int32_t width, int32_t height,
                 int32_t nx, int32_t ny, double f, const double *__restrict__ sx,
                 const double *__restrict__ sy, const uint8_t *__restrict__ active, int32_t wmax,
                 int32_t smin, int32_t side, int32_t pitch, double *x, double *y, double *intensity,
                 uint8_t *status)
{
    typedef typename block_pixel<TYPE>::type PIX;
    const int nthreads = 32 * NW;
    __shared__ block_ctl ctl;
    __shared__ uint32_t mn_s[NW];
    extern __shared__ double block_dyn[];
    double *T_s = block_dyn;
    uint32_t *A_s = (uint32_t *)(T_s + 3 * nthreads), *B_s = A_s + nthreads;
    PIX *box = (PIX *)(B_s + nthreads);
    const int tid = (int)threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t k = (int32_t)blockIdx.x;

    if (!active[k]) { /* an inactive spot costs one load */
        if (tid == 0) {
            status[k] = SW_SPOT_INACTIVE;
            x[k] = NAN;
            y[k] = NAN;
            intensity[k] = NAN;
        }
        return;
    }
    /* The start and the first window (side smax <= wmax, the neighbour window), alike in every
     * thread. */
    sw_sm_spot sp;
    sw_sm_window w0;
    int32_t smax;
    if (!sw_sm_spot_start(&sp, sx[k], sy[k]))
        goto done; /* OUTSIDE: a non-finite start */
    smax = sw_sm_first_side(sx, sy, k, nx, ny, f, wmax, smin);
    if (!sw_sm_window_make(sp.cx, sp.cy, (double)smax, width, height, &w0)) {
        sw_sm_spot_update(&sp, SW_SM_STEP_EMPTY, 0.0, 0.0, 0.0); /* OUTSIDE */
        goto done;
    }
    {
        const int32_t margin = (side - smax - 1) / 2;
        int32_t bx0 = block_box_origin(w0.i0, margin, side, width);
        int32_t by0 = block_box_origin(w0.j0, margin, side, height);
        if (tid == 0)
            ctl.w[0] = w0;
        block_stage<PIX>(frame, stride, width, height, bx0, by0, side, pitch, box, tid, nthreads);
        __syncthreads();
        for (int32_t s = smax, par = 0;; --s, par ^= 1) {
            const sw_sm_window *w = &ctl.w[par];
            const int32_t ncols = w->i1 - w->i0 + 1;
            int32_t cw, groups;
            block_split(ncols, nthreads, &cw, &groups);
            const PIX *col = box + (w->i0 - bx0) * pitch + (w->j0 - by0); /* window column 0 */
            /* a. */
            uint32_t mn = block_warp_min(
                block_columns<PIX>(col, pitch, ncols, w->j1 - w->j0, cw, groups, tid, A_s, B_s));
            if (lane == 0)
                mn_s[warp] = mn;
            __syncthreads();
            /* b. */
            block_column_terms<PIX>(w, col, pitch, cw, groups, A_s, B_s, tid, T_s);
            if (ncols > 32)
                __syncthreads();
            else if (warp == 0)
                __syncwarp();
            /* c. */
            if (warp == 0) {
                sw_sm_sums t;
                block_window_sums(ncols, T_s, lane < NW ? mn_s[lane] : 0xffffffffu, lane, &t);
                if (lane == 0) {
                    double ncx = sp.cx, ncy = sp.cy, s0 = 0.0;
                    int r = sw_sm_finish(w, &t, &ncx, &ncy, &s0);
                    sw_sm_spot_update(&sp, r, ncx, ncy, s0);
                    int32_t go = 0, restage = 0;
                    if (s > smin) { /* the next step's window */
                        sw_sm_window *nw = &ctl.w[par ^ 1];
                        if (sw_sm_window_make(sp.cx, sp.cy, (double)(s - 1), width, height, nw)) {
                            go = 1;
                            if (!block_box_holds(nw, bx0, by0, side)) {
                                restage = 1;
                                ctl.bx0 = block_box_origin(nw->i0, margin, side, width);
                                ctl.by0 = block_box_origin(nw->j0, margin, side, height);
                            }
                        } else {
                            sw_sm_spot_update(&sp, SW_SM_STEP_EMPTY, 0.0, 0.0, 0.0);
                        }
                    }
                    ctl.go = go;
                    ctl.restage = restage;
                }
            }
            __syncthreads();
            /* d. */
            if (!ctl.go)
                break;
            if (ctl.restage) {
                bx0 = ctl.bx0;
                by0 = ctl.by0;
                block_stage<PIX>(frame, stride, width, height, bx0, by0, side, pitch, box, tid,
                                 nthreads);
                __syncthreads();
            }
        }
    }
done:
    if (tid == 0)
        block_write(&sp, k, x, y, intensity, status);
}

typedef void (*block_fn)(const void *, size_t, int32_t, int32_t, int32_t, int32_t, double,
                         const double *, const double *, const uint8_t *, int32_t, int32_t, int32_t,
                         int32_t, double *, double *, double *, uint8_t *);

template <int TYPE> static block_fn block_kernel_of(int nw)
{
    switch (nw) {
    case 1: return block_kernel<TYPE, 1>;
    case 2: return block_kernel<TYPE, 2>;
    case 4: return block_kernel<TYPE, 4>;
    case 8: return block_kernel<TYPE, 8>;
    default: return block_kernel<TYPE, 16>;
    }
}

/* The shape of a block launch. */
typedef struct block_cfg {
    block_fn fn;
    int nw;        /* warps per block                      */
    int32_t side;  /* the staged box's side, pixels        */
    int32_t pitch; /* its column pitch, pixels             */
    size_t smem;   /* dynamic shared memory, bytes         */
} block_cfg;

/*
 * The block launch for a plan, or 0 (the one-warp kernel) for f32 frames and where even a box
 * of the first window alone does not fit in a block's shared memory.
 *  - Warps: at least ceil((window + 1) / 32) (a row of the widest window over the 32 NW
 *    threads), and as many as give row groups of ~16 rows (latency: with few spots the SMs are
 *    idle otherwise), up to 16 warps; halved (not below the first bound) while the plan's spots
 *    would not all be resident at once (about 64 registers a thread: 32 / NW blocks an SM).
 *  - Box: the first window (window + 1 pixels) and a margin of window / 4 + 2 on each side, so
 *    that the usual drift of the centre over the steps stays inside (a start a quarter of a
 *    window off its spot); less where shared memory is short.
 */
static int block_config(const sw_search_plan *plan, block_cfg *cfg)
{
    const sw_search_params *p = &plan->p;
    if (p->type != SW_PIX_U8 && p->type != SW_PIX_U16)
        return 0;
    int optin = 0, per_sm = 0;
    if (cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               plan->ctx->device) != cudaSuccess ||
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor,
                               plan->ctx->device) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    const int32_t cols = p->window_px + 1;
    int least = 1;
    while (least * 32 < cols)
        least *= 2;
    int nw = least * ((cols + 15) / 16);
    int p2 = 1;
    while (p2 < nw && p2 < 16)
        p2 *= 2;
    nw = p2 < least ? least : p2;
    const size_t px = p->type == SW_PIX_U8 ? 1u : 2u;
    /* static shared memory (ctl, mn_s) and the runtime's own reserve: 2 KiB is ample */
    const size_t reserve = 2048;
    int32_t margin = p->window_px / 4 + 2, side = 0, pitch = 0;
    size_t smem = 0;
    for (;; --margin) {
        side = cols + 2 * margin;
        pitch = side; /* an odd number of words: 4 mod 8 bytes (u8), 2 mod 4 pixels (u16) */
        while (px == 1u ? pitch % 8 != 4 : pitch % 4 != 2)
            ++pitch;
        smem = 32u * (size_t)nw * (3u * 8u + 2u * 4u) + (size_t)side * (size_t)pitch * px;
        if (smem + reserve <= (size_t)optin)
            break;
        if (margin == 0)
            return 0;
    }
    const int sms = plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 1;
    while (nw > least) {
        int by_regs = 32 / nw;
        int by_smem = (int)((size_t)per_sm / (smem + reserve));
        int per = by_regs < by_smem ? by_regs : by_smem;
        if ((int64_t)p->nspots <= (int64_t)sms * per)
            break;
        nw /= 2;
        smem -= 32u * (size_t)nw * (3u * 8u + 2u * 4u); /* the scratch of the warps given up */
    }
    cfg->nw = nw;
    cfg->side = side;
    cfg->pitch = pitch;
    cfg->smem = smem;
    cfg->fn =
        p->type == SW_PIX_U8 ? block_kernel_of<SW_PIX_U8>(nw) : block_kernel_of<SW_PIX_U16>(nw);
    return 1;
}

extern "C" sw_status sw_search_gpu_search(sw_search_plan *plan, const sw_image *frame,
                                          const double *sx, const double *sy, const uint8_t *active,
                                          double *x, double *y, double *intensity, uint8_t *status)
{
    const sw_search_params *p = &plan->p;
    int32_t smax = p->window_px;
    int32_t smin = p->algorithm == SW_SEARCH_COM ? smax : p->min_window_px;
    double f = p->algorithm == SW_SEARCH_PAPYCS ? p->neighbour_window : 0.0;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    block_cfg cfg;
    if (block_config(plan, &cfg)) {
        cfg.fn<<<(unsigned)p->nspots, 32u * (unsigned)cfg.nw, cfg.smem, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nx, p->ny, f, sx, sy, active, smax,
            smin, cfg.side, cfg.pitch, x, y, intensity, status);
        SW_CU(cudaGetLastError());
        return SW_OK;
    }
    unsigned blocks = (unsigned)((p->nspots + SEARCH_WARPS - 1) / SEARCH_WARPS);
    if (p->type == SW_PIX_U8)
        search_kernel<SW_PIX_U8><<<blocks, 32 * SEARCH_WARPS, 0, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nspots, p->nx, p->ny, f, sx, sy,
            active, smax, smin, x, y, intensity, status);
    else if (p->type == SW_PIX_U16)
        search_kernel<SW_PIX_U16><<<blocks, 32 * SEARCH_WARPS, 0, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nspots, p->nx, p->ny, f, sx, sy,
            active, smax, smin, x, y, intensity, status);
    else
        search_kernel<SW_PIX_F32><<<blocks, 32 * SEARCH_WARPS, 0, s>>>(
            frame->data, frame->stride, p->width, p->height, p->nspots, p->nx, p->ny, f, sx, sy,
            active, smax, smin, x, y, intensity, status);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* ---------------------------------------------------------------- discarding stage */

__global__ void contrast_kernel(const void *__restrict__ frame, size_t stride, int type,
                                int32_t width, int32_t height, int32_t n, const double *x,
                                const double *y, const uint8_t *status, double contrast,
                                int32_t ring, uint8_t *flag1)
{
    int32_t k = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (k >= n)
        return;
    uint8_t s = status[k];
    if (s == SW_SPOT_OK && !sw_sm_contrast_ok(frame, stride, (sw_pixel_type)type, width, height,
                                              x[k], y[k], contrast, ring))
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
            status, p->discard_contrast, p->discard_ring_px, plan->d_flag1);
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
    /* A block launch with more than the default 48 KiB of dynamic shared memory needs the
     * kernel's permission, given here (the plan's launch shape is fixed; never lowered, as other
     * plans may need more). */
    block_cfg cfg;
    if (block_config(plan, &cfg)) {
        cudaFuncAttributes fa;
        SW_CU(cudaFuncGetAttributes(&fa, (const void *)cfg.fn));
        if (cfg.smem > (size_t)fa.maxDynamicSharedSizeBytes)
            SW_CU(cudaFuncSetAttribute((const void *)cfg.fn,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg.smem));
    }
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
