/*
 * The pupil tracker on the GPU (pupil_cuda.cu) against the CPU (pupil_cpu.c), one plan per
 * backend from the same parameters, on the same synthetic eyes (sim_eye.h, rendered once on the
 * CPU; seed 001 Sec. 3.1):
 *   - monocular and binocular frames (automatic and fixed split), clean and with the artefacts of
 *     living eyes (reflection, brightness map, tear film, white and detector noise), a pupil cut
 *     by the image's edge, two overlapping pupils, NaN and Inf pixels;
 *   - u8, u16, u32 and f32 frames, in host memory (tight, and a view with a wider stride) and in
 *     device memory (pitched);
 *   - the default radii (the unrolled kernels) and others (gauss 0 / 2 / 16, close 0 / 6 / 16:
 *     the generic kernels), odd sizes (333 x 201, 97 x 61: partial tiles), few candidates, no
 *     refinement, a fixed input scale;
 *   - step 3's options: two- and three-class Otsu, edge level 0 and others, no near-band test;
 *   - the automatic edge level (step 3d, SW_PUPIL_EDGE_AUTO): eyes whose glow falls off by 0,
 *     0.5 and 0.9 towards the edge, one and two per frame (f32 host and u16 device frames), and
 *     frames where a refit finds nothing (the last pupil, its mask and border list restored; on
 *     one of two eyes while the other goes on), eyes as `sim eye` makes them whose glow falls off
 *     by 0.8 and 0.9 (the first fit fails, the retries at lower levels find the pupil) and eyes
 *     without or with a dim glow (every retry fails: the first fit's pupil, mask and list
 *     restored): the same thresholds, masks, lists and pupils as the CPU's; a sequence of frames
 *     on one pair of plans (the graph's passes replayed with other refits per frame);
 *   - a u32 frame too large for the exact integer sums of step 0 (the GPU's row-sum path);
 *   - a dark (all 0) and a saturated frame: the same failure on both;
 *   - one GPU plan run on several frames in turn (the CUDA graph replayed): each time as the CPU.
 * Compared: the 8-bit input, smoothed and closed images byte for byte (sw_pupil_last_images),
 * the scale, the split, the thresholds, the border lists in their order (sw_pupil_last_border),
 * the RANSAC winner and its votes, validity and failure exactly; the ellipse within 1e-6 px and
 * 1e-6 degrees; the inliers and near-band points within 2 (a border point on a band's edge may
 * fall either way after the refinement's differently ordered sums); the lenslet mask (host copy and
 * the device copy of sw_pupil_lenslet_mask_device) equal except for lenslets whose corners lie on
 * the ellipse to 1e-6. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"
#include "spotwave/pupil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

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

/* ---------------------------------------------------------------- frames */

typedef struct eye_case {
    double cx, cy, diameter, ellipticity, angle;
} eye_case;

/* Eye-simulator parameters for a w x h frame with 32-pixel lenslets: the eyes given, clean (the
 * glow only) or with the default artefacts (seed for their randomness). */
static void eye_params(sw_eyesim_params *sp, int32_t w, int32_t h, int n_eyes, const eye_case *e,
                       int artefacts, uint64_t seed)
{
    sw_eyesim_params_default(sp);
    sp->sh.width = w;
    sp->sh.height = h;
    sp->sh.geom.nx = w / 32 > 0 ? w / 32 : 1;
    sp->sh.geom.ny = h / 32 > 0 ? h / 32 : 1;
    sp->n_eyes = n_eyes;
    for (int i = 0; i < n_eyes; i++) {
        sp->eyes[i].cx_px = e[i].cx;
        sp->eyes[i].cy_px = e[i].cy;
        sp->eyes[i].diameter_px = e[i].diameter;
        sp->eyes[i].ellipticity = e[i].ellipticity;
        sp->eyes[i].angle_deg = e[i].angle;
    }
    if (artefacts) {
        sw_eye_artefacts_default(&sp->art);
        sp->art.tear_blobs = 3;
    } else {
        sw_eye_artefacts_none(&sp->art);
        sp->art.glow_e = 20.0;
    }
    sp->seed = seed;
}

