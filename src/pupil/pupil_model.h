/*
 * The arithmetic of the pupil tracker (pupil.h, seed 001 Sec. 3.1), written once for the CPU
 * (pupil_cpu.c) and the GPU (pupil_cuda.cu), so that both compute the same 8-bit images,
 * thresholds, candidate ellipses and votes. pupil_cuda.cu is compiled with -fmad=false and the C
 * files with -ffp-contract=off: every + - * / and sqrt below rounds alike on both (IEEE), so the
 * results are bit-identical as long as both evaluate the same expressions in the same order.
 * Only the refinement sums (a reduction whose order differs) and the final trigonometry are not.
 */
#ifndef SW_PUPIL_MODEL_H
#define SW_PUPIL_MODEL_H

#include <math.h>
#include <stdint.h>

#include "spotwave/core.h"
#include "spotwave/geometry.h"
#include "spotwave/pupil.h"

#if defined(__CUDACC__)
#define SW_PM_FN __host__ __device__ static inline
#else
#define SW_PM_FN static inline
#endif

/* ------------------------------------------------------------------ step 0: 8-bit input */

/* A pixel of a row of type t as a double (exact for every type). */
SW_PM_FN double sw_pm_pixel(const void *row, int32_t x, sw_pixel_type t)
{
    switch (t) {
    case SW_PIX_U8: return (double)((const uint8_t *)row)[x];
    case SW_PIX_U16: return (double)((const uint16_t *)row)[x];
    case SW_PIX_U32: return (double)((const uint32_t *)row)[x];
    default: return (double)((const float *)row)[x];
    }
}

/* u8 = clamp(rint(v * scale), 0, 255); NaN, negative and zero give 0, +Inf 255. */
SW_PM_FN uint8_t sw_pm_to_u8(double v, double scale)
{
    double s = v * scale;
    if (!(s > 0.0))
        return 0;
    if (s >= 255.0)
        return 255;
    return (uint8_t)rint(s);
}

/*
 * The sums of the automatic scale (pupil.h step 0), in one fixed order that a GPU does fast. A
 * pass sums, over the frame, the pixels v that are finite and above a level thr (v > thr; the
 * others add 0.0), and counts them:
 *   row sum:  32 lanes; lane j adds x = j, j + 32, j + 64, ... in order, then 5 butterfly rounds
 *             s_j <- s_j + s_(j xor o), o = 16, 8, 4, 2, 1 (a warp's __shfl_xor_sync; addition
 *             commutes, so every lane ends with the same value);
 *   total:    1024 slots; slot i adds the row sums i, i + 1024, ... in order, then a tree
 *             slot_i <- slot_i + slot_(i + o) for o = 512, 256, ..., 1 (i < o).
 *   count:    an exact integer (any order).
 * Pass 1 has thr = -infinity (every finite pixel) and gives the frame mean m1 = total / npix
 * (sw_pm_frame_mean); pass 2 has thr = m1 and gives the sum and number of the pixels above the
 * mean, whose mean m2 sets the scale (sw_pm_scale_above). sw_pm_row_sum_host and
 * sw_pm_total_host are the host's rendering of exactly that order.
 */
#define SW_PM_MEAN_LANES 32
#define SW_PM_MEAN_SLOTS 1024

/* What pixel v adds to a pass with level thr: v when it is finite and v > thr, else 0.0 (NaN and
 * Inf give NaN for v - v). */
SW_PM_FN double sw_pm_above(double v, double thr)
{
    return (v - v == 0.0 && v > thr) ? v : 0.0;
}

/* 1 when pixel v counts in a pass with level thr (finite and v > thr). */
SW_PM_FN int sw_pm_counts_above(double v, double thr)
{
    return v - v == 0.0 && v > thr;
}

#if !defined(__CUDACC__)
/* One row's sum (see above) of the pixels above thr; *count gets their number. */
static inline double sw_pm_row_sum_host(const void *row, int32_t width, sw_pixel_type t, double thr,
                                        int64_t *count)
{
    double s[SW_PM_MEAN_LANES];
    int64_t n = 0;
    for (int j = 0; j < SW_PM_MEAN_LANES; j++) {
        double a = 0.0;
        for (int32_t x = j; x < width; x += SW_PM_MEAN_LANES) {
            const double v = sw_pm_pixel(row, x, t);
            a += sw_pm_above(v, thr);
            n += sw_pm_counts_above(v, thr);
        }
        s[j] = a;
    }
    for (int o = SW_PM_MEAN_LANES / 2; o >= 1; o /= 2) {
        double nx[SW_PM_MEAN_LANES];
        for (int j = 0; j < SW_PM_MEAN_LANES; j++)
            nx[j] = s[j] + s[j ^ o];
        for (int j = 0; j < SW_PM_MEAN_LANES; j++)
            s[j] = nx[j];
    }
    *count = n;
    return s[0];
}

static inline double sw_pm_total_host(const double *row_sums, int32_t height)
{
    double s[SW_PM_MEAN_SLOTS];
    for (int i = 0; i < SW_PM_MEAN_SLOTS; i++) {
        double a = 0.0;
        for (int32_t y = i; y < height; y += SW_PM_MEAN_SLOTS)
            a += row_sums[y];
        s[i] = a;
    }
    for (int o = SW_PM_MEAN_SLOTS / 2; o >= 1; o /= 2)
        for (int i = 0; i < o; i++)
            s[i] = s[i] + s[i + o];
    return s[0];
}
#endif

/* Pass 1's mean m1 = total / npix (NaN and Inf pixels count as 0); 0 when it is not positive
 * and finite (SW_PUPIL_EMPTY_FRAME: no automatic scale, and no pass 2). */
SW_PM_FN double sw_pm_frame_mean(double total, int64_t npix)
{
    double mean = total / (double)npix;
    if (!(mean > 0.0) || mean - mean != 0.0)
        return 0.0;
    return mean;
}

/* The automatic scale (pupil.h step 0) from m1 (> 0) and pass 2's sum and count of the pixels
 * above m1: 128 / m2 with m2 = sum / count, or 128 / m1 when no pixel lies above m1 (a uniform
 * frame: it maps to 128 everywhere, and step 3 finds no contrast). */
SW_PM_FN double sw_pm_scale_above(double m1, double sum_above, int64_t n_above)
{
    double m2 = n_above > 0 ? sum_above / (double)n_above : m1;
    return 128.0 / m2;
}

/* ------------------------------------------------------------------ step 1: Gaussian */

/* One 1-D pass at one pixel: w has 2r + 1 weights summing to 65536; in[] is read at clamped
 * positions by the caller, who passes the 2r + 1 values in order. */
SW_PM_FN uint8_t sw_pm_gauss_finish(uint32_t acc)
{
    return (uint8_t)((acc + 32768u) >> 16);
}

/* ------------------------------------------------------------------ step 3: Otsu */

/*
 * Between-class variance criterion (up to a constant factor) for the split {v <= t}, {v > t} of
 * a histogram with N pixels summing to ST, n0 of them summing to S0 in the lower class:
 *     (N S0 - n0 ST)^2 / (n0 (N - n0)),   -1 when a class is empty.
 * All inputs are exact integers; ties stay exact ties (the smallest t wins them) and the
 * arithmetic is the same on both sides.
 */
