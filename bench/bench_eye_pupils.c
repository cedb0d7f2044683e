/*
 * bench_eye_pupils: how the ocular aberrometer (aberrometry.h) fares with the pupils it tracks
 * instead of the true one, on eyes with and without retinal glow, at lenslet pitches 10 to 40 px
 * (issue 22: "any eye image").
 *
 * Eyes: the test set of bench_aberrometry (Mompean, Aragon, Prieto & Artal 2019, Future Gener.
 * Comput. Syst. 91, 177, Sec. 4.1 and 4.3): 640 x 640 pixels, a 5.12 mm pupil 576 px wide,
 * aberrations drawn from the population of Thibos, Hong, Bradley & Cheng 2002 (J. Opt. Soc. Am.
 * A 19(12), 2329; the 6.0 mm statistics rescaled, orders 2-6 scaled to the RMS level, tilts 0),
 * --images N per level (default 20) at 0.5, 1.0, ..., 6.0 um; the artefacts of
 * sw_eye_artefacts_default (corneal reflection, brightness map, white noise) with the retinal
 * glow (20 e-/px falling off by 30 % at the edge) or without it (glow 0: an artificial eye, a
 * bench, a dim retina); shot noise and an 8-bit ADC at 1.5 e-/ADU. Lenslet pitches 10, 20, 32
 * and 40 px (grids of 64, 32, 20 and 16 lenslets), the lenslets' focal length 3.5 mm x pitch /
 * 32 px (the same f-number: the spots keep their size in pixels and a wavefront moves them by
 * the same fraction of a pitch as in the 32 px design). The reference: the same grid with a flat
 * wavefront through every lenslet.
 * Each image is measured by PAPYCS with the dynamic mesh and discarding (aberrometry.h defaults,
 * magnification 576 px x 5.5 um / 5.12 mm) twice: with the pupil tracked (pupil.h: the glow
 * path, and the spots path where it finds none) and with the true pupil given. Per glow, pitch
 * and level (one JSON line each, bench "eye_pupils_accuracy"):
 *   pct_lt_1_tracked, pct_lt_1_given   % of images whose RMSE of the orders 2-6 coefficients
 *                                      (j = 3..27) against the truth is below 1 um (an image
 *                                      without a result counts as above)
 *   pct_lt_1_glow_only                 the same tracked by the glow path alone (pupil.h
 *                                      spots_fallback 0: the tracker before issue 22)
 *   rmse_tracked_um, rmse_given_um     their mean RMSE over the images with a result
 *   radius_err_pct_mean / _max         |tracked a / true a - 1| over the images whose pupil was
 *                                      found, mean and largest, in %
 *   centre_err_px_mean                 the tracked centre's distance from the truth's
 *   by_glow, by_spots                  images whose pupil the glow path, the spots path found
 * and a summary line per glow and pitch over the levels up to 6 um.
 *
 * Options (besides the harness' --backend, --quick, --json-only, ...): --images N, --pitch P
 * (one pitch; default all four), --glow yes|no (default both), --max-rms R (default 6).
 * --quick: 2 images at 1, 3 and 6 um.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG           "bench_eye_pupils"
#define GAIN_E_PER_ADU 1.5
#define SEED           0x22ee5ull
#define TERMS          28
#define EYE_PX         576.0
#define EYE_MM         5.12
#define MAX_LEVELS     12
#define N_PITCH        4

static const double PITCHES[N_PITCH] = {10.0, 20.0, 32.0, 40.0};

typedef struct prog_opts {
    int images;
    double pitch; /* 0: all */
    int glow;     /* -1 both, 0 without, 1 with */
    double max_rms;
    sw_bench_options b;
} prog_opts;

static const char extra_help[] =
    "Protocol (issue 22; the eyes of bench_aberrometry, with and without retinal glow):\n"
    "  --images N               images per RMS level (default 20; --quick: 2)\n"
    "  --pitch P                one lenslet pitch, px (default: 10, 20, 32 and 40)\n"
    "  --glow yes|no            eyes with or without retinal glow (default: both)\n"
    "  --max-rms R              the largest RMS level, um (default 6)\n";

