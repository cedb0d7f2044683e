/*
 * The aberrometry pipeline on the CPU (aberrometry.h; seed 001 Sec. 3.2.1, 3.3, 4.1, 4.3), end to
 * end against synthetic eyes (sim_eye.h, seed 001's 640 x 640 / 250-spot case): the reference
 * centroids of a flat wavefront against the simulator's truth; a clean eye of population
 * aberrations measured to a small RMS error; a strong defocus whose edge spots leave their cells,
 * measured with the dynamic mesh and not without it; the spots converging at the pupil's edge of
 * a 6 um eye of the accuracy protocol, measured with the neighbour window and not without it; a
 * binocular frame (u8) with two different eyes; frames without a pupil or without spots; bad
 * parameters and frames. And the model arithmetic (ab_model.h): the Zernike terms against zernike.h
 * and the exact lenslet means against zernike_fit.h's derivative matrix.
 */
#include "testutil.h"

#include "aberrometry/ab_model.h"
#include "spotwave/aberrometry.h"
#include "spotwave/rng.h"
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

/* Seed 001's 640 x 640 case (sw_eyesim_params_default) without artefacts but the retinal glow
 * that back-lights the pupil (the tracker needs it); coef: count terms over 5.12 mm. */
static void eye_params(sw_eyesim_params *p, const double *coef, int32_t count)
{
    sw_eyesim_params_default(p);
    sw_eye_artefacts_none(&p->art);
    p->art.glow_e = 20.0;
    p->eyes[0].coef_um = coef;
    p->eyes[0].count = count;
}

/* The electrons of the eyes as an f32 frame. */
static sw_image render_eyes(const sw_eyesim_params *p, sw_eyesim_truth *truth)
{
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, p->sh.width, p->sh.height, SW_PIX_F32, &img), SW_OK);
    if (sw_eyesim_render(cpu, p, &img, truth) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    return img;
}

/* A reference frame: no eye, a flat wavefront over the whole lenslet array (the SH simulator
 * with the eye frames' sh parameters and no pupil), f32; the truth when asked for. */
static sw_image render_reference(const sw_shsim_params *sh, sw_sh_truth *truth)
{
    sw_shsim_params rp = *sh;
    memset(&rp.pupil, 0, sizeof rp.pupil); /* a_um = 0: every lenslet lit */
    rp.min_illum = 0.0;
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, &rp, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    sw_image img;
    assert_int_equal(sw_image_alloc(cpu, rp.width, rp.height, SW_PIX_F32, &img), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &img, 0), SW_OK);
    if (truth)
        assert_int_equal(sw_shsim_truth(sim, truth), SW_OK);
    sw_shsim_destroy(sim);
    return img;
}

/* The f32 frame rounded to u8 (the spots' peaks are ~230 e-, below 255). */
static sw_image to_u8(const sw_image *f)
{
    sw_image u;
    assert_int_equal(sw_image_alloc(cpu, f->width, f->height, SW_PIX_U8, &u), SW_OK);
    assert_int_equal(sw_image_convert(cpu, f, &u, 1.0, 0.0, NULL), SW_OK);
    return u;
}

/* Reference centroids of a reference frame (asserts on failure). */
static void reference_centroids(const sw_sh_geometry *g, const sw_image *ref, double *rx,
                                double *ry, int32_t *found)
{
    if (sw_aberrometry_reference(cpu, g, ref, rx, ry, found) != SW_OK)
        fail_msg("sw_aberrometry_reference: %s", sw_context_error(cpu));
}

/* A population eye of order <= 6 over 5.12 mm with total_rms_um of aberration (j >= 3), draw
 * `index` of the stream `seed`. */
static void population_eye_seeded(uint64_t seed, uint64_t index, double total_rms_um, double *coef)
{
    sw_ocular_population pop;
    if (sw_ocular_population_load(cpu, NULL, 6.0, &pop) != SW_OK)
        fail_msg("population: %s", sw_context_error(cpu));
    sw_ocular_options o;
    sw_ocular_options_default(&o);
    o.pupil_mm = 5.12;
    o.max_order = 6;
    o.total_rms_um = total_rms_um;
    if (sw_ocular_draw(cpu, &pop, seed, index, &o, coef, 28) != SW_OK)
        fail_msg("sw_ocular_draw: %s", sw_context_error(cpu));
    sw_ocular_population_free(&pop);
}

static void population_eye(uint64_t index, double total_rms_um, double *coef)
{
    population_eye_seeded(7, index, total_rms_um, coef);
}

/* sqrt(sum over j = 3 .. 27 (orders 2 .. 6) of (measured - truth)^2), micrometres. */
static double rmse_2_6(const double *meas, const double *truth)
{
    double s = 0.0;
    for (int j = 3; j < 28; j++)
        s += (meas[j] - truth[j]) * (meas[j] - truth[j]);
    return sqrt(s);
}

/* Parameters for the eye frames: the analysis circle of the simulated pupil (radius
 * diameter_px / 2, so that the circles of the truth and the measurement agree) and the
 * magnification that makes it pupil_mm at the eye. */
static void ab_params(sw_aberrometry_params *ap, const sw_eyesim_params *ep, sw_pixel_type t,
                      const double *rx, const double *ry)
{
    sw_aberrometry_params_default(ap, ep->sh.width, ep->sh.height, t, &ep->sh.geom);
    ap->ref_x = rx;
    ap->ref_y = ry;
    ap->n_eyes = ep->n_eyes;
    ap->fit_radius_px = ep->eyes[0].diameter_px / 2.0;
    ap->magnification =
        ep->eyes[0].diameter_px * ep->sh.geom.pixel_um / (1000.0 * ep->eyes[0].pupil_mm);
}

static sw_aberrometry_plan *make_plan(const sw_aberrometry_params *ap)
{
    sw_aberrometry_plan *plan = NULL;
    if (sw_aberrometry_create(cpu, ap, &plan) != SW_OK)
        fail_msg("sw_aberrometry_create: %s", sw_context_error(cpu));
    return plan;
}

static void run(sw_aberrometry_plan *plan, const sw_image *frame, sw_aberrometry_result *res)
{
    if (sw_aberrometry_run(plan, frame, res) != SW_OK)
        fail_msg("sw_aberrometry_run: %s", sw_context_error(cpu));
}

/* ---------------------------------------------------------------- model arithmetic */

static void test_zernike_all_matches_zernike_h(void **state)
{
    (void)state;
    double z[SW_AB_MAX_TERMS];
    for (int k = 0; k < 200; k++) {
        sw_rng4 d = sw_rng_draw(11, 0, (uint64_t)k);
        double X = 2.4 * sw_rng_u01(d.v[0], d.v[1]) - 1.2,
               Y = 2.4 * sw_rng_u01(d.v[2], d.v[3]) - 1.2;
        if (k == 0)
            X = Y = 0.0; /* the origin */
        sw_ab_zernike_all(SW_AB_MAX_TERMS, X, Y, z);
        for (int j = 0; j < SW_AB_MAX_TERMS; j++) {
            int n, m;
            assert_int_equal(sw_zernike_osa_nm(j, &n, &m), SW_OK);
            double ref = sw_zernike_eval(n, m, X, Y);
            assert_near(z[j], ref, 1e-12 * (1.0 + fabs(ref)));
        }
    }
    /* J < 66 fills exactly the first J terms */
    for (int j = 0; j < SW_AB_MAX_TERMS; j++)
        z[j] = -7.0;
    sw_ab_zernike_all(10, 0.3, -0.2, z);
    assert_true(z[9] != -7.0);
    assert_true(z[10] == -7.0);
}

