/*
 * Image quality from the wavefront (quality.h) on the CPU: the diffraction-limited PSF against
 * the Airy pattern (peak 1, first zero at 1.22 lambda / D), its energy (Parseval), the
 * diffraction-limited MTF against the analytical one, the Strehl ratio of small aberrations
 * against Marechal's exp(-(2 pi sigma / lambda)^2), the visual Strehl ratios (1 when perfect,
 * falling with defocus), the pixel scales, RMS by order, bad input.
 */
#define _DEFAULT_SOURCE
#include "testutil.h"

#include "spotwave/quality.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double PI = 3.14159265358979323846;

static sw_psf_plan *make_plan(sw_context *ctx, int32_t n, int32_t q, double pupil_mm,
                              double lambda_um)
{
    sw_psf_params p;
    sw_psf_params_default(&p);
    p.size = n;
    p.pupil_samples = q;
    p.pupil_mm = pupil_mm;
    p.wavelength_um = lambda_um;
    p.max_order = 6;
    sw_psf_plan *plan = NULL;
    assert_int_equal(sw_psf_create(ctx, &p, &plan), SW_OK);
    return plan;
}

static void test_airy(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    const int32_t N = 512, Q = 128;
    sw_psf_plan *plan = make_plan(ctx, N, Q, 4.0, 0.6);
    sw_image psf = {0};
    assert_int_equal(sw_image_alloc(NULL, N, N, SW_PIX_F32, &psf), SW_OK);
    double c[28] = {0};
    c[1] = 0.3; /* a tilt: left out (first_j 3), it would only move the PSF */
    sw_psf_quality q;
    assert_int_equal(sw_psf_run(plan, c, 28, &psf, NULL, &q), SW_OK);
    assert_near(q.strehl, 1.0, 1e-12);
    assert_near(q.vsotf, 1.0, 1e-12);
    assert_near(q.vsmtf, 1.0, 1e-12);
    assert_near(q.peak_x, N / 2, 0);
    assert_near(q.peak_y, N / 2, 0);
    assert_near(sw_image_get(&psf, N / 2, N / 2), 1.0, 1e-6);
    /* Parseval: sum PSF = N^2 / (samples inside the pupil); the disc has ~pi Q^2 / 4 of them */
    double sum = 0.0;
    for (int32_t y = 0; y < N; y++)
        for (int32_t x = 0; x < N; x++)
            sum += sw_image_get(&psf, x, y);
    assert_near(sum * PI * Q * Q / 4.0 / ((double)N * N), 1.0, 2e-3);
    /* Along x: [2 J1(v) / v]^2, v = pi D theta / lambda = pi Q x / N for x pixels. */
    for (int32_t x = 1; x <= 12; x++) {
        const double v = PI * Q * x / N;
        const double airy = pow(2.0 * j1(v) / v, 2.0);
        assert_near(sw_image_get(&psf, N / 2 + x, N / 2), airy, 4e-3);
        assert_near(sw_image_get(&psf, N / 2, N / 2 - x), airy, 4e-3);
    }
    /* the first dark ring at 1.22 lambda / D: 1.22 N / Q = 4.88 pixels */
    const double r0_px = 1.2197 * N / Q;
    assert_true(sw_image_get(&psf, N / 2 + 5, N / 2) < 2e-3);
    assert_true(sw_image_get(&psf, N / 2 + 3, N / 2) > 0.1);
    const double arcmin = sw_psf_arcmin_per_px(plan);
    assert_near(arcmin, 0.6e-6 * Q / (N * 4e-3) * 180.0 / PI * 60.0, 1e-12);
    assert_near(r0_px * arcmin, 1.2197 * 0.6e-6 / 4e-3 * 180.0 / PI * 60.0, 1e-9);
    sw_image_free(&psf);
    sw_psf_destroy(plan);
    sw_context_destroy(ctx);
}

static void test_mtf_diffraction(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    const int32_t N = 256, Q = 96;
    sw_psf_plan *plan = make_plan(ctx, N, Q, 6.0, 0.555);
    sw_image mtf = {0};
    assert_int_equal(sw_image_alloc(NULL, N, N, SW_PIX_F32, &mtf), SW_OK);
    double c[6] = {0};
    assert_int_equal(sw_psf_run(plan, c, 6, NULL, &mtf, NULL), SW_OK);
    assert_near(sw_image_get(&mtf, N / 2, N / 2), 1.0, 1e-6);
    double radial[100];
    assert_int_equal(sw_psf_mtf_radial(plan, &mtf, radial, 100), SW_OK);
    for (int32_t k = 0; k < 100; k += 3)
        assert_near(radial[k], sw_mtf_diffraction((double)k / Q), 0.01);
    /* beyond the cut-off D / lambda nothing passes */
    assert_true(radial[99] < 1e-6);
    assert_true(sw_image_get(&mtf, N / 2 + Q + 2, N / 2) < 1e-6);
    /* the cut-off, cycles per degree: D / lambda in cycles per radian */
    assert_near(sw_psf_cutoff_cpd(plan), 6e-3 / 0.555e-6 * PI / 180.0, 1e-9);
    assert_near(sw_psf_cutoff_cpd(plan), 188.7, 0.1);
    assert_near(sw_mtf_diffraction(0.0), 1.0, 1e-15);
    assert_near(sw_mtf_diffraction(0.5), 2.0 / PI * (acos(0.5) - 0.5 * sqrt(0.75)), 1e-15);
    assert_near(sw_mtf_diffraction(1.2), 0.0, 0.0);
    sw_image_free(&mtf);
    sw_psf_destroy(plan);
    sw_context_destroy(ctx);
}

