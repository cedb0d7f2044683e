/*
 * Zernike pupil transforms and refraction (zernike_fit.h): rescaling to a smaller pupil, the
 * left/right mirror image, and the power-vector refraction of Thibos et al. 2004.
 */
#include "core/core_internal.h"
#include "spotwave/zernike_fit.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define M_PI_SW 3.14159265358979323846

/*
 * Rescaling (Schwiegerling's problem, solved exactly by least squares): the wavefront over the
 * old pupil, restricted to the concentric disc of radius to_r, is a polynomial of the same order
 * in the new unit-disc coordinates; its coefficients are fitted on enough sample rings that the
 * fit is exact.
 */
sw_status sw_zernike_rescale(sw_context *ctx, const double *in, int32_t count, double from_r,
                             double to_r, double *out)
{
    const int32_t max_terms = (int32_t)sw_zernike_count(SW_ZERNIKE_MAX_ORDER);
    if (!in || !out)
        return sw_fail(ctx, SW_EINVAL, "pupil rescaling: NULL coefficients");
    if (count < 1 || count > max_terms)
        return sw_fail(ctx, SW_EINVAL, "pupil rescaling: %d terms (1 to %d)", count, max_terms);
    if (!isfinite(from_r) || !isfinite(to_r) || !(to_r > 0.0) || to_r > from_r)
        return sw_fail(ctx, SW_EINVAL,
                       "pupil rescaling: from %g to %g: the new pupil must be positive and no "
                       "larger than the old (no extrapolation)",
                       from_r, to_r);
    for (int32_t j = 0; j < count; j++)
        if (!isfinite(in[j]))
            return sw_fail(ctx, SW_EINVAL, "pupil rescaling: coefficient j = %d is %g", j, in[j]);
    if (to_r == from_r) {
        memmove(out, in, (size_t)count * sizeof(double));
        return SW_OK;
    }
    int N = 0, m_last = 0;
    (void)sw_zernike_osa_nm(count - 1, &N, &m_last);
    const int nr = N + 3, na = 2 * N + 5;
    const int npts = nr * na;
    const double s = to_r / from_r;
    int *nn = malloc((size_t)count * sizeof(int));
    int *mm = malloc((size_t)count * sizeof(int));
    double *A = malloc((size_t)npts * (size_t)count * sizeof(double));
    double *b = malloc((size_t)npts * sizeof(double));
    if (!nn || !mm || !A || !b) {
        free(nn);
        free(mm);
        free(A);
        free(b);
        return sw_fail(ctx, SW_ENOMEM, "pupil rescaling: out of memory");
    }
    for (int32_t j = 0; j < count; j++)
        (void)sw_zernike_osa_nm(j, &nn[j], &mm[j]);
    /* Rings at distinct radii with 2N + 5 angles each: a polynomial of order <= N that vanishes
     * there vanishes everywhere, so A has full column rank and the fit is exact. */
    for (int i = 0; i < nr; i++) {
        const double r = sqrt(((double)i + 0.5) / (double)nr);
        for (int k = 0; k < na; k++) {
            const double th = 2.0 * M_PI_SW * (double)k / (double)na + 0.37 * (double)i;
            const double x = r * cos(th), y = r * sin(th);
            const size_t row = (size_t)i * (size_t)na + (size_t)k;
            double w = 0.0;
            for (int32_t j = 0; j < count; j++) {
                A[row * (size_t)count + (size_t)j] = sw_zernike_eval(nn[j], mm[j], x, y);
                w += in[j] * sw_zernike_eval(nn[j], mm[j], s * x, s * y);
            }
            b[row] = w;
        }
    }
    lapack_int info = LAPACKE_dgels(LAPACK_ROW_MAJOR, 'N', (lapack_int)npts, (lapack_int)count, 1,
                                    A, (lapack_int)count, b, 1);
    if (info == 0)
        memcpy(out, b, (size_t)count * sizeof(double));
    free(nn);
    free(mm);
    free(A);
    free(b);
    if (info != 0)
        return sw_fail(ctx, SW_EINTERNAL, "pupil rescaling: LAPACKE_dgels returned %d", (int)info);
    return SW_OK;
}

void sw_zernike_mirror_x(const double *in, int32_t count, double *out)
{
    if (!in || !out)
        return;
    for (int32_t j = 0; j < count; j++) {
        int n = 0, m = 0;
        if (sw_zernike_osa_nm(j, &n, &m) != SW_OK) {
            out[j] = in[j];
            continue;
        }
        /* x -> -x is theta -> pi - theta: cos(m (pi - t)) = (-1)^m cos(m t) and
         * sin(|m| (pi - t)) = -(-1)^|m| sin(|m| t). */
        const int am = m < 0 ? -m : m;
        const double sign = (am % 2 == 0 ? 1.0 : -1.0) * (m < 0 ? -1.0 : 1.0);
        out[j] = sign * in[j];
    }
}

/* Coefficient (n, m) of coef, 0 when beyond count. */
static double coef_nm(const double *coef, int32_t count, int n, int m)
{
    const int j = sw_zernike_osa(n, m);
    return j >= 0 && j < count ? coef[j] : 0.0;
}

/* A meridian's power moved from the corneal plane to a lens vertex_mm in front of it. */
static double vertex_shift(double p_d, double vertex_mm)
{
    return vertex_mm > 0.0 ? p_d / (1.0 + 1e-3 * vertex_mm * p_d) : p_d;
}

sw_status sw_zernike_refraction(sw_context *ctx, const double *coef, int32_t count, double pupil_mm,
                                int higher_orders, double vertex_mm, sw_refraction *out)
{
    return sw_zernike_refraction_shifted(ctx, coef, count, pupil_mm, higher_orders, vertex_mm, 0.0,
                                         out);
}

