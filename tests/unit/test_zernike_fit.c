/*
 * The Zernike fit of Shack-Hartmann slopes (zernike_fit.h, src/zernike/zfit.c; seed 001 section
 * 3.3), on the CPU.
 *
 * Slopes for the round trips are made here, independently of the library's Green's-theorem
 * matrix: the mean of grad W (sw_zernike_sum_grad, the analytic gradient) over the lit part of
 * each lenslet by a tensor Gauss-Legendre rule (Q x Q points on each of s x s sub-squares, a
 * point counted when it lies inside the annulus). On a lenslet wholly inside the annulus one
 * sub-square of 8 x 8 points is exact for the gradient of a polynomial of degree <= 15, so the
 * fully-lit round trip is limited only by the float slopes (1e-6 relative asked). On cut
 * lenslets the inside test makes the rule converge slowly; its error is estimated from two
 * resolutions and the fit is asked to agree within ten times that estimate.
 */
#include "testutil.h"

#include "zernike/zfit_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PITCH 16.0
#define PIXEL 5.5
#define FOCAL 3.5

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(ctx);
    return 0;
}

static double unit_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

/* N x N grid, the pupil centred on it with radius rfrac * N * PITCH / 2. */
static void params(sw_zfit_params *p, int N, double rfrac, double obsc, int order)
{
    sw_zfit_params_default(p);
    p->geometry.nx = p->geometry.ny = N;
    p->geometry.pitch_px = PITCH;
    p->geometry.pixel_um = PIXEL;
    p->geometry.focal_mm = FOCAL;
    p->geometry.x0 = p->geometry.y0 = 0.0;
    p->pupil_cx_px = -0.5 + PITCH * N / 2.0;
    p->pupil_cy_px = -0.5 + PITCH * N / 2.0;
    p->pupil_radius_px = rfrac * PITCH * N / 2.0;
    p->obscuration = obsc;
    p->max_order = order;
}

/* Gauss-Legendre nodes on [-1, 1] (the test's own, by Newton iteration). */
static void gl(int n, double *x, double *w)
{
    for (int i = 0; i < n; i++) {
        double z = cos(3.14159265358979323846 * (i + 0.75) / (n + 0.5)), dp = 1.0;
        for (int it = 0; it < 100; it++) {
            double p0 = 1.0, p1 = 0.0;
            for (int k = 1; k <= n; k++) {
                double p2 = p1;
                p1 = p0;
                p0 = ((2.0 * k - 1.0) * z * p1 - (k - 1.0) * p2) / k;
            }
            dp = n * (z * p0 - p1) / (z * z - 1.0);
            z -= p0 / dp;
        }
        x[i] = z;
        w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
}

/* Mean of grad W over the lit part of the square centred (cx, cy) of half side h (unit-disc
 * coordinates), s x s sub-squares of Q x Q points; the lit area fraction in *frac. */
static void mean_grad(const double *coef, int count, double cx, double cy, double h, double obsc,
                      int s, double *gx, double *gy, double *frac)
{
    enum { Q = 8 };
    double x[Q], w[Q];
    gl(Q, x, w);
    double sx = 0.0, sy = 0.0, a = 0.0, hs = h / s;
    for (int bi = 0; bi < s; bi++)
        for (int bk = 0; bk < s; bk++) {
            double ux = cx - h + (2 * bi + 1) * hs, uy = cy - h + (2 * bk + 1) * hs;
            for (int i = 0; i < Q; i++)
                for (int k = 0; k < Q; k++) {
                    double X = ux + hs * x[i], Y = uy + hs * x[k], r2 = X * X + Y * Y;
                    if (r2 > 1.0 || r2 < obsc * obsc)
                        continue;
                    double v, dx, dy, wt = w[i] * w[k];
                    sw_zernike_sum_grad(coef, count, X, Y, &v, &dx, &dy);
                    sx += wt * dx;
                    sy += wt * dy;
                    a += wt;
                }
        }
    *gx = a > 0.0 ? sx / a : 0.0;
    *gy = a > 0.0 ? sy / a : 0.0;
    *frac = a * hs * hs / (4.0 * h * h);
}

/* 1 when the lenslet square lies inside the annulus (fully lit). */
static int fully_lit(const sw_zfit_params *p, int32_t l)
{
    double xr, yr, R = p->pupil_radius_px, h = p->geometry.pitch_px / (2.0 * R);
    sw_sh_reference(&p->geometry, l % p->geometry.nx, l / p->geometry.nx, &xr, &yr);
    double cx = (xr - p->pupil_cx_px) / R, cy = (yr - p->pupil_cy_px) / R;
    double far = hypot(fabs(cx) + h, fabs(cy) + h);
    double nx = fabs(cx) > h ? fabs(cx) - h : 0.0, ny = fabs(cy) > h ? fabs(cy) - h : 0.0;
    return far <= 1.0 && hypot(nx, ny) >= p->obscuration;
}

/* The slopes (pixels, BLOCKS or the plan's layout) of W = sum coef Z over the mask lenslets. */
static void make_slopes(const sw_zfit_params *p, const double *coef, int count, int s,
                        float *slopes)
{
    const sw_sh_geometry *g = &p->geometry;
    double R = p->pupil_radius_px, h = g->pitch_px / (2.0 * R);
    /* OSA sign (zernike_fit.h): a positive wavefront leads, the spot moves against its gradient */
    double scale = -sw_sh_px_per_rad(g) / (R * g->pixel_um);
    int32_t n = 0, nl = g->nx * g->ny;
    for (int32_t l = 0; l < nl; l++)
        n += sw_sh_is_valid(g, l);
    for (int32_t l = 0, k = 0; l < nl; l++) {
        if (!sw_sh_is_valid(g, l))
            continue;
        double xr, yr, gx, gy, fr;
        sw_sh_reference(g, l % g->nx, l / g->nx, &xr, &yr);
        mean_grad(coef, count, (xr - p->pupil_cx_px) / R, (yr - p->pupil_cy_px) / R, h,
                  p->obscuration, s, &gx, &gy, &fr);
        int ix = p->layout == SW_SLOPES_INTERLEAVED ? 2 * k : k;
        int iy = p->layout == SW_SLOPES_INTERLEAVED ? 2 * k + 1 : n + k;
        slopes[ix] = (float)(scale * gx);
        slopes[iy] = (float)(scale * gy);
        k++;
    }
}

static void random_coef(double *c, int J, uint64_t seed, double amp)
{
    c[0] = 0.0;
    for (int j = 1; j < J; j++)
        c[j] = amp * (2.0 * unit_rand(&seed) - 1.0);
}

static double max_abs(const double *a, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

static double max_diff(const double *a, const double *b, int n)
{
    double m = 0.0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a[i] - b[i]));
    return m;
}

