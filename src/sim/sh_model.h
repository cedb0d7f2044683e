/*
 * Per-sample and per-pixel formulas of the Shack-Hartmann simulator (sim_sh.h), written once for
 * the CPU renderers (shsim.c) and the CUDA kernels (shsim_cuda.cu).
 *
 * GEOMETRIC spot, one axis at a time (both spot shapes are separable):
 *   Gaussian:  w(d) = pixel integral of N(0, sigma^2) over [d - 1/2, d + 1/2]       (psf.h)
 *   sinc^2:    w(d) = (1 / os) sum_{j=0}^{os-1} sinc^2((d - 1/2 + (j + 1/2) / os) / z) / z,
 *              the Fraunhofer pattern of a square lenslet of side p, sinc(x) = sin(pi x)/(pi x),
 *              first zero z = lambda f / (p pixel) pixels, averaged over os points per pixel;
 *              its integral over the line is 1.
 *   d = pixel centre minus spot centre, in pixels.
 *
 * DIFFRACTION (Goodman, Introduction to Fourier Optics, Eq. 4-17 for the Fraunhofer field of a
 * lens's focal plane, computed with a DFT): the field of lenslet sample (a, b) of its tile is
 *   E(a, b) = A exp(i phi),  phi = (2 pi / lambda) W + ax (a - c) + ay (b - c),
 * A the sample's coverage by the lenslet and the pupil, W the optical path difference (um) and
 * (ax, ay) the lenslet's tilt in radians of phase per sample (sh_internal.h). The DFT of size N
 * puts frequency index k (array index a: k = a for a < ceil(N/2), k = a - N otherwise) at focal
 * sub-sample m_c + k; sub-sample m lies in detector pixel floor(m / os).
 */
#ifndef SW_SIM_SH_MODEL_H
#define SW_SIM_SH_MODEL_H

#include <math.h>
#include <stdint.h>

#include "sim/psf.h"

#if defined(__CUDACC__)
#define SW_SHM_FN __host__ __device__ static inline
#else
#define SW_SHM_FN static inline
#endif

#define SW_SHM_PI 3.14159265358979323846

/* floor(a / b) for b > 0. */
SW_SHM_FN int64_t sw_shm_floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* sinc^2(x) = (sin(pi x) / (pi x))^2, 1 at x = 0. */
SW_SHM_FN double sw_shm_sinc2(double x)
{
    const double t = SW_SHM_PI * x;
    if (fabs(t) < 1e-6)
        return 1.0 - t * t / 3.0;
    const double s = sin(t) / t;
    return s * s;
}

/* Pixel weight of the sinc^2 spot at offset d (pixel centre - spot), first zero z, os points. */
SW_SHM_FN double sw_shm_w_sinc2(double d, double z, int os)
{
    double s = 0.0;
    for (int j = 0; j < os; j++)
        s += sw_shm_sinc2((d - 0.5 + ((double)j + 0.5) / (double)os) / z);
    return s / ((double)os * z);
}

/* One axis' weight of a GEOMETRIC spot: sinc2 != 0 selects the sinc^2 pattern. */
SW_SHM_FN double sw_shm_axis_weight(int sinc2, double d, double sigma, double z, int os)
{
    return sinc2 ? sw_shm_w_sinc2(d, z, os) : sw_psf_w_integrated(d, sigma);
}

/* Frequency index of DFT array index a (0 <= a < n). */
SW_SHM_FN int sw_shm_fft_k(int a, int n)
{
    return a < (n + 1) / 2 ? a : a - n;
}

/* Array index of frequency index k (-floor(n/2) <= k <= ceil(n/2) - 1). */
SW_SHM_FN int sw_shm_fft_a(int k, int n)
{
    return k < 0 ? k + n : k;
}

/* The field of one tile sample: amplitude A, OPD w (um), k_w = 2 pi / lambda (rad/um), the
 * lenslet's tilt (ax, ay) in rad per sample and the sample's offset (da, db) from the tile
 * centre. */
SW_SHM_FN void sw_shm_field(double A, double w, double k_w, double ax, double ay, double da,
                            double db, double *re, double *im)
{
    const double phi = k_w * w + ax * da + ay * db;
    *re = A * cos(phi);
    *im = A * sin(phi);
}

#endif