static sw_image alloc_host(int32_t w, int32_t h, sw_pixel_type t)
{
    sw_image img;
    if (sw_image_alloc(NULL, w, h, t, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(NULL));
    return img;
}

/* The eyes' electrons (f32, host), rendered on the CPU. */
static sw_image render(const sw_eyesim_params *sp)
{
    sw_image img = alloc_host(sp->sh.width, sp->sh.height, SW_PIX_F32);
    if (sw_eyesim_render(cpu, sp, &img, NULL) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    return img;
}

/* The electrons as a frame of type t: f32 as they are; integers as v * scale + offset, rounded
 * and clamped (sw_image_convert). */
static sw_image as_type(const sw_image *e, sw_pixel_type t, double scale, double offset)
{
    sw_image out = alloc_host(e->width, e->height, t);
    if (sw_image_convert(cpu, e, &out, t == SW_PIX_F32 ? 1.0 : scale,
                         t == SW_PIX_F32 ? 0.0 : offset, NULL) != SW_OK)
        fail_msg("sw_image_convert: %s", sw_context_error(cpu));
    return out;
}

/* A camera's u16 frame of the electrons: shot noise, 3 e- read noise, 100 ADU bias. */
static sw_image camera_u16(sw_image *electrons, uint64_t seed)
{
    sw_detector d;
    sw_detector_default(&d);
    d.read_noise_e = 3.0;
    d.bias_adu = 100.0;
    d.out_type = SW_PIX_U16;
    d.seed = seed;
    sw_image out = alloc_host(electrons->width, electrons->height, SW_PIX_U16);
    for (int32_t y = 0; y < electrons->height; y++) { /* white noise may make them negative */
        float *row = sw_image_row(electrons, y);
        for (int32_t x = 0; x < electrons->width; x++)
            if (row[x] < 0.0f)
                row[x] = 0.0f;
    }
    if (sw_detector_apply(cpu, &d, electrons, &out) != SW_OK)
        fail_msg("sw_detector_apply: %s", sw_context_error(cpu));
    return out;
}

/* ---------------------------------------------------------------- comparison */

static sw_pupil_plan *make_plan(sw_context *ctx, const sw_pupil_params *p)
{
    sw_pupil_plan *plan = NULL;
    if (sw_pupil_create(ctx, p, &plan) != SW_OK)
        fail_msg("sw_pupil_create (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
    return plan;
}

/* How the GPU plan gets the frame. */
enum { HOST_FRAME = 0, DEVICE_FRAME = 1, STRIDED_FRAME = 2 };

/* Runs plan on frame (on a CUDA plan from device memory, or from a host view with a wider
 * stride, when asked); mask: nx * ny bytes or NULL. */
static void run(sw_context *ctx, sw_pupil_plan *plan, const sw_image *frame, int how,
                sw_pupil_result *res, uint8_t *mask)
{
    sw_image in = *frame, dev, wide;
    memset(&dev, 0, sizeof dev);
    memset(&wide, 0, sizeof wide);
    if (how == DEVICE_FRAME) {
        if (sw_image_alloc_device(ctx, frame->width, frame->height, frame->type, &dev) != SW_OK ||
            sw_image_copy(ctx, frame, &dev) != SW_OK)
            fail_msg("device frame: %s", sw_context_error(ctx));
        in = dev;
    } else if (how == STRIDED_FRAME) {
        /* the frame inside a larger image, at column 3 (the rows start unaligned) */
        wide = alloc_host(frame->width + 7, frame->height, frame->type);
        const size_t ps = sw_pixel_size(frame->type);
        for (int32_t y = 0; y < frame->height; y++)
            memcpy((char *)sw_image_row(&wide, y) + 3 * ps, sw_image_row(frame, y),
                   (size_t)frame->width * ps);
        if (sw_image_roi(ctx, &wide, 3, 0, frame->width, frame->height, &in) != SW_OK)
            fail_msg("sw_image_roi: %s", sw_context_error(ctx));
    }
    memset(res, 0xab, sizeof *res); /* every field must be written */
    if (sw_pupil_run(plan, &in, res, mask) != SW_OK)
        fail_msg("sw_pupil_run (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
    sw_image_free(&dev);
    sw_image_free(&wide);
}

/* Two u8 images of one frame: identical, else the first differing pixel. */
static void compare_u8(const char *what, const char *name, const sw_image *c, const sw_image *g)
{
    for (int32_t y = 0; y < c->height; y++) {
        const uint8_t *a = sw_image_row(c, y), *b = sw_image_row(g, y);
        for (int32_t x = 0; x < c->width; x++)
            if (a[x] != b[x])
                fail_msg("%s: %s image differs at (%d, %d): %d (CPU) vs %d (GPU)", what, name, x, y,
                         a[x], b[x]);
    }
}

/* Angles in [0, 180) equal within tol, across the wrap. */
static double angle_diff(double a, double b)
{
    double d = fmod(fabs(a - b), 180.0);
    return d > 90.0 ? 180.0 - d : d;
}

static void compare_pupil(const char *what, int i, const sw_pupil_ellipse *c,
                          const sw_pupil_ellipse *g)
{
    if (c->valid != g->valid || c->failure != g->failure)
        fail_msg("%s: pupil %d: valid %d failure %d (%s) on the CPU, valid %d failure %d (%s) on "
                 "the GPU",
                 what, i, c->valid, (int)c->failure, sw_pupil_failure_string(c->failure), g->valid,
                 (int)g->failure, sw_pupil_failure_string(g->failure));
    if (c->threshold != g->threshold || c->border != g->border || c->candidate != g->candidate ||
        c->votes != g->votes || c->x0 != g->x0 || c->x1 != g->x1)
        fail_msg("%s: pupil %d: threshold %d / %d, border %d / %d, candidate %d / %d, votes "
                 "%d / %d, region [%d, %d) / [%d, %d) (CPU / GPU)",
                 what, i, c->threshold, g->threshold, c->border, g->border, c->candidate,
                 g->candidate, c->votes, g->votes, c->x0, c->x1, g->x0, g->x1);
    if (abs(c->inliers - g->inliers) > 2 || abs(c->near - g->near) > 2)
        fail_msg("%s: pupil %d: %d inliers, %d near on the CPU, %d, %d on the GPU", what, i,
                 c->inliers, c->near, g->inliers, g->near);
    if (!c->valid) {
        if (!isnan(g->cx_px) || !isnan(g->cy_px) || !isnan(g->a_px) || !isnan(g->b_px) ||
            !isnan(g->angle_deg))
            fail_msg("%s: pupil %d not found, but the GPU's ellipse is not NaN", what, i);
        return;
    }
    const double tol = 1e-6;
    if (!(fabs(c->cx_px - g->cx_px) <= tol && fabs(c->cy_px - g->cy_px) <= tol &&
          fabs(c->a_px - g->a_px) <= tol && fabs(c->b_px - g->b_px) <= tol))
        fail_msg("%s: pupil %d: CPU (%.9f, %.9f) a %.9f b %.9f, GPU (%.9f, %.9f) a %.9f b %.9f",
                 what, i, c->cx_px, c->cy_px, c->a_px, c->b_px, g->cx_px, g->cy_px, g->a_px,
                 g->b_px);
    /* the angle of a near circle is ill-conditioned: compared when the axes differ visibly */
    if (c->a_px - c->b_px > 1e-3 && !(angle_diff(c->angle_deg, g->angle_deg) <= tol))
        fail_msg("%s: pupil %d: angle %.9f (CPU) vs %.9f (GPU)", what, i, c->angle_deg,
                 g->angle_deg);
}

/* e1^2 + e2^2 of point (x, y) for the ellipse of p (1 on the ellipse), as sw_pm_inside. */
static double ellipse_value(const sw_pupil_ellipse *p, double x, double y)
{
    const double t = p->angle_deg * (PI / 180.0), ct = cos(t), st = sin(t);
    const double dx = x - p->cx_px, dy = y - p->cy_px;
    const double e1 = (dx * ct + dy * st) / p->a_px, e2 = (-dx * st + dy * ct) / p->b_px;
    return e1 * e1 + e2 * e2;
}

/* Lenslet (ix, iy) has a corner (or, for the CENTRE rule, its centre) on a valid pupil's
 * ellipse to 1e-6: where the CPU and the GPU may honestly disagree. */
static int lenslet_on_edge(const sw_sh_geometry *g, sw_pupil_lenslet_rule rule,
                           const sw_pupil_result *r, int32_t ix, int32_t iy)
{
    const double xl = g->x0 - 0.5 + g->pitch_px * ix, yl = g->y0 - 0.5 + g->pitch_px * iy;
    const double d = g->pitch_px;
    for (int p = 0; p < r->n_pupils; p++) {
        const sw_pupil_ellipse *q = &r->pupil[p];
        if (!q->valid)
            continue;
        if (rule == SW_PUPIL_LENSLET_CENTRE) {
            if (fabs(ellipse_value(q, xl + 0.5 * d, yl + 0.5 * d) - 1.0) < 1e-6)
                return 1;
            continue;
        }
        for (int k = 0; k < 4; k++)
            if (fabs(ellipse_value(q, xl + (k & 1) * d, yl + (k >> 1) * d) - 1.0) < 1e-6)
                return 1;
    }
    return 0;
}

static void compare_masks(const char *what, const sw_pupil_params *p, const sw_pupil_result *rc,
                          const uint8_t *mc, const uint8_t *mg, const char *which)
{
    const sw_sh_geometry *g = p->geometry;
    for (int32_t iy = 0; iy < g->ny; iy++)
        for (int32_t ix = 0; ix < g->nx; ix++) {
            const int32_t l = iy * g->nx + ix;
            if (mc[l] != mg[l] && !lenslet_on_edge(g, p->lenslet_rule, rc, ix, iy))
                fail_msg("%s: lenslet (%d, %d): %d on the CPU, %d on the GPU (%s)", what, ix, iy,
                         mc[l], mg[l], which);
        }
}

/*
 * Runs the CPU plan pc and the GPU plan pg (made from p) on frame (the GPU's as `how` says)
 * and compares everything (see the top). The CPU's result goes to *out when not NULL.
 */
static void compare_frame(const char *what, const sw_pupil_params *p, sw_pupil_plan *pc,
                          sw_pupil_plan *pg, const sw_image *frame, int how, sw_pupil_result *out)
{
    const int32_t w = p->width, h = p->height;
    const size_t nl = p->geometry ? (size_t)p->geometry->nx * (size_t)p->geometry->ny : 0;
    uint8_t *mc = nl ? malloc(nl) : NULL, *mg = nl ? malloc(nl) : NULL;
    assert_true(!nl || (mc && mg));
    sw_pupil_result rc, rg;
    run(cpu, pc, frame, HOST_FRAME, &rc, mc);
    run(gpu, pg, frame, how, &rg, mg);

    /* the frame's fields */
    if (rc.n_pupils != rg.n_pupils || rc.split_x != rg.split_x || rc.scale != rg.scale)
        fail_msg("%s: n_pupils %d / %d, split_x %d / %d, scale %.17g / %.17g (CPU / GPU)", what,
                 rc.n_pupils, rg.n_pupils, rc.split_x, rg.split_x, rc.scale, rg.scale);
    assert_int_equal(rc.n_pupils, p->n_pupils);
    for (int i = 0; i < rc.n_pupils; i++)
        compare_pupil(what, i, &rc.pupil[i], &rg.pupil[i]);

    /* the images of steps 0, 1 and 4 */
    sw_image ic[3], ig[3];
    for (int k = 0; k < 3; k++) {
        ic[k] = alloc_host(w, h, SW_PIX_U8);
        ig[k] = alloc_host(w, h, SW_PIX_U8);
    }
    if (sw_pupil_last_images(pc, &ic[0], &ic[1], &ic[2]) != SW_OK)
        fail_msg("%s: sw_pupil_last_images (CPU): %s", what, sw_context_error(cpu));
    if (sw_pupil_last_images(pg, &ig[0], &ig[1], &ig[2]) != SW_OK)
        fail_msg("%s: sw_pupil_last_images (GPU): %s", what, sw_context_error(gpu));
    compare_u8(what, "8-bit input", &ic[0], &ig[0]);
    compare_u8(what, "smoothed", &ic[1], &ig[1]);
    compare_u8(what, "closed", &ic[2], &ig[2]);
    for (int k = 0; k < 3; k++) {
        sw_image_free(&ic[k]);
        sw_image_free(&ig[k]);
    }

    /* the border lists of step 5, in their order */
    for (int i = 0; i < rc.n_pupils; i++) {
        int64_t nc = -1, ng = -1;
        assert_int_equal(sw_pupil_last_border(pc, i, NULL, 0, &nc), SW_OK);
        assert_int_equal(sw_pupil_last_border(pg, i, NULL, 0, &ng), SW_OK);
        if (nc != ng || nc != rc.pupil[i].border)
            fail_msg("%s: pupil %d: %lld border pixels on the CPU, %lld on the GPU (result %d)",
                     what, i, (long long)nc, (long long)ng, rc.pupil[i].border);
        int32_t *xc = malloc((size_t)(nc > 0 ? nc : 1) * 2 * sizeof(int32_t));
        int32_t *xg = malloc((size_t)(nc > 0 ? nc : 1) * 2 * sizeof(int32_t));
        assert_non_null(xc);
        assert_non_null(xg);
        assert_int_equal(sw_pupil_last_border(pc, i, xc, nc, &nc), SW_OK);
        assert_int_equal(sw_pupil_last_border(pg, i, xg, ng, &ng), SW_OK);
        for (int64_t k = 0; k < nc; k++)
            if (xc[2 * k] != xg[2 * k] || xc[2 * k + 1] != xg[2 * k + 1])
                fail_msg("%s: pupil %d: border pixel %lld is (%d, %d) on the CPU, (%d, %d) on "
                         "the GPU",
                         what, i, (long long)k, xc[2 * k], xc[2 * k + 1], xg[2 * k], xg[2 * k + 1]);
        /* a smaller capacity: the first pairs, the full count */
        if (nc > 3) {
            int32_t part[6] = {-1, -1, -1, -1, -1, -1};
            int64_t n3 = 0;
            assert_int_equal(sw_pupil_last_border(pg, i, part, 3, &n3), SW_OK);
            assert_int_equal(n3, nc);
            assert_memory_equal(part, xc, sizeof part);
        }
        free(xc);
        free(xg);
    }

    /* the lenslet mask: the host copies, and the GPU's device copy */
    if (nl) {
        compare_masks(what, p, &rc, mc, mg, "host copy");
        const uint8_t *dm = sw_pupil_lenslet_mask_device(pg);
        assert_non_null(dm);
        assert_null(sw_pupil_lenslet_mask_device(pc));
        sw_image dv, hv = alloc_host(p->geometry->nx, p->geometry->ny, SW_PIX_U8);
        assert_int_equal(sw_image_wrap((void *)dm, p->geometry->nx, p->geometry->ny, 0, SW_PIX_U8,
                                       SW_MEM_DEVICE, &dv),
                         SW_OK);
        if (sw_image_copy(gpu, &dv, &hv) != SW_OK)
            fail_msg("%s: copying the device mask: %s", what, sw_context_error(gpu));
        for (int32_t iy = 0; iy < p->geometry->ny; iy++)
            assert_memory_equal(sw_image_row(&hv, iy), mg + (size_t)iy * p->geometry->nx,
                                (size_t)p->geometry->nx);
        sw_image_free(&hv);
        compare_masks(what, p, &rc, mc, mg, "device copy");
    } else {
        assert_null(sw_pupil_lenslet_mask_device(pg));
    }
    free(mc);
    free(mg);
    if (out)
        *out = rc;
}

/* compare_frame with fresh plans from p. */
static void compare(const char *what, const sw_pupil_params *p, const sw_image *frame, int how,
                    sw_pupil_result *out)
{
    sw_pupil_plan *pc = make_plan(cpu, p), *pg = make_plan(gpu, p);
    compare_frame(what, p, pc, pg, frame, how, out);
    sw_pupil_destroy(pc);
    sw_pupil_destroy(pg);
}

static void assert_found(const char *what, const sw_pupil_result *r, int i)
{
    if (!r->pupil[i].valid)
        fail_msg("%s: pupil %d not found (%s): the comparison would say little", what, i,
                 sw_pupil_failure_string(r->pupil[i].failure));
}

/* ---------------------------------------------------------------- tests */

/* A clean elliptical pupil and one with artefacts, 320 x 320, every frame type, host (tight and
 * strided) and device frames, with a lenslet grid (both rules). */
static void test_monocular(void **state)
{
    (void)state;
    const eye_case e = {166.3, 150.8, 210.0, 0.85, 30.0};
    const sw_pixel_type types[4] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_U32, SW_PIX_F32};
    for (int art = 0; art < 2; art++) {
        sw_eyesim_params sp;
        eye_params(&sp, 320, 320, 1, &e, art, 11 + (uint64_t)art);
        sw_image el = render(&sp);
        for (int k = 0; k < 4; k++) {
            sw_image f = as_type(&el, types[k], types[k] == SW_PIX_U8 ? 4.0 : 20.0,
                                 types[k] == SW_PIX_U8 ? 0.0 : 100.0);
            sw_pupil_params p;
            sw_pupil_params_default(&p, 320, 320, types[k]);
            p.geometry = &sp.sh.geom;
            p.lenslet_rule = k % 2 ? SW_PUPIL_LENSLET_CENTRE : SW_PUPIL_LENSLET_FULL;
            for (int how = 0; how < 3; how++) {
                char what[96];
                snprintf(what, sizeof what, "monocular %s, %s, %s frame",
                         art ? "with artefacts" : "clean", sw_pixel_type_string(types[k]),
                         how == HOST_FRAME     ? "host"
                         : how == DEVICE_FRAME ? "device"
                                               : "strided host");
                sw_pupil_result rc;
                compare(what, &p, &f, how, &rc);
                if (!art)
                    assert_found(what, &rc, 0);
            }
            sw_image_free(&f);
        }
        sw_image_free(&el);
    }
}

/* A camera frame (detector noise, u16) of an eye with artefacts, and the same eye's pupil cut
 * by the image's left edge. */
static void test_camera_and_edge(void **state)
{
    (void)state;
    const eye_case cases[2] = {{200.0, 170.0, 240.0, 0.9, 100.0}, {30.0, 160.0, 220.0, 1.0, 0.0}};
    for (int c = 0; c < 2; c++) {
        sw_eyesim_params sp;
        eye_params(&sp, 384, 320, 1, &cases[c], 1, 21 + (uint64_t)c);
        sw_image el = render(&sp);
        sw_image f = camera_u16(&el, 5 + (uint64_t)c);
        sw_pupil_params p;
        sw_pupil_params_default(&p, 384, 320, SW_PIX_U16);
        p.geometry = &sp.sh.geom;
        const char *what = c == 0 ? "camera u16 frame" : "pupil cut by the edge";
        sw_pupil_result rc;
        compare(what, &p, &f, c == 0 ? DEVICE_FRAME : HOST_FRAME, &rc);
        sw_image_free(&f);
        sw_image_free(&el);
    }
}

/* Binocular frames with artefacts: two eyes apart (automatic and fixed split), and two
 * overlapping pupils; f32 and u16. */
static void test_binocular(void **state)
{
    (void)state;
    const eye_case apart[2] = {{150.0, 160.0, 200.0, 0.9, 10.0}, {480.0, 150.0, 190.0, 1.0, 0.0}};
    const eye_case overlap[2] = {{250.0, 160.0, 220.0, 1.0, 0.0}, {400.0, 170.0, 200.0, 0.8, 60.0}};
    for (int c = 0; c < 2; c++) {
        sw_eyesim_params sp;
        eye_params(&sp, 640, 320, 2, c == 0 ? apart : overlap, 1, 31 + (uint64_t)c);
        sw_image el = render(&sp);
        for (int t = 0; t < 2; t++) {
            const sw_pixel_type type = t ? SW_PIX_U16 : SW_PIX_F32;
            sw_image f = as_type(&el, type, 20.0, 100.0);
            for (int fixed = 0; fixed < 2; fixed++) {
                sw_pupil_params p;
                sw_pupil_params_default(&p, 640, 320, type);
                p.n_pupils = 2;
                p.split_x = fixed ? 315 : -1;
                p.geometry = &sp.sh.geom;
                char what[96];
                snprintf(what, sizeof what, "binocular (%s), %s, %s split",
                         c == 0 ? "apart" : "overlapping", sw_pixel_type_string(type),
                         fixed ? "fixed" : "automatic");
                sw_pupil_result rc;
                compare(what, &p, &f, t ? DEVICE_FRAME : HOST_FRAME, &rc);
                if (c == 0 && !fixed) {
                    assert_found(what, &rc, 0);
                    assert_found(what, &rc, 1);
                    /* the valley between the eyes (not a trivial split) */
                    assert_true(rc.split_x > 250 && rc.split_x < 380);
                }
            }
            sw_image_free(&f);
        }
        sw_image_free(&el);
    }
}

/* Odd sizes (partial tiles in both directions) and radii other than the default (the generic
 * kernels), few candidates, no refinement, a fixed input scale. */
static void test_odd_sizes_and_radii(void **state)
{
    (void)state;
    struct {
        int32_t w, h, gauss, close, candidates, refine, n_pupils;
        double scale;
    } cases[] = {
        {333, 201, 2, 6, 1024, 3, 1, 0.0}, {333, 201, 4, 0, 256, 0, 1, 0.0},
        {333, 201, 0, 4, 1024, 3, 1, 0.0}, {333, 201, 16, 16, 64, 20, 1, 0.0},
        {333, 201, 3, 1, 1024, 3, 2, 0.0}, {97, 61, 4, 4, 1024, 3, 1, 0.0},
        {333, 201, 4, 4, 512, 3, 1, 0.25},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int32_t w = cases[c].w, h = cases[c].h;
        eye_case e[2] = {{0.45 * w, 0.52 * h, 0.6 * h, 0.8, 145.0},
                         {0.8 * w, 0.5 * h, 0.4 * h, 1.0, 0.0}};
        if (cases[c].n_pupils == 2)
            e[0].cx = 0.25 * w;
        sw_eyesim_params sp;
        eye_params(&sp, w, h, cases[c].n_pupils, e, c % 2 == 0, 41 + (uint64_t)c);
        sw_image el = render(&sp);
        sw_image f = as_type(&el, SW_PIX_U16, 10.0, 50.0);
        sw_pupil_params p;
        sw_pupil_params_default(&p, w, h, SW_PIX_U16);
        p.gauss_radius = cases[c].gauss;
        p.close_radius = cases[c].close;
        p.candidates = cases[c].candidates;
        p.refine_iterations = cases[c].refine;
        p.n_pupils = cases[c].n_pupils;
        p.input_scale = cases[c].scale;
        p.geometry = w >= 32 && h >= 32 ? &sp.sh.geom : NULL;
        char what[128];
        snprintf(what, sizeof what,
                 "%d x %d, gauss %d, close %d, %d candidates, %d rounds, %d "
                 "pupils, scale %g",
                 w, h, cases[c].gauss, cases[c].close, cases[c].candidates, cases[c].refine,
                 cases[c].n_pupils, cases[c].scale);
        compare(what, &p, &f, c % 3 == 1 ? DEVICE_FRAME : HOST_FRAME, NULL);
        sw_image_free(&f);
        sw_image_free(&el);
    }
}

/* Frames without a pupil: all 0 (EMPTY_FRAME), saturated (NO_CONTRAST), all NaN (EMPTY_FRAME);
 * and an eye with NaN and Inf pixels. */
static void test_no_pupil_and_nan(void **state)
{
    (void)state;
    const int32_t w = 200, h = 160;
    /* dark u16 (automatic and fixed scale), saturated u16, binocular dark */
    sw_image dark = alloc_host(w, h, SW_PIX_U16), sat = alloc_host(w, h, SW_PIX_U16);
    for (int32_t y = 0; y < h; y++) {
        uint16_t *r = sw_image_row(&sat, y);
        for (int32_t x = 0; x < w; x++)
            r[x] = 65535;
    }
    sw_pupil_params p;
    sw_pupil_params_default(&p, w, h, SW_PIX_U16);
    sw_pupil_result rc;
    compare("dark frame", &p, &dark, HOST_FRAME, &rc);
    assert_int_equal(rc.pupil[0].failure, SW_PUPIL_EMPTY_FRAME);
    compare("saturated frame", &p, &sat, DEVICE_FRAME, &rc);
    assert_int_equal(rc.pupil[0].failure, SW_PUPIL_NO_CONTRAST);
    p.n_pupils = 2;
    compare("dark binocular frame", &p, &dark, HOST_FRAME, &rc);
    assert_int_equal(rc.pupil[1].failure, SW_PUPIL_EMPTY_FRAME);
    p.n_pupils = 1;
    p.input_scale = 0.01;
    compare("dark frame, fixed scale", &p, &dark, HOST_FRAME, &rc);
    assert_int_equal(rc.pupil[0].failure, SW_PUPIL_NO_CONTRAST);
    sw_image_free(&dark);
    sw_image_free(&sat);

    /* f32: all NaN; an eye with NaN and Inf pixels */
    sw_image nan_frame = alloc_host(w, h, SW_PIX_F32);
    for (int32_t y = 0; y < h; y++) {
        float *r = sw_image_row(&nan_frame, y);
        for (int32_t x = 0; x < w; x++)
            r[x] = NAN;
    }
    sw_pupil_params_default(&p, w, h, SW_PIX_F32);
    compare("all-NaN frame", &p, &nan_frame, DEVICE_FRAME, &rc);
    assert_int_equal(rc.pupil[0].failure, SW_PUPIL_EMPTY_FRAME);
    sw_image_free(&nan_frame);

    const eye_case e = {100.0, 80.0, 120.0, 0.9, 20.0};
    sw_eyesim_params sp;
    eye_params(&sp, w, h, 1, &e, 0, 51);
    sw_image el = render(&sp);
    for (int32_t k = 0; k < 40; k++) {
        float *r = sw_image_row(&el, (k * 37) % h);
        r[(k * 53) % w] = k % 3 == 0 ? NAN : k % 3 == 1 ? INFINITY : -INFINITY;
    }
    compare("eye with NaN and Inf pixels", &p, &el, HOST_FRAME, &rc);
    assert_found("eye with NaN and Inf pixels", &rc, 0);
    sw_image_free(&el);
}

/* Step 3's options on a binocular frame: two- and three-class Otsu with and without the edge
 * level (0: Otsu's split itself), and the near-band test off (max_near_ratio +Inf). */
static void test_threshold_options(void **state)
{
    (void)state;
    const eye_case e[2] = {{90.0, 100.0, 130.0, 0.9, 30.0}, {250.0, 95.0, 110.0, 1.0, 0.0}};
    sw_eyesim_params sp;
    eye_params(&sp, 333, 201, 2, e, 1, 91);
    sw_image el = render(&sp);
    sw_image f = as_type(&el, SW_PIX_U16, 10.0, 50.0);
    const int32_t classes[4] = {2, 3, 2, 3};
    const double edge[4] = {0.4, 0.0, 0.0, 0.7};
    for (int k = 0; k < 4; k++) {
        sw_pupil_params p;
        sw_pupil_params_default(&p, 333, 201, SW_PIX_U16);
        p.n_pupils = 2;
        p.otsu_classes = classes[k];
        p.edge_level = edge[k];
        if (k == 2)
            p.max_near_ratio = INFINITY;
        char what[96];
        snprintf(what, sizeof what, "otsu_classes %d, edge_level %g, max_near_ratio %g", classes[k],
                 edge[k], p.max_near_ratio);
        compare(what, &p, &f, k % 2 ? DEVICE_FRAME : HOST_FRAME, NULL);
    }
    /* the automatic edge level (step 3d) with either split */
    for (int cls = 2; cls <= 3; cls++) {
        sw_pupil_params p;
        sw_pupil_params_default(&p, 333, 201, SW_PIX_U16);
        p.n_pupils = 2;
        p.otsu_classes = cls;
        p.edge_level = SW_PUPIL_EDGE_AUTO;
        char what[96];
        snprintf(what, sizeof what, "otsu_classes %d, automatic edge level", cls);
        compare(what, &p, &f, cls == 3 ? DEVICE_FRAME : HOST_FRAME, NULL);
    }
    sw_image_free(&f);
    sw_image_free(&el);
}

/* A u32 frame of more than 2^52 / (2^32 - 1) pixels: its pixel sums may not stay exact in
 * integers below 2^53, so the GPU sums it in pupil_model.h's order (the row sums) as f32
 * frames. */
static void test_large_u32(void **state)
{
    (void)state;
    const int32_t w = 1100, h = 1000;
    const eye_case e = {560.0, 480.0, 700.0, 0.9, 20.0};
    sw_eyesim_params sp;
    eye_params(&sp, w, h, 1, &e, 1, 71);
    sw_image el = render(&sp);
    sw_image f = as_type(&el, SW_PIX_U32, 20.0, 100.0);
    assert_true((double)w * h * 4294967295.0 > 4503599627370496.0); /* 2^52 */
    sw_pupil_params p;
    sw_pupil_params_default(&p, w, h, SW_PIX_U32);
    sw_pupil_result rc;
    compare("large u32 frame", &p, &f, DEVICE_FRAME, &rc);
    assert_found("large u32 frame", &rc, 0);
    sw_image_free(&f);
    sw_image_free(&el);
}

/* One pair of plans over several frames in turn (the GPU replays its graph): every frame as the
 * CPU, and the first frame's result again at the end. */
static void test_sequence(void **state)
{
    (void)state;
    const int32_t w = 256, h = 224;
    sw_image frames[3];
    for (int k = 0; k < 3; k++) {
        const eye_case e = {110.0 + 15.0 * k, 100.0 + 8.0 * k, 140.0 - 20.0 * k, 0.9, 40.0 * k};
        sw_eyesim_params sp;
        eye_params(&sp, w, h, 1, &e, 1, 61 + (uint64_t)k);
        sw_image el = render(&sp);
        frames[k] = as_type(&el, SW_PIX_U8, 3.0, 0.0);
        sw_image_free(&el);
    }
    sw_sh_geometry geom;
    sw_sh_geometry_default(&geom);
    geom.pitch_px = 16.0;
    geom.nx = w / 16;
    geom.ny = h / 16;
    /* the fixed edge level, then the automatic one (frame 0: 33 with 0.4, 20 measured) */
    for (int autolevel = 0; autolevel < 2; autolevel++) {
        sw_pupil_params p;
        sw_pupil_params_default(&p, w, h, SW_PIX_U8);
        p.geometry = &geom;
        if (autolevel)
            p.edge_level = SW_PUPIL_EDGE_AUTO;
        sw_pupil_plan *pc = make_plan(cpu, &p), *pg = make_plan(gpu, &p);
        sw_pupil_result first, again;
        const int order[5] = {0, 1, 2, 1, 0};
        for (int i = 0; i < 5; i++) {
            char what[64];
            snprintf(what, sizeof what, "sequence%s, run %d (frame %d)",
                     autolevel ? " (automatic edge level)" : "", i, order[i]);
            compare_frame(what, &p, pc, pg, &frames[order[i]], i % 2 ? DEVICE_FRAME : HOST_FRAME,
                          i == 0 ? &first : &again);
        }
        compare_pupil("sequence, frame 0 again (CPU)", 0, &first.pupil[0], &again.pupil[0]);
        assert_found("sequence", &first, 0);
        sw_pupil_destroy(pc);
        sw_pupil_destroy(pg);
    }
    for (int k = 0; k < 3; k++)
        sw_image_free(&frames[k]);
}

/* An f32 w x h frame of n_eyes eyes (centres c, diameters d) whose glow falls off by falloff
 * towards the edge, 3 e- of white noise, with the default artefacts of living eyes or not; as
 * test_pupil_auto's frames. */
static sw_image falloff_frame_lit(int32_t w, int32_t h, int n_eyes, const double (*c)[2],
                                  const double *d, double falloff, int artefacts, uint64_t seed,
                                  double glow_e, int32_t pitch)
{
    sw_eyesim_params sp;
    sw_eyesim_params_default(&sp);
    sp.sh.width = w;
    sp.sh.height = h;
    sp.sh.geom.pitch_px = pitch;
    sp.sh.geom.nx = w / pitch;
    sp.sh.geom.ny = h / pitch;
    sp.n_eyes = n_eyes;
    for (int e = 0; e < n_eyes; e++) {
        sp.eyes[e] = sp.eyes[0];
        sp.eyes[e].cx_px = c[e][0];
        sp.eyes[e].cy_px = c[e][1];
        sp.eyes[e].diameter_px = d[e];
    }
    if (artefacts)
        sw_eye_artefacts_default(&sp.art);
    else
        sw_eye_artefacts_none(&sp.art);
    sp.art.white_noise_e = 3.0;
    sp.art.glow_e = glow_e;
    sp.art.glow_falloff = falloff;
    sp.seed = seed;
    return render(&sp);
}

/* falloff_frame_lit with a glow of 20 e- and lenslets of 32 px. */
static sw_image falloff_frame(int32_t w, int32_t h, int n_eyes, const double (*c)[2],
                              const double *d, double falloff, int artefacts, uint64_t seed)
{
    return falloff_frame_lit(w, h, n_eyes, c, d, falloff, artefacts, seed, 20.0, 32);
}

/* Step 3d, the automatic edge level: CPU and GPU take the same decisions (pupil_model.h
 * sw_pm_auto) from the same band histograms: equal thresholds, masks, border lists, winners and
 * (to rounding) pupils, on glow fall-offs 0, 0.5, 0.9 (one eye; two eyes) and on frames where a
 * refit finds nothing (test_pupil_auto's). The fixed level 0.4 on the same frames too, whose
 * thresholds at 0.9 the automatic level moves (the refits ran). */
static void test_auto_edge(void **state)
{
    (void)state;
    const double falloffs[3] = {0.0, 0.5, 0.9};
    for (int k = 0; k < 3; k++) {
        for (int two = 0; two < 2; two++) {
            const double c1[1][2] = {{200.0, 185.0}}, d1[1] = {300.0};
            const double c2[2][2] = {{165.0, 160.0}, {480.0, 165.0}}, d2[2] = {260.0, 240.0};
            const int32_t w = two ? 640 : 384, h = two ? 320 : 384, np = two ? 2 : 1;
            sw_image el = falloff_frame(w, h, np, two ? c2 : c1, two ? d2 : d1, falloffs[k], 0,
                                        (two ? 13 : 3) + (uint64_t)k);
            for (int t = 0; t < 2; t++) {
                const sw_pixel_type type = t ? SW_PIX_U16 : SW_PIX_F32;
                sw_image f = as_type(&el, type, 20.0, 100.0);
                sw_pupil_result ra, r4;
                for (int autolevel = 1; autolevel >= 0; autolevel--) {
                    sw_pupil_params p;
                    sw_pupil_params_default(&p, w, h, type);
                    p.n_pupils = np;
                    p.edge_level = autolevel ? SW_PUPIL_EDGE_AUTO : 0.4;
                    char what[128];
                    snprintf(what, sizeof what, "%s, glow fall-off %g, %s, edge level %s",
                             two ? "two eyes" : "one eye", falloffs[k], sw_pixel_type_string(type),
                             autolevel ? "auto" : "0.4");
                    compare(what, &p, &f, t ? DEVICE_FRAME : HOST_FRAME, autolevel ? &ra : &r4);
                    for (int i = 0; i < np; i++)
                        assert_found(what, autolevel ? &ra : &r4, i);
                }
                printf("    %s, fall-off %g, %s: thresholds %d (0.4) -> %d (auto)\n",
                       two ? "two eyes" : "one eye", falloffs[k], sw_pixel_type_string(type),
                       r4.pupil[0].threshold, ra.pupil[0].threshold);
                if (falloffs[k] == 0.9)
                    for (int i = 0; i < np; i++)
                        assert_true(ra.pupil[i].threshold < r4.pupil[i].threshold - 10);
                sw_image_free(&f);
            }
            sw_image_free(&el);
        }
    }

    /* a refit that finds nothing (test_pupil_auto's frames): the last pupil stays */
    const struct {
        double c[2][2], d[2], falloff;
        int np, artefacts;
        uint64_t seed;
    } failed[] = {
        {{{209.0, 149.3}, {518.3, 118.2}}, {209.3, 247.1}, 0.92, 2, 0, 92},
        {{{74.0, 132.7}, {0.0, 0.0}}, {160.7, 0.0}, 0.75, 1, 1, 129},
        {{{171.0, 179.3}, {431.7, 175.5}}, {239.3, 280.0}, 0.89, 2, 0, 158},
        {{{245.8, 118.6}, {482.0, 193.9}}, {213.4, 220.0}, 0.96, 2, 0, 372},
    };
    for (size_t k = 0; k < sizeof failed / sizeof failed[0]; k++) {
        sw_image f = falloff_frame(640, 320, failed[k].np, failed[k].c, failed[k].d,
                                   failed[k].falloff, failed[k].artefacts, failed[k].seed);
        sw_pupil_params p;
        sw_pupil_params_default(&p, 640, 320, SW_PIX_F32);
        p.n_pupils = failed[k].np;
        p.edge_level = SW_PUPIL_EDGE_AUTO;
        char what[96];
        snprintf(what, sizeof what, "a refit that finds nothing, case %zu", k);
        compare(what, &p, &f, k % 2 ? DEVICE_FRAME : HOST_FRAME, NULL);
        sw_image_free(&f);
    }

    /* the retries (test_pupil_auto's test_retry_falloff): eyes as `sim eye` makes them, glow
     * falling off by 0.8 and 0.9, where the first fit at 0.4 fails and a retry at a lower level
     * finds the pupil (0.9 seed 3: all three retries, and a refit dropped for its ragged edge) */
    const double rfall[4] = {0.8, 0.8, 0.9, 0.9};
    const int rseed[4] = {0, 1, 1, 3};
    for (int k = 0; k < 4; k++) {
        const int s = rseed[k];
        const double c[1][2] = {{319.5 + 3.0 * s, 319.5 - 2.0 * s}}, d[1] = {576.0 - 6.0 * s};
        sw_image el = falloff_frame(640, 640, 1, c, d, rfall[k], 1,
                                    71 + 10 * (uint64_t)(k / 2) + (uint64_t)s);
        const sw_pixel_type type = k % 2 ? SW_PIX_U16 : SW_PIX_F32;
        sw_image f = as_type(&el, type, 20.0, 100.0);
        sw_pupil_result ra, r4;
        for (int autolevel = 1; autolevel >= 0; autolevel--) {
            sw_pupil_params p;
            sw_pupil_params_default(&p, 640, 640, type);
            p.edge_level = autolevel ? SW_PUPIL_EDGE_AUTO : 0.4;
            char what[128];
            snprintf(what, sizeof what, "retries: fall-off %g, seed %d, %s, edge level %s",
                     rfall[k], s, sw_pixel_type_string(type), autolevel ? "auto" : "0.4");
            compare(what, &p, &f, k % 2 ? DEVICE_FRAME : HOST_FRAME, autolevel ? &ra : &r4);
        }
        printf("    retries: fall-off %g, seed %d, %s: 0.4 %s (threshold %d), auto %s (threshold "
               "%d, a %.2f px)\n",
               rfall[k], s, sw_pixel_type_string(type), r4.pupil[0].valid ? "found" : "not found",
               r4.pupil[0].threshold, ra.pupil[0].valid ? "found" : "not found",
               ra.pupil[0].threshold, ra.pupil[0].a_px);
        if (type == SW_PIX_F32) {
            assert_false(r4.pupil[0].valid);
            assert_found("retries", &ra, 0);
        }
        sw_image_free(&f);
        sw_image_free(&el);
    }

    /* every retry fails (test_pupil_auto's test_retry_keeps_before): no glow, and a dim glow at
     * pitch 16: the first fit's pupil, mask and border list, as the CPU's */
    const double rglow[2] = {0.0, 2.0};
    const int32_t rpitch[2] = {32, 16};
    for (int k = 0; k < 2; k++) {
        const double c[1][2] = {{192.0, 188.0}}, d[1] = {300.0};
        sw_image f =
            falloff_frame_lit(384, 384, 1, c, d, 0.3, 1, 5 + (uint64_t)k, rglow[k], rpitch[k]);
        sw_pupil_params p;
        sw_pupil_params_default(&p, 384, 384, SW_PIX_F32);
        p.edge_level = SW_PUPIL_EDGE_AUTO;
        char what[96];
        snprintf(what, sizeof what, "retries that fail: glow %g, pitch %d", rglow[k],
                 (int)rpitch[k]);
        sw_pupil_result r;
        compare(what, &p, &f, k % 2 ? DEVICE_FRAME : HOST_FRAME, &r);
        assert_false(r.pupil[0].valid);
        sw_image_free(&f);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monocular),         cmocka_unit_test(test_camera_and_edge),
        cmocka_unit_test(test_binocular),         cmocka_unit_test(test_odd_sizes_and_radii),
        cmocka_unit_test(test_no_pupil_and_nan),  cmocka_unit_test(test_sequence),
        cmocka_unit_test(test_threshold_options), cmocka_unit_test(test_large_u32),
        cmocka_unit_test(test_auto_edge),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
