/*
 * Sampled wavefronts (sim_sh.h, wavefront.c): allocation and its centred grid, bilinear
 * interpolation (exact for a + b u + c v + d u v, NaN outside, NaN neighbours of zero weight not
 * read), FITS write/read round trips with the scale, and rejection of bad files (NaN, cubes,
 * truncated, corrupt, missing) and bad arguments, with the path in the message.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include "spotwave/rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void assert_message_has(const char *words)
{
    const char *msg = sw_context_error(NULL);
    if (!strstr(msg, words))
        fail_msg("message \"%s\" lacks \"%s\"", msg, words);
}

static void assert_zeroed(const sw_wavefront *w)
{
    assert_int_equal(w->nu, 0);
    assert_int_equal(w->nv, 0);
    assert_null(w->opd_um);
}

static double uniform(uint64_t seed, uint64_t i)
{
    sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, i);
    return sw_rng_u01(r.v[0], r.v[1]);
}

/* ------------------------------------------------------------------ alloc */

static void alloc_centred_and_zeroed(void **state)
{
    (void)state;
    sw_wavefront w;
    assert_int_equal(sw_wavefront_alloc(NULL, 7, 4, 2.5, &w), SW_OK);
    assert_int_equal(w.nu, 7);
    assert_int_equal(w.nv, 4);
    assert_near(w.spacing_um, 2.5, 0);
    assert_near(w.u0_um, -7.5, 0);  /* -(7 - 1) 2.5 / 2 */
    assert_near(w.v0_um, -3.75, 0); /* -(4 - 1) 2.5 / 2 */
    for (int i = 0; i < 28; i++)
        assert_near(w.opd_um[i], 0.0, 0);
    /* the grid is symmetric about the pupil origin: last sample at -u0 */
    assert_near(w.u0_um + 6 * w.spacing_um, 7.5, 1e-15);
    sw_wavefront_free(&w);
    assert_zeroed(&w);
    sw_wavefront_free(&w); /* twice is harmless */
    sw_wavefront_free(NULL);
}

static void alloc_bad_arguments(void **state)
{
    (void)state;
    sw_wavefront w;
    memset(&w, 0x5A, sizeof w);
    assert_int_equal(sw_wavefront_alloc(NULL, 0, 4, 1.0, &w), SW_EINVAL);
    assert_zeroed(&w);
    assert_message_has("0x4");
    assert_int_equal(sw_wavefront_alloc(NULL, 4, -1, 1.0, &w), SW_EINVAL);
    assert_int_equal(sw_wavefront_alloc(NULL, SW_IMAGE_MAX_DIM + 1, 1, 1.0, &w), SW_EINVAL);
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 4, 0.0, &w), SW_EINVAL);
    assert_message_has("spacing");
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 4, NAN, &w), SW_EINVAL);
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 4, INFINITY, &w), SW_EINVAL);
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 4, -1.0, &w), SW_EINVAL);
    assert_zeroed(&w);
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 4, 1.0, NULL), SW_EINVAL);
}

/* ------------------------------------------------------------------ sampling */

static double bilinear_fn(double u, double v)
{
    return 0.3 + 1.7 * u - 0.9 * v + 0.05 * u * v;
}

static void sample_exact_on_bilinear(void **state)
{
    (void)state;
    sw_wavefront w;
    assert_int_equal(sw_wavefront_alloc(NULL, 9, 6, 2.5, &w), SW_OK);
    w.u0_um += 1.25; /* an off-centre grid too */
    for (int k = 0; k < w.nv; k++)
        for (int i = 0; i < w.nu; i++)
            w.opd_um[k * w.nu + i] =
                bilinear_fn(w.u0_um + i * w.spacing_um, w.v0_um + k * w.spacing_um);
    const double umax = w.u0_um + (w.nu - 1) * w.spacing_um;
    const double vmax = w.v0_um + (w.nv - 1) * w.spacing_um;
    for (uint64_t t = 0; t < 2000; t++) {
        const double u = w.u0_um + (umax - w.u0_um) * uniform(1, 2 * t);
        const double v = w.v0_um + (vmax - w.v0_um) * uniform(1, 2 * t + 1);
        assert_near(sw_wavefront_sample(&w, u, v), bilinear_fn(u, v), 1e-12);
    }
    /* the four corners and the edges are inside */
    assert_near(sw_wavefront_sample(&w, w.u0_um, w.v0_um), bilinear_fn(w.u0_um, w.v0_um), 1e-13);
    assert_near(sw_wavefront_sample(&w, umax, vmax), bilinear_fn(umax, vmax), 1e-13);
    assert_near(sw_wavefront_sample(&w, umax, 0.3), bilinear_fn(umax, 0.3), 1e-13);
    assert_near(sw_wavefront_sample(&w, 0.7, vmax), bilinear_fn(0.7, vmax), 1e-13);
    /* at a sample: the sample itself, bit for bit */
    assert_true(sw_wavefront_sample(&w, w.u0_um + 3 * w.spacing_um, w.v0_um + 2 * w.spacing_um) ==
                w.opd_um[2 * w.nu + 3]);
    /* outside, or NaN coordinates: NaN */
    assert_true(isnan(sw_wavefront_sample(&w, w.u0_um - 1e-9, 0.0)));
    assert_true(isnan(sw_wavefront_sample(&w, umax + 1e-9, 0.0)));
    assert_true(isnan(sw_wavefront_sample(&w, 0.0, w.v0_um - 1e-9)));
    assert_true(isnan(sw_wavefront_sample(&w, 0.0, vmax + 1e-9)));
    assert_true(isnan(sw_wavefront_sample(&w, NAN, 0.0)));
    assert_true(isnan(sw_wavefront_sample(&w, 0.0, INFINITY)));
    assert_true(isnan(sw_wavefront_sample(NULL, 0.0, 0.0)));
    sw_wavefront_free(&w);
}

