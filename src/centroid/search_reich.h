/*
 * Reichenbach's centroid algorithm (search.h "Reichenbach"; seed 001 Sec. 3.2.2, after
 * Reichenbach et al. 2014), between its CPU side (search_reich.c: the plan, the CPU run) and its
 * GPU twin (search_reich_cuda.cu). Not public.
 *
 * The decisions both backends share, written once below so that they agree to the last bit:
 *
 * Threshold (step 1, peak_threshold 0): T = mean + 3 sd of the finite pixels (population sd,
 * var = Q / n - mean^2 clamped at 0), with the sums S (of v), Q (of v^2) and n formed in a fixed
 * order: per row, 32 lanes (lane t adds the pixels t, t + 32, ... in increasing x), combined by
 * the tree v[t] += v[t + o] for o = 16, 8, 4, 2, 1 (a warp's shuffle-down); over the rows, 256
 * partials (partial t adds rows t, t + 256, ... in increasing y) combined by the same tree for
 * o = 128 .. 1. No finite pixel: T = +Inf (no peaks).
 *
 * Peaks (step 1). Values are compared as floats (exact for u8, u16, f32); a NaN pixel is never
 * larger than anything and is never a peak. Pixel p = (x, y) with value v is a peak when v is
 * finite, v > T, and v is the largest of its peak_box square in the order (value, then first in
 * raster order): with h = (peak_box - 1) / 2,
 *     v > max(the rows y - h .. y - 1 of the square),   v > max(x - h .. x - 1 on row y),
 *     v >= max(the rows y + 1 .. y + h),                v >= max(x + 1 .. x + h on row y)
 * (pixels beyond the frame do not count). Two peaks are then more than h apart in x or in y, so
 * a cell of (h + 1) x (h + 1) pixels holds at most one: peaks are stored per cell (cell
 * (x / (h + 1), y / (h + 1)), raster order of cells), which makes the peak store the same on
 * both backends whatever order the GPU finds them in. The peak's position and intensity are
 * sw_sm_com_step_ex's (search_model.h) with side peak_box at its pixel; a flat window leaves it
 * at the pixel with intensity 0; a NaN / Inf pixel in the window drops the peak (it cannot be
 * measured).
 *
 * Nearest peak (steps 2-3). From a position p, the free peak whose centroid is nearest p with
 * squared distance d2 = dx dx + dy dy <= capture_px^2 (doubles), ties to the peak first in
 * raster order of pixels. A centroid lies within h of its peak's pixel in x and y, so the cells
 * that can hold such a peak are those covering [p - capture_px - h, p + capture_px + h] (one
 * more cell on each side against rounding).
 *
 * Claims. A spot that chose a peak claims it with the key sw_rh_key(d2, spot): d2's bits with
 * the low 24 bits cleared (28 of its 52 mantissa bits kept), then the spot index in those 24 bits;
 * the smallest key wins the peak ("the nearest spot wins, then the lowest index"; two distances
 * equal to 28 mantissa bits count as equal). Spots that lose stay not found in that round.
 *
 * Seed (step 2). The mean of the start positions of the active spots with finite starts (the
 * fixed-order sums above: 256 partials over the spots, the tree), and the spot nearest it
 * (squared distance, lowest index on ties); the claimants of round 0 are the active spots with
 * finite starts of the seed_size x seed_size grid block centred on it, each from its start.
 *
 * Rounds. Round 0 is the seed; growth rounds 1, 2, ... (step 3): the claimants are the active
 * spots with finite starts, not found, with a found 4-neighbour (sw_rh_predict). Every round
 * reads the state the previous round left (found spots, taken peaks) and changes it only when
 * all claims are in. The run stops after a round that found nothing, and after cfg.rounds
 * rounds at most (nx + ny + seed_size growth rounds: enough for any pupil that the growth
 * crosses without long detours; both backends stop at the same round).
 *
 * Statuses: SW_SPOT_OK (found: the peak's centroid and intensity), SW_SPOT_NOT_FOUND (active,
 * never reached), SW_SPOT_INACTIVE, SW_SPOT_OUTSIDE (active with a non-finite start position:
 * not searched, not in the seed mean).
 */
