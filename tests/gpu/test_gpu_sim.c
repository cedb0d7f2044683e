/*
 * The GPU star simulators (seed 004) against the CPU's sequential one, which evaluates Eq. (2)
 * in double precision: PARALLEL and DETERMINISTIC to 2e-5 of the brightest pixel (float
 * evaluation and float atomics), ADAPTIVE to 1e-4 (the phase table's linear interpolation,
 * 256 bins), AUTO to the looser of the two. DETERMINISTIC is bit-identical run after run. The
 * detector model draws the same noise on both sides. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/rng.h"
#include "spotwave/sim.h"

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

/* n stars uniform over [-margin, size + margin) (some ROIs cross the edges, some miss), fluxes
 * log-uniform in [1e2, 1e5]. */
static void random_stars(sw_stars *s, int64_t n, int32_t w, int32_t h, uint64_t seed)
{
    assert_int_equal(sw_stars_alloc(NULL, n, s), SW_OK);
    for (int64_t i = 0; i < n; i++) {
        sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, (uint64_t)i);
        s->x[i] = -8.0 + (w + 16.0) * sw_rng_u01(r.v[0], r.v[1]);
        s->y[i] = -8.0 + (h + 16.0) * sw_rng_u01(r.v[2], r.v[3]);
        s->flux[i] = pow(10.0, 2.0 + 3.0 * sw_rng_u01f(r.v[1] ^ r.v[3]));
    }
}

/* Renders with a plan of the given method on ctx into a host f32 image (device image + copy for
 * GPU methods). */
static void render(sw_context *ctx, const sw_starsim_params *base, sw_starsim_method m,
                   const sw_stars *stars, sw_image *host_out)
{
    sw_starsim_params p = *base;
    p.method = m;
    sw_starsim *plan = NULL;
    if (sw_starsim_create(ctx, &p, &plan) != SW_OK)
        fail_msg("create (%s): %s", sw_starsim_method_string(m), sw_context_error(ctx));
    assert_int_equal(sw_image_alloc(cpu, p.width, p.height, SW_PIX_F32, host_out), SW_OK);
    if (sw_context_backend(ctx) == SW_BACKEND_CUDA && m != SW_STARSIM_SEQUENTIAL &&
        m != SW_STARSIM_OPENMP) {
        sw_image d;
        assert_int_equal(sw_image_alloc_device(ctx, p.width, p.height, SW_PIX_F32, &d), SW_OK);
        if (sw_starsim_run(plan, stars, &d) != SW_OK)
            fail_msg("run (%s): %s", sw_starsim_method_string(m), sw_context_error(ctx));
        if (m != SW_STARSIM_AUTO)
            assert_int_equal(sw_starsim_method_used(plan), m);
        assert_true(sw_starsim_render_us(plan) > 0.0);
        assert_int_equal(sw_image_copy(ctx, &d, host_out), SW_OK);
        sw_image_free(&d);
    } else {
        if (sw_starsim_run(plan, stars, host_out) != SW_OK)
            fail_msg("run (%s): %s", sw_starsim_method_string(m), sw_context_error(ctx));
    }
    sw_starsim_destroy(plan);
}

/* max |a - b| / max |a| */
static double rel_diff(const sw_image *a, const sw_image *b)
{
    double peak = 0, worst = 0;
    for (int32_t y = 0; y < a->height; y++)
        for (int32_t x = 0; x < a->width; x++) {
            double u = sw_image_get(a, x, y), v = sw_image_get(b, x, y);
            peak = fmax(peak, fabs(u));
            worst = fmax(worst, fabs(u - v));
        }
    return worst / peak;
}

