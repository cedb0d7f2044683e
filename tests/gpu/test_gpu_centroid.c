/*
 * The GPU centre-of-gravity stage (centroid_cuda.cu) against the CPU's (centroid.c), one plan per
 * backend from the same parameters:
 *   - exact plans (u8 / u16, no conditioning): x, y, intensity, valid and slopes bit-identical on
 *     random frames and random geometries (non-integer pitch 1..128, non-integer origins, masks,
 *     windows), read through every load of the kernel: vector loads (COPY, DEVICE), scalar and
 *     byte loads (strides that are no multiple of 4 pixels, pointers 1 byte off);
 *   - conditioned plans (dark, flat, LUT, SUBTRACT / ZERO thresholds, ABSOLUTE / FRACTION, gamma,
 *     window), u8, u16 and f32: centroids within 1e-4 px, the same valid flags;
 *   - f32 frames with a NaN or an Inf pixel: that lenslet invalid on both;
 *   - white 8-bit frames on the 20 configurations of seed 000 Table 1: every lenslet's centroid
 *     is exactly the middle of its region (the seed's own correctness check);
 *   - batches equal the same frames run one by one (and 65 536 one-row frames, more than one
 *     launch grid holds);
 *   - the three memory paths with host, pinned and device results, a result with only slopes,
 *     interleaved slopes against a reference set after create, kernel timing;
 *   - the saturated flags (centroid.h "Saturation") in every comparison above (random u8 frames
 *     hold many 255s; explicit levels and drop_saturated on some draws), and on purpose: a spot
 *     clipped at 255 on one lenslet, explicit levels, windows, u16 / f32, kept and dropped, on
 *     every path (host, copy, mapped, device, and device runs replayed from a CUDA graph) into
 *     host, pinned and device results.
 * Skips (77) when no GPU is usable.
 */
#define _GNU_SOURCE /* setenv, unsetenv */
#include "testutil.h"

#ifdef SW_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *gpu;
static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    gpu = sw_test_cuda_context_or_skip();
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

/* ------------------------------------------------------------------ helpers */

/* splitmix64: reproducible geometry draws */
static uint64_t rnd_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rnd_u01(uint64_t *s)
{
    return (double)(rnd_next(s) >> 11) * 0x1.0p-53;
}

static int rnd_int(uint64_t *s, int n)
{
    return (int)(rnd_next(s) % (uint64_t)n);
}

/* A random geometry: pitch in [3, 128) (or [1, 3) one time in eight), non-integer origin, at most
 * ~max_px pixels per side; the frame size is set to hold it with a random margin. mask (nx * ny
 * bytes, caller's buffer of at least 4096) is used when with_mask. */
static void random_params(uint64_t *s, sw_pixel_type type, int max_px, int with_mask, uint8_t *mask,
                          sw_centroid_params *p)
{
    sw_centroid_params_default(p);
    sw_sh_geometry *g = &p->geometry;
    /* one geometry in eight has a pitch of 1..3 px over a wide grid (several column tiles) */
    const int tiny = rnd_int(s, 8) == 0;
    g->pitch_px = tiny ? 1.0 + 2.0 * rnd_u01(s) : 3.0 + 125.0 * rnd_u01(s);
    int nmax = (int)(max_px / g->pitch_px);
    if (nmax < 1)
        nmax = 1;
    if (nmax > 60)
        nmax = 60;
    g->nx = tiny ? 100 + rnd_int(s, 100) : 1 + rnd_int(s, nmax);
    g->ny = tiny ? 1 + rnd_int(s, 20) : 1 + rnd_int(s, nmax);
    g->x0 = 9.0 * rnd_u01(s);
    g->y0 = 9.0 * rnd_u01(s);
    g->valid = NULL;
    if (with_mask) {
        const int n = g->nx * g->ny;
        for (int l = 0; l < n; l++)
            mask[l] = rnd_int(s, 4) != 0;
        mask[0] = n == 1; /* masked, unless it is the only lenslet */
        mask[n - 1] = 1;  /* at least one lenslet to compare */
        g->valid = mask;
    }
    p->width = (int32_t)ceil(g->x0 + g->pitch_px * g->nx) + rnd_int(s, 6);
    p->height = (int32_t)ceil(g->y0 + g->pitch_px * g->ny) + rnd_int(s, 6);
    p->type = type;
    /* a window that leaves every region at least one pixel (regions are >= floor(d) wide) */
    int wmax = ((int)floor(g->pitch_px) - 1) / 2;
    p->window = rnd_int(s, 3) == 0 ? rnd_int(s, (wmax < 3 ? wmax : 3) + 1) : 0;
}

static sw_centroid_plan *make_plan(sw_context *ctx, const sw_centroid_params *p,
                                   sw_centroid_path path)
{
    sw_centroid_params q = *p;
    q.path = path;
    sw_centroid_plan *plan = NULL;
    if (sw_centroid_create(ctx, &q, &plan) != SW_OK)
        fail_msg("sw_centroid_create (%s path): %s", sw_centroid_path_string(path),
                 sw_context_error(ctx));
    assert_int_equal(sw_centroid_plan_path(plan), path);
    return plan;
}

static void run_ok(sw_centroid_plan *plan, sw_context *ctx, const sw_image *frames,
                   sw_centroid_result *r)
{
    if (sw_centroid_run(plan, frames, r) != SW_OK)
        fail_msg("sw_centroid_run: %s", sw_context_error(ctx));
}

static sw_centroid_result host_result(sw_centroid_plan *plan, int32_t frames)
{
    sw_centroid_result r;
    assert_int_equal(sw_centroid_result_alloc(plan, frames, SW_MEM_HOST, &r), SW_OK);
    return r;
}

/* The same saturated flags (when both results have them). */
static void expect_same_saturation(const char *what, const sw_centroid_result *a,
                                   const sw_centroid_result *b, int32_t frames)
{
    if (!a->saturated || !b->saturated)
        return;
    const size_t n = (size_t)frames * (size_t)a->lenslets;
    for (size_t i = 0; i < n; i++)
        if (a->saturated[i] != b->saturated[i])
            fail_msg("%s: saturated[%zu] differs: %d vs %d", what, i, a->saturated[i],
                     b->saturated[i]);
}

/* Every array of a and b holds the same bytes for `frames` frames. */
static void expect_identical(const char *what, const sw_centroid_result *a,
                             const sw_centroid_result *b, int32_t frames)
{
    const size_t n = (size_t)frames * (size_t)a->lenslets;
    const size_t ns = (size_t)frames * 2 * (size_t)a->nslopes;
    const float *fa[3] = {a->x, a->y, a->intensity}, *fb[3] = {b->x, b->y, b->intensity};
    const char *names[3] = {"x", "y", "intensity"};
    for (int k = 0; k < 3; k++)
        if (memcmp(fa[k], fb[k], n * sizeof(float)) != 0)
            for (size_t i = 0; i < n; i++)
                if (memcmp(fa[k] + i, fb[k] + i, sizeof(float)) != 0)
                    fail_msg("%s: %s[%zu] differs: %.9g vs %.9g (valid %d / %d)", what, names[k], i,
                             (double)fa[k][i], (double)fb[k][i], a->valid[i], b->valid[i]);
    for (size_t i = 0; i < n; i++)
        if (a->valid[i] != b->valid[i])
            fail_msg("%s: valid[%zu] differs: %d vs %d", what, i, a->valid[i], b->valid[i]);
    expect_same_saturation(what, a, b, frames);
    for (size_t i = 0; i < ns; i++)
        if (memcmp(a->slopes + i, b->slopes + i, sizeof(float)) != 0)
            fail_msg("%s: slopes[%zu] differs: %.9g vs %.9g", what, i, (double)a->slopes[i],
                     (double)b->slopes[i]);
}

