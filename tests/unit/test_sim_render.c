/*
 * The star simulator's CPU renderers (starsim.c, seed 004): flux conservation and centroids of
 * the integrated PSF, the sampled PSF against the closed form of seed Eq. (2), the ROI and its
 * clipping, sequential vs OpenMP, determinism across runs and thread counts, and bad input.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

static sw_starsim *make_plan(sw_context *ctx, int32_t w, int32_t h, double sigma, int32_t side,
                             sw_psf_mode psf, sw_starsim_method m)
{
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = w;
    p.height = h;
    p.sigma = sigma;
    p.roi_side = side;
    p.psf = psf;
    p.method = m;
    sw_starsim *plan = NULL;
    sw_status st = sw_starsim_create(ctx, &p, &plan);
    if (st != SW_OK)
        fail_msg("sw_starsim_create: %s", sw_context_error(ctx));
    return plan;
}

static sw_stars one_star(sw_context *ctx, double x, double y, double flux)
{
    sw_stars s;
    assert_int_equal(sw_stars_alloc(ctx, 1, &s), SW_OK);
    s.x[0] = x;
    s.y[0] = y;
    s.flux[0] = flux;
    return s;
}

static double uniform(uint64_t seed, uint64_t i)
{
    sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, i);
    return sw_rng_u01(r.v[0], r.v[1]);
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

/* The centroid of a pixel-integrated Gaussian is E[round(Y)], Y ~ N(X, sigma^2): X minus the
 * sawtooth's Fourier series damped by the Gaussian's characteristic function. This is the
 * sampling bias of pixel-centre centroids (below 3e-9 px from sigma = 1 on, 2.3e-3 px at 0.5). */
static double expected_centroid(double X, double sigma)
{
    double c = X;
    for (int n = 1; n <= 4; n++)
        c -= ((n % 2) ? 1.0 : -1.0) / (PI * n) * sin(2 * PI * n * X) *
             exp(-2 * PI * PI * n * n * sigma * sigma);
    return c;
}

/* ------------------------------------------------------------------ integrated PSF */

static void test_integrated_flux_and_centroid(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    const double sigmas[] = {0.5, 1.0, 2.0, 3.5, 5.0};
    const sw_starsim_method methods[] = {SW_STARSIM_SEQUENTIAL, SW_STARSIM_OPENMP};
    double worst_flux = 0, worst_cen = 0, worst_raw = 0, bias_05 = 0;
    for (size_t si = 0; si < 5; si++) {
        const double sigma = sigmas[si];
        const int32_t side = 2 * (int32_t)ceil(6 * sigma) + 1, size = side + 40;
        for (size_t mi = 0; mi < 2; mi++) {
            sw_starsim *plan =
                make_plan(ctx, size, size, sigma, side, SW_PSF_INTEGRATED, methods[mi]);
            sw_image img;
            assert_int_equal(sw_image_alloc(ctx, size, size, SW_PIX_F32, &img), SW_OK);
            for (int k = 0; k < 8; k++) {
                const double X = size / 2 + uniform(si * 100 + mi, 2 * k) - 0.5;
                const double Y = size / 2 - 3 + uniform(si * 100 + mi, 2 * k + 1) * 3;
                const double flux = 12345.678;
                sw_stars s = one_star(ctx, X, Y, flux);
                assert_int_equal(sw_starsim_run(plan, &s, &img), SW_OK);
                assert_int_equal(sw_starsim_rendered(plan), 1);
                double sum = 0, sx = 0, sy = 0;
                for (int32_t y = 0; y < size; y++)
                    for (int32_t x = 0; x < size; x++) {
                        double v = sw_image_get(&img, x, y);
                        assert_true(v >= 0.0);
                        sum += v;
                        sx += v * x;
                        sy += v * y;
                    }
                const double ef = fabs(sum - flux) / flux;
                const double cx = sx / sum, cy = sy / sum;
                const double ec = fmax(fabs(cx - expected_centroid(X, sigma)),
                                       fabs(cy - expected_centroid(Y, sigma)));
                const double raw = fmax(fabs(cx - X), fabs(cy - Y));
                assert_true(ef <= 1e-5);
                assert_true(ec <= 1e-5);
                if (sigma >= 1.0)
                    assert_true(raw <= 1e-4); /* the bound, unbiased from sigma = 1 on */
                worst_flux = fmax(worst_flux, ef);
                worst_cen = fmax(worst_cen, ec);
                if (sigma >= 1.0)
                    worst_raw = fmax(worst_raw, raw);
                else
                    bias_05 = fmax(bias_05, raw);
                sw_stars_free(&s);
            }
            sw_image_free(&img);
            sw_starsim_destroy(plan);
        }
    }
    printf("integrated: worst relative flux error %.3g, centroid error vs expected %.3g px, "
           "vs the true position (sigma >= 1) %.3g px (sigma 0.5: %.3g px, the sampling bias)\n",
           worst_flux, worst_cen, worst_raw, bias_05);
    sw_context_destroy(ctx);
}

