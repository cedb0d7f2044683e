/*
 * The GPU twin of the pupil tracker (pupil.h steps 0-9; seed 001 Sec. 3.1 "GPU implementation of
 * Pupil Tracking"). pupil_cpu.c is the reference; the arithmetic both share is pupil_model.h, and
 * this file is compiled with -fmad=false, so everything up to the RANSAC winner is bit-identical
 * to the CPU's (the 8-bit images, the split, the thresholds, the border lists in the same order,
 * the votes and the winner); the refinement sums are added in another order (1e-6 px).
 *
 * Ten kernels for the default parameters (one more with a lenslet grid), all on the context's
 * stream (sw_context_stream), each fusing the steps whose data it already holds; every launch
 * costs a few microseconds in the graph, so fewer kernels count as much as faster ones:
 *   step 0    pp_scale_u8_kernel    8-bit frames: the value histogram (16-byte loads); the last
 *                                   block computes pupil_model.h's two passes from it
 *             pp_sum_int_kernel     u16 / u32 frames: the exact integer sums, one kernel per pass
 *             pp_row_sums_kernel    others: the model's row sums (one warp per row), per pass
 *             pp_fixed_scale_kernel a given scale. The first kernel also clears the frame's
 *                                   accumulators; each pass's last block writes m1 or the scale.
 *   steps 0-2 pp_smooth_kernel      2-D tiles of 64 x 32 pixels: the raw tile plus an r-pixel halo
 *                                   converted to 8 bits (img8), the Gaussian's row pass into
 *                                   shared memory, its column pass (smooth8), the tile's column
 *                                   sums for the split; the last block finds the split (seed's
 *                                   optimisations 1 separable, 2 shared memory, 3 template
 *                                   unrolling for the default radius 4, 4 8-bit data)
 *   step 3    pp_hist_kernel        the regions' histograms (16 pixels per thread, runs of equal
 *                                   values counted once); the last block clips them and finds the
 *                                   two-class split (and with two classes the threshold)
 *             pp_otsu3_kernel       three classes: one block per (t1, region), one thread per t2;
 *                                   the last block picks the split and applies the edge level
 *   step 4    pp_dilate_kernel      threshold + dilation rows + columns in one 64 x 32 tile,
 *             pp_erode_kernel       erosion rows + columns + the border test (step 5) likewise,
 *                                   4 pixels per 32-bit word (both regions' masks coded in 2 bits
 *                                   of each byte, so the windows are clipped to the regions
 *                                   without tests); the border pixels as bit words, their number
 *                                   per row and region
 *   step 5    pp_border_kernel      one warp per row: the border pixels at the row's offset (the
 *                                   counts of the rows above, summed), in raster order of the
 *                                   region, with their float coordinates for the votes
 *   step 6    pp_candidates_kernel  8 lanes per (candidate, region): sw_pm_candidate, its float
 *                                   conic (votes) and double conic (fit) into device memory
 *             pp_vote_kernel        one warp per candidate: votes counted with __ballot_sync +
 *                                   __popc (seed's optimisation 3), an atomicMax of the packed
 *                                   (votes, index) per region
 *   7-9       pp_fit_kernel         one block of 512 per region: the refinement's sums (warp
 *                                   reduce-scatter, then one warp over the warps), the solve on one
 *                                   thread, the inliers and near-band points, the verdict, written
 *                                   into mapped host memory (seed's optimisation 4: no
 *                                   device-to-host copy)
 *   step 3d   the automatic edge level (edge_level < 0): step 3 also gives the thresholds of
 *                                   the retries' lower levels; a first fit that fails marks its
 *                                   pupil for a retry (pp_fit_kernel, sw_pm_auto_start), and
 *                                   SW_PM_AUTO_RETRIES passes of steps 4-9 follow, each kernel
 *                                   returning at once where no pupil is retried (a retry that
 *                                   fails marks the next one, the last restores the first fit's
 *                                   threshold). Then
 *             pp_ring_kernel        the histograms of the bands about each pupil still being
 *                                   refitted (the pixels of sw_pm_ring_box, a grid per pupil);
 *                                   the last block takes each pupil's decision
 *                                   (sw_pm_auto_measure). Then steps 4-9 again (refit k of
 *                                   SW_PM_RING_PASSES), each kernel returning at once where
 *                                   nothing changed, and the masks once more (a refit or the last
 *                                   retry that found nothing: the last pupil's threshold restored)
 *   mask      pp_lenslet_kernel     one thread per lenslet
 * Everything after the frame's copy into the plan's buffer is one CUDA graph, captured on the
 * first run and launched per frame; the host waits once, at the end. Several kernels end with the
 * last-block-done pattern (pp_last_block): each block adds its part, and the block that arrives
 * last (an atomic ticket after a fence) finishes the step for the whole frame.
 *
 * A frame whose automatic scale is 0 (SW_PUPIL_EMPTY_FRAME) runs through the same kernels: its
 * 8-bit image is all 0, so the regions have no threshold, the masks are empty and no border
 * pixel is found; the fit kernel then reports EMPTY_FRAME for every pupil.
 */
#include "pupil/pupil_internal.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "pupil"

#define PP_FULL 0xffffffffu

/* Where region r's border list starts in the frame-sized list: region 0 at 0, region 1 after
 * the split x height points that region 0 can hold at most (its pixels), so one list of npix
 * points serves both regions whatever the frame's split. */
__host__ __device__ __forceinline__ int64_t pp_list_start(int r, int32_t split, int32_t height)
{
    return r == 0 ? 0 : (int64_t)split * (int64_t)height;
}

#define PP_PIX        256 /* 1-D kernels (sums, histograms, lenslets): threads per block  */
#define PP_TW         64  /* 2-D tiles (steps 1, 4): columns, 16 words of 4 pixels        */
#define PP_TWW        (PP_TW / 4)
#define PP_TH         32  /* 2-D tiles: rows                                              */
#define PP_TILE       256 /* 2-D tiles: threads per block                                 */
#define PP_COLG       (PP_TILE / PP_TW) /* step 1's column pass: row groups (4)            */
#define PP_COLR       (PP_TH / PP_COLG) /* step 1's column pass: rows per thread (8)       */
#define PP_ROWS       32  /* step 0's row sums: rows (warps) per block of 1024            */
#define PP_BROWS      8   /* step 5: rows (warps) per block                               */
#define PP_CAND       64  /* step 6: threads per block of the candidate kernel             */
#define PP_CAND_LANES 8   /* step 6: lanes per candidate (6 cofactors; a power of 2)        */
#define PP_VOTE_WARPS 8   /* step 6: candidates per block of the vote kernel              */
#define PP_FIT        512 /* steps 7-9: threads per region                                */
#define PP_DEFAULT_R  4   /* the radius with its own unrolled kernels (seed: radius 4)    */

#define PP_DILATE 0 /* maximum */
#define PP_ERODE  1 /* minimum */

/* The last-block tickets (pp_last_block). */
enum {
    PP_TICKET_SCALE = 0, /* step 0 (each pass) */
    PP_TICKET_SPLIT = 1, /* step 2 */
    PP_TICKET_OTSU = 2,  /* step 3, the histograms */
    PP_TICKET_OTSU3 = 3, /* step 3, the three-class split */
    PP_TICKET_RING = 4,  /* step 3d, the bands about the pupils */
    PP_TICKETS = 5
};

/* What the kernels find per frame, in device memory (zeroed at init). */
struct pp_state {
    double scale;                    /* step 0: the 8-bit conversion factor (0: empty frame)     */
    double mean1;                    /* step 0: pass 1's mean m1 (0: empty frame)                */
    int32_t split;                   /* step 2: first column of region 1 (width with one pupil)  */
    int32_t thr[2];                  /* step 3: the thresholds, -1 when none                     */
    int32_t t2c[2];                  /* step 3: the two-class split of the clipped histogram     */
    long long nborder[2];            /* step 5: border pixels per region                          */
    unsigned long long best[2];      /* step 6: sw_pm_pack_vote of the winner, 0 when none       */
    unsigned long long total, count; /* step 0, integer frames: sums (reset when read)     */
    unsigned int ticket[PP_TICKETS]; /* last-block tickets, reset by the last block        */
    unsigned long long vhist[256];   /* step 0, 8-bit frames: the value histogram (reset)  */
    long long o3h[2][256], o3n[2][256], o3s[2][256]; /* step 3: the clipped histograms and
                                                        their prefix counts and sums        */
    double o3c[2][256];  /* step 3: the best three-class criterion per t1 ...               */
    int32_t o3t[2][256]; /*         ... and its t2                                          */
    /* step 3d (edge_level < 0): each pupil's course (pupil_model.h sw_pm_auto; its thr is
     * mirrored in thr[] for the masks), whether its refit runs in this pass (refit), whether
     * the next steps 4-5 make the masks again (redo_mask: a new threshold, or one restored),
     * the bands' histograms (zero between passes: the last block resets them) */
    sw_pm_auto au[2];
    int32_t refit[2], redo_mask;
    unsigned int ring[2][3 * 256];
    int32_t retry_thr[2][SW_PM_AUTO_RETRIES]; /* step 3: the retries' thresholds (edge_level < 0) */
};

/* The Gaussian's Q16 weights, passed by value (kernel parameters live in constant memory; a
 * __constant__ array would be shared by every plan of the process). */
struct pp_taps {
    uint32_t w[SW_PUPIL_MAX_TAPS];
};

/* A RANSAC candidate's float conic (what votes) and whether it is usable (step 6). */
struct __align__(16) pp_cand
{
    float c[6];
    int usable;
    int pad;
};

/* What the fitting kernels (steps 6-9) read, by value. */
struct pp_fit_args {
    int32_t width, height, n_pupils, candidates, refine_iterations;
    int32_t pass;      /* 0: the first fit; k > 0: step 3d's retry or refit (pupils with refit) */
    int32_t auto_edge; /* step 3d is on (edge_level < 0)                                      */
    double inlier_px, min_r, max_r, min_coverage, max_near_ratio;
    int64_t npix;             /* frame pixels                                          */
    const float *randoms;     /* candidates x 5 */
    const int2 *border;       /* npix (x, y) pairs: both regions' lists (pp_list_start) */
    const float2 *uv;         /* npix float normalised coordinates (the votes'), alike    */
    pp_cand *cand;            /* n_pupils x candidates */
    double *cand_d;           /* n_pupils x candidates x 6: the double conics (the fit's) */
    pp_state *st;             /* the frame's state */
    sw_pupil_result *result;  /* the mapped host result: its device address */
    int32_t *recheck;         /* its pp_out's recheck: the device address */
    sw_pupil_ellipse *pupils; /* device copy of the pupils, for the lenslet mask */
};

/* What the fit kernel writes to the host (mapped pinned memory): the result, and per pupil
 * sw_pm_auto_recheck of its course (plan->recheck: SW_PUPIL_OK, or the first fit's failure when
 * the spots path is to measure the pupil again). */
struct pp_out {
    sw_pupil_result result; /* first: h_result is its address */
    int32_t recheck[2];
};

/* The plan's device state (plan->gpu). */
struct pp_gpu {
    void *frame;                /* the plan's type, tight rows */
    uint8_t *img8, *dil8;       /* tight u8 images: the 8-bit input, the dilated mask */
    uint8_t *smooth8, *closed8; /* the smoothed image, the closed mask */
    double *row_sums;           /* height (step 0 of float frames) */
    uint32_t *work;             /* the frame's accumulators, cleared by step 0: */
    int64_t nwork;              /*   their number of 32-bit words */
    unsigned long long *colsum; /*   width (step 2), at the start of work */
    unsigned int *hist;         /*   2 x 256 (step 3) */
    unsigned int *rowcount;     /*   2 x height: border pixels per row and region (step 5) */
    uint32_t *bits;             /* height x ceil(width / 32): the border pixels (step 5) */
    int2 *border;               /* npix: both regions' lists (pp_list_start) */
    float2 *uv;                 /* npix, alike                               */
    pp_cand *cand;              /* n_pupils x candidates */
    double *cand_d;             /* n_pupils x candidates x 6 */
    float *randoms;             /* candidates x 5 */
    pp_state *st;               /* the frame's state */
    sw_pupil_ellipse *pupils;   /* 2: device copy of the result's pupils */
    uint8_t *lenslet;           /* nx x ny (with a geometry) */
    sw_pupil_result *h_result;  /* mapped pinned host memory (a pp_out's result) */
    sw_pupil_result *d_result;  /* its device address */
    sw_graph graph;             /* steps 0-9 and the mask, captured on the first run */
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

/* A 1-D grid-stride launch: enough blocks of `threads` for n items, at most per_sm per
 * multiprocessor. */
static unsigned pp_grid(const sw_pupil_plan *plan, int64_t n, int threads, int per_sm)
{
    int64_t b = (n + threads - 1) / threads;
    const int64_t most =
        per_sm * (int64_t)(plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 32);
    if (b > most)
        b = most;
    return (unsigned)(b > 0 ? b : 1);
}

/*
 * The last-block-done pattern: every thread of every block calls this after its block's last
 * write of the step's partial results; it returns true (in all its threads) in the one block
 * that arrives last. The fence before the ticket makes each block's writes visible before its
 * ticket counts, so the last block sees them all (it reads them with __ldcg, from L2). The last
 * block resets the ticket for the next frame.
 */
__device__ bool pp_last_block(unsigned int *ticket)
{
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0) {
        const unsigned int nb = gridDim.x * gridDim.y * gridDim.z;
        last = atomicAdd(ticket, 1u) == nb - 1;
        if (last)
            *ticket = 0;
    }
    __syncthreads();
    if (last)
        __threadfence();
    return last;
}