/* The same valid flags; centroids and slopes within tol px, intensities within tol relative. */
static void expect_close(const char *what, const sw_centroid_result *a, const sw_centroid_result *b,
                         int32_t frames, double tol)
{
    const size_t n = (size_t)frames * (size_t)a->lenslets;
    const size_t ns = (size_t)frames * 2 * (size_t)a->nslopes;
    size_t nvalid = 0;
    for (size_t i = 0; i < n; i++) {
        if (a->valid[i] != b->valid[i])
            fail_msg("%s: valid[%zu] differs: %d vs %d (intensity %.9g / %.9g)", what, i,
                     a->valid[i], b->valid[i], (double)a->intensity[i], (double)b->intensity[i]);
        if (!a->valid[i]) {
            assert_true(isnan(a->x[i]) && isnan(b->x[i]) && isnan(a->y[i]) && isnan(b->y[i]));
            continue;
        }
        nvalid++;
        if (!(fabs(a->x[i] - b->x[i]) <= tol) || !(fabs(a->y[i] - b->y[i]) <= tol))
            fail_msg("%s: lenslet %zu: (%.7f, %.7f) vs (%.7f, %.7f)", what, i, (double)a->x[i],
                     (double)a->y[i], (double)b->x[i], (double)b->y[i]);
        if (!(fabs(a->intensity[i] - b->intensity[i]) <= tol * fmax(1.0, fabs(a->intensity[i]))))
            fail_msg("%s: intensity[%zu] %.9g vs %.9g", what, i, (double)a->intensity[i],
                     (double)b->intensity[i]);
    }
    /* the comparison compared something: valid lenslets, or lenslets dropped as saturated */
    size_t nsat = 0;
    for (size_t i = 0; a->saturated && i < n; i++)
        nsat += a->saturated[i] != 0;
    assert_true(nvalid > 0 || nsat > 0);
    expect_same_saturation(what, a, b, frames);
    for (size_t i = 0; i < ns; i++)
        if (!(fabs(a->slopes[i] - b->slopes[i]) <= tol))
            fail_msg("%s: slopes[%zu] %.7f vs %.7f", what, i, (double)a->slopes[i],
                     (double)b->slopes[i]);
}

/*
 * An awkward copy of a host image: its pixels laid out from `off` bytes into a buffer with a row
 * stride of `stride` bytes, in pinned memory (*pin, a 4096-byte-wide raw u8 image) and in device
 * memory (*dev, the same bytes). The views are returned in *vpin (PINNED) and *vdev (DEVICE).
 */
static void awkward_copy(const sw_image *src, size_t off, size_t stride, sw_image *pin,
                         sw_image *dev, sw_image *vpin, sw_image *vdev)
{
    const size_t row = (size_t)src->width * sw_pixel_size(src->type);
    const size_t bytes = off + stride * (size_t)src->height;
    const int32_t rows = (int32_t)((bytes + 4095) / 4096);
    assert_int_equal(sw_image_alloc(gpu, 4096, rows, SW_PIX_U8, pin), SW_OK);
    assert_int_equal(pin->stride, 4096);
    for (int32_t y = 0; y < src->height; y++)
        memcpy((char *)pin->data + off + (size_t)y * stride, sw_image_row(src, y), row);
    assert_int_equal(sw_image_alloc_device(gpu, 4096, rows, SW_PIX_U8, dev), SW_OK);
    assert_int_equal(dev->stride, 4096);
    assert_int_equal(sw_image_copy(gpu, pin, dev), SW_OK);
    assert_int_equal(sw_image_wrap((char *)pin->data + off, src->width, src->height, stride,
                                   src->type, SW_MEM_PINNED, vpin),
                     SW_OK);
    assert_int_equal(sw_image_wrap((char *)dev->data + off, src->width, src->height, stride,
                                   src->type, SW_MEM_DEVICE, vdev),
                     SW_OK);
}

/* A host image of uniform f32 pixels in [0, 1000). */
static sw_image random_f32(int32_t w, int32_t h, uint64_t seed)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &img), SW_OK);
    uint64_t s = seed;
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++)
            ((float *)sw_image_row(&img, y))[x] = (float)(1000.0 * rnd_u01(&s));
    return img;
}

/*
 * Runs the host image `frames` (host memory, height = k * p->height) through a CPU plan and
 * through a GPU plan on `path` (COPY: a pinned copy; DEVICE / MAPPED: the awkward layout at
 * off / stride, or an aligned copy when stride is 0), and compares: identically when exact, else
 * within tol.
 */
static void cpu_vs_gpu(const char *what, const sw_centroid_params *p, const sw_image *frames,
                       sw_centroid_path path, size_t off, size_t stride, int exact, double tol)
{
    const int32_t k = frames->height / p->height;
    sw_centroid_params q = *p;
    q.max_frames = k;
    sw_centroid_plan *pc = make_plan(cpu, &q, SW_CENTROID_HOST);
    sw_centroid_plan *pg = make_plan(gpu, &q, path);
    sw_centroid_result rc = host_result(pc, k), rg = host_result(pg, k);
    run_ok(pc, cpu, frames, &rc);

    sw_image pin = {0}, dev = {0}, vpin, vdev, in;
    if (stride) {
        awkward_copy(frames, off, stride, &pin, &dev, &vpin, &vdev);
        in = path == SW_CENTROID_DEVICE ? vdev : vpin;
    } else if (path == SW_CENTROID_DEVICE) {
        assert_int_equal(
            sw_image_alloc_device(gpu, frames->width, frames->height, frames->type, &dev), SW_OK);
        assert_int_equal(sw_image_copy(gpu, frames, &dev), SW_OK);
        in = dev;
    } else {
        assert_int_equal(sw_image_alloc(gpu, frames->width, frames->height, frames->type, &pin),
                         SW_OK);
        assert_int_equal(sw_image_copy(gpu, frames, &pin), SW_OK);
        in = pin;
    }
    run_ok(pg, gpu, &in, &rg);
    char label[256];
    snprintf(label, sizeof label,
             "%s (%s path, %s, %dx%d lenslets of %.3f px at (%.2f, %.2f), "
             "window %d, %s, offset %zu, stride %zu)",
             what, sw_centroid_path_string(path), sw_pixel_type_string(p->type), p->geometry.nx,
             p->geometry.ny, p->geometry.pitch_px, p->geometry.x0, p->geometry.y0, p->window,
             p->geometry.valid ? "mask" : "no mask", off, stride);
    if (exact)
        expect_identical(label, &rc, &rg, k);
    else
        expect_close(label, &rc, &rg, k, tol);
    sw_image_free(&pin);
    sw_image_free(&dev);
    sw_centroid_result_free(&rc);
    sw_centroid_result_free(&rg);
    sw_centroid_destroy(pc);
    sw_centroid_destroy(pg);
}

/* ------------------------------------------------------------------ tests */

