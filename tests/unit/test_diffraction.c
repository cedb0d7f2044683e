/*
 * Diffraction geometry (diffraction.h): d-spacings by Bragg's law against values worked by hand,
 * for a flat detector normal to the beam and for tilted orientations; the ice-ring list against
 * the hexagonal ice reflections (and its systematic absences); the masks pixel by pixel (d range,
 * ice rings, rectangles, circles, polygons); the DISTL resolution estimate on spots of a known
 * cut-off; the per-image summary's counts.
 */
#include "testutil.h"
#include "spotwave/diffraction.h"

#include <hdf5.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* lambda 1 A, 200 mm, beam at (1000, 1100), 75 um pixels (an Eiger's). */
static sw_diffraction_geometry flat(void)
{
    sw_diffraction_geometry g;
    sw_diffraction_geometry_init(&g);
    g.wavelength_a = 1.0;
    g.distance_mm = 200.0;
    g.beam_x_px = 1000.0;
    g.beam_y_px = 1100.0;
    g.pixel_x_mm = g.pixel_y_mm = 0.075;
    g.have = SW_DG_RESOLUTION;
    return g;
}

/* A pixel 400, 300 px from the beam: r = 500 px = 37.5 mm at 200 mm, 2theta = atan(0.1875) =
 * 0.185347949996 rad, d = 1 / (2 sin(0.0926739749982)) = 5.40298852250 A. */
static void test_bragg_flat(void **state)
{
    (void)state;
    sw_diffraction_geometry g = flat();
    assert_int_equal(sw_diffraction_geometry_check(NULL, &g), SW_OK);
    assert_true(fabs(sw_diffraction_two_theta(&g, 1400.0, 1400.0) - 0.185347949996) < 1e-11);
    assert_true(fabs(sw_diffraction_d_spacing(&g, 1400.0, 1400.0) - 5.40298852250) < 1e-9);
    assert_true(fabs(sw_diffraction_d_spacing(&g, 600.0, 800.0) - 5.40298852250) < 1e-9);
    assert_true(fabs(sw_diffraction_s(&g, 1400.0, 1400.0) - 1.0 / 5.40298852250) < 1e-11);
    /* d scales with the wavelength */
    g.wavelength_a = 0.9763;
    assert_true(fabs(sw_diffraction_d_spacing(&g, 1400.0, 1400.0) - 0.9763 * 5.40298852250) < 1e-9);
    /* the direct beam: d infinite, 1/d 0; one pixel off: d = lambda / (2 sin(atan(r/D)/2)) */
    assert_true(isinf(sw_diffraction_d_spacing(&g, 1000.0, 1100.0)));
    assert_true(sw_diffraction_s(&g, 1000.0, 1100.0) == 0.0);
    const double d1 = 0.9763 / (2.0 * sin(0.5 * atan(0.075 / 200.0)));
    assert_true(fabs(sw_diffraction_d_spacing(&g, 1001.0, 1100.0) / d1 - 1.0) < 1e-12);
}

/* The same detector through the general orientation gives the same d; a detector swung 90
 * degrees about y puts a pixel at 2theta = 90 degrees: d = lambda / sqrt(2). */
