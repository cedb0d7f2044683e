/*
 * PNG output: files read back with libpng; sizes, colour-map end points, the scale bar and its
 * labels, constant and NaN images, and bad arguments.
 */
#define _POSIX_C_SOURCE 200809L

#include "testutil.h"

#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct rgba_image {
    int w, h;
    int color, alpha;  /* colour type of the file */
    unsigned char *px; /* w*h*4 */
} rgba_image;

static rgba_image load(const char *path)
{
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&pi, path));
    rgba_image r;
    r.w = (int)pi.width;
    r.h = (int)pi.height;
    r.color = (pi.format & PNG_FORMAT_FLAG_COLOR) != 0;
    r.alpha = (pi.format & PNG_FORMAT_FLAG_ALPHA) != 0;
    pi.format = PNG_FORMAT_RGBA;
    r.px = malloc(PNG_IMAGE_SIZE(pi));
    assert_non_null(r.px);
    assert_true(png_image_finish_read(&pi, NULL, r.px, 0, NULL));
    return r;
}

static const unsigned char *at(const rgba_image *r, int x, int y)
{
    return r->px + ((size_t)y * r->w + x) * 4;
}

static void assert_rgb(const rgba_image *r, int x, int y, int R, int G, int B)
{
    const unsigned char *p = at(r, x, y);
    if (p[0] != R || p[1] != G || p[2] != B) {
        print_error("pixel (%d,%d) is (%d,%d,%d), expected (%d,%d,%d)\n", x, y, p[0], p[1], p[2], R,
                    G, B);
        fail();
    }
}

/* Finds a pixel of colour (R,G,B) with x >= x0; returns its y, or -1. */
static int find_colour(const rgba_image *r, int x0, int R, int G, int B)
{
    for (int y = 0; y < r->h; y++)
        for (int x = x0; x < r->w; x++) {
            const unsigned char *p = at(r, x, y);
            if (p[0] == R && p[1] == G && p[2] == B && p[3] == 255)
                return y;
        }
    return -1;
}

static long count_black(const rgba_image *r, int x0)
{
    long n = 0;
    for (int y = 0; y < r->h; y++)
        for (int x = x0; x < r->w; x++) {
            const unsigned char *p = at(r, x, y);
            n += p[0] == 0 && p[1] == 0 && p[2] == 0 && p[3] == 255;
        }
    return n;
}

static sw_image ramp_f32(int32_t w, int32_t h, double v0, double v1)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, w, h, SW_PIX_F32, &img), SW_OK);
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++)
            ((float *)sw_image_row(&img, y))[x] = (float)(v0 + (v1 - v0) * x / (w - 1));
    return img;
}

/* Grey, no scale bar: same size as the image, a grey file, min -> 0, max -> 255, monotonic. */
static void grey_plain(void **state)
{
    (void)state;
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, 16, 8, SW_PIX_U16, &img), SW_OK);
    for (int32_t y = 0; y < 8; y++)
        for (int32_t x = 0; x < 16; x++)
            ((uint16_t *)sw_image_row(&img, y))[x] = (uint16_t)(1000 + x * 100 + y);
    const char *path = sw_test_path("grey.png");
    assert_int_equal(sw_png_write(NULL, path, &img, NULL), SW_OK);
    rgba_image r = load(path);
    assert_int_equal(r.w, 16);
    assert_int_equal(r.h, 8);
    assert_false(r.color);
    assert_false(r.alpha);
    assert_rgb(&r, 0, 0, 0, 0, 0);        /* the minimum (1000) */
    assert_rgb(&r, 15, 7, 255, 255, 255); /* the maximum (2507) */
    for (int x = 1; x < 16; x++)
        assert_true(at(&r, x, 3)[0] > at(&r, x - 1, 3)[0]);
    free(r.px);
    sw_image_free(&img);
}

