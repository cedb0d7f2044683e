/*
 * The deformable-mirror model of the loop stage (loop.h, src/loop/dm.c; seed 002 section 4):
 * the influence profiles (values at 0, 1 and 2 pitches, symmetry, monotony, a continuous slope at
 * one pitch), the lattice grid, the shaper (a single poke, and random commands against the direct
 * double sum of Eq. 12), the projector (Eq. 13-15: a window projection gives back the commands of
 * a smooth mirror shape; the global projection satisfies its normal equations
 * F^T (B c - F u) = lambda u, with F and B built here from sw_dm_profile and sw_sabre_eval) and
 * bad input.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

static const double couplings[] = {0.05, 0.2, 0.3, 0.5, 0.7, 0.95};
#define NCOUPLINGS ((int)(sizeof couplings / sizeof couplings[0]))

/* ------------------------------------------------------------------ profile */

/* OOMAO's "monotonic" curve (influenceFunction.m; loop.h), evaluated here independently of
 * dm.c: the two cubic Bezier segments in Bernstein form from their control points, X(tau) = x
 * solved by bisection. */
static const double oomao_p[7][2] = {{0.0, 1.0}, {0.2, 1.0}, {0.4, 0.7}, {0.6, 0.4},
                                     {0.8, 0.1}, {1.0, 0.0}, {2.0, 0.0}};

static double bernstein(int seg, int axis, double t)
{
    const double(*q)[2] = oomao_p + 3 * seg, u = 1.0 - t;
    return u * u * u * q[0][axis] + 3 * u * u * t * q[1][axis] + 3 * u * t * t * q[2][axis] +
           t * t * t * q[3][axis];
}

static double curve_y(double x) /* the curve's y at abscissa x (0 beyond 2) */
{
    if (x >= 2.0)
        return 0.0;
    const int seg = x > 0.6;
    double lo = 0.0, hi = 1.0;
    for (int i = 0; i < 100; i++) {
        const double mid = 0.5 * (lo + hi);
        if (bernstein(seg, 0, mid) < x)
            lo = mid;
        else
            hi = mid;
    }
    return bernstein(seg, 1, 0.5 * (lo + hi));
}

static double curve_scale(double c) /* the abscissa where the curve's y is c */
{
    double lo = 0.0, hi = 2.0;
    for (int i = 0; i < 100; i++) {
        const double mid = 0.5 * (lo + hi);
        if (curve_y(mid) > c)
            lo = mid;
        else
            hi = mid;
    }
    return 0.5 * (lo + hi);
}