/* A star on the corner pixel: the ROI is clipped and the image holds exactly the part of the
 * integrated Gaussian over [-0.5, inf)^2. */
static void test_integrated_clipped_at_edges(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    const double sigma = 2.0, X = 0.3, Y = -0.2, flux = 1000.0;
    sw_starsim *plan = make_plan(ctx, 64, 48, sigma, 41, SW_PSF_INTEGRATED, SW_STARSIM_OPENMP);
    sw_image img;
    assert_int_equal(sw_image_alloc(ctx, 64, 48, SW_PIX_F32, &img), SW_OK);
    sw_stars s = one_star(ctx, X, Y, flux);
    assert_int_equal(sw_starsim_run(plan, &s, &img), SW_OK);
    /* ROI columns x0 .. x0 + 40 with x0 = floor(X - 20 + 0.5) = -20: inside, 0 .. 20. */
    const double fx =
        0.5 * (erfc((-0.5 - X) / (sigma * sqrt(2.0))) - erfc((20.5 - X) / (sigma * sqrt(2.0))));
    const double fy =
        0.5 * (erfc((-0.5 - Y) / (sigma * sqrt(2.0))) - erfc((20.5 - Y) / (sigma * sqrt(2.0))));
    assert_near(image_sum(&img), flux * fx * fy, 1e-5 * flux);
    assert_true(sw_image_get(&img, 20, 0) > 0.0f);
    assert_true(sw_image_get(&img, 21, 0) == 0.0f); /* outside the ROI */
    assert_true(sw_image_get(&img, 0, 21) == 0.0f);
    sw_stars_free(&s);
    sw_image_free(&img);
    sw_starsim_destroy(plan);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ sampled PSF */

static void test_sampled_closed_form(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(3);
    const double sigmas[] = {0.7, 1.5, 3.0};
    for (size_t si = 0; si < 3; si++) {
        const double sigma = sigmas[si], flux = 5000.0;
        for (int side = 4; side <= 9; side += 5) { /* even and odd sides */
            for (int mi = 0; mi < 2; mi++) {
                sw_starsim *plan = make_plan(ctx, 40, 30, sigma, side, SW_PSF_SAMPLED,
                                             mi ? SW_STARSIM_OPENMP : SW_STARSIM_SEQUENTIAL);
                sw_image img;
                assert_int_equal(sw_image_alloc(ctx, 40, 30, SW_PIX_F32, &img), SW_OK);
                for (int k = 0; k < 5; k++) {
                    const double X = 20 + 2 * uniform(7 + si, 2 * k) - 1;
                    const double Y = 14 + 2 * uniform(7 + si, 2 * k + 1) - 1;
                    sw_stars s = one_star(ctx, X, Y, flux);
                    assert_int_equal(sw_starsim_run(plan, &s, &img), SW_OK);
                    const double peak = flux / (2 * PI * sigma * sigma);
                    const int x0 = (int)floor(X - (side - 1) / 2.0 + 0.5);
                    const int y0 = (int)floor(Y - (side - 1) / 2.0 + 0.5);
                    for (int32_t y = 0; y < 30; y++)
                        for (int32_t x = 0; x < 40; x++) {
                            const int in = x >= x0 && x < x0 + side && y >= y0 && y < y0 + side;
                            const double r2 = (x - X) * (x - X) + (y - Y) * (y - Y);
                            const double want = in ? peak * exp(-r2 / (2 * sigma * sigma)) : 0.0;
                            assert_near(sw_image_get(&img, x, y), want, 2e-6 * peak);
                            if (!in)
                                assert_true(sw_image_get(&img, x, y) == 0.0);
                        }
                    sw_stars_free(&s);
                }
                sw_image_free(&img);
                sw_starsim_destroy(plan);
            }
        }
    }
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ fields */

/* 500 stars with overlapping ROIs, on and beyond the edges. */
static sw_stars field(sw_context *ctx, int32_t w, int32_t h, uint64_t seed)
{
    sw_stars s;
    assert_int_equal(sw_stars_alloc(ctx, 500, &s), SW_OK);
    for (int i = 0; i < 500; i++) {
        s.x[i] = -8 + (w + 16) * uniform(seed, 3 * i);
        s.y[i] = -8 + (h + 16) * uniform(seed, 3 * i + 1);
        s.flux[i] = 10 + 1e5 * uniform(seed, 3 * i + 2);
    }
    s.x[0] = 0.0; /* exactly on edges and corners */
    s.y[0] = 0.0;
    s.x[1] = w - 1;
    s.y[1] = h - 1;
    s.x[2] = -0.5;
    s.x[3] = w - 0.5;
    return s;
}

static void test_sequential_vs_openmp(void **state)
{
    (void)state;
    const int32_t W = 200, H = 150;
    sw_context *ctx = sw_test_cpu_context(0);
    for (int psf = 0; psf < 2; psf++) {
        sw_stars s = field(ctx, W, H, 11 + psf);
        sw_image a, b;
        assert_int_equal(sw_image_alloc(ctx, W, H, SW_PIX_F32, &a), SW_OK);
        assert_int_equal(sw_image_alloc(ctx, W, H, SW_PIX_F32, &b), SW_OK);
        sw_starsim *seq = make_plan(ctx, W, H, 2.0, 15, (sw_psf_mode)psf, SW_STARSIM_SEQUENTIAL);
        sw_starsim *omp = make_plan(ctx, W, H, 2.0, 15, (sw_psf_mode)psf, SW_STARSIM_OPENMP);
        assert_int_equal(sw_starsim_run(seq, &s, &a), SW_OK);
        assert_int_equal(sw_starsim_run(omp, &s, &b), SW_OK);
        assert_int_equal(sw_starsim_method_used(seq), SW_STARSIM_SEQUENTIAL);
        assert_int_equal(sw_starsim_method_used(omp), SW_STARSIM_OPENMP);
        assert_true(sw_starsim_rendered(seq) > 400 && sw_starsim_rendered(seq) <= 500);
        assert_int_equal(sw_starsim_rendered(seq), sw_starsim_rendered(omp));
        const double peak = image_max(&a);
        assert_true(peak > 0);
        double worst = 0;
        for (int32_t y = 0; y < H; y++)
            for (int32_t x = 0; x < W; x++)
                worst = fmax(worst, fabs(sw_image_get(&a, x, y) - sw_image_get(&b, x, y)));
        assert_true(worst <= 1e-6 * peak);
        /* By construction (same double arithmetic, stars added in list order) they are
         * bit-identical. */
        assert_true(sw_image_equal(&a, &b));
        sw_starsim_destroy(seq);
        sw_starsim_destroy(omp);
        sw_image_free(&a);
        sw_image_free(&b);
        sw_stars_free(&s);
    }
    sw_context_destroy(ctx);
}

static void test_deterministic_across_runs_and_threads(void **state)
{
    (void)state;
    const int32_t W = 173, H = 131;
    const int threads[] = {1, 2, 3, 7, 16};
    sw_image ref;
    sw_context *c0 = sw_test_cpu_context(1);
    sw_stars s = field(c0, W, H, 99);
    assert_int_equal(sw_image_alloc(c0, W, H, SW_PIX_F32, &ref), SW_OK);
    sw_starsim *p0 = make_plan(c0, W, H, 1.3, 12, SW_PSF_INTEGRATED, SW_STARSIM_OPENMP);
    assert_int_equal(sw_starsim_run(p0, &s, &ref), SW_OK);
    for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
        sw_context *ctx = sw_test_cpu_context(threads[t]);
        for (int m = 0; m < 3; m++) {
            const sw_starsim_method method = m == 0   ? SW_STARSIM_OPENMP
                                             : m == 1 ? SW_STARSIM_DETERMINISTIC
                                                      : SW_STARSIM_AUTO;
            sw_starsim *plan = make_plan(ctx, W, H, 1.3, 12, SW_PSF_INTEGRATED, method);
            for (int run = 0; run < 2; run++) {
                sw_image img;
                assert_int_equal(sw_image_alloc(ctx, W, H, SW_PIX_F32, &img), SW_OK);
                sw_test_fill_random(&img, 5 + run); /* the image is cleared first */
                assert_int_equal(sw_starsim_run(plan, &s, &img), SW_OK);
                assert_true(sw_image_equal(&img, &ref));
                sw_image_free(&img);
            }
            if (method == SW_STARSIM_AUTO)
                assert_int_equal(sw_starsim_method_used(plan), SW_STARSIM_OPENMP);
            sw_starsim_destroy(plan);
        }
        sw_context_destroy(ctx);
    }
    sw_starsim_destroy(p0);
    sw_image_free(&ref);
    sw_stars_free(&s);
    sw_context_destroy(c0);
}

/* No stars, and stars far away: a cleared image. A strided (non-tight) output view too. */
static void test_empty_far_and_strided(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    sw_starsim *plan = make_plan(ctx, 30, 20, 1.0, 7, SW_PSF_INTEGRATED, SW_STARSIM_AUTO);
    sw_image big, view;
    assert_int_equal(sw_image_alloc(ctx, 50, 30, SW_PIX_F32, &big), SW_OK);
    sw_test_fill_random(&big, 3);
    assert_int_equal(sw_image_roi(ctx, &big, 10, 5, 30, 20, &view), SW_OK);
    sw_stars s;
    assert_int_equal(sw_stars_alloc(ctx, 6, &s), SW_OK);
    const double xs[6] = {1e300, -1e300, -4.5, 34.0, 15.0, 15.0};
    const double ys[6] = {5.0, 5.0, 10.0, 10.0, -1e18, 23.6};
    for (int i = 0; i < 6; i++) {
        s.x[i] = xs[i];
        s.y[i] = ys[i];
        s.flux[i] = 100.0;
    }
    assert_int_equal(sw_starsim_run(plan, &s, &view), SW_OK);
    /* x = -4.5: ROI -8..-2, misses; x = 34: ROI 31..37 misses a 30-wide image; y = 23.6: ROI
     * 21..27 misses 20 rows. */
    assert_int_equal(sw_starsim_rendered(plan), 0);
    for (int32_t y = 0; y < 20; y++)
        for (int32_t x = 0; x < 30; x++)
            assert_true(sw_image_get(&view, x, y) == 0.0);
    /* Pixels of the parent outside the view are untouched. */
    assert_true(sw_image_get(&big, 9, 5) != 0.0 || sw_image_get(&big, 40, 5) != 0.0);
    s.x[2] = -3.4; /* ROI -6..0: touches column 0 */
    assert_int_equal(sw_starsim_run(plan, &s, &view), SW_OK);
    assert_int_equal(sw_starsim_rendered(plan), 1);
    assert_true(sw_image_get(&view, 0, 10) > 0.0);
    s.count = 0;
    assert_int_equal(sw_starsim_run(plan, &s, &view), SW_OK);
    assert_near(image_sum(&view), 0.0, 0.0);
    s.count = 6;
    sw_stars_free(&s);
    sw_image_free(&big);
    sw_starsim_destroy(plan);
    sw_context_destroy(ctx);
}

/* ------------------------------------------------------------------ names and bad input */

static void test_method_names(void **state)
{
    (void)state;
    for (int m = 0; m <= (int)SW_STARSIM_DETERMINISTIC; m++) {
        sw_starsim_method back;
        assert_int_equal(
            sw_starsim_method_parse(sw_starsim_method_string((sw_starsim_method)m), &back), SW_OK);
        assert_int_equal(back, m);
    }
    sw_starsim_method m;
    assert_int_equal(sw_starsim_method_parse("OpenMP", &m), SW_OK);
    assert_int_equal(m, SW_STARSIM_OPENMP);
    assert_int_equal(sw_starsim_method_parse("gpu", &m), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(NULL), "gpu"));
    assert_string_equal(sw_starsim_method_string((sw_starsim_method)42), "?");
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    assert_near(p.sigma, 1.0, 0);
    assert_int_equal(p.roi_side, 11);
    assert_int_equal(p.psf, SW_PSF_INTEGRATED);
    assert_int_equal(p.method, SW_STARSIM_AUTO);
    assert_int_equal(p.phase_bins, 256);
    assert_int_equal(p.max_stars, 1 << 17);
}