#ifndef SW_SEARCH_REICH_H
#define SW_SEARCH_REICH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "centroid/search_internal.h"

#if defined(__CUDACC__)
#define SW_RH_FN __host__ __device__ static inline
#else
#define SW_RH_FN static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define SW_RH_LANES    32  /* lanes of a row's sums                                    */
#define SW_RH_PARTIALS 256 /* partials over rows (threshold) and over spots (the seed)  */
#define SW_RH_NO_KEY   0xffffffffffffffffull /* an unclaimed peak                     */

/* The plan's resolved parameters, for both backends. */
typedef struct sw_rh_cfg {
    int32_t width, height;
    sw_pixel_type type;
    int32_t nspots, nx, ny;
    int32_t box, half; /* peak_box and h = (peak_box - 1) / 2                        */
    double threshold;  /* peak_threshold; 0: automatic                              */
    int32_t seed_half; /* (seed_size - 1) / 2                                        */
    double capture;    /* capture_px, resolved (pitch_px / 2 when 0)                 */
    double capture2;   /* capture^2                                                  */
    int32_t cell;      /* h + 1: the side of a peak cell                             */
    int32_t mw, mh;    /* cells per row and per column                               */
    int64_t ncells;    /* mw * mh                                                     */
    int32_t rounds;    /* 1 + nx + ny + seed_size (round 0: the seed)                 */
} sw_rh_cfg;

/* ---------------------------------------------------------------- shared arithmetic */

/* The claim key of a spot at squared distance d2 (>= 0, finite) from the peak. */
SW_RH_FN uint64_t sw_rh_key(double d2, int32_t spot)
{
    uint64_t bits;
#if defined(__CUDA_ARCH__)
    bits = (uint64_t)__double_as_longlong(d2);
#else
    memcpy(&bits, &d2, sizeof bits);
#endif
    return ((bits >> 24) << 24) | (uint64_t)(uint32_t)spot;
}

/* 1 when the candidate (d2a, pixa) comes before (d2b, pixb): nearer, then first in raster order. */
SW_RH_FN int sw_rh_before(double d2a, int64_t pixa, double d2b, int64_t pixb)
{
    return d2a < d2b || (d2a == d2b && pixa < pixb);
}

/* The squared distance of (ax, ay) from (bx, by). */
SW_RH_FN double sw_rh_d2(double ax, double ay, double bx, double by)
{
    double dx = ax - bx, dy = ay - by;
    return dx * dx + dy * dy;
}

/* 1 when spot k is active (active NULL: all are) with a finite start. */
SW_RH_FN int sw_rh_searchable(const uint8_t *active, const double *sx, const double *sy, int32_t k)
{
    return (active == NULL || active[k] != 0) && isfinite(sx[k]) && isfinite(sy[k]);
}

/* Spot k's status after the rounds: INACTIVE, OUTSIDE (a non-finite start), OK when found,
 * NOT_FOUND otherwise (only an OK spot has a position and an intensity). */
SW_RH_FN uint8_t sw_rh_status(const uint8_t *active, const double *sx, const double *sy, int32_t k,
                              int found)
{
    if (active && !active[k])
        return SW_SPOT_INACTIVE;
    if (!isfinite(sx[k]) || !isfinite(sy[k]))
        return SW_SPOT_OUTSIDE;
    return found ? SW_SPOT_OK : SW_SPOT_NOT_FOUND;
}

/* Step 3's prediction for spot k from its found 4-neighbours in the order (+1, 0), (-1, 0),
 * (0, +1), (0, -1): n1 found at (dx, dy) gives 2 n1 - n2 when n2 at 2 (dx, dy) is found too,
 * otherwise n1 + (start - start of n1); the predictions are averaged. Returns 0 when no
 * neighbour is found. */