sw_status sw_zernike_refraction_shifted(sw_context *ctx, const double *coef, int32_t count,
                                        double pupil_mm, int higher_orders, double vertex_mm,
                                        double shift_d, sw_refraction *out)
{
    if (!coef || !out)
        return sw_fail(ctx, SW_EINVAL, "refraction: NULL argument");
    if (count < 6)
        return sw_fail(ctx, SW_EINVAL,
                       "refraction: %d coefficients; the second order needs j = 3, 4, 5 (count "
                       ">= 6)",
                       count);
    if (!isfinite(pupil_mm) || !(pupil_mm > 0.0))
        return sw_fail(ctx, SW_EINVAL, "refraction: pupil diameter %g mm must be positive",
                       pupil_mm);
    if (!isfinite(vertex_mm) || vertex_mm < 0.0)
        return sw_fail(ctx, SW_EINVAL, "refraction: vertex distance %g mm must be >= 0", vertex_mm);
    if (!isfinite(shift_d))
        return sw_fail(ctx, SW_EINVAL, "refraction: chromatic shift %g D is not finite", shift_d);
    for (int32_t j = 0; j < count; j++)
        if (!isfinite(coef[j]))
            return sw_fail(ctx, SW_EINVAL, "refraction: coefficient j = %d is %g", j, coef[j]);
    const double r2 = 0.25 * pupil_mm * pupil_mm;
    /* Thibos et al. 2004: second order; with higher_orders the Seidel-like terms of orders 4
     * and 6 (micrometres over millimetres squared give dioptres). */
    double M = -4.0 * sqrt(3.0) * coef_nm(coef, count, 2, 0);
    double J0 = -2.0 * sqrt(6.0) * coef_nm(coef, count, 2, 2);
    double J45 = -2.0 * sqrt(6.0) * coef_nm(coef, count, 2, -2);
    if (higher_orders) {
        M += 12.0 * sqrt(5.0) * coef_nm(coef, count, 4, 0) -
             24.0 * sqrt(7.0) * coef_nm(coef, count, 6, 0);
        J0 += 6.0 * sqrt(10.0) * coef_nm(coef, count, 4, 2) -
              12.0 * sqrt(14.0) * coef_nm(coef, count, 6, 2);
        J45 += 6.0 * sqrt(10.0) * coef_nm(coef, count, 4, -2) -
               12.0 * sqrt(14.0) * coef_nm(coef, count, 6, -2);
    }
    M = M / r2 + shift_d;
    J0 /= r2;
    J45 /= r2;
    /* Minus-cylinder form (the inverse of sw_eye_rx_to_zernike). */
    const double cyl = -2.0 * sqrt(J0 * J0 + J45 * J45);
    double sph = M - 0.5 * cyl;
    double axis = 0.5 * atan2(J45, J0) * 180.0 / M_PI_SW;
    if (cyl == 0.0)
        axis = 0.0;
    if (axis < 0.0)
        axis += 180.0;
    if (axis >= 180.0)
        axis -= 180.0;
    /* At the vertex distance: each principal meridian on its own. */
    const double p1 = vertex_shift(sph, vertex_mm), p2 = vertex_shift(sph + cyl, vertex_mm);
    out->M = M;
    out->J0 = J0;
    out->J45 = J45;
    out->sphere_d = p1;
    out->cyl_d = p2 - p1;
    out->axis_deg = axis;
    return SW_OK;
}

/* The Chromatic Eye's dispersion (Thibos, Ye, Zhang & Bradley 1992): Rx = p - q / (lambda - c). */
#define SW_LCA_Q_DUM 0.63346 /* dioptre micrometres */
#define SW_LCA_C_UM  0.21410 /* micrometres */

double sw_eye_lca_d(double from_um, double to_um)
{
    if (!isfinite(from_um) || !isfinite(to_um) || !(from_um > SW_LCA_C_UM) ||
        !(to_um > SW_LCA_C_UM))
        return NAN;
    return SW_LCA_Q_DUM / (from_um - SW_LCA_C_UM) - SW_LCA_Q_DUM / (to_um - SW_LCA_C_UM);
}

void sw_zernike_flip(const double *in, int32_t count, int flip_x, int flip_y, double *out)
{
    if (!in || !out)
        return;
    for (int32_t j = 0; j < count; j++) {
        int n = 0, m = 0;
        if (sw_zernike_osa_nm(j, &n, &m) != SW_OK) {
            out[j] = in[j];
            continue;
        }
        const int am = m < 0 ? -m : m;
        double sign = 1.0;
        /* x -> -x: theta -> pi - theta (sw_zernike_mirror_x) */
        if (flip_x && ((m >= 0 && am % 2 == 1) || (m < 0 && am % 2 == 0)))
            sign = -sign;
        /* y -> -y: theta -> -theta; cos is even, sin odd */
        if (flip_y && m < 0)
            sign = -sign;
        out[j] = sign * in[j];
    }
}

double sw_refraction_axis_clinical(double axis_deg)
{
    if (!isfinite(axis_deg))
        return axis_deg;
    double a = fmod(axis_deg, 180.0);
    if (a <= 0.0)
        a += 180.0;
    /* a value within rounding of 0 or 180 is written 180 */
    if (a > 180.0 - 1e-9 || a < 1e-9)
        a = 180.0;
    return a;
}

void sw_refraction_transpose(double sphere_d, double cyl_d, double axis_deg, double *sphere_out,
                             double *cyl_out, double *axis_out)
{
    const double s = sphere_d + cyl_d, c = -cyl_d, a = sw_refraction_axis_clinical(axis_deg + 90.0);
    if (sphere_out)
        *sphere_out = s;
    if (cyl_out)
        *cyl_out = c;
    if (axis_out)
        *axis_out = a;
}
