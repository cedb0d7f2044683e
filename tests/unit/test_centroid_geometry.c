/*
 * sw_centroid_find_geometry (centroid_geometry.c): the lenslet grid of a reference image, the
 * calibration of seed 000 Eq. (3)-(4). Reference patterns are rendered by the SH simulator
 * (flat wavefront, geometric model) for pitches from 3.8 to 29 px, fractional origins and
 * non-square grids, noise-free in f32 and through the detector model (shot and read noise,
 * sky, bias; u16 and u8); a circular pupil that leaves the outer columns dark; and hand-drawn
 * lattices with different pitches along x and y. Blank, pure-noise and tiny images, device
 * images and NULL arguments are refused, leaving the geometry untouched.
 */
#include "testutil.h"

#include "spotwave/centroid.h"
#include "spotwave/sim.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

typedef struct pattern {
    double pitch, x0, y0, sigma;
    int32_t nx, ny;
    int32_t width, height; /* 0: the grid plus `margin` pixels right and below */
    int32_t margin;
    double pupil_lenslets; /* circular pupil diameter in lenslet pitches; 0: all lit */
} pattern;

/* Renders the flat-wavefront spot pattern of pt (expected electrons, f32). */
static sw_image render(const pattern *pt, sw_sh_geometry *truth)
{
    sw_shsim_params p;
    sw_shsim_params_default(&p);
    sw_sh_geometry_default(&p.geom);
    p.geom.pitch_px = pt->pitch;
    p.geom.x0 = pt->x0;
    p.geom.y0 = pt->y0;
    p.geom.nx = pt->nx;
    p.geom.ny = pt->ny;
    p.model = SW_SH_GEOMETRIC;
    p.sigma_px = pt->sigma;
    p.width = pt->width ? pt->width : (int32_t)ceil(pt->x0 + pt->pitch * pt->nx) + pt->margin;
    p.height = pt->height ? pt->height : (int32_t)ceil(pt->y0 + pt->pitch * pt->ny) + pt->margin;
    if (pt->pupil_lenslets > 0)
        p.pupil = sw_pupil_circle(pt->pupil_lenslets * sw_sh_lenslet_um(&p.geom));
    sw_shsim *plan = NULL;
    if (sw_shsim_create(cpu, &p, &plan) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, p.width, p.height, SW_PIX_F32, &img), SW_OK);
    if (sw_shsim_run(plan, &img, 0) != SW_OK)
        fail_msg("sw_shsim_run: %s", sw_context_error(cpu));
    sw_shsim_destroy(plan);
    *truth = p.geom;
    return img;
}

/* Applies a noisy detector (shot noise, read noise, sky, bias) into a new image of type t. */
static sw_image detect(const sw_image *e, sw_pixel_type t, double gain, uint64_t seed)
{
    sw_detector d;
    sw_detector_default(&d);
    d.sky_e = 30.0;
    d.shot_noise = 1;
    d.read_noise_e = 4.0;
    d.gain_e_per_adu = gain;
    d.bias_adu = 10.0;
    d.out_type = t;
    d.seed = seed;
    sw_image out;
    assert_int_equal(sw_image_alloc(cpu, e->width, e->height, t, &out), SW_OK);
    if (sw_detector_apply(cpu, &d, e, &out) != SW_OK)
        fail_msg("sw_detector_apply: %s", sw_context_error(cpu));
    return out;
}

/* The finder must give the truth: pitch within 0.01 px, origin within 0.1 px, the grid exact;
 * the other fields of g are left as they were. */
static void expect_geometry(const sw_image *img, const sw_sh_geometry *truth, const char *what)
{
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.pixel_um = 7.25;
    g.focal_mm = 11.5;
    static const uint8_t mask[1] = {1};
    g.valid = mask;
    if (sw_centroid_find_geometry(cpu, img, &g) != SW_OK)
        fail_msg("%s: %s", what, sw_context_error(cpu));
    if (fabs(g.pitch_px - truth->pitch_px) > 0.01 || fabs(g.x0 - truth->x0) > 0.1 ||
        fabs(g.y0 - truth->y0) > 0.1 || g.nx != truth->nx || g.ny != truth->ny)
        fail_msg("%s: found pitch %.5f origin (%.4f, %.4f) grid %dx%d; truth pitch %.5f origin "
                 "(%.4f, %.4f) grid %dx%d",
                 what, g.pitch_px, g.x0, g.y0, (int)g.nx, (int)g.ny, truth->pitch_px, truth->x0,
                 truth->y0, (int)truth->nx, (int)truth->ny);
    assert_true(g.pixel_um == 7.25 && g.focal_mm == 11.5 && g.valid == mask);
    /* The grid it returns is usable on this image. */
    g.valid = NULL;
    assert_int_equal(sw_sh_geometry_check(cpu, &g, img->width, img->height), SW_OK);
}

