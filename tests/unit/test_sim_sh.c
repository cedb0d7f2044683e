/*
 * The Shack-Hartmann simulator on the CPU (shsim.c): centroids of rendered spots against the
 * truth, the truth against analytic Zernike gradients averaged over each lenslet (Gauss-Legendre,
 * independent of the simulator's sampling), pure tilts, flux and illumination for straight,
 * annular, elliptical and offset pupils, the diffraction model's sinc^2 pattern and its centroids
 * (average-tilt theorem), phase screens through add_wavefront, determinism across runs and thread
 * counts, accumulation, the truth CSV, and bad input.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* 12 x 12 lenslets of 16.3 px from (3.7, 5.2), 5.5 um pixels, f = 3.5 mm, full aperture. */
static sw_shsim_params grid12(void)
{
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    p.geom.nx = p.geom.ny = 12;
    p.geom.pitch_px = 16.3;
    p.geom.x0 = 3.7;
    p.geom.y0 = 5.2;
    p.geom.pixel_um = 5.5;
    p.geom.focal_mm = 3.5;
    p.width = p.height = 210;
    return p;
}

static sw_shsim *make(sw_context *ctx, const sw_shsim_params *p)
{
    sw_shsim *plan = NULL;
    if (sw_shsim_create(ctx, p, &plan) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(ctx));
    return plan;
}

static sw_image new_image(const sw_shsim_params *p)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, p->width, p->height, SW_PIX_F32, &img), SW_OK);
    return img;
}

static void run(sw_shsim *plan, sw_image *img, int accumulate)
{
    if (sw_shsim_run(plan, img, accumulate) != SW_OK)
        fail_msg("sw_shsim_run: %s", sw_context_error(cpu));
}

static sw_sh_truth truth_of(sw_shsim *plan)
{
    sw_sh_truth t;
    if (sw_shsim_truth(plan, &t) != SW_OK)
        fail_msg("sw_shsim_truth: %s", sw_context_error(cpu));
    return t;
}

/* Centre of gravity over columns [x0, x1], rows [y0, y1] (clipped to the image). */
static double cog(const sw_image *img, int x0, int x1, int y0, int y1, double *cx, double *cy)
{
    double s = 0, sx = 0, sy = 0;
    for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < img->height; y++)
        for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < img->width; x++) {
            double v = sw_image_get(img, x, y);
            s += v;
            sx += v * x;
            sy += v * y;
        }
    *cx = sx / s;
    *cy = sy / s;
    return s;
}

static double image_sum(const sw_image *img)
{
    double s = 0;
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++)
            s += sw_image_get(img, x, y);
    return s;
}

static double image_max(const sw_image *img)
{
    double m = -INFINITY;
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++)
            m = fmax(m, sw_image_get(img, x, y));
    return m;
}

static double uniform(uint64_t seed, uint64_t i)
{
    sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, i);
    return sw_rng_u01(r.v[0], r.v[1]);
}

/* Random smooth wavefront: OSA j = 3 .. 14 (orders 2 to 4), coefficients uniform in +-amp. */
static void random_coefs(double *c, uint64_t seed, double amp)
{
    for (int j = 0; j < 15; j++)
        c[j] = j < 3 ? 0.0 : amp * (2.0 * uniform(seed, (uint64_t)j) - 1.0);
}

/* Lenslet (ix, iy)'s square in the pupil (um): [u0, u0 + p) x [v0, v0 + p). */
static void lens_square(const sw_shsim_params *p, int ix, int iy, double *u0, double *v0,
                        double *pu)
{
    *pu = p->geom.pitch_px * p->geom.pixel_um;
    *u0 = (ix - 0.5 * p->geom.nx) * *pu;
    *v0 = (iy - 0.5 * p->geom.ny) * *pu;
}

/* The mean of grad OPD over the square, OPD = -sum c_j Z_j((u - cu)/R, (v - cv)/R) (OSA sign), by 8
 * x 8 Gauss-Legendre points (exact for these polynomials), from zernike.h's analytic gradient. */
static void analytic_mean_gradient(const double *c, int count, double R, double cu, double cv,
                                   double u0, double v0, double side, double *gx, double *gy)
{
    static const double x8[4] = {0.1834346424956498, 0.5255324099163290, 0.7966664774136267,
                                 0.9602898564975363};
    static const double w8[4] = {0.3626837833783620, 0.3137066458778873, 0.2223810344533745,
                                 0.1012285362903763};
    double sx = 0, sy = 0;
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 8; b++) {
            const double xa = (a < 4 ? -x8[3 - a] : x8[a - 4]), wa = w8[a < 4 ? 3 - a : a - 4];
            const double xb = (b < 4 ? -x8[3 - b] : x8[b - 4]), wb = w8[b < 4 ? 3 - b : b - 4];
            const double u = u0 + 0.5 * side * (1 + xa), v = v0 + 0.5 * side * (1 + xb);
            double val, dx, dy;
            sw_zernike_sum_grad(c, count, (u - cu) / R, (v - cv) / R, &val, &dx, &dy);
            sx -= 0.25 * wa * wb * dx / R; /* the delay is minus the OSA wavefront */
            sy -= 0.25 * wa * wb * dy / R;
        }
    *gx = sx;
    *gy = sy;
}

/* ------------------------------------------------------------------ pupils */

