/*
 * Turbulence (turbulence.h, turbulence.c): K_nu against references computed by high-resolution
 * quadrature of its integral (mpmath, 25 digits), the closed form of K_1/2, the recurrence and the
 * small-x limit; the structure functions against an independent numerical Hankel integral of the
 * PSD; FFT screens' structure function averaged over many screens against theory (Kolmogorov
 * and von Karman), and the subharmonics' effect; zero mean, achromatic OPD, reproducibility;
 * the infinite screen's statistics, continuity at the join and under fractional steps,
 * reproducibility; bad input.
 */
#include "testutil.h"

#include "spotwave/rng.h"
#include "spotwave/turbulence.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = sw_test_cpu_context(2);
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

static void assert_message_has(const char *words)
{
    const char *msg = sw_context_error(ctx);
    if (!strstr(msg, words))
        fail_msg("message \"%s\" lacks \"%s\"", msg, words);
}

static sw_turbulence turb(double r0, double L0, int32_t sub)
{
    sw_turbulence t;
    sw_turbulence_default(&t);
    t.r0_m = r0;
    t.L0_m = L0;
    t.subharmonics = sub;
    return t;
}

/* ------------------------------------------------------------------ K_nu */

static void bessel_k_references(void **state)
{
    (void)state;
    /* K_5/6(x) = int_0^inf exp(-x cosh t) cosh(5t/6) dt by mpmath.quad at 25 digits. */
    static const double ref[][2] = {
        {1e-6, 100563.491781265936},      {0.001, 318.004233208175927},
        {0.1, 6.67869207679339168},       {0.5, 1.39372110760149308},
        {1.0, 0.540530087888318567},      {2.0, 0.131408552263666351},
        {5.0, 0.00393331391030552542},    {20.0, 5.83936189402808991e-10},
        {100.0, 4.67274482968218027e-45},
    };
    for (size_t i = 0; i < sizeof ref / sizeof ref[0]; i++)
        assert_rel(sw_bessel_k(5.0 / 6.0, ref[i][0]), ref[i][1], 2e-14);
    /* K_1/2(x) = sqrt(pi / (2x)) exp(-x) */
    for (double x = 1e-7; x < 600; x *= 3.7)
        assert_rel(sw_bessel_k(0.5, x), sqrt(PI / (2 * x)) * exp(-x), 2e-14);
    /* K_-nu = K_nu; K_(nu+1) = K_(nu-1) + 2 nu / x K_nu at nu = 5/6 */
    for (double x = 0.01; x < 50; x *= 2.3) {
        assert_rel(sw_bessel_k(-5.0 / 6.0, x), sw_bessel_k(5.0 / 6.0, x), 1e-15);
        assert_rel(sw_bessel_k(11.0 / 6.0, x),
                   sw_bessel_k(1.0 / 6.0, x) + 5.0 / 3.0 / x * sw_bessel_k(5.0 / 6.0, x), 1e-13);
    }
    /* small x: K_nu(x) -> Gamma(nu) / 2 (2 / x)^nu (next term relative ~ x^(2 nu)) */
    assert_rel(sw_bessel_k(5.0 / 6.0, 1e-9), 0.5 * tgamma(5.0 / 6.0) * pow(2e9, 5.0 / 6.0), 1e-6);
    assert_true(isnan(sw_bessel_k(5.0 / 6.0, 0.0)));
    assert_true(isnan(sw_bessel_k(5.0 / 6.0, -1.0)));
    assert_true(isnan(sw_bessel_k(NAN, 1.0)));
    assert_near(sw_bessel_k(5.0 / 6.0, INFINITY), 0.0, 0);
}

/* ------------------------------------------------------------------ structure functions */

/* 1 - J0(z), J0(z) = (1/pi) int_0^pi cos(z sin t) dt (trapezoid: exponentially accurate for this
 * periodic integrand once the points outnumber z); its series below z = 0.01, where the
 * difference would lose every digit. */
static double one_minus_j0(double z)
{
    if (z < 0.01)
        return z * z / 4 * (1 - z * z / 16 * (1 - z * z / 36));
    const int m = 64 + (int)(2 * z);
    double s = 1.0;
    for (int k = 1; k < m; k++)
        s += cos(z * sin(PI * k / m));
    return 1.0 - s / m;
}

