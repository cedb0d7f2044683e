/*
 * Atmospheric phase screens (turbulence.h): the von Karman / Kolmogorov statistics, FFT screens
 * with subharmonics on the CPU (FFTW; the cuFFT twin is turbulence_cuda.cu), and the infinite
 * screen.
 *
 * Statistics (units and constants in turbulence.h):
 *   PSD       Phi(f) = A r0^(-5/3) (f^2 + 1/L0^2)^(-11/6), A = 0.022896 (von Karman);
 *   D(r)      Kolmogorov 2 (24/5 Gamma(6/5))^(5/6) (r/r0)^(5/3) (Fried's 6.88);
 *             von Karman 2 c (L0/r0)^(5/3) G(x), x = 2 pi r / L0,
 *             c = 2^(1/6) Gamma(11/6) / (2 pi^(8/3)) (24/5 Gamma(6/5))^(5/6),
 *             G(x) = 2^(nu-1) Gamma(nu) - x^nu K_nu(x), nu = 5/6 (so D(0) = 0, D(inf) = 2 B(0)).
 *   B(r)      c (L0/r0)^(5/3) x^nu K_nu(x) = c (L0/r0)^(5/3) (2^(nu-1) Gamma(nu) - G(x)).
 *   G is summed from the ascending series of K_nu = pi / (2 sin nu pi) (I_-nu - I_nu) for x < 2
 *   (its constant term cancels exactly, so small separations keep every digit), and from the
 *   integral K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt (trapezoid rule) beyond.
 *
 * FFT screens: Lane, Glindemann & Dainty, Waves Random Media 2, 209 (1992), with subharmonics
 * after Johansson & Gavel, Proc. SPIE 2200 (1994). Two refinements of ours, both so that the
 * cells near the origin, where Phi is steep, contribute their exact structure function at small
 * separations: the innermost FFT bins are weighted by int_cell Phi |f|^2 / |f_c|^2, and each
 * subharmonic term carries its cell's power at the cell's power-weighted RMS frequency; the last
 * central cell becomes a random tilt. Details, and the random draws, in turbulence.h
 * (sw_phase_screen).
 *
 * Infinite screen: Assemat, Wilson & Gendron, Opt. Express 14, 988 (2006), Eq. (5)-(8):
 * X = A Z + B b with A = Cxz Czz^-1 and B B^T = Cxx - A Czx.
 */
#define _POSIX_C_SOURCE 200809L

#include "sim/turbulence_internal.h"

#include <cblas.h>
#include <fftw3.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846
#define NU (5.0 / 6.0)

/* ------------------------------------------------------------------ statistics */

/* A = Gamma(11/6)^2 / (2 pi^(11/3)) (24/5 Gamma(6/5))^(5/6). */
static double psd_constant(void)
{
    const double g = tgamma(11.0 / 6.0);
    return g * g / (2.0 * pow(PI, 11.0 / 3.0)) * pow(4.8 * tgamma(1.2), 5.0 / 6.0);
}

/* c of the header comment: B(r) = c (L0/r0)^(5/3) x^nu K_nu(x). */
static double vk_constant(void)
{
    return pow(2.0, 1.0 / 6.0) * tgamma(11.0 / 6.0) / (2.0 * pow(PI, 8.0 / 3.0)) *
           pow(4.8 * tgamma(1.2), 5.0 / 6.0);
}

double sw_bessel_k(double nu, double x)
{
    if (!(x > 0.0) || !isfinite(nu))
        return NAN;
    if (isinf(x))
        return 0.0;
    /* The integrand is exp(-x) exp(-2 x sinh^2(t/2)) cosh(nu t); the factor exp(-x) is applied
     * at the end. Near t = 0 it is a Gaussian of width 1/sqrt(x), so the step shrinks for large
     * x; it is analytic in a strip around the real axis, so the trapezoid rule converges
     * exponentially (error ~ exp(-pi^2 / (2 h)) < 1e-21 at h = 0.1). */
    const double h = fmin(0.1, 0.3 / sqrt(x));
    const double anu = fabs(nu);
    double sum = 0.5; /* t = 0: exp(0) cosh(0) / 2 */
    for (int k = 1; k < 1000000; k++) {
        const double t = k * h;
        const double s = sinh(0.5 * t);
        const double e = -2.0 * x * s * s + anu * t;
        if (e < -750.0)
            break; /* exp underflows; every later term is smaller still */
        const double term = exp(-2.0 * x * s * s) * cosh(nu * t);
        sum += term;
        if (term < 1e-18 * sum && x * sinh(t) > anu)
            break; /* past the peak and negligible */
    }
    return sum * h * exp(-x);
}

/* G(x) = 2^(nu-1) Gamma(nu) - x^nu K_nu(x) for nu = 5/6, x >= 0. */
static double vk_g(double x)
{
    if (x <= 0.0)
        return 0.0;
    if (x < 2.0) {
        /* x^nu K_nu = pi / (2 sin nu pi) [2^nu sum_k q^k / (k! Gamma(k - nu + 1))
         *                                 - 2^-nu x^(2 nu) sum_k q^k / (k! Gamma(k + nu + 1))],
         * q = x^2 / 4; the k = 0 term of the first sum is 2^(nu-1) Gamma(nu). */
        const double q = 0.25 * x * x;
        double t1 = 1.0 / tgamma(NU + 1.0), s1 = t1;
        double t2 = q / tgamma(2.0 - NU), s2 = t2;
        for (int k = 1; k < 60; k++) {
            t1 *= q / (k * (k + NU));
            s1 += t1;
        }
        for (int k = 2; k < 60; k++) {
            t2 *= q / (k * (k - NU));
            s2 += t2;
        }
        return PI / (2.0 * sin(NU * PI)) *
               (pow(2.0, -NU) * pow(x, 2.0 * NU) * s1 - pow(2.0, NU) * s2);
    }
    return pow(2.0, NU - 1.0) * tgamma(NU) - pow(x, NU) * sw_bessel_k(NU, x);
}

