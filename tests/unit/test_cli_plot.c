/*
 * The command's plot rasteriser (cli/plot.c, compiled into this test): nice tick steps and their
 * labels, lines (position, clipping, dashes), the font (every glyph distinct, text drawn and
 * turned as the glyphs say), panels (axis mapping, frame, series inside the plot area, automatic
 * ranges on ticks) and the PNG writer (read back with libpng).
 */
#include "../../cli/plot.c" /* first: it sets _POSIX_C_SOURCE */

#include "testutil.h"

#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

static const sw_plot_rgb WHITE = {255, 255, 255};
static const sw_plot_rgb RED = {200, 10, 20};
static const sw_plot_rgb BLUE = {10, 20, 230};

static int is(const sw_plot_canvas *c, int32_t x, int32_t y, sw_plot_rgb col)
{
    const unsigned char *p = c->rgb + 3 * ((size_t)y * (size_t)c->width + (size_t)x);
    return p[0] == col.r && p[1] == col.g && p[2] == col.b;
}

static int64_t count(const sw_plot_canvas *c, sw_plot_rgb col)
{
    int64_t n = 0;
    for (int32_t y = 0; y < c->height; y++)
        for (int32_t x = 0; x < c->width; x++)
            n += is(c, x, y, col);
    return n;
}

/* ------------------------------------------------------------------ ticks */

static void test_nice_step(void **state)
{
    (void)state;
    const double spans[] = {1.0, 0.93, 29.0, 1234.5, 3e-4, 7.0, 10.0, 0.5, 99999.0};
    for (size_t i = 0; i < sizeof spans / sizeof spans[0]; i++) {
        for (int target = 1; target <= 8; target++) {
            const double raw = spans[i] / target;
            const double s = sw_plot_nice_step(spans[i], target);
            /* s = m 10^k, m in {1, 2, 5} */
            const double k = floor(log10(s) + 1e-9);
            const double m = s / pow(10.0, k);
            assert_true(fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 || fabs(m - 5) < 1e-9);
            /* the smallest such step not below raw: the next smaller one is below it */
            assert_true(s >= raw * (1 - 1e-9));
            const double smaller =
                fabs(m - 1) < 1e-9 ? 0.5 * s : (fabs(m - 2) < 1e-9 ? s / 2 : s * 0.4);
            assert_true(smaller < raw * (1 - 1e-12));
        }
    }
    assert_near(sw_plot_nice_step(0.0, 5), 1.0, 0); /* degenerate spans: 1 */
    assert_near(sw_plot_nice_step(NAN, 5), 1.0, 0);
}

static void test_tick_labels(void **state)
{
    (void)state;
    char b[32];
    /* decimals: as many as the step needs (plot.h) */
    sw_plot_tick_label(0.4, 0.2, b, sizeof b);
    assert_string_equal(b, "0.4");
    sw_plot_tick_label(0.15, 0.05, b, sizeof b);
    assert_string_equal(b, "0.15");
    sw_plot_tick_label(300.0, 100.0, b, sizeof b);
    assert_string_equal(b, "300");
    sw_plot_tick_label(-2.0, 0.5, b, sizeof b);
    assert_string_equal(b, "-2.0");
    /* no negative zero, also from rounding noise */
    sw_plot_tick_label(-1e-17, 0.1, b, sizeof b);
    assert_string_equal(b, "0.0");
    sw_plot_tick_label(-0.0, 10.0, b, sizeof b);
    assert_string_equal(b, "0");
    /* big values: three significant digits */
    sw_plot_tick_label(2.5e7, 5e6, b, sizeof b);
    assert_string_equal(b, "2.5e+07");
}

/* ------------------------------------------------------------------ lines */

