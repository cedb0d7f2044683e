/*
 * spotwave sim (turbulence): Kolmogorov / von Karman phase screens, as optical path difference
 * maps (sw_wavefront, sim_sh.h), from FFTs with subharmonics and as an infinite (extruded) screen.
 *
 * Papers: Lane R. G., Glindemann A., Dainty J. C. 1992, "Simulation of a Kolmogorov phase
 * screen", Waves in Random Media 2(3), 209-224 (FFT screens with subharmonics); Assemat F., Wilson
 * R. W., Gendron E. 2006, "Method for simulating infinitely long and non stationary phase screens
 * with optimized memory storage", Opt. Express 14(3), 988-999 (the infinite screen).
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
#define SW_PHASE_SCREEN_MIN            8
#define SW_PHASE_SCREEN_MAX            8192
#define SW_INFINITE_SCREEN_MAX         1024

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
/* Piston-removed phase variance in rad^2 (at the r0 wavelength) over an aperture of diameter
 * diameter_m (square = 0: a circle) or side diameter_m (square = 1): the expected mean square
 * of the phase about its mean over the aperture, <D(|x - y|)> / 2 over two points drawn
 * uniformly in it (numerical, ~1e-10 relative). Kolmogorov: 1.0324 (D/r0)^(5/3) for the
 * circle (Noll R. J. 1976, J. Opt. Soc. Am. 66(3), 207, Table IV, gives 1.0299 from rounded
 * constants) and 1.3103 (D/r0)^(5/3) for the square; von Karman: less, as L0 / D falls
 * (L0 = 2.08 D: 0.1629 and 0.1783 (D/r0)^(5/3)). The same mean over N sample points is
 * sum_jk D(|x_j - x_k|) / (2 N^2): for a square of 32 x 32 samples within 0.1 % of this, for a
 * circle drawn on 32 samples across within 1 % (its outline is made of samples). Compare it
 * with the mean of squared RMS values, not the square of their mean: a few large modes carry
 * the variance, so the mean RMS of many screens is below its square root (by 2.5 % for D = 12 m,
 * L0 = 25 m, a square pupil). NaN for a bad t, a negative or non-finite diameter or square not 0
 * or 1. */
double sw_turbulence_pupil_variance(const sw_turbulence *t, double diameter_m, int square);
/* Modified Bessel function of the second kind K_nu(x), x > 0, from its integral representation
 * K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt by the trapezoid rule (exponentially
 * convergent: ~1e-15 relative for |nu| <= 4 and 1e-8 <= x <= 700). NaN for x <= 0. */
double sw_bessel_k(double nu, double x);

