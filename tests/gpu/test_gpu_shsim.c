/*
 * The GPU Shack-Hartmann renderers (shsim_cuda.cu) against the CPU's (shsim.c), same plan
 * parameters and OPD: GEOMETRIC (Gaussian and sinc^2 spots) to 1e-4 of the brightest pixel
 * (float weights products and float atomics), DIFFRACTION to 1e-3 of it (single-precision cuFFT
 * and float OPD) with image sums within 1e-5; into host and device images, with accumulate = 0
 * and 1; a DIFFRACTION plan of 10 000 lenslets that cuFFT transforms in two batches; the truth
 * bit-identical (it is computed on the host either way). Skips (77) when no GPU is usable.
 *
 * Device OPD (sw_shsim_set_opd_device): a smooth wavefront given as a host sw_wavefront
 * (sw_shsim_add_wavefront) and as the same samples in a device float map must render the same
 * frame. Tolerance 1e-5 of the brightest pixel between the two GPU frames: the resampled OPD is
 * the same number in both (the same bilinear rule, with positions and interpolation rounded as
 * on the host: no FMA), the per-lenslet gradient sums differ only in their order of addition
 * (~1e-16 relative, ~1e-13 px in the spot positions), so what remains is the float atomics'
 * order in the renderers (~1e-7 of the peak); a wrong sample position, gradient or weight moves
 * spots by far more (a 1e-3 px shift of a spot of ~2 px width changes pixels by ~1e-3 of the
 * peak). Against the CPU frame the renderers' own tolerances apply (1e-4 / 1e-3 as above). Also:
 * a second device map replaces the first; the truth and the host adders refuse a device OPD
 * until sw_shsim_clear_opd; bad arguments and a map that misses lit samples are refused and
 * leave the OPD as it was; CPU plans refuse.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#ifdef SW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

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

#ifdef SW_HAVE_CUDA
/* A smooth test wavefront (um) at (u, v): tilt, astigmatism-like and a gentle ripple over
 * lengths of a few lenslets (pitch pu). */
static double smooth_w(double u, double v, double pu)
{
    const double x = u / (4.0 * pu), y = v / (4.0 * pu);
    return 0.05 * x - 0.03 * y + 0.04 * (x * x - y * y) + 0.03 * x * y +
           0.02 * sin(1.7 * x + 0.4) * cos(1.1 * y - 0.2);
}

/* Renders plan (GPU) into dev and copies into host. */
static void render_to(sw_shsim *plan, sw_image *dev, sw_image *host)
{
    if (sw_shsim_run(plan, dev, 0) != SW_OK)
        fail_msg("sw_shsim_run: %s", sw_context_error(gpu));
    assert_int_equal(sw_image_copy(gpu, dev, host), SW_OK);
}