static void test_pupil(void **state)
{
    (void)state;
    sw_pupil c = sw_pupil_circle(100.0);
    assert_int_equal(sw_pupil_check(cpu, &c), SW_OK);
    assert_true(sw_pupil_contains(&c, 0, 0));
    assert_true(sw_pupil_contains(&c, 49.9, 0));
    assert_false(sw_pupil_contains(&c, 35.5, 35.5));  /* 50.2 from the centre */
    sw_pupil e = {10.0, -5.0, 40.0, 20.0, 90.0, 0.5}; /* a along +v */
    assert_true(sw_pupil_contains(&e, 10.0, -5.0 + 39.0));
    assert_false(sw_pupil_contains(&e, 10.0 + 39.0, -5.0));
    assert_false(sw_pupil_contains(&e, 10.0 + 5.0, -5.0)); /* in the obscuration (10 x 20) */
    assert_true(sw_pupil_contains(&e, 10.0 + 15.0, -5.0));
    sw_pupil none = sw_pupil_circle(0.0);
    assert_int_equal(sw_pupil_check(cpu, &none), SW_OK);
    assert_true(sw_pupil_contains(&none, 1e8, -1e8));
    sw_pupil bad = c;
    bad.obscuration = 1.0;
    assert_int_equal(sw_pupil_check(cpu, &bad), SW_EINVAL);
    bad = c;
    bad.a_um = NAN;
    assert_int_equal(sw_pupil_check(cpu, &bad), SW_EINVAL);
    bad = c;
    bad.b_um = 0.0;
    assert_int_equal(sw_pupil_check(cpu, &bad), SW_EINVAL);
    bad = c;
    bad.a_um = -3;
    assert_int_equal(sw_pupil_check(cpu, &bad), SW_EINVAL);

    sw_sh_model m;
    sw_sh_spot s;
    assert_int_equal(sw_sh_model_parse("Diffraction", &m), SW_OK);
    assert_int_equal(m, SW_SH_DIFFRACTION);
    assert_string_equal(sw_sh_model_string(SW_SH_GEOMETRIC), "geometric");
    assert_int_equal(sw_sh_spot_parse("sinc2", &s), SW_OK);
    assert_int_equal(s, SW_SH_SPOT_SINC2);
    assert_int_equal(sw_sh_spot_parse("airy", &s), SW_EINVAL);
    assert_int_equal(sw_sh_model_parse("ray", &m), SW_EINVAL);
}

/* ------------------------------------------------------------------ automatic parameters */

static void test_auto_params(void **state)
{
    (void)state;
    sw_shsim_params p;
    sw_shsim_params_default(&p); /* 16 px of 5.5 um, f = 3.5 mm, 0.8 um: z = 5.785 px */
    p.model = SW_SH_DIFFRACTION;
    sw_shsim *plan = make(cpu, &p);
    const sw_shsim_params *u = sw_shsim_params_used(plan);
    const double z = 0.8 * 3500.0 / (16 * 5.5 * 5.5);
    assert_near(u->sigma_px, 0.42 * z, 1e-12);
    assert_int_equal(u->roi_px, 18);
    assert_int_equal(u->samples, 16);
    assert_int_equal(u->oversample, 2);
    assert_int_equal(u->fft_size, 64);
    sw_shsim_destroy(plan);
    /* 30 um pixels, d = 16: z = 0.8 * 3500 / (480 * 30) = 0.194 px: oversample ceil(2 / z) = 11,
     * FFT >= 2 * 11 * 16 = 352 -> 360 = 2^3 3^2 5 */
    p.geom.pixel_um = 30.0;
    plan = make(cpu, &p);
    u = sw_shsim_params_used(plan);
    assert_int_equal(u->oversample, 11);
    assert_int_equal(u->fft_size, 360);
    sw_shsim_destroy(plan);
    /* a non-integer pitch: 2 * 2 * 16.3 = 65.2 -> 72 = 2^3 3^2 */
    p.geom.pixel_um = 5.5;
    p.geom.pitch_px = 16.3;
    p.width = p.height = 170;
    plan = make(cpu, &p);
    assert_int_equal(sw_shsim_params_used(plan)->fft_size, 72);
    assert_int_equal(sw_shsim_params_used(plan)->roi_px, 19);
    sw_shsim_destroy(plan);
}

/* ------------------------------------------------------------------ geometric: centroids, truth */

/* Renders the lenslets with (ix % 2, iy % 2) == (px, py) only, so that each spot's centroid
 * window holds no other light. */
static sw_shsim *sparse_plan(const sw_shsim_params *base, uint8_t *mask, int step, int px, int py)
{
    sw_shsim_params p = *base;
    for (int iy = 0; iy < p.geom.ny; iy++)
        for (int ix = 0; ix < p.geom.nx; ix++)
            mask[iy * p.geom.nx + ix] = ix % step == px && iy % step == py;
    p.geom.valid = mask;
    return make(cpu, &p);
}

