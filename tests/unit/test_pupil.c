/*
 * The pupil tracker on the CPU (pupil.h; seed 001 Sec. 3.1), end to end against synthetic eyes
 * (sim_eye.h): clean pupils of radius 50 to 300 px filling 5 % to 70 % of the frame, of several
 * positions, ellipticities and angles, found to 0.5 px and 1 % of the truth; pupils with the
 * artefacts of living eyes (corneal reflection, brightness map, tear film, white noise, detector
 * noise with and without a 100 ADU bias), cut by the image's edge, and overlapping pairs that
 * fill the frame, found to 1.5 px and 3 %; binocular frames with a fixed and an automatic split
 * and eyes 6 times apart in brightness; frames without a pupil (dark, uniform, saturated, read
 * noise, white noise, a lone corneal reflection on noise) reported as not found with NaN
 * geometry; NaN pixels; bad parameters and frames; the lenslet mask against the true ellipse;
 * the inspection images and border lists against their definitions (pupil.h steps 0, 3-5, 9);
 * the random numbers; thread-count independence.
 */
#include "testutil.h"

#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"
#include "spotwave/pupil.h"
#include "spotwave/rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI 3.14159265358979323846

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

typedef struct eye_case {
    double cx, cy, diameter, ellipticity, angle;
} eye_case;

/* Eye-simulator parameters for a w x h frame: 32-pixel lenslets covering it, the eyes given,
 * clean (only the glow, which the tracker sees) or with the default artefacts. */
static void eye_params(sw_eyesim_params *sp, int32_t w, int32_t h, int n_eyes, const eye_case *e,
                       int artefacts)
{
    sw_eyesim_params_default(sp);
    sp->sh.width = w;
    sp->sh.height = h;
    sp->sh.geom.nx = w / 32;
    sp->sh.geom.ny = h / 32;
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
    } else {
        sw_eye_artefacts_none(&sp->art);
        sp->art.glow_e = 20.0; /* the default glow (falloff 0.3, edge 1.5 px) */
    }
}