static void expect_create_fails(sw_context *ctx, const sw_starsim_params *p, sw_status want,
                                const char *words)
{
    sw_starsim *plan = (sw_starsim *)(uintptr_t)1;
    assert_int_equal(sw_starsim_create(ctx, p, &plan), want);
    assert_null(plan);
    if (!strstr(sw_context_error(ctx), words))
        fail_msg("message \"%s\" lacks \"%s\"", sw_context_error(ctx), words);
}

static void test_create_bad_input(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    sw_starsim_params base, p;
    sw_starsim_params_default(&base);
    base.width = 64;
    base.height = 32;
    p = base, p.sigma = -1.0;
    expect_create_fails(ctx, &p, SW_EINVAL, "sigma");
    p = base, p.sigma = NAN;
    expect_create_fails(ctx, &p, SW_EINVAL, "sigma");
    p = base, p.sigma = INFINITY;
    expect_create_fails(ctx, &p, SW_EINVAL, "sigma");
    p = base, p.width = 0;
    expect_create_fails(ctx, &p, SW_EINVAL, "image size");
    p = base, p.height = -3;
    expect_create_fails(ctx, &p, SW_EINVAL, "image size");
    p = base, p.width = SW_IMAGE_MAX_DIM + 1;
    expect_create_fails(ctx, &p, SW_EINVAL, "image size");
    p = base, p.width = 65536, p.height = 65536;
    expect_create_fails(ctx, &p, SW_EINVAL, "pixels");
    p = base, p.roi_side = 65;
    expect_create_fails(ctx, &p, SW_EINVAL, "larger than the 64x32 image");
    p = base, p.roi_side = 0;
    expect_create_fails(ctx, &p, SW_EINVAL, "ROI side");
    p = base, p.width = 8192, p.height = 8192, p.roi_side = SW_STARSIM_MAX_ROI_SIDE + 1;
    expect_create_fails(ctx, &p, SW_EINVAL, "spotwave accepts");
    p = base, p.phase_bins = 0;
    expect_create_fails(ctx, &p, SW_EINVAL, "phase bins");
    p = base, p.phase_bins = 4097;
    expect_create_fails(ctx, &p, SW_EINVAL, "phase bins");
    p = base, p.max_stars = 0;
    expect_create_fails(ctx, &p, SW_EINVAL, "max_stars");
    p = base, p.psf = (sw_psf_mode)7;
    expect_create_fails(ctx, &p, SW_EINVAL, "PSF");
    p = base, p.method = (sw_starsim_method)-1;
    expect_create_fails(ctx, &p, SW_EINVAL, "method");
    p = base, p.method = SW_STARSIM_PARALLEL;
    expect_create_fails(ctx, &p, SW_EUNSUPPORTED, "GPU only");
    p = base, p.method = SW_STARSIM_ADAPTIVE;
    expect_create_fails(ctx, &p, SW_EUNSUPPORTED, "GPU only");
    sw_starsim *plan;
    assert_int_equal(sw_starsim_create(ctx, NULL, &plan), SW_EINVAL);
    assert_int_equal(sw_starsim_create(ctx, &base, NULL), SW_EINVAL);
    /* A ROI as large as the larger side is accepted; larger than the smaller side too. */
    p = base, p.roi_side = 64;
    assert_int_equal(sw_starsim_create(ctx, &p, &plan), SW_OK);
    sw_starsim_destroy(plan);
    sw_starsim_destroy(NULL);
    sw_context_destroy(ctx);
}