static void test_marechal(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    const double lambda = 0.555;
    sw_psf_plan *plan = make_plan(ctx, 256, 128, 5.0, lambda);
    /* small aberrations of several kinds */
    const struct {
        int j;
        double c;
    } cases[] = {{4, 0.02}, {12, 0.015}, {7, 0.02}, {5, -0.025}, {10, 0.018}, {24, 0.012}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double c[28] = {0};
        c[cases[i].j] = cases[i].c;
        sw_psf_quality q;
        assert_int_equal(sw_psf_run(plan, c, 28, NULL, NULL, &q), SW_OK);
        const double k = 2.0 * PI * fabs(cases[i].c) / lambda;
        const double marechal = exp(-k * k);
        assert_true(q.strehl < 1.0);
        assert_near(q.strehl, marechal, 4e-3);
        assert_true(q.vsotf < 1.0 && q.vsmtf < 1.0);
    }
    /* a combination: sigma = the RMS of the terms (orthonormal) */
    double c[28] = {0};
    c[4] = 0.01;
    c[7] = -0.012;
    c[12] = 0.008;
    const double sigma = sqrt(0.01 * 0.01 + 0.012 * 0.012 + 0.008 * 0.008);
    sw_psf_quality q;
    assert_int_equal(sw_psf_run(plan, c, 28, NULL, NULL, &q), SW_OK);
    assert_near(q.strehl, exp(-pow(2.0 * PI * sigma / lambda, 2.0)), 3e-3);
    sw_psf_destroy(plan);
    sw_context_destroy(ctx);
}

static void test_visual_strehl_defocus(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_psf_plan *plan = make_plan(ctx, 256, 64, 4.0, 0.555);
    double last_s = 1.0, last_v = 1.0;
    for (int i = 1; i <= 4; i++) {
        double c[6] = {0};
        c[4] = 0.05 * i;
        sw_psf_quality q;
        assert_int_equal(sw_psf_run(plan, c, 6, NULL, NULL, &q), SW_OK);
        assert_true(q.strehl < last_s);
        assert_true(q.vsmtf < last_v);
        assert_true(q.vsotf <= q.vsmtf + 1e-12); /* Re OTF <= |OTF| */
        last_s = q.strehl;
        last_v = q.vsmtf;
    }
    /* a quarter dioptre over 4 mm (c20 = 0.144 um) costs most of the visual Strehl ratio */
    assert_true(last_v < 0.5);
    /* the CSF peaks near 8 cycles per degree */
    assert_true(sw_csf_mannos_sakrison(8.0) > sw_csf_mannos_sakrison(2.0));
    assert_true(sw_csf_mannos_sakrison(8.0) > sw_csf_mannos_sakrison(30.0));
    sw_psf_destroy(plan);
    sw_context_destroy(ctx);
}

static void test_rms_by_order(void **state)
{
    (void)state;
    double c[15] = {0, 1, 1, 0.3, 0.4, 0, 0.1, 0.2, 0.2, 0.4, 0.5, 0, 0, 0, 0};
    assert_near(sw_zernike_rms_order(c, 15, 1), sqrt(2.0), 1e-15);
    assert_near(sw_zernike_rms_order(c, 15, 2), 0.5, 1e-15);
    assert_near(sw_zernike_rms_order(c, 15, 3), 0.5, 1e-15);
    assert_near(sw_zernike_rms_order(c, 15, 4), 0.5, 1e-15);
    assert_near(sw_zernike_rms_order(c, 11, 4), 0.5, 1e-15);
    assert_near(sw_zernike_rms_order(c, 10, 4), 0.0, 0.0);
    /* orders >= 3: sw_zernike_rms from j = 6 */
    assert_near(sw_zernike_rms(c, 15, 6), sqrt(0.01 + 0.04 + 0.04 + 0.16 + 0.25), 1e-15);
}

static void test_bad_input(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_psf_params p;
    sw_psf_params_default(&p);
    sw_psf_plan *plan = NULL;
    p.pupil_samples = p.size / 2 + 1;
    assert_int_equal(sw_psf_create(ctx, &p, &plan), SW_EINVAL);
    assert_null(plan);
    sw_psf_params_default(&p);
    p.wavelength_um = 0.0;
    assert_int_equal(sw_psf_create(ctx, &p, &plan), SW_EINVAL);
    sw_psf_params_default(&p);
    p.first_j = 4;
    assert_int_equal(sw_psf_create(ctx, &p, &plan), SW_EINVAL);
    sw_psf_params_default(&p);
    p.size = 64;
    p.pupil_samples = 16;
    p.max_order = 4;
    assert_int_equal(sw_psf_create(ctx, &p, &plan), SW_OK);
    double c[28] = {0};
    c[4] = NAN;
    assert_int_equal(sw_psf_run(plan, c, 28, NULL, NULL, NULL), SW_EINVAL);
    c[4] = 0.0;
    c[20] = 0.1; /* order 5 in a plan of order 4 */
    assert_int_equal(sw_psf_run(plan, c, 28, NULL, NULL, NULL), SW_EINVAL);
    c[20] = 0.0;
    sw_image small = {0};
    assert_int_equal(sw_image_alloc(NULL, 32, 64, SW_PIX_F32, &small), SW_OK);
    assert_int_equal(sw_psf_run(plan, c, 28, &small, NULL, NULL), SW_EINVAL);
    assert_int_equal(sw_psf_run(plan, c, 28, NULL, NULL, NULL), SW_OK);
    sw_image_free(&small);
    sw_psf_destroy(plan);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_airy),         cmocka_unit_test(test_mtf_diffraction),
        cmocka_unit_test(test_marechal),     cmocka_unit_test(test_visual_strehl_defocus),
        cmocka_unit_test(test_rms_by_order), cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
