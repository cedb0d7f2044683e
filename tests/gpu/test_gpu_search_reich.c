/*
 * Reichenbach's centroid algorithm on the GPU (search_reich_cuda.cu) against the CPU
 * (search_reich.c), one plan per backend from the same parameters (search.h "Reichenbach", seed
 * 001 Sec. 3.2.2): x, y, intensity and status identical to the last bit, and the same peak
 * count, on
 *   - SH frames (defocus, a corneal reflection, noise) as u8, u16 and f32, with odd sizes
 *     (partial tiles) and non-integer grids; the automatic threshold and low explicit ones
 *     (many noise peaks: conflicts, long growth); peak boxes 3, 13 and 63; seeds of 1 and 15;
 *     capture radii of 4 px to two pitches; inactive spots and non-finite starts; NaN and Inf
 *     pixels in f32 frames; empty frames;
 *   - device frames with a stride wider than a row, device arrays (sw_reich_run_gpu); host and
 *     device arrays through sw_search_run;
 *   - one GPU plan run on several frames in turn (nothing left over from the previous run),
 *     also a full frame, an empty one and the full one again, with the automatic and an
 *     explicit threshold;
 *   - the growth cut by the round limit (a serpentine of active spots much longer than
 *     nx + ny + seed_size rounds), the seed block at a grid corner, a small frame;
 *   - large grids: 60 x 60 with wide capture radii (many conflicts, long frontiers); 90 x 90
 *     spots and 20 x 20 spots on 2000 x 2000 frames with boxes 13 and 3, so that the rounds
 *     kernel keeps its spot state and its cell bits in shared or in global memory, each way
 *     (any device: 90 x 90 spots need 275 kB, more than a block's shared memory; box 3 on
 *     2000 x 2000 pixels gives 10^6 cells, 256 kB of bits).
 * Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "centroid/search_internal.h"
#include "spotwave/search.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef SW_HAVE_CUDA

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
    assert_true(r.x && r.y && r.in && r.st);
    for (int32_t k = 0; k < n; k++) {
        r.x[k] = r.y[k] = r.in[k] = -7.0;
        r.st[k] = 99;
    }
    return r;
}

static void result_free(result *r)
{
    free(r->x);
    free(r->y);
    free(r->in);
    free(r->st);
}

/* Equal to the bit, or both NaN. */
static void same_doubles(const double *a, const double *b, int32_t n, const char *what)
{
    for (int32_t k = 0; k < n; k++) {
        if (isnan(a[k]) && isnan(b[k]))
            continue;
        if (memcmp(&a[k], &b[k], sizeof(double)) != 0)
            fail_msg("%s[%d]: CPU %.17g, GPU %.17g", what, k, a[k], b[k]);
    }
}

static void same_result(const result *c, const result *g)
{
    for (int32_t k = 0; k < c->n; k++)
        if (c->st[k] != g->st[k])
            fail_msg("status[%d]: CPU %d, GPU %d", k, c->st[k], g->st[k]);
    same_doubles(c->x, g->x, c->n, "x");
    same_doubles(c->y, g->y, c->n, "y");
    same_doubles(c->in, g->in, c->n, "intensity");
}

/* A contiguous device buffer of at least `bytes` bytes (a u8 device image of 4096-byte rows),
 * and copies of up to 65536 bytes to and from such buffers. */
static sw_image dev_buffer(size_t bytes)
{
    sw_image d;
    int32_t rows = (int32_t)((bytes + 4095) / 4096);
    assert_int_equal(sw_image_alloc_device(gpu, 4096, rows > 0 ? rows : 1, SW_PIX_U8, &d), SW_OK);
    assert_int_equal(d.stride, 4096);
    return d;
}

static void copy_bytes(const void *src, sw_memory sm, void *dst, sw_memory dm, size_t bytes)
{
    sw_image s, d;
    assert_int_equal(sw_image_wrap((void *)src, (int32_t)bytes, 1, 0, SW_PIX_U8, sm, &s), SW_OK);
    assert_int_equal(sw_image_wrap(dst, (int32_t)bytes, 1, 0, SW_PIX_U8, dm, &d), SW_OK);
    assert_int_equal(sw_image_copy(gpu, &s, &d), SW_OK);
}