static void test_bragg_orientation(void **state)
{
    (void)state;
    sw_diffraction_geometry g = flat(), o = flat();
    o.orientation = 1;
    o.origin_mm[0] = -1000.0 * 0.075;
    o.origin_mm[1] = -1100.0 * 0.075;
    o.origin_mm[2] = 200.0;
    o.fast[0] = 1.0;
    o.slow[1] = 1.0;
    o.have |= SW_DG_ORIENTATION;
    assert_int_equal(sw_diffraction_geometry_check(NULL, &o), SW_OK);
    for (int i = 0; i < 5; i++) {
        const double x = 37.0 + 413.0 * i, y = 2000.0 - 291.0 * i;
        assert_true(fabs(sw_diffraction_d_spacing(&o, x, y) / sw_diffraction_d_spacing(&g, x, y) -
                         1.0) < 1e-12);
    }
    /* fast along -z, slow along y, origin at (100, 0, 20) mm: pixel (0,0) at 2theta =
     * atan2(100, 20); pixel (x=20/0.075) sits at z = 0, 2theta = 90 degrees */
    sw_diffraction_geometry t = flat();
    t.orientation = 1;
    t.origin_mm[0] = 100.0;
    t.origin_mm[2] = 20.0;
    t.fast[2] = -1.0;
    t.slow[1] = 1.0;
    t.have |= SW_DG_ORIENTATION;
    assert_int_equal(sw_diffraction_geometry_check(NULL, &t), SW_OK);
    assert_true(fabs(sw_diffraction_two_theta(&t, 0.0, 0.0) - atan2(100.0, 20.0)) < 1e-12);
    const double x90 = 20.0 / 0.075;
    assert_true(fabs(sw_diffraction_two_theta(&t, x90, 0.0) - acos(-1.0) / 2) < 1e-12);
    assert_true(fabs(sw_diffraction_d_spacing(&t, x90, 0.0) - 1.0 / sqrt(2.0)) < 1e-12);
    /* behind the sample (2theta > 90 degrees) too: z = -20 mm, d = 1 / (2 sin(theta)) */
    const double tt = atan2(100.0, -20.0);
    assert_true(fabs(sw_diffraction_d_spacing(&t, 2 * x90, 0.0) - 1.0 / (2.0 * sin(tt / 2))) <
                1e-12);
}

static void test_check_refuses(void **state)
{
    (void)state;
    sw_diffraction_geometry g = flat();
    g.wavelength_a = 0.0;
    assert_int_equal(sw_diffraction_geometry_check(NULL, &g), SW_EINVAL);
    g = flat();
    g.distance_mm = -100.0;
    assert_int_equal(sw_diffraction_geometry_check(NULL, &g), SW_EINVAL);
    g = flat();
    g.have &= ~SW_DG_BEAM;
    assert_int_equal(sw_diffraction_geometry_check(NULL, &g), SW_EINVAL);
}

/* Hexagonal ice, a = 4.498, c = 7.338: 1/d^2 = 4 (h^2+hk+k^2) / (3 a^2) + l^2 / c^2. */
static double ice_d(int h, int k, int l)
{
    const double a = 4.498, c = 7.338;
    return 1.0 / sqrt(4.0 * (h * h + h * k + k * k) / (3.0 * a * a) + (double)l * l / (c * c));
}

static int listed(const double *d, int n, double v)
{
    for (int i = 0; i < n; i++)
        if (fabs(d[i] - v) < 1e-9)
            return 1;
    return 0;
}

static void test_ice_rings(void **state)
{
    (void)state;
    double d[64];
    int n = sw_diffraction_ice_rings(1.5, d, 64);
    /* 100 002 101 102 110 103 200 112 201 004 202 104 203 (d >= 1.5 A) */
    const int hkl[][3] = {{1, 0, 0}, {0, 0, 2}, {1, 0, 1}, {1, 0, 2}, {1, 1, 0},
                          {1, 0, 3}, {2, 0, 0}, {1, 1, 2}, {2, 0, 1}, {0, 0, 4},
                          {2, 0, 2}, {1, 0, 4}, {2, 0, 3}};
    const int nh = (int)(sizeof hkl / sizeof hkl[0]);
    assert_int_equal(n, nh);
    for (int i = 0; i < nh; i++) {
        assert_true(fabs(d[i] - ice_d(hkl[i][0], hkl[i][1], hkl[i][2])) < 1e-9);
        if (i > 0)
            assert_true(d[i] < d[i - 1]);
    }
    /* the strong rings as usually quoted: 3.90 3.67 3.44 2.67 2.25 2.07 1.95 1.92 1.88 1.72 */
    const double quoted[] = {3.895, 3.669, 3.441, 2.671, 2.249, 2.072, 1.948, 1.917, 1.883, 1.720};
    for (size_t i = 0; i < sizeof quoted / sizeof quoted[0]; i++) {
        int near = 0;
        for (int k = 0; k < n; k++)
            near |= fabs(d[k] - quoted[i]) < 0.002;
        assert_true(near);
    }
    /* systematic absences of P6_3/mmc: 001, 003 (000l, l odd), 111, 113 (hh-2hl, l odd) */
    assert_false(listed(d, n, ice_d(0, 0, 1)));
    assert_false(listed(d, n, ice_d(0, 0, 3)));
    assert_false(listed(d, n, ice_d(1, 1, 1)));
    assert_false(listed(d, n, ice_d(1, 1, 3)));
    /* more rings further out; max bounds what is written, not the count */
    double few[3];
    assert_int_equal(sw_diffraction_ice_rings(1.5, few, 3), nh);
    assert_true(sw_diffraction_ice_rings(1.0, d, 64) > nh);
    assert_int_equal(sw_diffraction_ice_rings(0.0, d, 64), 0);
}