/* The geometry g must be refused with SW_EINVAL, its message containing `words`, g untouched. */
static void expect_refused(const sw_image *img, const char *words, const char *what)
{
    sw_sh_geometry g, before;
    sw_sh_geometry_default(&g);
    g.x0 = 1.25;
    before = g;
    sw_status st = sw_centroid_find_geometry(cpu, img, &g);
    if (st != SW_EINVAL)
        fail_msg("%s: status %d (%s), expected SW_EINVAL; found pitch %g grid %dx%d", what, (int)st,
                 sw_context_error(cpu), g.pitch_px, (int)g.nx, (int)g.ny);
    assert_memory_equal(&g, &before, sizeof g);
    if (!strstr(sw_context_error(cpu), words))
        fail_msg("%s: message '%s' lacks '%s'", what, sw_context_error(cpu), words);
}

static void test_pitches_noise_free(void **state)
{
    (void)state;
    /* pitch, x0, y0, sigma, nx, ny, width, height, margin, pupil */
    const pattern cases[] = {
        {3.8, 2.3, 5.7, 0.6, 24, 15, 0, 0, 7, 0},
        {11.0, 0.6, 1.25, 1.3, 13, 9, 0, 0, 12, 0},
        {20.5, 17.35, 3.9, 2.2, 7, 11, 0, 0, 30, 0},
        {29.0, 4.45, 40.05, 0, 6, 5, 0, 0, 3, 0},      /* the simulator's own sigma (1.3 px) */
        {11.0, 30.5, 12.2, 0.45, 10, 14, 0, 0, 25, 0}, /* narrow: harmonics as strong */
        {20.5, 8.8, 6.6, 0.6, 9, 6, 0, 0, 5, 0},       /* as the fundamental            */
        {7.3, 0.2, 0.15, 1.0, 4, 3, 0, 0, 0, 0},       /* a 4x3 grid filling its image   */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_sh_geometry truth;
        sw_image img = render(&cases[i], &truth);
        char what[96];
        snprintf(what, sizeof what, "pitch %g (case %zu), f32", cases[i].pitch, i);
        expect_geometry(&img, &truth, what);
        sw_image_free(&img);
    }
}

static void test_pitches_with_noise(void **state)
{
    (void)state;
    const pattern cases[] = {
        {3.8, 1.4, 2.6, 0.6, 30, 20, 0, 0, 9, 0},
        {11.0, 5.75, 2.35, 1.3, 12, 8, 0, 0, 14, 0},
        {20.5, 3.1, 9.45, 2.2, 9, 7, 0, 0, 6, 0},
        {29.0, 12.6, 0.8, 2.5, 5, 7, 0, 0, 20, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_sh_geometry truth;
        sw_image e = render(&cases[i], &truth);
        char what[96];
        sw_image u16 = detect(&e, SW_PIX_U16, 1.0, 100 + i);
        snprintf(what, sizeof what, "pitch %g (case %zu), u16 with noise", cases[i].pitch, i);
        expect_geometry(&u16, &truth, what);
        sw_image u8 = detect(&e, SW_PIX_U8, 300.0, 200 + i); /* 5e4 e- spots within 8 bits */
        snprintf(what, sizeof what, "pitch %g (case %zu), u8 with noise", cases[i].pitch, i);
        expect_geometry(&u8, &truth, what);
        sw_image_free(&u16);
        sw_image_free(&u8);
        sw_image_free(&e);
    }
}

/* A circular pupil 12.6 pitches across a 16 x 12 grid: columns 0, 1, 14, 15 stay (nearly)
 * dark, so the grid found is the 12 x 12 block of lit lenslets, two pitches in from the
 * simulator's origin. */
static void test_pupil_extent(void **state)
{
    (void)state;
    const pattern pt = {14.0, 6.3, 4.6, 1.5, 16, 12, 0, 0, 10, 12.6};
    sw_sh_geometry truth;
    sw_image e = render(&pt, &truth);
    truth.x0 += 2.0 * truth.pitch_px;
    truth.nx = 12;
    expect_geometry(&e, &truth, "circular pupil");
    sw_image u16 = detect(&e, SW_PIX_U16, 1.0, 7);
    expect_geometry(&u16, &truth, "circular pupil with noise");
    sw_image_free(&u16);
    sw_image_free(&e);
}

/* Gaussian spots drawn by hand on a lattice of pitch px along x and py along y. */
static sw_image lattice(double px, double py, int nx, int ny, double x0, double y0)
{
    const int32_t w = (int32_t)ceil(x0 + px * nx) + 4, h = (int32_t)ceil(y0 + py * ny) + 4;
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &img), SW_OK);
    for (int32_t y = 0; y < h; y++) {
        float *row = sw_image_row(&img, y);
        for (int32_t x = 0; x < w; x++) {
            double v = 0.0;
            for (int iy = 0; iy < ny; iy++)
                for (int ix = 0; ix < nx; ix++) {
                    const double cx = x0 - 0.5 + px * (ix + 0.5), cy = y0 - 0.5 + py * (iy + 0.5);
                    const double r2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
                    v += 1000.0 * exp(-r2 / (2.0 * 1.2 * 1.2));
                }
            row[x] = (float)v;
        }
    }
    return img;
}

