/*
 * The per-pixel conditioning (centroid.h steps 2-5) and the per-lenslet finish (seed 000 Eq. 7),
 * written once for the CPU (centroid.c) and the GPU (centroid_cuda.cu), so both sides apply the
 * same arithmetic in the same order.
 */
#ifndef SW_CENTROID_MODEL_H
#define SW_CENTROID_MODEL_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define SW_CM_FN __host__ __device__ static inline
#else
#define SW_CM_FN static inline
#endif

/*
 * Steps 2-5 of centroid.h on one pixel value v (after the LUT): dark (d, 0 when off), flat (g, 1
 * when off), threshold t with mode (0 none, 1 subtract, 2 zero), gamma (1 = off). Float, as the
 * GPU reads pixels; the sums that follow are wider.
 */
SW_CM_FN float sw_cm_condition(float v, float d, float g, int mode, float t, float gamma)
{
    v = (v - d) * g;
    /* A NaN or +-Inf pixel stays what it is, so that its lenslet's moments are not finite and
     * the lenslet is reported invalid (a threshold would otherwise turn -Inf into 0). */
    if (!isfinite(v))
        return v;
    if (mode == 1)
        v = v <= t ? 0.0f : v - t;
    else if (mode == 2)
        v = v < t ? 0.0f : v;
    if (gamma != 1.0f)
        v = v <= 0.0f ? 0.0f : powf(v, gamma);
    return v;
}

/* Steps 2-3 only (the value whose lenslet maximum sets a FRACTION threshold). */
SW_CM_FN float sw_cm_prethreshold(float v, float d, float g)
{
    return (v - d) * g;
}

/* The FRACTION threshold of a lenslet whose maximum of sw_cm_prethreshold is m. */
SW_CM_FN float sw_cm_fraction_threshold(double fraction, float m)
{
    return (float)(fraction * (double)m);
}

/*
 * Seed Eq. (7) for one lenslet whose moments about its windowed corner (xs, ys) are m00, m10,
 * m01, and sat = 1 when its region holds a saturated pixel: writes the centroid, the intensity,
 * the flags; returns 1 when valid. Invalid (masked, m00 <= 0, a moment not finite, or saturated
 * with drop set): x = y = NaN, flag 0. The slope (cx - rx, cy - ry) goes to *sx, *sy when they
 * are not NULL (0 when invalid), from the centroid rounded to float. Division and subtraction in
 * double, rounded to float once at the end: the CPU and the GPU give the same bits from the same
 * moments.
 */
SW_CM_FN int sw_cm_finish(double m00, double m10, double m01, int32_t xs, int32_t ys, int in_mask,
                          int sat, int drop, double rx, double ry, float *x, float *y, float *inten,
                          uint8_t *valid, uint8_t *saturated, float *sx, float *sy, uint8_t *status,
                          float *xvar, float *yvar, float *snr)
{
    int ok =
        in_mask && m00 > 0.0 && isfinite(m00) && isfinite(m10) && isfinite(m01) && !(sat && drop);
    /* centroid.h "Status" on the fast path: masked, non-finite, empty, saturated or ok (the
     * numbers of sw_centroid_status); no error bars here (centroid.h). */
    if (status) {
        int finite = isfinite(m00) && isfinite(m10) && isfinite(m01);
        *status = (uint8_t)(!in_mask ? 1 : !finite ? 2 : !(m00 > 0.0) ? 3 : sat ? 7 : 0);
    }
    if (xvar)
        *xvar = NAN;
    if (yvar)
        *yvar = NAN;
    if (snr)
        *snr = NAN;
    double cx = ok ? (double)xs + m10 / m00 : NAN;
    double cy = ok ? (double)ys + m01 / m00 : NAN;
    if (x)
        *x = (float)cx;
    if (y)
        *y = (float)cy;
    if (inten)
        *inten = (float)m00;
    if (valid)
        *valid = (uint8_t)ok;
    if (saturated)
        *saturated = (uint8_t)(sat != 0);
    /* The slope of the centroid as reported (rounded to float), so that a frame measured
     * against its own centroids gives slopes of exactly 0. */
    if (sx)
        *sx = ok ? (float)((double)(float)cx - rx) : 0.0f;
    if (sy)
        *sy = ok ? (float)((double)(float)cy - ry) : 0.0f;
    return ok;
}

