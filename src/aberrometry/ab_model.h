/*
 * The model arithmetic of the aberrometry pipeline (aberrometry.h), written once for the CPU
 * (aberrometry.c) and the GPU (aberrometry_cuda.cu): the Zernike terms as polynomials, the exact
 * lenslet means of their gradients (the design matrix D of step 5, seed 001 Sec. 3.3), and the
 * lenslet classification of steps 2 and 3 (seed Sec. 3.2.1, "use of a dynamic search mesh").
 * aberrometry_cuda.cu is compiled with -fmad=false and the C files with -ffp-contract=off, so the
 * same expressions round alike on both: the design matrices of the two backends are identical.
 */
#ifndef SW_AB_MODEL_H
#define SW_AB_MODEL_H

#include <math.h>
#include <stdint.h>

#include "spotwave/aberrometry.h"
#include "spotwave/geometry.h"
#include "spotwave/pupil.h"

#if defined(__CUDACC__)
#define SW_AB_FN __host__ __device__ static inline
#else
#define SW_AB_FN static inline
#endif

/* ------------------------------------------------------------------ Zernike terms */

/*
 * All OSA/ANSI terms j = 0 .. J - 1 (J <= SW_AB_MAX_TERMS) at the unit-disc point (X, Y), with
 * zernike.h's normalisation and sign, as polynomials (no trigonometry, no division, exact at the
 * origin): with w = X + iY, t = X^2 + Y^2, k = |m|, b = (n - k) / 2, a = (n + k) / 2,
 *     Z_n^m = N P(t) Re(w^k)  (m >= 0),   N P(t) Im(w^k)  (m < 0),
 *     P(t) = sum_{s=0}^{b} c_s t^(b - s),  c_0 = n! / (a! b!),
 *     c_{s+1} = -c_s (a - s) (b - s) / ((s + 1) (n - s))   (exact integers in doubles),
 * N = sqrt(n + 1) for m = 0 and sqrt(2 (n + 1)) otherwise.
 */
SW_AB_FN void sw_ab_zernike_all(int32_t J, double X, double Y, double *z)
{
    double cw[SW_AB_MAX_ORDER + 1], sw[SW_AB_MAX_ORDER + 1];
    cw[0] = 1.0;
    sw[0] = 0.0;
    for (int i = 1; i <= SW_AB_MAX_ORDER; i++) {
        cw[i] = cw[i - 1] * X - sw[i - 1] * Y;
        sw[i] = cw[i - 1] * Y + sw[i - 1] * X;
    }
    double t = X * X + Y * Y;
    int32_t j = 0;
    for (int n = 0; n <= SW_AB_MAX_ORDER && j < J; n++) {
        for (int m = -n; m <= n && j < J; m += 2, j++) {
            int k = m < 0 ? -m : m;
            int a = (n + k) / 2, b = (n - k) / 2;
            double c = 1.0;
            for (int i = 1; i <= b; i++)
                c = c * (double)(a + i) / (double)i;
            double p = c;
            for (int s = 0; s < b; s++) {
                c = -c * (double)(a - s) * (double)(b - s) / ((double)(s + 1) * (double)(n - s));
                p = p * t + c;
            }
            double norm = m == 0 ? sqrt((double)(n + 1)) : sqrt(2.0 * (double)(n + 1));
            z[j] = norm * p * (m >= 0 ? cw[k] : sw[k]);
        }
    }
}

/*
 * The mean over the square of side h centred at (X, Y) (unit-disc coordinates) of dZ_j/dX and
 * dZ_j/dY for j = 1 .. J - 1, into gx[j - 1], gy[j - 1], exactly (aberrometry.h step 5):
 *     mean dZ/dX = (1 / h^2) int_{Y - h/2}^{Y + h/2} [Z(X + h/2, t) - Z(X - h/2, t)] dt,
 * likewise for Y, by a 6-node Gauss-Legendre rule (exact for degree 11; Z has degree <= 10):
 *     mean dZ/dX = (1 / (2 h)) sum_i w_i [Z(X + h/2, Y + u_i h/2) - Z(X - h/2, Y + u_i h/2)].
 */