static sw_zfit_plan *create_ok(const sw_zfit_params *p)
{
    sw_zfit_plan *plan = NULL;
    sw_status st = sw_zfit_create(ctx, p, &plan);
    if (st != SW_OK)
        fail_msg("sw_zfit_create: %s", sw_context_error(ctx));
    return plan;
}

/* ------------------------------------------------------------------ region integrals */

static void test_region_integrals(void **state)
{
    (void)state;
    int J = sw_zernike_count(10);
    double area, gx[66], gy[66], area2, gx2[66], gy2[66];
    /* a square inside the disc: area exact, integrals equal a tensor Gauss rule of the
     * analytic gradient (exact for these polynomials) */
    double cx = 0.31, cy = -0.22, h = 0.1;
    sw_zfit_region_integrals(10, cx, cy, h, 0.0, 1, &area, gx, gy);
    assert_near(area, 4 * h * h, 1e-15);
    for (int j = 1; j < J; j++) {
        double c[66] = {0};
        c[j] = 1.0;
        double mx, my, fr;
        mean_grad(c, J, cx, cy, h, 0.0, 1, &mx, &my, &fr);
        assert_near(gx[j] / area, mx, 1e-11);
        assert_near(gy[j] / area, my, 1e-11);
    }
    /* a square holding the whole annulus: area pi (1 - o^2), gradients' integrals 0 for the
     * modes whose gradient is orthogonal to 1 ... the tilts give 2 pi (1 - o^2) * N */
    sw_zfit_region_integrals(10, 0.05, -0.03, 1.5, 0.3, 1, &area, gx, gy);
    assert_near(area, 3.14159265358979323846 * (1 - 0.09), 1e-13);
    /* Z_1^1 = 2 X: iint dZ/dX = 2 area; Z_1^-1 = 2 Y: iint dZ/dY = 2 area */
    assert_near(gx[2], 2 * area, 1e-12);
    assert_near(gy[1], 2 * area, 1e-12);
    assert_near(gy[2], 0.0, 1e-12);
    /* cut squares (outer and inner circles): the arc rule converged against a 16 times finer
     * one */
    const double cases[][4] = {{0.9, 0.1, 0.12, 0.0},   {0.7, 0.7, 0.1, 0.0},
                               {-0.95, -0.2, 0.1, 0.2}, {0.25, 0.05, 0.1, 0.3},
                               {0.0, 0.0, 0.25, 0.3},   {0.0, 1.0, 0.07, 0.0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sw_zfit_region_integrals(10, cases[c][0], cases[c][1], cases[c][2], cases[c][3], 1, &area,
                                 gx, gy);
        sw_zfit_region_integrals(10, cases[c][0], cases[c][1], cases[c][2], cases[c][3], 16, &area2,
                                 gx2, gy2);
        assert_true(area > 0.0 && area < 4 * cases[c][2] * cases[c][2]);
        assert_near(area, area2, 1e-14);
        for (int j = 0; j < J; j++) {
            assert_near(gx[j], gx2[j], 1e-13);
            assert_near(gy[j], gy2[j], 1e-13);
        }
        /* and against the brute-force tensor rule, loosely (it converges slowly on cuts) */
        double mx, my, fr;
        double c3[66] = {0};
        c3[4] = 1.0; /* defocus */
        mean_grad(c3, J, cases[c][0], cases[c][1], cases[c][2], cases[c][3], 64, &mx, &my, &fr);
        assert_near(area / (4 * cases[c][2] * cases[c][2]), fr, 2e-3);
        assert_near(gx[4] / area, mx, 2e-2);
        assert_near(gy[4] / area, my, 2e-2);
    }
}

/* ------------------------------------------------------------------ round trips */

static void roundtrip_full(double obsc, sw_zfit_method method)
{
    sw_zfit_params p;
    params(&p, 14, 1.0, obsc, 8);
    int nl = 14 * 14;
    uint8_t mask[14 * 14];
    int nfull = 0;
    for (int l = 0; l < nl; l++)
        nfull += mask[l] = (uint8_t)fully_lit(&p, l);
    p.geometry.valid = mask;
    p.method = method;
    sw_zfit_plan *plan = create_ok(&p);
    int J = sw_zfit_terms(plan), n = sw_zfit_slopes(plan);
    assert_int_equal(J, 45);
    assert_int_equal(n, nfull);
    assert_int_equal(sw_zfit_used(plan), nfull);
    for (int k = 0; k < n; k++)
        assert_near(sw_zfit_illum(plan, k), 1.0, 1e-13);
    double c[45], fit[45], res;
    float *s = malloc(2 * n * sizeof(float));
    for (int t = 0; t < 3; t++) {
        random_coef(c, J, 100 + t, 0.2);
        make_slopes(&p, c, J, 1, s);
        assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_HOST, fit, &res), SW_OK);
        assert_true(fit[0] == 0.0);
        double err = max_diff(fit, c, J) / max_abs(c, J);
        if (t == 0)
            print_message("full obsc %g method %d: relative error %.3g\n", obsc, (int)method, err);
        if (!(err < 1e-6))
            fail_msg("obsc %g method %d: relative error %g", obsc, (int)method, err);
        assert_true(res < 1e-5); /* float slopes of ~1 px */
    }
    free(s);
    sw_zfit_destroy(plan);
}

