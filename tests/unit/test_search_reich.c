/*
 * Reichenbach's centroid algorithm on the CPU (search_reich.c; search.h "Reichenbach", seed 001
 * Sec. 3.2.2), through its plan interface (centroid/search_internal.h), on frames rendered by
 * the SH simulator (sim_sh.h) or drawn here from Gaussians at known places:
 *   - a flat and a defocused wavefront (spots up to 0.8 pitch from their references, outside
 *     their cells): every spot found, centroids within 0.1 px of the truth;
 *   - a uniform tilt of 0.75 pitch: the seed takes its spots' nearest peaks, those of the left
 *     neighbours, and the growth carries the shift over the whole grid (the seed's assumption
 *     that the central spots lie near their references, Sec. 3.2.2);
 *   - a corneal reflection beside a spot of the seed block: it hides that spot's peak, is taken
 *     in its place, and the extrapolation from it carries the error along the row (Sec. 3.2.2:
 *     "any early error ... can be propagated to the rest of searched spots");
 *   - two spots claiming one peak: the nearer wins; at equal distances the lower index;
 *   - a spot's nearest peak among several within reach; equidistant peaks (raster order);
 *   - the automatic threshold (mean + 3 sd, computed here independently) against explicit ones;
 *   - ties in a peak box (the first in raster order is the peak);
 *   - empty and constant frames, inactive spots, non-finite starts, a NaN pixel, thread-count
 *     independence, bad parameters and frames.
 * Expected outcomes are worked out from the specification, never copied from a run.
 */
#include "testutil.h"

#include "centroid/search_internal.h"
#include "spotwave/search.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(4);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

typedef struct result {
    int32_t n;
    double *x, *y, *in;
    uint8_t *st;
} result;

static result result_new(int32_t n)
{
    result r;
    r.n = n;
    r.x = malloc((size_t)n * sizeof(double));
    r.y = malloc((size_t)n * sizeof(double));
    r.in = malloc((size_t)n * sizeof(double));
    r.st = malloc((size_t)n);
    assert_non_null(r.x);
    assert_non_null(r.y);
    assert_non_null(r.in);
    assert_non_null(r.st);
    return r;
}

static void result_free(result *r)
{
    free(r->x);
    free(r->y);
    free(r->in);
    free(r->st);
}

/* Reichenbach parameters for an f32 frame and an nx x ny grid of the given pitch (defaults:
 * peak_box 13, seed 5 x 5, automatic threshold, capture pitch / 2). */
static sw_search_params rparams(int32_t w, int32_t h, int32_t nx, int32_t ny, double pitch)
{
    sw_search_params p;
    sw_search_params_default(&p, w, h, nx * ny);
    p.algorithm = SW_SEARCH_REICHENBACH;
    p.type = SW_PIX_F32;
    p.nx = nx;
    p.ny = ny;
    p.pitch_px = pitch;
    p.discard = 0;
    return p;
}

static sw_reich *make(sw_context *ctx, const sw_search_params *p)
{
    sw_reich *r = NULL;
    if (sw_reich_create(ctx, p, &r) != SW_OK)
        fail_msg("sw_reich_create: %s", sw_context_error(ctx));
    return r;
}

static void run(sw_reich *r, const sw_image *img, const double *sx, const double *sy,
                const uint8_t *active, result *out)
{
    if (sw_reich_run_cpu(r, img, sx, sy, active, out->x, out->y, out->in, out->st) != SW_OK)
        fail_msg("sw_reich_run_cpu: %s", sw_context_error(cpu));
}

static sw_image f32_image(int32_t w, int32_t h)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &img), SW_OK);
    return img;
}

static float *px(sw_image *img, int32_t x, int32_t y)
{
    return (float *)sw_image_row(img, y) + x;
}

/* Adds amp exp(-r^2 / (2 sigma^2)) sampled at the pixel centres within 5 sigma. */
static void add_gauss(sw_image *img, double cx, double cy, double amp, double sigma)
{
    int32_t r = (int32_t)ceil(5.0 * sigma);
    for (int32_t y = (int32_t)floor(cy) - r; y <= (int32_t)ceil(cy) + r; y++)
        for (int32_t x = (int32_t)floor(cx) - r; x <= (int32_t)ceil(cx) + r; x++) {
            if (x < 0 || y < 0 || x >= img->width || y >= img->height)
                continue;
            double d2 = (x - cx) * (x - cx) + (y - cy) * (y - cy);
            *px(img, x, y) += (float)(amp * exp(-d2 / (2.0 * sigma * sigma)));
        }
}