SW_AB_FN void sw_ab_mean_grad(int32_t J, double X, double Y, double h, double *gx, double *gy)
{
    const double u[6] = {-0.9324695142031520278123016, -0.6612093864662645136613996,
                         -0.2386191860831969086305017, 0.2386191860831969086305017,
                         0.6612093864662645136613996,  0.9324695142031520278123016};
    const double w[6] = {0.1713244923791703450402961, 0.3607615730481386075698335,
                         0.4679139345726910473898703, 0.4679139345726910473898703,
                         0.3607615730481386075698335, 0.1713244923791703450402961};
    double za[SW_AB_MAX_TERMS], zb[SW_AB_MAX_TERMS];
    double half = 0.5 * h;
    for (int32_t j = 1; j < J; j++)
        gx[j - 1] = gy[j - 1] = 0.0;
    for (int i = 0; i < 6; i++) {
        double along = u[i] * half;
        /* d/dX: the right edge minus the left edge */
        sw_ab_zernike_all(J, X + half, Y + along, za);
        sw_ab_zernike_all(J, X - half, Y + along, zb);
        for (int32_t j = 1; j < J; j++)
            gx[j - 1] += w[i] * (za[j] - zb[j]);
        /* d/dY: the top edge minus the bottom edge */
        sw_ab_zernike_all(J, X + along, Y + half, za);
        sw_ab_zernike_all(J, X + along, Y - half, zb);
        for (int32_t j = 1; j < J; j++)
            gy[j - 1] += w[i] * (za[j] - zb[j]);
    }
    double den = 2.0 * h;
    for (int32_t j = 1; j < J; j++) {
        gx[j - 1] = gx[j - 1] / den;
        gy[j - 1] = gy[j - 1] / den;
    }
}

/* ------------------------------------------------------------------ design rows (step 5) */

/* The reference position of lenslet (ix, iy) (geometry.h; the same expression as
 * sw_sh_reference). */
SW_AB_FN void sw_ab_ref_pos(const sw_sh_geometry *g, int32_t ix, int32_t iy, double *x, double *y)
{
    *x = g->x0 - 0.5 + g->pitch_px * ((double)ix + 0.5);
    *y = g->y0 - 0.5 + g->pitch_px * ((double)iy + 0.5);
}

/* Pixels of spot displacement per micrometre of coefficient per unit mean gradient:
 * -F / R_um, F = focal_mm 1000 / pixel_um, R_um = R_px pixel_um (aberrometry.h step 5; a
 * positive wavefront leads and moves the spots against its gradient, zernike_fit.h). */
SW_AB_FN double sw_ab_row_scale(const sw_sh_geometry *g, double radius_px)
{
    double F = g->focal_mm * 1000.0 / g->pixel_um;
    return -F / (radius_px * g->pixel_um);
}

/*
 * The two rows of D for lenslet (ix, iy) in the analysis circle (cx, cy, R) (pixels): the x row
 * dx[j - 1] and the y row dy[j - 1], j = 1 .. J - 1, pixels per micrometre: the exact means of
 * the gradients over the lenslet's square (side pitch_px, centred on its reference position) in
 * circle coordinates, times sw_ab_row_scale. The first Jp - 1 entries are the rows of the
 * preliminary model (orders 1 .. prelim_order).
 */
SW_AB_FN void sw_ab_design_rows(int32_t J, const sw_sh_geometry *g, int32_t ix, int32_t iy,
                                double cx, double cy, double R, double *dx, double *dy)
{
    double xr, yr;
    sw_ab_ref_pos(g, ix, iy, &xr, &yr);
    sw_ab_mean_grad(J, (xr - cx) / R, (yr - cy) / R, g->pitch_px / R, dx, dy);
    double s = sw_ab_row_scale(g, R);
    for (int32_t j = 1; j < J; j++) {
        dx[j - 1] = s * dx[j - 1];
        dy[j - 1] = s * dy[j - 1];
    }
}

/* ------------------------------------------------------------------ classification (2, 3) */

/* Step 2: the analysis circle of a found pupil: its centre, radius fit_radius_px when > 0,
 * else the ellipse's major semi-axis. */
SW_AB_FN void sw_ab_circle(const sw_pupil_ellipse *e, double fit_radius_px, double *cx, double *cy,
                           double *radius)
{
    *cx = e->cx_px;
    *cy = e->cy_px;
    *radius = fit_radius_px > 0.0 ? fit_radius_px : e->a_px;
}

/* 1 when (x, y) lies in the circle (cx, cy, r): (x - cx)^2 + (y - cy)^2 <= r^2. */
SW_AB_FN int sw_ab_in_circle(double x, double y, double cx, double cy, double r)
{
    double dx = x - cx, dy = y - cy;
    return dx * dx + dy * dy <= r * r;
}