static void test_geometric_centroids_and_truth(void **state)
{
    (void)state;
    sw_shsim_params p = grid12();
    p.sigma_px = 1.5;
    p.roi_px = 21;
    double c[15];
    random_coefs(c, 11, 0.06);
    for (int j = 0; j < 15; j++) /* OSA sign: these spots stay inside their windows */
        c[j] = -c[j];
    const double pu = p.geom.pitch_px * p.geom.pixel_um, R = 6.0 * pu;
    const double F = p.geom.focal_mm * 1000.0 / p.geom.pixel_um;
    uint8_t mask[144];
    sw_image img = new_image(&p);
    double worst_cog = 0, worst_truth = 0, max_shift = 0;
    int checked = 0;
    for (int ph = 0; ph < 4; ph++) {
        sw_shsim *plan = sparse_plan(&p, mask, 2, ph % 2, ph / 2);
        assert_int_equal(sw_shsim_add_zernike(plan, c, 15, R), SW_OK);
        run(plan, &img, 0);
        sw_sh_truth t = truth_of(plan);
        for (int l = 0; l < 144; l++) {
            const int ix = l % 12, iy = l / 12;
            double rx, ry;
            sw_sh_reference(&p.geom, ix, iy, &rx, &ry);
            assert_near(t.ref_x_px[l], rx, 1e-12);
            assert_near(t.ref_y_px[l], ry, 1e-12);
            assert_near(t.illum[l], 1.0, 1e-12);
            if (!mask[l]) {
                assert_true(isnan(t.x_px[l]) && isnan(t.slope_y[l]));
                continue;
            }
            /* truth: reference + F <grad W> */
            assert_near(t.x_px[l], rx + F * t.slope_x[l], 1e-9);
            assert_near(t.y_px[l], ry + F * t.slope_y[l], 1e-9);
            double u0, v0, side, gx, gy;
            lens_square(&p, ix, iy, &u0, &v0, &side);
            analytic_mean_gradient(c, 15, R, 0, 0, u0, v0, side, &gx, &gy);
            worst_truth =
                fmax(worst_truth, F * fmax(fabs(t.slope_x[l] - gx), fabs(t.slope_y[l] - gy)));
            max_shift = fmax(max_shift, fmax(fabs(t.x_px[l] - rx), fabs(t.y_px[l] - ry)));
            /* the rendered spot's centre of gravity, over a window centred on it */
            const int cx0 = (int)lround(t.x_px[l]), cy0 = (int)lround(t.y_px[l]);
            double cx, cy;
            const double s = cog(&img, cx0 - 11, cx0 + 11, cy0 - 11, cy0 + 11, &cx, &cy);
            if (fabs(s - p.flux_e) > 1e-4 * p.flux_e)
                fail_msg("lenslet %d: %.3f e- in the window around (%.2f, %.2f), expected %g", l, s,
                         t.x_px[l], t.y_px[l], p.flux_e);
            worst_cog = fmax(worst_cog, fmax(fabs(cx - t.x_px[l]), fabs(cy - t.y_px[l])));
            checked++;
        }
        sw_sh_truth_free(&t);
        sw_shsim_destroy(plan);
    }
    printf("geometric: %d spots, largest shift %.3f px; |CoG - truth| <= %.2e px, |truth - "
           "analytic| <= %.2e px\n",
           checked, max_shift, worst_cog, worst_truth);
    assert_int_equal(checked, 144);
    assert_true(max_shift > 3.0); /* the aberration moves spots by several pixels */
    assert_true(worst_cog < 1e-3);
    assert_true(worst_truth < 1e-3);
    sw_image_free(&img);
}

/* Z(1,1) = 2 rho cos(theta) = 2 x and Z(1,-1) = 2 y (N = sqrt(2 (n + 1)) = 2, R_1^1 = rho), with
 * x = (u - cu) / R: W = c 2 (u - cu) / R, dW/du = 2 c / R radians, so every spot moves by
 * F 2 c / R pixels whatever its weights (partially lit lenslets included). */
static void test_tilt(void **state)
{
    (void)state;
    sw_shsim_params p = grid12();
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(11.0 * pu);
    p.pupil.cu_um = 0.3 * pu;
    p.sigma_px = 1.5;
    const double F = p.geom.focal_mm * 1000.0 / p.geom.pixel_um, R = 500.0;
    for (int k = 0; k < 2; k++) {
        p.model = k ? SW_SH_DIFFRACTION : SW_SH_GEOMETRIC;
        sw_shsim *plan = make(cpu, &p);
        const double c[3] = {0.0, -0.21, 0.37}; /* j = 1: (1,-1), j = 2: (1,1) */
        assert_int_equal(sw_shsim_add_zernike(plan, c, 3, R), SW_OK);
        sw_sh_truth t = truth_of(plan);
        int lit = 0, partial = 0;
        for (int l = 0; l < 144; l++) {
            if (isnan(t.x_px[l]))
                continue;
            lit++;
            partial += t.illum[l] < 0.99;
            /* OSA: a positive tilt coefficient leads at +x, the spot moves to -x */
            assert_near(t.x_px[l] - t.ref_x_px[l], -F * 2 * 0.37 / R, 1e-6);
            assert_near(t.y_px[l] - t.ref_y_px[l], -F * 2 * -0.21 / R, 1e-6);
            assert_near(t.slope_x[l], -2 * 0.37 / R, 1e-12);
        }
        assert_true(lit > 80);
        assert_true(partial > 10);
        sw_sh_truth_free(&t);
        sw_shsim_destroy(plan);
    }
}

/* ------------------------------------------------------------------ flux and illumination */

/* 1 when (u, v) is inside the pupil, written here from sim_sh.h's definition. */
static int inside(const sw_pupil *pp, double u, double v)
{
    const double t = pp->angle_deg * PI / 180.0, du = u - pp->cu_um, dv = v - pp->cv_um;
    const double a = (du * cos(t) + dv * sin(t)) / pp->a_um,
                 b = (-du * sin(t) + dv * cos(t)) / pp->b_um;
    const double r2 = a * a + b * b;
    return r2 <= 1.0 && r2 >= pp->obscuration * pp->obscuration;
}