static void test_pitch_per_axis(void **state)
{
    (void)state;
    /* 1 % apart: accepted, with the mean pitch. */
    sw_image a = lattice(15.0, 15.15, 8, 6, 3.0, 2.0);
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    assert_int_equal(sw_centroid_find_geometry(cpu, &a, &g), SW_OK);
    assert_near(g.pitch_px, 15.075, 0.01);
    assert_int_equal(g.nx, 8);
    assert_int_equal(g.ny, 6);
    sw_image_free(&a);
    /* 10 % apart: refused, naming both pitches. */
    sw_image b = lattice(15.0, 16.5, 8, 6, 3.0, 2.0);
    expect_refused(&b, "differ", "pitches 15 and 16.5");
    if (!strstr(sw_context_error(cpu), "15.000") || !strstr(sw_context_error(cpu), "16.500"))
        fail_msg("message does not give both pitches: %s", sw_context_error(cpu));
    sw_image_free(&b);
}

static void test_blank_and_noise_refused(void **state)
{
    (void)state;
    sw_image zero, flat;
    assert_int_equal(sw_image_alloc(cpu, 200, 150, SW_PIX_U16, &zero), SW_OK);
    expect_refused(&zero, "no spots", "all-zero u16");
    assert_int_equal(sw_image_alloc(cpu, 120, 90, SW_PIX_F32, &flat), SW_OK);
    for (int32_t y = 0; y < flat.height; y++)
        for (int32_t x = 0; x < flat.width; x++)
            ((float *)sw_image_row(&flat, y))[x] = 812.5f;
    expect_refused(&flat, "no spots", "constant f32");
    /* Pure detector noise (sky with shot noise, read noise) on a dark frame, several seeds and
     * sizes, and uniform f32 noise. */
    for (uint64_t s = 0; s < 6; s++) {
        sw_image e;
        const int32_t w = 64 + 97 * (int32_t)s, h = 300 - 37 * (int32_t)s;
        assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &e), SW_OK);
        sw_image n = detect(&e, SW_PIX_U16, 1.0, 1000 + s);
        expect_refused(&n, "no periodic spot pattern", "detector noise");
        sw_image_free(&n);
        assert_int_equal(sw_image_fill_random(cpu, &e, 77 + s, 0, SW_RANDOM_UNIFORM, 0.0, 1.0),
                         SW_OK);
        expect_refused(&e, "no periodic spot pattern", "uniform noise");
        sw_image_free(&e);
    }
    sw_image_free(&zero);
    sw_image_free(&flat);
}

static void test_tiny_images_refused(void **state)
{
    (void)state;
    const int32_t sizes[][2] = {{8, 8}, {8, 200}, {200, 8}, {1, 1}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        sw_image img = sw_test_random_image(sizes[i][0], sizes[i][1], SW_PIX_U8, 5 + i);
        expect_refused(&img, "smaller than 3 pitches", "tiny image");
        sw_image_free(&img);
    }
    /* A real pattern whose pitch does not fit three times: 2 x 2 spots of 40 px in 80 px. */
    const pattern pt = {40.0, 0.0, 0.0, 2.0, 2, 2, 80, 80, 0, 0};
    sw_sh_geometry truth;
    sw_image two = render(&pt, &truth);
    expect_refused(&two, "pattern", "two pitches only");
    sw_image_free(&two);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    const pattern pt = {11.0, 2.5, 3.5, 1.3, 6, 6, 0, 0, 4, 0};
    sw_sh_geometry truth, g;
    sw_image img = render(&pt, &truth);
    sw_sh_geometry_default(&g);
    assert_int_equal(sw_centroid_find_geometry(cpu, NULL, &g), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(cpu), "NULL"));
    assert_int_equal(sw_centroid_find_geometry(cpu, &img, NULL), SW_EINVAL);
    assert_int_equal(sw_centroid_find_geometry(NULL, NULL, &g), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(NULL), "NULL"));
    /* A context is optional. */
    assert_int_equal(sw_centroid_find_geometry(NULL, &img, &g), SW_OK);
    assert_near(g.pitch_px, 11.0, 0.01);
    /* A broken descriptor and a device image. */
    sw_image bad = img;
    bad.stride = 4; /* less than a row */
    expect_refused(&bad, "", "short stride");
    bad = img;
    bad.memory = SW_MEM_DEVICE;
    expect_refused(&bad, "device", "device image");
    sw_image_free(&img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pitches_noise_free),
        cmocka_unit_test(test_pitches_with_noise),
        cmocka_unit_test(test_pupil_extent),
        cmocka_unit_test(test_pitch_per_axis),
        cmocka_unit_test(test_blank_and_noise_refused),
        cmocka_unit_test(test_tiny_images_refused),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