/* Exact plans: bit-identical to the CPU through every kind of pixel load. */
static void test_exact_random(void **state)
{
    (void)state;
    static uint8_t mask[4096];
    uint64_t s = 0xC0FFEE;
    const sw_pixel_type types[2] = {SW_PIX_U8, SW_PIX_U16};
    for (int t = 0; t < 2; t++) {
        for (int trial = 0; trial < 16; trial++) {
            sw_centroid_params p;
            random_params(&s, types[t], 700, trial % 2, mask, &p);
            /* the default level (u8: many 255s), a level inside the range, none; dropped on
             * some draws */
            const double full = types[t] == SW_PIX_U8 ? 255.0 : 65535.0;
            p.saturation = trial % 3 == 0   ? 0.0
                           : trial % 3 == 1 ? floor(0.995 * full) - 0.5
                                            : SW_CENTROID_NO_SATURATION;
            p.drop_saturated = trial % 5 == 3;
            sw_image img = sw_test_random_image(p.width, p.height, p.type, 100 + 17 * trial + t);
            const size_t ps = sw_pixel_size(p.type), row = (size_t)p.width * ps;
            switch (trial % 4) {
            case 0: /* pinned frames copied into the plan's pitched buffer: vector loads */
                cpu_vs_gpu("exact", &p, &img, SW_CENTROID_COPY, 0, 0, 1, 0);
                break;
            case 1: /* device frames from cudaMallocPitch: vector loads */
                cpu_vs_gpu("exact", &p, &img, SW_CENTROID_DEVICE, 0, 0, 1, 0);
                break;
            case 2: /* device frames 1 byte off, odd stride: scalar (u8) / byte (u16) loads */
                cpu_vs_gpu("exact", &p, &img, SW_CENTROID_DEVICE, 1, row + 3 * ps, 1, 0);
                break;
            default: /* pinned frames read over the bus, pixel-aligned but not 4-pixel-aligned */
                cpu_vs_gpu("exact", &p, &img, SW_CENTROID_MAPPED, ps, row + 5 * ps, 1, 0);
                break;
            }
            sw_image_free(&img);
        }
    }
}

/* Conditioning on every pixel type: within 1e-4 px of the CPU, same valid flags. */
static void test_conditioned_random(void **state)
{
    (void)state;
    static uint8_t mask[4096];
    static float lut[65536];
    uint64_t s = 0xBADC0DE;
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    for (int t = 0; t < 3; t++) {
        const double full = types[t] == SW_PIX_U8    ? 255.0
                            : types[t] == SW_PIX_U16 ? 65535.0
                                                     : 1000.0;
        for (int c = 0; c < 8; c++) {
            sw_centroid_params p;
            random_params(&s, types[t], 500, c % 3 == 0, mask, &p);
            const size_t npix = (size_t)p.width * (size_t)p.height;
            float *dark = malloc(npix * sizeof(float)), *flat = malloc(npix * sizeof(float));
            assert_non_null(dark);
            assert_non_null(flat);
            for (size_t i = 0; i < npix; i++) {
                dark[i] = (float)(0.02 * full * rnd_u01(&s));
                flat[i] = (float)(0.8 + 0.4 * rnd_u01(&s));
            }
            double vmax = full; /* largest value after the LUT */
            if (types[t] != SW_PIX_F32 && (c & 1)) {
                const int n = types[t] == SW_PIX_U8 ? 256 : 65536;
                for (int i = 0; i < n; i++)
                    lut[i] = (float)(0.5 * i + 0.7 * full * pow(i / full, 2.0));
                vmax = 1.2 * full;
                p.lut = lut;
            }
            if (c != 3)
                p.dark = dark;
            if (c % 4 != 1)
                p.flat = flat;
            /* threshold: none, SUBTRACT / ZERO x ABSOLUTE / FRACTION */
            const int mode = c % 5;
            p.threshold_mode = mode == 0   ? SW_THRESHOLD_NONE
                               : mode <= 2 ? SW_THRESHOLD_SUBTRACT
                                           : SW_THRESHOLD_ZERO;
            p.threshold_kind = mode % 2 == 0 ? SW_THRESHOLD_FRACTION : SW_THRESHOLD_ABSOLUTE;
            p.threshold = p.threshold_kind == SW_THRESHOLD_FRACTION ? 0.3 : 0.25 * vmax;
            p.gamma = c % 3 == 1 ? 1.5 : 1.0;
            /* raw levels near the top (f32: pixels in [0, 1000)), dropped on some draws */
            p.saturation = c % 2 == 0 ? 0.0 : 0.998 * full;
            p.drop_saturated = c % 4 == 3;
            sw_image img = types[t] == SW_PIX_F32
                               ? random_f32(p.width, p.height, 7000 + c)
                               : sw_test_random_image(p.width, p.height, p.type, 300 + 11 * c + t);
            const size_t ps = sw_pixel_size(p.type), row = (size_t)p.width * ps;
            if (c % 2 == 0)
                cpu_vs_gpu("conditioned", &p, &img, SW_CENTROID_COPY, 0, 0, 0, 1e-4);
            else /* 1 byte off: byte loads (u16, f32); ps bytes off: scalar loads */
                cpu_vs_gpu("conditioned", &p, &img, SW_CENTROID_MAPPED, c % 4 == 1 ? ps : 1,
                           row + ps, 0, 1e-4);
            sw_image_free(&img);
            free(dark);
            free(flat);
        }
    }
}

/* f32 frames: a NaN pixel and an Inf pixel make their lenslets invalid on both backends; the
 * other lenslets agree. Vector (COPY) and scalar (DEVICE, 4 bytes off) loads. */
static void test_f32_nonfinite(void **state)
{
    (void)state;
    sw_centroid_params p;
    sw_centroid_params_default(&p);
    p.type = SW_PIX_F32;
    p.geometry.x0 = 2.5;
    p.geometry.y0 = 1.25;
    p.geometry.pitch_px = 13.7;
    p.geometry.nx = 9;
    p.geometry.ny = 7;
    p.width = 130;
    p.height = 100;
    sw_image img = random_f32(p.width, p.height, 42);
    /* NaN in lenslet (3, 2), Inf in lenslet (6, 5): their region centres */
    int32_t xb, xe, yb, ye;
    sw_sh_region(&p.geometry, 3, 2, &xb, &xe, &yb, &ye);
    ((float *)sw_image_row(&img, (yb + ye) / 2))[(xb + xe) / 2] = NAN;
    sw_sh_region(&p.geometry, 6, 5, &xb, &xe, &yb, &ye);
    ((float *)sw_image_row(&img, (yb + ye) / 2))[(xb + xe) / 2] = INFINITY;
    const int32_t bad[2] = {2 * 9 + 3, 5 * 9 + 6};
    for (int variant = 0; variant < 2; variant++) {
        sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
        sw_centroid_plan *pg =
            make_plan(gpu, &p, variant == 0 ? SW_CENTROID_COPY : SW_CENTROID_DEVICE);
        sw_centroid_result rc = host_result(pc, 1), rg = host_result(pg, 1);
        run_ok(pc, cpu, &img, &rc);
        sw_image pin = {0}, dev = {0}, vpin, vdev;
        if (variant == 0) {
            assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_F32, &pin), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &img, &pin), SW_OK);
            run_ok(pg, gpu, &pin, &rg);
        } else {
            awkward_copy(&img, 4, (size_t)p.width * 4 + 4, &pin, &dev, &vpin, &vdev);
            run_ok(pg, gpu, &vdev, &rg);
        }
        for (int b = 0; b < 2; b++) {
            assert_int_equal(rc.valid[bad[b]], 0);
            assert_int_equal(rg.valid[bad[b]], 0);
            assert_true(isnan(rg.x[bad[b]]) && isnan(rg.y[bad[b]]));
        }
        int nvalid = 0;
        for (int32_t l = 0; l < 63; l++)
            nvalid += rg.valid[l];
        assert_int_equal(nvalid, 61);
        expect_close("f32 with NaN / Inf", &rc, &rg, 1, 1e-4);
        sw_image_free(&pin);
        sw_image_free(&dev);
        sw_centroid_result_free(&rc);
        sw_centroid_result_free(&rg);
        sw_centroid_destroy(pc);
        sw_centroid_destroy(pg);
    }
    sw_image_free(&img);
}