static void test_flux_and_illum(void **state)
{
    (void)state;
    sw_shsim_params p = grid12();
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.sigma_px = 1.2;
    p.roi_px = 15;
    p.geom.x0 = 8.7; /* keep every ROI inside the image */
    p.geom.y0 = 9.2;
    p.width = p.height = 220;
    p.flux_e = 12345.0;

    /* a straight edge through the centres of column 5: a circle of radius 1e6 um (its sagitta
     * over the array is below 0.2 um) */
    p.pupil = sw_pupil_circle(2e6);
    p.pupil.cu_um = (5.5 - 6.0) * pu - 1e6;
    sw_shsim *plan = make(cpu, &p);
    sw_image img = new_image(&p);
    run(plan, &img, 0);
    sw_sh_truth t = truth_of(plan);
    double lit_sum = 0;
    for (int l = 0; l < 144; l++) {
        const int ix = l % 12;
        const double want = ix < 5 ? 1.0 : ix == 5 ? 0.5 : 0.0;
        assert_near(t.illum[l], want, 3e-3);
        assert_int_equal(isnan(t.x_px[l]), ix > 5);
        if (!isnan(t.x_px[l]))
            lit_sum += t.illum[l];
    }
    double total = image_sum(&img);
    printf("straight edge: image sum %.6f, flux_e sum(illum) %.6f\n", total, p.flux_e * lit_sum);
    assert_near(total, p.flux_e * lit_sum, 1e-4 * total);
    /* the half-lit spots carry half the flux */
    double cx, cy;
    double s5 =
        cog(&img, (int)lround(t.x_px[5 * 12 + 5]) - 7, (int)lround(t.x_px[5 * 12 + 5]) + 7,
            (int)lround(t.y_px[5 * 12 + 5]) - 7, (int)lround(t.y_px[5 * 12 + 5]) + 7, &cx, &cy);
    assert_near(s5, 0.5 * p.flux_e, 2e-3 * p.flux_e);
    sw_sh_truth_free(&t);
    sw_shsim_destroy(plan);

    /* annular: diameter 12 p, obscuration 0.4 (inner radius 2.4 p): lenslets entirely within
     * the obscuration are dark, not drawn, NaN in the truth */
    p.pupil = sw_pupil_circle(12.0 * pu);
    p.pupil.obscuration = 0.4;
    plan = make(cpu, &p);
    run(plan, &img, 0);
    t = truth_of(plan);
    int dark = 0;
    lit_sum = 0;
    for (int l = 0; l < 144; l++) {
        double u0, v0, side;
        lens_square(&p, l % 12, l / 12, &u0, &v0, &side);
        double far = 0;
        for (int k = 0; k < 4; k++)
            far = fmax(far, hypot(u0 + (k & 1) * side, v0 + (k >> 1) * side));
        if (far < 2.4 * pu) {
            assert_near(t.illum[l], 0.0, 0.0);
            assert_true(isnan(t.x_px[l]));
            dark++;
        }
        if (!isnan(t.x_px[l]))
            lit_sum += t.illum[l];
    }
    assert_int_equal(dark, 12); /* (4..7) x (5..6) and (5..6) x (4, 7) */
    total = image_sum(&img);
    assert_near(total, p.flux_e * lit_sum, 1e-4 * total);
    /* the 2 x 2 central lenslets' pixels see no light at all */
    double c0 =
        cog(&img, (int)ceil(p.geom.x0 + 5 * 16.3), (int)floor(p.geom.x0 + 7 * 16.3) - 1,
            (int)ceil(p.geom.y0 + 5 * 16.3), (int)floor(p.geom.y0 + 7 * 16.3) - 1, &cx, &cy);
    assert_true(c0 < 1e-6 * p.flux_e);
    sw_sh_truth_free(&t);
    sw_shsim_destroy(plan);

    /* elliptical, rotated, offset and obscured: illum against a 400 x 400-point count per
     * lenslet, for both models (their pupil grids differ) */
    p.pupil = (sw_pupil){0.7 * pu, -0.4 * pu, 4.5 * pu, 3.0 * pu, 30.0, 0.3};
    for (int k = 0; k < 2; k++) {
        p.model = k ? SW_SH_DIFFRACTION : SW_SH_GEOMETRIC;
        plan = make(cpu, &p);
        t = truth_of(plan);
        double worst = 0;
        int partial = 0;
        for (int l = 0; l < 144; l++) {
            double u0, v0, side;
            lens_square(&p, l % 12, l / 12, &u0, &v0, &side);
            int n = 0;
            for (int b = 0; b < 400; b++)
                for (int a = 0; a < 400; a++)
                    n += inside(&p.pupil, u0 + side * (a + 0.5) / 400, v0 + side * (b + 0.5) / 400);
            const double want = n / 160000.0;
            partial += want > 0.05 && want < 0.95;
            worst = fmax(worst, fabs(t.illum[l] - want));
            assert_int_equal(isnan(t.x_px[l]), !(t.illum[l] > 0.0));
        }
        printf("ellipse (%s): %d partly lit lenslets, |illum - count| <= %.2e\n",
               k ? "diffraction" : "geometric", partial, worst);
        assert_true(partial > 20);
        assert_true(worst < 2e-3);
        sw_sh_truth_free(&t);
        sw_shsim_destroy(plan);
    }
    sw_image_free(&img);
}

/* ------------------------------------------------------------------ diffraction */

/* Pixel integral of sinc^2(x / z) / z over [d - 1/2, d + 1/2] (Simpson, 2000 intervals). */
static double w_sinc2(double d, double z)
{
    const int n = 2000;
    double s = 0;
    for (int i = 0; i <= n; i++) {
        const double x = (d - 0.5 + (double)i / n) / z;
        const double v = fabs(x) < 1e-12 ? 1.0 : pow(sin(PI * x) / (PI * x), 2);
        s += v * (i == 0 || i == n ? 1 : i % 2 ? 4 : 2);
    }
    return s / (3.0 * n) / z;
}

