/*
 * The centroid search on the CPU (search.h; seed 001 Sec. 3.2.1 PAPYCS, 3.2.3 CoM and the
 * discarding stage): PAPYCS centroids of clean integrated-Gaussian spots to 0.02 px for sub-pixel
 * offsets and starts a third of a window off; CoM's bias on an off-centre spot against PAPYCS; a
 * constant background changes nothing (minimum subtraction); the fractional edge weights make a
 * step continuous in its start; one step against an independent brute-force integral over the
 * window (every window side 1..256, frame edges, all pixel types); flat, outside, NaN and
 * inactive spots; each discarding criterion on a planted defect and nowhere else; bad
 * parameters and frames (outputs untouched); sw_sm_com_step against the plan's CoM; names.
 */
#include "testutil.h"

#include "centroid/search_model.h"
#include "spotwave/search.h"

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

/* ---------------------------------------------------------------- scenes */

/* A frame as doubles before it is written in a pixel type. */
typedef struct scene {
    int32_t w, h;
    double *v;
} scene;

static scene scene_new(int32_t w, int32_t h, double background)
{
    scene s = {w, h, malloc((size_t)w * (size_t)h * sizeof(double))};
    assert_non_null(s.v);
    for (size_t k = 0; k < (size_t)w * (size_t)h; ++k)
        s.v[k] = background;
    return s;
}

/* The integral over pixel i ([i - 0.5, i + 0.5)) of a unit 1-D Gaussian centred at x0. */
static double gauss_pixel(int32_t i, double x0, double sigma)
{
    double t = 1.0 / (sigma * sqrt(2.0));
    return 0.5 * (erf(((double)i + 0.5 - x0) * t) - erf(((double)i - 0.5 - x0) * t));
}

/* Adds an integrated Gaussian spot of `flux` at (x0, y0) (the analytic pixel integrals). */
static void add_spot(scene *s, double x0, double y0, double sigma, double flux)
{
    for (int32_t j = 0; j < s->h; ++j) {
        double gy = gauss_pixel(j, y0, sigma);
        for (int32_t i = 0; i < s->w; ++i)
            s->v[(size_t)j * s->w + i] += flux * gy * gauss_pixel(i, x0, sigma);
    }
}

/* A host image of type t (integers rounded and clamped), tight stride plus `pad` bytes. */
static sw_image scene_image(const scene *s, sw_pixel_type t, size_t pad)
{
    size_t px = sw_pixel_size(t), stride = (size_t)s->w * px + pad;
    void *data = calloc((size_t)s->h, stride);
    assert_non_null(data);
    sw_image img;
    assert_int_equal(sw_image_wrap(data, s->w, s->h, stride, t, SW_MEM_HOST, &img), SW_OK);
    for (int32_t j = 0; j < s->h; ++j) {
        char *row = (char *)data + (size_t)j * stride;
        for (int32_t i = 0; i < s->w; ++i) {
            double v = s->v[(size_t)j * s->w + i];
            if (t == SW_PIX_F32) {
                ((float *)row)[i] = (float)v;
            } else {
                double hi = t == SW_PIX_U8 ? 255.0 : 65535.0;
                double r = floor(v + 0.5);
                r = r < 0.0 ? 0.0 : (r > hi ? hi : r);
                if (t == SW_PIX_U8)
                    ((uint8_t *)row)[i] = (uint8_t)r;
                else
                    ((uint16_t *)row)[i] = (uint16_t)r;
            }
        }
    }
    return img;
}

static void image_release(sw_image *img)
{
    free(img->data);
    img->data = NULL;
}

/* Runs one search on the CPU; returns the status of sw_search_run. */
static sw_status run_search(const sw_search_params *p, const sw_image *img, const double *sx,
                            const double *sy, const uint8_t *active, double *x, double *y,
                            double *inten, uint8_t *st)
{
    sw_search_plan *plan = NULL;
    assert_int_equal(sw_search_create(cpu, p, &plan), SW_OK);
    sw_status r = sw_search_run(plan, img, sx, sy, active, SW_MEM_HOST, x, y, inten, st);
    assert_int_equal(sw_search_last_peaks(plan), -1);
    sw_search_destroy(plan);
    return r;
}

/* A grid of nx x ny spots of pitch d (cells of d pixels, spots near the cell centres). */
typedef struct grid {
    int32_t nx, ny, n;
    double d;
    double *rx, *ry; /* reference (start) positions                     */
    double *tx, *ty; /* true positions                                  */
    double *x, *y, *inten;
    uint8_t *st;
} grid;

static grid grid_new(int32_t nx, int32_t ny, double d)
{
    grid g = {nx, ny, nx * ny, d, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t n = (size_t)g.n;
    g.rx = calloc(n, sizeof(double));
    g.ry = calloc(n, sizeof(double));
    g.tx = calloc(n, sizeof(double));
    g.ty = calloc(n, sizeof(double));
    g.x = calloc(n, sizeof(double));
    g.y = calloc(n, sizeof(double));
    g.inten = calloc(n, sizeof(double));
    g.st = calloc(n, 1);
    assert_true(g.rx && g.ry && g.tx && g.ty && g.x && g.y && g.inten && g.st);
    for (int32_t iy = 0; iy < ny; ++iy) {
        for (int32_t ix = 0; ix < nx; ++ix) {
            int32_t k = iy * nx + ix;
            g.rx[k] = g.tx[k] = d * (ix + 0.5) - 0.5;
            g.ry[k] = g.ty[k] = d * (iy + 0.5) - 0.5;
        }
    }
    return g;
}

static void grid_free(grid *g)
{
    free(g->rx);
    free(g->ry);
    free(g->tx);
    free(g->ty);
    free(g->x);
    free(g->y);
    free(g->inten);
    free(g->st);
}

/* A deterministic pattern in 0..3 (the "noise" of empty cells). */
static double pattern(int32_t i, int32_t j)
{
    uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)j * 40503u;
    h ^= h >> 13;
    h *= 2246822519u;
    h ^= h >> 16;
    return (double)(h % 4u);
}

/* ---------------------------------------------------------------- accuracy */

/* Noise-free spots with sub-pixel offsets: PAPYCS to 0.02 px, from the cell centres and from
 * starts a third of the window off. */