/* D(r) = 2 int Phi (1 - cos 2 pi f.r) d^2f = 4 pi A (2 pi r / r0)^(5/3)
 *        int_0^inf (t^2 + x^2)^(-11/6) (1 - J0(t)) t dt,  x = 2 pi r / L0,
 * integrated in s = t^(1/3) (smooth at 0) up to t = 400, plus the non-oscillating tail. */
static double structure_by_quadrature(double r0, double L0, double r)
{
    const double A =
        pow(tgamma(11.0 / 6.0), 2) / (2 * pow(PI, 11.0 / 3.0)) * pow(4.8 * tgamma(1.2), 5.0 / 6.0);
    const double x = L0 > 0 && isfinite(L0) ? 2 * PI * r / L0 : 0.0;
    const double smax = cbrt(400.0);
    const int m = 20000; /* Simpson intervals */
    const double h = smax / m;
    double sum = 0;
    for (int k = 0; k <= m; k++) {
        const double s = k * h, t = s * s * s;
        double f = x > 0 ? 0.0 : 0.75; /* the limit at s = 0 */
        if (k > 0)
            f = pow(t * t + x * x, -11.0 / 6.0) * one_minus_j0(t) * t * 3 * s * s;
        sum += f * (k == 0 || k == m ? 1 : (k % 2 ? 4 : 2));
    }
    double integral = sum * h / 3.0 + 0.6 * pow(400.0 * 400.0 + x * x, -5.0 / 6.0);
    return 4 * PI * A * pow(2 * PI * r / r0, 5.0 / 3.0) * integral;
}

static void structure_functions(void **state)
{
    (void)state;
    sw_turbulence kol = turb(0.1, INFINITY, 3), vk = turb(0.1, 2.0, 3);
    /* Fried's 6.88: 2 (24/5 Gamma(6/5))^(5/6) = 6.883877 */
    assert_rel(sw_turbulence_structure(&kol, 0.1), 6.883877, 1e-6);
    assert_rel(sw_turbulence_structure(&kol, 0.3), 6.883877 * pow(3.0, 5.0 / 3.0), 1e-6);
    sw_turbulence kol0 = turb(0.1, 0.0, 3);
    assert_near(sw_turbulence_structure(&kol0, 0.3), sw_turbulence_structure(&kol, 0.3), 0);
    /* both against the Hankel integral of the PSD (independent of K_nu and of the series) */
    const double rs[] = {0.001, 0.02, 0.2, 0.6366, 1.0, 5.0};
    for (int i = 0; i < 6; i++) {
        assert_rel(sw_turbulence_structure(&vk, rs[i]), structure_by_quadrature(0.1, 2.0, rs[i]),
                   2e-5);
        assert_rel(sw_turbulence_structure(&kol, rs[i]),
                   structure_by_quadrature(0.1, INFINITY, rs[i]), 2e-5);
    }
    /* von Karman: B(0) = 2 pi A r0^(-5/3) (3/5) L0^(5/3) (the PSD's integral in closed form);
     * D -> 2 B(0) far away, D + 2 B = 2 B(0) everywhere, D -> Kolmogorov close by */
    const double A =
        pow(tgamma(11.0 / 6.0), 2) / (2 * pow(PI, 11.0 / 3.0)) * pow(4.8 * tgamma(1.2), 5.0 / 6.0);
    const double b0 = 2 * PI * A * 0.6 * pow(2.0 / 0.1, 5.0 / 3.0);
    assert_rel(sw_turbulence_covariance(&vk, 0.0), b0, 1e-13);
    assert_rel(sw_turbulence_structure(&vk, 1e3), 2 * b0, 1e-12);
    assert_rel(sw_turbulence_structure(&vk, INFINITY), 2 * b0, 1e-13);
    for (double r = 1e-5; r < 100; r *= 3.1)
        assert_rel(sw_turbulence_structure(&vk, r) + 2 * sw_turbulence_covariance(&vk, r), 2 * b0,
                   1e-12);
    const double ratio = sw_turbulence_structure(&vk, 2e-9) / sw_turbulence_structure(&kol, 2e-9);
    assert_true(ratio < 1.0 && ratio > 0.99);
    /* continuous where the series hands over to the integral (x = 2: r = L0 / pi) */
    const double rc = 2.0 / PI;
    assert_rel(sw_turbulence_structure(&vk, rc * (1 - 1e-13)),
               sw_turbulence_structure(&vk, rc * (1 + 1e-13)), 1e-12);
    assert_near(sw_turbulence_structure(&vk, 0.0), 0.0, 0);
    assert_true(isnan(sw_turbulence_structure(&vk, -1.0)));
    assert_true(isnan(sw_turbulence_covariance(&kol, 0.1)));
    sw_turbulence bad = turb(-1.0, 2.0, 3);
    assert_true(isnan(sw_turbulence_structure(&bad, 0.1)));
    assert_true(isnan(sw_turbulence_structure(NULL, 0.1)));
}

