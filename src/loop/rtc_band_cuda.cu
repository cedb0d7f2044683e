/*
 * The band-wise real-time chain on the GPU (loop.h, sw_rtc_band_*; rtc_band.c is the host side):
 * one persistent kernel, launched once (cooperative launch: every block resident), that loops
 * over the frames 1, 2, 3, ... of the ring in mapped host memory. Per frame f (slot (f - 1) %
 * depth) each block:
 *   0. waits until every block has finished frame f - 1 (a device counter: the slopes buffer and
 *      the blocks' shared accumulators are reused);
 *   then per band b:
 *   1. for each lenslet row of the band that it owns (row iy goes to block iy % blocks): waits
 *      for the band's flag (thread 0: ld.acquire.sys until it holds f; a block barrier), copies
 *      the row's pixel rectangle from host memory into shared memory (16-byte uncached loads,
 *      all issued before any is used: one bus round trip), and computes the row's centres of
 *      gravity with the centroid stage's arithmetic (below); the slopes go to the device slopes
 *      buffer (and to host memory when asked); then a block barrier, thread 0's __threadfence
 *      (cumulative: the block's stores, ordered by the barrier) and an atomic add to the band's
 *      counter (one fence per row, none per lenslet);
 *   2. waits for the band's counter to reach f x (the band's lenslet rows) (ld.acquire.gpu),
 *      loads the band's slopes (both axes) into shared memory and adds, for each command row it
 *      owns (warp w of the grid owns rows w, w + warps, ...), that row's columns of the band
 *      times the slopes to its accumulator (a column-blocked GEMV, C in FP32 or FP16, sums in
 *      FP32). C streams from device memory in 16-byte loads (4 floats or 8 halves per lane),
 *      BD_RB rows x 2 axes x BD_VU vectors per lane issued before any is used; C's rows are
 *      stored padded to 16 bytes so that a band's columns start at the same alignment in every
 *      row, and the slopes in shared memory start at that 16-byte boundary, zero outside the
 *      band (the partial first and last vectors of a segment add exact zeros: C is finite).
 *      Every frame reads all of C once: nact x 2 ns x (4 or 2) bytes, a band its share of it; at
 *      the device memory's bandwidth that is the GEMV's floor (80 x 80 lenslets in FP16,
 *      5185 x 10048: 104 MB, ~22 us per frame at an H200's 4.8 TB/s, ~2.7 us per band of 8);
 *   3. after the last band: the controller on each of its rows (sw_loop_update: integrator or
 *      leaky, then the clip, as rtc_cuda.cu), the state u in device memory, the command to the
 *      slot's commands in host memory; a block barrier, thread 0's __threadfence and an atomic
 *      add to the done counter; the last block alone fences at system scope (cumulative: every
 *      block's stores to host memory, which it has observed through the counter) and stores f
 *      into the done word. One system fence per frame: such a fence waits for the bus (the
 *      first version had one per warp, 2112 per frame on an H100 or H200, and took ~9.5 ms a
 *      frame, consistent with the fences serialising at a few us each).
 * Every wait is thread 0's and gives up after its timeout (%globaltimer): band 0 of a frame
 * idle_timeout_us, the other bands band_timeout_us, the frame barrier band_timeout_us. Only the
 * waits for a band's flag read host memory (the flag; every 32 tries the stop word); the waits
 * on device counters poll device memory only (the counter; every 32 tries the abort word), so
 * that a handful of blocks, not all of them, put reads on the bus. A stop reaches them through
 * the abort word: some block always waits for a flag or is on its way to one. A block that
 * gives up records why (the first one wins an atomicCAS on the abort word, writes the frame and
 * band, then the reason with a release store) and returns; the others see the abort word and
 * return too.
 * Diagnostics (environment, read at create; for measuring the design's choices, not for use):
 * SPOTWAVE_RTC_BAND_FENCE=block (a system fence per block and frame) or warp (per warp, as the
 * first version); SPOTWAVE_RTC_BAND_STOP_POLL=all (every wait reads the host stop word every 32
 * tries, as the first version); SPOTWAVE_RTC_BAND_BLOCKS_PER_SM=1 (else 2 where they fit).
 * Trace (params.trace > 0): thread 0 of the blocks named in sw_rtc_band_trace stores
 * %globaltimer into the frame's entry of a ring in mapped host memory (plain posted stores, a
 * few per frame); block 0, while it waits for band 0 of the next frame, answers clock requests
 * (sw_rtc_band_clock) with its clock.
 *
 * The centroids, as the centroid stage's fast kernel (centroid_cuda.cu cog_kernel) computes them,
 * so that the slopes are the same bits: per column, R row groups (the plan's R: thread group r
 * sums rows ys + r, ys + r + R, ... in order, S0 += v, S1 += (y - ys) v, in float after the
 * conditioning of centroid_model.h, or in uint32 for exact plans), the groups added in order r =
 * 0, 1, ...; per lenslet, gs lanes (the plan's gs) take columns c = lane, lane + gs, ... summing
 * m00 += S0, m10 += c S0, m01 += S1 in double (uint64 exact), reduced by an XOR butterfly, and
 * sw_cm_finish. Saturation: any raw pixel at or above the level.
 *
 * The sums of the GEMV are in another order than cuBLAS's sgemv: the commands agree with
 * sw_rtc_run's to FP32 rounding, not bit for bit.
 */
#include "centroid/centroid_internal.h"
#include "centroid/centroid_model.h"
#include "core/core_internal.h"
#include "core/cuda_util.h"
#include "loop/loop_internal.h"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <type_traits>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   b->ctx
#define SW_CUDA_STAGE "rtc band"