/* ================================================================== step 0: 8-bit input */

/* Clears the frame's accumulators (colsum, histograms, border counts; the winners) with the
 * whole grid (1-D), and writes the split when it is not found per frame (split_fixed >= 0: the
 * fixed split, or the width with one pupil). The later kernels accumulate into them. */
__device__ void pp_frame_start(pp_state *st, uint32_t *work, int64_t nwork, int32_t split_fixed)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < nwork; i += stride)
        work[i] = 0;
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        st->best[0] = 0;
        st->best[1] = 0;
        st->refit[0] = 0;
        st->refit[1] = 0;
        st->redo_mask = 0;
        if (split_fixed >= 0)
            st->split = split_fixed;
    }
}

/* Sum over the block (PP_PIX threads, 1-D) of v, returned to every thread (each adds the warps'
 * sums in the same order). Every thread of the block must call it. */
__device__ long long pp_block_sum(long long v)
{
    __shared__ long long part[PP_PIX / 32];
    for (int o = 16; o >= 1; o /= 2)
        v += __shfl_xor_sync(PP_FULL, v, o);
    __syncthreads(); /* part is free (a previous call's readers are done) */
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    long long s = 0;
    for (int w = 0; w < PP_PIX / 32; w++)
        s += part[w];
    return s;
}

/* The minimum over the block (PP_PIX threads) of v, returned to every thread. */
__device__ int pp_block_min(int v)
{
    __shared__ int part[PP_PIX / 32];
    for (int o = 16; o >= 1; o /= 2)
        v = min(v, __shfl_xor_sync(PP_FULL, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = v;
    __syncthreads();
    int m = part[0];
    for (int w = 1; w < PP_PIX / 32; w++)
        m = min(m, part[w]);
    return m;
}

/*
 * Step 0, 8-bit frames (pupil_model.h's two passes from the frame's value histogram): per-warp
 * histograms in shared memory (16-byte loads over the frame as one array; a run of one value in
 * a thread's 16 pixels is counted once, and 0 not at all: it adds nothing to either sum, and
 * the count of pixels above m1 > 0 never includes it), added into st->vhist;
 * the last block (PP_PIX = 256 threads, one per value) reads and resets it and computes pass 1's
 * total sum_v v h(v) -> m1 (sw_pm_frame_mean), then pass 2's sum and count of the values v > m1
 * -> the scale (sw_pm_scale_above). The pixel sums stay below 2^52 (pp_int_sum_exact), so every
 * partial sum of the model's order is an exact integer in a double: the model's totals are these
 * exact integer sums, whatever the order.
 */
__global__ void __launch_bounds__(PP_PIX)
    pp_scale_u8_kernel(const uint8_t *frame, int64_t npix, pp_state *st, uint32_t *work,
                       int64_t nwork, int32_t split_fixed)
{
    __shared__ unsigned int sh[PP_PIX / 32][256];
    pp_frame_start(st, work, nwork, split_fixed);
    const int warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < (PP_PIX / 32) * 256; i += PP_PIX)
        sh[i >> 8][i & 255] = 0;
    __syncthreads();
    const int64_t stride = (int64_t)gridDim.x * PP_PIX;
    const int64_t t0 = (int64_t)blockIdx.x * PP_PIX + threadIdx.x, nvec = npix / 16;
    for (int64_t i = t0; i < nvec; i += stride) {
        const uint4 q = ((const uint4 *)frame)[i]; /* cudaMalloc'ed: aligned */
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
        uint32_t key = 0, cnt = 0; /* a run of one non-zero value: one atomic */
#pragma unroll
        for (int b = 0; b < 16; b++) {
            const uint32_t v = (w[b >> 2] >> (8 * (b & 3))) & 0xffu;
            if (v == key) {
                cnt++;
            } else {
                if (key && cnt)
                    atomicAdd(&sh[warp][key], cnt);
                key = v;
                cnt = 1;
            }
        }
        if (key && cnt)
            atomicAdd(&sh[warp][key], cnt);
    }
    for (int64_t i = nvec * 16 + t0; i < npix; i += stride)
        if (frame[i])
            atomicAdd(&sh[warp][frame[i]], 1u);
    __syncthreads();
    for (int v = threadIdx.x; v < 256; v += PP_PIX) {
        unsigned long long c = 0;
        for (int w = 0; w < PP_PIX / 32; w++)
            c += sh[w][v];
        if (c)
            atomicAdd(&st->vhist[v], c);
    }
    if (!pp_last_block(&st->ticket[PP_TICKET_SCALE]))
        return;
    const long long v = threadIdx.x, hv = (long long)atomicExch(&st->vhist[v], 0ull);
    const double m1 = sw_pm_frame_mean((double)pp_block_sum(v * hv), npix);
    double scale = 0.0; /* an empty frame */
    if (m1 > 0.0) {     /* the same for the whole block */
        const bool above = (double)v > m1;
        const long long sum = pp_block_sum(above ? v * hv : 0), cnt = pp_block_sum(above ? hv : 0);
        scale = sw_pm_scale_above(m1, (double)sum, (int64_t)cnt);
    }
    if (v == 0)
        st->scale = scale;
}

/* A 32-bit word of a u16 / u32 frame into the sum s and count n of its pixels above the level
 * ti (pass 1: all of them). */
template <int PASS>
__device__ __forceinline__ void pp_add_px(uint32_t v, unsigned long long ti, unsigned long long &s,
                                          unsigned long long &n)
{
    if (PASS == 1 || v > ti) {
        s += v;
        n++;
    }
}
template <int PASS>
__device__ __forceinline__ void pp_add_word(uint32_t w, uint16_t, unsigned long long ti,
                                            unsigned long long &s, unsigned long long &n)
{
    pp_add_px<PASS>(w & 0xffffu, ti, s, n);
    pp_add_px<PASS>(w >> 16, ti, s, n);
}
template <int PASS>
__device__ __forceinline__ void pp_add_word(uint32_t w, uint32_t, unsigned long long ti,
                                            unsigned long long &s, unsigned long long &n)
{
    pp_add_px<PASS>(w, ti, s, n);
}

/*
 * Step 0, u16 and u32 frames whose pixel sum stays below 2^52 (pp_int_sum_exact), pass PASS of
 * pupil_model.h's two: as for 8-bit frames, the model's totals are then the exact integer sums.
 * Pass 1 sums all pixels, pass 2 those above m1 (v > m1 is v > floor(m1) for integers) and
 * counts them; 16-byte loads over the frame as one array, 64-bit atomics per block. The last
 * block writes m1 (pass 1, sw_pm_frame_mean) or the scale (pass 2, sw_pm_scale_above; 0 for an
 * empty frame) and resets the sums. Pass 1 also clears the frame's accumulators.
 */
template <typename T, int PASS>
__global__ void __launch_bounds__(PP_PIX)
    pp_sum_int_kernel(const T *frame, int64_t npix, pp_state *st, uint32_t *work, int64_t nwork,
                      int32_t split_fixed)
{
    if (PASS == 1)
        pp_frame_start(st, work, nwork, split_fixed);
    const double m1 = PASS == 1 ? 0.0 : st->mean1;
    const unsigned long long ti = PASS == 1 || !(m1 > 0.0) ? 0ull : (unsigned long long)floor(m1);
    const int64_t stride = (int64_t)gridDim.x * PP_PIX;
    const int64_t t0 = (int64_t)blockIdx.x * PP_PIX + threadIdx.x;
    const int64_t per = 16 / (int64_t)sizeof(T), nvec = npix / per;
    unsigned long long s = 0, n = 0;
    for (int64_t i = t0; i < nvec; i += stride) {
        const uint4 q = ((const uint4 *)frame)[i]; /* cudaMalloc'ed: aligned */
        pp_add_word<PASS>(q.x, T(), ti, s, n);
        pp_add_word<PASS>(q.y, T(), ti, s, n);
        pp_add_word<PASS>(q.z, T(), ti, s, n);
        pp_add_word<PASS>(q.w, T(), ti, s, n);
    }
    for (int64_t i = nvec * per + t0; i < npix; i += stride)
        pp_add_px<PASS>((uint32_t)frame[i], ti, s, n);
    const long long bs = pp_block_sum((long long)s), bn = pp_block_sum((long long)n);
    if (threadIdx.x == 0) {
        atomicAdd(&st->total, (unsigned long long)bs);
        if (PASS == 2)
            atomicAdd(&st->count, (unsigned long long)bn);
    }
    if (pp_last_block(&st->ticket[PP_TICKET_SCALE]) && threadIdx.x == 0) {
        const unsigned long long total = atomicExch(&st->total, 0ull);
        if (PASS == 1) {
            st->mean1 = sw_pm_frame_mean((double)total, npix);
        } else {
            const unsigned long long count = atomicExch(&st->count, 0ull);
            st->scale = m1 > 0.0 ? sw_pm_scale_above(m1, (double)total, (int64_t)count) : 0.0;
        }
    }
}

/*
 * Step 0, other frames (f32, and u32 frames too large for the exact integer sums): pass PASS of
 * pupil_model.h's two in the model's order exactly, over the pixels v > thr (sw_pm_above; pass
 * 1: thr = -infinity, every finite pixel; pass 2: thr = m1). Row sums: one warp per row (PP_ROWS
 * rows per block of 1024), lane j adds x = j, j + 32, ... in order, then the 5 butterfly rounds
 * s_j + s_(j xor o); the counts (pass 2) are integers, added per block. The last block (1024
 * threads, the model's slots) adds the rows i, i + 1024, ... per slot in order, then the tree
 * slot_i + slot_(i + o), and writes m1 (pass 1) or the scale (pass 2, 0 for an empty frame).
 */
template <typename T, int PASS>
__global__ void __launch_bounds__(SW_PM_MEAN_SLOTS)
    pp_row_sums_kernel(const T *frame, int32_t width, int32_t height, int64_t npix,
                       double *row_sums, pp_state *st, uint32_t *work, int64_t nwork,
                       int32_t split_fixed)
{
    __shared__ double s[SW_PM_MEAN_SLOTS];
    __shared__ unsigned long long nrow[PP_ROWS];
    if (PASS == 1)
        pp_frame_start(st, work, nwork, split_fixed);
    const double thr = PASS == 1 ? -INFINITY : st->mean1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t y = (int32_t)blockIdx.x * PP_ROWS + (int32_t)warp;
    unsigned long long cnt = 0;
    if (y < height) { /* the whole warp */
        const T *row = frame + (size_t)y * (size_t)width;
        double a = 0.0;
        for (int32_t x = lane; x < width; x += SW_PM_MEAN_LANES) {
            const double v = (double)row[x];
            a += sw_pm_above(v, thr);
            cnt += (unsigned long long)sw_pm_counts_above(v, thr);
        }
        for (int o = SW_PM_MEAN_LANES / 2; o >= 1; o /= 2)
            a = a + __shfl_xor_sync(PP_FULL, a, o);
        if (lane == 0)
            row_sums[y] = a;
    }
    if (PASS == 2) {
        for (int o = 16; o >= 1; o /= 2)
            cnt += __shfl_xor_sync(PP_FULL, cnt, o);
        if (lane == 0)
            nrow[warp] = cnt;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long b = 0;
            for (int w = 0; w < PP_ROWS; w++)
                b += nrow[w];
            atomicAdd(&st->count, b);
        }
    }
    if (!pp_last_block(&st->ticket[PP_TICKET_SCALE]))
        return;
    const int i = threadIdx.x;
    double a = 0.0;
    for (int32_t yy = i; yy < height; yy += SW_PM_MEAN_SLOTS)
        a += __ldcg(&row_sums[yy]);
    s[i] = a;
    __syncthreads();
    for (int o = SW_PM_MEAN_SLOTS / 2; o >= 1; o /= 2) {
        if (i < o)
            s[i] = s[i] + s[i + o];
        __syncthreads();
    }
    if (i == 0) {
        if (PASS == 1) {
            st->mean1 = sw_pm_frame_mean(s[0], npix);
        } else {
            const unsigned long long count = atomicExch(&st->count, 0ull);
            const double m1 = st->mean1;
            st->scale = m1 > 0.0 ? sw_pm_scale_above(m1, s[0], (int64_t)count) : 0.0;
        }
    }
}

/* Step 0 with a given scale (input_scale > 0): only the clearing and the scale. */
__global__ void __launch_bounds__(PP_PIX)
    pp_fixed_scale_kernel(double scale, pp_state *st, uint32_t *work, int64_t nwork,
                          int32_t split_fixed)
{
    pp_frame_start(st, work, nwork, split_fixed);
    if (blockIdx.x == 0 && threadIdx.x == 0)
        st->scale = scale;
}

/* Step 0's conversion of one pixel: sw_pm_to_u8; for 8-bit frames through the block's table of
 * the 256 values (the same function, computed once per block). */
template <typename T> __device__ __forceinline__ uint8_t pp_u8(T v, double scale, const uint8_t *)
{
    return sw_pm_to_u8((double)v, scale);
}
__device__ __forceinline__ uint8_t pp_u8(uint8_t v, double, const uint8_t *lut)
{
    return lut[v];
}

