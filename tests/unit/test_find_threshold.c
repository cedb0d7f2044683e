/*
 * The dispersion thresholds of the find stage on the CPU (find_threshold.c) against a reference
 * written here from find.h's definitions alone: pixel values read from the typed frame by the
 * rules of find.h ("Pixel values"), window sums by direct loops in double precision, the
 * extended algorithm's erosion by a direct search for the nearest valid non-dispersed pixel.
 * Every pixel must be decided the same on Poisson frames with planted spots (near the edges
 * too), masks, overloaded pixels, values of 2^24 and more, for both algorithms, kernels 1x1,
 * 3x3, 2x5, 5x5, gains 1, 1.7 and a gain map, global thresholds 0 and 5, min_local 2 and 0
 * (the whole window), all four pixel types (f32 with fractions, exact halves, negatives, NaN and
 * Inf) and frames whose rows are longer than their width. Also: an all-masked frame and constant
 * frames give no strong pixels; the valid count; a planted spot is found; masked pixels do not
 * erode the dispersed region (DIALS); the thread count does not change the result.
 */
#include "find_testutil.h"
#include "testutil.h"

#include "find/find_internal.h"
#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(3);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* A host frame of type t holding vals (f32: plus a fraction in (-0.7, 0.7)), its rows `pad`
 * pixels longer than the width (the padding is junk: 0xA5 bytes), with special pixels when
 * specials != 0: per type, overloaded values, values of 2^24 and more, exact halves, negatives,
 * NaN, Inf. The caller frees data. */
static sw_image make_frame(sw_pixel_type t, int w, int h, int pad, const double *vals, trng *r,
                           int specials)
{
    size_t ps = sw_pixel_size(t), stride = (size_t)(w + pad) * ps;
    void *data = malloc(stride * (size_t)h);
    assert_non_null(data);
    memset(data, 0xA5, stride * (size_t)h);
    sw_image img;
    assert_int_equal(sw_image_wrap(data, w, h, stride, t, SW_MEM_HOST, &img), SW_OK);
    for (int y = 0; y < h; y++) {
        void *row = sw_image_row(&img, y);
        for (int x = 0; x < w; x++) {
            double v = vals[(size_t)y * w + x];
            switch (t) {
            case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)(v > 255.0 ? 255.0 : v); break;
            case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)(v > 65535.0 ? 65535.0 : v); break;
            case SW_PIX_U32: ((uint32_t *)row)[x] = (uint32_t)v; break;
            default: ((float *)row)[x] = (float)(v + 1.4 * (trng_u01(r) - 0.5)); break;
            }
        }
    }
    if (!specials)
        return img;
    const int nspecial = 8;
    for (int k = 0; k < 4 * nspecial; k++) {
        int x = trng_int(r, w), y = trng_int(r, h);
        void *row = sw_image_row(&img, y);
        int kind = k % nspecial;
        switch (t) {
        case SW_PIX_U8: ((uint8_t *)row)[x] = kind < 4 ? 255 : 254; break;
        case SW_PIX_U16: {
            static const uint16_t s16[8] = {65535, 65534, 65533, 60000, 65535, 40000, 1000, 65534};
            ((uint16_t *)row)[x] = s16[kind];
            break;
        }
        case SW_PIX_U32: {
            static const uint32_t s32[8] = {4294967295u, 4294967294u, 4294967293u, 16777216u,
                                            16777215u,   30000000u,   16777217u,   100000u};
            ((uint32_t *)row)[x] = s32[kind];
            break;
        }
        default: {
            const float f32[8] = {NAN, INFINITY, -INFINITY, -3.25f, 2.5f, 0.5f, 2e7f, 16777215.0f};
            ((float *)row)[x] = f32[kind];
            break;
        }
        }
    }
    return img;
}

/* ------------------------------------------------------------------ the reference */