/* Reference positions of an nx x ny grid: (o + pitch ix, o + pitch iy). */
static void grid_starts(int32_t nx, int32_t ny, double o, double pitch, double *sx, double *sy)
{
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            sx[iy * nx + ix] = o + pitch * ix;
            sy[iy * nx + ix] = o + pitch * iy;
        }
}

/* The SH simulator: 13 x 13 lenslets of 16 px from (32.5, 32.5) (references at 40 + 16 i, on
 * pixel centres) in a 272 x 272 f32 frame, Gaussian spots of sigma 1.8 px, the OSA Zernike
 * coefficients c[0..4] over the array's inscribed circle. Renders into img, fills the truth. */
#define SIM_N     13
#define SIM_PITCH 16.0
static void simulate(const double *coefs, sw_image *img, sw_sh_truth *truth)
{
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = 272;
    sp.geom.nx = sp.geom.ny = SIM_N;
    sp.geom.pitch_px = SIM_PITCH;
    sp.geom.x0 = sp.geom.y0 = 32.5;
    sp.sigma_px = 1.8;
    sp.roi_px = 24;
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, &sp, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    double radius_um = 0.5 * SIM_N * SIM_PITCH * sp.geom.pixel_um;
    if (coefs)
        assert_int_equal(sw_shsim_add_zernike(sim, coefs, 5, radius_um), SW_OK);
    *img = f32_image(sp.width, sp.height);
    assert_int_equal(sw_shsim_run(sim, img, 0), SW_OK);
    assert_int_equal(sw_shsim_truth(sim, truth), SW_OK);
    sw_shsim_destroy(sim);
}

static int32_t count_status(const result *r, uint8_t st)
{
    int32_t n = 0;
    for (int32_t k = 0; k < r->n; k++)
        n += r->st[k] == st;
    return n;
}

/* ---------------------------------------------------------------- accuracy */

/* A flat wavefront: every spot found at its truth; one peak per spot. */
static void test_flat(void **state)
{
    (void)state;
    sw_image img;
    sw_sh_truth t;
    simulate(NULL, &img, &t);
    const int32_t n = SIM_N * SIM_N;
    sw_search_params p = rparams(img.width, img.height, SIM_N, SIM_N, SIM_PITCH);
    sw_reich *r = make(cpu, &p);
    result res = result_new(n);
    run(r, &img, t.ref_x_px, t.ref_y_px, NULL, &res);
    assert_int_equal(sw_reich_last_peaks(r), n);
    for (int32_t k = 0; k < n; k++) {
        assert_int_equal(res.st[k], SW_SPOT_OK);
        assert_near(res.x[k], t.x_px[k], 0.1);
        assert_near(res.y[k], t.y_px[k], 0.1);
        assert_true(res.in[k] > 0.0);
    }
    result_free(&res);
    sw_reich_destroy(r);
    sw_sh_truth_free(&t);
    sw_image_free(&img);
}

/* Defocus moving the outer spots by up to 0.8 pitch: the centre (the seed) stays near the
 * references and the growth's extrapolation follows the rest, also the spots outside their
 * cells, which a search in the reference cells would miss. */
static void test_defocus(void **state)
{
    (void)state;
    const double c[5] = {0.0, 0.0, 0.0, 0.0, -1.8};
    sw_image img;
    sw_sh_truth t;
    simulate(c, &img, &t);
    const int32_t n = SIM_N * SIM_N;
    int32_t outside = 0;
    double maxd = 0.0;
    for (int32_t k = 0; k < n; k++) {
        double dx = fabs(t.x_px[k] - t.ref_x_px[k]), dy = fabs(t.y_px[k] - t.ref_y_px[k]);
        outside += dx > 0.5 * SIM_PITCH || dy > 0.5 * SIM_PITCH;
        maxd = fmax(maxd, fmax(dx, dy));
        assert_true(t.x_px[k] > 8.0 && t.x_px[k] < img.width - 9.0);
    }
    assert_true(outside >= 40);          /* the test is what it claims */
    assert_true(maxd < 0.9 * SIM_PITCH); /* and stays a grid */
    sw_search_params p = rparams(img.width, img.height, SIM_N, SIM_N, SIM_PITCH);
    sw_reich *r = make(cpu, &p);
    result res = result_new(n);
    run(r, &img, t.ref_x_px, t.ref_y_px, NULL, &res);
    for (int32_t k = 0; k < n; k++) {
        assert_int_equal(res.st[k], SW_SPOT_OK);
        assert_near(res.x[k], t.x_px[k], 0.1);
        assert_near(res.y[k], t.y_px[k], 0.1);
    }
    result_free(&res);
    sw_reich_destroy(r);
    sw_sh_truth_free(&t);
    sw_image_free(&img);
}