#define BD_THREADS  256 /* threads per block                                    */
#define BD_WARPS    (BD_THREADS / 32)
#define BD_LOADS    8  /* 16-byte loads per thread in flight (pixel copies)   */
#define BD_MAX_RPW  64 /* command rows per warp (accumulators in shared memory) */
#define BD_RB       4  /* command rows a warp reads at once (GEMV)             */
#define BD_VU       1  /* 16-byte vectors per lane, row and axis, at once (GEMV) */
#define BD_MAX_SMEM (160 * 1024)

typedef unsigned long long u64;

struct bd_args {
    /* mapped host memory (device addresses) */
    const char *frames;
    size_t stride, slot_bytes;
    const u64 *ctl; /* the control words (loop_internal.h) */
    u64 *ctl_w;     /* the same, for the GPU's stores      */
    float *cmd_host;
    float *slopes_host; /* or NULL */
    int32_t depth, nb;
    /* bands (device) */
    const int32_t *lrow0; /* nb + 1 */
    const int32_t *k0;    /* nb + 1: slope index bounds */
    /* the centroid plan (device copies) */
    const int32_t *xs, *xe, *ys, *ye, *slope_k;
    const double *ref_x, *ref_y;
    const float *lut, *dark, *flat;
    int32_t width, nx, ny, col0, col1;
    int32_t cb, nck; /* the pixel rectangle's first byte in a row, its 16-byte chunks per row */
    int32_t hmax;
    int mode, conditioned, drop;
    float thr, gamma;
    uint32_t sat_u;
    float sat_f;
    int R, gs;
    /* the reconstruction and the controller */
    int32_t ns, nact, rpw, maxbs;
    int32_t ld;       /* C's row stride (elements): 2 ns rounded up to 16 bytes, zero padded */
    int32_t slw;      /* floats per axis of a band's slopes in shared memory (a multiple of 8) */
    const float *C;   /* nact x 2 ns row-major (row stride ld), FP32 */
    const __half *Ch; /* or FP16 */
    float gain, keep, clip;
    float *u;      /* nact: the state */
    float *s;      /* 2 ns: the slopes */
    u64 *band_ctr; /* nb */
    u64 *done_ctr;
    int *abort;
    u64 band_ns, idle_ns;
    u64 *trace; /* mapped: ntrace entries of SW_BAND_TRACE_WORDS, or NULL */
    u64 ntrace;
    int fence_mode; /* 0: one system fence per frame, 1: per block, 2: per warp (diagnostic) */
    int poll_all;   /* 1: device waits read the host stop word too (diagnostic) */
};

/* ------------------------------------------------------------------ memory-model helpers */

