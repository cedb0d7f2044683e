/*
 * The Gaussian PSF of seed 004 Eq. (2), shared by the CPU renderers (starsim.c) and the CUDA
 * kernels (starsim_cuda.cu). The 2-D Gaussian is separable: mu(x, y) = w(x - X) w(y - Y), so
 * each pixel's value is flux * wx * wy with one-dimensional weights:
 *   sampled:     w(d) = exp(-d^2 / (2 sigma^2)) / (sqrt(2 pi) sigma)         (Eq. 2 at the centre)
 *   integrated:  w(d) = Phi((d + 1/2) / sigma) - Phi((d - 1/2) / sigma)     (Eq. 2 over the pixel)
 * with d the pixel centre minus the star position and Phi the standard normal CDF. The
 * integrated difference is taken with erfc on the side away from zero, so that far tails keep
 * their relative precision.
 */
#ifndef SW_SIM_PSF_H
#define SW_SIM_PSF_H

#include <math.h>

#if defined(__CUDACC__)
#define SW_PSF_FN __host__ __device__ static inline
#else
#define SW_PSF_FN static inline
#endif

/* First column (or row) of a star's ROI of `side` pixels: the side x side block whose centre is
 * nearest the star (sim.h). */
SW_PSF_FN int sw_roi_origin(double pos, int side)
{
    return (int)floor(pos - 0.5 * (double)(side - 1) + 0.5);
}

/* Sampled weight at offset d (pixels) from the star, sigma > 0. */
SW_PSF_FN double sw_psf_w_sampled(double d, double sigma)
{
    return exp(-0.5 * (d / sigma) * (d / sigma)) * (0.39894228040143267794 / sigma);
}

/* Integrated weight: the fraction of a 1-D Gaussian (centre 0, sigma) in [d - 1/2, d + 1/2]. */
SW_PSF_FN double sw_psf_w_integrated(double d, double sigma)
{
    const double k = 0.70710678118654752440 / sigma; /* 1 / (sqrt(2) sigma) */
    double a = (d - 0.5) * k, b = (d + 0.5) * k;
    if (a > 0.0)
        return 0.5 * (erfc(a) - erfc(b));
    if (b < 0.0)
        return 0.5 * (erfc(-b) - erfc(-a));
    return 0.5 * (erf(b) - erf(a));
}

/* float twins for the per-pixel kernels (seed's parallel simulator evaluates per pixel). */
SW_PSF_FN float sw_psf_w_sampled_f(float d, float sigma)
{
    return expf(-0.5f * (d / sigma) * (d / sigma)) * (0.39894228f / sigma);
}

SW_PSF_FN float sw_psf_w_integrated_f(float d, float sigma)
{
    const float k = 0.70710678f / sigma;
    float a = (d - 0.5f) * k, b = (d + 0.5f) * k;
    if (a > 0.0f)
        return 0.5f * (erfcf(a) - erfcf(b));
    if (b < 0.0f)
        return 0.5f * (erfcf(-b) - erfcf(-a));
    return 0.5f * (erff(b) - erff(a));
}

#endif