static void test_roundtrip_circular(void **state)
{
    (void)state;
    roundtrip_full(0.0, SW_ZFIT_PINV);
    roundtrip_full(0.0, SW_ZFIT_QR);
}

static void test_roundtrip_annular(void **state)
{
    (void)state;
    roundtrip_full(0.35, SW_ZFIT_PINV);
    roundtrip_full(0.35, SW_ZFIT_QR);
}

/* All lenslets lit to >= 0.5, the cut ones included: the independent integrator's error,
 * estimated from two resolutions, bounds the fit's. */
static void test_roundtrip_partial(void **state)
{
    (void)state;
    for (int a = 0; a < 3; a++) {
        sw_zfit_params p;
        /* a = 2: an odd grid, the pupil inscribed: rim lenslets touch the circle at the middle
         * of an edge (a tangency the clipping must not mistake for a crossing) */
        params(&p, a == 2 ? 11 : 12, 1.0, a == 1 ? 0.3 : 0.0, 6);
        sw_zfit_plan *plan = create_ok(&p);
        int J = sw_zfit_terms(plan), n = sw_zfit_slopes(plan);
        assert_true(sw_zfit_used(plan) < n); /* the corners are dark */
        double c[28], fit[28];
        random_coef(c, J, 7 + a, 0.2);
        float *s1 = malloc(2 * n * sizeof(float)), *s2 = malloc(2 * n * sizeof(float));
        make_slopes(&p, c, J, 16, s1);
        make_slopes(&p, c, J, 64, s2);
        double est = 0.0;
        for (int i = 0; i < 2 * n; i++)
            est = fmax(est, fabs(s1[i] - s2[i]));
        assert_int_equal(sw_zfit_run(plan, s2, NULL, 1, SW_MEM_HOST, fit, NULL), SW_OK);
        double err = max_diff(fit, c, J) / max_abs(c, J);
        /* the slope error est (px) relative to the slopes' size, times 10 */
        double smax = 0.0;
        for (int i = 0; i < 2 * n; i++)
            smax = fmax(smax, fabs(s2[i]));
        double tol = 10.0 * est / smax + 1e-6;
        print_message("partial obsc %g: relative error %.3g, tolerance %.3g\n", p.obscuration, err,
                      tol);
        if (!(err < tol))
            fail_msg("obsc %g: relative error %g above %g (integrator estimate %g px)",
                     p.obscuration, err, tol, est);
        assert_true(tol < 1e-2); /* the check means something */
        free(s1);
        free(s2);
        sw_zfit_destroy(plan);
    }
}

