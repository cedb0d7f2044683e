/*
 * Reichenbach's centroid algorithm on the GPU (search.h "Reichenbach"; seed 001 Sec. 3.2.2,
 * "GPU implementation of Reichenbach's"). search_reich.c is the reference; the decisions both
 * share are in search_reich.h, and this file is compiled with -fmad=false, so a GPU run gives
 * the CPU's peaks, spots, centroids and statuses to the last bit.
 *
 * Four kernels per run, whatever the grid (in a captured graph: four nodes), all on the
 * context's stream, with no host synchronisation:
 *   rh_prep_kernel    clears the cells' occupancy bits and the run's counters; with the
 *                     automatic threshold, the rows' sums (one warp per row, the lanes and
 *                     shuffle tree of search_reich.h, RH_ROW_UNROLL loads in flight per lane), and
 *                     the block that finishes last (an atomic ticket after a fence) adds the
 *                     256 partials over rows and the tree: T into device memory
 *   rh_scan_kernel    step 1's peaks: tiles of 64 x 32 pixels and their peak-box halo in shared
 *                     memory (the seed's "each CUDA block loads one tile to shared memory"); a
 *                     tile without a pixel above T stops there; otherwise each pixel above T is
 *                     tested against its box (3 x 3 first), and the tile's peaks are appended to
 *                     a list in global memory (one atomic per tile)
 *   rh_com_kernel     one warp per listed peak: its centre of mass (search_model.h's 32 lanes
 *                     and butterfly, by shuffles, as search_cuda.cu), stored in the peak's cell
 *                     with the cell's occupancy bit; a peak with a NaN / Inf pixel is dropped
 *   rh_rounds_kernel  steps 2-3 and the results in ONE block of 1024 threads, the rounds
 *                     separated by __syncthreads instead of kernel launches: the seed (the
 *                     fixed-order mean of the starts, the nearest spot) and round 0's
 *                     claimants (the seed block); then per round
 *                       choose   each claimant of the round's list by a group of G lanes (4 ..
 *                                32: the fewer claimants, the more lanes each): its prediction
 *                                (sw_rh_predict), the free peaks of its cells from the
 *                                occupancy and taken bits (32 cells a word), the nearest in the
 *                                total order (d2, pixel) by shuffles within the group, the claim
 *                                (atomicMin of the packed key, sw_rh_key);
 *                       resolve  the claimant whose key is its cell's smallest takes the peak;
 *                       list     the next round's claimants: the unfound searchable
 *                                4-neighbours of this round's winners, and from round 1 on the
 *                                claimants that did not win (they keep their found neighbour),
 *                                each once (a per-spot stamp of the round);
 *                     it stops after a round without a winner or after cfg.rounds rounds, as the
 *                     CPU; then one thread per spot writes the results, and the peak count goes
 *                     to mapped host memory (no copy).
 * The lists hold exactly search_reich.h's claimants (active, finite start, not found, a found
 * 4-neighbour): a spot gains its first found neighbour in the round that neighbour wins, which
 * lists it, and keeps it. Every round reads the state the previous round left: the claims go to
 * their own array, and the taken bits and found flags change only in the resolve phase, after
 * all claims are in; the claimant's choice is the same whatever order the lanes take.
 *
 * The rounds kernel keeps the spots' state (positions, choices, lists, stamps, flags: 34 bytes
 * a spot) and the cells' occupancy and taken bits in shared memory where they fit the device's
 * opt-in limit (decided at create: the bits first, then the spots), otherwise in global memory
 * (the same code through generic pointers), so any grid runs, only slower.
 */
#include "centroid/search_reich.h"
#include "centroid/search_model.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   ctx
#define SW_CUDA_STAGE "reichenbach"

#define RH_FULL       0xffffffffu
#define RH_TW         64  /* peak tile: columns                                   */
#define RH_TH         32  /* peak tile: rows                                      */
#define RH_PT         256 /* peak tile: threads (8 pixels each)                   */
#define RH_LIST       512 /* peaks per tile at most: (64 / 2) x (32 / 2) cells    */
#define RH_THREADS    256 /* prep kernel: threads per block (= SW_RH_PARTIALS)    */
#define RH_WARPS      (RH_THREADS / 32)
#define RH_ROW_UNROLL 16   /* row sums: loads in flight per lane                */
#define RH_UNROLL     8    /* sums over rows and spots: loads in flight          */
#define RH_RT         1024 /* rounds kernel: threads of the one block              */
#define RH_RWARPS     (RH_RT / 32)
/* bytes per spot of the rounds kernel: fx fy, choice mark list0 list1, found srch */
#define RH_SPOT_BYTES (2 * sizeof(double) + 4 * sizeof(int32_t) + 2)

/* Device scalars of a run. */
struct rh_scal {
    double threshold;         /* T of the automatic threshold                   */
    unsigned long long count; /* peaks stored (measured, in their cells)        */
    unsigned int listed;      /* peaks found by the scan (the list's length)    */
    unsigned int ticket;      /* prep kernel: blocks done (0 between runs)      */
};