static void test_profile_values(void **state)
{
    (void)state;
    for (int k = 0; k < NCOUPLINGS; k++) {
        const double c = couplings[k];
        for (int f = 0; f < 2; f++) {
            const sw_dm_influence inf = (sw_dm_influence)f;
            assert_near(sw_dm_profile(inf, c, 0.0), 1.0, 1e-15);
            assert_near(sw_dm_profile(inf, c, 1.0), c, 1e-15);
            assert_near(sw_dm_profile(inf, c, -1.0), c, 1e-15);
            /* symmetric */
            for (double r = 0.0; r < 3.0; r += 0.037)
                assert_true(sw_dm_profile(inf, c, r) == sw_dm_profile(inf, c, -r));
        }
        /* Gaussian: c^(r^2) at a few r */
        assert_near(sw_dm_profile(SW_DM_GAUSSIAN, c, 2.0), c * c * c * c, 1e-15);
        assert_near(sw_dm_profile(SW_DM_GAUSSIAN, c, 0.5), pow(c, 0.25), 1e-15);
        assert_near(sw_dm_profile(SW_DM_GAUSSIAN, c, 1.5), exp(2.25 * log(c)), 1e-14);
        /* Bezier: OOMAO's curve stretched to pass through (1, c), everywhere on its support and
         * zero beyond 2 / s */
        const double s = curve_scale(c);
        for (double r = 0.0; r < 2.0 / s + 1.0; r += 0.0173)
            assert_near(sw_dm_profile(SW_DM_BEZIER, c, r), curve_y(r * s), 1e-13);
        assert_true(sw_dm_profile(SW_DM_BEZIER, c, 2.0 / s * (1 + 1e-12)) == 0.0);
        assert_true(sw_dm_profile(SW_DM_BEZIER, c, 2.0 / s * 0.99) > 0.0);
        assert_true(sw_dm_profile(SW_DM_BEZIER, c, -40.0) == 0.0);
    }
    /* Bezier at 0.5, 1.5, 2, 2.5 and 3 pitches: the curve solved in another language (SciPy's
     * brentq on the same control points; OOMAO's own spline through 201 samples of the curve
     * agrees to 3e-6), and the reach 2 / s */
    static const double ref[4][6] = {
        {0.05, 0.43295415741592114, 0.0028379418342251235, 0.0, 0.0, 0.0},
        {0.3, 0.7693718622655995, 0.08423314409019689, 0.024001999471822296, 0.0041517904966835925,
         0.0},
        {0.5, 0.8487036844182666, 0.18270749277722445, 0.06911535688526751, 0.02550398292145059,
         0.007176293193098755},
        {0.7, 0.9145725196269481, 0.4188473233574675, 0.19458095733227324, 0.0943047108350619,
         0.04667540371358917},
    };
    static const double rs[5] = {0.5, 1.5, 2.0, 2.5, 3.0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++)
            assert_near(sw_dm_profile(SW_DM_BEZIER, ref[i][0], rs[j]), ref[i][j + 1], 1e-13);
    /* the reach: 2 / s = 1.730 pitches at c = 0.05, 2.968 at 0.3, 3.752 at 0.5 */
    assert_near(2.0 / curve_scale(0.05), 2.0 / 1.1560414606159066, 1e-12);
    assert_true(sw_dm_profile(SW_DM_BEZIER, 0.3, 2.96) > 0.0);
    assert_true(sw_dm_profile(SW_DM_BEZIER, 0.3, 2.97) == 0.0);
    assert_true(sw_dm_profile(SW_DM_BEZIER, 0.5, 3.75) > 0.0);
    assert_true(sw_dm_profile(SW_DM_BEZIER, 0.5, 3.76) == 0.0);
    /* NaN outside (0, 1) and for a NaN r */
    const double bad[] = {0.0, 1.0, -0.2, 1.5, NAN, INFINITY};
    for (int i = 0; i < 6; i++) {
        assert_true(isnan(sw_dm_profile(SW_DM_GAUSSIAN, bad[i], 0.5)));
        assert_true(isnan(sw_dm_profile(SW_DM_BEZIER, bad[i], 0.5)));
    }
    assert_true(isnan(sw_dm_profile(SW_DM_GAUSSIAN, 0.3, NAN)));
    assert_true(isnan(sw_dm_profile(SW_DM_BEZIER, 0.3, NAN)));
    assert_true(isnan(sw_dm_profile((sw_dm_influence)7, 0.3, 0.5)));
}

/* Monotone, continuous, C1 at one pitch (Gaussian: slope 2 c ln c) and, for Bezier, where its
 * two segments meet (0.6 / s pitches), flat at 0 (both) and at the end of the Bezier support. */
static void test_profile_shape(void **state)
{
    (void)state;
    const double h = 1e-6;
    for (int k = 0; k < NCOUPLINGS; k++) {
        const double c = couplings[k];
        const double s = curve_scale(c), end = 2.0 / s;
        for (int f = 0; f < 2; f++) {
            const sw_dm_influence inf = (sw_dm_influence)f;
            double prev = sw_dm_profile(inf, c, 0.0);
            for (int i = 1; i <= 16000; i++) {
                const double v = sw_dm_profile(inf, c, i * 1e-3);
                assert_true(v <= prev);
                assert_true(v >= 0.0);
                assert_true(prev - v < 0.01); /* no jump larger than the steepest slope allows */
                prev = v;
            }
            const double f1 = sw_dm_profile(inf, c, 1.0);
            const double left = (f1 - sw_dm_profile(inf, c, 1.0 - h)) / h;
            const double right = (sw_dm_profile(inf, c, 1.0 + h) - f1) / h;
            assert_near(left, right, 1e-5);
            if (inf == SW_DM_GAUSSIAN)
                assert_near(left, 2.0 * c * log(c), 1e-5);
            /* flat at 0 */
            assert_near((sw_dm_profile(inf, c, h) - 1.0) / h, 0.0, 1e-5);
        }
        /* Bezier: C1 where the segments meet, flat and continuous at the end of the support */
        const double j = 0.6 / s, fj = sw_dm_profile(SW_DM_BEZIER, c, j);
        assert_near((fj - sw_dm_profile(SW_DM_BEZIER, c, j - h)) / h,
                    (sw_dm_profile(SW_DM_BEZIER, c, j + h) - fj) / h, 1e-5);
        assert_near(sw_dm_profile(SW_DM_BEZIER, c, end - h) / h, 0.0, 1e-5);
        /* strictly decreasing inside the support */
        for (int i = 1; i < 200; i++) {
            const double r = end * i / 200.0;
            assert_true(sw_dm_profile(SW_DM_BEZIER, c, r + 0.002 * end) <
                        sw_dm_profile(SW_DM_BEZIER, c, r - 0.002 * end));
        }
    }
}

