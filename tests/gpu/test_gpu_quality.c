/*
 * Image quality from the wavefront (quality.h) on the GPU (cuFFT) against the CPU (FFTW): the PSF
 * and MTF images (host and device outputs), the Strehl ratio, the visual Strehl ratios and the
 * peak's position for an aberrated eye, and the diffraction-limited case. The transforms differ,
 * so the numbers agree to rounding, not bit for bit. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/quality.h"

#include <math.h>
#include <string.h>

static sw_context *gpu;
static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

static sw_psf_plan *plan_on(sw_context *ctx, int32_t n, int32_t q)
{
    sw_psf_params p;
    sw_psf_params_default(&p);
    p.size = n;
    p.pupil_samples = q;
    p.pupil_mm = 6.0;
    p.wavelength_um = 0.555;
    sw_psf_plan *plan = NULL;
    assert_int_equal(sw_psf_create(ctx, &p, &plan), SW_OK);
    return plan;
}

static double max_diff(const sw_image *a, const sw_image *b)
{
    double d = 0.0;
    for (int32_t y = 0; y < a->height; y++)
        for (int32_t x = 0; x < a->width; x++)
            d = fmax(d, fabs(sw_image_get(a, x, y) - sw_image_get(b, x, y)));
    return d;
}

static void compare(const double *c, int32_t count, int32_t n, int32_t q)
{
    sw_psf_plan *pc = plan_on(cpu, n, q), *pg = plan_on(gpu, n, q);
    sw_image psf_c = {0}, mtf_c = {0}, psf_g = {0}, mtf_g = {0}, psf_d = {0}, back = {0};
    assert_int_equal(sw_image_alloc(NULL, n, n, SW_PIX_F32, &psf_c), SW_OK);
    assert_int_equal(sw_image_alloc(NULL, n, n, SW_PIX_F32, &mtf_c), SW_OK);
    assert_int_equal(sw_image_alloc(gpu, n, n, SW_PIX_F32, &psf_g), SW_OK);
    assert_int_equal(sw_image_alloc(gpu, n, n, SW_PIX_F32, &mtf_g), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, n, n, SW_PIX_F32, &psf_d), SW_OK);
    assert_int_equal(sw_image_alloc(NULL, n, n, SW_PIX_F32, &back), SW_OK);
    sw_psf_quality qc, qg, qd;
    assert_int_equal(sw_psf_run(pc, c, count, &psf_c, &mtf_c, &qc), SW_OK);
    assert_int_equal(sw_psf_run(pg, c, count, &psf_g, &mtf_g, &qg), SW_OK);
    assert_int_equal(sw_psf_run(pg, c, count, &psf_d, NULL, &qd), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &psf_d, &back), SW_OK);
    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
    assert_near(qg.strehl, qc.strehl, 1e-9 * (1.0 + qc.strehl));
    assert_near(qg.vsotf, qc.vsotf, 1e-9);
    assert_near(qg.vsmtf, qc.vsmtf, 1e-9);
    /* the same peak, or (a near tie) one the CPU's PSF rates as high */
    assert_near(sw_image_get(&psf_c, (int32_t)qg.peak_x, (int32_t)qg.peak_y), qc.strehl,
                1e-6 * qc.strehl);
    assert_true(max_diff(&psf_c, &psf_g) <= 1e-6 * qc.strehl + 1e-12);
    assert_true(max_diff(&mtf_c, &mtf_g) <= 1e-6);
    assert_true(max_diff(&psf_g, &back) == 0.0);
    assert_near(qd.strehl, qg.strehl, 0);
    sw_image_free(&psf_c);
    sw_image_free(&mtf_c);
    sw_image_free(&psf_g);
    sw_image_free(&mtf_g);
    sw_image_free(&psf_d);
    sw_image_free(&back);
    sw_psf_destroy(pc);
    sw_psf_destroy(pg);
}

static void test_aberrated_eye(void **state)
{
    (void)state;
    /* a 6 mm eye: defocus, astigmatism, coma, trefoil, spherical aberration */
    double c[28] = {0};
    c[3] = -0.08;
    c[4] = 0.25;
    c[5] = 0.12;
    c[7] = 0.09;
    c[9] = -0.05;
    c[12] = 0.11;
    c[24] = -0.02;
    compare(c, 28, 256, 128);
    compare(c, 28, 512, 128);
}

static void test_diffraction_limited(void **state)
{
    (void)state;
    double c[6] = {0};
    compare(c, 6, 128, 48);
    sw_psf_plan *pg = plan_on(gpu, 128, 48);
    sw_psf_quality q;
    assert_int_equal(sw_psf_run(pg, c, 6, NULL, NULL, &q), SW_OK);
    assert_near(q.strehl, 1.0, 1e-12);
    assert_near(q.vsotf, 1.0, 1e-12);
    sw_psf_destroy(pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aberrated_eye),
        cmocka_unit_test(test_diffraction_limited),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
