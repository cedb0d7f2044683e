/*
 * The GPU star simulators of seed 004 (CPU twins in starsim.c):
 *
 *   PARALLEL       seed Sec. III.B, Fig. 6: star-centric, one thread block per star; the star is
 *                  read once into shared memory; threads walk the ROI pixels (any ROI side: a
 *                  block loops over the ROI, so the seed's 1024-threads-per-block limit on the
 *                  ROI does not apply) and evaluate Eq. (2)-(3) per pixel; contributions are
 *                  added to the image with atomics.
 *   ADAPTIVE       seed Sec. III.C: the per-pixel evaluation replaced by a look-up table built
 *                  ahead (at plan creation) and read through the read-only data cache (the
 *                  texture path of today's GPUs). Two changes from the seed, both exact:
 *                  intensity is linear in g(m), so the table holds the unit-flux PSF and the
 *                  magnitude becomes a multiply instead of a table dimension; and the Gaussian is
 *                  separable, so the table holds one-dimensional weights for `phase_bins + 1`
 *                  sub-pixel phases, linearly interpolated for the star's true phase, instead of
 *                  one ROI matrix per integer position (which would misplace non-integer stars).
 *                  A block builds the star's two weight rows in shared memory and threads
 *                  multiply them (the ROI matrix is their outer product).
 *   DETERMINISTIC  PARALLEL's evaluation, accumulated in 64-bit fixed point (quantum 2^-16 e-)
 *                  with integer atomics, whose sum does not depend on the order; then converted
 *                  to f32. Bit-identical run after run.
 *
 * Launch shape: the seed gives each star a thread block. For ROI sides up to 32 we give each star
 * a warp instead (eight stars per block), which removes the per-star block start, shared memory
 * and barriers; larger ROIs keep a block per star that loops over the ROI.
 *
 * AUTO picks PARALLEL or ADAPTIVE by star count; the crossover is measured when the plan is made
 * (both kernels timed on synthetic stars with the plan's own sigma, ROI and PSF; seed Table III
 * is that measurement on a GTX 480).
 */
#include "sim/psf.h"
#include "sim/sim_internal.h"
#include "core/cuda_util.h"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the checks of core/cuda_util.h: this context, this stage in their messages */
#define SW_CUDA_CTX   plan->ctx
#define SW_CUDA_STAGE "star simulator"

/* Fixed-point quantum of the deterministic mode: 2^-16 electrons. */
#define SW_FIX_SCALE 65536.0

typedef struct starsim_gpu {
    sw_packed_star *stars;   /* device, max_stars */
    float *lut;              /* device, (phase_bins + 1) x roi_side weights (ADAPTIVE) */
    unsigned long long *acc; /* device, width x height fixed-point sums (DETERMINISTIC) */
    int threads;             /* threads per block */
    sw_event_pair ev;        /* around the last run's rendering kernels */
    int timed;               /* the events hold a run */
    /* Banded runs into host images (sw_starsim_gpu_bands_begin / band / end): the star uploads
     * on `up`, the rows' copies back on `down`; per band, its upload done and its rows
     * rendered. */
    cudaStream_t up, down;
    cudaEvent_t start, up_done[SW_STARSIM_MAX_BANDS], rendered[SW_STARSIM_MAX_BANDS];
    cudaEvent_t uploaded; /* after the last run's star upload (the packed list may be reused) */
    int upload_pending;   /* `uploaded` was recorded and not waited for */
} starsim_gpu;

static cudaStream_t stream_of(const sw_starsim *plan)
{
    return (cudaStream_t)sw_context_stream(plan->ctx);
}

/* ------------------------------------------------------------------ kernels */

/* One 1-D weight of Eq. (2), float, per the plan's PSF mode (psf.h). */
__device__ __forceinline__ float axis_weight(float d, float sigma, int integrated)
{
    return integrated ? sw_psf_w_integrated_f(d, sigma) : sw_psf_w_sampled_f(d, sigma);
}