enum { W = 320, H = 300 };

/* 1 A, 60 mm, beam (150, 140), 0.172 mm pixels (a Pilatus's): 1.72 A at the far corner. */
static sw_diffraction_geometry small(void)
{
    sw_diffraction_geometry g = flat();
    g.distance_mm = 60.0;
    g.beam_x_px = 150.0;
    g.beam_y_px = 140.0;
    g.pixel_x_mm = g.pixel_y_mm = 0.172;
    return g;
}

static void test_mask_d_range(void **state)
{
    (void)state;
    sw_diffraction_geometry g = small();
    uint8_t *m = malloc((size_t)W * H);
    assert_non_null(m);
    memset(m, 1, (size_t)W * H);
    m[5] = 0; /* already bad: stays bad, not counted */
    sw_diffraction_mask_params p;
    memset(&p, 0, sizeof p);
    p.d_min = 3.0;
    p.d_max = 8.0;
    int64_t masked = -1, want = 0;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &p, W, H, m, &masked), SW_OK);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const double d =
                1.0 / (2.0 * sin(0.5 * atan(hypot(x - 150.0, y - 140.0) * 0.172 / 60.0)));
            const int bad = d <= 3.0 || d >= 8.0 || (y == 0 && x == 5);
            assert_int_equal(m[y * W + x], !bad);
            want += bad && !(y == 0 && x == 5);
        }
    assert_int_equal(masked, want);
    assert_true(want > 1000 && want < W * H - 1000);
    /* inverted or negative ranges, and d limits without geometry, are refused */
    p.d_min = 8.0;
    p.d_max = 3.0;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &p, W, H, m, NULL), SW_EINVAL);
    p.d_min = -1.0;
    p.d_max = 0.0;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &p, W, H, m, NULL), SW_EINVAL);
    p.d_min = 3.0;
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &p, W, H, m, NULL), SW_EINVAL);
    free(m);
}

static void test_mask_ice(void **state)
{
    (void)state;
    sw_diffraction_geometry g = small();
    uint8_t *m = malloc((size_t)W * H);
    assert_non_null(m);
    memset(m, 1, (size_t)W * H);
    sw_diffraction_mask_params p;
    memset(&p, 0, sizeof p);
    p.ice_rings = 1; /* DIALS's width, 0.002 A^-2 */
    assert_int_equal(sw_diffraction_mask(NULL, &g, &p, W, H, m, NULL), SW_OK);
    /* every ring to 1.5 A (the frame reaches 1.72 A) */
    const int hkl[][3] = {{1, 0, 0}, {0, 0, 2}, {1, 0, 1}, {1, 0, 2}, {1, 1, 0},
                          {1, 0, 3}, {2, 0, 0}, {1, 1, 2}, {2, 0, 1}, {0, 0, 4},
                          {2, 0, 2}, {1, 0, 4}, {2, 0, 3}};
    enum { NR = 13 };
    double rings[NR];
    for (int k = 0; k < NR; k++)
        rings[k] = ice_d(hkl[k][0], hkl[k][1], hkl[k][2]);
    int64_t on_ring = 0, off = 0;
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const double d =
                1.0 / (2.0 * sin(0.5 * atan(hypot(x - 150.0, y - 140.0) * 0.172 / 60.0)));
            int bad = 0;
            for (int k = 0; k < NR; k++)
                bad |= fabs(1.0 / (d * d) - 1.0 / (rings[k] * rings[k])) <= 0.001 + 1e-12;
            /* borderline pixels (within 1e-9 of the edge) are not judged */
            int edge = 0;
            for (int k = 0; k < NR; k++)
                edge |= fabs(fabs(1.0 / (d * d) - 1.0 / (rings[k] * rings[k])) - 0.001) < 1e-9;
            if (!edge)
                assert_int_equal(m[y * W + x], !bad);
            on_ring += bad;
            off += !bad;
        }
    assert_true(on_ring > 500 && off > on_ring);
    /* a wider ring masks a superset */
    uint8_t *m2 = malloc((size_t)W * H);
    assert_non_null(m2);
    memset(m2, 1, (size_t)W * H);
    p.ice_ring_width = 0.006;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &p, W, H, m2, NULL), SW_OK);
    int64_t more = 0;
    for (int i = 0; i < W * H; i++) {
        assert_true(!m[i] ? !m2[i] : 1);
        more += m[i] && !m2[i];
    }
    assert_true(more > on_ring);
    free(m);
    free(m2);
}