typedef struct ref_params {
    sw_find_algorithm algorithm;
    int kx, ky, min_local;
    double thr, sb, ss, gain, overload; /* overload 0: the type's default (find.h) */
    const float *gain_map;              /* or NULL */
    const uint8_t *mask;                /* or NULL */
} ref_params;

/* find.h "Pixel values", from the typed frame: value and validity. */
static void ref_pixels(const sw_image *f, const ref_params *p, double *v, int *valid)
{
    double ovl = p->overload;
    if (ovl == 0.0)
        ovl = f->type == SW_PIX_U8    ? 255.0
              : f->type == SW_PIX_U16 ? 65534.0
              : f->type == SW_PIX_U32 ? 4294967294.0
                                      : INFINITY;
    for (int y = 0; y < f->height; y++) {
        const void *row = sw_image_row(f, y);
        for (int x = 0; x < f->width; x++) {
            size_t i = (size_t)y * f->width + x;
            double val;
            int ok = 1;
            switch (f->type) {
            case SW_PIX_U8: val = ((const uint8_t *)row)[x]; break;
            case SW_PIX_U16: val = ((const uint16_t *)row)[x]; break;
            case SW_PIX_U32: val = ((const uint32_t *)row)[x]; break;
            default: {
                double d = ((const float *)row)[x];
                if (isnan(d) || isinf(d)) {
                    ok = 0;
                    val = 0.0;
                } else if (d < 0.0) {
                    val = 0.0;
                } else {
                    val = floor(d + 0.5); /* halves away from zero */
                    if (val > 4294967295.0)
                        val = 4294967295.0;
                }
                break;
            }
            }
            if (!(val < ovl))
                ok = 0;
            if (p->mask && !p->mask[i])
                ok = 0;
            v[i] = val;
            valid[i] = ok;
        }
    }
}

/* Window sums (count, sum, sum of squares) over the pixels with use[] set, by direct loops. */
static void ref_window(int w, int h, const double *v, const int *use, int x, int y, int kx, int ky,
                       double *m, double *s, double *q)
{
    *m = *s = *q = 0.0;
    for (int yy = y - ky; yy <= y + ky; yy++)
        for (int xx = x - kx; xx <= x + kx; xx++) {
            if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                continue;
            size_t j = (size_t)yy * w + xx;
            if (!use[j])
                continue;
            *m += 1.0;
            *s += v[j];
            *q += v[j] * v[j];
        }
}

static void ref_threshold(const sw_image *f, const ref_params *p, uint8_t *strong, int64_t *nvalid)
{
    const int w = f->width, h = f->height;
    const size_t n = (size_t)w * h;
    double *v = malloc(n * sizeof(double));
    int *valid = malloc(n * sizeof(int)), *sum = malloc(n * sizeof(int));
    int *disp = malloc(n * sizeof(int)), *core = malloc(n * sizeof(int));
    assert_true(v && valid && sum && disp && core);
    ref_pixels(f, p, v, valid);
    const double min_count =
        p->min_local <= 0 ? (double)((2 * p->kx + 1) * (2 * p->ky + 1)) : (double)p->min_local;
    *nvalid = 0;
    for (size_t i = 0; i < n; i++) {
        sum[i] = valid[i] && v[i] < 16777216.0; /* 2^24 */
        *nvalid += valid[i];
    }
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            double m, s, q, g = p->gain_map ? (double)p->gain_map[i] : p->gain;
            ref_window(w, h, v, sum, x, y, p->kx, p->ky, &m, &s, &q);
            int dispersed =
                m >= min_count && m * q - s * s > g * s * (m - 1.0 + p->sb * sqrt(2.0 * (m - 1.0)));
            if (p->algorithm == SW_FIND_DISPERSION) {
                int fore = m * v[i] - s > p->ss * sqrt(g * s * m);
                strong[i] = (uint8_t)(valid[i] && v[i] > p->thr && dispersed && fore);
            } else {
                disp[i] = !valid[i] || dispersed; /* invalid pixels never erode (DIALS) */
            }
        }
    if (p->algorithm == SW_FIND_DISPERSION)
        goto done;
    /* Erosion: the Chebyshev distance to the nearest pixel of the image outside D, found by
     * searching rings of growing radius (stopping at the erosion distance). */
    const int reach = p->kx < p->ky ? p->kx : p->ky;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            int dist = reach; /* "at least reach" */
            for (int r = 0; r < reach && dist == reach; r++)
                for (int yy = y - r; yy <= y + r && dist == reach; yy++)
                    for (int xx = x - r; xx <= x + r; xx++) {
                        if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                            continue;
                        if (abs(xx - x) != r && abs(yy - y) != r)
                            continue; /* inside the ring: seen at a smaller radius */
                        if (!disp[(size_t)yy * w + xx]) {
                            dist = r;
                            break;
                        }
                    }
            core[i] = valid[i] && disp[i] && dist >= reach;
        }
    for (size_t i = 0; i < n; i++)
        sum[i] = valid[i] && !core[i] && v[i] < 16777216.0;
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            double m, s, q, g = p->gain_map ? (double)p->gain_map[i] : p->gain;
            ref_window(w, h, v, sum, x, y, p->kx + 2, p->ky + 2, &m, &s, &q);
            double mean = m >= 2.0 ? s / m : 0.0;
            strong[i] =
                (uint8_t)(core[i] && v[i] > p->thr && v[i] >= mean + p->ss * sqrt(g * mean));
        }