static void test_strings_defaults(void **state)
{
    (void)state;
    sw_dm_influence f = SW_DM_GAUSSIAN;
    assert_string_equal(sw_dm_influence_string(SW_DM_GAUSSIAN), "gaussian");
    assert_string_equal(sw_dm_influence_string(SW_DM_BEZIER), "bezier");
    assert_int_equal(sw_dm_influence_parse("Bezier", &f), SW_OK);
    assert_int_equal(f, SW_DM_BEZIER);
    assert_int_equal(sw_dm_influence_parse("gaussian", &f), SW_OK);
    assert_int_equal(f, SW_DM_GAUSSIAN);
    assert_int_equal(sw_dm_influence_parse("gauss", &f), SW_EINVAL);
    assert_int_equal(sw_dm_influence_parse(NULL, &f), SW_EINVAL);

    sw_dm_params dm;
    sw_dm_params_default(&dm);
    assert_int_equal(dm.nx, 0);
    assert_int_equal(dm.ny, 0);
    assert_int_equal(dm.influence, SW_DM_GAUSSIAN);
    assert_near(dm.coupling, 0.3, 0.0);
    assert_int_equal(sw_dm_check(ctx, &dm), SW_EINVAL); /* sizes must be set */
    dm.nx = 32;
    dm.ny = 1024;
    assert_int_equal(sw_dm_check(ctx, &dm), SW_OK);
    dm.ny = 1025;
    assert_int_equal(sw_dm_check(ctx, &dm), SW_EINVAL);
    dm.ny = 8;
    const double bad[] = {0.0, 1.0, NAN, -0.5};
    for (int i = 0; i < 4; i++) {
        dm.coupling = bad[i];
        assert_int_equal(sw_dm_check(ctx, &dm), SW_EINVAL);
        assert_true(strlen(sw_context_error(ctx)) > 0);
    }
    dm.coupling = 0.3;
    dm.influence = (sw_dm_influence)5;
    assert_int_equal(sw_dm_check(ctx, &dm), SW_EINVAL);
    assert_int_equal(sw_dm_check(ctx, NULL), SW_EINVAL);

    sw_projector_params pp;
    sw_projector_params_default(&pp);
    assert_int_equal(pp.samples, 4);
    assert_near(pp.regularisation, 1e-6, 0.0);
    assert_null(pp.square_mask);
    sw_dm_params_default(&dm);
    dm.nx = 10;
    dm.ny = 7;
    dm.influence = SW_DM_BEZIER;
    dm.coupling = 0.4;
    const sw_sabre_lattice lat = {12, 9, 1, 1};
    sw_projector_params_global(&pp, &dm, &lat);
    assert_int_equal(pp.nax, 11);
    assert_int_equal(pp.nay, 8);
    assert_near(pp.ax0, -0.5, 0.0);
    assert_near(pp.ay0, -0.5, 0.0);
    assert_int_equal(pp.lattice.sx, 12);
    assert_int_equal(pp.lattice.offy, 1);
    assert_int_equal(pp.influence, SW_DM_BEZIER);
    assert_near(pp.coupling, 0.4, 0.0);
    sw_projector_params_window(&pp, &dm, 6);
    assert_int_equal(pp.nax, 6);
    assert_int_equal(pp.nay, 6);
    assert_near(pp.ax0, 0.5, 0.0);
    assert_int_equal(pp.lattice.sx, 6);
    assert_int_equal(pp.lattice.sy, 6);
    assert_int_equal(pp.lattice.offx, 0);
    assert_int_equal(pp.influence, SW_DM_BEZIER);
}

