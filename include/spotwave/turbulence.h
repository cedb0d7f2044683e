/*
 * spotwave sim (turbulence): Kolmogorov / von Karman phase screens, as optical path difference
 * maps (sw_wavefront, sim_sh.h), from FFTs with subharmonics and as an infinite (extruded) screen.
 *
 * Units and conventions:
 *   - r0_m (Fried parameter) and L0_m (outer scale) in metres; r0 is given at wavelength_um.
 *     The screens are phase at that wavelength converted to optical path difference,
 *     OPD = phase * lambda / (2 pi) in micrometres; OPD is achromatic (r0 scales as
 *     lambda^(6/5), the phase as 1/lambda), so the same OPD screen serves every wavelength.
 *   - Spatial frequency f in cycles per metre. The phase power spectral density is
 *         Phi(f) = A r0^(-5/3) (f^2 + 1/L0^2)^(-11/6)   [rad^2 m^2],
 *     A = Gamma(11/6)^2 / (2 pi^(11/3)) (24/5 Gamma(6/5))^(5/6) = 0.022896 (the "0.023"),
 *     and the phase covariance B(r) = int Phi(f) exp(2 pi i f.r) d^2f, which for finite L0 is
 *         B(r) = 2^(1/6) Gamma(11/6) / pi^(8/3) (24/5 Gamma(6/5))^(5/6) (L0/r0)^(5/3)
 *                x^(5/6) K_{5/6}(x) / 2,   x = 2 pi r / L0.
 *   - Kolmogorov (L0 = 0 or +INFINITY): Phi without the 1/L0^2 term, structure function
 *     D(r) = 2 (24/5 Gamma(6/5))^(5/6) (r/r0)^(5/3) = 6.8839 (r/r0)^(5/3) rad^2.
 *     von Karman: D(r) = 2 (B(0) - B(r)).
 *   - Screens are sampled like every sw_wavefront: sample (i, k) at u = u0 + i s, v = v0 + k s,
 *     s = spacing_m * 1e6 um, centred on the pupil origin (u0 = -(n - 1) s / 2). They have zero
 *     mean (piston removed).
 *   - Randomness comes from the counter-based RNG (rng.h), so the CPU and the GPU draw the same
 *     numbers and any screen of a sequence can be made alone from (seed, index).
 */
#ifndef SPOTWAVE_TURBULENCE_H
#define SPOTWAVE_TURBULENCE_H

#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/sim_sh.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_TURBULENCE_MAX_SUBHARMONICS 8
#define SW_PHASE_SCREEN_MIN 8
#define SW_PHASE_SCREEN_MAX 8192
#define SW_INFINITE_SCREEN_MAX 1024

typedef struct sw_turbulence {
    double r0_m;          /* Fried parameter at wavelength_um, > 0                            */
    double L0_m;          /* outer scale, > 0; 0 or INFINITY: Kolmogorov                      */
    double wavelength_um; /* wavelength at which r0 is given (default 0.5)                    */
    int32_t subharmonics; /* FFT screens: subharmonic levels 0..8 (default 3)                */
} sw_turbulence;

/* r0 0.1 m, L0 25 m, 0.5 um, 3 subharmonic levels. */
void sw_turbulence_default(sw_turbulence *t);
/* r0 positive and finite, L0 >= 0 and not NaN (0 or +INFINITY: Kolmogorov), wavelength positive
 * and finite, subharmonics 0..8; SW_EINVAL with a message otherwise. */
sw_status sw_turbulence_check(sw_context *ctx, const sw_turbulence *t);
/* 1 when t describes Kolmogorov turbulence (L0 = 0 or infinite). */
int sw_turbulence_is_kolmogorov(const sw_turbulence *t);

/* Phase structure function D(r) in rad^2 at the r0 wavelength (see the top): von Karman (exact,
 * with K_{5/6}; accurate to ~1e-13 relative) or 6.8839 (r/r0)^(5/3). NaN for r < 0 or a bad t. */
double sw_turbulence_structure(const sw_turbulence *t, double r_m);
/* Phase covariance B(r) in rad^2 (finite L0 only; NaN for Kolmogorov, whose variance is
 * infinite). */
double sw_turbulence_covariance(const sw_turbulence *t, double r_m);
/* Modified Bessel function of the second kind K_nu(x), x > 0, from its integral representation
 * K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt by the trapezoid rule (exponentially
 * convergent: ~1e-15 relative for |nu| <= 4 and 1e-8 <= x <= 700). NaN for x <= 0. */
double sw_bessel_k(double nu, double x);