/* Every refused run leaves the output exactly as it was. */
static void expect_run_fails(sw_starsim *plan, sw_context *ctx, const sw_stars *s, sw_image *out,
                             sw_status want, const char *words)
{
    sw_image before;
    assert_int_equal(sw_image_alloc(ctx, out->width, out->height, out->type, &before), SW_OK);
    assert_int_equal(sw_image_copy(ctx, out, &before), SW_OK);
    assert_int_equal(sw_starsim_run(plan, s, out), want);
    if (!strstr(sw_context_error(ctx), words))
        fail_msg("message \"%s\" lacks \"%s\"", sw_context_error(ctx), words);
    assert_true(sw_image_equal(&before, out));
    sw_image_free(&before);
}

static void test_run_bad_input(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = 40;
    p.height = 30;
    p.max_stars = 4;
    sw_starsim *plan;
    assert_int_equal(sw_starsim_create(ctx, &p, &plan), SW_OK);
    sw_image out, u16, small;
    assert_int_equal(sw_image_alloc(ctx, 40, 30, SW_PIX_F32, &out), SW_OK);
    assert_int_equal(sw_image_alloc(ctx, 40, 30, SW_PIX_U16, &u16), SW_OK);
    assert_int_equal(sw_image_alloc(ctx, 39, 30, SW_PIX_F32, &small), SW_OK);
    sw_test_fill_random(&out, 1);
    sw_test_fill_random(&u16, 2);
    sw_test_fill_random(&small, 3);
    sw_stars s;
    assert_int_equal(sw_stars_alloc(ctx, 4, &s), SW_OK);
    for (int i = 0; i < 4; i++) {
        s.x[i] = 10 + i;
        s.y[i] = 10;
        s.flux[i] = 100;
    }
    s.x[2] = NAN;
    expect_run_fails(plan, ctx, &s, &out, SW_EINVAL, "star 2: position");
    s.x[2] = 12;
    s.y[3] = -INFINITY;
    expect_run_fails(plan, ctx, &s, &out, SW_EINVAL, "star 3: position");
    s.y[3] = 10;
    s.flux[1] = -1;
    expect_run_fails(plan, ctx, &s, &out, SW_EINVAL, "star 1: flux");
    s.flux[1] = NAN;
    expect_run_fails(plan, ctx, &s, &out, SW_EINVAL, "star 1: flux");
    s.flux[1] = 1e39; /* beyond float */
    expect_run_fails(plan, ctx, &s, &out, SW_EINVAL, "star 1: flux");
    s.flux[1] = 100;
    expect_run_fails(plan, ctx, &s, &u16, SW_EINVAL, "must be f32");
    expect_run_fails(plan, ctx, &s, &small, SW_EINVAL, "39x30");
    expect_run_fails(plan, ctx, NULL, &out, SW_EINVAL, "NULL");
    sw_stars big;
    assert_int_equal(sw_stars_alloc(ctx, 5, &big), SW_OK);
    expect_run_fails(plan, ctx, &big, &out, SW_EINVAL, "at most 4");
    sw_stars_free(&big);
    s.count = -1;
    expect_run_fails(plan, ctx, &s, &out, SW_EINVAL, "negative");
    s.count = 4;
    /* A device image on a CPU context. */
    sw_image fake = out;
    fake.memory = SW_MEM_DEVICE;
    fake.owned = 0;
    assert_int_equal(sw_starsim_run(plan, &s, &fake), SW_ENODEV);
    assert_int_equal(sw_starsim_run(NULL, &s, &out), SW_EINVAL);
    /* And the same plan still works. */
    assert_int_equal(sw_starsim_run(plan, &s, &out), SW_OK);
    assert_near(image_sum(&out), 400.0, 400.0 * 1e-5);
    sw_stars_free(&s);
    sw_image_free(&out);
    sw_image_free(&u16);
    sw_image_free(&small);
    sw_starsim_destroy(plan);
    sw_context_destroy(ctx);
}

