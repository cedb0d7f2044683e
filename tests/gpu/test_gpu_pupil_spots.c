/*
 * The spots path and given pupils on the GPU against the CPU (pupil.h "Pupils made of spots
 * alone", "Given pupils"; issue 22): a glow-less eye tracked from a host and from a device
 * frame (the device tracker misses it, the host finds it from the spots: the same ellipse as the
 * CPU's, bit for bit, and the same lenslet mask on the device); the aberrometry pipeline on a
 * batch of frames with and without glow on two streams (each frame's pupil method, ellipse and
 * coefficients as the CPU's, to rounding), with a given pupil, and with the automatic edge level
 * (pupil.h step 3d: its refits in the tracker's graph, the frames without glow still found by
 * the spots path); spots_fallback 2; a glow falling off by 0.95, whose pupil a retry of step 3d
 * found and the spots path measures again; lenslets of 10 px, where the spots path measures
 * every pupil. Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/aberrometry.h"
#include "spotwave/pupil.h"
#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *gpu, *cpu;

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

static const double COEF[13] = {0, 0, 0, 0.6, 1.5, -0.8, 0, 0.4, -0.3, 0.15, 0, 0, 0.2};

/* A u8 640 x 640 eye at a pitch of `pitch` px (focal length 3.5 mm x pitch / 32), glow 0 or
 * 20 e-, seed's artefacts. */
static sw_image eye_u8_pitch(double glow, uint64_t seed, double pitch, sw_eyesim_params *sp)
{
    sw_eyesim_params_default(sp);
    sp->sh.geom.pitch_px = pitch;
    sp->sh.geom.nx = sp->sh.geom.ny = (int32_t)(640.0 / pitch);
    sp->sh.geom.focal_mm = 3.5 * pitch / 32.0;
    sw_eye_artefacts_default(&sp->art);
    sp->art.glow_e = glow;
    sp->eyes[0].coef_um = COEF;
    sp->eyes[0].count = 13;
    sp->seed = seed;
    sw_image e, u;
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &e), SW_OK);
    assert_int_equal(sw_eyesim_render(cpu, sp, &e, NULL), SW_OK);
    for (int32_t y = 0; y < 640; y++) {
        float *row = sw_image_row(&e, y);
        for (int32_t x = 0; x < 640; x++)
            row[x] = row[x] < 0.0f ? 0.0f : row[x] / 1.5f;
    }
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U8, &u), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &e, &u, 1.0, 0.0, NULL), SW_OK);
    sw_image_free(&e);
    return u;
}

/* The same at pitch 20 (focal length 2.1875 mm). */
static sw_image eye_u8(double glow, uint64_t seed, sw_eyesim_params *sp)
{
    return eye_u8_pitch(glow, seed, 20.0, sp);
}

static sw_image to_device(const sw_image *h)
{
    sw_image d;
    if (sw_image_alloc_device(gpu, h->width, h->height, h->type, &d) != SW_OK ||
        sw_image_copy(gpu, h, &d) != SW_OK)
        fail_msg("device frame: %s", sw_context_error(gpu));
    return d;
}

/* The plan's device lenslet mask (nx * ny bytes) into host memory. */
static void device_mask(sw_pupil_plan *plan, int32_t nx, int32_t ny, uint8_t *out)
{
    const uint8_t *dm = sw_pupil_lenslet_mask_device(plan);
    assert_non_null(dm);
    sw_image dv, hv;
    assert_int_equal(sw_image_wrap((void *)dm, nx, ny, 0, SW_PIX_U8, SW_MEM_DEVICE, &dv), SW_OK);
    assert_int_equal(sw_image_wrap(out, nx, ny, 0, SW_PIX_U8, SW_MEM_HOST, &hv), SW_OK);
    if (sw_image_copy(gpu, &dv, &hv) != SW_OK)
        fail_msg("copying the device mask: %s", sw_context_error(gpu));
}

static void same_ellipse(const sw_pupil_ellipse *a, const sw_pupil_ellipse *b, double tol)
{
    assert_int_equal(a->valid, b->valid);
    assert_int_equal(a->method, b->method);
    assert_int_equal(a->failure, b->failure);
    /* the glow path's reason: both failed, the same way but where a count sits exactly at a
     * limit (pupil.h: inliers and near may differ by one or two) */
    assert_int_equal(a->glow_failure == SW_PUPIL_OK, b->glow_failure == SW_PUPIL_OK);
    assert_int_equal(a->spots_failure, b->spots_failure);
    if (!a->valid)
        return;
    assert_true(fabs(a->cx_px - b->cx_px) <= tol && fabs(a->cy_px - b->cy_px) <= tol);
    assert_true(fabs(a->a_px - b->a_px) <= tol && fabs(a->b_px - b->b_px) <= tol);
}