/* Viridis with an explicit range: values at or beyond the ends take the end colours. */
static void viridis_scale_bar(void **state)
{
    (void)state;
    sw_image img = ramp_f32(40, 30, -1.0, 2.0); /* column 13 = 0.0 ... column 26 = 1.0 */
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_VIRIDIS;
    o.vmin = 0.0;
    o.vmax = 1.0;
    o.scale_bar = 1;
    o.label = "rad";
    const char *path = sw_test_path("viridis.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    assert_true(r.color);
    assert_false(r.alpha);
    assert_true(r.w > 40 + 20); /* bar and labels to the right */
    assert_true(r.h >= 30);
    assert_rgb(&r, 0, 0, 0x44, 0x01, 0x54);  /* -1 -> clamped to the first colour */
    assert_rgb(&r, 13, 5, 0x44, 0x01, 0x54); /* 0 = vmin */
    assert_rgb(&r, 26, 5, 0xFD, 0xE7, 0x25); /* 1 = vmax */
    assert_rgb(&r, 39, 29, 0xFD, 0xE7, 0x25);
    /* the bar holds both ends, the last colour (vmax) above the first */
    int ytop = find_colour(&r, 40, 0xFD, 0xE7, 0x25);
    int ybot = find_colour(&r, 40, 0x44, 0x01, 0x54);
    assert_true(ytop >= 0 && ybot >= 0);
    assert_true(ytop < ybot);
    /* ticks, labels and the frame are drawn in black to the right of the image */
    assert_true(count_black(&r, 40) > 100);
    /* below the image the canvas is background (white) */
    if (r.h > 30)
        assert_rgb(&r, 0, r.h - 1, 255, 255, 255);
    free(r.px);

    /* without the bar the picture is exactly the image */
    o.scale_bar = 0;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    r = load(path);
    assert_int_equal(r.w, 40);
    assert_int_equal(r.h, 30);
    free(r.px);
    sw_image_free(&img);
}

/* Blue-white-red: vmin, middle, vmax map to the published end and centre colours. */
static void diverging(void **state)
{
    (void)state;
    sw_image img = ramp_f32(21, 5, -2.0, 2.0); /* column 10 = 0 */
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_DIVERGING;
    o.scale_bar = 1;
    o.label = "z (\xC2\xB5m)";
    const char *path = sw_test_path("div.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK); /* range from min/max */
    rgba_image r = load(path);
    assert_rgb(&r, 0, 2, 59, 76, 192);
    assert_rgb(&r, 10, 2, 221, 221, 221);
    assert_rgb(&r, 20, 2, 180, 4, 38);
    /* the canvas is taller than the 5-row image so that the bar and labels fit */
    assert_true(r.h > 5);
    int ytop = find_colour(&r, 21, 180, 4, 38);
    int ybot = find_colour(&r, 21, 59, 76, 192);
    assert_true(ytop >= 0 && ybot > ytop);
    free(r.px);
    sw_image_free(&img);
}

/* A constant image: no division by zero, every pixel the middle colour. */
static void constant_image(void **state)
{
    (void)state;
    const sw_pixel_type types[4] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};
    for (int i = 0; i < 4; i++) {
        sw_image img;
        assert_int_equal(sw_image_alloc(NULL, 9, 7, types[i], &img), SW_OK);
        for (int32_t y = 0; y < 7; y++)
            for (int32_t x = 0; x < 9; x++) {
                void *row = sw_image_row(&img, y);
                switch (types[i]) {
                case SW_PIX_U8: ((uint8_t *)row)[x] = 42; break;
                case SW_PIX_U16: ((uint16_t *)row)[x] = 42; break;
                case SW_PIX_U32: ((uint32_t *)row)[x] = 42; break;
                case SW_PIX_F32: ((float *)row)[x] = 42.0f; break;
                }
            }
        sw_png_options o;
        sw_png_options_default(&o);
        o.scale_bar = i & 1;
        const char *path = sw_test_path("const.png");
        assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
        rgba_image r = load(path);
        for (int y = 0; y < 7; y++)
            for (int x = 0; x < 9; x++)
                assert_rgb(&r, x, y, 128, 128, 128);
        free(r.px);
        sw_image_free(&img);
    }
}

/* NaN pixels are black, or transparent on request; an all-NaN image still writes. */
static void nan_pixels(void **state)
{
    (void)state;
    sw_image img = ramp_f32(10, 4, 0.0, 9.0);
    ((float *)sw_image_row(&img, 1))[3] = NAN;
    ((float *)sw_image_row(&img, 2))[0] = INFINITY; /* clamps to the top colour */
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_VIRIDIS;
    const char *path = sw_test_path("nan.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    assert_false(r.alpha);
    assert_rgb(&r, 3, 1, 0, 0, 0);
    assert_rgb(&r, 0, 2, 0xFD, 0xE7, 0x25);
    assert_rgb(&r, 9, 0, 0xFD, 0xE7, 0x25); /* max of the finite pixels is 9 */
    free(r.px);

    o.nan_transparent = 1;
    o.scale_bar = 1;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    r = load(path);
    assert_true(r.alpha);
    assert_int_equal(at(&r, 3, 1)[3], 0);
    assert_int_equal(at(&r, 4, 1)[3], 255);
    assert_int_equal(at(&r, r.w - 1, 0)[3], 255); /* background stays opaque */
    free(r.px);

    for (int32_t y = 0; y < 4; y++)
        for (int32_t x = 0; x < 10; x++)
            ((float *)sw_image_row(&img, y))[x] = NAN;
    for (int t = 0; t < 2; t++) {
        o.nan_transparent = t;
        o.colormap = t ? SW_CMAP_GREY : SW_CMAP_DIVERGING;
        assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
        r = load(path);
        for (int y = 0; y < 4; y++)
            for (int x = 0; x < 10; x++)
                assert_int_equal(at(&r, x, y)[3], t ? 0 : 255);
        assert_rgb(&r, 5, 2, 0, 0, 0);
        free(r.px);
    }
    sw_image_free(&img);
}

/*
 * The unit label under the scale bar, found from the picture: the bar's columns are those of its
 * top colour (R,G,B) right of the image (x >= x0); the label is what is black in those columns
 * below the bar's bottom frame line (tick labels start right of the bar, so they are not counted).
 * Gives the size of the label's black pixels' bounding box in those columns.
 */
static void label_box(const rgba_image *r, int x0, int R, int G, int B, int *bw, int *bh)
{
    int ytop = find_colour(r, x0, R, G, B);
    assert_true(ytop >= 0);
    int bx0 = -1, bx1 = -1;
    for (int x = x0; x < r->w; x++) {
        const unsigned char *p = at(r, x, ytop);
        if (p[0] == R && p[1] == G && p[2] == B) {
            if (bx0 < 0)
                bx0 = x;
            bx1 = x;
        }
    }
    int yframe = ytop; /* first black row below the top of the bar, in the bar's first column */
    while (yframe < r->h && at(r, bx0, yframe)[0] != 0)
        yframe++;
    assert_true(yframe < r->h);
    int lx0 = r->w, lx1 = -1, ly0 = r->h, ly1 = -1;
    for (int y = yframe + 1; y < r->h; y++)
        for (int x = bx0; x <= bx1; x++) {
            const unsigned char *p = at(r, x, y);
            if (p[0] == 0 && p[1] == 0 && p[2] == 0) {
                lx0 = x < lx0 ? x : lx0;
                lx1 = x > lx1 ? x : lx1;
                ly0 = y < ly0 ? y : ly0;
                ly1 = y > ly1 ? y : ly1;
            }
        }
    assert_true(lx1 >= 0); /* there is a label */
    *bw = lx1 - lx0 + 1;
    *bh = ly1 - ly0 + 1;
}

/*
 * A tall image (900 rows) draws the scale bar's text three times as large as a short one
 * (100 rows): the unit label's glyphs are 3x wider and 3x taller, and the canvas keeps the
 * image height. A tiny image gets a canvas tall enough for the bar, the image at its top left.
 */
static void label_scale_and_tiny(void **state)
{
    (void)state;
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_VIRIDIS;
    o.scale_bar = 1;
    o.label = "photons per second per pixel";
    const char *path = sw_test_path("large.png");

    sw_image img = ramp_f32(300, 900, -5e-7, 3.25e6);
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    assert_int_equal(r.h, 900);
    assert_true(r.w > 300);
    int big_w, big_h;
    label_box(&r, 300, 0xFD, 0xE7, 0x25, &big_w, &big_h);
    free(r.px);
    sw_image_free(&img);

    img = ramp_f32(300, 100, -5e-7, 3.25e6);
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    r = load(path);
    assert_int_equal(r.h, 100);
    int small_w, small_h;
    label_box(&r, 300, 0xFD, 0xE7, 0x25, &small_w, &small_h);
    free(r.px);
    sw_image_free(&img);
    assert_true(small_w >= 5 && small_h >= 5); /* at least one whole glyph at scale 1 */
    assert_int_equal(big_w, 3 * small_w);
    assert_int_equal(big_h, 3 * small_h);

    img = ramp_f32(3, 2, 0, 1);
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    r = load(path);
    assert_true(r.h >= 40);
    assert_rgb(&r, 0, 0, 0x44, 0x01, 0x54);
    assert_rgb(&r, 2, 1, 0xFD, 0xE7, 0x25);
    assert_rgb(&r, 0, 2, 255, 255, 255); /* background below the image */
    free(r.px);
    sw_image_free(&img);
}

static void bad_arguments(void **state)
{
    (void)state;
    sw_image img = ramp_f32(4, 4, 0, 1);
    const char *path = sw_test_path("bad.png");
    sw_png_options o;
    sw_png_options_default(&o);
    assert_int_equal(sw_png_write(NULL, NULL, &img, &o), SW_EINVAL);
    assert_int_equal(sw_png_write(NULL, path, NULL, &o), SW_EINVAL);
    o.vmin = NAN;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    o.vmin = 0;
    o.vmax = INFINITY;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    sw_png_options_default(&o);
    o.colormap = (sw_colormap)7;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    sw_image dev;
    assert_int_equal(sw_image_wrap(img.data, 4, 4, img.stride, SW_PIX_F32, SW_MEM_DEVICE, &dev),
                     SW_OK);
    assert_int_equal(sw_png_write(NULL, path, &dev, NULL), SW_EINVAL);
    assert_false(sw_test_file_exists(path));
    const char *missing = sw_test_path("nodir/x.png");
    assert_int_equal(sw_png_write(NULL, missing, &img, NULL), SW_EIO);
    assert_non_null(strstr(sw_context_error(NULL), "x.png"));
    assert_false(sw_test_file_exists(missing));
    sw_test_write_file(sw_test_path("pfile"), "x", 1);
    assert_int_equal(sw_png_write(NULL, sw_test_path("pfile/x.png"), &img, NULL), SW_EIO);
    if (sw_test_readonly_dir("ro")) {
        assert_int_equal(sw_png_write(NULL, sw_test_path("ro/x.png"), &img, NULL), SW_EIO);
        assert_false(sw_test_file_exists(sw_test_path("ro/x.png")));
    }
    sw_png_options_default(NULL);
    sw_image_free(&img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grey_plain),    cmocka_unit_test(viridis_scale_bar),
        cmocka_unit_test(diverging),     cmocka_unit_test(constant_image),
        cmocka_unit_test(nan_pixels),    cmocka_unit_test(label_scale_and_tiny),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