/* A device copy of a host frame with a row stride `pad` bytes wider than tight. The owner of the
 * memory is returned in *own (free it), the view (owned 0) as the result. */
static sw_image device_frame(const sw_image *host, size_t pad, sw_image *own)
{
    size_t row = (size_t)host->width * sw_pixel_size(host->type);
    size_t stride = row + pad;
    *own = dev_buffer(stride * (size_t)host->height);
    sw_image v;
    assert_int_equal(
        sw_image_wrap(own->data, host->width, host->height, stride, host->type, SW_MEM_DEVICE, &v),
        SW_OK);
    assert_int_equal(sw_image_copy(gpu, host, &v), SW_OK);
    return v;
}

/* The SH frame: an nx x ny grid of pitch 16.37 px from (21.3, 17.8) in a w x h frame, Gaussian
 * spots (sigma 1.7), defocus c4 (um), a corneal reflection (20 x a spot's peak) 5 px beside the
 * centre spot, and uniform noise of `noise` electrons; f32, in electrons. Starts: the references.
 */
typedef struct scene {
    int32_t w, h, nx, ny;
    sw_image f32;
    double *sx, *sy;
    double peak; /* the brightest pixel */
} scene;

static scene make_scene(int32_t w, int32_t h, int32_t nx, int32_t ny, double c4, double noise,
                        uint64_t seed)
{
    scene s;
    s.w = w;
    s.h = h;
    s.nx = nx;
    s.ny = ny;
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = w;
    sp.height = h;
    sp.geom.nx = nx;
    sp.geom.ny = ny;
    sp.geom.pitch_px = 16.37;
    sp.geom.x0 = 21.3;
    sp.geom.y0 = 17.8;
    sp.sigma_px = 1.7;
    sp.flux_e = 3e4;
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, &sp, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    double coef[5] = {0.0, 0.0, 0.0, 0.0, c4};
    double radius = 0.5 * (nx > ny ? nx : ny) * sp.geom.pitch_px * sp.geom.pixel_um;
    assert_int_equal(sw_shsim_add_zernike(sim, coef, 5, radius), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, w, h, SW_PIX_F32, &s.f32), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &s.f32, 0), SW_OK);
    sw_sh_truth t;
    assert_int_equal(sw_shsim_truth(sim, &t), SW_OK);
    sw_shsim_destroy(sim);
    size_t n = (size_t)nx * (size_t)ny;
    s.sx = malloc(n * sizeof(double));
    s.sy = malloc(n * sizeof(double));
    assert_true(s.sx && s.sy);
    memcpy(s.sx, t.ref_x_px, n * sizeof(double));
    memcpy(s.sy, t.ref_y_px, n * sizeof(double));

    /* the reflection, beside the centre spot */
    int32_t kc = (ny / 2) * nx + nx / 2;
    double rx = t.x_px[kc] + 5.0, ry = t.y_px[kc] + 1.3, top = 0.0;
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            float *p = (float *)sw_image_row(&s.f32, y) + x;
            top = fmax(top, *p);
        }
    sw_image nz = sw_test_random_image(w, h, SW_PIX_U16, seed);
    s.peak = 0.0;
    for (int32_t y = 0; y < h; y++)
        for (int32_t x = 0; x < w; x++) {
            float *p = (float *)sw_image_row(&s.f32, y) + x;
            double d2 = (x - rx) * (x - rx) + (y - ry) * (y - ry);
            double u = ((const uint16_t *)sw_image_row(&nz, y))[x] / 65535.0;
            *p = (float)(*p + 20.0 * top * exp(-d2 / 3.0) + noise * u);
            s.peak = fmax(s.peak, *p);
        }
    sw_image_free(&nz);
    sw_sh_truth_free(&t);
    return s;
}

static void scene_free(scene *s)
{
    sw_image_free(&s->f32);
    free(s->sx);
    free(s->sy);
}

/* The scene's frame as type t: f32 as is, integers scaled so that the brightest pixel is the
 * type's top (the reflection saturates nothing). */