void sw_turbulence_default(sw_turbulence *t)
{
    if (!t)
        return;
    t->r0_m = 0.1;
    t->L0_m = 25.0;
    t->wavelength_um = 0.5;
    t->subharmonics = 3;
}

int sw_turbulence_is_kolmogorov(const sw_turbulence *t)
{
    return t && (t->L0_m == 0.0 || isinf(t->L0_m));
}

sw_status sw_turbulence_check(sw_context *ctx, const sw_turbulence *t)
{
    if (!t)
        return sw_fail(ctx, SW_EINVAL, "turbulence: parameters are NULL");
    if (!(t->r0_m > 0.0) || !isfinite(t->r0_m))
        return sw_fail(ctx, SW_EINVAL, "turbulence: r0 = %g m must be positive and finite",
                       t->r0_m);
    if (isnan(t->L0_m) || t->L0_m < 0.0)
        return sw_fail(ctx, SW_EINVAL,
                       "turbulence: outer scale L0 = %g m must be positive (0 or infinite for "
                       "Kolmogorov turbulence)",
                       t->L0_m);
    if (!(t->wavelength_um > 0.0) || !isfinite(t->wavelength_um))
        return sw_fail(ctx, SW_EINVAL,
                       "turbulence: wavelength %g um (at which r0 is given) must be positive and "
                       "finite",
                       t->wavelength_um);
    if (t->subharmonics < 0 || t->subharmonics > SW_TURBULENCE_MAX_SUBHARMONICS)
        return sw_fail(ctx, SW_EINVAL, "turbulence: %d subharmonic levels: expected 0 to %d",
                       (int)t->subharmonics, SW_TURBULENCE_MAX_SUBHARMONICS);
    return SW_OK;
}

/* NaN unless t is usable (the structure functions do not report errors). */
static int usable(const sw_turbulence *t)
{
    return t && t->r0_m > 0.0 && isfinite(t->r0_m) && !isnan(t->L0_m) && t->L0_m >= 0.0;
}

double sw_turbulence_structure(const sw_turbulence *t, double r_m)
{
    if (!usable(t) || !(r_m >= 0.0))
        return NAN;
    if (sw_turbulence_is_kolmogorov(t))
        return 2.0 * pow(4.8 * tgamma(1.2), 5.0 / 6.0) * pow(r_m / t->r0_m, 5.0 / 3.0);
    if (isinf(r_m))
        return 2.0 * sw_turbulence_covariance(t, 0.0);
    return 2.0 * vk_constant() * pow(t->L0_m / t->r0_m, 5.0 / 3.0) * vk_g(2.0 * PI * r_m / t->L0_m);
}

double sw_turbulence_covariance(const sw_turbulence *t, double r_m)
{
    if (!usable(t) || sw_turbulence_is_kolmogorov(t) || !(r_m >= 0.0))
        return NAN;
    const double b0 = pow(2.0, NU - 1.0) * tgamma(NU);
    const double g = isinf(r_m) ? b0 : vk_g(2.0 * PI * r_m / t->L0_m);
    return vk_constant() * pow(t->L0_m / t->r0_m, 5.0 / 3.0) * (b0 - g);
}

/* Gauss-Legendre nodes and weights on [-1, 1] (below). */
#define GL_N 10
static void gauss_legendre(double *x, double *w);

/*
 * Piston-removed variance over an aperture, sigma^2 = E[mean over the aperture of (phi - its
 * mean)^2] = B(0) - <B(x - y)> = <D(|x - y|)> / 2 over two points x, y drawn uniformly in it (in
 * the structure function only, so Kolmogorov's is finite too). With s = r / D:
 *   circle of diameter D: the distance density of two points is
 *     p(s) = (16 s / pi) (acos s - s sqrt(1 - s^2)), 0 <= s <= 1,
 *     and with s = cos(a): sigma^2 = (8 / pi) int_0^(pi/2) D(D cos a) cos a sin a
 *                                    (a - sin a cos a) da (smooth at both ends);
 *   square of side D: the offsets' sizes along x and y are independent with density 2 (1 - x)
 *     each on [0, 1], so sigma^2 = 2 int_0^1 int_0^1 (1 - x) (1 - y) D(D hypot(x, y)) dx dy, in
 *     polar coordinates over the two triangles x >= y and y > x (equal by symmetry).
 * Gauss-Legendre on panels; ~1e-10 relative.
 */
double sw_turbulence_pupil_variance(const sw_turbulence *t, double diameter_m, int square)
{
    if (!usable(t) || !(diameter_m >= 0.0) || !isfinite(diameter_m) || (square != 0 && square != 1))
        return NAN;
    if (diameter_m == 0.0)
        return 0.0;
    double x[GL_N], w[GL_N];
    gauss_legendre(x, w);
    double sum = 0.0;
    if (!square) {
        const int panels = 24;
        const double h = 0.5 * PI / panels;
        for (int p = 0; p < panels; p++)
            for (int i = 0; i < GL_N; i++) {
                const double a = h * (p + 0.5 + 0.5 * x[i]), c = cos(a), s = sin(a);
                sum += 0.5 * h * w[i] * sw_turbulence_structure(t, diameter_m * c) * c * s *
                       (a - s * c);
            }
        return 8.0 / PI * sum;
    }
    const int pa = 8, pr = 16;
    const double ha = 0.25 * PI / pa;
    for (int p = 0; p < pa; p++)
        for (int i = 0; i < GL_N; i++) {
            const double a = ha * (p + 0.5 + 0.5 * x[i]), c = cos(a), s = sin(a);
            const double rmax = 1.0 / c, hr = rmax / pr;
            double inner = 0.0;
            for (int q = 0; q < pr; q++)
                for (int j = 0; j < GL_N; j++) {
                    const double r = hr * (q + 0.5 + 0.5 * x[j]);
                    inner += 0.5 * hr * w[j] * (1.0 - r * c) * (1.0 - r * s) *
                             sw_turbulence_structure(t, diameter_m * r) * r;
                }
            sum += 0.5 * ha * w[i] * inner;
        }
    return 4.0 * sum; /* 2 x the two triangles */
}