static void test_papycs_accuracy(void **state)
{
    (void)state;
    const sw_pixel_type types[] = {SW_PIX_F32, SW_PIX_U16};
    for (int ti = 0; ti < 2; ++ti) {
        for (int off = 0; off < 2; ++off) {
            grid g = grid_new(6, 6, 24.0);
            scene s = scene_new(144, 144, 20.0);
            for (int32_t k = 0; k < g.n; ++k) {
                /* Sub-pixel offsets spread over [-0.5, 0.5) in a fixed pattern. */
                g.tx[k] = g.rx[k] + ((k * 7) % 11) / 11.0 - 0.5;
                g.ty[k] = g.ry[k] + ((k * 5) % 13) / 13.0 - 0.5;
                add_spot(&s, g.tx[k], g.ty[k], 1.3, 3000.0);
            }
            double *sx = malloc((size_t)g.n * sizeof(double));
            double *sy = malloc((size_t)g.n * sizeof(double));
            assert_true(sx && sy);
            for (int32_t k = 0; k < g.n; ++k) {
                /* A third of the 18-pixel window (6 px) off in a direction that turns. */
                double a = k * 0.7;
                sx[k] = off ? g.tx[k] + 6.0 * cos(a) : g.rx[k];
                sy[k] = off ? g.ty[k] + 6.0 * sin(a) : g.ry[k];
            }
            sw_search_params p;
            sw_search_params_default(&p, s.w, s.h, g.n);
            p.type = types[ti];
            p.window_px = 18;
            sw_image img = scene_image(&s, p.type, 0);
            assert_int_equal(run_search(&p, &img, sx, sy, NULL, g.x, g.y, g.inten, g.st), SW_OK);
            for (int32_t k = 0; k < g.n; ++k) {
                assert_int_equal(g.st[k], SW_SPOT_OK);
                assert_near(g.x[k], g.tx[k], 0.02);
                assert_near(g.y[k], g.ty[k], 0.02);
                assert_true(g.inten[k] > 0.0);
            }
            image_release(&img);
            free(sx);
            free(sy);
            free(s.v);
            grid_free(&g);
        }
    }
}

/* An off-centre spot: one CoM step in the start window is pulled toward the window's centre
 * (the spot is cut by the window's edge); PAPYCS re-centres and finds it. */
static void test_com_bias(void **state)
{
    (void)state;
    scene s = scene_new(64, 64, 5.0);
    double tx = 37.3, ty = 29.6;
    add_spot(&s, tx, ty, 2.5, 20000.0);
    sw_image img = scene_image(&s, SW_PIX_F32, 0);
    double sx = 31.5, sy = 31.5; /* 5.8 and 1.9 px off: the 16-px window cuts the spot */
    double x[2], y[2], in[2];
    uint8_t st[2];
    sw_search_params p;
    sw_search_params_default(&p, 64, 64, 1);
    p.type = SW_PIX_F32;
    p.algorithm = SW_SEARCH_COM;
    assert_int_equal(run_search(&p, &img, &sx, &sy, NULL, &x[0], &y[0], &in[0], &st[0]), SW_OK);
    p.algorithm = SW_SEARCH_PAPYCS;
    assert_int_equal(run_search(&p, &img, &sx, &sy, NULL, &x[1], &y[1], &in[1], &st[1]), SW_OK);
    assert_int_equal(st[0], SW_SPOT_OK);
    assert_int_equal(st[1], SW_SPOT_OK);
    /* CoM: pulled toward the start, by more than 0.2 px in x. */
    assert_true(x[0] < tx - 0.2);
    assert_true(x[0] > sx);
    assert_near(x[1], tx, 0.02);
    assert_near(y[1], ty, 0.02);
    image_release(&img);
    free(s.v);
}

/* Minimum subtraction: +100 on every pixel changes no centroid (to rounding). */
static void test_background(void **state)
{
    (void)state;
    const sw_search_algorithm algs[] = {SW_SEARCH_PAPYCS, SW_SEARCH_COM};
    for (int a = 0; a < 2; ++a) {
        grid g = grid_new(4, 4, 20.0);
        scene s = scene_new(80, 80, 3.0);
        for (int32_t k = 0; k < g.n; ++k)
            add_spot(&s, g.rx[k] + 0.3 * (k % 3) - 0.4, g.ry[k] - 0.2 * (k % 4) + 1.1, 1.6, 5000.0);
        sw_search_params p;
        sw_search_params_default(&p, 80, 80, g.n);
        p.type = SW_PIX_U16;
        p.algorithm = algs[a];
        sw_image img = scene_image(&s, SW_PIX_U16, 6);
        assert_int_equal(run_search(&p, &img, g.rx, g.ry, NULL, g.x, g.y, g.inten, g.st), SW_OK);
        double *x0 = malloc((size_t)g.n * sizeof(double)), *y0 = malloc((size_t)g.n * 8);
        double *i0 = malloc((size_t)g.n * sizeof(double));
        assert_true(x0 && y0 && i0);
        memcpy(x0, g.x, (size_t)g.n * sizeof(double));
        memcpy(y0, g.y, (size_t)g.n * sizeof(double));
        memcpy(i0, g.inten, (size_t)g.n * sizeof(double));
        image_release(&img);
        for (size_t k = 0; k < (size_t)s.w * (size_t)s.h; ++k)
            s.v[k] += 100.0;
        img = scene_image(&s, SW_PIX_U16, 6);
        assert_int_equal(run_search(&p, &img, g.rx, g.ry, NULL, g.x, g.y, g.inten, g.st), SW_OK);
        for (int32_t k = 0; k < g.n; ++k) {
            assert_int_equal(g.st[k], SW_SPOT_OK);
            assert_near(g.x[k], x0[k], 1e-9);
            assert_near(g.y[k], y0[k], 1e-9);
            assert_near(g.inten[k], i0[k], 1e-9 * i0[k]);
        }
        image_release(&img);
        free(x0);
        free(y0);
        free(i0);
        free(s.v);
        grid_free(&g);
    }
}

/* The fractional edge weights: moving the start by 1e-3 px moves the CoM result by less than
 * 1e-3 px, across a half-integer where a window of whole pixels would jump. A dead pixel inside
 * every window holds the minimum at 0, so the background of the edge columns counts. PAPYCS
 * likewise moves by less than 1e-3 px. */