/* ------------------------------------------------------------------ FFT screens */

#define NLAGS 6
static const int lags[NLAGS] = {1, 2, 4, 8, 16, 32};

/* Adds the structure function of w (phase, radians) along x and y at each lag to d[lag]
 * (mean over all pairs, the two directions averaged). */
static void add_structure(const sw_wavefront *w, double rad_per_um, double *d, double *dy_only)
{
    const int n = w->nu;
    for (int l = 0; l < NLAGS; l++) {
        const int L = lags[l];
        if (L >= n)
            continue;
        double sx = 0, sy = 0;
        for (int k = 0; k < n; k++)
            for (int i = 0; i + L < n; i++) {
                const double a = w->opd_um[k * n + i + L] - w->opd_um[k * n + i];
                const double b = w->opd_um[(i + L) * n + k] - w->opd_um[i * n + k];
                sx += a * a;
                sy += b * b;
            }
        const double c = (double)n * (n - L) / (rad_per_um * rad_per_um);
        d[l] += 0.5 * (sx + sy) / c;
        if (dy_only)
            dy_only[l] += sy / c;
    }
}

/* Mean structure function of `count` screens (indices 0..count-1 of seed), ratio to theory. */
static void screen_structure(const sw_turbulence *t, int32_t n, double dx, uint64_t seed, int count,
                             double *ratio)
{
    double d[NLAGS] = {0};
    const double rad_per_um = 2 * PI / t->wavelength_um;
    for (int s = 0; s < count; s++) {
        sw_wavefront w;
        if (sw_phase_screen(ctx, t, n, dx, seed, (uint64_t)s, &w) != SW_OK)
            fail_msg("sw_phase_screen: %s", sw_context_error(ctx));
        add_structure(&w, rad_per_um, d, NULL);
        sw_wavefront_free(&w);
    }
    for (int l = 0; l < NLAGS; l++)
        ratio[l] = d[l] / count / sw_turbulence_structure(t, lags[l] * dx);
}

static void print_ratios(const char *what, const double *ratio)
{
    printf("%s: D / theory at lags", what);
    for (int l = 0; l < NLAGS; l++)
        printf(" %d: %.3f", lags[l], ratio[l]);
    printf("\n");
}

/*
 * Kolmogorov, n = 128, 3 subharmonic levels: the mean D over 800 screens is within 10 % of
 * 6.88 (r/r0)^(5/3) from 2 samples to n/4 (the expected ratio of the method is 0.98-1.00 there;
 * the statistical error at n/4, where a few large modes dominate, is 2.3 %). Without subharmonics
 * D at n/4 is far too low (expected 0.34): the subharmonics do their job.
 */
static void fft_screen_kolmogorov(void **state)
{
    (void)state;
    const int32_t n = 128;
    const double dx = 0.02;
    sw_turbulence t = turb(0.1, INFINITY, 3);
    double with[NLAGS], without[NLAGS];
    screen_structure(&t, n, dx, 2024, 800, with);
    print_ratios("Kolmogorov, 3 subharmonic levels", with);
    for (int l = 1; l < NLAGS; l++) /* lags 2 .. 32 = n/4 */
        assert_near(with[l], 1.0, 0.10);
    t.subharmonics = 0;
    screen_structure(&t, n, dx, 2024, 200, without);
    print_ratios("Kolmogorov, no subharmonics", without);
    assert_true(without[NLAGS - 1] < 0.5);
    assert_true(without[NLAGS - 1] < 0.55 * with[NLAGS - 1]);
    assert_true(without[3] < 0.75);
}