static void sample_nan_neighbours(void **state)
{
    (void)state;
    sw_wavefront w;
    assert_int_equal(sw_wavefront_alloc(NULL, 5, 5, 1.0, &w), SW_OK);
    for (int i = 0; i < 25; i++)
        w.opd_um[i] = 0.25 * i;
    w.opd_um[2 * 5 + 3] = NAN; /* sample (3, 2): no light there */
    const double u0 = w.u0_um, v0 = w.v0_um;
    /* at sample (2, 2), on the grid lines through it, and in cells away from (3, 2): finite */
    assert_near(sw_wavefront_sample(&w, u0 + 2, v0 + 2), 0.25 * 12, 0);
    assert_near(sw_wavefront_sample(&w, u0 + 2, v0 + 2.5), 0.25 * 14.5, 1e-15);
    assert_near(sw_wavefront_sample(&w, u0 + 1.5, v0 + 2.5), 0.25 * 14, 1e-15);
    /* inside a cell with (3, 2) as a corner, or on the edge between (3, 2) and a neighbour: NaN */
    assert_true(isnan(sw_wavefront_sample(&w, u0 + 2.5, v0 + 2.5)));
    assert_true(isnan(sw_wavefront_sample(&w, u0 + 3, v0 + 1.5)));
    assert_true(isnan(sw_wavefront_sample(&w, u0 + 3, v0 + 2)));
    sw_wavefront_free(&w);
}

static void sample_single_row_and_column(void **state)
{
    (void)state;
    sw_wavefront w;
    assert_int_equal(sw_wavefront_alloc(NULL, 4, 1, 2.0, &w), SW_OK);
    for (int i = 0; i < 4; i++)
        w.opd_um[i] = 1.0 + i;
    assert_near(sw_wavefront_sample(&w, 0.0, 0.0), 2.5, 1e-15); /* u0 = -3: fractional 1.5 */
    assert_true(isnan(sw_wavefront_sample(&w, 0.0, 0.1)));
    sw_wavefront_free(&w);
    assert_int_equal(sw_wavefront_alloc(NULL, 1, 1, 2.0, &w), SW_OK);
    w.opd_um[0] = 7.0;
    assert_near(sw_wavefront_sample(&w, 0.0, 0.0), 7.0, 0);
    assert_true(isnan(sw_wavefront_sample(&w, 1e-12, 0.0)));
    sw_wavefront_free(&w);
}

/* ------------------------------------------------------------------ FITS */

static void fill_random(sw_wavefront *w, uint64_t seed)
{
    for (int i = 0; i < w->nu * w->nv; i++)
        w->opd_um[i] = 4.0 * uniform(seed, (uint64_t)i) - 2.0;
}

static void fits_round_trip(void **state)
{
    (void)state;
    sw_wavefront w, r;
    assert_int_equal(sw_wavefront_alloc(NULL, 33, 20, 10.0, &w), SW_OK);
    fill_random(&w, 5);
    const char *path = sw_test_path("screen.fits");
    assert_int_equal(sw_wavefront_write_fits(NULL, path, &w), SW_OK);
    assert_int_equal(sw_wavefront_read_fits(NULL, path, 12.5, 1.0, &r), SW_OK);
    assert_int_equal(r.nu, 33);
    assert_int_equal(r.nv, 20);
    assert_near(r.spacing_um, 12.5, 0);
    assert_near(r.u0_um, -16 * 12.5, 1e-12);
    assert_near(r.v0_um, -9.5 * 12.5, 1e-12);
    for (int i = 0; i < 33 * 20; i++)
        assert_true(r.opd_um[i] == (double)(float)w.opd_um[i]); /* stored as float */
    sw_wavefront_free(&r);
    /* scale: a phase in radians at 0.6 um read as OPD */
    const double scale = 0.6 / (2 * 3.14159265358979323846);
    assert_int_equal(sw_wavefront_read_fits(NULL, path, 1.0, scale, &r), SW_OK);
    for (int i = 0; i < 33 * 20; i++)
        assert_near(r.opd_um[i], (double)(float)w.opd_um[i] * scale, 1e-15);
    sw_wavefront_free(&r);
    sw_wavefront_free(&w);
    assert_int_equal(sw_test_count_temp_files(), 0);
}