/* Seed 000 section 5: white 8-bit images (255 everywhere) on the 20 configurations of Table 1
 * (RoI w in {100, 200, 500, 700, 1000}, d in {3.8, 11, 20, 29}, nx = ny = floor(w / d), origin 0)
 * give every lenslet the exact middle of its region, x = xb + (xe - xb - 1) / 2, on both
 * backends; intensity = 255 x pixels. */
static void test_white_table1(void **state)
{
    (void)state;
    const int ws[5] = {100, 200, 500, 700, 1000};
    const double ds[4] = {3.8, 11.0, 20.0, 29.0};
    for (int i = 0; i < 5; i++) {
        for (int j = 0; j < 4; j++) {
            sw_centroid_params p;
            sw_centroid_params_default(&p);
            p.width = p.height = ws[i];
            p.geometry.x0 = p.geometry.y0 = 0.0;
            p.geometry.pitch_px = ds[j];
            p.geometry.nx = p.geometry.ny = (int32_t)floor(ws[i] / ds[j]);
            sw_image img;
            assert_int_equal(sw_image_alloc(gpu, ws[i], ws[i], SW_PIX_U8, &img), SW_OK);
            for (int32_t y = 0; y < ws[i]; y++)
                memset(sw_image_row(&img, y), 255, (size_t)ws[i]);
            sw_image dimg;
            assert_int_equal(sw_image_alloc_device(gpu, ws[i], ws[i], SW_PIX_U8, &dimg), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &img, &dimg), SW_OK);
            sw_centroid_plan *plans[3] = {make_plan(cpu, &p, SW_CENTROID_HOST),
                                          make_plan(gpu, &p, SW_CENTROID_COPY),
                                          make_plan(gpu, &p, SW_CENTROID_DEVICE)};
            for (int k = 0; k < 3; k++) {
                sw_centroid_result r = host_result(plans[k], 1);
                run_ok(plans[k], k ? gpu : cpu, k == 2 ? &dimg : &img, &r);
                for (int32_t iy = 0; iy < p.geometry.ny; iy++)
                    for (int32_t ix = 0; ix < p.geometry.nx; ix++) {
                        int32_t xb, xe, yb, ye;
                        sw_sh_region(&p.geometry, ix, iy, &xb, &xe, &yb, &ye);
                        const int32_t l = iy * p.geometry.nx + ix;
                        const float cx = (float)(xb + (xe - xb - 1) / 2.0);
                        const float cy = (float)(yb + (ye - yb - 1) / 2.0);
                        if (!r.valid[l] || r.x[l] != cx || r.y[l] != cy ||
                            r.intensity[l] != (float)(255.0 * (xe - xb) * (ye - yb)))
                            fail_msg("w %d d %g (%s): lenslet (%d, %d) at (%.7f, %.7f), "
                                     "intensity %g, valid %d; expected (%.7f, %.7f)",
                                     ws[i], ds[j],
                                     sw_centroid_path_string(sw_centroid_plan_path(plans[k])), ix,
                                     iy, (double)r.x[l], (double)r.y[l], (double)r.intensity[l],
                                     r.valid[l], (double)cx, (double)cy);
                    }
                sw_centroid_result_free(&r);
                sw_centroid_destroy(plans[k]);
            }
            sw_image_free(&img);
            sw_image_free(&dimg);
        }
    }
}

/* A batch of frames equals the same frames run one by one (GPU, identical bits) and the CPU's
 * batch: exact u8 with a mask, and conditioned u16 with a FRACTION threshold. */
static void test_batches(void **state)
{
    (void)state;
    static uint8_t mask[4096];
    uint64_t s = 0xBA7C4;
    for (int variant = 0; variant < 2; variant++) {
        sw_centroid_params p;
        random_params(&s, variant == 0 ? SW_PIX_U8 : SW_PIX_U16, 400, variant == 0, mask, &p);
        const int32_t k = 6;
        if (variant == 1) {
            p.threshold_mode = SW_THRESHOLD_ZERO;
            p.threshold_kind = SW_THRESHOLD_FRACTION;
            p.threshold = 0.4;
            p.gamma = 0.8;
        }
        p.max_frames = k;
        sw_image stack = sw_test_random_image(p.width, k * p.height, p.type, 900 + variant);
        sw_image pstack;
        assert_int_equal(sw_image_alloc(gpu, p.width, k * p.height, p.type, &pstack), SW_OK);
        assert_int_equal(sw_image_copy(gpu, &stack, &pstack), SW_OK);
        sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
        sw_centroid_plan *pg = make_plan(gpu, &p, SW_CENTROID_COPY);
        sw_centroid_result rc = host_result(pc, k), rb = host_result(pg, k),
                           r1 = host_result(pg, k);
        run_ok(pc, cpu, &stack, &rc);
        run_ok(pg, gpu, &pstack, &rb);
        const size_t n = (size_t)rb.lenslets, ns = 2 * (size_t)rb.nslopes;
        for (int32_t f = 0; f < k; f++) {
            sw_image one;
            assert_int_equal(sw_image_roi(gpu, &pstack, 0, f * p.height, p.width, p.height, &one),
                             SW_OK);
            sw_centroid_result view = r1; /* frame f's slice of r1 */
            view.x += f * n;
            view.y += f * n;
            view.intensity += f * n;
            view.valid += f * n;
            view.saturated += f * n;
            view.slopes += f * ns;
            view.frames = 1;
            run_ok(pg, gpu, &one, &view);
        }
        expect_identical("batch vs frames one by one", &rb, &r1, k);
        if (variant == 0)
            expect_identical("batch vs CPU", &rc, &rb, k);
        else
            expect_close("batch vs CPU", &rc, &rb, k, 1e-4);
        sw_centroid_result_free(&rc);
        sw_centroid_result_free(&rb);
        sw_centroid_result_free(&r1);
        sw_centroid_destroy(pc);
        sw_centroid_destroy(pg);
        sw_image_free(&stack);
        sw_image_free(&pstack);
    }
}

/* 65 536 one-row frames of 1-pixel lenslets in one run: more frames than one launch grid holds
 * (65 535), all identical to the CPU. */
static void test_many_frames(void **state)
{
    (void)state;
    sw_centroid_params p;
    sw_centroid_params_default(&p);
    p.width = 8;
    p.height = 1;
    p.geometry.x0 = p.geometry.y0 = 0.0;
    p.geometry.pitch_px = 1.0;
    p.geometry.nx = 8;
    p.geometry.ny = 1;
    p.max_frames = 65536;
    sw_image stack = sw_test_random_image(8, 65536, SW_PIX_U8, 77);
    for (int32_t f = 0; f < 65536; f++) /* keep some pixels non-zero in every frame */
        ((uint8_t *)sw_image_row(&stack, f))[f % 8] |= 1;
    sw_image dstack;
    assert_int_equal(sw_image_alloc_device(gpu, 8, 65536, SW_PIX_U8, &dstack), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &stack, &dstack), SW_OK);
    sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
    sw_centroid_plan *pg = make_plan(gpu, &p, SW_CENTROID_DEVICE);
    sw_centroid_result rc = host_result(pc, 65536), rg = host_result(pg, 65536);
    run_ok(pc, cpu, &stack, &rc);
    memset(rg.valid, 7, (size_t)65536 * 8);
    run_ok(pg, gpu, &dstack, &rg);
    expect_identical("65536 frames", &rc, &rg, 65536);
    /* the last frame was written: its pixel 65535 % 8 = 7 is non-zero */
    assert_int_equal(rg.valid[(size_t)65535 * 8 + 7], 1);
    sw_centroid_result_free(&rc);
    sw_centroid_result_free(&rg);
    sw_centroid_destroy(pc);
    sw_centroid_destroy(pg);
    sw_image_free(&stack);
    sw_image_free(&dstack);
}