static void test_mask_shapes(void **state)
{
    (void)state;
    uint8_t m[20 * 20];
    memset(m, 1, sizeof m);
    const double square[] = {1.5, 1.5, 4.5, 1.5, 4.5, 4.5, 1.5, 4.5};
    sw_diffraction_shape s[4] = {
        {SW_DIFFRACTION_RECT, {10, 13, 0, 4}, 0, NULL},    /* 3 x 4 = 12 pixels */
        {SW_DIFFRACTION_CIRCLE, {10, 10, 2, 0}, 0, NULL},  /* 9 pixels (r^2 < 4) */
        {SW_DIFFRACTION_POLYGON, {0, 0, 0, 0}, 4, square}, /* pixels 2..4 x 2..4: 9 */
        {SW_DIFFRACTION_RECT, {17, 25, 18, 30}, 0, NULL},  /* clipped: 3 x 2 = 6 */
    };
    sw_diffraction_mask_params p;
    memset(&p, 0, sizeof p);
    p.shapes = s;
    p.nshapes = 4;
    int64_t masked = 0;
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &p, 20, 20, m, &masked), SW_OK);
    assert_int_equal(masked, 12 + 9 + 9 + 6);
    int64_t zeros = 0;
    for (int i = 0; i < 400; i++)
        zeros += !m[i];
    assert_int_equal(zeros, masked);
    assert_int_equal(m[0 * 20 + 10], 0);
    assert_int_equal(m[3 * 20 + 12], 0);
    assert_int_equal(m[4 * 20 + 12], 1);
    assert_int_equal(m[0 * 20 + 13], 1);
    assert_int_equal(m[9 * 20 + 9], 0);  /* circle: (1,1) off the centre */
    assert_int_equal(m[8 * 20 + 10], 1); /* (0,2): r^2 = 4, not < 4 */
    assert_int_equal(m[2 * 20 + 2], 0);
    assert_int_equal(m[4 * 20 + 4], 0);
    assert_int_equal(m[5 * 20 + 4], 1);
    assert_int_equal(m[19 * 20 + 19], 0);
    /* the same again clears nothing more */
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &p, 20, 20, m, &masked), SW_OK);
    assert_int_equal(masked, 0);
    /* bad shapes */
    sw_diffraction_shape bad = {SW_DIFFRACTION_CIRCLE, {1, 1, 0, 0}, 0, NULL};
    p.shapes = &bad;
    p.nshapes = 1;
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &p, 20, 20, m, NULL), SW_EINVAL);
    bad = (sw_diffraction_shape){SW_DIFFRACTION_RECT, {5, 5, 0, 3}, 0, NULL};
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &p, 20, 20, m, NULL), SW_EINVAL);
    bad = (sw_diffraction_shape){SW_DIFFRACTION_POLYGON, {0, 0, 0, 0}, 2, square};
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &p, 20, 20, m, NULL), SW_EINVAL);
}

/* Two modules side by side and two rows: 10 x 6 px modules, 3 px column gaps, 2 px row gaps on a
 * 25 x 15 frame (ending in a gap column and row). */