/* A uniform tilt of 12 px (0.75 pitch) in x: each seed spot's nearest peak within capture
 * (8 px) is its left neighbour's (4 px away; its own is 12 away), and the growth extrapolates
 * that consistently: spot (ix, iy) ends at spot (ix - 1, iy)'s place, column 0 finds nothing
 * (its prediction, 4 px left of its reference, has no peak), the last column's peaks stay
 * free. */
static void test_tilt_shifts_seed(void **state)
{
    (void)state;
    const int32_t nx = 13, ny = 13, n = nx * ny;
    sw_image img = f32_image(272, 272);
    double *sx = malloc(n * sizeof(double)), *sy = malloc(n * sizeof(double));
    grid_starts(nx, ny, 40.0, 16.0, sx, sy);
    for (int32_t k = 0; k < n; k++)
        add_gauss(&img, sx[k] + 12.0, sy[k], 1000.0, 1.5);
    sw_search_params p = rparams(img.width, img.height, nx, ny, 16.0);
    sw_reich *r = make(cpu, &p);
    result res = result_new(n);
    run(r, &img, sx, sy, NULL, &res);
    assert_int_equal(sw_reich_last_peaks(r), n);
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            int32_t k = iy * nx + ix;
            if (ix == 0) {
                assert_int_equal(res.st[k], SW_SPOT_NOT_FOUND);
                assert_true(isnan(res.x[k]) && isnan(res.y[k]));
                continue;
            }
            assert_int_equal(res.st[k], SW_SPOT_OK);
            assert_near(res.x[k], sx[k - 1] + 12.0, 0.01);
            assert_near(res.y[k], sy[k], 0.01);
        }
    result_free(&res);
    sw_reich_destroy(r);
    free(sx);
    free(sy);
    sw_image_free(&img);
}

/*
 * A corneal reflection (20 times a spot's peak) 6 px right of spot (8, 6), in the seed block
 * (columns and rows 4..8 around the centre spot (6, 6)). Worked out from search.h:
 *   - (8, 6)'s own pixel is no peak (the brighter reflection lies in its 13 x 13 box, after it);
 *     the reflection is one, its centroid c pulled a little towards the spot: 4 < c - 168 < 6.5;
 *   - round 0: (8, 6) takes the reflection (its nearest peak within 8 px);
 *   - round 1: (9, 6) has one found neighbour, (8, 6), with (7, 6) behind it: p = 2 c - 152,
 *     more than 8 px right of its own spot (184) and within 8 px of (10, 6)'s (200): it takes
 *     that one;
 *   - round 2: (10, 6) from (9, 6) (at 200) and (8, 6): p = 400 - c, within 8 px of (12, 6)'s
 *     spot (232): it takes that one;
 *   - (11, 6) and (12, 6): their neighbours' predictions fall on taken peaks or on none: not
 *     found; every other spot (its predictions come from correct spots) at its own place.
 */