static void fits_integer_images(void **state)
{
    (void)state;
    /* a 16-bit unsigned image written through io.h reads as doubles */
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, 5, 3, SW_PIX_U16, &img), SW_OK);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 5; x++)
            ((uint16_t *)sw_image_row(&img, y))[x] =
                (uint16_t)(1000 * y + 7 * x + 60000 * (x == 4));
    const char *path = sw_test_path("u16.fits");
    assert_int_equal(sw_fits_write(NULL, path, &img, 1), SW_OK);
    sw_wavefront w;
    assert_int_equal(sw_wavefront_read_fits(NULL, path, 1.0, 0.001, &w), SW_OK);
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 5; x++)
            assert_near(w.opd_um[y * 5 + x], 0.001 * sw_image_get(&img, x, y), 1e-12);
    sw_wavefront_free(&w);
    sw_image_free(&img);
}

static void fits_rejects_nan_and_cubes(void **state)
{
    (void)state;
    sw_image img[2];
    for (int f = 0; f < 2; f++) {
        assert_int_equal(sw_image_alloc(NULL, 4, 4, SW_PIX_F32, &img[f]), SW_OK);
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 4; x++)
                ((float *)sw_image_row(&img[f], y))[x] = (float)(x + y + f);
    }
    sw_wavefront w;
    const char *cube = sw_test_path("cube.fits");
    assert_int_equal(sw_fits_write(NULL, cube, img, 2), SW_OK);
    memset(&w, 0x5A, sizeof w);
    assert_int_equal(sw_wavefront_read_fits(NULL, cube, 1.0, 1.0, &w), SW_EFORMAT);
    assert_zeroed(&w);
    assert_message_has(cube);
    assert_message_has("2 frames");

    const char *nan = sw_test_path("nan.fits");
    ((float *)sw_image_row(&img[0], 2))[1] = NAN;
    assert_int_equal(sw_fits_write(NULL, nan, img, 1), SW_OK);
    memset(&w, 0x5A, sizeof w);
    assert_int_equal(sw_wavefront_read_fits(NULL, nan, 1.0, 1.0, &w), SW_EFORMAT);
    assert_zeroed(&w);
    assert_message_has(nan);
    assert_message_has("(1, 2)");
    assert_message_has("NaN");

    const char *inf = sw_test_path("inf.fits");
    ((float *)sw_image_row(&img[0], 2))[1] = -INFINITY;
    assert_int_equal(sw_fits_write(NULL, inf, img, 1), SW_OK);
    assert_int_equal(sw_wavefront_read_fits(NULL, inf, 1.0, 1.0, &w), SW_EFORMAT);
    assert_message_has("infinite");

    /* finite values that overflow once scaled */
    const char *big = sw_test_path("big.fits");
    ((float *)sw_image_row(&img[0], 2))[1] = 3e38f;
    assert_int_equal(sw_fits_write(NULL, big, img, 1), SW_OK);
    assert_int_equal(sw_wavefront_read_fits(NULL, big, 1.0, 1e300, &w), SW_ERANGE);
    assert_zeroed(&w);
    sw_image_free(&img[0]);
    sw_image_free(&img[1]);
}