/* The peak cells (search_reich.h "Peaks"): a cell's data are valid only where its occupancy bit
 * is set in this run, so they are never cleared. */
struct rh_cells {
    int32_t *pix;
    double *x, *y, *s0;
    unsigned long long *claim;
};

/* Where the rounds kernel keeps its state: in the dynamic shared memory when the flag is set,
 * otherwise in these global buffers. occ is always written in global memory by the peaks
 * kernel (and copied into shared memory by the rounds kernel). */
struct rh_work {
    int spots_shared, bits_shared;
    int32_t mww;   /* occupancy words per row of cells: ceil(mw / 32) */
    int64_t words; /* mww * mh                                         */
    uint32_t *occ, *taken;
    double *fx, *fy;
    int32_t *choice, *mark, *list0, *list1;
    uint8_t *found, *srch;
};

struct rh_gpu {
    int device;
    rh_cells cells;
    rh_work work;
    double *row_s, *row_q;
    long long *row_n;
    int32_t *peaks; /* ncells: the scan's peaks (pixel indices), in no order */
    rh_scal *scal;
    long long *host_count; /* mapped pinned memory */
    long long *dev_count;  /* its device address    */
    size_t scan_smem;      /* dynamic shared memory of the scan kernel   */
    size_t rounds_smem;    /* dynamic shared memory of the rounds kernel */
    unsigned int com_blocks;
};

static cudaStream_t stream_of(const sw_context *ctx)
{
    return (cudaStream_t)sw_context_stream(ctx);
}

/* Pixel x of a device row as a float (exact for u8, u16, f32). */
template <int TYPE> __device__ __forceinline__ float rh_pix(const char *row, int32_t x)
{
    if (TYPE == SW_PIX_U8)
        return (float)((const uint8_t *)row)[x];
    if (TYPE == SW_PIX_U16)
        return (float)((const uint16_t *)row)[x];
    return ((const float *)row)[x];
}

/* The tree over the block's SW_RH_PARTIALS partials in shared memory, in search_reich.h's order:
 * a[0], b[0] and n[0] end as the totals. Every thread of the block calls it. */
__device__ __forceinline__ void rh_tree3(double *a, double *b, long long *n, int tid)
{
    for (int o = SW_RH_PARTIALS / 2; o >= 1; o /= 2) {
        if (tid < o) {
            a[tid] = a[tid] + a[tid + o];
            b[tid] = b[tid] + b[tid + o];
            n[tid] += n[tid + o];
        }
        __syncthreads();
    }
}

/* ---------------------------------------------------------------- prep: clears, threshold */

