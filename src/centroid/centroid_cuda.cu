/*
 * The CUDA twin of the Shack-Hartmann centre-of-gravity stage (seed 000 section 4; the API, the
 * validation and the CPU reference are centroid.c; the per-pixel conditioning and the per-lenslet
 * finish, Eq. 7, are centroid_model.h, shared by both).
 *
 * One kernel per run. A block takes one tile of LPT whole lenslets [ix0, ix1) in a band of NZ
 * consecutive lenslet rows of one frame (grid x = tile + ntiles * band, grid y = frames). Its
 * threads form TX x R x NZ:
 *   - tx walks the 4-pixel groups of the tile, aligned to the start of the image row (group g =
 *     pixels 4g .. 4g+3, seed section 4.B): one 32-bit (u8), 64-bit (u16) or 128-bit (f32) load
 *     per group and row when the image pointer and stride allow it, scalar (or byte) loads
 *     otherwise. A lenslet spans at most n_packets = floor((d + 6) / 4) groups (seed Eq. 11);
 *     TX is 32, or 64 when that exceeds 32.
 *   - ty walks the rows of the thread's lenslet row in steps of R (the seed's row groups);
 *   - tz picks the lenslet row of the band.
 * Each thread keeps, for its 4 pixels, the column sums S0[x] = sum_y I' and S1[x] = sum_y (y - ys)
 * I' over its rows (seed Eq. 6 split by column). The R row-group partials are summed in shared
 * memory (seed: "row group partials ... reduced in shared memory"), and each lenslet takes its
 * moments from its own columns,
 *     m00 = sum S0,  m10 = sum (x - xs) S0,  m01 = sum S1,
 * with gs lanes per lenslet and an XOR butterfly shuffle reduction, 32 / gs lenslets per warp at
 * once (seed section 4.C). One lane per lenslet then finishes it (Eq. 7, sw_cm_finish). Columns
 * that belong to no lenslet of the tile (window gaps, a neighbouring tile's pixels in a shared
 * group) are summed too but never read, so the pixel loop needs no per-pixel lenslet lookup.
 *
 * Why this and not the seed's lenslet groups (Eq. 12) with one butterfly reduction per pixel row:
 * summing by column first costs one add per pixel and moment in registers, and the cross-thread
 * reduction happens once per lenslet instead of once per pixel row (3 moments x log2(32) shuffles
 * per row in the seed); tiles are not limited to power-of-two lenslet groups, so every pitch from
 * 1 to 128 px (and any window) runs the same code.
 *
 * Latency. A frame of the seed's Table 1 (at most 1000 x 1000 u8) is read once, by fewer threads
 * than the GPU holds, so the kernel's time is a chain of memory latencies, not bandwidth. The
 * chain is kept to one DRAM round trip: the pixel regions are computed from the geometry (the
 * same IEEE double arithmetic as sw_sh_region, checked against the plan's tables at create), and
 * each block's slope indices and references are fetched into shared memory with asynchronous
 * copies (cp.async) while the pixels load. R is chosen for about RPT rows per thread and NZ to
 * fill the block; RPT grows with the frame count of the plan (choose_shape).
 *
 * Arithmetic (must equal the CPU's, centroid.c): exact plans (u8/u16, no conditioning) sum in
 * uint32 per column and uint64 per lenslet, so the moments, and hence the centroids, are
 * bit-identical to the CPU's. Otherwise the pixel is conditioned as centroid.c does it (LUT, then
 * v - dark, then v * flat, rounded once each, then sw_cm_condition) and summed in float per
 * thread and column, in double per lenslet. A FRACTION threshold takes a first pass for the
 * lenslet maxima (the pixels are read again, from the cache, in the second).
 *
 * Saturation (centroid.h) rides on the same loads: each thread keeps the largest raw value of each
 * of its 4 columns (one max per pixel), compares them with the level once after its rows (an
 * integer or a float comparison, always made: with no level it is never true), stores the 4
 * flags as one byte per column beside its sums, and the bytes are ORed over the row groups (in the
 * loop that adds the sums) and then over each lenslet's columns in the reductions the moments
 * take. No second pass over the pixels.
 *
 * Memory paths: DEVICE reads device frames; COPY copies host frames into the plan's pitched
 * device buffer first (cudaMemcpy2DAsync on the context's stream); MAPPED reads pinned host frames
 * directly over the bus. Results go straight to device results and to pinned host results
 * (written over the bus, zero-copy, on every path); plain host results are written to the
 * plan's device buffers and only the arrays the caller asked for are copied back.
 */
#include "centroid/centroid_internal.h"
#include "centroid/centroid_model.h"
#include "core/cuda_util.h"

#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <type_traits>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "centroid"

#define CG_THREADS    256 /* most threads per block (TX * R * NZ)                  */
#define CG_MIN_BLOCKS 4   /* resident blocks per SM the registers must allow        */
#define CG_MAX_TX     64  /* most 4-pixel groups per tile (TX)                      */

/* How a thread reads its 4-pixel group. */
enum { CG_LOAD_BYTES = 0, CG_LOAD_SCALAR = 1, CG_LOAD_VEC = 2 };

typedef struct cg_args {
    const char *img;       /* frame 0, row 0 */
    size_t stride;         /* bytes per image row */
    int32_t width, height; /* frame size (dark / flat rows are width long) */
    int32_t nx, ny, nl, nframes;
    int32_t iy_base, iy_end; /* the launch's lenslet rows [iy_base, iy_end) (all of them) */
    double x0, y0, pitch;    /* the geometry, for the pixel regions (cg_edge) */
    int32_t window;
    int32_t lpt, ntiles; /* lenslets per tile, tiles per lenslet row */
    int32_t nitems;      /* room per block for item data in shared memory (NZ * lpt) */
    int32_t col0, col1;  /* the grid's columns [col0, col1) */
    const int32_t *col_ix, *slope_k;
    const float *lut, *dark, *flat;
    int mode;        /* sw_cm_condition threshold mode, 0 none */
    int fraction;    /* 1: T = sw_cm_fraction_threshold(frac, lenslet maximum) */
    int conditioned; /* 1: threshold mode or gamma (sw_cm_condition is called) */
    float thr, gamma;
    double frac;
    const double *ref_x, *ref_y;
    int32_t nslopes;
    int interleaved;
    float *x, *y, *inten, *slopes; /* any may be NULL: not written */
    uint8_t *flag;
    uint8_t *satflag; /* the saturated flags, or NULL: not written */
    uint32_t sat_u;   /* integer frames: raw >= sat_u is saturated (UINT32_MAX: none) */
    float sat_f;      /* f32 frames: raw >= sat_f is saturated (NaN: none) */
    int drop;         /* 1: saturated lenslets are invalid */
    int gs;           /* lanes per lenslet in the finishing reductions: a power of two <= 32 */
    uint8_t *status;  /* sw_centroid_status, or NULL */
    float *xvar, *yvar, *snr; /* error bars and SNR (NaN on this path), or NULL */
    /* COPY in bands (run_bands): band b's rows have arrived when band_flag[b] == band_mark;
     * band b ends before lenslet row band_end[b]. band_flag NULL: the frame is all there. The
     * last block to finish (band_done counts them) sets the flags back to 0. */
    uint32_t *band_flag;
    unsigned int *band_done;
    uint32_t band_mark;
    int32_t nbands;
    int32_t band_end[SW_CENTROID_MAX_BANDS];
} cg_args;

/* Marks of the bands' arrival (run_bands): 1 .. CG_MARKS, one per run in turn. */
#define CG_MARKS 255

typedef struct cg_gpu {
    int32_t *col_ix, *slope_k;
    float *dark, *flat, *lut;
    double *ref_x, *ref_y;
    void *frames; /* COPY: max_frames frames */
    size_t frames_pitch;
    char *res;                      /* the results for host / pinned result arrays: one block,
                                       sw_cr_layout of max_frames (a run lays out its frames) */
    float *corr;                    /* CORRELATION template */
    size_t cm_smem;                 /* the generic kernel's dynamic shared memory */
    int cm_lg, cm_warps;            /* its 2^lg lanes per lenslet, warps per block (cm_shape) */
    int cm_direct;                  /* sw_cmb_one_pass: pixels straight from the frame */
    int tx, r, nz, gs, lpt, ntiles; /* launch shape (choose_shape) */
    size_t smem;                    /* dynamic shared memory per block */
    int uva; /* unified addressing: pinned host pointers are device pointers */
    size_t
        copy_block; /* pinned results in one block of more bytes come back by a copy (cg_sizes) */
    size_t map_frames; /* AUTO: a pinned frame of at most this many bytes is read in place */
    sw_event_pair ev;  /* around the kernel (plan->timing) */
    /* COPY in bands (run_bands): the frame's rows go up on `copy`, each band's followed by its
     * flag; `start` orders the copies after the work already queued on the context's stream
     * (the last run's kernel reads the frame buffer). */
    cudaStream_t copy;
    cudaEvent_t start;
    uint32_t *band_flag;     /* device, SW_CENTROID_MAX_BANDS: the mark of the band's arrival */
    unsigned int *band_done; /* device: blocks of the banded kernel done (cleared by the last) */
    uint32_t *marks;         /* pinned host, CG_MARKS + 1: marks[v] = v, the copies' sources */
    uint32_t mark;           /* this run's mark */
} cg_gpu;

static cudaStream_t stream_of(const sw_centroid_plan *plan)
{
    return (cudaStream_t)plan->ctx->stream;
}