/* Tangencies: a circle that touches a lenslet edge, or fits the lenslet exactly, gives the
 * region's integrals continuously (as a circle a hair away does), and the closed forms where
 * there are some. */
static void test_region_tangent(void **state)
{
    (void)state;
    const double PI_ = 3.14159265358979323846, eps = 1e-12;
    double area, gx[66], gy[66], area2, gx2[66], gy2[66];
    const int J = sw_zernike_count(10);
    /* {cx, cy, h, obsc} touching, and the same a hair inside */
    const double cases[][2][4] = {
        {{0.9, 0.0, 0.1, 0.0}, {0.9 - eps, 0.0, 0.1, 0.0}},   /* right edge tangent */
        {{0.0, 0.9, 0.1, 0.0}, {0.0, 0.9 - eps, 0.1, 0.0}},   /* top edge tangent */
        {{0.0, 0.0, 1.0, 0.0}, {0.0, 0.0, 1.0 + eps, 0.0}},   /* disc inscribed */
        {{0.0, 0.0, 0.3, 0.3}, {0.0, 0.0, 0.3, 0.3 - eps}},   /* obscuration inscribed */
        {{-0.9, 0.0, 0.1, 0.0}, {-0.9 + eps, 0.0, 0.1, 0.0}}, /* left edge tangent */
        {{0.0, -0.9, 0.1, 0.0}, {0.0, -0.9 + eps, 0.1, 0.0}}, /* bottom edge tangent */
        {{0.3, 0.0, 0.2, 0.1}, {0.3, 0.0, 0.2, 0.1 + eps}},   /* obscuration touching an edge */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const double *a = cases[c][0], *b = cases[c][1];
        sw_zfit_region_integrals(10, a[0], a[1], a[2], a[3], 1, &area, gx, gy);
        sw_zfit_region_integrals(10, b[0], b[1], b[2], b[3], 1, &area2, gx2, gy2);
        if (!(fabs(area - area2) < 1e-9))
            fail_msg("case %zu: area %.15g, a hair away %.15g", c, area, area2);
        for (int j = 0; j < J; j++) {
            assert_near(gx[j], gx2[j], 1e-8);
            assert_near(gy[j], gy2[j], 1e-8);
        }
    }
    sw_zfit_region_integrals(10, 0.0, 0.0, 1.0, 0.0, 1, &area, gx, gy);
    assert_near(area, PI_, 1e-12);
    assert_near(gx[2], 2.0 * PI_, 1e-11); /* Z_1^1 = 2 X */
    sw_zfit_region_integrals(10, 0.0, 0.0, 0.3, 0.3, 1, &area, gx, gy);
    assert_near(area, 0.36 - PI_ * 0.09, 1e-12);
}

/* ------------------------------------------------------------------ methods, batches, layout */

static void test_pinv_qr_batch_layout(void **state)
{
    (void)state;
    enum { F = 5 };
    sw_zfit_params p;
    params(&p, 16, 0.95, 0.0, 8);
    p.max_frames = F;
    sw_zfit_plan *pinv = create_ok(&p);
    p.method = SW_ZFIT_QR;
    sw_zfit_plan *qr = create_ok(&p);
    p.method = SW_ZFIT_PINV;
    p.layout = SW_SLOPES_INTERLEAVED;
    sw_zfit_plan *inter = create_ok(&p);
    int J = sw_zfit_terms(pinv), n = sw_zfit_slopes(pinv);
    float *s = malloc((size_t)F * 2 * n * sizeof(float));
    float *si = malloc((size_t)F * 2 * n * sizeof(float));
    uint64_t seed = 99;
    for (int i = 0; i < F * 2 * n; i++)
        s[i] = (float)(4.0 * unit_rand(&seed) - 2.0); /* not a Zernike field: real residuals */
    for (int f = 0; f < F; f++)
        for (int k = 0; k < n; k++) {
            si[f * 2 * n + 2 * k] = s[f * 2 * n + k];
            si[f * 2 * n + 2 * k + 1] = s[f * 2 * n + n + k];
        }
    double cp[F * 45], cq[F * 45], ci[F * 45], one[45], rp[F], rq[F], ri[F], r1;
    assert_int_equal(sw_zfit_run(pinv, s, NULL, F, SW_MEM_HOST, cp, rp), SW_OK);
    assert_int_equal(sw_zfit_run(qr, s, NULL, F, SW_MEM_HOST, cq, rq), SW_OK);
    assert_int_equal(sw_zfit_run(inter, si, NULL, F, SW_MEM_HOST, ci, ri), SW_OK);
    double scale = max_abs(cp, F * J);
    assert_true(max_diff(cp, cq, F * J) <= 1e-10 * scale);
    assert_true(max_diff(cp, ci, F * J) <= 1e-12 * scale);
    for (int f = 0; f < F; f++) {
        assert_near(rp[f], rq[f], 1e-10 * rp[f]);
        assert_near(rp[f], ri[f], 1e-12 * rp[f]);
        /* batched equals one by one */
        assert_int_equal(sw_zfit_run(pinv, s + f * 2 * n, NULL, 1, SW_MEM_HOST, one, &r1), SW_OK);
        assert_true(max_diff(one, cp + f * J, J) <= 1e-12 * scale);
        assert_near(r1, rp[f], 1e-12 * r1);
        assert_int_equal(sw_zfit_run(qr, s + f * 2 * n, NULL, 1, SW_MEM_HOST, one, &r1), SW_OK);
        assert_true(max_diff(one, cq + f * J, J) <= 1e-12 * scale);
    }
    free(s);
    free(si);
    sw_zfit_destroy(pinv);
    sw_zfit_destroy(qr);
    sw_zfit_destroy(inter);
}