static void test_pupil_spots(void **state)
{
    (void)state;
    sw_eyesim_params sp;
    sw_image h = eye_u8(0.0, 3, &sp);
    sw_image d = to_device(&h);
    const size_t nl = 32 * 32;
    for (int mode = 1; mode <= 2; mode++) {
        sw_pupil_params p;
        sw_pupil_params_default(&p, 640, 640, SW_PIX_U8);
        p.geometry = &sp.sh.geom;
        p.spots_fallback = mode;
        sw_pupil_plan *pc = NULL, *pg = NULL;
        assert_int_equal(sw_pupil_create(cpu, &p, &pc), SW_OK);
        assert_int_equal(sw_pupil_create(gpu, &p, &pg), SW_OK);
        sw_pupil_result rc, rh, rd;
        uint8_t mc[32 * 32], mh[32 * 32], md[32 * 32], mdev[32 * 32];
        assert_int_equal(sw_pupil_run(pc, &h, &rc, mc), SW_OK);
        assert_int_equal(sw_pupil_run(pg, &h, &rh, mh), SW_OK);
        assert_int_equal(sw_pupil_run(pg, &d, &rd, md), SW_OK);
        assert_int_equal(rc.pupil[0].valid, 1);
        assert_int_equal(rc.pupil[0].method, SW_PUPIL_METHOD_SPOTS);
        same_ellipse(&rc.pupil[0], &rh.pupil[0], 0.0); /* the same host code on the same data */
        same_ellipse(&rc.pupil[0], &rd.pupil[0], 0.0);
        assert_memory_equal(mc, mh, nl);
        assert_memory_equal(mc, md, nl);
        device_mask(pg, 32, 32, mdev);
        assert_memory_equal(mc, mdev, nl);
        sw_pupil_destroy(pc);
        sw_pupil_destroy(pg);
    }
    sw_image_free(&d);
    sw_image_free(&h);
}

/* The reference centroids of sp's grid (every lenslet lit, a flat wavefront, 1.5 e- per ADU)
 * into rx, ry. */
static void reference_of(const sw_eyesim_params *sp, double *rx, double *ry)
{
    sw_shsim_params rp = sp->sh;
    memset(&rp.pupil, 0, sizeof rp.pupil);
    rp.min_illum = 0.0;
    sw_shsim *sim = NULL;
    sw_image rf, r8;
    assert_int_equal(sw_shsim_create(cpu, &rp, &sim), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &rf), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &rf, 0), SW_OK);
    sw_shsim_destroy(sim);
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U8, &r8), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &rf, &r8, 1.0 / 1.5, 0.0, NULL), SW_OK);
    assert_int_equal(sw_aberrometry_reference(cpu, &sp->sh.geom, &r8, rx, ry, NULL), SW_OK);
    sw_image_free(&rf);
    sw_image_free(&r8);
}

static void test_aberrometry_batch(void **state)
{
    (void)state;
    sw_eyesim_params sp;
    sw_image frames[4];
    /* glow, none, none, glow: the streams see both kinds, one after the other */
    frames[0] = eye_u8(20.0, 11, &sp);
    frames[1] = eye_u8(0.0, 12, &sp);
    frames[2] = eye_u8(0.0, 13, &sp);
    frames[3] = eye_u8(20.0, 14, &sp);
    sw_image dev = to_device(&frames[2]);
    double rx[32 * 32], ry[32 * 32];
    reference_of(&sp, rx, ry);
    for (int mode = 0; mode <= 2; mode++) {
        const int given = mode == 1, autolevel = mode == 2;
        sw_aberrometry_params p;
        sw_aberrometry_params_default(&p, 640, 640, SW_PIX_U8, &sp.sh.geom);
        p.ref_x = rx;
        p.ref_y = ry;
        p.streams = 2;
        if (given) {
            p.pupil.given = 1;
            p.pupil.given_pupil[0] = (sw_pupil_shape){319.5, 319.5, 288.0, 288.0, 0.0};
        }
        if (autolevel)
            p.pupil.edge_level = SW_PUPIL_EDGE_AUTO;
        sw_aberrometry_plan *pc = NULL, *pg = NULL;
        assert_int_equal(sw_aberrometry_create(cpu, &p, &pc), SW_OK);
        assert_int_equal(sw_aberrometry_create(gpu, &p, &pg), SW_OK);
        const sw_image *in[5] = {&frames[0], &frames[1], &frames[2], &frames[3], &dev};
        sw_aberrometry_result rc[5], rg[5];
        assert_int_equal(sw_aberrometry_run_batch(pg, in, 5, rg), SW_OK);
        for (int k = 0; k < 5; k++) {
            assert_int_equal(sw_aberrometry_run(pc, k < 4 ? in[k] : &frames[2], &rc[k]), SW_OK);
            const sw_aberrometry_eye *a = &rc[k].eye[0], *b = &rg[k].eye[0];
            printf("    frame %d%s: %s pupil (%.3f, %.3f) a %.3f, threshold %d/%d; valid %d/%d\n",
                   k,
                   given       ? " (given)"
                   : autolevel ? " (automatic edge level)"
                               : "",
                   sw_pupil_method_string(a->pupil.method), a->pupil.cx_px, a->pupil.cy_px,
                   a->pupil.a_px, a->pupil.threshold, b->pupil.threshold, a->valid, b->valid);
            assert_true(a->valid && b->valid);
            const sw_pupil_method want = given                ? SW_PUPIL_METHOD_GIVEN
                                         : (k == 0 || k == 3) ? SW_PUPIL_METHOD_GLOW
                                                              : SW_PUPIL_METHOD_SPOTS;
            assert_int_equal(a->pupil.method, want);
            assert_int_equal(a->pupil.threshold, b->pupil.threshold);
            /* the glow path's refit rounds differently on the two (pupil.h): 1e-6 px */
            same_ellipse(&a->pupil, &b->pupil, want == SW_PUPIL_METHOD_GLOW ? 1e-6 : 0.0);
            assert_int_equal(a->kept, b->kept);
            for (int j = 1; j < a->terms; j++)
                assert_true(fabs(a->coef_um[j] - b->coef_um[j]) < 1e-6);
        }
        sw_aberrometry_destroy(pc);
        sw_aberrometry_destroy(pg);
    }
    for (int k = 0; k < 4; k++)
        sw_image_free(&frames[k]);
    sw_image_free(&dev);
}

