/*
 * The Zernike basis: index conversions, values and Cartesian gradients (zernike.h).
 *
 * Implements the definitions written in zernike.h: the OSA/ANSI Z80.28 (ISO 24157) single index
 * j = (n (n + 2) + m) / 2, Noll's index (R. J. Noll, J. Opt. Soc. Am. 66, 207 (1976), his Table I
 * ordering), and Z_n^m = N_n^m R_n^|m|(rho) {cos, sin}(|m| theta) with the radial polynomial
 *     R_n^k(rho) = sum_{s=0}^{(n-k)/2} (-1)^s (n-s)! / (s! ((n+k)/2-s)! ((n-k)/2-s)!) rho^(n-2s).
 *
 * Evaluation is done in Cartesian form, so that the value and the gradient are polynomials in
 * (x, y) with no singularity at the origin. With w = x + i y, k = |m| and b = (n - k) / 2:
 *     rho^k cos(k theta) = Re(w^k) = C_k,   rho^k sin(k theta) = Im(w^k) = S_k,
 *     R_n^k(rho) = rho^k P(rho^2),   P(t) = sum_{s=0}^{b} c_s t^(b-s),
 * so Z = N P(x^2 + y^2) C_k (or S_k). By the Cauchy-Riemann equations of the analytic w^k,
 *     dC_k/dx = k C_{k-1},  dC_k/dy = -k S_{k-1},  dS_k/dx = k S_{k-1},  dS_k/dy = k C_{k-1},
 * and d/dx P(x^2 + y^2) = 2 x P'(t), d/dy = 2 y P'(t).
 *
 * The coefficients c_s are exact integers: c_0 = (n)! / (a! b!) with a = (n + k) / 2, and
 *     c_{s+1} = -c_s (a - s) (b - s) / ((s + 1) (n - s)),
 * where every product and quotient is an integer below 2^53 for n <= 20, so doubles hold them
 * exactly.
 */
#include "core/core_internal.h"
#include "spotwave/zernike.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>

/* Number of OSA indices up to SW_ZERNIKE_MAX_ORDER. */
#define SW_ZERNIKE_MAX_COUNT ((SW_ZERNIKE_MAX_ORDER + 1) * (SW_ZERNIKE_MAX_ORDER + 2) / 2)

int sw_zernike_valid(int n, int m)
{
    if (n < 0 || n > SW_ZERNIKE_MAX_ORDER)
        return 0;
    if (m < -n || m > n)
        return 0;
    return ((n - m) % 2) == 0;
}

int sw_zernike_osa(int n, int m)
{
    if (!sw_zernike_valid(n, m))
        return -1;
    return (n * (n + 2) + m) / 2;
}

sw_status sw_zernike_osa_nm(int j, int *n, int *m)
{
    if (!n || !m)
        return sw_fail(NULL, SW_EINVAL, "sw_zernike_osa_nm: %s is NULL", n ? "m" : "n");
    if (j < 0 || j >= SW_ZERNIKE_MAX_COUNT)
        return sw_fail(NULL, SW_EINVAL,
                       "OSA/ANSI Zernike index %d is out of range: expected 0 .. %d (radial "
                       "orders 0 .. %d)",
                       j, SW_ZERNIKE_MAX_COUNT - 1, SW_ZERNIKE_MAX_ORDER);
    int nn = 0;
    while ((nn + 1) * (nn + 2) / 2 <= j) /* first index of order nn + 1 is (nn+1)(nn+2)/2 */
        nn++;
    *n = nn;
    *m = 2 * j - nn * (nn + 2);
    return SW_OK;
}

int sw_zernike_noll(int n, int m)
{
    if (!sw_zernike_valid(n, m))
        return -1;
    int k = abs(m);
    int base = n * (n + 1) / 2 + 1; /* first Noll index of order n */
    if (k == 0)
        return base; /* only even n have m = 0, and then it comes first */
    /* The pair of terms with this |m|: n even puts m = 0 first, so the pairs start at base + 1;
     * n odd starts with |m| = 1 at base. */
    int first = (n % 2 == 0) ? base + 1 + (k - 2) : base + (k - 1);
    /* Of the pair {first, first + 1}, the even index is the cosine (m > 0). */
    int even = (first % 2 == 0) ? first : first + 1;
    return m > 0 ? even : (first + first + 1 - even);
}

sw_status sw_zernike_noll_nm(int j, int *n, int *m)
{
    if (!n || !m)
        return sw_fail(NULL, SW_EINVAL, "sw_zernike_noll_nm: %s is NULL", n ? "m" : "n");
    if (j < 1 || j > SW_ZERNIKE_MAX_COUNT)
        return sw_fail(NULL, SW_EINVAL,
                       "Noll Zernike index %d is out of range: expected 1 .. %d (radial orders "
                       "0 .. %d)",
                       j, SW_ZERNIKE_MAX_COUNT, SW_ZERNIKE_MAX_ORDER);
    int nn = 0;
    while ((nn + 1) * (nn + 2) / 2 < j) /* last Noll index of order nn is (nn+1)(nn+2)/2 */
        nn++;
    int pos = j - (nn * (nn + 1) / 2 + 1); /* 0 .. nn within the order */
    int k;
    if (nn % 2 == 0)
        k = pos == 0 ? 0 : 2 * ((pos + 1) / 2);
    else
        k = 2 * (pos / 2) + 1;
    *n = nn;
    *m = (k == 0 || j % 2 == 0) ? k : -k;
    return SW_OK;
}

int sw_zernike_count(int max_order)
{
    if (max_order < 0)
        return 0;
    long long c = ((long long)max_order + 1) * ((long long)max_order + 2) / 2;
    return c > INT_MAX ? INT_MAX : (int)c;
}