/* One configuration of the device-OPD path (see the top). */
static void check_device_opd(const char *name, const sw_shsim_params *p, double tol_cpu)
{
    const double pu = p->geom.pitch_px * p->geom.pixel_um;
    /* a map over the array and a margin, at a spacing unrelated to the pupil grid's */
    const double sp = pu / 5.3;
    const int32_t nu = (int32_t)ceil((p->geom.nx + 1.0) * pu / sp) + 3;
    const int32_t nv = (int32_t)ceil((p->geom.ny + 1.0) * pu / sp) + 5;
    sw_wavefront w;
    assert_int_equal(sw_wavefront_alloc(cpu, nu, nv, sp, &w), SW_OK);
    const size_t n = (size_t)nu * nv;
    float *f = malloc(n * sizeof(float)), *f2 = malloc(n * sizeof(float));
    assert_non_null(f);
    assert_non_null(f2);
    for (int32_t k = 0; k < nv; k++)
        for (int32_t i = 0; i < nu; i++) {
            const size_t s = (size_t)k * nu + i;
            f[s] = (float)smooth_w(w.u0_um + i * sp, w.v0_um + k * sp, pu);
            w.opd_um[s] = (double)f[s]; /* the same samples on both paths */
            f2[s] = -3.0f * f[s] + 0.1f;
        }
    float *d = NULL, *d2 = NULL;
    assert_int_equal(cudaMalloc((void **)&d, n * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&d2, n * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemcpy(d, f, n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(d2, f2, n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess); /* before the context's stream */

    sw_shsim *pc = NULL, *ph = NULL, *pd = NULL;
    assert_int_equal(sw_shsim_create(cpu, p, &pc), SW_OK);
    assert_int_equal(sw_shsim_create(gpu, p, &ph), SW_OK);
    assert_int_equal(sw_shsim_create(gpu, p, &pd), SW_OK);
    sw_image ref, a, b, dev;
    assert_int_equal(sw_image_alloc(cpu, p->width, p->height, SW_PIX_F32, &ref), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, p->width, p->height, SW_PIX_F32, &a), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, p->width, p->height, SW_PIX_F32, &b), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, p->width, p->height, SW_PIX_F32, &dev), SW_OK);

    /* the CPU plan refuses a device map */
    assert_int_equal(sw_shsim_set_opd_device(pc, d, nu, nv, sp, w.u0_um, w.v0_um), SW_EUNSUPPORTED);
    /* host path: CPU and GPU */
    assert_int_equal(sw_shsim_add_wavefront(pc, &w, 1.0), SW_OK);
    assert_int_equal(sw_shsim_run(pc, &ref, 0), SW_OK);
    assert_int_equal(sw_shsim_add_wavefront(ph, &w, 1.0), SW_OK);
    render_to(ph, &dev, &a);
    /* device path: a first map, replaced by the test's */
    assert_int_equal(sw_shsim_add_zernike(pd, (const double[]){0.0, 0.0, 0.0, 0.5}, 4, 3.0 * pu),
                     SW_OK);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu, nv, sp, w.u0_um, w.v0_um), SW_OK);
    if (sw_shsim_set_opd_device(pd, d, nu, nv, sp, w.u0_um, w.v0_um) != SW_OK)
        fail_msg("%s: sw_shsim_set_opd_device: %s", name, sw_context_error(gpu));
    render_to(pd, &dev, &b);
    double rp, rs;
    compare(&a, &b, &rp, &rs);
    printf("%s: device OPD vs host OPD (GPU): max diff %.2e of the peak, sums %.2e apart\n", name,
           rp, rs);
    assert_true(rp < 1e-5);
    assert_true(rs < 1e-6);
    compare(&ref, &b, &rp, &rs);
    printf("%s: device OPD (GPU) vs host OPD (CPU): max diff %.2e of the peak, sums %.2e apart\n",
           name, rp, rs);
    assert_true(rp < tol_cpu);
    assert_true(rs < 1e-5);

    /* the host does not hold the OPD now */
    sw_sh_truth t;
    assert_int_equal(sw_shsim_truth(pd, &t), SW_EUNSUPPORTED);
    assert_int_equal(sw_shsim_add_wavefront(pd, &w, 1.0), SW_EUNSUPPORTED);
    assert_int_equal(sw_shsim_add_zernike(pd, (const double[]){0.0, 0.0, 0.0, 0.5}, 4, pu),
                     SW_EUNSUPPORTED);
    /* bad arguments, and a map that misses lit samples: refused, OPD unchanged */
    assert_int_equal(sw_shsim_set_opd_device(NULL, d, nu, nv, sp, w.u0_um, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, NULL, nu, nv, sp, w.u0_um, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, 0, nv, sp, w.u0_um, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu, -1, sp, w.u0_um, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu, nv, 0.0, w.u0_um, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu, nv, NAN, w.u0_um, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu, nv, sp, INFINITY, w.v0_um), SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu, nv, sp, w.u0_um + 2.0 * pu, w.v0_um),
                     SW_EINVAL);
    assert_int_equal(sw_shsim_set_opd_device(pd, d2, nu / 2, nv, sp, w.u0_um, w.v0_um), SW_EINVAL);
    render_to(pd, &dev, &a);
    compare(&b, &a, &rp, &rs);
    assert_true(rp < 1e-5);

    /* back to the host: clear, then the host adders and the truth work again */
    assert_int_equal(sw_shsim_clear_opd(pd), SW_OK);
    assert_int_equal(sw_shsim_add_wavefront(pd, &w, 1.0), SW_OK);
    assert_int_equal(sw_shsim_truth(pd, &t), SW_OK);
    sw_sh_truth_free(&t);
    render_to(pd, &dev, &a);
    compare(&b, &a, &rp, &rs);
    assert_true(rp < 1e-5);

    sw_image_free(&ref);
    sw_image_free(&a);
    sw_image_free(&b);
    sw_image_free(&dev);
    sw_shsim_destroy(pc);
    sw_shsim_destroy(ph);
    sw_shsim_destroy(pd);
    cudaFree(d);
    cudaFree(d2);
    free(f);
    free(f2);
    sw_wavefront_free(&w);
}

static void test_device_opd(void **state)
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
    double pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(9.2 * pu);
    p.pupil.obscuration = 0.2;
    check_device_opd("diffraction", &p, 1e-3);
    /* the loop's sensor: 32 x 32 lenslets of 8 px, square pupil, lambda f / d = 2 px */
    sw_shsim_params_default(&p);
    p.model = SW_SH_DIFFRACTION;
    p.geom.nx = p.geom.ny = 32;
    p.geom.pitch_px = 8.0;
    p.geom.x0 = p.geom.y0 = 0.0;
    p.geom.pixel_um = 10.0;
    p.geom.focal_mm = 2.0 * 10.0 * 80.0 / 0.7 / 1000.0;
    p.wavelength_um = 0.7;
    p.width = p.height = 256;
    check_device_opd("diffraction 32x32", &p, 1e-3);
    sw_shsim_params_default(&p);
    p.geom.nx = p.geom.ny = 18;
    p.geom.pitch_px = 20.7;
    p.geom.x0 = 3.2;
    p.geom.y0 = 6.6;
    p.width = 390;
    p.height = 400;
    pu = p.geom.pitch_px * p.geom.pixel_um;
    p.pupil = sw_pupil_circle(16.5 * pu);
    p.pupil.cu_um = 0.4 * pu;
    check_device_opd("geometric gaussian", &p, 1e-4);
    p.spot = SW_SH_SPOT_SINC2;
    check_device_opd("geometric sinc2", &p, 1e-4);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometric),
        cmocka_unit_test(test_diffraction),
#ifdef SW_HAVE_CUDA
        cmocka_unit_test(test_device_opd),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