template <int TYPE>
__global__ void __launch_bounds__(RH_THREADS)
    rh_prep_kernel(const char *frame, size_t stride, int32_t width, int32_t height, int autot,
                   uint32_t *occ, int64_t words, double *row_s, double *row_q, long long *row_n,
                   rh_scal *scal)
{
    __shared__ double ps[SW_RH_PARTIALS], pq[SW_RH_PARTIALS];
    __shared__ long long pn[SW_RH_PARTIALS];
    __shared__ int last;
    const int tid = (int)threadIdx.x, lane = tid % 32;
    for (int64_t i = (int64_t)blockIdx.x * RH_THREADS + tid; i < words;
         i += (int64_t)gridDim.x * RH_THREADS)
        occ[i] = 0u;
    if (blockIdx.x == 0 && tid == 0) {
        scal->count = 0ull;
        scal->listed = 0u;
    }
    if (!autot)
        return; /* the whole grid */

    /* The rows' sums: lane t adds the pixels t, t + 32, ... in increasing x (search_reich.h),
     * RH_ROW_UNROLL loads issued before their additions. */
    for (int32_t y = (int32_t)blockIdx.x * RH_WARPS + tid / 32; y < height;
         y += (int32_t)gridDim.x * RH_WARPS) {
        const char *row = frame + (size_t)y * stride;
        double a = 0.0, b = 0.0;
        long long n = 0;
        for (int32_t x0 = lane; x0 < width; x0 += SW_RH_LANES * RH_ROW_UNROLL) {
            float v[RH_ROW_UNROLL];
#pragma unroll
            for (int u = 0; u < RH_ROW_UNROLL; ++u) {
                int32_t x = x0 + SW_RH_LANES * u;
                v[u] = x < width ? rh_pix<TYPE>(row, x) : NAN;
            }
#pragma unroll
            for (int u = 0; u < RH_ROW_UNROLL; ++u) {
                double d = (double)v[u];
                if (isfinite(d)) {
                    a = a + d;
                    b = b + d * d;
                    ++n;
                }
            }
        }
        for (int o = SW_RH_LANES / 2; o >= 1; o /= 2) {
            a = a + __shfl_down_sync(RH_FULL, a, o);
            b = b + __shfl_down_sync(RH_FULL, b, o);
            n += __shfl_down_sync(RH_FULL, n, o);
        }
        if (lane == 0) {
            row_s[y] = a;
            row_q[y] = b;
            row_n[y] = n;
        }
    }

    /* The last block: 256 partials over rows, the tree, T. */
    __threadfence();
    __syncthreads();
    if (tid == 0)
        last = atomicAdd(&scal->ticket, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    double a = 0.0, b = 0.0;
    long long n = 0;
    for (int32_t y0 = tid; y0 < height; y0 += SW_RH_PARTIALS * RH_UNROLL) {
        double vs[RH_UNROLL], vq[RH_UNROLL];
#pragma unroll
        for (int u = 0; u < RH_UNROLL; ++u) {
            int32_t y = y0 + SW_RH_PARTIALS * u;
            vs[u] = y < height ? __ldcg(row_s + y) : 0.0;
            vq[u] = y < height ? __ldcg(row_q + y) : 0.0;
            n += y < height ? __ldcg(row_n + y) : 0;
        }
#pragma unroll
        for (int u = 0; u < RH_UNROLL; ++u)
            if (y0 + SW_RH_PARTIALS * u < height) { /* the rows t, t + 256, ... in order */
                a = a + vs[u];
                b = b + vq[u];
            }
    }
    ps[tid] = a;
    pq[tid] = b;
    pn[tid] = n;
    __syncthreads();
    rh_tree3(ps, pq, pn, tid);
    if (tid == 0) {
        scal->threshold = sw_rh_threshold(ps[0], pq[0], (int64_t)pn[0]);
        scal->ticket = 0u;
    }
}

/* ---------------------------------------------------------------- step 1: peaks */

template <int TYPE>
__global__ void __launch_bounds__(RH_PT)
    rh_scan_kernel(const char *frame, size_t stride, sw_rh_cfg c, int autot, rh_scal *scal,
                   int32_t *peaks)
{
    extern __shared__ float rh_tile[];
    __shared__ int32_t list[RH_LIST];
    __shared__ int nlist;
    __shared__ unsigned int base;
    const int32_t h = c.half, tc = RH_TW + 2 * h, tr = RH_TH + 2 * h;
    float *V = rh_tile; /* tr x tc: the tile and its halo (-Inf beyond the frame) */
    const int32_t gx0 = (int32_t)blockIdx.x * RH_TW, gy0 = (int32_t)blockIdx.y * RH_TH;
    const int tid = (int)threadIdx.x;
    const double t = autot ? scal->threshold : c.threshold;

    if (tid == 0)
        nlist = 0;
    int cand = 0; /* a pixel of the tile (not the halo) above T */
#pragma unroll 8
    for (int i = tid; i < tr * tc; i += RH_PT) {
        int32_t lx = i % tc, ly = i / tc;
        int32_t x = gx0 - h + lx, y = gy0 - h + ly;
        float v = -INFINITY;
        if (x >= 0 && x < c.width && y >= 0 && y < c.height) {
            v = rh_pix<TYPE>(frame + (size_t)y * stride, x);
            if (lx >= h && lx < h + RH_TW && ly >= h && ly < h + RH_TH && (double)v > t)
                cand = 1;
        }
        V[i] = v;
    }
    if (!__syncthreads_or(cand))
        return; /* the whole block: no peak here */

    /* The peak test of search_reich.h, pixel by pixel over the box: the maxima of the rows
     * above, of the pixels left, right and below are >= v (or > v) exactly when one of their
     * pixels is, as NaN pixels compare false and the maxima ignore them; -Inf beyond the frame
     * counts for nothing. The 3 x 3 neighbourhood first, which most pixels above T fail, then
     * the whole box. */
    for (int i = tid; i < RH_TW * RH_TH; i += RH_PT) {
        int32_t lx = i % RH_TW, ly = i / RH_TW;
        if (gx0 + lx >= c.width || gy0 + ly >= c.height)
            continue;
        const float *ctr = V + (ly + h) * tc + lx + h; /* the pixel */
        float p = *ctr;
        if (!isfinite(p) || !((double)p > t))
            continue;
        int peak = 1;
        for (int32_t r = 1; r <= h && peak; r = r < h ? h : h + 1) { /* radius 1, then h */
            for (int32_t dy = -r; dy <= r && peak; ++dy)
                for (int32_t dx = -r; dx <= r; ++dx) {
                    float q = ctr[dy * tc + dx];
                    /* before the pixel in raster order, q >= p beats it; after it, q > p */
                    if (dy < 0 || (dy == 0 && dx < 0) ? q >= p : q > p) {
                        peak = 0;
                        break;
                    }
                }
        }
        if (peak) /* at most one per cell: RH_LIST at most */
            list[atomicAdd(&nlist, 1)] = (gy0 + ly) * c.width + gx0 + lx;
    }
    __syncthreads();
    if (tid == 0 && nlist > 0)
        base = atomicAdd(&scal->listed, (unsigned int)nlist);
    __syncthreads();
    for (int i = tid; i < nlist; i += RH_PT)
        peaks[base + (unsigned int)i] = list[i];
}

/* One warp per listed peak: its centre of mass of side peak_box (sw_sm_com_step_ex's
 * arithmetic: the window, the 32 lanes' sums, the butterfly by shuffles, the finish), stored in
 * its cell with the cell's occupancy bit. */
template <int TYPE>
__global__ void __launch_bounds__(RH_PT)
    rh_com_kernel(const char *frame, size_t stride, sw_rh_cfg c, rh_scal *scal,
                  const int32_t *peaks, rh_cells cells, uint32_t *occ, int32_t mww)
{
    __shared__ int stored;
    const int tid = (int)threadIdx.x, lane = tid % 32;
    if (tid == 0)
        stored = 0;
    __syncthreads();
    const int64_t listed = (int64_t)scal->listed;
    for (int64_t e = (int64_t)blockIdx.x * (RH_PT / 32) + tid / 32; e < listed;
         e += (int64_t)gridDim.x * (RH_PT / 32)) {
        const int32_t pix = peaks[e], x = pix % c.width, y = pix / c.width;
        double px = (double)x, py = (double)y, s0 = 0.0;
        sw_sm_window w;
        int r;
        if (!sw_sm_window_make((double)x, (double)y, (double)c.box, c.width, c.height, &w)) {
            r = SW_SM_STEP_EMPTY;
        } else {
            sw_sm_sums s;
            sw_sm_lane_sums_t<TYPE>(frame, stride, &w, lane, &s);
            s = sw_sm_warp_butterfly(s);
            r = sw_sm_finish(&w, &s, &px, &py, &s0);
        }
        /* A NaN / Inf pixel in the window drops the peak; a flat window keeps it at its pixel
         * with intensity 0 (px, py, s0 untouched by sw_sm_finish). */
        if (lane != 0 || r == SW_SM_STEP_NONFINITE || r == SW_SM_STEP_EMPTY)
            continue;
        const int32_t cx = x / c.cell, cy = y / c.cell;
        const int64_t cell = (int64_t)cy * c.mw + cx;
        cells.pix[cell] = pix;
        cells.x[cell] = px;
        cells.y[cell] = py;
        cells.s0[cell] = s0;
        cells.claim[cell] = SW_RH_NO_KEY;
        atomicOr(&occ[(int64_t)cy * mww + (cx >> 5)], 1u << (cx & 31));
        atomicAdd(&stored, 1);
    }
    __syncthreads();
    if (tid == 0 && stored > 0)
        atomicAdd(&scal->count, (unsigned long long)stored);
}

/* Dynamic shared memory of the scan kernel for the half-box h. */
static size_t rh_scan_bytes(int32_t h)
{
    return (size_t)(RH_TW + 2 * h) * (size_t)(RH_TH + 2 * h) * sizeof(float);
}

/* ---------------------------------------------------------------- steps 2-3: the rounds */

/* The rounds kernel's arrays: carved from its dynamic shared memory (bits first, then the
 * spots; the same layout as rh_rounds_bytes) or the global buffers of w. */
struct rh_arrays {
    uint32_t *occ, *taken;
    double *fx, *fy;
    int32_t *choice, *mark, *list0, *list1;
    uint8_t *found, *srch;
};

static size_t rh_bits_bytes(const rh_work *w)
{
    return 2 * (size_t)w->words * sizeof(uint32_t);
}

__device__ rh_arrays rh_carve(unsigned char *smem, const rh_work &w, int32_t n)
{
    rh_arrays a;
    size_t off = 0;
    if (w.bits_shared) {
        a.occ = (uint32_t *)(smem + off);
        off += (size_t)w.words * sizeof(uint32_t);
        a.taken = (uint32_t *)(smem + off);
        off += (size_t)w.words * sizeof(uint32_t);
    } else {
        a.occ = w.occ;
        a.taken = w.taken;
    }
    if (w.spots_shared) {
        size_t nn = (size_t)n;
        a.fx = (double *)(smem + off);
        off += nn * sizeof(double);
        a.fy = (double *)(smem + off);
        off += nn * sizeof(double);
        a.choice = (int32_t *)(smem + off);
        off += nn * sizeof(int32_t);
        a.mark = (int32_t *)(smem + off);
        off += nn * sizeof(int32_t);
        a.list0 = (int32_t *)(smem + off);
        off += nn * sizeof(int32_t);
        a.list1 = (int32_t *)(smem + off);
        off += nn * sizeof(int32_t);
        a.found = smem + off;
        off += nn;
        a.srch = smem + off;
    } else {
        a.fx = w.fx;
        a.fy = w.fy;
        a.choice = w.choice;
        a.mark = w.mark;
        a.list0 = w.list0;
        a.list1 = w.list1;
        a.found = w.found;
        a.srch = w.srch;
    }
    return a;
}

/* The seed's order: nearer the mean, then the lower index; a NaN distance (a NaN mean: all of
 * them NaN) compares equal, so the lowest index wins, as in the CPU's first-found loop. */
__device__ __forceinline__ int rh_seed_before(double da, int32_t ka, double db, int32_t kb)
{
    return da < db || (!(db < da) && ka < kb);
}

/* The warp's first spot (best, its distance bd; best < 0: none) in rh_seed_before's order, in
 * every lane. */
__device__ __forceinline__ void rh_warp_seed(int32_t *best, double *bd)
{
    for (int o = 16; o >= 1; o >>= 1) {
        int32_t ok = __shfl_xor_sync(RH_FULL, *best, o);
        double od = __shfl_xor_sync(RH_FULL, *bd, o);
        if (ok >= 0 && (*best < 0 || rh_seed_before(od, ok, *bd, *best))) {
            *best = ok;
            *bd = od;
        }
    }
}

__global__ void __launch_bounds__(RH_RT)
    rh_rounds_kernel(sw_rh_cfg c, rh_work wk, const double *__restrict__ sx,
                     const double *__restrict__ sy, const uint8_t *__restrict__ active,
                     const int32_t *__restrict__ cell_pix, const double *__restrict__ cell_x,
                     const double *__restrict__ cell_y, const double *__restrict__ cell_s0,
                     unsigned long long *claim, const rh_scal *scal, double *x, double *y,
                     double *intensity, uint8_t *status, long long *host_count)
{
    extern __shared__ __align__(16) unsigned char rh_dyn[];
    __shared__ double ra[SW_RH_PARTIALS], rb[SW_RH_PARTIALS];
    __shared__ long long rn[SW_RH_PARTIALS];
    __shared__ double wd[RH_RWARPS];
    __shared__ int32_t wkk[RH_RWARPS];
    __shared__ int32_t seed_s;
    __shared__ int cnt[2];
    const int tid = (int)threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int32_t n = c.nspots, mww = wk.mww;
    const rh_arrays A = rh_carve(rh_dyn, wk, n);

    /* The state of a run: no peak taken, no spot found or listed; which spots are searchable. */
    for (int64_t i = tid; i < wk.words; i += RH_RT) {
        if (wk.bits_shared)
            A.occ[i] = __ldcg(wk.occ + i);
        A.taken[i] = 0u;
    }
    for (int32_t k = tid; k < n; k += RH_RT) {
        A.srch[k] = (uint8_t)sw_rh_searchable(active, sx, sy, k);
        A.found[k] = 0;
        A.mark[k] = -1;
        A.choice[k] = -1;
    }
    if (tid == 0) {
        cnt[0] = 0;
        cnt[1] = 0;
    }
    __syncthreads();

    /* Step 2: the mean of the searchable starts (256 partials over the spots in increasing
     * index, then the tree), and the seed spot nearest it. */
    if (tid < SW_RH_PARTIALS) {
        double a = 0.0, b = 0.0;
        long long m = 0;
        for (int32_t k0 = tid; k0 < n; k0 += SW_RH_PARTIALS * RH_UNROLL) {
            double vx[RH_UNROLL], vy[RH_UNROLL];
            int ok[RH_UNROLL];
#pragma unroll
            for (int u = 0; u < RH_UNROLL; ++u) {
                int32_t k = k0 + SW_RH_PARTIALS * u;
                ok[u] = k < n && A.srch[k];
                vx[u] = ok[u] ? sx[k] : 0.0;
                vy[u] = ok[u] ? sy[k] : 0.0;
            }
#pragma unroll
            for (int u = 0; u < RH_UNROLL; ++u)
                if (ok[u]) {
                    a = a + vx[u];
                    b = b + vy[u];
                    ++m;
                }
        }
        ra[tid] = a;
        rb[tid] = b;
        rn[tid] = m;
    }
    __syncthreads();
    rh_tree3(ra, rb, rn, tid);
    if (rn[0] > 0) { /* uniform */
        const double mx = ra[0] / (double)rn[0], my = rb[0] / (double)rn[0];
        int32_t best = -1;
        double bd = 0.0;
        for (int32_t k = tid; k < n; k += RH_RT) {
            if (!A.srch[k])
                continue;
            double d2 = sw_rh_d2(sx[k], sy[k], mx, my);
            if (best < 0 || rh_seed_before(d2, k, bd, best)) {
                best = k;
                bd = d2;
            }
        }
        rh_warp_seed(&best, &bd);
        if (lane == 0) {
            wkk[warp] = best;
            wd[warp] = bd;
        }
        __syncthreads();
        if (warp == 0) {
            best = wkk[lane];
            bd = wd[lane];
            rh_warp_seed(&best, &bd);
            if (lane == 0)
                seed_s = best;
        }
        __syncthreads();
        /* Round 0's claimants: the searchable spots of the seed block. */
        const int32_t seed = seed_s, side = 2 * c.seed_half + 1;
        for (int32_t e = tid; e < side * side; e += RH_RT) {
            int32_t ix = seed % c.nx + e % side - c.seed_half;
            int32_t iy = seed / c.nx + e / side - c.seed_half;
            if (ix < 0 || ix >= c.nx || iy < 0 || iy >= c.ny)
                continue;
            int32_t k = iy * c.nx + ix;
            if (A.srch[k])
                A.list0[atomicAdd(&cnt[0], 1)] = k;
        }
        __syncthreads();
    }

    /* Step 3: the rounds. */
    for (int32_t rd = 0; rd < c.rounds; ++rd) {
        const int cur = rd & 1;
        const int32_t *list = cur ? A.list1 : A.list0;
        int32_t *next = cur ? A.list0 : A.list1;
        const int L = cnt[cur];
        if (L == 0)
            break; /* no claimant: this round finds nothing (uniform) */
        if (tid == 0)
            cnt[cur ^ 1] = 0; /* the last round's count, read by nobody any more */

        /* choose: G lanes per claimant, the group's lanes over the rows of its cells. The taken
         * bits are read as volatile: in global memory they change by atomics (at L2) between
         * rounds, and a cached word must not be reused. */
        const volatile uint32_t *taken = A.taken;
        int G = 32;
        while (G > 4 && RH_RT / G < L)
            G >>= 1;
        const int groups = RH_RT / G, gi = tid / G, j = tid % G;
        for (int base = 0; base < L; base += groups) { /* uniform trip count */
            const int i = base + gi;
            int32_t k = -1, best = -1, bpix = 0;
            double bd = 0.0;
            if (i < L) {
                k = list[i];
                double px, py;
                int ok = 1;
                if (rd == 0) {
                    px = sx[k];
                    py = sy[k];
                } else {
                    ok = sw_rh_predict(&c, k, A.found, A.fx, A.fy, sx, sy, &px, &py);
                }
                int32_t cx0, cx1, cy0, cy1;
                if (ok && sw_rh_cells(&c, px, py, &cx0, &cx1, &cy0, &cy1)) {
                    const int32_t w0 = cx0 >> 5, w1 = cx1 >> 5;
                    for (int32_t cy = cy0 + j; cy <= cy1; cy += G) {
                        const int64_t rw = (int64_t)cy * mww;
                        for (int32_t wi = w0; wi <= w1; ++wi) {
                            uint32_t bits = A.occ[rw + wi] & ~taken[rw + wi];
                            if (wi == w0)
                                bits &= RH_FULL << (cx0 & 31);
                            if (wi == w1)
                                bits &= RH_FULL >> (31 - (cx1 & 31));
                            while (bits) {
                                const int b = __ffs((int)bits) - 1;
                                bits &= bits - 1u;
                                const int32_t cell = cy * c.mw + (wi << 5) + b;
                                const double d2 =
                                    sw_rh_d2(__ldg(cell_x + cell), __ldg(cell_y + cell), px, py);
                                if (!(d2 <= c.capture2))
                                    continue;
                                const int32_t pix = __ldg(cell_pix + cell);
                                if (best < 0 || sw_rh_before(d2, pix, bd, bpix)) {
                                    best = cell;
                                    bd = d2;
                                    bpix = pix;
                                }
                            }
                        }
                    }
                }
            }
            /* The group's argmin in the total order (d2, pixel): the same in any order. */
            for (int o = G >> 1; o >= 1; o >>= 1) {
                int32_t ob = __shfl_xor_sync(RH_FULL, best, o);
                int32_t op = __shfl_xor_sync(RH_FULL, bpix, o);
                double od = __shfl_xor_sync(RH_FULL, bd, o);
                if (ob >= 0 && (best < 0 || sw_rh_before(od, op, bd, bpix))) {
                    best = ob;
                    bd = od;
                    bpix = op;
                }
            }
            if (j == 0 && k >= 0) {
                A.choice[k] = best;
                if (best >= 0)
                    atomicMin(claim + best, (unsigned long long)sw_rh_key(bd, k));
            }
        }
        __syncthreads();

        /* resolve: the smallest key of a cell is its winner's (its low 24 bits: the spot). */
        int wins = 0;
        for (int i = tid; i < L; i += RH_RT) {
            const int32_t k = list[i], cell = A.choice[k];
            if (cell < 0 || (int32_t)(__ldcg(claim + cell) & 0xffffffull) != k)
                continue;
            A.found[k] = 1;
            A.fx[k] = __ldg(cell_x + cell);
            A.fy[k] = __ldg(cell_y + cell);
            const int32_t cy = cell / c.mw, cx = cell % c.mw;
            atomicOr(&A.taken[(int64_t)cy * mww + (cx >> 5)], 1u << (cx & 31));
            ++wins;
        }
        if (__syncthreads_count(wins) == 0 || rd + 1 == c.rounds)
            break; /* a round that found nothing, or the last round (uniform) */

        /* The next round's claimants, each once. */
        for (int i = tid; i < L; i += RH_RT) {
            const int32_t k = list[i];
            if (A.found[k]) {
                const int32_t ix = k % c.nx, iy = k / c.nx;
                for (int d = 0; d < 4; ++d) {
                    const int32_t mx = ix + (d == 0) - (d == 1), my = iy + (d == 2) - (d == 3);
                    if (mx < 0 || mx >= c.nx || my < 0 || my >= c.ny)
                        continue;
                    const int32_t m = my * c.nx + mx;
                    if (A.srch[m] && !A.found[m] && atomicExch(&A.mark[m], rd) != rd)
                        next[atomicAdd(&cnt[cur ^ 1], 1)] = m;
                }
            } else if (rd > 0 && atomicExch(&A.mark[k], rd) != rd) {
                next[atomicAdd(&cnt[cur ^ 1], 1)] = k; /* it keeps its found neighbour */
            }
        }
        __syncthreads();
    }

    /* The results. */
    for (int32_t k = tid; k < n; k += RH_RT) {
        const uint8_t st = sw_rh_status(active, sx, sy, k, A.found[k]);
        const int ok = st == SW_SPOT_OK;
        x[k] = ok ? A.fx[k] : NAN;
        y[k] = ok ? A.fy[k] : NAN;
        if (intensity)
            intensity[k] = ok ? cell_s0[A.choice[k]] : NAN;
        status[k] = st;
    }
    if (tid == 0)
        *(volatile long long *)host_count = (long long)scal->count;
}

/* ---------------------------------------------------------------- plan */

extern "C" void sw_reich_gpu_destroy(void *gpu)
{
    rh_gpu *g = (rh_gpu *)gpu;
    if (!g)
        return;
    cudaSetDevice(g->device);
    void *bufs[] = {g->cells.pix, g->cells.x,    g->cells.y,    g->cells.s0,   g->cells.claim,
                    g->work.occ,  g->work.taken, g->work.fx,    g->work.fy,    g->work.choice,
                    g->work.mark, g->work.list0, g->work.list1, g->work.found, g->work.srch,
                    g->row_s,     g->row_q,      g->row_n,      g->scal,       g->peaks};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        if (bufs[i])
            cudaFree(bufs[i]);
    if (g->host_count)
        cudaFreeHost(g->host_count);
    free(g);
}

/* The scan kernel's dynamic shared memory for the plan's box, within the device's limit. */
template <int TYPE>
static sw_status rh_scan_limit(sw_context *ctx, const sw_rh_cfg *c, int optin, rh_gpu *g)
{
    cudaFuncAttributes fa;
    SW_CU(cudaFuncGetAttributes(&fa, rh_scan_kernel<TYPE>));
    size_t limit = (size_t)optin > fa.sharedSizeBytes ? (size_t)optin - fa.sharedSizeBytes : 0;
    g->scan_smem = rh_scan_bytes(c->half);
    if (g->scan_smem > limit)
        return sw_fail(ctx, SW_ECUDA,
                       "reichenbach: the peak tile of box %d needs %zu bytes of shared memory per "
                       "block, the device allows %zu",
                       c->box, g->scan_smem, limit);
    SW_CU(cudaFuncSetAttribute(rh_scan_kernel<TYPE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)limit));
    return SW_OK;
}