static void test_line(void **state)
{
    (void)state;
    sw_plot_canvas c;
    assert_int_equal(sw_plot_canvas_init(&c, 80, 60, WHITE), 0);
    assert_int_equal(count(&c, WHITE), 80 * 60);
    const double x0 = 10, y0 = 10, x1 = 50, y1 = 30;
    sw_plot_line(&c, x0, y0, x1, y1, RED, 1, 0, NULL, NULL);
    /* every column of the span has a pixel; every pixel is within a pixel of the ideal line */
    for (int32_t x = 10; x <= 50; x++) {
        int found = 0;
        for (int32_t y = 0; y < 60; y++)
            found |= is(&c, x, y, RED);
        assert_true(found);
    }
    const double len = hypot(x1 - x0, y1 - y0);
    for (int32_t y = 0; y < 60; y++)
        for (int32_t x = 0; x < 80; x++) {
            if (!is(&c, x, y, RED))
                continue;
            const double d = fabs((y1 - y0) * (x - x0) - (x1 - x0) * (y - y0)) / len;
            assert_true(d <= 1.0);
            assert_true(x >= 10 && x <= 50 && y >= 10 && y <= 30);
        }
    assert_true(is(&c, 10, 10, RED) && is(&c, 50, 30, RED));
    /* a single-pixel line has one pixel per step along the longer axis */
    assert_int_equal(count(&c, RED), 41);

    /* clipping: nothing outside the rectangle, the inside part drawn; far points are cheap */
    sw_plot_canvas_free(&c);
    assert_int_equal(sw_plot_canvas_init(&c, 80, 60, WHITE), 0);
    const sw_plot_rect clip = {20, 5, 40, 50};
    sw_plot_line(&c, -1e12, 20, 1e12, 20, BLUE, 3, 0, NULL, &clip);
    for (int32_t y = 0; y < 60; y++)
        for (int32_t x = 0; x < 80; x++) {
            const int inside = x >= 20 && x <= 40 && y >= 19 && y <= 21;
            assert_int_equal(is(&c, x, y, BLUE), inside);
        }
    /* non-finite ends draw nothing */
    sw_plot_line(&c, NAN, 1, 5, 5, RED, 1, 0, NULL, NULL);
    sw_plot_line(&c, 1, 1, 5, INFINITY, RED, 1, 0, NULL, NULL);
    assert_int_equal(count(&c, RED), 0);
    sw_plot_canvas_free(&c);
}

static void test_dashes(void **state)
{
    (void)state;
    sw_plot_canvas c;
    assert_int_equal(sw_plot_canvas_init(&c, 200, 10, WHITE), 0);
    /* a horizontal dashed line: on 8, off 5 (plot.h), the phase carried across two segments */
    double phase = 0.0;
    sw_plot_line(&c, 0, 5, 99, 5, RED, 1, 8, &phase, NULL);
    sw_plot_line(&c, 99, 5, 199, 5, RED, 1, 8, &phase, NULL);
    assert_near(phase, 199.0, 1e-9);
    for (int32_t x = 0; x < 200; x++)
        assert_int_equal(is(&c, x, 5, RED), (x % 13) < 8);
    sw_plot_canvas_free(&c);
}

/* ------------------------------------------------------------------ text */

static void test_glyphs_distinct(void **state)
{
    (void)state;
    const char *chars = "0123456789abcdefghijklmnopqrstuvwxyz .,-+()/:=%_?";
    const size_t n = strlen(chars);
    for (size_t i = 0; i < n; i++) {
        const unsigned char *g = sw_plot_glyph(chars[i]);
        assert_non_null(g);
        for (int r = 0; r < 7; r++)
            assert_int_equal(g[r] & ~0x1F, 0); /* 5 columns */
        for (size_t j = 0; j < i; j++)
            if (memcmp(g, sw_plot_glyph(chars[j]), 7) == 0)
                fail_msg("'%c' and '%c' have the same glyph", chars[i], chars[j]);
    }
    /* upper case is lower case; unknown characters are '?' */
    assert_memory_equal(sw_plot_glyph('S'), sw_plot_glyph('s'), 7);
    assert_memory_equal(sw_plot_glyph('#'), sw_plot_glyph('?'), 7);
    assert_memory_equal(sw_plot_glyph('~'), sw_plot_glyph('?'), 7);
}

/* The micro sign: a glyph of its own, one character wide in text, either UTF-8 code point. */
static void test_micro(void **state)
{
    (void)state;
    const unsigned char *g = sw_plot_glyph(SW_PLOT_MICRO);
    assert_true(memcmp(g, sw_plot_glyph('u'), 7) != 0);
    assert_true(memcmp(g, sw_plot_glyph('?'), 7) != 0);
    assert_int_not_equal(g[6], 0); /* its descender */
    assert_int_equal(sw_plot_text_width("\xc2\xb5m", 1), sw_plot_text_width("um", 1));
    assert_int_equal(sw_plot_text_width("x \xce\xbcm", 2), sw_plot_text_width("x um", 2));
    sw_plot_canvas a, b, u;
    assert_int_equal(sw_plot_canvas_init(&a, 30, 12, WHITE), 0);
    assert_int_equal(sw_plot_canvas_init(&b, 30, 12, WHITE), 0);
    assert_int_equal(sw_plot_canvas_init(&u, 30, 12, WHITE), 0);
    sw_plot_text(&a, 1, 1, "\xc2\xb5m", 1, RED);
    sw_plot_text(&b, 1, 1, "\xce\xbcm", 1, RED);
    sw_plot_text(&u, 1, 1, "um", 1, RED);
    const size_t n = 3 * 30 * 12;
    assert_memory_equal(a.rgb, b.rgb, n);
    assert_true(memcmp(a.rgb, u.rgb, n) != 0);
    /* the 'm' is where it is after a one-byte character */
    for (int y = 1; y < 8; y++)
        for (int x = 7; x < 12; x++)
            assert_int_equal(is(&a, x, y, RED), is(&u, x, y, RED));
    sw_plot_canvas_free(&a);
    sw_plot_canvas_free(&b);
    sw_plot_canvas_free(&u);
}