static void test_reflection_propagates(void **state)
{
    (void)state;
    const int32_t nx = 13, ny = 13, n = nx * ny;
    sw_image img = f32_image(272, 272);
    double *sx = malloc(n * sizeof(double)), *sy = malloc(n * sizeof(double));
    grid_starts(nx, ny, 40.0, 16.0, sx, sy);
    for (int32_t k = 0; k < n; k++)
        add_gauss(&img, sx[k], sy[k], 100.0, 1.2);
    const int32_t kr = 6 * nx + 8; /* spot (8, 6) at (168, 136) */
    add_gauss(&img, sx[kr] + 6.0, sy[kr], 2000.0, 1.2);

    /* The reflection's centroid as search.h defines it: the 13 x 13 window at its pixel (inside
     * the frame, whole pixels) minus its minimum. */
    double m = INFINITY, s0 = 0.0, s1 = 0.0;
    for (int32_t y = 130; y <= 142; y++)
        for (int32_t x = 168; x <= 180; x++)
            m = fmin(m, *px(&img, x, y));
    for (int32_t y = 130; y <= 142; y++)
        for (int32_t x = 168; x <= 180; x++) {
            s0 += *px(&img, x, y) - m;
            s1 += (*px(&img, x, y) - m) * x;
        }
    double c = s1 / s0;
    assert_true(c > 172.0 && c < 174.5);
    assert_true(2.0 * c - 152.0 - 184.0 > 8.0 && fabs(2.0 * c - 152.0 - 200.0) <= 8.0);
    assert_true(fabs(400.0 - c - 232.0) <= 8.0);

    sw_search_params p = rparams(img.width, img.height, nx, ny, 16.0);
    sw_reich *r = make(cpu, &p);
    result res = result_new(n);
    run(r, &img, sx, sy, NULL, &res);
    assert_int_equal(sw_reich_last_peaks(r), n); /* one spot hidden, the reflection added */
    for (int32_t k = 0; k < n; k++) {
        int32_t ix = k % nx, iy = k / nx;
        if (iy == 6 && ix >= 8) {
            if (ix == 8) {
                assert_int_equal(res.st[k], SW_SPOT_OK);
                assert_near(res.x[k], c, 1e-6);
                assert_near(res.y[k], sy[k], 1e-6);
            } else if (ix == 9 || ix == 10) {
                assert_int_equal(res.st[k], SW_SPOT_OK);
                assert_near(res.x[k], sx[k + (ix == 9 ? 1 : 2)], 0.01);
                assert_near(res.y[k], sy[k], 0.01);
            } else {
                assert_int_equal(res.st[k], SW_SPOT_NOT_FOUND);
            }
            continue;
        }
        assert_int_equal(res.st[k], SW_SPOT_OK);
        assert_near(res.x[k], sx[k], 0.01);
        assert_near(res.y[k], sy[k], 0.01);
    }
    /* The reflection's intensity is far above a spot's. */
    assert_true(res.in[kr] > 5.0 * res.in[kr - 1]);
    result_free(&res);
    sw_reich_destroy(r);
    free(sx);
    free(sy);
    sw_image_free(&img);
}

/* ---------------------------------------------------------------- claims */

/* Two spots (a 2 x 1 grid, both in the seed block, capture 12 px) and one peak: the nearer
 * spot takes it, whatever the index; at equal distances the lower index. The loser's growth
 * prediction (the winner's place plus the start difference) has no free peak: not found. */
static void test_conflicts(void **state)
{
    (void)state;
    /* starts 7.7 px either side of 28 (a squared distance that no rounding moves out of its
     * 28-bit bucket) */
    double sx[2] = {20.3, 35.7}, sy[2] = {20.0, 20.0};
    const double peak_x[3] = {30.0, 28.0, 25.0};
    const int winner[3] = {1, 0, 0};
    for (int c = 0; c < 3; c++) {
        sw_image img = f32_image(64, 40);
        add_gauss(&img, peak_x[c], 20.0, 500.0, 1.2);
        sw_search_params p = rparams(64, 40, 2, 1, 16.0);
        p.capture_px = 12.0;
        p.seed_size = 3;
        sw_reich *r = make(cpu, &p);
        result res = result_new(2);
        run(r, &img, sx, sy, NULL, &res);
        assert_int_equal(sw_reich_last_peaks(r), 1);
        int w = winner[c];
        assert_int_equal(res.st[w], SW_SPOT_OK);
        assert_near(res.x[w], peak_x[c], 1e-9);
        assert_near(res.y[w], 20.0, 1e-9);
        assert_int_equal(res.st[1 - w], SW_SPOT_NOT_FOUND);
        result_free(&res);
        sw_reich_destroy(r);
        sw_image_free(&img);
    }
}

/* The nearest free peak within capture: 5 x 5 spots 20 px apart, each with a dimmer satellite
 * peak 9 px to its right, capture 12 px: from its start each spot has its own peak (0 px), its
 * satellite (9 px) and the left neighbour's satellite (11 px) within reach and takes its own. */