static sw_image as_type(const scene *s, sw_pixel_type t)
{
    sw_image out;
    assert_int_equal(sw_image_alloc(cpu, s->w, s->h, t, &out), SW_OK);
    double top = t == SW_PIX_U8 ? 255.0 : t == SW_PIX_U16 ? 65535.0 : s->peak;
    assert_int_equal(sw_image_convert(cpu, &s->f32, &out, top / s->peak, 0.0, NULL), SW_OK);
    return out;
}

static sw_search_params rparams(const scene *s, sw_pixel_type t)
{
    sw_search_params p;
    sw_search_params_default(&p, s->w, s->h, s->nx * s->ny);
    p.algorithm = SW_SEARCH_REICHENBACH;
    p.type = t;
    p.nx = s->nx;
    p.ny = s->ny;
    p.pitch_px = 16.37;
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

/*
 * One comparison: the CPU plan on the host frame, the GPU plan on a device copy (stride padded)
 * with device arrays (active NULL or given). Returns the CPU's peak count.
 */
static int64_t compare(const sw_search_params *p, const sw_image *frame, const double *sx,
                       const double *sy, const uint8_t *active)
{
    const int32_t n = p->nspots;
    const size_t nd = (size_t)n * sizeof(double);
    sw_reich *rc = make(cpu, p), *rg = make(gpu, p);
    result c = result_new(n), g = result_new(n);
    if (sw_reich_run_cpu(rc, frame, sx, sy, active, c.x, c.y, c.in, c.st) != SW_OK)
        fail_msg("CPU run: %s", sw_context_error(cpu));

    sw_image own;
    sw_image df = device_frame(frame, 64 + 3 * sw_pixel_size(frame->type), &own);
    sw_image dsx = dev_buffer(nd), dsy = dev_buffer(nd), dx = dev_buffer(nd), dy = dev_buffer(nd),
             din = dev_buffer(nd), dst = dev_buffer((size_t)n), dact = dev_buffer((size_t)n);
    copy_bytes(sx, SW_MEM_HOST, dsx.data, SW_MEM_DEVICE, nd);
    copy_bytes(sy, SW_MEM_HOST, dsy.data, SW_MEM_DEVICE, nd);
    if (active)
        copy_bytes(active, SW_MEM_HOST, dact.data, SW_MEM_DEVICE, (size_t)n);
    if (sw_reich_run_gpu(rg, &df, dsx.data, dsy.data, active ? dact.data : NULL, dx.data, dy.data,
                         din.data, dst.data) != SW_OK)
        fail_msg("GPU run: %s", sw_context_error(gpu));
    int64_t peaks = sw_reich_last_peaks(rg); /* waits for the stream */
    copy_bytes(dx.data, SW_MEM_DEVICE, g.x, SW_MEM_HOST, nd);
    copy_bytes(dy.data, SW_MEM_DEVICE, g.y, SW_MEM_HOST, nd);
    copy_bytes(din.data, SW_MEM_DEVICE, g.in, SW_MEM_HOST, nd);
    copy_bytes(dst.data, SW_MEM_DEVICE, g.st, SW_MEM_HOST, (size_t)n);

    int64_t cp = sw_reich_last_peaks(rc);
    if (cp != peaks)
        fail_msg("peaks: CPU %lld, GPU %lld", (long long)cp, (long long)peaks);
    same_result(&c, &g);

    sw_image_free(&own);
    sw_image_free(&dsx);
    sw_image_free(&dsy);
    sw_image_free(&dx);
    sw_image_free(&dy);
    sw_image_free(&din);
    sw_image_free(&dst);
    sw_image_free(&dact);
    result_free(&c);
    result_free(&g);
    sw_reich_destroy(rc);
    sw_reich_destroy(rg);
    return cp;
}

/* ---------------------------------------------------------------- tests */

/* u8, u16, f32; automatic and explicit thresholds; boxes, seeds, captures. */
static void test_types_and_parameters(void **state)
{
    (void)state;
    scene s = make_scene(333, 251, 18, 14, -1.2, 600.0, 11);
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    struct {
        int32_t box, seed;
        double thr_frac; /* explicit threshold as a fraction of the type's top; 0: automatic */
        double capture;
    } cfg[] = {
        {13, 5, 0.0, 0.0},  {13, 5, 0.01, 0.0},   {3, 5, 0.005, 0.0},
        {63, 5, 0.0, 0.0},  {13, 1, 0.0, 0.0},    {13, 15, 0.0, 0.0},
        {5, 3, 0.003, 4.0}, {13, 5, 0.002, 32.7}, {7, 5, 0.0, 12.0},
    };
    for (int t = 0; t < 3; t++) {
        sw_image f = as_type(&s, types[t]);
        double top = types[t] == SW_PIX_U8 ? 255.0 : types[t] == SW_PIX_U16 ? 65535.0 : s.peak;
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            sw_search_params p = rparams(&s, types[t]);
            p.peak_box = cfg[c].box;
            p.seed_size = cfg[c].seed;
            p.peak_threshold = cfg[c].thr_frac * top;
            p.capture_px = cfg[c].capture;
            int64_t peaks = compare(&p, &f, s.sx, s.sy, NULL);
            assert_true(peaks > 0);
        }
        sw_image_free(&f);
    }
    scene_free(&s);
}