/* The scan kernel's dynamic shared memory, the centre-of-mass kernel's grid, and where the rounds
 * kernel's state goes (rh_work's flags) with its dynamic shared memory; sets each kernel's limit to
 * all the device allows (the limit belongs to the kernel, not the plan: another plan may need more;
 * a launch takes only what it asks for). */
static sw_status rh_layout(sw_context *ctx, const sw_rh_cfg *c, rh_gpu *g)
{
    int optin = 0;
    SW_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, ctx->device));
    sw_status st = c->type == SW_PIX_U8    ? rh_scan_limit<SW_PIX_U8>(ctx, c, optin, g)
                   : c->type == SW_PIX_U16 ? rh_scan_limit<SW_PIX_U16>(ctx, c, optin, g)
                                           : rh_scan_limit<SW_PIX_F32>(ctx, c, optin, g);
    if (st != SW_OK)
        return st;
    /* The centre-of-mass kernel: 4 blocks of 8 warps per multiprocessor, no more than the
     * cells (peaks) need; a grid-stride loop over the list does the rest. */
    int sms = 0;
    SW_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ctx->device));
    int64_t want = (c->ncells + RH_PT / 32 - 1) / (RH_PT / 32),
            most = 4 * (int64_t)(sms > 0 ? sms : 1);
    g->com_blocks = (unsigned int)(want < most ? (want < 1 ? 1 : want) : most);
    cudaFuncAttributes fa;
    SW_CU(cudaFuncGetAttributes(&fa, rh_rounds_kernel));
    size_t limit = (size_t)optin > fa.sharedSizeBytes ? (size_t)optin - fa.sharedSizeBytes : 0;
    SW_CU(cudaFuncSetAttribute(rh_rounds_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)limit));
    size_t bits = rh_bits_bytes(&g->work), spots = (size_t)c->nspots * RH_SPOT_BYTES, used = 0;
    g->work.bits_shared = bits <= limit;
    if (g->work.bits_shared)
        used += bits;
    g->work.spots_shared = spots <= limit - used;
    if (g->work.spots_shared)
        used += spots;
    g->rounds_smem = used;
    return SW_OK;
}

