/*
 * Between the C side of the phase screens (turbulence.c: API, validation, FFTW screens, the
 * infinite screen) and the CUDA side (turbulence_cuda.cu: the same FFT screens with cuFFT).
 * Not public. The Fourier coefficient of a frequency bin is written once, here, and compiled for
 * both sides, so the CPU and the GPU draw the same numbers.
 */
#ifndef SW_TURBULENCE_INTERNAL_H
#define SW_TURBULENCE_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/rng.h"
#include "spotwave/turbulence.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One subharmonic: frequency (fx, fy) in cycles per metre and its complex coefficient (phase
 * in radians), added as Re(c exp(2 pi i (fx u + fy v))) with u, v in metres. */
typedef struct sw_screen_term {
    double fx, fy;
    double re, im;
} sw_screen_term;

#define SW_SCREEN_MAX_TERMS (8 * SW_TURBULENCE_MAX_SUBHARMONICS)
/* FFT bins with |kx|, |ky| <= SW_SCREEN_NEAR get their amplitude from the cell integral (see
 * sw_screen_coefficient); farther out the point value agrees with it to better than 0.2 %. */
#define SW_SCREEN_NEAR 8

/* Everything a screen needs, worked out on the host (sw_screen_spec_init in turbulence.c). */
typedef struct sw_screen_spec {
    int32_t n;          /* screen side (even)                                           */
    int32_t nterms;     /* subharmonic terms used (8 per level)                         */
    double dx;          /* sample spacing, metres                                       */
    double df;          /* 1 / (n dx), cycles per metre                                 */
    double psd_scale;   /* A r0^(-5/3): Phi(f) = psd_scale (f^2 + inv_L0_sq)^(-11/6)    */
    double inv_L0_sq;   /* 1 / L0^2 (0 for Kolmogorov)                                  */
    double opd_per_rad; /* lambda_um / (2 pi)                                           */
    double sh_mean;     /* mean of the subharmonic terms over the grid (radians)        */
    double tilt_x;      /* random tilt completing the lowest frequencies, rad / m       */
    double tilt_y;
    uint64_t seed;
    uint64_t index; /* screen index, < 2^32 */
    sw_screen_term terms[SW_SCREEN_MAX_TERMS];
    double near_gain[SW_SCREEN_NEAR + 1][SW_SCREEN_NEAR + 1]; /* [|ky|][|kx|], see below */
} sw_screen_spec;

/* The Fourier coefficient (phase, radians) of FFT bin (kx, ky), 0 <= kx, ky < n: zero at the
 * origin, otherwise (a + i b) g sqrt(Phi(f)) df with (a, b) two normals of
 * sw_rng_draw(seed, SW_RNG_STREAM_SCREEN, (index << 32) | (ky n + kx)); g = near_gain for the
 * bins near the origin (signed indices |kx|, |ky| <= SW_SCREEN_NEAR), 1 beyond. */
SW_RNG_FN void sw_screen_coefficient(const sw_screen_spec *s, int32_t kx, int32_t ky, double *re,
                                     double *im)
{
    if (kx == 0 && ky == 0) {
        *re = 0.0;
        *im = 0.0;
        return;
    }
    const int32_t h = s->n / 2;
    const double fx = (double)(kx < h ? kx : kx - s->n) * s->df;
    const double fy = (double)(ky < h ? ky : ky - s->n) * s->df;
    const int32_t ax = kx < h ? kx : s->n - kx, ay = ky < h ? ky : s->n - ky;
    const double g = (ax <= SW_SCREEN_NEAR && ay <= SW_SCREEN_NEAR) ? s->near_gain[ay][ax] : 1.0;
    const double amp =
        g * sqrt(s->psd_scale * pow(fx * fx + fy * fy + s->inv_L0_sq, -11.0 / 6.0)) * s->df;
    const uint64_t flat = (uint64_t)ky * (uint64_t)s->n + (uint64_t)kx;
    sw_rng4 r = sw_rng_draw(s->seed, SW_RNG_STREAM_SCREEN, (s->index << 32) | flat);
    double a, b;
    sw_rng_normal2(r, &a, &b);
    *re = a * amp;
    *im = b * amp;
}

/* Physical position (metres) of sample i of an n-sample axis centred on the origin. */
SW_RNG_FN double sw_screen_position(const sw_screen_spec *s, int32_t i)
{
    return ((double)i - 0.5 * (double)(s->n - 1)) * s->dx;
}

/* The phase screen of spec computed by cuFFT on ctx's device, written as OPD (micrometres) into
 * host_out (n * n doubles, row-major). Synchronous: the result is there when it returns. */
#ifdef SW_HAVE_CUDA
sw_status sw_phase_screen_cuda(sw_context *ctx, const sw_screen_spec *spec, double *host_out);
#endif

#ifdef __cplusplus
}
#endif

#endif
