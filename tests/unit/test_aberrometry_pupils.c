/*
 * The aberrometry pipeline (aberrometry.h) on the CPU with the pupils it tracks, not the true
 * radius (issue 22): population eyes of 1 and 4 um RMS (Thibos et al. 2002's statistics at
 * 5.12 mm) with no retinal glow at lenslet pitches 20 and 32 px (the spots path finds the pupil),
 * with the seed's corneal reflection, brightness map and noise on; an eye whose glow falls off by
 * 60 % at the edge (the glow path); each measured to within 0.15 um RMS of the truth over orders
 * 2-6 and within 0.1 um of what the same frame gives with the true pupil given; the eye reports
 * its pupil's method. A glow-less frame with the spots path turned off has no result (and says
 * why), and discarding's contrast follows the pixel type (a u8 frame and the same frame as u16 x
 * 257 and as f32 / 255 give the same coefficients).
 */
#include "testutil.h"

#include "spotwave/aberrometry.h"
#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *cpu;

static int setup(void **state)
{
    (void)state;
    cpu = sw_test_cpu_context(2);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(cpu);
    return 0;
}

#define TERMS 28

static void population_eye(uint64_t index, double total_rms_um, double *coef)
{
    sw_ocular_population pop;
    if (sw_ocular_population_load(cpu, NULL, 6.0, &pop) != SW_OK)
        fail_msg("population: %s", sw_context_error(cpu));
    sw_ocular_options o;
    sw_ocular_options_default(&o);
    o.pupil_mm = 5.12;
    o.max_order = 6;
    o.total_rms_um = total_rms_um;
    if (sw_ocular_draw(cpu, &pop, 22, index, &o, coef, TERMS) != SW_OK)
        fail_msg("sw_ocular_draw: %s", sw_context_error(cpu));
    sw_ocular_population_free(&pop);
}

typedef struct eye_frame {
    sw_eyesim_params ep;
    sw_eyesim_truth truth;
    sw_image img, ref;
    double *rx, *ry;
    double coef[TERMS];
} eye_frame;

/* A 640 x 640 eye of `pitch` px lenslets (focal length 3.5 mm x pitch / 32: the spots keep
 * their size in pixels) with a 576 px, 5.12 mm pupil; glow: 0, or 20 e- falling off by
 * falloff; the seed's reflection, brightness map and white noise; its reference frame and
 * reference centroids. */
static void make_eye(eye_frame *f, double pitch, double rms_um, uint64_t index, double glow,
                     double falloff)
{
    memset(f, 0, sizeof *f);
    population_eye(index, rms_um, f->coef);
    sw_eyesim_params *p = &f->ep;
    sw_eyesim_params_default(p);
    p->sh.geom.pitch_px = pitch;
    p->sh.geom.nx = p->sh.geom.ny = (int32_t)(640 / pitch);
    p->sh.geom.focal_mm = 3.5 * pitch / 32.0;
    sw_eye_artefacts_default(&p->art);
    p->art.glow_e = glow;
    p->art.glow_falloff = falloff;
    p->eyes[0].coef_um = f->coef;
    p->eyes[0].count = TERMS;
    p->seed = 100 + index;
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &f->img), SW_OK);
    if (sw_eyesim_render(cpu, p, &f->img, &f->truth) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    sw_shsim_params rp = p->sh;
    memset(&rp.pupil, 0, sizeof rp.pupil);
    rp.min_illum = 0.0;
    sw_shsim *sim = NULL;
    assert_int_equal(sw_shsim_create(cpu, &rp, &sim), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &f->ref), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &f->ref, 0), SW_OK);
    sw_shsim_destroy(sim);
    const size_t nl = (size_t)p->sh.geom.nx * p->sh.geom.ny;
    f->rx = malloc(nl * sizeof(double));
    f->ry = malloc(nl * sizeof(double));
    assert_non_null(f->rx);
    assert_non_null(f->ry);
    int32_t found = 0;
    if (sw_aberrometry_reference(cpu, &p->sh.geom, &f->ref, f->rx, f->ry, &found) != SW_OK)
        fail_msg("reference: %s", sw_context_error(cpu));
    assert_true(found == (int32_t)nl);
}