SW_PM_FN double sw_pm_otsu_criterion(int64_t N, int64_t ST, int64_t n0, int64_t S0)
{
    int64_t n1 = N - n0;
    if (n0 <= 0 || n1 <= 0)
        return -1.0;
    /* the difference in exact 128-bit integers: in double, N S0 and n0 ST round separately once
     * they pass 2^53 (frames of ~6 megapixels), and exact ties would no longer be ties */
    __int128 e = (__int128)N * S0 - (__int128)n0 * ST;
    double d = (double)e;
    return d * d / ((double)n0 * (double)n1);
}

/* Otsu's threshold of a 256-bin histogram: the t in 0..254 with the largest criterion, the
 * smallest t on ties; -1 when no t splits the pixels into two non-empty classes. */
SW_PM_FN int32_t sw_pm_otsu(const int64_t *hist)
{
    int64_t N = 0, ST = 0;
    for (int i = 0; i < 256; i++) {
        N += hist[i];
        ST += (int64_t)i * hist[i];
    }
    int64_t n0 = 0, S0 = 0;
    double best = -1.0;
    int32_t t_best = -1;
    for (int t = 0; t < 255; t++) {
        n0 += hist[t];
        S0 += (int64_t)t * hist[t];
        double c = sw_pm_otsu_criterion(N, ST, n0, S0);
        if (c > best) {
            best = c;
            t_best = t;
        }
    }
    return best >= 0.0 ? t_best : -1;
}

/*
 * Three-class criterion (pupil.h step 3, otsu_classes = 3; Liao, Chen and Chung's multi-level
 * Otsu): the between-class variance of {v <= t1}, {t1 < v <= t2}, {v > t2} up to the constant
 * factor N^3, sum_k e_k^2 / n_k with e_k = N S_k - n_k ST (n_k pixels summing to S_k in class k;
 * e_0 + e_1 + e_2 = 0), from the exact prefix sums (n1, S1) of {v <= t1} and (n2, S2) of
 * {v <= t2}; -1 when a class is empty. The e_k are exact (128-bit integers), each rounded once
 * to double, and the three terms are added in this order: both backends compute the same value.
 * With two classes the same sum is N times sw_pm_otsu_criterion.
 */
SW_PM_FN double sw_pm_otsu3_criterion(int64_t N, int64_t ST, int64_t n1, int64_t S1, int64_t n2,
                                      int64_t S2)
{
    const int64_t c0 = n1, c1 = n2 - n1, c2 = N - n2;
    if (c0 <= 0 || c1 <= 0 || c2 <= 0)
        return -1.0;
    const __int128 e0 = (__int128)N * S1 - (__int128)n1 * ST;
    const __int128 e12 = (__int128)N * S2 - (__int128)n2 * ST; /* e_0 + e_1 */
    const __int128 e1 = e12 - e0, e2 = -e12;
    const double d0 = (double)e0, d1 = (double)e1, d2 = (double)e2;
    return d0 * d0 / (double)c0 + d1 * d1 / (double)c1 + d2 * d2 / (double)c2;
}

/* Three-class Otsu of a 256-bin histogram: the pair 0 <= t1 < t2 <= 254 with the largest
 * sw_pm_otsu3_criterion, the smallest (t1, t2) in lexicographic order on ties (t1 ascending, t2
 * ascending, strictly larger replaces). Returns t1 and writes t2 when t2_out is not NULL; -1
 * (t2 -1) when the pixels take fewer than three values. Pairs with an empty bin at t1 or t2 are
 * skipped: the same classes, hence the same criterion bit for bit, came earlier with a smaller
 * index (or a class is empty), so skipping them does not change the result (a backend may
 * evaluate them or not). */
SW_PM_FN int32_t sw_pm_otsu3(const int64_t *hist, int32_t *t2_out)
{
    int64_t cn[256], cs[256]; /* inclusive prefix sums: pixels v <= t and their sum */
    int64_t n = 0, S = 0;
    for (int i = 0; i < 256; i++) {
        n += hist[i];
        S += (int64_t)i * hist[i];
        cn[i] = n;
        cs[i] = S;
    }
    double best = -1.0;
    int32_t b1 = -1, b2 = -1;
    for (int t1 = 0; t1 < 254; t1++) {
        if (hist[t1] == 0)
            continue;
        for (int t2 = t1 + 1; t2 < 255; t2++) {
            if (hist[t2] == 0)
                continue;
            const double c = sw_pm_otsu3_criterion(n, S, cn[t1], cs[t1], cn[t2], cs[t2]);
            if (c > best) {
                best = c;
                b1 = t1;
                b2 = t2;
            }
        }
    }
    if (t2_out)
        *t2_out = best >= 0.0 ? b2 : -1;
    return best >= 0.0 ? b1 : -1;
}

/*
 * Step 3a: the clip of a region's histogram (in place), so that a few very bright pixels (a
 * corneal reflection, spot peaks) cannot take a class of the split: P = the median of the
 * pixels above the region's mean (v N > sum: exact), the smallest v with 2 (pixels in
 * (mean, v]) >= (pixels above the mean); c = floor(3 P / 2); when c < 255 the pixels above c
 * count as c. Returns c (255: nothing clipped). A histogram with no pixel above its mean (one
 * value, or none) is left alone.
 */
SW_PM_FN int32_t sw_pm_clip_hist(int64_t *hist)
{
    int64_t N = 0, ST = 0;
    for (int i = 0; i < 256; i++) {
        N += hist[i];
        ST += (int64_t)i * hist[i];
    }
    int64_t above = 0;
    for (int i = 0; i < 256; i++)
        if ((int64_t)i * N > ST)
            above += hist[i];
    if (above == 0)
        return 255;
    int64_t acc = 0;
    int32_t P = 255;
    for (int i = 0; i < 256; i++)
        if ((int64_t)i * N > ST) {
            acc += hist[i];
            if (2 * acc >= above) {
                P = i;
                break;
            }
        }
    const int32_t c = (3 * P) / 2;
    if (c >= 255)
        return 255;
    for (int i = c + 1; i < 256; i++) {
        hist[c] += hist[i];
        hist[i] = 0;
    }
    return c;
}

/*
 * Step 3c: the edge level. With the split t_o (class 0: v <= t_o, the iris; above: the pupil),
 * b = the mean of class 0 (sum / count, one double division), p = the median of the pixels above
 * t_o (the smallest v > t_o with 2 (pixels in (t_o, v]) >= (pixels above t_o)), and
 * t = floor(b + edge_level (p - b)) in double arithmetic in this order; edge_level 0: t = t_o.
 * For 0 < edge_level < 1 the result lies in [floor(b), p - 1].
 */
SW_PM_FN int32_t sw_pm_edge_threshold(const int64_t *hist, int32_t t_o, double edge_level)
{
    if (t_o < 0 || !(edge_level > 0.0))
        return t_o;
    int64_t n0 = 0, s0 = 0, n1 = 0;
    for (int i = 0; i < 256; i++) {
        if (i <= t_o) {
            n0 += hist[i];
            s0 += (int64_t)i * hist[i];
        } else {
            n1 += hist[i];
        }
    }
    int64_t acc = 0;
    int32_t p = 255;
    for (int i = t_o + 1; i < 256; i++) {
        acc += hist[i];
        if (2 * acc >= n1) {
            p = i;
            break;
        }
    }
    const double b = (double)s0 / (double)n0;
    const double t = floor(b + edge_level * ((double)p - b));
    return t < 0.0 ? 0 : (t > 254.0 ? 254 : (int32_t)t);
}

