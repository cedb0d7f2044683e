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

/* ------------------------------------------------------------------ issue 29: pictures people read
 */

/* The bar's geometry, found from the picture (a viridis bar: top colour at t = 1, bottom at t =
 * 0, right of the image at x >= x0): its top and bottom rows and the first column after it. */
static void bar_geometry(const rgba_image *r, int x0, int *y0, int *y1, int *xr)
{
    *y0 = find_colour(r, x0, 0xFD, 0xE7, 0x25);
    assert_true(*y0 >= 0);
    *y1 = -1;
    *xr = -1;
    for (int y = 0; y < r->h; y++)
        for (int x = x0; x < r->w; x++) {
            const unsigned char *p = at(r, x, y);
            if (p[0] == 0x44 && p[1] == 0x01 && p[2] == 0x54 && y > *y1)
                *y1 = y;
            if (y == *y0 && p[0] == 0xFD && p[1] == 0xE7 && p[2] == 0x25 && x + 1 > *xr)
                *xr = x + 1;
        }
    assert_true(*y1 > *y0 && *xr > x0);
}

/* The rows of the tick marks (black right of the bar's frame). */
static int tick_rows(const rgba_image *r, int xr, int *rows, int max)
{
    int n = 0;
    for (int y = 0; y < r->h && n < max; y++) {
        const unsigned char *p = at(r, xr + 2, y);
        if (p[0] == 0 && p[1] == 0 && p[2] == 0)
            rows[n++] = y;
    }
    return n;
}

/* 1, 2 or 5 times a power of ten (or 0), within tol. */
static int is_round(double v, double tol)
{
    if (fabs(v) <= tol)
        return 1;
    static const double mult[4] = {1.0, 2.0, 5.0, 10.0};
    const double p = pow(10.0, floor(log10(fabs(v))));
    for (int m = 0; m < 4; m++)
        if (fabs(fabs(v) - mult[m] * p) <= tol)
            return 1;
    return 0;
}