/* sw_ab_design_rows against sw_zfit_matrix for the lenslets wholly inside the pupil: both are
 * exact means of the gradients (Gauss-Legendre here, Green's theorem there) with the same
 * -F / R_um. */
static void test_mean_grad_matches_zfit(void **state)
{
    (void)state;
    for (int c = 0; c < 2; c++) {
        sw_zfit_params zp;
        sw_zfit_params_default(&zp);
        zp.geometry.nx = zp.geometry.ny = 12;
        zp.geometry.pitch_px = c == 0 ? 16.0 : 23.7;
        zp.geometry.x0 = 3.0;
        zp.geometry.y0 = 5.25;
        zp.pupil_cx_px = 3.0 + 6.0 * zp.geometry.pitch_px + 1.3;
        zp.pupil_cy_px = 5.25 + 6.0 * zp.geometry.pitch_px - 2.1;
        zp.pupil_radius_px = 5.3 * zp.geometry.pitch_px;
        zp.max_order = SW_AB_MAX_ORDER;
        sw_zfit_plan *zf = NULL;
        if (sw_zfit_create(cpu, &zp, &zf) != SW_OK)
            fail_msg("sw_zfit_create: %s", sw_context_error(cpu));
        const int32_t J = sw_zfit_terms(zf), m = J - 1, n = sw_zfit_slopes(zf);
        assert_int_equal(J, SW_AB_MAX_TERMS);
        const double *D = sw_zfit_matrix(zf);
        double dx[SW_AB_MAX_TERMS], dy[SW_AB_MAX_TERMS];
        int full = 0;
        for (int32_t k = 0; k < n; k++) {
            if (sw_zfit_illum(zf, k) < 1.0 - 1e-9)
                continue;
            full++;
            sw_ab_design_rows(J, &zp.geometry, k % 12, k / 12, zp.pupil_cx_px, zp.pupil_cy_px,
                              zp.pupil_radius_px, dx, dy);
            for (int32_t j = 0; j < m; j++) {
                double ex = D[(size_t)k * m + j], ey = D[(size_t)(n + k) * m + j];
                double scale = fabs(sw_ab_row_scale(&zp.geometry, zp.pupil_radius_px)) * 100.0;
                assert_near(dx[j], ex, 1e-10 * scale);
                assert_near(dy[j], ey, 1e-10 * scale);
            }
        }
        assert_true(full > 40);
        sw_zfit_destroy(zf);
    }
}

/* ---------------------------------------------------------------- reference */

static void test_reference_centroids(void **state)
{
    (void)state;
    sw_eyesim_params ep;
    eye_params(&ep, NULL, 0);
    sw_sh_truth t;
    sw_image ref = render_reference(&ep.sh, &t);
    const int32_t nl = ep.sh.geom.nx * ep.sh.geom.ny;
    double *rx = malloc((size_t)nl * sizeof(double)), *ry = malloc((size_t)nl * sizeof(double));
    int32_t found = -1;
    reference_centroids(&ep.sh.geom, &ref, rx, ry, &found);
    assert_int_equal(found, nl);
    double worst = 0.0;
    for (int32_t l = 0; l < nl; l++) {
        assert_true(isfinite(rx[l]) && isfinite(ry[l]));
        worst = fmax(worst, fmax(fabs(rx[l] - t.x_px[l]), fabs(ry[l] - t.y_px[l])));
    }
    assert_true(worst < 0.02);

    /* a dark frame has no spots: every entry NaN, and a plan refuses such a reference */
    sw_image dark;
    assert_int_equal(sw_image_alloc(cpu, ref.width, ref.height, SW_PIX_F32, &dark), SW_OK);
    reference_centroids(&ep.sh.geom, &dark, rx, ry, &found);
    assert_int_equal(found, 0);
    for (int32_t l = 0; l < nl; l++)
        assert_true(isnan(rx[l]) && isnan(ry[l]));
    sw_aberrometry_params ap;
    ab_params(&ap, &ep, SW_PIX_F32, rx, ry);
    sw_aberrometry_plan *plan = (sw_aberrometry_plan *)&ap; /* must be overwritten with NULL */
    assert_int_equal(sw_aberrometry_create(cpu, &ap, &plan), SW_EINVAL);
    assert_null(plan);
    assert_non_null(strstr(sw_context_error(cpu), "ref"));

    /* a geometry that does not fit the reference image, and a u32 image */
    sw_sh_geometry big = ep.sh.geom;
    big.nx = 21;
    assert_int_equal(sw_aberrometry_reference(cpu, &big, &ref, rx, ry, &found), SW_EINVAL);
    sw_image u32;
    assert_int_equal(sw_image_alloc(cpu, ref.width, ref.height, SW_PIX_U32, &u32), SW_OK);
    assert_int_equal(sw_aberrometry_reference(cpu, &ep.sh.geom, &u32, rx, ry, &found), SW_EINVAL);

    sw_image_free(&u32);
    sw_image_free(&dark);
    sw_image_free(&ref);
    sw_sh_truth_free(&t);
    free(rx);
    free(ry);
}

/* ---------------------------------------------------------------- measurements */

typedef struct mono_fixture {
    sw_eyesim_params ep;
    double *rx, *ry;
} mono_fixture;

static void mono_setup(mono_fixture *f)
{
    eye_params(&f->ep, NULL, 0);
    const int32_t nl = f->ep.sh.geom.nx * f->ep.sh.geom.ny;
    f->rx = malloc((size_t)nl * sizeof(double));
    f->ry = malloc((size_t)nl * sizeof(double));
    sw_image ref = render_reference(&f->ep.sh, NULL);
    reference_centroids(&f->ep.sh.geom, &ref, f->rx, f->ry, NULL);
    sw_image_free(&ref);
}

static void mono_free(mono_fixture *f)
{
    free(f->rx);
    free(f->ry);
}