/* Inactive spots, non-finite starts, NaN / Inf pixels (f32), an empty frame. */
static void test_spots_and_pixels(void **state)
{
    (void)state;
    scene s = make_scene(301, 262, 16, 14, 0.9, 300.0, 12);
    const int32_t n = s.nx * s.ny;
    uint8_t *act = malloc((size_t)n);
    for (int32_t k = 0; k < n; k++)
        act[k] = (uint8_t)(k % 7 != 3);
    s.sx[5] = NAN;
    s.sy[n - 9] = -INFINITY;
    sw_image f = as_type(&s, SW_PIX_F32);
    for (int32_t i = 0; i < 40; i++) {
        int32_t x = (i * 97 + 13) % s.w, y = (i * 61 + 7) % s.h;
        ((float *)sw_image_row(&f, y))[x] = i % 3 == 0 ? INFINITY : (i % 3 == 1 ? -INFINITY : NAN);
    }
    sw_search_params p = rparams(&s, SW_PIX_F32);
    compare(&p, &f, s.sx, s.sy, act);
    compare(&p, &f, s.sx, s.sy, NULL);
    p.peak_threshold = 0.01 * s.peak;
    compare(&p, &f, s.sx, s.sy, act);

    sw_image z;
    assert_int_equal(sw_image_alloc(cpu, s.w, s.h, SW_PIX_U16, &z), SW_OK);
    p = rparams(&s, SW_PIX_U16);
    assert_int_equal(compare(&p, &z, s.sx, s.sy, act), 0);
    sw_image_free(&z);
    sw_image_free(&f);
    free(act);
    scene_free(&s);
}

/* A large grid (many rounds: 60 x 60 spots) on a noisy u16 frame. */
static void test_large(void **state)
{
    (void)state;
    scene s = make_scene(1040, 1030, 60, 60, -3.0, 300.0, 13);
    sw_image f = as_type(&s, SW_PIX_U16);
    sw_search_params p = rparams(&s, SW_PIX_U16);
    int64_t peaks = compare(&p, &f, s.sx, s.sy, NULL);
    assert_true(peaks >= 3000);
    p.peak_threshold = 0.004 * 65535.0;
    compare(&p, &f, s.sx, s.sy, NULL);
    sw_image_free(&f);
    scene_free(&s);
}

/* One GPU plan, several frames in turn (u8): each as the CPU; then the public API with host and
 * device arrays and frames, against the CPU plan's public run. */