/* ------------------------------------------------------------------ evaluation */

/* P(t) and P'(t) of R_n^k (see the top of the file), by Horner's rule. */
static void radial_poly(int n, int k, double t, double *p, double *dp)
{
    int a = (n + k) / 2, b = (n - k) / 2;
    /* c_0 = n! / (a! b!) = binomial(n, b), built exactly as a running product. */
    double c = 1.0;
    for (int i = 1; i <= b; i++)
        c = c * (double)(a + i) / (double)i;
    double v = c, d = 0.0;
    for (int s = 0; s < b; s++) {
        c = -c * (double)(a - s) * (double)(b - s) / ((double)(s + 1) * (double)(n - s));
        d = d * t + v;
        v = v * t + c;
    }
    *p = v;
    *dp = d;
}

/* Cw[i] + i Sw[i] = (x + i y)^i for i = 0 .. kmax. */
static void complex_powers(double x, double y, int kmax, double *cw, double *sw)
{
    cw[0] = 1.0;
    sw[0] = 0.0;
    for (int i = 1; i <= kmax; i++) {
        cw[i] = cw[i - 1] * x - sw[i - 1] * y;
        sw[i] = cw[i - 1] * y + sw[i - 1] * x;
    }
}

/* Z_n^m and its gradient from the powers of w (n, m valid). */
static void eval_from_powers(int n, int m, double x, double y, const double *cw, const double *sw,
                             double *value, double *dzdx, double *dzdy)
{
    int k = abs(m);
    double norm = (m == 0) ? sqrt((double)(n + 1)) : sqrt(2.0 * (double)(n + 1));
    double p, dp;
    radial_poly(n, k, x * x + y * y, &p, &dp);
    double ang, dax, day;
    if (m >= 0) {
        ang = cw[k];
        dax = k ? k * cw[k - 1] : 0.0;
        day = k ? -k * sw[k - 1] : 0.0;
    } else {
        ang = sw[k];
        dax = k * sw[k - 1];
        day = k * cw[k - 1];
    }
    *value = norm * p * ang;
    *dzdx = norm * (2.0 * x * dp * ang + p * dax);
    *dzdy = norm * (2.0 * y * dp * ang + p * day);
}

double sw_zernike_eval(int n, int m, double x, double y)
{
    double v, gx, gy;
    sw_zernike_eval_grad(n, m, x, y, &v, &gx, &gy);
    return v;
}

void sw_zernike_eval_grad(int n, int m, double x, double y, double *value, double *dzdx,
                          double *dzdy)
{
    double v = NAN, gx = NAN, gy = NAN;
    if (sw_zernike_valid(n, m)) {
        double cw[SW_ZERNIKE_MAX_ORDER + 1], sw[SW_ZERNIKE_MAX_ORDER + 1];
        complex_powers(x, y, abs(m), cw, sw);
        eval_from_powers(n, m, x, y, cw, sw, &v, &gx, &gy);
    }
    if (value)
        *value = v;
    if (dzdx)
        *dzdx = gx;
    if (dzdy)
        *dzdy = gy;
}

void sw_zernike_sum_grad(const double *coef, int32_t count, double x, double y, double *value,
                         double *dwdx, double *dwdy)
{
    double v = 0.0, gx = 0.0, gy = 0.0;
    if (count > SW_ZERNIKE_MAX_COUNT || (count > 0 && !coef)) {
        v = gx = gy = NAN;
    } else if (count > 0) {
        int n_max, m_last;
        sw_zernike_osa_nm(count - 1, &n_max, &m_last);
        double cw[SW_ZERNIKE_MAX_ORDER + 1], sw[SW_ZERNIKE_MAX_ORDER + 1];
        complex_powers(x, y, n_max, cw, sw);
        int32_t j = 0;
        for (int n = 0; n <= n_max && j < count; n++)
            for (int m = -n; m <= n && j < count; m += 2, j++) {
                if (coef[j] == 0.0)
                    continue;
                double zv, zx, zy;
                eval_from_powers(n, m, x, y, cw, sw, &zv, &zx, &zy);
                v += coef[j] * zv;
                gx += coef[j] * zx;
                gy += coef[j] * zy;
            }
    }
    if (value)
        *value = v;
    if (dwdx)
        *dwdx = gx;
    if (dwdy)
        *dwdy = gy;
}

double sw_zernike_rms(const double *coef, int32_t count, int32_t first_j)
{
    if (count > 0 && !coef)
        return NAN;
    double s = 0.0;
    for (int32_t j = first_j < 0 ? 0 : first_j; j < count; j++)
        s += coef[j] * coef[j];
    return sqrt(s);
}

/* ------------------------------------------------------------------ coefficient sets */

sw_status sw_zernike_coefs_alloc(sw_context *ctx, int32_t count, sw_zernike_coefs *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_zernike_coefs_alloc: out is NULL");
    out->count = 0;
    out->coef_um = NULL;
    if (count < 1 || count > SW_ZERNIKE_MAX_COUNT)
        return sw_fail(ctx, SW_EINVAL,
                       "sw_zernike_coefs_alloc: %d coefficients: expected 1 .. %d (radial orders "
                       "0 .. %d)",
                       (int)count, SW_ZERNIKE_MAX_COUNT, SW_ZERNIKE_MAX_ORDER);
    double *c = calloc((size_t)count, sizeof *c);
    if (!c)
        return sw_fail(ctx, SW_ENOMEM, "sw_zernike_coefs_alloc: out of memory");
    out->count = count;
    out->coef_um = c;
    return SW_OK;
}

void sw_zernike_coefs_free(sw_zernike_coefs *z)
{
    if (!z)
        return;
    free(z->coef_um);
    z->coef_um = NULL;
    z->count = 0;
}