static void test_clean_population_eye(void **state)
{
    (void)state;
    mono_fixture f;
    mono_setup(&f);
    double coef[28];
    population_eye(3, 1.0, coef);
    f.ep.eyes[0].coef_um = coef;
    f.ep.eyes[0].count = 28;
    sw_eyesim_truth truth;
    sw_image frame = render_eyes(&f.ep, &truth);

    sw_aberrometry_params ap;
    ab_params(&ap, &f.ep, SW_PIX_F32, f.rx, f.ry);
    sw_aberrometry_plan *plan = make_plan(&ap);
    sw_aberrometry_result res;
    run(plan, &frame, &res);
    const sw_aberrometry_eye *e = &res.eye[0];
    assert_int_equal(res.n_eyes, 1);
    if (!e->valid)
        fail_msg("eye invalid: %s", sw_ab_failure_string(e->failure));
    assert_int_equal(e->terms, 28);
    assert_near(e->pupil_mm, 5.12, 1e-9);
    assert_near(e->radius_px, 288.0, 0);
    assert_near(e->cx_px, 319.5, 0.5);
    assert_near(e->cy_px, 319.5, 0.5);
    /* ~200 lenslets wholly inside the pupil, a quarter of them central, all kept */
    assert_true(e->lenslets > 180 && e->lenslets < 260);
    assert_true(e->central > 30 && e->central < e->lenslets / 2);
    assert_int_equal(e->found, e->lenslets);
    assert_int_equal(e->kept, e->lenslets);
    assert_true(e->coef_um[0] == 0.0);
    double err = rmse_2_6(e->coef_um, truth.eye[0].coef_um);
    print_message("clean eye (1 um RMS): RMSE %.4f um over orders 2-6, residual %.4f px\n", err,
                  e->residual_px);
    assert_true(err < 0.05);
    assert_true(e->residual_px < 0.1);
    /* the preliminary fit (stage 0): orders 1 .. prelim_order (3) only */
    assert_int_equal(ap.prelim_order, 3);
    assert_true(e->prelim_um[0] == 0.0);
    for (int j = 1; j < 10; j++)
        assert_true(isfinite(e->prelim_um[j]));
    for (int j = 10; j < SW_AB_MAX_TERMS; j++)
        assert_true(e->prelim_um[j] == 0.0);
    /* the refraction is that of the coefficients: the second order by default (issue 22) */
    assert_int_equal(ap.higher_order_rx, 0);
    sw_refraction rx, rxh;
    assert_int_equal(sw_zernike_refraction(cpu, e->coef_um, 28, e->pupil_mm, 0, 0.0, &rx), SW_OK);
    assert_int_equal(sw_zernike_refraction(cpu, e->coef_um, 28, e->pupil_mm, 1, 0.0, &rxh), SW_OK);
    assert_near(e->rx.M, rx.M, 1e-12);
    assert_near(e->rx.sphere_d, rx.sphere_d, 1e-12);
    assert_true(fabs(rxh.M - rx.M) > 1e-6); /* the 4th and 6th orders are not in it */

    /* the spots: the used lenslets of eye 1 measured where the truth puts them */
    const int32_t nl = 400;
    double *x = malloc(nl * sizeof(double)), *y = malloc(nl * sizeof(double));
    double *x0 = malloc(nl * sizeof(double)), *y0 = malloc(nl * sizeof(double));
    uint8_t st[400], eye[400];
    assert_int_equal(sw_aberrometry_spots(plan, x, y, st, eye, x0, y0), SW_OK);
    int used = 0;
    for (int32_t l = 0; l < nl; l++) {
        if (eye[l] == 0) {
            assert_int_equal(st[l], SW_SPOT_INACTIVE);
            assert_true(isnan(x[l]));
            continue;
        }
        used++;
        assert_int_equal(eye[l], 1);
        assert_int_equal(st[l], SW_SPOT_OK);
        assert_true(isfinite(x0[l]) && isfinite(y0[l]));
        assert_near(x[l], truth.eye[0].sh.x_px[l], 0.1);
        assert_near(y[l], truth.eye[0].sh.y_px[l], 0.1);
    }
    assert_int_equal(used, e->lenslets);

    /* a second run of the same frame gives the same result */
    sw_aberrometry_result again;
    run(plan, &frame, &again);
    for (int j = 0; j < 28; j++)
        assert_true(again.eye[0].coef_um[j] == e->coef_um[j]);

    free(x);
    free(y);
    free(x0);
    free(y0);
    sw_aberrometry_destroy(plan);

    /* a central mesh too small for the preliminary fit: FEW_CENTRAL, still SW_OK */
    sw_aberrometry_params small = ap;
    small.central_fraction = 0.05;
    plan = make_plan(&small);
    run(plan, &frame, &again);
    assert_true(again.eye[0].pupil.valid);
    assert_int_equal(again.eye[0].failure, SW_AB_FEW_CENTRAL);
    assert_true(again.eye[0].central * 2 < 5);
    assert_true(isnan(again.eye[0].coef_um[4]) && isnan(again.eye[0].prelim_um[4]));
    sw_aberrometry_destroy(plan);

    /* CoM and Reichenbach work from the static mesh: no central stage, no preliminary fit */
    const sw_search_algorithm algs[2] = {SW_SEARCH_COM, SW_SEARCH_REICHENBACH};
    for (int k = 0; k < 2; k++) {
        sw_aberrometry_params bp = ap;
        bp.algorithm = algs[k];
        plan = make_plan(&bp);
        run(plan, &frame, &again);
        const sw_aberrometry_eye *b = &again.eye[0];
        if (!b->valid)
            fail_msg("%s: eye invalid: %s", sw_search_algorithm_string(algs[k]),
                     sw_ab_failure_string(b->failure));
        /* (CoM's one big window takes in the glow around the spot: biased, as the seed says) */
        double eb = rmse_2_6(b->coef_um, truth.eye[0].coef_um);
        print_message("clean eye, %s: RMSE %.4f um, %d of %d kept\n",
                      sw_search_algorithm_string(algs[k]), eb, b->kept, b->lenslets);
        assert_int_equal(b->central, 0);
        assert_int_equal(b->lenslets, e->lenslets);
        for (int j = 0; j < SW_AB_MAX_TERMS; j++)
            assert_true(b->prelim_um[j] == 0.0);
        if (algs[k] == SW_SEARCH_REICHENBACH)
            assert_true(eb < 0.3);
        sw_aberrometry_destroy(plan);
    }

    sw_image_free(&frame);
    sw_eyesim_truth_free(&truth);
    mono_free(&f);
}

/* A defocus of 8 um over 5.12 mm moves the edge spots by ~22 px (2.78 px per um at the edge),
 * beyond the 16 px half cell: the static mesh loses them, the dynamic one follows them. */
static void test_strong_defocus_dynamic_mesh(void **state)
{
    (void)state;
    mono_fixture f;
    mono_setup(&f);
    double coef[28] = {0};
    coef[4] = 8.0;
    coef[7] = 0.2; /* a little coma and spherical aberration too */
    coef[12] = 0.15;
    f.ep.eyes[0].coef_um = coef;
    f.ep.eyes[0].count = 28;
    sw_eyesim_truth truth;
    sw_image frame = render_eyes(&f.ep, &truth);

    /* the truth: some used edge spots left their cells */
    int left = 0;
    for (int32_t l = 0; l < 400; l++) {
        const double *tx = truth.eye[0].sh.x_px, *ty = truth.eye[0].sh.y_px;
        if (isfinite(tx[l]) && fmax(fabs(tx[l] - f.rx[l]), fabs(ty[l] - f.ry[l])) > 16.0)
            left++;
    }
    assert_true(left > 20);

    sw_aberrometry_params ap;
    ab_params(&ap, &f.ep, SW_PIX_F32, f.rx, f.ry);
    sw_aberrometry_result dyn, stat;
    sw_aberrometry_plan *plan = make_plan(&ap);
    run(plan, &frame, &dyn);
    /* the distorted mesh: every used lenslet's start predicted within a few pixels of its spot,
     * though some spots lie beyond their cells */
    double x0[400], y0[400];
    uint8_t eye[400];
    assert_int_equal(sw_aberrometry_spots(plan, NULL, NULL, NULL, eye, x0, y0), SW_OK);
    double worst = 0.0, moved = 0.0;
    for (int32_t l = 0; l < 400; l++) {
        if (!eye[l])
            continue;
        worst =
            fmax(worst, hypot(x0[l] - truth.eye[0].sh.x_px[l], y0[l] - truth.eye[0].sh.y_px[l]));
        moved = fmax(moved, hypot(x0[l] - f.rx[l], y0[l] - f.ry[l]));
    }
    print_message("dynamic mesh: starts within %.2f px of the spots, moved up to %.1f px\n", worst,
                  moved);
    assert_true(worst < 5.0);
    assert_true(moved > 16.0);
    sw_aberrometry_destroy(plan);
    ap.prelim_order = 0;
    plan = make_plan(&ap);
    run(plan, &frame, &stat);
    sw_aberrometry_destroy(plan);

    const sw_aberrometry_eye *d = &dyn.eye[0], *s = &stat.eye[0];
    if (!d->valid)
        fail_msg("dynamic mesh: eye invalid: %s", sw_ab_failure_string(d->failure));
    double err_d = rmse_2_6(d->coef_um, coef);
    double err_s = s->valid ? rmse_2_6(s->coef_um, coef) : INFINITY;
    print_message("defocus 8 um: dynamic mesh RMSE %.4f um (%d of %d kept), static mesh %.4f um "
                  "(%d kept, %d discarded)\n",
                  err_d, d->kept, d->lenslets, err_s, s->kept,
                  s->discarded[0] + s->discarded[1] + s->discarded[2]);
    assert_true(err_d < 0.05);
    assert_int_equal(d->kept, d->lenslets);
    assert_true(d->central > 0 && d->central < d->lenslets);
    assert_near(d->prelim_um[4], 8.0, 0.5);
    /* the static mesh: wrong, or many spots lost */
    assert_int_equal(s->central, 0);
    assert_true(err_s > 0.3 || s->kept < d->kept - left / 2);

    sw_image_free(&frame);
    sw_eyesim_truth_free(&truth);
    mono_free(&f);
}