static void test_reuse_and_api(void **state)
{
    (void)state;
    scene a = make_scene(320, 300, 17, 16, -1.0, 500.0, 21);
    scene b = make_scene(320, 300, 17, 16, 1.4, 900.0, 22);
    const int32_t n = a.nx * a.ny;
    const size_t nd = (size_t)n * sizeof(double);
    sw_image fa = as_type(&a, SW_PIX_U8), fb = as_type(&b, SW_PIX_U8);
    sw_search_params p = rparams(&a, SW_PIX_U8);

    sw_reich *rc = make(cpu, &p), *rg = make(gpu, &p);
    sw_image owna, ownb;
    sw_image da = device_frame(&fa, 0, &owna), db = device_frame(&fb, 5, &ownb);
    sw_image dsx = dev_buffer(nd), dsy = dev_buffer(nd), dx = dev_buffer(nd), dy = dev_buffer(nd),
             din = dev_buffer(nd), dst = dev_buffer((size_t)n);
    copy_bytes(a.sx, SW_MEM_HOST, dsx.data, SW_MEM_DEVICE, nd);
    copy_bytes(a.sy, SW_MEM_HOST, dsy.data, SW_MEM_DEVICE, nd);
    const sw_image *hf[3] = {&fa, &fb, &fa}, *df[3] = {&da, &db, &da};
    for (int i = 0; i < 3; i++) {
        result c = result_new(n), g = result_new(n);
        assert_int_equal(sw_reich_run_cpu(rc, hf[i], a.sx, a.sy, NULL, c.x, c.y, c.in, c.st),
                         SW_OK);
        assert_int_equal(sw_reich_run_gpu(rg, df[i], dsx.data, dsy.data, NULL, dx.data, dy.data,
                                          din.data, dst.data),
                         SW_OK);
        copy_bytes(dx.data, SW_MEM_DEVICE, g.x, SW_MEM_HOST, nd);
        copy_bytes(dy.data, SW_MEM_DEVICE, g.y, SW_MEM_HOST, nd);
        copy_bytes(din.data, SW_MEM_DEVICE, g.in, SW_MEM_HOST, nd);
        copy_bytes(dst.data, SW_MEM_DEVICE, g.st, SW_MEM_HOST, (size_t)n);
        assert_int_equal(sw_reich_last_peaks(rg), sw_reich_last_peaks(rc));
        same_result(&c, &g);
        result_free(&c);
        result_free(&g);
    }
    sw_reich_destroy(rc);
    sw_reich_destroy(rg);

    /* The public API: the CPU plan's run against the GPU plan's with host arrays (host frame)
     * and with device arrays (device frame). */
    sw_search_plan *pc = NULL, *pg = NULL;
    assert_int_equal(sw_search_create(cpu, &p, &pc), SW_OK);
    assert_int_equal(sw_search_create(gpu, &p, &pg), SW_OK);
    result c = result_new(n), h = result_new(n), d = result_new(n);
    assert_int_equal(sw_search_run(pc, &fb, a.sx, a.sy, NULL, SW_MEM_HOST, c.x, c.y, c.in, c.st),
                     SW_OK);
    assert_int_equal(sw_search_run(pg, &fb, a.sx, a.sy, NULL, SW_MEM_HOST, h.x, h.y, h.in, h.st),
                     SW_OK);
    assert_int_equal(sw_search_last_peaks(pg), sw_search_last_peaks(pc));
    same_result(&c, &h);
    assert_int_equal(sw_search_run(pg, &db, dsx.data, dsy.data, NULL, SW_MEM_DEVICE, dx.data,
                                   dy.data, din.data, dst.data),
                     SW_OK);
    assert_int_equal(sw_context_synchronize(gpu), SW_OK);
    copy_bytes(dx.data, SW_MEM_DEVICE, d.x, SW_MEM_HOST, nd);
    copy_bytes(dy.data, SW_MEM_DEVICE, d.y, SW_MEM_HOST, nd);
    copy_bytes(din.data, SW_MEM_DEVICE, d.in, SW_MEM_HOST, nd);
    copy_bytes(dst.data, SW_MEM_DEVICE, d.st, SW_MEM_HOST, (size_t)n);
    assert_int_equal(sw_search_last_peaks(pg), sw_search_last_peaks(pc));
    same_result(&c, &d);
    assert_true(sw_search_last_peaks(pc) > n / 2);
    result_free(&c);
    result_free(&h);
    result_free(&d);
    sw_search_destroy(pc);
    sw_search_destroy(pg);

    sw_image_free(&owna);
    sw_image_free(&ownb);
    sw_image_free(&dsx);
    sw_image_free(&dsy);
    sw_image_free(&dx);
    sw_image_free(&dy);
    sw_image_free(&din);
    sw_image_free(&dst);
    sw_image_free(&fa);
    sw_image_free(&fb);
    scene_free(&a);
    scene_free(&b);
}