static void fits_rejects_bad_files(void **state)
{
    (void)state;
    sw_wavefront w0;
    assert_int_equal(sw_wavefront_alloc(NULL, 16, 16, 1.0, &w0), SW_OK);
    fill_random(&w0, 9);
    const char *good = sw_test_path("good.fits");
    assert_int_equal(sw_wavefront_write_fits(NULL, good, &w0), SW_OK);
    size_t size;
    unsigned char *bytes = sw_test_read_all(good, &size);
    assert_true(size >= 2 * 2880);
    sw_wavefront w;

    /* truncated inside the data, and inside the header */
    const char *cut = sw_test_path("cut.fits");
    const size_t cuts[] = {size - 100, 2880 + 10, 1000, 10};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        sw_test_write_file(cut, bytes, cuts[i]);
        memset(&w, 0x5A, sizeof w);
        sw_status st = sw_wavefront_read_fits(NULL, cut, 1.0, 1.0, &w);
        assert_int_equal(st, SW_EFORMAT);
        assert_zeroed(&w);
        assert_message_has(cut);
    }
    /* a corrupt header card (NAXIS1 not a number) */
    unsigned char *bad = malloc(size);
    assert_non_null(bad);
    memcpy(bad, bytes, size);
    for (size_t c = 0; c + 80 <= 2880; c += 80)
        if (memcmp(bad + c, "NAXIS1  =", 9) == 0)
            memcpy(bad + c + 10, "           banana", 17);
    const char *corrupt = sw_test_path("corrupt.fits");
    sw_test_write_file(corrupt, bad, size);
    memset(&w, 0x5A, sizeof w);
    assert_int_equal(sw_wavefront_read_fits(NULL, corrupt, 1.0, 1.0, &w), SW_EFORMAT);
    assert_zeroed(&w);
    /* not FITS at all, empty, missing */
    const char *text = sw_test_path("text.fits");
    sw_test_write_file(text, "hello, this is not a FITS file\n", 31);
    assert_int_equal(sw_wavefront_read_fits(NULL, text, 1.0, 1.0, &w), SW_EFORMAT);
    assert_int_equal(sw_wavefront_read_fits(NULL, sw_test_path("missing.fits"), 1.0, 1.0, &w),
                     SW_EIO);
    assert_zeroed(&w);
    assert_message_has("missing.fits");
    free(bad);
    free(bytes);
    sw_wavefront_free(&w0);
}

static void fits_bad_arguments(void **state)
{
    (void)state;
    sw_wavefront w0;
    assert_int_equal(sw_wavefront_alloc(NULL, 8, 8, 1.0, &w0), SW_OK);
    const char *path = sw_test_path("args.fits");
    assert_int_equal(sw_wavefront_write_fits(NULL, path, &w0), SW_OK);
    sw_wavefront w;
    const double bad[] = {0.0, -1.0, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        memset(&w, 0x5A, sizeof w);
        assert_int_equal(sw_wavefront_read_fits(NULL, path, bad[i], 1.0, &w), SW_EINVAL);
        assert_zeroed(&w);
        assert_message_has(path);
        assert_message_has("spacing");
        assert_int_equal(sw_wavefront_read_fits(NULL, path, 1.0, bad[i], &w), SW_EINVAL);
        assert_message_has("scale");
    }
    assert_int_equal(sw_wavefront_read_fits(NULL, NULL, 1.0, 1.0, &w), SW_EINVAL);
    assert_int_equal(sw_wavefront_read_fits(NULL, "", 1.0, 1.0, &w), SW_EINVAL);
    assert_int_equal(sw_wavefront_read_fits(NULL, path, 1.0, 1.0, NULL), SW_EINVAL);
    /* writing: NULL, empty, a value beyond float */
    assert_int_equal(sw_wavefront_write_fits(NULL, path, NULL), SW_EINVAL);
    assert_int_equal(sw_wavefront_write_fits(NULL, NULL, &w0), SW_EINVAL);
    sw_wavefront empty = {0, 0, 1.0, 0.0, 0.0, NULL};
    assert_int_equal(sw_wavefront_write_fits(NULL, path, &empty), SW_EINVAL);
    w0.opd_um[5] = 1e300;
    const char *big = sw_test_path("toobig.fits");
    assert_int_equal(sw_wavefront_write_fits(NULL, big, &w0), SW_ERANGE);
    assert_message_has("(5, 0)");
    assert_false(sw_test_file_exists(big));
    /* NaN (no light) is written as NaN */
    w0.opd_um[5] = NAN;
    assert_int_equal(sw_wavefront_write_fits(NULL, big, &w0), SW_OK);
    sw_frames fr;
    assert_int_equal(sw_fits_read(NULL, big, &fr), SW_OK);
    assert_true(isnan(sw_image_get(&fr.frames[0], 5, 0)));
    sw_frames_free(&fr);
    sw_wavefront_free(&w0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(alloc_centred_and_zeroed),
        cmocka_unit_test(alloc_bad_arguments),
        cmocka_unit_test(sample_exact_on_bilinear),
        cmocka_unit_test(sample_nan_neighbours),
        cmocka_unit_test(sample_single_row_and_column),
        cmocka_unit_test(fits_round_trip),
        cmocka_unit_test(fits_integer_images),
        cmocka_unit_test(fits_rejects_nan_and_cubes),
        cmocka_unit_test(fits_rejects_bad_files),
        cmocka_unit_test(fits_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