/* Counts the used lenslets of eye 1 whose kept spot lies more than 1 px from the truth, and the
 * largest distance of a used lenslet's final start (the mesh) from its true spot. */
static int wrong_spots(sw_aberrometry_plan *plan, const sw_sh_truth *t, double *worst_start)
{
    double x[400], y[400], x0[400], y0[400];
    uint8_t st[400], eye[400];
    assert_int_equal(sw_aberrometry_spots(plan, x, y, st, eye, x0, y0), SW_OK);
    int wrong = 0;
    *worst_start = 0.0;
    for (int32_t l = 0; l < 400; l++) {
        if (eye[l] != 1 || !isfinite(t->x_px[l]))
            continue;
        *worst_start = fmax(*worst_start, hypot(x0[l] - t->x_px[l], y0[l] - t->y_px[l]));
        if (st[l] == SW_SPOT_OK && hypot(x[l] - t->x_px[l], y[l] - t->y_px[l]) > 1.0)
            wrong++;
    }
    return wrong;
}

/* A population eye of 5 um RMS (orders 2-6; spots up to ~30 px from their reference, a pitch
 * is 32 px): the seed's one preliminary stage (orders 1-2 on the central half, extrapolated to
 * the whole pupil) predicts edge spots more than half a pitch off, and PAPYCS takes a
 * neighbour's spot there; the stages of aberrometry.h step 3 (circles growing to 0.875 R, orders
 * growing) predict every spot within a few pixels, and every kept spot is the lenslet's own. */
static void test_mesh_stages(void **state)
{
    (void)state;
    mono_fixture f;
    mono_setup(&f);
    double coef[28];
    population_eye(1, 5.0, coef);
    f.ep.eyes[0].coef_um = coef;
    f.ep.eyes[0].count = 28;
    sw_eyesim_truth truth;
    sw_image frame = render_eyes(&f.ep, &truth);
    const sw_sh_truth *t = &truth.eye[0].sh;

    /* the truth: spots far from their reference positions */
    double far = 0.0;
    for (int32_t l = 0; l < 400; l++)
        if (isfinite(t->x_px[l]))
            far = fmax(far, hypot(t->x_px[l] - f.rx[l], t->y_px[l] - f.ry[l]));
    assert_true(far > 16.0);

    sw_aberrometry_params ap;
    ab_params(&ap, &f.ep, SW_PIX_F32, f.rx, f.ry);
    assert_int_equal(ap.mesh_stages, 4);
    sw_aberrometry_result res;
    sw_aberrometry_plan *plan = make_plan(&ap);
    run(plan, &frame, &res);
    double worst;
    const int wrong = wrong_spots(plan, t, &worst);
    sw_aberrometry_destroy(plan);
    const sw_aberrometry_eye *e = &res.eye[0];
    if (!e->valid)
        fail_msg("stages: eye invalid: %s", sw_ab_failure_string(e->failure));
    const double err = rmse_2_6(e->coef_um, coef);
    print_message("5 um eye, %d stages: RMSE %.4f um, %d of %d kept, %d wrong, starts within "
                  "%.2f px (spots up to %.1f px from their references)\n",
                  ap.mesh_stages, err, e->kept, e->lenslets, wrong, worst, far);
    assert_true(err < 0.05);
    assert_int_equal(wrong, 0);
    assert_true(worst < 0.25 * 32.0);
    assert_true(e->kept >= e->lenslets - 3);
    assert_true(e->central > 30 && e->central < e->lenslets / 2);
    const int32_t kept = e->kept;

    /* the seed's single stage, exactly its orders 1-2, without the mesh check: kept spots a
     * lenslet off */
    sw_aberrometry_params one = ap;
    one.mesh_stages = 1;
    one.prelim_order = 2;
    one.mesh_tolerance = 0.0;
    one.mesh_slopes_per_term = 0;
    plan = make_plan(&one);
    run(plan, &frame, &res);
    double worst1;
    const int wrong1 = wrong_spots(plan, t, &worst1);
    sw_aberrometry_destroy(plan);
    const double err1 = e->valid ? rmse_2_6(e->coef_um, coef) : INFINITY;
    print_message("5 um eye, 1 stage: RMSE %.4f um, %d of %d kept, %d wrong, starts within "
                  "%.2f px\n",
                  err1, e->kept, e->lenslets, wrong1, worst1);
    assert_true(worst1 > 16.0);
    assert_true(wrong1 > 0);
    assert_true(err1 > 1.0);

    /* the same single stage with its orders raised where the spots carry them (the default
     * mesh_slopes_per_term 4: the ~60 central spots carry order 6): every start within 2 px */
    one.mesh_slopes_per_term = 4;
    plan = make_plan(&one);
    run(plan, &frame, &res);
    const int wrong2 = wrong_spots(plan, t, &worst1);
    sw_aberrometry_destroy(plan);
    print_message("5 um eye, 1 stage, orders raised: RMSE %.4f um, %d wrong, starts within "
                  "%.2f px\n",
                  e->valid ? rmse_2_6(e->coef_um, coef) : INFINITY, wrong2, worst1);
    assert_true(e->valid);
    assert_int_equal(wrong2, 0);
    assert_true(worst1 < 2.0);
    assert_true(rmse_2_6(e->coef_um, coef) < 0.05);
    /* prelim_um: stage 0's terms of orders 1 .. prelim_order (2) alone */
    for (int j = 1; j < 6; j++)
        assert_true(isfinite(e->prelim_um[j]));
    for (int j = 6; j < SW_AB_MAX_TERMS; j++)
        assert_true(e->prelim_um[j] == 0.0);

    /* the mesh check: at a tolerance far below the centroids' noise every spot the final search
     * found is discarded as off its mesh (SW_SPOT_SPACING), and the fit has no rows */
    sw_aberrometry_params tight = ap;
    tight.mesh_tolerance = 1e-9;
    plan = make_plan(&tight);
    run(plan, &frame, &res);
    uint8_t st[400], eye[400];
    assert_int_equal(sw_aberrometry_spots(plan, NULL, NULL, st, eye, NULL, NULL), SW_OK);
    sw_aberrometry_destroy(plan);
    assert_int_equal(e->failure, SW_AB_FEW_SPOTS);
    assert_int_equal(e->kept, 0);
    assert_true(e->discarded[1] >= kept);
    assert_false(isnan(e->prelim_um[1]));
    for (int32_t l = 0; l < 400; l++)
        if (eye[l] == 1)
            assert_true(st[l] != SW_SPOT_OK);

    sw_image_free(&frame);
    sw_eyesim_truth_free(&truth);
    mono_free(&f);
}