/*
 * cg_sizes: where the bytes of a host-to-host run go (issue 25: the run within 1.2x of its
 * transfer floor, BENCHMARKS.md "Host to host against the transfer floor"):
 *   - pinned results of more than CG_COPY_BLOCK bytes that are sw_centroid_result_alloc's one
 *     block (sw_cr_layout, for exactly the run's frames) are written to the plan's device block
 *     and come back by the copy engine, one copy per run of consecutive arrays asked for, rather
 *     than written by the kernel over the bus as it goes: 1000^2 u8 at a 3.8 px pitch (1.5 MB of
 *     results) 86-92 -> 70-74 us on an H100. Below that the kernel's writes, which overlap the
 *     kernel, win (500^2 at 3.8 px, 377 KB: 31 us written, 38 us copied); six copies, one per
 *     array of the caller's own, lose even at 1.5 MB on an H100 (92 us), so other pinned arrays
 *     are always written in place;
 *   - on the AUTO path a pinned frame of at most CG_MAP_FRAMES bytes is read in place by the
 *     kernel (as MAPPED) instead of copied first: small frames' copy and kernel then overlap
 *     (500^2 u8: 1.22-1.27x of the floor copied, 0.96-1.04x read in place, H200).
 * SPOTWAVE_CENTROID_COPY_BLOCK=BYTES ("inf": never) and SPOTWAVE_CENTROID_MAP_FRAMES=BYTES (0:
 * never; "inf": always) override them, for measuring.
 */
#define CG_COPY_BLOCK ((size_t)768 * 1024)
#define CG_MAP_FRAMES ((size_t)256 * 1024)

/* Whether every array of out that is asked for sits at its sw_cr_layout offset L from hb. */
static int cr_in_block(const sw_centroid_result *out, const char *hb, const sw_cr_layout *L)
{
    const void *a[10] = {out->x,         out->y,      out->intensity, out->slopes, out->valid,
                         out->saturated, out->status, out->x_var,     out->y_var,  out->snr};
    const size_t off[10] = {L->x,         L->y,      L->intensity, L->slopes, L->valid,
                            L->saturated, L->status, L->x_var,     L->y_var,  L->snr};
    for (int k = 0; k < 10; k++)
        if (a[k] && (const char *)a[k] != hb + off[k])
            return 0;
    return 1;
}

static size_t cg_size_env(const char *name, size_t def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    const double d = strtod(v, &end);
    if (end == v || *end || !(d >= 0.0))
        return def; /* not a size: the default */
    return d >= 1e18 ? SIZE_MAX : (size_t)d;
}

/*
 * floor(origin + pitch * i) as sw_sh_region computes it (geometry.c, compiled without
 * contraction): one rounded product, one rounded sum. The device intrinsics are never fused.
 */
__host__ __device__ static inline int32_t cg_edge(double origin, double pitch, int32_t i)
{
#ifdef __CUDA_ARCH__
    return (int32_t)floor(__dadd_rn(origin, __dmul_rn(pitch, (double)i)));
#else
    volatile double t = pitch * (double)i; /* rounded on its own */
    return (int32_t)floor(origin + t);
#endif
}

/* ------------------------------------------------------------------ pixel loads */

__device__ __forceinline__ void vec_load(const uint8_t *r, int x, uint8_t p[4])
{
    const uint32_t w = *(const uint32_t *)(r + x);
#pragma unroll
    for (int j = 0; j < 4; j++)
        p[j] = (uint8_t)(w >> (8 * j));
}

__device__ __forceinline__ void vec_load(const uint16_t *r, int x, uint16_t p[4])
{
    const uint2 w = *(const uint2 *)(r + x);
    p[0] = (uint16_t)w.x;
    p[1] = (uint16_t)(w.x >> 16);
    p[2] = (uint16_t)w.y;
    p[3] = (uint16_t)(w.y >> 16);
}

__device__ __forceinline__ void vec_load(const float *r, int x, float p[4])
{
    const float4 w = *(const float4 *)(r + x);
    p[0] = w.x;
    p[1] = w.y;
    p[2] = w.z;
    p[3] = w.w;
}

/* A pixel at an address not aligned to its size, assembled from bytes (little-endian). */
__device__ __forceinline__ uint8_t byte_load(const char *q, uint8_t)
{
    return *(const uint8_t *)q;
}

__device__ __forceinline__ uint16_t byte_load(const char *q, uint16_t)
{
    const uint8_t *b = (const uint8_t *)q;
    return (uint16_t)(b[0] | (b[1] << 8));
}

__device__ __forceinline__ float byte_load(const char *q, float)
{
    const uint8_t *b = (const uint8_t *)q;
    return __uint_as_float((uint32_t)b[0] | ((uint32_t)b[1] << 8) | ((uint32_t)b[2] << 16) |
                           ((uint32_t)b[3] << 24));
}

/* Pixels x .. x+3 of one row: the pixels whose bit is set in m are read (the others are 0), or,
 * when LOAD allows it and the group lies inside the grid's columns (whole), all 4 with one vector
 * load. */
template <typename T, int LOAD>
__device__ __forceinline__ void load_group(const char *row, int x, bool whole, unsigned m, T p[4])
{
    if (LOAD == CG_LOAD_VEC && whole) {
        vec_load((const T *)row, x, p);
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (m >> j & 1u)
            p[j] = LOAD == CG_LOAD_BYTES ? byte_load(row + (size_t)(x + j) * sizeof(T), T())
                                         : ((const T *)row)[x + j];
        else
            p[j] = T(0);
    }
}

/* Steps 1-3 of centroid.h as centroid.c computes them: the LUT, then v - dark, then v * flat, each
 * rounded to float (the _rn intrinsics are never fused into a multiply-add). */
template <typename T>
__device__ __forceinline__ float prepare(const cg_args &a, T raw, int y, int x)
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

template <typename A> __device__ __forceinline__ void store4(A *s, const A v[4]);

template <> __device__ __forceinline__ void store4<uint32_t>(uint32_t *s, const uint32_t v[4])
{
    *(uint4 *)s = make_uint4(v[0], v[1], v[2], v[3]);
}

template <> __device__ __forceinline__ void store4<float>(float *s, const float v[4])
{
    *(float4 *)s = make_float4(v[0], v[1], v[2], v[3]);
}

/* Saturation (centroid.h: a raw pixel >= the level, before any conditioning), from the largest
 * raw value of a column's rows: one max per pixel in the row loop, one comparison per column
 * after it. Pixels not read are 0 and the level is positive: they never count. */
template <typename T> struct raw_max {
    typedef uint32_t type;
    static __device__ __forceinline__ type lowest()
    {
        return 0u;
    }
    static __device__ __forceinline__ type max(type m, T v)
    {
        return umax(m, (uint32_t)v);
    }
    static __device__ __forceinline__ unsigned at_level(type m, const cg_args &a)
    {
        return m >= a.sat_u;
    }
};

template <> struct raw_max<float> {
    typedef float type;
    static __device__ __forceinline__ type lowest()
    {
        return -INFINITY;
    }
    static __device__ __forceinline__ type max(type m, float v)
    {
        return fmaxf(m, v);
    }
    static __device__ __forceinline__ unsigned at_level(type m, const cg_args &a)
    {
        return m >= a.sat_f; /* false for a NaN level (none) */
    }
};

/* ------------------------------------------------------------------ the kernel */

/*
 * T: pixel type; LOAD: how groups are read; EXACT: integer sums, no conditioning (u8 / u16).
 * Block (TX, R, NZ); grid (ntiles * bands, frames). Dynamic shared memory: the row-group partials
 * s0, s1 (4 columns per thread each), then per item (the block's lenslet k of its band row z,
 * q = z * nlt + k): the references, the slope index, the FRACTION threshold; then one byte per
 * column, indexed as s0: 1 when the column held a saturated pixel in the thread's rows (reduced
 * over the row groups like s0, then over each lenslet's columns like the moments).
 */