/* A list long enough to be validated and packed by several threads (pack_stars: chunks of at
 * least 4096 stars): the first bad star in list order is the one reported, wherever the chunks
 * fall, and the renders of 1 and 7 threads keep the list's order (the same bits). */
static void test_parallel_packing(void **state)
{
    (void)state;
    const int32_t W = 300, H = 220;
    const int64_t n = 40000;
    sw_context *c1 = sw_test_cpu_context(1), *c7 = sw_test_cpu_context(7);
    sw_stars s;
    assert_int_equal(sw_stars_alloc(c1, n, &s), SW_OK);
    for (int64_t i = 0; i < n; i++) {
        s.x[i] = -8 + (W + 16) * uniform(77, 3 * (uint64_t)i);
        s.y[i] = -8 + (H + 16) * uniform(77, 3 * (uint64_t)i + 1);
        s.flux[i] = 10 + 1e3 * uniform(77, 3 * (uint64_t)i + 2);
    }
    sw_starsim *p1 = make_plan(c1, W, H, 1.2, 9, SW_PSF_INTEGRATED, SW_STARSIM_OPENMP);
    sw_starsim *p7 = make_plan(c7, W, H, 1.2, 9, SW_PSF_INTEGRATED, SW_STARSIM_OPENMP);
    sw_image a, b;
    assert_int_equal(sw_image_alloc(c1, W, H, SW_PIX_F32, &a), SW_OK);
    assert_int_equal(sw_image_alloc(c7, W, H, SW_PIX_F32, &b), SW_OK);
    sw_test_fill_random(&a, 3);
    sw_test_fill_random(&b, 4);
    /* bad stars in two different chunks: the earlier one is reported, nothing is written */
    s.flux[31000] = -1.0;
    s.y[9000] = NAN;
    expect_run_fails(p7, c7, &s, &b, SW_EINVAL, "star 9000: position");
    s.y[9000] = 100.0;
    expect_run_fails(p7, c7, &s, &b, SW_EINVAL, "star 31000: flux");
    s.flux[31000] = 100.0;
    assert_int_equal(sw_starsim_run(p1, &s, &a), SW_OK);
    assert_int_equal(sw_starsim_run(p7, &s, &b), SW_OK);
    assert_true(sw_starsim_rendered(p1) > 36000 && sw_starsim_rendered(p1) < n);
    assert_int_equal(sw_starsim_rendered(p1), sw_starsim_rendered(p7));
    assert_true(sw_image_equal(&a, &b));
    /* bands are a GPU matter: accepted and without effect here */
    assert_int_equal(sw_starsim_set_bands(p7, 5), SW_OK);
    assert_int_equal(sw_starsim_run(p7, &s, &b), SW_OK);
    assert_true(sw_image_equal(&a, &b));
    assert_int_equal(sw_starsim_set_bands(p7, -1), SW_EINVAL);
    assert_int_equal(sw_starsim_set_bands(p7, SW_STARSIM_MAX_BANDS + 1), SW_EINVAL);
    assert_int_equal(sw_starsim_set_bands(NULL, 0), SW_EINVAL);
    sw_starsim_destroy(p1);
    sw_starsim_destroy(p7);
    sw_image_free(&a);
    sw_image_free(&b);
    sw_stars_free(&s);
    sw_context_destroy(c1);
    sw_context_destroy(c7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_integrated_flux_and_centroid),
        cmocka_unit_test(test_integrated_clipped_at_edges),
        cmocka_unit_test(test_sampled_closed_form),
        cmocka_unit_test(test_sequential_vs_openmp),
        cmocka_unit_test(test_deterministic_across_runs_and_threads),
        cmocka_unit_test(test_empty_far_and_strided),
        cmocka_unit_test(test_method_names),
        cmocka_unit_test(test_create_bad_input),
        cmocka_unit_test(test_run_bad_input),
        cmocka_unit_test(test_parallel_packing),
    };
    return cmocka_run_group_tests_name("sim_render", tests, NULL, NULL);
}