/* ------------------------------------------------------------------ FFT screens */

static double psd(const sw_screen_spec *s, double f2)
{
    return s->psd_scale * pow(f2 + s->inv_L0_sq, -11.0 / 6.0);
}

/* (1/n) sum_i exp(2 pi i f u_i) over the centred grid u_i = (i - (n-1)/2) dx: a real number. */
static double grid_mean(double f, int32_t n, double dx)
{
    if (f == 0.0)
        return 1.0;
    return sin(PI * f * n * dx) / (n * sin(PI * f * dx));
}

/* Gauss-Legendre nodes and weights on [-1, 1] (Newton's method on the Legendre polynomial). */
static void gauss_legendre(double *x, double *w)
{
    const int n = GL_N;
    for (int i = 0; i < (n + 1) / 2; i++) {
        double z = cos(PI * (i + 0.75) / (n + 0.5)), dp = 1.0;
        for (int it = 0; it < 100; it++) {
            double p1 = 1.0, p0 = 0.0;
            for (int j = 1; j <= n; j++) {
                const double pm = p0;
                p0 = p1;
                p1 = ((2.0 * j - 1.0) * z * p0 - (j - 1.0) * pm) / j;
            }
            dp = n * (z * p1 - p0) / (z * z - 1.0);
            const double dz = p1 / dp;
            z -= dz;
            if (fabs(dz) < 1e-16)
                break;
        }
        x[i] = -z;
        x[n - 1 - i] = z;
        w[i] = w[n - 1 - i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
}

/* Moments of the PSD over the square cell of side d centred on (cx, cy), which does not contain
 * the origin: m[0] = int Phi, m[1] = int Phi fx^2, m[2] = int Phi fy^2 (2 x 2 sub-cells, GL_N
 * points each way in each: the singularity at the origin is at least one sub-cell away, so the
 * rule is accurate to ~1e-15). */
static void cell_moments(const sw_screen_spec *s, double cx, double cy, double d, double m[3])
{
    double x[GL_N], w[GL_N];
    gauss_legendre(x, w);
    m[0] = m[1] = m[2] = 0.0;
    const double h = 0.25 * d; /* half-width of a sub-cell */
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 2; b++) {
            const double sx = cx + (a - 0.5) * 2.0 * h, sy = cy + (b - 0.5) * 2.0 * h;
            for (int i = 0; i < GL_N; i++)
                for (int j = 0; j < GL_N; j++) {
                    const double fx = sx + h * x[i], fy = sy + h * x[j];
                    const double v = w[i] * w[j] * h * h * psd(s, fx * fx + fy * fy);
                    m[0] += v;
                    m[1] += v * fx * fx;
                    m[2] += v * fy * fy;
                }
        }
}

/* int_0^R Phi(rho) rho^3 drho for Phi = psd_scale (rho^2 + a)^(-11/6), a = 1/L0^2:
 * with s = rho^2 + a the antiderivative is psd_scale (3 s^(1/6) + (3 a / 5) s^(-5/6)). Its two
 * ends nearly cancel when R^2 << a, where the binomial series in eps = R^2 / a is summed. */
static double radial_moment(const sw_screen_spec *s, double R)
{
    const double a = s->inv_L0_sq;
    if (a == 0.0)
        return s->psd_scale * 3.0 * cbrt(R);
    const double eps = R * R / a;
    if (eps >= 0.1)
        return s->psd_scale * (3.0 * pow(a + R * R, 1.0 / 6.0) +
                               0.6 * a * pow(a + R * R, -5.0 / 6.0) - 3.6 * pow(a, 1.0 / 6.0));
    /* 3 (1+e)^(1/6) + 0.6 (1+e)^(-5/6) - 3.6 = sum_j e^j (3 C(1/6, j) + 0.6 C(-5/6, j)). */
    double c1 = 1.0, c2 = 1.0, e = 1.0, g = 0.0;
    for (int j = 1; j < 40; j++) {
        c1 *= (1.0 / 6.0 - (j - 1)) / j;
        c2 *= (-5.0 / 6.0 - (j - 1)) / j;
        e *= eps;
        g += e * (3.0 * c1 + 0.6 * c2);
    }
    return s->psd_scale * pow(a, 1.0 / 6.0) * g;
}

/* int Phi fx^2 over the square [-h, h]^2 around the origin (= the fy^2 moment by symmetry):
 * in polar coordinates, half the full second moment, 4 int_0^(pi/4) radial_moment(h / cos t) dt
 * (Gauss-Legendre). Finite for Kolmogorov too. */
static double centre_moment(const sw_screen_spec *s, double h)
{
    double x[GL_N], w[GL_N];
    gauss_legendre(x, w);
    double sum = 0.0;
    for (int k = 0; k < 2; k++) /* two panels of pi/8 */
        for (int i = 0; i < GL_N; i++) {
            const double t = PI / 16.0 * (2 * k + 1 + x[i]);
            sum += w[i] * PI / 16.0 * radial_moment(s, h / cos(t));
        }
    return 4.0 * sum;
}

static sw_status spec_init(sw_context *ctx, const sw_turbulence *t, int32_t n, double spacing_m,
                           uint64_t seed, uint64_t index, double opd_per_rad, sw_screen_spec *s)
{
    memset(s, 0, sizeof *s);
    s->n = n;
    s->dx = spacing_m;
    s->df = 1.0 / ((double)n * spacing_m);
    s->psd_scale = psd_constant() * pow(t->r0_m, -5.0 / 3.0);
    s->inv_L0_sq = sw_turbulence_is_kolmogorov(t) ? 0.0 : 1.0 / (t->L0_m * t->L0_m);
    s->opd_per_rad = opd_per_rad;
    s->seed = seed;
    s->index = index;
    /* The FFT bins' amplitudes must be finite (absurd r0 / spacing otherwise). */
    const double amp = sqrt(psd(s, s->df * s->df)) * s->df;
    if (!isfinite(s->df) || !isfinite(s->psd_scale) || !isfinite(amp) ||
        !isfinite(amp * opd_per_rad))
        return sw_fail(ctx, SW_EINVAL,
                       "phase screen: r0 = %g m with %d samples of %g m gives amplitudes beyond "
                       "double precision",
                       t->r0_m, (int)n, spacing_m);
    /* FFT bins near the origin, where Phi changes steeply across a bin: the variance is
     * int_cell Phi |f|^2 / |f_c|^2 (the cell's own contribution to the structure function at
     * small separations, 4 pi^2 r^2 int Phi (f.r)^2, is then exact) instead of Phi(f_c) df^2;
     * near_gain is the square root of their ratio (Kolmogorov: 1.056 next to the origin, 1.001
     * at 8 bins). */
    for (int32_t ay = 0; ay <= SW_SCREEN_NEAR; ay++)
        for (int32_t ax = 0; ax <= ay; ax++) {
            double g = 1.0;
            if (ay > 0) {
                double mo[3];
                const double fx = ax * s->df, fy = ay * s->df, f2 = fx * fx + fy * fy;
                cell_moments(s, fx, fy, s->df, mo);
                g = sqrt((mo[1] + mo[2]) / (f2 * psd(s, f2) * s->df * s->df));
            }
            s->near_gain[ay][ax] = g;
            s->near_gain[ax][ay] = g;
        }
    /* Subharmonics: level p splits the central cell of the level above (side df / 3^(p-1))
     * into 3 x 3 cells of side dfp = df / 3^p and draws one term for each of the 8 outer ones.
     * A term carries the cell's whole power M0 = int Phi, at the frequency whose squares are the
     * cell's power-weighted mean squares, fx^2 = Mxx / M0, fy^2 = Myy / M0 (signs of the cell's
     * position; cells on an axis go to mirror-image sides), so that both the variance and the
     * structure function at separations well below 1 / dfp, along x and y, are those of the cell.
     * (Lane et al. put the point value Phi(f) dfp^2 at the cell's centre instead, which
     * under-weights the steep low-frequency spectrum.) */
    double mean = 0.0;
    int32_t c = 0;
    double dfp = s->df;
    for (int p = 1; p <= t->subharmonics; p++) {
        dfp /= 3.0;
        for (int q = -1; q <= 1; q++)
            for (int m = -1; m <= 1; m++) {
                if (m == 0 && q == 0)
                    continue;
                double mo[3];
                cell_moments(s, m * dfp, q * dfp, dfp, mo);
                sw_screen_term *term = &s->terms[c++];
                const double sx = m != 0 ? (double)m : 1.0, sy = q != 0 ? (double)q : 1.0;
                term->fx = sx * sqrt(mo[1] / mo[0]);
                term->fy = sy * sqrt(mo[2] / mo[0]);
                const double a = sqrt(mo[0]);
                const uint64_t k = (uint64_t)(9 * (p - 1) + 3 * (q + 1) + (m + 1));
                double z0, z1;
                sw_rng_normal2(sw_rng_draw(seed, SW_RNG_STREAM_SUBHARMONICS, (index << 32) | k),
                               &z0, &z1);
                term->re = z0 * a;
                term->im = z1 * a;
                mean += term->re * grid_mean(term->fx, n, spacing_m) *
                        grid_mean(term->fy, n, spacing_m);
            }
    }
    /* What is left, the last level's central cell (all of it for Kolmogorov: infinite power,
     * finite second moment), is a random tilt: at separations r << 1 / dfp its structure
     * function is (2 pi r)^2 Mxx, that of a tilt of variance 4 pi^2 Mxx per axis. */
    if (t->subharmonics > 0) {
        const double sigma = 2.0 * PI * sqrt(centre_moment(s, 0.5 * dfp));
        double z0, z1;
        sw_rng_normal2(sw_rng_draw(seed, SW_RNG_STREAM_SUBHARMONICS, (index << 32) | 72u), &z0,
                       &z1);
        s->tilt_x = sigma * z0;
        s->tilt_y = sigma * z1;
    }
    s->nterms = c;
    s->sh_mean = mean;
    return SW_OK;
}

/* The screen of s into out (n * n doubles), as phase times s->opd_per_rad, with FFTW. */
static sw_status screen_cpu(sw_context *ctx, const sw_screen_spec *s, double *out)
{
    const int32_t n = s->n;
    const size_t count = (size_t)n * (size_t)n;
    const int threads = ctx && sw_context_threads(ctx) > 0 ? sw_context_threads(ctx) : 1;
    /* Interleaved (re, im) pairs: the layout of fftw_complex, whichever type fftw3.h picked. */
    double *buf = fftw_malloc(count * 2 * sizeof(double));
    double *tab = malloc((size_t)(s->nterms > 0 ? s->nterms : 1) * (size_t)n * 4 * sizeof(double));
    if (!buf || !tab) {
        fftw_free(buf);
        free(tab);
        return sw_fail(ctx, SW_ENOMEM, "phase screen: cannot allocate %dx%d complex samples",
                       (int)n, (int)n);
    }
    sw_fftw_planner_lock();
    fftw_plan plan = fftw_plan_dft_2d(n, n, (fftw_complex *)buf, (fftw_complex *)buf, FFTW_BACKWARD,
                                      FFTW_ESTIMATE);
    sw_fftw_planner_unlock();
    if (!plan) {
        fftw_free(buf);
        free(tab);
        return sw_fail(ctx, SW_EINTERNAL, "phase screen: FFTW could not plan a %dx%d transform",
                       (int)n, (int)n);
    }

#ifdef SW_HAVE_OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int32_t ky = 0; ky < n; ky++)
        for (int32_t kx = 0; kx < n; kx++) {
            double *c = buf + 2 * ((size_t)ky * (size_t)n + (size_t)kx);
            sw_screen_coefficient(s, kx, ky, &c[0], &c[1]);
        }
    fftw_execute(plan);

    /* Subharmonics, separably: exp(2 pi i (fx u + fy v)) = ex(u) ey(v). tab holds, per term,
     * ex at every column (cos, sin) then ey at every row (cos, sin). */
    const int32_t nt = s->nterms;
    for (int32_t t = 0; t < nt; t++) {
        double *ex = tab + (size_t)t * (size_t)n * 4, *ey = ex + 2 * (size_t)n;
        for (int32_t i = 0; i < n; i++) {
            const double pos = sw_screen_position(s, i);
            ex[2 * i] = cos(2.0 * PI * s->terms[t].fx * pos);
            ex[2 * i + 1] = sin(2.0 * PI * s->terms[t].fx * pos);
            ey[2 * i] = cos(2.0 * PI * s->terms[t].fy * pos);
            ey[2 * i + 1] = sin(2.0 * PI * s->terms[t].fy * pos);
        }
    }
#ifdef SW_HAVE_OPENMP
#pragma omp parallel for num_threads(threads) schedule(static)
#endif
    for (int32_t k = 0; k < n; k++) {
        double d[2 * SW_SCREEN_MAX_TERMS];
        for (int32_t t = 0; t < nt; t++) {
            const double *ey = tab + (size_t)t * (size_t)n * 4 + 2 * (size_t)n;
            const double cr = s->terms[t].re, ci = s->terms[t].im;
            d[2 * t] = cr * ey[2 * k] - ci * ey[2 * k + 1];
            d[2 * t + 1] = cr * ey[2 * k + 1] + ci * ey[2 * k];
        }
        const double ty = s->tilt_y * sw_screen_position(s, k);
        double *row = out + (size_t)k * (size_t)n;
        const double *src = buf + 2 * (size_t)k * (size_t)n;
        for (int32_t i = 0; i < n; i++) {
            double v = src[2 * (size_t)i];
            for (int32_t t = 0; t < nt; t++) {
                const double *ex = tab + (size_t)t * (size_t)n * 4 + 2 * (size_t)i;
                v += d[2 * t] * ex[0] - d[2 * t + 1] * ex[1];
            }
            v += s->tilt_x * sw_screen_position(s, i) + ty;
            row[i] = (v - s->sh_mean) * s->opd_per_rad;
        }
    }

    sw_fftw_planner_lock();
    fftw_destroy_plan(plan);
    sw_fftw_planner_unlock();
    fftw_free(buf);
    free(tab);
    return SW_OK;
}

static sw_status check_screen_args(sw_context *ctx, const sw_turbulence *t, int32_t n, int32_t nmax,
                                   double spacing_m)
{
    sw_status st = sw_turbulence_check(ctx, t);
    if (st != SW_OK)
        return st;
    if (n < SW_PHASE_SCREEN_MIN || n > nmax || n % 2 != 0)
        return sw_fail(ctx, SW_EINVAL, "phase screen: size %d must be even, %d to %d", (int)n,
                       SW_PHASE_SCREEN_MIN, (int)nmax);
    if (!(spacing_m > 0.0) || !isfinite(spacing_m) || !isfinite(spacing_m * 1e6))
        return sw_fail(ctx, SW_EINVAL,
                       "phase screen: sample spacing %g m must be positive and "
                       "finite",
                       spacing_m);
    return SW_OK;
}

sw_status sw_phase_screen(sw_context *ctx, const sw_turbulence *t, int32_t n, double spacing_m,
                          uint64_t seed, uint64_t index, sw_wavefront *out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_phase_screen: out is NULL");
    memset(out, 0, sizeof *out);
    sw_status st = check_screen_args(ctx, t, n, SW_PHASE_SCREEN_MAX, spacing_m);
    if (st != SW_OK)
        return st;
    if (index >= ((uint64_t)1 << 32))
        return sw_fail(ctx, SW_EINVAL, "phase screen: index %llu must be below 2^32",
                       (unsigned long long)index);
    sw_screen_spec *spec = malloc(sizeof *spec);
    if (!spec)
        return sw_fail(ctx, SW_ENOMEM, "phase screen: out of memory");
    st = spec_init(ctx, t, n, spacing_m, seed, index, t->wavelength_um / (2.0 * PI), spec);
    sw_wavefront w;
    if (st == SW_OK)
        st = sw_wavefront_alloc(ctx, n, n, spacing_m * 1e6, &w);
    if (st != SW_OK) {
        free(spec);
        return st;
    }
#ifdef SW_HAVE_CUDA
    if (ctx && ctx->backend == SW_BACKEND_CUDA)
        st = sw_phase_screen_cuda(ctx, spec, w.opd_um);
    else
#endif
        st = screen_cpu(ctx, spec, w.opd_um);
    free(spec);
    if (st != SW_OK) {
        sw_wavefront_free(&w);
        return st;
    }
    *out = w;
    return SW_OK;
}

/* ------------------------------------------------------------------ infinite screen */

struct sw_infinite_screen {
    sw_context *ctx;
    sw_turbulence t;
    int32_t n;
    double dx;
    uint64_t seed;
    double opd_per_rad;
    int32_t nz;     /* stencil points */
    int32_t *z_off; /* stencil: rows back from the new row (1..n) */
    int32_t *z_col; /* stencil: column */
    double *at;     /* A^T, nz x n, row-major */
    double *bm;     /* B, n x n, row-major */
    double *ring;   /* the newest cap rows (phase, radians); row q in slot q % cap */
    int32_t cap;    /* n + 1 */
    int64_t rows;   /* rows made so far (the first n included) */
    double pos_m;   /* distance moved */
    double *z, *b;  /* work: nz stencil values, n normals */
};

/* Row offset and column step of the stencil's rows: 1 and 2 back fully, then 2^k back every
 * 2^(k-1) columns. Returns the number of stencil rows. */
static int stencil_rows(int32_t n, int32_t *off, int32_t *step)
{
    int c = 0;
    off[c] = 1;
    step[c++] = 1;
    off[c] = 2;
    step[c++] = 1;
    for (int32_t o = 4; o <= n; o *= 2) {
        off[c] = o;
        step[c++] = o / 2;
    }
    return c;
}

static double *row_of(const sw_infinite_screen *s, int64_t q)
{
    return s->ring + (size_t)(q % s->cap) * (size_t)s->n;
}

/* Row g from the stencil and fresh normals: X = Z_ref + A^T' W + B b with W = (Z_i - Z_ref for
 * the other stencil points, Z_ref), Z_ref = stencil point 0. */
static void make_row(sw_infinite_screen *s, int64_t g)
{
    const int32_t n = s->n, nz = s->nz;
    const double zref = row_of(s, g - s->z_off[0])[s->z_col[0]];
    for (int32_t z = 1; z < nz; z++)
        s->z[z - 1] = row_of(s, g - s->z_off[z])[s->z_col[z]] - zref;
    s->z[nz - 1] = zref;
    const uint64_t base = (uint64_t)g * (uint64_t)(n / 2);
    for (int32_t j = 0; j < n / 2; j++)
        sw_rng_normal2(sw_rng_draw(s->seed, SW_RNG_STREAM_INFINITE, base + (uint64_t)j),
                       &s->b[2 * j], &s->b[2 * j + 1]);
    double *x = row_of(s, g);
    for (int32_t j = 0; j < n; j++)
        x[j] = zref;
    /* x += A^T' W + B b, as plain loops (O(n nz + n^2), a fraction of a millisecond for n = 256,
     * once per new row): a threaded BLAS call here leaves its threads spinning, which starves the
     * OpenMP loops of a closed-loop simulation that follow every frame (measured: 0.74 ms per
     * frame at n = 264 on 16 cores, most of it waiting) */
    for (int32_t z = 0; z < nz; z++) {
        const double w = s->z[z], *a = s->at + (size_t)z * (size_t)n;
        for (int32_t j = 0; j < n; j++)
            x[j] += a[j] * w;
    }
    for (int32_t j = 0; j < n; j++) {
        const double *bm = s->bm + (size_t)j * (size_t)n;
        double acc = 0.0;
        for (int32_t i = 0; i < n; i++)
            acc += bm[i] * s->b[i];
        x[j] += acc;
    }
}

/* Structure function (rad^2) between samples dk rows and di columns apart, from a lazily filled
 * table. */
static double sf_at(sw_infinite_screen *s, double *table, int32_t dk, int32_t di)
{
    dk = dk < 0 ? -dk : dk;
    di = di < 0 ? -di : di;
    double *c = &table[(size_t)dk * (size_t)s->n + (size_t)di];
    if (isnan(*c))
        *c = sw_turbulence_structure(&s->t, s->dx * hypot((double)dk, (double)di));
    return *c;
}

/*
 * A and B of Assemat et al. (2006) Eq. (6)-(8), in variables that keep every digit: the
 * covariance B(0) ~ 0.086 (L0/r0)^(5/3) rad^2 can be 1e5 times the structure function between
 * neighbouring samples, and Cxx - A Czx computed from B directly would lose those digits. So the
 * stencil values are taken relative to a reference point r (stencil point 0): W = (Z_i - Z_r,
 * Z_r), X~ = X - Z_r, whose covariances are, with D the structure function,
 *     Cov(P - Z_r, Q - Z_r) = (D(P, r) + D(Q, r) - D(P, Q)) / 2,   Cov(P - Z_r, Z_r) = -D(P, r) /
 * 2, Var(Z_r) = B(0), all of the size of D except the one diagonal B(0), which the Cholesky
 * factorisation (placed last) handles without cancellation. Conditioning on W is conditioning on Z
 * (an invertible change of variables): the same A, B, computed accurately.
 */
static sw_status build_matrices(sw_infinite_screen *s)
{
    sw_context *ctx = s->ctx;
    const int32_t n = s->n, nz = s->nz;
    const size_t tcount = (size_t)(n + 1) * (size_t)n;
    double *table = malloc(tcount * sizeof *table);
    double *cww = malloc((size_t)nz * (size_t)nz * sizeof *cww);
    double *cwx = malloc((size_t)nz * (size_t)n * sizeof *cwx);
    double *cxx = malloc((size_t)n * (size_t)n * sizeof *cxx);
    double *w = malloc((size_t)n * sizeof *w);
    sw_status st = SW_OK;
    if (!table || !cww || !cwx || !cxx || !w) {
        st = sw_fail(ctx, SW_ENOMEM, "infinite screen: out of memory for %dx%d covariances",
                     (int)nz, (int)nz);
        goto done;
    }
    for (size_t i = 0; i < tcount; i++)
        table[i] = NAN;
    const int32_t ro = s->z_off[0], rc = s->z_col[0];
    const double b0 = sw_turbulence_covariance(&s->t, 0.0);
    /* W index a < nz - 1 is stencil point a + 1 relative to r; index nz - 1 is Z_r. */
    for (int32_t a = 0; a < nz - 1; a++) {
        const int32_t ao = s->z_off[a + 1], ac = s->z_col[a + 1];
        const double dar = sf_at(s, table, ao - ro, ac - rc);
        for (int32_t b = 0; b < nz - 1; b++) {
            const int32_t bo = s->z_off[b + 1], bc = s->z_col[b + 1];
            cww[(size_t)a * nz + b] =
                0.5 * (dar + sf_at(s, table, bo - ro, bc - rc) - sf_at(s, table, ao - bo, ac - bc));
        }
        cww[(size_t)a * nz + nz - 1] = -0.5 * dar;
        cww[(size_t)(nz - 1) * nz + a] = -0.5 * dar;
        for (int32_t j = 0; j < n; j++)
            cwx[(size_t)a * n + j] =
                0.5 * (dar + sf_at(s, table, ro, j - rc) - sf_at(s, table, ao, ac - j));
    }
    cww[(size_t)(nz - 1) * nz + nz - 1] = b0;
    for (int32_t j = 0; j < n; j++)
        cwx[(size_t)(nz - 1) * n + j] = -0.5 * sf_at(s, table, ro, j - rc);
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = 0; j < n; j++)
            cxx[(size_t)i * n + j] =
                0.5 * (sf_at(s, table, ro, i - rc) + sf_at(s, table, ro, j - rc) -
                       sf_at(s, table, 0, i - j));
    memcpy(s->at, cwx, (size_t)nz * (size_t)n * sizeof *cwx);

    /* A^T = Cww^-1 Cwx by Cholesky. Should rounding leave Cww numerically indefinite, a small
     * diagonal (1e-12 of the mean increment variance, then more) restores it. */
    double scale = 0.0;
    for (int32_t a = 0; a < nz - 1; a++)
        scale += cww[(size_t)a * nz + a];
    scale /= (nz > 1 ? nz - 1 : 1);
    double jitter = 0.0;
    lapack_int info = 0;
    double *chol = malloc((size_t)nz * (size_t)nz * sizeof *chol);
    if (!chol) {
        st = sw_fail(ctx, SW_ENOMEM, "infinite screen: out of memory");
        goto done;
    }
    for (int attempt = 0; attempt < 6; attempt++) {
        memcpy(chol, cww, (size_t)nz * (size_t)nz * sizeof *chol);
        for (int32_t a = 0; a < nz - 1; a++)
            chol[(size_t)a * nz + a] += jitter;
        info = LAPACKE_dpotrf(LAPACK_ROW_MAJOR, 'L', nz, chol, nz);
        if (info == 0)
            break;
        jitter = jitter == 0.0 ? 1e-12 * scale : jitter * 100.0;
    }
    if (info == 0 && jitter > 0.0)
        sw_log(ctx, SW_LOG_DEBUG,
               "infinite screen: stencil covariance regularised by %g rad^2 (%g of its scale)",
               jitter, jitter / scale);
    if (info == 0)
        info = LAPACKE_dpotrs(LAPACK_ROW_MAJOR, 'L', nz, n, chol, nz, s->at, n);
    free(chol);
    if (info != 0) {
        st = sw_fail(ctx, SW_EINTERNAL,
                     "infinite screen: the stencil covariance (%d points) cannot be factored "
                     "(LAPACK info %d)",
                     (int)nz, (int)info);
        goto done;
    }
    /* B B^T = Cxx - Cwx^T A^T, symmetrised; B = U sqrt(max(lambda, 0)) from its eigenvectors
     * (rounding may leave tiny negative eigenvalues, which are dropped). */
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, n, nz, -1.0, cwx, n, s->at, n, 1.0, cxx,
                n);
    for (int32_t i = 0; i < n; i++)
        for (int32_t j = i + 1; j < n; j++) {
            const double m = 0.5 * (cxx[(size_t)i * n + j] + cxx[(size_t)j * n + i]);
            cxx[(size_t)i * n + j] = m;
            cxx[(size_t)j * n + i] = m;
        }
    info = LAPACKE_dsyevd(LAPACK_ROW_MAJOR, 'V', 'U', n, cxx, n, w);
    if (info != 0) {
        st = sw_fail(ctx, SW_EINTERNAL,
                     "infinite screen: eigen-decomposition of the conditional covariance failed "
                     "(LAPACK info %d)",
                     (int)info);
        goto done;
    }
    for (int32_t k = 0; k < n; k++) {
        const double sq = w[k] > 0.0 ? sqrt(w[k]) : 0.0;
        for (int32_t i = 0; i < n; i++)
            s->bm[(size_t)i * n + k] = cxx[(size_t)i * n + k] * sq;
    }
