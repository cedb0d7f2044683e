/*
 * Turbulence against theory over a pupil (turbulence.h): sw_turbulence_pupil_variance against
 * Noll's Kolmogorov value and, for von Karman, against an independent integral of the phase PSD
 * times the piston filter 1 - [2 J1(pi f D) / (pi f D)]^2; then the screens' statistics where a
 * pupil sees them: the mean piston-removed variance over square and circular pupils and the mean
 * structure function from one sample to the pupil's diameter, over many independent FFT screens
 * and infinite-screen windows, against theory for the configured r0, L0 and D.
 *
 * Tolerances. The piston-removed variance of one screen scatters by ~45 % (it is carried by a
 * few large modes), so each Monte Carlo check averages enough independent pupils for a standard
 * error of about 1 % (asserted, so that the test keeps its power), accepts a ratio to theory
 * within TOL = 3 %, and asserts that the same data scaled by 5 % either way would fall outside
 * it: a screen generator whose variance were 5 % off fails. The methods' own expected biases are
 * below 0.6 % here (computed exactly for the FFT screens below: 0.9946 square, 0.9940 circle;
 * sw_phase_screen's table).
 */
#define _XOPEN_SOURCE 700 /* j1 */

#include "testutil.h"

#include "spotwave/turbulence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI  3.14159265358979323846
#define TOL 0.03  /* accepted |measured / theory - 1| */
#define SE  0.012 /* largest standard error (relative) a check may have */

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    /* one thread: the screens are small, and with two on a busy machine most of the time goes
     * to OpenMP's threads waiting for each other */
    ctx = sw_test_cpu_context(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(ctx);
    return 0;
}

static void assert_rel(double got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * fabs(want)))
        fail_msg("%.17g is not within %g (relative) of %.17g", got, tol, want);
}

static sw_turbulence turb(double r0, double L0)
{
    sw_turbulence t;
    sw_turbulence_default(&t);
    t.r0_m = r0;
    t.L0_m = L0;
    return t;
}

/* ------------------------------------------------------------------ theory */

/* Piston-removed variance over a circle of diameter D from the phase PSD,
 *     sigma^2 = int Phi(f) [1 - (2 J1(x) / x)^2] d^2f,  x = pi f D,
 *     Phi(f) = A r0^(-5/3) (f^2 + 1/L0^2)^(-11/6),  A = Gamma(11/6)^2 / (2 pi^(11/3))
 *     (24/5 Gamma(6/5))^(5/6)
 * (Noll 1976 Eq. 26 with the piston term of the aperture's transform removed), i.e.
 * 2 pi int_0^inf f Phi(f) F(pi f D) df, in f = s^3 (smooth at 0 for Kolmogorov, whose integrand
 * goes as f^(-2/3)) by Simpson up to x = 500, plus the tail, where the filter is 1 to 2e-8.
 * J1 is the C library's (POSIX). */
/* The piston filter 1 - (2 J1(x) / x)^2; its series x^2 / 4 - 5 x^4 / 192 below x = 0.01,
 * where the difference would lose every digit. */
static double piston(double x)
{
    if (x < 0.01)
        return x * x / 4 * (1 - 5 * x * x / 48);
    const double j = 2 * j1(x) / x;
    return 1 - j * j;
}

static double piston_free_by_psd(double r0, double L0, double D)
{
    const double A =
        pow(tgamma(11.0 / 6.0), 2) / (2 * pow(PI, 11.0 / 3.0)) * pow(4.8 * tgamma(1.2), 5.0 / 6.0);
    const double a = L0 > 0 && isfinite(L0) ? 1.0 / (L0 * L0) : 0.0;
    const double fmax = 500.0 / (PI * D), smax = cbrt(fmax);
    const int m = 20000; /* Simpson intervals */
    const double h = smax / m;
    double sum = 0.0;
    for (int k = 1; k <= m; k++) {
        const double s = k * h, f = s * s * s, x = PI * f * D;
        const double g = f * A * pow(r0, -5.0 / 3.0) * pow(f * f + a, -11.0 / 6.0) * piston(x);
        sum += g * 3 * s * s * (k == m ? 1 : (k % 2 ? 4 : 2));
    }
    /* s = 0: for Kolmogorov f Phi F 3 s^2 -> A r0^(-5/3) (pi D)^2 / 4 * 3 (the limit of
     * f^(1-11/3) (x^2/4) 3 f^(2/3)); for von Karman 0 */
    if (a == 0.0)
        sum += A * pow(r0, -5.0 / 3.0) * PI * PI * D * D / 4 * 3;
    const double tail = A * pow(r0, -5.0 / 3.0) * 0.6 * pow(fmax * fmax + a, -5.0 / 6.0);
    return 2 * PI * (sum * h / 3.0 + tail);
}

