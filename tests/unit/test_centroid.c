/*
 * The centroid stage on the CPU (src/centroid/centroid.c), checked against include/spotwave/
 * centroid.h and seed 000 (Mocci et al. 2020):
 *   - the seed's own correctness test: white 8-bit images over the 20 configurations of its
 *     Table 1 give every region's centre;
 *   - a direct double-precision reference (seed Algorithm 1, Eq. 6-7, with the header's
 *     conditioning order) on random u8 / u16 / f32 frames, odd geometries, masks and strides;
 *   - simulated Shack-Hartmann spots with known positions, without and with detector noise;
 *   - slopes (reference, layouts, mask, invalid lenslets, NULL result arrays), batches, threads;
 *   - bad input (each refused with a message, caller data untouched), empty and NaN lenslets,
 *     memory paths;
 *   - saturation: the reference flags a lenslet from its raw pixels (every comparison above
 *     checks the flags too); a spot clipped at 255 on one lenslet flags that lenslet only, kept
 *     or dropped; explicit levels, the window, f32 frames with and without a level, u16.
 */
#include "testutil.h"

#include "spotwave/rng.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static double uniform(uint64_t seed, uint64_t i)
{
    sw_rng4 r = sw_rng_draw(seed, SW_RNG_STREAM_TEST, i);
    return sw_rng_u01(r.v[0], r.v[1]);
}

static sw_centroid_plan *make_plan(sw_context *ctx, const sw_centroid_params *p)
{
    sw_centroid_plan *plan = NULL;
    sw_status st = sw_centroid_create(ctx, p, &plan);
    if (st != SW_OK)
        fail_msg("sw_centroid_create: %s (%s)", sw_status_string(st), sw_context_error(ctx));
    assert_non_null(plan);
    return plan;
}

static sw_centroid_result make_result(sw_centroid_plan *plan, int32_t frames)
{
    sw_centroid_result r;
    memset(&r, 0, sizeof r);
    sw_status st = sw_centroid_result_alloc(plan, frames, SW_MEM_HOST, &r);
    if (st != SW_OK)
        fail_msg("sw_centroid_result_alloc: %s", sw_context_error(cpu));
    assert_int_equal(r.frames, frames);
    assert_int_equal(r.lenslets, sw_centroid_plan_lenslets(plan));
    assert_int_equal(r.nslopes, sw_centroid_plan_slopes(plan));
    assert_int_equal(r.memory, SW_MEM_HOST);
    assert_non_null(r.x);
    assert_non_null(r.y);
    assert_non_null(r.intensity);
    assert_non_null(r.valid);
    assert_non_null(r.slopes);
    assert_non_null(r.saturated);
    return r;
}

static void run_ok(sw_centroid_plan *plan, const sw_image *img, sw_centroid_result *r)
{
    sw_status st = sw_centroid_run(plan, img, r);
    if (st != SW_OK)
        fail_msg("sw_centroid_run: %s (%s)", sw_status_string(st), sw_context_error(cpu));
}

/* Frames of a test: an image descriptor over a block we own (so that the stride and the start
 * address can be made awkward on purpose). */
typedef struct frames_buf {
    void *block;
    sw_image img;
} frames_buf;

/* w x h pixels of type t. aligned: sw_image_alloc (64-byte rows); otherwise the rows start one
 * pixel past an aligned address and the stride is 3 pixels longer than the row, so the 4-pixel
 * loads of the fast path never line up. */
static frames_buf make_frames(int32_t w, int32_t h, sw_pixel_type t, int aligned)
{
    frames_buf f;
    memset(&f, 0, sizeof f);
    if (aligned) {
        assert_int_equal(sw_image_alloc(cpu, w, h, t, &f.img), SW_OK);
        return f;
    }
    const size_t ps = sw_pixel_size(t);
    const size_t stride = (size_t)w * ps + 3 * ps;
    f.block = calloc(stride * (size_t)h + 64, 1);
    assert_non_null(f.block);
    assert_int_equal(sw_image_wrap((char *)f.block + ps, w, h, stride, t, SW_MEM_HOST, &f.img),
                     SW_OK);
    return f;
}

static void free_frames(frames_buf *f)
{
    if (f->block)
        free(f->block);
    else
        sw_image_free(&f->img);
    memset(f, 0, sizeof *f);
}

static void set_pixel(sw_image *img, int32_t x, int32_t y, double v)
{
    void *row = sw_image_row(img, y);
    switch (img->type) {
    case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)v; break;
    case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)v; break;
    case SW_PIX_U32: ((uint32_t *)row)[x] = (uint32_t)v; break;
    case SW_PIX_F32: ((float *)row)[x] = (float)v; break;
    }
}

/* Uniform values in [lo, hi): integers are floored (so u8 in [0, 256) covers 0..255). */
static void fill_uniform(sw_image *img, uint64_t seed, double lo, double hi)
{
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++) {
            double v = lo + (hi - lo) * uniform(seed, (uint64_t)y * img->width + x);
            set_pixel(img, x, y, img->type == SW_PIX_F32 ? v : floor(v));
        }
}

/* ------------------------------------------------------------------ the reference */

/* Steps 1-3 of centroid.h on pixel (x, y) of frame f: LUT, dark, flat, in double. */
static double reference_pre(const sw_centroid_params *p, const sw_image *img, int32_t f, int32_t x,
                            int32_t y)
{
    double v = sw_image_get(img, x, f * p->height + y);
    const size_t k = (size_t)y * (size_t)p->width + (size_t)x;
    if (p->lut)
        v = p->lut[(size_t)v];
    if (p->dark)
        v -= p->dark[k];
    if (p->flat)
        v *= p->flat[k];
    return v;
}

/* Seed 000 Algorithm 1 (moments Eq. 6 over the pixel region of Eq. 3, centroid Eq. 7) for every
 * lenslet of frame f, with centroid.h's conditioning in its order (LUT, dark, flat, threshold
 * SUBTRACT/ZERO with an ABSOLUTE or FRACTION-of-the-lenslet-maximum T, gamma, window), all in
 * double precision, written straight from the header. Moments about the windowed corner. */
static void reference_centroids(const sw_centroid_params *p, const sw_image *img, int32_t f,
                                double *cx, double *cy, double *m00, uint8_t *valid,
                                uint8_t *saturated)
{
    const sw_sh_geometry *g = &p->geometry;
    const int32_t w = p->window;
    /* centroid.h "Saturation": 0 = the type's full scale (none for f32), negative = none */
    const double level = p->saturation < 0.0     ? INFINITY
                         : p->saturation > 0.0   ? p->saturation
                         : p->type == SW_PIX_U8  ? 255.0
                         : p->type == SW_PIX_U16 ? 65535.0
                                                 : INFINITY;
    for (int32_t iy = 0; iy < g->ny; iy++)
        for (int32_t ix = 0; ix < g->nx; ix++) {
            const int32_t l = iy * g->nx + ix;
            int32_t xb, xe, yb, ye;
            sw_sh_region(g, ix, iy, &xb, &xe, &yb, &ye);
            xb += w;
            xe -= w;
            yb += w;
            ye -= w;
            double vmax = -INFINITY;
            int sat = 0;
            for (int32_t y = yb; y < ye; y++)
                for (int32_t x = xb; x < xe; x++) {
                    vmax = fmax(vmax, reference_pre(p, img, f, x, y));
                    sat |= isfinite(level) && sw_image_get(img, x, f * p->height + y) >= level;
                }
            const double t =
                p->threshold_kind == SW_THRESHOLD_FRACTION ? p->threshold * vmax : p->threshold;
            double s0 = 0, s1 = 0, s2 = 0;
            for (int32_t y = yb; y < ye; y++)
                for (int32_t x = xb; x < xe; x++) {
                    double v = reference_pre(p, img, f, x, y);
                    if (p->threshold_mode == SW_THRESHOLD_SUBTRACT)
                        v = fmax(v - t, 0.0);
                    else if (p->threshold_mode == SW_THRESHOLD_ZERO)
                        v = v >= t ? v : 0.0;
                    if (p->gamma != 1.0)
                        v = pow(fmax(v, 0.0), p->gamma);
                    s0 += v;
                    s1 += (x - xb) * v;
                    s2 += (y - yb) * v;
                }
            const int ok = sw_sh_is_valid(g, l) && s0 > 0 && isfinite(s0) && isfinite(s1) &&
                           isfinite(s2) && !(sat && p->drop_saturated);
            cx[l] = ok ? xb + s1 / s0 : NAN;
            cy[l] = ok ? yb + s2 / s0 : NAN;
            m00[l] = s0;
            valid[l] = (uint8_t)ok;
            saturated[l] = (uint8_t)sat;
        }
}

/*
 * Compares every frame of r with the reference. exact: the moments are integers summed exactly
 * (centroid.h), so the result is the double reference rounded once to float: |x - ref| below
 * 1e-9 px after that rounding, and m00 likewise. Otherwise within tol_px and tol_rel.
 */