/* The residual is the RMS of D c - s over the used slopes (D from sw_zfit_matrix). */
static void test_residual_direct(void **state)
{
    (void)state;
    sw_zfit_params p;
    params(&p, 10, 1.0, 0.2, 4);
    sw_zfit_plan *plan = create_ok(&p);
    int J = sw_zfit_terms(plan), n = sw_zfit_slopes(plan), m = J - 1;
    float *s = malloc(2 * n * sizeof(float));
    uint64_t seed = 5;
    for (int i = 0; i < 2 * n; i++)
        s[i] = (float)(unit_rand(&seed) - 0.5);
    double c[15], res;
    assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_HOST, c, &res), SW_OK);
    const double *D = sw_zfit_matrix(plan);
    double ss = 0.0;
    int rows = 0;
    for (int r = 0; r < 2 * n; r++) {
        int k = r % n;
        int used = sw_zfit_illum(plan, k) >= p.min_illum;
        double v = 0.0;
        for (int j = 0; j < m; j++)
            v += D[r * m + j] * c[j + 1];
        if (!used) {
            assert_true(v == 0.0); /* unused rows are 0 */
            continue;
        }
        ss += (v - s[r]) * (v - s[r]);
        rows++;
    }
    assert_int_equal(rows, 2 * sw_zfit_used(plan));
    assert_near(res, sqrt(ss / rows), 1e-12 * res);
    /* and the fit is least squares: the residual is orthogonal to every column of D */
    for (int j = 0; j < m; j++) {
        double dot = 0.0, nrm = 0.0;
        for (int r = 0; r < 2 * n; r++) {
            if (sw_zfit_illum(plan, r % n) < p.min_illum)
                continue;
            double v = -s[r];
            for (int i = 0; i < m; i++)
                v += D[r * m + i] * c[i + 1];
            dot += v * D[r * m + j];
            nrm += D[r * m + j] * D[r * m + j];
        }
        assert_true(fabs(dot) <= 1e-10 * sqrt(nrm) * res * sqrt(rows));
    }
    free(s);
    sw_zfit_destroy(plan);
}

/* ------------------------------------------------------------------ weights, invalid lenslets */

