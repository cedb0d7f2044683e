/*
 * The detector model (detector.c) and its noise draws (noise.h): Poisson and normal deviates
 * against their distributions, the model's mean and variance, gain, bias, full well, ADC
 * rounding and clamping, seeds, the pixel-index contract shared with the GPU, and bad input.
 */
#include "testutil.h"

#include "sim/noise.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_image constant_image(sw_context *ctx, int32_t w, int32_t h, float v)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(ctx, w, h, SW_PIX_F32, &img), SW_OK);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++)
            ((float *)sw_image_row(&img, y))[x] = v;
    return img;
}

typedef struct moments {
    double mean, var;
    int64_t n;
} moments;

static moments image_moments(const sw_image *img)
{
    double s = 0, ss = 0;
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++) {
            double v = sw_image_get(img, x, y);
            s += v;
            ss += v * v;
        }
    moments m;
    m.n = (int64_t)img->width * img->height;
    m.mean = s / m.n;
    m.var = ss / m.n - m.mean * m.mean;
    return m;
}

/* ------------------------------------------------------------------ noise.h */

/* Pearson's chi-square of n Poisson draws against the pmf, bins with an expected count below 20
 * merged into the tails; the statistic must lie within 5 standard deviations (sqrt(2 dof)) of
 * its mean dof. */
static void check_poisson_pmf(double lambda, uint64_t seed)
{
    enum { N = 400000, KMAX = 2000 };
    static int64_t count[KMAX + 1];
    memset(count, 0, sizeof count);
    for (int i = 0; i < N; i++) {
        double k = sw_noise_poisson(lambda, seed, (uint64_t)i);
        assert_true(k >= 0 && k == floor(k));
        count[k > KMAX ? KMAX : (int)k]++;
    }
    double chi2 = 0, pending_e = 0, pending_o = 0;
    int dof = -1;
    for (int k = 0; k <= KMAX; k++) {
        double logp = -lambda + k * log(lambda) - lgamma(k + 1.0);
        pending_e += N * exp(logp);
        pending_o += (double)count[k];
        if (pending_e >= 20 && (N - pending_e) > 0) {
            chi2 += (pending_o - pending_e) * (pending_o - pending_e) / pending_e;
            dof++;
            pending_e = pending_o = 0;
        }
    }
    /* The upper tail left over. */
    if (pending_e > 0 || pending_o > 0) {
        double e = fmax(pending_e, 1e-9);
        chi2 += (pending_o - e) * (pending_o - e) / e;
        dof++;
    }
    printf("poisson %g: chi2 %.1f for %d degrees of freedom\n", lambda, chi2, dof);
    assert_true(dof >= 1);
    assert_true(chi2 < dof + 5 * sqrt(2.0 * dof));
}

static void test_poisson_distribution(void **state)
{
    (void)state;
    const double lambdas[] = {0.05, 0.9, 3.7, 9.99, 10.0, 13.2, 47.0, 250.0, 1234.5};
    for (size_t i = 0; i < sizeof lambdas / sizeof lambdas[0]; i++)
        check_poisson_pmf(lambdas[i], 100 + i);
    assert_true(sw_noise_poisson(0.0, 1, 2) == 0.0);
    assert_true(sw_noise_poisson(-3.0, 1, 2) == 0.0);
    assert_true(sw_noise_poisson(NAN, 1, 2) == 0.0);
    /* Huge means stay near the mean. */
    double k = sw_noise_poisson(1e12, 5, 6);
    assert_true(fabs(k - 1e12) < 10 * 1e6);
    /* log k! against lgamma. */
    for (int j = 0; j < 3000; j += 7)
        assert_near(sw_noise_logfact(j), lgamma(j + 1.0), 1e-12 * (1 + lgamma(j + 1.0)));
    /* A pure function of (mean, seed, index). */
    assert_true(sw_noise_poisson(250, 9, 77) == sw_noise_poisson(250, 9, 77));
    int differ = 0;
    for (int i = 0; i < 100; i++)
        differ += sw_noise_poisson(250, 9, (uint64_t)i) != sw_noise_poisson(250, 10, (uint64_t)i);
    assert_true(differ > 80);
}

static void test_normal_draws(void **state)
{
    (void)state;
    const int n = 400000;
    double s = 0, ss = 0, s4 = 0;
    for (int i = 0; i < n; i++) {
        double z = sw_noise_normal(77, (uint64_t)i);
        s += z;
        ss += z * z;
        s4 += z * z * z * z;
    }
    assert_near(s / n, 0.0, 5 / sqrt(n));
    assert_near(ss / n, 1.0, 5 * sqrt(2.0 / n));
    assert_near(s4 / n, 3.0, 5 * sqrt(96.0 / n));
    /* The first output of sw_rng_normal2 on the read-noise stream. */
    double z0, z1;
    sw_rng_normal2(sw_rng_draw(77, SW_RNG_STREAM_READ_NOISE, 12345), &z0, &z1);
    assert_true(sw_noise_normal(77, 12345) == z0);
}