template <typename T, int LOAD, bool EXACT>
__global__ void __launch_bounds__(CG_THREADS, CG_MIN_BLOCKS) cog_kernel(const cg_args a)
{
    typedef typename std::conditional<EXACT, uint32_t, float>::type acc_t;
    typedef typename std::conditional<EXACT, unsigned long long, double>::type mom_t;
    extern __shared__ __align__(16) unsigned char smem[];

    const int TX = blockDim.x, R = blockDim.y, NZ = blockDim.z;
    const int tx = threadIdx.x, ty = threadIdx.y, tz = threadIdx.z;
    const int ncol = 4 * TX, rcol = R * ncol;
    const int tid = (tz * R + ty) * TX + tx, nthreads = TX * R * NZ;
    acc_t *s0 = (acc_t *)smem, *s1 = s0 + 4 * nthreads; /* [tz][ty][4 tx + j] */
    double *rxs = (double *)(s1 + 4 * nthreads), *rys = rxs + a.nitems;
    int32_t *ksh = (int32_t *)(rys + a.nitems);
    float *tsh = (float *)(ksh + a.nitems);
    uint8_t *ssh = (uint8_t *)(tsh + a.nitems); /* one byte per column, indexed as s0 */

    /* The block's lenslets and rows, from the geometry (no table on the critical path). */
    const int tile = (int)(blockIdx.x % (unsigned)a.ntiles);
    const int iy0 = a.iy_base + (int)(blockIdx.x / (unsigned)a.ntiles) * NZ;
    const int ix0 = tile * a.lpt, ix1 = min(a.nx, ix0 + a.lpt), nlt = ix1 - ix0;
    const int tc0 = cg_edge(a.x0, a.pitch, ix0) + a.window;
    const int tc1 = cg_edge(a.x0, a.pitch, ix1) - a.window;
    const int cbase = 4 * (tc0 / 4); /* tc0 >= 0: the first group of the tile */
    const int x = cbase + 4 * tx;    /* the thread's first pixel */
    const int iy = iy0 + tz;         /* the thread's lenslet row (none when >= ny) */
    int ys = 0, ye = 0;              /* its rows */
    if (iy < a.iy_end) {
        ys = cg_edge(a.y0, a.pitch, iy) + a.window;
        ye = cg_edge(a.y0, a.pitch, iy + 1) - a.window;
    }
    const int nitems = NZ * nlt;

    /* Slope indices and references of the block's lenslets: copied into shared memory while the
     * pixels load. */
    for (int q = tid; q < nitems; q += nthreads) {
        const int z = q / nlt, iyq = iy0 + z;
        if (iyq < a.iy_end) {
            const int l = iyq * a.nx + ix0 + (q - z * nlt);
            __pipeline_memcpy_async(ksh + q, a.slope_k + l, sizeof(int32_t));
            if (a.slopes) {
                __pipeline_memcpy_async(rxs + q, a.ref_x + l, sizeof(double));
                __pipeline_memcpy_async(rys + q, a.ref_y + l, sizeof(double));
            }
        }
    }
    __pipeline_commit();

    /* COPY in bands: wait until the rows of the band of the block's last lenslet row are in
     * (the bands arrive in order, so the earlier rows are too) */
    if (a.band_flag) {
        const int last = min(iy0 + NZ, a.iy_end) - 1;
        int b = 0;
        while (b < a.nbands - 1 && a.band_end[b] <= last)
            b++;
        if (tid == 0) {
            while (*(const volatile uint32_t *)(a.band_flag + b) != a.band_mark) {
#if __CUDA_ARCH__ >= 700
                __nanosleep(128);
#endif
            }
            __threadfence();
        }
        __syncthreads();
    }

    /* mr: the thread's pixels inside the tile's columns (read by scalar loads). A whole group
     * inside the grid's columns (hence inside the image row) is read with one vector load; mv:
     * the pixels read either way (inside the image). */
    unsigned mr = 0;
#pragma unroll
    for (int j = 0; j < 4; j++)
        if (x + j >= tc0 && x + j < tc1)
            mr |= 1u << j;
    const bool whole = LOAD == CG_LOAD_VEC && mr != 0 && x >= a.col0 && x + 3 < a.col1;
    const unsigned mv = whole ? 0xFu : mr;
    const int gs = a.gs, lane = tid & (gs - 1), grp = tid / gs, ngrp = nthreads / gs;
    const unsigned full = 0xffffffffu;

    /* FRACTION: the lenslet of each of the thread's pixels (needed after the first pass only,
     * so the loads are not waited for before it). */
    int cix[4] = {-1, -1, -1, -1};
    if (!EXACT && a.fraction) {
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (mr >> j & 1u)
                cix[j] = a.col_ix[x + j - a.col0];
    }

    for (int f = (int)blockIdx.y; f < a.nframes; f += (int)gridDim.y) {
        const char *frame = a.img + (size_t)f * (size_t)a.height * a.stride;
        float thr[4] = {a.thr, a.thr, a.thr, a.thr};

        if (!EXACT && a.fraction) {
            /* Pass 1: the maximum of steps 1-3 over each lenslet (the FRACTION threshold). */
            float mx[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
#pragma unroll 4
            for (int y = ys + ty; y < ye; y += R) {
                T p[4];
                load_group<T, LOAD>(frame + (size_t)y * a.stride, x, whole, mr, p);
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (mv >> j & 1u)
                        mx[j] = fmaxf(mx[j], prepare(a, p[j], y, x + j));
            }
            float *f0 = (float *)s0;
            store4<float>(f0 + 4 * tid, mx);
            __syncthreads();
            if (R > 1)
                for (int c = tid; c < NZ * ncol; c += nthreads) {
                    const int z = c / ncol, o = z * rcol + (c - z * ncol);
                    float v = f0[o];
                    for (int r = 1; r < R; r++)
                        v = fmaxf(v, f0[o + r * ncol]);
                    f0[o] = v;
                }
            __syncthreads();
            for (int b = 0; b < nitems; b += ngrp) {
                const int q = b + grp, z = q / nlt, k = q - z * nlt;
                float v = -INFINITY;
                if (q < nitems && iy0 + z < a.iy_end) {
                    const int c0 = cg_edge(a.x0, a.pitch, ix0 + k) + a.window - cbase;
                    const int c1 = cg_edge(a.x0, a.pitch, ix0 + k + 1) - a.window - cbase;
                    for (int c = c0 + lane; c < c1; c += gs)
                        v = fmaxf(v, f0[z * rcol + c]);
                }
                for (int o = gs >> 1; o > 0; o >>= 1)
                    v = fmaxf(v, __shfl_xor_sync(full, v, o));
                if (q < nitems && lane == 0)
                    tsh[q] = sw_cm_fraction_threshold(a.frac, v);
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < 4; j++)
                thr[j] = cix[j] >= 0 ? tsh[tz * nlt + (cix[j] - ix0)] : 0.0f;
        }

        /* Pass 2: the thread's column sums over its rows ys + ty, ys + ty + R, ..., and its
         * columns' largest raw values (for saturation) from the same loads. */
        typedef raw_max<T> RM;
        acc_t a0[4] = {0, 0, 0, 0}, a1[4] = {0, 0, 0, 0};
        typename RM::type mx[4] = {RM::lowest(), RM::lowest(), RM::lowest(), RM::lowest()};
#pragma unroll 4
        for (int y = ys + ty; y < ye; y += R) {
            T p[4];
            load_group<T, LOAD>(frame + (size_t)y * a.stride, x, whole, mr, p);
            const acc_t wy = (acc_t)(y - ys);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                mx[j] = RM::max(mx[j], p[j]);
                acc_t v;
                if (EXACT) {
                    v = (acc_t)p[j]; /* 0 when not read */
                } else {
                    float u = 0.0f;
                    if (mv >> j & 1u) {
                        u = prepare(a, p[j], y, x + j);
                        if (a.conditioned)
                            u = sw_cm_condition(u, 0.0f, 1.0f, a.mode, thr[j], a.gamma);
                    }
                    v = (acc_t)u;
                }
                a0[j] += v;
                a1[j] += wy * v;
            }
        }
        store4<acc_t>(s0 + 4 * tid, a0);
        store4<acc_t>(s1 + 4 * tid, a1);
        /* the 4 columns' saturated flags, one byte each, in one 32-bit store */
        *(uint32_t *)(ssh + 4 * tid) = RM::at_level(mx[0], a) | RM::at_level(mx[1], a) << 8 |
                                       RM::at_level(mx[2], a) << 16 | RM::at_level(mx[3], a) << 24;
        __pipeline_wait_prior(0); /* this thread's item copies; the barrier shows them to all */
        __syncthreads();
        /* Row-group partials -> column totals (slot ty = 0 of each lenslet row). */
        if (R > 1)
            for (int c = tid; c < NZ * ncol; c += nthreads) {
                const int z = c / ncol, o = z * rcol + (c - z * ncol);
                acc_t u0 = s0[o], u1 = s1[o];
                unsigned m = ssh[o]; /* the column's saturated flag likewise */
                for (int r = 1; r < R; r++) {
                    u0 += s0[o + r * ncol];
                    u1 += s1[o + r * ncol];
                    m |= ssh[o + r * ncol];
                }
                s0[o] = u0;
                s1[o] = u1;
                ssh[o] = (uint8_t)m;
            }
        __syncthreads();

        /* Per lenslet: moments from its columns (Eq. 6), gs lanes each, butterfly reduction, one
         * lane finishes (Eq. 7). The loop count is the same for the whole block. */
        for (int b = 0; b < nitems; b += ngrp) {
            const int q = b + grp, z = q / nlt, k = q - z * nlt, iyq = iy0 + z;
            const bool act = q < nitems && iyq < a.iy_end;
            int xs = 0, c0 = 0;
            mom_t m00 = 0, m10 = 0, m01 = 0;
            unsigned sat = 0;
            if (act) {
                xs = cg_edge(a.x0, a.pitch, ix0 + k) + a.window;
                c0 = xs - cbase;
                const int c1 = cg_edge(a.x0, a.pitch, ix0 + k + 1) - a.window - cbase;
                const acc_t *t0 = s0 + z * rcol, *t1 = s1 + z * rcol;
                for (int c = c0 + lane; c < c1; c += gs) {
                    const mom_t u = (mom_t)t0[c];
                    m00 += u;
                    m10 += (mom_t)(c - c0) * u;
                    m01 += (mom_t)t1[c];
                    sat |= ssh[z * rcol + c];
                }
            }
            for (int o = gs >> 1; o > 0; o >>= 1) {
                m00 += __shfl_xor_sync(full, m00, o);
                m10 += __shfl_xor_sync(full, m10, o);
                m01 += __shfl_xor_sync(full, m01, o);
                sat |= __shfl_xor_sync(full, sat, o);
            }
            if (act && lane == 0) {
                const int l = iyq * a.nx + ix0 + k, ks = ksh[q];
                const size_t i = (size_t)f * (size_t)a.nl + (size_t)l;
                float *sx = NULL, *sy = NULL;
                double rx = 0.0, ry = 0.0;
                if (a.slopes && ks >= 0) {
                    float *sf = a.slopes + (size_t)f * 2 * (size_t)a.nslopes;
                    sx = sf + (a.interleaved ? 2 * (size_t)ks : (size_t)ks);
                    sy = a.interleaved ? sx + 1 : sf + (size_t)a.nslopes + (size_t)ks;
                    rx = rxs[q];
                    ry = rys[q];
                }
                const int ysq = cg_edge(a.y0, a.pitch, iyq) + a.window;
                /* in the mask <=> a slope index (centroid.c) */
                sw_cm_finish((double)m00, (double)m10, (double)m01, xs, ysq, ks >= 0, (int)sat,
                             a.drop, rx, ry, a.x ? a.x + i : NULL, a.y ? a.y + i : NULL,
                             a.inten ? a.inten + i : NULL, a.flag ? a.flag + i : NULL,
                             a.satflag ? a.satflag + i : NULL, sx, sy,
                             a.status ? a.status + i : NULL, a.xvar ? a.xvar + i : NULL,
                             a.yvar ? a.yvar + i : NULL, a.snr ? a.snr + i : NULL);
            }
        }
        __syncthreads(); /* shared memory is reused by the next frame */
    }
    /* COPY in bands: every copy of the run has arrived once all blocks are here (each waited
     * for a flag that follows the copies before it); the last block clears the flags, so that
     * none keeps a mark a later run could take for its own */
    if (a.band_flag && tid == 0) {
        __threadfence();
        const unsigned int total = gridDim.x * gridDim.y * gridDim.z;
        if (atomicAdd(a.band_done, 1u) == total - 1u) {
            for (int b = 0; b < SW_CENTROID_MAX_BANDS; b++)
                *(volatile uint32_t *)(a.band_flag + b) = 0u;
            *(volatile unsigned int *)a.band_done = 0u;
            __threadfence();
        }
    }
}

typedef void (*cg_kernel_fn)(const cg_args);