static void test_weights_and_invalid(void **state)
{
    (void)state;
    enum { N = 12, F = 4 };
    sw_zfit_params p;
    params(&p, N, 1.0, 0.0, 6);
    double w[N * N];
    uint64_t seed = 3;
    for (int l = 0; l < N * N; l++)
        w[l] = 0.5 + unit_rand(&seed);
    p.weights = w;
    p.max_frames = F;
    int drop = 5 * N + 6, drop2 = 7 * N + 3; /* two lit lenslets */
    sw_zfit_plan *plan = create_ok(&p);
    /* one lenslet's weight 0: the same as leaving it out */
    double w0[N * N];
    memcpy(w0, w, sizeof w);
    w0[drop] = 0.0;
    p.weights = w0;
    sw_zfit_plan *plan0 = create_ok(&p);
    assert_int_equal(sw_zfit_used(plan0), sw_zfit_used(plan) - 1);
    w0[drop2] = 0.0;
    sw_zfit_plan *plan00 = create_ok(&p);
    w0[drop2] = w[drop2];
    p.weights = w;
    uint8_t mask[N * N];
    memset(mask, 1, sizeof mask);
    mask[drop] = 0;
    p.geometry.valid = mask;
    sw_zfit_plan *masked = create_ok(&p);
    p.geometry.valid = NULL;
    int J = sw_zfit_terms(plan), n = sw_zfit_slopes(plan);
    int kd = drop, kd2 = drop2; /* no mask: slope index = lenslet index */
    float *s = malloc((size_t)F * 2 * n * sizeof(float));
    float *sm = malloc(2 * (n - 1) * sizeof(float));
    for (int i = 0; i < F * 2 * n; i++)
        s[i] = (float)(unit_rand(&seed) - 0.5);
    for (int k = 0, t = 0; k < n; k++) {
        if (k == kd)
            continue;
        sm[t] = s[k];
        sm[n - 1 + t] = s[n + k];
        t++;
    }
    double c0[28], cm[28], r0, rm;
    assert_int_equal(sw_zfit_run(plan0, s, NULL, 1, SW_MEM_HOST, c0, &r0), SW_OK);
    assert_int_equal(sw_zfit_run(masked, sm, NULL, 1, SW_MEM_HOST, cm, &rm), SW_OK);
    assert_true(max_diff(c0, cm, J) <= 1e-12 * max_abs(c0, J));
    assert_near(r0, rm, 1e-12 * r0);
    /* the weights matter: the weighted fit differs from the unweighted one */
    double cw[28];
    assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_HOST, cw, NULL), SW_OK);
    sw_zfit_params pu;
    params(&pu, N, 1.0, 0.0, 6);
    sw_zfit_plan *unw = create_ok(&pu);
    double cu[28];
    assert_int_equal(sw_zfit_run(unw, s, NULL, 1, SW_MEM_HOST, cu, NULL), SW_OK);
    assert_true(max_diff(cw, cu, J) > 1e-6 * max_abs(cu, J));
    sw_zfit_destroy(unw);

    /* invalid lenslets per frame: frame 1 flags `drop` 0 (and its slope is garbage), frame 2
     * has a NaN slope at `drop`, frame 3 both (drop flagged, drop2 NaN); frame 0 is clean */
    uint8_t valid[F * N * N];
    memset(valid, 1, sizeof valid);
    valid[1 * N * N + drop] = 0;
    s[1 * 2 * n + kd] = 1e6f;
    s[2 * 2 * n + n + kd] = NAN;
    valid[3 * N * N + drop] = 0;
    s[3 * 2 * n + kd2] = NAN;
    double cb[F * 28], rb[F], ref[28], rr;
    assert_int_equal(sw_zfit_run(plan, s, valid, F, SW_MEM_HOST, cb, rb), SW_OK);
    assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_HOST, ref, &rr), SW_OK);
    assert_true(max_diff(cb, ref, J) <= 1e-12 * max_abs(ref, J));
    assert_near(rb[0], rr, 1e-12 * rr);
    for (int f = 1; f < F; f++) {
        sw_zfit_plan *q = f < 3 ? plan0 : plan00;
        assert_int_equal(sw_zfit_run(q, s + f * 2 * n, NULL, 1, SW_MEM_HOST, ref, &rr), SW_OK);
        double d = max_diff(cb + f * J, ref, J) / max_abs(ref, J);
        if (!(d <= 1e-10))
            fail_msg("frame %d: relative difference %g from the plan without the lenslet", f, d);
        assert_near(rb[f], rr, 1e-10 * rr);
    }

    /* a frame left with too few slopes: NaN, SW_OK, the other frames fitted */
    memset(valid + 2 * N * N, 0, N * N);
    assert_int_equal(sw_zfit_run(plan, s, valid, 3, SW_MEM_HOST, cb, rb), SW_OK);
    assert_true(isnan(cb[2 * J + 1]) && isnan(rb[2]));
    assert_true(cb[2 * J] == 0.0);
    assert_true(isfinite(cb[J + 1]) && isfinite(rb[0]));

    free(s);
    free(sm);
    sw_zfit_destroy(plan);
    sw_zfit_destroy(plan0);
    sw_zfit_destroy(plan00);
    sw_zfit_destroy(masked);
}

/* ------------------------------------------------------------------ truncation */

static void test_truncation(void **state)
{
    (void)state;
    sw_zfit_params p;
    params(&p, 12, 1.0, 0.0, 6);
    sw_zfit_plan *full = create_ok(&p);
    p.truncate = 3;
    sw_zfit_plan *trunc = create_ok(&p);
    int J = sw_zfit_terms(full), n = sw_zfit_slopes(full);
    float *s = malloc(2 * n * sizeof(float));
    uint64_t seed = 11;
    for (int i = 0; i < 2 * n; i++)
        s[i] = (float)(unit_rand(&seed) - 0.5);
    double cf[28], ct[28], rf, rt;
    assert_int_equal(sw_zfit_run(full, s, NULL, 1, SW_MEM_HOST, cf, &rf), SW_OK);
    assert_int_equal(sw_zfit_run(trunc, s, NULL, 1, SW_MEM_HOST, ct, &rt), SW_OK);
    /* truncated SVD: c_t is the projection of c_f on the kept right singular vectors, so
     * c_t . (c_f - c_t) = 0 and |c_t| < |c_f|; the residual grows */
    double dot = 0.0, nt = 0.0, nf = 0.0;
    for (int j = 1; j < J; j++) {
        dot += ct[j] * (cf[j] - ct[j]);
        nt += ct[j] * ct[j];
        nf += cf[j] * cf[j];
    }
    assert_true(fabs(dot) <= 1e-10 * nf);
    assert_true(nt < nf * (1 - 1e-9));
    assert_true(rt > rf);
    /* truncating everything is refused, keeping one value is not */
    p.truncate = J - 1;
    sw_zfit_plan *bad = NULL;
    assert_int_equal(sw_zfit_create(ctx, &p, &bad), SW_EINVAL);
    assert_null(bad);
    assert_non_null(strstr(sw_context_error(ctx), "truncate"));
    p.truncate = J - 2;
    sw_zfit_plan *one = create_ok(&p);
    sw_zfit_destroy(one);
    free(s);
    sw_zfit_destroy(full);
    sw_zfit_destroy(trunc);
}

