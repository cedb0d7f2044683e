/*
 * The closed-loop simulator's sensor calibration (loop.h: sw_loop_slope_gain, threshold_peak,
 * slope_calibration; src/loop/loopsim.c "Slope gain"): a known tilt rendered as diffraction spots
 * through a simulator made here from the loop's exported chain (sw_loop_chain: the geometry, the
 * centroid conditioning, the slope scale), and reconstructed by the chain's D-SABRE plan, whose
 * spline's tilt is measured:
 *   - calibrated (the default), the slopes and the reconstructed tilt are the true ones within 2 %;
 *   - uncalibrated, the centre of gravity loses slope gain on these spots (10 px lenslets at
 *     lambda f / d = 2 px: the lenslet's edge, 2.5 lambda/d from the spot's centre, is not on a
 *     zero of its sinc^2, so the wings cut off there pull the centroid back; ~0.81), the
 *     reconstructed tilt shows the same loss, and the loop reports it (sw_loop_slope_gain, not
 *     applied);
 *   - threshold_peak sets the threshold from the reference spot's peak (3 read noise the floor
 *     with a magnitude) and moves the gain towards 1; a star too faint to calibrate is reported,
 *     not applied; MVM reports without applying; bad values of the two keys are refused.
 * 12 x 12 lenslets, one-thread context: about a second.
 */
#include "testutil.h"

#include "spotwave/loop.h"
#include "spotwave/sabre.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NOISELESS_E 1e4   /* the loop's flux per lenslet without a magnitude (loopsim.c) */
#define TILT_LOD    0.125 /* the tilt applied, lambda/d */

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = sw_test_cpu_context(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(ctx);
    return 0;
}

/* 12 x 12 diffraction-limited lenslets of 10 px, lambda f / d = 2 px, noise-free, D-SABRE 2 x 2
 * (the loop's reconstructor is D-SABRE with the distributed projection; the test reads its
 * chain). */
static void params(sw_loop_params *p)
{
    sw_loop_params_default(p);
    p->nx = 12;
    p->diameter_m = 4.5;
    p->model = SW_SH_DIFFRACTION;
    p->px_per_lenslet = 10;
    p->samples = 4;
    p->partitions = 2;
    p->recon = SW_LOOP_DSABRE_LOCAL;
}

static sw_loop *make(const sw_loop_params *p)
{
    sw_loop *l = NULL;
    if (sw_loop_create(ctx, p, &l) != SW_OK)
        fail_msg("sw_loop_create: %s", sw_context_error(ctx));
    return l;
}

/* What the loop's chain makes of a tilt of TILT_LOD lambda/d along x (W = a u), pushed and
 * pulled: *slope_gain, the mean over the lenslets of the slopes in radians (pixel slopes x the
 * chain's slope_scale) over a; *recon_gain, the x-tilt of D-SABRE's reconstruction from those
 * slopes (the loop's plan, with nearest padding so that a tilt is reconstructed exactly from
 * exact slopes: zero padding bends it near the extended array's padded rim), the spline at the
 * lenslet corners fitted by a plane over the interior ones, over the true tilt (a lenslet_um of
 * OPD per lenslet). */