/* What a lenslet is to the pipeline: SW_AB_UNUSED, or the index of the first search of the
 * frame that takes it (aberrometry.h step 3: stage k = 0 .. S - 1 of the dynamic mesh, S the
 * final search; S = 0 without the dynamic mesh). Stage 0 is the static central mesh. */
#define SW_AB_UNUSED 255

/*
 * Steps 1-3 for lenslet (ix, iy) of the eye e whose lenslet mask value (pupil.h) is mask = e + 1
 * (the caller passes that eye's circle cx, cy, r; mask 0: unused): unused when it has no
 * reference centroid (ref_x or ref_y not finite) or its reference position lies outside the
 * circle; otherwise the first stage k < S whose circle, radius frac[k] x r (frac increasing),
 * holds that position, or S when none does.
 */
SW_AB_FN int sw_ab_lenslet_stage(const sw_sh_geometry *g, int32_t ix, int32_t iy, uint8_t mask,
                                 double ref_x, double ref_y, double cx, double cy, double r,
                                 const double *frac, int S)
{
    if (mask == 0)
        return SW_AB_UNUSED;
    if (!(ref_x - ref_x == 0.0) || !(ref_y - ref_y == 0.0)) /* NaN or Inf: no reference spot */
        return SW_AB_UNUSED;
    double xr, yr;
    sw_ab_ref_pos(g, ix, iy, &xr, &yr);
    if (!sw_ab_in_circle(xr, yr, cx, cy, r))
        return SW_AB_UNUSED;
    for (int k = 0; k < S; k++)
        if (sw_ab_in_circle(xr, yr, cx, cy, frac[k] * r))
            return k;
    return S;
}

/* Step 3b: the terms of stage k's fit for an eye whose stage search kept n spots: the
 * schedule's Jk (orders 1 .. o_k), raised to J(o) = (o + 1)(o + 2) / 2 for the highest order
 * o <= order whose J(o) - 1 unknowns get at least q slopes each, q (J(o) - 1) <= 2 n
 * (aberrometry.h mesh_slopes_per_term; q = 0: Jk). */
SW_AB_FN int32_t sw_ab_stage_terms(int32_t Jk, int32_t order, int32_t n, int32_t q)
{
    int32_t J = Jk;
    if (q <= 0)
        return J;
    for (int32_t o = 1; o <= order; o++) {
        const int32_t Jo = (o + 1) * (o + 2) / 2;
        if (Jo > J && (int64_t)q * (int64_t)(Jo - 1) <= 2 * (int64_t)n)
            J = Jo;
    }
    return J;
}

/* Step 3b's check of a raised fit (Jf > Jk terms): 1 when its residual RMS over the stage's
 * slopes, res pixels, exceeds tol (mesh_raise_residual_px), so that the stage's own Jk terms are
 * fitted instead. A stage of clean spots fits to ~0.07 px; one whose search took some spots
 * wrongly does not, and a high order follows them and extrapolates wildly (bench_eye_pupils,
 * 10-px lenslets, 5.5 um: 0.44 px). */
SW_AB_FN int sw_ab_raise_rejected(int32_t Jf, int32_t Jk, double res, double tol)
{
    return Jf > Jk && res > tol;
}

/* Step 5's outlier test: 1 when the largest squared residual of a spot, worst2 = |v_l|^2
 * (pixels^2), exceeds max(sigma rho, min_px)^2, rho the fit's residual RMS; never when sigma is 0
 * (aberrometry.h outlier_sigma, outlier_min_px). */
SW_AB_FN int sw_ab_outlier(double worst2, double rho, double sigma, double min_px)
{
    if (!(sigma > 0.0))
        return 0;
    const double tol = sigma * rho > min_px ? sigma * rho : min_px;
    return worst2 > tol * tol;
}

/* The most terms stage k's fit can take (the columns of its prediction D_k c_k): J = J(order)
 * when the fits may be raised (q > 0), else the schedule's Jk. */
SW_AB_FN int32_t sw_ab_stage_terms_max(int32_t Jk, int32_t J, int32_t q)
{
    return q > 0 ? J : Jk;
}

/* The mesh check of step 4: 1 when the centroid (x, y) lies farther than tol from its start
 * (x0, y0), (x - x0)^2 + (y - y0)^2 > tol^2. */
SW_AB_FN int sw_ab_off_mesh(double x, double y, double x0, double y0, double tol)
{
    double dx = x - x0, dy = y - y0;
    return dx * dx + dy * dy > tol * tol;
}

#endif /* SW_AB_MODEL_H */