/* 3 x 3 lenslets of 27 px (odd, from an integer origin: reference positions on pixel centres),
 * f chosen for z = lambda f / (p pixel) = 4 px exactly; only the centre lenslet drawn. */
static sw_shsim_params sinc_config(void)
{
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    p.geom.nx = p.geom.ny = 3;
    p.geom.pitch_px = 27;
    p.geom.x0 = p.geom.y0 = 10;
    p.geom.pixel_um = 5.5;
    p.geom.focal_mm = 4.0 * 27 * 5.5 * 5.5 / 0.8 / 1000.0;
    p.wavelength_um = 0.8;
    p.width = p.height = 110;
    p.flux_e = 1e5;
    return p;
}

static void test_diffraction_sinc2(void **state)
{
    (void)state;
    static const uint8_t centre[9] = {0, 0, 0, 0, 1, 0, 0, 0, 0};
    sw_shsim_params p = sinc_config();
    p.geom.valid = centre;
    p.model = SW_SH_DIFFRACTION;
    sw_shsim *plan = make(cpu, &p);
    const sw_shsim_params *u = sw_shsim_params_used(plan);
    printf("sinc2: oversample %d, FFT %d\n", (int)u->oversample, (int)u->fft_size);
    sw_image img = new_image(&p);
    run(plan, &img, 0);
    const int X = 10 + 27 + 13; /* the reference position, a pixel centre */
    const double z = 4.0, w0 = w_sinc2(0, z), peak = p.flux_e * w0 * w0;
    /* the pattern carries flux_e sum(A^2) / M^2: flux_e less the light beyond the FFT window
     * (about 1.5% per axis for the continuous pattern, 2.8% for these edge samples) */
    const double sum = image_sum(&img);
    printf("sinc2: image sum %.5f flux_e\n", sum / p.flux_e);
    assert_true(sum > 0.92 * p.flux_e && sum < p.flux_e);
    double worst = 0;
    for (int d = -13; d <= 13; d++) {
        const double want = p.flux_e * w_sinc2(d, z) * w0;
        worst = fmax(worst, fmax(fabs(sw_image_get(&img, X + d, X) - want),
                                 fabs(sw_image_get(&img, X, X + d) - want)));
    }
    printf("sinc2: peak %.1f (analytic %.1f), largest difference %.2e of the peak\n",
           sw_image_get(&img, X, X), peak, worst / peak);
    assert_true(worst < 0.03 * peak);
    /* the first zero: the minimum of the row between offsets 2 and 7 is at +-4 (a pixel centre);
     * and the zero z' of the pixel-integrated sinc^2 that best fits the row's shape around it
     * (offsets 2..6, relative to the centre pixel) is within 0.1 px of z */
    for (int sgn = -1; sgn <= 1; sgn += 2) {
        int best = 2;
        for (int d = 2; d <= 7; d++)
            if (sw_image_get(&img, X + sgn * d, X) < sw_image_get(&img, X + sgn * best, X))
                best = d;
        assert_int_equal(best, 4);
        double zbest = 0, ebest = INFINITY;
        for (double zz = 3.5; zz <= 4.5; zz += 0.005) {
            double e = 0;
            for (int d = 2; d <= 6; d++) {
                const double r = sw_image_get(&img, X + sgn * d, X) / sw_image_get(&img, X, X);
                e += pow(r - w_sinc2(d, zz) / w_sinc2(0, zz), 2);
            }
            if (e < ebest) {
                ebest = e;
                zbest = zz;
            }
        }
        printf("sinc2: first zero at %+.3f px\n", sgn * zbest);
        assert_near(zbest, z, 0.1);
    }
    sw_image_free(&img);
    sw_shsim_destroy(plan);
}

/* Smooth aberrations: each diffraction spot's centre of gravity (over +-1.5 pitch around the
 * truth, neighbours not drawn; lenslets lit at least half) equals the truth (average-tilt
 * theorem), and the truth equals the geometric model's within 0.02 px (both weight the gradient
 * by the lit area). */