/* Two eyes of different aberrations on one 1280 x 640 u8 frame (40 x 20 lenslets, 512-pixel
 * pupils at (320, 320) and (960, 320)). */
/* The detector of bench_aberrometry --accuracy: shot noise, 1.5 e- per ADU, 8 bits. */
static sw_image detect_u8(const sw_image *electrons, uint64_t seed)
{
    sw_detector d;
    sw_detector_default(&d);
    d.shot_noise = 1;
    d.gain_e_per_adu = 1.5;
    d.out_type = SW_PIX_U8;
    d.seed = seed;
    sw_image u;
    assert_int_equal(sw_image_alloc(cpu, electrons->width, electrons->height, SW_PIX_U8, &u),
                     SW_OK);
    if (sw_detector_apply(cpu, &d, electrons, &u) != SW_OK)
        fail_msg("sw_detector_apply: %s", sw_context_error(cpu));
    return u;
}

/* Image `index` of bench_aberrometry --accuracy (seed 0xab01; index = level's position x 100000
 * + image): Mompean et al.'s 640 x 640 eye (ep: the simulator's defaults) with every artefact, a
 * population eye of rms_um (orders 2-6), shot noise, 8 bits; its reference centroids (every
 * lenslet lit by a flat wavefront, through the same detector) into *rx, *ry (malloc'd). */
static sw_image protocol_eye(sw_eyesim_params *ep, uint64_t seed, uint64_t index, double rms_um,
                             double *coef, double **rx, double **ry, sw_eyesim_truth *truth)
{
    const int32_t nl = ep->sh.geom.nx * ep->sh.geom.ny;
    *rx = malloc((size_t)nl * sizeof(double));
    *ry = malloc((size_t)nl * sizeof(double));
    assert_true(*rx && *ry);
    sw_shsim_params sh = ep->sh;
    sh.pupil.a_um = sh.pupil.b_um = 0.0;
    sh.pupil.cu_um = sh.pupil.cv_um = 0.0;
    sh.pupil.obscuration = 0.0;
    sw_shsim *sim = NULL;
    assert_int_equal(sw_shsim_create(cpu, &sh, &sim), SW_OK);
    sw_image r;
    assert_int_equal(sw_image_alloc(cpu, sh.width, sh.height, SW_PIX_F32, &r), SW_OK);
    assert_int_equal(sw_shsim_run(sim, &r, 0), SW_OK);
    sw_shsim_destroy(sim);
    sw_image u = detect_u8(&r, seed + 7);
    reference_centroids(&ep->sh.geom, &u, *rx, *ry, NULL);
    sw_image_free(&r);
    sw_image_free(&u);
    population_eye_seeded(seed, index, rms_um, coef);
    ep->eyes[0].coef_um = coef;
    ep->eyes[0].count = 28;
    ep->seed = seed + 1000003ull * (index + 1);
    sw_image e = render_eyes(ep, truth);
    sw_image frame = detect_u8(&e, ep->seed ^ 0x5eedull);
    sw_image_free(&e);
    return frame;
}

/* Image 5 of the 6 um level of issue 22's accuracy protocol (bench_aberrometry --accuracy
 * --levels 6: Mompean et al.'s 640 x 640 eye with every artefact, population aberrations of
 * orders 2-6, shot noise, 8 bits): spots converge to 10-14 px apart at the pupil's edge. With
 * the lenslet's 32-px first window a lenslet started within a pixel of its spot there takes its
 * neighbour's (a brighter one within the window), the stage's fit follows the shifted row and the
 * edge is predicted a lenslet off; the neighbour window (first windows no wider than the
 * distance to the nearest neighbour's predicted spot, the default) keeps every spot its own. */
static void test_converging_edge(void **state)
{
    (void)state;
    const uint64_t seed = 0xab01, index = 5;
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    double *rx, *ry, coef[28];
    sw_eyesim_truth truth;
    sw_image frame = protocol_eye(&ep, seed, index, 6.0, coef, &rx, &ry, &truth);

    sw_aberrometry_params ap;
    ab_params(&ap, &ep, SW_PIX_U8, rx, ry);
    assert_true(ap.neighbour_window == 1.0);
    ap.outlier_sigma = 0.0; /* the neighbour window alone (the final fit's rejection also mends
                               this eye without it: RMSE 0.02 um, the wrong spots rejected) */
    for (int on = 0; on < 2; on++) {
        ap.neighbour_window = on ? 1.0 : 0.0;
        sw_aberrometry_plan *plan = make_plan(&ap);
        sw_aberrometry_result res;
        run(plan, &frame, &res);
        double worst;
        const int wrong = wrong_spots(plan, &truth.eye[0].sh, &worst);
        sw_aberrometry_destroy(plan);
        const sw_aberrometry_eye *r = &res.eye[0];
        const double err = r->valid ? rmse_2_6(r->coef_um, coef) : INFINITY;
        print_message("6 um eye, neighbour window %g: RMSE %.4f um, %d of %d kept, %d wrong, "
                      "starts within %.2f px\n",
                      ap.neighbour_window, err, r->kept, r->lenslets, wrong, worst);
        if (on) {
            assert_int_equal(wrong, 0);
            assert_true(worst < 3.0);
            assert_true(err < 0.05);
        } else {
            assert_true(wrong > 0);
            assert_true(err > 1.0);
        }
    }
    sw_image_free(&frame);
    sw_eyesim_truth_free(&truth);
    free(rx);
    free(ry);
}

/* Image 10 of the 5 um level of the accuracy protocol (index 9 x 100000 + 10): at the pupil's
 * edge, where strong aberration brings the spots of neighbouring lenslets within ~6 px of each
 * other, one lenslet's search takes the spot beside its own (6 px off). Without outlier
 * rejection that one spot moves the fit by 0.30 um RMS and the refraction by 0.105 D (J0); the
 * final fit's outlier rejection (aberrometry.h step 5, the default) rejects it alone and the
 * eye is as good as the others (RMSE ~0.02 um, refraction within 0.05 D). */