static void test_nearest(void **state)
{
    (void)state;
    const int32_t nx = 5, ny = 5, n = nx * ny;
    sw_image img = f32_image(140, 130);
    double sx[25], sy[25];
    grid_starts(nx, ny, 20.0, 20.0, sx, sy);
    for (int32_t k = 0; k < n; k++) {
        add_gauss(&img, sx[k], sy[k], 100.0, 1.2);
        add_gauss(&img, sx[k] + 9.0, sy[k], 30.0, 1.2);
    }
    sw_search_params p = rparams(140, 130, nx, ny, 20.0);
    p.capture_px = 12.0;
    p.peak_threshold = 10.0;
    sw_reich *r = make(cpu, &p);
    result res = result_new(n);
    run(r, &img, sx, sy, NULL, &res);
    assert_int_equal(sw_reich_last_peaks(r), 2 * n);
    for (int32_t k = 0; k < n; k++) {
        assert_int_equal(res.st[k], SW_SPOT_OK);
        assert_near(res.x[k], sx[k], 0.1); /* the satellite's tail pulls a little */
        assert_near(res.y[k], sy[k], 0.01);
    }
    result_free(&res);
    sw_reich_destroy(r);
    sw_image_free(&img);
}

/* Two single-pixel peaks (centroids exactly on their pixels) at the same distance, 7 px, from
 * the only spot's start (30, 20): the one first in raster order is taken. */
static void test_equidistant_peaks(void **state)
{
    (void)state;
    const int32_t pk[3][4] = {{23, 20, 37, 20}, {30, 27, 30, 13}, {23, 20, 30, 13}};
    const int32_t want[3][2] = {{23, 20}, {30, 13}, {30, 13}};
    for (int c = 0; c < 3; c++) {
        sw_image img = f32_image(64, 48);
        *px(&img, pk[c][0], pk[c][1]) = 100.0f;
        *px(&img, pk[c][2], pk[c][3]) = 100.0f;
        double sx = 30.0, sy = 20.0;
        sw_search_params p = rparams(64, 48, 1, 1, 16.0);
        p.peak_threshold = 50.0;
        sw_reich *r = make(cpu, &p);
        result res = result_new(1);
        run(r, &img, &sx, &sy, NULL, &res);
        assert_int_equal(sw_reich_last_peaks(r), 2);
        assert_int_equal(res.st[0], SW_SPOT_OK);
        assert_true(res.x[0] == want[c][0] && res.y[0] == want[c][1]);
        result_free(&res);
        sw_reich_destroy(r);
        sw_image_free(&img);
    }
}

/* ---------------------------------------------------------------- threshold */

/* 10 x 10 spots of amplitudes 10 .. 109 (spot k: 10 + (37 k mod 100)) on 0. The peaks are the
 * spots brighter than the threshold: the automatic one (mean + 3 sd of the frame's pixels,
 * computed here in two passes; no amplitude lies near it) and explicit ones (5: all; 50). Spots
 * found are spots with a peak. */
static void test_threshold(void **state)
{
    (void)state;
    const int32_t nx = 10, ny = 10, n = nx * ny;
    sw_image img = f32_image(192, 192);
    double sx[100], sy[100], amp[100];
    grid_starts(nx, ny, 24.0, 16.0, sx, sy);
    for (int32_t k = 0; k < n; k++) {
        amp[k] = 10.0 + (double)((37 * k) % 100);
        add_gauss(&img, sx[k], sy[k], amp[k], 1.5);
    }
    double mean = 0.0, var = 0.0;
    const double np = 192.0 * 192.0;
    for (int32_t y = 0; y < 192; y++)
        for (int32_t x = 0; x < 192; x++)
            mean += *px(&img, x, y);
    mean /= np;
    for (int32_t y = 0; y < 192; y++)
        for (int32_t x = 0; x < 192; x++)
            var += (*px(&img, x, y) - mean) * (*px(&img, x, y) - mean);
    double tauto = mean + 3.0 * sqrt(var / np);
    for (int32_t k = 0; k < n; k++)
        assert_true(fabs(amp[k] - tauto) > 1e-3);

    const double thr[3] = {0.0, 5.0, 50.0};
    for (int c = 0; c < 3; c++) {
        double t = c == 0 ? tauto : thr[c];
        int64_t expect = 0;
        for (int32_t k = 0; k < n; k++)
            expect += amp[k] > t;
        assert_true(expect > 0);
        sw_search_params p = rparams(192, 192, nx, ny, 16.0);
        p.peak_threshold = thr[c];
        sw_reich *r = make(cpu, &p);
        result res = result_new(n);
        run(r, &img, sx, sy, NULL, &res);
        assert_int_equal(sw_reich_last_peaks(r), expect);
        for (int32_t k = 0; k < n; k++) {
            if (res.st[k] == SW_SPOT_OK) {
                assert_true(amp[k] > t);
                assert_near(res.x[k], sx[k], 1e-6);
                assert_near(res.y[k], sy[k], 1e-6);
            } else {
                assert_int_equal(res.st[k], SW_SPOT_NOT_FOUND);
            }
        }
        if (c == 1)
            assert_int_equal(count_status(&res, SW_SPOT_OK), n);
        result_free(&res);
        sw_reich_destroy(r);
    }
    sw_image_free(&img);
}

