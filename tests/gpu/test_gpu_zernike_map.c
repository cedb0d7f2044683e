/*
 * Wavefront maps (zernike_fit.h, seed 001 section 3.4) on the GPU against the CPU: float and half
 * basis maps, host and device outputs, fewer coefficients than terms, the direct method, and the
 * modulo-1 display on device images. Both sides store bit-identical basis maps (computed on the
 * host by the same code), so the maps differ only by the order/fusion of the float sums.
 * Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/rng.h"
#include "zernike/zmap_internal.h"

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

static void random_coefs(double *c, int32_t count, uint64_t seed)
{
    for (int32_t j = 0; j < count; j++) {
        int n, m;
        assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_USER, (uint64_t)j);
        c[j] = (2.0 * (double)r.v[0] / 4294967296.0 - 1.0) / (n + 1);
    }
}

/* Float rounding bound of a sum over count terms (test_zernike_map.c), doubled: two sums. */
static double float_bound(const double *c, int32_t count)
{
    double s = 0.0;
    for (int32_t j = 0; j < count; j++) {
        int n, m;
        sw_zernike_osa_nm(j, &n, &m);
        s += fabs(c[j]) * (m == 0 ? sqrt(n + 1.0) : sqrt(2.0 * (n + 1.0)));
    }
    return 2.0 * (count + 2) * 0x1p-24 * s;
}

static sw_zmap_plan *plan_on(sw_context *ctx, int32_t size, int order, double o, int half)
{
    sw_zmap_params p;
    sw_zmap_params_default(&p);
    p.size = size;
    p.max_order = order;
    p.obscuration = o;
    p.half = half;
    sw_zmap_plan *plan = NULL;
    if (sw_zmap_create(ctx, &p, &plan) != SW_OK)
        fail_msg("sw_zmap_create: %s", sw_context_error(ctx));
    return plan;
}

/* Same NaN pixels, finite values within tol; returns the largest difference. */
static double compare(const sw_image *a, const sw_image *b, double tol)
{
    double worst = 0.0;
    int64_t finite = 0;
    for (int32_t k = 0; k < a->height; k++) {
        const float *ra = sw_image_row(a, k), *rb = sw_image_row(b, k);
        for (int32_t i = 0; i < a->width; i++) {
            if (isnan(ra[i]) || isnan(rb[i])) {
                if (!(isnan(ra[i]) && isnan(rb[i])))
                    fail_msg("pixel (%d, %d): %g vs %g (NaN on one side only)", (int)i, (int)k,
                             ra[i], rb[i]);
                continue;
            }
            assert_near(ra[i], rb[i], tol);
            worst = fmax(worst, fabs((double)ra[i] - (double)rb[i]));
            finite++;
        }
    }
    assert_true(finite > 0);
    return worst;
}