/* Steps 3a-3b: the clip (sw_pm_clip_hist, in place) and the split t_o with otsu_classes 2
 * (sw_pm_otsu) or 3 (t1 of sw_pm_otsu3; a region whose clipped pixels take exactly two values
 * has no three-class split and gets the two-class one); -1 when the region's pixels all have
 * one value. */
SW_PM_FN int32_t sw_pm_split(int64_t *hist, int32_t otsu_classes)
{
    sw_pm_clip_hist(hist);
    int32_t t_o = -1;
    if (otsu_classes == 3)
        t_o = sw_pm_otsu3(hist, (int32_t *)0);
    if (t_o < 0)
        t_o = sw_pm_otsu(hist);
    return t_o;
}

/* Step 3, all of it: the split (sw_pm_split, which clips hist in place), then the edge level
 * (sw_pm_edge_threshold). -1 when the region's pixels all have one value. */
SW_PM_FN int32_t sw_pm_threshold(int64_t *hist, int32_t otsu_classes, double edge_level)
{
    return sw_pm_edge_threshold(hist, sw_pm_split(hist, otsu_classes), edge_level);
}

/*
 * Step 3d, the automatic edge level (pupil.h, edge_level < 0): after a fit, the smoothed image
 * is measured in three bands about the found ellipse (rho = its normalised radius, 1 on the
 * ellipse; d = (rho - 1) R, R = (a + b) / 2, the distance off the edge in pixels): two inside,
 * rho in [SW_PM_RING_FAR_LO, SW_PM_RING_FAR_HI) (far; it ends where the near band starts at the
 * latest) and d in [-(m + W), -m) (near), one outside, d in [m, m + W), with the margin
 * m = 3 s + 3 px off the blurred edge (s = min(gauss_sigma, gauss_radius), the smoothing) and
 * W = SW_PM_RING_W px. Each band's level is a percentile of its pixels' values (the inside ones
 * low, below the spots between which the glow shows): L1 (far), L2 (near), L3 (outside). The
 * glow at the edge is L2 extrapolated linearly in rho^2 from the two inside bands' middles to
 * rho = 1, Le = L2 + (L2 - L1) extrap (at most L2: a glow rising towards the edge is taken as
 * flat), and the new threshold is the half height of the edge, floor((Le + L3) / 2).
 *
 * Both backends take the same decisions from the same numbers: the bands' pixels are those of
 * sw_pm_ring_box with sw_pm_ring_band >= 0 (each pixel tested alike, the histograms are integer
 * counts: any order), the threshold is sw_pm_ring_threshold of them, and the refits are driven
 * by the sw_pm_auto functions below (the CPU runs one pupil's refits in a loop, the GPU every
 * pupil's refit k in one pass of kernels; the decisions per pupil are the same sequence). What
 * may differ is only the ellipse the bands are drawn about: its refinement sums are added in
 * another order (about 1e-12 px) and the GPU's cos / sin of its angle may differ by an ulp, so
 * a pixel whose rho^2 lies within ~1e-12 of a band's limit could fall in another band on the
 * other backend (not seen in the tests; a change of the threshold would also need a percentile
 * within that of an integer).
 */
#define SW_PM_RING_W         8.0 /* band width, px                                     */
#define SW_PM_RING_Q_IN      0.5 /* the inside bands' percentile (under the spots)     */
#define SW_PM_RING_Q_OUT     0.5 /* the outside band's percentile                      */
#define SW_PM_RING_MIN_PIX   64  /* pixels a band needs                                */
#define SW_PM_RING_FAR_LO    0.6 /* the far inside band: rho in [0.6, 0.75)           */
#define SW_PM_RING_FAR_HI    0.75
#define SW_PM_RING_PASSES    4   /* the most refits after the first                    */
#define SW_PM_EDGE_AUTO_INIT 0.4 /* the first pass's edge level (fall-off 0.3)         */
#define SW_PM_AUTO_RETRIES   3   /* lower levels tried when the first fit fails        */

/*
 * The retries of the first fit (step 3d, before the bands can be measured): when the pupil is not
 * found at SW_PM_EDGE_AUTO_INIT, steps 4-9 run again at the levels 0.2, 0.1, 0.05 of the same
 * split (sw_pm_edge_threshold of the same clipped histogram and t_o), until one finds it. A glow
 * falling off by f as 1 - f rho^2 has its edge's half height at about (1 - f) / (2 - f) of the
 * way from the iris to the pupil's median (pupil.h step 3d); above the edge itself, about twice
 * that, the blob is cut out of the dim, spot-speckled glow inside the pupil and its border is
 * ragged (the fit fails with CLUTTER or LOW_SUPPORT). Each retry halves the level, i.e. reaches
 * an edge half as bright: 0.2 holds an edge down to f ~ 0.8, 0.1 to f ~ 0.9, 0.05 to f ~ 0.95
 * (sim eye: the first level that finds the pupil at f = 0.8 is 0.3, at 0.9 0.2 to 0.1, at 0.95
 * 0.15 to 0.05); 0.05 lies 1-3 grey levels above the iris' mean, lower would split the iris'
 * noise. The retry's pupil is only a start: the refits follow from it.
 */
SW_PM_FN double sw_pm_auto_retry_level(int k)
{
    return k == 0 ? 0.2 : (k == 1 ? 0.1 : 0.05);
}

/* Whether a first fit that failed is retried: only when it failed as a blob cut out of a glow
 * that falls off fails, with a ragged border (CLUTTER or LOW_SUPPORT, above). Other failures
 * are not the edge's level: a region too small or no ellipse at 0.4 grows at every lower level
 * until it passes the size limits, and a lone corneal reflection on a dark frame became a
 * "pupil" that way (test_pupil's noise frames, 320 x 320, read noise and a 600 e- reflection of
 * sigma 12 px: BAD_FIT at 0.4, found at a retry). */
SW_PM_FN const int32_t *sw_pm_auto_retries_for(const sw_pupil_ellipse *o, const int32_t *retry_thr)
{
    return (o->failure == SW_PUPIL_CLUTTER || o->failure == SW_PUPIL_LOW_SUPPORT) ? retry_thr
                                                                                  : NULL;
}

/* A retry's pupil stands only when it passed the verdict with a clean edge: near-band points at
 * most SW_PM_RETRY_NEAR x max_near_ratio x inliers (half what the verdict lets pass). Of
 * several tries one is likelier to slip through the verdict by chance, and a dim glow lit mostly
 * by blurred spots (small pitches) makes a blob that passes at some lower level with a ragged
 * edge (sim eye, pitch 16, glow 2 e-: near / inliers 0.65-0.74, the radius 1-2 % short, where the
 * spots path gets within 0.2 %); an edge found at a lower level because the glow falls off is
 * clean (fall-offs 0.8-0.95: 0.12-0.35). */