static void compare_methods(int32_t side, sw_psf_mode psf, double sigma, int64_t n)
{
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = 509;
    p.height = 383;
    p.sigma = sigma;
    p.roi_side = side;
    p.psf = psf;
    p.max_stars = n;
    sw_stars stars;
    random_stars(&stars, n, p.width, p.height, 1000 + (uint64_t)side);
    sw_image ref, par, ada, det, det2, aut;
    render(cpu, &p, SW_STARSIM_SEQUENTIAL, &stars, &ref);
    render(gpu, &p, SW_STARSIM_PARALLEL, &stars, &par);
    render(gpu, &p, SW_STARSIM_ADAPTIVE, &stars, &ada);
    render(gpu, &p, SW_STARSIM_DETERMINISTIC, &stars, &det);
    render(gpu, &p, SW_STARSIM_DETERMINISTIC, &stars, &det2);
    render(gpu, &p, SW_STARSIM_AUTO, &stars, &aut);
    double ep = rel_diff(&ref, &par), ea = rel_diff(&ref, &ada), ed = rel_diff(&ref, &det),
           eu = rel_diff(&ref, &aut);
    print_message("side %d %s sigma %.2f, %lld stars: parallel %.2e adaptive %.2e "
                  "deterministic %.2e auto %.2e (of the peak)\n",
                  side, psf == SW_PSF_INTEGRATED ? "integrated" : "sampled", sigma, (long long)n,
                  ep, ea, ed, eu);
    assert_true(ep < 2e-5);
    assert_true(ea < 1e-4);
    assert_true(ed < 2e-5);
    assert_true(eu < 1e-4);
    assert_true(sw_image_equal(&det, &det2));
    sw_image_free(&ref);
    sw_image_free(&par);
    sw_image_free(&ada);
    sw_image_free(&det);
    sw_image_free(&det2);
    sw_image_free(&aut);
    sw_stars_free(&stars);
}

static void test_methods_agree_integrated(void **state)
{
    (void)state;
    compare_methods(11, SW_PSF_INTEGRATED, 1.3, 3000);
    compare_methods(10, SW_PSF_INTEGRATED, 0.5, 3000); /* even side, narrow PSF */
}

static void test_methods_agree_sampled(void **state)
{
    (void)state;
    compare_methods(11, SW_PSF_SAMPLED, 1.0, 3000);
}

/* An ROI of 41 x 41 = 1681 pixels: more than a block's 1024 threads (the seed's limit). */
static void test_large_roi(void **state)
{
    (void)state;
    compare_methods(41, SW_PSF_INTEGRATED, 5.0, 400);
}

/* Every GPU method writing into a host image (through the plan's device image) gives what it
 * gives into a device image; two runs of one DETERMINISTIC plan give the same bits; a run whose
 * fixed-point sums could overflow is refused before anything is written. */
static void test_host_output_and_repeat(void **state)
{
    (void)state;
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = 256;
    p.height = 200;
    p.max_stars = 500;
    sw_stars stars;
    random_stars(&stars, 500, p.width, p.height, 7);
    static const sw_starsim_method ms[] = {SW_STARSIM_PARALLEL, SW_STARSIM_ADAPTIVE,
                                           SW_STARSIM_DETERMINISTIC};
    for (int k = 0; k < 3; k++) {
        p.method = ms[k];
        sw_starsim *plan;
        assert_int_equal(sw_starsim_create(gpu, &p, &plan), SW_OK);
        sw_image h1, h2, ref;
        assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_F32, &h1), SW_OK);
        assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_F32, &h2), SW_OK);
        assert_int_equal(sw_starsim_run(plan, &stars, &h1), SW_OK);
        assert_int_equal(sw_starsim_run(plan, &stars, &h2), SW_OK);
        render(gpu, &p, ms[k], &stars, &ref);
        double e = rel_diff(&ref, &h1);
        if (ms[k] == SW_STARSIM_DETERMINISTIC) {
            assert_true(sw_image_equal(&h1, &h2)); /* same plan, run twice */
            assert_true(sw_image_equal(&h1, &ref));
            /* 2e14 e- in one run would overflow the fixed point */
            sw_stars big;
            assert_int_equal(sw_stars_alloc(NULL, 2, &big), SW_OK);
            big.x[0] = big.x[1] = 100.0;
            big.y[0] = big.y[1] = 100.0;
            big.flux[0] = big.flux[1] = 1e14;
            float before = ((float *)sw_image_row(&h1, 100))[100];
            assert_int_equal(sw_starsim_run(plan, &big, &h1), SW_ERANGE);
            assert_true(((float *)sw_image_row(&h1, 100))[100] == before);
            sw_stars_free(&big);
        } else {
            assert_true(e < 1e-6); /* float atomics: the order of additions may differ */
        }
        sw_image_free(&h1);
        sw_image_free(&h2);
        sw_image_free(&ref);
        sw_starsim_destroy(plan);
    }
    sw_stars_free(&stars);
}

/* The detector model: the GPU draws the same noise as the CPU, pixel for pixel (a count may
 * differ by one where host and device libm round exp/log differently on an acceptance
 * boundary: allowed for at most 1e-5 of the pixels). */