extern "C" sw_status sw_reich_gpu_create(sw_context *ctx, const sw_rh_cfg *c, void **gpu)
{
    *gpu = NULL;
    rh_gpu *g = (rh_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "reichenbach: out of memory for the GPU state");
    g->device = ctx->device;
    g->work.mww = (c->mw + 31) / 32;
    g->work.words = (int64_t)g->work.mww * (int64_t)c->mh;
    size_t nc = (size_t)c->ncells, ns = (size_t)c->nspots, nh = (size_t)c->height,
           nw = (size_t)g->work.words;
    cudaError_t e = cudaSetDevice(ctx->device);
    sw_status st = SW_OK;
    if (e == cudaSuccess) {
        st = rh_layout(ctx, c, g);
        if (st != SW_OK) {
            sw_reich_gpu_destroy(g);
            return st;
        }
    }
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->cells.pix, nc);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->cells.x, nc);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->cells.y, nc);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->cells.s0, nc);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->cells.claim, nc);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->peaks, nc);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->work.occ, nw);
    if (e == cudaSuccess && !g->work.bits_shared)
        e = sw_cuda_alloc(&g->work.taken, nw);
    if (!g->work.spots_shared) {
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.fx, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.fy, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.choice, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.mark, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.list0, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.list1, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.found, ns);
        if (e == cudaSuccess)
            e = sw_cuda_alloc(&g->work.srch, ns);
    }
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->row_s, nh);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->row_q, nh);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->row_n, nh);
    if (e == cudaSuccess)
        e = sw_cuda_alloc(&g->scal, 1);
    /* The ticket starts at 0 (the prep kernel leaves it at 0), before any run on the stream. */
    if (e == cudaSuccess)
        e = cudaMemsetAsync(g->scal, 0, sizeof(rh_scal), stream_of(ctx));
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&g->host_count, sizeof(long long), cudaHostAllocMapped);
    if (e == cudaSuccess)
        e = cudaHostGetDevicePointer((void **)&g->dev_count, g->host_count, 0);
    if (e != cudaSuccess) {
        sw_reich_gpu_destroy(g);
        return sw_fail(ctx, e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,
                       "reichenbach: GPU allocation for a %d x %d frame and %d spots failed: %s",
                       c->width, c->height, c->nspots, cudaGetErrorString(e));
    }
    *g->host_count = -1;
    *gpu = g;
    return SW_OK;
}