static void pupil_variance_theory(void **state)
{
    (void)state;
    sw_turbulence kol = turb(0.15, INFINITY);
    /* Kolmogorov: 1.0324 (D/r0)^(5/3) for the circle (the mean of 6.8839 (r/r0)^(5/3) / 2 over
     * the disc's distance density, at 25 digits: 1.03242163946548); Noll's Table IV, 1.0299,
     * within 0.3 %; the square 1.31032150809453 (the same by a 2-D integral) */
    const double dr = pow(12.0 / 0.15, 5.0 / 3.0);
    assert_rel(sw_turbulence_pupil_variance(&kol, 12.0, 0), 1.03242163946548 * dr, 1e-9);
    assert_rel(sw_turbulence_pupil_variance(&kol, 12.0, 0), 1.0299 * dr, 3e-3);
    assert_rel(sw_turbulence_pupil_variance(&kol, 12.0, 1), 1.31032150809453 * dr, 1e-9);
    assert_rel(sw_turbulence_pupil_variance(&kol, 3.0, 0),
               sw_turbulence_pupil_variance(&kol, 12.0, 0) * pow(0.25, 5.0 / 3.0), 1e-12);
    /* against the PSD times the piston filter: Kolmogorov and von Karman, several L0 / D */
    assert_rel(piston_free_by_psd(0.15, INFINITY, 12.0), 1.03242163946548 * dr, 2e-4);
    const double L0s[] = {3.0, 25.0, 100.0, 1000.0};
    double last = 0.0;
    for (int i = 0; i < 4; i++) {
        sw_turbulence vk = turb(0.15, L0s[i]);
        const double v = sw_turbulence_pupil_variance(&vk, 12.0, 0);
        assert_rel(v, piston_free_by_psd(0.15, L0s[i], 12.0), 2e-4);
        assert_true(v > last && v < sw_turbulence_pupil_variance(&kol, 12.0, 0));
        last = v;
    }
    /* the loop's default: D = 12 m, r0 = 0.15 m, L0 = 25 m: 0.1629 and 0.1783 (D/r0)^(5/3) */
    sw_turbulence loop = turb(0.15, 25.0);
    assert_rel(sw_turbulence_pupil_variance(&loop, 12.0, 0) / dr, 0.16290, 1e-4);
    assert_rel(sw_turbulence_pupil_variance(&loop, 12.0, 1) / dr, 0.17828, 1e-4);
    assert_near(sw_turbulence_pupil_variance(&loop, 0.0, 0), 0.0, 0);
    assert_true(isnan(sw_turbulence_pupil_variance(&loop, -1.0, 0)));
    assert_true(isnan(sw_turbulence_pupil_variance(&loop, INFINITY, 0)));
    assert_true(isnan(sw_turbulence_pupil_variance(&loop, 1.0, 2)));
    assert_true(isnan(sw_turbulence_pupil_variance(NULL, 1.0, 0)));
}

/* ------------------------------------------------------------------ pupils on screens */

/* A pupil of p x p samples: the square, or the samples whose centres are inside the circle of
 * diameter p samples. */
typedef struct pupil {
    int p, square;
    uint8_t *in;
    int64_t count;
} pupil;

static pupil make_pupil(int p, int square)
{
    pupil q = {p, square, malloc((size_t)p * p), 0};
    assert_non_null(q.in);
    for (int k = 0; k < p; k++)
        for (int i = 0; i < p; i++) {
            const double u = i - 0.5 * (p - 1), v = k - 0.5 * (p - 1);
            const int in = square || u * u + v * v < 0.25 * p * p;
            q.in[k * p + i] = (uint8_t)in;
            q.count += in;
        }
    return q;
}

/* The expected piston-removed variance over the pupil's samples, spacing dx:
 * sum_jk D(|x_j - x_k|) / (2 N^2), the pairs counted by separation. */