/* ------------------------------------------------------------------ the model */

/* Shot noise on a constant image: mean lambda, variance lambda (1000 x 1000 pixels; standard
 * errors sqrt(lambda / n) and sqrt((lambda + 2 lambda^2) / n)). */
static void test_shot_noise_moments(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(0);
    const double lambdas[] = {3.7, 250.0};
    for (int k = 0; k < 2; k++) {
        const double lam = lambdas[k];
        sw_image e = constant_image(ctx, 1000, 1000, (float)(lam - 1.5));
        sw_image out;
        assert_int_equal(sw_image_alloc(ctx, 1000, 1000, SW_PIX_F32, &out), SW_OK);
        sw_detector d;
        sw_detector_default(&d);
        d.sky_e = 1.0; /* sky and dark add to the Poisson mean */
        d.dark_e = 0.5;
        d.seed = 1234 + k;
        assert_int_equal(sw_detector_apply(ctx, &d, &e, &out), SW_OK);
        moments m = image_moments(&out);
        printf("shot noise at %g e-: mean %.5f var %.5f\n", lam, m.mean, m.var);
        assert_near(m.mean, lam, 5 * sqrt(lam / m.n));
        assert_near(m.var, lam, 5 * sqrt((lam + 2 * lam * lam) / m.n));
        sw_image_free(&e);
        sw_image_free(&out);
    }
    sw_context_destroy(ctx);
}

static void test_read_noise_gain_bias(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    const int32_t W = 700, H = 600;
    const int64_t n = (int64_t)W * H;
    sw_image e = constant_image(ctx, W, H, 100.0f), out;
    assert_int_equal(sw_image_alloc(ctx, W, H, SW_PIX_F32, &out), SW_OK);
    sw_detector d;
    sw_detector_default(&d);
    /* Read noise alone: variance read^2. */
    d.shot_noise = 0;
    d.read_noise_e = 5.0;
    assert_int_equal(sw_detector_apply(ctx, &d, &e, &out), SW_OK);
    moments m = image_moments(&out);
    assert_near(m.mean, 100.0, 5 * 5.0 / sqrt(n));
    assert_near(m.var, 25.0, 5 * 25.0 * sqrt(2.0 / n));
    /* Gain and bias without noise: exact. */
    d.read_noise_e = 0.0;
    d.gain_e_per_adu = 4.0;
    d.bias_adu = 100.0;
    assert_int_equal(sw_detector_apply(ctx, &d, &e, &out), SW_OK);
    for (int32_t y = 0; y < H; y += 37)
        for (int32_t x = 0; x < W; x += 41)
            assert_true(sw_image_get(&out, x, y) == 125.0);
    /* With shot and read noise: mean e / gain + bias, variance (e + read^2) / gain^2. */
    d.shot_noise = 1;
    d.read_noise_e = 3.0;
    d.gain_e_per_adu = 2.0;
    d.bias_adu = 10.0;
    assert_int_equal(sw_detector_apply(ctx, &d, &e, &out), SW_OK);
    m = image_moments(&out);
    const double var = (100.0 + 9.0) / 4.0;
    assert_near(m.mean, 60.0, 5 * sqrt(var / n));
    assert_near(m.var, var, 5 * var * sqrt(3.0 / n));
    /* Full well: Poisson(5000) never falls below 1000, so every pixel is clamped. */
    sw_image bright = constant_image(ctx, W, H, 5000.0f);
    d.read_noise_e = 0.0;
    d.gain_e_per_adu = 1.0;
    d.bias_adu = 0.0;
    d.full_well_e = 1000.0;
    assert_int_equal(sw_detector_apply(ctx, &d, &bright, &out), SW_OK);
    m = image_moments(&out);
    assert_true(m.mean == 1000.0 && m.var == 0.0);
    /* ... and clamping happens before read noise. */
    d.read_noise_e = 2.0;
    assert_int_equal(sw_detector_apply(ctx, &d, &bright, &out), SW_OK);
    m = image_moments(&out);
    assert_near(m.mean, 1000.0, 5 * 2.0 / sqrt(n));
    assert_near(m.var, 4.0, 5 * 4.0 * sqrt(2.0 / n));
    sw_image_free(&bright);
    sw_image_free(&e);
    sw_image_free(&out);
    sw_context_destroy(ctx);
}