/* von Karman, L0 = 2 m on a 2.56 m screen: within 10 % of the von Karman D (which at n/4 is 0.51
 * of Kolmogorov's, so the outer scale is really there). */
static void fft_screen_von_karman(void **state)
{
    (void)state;
    const int32_t n = 128;
    const double dx = 0.02;
    sw_turbulence t = turb(0.1, 2.0, 3), kol = turb(0.1, INFINITY, 3);
    double ratio[NLAGS];
    screen_structure(&t, n, dx, 77, 300, ratio);
    print_ratios("von Karman L0 = 2 m", ratio);
    for (int l = 1; l < NLAGS; l++)
        assert_near(ratio[l], 1.0, 0.10);
    const double r = lags[NLAGS - 1] * dx;
    assert_true(ratio[NLAGS - 1] * sw_turbulence_structure(&t, r) <
                0.7 * sw_turbulence_structure(&kol, r));
}

static void fft_screen_properties(void **state)
{
    (void)state;
    sw_turbulence t = turb(0.15, 30.0, 3);
    sw_wavefront a, b, c, d;
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 5, 3, &a), SW_OK);
    assert_int_equal(a.nu, 64);
    assert_int_equal(a.nv, 64);
    assert_near(a.spacing_um, 1e4, 1e-9);
    assert_near(a.u0_um, -31.5e4, 1e-6);
    assert_near(a.v0_um, -31.5e4, 1e-6);
    /* same seed and index: identical; another index or seed: different */
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 5, 3, &b), SW_OK);
    assert_memory_equal(a.opd_um, b.opd_um, 64 * 64 * sizeof(double));
    sw_wavefront_free(&b);
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 5, 4, &b), SW_OK);
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 6, 3, &c), SW_OK);
    double mean = 0, rms = 0, diff_b = 0, diff_c = 0;
    for (int i = 0; i < 64 * 64; i++) {
        mean += a.opd_um[i];
        rms += a.opd_um[i] * a.opd_um[i];
        diff_b += fabs(a.opd_um[i] - b.opd_um[i]);
        diff_c += fabs(a.opd_um[i] - c.opd_um[i]);
    }
    rms = sqrt(rms / (64 * 64));
    assert_true(rms > 0.01);
    assert_true(diff_b / (64 * 64) > 0.1 * rms);
    assert_true(diff_c / (64 * 64) > 0.1 * rms);
    /* zero mean: piston removed (the subharmonics' grid mean included) */
    assert_near(mean / (64 * 64), 0.0, 1e-12 * rms);
    /* OPD is achromatic: r0 given at 1 um (r0 scales as lambda^(6/5)) gives the same OPD */
    sw_turbulence t2 = t;
    t2.wavelength_um = 1.0;
    t2.r0_m = t.r0_m * pow(1.0 / t.wavelength_um, 1.2);
    assert_int_equal(sw_phase_screen(ctx, &t2, 64, 0.01, 5, 3, &d), SW_OK);
    for (int i = 0; i < 64 * 64; i++)
        assert_near(d.opd_um[i], a.opd_um[i], 1e-12 * rms);
    sw_wavefront_free(&a);
    sw_wavefront_free(&b);
    sw_wavefront_free(&c);
    sw_wavefront_free(&d);
    /* a single-thread context gives the same bits */
    sw_context *one = sw_test_cpu_context(1);
    assert_int_equal(sw_phase_screen(one, &t, 64, 0.01, 5, 3, &a), SW_OK);
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 5, 3, &b), SW_OK);
    assert_memory_equal(a.opd_um, b.opd_um, 64 * 64 * sizeof(double));
    sw_wavefront_free(&a);
    sw_wavefront_free(&b);
    sw_context_destroy(one);
}