/* Runs of the CPU plan and of one GPU plan on host frames in turn (the public API, host
 * arrays): the same results and peak counts each time. Returns the CPU's number of SW_SPOT_OK
 * spots of the last frame. */
static int32_t compare_sequence(const sw_search_params *p, const sw_image *const *frames, int nf,
                                const double *sx, const double *sy, const uint8_t *active)
{
    const int32_t n = p->nspots;
    sw_search_plan *pc = NULL, *pg = NULL;
    assert_int_equal(sw_search_create(cpu, p, &pc), SW_OK);
    assert_int_equal(sw_search_create(gpu, p, &pg), SW_OK);
    int32_t ok = 0;
    for (int i = 0; i < nf; i++) {
        result c = result_new(n), g = result_new(n);
        assert_int_equal(
            sw_search_run(pc, frames[i], sx, sy, active, SW_MEM_HOST, c.x, c.y, c.in, c.st), SW_OK);
        assert_int_equal(
            sw_search_run(pg, frames[i], sx, sy, active, SW_MEM_HOST, g.x, g.y, g.in, g.st), SW_OK);
        if (sw_search_last_peaks(pg) != sw_search_last_peaks(pc))
            fail_msg("frame %d: peaks CPU %lld, GPU %lld", i, (long long)sw_search_last_peaks(pc),
                     (long long)sw_search_last_peaks(pg));
        same_result(&c, &g);
        ok = 0;
        for (int32_t k = 0; k < n; k++)
            ok += c.st[k] == SW_SPOT_OK;
        result_free(&c);
        result_free(&g);
    }
    sw_search_destroy(pc);
    sw_search_destroy(pg);
    return ok;
}

/* A full frame, an all-zero frame, the full frame again on one GPU plan: nothing of the first
 * run's peaks, cells or spots may survive into the second (no peak there: every spot not
 * found), and the third equals the first. Automatic and explicit thresholds. */
static void test_stale_state(void **state)
{
    (void)state;
    scene s = make_scene(345, 290, 19, 16, -0.8, 400.0, 31);
    sw_image f = as_type(&s, SW_PIX_U16), z;
    assert_int_equal(sw_image_alloc(cpu, s.w, s.h, SW_PIX_U16, &z), SW_OK);
    const sw_image *seq[3] = {&f, &z, &f};
    for (int t = 0; t < 2; t++) {
        sw_search_params p = rparams(&s, SW_PIX_U16);
        p.peak_threshold = t == 0 ? 0.0 : 0.02 * 65535.0;
        assert_true(compare_sequence(&p, seq, 1, s.sx, s.sy, NULL) > s.nx * s.ny / 2);
        assert_int_equal(compare_sequence(&p, seq, 2, s.sx, s.sy, NULL), 0);
        assert_true(compare_sequence(&p, seq, 3, s.sx, s.sy, NULL) > s.nx * s.ny / 2);
    }
    sw_image_free(&z);
    sw_image_free(&f);
    scene_free(&s);
}

/* The round limit: the active spots form a serpentine (every even row, and one end of each odd
 * row, alternately) hundreds of steps long, so the growth stops at nx + ny + seed_size rounds
 * with active spots not reached; both backends stop at the same round. Also the seed block at
 * a grid corner (only the corner's 4 x 4 spots active) and a small frame (partial tiles). */