done:
    free(v);
    free(valid);
    free(sum);
    free(disp);
    free(core);
}

/* ------------------------------------------------------------------ running the library */

static sw_find_plan *make_plan(sw_context *ctx, const sw_image *f, const ref_params *r)
{
    sw_find_params p;
    sw_find_params_default(&p, f->width, f->height, f->type);
    p.algorithm = r->algorithm;
    p.kernel_x = r->kx;
    p.kernel_y = r->ky;
    p.min_local = r->min_local;
    p.global_threshold = r->thr;
    p.sigma_background = r->sb;
    p.sigma_strong = r->ss;
    p.gain = r->gain;
    p.gain_map = r->gain_map;
    p.mask = r->mask;
    p.overload = r->overload;
    sw_find_plan *plan = NULL;
    if (sw_find_create(ctx, &p, &plan) != SW_OK)
        fail_msg("sw_find_create: %s", sw_context_error(ctx));
    return plan;
}

/* The library's decisions on frame f with parameters r; returns the strong count. */
static int64_t run_cpu(sw_context *ctx, const sw_image *f, const ref_params *r, uint8_t *strong,
                       int64_t *nvalid)
{
    sw_find_plan *plan = make_plan(ctx, f, r);
    if (sw_find_threshold_cpu(plan, f, strong, nvalid) != SW_OK)
        fail_msg("sw_find_threshold_cpu: %s", sw_context_error(ctx));
    sw_find_destroy(plan);
    int64_t n = 0;
    for (size_t i = 0; i < (size_t)f->width * f->height; i++) {
        assert_true(strong[i] <= 1);
        n += strong[i];
    }
    return n;
}

/* Library vs reference on one frame and parameter set: every pixel and the valid count.
 * Returns the number of strong pixels. */
static int64_t check_frame(const sw_image *f, const ref_params *r, const char *what)
{
    size_t n = (size_t)f->width * f->height;
    uint8_t *got = malloc(n), *want = malloc(n);
    assert_true(got && want);
    int64_t got_valid = -1, want_valid = -2;
    int64_t nstrong = run_cpu(cpu, f, r, got, &got_valid);
    ref_threshold(f, r, want, &want_valid);
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("%s: %s %s, kernel %d x %d, gain %g%s, threshold %g, min_local %d, overload "
                     "%g%s: pixel (%d, %d) is %d, the reference says %d",
                     what, sw_find_algorithm_string(r->algorithm), sw_pixel_type_string(f->type),
                     r->kx, r->ky, r->gain, r->gain_map ? " (map)" : "", r->thr, r->min_local,
                     r->overload, r->mask ? ", masked" : "", (int)(i % (size_t)f->width),
                     (int)(i / (size_t)f->width), got[i], want[i]);
    assert_int_equal(got_valid, want_valid);
    free(got);
    free(want);
    return nstrong;
}