static void test_lattice_grid(void **state)
{
    (void)state;
    const sw_lattice_grid g = sw_lattice_grid_lenslets(4, 3, 5, 2);
    assert_int_equal(g.width, 24);
    assert_int_equal(g.height, 19);
    assert_near(g.step, 0.2, 1e-15);
    /* samples margin .. margin + nx q - 1 cover [-1/2, nx - 1/2] exactly: their centres are half
     * a step inside the footprint's edges */
    assert_near(g.x0 + 2 * g.step, -0.5 + 0.1, 1e-12);
    assert_near(g.x0 + (2 + 4 * 5 - 1) * g.step, 4 - 0.5 - 0.1, 1e-12);
    assert_near(g.y0 + (2 + 3 * 5 - 1) * g.step, 3 - 0.5 - 0.1, 1e-12);
    const sw_lattice_grid z = sw_lattice_grid_lenslets(4, 3, 0, 2);
    assert_int_equal(z.width, 0);
}

/* ------------------------------------------------------------------ shaper */

/* One actuator pushed: 1 at its own position, c at its neighbours, f(dx) f(dy) elsewhere. */
static void test_shaper_poke(void **state)
{
    (void)state;
    for (int f = 0; f < 2; f++) {
        sw_dm_params dm;
        sw_dm_params_default(&dm);
        dm.nx = 6;
        dm.ny = 5;
        dm.influence = (sw_dm_influence)f;
        dm.coupling = 0.35;
        /* samples exactly at the actuators: (i - 1/2, k - 1/2) */
        sw_lattice_grid g = {7, 6, -0.5, -0.5, 1.0};
        sw_dm_shaper *s = NULL;
        assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_OK);
        float u[42], out[42];
        memset(u, 0, sizeof u);
        const int px = 3, py = 2;
        u[py * 7 + px] = 1.0f;
        assert_int_equal(sw_dm_shaper_run(s, u, SW_MEM_HOST, out), SW_OK);
        assert_near(out[py * 7 + px], 1.0, 1e-6);
        assert_near(out[py * 7 + px + 1], 0.35, 1e-6);
        assert_near(out[py * 7 + px - 1], 0.35, 1e-6);
        assert_near(out[(py + 1) * 7 + px], 0.35, 1e-6);
        assert_near(out[(py - 1) * 7 + px], 0.35, 1e-6);
        assert_near(out[(py + 1) * 7 + px + 1], 0.35 * 0.35, 1e-6);
        for (int k = 0; k < 6; k++)
            for (int i = 0; i < 7; i++) {
                const double e = sw_dm_profile(dm.influence, 0.35, i - px) *
                                 sw_dm_profile(dm.influence, 0.35, k - py);
                assert_near(out[k * 7 + i], e, 1e-6);
            }
        if (f == SW_DM_BEZIER) /* three pitches away, inside its reach (3.15 pitches at 0.35) */
            assert_true(out[py * 7 + px + 3] > 0.0f && out[py * 7 + px + 3] < 0.01f);
        /* a NaN command gives a NaN sample there */
        u[py * 7 + px] = NAN;
        assert_int_equal(sw_dm_shaper_run(s, u, SW_MEM_HOST, out), SW_OK);
        assert_true(isnan(out[py * 7 + px]));
        sw_dm_shaper_destroy(s);
    }
}

/* Random commands on a fine grid with a margin: the surface equals the direct double sum of
 * Eq. 12 to float accuracy (1e-5 of max |u|; the sum's terms are at most 1e-7 relative each). */
