/*
 * The per-pixel parts of the find stage (find.h), written once for the CPU (find_threshold.c,
 * find_label.c) and the GPU (the _cuda.cu twins), so that both read values and decide pixels with
 * the same arithmetic in the same order. The .cu files that include it are compiled with
 * -fmad=false (src/CMakeLists.txt): no fused multiply-adds, so double results are bit-identical
 * to the host's (built with -ffp-contract=off).
 */
#ifndef SW_FIND_MODEL_H
#define SW_FIND_MODEL_H

#include <math.h>
#include <stdint.h>

#include "spotwave/core.h"

#if defined(__CUDACC__)
#define SW_FM_FN __host__ __device__ static inline
#else
#define SW_FM_FN static inline
#endif

/* Values at or above this never enter the window sums (DIALS's BIG = 2^24 in compute_sat). */
#define SW_FM_BIG 16777216u

/* Pixel value as counts (find.h "Pixel values"), and whether it is valid before the mask.
 * Integer pixels (u8, u16, u32 widened to 32 bits) as they are. `overload`: values >= overload
 * are invalid. */
SW_FM_FN uint32_t sw_fm_value_int(uint32_t raw, double overload, int *valid)
{
    *valid = (double)raw < overload;
    return raw;
}

/* f32 pixels rounded to nearest (halves away from zero), negatives to 0, clamped to 2^32 - 1;
 * NaN / Inf invalid. */
SW_FM_FN uint32_t sw_fm_value_f32(float f, double overload, int *valid)
{
    if (!isfinite(f)) {
        *valid = 0;
        return 0;
    }
    double v = f <= 0.0f ? 0.0 : floor((double)f + 0.5);
    if (v > 4294967295.0)
        v = 4294967295.0;
    *valid = v < overload;
    return (uint32_t)v;
}

/* The same for pixel x of a row of type t. */
SW_FM_FN uint32_t sw_fm_value(const void *row, int32_t x, sw_pixel_type t, double overload,
                              int *valid)
{
    switch (t) {
    case SW_PIX_U8: return sw_fm_value_int(((const uint8_t *)row)[x], overload, valid);
    case SW_PIX_U16: return sw_fm_value_int(((const uint16_t *)row)[x], overload, valid);
    case SW_PIX_U32: return sw_fm_value_int(((const uint32_t *)row)[x], overload, valid);
    default: return sw_fm_value_f32(((const float *)row)[x], overload, valid);
    }
}

/* Whether a valid value enters the window sums. */
SW_FM_FN int sw_fm_summable(uint32_t v)
{
    return v < SW_FM_BIG;
}

/*
 * Background (dispersion) test of DIALS compute_dispersion_threshold with a gain (find.h):
 * 1 when the window (m valid pixels, sum s, sum of squares q) is dispersed:
 *     m q - s^2 > g s (m - 1 + sigma_b sqrt(2 (m - 1))).
 * The caller has checked m >= min_count (>= 2).
 */
SW_FM_FN int sw_fm_dispersed(int64_t m, uint64_t s, uint64_t q, double g, double sigma_b)
{
    double dm = (double)m, ds = (double)s, dq = (double)q;
    double a = dm * dq - ds * ds;
    double c = g * ds * (dm - 1.0 + sigma_b * sqrt(2.0 * (dm - 1.0)));
    return a > c;
}

/* Strong test of the basic dispersion threshold: m v - s > sigma_s sqrt(g s m). */
SW_FM_FN int sw_fm_strong(int64_t m, uint64_t s, uint32_t v, double g, double sigma_s)
{
    double dm = (double)m, ds = (double)s;
    double b = dm * (double)v - ds;
    double d = sigma_s * sqrt(g * ds * dm);
    return b > d;
}

/* Final test of dispersion extended (step 4 of find.h) with the background window sums m', s':
 * v >= mean + sigma_s sqrt(g mean), mean = s'/m' when m' >= 2, else 0. */
SW_FM_FN int sw_fm_strong_extended(int64_t m, uint64_t s, uint32_t v, double g, double sigma_s)
{
    double mean = m >= 2 ? (double)s / (double)m : 0.0;
    return (double)v >= mean + sigma_s * sqrt(g * mean);
}

/*
 * The whole per-pixel decisions, in one place for both backends. v, valid: the pixel as
 * sw_fm_value reads it (and the plan's mask); m, s, q: the window sums over the summable pixels
 * of the window (valid, v < SW_FM_BIG); g: the pixel's gain.
 */

/* DISPERSION (DIALS DispersionThreshold): 1 when the pixel is strong. */
SW_FM_FN int sw_fm_decide_dispersion(int valid, uint32_t v, int64_t m, uint64_t s, uint64_t q,
                                     double g, int32_t min_count, double threshold, double sigma_b,
                                     double sigma_s)
{
    return valid && m >= min_count && (double)v > threshold &&
           sw_fm_dispersed(m, s, q, g, sigma_b) && sw_fm_strong(m, s, v, g, sigma_s);
}

/*
 * DISPERSION_EXTENDED step 1 as the erosion sees it (DIALS DispersionExtendedThreshold::
 * compute_dispersion_threshold): 1 for a dispersed pixel, and also for an invalid one ("masked
 * pixels are set as non-background in order to prevent them from affecting the erosion
 * calculation"), so that only valid, non-dispersed pixels erode the dispersed regions.
 */
SW_FM_FN int sw_fm_decide_extended_1(int valid, int64_t m, uint64_t s, uint64_t q, double g,
                                     int32_t min_count, double sigma_b)
{
    return !valid || (m >= min_count && sw_fm_dispersed(m, s, q, g, sigma_b));
}

/* DISPERSION_EXTENDED step 4: core = the pixel is valid, dispersed and at Chebyshev distance
 * >= min(kx, ky) from every valid non-dispersed pixel (steps 1-2); m2, s2: the background window
 * sums of step 3 (half-sizes kx + 2, ky + 2). */
SW_FM_FN int sw_fm_decide_extended_2(int valid, int core, uint32_t v, int64_t m2, uint64_t s2,
                                     double g, double threshold, double sigma_s)
{
    return valid && core && (double)v > threshold && sw_fm_strong_extended(m2, s2, v, g, sigma_s);
}

#endif