template <typename T> static cg_kernel_fn pick(int load, int exact)
{
    if (load == CG_LOAD_VEC)
        return exact ? cog_kernel<T, CG_LOAD_VEC, true> : cog_kernel<T, CG_LOAD_VEC, false>;
    if (load == CG_LOAD_SCALAR)
        return exact ? cog_kernel<T, CG_LOAD_SCALAR, true> : cog_kernel<T, CG_LOAD_SCALAR, false>;
    return exact ? cog_kernel<T, CG_LOAD_BYTES, true> : cog_kernel<T, CG_LOAD_BYTES, false>;
}

template <> cg_kernel_fn pick<float>(int load, int exact)
{
    (void)exact; /* f32 frames are never summed exactly */
    if (load == CG_LOAD_VEC)
        return cog_kernel<float, CG_LOAD_VEC, false>;
    if (load == CG_LOAD_SCALAR)
        return cog_kernel<float, CG_LOAD_SCALAR, false>;
    return cog_kernel<float, CG_LOAD_BYTES, false>;
}

/* ------------------------------------------------------------------ the generic path */

/*
 * The methods, error bars and status codes of centroid.h (all but the fast CoG): sw_cmb_measure
 * (centroid_method.h), the CPU's code, run by a group of 2^lg lanes of one warp per (lenslet,
 * frame), 2^lg chosen for the region's size (cm_shape: about 8-16 pixels per lane, 1 lane for a
 * 4 x 4 region, 16 for 11 x 11, 32 from 16 x 16 up), several groups per warp and
 * 32 / 2^lg * (warps) lenslets per block. The group loads its region after steps 1-3 (as
 * centroid.c's cpu_generic_lenslet: LUT, v - dark, v * flat, each rounded to float) once into
 * shared memory, with the template's region for CORRELATION, in the layout of sw_cmb_region (the
 * pixels a warp's lanes take in one step are 32 adjacent words: no bank conflicts); every pass of
 * the method then reads shared memory, and its sums are reduced within the group by shuffles
 * (xor butterflies over the group's lanes only: no __syncthreads, no shared memory, the same bits
 * in every lane since a + b = b + a). Groups of one warp may take different branches (a masked
 * lenslet, a WCOG that stops early): the shuffles and __syncwarp name the group's lanes only.
 * Lane 0 of the group writes the lenslet's results.
 */
#define CM_WARPS 4 /* warps per block (fewer when the regions need the shared memory) */
#define CM_MIN_BLOCKS                                                                              \
    6 /* resident blocks per SM the registers must allow (at most 80 a thread)                     \
       */

__device__ __forceinline__ void cm_sum(const sw_cmb_region *R, double *s, int k)
{
    for (int o = R->tn >> 1; o > 0; o >>= 1) {
#pragma unroll
        for (int q = 0; q < SW_CMB_MAXK; q++)
            if (q < k)
                s[q] += __shfl_xor_sync(R->mask, s[q], o);
    }
}

__device__ __forceinline__ void cm_max(const sw_cmb_region *R, double *s, int k)
{
    for (int o = R->tn >> 1; o > 0; o >>= 1) {
#pragma unroll
        for (int q = 0; q < SW_CMB_MAXK; q++)
            if (q < k)
                s[q] = fmax(s[q], __shfl_xor_sync(R->mask, s[q], o));
    }
}

__device__ __forceinline__ uint32_t cm_usum(const sw_cmb_region *R, uint32_t x)
{
    for (int o = R->tn >> 1; o > 0; o >>= 1)
        x += __shfl_xor_sync(R->mask, x, o);
    return x;
}

__device__ __forceinline__ uint32_t cm_umax(const sw_cmb_region *R, uint32_t x)
{
    for (int o = R->tn >> 1; o > 0; o >>= 1)
        x = max(x, __shfl_xor_sync(R->mask, x, o));
    return x;
}

__device__ __forceinline__ uint64_t cm_umax64(const sw_cmb_region *R, uint64_t x)
{
    for (int o = R->tn >> 1; o > 0; o >>= 1) {
        const uint64_t y = __shfl_xor_sync(R->mask, (unsigned long long)x, o);
        x = y > x ? y : x;
    }
    return x;
}

/* The 16 largest of the group's descending lists (SW_CMB_TOP16): per butterfly step, the larger of
 * my k-th and the partner's (15 - k)-th entry (a bitonic sequence holding the 16 largest of both
 * lists; the partner gets the same entries in reverse order), sorted by a bitonic merge. */
__device__ __forceinline__ void cm_top16(const sw_cmb_region *R, uint32_t *t)
{
    for (int o = R->tn >> 1; o > 0; o >>= 1) {
        uint32_t b[16];
#pragma unroll
        for (int k = 0; k < 16; k++)
            b[k] = __shfl_xor_sync(R->mask, t[15 - k], o);
#pragma unroll
        for (int k = 0; k < 16; k++)
            t[k] = max(t[k], b[k]);
#pragma unroll
        for (int st = 8; st > 0; st >>= 1)
#pragma unroll
            for (int k = 0; k < 16; k++)
                if ((k & st) == 0) {
                    const uint32_t hi = max(t[k], t[k + st]), lo = min(t[k], t[k + st]);
                    t[k] = hi;
                    t[k + st] = lo;
                }
    }
}

#define SW_CMB_FN           __device__ static __forceinline__
#define SW_CMB_SUM(R, s, k) cm_sum((R), (s), (k))
#define SW_CMB_MAX(R, s, k) cm_max((R), (s), (k))
#define SW_CMB_USUM(R, x)   cm_usum((R), (x))
#define SW_CMB_UMAX(R, x)   cm_umax((R), (x))
#define SW_CMB_UMAX64(R, x) cm_umax64((R), (x))
#define SW_CMB_TOP16(R, t)  cm_top16((R), (t))
#define SW_CMB_SYNC(R)      __syncwarp((R)->mask)
#define SW_CMB_UNROLL       _Pragma("unroll 4")
#define SW_CMB_WREAL        float
#define SW_CMB_WEXP(x)      expf(x)
#include "centroid/centroid_method.h"

typedef struct cm_args {
    const char *img;
    size_t stride;
    int32_t width, height, nx, nl, nframes;
    double x0, y0, pitch; /* the geometry: the regions from cg_edge, as the fast kernel */
    int32_t window;
    const int32_t *slope_k;
    const double *ref_x, *ref_y;
    const float *lut, *dark, *flat, *corr;
    sw_cmb_params mp;
    uint32_t sat_u;
    float sat_f;
    int32_t lg;       /* 2^lg lanes per lenslet */
    int32_t rounds;   /* steps of a group's pixel loop over the largest region, ceil(n / 2^lg) */
    int32_t nscratch; /* sw_cmb_region.scratch doubles per group */
    int32_t nslopes;
    int interleaved;
    float *x, *y, *inten, *slopes, *xvar, *yvar, *snr;
    uint8_t *flag, *satflag, *status;
} cm_args;

template <typename T> __device__ __forceinline__ unsigned cm_saturated(const cm_args &a, T raw)
{
    return (uint32_t)raw >= a.sat_u;
}

template <> __device__ __forceinline__ unsigned cm_saturated<float>(const cm_args &a, float raw)
{
    return raw >= a.sat_f; /* false for a NaN level (none) */
}

/* Shared memory per warp: the regions of its groups (CORRELATION: and the templates' regions and
 * the work copies, each group's row-major in rounds 2^lg floats of its own), in floats. */
__host__ __device__ static inline size_t cm_warp_floats(int32_t rounds, int corr)
{
    return (size_t)rounds * 32 * (corr ? 3 : 1);
}

/* A raw pixel of the frame (row pointer, column x). */
template <typename T, bool ALIGNED> __device__ __forceinline__ T cm_raw(const char *row, int32_t x)
{
    return ALIGNED ? ((const T *)row)[x] : byte_load(row + (size_t)x * sizeof(T), T());
}

/* Steps 1-3 of centroid.h on a raw pixel at (x, y), as centroid.c's cpu_generic_lenslet: the LUT,
 * then v - dark, then v * flat, each rounded to float. */
template <typename T>
__device__ __forceinline__ float cm_prepare(const cm_args &a, T raw, int32_t x, int32_t y)
{
    float val;
    if (std::is_same<T, float>::value)
        val = (float)raw;
    else
        val = a.lut ? a.lut[(uint32_t)raw] : (float)raw;
    const size_t kp = (size_t)y * (size_t)a.width + (size_t)x;
    if (a.dark)
        val = __fsub_rn(val, a.dark[kp]);
    if (a.flat)
        val = __fmul_rn(val, a.flat[kp]);
    return val;
}

#define CM_BATCH 8 /* raw loads a lane has in flight */

/*
 * The lane's pixels of its region (q = t0, t0 + tn, ... < n, as SW_CMB_EACH) read from the frame
 * in batches of CM_BATCH: the batch's loads are issued together (a lane past the end reads pixel
 * 0 again and drops it), then f(value after steps 1-3, q, i, j) runs on each pixel in order.
 * Returns 1 when one of the lane's raw pixels is saturated.
 */
template <typename T, bool ALIGNED, typename F>
__device__ __forceinline__ unsigned cm_pixels(const cm_args &a, const char *frame,
                                              const sw_cmb_region &R, F &&f)
{
    unsigned sat = 0;
    int32_t q = R.t0, i = R.i0, j = R.j0;
    while (q < R.n) {
        T raw[CM_BATCH];
        int32_t ql = q, il = i, jl = j; /* the loads walk ahead */
#pragma unroll
        for (int u = 0; u < CM_BATCH; u++) {
            const bool in = ql < R.n;
            const char *row = frame + (size_t)(R.ys + (in ? jl : 0)) * a.stride;
            raw[u] = cm_raw<T, ALIGNED>(row, R.xs + (in ? il : 0));
            ql += R.tn;
            il += R.di;
            jl += R.dj + (il >= R.w);
            il -= il >= R.w ? R.w : 0;
        }
#pragma unroll
        for (int u = 0; u < CM_BATCH; u++) {
            if (q < R.n) {
                sat |= cm_saturated<T>(a, raw[u]);
                f(cm_prepare<T>(a, raw[u], R.xs + i, R.ys + j), q, i, j);
            }
            q += R.tn;
            i += R.di;
            j += R.dj + (i >= R.w);
            i -= i >= R.w ? R.w : 0;
        }
    }
    return sat;
}