static int usage(const char *a, const char *v)
{
    fprintf(stderr, "%s: %s: '%s' is not valid (see '%s --help')\n", PROG, a, v ? v : "", PROG);
    return 2;
}

static int parse_own(int *argc, char **argv, prog_opts *o)
{
    int n = 1;
    o->images = -1;
    o->glow = -1;
    o->max_rms = 6.0;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--images") == 0 || strcmp(a, "--pitch") == 0 || strcmp(a, "--glow") == 0 ||
            strcmp(a, "--max-rms") == 0) {
            if (i + 1 >= *argc)
                return usage(a, NULL);
            const char *v = argv[++i];
            char *end = NULL;
            if (strcmp(a, "--images") == 0) {
                long k = strtol(v, &end, 10);
                if (end == v || *end || k < 1 || k > 100000)
                    return usage(a, v);
                o->images = (int)k;
            } else if (strcmp(a, "--pitch") == 0) {
                o->pitch = strtod(v, &end);
                if (end == v || *end || !(o->pitch >= 8.0 && o->pitch <= 64.0))
                    return usage(a, v);
            } else if (strcmp(a, "--max-rms") == 0) {
                o->max_rms = strtod(v, &end);
                if (end == v || *end || !(o->max_rms >= 0.5 && o->max_rms <= 12.0))
                    return usage(a, v);
            } else if (strcmp(v, "yes") == 0) {
                o->glow = 1;
            } else if (strcmp(v, "no") == 0) {
                o->glow = 0;
            } else {
                return usage(a, v);
            }
        } else {
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    argv[n] = NULL;
    return SW_BENCH_CONTINUE;
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    const char *m = sw_context_error(ctx);
    fprintf(stderr, "%s: %s: %s\n", PROG, what, m && m[0] ? m : sw_status_string(st));
    return 1;
}

static sw_status detect(sw_context *ctx, const sw_image *electrons, uint64_t seed, sw_image *u8)
{
    sw_detector d;
    sw_detector_default(&d);
    d.shot_noise = 1;
    d.gain_e_per_adu = GAIN_E_PER_ADU;
    d.out_type = SW_PIX_U8;
    d.seed = seed;
    /* the white noise may make electrons negative; the detector wants them >= 0 */
    for (int32_t y = 0; y < electrons->height; y++) {
        float *row = sw_image_row(electrons, y);
        for (int32_t x = 0; x < electrons->width; x++)
            if (row[x] < 0.0f)
                row[x] = 0.0f;
    }
    return sw_detector_apply(ctx, &d, electrons, u8);
}

typedef struct cell {
    int images, tracked_ok, given_ok, tracked_valid, given_valid, found, by_glow, by_spots;
    int glow_only_ok; /* tracked by the glow path alone (spots_fallback 0: before issue 22) */
    double sum_rmse_t, sum_rmse_g, sum_rerr, max_rerr, sum_cerr;
} cell;

static double rmse(const double *a, const double *b)
{
    double s = 0.0;
    for (int j = 3; j < TERMS; j++)
        s += (a[j] - b[j]) * (a[j] - b[j]);
    return sqrt(s);
}