static void test_continuity(void **state)
{
    (void)state;
    scene s = scene_new(48, 48, 50.0);
    add_spot(&s, 24.2, 23.7, 1.5, 4000.0);
    s.v[(size_t)22 * 48 + 22] = 0.0;
    sw_image img = scene_image(&s, SW_PIX_F32, 0);
    const sw_search_algorithm algs[] = {SW_SEARCH_COM, SW_SEARCH_PAPYCS};
    for (int a = 0; a < 2; ++a) {
        enum { N = 41 };
        double sx[N], sy[N], x[N], y[N], in[N];
        uint8_t st[N];
        for (int k = 0; k < N; ++k) {
            sx[k] = 23.48 + 1e-3 * k; /* across 23.5: the window's edges cross half-integers */
            sy[k] = 24.0 - 1e-3 * k;
        }
        sw_search_params p;
        sw_search_params_default(&p, 48, 48, N);
        p.type = SW_PIX_F32;
        p.algorithm = algs[a];
        p.window_px = 12;
        assert_int_equal(run_search(&p, &img, sx, sy, NULL, x, y, in, st), SW_OK);
        for (int k = 0; k < N; ++k) {
            assert_int_equal(st[k], SW_SPOT_OK);
            if (k > 0) {
                assert_true(fabs(x[k] - x[k - 1]) < 1e-3);
                assert_true(fabs(y[k] - y[k - 1]) < 1e-3);
            }
        }
        if (algs[a] == SW_SEARCH_COM) /* the window's weights move the result */
            assert_true(fabs(x[N - 1] - x[0]) > 1e-4);
    }
    image_release(&img);
    free(s.v);
}

/* ---------------------------------------------------------------- one step vs brute force */

/* The length of [i - 0.5, i + 0.5) inside [a, b]. */
static double overlap(int32_t i, double a, double b)
{
    double lo = fmax((double)i - 0.5, a), hi = fmin((double)i + 0.5, b);
    return hi > lo ? hi - lo : 0.0;
}

/* One step by the definition of search.h: the window's pixels with their weights and middles,
 * the window minimum, S0, Sx, Sy summed pixel by pixel. Returns 0 when flat or empty. */
static int brute_step(const sw_image *img, double cx, double cy, double side, double *nx,
                      double *ny, double *s0)
{
    double a = fmax(cx - side / 2, -0.5), b = fmin(cx + side / 2, img->width - 0.5);
    double c = fmax(cy - side / 2, -0.5), d = fmin(cy + side / 2, img->height - 0.5);
    if (!(a < b && c < d))
        return 0;
    double m = INFINITY;
    for (int32_t j = 0; j < img->height; ++j)
        for (int32_t i = 0; i < img->width; ++i)
            if (overlap(i, a, b) > 0 && overlap(j, c, d) > 0)
                m = fmin(m, sw_image_get(img, i, j));
    double S0 = 0, Sx = 0, Sy = 0;
    for (int32_t j = 0; j < img->height; ++j) {
        double wy = overlap(j, c, d);
        if (wy <= 0)
            continue;
        double my = (fmax(j - 0.5, c) + fmin(j + 0.5, d)) / 2;
        for (int32_t i = 0; i < img->width; ++i) {
            double wx = overlap(i, a, b);
            if (wx <= 0)
                continue;
            double mx = (fmax(i - 0.5, a) + fmin(i + 0.5, b)) / 2;
            double v = (sw_image_get(img, i, j) - m) * wx * wy;
            S0 += v;
            Sx += v * mx;
            Sy += v * my;
        }
    }
    if (!(S0 > 0))
        return 0;
    *nx = Sx / S0;
    *ny = Sy / S0;
    *s0 = S0;
    return 1;
}

/* sw_sm_com_step (the lanes, the butterfly, the analytic minimum) against the brute force, for
 * random frames, every window side 1..256 (up to 3 passes of 128 columns), centres anywhere
 * including past the frame's edges, the three pixel types and odd strides. */
static void test_step_brute_force(void **state)
{
    (void)state;
    const sw_pixel_type types[] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    for (int ti = 0; ti < 3; ++ti) {
        sw_pixel_type t = types[ti];
        int32_t w = 301, h = 283;
        sw_image raw = sw_test_random_image(w, h, t, 11 + ti);
        /* Odd stride (a multiple of the pixel size): copy into a padded buffer. */
        size_t px = sw_pixel_size(t), stride = (size_t)w * px + 3 * px;
        char *buf = malloc(stride * (size_t)h);
        assert_non_null(buf);
        for (int32_t j = 0; j < h; ++j)
            memcpy(buf + (size_t)j * stride, sw_image_row(&raw, j), (size_t)w * px);
        sw_image img;
        assert_int_equal(sw_image_wrap(buf, w, h, stride, t, SW_MEM_HOST, &img), SW_OK);
        if (t == SW_PIX_F32) /* finite values of a moderate range */
            for (int32_t j = 0; j < h; ++j)
                for (int32_t i = 0; i < w; ++i)
                    ((float *)(buf + (size_t)j * stride))[i] =
                        (float)(((float *)sw_image_row(&raw, j))[i] * 1e-2f + 200.0f);
        for (int32_t side = 1; side <= SW_SEARCH_MAX_WINDOW; side += (side < 40 ? 1 : 7)) {
            for (int rep = 0; rep < 3; ++rep) {
                double u = pattern(side, rep) / 4.0 + 0.123 * rep;
                double cx = rep == 0 ? 150.3 + u : (rep == 1 ? -0.4 * side + u : w - 1.0 + u);
                double cy = rep == 0 ? 140.7 - u : (rep == 1 ? h - 2.0 + u : 0.2 * side - u);
                double ax, ay, as0, bx = 0, by = 0, bs0 = 0;
                int ra =
                    sw_sm_com_step(img.data, img.stride, t, w, h, cx, cy, side, &ax, &ay, &as0);
                int rb = brute_step(&img, cx, cy, side, &bx, &by, &bs0);
                assert_int_equal(ra, rb);
                if (ra) {
                    assert_near(ax, bx, 1e-6);
                    assert_near(ay, by, 1e-6);
                    assert_near(as0, bs0, 1e-9 * bs0);
                }
            }
        }
        free(buf);
        sw_image_free(&raw);
    }
}

/* ---------------------------------------------------------------- bad spots */