/*
 * METHOD: the plan's method (a constant: each method's kernel holds its own code only, and its
 * reductions' sizes are known). The first pass of sw_cmb_measure (sw_cmb_scan_px) runs on the
 * values as they are loaded. DIRECT (sw_cmb_one_pass): that is the only pass, so the pixels go
 * from the frame into it and nowhere else; otherwise the loads also fill the region in shared
 * memory, which the further passes of sw_cmb_conclude read.
 */
template <typename T, bool ALIGNED, int METHOD, bool DIRECT>
__global__ void __launch_bounds__(CM_WARPS * 32, CM_MIN_BLOCKS) method_kernel(const cm_args a)
{
    extern __shared__ __align__(16) unsigned char smem[];
    const int32_t G = 1 << a.lg, lane = (int32_t)(threadIdx.x & 31), warp = threadIdx.x >> 5;
    const int32_t nwarps = (int32_t)(blockDim.x >> 5), gpw = 32 >> a.lg; /* groups per warp */
    const int32_t t0 = lane & (G - 1), gw = lane >> a.lg;
    const int32_t l = (int32_t)blockIdx.x * nwarps * gpw + warp * gpw + gw;
    if (l >= a.nl)
        return; /* the whole group: l is the group's */
    const bool corr = METHOD == SW_CMB_CORR;
    sw_cmb_params P = a.mp;
    P.method = METHOD;
    float *wv = (float *)smem + cm_warp_floats(a.rounds, corr) * (size_t)warp;
    float *v = wv + gw * G; /* the group's element 0; element k * 32 + t0 is its pixel k G + t0 */
    /* CORRELATION: the template and the work copy row-major, rounds G >= n floats a group */
    float *r = wv + (size_t)a.rounds * 32 + (size_t)gw * ((size_t)a.rounds << a.lg);
    double *scratch =
        (double *)(smem +
                   (cm_warp_floats(a.rounds, corr) * (size_t)nwarps * sizeof(float) + 7) / 8 * 8) +
        (size_t)(warp * gpw + gw) * (size_t)a.nscratch;
    const int32_t ix = l % a.nx, iy = l / a.nx;
    /* the region from the geometry (checked against the plan's at create): the pixel loads wait
     * for no table */
    const int32_t xs = cg_edge(a.x0, a.pitch, ix) + a.window,
                  ys = cg_edge(a.y0, a.pitch, iy) + a.window;
    const int32_t k = a.slope_k[l];
    sw_cmb_region R;
    R.v = DIRECT ? NULL : v;
    R.r = corr ? r : NULL;
    R.cw = corr ? r + (size_t)a.rounds * 32 : NULL; /* the same place in the next array */
    R.scratch = a.nscratch ? scratch : NULL;
    R.w = cg_edge(a.x0, a.pitch, ix + 1) - a.window - xs;
    R.h = cg_edge(a.y0, a.pitch, iy + 1) - a.window - ys;
    R.xs = xs;
    R.ys = ys;
    R.rx = a.ref_x[l];
    R.ry = a.ref_y[l];
    R.in_mask = k >= 0;
    R.t0 = t0;
    R.tn = G;
    R.lg = a.lg;
    R.ws = 32;
    R.mask = G == 32 ? 0xFFFFFFFFu : ((1u << G) - 1u) << (gw * G);
    sw_cmb_layout(&R);
    for (int32_t f = (int32_t)blockIdx.y; f < a.nframes; f += (int32_t)gridDim.y) {
        const char *frame = a.img + (size_t)f * (size_t)a.height * a.stride;
        sw_cmb_out o;
        sw_cmb_scan A; /* the first pass rides on the loads (sw_cmb_measure's first loop) */
        sw_cmb_scan_init(&P, &A);
        A.one = DIRECT; /* the host's choice (sw_cmb_one_pass), a constant for the compiler */
        if (DIRECT) {
            A.fused = 1; /* implied by sw_cmb_one_pass */
            A.ring = 0;
            const unsigned sat =
                cm_pixels<T, ALIGNED>(a, frame, R, [&](float val, int32_t q, int32_t i, int32_t j) {
                    sw_cmb_scan_px(&P, &A, val, q, i, j, R.w, R.h);
                });
            R.sat = cm_umax(&R, sat) != 0;
        } else {
            __syncwarp(R.mask); /* the last frame's passes have read the region */
            const unsigned sat =
                cm_pixels<T, ALIGNED>(a, frame, R, [&](float val, int32_t q, int32_t i, int32_t j) {
                    const int32_t e = sw_cmb_ix(&R, q);
                    v[e] = val;
                    if (corr)
                        r[q] = a.corr[(size_t)(ys + j) * (size_t)a.width + (size_t)(xs + i)];
                    sw_cmb_scan_px(&P, &A, val, q, i, j, R.w, R.h);
                });
            R.sat = cm_umax(&R, sat) != 0;
            __syncwarp(R.mask); /* the region is in shared memory */
        }
        sw_cmb_conclude(&P, &R, &A, &o);
        if (t0 == 0) {
            const size_t i = (size_t)f * (size_t)a.nl + (size_t)l;
            if (a.x)
                a.x[i] = (float)o.x;
            if (a.y)
                a.y[i] = (float)o.y;
            if (a.inten)
                a.inten[i] = (float)o.inten;
            if (a.flag)
                a.flag[i] = (uint8_t)o.valid;
            if (a.satflag)
                a.satflag[i] = (uint8_t)(R.sat != 0);
            if (a.status)
                a.status[i] = (uint8_t)o.status;
            if (a.xvar)
                a.xvar[i] = (float)o.vx;
            if (a.yvar)
                a.yvar[i] = (float)o.vy;
            if (a.snr)
                a.snr[i] = (float)o.snr;
            if (a.slopes && k >= 0) {
                const size_t ns = (size_t)a.nslopes;
                float *sl = a.slopes + (size_t)f * 2 * ns;
                float *sx = a.interleaved ? sl + 2 * (size_t)k : sl + k;
                float *sy = a.interleaved ? sx + 1 : sl + ns + k;
                *sx = o.valid ? (float)((double)(float)o.x - R.rx) : 0.0f;
                *sy = o.valid ? (float)((double)(float)o.y - R.ry) : 0.0f;
            }
        }
    }
}

typedef void (*cm_kernel_fn)(const cm_args);

template <int M, bool D> static cm_kernel_fn cm_pick_m(sw_pixel_type t, bool aligned)
{
    if (t == SW_PIX_U8)
        return method_kernel<uint8_t, true, M, D>;
    if (t == SW_PIX_U16)
        return aligned ? method_kernel<uint16_t, true, M, D> : method_kernel<uint16_t, false, M, D>;
    return aligned ? method_kernel<float, true, M, D> : method_kernel<float, false, M, D>;
}

/* The kernel of a plan's pixel type and method; direct: sw_cmb_one_pass (COG, QUADCELL only). */
static cm_kernel_fn cm_pick(sw_pixel_type t, bool aligned, int method, bool direct)
{
    switch (method) {
    case SW_CMB_WCOG: return cm_pick_m<SW_CMB_WCOG, false>(t, aligned);
    case SW_CMB_LOCAL: return cm_pick_m<SW_CMB_LOCAL, false>(t, aligned);
    case SW_CMB_BRIGHT: return cm_pick_m<SW_CMB_BRIGHT, false>(t, aligned);
    case SW_CMB_CORR: return cm_pick_m<SW_CMB_CORR, false>(t, aligned);
    case SW_CMB_QUAD:
        return direct ? cm_pick_m<SW_CMB_QUAD, true>(t, aligned)
                      : cm_pick_m<SW_CMB_QUAD, false>(t, aligned);
    default:
        return direct ? cm_pick_m<SW_CMB_COG, true>(t, aligned)
                      : cm_pick_m<SW_CMB_COG, false>(t, aligned);
    }
}

/* Dynamic shared memory of a block of the generic kernel with `warps` warps. */
static size_t cm_block_smem(const sw_centroid_plan *plan, int lg, int warps)
{
    if (sw_cmb_one_pass(&plan->mp))
        return 0; /* no region in shared memory, no scratch */
    const int32_t npix = plan->wmax * plan->hmax;
    const int32_t rounds = (npix + (1 << lg) - 1) >> lg;
    size_t bytes = cm_warp_floats(rounds, plan->corr_ref != NULL) * (size_t)warps * sizeof(float);
    bytes = (bytes + 7) / 8 * 8;
    return bytes + (size_t)warps * (size_t)(32 >> lg) * plan->nscratch * sizeof(double);
}

/* Warps per block for 2^lg lanes per lenslet: CM_WARPS, fewer when the regions would not fit
 * the shared memory (optin: the device's per-block maximum). */
static int cm_warps_for(const sw_centroid_plan *plan, int lg, size_t optin)
{
    int nw = CM_WARPS;
    while (nw > 1 && cm_block_smem(plan, lg, nw) > optin)
        nw /= 2;
    return nw;
}

/* Threads of kernel k the GPU holds at once with 2^lg lanes per lenslet (its registers and
 * shared memory permitting). */
static int64_t cm_resident(const sw_centroid_plan *plan, cm_kernel_fn k, int sms, size_t optin,
                           int lg)
{
    const int nw = cm_warps_for(plan, lg, optin);
    int blocks = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, 32 * nw,
                                                      cm_block_smem(plan, lg, nw)) != cudaSuccess) {
        cudaGetLastError();
        blocks = CM_MIN_BLOCKS;
    }
    return (int64_t)sms * blocks * 32 * nw;
}

/*
 * The generic kernel's shape: 2^lg lanes per lenslet (SPOTWAVE_CENTROID_LANES = 1, 2, ..., 32
 * overrides, for measurements) and warps per block (cm_warps_for). The smallest group that leaves
 * at most 16 pixels of the largest region to a lane, then more lanes (down to 4 pixels a lane)
 * while one frame's lenslets with the larger group still fit in the threads the GPU holds at once
 * (k's occupancy): a lenslet costs a chain of its lane's pixels and a few fixed steps (the
 * reductions, the finish), so a second partial wave of short chains costs more than one wave of
 * longer ones. A few pixels per lane and short reductions for small regions, many lanes for
 * large ones.
 */