template <int TYPE>
static void rh_launch_image(const sw_rh_cfg *c, rh_gpu *g, const sw_image *frame, cudaStream_t st)
{
    const char *fr = (const char *)frame->data;
    const int autot = c->threshold == 0.0;
    unsigned int pblocks;
    if (autot)
        pblocks = (unsigned int)((c->height + RH_WARPS - 1) / RH_WARPS);
    else {
        int64_t b = (g->work.words + RH_THREADS - 1) / RH_THREADS;
        pblocks = (unsigned int)(b < 1 ? 1 : (b > 1024 ? 1024 : b));
    }
    rh_prep_kernel<TYPE><<<pblocks, RH_THREADS, 0, st>>>(fr, frame->stride, c->width, c->height,
                                                         autot, g->work.occ, g->work.words,
                                                         g->row_s, g->row_q, g->row_n, g->scal);
    dim3 sgrid((unsigned int)((c->width + RH_TW - 1) / RH_TW),
               (unsigned int)((c->height + RH_TH - 1) / RH_TH));
    rh_scan_kernel<TYPE>
        <<<sgrid, RH_PT, g->scan_smem, st>>>(fr, frame->stride, *c, autot, g->scal, g->peaks);
    rh_com_kernel<TYPE><<<g->com_blocks, RH_PT, 0, st>>>(fr, frame->stride, *c, g->scal, g->peaks,
                                                         g->cells, g->work.occ, g->work.mww);
}