__device__ __forceinline__ u64 ld_acquire_sys(const u64 *p)
{
    u64 v;
    asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_acquire_gpu(const u64 *p)
{
    u64 v;
    asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ u64 ld_relaxed_sys(const u64 *p)
{
    u64 v;
    asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void st_release_sys(u64 *p, u64 v)
{
    asm volatile("st.release.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ void st_relaxed_sys(u64 *p, u64 v)
{
    asm volatile("st.relaxed.sys.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ u64 bd_clock_ns(void)
{
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/*
 * Block 0's thread 0, waiting for band 0's flag with a trace on, has seen a clock request:
 * answers each new request with its clock (one relaxed store of the stamp: no fence between
 * the clock and the host) until the host writes SW_BAND_CLK_END, stops the chain, or 100 ms pass.
 */
__device__ void bd_clock_serve(const bd_args &a, u64 rq)
{
    u64 served = 0, said = 0;
    const u64 t0 = bd_clock_ns();
    while (rq != SW_BAND_CLK_END) {
        if (rq != served && rq != 0) {
            u64 t = bd_clock_ns();
            t = t > said ? t : said + 1; /* every answer differs from the last (a coarse clock) */
            st_relaxed_sys(a.ctl_w + SW_BAND_CLK_ACK, t);
            said = t;
            served = rq;
        }
        if (bd_clock_ns() - t0 > 100000000ull || ld_relaxed_sys(a.ctl + SW_BAND_STOP) != 0)
            break;
        rq = ld_relaxed_sys(a.ctl + SW_BAND_CLK_REQ);
    }
}

/*
 * Thread 0's wait until *p >= target (sys: the word is in host memory), broadcast to the block
 * through *verdict. Returns 1 when it came; 0 when the block must return (stop, abort, or a
 * timeout, recorded as (frame, band) when this block is the first to give up). Only sys waits
 * read the stop word (host memory); device waits read device memory alone.
 */
__device__ int bd_wait(const bd_args &a, const u64 *p, u64 target, int sys, u64 timeout_ns,
                       u64 frame, int band, int *verdict)
{
    if (threadIdx.x == 0) {
        int why = SW_BAND_EOK;
        u64 t0 = bd_clock_ns();
        const bool clk = sys && a.trace && band == 0 && blockIdx.x == 0;
        for (unsigned i = 0;; i++) {
            const u64 v = sys ? ld_acquire_sys(p) : ld_acquire_gpu(p);
            if (v >= target)
                break;
            if ((i & 31) == 31) {
                if ((sys || a.poll_all) && ld_relaxed_sys(a.ctl + SW_BAND_STOP) != 0) {
                    why = SW_BAND_ESTOP;
                    break;
                }
                if (clk) {
                    const u64 rq = ld_relaxed_sys(a.ctl + SW_BAND_CLK_REQ);
                    if (rq != 0 && rq != SW_BAND_CLK_END) {
                        bd_clock_serve(a, rq);
                        t0 = bd_clock_ns(); /* the time served is not the camera's */
                    }
                }
                if (*(volatile int *)a.abort != 0) {
                    why = -1; /* another block gave up: it has recorded why */
                    break;
                }
                if (bd_clock_ns() - t0 > timeout_ns) {
                    why = band < 0 ? SW_BAND_EWAIT : SW_BAND_ETIMEOUT;
                    break;
                }
            }
        }
        if (why > 0 && atomicCAS(a.abort, 0, why) == 0) {
            a.ctl_w[SW_BAND_ERR_FRAME] = frame;
            a.ctl_w[SW_BAND_ERR_BAND] = (u64)(long long)band;
            __threadfence_system();
            st_release_sys(a.ctl_w + SW_BAND_ERR, (u64)why);
        }
        *verdict = why == SW_BAND_EOK;
    }
    __syncthreads();
    const int ok = *verdict;
    __syncthreads(); /* (the next wait may write verdict) */
    return ok;
}

/* ------------------------------------------------------------------ centroids of one row */

template <typename T> __device__ __forceinline__ unsigned bd_at_level(const bd_args &a, T raw)
{
    return (uint32_t)raw >= a.sat_u;
}

template <> __device__ __forceinline__ unsigned bd_at_level<float>(const bd_args &a, float raw)
{
    return raw >= a.sat_f; /* false for a NaN level (none) */
}

/* Steps 1-3 of centroid.h as centroid_cuda.cu's prepare: the LUT, v - dark, v * flat. */
template <typename T>
__device__ __forceinline__ float bd_prepare(const bd_args &a, T raw, int y, int x)
{
    float v;
    if (std::is_same<T, float>::value)
        v = (float)raw;
    else
        v = a.lut ? a.lut[(uint32_t)raw] : (float)raw;
    const size_t k = (size_t)y * (size_t)a.width + (size_t)x;
    if (a.dark)
        v = __fsub_rn(v, a.dark[k]);
    if (a.flat)
        v = __fmul_rn(v, a.flat[k]);
    return v;
}

/*
 * Lenslet row iy of the frame: the pixels into shared memory, the column sums, the lenslets'
 * moments and slopes. All threads of the block take part. tile: hmax x nck x 16 bytes; s0, s1:
 * R x ncols sums; sat: R x ncols bytes.
 */
template <typename T, bool EXACT>
__device__ void bd_row(const bd_args &a, const char *frame, int iy, uint4 *tile, void *s0v,
                       void *s1v, uint8_t *sat, int slot, u64 *copied)
{
    typedef typename std::conditional<EXACT, uint32_t, float>::type acc_t;
    typedef typename std::conditional<EXACT, unsigned long long, double>::type mom_t;
    acc_t *s0 = (acc_t *)s0v, *s1 = (acc_t *)s1v;
    const int tid = threadIdx.x, nt = blockDim.x;
    const int ys = a.ys[iy], ye = a.ye[iy], h = ye - ys;

    /* the rectangle rows [ys, ye) x bytes [cb, cb + 16 nck): BD_LOADS loads per thread issued
     * before any store (uncached: the ring's slot is rewritten by the camera) */
    const int n16 = h * a.nck;
    for (int i0 = 0; i0 < n16; i0 += BD_LOADS * nt) {
        uint4 q[BD_LOADS];
#pragma unroll
        for (int k = 0; k < BD_LOADS; k++) {
            const int i = i0 + k * nt + tid;
            if (i < n16) {
                const int row = i / a.nck, c = i - row * a.nck;
                q[k] = __ldcv((const uint4 *)(frame + (size_t)(ys + row) * a.stride + a.cb) + c);
            }
        }
#pragma unroll
        for (int k = 0; k < BD_LOADS; k++) {
            const int i = i0 + k * nt + tid;
            if (i < n16)
                tile[i] = q[k];
        }
    }
    __syncthreads();
    if (copied && tid == 0)
        *copied = bd_clock_ns();

    /* column sums per row group */
    const int nc = a.col1 - a.col0, R = a.R, rowb = 16 * a.nck;
    const char *tb = (const char *)tile;
    for (int t = tid; t < R * nc; t += nt) {
        const int r = t / nc, c = t - r * nc, x = a.col0 + c;
        const int xoff = x * (int)sizeof(T) - a.cb;
        acc_t a0 = 0, a1 = 0;
        unsigned st = 0;
        for (int y = ys + r; y < ye; y += R) {
            const T raw = *(const T *)(tb + (size_t)(y - ys) * rowb + xoff);
            st |= bd_at_level<T>(a, raw);
            acc_t v;
            if (EXACT) {
                v = (acc_t)raw;
            } else {
                float w = bd_prepare<T>(a, raw, y, x);
                if (a.conditioned)
                    w = sw_cm_condition(w, 0.0f, 1.0f, a.mode, a.thr, a.gamma);
                v = (acc_t)w;
            }
            const acc_t wy = (acc_t)(y - ys);
            a0 += v;
            a1 += wy * v;
        }
        s0[t] = a0;
        s1[t] = a1;
        sat[t] = (uint8_t)st;
    }
    __syncthreads();
    if (R > 1)
        for (int c = tid; c < nc; c += nt) {
            acc_t u0 = s0[c], u1 = s1[c];
            unsigned m = sat[c];
            for (int r = 1; r < R; r++) {
                u0 += s0[r * nc + c];
                u1 += s1[r * nc + c];
                m |= sat[r * nc + c];
            }
            s0[c] = u0;
            s1[c] = u1;
            sat[c] = (uint8_t)m;
        }
    __syncthreads();

    /* per lenslet: gs lanes, the butterfly, one lane finishes (Eq. 7) */
    const int gs = a.gs, lane = tid & (gs - 1), grp = tid / gs, ngrp = nt / gs;
    const unsigned full = 0xffffffffu;
    for (int b0 = 0; b0 < a.nx; b0 += ngrp) {
        const int ix = b0 + grp;
        const bool act = ix < a.nx;
        int xs = 0;
        mom_t m00 = 0, m10 = 0, m01 = 0;
        unsigned st = 0;
        if (act) {
            xs = a.xs[ix];
            const int c0 = xs - a.col0, w = a.xe[ix] - xs;
            for (int c = lane; c < w; c += gs) {
                const mom_t u = (mom_t)s0[c0 + c];
                m00 += u;
                m10 += (mom_t)c * u;
                m01 += (mom_t)s1[c0 + c];
                st |= sat[c0 + c];
            }
        }
        for (int o = gs >> 1; o > 0; o >>= 1) {
            m00 += __shfl_xor_sync(full, m00, o);
            m10 += __shfl_xor_sync(full, m10, o);
            m01 += __shfl_xor_sync(full, m01, o);
            st |= __shfl_xor_sync(full, st, o);
        }
        if (act && lane == 0) {
            const int l = iy * a.nx + ix, ks = a.slope_k[l];
            if (ks >= 0) {
                float sx = 0.0f, sy = 0.0f;
                sw_cm_finish((double)m00, (double)m10, (double)m01, xs, ys, 1, (int)st, a.drop,
                             a.ref_x[l], a.ref_y[l], NULL, NULL, NULL, NULL, NULL, &sx, &sy, NULL,
                             NULL, NULL, NULL);
                a.s[ks] = sx;
                a.s[a.ns + ks] = sy;
                if (a.slopes_host) {
                    float *h2 = a.slopes_host + (size_t)slot * 2 * a.ns;
                    h2[ks] = sx;
                    h2[a.ns + ks] = sy;
                }
                /* no fence here: the barrier below and the caller's thread 0 fence them all */
            }
        }
    }
    __syncthreads(); /* shared memory is reused by the next row; the row's slopes are stored */
}

/* ------------------------------------------------------------------ the persistent kernel */

/* d + the 16 bytes q of C (4 floats or 8 halves) times the slopes s[0 ..) (16-byte aligned) */
__device__ __forceinline__ float bd_dot(uint4 q, const float *s, float d, const float *)
{
    const float4 v = *(const float4 *)s;
    d = fmaf(__uint_as_float(q.x), v.x, d);
    d = fmaf(__uint_as_float(q.y), v.y, d);
    d = fmaf(__uint_as_float(q.z), v.z, d);
    return fmaf(__uint_as_float(q.w), v.w, d);
}

__device__ __forceinline__ float2 bd_h2(unsigned u)
{
    __half2_raw r;
    r.x = (unsigned short)(u & 0xffffu);
    r.y = (unsigned short)(u >> 16);
    return __half22float2(__half2(r));
}

__device__ __forceinline__ float bd_dot(uint4 q, const float *s, float d, const __half *)
{
    const float4 v0 = *(const float4 *)s, v1 = *(const float4 *)(s + 4);
    float2 c = bd_h2(q.x);
    d = fmaf(c.x, v0.x, d);
    d = fmaf(c.y, v0.y, d);
    c = bd_h2(q.y);
    d = fmaf(c.x, v0.z, d);
    d = fmaf(c.y, v0.w, d);
    c = bd_h2(q.z);
    d = fmaf(c.x, v1.x, d);
    d = fmaf(c.y, v1.y, d);
    c = bd_h2(q.w);
    d = fmaf(c.x, v1.z, d);
    return fmaf(c.y, v1.w, d);
}

/* (2 blocks per multiprocessor: at most 128 registers, which the GEMV's loads in flight need) */
template <typename T, bool EXACT, typename M>
__global__ void __launch_bounds__(BD_THREADS, 2) bd_kernel(const bd_args a)
{
    typedef typename std::conditional<EXACT, uint32_t, float>::type acc_t;
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int verdict;
    const int rc = a.R * (a.col1 - a.col0);
    uint4 *tile = (uint4 *)smem;
    float *acc = (float *)(tile + (size_t)a.hmax * a.nck); /* BD_WARPS x rpw */
    float *sl = acc + BD_WARPS * a.rpw;                    /* 2 slw          */
    acc_t *s0 = (acc_t *)(sl + 2 * a.slw), *s1 = s0 + rc;
    uint8_t *sat = (uint8_t *)(s1 + rc);

    const M *C = std::is_same<M, float>::value ? (const M *)a.C : (const M *)a.Ch;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int G = (int)gridDim.x, blk = (int)blockIdx.x;
    const int gw = blk * BD_WARPS + warp, W = G * BD_WARPS;
    const int V = 16 / (int)sizeof(M); /* elements of C per 16-byte load */

    for (u64 f = 1;; f++) {
        const int slot = (int)((f - 1) % (u64)a.depth);
        const char *frame = a.frames + (size_t)slot * a.slot_bytes;
        u64 *tr = a.trace ? a.trace + ((f - 1) % a.ntrace) * SW_BAND_TRACE_WORDS : NULL;
        /* 0. every block has finished frame f - 1 */
        if (f > 1 && !bd_wait(a, a.done_ctr, (f - 1) * (u64)G, 0, a.band_ns, f, -1, &verdict))
            return;
        for (int i = tid; i < BD_WARPS * a.rpw; i += BD_THREADS)
            acc[i] = 0.0f;

        for (int b = 0; b < a.nb; b++) {
            const u64 tmo = b == 0 ? a.idle_ns : a.band_ns;
            const int l0 = a.lrow0[b], l1 = a.lrow0[b + 1];
            /* 1. this block's lenslet rows of the band */
            int first = l0 + (int)(((unsigned)(blk - l0 % G + G)) % (unsigned)G);
            const bool last = b == a.nb - 1;
            if (first < l1) {
                if (!bd_wait(a, a.ctl + SW_BAND_FLAGS + slot * a.nb + b, f, 1, tmo, f, b, &verdict))
                    return;
                if (tr && tid == 0 && first == l0) {
                    const u64 t = bd_clock_ns();
                    if (b == 0)
                        tr[1] = t;
                    if (last)
                        tr[2] = t;
                }
                for (int iy = first; iy < l1; iy += G) {
                    bd_row<T, EXACT>(a, frame, iy, tile, s0, s1, sat, slot,
                                     tr && last && iy == l0 ? tr + 3 : NULL);
                    if (tid == 0) {
                        /* the block's slopes (the barrier ending bd_row) before the count */
                        __threadfence();
                        const u64 old = atomicAdd(a.band_ctr + b, 1ull);
                        if (tr && last && old == f * (u64)(l1 - l0) - 1)
                            tr[4] = bd_clock_ns();
                    }
                }
            }
            /* 2. the band's slopes from every block, then this warp's rows of C times them */
            if (!bd_wait(a, a.band_ctr + b, f * (u64)(l1 - l0), 0, tmo, f, b, &verdict))
                return;
            if (tr && last && blk == 0 && tid == 0)
                tr[5] = bd_clock_ns();
            /* the band's slopes, each axis in shared memory from its first column's 16-byte
             * boundary in C's rows (C's row stride ld is a multiple of V: the same boundary in
             * every row), zero beyond the band on both sides up to slw */
            const int k0 = a.k0[b], m = a.k0[b + 1] - k0;
            const int xa = k0 & -V, ya = (a.ns + k0) & -V; /* first columns, 16-byte aligned */
            const int hx = k0 - xa, hy = a.ns + k0 - ya;
            const int nvx = (hx + m + V - 1) / V, nvy = (hy + m + V - 1) / V;
            const int nv = nvx > nvy ? nvx : nvy; /* nv V <= slw */
            float *slx = sl, *sly = sl + a.slw;
            for (int i = tid; i < a.slw; i += BD_THREADS) {
                const int jx = i - hx, jy = i - hy;
                slx[i] = jx >= 0 && jx < m ? __ldcg(a.s + k0 + jx) : 0.0f;
                sly[i] = jy >= 0 && jy < m ? __ldcg(a.s + a.ns + k0 + jy) : 0.0f;
            }
            __syncthreads();
            /* the warp's rows BD_RB at a time, each lane BD_VU 16-byte vectors per row and axis
             * at once (up to 2 BD_RB BD_VU loads in flight per lane), all issued before any is
             * used. The columns outside the band in the first and last vector meet zero slopes:
             * C is finite (rtc.c), so they add exact zeros. Vectors past an axis's end, and
             * rows past the warp's, are zero and not loaded. */
            for (int i0 = 0; i0 < a.rpw && gw + i0 * W < a.nact; i0 += BD_RB) {
                /* row gw + (i0 + r) W's vector v of the x axis: px[r W ld / V + v], of the
                 * y axis that + dy */
                const uint4 *px = (const uint4 *)(C + (size_t)(gw + i0 * W) * a.ld + xa);
                const size_t rs = (size_t)W * (size_t)(a.ld / V);
                const int dy = (ya - xa) / V;
                bool ok[BD_RB];
                float d[BD_RB];
#pragma unroll
                for (int r = 0; r < BD_RB; r++) {
                    ok[r] = i0 + r < a.rpw && gw + (i0 + r) * W < a.nact; /* warp-uniform */
                    d[r] = 0.0f;
                }
                for (int v0 = lane; v0 < nv; v0 += 32 * BD_VU) {
                    uint4 qx[BD_RB][BD_VU], qy[BD_RB][BD_VU];
#pragma unroll
                    for (int r = 0; r < BD_RB; r++)
#pragma unroll
                        for (int u = 0; u < BD_VU; u++) {
                            const int v = v0 + 32 * u;
                            qx[r][u] = qy[r][u] = make_uint4(0u, 0u, 0u, 0u);
                            if (ok[r] && v < nvx)
                                qx[r][u] = __ldg(px + r * rs + v);
                            if (ok[r] && v < nvy)
                                qy[r][u] = __ldg(px + r * rs + dy + v);
                        }
#pragma unroll
                    for (int u = 0; u < BD_VU; u++) {
                        const int v = v0 + 32 * u;
                        if (v < nv)
#pragma unroll
                            for (int r = 0; r < BD_RB; r++) {
                                d[r] = bd_dot(qx[r][u], slx + v * V, d[r], C);
                                d[r] = bd_dot(qy[r][u], sly + v * V, d[r], C);
                            }
                    }
                }
#pragma unroll
                for (int r = 0; r < BD_RB; r++) {
                    for (int o = 16; o > 0; o >>= 1)
                        d[r] += __shfl_xor_sync(0xffffffffu, d[r], o);
                    if (lane == 0 && ok[r])
                        acc[warp * a.rpw + i0 + r] += d[r];
                }
            }
            __syncthreads(); /* sl is reused by the next band */
        }

        /* 3. the controller, the commands to host memory, the done count */
        float *cmd = a.cmd_host + (size_t)slot * a.nact;
        if (lane == 0)
            for (int i = 0; i < a.rpw; i++) {
                const int row = gw + i * W;
                if (row >= a.nact)
                    break;
                const float v =
                    sw_loop_update(a.u[row], acc[warp * a.rpw + i], a.gain, a.keep, a.clip);
                a.u[row] = v;
                cmd[row] = v;
            }
        if (a.fence_mode == 2 && lane == 0)
            __threadfence_system();
        __syncthreads();
        if (tid == 0) {
            /* the block's stores (ordered by the barrier) before its count */
            if (a.fence_mode >= 1)
                __threadfence_system();
            else
                __threadfence();
            const u64 old = atomicAdd(a.done_ctr, 1ull);
            if (old == f * (u64)G - 1) {
                if (tr)
                    tr[6] = bd_clock_ns();
                /* the frame's only system fence: every block's commands and slopes in host
                 * memory (cumulative through the counter), then the done word */
                __threadfence_system();
                st_relaxed_sys(a.ctl_w + SW_BAND_DONE, f);
                if (tr) {
                    /* the entry's frame tag last, after its stamps: the host may read the entry
                     * as soon as it sees the done word, and waits for the tag (trace mode only:
                     * a second system fence after the done word) */
                    tr[7] = bd_clock_ns();
                    __threadfence_system();
                    st_relaxed_sys(tr, f);
                }
            }
        }
    }
}

typedef void (*bd_kernel_fn)(const bd_args);

template <typename T> static bd_kernel_fn bd_pick(int exact, int half)
{
    if (exact)
        return half ? bd_kernel<T, true, __half> : bd_kernel<T, true, float>;
    return half ? bd_kernel<T, false, __half> : bd_kernel<T, false, float>;
}

template <> bd_kernel_fn bd_pick<float>(int exact, int half)
{
    (void)exact; /* f32 frames are never summed exactly */
    return half ? bd_kernel<float, false, __half> : bd_kernel<float, false, float>;
}

/* ------------------------------------------------------------------ create / destroy */

typedef struct bd_gpu {
    cudaStream_t stream;
    void *ctl, *frames, *cmds, *slopes, *trace; /* mapped pinned host memory */
    float *C, *u, *s, *dark, *flat, *lut;
    __half *Ch;
    int32_t *lrow0, *k0, *xs, *xe, *ys, *ye, *slope_k;
    double *ref_x, *ref_y;
    u64 *band_ctr, *done_ctr;
    int *abort;
    int launched;
} bd_gpu;

template <typename V> static cudaError_t bd_upload(V **dst, const V *src, size_t n)
{
    cudaError_t e = cudaMalloc((void **)dst, (n ? n : 1) * sizeof(V));
    if (e == cudaSuccess && src && n)
        e = sw_cuda_h2d(*dst, src, n * sizeof(V));
    else if (e == cudaSuccess)
        e = sw_cuda_memset_sync(*dst, 0, (n ? n : 1) * sizeof(V));
    return e;
}

static cudaError_t bd_host(void **p, size_t bytes)
{
    cudaError_t e = cudaHostAlloc(p, bytes, cudaHostAllocMapped);
    if (e == cudaSuccess)
        memset(*p, 0, bytes);
    return e;
}

template <typename V> static cudaError_t bd_dev(V **dev, void *host)
{
    return cudaHostGetDevicePointer((void **)dev, host, 0);
}

extern "C" sw_status sw_rtc_band_gpu_create(sw_rtc_band *b)
{
    bd_gpu *g = (bd_gpu *)calloc(1, sizeof(bd_gpu));
    if (!g)
        return sw_fail(b->ctx, SW_ENOMEM, "rtc band: out of memory");
    b->gpu = g; /* sw_rtc_band_gpu_destroy frees what is made below, also after a failure */
    const sw_rtc *r = b->r;
    const sw_centroid_plan *c = r->cent;
    const sw_centroid_params *cp = &c->p;
    const int dev = b->ctx->device;
    SW_CU(cudaSetDevice(dev));
    int coop = 0, sms = 0, optin = 0;
    SW_CU(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    SW_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    SW_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (!coop)
        return sw_fail(b->ctx, SW_EUNSUPPORTED, "rtc band: the GPU has no cooperative launch");

    /* the shape */
    bd_args a;
    memset(&a, 0, sizeof a);
    sw_centroid_gpu_shape(c, &a.R, &a.gs);
    const size_t psize = sw_pixel_size(cp->type);
    a.width = cp->width;
    a.nx = c->nx;
    a.ny = c->ny;
    a.col0 = c->col0;
    a.col1 = c->col1;
    a.cb = (int32_t)((size_t)c->col0 * psize / 16 * 16);
    a.nck = (int32_t)(((size_t)c->col1 * psize + 15) / 16 - (size_t)a.cb / 16);
    a.hmax = 1;
    for (int32_t iy = 0; iy < c->ny; iy++)
        if (c->ye[iy] - c->ys[iy] > a.hmax)
            a.hmax = c->ye[iy] - c->ys[iy];
    a.ns = b->ns;
    a.nact = b->nact;
    a.depth = b->depth;
    a.nb = b->nb;
    a.stride = b->stride;
    a.slot_bytes = b->slot_bytes;
    int32_t *k0 = (int32_t *)malloc((size_t)(b->nb + 1) * sizeof(int32_t));
    if (!k0)
        return sw_fail(b->ctx, SW_ENOMEM, "rtc band: out of memory");
    a.maxbs = 1;
    for (int32_t i = 0; i <= b->nb; i++) {
        int32_t k = 0;
        for (int64_t l = 0; l < (int64_t)b->lrow0[i] * c->nx; l++)
            k += c->slope_k[l] >= 0;
        k0[i] = k;
        if (i > 0 && k0[i] - k0[i - 1] > a.maxbs)
            a.maxbs = k0[i] - k0[i - 1];
    }
    const int half = r->p.fp16 ? 1 : 0;
    /* C's rows padded to 16 bytes (V = 8 halves or 4 floats), so that column j of every row has
     * the same 16-byte alignment; a band's slopes per axis: its columns from the 16-byte boundary
     * before its first (up to V - 1 more) and its last vector's (up to V - 1 more) */
    const int32_t vw = half ? 8 : 4;
    a.ld = (2 * b->ns + vw - 1) / vw * vw;
    a.slw = (a.maxbs + 2 * (vw - 1) + 7) / 8 * 8;
    const int exact = c->exact && cp->type != SW_PIX_F32;
    const bd_kernel_fn kfn = cp->type == SW_PIX_U8    ? bd_pick<uint8_t>(exact, half)
                             : cp->type == SW_PIX_U16 ? bd_pick<uint16_t>(exact, half)
                                                      : bd_pick<float>(0, half);
    const int32_t rc = a.R * (c->col1 - c->col0);
    const size_t fixed = (size_t)a.hmax * a.nck * 16 + 2 * (size_t)a.slw * sizeof(float) +
                         2 * (size_t)rc * 4 + (size_t)rc + 16;
    /* blocks: up to 2 per multiprocessor, as the occupancy allows */
    int per_sm = 0, blocks = 0, want0 = 2;
    size_t smem = 0;
    const char *env = getenv("SPOTWAVE_RTC_BAND_BLOCKS_PER_SM");
    if (env && strcmp(env, "1") == 0)
        want0 = 1;
    env = getenv("SPOTWAVE_RTC_BAND_FENCE");
    a.fence_mode = env && strcmp(env, "block") == 0 ? 1 : env && strcmp(env, "warp") == 0 ? 2 : 0;
    env = getenv("SPOTWAVE_RTC_BAND_STOP_POLL");
    a.poll_all = env && strcmp(env, "all") == 0;
    for (int want = want0; want >= 1 && blocks == 0; want--) {
        const int G = sms * want;
        a.rpw = (int32_t)((b->nact + (int64_t)G * BD_WARPS - 1) / ((int64_t)G * BD_WARPS));
        smem = fixed + (size_t)BD_WARPS * a.rpw * sizeof(float);
        if (smem > (size_t)optin || smem > BD_MAX_SMEM)
            continue;
        cudaError_t e =
            cudaFuncSetAttribute(kfn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kfn, BD_THREADS, smem);
        if (e != cudaSuccess) {
            free(k0); /* (SW_CU would return without it) */
            return sw_fail(b->ctx, SW_ECUDA, "rtc band: the kernel's occupancy: %s",
                           cudaGetErrorString(e));
        }
        if (per_sm >= want)
            blocks = G;
    }
    if (blocks == 0 || a.rpw > BD_MAX_RPW) {
        free(k0);
        return sw_fail(b->ctx, SW_EUNSUPPORTED,
                       "rtc band: the chain does not fit the GPU (%zu B of shared memory per block "
                       "for a %d-column frame, %d command rows per warp)",
                       smem, c->col1 - c->col0, (int)a.rpw);
    }
    b->blocks = blocks;

    /* mapped host memory: the control words, the ring, the commands, the slopes */
    const size_t nctl = SW_BAND_FLAGS + (size_t)b->depth * b->nb;
    cudaError_t e = bd_host(&g->ctl, nctl * sizeof(u64));
    if (e == cudaSuccess)
        e = bd_host(&g->frames, (size_t)b->depth * b->slot_bytes);
    if (e == cudaSuccess)
        e = bd_host(&g->cmds, (size_t)b->depth * b->nact * sizeof(float));
    if (e == cudaSuccess && b->p.slopes)
        e = bd_host(&g->slopes, (size_t)b->depth * 2 * b->ns * sizeof(float));
    const int64_t ntrace = b->p.trace > 0 ? (int64_t)b->p.trace + b->depth : 0;
    if (e == cudaSuccess && ntrace > 0)
        e = bd_host(&g->trace, (size_t)ntrace * SW_BAND_TRACE_WORDS * sizeof(u64));
    if (e != cudaSuccess) {
        free(k0);
        SW_CU(e);
    }
    b->ctl = (uint64_t *)g->ctl;
    b->frames = (char *)g->frames;
    b->cmds = (float *)g->cmds;
    b->slopes = (float *)g->slopes;
    b->trace = (uint64_t *)g->trace;
    b->ntrace = ntrace;
    e = bd_dev(&a.frames, g->frames);
    if (e == cudaSuccess)
        e = bd_dev(&a.ctl_w, g->ctl);
    if (e == cudaSuccess)
        e = bd_dev(&a.cmd_host, g->cmds);
    if (e == cudaSuccess && g->slopes)
        e = bd_dev(&a.slopes_host, g->slopes);
    if (e == cudaSuccess && g->trace)
        e = bd_dev(&a.trace, g->trace);
    a.ntrace = (u64)ntrace;
    a.ctl = a.ctl_w;

    /* device copies */
    const size_t nl = (size_t)c->nl, npix = (size_t)cp->width * cp->height;
    if (e == cudaSuccess)
        e = bd_upload(&g->k0, k0, (size_t)b->nb + 1);
    free(k0);
    if (e == cudaSuccess)
        e = bd_upload(&g->lrow0, (const int32_t *)b->lrow0, (size_t)b->nb + 1);
    if (e == cudaSuccess)
        e = bd_upload(&g->xs, (const int32_t *)c->xs, (size_t)c->nx);
    if (e == cudaSuccess)
        e = bd_upload(&g->xe, (const int32_t *)c->xe, (size_t)c->nx);
    if (e == cudaSuccess)
        e = bd_upload(&g->ys, (const int32_t *)c->ys, (size_t)c->ny);
    if (e == cudaSuccess)
        e = bd_upload(&g->ye, (const int32_t *)c->ye, (size_t)c->ny);
    if (e == cudaSuccess)
        e = bd_upload(&g->slope_k, (const int32_t *)c->slope_k, nl);
    if (e == cudaSuccess)
        e = bd_upload(&g->ref_x, (const double *)c->ref_x, nl);
    if (e == cudaSuccess)
        e = bd_upload(&g->ref_y, (const double *)c->ref_y, nl);
    if (e == cudaSuccess && c->dark)
        e = bd_upload(&g->dark, (const float *)c->dark, npix);
    if (e == cudaSuccess && c->flat)
        e = bd_upload(&g->flat, (const float *)c->flat, npix);
    if (e == cudaSuccess && c->lut)
        e = bd_upload(&g->lut, (const float *)c->lut, cp->type == SW_PIX_U8 ? (size_t)256 : 65536);
    /* C with row stride ld, the padding zero */
    const size_t n2 = (size_t)2 * b->ns, nC = (size_t)b->nact * (size_t)a.ld;
    if (e == cudaSuccess && !half) {
        e = bd_upload<float>(&g->C, NULL, nC);
        if (e == cudaSuccess)
            e = cudaMemcpy2D(g->C, (size_t)a.ld * sizeof(float), r->cm, n2 * sizeof(float),
                             n2 * sizeof(float), (size_t)b->nact, cudaMemcpyHostToDevice);
    }
    if (e == cudaSuccess && half) {
        __half *h = (__half *)calloc(nC, sizeof(__half));
        if (!h)
            return sw_fail(b->ctx, SW_ENOMEM, "rtc band: out of memory (FP16 matrix)");
        for (size_t i = 0; i < (size_t)b->nact; i++)
            for (size_t j = 0; j < n2; j++) /* rtc.c checked the range */
                h[i * (size_t)a.ld + j] = __float2half_rn(r->cm[i * n2 + j]);
        e = bd_upload(&g->Ch, (const __half *)h, nC);
        free(h);
    }
    if (e == cudaSuccess)
        e = bd_upload<float>(&g->u, NULL, (size_t)b->nact);
    if (e == cudaSuccess)
        e = bd_upload<float>(&g->s, NULL, (size_t)2 * b->ns);
    if (e == cudaSuccess)
        e = bd_upload<u64>(&g->band_ctr, NULL, (size_t)b->nb);
    if (e == cudaSuccess)
        e = bd_upload<u64>(&g->done_ctr, NULL, 1);
    if (e == cudaSuccess)
        e = bd_upload<int>(&g->abort, NULL, 1);
    SW_CU(e);

    a.lrow0 = g->lrow0;
    a.k0 = g->k0;
    a.xs = g->xs;
    a.xe = g->xe;
    a.ys = g->ys;
    a.ye = g->ye;
    a.slope_k = g->slope_k;
    a.ref_x = g->ref_x;
    a.ref_y = g->ref_y;
    a.lut = g->lut;
    a.dark = g->dark;
    a.flat = g->flat;
    a.mode = (int)cp->threshold_mode;
    a.conditioned = cp->threshold_mode != SW_THRESHOLD_NONE || cp->gamma != 1.0;
    a.thr = (float)cp->threshold;
    a.gamma = (float)cp->gamma;
    a.sat_u = c->sat_u;
    a.sat_f = c->sat_f;
    a.drop = cp->drop_saturated;
    a.C = g->C;
    a.Ch = g->Ch;
    const sw_controller_params *ctl = &r->ctrl->p;
    a.gain = (float)ctl->gain;
    a.keep = ctl->kind == SW_CTRL_LEAKY ? (float)(1.0 - ctl->leak) : 1.0f;
    a.clip = ctl->clip > 0.0 ? (float)ctl->clip : 0.0f;
    a.u = g->u;
    a.s = g->s;
    a.band_ctr = g->band_ctr;
    a.done_ctr = g->done_ctr;
    a.abort = g->abort;
    a.band_ns = (u64)(b->p.band_timeout_us * 1e3);
    a.idle_ns = (u64)(b->p.idle_timeout_us * 1e3);

    /* a stream of its own that does not wait for (or hold up) the legacy stream */
    SW_CU(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
    SW_CU(cudaDeviceSynchronize()); /* the uploads (and everything before) are complete */
    void *args[] = {(void *)&a};
    SW_CU(cudaLaunchCooperativeKernel((const void *)kfn, dim3((unsigned)blocks), dim3(BD_THREADS),
                                      args, smem, g->stream));
    g->launched = 1;
    sw_log(b->ctx, SW_LOG_DEBUG,
           "rtc band: %d blocks of %d threads, %zu B shared, %d bands, R %d, gs %d, %d command "
           "rows per warp, system fences per %s, stop word read by %s waits",
           blocks, BD_THREADS, smem, b->nb, a.R, a.gs, (int)a.rpw,
           a.fence_mode == 2   ? "warp"
           : a.fence_mode == 1 ? "block"
                               : "frame",
           a.poll_all ? "all" : "flag");
    return SW_OK;
}

extern "C" void sw_rtc_band_gpu_destroy(sw_rtc_band *b)
{
    bd_gpu *g = (bd_gpu *)b->gpu;
    if (!g)
        return;
    cudaSetDevice(b->ctx->device);
    if (g->launched) {
        /* the stop flag, then a bounded wait: every wait of the kernel looks at the flag */
        __atomic_store_n((uint64_t *)g->ctl + SW_BAND_STOP, (uint64_t)1, __ATOMIC_RELEASE);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            const cudaError_t q = cudaStreamQuery(g->stream);
            if (q != cudaErrorNotReady)
                break;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            if ((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec) > 5.0) {
                /* the kernel may still read and write this memory: leak it, do not free */
                sw_log(b->ctx, SW_LOG_ERROR,
                       "rtc band: the kernel did not stop within 5 s; its memory is not freed");
                free(g);
                b->gpu = NULL;
                b->ctl = NULL;
                b->trace = NULL;
                return;
            }
        }
    }
    if (g->stream)
        cudaStreamDestroy(g->stream);
    SW_CUDA_FREE(g->C, g->u, g->s, g->dark, g->flat, g->lut, g->Ch, g->lrow0, g->k0, g->xs, g->xe,
                 g->ys, g->ye, g->slope_k, g->ref_x, g->ref_y, g->band_ctr, g->done_ctr, g->abort);
    if (g->ctl)
        cudaFreeHost(g->ctl);
    if (g->frames)
        cudaFreeHost(g->frames);
    if (g->cmds)
        cudaFreeHost(g->cmds);
    if (g->slopes)
        cudaFreeHost(g->slopes);
    if (g->trace)
        cudaFreeHost(g->trace);
    cudaGetLastError();
    free(g);
    b->gpu = NULL;
    b->ctl = NULL;
    b->trace = NULL;
}