done:
    free(table);
    free(cww);
    free(cwx);
    free(cxx);
    free(w);
    return st;
}

sw_status sw_infinite_screen_create(sw_context *ctx, const sw_turbulence *t, int32_t n,
                                    double spacing_m, uint64_t seed, sw_infinite_screen **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_infinite_screen_create: out is NULL");
    *out = NULL;
    sw_status st = check_screen_args(ctx, t, n, SW_INFINITE_SCREEN_MAX, spacing_m);
    if (st != SW_OK)
        return st;
    if (sw_turbulence_is_kolmogorov(t))
        return sw_fail(ctx, SW_EINVAL,
                       "infinite screen: needs a finite outer scale L0 (the phase covariance of "
                       "Kolmogorov turbulence is infinite)");
    if (!isfinite(sw_turbulence_covariance(t, 0.0)))
        return sw_fail(ctx, SW_EINVAL,
                       "infinite screen: L0 / r0 = %g gives a phase variance beyond double "
                       "precision",
                       t->L0_m / t->r0_m);

    sw_infinite_screen *s = calloc(1, sizeof *s);
    if (!s)
        return sw_fail(ctx, SW_ENOMEM, "infinite screen: out of memory");
    s->ctx = ctx;
    s->t = *t;
    s->n = n;
    s->dx = spacing_m;
    s->seed = seed;
    s->opd_per_rad = t->wavelength_um / (2.0 * PI);
    s->cap = n + 1;

    int32_t off[40], step[40];
    const int nrows = stencil_rows(n, off, step);
    int32_t nz = 0;
    for (int r = 0; r < nrows; r++)
        nz += (n - 1) / step[r] + 1 + ((n - 1) % step[r] != 0);
    s->nz = nz;
    s->z_off = malloc((size_t)nz * sizeof *s->z_off);
    s->z_col = malloc((size_t)nz * sizeof *s->z_col);
    s->at = malloc((size_t)nz * (size_t)n * sizeof *s->at);
    s->bm = malloc((size_t)n * (size_t)n * sizeof *s->bm);
    s->ring = malloc((size_t)s->cap * (size_t)n * sizeof *s->ring);
    s->z = malloc((size_t)nz * sizeof *s->z);
    s->b = malloc((size_t)n * sizeof *s->b);
    /* The first n rows are the central n x n of an FFT screen m n wide, m = 4 (3 or 2 for
     * n > 512, so that m n <= 2048): an FFT screen is periodic, and over a square of its own
     * size its piston-removed variance is 9 % low (L0 = 2 n; 0.996 of theory at m = 3, 0.997 at
     * m = 4: the table in turbulence.h). */
    const int32_t wide = n * (n <= 512 ? 4 : n <= 682 ? 3 : 2);
    sw_screen_spec *spec = malloc(sizeof *spec);
    double *first = malloc((size_t)wide * (size_t)wide * sizeof *first);
    if (!s->z_off || !s->z_col || !s->at || !s->bm || !s->ring || !s->z || !s->b || !spec ||
        !first) {
        free(spec);
        free(first);
        sw_infinite_screen_destroy(s);
        return sw_fail(ctx, SW_ENOMEM, "infinite screen: out of memory for n = %d", (int)n);
    }
    int32_t c = 0;
    for (int r = 0; r < nrows; r++) {
        for (int32_t j = 0; j < n; j += step[r]) {
            s->z_off[c] = off[r];
            s->z_col[c++] = j;
        }
        if ((n - 1) % step[r] != 0) {
            s->z_off[c] = off[r];
            s->z_col[c++] = n - 1;
        }
    }

    st = build_matrices(s);
    /* The first n rows: the centre of the wide FFT screen, in radians; window row k at position
     * 0 shows row n-1-k. */
    if (st == SW_OK)
        st = spec_init(ctx, t, wide, spacing_m, seed, 0, 1.0, spec);
    if (st == SW_OK)
        st = screen_cpu(ctx, spec, first);
    const size_t o = (size_t)(wide - n) / 2;
    if (st == SW_OK)
        for (int32_t q = 0; q < n; q++)
            memcpy(row_of(s, q), first + (o + (size_t)(n - 1 - q)) * (size_t)wide + o,
                   (size_t)n * sizeof *first);
    free(spec);
    free(first);
    if (st != SW_OK) {
        sw_infinite_screen_destroy(s);
        return st;
    }
    s->rows = n;
    *out = s;
    return SW_OK;
}