static uint8_t *random_mask(int w, int h, trng *r)
{
    uint8_t *m = malloc((size_t)w * h);
    assert_non_null(m);
    for (size_t i = 0; i < (size_t)w * h; i++)
        m[i] = trng_u01(r) > 0.03;
    /* a masked block touching the left edge, like a beam stop */
    for (int y = h / 3; y < h / 3 + 4 && y < h; y++)
        for (int x = 0; x < 5 && x < w; x++)
            m[(size_t)y * w + x] = 0;
    return m;
}

static float *random_gain_map(int w, int h, trng *r)
{
    float *g = malloc((size_t)w * h * sizeof(float));
    assert_non_null(g);
    for (size_t i = 0; i < (size_t)w * h; i++)
        g[i] = (float)(0.8 + 1.4 * trng_u01(r));
    return g;
}

/* ------------------------------------------------------------------ tests */

/* The whole parameter grid on Poisson frames with spots, every pixel type. */
static void test_grid(void **state)
{
    (void)state;
    const int w = 61, h = 47;
    const int kernels[4][2] = {{1, 1}, {3, 3}, {2, 5}, {5, 5}};
    const sw_pixel_type types[4] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};
    trng r = trng_make(1234);
    double *vals = malloc((size_t)w * h * sizeof(double));
    assert_non_null(vals);
    uint8_t *mask = random_mask(w, h, &r);
    float *gmap = random_gain_map(w, h, &r);
    int64_t strong_total[2] = {0, 0};
    for (int t = 0; t < 4; t++) {
        scene(w, h, t == 0 ? 1.5 : 4.0, 9, &r, vals);
        sw_image f = make_frame(types[t], w, h, 3 + t, vals, &r, 1);
        for (int alg = 0; alg < 2; alg++)
            for (int k = 0; k < 4; k++)
                for (int gi = 0; gi < 3; gi++)
                    for (int ti = 0; ti < 2; ti++)
                        for (int mi = 0; mi < 2; mi++) {
                            ref_params p = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                                            kernels[k][0],
                                            kernels[k][1],
                                            mi ? 0 : 2,
                                            ti ? 5.0 : 0.0,
                                            6.0,
                                            3.0,
                                            gi == 1 ? 1.7 : 1.0,
                                            0.0,
                                            NULL,
                                            NULL};
                            if (gi == 2)
                                p.gain_map = gmap;
                            if ((k + gi + ti) % 2)
                                p.mask = mask;
                            if ((k + mi) % 3 == 2 && types[t] != SW_PIX_U8)
                                p.overload = 400.0; /* the brightest spot pixels invalid */
                            strong_total[alg] += check_frame(&f, &p, "grid");
                        }
        free(f.data);
    }
    /* The grid is not trivially empty: both algorithms find pixels. */
    assert_true(strong_total[0] > 1000);
    assert_true(strong_total[1] > 1000);
    free(vals);
    free(mask);
    free(gmap);
}

/* Other sigmas, sizes that exercise the tables' edges: one row, one column, wider than one
 * block of table columns, a single pixel. */
static void test_shapes(void **state)
{
    (void)state;
    const int shapes[5][2] = {{1, 40}, {40, 1}, {300, 21}, {1, 1}, {9, 7}};
    trng r = trng_make(99);
    for (int s = 0; s < 5; s++) {
        int w = shapes[s][0], h = shapes[s][1];
        double *vals = malloc((size_t)w * h * sizeof(double));
        assert_non_null(vals);
        scene(w, h, 3.0, 1 + w * h / 400, &r, vals);
        sw_image f = make_frame(SW_PIX_U16, w, h, 1, vals, &r, s == 2);
        for (int alg = 0; alg < 2; alg++)
            for (int k = 1; k <= 4; k += 3) {
                ref_params p = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                                k,
                                k == 1 ? 2 : 1,
                                2,
                                0.0,
                                2.5,
                                1.5,
                                1.0,
                                0.0,
                                NULL,
                                NULL};
                check_frame(&f, &p, "shapes");
            }
        free(f.data);
        free(vals);
    }
}