/* ================================================================== steps 1-2: Gaussian, split */

/* Step 1, rows: 4 outputs at p[0..3] of a shared-memory row (p 4-byte aligned),
 * out_q = sw_pm_gauss_finish(sum_k w_k p[q + k]), packed into a word (byte q = output q).
 * R: the radius at compile time (even: the words read stay in the row; the seed's optimisation
 * 3), or -1: rr at run time. */
template <int R>
__device__ __forceinline__ uint32_t pp_gauss_row4(const uint8_t *p, int rr, const pp_taps &t)
{
    uint32_t acc[4] = {0u, 0u, 0u, 0u};
    if (R >= 0) {
        constexpr int RR = R > 0 ? R : 0;
        constexpr int NW = (4 + 2 * RR + 3) / 4;
        uint32_t w[NW];
#pragma unroll
        for (int q = 0; q < NW; q++)
            w[q] = ((const uint32_t *)p)[q];
#pragma unroll
        for (int k = 0; k <= 2 * RR; k++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[q] += t.w[k] * ((w[(q + k) >> 2] >> (8 * ((q + k) & 3))) & 0xffu);
    } else {
        for (int k = 0; k <= 2 * rr; k++)
#pragma unroll
            for (int q = 0; q < 4; q++)
                acc[q] += t.w[k] * (uint32_t)p[q + k];
    }
    return (uint32_t)sw_pm_gauss_finish(acc[0]) | ((uint32_t)sw_pm_gauss_finish(acc[1]) << 8) |
           ((uint32_t)sw_pm_gauss_finish(acc[2]) << 16) |
           ((uint32_t)sw_pm_gauss_finish(acc[3]) << 24);
}

/* Step 1, columns: PP_COLR outputs down a shared-memory column p[0], p[PP_TW], ... (the taps of
 * output q are rows q .. q + 2r). */
template <int R>
__device__ __forceinline__ void pp_gauss_col(const uint8_t *p, int rr, const pp_taps &t,
                                             uint8_t *out)
{
    if (R >= 0) {
        constexpr int RR = R > 0 ? R : 0;
        uint32_t v[PP_COLR + 2 * RR];
#pragma unroll
        for (int q = 0; q < PP_COLR + 2 * RR; q++)
            v[q] = p[q * PP_TW];
#pragma unroll
        for (int q = 0; q < PP_COLR; q++) {
            uint32_t acc = 0;
#pragma unroll
            for (int k = 0; k <= 2 * RR; k++)
                acc += t.w[k] * v[q + k];
            out[q] = sw_pm_gauss_finish(acc);
        }
    } else {
#pragma unroll
        for (int q = 0; q < PP_COLR; q++) {
            uint32_t acc = 0;
            for (int k = 0; k <= 2 * rr; k++)
                acc += t.w[k] * (uint32_t)p[(q + k) * PP_TW];
            out[q] = sw_pm_gauss_finish(acc);
        }
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

/* Step 2 (split_x < 0, two pupils), by one block of PP_TILE threads: P(x) = sum of colsum over
 * x - h .. x + h (h = max(4, width / 64), clipped), split = the best x in [width / 4,
 * 3 width / 4). colsum was added by the other blocks of the grid: read from L2. */
__device__ void pp_split_block(const unsigned long long *colsum, int32_t width, pp_state *st)
{
    __shared__ unsigned long long sp[PP_TILE];
    __shared__ int32_t sd[PP_TILE], sx[PP_TILE];
    const int t = threadIdx.x;
    const int32_t h = width / 64 > 4 ? width / 64 : 4;
    const int32_t lo = width / 4, hi = (3 * width) / 4;
    unsigned long long bp = ULLONG_MAX;
    int32_t bd = INT_MAX, bx = INT_MAX;
    for (int32_t x = lo + t; x < hi; x += PP_TILE) {
        const int32_t a = max(x - h, 0), b = min(x + h, width - 1);
        unsigned long long p = 0;
        for (int32_t c = a; c <= b; c++)
            p += __ldcg(&colsum[c]);
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
    for (int o = PP_TILE / 2; o >= 1; o /= 2) {
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

/*
 * Steps 0-2 on a tile of PP_TW x PP_TH pixels (block PP_TILE, grid over the frame):
 *   A. the raw pixels of the tile and an r-pixel halo (positions clamped to the image: the edge
 *      pixel repeated, pupil.h step 1) converted to 8 bits with the frame's scale (step 0); the
 *      tile's own pixels are written to img8;
 *   B. the Gaussian's row pass over the tile's rows and the r halo rows above and below, into
 *      shared memory, rounded to 8 bits as the CPU's (a halo row beyond the image is the row
 *      pass of the clamped row: the CPU's column pass reads exactly that row);
 *   C. the column pass into smooth8, and with colsum (automatic split) the tile's column sums
 *      added to colsum (one 64-bit atomic per column: integers, any order); the grid's last
 *      block then finds the split (pp_split_block).
 * R: the radius at compile time (4) or -1 (rr, up to SW_PUPIL_MAX_RADIUS).
 */
template <typename T, int R>
__global__ void __launch_bounds__(PP_TILE)
    pp_smooth_kernel(const T *frame, int32_t width, int32_t height, int rr, pp_taps taps,
                     pp_state *st, uint8_t *img8, uint8_t *smooth8, unsigned long long *colsum)
{
    constexpr int H = R >= 0 ? R : SW_PUPIL_MAX_RADIUS;
    constexpr int IW = PP_TW + 2 * H;
    static_assert(R < 0 || R % 2 == 0, "the unrolled row pass reads whole words");
    static_assert(IW % 4 == 0 && PP_TILE == 256, "tile layout");
    __shared__ __align__(16) uint8_t s_in[PP_TH + 2 * H][IW];
    __shared__ __align__(16) uint8_t s_row[PP_TH + 2 * H][PP_TW];
    __shared__ uint8_t s_lut[256];
    __shared__ unsigned int s_col[PP_COLG][PP_TW];
    const int r = R >= 0 ? R : rr;
    const int tid = threadIdx.x;
    const int32_t xb = (int32_t)blockIdx.x * PP_TW, yb = (int32_t)blockIdx.y * PP_TH;
    const double scale = st->scale;
    if (sizeof(T) == 1) {
        s_lut[tid] = sw_pm_to_u8((double)tid, scale);
        __syncthreads();
    }

    /* A: the 8-bit tile with its halo */
    const int lw = PP_TW + 2 * r, lh = PP_TH + 2 * r;
    for (int e = tid; e < lw * lh; e += PP_TILE) {
        const int i = e / lw, j = e - i * lw;
        const int32_t y = yb - r + i, x = xb - r + j;
        const int32_t yc = min(max(y, 0), height - 1), xc = min(max(x, 0), width - 1);
        const uint8_t u = pp_u8(frame[(size_t)yc * (size_t)width + xc], scale, s_lut);
        s_in[i][j] = u;
        if (y == yc && x == xc && i >= r && i < r + PP_TH && j >= r && j < r + PP_TW)
            img8[(size_t)y * (size_t)width + x] = u;
    }
    __syncthreads();

    /* B: the row pass, 4 pixels per item */
    for (int e = tid; e < lh * PP_TWW; e += PP_TILE) {
        const int i = e / PP_TWW, j = 4 * (e - i * PP_TWW);
        *(uint32_t *)&s_row[i][j] = pp_gauss_row4<R>(&s_in[i][j], r, taps);
    }
    __syncthreads();

    /* C: the column pass, PP_COLR rows of one column per thread */
    const int j = tid % PP_TW, g = tid / PP_TW;
    const int32_t x = xb + j;
    uint8_t out[PP_COLR];
    pp_gauss_col<R>(&s_row[g * PP_COLR][j], r, taps, out);
    unsigned int part = 0;
#pragma unroll
    for (int q = 0; q < PP_COLR; q++) {
        const int32_t y = yb + g * PP_COLR + q;
        if (x < width && y < height) {
            smooth8[(size_t)y * (size_t)width + x] = out[q];
            part += out[q];
        }
    }
    if (colsum) { /* the same for the whole grid */
        s_col[g][j] = part;
        __syncthreads();
        if (g == 0 && x < width) {
            unsigned int c = 0;
            for (int q = 0; q < PP_COLG; q++)
                c += s_col[q][j];
            if (c)
                atomicAdd(&colsum[x], (unsigned long long)c);
        }
        if (pp_last_block(&st->ticket[PP_TICKET_SPLIT]))
            pp_split_block(colsum, width, st);
    }
}

/* ================================================================== step 3: the threshold */

/* Inclusive prefix sums of a[256] and b[256] in shared memory (Hillis-Steele), by the block
 * (PP_PIX = 256 threads, one element each). */
__device__ void pp_block_scan2(long long *a, long long *b)
{
    const int t = threadIdx.x;
    __syncthreads();
    for (int o = 1; o < 256; o *= 2) {
        const long long x = t >= o ? a[t - o] : 0, y = t >= o ? b[t - o] : 0;
        __syncthreads();
        a[t] += x;
        b[t] += y;
        __syncthreads();
    }
}

/* The best (c, i) over the block (PP_PIX threads): the largest c, the smallest i on ties (the
 * first maximum of a serial scan with "strictly larger replaces"); to every thread. */
__device__ void pp_block_argmax(double *c, int *i)
{
    __shared__ double bc[PP_PIX];
    __shared__ int bi[PP_PIX];
    const int t = threadIdx.x;
    __syncthreads(); /* bc, bi are free */
    bc[t] = *c;
    bi[t] = *i;
    __syncthreads();
    for (int o = PP_PIX / 2; o >= 1; o /= 2) {
        if (t < o && (bc[t + o] > bc[t] || (bc[t + o] == bc[t] && bi[t + o] < bi[t]))) {
            bc[t] = bc[t + o];
            bi[t] = bi[t + o];
        }
        __syncthreads();
    }
    *c = bc[0];
    *i = bi[0];
}

/*
 * Step 3a, sw_pm_clip_hist in parallel on a region's histogram h[256] (shared memory, changed in
 * place) by the block, one bin per thread: N, ST; the pixels above the mean (t N > ST: exact);
 * P = the smallest such t whose inclusive count of pixels above the mean reaches half of them
 * (the set t N > ST is t >= some t0, so the count is a prefix sum of the masked histogram);
 * c = floor(3 P / 2); when c < 255 the bins above c are added into bin c.
 */
__device__ void pp_clip_block(long long *h)
{
    __shared__ long long acc[256], dummy[256];
    const int t = threadIdx.x;
    const long long hv = h[t];
    const long long N = pp_block_sum(hv), ST = pp_block_sum(hv * t);
    const bool ab = (long long)t * N > ST;
    const long long above = pp_block_sum(ab ? hv : 0);
    if (above == 0)
        return; /* the whole block: one value, or none */
    acc[t] = ab ? hv : 0;
    dummy[t] = 0;
    pp_block_scan2(acc, dummy);
    const int P = pp_block_min(ab && 2 * acc[t] >= above ? t : 255);
    const int c = (3 * P) / 2;
    if (c >= 255)
        return;
    const long long tail = pp_block_sum(t > c ? hv : 0);
    if (t > c)
        h[t] = 0;
    if (t == c)
        h[t] = hv + tail;
    __syncthreads();
}

/*
 * Step 3c, sw_pm_edge_threshold in parallel from the prefix counts cn and sums cs (inclusive) of
 * the clipped histogram (any memory), by the block: n0 = cn[t_o], s0 = cs[t_o], n1 = N - n0;
 * p = the smallest t > t_o with 2 (cn[t] - n0) >= n1 (255 when none); b = s0 / n0 and
 * floor(b + edge_level (p - b)) clamped to 0..254, as the model. t_o < 0 or edge_level 0: t_o.
 */
__device__ int32_t pp_edge_block(const long long *cn, const long long *cs, int32_t t_o,
                                 double edge_level)
{
    if (t_o < 0 || !(edge_level > 0.0))
        return t_o; /* the same for the whole block */
    const int t = threadIdx.x;
    const long long N = cn[255], n0 = cn[t_o], s0 = cs[t_o], n1 = N - n0;
    const int p = pp_block_min(t > t_o && 2 * (cn[t] - n0) >= n1 ? t : 255);
    const double b = (double)s0 / (double)n0;
    const double th = floor(b + edge_level * ((double)p - b));
    return th < 0.0 ? 0 : (th > 254.0 ? 254 : (int32_t)th);
}

/* Step 3d's retries' thresholds of region r (sw_pm_auto_retry_thresholds) by the block from the
 * clipped histogram's prefix counts and sums and its split t_o, into st->retry_thr[r]. */
__device__ void pp_retry_block(const long long *cn, const long long *cs, int32_t t_o, pp_state *st,
                               int r)
{
    for (int k = 0; k < SW_PM_AUTO_RETRIES; k++) {
        const int32_t th = pp_edge_block(cn, cs, t_o, sw_pm_auto_retry_level(k));
        if (threadIdx.x == 0)
            st->retry_thr[r][k] = th;
    }
}

/*
 * Step 3 of region r by the block (PP_PIX = 256 threads) from its histogram hist_r (added by the
 * other blocks of the grid: read from L2): the clip (pp_clip_block), the prefix sums of the
 * clipped histogram, the two-class Otsu split (sw_pm_otsu: the criterion per t in 0..254, the
 * first maximum; -1 when no t splits the pixels). With otsu_classes 2 the edge level then gives
 * the threshold (with auto_edge also the retries' thresholds); with 3 the clipped histogram goes
 * to pp_otsu3_kernel, which finishes.
 */
__device__ void pp_threshold_block(const unsigned int *hist_r, int otsu_classes, double edge_level,
                                   int auto_edge, pp_state *st, int r)
{
    __shared__ long long h[256], cn[256], cs[256];
    const int t = threadIdx.x;
    __syncthreads(); /* the arrays are free (a previous region is done) */
    h[t] = (long long)__ldcg(&hist_r[t]);
    __syncthreads();
    pp_clip_block(h);
    cn[t] = h[t];
    cs[t] = h[t] * t;
    pp_block_scan2(cn, cs);
    double c = t < 255 ? sw_pm_otsu_criterion(cn[255], cs[255], cn[t], cs[t]) : -1.0;
    int i = t;
    pp_block_argmax(&c, &i);
    const int32_t t2c = c >= 0.0 ? i : -1;
    if (otsu_classes == 3) {
        st->o3h[r][t] = h[t];
        st->o3n[r][t] = cn[t];
        st->o3s[r][t] = cs[t];
        if (t == 0)
            st->t2c[r] = t2c;
    } else {
        const int32_t th = pp_edge_block(cn, cs, t2c, edge_level);
        if (t == 0)
            st->thr[r] = th;
        if (auto_edge)
            pp_retry_block(cn, cs, t2c, st, r);
    }
}

/*
 * Step 3: the regions' 256-bin histograms of the smoothed image (hist cleared by step 0), the
 * frame read as one array of 16-byte chunks (grid-stride); a run of equal values of one region
 * within a chunk is counted with one shared-memory atomic (the smoothed image is flat over large
 * areas), then one global atomic per non-empty bin and block. The last block runs
 * pp_threshold_block for each region.
 */
__global__ void __launch_bounds__(PP_PIX)
    pp_hist_kernel(const uint8_t *smooth, int32_t width, int64_t npix, int n_pupils,
                   int otsu_classes, double edge_level, int auto_edge, pp_state *st,
                   unsigned int *hist)
{
    __shared__ unsigned int sh[512];
    for (int i = threadIdx.x; i < 512; i += PP_PIX)
        sh[i] = 0;
    __syncthreads();
    const int32_t split = st->split;
    const int64_t stride = (int64_t)gridDim.x * PP_PIX, nvec = npix / 16;
    const int64_t t0 = (int64_t)blockIdx.x * PP_PIX + threadIdx.x;
    for (int64_t c = t0; c < nvec; c += stride) {
        const uint4 q = ((const uint4 *)smooth)[c]; /* cudaMalloc'ed: aligned */
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
        int32_t x = (int32_t)((16 * c) % width);
        int key = -1;
        unsigned int cnt = 0;
#pragma unroll
        for (int b = 0; b < 16; b++) {
            const int k = (x >= split ? 256 : 0) + (int)((w[b >> 2] >> (8 * (b & 3))) & 0xffu);
            if (k == key) {
                cnt++;
            } else {
                if (cnt)
                    atomicAdd(&sh[key], cnt);
                key = k;
                cnt = 1;
            }
            if (++x == width)
                x = 0;
        }
        atomicAdd(&sh[key], cnt);
    }
    for (int64_t i = nvec * 16 + t0; i < npix; i += stride)
        atomicAdd(&sh[((int32_t)(i % width) >= split ? 256 : 0) + smooth[i]], 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < 512; i += PP_PIX)
        if (sh[i])
            atomicAdd(&hist[i], sh[i]);
    if (pp_last_block(&st->ticket[PP_TICKET_OTSU]))
        for (int r = 0; r < n_pupils; r++)
            pp_threshold_block(hist + 256 * r, otsu_classes, edge_level, auto_edge, st, r);
}

/*
 * Step 3b, the three-class split (sw_pm_otsu3) in parallel: block (t1, r) for t1 = 0..253 of
 * region r, thread t for t2 = t1 + 1 + t < 255; sw_pm_otsu3_criterion from the clipped
 * histogram's prefix sums (pairs with an empty bin at t1 or t2 are skipped, as the model allows);
 * the block's best t2 (the smallest on ties) per t1. The grid's last block takes per region the
 * best t1 (the smallest on ties: the model's lexicographic order), falls back to the two-class
 * split when no pair splits the pixels into three classes, and applies the edge level (with
 * auto_edge also the retries' levels).
 */
__global__ void __launch_bounds__(PP_PIX)
    pp_otsu3_kernel(pp_state *st, int n_pupils, double edge_level, int auto_edge)
{
    const int r = blockIdx.y, t1 = blockIdx.x, t = threadIdx.x, t2 = t1 + 1 + t;
    const long long *h = st->o3h[r], *cn = st->o3n[r], *cs = st->o3s[r];
    double c = -1.0;
    if (h[t1] != 0 && t2 < 255 && h[t2] != 0)
        c = sw_pm_otsu3_criterion(cn[255], cs[255], cn[t1], cs[t1], cn[t2], cs[t2]);
    int i = t2;
    pp_block_argmax(&c, &i);
    if (t == 0) {
        st->o3c[r][t1] = c;
        st->o3t[r][t1] = i;
    }
    if (!pp_last_block(&st->ticket[PP_TICKET_OTSU3]))
        return;
    for (int q = 0; q < n_pupils; q++) {
        double bc = t < 254 ? __ldcg(&st->o3c[q][t]) : -1.0;
        int bi = t;
        pp_block_argmax(&bc, &bi);
        const int32_t t_o = bc >= 0.0 ? bi : st->t2c[q];
        const int32_t th = pp_edge_block(st->o3n[q], st->o3s[q], t_o, edge_level);
        if (t == 0)
            st->thr[q] = th;
        if (auto_edge)
            pp_retry_block(st->o3n[q], st->o3s[q], t_o, st, q);
    }
}

/* ================================================================== steps 4-5: close, border */

/*
 * The morphology works on words of 4 pixels (byte b = pixel x + b), each byte a 2-bit code of the
 * pixel for both regions: bit 0 its value as seen by the pixels of region 0, bit 1 as seen by
 * region 1. A pixel of the other region or beyond the image carries the neutral value there (0
 * for the dilation's maximum, 1 for the erosion's minimum), so a plain OR / AND over the window
 * is the window clipped to the region and the image (pupil.h step 4), and a pixel's result is
 * the bit of its own region (pp_pick).
 */

/* Region selector of 4 pixels x .. x + 3 of an image row: byte 0x01 in region 0, 0x02 in
 * region 1, 0 beyond the image. */
__device__ __forceinline__ uint32_t pp_sel4(int32_t x, int32_t width, int32_t split)
{
    if (x >= 0 && x + 4 <= width && (x + 4 <= split || x >= split))
        return x < split ? 0x01010101u : 0x02020202u;
    uint32_t s = 0;
#pragma unroll
    for (int b = 0; b < 4; b++) {
        const int32_t xx = x + b;
        if (xx >= 0 && xx < width)
            s |= (xx < split ? 1u : 2u) << (8 * b);
    }
    return s;
}

/* Bytes 0 / 1: the bit of each pixel's own region (sel from pp_sel4; 0 where sel is 0). */
__device__ __forceinline__ uint32_t pp_pick(uint32_t code, uint32_t sel)
{
    const uint32_t m = code & sel;
    return (m | (m >> 1)) & 0x01010101u;
}

/* 4 bytes of row y of a tight u8 image at columns x .. x + 3; bytes beyond the image are 0. */
__device__ __forceinline__ uint32_t pp_load4(const uint8_t *img, int32_t width, int32_t height,
                                             int32_t x, int32_t y)
{
    if (y < 0 || y >= height)
        return 0;
    const uint8_t *row = img + (size_t)y * (size_t)width;
    if (x >= 0 && x + 4 <= width && ((uintptr_t)(row + x) & 3) == 0)
        return *(const uint32_t *)(row + x);
    uint32_t v = 0;
#pragma unroll
    for (int b = 0; b < 4; b++)
        if (x + b >= 0 && x + b < width)
            v |= (uint32_t)row[x + b] << (8 * b);
    return v;
}

/* Stores the bytes of v at row y, columns x .. x + 3 of a tight u8 image, those below width. */
__device__ __forceinline__ void pp_store4(uint8_t *img, int32_t width, int32_t x, int32_t y,
                                          uint32_t v)
{
    uint8_t *row = img + (size_t)y * (size_t)width;
    if (x + 4 <= width && ((uintptr_t)(row + x) & 3) == 0) {
        *(uint32_t *)(row + x) = v;
        return;
    }
#pragma unroll
    for (int b = 0; b < 4; b++)
        if (x + b < width)
            row[x + b] = (uint8_t)(v >> (8 * b));
}

/* The 4 bytes at byte offset 4 wj + k of a shared row of words (k may be negative). */
__device__ __forceinline__ uint32_t pp_window(const uint32_t *w, int wj, int k)
{
    const int wi = wj + (k >> 2), s = k & 3;
    return s ? __funnelshift_r(w[wi], w[wi + 1], 8 * s) : w[wi];
}

template <int OP> __device__ __forceinline__ uint32_t pp_op(uint32_t a, uint32_t b)
{
    return OP == PP_DILATE ? (a | b) : (a & b);
}

/* The row pass of the dilation / erosion for the word at word offset wj of a shared row: OR /
 * AND of the windows k = -r .. r (unrolled for a compile-time R >= 0). */
template <int R, int OP>
__device__ __forceinline__ uint32_t pp_morph_row4(const uint32_t *w, int wj, int rr)
{
    uint32_t acc = OP == PP_DILATE ? 0u : 0xffffffffu;
    if (R >= 0) {
#pragma unroll
        for (int k = -R; k <= R; k++)
            acc = pp_op<OP>(acc, pp_window(w, wj, k));
    } else {
        for (int k = -rr; k <= rr; k++)
            acc = pp_op<OP>(acc, pp_window(w, wj, k));
    }
    return acc;
}

/* The column pass: OR / AND of the words p[0], p[stride], ..., p[2 r stride]. */
template <int R, int OP>
__device__ __forceinline__ uint32_t pp_morph_col4(const uint32_t *p, int stride, int rr)
{
    uint32_t acc = OP == PP_DILATE ? 0u : 0xffffffffu;
    if (R >= 0) {
#pragma unroll
        for (int k = 0; k <= 2 * R; k++)
            acc = pp_op<OP>(acc, p[k * stride]);
    } else {
        for (int k = 0; k <= 2 * rr; k++)
            acc = pp_op<OP>(acc, p[k * stride]);
    }
    return acc;
}

/*
 * Steps 3-4, the dilation, on a tile of PP_TW x PP_TH pixels (block PP_TILE): the inside mask
 * v > t of each pixel's region (t its Otsu threshold; no threshold, -1: empty) of the tile and an
 * r halo, coded for both regions (0 neutral); the row pass (max over x - r .. x + r) over the
 * tile's rows and the halo rows, then the column pass (max over y - r .. y + r); the tile's
 * pixels (0 / 1) into dil. R: the radius at compile time or -1 (rr).
 * gated (step 3d's passes): nothing unless st->redo_mask; then the tiles of the first column
 * also clear their rows' border counts (rowcount, 2 x height), which the erosion adds up again.
 */
template <int R>
__global__ void __launch_bounds__(PP_TILE)
    pp_dilate_kernel(const uint8_t *smooth, uint8_t *dil, int32_t width, int32_t height, int rr,
                     const pp_state *st, int gated, unsigned int *rowcount)
{
    if (gated) {
        if (!st->redo_mask)
            return; /* the masks stand (the whole grid) */
        if (blockIdx.x == 0)
            for (int i = threadIdx.x; i < 2 * PP_TH; i += PP_TILE) {
                const int32_t y = (int32_t)blockIdx.y * PP_TH + (i % PP_TH);
                if (y < height)
                    rowcount[(i / PP_TH) * height + y] = 0;
            }
    }
    constexpr int H = R >= 0 ? R : SW_PUPIL_MAX_RADIUS;
    constexpr int HW = (H + 3) / 4; /* halo words on each side */
    __shared__ uint32_t s_in[PP_TH + 2 * H][PP_TWW + 2 * HW];
    __shared__ uint32_t s_row[PP_TH + 2 * H][PP_TWW];
    const int r = R >= 0 ? R : rr, hw = (r + 3) / 4;
    const int tid = threadIdx.x;
    const int32_t xb = (int32_t)blockIdx.x * PP_TW, yb = (int32_t)blockIdx.y * PP_TH;
    const int32_t split = st->split, t0 = st->thr[0], t1 = st->thr[1];

    /* word q of row i: pixels x = xb - 4 hw + 4 q .. + 3 of row y = yb - r + i */
    const int nw = PP_TWW + 2 * hw, nh = PP_TH + 2 * r;
    for (int e = tid; e < nw * nh; e += PP_TILE) {
        const int i = e / nw, q = e - i * nw;
        const int32_t y = yb - r + i, x = xb - 4 * hw + 4 * q;
        const uint32_t sel = y >= 0 && y < height ? pp_sel4(x, width, split) : 0u;
        const uint32_t v = pp_load4(smooth, width, height, x, y);
        uint32_t m = 0;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const uint32_t sb = (sel >> (8 * b)) & 0xffu;
            const int32_t t = sb == 1u ? t0 : t1;
            if (sb && t >= 0 && (int32_t)((v >> (8 * b)) & 0xffu) > t)
                m |= 1u << (8 * b);
        }
        s_in[i][q] = sel & (m * 0xffu);
    }
    __syncthreads();
    for (int e = tid; e < nh * PP_TWW; e += PP_TILE) {
        const int i = e / PP_TWW, j = e - i * PP_TWW;
        s_row[i][j] = pp_morph_row4<R, PP_DILATE>(s_in[i], hw + j, r);
    }
    __syncthreads();
    for (int e = tid; e < PP_TH * PP_TWW; e += PP_TILE) {
        const int i = e / PP_TWW, j = e - i * PP_TWW;
        const int32_t y = yb + i, x = xb + 4 * j;
        if (y < height && x < width) {
            const uint32_t acc = pp_morph_col4<R, PP_DILATE>(&s_row[i][j], PP_TWW, r);
            pp_store4(dil, width, x, y, pp_pick(acc, pp_sel4(x, width, split)));
        }
    }
}

/*
 * Steps 4-5, the erosion and the border test, on a tile of PP_TW x PP_TH pixels (block PP_TILE):
 *   A. the dilated mask of the tile and an r + 1 halo, coded for both regions (1 neutral);
 *   B. the row pass (min over x - r .. x + r) for the tile's columns and one more on each side,
 *      over the tile's rows and r + 1 halo rows;
 *   C. the column pass for the tile's rows and one more above and below: the closed mask of the
 *      tile and a 1-pixel ring; the tile's pixels (0 / 1) into closed8; the ring's and the tile's
 *      "outside" pixels coded per region (a pixel of region 0 beyond the image or the region is
 *      nothing to region 1's pixels, pupil.h step 5);
 *   D. the border pixels: inside with an outside 8-neighbour of the same region (in the image);
 *      per 32 pixels one bit word (bit b = pixel 32 k + b) into bits, and their number per row
 *      and region added to rowcount (cleared by step 0, or in step 3d's passes by the dilation).
 * gated (step 3d's passes): nothing unless st->redo_mask.
 */
template <int R>
__global__ void __launch_bounds__(PP_TILE)
    pp_erode_kernel(const uint8_t *dil, uint8_t *closed8, int32_t width, int32_t height, int rr,
                    const pp_state *st, uint32_t *bits, unsigned int *rowcount, int gated)
{
    if (gated && !st->redo_mask)
        return; /* the masks stand (the whole grid) */
    constexpr int RM = R >= 0 ? R : SW_PUPIL_MAX_RADIUS;
    constexpr int H = RM + 1;            /* halo rows on each side */
    constexpr int HW = 1 + (RM + 3) / 4; /* halo words on each side */
    constexpr int OW = PP_TWW + 2;       /* output words: the tile's and one on each side */
    __shared__ uint32_t s_in[PP_TH + 2 * H][PP_TWW + 2 * HW];
    __shared__ uint32_t s_row[PP_TH + 2 * H][OW];
    __shared__ uint32_t s_out[PP_TH + 2][OW]; /* outside codes of the tile and the ring */
    __shared__ uint32_t s_e[PP_TH][PP_TWW];   /* the closed mask of the tile */
    const int r = R >= 0 ? R : rr, hw = 1 + (r + 3) / 4;
    const int tid = threadIdx.x;
    const int32_t xb = (int32_t)blockIdx.x * PP_TW, yb = (int32_t)blockIdx.y * PP_TH;
    const int32_t split = st->split;

    /* A: word q of row i: pixels x = xb - 4 hw + 4 q .. + 3 of row y = yb - r - 1 + i */
    const int nw = PP_TWW + 2 * hw, nh = PP_TH + 2 * (r + 1);
    for (int e = tid; e < nw * nh; e += PP_TILE) {
        const int i = e / nw, q = e - i * nw;
        const int32_t y = yb - r - 1 + i, x = xb - 4 * hw + 4 * q;
        const uint32_t sel = y >= 0 && y < height ? pp_sel4(x, width, split) : 0u;
        const uint32_t d = pp_load4(dil, width, height, x, y);
        /* region 0: d | 2, region 1: (d << 1) | 1, beyond the image: 3 */
        s_in[i][q] = (sel & (d * 0xffu)) | (sel ^ 0x03030303u);
    }
    __syncthreads();

    /* B: output word jj (0 .. OW - 1) is the tile's word jj - 1 */
    for (int e = tid; e < nh * OW; e += PP_TILE) {
        const int i = e / OW, jj = e - i * OW;
        s_row[i][jj] = pp_morph_row4<R, PP_ERODE>(s_in[i], hw - 1 + jj, r);
    }
    __syncthreads();

    /* C: output row ii (0 .. PP_TH + 1) is the tile's row ii - 1; its window is s_row rows
     * ii .. ii + 2r */
    for (int e = tid; e < (PP_TH + 2) * OW; e += PP_TILE) {
        const int ii = e / OW, jj = e - ii * OW;
        const int32_t y = yb - 1 + ii, x = xb + 4 * (jj - 1);
        const uint32_t sel = y >= 0 && y < height ? pp_sel4(x, width, split) : 0u;
        const uint32_t ev = pp_pick(pp_morph_col4<R, PP_ERODE>(&s_row[ii][jj], OW, r), sel);
        s_out[ii][jj] = sel & ~(ev * 0x03u);
        if (ii >= 1 && ii <= PP_TH && jj >= 1 && jj <= PP_TWW)
            s_e[ii - 1][jj - 1] = ev;
    }
    __syncthreads();

    /* D: two items per thread, the same for every thread (the shuffles below need the whole
     * warp): lanes 0-15 and 16-31 each hold the 16 words of one tile row */
    const int32_t nwr = (width + 31) / 32;
    for (int e = tid; e < PP_TH * PP_TWW; e += PP_TILE) {
        const int i = e / PP_TWW, j = e - i * PP_TWW;
        const int32_t y = yb + i, x = xb + 4 * j;
        uint32_t nb = 0; /* the outside codes of the 8 neighbours (and the pixel itself) */
#pragma unroll
        for (int dy = 0; dy < 3; dy++) {
            const uint32_t *o = s_out[i + dy];
            nb |= __funnelshift_r(o[j], o[j + 1], 24) | o[j + 1] |
                  __funnelshift_r(o[j + 1], o[j + 2], 8);
        }
        const uint32_t sel = y < height ? pp_sel4(x, width, split) : 0u;
        const uint32_t ev = s_e[i][j];
        const uint32_t border = ev & pp_pick(nb, sel); /* bytes 0 / 1 */
        if (y < height && x < width)
            pp_store4(closed8, width, x, y, ev);
        /* the row's counts per region over the 16 lanes of the row */
        unsigned int c0 = (unsigned int)__popc(border & sel & 0x01010101u);
        unsigned int c1 = (unsigned int)__popc(border & (sel >> 1) & 0x01010101u);
        for (int o = 8; o >= 1; o /= 2) {
            c0 += __shfl_xor_sync(PP_FULL, c0, o);
            c1 += __shfl_xor_sync(PP_FULL, c1, o);
        }
        /* the bit word of 8 lanes (32 pixels; xb is a multiple of 64) */
        uint32_t wbits = (((border * 0x01020408u) >> 24) & 0xfu) << (4 * (j & 7));
        for (int o = 4; o >= 1; o /= 2)
            wbits |= __shfl_xor_sync(PP_FULL, wbits, o);
        if (y < height) {
            if (j == 0 && c0)
                atomicAdd(&rowcount[y], c0);
            if (j == 0 && c1)
                atomicAdd(&rowcount[height + y], c1);
            if ((j & 7) == 0 && x < width)
                bits[(size_t)y * (size_t)nwr + (size_t)(x >> 5)] = wbits;
        }
    }
}

/*
 * Step 5: the border lists in raster order of each region. One warp per row (PP_BROWS rows per
 * block): the row's offset in each list is the sum of the counts of the rows above (the block
 * adds the rows above its first, then each warp the rows above it in the block); the warp reads
 * the row's bit words 32 at a time, counts each lane's pixels per region, scans the counts over
 * the lanes and writes the pixels at their places: (x, y) and the float coordinates the votes
 * use (sw_pm_uf, sw_pm_vf of the region). The warp of the last row writes the totals.
 * gated (step 3d's passes): nothing unless st->redo_mask.
 */
__global__ void __launch_bounds__(PP_BROWS * 32)
    pp_border_kernel(const uint32_t *bits, const unsigned int *rowcount, int32_t width,
                     int32_t height, int n_pupils, double inlier_px, int64_t npix, pp_state *st,
                     int2 *border, float2 *uv, int gated)
{
    if (gated && !st->redo_mask)
        return; /* the lists stand (the whole grid) */
    __shared__ long long s_pre[PP_BROWS][2];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t y0 = (int32_t)blockIdx.x * PP_BROWS;
    const unsigned int *rc0 = rowcount, *rc1 = rowcount + height;
    long long p0 = 0, p1 = 0;
    for (int32_t y = tid; y < y0; y += PP_BROWS * 32) {
        p0 += rc0[y];
        p1 += rc1[y];
    }
    for (int o = 16; o >= 1; o /= 2) {
        p0 += __shfl_xor_sync(PP_FULL, p0, o);
        p1 += __shfl_xor_sync(PP_FULL, p1, o);
    }
    if (lane == 0) {
        s_pre[warp][0] = p0;
        s_pre[warp][1] = p1;
    }
    __syncthreads();
    const int32_t y = y0 + warp;
    if (y >= height)
        return; /* the whole warp */
    long long o0 = 0, o1 = 0;
    for (int w = 0; w < PP_BROWS; w++) {
        o0 += s_pre[w][0];
        o1 += s_pre[w][1];
    }
    for (int w = 0; w < warp; w++) {
        o0 += rc0[y0 + w];
        o1 += rc1[y0 + w];
    }
    if (y == height - 1 && lane == 0) {
        st->nborder[0] = o0 + rc0[y];
        st->nborder[1] = n_pupils == 2 ? o1 + rc1[y] : 0;
    }
    const int32_t split = st->split;
    const sw_pm_region reg0 = sw_pm_region_make(0, split, height, inlier_px);
    const sw_pm_region reg1 = sw_pm_region_make(split, width, height, inlier_px);
    const float v0 = sw_pm_vf(&reg0, y), v1 = sw_pm_vf(&reg1, y);
    int2 *xy0 = border, *xy1 = border + pp_list_start(1, split, height);
    float2 *uv0 = uv, *uv1 = uv + pp_list_start(1, split, height);
    const int32_t nwr = (width + 31) / 32;
    for (int32_t base = 0; base < nwr; base += 32) {
        const int32_t wi = base + lane, lo = 32 * wi;
        const uint32_t word = wi < nwr ? bits[(size_t)y * (size_t)nwr + (size_t)wi] : 0u;
        const uint32_t m0 = split <= lo        ? 0u
                            : split >= lo + 32 ? PP_FULL
                                               : (1u << (split - lo)) - 1u;
        const uint32_t b0 = word & m0, b1 = word & ~m0;
        /* both counts in one int (at most 32 x 32 per chunk each) */
        const int c = __popc(b0) | (__popc(b1) << 16);
        int incl = c;
        for (int o = 1; o < 32; o *= 2) {
            const int t = __shfl_up_sync(PP_FULL, incl, o);
            if (lane >= o)
                incl += t;
        }
        const int ex = incl - c;
        long long k0 = o0 + (ex & 0xffff), k1 = o1 + (ex >> 16);
        for (uint32_t m = b0; m; m &= m - 1) {
            const int32_t x = lo + __ffs(m) - 1;
            xy0[k0] = make_int2(x, y);
            uv0[k0] = make_float2(sw_pm_uf(&reg0, x), v0);
            k0++;
        }
        for (uint32_t m = b1; m; m &= m - 1) {
            const int32_t x = lo + __ffs(m) - 1;
            xy1[k1] = make_int2(x, y);
            uv1[k1] = make_float2(sw_pm_uf(&reg1, x), v1);
            k1++;
        }
        const int tot = __shfl_sync(PP_FULL, incl, 31);
        o0 += tot & 0xffff;
        o1 += tot >> 16;
    }
}

/* ================================================================== step 6: RANSAC */

__device__ __forceinline__ sw_pm_region pp_region(const pp_fit_args &a, int r)
{
    int32_t x0, x1;
    pp_region_cols(a.st->split, a.width, r, &x0, &x1);
    return sw_pm_region_make(x0, x1, a.height, a.inlier_px);
}

/* Step 6, the candidates: a group of PP_CAND_LANES lanes per (candidate k, region blockIdx.y).
 * Every lane picks k's 5 points with the plan's random numbers (the seed's optimisation 2) and
 * builds the rows; lane m < 6 computes cofactor m (one 5 x 5 determinant each: six times less
 * serial double work per lane than one thread doing all six); the group shares them by shuffles
 * and scales and checks the conic exactly as sw_pm_candidate does on the host. Lane 0 stores the
 * float conic and whether it is usable (cand), and the double conic (cand_d, for the fit of the
 * winner). A region with fewer than 5 border points has no usable candidate. In step 3d's
 * passes (a.pass > 0) only the pupils being refitted; block (0, 0) marks the masks done. */
__global__ void __launch_bounds__(PP_CAND) pp_candidates_kernel(const pp_fit_args a)
{
    const int r = blockIdx.y;
    const int lane = (int)(threadIdx.x & 31u), m = lane % PP_CAND_LANES;
    const int32_t k =
        (int32_t)blockIdx.x * (PP_CAND / PP_CAND_LANES) + (int32_t)(threadIdx.x / PP_CAND_LANES);
    if (a.pass > 0) {
        if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
            a.st->redo_mask = 0; /* this pass's steps 4-5 are done: nothing reads it until the
                                    fit kernel or the next pass's pp_ring_kernel sets it */
        if (!a.st->refit[r])
            return; /* the whole block */
    }
    if (k >= a.candidates)
        return; /* the whole group */
    const unsigned group = ((1u << PP_CAND_LANES) - 1u) << (lane - m);
    const long long n = a.st->nborder[r];
    double c[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    float cf[6] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int usable = 0;
    if (n >= 5) { /* the same for the whole group */
        const sw_pm_region reg = pp_region(a, r);
        const int32_t *xy = (const int32_t *)(a.border + pp_list_start(r, a.st->split, a.height));
        double u[5], v[5], row[5][6];
        sw_pm_candidate_points(&reg, xy, (int64_t)n, a.randoms + (size_t)5 * (size_t)k, u, v);
        sw_pm_conic5_rows(u, v, row);
        const double mine = m < 6 ? sw_pm_conic5_cofactor(row, m) : 0.0;
        for (int q = 0; q < 6; q++)
            c[q] = __shfl_sync(group, mine, q, PP_CAND_LANES);
        usable = sw_pm_conic5_scale(c) && sw_pm_candidate_keep(&reg, c, a.min_r, a.max_r, cf);
    }
    if (m != 0)
        return;
    const size_t idx = (size_t)r * (size_t)a.candidates + (size_t)k;
    pp_cand o;
    for (int q = 0; q < 6; q++)
        o.c[q] = cf[q];
    o.usable = usable;
    o.pad = 0;
    a.cand[idx] = o;
    for (int q = 0; q < 6; q++)
        a.cand_d[idx * 6 + q] = c[q];
}

/* Step 6, the votes: one warp per candidate k of region blockIdx.y. The block stages the border
 * points (float coordinates) through shared memory, PP_VOTE_WARPS * 32 at a time, so that each
 * is read from global memory once per block rather than once per warp (the loop was bound by
 * the latency of those reads); the lanes test points lane, lane + 32, ... of each chunk
 * (sw_pm_vote), the warp counts its votes with __ballot_sync + __popc (the seed's optimisation
 * 3), and lane 0 offers sw_pm_pack_vote to the region's best (atomicMax: most votes, then the
 * lowest index). Unusable candidates do not vote. In step 3d's passes (a.pass > 0) only the
 * pupils being refitted. */
__global__ void __launch_bounds__(PP_VOTE_WARPS * 32) pp_vote_kernel(const pp_fit_args a)
{
    __shared__ float2 pts[PP_VOTE_WARPS * 32];
    const int lane = threadIdx.x & 31, r = blockIdx.y;
    const int32_t k = (int32_t)blockIdx.x * PP_VOTE_WARPS + (int32_t)(threadIdx.x >> 5);
    if (a.pass > 0 && !a.st->refit[r])
        return; /* the whole block */
    pp_cand cd;
    int active = 0;
    if (k < a.candidates) {
        cd = a.cand[(size_t)r * (size_t)a.candidates + (size_t)k];
        active = cd.usable; /* the same for the whole warp */
    }
    const long long n = a.st->nborder[r];
    const float tol2 = pp_region(a, r).tol2;
    const float2 *uv = a.uv + pp_list_start(r, a.st->split, a.height);
    int votes = 0;
    for (long long base = 0; base < n; base += PP_VOTE_WARPS * 32) {
        const long long i = base + (long long)threadIdx.x;
        if (i < n)
            pts[threadIdx.x] = uv[i];
        __syncthreads();
        const int chunk = (int)min(n - base, (long long)(PP_VOTE_WARPS * 32));
        if (active) {
            for (int q = 0; q < chunk; q += 32) {
                int v = 0;
                if (q + lane < chunk) {
                    const float2 p = pts[q + lane];
                    v = sw_pm_vote(cd.c, p.x, p.y, tol2);
                }
                votes += __popc(__ballot_sync(PP_FULL, v));
            }
        }
        __syncthreads();
    }
    if (active && lane == 0)
        atomicMax(&a.st->best[r], sw_pm_pack_vote(votes, k));
}

/* ================================================================== steps 7-9: the fit */

/* One round of pp_warp_reduce_scatter: lanes with bit O keep values O .. 2 O - 1, the others
 * 0 .. O - 1; each sends the half its partner (lane xor O) keeps and adds the half it
 * receives. */
template <int O> __device__ __forceinline__ void pp_rs_round(double (&a)[32], int lane)
{
    const bool up = (lane & O) != 0;
#pragma unroll
    for (int i = 0; i < O; i++) {
        const double send = up ? a[i] : a[i + O];
        const double keep = up ? a[i + O] : a[i];
        a[i] = keep + __shfl_xor_sync(PP_FULL, send, O);
    }
}

/* Reduce-scatter of 32 values over a warp in a fixed order (rounds 16, 8, 4, 2, 1: 31 shuffles
 * of doubles instead of 5 per value): lane L ends with the warp's sum of a[L] (returned). */
__device__ __forceinline__ double pp_warp_reduce_scatter(double (&a)[32])
{
    const int lane = threadIdx.x & 31;
    pp_rs_round<16>(a, lane);
    pp_rs_round<8>(a, lane);
    pp_rs_round<4>(a, lane);
    pp_rs_round<2>(a, lane);
    pp_rs_round<1>(a, lane);
    return a[0];
}

/* A pupil not found before any ellipse (steps 0-6): the failure, no geometry. */
__device__ void pp_not_found(sw_pupil_ellipse *o, sw_pupil_failure f)
{
    o->valid = 0;
    o->failure = f;
    o->cx_px = o->cy_px = o->a_px = o->b_px = o->angle_deg = NAN;
    o->inliers = 0;
    o->near = 0;
    o->candidate = -1;
    o->votes = 0;
}

/* Steps 7-9 for region blockIdx.x (the order of pupil_model.h's "Steps 6-9 in one place"): the
 * early verdicts (EMPTY_FRAME, NO_CONTRAST, FEW_BORDER, NO_ELLIPSE), else the winner's double
 * conic (from the candidate kernel), refine_iterations rounds of the weighted least squares
 * (per-thread sums of sw_pm_refine_add; each warp reduces them in a fixed order, one warp adds
 * the warps' sums; thread 0 solves and keeps the conic only when it is an ellipse, else stops),
 * the inliers and near-band points of the final conic, the ellipse and the verdict
 * (sw_pm_ellipse_out, sw_pm_verdict).
 * Thread 0 writes the pupil into the mapped result (the seed's optimisation 4) and into the
 * device copy; block 0 also the frame's fields. Step 3d (pupil_model.h sw_pm_auto): the first
 * fit (a.pass 0) starts each pupil's course, and a pupil not found is marked for its first retry
 * (refit, a fresh RANSAC winner, its threshold, the masks to be made again: redo_mask). In the
 * later passes (a.pass > 0) only pupils with refit: a retry (au.retrying) that finds the pupil
 * (sw_pm_auto_retry_found) replaces the first fit's; one that does not is dropped and marks the
 * next retry, or, the last, restores the first fit's threshold; a refit that finds the pupil
 * replaces it, one that does not leaves the last pupil in place and restores its threshold.
 * Masks to be made again are made by the next steps 4-5 (redo_mask). */
__global__ void __launch_bounds__(PP_FIT) pp_fit_kernel(const pp_fit_args a)
{
    __shared__ double part[PP_FIT / 32][SW_PM_NACC];
    __shared__ double tot[SW_PM_NACC];
    __shared__ double c_sh[6];
    __shared__ int cnt_part[PP_FIT / 32][2];
    __shared__ int go;
    const int r = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    pp_state *st = a.st;
    if (a.pass > 0 && !st->refit[r])
        return; /* step 3d: this pupil is not refitted in this pass (the whole block) */
    const sw_pm_region reg = pp_region(a, r);
    const long long n = st->nborder[r];
    const int32_t thr = st->thr[r];
    const double scale = st->scale;
    const unsigned long long best = st->best[r];
    const int32_t *xy = (const int32_t *)(a.border + pp_list_start(r, st->split, a.height));

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
        const int32_t k = sw_pm_packed_index(best);
        if (tid < 6)
            c_sh[tid] = a.cand_d[((size_t)r * (size_t)a.candidates + (size_t)k) * 6 + tid];
        __syncthreads();
        /* Step 7: the refinement. */
        for (int it = 0; it < a.refine_iterations; it++) {
            double c[6], acc[32];
            for (int m = 0; m < 6; m++)
                c[m] = c_sh[m];
#pragma unroll
            for (int m = 0; m < 32; m++)
                acc[m] = 0.0;
            for (long long i = tid; i < n; i += PP_FIT)
                sw_pm_refine_add(c, sw_pm_u(&reg, xy[2 * i]), sw_pm_v(&reg, xy[2 * i + 1]),
                                 reg.tol2d, acc);
            const double s = pp_warp_reduce_scatter(acc); /* lane m: the warp's sum m */
            if (lane < SW_PM_NACC)
                part[warp][lane] = s;
            __syncthreads();
            if (warp == 0) {
                if (lane < SW_PM_NACC) {
                    double t = 0.0;
                    for (int w = 0; w < PP_FIT / 32; w++)
                        t += part[w][lane];
                    tot[lane] = t;
                }
                __syncwarp();
                if (lane == 0) {
                    double cn[6], uc, vc, ra, rb;
                    go = sw_pm_refine_solve(tot, cn) && sw_pm_conic_axes(cn, &uc, &vc, &ra, &rb);
                    if (go)
                        for (int m = 0; m < 6; m++)
                            c_sh[m] = cn[m];
                }
            }
            __syncthreads();
            if (!go)
                break; /* the whole block: go was read after the barrier */
        }
        /* Step 9's inliers and near-band points of the final conic (sw_pm_band). */
        double c[6];
        for (int m = 0; m < 6; m++)
            c[m] = c_sh[m];
        int cin = 0, cnear = 0;
        for (long long i = tid; i < n; i += PP_FIT) {
            const int band =
                sw_pm_band(c, sw_pm_u(&reg, xy[2 * i]), sw_pm_v(&reg, xy[2 * i + 1]), reg.tol2d);
            cin += band == 1;
            cnear += band == 2;
        }
        cin = __reduce_add_sync(PP_FULL, cin);
        cnear = __reduce_add_sync(PP_FULL, cnear);
        if (lane == 0) {
            cnt_part[warp][0] = cin;
            cnt_part[warp][1] = cnear;
        }
        __syncthreads();
        if (tid == 0) {
            int inl = 0, nr = 0;
            for (int w = 0; w < PP_FIT / 32; w++) {
                inl += cnt_part[w][0];
                nr += cnt_part[w][1];
            }
            o.inliers = inl;
            o.near = nr;
            o.candidate = k;
            o.votes = sw_pm_packed_votes(best);
            /* Steps 8-9. */
            const int ok = sw_pm_ellipse_out(&reg, c, &o);
            sw_pm_verdict(&o, ok, a.min_r, a.max_r, a.min_coverage, a.max_near_ratio);
        }
    } else if (tid == 0) {
        pp_not_found(&o, early);
        if (early == SW_PUPIL_EMPTY_FRAME)
            o.threshold = -1; /* as pupil_cpu.c: nothing to track, whatever the steps made */
    }
    __syncthreads(); /* every thread has read the state that thread 0 now changes */
    if (tid != 0)
        return;
    /* o is thread 0's */
    if (a.pass == 0) {
        sw_pm_auto au = sw_pm_auto_start(a.auto_edge && scale > 0.0, o.valid, thr,
                                         sw_pm_auto_retries_for(&o, st->retry_thr[r]));
        au.first_failure = (int32_t)o.failure;
        st->au[r] = au;
        a.recheck[r] = (int32_t)SW_PUPIL_OK;
        if (au.retrying) { /* the first retry, in the next pass */
            st->thr[r] = au.thr;
            st->best[r] = 0;
            st->refit[r] = 1;
            st->redo_mask = 1;
        }
    } else if (st->au[r].retrying) {
        sw_pm_auto au = st->au[r];
        st->refit[r] = 0;
        const int found = sw_pm_auto_found(&au, &o, a.max_near_ratio);
        sw_pm_auto_retried(&au, found);
        st->au[r] = au;
        if (!found) { /* the next retry, or the first fit's threshold back */
            st->thr[r] = au.thr;
            st->redo_mask = 1;
            if (au.retrying) {
                st->best[r] = 0;
                st->refit[r] = 1;
            }
            return; /* the first fit's pupil stays (result and device copy) */
        }
    } else {
        sw_pm_auto au = st->au[r];
        st->refit[r] = 0;
        const int restore = sw_pm_auto_refit(&au, sw_pm_auto_found(&au, &o, a.max_near_ratio));
        st->au[r] = au;
        a.recheck[r] = (int32_t)sw_pm_auto_recheck(&au);
        if (restore) {
            st->thr[r] = au.thr;
            st->redo_mask = 1;
            return; /* the last pupil found stays (result and device copy) */
        }
    }
    a.result->pupil[r] = o;
    a.pupils[r] = o;
    if (r == 0 && a.pass == 0) {
        a.result->n_pupils = a.n_pupils;
        a.result->scale = scale;
        a.result->split_x = st->split;
    }
}

/* ================================================================== step 3d: the edge level */

/*
 * Step 3d, the measure before refit k (pupil_model.h "Step 3d"): block (i, r) adds the bands'
 * histograms of pupil r's pixels i, i + gridDim.x PP_PIX, ... of sw_pm_ring_box (about the pupil
 * the last fit wrote into the device copy), in shared memory, into st->ring[r]; only pupils
 * whose course goes on (sw_pm_auto_more) and whose bands are usable. The last block, pupil by
 * pupil: the histograms into shared memory, thread 0 takes the decision (sw_pm_auto_measure,
 * from the same numbers as the CPU's), and for a new threshold marks the pupil for its refit
 * (refit, a fresh RANSAC winner) and the masks for steps 4-5; then it resets the histograms.
 * No pupil going on: every block returns at once (all read the same states: only the last
 * block writes them, after every other block has passed its ticket).
 */
__global__ void __launch_bounds__(PP_PIX)
    pp_ring_kernel(const uint8_t *smooth, int32_t width, int32_t height, int n_pupils,
                   int32_t gauss_radius, double gauss_sigma, const sw_pupil_ellipse *pupils,
                   pp_state *st)
{
    __shared__ unsigned int sh[3 * 256];
    __shared__ sw_pm_ring g;
    __shared__ int32_t box[4];
    __shared__ int any, mine, redo;
    const int r = blockIdx.y, tid = threadIdx.x;
    if (tid == 0) {
        any = 0;
        for (int q = 0; q < n_pupils; q++)
            any |= sw_pm_auto_more(&st->au[q]);
        mine = sw_pm_auto_more(&st->au[r]);
        if (mine) {
            g = sw_pm_ring_of(&pupils[r], gauss_radius, gauss_sigma);
            mine = g.usable;
        }
        if (mine) {
            int32_t x0, x1;
            pp_region_cols(st->split, width, r, &x0, &x1);
            sw_pm_ring_box(&pupils[r], &g, x0, x1, height, &box[0], &box[1], &box[2], &box[3]);
        }
        redo = 0;
    }
    for (int i = tid; i < 3 * 256; i += PP_PIX)
        sh[i] = 0;
    __syncthreads();
    if (!any)
        return; /* the whole grid: no pupil is refitted */
    if (mine) { /* the same for the whole block */
        const int64_t bw = (int64_t)box[1] - box[0] + 1, bh = (int64_t)box[3] - box[2] + 1;
        const int64_t nbox = bw > 0 && bh > 0 ? bw * bh : 0;
        const int64_t stride = (int64_t)gridDim.x * PP_PIX;
        for (int64_t i = (int64_t)blockIdx.x * PP_PIX + tid; i < nbox; i += stride) {
            const int32_t y = box[2] + (int32_t)(i / bw), x = box[0] + (int32_t)(i % bw);
            const int k = sw_pm_ring_band(&g, x, y);
            if (k >= 0)
                atomicAdd(&sh[k * 256 + smooth[(size_t)y * (size_t)width + (size_t)x]], 1u);
        }
        __syncthreads();
        for (int i = tid; i < 3 * 256; i += PP_PIX)
            if (sh[i])
                atomicAdd(&st->ring[r][i], sh[i]);
    }
    if (!pp_last_block(&st->ticket[PP_TICKET_RING]))
        return;
    for (int q = 0; q < n_pupils; q++) {
        __syncthreads(); /* sh is free (thread 0 is done with the last pupil's) */
        for (int i = tid; i < 3 * 256; i += PP_PIX)
            sh[i] = __ldcg(&st->ring[q][i]);
        __syncthreads();
        if (tid == 0 && sw_pm_auto_more(&st->au[q])) {
            const sw_pm_ring gq = sw_pm_ring_of(&pupils[q], gauss_radius, gauss_sigma);
            sw_pm_auto au = st->au[q];
            if (sw_pm_auto_measure(&au, gq.usable, sh, gq.extrap)) {
                st->thr[q] = au.thr;
                st->best[q] = 0;
                st->refit[q] = 1;
                redo = 1;
            }
            st->au[q] = au;
        }
        for (int i = tid; i < 3 * 256; i += PP_PIX)
            st->ring[q][i] = 0; /* the global copy: thread 0 reads the shared one */
    }
    __syncthreads();
    if (tid == 0 && redo)
        st->redo_mask = 1;
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

/* Integer pixel types (step 0's integer sums apply). */
template <typename T> struct pp_integer {
    static constexpr bool value = true;
};
template <> struct pp_integer<float> {
    static constexpr bool value = false;
};

/* The integer sums of step 0 are the model's totals when every partial sum stays exact in a
 * double: npix x the largest pixel value below 2^52. */
static int pp_int_sum_exact(sw_pixel_type t, int64_t npix)
{
    const double most = t == SW_PIX_U8 ? 255.0 : t == SW_PIX_U16 ? 65535.0 : 4294967295.0;
    return t != SW_PIX_F32 && (double)npix * most < 4503599627370496.0; /* 2^52 */
}

/* Steps 0-2 for the frame type T: the scale, then the smoothing (radius R at compile time, or
 * -1: the plan's) with the split. */
template <typename T, int R> static sw_status pp_enqueue_smooth(sw_pupil_plan *plan, cudaStream_t s)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    const T *frame = (const T *)g->frame;
    const int32_t split_fixed = p->n_pupils == 1 ? p->width : p->split_x; /* < 0: found */
    const unsigned rows = (unsigned)((p->height + PP_ROWS - 1) / PP_ROWS);
    const int exact = pp_int_sum_exact(p->type, plan->npix);
    if (p->input_scale > 0.0) {
        pp_fixed_scale_kernel<<<pp_grid(plan, g->nwork, PP_PIX, 1), PP_PIX, 0, s>>>(
            p->input_scale, g->st, g->work, g->nwork, split_fixed);
        SW_CU(cudaGetLastError());
    } else if (sizeof(T) == 1 && exact) {
        pp_scale_u8_kernel<<<pp_grid(plan, plan->npix / 16, PP_PIX, 2), PP_PIX, 0, s>>>(
            (const uint8_t *)frame, plan->npix, g->st, g->work, g->nwork, split_fixed);
        SW_CU(cudaGetLastError());
    } else if (exact) {
        if constexpr (pp_integer<T>::value && sizeof(T) > 1) {
            const unsigned nb = pp_grid(plan, plan->npix * (int64_t)sizeof(T) / 16, PP_PIX, 2);
            pp_sum_int_kernel<T, 1>
                <<<nb, PP_PIX, 0, s>>>(frame, plan->npix, g->st, g->work, g->nwork, split_fixed);
            SW_CU(cudaGetLastError());
            pp_sum_int_kernel<T, 2>
                <<<nb, PP_PIX, 0, s>>>(frame, plan->npix, g->st, g->work, g->nwork, split_fixed);
            SW_CU(cudaGetLastError());
        }
    } else {
        pp_row_sums_kernel<T, 1><<<rows, SW_PM_MEAN_SLOTS, 0, s>>>(frame, p->width, p->height,
                                                                   plan->npix, g->row_sums, g->st,
                                                                   g->work, g->nwork, split_fixed);
        SW_CU(cudaGetLastError());
        pp_row_sums_kernel<T, 2><<<rows, SW_PM_MEAN_SLOTS, 0, s>>>(frame, p->width, p->height,
                                                                   plan->npix, g->row_sums, g->st,
                                                                   g->work, g->nwork, split_fixed);
        SW_CU(cudaGetLastError());
    }

    pp_taps taps;
    memset(&taps, 0, sizeof taps);
    for (int k = 0; k < plan->n_taps; k++)
        taps.w[k] = plan->gauss_w[k];
    const dim3 grid((unsigned)((p->width + PP_TW - 1) / PP_TW),
                    (unsigned)((p->height + PP_TH - 1) / PP_TH));
    unsigned long long *colsum = p->n_pupils == 2 && p->split_x < 0 ? g->colsum : NULL;
    pp_smooth_kernel<T, R><<<grid, PP_TILE, 0, s>>>(frame, p->width, p->height, p->gauss_radius,
                                                    taps, g->st, g->img8, g->smooth8, colsum);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

template <typename T> static sw_status pp_enqueue_steps02(sw_pupil_plan *plan, cudaStream_t s)
{
    if (plan->p.gauss_radius == PP_DEFAULT_R)
        return pp_enqueue_smooth<T, PP_DEFAULT_R>(plan, s);
    return pp_enqueue_smooth<T, -1>(plan, s);
}

/* Steps 4-5's morphology with the radius R at compile time (or -1): smooth8 -(threshold,
 * dilation)-> dil8 -(erosion, border test)-> closed8, bits, rowcount. */
template <int R> static sw_status pp_enqueue_close(sw_pupil_plan *plan, cudaStream_t s, int gated)
{
    pp_gpu *g = gpu_of(plan);
    const int32_t w = plan->p.width, h = plan->p.height;
    const int rr = plan->p.close_radius;
    const dim3 grid((unsigned)((w + PP_TW - 1) / PP_TW), (unsigned)((h + PP_TH - 1) / PP_TH));
    pp_dilate_kernel<R>
        <<<grid, PP_TILE, 0, s>>>(g->smooth8, g->dil8, w, h, rr, g->st, gated, g->rowcount);
    SW_CU(cudaGetLastError());
    pp_erode_kernel<R><<<grid, PP_TILE, 0, s>>>(g->dil8, g->closed8, w, h, rr, g->st, g->bits,
                                                g->rowcount, gated);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Steps 4-5 (gated: step 3d's passes, only when the masks are to be made again). */
static sw_status pp_enqueue_masks(sw_pupil_plan *plan, cudaStream_t s, int gated)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    const int32_t w = p->width, h = p->height;
    if (p->close_radius == PP_DEFAULT_R)
        SW_TRY(pp_enqueue_close<PP_DEFAULT_R>(plan, s, gated));
    else
        SW_TRY(pp_enqueue_close<-1>(plan, s, gated));
    pp_border_kernel<<<(unsigned)((h + PP_BROWS - 1) / PP_BROWS), PP_BROWS * 32, 0, s>>>(
        g->bits, g->rowcount, w, h, p->n_pupils, p->inlier_px, plan->npix, g->st, g->border, g->uv,
        gated);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Steps 6-9 (a->pass: 0, or step 3d's refit). */
static sw_status pp_enqueue_fit(sw_pupil_plan *plan, cudaStream_t s, const pp_fit_args *a)
{
    const sw_pupil_params *p = &plan->p;
    const unsigned np = (unsigned)p->n_pupils;
    const int per_block = PP_CAND / PP_CAND_LANES;
    pp_candidates_kernel<<<dim3((unsigned)((p->candidates + per_block - 1) / per_block), np),
                           PP_CAND, 0, s>>>(*a);
    SW_CU(cudaGetLastError());
    pp_vote_kernel<<<dim3((unsigned)((p->candidates + PP_VOTE_WARPS - 1) / PP_VOTE_WARPS), np),
                     PP_VOTE_WARPS * 32, 0, s>>>(*a);
    SW_CU(cudaGetLastError());
    pp_fit_kernel<<<np, PP_FIT, 0, s>>>(*a);
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

    /* Steps 0-2 */
    switch (p->type) {
    case SW_PIX_U8: SW_TRY(pp_enqueue_steps02<uint8_t>(plan, s)); break;
    case SW_PIX_U16: SW_TRY(pp_enqueue_steps02<uint16_t>(plan, s)); break;
    case SW_PIX_U32: SW_TRY(pp_enqueue_steps02<uint32_t>(plan, s)); break;
    default: SW_TRY(pp_enqueue_steps02<float>(plan, s)); break;
    }

    /* Step 3 (with step 3d, the first fit's level SW_PM_EDGE_AUTO_INIT) */
    const int auto_edge = p->edge_level < 0.0;
    const double level = auto_edge ? SW_PM_EDGE_AUTO_INIT : p->edge_level;
    pp_hist_kernel<<<pp_grid(plan, plan->npix / 16, PP_PIX, 2), PP_PIX, 0, s>>>(
        g->smooth8, w, plan->npix, np, p->otsu_classes, level, auto_edge, g->st, g->hist);
    SW_CU(cudaGetLastError());
    if (p->otsu_classes == 3) {
        pp_otsu3_kernel<<<dim3(254, (unsigned)np), PP_PIX, 0, s>>>(g->st, np, level, auto_edge);
        SW_CU(cudaGetLastError());
    }

    /* Steps 4-5 */
    SW_TRY(pp_enqueue_masks(plan, s, 0));

    /* Steps 6-9 */
    pp_fit_args a;
    memset(&a, 0, sizeof a);
    a.width = w;
    a.height = h;
    a.n_pupils = np;
    a.candidates = p->candidates;
    a.refine_iterations = p->refine_iterations;
    a.pass = 0;
    a.auto_edge = auto_edge;
    a.inlier_px = p->inlier_px;
    a.min_r = p->min_radius_px;
    a.max_r = p->max_radius_px; /* resolved by pupil.c */
    a.min_coverage = p->min_coverage;
    a.max_near_ratio = p->max_near_ratio;
    a.npix = plan->npix;
    a.randoms = g->randoms;
    a.border = g->border;
    a.uv = g->uv;
    a.cand = g->cand;
    a.cand_d = g->cand_d;
    a.st = g->st;
    a.result = g->d_result;
    a.recheck = ((pp_out *)(void *)g->d_result)->recheck;
    a.pupils = g->pupils;
    SW_TRY(pp_enqueue_fit(plan, s, &a));

    /* Step 3d: SW_PM_AUTO_RETRIES passes of steps 4-5 and 6-9 for the first fits that failed,
     * SW_PM_RING_PASSES passes of the measure, steps 4-5 and steps 6-9 (kernels that return at
     * once where no pupil goes on), then steps 4-5 once more (after a refit that found nothing
     * in the last pass) */
    if (auto_edge) {
        for (int k = 1; k <= SW_PM_AUTO_RETRIES; k++) {
            SW_TRY(pp_enqueue_masks(plan, s, 1));
            a.pass = k;
            SW_TRY(pp_enqueue_fit(plan, s, &a));
        }
        const unsigned nb = pp_grid(plan, plan->npix / np, PP_PIX, 2);
        for (int pass = 1; pass <= SW_PM_RING_PASSES; pass++) {
            pp_ring_kernel<<<dim3(nb, (unsigned)np), PP_PIX, 0, s>>>(
                g->smooth8, w, h, np, p->gauss_radius, p->gauss_sigma, g->pupils, g->st);
            SW_CU(cudaGetLastError());
            SW_TRY(pp_enqueue_masks(plan, s, 1));
            a.pass = SW_PM_AUTO_RETRIES + pass;
            SW_TRY(pp_enqueue_fit(plan, s, &a));
        }
        SW_TRY(pp_enqueue_masks(plan, s, 1));
    }

    /* The lenslet mask */
    if (plan->has_geom) {
        const int64_t nl = (int64_t)plan->geom.nx * plan->geom.ny;
        pp_lenslet_kernel<<<(unsigned)((nl + PP_PIX - 1) / PP_PIX), PP_PIX, 0, s>>>(
            plan->geom, g->pupils, np, (int)p->lenslet_rule, g->lenslet);
        SW_CU(cudaGetLastError());
    }
    return SW_OK;
}

/* Captures pp_enqueue_frame into the plan's graph (core/cuda_util.h: the capture is always
 * ended, also when a call inside failed, so that the stream is usable again). */
static sw_status pp_capture(sw_pupil_plan *plan)
{
    pp_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    SW_TRY(sw_graph_begin(plan->ctx, SW_CUDA_STAGE, s));
    const sw_status st = pp_enqueue_frame(plan, s);
    return sw_graph_end(&g->graph, plan->ctx, SW_CUDA_STAGE, "frame", s, st, 0);
}

/* ================================================================== the API */

extern "C" void sw_pupil_gpu_free(sw_pupil_plan *plan)
{
    pp_gpu *g = gpu_of(plan);
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    cudaStreamSynchronize(stream_of(plan));
    sw_graph_destroy(&g->graph);
    cudaFree(g->frame);
    cudaFree(g->img8);
    cudaFree(g->dil8);
    cudaFree(g->smooth8);
    cudaFree(g->closed8);
    cudaFree(g->row_sums);
    cudaFree(g->work);
    cudaFree(g->bits);
    cudaFree(g->border);
    cudaFree(g->uv);
    cudaFree(g->cand);
    cudaFree(g->cand_d);
    cudaFree(g->randoms);
    cudaFree(g->st);
    cudaFree(g->pupils);
    cudaFree(g->lenslet);
    if (g->h_result)
        cudaFreeHost(g->h_result);
    free(g);
    plan->gpu = NULL;
}

static sw_status pp_upload_pupils(sw_pupil_plan *plan, const sw_pupil_result *r);

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
    const size_t np = (size_t)p->n_pupils, K = (size_t)p->candidates;
    SW_CU(cudaMalloc(&g->frame, npix * sw_pixel_size(p->type)));
    SW_CU(sw_cuda_alloc(&g->img8, npix));
    SW_CU(sw_cuda_alloc(&g->dil8, npix));
    SW_CU(sw_cuda_alloc(&g->smooth8, npix));
    SW_CU(sw_cuda_alloc(&g->closed8, npix));
    SW_CU(sw_cuda_alloc(&g->row_sums, h));
    /* the accumulators: colsum (width u64) first (aligned), the histograms, the row counts */
    g->nwork = (int64_t)(2 * w + 512 + 2 * h);
    SW_CU(sw_cuda_alloc(&g->work, (size_t)g->nwork));
    g->colsum = (unsigned long long *)g->work;
    g->hist = g->work + 2 * w;
    g->rowcount = g->hist + 512;
    SW_CU(sw_cuda_alloc(&g->bits, h * ((w + 31) / 32)));
    SW_CU(sw_cuda_alloc(&g->border, npix));
    SW_CU(sw_cuda_alloc(&g->uv, npix));
    SW_CU(sw_cuda_alloc(&g->cand, np * K));
    SW_CU(sw_cuda_alloc(&g->cand_d, np * K * 6));
    SW_CU(sw_cuda_alloc(&g->randoms, K * 5));
    SW_CU(sw_cuda_alloc(&g->st, (size_t)1));
    SW_CU(sw_cuda_alloc(&g->pupils, (size_t)2));
    SW_CU(cudaMemsetAsync(g->st, 0, sizeof(pp_state), s));
    SW_CU(cudaMemsetAsync(g->work, 0, (size_t)g->nwork * sizeof(uint32_t), s));
    SW_CU(cudaMemsetAsync(g->pupils, 0, 2 * sizeof(sw_pupil_ellipse), s));
    SW_CU(cudaMemsetAsync(g->border, 0, npix * sizeof(int2), s));
    if (plan->has_geom) {
        const size_t nl = (size_t)plan->geom.nx * (size_t)plan->geom.ny;
        SW_CU(sw_cuda_alloc(&g->lenslet, nl));
        SW_CU(cudaMemsetAsync(g->lenslet, 0, nl, s));
    }
    /* Step 6's random numbers, uploaded once (the seed's optimisation 2). */
    SW_CU(cudaMemcpyAsync(g->randoms, plan->randoms, K * 5 * sizeof(float), cudaMemcpyHostToDevice,
                          s));

    /* The result: mapped pinned host memory, written by the fit kernel (seed's optimisation 4). */
    SW_CU(cudaHostAlloc((void **)&g->h_result, sizeof(pp_out), cudaHostAllocMapped));
    memset(g->h_result, 0, sizeof(pp_out));
    SW_CU(cudaHostGetDevicePointer((void **)&g->d_result, g->h_result, 0));
    SW_CU(cudaStreamSynchronize(s)); /* plan->randoms is the host's, it may be read again */
    if (p->given) {
        /* given pupils (pupil.h): the device's pupils and mask are set once, and no frame's
         * tracker runs (sw_pupil_gpu_enqueue) */
        sw_pupil_result r;
        sw_pupil_given_result(plan, &r);
        sw_pupil_mask_host(plan, &r);
        SW_TRY(pp_upload_pupils(plan, &r));
    }
    return SW_OK;
}

/* The pupils of r and the host lenslet mask (plan->lenslet_mask) onto the device, and r into
 * the mapped result; the stream waits for the copies (the sources are the caller's). */
static sw_status pp_upload_pupils(sw_pupil_plan *plan, const sw_pupil_result *r)
{
    pp_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    SW_CU(cudaStreamSynchronize(s)); /* the mapped result is not being written */
    SW_CU(cudaMemcpyAsync(g->pupils, r->pupil, 2 * sizeof(sw_pupil_ellipse), cudaMemcpyHostToDevice,
                          s));
    if (plan->has_geom)
        SW_CU(cudaMemcpyAsync(g->lenslet, plan->lenslet_mask,
                              (size_t)plan->geom.nx * (size_t)plan->geom.ny, cudaMemcpyHostToDevice,
                              s));
    *g->h_result = *r;
    SW_CU(cudaStreamSynchronize(s));
    return SW_OK;
}

extern "C" void sw_pupil_gpu_preset(sw_pupil_plan *plan)
{
    plan->preset = 1;
}

extern "C" sw_status sw_pupil_gpu_fallback(sw_pupil_plan *plan, const sw_image *frame,
                                           sw_pupil_result *result, int *redo)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    if (redo)
        *redo = 0;
    const pp_out *out = (const pp_out *)(const void *)g->h_result;
    int missing = 0; /* a pupil not found, or one to measure again (sw_pm_auto_recheck) */
    for (int32_t i = 0; i < result->n_pupils; i++) {
        plan->recheck[i] = (sw_pupil_failure)out->recheck[i];
        missing |=
            !result->pupil[i].valid || (p->spots_fallback == 1 && plan->recheck[i] != SW_PUPIL_OK);
    }
    if (p->given || (!missing && p->spots_fallback != 2 && !sw_pupil_spots_small_pitch(plan)))
        return SW_OK;
    /* the spots path reads the frame on the host: the caller's, or a copy of the plan's tight
     * device copy of a device frame (one frame back over the bus, only when a pupil is missing
     * or retried) */
    sw_image host = *frame;
    if (frame->memory == SW_MEM_DEVICE && p->spots_fallback && plan->has_geom) {
        const size_t row = (size_t)p->width * sw_pixel_size(p->type);
        if (!plan->host_frame) {
            plan->host_frame = malloc(row * (size_t)p->height);
            if (!plan->host_frame)
                return sw_fail(plan->ctx, SW_ENOMEM, "pupil: out of memory for a host frame");
        }
        SW_CU(cudaSetDevice(plan->ctx->device));
        SW_CU(cudaMemcpyAsync(plan->host_frame, g->frame, row * (size_t)p->height,
                              cudaMemcpyDeviceToHost, stream_of(plan)));
        SW_CU(cudaStreamSynchronize(stream_of(plan)));
        host.data = plan->host_frame;
        host.stride = row;
        host.memory = SW_MEM_HOST;
        host.owned = 0;
    }
    SW_TRY(sw_pupil_spots_fallback(plan, &host, result));
    int found = 0; /* a pupil the spots path found (or replaced, spots_fallback 2) */
    for (int32_t i = 0; i < result->n_pupils; i++)
        found |= result->pupil[i].valid && result->pupil[i].method == SW_PUPIL_METHOD_SPOTS;
    if (found) {
        SW_TRY(pp_upload_pupils(plan, result));
        if (redo)
            *redo = 1;
    } else {
        *g->h_result = *result; /* the reasons (glow_failure, spots_failure) */
    }
    plan->last = *result;
    return SW_OK;
}

extern "C" sw_status sw_pupil_gpu_enqueue(sw_pupil_plan *plan, const sw_image *frame)
{
    pp_gpu *g = gpu_of(plan);
    const sw_pupil_params *p = &plan->p;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    const size_t row = (size_t)p->width * sw_pixel_size(p->type);
    SW_CU(cudaMemcpy2DAsync(
        g->frame, row, frame->data, frame->stride, row, (size_t)p->height,
        frame->memory == SW_MEM_DEVICE ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice, s));
    if (p->given || plan->preset) {
        /* no tracker: the pupils and mask on the device are set (given pupils, or the spots
         * path's of this frame, sw_pupil_gpu_fallback) */
        plan->preset = 0;
        return SW_OK;
    }
    if (!g->graph.exec)
        SW_TRY(pp_capture(plan));
    SW_CU(cudaGraphLaunch(g->graph.exec, s));
    return SW_OK;
}

extern "C" void sw_pupil_gpu_collect(sw_pupil_plan *plan, sw_pupil_result *result)
{
    *result = *gpu_of(plan)->h_result;
    plan->last = *result;
    plan->have_frame = 1;
}

extern "C" const void *sw_pupil_gpu_frame(const sw_pupil_plan *plan)
{
    return gpu_of(plan)->frame;
}

extern "C" const sw_pupil_ellipse *sw_pupil_gpu_pupils(const sw_pupil_plan *plan)
{
    return gpu_of(plan)->pupils;
}

extern "C" sw_status sw_pupil_gpu_run(sw_pupil_plan *plan, const sw_image *frame,
                                      sw_pupil_result *result)
{
    pp_gpu *g = gpu_of(plan);
    cudaStream_t s = stream_of(plan);
    SW_TRY(sw_pupil_gpu_enqueue(plan, frame));
    if (plan->has_geom && plan->lenslet_mask)
        SW_CU(cudaMemcpyAsync(plan->lenslet_mask, g->lenslet,
                              (size_t)plan->geom.nx * (size_t)plan->geom.ny, cudaMemcpyDeviceToHost,
                              s));
    SW_CU(cudaStreamSynchronize(s));
    sw_pupil_gpu_collect(plan, result);
    /* a pupil the device's glow path did not find: the spots path on the host (pupil.h) */
    return sw_pupil_gpu_fallback(plan, frame, result, NULL);
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
        SW_CU(cudaMemcpyAsync(xy, g->border + pp_list_start(i, plan->last.split_x, plan->p.height),
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