/* Linear scale: the ticks sit at every multiple of a 1-2-5 step inside the range, evenly. */
static void ticks_linear_round(void **state)
{
    (void)state;
    sw_image img = ramp_f32(40, 240, -0.37, 2.81);
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_VIRIDIS;
    o.vmin = -0.37;
    o.vmax = 2.81;
    o.scale_bar = 1;
    const char *path = sw_test_path("ticks.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    int y0, y1, xr, rows[32];
    bar_geometry(&r, 40, &y0, &y1, &xr);
    int n = tick_rows(&r, xr, rows, 32);
    assert_true(n >= 3);
    const double px = (o.vmax - o.vmin) / (y1 - y0); /* value per bar row */
    double v[32] = {0};
    for (int k = 0; k < n; k++)
        v[k] = o.vmin + (double)(y1 - rows[k]) / (y1 - y0) * (o.vmax - o.vmin);
    /* the step: the 1-2-5 value nearest the measured spacing (rows run downwards: values
     * decrease), within two rows of it */
    const double spacing = v[0] - v[1];
    const double p10 = pow(10.0, floor(log10(spacing)));
    static const double mult[4] = {1.0, 2.0, 5.0, 10.0};
    double step = p10;
    for (int m = 1; m < 4; m++)
        if (fabs(mult[m] * p10 - spacing) < fabs(step - spacing))
            step = mult[m] * p10;
    assert_near(spacing, step, 2 * px);
    for (int k = 0; k < n; k++) {
        assert_near(v[k] / step, round(v[k] / step), px / step); /* a multiple of the step */
        if (k > 0)
            assert_near(v[k - 1] - v[k], step, 2 * px);
    }
    /* every multiple of the step in the range has its tick */
    assert_int_equal(n, (int)(floor(o.vmax / step) - ceil(o.vmin / step)) + 1);
    free(r.px);
    sw_image_free(&img);
}

/* Asinh: values map as asinh(u / beta) / asinh(1 / beta); the ticks are 0, the decades, and
 * 2s and 5s where there is room, each at its own value's place on the bar. */
static void asinh_stretch(void **state)
{
    (void)state;
    const double hi = 10000.0, beta = 0.001;
    sw_image img = ramp_f32(101, 300, 0.0, hi);
    sw_png_options o;
    sw_png_options_default(&o);
    o.vmin = 0.0;
    o.vmax = hi;
    o.stretch = SW_PNG_ASINH;
    o.softening = beta;
    const char *path = sw_test_path("asinh.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    for (int x = 0; x <= 100; x++) {
        const double v = hi * x / 100.0;
        const double t = asinh(v / hi / beta) / asinh(1.0 / beta);
        assert_near(at(&r, x, 7)[0], 255.0 * t, 1.0);
    }
    /* a tenth of the range: a tenth of the grey scale when linear, 70 % of it here */
    assert_true(at(&r, 10, 0)[0] > 170);
    free(r.px);

    o.colormap = SW_CMAP_VIRIDIS;
    o.scale_bar = 1;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    r = load(path);
    int y0, y1, xr, rows[32];
    bar_geometry(&r, 101, &y0, &y1, &xr);
    int n = tick_rows(&r, xr, rows, 32);
    assert_true(n >= 4);
    int decades = 0;
    for (int k = 0; k < n; k++) {
        /* the value at the tick's row and half a row either side */
        double v[3];
        for (int d = -1; d <= 1; d++) {
            double t = (double)(y1 - rows[k] - 0.5 * d) / (y1 - y0);
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            v[d + 1] = hi * beta * sinh(t * asinh(1.0 / beta));
        }
        const double tol = fabs(v[2] - v[0]) / 2 + 1e-9;
        assert_true(is_round(v[1], tol));
        for (double p = 1; p <= hi; p *= 10)
            decades += fabs(v[1] - p) <= tol;
        decades += fabs(v[1]) <= tol; /* 0 */
    }
    assert_true(decades >= 4); /* 0 and three decades at least (10, 100, 1000, 10000 fit) */
    free(r.px);
    sw_image_free(&img);
}

/* zscale: a sky of 1000 +- 10 with 5 % bright stars shows the sky's spread over the grey scale
 * and saturates the stars; min/max would crush the sky to black. */
static void zscale_range(void **state)
{
    (void)state;
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, 100, 100, SW_PIX_F32, &img), SW_OK);
    for (int32_t y = 0; y < 100; y++)
        for (int32_t x = 0; x < 100; x++) {
            const int i = y * 100 + x;
            ((float *)sw_image_row(&img, y))[x] =
                i % 20 == 7 ? 60000.0f : (float)(990.0 + 20.0 * ((i * 7919) % 1000) / 999.0);
        }
    ((float *)sw_image_row(&img, 0))[0] = 990.0f; /* the sky's ends at known places */
    ((float *)sw_image_row(&img, 0))[1] = 1010.0f;
    sw_png_options o;
    sw_png_options_default(&o);
    o.stretch = SW_PNG_ZSCALE;
    const char *path = sw_test_path("zscale.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    assert_true(at(&r, 0, 0)[0] < 30);      /* the faintest sky: dark */
    assert_true(at(&r, 1, 0)[0] > 80);      /* the brightest sky: well up the scale */
    assert_int_equal(at(&r, 7, 0)[0], 255); /* a star: saturated */
    free(r.px);
    o.stretch = SW_PNG_LINEAR;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    r = load(path);
    assert_true(at(&r, 1, 0)[0] <= 1); /* min/max: the whole sky is black */
    free(r.px);
    sw_image_free(&img);
}

/* A title above the image: the image moves down by the title's band, whose text is black on
 * white; the micro sign in UTF-8 (either code point) is its own glyph, not a 'u'. */
