/*
 * The aberrometry pipeline on the GPU (aberrometry_cuda.cu) against the CPU (aberrometry.c), one
 * plan per backend from the same parameters and reference centroids, on the same synthetic eyes
 * (sim_eye.h, rendered once on the CPU; seed 001 Sec. 3-4):
 *   - monocular frames of seed 001's 640 x 640 / 20 x 20 lenslet case, clean and with the
 *     artefacts of living eyes (glow, corneal reflection that saturates, brightness map, tear
 *     film, white noise), and a binocular 1280 x 640 frame whose eyes have different aberrations;
 *   - the options: order 10 with a third-order preliminary fit (66 terms: the largest design;
 *     the stage fits raised as far as their spots carry, mesh_slopes_per_term 4), the static mesh
 *     (prelim_order 0, and CoM), no discarding, a fixed analysis radius, one stage of the dynamic
 *     mesh at exactly its orders (mesh_slopes_per_term 0) and without the neighbour window or
 *     the mesh check, the most stages, u16 and f32 frames (every other case with the neighbour
 *     window);
 *   - a strong aberration (several um), where the later stages move the mesh far;
 *   - frames whose fits are impossible: a dark frame (NO_PUPIL), pupils without spots, every
 *     spot discarded and a central mesh without lenslets (FEW_CENTRAL), every spot discarded
 *     with the static mesh, every spot off its mesh (FEW_SPOTS): the same failure on both, SW_OK;
 * compared: the pupils (1e-6 px: the trackers' refinements add in another order), the analysis
 * circles, the counts, the failures, the per-lenslet statuses and eyes exactly, the centroids and
 * the final search's start positions within 1e-9 px (the searches are bit-identical; the starts
 * of the dynamic mesh come from the two backends' solvers), the coefficients (final and
 * preliminary) within 1e-6 um, the residual within 1e-6 px. And on the GPU alone:
 *   - run_batch with 1, 2 and 3 streams gives what frame-by-frame runs give, to the bit (the same
 *     kernels and library calls on every stream), the first frame of a stream (plain launches)
 *     as well as the later ones (the captured graph);
 *   - a device frame, a pinned and a plain host frame give the same result, to the bit;
 *   - timing on gives four non-negative stage times and the same result; timing off gives -1.
 * Skips (77) when no GPU is usable.
 */
#include "testutil.h"

#include "spotwave/aberrometry.h"
#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"
#include "spotwave/sim_sh.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *gpu;
static sw_context *cpu;
static int warnings; /* warnings logged by the GPU plans (a graph capture that fell back) */

static void on_log(sw_log_level level, const char *message, void *user)
{
    (void)user;
    printf("log (%s): %s\n", sw_log_level_string(level), message);
    if (level >= SW_LOG_WARN)
        warnings++;
}