static void test_adc_round_and_clamp(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    const float in[8] = {0.0f, 1.4f, 1.5f, 2.5f, 300.0f, -5.0f, 70000.0f, 254.5f};
    sw_image e;
    assert_int_equal(sw_image_alloc(ctx, 8, 1, SW_PIX_F32, &e), SW_OK);
    memcpy(e.data, in, sizeof in);
    sw_detector d;
    sw_detector_default(&d);
    d.shot_noise = 0;
    const double want8[8] = {0, 1, 2, 2, 255, 0, 255, 254}; /* round half to even */
    const double want16[8] = {0, 1, 2, 2, 300, 0, 65535, 254};
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32};
    for (int t = 0; t < 3; t++) {
        sw_image out;
        d.out_type = types[t];
        assert_int_equal(sw_image_alloc(ctx, 8, 1, types[t], &out), SW_OK);
        assert_int_equal(sw_detector_apply(ctx, &d, &e, &out), SW_OK);
        for (int i = 0; i < 8; i++) {
            double want = t == 0 ? want8[i] : want16[i];
            if (t == 2 && i == 6)
                want = 70000;
            assert_near(sw_image_get(&out, i, 0), want, 0);
        }
        sw_image_free(&out);
    }
    /* u16 with a bias that pushes values past the top. */
    sw_image out;
    d.out_type = SW_PIX_U16;
    d.bias_adu = 65535;
    assert_int_equal(sw_image_alloc(ctx, 8, 1, SW_PIX_U16, &out), SW_OK);
    assert_int_equal(sw_detector_apply(ctx, &d, &e, &out), SW_OK);
    assert_near(sw_image_get(&out, 0, 0), 65535, 0);
    assert_near(sw_image_get(&out, 5, 0), 65530, 0);
    sw_image_free(&out);
    sw_image_free(&e);
    sw_context_destroy(ctx);
}

/* Pixel (x, y) draws with index y * width + x: the contract the GPU twin follows. Same seed and
 * any thread count give the same image; another seed another image. */
static void test_seed_and_pixel_index(void **state)
{
    (void)state;
    const int32_t W = 257, H = 123;
    sw_context *c1 = sw_test_cpu_context(1), *c3 = sw_test_cpu_context(3);
    sw_image e;
    assert_int_equal(sw_image_alloc(c1, W, H, SW_PIX_F32, &e), SW_OK);
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = 0; x < W; x++)
            ((float *)sw_image_row(&e, y))[x] = (float)(0.37 * x + 2.1 * y); /* 0 .. 350 e- */
    sw_detector d;
    sw_detector_default(&d);
    d.read_noise_e = 2.5;
    d.sky_e = 3.0;
    d.gain_e_per_adu = 1.7;
    d.bias_adu = 20;
    d.out_type = SW_PIX_U16;
    d.seed = 987654321;
    sw_image a, b, c;
    assert_int_equal(sw_image_alloc(c1, W, H, SW_PIX_U16, &a), SW_OK);
    assert_int_equal(sw_image_alloc(c1, W, H, SW_PIX_U16, &b), SW_OK);
    assert_int_equal(sw_image_alloc(c1, W, H, SW_PIX_U16, &c), SW_OK);
    assert_int_equal(sw_detector_apply(c1, &d, &e, &a), SW_OK);
    assert_int_equal(sw_detector_apply(c3, &d, &e, &b), SW_OK);
    assert_true(sw_image_equal(&a, &b));
    for (int32_t y = 0; y < H; y += 5)
        for (int32_t x = 0; x < W; x += 3) {
            const uint64_t i = (uint64_t)y * W + x;
            double ev = sw_image_get(&e, x, y) + 3.0;
            double adu =
                (sw_noise_poisson(ev, d.seed, i) + 2.5 * sw_noise_normal(d.seed, i)) / 1.7 + 20;
            adu = fmin(fmax(rint(adu), 0), 65535);
            assert_near(sw_image_get(&a, x, y), adu, 0);
        }
    d.seed++;
    assert_int_equal(sw_detector_apply(c1, &d, &e, &c), SW_OK);
    int64_t same = 0;
    for (int32_t y = 0; y < H; y++)
        for (int32_t x = 0; x < W; x++)
            same += sw_image_get(&a, x, y) == sw_image_get(&c, x, y);
    assert_true(same < (int64_t)W * H / 4);
    /* In place over f32 works and equals the out-of-place result. */
    sw_image f, g = constant_image(c1, W, H, 0);
    assert_int_equal(sw_image_alloc(c1, W, H, SW_PIX_F32, &f), SW_OK);
    assert_int_equal(sw_image_copy(c1, &e, &f), SW_OK);
    d.out_type = SW_PIX_F32;
    assert_int_equal(sw_detector_apply(c1, &d, &e, &g), SW_OK);
    assert_int_equal(sw_detector_apply(c1, &d, &f, &f), SW_OK);
    assert_true(sw_image_equal(&f, &g));
    sw_image_free(&f);
    sw_image_free(&g);
    sw_image_free(&a);
    sw_image_free(&b);
    sw_image_free(&c);
    sw_image_free(&e);
    sw_context_destroy(c1);
    sw_context_destroy(c3);
}