/* Eq. (3) for ROI pixel k of star s: phi = g * mu at the pixel, added to the image (float
 * atomics) or, FIXED, to the 64-bit fixed-point sums (DETERMINISTIC). */
template <bool FIXED>
__device__ __forceinline__ void
add_evaluated_pixel(const sw_packed_star &s, int k, int side, float sigma, int integrated,
                    float *img, unsigned long long *acc, size_t pitch, int width, int height)
{
    int i = k % side, j = k / side;
    int px = s.x0 + i, py = s.y0 + j;
    if (px < 0 || py < 0 || px >= width || py >= height)
        return;
    /* pixel centre minus star position, per axis (psf.h: mu is separable) */
    float v = s.flux * axis_weight((float)i - s.dx, sigma, integrated) *
              axis_weight((float)j - s.dy, sigma, integrated);
    if (FIXED)
        atomicAdd(acc + (size_t)py * width + px,
                  (unsigned long long)llrint((double)v * SW_FIX_SCALE));
    else
        atomicAdd((float *)((char *)img + (size_t)py * pitch) + px, v);
}

/* The adaptive table's weight of ROI column (or row) i for a star at offset `pos` from the ROI
 * origin: linear interpolation between the two phase rows that bracket its phase from the ROI
 * centre (pos - centre, in [-1/2, 1/2); table row t = (phase + 1/2) bins). */
__device__ __forceinline__ float table_weight(const float *__restrict__ lut, float pos, int i,
                                              int side, int bins)
{
    float t = (pos - 0.5f * (float)(side - 1) + 0.5f) * (float)bins;
    t = fminf(fmaxf(t, 0.0f), (float)bins);
    int b = min((int)t, bins - 1);
    float f = t - (float)b;
    float lo = __ldg(lut + (size_t)b * side + i), hi = __ldg(lut + (size_t)(b + 1) * side + i);
    return lo + f * (hi - lo);
}

/* seed Fig. 6: block = star; thread 0 reads the star into shared memory (steps 4-6); each thread
 * computes its ROI pixels' contributions phi = g * mu (Eq. 3) and adds them atomically (step 8).
 * FIXED: accumulate into 64-bit fixed point instead of float (DETERMINISTIC). */
template <bool FIXED>
__global__ void parallel_kernel(const sw_packed_star *stars, int side, float sigma, int integrated,
                                float *img, unsigned long long *acc, size_t pitch, int width,
                                int height)
{
    __shared__ sw_packed_star s;
    if (threadIdx.x == 0)
        s = stars[blockIdx.x];
    __syncthreads();
    for (int k = threadIdx.x; k < side * side; k += blockDim.x)
        add_evaluated_pixel<FIXED>(s, k, side, sigma, integrated, img, acc, pitch, width, height);
}

/* seed Sec. III.C with sub-pixel phases: the block interpolates the star's two weight rows from
 * the table (read-only cache), then threads add flux * wx[i] * wy[j] over the ROI. */
__global__ void adaptive_kernel(const sw_packed_star *stars, int side, int bins,
                                const float *__restrict__ lut, float *img, size_t pitch, int width,
                                int height)
{
    extern __shared__ float w[]; /* wx[side], wy[side] */
    __shared__ sw_packed_star s;
    if (threadIdx.x == 0)
        s = stars[blockIdx.x];
    __syncthreads();
    for (int k = threadIdx.x; k < 2 * side; k += blockDim.x)
        w[k] = table_weight(lut, k < side ? s.dx : s.dy, k % side, side, bins);
    __syncthreads();
    const int npix = side * side;
    for (int k = threadIdx.x; k < npix; k += blockDim.x) {
        int i = k % side, j = k / side;
        int px = s.x0 + i, py = s.y0 + j;
        if (px < 0 || py < 0 || px >= width || py >= height)
            continue;
        atomicAdd((float *)((char *)img + (size_t)py * pitch) + px, s.flux * w[i] * w[side + j]);
    }
}