static void check_bad_turbulence(sw_turbulence t, const char *words)
{
    sw_wavefront w;
    memset(&w, 0x5A, sizeof w);
    assert_int_equal(sw_turbulence_check(ctx, &t), SW_EINVAL);
    assert_message_has(words);
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 1, 0, &w), SW_EINVAL);
    assert_message_has(words);
    assert_null(w.opd_um);
    assert_int_equal(w.nu, 0);
    sw_infinite_screen *s = (sw_infinite_screen *)&w;
    assert_int_equal(sw_infinite_screen_create(ctx, &t, 64, 0.01, 1, &s), SW_EINVAL);
    assert_null(s);
}

static void bad_input(void **state)
{
    (void)state;
    sw_turbulence t;
    sw_turbulence_default(&t);
    assert_near(t.r0_m, 0.1, 0);
    assert_near(t.L0_m, 25.0, 0);
    assert_near(t.wavelength_um, 0.5, 0);
    assert_int_equal(t.subharmonics, 3);
    assert_int_equal(sw_turbulence_check(ctx, &t), SW_OK);
    check_bad_turbulence(turb(0.0, 25, 3), "r0");
    check_bad_turbulence(turb(-0.1, 25, 3), "r0");
    check_bad_turbulence(turb(NAN, 25, 3), "r0");
    check_bad_turbulence(turb(INFINITY, 25, 3), "r0");
    check_bad_turbulence(turb(0.1, -1, 3), "L0");
    check_bad_turbulence(turb(0.1, NAN, 3), "L0");
    check_bad_turbulence(turb(0.1, 25, -1), "subharmonic");
    check_bad_turbulence(turb(0.1, 25, 9), "subharmonic");
    sw_turbulence w0 = turb(0.1, 25, 3);
    w0.wavelength_um = 0.0;
    check_bad_turbulence(w0, "wavelength");
    w0.wavelength_um = NAN;
    check_bad_turbulence(w0, "wavelength");
    assert_int_equal(sw_turbulence_check(ctx, NULL), SW_EINVAL);

    sw_wavefront w;
    const int32_t sizes[] = {127, 6, 0, -8, 8194, 16384};
    for (int i = 0; i < 6; i++) {
        memset(&w, 0x5A, sizeof w);
        assert_int_equal(sw_phase_screen(ctx, &t, sizes[i], 0.01, 1, 0, &w), SW_EINVAL);
        assert_null(w.opd_um);
        assert_message_has("size");
    }
    const double spacings[] = {0.0, -0.01, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sw_phase_screen(ctx, &t, 64, spacings[i], 1, 0, &w), SW_EINVAL);
        assert_message_has("spacing");
    }
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 1, (uint64_t)1 << 32, &w), SW_EINVAL);
    assert_message_has("index");
    assert_int_equal(sw_phase_screen(ctx, NULL, 64, 0.01, 1, 0, &w), SW_EINVAL);
    assert_int_equal(sw_phase_screen(ctx, &t, 64, 0.01, 1, 0, NULL), SW_EINVAL);
    /* r0 so small that the amplitudes overflow */
    sw_turbulence tiny = turb(1e-300, INFINITY, 8);
    assert_int_equal(sw_phase_screen(ctx, &tiny, 64, 1e3, 1, 0, &w), SW_EINVAL);
    assert_null(w.opd_um);
    /* the extremes of the accepted sizes work */
    assert_int_equal(sw_phase_screen(ctx, &t, 8, 0.01, 1, 0, &w), SW_OK);
    sw_wavefront_free(&w);
}

/* ------------------------------------------------------------------ infinite screen */

static sw_infinite_screen *make_infinite(const sw_turbulence *t, int32_t n, double dx,
                                         uint64_t seed)
{
    sw_infinite_screen *s = NULL;
    if (sw_infinite_screen_create(ctx, t, n, dx, seed, &s) != SW_OK)
        fail_msg("sw_infinite_screen_create: %s", sw_context_error(ctx));
    return s;
}

/* After 4n new rows, windows spaced n rows apart over 30 seeds: D along x (within a new row)
 * and along y (across rows, the direction of motion) within 10 % of von Karman's, from 1 sample
 * to n/2. */