static void cm_shape(const sw_centroid_plan *plan, cm_kernel_fn k, int sms, size_t optin, int *lg,
                     int *warps)
{
    const int32_t npix = plan->wmax * plan->hmax;
    int g = 0;
    while (g < 5 && npix > (16 << g))
        g++;
    while (g < 5 && npix >= (8 << g) &&
           ((int64_t)plan->nl << (g + 1)) <= cm_resident(plan, k, sms, optin, g + 1))
        g++;
    const char *env = getenv("SPOTWAVE_CENTROID_LANES");
    if (env) {
        const int want = atoi(env);
        for (int t = 0; t <= 5; t++)
            if (want == 1 << t)
                g = t;
    }
    *lg = g;
    *warps = cm_warps_for(plan, g, optin);
}

/* ------------------------------------------------------------------ launch shape */

/* The largest number of lenslets per tile such that every tile (lenslets [t L, t L + L)) spans
 * at most tx groups of 4 pixels aligned to the row start. */
static int tile_lenslets(const sw_centroid_plan *plan, int tx)
{
    int L = plan->nx < 4 * tx ? plan->nx : 4 * tx; /* a lenslet has at least 1 column */
    for (; L > 1; L--) {
        int ok = 1;
        for (int ix0 = 0; ix0 < plan->nx && ok; ix0 += L) {
            const int ix1 = ix0 + L < plan->nx ? ix0 + L : plan->nx;
            ok = (plan->xe[ix1 - 1] - 1) / 4 - plan->xs[ix0] / 4 + 1 <= tx;
        }
        if (ok)
            break;
    }
    return L;
}

/*
 * The launch shape:
 *   TX:  groups per tile, 32, or 64 when a lenslet spans more than 32 groups (seed Eq. 11:
 *        n_packets = floor((d + 6) / 4) <= 33 for d <= 128);
 *   LPT: lenslets per tile, as many as fit in TX groups;
 *   R:   row groups, for about RPT rows per thread (RPT loads in flight per thread), at most
 *        CG_THREADS / TX. RPT: 2 when the plan's largest batch is read by fewer loads than the
 *        GPU holds threads, up to 8 for large batches (fewer, longer-lived blocks);
 *   NZ:  lenslet rows per block, to fill CG_THREADS threads (small lenslets), at most ny;
 *   gs:  lanes per lenslet in the finishing reductions, the power of two that gives each lane
 *        about 4 columns.
 */
static void choose_shape(const sw_centroid_plan *plan, cg_gpu *g)
{
    int wmax = 1, hmax = 1, span = 1;
    long rows = 0;
    for (int ix = 0; ix < plan->nx; ix++) {
        const int w = plan->xe[ix] - plan->xs[ix];
        const int sp = (plan->xe[ix] - 1) / 4 - plan->xs[ix] / 4 + 1;
        wmax = w > wmax ? w : wmax;
        span = sp > span ? sp : span;
    }
    for (int iy = 0; iy < plan->ny; iy++) {
        const int h = plan->ye[iy] - plan->ys[iy];
        hmax = h > hmax ? h : hmax;
        rows += h;
    }
    g->tx = span <= 32 ? 32 : CG_MAX_TX;
    g->lpt = tile_lenslets(plan, g->tx);
    g->ntiles = (plan->nx + g->lpt - 1) / g->lpt;
    /* row loads of the largest batch over the threads the GPU holds (4 blocks of 256 per SM) */
    const double loads = (double)g->ntiles * g->tx * (double)rows * plan->p.max_frames;
    const double held = (double)(plan->ctx->multiprocessors > 0 ? plan->ctx->multiprocessors : 1) *
                        CG_MIN_BLOCKS * CG_THREADS;
    int rpt = 2;
    while (rpt < 8 && loads > rpt * held)
        rpt *= 2;
    g->r = (hmax + rpt - 1) / rpt;
    if (g->r > CG_THREADS / g->tx)
        g->r = CG_THREADS / g->tx;
    g->nz = CG_THREADS / (g->tx * g->r);
    if (g->nz > plan->ny)
        g->nz = plan->ny;
    g->gs = 1;
    while (g->gs < 32 && 4 * g->gs < wmax)
        g->gs *= 2;
    const size_t nthreads = (size_t)g->tx * g->r * g->nz;
    const size_t nitems = (size_t)g->nz * g->lpt;
    g->smem = 2 * 4 * nthreads * sizeof(uint32_t) +
              nitems * (2 * sizeof(double) + sizeof(int32_t) + sizeof(float)) +
              4 * nthreads * sizeof(uint8_t);
}

/* ------------------------------------------------------------------ plan */

/* Allocates n elements on the device and queues the copy of src (when not NULL) on the context's
 * stream, which orders it before every run. */
template <typename V>
static sw_status upload(sw_centroid_plan *plan, V **dst, const V *src, size_t n)
{
    SW_CU(cudaMalloc((void **)dst, (n ? n : 1) * sizeof(V)));
    if (n > 0 && src)
        SW_CU(cudaMemcpyAsync(*dst, src, n * sizeof(V), cudaMemcpyHostToDevice, stream_of(plan)));
    return SW_OK;
}

extern "C" sw_status sw_centroid_gpu_create(sw_centroid_plan *plan)
{
    const sw_centroid_params *p = &plan->p;
    const sw_sh_geometry *geo = &p->geometry;
    SW_CU(cudaSetDevice(plan->ctx->device));

    /* The kernel computes the pixel regions itself: they must be the plan's. */
    for (int32_t ix = 0; ix < plan->nx; ix++)
        if (cg_edge(geo->x0, geo->pitch_px, ix) + p->window != plan->xs[ix] ||
            cg_edge(geo->x0, geo->pitch_px, ix + 1) - p->window != plan->xe[ix])
            return sw_fail(plan->ctx, SW_EINTERNAL,
                           "centroid: the GPU's pixel region of lenslet column %d differs from "
                           "the plan's",
                           ix);
    for (int32_t iy = 0; iy < plan->ny; iy++)
        if (cg_edge(geo->y0, geo->pitch_px, iy) + p->window != plan->ys[iy] ||
            cg_edge(geo->y0, geo->pitch_px, iy + 1) - p->window != plan->ye[iy])
            return sw_fail(plan->ctx, SW_EINTERNAL,
                           "centroid: the GPU's pixel region of lenslet row %d differs from the "
                           "plan's",
                           iy);

    cg_gpu *g = (cg_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "centroid: out of memory");
    plan->gpu = g;
    SW_TRY(sw_event_pair_create(SW_CUDA_CTX, SW_CUDA_STAGE, &g->ev));
    SW_CU(cudaDeviceGetAttribute(&g->uva, cudaDevAttrUnifiedAddressing, plan->ctx->device));
    g->copy_block = cg_size_env("SPOTWAVE_CENTROID_COPY_BLOCK", CG_COPY_BLOCK);
    g->map_frames = cg_size_env("SPOTWAVE_CENTROID_MAP_FRAMES", CG_MAP_FRAMES);
    choose_shape(plan, g);

    const size_t nl = (size_t)plan->nl, npix = (size_t)p->width * (size_t)p->height;
    if (plan->fraction)
        SW_TRY(upload(plan, &g->col_ix, plan->col_ix, (size_t)(plan->col1 - plan->col0)));
    SW_TRY(upload(plan, &g->slope_k, plan->slope_k, nl));
    SW_TRY(upload(plan, &g->ref_x, plan->ref_x, nl));
    SW_TRY(upload(plan, &g->ref_y, plan->ref_y, nl));
    if (plan->dark)
        SW_TRY(upload(plan, &g->dark, plan->dark, npix));
    if (plan->flat)
        SW_TRY(upload(plan, &g->flat, plan->flat, npix));
    if (plan->lut)
        SW_TRY(upload(plan, &g->lut, plan->lut, p->type == SW_PIX_U8 ? (size_t)256 : 65536));

    if (plan->path == SW_CENTROID_COPY) {
        SW_CU(cudaMallocPitch(&g->frames, &g->frames_pitch,
                              (size_t)p->width * sw_pixel_size(p->type),
                              (size_t)p->max_frames * (size_t)p->height));
        /* the bands' copy stream, flags and marks (run_bands); bands only where a copy can run
         * beside a kernel (the banded kernel waits for copies) */
        int engines = 0;
        SW_CU(cudaDeviceGetAttribute(&engines, cudaDevAttrAsyncEngineCount, plan->ctx->device));
        plan->copy_overlap = engines > 0;
        SW_CU(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking));
        SW_CU(cudaEventCreateWithFlags(&g->start, cudaEventDisableTiming));
        SW_CU(cudaMalloc(&g->band_flag, SW_CENTROID_MAX_BANDS * sizeof(uint32_t)));
        SW_CU(cudaMemsetAsync(g->band_flag, 0, SW_CENTROID_MAX_BANDS * sizeof(uint32_t),
                              stream_of(plan)));
        SW_CU(cudaMalloc(&g->band_done, sizeof(unsigned int)));
        SW_CU(cudaMemsetAsync(g->band_done, 0, sizeof(unsigned int), stream_of(plan)));
        SW_CU(cudaHostAlloc(&g->marks, (CG_MARKS + 1) * sizeof(uint32_t), cudaHostAllocDefault));
        for (uint32_t v = 0; v <= CG_MARKS; v++)
            g->marks[v] = v;
    }
    const size_t n = (size_t)p->max_frames * nl, ns = (size_t)p->max_frames * 2 * plan->nslopes;
    SW_TRY(upload<char>(plan, &g->res, NULL, sw_cr_layout_of(n, ns).bytes));
    if (!plan->fast) {
        if (plan->corr_ref)
            SW_TRY(upload(plan, &g->corr, plan->corr_ref, npix));
        int optin = 0, sms = 0;
        SW_CU(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                     plan->ctx->device));
        SW_CU(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, plan->ctx->device));
        g->cm_direct = sw_cmb_one_pass(&plan->mp);
        /* The kernels may take up to the device's maximum (never less: another plan with the
         * same kernel may need more than this one); the occupancy below is computed with it. */
        for (int al = 0; al < 2; al++)
            SW_CU(cudaFuncSetAttribute(cm_pick(p->type, al != 0, plan->mp.method, g->cm_direct),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
        /* the aligned and unaligned kernels differ in their loads only */
        cm_shape(plan, cm_pick(p->type, true, plan->mp.method, g->cm_direct), sms, (size_t)optin,
                 &g->cm_lg, &g->cm_warps);
        g->cm_smem = cm_block_smem(plan, g->cm_lg, g->cm_warps);
        if (g->cm_smem > (size_t)optin)
            return sw_fail(plan->ctx, SW_EUNSUPPORTED,
                           "centroid: the %s method needs %zu B of shared memory per block for "
                           "%dx%d px regions; this GPU gives %d B (use smaller regions or a "
                           "smaller correlation search)",
                           sw_centroid_method_string(p->method), g->cm_smem, plan->wmax, plan->hmax,
                           optin);
        sw_log(plan->ctx, SW_LOG_DEBUG,
               "centroid GPU, %s: %d lanes per lenslet, %d warps per block, %zu B shared%s",
               sw_centroid_method_string(p->method), 1 << g->cm_lg, g->cm_warps, g->cm_smem,
               g->cm_direct ? ", pixels straight from the frame (one pass)" : "");
    }
    SW_CU(cudaStreamSynchronize(stream_of(plan))); /* the host copies may change after create */
    sw_log(plan->ctx, SW_LOG_DEBUG,
           "centroid GPU: blocks of %d pixel groups x %d row groups x %d lenslet rows, %d "
           "lenslets per tile, %d tiles per lenslet row, %d lanes per lenslet, %zu B shared",
           g->tx, g->r, g->nz, g->lpt, g->ntiles, g->gs, g->smem);
    return SW_OK;
}