static void test_spot_states(void **state)
{
    (void)state;
    scene s = scene_new(40, 40, 7.0);
    add_spot(&s, 10.2, 10.1, 1.5, 3000.0);
    add_spot(&s, 30.0, 29.7, 1.5, 3000.0);
    add_spot(&s, 10.0, 30.0, 1.5, 3000.0);
    sw_image img = scene_image(&s, SW_PIX_F32, 0);
    /* Spots: 0 fine, 1 inactive, 2 outside, 3 NaN start, 4 flat (no spot: a uniform area),
     * 5 NaN pixel at its centre, 6 Inf start, 7 a NaN pixel 4 px off its spot: inside the
     * first windows only (search.h: a NaN in a window makes the spot FLAT). */
    enum { N = 8 };
    double sx[N] = {10, 10, -30, NAN, 30, 30, INFINITY, 10};
    double sy[N] = {10, 10, 20, 10, 10, 30, 5, 30};
    uint8_t act[N] = {1, 0, 1, 1, 1, 1, 1, 1};
    ((float *)sw_image_row(&img, 30))[30] = NAN;
    ((float *)sw_image_row(&img, 30))[14] = NAN;
    double x[N], y[N], in[N];
    uint8_t st[N];
    sw_search_params p;
    sw_search_params_default(&p, 40, 40, N);
    p.type = SW_PIX_F32;
    p.window_px = 10;
    assert_int_equal(run_search(&p, &img, sx, sy, act, x, y, in, st), SW_OK);
    const uint8_t want[N] = {SW_SPOT_OK,   SW_SPOT_INACTIVE, SW_SPOT_OUTSIDE, SW_SPOT_OUTSIDE,
                             SW_SPOT_FLAT, SW_SPOT_FLAT,     SW_SPOT_OUTSIDE, SW_SPOT_FLAT};
    for (int k = 0; k < N; ++k) {
        assert_int_equal(st[k], want[k]);
        if (k == 0) {
            assert_near(x[k], 10.2, 0.02);
            assert_near(y[k], 10.1, 0.02);
        } else {
            assert_true(isnan(x[k]) && isnan(y[k]) && isnan(in[k]));
        }
    }
    /* A flat frame: every spot FLAT, with both algorithms. */
    scene f = scene_new(20, 20, 42.0);
    sw_image flat = scene_image(&f, SW_PIX_U8, 1);
    double fx[2] = {5, 14}, fy[2] = {5, 12};
    sw_search_params_default(&p, 20, 20, 2);
    for (int a = 0; a < 2; ++a) {
        p.algorithm = a ? SW_SEARCH_COM : SW_SEARCH_PAPYCS;
        assert_int_equal(run_search(&p, &flat, fx, fy, NULL, x, y, NULL, st), SW_OK);
        assert_int_equal(st[0], SW_SPOT_FLAT);
        assert_int_equal(st[1], SW_SPOT_FLAT);
        assert_true(isnan(x[0]) && isnan(y[1]));
    }
    image_release(&flat);
    free(f.v);
    image_release(&img);
    free(s.v);
}

/* ---------------------------------------------------------------- discarding stage */

/* A 6 x 6 grid of 16-px cells, u8, spots of peak ~200 on a background of 10 + (0..3). */
typedef enum defect { NONE, EMPTY_CELL, SATURATED, TOO_CLOSE, ISOLATED_SPOT } defect;

static void run_defect(defect d, grid *g, double min_spacing, int32_t min_window)
{
    const int32_t nx = 6, ny = 6;
    const double pitch = 16.0;
    *g = grid_new(nx, ny, pitch);
    scene s = scene_new(96, 96, 10.0);
    for (int32_t j = 0; j < s.h; ++j)
        for (int32_t i = 0; i < s.w; ++i)
            s.v[(size_t)j * s.w + i] += pattern(i, j);
    const int32_t k0 = 2 * nx + 2; /* the cell with the defect (interior) */
    for (int32_t k = 0; k < g->n; ++k) {
        int32_t ix = k % nx, iy = k / nx;
        int skip = (d == EMPTY_CELL || d == SATURATED) && k == k0;
        if (d == ISOLATED_SPOT && abs(ix - 2) + abs(iy - 2) == 1)
            skip = 1; /* the four neighbours of k0 are empty */
        if (d == TOO_CLOSE && k == k0) {
            g->tx[k] += 4.0; /* 12 px from its +x neighbour */
            g->rx[k] += 4.0; /* and searched there (a dynamic mesh) */
        }
        g->tx[k] += 0.1 * (k % 5) - 0.2;
        g->ty[k] += 0.1 * (k % 3) - 0.1;
        if (!skip)
            add_spot(&s, g->tx[k], g->ty[k], 1.2, 1800.0);
    }
    if (d == SATURATED)
        for (int32_t j = -2; j <= 2; ++j)
            for (int32_t i = -2; i <= 2; ++i)
                s.v[(size_t)((int32_t)g->ry[k0] + j) * s.w + (int32_t)g->rx[k0] + i] = 255.0;
    sw_image img = scene_image(&s, SW_PIX_U8, 3);
    sw_search_params p;
    sw_search_params_default(&p, 96, 96, g->n);
    p.nx = nx;
    p.ny = ny;
    p.pitch_px = pitch;
    p.min_spacing = min_spacing;
    p.min_window_px = min_window;
    assert_int_equal(p.discard, 1);
    assert_int_equal(run_search(&p, &img, g->rx, g->ry, NULL, g->x, g->y, g->inten, g->st), SW_OK);
    image_release(&img);
    free(s.v);
}