static void infinite_statistics(void **state)
{
    (void)state;
    const int32_t n = 64;
    const double dx = 0.02;
    sw_turbulence t = turb(0.1, 2.0, 3);
    double d[NLAGS] = {0}, dy[NLAGS] = {0};
    int windows = 0;
    sw_wavefront w = {0, 0, 0, 0, 0, NULL};
    for (uint64_t seed = 1; seed <= 30; seed++) {
        sw_infinite_screen *s = make_infinite(&t, n, dx, seed);
        assert_int_equal(sw_infinite_screen_advance(s, 4 * n * dx), SW_OK);
        for (int k = 0; k < 8; k++) {
            assert_int_equal(sw_infinite_screen_advance(s, n * dx), SW_OK);
            assert_int_equal(sw_infinite_screen_window(s, &w), SW_OK);
            add_structure(&w, 2 * PI / t.wavelength_um, d, dy);
            windows++;
        }
        assert_int_equal(sw_infinite_screen_rows_added(s), 12 * n);
        sw_infinite_screen_destroy(s);
    }
    sw_wavefront_free(&w);
    double rx[NLAGS], ry[NLAGS];
    for (int l = 0; l < NLAGS; l++) {
        const double th = sw_turbulence_structure(&t, lags[l] * dx);
        ry[l] = dy[l] / windows / th;
        rx[l] = (2 * d[l] - dy[l]) / windows / th;
    }
    print_ratios("infinite screen, along x", rx);
    print_ratios("infinite screen, along y", ry);
    for (int l = 0; l < NLAGS; l++) {
        assert_near(rx[l], 1.0, 0.10);
        assert_near(ry[l], 1.0, 0.10);
    }
}

/* The first new row joins the FFT screen's rows as any row joins its neighbour: the mean square
 * difference across the join (rows n-1 | n), over 300 seeds, matches D(1 sample) and the same
 * quantity between two new rows (n+8 | n+9). */
static void infinite_join(void **state)
{
    (void)state;
    const int32_t n = 32;
    const double dx = 0.02;
    sw_turbulence t = turb(0.1, 2.0, 3);
    const double um2rad = 2 * PI / t.wavelength_um;
    double join = 0, later = 0;
    sw_wavefront w = {0, 0, 0, 0, 0, NULL};
    const int seeds = 300;
    for (int seed = 0; seed < seeds; seed++) {
        sw_infinite_screen *s = make_infinite(&t, n, dx, 1000 + (uint64_t)seed);
        /* at position p, window row k shows screen row p + n - 1 - k: after 1 row, window rows
         * 0 and 1 are screen rows n and n - 1 */
        assert_int_equal(sw_infinite_screen_advance(s, dx), SW_OK);
        assert_int_equal(sw_infinite_screen_window(s, &w), SW_OK);
        for (int i = 0; i < n; i++) {
            const double a = (w.opd_um[i] - w.opd_um[n + i]) * um2rad;
            join += a * a;
        }
        assert_int_equal(sw_infinite_screen_advance(s, 9 * dx), SW_OK);
        assert_int_equal(sw_infinite_screen_window(s, &w), SW_OK);
        for (int i = 0; i < n; i++) {
            const double a = (w.opd_um[i] - w.opd_um[n + i]) * um2rad;
            later += a * a;
        }
        sw_infinite_screen_destroy(s);
    }
    sw_wavefront_free(&w);
    const double th = sw_turbulence_structure(&t, dx);
    join /= (double)seeds * n * th;
    later /= (double)seeds * n * th;
    printf("infinite screen: D(1 sample) / theory across the join %.3f, between new rows %.3f\n",
           join, later);
    assert_near(join, 1.0, 0.08);
    assert_near(later, 1.0, 0.08);
    assert_near(join / later, 1.0, 0.08);
}