/* ------------------------------------------------------------------ bad input */

static void expect_create_fails(const sw_zfit_params *p, const char *word)
{
    sw_zfit_plan *plan = (sw_zfit_plan *)&plan; /* must be reset to NULL */
    sw_status st = sw_zfit_create(ctx, p, &plan);
    if (st != SW_EINVAL)
        fail_msg("expected SW_EINVAL (%s), got %d", word, (int)st);
    assert_null(plan);
    if (!strstr(sw_context_error(ctx), word))
        fail_msg("message '%s' does not mention '%s'", sw_context_error(ctx), word);
}

static void test_bad_input(void **state)
{
    (void)state;
    sw_zfit_params p, q;
    params(&p, 10, 1.0, 0.0, 6);
    q = p;
    q.max_order = 11;
    expect_create_fails(&q, "max_order");
    q.max_order = 0;
    expect_create_fails(&q, "max_order");
    /* order too high for the subapertures: a 3 x 3 grid has 18 slopes < 27 unknowns */
    params(&q, 3, 1.4, 0.0, 6);
    expect_create_fails(&q, "unknowns");
    /* singular geometry: one row of lenslets through the pupil's centre (symmetric about it)
     * cannot tell Y^2 from a tilt */
    params(&q, 11, 1.0, 0.0, 2);
    uint8_t row[121] = {0};
    for (int ix = 0; ix < 11; ix++)
        row[5 * 11 + ix] = 1;
    q.geometry.valid = row;
    expect_create_fails(&q, "singular");
    double w[100];
    for (int l = 0; l < 100; l++)
        w[l] = 1.0;
    q = p;
    w[17] = NAN;
    q.weights = w;
    expect_create_fails(&q, "weight");
    w[17] = -1.0;
    expect_create_fails(&q, "weight");
    q = p;
    q.pupil_radius_px = 0.0;
    expect_create_fails(&q, "radius");
    q.pupil_radius_px = NAN;
    expect_create_fails(&q, "radius");
    q = p;
    q.pupil_cx_px = INFINITY;
    expect_create_fails(&q, "centre");
    q = p;
    q.obscuration = 1.0;
    expect_create_fails(&q, "obscuration");
    q = p;
    q.geometry.pitch_px = -1.0;
    expect_create_fails(&q, "");
    q = p;
    q.max_frames = 0;
    expect_create_fails(&q, "max_frames");
    q = p;
    q.method = (sw_zfit_method)7;
    expect_create_fails(&q, "method");
    q = p;
    q.layout = (sw_slope_layout)5;
    expect_create_fails(&q, "layout");
    q = p;
    q.min_illum = 1.5;
    expect_create_fails(&q, "min_illum");
    /* a pupil away from every lenslet */
    q = p;
    q.pupil_cx_px = 1e5;
    expect_create_fails(&q, "unknowns");
    assert_int_equal(sw_zfit_create(ctx, NULL, NULL), SW_EINVAL);

    /* run: outputs untouched on error */
    p.max_frames = 2;
    sw_zfit_plan *plan = create_ok(&p);
    int n = sw_zfit_slopes(plan), J = sw_zfit_terms(plan);
    float *s = calloc(3 * 2 * n, sizeof(float));
    double c[3 * 28], r[3];
    for (int i = 0; i < 3 * J; i++)
        c[i] = 42.0;
    r[0] = r[1] = r[2] = 42.0;
    assert_int_equal(sw_zfit_run(plan, s, NULL, 3, SW_MEM_HOST, c, r), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "max_frames"));
    assert_int_equal(sw_zfit_run(plan, s, NULL, 0, SW_MEM_HOST, c, r), SW_EINVAL);
    assert_int_equal(sw_zfit_run(plan, NULL, NULL, 1, SW_MEM_HOST, c, r), SW_EINVAL);
    assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_HOST, NULL, r), SW_EINVAL);
    assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_DEVICE, c, r), SW_EINVAL);
    assert_int_equal(sw_zfit_run(plan, s, NULL, 1, (sw_memory)9, c, r), SW_EINVAL);
    assert_int_equal(sw_zfit_run(NULL, s, NULL, 1, SW_MEM_HOST, c, r), SW_EINVAL);
    for (int i = 0; i < 3 * J; i++)
        assert_true(c[i] == 42.0);
    assert_true(r[0] == 42.0 && r[1] == 42.0);
    /* zero slopes fit to zero */
    assert_int_equal(sw_zfit_run(plan, s, NULL, 2, SW_MEM_HOST, c, r), SW_OK);
    assert_true(max_abs(c, 2 * J) == 0.0 && r[0] == 0.0);
    assert_true(sw_zfit_illum(plan, -1) == -1.0 && sw_zfit_illum(plan, n) == -1.0);
    free(s);
    sw_zfit_destroy(plan);
    sw_zfit_destroy(NULL);
}