static void test_discard(void **state)
{
    (void)state;
    const int32_t nx = 6, k0 = 2 * nx + 2;
    grid g;
    /* No defect: everything kept and measured. */
    run_defect(NONE, &g, 0.8, 3);
    for (int32_t k = 0; k < g.n; ++k) {
        assert_int_equal(g.st[k], SW_SPOT_OK);
        assert_near(g.x[k], g.tx[k], 0.05);
        assert_near(g.y[k], g.ty[k], 0.05);
    }
    grid_free(&g);
    /* Each defect: its criterion fires on the planted spots and nowhere else. */
    const defect ds[] = {EMPTY_CELL, SATURATED, TOO_CLOSE, ISOLATED_SPOT};
    for (int di = 0; di < 4; ++di) {
        /* The plateau is 5 px wide: the last window must be wider to see its rim (a 3-px
         * window inside it is flat: see below). */
        run_defect(ds[di], &g, 0.8, ds[di] == SATURATED ? 7 : 3);
        for (int32_t k = 0; k < g.n; ++k) {
            int32_t ix = k % nx, iy = k / nx;
            uint8_t want = SW_SPOT_OK;
            if ((ds[di] == EMPTY_CELL || ds[di] == SATURATED) && k == k0)
                want = SW_SPOT_EMPTY;
            if (ds[di] == TOO_CLOSE && (k == k0 || k == k0 + 1))
                want = SW_SPOT_SPACING;
            if (ds[di] == ISOLATED_SPOT) {
                if (k == k0)
                    want = SW_SPOT_ISOLATED;
                else if (abs(ix - 2) + abs(iy - 2) == 1)
                    want = SW_SPOT_EMPTY;
            }
            if (g.st[k] != want)
                fail_msg("defect %d: spot %d has status %d (%s), expected %d", (int)ds[di], k,
                         g.st[k], sw_spot_status_string((sw_spot_status)g.st[k]), want);
            if (want == SW_SPOT_OK) {
                assert_near(g.x[k], g.tx[k], 0.05);
            } else {
                assert_true(isnan(g.x[k]) && isnan(g.y[k]) && isnan(g.inten[k]));
            }
        }
        grid_free(&g);
    }
    /* The same too-close pair with the default limits (0.5 pitch = 8 px < 12 px): kept. */
    run_defect(TOO_CLOSE, &g, 0.5, 3);
    for (int32_t k = 0; k < g.n; ++k)
        assert_int_equal(g.st[k], SW_SPOT_OK);
    grid_free(&g);
    /* The plateau with the default last window (3 px, inside the plateau): the last window is
     * flat, so the spot is FLAT before the discarding stage; the others are kept. */
    run_defect(SATURATED, &g, 0.8, 3);
    for (int32_t k = 0; k < g.n; ++k)
        assert_int_equal(g.st[k], k == k0 ? SW_SPOT_FLAT : SW_SPOT_OK);
    grid_free(&g);
}

/* Criterion 1's distance on wide spots: a 3 x 3 grid of 96-px cells, spots of sigma 6 px and
 * peak ~200 (the paper's f-number: sigma ~ pitch / 12) on 10 + (0..3), the centre cell empty. At
 * d = 1 a spot rises only ~4 grey levels over its 8 neighbours (200 x (1 - exp(-1 / 72)) at the
 * sides, 200 x (1 - exp(-1 / 36)) at the corners), so the paper's contrast of 15 calls every spot
 * empty; at d = sw_search_discard_ring(96) = 3 it rises ~34 (the same at 9 / 72 and 9 / 36) and
 * every spot is kept, the empty cell still empty. */
static void test_discard_ring(void **state)
{
    (void)state;
    assert_int_equal(sw_search_discard_ring(30.0), 1);
    assert_int_equal(sw_search_discard_ring(47.9), 1);
    assert_int_equal(sw_search_discard_ring(48.0), 2);
    assert_int_equal(sw_search_discard_ring(96.0), 3);
    assert_int_equal(sw_search_discard_ring(119.8), 4);
    assert_int_equal(sw_search_discard_ring(1e9), SW_SEARCH_MAX_WINDOW / 2);
    assert_int_equal(sw_search_discard_ring(0.0), 1);
    assert_int_equal(sw_search_discard_ring(NAN), 1);
    assert_int_equal(sw_search_discard_ring(INFINITY), 1);
    const int32_t nx = 3, n = 9, k0 = 4;
    const double pitch = 96.0, sigma = 6.0;
    grid g = grid_new(nx, nx, pitch);
    scene s = scene_new(288, 288, 10.0);
    for (int32_t j = 0; j < s.h; ++j)
        for (int32_t i = 0; i < s.w; ++i)
            s.v[(size_t)j * s.w + i] += pattern(i, j);
    for (int32_t k = 0; k < n; ++k)
        if (k != k0)
            add_spot(&s, g.tx[k] + 0.3, g.ty[k] - 0.2, sigma,
                     200.0 * 6.283185307179586 * sigma * sigma);
    sw_image img = scene_image(&s, SW_PIX_U8, 0);
    for (int32_t ring = 1; ring <= 3; ring += 2) {
        sw_search_params p;
        sw_search_params_default(&p, 288, 288, n);
        p.nx = p.ny = nx;
        p.pitch_px = pitch;
        p.window_px = 95;
        p.discard_ring_px = ring == 1 ? 1 : sw_search_discard_ring(pitch);
        assert_int_equal(run_search(&p, &img, g.rx, g.ry, NULL, g.x, g.y, g.inten, g.st), SW_OK);
        for (int32_t k = 0; k < n; ++k) {
            uint8_t want = (ring == 1 || k == k0) ? SW_SPOT_EMPTY : SW_SPOT_OK;
            if (g.st[k] != want)
                fail_msg("ring %d: spot %d has status %d (%s), expected %d", ring, k, g.st[k],
                         sw_spot_status_string((sw_spot_status)g.st[k]), want);
            if (want == SW_SPOT_OK) { /* the 3-px last window on the 0..3 pattern */
                assert_near(g.x[k], g.tx[k] + 0.3, 0.15);
                assert_near(g.y[k], g.ty[k] - 0.2, 0.15);
            }
        }
    }
    image_release(&img);
    free(s.v);
    grid_free(&g);
}

/* Criterion 1's frame-edge test at d > 1 (sw_sm_contrast_ok): the (2d + 1)^2 block about the
 * centroid's pixel must lie in the frame, on every side; inside it, the 8 pixels d away count,
 * not the nearer ones. A 12 x 10 u8 frame of 0 with one 100 pixel. */