/* Copies a device result into a host one (through device / host image views). */
static void fetch(const sw_centroid_result *d, sw_centroid_result *h, int32_t frames)
{
    const int32_t n = frames * d->lenslets, ns = frames * 2 * d->nslopes;
    struct {
        void *src, *dst;
        int32_t count;
        sw_pixel_type t;
    } a[6] = {{d->x, h->x, n, SW_PIX_F32},
              {d->y, h->y, n, SW_PIX_F32},
              {d->intensity, h->intensity, n, SW_PIX_F32},
              {d->valid, h->valid, n, SW_PIX_U8},
              {d->slopes, h->slopes, ns, SW_PIX_F32},
              {d->saturated, h->saturated, n, SW_PIX_U8}};
    for (int k = 0; k < 6; k++) {
        if (!a[k].src || a[k].count == 0)
            continue;
        sw_image vs, vd;
        assert_int_equal(sw_image_wrap(a[k].src, a[k].count, 1, 0, a[k].t, SW_MEM_DEVICE, &vs),
                         SW_OK);
        assert_int_equal(sw_image_wrap(a[k].dst, a[k].count, 1, 0, a[k].t, SW_MEM_HOST, &vd),
                         SW_OK);
        assert_int_equal(sw_image_copy(gpu, &vs, &vd), SW_OK);
    }
}

/* The three memory paths, each into host, pinned and device results, interleaved slopes against a
 * reference set after create, and results holding only the slopes: all identical to the CPU. */
static void test_paths_and_results(void **state)
{
    (void)state;
    static uint8_t mask[4096];
    uint64_t s = 0x9A7B5;
    sw_centroid_params p;
    random_params(&s, SW_PIX_U8, 600, 1, mask, &p);
    p.geometry.pitch_px = 17.3;
    p.geometry.nx = 7;
    p.geometry.ny = 5;
    for (int32_t l = 0; l < 35; l++)
        mask[l] = l % 3 != 0;
    p.width = (int32_t)ceil(p.geometry.x0 + p.geometry.pitch_px * p.geometry.nx) + 3;
    p.height = (int32_t)ceil(p.geometry.y0 + p.geometry.pitch_px * p.geometry.ny) + 1;
    p.window = 1;
    p.slope_layout = SW_SLOPES_INTERLEAVED;
    const int32_t nl = p.geometry.nx * p.geometry.ny;
    double *rx = malloc((size_t)nl * sizeof(double)), *ry = malloc((size_t)nl * sizeof(double));
    assert_non_null(rx);
    assert_non_null(ry);
    for (int32_t l = 0; l < nl; l++) {
        rx[l] = p.geometry.x0 + p.geometry.pitch_px * (l % p.geometry.nx) + 8.0 * rnd_u01(&s);
        ry[l] = p.geometry.y0 + p.geometry.pitch_px * (l / p.geometry.nx) + 8.0 * rnd_u01(&s);
    }

    sw_image img = sw_test_random_image(p.width, p.height, SW_PIX_U8, 4242);
    sw_image pin, dev;
    assert_int_equal(sw_image_alloc(gpu, p.width, p.height, SW_PIX_U8, &pin), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &img, &pin), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, p.width, p.height, SW_PIX_U8, &dev), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &img, &dev), SW_OK);

    sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
    assert_int_equal(sw_centroid_set_reference(pc, rx, ry), SW_OK);
    sw_centroid_result rc = host_result(pc, 1);
    run_ok(pc, cpu, &img, &rc);
    /* the reference took effect: slope = centroid - reference */
    const int32_t ns = sw_centroid_plan_slopes(pc);
    assert_true(ns > 0 && ns < nl);
    for (int32_t k = 0; k < ns; k++) {
        const int32_t l = sw_centroid_plan_slope_lenslet(pc, k);
        if (rc.valid[l])
            assert_near(rc.slopes[2 * k], rc.x[l] - rx[l], 1e-4);
    }

    const sw_centroid_path paths[3] = {SW_CENTROID_DEVICE, SW_CENTROID_COPY, SW_CENTROID_MAPPED};
    const sw_memory mems[3] = {SW_MEM_HOST, SW_MEM_PINNED, SW_MEM_DEVICE};
    for (int a = 0; a < 3; a++) {
        sw_centroid_plan *pg = make_plan(gpu, &p, paths[a]);
        assert_int_equal(sw_centroid_set_reference(pg, rx, ry), SW_OK);
        const sw_image *in = paths[a] == SW_CENTROID_DEVICE ? &dev : &pin;
        for (int b = 0; b < 3; b++) {
            char label[96];
            snprintf(label, sizeof label, "%s path, %s results", sw_centroid_path_string(paths[a]),
                     mems[b] == SW_MEM_HOST     ? "host"
                     : mems[b] == SW_MEM_PINNED ? "pinned"
                                                : "device");
            sw_centroid_result r, h = host_result(pg, 1);
            assert_int_equal(sw_centroid_result_alloc(pg, 1, mems[b], &r), SW_OK);
            sw_centroid_enable_timing(pg, b == 2);
            run_ok(pg, gpu, in, &r);
            if (b == 2) {
                assert_true(sw_centroid_kernel_us(pg) > 0.0);
                fetch(&r, &h, 1);
            } else {
                assert_true(sw_centroid_kernel_us(pg) == -1.0);
                memcpy(h.x, r.x, (size_t)nl * sizeof(float));
                memcpy(h.y, r.y, (size_t)nl * sizeof(float));
                memcpy(h.intensity, r.intensity, (size_t)nl * sizeof(float));
                memcpy(h.valid, r.valid, (size_t)nl);
                memcpy(h.saturated, r.saturated, (size_t)nl);
                memcpy(h.slopes, r.slopes, 2 * (size_t)ns * sizeof(float));
            }
            expect_identical(label, &rc, &h, 1);

            /* only the slopes asked for */
            sw_centroid_result only = r;
            only.x = only.y = only.intensity = NULL;
            only.valid = only.saturated = NULL;
            float *hs = h.slopes;
            memset(hs, 0xFF, 2 * (size_t)ns * sizeof(float));
            if (b == 2) {
                sw_image z;
                assert_int_equal(
                    sw_image_wrap(r.slopes, 2 * ns, 1, 0, SW_PIX_F32, SW_MEM_DEVICE, &z), SW_OK);
                sw_image hz;
                assert_int_equal(sw_image_wrap(hs, 2 * ns, 1, 0, SW_PIX_F32, SW_MEM_HOST, &hz),
                                 SW_OK);
                assert_int_equal(sw_image_copy(gpu, &hz, &z), SW_OK); /* poison the device copy */
                run_ok(pg, gpu, in, &only);
                assert_int_equal(sw_image_copy(gpu, &z, &hz), SW_OK);
            } else {
                memset(r.slopes, 0xFF, 2 * (size_t)ns * sizeof(float));
                run_ok(pg, gpu, in, &only);
                memcpy(hs, r.slopes, 2 * (size_t)ns * sizeof(float));
            }
            if (memcmp(hs, rc.slopes, 2 * (size_t)ns * sizeof(float)) != 0)
                fail_msg("%s: a result with only slopes differs from the CPU's", label);
            sw_centroid_result_free(&r);
            sw_centroid_result_free(&h);
        }
        sw_centroid_destroy(pg);
    }
    free(rx);
    free(ry);
    sw_centroid_result_free(&rc);
    sw_centroid_destroy(pc);
    sw_image_free(&img);
    sw_image_free(&pin);
    sw_image_free(&dev);
}

