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
#include <stddef.h>
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

/* Rounded double product and sum, the same on the host (C files: -ffp-contract=off) and the
 * device (where nvcc would otherwise fuse a * b + c into one FMA, rounded once): used where a
 * result is compared against a boundary (a floor, the edge of a map). */
#if defined(__CUDA_ARCH__)
#define SW_SHM_MAD(a, b, c) __dadd_rn(__dmul_rn((a), (b)), (c))
#else
#define SW_SHM_MAD(a, b, c) ((a) * (b) + (c))
#endif

/* dW/du (step 1) or dW/dv (step = the grid's row length) at sample i of the OPD grid w (um,
 * spacing h) by central differences, one-sided next to a NaN neighbour (outside a phase screen),
 * 0 when both neighbours are NaN. */
SW_SHM_FN double sw_shm_grad1(const double *w, size_t i, size_t step, double h)
{
    const double a = w[i - step], b = w[i + step], c = w[i];
    const int fa = isfinite(a), fb = isfinite(b);
    if (fa && fb)
        return (b - a) / (2.0 * h);
    if (fb)
        return (b - c) / h;
    if (fa)
        return (c - a) / h;
    return 0.0;
}

/* a + t (b - a), written so that a zero weight never reads its sample (NaN there stays out). */
SW_SHM_FN double sw_shm_lerp(double a, double b, double t)
{
    if (t == 0.0)
        return a;
    if (t == 1.0)
        return b;
    return SW_SHM_MAD(1.0 - t, a, t * b);
}

/* Bilinear interpolation of a row-major nu x nv float map at fractional sample coordinates
 * (fa, fb) (column, row), NaN outside [0, nu - 1] x [0, nv - 1]: sw_wavefront_sample's rule
 * (wavefront.c), for maps in device memory (sw_shsim_set_opd_device). */
SW_SHM_FN double sw_shm_bilinear_f(const float *map, int32_t nu, int32_t nv, double fa, double fb)
{
    if (!(fa >= 0.0 && fa <= (double)(nu - 1) && fb >= 0.0 && fb <= (double)(nv - 1)))
        return NAN;
    int32_t i = (int32_t)floor(fa), k = (int32_t)floor(fb);
    i = i > nu - 2 ? nu - 2 : i;
    i = i < 0 ? 0 : i;
    k = k > nv - 2 ? nv - 2 : k;
    k = k < 0 ? 0 : k;
    const double ta = fa - (double)i, tb = fb - (double)k;
    const int32_t i1 = i + 1 < nu ? i + 1 : i, k1 = k + 1 < nv ? k + 1 : k;
    const float *r0 = map + (size_t)k * (size_t)nu, *r1 = map + (size_t)k1 * (size_t)nu;
    if (tb == 0.0)
        return sw_shm_lerp((double)r0[i], (double)r0[i1], ta);
    if (tb == 1.0)
        return sw_shm_lerp((double)r1[i], (double)r1[i1], ta);
    return sw_shm_lerp(sw_shm_lerp((double)r0[i], (double)r0[i1], ta),
                       sw_shm_lerp((double)r1[i], (double)r1[i1], ta), tb);
}

#endif