/*
 * One n x n FFT phase screen (n even, 8..8192), sample spacing spacing_m, as OPD in micrometres.
 * Method: complex Fourier coefficients c(f) = (a + i b) sqrt(Phi(f)) df, a and b standard normals,
 * df = 1 / (n spacing), on the FFT frequency grid (zero frequency left out); the screen is the
 * real part of their inverse FFT. Subharmonics (Lane, Glindemann & Dainty 1992; Johansson & Gavel
 * 1994): for p = 1..subharmonics, the 3 x 3 frequencies (m, q) df / 3^p, m, q in {-1, 0, 1},
 * without the centre, with coefficients drawn likewise with df / 3^p, added as
 * Re(c exp(2 pi i (fx u + fy v))) and with their mean over the grid removed.
 * Random numbers: sw_rng_draw(seed, SW_RNG_STREAM_SCREEN, (index << 32) | (ky n + kx)) gives the
 * coefficient at FFT bin (kx, ky); SW_RNG_STREAM_SUBHARMONICS, (index << 32) | (9 (p - 1) +
 * 3 (q + 1) + m + 1) those of the subharmonics. So screen `index` (0 <= index < 2^32) of a
 * sequence is reproducible alone. Only the real part of each complex screen is used.
 * CPU context: FFTW; CUDA context: cuFFT (double) on the context's stream, the same coefficients,
 * the same screen to within double rounding; the result is on the host when the call returns.
 * out is overwritten (allocated here with sw_wavefront_alloc; free it with sw_wavefront_free).
 * Bad arguments: SW_EINVAL with a message and *out zeroed.
 */
sw_status sw_phase_screen(sw_context *ctx, const sw_turbulence *t, int32_t n, double spacing_m,
                          uint64_t seed, uint64_t index, sw_wavefront *out);

/*
 * Infinite phase screen (Assemat, Wilson & Gendron 2006, Opt. Express 14, 988): a window of
 * n x n samples (n even, 8..1024) over a screen that grows one row at a time. A new row X (n
 * samples) is drawn from a stencil Z of earlier rows by
 *     X = A Z + B b,   A = Cxz Czz^-1,   B B^T = Cxx - A Czx,   b ~ N(0, I),
 * with covariances from the von Karman phase covariance B(r) above (so L0 must be finite).
 * Stencil: the whole rows 1 and 2 back, and rows 2^k back (k = 2, 3, ... up to n) sampled every
 * 2^(k-1) columns (plus the last column), so that large scales stay correlated along the motion.
 * A, B are computed once at create (Cholesky and eigen-decomposition through LAPACKE; O(n^3),
 * about a second for n = 512 on one core); each new row costs O(n^2).
 * The first n rows are an FFT screen (sw_phase_screen's method, index 0 of seed, with the
 * subharmonics of t). Row g (g >= n) draws its b from sw_rng_draw(seed, SW_RNG_STREAM_INFINITE,
 * g * (n / 2) + j), j = 0..n/2-1 (two normals per draw). Everything runs on the CPU, whatever the
 * context's backend, and the screen after a given total distance does not depend on how the
 * distance was split between advance calls.
 *
 * Geometry: the frozen screen moves along +v past the pupil: after advance(d) the window shows
 * at (u, v) what it showed at (u, v - d) before; new rows enter at row k = 0 (v = v0). A distance
 * that is not a whole number of samples is shown by linear interpolation between rows.
 */
typedef struct sw_infinite_screen sw_infinite_screen;

/* Validates (sw_turbulence_check, finite L0, n, spacing), builds the matrices and the first
 * n rows. SW_EINVAL for bad input, SW_ENOMEM, SW_EINTERNAL if LAPACK fails. */
sw_status sw_infinite_screen_create(sw_context *ctx, const sw_turbulence *t, int32_t n,
                                    double spacing_m, uint64_t seed, sw_infinite_screen **out);
/* Moves the screen by distance_m (>= 0, finite) along +v, adding rows as needed. */
sw_status sw_infinite_screen_advance(sw_infinite_screen *s, double distance_m);
/* The current n x n window as OPD in micrometres, sampled like sw_phase_screen's screens.
 * out must be zeroed (allocated here on first use) or a wavefront from sw_wavefront_alloc:
 * reused when it is n x n with the screen's spacing, otherwise freed and reallocated. */
sw_status sw_infinite_screen_window(sw_infinite_screen *s, sw_wavefront *out);
/* Rows drawn since create (not counting the first n). */
int64_t sw_infinite_screen_rows_added(const sw_infinite_screen *s);
/* Total distance moved since create, metres. */
double sw_infinite_screen_position(const sw_infinite_screen *s);
void sw_infinite_screen_destroy(sw_infinite_screen *s); /* NULL is ignored */

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_TURBULENCE_H */