static void test_contrast_ring_edges(void **state)
{
    (void)state;
    enum { W = 12, H = 10 };
    uint8_t f[W * H];
    const int32_t pos[4][2] = {{2, 5}, {9, 5}, {5, 2}, {5, 7}}; /* 2 px from an edge */
    for (int q = 0; q < 4; ++q) {
        memset(f, 0, sizeof f);
        const int32_t i = pos[q][0], j = pos[q][1];
        f[j * W + i] = 100;
        for (int32_t d = 1; d <= 3; ++d) {
            const int want = d <= 2; /* d = 3 reaches past the edge */
            const int got = sw_sm_contrast_ok(f, W, SW_PIX_U8, W, H, i + 0.2, j - 0.3, 15.0, d);
            if (got != want)
                fail_msg("pixel (%d, %d), d = %d: %d, expected %d", i, j, d, got, want);
        }
        /* the ring at d = 2 skips the 8 neighbours: bright neighbours do not count */
        for (int32_t b = -1; b <= 1; ++b)
            for (int32_t a = -1; a <= 1; ++a)
                if (a || b)
                    f[(j + b) * W + i + a] = 100;
        assert_false(sw_sm_contrast_ok(f, W, SW_PIX_U8, W, H, i, j, 15.0, 1));
        assert_true(sw_sm_contrast_ok(f, W, SW_PIX_U8, W, H, i, j, 15.0, 2));
    }
}

/* The discarding stage is off without a grid and with discard 0. */
static void test_discard_off(void **state)
{
    (void)state;
    scene s = scene_new(30, 30, 10.0);
    for (int32_t j = 0; j < 30; ++j)
        for (int32_t i = 0; i < 30; ++i)
            s.v[(size_t)j * 30 + i] += pattern(i, j);
    sw_image img = scene_image(&s, SW_PIX_U8, 0);
    double sx = 15, sy = 15, x, y, in;
    uint8_t st;
    sw_search_params p;
    sw_search_params_default(&p, 30, 30, 1);
    assert_int_equal(run_search(&p, &img, &sx, &sy, NULL, &x, &y, &in, &st), SW_OK);
    assert_int_equal(st, SW_SPOT_OK); /* no grid: a noise centroid is not discarded */
    p.nx = p.ny = 1;
    p.pitch_px = 16;
    assert_int_equal(run_search(&p, &img, &sx, &sy, NULL, &x, &y, &in, &st), SW_OK);
    assert_int_equal(st, SW_SPOT_EMPTY);
    p.discard = 0;
    assert_int_equal(run_search(&p, &img, &sx, &sy, NULL, &x, &y, &in, &st), SW_OK);
    assert_int_equal(st, SW_SPOT_OK);
    image_release(&img);
    free(s.v);
}

/* ---------------------------------------------------------------- the neighbour window */

/* Spots converging at the edge of an aberrated pupil (search.h, the neighbour window): a 3 x 3
 * grid of 32-px lenslets whose middle spot is 12 px below the top-middle one and twice as bright.
 * Started exactly on their spots with the lenslet's 32-px window, the top-middle lenslet's first
 * window holds both and PAPYCS takes the brighter one, its neighbour's; with neighbour_window 1
 * its first window is 12 px (the distance to the neighbour's start) and every spot is its own.
 * 0.5 gives 6-px first windows: the same. */
static void test_neighbour_window(void **state)
{
    (void)state;
    const sw_pixel_type types[] = {SW_PIX_U8, SW_PIX_F32};
    for (int ti = 0; ti < 2; ++ti) {
        for (int mode = 0; mode < 3; ++mode) {
            grid g = grid_new(3, 3, 32.0);
            scene s = scene_new(96, 96, 10.0);
            for (int32_t j = 0; j < 96; ++j)
                for (int32_t i = 0; i < 96; ++i)
                    s.v[(size_t)j * 96 + i] += pattern(i, j);
            g.ty[4] = g.ty[1] + 12.0; /* the middle spot, 12 px below the top-middle one */
            for (int32_t k = 0; k < g.n; ++k)
                add_spot(&s, g.tx[k], g.ty[k], 1.3, k == 4 ? 3000.0 : 1500.0);
            sw_search_params p;
            sw_search_params_default(&p, 96, 96, g.n);
            p.type = types[ti];
            p.window_px = 32;
            p.nx = p.ny = 3;
            p.pitch_px = 32.0;
            p.discard = 0;
            p.neighbour_window = mode == 0 ? 0.0 : (mode == 1 ? 1.0 : 0.5);
            sw_image img = scene_image(&s, p.type, 0);
            /* started on the truth (a perfect dynamic mesh) */
            assert_int_equal(run_search(&p, &img, g.tx, g.ty, NULL, g.x, g.y, g.inten, g.st),
                             SW_OK);
            for (int32_t k = 0; k < g.n; ++k) {
                assert_int_equal(g.st[k], SW_SPOT_OK);
                double err = hypot(g.x[k] - g.tx[k], g.y[k] - g.ty[k]);
                if (mode == 0 && k == 1) /* the 32-px window: the neighbour's spot */
                    assert_true(hypot(g.x[k] - g.tx[4], g.y[k] - g.ty[4]) < 0.5);
                else if (err > 0.05)
                    fail_msg("%s, neighbour_window %g: spot %d is %.3f px off",
                             sw_pixel_type_string(p.type), p.neighbour_window, k, err);
            }
            image_release(&img);
            free(s.v);
            grid_free(&g);
        }
    }
}

/* sw_sm_first_side: the max-norm distance to the nearest finite neighbour start, times f,
 * floored, within [smin, smax]; NaN starts and spots beyond the grid do not count. */