static void test_diffraction_centroids(void **state)
{
    (void)state;
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    p.geom.nx = p.geom.ny = 8;
    p.geom.pitch_px = 24.4;
    p.geom.x0 = 36.3; /* margins: the patterns reach a pitch beyond their lenslets */
    p.geom.y0 = 34.9;
    p.geom.focal_mm = 4.5; /* z = 0.8 * 4500 / (134.2 * 5.5) = 4.88 px */
    p.width = p.height = 270;
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(7.6 * pu);
    double c[15];
    random_coefs(c, 5, 0.04);
    const double R = 3.8 * pu;
    uint8_t mask[64];
    sw_image img = new_image(&p);
    /* the geometric model's truth */
    p.model = SW_SH_GEOMETRIC;
    sw_shsim *gplan = make(cpu, &p);
    assert_int_equal(sw_shsim_add_zernike(gplan, c, 15, R), SW_OK);
    sw_sh_truth gt = truth_of(gplan);
    sw_shsim_destroy(gplan);
    p.model = SW_SH_DIFFRACTION;
    double worst_cog = 0, worst_geo = 0, max_shift = 0;
    int checked = 0;
    for (int ph = 0; ph < 9; ph++) {
        sw_shsim *plan = sparse_plan(&p, mask, 3, ph % 3, ph / 3);
        assert_int_equal(sw_shsim_add_zernike(plan, c, 15, R), SW_OK);
        run(plan, &img, 0);
        sw_sh_truth t = truth_of(plan);
        for (int l = 0; l < 64; l++) {
            if (!mask[l] || isnan(t.x_px[l]))
                continue;
            assert_near(t.illum[l], gt.illum[l], 2e-3);
            worst_geo =
                fmax(worst_geo, fmax(fabs(gt.x_px[l] - t.x_px[l]), fabs(gt.y_px[l] - t.y_px[l])));
            if (t.illum[l] < 0.5)
                continue; /* the pattern of a sliver of lenslet is wider than any window */
            const int h = (int)ceil(1.5 * p.geom.pitch_px);
            const int cx0 = (int)lround(t.x_px[l]), cy0 = (int)lround(t.y_px[l]);
            double cx, cy;
            cog(&img, cx0 - h, cx0 + h, cy0 - h, cy0 + h, &cx, &cy);
            const double e = fmax(fabs(cx - t.x_px[l]), fabs(cy - t.y_px[l]));
            worst_cog = fmax(worst_cog, e);
            max_shift =
                fmax(max_shift, hypot(t.x_px[l] - t.ref_x_px[l], t.y_px[l] - t.ref_y_px[l]));
            checked++;
        }
        sw_sh_truth_free(&t);
        sw_shsim_destroy(plan);
    }
    printf("diffraction: %d spots, largest shift %.2f px; |CoG - truth| <= %.4f px, |truth - "
           "geometric| <= %.4f px\n",
           checked, max_shift, worst_cog, worst_geo);
    assert_true(checked > 40);
    assert_true(max_shift > 1.5);
    assert_true(worst_cog < 0.02);
    assert_true(worst_geo < 0.02);
    sw_sh_truth_free(&gt);
    sw_image_free(&img);
}

/* The geometric sinc^2 spot: pixel values are flux w(dx) w(dy) with w the pixel integral of
 * sinc^2(x / z) / z (the renderer averages `oversample` points per pixel). */
static void test_geometric_sinc2(void **state)
{
    (void)state;
    static const uint8_t centre[9] = {0, 0, 0, 0, 1, 0, 0, 0, 0};
    sw_shsim_params p = sinc_config();
    p.geom.valid = centre;
    p.spot = SW_SH_SPOT_SINC2;
    p.oversample = 8;
    sw_shsim *plan = make(cpu, &p);
    const double c[3] = {0.0, 0.0, 0.05}; /* a tilt: a non-integer spot position */
    assert_int_equal(sw_shsim_add_zernike(plan, c, 3, 300.0), SW_OK);
    sw_image img = new_image(&p);
    run(plan, &img, 0);
    sw_sh_truth t = truth_of(plan);
    const double x = t.x_px[4], y = t.y_px[4];
    assert_true(fabs(x - lround(x)) > 0.1);
    const int roi = sw_shsim_params_used(plan)->roi_px;
    assert_int_equal(roi, 29);
    const double peak = p.flux_e * w_sinc2(0, 4) * w_sinc2(0, 4);
    double worst = 0;
    for (int j = -10; j <= 10; j++)
        for (int i = -10; i <= 10; i++) {
            const int px = (int)lround(x) + i, py = (int)lround(y) + j;
            const double want = p.flux_e * w_sinc2(px - x, 4) * w_sinc2(py - y, 4);
            worst = fmax(worst, fabs(sw_image_get(&img, px, py) - want));
        }
    printf("geometric sinc2: largest difference %.2e of the peak\n", worst / peak);
    assert_true(worst < 2e-3 * peak);
    sw_sh_truth_free(&t);
    sw_image_free(&img);
    sw_shsim_destroy(plan);
}

/* ------------------------------------------------------------------ phase screens */

/* A map of the same Zernike sum sampled every 1.5 um (bilinear interpolation error ~1e-5 um)
 * gives the same truth as add_zernike; a map that misses the lit pupil is refused. */
static void test_add_wavefront(void **state)
{
    (void)state;
    sw_shsim_params p = grid12();
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(10.0 * pu);
    double c[15];
    random_coefs(c, 3, 0.2);
    const double R = 5.0 * pu;
    for (int k = 0; k < 2; k++) {
        p.model = k ? SW_SH_DIFFRACTION : SW_SH_GEOMETRIC;
        sw_shsim *a = make(cpu, &p), *b = make(cpu, &p);
        assert_int_equal(sw_shsim_add_zernike(a, c, 15, R), SW_OK);
        sw_wavefront w;
        const int n = (int)ceil(12.5 * pu / 1.5);
        assert_int_equal(sw_wavefront_alloc(cpu, n, n, 1.5, &w), SW_OK);
        for (int kv = 0; kv < n; kv++)
            for (int ku = 0; ku < n; ku++) {
                double val, dx, dy;
                sw_zernike_sum_grad(c, 15, (w.u0_um + ku * 1.5) / R, (w.v0_um + kv * 1.5) / R, &val,
                                    &dx, &dy);
                w.opd_um[kv * n + ku] = -0.5 * val; /* the OPD of an OSA wavefront is -W */
            }
        assert_int_equal(sw_shsim_add_wavefront(b, &w, 2.0), SW_OK);
        sw_sh_truth ta = truth_of(a), tb = truth_of(b);
        double worst = 0;
        for (int l = 0; l < 144; l++) {
            assert_int_equal(isnan(ta.x_px[l]), isnan(tb.x_px[l]));
            if (!isnan(ta.x_px[l]))
                worst =
                    fmax(worst, fmax(fabs(ta.x_px[l] - tb.x_px[l]), fabs(ta.y_px[l] - tb.y_px[l])));
        }
        printf("add_wavefront (%s): |truth - zernike truth| <= %.2e px\n",
               k ? "diffraction" : "geometric", worst);
        assert_true(worst < 2e-3);
        sw_wavefront_free(&w);
        /* a small map: lit samples outside it are refused, the OPD is left as it was */
        assert_int_equal(sw_wavefront_alloc(cpu, 20, 20, 1.5, &w), SW_OK);
        assert_int_equal(sw_shsim_add_wavefront(b, &w, 1.0), SW_EINVAL);
        sw_sh_truth tc = truth_of(b);
        for (int l = 0; l < 144; l++)
            if (!isnan(tb.x_px[l]))
                assert_true(tc.x_px[l] == tb.x_px[l]);
        sw_sh_truth_free(&tc);
        sw_wavefront_free(&w);
        sw_sh_truth_free(&ta);
        sw_sh_truth_free(&tb);
        sw_shsim_destroy(a);
        sw_shsim_destroy(b);
    }
}