static void test_fit_outliers(void **state)
{
    (void)state;
    const uint64_t seed = 0xab01, index = 9u * 100000u + 10u;
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    double *rx, *ry, coef[28];
    sw_eyesim_truth truth;
    sw_image frame = protocol_eye(&ep, seed, index, 5.0, coef, &rx, &ry, &truth);
    sw_refraction t;
    assert_int_equal(sw_zernike_refraction(cpu, coef, 28, 5.12, 0, 0.0, &t), SW_OK);

    sw_aberrometry_params ap;
    ab_params(&ap, &ep, SW_PIX_U8, rx, ry);
    assert_true(ap.outlier_sigma == 5.0 && ap.outlier_min_px == 1.0);
    for (int on = 0; on < 2; on++) {
        ap.outlier_sigma = on ? 5.0 : 0.0;
        sw_aberrometry_plan *plan = make_plan(&ap);
        sw_aberrometry_result res;
        run(plan, &frame, &res);
        double worst;
        const int wrong = wrong_spots(plan, &truth.eye[0].sh, &worst);
        uint8_t st[400];
        assert_int_equal(sw_aberrometry_spots(plan, NULL, NULL, st, NULL, NULL, NULL), SW_OK);
        int marked = 0;
        for (int l = 0; l < 400; l++)
            marked += st[l] == SW_SPOT_OUTLIER;
        sw_aberrometry_destroy(plan);
        const sw_aberrometry_eye *r = &res.eye[0];
        assert_true(r->valid);
        const double err = rmse_2_6(r->coef_um, coef);
        const double drx =
            fmax(fabs(r->rx.M - t.M), fmax(fabs(r->rx.J0 - t.J0), fabs(r->rx.J45 - t.J45)));
        print_message("5 um eye, outlier_sigma %g: RMSE %.4f um, refraction off by %.4f D, %d "
                      "wrong kept, %d rejected, residual %.3f px\n",
                      ap.outlier_sigma, err, drx, wrong, r->outliers, r->residual_px);
        assert_int_equal(marked, r->outliers);
        if (on) {
            assert_int_equal(wrong, 0);
            assert_int_equal(r->outliers, 1);
            assert_true(err < 0.05 && drx < 0.05 && r->residual_px < 0.1);
        } else {
            assert_int_equal(wrong, 1);
            assert_int_equal(r->outliers, 0);
            assert_true(err > 0.2 && drx > 0.08);
        }
    }
    sw_image_free(&frame);
    sw_eyesim_truth_free(&truth);
    free(rx);
    free(ry);
}

/* Mompean et al.'s eye with lenslets 4 times as large (128 px, 10 x 10 of them over 1280 x 1280,
 * the pupil 9 lenslets across), spots 4 times as wide and 16 times the electrons (the same
 * f-number and peaks: bench_aberrometry's 2560 x 2560 frames are made so): a clean 2 um
 * population eye in u8. Criterion 1 with the paper's 8 neighbours finds a spot of sigma ~4.7 px
 * rising ~8 grey levels over them, below the contrast of 15, and discards most spots (at 2560 x
 * 2560 it discarded every central one in a quarter of the bench's frames: "fewer central
 * spots"); at the default distance, round(128 / 32) = 4 px, every spot is kept and the
 * coefficients are right. */
static void test_scaled_eye(void **state)
{
    (void)state;
    sw_eyesim_params ep;
    eye_params(&ep, NULL, 0);
    const double k = 4.0;
    const double sigma0 = 0.42 * ep.sh.wavelength_um * ep.sh.geom.focal_mm * 1000.0 /
                          (sw_sh_lenslet_um(&ep.sh.geom) * ep.sh.geom.pixel_um);
    ep.sh.width = ep.sh.height = 1280;
    ep.sh.geom.pitch_px *= k;
    ep.sh.geom.nx = ep.sh.geom.ny = 10;
    ep.sh.sigma_px = sigma0 * k;
    ep.sh.flux_e *= k * k;
    ep.art.glow_edge_px *= k;
    ep.eyes[0].cx_px = ep.eyes[0].cy_px = 639.5;
    ep.eyes[0].diameter_px = 1152.0;
    const int32_t nl = ep.sh.geom.nx * ep.sh.geom.ny;
    double *rx = malloc((size_t)nl * sizeof(double)), *ry = malloc((size_t)nl * sizeof(double));
    assert_true(rx && ry);
    sw_image ref = render_reference(&ep.sh, NULL);
    reference_centroids(&ep.sh.geom, &ref, rx, ry, NULL);
    sw_image_free(&ref);
    double coef[28];
    population_eye(4, 2.0, coef);
    ep.eyes[0].coef_um = coef;
    ep.eyes[0].count = 28;
    sw_eyesim_truth truth;
    sw_image f32 = render_eyes(&ep, &truth);
    sw_image frame = to_u8(&f32);
    sw_image_free(&f32);
    int32_t kept[2];
    for (int ring = 1; ring <= 2; ring++) {
        sw_aberrometry_params ap;
        ab_params(&ap, &ep, SW_PIX_U8, rx, ry);
        assert_int_equal(sw_aberrometry_discard_ring(&ap), 4);
        ap.discard_ring_px = ring == 1 ? 1 : 0;
        sw_aberrometry_plan *plan = make_plan(&ap);
        sw_aberrometry_result res;
        run(plan, &frame, &res);
        const sw_aberrometry_eye *e = &res.eye[0];
        kept[ring - 1] = e->valid ? e->kept : 0;
        if (ring == 2) {
            if (!e->valid)
                fail_msg("eye invalid: %s", sw_ab_failure_string(e->failure));
            assert_int_equal(e->kept, e->lenslets);
            double rmse = rmse_2_6(e->coef_um, truth.eye[0].coef_um);
            print_message("128-px lenslets: %d of %d kept, RMSE %.4f um; with the 8 neighbours "
                          "%d kept\n",
                          e->kept, e->lenslets, rmse, kept[0]);
            if (!(rmse < 0.05))
                fail_msg("RMSE(2-6) %.4f um", rmse);
        }
        sw_aberrometry_destroy(plan);
    }
    if (!(kept[0] < kept[1] / 2))
        fail_msg("the 8 neighbours kept %d spots, the 4-px ring %d", kept[0], kept[1]);
    sw_eyesim_truth_free(&truth);
    sw_image_free(&frame);
    free(rx);
    free(ry);
}

/* The guard on a raised stage fit (mesh_raise_residual_px): bench_eye_pupils' glow-less eyes on
 * 10-px lenslets (64 x 64 of them, focal length 3.5 mm x 10 / 32, every artefact but the glow,
 * shot noise, 8 bits), the five images of its 5.5 um level, with the true pupil given. On these
 * undersampled spots the central search takes some spots wrongly; with the guard off (+Inf) an
 * order-6 fit of stage 0 follows them and one image ends microns off (RMSE 7 um); with the default
 * 0.2 px that stage falls back to its own order 3 and every image is within 1 um. */