static void test_text(void **state)
{
    (void)state;
    assert_int_equal(sw_plot_text_width("", 2), 0);
    assert_int_equal(sw_plot_text_width("abc", 1), 17);
    assert_int_equal(sw_plot_text_width("abc", 3), 51);
    sw_plot_canvas c;
    assert_int_equal(sw_plot_canvas_init(&c, 60, 60, WHITE), 0);
    const int s = 2;
    const int32_t ox = 7, oy = 9;
    assert_int_equal(sw_plot_text(&c, ox, oy, "k4", s, RED), sw_plot_text_width("k4", s));
    /* every scale x scale cell is set exactly where its glyph bit is */
    for (int k = 0; k < 2; k++) {
        const unsigned char *g = sw_plot_glyph("k4"[k]);
        for (int row = 0; row < 7; row++)
            for (int col = 0; col < 6; col++) /* col 5: the gap */
                for (int b = 0; b < s; b++)
                    for (int a = 0; a < s; a++) {
                        const int bit = col < 5 && (g[row] & (0x10 >> col));
                        const int32_t x = ox + (6 * k + col) * s + a, y = oy + row * s + b;
                        assert_int_equal(is(&c, x, y, RED), bit != 0);
                    }
    }
    /* turned text: the same pixels a quarter turn anticlockwise around the box's corner */
    sw_plot_canvas u;
    assert_int_equal(sw_plot_canvas_init(&u, 60, 60, WHITE), 0);
    const int32_t ux = 20, uy = 50;
    sw_plot_text_up(&u, ux, uy, "k4", s, BLUE);
    for (int32_t y = 0; y < 60; y++)
        for (int32_t x = 0; x < 60; x++) {
            /* upright pixel (ox + t, oy + v) -> turned (ux + v, uy - t) */
            const int32_t t = uy - y, v = x - ux;
            const int upright =
                t >= 0 && v >= 0 && ox + t < 60 && oy + v < 60 && is(&c, ox + t, oy + v, RED);
            assert_int_equal(is(&u, x, y, BLUE), upright);
        }
    assert_true(count(&c, RED) > 0);
    assert_int_equal(count(&c, RED), count(&u, BLUE));
    sw_plot_canvas_free(&c);
    sw_plot_canvas_free(&u);
}

/* ------------------------------------------------------------------ panels */