/* ------------------------------------------------------------------ determinism */

static void test_determinism_and_accumulate(void **state)
{
    (void)state;
    sw_context *one = sw_test_cpu_context(1), *three = sw_test_cpu_context(3);
    sw_shsim_params p = grid12();
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(11.0 * pu);
    double c[15];
    random_coefs(c, 9, 0.3);
    for (int k = 0; k < 3; k++) {
        p.model = k == 2 ? SW_SH_DIFFRACTION : SW_SH_GEOMETRIC;
        p.spot = k == 1 ? SW_SH_SPOT_SINC2 : SW_SH_SPOT_GAUSSIAN;
        sw_image a = new_image(&p), b = new_image(&p), acc = new_image(&p);
        sw_shsim *pa = make(one, &p), *pb = make(three, &p);
        assert_int_equal(sw_shsim_add_zernike(pa, c, 15, 6 * pu), SW_OK);
        assert_int_equal(sw_shsim_add_zernike(pb, c, 15, 6 * pu), SW_OK);
        run(pa, &a, 0);
        run(pb, &b, 0);
        assert_true(sw_image_equal(&a, &b)); /* 1 and 3 threads: the same bits */
        run(pb, &b, 0);
        assert_true(sw_image_equal(&a, &b)); /* run after run */
        /* accumulate = 1 adds to what is there */
        for (int y = 0; y < p.height; y++)
            for (int x = 0; x < p.width; x++)
                ((float *)sw_image_row(&acc, y))[x] = 7.0f;
        run(pb, &acc, 1);
        const double peak = image_max(&a);
        double worst = 0;
        for (int y = 0; y < p.height; y++)
            for (int x = 0; x < p.width; x++)
                worst = fmax(worst, fabs(sw_image_get(&acc, x, y) - 7.0 - sw_image_get(&a, x, y)));
        assert_true(worst < 1e-6 * peak + 1e-5);
        assert_true(peak > 100.0);
        /* an OPD change shows in the next run; clearing it gives the flat image */
        sw_image flat = new_image(&p);
        sw_shsim *pf = make(one, &p);
        run(pf, &flat, 0);
        assert_false(sw_image_equal(&a, &flat));
        assert_int_equal(sw_shsim_clear_opd(pa), SW_OK);
        run(pa, &a, 0);
        assert_true(sw_image_equal(&a, &flat));
        sw_shsim_destroy(pf);
        sw_image_free(&flat);
        assert_near(sw_shsim_render_us(pa), -1.0, 0.0);
        sw_shsim_destroy(pa);
        sw_shsim_destroy(pb);
        sw_image_free(&a);
        sw_image_free(&b);
        sw_image_free(&acc);
    }
    sw_context_destroy(one);
    sw_context_destroy(three);
}

/* ------------------------------------------------------------------ truth CSV */

static void test_truth_csv(void **state)
{
    (void)state;
    sw_shsim_params p = grid12();
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(9.0 * pu);
    sw_shsim *plan = make(cpu, &p);
    double c[15];
    random_coefs(c, 4, 0.2);
    assert_int_equal(sw_shsim_add_zernike(plan, c, 15, 6 * pu), SW_OK);
    sw_sh_truth t = truth_of(plan);
    const char *path = sw_test_path("truth.csv");
    assert_int_equal(sw_sh_truth_write_csv(cpu, path, &t), SW_OK);
    sw_table tab;
    assert_int_equal(sw_csv_read(cpu, path, &tab), SW_OK);
    assert_int_equal(tab.ncols, 7);
    assert_int_equal(tab.nrows, 144);
    static const char *const names[] = {"ix",       "iy",       "x_px", "y_px",
                                        "ref_x_px", "ref_y_px", "illum"};
    for (int i = 0; i < 7; i++)
        assert_int_equal(sw_table_column(&tab, names[i]), i);
    int nan_rows = 0;
    for (int l = 0; l < 144; l++) {
        assert_near(tab.cols[0][l], l % 12, 0);
        assert_near(tab.cols[1][l], l / 12, 0);
        if (isnan(t.x_px[l])) {
            assert_true(isnan(tab.cols[2][l]) && isnan(tab.cols[3][l]));
            nan_rows++;
        } else {
            assert_true(tab.cols[2][l] == t.x_px[l] && tab.cols[3][l] == t.y_px[l]);
        }
        assert_true(tab.cols[4][l] == t.ref_x_px[l] && tab.cols[6][l] == t.illum[l]);
    }
    assert_true(nan_rows > 0);
    size_t size;
    char *text = sw_test_read_all(path, &size);
    assert_non_null(strstr(text, "ix,iy,x_px,y_px,ref_x_px,ref_y_px,illum\n"));
    assert_non_null(strstr(text, ",nan,nan,"));
    free(text);
    sw_table_free(&tab);
    sw_sh_truth_free(&t);
    sw_shsim_destroy(plan);
}