/* ------------------------------------------------------------------ saturation */

/* Frame f of a stack of the default grid (10 x 10 lenslets of 16 px, 160 x 160 u8): in every
 * lenslet a symmetric 5 x 5 spot of peak 100 + l at its region's centre, except lenslet `hot`,
 * whose spot of peak 400 clips at 255; and a 255 pixel in lenslet 5's corner (80, 0), outside
 * the region of a window of 1. */
static void sat_frame(sw_image *img, int32_t f, int32_t hot)
{
    static const double k[5] = {0.25, 0.5, 1.0, 0.5, 0.25};
    for (int32_t y = 0; y < 160; y++)
        memset(sw_image_row(img, f * 160 + y), 0, 160);
    for (int32_t l = 0; l < 100; l++) {
        const double peak = l == hot ? 400.0 : 100.0 + l;
        for (int dy = -2; dy <= 2; dy++)
            for (int dx = -2; dx <= 2; dx++) {
                const double v = floor(peak * k[dx + 2] * k[dy + 2]);
                ((uint8_t *)sw_image_row(img, f * 160 + 16 * (l / 10) + 8 +
                                                  dy))[16 * (l % 10) + 8 + dx] =
                    (uint8_t)(v < 255.0 ? v : 255.0);
            }
    }
    ((uint8_t *)sw_image_row(img, f * 160))[80] = 255;
}

/* The flags sat_frame's frame (hot 23) must give under p: level 0 (255) or 150.5, window 0 or 1. */
static int sat_expected(const sw_centroid_params *p, int32_t l)
{
    const int corner = l == 5 && p->window == 0;
    if (p->saturation == 0.0)
        return l == 23 || corner;
    return l == 23 || corner || 100 + l >= 151;
}

/* One GPU run of `in` on plan pg into a result in `mem`, copied into the host result h. */
static void run_into_host(sw_centroid_plan *pg, const sw_image *in, sw_memory mem,
                          sw_centroid_result *h)
{
    sw_centroid_result r;
    assert_int_equal(sw_centroid_result_alloc(pg, 1, mem, &r), SW_OK);
    run_ok(pg, gpu, in, &r);
    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
    const size_t nl = (size_t)r.lenslets, ns = 2 * (size_t)r.nslopes;
    if (mem == SW_MEM_DEVICE) {
        fetch(&r, h, 1);
    } else {
        memcpy(h->x, r.x, nl * sizeof(float));
        memcpy(h->y, r.y, nl * sizeof(float));
        memcpy(h->intensity, r.intensity, nl * sizeof(float));
        memcpy(h->valid, r.valid, nl);
        memcpy(h->saturated, r.saturated, nl);
        memcpy(h->slopes, r.slopes, ns * sizeof(float));
    }
    sw_centroid_result_free(&r);
}

/*
 * centroid.h "Saturation" on every GPU path: the analytical frame of sat_frame (a spot clipped at
 * 255 on lenslet 23, a 255 pixel in lenslet 5's corner), with the default level and a level of
 * 150.5, window 0 and 1, kept and dropped, exact and conditioned sums: the CPU gives the expected
 * flags, and the copy, mapped and device paths into host, pinned and device results, and device
 * runs replayed from a CUDA graph (on two frames), give the CPU's results to the bit (exact) or
 * within 1e-4 px with the same flags (conditioned).
 */
static void test_saturation(void **state)
{
    (void)state;
    sw_image img, pin, dev;
    assert_int_equal(sw_image_alloc(cpu, 160, 160, SW_PIX_U8, &img), SW_OK);
    sat_frame(&img, 0, 23);
    assert_int_equal(sw_image_alloc(gpu, 160, 160, SW_PIX_U8, &pin), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &img, &pin), SW_OK);
    assert_int_equal(sw_image_alloc_device(gpu, 160, 160, SW_PIX_U8, &dev), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &img, &dev), SW_OK);
    for (int v = 0; v < 6; v++) {
        sw_centroid_params p;
        sw_centroid_params_default(&p);
        p.saturation = v < 3 ? 0.0 : 150.5;
        p.window = v % 3 == 2 ? 1 : 0;
        p.drop_saturated = v % 3 == 1;
        const int conditioned = v >= 4; /* floating-point sums, with the threshold's first pass */
        if (conditioned) {
            p.threshold_mode = SW_THRESHOLD_ZERO;
            p.threshold_kind = SW_THRESHOLD_FRACTION;
            p.threshold = 0.2;
        }
        char what[160];
        snprintf(what, sizeof what, "level %g, window %d, %s, %s", p.saturation, p.window,
                 p.drop_saturated ? "dropped" : "kept", conditioned ? "conditioned" : "exact");

        sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
        sw_centroid_result rc = host_result(pc, 1);
        run_ok(pc, cpu, &img, &rc);
        for (int32_t l = 0; l < 100; l++) {
            const int sat = sat_expected(&p, l);
            if (rc.saturated[l] != sat || rc.valid[l] != !(sat && p.drop_saturated))
                fail_msg("%s, CPU: lenslet %d saturated %d valid %d", what, l, rc.saturated[l],
                         rc.valid[l]);
        }

        const sw_centroid_path paths[3] = {SW_CENTROID_DEVICE, SW_CENTROID_COPY,
                                           SW_CENTROID_MAPPED};
        const sw_memory mems[3] = {SW_MEM_HOST, SW_MEM_PINNED, SW_MEM_DEVICE};
        for (int a = 0; a < 3; a++) {
            sw_centroid_plan *pg = make_plan(gpu, &p, paths[a]);
            for (int b = 0; b < 3; b++) {
                char label[256];
                snprintf(label, sizeof label, "%s: %s path, %s results", what,
                         sw_centroid_path_string(paths[a]),
                         mems[b] == SW_MEM_HOST     ? "host"
                         : mems[b] == SW_MEM_PINNED ? "pinned"
                                                    : "device");
                sw_centroid_result h = host_result(pg, 1);
                memset(h.saturated, 7, 100);
                run_into_host(pg, paths[a] == SW_CENTROID_DEVICE ? &dev : &pin, mems[b], &h);
                if (conditioned)
                    expect_close(label, &rc, &h, 1, 1e-4);
                else
                    expect_identical(label, &rc, &h, 1);
                sw_centroid_result_free(&h);
            }
            sw_centroid_destroy(pg);
        }

#ifdef SW_HAVE_CUDA
        /* the device path captured into a graph and replayed: on this frame, then on a frame
         * without the clipped spot written into the same device buffer */
        sw_centroid_plan *pg = make_plan(gpu, &p, SW_CENTROID_DEVICE);
        sw_centroid_result dr, h = host_result(pg, 1);
        assert_int_equal(sw_centroid_result_alloc(pg, 1, SW_MEM_DEVICE, &dr), SW_OK);
        cudaStream_t st = (cudaStream_t)sw_context_stream(gpu);
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        assert_int_equal(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        const sw_status e = sw_centroid_run(pg, &dev, &dr);
        assert_int_equal(cudaStreamEndCapture(st, &graph), cudaSuccess);
        assert_int_equal(e, SW_OK);
        assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        sw_image other;
        assert_int_equal(sw_image_alloc(cpu, 160, 160, SW_PIX_U8, &other), SW_OK);
        sat_frame(&other, 0, -1);
        for (int round = 0; round < 2; round++) {
            const sw_image *frame = round == 0 ? &img : &other;
            assert_int_equal(sw_image_copy(gpu, frame, &dev), SW_OK);
            assert_int_equal(sw_context_synchronize(gpu), SW_OK);
            memset(h.saturated, 7, 100);
            assert_int_equal(cudaGraphLaunch(exec, st), cudaSuccess);
            assert_int_equal(cudaStreamSynchronize(st), cudaSuccess);
            fetch(&dr, &h, 1);
            sw_centroid_result ro = host_result(pc, 1);
            run_ok(pc, cpu, frame, &ro);
            char label[200];
            snprintf(label, sizeof label, "%s, graph round %d", what, round);
            if (conditioned)
                expect_close(label, &ro, &h, 1, 1e-4);
            else
                expect_identical(label, &ro, &h, 1);
            assert_int_equal(h.saturated[23], round == 0);
            sw_centroid_result_free(&ro);
        }
        assert_int_equal(sw_image_copy(gpu, &img, &dev), SW_OK); /* for the next variant */
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        sw_image_free(&other);
        sw_centroid_result_free(&dr);
        sw_centroid_result_free(&h);
        sw_centroid_destroy(pg);
#endif
        sw_centroid_result_free(&rc);
        sw_centroid_destroy(pc);
    }
    sw_image_free(&img);
    sw_image_free(&pin);
    sw_image_free(&dev);
}