extern "C" void sw_centroid_gpu_shape(const sw_centroid_plan *plan, int *r, int *gs)
{
    const cg_gpu *g = (const cg_gpu *)plan->gpu;
    *r = g ? g->r : 1;
    *gs = g ? g->gs : 1;
}

extern "C" sw_status sw_centroid_gpu_set_reference(sw_centroid_plan *plan)
{
    cg_gpu *g = (cg_gpu *)plan->gpu;
    const size_t bytes = (size_t)plan->nl * sizeof(double);
    SW_CU(cudaSetDevice(plan->ctx->device));
    /* From pageable memory: the source is staged before the call returns. */
    SW_CU(cudaMemcpyAsync(g->ref_x, plan->ref_x, bytes, cudaMemcpyHostToDevice, stream_of(plan)));
    SW_CU(cudaMemcpyAsync(g->ref_y, plan->ref_y, bytes, cudaMemcpyHostToDevice, stream_of(plan)));
    return SW_OK;
}

/* The device address of pinned host memory (the same pointer under unified addressing). */
static sw_status mapped(sw_centroid_plan *plan, void *host, void **dev)
{
    cg_gpu *g = (cg_gpu *)plan->gpu;
    if (!host || g->uva) {
        *dev = host;
        return SW_OK;
    }
    SW_CU(cudaHostGetDevicePointer(dev, host, 0));
    return SW_OK;
}

static int load_mode(const void *data, size_t stride, size_t psize)
{
    const uintptr_t a = (uintptr_t)data;
    if (a % (4 * psize) == 0 && stride % (4 * psize) == 0)
        return CG_LOAD_VEC;
    if (a % psize == 0 && stride % psize == 0)
        return CG_LOAD_SCALAR;
    return CG_LOAD_BYTES;
}

/*
 * One frame on the COPY path in nb bands, one kernel. Band b takes the lenslet rows
 * [band_end[b - 1], band_end[b]) (band_end[b] = ny (b + 1) / nb) and needs the pixel rows up to
 * the last one of its last lenslet row (ye). The plan's copy stream copies, band after band, the
 * rows not copied yet (from the first lenslet row's ys: rows outside every region are never
 * read), each followed by a 4-byte copy that sets band_flag[b] to this run's mark (a value from
 * the plan's pinned table of marks, never written after create, so that no copy still queued
 * can read a later run's mark). The kernel is launched once every copy is queued (about 2 us of
 * host time a band, less than a band's copy; and a launch that blocks the host until the kernel
 * has finished, CUDA_LAUNCH_BLOCKING or a tool that serialises the work, still finds them
 * queued); it waits for nothing, and each block polls the flag of its last lenslet row's band
 * before it reads a pixel. Both copies are done by the copy engine, so a block that polls never
 * stands in the way of the data it waits for; the last block to finish clears the flags (a run
 * whose kernel did not run leaves its marks, which the next run does not use). The copies start
 * after the work already queued on the context's stream (`start`: the last run's kernel reads
 * the frame buffer); the kernel, on that stream, ends after every copy. Each lenslet is summed by
 * the same threads in the same order as without bands: the same bits.
 */
static sw_status copy_band_rows(sw_centroid_plan *plan, const sw_image *frames, int32_t *copied,
                                int32_t need, int b, uint32_t mark)
{
    cg_gpu *g = (cg_gpu *)plan->gpu;
    const size_t row = (size_t)plan->p.width * sw_pixel_size(plan->p.type);
    if (need > *copied) {
        SW_CU(cudaMemcpy2DAsync(
            (char *)g->frames + (size_t)*copied * g->frames_pitch, g->frames_pitch,
            (const char *)frames->data + (size_t)*copied * frames->stride, frames->stride, row,
            (size_t)(need - *copied), cudaMemcpyHostToDevice, g->copy));
        *copied = need;
    }
    SW_CU(cudaMemcpyAsync(g->band_flag + b, g->marks + mark, sizeof(uint32_t),
                          cudaMemcpyHostToDevice, g->copy));
    return SW_OK;
}

static sw_status run_bands(sw_centroid_plan *plan, const sw_image *frames, int nb, cg_kernel_fn k,
                           dim3 grid, dim3 block, cg_args a)
{
    cg_gpu *g = (cg_gpu *)plan->gpu;
    cudaStream_t s = stream_of(plan);
    g->mark = g->mark % CG_MARKS + 1; /* 1 .. CG_MARKS: never the flags' initial 0 */
    a.band_flag = g->band_flag;
    a.band_done = g->band_done;
    a.band_mark = g->mark;
    a.nbands = nb;
    for (int b = 0; b < nb; b++)
        a.band_end[b] = (int32_t)((int64_t)plan->ny * (b + 1) / nb);
    SW_CU(cudaEventRecord(g->start, s));
    SW_CU(cudaStreamWaitEvent(g->copy, g->start, 0));
    int32_t copied = plan->ys[0]; /* rows [ys[0], copied) are on their way */
    for (int b = 0; b < nb; b++)
        SW_TRY(copy_band_rows(plan, frames, &copied, plan->ye[a.band_end[b] - 1], b, g->mark));
    k<<<grid, block, g->smem, s>>>(a);
    SW_CU(cudaGetLastError());
    return SW_OK;
}