/* One glow setting and pitch: every level and image, both pupils. */
static int one_setting(const prog_opts *o, sw_context *ctx, const sw_ocular_population *pop,
                       int glow, double pitch, const double *levels, int nlev, int images,
                       const char *device)
{
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    ep.sh.geom.pitch_px = pitch;
    ep.sh.geom.nx = ep.sh.geom.ny = (int32_t)floor(640.0 / pitch);
    ep.sh.geom.focal_mm = 3.5 * pitch / 32.0;
    sw_eye_artefacts_default(&ep.art);
    if (!glow)
        ep.art.glow_e = 0.0;
    const sw_sh_geometry *g = &ep.sh.geom;
    const int64_t nl = (int64_t)g->nx * g->ny;
    sw_image e = {0}, u8 = {0}, ref = {0};
    double *rxy = malloc(2 * (size_t)nl * sizeof(double));
    cell *cells = calloc(MAX_LEVELS, sizeof *cells);
    sw_aberrometry_plan *plan_t = NULL, *plan_g = NULL, *plan_0 = NULL;
    int rc = 0;
    sw_status st = rxy && cells ? SW_OK : SW_ENOMEM;
    if (st == SW_OK)
        st = sw_image_alloc(ctx, 640, 640, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, 640, 640, SW_PIX_U8, &u8);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, 640, 640, SW_PIX_U8, &ref);
    if (st == SW_OK) { /* the reference: every lenslet lit, a flat wavefront */
        sw_shsim_params sh = ep.sh;
        memset(&sh.pupil, 0, sizeof sh.pupil);
        sh.min_illum = 0.0;
        sw_shsim *sim = NULL;
        st = sw_shsim_create(ctx, &sh, &sim);
        if (st == SW_OK)
            st = sw_shsim_run(sim, &e, 0);
        sw_shsim_destroy(sim);
        if (st == SW_OK)
            st = detect(ctx, &e, SEED + 7, &ref);
    }
    int32_t found = 0;
    if (st == SW_OK)
        st = sw_aberrometry_reference(ctx, g, &ref, rxy, rxy + nl, &found);
    sw_aberrometry_params p;
    sw_aberrometry_params_default(&p, 640, 640, SW_PIX_U8, g);
    p.ref_x = rxy;
    p.ref_y = rxy + nl;
    p.magnification = EYE_PX * g->pixel_um / (1000.0 * EYE_MM);
    if (st == SW_OK)
        st = sw_aberrometry_create(ctx, &p, &plan_t);
    p.pupil.spots_fallback = 0;
    if (st == SW_OK)
        st = sw_aberrometry_create(ctx, &p, &plan_0);
    p.pupil.spots_fallback = 1;
    p.pupil.given = 1;
    p.pupil.given_pupil[0] =
        (sw_pupil_shape){ep.eyes[0].cx_px, ep.eyes[0].cy_px, 0.5 * EYE_PX, 0.5 * EYE_PX, 0.0};
    if (st == SW_OK)
        st = sw_aberrometry_create(ctx, &p, &plan_g);
    if (st != SW_OK) {
        rc = fail(ctx, "setup", st);
        goto done;
    }
    double coef[TERMS];
    for (int lv = 0; lv < nlev && rc == 0; lv++) {
        cell *c = &cells[lv];
        for (int i = 0; i < images && rc == 0; i++) {
            const uint64_t index = (uint64_t)lv * 100000u + (uint64_t)i;
            sw_ocular_options opt;
            sw_ocular_options_default(&opt);
            opt.pupil_mm = EYE_MM;
            opt.max_order = 6;
            opt.total_rms_um = levels[lv];
            sw_eyesim_truth truth;
            memset(&truth, 0, sizeof truth);
            st = sw_ocular_draw(ctx, pop, SEED, index, &opt, coef, TERMS);
            sw_eyesim_params q = ep;
            q.eyes[0].coef_um = coef;
            q.eyes[0].count = TERMS;
            q.seed = SEED + 1000003ull * (index + 1);
            if (st == SW_OK)
                st = sw_eyesim_render(ctx, &q, &e, &truth);
            if (st == SW_OK)
                st = detect(ctx, &e, q.seed ^ 0x5eedull, &u8);
            sw_aberrometry_result rt, rg, r0;
            if (st == SW_OK)
                st = sw_aberrometry_run(plan_t, &u8, &rt);
            if (st == SW_OK)
                st = sw_aberrometry_run(plan_0, &u8, &r0);
            if (st == SW_OK)
                st = sw_aberrometry_run(plan_g, &u8, &rg);
            if (st != SW_OK) {
                sw_eyesim_truth_free(&truth);
                rc = fail(ctx, "an eye", st);
                break;
            }
            const sw_eye_truth *t = &truth.eye[0];
            const sw_aberrometry_eye *et = &rt.eye[0], *eg = &rg.eye[0];
            c->images++;
            if (et->pupil.valid) {
                const double re = fabs(et->pupil.a_px / t->a_px - 1.0);
                c->found++;
                c->sum_rerr += re;
                c->max_rerr = re > c->max_rerr ? re : c->max_rerr;
                c->sum_cerr += hypot(et->pupil.cx_px - t->cx_px, et->pupil.cy_px - t->cy_px);
                c->by_glow += et->pupil.method == SW_PUPIL_METHOD_GLOW;
                c->by_spots += et->pupil.method == SW_PUPIL_METHOD_SPOTS;
            }
            if (et->valid) {
                const double r = rmse(et->coef_um, coef);
                c->tracked_valid++;
                c->sum_rmse_t += r;
                c->tracked_ok += r < 1.0;
            }
            if (r0.eye[0].valid)
                c->glow_only_ok += rmse(r0.eye[0].coef_um, coef) < 1.0;
            if (eg->valid) {
                const double r = rmse(eg->coef_um, coef);
                c->given_valid++;
                c->sum_rmse_g += r;
                c->given_ok += r < 1.0;
            }
            sw_eyesim_truth_free(&truth);
        }
    }
    if (rc != 0)
        goto done;
    cell all;
    memset(&all, 0, sizeof all);
    for (int lv = 0; lv < nlev; lv++) {
        const cell *c = &cells[lv];
        const double n = c->images ? c->images : 1;
        printf("{\"bench\":\"eye_pupils_accuracy\",\"config\":\"%s glow, pitch %g px, rms %.1f "
               "um\",\"backend\":\"%s\",\"device\":",
               glow ? "with" : "no", pitch, levels[lv], sw_backend_string(sw_context_backend(ctx)));
        sw_json_write_string(stdout, device);
        printf(",\"glow\":%s,\"pitch_px\":%g,\"focal_mm\":%g,\"rms_um\":%.2f,\"images\":%d,"
               "\"pct_lt_1_tracked\":%.1f,\"pct_lt_1_given\":%.1f,\"pct_lt_1_glow_only\":%.1f,",
               glow ? "true" : "false", pitch, g->focal_mm, levels[lv], c->images,
               100.0 * c->tracked_ok / n, 100.0 * c->given_ok / n, 100.0 * c->glow_only_ok / n);
        if (c->tracked_valid)
            printf("\"rmse_tracked_um\":%.4f,", c->sum_rmse_t / c->tracked_valid);
        else
            printf("\"rmse_tracked_um\":null,");
        if (c->given_valid)
            printf("\"rmse_given_um\":%.4f,", c->sum_rmse_g / c->given_valid);
        else
            printf("\"rmse_given_um\":null,");
        if (c->found)
            printf("\"radius_err_pct_mean\":%.3f,\"radius_err_pct_max\":%.3f,"
                   "\"centre_err_px_mean\":%.3f,",
                   100.0 * c->sum_rerr / c->found, 100.0 * c->max_rerr, c->sum_cerr / c->found);
        else
            printf("\"radius_err_pct_mean\":null,\"radius_err_pct_max\":null,"
                   "\"centre_err_px_mean\":null,");
        printf("\"found\":%d,\"by_glow\":%d,\"by_spots\":%d}\n", c->found, c->by_glow, c->by_spots);
        all.images += c->images;
        all.tracked_ok += c->tracked_ok;
        all.given_ok += c->given_ok;
        all.glow_only_ok += c->glow_only_ok;
        all.found += c->found;
        all.by_glow += c->by_glow;
        all.by_spots += c->by_spots;
        all.sum_rerr += c->sum_rerr;
        all.sum_cerr += c->sum_cerr;
        all.max_rerr = c->max_rerr > all.max_rerr ? c->max_rerr : all.max_rerr;
    }
    fflush(stdout);
    if (!o->b.json_only) {
        const double n = all.images ? all.images : 1;
        fprintf(stderr,
                "%-5s glow  pitch %4.0f px  %3d images  <1um tracked %5.1f %%  given %5.1f %%  "
                "glow path only %5.1f %%  radius err mean %.3f %% max %.3f %%  centre %.2f px  "
                "glow/spots %d/%d\n",
                glow ? "with" : "no", pitch, all.images, 100.0 * all.tracked_ok / n,
                100.0 * all.given_ok / n, 100.0 * all.glow_only_ok / n,
                all.found ? 100.0 * all.sum_rerr / all.found : NAN, 100.0 * all.max_rerr,
                all.found ? all.sum_cerr / all.found : NAN, all.by_glow, all.by_spots);
    }