static void test_shaper_random(void **state)
{
    (void)state;
    uint64_t seed = 11;
    for (int f = 0; f < 2; f++) {
        sw_dm_params dm;
        sw_dm_params_default(&dm);
        dm.nx = 9;
        dm.ny = 7;
        dm.influence = (sw_dm_influence)f;
        dm.coupling = f ? 0.45 : 0.3;
        const sw_lattice_grid g = sw_lattice_grid_lenslets(dm.nx, dm.ny, 3, 2);
        sw_dm_shaper *s = NULL;
        assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_OK);
        const int nax = dm.nx + 1, nay = dm.ny + 1;
        float *u = malloc(sizeof(float) * nax * nay);
        float *out = malloc(sizeof(float) * g.width * g.height);
        double umax = 0.0;
        for (int a = 0; a < nax * nay; a++) {
            u[a] = (float)(2.0 * unit_rand(&seed) - 1.0);
            umax = fmax(umax, fabs(u[a]));
        }
        assert_int_equal(sw_dm_shaper_run(s, u, SW_MEM_HOST, out), SW_OK);
        double worst = 0.0;
        for (int k = 0; k < g.height; k++)
            for (int i = 0; i < g.width; i++) {
                const double x = g.x0 + i * g.step, y = g.y0 + k * g.step;
                double e = 0.0;
                for (int b = 0; b < nay; b++)
                    for (int a = 0; a < nax; a++)
                        e += u[b * nax + a] *
                             sw_dm_profile(dm.influence, dm.coupling, x - (a - 0.5)) *
                             sw_dm_profile(dm.influence, dm.coupling, y - (b - 0.5));
                worst = fmax(worst, fabs(out[k * g.width + i] - e));
            }
        assert_true(worst <= 1e-5 * umax);
        free(u);
        free(out);
        sw_dm_shaper_destroy(s);
    }
}

static void test_shaper_bad(void **state)
{
    (void)state;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = 4;
    dm.ny = 4;
    sw_lattice_grid g = sw_lattice_grid_lenslets(4, 4, 2, 0);
    sw_dm_shaper *s = (sw_dm_shaper *)&g; /* must be reset to NULL on failure */
    g.width = 0;
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_EINVAL);
    assert_null(s);
    g.width = 8193;
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_EINVAL);
    g.width = 8;
    g.step = 0.0;
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_EINVAL);
    g.step = NAN;
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_EINVAL);
    g.step = 0.5;
    dm.coupling = 1.0;
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_EINVAL);
    dm.coupling = 0.3;
    dm.nx = 0;
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_EINVAL);
    dm.nx = 4;
    assert_int_equal(sw_dm_shaper_create(ctx, NULL, &g, &s), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, NULL, &s), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, NULL), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_create(ctx, &dm, &g, &s), SW_OK);
    float u[25] = {0}, out[64];
    assert_int_equal(sw_dm_shaper_run(s, NULL, SW_MEM_HOST, out), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_run(s, u, SW_MEM_HOST, NULL), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_run(s, u, SW_MEM_DEVICE, out), SW_EINVAL); /* CPU plan */
    assert_int_equal(sw_dm_shaper_run(s, u, (sw_memory)9, out), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_run(NULL, u, SW_MEM_HOST, out), SW_EINVAL);
    assert_int_equal(sw_dm_shaper_run(s, u, SW_MEM_PINNED, out), SW_OK);
    for (int i = 0; i < 64; i++)
        assert_true(out[i] == 0.0f);
    sw_dm_shaper_destroy(s);
    sw_dm_shaper_destroy(NULL);
}

/* ------------------------------------------------------------------ projector */

/* The mirror surface of commands u on an nax x nay grid at (ax0 + i, ay0 + j), at (x, y). */
static double surface(const sw_projector_params *p, const double *u, double x, double y)
{
    double s = 0.0;
    for (int j = 0; j < p->nay; j++) {
        const double fy = sw_dm_profile(p->influence, p->coupling, y - (p->ay0 + j));
        for (int i = 0; i < p->nax; i++)
            s +=
                u[j * p->nax + i] * sw_dm_profile(p->influence, p->coupling, x - (p->ax0 + i)) * fy;
    }
    return s;
}