static void test_first_side(void **state)
{
    (void)state;
    /* 3 x 2 grid, spot 1 (top middle) at (40, 10) */
    double sx[6] = {10.0, 40.0, 70.0, 10.0, 43.0, 70.0};
    double sy[6] = {10.0, 10.0, 10.0, 40.0, 27.5, 40.0};
    /* nearest: spot 4, max(|3|, |17.5|) = 17.5 */
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 3, 2, 1.0, 32, 3), 17);
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 3, 2, 0.5, 32, 3), 8);
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 3, 2, 0.1, 32, 3), 3);  /* not below smin */
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 3, 2, 2.0, 32, 3), 32); /* not above smax */
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 3, 2, 0.0, 32, 3), 32); /* off */
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 0, 0, 1.0, 32, 3), 32); /* no grid */
    /* a NaN neighbour does not count: then spot 3, max(30, 30) = 30 */
    sy[4] = NAN;
    assert_int_equal(sw_sm_first_side(sx, sy, 1, 3, 2, 1.0, 32, 3), 30);
    /* spot 5 (right end of row 1) sees spots 1, 2 and 4, not spot 3 two columns away */
    sy[4] = 27.5;
    sx[3] = 69.0;
    assert_int_equal(sw_sm_first_side(sx, sy, 5, 3, 2, 1.0, 32, 3), 27);
    /* a diagonal neighbour counts: 2 x 2, spot 3 at (5, 20) from spot 0 */
    double dx[4] = {0.0, 100.0, 0.0, 5.0}, dy[4] = {0.0, 0.0, 100.0, 20.0};
    assert_int_equal(sw_sm_first_side(dx, dy, 0, 2, 2, 1.0, 32, 3), 20);
    /* starts a whole number of pixels apart but for rounding (a flat wavefront's predictions):
     * one side either way, so that backends whose solvers differ in the last bits agree */
    double gx[2] = {0.0, 32.0 - 4e-15}, gy[2] = {0.0, 0.0};
    assert_int_equal(sw_sm_first_side(gx, gy, 0, 2, 1, 1.0, 32, 3), 32);
    gx[1] = 20.0 - 4e-15;
    assert_int_equal(sw_sm_first_side(gx, gy, 0, 2, 1, 1.0, 32, 3), 20);
    gx[1] = 20.0 + 4e-15;
    assert_int_equal(sw_sm_first_side(gx, gy, 0, 2, 1, 1.0, 32, 3), 20);
    /* no finite neighbour, or a NaN start of its own */
    double nx1[2] = {5.0, NAN}, ny1[2] = {5.0, 6.0};
    assert_int_equal(sw_sm_first_side(nx1, ny1, 0, 2, 1, 1.0, 32, 3), 32);
    assert_int_equal(sw_sm_first_side(nx1, ny1, 1, 2, 1, 1.0, 32, 3), 32);
}

/* ---------------------------------------------------------------- API */

static void test_bad_params(void **state)
{
    (void)state;
    sw_search_params p, q;
    sw_search_params_default(&p, 64, 64, 4);
    sw_search_plan *plan = NULL;
    assert_int_equal(sw_search_create(cpu, &p, &plan), SW_OK);
    sw_search_destroy(plan);
    sw_search_destroy(NULL);
#define BAD(stmt)                                                                                  \
    do {                                                                                           \
        q = p;                                                                                     \
        stmt;                                                                                      \
        plan = (sw_search_plan *)1;                                                                \
        assert_int_equal(sw_search_create(cpu, &q, &plan), SW_EINVAL);                             \
        assert_null(plan);                                                                         \
        assert_true(strlen(sw_context_error(cpu)) > 0);                                            \
    } while (0)
    BAD(q.window_px = 2);
    BAD(q.min_window_px = 0);
    BAD(q.min_window_px = 1); /* a 1-pixel window is its own minimum: always flat */
    BAD(q.window_px = SW_SEARCH_MAX_WINDOW + 1);
    BAD(q.nspots = 0);
    BAD(q.nspots = (1 << 24) + 1);
    BAD((q.nx = 3, q.ny = 2, q.pitch_px = 16));
    BAD((q.nx = 2, q.ny = 2, q.pitch_px = 0));
    BAD((q.nx = 2, q.ny = 0));
    BAD(q.type = SW_PIX_U32);
    BAD(q.type = (sw_pixel_type)99);
    BAD(q.width = 2);
    BAD(q.height = 0);
    BAD(q.algorithm = (sw_search_algorithm)7);
    BAD(q.algorithm = SW_SEARCH_REICHENBACH); /* no grid */
    BAD((q.algorithm = SW_SEARCH_REICHENBACH, q.nx = q.ny = 2, q.pitch_px = 16, q.peak_box = 4));
    BAD((q.algorithm = SW_SEARCH_REICHENBACH, q.nx = q.ny = 2, q.pitch_px = 16, q.seed_size = 0));
    BAD((q.algorithm = SW_SEARCH_REICHENBACH, q.nx = q.ny = 2, q.pitch_px = 16, q.capture_px = -1));
    BAD(q.discard = 2);
    BAD((q.nx = q.ny = 2, q.pitch_px = 16, q.min_spacing = 2.0));
    BAD((q.nx = q.ny = 2, q.pitch_px = 16, q.discard_contrast = NAN));
    BAD((q.nx = q.ny = 2, q.pitch_px = 16, q.discard_ring_px = 0));
    BAD((q.nx = q.ny = 2, q.pitch_px = 16, q.discard_ring_px = SW_SEARCH_MAX_WINDOW / 2 + 1));
    BAD(q.neighbour_window = -0.5);
    BAD(q.neighbour_window = INFINITY);
    BAD(q.neighbour_window = NAN);
#undef BAD
    assert_int_equal(sw_search_create(cpu, NULL, &plan), SW_EINVAL);
    assert_int_equal(sw_search_create(NULL, &p, &plan), SW_EINVAL);
}