#define SW_PM_RETRY_NEAR 0.5
SW_PM_FN int sw_pm_auto_retry_found(const sw_pupil_ellipse *o, double max_near_ratio)
{
    return o->valid && !((double)o->near > SW_PM_RETRY_NEAR * max_near_ratio * (double)o->inliers);
}

/* The retries' thresholds from the clipped histogram and its split t_o (as step 3 leaves them):
 * sw_pm_edge_threshold at each retry level; all -1 when t_o < 0. */
SW_PM_FN void sw_pm_auto_retry_thresholds(const int64_t *hist, int32_t t_o, int32_t *out)
{
    for (int k = 0; k < SW_PM_AUTO_RETRIES; k++)
        out[k] = sw_pm_edge_threshold(hist, t_o, sw_pm_auto_retry_level(k));
}

/* The bands about one pupil: per pixel, band k (0 far inside, 1 near inside, 2 outside) when
 * lo2[k] <= rho^2 < hi2[k]. */
typedef struct sw_pm_ring {
    double cx, cy, ct, st, ia, ib; /* centre, cos / sin of the major axis' angle, 1 / a, 1 / b */
    double lo2[3], hi2[3];
    double extrap; /* (m + W / 2) / W */
    int usable;    /* 0: the pupil is too small for the bands (R < 2 (m + 2 W)) */
} sw_pm_ring;

/* The bands of a found pupil (pixels, degrees: sw_pupil_ellipse) for the smoothing's radius and
 * sigma. cos and sin come from the caller (the backends' own, equal to an ulp). */
SW_PM_FN sw_pm_ring sw_pm_ring_make(double cx, double cy, double a, double b, double ct, double st,
                                    int32_t gauss_radius, double gauss_sigma)
{
    sw_pm_ring g;
    const double s =
        gauss_radius <= 0
            ? 0.0
            : (gauss_sigma < (double)gauss_radius ? gauss_sigma : (double)gauss_radius);
    const double m = 3.0 * s + 3.0, W = SW_PM_RING_W, R = 0.5 * (a + b);
    const double d[4] = {-(m + 2.0 * W), -(m + W), -m, m};
    g.cx = cx;
    g.cy = cy;
    g.ct = ct;
    g.st = st;
    g.ia = 1.0 / a;
    g.ib = 1.0 / b;
    g.usable = R >= 2.0 * (m + W);
    double r2[4];
    for (int k = 0; k < 4; k++) {
        const double rho = 1.0 + d[k] / R;
        r2[k] = rho > 0.0 ? rho * rho : 0.0;
    }
    const double ro = 1.0 + (m + W) / R;
    g.lo2[0] = SW_PM_RING_FAR_LO * SW_PM_RING_FAR_LO;
    g.hi2[0] = SW_PM_RING_FAR_HI * SW_PM_RING_FAR_HI;
    if (g.hi2[0] > r2[1])
        g.hi2[0] = r2[1];
    g.lo2[1] = r2[1];
    g.hi2[1] = r2[2];
    g.lo2[2] = r2[3];
    g.hi2[2] = ro * ro;
    /* an annulus' mean rho^2 is the middle of its limits in rho^2 */
    const double c1 = 0.5 * (g.lo2[0] + g.hi2[0]), c2 = 0.5 * (g.lo2[1] + g.hi2[1]);
    g.extrap = (1.0 - c2) / (c2 - c1);
    if (!(g.hi2[0] - g.lo2[0] > 0.05))
        g.usable = 0;
    return g;
}

/* The bands of found pupil o (sw_pm_ring_make with its angle's cos and sin). */
SW_PM_FN sw_pm_ring sw_pm_ring_of(const sw_pupil_ellipse *o, int32_t gauss_radius,
                                  double gauss_sigma)
{
    const double t = o->angle_deg * (3.14159265358979323846 / 180.0);
    return sw_pm_ring_make(o->cx_px, o->cy_px, o->a_px, o->b_px, cos(t), sin(t), gauss_radius,
                           gauss_sigma);
}

/* The band of pixel (x, y): 0, 1, 2, or -1 in none. */
SW_PM_FN int sw_pm_ring_band(const sw_pm_ring *g, int32_t x, int32_t y)
{
    const double dx = (double)x - g->cx, dy = (double)y - g->cy;
    const double e1 = (dx * g->ct + dy * g->st) * g->ia;
    const double e2 = (dy * g->ct - dx * g->st) * g->ib;
    const double r2 = e1 * e1 + e2 * e2;
    for (int k = 0; k < 3; k++)
        if (r2 >= g->lo2[k] && r2 < g->hi2[k])
            return k;
    return -1;
}

/* The q-quantile of a 256-bin histogram of n >= 1 values, interpolated within its bin (bin v
 * spreads its pixels evenly over [v - 1/2, v + 1/2)). */
SW_PM_FN double sw_pm_hist_quantile(const unsigned int *h, int64_t n, double q)
{
    const double target = q * (double)n;
    int64_t below = 0;
    for (int v = 0; v < 256; v++) {
        const int64_t c = (int64_t)h[v];
        if (c > 0 && (double)(below + c) > target)
            return (double)v - 0.5 + (target - (double)below) / (double)c;
        below += c;
    }
    return 255.0;
}

/* The new threshold from the bands' histograms (h[k * 256 + v], k = 0, 1, 2) and the ring's
 * extrapolation factor; -1 when a band has fewer than SW_PM_RING_MIN_PIX pixels or the edge
 * stands less than 2 levels above the outside (nothing to measure: the threshold stays). */
SW_PM_FN int32_t sw_pm_ring_threshold(const unsigned int *h, double extrap)
{
    double L[3];
    for (int k = 0; k < 3; k++) {
        int64_t n = 0;
        for (int v = 0; v < 256; v++)
            n += (int64_t)h[k * 256 + v];
        if (n < SW_PM_RING_MIN_PIX)
            return -1;
        L[k] = sw_pm_hist_quantile(h + k * 256, n, k < 2 ? SW_PM_RING_Q_IN : SW_PM_RING_Q_OUT);
    }
    double le = L[1] + (L[1] - L[0]) * extrap;
    if (le > L[1])
        le = L[1];
    if (!(le >= L[2] + 2.0))
        return -1;
    const double t = floor(0.5 * (le + L[2]));
    return t < 0.0 ? 0 : (t > 254.0 ? 254 : (int32_t)t);
}

/* The pixels step 3d looks at about pupil o (pixels, as sw_pupil_ellipse) with bands g, in the
 * region of columns [x0, x1) of a frame of `height` rows: the box of half-side
 * a sqrt(hi2 of the outside band) + 2 px about the centre (every band pixel lies inside it:
 * a >= b), clipped to the region; columns [*xa, *xb] and rows [*ya, *yb], inclusive (empty when
 * *xa > *xb or *ya > *yb). */