/* ------------------------------------------------------------------ bad input */

static void expect_create_fails(const sw_shsim_params *p, const char *what)
{
    sw_shsim *plan = (sw_shsim *)(uintptr_t)1;
    sw_status st = sw_shsim_create(cpu, p, &plan);
    if (st != SW_EINVAL)
        fail_msg("%s: status %d, expected SW_EINVAL", what, (int)st);
    assert_null(plan);
    assert_true(strlen(sw_context_error(cpu)) > 10);
}

static void test_bad_input(void **state)
{
    (void)state;
    sw_shsim_params p = grid12(), q;
    q = p;
    q.geom.x0 = 20.0; /* the grid ends at 20 + 195.6 > 210 */
    expect_create_fails(&q, "geometry off the image");
    q = p;
    q.geom.pitch_px = 0.0;
    expect_create_fails(&q, "zero pitch");
    q = p;
    q.geom.pitch_px = -16.3;
    expect_create_fails(&q, "negative pitch");
    q = p;
    q.wavelength_um = NAN;
    expect_create_fails(&q, "NaN wavelength");
    q = p;
    q.wavelength_um = -0.8;
    expect_create_fails(&q, "negative wavelength");
    q = p;
    q.pupil = sw_pupil_circle(500.0);
    q.pupil.obscuration = 1.0;
    expect_create_fails(&q, "obscuration 1");
    q = p;
    q.flux_e = INFINITY;
    expect_create_fails(&q, "infinite flux");
    q = p;
    q.model = (sw_sh_model)7;
    expect_create_fails(&q, "unknown model");
    q = p;
    q.model = SW_SH_DIFFRACTION;
    q.geom.pixel_um = 50.0; /* z = 0.069 px: at oversample 1 the lenslet spans 932 samples */
    q.oversample = 1;
    q.fft_size = 64;
    expect_create_fails(&q, "FFT too small for the lenslet");
    assert_int_equal(sw_shsim_create(cpu, NULL, &(sw_shsim *){NULL}), SW_EINVAL);

    sw_shsim *plan = make(cpu, &p);
    double c[15];
    random_coefs(c, 8, 0.2);
    assert_int_equal(sw_shsim_add_zernike(plan, c, 15, 500.0), SW_OK);
    sw_sh_truth before = truth_of(plan);
    c[7] = NAN;
    assert_int_equal(sw_shsim_add_zernike(plan, c, 15, 500.0), SW_EINVAL);
    c[7] = 0.1;
    assert_int_equal(sw_shsim_add_zernike(plan, c, 15, 0.0), SW_EINVAL);
    assert_int_equal(sw_shsim_add_zernike(plan, c, -1, 500.0), SW_EINVAL);
    assert_int_equal(sw_shsim_add_zernike(plan, NULL, 3, 500.0), SW_EINVAL);
    assert_int_equal(sw_shsim_add_wavefront(plan, NULL, 1.0), SW_EINVAL);
    sw_sh_truth after = truth_of(plan);
    for (int l = 0; l < 144; l++)
        assert_true(after.x_px[l] == before.x_px[l] && after.y_px[l] == before.y_px[l]);
    sw_sh_truth_free(&before);
    sw_sh_truth_free(&after);

    /* wrong image size or type: refused, the image untouched */
    sw_image small = sw_test_random_image(200, 210, SW_PIX_F32, 1);
    sw_image copy = sw_test_random_image(200, 210, SW_PIX_F32, 1);
    assert_int_equal(sw_shsim_run(plan, &small, 0), SW_EINVAL);
    assert_true(sw_image_equal(&small, &copy));
    sw_image u16 = sw_test_random_image(210, 210, SW_PIX_U16, 2);
    sw_image u16c = sw_test_random_image(210, 210, SW_PIX_U16, 2);
    assert_int_equal(sw_shsim_run(plan, &u16, 0), SW_EINVAL);
    assert_true(sw_image_equal(&u16, &u16c));
    assert_int_equal(sw_shsim_run(plan, NULL, 0), SW_EINVAL);
    assert_int_equal(sw_shsim_run(NULL, &small, 0), SW_EINVAL);
    sw_sh_truth t;
    assert_int_equal(sw_shsim_truth(NULL, &t), SW_EINVAL);
    assert_int_equal(sw_sh_truth_write_csv(cpu, sw_test_path("x.csv"), NULL), SW_EINVAL);
    sw_image_free(&small);
    sw_image_free(&copy);
    sw_image_free(&u16);
    sw_image_free(&u16c);
    sw_shsim_destroy(plan);
    sw_shsim_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pupil),
        cmocka_unit_test(test_auto_params),
        cmocka_unit_test(test_geometric_centroids_and_truth),
        cmocka_unit_test(test_tilt),
        cmocka_unit_test(test_flux_and_illum),
        cmocka_unit_test(test_diffraction_sinc2),
        cmocka_unit_test(test_diffraction_centroids),
        cmocka_unit_test(test_geometric_sinc2),
        cmocka_unit_test(test_add_wavefront),
        cmocka_unit_test(test_determinism_and_accumulate),
        cmocka_unit_test(test_truth_csv),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