/*
 * COPY runs in bands of lenslet rows (sw_centroid_set_bands): the frame's rows copied band by
 * band on a stream of their own, each band's lenslets summed once its flag says its rows are in
 * (one kernel). Against the whole frame (one band): the same bits in every array, for band
 * counts that do not divide the lenslet rows, more bands than rows (clamped), windows (rows
 * between regions never copied), non-integer origins and pitches, frames taller than the grid,
 * exact and conditioned plans (dark, FRACTION threshold: its maximum pass reads the band's rows
 * too), pinned frames (banded) and pageable ones (whole), pinned, host and device results; and,
 * exact, the CPU's bits. Two frames in turn on one plan: a band never reads the previous frame's
 * rows.
 */
static void test_copy_bands(void **state)
{
    (void)state;
    static uint8_t mask[4096];
    uint64_t s = 0xBA4D5;
    static const int32_t counts[] = {2, 3, 5, 7, SW_CENTROID_MAX_BANDS};
    for (int c = 0; c < 12; c++) {
        const sw_pixel_type type = c % 3 == 2 ? SW_PIX_U16 : SW_PIX_U8;
        sw_centroid_params p;
        random_params(&s, type, 600, c % 4 == 1, mask, &p);
        if (c == 0) { /* a Table 1 like grid: pitch 3.8, many lenslet rows */
            p.geometry.pitch_px = 3.8;
            p.geometry.nx = p.geometry.ny = 120;
            p.geometry.x0 = p.geometry.y0 = 0.0;
            p.width = p.height = 457;
            p.window = 0;
        }
        const int exact = c % 2 == 0;
        const size_t npix = (size_t)p.width * (size_t)p.height;
        float *dark = malloc(npix * sizeof(float));
        assert_non_null(dark);
        for (size_t i = 0; i < npix; i++)
            dark[i] = (float)(3.0 * rnd_u01(&s));
        if (!exact) {
            p.dark = dark;
            p.threshold_mode = SW_THRESHOLD_SUBTRACT;
            p.threshold_kind = SW_THRESHOLD_FRACTION;
            p.threshold = 0.3;
        }
        sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
        sw_centroid_plan *pg = make_plan(gpu, &p, SW_CENTROID_COPY);
        assert_true(sw_centroid_plan_fast(pg));
        sw_image host[2], pin[2];
        sw_centroid_result rc[2], ref[2], rp, rh, rd, got;
        for (int f = 0; f < 2; f++) {
            host[f] = sw_test_random_image(p.width, p.height, p.type, 900 + 2 * c + f);
            assert_int_equal(sw_image_alloc(gpu, p.width, p.height, p.type, &pin[f]), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &host[f], &pin[f]), SW_OK);
            rc[f] = host_result(pc, 1);
            ref[f] = host_result(pg, 1);
            run_ok(pc, cpu, &host[f], &rc[f]);
        }
        /* the reference: one band */
        assert_int_equal(sw_centroid_set_bands(pg, 1), SW_OK);
        assert_int_equal(sw_centroid_plan_bands(pg), 1);
        for (int f = 0; f < 2; f++) {
            run_ok(pg, gpu, &pin[f], &ref[f]);
            if (exact)
                expect_identical("one band vs the CPU", &rc[f], &ref[f], 1);
            else
                expect_close("one band vs the CPU", &rc[f], &ref[f], 1, 1e-4);
        }
        assert_int_equal(sw_centroid_result_alloc(pg, 1, SW_MEM_PINNED, &rp), SW_OK);
        assert_int_equal(sw_centroid_result_alloc(pg, 1, SW_MEM_DEVICE, &rd), SW_OK);
        rh = host_result(pg, 1);
        got = host_result(pg, 1);
        for (size_t b = 0; b <= sizeof counts / sizeof counts[0]; b++) {
            const int32_t want = b < sizeof counts / sizeof counts[0] ? counts[b] : 0; /* 0: auto */
            assert_int_equal(sw_centroid_set_bands(pg, want), SW_OK);
            const int32_t nb = sw_centroid_plan_bands(pg);
            if (want > 0)
                assert_int_equal(nb, want < p.geometry.ny ? want : p.geometry.ny);
            for (int r = 0; r < 3; r++) {
                const int f = (int)(b + (size_t)r) % 2; /* the frames in turn */
                const sw_image *in = (b + (size_t)r) % 3 == 2 ? &host[f] : &pin[f];
                sw_centroid_result *out = r == 0 ? &rp : r == 1 ? &rh : &rd;
                run_ok(pg, gpu, in, out);
                if (r == 2) {
                    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
                    fetch(&rd, &got, 1);
                }
                char what[200];
                snprintf(what, sizeof what,
                         "%d bands (%d asked), %s %s frame, %s results, %dx%d lenslets of %.3f px, "
                         "window %d, %s",
                         (int)nb, (int)want, sw_pixel_type_string(p.type),
                         in == &host[f] ? "pageable" : "pinned",
                         r == 0   ? "pinned"
                         : r == 1 ? "host"
                                  : "device",
                         p.geometry.nx, p.geometry.ny, p.geometry.pitch_px, p.window,
                         exact ? "exact" : "conditioned");
                expect_identical(what, &ref[f], r == 2 ? &got : out, 1);
            }
        }
        for (int f = 0; f < 2; f++) {
            sw_image_free(&host[f]);
            sw_image_free(&pin[f]);
            sw_centroid_result_free(&rc[f]);
            sw_centroid_result_free(&ref[f]);
        }
        sw_centroid_result_free(&rp);
        sw_centroid_result_free(&rh);
        sw_centroid_result_free(&rd);
        sw_centroid_result_free(&got);
        sw_centroid_destroy(pc);
        sw_centroid_destroy(pg);
        free(dark);
    }
    /* the count is checked; off the COPY path the runs take the whole frame */
    sw_centroid_params p;
    random_params(&s, SW_PIX_U8, 200, 0, mask, &p);
    sw_centroid_plan *pd = make_plan(gpu, &p, SW_CENTROID_DEVICE);
    assert_int_equal(sw_centroid_set_bands(pd, -1), SW_EINVAL);
    assert_int_equal(sw_centroid_set_bands(pd, SW_CENTROID_MAX_BANDS + 1), SW_EINVAL);
    assert_int_equal(sw_centroid_set_bands(NULL, 2), SW_EINVAL);
    assert_int_equal(sw_centroid_set_bands(pd, 4), SW_OK);
    assert_int_equal(sw_centroid_plan_bands(pd), 1);
    sw_centroid_destroy(pd);
}