/*
 * The same two simulators with one warp per star instead of one block, for ROI sides up to 32:
 * with ROIs of ~100 pixels a block per star leaves most of each block idle and pays a block's
 * start and barriers per star; a warp needs neither shared memory nor barriers (all lanes read
 * the star, a broadcast; the adaptive weights pass between lanes by shuffles).
 */
#define SW_STARS_PER_BLOCK 8

template <bool FIXED>
__global__ void parallel_warp_kernel(const sw_packed_star *stars, int n, int side, float sigma,
                                     int integrated, float *img, unsigned long long *acc,
                                     size_t pitch, int width, int height)
{
    const int star = blockIdx.x * SW_STARS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (star >= n)
        return;
    const sw_packed_star s = stars[star];
    for (int k = lane; k < side * side; k += 32)
        add_evaluated_pixel<FIXED>(s, k, side, sigma, integrated, img, acc, pitch, width, height);
}

__global__ void adaptive_warp_kernel(const sw_packed_star *stars, int n, int side, int bins,
                                     const float *__restrict__ lut, float *img, size_t pitch,
                                     int width, int height)
{
    const int star = blockIdx.x * SW_STARS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (star >= n) /* whole warps leave together: the shuffles below see all 32 lanes */
        return;
    const sw_packed_star s = stars[star];
    /* lane i < side holds the weights of ROI column i (wx) and row i (wy) */
    const int i_lane = min(lane, side - 1);
    const float w[2] = {table_weight(lut, s.dx, i_lane, side, bins),
                        table_weight(lut, s.dy, i_lane, side, bins)};
    const int npix = side * side;
    for (int base = 0; base < npix; base += 32) {
        int k = base + lane;
        int i = k < npix ? k % side : 0, j = k < npix ? k / side : 0;
        float wx = __shfl_sync(0xffffffffu, w[0], i);
        float wy = __shfl_sync(0xffffffffu, w[1], j);
        int px = s.x0 + i, py = s.y0 + j;
        if (k < npix && px >= 0 && py >= 0 && px < width && py < height)
            atomicAdd((float *)((char *)img + (size_t)py * pitch) + px, s.flux * wx * wy);
    }
}

/* DETERMINISTIC: fixed-point sums to f32, rows [y0, y1). */
__global__ void fixed_to_float_kernel(const unsigned long long *acc, float *img, size_t pitch,
                                      int width, int y0, int y1)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= width)
        return;
    for (int y = y0 + (int)blockIdx.y; y < y1; y += gridDim.y)
        ((float *)((char *)img + (size_t)y * pitch))[x] =
            (float)((double)acc[(size_t)y * width + x] * (1.0 / SW_FIX_SCALE));
}

/* ------------------------------------------------------------------ plan */

/* The adaptive table: row b holds the weights of the ROI's `side` pixels for a star whose offset
 * from the ROI centre is b / bins - 1/2 (b = 0 .. bins), in double, stored as float. */
static sw_status build_lut(sw_starsim *plan, starsim_gpu *g)
{
    const int side = plan->p.roi_side, bins = plan->p.phase_bins;
    const size_t n = (size_t)(bins + 1) * (size_t)side;
    float *h = (float *)malloc(n * sizeof *h);
    if (!h)
        return sw_fail(plan->ctx, SW_ENOMEM, "star simulator: out of memory for the look-up table");
    const double centre = 0.5 * (double)(side - 1);
    for (int b = 0; b <= bins; b++) {
        double star = centre + (double)b / bins - 0.5;
        for (int i = 0; i < side; i++) {
            double d = (double)i - star;
            h[(size_t)b * side + i] =
                (float)(plan->p.psf == SW_PSF_INTEGRATED ? sw_psf_w_integrated(d, plan->p.sigma)
                                                         : sw_psf_w_sampled(d, plan->p.sigma));
        }
    }
    cudaError_t e = cudaMalloc(&g->lut, n * sizeof(float));
    if (e == cudaSuccess)
        e = sw_cuda_h2d(g->lut, h, n * sizeof(float));
    free(h);
    if (e != cudaSuccess)
        return sw_fail(plan->ctx, SW_ENOMEM,
                       "star simulator: cannot place the look-up table on "
                       "the device: %s",
                       cudaGetErrorString(e));
    return SW_OK;
}

