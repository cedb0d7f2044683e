/*
 * Reichenbach's centroid algorithm on the GPU (search.h "Reichenbach"; seed 001 Sec. 3.2.2,
 * "GPU implementation of Reichenbach's"). search_reich.c is the reference; the decisions both
 * share are in search_reich.h, and this file is compiled with -fmad=false, so a GPU run gives
 * the CPU's peaks, spots, centroids and statuses to the last bit.
 *
 * Kernels, all on the context's stream, with no host synchronisation:
 *   rh_row_sums_kernel   automatic threshold: one warp per row, the lanes and shuffle tree of
 *                        search_reich.h (the CPU walks the same lanes and tree)
 *   rh_threshold_kernel  one block: the rows' 256 partials and the tree, T into device memory
 *   rh_peaks_kernel      step 1: one thread per pixel; the block's tile of 32 x 16 pixels and
 *                        its peak-box halo in shared memory (the seed's "each CUDA block loads
 *                        one tile to shared memory"), the row maxima, the peak test; a thread
 *                        that finds a peak computes its centre of mass (sw_sm_com_step_ex,
 *                        serially, from global memory) and stores it in the peak's cell
 *   rh_seed_kernel       step 2: one block: the mean start and the seed spot; clears the spots'
 *                        state
 *   rh_choose_kernel     each round: one warp per spot (the seed's "32 threads working in
 *                        parallel for each spot"): the claimant's prediction, its nearest free
 *                        peak over the cells (lanes over cells, a shuffle argmin), the claim
 *                        (atomicMin of the packed key)
 *   rh_resolve_kernel    each round: one thread per spot: the winners take their peaks and set
 *                        the round's "changed" flag
 *   rh_output_kernel     one thread per spot: positions, intensities, statuses.
 * The rounds are a fixed number of launches (cfg.rounds pairs); each returns at once when the
 * previous round's flag is 0, so the host never waits for the growth to end. The peak count is
 * copied into pinned host memory at the end of the run; sw_reich_gpu_last_peaks waits for the
 * stream before reading it.
 */
#include "centroid/search_reich.h"
#include "centroid/search_model.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SW_CU(call)                                                                                \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess)                                                                     \
            return sw_fail(ctx, e_ == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,            \
                           "reichenbach: CUDA call %s failed: %s", #call, cudaGetErrorString(e_)); \
    } while (0)

#define RH_FULL    0xffffffffu
#define RH_TW      32  /* peak tile: columns (threads in x)       */
#define RH_TH      16  /* peak tile: rows                          */
#define RH_TY      8   /* peak tile: threads in y (2 rows each)    */
#define RH_THREADS 256 /* 1-D kernels: threads per block           */
#define RH_WARPS   (RH_THREADS / 32)

/* Device scalars of a run, followed in the same allocation by the rounds' "changed" flags. */
struct rh_scal {
    double threshold;         /* T of the automatic threshold               */
    unsigned long long count; /* peaks found                                */
    int32_t seed;             /* the seed spot, -1 when none                */
    int32_t pad;
};

struct rh_gpu {
    int device;
    int32_t *cell_pix;
    double *cell_x, *cell_y, *cell_s0;
    uint8_t *taken;
    unsigned long long *claim;
    uint8_t *found;
    int32_t *peak_of, *choice;
    unsigned long long *key;
    double *fx, *fy;
    double *row_s, *row_q;
    long long *row_n;
    void *scal_block; /* rh_scal + rounds flags */
    size_t scal_bytes;
    long long *host_count; /* pinned */
    size_t smem;           /* dynamic shared memory of the peak kernel */
};

static cudaStream_t stream_of(const sw_context *ctx)
{
    return (cudaStream_t)sw_context_stream(ctx);
}

/* Pixel (x, y) of a device frame as a float (exact for u8, u16, f32). */
__device__ __forceinline__ float rh_pixel(const char *frame, size_t stride, sw_pixel_type t,
                                          int32_t x, int32_t y)
{
    const char *row = frame + (size_t)y * stride;
    if (t == SW_PIX_U8)
        return (float)((const uint8_t *)row)[x];
    if (t == SW_PIX_U16)
        return (float)((const uint16_t *)row)[x];
    return ((const float *)row)[x];
}