extern "C" sw_status sw_reich_gpu_run(sw_context *ctx, const sw_rh_cfg *c, void *gpu,
                                      const sw_image *frame, const double *sx, const double *sy,
                                      const uint8_t *active, double *x, double *y,
                                      double *intensity, uint8_t *status)
{
    rh_gpu *g = (rh_gpu *)gpu;
    cudaStream_t st = stream_of(ctx);
    SW_CU(cudaSetDevice(ctx->device));

    /* Step 1: the clears and the threshold, the peaks. */
    if (c->type == SW_PIX_U8)
        rh_launch_image<SW_PIX_U8>(c, g, frame, st);
    else if (c->type == SW_PIX_U16)
        rh_launch_image<SW_PIX_U16>(c, g, frame, st);
    else
        rh_launch_image<SW_PIX_F32>(c, g, frame, st);

    /* Steps 2-3 and the results, in one block. */
    rh_rounds_kernel<<<1, RH_RT, g->rounds_smem, st>>>(
        *c, g->work, sx, sy, active, g->cells.pix, g->cells.x, g->cells.y, g->cells.s0,
        g->cells.claim, g->scal, x, y, intensity, status, g->dev_count);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

extern "C" int64_t sw_reich_gpu_last_peaks(sw_context *ctx, void *gpu)
{
    rh_gpu *g = (rh_gpu *)gpu;
    if (cudaSetDevice(ctx->device) != cudaSuccess ||
        cudaStreamSynchronize(stream_of(ctx)) != cudaSuccess)
        return -1;
    return (int64_t) * (volatile long long *)g->host_count;
}