/* One configuration: CPU map vs GPU map to a host image and to a device image. */
static void check(int32_t n, int order, double o, int half, int32_t count, int direct)
{
    const int32_t terms = sw_zernike_count(order);
    double c[66] = {0};
    random_coefs(c, count, 1000 + (uint64_t)n);
    sw_zmap_plan *pc = plan_on(cpu, n, order, o, half), *pg = plan_on(gpu, n, order, o, half);
    sw_image ref, host, dev, back;
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_F32, &ref), SW_OK);
    assert_int_equal(sw_image_alloc(gpu, n, n, SW_PIX_F32, &host), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_F32, &back), SW_OK);
    /* a device image with an odd width inside a wider one: an unaligned, strided output */
    sw_image big;
    assert_int_equal(sw_image_alloc_device(gpu, n + 3, n, SW_PIX_F32, &big), SW_OK);
    assert_int_equal(sw_image_roi(gpu, &big, 1, 0, n, n, &dev), SW_OK);
    sw_status (*run)(sw_zmap_plan *, const double *, int32_t, sw_image *) =
        direct ? sw_zmap_run_direct : sw_zmap_run;
    assert_int_equal(run(pc, c, count, &ref), SW_OK);
    assert_int_equal(run(pg, c, count, &host), SW_OK);
    assert_int_equal(run(pg, c, count, &dev), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &dev, &back), SW_OK);
    const double tol = direct ? 1e-6 * float_bound(c, count) / (2.0 * (count + 2) * 0x1p-24)
                              : float_bound(c, count);
    const double e1 = compare(&ref, &host, tol), e2 = compare(&ref, &back, tol);
    print_message("%s %s size %d order %d (%d coefs) o %.2f: max |GPU - CPU| host %.2e, "
                  "device %.2e (tolerance %.2e)\n",
                  direct ? "direct" : "map", half ? "half " : "float", (int)n, order, (int)count, o,
                  e1, e2, tol);
    (void)terms;

    /* the modulo-1 display of the device map equals the host one of the same map */
    sw_image ud, uh, ub;
    assert_int_equal(sw_image_alloc_device(gpu, n, n, SW_PIX_U8, &ud), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_U8, &uh), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, n, n, SW_PIX_U8, &ub), SW_OK);
    assert_int_equal(sw_zmap_wrap(gpu, &dev, 0.6328, &ud), SW_OK);
    assert_int_equal(sw_zmap_wrap(cpu, &back, 0.6328, &uh), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &ud, &ub), SW_OK);
    assert_true(sw_image_equal(&uh, &ub));
    /* device images need a CUDA context */
    assert_int_equal(sw_zmap_wrap(cpu, &dev, 0.6328, &ud), SW_EINVAL);
    /* a host map with a device output */
    assert_int_equal(sw_zmap_wrap(gpu, &back, 0.6328, &ud), SW_EINVAL);
    sw_image_free(&ud);
    sw_image_free(&uh);
    sw_image_free(&ub);
    sw_image_free(&ref);
    sw_image_free(&host);
    sw_image_free(&back);
    sw_image_free(&big);
    sw_zmap_destroy(pc);
    sw_zmap_destroy(pg);
}

static void test_float_maps(void **state)
{
    (void)state;
    check(200, 8, 0.3, 0, 45, 0);
    check(1024, 10, 0.0, 0, 66, 0);
    check(77, 6, 0.0, 0, 11, 0); /* fewer coefficients than terms */
    check(5, 2, 0.0, 0, 0, 0);   /* no coefficient: zeros inside */
}

static void test_half_maps(void **state)
{
    (void)state;
    check(200, 8, 0.3, 1, 45, 0);
    check(1024, 10, 0.0, 1, 66, 0);
    check(513, 4, 0.1, 1, 15, 0);
}

static void test_direct_maps(void **state)
{
    (void)state;
    check(200, 8, 0.3, 0, 45, 1);
    check(1024, 10, 0.0, 1, 66, 1);
}

/* Device-side checks: a device output on a plan of the other backend, sizes. */
static void test_bad_device_use(void **state)
{
    (void)state;
    sw_zmap_plan *pc = plan_on(cpu, 64, 4, 0.0, 0);
    sw_image dev, small;
    assert_int_equal(sw_image_alloc_device(gpu, 64, 64, SW_PIX_F32, &dev), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, 64, 63, SW_PIX_F32, &small), SW_OK);
    double c[15];
    random_coefs(c, 15, 4);
    assert_int_equal(sw_zmap_run(pc, c, 15, &dev), SW_EINVAL);
    sw_zmap_plan *pg = plan_on(gpu, 64, 4, 0.0, 1);
    assert_int_equal(sw_zmap_run(pg, c, 15, &small), SW_EINVAL);
    assert_int_equal(sw_zmap_run(pg, c, 16, &dev), SW_EINVAL);
    assert_int_equal(sw_zmap_run(pg, c, 15, &dev), SW_OK);
    /* the PNG of a device map */
    assert_int_equal(sw_zmap_write_png(gpu, sw_test_path("gpu.png"), &dev), SW_OK);
    assert_true(sw_test_file_exists(sw_test_path("gpu.png")));
    sw_image_free(&dev);
    sw_image_free(&small);
    sw_zmap_destroy(pc);
    sw_zmap_destroy(pg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_maps),
        cmocka_unit_test(test_half_maps),
        cmocka_unit_test(test_direct_maps),
        cmocka_unit_test(test_bad_device_use),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