/* ---- the generic path's data (centroid_method.h) ---- */

#define SW_CMB_MAXK 14 /* most doubles one SW_CMB_SUM / SW_CMB_MAX reduces */

/*
 * One lenslet's data, and the threads that measure it together (a group of tn threads; this one
 * is thread t0). Region pixel (i, j), q = j w + i, is element sw_cmb_ix(q) of v (of r, cw: q):
 * (q >> lg) ws + (q & (2^lg - 1)). The CPU (one thread, lg 0, ws 1): row-major. The GPU (2^lg =
 * tn threads, ws 32): the pixels the threads of a warp take in one step of their pixel loops
 * are adjacent words of shared memory (no bank conflicts).
 */
typedef struct sw_cmb_region {
    const float *v;  /* pixels after steps 1-3 (LUT, dark, flat)                          */
    const float *r;  /* CORRELATION: the template, row-major (element q); else NULL      */
    float *cw;       /* CORRELATION: work copy of the conditioned region, row-major       */
    double *scratch; /* per group; CORRELATION: (2 S + 1)^2 doubles; WCOG: w + h doubles
                        (its last pass), in the same place 2 (w + h) SW_CMB_WREAL (the
                        re-centring passes, centroid_method.h)                          */
    int32_t w, h;
    int32_t xs, ys; /* frame position of pixel (0, 0)                                     */
    double rx, ry;  /* the lenslet's reference position (frame)                          */
    int in_mask, sat;
    int32_t t0, tn, lg, ws; /* the group (above)                                        */
    uint32_t mask;          /* GPU: the group's lanes in the warp                        */
    /* set by sw_cmb_layout: pixels, this thread's first (i0, j0) and its step (di, dj) */
    int32_t n, i0, j0, di, dj;
} sw_cmb_region;

/* The plan's method parameters (centroid.c fills them from sw_centroid_params). */
typedef struct sw_cmb_params {
    int method;         /* sw_centroid_method                                           */
    int mode, fraction; /* threshold mode (0 none, 1 subtract, 2 zero), FRACTION kind   */
    float thr, gamma;   /* ABSOLUTE threshold, gamma                                      */
    double frac;        /* FRACTION                                                       */
    double sigma_w;     /* WCOG weight r.m.s. width, px                                   */
    int iters;          /* WCOG re-centrings                                              */
    double local_k;     /* LOCAL                                                          */
    int nbright;        /* BRIGHTEST                                                      */
    int search;         /* CORRELATION S                                                  */
    double qgain;       /* QUADCELL g                                                     */
    int have_det;       /* 1: var = max(v, 0) * inv_gain + rn2; 0: the ring's variance    */
    double inv_gain, rn2;
    double min_snr, max_shift, edge_px, edge_frac;
    int peak_border, drop;
} sw_cmb_params;

typedef struct sw_cmb_out {
    double x, y, inten, vx, vy, snr;
    int status, valid;
} sw_cmb_out;

/* The status codes (centroid.h sw_centroid_status). */
enum {
    SW_CMB_OK = 0,
    SW_CMB_MASKED = 1,
    SW_CMB_NONFINITE = 2,
    SW_CMB_EMPTY = 3,
    SW_CMB_LEFT = 4,
    SW_CMB_CUT = 5,
    SW_CMB_FAINT = 6,
    SW_CMB_SATURATED = 7
};
enum {
    SW_CMB_COG = 0,
    SW_CMB_WCOG = 1,
    SW_CMB_LOCAL = 2,
    SW_CMB_BRIGHT = 3,
    SW_CMB_CORR = 4,
    SW_CMB_QUAD = 5
};

#endif