/* The default parameters make a plan: the inscribed pupil, 100 lenslets, order 6. */
static void test_defaults(void **state)
{
    (void)state;
    sw_zfit_params p;
    sw_zfit_params_default(&p);
    assert_int_equal(p.max_order, 6);
    assert_true(p.method == SW_ZFIT_PINV && p.max_frames == 1 && p.min_illum == 0.5);
    sw_zfit_plan *plan = create_ok(&p);
    assert_int_equal(sw_zfit_slopes(plan), 100);
    assert_int_equal(sw_zfit_terms(plan), 28);
    /* inscribed circle of a 10 x 10 grid: the 4 corner lenslets of each corner group dark */
    int used = sw_zfit_used(plan);
    assert_true(used > 60 && used < 100);
    /* symmetric: illumination of lenslet (ix, iy) equals that of (9 - ix, iy) and (ix, 9 - iy) */
    for (int l = 0; l < 100; l++) {
        int ix = l % 10, iy = l / 10;
        assert_near(sw_zfit_illum(plan, l), sw_zfit_illum(plan, iy * 10 + 9 - ix), 1e-13);
        assert_near(sw_zfit_illum(plan, l), sw_zfit_illum(plan, (9 - iy) * 10 + ix), 1e-13);
    }
    sw_zfit_destroy(plan);
}

/* ------------------------------------------------------------------ the SH simulator */

static void test_simulator(void **state)
{
    (void)state;
    enum { N = 14 };
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.geom.nx = sp.geom.ny = N;
    sp.geom.pitch_px = PITCH;
    sp.geom.pixel_um = PIXEL;
    sp.geom.focal_mm = FOCAL;
    sp.width = sp.height = (int)(N * PITCH);
    sp.samples = 64;
    double R_um = 0.98 * N * PITCH * PIXEL / 2.0;
    sp.pupil = sw_pupil_circle(2.0 * R_um);
    sw_shsim *sim = NULL;
    assert_int_equal(sw_shsim_create(ctx, &sp, &sim), SW_OK);
    int J = sw_zernike_count(6);
    double c[28];
    random_coef(c, J, 77, 0.1);
    assert_int_equal(sw_shsim_add_zernike(sim, c, J, R_um), SW_OK);
    sw_sh_truth t;
    assert_int_equal(sw_shsim_truth(sim, &t), SW_OK);

    sw_zfit_params p;
    params(&p, N, 0.98, 0.0, 6);
    p.pupil_radius_px = R_um / PIXEL;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: the fully lit lenslets; pass 1: all lit to >= 0.5 */
        uint8_t mask[N * N];
        for (int l = 0; l < N * N; l++)
            mask[l] = (uint8_t)(pass ? isfinite(t.x_px[l]) : fully_lit(&p, l));
        p.geometry.valid = mask;
        sw_zfit_plan *plan = create_ok(&p);
        int n = sw_zfit_slopes(plan);
        float *s = malloc(2 * n * sizeof(float));
        for (int l = 0, k = 0; l < N * N; l++) {
            if (!mask[l])
                continue;
            s[k] = (float)(t.x_px[l] - t.ref_x_px[l]);
            s[n + k] = (float)(t.y_px[l] - t.ref_y_px[l]);
            k++;
        }
        double fit[28];
        assert_int_equal(sw_zfit_run(plan, s, NULL, 1, SW_MEM_HOST, fit, NULL), SW_OK);
        double err = max_diff(fit, c, J) / max_abs(c, J);
        /* the simulator's gradient: central differences on 64 samples per lenslet, the lit
         * area's coverage weights on cut lenslets; measured 1.3e-4 (full) and 1.6e-4 (all) */
        double tol = pass ? 1e-3 : 5e-4;
        print_message("simulator pass %d: relative error %.3g\n", pass, err);
        if (!(err < tol))
            fail_msg("pass %d: relative error %g above %g", pass, err, tol);
        free(s);
        sw_zfit_destroy(plan);
    }
    sw_sh_truth_free(&t);
    sw_shsim_destroy(sim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_region_integrals),  cmocka_unit_test(test_roundtrip_circular),
        cmocka_unit_test(test_roundtrip_annular), cmocka_unit_test(test_roundtrip_partial),
        cmocka_unit_test(test_region_tangent),    cmocka_unit_test(test_pinv_qr_batch_layout),
        cmocka_unit_test(test_residual_direct),   cmocka_unit_test(test_weights_and_invalid),
        cmocka_unit_test(test_truncation),        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_defaults),          cmocka_unit_test(test_simulator),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