static void detector_case(sw_pixel_type type)
{
    const int32_t w = 640, h = 480;
    sw_image e, hc, hg, d_e, d_o;
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &e), SW_OK);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) /* 0 .. ~600 e-: both Poisson regimes */
            ((float *)sw_image_row(&e, y))[x] = (float)(x * 0.9 + y * 0.05);
    sw_detector det;
    sw_detector_default(&det);
    det.sky_e = 2.5;
    det.dark_e = 0.7;
    det.read_noise_e = 3.0;
    det.gain_e_per_adu = 1.7;
    det.bias_adu = 100.0;
    det.full_well_e = 500.0;
    det.out_type = type;
    det.seed = 99;
    assert_int_equal(sw_image_alloc(cpu, w, h, type, &hc), SW_OK);
    assert_int_equal(sw_detector_apply(cpu, &det, &e, &hc), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, w, h, SW_PIX_F32, &d_e), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, w, h, type, &d_o), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &e, &d_e), SW_OK);
    assert_int_equal(sw_detector_apply(gpu, &det, &d_e, &d_o), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, w, h, type, &hg), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &d_o, &hg), SW_OK);
    /* integer outputs: equal but for rare one-count differences (see above); f32: the same
     * counts, so equal to float rounding of the read noise term */
    const double tol = type == SW_PIX_F32 ? 1.0 / det.gain_e_per_adu + 1e-3 : 1.0;
    int64_t differ = 0;
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            double a = sw_image_get(&hc, x, y), b = sw_image_get(&hg, x, y);
            if (fabs(a - b) > (type == SW_PIX_F32 ? 1e-3 : 0.0)) {
                differ++;
                assert_true(fabs(a - b) <= tol);
            }
        }
    print_message("detector %s: %lld of %d pixels differ between CPU and GPU\n",
                  sw_pixel_type_string(type), (long long)differ, w * h);
    assert_true(differ <= (int64_t)(1e-5 * w * h) + 1);

    /* NaN electrons are refused on the GPU as on the CPU, the output untouched */
    ((float *)sw_image_row(&e, 5))[7] = NAN;
    assert_int_equal(sw_image_copy(gpu, &e, &d_e), SW_OK);
    assert_int_equal(sw_detector_apply(gpu, &det, &d_e, &d_o), SW_ERANGE);
    sw_image again;
    assert_int_equal(sw_image_alloc(cpu, w, h, type, &again), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &d_o, &again), SW_OK);
    assert_true(sw_image_equal(&again, &hg));
    sw_image_free(&again);
    sw_image_free(&e);
    sw_image_free(&hc);
    sw_image_free(&hg);
    sw_image_free(&d_e);
    sw_image_free(&d_o);
}

/* detector_case for every output type. */
static void test_detector_matches_cpu(void **state)
{
    (void)state;
    detector_case(SW_PIX_U8);
    detector_case(SW_PIX_U16);
    detector_case(SW_PIX_U32);
    detector_case(SW_PIX_F32);
}

/* Runs into host images in bands of rows (sw_starsim_set_bands) against the whole image
 * rendered, then copied (one band): an odd height that no band count divides, bands of 2 to the
 * most (more than roi_side allows: fewer are taken), ROIs that start above the image (band 0)
 * and cross band edges, bands without stars, pinned images (banded) and pageable ones (whole),
 * a list packed by several threads, the first bad star named and nothing written, and a second
 * run of the same plan with other stars (the packed list reused while nothing reads it).
 * DETERMINISTIC gives the same bits; PARALLEL and ADAPTIVE to 1e-6 of the peak (float atomics). */