static sw_status launch(sw_starsim *plan, starsim_gpu *g, const sw_packed_star *stars, int64_t n,
                        sw_starsim_method m, sw_image *out)
{
    if (n == 0)
        return SW_OK;
    cudaStream_t s = stream_of(plan);
    const int side = plan->p.roi_side;
    const int integrated = plan->p.psf == SW_PSF_INTEGRATED;
    const float sigma = (float)plan->p.sigma;
    float *img = (float *)out->data;
    /* ROI sides up to 32: a warp per star; larger: a block per star, looping over the ROI */
    const int warp = side <= 32;
    const unsigned wblocks = (unsigned)((n + SW_STARS_PER_BLOCK - 1) / SW_STARS_PER_BLOCK);
    const int wthreads = 32 * SW_STARS_PER_BLOCK;
    switch (m) {
    case SW_STARSIM_PARALLEL:
        if (warp)
            parallel_warp_kernel<false>
                <<<wblocks, wthreads, 0, s>>>(stars, (int)n, side, sigma, integrated, img, NULL,
                                              out->stride, out->width, out->height);
        else
            parallel_kernel<false><<<(unsigned)n, g->threads, 0, s>>>(
                stars, side, sigma, integrated, img, NULL, out->stride, out->width, out->height);
        break;
    case SW_STARSIM_ADAPTIVE:
        if (warp)
            adaptive_warp_kernel<<<wblocks, wthreads, 0, s>>>(stars, (int)n, side,
                                                              plan->p.phase_bins, g->lut, img,
                                                              out->stride, out->width, out->height);
        else
            adaptive_kernel<<<(unsigned)n, g->threads, 2 * side * sizeof(float), s>>>(
                stars, side, plan->p.phase_bins, g->lut, img, out->stride, out->width, out->height);
        break;
    case SW_STARSIM_DETERMINISTIC:
        if (warp)
            parallel_warp_kernel<true><<<wblocks, wthreads, 0, s>>>(
                stars, (int)n, side, sigma, integrated, NULL, g->acc, 0, out->width, out->height);
        else
            parallel_kernel<true><<<(unsigned)n, g->threads, 0, s>>>(
                stars, side, sigma, integrated, NULL, g->acc, 0, out->width, out->height);
        break;
    default:
        return sw_fail(plan->ctx, SW_EINTERNAL, "star simulator: method %d is not a GPU method",
                       (int)m);
    }
    SW_CU(cudaGetLastError());
    return SW_OK;
}

/* Times one method on `n` synthetic stars (median of 5 runs, CUDA events), milliseconds. */
static sw_status time_method(sw_starsim *plan, starsim_gpu *g, int64_t n, sw_starsim_method m,
                             sw_image *img, float *ms)
{
    cudaStream_t s = stream_of(plan);
    cudaEvent_t a = NULL, b = NULL;
    float t[5] = {0, 0, 0, 0, 0};
    cudaError_t e = cudaEventCreate(&a);
    if (e == cudaSuccess)
        e = cudaEventCreate(&b);
    sw_status st = e == cudaSuccess ? launch(plan, g, g->stars, n, m, img) /* warm-up */
                                    : sw_fail(plan->ctx, SW_ECUDA,
                                              "star simulator: cannot create CUDA events: %s",
                                              cudaGetErrorString(e));
    for (int r = 0; r < 5 && st == SW_OK; r++) {
        e = cudaEventRecord(a, s);
        if (e == cudaSuccess && (st = launch(plan, g, g->stars, n, m, img)) == SW_OK) {
            e = cudaEventRecord(b, s);
            if (e == cudaSuccess)
                e = cudaEventSynchronize(b);
            if (e == cudaSuccess)
                e = cudaEventElapsedTime(&t[r], a, b);
        }
        if (st == SW_OK && e != cudaSuccess)
            st = sw_fail(plan->ctx, SW_ECUDA, "star simulator: calibration timing failed: %s",
                         cudaGetErrorString(e));
    }
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    for (int i = 1; i < 5; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && t[j] < t[j - 1]; j--) {
            float x = t[j];
            t[j] = t[j - 1];
            t[j - 1] = x;
        }
    *ms = t[2];
    return st;
}