/* Ties in a peak box: of two equal largest pixels the first in raster order is the peak (one
 * peak, not two or none). Which one it is shows in the centroid: a third, dimmer pixel lies in
 * the second one's window only. Side by side and one above the other. */
static void test_peak_ties(void **state)
{
    (void)state;
    for (int vertical = 0; vertical < 2; vertical++) {
        sw_image img = f32_image(64, 48);
        *px(&img, 30, 20) = 100.0f;
        if (vertical) {
            *px(&img, 30, 21) = 100.0f;
            *px(&img, 30, 27) = 10.0f; /* in rows 15..27 of the window at (30, 21) only */
        } else {
            *px(&img, 31, 20) = 100.0f;
            *px(&img, 37, 20) = 10.0f; /* in columns 25..37 of the window at (31, 20) only */
        }
        double sx = 30.0, sy = 20.0;
        sw_search_params p = rparams(64, 48, 1, 1, 16.0);
        p.peak_threshold = 50.0;
        sw_reich *r = make(cpu, &p);
        result res = result_new(1);
        run(r, &img, &sx, &sy, NULL, &res);
        assert_int_equal(sw_reich_last_peaks(r), 1);
        assert_int_equal(res.st[0], SW_SPOT_OK);
        assert_near(res.x[0], vertical ? 30.0 : 30.5, 1e-12);
        assert_near(res.y[0], vertical ? 20.5 : 20.0, 1e-12);
        assert_near(res.in[0], 200.0, 1e-9);
        result_free(&res);
        sw_reich_destroy(r);
        sw_image_free(&img);
    }
}

/* Frames without peaks: all 0 and a constant (automatic threshold = the value: nothing above
 * it), and a frame below an explicit threshold: no peak, every active spot not found, NaN. */
static void test_empty(void **state)
{
    (void)state;
    const int32_t nx = 6, ny = 5, n = nx * ny;
    double sx[30], sy[30];
    grid_starts(nx, ny, 10.0, 16.0, sx, sy);
    for (int c = 0; c < 3; c++) {
        sw_image img = f32_image(100, 90);
        for (int32_t y = 0; y < 90; y++)
            for (int32_t x = 0; x < 100; x++)
                *px(&img, x, y) = c == 0 ? 0.0f : 7.0f;
        if (c == 2)
            add_gauss(&img, sx[14], sy[14], 50.0, 1.5);
        sw_search_params p = rparams(100, 90, nx, ny, 16.0);
        if (c == 2)
            p.peak_threshold = 60.0;
        sw_reich *r = make(cpu, &p);
        result res = result_new(n);
        run(r, &img, sx, sy, NULL, &res);
        assert_int_equal(sw_reich_last_peaks(r), 0);
        assert_int_equal(count_status(&res, SW_SPOT_NOT_FOUND), n);
        for (int32_t k = 0; k < n; k++)
            assert_true(isnan(res.x[k]) && isnan(res.y[k]) && isnan(res.in[k]));
        result_free(&res);
        sw_reich_destroy(r);
        sw_image_free(&img);
    }
}

/* ---------------------------------------------------------------- spots and pixels */

/* Inactive spots are INACTIVE (NaN), spots with a non-finite start OUTSIDE; neither is searched
 * nor counts in the seed's mean; the others are found. A NaN pixel in one spot's box drops that
 * spot's peak (its centre of mass cannot be measured): that spot alone is not found. */