static void check_against_reference(const sw_centroid_params *p, const sw_image *img,
                                    int32_t frames, const sw_centroid_result *r, int exact,
                                    double tol_px, double tol_rel, const char *what)
{
    const int32_t nl = p->geometry.nx * p->geometry.ny;
    double *cx = malloc(sizeof(double) * (size_t)nl), *cy = malloc(sizeof(double) * (size_t)nl);
    double *m00 = malloc(sizeof(double) * (size_t)nl);
    uint8_t *valid = malloc((size_t)nl), *sat = malloc((size_t)nl);
    assert_true(cx && cy && m00 && valid && sat);
    int nvalid = 0, nmask = 0;
    for (int32_t f = 0; f < frames; f++) {
        reference_centroids(p, img, f, cx, cy, m00, valid, sat);
        for (int32_t l = 0; l < nl; l++) {
            const size_t i = (size_t)f * (size_t)nl + (size_t)l;
            nmask += sw_sh_is_valid(&p->geometry, l);
            if (r->saturated && r->saturated[i] != sat[l])
                fail_msg("%s: frame %d lenslet %d: saturated %d, reference %d", what, f, l,
                         r->saturated[i], sat[l]);
            if (r->valid[i] != valid[l])
                fail_msg("%s: frame %d lenslet %d: valid %d, reference %d", what, f, l, r->valid[i],
                         valid[l]);
            if (!valid[l]) {
                assert_true(isnan(r->x[i]) && isnan(r->y[i]));
                continue;
            }
            nvalid++;
            if (exact) {
                if (!(fabs(r->x[i] - (double)(float)cx[l]) <= 1e-9 &&
                      fabs(r->y[i] - (double)(float)cy[l]) <= 1e-9 &&
                      fabs(r->intensity[i] - (double)(float)m00[l]) <= 1e-9))
                    fail_msg("%s: frame %d lenslet %d: (%.9g, %.9g, %.9g), exact reference "
                             "(%.12g, %.12g, %.12g)",
                             what, f, l, r->x[i], r->y[i], r->intensity[i], cx[l], cy[l], m00[l]);
            } else {
                if (!(fabs(r->x[i] - cx[l]) <= tol_px && fabs(r->y[i] - cy[l]) <= tol_px &&
                      fabs(r->intensity[i] - m00[l]) <= tol_rel * fabs(m00[l])))
                    fail_msg("%s: frame %d lenslet %d: (%.9g, %.9g, %.9g), reference "
                             "(%.9g, %.9g, %.9g)",
                             what, f, l, r->x[i], r->y[i], r->intensity[i], cx[l], cy[l], m00[l]);
            }
        }
    }
    /* A comparison of nothing would prove nothing. */
    if (!(nvalid > nmask / 2))
        fail_msg("%s: only %d of %d lenslets of the mask valid", what, nvalid, nmask);
    free(cx);
    free(cy);
    free(m00);
    free(valid);
    free(sat);
}

/* ------------------------------------------------------------------ defaults, paths */

static void test_defaults_and_paths(void **state)
{
    (void)state;
    sw_centroid_params p;
    sw_centroid_params_default(&p);
    assert_int_equal(p.width, 160);
    assert_int_equal(p.height, 160);
    assert_int_equal(p.type, SW_PIX_U8);
    assert_int_equal(p.max_frames, 1);
    assert_int_equal(p.path, SW_CENTROID_AUTO);
    assert_null(p.dark);
    assert_null(p.flat);
    assert_null(p.lut);
    assert_int_equal(p.threshold_mode, SW_THRESHOLD_NONE);
    assert_true(p.gamma == 1.0);
    assert_int_equal(p.window, 0);
    assert_int_equal(p.slope_layout, SW_SLOPES_BLOCKS);
    assert_true(p.saturation == 0.0); /* the type's full scale */
    assert_int_equal(p.drop_saturated, 0);
    assert_int_equal(p.geometry.nx, 10);
    assert_int_equal(p.geometry.ny, 10);
    assert_true(p.geometry.pitch_px == 16.0);

    /* AUTO resolves to HOST on a CPU context; HOST is taken as asked. */
    sw_centroid_plan *plan = make_plan(cpu, &p);
    assert_int_equal(sw_centroid_plan_path(plan), SW_CENTROID_HOST);
    assert_int_equal(sw_centroid_plan_lenslets(plan), 100);
    assert_int_equal(sw_centroid_plan_slopes(plan), 100);
    sw_centroid_destroy(plan);
    p.path = SW_CENTROID_HOST;
    plan = make_plan(cpu, &p);
    assert_int_equal(sw_centroid_plan_path(plan), SW_CENTROID_HOST);
    /* The CPU path measures no kernel. */
    assert_true(sw_centroid_kernel_us(plan) < 0);
    sw_centroid_destroy(plan);
    sw_centroid_destroy(NULL);

    /* The GPU paths cannot run on a CPU context: refused at create, with a message. */
    const sw_centroid_path gpu_paths[3] = {SW_CENTROID_DEVICE, SW_CENTROID_COPY,
                                           SW_CENTROID_MAPPED};
    for (int i = 0; i < 3; i++) {
        p.path = gpu_paths[i];
        plan = NULL;
        sw_status st = sw_centroid_create(cpu, &p, &plan);
        if (st == SW_OK)
            fail_msg("path %s accepted on a CPU context", sw_centroid_path_string(gpu_paths[i]));
        assert_null(plan);
        assert_true(strlen(sw_context_error(cpu)) > 0);
    }

    /* Names and the parser. */
    const char *names[5] = {"auto", "host", "device", "copy", "mapped"};
    const sw_centroid_path paths[5] = {SW_CENTROID_AUTO, SW_CENTROID_HOST, SW_CENTROID_DEVICE,
                                       SW_CENTROID_COPY, SW_CENTROID_MAPPED};
    for (int i = 0; i < 5; i++) {
        assert_string_equal(sw_centroid_path_string(paths[i]), names[i]);
        sw_centroid_path got = (sw_centroid_path)-1;
        assert_int_equal(sw_centroid_path_parse(names[i], &got), SW_OK);
        assert_int_equal(got, paths[i]);
    }
    sw_centroid_path got = SW_CENTROID_HOST;
    assert_int_equal(sw_centroid_path_parse("gpu", &got), SW_EINVAL);
    assert_int_equal(got, SW_CENTROID_HOST);
    assert_int_equal(sw_centroid_path_parse(NULL, &got), SW_EINVAL);
    assert_int_equal(sw_centroid_path_parse("host", NULL), SW_EINVAL);
}

/* ------------------------------------------------------------------ seed 000's white images */

/*
 * Seed 000, section 5: "A pool of 8-bit white images (I = 255 for all pixels) is fed to both the
 * proposed implementation ... and the sequential implementation of Alg. 1 to test the
 * correctness". A uniform region's centre of gravity is its middle, x = xb + (xe - xb - 1) / 2
 * (pixel centres xb .. xe - 1), exactly (a half-integer; the exact integer sums give it to the
 * bit). All 20 configurations of Table 1: w_P in {100, 200, 500, 700, 1000}, d in {3.8, 11, 20,
 * 29}, w_L = floor(w_P / d) (Eq. 1 with rho / d_L = w_P / d), origin 0.
 */
static void test_white_table1(void **state)
{
    (void)state;
    static const int32_t wp[5] = {100, 200, 500, 700, 1000};
    static const double dd[4] = {3.8, 11.0, 20.0, 29.0};
    /* w_L^2 column of the seed's Table 1. */
    static const int32_t table_wl2[5][4] = {{676, 81, 25, 9},
                                            {2704, 324, 100, 36},
                                            {17161, 2025, 625, 289},
                                            {33856, 3969, 1225, 576},
                                            {69169, 8100, 2500, 1156}};
    for (int a = 0; a < 5; a++) {
        sw_image img;
        assert_int_equal(sw_image_alloc(cpu, wp[a], wp[a], SW_PIX_U8, &img), SW_OK);
        for (int32_t y = 0; y < img.height; y++)
            memset(sw_image_row(&img, y), 255, (size_t)img.width);
        for (int b = 0; b < 4; b++) {
            sw_centroid_params p;
            sw_centroid_params_default(&p);
            p.geometry.x0 = p.geometry.y0 = 0.0;
            p.geometry.pitch_px = dd[b];
            p.geometry.nx = p.geometry.ny = (int32_t)floor(wp[a] / dd[b]);
            assert_int_equal(p.geometry.nx * p.geometry.ny, table_wl2[a][b]);
            p.width = p.height = wp[a];
            p.type = SW_PIX_U8;
            sw_centroid_plan *plan = make_plan(cpu, &p);
            sw_centroid_result r = make_result(plan, 1);
            run_ok(plan, &img, &r);
            for (int32_t iy = 0; iy < p.geometry.ny; iy++)
                for (int32_t ix = 0; ix < p.geometry.nx; ix++) {
                    const int32_t l = iy * p.geometry.nx + ix;
                    int32_t xb, xe, yb, ye;
                    sw_sh_region(&p.geometry, ix, iy, &xb, &xe, &yb, &ye);
                    const double mx = xb + (xe - xb - 1) / 2.0, my = yb + (ye - yb - 1) / 2.0;
                    const double m00 = 255.0 * (xe - xb) * (ye - yb);
                    if (!(r.valid[l] == 1 && r.x[l] == mx && r.y[l] == my && r.intensity[l] == m00))
                        fail_msg("w_P %d d %g lenslet (%d, %d): valid %d (%.9g, %.9g) m00 %.9g, "
                                 "expected (%.9g, %.9g) m00 %.9g",
                                 wp[a], dd[b], ix, iy, r.valid[l], r.x[l], r.y[l], r.intensity[l],
                                 mx, my, m00);
                }
            sw_centroid_result_free(&r);
            sw_centroid_destroy(plan);
        }
        sw_image_free(&img);
    }
}

/* ------------------------------------------------------------------ direct reference */

typedef struct ref_case {
    const char *name;
    sw_pixel_type type;
    double x0, y0, pitch;
    int32_t nx, ny;
    int mask;      /* 1: about a fifth of the lenslets masked out */
    int aligned;   /* 1: 64-byte rows; 0: misaligned start and stride */
    double lo, hi; /* pixel values uniform in [lo, hi) */
    int lut, dark, flat;
    sw_threshold_mode mode;
    sw_threshold_kind kind;
    double threshold, gamma;
    int32_t window;
} ref_case;