static void test_banded_host_output(void **state)
{
    (void)state;
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = 509;
    p.height = 383;
    p.roi_side = 13; /* 383 / 13 = 29 bands at most */
    p.sigma = 1.5;
    p.max_stars = 30000;
    sw_stars a, b;
    random_stars(&a, 30000, p.width, p.height, 31); /* packed by several threads */
    random_stars(&b, 4000, p.width, p.height, 32);
    for (int64_t i = 0; i < 1000; i++) /* b: nothing in the top half (empty bands) */
        b.y[i] = 0.6 * p.height + 0.3 * p.height * (double)i / 1000.0;
    for (int64_t i = 1000; i < b.count; i++)
        b.y[i] = fabs(b.y[i] - 0.5 * p.height) + 0.5 * p.height;
    static const sw_starsim_method ms[] = {SW_STARSIM_PARALLEL, SW_STARSIM_ADAPTIVE,
                                           SW_STARSIM_DETERMINISTIC};
    static const int32_t bands[] = {2, 3, 7, 13, SW_STARSIM_MAX_BANDS};
    for (int k = 0; k < 3; k++) {
        p.method = ms[k];
        sw_starsim *plan;
        assert_int_equal(sw_starsim_create(gpu, &p, &plan), SW_OK);
        sw_image ra, rb, pinned, pageable;
        assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_F32, &ra), SW_OK);
        assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_F32, &rb), SW_OK);
        assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_F32, &pinned), SW_OK);
        assert_int_equal(sw_image_alloc(cpu, p.width, p.height, SW_PIX_F32, &pageable), SW_OK);
        assert_int_equal(sw_starsim_set_bands(plan, 1), SW_OK);
        assert_int_equal(sw_starsim_run(plan, &a, &ra), SW_OK);
        assert_int_equal(sw_starsim_run(plan, &b, &rb), SW_OK);
        for (size_t j = 0; j < sizeof bands / sizeof bands[0]; j++) {
            assert_int_equal(sw_starsim_set_bands(plan, bands[j]), SW_OK);
            for (int run = 0; run < 2; run++) {
                const sw_stars *st = run ? &b : &a;
                const sw_image *ref = run ? &rb : &ra;
                sw_image *out = j % 2 ? &pageable : &pinned;
                sw_test_fill_random(out, 9 + run); /* cleared by the run */
                if (sw_starsim_run(plan, st, out) != SW_OK)
                    fail_msg("%s, %d bands: %s", sw_starsim_method_string(ms[k]), bands[j],
                             sw_context_error(gpu));
                assert_true(sw_starsim_render_us(plan) > 0.0);
                if (ms[k] == SW_STARSIM_DETERMINISTIC) {
                    if (!sw_image_equal(out, ref))
                        fail_msg("deterministic, %d bands, run %d: not the whole image's bits",
                                 bands[j], run);
                } else {
                    const double e = rel_diff(ref, out);
                    if (!(e < 1e-6))
                        fail_msg("%s, %d bands, run %d: %.3g of the peak off the whole image",
                                 sw_starsim_method_string(ms[k]), bands[j], run, e);
                }
            }
        }
        /* refused before anything is written: a bad star late in the list (the first one is
         * named), and (DETERMINISTIC) more flux than the fixed point holds */
        assert_int_equal(sw_starsim_set_bands(plan, 4), SW_OK);
        assert_int_equal(sw_image_copy(gpu, &ra, &pinned), SW_OK);
        a.flux[29000] = -1.0;
        a.y[21000] = NAN;
        assert_int_equal(sw_starsim_run(plan, &a, &pinned), SW_EINVAL);
        assert_non_null(strstr(sw_context_error(gpu), "star 21000:"));
        a.y[21000] = 100.0;
        assert_int_equal(sw_starsim_run(plan, &a, &pinned), SW_EINVAL);
        assert_non_null(strstr(sw_context_error(gpu), "star 29000:"));
        a.flux[29000] = 100.0;
        if (ms[k] == SW_STARSIM_DETERMINISTIC) {
            const double f0 = a.flux[0], x0 = a.x[0], y0 = a.y[0];
            a.flux[0] = 1e14; /* with the others' flux, past the limit */
            a.x[0] = a.y[0] = 100.0;
            assert_int_equal(sw_starsim_run(plan, &a, &pinned), SW_ERANGE);
            a.flux[0] = f0;
            a.x[0] = x0;
            a.y[0] = y0;
        }
        assert_true(sw_image_equal(&pinned, &ra));
        sw_image_free(&ra);
        sw_image_free(&rb);
        sw_image_free(&pinned);
        sw_image_free(&pageable);
        sw_starsim_destroy(plan);
    }
    sw_stars_free(&a);
    sw_stars_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_methods_agree_integrated),
        cmocka_unit_test(test_methods_agree_sampled),
        cmocka_unit_test(test_large_roi),
        cmocka_unit_test(test_host_output_and_repeat),
        cmocka_unit_test(test_banded_host_output),
        cmocka_unit_test(test_detector_matches_cpu),
    };
    return cmocka_run_group_tests_name("gpu_sim", tests, setup, teardown);
}