done:
    sw_aberrometry_destroy(plan_t);
    sw_aberrometry_destroy(plan_g);
    sw_aberrometry_destroy(plan_0);
    sw_image_free(&e);
    sw_image_free(&u8);
    sw_image_free(&ref);
    free(rxy);
    free(cells);
    return rc;
}

int main(int argc, char **argv)
{
    prog_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_own(&argc, argv, &o);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    rc = sw_bench_parse_args(argc, argv, PROG, extra_help, &o.b);
    if (rc != SW_BENCH_CONTINUE)
        return rc;
    sw_context *ctx = NULL;
    if (sw_bench_context(&o.b, PROG, &ctx) != 0)
        return 1;
    rc = 0;
    char device[256];
    sw_bench_device_name(ctx, device, sizeof device);
    double levels[MAX_LEVELS];
    int nlev = 0;
    if (o.b.quick) {
        static const double q[3] = {1.0, 3.0, 6.0};
        for (int i = 0; i < 3; i++)
            if (q[i] <= o.max_rms + 1e-9)
                levels[nlev++] = q[i];
    } else {
        for (int i = 1; i <= MAX_LEVELS && 0.5 * i <= o.max_rms + 1e-9; i++)
            levels[nlev++] = 0.5 * i;
    }
    const int images = o.images > 0 ? o.images : (o.b.quick ? 2 : 20);
    sw_ocular_population pop;
    memset(&pop, 0, sizeof pop);
    sw_status st = sw_ocular_population_load(ctx, NULL, 6.0, &pop);
    if (st != SW_OK) {
        rc = fail(ctx, "population", st);
    } else {
        if (!o.b.json_only)
            fprintf(stderr,
                    "%s: %d images per level, levels %.1f .. %.1f um, tracked vs given pupils "
                    "(<1um: RMSE of orders 2-6 below 1 um)\n",
                    PROG, images, levels[0], levels[nlev - 1]);
        for (int gl = 1; gl >= 0 && rc == 0; gl--) {
            if (o.glow >= 0 && o.glow != gl)
                continue;
            for (int k = 0; k < N_PITCH && rc == 0; k++) {
                if (o.pitch > 0 && fabs(o.pitch - PITCHES[k]) > 1e-9)
                    continue;
                rc = one_setting(&o, ctx, &pop, gl, PITCHES[k], levels, nlev, images, device);
            }
            if (o.pitch > 0 && rc == 0 && fabs(o.pitch - 10) > 1e-9 && fabs(o.pitch - 20) > 1e-9 &&
                fabs(o.pitch - 32) > 1e-9 && fabs(o.pitch - 40) > 1e-9)
                rc = one_setting(&o, ctx, &pop, gl, o.pitch, levels, nlev, images, device);
        }
    }
    sw_ocular_population_free(&pop);
    sw_context_destroy(ctx);
    return rc;
}