static void test_round_limit(void **state)
{
    (void)state;
    scene s = make_scene(520, 510, 30, 30, 0.6, 300.0, 41);
    const int32_t n = s.nx * s.ny;
    uint8_t *act = malloc((size_t)n);
    assert_non_null(act);
    for (int32_t k = 0; k < n; k++) {
        int32_t ix = k % s.nx, iy = k / s.nx;
        act[k] =
            (uint8_t)(iy % 2 == 0 || (iy % 4 == 1 && ix == s.nx - 1) || (iy % 4 == 3 && ix == 0));
    }
    sw_image f = as_type(&s, SW_PIX_U8);
    sw_search_params p = rparams(&s, SW_PIX_U8);
    const sw_image *one[1] = {&f};
    int32_t found = compare_sequence(&p, one, 1, s.sx, s.sy, act), nact = 0;
    for (int32_t k = 0; k < n; k++)
        nact += act[k];
    /* the growth went well past the seed block but not to the serpentine's ends */
    assert_true(found > 2 * p.seed_size * p.seed_size);
    assert_true(found < nact - s.nx);
    p.seed_size = 1;
    p.capture_px = 0.9 * 16.37; /* wide: conflicts along the path */
    compare_sequence(&p, one, 1, s.sx, s.sy, act);

    /* the corner: only the 4 x 4 spots of the top-left corner are active */
    for (int32_t k = 0; k < n; k++)
        act[k] = (uint8_t)(k % s.nx < 4 && k / s.nx < 4);
    p = rparams(&s, SW_PIX_U8);
    p.seed_size = 15;
    assert_int_equal(compare_sequence(&p, one, 1, s.sx, s.sy, act), 16);
    sw_image_free(&f);
    free(act);
    scene_free(&s);

    scene t = make_scene(58, 53, 2, 2, 0.0, 200.0, 42);
    sw_image g = as_type(&t, SW_PIX_F32);
    sw_search_params q = rparams(&t, SW_PIX_F32);
    q.peak_box = 5;
    q.peak_threshold = 0.02 * t.peak; /* the spots, not only the reflection */
    const sw_image *tiny[1] = {&g};
    assert_int_equal(compare_sequence(&q, tiny, 1, t.sx, t.sy, NULL), 4);
    sw_image_free(&g);
    scene_free(&t);
}

/* Wide capture radii on the 60 x 60 grid: many spots claim the same peaks, long frontiers
 * (many claimants per round), u8 and f32. */
static void test_large_conflicts(void **state)
{
    (void)state;
    scene s = make_scene(1040, 1030, 60, 60, 2.5, 500.0, 51);
    const sw_pixel_type types[2] = {SW_PIX_U8, SW_PIX_F32};
    for (int t = 0; t < 2; t++) {
        sw_image f = as_type(&s, types[t]);
        double top = types[t] == SW_PIX_U8 ? 255.0 : s.peak;
        sw_search_params p = rparams(&s, types[t]);
        p.capture_px = 2.0 * 16.37;
        compare(&p, &f, s.sx, s.sy, NULL);
        p.capture_px = 0.75 * 16.37;
        p.peak_threshold = 0.003 * top; /* many noise peaks */
        p.peak_box = 5;
        p.seed_size = 3;
        compare(&p, &f, s.sx, s.sy, NULL);
        sw_image_free(&f);
    }
    scene_free(&s);
}

/* The rounds kernel's memory layouts: 90 x 90 spots (their state in global memory on any
 * device) with box 13 (cell bits in shared memory) and box 3 (10^6 cells: bits in global
 * memory too); 20 x 20 spots (state in shared memory) with box 3 (bits in global memory). */
static void test_memory_layouts(void **state)
{
    (void)state;
    scene s = make_scene(2000, 2000, 90, 90, -2.0, 300.0, 61);
    sw_image f = as_type(&s, SW_PIX_U16);
    sw_search_params p = rparams(&s, SW_PIX_U16);
    assert_true(compare(&p, &f, s.sx, s.sy, NULL) > 8000);
    p.peak_box = 3;
    p.peak_threshold = 0.05 * 65535.0;
    compare(&p, &f, s.sx, s.sy, NULL);
    sw_image_free(&f);
    scene_free(&s);

    scene t = make_scene(2000, 2000, 20, 20, 1.0, 300.0, 62);
    sw_image g = as_type(&t, SW_PIX_U8);
    sw_search_params q = rparams(&t, SW_PIX_U8);
    q.peak_box = 3;
    assert_true(compare(&q, &g, t.sx, t.sy, NULL) >= 400);
    q.peak_threshold = 0.004 * 255.0; /* every noise maximum: many peaks per tile */
    compare(&q, &g, t.sx, t.sy, NULL);
    sw_image_free(&g);
    scene_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types_and_parameters),
        cmocka_unit_test(test_spots_and_pixels),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_reuse_and_api),
        cmocka_unit_test(test_stale_state),
        cmocka_unit_test(test_round_limit),
        cmocka_unit_test(test_large_conflicts),
        cmocka_unit_test(test_memory_layouts),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}

#else

int main(void)
{
    printf("SKIP: built without CUDA\n");
    return 77;
}

#endif