/* No valid pixel: nothing strong, nothing counted. */
static void test_all_masked(void **state)
{
    (void)state;
    const int w = 40, h = 30;
    trng r = trng_make(5);
    double *vals = malloc((size_t)w * h * sizeof(double));
    uint8_t *mask = calloc((size_t)w * h, 1), *strong = malloc((size_t)w * h);
    assert_true(vals && mask && strong);
    scene(w, h, 3.0, 4, &r, vals);
    sw_image f = make_frame(SW_PIX_U16, w, h, 0, vals, &r, 0);
    for (int alg = 0; alg < 2; alg++) {
        ref_params p = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                        3,
                        3,
                        2,
                        0.0,
                        6.0,
                        3.0,
                        1.0,
                        0.0,
                        NULL,
                        mask};
        int64_t nvalid = -1;
        assert_int_equal(run_cpu(cpu, &f, &p, strong, &nvalid), 0);
        assert_int_equal(nvalid, 0);
    }
    free(f.data);
    free(vals);
    free(mask);
    free(strong);
}

/* A constant frame has no dispersion: nothing strong, every pixel valid. */
static void test_constant(void **state)
{
    (void)state;
    const int w = 50, h = 33;
    double *vals = malloc((size_t)w * h * sizeof(double));
    uint8_t *strong = malloc((size_t)w * h);
    assert_true(vals && strong);
    trng r = trng_make(6);
    const double levels[3] = {0.0, 7.0, 3000.0};
    for (int l = 0; l < 3; l++) {
        for (size_t i = 0; i < (size_t)w * h; i++)
            vals[i] = levels[l];
        sw_image f = make_frame(SW_PIX_U32, w, h, 2, vals, &r, 0);
        for (int alg = 0; alg < 2; alg++) {
            ref_params p = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                            3,
                            3,
                            2,
                            0.0,
                            6.0,
                            3.0,
                            1.0,
                            0.0,
                            NULL,
                            NULL};
            int64_t nvalid = -1;
            assert_int_equal(run_cpu(cpu, &f, &p, strong, &nvalid), 0);
            assert_int_equal(nvalid, (int64_t)w * h);
        }
        free(f.data);
    }
    free(vals);
    free(strong);
}

/* One bright spot on flat Poisson background is found by both algorithms: its centre and its
 * brightest neighbours are strong, and no strong pixel lies far from it. */
static void test_spot_found(void **state)
{
    (void)state;
    const int w = 80, h = 60, cx = 41, cy = 29;
    double *vals = malloc((size_t)w * h * sizeof(double));
    uint8_t *strong = malloc((size_t)w * h);
    assert_true(vals && strong);
    trng r = trng_make(7);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double d2 = (double)((x - cx) * (x - cx) + (y - cy) * (y - cy));
            vals[(size_t)y * w + x] = poisson(&r, 2.0 + 400.0 * exp(-0.5 * d2 / (1.3 * 1.3)));
        }
    sw_image f = make_frame(SW_PIX_U16, w, h, 0, vals, &r, 0);
    for (int alg = 0; alg < 2; alg++) {
        ref_params p = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                        3,
                        3,
                        2,
                        0.0,
                        6.0,
                        3.0,
                        1.0,
                        0.0,
                        NULL,
                        NULL};
        int64_t nvalid = 0;
        int64_t n = run_cpu(cpu, &f, &p, strong, &nvalid);
        assert_true(n >= 5);
        assert_int_equal(strong[(size_t)cy * w + cx], 1);
        assert_int_equal(strong[(size_t)cy * w + cx + 1], 1);
        assert_int_equal(strong[(size_t)(cy - 1) * w + cx], 1);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++)
                if (strong[(size_t)y * w + x])
                    assert_true(abs(x - cx) <= 5 && abs(y - cy) <= 5);
        check_frame(&f, &p, "spot");
    }
    free(f.data);
    free(vals);
    free(strong);
}