static const ref_case ref_cases[] = {
    /* exact integer paths (no conditioning) */
    {"u8 exact", SW_PIX_U8, 2.6, 4.15, 7.37, 9, 6, 0, 1, 0, 256, 0, 0, 0, SW_THRESHOLD_NONE,
     SW_THRESHOLD_ABSOLUTE, 0, 1, 0},
    {"u8 exact, misaligned, masked", SW_PIX_U8, 0.4, 1.9, 4.21, 17, 11, 1, 0, 0, 256, 0, 0, 0,
     SW_THRESHOLD_NONE, SW_THRESHOLD_ABSOLUTE, 0, 1, 0},
    {"u16 exact, masked", SW_PIX_U16, 0.3, 3.7, 12.9, 5, 7, 1, 0, 0, 65536, 0, 0, 0,
     SW_THRESHOLD_NONE, SW_THRESHOLD_ABSOLUTE, 0, 1, 0},
    /* the largest regions (128 px) full of large u16 values: the exact sums must not overflow */
    {"u16 exact, pitch 128", SW_PIX_U16, 1.0, 0.0, 128.0, 2, 2, 0, 1, 60000, 65536, 0, 0, 0,
     SW_THRESHOLD_NONE, SW_THRESHOLD_ABSOLUTE, 0, 1, 0},
    /* conditioned: every step of centroid.h, in combinations */
    {"u8 lut dark flat subtract-abs gamma window", SW_PIX_U8, 3.2, 0.7, 9.6, 8, 5, 1, 0, 0, 256, 1,
     1, 1, SW_THRESHOLD_SUBTRACT, SW_THRESHOLD_ABSOLUTE, 150.3, 0.8, 1},
    {"u8 zero-abs window 3", SW_PIX_U8, 0.0, 2.5, 13.3, 6, 4, 0, 1, 0, 256, 0, 0, 0,
     SW_THRESHOLD_ZERO, SW_THRESHOLD_ABSOLUTE, 99.7, 1.0, 3},
    {"u16 lut zero-fraction gamma window 2", SW_PIX_U16, 1.7, 2.2, 15.25, 4, 6, 1, 1, 0, 65536, 1,
     0, 0, SW_THRESHOLD_ZERO, SW_THRESHOLD_FRACTION, 0.4321, 1.7, 2},
    {"u16 dark flat subtract-fraction", SW_PIX_U16, 0.9, 0.1, 10.45, 7, 7, 0, 0, 0, 65536, 0, 1, 1,
     SW_THRESHOLD_SUBTRACT, SW_THRESHOLD_FRACTION, 0.6173, 1.0, 0},
    {"f32 dark flat subtract-fraction gamma", SW_PIX_F32, 0.5, 3.3, 5.5, 11, 8, 1, 0, 0, 1000, 0, 1,
     1, SW_THRESHOLD_SUBTRACT, SW_THRESHOLD_FRACTION, 0.3141, 0.5, 0},
    {"f32 plain, large regions", SW_PIX_F32, 2.25, 1.75, 61.3, 3, 2, 0, 1, 0, 1000, 0, 0, 0,
     SW_THRESHOLD_NONE, SW_THRESHOLD_ABSOLUTE, 0, 1, 0},
    {"f32 gamma window", SW_PIX_F32, 0.0, 0.0, 8.8, 6, 9, 0, 0, 0, 1000, 0, 0, 0, SW_THRESHOLD_NONE,
     SW_THRESHOLD_ABSOLUTE, 0, 2.3, 1},
};

/* Builds the parameters, tables and two stacked frames of a case (tables freed by the caller). */
static void build_case(const ref_case *c, uint64_t seed, sw_centroid_params *p, float **lut,
                       float **dark, float **flat, uint8_t **mask, frames_buf *fb)
{
    sw_centroid_params_default(p);
    p->geometry.x0 = c->x0;
    p->geometry.y0 = c->y0;
    p->geometry.pitch_px = c->pitch;
    p->geometry.nx = c->nx;
    p->geometry.ny = c->ny;
    /* The frame is a little larger than the grid (floor(x0 + d n) columns are used). */
    p->width = (int32_t)floor(c->x0 + c->pitch * c->nx) + 3;
    p->height = (int32_t)floor(c->y0 + c->pitch * c->ny) + 2;
    p->type = c->type;
    p->max_frames = 2;
    p->threshold_mode = c->mode;
    p->threshold_kind = c->kind;
    p->threshold = c->threshold;
    p->gamma = c->gamma;
    p->window = c->window;
    *lut = *dark = *flat = NULL;
    *mask = NULL;
    const size_t npix = (size_t)p->width * (size_t)p->height;
    if (c->lut) {
        const size_t n = c->type == SW_PIX_U8 ? 256 : 65536;
        *lut = malloc(n * sizeof(float));
        assert_non_null(*lut);
        for (size_t i = 0; i < n; i++)
            (*lut)[i] = c->type == SW_PIX_U8
                            ? (float)(1.5 * (double)i + 10.0 * sin((double)i / 5.3) + 5.0)
                            : (float)(100.0 * sqrt((double)i) + 0.01 * (double)i);
        p->lut = *lut;
    }
    if (c->dark) {
        *dark = malloc(npix * sizeof(float));
        assert_non_null(*dark);
        const double scale = c->type == SW_PIX_U16 ? 2000.0 : 30.0;
        for (size_t i = 0; i < npix; i++)
            (*dark)[i] = (float)(scale * uniform(seed + 1, i));
        p->dark = *dark;
    }
    if (c->flat) {
        *flat = malloc(npix * sizeof(float));
        assert_non_null(*flat);
        for (size_t i = 0; i < npix; i++)
            (*flat)[i] = (float)(0.8 + 0.4 * uniform(seed + 2, i));
        p->flat = *flat;
    }
    if (c->mask) {
        const size_t nl = (size_t)c->nx * (size_t)c->ny;
        *mask = malloc(nl);
        assert_non_null(*mask);
        for (size_t l = 0; l < nl; l++)
            (*mask)[l] = uniform(seed + 3, l) < 0.2 ? 0 : 1;
        (*mask)[0] = 0; /* the first lenslet out, the last one in */
        (*mask)[nl - 1] = 1;
        p->geometry.valid = *mask;
    }
    *fb = make_frames(p->width, 2 * p->height, c->type, c->aligned);
    fill_uniform(&fb->img, seed, c->lo, c->hi);
}

static void test_reference(void **state)
{
    (void)state;
    const int ncases = (int)(sizeof ref_cases / sizeof ref_cases[0]);
    for (int i = 0; i < ncases; i++) {
        const ref_case *c = &ref_cases[i];
        sw_centroid_params p;
        float *lut, *dark, *flat;
        uint8_t *mask;
        frames_buf fb;
        build_case(c, 1000 + (uint64_t)i * 10, &p, &lut, &dark, &flat, &mask, &fb);
        sw_centroid_plan *plan = make_plan(cpu, &p);
        /* The plan copied the tables (centroid.h): scribbling on ours must not matter. */
        sw_centroid_params kept = p;
        float *lut2 = NULL, *dark2 = NULL, *flat2 = NULL;
        uint8_t *mask2 = NULL;
        const size_t npix = (size_t)p.width * (size_t)p.height;
        const size_t nl = (size_t)c->nx * (size_t)c->ny;
        if (lut) {
            const size_t n = c->type == SW_PIX_U8 ? 256 : 65536;
            lut2 = malloc(n * sizeof(float));
            memcpy(lut2, lut, n * sizeof(float));
            memset(lut, 0xff, n * sizeof(float));
            kept.lut = lut2;
        }
        if (dark) {
            dark2 = malloc(npix * sizeof(float));
            memcpy(dark2, dark, npix * sizeof(float));
            memset(dark, 0xff, npix * sizeof(float));
            kept.dark = dark2;
        }
        if (flat) {
            flat2 = malloc(npix * sizeof(float));
            memcpy(flat2, flat, npix * sizeof(float));
            memset(flat, 0xff, npix * sizeof(float));
            kept.flat = flat2;
        }
        if (mask) {
            mask2 = malloc(nl);
            memcpy(mask2, mask, nl);
            memset(mask, 1, nl);
            kept.geometry.valid = mask2;
        }
        const int exact = c->type != SW_PIX_F32 && !c->lut && !c->dark && !c->flat &&
                          c->mode == SW_THRESHOLD_NONE && c->gamma == 1.0;
        sw_centroid_result r = make_result(plan, 2);
        run_ok(plan, &fb.img, &r);
        check_against_reference(&kept, &fb.img, 2, &r, exact, 1e-4, 1e-5, c->name);
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
        free_frames(&fb);
        free(lut);
        free(dark);
        free(flat);
        free(mask);
        free(lut2);
        free(dark2);
        free(flat2);
        free(mask2);
    }
}

/* One thread and all threads give the same centroids: bit for bit on the exact integer path,
 * and to rounding (1e-6 px) with conditioning, whose sums are in floating point. */
static void test_threads(void **state)
{
    (void)state;
    sw_context *one = sw_test_cpu_context(1);
    assert_int_equal(sw_context_threads(one), 1);
    const int picks[2] = {1, 7}; /* "u8 exact, misaligned, masked", "u16 dark flat ..." */
    for (int k = 0; k < 2; k++) {
        const ref_case *c = &ref_cases[picks[k]];
        sw_centroid_params p;
        float *lut, *dark, *flat;
        uint8_t *mask;
        frames_buf fb;
        build_case(c, 77 + (uint64_t)k, &p, &lut, &dark, &flat, &mask, &fb);
        sw_centroid_plan *pa = make_plan(cpu, &p);
        sw_centroid_plan *pb = make_plan(one, &p);
        sw_centroid_result ra = make_result(pa, 2), rb = make_result(pb, 2);
        run_ok(pa, &fb.img, &ra);
        if (sw_centroid_run(pb, &fb.img, &rb) != SW_OK)
            fail_msg("one thread: %s", sw_context_error(one));
        const size_t n = 2 * (size_t)ra.lenslets;
        assert_memory_equal(ra.valid, rb.valid, n);
        if (k == 0) {
            assert_memory_equal(ra.x, rb.x, n * sizeof(float));
            assert_memory_equal(ra.y, rb.y, n * sizeof(float));
            assert_memory_equal(ra.intensity, rb.intensity, n * sizeof(float));
            assert_memory_equal(ra.slopes, rb.slopes, 4 * (size_t)ra.nslopes * sizeof(float));
        } else {
            for (size_t i = 0; i < n; i++) {
                if (!ra.valid[i])
                    continue;
                assert_near(ra.x[i], rb.x[i], 1e-6);
                assert_near(ra.y[i], rb.y[i], 1e-6);
                assert_near(ra.intensity[i], rb.intensity[i], 1e-6 * fabs(ra.intensity[i]));
            }
        }
        sw_centroid_result_free(&ra);
        sw_centroid_result_free(&rb);
        sw_centroid_destroy(pa);
        sw_centroid_destroy(pb);
        free_frames(&fb);
        free(lut);
        free(dark);
        free(flat);
        free(mask);
    }
    sw_context_destroy(one);
}

/* ------------------------------------------------------------------ simulated spots */

/* A 12 x 10 grid of 20.37 px lenslets from (4.6, 3.3), Gaussian spots of sigma 1.6 px, and a
 * smooth aberration (defocus, astigmatism, coma, trefoil) that moves the spots by up to ~2 px:
 * every spot stays more than 4.5 sigma inside its own region, so what its region holds is its
 * whole spot (missing mass < 1e-5) and nothing of its neighbours'. */