static void test_panel(void **state)
{
    (void)state;
    sw_plot_canvas c;
    assert_int_equal(sw_plot_canvas_init(&c, 500, 300, WHITE), 0);
    double x[11], y[11];
    for (int i = 0; i <= 10; i++) {
        x[i] = i;
        y[i] = 0.5 * i;
    }
    const sw_plot_series se = {x, y, 11, RED, 0, "line"};
    sw_plot_panel p = {.x = 0,
                       .y = 0,
                       .width = 500,
                       .height = 300,
                       .title = "title",
                       .xlabel = "x",
                       .ylabel = "y",
                       .xmin = 0,
                       .xmax = 10,
                       .ymin = 0,
                       .ymax = 5,
                       .series = &se,
                       .nseries = 1,
                       .vline = NAN,
                       .scale = 1};
    sw_plot_axes a;
    assert_int_equal(sw_plot_panel_draw(&c, &p, &a), 0);
    /* fixed ranges kept; the mapping puts the range on the area's edges */
    assert_near(a.xmin, 0, 0);
    assert_near(a.xmax, 10, 0);
    assert_near(a.ymax, 5, 0);
    assert_near(sw_plot_map_x(&a, 0), a.area.x0, 1e-9);
    assert_near(sw_plot_map_x(&a, 10), a.area.x1, 1e-9);
    assert_near(sw_plot_map_y(&a, 0), a.area.y1, 1e-9);
    assert_near(sw_plot_map_y(&a, 5), a.area.y0, 1e-9);
    assert_true(a.area.x0 > 0 && a.area.x1 < 499 && a.area.y0 > 0 && a.area.y1 < 299);
    /* the frame is black just outside the area */
    const sw_plot_rgb black_ = {0, 0, 0};
    for (int32_t yy = a.area.y0; yy <= a.area.y1; yy++)
        assert_true(is(&c, a.area.x0 - 1, yy, black_) && is(&c, a.area.x1 + 1, yy, black_));
    /* the series: on the data points (where the legend does not cover it), never outside */
    int on = 0;
    for (int i = 0; i <= 10; i++) {
        const int32_t px = (int32_t)floor(sw_plot_map_x(&a, x[i]) + 0.5);
        const int32_t py = (int32_t)floor(sw_plot_map_y(&a, y[i]) + 0.5);
        on += is(&c, px, py, RED);
    }
    assert_true(on >= 8);
    int64_t outside = 0;
    for (int32_t yy = 0; yy < 300; yy++)
        for (int32_t xx = 0; xx < 500; xx++)
            if ((xx < a.area.x0 || xx > a.area.x1 || yy < a.area.y0 || yy > a.area.y1) &&
                is(&c, xx, yy, RED))
                outside++;
    assert_int_equal(outside, 0);

    /* automatic ranges: the data inside, the ends on ticks */
    sw_plot_canvas_free(&c);
    assert_int_equal(sw_plot_canvas_init(&c, 500, 300, WHITE), 0);
    const double ax[3] = {3, 17, 29}, ay[3] = {0.13, 0.87, NAN};
    const sw_plot_series s2 = {ax, ay, 3, BLUE, 1, NULL};
    p.series = &s2;
    p.xmin = p.xmax = p.ymin = p.ymax = NAN;
    assert_int_equal(sw_plot_panel_draw(&c, &p, &a), 0);
    assert_true(a.xmin <= 3 && a.xmax >= 17 && a.ymin <= 0.13 && a.ymax >= 0.87);
    /* x = 29 has a NaN y: not part of the range */
    assert_true(a.xmax < 29);
    assert_near(a.xmin / a.xstep, round(a.xmin / a.xstep), 1e-9);
    assert_near(a.xmax / a.xstep, round(a.xmax / a.xstep), 1e-9);
    assert_near(a.ymin / a.ystep, round(a.ymin / a.ystep), 1e-9);
    assert_near(a.ymax / a.ystep, round(a.ymax / a.ystep), 1e-9);
    assert_true((a.ymax - a.ymin) / a.ystep <= 10);

    /* a box too small for a plot area: refused, nothing drawn */
    sw_plot_canvas_free(&c);
    assert_int_equal(sw_plot_canvas_init(&c, 500, 300, WHITE), 0);
    p.width = 40;
    p.height = 30;
    assert_int_equal(sw_plot_panel_draw(&c, &p, NULL), -1);
    assert_int_equal(count(&c, WHITE), 500 * 300);
    sw_plot_canvas_free(&c);
}

/* ------------------------------------------------------------------ PNG */

static void test_png(void **state)
{
    (void)state;
    sw_plot_canvas c;
    assert_int_equal(sw_plot_canvas_init(&c, 37, 23, WHITE), 0);
    for (int32_t y = 0; y < 23; y++)
        for (int32_t x = 0; x < 37; x++) {
            const sw_plot_rgb col = {(unsigned char)(7 * x), (unsigned char)(11 * y),
                                     (unsigned char)(x * y)};
            sw_plot_pixel(&c, x, y, col);
        }
    char err[256];
    const char *path = sw_test_path("plot.png");
    assert_int_equal(sw_plot_write_png(&c, path, err, sizeof err), 0);
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&pi, path));
    assert_int_equal(pi.width, 37);
    assert_int_equal(pi.height, 23);
    assert_true((pi.format & PNG_FORMAT_FLAG_COLOR) && !(pi.format & PNG_FORMAT_FLAG_ALPHA));
    pi.format = PNG_FORMAT_RGB;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(pi));
    assert_non_null(px);
    assert_true(png_image_finish_read(&pi, NULL, px, 0, NULL));
    assert_memory_equal(px, c.rgb, 37 * 23 * 3);
    free(px);

    /* a directory that does not exist: -1, the path in the message, no file */
    const char *bad = sw_test_path("no/such/dir/plot.png");
    assert_int_equal(sw_plot_write_png(&c, bad, err, sizeof err), -1);
    assert_non_null(strstr(err, "no/such/dir/plot.png"));
    assert_false(sw_test_file_exists(bad));
    sw_plot_canvas_free(&c);

    /* bad canvas sizes */
    assert_int_equal(sw_plot_canvas_init(&c, 0, 5, WHITE), -1);
    assert_null(c.rgb);
    assert_int_equal(sw_plot_canvas_init(&c, 5, 20000, WHITE), -1);
    assert_int_equal(sw_plot_write_png(&c, path, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nice_step),
        cmocka_unit_test(test_tick_labels),
        cmocka_unit_test(test_line),
        cmocka_unit_test(test_dashes),
        cmocka_unit_test(test_glyphs_distinct),
        cmocka_unit_test(test_micro),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_panel),
        cmocka_unit_test(test_png),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