static void test_spot_states(void **state)
{
    (void)state;
    const int32_t nx = 9, ny = 9, n = nx * ny;
    sw_image img = f32_image(176, 176);
    double sx[81], sy[81];
    grid_starts(nx, ny, 24.0, 16.0, sx, sy);
    for (int32_t k = 0; k < n; k++)
        add_gauss(&img, sx[k], sy[k], 300.0, 1.4);
    uint8_t act[81];
    memset(act, 1, sizeof act);
    act[0] = 0;
    act[40] = 0; /* the centre: the seed moves */
    sx[8] = NAN;
    sy[72] = INFINITY;
    const int32_t knan = 7 * nx + 2;
    *px(&img, (int32_t)sx[knan] + 3, (int32_t)sy[knan] - 2) = NAN;

    sw_search_params p = rparams(176, 176, nx, ny, 16.0);
    sw_reich *r = make(cpu, &p);
    result res = result_new(n);
    run(r, &img, sx, sy, act, &res);
    assert_int_equal(sw_reich_last_peaks(r), n - 1);
    for (int32_t k = 0; k < n; k++) {
        if (k == 0 || k == 40) {
            assert_int_equal(res.st[k], SW_SPOT_INACTIVE);
            assert_true(isnan(res.x[k]) && isnan(res.y[k]));
        } else if (k == 8 || k == 72) {
            assert_int_equal(res.st[k], SW_SPOT_OUTSIDE);
            assert_true(isnan(res.x[k]) && isnan(res.y[k]));
        } else if (k == knan) {
            assert_int_equal(res.st[k], SW_SPOT_NOT_FOUND);
        } else {
            assert_int_equal(res.st[k], SW_SPOT_OK);
            assert_near(res.x[k], sx[k], 1e-6);
            assert_near(res.y[k], sy[k], 1e-6);
        }
    }
    result_free(&res);
    sw_reich_destroy(r);
    sw_image_free(&img);
}

/* One thread and eight give the same bits (noisy frame, many rounds, u16 frame). */
static void test_threads(void **state)
{
    (void)state;
    const double c[5] = {0.0, 0.0, 0.0, 0.0, -1.5};
    sw_image img;
    sw_sh_truth t;
    simulate(c, &img, &t);
    sw_image noisy = sw_test_random_image(img.width, img.height, SW_PIX_U16, 77);
    for (int32_t y = 0; y < img.height; y++)
        for (int32_t x = 0; x < img.width; x++) {
            uint16_t *q = (uint16_t *)sw_image_row(&noisy, y) + x;
            *q = (uint16_t)(*q % 200u + (uint32_t)fmin(*px(&img, x, y), 60000.0));
        }
    const int32_t n = SIM_N * SIM_N;
    sw_search_params p = rparams(img.width, img.height, SIM_N, SIM_N, SIM_PITCH);
    p.type = SW_PIX_U16;
    sw_context *one = sw_test_cpu_context(1), *eight = sw_test_cpu_context(8);
    sw_reich *r1 = make(one, &p), *r8 = make(eight, &p);
    result a = result_new(n), b = result_new(n);
    if (sw_reich_run_cpu(r1, &noisy, t.ref_x_px, t.ref_y_px, NULL, a.x, a.y, a.in, a.st) != SW_OK ||
        sw_reich_run_cpu(r8, &noisy, t.ref_x_px, t.ref_y_px, NULL, b.x, b.y, b.in, b.st) != SW_OK)
        fail_msg("run: %s", sw_context_error(one));
    assert_true(sw_reich_last_peaks(r1) >= n);
    assert_int_equal(sw_reich_last_peaks(r1), sw_reich_last_peaks(r8));
    assert_memory_equal(a.x, b.x, n * sizeof(double));
    assert_memory_equal(a.y, b.y, n * sizeof(double));
    assert_memory_equal(a.in, b.in, n * sizeof(double));
    assert_memory_equal(a.st, b.st, (size_t)n);
    assert_true(count_status(&a, SW_SPOT_OK) > n / 2);
    result_free(&a);
    result_free(&b);
    sw_reich_destroy(r1);
    sw_reich_destroy(r8);
    sw_context_destroy(one);
    sw_context_destroy(eight);
    sw_image_free(&noisy);
    sw_sh_truth_free(&t);
    sw_image_free(&img);
}

/* ---------------------------------------------------------------- the public API */