static void free_eye(eye_frame *f)
{
    sw_eyesim_truth_free(&f->truth);
    sw_image_free(&f->img);
    sw_image_free(&f->ref);
    free(f->rx);
    free(f->ry);
}

/* The pipeline's parameters for f's frames of type t: the seed's (aberrometry.h defaults), the
 * simulator's magnification, contrast in the frame's units when full_scale > 0. */
static void ab_params(sw_aberrometry_params *p, const eye_frame *f, sw_pixel_type t)
{
    sw_aberrometry_params_default(p, 640, 640, t, &f->ep.sh.geom);
    p->ref_x = f->rx;
    p->ref_y = f->ry;
    p->magnification = 576.0 * f->ep.sh.geom.pixel_um / 5120.0;
}

static sw_aberrometry_eye run(const sw_aberrometry_params *p, const sw_image *img)
{
    sw_aberrometry_plan *plan = NULL;
    if (sw_aberrometry_create(cpu, p, &plan) != SW_OK)
        fail_msg("sw_aberrometry_create: %s", sw_context_error(cpu));
    sw_aberrometry_result r;
    if (sw_aberrometry_run(plan, img, &r) != SW_OK)
        fail_msg("sw_aberrometry_run: %s", sw_context_error(cpu));
    sw_aberrometry_destroy(plan);
    return r.eye[0];
}

static double rmse(const double *a, const double *b)
{
    double s = 0.0;
    for (int j = 3; j < TERMS; j++)
        s += (a[j] - b[j]) * (a[j] - b[j]);
    return sqrt(s);
}

/* Tracked vs given vs truth on one eye. */
static void tracked_vs_given(const char *name, const eye_frame *f, sw_pupil_method want)
{
    sw_aberrometry_params p;
    ab_params(&p, f, SW_PIX_F32);
    p.discard_contrast = 15.0;
    p.contrast_full_scale = 255.0; /* the frames are electrons, spots peaking at ~250 */
    const sw_aberrometry_eye tr = run(&p, &f->img);
    const sw_eye_truth *t = &f->truth.eye[0];
    p.pupil.given = 1;
    p.pupil.given_pupil[0] = (sw_pupil_shape){t->cx_px, t->cy_px, t->a_px, t->b_px, t->angle_deg};
    const sw_aberrometry_eye gv = run(&p, &f->img);
    if (!tr.valid)
        fail_msg("%s: no result (%s; pupil: %s, spots path: %s)", name,
                 sw_ab_failure_string(tr.failure), sw_pupil_failure_string(tr.pupil.failure),
                 sw_pupil_failure_string(tr.pupil.spots_failure));
    assert_true(gv.valid);
    assert_int_equal(gv.pupil.method, SW_PUPIL_METHOD_GIVEN);
    const double e_tr = rmse(tr.coef_um, f->coef), e_gv = rmse(gv.coef_um, f->coef);
    const double e_tg = rmse(tr.coef_um, gv.coef_um);
    printf("    %-34s %-5s pupil %.2f px off, radius %.2f / %.1f; RMSE tracked %.4f um, given "
           "%.4f um, between %.4f um\n",
           name, sw_pupil_method_string(tr.pupil.method),
           hypot(tr.pupil.cx_px - t->cx_px, tr.pupil.cy_px - t->cy_px), tr.radius_px, t->a_px, e_tr,
           e_gv, e_tg);
    assert_int_equal(tr.pupil.method, want);
    if (want == SW_PUPIL_METHOD_SPOTS)
        assert_int_not_equal(tr.pupil.glow_failure, SW_PUPIL_OK);
    assert_true(e_tr < 0.15);
    assert_true(e_tg < 0.1);
    assert_true(fabs(tr.pupil_mm - 5.12) < 0.05);
}