SW_RH_FN int sw_rh_predict(const sw_rh_cfg *c, int32_t k, const uint8_t *found, const double *fx,
                           const double *fy, const double *sx, const double *sy, double *px,
                           double *py)
{
    int32_t ix = k % c->nx, iy = k / c->nx;
    double ax = 0.0, ay = 0.0;
    int n = 0;
    for (int d = 0; d < 4; ++d) {
        int32_t dx = (d == 0) - (d == 1), dy = (d == 2) - (d == 3);
        int32_t x1 = ix + dx, y1 = iy + dy, x2 = ix + 2 * dx, y2 = iy + 2 * dy;
        if (x1 < 0 || x1 >= c->nx || y1 < 0 || y1 >= c->ny)
            continue;
        int32_t n1 = y1 * c->nx + x1;
        if (!found[n1])
            continue;
        double qx, qy;
        int32_t n2 = y2 * c->nx + x2;
        if (x2 >= 0 && x2 < c->nx && y2 >= 0 && y2 < c->ny && found[n2]) {
            qx = 2.0 * fx[n1] - fx[n2];
            qy = 2.0 * fy[n1] - fy[n2];
        } else {
            qx = fx[n1] + (sx[k] - sx[n1]);
            qy = fy[n1] + (sy[k] - sy[n1]);
        }
        ax = ax + qx;
        ay = ay + qy;
        ++n;
    }
    if (n == 0)
        return 0;
    *px = ax / (double)n;
    *py = ay / (double)n;
    return 1;
}

/* The cells [*cx0, *cx1] x [*cy0, *cy1] that may hold a peak within capture of (px, py); returns
 * 0 when there are none (also for a non-finite p). */
SW_RH_FN int sw_rh_cells(const sw_rh_cfg *c, double px, double py, int32_t *cx0, int32_t *cx1,
                         int32_t *cy0, int32_t *cy1)
{
    double reach = c->capture + (double)c->half;
    double cell = (double)c->cell;
    double a = floor((px - reach) / cell) - 1.0, b = floor((px + reach) / cell) + 1.0;
    double e = floor((py - reach) / cell) - 1.0, f = floor((py + reach) / cell) + 1.0;
    if (!(a < (double)c->mw) || !(b >= 0.0) || !(e < (double)c->mh) || !(f >= 0.0))
        return 0;
    *cx0 = a < 0.0 ? 0 : (int32_t)a;
    *cx1 = b > (double)(c->mw - 1) ? c->mw - 1 : (int32_t)b;
    *cy0 = e < 0.0 ? 0 : (int32_t)e;
    *cy1 = f > (double)(c->mh - 1) ? c->mh - 1 : (int32_t)f;
    return 1;
}

/* The threshold from the totals (see the top of this file). */
SW_RH_FN double sw_rh_threshold(double s, double q, int64_t n)
{
    if (n <= 0)
        return INFINITY;
    double mean = s / (double)n;
    double var = q / (double)n - mean * mean;
    if (!(var > 0.0))
        var = 0.0;
    return mean + 3.0 * sqrt(var);
}

/* Peaks: the "first in raster order wins" test on the maxima around v (see above). */
SW_RH_FN int sw_rh_is_peak(float v, double t, float up, float left, float down, float right)
{
    return isfinite(v) && (double)v > t && v > up && v > left && v >= down && v >= right;
}

/* The larger of m and v, a NaN v ignored. */
SW_RH_FN float sw_rh_fmax(float m, float v)
{
    return v > m ? v : m;
}

#ifdef SW_HAVE_CUDA
/* The GPU side (search_reich_cuda.cu). create allocates the device state into *gpu; run queues
 * one frame (device frame of the plan's size and type, any stride; device arrays) on the
 * context's stream without host synchronisation; last_peaks waits for the stream and returns
 * the peak count of the last GPU run (-1 on a CUDA failure). */
sw_status sw_reich_gpu_create(sw_context *ctx, const sw_rh_cfg *c, void **gpu);
void sw_reich_gpu_destroy(void *gpu);
sw_status sw_reich_gpu_run(sw_context *ctx, const sw_rh_cfg *c, void *gpu, const sw_image *frame,
                           const double *sx, const double *sy, const uint8_t *active, double *x,
                           double *y, double *intensity, uint8_t *status);
int64_t sw_reich_gpu_last_peaks(sw_context *ctx, void *gpu);
#endif

#ifdef __cplusplus
}
#endif

#endif