/* The position in rows, snapped to a whole row within 1e-9 (so that distances split differently
 * between calls give the same rows). */
static double position_rows(const sw_infinite_screen *s)
{
    const double p = s->pos_m / s->dx;
    const double r = nearbyint(p);
    return fabs(p - r) < 1e-9 ? r : p;
}

sw_status sw_infinite_screen_advance(sw_infinite_screen *s, double distance_m)
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "sw_infinite_screen_advance: screen is NULL");
    if (!(distance_m >= 0.0) || !isfinite(distance_m))
        return sw_fail(s->ctx, SW_EINVAL,
                       "infinite screen: distance %g m must be finite and not negative",
                       distance_m);
    if (distance_m / s->dx > 1e9)
        return sw_fail(s->ctx, SW_EINVAL,
                       "infinite screen: distance %g m is %g samples; at most 1e9 per call",
                       distance_m, distance_m / s->dx);
    s->pos_m += distance_m;
    const double p = position_rows(s);
    const double q0 = floor(p);
    const int64_t need = (int64_t)q0 + s->n + (p > q0 ? 1 : 0);
    while (s->rows < need)
        make_row(s, s->rows++);
    return SW_OK;
}

sw_status sw_infinite_screen_window(sw_infinite_screen *s, sw_wavefront *out)
{
    if (!s || !out)
        return sw_fail(s ? s->ctx : NULL, SW_EINVAL, "sw_infinite_screen_window: %s is NULL",
                       s ? "out" : "screen");
    const int32_t n = s->n;
    const double spacing_um = s->dx * 1e6;
    if (!(out->opd_um && out->nu == n && out->nv == n && out->spacing_um == spacing_um)) {
        sw_wavefront_free(out);
        sw_status st = sw_wavefront_alloc(s->ctx, n, n, spacing_um, out);
        if (st != SW_OK)
            return st;
    }
    out->u0_um = -0.5 * (double)(n - 1) * spacing_um;
    out->v0_um = out->u0_um;
    const double p = position_rows(s);
    const double q0 = floor(p), frac = p - q0;
    for (int32_t k = 0; k < n; k++) {
        const int64_t q = (int64_t)q0 + n - 1 - k;
        const double *r0 = row_of(s, q);
        double *dst = out->opd_um + (size_t)k * (size_t)n;
        if (frac == 0.0) {
            for (int32_t i = 0; i < n; i++)
                dst[i] = r0[i] * s->opd_per_rad;
        } else {
            const double *r1 = row_of(s, q + 1);
            for (int32_t i = 0; i < n; i++)
                dst[i] = ((1.0 - frac) * r0[i] + frac * r1[i]) * s->opd_per_rad;
        }
    }
    return SW_OK;
}

int64_t sw_infinite_screen_rows_added(const sw_infinite_screen *s)
{
    return s ? s->rows - s->n : 0;
}

double sw_infinite_screen_position(const sw_infinite_screen *s)
{
    return s ? s->pos_m : 0.0;
}

void sw_infinite_screen_destroy(sw_infinite_screen *s)
{
    if (!s)
        return;
    free(s->z_off);
    free(s->z_col);
    free(s->at);
    free(s->bm);
    free(s->ring);
    free(s->z);
    free(s->b);
    free(s);
}