static void test_glowless_tracked(void **state)
{
    (void)state;
    static const double pitch[2] = {20.0, 32.0}, rms[2] = {1.0, 4.0};
    for (int k = 0; k < 2; k++) {
        eye_frame f;
        make_eye(&f, pitch[k], rms[k], (uint64_t)k, 0.0, 0.0);
        char name[64];
        snprintf(name, sizeof name, "glow-less, pitch %g, %g um", pitch[k], rms[k]);
        tracked_vs_given(name, &f, SW_PUPIL_METHOD_SPOTS);

        /* without the spots path: no pupil, no result, and the reasons */
        sw_aberrometry_params p;
        ab_params(&p, &f, SW_PIX_F32);
        p.contrast_full_scale = 255.0;
        p.pupil.spots_fallback = 0;
        const sw_aberrometry_eye e = run(&p, &f.img);
        assert_false(e.valid);
        assert_int_equal(e.failure, SW_AB_NO_PUPIL);
        assert_int_not_equal(e.pupil.glow_failure, SW_PUPIL_OK);
        free_eye(&f);
    }
}

static void test_falling_glow_tracked(void **state)
{
    (void)state;
    eye_frame f;
    make_eye(&f, 32.0, 3.0, 7, 20.0, 0.6);
    tracked_vs_given("glow falling off by 60 %, 3 um", &f, SW_PUPIL_METHOD_GLOW);
    free_eye(&f);
}

/* u8 frame v, u16 257 v, f32 v / 255: the same spots kept, the same coefficients. */
static void test_contrast_by_type(void **state)
{
    (void)state;
    eye_frame f;
    make_eye(&f, 32.0, 2.0, 3, 20.0, 0.3);
    sw_image u8, u16, f32;
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U8, &u8), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U16, &u16), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &f32), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &f.img, &u8, 1.0, 0.0, NULL), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &u8, &u16, 257.0, 0.0, NULL), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &u8, &f32, 1.0 / 255.0, 0.0, NULL), SW_OK);
    sw_image ref8;
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U8, &ref8), SW_OK);
    assert_int_equal(sw_image_convert(cpu, &f.ref, &ref8, 1.0, 0.0, NULL), SW_OK);
    const sw_image *frames[3] = {&u8, &u16, &f32};
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    sw_aberrometry_eye e[3];
    for (int k = 0; k < 3; k++) {
        sw_aberrometry_params p;
        ab_params(&p, &f, types[k]);
        e[k] = run(&p, frames[k]);
        assert_true(e[k].valid);
        printf("    %-4s kept %d, discarded %d %d %d, RMSE %.4f um\n",
               sw_pixel_type_string(types[k]), e[k].kept, e[k].discarded[0], e[k].discarded[1],
               e[k].discarded[2], rmse(e[k].coef_um, f.coef));
    }
    for (int k = 1; k < 3; k++) {
        assert_int_equal(e[k].kept, e[0].kept);
        assert_int_equal(e[k].discarded[0], e[0].discarded[0]);
        assert_true(rmse(e[k].coef_um, e[0].coef_um) < 1e-6);
    }
    /* the contrast really is at work: with raw pixel units (full scale 255) the float frame in
     * [0, 1] keeps no spot (criterion 1 discards them all) */
    sw_aberrometry_params p;
    ab_params(&p, &f, SW_PIX_F32);
    p.contrast_full_scale = 255.0;
    const sw_aberrometry_eye raw = run(&p, &f32);
    assert_false(raw.valid);
    assert_true(raw.failure == SW_AB_FEW_CENTRAL || raw.failure == SW_AB_FEW_SPOTS);
    assert_true(sw_aberrometry_full_scale(&p) == 255.0);
    p.contrast_full_scale = 0.0;
    assert_true(sw_aberrometry_full_scale(&p) == 1.0);
    sw_image_free(&u8);
    sw_image_free(&u16);
    sw_image_free(&f32);
    sw_image_free(&ref8);
    free_eye(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_glowless_tracked),
        cmocka_unit_test(test_falling_glow_tracked),
        cmocka_unit_test(test_contrast_by_type),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