extern "C" sw_status sw_centroid_gpu_run(sw_centroid_plan *plan, const sw_image *frames,
                                         int32_t nframes, sw_centroid_result *out)
{
    cg_gpu *g = (cg_gpu *)plan->gpu;
    const sw_centroid_params *p = &plan->p;
    cudaStream_t s = stream_of(plan);
    SW_CU(cudaSetDevice(plan->ctx->device));
    const size_t psize = sw_pixel_size(p->type);
    cg_args a;
    memset(&a, 0, sizeof a);

    /* Frames (COPY in bands: the copies go with the kernels, below). AUTO reads a small pinned
     * frame in place (cg_sizes). */
    sw_centroid_path path = plan->path;
    const size_t frame_bytes = (size_t)frames->stride * (size_t)nframes * (size_t)p->height;
    if (p->path == SW_CENTROID_AUTO && path == SW_CENTROID_COPY && g->uva &&
        frames->memory == SW_MEM_PINNED && frame_bytes <= g->map_frames)
        path = SW_CENTROID_MAPPED;
    /* pinned frames only: a copy from pageable memory is staged by the host, banded or not */
    const int nb = path == SW_CENTROID_COPY && nframes == 1 && frames->memory == SW_MEM_PINNED
                       ? sw_centroid_plan_bands(plan)
                       : 1;
    void *img = frames->data;
    size_t stride = frames->stride;
    if (path == SW_CENTROID_COPY) {
        if (nb == 1)
            SW_CU(cudaMemcpy2DAsync(g->frames, g->frames_pitch, frames->data, frames->stride,
                                    (size_t)p->width * psize, (size_t)nframes * (size_t)p->height,
                                    cudaMemcpyHostToDevice, s));
        img = g->frames;
        stride = g->frames_pitch;
    } else if (path == SW_CENTROID_MAPPED) {
        SW_TRY(mapped(plan, frames->data, &img));
    }

    /* Results: written in place (device results, and pinned results written over the bus on
     * every path: one kernel and no copies, where six copies of a few kB cost more than the
     * writes), or into the plan's block (sw_cr_layout of this run's frames) and copied (plain host
     * results, and pinned ones above g->copy_block bytes in the block sw_centroid_result_alloc
     * made: one copy per run of arrays asked for; cg_sizes). */
    const size_t nres = (size_t)nframes * (size_t)plan->nl;
    const size_t nsl = (size_t)nframes * 2 * (size_t)plan->nslopes;
    const sw_cr_layout L = sw_cr_layout_of(nres, nsl);
    const size_t res_bytes = nres * (4 * (!!out->x + !!out->y + !!out->intensity + !!out->x_var +
                                          !!out->y_var + !!out->snr) +
                                     (size_t)(!!out->valid + !!out->saturated + !!out->status)) +
                             (out->slopes ? nsl * sizeof(float) : 0);
    /* the caller's arrays at the block's offsets (a result of exactly this run's frames) */
    char *const hb = out->memory == SW_MEM_PINNED && out->frames == nframes
                         ? (char *)sw_centroid_result_block(out)
                         : NULL;
    const int one_block = hb != NULL && cr_in_block(out, hb, &L);
    const int direct = out->memory == SW_MEM_DEVICE ||
                       (out->memory == SW_MEM_PINNED && !(one_block && res_bytes > g->copy_block));
    if (direct && out->memory == SW_MEM_PINNED) {
        void *q;
        SW_TRY(mapped(plan, out->x, &q));
        a.x = (float *)q;
        SW_TRY(mapped(plan, out->y, &q));
        a.y = (float *)q;
        SW_TRY(mapped(plan, out->intensity, &q));
        a.inten = (float *)q;
        SW_TRY(mapped(plan, out->valid, &q));
        a.flag = (uint8_t *)q;
        SW_TRY(mapped(plan, out->saturated, &q));
        a.satflag = (uint8_t *)q;
        SW_TRY(mapped(plan, out->slopes, &q));
        a.slopes = (float *)q;
        SW_TRY(mapped(plan, out->status, &q));
        a.status = (uint8_t *)q;
        SW_TRY(mapped(plan, out->x_var, &q));
        a.xvar = (float *)q;
        SW_TRY(mapped(plan, out->y_var, &q));
        a.yvar = (float *)q;
        SW_TRY(mapped(plan, out->snr, &q));
        a.snr = (float *)q;
    } else if (direct) {
        a.x = out->x;
        a.y = out->y;
        a.inten = out->intensity;
        a.flag = out->valid;
        a.satflag = out->saturated;
        a.slopes = out->slopes;
        a.status = out->status;
        a.xvar = out->x_var;
        a.yvar = out->y_var;
        a.snr = out->snr;
    } else {
        char *r = g->res;
        a.x = out->x ? (float *)(void *)(r + L.x) : NULL;
        a.y = out->y ? (float *)(void *)(r + L.y) : NULL;
        a.inten = out->intensity ? (float *)(void *)(r + L.intensity) : NULL;
        a.flag = out->valid ? (uint8_t *)(r + L.valid) : NULL;
        a.satflag = out->saturated ? (uint8_t *)(r + L.saturated) : NULL;
        a.slopes = out->slopes ? (float *)(void *)(r + L.slopes) : NULL;
        a.status = out->status ? (uint8_t *)(r + L.status) : NULL;
        a.xvar = out->x_var ? (float *)(void *)(r + L.x_var) : NULL;
        a.yvar = out->y_var ? (float *)(void *)(r + L.y_var) : NULL;
        a.snr = out->snr ? (float *)(void *)(r + L.snr) : NULL;
    }

    a.img = (const char *)img;
    a.stride = stride;
    a.width = p->width;
    a.height = p->height;
    a.nx = plan->nx;
    a.ny = plan->ny;
    a.nl = plan->nl;
    a.nframes = nframes;
    a.iy_base = 0;
    a.iy_end = plan->ny;
    a.x0 = p->geometry.x0;
    a.y0 = p->geometry.y0;
    a.pitch = p->geometry.pitch_px;
    a.window = p->window;
    a.lpt = g->lpt;
    a.ntiles = g->ntiles;
    a.nitems = g->nz * g->lpt;
    a.col0 = plan->col0;
    a.col1 = plan->col1;
    a.col_ix = g->col_ix;
    a.slope_k = g->slope_k;
    a.lut = g->lut;
    a.dark = g->dark;
    a.flat = g->flat;
    a.mode = (int)p->threshold_mode;
    a.fraction = plan->fraction;
    a.conditioned = p->threshold_mode != SW_THRESHOLD_NONE || p->gamma != 1.0;
    a.thr = (float)p->threshold;
    a.gamma = (float)p->gamma;
    a.frac = p->threshold;
    a.ref_x = g->ref_x;
    a.ref_y = g->ref_y;
    a.nslopes = plan->nslopes;
    a.interleaved = p->slope_layout == SW_SLOPES_INTERLEAVED;
    a.gs = g->gs;
    a.sat_u = plan->sat_u;
    a.sat_f = plan->sat_f;
    a.drop = p->drop_saturated;

    if (plan->timing)
        SW_CU(cudaEventRecord(g->ev.t0, s));
    if (!plan->fast) {
        cm_args m;
        memset(&m, 0, sizeof m);
        m.img = a.img;
        m.stride = stride;
        m.width = p->width;
        m.height = p->height;
        m.nx = plan->nx;
        m.nl = plan->nl;
        m.nframes = nframes;
        m.x0 = p->geometry.x0;
        m.y0 = p->geometry.y0;
        m.pitch = p->geometry.pitch_px;
        m.window = p->window;
        m.slope_k = g->slope_k;
        m.ref_x = g->ref_x;
        m.ref_y = g->ref_y;
        m.lut = g->lut;
        m.dark = g->dark;
        m.flat = g->flat;
        m.corr = g->corr;
        m.mp = plan->mp;
        m.sat_u = plan->sat_u;
        m.sat_f = plan->sat_f;
        m.lg = g->cm_lg;
        m.rounds = (plan->wmax * plan->hmax + (1 << g->cm_lg) - 1) >> g->cm_lg;
        m.nscratch = (int32_t)plan->nscratch;
        m.nslopes = plan->nslopes;
        m.interleaved = a.interleaved;
        m.x = a.x;
        m.y = a.y;
        m.inten = a.inten;
        m.slopes = a.slopes;
        m.xvar = a.xvar;
        m.yvar = a.yvar;
        m.snr = a.snr;
        m.flag = a.flag;
        m.satflag = a.satflag;
        m.status = a.status;
        const bool aligned = (uintptr_t)img % psize == 0 && stride % psize == 0;
        const int32_t per_block = g->cm_warps * (32 >> g->cm_lg); /* lenslets */
        const dim3 grid((unsigned)((plan->nl + per_block - 1) / per_block),
                        (unsigned)(nframes < 65535 ? nframes : 65535));
        cm_pick(p->type, aligned, plan->mp.method,
                g->cm_direct)<<<grid, 32 * g->cm_warps, g->cm_smem, s>>>(m);
        SW_CU(cudaGetLastError());
    } else {
        const int load = load_mode(img, stride, psize);
        const cg_kernel_fn k = p->type == SW_PIX_U8    ? pick<uint8_t>(load, plan->exact)
                               : p->type == SW_PIX_U16 ? pick<uint16_t>(load, plan->exact)
                                                       : pick<float>(load, 0);
        const int bands = (plan->ny + g->nz - 1) / g->nz;
        const dim3 grid((unsigned)(g->ntiles * bands),
                        (unsigned)(nframes < 65535 ? nframes : 65535));
        const dim3 block((unsigned)g->tx, (unsigned)g->r, (unsigned)g->nz);
        if (nb == 1) {
            k<<<grid, block, g->smem, s>>>(a);
            SW_CU(cudaGetLastError());
        } else {
            SW_TRY(run_bands(plan, frames, nb, k, grid, block, a));
        }
    }
    if (plan->timing)
        SW_CU(cudaEventRecord(g->ev.t1, s));

    if (!direct) {
        /* back to the caller's arrays: each run of consecutive arrays asked for in one copy when
         * they are sw_centroid_result_alloc's block, else one copy per array */
        const size_t sz[10] = {nres * 4, nres * 4, nres * 4, nsl * 4,  nres,
                               nres,     nres,     nres * 4, nres * 4, nres * 4};
        const size_t off[10] = {L.x,         L.y,      L.intensity, L.slopes, L.valid,
                                L.saturated, L.status, L.x_var,     L.y_var,  L.snr};
        void *const dst[10] = {out->x,         out->y,      out->intensity, out->slopes, out->valid,
                               out->saturated, out->status, out->x_var,     out->y_var,  out->snr};
        for (int k = 0; k < 10;) {
            if (!dst[k] || sz[k] == 0) {
                k++;
                continue;
            }
            int e = k + 1; /* [k, e): a run of arrays asked for, adjacent in the block */
            while (one_block && e < 10 && dst[e] && sz[e] > 0)
                e++;
            const size_t bytes = off[e - 1] + sz[e - 1] - off[k];
            SW_CU(cudaMemcpyAsync(dst[k], g->res + off[k], bytes, cudaMemcpyDeviceToHost, s));
            k = e;
        }
    }
    if (out->memory != SW_MEM_DEVICE)
        SW_CU(cudaStreamSynchronize(s));
    else if (plan->timing)
        SW_CU(cudaEventSynchronize(g->ev.t1));
    plan->kernel_us = -1.0;
    if (plan->timing) {
        float ms = 0.0f;
        SW_CU(cudaEventElapsedTime(&ms, g->ev.t0, g->ev.t1));
        plan->kernel_us = 1e3 * (double)ms;
    }
    return SW_OK;
}

extern "C" void sw_centroid_gpu_destroy(sw_centroid_plan *plan)
{
    cg_gpu *g = (cg_gpu *)plan->gpu;
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    cudaStreamSynchronize(stream_of(plan));
    cudaFree(g->col_ix);
    cudaFree(g->slope_k);
    cudaFree(g->dark);
    cudaFree(g->flat);
    cudaFree(g->lut);
    cudaFree(g->ref_x);
    cudaFree(g->ref_y);
    cudaFree(g->frames);
    cudaFree(g->res);
    cudaFree(g->corr);
    if (g->copy) {
        cudaStreamSynchronize(g->copy);
        cudaStreamDestroy(g->copy);
    }
    if (g->start)
        cudaEventDestroy(g->start);
    cudaFree(g->band_flag);
    cudaFree(g->band_done);
    if (g->marks)
        cudaFreeHost(g->marks);
    sw_event_pair_destroy(&g->ev);
    free(g);
    plan->gpu = NULL;
}

extern "C" void *sw_centroid_gpu_alloc(sw_context *ctx, size_t bytes, sw_memory memory)
{
    void *q = NULL;
    if (!ctx || cudaSetDevice(ctx->device) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    cudaError_t e =
        memory == SW_MEM_DEVICE
            ? cudaMalloc(&q, bytes ? bytes : 1)
            : cudaHostAlloc(&q, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return q;
}

extern "C" void sw_centroid_gpu_free(void *q, sw_memory memory)
{
    if (!q)
        return;
    if (memory == SW_MEM_DEVICE)
        cudaFree(q);
    else
        cudaFreeHost(q);
}
