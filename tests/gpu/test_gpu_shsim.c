/*
 * The GPU Shack-Hartmann renderers (shsim_cuda.cu) against the CPU's (shsim.c), same plan
 * parameters and OPD: GEOMETRIC (Gaussian and sinc^2 spots) to 1e-4 of the brightest pixel
 * (float weights products and float atomics), DIFFRACTION to 1e-3 of it (single-precision cuFFT
 * and float OPD) with image sums within 1e-5; into host and device images, with accumulate = 0
 * and 1; a DIFFRACTION plan of 10 000 lenslets that cuFFT transforms in two batches; the truth
 * bit-identical (it is computed on the host either way). Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
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

static sw_shsim *make(sw_context *ctx, const sw_shsim_params *p, const double *c, int count,
                      double R)
{
    sw_shsim *plan = NULL;
    if (sw_shsim_create(ctx, p, &plan) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(ctx));
    if (sw_shsim_add_zernike(plan, c, count, R) != SW_OK)
        fail_msg("sw_shsim_add_zernike: %s", sw_context_error(ctx));
    return plan;
}

static void fill(sw_image *img, float v)
{
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++)
            ((float *)sw_image_row(img, y))[x] = v;
}

/* max |a - b| / max |a|, and the relative difference of the sums */
static void compare(const sw_image *a, const sw_image *b, double *rel_peak, double *rel_sum)
{
    double peak = 0, worst = 0, sa = 0, sb = 0;
    for (int32_t y = 0; y < a->height; y++)
        for (int32_t x = 0; x < a->width; x++) {
            const double va = sw_image_get(a, x, y), vb = sw_image_get(b, x, y);
            peak = fmax(peak, fabs(va));
            worst = fmax(worst, fabs(va - vb));
            sa += va;
            sb += vb;
        }
    assert_true(peak > 0.0);
    *rel_peak = worst / peak;
    *rel_sum = fabs(sa - sb) / fabs(sa);
}

static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* One configuration: CPU host image vs GPU into host and device images, accumulate 0 and 1. */
static void check(const char *name, const sw_shsim_params *p, const double *c, int count, double R,
                  double tol_peak, double tol_sum)
{
    sw_shsim *pc = make(cpu, p, c, count, R), *pg = make(gpu, p, c, count, R);
    sw_image ref, host, back, dev;
    assert_int_equal(sw_image_alloc(cpu, p->width, p->height, SW_PIX_F32, &ref), SW_OK);
    assert_int_equal(sw_image_alloc(gpu, p->width, p->height, SW_PIX_F32, &host), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, p->width, p->height, SW_PIX_F32, &back), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, p->width, p->height, SW_PIX_F32, &dev), SW_OK);
    double rp, rs;

    assert_int_equal(sw_shsim_run(pc, &ref, 0), SW_OK);
    fill(&host, 123.0f); /* accumulate = 0 must clear it */
    if (sw_shsim_run(pg, &host, 0) != SW_OK)
        fail_msg("%s: GPU run: %s", name, sw_context_error(gpu));
    assert_true(sw_shsim_render_us(pg) > 0.0);
    compare(&ref, &host, &rp, &rs);
    printf("%s: host image: max diff %.2e of the peak, sums %.2e apart\n", name, rp, rs);
    assert_true(rp < tol_peak);
    assert_true(rs < tol_sum);

    assert_int_equal(sw_shsim_run(pg, &dev, 0), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &dev, &back), SW_OK);
    compare(&ref, &back, &rp, &rs);
    printf("%s: device image: max diff %.2e of the peak, sums %.2e apart\n", name, rp, rs);
    assert_true(rp < tol_peak);
    assert_true(rs < tol_sum);

    /* accumulate: onto 5 e- everywhere, host and device */
    fill(&ref, 5.0f);
    fill(&host, 5.0f);
    assert_int_equal(sw_shsim_run(pc, &ref, 1), SW_OK);
    assert_int_equal(sw_shsim_run(pg, &host, 1), SW_OK);
    compare(&ref, &host, &rp, &rs);
    assert_true(rp < tol_peak);
    assert_true(rs < tol_sum);
    assert_near(sw_image_get(&host, 0, 0), 5.0 + sw_image_get(&back, 0, 0), 1e-3);
    assert_int_equal(sw_image_copy(gpu, &back, &dev), SW_OK); /* dev = one render */
    assert_int_equal(sw_shsim_run(pg, &dev, 1), SW_OK);       /* dev = two renders */
    assert_int_equal(sw_image_copy(gpu, &dev, &host), SW_OK);
    double peak = 0, worst = 0;
    for (int32_t y = 0; y < p->height; y++)
        for (int32_t x = 0; x < p->width; x++) {
            peak = fmax(peak, sw_image_get(&back, x, y));
            worst = fmax(worst, fabs(sw_image_get(&host, x, y) - 2 * sw_image_get(&back, x, y)));
        }
    assert_true(worst < 1e-5 * peak);

    /* truth: computed on the host, identical */
    sw_sh_truth tc, tg;
    assert_int_equal(sw_shsim_truth(pc, &tc), SW_OK);
    assert_int_equal(sw_shsim_truth(pg, &tg), SW_OK);
    for (int64_t l = 0; l < (int64_t)tc.nx * tc.ny; l++) {
        assert_true(same_double(tc.x_px[l], tg.x_px[l]) && same_double(tc.y_px[l], tg.y_px[l]));
        assert_true(same_double(tc.slope_x[l], tg.slope_x[l]) && tc.illum[l] == tg.illum[l]);
    }
    sw_sh_truth_free(&tc);
    sw_sh_truth_free(&tg);

    /* a new OPD reaches the device (the plan uploads it lazily) */
    double c2[15] = {0};
    c2[2] = 0.3;
    assert_int_equal(sw_shsim_add_zernike(pc, c2, 3, R), SW_OK);
    assert_int_equal(sw_shsim_add_zernike(pg, c2, 3, R), SW_OK);
    assert_int_equal(sw_shsim_run(pc, &ref, 0), SW_OK);
    assert_int_equal(sw_shsim_run(pg, &dev, 0), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &dev, &host), SW_OK);
    compare(&ref, &host, &rp, &rs);
    assert_true(rp < tol_peak);

    sw_image_free(&ref);
    sw_image_free(&host);
    sw_image_free(&back);
    sw_image_free(&dev);
    sw_shsim_destroy(pc);
    sw_shsim_destroy(pg);
}