/* sw_search_run with SW_SEARCH_REICHENBACH (discarding off) gives the plan's result, and
 * sw_search_last_peaks its peak count. */
static void test_public_api(void **state)
{
    (void)state;
    sw_image img;
    sw_sh_truth t;
    simulate(NULL, &img, &t);
    const int32_t n = SIM_N * SIM_N;
    sw_search_params p = rparams(img.width, img.height, SIM_N, SIM_N, SIM_PITCH);
    sw_search_plan *plan = NULL;
    assert_int_equal(sw_search_create(cpu, &p, &plan), SW_OK);
    assert_int_equal(sw_search_last_peaks(plan), -1);
    result a = result_new(n), b = result_new(n);
    assert_int_equal(
        sw_search_run(plan, &img, t.ref_x_px, t.ref_y_px, NULL, SW_MEM_HOST, a.x, a.y, a.in, a.st),
        SW_OK);
    sw_reich *r = make(cpu, &p);
    run(r, &img, t.ref_x_px, t.ref_y_px, NULL, &b);
    assert_int_equal(sw_search_last_peaks(plan), sw_reich_last_peaks(r));
    assert_memory_equal(a.x, b.x, n * sizeof(double));
    assert_memory_equal(a.y, b.y, n * sizeof(double));
    assert_memory_equal(a.st, b.st, (size_t)n);
    result_free(&a);
    result_free(&b);
    sw_reich_destroy(r);
    sw_search_destroy(plan);
    sw_sh_truth_free(&t);
    sw_image_free(&img);
}

/* ---------------------------------------------------------------- bad input */

static void test_bad_input(void **state)
{
    (void)state;
    sw_reich *r = NULL;
    sw_search_params p = rparams(64, 64, 3, 3, 16.0);
    sw_search_params q = p;
    q.nx = 4; /* 4 x 3 != 9 */
    assert_int_equal(sw_reich_create(cpu, &q, &r), SW_EINVAL);
    assert_null(r);
    q = p;
    q.peak_box = 12;
    assert_int_equal(sw_reich_create(cpu, &q, &r), SW_EINVAL);
    q = p;
    q.seed_size = 4;
    assert_int_equal(sw_reich_create(cpu, &q, &r), SW_EINVAL);
    q = p;
    q.capture_px = 0.0;
    q.pitch_px = 0.0;
    assert_int_equal(sw_reich_create(cpu, &q, &r), SW_EINVAL);
    q = p;
    q.peak_threshold = -1.0;
    assert_int_equal(sw_reich_create(cpu, &q, &r), SW_EINVAL);

    r = make(cpu, &p);
    assert_int_equal(sw_reich_last_peaks(r), -1);
    double sx[9], sy[9], x[9], y[9], in[9];
    uint8_t st[9];
    grid_starts(3, 3, 16.0, 16.0, sx, sy);
    for (int k = 0; k < 9; k++)
        x[k] = -5.0;
    sw_image wrong = f32_image(65, 64);
    assert_int_equal(sw_reich_run_cpu(r, &wrong, sx, sy, NULL, x, y, in, st), SW_EINVAL);
    sw_image u8;
    assert_int_equal(sw_image_alloc(cpu, 64, 64, SW_PIX_U8, &u8), SW_OK);
    assert_int_equal(sw_reich_run_cpu(r, &u8, sx, sy, NULL, x, y, in, st), SW_EINVAL);
    for (int k = 0; k < 9; k++)
        assert_true(x[k] == -5.0); /* untouched */
    sw_image good = f32_image(64, 64);
    assert_int_equal(sw_reich_run_cpu(r, &good, NULL, sy, NULL, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_reich_run_cpu(r, &good, sx, sy, NULL, x, y, in, st), SW_OK);
    sw_reich_destroy(r);
    sw_reich_destroy(NULL);
    sw_image_free(&wrong);
    sw_image_free(&u8);
    sw_image_free(&good);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flat),
        cmocka_unit_test(test_defocus),
        cmocka_unit_test(test_tilt_shifts_seed),
        cmocka_unit_test(test_reflection_propagates),
        cmocka_unit_test(test_conflicts),
        cmocka_unit_test(test_nearest),
        cmocka_unit_test(test_equidistant_peaks),
        cmocka_unit_test(test_threshold),
        cmocka_unit_test(test_peak_ties),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_spot_states),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_public_api),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