SW_PM_FN void sw_pm_ring_box(const sw_pupil_ellipse *o, const sw_pm_ring *g, int32_t x0, int32_t x1,
                             int32_t height, int32_t *xa, int32_t *xb, int32_t *ya, int32_t *yb)
{
    const double ext = o->a_px * sqrt(g->hi2[2]) + 2.0;
    const double xl = floor(o->cx_px - ext), xh = ceil(o->cx_px + ext);
    const double yl = floor(o->cy_px - ext), yh = ceil(o->cy_px + ext);
    *xa = xl < (double)x0 ? x0 : (int32_t)xl;
    *xb = xh > (double)(x1 - 1) ? x1 - 1 : (int32_t)xh;
    *ya = yl < 0.0 ? 0 : (int32_t)yl;
    *yb = yh > (double)(height - 1) ? height - 1 : (int32_t)yh;
}

/*
 * Step 3d's course for one pupil, the same on both backends:
 *   r[k] = sw_pm_edge_threshold(clipped hist, t_o, sw_pm_auto_retry_level(k))   (step 3)
 *   s = sw_pm_auto_start(on, found, t, r)        after the first fit (threshold t)
 *   while s.retrying:                            at most SW_PM_AUTO_RETRIES retries
 *       steps 4-9 with threshold s.thr
 *       if sw_pm_auto_retried(&s, found): no retry found the pupil: the first fit's (failed)
 *           pupil stays, and its mask and border list are made again with the restored s.thr
 *       else found: the retry's pupil stands (else it is dropped: the next retry follows)
 *   while sw_pm_auto_more(&s):                   at most SW_PM_RING_PASSES refits
 *       h = the bands' histograms about the pupil (none when the bands are not usable)
 *       if !sw_pm_auto_measure(&s, usable, h, extrap): stop (the pupil and threshold stand)
 *       steps 4-9 with threshold s.thr
 *       if sw_pm_auto_refit(&s, found): the refit found nothing: the last pupil found stays,
 *           and its mask and border list are made again with the restored s.thr; stop
 */
typedef struct sw_pm_auto {
    int32_t active;        /* refits may follow                                    */
    int32_t thr;           /* the threshold of the masks being fitted              */
    int32_t prev_thr;      /* the threshold before the last change (its pupil's)   */
    int32_t refits;        /* refits run so far                                    */
    int32_t retrying;      /* a retry of the first fit runs at thr                 */
    int32_t retries;       /* retry thresholds taken so far                        */
    int32_t first_thr;     /* the first fit's threshold                            */
    int32_t retried;       /* the pupil was found by a retry                       */
    int32_t dropped;       /* a refit found nothing (the level did not settle)      */
    int32_t first_failure; /* the first fit's failure (the caller's, after start) */
    int32_t retry_thr[SW_PM_AUTO_RETRIES]; /* the retries' thresholds (-1: none) */
} sw_pm_auto;

/* The next retry: the first of the remaining retry thresholds below the last one tried (the
 * levels fall; an equal threshold would make the same masks and fail alike); none left: the
 * retries are over (s->retrying 0). */
SW_PM_FN void sw_pm_auto_next_retry(sw_pm_auto *s)
{
    s->retrying = 0;
    while (s->retries < SW_PM_AUTO_RETRIES) {
        const int32_t t = s->retry_thr[s->retries++];
        if (t >= 0 && t < s->thr) {
            s->thr = t;
            s->retrying = 1;
            return;
        }
    }
}

/* After the first fit (threshold thr; retry_thr: the SW_PM_AUTO_RETRIES retries' thresholds, or
 * NULL for none): refits may follow when step 3d is on (edge_level < 0, and the frame not empty)
 * and the pupil was found; when it is on and the pupil was not found (thr >= 0), the first retry
 * follows if there is one (s.retrying, at s.thr). */
SW_PM_FN sw_pm_auto sw_pm_auto_start(int on, int found, int32_t thr, const int32_t *retry_thr)
{
    sw_pm_auto s;
    s.active = on && found;
    s.thr = thr;
    s.prev_thr = thr;
    s.refits = 0;
    s.retrying = 0;
    s.retries = 0;
    s.first_thr = thr;
    s.retried = 0;
    s.dropped = 0;
    s.first_failure = SW_PUPIL_OK;
    for (int k = 0; k < SW_PM_AUTO_RETRIES; k++)
        s.retry_thr[k] = retry_thr ? retry_thr[k] : -1;
    if (on && !found && thr >= 0)
        sw_pm_auto_next_retry(&s);
    return s;
}

/* After a retry (s->retrying): found, its pupil stands and refits may follow (returns 0); not
 * found, the next retry follows (s.retrying, returns 0; the pupil is dropped), or, when none is
 * left, the threshold goes back to the first fit's, whose pupil stays (returns 1: the masks and
 * border list are to be made again with s->thr). */
SW_PM_FN int sw_pm_auto_retried(sw_pm_auto *s, int found)
{
    if (found) {
        s->retrying = 0;
        s->retried = 1;
        s->active = 1;
        s->prev_thr = s->thr;
        return 0;
    }
    sw_pm_auto_next_retry(s);
    if (s->retrying)
        return 0;
    s->thr = s->first_thr;
    s->prev_thr = s->first_thr;
    return 1;
}

/* Whether the pupil o of a retry or refit stands (the `found` of sw_pm_auto_retried and
 * sw_pm_auto_refit): it passed the verdict, and in a retry, or a refit after one, with a clean
 * edge too (sw_pm_auto_retry_found): the refits then go down to levels near the iris', where a
 * blob that takes in the iris' noise or an artefact can still pass the verdict (sim eye,
 * fall-off 0.9: threshold 10 -> 9 turned a pupil within 0.3 % into one 6 % too large, near /
 * inliers 0.61). A course without a retry is judged by the verdict alone, as before. */
SW_PM_FN int sw_pm_auto_found(const sw_pm_auto *s, const sw_pupil_ellipse *o, double max_near_ratio)
{
    return s->retrying || s->retried ? sw_pm_auto_retry_found(o, max_near_ratio) : o->valid;
}

/* Whether the spots path measures the pupil again (pupil.h spots_fallback 1): when a retry found
 * it and a refit at the half height measured about it found nothing (the level did not settle:
 * a glow falling off by 0.95 left its pupil 2 % small), the first fit's failure (the reason given
 * for the spots path's pupil); else SW_PUPIL_OK. */
SW_PM_FN sw_pupil_failure sw_pm_auto_recheck(const sw_pm_auto *s)
{
    return s->retried && s->dropped ? (sw_pupil_failure)s->first_failure : SW_PUPIL_OK;
}

/* Whether the bands are to be measured (another refit may follow). */
SW_PM_FN int sw_pm_auto_more(const sw_pm_auto *s)
{
    return s->active && s->refits < SW_PM_RING_PASSES;
}

/* The measure: the new threshold from the bands' histograms h (3 x 256; not read when usable is
 * 0) and extrap (sw_pm_ring). Returns 1 when it changed: s->thr is the new one, a refit
 * follows; 0 when there is none or it is the same: no more refits (s->active 0). */
SW_PM_FN int sw_pm_auto_measure(sw_pm_auto *s, int usable, const unsigned int *h, double extrap)
{
    if (!sw_pm_auto_more(s)) {
        s->active = 0;
        return 0;
    }
    const int32_t tn = usable ? sw_pm_ring_threshold(h, extrap) : -1;
    if (tn < 0 || tn == s->thr) {
        s->active = 0;
        return 0;
    }
    s->prev_thr = s->thr;
    s->thr = tn;
    s->refits++;
    return 1;
}