/* ---------------------------------------------------------------- threshold */

__global__ void rh_row_sums_kernel(const char *frame, size_t stride, sw_pixel_type type,
                                   int32_t width, int32_t height, double *row_s, double *row_q,
                                   long long *row_n)
{
    int32_t y = (int32_t)blockIdx.x * RH_WARPS + (int32_t)(threadIdx.x / 32);
    int lane = (int)(threadIdx.x % 32);
    if (y >= height)
        return;
    double a = 0.0, b = 0.0;
    long long n = 0;
    for (int32_t x = lane; x < width; x += SW_RH_LANES) {
        double d = (double)rh_pixel(frame, stride, type, x, y);
        if (isfinite(d)) {
            a = a + d;
            b = b + d * d;
            ++n;
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

__global__ void __launch_bounds__(SW_RH_PARTIALS)
    rh_threshold_kernel(int32_t height, const double *row_s, const double *row_q,
                        const long long *row_n, rh_scal *scal)
{
    __shared__ double ps[SW_RH_PARTIALS], pq[SW_RH_PARTIALS];
    __shared__ long long pn[SW_RH_PARTIALS];
    int t = (int)threadIdx.x;
    double a = 0.0, b = 0.0;
    long long n = 0;
    for (int32_t y = t; y < height; y += SW_RH_PARTIALS) {
        a = a + row_s[y];
        b = b + row_q[y];
        n += row_n[y];
    }
    ps[t] = a;
    pq[t] = b;
    pn[t] = n;
    __syncthreads();
    for (int o = SW_RH_PARTIALS / 2; o >= 1; o /= 2) {
        if (t < o) {
            ps[t] = ps[t] + ps[t + o];
            pq[t] = pq[t] + pq[t + o];
            pn[t] += pn[t + o];
        }
        __syncthreads();
    }
    if (t == 0)
        scal->threshold = sw_rh_threshold(ps[0], pq[0], (int64_t)pn[0]);
}

/* ---------------------------------------------------------------- step 1: peaks */

struct rh_cells {
    int32_t *pix;
    double *x, *y, *s0;
    uint8_t *taken;
    unsigned long long *claim;
};

__global__ void __launch_bounds__(RH_TW *RH_TY)
    rh_peaks_kernel(const char *frame, size_t stride, sw_rh_cfg c, int autot, rh_scal *scal,
                    rh_cells cells)
{
    extern __shared__ float rh_smem[];
    const int32_t h = c.half, tc = RH_TW + 2 * h, tr = RH_TH + 2 * h;
    float *V = rh_smem;            /* tr x tc: the tile and its halo (-Inf beyond the frame) */
    float *Hm = rh_smem + tr * tc; /* tr x RH_TW: the row maxima over [x - h, x + h]         */
    const int32_t gx0 = (int32_t)blockIdx.x * RH_TW, gy0 = (int32_t)blockIdx.y * RH_TH;
    const int tid = (int)(threadIdx.y * RH_TW + threadIdx.x);
    const double t = autot ? scal->threshold : c.threshold;

    for (int i = tid; i < tr * tc; i += RH_TW * RH_TY) {
        int32_t lx = i % tc, ly = i / tc;
        int32_t x = gx0 - h + lx, y = gy0 - h + ly;
        V[i] = (x >= 0 && x < c.width && y >= 0 && y < c.height)
                   ? rh_pixel(frame, stride, c.type, x, y)
                   : -INFINITY;
    }
    __syncthreads();
    for (int i = tid; i < tr * RH_TW; i += RH_TW * RH_TY) {
        int32_t lx = i % RH_TW, ly = i / RH_TW;
        const float *v = V + ly * tc + lx;
        float m = -INFINITY;
        for (int32_t j = 0; j <= 2 * h; ++j)
            m = sw_rh_fmax(m, v[j]);
        Hm[i] = m;
    }
    __syncthreads();

    const int32_t lx = (int32_t)threadIdx.x;
    for (int32_t ly = (int32_t)threadIdx.y; ly < RH_TH; ly += RH_TY) {
        int32_t x = gx0 + lx, y = gy0 + ly;
        if (x >= c.width || y >= c.height)
            continue;
        const float *row = V + (ly + h) * tc + lx; /* row[h] is the pixel */
        float p = row[h];
        if (!((double)p > t))
            continue;
        float up = -INFINITY, down = -INFINITY, left = -INFINITY, right = -INFINITY;
        for (int32_t j = 0; j < h; ++j) {
            up = sw_rh_fmax(up, Hm[(ly + j) * RH_TW + lx]);
            down = sw_rh_fmax(down, Hm[(ly + h + 1 + j) * RH_TW + lx]);
            left = sw_rh_fmax(left, row[j]);
            right = sw_rh_fmax(right, row[h + 1 + j]);
        }
        if (!sw_rh_is_peak(p, t, up, left, down, right))
            continue;
        double px, py, s0;
        int st = sw_sm_com_step_ex(frame, stride, c.type, c.width, c.height, (double)x, (double)y,
                                   (double)c.box, &px, &py, &s0);
        if (st == SW_SM_STEP_NONFINITE || st == SW_SM_STEP_EMPTY)
            continue;
        int64_t cell = (int64_t)(y / c.cell) * c.mw + x / c.cell;
        cells.pix[cell] = y * c.width + x;
        cells.x[cell] = px;
        cells.y[cell] = py;
        cells.s0[cell] = s0;
        cells.taken[cell] = 0;
        cells.claim[cell] = SW_RH_NO_KEY;
        atomicAdd(&scal->count, 1ull);
    }
}

/* ---------------------------------------------------------------- step 2: the seed */

__global__ void __launch_bounds__(SW_RH_PARTIALS)
    rh_seed_kernel(int32_t nspots, const double *sx, const double *sy, const uint8_t *active,
                   uint8_t *found, int32_t *choice, rh_scal *scal)
{
    __shared__ double ax[SW_RH_PARTIALS], ay[SW_RH_PARTIALS];
    __shared__ long long an[SW_RH_PARTIALS];
    __shared__ int32_t bk[SW_RH_PARTIALS];
    __shared__ double bd[SW_RH_PARTIALS];
    int t = (int)threadIdx.x;
    double a = 0.0, b = 0.0;
    long long n = 0;
    for (int32_t k = t; k < nspots; k += SW_RH_PARTIALS) {
        found[k] = 0;
        choice[k] = -1;
        if (sw_rh_searchable(active, sx, sy, k)) {
            a = a + sx[k];
            b = b + sy[k];
            ++n;
        }
    }
    ax[t] = a;
    ay[t] = b;
    an[t] = n;
    __syncthreads();
    for (int o = SW_RH_PARTIALS / 2; o >= 1; o /= 2) {
        if (t < o) {
            ax[t] = ax[t] + ax[t + o];
            ay[t] = ay[t] + ay[t + o];
            an[t] += an[t + o];
        }
        __syncthreads();
    }
    if (an[0] == 0) {
        if (t == 0)
            scal->seed = -1;
        return;
    }
    double mx = ax[0] / (double)an[0], my = ay[0] / (double)an[0];
    int32_t best = -1;
    double bdist = 0.0;
    for (int32_t k = t; k < nspots; k += SW_RH_PARTIALS) {
        if (!sw_rh_searchable(active, sx, sy, k))
            continue;
        double d2 = sw_rh_d2(sx[k], sy[k], mx, my);
        if (best < 0 || d2 < bdist) {
            best = k;
            bdist = d2;
        }
    }
    bk[t] = best;
    bd[t] = bdist;
    __syncthreads();
    for (int o = SW_RH_PARTIALS / 2; o >= 1; o /= 2) {
        if (t < o) {
            int32_t k2 = bk[t + o];
            double d2 = bd[t + o];
            if (k2 >= 0 && (bk[t] < 0 || d2 < bd[t] || (d2 == bd[t] && k2 < bk[t]))) {
                bk[t] = k2;
                bd[t] = d2;
            }
        }
        __syncthreads();
    }
    if (t == 0)
        scal->seed = bk[0];
}

/* ---------------------------------------------------------------- rounds */

struct rh_spots {
    uint8_t *found;
    int32_t *peak_of, *choice;
    unsigned long long *key;
    double *fx, *fy;
};

__global__ void __launch_bounds__(RH_THREADS)
    rh_choose_kernel(sw_rh_cfg c, int32_t rd, const unsigned int *changed, const rh_scal *scal,
                     const double *sx, const double *sy, const uint8_t *active, rh_cells cells,
                     rh_spots s)
{
    if (rd > 0 && changed[rd - 1] == 0)
        return;
    int64_t k64 = (int64_t)blockIdx.x * RH_WARPS + (int64_t)(threadIdx.x / 32);
    int lane = (int)(threadIdx.x % 32);
    if (k64 >= c.nspots)
        return;
    int32_t k = (int32_t)k64;
    if (!sw_rh_searchable(active, sx, sy, k))
        return;
    double px, py;
    if (rd == 0) {
        int32_t seed = scal->seed;
        if (seed < 0)
            return;
        int32_t ix = k % c.nx, iy = k / c.nx, sxi = seed % c.nx, syi = seed / c.nx;
        if (abs(ix - sxi) > c.seed_half || abs(iy - syi) > c.seed_half)
            return;
        px = sx[k];
        py = sy[k];
    } else {
        if (s.found[k] || !sw_rh_predict(&c, k, s.found, s.fx, s.fy, sx, sy, &px, &py))
            return;
    }
    int32_t cx0, cx1, cy0, cy1;
    if (!sw_rh_cells(&c, px, py, &cx0, &cx1, &cy0, &cy1))
        return;
    int32_t ncx = cx1 - cx0 + 1;
    int64_t ncell = (int64_t)ncx * (int64_t)(cy1 - cy0 + 1);
    int64_t best = -1, bpix = 0;
    double bd = 0.0;
    for (int64_t i = lane; i < ncell; i += 32) {
        int64_t cell = (int64_t)(cy0 + (int32_t)(i / ncx)) * c.mw + cx0 + (int32_t)(i % ncx);
        int32_t pix = cells.pix[cell];
        if (pix < 0 || cells.taken[cell])
            continue;
        double d2 = sw_rh_d2(cells.x[cell], cells.y[cell], px, py);
        if (!(d2 <= c.capture2))
            continue;
        if (best < 0 || sw_rh_before(d2, pix, bd, bpix)) {
            best = cell;
            bd = d2;
            bpix = pix;
        }
    }
    /* The warp's argmin in the total order (d2, pixel): the same whatever the reduction order. */
    for (int o = 16; o >= 1; o /= 2) {
        long long ob = __shfl_xor_sync(RH_FULL, (long long)best, o);
        long long op = __shfl_xor_sync(RH_FULL, (long long)bpix, o);
        double od = __shfl_xor_sync(RH_FULL, bd, o);
        if (ob >= 0 && (best < 0 || sw_rh_before(od, op, bd, bpix))) {
            best = ob;
            bd = od;
            bpix = op;
        }
    }
    if (lane != 0 || best < 0)
        return;
    unsigned long long key = (unsigned long long)sw_rh_key(bd, k);
    s.choice[k] = (int32_t)best;
    s.key[k] = key;
    atomicMin(&cells.claim[best], key);
}

__global__ void __launch_bounds__(RH_THREADS)
    rh_resolve_kernel(int32_t nspots, int32_t rd, unsigned int *changed, rh_cells cells, rh_spots s)
{
    if (rd > 0 && changed[rd - 1] == 0)
        return;
    int64_t k = (int64_t)blockIdx.x * RH_THREADS + threadIdx.x;
    if (k >= nspots)
        return;
    int32_t cell = s.choice[k];
    if (cell < 0)
        return;
    s.choice[k] = -1;
    if (cells.claim[cell] != s.key[k])
        return;
    s.found[k] = 1;
    s.peak_of[k] = cell;
    s.fx[k] = cells.x[cell];
    s.fy[k] = cells.y[cell];
    cells.taken[cell] = 1;
    changed[rd] = 1u;
}

__global__ void __launch_bounds__(RH_THREADS)
    rh_output_kernel(int32_t nspots, const double *sx, const double *sy, const uint8_t *active,
                     const double *cell_s0, rh_spots s, double *x, double *y, double *intensity,
                     uint8_t *status)
{
    int64_t k = (int64_t)blockIdx.x * RH_THREADS + threadIdx.x;
    if (k >= nspots)
        return;
    uint8_t st;
    double ox = NAN, oy = NAN, oi = NAN;
    if (active && !active[k]) {
        st = SW_SPOT_INACTIVE;
    } else if (!isfinite(sx[k]) || !isfinite(sy[k])) {
        st = SW_SPOT_OUTSIDE;
    } else if (s.found[k]) {
        st = SW_SPOT_OK;
        ox = s.fx[k];
        oy = s.fy[k];
        oi = cell_s0[s.peak_of[k]];
    } else {
        st = SW_SPOT_NOT_FOUND;
    }
    x[k] = ox;
    y[k] = oy;
    if (intensity)
        intensity[k] = oi;
    status[k] = st;
}

/* ---------------------------------------------------------------- plan */

extern "C" void sw_reich_gpu_destroy(void *gpu)
{
    rh_gpu *g = (rh_gpu *)gpu;
    if (!g)
        return;
    cudaSetDevice(g->device);
    void *bufs[] = {g->cell_pix, g->cell_x,  g->cell_y, g->cell_s0,   g->taken, g->claim,
                    g->found,    g->peak_of, g->choice, g->key,       g->fx,    g->fy,
                    g->row_s,    g->row_q,   g->row_n,  g->scal_block};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; ++i)
        if (bufs[i])
            cudaFree(bufs[i]);
    if (g->host_count)
        cudaFreeHost(g->host_count);
    free(g);
}

template <typename T> static cudaError_t rh_alloc(T **p, size_t n)
{
    return cudaMalloc((void **)p, (n ? n : 1) * sizeof(T));
}

extern "C" sw_status sw_reich_gpu_create(sw_context *ctx, const sw_rh_cfg *c, void **gpu)
{
    *gpu = NULL;
    rh_gpu *g = (rh_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "reichenbach: out of memory for the GPU state");
    g->device = ctx->device;
    size_t nc = (size_t)c->ncells, ns = (size_t)c->nspots, nh = (size_t)c->height;
    g->scal_bytes = sizeof(rh_scal) + (size_t)c->rounds * sizeof(unsigned int);
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e == cudaSuccess)
        e = rh_alloc(&g->cell_pix, nc);
    if (e == cudaSuccess)
        e = rh_alloc(&g->cell_x, nc);
    if (e == cudaSuccess)
        e = rh_alloc(&g->cell_y, nc);
    if (e == cudaSuccess)
        e = rh_alloc(&g->cell_s0, nc);
    if (e == cudaSuccess)
        e = rh_alloc(&g->taken, nc);
    if (e == cudaSuccess)
        e = rh_alloc(&g->claim, nc);
    if (e == cudaSuccess)
        e = rh_alloc(&g->found, ns);
    if (e == cudaSuccess)
        e = rh_alloc(&g->peak_of, ns);
    if (e == cudaSuccess)
        e = rh_alloc(&g->choice, ns);
    if (e == cudaSuccess)
        e = rh_alloc(&g->key, ns);
    if (e == cudaSuccess)
        e = rh_alloc(&g->fx, ns);
    if (e == cudaSuccess)
        e = rh_alloc(&g->fy, ns);
    if (e == cudaSuccess)
        e = rh_alloc(&g->row_s, nh);
    if (e == cudaSuccess)
        e = rh_alloc(&g->row_q, nh);
    if (e == cudaSuccess)
        e = rh_alloc(&g->row_n, nh);
    if (e == cudaSuccess)
        e = cudaMalloc(&g->scal_block, g->scal_bytes);
    if (e == cudaSuccess)
        e = cudaHostAlloc((void **)&g->host_count, sizeof(long long), cudaHostAllocDefault);
    if (e != cudaSuccess) {
        sw_reich_gpu_destroy(g);
        return sw_fail(ctx, e == cudaErrorMemoryAllocation ? SW_ENOMEM : SW_ECUDA,
                       "reichenbach: GPU allocation for a %d x %d frame and %d spots failed: %s",
                       c->width, c->height, c->nspots, cudaGetErrorString(e));
    }
    *g->host_count = -1;
    int32_t tc = RH_TW + 2 * c->half, tr = RH_TH + 2 * c->half;
    g->smem = (size_t)(tr * tc + tr * RH_TW) * sizeof(float);
    *gpu = g;
    return SW_OK;
}

extern "C" sw_status sw_reich_gpu_run(sw_context *ctx, const sw_rh_cfg *c, void *gpu,
                                      const sw_image *frame, const double *sx, const double *sy,
                                      const uint8_t *active, double *x, double *y,
                                      double *intensity, uint8_t *status)
{
    rh_gpu *g = (rh_gpu *)gpu;
    cudaStream_t st = stream_of(ctx);
    const char *fr = (const char *)frame->data;
    int autot = c->threshold == 0.0;
    rh_scal *scal = (rh_scal *)g->scal_block;
    unsigned int *changed = (unsigned int *)((char *)g->scal_block + sizeof(rh_scal));
    rh_cells cells = {g->cell_pix, g->cell_x, g->cell_y, g->cell_s0, g->taken, g->claim};
    rh_spots sp = {g->found, g->peak_of, g->choice, g->key, g->fx, g->fy};
    unsigned int spot_blocks = (unsigned int)((c->nspots + RH_THREADS - 1) / RH_THREADS);
    unsigned int warp_blocks = (unsigned int)((c->nspots + RH_WARPS - 1) / RH_WARPS);

    SW_CU(cudaSetDevice(ctx->device));
    SW_CU(cudaMemsetAsync(g->cell_pix, 0xff, (size_t)c->ncells * sizeof(int32_t), st));
    SW_CU(cudaMemsetAsync(g->scal_block, 0, g->scal_bytes, st));

    /* Step 1: the threshold and the peaks. */
    if (autot) {
        rh_row_sums_kernel<<<(unsigned int)((c->height + RH_WARPS - 1) / RH_WARPS), RH_THREADS, 0,
                             st>>>(fr, frame->stride, c->type, c->width, c->height, g->row_s,
                                   g->row_q, g->row_n);
        rh_threshold_kernel<<<1, SW_RH_PARTIALS, 0, st>>>(c->height, g->row_s, g->row_q, g->row_n,
                                                          scal);
    }
    dim3 pgrid((unsigned int)((c->width + RH_TW - 1) / RH_TW),
               (unsigned int)((c->height + RH_TH - 1) / RH_TH));
    rh_peaks_kernel<<<pgrid, dim3(RH_TW, RH_TY), g->smem, st>>>(fr, frame->stride, *c, autot, scal,
                                                                cells);

    /* Step 2: the seed, then round 0 (the seed block) and the growth rounds (step 3). */
    rh_seed_kernel<<<1, SW_RH_PARTIALS, 0, st>>>(c->nspots, sx, sy, active, g->found, g->choice,
                                                 scal);
    for (int32_t rd = 0; rd < c->rounds; ++rd) {
        rh_choose_kernel<<<warp_blocks, RH_THREADS, 0, st>>>(*c, rd, changed, scal, sx, sy, active,
                                                             cells, sp);
        rh_resolve_kernel<<<spot_blocks, RH_THREADS, 0, st>>>(c->nspots, rd, changed, cells, sp);
    }
    rh_output_kernel<<<spot_blocks, RH_THREADS, 0, st>>>(c->nspots, sx, sy, active, g->cell_s0, sp,
                                                         x, y, intensity, status);
    SW_CU(cudaGetLastError());
    SW_CU(cudaMemcpyAsync(g->host_count, &scal->count, sizeof(long long), cudaMemcpyDeviceToHost,
                          st));
    return SW_OK;
}

extern "C" int64_t sw_reich_gpu_last_peaks(sw_context *ctx, void *gpu)
{
    rh_gpu *g = (rh_gpu *)gpu;
    if (cudaSetDevice(ctx->device) != cudaSuccess ||
        cudaStreamSynchronize(stream_of(ctx)) != cudaSuccess)
        return -1;
    return (int64_t)*g->host_count;
}