static double pupil_theory(const sw_turbulence *t, const pupil *q, double dx)
{
    const int p = q->p, w = 2 * p - 1;
    double *pairs = calloc((size_t)w * w, sizeof *pairs);
    assert_non_null(pairs);
    for (int k = 0; k < p; k++)
        for (int i = 0; i < p; i++)
            if (q->in[k * p + i])
                for (int l = 0; l < p; l++)
                    for (int j = 0; j < p; j++)
                        if (q->in[l * p + j])
                            pairs[(size_t)(l - k + p - 1) * w + (j - i + p - 1)] += 1;
    double s = 0.0;
    for (int a = 0; a < w; a++)
        for (int b = 0; b < w; b++)
            if (pairs[(size_t)a * w + b] > 0)
                s += pairs[(size_t)a * w + b] *
                     sw_turbulence_structure(t, dx * hypot(a - (p - 1), b - (p - 1)));
    free(pairs);
    return s / (2.0 * (double)q->count * (double)q->count);
}

/* Piston-removed variance (rad^2) over the pupil with its corner at sample (i0, k0) of w. */
static double pupil_variance(const sw_wavefront *w, double rad_per_um, const pupil *q, int i0,
                             int k0)
{
    double s1 = 0.0, s2 = 0.0;
    for (int k = 0; k < q->p; k++)
        for (int i = 0; i < q->p; i++)
            if (q->in[k * q->p + i]) {
                const double v = w->opd_um[(size_t)(k0 + k) * w->nu + i0 + i] * rad_per_um;
                s1 += v;
                s2 += v * v;
            }
    const double m = s1 / q->count;
    return s2 / q->count - m * m;
}

#define NLAGS 6

/* Mean square phase difference at each lag along x (dx) and along y (dy) over the whole window,
 * rad^2. */
static void structure(const sw_wavefront *w, double rad_per_um, const int *lags, double *dx,
                      double *dy)
{
    const int n = w->nu;
    for (int l = 0; l < NLAGS; l++) {
        const int L = lags[l];
        double sx = 0, sy = 0;
        for (int k = 0; k < n; k++)
            for (int i = 0; i + L < n; i++) {
                const double a = w->opd_um[k * n + i + L] - w->opd_um[k * n + i];
                const double b = w->opd_um[(i + L) * n + k] - w->opd_um[i * n + k];
                sx += a * a;
                sy += b * b;
            }
        const double c = (double)n * (n - L) / (rad_per_um * rad_per_um);
        dx[l] = sx / c;
        dy[l] = sy / c;
    }
}

/* Running mean and standard error of independent samples. */
typedef struct stat {
    double s1, s2;
    int n;
} stat;

static void stat_add(stat *s, double v)
{
    s->s1 += v;
    s->s2 += v * v;
    s->n++;
}

static double stat_mean(const stat *s)
{
    return s->s1 / s->n;
}

static double stat_se(const stat *s)
{
    const double m = stat_mean(s);
    return sqrt(fmax(s->s2 / s->n - m * m, 0.0) / (s->n - 1));
}

/* The mean over theory within tol, its standard error below se_max; with power, a 5 % error
 * detectable too: the ratio scaled by 1.05 or 1 / 1.05 falls outside tol. */
static void check_ratio_tol(const char *what, const stat *s, double theory, double tol,
                            double se_max, int power)
{
    const double r = stat_mean(s) / theory, se = stat_se(s) / theory;
    printf("%-48s measured / theory %.4f +- %.4f (%d samples)\n", what, r, se, s->n);
    if (!(fabs(r - 1) <= tol))
        fail_msg("%s: measured / theory = %.4f +- %.4f, outside 1 +- %g", what, r, se, tol);
    if (!(se <= se_max))
        fail_msg("%s: standard error %.4f above %g: too few samples for the test's power", what, se,
                 se_max);
    if (power)
        assert_true(fabs(r * 1.05 - 1) > tol && fabs(r / 1.05 - 1) > tol);
}

static void check_ratio(const char *what, const stat *s, double theory)
{
    check_ratio_tol(what, s, theory, TOL, SE, 1);
}

/*
 * FFT screens: 128 x 128 samples, four pupils of 32 samples (D = 0.64 m at 0.02 m) on each, at
 * the centres of its quadrants (an FFT screen is statistically homogeneous, so any placement is
 * the same, and the four are nearly independent at this L0); r0 = 4 samples, L0 = 2 D (the loop's
 * 25 m for 12 m). The method's expected ratio here: 0.995 (computed from its construction).
 */
