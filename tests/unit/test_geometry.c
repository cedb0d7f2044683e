/*
 * The Shack-Hartmann lenslet grid (geometry.h, seed 000 Eq. 1-5): pixel regions tile the RoI
 * without gaps or overlaps for non-integer pitches, reference positions sit at the regions'
 * centres, unit conversions, and impossible geometry is refused.
 */
#include "testutil.h"
#include "spotwave/geometry.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Every pixel of the RoI belongs to exactly one lenslet; the regions' widths are floor or ceil
 * of the pitch. */
static void test_regions_tile(void **state)
{
    (void)state;
    const double pitches[] = {3.0, 7.25, 10.0, 16.3, 31.999, 64.5, 128.0};
    const double origins[][2] = {{0.0, 0.0}, {3.7, 5.2}, {0.999, 12.01}};
    for (size_t pi = 0; pi < sizeof pitches / sizeof pitches[0]; pi++) {
        for (size_t oi = 0; oi < 3; oi++) {
            sw_sh_geometry g;
            sw_sh_geometry_default(&g);
            g.pitch_px = pitches[pi];
            g.x0 = origins[oi][0];
            g.y0 = origins[oi][1];
            g.nx = 7;
            g.ny = 5;
            int32_t w = (int32_t)ceil(g.x0 + g.pitch_px * g.nx) + 1;
            int32_t h = (int32_t)ceil(g.y0 + g.pitch_px * g.ny) + 1;
            assert_int_equal(sw_sh_geometry_check(NULL, &g, w, h), SW_OK);
            int32_t *owner = calloc((size_t)w * h, sizeof *owner);
            assert_non_null(owner);
            for (int32_t iy = 0; iy < g.ny; iy++)
                for (int32_t ix = 0; ix < g.nx; ix++) {
                    int32_t xb, xe, yb, ye;
                    sw_sh_region(&g, ix, iy, &xb, &xe, &yb, &ye);
                    assert_true(xe - xb == (int32_t)floor(g.pitch_px) ||
                                xe - xb == (int32_t)ceil(g.pitch_px));
                    assert_true(ye - yb == (int32_t)floor(g.pitch_px) ||
                                ye - yb == (int32_t)ceil(g.pitch_px));
                    for (int32_t y = yb; y < ye; y++)
                        for (int32_t x = xb; x < xe; x++)
                            owner[(size_t)y * w + x]++;
                    /* The reference is the middle of the continuous lenslet [e - 0.5,
                     * e + d - 0.5), e = x0 + d ix; the region holds the pixels that contain its
                     * start up to the one that contains its end (that one goes to the next
                     * lenslet), so its middle lies (frac(e) + frac(e + d)) / 2 below. */
                    double rx, ry;
                    sw_sh_reference(&g, ix, iy, &rx, &ry);
                    double ex = g.x0 + g.pitch_px * ix, ey = g.y0 + g.pitch_px * iy;
                    double fx = (ex - floor(ex) + (ex + g.pitch_px) - floor(ex + g.pitch_px)) / 2;
                    double fy = (ey - floor(ey) + (ey + g.pitch_px) - floor(ey + g.pitch_px)) / 2;
                    assert_near(rx - 0.5 * (xb + xe - 1), fx, 1e-9);
                    assert_near(ry - 0.5 * (yb + ye - 1), fy, 1e-9);
                }
            /* The RoI (seed Eq. 5): the union is the rectangle from the first region's corner to
             * the last one's, every pixel owned once. */
            int32_t xb0, xe0, yb0, ye0, xb1, xe1, yb1, ye1;
            sw_sh_region(&g, 0, 0, &xb0, &xe0, &yb0, &ye0);
            sw_sh_region(&g, g.nx - 1, g.ny - 1, &xb1, &xe1, &yb1, &ye1);
            for (int32_t y = 0; y < h; y++)
                for (int32_t x = 0; x < w; x++) {
                    int inside = x >= xb0 && x < xe1 && y >= yb0 && y < ye1;
                    assert_int_equal(owner[(size_t)y * w + x], inside ? 1 : 0);
                }
            free(owner);
        }
    }
}

