/*
 * Detector noise draws shared by the CPU detector model (detector.c) and its CUDA twin
 * (detector_cuda.cu): Poisson shot noise and Gaussian read noise from the spotwave counter-based
 * RNG (rng.h), so a seed gives the same noise on the CPU and the GPU.
 *
 * Every draw is a pure function of (seed, index), index being the pixel (y * width + x): a
 * pixel's draws do not depend on other pixels nor on the order in which pixels are visited.
 *
 *   sw_noise_poisson(mean, seed, index): the k-th 4-word draw of the pixel (k = 0, 1, ...) is
 *     sw_rng_draw(seed, SW_RNG_STREAM_PIXEL_NOISE + ((uint64_t)k << 32), index)
 *     mean < 10:  inversion by sequential search of the cumulative pmf (one uniform, draw k = 0);
 *     mean >= 10: Hormann's PTRS transformed rejection (W. Hormann, "The transformed rejection
 *                 method for generating Poisson random variables", Insurance: Mathematics and
 *                 Economics 12, 1993), two uniforms per trial, trial k takes draw k; the
 *                 constants are those of the paper (as in NumPy's random_poisson_ptrs).
 *     mean <= 0 (or NaN): 0.
 *   sw_noise_normal(seed, index): a standard normal, the first output of sw_rng_normal2 on
 *     sw_rng_draw(seed, SW_RNG_STREAM_READ_NOISE, index).
 *
 * Only functions CUDA device code also has (exp, log, sqrt, floor, fabs) are used; log k! is
 * computed here (sw_noise_logfact) rather than with lgamma, because glibc's lgamma writes the
 * global signgam (a data race under OpenMP) and so that the host and the device evaluate the same
 * series. Host and device libm may still differ in the last bit of exp/log, so a draw that lands
 * exactly on an acceptance or inversion boundary can, very rarely, differ by one count between the
 * CPU and the GPU.
 *
 * Header-only. Under nvcc the functions are __device__ (as rng.h's); in C they are static inline.
 */
#ifndef SW_SIM_NOISE_H
#define SW_SIM_NOISE_H

#include <math.h>
#include <stdint.h>

#include "spotwave/rng.h"

#if defined(__CUDACC__)
#define SW_NOISE_FN __device__ static inline
#else
#define SW_NOISE_FN static inline
#endif

/* Means below this use inversion, from it on PTRS. */
#define SW_NOISE_PTRS_FROM 10.0

/* log(k!) for k >= 0 (k a whole number held in a double): exact table below 10, the Stirling
 * series with ten terms above (relative error < 1e-15 there). */
SW_NOISE_FN double sw_noise_logfact(double k)
{
    if (k < 10.0) {
        /* log(0!) .. log(9!); a switch, not an array, so device code keeps it out of local
         * memory */
        switch ((int)k) {
        case 2: return 0.69314718055994530942;
        case 3: return 1.79175946922805500081;
        case 4: return 3.17805383034794561964;
        case 5: return 4.78749174278204599425;
        case 6: return 6.57925121201010099506;
        case 7: return 8.52516136106541430017;
        case 8: return 10.60460290274525022842;
        case 9: return 12.80182748008146961121;
        default: return 0.0; /* 0! = 1! = 1 */
        }
    }
    /* Stirling: log Gamma(x) = (x - 1/2) log x - x + log(2 pi)/2 + sum_j a_j / x^(2j-1), x = k+1 */
    const double x = k + 1.0, x2 = 1.0 / (x * x);
    double s = -1.39243221690590e+00;
    s = s * x2 + 1.796443723688307e-01;
    s = s * x2 - 2.955065359477124e-02;
    s = s * x2 + 6.410256410256410e-03;
    s = s * x2 - 1.917526917526918e-03;
    s = s * x2 + 8.417508417508418e-04;
    s = s * x2 - 5.952380952380952e-04;
    s = s * x2 + 7.936507936507937e-04;
    s = s * x2 - 2.777777777777778e-03;
    s = s * x2 + 8.333333333333333e-02;
    return s / x + 0.91893853320467274178 + (x - 0.5) * log(x) - x;
}

/* A Poisson deviate of the given mean for pixel `index` (see the top of this file). */
SW_NOISE_FN double sw_noise_poisson(double mean, uint64_t seed, uint64_t index)
{
    if (!(mean > 0.0))
        return 0.0;
    if (mean < SW_NOISE_PTRS_FROM) {
        /* Inversion: the smallest k with P(K <= k) >= u. The cap (ten times the largest mean
         * plus a margin) only guards against a cumulative sum that rounding keeps below u. */
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_PIXEL_NOISE, index);
        const double u = sw_rng_u01(r.v[0], r.v[1]);
        double p = exp(-mean), cdf = p, k = 0.0;
        while (u > cdf && k < 200.0) {
            k += 1.0;
            p *= mean / k;
            cdf += p;
        }
        return k;
    }
    /* PTRS (Hormann 1993, algorithm PTRS; constants as in the paper). */
    const double slam = sqrt(mean), loglam = log(mean);
    const double b = 0.931 + 2.53 * slam;
    const double a = -0.059 + 0.02483 * b;
    const double invalpha = 1.1239 + 1.1328 / (b - 3.4);
    const double vr = 0.9277 - 3.6224 / (b - 2.0);
    for (uint64_t trial = 0;; trial++) {
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_PIXEL_NOISE + (trial << 32), index);
        const double u = sw_rng_u01(r.v[0], r.v[1]) - 0.5;
        const double v = sw_rng_u01(r.v[2], r.v[3]);
        const double us = 0.5 - fabs(u);
        const double k = floor((2.0 * a / us + b) * u + mean + 0.43);
        if (us >= 0.07 && v <= vr)
            return k;
        if (k < 0.0 || (us < 0.013 && v > us))
            continue;
        if (log(v) + log(invalpha) - log(a / (us * us) + b) <=
            -mean + k * loglam - sw_noise_logfact(k))
            return k;
    }
}

/* A standard normal deviate for pixel `index` (read noise). */
SW_NOISE_FN double sw_noise_normal(uint64_t seed, uint64_t index)
{
    double z0, z1;
    sw_rng_normal2(sw_rng_draw(seed, SW_RNG_STREAM_READ_NOISE, index), &z0, &z1);
    (void)z1;
    return z0;
}

#endif /* SW_SIM_NOISE_H */