/* After a refit: found, the new pupil stands and refits may follow; not found, the threshold
 * goes back (s->thr = the last pupil's), no refit follows and s->dropped is set. Returns 1 in the
 * second case: the masks and border list are to be made again with s->thr. */
SW_PM_FN int sw_pm_auto_refit(sw_pm_auto *s, int found)
{
    if (found)
        return 0;
    s->thr = s->prev_thr;
    s->active = 0;
    s->dropped = 1;
    return 1;
}

/* ------------------------------------------------------------------ regions and coordinates */

/* A region (pupil.h step 2) and its normalised coordinates u = (x - ox) inv_s, v likewise. */
typedef struct sw_pm_region {
    int32_t x0, x1, height; /* columns [x0, x1), rows [0, height)                       */
    double ox, oy;          /* the region's centre                                       */
    double inv_s;           /* 2 / max(x1 - x0, height)                                  */
    float tol2;             /* (inlier_px inv_s)^2, the vote's squared distance (float)   */
    double tol2d;           /* the same in double, for the refinement                    */
} sw_pm_region;

SW_PM_FN sw_pm_region sw_pm_region_make(int32_t x0, int32_t x1, int32_t height, double inlier_px)
{
    sw_pm_region r;
    r.x0 = x0;
    r.x1 = x1;
    r.height = height;
    r.ox = 0.5 * (double)(x0 + x1 - 1);
    r.oy = 0.5 * (double)(height - 1);
    int32_t s = x1 - x0 > height ? x1 - x0 : height;
    r.inv_s = 2.0 / (double)s;
    double t = inlier_px * r.inv_s;
    r.tol2d = t * t;
    r.tol2 = (float)r.tol2d;
    return r;
}

SW_PM_FN double sw_pm_u(const sw_pm_region *r, int32_t x)
{
    return ((double)x - r->ox) * r->inv_s;
}
SW_PM_FN double sw_pm_v(const sw_pm_region *r, int32_t y)
{
    return ((double)y - r->oy) * r->inv_s;
}

/* ------------------------------------------------------------------ step 6: RANSAC */

/* Determinant of a 5 x 5 matrix (row-major, destroyed) by Gaussian elimination with partial
 * pivoting. */
SW_PM_FN double sw_pm_det5(double *m)
{
    double det = 1.0;
    for (int c = 0; c < 5; c++) {
        int p = c;
        for (int r = c + 1; r < 5; r++)
            if (fabs(m[r * 5 + c]) > fabs(m[p * 5 + c]))
                p = r;
        if (m[p * 5 + c] == 0.0)
            return 0.0;
        if (p != c) {
            for (int k = 0; k < 5; k++) {
                double t = m[c * 5 + k];
                m[c * 5 + k] = m[p * 5 + k];
                m[p * 5 + k] = t;
            }
            det = -det;
        }
        double piv = m[c * 5 + c];
        det *= piv;
        for (int r = c + 1; r < 5; r++) {
            double f = m[r * 5 + c] / piv;
            for (int k = c + 1; k < 5; k++)
                m[r * 5 + k] -= f * m[c * 5 + k];
        }
    }
    return det;
}

/*
 * The conic A u^2 + B u v + C v^2 + D u + E v + F = 0 through 5 points: the null vector of the
 * 5 x 6 matrix of rows (u^2, uv, v^2, u, v, 1), by cofactors c_k = (-1)^k det(M without column
 * k), scaled to unit length with A + C >= 0. In three parts, so that a GPU can give the six
 * cofactors to six lanes and still round exactly as the host: the rows, one cofactor, the
 * scaling (sw_pm_conic5 runs them in order).
 */
SW_PM_FN void sw_pm_conic5_rows(const double *u, const double *v, double row[5][6])
{
    for (int i = 0; i < 5; i++) {
        row[i][0] = u[i] * u[i];
        row[i][1] = u[i] * v[i];
        row[i][2] = v[i] * v[i];
        row[i][3] = u[i];
        row[i][4] = v[i];
        row[i][5] = 1.0;
    }
}

SW_PM_FN double sw_pm_conic5_cofactor(const double row[5][6], int k)
{
    double m[25];
    for (int i = 0; i < 5; i++) {
        int q = 0;
        for (int j = 0; j < 6; j++)
            if (j != k)
                m[i * 5 + q++] = row[i][j];
    }
    double d = sw_pm_det5(m);
    return (k & 1) ? -d : d;
}

/* Scales the six cofactors in c to unit length with A + C >= 0; 0 when they are all 0 or not
 * finite (the points do not fix one conic). */
SW_PM_FN int sw_pm_conic5_scale(double *c)
{
    double n2 = 0.0;
    for (int k = 0; k < 6; k++)
        n2 += c[k] * c[k];
    if (!(n2 > 0.0) || n2 - n2 != 0.0)
        return 0;
    double inv = 1.0 / sqrt(n2);
    if (c[0] + c[2] < 0.0)
        inv = -inv;
    for (int k = 0; k < 6; k++)
        c[k] *= inv;
    return 1;
}

SW_PM_FN int sw_pm_conic5(const double *u, const double *v, double *c)
{
    double row[5][6];
    sw_pm_conic5_rows(u, v, row);
    for (int k = 0; k < 6; k++)
        c[k] = sw_pm_conic5_cofactor(row, k);
    return sw_pm_conic5_scale(c);
}

/*
 * The ellipse of a conic (normalised coordinates): centre (uc, vc) and semi-axes ra >= rb.
 * Returns 0 unless it is a real, non-degenerate ellipse (4AC - B^2 > 0 and the conic's value at
 * the centre of the other sign than A + C).
 */
SW_PM_FN int sw_pm_conic_axes(const double *c, double *uc, double *vc, double *ra, double *rb)
{
    double A = c[0], B = c[1], C = c[2], D = c[3], E = c[4], F = c[5];
    double disc = 4.0 * A * C - B * B;
    if (!(disc > 0.0))
        return 0;
    double u0 = (B * E - 2.0 * C * D) / disc;
    double v0 = (B * D - 2.0 * A * E) / disc;
    double f0 = F + 0.5 * (D * u0 + E * v0);
    double h = 0.5 * (A + C);
    double q = 0.5 * sqrt((A - C) * (A - C) + B * B);
    double l1 = h - q, l2 = h + q; /* |l1| <= |l2| when A + C > 0 (then both > 0) */
    if (h < 0.0) {
        /* both negative: flip signs so that the smaller magnitude comes first */
        l1 = -(h + q);
        l2 = -(h - q);
        f0 = -f0;
    }
    if (!(l1 > 0.0) || !(f0 < 0.0))
        return 0;
    *uc = u0;
    *vc = v0;
    *ra = sqrt(-f0 / l1);
    *rb = sqrt(-f0 / l2);
    return (*ra - *ra == 0.0) && (*rb > 0.0);
}

/*
 * Candidate k of a region with n >= 5 border points xy (x, y pairs): the points
 * floor(r_m n) (clamped to n - 1) for its 5 random numbers r (float in [0, 1)), the conic through
 * them, kept when it is an ellipse with semi-axes in [min_r, max_r] pixels. The float copy cf is
 * what votes. Returns 1 for a usable candidate. Its parts: the points (sw_pm_candidate_points),
 * the conic (sw_pm_conic5), the verdict (sw_pm_candidate_keep).
 */