static void tilt_response(const sw_loop_params *p, sw_loop *l, double *slope_gain,
                          double *recon_gain)
{
    sw_loop_chain_info ci;
    assert_int_equal(sw_loop_chain(l, &ci), SW_OK);
    const sw_sh_geometry *g = &ci.centroid.geometry;
    const int32_t nx = p->nx, nc = nx + 1;
    const double lenslet_um = g->pitch_px * g->pixel_um;
    const double a = TILT_LOD * p->wfs_wavelength_um / lenslet_um; /* radians */

    /* the sensor, as the loop builds it, from the public parameters */
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = ci.centroid.width;
    sp.height = ci.centroid.height;
    sp.geom = *g;
    sp.model = SW_SH_DIFFRACTION;
    sp.wavelength_um = p->wfs_wavelength_um;
    sp.flux_e = NOISELESS_E;
    sp.samples = p->samples;
    sw_shsim *sim = NULL;
    assert_int_equal(sw_shsim_create(ctx, &sp, &sim), SW_OK);
    sw_centroid_plan *cen = NULL;
    sw_centroid_result res;
    assert_int_equal(sw_centroid_create(ctx, &ci.centroid, &cen), SW_OK);
    assert_int_equal(sw_centroid_result_alloc(cen, 1, SW_MEM_HOST, &res), SW_OK);
    const int32_t ns = sw_centroid_plan_slopes(cen);
    assert_int_equal(ns, nx * nx); /* square pupil: every lenslet, in lenslet order */
    sw_sabre_params sab = ci.sabre;
    sab.padding = SW_SABRE_PAD_NEAREST;
    sw_sabre *rec = NULL;
    assert_int_equal(sw_sabre_create(ctx, &sab, &rec), SW_OK);

    sw_image frame;
    assert_int_equal(sw_image_alloc(ctx, sp.width, sp.height, SW_PIX_F32, &frame), SW_OK);
    const int32_t nw = 8 * nx + 4; /* OPD samples per side, beyond the array */
    sw_wavefront w;
    assert_int_equal(sw_wavefront_alloc(ctx, nw, nw, lenslet_um / 8.0, &w), SW_OK);
    float *push = malloc((size_t)2 * ns * sizeof(float));
    float *rad = malloc((size_t)2 * ns * sizeof(float));
    float *corner = malloc((size_t)2 * nc * nc * sizeof(float));
    assert_non_null(push);
    assert_non_null(rad);
    assert_non_null(corner);
    double sum = 0.0;
    for (int sign = 1; sign >= -1; sign -= 2) {
        for (int32_t k = 0; k < nw; k++)
            for (int32_t i = 0; i < nw; i++)
                w.opd_um[(size_t)k * nw + i] = sign * a * (w.u0_um + i * w.spacing_um);
        assert_int_equal(sw_shsim_clear_opd(sim), SW_OK);
        assert_int_equal(sw_shsim_add_wavefront(sim, &w, 1.0), SW_OK);
        assert_int_equal(sw_shsim_run(sim, &frame, 0), SW_OK);
        assert_int_equal(sw_centroid_run(cen, &frame, &res), SW_OK);
        if (sign > 0)
            memcpy(push, res.slopes, (size_t)ns * sizeof(float));
        else
            for (int32_t s = 0; s < ns; s++)
                sum += 0.5 * ((double)push[s] - (double)res.slopes[s]);
        for (int32_t s = 0; s < 2 * ns; s++)
            rad[s] = (float)(res.slopes[s] * ci.slope_scale);
        assert_int_equal(
            sw_sabre_run(rec, rad, SW_MEM_HOST, NULL, corner + (sign > 0 ? 0 : nc * nc)), SW_OK);
    }
    *slope_gain = sum * ci.slope_scale / (ns * a);

    /* the push-pull half-difference of the corners, its x-tilt over the interior corners (the
     * corners' mean in each column, least squares in x) */
    double sx = 0, sxx = 0, sz = 0, sxz = 0, n = 0;
    for (int32_t cy = 1; cy < nc - 1; cy++)
        for (int32_t cx = 1; cx < nc - 1; cx++) {
            const double z = 0.5 * ((double)corner[cy * nc + cx] - corner[nc * nc + cy * nc + cx]);
            n++;
            sx += cx;
            sxx += (double)cx * cx;
            sz += z;
            sxz += cx * z;
        }
    const double tilt = (sxz - sx * sz / n) / (sxx - sx * sx / n); /* um per lenslet */
    *recon_gain = tilt / (a * lenslet_um);

    free(push);
    free(rad);
    free(corner);
    sw_wavefront_free(&w);
    sw_image_free(&frame);
    sw_sabre_destroy(rec);
    sw_centroid_result_free(&res);
    sw_centroid_destroy(cen);
    sw_shsim_destroy(sim);
}

/* Calibrated (the default; no threshold noise-free): the loop measures the loss and divides it
 * out, so the reconstructor sees unit-gain slopes and a known tilt comes back as itself. */
static void test_calibrated(void **state)
{
    (void)state;
    sw_loop_params p;
    params(&p);
    sw_loop *l = make(&p);
    double g[2];
    assert_int_equal(sw_loop_slope_gain(l, g), 1);
    assert_true(sw_loop_threshold_e(l) == 0.0);
    assert_true(g[0] > 0.7 && g[0] < 0.9);        /* the loss, measured */
    assert_true(fabs(g[0] - g[1]) < 1e-3 * g[0]); /* square lenslets: x and y alike */
    double sg, rg;
    tilt_response(&p, l, &sg, &rg);
    print_message("calibrated: gain %.4f %.4f; the tilt's slopes %.4f, reconstructed %.4f\n", g[0],
                  g[1], sg, rg);
    assert_true(fabs(sg - 1.0) < 0.02);
    assert_true(fabs(rg - 1.0) < 0.02);
    sw_loop_destroy(l);
}

/* Uncalibrated (the behaviour before): the loss is there, the same in the slopes, in the
 * reconstruction and in the loop's report, and it is not applied. */