/*
 * AUTO's crossover: both kernels timed at two star counts; with t = a + b n for each, adaptive
 * is chosen from n* = (a_adaptive - a_parallel) / (b_parallel - b_adaptive) stars on (0 when it
 * is never slower; never when it is never faster).
 */
static sw_status calibrate(sw_starsim *plan, starsim_gpu *g)
{
    /* at most ~16 M pixel evaluations per timed launch, so large ROIs calibrate quickly */
    const int64_t npix = (int64_t)plan->p.roi_side * plan->p.roi_side;
    int64_t n2 = ((int64_t)1 << 24) / npix;
    n2 = n2 < 2 ? 2 : n2 > 16384 ? 16384 : n2;
    if (n2 > plan->p.max_stars)
        n2 = plan->p.max_stars;
    const int64_t n1 = n2 / 32 > 1 ? n2 / 32 : 1;
    sw_image img;
    sw_status st =
        sw_image_alloc_device(plan->ctx, plan->p.width, plan->p.height, SW_PIX_F32, &img);
    if (st != SW_OK)
        return st;
    /* synthetic stars spread over the image on a deterministic low-discrepancy pattern */
    sw_packed_star *h = (sw_packed_star *)malloc((size_t)n2 * sizeof *h);
    if (!h) {
        sw_image_free(&img);
        return sw_fail(plan->ctx, SW_ENOMEM, "star simulator: out of memory for calibration");
    }
    for (int64_t i = 0; i < n2; i++) {
        double x = fmod((double)i * 0.6180339887498949, 1.0) * plan->p.width;
        double y = fmod((double)i * 0.7548776662466927, 1.0) * plan->p.height;
        h[i].x0 = sw_roi_origin(x, plan->p.roi_side);
        h[i].y0 = sw_roi_origin(y, plan->p.roi_side);
        h[i].dx = (float)(x - h[i].x0);
        h[i].dy = (float)(y - h[i].y0);
        h[i].flux = 1000.0f;
        h[i].pad = 0.0f;
    }
    float tp1 = 0, tp2 = 0, ta1 = 0, ta2 = 0;
    cudaError_t e = sw_cuda_h2d(g->stars, h, (size_t)n2 * sizeof *h);
    free(h);
    if (e != cudaSuccess)
        st = sw_fail(plan->ctx, SW_ECUDA, "star simulator: calibration upload failed: %s",
                     cudaGetErrorString(e));
    if (st == SW_OK)
        st = time_method(plan, g, n1, SW_STARSIM_PARALLEL, &img, &tp1);
    if (st == SW_OK)
        st = time_method(plan, g, n2, SW_STARSIM_PARALLEL, &img, &tp2);
    if (st == SW_OK)
        st = time_method(plan, g, n1, SW_STARSIM_ADAPTIVE, &img, &ta1);
    if (st == SW_OK)
        st = time_method(plan, g, n2, SW_STARSIM_ADAPTIVE, &img, &ta2);
    sw_image_free(&img);
    if (st != SW_OK)
        return st;
    if (n2 <= n1) { /* one star count only: pick by its time */
        plan->auto_adaptive_from = ta2 <= tp2 ? 0 : INT64_MAX;
    } else {
        double bp = (tp2 - tp1) / (double)(n2 - n1), ap = tp1 - bp * n1;
        double ba = (ta2 - ta1) / (double)(n2 - n1), aa = ta1 - ba * n1;
        double cross = ba < bp ? (aa - ap) / (bp - ba) : 0.0;
        if (aa <= ap && ba <= bp)
            plan->auto_adaptive_from = 0; /* never slower */
        else if (ba >= bp) /* adaptive no cheaper per star: decide by the larger count */
            plan->auto_adaptive_from = ta2 <= tp2 ? 0 : INT64_MAX;
        else
            plan->auto_adaptive_from = cross > 9e18 ? INT64_MAX : (int64_t)ceil(cross);
    }
    sw_log(plan->ctx, SW_LOG_DEBUG,
           "star simulator calibration: parallel %.1f/%.1f us, adaptive %.1f/%.1f us for %lld/%lld "
           "stars: adaptive from %lld stars",
           1e3 * tp1, 1e3 * tp2, 1e3 * ta1, 1e3 * ta2, (long long)n1, (long long)n2,
           (long long)plan->auto_adaptive_from);
    return SW_OK;
}