static sw_image render(const sw_eyesim_params *sp, sw_eyesim_truth *truth)
{
    sw_image img;
    if (sw_image_alloc(cpu, sp->sh.width, sp->sh.height, SW_PIX_F32, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(cpu));
    if (sw_eyesim_render(cpu, sp, &img, truth) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    return img;
}

/* The electrons as a camera gives them: shot noise, 3 e- read noise, gain 1 e-/ADU, a bias of
 * bias_adu, u16. */
static sw_image camera_u16(const sw_image *electrons, uint64_t seed, double bias_adu)
{
    sw_detector d;
    sw_detector_default(&d);
    d.read_noise_e = 3.0;
    d.bias_adu = bias_adu;
    d.out_type = SW_PIX_U16;
    d.seed = seed;
    sw_image out;
    if (sw_image_alloc(cpu, electrons->width, electrons->height, SW_PIX_U16, &out) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(cpu));
    /* white noise of the simulator may make electrons negative: the detector wants them >= 0 */
    for (int32_t y = 0; y < electrons->height; y++) {
        float *row = sw_image_row(electrons, y);
        for (int32_t x = 0; x < electrons->width; x++)
            if (row[x] < 0.0f)
                row[x] = 0.0f;
    }
    if (sw_detector_apply(cpu, &d, electrons, &out) != SW_OK)
        fail_msg("sw_detector_apply: %s", sw_context_error(cpu));
    return out;
}

static sw_pupil_plan *make_plan(const sw_pupil_params *p)
{
    sw_pupil_plan *plan = NULL;
    if (sw_pupil_create(cpu, p, &plan) != SW_OK)
        fail_msg("sw_pupil_create: %s", sw_context_error(cpu));
    return plan;
}

/* Tracks one frame with the default parameters (n_pupils, split_x as given). */
static sw_pupil_result track(const sw_image *img, int32_t n_pupils, int32_t split_x)
{
    sw_pupil_params p;
    sw_pupil_params_default(&p, img->width, img->height, img->type);
    p.n_pupils = n_pupils;
    p.split_x = split_x;
    sw_pupil_plan *plan = make_plan(&p);
    sw_pupil_result res;
    if (sw_pupil_run(plan, img, &res, NULL) != SW_OK)
        fail_msg("sw_pupil_run: %s", sw_context_error(cpu));
    sw_pupil_destroy(plan);
    return res;
}

typedef struct errors {
    double centre, axis, angle; /* px, relative, degrees */
} errors;

/* Errors of a found pupil against an eye's truth; the angle only for clearly elliptical eyes. */
static errors compare(const char *name, const sw_pupil_ellipse *f, const sw_eye_truth *t)
{
    if (!f->valid)
        fail_msg("%s: pupil not found (%s; border %d, threshold %d, votes %d)", name,
                 sw_pupil_failure_string(f->failure), f->border, f->threshold, f->votes);
    errors e;
    e.centre = hypot(f->cx_px - t->cx_px, f->cy_px - t->cy_px);
    const double ea = fabs(f->a_px - t->a_px) / t->a_px, eb = fabs(f->b_px - t->b_px) / t->b_px;
    e.axis = ea > eb ? ea : eb;
    e.angle = 0.0;
    if (t->b_px < 0.95 * t->a_px) {
        double d = fmod(fabs(f->angle_deg - t->angle_deg), 180.0);
        e.angle = d < 180.0 - d ? d : 180.0 - d;
    }
    printf("    %-34s centre %.3f px, axes %.3f %% (a %.2f/%.2f b %.2f/%.2f), angle %.2f deg, "
           "inliers %d/%d, t %d\n",
           name, e.centre, 100.0 * e.axis, f->a_px, t->a_px, f->b_px, t->b_px, e.angle, f->inliers,
           f->border, f->threshold);
    return e;
}

static void check_errors(const char *name, errors e, double centre_px, double axis_rel,
                         double angle_deg)
{
    if (!(e.centre < centre_px) || !(e.axis < axis_rel) || !(e.angle < angle_deg))
        fail_msg("%s: centre error %.3f px (< %g), axis error %.3f %% (< %g %%), angle error "
                 "%.2f deg (< %g)",
                 name, e.centre, centre_px, 100.0 * e.axis, 100.0 * axis_rel, e.angle, angle_deg);
}

static void assert_not_found(const sw_pupil_ellipse *f, sw_pupil_failure why)
{
    assert_int_equal(f->valid, 0);
    assert_int_equal(f->failure, why);
    assert_true(isnan(f->cx_px) && isnan(f->cy_px) && isnan(f->a_px) && isnan(f->b_px) &&
                isnan(f->angle_deg));
}

static sw_image alloc_img(int32_t w, int32_t h, sw_pixel_type t)
{
    sw_image img;
    if (sw_image_alloc(cpu, w, h, t, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(cpu));
    return img;
}

/* ---------------------------------------------------------------- accuracy */

/* Clean eyes (only the glow): 0.5 px and 1 % (the requirement), the major axis's
 * direction to 2 degrees, for pupils of semi-major axis 50 to 300 px filling 5 % to 70 % of the
 * frame (pupil.h step 0 maps the inside near 128 whatever its area, step 3's edge level puts the
 * threshold at the half height of the glow's dimmed edge). The f32 electrons go in as they
 * are. */
static void test_clean_monocular(void **state)
{
    (void)state;
    const struct {
        int32_t w, h;
        eye_case e;
    } cases[] = {
        {640, 640, {319.5, 319.5, 576.0, 1.0, 0.0}},   /* the seed's 640 x 640 case (64 %)  */
        {640, 640, {300.3, 341.8, 400.0, 0.8, 30.0}},  /* off centre, elliptical (25 %)     */
        {640, 640, {330.0, 310.0, 460.0, 0.9, 100.0}}, /* another angle (37 %)              */
        {640, 640, {250.0, 380.0, 210.0, 0.9, 45.0}},  /* small: 7.6 %                      */
        {640, 640, {330.0, 300.0, 600.0, 0.93, 10.0}}, /* large: 67 %                       */
        {320, 320, {161.2, 150.7, 240.0, 0.85, 64.0}}, /* a smaller frame (43 %)            */
        {320, 320, {150.0, 170.0, 260.0, 0.8, 160.0}},
        {320, 320, {140.0, 175.0, 110.0, 0.85, 120.0}}, /* small: 7.9 %                     */
        {320, 320, {162.0, 158.0, 296.0, 0.95, 80.0}},  /* large: 64 %                      */
    };
    errors worst = {0, 0, 0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_eyesim_params sp;
        eye_params(&sp, cases[i].w, cases[i].h, 1, &cases[i].e, 0);
        sw_eyesim_truth truth;
        sw_image img = render(&sp, &truth);
        sw_pupil_result r = track(&img, 1, -1);
        char name[64];
        snprintf(name, sizeof name, "clean %dx%d #%zu", cases[i].w, cases[i].h, i);
        assert_int_equal(r.n_pupils, 1);
        assert_int_equal(r.split_x, cases[i].w);
        assert_int_equal(r.pupil[0].x0, 0);
        assert_int_equal(r.pupil[0].x1, cases[i].w);
        assert_true(r.scale > 0.0);
        const errors e = compare(name, &r.pupil[0], &truth.eye[0]);
        check_errors(name, e, 0.5, 0.01, 2.0);
        worst.centre = fmax(worst.centre, e.centre);
        worst.axis = fmax(worst.axis, e.axis);
        worst.angle = fmax(worst.angle, e.angle);
        sw_eyesim_truth_free(&truth);
        sw_image_free(&img);
    }
    printf("    clean: worst centre %.3f px, axes %.3f %%, angle %.2f deg\n", worst.centre,
           100.0 * worst.axis, worst.angle);
}

/* The artefacts of living eyes (corneal reflection, brightness map, tear film, white noise):
 * 1.5 px and 3 %. Eyes as f32 electrons and through a camera (shot and read noise, u16, with and
 * without a bias of 100 ADU: the iris then maps to 3/4 of the pupil's 8-bit level, step 3's
 * three-class split still puts it below), two seeds each. */
static void test_artefacts_monocular(void **state)
{
    (void)state;
    const struct {
        eye_case e;
        int camera;
        double bias;
    } cases[] = {
        {{319.5, 319.5, 576.0, 1.0, 0.0}, 1, 0.0},     {{300.3, 341.8, 400.0, 0.8, 30.0}, 0, 0.0},
        {{352.6, 287.1, 250.0, 0.65, 118.0}, 0, 0.0},  {{330.0, 310.0, 460.0, 0.9, 100.0}, 1, 0.0},
        {{319.5, 319.5, 576.0, 1.0, 0.0}, 1, 100.0},   {{300.3, 341.8, 400.0, 0.8, 30.0}, 1, 100.0},
        {{260.0, 350.0, 220.0, 0.85, 60.0}, 1, 100.0},
    };
    errors worst = {0, 0, 0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (uint64_t seed = 11; seed <= 12; seed++) {
            sw_eyesim_params sp;
            eye_params(&sp, 640, 640, 1, &cases[i].e, 1);
            sp.art.tear_blobs = 6;
            sp.seed = seed;
            sw_eyesim_truth truth;
            sw_image e = render(&sp, &truth);
            sw_image img = e;
            if (cases[i].camera)
                img = camera_u16(&e, seed + 100, cases[i].bias);
            sw_pupil_result r = track(&img, 1, -1);
            char name[64];
            snprintf(name, sizeof name, "artefacts #%zu seed %d %s", i, (int)seed,
                     cases[i].camera ? (cases[i].bias > 0 ? "u16 + bias" : "u16") : "f32");
            const errors er = compare(name, &r.pupil[0], &truth.eye[0]);
            check_errors(name, er, 1.5, 0.03, 5.0);
            worst.centre = fmax(worst.centre, er.centre);
            worst.axis = fmax(worst.axis, er.axis);
            sw_eyesim_truth_free(&truth);
            if (cases[i].camera)
                sw_image_free(&img);
            sw_image_free(&e);
        }
    printf("    artefacts: worst centre %.3f px, axes %.3f %%\n", worst.centre, 100.0 * worst.axis);
}

/* A pupil cut by the image's edges (RANSAC ignores the missing arc: the border stops at the
 * image's edge, pupil.h step 5), with artefacts: 1.5 px and 3 %. */
static void test_cut_by_edge(void **state)
{
    (void)state;
    const eye_case cases[] = {
        {560.0, 320.0, 400.0, 1.0, 0.0},  /* a third beyond the right edge     */
        {120.0, 80.0, 360.0, 0.85, 45.0}, /* beyond the top and the left edges */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sw_eyesim_params sp;
        eye_params(&sp, 640, 640, 1, &cases[i], 1);
        sp.seed = 21 + i;
        sw_eyesim_truth truth;
        sw_image img = render(&sp, &truth);
        sw_pupil_result r = track(&img, 1, -1);
        char name[64];
        snprintf(name, sizeof name, "cut by the edge #%zu", i);
        check_errors(name, compare(name, &r.pupil[0], &truth.eye[0]), 1.5, 0.03, 5.0);
        sw_eyesim_truth_free(&truth);
        sw_image_free(&img);
    }
}

/* Two overlapping pupils (20 px) with artefacts and tear film, the split found in the frame:
 * 1.5 px and 3 %, in a 640 x 480 frame and in a 640 x 320 one that the pupils nearly fill (the
 * corneal reflections then hold much of the bright pixels: step 3 clips them and splits three
 * classes, so that they cannot take the threshold), as f32 electrons and through a camera with
 * and without a bias. */
static void test_binocular_overlap(void **state)
{
    (void)state;
    static const char *kinds[3] = {"f32", "u16", "u16 + bias"};
    for (int k = 0; k < 7; k++) {
        const int32_t H = k < 3 ? 480 : 320;
        const int camera = k % 3;
        const double yc = 0.5 * H + 5.0;
        const eye_case eyes[2] = {{175.0, yc, 300.0, 1.0, 0.0},
                                  {450.0, yc - 7.0, 290.0, 0.9, 80.0}};
        sw_eyesim_params sp;
        eye_params(&sp, 640, H, 2, eyes, 1);
        sp.art.tear_blobs = 6;
        sp.seed = 31 + (uint64_t)k;
        sw_eyesim_truth truth;
        sw_image e = render(&sp, &truth);
        sw_image img = camera ? camera_u16(&e, 9 + (uint64_t)k, camera == 2 ? 100.0 : 0.0) : e;
        sw_pupil_result r = track(&img, 2, -1);
        printf("    overlapping pupils 640 x %d (%s, seed %d): split at %d\n", H, kinds[camera],
               31 + k, r.split_x);
        assert_int_equal(r.n_pupils, 2);
        /* the split lies at the waist of the two pupils (their radical line, x = 315), the
         * regions tile the frame */
        assert_true(abs(r.split_x - 315) < 20);
        assert_int_equal(r.pupil[0].x0, 0);
        assert_int_equal(r.pupil[0].x1, r.split_x);
        assert_int_equal(r.pupil[1].x0, r.split_x);
        assert_int_equal(r.pupil[1].x1, 640);
        check_errors("overlap, left", compare("overlap, left", &r.pupil[0], &truth.eye[0]), 1.5,
                     0.03, 90.0);
        check_errors("overlap, right", compare("overlap, right", &r.pupil[1], &truth.eye[1]), 1.5,
                     0.03, 5.0);
        sw_eyesim_truth_free(&truth);
        if (camera)
            sw_image_free(&img);
        sw_image_free(&e);
    }
}

/* Two separate clean eyes, the right one 6 times dimmer (two renders added with weights): a
 * threshold per region finds both, with a fixed split and with the automatic one, to the clean
 * cases' 0.5 px and 1 %. The dim region's threshold is well below the bright one's (one
 * threshold for the whole frame would lose the dim pupil). */
static void test_binocular_brightness(void **state)
{
    (void)state;
    const eye_case eyes[2] = {{150.0, 160.0, 240.0, 0.9, 20.0}, {470.0, 150.0, 220.0, 1.0, 0.0}};
    sw_eyesim_truth truth[2];
    sw_image img[2];
    for (int i = 0; i < 2; i++) {
        sw_eyesim_params sp;
        eye_params(&sp, 640, 320, 1, &eyes[i], 0);
        img[i] = render(&sp, &truth[i]);
    }
    for (int32_t y = 0; y < 320; y++) {
        float *a = sw_image_row(&img[0], y);
        const float *b = sw_image_row(&img[1], y);
        for (int32_t x = 0; x < 640; x++)
            a[x] += b[x] / 6.0f;
    }
    for (int k = 0; k < 2; k++) {
        const int32_t split = k == 0 ? 320 : -1;
        sw_pupil_result r = track(&img[0], 2, split);
        printf("    binocular %s split: %d\n", k == 0 ? "fixed" : "automatic", r.split_x);
        if (k == 0)
            assert_int_equal(r.split_x, 320);
        else
            assert_true(r.split_x > 270 && r.split_x < 360);
        assert_int_equal(r.pupil[0].x1, r.split_x);
        assert_int_equal(r.pupil[1].x0, r.split_x);
        check_errors("bright left", compare("bright left", &r.pupil[0], &truth[0].eye[0]), 0.5,
                     0.01, 3.0);
        check_errors("dim right", compare("dim right", &r.pupil[1], &truth[1].eye[0]), 0.5, 0.01,
                     90.0);
        assert_true(r.pupil[1].threshold < r.pupil[0].threshold / 2);
    }
    for (int i = 0; i < 2; i++) {
        sw_eyesim_truth_free(&truth[i]);
        sw_image_free(&img[i]);
    }
}

/* ---------------------------------------------------------------- frames without a pupil */

static void fill(sw_image *img, double v)
{
    for (int32_t y = 0; y < img->height; y++)
        for (int32_t x = 0; x < img->width; x++) {
            void *row = sw_image_row(img, y);
            switch (img->type) {
            case SW_PIX_U8: ((uint8_t *)row)[x] = (uint8_t)v; break;
            case SW_PIX_U16: ((uint16_t *)row)[x] = (uint16_t)v; break;
            case SW_PIX_U32: ((uint32_t *)row)[x] = (uint32_t)v; break;
            default: ((float *)row)[x] = (float)v; break;
            }
        }
}

static void test_no_pupil(void **state)
{
    (void)state;
    /* dark: the mean is 0, no automatic scale */
    sw_image dark = alloc_img(64, 48, SW_PIX_F32);
    sw_pupil_result r = track(&dark, 1, -1);
    assert_not_found(&r.pupil[0], SW_PUPIL_EMPTY_FRAME);
    assert_true(r.scale == 0.0);
    assert_int_equal(r.pupil[0].threshold, -1);
    assert_int_equal(r.pupil[0].candidate, -1);
    r = track(&dark, 2, -1);
    assert_not_found(&r.pupil[0], SW_PUPIL_EMPTY_FRAME);
    assert_not_found(&r.pupil[1], SW_PUPIL_EMPTY_FRAME);
    /* negative mean: empty too */
    fill(&dark, -5.0);
    r = track(&dark, 1, -1);
    assert_not_found(&r.pupil[0], SW_PUPIL_EMPTY_FRAME);
    sw_image_free(&dark);

    /* uniform and saturated frames: no contrast, nothing fabricated */
    const struct {
        sw_pixel_type t;
        double v, scale;
    } flat[] = {{SW_PIX_U16, 1000.0, 0.0},
                {SW_PIX_U16, 65535.0, 0.0},
                {SW_PIX_U8, 255.0, 1.0},
                {SW_PIX_F32, 3.5, 0.0}};
    for (size_t i = 0; i < sizeof flat / sizeof flat[0]; i++) {
        sw_image img = alloc_img(80, 64, flat[i].t);
        fill(&img, flat[i].v);
        sw_pupil_params p;
        sw_pupil_params_default(&p, 80, 64, flat[i].t);
        p.input_scale = flat[i].scale;
        sw_pupil_plan *plan = make_plan(&p);
        assert_int_equal(sw_pupil_run(plan, &img, &r, NULL), SW_OK);
        assert_not_found(&r.pupil[0], SW_PUPIL_NO_CONTRAST);
        assert_int_equal(r.pupil[0].threshold, -1);
        assert_int_equal(r.pupil[0].border, 0);
        assert_int_equal(r.pupil[0].candidate, -1);
        if (flat[i].scale > 0.0)
            assert_true(r.scale == flat[i].scale);
        else /* no pixel above the mean: m2 = m1 (pupil.h step 0) */
            assert_near(r.scale, 128.0 / flat[i].v, 1e-12 * r.scale);
        sw_pupil_destroy(plan);
        sw_image_free(&img);
    }

    /* noise: a camera's dark frame (read noise 3 e-, without and with a 100 ADU bias), white
     * noise on a level, and a lone corneal reflection (600 e-, sigma 12 px) on read noise and on
     * white noise, in 320 x 320 and 640 x 640 frames: no pupil, so not found, with NaN
     * geometry. Thresholded noise has a border dense everywhere: too few of it on any ellipse
     * (min_coverage) or too many points just off it (max_near_ratio); the lone reflection is a
     * clean disc of about 2.4 sigma, below the default min_radius_px of a tenth of the frame. */
    static const char *kinds[5] = {"read noise", "read noise + bias", "white noise",
                                   "read noise + reflection", "white noise + reflection"};
    int clutter = 0;
    for (int W = 320; W <= 640; W *= 2)
        for (int kind = 0; kind < 5; kind++)
            for (uint64_t seed = 1; seed <= (W == 320 ? 2u : 1u); seed++) {
                sw_image e = alloc_img(W, W, SW_PIX_F32);
                const sw_rng4 d = sw_rng_draw(seed, SW_RNG_STREAM_TEST, 1u << 30);
                const double rx = W * (0.2 + 0.6 * (double)(d.v[0] >> 8) / 16777216.0),
                             ry = W * (0.2 + 0.6 * (double)(d.v[1] >> 8) / 16777216.0);
                for (int32_t y = 0; y < W; y++) {
                    float *row = sw_image_row(&e, y);
                    for (int32_t x = 0; x < W; x++) {
                        double z0, z1, v = 0.0;
                        sw_rng_normal2(sw_rng_draw(seed, SW_RNG_STREAM_TEST, (uint64_t)(y * W + x)),
                                       &z0, &z1);
                        if (kind == 2 || kind == 4)
                            v = 50.0 + 5.0 * z0;
                        if (kind >= 3)
                            v += 600.0 * exp(-((x - rx) * (x - rx) + (y - ry) * (y - ry)) / 288.0);
                        row[x] = (float)v;
                    }
                }
                const int camera = kind == 0 || kind == 1 || kind == 3;
                sw_image img = camera ? camera_u16(&e, 40 + seed, kind == 1 ? 100.0 : 0.0) : e;
                r = track(&img, 1, -1);
                const sw_pupil_ellipse *f = &r.pupil[0];
                printf("    %d x %d %s (seed %d): %s (border %d, threshold %d, inliers %d, near "
                       "%d)\n",
                       W, W, kinds[kind], (int)seed, sw_pupil_failure_string(f->failure), f->border,
                       f->threshold, f->inliers, f->near);
                assert_int_equal(f->valid, 0);
                assert_true(f->failure != SW_PUPIL_OK && f->failure != SW_PUPIL_EMPTY_FRAME);
                assert_true(isnan(f->cx_px) && isnan(f->cy_px) && isnan(f->a_px) &&
                            isnan(f->b_px) && isnan(f->angle_deg));
                assert_true(f->inliers + f->near <= f->border);
                if (f->failure == SW_PUPIL_CLUTTER) {
                    assert_true(f->near > 0.75 * f->inliers);
                    clutter++;
                }
                if (camera)
                    sw_image_free(&img);
                sw_image_free(&e);
            }
    assert_true(clutter > 0); /* the near band is what turns some of them down */
}

/* NaN and Inf pixels count as 0 (pupil.h step 0): a few inside a clean pupil change nothing
 * that matters, a frame of NaN is empty. */
static void test_nan_pixels(void **state)
{
    (void)state;
    const eye_case e = {161.2, 150.7, 200.0, 0.9, 64.0};
    sw_eyesim_params sp;
    eye_params(&sp, 320, 320, 1, &e, 0);
    sw_eyesim_truth truth;
    sw_image img = render(&sp, &truth);
    for (int k = 0; k < 200; k++) {
        const sw_rng4 d = sw_rng_draw(3, SW_RNG_STREAM_TEST, (uint64_t)k);
        float *row = sw_image_row(&img, (int32_t)(d.v[0] % 320));
        row[d.v[1] % 320] = k % 3 == 0 ? INFINITY : (k % 3 == 1 ? -INFINITY : NAN);
    }
    sw_pupil_result r = track(&img, 1, -1);
    check_errors("NaN pixels", compare("NaN pixels", &r.pupil[0], &truth.eye[0]), 0.5, 0.01, 3.0);
    fill(&img, NAN);
    r = track(&img, 1, -1);
    assert_not_found(&r.pupil[0], SW_PUPIL_EMPTY_FRAME);
    sw_eyesim_truth_free(&truth);
    sw_image_free(&img);
}

/* ---------------------------------------------------------------- bad input */

static void expect_einval(const sw_pupil_params *p, const char *word)
{
    sw_pupil_plan *plan = (sw_pupil_plan *)&plan; /* not NULL: create must clear it */
    assert_int_equal(sw_pupil_create(cpu, p, &plan), SW_EINVAL);
    assert_null(plan);
    const char *msg = sw_context_error(cpu);
    if (!strstr(msg, word))
        fail_msg("the message \"%s\" does not mention \"%s\"", msg, word);
}

static void test_bad_params(void **state)
{
    (void)state;
    sw_pupil_params p, d;
    sw_pupil_params_default(&d, 64, 48, SW_PIX_U16);
    /* the defaults are valid: pupil.h's values, the smallest semi-axis a tenth of the smaller
     * side */
    sw_pupil_plan *plan = make_plan(&d);
    sw_pupil_destroy(plan);
    assert_true(d.min_radius_px == 4.8 && d.otsu_classes == 3 &&
                d.edge_level == SW_PUPIL_EDGE_AUTO && d.max_near_ratio == 0.75 &&
                d.min_coverage == 0.25);
    sw_pupil_destroy(NULL);

    p = d;
    p.width = p.height = 8;
    expect_einval(&p, "size");
    p = d;
    p.width = SW_PUPIL_MIN_SIZE - 1;
    expect_einval(&p, "size");
    p = d;
    p.height = SW_IMAGE_MAX_DIM + 1;
    expect_einval(&p, "size");
    p = d;
    p.width = p.height = 60000; /* 3.6e9 pixels */
    expect_einval(&p, "pixels");
    p = d;
    p.type = (sw_pixel_type)9;
    expect_einval(&p, "type");
    p = d;
    p.n_pupils = 3;
    expect_einval(&p, "n_pupils");
    p = d;
    p.n_pupils = 0;
    expect_einval(&p, "n_pupils");
    p = d;
    p.n_pupils = 2;
    p.split_x = 64;
    expect_einval(&p, "split_x");
    p.split_x = 0;
    expect_einval(&p, "split_x");
    p = d;
    p.input_scale = -1.0;
    expect_einval(&p, "input_scale");
    p.input_scale = NAN;
    expect_einval(&p, "input_scale");
    p = d;
    p.gauss_radius = SW_PUPIL_MAX_RADIUS + 1;
    expect_einval(&p, "gauss_radius");
    p.gauss_radius = -1;
    expect_einval(&p, "gauss_radius");
    p = d;
    p.gauss_sigma = 0.0;
    expect_einval(&p, "gauss_sigma");
    p.gauss_sigma = INFINITY;
    expect_einval(&p, "gauss_sigma");
    p.gauss_sigma = 1e-170; /* 2 sigma^2 would underflow to 0 in the weights */
    expect_einval(&p, "gauss_sigma");
    p = d;
    p.close_radius = SW_PUPIL_MAX_RADIUS + 1;
    expect_einval(&p, "close_radius");
    p.close_radius = -2;
    expect_einval(&p, "close_radius");
    p = d;
    p.candidates = 1000;
    expect_einval(&p, "candidates");
    p.candidates = 0;
    expect_einval(&p, "candidates");
    p.candidates = SW_PUPIL_MAX_CANDIDATES + 32;
    expect_einval(&p, "candidates");
    p = d;
    p.inlier_px = 0.0;
    expect_einval(&p, "inlier_px");
    p.inlier_px = NAN;
    expect_einval(&p, "inlier_px");
    p = d;
    p.refine_iterations = 21;
    expect_einval(&p, "refine_iterations");
    p.refine_iterations = -1;
    expect_einval(&p, "refine_iterations");
    p = d;
    p.min_radius_px = -1.0;
    expect_einval(&p, "min_radius_px");
    p = d;
    p.max_radius_px = NAN;
    expect_einval(&p, "max_radius_px");
    p = d;
    p.min_radius_px = 30.0;
    p.max_radius_px = 20.0;
    expect_einval(&p, "max_radius_px");
    p = d;
    p.min_radius_px = 65.0; /* above the default maximum, the frame's larger side */
    expect_einval(&p, "max_radius_px");
    p = d;
    p.min_coverage = 1.5;
    expect_einval(&p, "min_coverage");
    p.min_coverage = NAN;
    expect_einval(&p, "min_coverage");
    p = d;
    p.otsu_classes = 4;
    expect_einval(&p, "otsu_classes");
    p.otsu_classes = 1;
    expect_einval(&p, "otsu_classes");
    p = d;
    p.edge_level = 1.0;
    expect_einval(&p, "edge_level");
    p.edge_level = -INFINITY; /* negative is automatic, but finite */
    expect_einval(&p, "edge_level");
    p.edge_level = NAN;
    expect_einval(&p, "edge_level");
    p = d;
    p.max_near_ratio = -0.5;
    expect_einval(&p, "max_near_ratio");
    p.max_near_ratio = NAN;
    expect_einval(&p, "max_near_ratio");
    p = d; /* the ends of the ranges are valid: two classes, Otsu's split, no near-band test */
    p.otsu_classes = 2;
    p.edge_level = 0.0;
    p.max_near_ratio = INFINITY;
    plan = make_plan(&p);
    sw_pupil_destroy(plan);
    p.edge_level = -0.1; /* any negative value: automatic (pupil.h step 3d) */
    plan = make_plan(&p);
    sw_pupil_destroy(plan);
    p = d;
    p.lenslet_rule = (sw_pupil_lenslet_rule)5;
    expect_einval(&p, "lenslet_rule");
    /* a geometry that does not fit the frame */
    sw_sh_geometry g;
    sw_sh_geometry_default(&g); /* 10 x 10 lenslets of 16 px: 160 px, more than 64 x 48 */
    p = d;
    p.geometry = &g;
    assert_int_equal(sw_pupil_create(cpu, &p, &plan), SW_EINVAL);
    assert_null(plan);
    g.pitch_px = -1.0;
    assert_int_equal(sw_pupil_create(cpu, &p, &plan), SW_EINVAL);
    /* NULL arguments */
    assert_int_equal(sw_pupil_create(cpu, &d, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_create(cpu, NULL, &plan), SW_EINVAL);
    assert_int_equal(sw_pupil_create(NULL, &d, &plan), SW_EINVAL);
}

static void test_bad_frames(void **state)
{
    (void)state;
    sw_pupil_params p;
    sw_pupil_params_default(&p, 64, 48, SW_PIX_U16);
    sw_pupil_plan *plan = make_plan(&p);
    sw_pupil_result r;
    memset(&r, 0x5a, sizeof r);
    const sw_pupil_result before = r;
    sw_image ok = alloc_img(64, 48, SW_PIX_U16);
    sw_image wrong_size = alloc_img(48, 64, SW_PIX_U16);
    sw_image wrong_type = alloc_img(64, 48, SW_PIX_F32);
    assert_int_equal(sw_pupil_run(plan, &wrong_size, &r, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(cpu), "48 x 64"));
    assert_int_equal(sw_pupil_run(plan, &wrong_type, &r, NULL), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(cpu), "f32"));
    assert_int_equal(sw_pupil_run(plan, NULL, &r, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_run(plan, &ok, NULL, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_run(NULL, &ok, &r, NULL), SW_EINVAL);
    /* a lenslet mask without a geometry */
    uint8_t mask[4];
    assert_int_equal(sw_pupil_run(plan, &ok, &r, mask), SW_EINVAL);
    /* a device frame on a CPU plan */
    sw_image dev = ok;
    dev.memory = SW_MEM_DEVICE;
    dev.owned = 0;
    assert_int_equal(sw_pupil_run(plan, &dev, &r, NULL), SW_EINVAL);
    /* a broken descriptor */
    sw_image bad = ok;
    bad.owned = 0;
    bad.stride = 3;
    assert_int_equal(sw_pupil_run(plan, &bad, &r, NULL), SW_EINVAL);
    /* the result is untouched by every refusal */
    assert_memory_equal(&r, &before, sizeof r);
    /* the inspection calls before the first frame */
    sw_image im = alloc_img(64, 48, SW_PIX_U8);
    int64_t count = 0;
    assert_int_equal(sw_pupil_last_images(plan, &im, NULL, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_last_border(plan, 0, NULL, 0, &count), SW_EINVAL);
    /* and after one, with bad arguments */
    assert_int_equal(sw_pupil_run(plan, &ok, &r, NULL), SW_OK);
    assert_int_equal(sw_pupil_last_images(plan, &im, &im, &im), SW_OK);
    sw_image im16 = alloc_img(64, 48, SW_PIX_U16), im_small = alloc_img(32, 48, SW_PIX_U8);
    assert_int_equal(sw_pupil_last_images(plan, &im16, NULL, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_last_images(plan, NULL, &im_small, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_last_border(plan, 1, NULL, 0, &count), SW_EINVAL);
    assert_int_equal(sw_pupil_last_border(plan, -1, NULL, 0, &count), SW_EINVAL);
    assert_int_equal(sw_pupil_last_border(plan, 0, NULL, 4, &count), SW_EINVAL);
    assert_int_equal(sw_pupil_last_border(plan, 0, NULL, 0, NULL), SW_EINVAL);
    assert_int_equal(sw_pupil_last_border(plan, 0, NULL, 0, &count), SW_OK);
    assert_null(sw_pupil_lenslet_mask_device(plan));
    sw_image_free(&im16);
    sw_image_free(&im_small);
    sw_image_free(&im);
    sw_image_free(&ok);
    sw_image_free(&wrong_size);
    sw_image_free(&wrong_type);
    sw_pupil_destroy(plan);
}

/* ---------------------------------------------------------------- the lenslet mask */

/* (x, y) inside the ellipse of an eye's truth with semi-axes grown by g pixels (g < 0: shrunk). */
static int in_truth(const sw_eye_truth *t, double x, double y, double g)
{
    const double th = t->angle_deg * PI / 180.0, c = cos(th), s = sin(th);
    const double dx = x - t->cx_px, dy = y - t->cy_px;
    const double u = (dx * c + dy * s) / (t->a_px + g), v = (-dx * s + dy * c) / (t->b_px + g);
    return u * u + v * v <= 1.0;
}

/* Corners (or centre) of lenslet (ix, iy) inside a truth ellipse grown by g: 4 (all), else the
 * number inside. */
static int corners_in(const sw_sh_geometry *geo, int32_t ix, int32_t iy, const sw_eye_truth *t,
                      double g)
{
    const double xl = geo->x0 - 0.5 + geo->pitch_px * ix, yl = geo->y0 - 0.5 + geo->pitch_px * iy;
    const double d = geo->pitch_px;
    return in_truth(t, xl, yl, g) + in_truth(t, xl + d, yl, g) + in_truth(t, xl, yl + d, g) +
           in_truth(t, xl + d, yl + d, g);
}

static void test_lenslet_mask(void **state)
{
    (void)state;
    /* monocular, both rules */
    const eye_case e = {300.3, 341.8, 400.0, 0.8, 30.0};
    sw_eyesim_params sp;
    eye_params(&sp, 640, 640, 1, &e, 1);
    sw_eyesim_truth truth;
    sw_image img = render(&sp, &truth);
    const sw_sh_geometry *geo = &sp.sh.geom;
    const int32_t nl = geo->nx * geo->ny;
    uint8_t *mask = malloc((size_t)nl);
    assert_non_null(mask);
    for (int rule = 0; rule < 2; rule++) {
        sw_pupil_params p;
        sw_pupil_params_default(&p, 640, 640, SW_PIX_F32);
        p.geometry = geo;
        p.lenslet_rule = (sw_pupil_lenslet_rule)rule;
        sw_pupil_plan *plan = make_plan(&p);
        sw_pupil_result r;
        memset(mask, 0x77, (size_t)nl);
        assert_int_equal(sw_pupil_run(plan, &img, &r, mask), SW_OK);
        assert_true(r.pupil[0].valid);
        int ones = 0, zeros = 0;
        for (int32_t iy = 0; iy < geo->ny; iy++)
            for (int32_t ix = 0; ix < geo->nx; ix++) {
                const uint8_t m = mask[iy * geo->nx + ix];
                assert_true(m <= 1);
                int in_small, out_big;
                if (rule == SW_PUPIL_LENSLET_FULL) {
                    in_small = corners_in(geo, ix, iy, &truth.eye[0], -2.0) == 4;
                    out_big = corners_in(geo, ix, iy, &truth.eye[0], 2.0) < 4;
                } else {
                    double xr, yr;
                    sw_sh_reference(geo, ix, iy, &xr, &yr);
                    in_small = in_truth(&truth.eye[0], xr, yr, -2.0);
                    out_big = !in_truth(&truth.eye[0], xr, yr, 2.0);
                }
                if (in_small) {
                    assert_int_equal(m, 1);
                    ones++;
                }
                if (out_big) {
                    assert_int_equal(m, 0);
                    zeros++;
                }
            }
        printf("    lenslet mask (rule %d): %d lenslets surely in, %d surely out of %d\n", rule,
               ones, zeros, nl);
        assert_true(ones > 60 && zeros > 200);
        sw_pupil_destroy(plan);
    }
    sw_eyesim_truth_free(&truth);
    sw_image_free(&img);

    /* binocular: 1 for the left pupil, 2 for the right one, 0 where neither or both */
    const eye_case eyes[2] = {{175.0, 165.0, 300.0, 1.0, 0.0}, {450.0, 158.0, 290.0, 0.9, 80.0}};
    eye_params(&sp, 640, 320, 2, eyes, 0);
    img = render(&sp, &truth);
    sw_pupil_params p;
    sw_pupil_params_default(&p, 640, 320, SW_PIX_F32);
    p.n_pupils = 2;
    p.geometry = geo;
    sw_pupil_plan *plan = make_plan(&p);
    sw_pupil_result r;
    assert_int_equal(sw_pupil_run(plan, &img, &r, mask), SW_OK);
    int count[3] = {0, 0, 0};
    for (int32_t iy = 0; iy < geo->ny; iy++)
        for (int32_t ix = 0; ix < geo->nx; ix++) {
            const uint8_t m = mask[iy * geo->nx + ix];
            assert_true(m <= 2);
            const int in0 = corners_in(geo, ix, iy, &truth.eye[0], -2.0) == 4;
            const int in1 = corners_in(geo, ix, iy, &truth.eye[1], -2.0) == 4;
            const int out0 = corners_in(geo, ix, iy, &truth.eye[0], 2.0) < 4;
            const int out1 = corners_in(geo, ix, iy, &truth.eye[1], 2.0) < 4;
            if (in0 && out1) {
                assert_int_equal(m, 1);
                count[1]++;
            }
            if (in1 && out0) {
                assert_int_equal(m, 2);
                count[2]++;
            }
            if ((out0 && out1) || (in0 && in1)) {
                assert_int_equal(m, 0);
                count[0]++;
            }
        }
    printf("    binocular lenslet mask: %d / %d / %d lenslets surely 0 / 1 / 2\n", count[0],
           count[1], count[2]);
    assert_true(count[1] > 30 && count[2] > 30 && count[0] > 30);
    /* a pupil not found leaves no lenslet: a dark frame gives an all-zero mask */
    sw_image dark = alloc_img(640, 320, SW_PIX_F32);
    assert_int_equal(sw_pupil_run(plan, &dark, &r, mask), SW_OK);
    for (int32_t l = 0; l < geo->nx * geo->ny; l++)
        assert_int_equal(mask[l], 0);
    sw_pupil_destroy(plan);
    sw_image_free(&dark);
    sw_eyesim_truth_free(&truth);
    sw_image_free(&img);
    free(mask);
}

/* ---------------------------------------------------------------- inspection */

/* The images and border lists of the last frame against pupil.h's definitions: the 8-bit image
 * is clamp(rint(v scale)), the closed mask contains the thresholded pixels (a close only adds),
 * and the border list is, in raster order, exactly the inside pixels of the region with an
 * outside 8-neighbour in the region. */
static void test_inspection(void **state)
{
    (void)state;
    const eye_case eyes[2] = {{150.0, 160.0, 240.0, 0.9, 20.0}, {470.0, 150.0, 220.0, 1.0, 0.0}};
    sw_eyesim_params sp;
    eye_params(&sp, 640, 320, 2, eyes, 1);
    sw_eyesim_truth truth;
    sw_image img = render(&sp, &truth);
    sw_pupil_params p;
    sw_pupil_params_default(&p, 640, 320, SW_PIX_F32);
    p.n_pupils = 2;
    sw_pupil_plan *plan = make_plan(&p);
    sw_pupil_result r;
    assert_int_equal(sw_pupil_run(plan, &img, &r, NULL), SW_OK);
    sw_image in8 = alloc_img(640, 320, SW_PIX_U8), sm = alloc_img(640, 320, SW_PIX_U8),
             cl = alloc_img(640, 320, SW_PIX_U8);
    assert_int_equal(sw_pupil_last_images(plan, &in8, &sm, &cl), SW_OK);
    for (int32_t y = 0; y < 320; y++) {
        const float *v = sw_image_row(&img, y);
        const uint8_t *a = sw_image_row(&in8, y);
        for (int32_t x = 0; x < 640; x++) {
            double s = rint((double)v[x] * r.scale);
            s = s < 0.0 ? 0.0 : (s > 255.0 ? 255.0 : s);
            assert_int_equal(a[x], (int)s);
        }
    }
    int32_t *xy = malloc((size_t)640 * 320 * 2 * sizeof(int32_t));
    assert_non_null(xy);
    for (int i = 0; i < 2; i++) {
        const sw_pupil_ellipse *f = &r.pupil[i];
        assert_true(f->valid);
        const int32_t t = f->threshold;
        int64_t expected = 0;
        for (int32_t y = 0; y < 320; y++)
            for (int32_t x = f->x0; x < f->x1; x++) {
                const uint8_t c = ((const uint8_t *)sw_image_row(&cl, y))[x];
                assert_true(c <= 1);
                if (((const uint8_t *)sw_image_row(&sm, y))[x] > t)
                    assert_int_equal(c, 1);
                if (!c)
                    continue;
                int outside = 0;
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++) {
                        const int32_t xx = x + dx, yy = y + dy;
                        if (xx >= f->x0 && xx < f->x1 && yy >= 0 && yy < 320 &&
                            !((const uint8_t *)sw_image_row(&cl, yy))[xx])
                            outside = 1;
                    }
                expected += outside;
            }
        int64_t n = -1;
        assert_int_equal(sw_pupil_last_border(plan, i, xy, 640 * 320, &n), SW_OK);
        assert_int_equal(n, expected);
        assert_int_equal(n, f->border);
        assert_true(f->inliers <= f->border && f->votes <= f->border);
        assert_true(f->near >= 0 && f->inliers + f->near <= f->border);
        assert_true(f->near <= 0.75 * f->inliers); /* valid: within max_near_ratio */
        for (int64_t k = 0; k < n; k++) {
            const int32_t x = xy[2 * k], y = xy[2 * k + 1];
            assert_true(x >= f->x0 && x < f->x1 && y >= 0 && y < 320);
            assert_int_equal(((const uint8_t *)sw_image_row(&cl, y))[x], 1);
            if (k > 0) /* raster order */
                assert_true(y > xy[2 * k - 1] || (y == xy[2 * k - 1] && x > xy[2 * k - 2]));
        }
        /* a short buffer gets the first pairs and the full count */
        int32_t head[6] = {-1, -1, -1, -1, -1, -1};
        int64_t m = 0;
        assert_int_equal(sw_pupil_last_border(plan, i, head, 2, &m), SW_OK);
        assert_int_equal(m, n);
        assert_memory_equal(head, xy, 4 * sizeof(int32_t));
        assert_int_equal(head[4], -1);
    }
    free(xy);
    sw_image_free(&in8);
    sw_image_free(&sm);
    sw_image_free(&cl);
    sw_pupil_destroy(plan);
    sw_eyesim_truth_free(&truth);
    sw_image_free(&img);
}

/* The random numbers: candidates x 5 in [0, 1), a function of the seed only. */
static void test_randoms(void **state)
{
    (void)state;
    sw_pupil_params p;
    sw_pupil_params_default(&p, 32, 32, SW_PIX_U8);
    p.candidates = 96;
    sw_pupil_plan *a = make_plan(&p), *b = make_plan(&p);
    p.seed = 2;
    sw_pupil_plan *c = make_plan(&p);
    const float *ra = sw_pupil_randoms(a), *rb = sw_pupil_randoms(b), *rc = sw_pupil_randoms(c);
    assert_non_null(ra);
    double mean = 0.0;
    int same = 0;
    for (int i = 0; i < 96 * 5; i++) {
        assert_true(ra[i] >= 0.0f && ra[i] < 1.0f);
        assert_true(ra[i] == rb[i]);
        same += ra[i] == rc[i];
        mean += ra[i];
    }
    mean /= 96 * 5;
    assert_true(same < 3);
    assert_near(mean, 0.5, 0.05); /* sd of the mean 0.013 */
    assert_null(sw_pupil_randoms(NULL));
    sw_pupil_destroy(a);
    sw_pupil_destroy(b);
    sw_pupil_destroy(c);
}

/* The same frame on 1 and on 4 threads: the same result, bit for bit (integer sums, and a
 * RANSAC winner that does not depend on the order). */
static void test_threads(void **state)
{
    (void)state;
    const eye_case eyes[2] = {{175.0, 165.0, 300.0, 1.0, 0.0}, {450.0, 158.0, 290.0, 0.9, 80.0}};
    sw_eyesim_params sp;
    eye_params(&sp, 640, 320, 2, eyes, 1);
    sw_image img = render(&sp, NULL);
    sw_context *one = sw_test_cpu_context(1);
    sw_pupil_params p;
    sw_pupil_params_default(&p, 640, 320, SW_PIX_F32);
    p.n_pupils = 2;
    sw_pupil_result r[2];
    for (int k = 0; k < 2; k++) {
        sw_pupil_plan *plan = NULL;
        assert_int_equal(sw_pupil_create(k == 0 ? one : cpu, &p, &plan), SW_OK);
        memset(&r[k], 0, sizeof r[k]);
        assert_int_equal(sw_pupil_run(plan, &img, &r[k], NULL), SW_OK);
        sw_pupil_destroy(plan);
    }
    assert_true(r[0].pupil[0].valid && r[0].pupil[1].valid);
    assert_memory_equal(&r[0], &r[1], sizeof r[0]);
    sw_context_destroy(one);
    sw_image_free(&img);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clean_monocular),
        cmocka_unit_test(test_artefacts_monocular),
        cmocka_unit_test(test_cut_by_edge),
        cmocka_unit_test(test_binocular_overlap),
        cmocka_unit_test(test_binocular_brightness),
        cmocka_unit_test(test_no_pupil),
        cmocka_unit_test(test_nan_pixels),
        cmocka_unit_test(test_bad_params),
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_lenslet_mask),
        cmocka_unit_test(test_inspection),
        cmocka_unit_test(test_randoms),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