static void test_raise_guard(void **state)
{
    (void)state;
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    ep.sh.geom.pitch_px = 10.0;
    ep.sh.geom.nx = ep.sh.geom.ny = 64;
    ep.sh.geom.focal_mm = 3.5 * 10.0 / 32.0;
    sw_eye_artefacts_default(&ep.art);
    ep.art.glow_e = 0.0;
    const int32_t nl = 64 * 64;
    double *rx = malloc((size_t)nl * sizeof(double)), *ry = malloc((size_t)nl * sizeof(double));
    assert_true(rx && ry);
    sw_image ref_f = render_reference(&ep.sh, NULL);
    sw_image ref = detect_u8(&ref_f, 0x22ee5ull + 7);
    sw_image_free(&ref_f);
    reference_centroids(&ep.sh.geom, &ref, rx, ry, NULL);
    sw_image_free(&ref);
    sw_ocular_population pop;
    if (sw_ocular_population_load(cpu, NULL, 6.0, &pop) != SW_OK)
        fail_msg("population: %s", sw_context_error(cpu));
    sw_aberrometry_params ap;
    sw_aberrometry_params_default(&ap, 640, 640, SW_PIX_U8, &ep.sh.geom);
    ap.ref_x = rx;
    ap.ref_y = ry;
    ap.magnification = 576.0 * ep.sh.geom.pixel_um / (1000.0 * 5.12);
    ap.pupil.given = 1;
    ap.pupil.given_pupil[0] =
        (sw_pupil_shape){ep.eyes[0].cx_px, ep.eyes[0].cy_px, 288.0, 288.0, 0.0};
    assert_true(ap.mesh_raise_residual_px == 0.2);
    sw_aberrometry_plan *guarded = make_plan(&ap);
    ap.mesh_raise_residual_px = INFINITY;
    sw_aberrometry_plan *open_plan = make_plan(&ap);
    int bad_guarded = 0, bad_open = 0;
    for (int i = 0; i < 5; i++) {
        const uint64_t index = 10u * 100000u + (uint64_t)i; /* level 10: 5.5 um */
        sw_ocular_options opt;
        sw_ocular_options_default(&opt);
        opt.pupil_mm = 5.12;
        opt.max_order = 6;
        opt.total_rms_um = 5.5;
        double coef[28];
        if (sw_ocular_draw(cpu, &pop, 0x22ee5ull, index, &opt, coef, 28) != SW_OK)
            fail_msg("sw_ocular_draw: %s", sw_context_error(cpu));
        sw_eyesim_params q = ep;
        q.eyes[0].coef_um = coef;
        q.eyes[0].count = 28;
        q.seed = 0x22ee5ull + 1000003ull * (index + 1);
        sw_image e = render_eyes(&q, NULL);
        float *px = (float *)e.data; /* the detector wants electrons >= 0 (white noise) */
        for (size_t k = 0; k < (size_t)640 * 640; k++)
            if (px[k] < 0.0f)
                px[k] = 0.0f;
        sw_image u8 = detect_u8(&e, q.seed ^ 0x5eedull);
        sw_image_free(&e);
        sw_aberrometry_result rg, ro;
        run(guarded, &u8, &rg);
        run(open_plan, &u8, &ro);
        const double eg = rg.eye[0].valid ? rmse_2_6(rg.eye[0].coef_um, coef) : INFINITY;
        const double eo = ro.eye[0].valid ? rmse_2_6(ro.eye[0].coef_um, coef) : INFINITY;
        print_message("10-px lenslets, 5.5 um, image %d: RMSE %.4f um guarded, %.4f um without\n",
                      i, eg, eo);
        bad_guarded += !(eg < 1.0);
        bad_open += !(eo < 1.0);
        sw_image_free(&u8);
    }
    assert_int_equal(bad_guarded, 0);
    assert_true(bad_open >= 1);
    sw_aberrometry_destroy(guarded);
    sw_aberrometry_destroy(open_plan);
    sw_ocular_population_free(&pop);
    free(rx);
    free(ry);
}

static void test_binocular(void **state)
{
    (void)state;
    double c0[28], c1[28];
    population_eye(10, 0.8, c0);
    population_eye(11, 1.2, c1);
    sw_eyesim_params ep;
    eye_params(&ep, c0, 28);
    ep.sh.width = 1280;
    ep.sh.geom.nx = 40;
    ep.n_eyes = 2;
    ep.eyes[0].cx_px = 320;
    ep.eyes[0].cy_px = 320;
    ep.eyes[0].diameter_px = 512;
    ep.eyes[1] = ep.eyes[0];
    ep.eyes[1].cx_px = 960;
    ep.eyes[1].coef_um = c1;
    sw_eyesim_truth truth;
    sw_image f32 = render_eyes(&ep, &truth);
    sw_image frame = to_u8(&f32);
    sw_image rf = render_reference(&ep.sh, NULL);
    sw_image ref = to_u8(&rf);
    double *rx = malloc(800 * sizeof(double)), *ry = malloc(800 * sizeof(double));
    int32_t found;
    reference_centroids(&ep.sh.geom, &ref, rx, ry, &found);
    assert_int_equal(found, 800);

    sw_aberrometry_params ap;
    ab_params(&ap, &ep, SW_PIX_U8, rx, ry);
    sw_aberrometry_plan *plan = make_plan(&ap);
    sw_aberrometry_result res;
    run(plan, &frame, &res);
    assert_int_equal(res.n_eyes, 2);
    assert_true(res.split_x > 400 && res.split_x < 880);
    const double *truths[2] = {c0, c1};
    for (int e = 0; e < 2; e++) {
        const sw_aberrometry_eye *m = &res.eye[e];
        if (!m->valid)
            fail_msg("eye %d invalid: %s", e, sw_ab_failure_string(m->failure));
        assert_near(m->cx_px, e == 0 ? 320.0 : 960.0, 0.5);
        double err = rmse_2_6(m->coef_um, truths[e]);
        print_message("binocular eye %d: RMSE %.4f um, %d lenslets\n", e, err, m->lenslets);
        assert_true(err < 0.05);
        assert_true(m->lenslets > 120);
    }
    /* the two eyes differ, and each measurement is nearer its own truth */
    assert_true(rmse_2_6(res.eye[0].coef_um, c1) > 0.5);
    assert_true(rmse_2_6(res.eye[1].coef_um, c0) > 0.5);
    uint8_t eye[800];
    assert_int_equal(sw_aberrometry_spots(plan, NULL, NULL, NULL, eye, NULL, NULL), SW_OK);
    int n1 = 0, n2 = 0;
    for (int l = 0; l < 800; l++) {
        if (eye[l] == 1) {
            n1++;
            assert_true(l % 40 < 20);
        } else if (eye[l] == 2) {
            n2++;
            assert_true(l % 40 >= 20);
        }
    }
    assert_int_equal(n1, res.eye[0].lenslets);
    assert_int_equal(n2, res.eye[1].lenslets);

    /* the batch gives the same results, frame by frame */
    const sw_image *frames[2] = {&frame, &frame};
    sw_aberrometry_result batch[2];
    assert_int_equal(sw_aberrometry_run_batch(plan, frames, 2, batch), SW_OK);
    for (int k = 0; k < 2; k++)
        for (int e = 0; e < 2; e++)
            for (int j = 0; j < 28; j++)
                assert_true(batch[k].eye[e].coef_um[j] == res.eye[e].coef_um[j]);

    sw_aberrometry_destroy(plan);
    free(rx);
    free(ry);
    sw_image_free(&ref);
    sw_image_free(&rf);
    sw_image_free(&frame);
    sw_image_free(&f32);
    sw_eyesim_truth_free(&truth);
}

/* A dark frame: no pupil, the eye reported invalid, and the run still SW_OK. A pupil without
 * spots (the glow only): the spots the search finds on the smooth glow are discarded as empty
 * cells, and the eye has too few spots. */