static void fft_screens_against_theory(void **state)
{
    (void)state;
    const int n = 128, p = 32, screens = 1000;
    const double dx = 0.02;
    sw_turbulence t = turb(4 * dx, 2 * p * dx);
    const double rad_per_um = 2 * PI / t.wavelength_um;
    pupil sq = make_pupil(p, 1), ci = make_pupil(p, 0);
    static const int lags[NLAGS] = {1, 2, 4, 8, 16, 32};
    stat vs = {0}, vc = {0}, d[NLAGS] = {{0}};
    for (int s = 0; s < screens; s++) {
        sw_wavefront w;
        if (sw_phase_screen(ctx, &t, n, dx, 31, (uint64_t)s, &w) != SW_OK)
            fail_msg("sw_phase_screen: %s", sw_context_error(ctx));
        double a = 0, b = 0, dxs[NLAGS], dys[NLAGS];
        for (int c = 0; c < 4; c++) {
            const int i0 = (c & 1) * n / 2 + n / 4 - p / 2, k0 = (c >> 1) * n / 2 + n / 4 - p / 2;
            a += pupil_variance(&w, rad_per_um, &sq, i0, k0) / 4;
            b += pupil_variance(&w, rad_per_um, &ci, i0, k0) / 4;
        }
        stat_add(&vs, a);
        stat_add(&vc, b);
        structure(&w, rad_per_um, lags, dxs, dys);
        for (int l = 0; l < NLAGS; l++)
            stat_add(&d[l], 0.5 * (dxs[l] + dys[l]));
        sw_wavefront_free(&w);
    }
    const double ts = pupil_theory(&t, &sq, dx), tc = pupil_theory(&t, &ci, dx);
    /* the sampled pupils' theory is the continuous one to 0.1 % (square) and 1 % (circle) */
    assert_rel(ts, sw_turbulence_pupil_variance(&t, p * dx, 1), 2e-3);
    assert_rel(tc, sw_turbulence_pupil_variance(&t, p * dx, 0), 1.5e-2);
    for (int l = 0; l < NLAGS; l++)
        printf("FFT screens, D(%d samples) / theory %.4f\n", lags[l],
               stat_mean(&d[l]) / sw_turbulence_structure(&t, lags[l] * dx));
    check_ratio("FFT screens, square pupil, variance", &vs, ts);
    check_ratio("FFT screens, circular pupil, variance", &vc, tc);
    for (int l = 2; l < NLAGS; l++) { /* 1 sample: 0.92, the frequencies above Nyquist */
        char what[64];
        snprintf(what, sizeof what, "FFT screens, D(%d samples)", lags[l]);
        check_ratio(what, &d[l], sw_turbulence_structure(&t, lags[l] * dx));
    }
    free(sq.in);
    free(ci.in);
}

/*
 * Infinite screens as the closed-loop simulator uses them: a window of n = 36 samples, the pupil
 * its central 32 (square and circle), r0 = 4 samples, L0 = 2 D. Two populations, each checked
 * against theory: the first window of each seed (the centre of the wide FFT screen the rows
 * start from) and, after 4 n new rows, 6 windows 2 n rows apart (the extruded rows; their mean
 * per seed is one sample, so that correlations between a seed's windows cannot hide in the
 * standard error). Structure function along x (within rows) and along y (across rows, the
 * direction of motion) at 4 to 32 samples in the later windows.
 */