SW_PM_FN void sw_pm_candidate_points(const sw_pm_region *r, const int32_t *xy, int64_t n,
                                     const float *rand5, double *u, double *v)
{
    for (int m = 0; m < 5; m++) {
        int64_t i = (int64_t)floor((double)rand5[m] * (double)n);
        if (i > n - 1)
            i = n - 1;
        if (i < 0)
            i = 0;
        u[m] = sw_pm_u(r, xy[2 * i]);
        v[m] = sw_pm_v(r, xy[2 * i + 1]);
    }
}

/* A scaled conic c is kept when it is an ellipse with semi-axes in [min_r, max_r] px; then its
 * float copy goes to cf. */
SW_PM_FN int sw_pm_candidate_keep(const sw_pm_region *r, const double *c, double min_r,
                                  double max_r, float *cf)
{
    double uc, vc, ra, rb;
    if (!sw_pm_conic_axes(c, &uc, &vc, &ra, &rb))
        return 0;
    double a_px = ra / r->inv_s, b_px = rb / r->inv_s;
    if (!(a_px <= max_r) || !(b_px >= min_r))
        return 0;
    for (int k = 0; k < 6; k++)
        cf[k] = (float)c[k];
    return 1;
}

SW_PM_FN int sw_pm_candidate(const sw_pm_region *r, const int32_t *xy, int64_t n,
                             const float *rand5, double min_r, double max_r, double *c, float *cf)
{
    double u[5], v[5];
    sw_pm_candidate_points(r, xy, n, rand5, u, v);
    if (!sw_pm_conic5(u, v, c))
        return 0;
    return sw_pm_candidate_keep(r, c, min_r, max_r, cf);
}

/* A border point (normalised, float) votes for a candidate when its Sampson distance is within
 * the tolerance: Q^2 <= tol2 |grad Q|^2. */
SW_PM_FN int sw_pm_vote(const float *c, float u, float v, float tol2)
{
    float q = c[0] * u * u + c[1] * u * v + c[2] * v * v + c[3] * u + c[4] * v + c[5];
    float gx = 2.0f * c[0] * u + c[1] * v + c[3];
    float gy = c[1] * u + 2.0f * c[2] * v + c[4];
    return q * q <= tol2 * (gx * gx + gy * gy);
}

/* The float normalised coordinates of a border pixel, as both backends vote with them. */
SW_PM_FN float sw_pm_uf(const sw_pm_region *r, int32_t x)
{
    return (float)sw_pm_u(r, x);
}
SW_PM_FN float sw_pm_vf(const sw_pm_region *r, int32_t y)
{
    return (float)sw_pm_v(r, y);
}

/* Votes and candidate index packed so that the largest value is the winner: most votes, then
 * the lowest index. Unusable candidates pack to 0 (and are never a winner). */
SW_PM_FN unsigned long long sw_pm_pack_vote(int32_t votes, int32_t k)
{
    return ((unsigned long long)(uint32_t)(votes + 1) << 32) |
           (unsigned long long)(uint32_t)(0x7fffffff - k);
}
SW_PM_FN int32_t sw_pm_packed_votes(unsigned long long p)
{
    return (int32_t)(p >> 32) - 1;
}
SW_PM_FN int32_t sw_pm_packed_index(unsigned long long p)
{
    return 0x7fffffff - (int32_t)(p & 0xffffffffu);
}

/* ------------------------------------------------------------------ step 7: refinement */

/* Sums of the weighted normal equations: 15 of the symmetric 5 x 5 matrix (upper triangle, row
 * by row), 5 of the right-hand side, and the inlier count. */
#define SW_PM_NACC 21

/* Double Sampson test of point (u, v) against conic c. */
SW_PM_FN int sw_pm_inlier(const double *c, double u, double v, double tol2, double *grad2)
{
    double q = c[0] * u * u + c[1] * u * v + c[2] * v * v + c[3] * u + c[4] * v + c[5];
    double gx = 2.0 * c[0] * u + c[1] * v + c[3];
    double gy = c[1] * u + 2.0 * c[2] * v + c[4];
    double g2 = gx * gx + gy * gy;
    *grad2 = g2;
    return g2 > 0.0 && q * q <= tol2 * g2;
}

/* Step 9's band of point (u, v) against the final conic c (Sampson distance d = |Q| / |grad Q|,
 * tol2 = (inlier_px inv_s)^2): 1 for an inlier (sw_pm_inlier: d <= inlier_px), 2 for the near
 * band 2 inlier_px < d <= 4 inlier_px (Q^2 > 4 tol2 |grad Q|^2 and Q^2 <= 16 tol2 |grad Q|^2:
 * the factors are powers of 2, exact), 0 otherwise. */
SW_PM_FN int sw_pm_band(const double *c, double u, double v, double tol2)
{
    double g2;
    if (sw_pm_inlier(c, u, v, tol2, &g2))
        return 1;
    if (!(g2 > 0.0))
        return 0;
    const double q = c[0] * u * u + c[1] * u * v + c[2] * v * v + c[3] * u + c[4] * v + c[5];
    const double q2 = q * q, t = tol2 * g2;
    return (q2 > 4.0 * t && q2 <= 16.0 * t) ? 2 : 0;
}

/* Adds point (u, v) to acc when it is an inlier of c: residual
 * r = A (u^2 - v^2) + B uv + D u + E v + F + v^2 (C = 1 - A) weighted by 1 / |grad Q|^2. */
SW_PM_FN void sw_pm_refine_add(const double *c, double u, double v, double tol2, double *acc)
{
    double g2;
    if (!sw_pm_inlier(c, u, v, tol2, &g2))
        return;
    double w = 1.0 / g2;
    double phi[5] = {u * u - v * v, u * v, u, v, 1.0};
    double r0 = v * v;
    int k = 0;
    for (int i = 0; i < 5; i++)
        for (int j = i; j < 5; j++)
            acc[k++] += w * phi[i] * phi[j];
    for (int i = 0; i < 5; i++)
        acc[15 + i] += w * phi[i] * r0;
    acc[20] += 1.0;
}

/* Solves the normal equations M theta = -b (Gaussian elimination with partial pivoting) into
 * the conic c (A + C = 1, then scaled to unit length as sw_pm_conic5). 0 when singular. */