static int setup(void **state)
{
    (void)state;
    sw_context_params cp;
    sw_context_params_default(&cp);
    cp.backend = SW_BACKEND_CUDA;
    cp.log = on_log;
    cp.log_level = SW_LOG_WARN;
    if (sw_context_create(&cp, &gpu) != SW_OK) {
        printf("SKIP: no usable GPU: %s\n", sw_context_error(NULL));
        exit(77);
    }
    cpu = sw_test_cpu_context(0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    printf("GPU plans logged %d warning(s) (a warning says a stream ran without its graph)\n",
           warnings);
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return 0;
}

/* ---------------------------------------------------------------- scenes */

/* A lenslet grid, its eyes and its reference centroids. */
typedef struct scene {
    sw_eyesim_params sp;
    double coef[2][SW_AB_MAX_TERMS]; /* the eyes' aberrations, OSA, um over pupil_mm */
    double *rx, *ry;                 /* reference centroids (sw_aberrometry_reference) */
    int32_t nl;
} scene;

static sw_image alloc_host(int32_t w, int32_t h, sw_pixel_type t)
{
    sw_image img;
    if (sw_image_alloc(NULL, w, h, t, &img) != SW_OK)
        fail_msg("sw_image_alloc: %s", sw_context_error(NULL));
    return img;
}

/* Electrons (f32) as a frame of type t: u8 1 grey level per electron (a reflection saturates),
 * u16 64 levels per electron, f32 as they are. */
static sw_image as_type(const sw_image *e, sw_pixel_type t)
{
    sw_image out = alloc_host(e->width, e->height, t);
    const double scale = t == SW_PIX_U8 ? 1.0 : t == SW_PIX_U16 ? 64.0 : 1.0;
    if (sw_image_convert(cpu, e, &out, scale, 0.0, NULL) != SW_OK)
        fail_msg("sw_image_convert: %s", sw_context_error(cpu));
    return out;
}

/* The eyes of sc (aberrations coef) as a frame of type t: the artefacts of sim_eye.h's defaults
 * (with tear-film blobs) when artefacts is 1, else the pupil glow only; seed for the artefacts.
 * spots 0: a flux so small that no spot survives the conversion (the glow stays). */
static sw_image render(const scene *sc, sw_pixel_type t, int artefacts, int spots, uint64_t seed)
{
    sw_eyesim_params sp = sc->sp;
    for (int e = 0; e < sp.n_eyes; e++) {
        sp.eyes[e].coef_um = sc->coef[e];
        sp.eyes[e].count = SW_AB_MAX_TERMS;
    }
    if (artefacts) {
        sw_eye_artefacts_default(&sp.art);
        sp.art.tear_blobs = 3;
    } else {
        sw_eye_artefacts_none(&sp.art);
        sp.art.glow_e = 20.0;
    }
    if (!spots)
        sp.sh.flux_e = 1e-3;
    sp.seed = seed;
    sw_image el = alloc_host(sp.sh.width, sp.sh.height, SW_PIX_F32);
    if (sw_eyesim_render(cpu, &sp, &el, NULL) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    sw_image out = as_type(&el, t);
    sw_image_free(&el);
    return out;
}

/* A scene of n_eyes eyes: one 576-pixel pupil in seed 001's 640 x 640 frame of 20 x 20 lenslets
 * (sim_eye.h defaults), or two 560-pixel pupils side by side in a 1280 x 640 frame. Each eye gets
 * some defocus, astigmatism, coma and spherical aberration (different per eye). The reference
 * is a flat wavefront over the whole lenslet array (the SH simulator with no pupil), measured on
 * the CPU. */
static void scene_init(scene *sc, int n_eyes)
{
    memset(sc, 0, sizeof *sc);
    sw_eyesim_params_default(&sc->sp);
    sc->sp.n_eyes = n_eyes;
    if (n_eyes == 2) {
        sc->sp.sh.width = 1280;
        sc->sp.sh.geom.nx = 40;
        sc->sp.eyes[0].diameter_px = sc->sp.eyes[1].diameter_px = 560.0;
        sc->sp.eyes[0].cx_px = 319.5;
        sc->sp.eyes[1].cx_px = 959.5;
        sc->sp.eyes[1].cy_px = 322.0;
    }
    for (int e = 0; e < n_eyes; e++) {
        double *c = sc->coef[e];
        c[3] = 0.25 - 0.4 * e; /* oblique astigmatism */
        c[4] = 1.2 + 0.6 * e;  /* defocus */
        c[5] = -0.3;           /* astigmatism */
        c[7] = 0.15 * (1 - 2 * e);
        c[8] = -0.1;
        c[12] = 0.08; /* spherical */
    }
    sc->nl = sc->sp.sh.geom.nx * sc->sp.sh.geom.ny;

    sw_shsim_params sh = sc->sp.sh;
    sh.pupil = sw_pupil_circle(0.0); /* no pupil: every lenslet lit */
    sw_shsim *sim = NULL;
    if (sw_shsim_create(cpu, &sh, &sim) != SW_OK)
        fail_msg("sw_shsim_create: %s", sw_context_error(cpu));
    sw_image el = alloc_host(sh.width, sh.height, SW_PIX_F32);
    if (sw_shsim_run(sim, &el, 0) != SW_OK)
        fail_msg("sw_shsim_run: %s", sw_context_error(cpu));
    sw_shsim_destroy(sim);
    sw_image ref = as_type(&el, SW_PIX_U8);
    sw_image_free(&el);
    sc->rx = malloc((size_t)sc->nl * sizeof(double));
    sc->ry = malloc((size_t)sc->nl * sizeof(double));
    assert_non_null(sc->rx);
    assert_non_null(sc->ry);
    int32_t found = 0;
    if (sw_aberrometry_reference(cpu, &sh.geom, &ref, sc->rx, sc->ry, &found) != SW_OK)
        fail_msg("sw_aberrometry_reference: %s", sw_context_error(cpu));
    assert_int_equal(found, sc->nl); /* every lenslet has a reference spot */
    sw_image_free(&ref);
}

static void scene_free(scene *sc)
{
    free(sc->rx);
    free(sc->ry);
}

/* The defaults for the scene's frames of type t, with its reference; one stream. */
static void scene_params(const scene *sc, sw_pixel_type t, sw_aberrometry_params *p)
{
    sw_aberrometry_params_default(p, sc->sp.sh.width, sc->sp.sh.height, t, &sc->sp.sh.geom);
    p->n_eyes = sc->sp.n_eyes;
    p->ref_x = sc->rx;
    p->ref_y = sc->ry;
    p->streams = 1;
}

static sw_aberrometry_plan *make_plan(sw_context *ctx, const sw_aberrometry_params *p)
{
    sw_aberrometry_plan *plan = NULL;
    if (sw_aberrometry_create(ctx, p, &plan) != SW_OK)
        fail_msg("sw_aberrometry_create (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
    return plan;
}

static void run(sw_aberrometry_plan *plan, sw_context *ctx, const sw_image *frame,
                sw_aberrometry_result *out)
{
    memset(out, 0xab, sizeof *out);
    if (sw_aberrometry_run(plan, frame, out) != SW_OK)
        fail_msg("sw_aberrometry_run (%s): %s", sw_backend_string(sw_context_backend(ctx)),
                 sw_context_error(ctx));
}

/* ---------------------------------------------------------------- comparisons */

/* The last frame's per-lenslet arrays of a plan. */
typedef struct spots {
    double *x, *y, *x0, *y0;
    uint8_t *status, *eye;
} spots;

static spots get_spots(sw_aberrometry_plan *plan, sw_context *ctx, int32_t nl)
{
    spots s;
    s.x = malloc((size_t)nl * 4 * sizeof(double));
    s.status = malloc((size_t)nl * 2);
    assert_non_null(s.x);
    assert_non_null(s.status);
    s.y = s.x + nl;
    s.x0 = s.x + 2 * (size_t)nl;
    s.y0 = s.x + 3 * (size_t)nl;
    s.eye = s.status + nl;
    if (sw_aberrometry_spots(plan, s.x, s.y, s.status, s.eye, s.x0, s.y0) != SW_OK)
        fail_msg("sw_aberrometry_spots: %s", sw_context_error(ctx));
    return s;
}

static void free_spots(spots *s)
{
    free(s->x);
    free(s->status);
}

/* a and b both NaN, or within tol (tol 0: equal to the bit). */
static void near_or_nan(const char *what, const char *name, int32_t k, double a, double b,
                        double tol)
{
    if (isnan(a) && isnan(b))
        return;
    int ok = tol == 0.0 ? memcmp(&a, &b, sizeof a) == 0 : fabs(a - b) <= tol;
    if (!ok)
        fail_msg("%s: %s[%d] = %.17g (CPU / first) vs %.17g (GPU / second), tolerance %g", what,
                 name, k, a, b, tol);
}

/* Two results of one frame: the counts and failures equal, the numbers within tol_px (pupils,
 * circles, residual), tol_um (coefficients, refraction); 0, 0: equal to the bit. */
static void compare_results(const char *what, const sw_aberrometry_result *a,
                            const sw_aberrometry_result *b, double tol_px, double tol_um)
{
    assert_int_equal(a->n_eyes, b->n_eyes);
    near_or_nan(what, "scale", 0, a->scale, b->scale, 0.0);
    near_or_nan(what, "split_x", 0, a->split_x, b->split_x, 0.0);
    for (int e = 0; e < a->n_eyes; e++) {
        const sw_aberrometry_eye *p = &a->eye[e], *q = &b->eye[e];
        if (p->valid != q->valid || p->failure != q->failure)
            fail_msg("%s: eye %d: %s (CPU / first) vs %s (GPU / second)", what, e,
                     sw_ab_failure_string(p->failure), sw_ab_failure_string(q->failure));
        assert_int_equal(p->pupil.valid, q->pupil.valid);
        assert_int_equal(p->pupil.failure, q->pupil.failure);
        if (p->pupil.valid) {
            near_or_nan(what, "pupil cx", e, p->pupil.cx_px, q->pupil.cx_px, tol_px);
            near_or_nan(what, "pupil cy", e, p->pupil.cy_px, q->pupil.cy_px, tol_px);
            near_or_nan(what, "pupil a", e, p->pupil.a_px, q->pupil.a_px, tol_px);
            near_or_nan(what, "pupil b", e, p->pupil.b_px, q->pupil.b_px, tol_px);
        }
        near_or_nan(what, "cx_px", e, p->cx_px, q->cx_px, tol_px);
        near_or_nan(what, "cy_px", e, p->cy_px, q->cy_px, tol_px);
        near_or_nan(what, "radius_px", e, p->radius_px, q->radius_px, tol_px);
        near_or_nan(what, "pupil_mm", e, p->pupil_mm, q->pupil_mm, tol_px);
        assert_int_equal(p->lenslets, q->lenslets);
        assert_int_equal(p->central, q->central);
        assert_int_equal(p->found, q->found);
        assert_int_equal(p->kept, q->kept);
        for (int k = 0; k < 3; k++)
            assert_int_equal(p->discarded[k], q->discarded[k]);
        assert_int_equal(p->outliers, q->outliers);
        assert_int_equal(p->terms, q->terms);
        for (int32_t j = 0; j < p->terms; j++) {
            near_or_nan(what, "coef_um", j, p->coef_um[j], q->coef_um[j], tol_um);
            near_or_nan(what, "prelim_um", j, p->prelim_um[j], q->prelim_um[j], tol_um);
        }
        near_or_nan(what, "residual_px", e, p->residual_px, q->residual_px, tol_px);
        near_or_nan(what, "sphere_d", e, p->rx.sphere_d, q->rx.sphere_d, tol_um);
        near_or_nan(what, "cyl_d", e, p->rx.cyl_d, q->rx.cyl_d, tol_um);
    }
}

/* Two plans' last-frame spots: statuses and eyes equal, positions within tol (0: to the bit). */
static void compare_spots(const char *what, const spots *a, const spots *b, int32_t nl, double tol)
{
    for (int32_t l = 0; l < nl; l++) {
        if (a->status[l] != b->status[l])
            fail_msg("%s: lenslet %d: status %s (CPU / first) vs %s (GPU / second)", what, l,
                     sw_spot_status_string((sw_spot_status)a->status[l]),
                     sw_spot_status_string((sw_spot_status)b->status[l]));
        if (a->eye[l] != b->eye[l])
            fail_msg("%s: lenslet %d: eye %d vs %d", what, l, a->eye[l], b->eye[l]);
        near_or_nan(what, "x", l, a->x[l], b->x[l], tol);
        near_or_nan(what, "y", l, a->y[l], b->y[l], tol);
        near_or_nan(what, "x0", l, a->x0[l], b->x0[l], tol);
        near_or_nan(what, "y0", l, a->y0[l], b->y0[l], tol);
    }
}

/* Runs frame on a CPU and a GPU plan of params p and compares (see the top); the GPU's result
 * in *out_gpu when not NULL. Each plan runs the frame twice, so that the GPU's second run goes
 * through its captured graph: it must repeat the first to the bit. */
static void both(const char *what, const sw_aberrometry_params *p, const sw_image *frame,
                 int32_t nl, sw_aberrometry_result *out_gpu)
{
    sw_aberrometry_plan *pc = make_plan(cpu, p), *pg = make_plan(gpu, p);
    sw_aberrometry_result rc, rg, rg2;
    run(pc, cpu, frame, &rc);
    run(pg, gpu, frame, &rg);
    spots sc = get_spots(pc, cpu, nl), sg = get_spots(pg, gpu, nl);
    compare_results(what, &rc, &rg, 1e-6, 1e-6);
    compare_spots(what, &sc, &sg, nl, 1e-9);
    run(pg, gpu, frame, &rg2);
    spots sg2 = get_spots(pg, gpu, nl);
    compare_results(what, &rg, &rg2, 0.0, 0.0);
    compare_spots(what, &sg, &sg2, nl, 0.0);
    if (out_gpu)
        *out_gpu = rg;
    free_spots(&sc);
    free_spots(&sg);
    free_spots(&sg2);
    sw_aberrometry_destroy(pc);
    sw_aberrometry_destroy(pg);
}

/* A valid eye that measured most of its lenslets, with the scene's defocus to 0.2 um (the
 * analysis circle is the tracked pupil, close to the simulated one): so that the comparisons
 * above are not between two failures. */
static void assert_measured(const char *what, const sw_aberrometry_eye *eye, double defocus)
{
    if (!eye->valid)
        fail_msg("%s: the eye was not measured: %s", what, sw_ab_failure_string(eye->failure));
    if (eye->kept < eye->lenslets * 7 / 10 || eye->lenslets < 150)
        fail_msg("%s: %d of %d lenslets kept", what, eye->kept, eye->lenslets);
    if (!(fabs(eye->coef_um[4] - defocus) < 0.2))
        fail_msg("%s: defocus %g um, simulated %g um", what, eye->coef_um[4], defocus);
}

/* ---------------------------------------------------------------- tests */

static void test_monocular(void **state)
{
    (void)state;
    scene sc;
    scene_init(&sc, 1);
    sw_aberrometry_params p;
    scene_params(&sc, SW_PIX_U8, &p);
    for (int artefacts = 0; artefacts <= 1; artefacts++) {
        sw_image f = render(&sc, SW_PIX_U8, artefacts, 1, 11 + artefacts);
        sw_aberrometry_result r;
        char what[96];
        snprintf(what, sizeof what, "monocular, %s", artefacts ? "artefacts" : "clean");
        both(what, &p, &f, sc.nl, &r);
        assert_measured(what, &r.eye[0], sc.coef[0][4]);
        assert_true(r.eye[0].central > 0);
        sw_image_free(&f);
    }
    scene_free(&sc);
}

static void test_binocular(void **state)
{
    (void)state;
    scene sc;
    scene_init(&sc, 2);
    sw_aberrometry_params p;
    scene_params(&sc, SW_PIX_U8, &p);
    sw_image f = render(&sc, SW_PIX_U8, 1, 1, 5);
    sw_aberrometry_result r;
    both("binocular", &p, &f, sc.nl, &r);
    assert_measured("binocular, eye 0", &r.eye[0], sc.coef[0][4]);
    assert_measured("binocular, eye 1", &r.eye[1], sc.coef[1][4]);
    /* the eyes were fitted apart: their astigmatisms have opposite signs */
    assert_true(r.eye[0].coef_um[3] > 0.0 && r.eye[1].coef_um[3] < 0.0);
    sw_image_free(&f);
    scene_free(&sc);
}

static void test_options(void **state)
{
    (void)state;
    scene sc;
    scene_init(&sc, 1);
    const sw_pixel_type types[3] = {SW_PIX_U8, SW_PIX_U16, SW_PIX_F32};
    for (int k = 0; k < 8; k++) {
        const sw_pixel_type t = types[k % 3];
        sw_aberrometry_params p;
        scene_params(&sc, t, &p);
        const char *name = "";
        switch (k) {
        case 0:
            p.order = 10;
            p.prelim_order = 3;
            name = "order 10, preliminary 3";
            break;
        case 1:
            p.prelim_order = 0;
            name = "static mesh";
            break;
        case 2:
            p.algorithm = SW_SEARCH_COM;
            name = "CoM";
            break;
        case 3:
            p.discard = 0;
            p.central_fraction = 0.8;
            name = "no discarding, central 0.8";
            break;
        case 4:
            p.fit_radius_px = 250.0;
            p.order = 4;
            p.prelim_order = 1;
            name = "fit radius 250, order 4, preliminary 1";
            break;
        case 6:
            p.mesh_stages = 1;
            p.mesh_tolerance = 0.0;
            p.mesh_slopes_per_term = 0;
            p.neighbour_window = 0.0;
            name = "one stage (the seed's dynamic mesh: its orders, windows of the pitch), no mesh "
                   "check";
            break;
        case 7:
            p.mesh_stages = SW_AB_MAX_STAGES;
            p.central_fraction = 0.3;
            name = "most stages, central 0.3";
            break;
        default:
            p.order = 2;
            p.prelim_order = 2;
            p.streams = 2;
            name = "order 2, preliminary 2, 2 streams";
            break;
        }
        char what[128];
        snprintf(what, sizeof what, "%s (%s)", name, sw_pixel_type_string(t));
        sw_image f = render(&sc, t, 1, 1, 21 + (uint64_t)k);
        sw_aberrometry_result r;
        both(what, &p, &f, sc.nl, &r);
        assert_true(r.eye[0].valid);
        assert_true(r.eye[0].kept > 50);
        sw_image_free(&f);
    }
    scene_free(&sc);
}

static void test_failures(void **state)
{
    (void)state;
    scene sc;
    scene_init(&sc, 2);
    sw_aberrometry_params p;
    scene_params(&sc, SW_PIX_U8, &p);
    sw_aberrometry_result r;

    /* dark: no pupil on either eye, SW_OK */
    sw_image dark = alloc_host(sc.sp.sh.width, sc.sp.sh.height, SW_PIX_U8);
    both("dark frame", &p, &dark, sc.nl, &r);
    for (int e = 0; e < 2; e++) {
        assert_false(r.eye[e].valid);
        assert_int_equal(r.eye[e].failure, SW_AB_NO_PUPIL);
        assert_true(isnan(r.eye[e].coef_um[4]));
    }
    sw_image_free(&dark);

    /* the pupils' glow without spots: the pupils are found, the fits are not possible */
    sw_image glow = render(&sc, SW_PIX_U8, 0, 0, 3);
    both("pupils without spots", &p, &glow, sc.nl, &r);
    for (int e = 0; e < 2; e++) {
        assert_true(r.eye[e].pupil.valid);
        assert_false(r.eye[e].valid);
        assert_int_equal(r.eye[e].kept, 0);
    }
    sw_image_free(&glow);

    /* every spot discarded (criterion 1 asks for more contrast than a u8 frame has): the first
     * stage of the dynamic mesh has no rows: FEW_CENTRAL */
    sw_image f0 = render(&sc, SW_PIX_U8, 0, 1, 2);
    p.discard_contrast = 1000.0;
    both("every spot discarded", &p, &f0, sc.nl, &r);
    for (int e = 0; e < 2; e++) {
        assert_int_equal(r.eye[e].failure, SW_AB_FEW_CENTRAL);
        assert_true(r.eye[e].central > 20);
        assert_int_equal(r.eye[e].kept, 0);
        assert_true(isnan(r.eye[e].prelim_um[4]));
    }
    /* the same with the static mesh: the one search's spots are discarded: FEW_SPOTS */
    p.prelim_order = 0;
    both("every spot discarded, static mesh", &p, &f0, sc.nl, &r);
    for (int e = 0; e < 2; e++) {
        assert_int_equal(r.eye[e].failure, SW_AB_FEW_SPOTS);
        assert_int_equal(r.eye[e].kept, 0);
        assert_true(r.eye[e].found > 100);
        assert_int_equal(r.eye[e].discarded[0], r.eye[e].found);
    }
    p.prelim_order = 2;
    p.discard_contrast = 15.0;

    /* the mesh check at a tolerance far below the centroids' noise: the preliminary fits are
     * solved, every spot of the final search is off its mesh (SW_SPOT_SPACING): FEW_SPOTS */
    p.mesh_tolerance = 1e-9;
    both("every spot off its mesh", &p, &f0, sc.nl, &r);
    for (int e = 0; e < 2; e++) {
        assert_int_equal(r.eye[e].failure, SW_AB_FEW_SPOTS);
        assert_int_equal(r.eye[e].kept, 0);
        assert_true(r.eye[e].found > 100);
        assert_true(r.eye[e].discarded[1] > 100);
        assert_false(isnan(r.eye[e].prelim_um[4]));
    }
    p.mesh_tolerance = 0.25;
    sw_image_free(&f0);

    /* a central mesh too small to hold a lenslet: FEW_CENTRAL */
    p.central_fraction = 0.02;
    sw_image f = render(&sc, SW_PIX_U8, 1, 1, 4);
    both("no central lenslet", &p, &f, sc.nl, &r);
    for (int e = 0; e < 2; e++) {
        assert_int_equal(r.eye[e].failure, SW_AB_FEW_CENTRAL);
        assert_int_equal(r.eye[e].central, 0);
        assert_true(r.eye[e].lenslets > 100);
    }
    sw_image_free(&f);
    scene_free(&sc);
}

/* A strong aberration (3.5 times the scene's: 4.2 um of defocus and coma), where the later
 * stages of the dynamic mesh move the starts far from the reference centroids; u8 and f32. */
static void test_strong(void **state)
{
    (void)state;
    scene sc;
    scene_init(&sc, 1);
    for (int j = 0; j < SW_AB_MAX_TERMS; j++)
        sc.coef[0][j] *= 3.5;
    const sw_pixel_type types[2] = {SW_PIX_U8, SW_PIX_F32};
    for (int k = 0; k < 2; k++) {
        sw_aberrometry_params p;
        scene_params(&sc, types[k], &p);
        sw_image f = render(&sc, types[k], 1, 1, 31 + (uint64_t)k);
        sw_aberrometry_result r;
        char what[96];
        snprintf(what, sizeof what, "strong aberration (%s)", sw_pixel_type_string(types[k]));
        both(what, &p, &f, sc.nl, &r);
        assert_measured(what, &r.eye[0], sc.coef[0][4]);
        sw_image_free(&f);
    }
    scene_free(&sc);
}

/* The guard on a raised stage fit (mesh_raise_residual_px; test_aberrometry's test_raise_guard):
 * image 0 of bench_eye_pupils' 5.5 um level on 10-px lenslets without glow, the true pupil given.
 * Its stage-0 search takes some spots wrongly; the raised order-6 fit does not fit them (residual
 * above 0.2 px) and both backends fall back to the stage's own orders (the GPU from the leading
 * block of the same factor) and agree; without the guard (+Inf) both go microns off, alike. */
static sw_image detect_u8(const sw_image *electrons, uint64_t seed)
{
    sw_detector d;
    sw_detector_default(&d);
    d.shot_noise = 1;
    d.gain_e_per_adu = 1.5;
    d.out_type = SW_PIX_U8;
    d.seed = seed;
    sw_image u = alloc_host(electrons->width, electrons->height, SW_PIX_U8);
    if (sw_detector_apply(cpu, &d, electrons, &u) != SW_OK)
        fail_msg("sw_detector_apply: %s", sw_context_error(cpu));
    return u;
}

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
    {
        sw_shsim_params sh = ep.sh;
        memset(&sh.pupil, 0, sizeof sh.pupil);
        sh.min_illum = 0.0;
        sw_shsim *sim = NULL;
        assert_int_equal(sw_shsim_create(cpu, &sh, &sim), SW_OK);
        sw_image rf = alloc_host(640, 640, SW_PIX_F32);
        assert_int_equal(sw_shsim_run(sim, &rf, 0), SW_OK);
        sw_shsim_destroy(sim);
        sw_image ref = detect_u8(&rf, 0x22ee5ull + 7);
        sw_image_free(&rf);
        if (sw_aberrometry_reference(cpu, &ep.sh.geom, &ref, rx, ry, NULL) != SW_OK)
            fail_msg("sw_aberrometry_reference: %s", sw_context_error(cpu));
        sw_image_free(&ref);
    }
    sw_ocular_population pop;
    if (sw_ocular_population_load(cpu, NULL, 6.0, &pop) != SW_OK)
        fail_msg("population: %s", sw_context_error(cpu));
    sw_ocular_options opt;
    sw_ocular_options_default(&opt);
    opt.pupil_mm = 5.12;
    opt.max_order = 6;
    opt.total_rms_um = 5.5;
    double coef[28];
    const uint64_t index = 10u * 100000u; /* level 10 (5.5 um), image 0 */
    if (sw_ocular_draw(cpu, &pop, 0x22ee5ull, index, &opt, coef, 28) != SW_OK)
        fail_msg("sw_ocular_draw: %s", sw_context_error(cpu));
    sw_ocular_population_free(&pop);
    ep.eyes[0].coef_um = coef;
    ep.eyes[0].count = 28;
    ep.seed = 0x22ee5ull + 1000003ull * (index + 1);
    sw_image e = alloc_host(640, 640, SW_PIX_F32);
    if (sw_eyesim_render(cpu, &ep, &e, NULL) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    float *px = (float *)e.data;
    for (size_t k = 0; k < (size_t)640 * 640; k++)
        if (px[k] < 0.0f)
            px[k] = 0.0f;
    sw_image f = detect_u8(&e, ep.seed ^ 0x5eedull);
    sw_image_free(&e);
    sw_aberrometry_params p;
    sw_aberrometry_params_default(&p, 640, 640, SW_PIX_U8, &ep.sh.geom);
    p.ref_x = rx;
    p.ref_y = ry;
    p.streams = 1;
    p.magnification = 576.0 * ep.sh.geom.pixel_um / (1000.0 * 5.12);
    p.pupil.given = 1;
    p.pupil.given_pupil[0] =
        (sw_pupil_shape){ep.eyes[0].cx_px, ep.eyes[0].cy_px, 288.0, 288.0, 0.0};
    sw_aberrometry_result r;
    both("10-px lenslets, 5.5 um, guarded", &p, &f, nl, &r);
    double ss = 0.0;
    for (int j = 3; j < 28; j++)
        ss += (r.eye[0].coef_um[j] - coef[j]) * (r.eye[0].coef_um[j] - coef[j]);
    print_message("10-px lenslets, 5.5 um: GPU RMSE %.4f um with the guard\n", sqrt(ss));
    assert_true(r.eye[0].valid && sqrt(ss) < 1.0);
    p.mesh_raise_residual_px = INFINITY;
    both("10-px lenslets, 5.5 um, unguarded", &p, &f, nl, &r);
    sw_image_free(&f);
    free(rx);
    free(ry);
}

/* The final fit's outlier rejection (aberrometry.h step 5) on image 10 of the 5 um level of the
 * accuracy protocol (test_aberrometry's test_fit_outliers: one lenslet takes the spot beside
 * its own, 6 px off): the GPU rejects the same spot as the CPU and gives its coefficients, with
 * the rejection and without it. */
static void test_outliers(void **state)
{
    (void)state;
    const uint64_t seed = 0xab01, index = 9u * 100000u + 10u;
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    const int32_t nl = ep.sh.geom.nx * ep.sh.geom.ny;
    double *rx = malloc((size_t)nl * sizeof(double)), *ry = malloc((size_t)nl * sizeof(double));
    assert_true(rx && ry);
    {
        sw_shsim_params sh = ep.sh;
        sh.pupil.a_um = sh.pupil.b_um = 0.0;
        sh.pupil.cu_um = sh.pupil.cv_um = 0.0;
        sh.pupil.obscuration = 0.0;
        sw_shsim *sim = NULL;
        assert_int_equal(sw_shsim_create(cpu, &sh, &sim), SW_OK);
        sw_image rf = alloc_host(sh.width, sh.height, SW_PIX_F32);
        assert_int_equal(sw_shsim_run(sim, &rf, 0), SW_OK);
        sw_shsim_destroy(sim);
        sw_image ref = detect_u8(&rf, seed + 7);
        sw_image_free(&rf);
        if (sw_aberrometry_reference(cpu, &ep.sh.geom, &ref, rx, ry, NULL) != SW_OK)
            fail_msg("sw_aberrometry_reference: %s", sw_context_error(cpu));
        sw_image_free(&ref);
    }
    sw_ocular_population pop;
    if (sw_ocular_population_load(cpu, NULL, 6.0, &pop) != SW_OK)
        fail_msg("population: %s", sw_context_error(cpu));
    sw_ocular_options opt;
    sw_ocular_options_default(&opt);
    opt.pupil_mm = 5.12;
    opt.max_order = 6;
    opt.total_rms_um = 5.0;
    double coef[28];
    if (sw_ocular_draw(cpu, &pop, seed, index, &opt, coef, 28) != SW_OK)
        fail_msg("sw_ocular_draw: %s", sw_context_error(cpu));
    sw_ocular_population_free(&pop);
    ep.eyes[0].coef_um = coef;
    ep.eyes[0].count = 28;
    ep.seed = seed + 1000003ull * (index + 1);
    sw_image e = alloc_host(ep.sh.width, ep.sh.height, SW_PIX_F32);
    if (sw_eyesim_render(cpu, &ep, &e, NULL) != SW_OK)
        fail_msg("sw_eyesim_render: %s", sw_context_error(cpu));
    sw_image f = detect_u8(&e, ep.seed ^ 0x5eedull);
    sw_image_free(&e);
    sw_aberrometry_params p;
    sw_aberrometry_params_default(&p, ep.sh.width, ep.sh.height, SW_PIX_U8, &ep.sh.geom);
    p.ref_x = rx;
    p.ref_y = ry;
    p.streams = 1;
    p.fit_radius_px = ep.eyes[0].diameter_px / 2.0;
    p.magnification = ep.eyes[0].diameter_px * ep.sh.geom.pixel_um / (1000.0 * ep.eyes[0].pupil_mm);
    sw_aberrometry_result r;
    both("5 um eye, outliers rejected", &p, &f, nl, &r);
    double ss = 0.0;
    for (int j = 3; j < 28; j++)
        ss += (r.eye[0].coef_um[j] - coef[j]) * (r.eye[0].coef_um[j] - coef[j]);
    print_message("5 um eye: GPU RMSE %.4f um, %d rejected\n", sqrt(ss), r.eye[0].outliers);
    assert_true(r.eye[0].valid && sqrt(ss) < 0.05);
    assert_int_equal(r.eye[0].outliers, 1);
    p.outlier_sigma = 0.0;
    both("5 um eye, no rejection", &p, &f, nl, &r);
    assert_int_equal(r.eye[0].outliers, 0);
    sw_image_free(&f);
    free(rx);
    free(ry);
}

/* run_batch with 1, 2 and 3 streams against frame-by-frame runs, and timing. */
static void test_batch(void **state)
{
    (void)state;
    enum { N = 5 };
    scene sc;
    scene_init(&sc, 1);
    sw_image frames[N];
    const sw_image *fp[N];
    for (int k = 0; k < N; k++) {
        sc.coef[0][4] = 0.5 + 0.4 * k;
        sc.coef[0][7] = 0.1 * (k - 2);
        frames[k] = render(&sc, SW_PIX_U8, k % 2, 1, 100 + (uint64_t)k);
        fp[k] = &frames[k];
    }
    sw_aberrometry_params p;
    scene_params(&sc, SW_PIX_U8, &p);
    sw_aberrometry_plan *one = make_plan(gpu, &p);
    sw_aberrometry_result ref[N], out[N];
    for (int k = 0; k < N; k++)
        run(one, gpu, &frames[k], &ref[k]);
    spots sref = get_spots(one, gpu, sc.nl);
    for (int k = 0; k < N; k++)
        assert_true(ref[k].eye[0].valid);

    for (int streams = 1; streams <= 3; streams++) {
        p.streams = streams;
        sw_aberrometry_plan *plan = make_plan(gpu, &p);
        for (int pass = 0; pass < 2; pass++) { /* the first pass without graphs, then with */
            memset(out, 0xab, sizeof out);
            if (sw_aberrometry_run_batch(plan, fp, N, out) != SW_OK)
                fail_msg("run_batch: %s", sw_context_error(gpu));
            for (int k = 0; k < N; k++) {
                char what[96];
                snprintf(what, sizeof what, "%d streams, pass %d, frame %d", streams, pass, k);
                compare_results(what, &ref[k], &out[k], 0.0, 0.0);
            }
            spots s = get_spots(plan, gpu, sc.nl);
            compare_spots("run_batch's last frame", &sref, &s, sc.nl, 0.0);
            free_spots(&s);
        }
        sw_aberrometry_destroy(plan);
    }

    /* timing: four stage times, the same result; off again: -1 */
    double us[SW_AB_STAGES];
    sw_aberrometry_enable_timing(one, 1);
    for (int k = 0; k < 2; k++) {
        sw_aberrometry_result r;
        run(one, gpu, &frames[k], &r);
        compare_results("timing on", &ref[k], &r, 0.0, 0.0);
        sw_aberrometry_stage_us(one, us);
        for (int s = 0; s < SW_AB_STAGES; s++)
            if (!(us[s] >= 0.0))
                fail_msg("timing on, frame %d: stage %d time %g", k, s, us[s]);
    }
    sw_aberrometry_enable_timing(one, 0);
    sw_aberrometry_result r;
    run(one, gpu, &frames[2], &r);
    compare_results("timing off", &ref[2], &r, 0.0, 0.0);
    sw_aberrometry_stage_us(one, us);
    for (int s = 0; s < SW_AB_STAGES; s++)
        assert_true(us[s] == -1.0);

    free_spots(&sref);
    sw_aberrometry_destroy(one);
    for (int k = 0; k < N; k++)
        sw_image_free(&frames[k]);
    scene_free(&sc);
}

/* The same frame from device memory (pitched), pinned and plain host memory. */
static void test_frame_memory(void **state)
{
    (void)state;
    scene sc;
    scene_init(&sc, 1);
    sw_image host = render(&sc, SW_PIX_U8, 1, 1, 7);
    sw_image dev, pinned;
    if (sw_image_alloc_device(gpu, host.width, host.height, host.type, &dev) != SW_OK ||
        sw_image_copy(gpu, &host, &dev) != SW_OK ||
        sw_image_alloc(gpu, host.width, host.height, host.type, &pinned) != SW_OK ||
        sw_image_copy(gpu, &host, &pinned) != SW_OK)
        fail_msg("frame copies: %s", sw_context_error(gpu));
    assert_int_equal(dev.memory, SW_MEM_DEVICE);
    sw_aberrometry_params p;
    scene_params(&sc, SW_PIX_U8, &p);
    sw_aberrometry_plan *plan = make_plan(gpu, &p);
    sw_aberrometry_result rh, rd, rp;
    run(plan, gpu, &host, &rh);
    spots sh = get_spots(plan, gpu, sc.nl);
    run(plan, gpu, &dev, &rd);
    spots sd = get_spots(plan, gpu, sc.nl);
    run(plan, gpu, &pinned, &rp);
    compare_results("device frame", &rh, &rd, 0.0, 0.0);
    compare_spots("device frame", &sh, &sd, sc.nl, 0.0);
    compare_results("pinned frame", &rh, &rp, 0.0, 0.0);
    assert_true(rh.eye[0].valid);
    free_spots(&sh);
    free_spots(&sd);
    sw_aberrometry_destroy(plan);
    sw_image_free(&dev);
    sw_image_free(&pinned);
    sw_image_free(&host);
    scene_free(&sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_monocular),    cmocka_unit_test(test_binocular),
        cmocka_unit_test(test_options),      cmocka_unit_test(test_strong),
        cmocka_unit_test(test_raise_guard),  cmocka_unit_test(test_outliers),
        cmocka_unit_test(test_failures),     cmocka_unit_test(test_batch),
        cmocka_unit_test(test_frame_memory),
    };
    /* SW_TEST_FILTER=test_raise_guard runs one test (e.g. under compute-sanitizer racecheck,
     * where the whole group takes longer than a device call). */
    const char *filter = getenv("SW_TEST_FILTER");
    if (filter && *filter)
        cmocka_set_test_filter(filter);
    return cmocka_run_group_tests(tests, setup, teardown);
}