/*
 * Window projection (Eq. 14-15): the spline whose vertex values are a smooth mirror surface
 * (the surface of smooth commands u0, sampled at the window's corners and centres) projects back
 * onto commands close to u0. The spline is not the surface (it is linear between vertices half a
 * diagonal apart, one pitch along the window's rim), so the match is not exact. Measured relative
 * RMS errors, w = 8, coupling 0.3 (Gaussian / Bezier): 3.5e-2 / 4.0e-2 over all actuators,
 * 7.6e-3 / 8.5e-3 over the interior ones (not on the rim). The rim actuators carry most of it:
 * with no actuators beyond the window, the surface falls off steeply within the last half pitch
 * (from ~1.6 to ~0.8 times a constant command), where the linear spline under-reads the curved
 * surface by a few per cent, and the coupled influence functions pass some of that inward.
 * Constant and tilted commands give the same figures, so it is the rim, not the command's
 * shape. Bounds: 6e-2 overall, 1.5e-2 interior; commands made of noise, or a P that maps a
 * vertex to the wrong actuator, miss by tens of per cent.
 */
static void test_projector_window(void **state)
{
    (void)state;
    const int w = 8;
    for (int f = 0; f < 2; f++) {
        sw_dm_params dm;
        sw_dm_params_default(&dm);
        dm.influence = (sw_dm_influence)f;
        dm.coupling = 0.3;
        sw_projector_params pp;
        sw_projector_params_window(&pp, &dm, w);
        sw_projector *pr = NULL;
        assert_int_equal(sw_projector_create(ctx, &pp, &pr), SW_OK);
        int32_t rows = 0, cols = 0;
        const float *P = sw_projector_matrix(pr, &rows, &cols);
        assert_non_null(P);
        assert_int_equal(rows, w * w);
        assert_int_equal(cols, (w + 1) * (w + 1) + w * w);

        double u0[64];
        for (int j = 0; j < w; j++)
            for (int i = 0; i < w; i++) {
                const double x = i + 0.5, y = j + 0.5;
                u0[j * w + i] = 0.6 + 0.1 * x - 0.05 * y + 0.4 * sin(0.5 * x + 0.2) * cos(0.35 * y);
            }
        float *c = malloc(sizeof(float) * cols);
        for (int J = 0; J <= w; J++)
            for (int I = 0; I <= w; I++)
                c[J * (w + 1) + I] = (float)surface(&pp, u0, I, J);
        for (int J = 0; J < w; J++)
            for (int I = 0; I < w; I++)
                c[(w + 1) * (w + 1) + J * w + I] = (float)surface(&pp, u0, I + 0.5, J + 0.5);
        float u[64];
        assert_int_equal(sw_projector_run(pr, c, SW_MEM_HOST, u), SW_OK);
        double e2 = 0.0, n2 = 0.0, ei = 0.0, ni = 0.0, gemv = 0.0;
        for (int a = 0; a < w * w; a++) {
            const double d = u[a] - u0[a];
            e2 += d * d;
            n2 += u0[a] * u0[a];
            const int i = a % w, j = a / w;
            if (i > 0 && j > 0 && i < w - 1 && j < w - 1) {
                ei += d * d;
                ni += u0[a] * u0[a];
            }
            double pc = 0.0; /* the run is P c */
            for (int v = 0; v < cols; v++)
                pc += (double)P[(int64_t)a * cols + v] * c[v];
            gemv = fmax(gemv, fabs(pc - u[a]));
        }
        const double rel = sqrt(e2 / n2), rel_in = sqrt(ei / ni);
        print_message("window projection (%s): relative error %.3g, interior %.3g\n",
                      sw_dm_influence_string(dm.influence), rel, rel_in);
        assert_true(rel < 6e-2);
        assert_true(rel_in < 1.5e-2);
        assert_true(gemv < 1e-5);
        free(c);
        sw_projector_destroy(pr);
    }
}

/*
 * Global projection (Eq. 13) with regularisation: u = P c solves (F^T F + lambda I) u = F^T B c,
 * so F^T (B c - F u) = lambda u. F (the influence of every actuator at every fitting point,
 * from sw_dm_profile) and B c (sw_sabre_eval) are built here; lambda = regularisation x
 * trace(F^T F) / nact. u is formed from P in double, so the check sees P's float rounding only:
 * relative error (to |F^T B c|) below 1e-5 (measured 4e-8), where lambda u itself is ~1e-2 of it
 * (so a wrong lambda, a missing point or a wrong weight fails). With a square mask (an annulus),
 * only the masked squares' points count, and Bezier actuators no point reaches come out 0.
 */