static void infinite_fractional_and_reproducible(void **state)
{
    (void)state;
    const int32_t n = 32;
    const double dx = 0.05;
    sw_turbulence t = turb(0.2, 5.0, 3);
    sw_infinite_screen *a = make_infinite(&t, n, dx, 42), *b = make_infinite(&t, n, dx, 42),
                       *c = make_infinite(&t, n, dx, 43);
    sw_wavefront wa = {0, 0, 0, 0, 0, NULL}, wb = {0, 0, 0, 0, 0, NULL}, wc = wb, w0 = wb, w1 = wb;
    const size_t bytes = (size_t)n * n * sizeof(double);

    /* the same seed gives the same windows; another seed does not */
    assert_int_equal(sw_infinite_screen_window(a, &w0), SW_OK);
    assert_int_equal(sw_infinite_screen_window(b, &wb), SW_OK);
    assert_int_equal(sw_infinite_screen_window(c, &wc), SW_OK);
    assert_memory_equal(w0.opd_um, wb.opd_um, bytes);
    assert_memory_not_equal(w0.opd_um, wc.opd_um, bytes);
    assert_int_equal(w0.nu, n);
    assert_near(w0.spacing_um, dx * 1e6, 1e-9);
    assert_near(w0.u0_um, -0.5 * (n - 1) * dx * 1e6, 1e-6);

    /* half a sample: the mean of the windows at 0 and 1 sample */
    assert_int_equal(sw_infinite_screen_advance(a, 0.5 * dx), SW_OK);
    assert_int_equal(sw_infinite_screen_window(a, &wa), SW_OK);
    assert_int_equal(sw_infinite_screen_advance(b, dx), SW_OK);
    assert_int_equal(sw_infinite_screen_window(b, &w1), SW_OK);
    double maxstep = 0;
    for (int i = 0; i < n * n; i++) {
        assert_near(wa.opd_um[i], 0.5 * (w0.opd_um[i] + w1.opd_um[i]), 1e-12);
        maxstep = fmax(maxstep, fabs(w1.opd_um[i] - w0.opd_um[i]));
    }
    /* the content moved by one row towards +v: the new window's row k + 1 is the old row k */
    assert_memory_equal(w1.opd_um + n, w0.opd_um, (size_t)(n - 1) * n * sizeof(double));
    /* two halves are one whole, to the bit */
    assert_int_equal(sw_infinite_screen_advance(a, 0.5 * dx), SW_OK);
    assert_int_equal(sw_infinite_screen_window(a, &wa), SW_OK);
    assert_memory_equal(wa.opd_um, w1.opd_um, bytes);

    /* small steps change the window continuously: 0.1 sample moves each sample by at most 0.1
     * of the largest change over a whole sample */
    assert_int_equal(sw_infinite_screen_window(a, &w0), SW_OK);
    for (int step = 0; step < 10; step++) {
        assert_int_equal(sw_infinite_screen_advance(a, 0.1 * dx), SW_OK);
        assert_int_equal(sw_infinite_screen_window(a, &wa), SW_OK);
        for (int i = 0; i < n * n; i++)
            assert_true(fabs(wa.opd_um[i] - w0.opd_um[i]) <= 0.1 * maxstep * 3 + 1e-12);
        memcpy(w0.opd_um, wa.opd_um, bytes);
    }
    assert_near(sw_infinite_screen_position(a), 2 * dx, 1e-15);

    /* the same distance split differently gives the same window (rows depend on the seed and
     * their index only) */
    assert_int_equal(sw_infinite_screen_advance(a, 37 * dx), SW_OK);
    assert_int_equal(sw_infinite_screen_advance(b, 10 * dx), SW_OK);
    assert_int_equal(sw_infinite_screen_advance(b, 28 * dx), SW_OK);
    assert_int_equal(sw_infinite_screen_window(a, &wa), SW_OK);
    assert_int_equal(sw_infinite_screen_window(b, &wb), SW_OK);
    assert_memory_equal(wa.opd_um, wb.opd_um, bytes);
    assert_int_equal(sw_infinite_screen_rows_added(a), 39);
    assert_int_equal(sw_infinite_screen_rows_added(b), 39);

    /* a window struct of another size is reallocated */
    sw_wavefront small;
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 4, 1.0, &small), SW_OK);
    assert_int_equal(sw_infinite_screen_window(a, &small), SW_OK);
    assert_int_equal(small.nu, n);
    assert_memory_equal(small.opd_um, wa.opd_um, bytes);
    sw_wavefront_free(&small);

    sw_wavefront_free(&wa);
    sw_wavefront_free(&wb);
    sw_wavefront_free(&wc);
    sw_wavefront_free(&w0);
    sw_wavefront_free(&w1);
    sw_infinite_screen_destroy(a);
    sw_infinite_screen_destroy(b);
    sw_infinite_screen_destroy(c);
}