extern "C" sw_status sw_starsim_gpu_create(sw_starsim *plan)
{
    SW_CU(cudaSetDevice(plan->ctx->device));
    starsim_gpu *g = (starsim_gpu *)calloc(1, sizeof *g);
    if (!g)
        return sw_fail(plan->ctx, SW_ENOMEM, "star simulator: out of memory");
    plan->gpu = g;
    SW_TRY(sw_event_pair_create(SW_CUDA_CTX, SW_CUDA_STAGE, &g->ev));
    SW_CU(cudaStreamCreateWithFlags(&g->up, cudaStreamNonBlocking));
    SW_CU(cudaStreamCreateWithFlags(&g->down, cudaStreamNonBlocking));
    SW_CU(cudaEventCreateWithFlags(&g->start, cudaEventDisableTiming));
    SW_CU(cudaEventCreateWithFlags(&g->uploaded, cudaEventDisableTiming));
    for (int k = 0; k < SW_STARSIM_MAX_BANDS; k++) {
        SW_CU(cudaEventCreateWithFlags(&g->up_done[k], cudaEventDisableTiming));
        SW_CU(cudaEventCreateWithFlags(&g->rendered[k], cudaEventDisableTiming));
    }
    const int npix = plan->p.roi_side * plan->p.roi_side;
    g->threads = npix >= 256 ? 256 : (npix + 31) / 32 * 32;
    SW_TRY(sw_memory_check(plan->ctx, (uint64_t)plan->p.max_stars, sizeof(sw_packed_star),
                           "star simulator: the device list of %lld stars",
                           (long long)plan->p.max_stars));
    SW_CU(cudaMalloc(&g->stars, (size_t)plan->p.max_stars * sizeof(sw_packed_star)));
    sw_status st = build_lut(plan, g);
    if (st != SW_OK)
        return st;
    if (plan->p.method == SW_STARSIM_DETERMINISTIC) {
        SW_TRY(sw_memory_check(plan->ctx, (uint64_t)plan->p.width * (uint64_t)plan->p.height,
                               sizeof(unsigned long long),
                               "star simulator: the %dx%d device accumulator (deterministic)",
                               (int)plan->p.width, (int)plan->p.height));
        SW_CU(cudaMalloc(&g->acc, (size_t)plan->p.width * (size_t)plan->p.height *
                                      sizeof(unsigned long long)));
    }
    plan->auto_adaptive_from = INT64_MAX;
    if (plan->p.method == SW_STARSIM_AUTO)
        return calibrate(plan, g);
    return SW_OK;
}