static void test_panels(void **state)
{
    (void)state;
    const sw_diffraction_panels p = {.module_w = 10, .module_h = 6, .gap_x = 3, .gap_y = 2};
    assert_int_equal(sw_diffraction_panel_count(&p, 25, 15), 2 * 2);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 0, 0), 0);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 9.4, 5.4), 0);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 9.6, 0), -1); /* rounds to 10: gap */
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 12, 3), -1);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 13, 3), 1);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 22, 5), 1);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 5, 6), -1);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 5, 8), 2);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 22, 13), 3);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 24, 13), -1);
    assert_int_equal(sw_diffraction_panel_at(&p, 25, 15, 25, 14), -1);
    uint8_t m[25 * 15];
    memset(m, 1, sizeof m);
    sw_diffraction_mask_params mp;
    memset(&mp, 0, sizeof mp);
    mp.panels = &p;
    int64_t masked = 0;
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &mp, 25, 15, m, &masked), SW_OK);
    /* live: columns 0-9 and 13-22 (20), rows 0-5 and 8-13 (12): 240 of 375 */
    assert_int_equal(masked, 375 - 240);
    for (int y = 0; y < 15; y++)
        for (int x = 0; x < 25; x++)
            assert_int_equal(m[y * 25 + x], sw_diffraction_panel_at(&p, 25, 15, x, y) >= 0);
    const sw_diffraction_panels bad = {.module_w = 0, .module_h = 6, .gap_x = 3, .gap_y = 2};
    mp.panels = &bad;
    assert_int_equal(sw_diffraction_mask(NULL, NULL, &mp, 25, 15, m, NULL), SW_EINVAL);
}

/* Modules listed as a file gives them (an NXmx master's NXdetector_module groups): two of 8 x 10
 * px on a 20 x 12 frame with a 4 px gap, the second placed by its own orientation 3 mm further
 * along x than the flat model puts it. Panels, the gap mask, d per panel (the mask by d and
 * sw_diffraction_d_at agree with Bragg's law at the module's place), the summary's d counts, and
 * modules that overlap, leave the frame or have no unit axes refused. */
static void test_panels_listed(void **state)
{
    (void)state;
    sw_diffraction_geometry g = flat();
    g.beam_x_px = 9.5;
    g.beam_y_px = 5.5;
    g.distance_mm = 10.0;
    sw_diffraction_module mod[2];
    memset(mod, 0, sizeof mod);
    mod[0] = (sw_diffraction_module){.x0 = 0, .y0 = 1, .width = 8, .height = 10};
    mod[1] = (sw_diffraction_module){.x0 = 12, .y0 = 1, .width = 8, .height = 10};
    mod[1].orientation = 1;
    const double shift = 3.0;
    mod[1].origin_mm[0] = -9.5 * 0.075 + shift;
    mod[1].origin_mm[1] = -5.5 * 0.075;
    mod[1].origin_mm[2] = 10.0;
    mod[1].fast[0] = mod[1].slow[1] = 1.0;
    mod[1].pixel_x_mm = mod[1].pixel_y_mm = 0.075;
    sw_diffraction_panels p;
    memset(&p, 0, sizeof p);
    p.modules = mod;
    p.nmodules = 2;
    assert_int_equal(sw_diffraction_panel_count(&p, 20, 12), 2);
    assert_int_equal(sw_diffraction_panel_at(&p, 20, 12, 0, 1), 0);
    assert_int_equal(sw_diffraction_panel_at(&p, 20, 12, 7.4, 10.4), 0);
    assert_int_equal(sw_diffraction_panel_at(&p, 20, 12, 7.6, 5), -1); /* the gap */
    assert_int_equal(sw_diffraction_panel_at(&p, 20, 12, 5, 0), -1);   /* row 0: no module */
    assert_int_equal(sw_diffraction_panel_at(&p, 20, 12, 12, 5), 1);
    assert_int_equal(sw_diffraction_panel_at(&p, 20, 12, 19, 11), -1);
    /* d: module 0 by the flat model, module 1 by its place, the gap by the flat model */
    for (int k = 0; k < 3; k++) {
        const double x = k == 0 ? 3.0 : k == 1 ? 15.0 : 10.0, y = 4.0;
        const double lx = (x - 9.5) * 0.075 + (k == 1 ? shift : 0.0), ly = (y - 5.5) * 0.075;
        const double r = sqrt(lx * lx + ly * ly + 100.0);
        const double want = 1.0 / (2.0 * sin(0.5 * acos(10.0 / r)));
        assert_near(sw_diffraction_d_at(&g, &p, 20, 12, x, y), want, 1e-9 * want);
        sw_diffraction_geometry pg;
        sw_diffraction_panel_geometry(&g, &p, k == 2 ? -1 : k, &pg);
        assert_int_equal(pg.orientation, k == 1);
        assert_near(sw_diffraction_d_spacing(&pg, x, y), want, 1e-9 * want);
    }
    /* the mask: the gap and row 0 and 11 cleared; d limits judged with each module's place */
    uint8_t m[20 * 12];
    memset(m, 1, sizeof m);
    sw_diffraction_mask_params mp;
    memset(&mp, 0, sizeof mp);
    mp.panels = &p;
    mp.d_min = sw_diffraction_d_at(&g, &p, 20, 12, 15.5, 4.3); /* cuts into module 1 only */
    int64_t masked = 0;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &mp, 20, 12, m, &masked), SW_OK);
    int64_t cleared = 0;
    for (int y = 0; y < 12; y++)
        for (int x = 0; x < 20; x++) {
            const int panel = sw_diffraction_panel_at(&p, 20, 12, x, y);
            const int want = panel >= 0 && sw_diffraction_d_at(&g, &p, 20, 12, x, y) > mp.d_min;
            assert_int_equal(m[y * 20 + x], want);
            cleared += !want;
        }
    assert_int_equal(masked, cleared);
    assert_true(cleared > 240 - 160 + 10); /* the gaps and part of module 1 */
    for (int y = 1; y < 11; y++)
        for (int x = 0; x < 8; x++)
            assert_int_equal(m[y * 20 + x], 1); /* module 0 lies below the limit everywhere */
    /* the summary counts d < 4 A per panel */
    sw_spot sp[2];
    memset(sp, 0, sizeof sp);
    sp[0].x = 3.0;
    sp[1].x = 15.0;
    sp[0].y = sp[1].y = 4.0;
    sw_diffraction_summary sum;
    assert_int_equal(sw_diffraction_summarise_panels(NULL, &g, &p, 20, 12, sp, 2, 0, &sum), SW_OK);
    const int64_t lt4 = (sw_diffraction_d_at(&g, &p, 20, 12, 3, 4) < 4.0) +
                        (sw_diffraction_d_at(&g, &p, 20, 12, 15, 4) < 4.0);
    assert_int_equal(sum.n_spots_d_lt_4a, lt4);
    assert_true(lt4 == 1); /* only the placed module's spot lies beyond 4 A */
    /* refused */
    memset(m, 1, sizeof m);
    mod[1].x0 = 7; /* overlaps module 0 */
    assert_int_equal(sw_diffraction_mask(NULL, &g, &mp, 20, 12, m, NULL), SW_EINVAL);
    mod[1].x0 = 13; /* 13 + 8 > 20 */
    assert_int_equal(sw_diffraction_mask(NULL, &g, &mp, 20, 12, m, NULL), SW_EINVAL);
    mod[1].x0 = 12;
    mod[1].fast[0] = 2.0;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &mp, 20, 12, m, NULL), SW_EINVAL);
    mod[1].fast[0] = 1.0;
    p.modules = NULL;
    assert_int_equal(sw_diffraction_mask(NULL, &g, &mp, 20, 12, m, NULL), SW_EINVAL);
}