static void test_no_pupil_and_no_spots(void **state)
{
    (void)state;
    mono_fixture f;
    mono_setup(&f);
    sw_aberrometry_params ap;
    ab_params(&ap, &f.ep, SW_PIX_F32, f.rx, f.ry);
    sw_aberrometry_plan *plan = make_plan(&ap);
    sw_image dark;
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_F32, &dark), SW_OK);
    sw_aberrometry_result res;
    run(plan, &dark, &res);
    const sw_aberrometry_eye *e = &res.eye[0];
    assert_false(e->valid);
    assert_int_equal(e->failure, SW_AB_NO_PUPIL);
    assert_false(e->pupil.valid);
    assert_true(isnan(e->coef_um[4]) && isnan(e->rx.M) && isnan(e->pupil_mm));
    assert_int_equal(e->lenslets, 0);

    /* the glow without spots: the dynamic mesh's first stage discards what it finds there
     * (criterion 1, empty cells), so its preliminary fit has no rows: FEW_CENTRAL */
    sw_eyesim_params ep = f.ep;
    ep.sh.flux_e = 0.0;
    sw_image glow = render_eyes(&ep, NULL);
    run(plan, &glow, &res);
    assert_true(e->pupil.valid);
    assert_false(e->valid);
    assert_int_equal(e->failure, SW_AB_FEW_CENTRAL);
    assert_true(e->lenslets > 180);
    assert_true(e->central > 30);
    assert_int_equal(e->kept, 0);
    assert_true(isnan(e->coef_um[4]) && isnan(e->prelim_um[4]));
    assert_true(isfinite(e->pupil_mm));
    sw_aberrometry_destroy(plan);

    /* the static mesh: one search, whose spots are all discarded: FEW_SPOTS */
    ap.prelim_order = 0;
    plan = make_plan(&ap);
    run(plan, &glow, &res);
    assert_true(e->pupil.valid);
    assert_int_equal(e->failure, SW_AB_FEW_SPOTS);
    assert_true(e->lenslets > 180);
    assert_int_equal(e->central, 0);
    assert_true(e->kept * 2 < e->terms - 1);
    assert_true(e->discarded[0] > 0);
    assert_true(isnan(e->coef_um[4]));
    sw_aberrometry_destroy(plan);
    sw_image_free(&glow);
    sw_image_free(&dark);
    mono_free(&f);
}

/* ---------------------------------------------------------------- bad input */

static void test_bad_parameters(void **state)
{
    (void)state;
    mono_fixture f;
    mono_setup(&f);
    sw_aberrometry_params good, ap;
    ab_params(&good, &f.ep, SW_PIX_F32, f.rx, f.ry);
    sw_aberrometry_plan *plan = NULL;

#define BAD(field_text, stmt)                                                                      \
    do {                                                                                           \
        ap = good;                                                                                 \
        stmt;                                                                                      \
        plan = NULL;                                                                               \
        assert_int_equal(sw_aberrometry_create(cpu, &ap, &plan), SW_EINVAL);                       \
        assert_null(plan);                                                                         \
        if (!strstr(sw_context_error(cpu), field_text))                                            \
            fail_msg("message \"%s\" does not name %s", sw_context_error(cpu), field_text);        \
    } while (0)

    BAD("frame size", ap.width = 8);
    BAD("type", ap.type = SW_PIX_U32);
    BAD("geometry", ap.geometry.nx = 21);
    BAD("n_eyes", ap.n_eyes = 3);
    BAD("order", ap.order = 11);
    BAD("mesh_raise_residual_px", ap.mesh_raise_residual_px = 0.0);
    BAD("mesh_raise_residual_px", ap.mesh_raise_residual_px = NAN);
    BAD("outlier_sigma", ap.outlier_sigma = -1.0);
    BAD("outlier_sigma", ap.outlier_sigma = INFINITY);
    BAD("outlier_min_px", ap.outlier_min_px = NAN);
    BAD("order", ap.order = 0);
    BAD("prelim_order", ap.prelim_order = 7);
    BAD("central_fraction", ap.central_fraction = 0.0);
    BAD("central_fraction", ap.central_fraction = 1.5);
    BAD("mesh_stages", ap.mesh_stages = 0);
    BAD("mesh_stages", ap.mesh_stages = SW_AB_MAX_STAGES + 1);
    BAD("mesh_tolerance", ap.mesh_tolerance = -0.1);
    BAD("mesh_tolerance", ap.mesh_tolerance = NAN);
    BAD("mesh_slopes_per_term", ap.mesh_slopes_per_term = -1);
    BAD("mesh_slopes_per_term", ap.mesh_slopes_per_term = 1001);
    BAD("neighbour_window", ap.neighbour_window = -0.5);
    BAD("neighbour_window", ap.neighbour_window = NAN);
    BAD("fit_radius_px", ap.fit_radius_px = -1.0);
    BAD("magnification", ap.magnification = 0.0);
    BAD("window_px", ap.window_px = 2);
    BAD("window_px", ap.window_px = SW_SEARCH_MAX_WINDOW + 1);
    BAD("streams", ap.streams = 0);
    BAD("streams", ap.streams = SW_AB_MAX_STREAMS + 1);
    BAD("ref_y", ap.ref_y = NULL);
    double *inf = malloc(400 * sizeof(double));
    memcpy(inf, f.rx, 400 * sizeof(double));
    inf[17] = INFINITY;
    BAD("infinite", ap.ref_x = inf);
#undef BAD

    /* NaN reference entries are allowed (no spot there) */
    inf[17] = NAN;
    ap = good;
    ap.ref_x = inf;
    plan = make_plan(&ap);

    /* frames of another size or type, NULL arguments */
    sw_image small, u8;
    assert_int_equal(sw_image_alloc(cpu, 320, 640, SW_PIX_F32, &small), SW_OK);
    assert_int_equal(sw_image_alloc(cpu, 640, 640, SW_PIX_U8, &u8), SW_OK);
    sw_aberrometry_result res;
    assert_int_equal(sw_aberrometry_run(plan, &small, &res), SW_EINVAL);
    assert_int_equal(sw_aberrometry_run(plan, &u8, &res), SW_EINVAL);
    assert_int_equal(sw_aberrometry_run(plan, NULL, &res), SW_EINVAL);
    assert_int_equal(sw_aberrometry_run(NULL, &u8, &res), SW_EINVAL);
    assert_int_equal(sw_aberrometry_run_batch(plan, NULL, 1, &res), SW_EINVAL);
    /* no frame yet */
    uint8_t st[400];
    assert_int_equal(sw_aberrometry_spots(plan, NULL, NULL, st, NULL, NULL, NULL), SW_EINVAL);
    /* the CPU has no stage times */
    double us[SW_AB_STAGES];
    sw_aberrometry_enable_timing(plan, 1);
    sw_aberrometry_stage_us(plan, us);
    for (int k = 0; k < SW_AB_STAGES; k++)
        assert_true(us[k] == -1.0);
    sw_aberrometry_plan *other = NULL;
    assert_int_equal(sw_aberrometry_create(cpu, NULL, &other), SW_EINVAL);
    assert_null(other);
    assert_int_equal(sw_aberrometry_create(cpu, &good, NULL), SW_EINVAL);
    sw_aberrometry_destroy(plan);
    sw_aberrometry_destroy(NULL);

    assert_string_equal(sw_ab_failure_string(SW_AB_NO_PUPIL), "pupil not found");
    sw_image_free(&small);
    sw_image_free(&u8);
    free(inf);
    mono_free(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zernike_all_matches_zernike_h),
        cmocka_unit_test(test_mean_grad_matches_zfit),
        cmocka_unit_test(test_reference_centroids),
        cmocka_unit_test(test_clean_population_eye),
        cmocka_unit_test(test_strong_defocus_dynamic_mesh),
        cmocka_unit_test(test_mesh_stages),
        cmocka_unit_test(test_converging_edge),
        cmocka_unit_test(test_scaled_eye),
        cmocka_unit_test(test_raise_guard),
        cmocka_unit_test(test_fit_outliers),
        cmocka_unit_test(test_binocular),
        cmocka_unit_test(test_no_pupil_and_no_spots),
        cmocka_unit_test(test_bad_parameters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