static sw_shsim *make_sim(double flux, sw_shsim_params *sp)
{
    sw_shsim_params_default(sp);
    sp->geom.nx = 12;
    sp->geom.ny = 10;
    sp->geom.pitch_px = 20.37;
    sp->geom.x0 = 4.6;
    sp->geom.y0 = 3.3;
    sp->geom.pixel_um = 5.5;
    sp->geom.focal_mm = 3.5;
    sp->width = 256;
    sp->height = 212;
    sp->model = SW_SH_GEOMETRIC;
    sp->spot = SW_SH_SPOT_GAUSSIAN;
    sp->sigma_px = 1.6;
    sp->flux_e = flux;
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, sp, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    /* OSA j: 3 astigmatism, 4 defocus, 5 astigmatism, 6 trefoil, 7 coma, 8 coma. */
    const double coef[9] = {0, 0, 0, 0.06, 0.12, -0.05, 0.03, 0.04, -0.03};
    const double radius = 0.5 * 12 * sw_sh_lenslet_um(&sp->geom);
    assert_int_equal(sw_shsim_add_zernike(sim, coef, 9, radius), SW_OK);
    return sim;
}

static void check_displacements(const sw_sh_truth *t)
{
    double dmax = 0;
    for (int32_t l = 0; l < t->nx * t->ny; l++) {
        assert_true(isfinite(t->x_px[l]) && isfinite(t->y_px[l]));
        dmax = fmax(dmax, fabs(t->x_px[l] - t->ref_x_px[l]));
        dmax = fmax(dmax, fabs(t->y_px[l] - t->ref_y_px[l]));
    }
    /* Aberrated enough to matter, small enough to keep the spots inside (see make_sim). */
    assert_true(dmax > 0.5);
    assert_true(dmax < 2.5);
}

/* Noise-free spots: the centroids are the true spot positions (sim_sh.h: reference + F <grad W>,
 * the centre of the pixel-integrated Gaussian), and the slopes against the default reference are
 * the true displacements. */
static void test_simulated_spots(void **state)
{
    (void)state;
    sw_shsim_params sp;
    sw_shsim *sim = make_sim(5e4, &sp);
    sw_sh_truth t;
    assert_int_equal(sw_shsim_truth(sim, &t), SW_OK);
    check_displacements(&t);
    sw_image e;
    assert_int_equal(sw_image_alloc(cpu, sp.width, sp.height, SW_PIX_F32, &e), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &e, 0), SW_OK);

    sw_centroid_params p;
    sw_centroid_params_default(&p);
    p.geometry = sp.geom;
    p.width = sp.width;
    p.height = sp.height;
    p.type = SW_PIX_F32;
    sw_centroid_plan *plan = make_plan(cpu, &p);
    sw_centroid_result r = make_result(plan, 1);
    run_ok(plan, &e, &r);
    const int32_t nl = t.nx * t.ny;
    assert_int_equal(r.nslopes, nl);
    double worst = 0;
    for (int32_t l = 0; l < nl; l++) {
        assert_int_equal(r.valid[l], 1);
        worst = fmax(worst, fmax(fabs(r.x[l] - t.x_px[l]), fabs(r.y[l] - t.y_px[l])));
        assert_near(r.slopes[l], t.x_px[l] - t.ref_x_px[l], 0.005);
        assert_near(r.slopes[nl + l], t.y_px[l] - t.ref_y_px[l], 0.005);
        /* intensity: the whole spot, flux_e electrons */
        assert_near(r.intensity[l], sp.flux_e, 1e-3 * sp.flux_e);
    }
    if (!(worst <= 0.005))
        fail_msg("largest centroid error %.6f px (limit 0.005)", worst);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
    sw_image_free(&e);
    sw_sh_truth_free(&t);
    sw_shsim_destroy(sim);
}

/*
 * Detector noise (sim.h: shot noise, sky, read noise, bias, 16-bit ADC) with a SUBTRACT threshold
 * at bias + sky + 5 sigma of the background. The expected CoG noise is not derived on paper but
 * measured by Monte Carlo: K noise seeds of the same spots; the spread of each lenslet's centroid
 * across seeds (pooled over lenslets and both axes) is the noise the estimator has. If the
 * centroids are unbiased, the RMS error against the truth equals that spread (up to sampling:
 * K = 10 seeds x 120 lenslets x 2 axes); a threshold that leaks background pulls every spot
 * towards its region's centre and the error grows beyond the spread. Checks: the truth error RMS
 * within a factor 1.5 of the spread, the bias (per-lenslet mean over seeds minus the truth) below
 * the spread, and the spread itself no smaller than the photon-noise limit of a Gaussian spot
 * sigma / sqrt(N_e) (a sanity bound: the noise is there and the estimate is not fooling us).
 */
static void test_simulated_noise(void **state)
{
    (void)state;
    sw_shsim_params sp;
    const double flux = 2e4;
    sw_shsim *sim = make_sim(flux, &sp);
    sw_sh_truth t;
    assert_int_equal(sw_shsim_truth(sim, &t), SW_OK);
    check_displacements(&t);
    sw_image e, adu;
    assert_int_equal(sw_image_alloc(cpu, sp.width, sp.height, SW_PIX_F32, &e), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, sp.width, sp.height, SW_PIX_U16, &adu), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &e, 0), SW_OK);

    sw_detector d;
    sw_detector_default(&d);
    d.sky_e = 20.0;
    d.dark_e = 0.0;
    d.shot_noise = 1;
    d.read_noise_e = 5.0;
    d.gain_e_per_adu = 1.0;
    d.bias_adu = 100.0;
    d.full_well_e = 0.0;
    d.out_type = SW_PIX_U16;

    sw_centroid_params p;
    sw_centroid_params_default(&p);
    p.geometry = sp.geom;
    p.width = sp.width;
    p.height = sp.height;
    p.type = SW_PIX_U16;
    p.threshold_mode = SW_THRESHOLD_SUBTRACT;
    p.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    const double bg_sigma = sqrt(d.sky_e + d.read_noise_e * d.read_noise_e);
    p.threshold = d.bias_adu + d.sky_e + 5.0 * bg_sigma;
    sw_centroid_plan *plan = make_plan(cpu, &p);
    sw_centroid_result r = make_result(plan, 1);

    enum { K = 10 };
    const int32_t nl = t.nx * t.ny;
    double *xs = malloc(sizeof(double) * (size_t)nl * K), *ys = malloc(sizeof(double) * nl * K);
    assert_true(xs && ys);
    for (int k = 0; k < K; k++) {
        d.seed = 9000 + (uint64_t)k;
        assert_int_equal(sw_detector_apply(cpu, &d, &e, &adu), SW_OK);
        run_ok(plan, &adu, &r);
        for (int32_t l = 0; l < nl; l++) {
            assert_int_equal(r.valid[l], 1);
            xs[(size_t)l * K + k] = r.x[l];
            ys[(size_t)l * K + k] = r.y[l];
        }
    }
    double var = 0, err2 = 0, bias2 = 0;
    for (int32_t l = 0; l < nl; l++)
        for (int axis = 0; axis < 2; axis++) {
            const double *v = (axis ? ys : xs) + (size_t)l * K;
            const double truth = axis ? t.y_px[l] : t.x_px[l];
            double mean = 0;
            for (int k = 0; k < K; k++)
                mean += v[k] / K;
            double s2 = 0;
            for (int k = 0; k < K; k++) {
                s2 += (v[k] - mean) * (v[k] - mean) / (K - 1);
                err2 += (v[k] - truth) * (v[k] - truth);
            }
            var += s2;
            bias2 += (mean - truth) * (mean - truth);
        }
    const double spread = sqrt(var / (2.0 * nl));
    const double err = sqrt(err2 / (2.0 * nl * K));
    const double bias = sqrt(bias2 / (2.0 * nl));
    const double photon_limit = sp.sigma_px / sqrt(flux);
    print_message("noise: spread %.5f px, truth error %.5f px, bias %.5f px, photon limit %.5f\n",
                  spread, err, bias, photon_limit);
    assert_true(spread >= 0.8 * photon_limit);
    assert_true(spread < 0.1); /* still a measurement */
    if (!(err <= 1.5 * spread && err >= spread / 1.5))
        fail_msg("truth error %.5f px is not within a factor 1.5 of the noise spread %.5f px", err,
                 spread);
    if (!(bias <= spread))
        fail_msg("bias %.5f px exceeds the noise spread %.5f px", bias, spread);
    free(xs);
    free(ys);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
    sw_image_free(&e);
    sw_image_free(&adu);
    sw_sh_truth_free(&t);
    sw_shsim_destroy(sim);
}

/* ------------------------------------------------------------------ slopes */

/* An 8 x 6 grid of 11.3 px lenslets with a mask, random u16 frames, and one lenslet of the mask
 * left dark (all zeros: invalid in the frame). */
#define SL_NX   8
#define SL_NY   6
#define SL_DARK 13 /* flat index of the dark lenslet (in the mask) */

static void slopes_setup(sw_centroid_params *p, uint8_t *mask, frames_buf *fb)
{
    sw_centroid_params_default(p);
    p->geometry.nx = SL_NX;
    p->geometry.ny = SL_NY;
    p->geometry.pitch_px = 11.3;
    p->geometry.x0 = 1.4;
    p->geometry.y0 = 2.7;
    p->width = 95;
    p->height = 72;
    p->type = SW_PIX_U16;
    for (int l = 0; l < SL_NX * SL_NY; l++)
        mask[l] = (l % 5 == 2 || l == 40) ? 0 : 1;
    assert_int_equal(mask[SL_DARK], 1);
    p->geometry.valid = mask;
    *fb = make_frames(p->width, p->height, SW_PIX_U16, 1);
    fill_uniform(&fb->img, 4242, 1000, 60000);
    int32_t xb, xe, yb, ye;
    sw_sh_region(&p->geometry, SL_DARK % SL_NX, SL_DARK / SL_NX, &xb, &xe, &yb, &ye);
    for (int32_t y = yb; y < ye; y++)
        for (int32_t x = xb; x < xe; x++)
            set_pixel(&fb->img, x, y, 0);
}