/* Many rows later (30 n) the screen is still stationary: its variance about the window mean
 * stays that of a screen of this size, not drifting (the recursion is stable). */
static void infinite_stable(void **state)
{
    (void)state;
    const int32_t n = 32;
    const double dx = 0.02;
    sw_turbulence t = turb(0.1, 2.0, 3);
    sw_infinite_screen *s = make_infinite(&t, n, dx, 9);
    sw_wavefront w = {0, 0, 0, 0, 0, NULL};
    double first = 0, last = 0;
    for (int k = 0; k < 60; k++) {
        assert_int_equal(sw_infinite_screen_advance(s, 0.5 * n * dx), SW_OK);
        assert_int_equal(sw_infinite_screen_window(s, &w), SW_OK);
        double m = 0, v = 0;
        for (int i = 0; i < n * n; i++)
            m += w.opd_um[i];
        m /= n * n;
        for (int i = 0; i < n * n; i++)
            v += (w.opd_um[i] - m) * (w.opd_um[i] - m);
        v /= n * n;
        if (k < 20)
            first += v;
        if (k >= 40)
            last += v;
        assert_true(fabs(m) < 50.0); /* the level does not wander off: B(0) ~ 0.09 um^2 here */
    }
    assert_true(last < 3 * first && first < 3 * last);
    sw_wavefront_free(&w);
    sw_infinite_screen_destroy(s);
}

static void infinite_bad_input(void **state)
{
    (void)state;
    sw_infinite_screen *s = NULL;
    sw_turbulence kol = turb(0.1, INFINITY, 3), kol0 = turb(0.1, 0.0, 3), t = turb(0.1, 10, 3);
    assert_int_equal(sw_infinite_screen_create(ctx, &kol, 64, 0.01, 1, &s), SW_EINVAL);
    assert_message_has("outer scale");
    assert_null(s);
    assert_int_equal(sw_infinite_screen_create(ctx, &kol0, 64, 0.01, 1, &s), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_create(ctx, &t, 63, 0.01, 1, &s), SW_EINVAL);
    assert_message_has("size");
    assert_int_equal(sw_infinite_screen_create(ctx, &t, 2048, 0.01, 1, &s), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_create(ctx, &t, 64, 0.0, 1, &s), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_create(ctx, &t, 64, 0.01, 1, NULL), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_create(ctx, NULL, 64, 0.01, 1, &s), SW_EINVAL);
    s = make_infinite(&t, 16, 0.01, 1);
    assert_int_equal(sw_infinite_screen_advance(s, -0.01), SW_EINVAL);
    assert_message_has("distance");
    assert_int_equal(sw_infinite_screen_advance(s, NAN), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_advance(s, INFINITY), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_advance(s, 1e12), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_rows_added(s), 0);
    assert_int_equal(sw_infinite_screen_advance(s, 0.0), SW_OK);
    assert_int_equal(sw_infinite_screen_window(s, NULL), SW_EINVAL);
    assert_int_equal(sw_infinite_screen_advance(NULL, 1.0), SW_EINVAL);
    sw_infinite_screen_destroy(s);
    sw_infinite_screen_destroy(NULL);
    assert_int_equal(sw_infinite_screen_rows_added(NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bessel_k_references),
        cmocka_unit_test(structure_functions),
        cmocka_unit_test(fft_screen_kolmogorov),
        cmocka_unit_test(fft_screen_von_karman),
        cmocka_unit_test(fft_screen_properties),
        cmocka_unit_test(bad_input),
        cmocka_unit_test(infinite_statistics),
        cmocka_unit_test(infinite_join),
        cmocka_unit_test(infinite_fractional_and_reproducible),
        cmocka_unit_test(infinite_stable),
        cmocka_unit_test(infinite_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