/* A frame of the wrong size, type or memory: SW_EINVAL, outputs untouched. */
static void test_bad_frames(void **state)
{
    (void)state;
    sw_search_params p;
    sw_search_params_default(&p, 32, 32, 2);
    sw_search_plan *plan = NULL;
    assert_int_equal(sw_search_create(cpu, &p, &plan), SW_OK);
    sw_image a, b, c;
    assert_int_equal(sw_image_alloc(NULL, 33, 32, SW_PIX_U8, &a), SW_OK);
    assert_int_equal(sw_image_alloc(NULL, 32, 32, SW_PIX_U16, &b), SW_OK);
    assert_int_equal(sw_image_alloc(NULL, 32, 32, SW_PIX_U8, &c), SW_OK);
    double sx[2] = {10, 20}, sy[2] = {10, 20};
    double x[2] = {-7, -7}, y[2] = {-7, -7}, in[2] = {-7, -7};
    uint8_t st[2] = {99, 99};
    assert_int_equal(sw_search_run(plan, &a, sx, sy, NULL, SW_MEM_HOST, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_search_run(plan, &b, sx, sy, NULL, SW_MEM_HOST, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_search_run(plan, &c, sx, sy, NULL, SW_MEM_DEVICE, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_search_run(plan, &c, sx, sy, NULL, (sw_memory)9, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_search_run(plan, &c, NULL, sy, NULL, SW_MEM_HOST, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_search_run(plan, NULL, sx, sy, NULL, SW_MEM_HOST, x, y, in, st), SW_EINVAL);
    sw_image dev = c;
    dev.memory = SW_MEM_DEVICE; /* a device frame on a CPU context */
    assert_int_equal(sw_search_run(plan, &dev, sx, sy, NULL, SW_MEM_HOST, x, y, in, st), SW_EINVAL);
    assert_int_equal(sw_search_run(NULL, &c, sx, sy, NULL, SW_MEM_HOST, x, y, in, st), SW_EINVAL);
    for (int k = 0; k < 2; ++k) {
        assert_true(x[k] == -7 && y[k] == -7 && in[k] == -7);
        assert_int_equal(st[k], 99);
    }
    /* The right frame runs (an all-zero frame: flat). */
    assert_int_equal(sw_search_run(plan, &c, sx, sy, NULL, SW_MEM_PINNED, x, y, in, st), SW_OK);
    assert_int_equal(st[0], SW_SPOT_FLAT);
    sw_image_free(&a);
    sw_image_free(&b);
    sw_image_free(&c);
    sw_search_destroy(plan);
}

/* sw_sm_com_step (the model the Reichenbach part calls) gives exactly the plan's CoM. */
static void test_model_equals_plan(void **state)
{
    (void)state;
    const sw_pixel_type types[] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    for (int ti = 0; ti < 3; ++ti) {
        grid g = grid_new(5, 4, 19.5);
        scene s = scene_new(100, 80, 12.0);
        for (int32_t k = 0; k < g.n; ++k)
            add_spot(&s, g.rx[k] + 0.37 * (k % 4), g.ry[k] - 0.21 * (k % 5), 1.4, 2000.0);
        sw_image img = scene_image(&s, types[ti], 2 * sw_pixel_size(types[ti]));
        sw_search_params p;
        sw_search_params_default(&p, 100, 80, g.n);
        p.type = types[ti];
        p.algorithm = SW_SEARCH_COM;
        p.window_px = 15;
        for (int32_t k = 0; k < g.n; ++k)
            g.rx[k] += 0.01 * k - 0.8; /* arbitrary fractional starts */
        assert_int_equal(run_search(&p, &img, g.rx, g.ry, NULL, g.x, g.y, g.inten, g.st), SW_OK);
        for (int32_t k = 0; k < g.n; ++k) {
            double mx, my, ms;
            int ok = sw_sm_com_step(img.data, img.stride, img.type, img.width, img.height, g.rx[k],
                                    g.ry[k], 15.0, &mx, &my, &ms);
            assert_int_equal(ok, 1);
            assert_int_equal(g.st[k], SW_SPOT_OK);
            assert_memory_equal(&mx, &g.x[k], sizeof(double));
            assert_memory_equal(&my, &g.y[k], sizeof(double));
            assert_memory_equal(&ms, &g.inten[k], sizeof(double));
        }
        image_release(&img);
        free(s.v);
        grid_free(&g);
    }
}

/* The same results with 1 and 4 threads (OpenMP over spots). */
static void test_threads(void **state)
{
    (void)state;
    grid g = grid_new(8, 8, 12.0);
    scene s = scene_new(96, 96, 4.0);
    for (int32_t k = 0; k < g.n; ++k)
        add_spot(&s, g.rx[k] + 0.05 * (k % 9), g.ry[k] - 0.03 * (k % 7), 1.2, 1500.0);
    sw_image img = scene_image(&s, SW_PIX_U8, 0);
    sw_search_params p;
    sw_search_params_default(&p, 96, 96, g.n);
    p.window_px = 12;
    p.nx = p.ny = 8;
    p.pitch_px = 12;
    sw_context *one = sw_test_cpu_context(1);
    sw_search_plan *plan = NULL;
    assert_int_equal(sw_search_create(one, &p, &plan), SW_OK);
    assert_int_equal(
        sw_search_run(plan, &img, g.rx, g.ry, NULL, SW_MEM_HOST, g.x, g.y, g.inten, g.st), SW_OK);
    sw_search_destroy(plan);
    double x1[64], y1[64];
    memcpy(x1, g.x, sizeof x1);
    memcpy(y1, g.y, sizeof y1);
    assert_int_equal(run_search(&p, &img, g.rx, g.ry, NULL, g.x, g.y, g.inten, g.st), SW_OK);
    assert_memory_equal(x1, g.x, sizeof x1);
    assert_memory_equal(y1, g.y, sizeof y1);
    for (int32_t k = 0; k < g.n; ++k)
        assert_int_equal(g.st[k], SW_SPOT_OK);
    sw_context_destroy(one);
    image_release(&img);
    free(s.v);
    grid_free(&g);
}

static void test_names(void **state)
{
    (void)state;
    const sw_search_algorithm algs[] = {SW_SEARCH_PAPYCS, SW_SEARCH_COM, SW_SEARCH_REICHENBACH};
    for (int k = 0; k < 3; ++k) {
        sw_search_algorithm a = (sw_search_algorithm)99;
        assert_int_equal(sw_search_algorithm_parse(sw_search_algorithm_string(algs[k]), &a), SW_OK);
        assert_int_equal(a, algs[k]);
    }
    sw_search_algorithm a;
    assert_int_equal(sw_search_algorithm_parse("PAPYCS", &a), SW_OK);
    assert_int_equal(a, SW_SEARCH_PAPYCS);
    assert_int_equal(sw_search_algorithm_parse("cog", &a), SW_EINVAL);
    assert_int_equal(sw_search_algorithm_parse(NULL, &a), SW_EINVAL);
    assert_string_equal(sw_spot_status_string(SW_SPOT_ISOLATED), "discarded: isolated");
    for (int s = 0; s <= SW_SPOT_ISOLATED; ++s)
        assert_true(strlen(sw_spot_status_string((sw_spot_status)s)) > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_papycs_accuracy),
        cmocka_unit_test(test_com_bias),
        cmocka_unit_test(test_background),
        cmocka_unit_test(test_continuity),
        cmocka_unit_test(test_step_brute_force),
        cmocka_unit_test(test_spot_states),
        cmocka_unit_test(test_discard),
        cmocka_unit_test(test_discard_ring),
        cmocka_unit_test(test_contrast_ring_edges),
        cmocka_unit_test(test_discard_off),
        cmocka_unit_test(test_neighbour_window),
        cmocka_unit_test(test_first_side),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_model_equals_plan),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