/* Integer origin and pitch: the reference is the exact centre of the region. */
static void test_reference_integer(void **state)
{
    (void)state;
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.x0 = 10;
    g.y0 = 20;
    g.pitch_px = 16;
    double x, y;
    sw_sh_reference(&g, 2, 3, &x, &y);
    assert_near(x, 10 + 32 + 7.5, 0);
    assert_near(y, 20 + 48 + 7.5, 0);
    int32_t xb, xe, yb, ye;
    sw_sh_region(&g, 2, 3, &xb, &xe, &yb, &ye);
    assert_int_equal(xb, 42);
    assert_int_equal(xe, 58);
    assert_int_equal(yb, 68);
    assert_int_equal(ye, 84);
    /* Units: 16 px x 5.5 um = 88 um lenslets; 3.5 mm / 5.5 um = 636.36 px per radian. */
    assert_near(sw_sh_lenslet_um(&g), 88.0, 1e-12);
    assert_near(sw_sh_px_per_rad(&g), 3500.0 / 5.5, 1e-9);
    uint8_t mask[100] = {0};
    mask[7] = 1;
    g.valid = mask;
    assert_true(sw_sh_is_valid(&g, 7));
    assert_false(sw_sh_is_valid(&g, 8));
}

static void expect_bad(sw_context *ctx, const sw_sh_geometry *g, int32_t w, int32_t h,
                       const char *words)
{
    assert_int_equal(sw_sh_geometry_check(ctx, g, w, h), SW_EINVAL);
    const char *msg = sw_context_error(ctx);
    if (!strstr(msg, words))
        fail_msg("message \"%s\" lacks \"%s\"", msg, words);
}

static void test_bad_geometry(void **state)
{
    (void)state;
    sw_context *ctx = sw_test_cpu_context(1);
    sw_sh_geometry g0, g;
    sw_sh_geometry_default(&g0); /* 10 x 10 of 16 px: a 160 x 160 RoI */
    assert_int_equal(sw_sh_geometry_check(ctx, &g0, 160, 160), SW_OK);
    assert_int_equal(sw_sh_geometry_check(ctx, &g0, 0, 0), SW_OK);
    assert_int_equal(sw_sh_geometry_check(ctx, NULL, 0, 0), SW_EINVAL);
    g = g0, g.pitch_px = -16;
    expect_bad(ctx, &g, 160, 160, "pitch");
    g = g0, g.pitch_px = 0;
    expect_bad(ctx, &g, 160, 160, "pitch");
    g = g0, g.pitch_px = NAN;
    expect_bad(ctx, &g, 160, 160, "pitch");
    g = g0, g.pitch_px = 0.5;
    expect_bad(ctx, &g, 160, 160, "below one pixel");
    g = g0, g.nx = 0;
    expect_bad(ctx, &g, 160, 160, "grid");
    g = g0, g.ny = -3;
    expect_bad(ctx, &g, 160, 160, "grid");
    g = g0, g.x0 = INFINITY;
    expect_bad(ctx, &g, 160, 160, "origin");
    g = g0, g.pixel_um = 0;
    expect_bad(ctx, &g, 160, 160, "pixel size");
    g = g0, g.focal_mm = -1;
    expect_bad(ctx, &g, 160, 160, "focal length");
    /* Lenslets off the image: one pixel too small, a negative origin, a huge grid. */
    expect_bad(ctx, &g0, 159, 160, "lenslet (9,9)");
    expect_bad(ctx, &g0, 160, 159, "outside");
    g = g0, g.x0 = -0.5;
    expect_bad(ctx, &g, 160, 160, "lenslet (0,0)");
    g = g0, g.x0 = 1e12;
    expect_bad(ctx, &g, 160, 160, "far outside");
    g = g0, g.nx = 5000, g.ny = 5000;
    expect_bad(ctx, &g, 160, 160, "grid");
    sw_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_regions_tile),
        cmocka_unit_test(test_reference_integer),
        cmocka_unit_test(test_bad_geometry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