static void title_and_micro(void **state)
{
    (void)state;
    sw_image img = ramp_f32(80, 30, 0.0, 1.0);
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_VIRIDIS;
    o.title = "w (\xc2\xb5m)";
    const char *path = sw_test_path("title.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image a = load(path);
    assert_int_equal(a.w, 80);
    assert_int_equal(a.h, 30 + 15);          /* the band: 15 rows at font scale 1 */
    assert_rgb(&a, 0, 15, 0x44, 0x01, 0x54); /* the image's first pixel */
    assert_rgb(&a, 79, 44, 0xFD, 0xE7, 0x25);
    long black = count_black(&a, 0), colour = 0;
    for (int y = 0; y < 15; y++)
        for (int x = 0; x < 80; x++) {
            const unsigned char *p = at(&a, x, y);
            colour += !(p[0] == p[1] && p[1] == p[2]);
        }
    assert_true(black > 20);     /* the text */
    assert_int_equal(colour, 0); /* nothing but black on white above the image */
    o.title = "w (um)";
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image u = load(path);
    o.title = "w (\xce\xbcm)";
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image mu = load(path);
    assert_int_equal(memcmp(a.px, mu.px, (size_t)a.w * a.h * 4), 0); /* U+00B5 = U+03BC */
    assert_int_not_equal(memcmp(a.px, u.px, (size_t)a.w * a.h * 4), 0);
    /* a title longer than the image widens the canvas */
    o.title = "a title of forty characters, or so, here";
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image wide = load(path);
    assert_true(wide.w >= 40 * 6 - 1);
    assert_rgb(&wide, 0, 15, 0x44, 0x01, 0x54);
    free(wide.px);
    free(a.px);
    free(u.px);
    free(mu.px);
    sw_image_free(&img);
}

/* Circle markers: the ring's pixels in the marker colour, inside and outside untouched, clipped
 * at the image's edges (never over the bar); a grey map becomes RGB to show them. */
static void markers(void **state)
{
    (void)state;
    sw_image img;
    assert_int_equal(sw_image_alloc(NULL, 64, 48, SW_PIX_U8, &img), SW_OK); /* all 0 */
    const sw_png_marker m[3] = {{20.0, 30.0, 8.0}, {62.0, 5.0, 6.0}, {-100.0, 3.0, 2.0}};
    sw_png_options o;
    sw_png_options_default(&o);
    o.vmin = 0;
    o.vmax = 1;
    o.scale_bar = 1;
    o.markers = m;
    o.nmarkers = 3;
    const char *path = sw_test_path("markers.png");
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_OK);
    rgba_image r = load(path);
    assert_true(r.color);
    const int ring[4][2] = {{28, 30}, {12, 30}, {20, 38}, {20, 22}};
    for (int k = 0; k < 4; k++)
        assert_rgb(&r, ring[k][0], ring[k][1], 255, 48, 48);
    assert_rgb(&r, 20, 30, 0, 0, 0);    /* centre */
    assert_rgb(&r, 24, 30, 0, 0, 0);    /* inside */
    assert_rgb(&r, 31, 30, 0, 0, 0);    /* outside */
    assert_rgb(&r, 56, 5, 255, 48, 48); /* the clipped circle's left side */
    for (int y = 0; y < r.h; y++)       /* nothing red right of the image */
        for (int x = 64; x < r.w; x++) {
            const unsigned char *p = at(&r, x, y);
            assert_false(p[0] == 255 && p[1] == 48 && p[2] == 48);
        }
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
    sw_png_options_default(&o);
    o.stretch = (sw_png_stretch)9;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    sw_png_options_default(&o);
    o.softening = 1.5;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    o.softening = NAN;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    sw_png_options_default(&o);
    o.nmarkers = -1;
    assert_int_equal(sw_png_write(NULL, path, &img, &o), SW_EINVAL);
    o.nmarkers = 1; /* markers NULL */
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
        cmocka_unit_test(grey_plain),
        cmocka_unit_test(viridis_scale_bar),
        cmocka_unit_test(diverging),
        cmocka_unit_test(constant_image),
        cmocka_unit_test(nan_pixels),
        cmocka_unit_test(label_scale_and_tiny),
        cmocka_unit_test(ticks_linear_round),
        cmocka_unit_test(asinh_stretch),
        cmocka_unit_test(zscale_range),
        cmocka_unit_test(title_and_micro),
        cmocka_unit_test(markers),
        cmocka_unit_test(bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