static void expect_apply_fails(sw_context *ctx, const sw_detector *d, const sw_image *e,
                               sw_image *out, sw_status want, const char *words)
{
    sw_image before;
    assert_int_equal(sw_image_alloc(ctx, out->width, out->height, out->type, &before), SW_OK);
    assert_int_equal(sw_image_copy(ctx, out, &before), SW_OK);
    assert_int_equal(sw_detector_apply(ctx, d, e, out), want);
    if (!strstr(sw_context_error(ctx), words))
        fail_msg("message \"%s\" lacks \"%s\"", sw_context_error(ctx), words);
    assert_true(sw_image_equal(&before, out));
    sw_image_free(&before);
}

static void test_detector_bad_input(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(2);
    sw_image e = constant_image(ctx, 20, 10, 5.0f), out, small, u8, e16;
    assert_int_equal(sw_image_alloc(ctx, 20, 10, SW_PIX_F32, &out), SW_OK);
    assert_int_equal(sw_image_alloc(ctx, 19, 10, SW_PIX_F32, &small), SW_OK);
    assert_int_equal(sw_image_alloc(ctx, 20, 10, SW_PIX_U8, &u8), SW_OK);
    assert_int_equal(sw_image_alloc(ctx, 20, 10, SW_PIX_U16, &e16), SW_OK);
    sw_test_fill_random(&out, 4);
    sw_detector base, d;
    sw_detector_default(&base);
    assert_int_equal(base.shot_noise, 1);
    assert_int_equal(base.out_type, SW_PIX_F32);
    assert_near(base.gain_e_per_adu, 1.0, 0);
    d = base, d.sky_e = NAN;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "sky_e");
    d = base, d.dark_e = -1;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "dark_e");
    d = base, d.read_noise_e = -0.1;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "read_noise_e");
    d = base, d.full_well_e = INFINITY;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "full_well_e");
    d = base, d.gain_e_per_adu = 0;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "gain");
    d = base, d.gain_e_per_adu = NAN;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "gain");
    d = base, d.bias_adu = -INFINITY;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "bias");
    d = base, d.out_type = (sw_pixel_type)9;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "output pixel type");
    d = base, d.out_type = SW_PIX_U8;
    expect_apply_fails(ctx, &d, &e, &out, SW_EINVAL, "output image is f32");
    expect_apply_fails(ctx, &base, &e, &small, SW_EINVAL, "19x10");
    expect_apply_fails(ctx, &base, &e16, &out, SW_EINVAL, "must be f32");
    expect_apply_fails(ctx, NULL, &e, &out, SW_EINVAL, "NULL");
    /* Non-finite electrons. */
    ((float *)e.data)[3] = NAN;
    d = base, d.out_type = SW_PIX_U8;
    expect_apply_fails(ctx, &d, &e, &u8, SW_ERANGE, "NaN");
    ((float *)e.data)[3] = 5.0f;
    /* Overlap other than in place. */
    sw_image shifted;
    assert_int_equal(sw_image_roi(ctx, &e, 1, 0, 19, 10, &shifted), SW_OK);
    sw_image head;
    assert_int_equal(sw_image_roi(ctx, &e, 0, 0, 19, 10, &head), SW_OK);
    expect_apply_fails(ctx, &base, &head, &shifted, SW_EINVAL, "overlap");
    /* Device memory on the CPU. */
    sw_image fake = out;
    fake.memory = SW_MEM_DEVICE;
    fake.owned = 0;
    assert_int_equal(sw_detector_apply(ctx, &base, &e, &fake), SW_EINVAL); /* host vs device */
    sw_image fake_e = e;
    fake_e.memory = SW_MEM_DEVICE;
    fake_e.owned = 0;
    assert_int_equal(sw_detector_apply(ctx, &base, &fake_e, &fake), SW_ENODEV);
    sw_image_free(&e);
    sw_image_free(&out);
    sw_image_free(&small);
    sw_image_free(&u8);
    sw_image_free(&e16);
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_poisson_distribution), cmocka_unit_test(test_normal_draws),
        cmocka_unit_test(test_shot_noise_moments),   cmocka_unit_test(test_read_noise_gain_bias),
        cmocka_unit_test(test_adc_round_and_clamp),  cmocka_unit_test(test_seed_and_pixel_index),
        cmocka_unit_test(test_detector_bad_input),
    };
    return cmocka_run_group_tests_name("sim_detector", tests, NULL, NULL);
}