/* A glow falling off by 0.95 (test_pupil_spots' test_steep_falloff: sim eye's defaults, every
 * artefact, shot noise, 8 bits; seeds 4 and 5): the device tracker's retry finds the pupil, its
 * refit finds nothing (pupil_model.h sw_pm_auto_recheck, in the mapped pp_out), and the host's
 * spots path measures it again: the CPU's ellipse and reason, from a host and a device frame,
 * and through the aberrometry pipeline (whose frame runs again with the spots pupil). */
static void test_steep_falloff(void **state)
{
    (void)state;
    int rechecked = 0;
    for (uint64_t seed = 4; seed <= 5; seed++) {
        sw_eyesim_params sp;
        sw_eyesim_params_default(&sp);
        sw_eye_artefacts_default(&sp.art);
        sp.art.glow_falloff = 0.95;
        sp.eyes[0].coef_um = COEF;
        sp.eyes[0].count = 13;
        sp.seed = seed;
        sw_image e, h;
        assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &e), SW_OK);
        assert_int_equal(sw_eyesim_render(cpu, &sp, &e, NULL), SW_OK);
        float *px = (float *)e.data;
        for (size_t k = 0; k < (size_t)640 * 640; k++)
            px[k] = px[k] < 0.0f ? 0.0f : px[k];
        sw_detector det;
        sw_detector_default(&det);
        det.shot_noise = 1;
        det.gain_e_per_adu = 1.5;
        det.out_type = SW_PIX_U8;
        det.seed = seed ^ 0x5eedull;
        assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U8, &h), SW_OK);
        assert_int_equal(sw_detector_apply(cpu, &det, &e, &h), SW_OK);
        sw_image_free(&e);
        sw_image d = to_device(&h);
        sw_pupil_params p;
        sw_pupil_params_default(&p, 640, 640, SW_PIX_U8);
        p.geometry = &sp.sh.geom;
        sw_pupil_plan *pc = NULL, *pg = NULL;
        assert_int_equal(sw_pupil_create(cpu, &p, &pc), SW_OK);
        assert_int_equal(sw_pupil_create(gpu, &p, &pg), SW_OK);
        sw_pupil_result rc, rh, rd;
        assert_int_equal(sw_pupil_run(pc, &h, &rc, NULL), SW_OK);
        assert_int_equal(sw_pupil_run(pg, &h, &rh, NULL), SW_OK);
        assert_int_equal(sw_pupil_run(pg, &d, &rd, NULL), SW_OK);
        printf("    fall-off 0.95, seed %d: CPU %s (%s), a %.3f; GPU %s, a %.3f\n", (int)seed,
               sw_pupil_method_string(rc.pupil[0].method),
               sw_pupil_failure_string(rc.pupil[0].glow_failure), rc.pupil[0].a_px,
               sw_pupil_method_string(rh.pupil[0].method), rh.pupil[0].a_px);
        rechecked +=
            rc.pupil[0].method == SW_PUPIL_METHOD_SPOTS && rc.pupil[0].glow_failure != SW_PUPIL_OK;
        same_ellipse(&rc.pupil[0], &rh.pupil[0], 0.0);
        same_ellipse(&rc.pupil[0], &rd.pupil[0], 0.0);
        assert_int_equal(rc.pupil[0].glow_failure, rh.pupil[0].glow_failure);
        /* the aberrometer: the same pupil and coefficients */
        const int32_t nl = sp.sh.geom.nx * sp.sh.geom.ny;
        double *rx = malloc(2 * (size_t)nl * sizeof(double));
        assert_non_null(rx);
        reference_of(&sp, rx, rx + nl);
        sw_aberrometry_params ap;
        sw_aberrometry_params_default(&ap, 640, 640, SW_PIX_U8, &sp.sh.geom);
        ap.ref_x = rx;
        ap.ref_y = rx + nl;
        sw_aberrometry_plan *ac = NULL, *ag = NULL;
        assert_int_equal(sw_aberrometry_create(cpu, &ap, &ac), SW_OK);
        assert_int_equal(sw_aberrometry_create(gpu, &ap, &ag), SW_OK);
        sw_aberrometry_result xc, xg;
        assert_int_equal(sw_aberrometry_run(ac, &h, &xc), SW_OK);
        assert_int_equal(sw_aberrometry_run(ag, &d, &xg), SW_OK);
        const sw_aberrometry_eye *a = &xc.eye[0], *b = &xg.eye[0];
        assert_true(a->valid && b->valid);
        same_ellipse(&a->pupil, &rc.pupil[0], 0.0);
        same_ellipse(&a->pupil, &b->pupil, 0.0);
        assert_int_equal(a->kept, b->kept);
        for (int j = 1; j < a->terms; j++)
            assert_true(fabs(a->coef_um[j] - b->coef_um[j]) < 1e-6);
        sw_aberrometry_destroy(ac);
        sw_aberrometry_destroy(ag);
        free(rx);
        sw_pupil_destroy(pc);
        sw_pupil_destroy(pg);
        sw_image_free(&d);
        sw_image_free(&h);
    }
    assert_true(rechecked >= 1);
}