static void infinite_screens_against_theory(void **state)
{
    (void)state;
    const int n = 36, p = 32, o = (n - p) / 2, seeds = 400, later = 6;
    const double dx = 0.02;
    sw_turbulence t = turb(4 * dx, 2 * p * dx);
    const double rad_per_um = 2 * PI / t.wavelength_um;
    pupil sq = make_pupil(p, 1), ci = make_pupil(p, 0);
    static const int lags[NLAGS] = {1, 2, 4, 8, 16, 32};
    stat fs = {0}, fc = {0}, ls = {0}, lc = {0}, fd[NLAGS] = {{0}}, dxs[NLAGS] = {{0}},
         dys[NLAGS] = {{0}};
    sw_wavefront w = {0, 0, 0, 0, 0, NULL};
    for (int seed = 0; seed < seeds; seed++) {
        sw_infinite_screen *s = NULL;
        if (sw_infinite_screen_create(ctx, &t, n, dx, 500 + (uint64_t)seed, &s) != SW_OK)
            fail_msg("sw_infinite_screen_create: %s", sw_context_error(ctx));
        assert_int_equal(sw_infinite_screen_window(s, &w), SW_OK);
        stat_add(&fs, pupil_variance(&w, rad_per_um, &sq, o, o));
        stat_add(&fc, pupil_variance(&w, rad_per_um, &ci, o, o));
        double fdx[NLAGS], fdy[NLAGS];
        structure(&w, rad_per_um, lags, fdx, fdy);
        for (int l = 0; l < NLAGS; l++)
            stat_add(&fd[l], 0.5 * (fdx[l] + fdy[l]));
        assert_int_equal(sw_infinite_screen_advance(s, 4 * n * dx), SW_OK);
        double a = 0, b = 0, sx[NLAGS] = {0}, sy[NLAGS] = {0};
        for (int k = 0; k < later; k++) {
            assert_int_equal(sw_infinite_screen_advance(s, 2 * n * dx), SW_OK);
            assert_int_equal(sw_infinite_screen_window(s, &w), SW_OK);
            a += pupil_variance(&w, rad_per_um, &sq, o, o) / later;
            b += pupil_variance(&w, rad_per_um, &ci, o, o) / later;
            double ddx[NLAGS], ddy[NLAGS];
            structure(&w, rad_per_um, lags, ddx, ddy);
            for (int l = 0; l < NLAGS; l++) {
                sx[l] += ddx[l] / later;
                sy[l] += ddy[l] / later;
            }
        }
        stat_add(&ls, a);
        stat_add(&lc, b);
        for (int l = 0; l < NLAGS; l++) {
            stat_add(&dxs[l], sx[l]);
            stat_add(&dys[l], sy[l]);
        }
        sw_infinite_screen_destroy(s);
    }
    sw_wavefront_free(&w);
    const double ts = pupil_theory(&t, &sq, dx), tc = pupil_theory(&t, &ci, dx);
    for (int l = 0; l < NLAGS; l++) {
        const double th = sw_turbulence_structure(&t, lags[l] * dx);
        printf("infinite screen, D(%d samples) / theory: along x %.4f, along y %.4f; first "
               "window %.4f +- %.4f\n",
               lags[l], stat_mean(&dxs[l]) / th, stat_mean(&dys[l]) / th, stat_mean(&fd[l]) / th,
               stat_se(&fd[l]) / th);
    }
    /* The first windows: one pupil per seed, a standard error of 2.5 %, so 6 %; and their
     * structure function at 16 and 32 samples within 10 %, which tells the wide FFT screen they
     * come from from one of the window's own size (periodic over 36 samples, D(32 samples) is
     * 0.53 of theory, measured with these seeds; the pupil variance 0.95). */
    check_ratio_tol("infinite screen, first window, square pupil", &fs, ts, 0.06, 0.03, 0);
    check_ratio_tol("infinite screen, first window, circular pupil", &fc, tc, 0.06, 0.03, 0);
    for (int l = NLAGS - 2; l < NLAGS; l++) {
        char what[64];
        snprintf(what, sizeof what, "infinite screen, first window, D(%d samples)", lags[l]);
        check_ratio_tol(what, &fd[l], sw_turbulence_structure(&t, lags[l] * dx), 0.10, 0.04, 0);
    }
    check_ratio("infinite screen, later windows, square pupil", &ls, ts);
    check_ratio("infinite screen, later windows, circular pupil", &lc, tc);
    for (int l = 2; l < NLAGS - 1; l++) { /* 32 samples: 4 pairs a row, too few */
        char what[64];
        const double th = sw_turbulence_structure(&t, lags[l] * dx);
        snprintf(what, sizeof what, "infinite screen, D(%d samples) along x", lags[l]);
        check_ratio(what, &dxs[l], th);
        snprintf(what, sizeof what, "infinite screen, D(%d samples) along y", lags[l]);
        check_ratio(what, &dys[l], th);
    }
    free(sq.in);
    free(ci.in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(pupil_variance_theory),
        cmocka_unit_test(fft_screens_against_theory),
        cmocka_unit_test(infinite_screens_against_theory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