/* DETERMINISTIC: the plan has the accumulator and the stars' total flux fits it. */
static sw_status check_deterministic(sw_starsim *plan, starsim_gpu *g, const sw_packed_star *stars,
                                     int64_t n, sw_starsim_method method)
{
    if (method == SW_STARSIM_DETERMINISTIC) {
        if (!g->acc)
            return sw_fail(plan->ctx, SW_EINVAL,
                           "star simulator: this plan was not made for the deterministic method");
        /* the fixed-point sums must not overflow: bound them by the run's total flux */
        double total = 0.0;
        for (int64_t i = 0; i < n; i++)
            total += stars[i].flux;
        if (!(total < SW_STARSIM_DETERMINISTIC_MAX_FLUX))
            return sw_fail(plan->ctx, SW_ERANGE,
                           "star simulator: the deterministic method sums in fixed point and "
                           "takes at most %g e- per run; these stars carry %g e-",
                           SW_STARSIM_DETERMINISTIC_MAX_FLUX, total);
    }
    return SW_OK;
}

extern "C" sw_status sw_starsim_gpu_wait_upload(sw_starsim *plan)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    if (!g || !g->upload_pending)
        return SW_OK;
    SW_CU(cudaSetDevice(plan->ctx->device));
    SW_CU(cudaEventSynchronize(g->uploaded));
    g->upload_pending = 0;
    return SW_OK;
}

extern "C" sw_status sw_starsim_gpu_run(sw_starsim *plan, const sw_packed_star *stars, int64_t n,
                                        sw_starsim_method method, sw_image *out)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    cudaStream_t s = stream_of(plan);
    const size_t row = (size_t)out->width * sizeof(float);
    SW_TRY(check_deterministic(plan, g, stars, n, method));
    SW_CU(cudaSetDevice(plan->ctx->device));
    SW_CU(cudaMemset2DAsync(out->data, out->stride, 0, row, (size_t)out->height, s));
    if (n > 0) {
        SW_CU(
            cudaMemcpyAsync(g->stars, stars, (size_t)n * sizeof *stars, cudaMemcpyHostToDevice, s));
        SW_CU(cudaEventRecord(g->uploaded, s));
        g->upload_pending = 1;
    }
    if (method == SW_STARSIM_DETERMINISTIC)
        SW_CU(cudaMemsetAsync(g->acc, 0, (size_t)out->width * (size_t)out->height * sizeof *g->acc,
                              s));
    SW_CU(cudaEventRecord(g->ev.t0, s));
    sw_status st = launch(plan, g, g->stars, n, method, out);
    if (st != SW_OK)
        return st;
    if (method == SW_STARSIM_DETERMINISTIC) {
        dim3 grid((unsigned)((out->width + 255) / 256),
                  (unsigned)(out->height < 1024 ? out->height : 1024));
        fixed_to_float_kernel<<<grid, 256, 0, s>>>(g->acc, (float *)out->data, out->stride,
                                                   out->width, 0, out->height);
        SW_CU(cudaGetLastError());
    }
    SW_CU(cudaEventRecord(g->ev.t1, s));
    g->timed = 1;
    return SW_OK;
}

/*
 * The banded pipeline (sim_internal.h). Streams: up (star uploads), the context's stream
 * (clearing, rendering), down (rows back). Per band b: up copies its stars and records
 * up_done[b]; the context's stream waits for it, renders them (DETERMINISTIC: then turns band b's
 * rows into floats) and records rendered[b]; down waits for that and copies band b's rows. All
 * three streams start after the work already queued on the context's stream (`start`), and the
 * run returns when down has copied the last band (which follows every rendering). The events
 * around the renderings (sw_starsim_render_us) include the waits for the uploads.
 */
extern "C" sw_status sw_starsim_gpu_bands_begin(sw_starsim *plan, sw_starsim_method method)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    cudaStream_t s = stream_of(plan);
    sw_image *img = &plan->gpu_image;
    if (method == SW_STARSIM_DETERMINISTIC && !g->acc)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "star simulator: this plan was not made for the deterministic method");
    SW_CU(cudaSetDevice(plan->ctx->device));
    SW_CU(cudaEventRecord(g->start, s));
    SW_CU(cudaStreamWaitEvent(g->up, g->start, 0));
    SW_CU(cudaStreamWaitEvent(g->down, g->start, 0));
    SW_CU(cudaMemset2DAsync(img->data, img->stride, 0, (size_t)img->width * sizeof(float),
                            (size_t)img->height, s));
    if (method == SW_STARSIM_DETERMINISTIC)
        SW_CU(cudaMemsetAsync(g->acc, 0, (size_t)img->width * (size_t)img->height * sizeof *g->acc,
                              s));
    SW_CU(cudaEventRecord(g->ev.t0, s));
    return SW_OK;
}