/* Slopes of a BLOCKS result against reference positions rx, ry (NULL: sw_sh_reference). */
static void check_slopes(const sw_centroid_plan *plan, const sw_centroid_params *p,
                         const sw_centroid_result *r, const double *rx, const double *ry)
{
    const int32_t ns = sw_centroid_plan_slopes(plan);
    for (int32_t k = 0; k < ns; k++) {
        const int32_t l = sw_centroid_plan_slope_lenslet(plan, k);
        double ex, ey;
        if (rx) {
            ex = rx[l];
            ey = ry[l];
        } else {
            sw_sh_reference(&p->geometry, l % p->geometry.nx, l / p->geometry.nx, &ex, &ey);
        }
        if (r->valid[l]) {
            /* the slope is rounded once from double, the centroid too: within two float ulps */
            assert_near(r->slopes[k], (double)r->x[l] - ex, 1e-4);
            assert_near(r->slopes[ns + k], (double)r->y[l] - ey, 1e-4);
        } else {
            assert_true(r->slopes[k] == 0.0f);
            assert_true(r->slopes[ns + k] == 0.0f);
        }
    }
}

static void test_slopes(void **state)
{
    (void)state;
    uint8_t mask[SL_NX * SL_NY];
    sw_centroid_params p;
    frames_buf fb;
    slopes_setup(&p, mask, &fb);
    const int32_t nl = SL_NX * SL_NY;
    sw_centroid_plan *plan = make_plan(cpu, &p);

    /* The slope list: the mask's lenslets, in increasing order. */
    int32_t nmask = 0;
    for (int32_t l = 0; l < nl; l++)
        nmask += mask[l] != 0;
    assert_int_equal(sw_centroid_plan_lenslets(plan), nl);
    assert_int_equal(sw_centroid_plan_slopes(plan), nmask);
    assert_true(nmask < nl);
    int32_t prev = -1;
    for (int32_t k = 0; k < nmask; k++) {
        const int32_t l = sw_centroid_plan_slope_lenslet(plan, k);
        assert_true(l > prev && l < nl);
        assert_int_equal(mask[l], 1);
        prev = l;
    }

    sw_centroid_result r = make_result(plan, 1);
    run_ok(plan, &fb.img, &r);
    for (int32_t l = 0; l < nl; l++) {
        const int expect = mask[l] && l != SL_DARK;
        assert_int_equal(r.valid[l], expect);
        if (!expect)
            assert_true(isnan(r.x[l]) && isnan(r.y[l]));
    }
    /* The dark lenslet: nothing to divide, no crash, zero intensity, zero slopes. */
    assert_true(r.intensity[SL_DARK] == 0.0f);
    check_slopes(plan, &p, &r, NULL, NULL);

    /* A custom reference; NaN where the mask is 0 is allowed (never used). */
    double rx[SL_NX * SL_NY], ry[SL_NX * SL_NY];
    for (int32_t l = 0; l < nl; l++) {
        rx[l] = mask[l] ? 100.0 * uniform(5, (uint64_t)l) : NAN;
        ry[l] = mask[l] ? 100.0 * uniform(6, (uint64_t)l) : NAN;
    }
    assert_int_equal(sw_centroid_set_reference(plan, rx, ry), SW_OK);
    run_ok(plan, &fb.img, &r);
    check_slopes(plan, &p, &r, rx, ry);
    /* The plan copied the reference. */
    double rx_saved[SL_NX * SL_NY], ry_saved[SL_NX * SL_NY];
    memcpy(rx_saved, rx, sizeof rx);
    memcpy(ry_saved, ry, sizeof ry);
    for (int32_t l = 0; l < nl; l++)
        rx[l] = ry[l] = -1e6;
    run_ok(plan, &fb.img, &r);
    check_slopes(plan, &p, &r, rx_saved, ry_saved);

    /* NULL, NULL restores the geometry's reference. */
    assert_int_equal(sw_centroid_set_reference(plan, NULL, NULL), SW_OK);
    run_ok(plan, &fb.img, &r);
    check_slopes(plan, &p, &r, NULL, NULL);

    /* INTERLEAVED: the same numbers as BLOCKS, x and y of each lenslet side by side. */
    sw_centroid_params pi = p;
    pi.slope_layout = SW_SLOPES_INTERLEAVED;
    sw_centroid_plan *plan_i = make_plan(cpu, &pi);
    sw_centroid_result ri = make_result(plan_i, 1);
    run_ok(plan_i, &fb.img, &ri);
    for (int32_t k = 0; k < nmask; k++) {
        assert_true(ri.slopes[2 * k] == r.slopes[k]);
        assert_true(ri.slopes[2 * k + 1] == r.slopes[nmask + k]);
    }
    assert_memory_equal(ri.x, r.x, (size_t)nl * sizeof(float));
    sw_centroid_result_free(&ri);
    sw_centroid_destroy(plan_i);

    /* Results with NULL arrays: only the given ones are written. */
    float xbuf[SL_NX * SL_NY], sbuf[2 * SL_NX * SL_NY];
    uint8_t vbuf[SL_NX * SL_NY];
    sw_centroid_result part;
    memset(&part, 0, sizeof part);
    part.frames = 1;
    part.lenslets = nl;
    part.nslopes = nmask;
    part.memory = SW_MEM_HOST;
    part.x = xbuf;
    memset(xbuf, 0, sizeof xbuf);
    run_ok(plan, &fb.img, &part);
    assert_memory_equal(xbuf, r.x, sizeof xbuf);
    part.x = NULL;
    part.slopes = sbuf;
    run_ok(plan, &fb.img, &part);
    assert_memory_equal(sbuf, r.slopes, 2 * (size_t)nmask * sizeof(float));
    part.slopes = NULL;
    part.valid = vbuf;
    run_ok(plan, &fb.img, &part);
    assert_memory_equal(vbuf, r.valid, sizeof vbuf);
    part.valid = NULL; /* nothing at all: still fine */
    run_ok(plan, &fb.img, &part);
    sw_centroid_result_free(&part); /* not owned: must not free our stack arrays */

    sw_centroid_result_free(&r);
    sw_centroid_result_free(NULL);
    sw_centroid_destroy(plan);
    free_frames(&fb);
}

/* ------------------------------------------------------------------ batches */

/* Three frames stacked vertically give, frame by frame, what three single runs give; the frames
 * differ, so a run that read one frame three times would fail. */
static void test_batches(void **state)
{
    (void)state;
    sw_centroid_params p;
    float *lut, *dark, *flat;
    uint8_t *mask;
    frames_buf fb;
    /* "u8 lut dark flat subtract-abs gamma window" with its mask, then taller frames */
    build_case(&ref_cases[4], 31337, &p, &lut, &dark, &flat, &mask, &fb);
    free_frames(&fb);
    p.max_frames = 3;
    fb = make_frames(p.width, 3 * p.height, p.type, 0);
    fill_uniform(&fb.img, 2718, 0, 256);
    sw_centroid_plan *plan = make_plan(cpu, &p);
    const int32_t nl = sw_centroid_plan_lenslets(plan), ns = sw_centroid_plan_slopes(plan);
    sw_centroid_result all = make_result(plan, 3), one = make_result(plan, 1);
    run_ok(plan, &fb.img, &all);
    int differ = 0;
    for (int32_t f = 0; f < 3; f++) {
        sw_image view;
        assert_int_equal(sw_image_roi(cpu, &fb.img, 0, f * p.height, p.width, p.height, &view),
                         SW_OK);
        run_ok(plan, &view, &one);
        const size_t o = (size_t)f * (size_t)nl;
        assert_memory_equal(one.x, all.x + o, (size_t)nl * sizeof(float));
        assert_memory_equal(one.y, all.y + o, (size_t)nl * sizeof(float));
        assert_memory_equal(one.intensity, all.intensity + o, (size_t)nl * sizeof(float));
        assert_memory_equal(one.valid, all.valid + o, (size_t)nl);
        assert_memory_equal(one.slopes, all.slopes + (size_t)f * 2 * (size_t)ns,
                            2 * (size_t)ns * sizeof(float));
        if (f > 0)
            for (int32_t l = 0; l < nl; l++)
                differ += all.valid[l] && all.x[l] != all.x[o + l];
    }
    assert_true(differ > 0);
    /* and the batch equals the reference, frame by frame */
    check_against_reference(&p, &fb.img, 3, &all, 0, 1e-4, 1e-5, "batch of 3");

    /* A batch of 2 in a plan of 3: fine, and equal to the first two frames. */
    sw_image two;
    assert_int_equal(sw_image_roi(cpu, &fb.img, 0, 0, p.width, 2 * p.height, &two), SW_OK);
    sw_centroid_result r2 = make_result(plan, 2);
    run_ok(plan, &two, &r2);
    assert_memory_equal(r2.x, all.x, 2 * (size_t)nl * sizeof(float));
    sw_centroid_result_free(&r2);

    sw_centroid_result_free(&all);
    sw_centroid_result_free(&one);
    sw_centroid_destroy(plan);
    free_frames(&fb);
    free(lut);
    free(dark);
    free(flat);
    free(mask);
}

/* ------------------------------------------------------------------ invalid lenslets */

/* f32 frames: a NaN pixel, an Inf pixel, and a lenslet of negative values (m00 < 0) make their
 * lenslets invalid (x = y = NaN, slopes 0); every other lenslet is valid and right. */
static void check_bad_pixels(const sw_centroid_params *p, const frames_buf *fb)
{
    sw_centroid_plan *plan = make_plan(cpu, p);
    sw_centroid_result r = make_result(plan, 1);
    run_ok(plan, &fb->img, &r);
    const int32_t nl = p->geometry.nx * p->geometry.ny;
    for (int32_t l = 0; l < nl; l++) {
        const int bad = l == 3 || l == 7 || l == 10 || l == 12;
        if (r.valid[l] != !bad)
            fail_msg("lenslet %d: valid %d, expected %d", l, r.valid[l], !bad);
        if (bad) {
            assert_true(isnan(r.x[l]) && isnan(r.y[l]));
            assert_true(r.slopes[l] == 0.0f && r.slopes[nl + l] == 0.0f);
        } else {
            assert_true(isfinite(r.x[l]) && isfinite(r.y[l]));
        }
    }
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
}