/* Spots spread evenly in reciprocal-space volume (1/d^3) from 20 A to 2.5 A, and a thin scatter
 * of noise to 1.5 A: the estimate falls at the cut-off (within a shell). Few spots: none. */
static void test_estimate_d_min(void **state)
{
    (void)state;
    enum { N = 600, NOISE = 12 };
    double d[N + NOISE];
    const double a = 1.0 / (20.0 * 20.0 * 20.0), b = 1.0 / (2.5 * 2.5 * 2.5);
    for (int i = 0; i < N; i++)
        d[i] = 1.0 / cbrt(a + (b - a) * (i + 0.5) / N);
    const double c = 1.0 / (1.5 * 1.5 * 1.5);
    for (int i = 0; i < NOISE; i++)
        d[N + i] = 1.0 / cbrt(b + (c - b) * (i + 0.5) / NOISE);
    double est = 0.0;
    assert_int_equal(sw_diffraction_estimate_d_min(NULL, d, N + NOISE, &est), SW_OK);
    assert_true(est > 2.3 && est < 2.8);
    /* without the noise the shells end at the last spot: within a shell of 2.5 A */
    assert_int_equal(sw_diffraction_estimate_d_min(NULL, d, N, &est), SW_OK);
    assert_true(est > 2.5 && est < 2.8);
    assert_int_equal(sw_diffraction_estimate_d_min(NULL, d, 10, &est), SW_OK);
    assert_true(est == 0.0);
}