extern "C" sw_status sw_starsim_gpu_band(sw_starsim *plan, int b, const sw_packed_star *stars,
                                         int64_t first, int64_t n, int32_t y0, int32_t y1,
                                         sw_starsim_method method, sw_image *out)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    cudaStream_t s = stream_of(plan);
    sw_image *img = &plan->gpu_image;
    if (b < 0 || b >= SW_STARSIM_MAX_BANDS)
        return sw_fail(plan->ctx, SW_EINTERNAL, "star simulator: band %d", b);
    if (n > 0) {
        SW_CU(cudaMemcpyAsync(g->stars + first, stars + first, (size_t)n * sizeof *stars,
                              cudaMemcpyHostToDevice, g->up));
        SW_CU(cudaEventRecord(g->up_done[b], g->up));
        SW_CU(cudaStreamWaitEvent(s, g->up_done[b], 0));
        SW_TRY(launch(plan, g, g->stars + first, n, method, img));
    }
    if (method == SW_STARSIM_DETERMINISTIC) {
        const int rows = y1 - y0;
        dim3 grid((unsigned)((img->width + 255) / 256), (unsigned)(rows < 1024 ? rows : 1024));
        fixed_to_float_kernel<<<grid, 256, 0, s>>>(g->acc, (float *)img->data, img->stride,
                                                   img->width, y0, y1);
        SW_CU(cudaGetLastError());
    }
    SW_CU(cudaEventRecord(g->rendered[b], s));
    SW_CU(cudaStreamWaitEvent(g->down, g->rendered[b], 0));
    SW_CU(cudaMemcpy2DAsync((char *)out->data + (size_t)y0 * out->stride, out->stride,
                            (const char *)img->data + (size_t)y0 * img->stride, img->stride,
                            (size_t)img->width * sizeof(float), (size_t)(y1 - y0),
                            cudaMemcpyDeviceToHost, g->down));
    return SW_OK;
}

extern "C" sw_status sw_starsim_gpu_bands_end(sw_starsim *plan)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    SW_CU(cudaEventRecord(g->ev.t1, stream_of(plan)));
    g->timed = 1;
    SW_CU(cudaEventRecord(g->uploaded, g->up));
    g->upload_pending = 1;
    SW_CU(cudaStreamSynchronize(g->down));
    return SW_OK;
}

extern "C" void sw_starsim_gpu_destroy(sw_starsim *plan)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    if (!g)
        return;
    cudaSetDevice(plan->ctx->device);
    cudaStreamSynchronize(stream_of(plan));
    if (g->up) {
        cudaStreamSynchronize(g->up);
        cudaStreamDestroy(g->up);
    }
    if (g->down) {
        cudaStreamSynchronize(g->down);
        cudaStreamDestroy(g->down);
    }
    if (g->start)
        cudaEventDestroy(g->start);
    if (g->uploaded)
        cudaEventDestroy(g->uploaded);
    for (int k = 0; k < SW_STARSIM_MAX_BANDS; k++) {
        if (g->up_done[k])
            cudaEventDestroy(g->up_done[k]);
        if (g->rendered[k])
            cudaEventDestroy(g->rendered[k]);
    }
    cudaFree(g->stars);
    cudaFree(g->lut);
    cudaFree(g->acc);
    sw_event_pair_destroy(&g->ev);
    free(g);
    plan->gpu = NULL;
}

extern "C" double sw_starsim_gpu_render_us(sw_starsim *plan)
{
    starsim_gpu *g = (starsim_gpu *)plan->gpu;
    return g && g->timed ? sw_event_pair_us(&g->ev) : -1.0;
}