/* Where a host-to-host run's bytes go (centroid_cuda.cu cg_sizes): pinned results in
 * sw_centroid_result_alloc's block above 768 KB come back by the copy engine, one copy per run of
 * arrays, and the AUTO path reads a pinned frame of at most 256 KB in place. A 1000^2 u8 frame at
 * a 3.8 px pitch (69 169 lenslets, 1.5 MB of results) and a 400^2 one (160 KB frame, 240 KB of
 * results), each with the choices as they fall and forced the other way through the environment
 * (SPOTWAVE_CENTROID_COPY_BLOCK, _MAP_FRAMES), into the block of exactly one frame and into a
 * two-frame result (not the run's layout: written in place): the CPU's results, bit for bit, from
 * an AUTO plan with a pinned frame. */
static void test_auto_sizes(void **state)
{
    (void)state;
    for (int big = 0; big < 2; big++)
        for (int forced = 0; forced < 2; forced++) {
            if (forced) {
                setenv("SPOTWAVE_CENTROID_COPY_BLOCK", big ? "inf" : "0", 1);
                setenv("SPOTWAVE_CENTROID_MAP_FRAMES", big ? "inf" : "0", 1);
            } else {
                unsetenv("SPOTWAVE_CENTROID_COPY_BLOCK");
                unsetenv("SPOTWAVE_CENTROID_MAP_FRAMES");
            }
            const int32_t w = big ? 1000 : 400;
            sw_centroid_params p;
            sw_centroid_params_default(&p);
            p.width = p.height = w;
            p.type = SW_PIX_U8;
            p.geometry.pitch_px = 3.8;
            p.geometry.nx = p.geometry.ny = (int32_t)(w / 3.8);
            p.geometry.x0 = p.geometry.y0 = 0.0;
            sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
            sw_centroid_plan *pg = NULL;
            p.path = SW_CENTROID_AUTO;
            if (sw_centroid_create(gpu, &p, &pg) != SW_OK)
                fail_msg("sw_centroid_create (auto): %s", sw_context_error(gpu));
            assert_int_equal(sw_centroid_plan_path(pg), SW_CENTROID_COPY);
            sw_image host =
                sw_test_random_image(w, w, SW_PIX_U8, 77 + (uint64_t)(2 * big + forced));
            sw_image pin;
            assert_int_equal(sw_image_alloc(gpu, w, w, SW_PIX_U8, &pin), SW_OK);
            assert_int_equal(sw_image_copy(gpu, &host, &pin), SW_OK);
            sw_centroid_result rc = host_result(pc, 1), rp, r2;
            assert_int_equal(sw_centroid_result_alloc(pg, 1, SW_MEM_PINNED, &rp), SW_OK);
            assert_int_equal(sw_centroid_result_alloc(pg, 2, SW_MEM_PINNED, &r2), SW_OK);
            run_ok(pc, cpu, &host, &rc);
            for (int rep = 0; rep < 3;
                 rep++) { /* the block twice (buffers reused), then 2 frames */
                sw_centroid_result *r = rep < 2 ? &rp : &r2;
                memset(r->x, 0xFF, (size_t)r->lenslets * sizeof(float));
                memset(r->valid, 0xFF, (size_t)r->lenslets);
                run_ok(pg, gpu, &pin, r);
                char label[128];
                snprintf(label, sizeof label, "%d^2 u8 at 3.8 px, AUTO, pinned %s, %s, run %d", w,
                         rep < 2 ? "block" : "2-frame result",
                         forced ? "forced the other way" : "as chosen", rep);
                expect_identical(label, &rc, r, 1);
            }
            sw_centroid_result_free(&rc);
            sw_centroid_result_free(&rp);
            sw_centroid_result_free(&r2);
            sw_image_free(&pin);
            sw_image_free(&host);
            sw_centroid_destroy(pc);
            sw_centroid_destroy(pg);
        }
    unsetenv("SPOTWAVE_CENTROID_COPY_BLOCK");
    unsetenv("SPOTWAVE_CENTROID_MAP_FRAMES");

    /* a batch: a plan of 3 frames run on 2 (the device block laid out for 2 inside the one made
     * for 3) into a pinned block of exactly 2 frames (3 MB: copied back), and of 3 (written in
     * place); both frames the CPU's */
    {
        sw_centroid_params p;
        sw_centroid_params_default(&p);
        p.width = p.height = 1000;
        p.type = SW_PIX_U8;
        p.geometry.pitch_px = 3.8;
        p.geometry.nx = p.geometry.ny = 263;
        p.geometry.x0 = p.geometry.y0 = 0.0;
        p.max_frames = 3;
        sw_centroid_plan *pc = make_plan(cpu, &p, SW_CENTROID_HOST);
        sw_centroid_plan *pg = make_plan(gpu, &p, SW_CENTROID_COPY);
        sw_image host = sw_test_random_image(1000, 2000, SW_PIX_U8, 4711), pin;
        assert_int_equal(sw_image_alloc(gpu, 1000, 2000, SW_PIX_U8, &pin), SW_OK);
        assert_int_equal(sw_image_copy(gpu, &host, &pin), SW_OK);
        sw_centroid_result rc = host_result(pc, 2), r2, r3;
        assert_int_equal(sw_centroid_result_alloc(pg, 2, SW_MEM_PINNED, &r2), SW_OK);
        assert_int_equal(sw_centroid_result_alloc(pg, 3, SW_MEM_PINNED, &r3), SW_OK);
        run_ok(pc, cpu, &host, &rc);
        run_ok(pg, gpu, &pin, &r2);
        expect_identical("a batch of 2 frames into a 2-frame block", &rc, &r2, 2);
        run_ok(pg, gpu, &pin, &r3);
        expect_identical("a batch of 2 frames into a 3-frame block", &rc, &r3, 2);
        sw_centroid_result_free(&rc);
        sw_centroid_result_free(&r2);
        sw_centroid_result_free(&r3);
        sw_image_free(&pin);
        sw_image_free(&host);
        sw_centroid_destroy(pc);
        sw_centroid_destroy(pg);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_random),      cmocka_unit_test(test_conditioned_random),
        cmocka_unit_test(test_f32_nonfinite),     cmocka_unit_test(test_white_table1),
        cmocka_unit_test(test_batches),           cmocka_unit_test(test_many_frames),
        cmocka_unit_test(test_paths_and_results), cmocka_unit_test(test_saturation),
        cmocka_unit_test(test_copy_bands),        cmocka_unit_test(test_auto_sizes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