static void test_summary(void **state)
{
    (void)state;
    sw_diffraction_geometry g = flat();
    sw_spot s[3];
    memset(s, 0, sizeof s);
    /* r = 500 px: 5.40 A; r = 1500 px (112.5 mm at 200 mm): 1/(2 sin(atan(0.5625)/2)) = 1.97 A;
     * the beam: infinite */
    s[0].x = 1400.0, s[0].y = 1400.0, s[0].intensity = 10.0;
    s[1].x = 1000.0, s[1].y = 2600.0, s[1].intensity = 20.5;
    s[2].x = 1000.0, s[2].y = 1100.0, s[2].intensity = 1.0;
    sw_diffraction_summary out;
    assert_int_equal(sw_diffraction_summarise(NULL, &g, s, 3, 7, &out), SW_OK);
    assert_int_equal(out.frame, 7);
    assert_int_equal(out.n_spots, 3);
    assert_int_equal(out.n_spots_d_lt_4a, 1);
    assert_int_equal(out.n_spots_d_gt_4a, 2);
    assert_true(out.total_intensity == 31.5);
    assert_true(out.d_min_estimate == 0.0);
    assert_int_equal(sw_diffraction_summarise(NULL, NULL, s, 3, 7, &out), SW_OK);
    assert_int_equal(out.n_spots_d_lt_4a, -1);
}

static void read_f64(hid_t f, const char *name, double *v)
{
    hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
    assert_true(d >= 0);
    assert_true(H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
    H5Dclose(d);
}

static void test_spots_h5(void **state)
{
    (void)state;
    sw_diffraction_geometry g = flat();
    const sw_diffraction_panels pn = {.module_w = 1500, .module_h = 3000, .gap_x = 10, .gap_y = 0};
    sw_spot s[2];
    memset(s, 0, sizeof s);
    s[0].x = 1400.0, s[0].y = 1400.0, s[0].z0 = 3, s[0].intensity = 10.0, s[0].npix = 4;
    s[1].x = 1600.0, s[1].y = 1100.0, s[1].z0 = 4, s[1].intensity = 20.5, s[1].x1 = 1602;
    s[1].parent = 2; /* a deblended child (its blend's first child is itself) */
    sw_diffraction_table t = {0, 0.5, &g, &pn, 3000, 3000};
    const char *path = sw_test_path("spots.h5");
    assert_int_equal(sw_diffraction_write_spots_h5(NULL, path, s, 2, &t), SW_OK);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    double v[2];
    read_f64(f, "/spots/x_px", v);
    assert_true(v[0] == 1400.5 && v[1] == 1600.5);
    read_f64(f, "/spots/d_a", v);
    assert_true(fabs(v[0] - 5.40298852250) < 1e-9);
    read_f64(f, "/spots/frame", v); /* int64 on file, converted on read */
    assert_true(v[0] == 3.0 && v[1] == 4.0);
    read_f64(f, "/spots/panel", v);
    assert_true(v[0] == 0.0 && v[1] == 1.0);
    read_f64(f, "/spots/bbox_x1", v);
    assert_true(v[1] == 1602.0);
    read_f64(f, "/spots/parent", v);
    assert_true(v[0] == 0.0 && v[1] == 2.0);
    assert_true(H5Lexists(f, "/spots/z_var", H5P_DEFAULT) == 0); /* 2-D spots: no z columns */
    H5Fclose(f);
    /* no spots: empty columns; a folder that is not there: SW_EIO */
    assert_int_equal(sw_diffraction_write_spots_h5(NULL, path, s, 0, &t), SW_OK);
    assert_int_equal(sw_diffraction_write_spots_h5(NULL, "/nonexistent/dir/x.h5", s, 2, &t),
                     SW_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bragg_flat),    cmocka_unit_test(test_bragg_orientation),
        cmocka_unit_test(test_check_refuses), cmocka_unit_test(test_ice_rings),
        cmocka_unit_test(test_mask_d_range),  cmocka_unit_test(test_mask_ice),
        cmocka_unit_test(test_mask_shapes),   cmocka_unit_test(test_estimate_d_min),
        cmocka_unit_test(test_summary),       cmocka_unit_test(test_panels),
        cmocka_unit_test(test_spots_h5),      cmocka_unit_test(test_panels_listed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