static void test_uncalibrated_loss(void **state)
{
    (void)state;
    sw_loop_params p;
    params(&p);
    p.slope_calibration = 0;
    sw_loop *l = make(&p);
    double g[2];
    assert_int_equal(sw_loop_slope_gain(l, g), 0);
    double sg, rg;
    tilt_response(&p, l, &sg, &rg);
    print_message("uncalibrated: gain %.4f %.4f; the tilt's slopes %.4f, reconstructed %.4f\n",
                  g[0], g[1], sg, rg);
    assert_true(sg < 0.9);
    assert_true(rg < 0.9);
    assert_true(fabs(g[0] - sg) < 0.02 * sg); /* the report is the loss measured here */
    assert_true(fabs(rg - sg) < 0.02 * sg);   /* and the reconstruction carries it */
    sw_loop_destroy(l);
}

/* threshold_peak: the threshold is that fraction of the flat wavefront's peak pixel (so twice the
 * fraction, twice the threshold), at least 3 read noise with a magnitude; it trims the spot's
 * cut-off wings, so the uncalibrated gain moves towards 1, and calibrated the tilt still comes back
 * within 2 %. */
static void test_threshold_peak(void **state)
{
    (void)state;
    sw_loop_params p;
    params(&p);
    p.slope_calibration = 0;
    double g0[2], g1[2];
    sw_loop *l = make(&p);
    sw_loop_slope_gain(l, g0);
    sw_loop_destroy(l);
    p.threshold_peak = 0.05;
    l = make(&p);
    const double t1 = sw_loop_threshold_e(l);
    sw_loop_slope_gain(l, g1);
    sw_loop_destroy(l);
    print_message("threshold_peak 0.05: threshold %.1f e-, uncalibrated gain %.4f (none: %.4f)\n",
                  t1, g1[0], g0[0]);
    assert_true(t1 > 10.0 && t1 < 0.05 * 1e4); /* a peak pixel holds part of the 1e4 e- */
    assert_true(fabs(g1[0] - 1.0) < 0.5 * fabs(g0[0] - 1.0));
    p.threshold_peak = 0.1;
    l = make(&p);
    assert_true(fabs(sw_loop_threshold_e(l) - 2.0 * t1) < 1e-9 * t1);
    sw_loop_destroy(l);

    p.threshold_peak = 0.05;
    p.slope_calibration = 1;
    l = make(&p);
    double sg, rg;
    tilt_response(&p, l, &sg, &rg);
    print_message("threshold_peak 0.05, calibrated: the tilt's slopes %.4f, reconstructed %.4f\n",
                  sg, rg);
    assert_true(fabs(sg - 1.0) < 0.02);
    assert_true(fabs(rg - 1.0) < 0.02);
    sw_loop_destroy(l);

    /* with a magnitude the floor of 3 read noise holds when the peak's fraction is below it */
    p.magnitude = 10.0; /* ~130 e- per lenslet */
    p.read_noise_e = 2.0;
    l = make(&p);
    assert_true(sw_loop_threshold_e(l) == 6.0);
    sw_loop_destroy(l);

    /* a star so faint that its noise-free spot is all below the threshold: the gain measured is
     * 0, reported and not applied (the loop is still made) */
    p.magnitude = 12.0; /* ~20 e- per lenslet */
    l = make(&p);
    double g[2];
    assert_int_equal(sw_loop_slope_gain(l, g), 0);
    assert_true(g[0] < 0.5);
    sw_loop_destroy(l);
}

/* MVM: measured and reported, not applied (its interaction matrix holds it); NULL; bad keys. */
static void test_mvm_and_bad_keys(void **state)
{
    (void)state;
    sw_loop_params p;
    params(&p);
    p.recon = SW_LOOP_MVM;
    sw_loop *l = make(&p);
    double g[2];
    assert_int_equal(sw_loop_slope_gain(l, g), 0);
    assert_true(g[0] > 0.5 && g[0] < 0.9); /* the same loss, measured */
    sw_loop_destroy(l);
    assert_int_equal(sw_loop_slope_gain(NULL, g), 0);
    assert_true(isnan(g[0]) && isnan(g[1]));
    assert_true(isnan(sw_loop_threshold_e(NULL)));

    const double bad_f[] = {-0.1, 1.0, NAN};
    for (int i = 0; i < 3; i++) {
        params(&p);
        p.threshold_peak = bad_f[i];
        l = (sw_loop *)&l;
        assert_int_equal(sw_loop_create(ctx, &p, &l), SW_EINVAL);
        assert_null(l);
        assert_non_null(strstr(sw_context_error(ctx), "threshold_peak"));
    }
    params(&p);
    p.slope_calibration = 2;
    assert_int_equal(sw_loop_create(ctx, &p, &l), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "slope_calibration"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_calibrated),
        cmocka_unit_test(test_uncalibrated_loss),
        cmocka_unit_test(test_threshold_peak),
        cmocka_unit_test(test_mvm_and_bad_keys),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