/* DIALS counts masked (and overloaded) pixels as dispersed for the erosion, so a masked pixel in
 * the middle of a spot leaves its neighbours in the core: they stay strong. */
static void test_masked_do_not_erode(void **state)
{
    (void)state;
    const int w = 60, h = 50, cx = 30, cy = 25;
    double *vals = malloc((size_t)w * h * sizeof(double));
    uint8_t *strong = malloc((size_t)w * h), *mask = malloc((size_t)w * h);
    assert_true(vals && strong && mask);
    memset(mask, 1, (size_t)w * h);
    trng r = trng_make(8);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            double d2 = (double)((x - cx) * (x - cx) + (y - cy) * (y - cy));
            vals[(size_t)y * w + x] = poisson(&r, 2.0 + 2000.0 * exp(-0.5 * d2 / (2.5 * 2.5)));
        }
    mask[(size_t)cy * w + cx] = 0;             /* masked centre */
    vals[(size_t)(cy + 2) * w + cx] = 65535.0; /* overloaded pixel */
    sw_image f = make_frame(SW_PIX_U16, w, h, 0, vals, &r, 0);
    ref_params p = {SW_FIND_DISPERSION_EXTENDED, 3, 3, 2, 0.0, 6.0, 3.0, 1.0, 0.0, NULL, mask};
    int64_t nvalid = 0;
    run_cpu(cpu, &f, &p, strong, &nvalid);
    assert_int_equal(nvalid, (int64_t)w * h - 2);
    assert_int_equal(strong[(size_t)cy * w + cx], 0);
    assert_int_equal(strong[(size_t)(cy + 2) * w + cx], 0);
    for (int dy = -1; dy <= 1; dy++)
        for (int dx = -1; dx <= 1; dx++)
            if (dx || dy)
                assert_int_equal(strong[(size_t)(cy + dy) * w + cx + dx], 1);
    check_frame(&f, &p, "masked centre");
    free(f.data);
    free(vals);
    free(strong);
    free(mask);
}

/* The thread count does not change any decision. */
static void test_threads(void **state)
{
    (void)state;
    const int w = 517, h = 131;
    trng r = trng_make(10);
    double *vals = malloc((size_t)w * h * sizeof(double));
    uint8_t *a = malloc((size_t)w * h), *b = malloc((size_t)w * h);
    assert_true(vals && a && b);
    scene(w, h, 5.0, 40, &r, vals);
    sw_image f = make_frame(SW_PIX_F32, w, h, 7, vals, &r, 1);
    sw_context *one = sw_test_cpu_context(1), *many = sw_test_cpu_context(0);
    for (int alg = 0; alg < 2; alg++) {
        ref_params p = {alg ? SW_FIND_DISPERSION_EXTENDED : SW_FIND_DISPERSION,
                        3,
                        3,
                        2,
                        0.0,
                        6.0,
                        3.0,
                        1.0,
                        0.0,
                        NULL,
                        NULL};
        int64_t va = 0, vb = 0;
        int64_t na = run_cpu(one, &f, &p, a, &va), nb = run_cpu(many, &f, &p, b, &vb);
        assert_true(na > 0);
        assert_int_equal(na, nb);
        assert_int_equal(va, vb);
        assert_memory_equal(a, b, (size_t)w * h);
    }
    sw_context_destroy(one);
    sw_context_destroy(many);
    free(f.data);
    free(vals);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),       cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_all_masked), cmocka_unit_test(test_constant),
        cmocka_unit_test(test_spot_found), cmocka_unit_test(test_masked_do_not_erode),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