static void check_normal_equations(const sw_projector_params *pp, uint64_t seed)
{
    sw_projector *pr = NULL;
    assert_int_equal(sw_projector_create(ctx, pp, &pr), SW_OK);
    int32_t nact = 0, nv = 0;
    const float *P = sw_projector_matrix(pr, &nact, &nv);
    assert_int_equal(nact, pp->nax * pp->nay);
    assert_int_equal(nv, (int32_t)sw_sabre_lattice_values(&pp->lattice));
    double *c = malloc(sizeof(double) * nv), *u = calloc(nact, sizeof(double));
    for (int v = 0; v < nv; v++)
        c[v] = 2.0 * unit_rand(&seed) - 1.0;
    for (int a = 0; a < nact; a++)
        for (int v = 0; v < nv; v++)
            u[a] += (double)P[(int64_t)a * nv + v] * c[v];

    const sw_sabre_lattice *l = &pp->lattice;
    const int q = pp->samples;
    double *g = calloc(nact, sizeof(double)), *ftb = calloc(nact, sizeof(double));
    double *row = malloc(sizeof(double) * nact);
    double trace = 0.0;
    int *seen = calloc(nact, sizeof(int));
    for (int J = 0; J < l->sy; J++)
        for (int I = 0; I < l->sx; I++) {
            if (pp->square_mask && !pp->square_mask[J * l->sx + I])
                continue;
            for (int b = 0; b < q; b++)
                for (int a = 0; a < q; a++) {
                    const double x = I + (a + 0.5) / q - l->offx, y = J + (b + 0.5) / q - l->offy;
                    const double bc = sw_sabre_eval(l, c, x, y);
                    double fu = 0.0;
                    for (int j = 0; j < pp->nay; j++)
                        for (int i = 0; i < pp->nax; i++) {
                            const int k = j * pp->nax + i;
                            row[k] = sw_dm_profile(pp->influence, pp->coupling, x - (pp->ax0 + i)) *
                                     sw_dm_profile(pp->influence, pp->coupling, y - (pp->ay0 + j));
                            fu += row[k] * u[k];
                            trace += row[k] * row[k];
                            seen[k] |= row[k] > 0.0;
                        }
                    for (int k = 0; k < nact; k++) {
                        g[k] += row[k] * (bc - fu);
                        ftb[k] += row[k] * bc;
                    }
                }
        }
    const double lambda = pp->regularisation * trace / nact;
    double err = 0.0, ref = 0.0, lam = 0.0, unseen = 0.0, umax = 0.0;
    int nunseen = 0;
    for (int k = 0; k < nact; k++) {
        nunseen += !seen[k];
        err = fmax(err, fabs(g[k] - lambda * u[k]));
        ref = fmax(ref, fabs(ftb[k]));
        lam = fmax(lam, fabs(lambda * u[k]));
        umax = fmax(umax, fabs(u[k]));
        if (!seen[k])
            unseen = fmax(unseen, fabs(u[k]));
    }
    print_message("normal equations: |F^T r - lambda u| %.3g, |lambda u| %.3g, |F^T B c| %.3g, "
                  "%d unseen actuators, max |u| there %.3g\n",
                  err, lam, ref, nunseen, unseen);
    assert_true(err <= 1e-5 * ref);
    assert_true(lam >= 1e-3 * ref); /* the regularisation term is really tested */
    assert_true(unseen <= 1e-6 * umax);
    if (pp->square_mask) /* the mask case is meant to have some */
        assert_true(nunseen > 0);
    free(c);
    free(u);
    free(g);
    free(ftb);
    free(row);
    free(seen);
    sw_projector_destroy(pr);
}