/*
 * One n x n FFT phase screen (n even, 8..8192), sample spacing spacing_m, as OPD in micrometres.
 * Method (Lane, Glindemann & Dainty 1992; subharmonics after Johansson & Gavel 1994):
 *   - FFT part: complex coefficients c(f) = (a + i b) g sqrt(Phi(f)) df, a and b standard
 *     normals, df = 1 / (n spacing), on the FFT frequency grid without the zero frequency; the
 *     screen is the real part of their inverse FFT (the imaginary part is not used). g = 1 except
 *     for the bins within 8 of the origin, where g^2 = int_cell Phi |f|^2 d^2f / (|f|^2 Phi(f)
 *     df^2) (g = 1.056 next to the origin, 1.001 at 8 bins, Kolmogorov): the cell's exact
 * contribution to the structure function at small separations, where the steep PSD makes the point
 * value low.
 *   - Subharmonics, levels p = 1..subharmonics: the central cell of the level above is split
 *     into 3 x 3 cells of side df / 3^p; each of the 8 outer cells gets one term
 *     Re(c exp(2 pi i (fx u + fy v))) with |c|^2 / 2 = int_cell Phi (the cell's whole variance)
 *     and (fx, fy) the cell's power-weighted RMS frequencies, fx^2 = int Phi fx^2 / int Phi (so
 *     its structure function at separations << 3^p / df is exact along x and y). Lane et al.'s
 *     point value Phi(f_c) (df/3^p)^2 at the cell centre leaves Kolmogorov screens 15-30 % low.
 *   - The last level's central cell (for Kolmogorov: infinite variance, finite gradient) is
 *     added as a random tilt of variance 4 pi^2 int_cell Phi fx^2 per axis.
 *   - The mean of the subharmonics over the grid is removed: the screen has zero mean.
 *   With 3 levels (the default) the mean structure function of n = 128 Kolmogorov screens is
 *   within 3 % of 6.88 (r/r0)^(5/3) from 2 samples to n/4 (0.92 at 1 sample: the frequencies
 *   above Nyquist are missing); without subharmonics it is 0.36 at n/4.
 * Pupils: the FFT part is periodic over the screen, so separations near its side lose variance
 *   that the subharmonics only partly restore. The expected piston-removed variance over a
 *   square pupil of P = 64 samples centred on a screen of side m P, over that of
 *   sw_turbulence_pupil_variance's mean over the same samples (computed exactly from the
 *   construction above, 3 levels; independent of r0; a circle is within 1.5 % of these):
 *       m                 1      2      3      4
 *       L0 = P / 2      1.000  0.998  0.994  0.993
 *       L0 = 2 P        0.911  0.990  0.996  0.997
 *       L0 = 8 P        0.938  0.969  0.985  0.992
 *       Kolmogorov      0.977  0.986  0.992  0.995
 *   so make the screen 3-4 times the pupil for 1 % (sw_infinite_screen does). An outer scale of
 *   few samples also loses the variance above Nyquist (L0 = 16 samples: 2.5 %).
 * Random numbers: sw_rng_draw(seed, SW_RNG_STREAM_SCREEN, (index << 32) | (ky n + kx)) gives the
 * coefficient at FFT bin (kx, ky); (seed, SW_RNG_STREAM_SUBHARMONICS, (index << 32) | k), with
 * k = 9 (p - 1) + 3 (q + 1) + m + 1 for cell (m, q) of level p and k = 72 for the tilt, the
 * subharmonics. So screen `index` (0 <= index < 2^32) of a sequence is reproducible alone.
 * CPU context: FFTW (planned under a lock; OpenMP for the coefficients and the subharmonics);
 * CUDA context: cuFFT (double, Z2Z) on the context's stream, the same coefficients, the same
 * screen to within double rounding (1e-13 relative RMS); the result is on the host when the call
 * returns. A cuFFT plan and device buffers are made for each call.
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
 * A, B are computed once at create from the structure function, in increments relative to one
 * stencil point so that no digits are lost to the large B(0) (Cholesky and eigen-decomposition
 * through LAPACKE; O(n^3): 33 ms for n = 256, 0.9 s for n = 1024), with the first rows' FFT
 * screen (below; 0.26 s for n = 256, 0.8 s for n = 1024 on 2 busy cores); each new row costs
 * O(n^2) (0.05 ms for n = 256, 0.3 ms for n = 1024).
 * Measured statistics (mean D of windows after 4n new rows against von Karman's): within 4 %
 * along and across the motion from 1 sample to n/2 for L0 = 1.6 window widths; within 8 % for
 * L0 = 20 window widths (600 seeds: the largest scales change slowly, over ~L0 of rows, so many
 * windows are needed to average them). The loop's geometry (tests/unit/
 * test_sim_turbulence_pupil.c: n = 36, the central 32 x 32 the pupil, L0 = 2 pupils, 400
 * seeds): piston-removed variance over the pupil / theory 1.007 +- 0.009 (square),
 * 1.015 +- 0.010 (circle) after 4n rows, 1.03 +- 0.025 in the first window.
 * The first n rows are the central n x n of an FFT screen m n samples wide (sw_phase_screen's
 * method, index 0 of seed, with the subharmonics of t; m = 4 for n <= 512, 3 up to 682, else
 * 2): an FFT screen of the window's own size would leave the first windows' piston-removed
 * variance 8-9 % low (see sw_phase_screen). Row g (g >= n) draws its b from
 * sw_rng_draw(seed, SW_RNG_STREAM_INFINITE,
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
/* Moves the screen by distance_m (>= 0, finite, at most 1e9 samples per call) along +v, adding
 * rows as needed. A total position within 1e-9 samples of a whole row counts as that row, so
 * that distances split differently between calls give the same rows. */
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