/* Lenslets of 10 px (at most 4 smoothing sigmas, pupil.h): the glow path finds the smoothed spots,
 * with or without a glow, and the spots path measures every pupil; the GPU plan, from a host and
 * a device frame, gives the CPU's ellipse, method and lenslet mask. */
static void test_small_pitch(void **state)
{
    (void)state;
    for (int glow = 0; glow < 2; glow++) {
        sw_eyesim_params sp;
        sw_image h = eye_u8_pitch(glow ? 20.0 : 0.0, 21 + (uint64_t)glow, 10.0, &sp);
        sw_image d = to_device(&h);
        sw_pupil_params p;
        sw_pupil_params_default(&p, 640, 640, SW_PIX_U8);
        p.geometry = &sp.sh.geom;
        sw_pupil_plan *pc = NULL, *pg = NULL;
        assert_int_equal(sw_pupil_create(cpu, &p, &pc), SW_OK);
        assert_int_equal(sw_pupil_create(gpu, &p, &pg), SW_OK);
        sw_pupil_result rc, rh, rd;
        static uint8_t mc[64 * 64], mh[64 * 64], md[64 * 64];
        assert_int_equal(sw_pupil_run(pc, &h, &rc, mc), SW_OK);
        assert_int_equal(sw_pupil_run(pg, &h, &rh, mh), SW_OK);
        assert_int_equal(sw_pupil_run(pg, &d, &rd, md), SW_OK);
        printf("    pitch 10, %s: CPU %s a %.3f b %.3f; GPU %s a %.3f\n", glow ? "glow" : "no glow",
               sw_pupil_method_string(rc.pupil[0].method), rc.pupil[0].a_px, rc.pupil[0].b_px,
               sw_pupil_method_string(rh.pupil[0].method), rh.pupil[0].a_px);
        assert_int_equal(rc.pupil[0].valid, 1);
        assert_int_equal(rc.pupil[0].method, SW_PUPIL_METHOD_SPOTS);
        same_ellipse(&rc.pupil[0], &rh.pupil[0], 0.0);
        same_ellipse(&rc.pupil[0], &rd.pupil[0], 0.0);
        assert_memory_equal(mc, mh, sizeof mc);
        assert_memory_equal(mc, md, sizeof mc);
        sw_pupil_destroy(pc);
        sw_pupil_destroy(pg);
        sw_image_free(&d);
        sw_image_free(&h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pupil_spots),
        cmocka_unit_test(test_aberrometry_batch),
        cmocka_unit_test(test_steep_falloff),
        cmocka_unit_test(test_small_pitch),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