static void bad_pixels_setup(sw_centroid_params *p, frames_buf *fb)
{
    sw_centroid_params_default(p);
    p->geometry.nx = 5;
    p->geometry.ny = 3;
    p->geometry.pitch_px = 10.0;
    p->geometry.x0 = p->geometry.y0 = 0.0;
    p->width = 50;
    p->height = 30;
    p->type = SW_PIX_F32;
    *fb = make_frames(p->width, p->height, SW_PIX_F32, 1);
    fill_uniform(&fb->img, 99, 10, 1000);
    set_pixel(&fb->img, 34, 2, NAN);        /* lenslet 3 = (3, 0) */
    set_pixel(&fb->img, 21, 15, INFINITY);  /* lenslet 7 = (2, 1) */
    set_pixel(&fb->img, 25, 25, -INFINITY); /* lenslet 12 = (2, 2): a threshold must not hide it */
    for (int32_t y = 20; y < 30; y++)       /* lenslet 10 = (0, 2): negative light */
        for (int32_t x = 0; x < 10; x++)
            set_pixel(&fb->img, x, y, -5.0 - x);
}

static void test_invalid_pixels(void **state)
{
    (void)state;
    sw_centroid_params p;
    frames_buf fb;
    bad_pixels_setup(&p, &fb);
    check_bad_pixels(&p, &fb);
    /* and the good lenslets are the reference's */
    sw_centroid_plan *plan = make_plan(cpu, &p);
    sw_centroid_result r = make_result(plan, 1);
    run_ok(plan, &fb.img, &r);
    check_against_reference(&p, &fb.img, 1, &r, 0, 1e-4, 1e-5, "f32 with NaN/Inf");
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);

    /* u8: a lenslet with no light at all is invalid, the rest valid. */
    sw_centroid_params q;
    sw_centroid_params_default(&q);
    sw_image img = sw_test_random_image(q.width, q.height, SW_PIX_U8, 17);
    for (int32_t y = 16; y < 32; y++)
        memset((uint8_t *)sw_image_row(&img, y) + 48, 0, 16); /* lenslet (3, 1) = 13 */
    plan = make_plan(cpu, &q);
    r = make_result(plan, 1);
    run_ok(plan, &img, &r);
    for (int32_t l = 0; l < 100; l++) {
        assert_int_equal(r.valid[l], l != 13);
        assert_int_equal(isnan(r.x[l]), l == 13);
        assert_int_equal(isnan(r.y[l]), l == 13);
    }
    assert_true(r.intensity[13] == 0.0f);
    assert_true(r.slopes[13] == 0.0f && r.slopes[100 + 13] == 0.0f);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
    sw_image_free(&img);
    free_frames(&fb);
}

/* centroid.h: "invalid ... when a moment is not finite (a NaN or Inf pixel in an f32 frame)".
 * With a threshold in the conditioning too: a NaN pixel is corrupt data, not darkness, and must
 * not be silently thresholded to zero. */
static void test_invalid_pixels_thresholded(void **state)
{
    (void)state;
    sw_centroid_params p;
    frames_buf fb;
    bad_pixels_setup(&p, &fb);
    p.threshold_mode = SW_THRESHOLD_SUBTRACT;
    p.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    p.threshold = 5.0;
    check_bad_pixels(&p, &fb);
    p.threshold_mode = SW_THRESHOLD_ZERO;
    p.threshold_kind = SW_THRESHOLD_FRACTION;
    p.threshold = 0.25;
    check_bad_pixels(&p, &fb);
    free_frames(&fb);
}

/* ------------------------------------------------------------------ saturation */

/* A symmetric 5 x 5 spot centred on pixel (cx, cy) of frame row offset y0: peak P times the
 * separable weights 1/4, 1/2, 1, 1/2, 1/4, floored and clipped at top (a sensor's full scale).
 * Its centre of gravity is exactly (cx, cy), clipped or not. */
static void put_spot(sw_image *img, int32_t cx, int32_t cy, double peak, double top)
{
    static const double k[5] = {0.25, 0.5, 1.0, 0.5, 0.25};
    for (int dy = -2; dy <= 2; dy++)
        for (int dx = -2; dx <= 2; dx++) {
            double v = floor(peak * k[dx + 2] * k[dy + 2]);
            set_pixel(img, cx + dx, cy + dy, v < top ? v : top);
        }
}

/* The default 10 x 10 grid of 16 px: lenslet l has a spot of peak 100 + l at its region's centre
 * pixel (16 ix + 8, 16 iy + 8) of frame f, except lenslet `hot`, whose spot of peak 400 clips at
 * 255 (pixels 255, 200, 200, 100, ... : saturated). */
#define SAT_HOT 23
static void sat_frame(sw_image *img, int32_t f, int32_t hot, double top)
{
    for (int32_t y = 0; y < 160; y++)
        for (int32_t x = 0; x < 160; x++)
            set_pixel(img, x, f * 160 + y, 0.0);
    for (int32_t l = 0; l < 100; l++)
        put_spot(img, 16 * (l % 10) + 8, f * 160 + 16 * (l / 10) + 8, l == hot ? 400.0 : 100.0 + l,
                 top);
}

/* Runs p on img (one frame) and checks the flags against want[100] and the centroids: valid
 * lenslets exactly at their spot's centre, dropped ones NaN with zero slopes. */
static void expect_flags(const sw_centroid_params *p, const sw_image *img, const uint8_t *want,
                         const char *what)
{
    sw_centroid_plan *plan = make_plan(cpu, p);
    sw_centroid_result r = make_result(plan, 1);
    memset(r.saturated, 7, 100);
    run_ok(plan, img, &r);
    for (int32_t l = 0; l < 100; l++) {
        if (r.saturated[l] != want[l])
            fail_msg("%s: lenslet %d saturated %d, expected %d", what, l, r.saturated[l], want[l]);
        const int in_mask = sw_sh_is_valid(&p->geometry, l);
        const int valid = in_mask && !(want[l] && p->drop_saturated);
        if (r.valid[l] != valid)
            fail_msg("%s: lenslet %d valid %d, expected %d", what, l, r.valid[l], valid);
        if (valid) {
            assert_true(r.x[l] == (float)(16 * (l % 10) + 8));
            assert_true(r.y[l] == (float)(16 * (l / 10) + 8));
        } else {
            assert_true(isnan(r.x[l]) && isnan(r.y[l]));
        }
        assert_true(r.intensity[l] > 0.0f); /* m00 for every lenslet */
    }
    for (int32_t k = 0; k < r.nslopes; k++) {
        const int32_t l = sw_centroid_plan_slope_lenslet(plan, k);
        if (!r.valid[l])
            assert_true(r.slopes[k] == 0.0f && r.slopes[r.nslopes + k] == 0.0f);
    }
    check_against_reference(p, img, 1, &r, 1, 0, 0, what);
    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
}

/* centroid.h "Saturation" on analytical frames: exactly the lenslets with a pixel at or above
 * the level in their (windowed) region are flagged; kept valid by default, dropped on request. */