SW_PM_FN int sw_pm_refine_solve(const double *acc, double *c)
{
    if (!(acc[20] >= 5.0))
        return 0;
    double m[5][6];
    int k = 0;
    for (int i = 0; i < 5; i++)
        for (int j = i; j < 5; j++) {
            m[i][j] = acc[k];
            m[j][i] = acc[k];
            k++;
        }
    for (int i = 0; i < 5; i++)
        m[i][5] = -acc[15 + i];
    for (int col = 0; col < 5; col++) {
        int p = col;
        for (int r = col + 1; r < 5; r++)
            if (fabs(m[r][col]) > fabs(m[p][col]))
                p = r;
        if (!(fabs(m[p][col]) > 0.0))
            return 0;
        if (p != col)
            for (int j = 0; j < 6; j++) {
                double t = m[col][j];
                m[col][j] = m[p][j];
                m[p][j] = t;
            }
        for (int r = col + 1; r < 5; r++) {
            double f = m[r][col] / m[col][col];
            for (int j = col; j < 6; j++)
                m[r][j] -= f * m[col][j];
        }
    }
    double th[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
    for (int i = 4; i >= 0; i--) {
        double s = m[i][5];
        for (int j = i + 1; j < 5; j++)
            s -= m[i][j] * th[j];
        th[i] = s / m[i][i];
    }
    c[0] = th[0];
    c[1] = th[1];
    c[2] = 1.0 - th[0];
    c[3] = th[2];
    c[4] = th[3];
    c[5] = th[4];
    double n2 = 0.0;
    for (int i = 0; i < 6; i++)
        n2 += c[i] * c[i];
    if (!(n2 > 0.0) || n2 - n2 != 0.0)
        return 0;
    double inv = 1.0 / sqrt(n2);
    for (int i = 0; i < 6; i++)
        c[i] *= inv;
    return 1;
}

/* ------------------------------------------------------------------ output */

/*
 * Fills the geometric part of *out (centre, semi-axes + SW_PUPIL_EDGE_OFFSET_PX, angle in
 * [0, 180)) from conic c of region r. Returns 0 when c is not an ellipse.
 */
SW_PM_FN int sw_pm_ellipse_out(const sw_pm_region *r, const double *c, sw_pupil_ellipse *out)
{
    double uc, vc, ra, rb;
    if (!sw_pm_conic_axes(c, &uc, &vc, &ra, &rb))
        return 0;
    out->cx_px = r->ox + uc / r->inv_s;
    out->cy_px = r->oy + vc / r->inv_s;
    out->a_px = ra / r->inv_s + SW_PUPIL_EDGE_OFFSET_PX;
    out->b_px = rb / r->inv_s + SW_PUPIL_EDGE_OFFSET_PX;
    /* the quadratic form is largest (the minor axis) at 0.5 atan2(B, A - C) when A + C > 0 */
    double sgn = c[0] + c[2] >= 0.0 ? 1.0 : -1.0;
    double phi = 0.5 * atan2(sgn * c[1], sgn * (c[0] - c[2]));
    double deg = phi * (180.0 / 3.14159265358979323846) + 90.0;
    while (deg >= 180.0)
        deg -= 180.0;
    while (deg < 0.0)
        deg += 180.0;
    out->angle_deg = deg;
    return 1;
}

/* Ramanujan's approximation of an ellipse's perimeter. */
SW_PM_FN double sw_pm_perimeter(double a, double b)
{
    return 3.14159265358979323846 * (3.0 * (a + b) - sqrt((3.0 * a + b) * (a + 3.0 * b)));
}

/*
 * Step 9: the verdict on a fitted pupil whose ellipse fields were filled by sw_pm_ellipse_out
 * (ok = its return value) and whose inliers and near-band points are counted: valid, or the
 * failure with the ellipse fields set to NaN (nothing fabricated). Both backends call this last.
 * The tests in order: BAD_FIT (not an ellipse, or semi-axes out of range), LOW_SUPPORT (inliers
 * < min_coverage x perimeter), CLUTTER (near > max_near_ratio x inliers).
 */
SW_PM_FN void sw_pm_verdict(sw_pupil_ellipse *o, int ok, double min_r, double max_r,
                            double min_coverage, double max_near_ratio)
{
    sw_pupil_failure f = SW_PUPIL_OK;
    if (!ok || !(o->b_px >= min_r) || !(o->a_px <= max_r))
        f = SW_PUPIL_BAD_FIT;
    else if (!((double)o->inliers >= min_coverage * sw_pm_perimeter(o->a_px, o->b_px)))
        f = SW_PUPIL_LOW_SUPPORT;
    else if ((double)o->near > max_near_ratio * (double)o->inliers)
        f = SW_PUPIL_CLUTTER; /* max_near_ratio = +Inf: never (Inf x 0 is NaN: never too) */
    o->failure = f;
    o->valid = f == SW_PUPIL_OK;
    if (!o->valid) {
        o->cx_px = o->cy_px = o->a_px = o->b_px = o->angle_deg = NAN;
    }
}

/*
 * Steps 6-9 in one place, so the two backends cannot drift (the GPU runs the same steps in
 * parallel; this is the order of the arithmetic each point and candidate sees):
 *   n < 5                      -> SW_PUPIL_FEW_BORDER (candidate -1, votes 0, inliers 0, near 0)
 *   for k < candidates: usable = sw_pm_candidate(k's 5 randoms); votes_k = number of border
 *       points (uf, vf) with sw_pm_vote; best = max over usable k of sw_pm_pack_vote(votes_k, k)
 *   no usable candidate        -> SW_PUPIL_NO_ELLIPSE
 *   c = the winner's conic; refine_iterations times: acc = 0, sw_pm_refine_add of every border
 *       point (double u, v); stop early (keeping c) when sw_pm_refine_solve fails or its conic
 *       is not an ellipse (sw_pm_conic_axes); else c = the new conic
 *   inliers, near = border points with sw_pm_band(c) = 1, = 2 (one pass, integer counts)
 *   ok = sw_pm_ellipse_out(c); sw_pm_verdict(ok)
 */

/* Point (x, y) inside (or on) the ellipse of p. */
SW_PM_FN int sw_pm_inside(const sw_pupil_ellipse *p, double x, double y)
{
    double t = p->angle_deg * (3.14159265358979323846 / 180.0);
    double ct = cos(t), st = sin(t);
    double dx = x - p->cx_px, dy = y - p->cy_px;
    double e1 = (dx * ct + dy * st) / p->a_px;
    double e2 = (-dx * st + dy * ct) / p->b_px;
    return e1 * e1 + e2 * e2 <= 1.0;
}

/* The lenslet mask value of lenslet (ix, iy) (pupil.h "Lenslet mask"). */
SW_PM_FN uint8_t sw_pm_lenslet_value(const sw_sh_geometry *g, int32_t ix, int32_t iy,
                                     const sw_pupil_ellipse *pupils, int32_t n_pupils,
                                     sw_pupil_lenslet_rule rule)
{
    int in_count = 0, which = 0;
    double xl = g->x0 - 0.5 + g->pitch_px * (double)ix;
    double yl = g->y0 - 0.5 + g->pitch_px * (double)iy;
    double d = g->pitch_px;
    for (int p = 0; p < n_pupils; p++) {
        if (!pupils[p].valid)
            continue;
        int in;
        if (rule == SW_PUPIL_LENSLET_CENTRE)
            in = sw_pm_inside(&pupils[p], xl + 0.5 * d, yl + 0.5 * d);
        else
            in = sw_pm_inside(&pupils[p], xl, yl) && sw_pm_inside(&pupils[p], xl + d, yl) &&
                 sw_pm_inside(&pupils[p], xl, yl + d) && sw_pm_inside(&pupils[p], xl + d, yl + d);
        if (in) {
            in_count++;
            which = p;
        }
    }
    return in_count == 1 ? (uint8_t)(1 + which) : 0;
}

#endif /* SW_PUPIL_MODEL_H */