static void coefs(double *c, uint64_t seed, double amp)
{
    for (int j = 0; j < 15; j++) {
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, (uint64_t)j);
        c[j] = j < 3 ? 0.0 : amp * (2.0 * sw_rng_u01(r.v[0], r.v[1]) - 1.0);
    }
}

static void test_geometric(void **state)
{
    (void)state;
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    p.geom.nx = p.geom.ny = 18;
    p.geom.pitch_px = 20.7;
    p.geom.x0 = 3.2;
    p.geom.y0 = 6.6;
    p.width = 390;
    p.height = 400;
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(16.5 * pu);
    p.pupil.cu_um = 0.4 * pu;
    double c[15];
    coefs(c, 21, 0.15);
    check("geometric gaussian", &p, c, 15, 8 * pu, 1e-4, 1e-5);
    p.spot = SW_SH_SPOT_SINC2;
    p.roi_px = 41; /* block of 41^2 pixels per lenslet, two weights' loops */
    check("geometric sinc2", &p, c, 15, 8 * pu, 1e-4, 1e-5);
}

static void test_diffraction(void **state)
{
    (void)state;
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    p.model = SW_SH_DIFFRACTION;
    p.geom.nx = p.geom.ny = 10;
    p.geom.pitch_px = 24.4;
    p.geom.x0 = 30.3;
    p.geom.y0 = 28.9;
    p.geom.focal_mm = 4.5;
    p.width = p.height = 310;
    const double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(9.2 * pu);
    p.pupil.obscuration = 0.2;
    double c[15];
    coefs(c, 22, 0.08);
    check("diffraction", &p, c, 15, 4.6 * pu, 1e-3, 1e-5);
    /* 100 x 100 lenslets of 16 px, FFT 64: 10 000 slots of 32 KiB, two cuFFT batches */
    sw_shsim_params_default(&p);
    p.model = SW_SH_DIFFRACTION;
    p.geom.nx = p.geom.ny = 100;
    p.geom.x0 = p.geom.y0 = 8;
    p.width = p.height = 1616;
    coefs(c, 23, 0.3);
    check("diffraction 100x100", &p, c, 15, 50 * 16 * 5.5, 1e-3, 1e-5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometric),
        cmocka_unit_test(test_diffraction),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