static void test_projector_global(void **state)
{
    (void)state;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = 6;
    dm.ny = 5;
    const sw_sabre_lattice lat = {8, 7, 1, 1}; /* an extended lattice around the array */
    sw_projector_params pp;
    for (int f = 0; f < 2; f++) {
        dm.influence = (sw_dm_influence)f;
        dm.coupling = f ? 0.4 : 0.3;
        sw_projector_params_global(&pp, &dm, &lat);
        pp.regularisation = 1e-2;
        check_normal_equations(&pp, 5 + f);
        pp.samples = 3;
        check_normal_equations(&pp, 7 + f);
    }
    /* an annular square mask (squares whose centre is 1.0 .. 2.6 pitches from the array's
     * centre) on a larger array, Bezier at coupling 0.05: the actuators near the array's corners
     * are beyond every fitting point's reach (1.73 pitches) and must come out 0 */
    dm.nx = 8;
    dm.ny = 8;
    dm.influence = SW_DM_BEZIER;
    dm.coupling = 0.05;
    const sw_sabre_lattice big = {10, 10, 1, 1};
    uint8_t mask[100];
    for (int J = 0; J < big.sy; J++)
        for (int I = 0; I < big.sx; I++) {
            const double x = I + 0.5 - big.offx - 3.5, y = J + 0.5 - big.offy - 3.5;
            const double r = sqrt(x * x + y * y);
            mask[J * big.sx + I] = r >= 1.0 && r <= 2.6;
        }
    sw_projector_params_global(&pp, &dm, &big);
    pp.square_mask = mask;
    pp.regularisation = 1e-2;
    check_normal_equations(&pp, 9);
}

static void test_projector_bad(void **state)
{
    (void)state;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = 4;
    dm.ny = 4;
    const sw_sabre_lattice lat = {4, 4, 0, 0};
    sw_projector_params good, p;
    sw_projector_params_global(&good, &dm, &lat);
    sw_projector *pr = (sw_projector *)&p;

    const double bad_c[] = {0.0, 1.0, NAN, -1.0};
    for (int i = 0; i < 4; i++) {
        p = good;
        p.coupling = bad_c[i];
        assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
        assert_null(pr);
    }
    p = good;
    p.nax = 0;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p = good;
    p.lattice.sx = 0;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p = good;
    p.samples = 0;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p.samples = 17;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p = good;
    p.regularisation = NAN;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p.regularisation = -1e-3;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p = good;
    p.ax0 = NAN;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p = good;
    p.influence = (sw_dm_influence)3;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    p = good;
    p.nax = 129;
    p.nay = 129; /* 16641 actuators: the dense normal matrix would exceed 2 GiB */
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "2 GiB"));
    uint8_t mask[16];
    memset(mask, 0, sizeof mask);
    p = good;
    p.square_mask = mask; /* no square: no fitting point */
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    /* actuators far from every fitting point and no regularisation: singular */
    p = good;
    p.influence = SW_DM_BEZIER;
    p.nax = 12;
    p.regularisation = 0.0;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    /* ... and all of them far: nothing seen */
    p = good;
    p.influence = SW_DM_BEZIER;
    p.ax0 = 40.0;
    assert_int_equal(sw_projector_create(ctx, &p, &pr), SW_EINVAL);
    assert_int_equal(sw_projector_create(ctx, NULL, &pr), SW_EINVAL);
    assert_int_equal(sw_projector_create(ctx, &good, NULL), SW_EINVAL);

    assert_int_equal(sw_projector_create(ctx, &good, &pr), SW_OK);
    float v[41], u[25];
    memset(v, 0, sizeof v);
    assert_int_equal(sw_projector_run(pr, NULL, SW_MEM_HOST, u), SW_EINVAL);
    assert_int_equal(sw_projector_run(pr, v, SW_MEM_HOST, NULL), SW_EINVAL);
    assert_int_equal(sw_projector_run(pr, v, SW_MEM_DEVICE, u), SW_EINVAL);
    assert_int_equal(sw_projector_run(NULL, v, SW_MEM_HOST, u), SW_EINVAL);
    int32_t r = -1, c = -1;
    assert_null(sw_projector_matrix(NULL, &r, &c));
    assert_int_equal(r, 0);
    sw_projector_destroy(pr);
    sw_projector_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_values),   cmocka_unit_test(test_profile_shape),
        cmocka_unit_test(test_strings_defaults), cmocka_unit_test(test_lattice_grid),
        cmocka_unit_test(test_shaper_poke),      cmocka_unit_test(test_shaper_random),
        cmocka_unit_test(test_shaper_bad),       cmocka_unit_test(test_projector_window),
        cmocka_unit_test(test_projector_global), cmocka_unit_test(test_projector_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