static void test_saturation(void **state)
{
    (void)state;
    uint8_t want[100];
    sw_centroid_params p;
    sw_centroid_params_default(&p);
    frames_buf fb = make_frames(160, 160, SW_PIX_U8, 0);
    sat_frame(&fb.img, 0, SAT_HOT, 255.0);

    /* the default level of u8 frames, 255: the clipped spot's lenslet only, still valid, its
     * centroid (a symmetric spot) at the centre */
    for (int32_t l = 0; l < 100; l++)
        want[l] = l == SAT_HOT;
    expect_flags(&p, &fb.img, want, "u8, default level");
    {
        sw_centroid_plan *plan = make_plan(cpu, &p);
        assert_true(sw_centroid_plan_saturation(plan) == 255.0);
        sw_centroid_destroy(plan);
        p.saturation = SW_CENTROID_NO_SATURATION;
        plan = make_plan(cpu, &p);
        assert_true(sw_centroid_plan_saturation(plan) == -1.0);
        sw_centroid_destroy(plan);
        p.type = SW_PIX_U16;
        p.saturation = 0.0;
        plan = make_plan(cpu, &p);
        assert_true(sw_centroid_plan_saturation(plan) == 65535.0);
        sw_centroid_destroy(plan);
        p.type = SW_PIX_F32;
        plan = make_plan(cpu, &p);
        assert_true(sw_centroid_plan_saturation(plan) == -1.0);
        sw_centroid_destroy(plan);
        p.saturation = 1e4;
        plan = make_plan(cpu, &p);
        assert_true(sw_centroid_plan_saturation(plan) == 1e4);
        sw_centroid_destroy(plan);
        p.type = SW_PIX_U8;
        p.saturation = 0.0;
    }
    /* dropped: that lenslet invalid, the others unchanged */
    p.drop_saturated = 1;
    expect_flags(&p, &fb.img, want, "u8, default level, dropped");
    p.drop_saturated = 0;
    /* no level: nothing flagged */
    p.saturation = SW_CENTROID_NO_SATURATION;
    memset(want, 0, sizeof want);
    expect_flags(&p, &fb.img, want, "u8, no level");
    p.drop_saturated = 1;
    expect_flags(&p, &fb.img, want, "u8, no level, drop asked");
    p.drop_saturated = 0;
    /* an explicit level between integers: pixels >= 150.5, i.e. peaks of 151 and more (lenslets
     * 51..99, whose other pixels are at most 99), and the clipped one */
    p.saturation = 150.5;
    for (int32_t l = 0; l < 100; l++)
        want[l] = l == SAT_HOT || 100 + l >= 151;
    expect_flags(&p, &fb.img, want, "u8, level 150.5");
    p.saturation = 151.0; /* at the level counts */
    expect_flags(&p, &fb.img, want, "u8, level 151");
    p.saturation = 1000.0; /* above the full scale: never */
    memset(want, 0, sizeof want);
    expect_flags(&p, &fb.img, want, "u8, level 1000");

    /* a saturated pixel in lenslet 5's corner: flagged without a window, not with window 1 (the
     * region the moments use) */
    p.saturation = 0.0;
    set_pixel(&fb.img, 16 * 5, 0, 255.0);
    for (int32_t l = 0; l < 100; l++)
        want[l] = l == SAT_HOT || l == 5;
    sw_image img = fb.img;
    {
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 1);
        run_ok(plan, &img, &r);
        for (int32_t l = 0; l < 100; l++)
            assert_int_equal(r.saturated[l], want[l]);
        assert_int_equal(r.valid[5], 1); /* biased by the corner pixel, but kept */
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    p.window = 1;
    want[5] = 0;
    expect_flags(&p, &fb.img, want, "u8, window 1");
    p.window = 0;
    set_pixel(&fb.img, 16 * 5, 0, 0.0);
    want[5] = 0;

    /* the level applies to the raw pixels, before the conditioning: a LUT that maps 255 to 25.5,
     * a dark, and a FRACTION threshold change no flag (floating-point sums) */
    static float lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = 0.1f * (float)i;
    float *dark = calloc(160 * 160, sizeof(float));
    assert_non_null(dark);
    for (int i = 0; i < 160 * 160; i++)
        dark[i] = 0.01f;
    p.lut = lut;
    p.dark = dark;
    p.threshold_mode = SW_THRESHOLD_ZERO;
    p.threshold_kind = SW_THRESHOLD_FRACTION;
    p.threshold = 0.2;
    for (int32_t l = 0; l < 100; l++)
        want[l] = l == SAT_HOT;
    {
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 1);
        run_ok(plan, &fb.img, &r);
        for (int32_t l = 0; l < 100; l++) {
            assert_int_equal(r.saturated[l], want[l]);
            assert_int_equal(r.valid[l], 1);
            assert_near(r.x[l], 16 * (l % 10) + 8, 1e-4);
        }
        /* dropped, with the threshold's first pass */
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
        p.drop_saturated = 1;
        plan = make_plan(cpu, &p);
        r = make_result(plan, 1);
        run_ok(plan, &fb.img, &r);
        for (int32_t l = 0; l < 100; l++)
            assert_int_equal(r.valid[l], l != SAT_HOT);
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
        p.drop_saturated = 0;
    }
    p.lut = NULL;
    p.dark = NULL;
    p.threshold_mode = SW_THRESHOLD_NONE;
    free(dark);

    /* a masked saturated lenslet: flagged (a property of its pixels), invalid by the mask */
    uint8_t mask[100];
    memset(mask, 1, sizeof mask);
    mask[SAT_HOT] = 0;
    p.geometry.valid = mask;
    expect_flags(&p, &fb.img, want, "u8, the saturated lenslet masked");
    p.geometry.valid = NULL;

    /* a result without the saturated array: not written, the rest as before */
    {
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 1), q = r;
        q.saturated = NULL;
        run_ok(plan, &fb.img, &q);
        assert_true(r.x[SAT_HOT] == (float)(16 * 3 + 8) && r.valid[SAT_HOT] == 1);
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }

    /* two frames in one run: the flags are per frame */
    {
        frames_buf two = make_frames(160, 320, SW_PIX_U8, 1);
        sat_frame(&two.img, 0, -1, 255.0);
        sat_frame(&two.img, 1, SAT_HOT, 255.0);
        p.max_frames = 2;
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 2);
        run_ok(plan, &two.img, &r);
        for (int32_t l = 0; l < 100; l++) {
            assert_int_equal(r.saturated[l], 0);
            assert_int_equal(r.saturated[100 + l], l == SAT_HOT);
        }
        check_against_reference(&p, &two.img, 2, &r, 1, 0, 0, "u8, two frames");
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
        free_frames(&two);
        p.max_frames = 1;
    }
    free_frames(&fb);

    /* u16: the default level is 65535; 65534 is not saturated */
    p.type = SW_PIX_U16;
    fb = make_frames(160, 160, SW_PIX_U16, 0);
    sat_frame(&fb.img, 0, -1, 65535.0);
    set_pixel(&fb.img, 16 * 7 + 3, 4, 65535.0);
    set_pixel(&fb.img, 16 * 8 + 3, 4, 65534.0);
    {
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 1);
        run_ok(plan, &fb.img, &r);
        for (int32_t l = 0; l < 100; l++)
            assert_int_equal(r.saturated[l], l == 7);
        check_against_reference(&p, &fb.img, 1, &r, 1, 0, 0, "u16, default level");
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    /* a 12-bit camera in 16-bit words: level 4095 */
    p.saturation = 4095.0;
    set_pixel(&fb.img, 16 * 2 + 3, 16 * 9 + 4, 4095.0);
    {
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 1);
        run_ok(plan, &fb.img, &r);
        for (int32_t l = 0; l < 100; l++)
            assert_int_equal(r.saturated[l], l == 7 || l == 8 || l == 92);
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free_frames(&fb);

    /* f32: no level by default, whatever the values; an explicit level compares exactly */
    p.type = SW_PIX_F32;
    p.saturation = 0.0;
    fb = make_frames(160, 160, SW_PIX_F32, 0);
    sat_frame(&fb.img, 0, -1, 1e30);
    set_pixel(&fb.img, 16 * 1 + 8, 16 * 1 + 8, 1e30);                               /* 11 */
    set_pixel(&fb.img, 16 * 4 + 1, 16 * 6 + 1, 1000.25);                            /* 64 */
    set_pixel(&fb.img, 16 * 6 + 1, 16 * 4 + 1, (double)nextafterf(1000.25f, 0.0f)); /* 46 */
    for (int k = 0; k < 2; k++) {
        p.saturation = k == 0 ? 0.0 : 1000.25;
        sw_centroid_plan *plan = make_plan(cpu, &p);
        sw_centroid_result r = make_result(plan, 1);
        run_ok(plan, &fb.img, &r);
        for (int32_t l = 0; l < 100; l++) {
            assert_int_equal(r.saturated[l], k == 1 && (l == 11 || l == 64));
            assert_int_equal(r.valid[l], 1);
        }
        check_against_reference(&p, &fb.img, 1, &r, 0, 1e-4, 1e-5, "f32 levels");
        sw_centroid_result_free(&r);
        sw_centroid_destroy(plan);
    }
    free_frames(&fb);
}

/* ------------------------------------------------------------------ bad input */

static void expect_create_fails(const sw_centroid_params *p, int any_code, const char *what)
{
    sw_centroid_plan *plan = NULL;
    sw_status st = sw_centroid_create(cpu, p, &plan);
    if (any_code ? st == SW_OK : st != SW_EINVAL)
        fail_msg("%s: status %s (%s), expected %s", what, sw_status_string(st),
                 sw_context_error(cpu), any_code ? "an error" : "SW_EINVAL");
    if (plan)
        fail_msg("%s: a plan was returned with the error", what);
    if (strlen(sw_context_error(cpu)) == 0)
        fail_msg("%s: no message", what);
}

static void test_bad_create(void **state)
{
    (void)state;
    sw_centroid_params base;
    sw_centroid_params_default(&base);
    base.geometry.nx = 6;
    base.geometry.ny = 4;
    base.geometry.pitch_px = 10.5;
    base.geometry.x0 = 1.0;
    base.geometry.y0 = 2.0;
    base.width = 65; /* floor(1 + 63) = 64 columns used */
    base.height = 44;
    sw_centroid_destroy(make_plan(cpu, &base)); /* the base itself is fine */

    sw_centroid_params p = base;
    p.geometry.x0 = 3.0; /* columns up to floor(3 + 63) = 66 > 65 */
    expect_create_fails(&p, 0, "grid past the right edge");
    p = base;
    p.geometry.y0 = -0.5;
    expect_create_fails(&p, 0, "negative origin");
    p = base;
    p.height = 43;
    p.geometry.y0 = 2.0;
    p.geometry.pitch_px = 10.5;
    p.geometry.ny = 4; /* rows up to floor(2 + 42) = 44 > 43 */
    expect_create_fails(&p, 0, "grid past the bottom");
    p = base;
    p.geometry.nx = 0;
    expect_create_fails(&p, 0, "nx 0");
    p = base;
    p.geometry.pitch_px = 0.5;
    expect_create_fails(&p, 0, "pitch 0.5");
    p = base;
    p.geometry.pitch_px = NAN;
    expect_create_fails(&p, 0, "pitch NaN");
    p = base;
    p.geometry.pitch_px = 130.0;
    p.geometry.nx = p.geometry.ny = 1;
    p.width = p.height = 200;
    expect_create_fails(&p, 0, "pitch 130");
    p.geometry.pitch_px = 128.0; /* the largest allowed */
    sw_centroid_destroy(make_plan(cpu, &p));
    p = base;
    p.geometry.pitch_px = 1.0; /* the smallest allowed */
    sw_centroid_destroy(make_plan(cpu, &p));
    p = base;
    p.window = 5; /* regions of 10 or 11 px: 10 - 2 * 5 = 0 */
    expect_create_fails(&p, 0, "window 5 in 10-px regions");
    p.window = 4;
    sw_centroid_destroy(make_plan(cpu, &p));
    p.window = -1;
    expect_create_fails(&p, 0, "window -1");
    p.window = INT32_MAX; /* no overflow in the region bounds */
    expect_create_fails(&p, 0, "window INT32_MAX");

    float lut[256];
    for (int i = 0; i < 256; i++)
        lut[i] = (float)i;
    p = base;
    p.type = SW_PIX_F32;
    p.lut = lut;
    expect_create_fails(&p, 0, "LUT with an f32 frame");
    p.type = SW_PIX_U8; /* the same LUT on u8 is fine */
    sw_centroid_destroy(make_plan(cpu, &p));

    const double bad_gamma[3] = {0.0, -1.0, NAN};
    for (int i = 0; i < 3; i++) {
        p = base;
        p.gamma = bad_gamma[i];
        expect_create_fails(&p, 0, "gamma <= 0 or NaN");
    }
    p = base;
    p.threshold_mode = SW_THRESHOLD_SUBTRACT;
    p.threshold = NAN;
    expect_create_fails(&p, 0, "NaN threshold");
    p.threshold_mode = SW_THRESHOLD_ZERO;
    p.threshold = INFINITY;
    expect_create_fails(&p, 0, "Inf threshold");
    p.threshold_kind = SW_THRESHOLD_FRACTION;
    p.threshold = 1.5;
    expect_create_fails(&p, 0, "fraction 1.5");
    p.threshold = -0.1;
    expect_create_fails(&p, 0, "fraction -0.1");
    p.threshold = 1.0;
    sw_centroid_destroy(make_plan(cpu, &p));

    const double bad_level[3] = {NAN, INFINITY, -INFINITY};
    for (int i = 0; i < 3; i++) {
        p = base;
        p.saturation = bad_level[i];
        expect_create_fails(&p, 0, "a saturation level that is not finite");
    }

    p = base;
    p.type = SW_PIX_U32;
    expect_create_fails(&p, 0, "u32 frames");
    p.type = (sw_pixel_type)99;
    expect_create_fails(&p, 0, "unknown pixel type");
    p = base;
    p.max_frames = 0;
    expect_create_fails(&p, 0, "max_frames 0");
    p.max_frames = -3;
    expect_create_fails(&p, 0, "max_frames -3");
    p = base;
    p.width = 0;
    expect_create_fails(&p, 0, "width 0");
    p = base;
    p.path = (sw_centroid_path)42;
    expect_create_fails(&p, 0, "unknown path");
    p = base;
    p.threshold_mode = (sw_threshold_mode)9;
    expect_create_fails(&p, 0, "unknown threshold mode");
    p = base;
    p.slope_layout = (sw_slope_layout)9;
    expect_create_fails(&p, 0, "unknown slope layout");

    /* NULL pointers */
    sw_centroid_plan *plan = NULL;
    assert_int_equal(sw_centroid_create(cpu, NULL, &plan), SW_EINVAL);
    assert_null(plan);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    assert_int_equal(sw_centroid_create(cpu, &base, NULL), SW_EINVAL);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    assert_int_equal(sw_centroid_create(NULL, &base, &plan), SW_EINVAL);
    assert_null(plan);
    assert_true(strlen(sw_context_error(NULL)) > 0);
}

