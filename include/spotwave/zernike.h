/*
 * spotwave zernike: the Zernike basis (indices, evaluation, gradients) and coefficient files.
 * Modal fitting of slopes, wavefront maps, pupil transforms and refraction: zernike_fit.h.
 *
 * Papers: Noll R. J. 1976, "Zernike polynomials and atmospheric turbulence", J. Opt. Soc. Am.
 * 66(3), 207-211 (Noll's index); Thibos L. N., Applegate R. A., Schwiegerling J. T., Webb R. 2002,
 * "Standards for reporting the optical aberrations of eyes", J. Refract. Surg. 18, S652-S660
 * (OSA/ANSI Z80.28).
 *
 * Conventions (DESIGN.md; OSA/ANSI Z80.28, ISO 24157):
 *   - Radial order n >= 0, azimuthal frequency m with |m| <= n and n - m even.
 *   - Single index (OSA/ANSI, from 0): j = (n (n + 2) + m) / 2.
 *   - Noll index (from 1): Noll's ordering (J. Opt. Soc. Am. 66, 207, 1976): by n, within n by
 *     increasing |m|; for m != 0 an even Noll index carries cos (m > 0), an odd one sin (m < 0).
 *     The polynomials are the same functions in both orderings; only the index differs.
 *   - Normalisation: orthonormal over the unit disc (RMS-normalised): the mean of Z_j Z_k over
 *     the disc is delta_jk, so the RMS of a wavefront sum c_j Z_j is sqrt(sum c_j^2) (without the
 *     piston j = 0).
 *   - Z_n^m(rho, theta) = N_n^m R_n^|m|(rho) cos(m theta)        for m >= 0,
 *                       = N_n^m R_n^|m|(rho) sin(|m| theta)      for m < 0,
 *     N_n^m = sqrt(2 (n + 1)) for m != 0 and sqrt(n + 1) for m = 0,
 *     R_n^k(rho) = sum_{s=0}^{(n-k)/2} (-1)^s (n - s)! / (s! ((n+k)/2 - s)! ((n-k)/2 - s)!)
 * rho^(n-2s).
 *   - Cartesian unit-disc coordinates x = rho cos(theta), y = rho sin(theta): x along the
 *     detector's +x (columns), y along +y (rows), theta counter-clockwise from +x in that frame.
 *     A pupil of radius R centred at (cx, cy) maps pupil point (u, v) to ((u - cx)/R, (v - cy)/R).
 *   - Coefficients in micrometres, with the OSA/ANSI Z80.28 sign: a positive wavefront leads
 *     (is phase advanced), so a myopic eye has c(2,0) > 0. The optical path delay the SH
 *     simulator holds (sim_sh.h) is minus the Zernike sum.
 */
#ifndef SPOTWAVE_ZERNIKE_H
#define SPOTWAVE_ZERNIKE_H

#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Highest radial order spotwave evaluates (j up to 230). */
#define SW_ZERNIKE_MAX_ORDER 20

/* 1 when (n, m) names a Zernike polynomial with n <= SW_ZERNIKE_MAX_ORDER, 0 otherwise. */
int sw_zernike_valid(int n, int m);
/* OSA/ANSI index of (n, m); -1 when (n, m) is not valid. */
int sw_zernike_osa(int n, int m);
/* (n, m) of OSA/ANSI index j >= 0 (j within SW_ZERNIKE_MAX_ORDER): SW_OK, else SW_EINVAL. */
sw_status sw_zernike_osa_nm(int j, int *n, int *m);
/* Noll index (from 1) of (n, m); -1 when (n, m) is not valid. */
int sw_zernike_noll(int n, int m);
/* (n, m) of Noll index j >= 1: SW_OK, else SW_EINVAL. */
sw_status sw_zernike_noll_nm(int j, int *n, int *m);
/* Number of OSA indices up to and including radial order n: (n + 1)(n + 2) / 2. */
int sw_zernike_count(int max_order);

/* Z_n^m at unit-disc point (x, y) (any point: the polynomial is evaluated outside the disc
 * too). Invalid (n, m): NaN. */
double sw_zernike_eval(int n, int m, double x, double y);
/* Value and Cartesian gradient (d/dx, d/dy in unit-disc coordinates) of Z_n^m at (x, y);
 * well defined at the origin. Invalid (n, m): all NaN. */
void sw_zernike_eval_grad(int n, int m, double x, double y, double *value, double *dzdx,
                          double *dzdy);

/* Wavefront sum_j coef[j] Z_j (OSA order, j = 0 .. count - 1) and its gradient at (x, y). */
void sw_zernike_sum_grad(const double *coef, int32_t count, double x, double y, double *value,
                         double *dwdx, double *dwdy);

/* RMS of the wavefront over the disc, leaving out the OSA indices below first_j
 * (1: without piston; 3: without piston and tilts): sqrt(sum_{j >= first_j} coef[j]^2). */
double sw_zernike_rms(const double *coef, int32_t count, int32_t first_j);

/* A set of coefficients in OSA order: coef_um[j] for j = 0 .. count - 1 (missing terms 0). */
typedef struct sw_zernike_coefs {
    int32_t count;
    double *coef_um;
} sw_zernike_coefs;

sw_status sw_zernike_coefs_alloc(sw_context *ctx, int32_t count, sw_zernike_coefs *out);
void sw_zernike_coefs_free(sw_zernike_coefs *z); /* NULL-safe, leaves a zeroed struct */

/*
 * Reads a coefficient CSV (io.h's sw_csv_read): a header row, then one row per term, in any
 * order, with the index given by one of
 *   n,m     - radial and azimuthal order (DESIGN.md's `n,m,coef_um`);
 *   j       - OSA/ANSI index (from 0);
 *   noll    - Noll index (from 1);
 * (when several are present they must agree) and the value in coef_um. Other columns (eye, ...)
 * are ignored. count = highest OSA index + 1. SW_EFORMAT naming the file and the 1-based data row
 * for: no index or coef_um column, a non-integer or invalid index, n - m odd, |m| > n, an order
 * above SW_ZERNIKE_MAX_ORDER, a term given twice, a NaN/Inf coefficient, indices that disagree.
 */
sw_status sw_zernike_read_csv(sw_context *ctx, const char *path, sw_zernike_coefs *out);

/* Writes `j,n,m,noll,coef_um` for every j (zeros included). */
sw_status sw_zernike_write_csv(sw_context *ctx, const char *path, const sw_zernike_coefs *z);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_ZERNIKE_H */