#define SENTINEL 12345.0f

static void fill_sentinel(sw_centroid_result *r, int32_t frames)
{
    const size_t n = (size_t)frames * (size_t)r->lenslets;
    for (size_t i = 0; i < n; i++)
        r->x[i] = r->y[i] = r->intensity[i] = SENTINEL;
    memset(r->valid, 0xa5, n);
    for (size_t i = 0; i < 2 * (size_t)frames * (size_t)r->nslopes; i++)
        r->slopes[i] = SENTINEL;
}

static void check_sentinel(const sw_centroid_result *r, int32_t frames, const char *what)
{
    const size_t n = (size_t)frames * (size_t)r->lenslets;
    for (size_t i = 0; i < n; i++)
        if (r->x[i] != SENTINEL || r->y[i] != SENTINEL || r->intensity[i] != SENTINEL ||
            r->valid[i] != 0xa5)
            fail_msg("%s: result element %zu was written", what, i);
    for (size_t i = 0; i < 2 * (size_t)frames * (size_t)r->nslopes; i++)
        if (r->slopes[i] != SENTINEL)
            fail_msg("%s: slope %zu was written", what, i);
}

/* A run that must fail with SW_EINVAL, a message, and the result untouched. */
static void expect_run_fails(sw_centroid_plan *plan, const sw_image *img, sw_centroid_result *r,
                             sw_centroid_result *storage, const char *what)
{
    fill_sentinel(storage, storage->frames);
    sw_status st = sw_centroid_run(plan, img, r);
    if (st != SW_EINVAL)
        fail_msg("%s: status %s, expected SW_EINVAL", what, sw_status_string(st));
    if (strlen(sw_context_error(cpu)) == 0)
        fail_msg("%s: no message", what);
    check_sentinel(storage, storage->frames, what);
}

static void test_bad_run(void **state)
{
    (void)state;
    uint8_t mask[SL_NX * SL_NY];
    sw_centroid_params p;
    frames_buf fb;
    slopes_setup(&p, mask, &fb);
    free_frames(&fb);
    p.max_frames = 2;
    sw_centroid_plan *plan = make_plan(cpu, &p);
    sw_centroid_result r = make_result(plan, 3);
    frames_buf f3 = make_frames(p.width, 3 * p.height, SW_PIX_U16, 1);
    fill_uniform(&f3.img, 5, 0, 65536);

    sw_image img;
    /* the right input works (and writes) */
    assert_int_equal(sw_image_roi(cpu, &f3.img, 0, 0, p.width, 2 * p.height, &img), SW_OK);
    fill_sentinel(&r, 3);
    run_ok(plan, &img, &r);
    assert_true(r.x[1] != SENTINEL);

    assert_int_equal(sw_image_roi(cpu, &f3.img, 0, 0, p.width, 2 * p.height - 1, &img), SW_OK);
    expect_run_fails(plan, &img, &r, &r, "height not a multiple of the frame height");
    assert_int_equal(sw_image_roi(cpu, &f3.img, 0, 0, p.width, p.height / 2, &img), SW_OK);
    expect_run_fails(plan, &img, &r, &r, "less than one frame");
    expect_run_fails(plan, &f3.img, &r, &r, "3 frames, max_frames 2");
    assert_int_equal(sw_image_roi(cpu, &f3.img, 0, 0, p.width - 1, p.height, &img), SW_OK);
    expect_run_fails(plan, &img, &r, &r, "narrower frame");

    sw_image u8;
    assert_int_equal(sw_image_alloc(cpu, p.width, p.height, SW_PIX_U8, &u8), SW_OK);
    expect_run_fails(plan, &u8, &r, &r, "u8 frame for a u16 plan");
    sw_image_free(&u8);

    /* a frame that claims to be device memory on the host path */
    img = f3.img;
    img.height = p.height;
    img.memory = SW_MEM_DEVICE;
    img.owned = 0;
    expect_run_fails(plan, &img, &r, &r, "device frame on the host path");
    img.memory = SW_MEM_HOST;
    /* u16 pixels at an odd address (a byte view one pixel-half in): refused on the host path */
    sw_image odd;
    assert_int_equal(sw_image_wrap((char *)f3.img.data + 1, p.width, p.height, f3.img.stride,
                                   SW_PIX_U16, SW_MEM_HOST, &odd),
                     SW_OK);
    expect_run_fails(plan, &odd, &r, &r, "u16 pixels at an odd address");
    img.data = NULL;
    expect_run_fails(plan, &img, &r, &r, "NULL pixels");

    /* result too small: room for 1 frame, a batch of 2 */
    assert_int_equal(sw_image_roi(cpu, &f3.img, 0, 0, p.width, 2 * p.height, &img), SW_OK);
    sw_centroid_result small = r;
    small.frames = 1;
    expect_run_fails(plan, &img, &small, &r, "result with room for 1 of 2 frames");
    small = r;
    small.lenslets = r.lenslets - 1;
    expect_run_fails(plan, &img, &small, &r, "result for fewer lenslets");
    small = r;
    small.nslopes = r.nslopes - 1;
    expect_run_fails(plan, &img, &small, &r, "result for fewer slopes");
    small = r;
    small.memory = SW_MEM_DEVICE;
    expect_run_fails(plan, &img, &small, &r, "device result on a CPU context");

    /* NULL pointers */
    fill_sentinel(&r, 3);
    assert_int_equal(sw_centroid_run(NULL, &img, &r), SW_EINVAL);
    assert_int_equal(sw_centroid_run(plan, NULL, &r), SW_EINVAL);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    assert_int_equal(sw_centroid_run(plan, &img, NULL), SW_EINVAL);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    check_sentinel(&r, 3, "NULL arguments");

    /* result_alloc */
    sw_centroid_result ra;
    memset(&ra, 0, sizeof ra);
    assert_int_equal(sw_centroid_result_alloc(NULL, 1, SW_MEM_HOST, &ra), SW_EINVAL);
    assert_int_equal(sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, NULL), SW_EINVAL);
    assert_int_equal(sw_centroid_result_alloc(plan, 0, SW_MEM_HOST, &ra), SW_EINVAL);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    assert_true(sw_centroid_result_alloc(plan, 1, SW_MEM_DEVICE, &ra) != SW_OK);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    assert_true(sw_centroid_result_alloc(plan, 1, SW_MEM_PINNED, &ra) != SW_OK);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    assert_null(ra.x);

    /* set_reference: NaN or Inf for a lenslet of the mask is refused and the old reference
     * stays; one array without the other is refused. */
    const int32_t nl = SL_NX * SL_NY;
    double rx[SL_NX * SL_NY], ry[SL_NX * SL_NY];
    for (int32_t l = 0; l < nl; l++) {
        rx[l] = 3.0 + l;
        ry[l] = 7.0 - l;
    }
    assert_int_equal(sw_centroid_set_reference(plan, rx, ry), SW_OK);
    assert_int_equal(sw_image_roi(cpu, &f3.img, 0, 0, p.width, p.height, &img), SW_OK);
    run_ok(plan, &img, &r);
    const size_t nsb = 2 * (size_t)r.nslopes * sizeof(float);
    float *before = malloc(nsb);
    memcpy(before, r.slopes, nsb);
    double bx[SL_NX * SL_NY], by[SL_NX * SL_NY];
    memcpy(bx, rx, sizeof rx);
    memcpy(by, ry, sizeof ry);
    /* (a non-finite value: SW_EINVAL, or SW_ERANGE, core.h's code for NaN/Inf values) */
    bx[1] = NAN; /* lenslet 1 is in the mask */
    assert_int_equal(mask[1], 1);
    sw_status st = sw_centroid_set_reference(plan, bx, by);
    assert_true(st == SW_EINVAL || st == SW_ERANGE);
    assert_true(strlen(sw_context_error(cpu)) > 0);
    bx[1] = rx[1];
    by[nl - 2] = INFINITY; /* lenslet 46: in the mask */
    assert_int_equal(mask[nl - 2], 1);
    st = sw_centroid_set_reference(plan, bx, by);
    assert_true(st == SW_EINVAL || st == SW_ERANGE);
    assert_int_equal(sw_centroid_set_reference(plan, rx, NULL), SW_EINVAL);
    assert_int_equal(sw_centroid_set_reference(plan, NULL, ry), SW_EINVAL);
    assert_int_equal(sw_centroid_set_reference(NULL, rx, ry), SW_EINVAL);
    run_ok(plan, &img, &r);
    assert_memory_equal(r.slopes, before, nsb);
    /* NaN where the mask is 0 is fine */
    memcpy(bx, rx, sizeof rx);
    memcpy(by, ry, sizeof ry);
    assert_int_equal(mask[2], 0);
    bx[2] = by[2] = NAN;
    assert_int_equal(sw_centroid_set_reference(plan, bx, by), SW_OK);
    run_ok(plan, &img, &r);
    assert_memory_equal(r.slopes, before, nsb);
    free(before);

    sw_centroid_result_free(&r);
    sw_centroid_destroy(plan);
    free_frames(&f3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_and_paths),
        cmocka_unit_test(test_white_table1),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_simulated_spots),
        cmocka_unit_test(test_simulated_noise),
        cmocka_unit_test(test_slopes),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_invalid_pixels),
        cmocka_unit_test(test_invalid_pixels_thresholded),
        cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_bad_create),
        cmocka_unit_test(test_bad_run),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
