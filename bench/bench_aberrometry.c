/*
 * bench_aberrometry: the whole ocular aberrometer (aberrometry.h: pupil tracking, centroid
 * search, Zernike fit, refraction) on synthetic eyes, with seed 001's two protocols.
 *
 * --accuracy (seed 001 Sec. 4.1 and 4.3). The seed's test set: sim_eye.h's default eye (640 x
 * 640 pixels, 20 x 20 lenslets of 32 px, ~250 spots, a 5.12 mm pupil of 576 px), aberrations
 * drawn from the population (sw_ocular_population of the 6.0 mm statistics, sw_ocular_draw with
 * pupil_mm 5.12, max_order 6 and total_rms_um = the level: orders 2..6 scaled to that RMS, tilts
 * 0) for the levels 0.5, 1.0, ..., 6.0 um, --images N per level (default 100), the artefacts of
 * sw_eye_artefacts_default (retinal glow, brightness map, corneal reflection, white noise), then
 * the detector: shot noise and 8-bit ADC at GAIN_E_PER_ADU = 1.5 e- per ADU, chosen so that the
 * spots do not saturate (a spot of 2000 e- and sigma 1.18 px peaks at ~215 e-, up to ~300 e- on
 * the brightest part of the +-30 % brightness map with the glow: ~200 ADU; the corneal
 * reflection, 600 e- at its peak, still saturates, as in the seed's images). The program prints
 * how many spot peaks reached 255 after all. The reference: the same SH geometry and detector
 * with a flat wavefront through every lenslet (sh.pupil.a_um = 0) and no eye artefacts.
 * For each algorithm, with the seed's settings: PAPYCS with the dynamic mesh (aberrometry.h
 * defaults: 4 stages from preliminary order 3, mesh check 0.25 pitch) and the discarding stage; the
 * baselines as published, CoM and Reichenbach, with the static mesh and no discarding; fit radius
 * 288 px (the eye's circle), magnification 576 px x 5.5 um / 5.12 mm, orders 1..6. Per algorithm
 * and level: pct_rmse_lt_1      % of the images whose RMSE of the orders 2..6 coefficients (j
 * = 3..27) against the truth is below 1 um (an image without a result counts as above); seed Fig.
 * 12's bars rmse_3_5_um        mean over those images of the RMSE of the orders 3..5 (j = 6..20),
 * Fig. 12's lines rmse_2_6_um        the same over the orders 2..6 rms_measured_um    mean measured
 * RMS of orders 2..6 over the images with a result (Fig. 11) centroids_1px      mean number per
 * image of the eye's spots found within 1 px of the truth (the simulator's x_px, y_px per lenslet),
 * Fig. 13's bars centroid_error_px  their mean error, Fig. 13's lines Stability (seed Fig. 16): one
 * static eye (population draw, 1 um RMS), 100 frames (--quick: 10) that differ only in the
 * detector's noise seed: mean and standard deviation of the defocus coefficient c(2,0) per
 * algorithm (the seed: sd 0.0011 um for PAPYCS, 0.0037 um for Reichenbach, on a real artificial
 * eye).
 *
 * --speed (seed 001 Sec. 4.2). Frames of 2560 x 2560 with 250, 500, 1100 and 2000 spots, and of
 * 640, 1280 and 2560 with 250 spots. Each frame: one eye whose pupil is 0.9 of the frame, the
 * pitch chosen so that ~N lenslets lie wholly inside the pupil (the lenslets the aberrometer
 * uses), the 640 x 640 test eye's look scaled to it (spot sigma and flux with the pitch / 32 px,
 * glow edge and reflection with the frame / 640), a 1 um population aberration; u8 frames in
 * pinned memory (CUDA), a pool of 4 distinct frames (other aberrations, artefacts and noise)
 * rotated. Cases (the "bench" field; config "<size> <spots> <algorithm>"):
 *   aberrometry_gpu_batch  sw_aberrometry_run_batch of 16 frames from pinned host memory, 2
 *                          streams (throughput in frames/s, the copy in included)
 *   aberrometry_gpu_run    sw_aberrometry_run of one frame (latency: median, p99)
 *   aberrometry_cpu_run    sw_aberrometry_run on a CPU context (OpenMP; at most 10 reps)
 * then one JSON line per configuration and algorithm with the per-stage device times
 * (sw_aberrometry_stage_us, the median of 20 timed runs: copy in + pupil, the dynamic
 * mesh's stages (searches + preliminary fits), final search + discarding, final fit + copy out) and
 * the GPU-over-CPU speed-up of run. The seed's numbers (GTX 980, 2018): > 100 frames/s at 2560 x
 * 2560 with up to 2000 spots; overall speed-up 47x (PAPYCS, 2560 x 2560, 250 spots), 103x (2000
 * spots).
 *
 * Options (besides the harness' --backend, --reps, --quick, --json-only, ...): --accuracy,
 * --speed (default: both), --images N, --algorithm papycs|com|reichenbach (default: all three).
 * --quick: 2 images at 1.0 and 4.0 um, 10 stability frames, and the 640 x 640 speed case only.
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG           "bench_aberrometry"
#define GAIN_E_PER_ADU 1.5
#define SEED_ACC       0xab01ull
#define SEED_SPEED     0xab02ull
#define POOL           4
#define BATCH          16
#define N_ALG          3
#define ORDER          6
#define TERMS          28 /* sw_zernike_count(6) */
#define EYE_PX         576.0
#define EYE_MM         5.12
#define MAX_LEVELS     12

/* ---------------------------------------------------------------- options */

typedef struct prog_opts {
    int accuracy, speed;
    int images;        /* per level */
    int alg_mask;      /* bit a: algorithm a */
    double levels[12]; /* --levels: RMS levels (um) instead of 0.5, 1.0, ..., 6.0 */
    int nlevels;
    double outlier_sigma; /* --outlier-sigma (negative: the default) */
    sw_bench_options b;   /* the harness' */
} prog_opts;

/* --outlier-sigma for the speed plans too (negative: the library's default) */
static double speed_outlier_sigma = -1.0;

static const char extra_help[] =
    "Protocols (Mompean et al. 2019 Sec. 4; default: both):\n"
    "  --accuracy               accuracy on synthetic eyes of known aberration (Sec. 4.3)\n"
    "  --speed                  throughput, latency, stage times, GPU vs CPU (Sec. 4.2)\n"
    "  --images N               accuracy: images per RMS level (default 100; --quick: 2)\n"
    "  --levels L1,L2,...       accuracy: these RMS levels in um (at most 12) instead of\n"
    "                           0.5, 1.0, ..., 6.0 (e.g. 8,10,12 for highly aberrated eyes)\n"
    "  --algorithm A            papycs, com or reichenbach (default: all three)\n"
    "  --outlier-sigma K        the final fit's outlier rejection (aberrometry.h step 5;\n"
    "                           default: the library's, 5; 0: none), both protocols\n";

/* Takes this program's own options out of argv (the harness refuses what it does not know).
 * Returns SW_BENCH_CONTINUE or an exit code. */
static int parse_own(int *argc, char **argv, prog_opts *o)
{
    int n = 1;
    o->images = -1;
    o->outlier_sigma = -1.0;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--accuracy") == 0) {
            o->accuracy = 1;
        } else if (strcmp(a, "--speed") == 0) {
            o->speed = 1;
        } else if (strcmp(a, "--outlier-sigma") == 0) {
            char *end = NULL;
            const char *v = i + 1 < *argc ? argv[++i] : "";
            o->outlier_sigma = strtod(v, &end);
            if (end == v || *end || !(o->outlier_sigma >= 0.0 && o->outlier_sigma < 1e6)) {
                fprintf(stderr,
                        "%s: --outlier-sigma: '%s' is not a number >= 0 (see '%s --help')\n", PROG,
                        v, PROG);
                return 2;
            }
            speed_outlier_sigma = o->outlier_sigma;
        } else if (strcmp(a, "--levels") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "%s: --levels needs a value (see '%s --help')\n", PROG, PROG);
                return 2;
            }
            const char *v = argv[++i];
            o->nlevels = 0;
            for (const char *q = v; *q;) {
                char *end = NULL;
                double x = strtod(q, &end);
                if (end == q || !(x > 0 && x <= 50) || o->nlevels == 12 || (*end && *end != ',')) {
                    fprintf(stderr,
                            "%s: --levels: '%s' is not up to 12 RMS values in (0, 50] um (see "
                            "'%s --help')\n",
                            PROG, v, PROG);
                    return 2;
                }
                o->levels[o->nlevels++] = x;
                q = *end ? end + 1 : end;
            }
        } else if (strcmp(a, "--images") == 0 || strcmp(a, "--algorithm") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "%s: %s needs a value (see '%s --help')\n", PROG, a, PROG);
                return 2;
            }
            const char *v = argv[++i];
            if (a[2] == 'i') {
                char *end = NULL;
                long k = strtol(v, &end, 10);
                if (end == v || *end || k < 1 || k > 100000) {
                    fprintf(stderr,
                            "%s: --images: '%s' is not a whole number in 1..100000 (see "
                            "'%s --help')\n",
                            PROG, v, PROG);
                    return 2;
                }
                o->images = (int)k;
            } else {
                sw_search_algorithm alg;
                if (sw_search_algorithm_parse(v, &alg) != SW_OK) {
                    fprintf(stderr,
                            "%s: --algorithm: '%s' is not papycs, com or reichenbach (see '%s "
                            "--help')\n",
                            PROG, v, PROG);
                    return 2;
                }
                o->alg_mask |= 1 << (int)alg;
            }
        } else {
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    argv[n] = NULL;
    if (!o->accuracy && !o->speed)
        o->accuracy = o->speed = 1;
    if (!o->alg_mask)
        o->alg_mask = (1 << N_ALG) - 1;
    return SW_BENCH_CONTINUE;
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    const char *m = sw_context_error(ctx);
    fprintf(stderr, "%s: %s: %s\n", PROG, what, m && m[0] ? m : sw_status_string(st));
    return 1;
}

/* The seed's settings per algorithm: PAPYCS with the dynamic mesh and discarding; the baselines
 * (CoM, Reichenbach) with the static mesh and no discarding. */
static void algorithm_params(sw_aberrometry_params *p, sw_search_algorithm a)
{
    p->algorithm = a;
    p->discard = a == SW_SEARCH_PAPYCS;
    if (a != SW_SEARCH_PAPYCS)
        p->prelim_order = 0;
}

/* Applies the detector (shot noise, GAIN_E_PER_ADU, u8) to electrons into u8 (same size). */
static sw_status detect(sw_context *ctx, const sw_image *electrons, uint64_t seed, sw_image *u8)
{
    sw_detector d;
    sw_detector_default(&d);
    d.shot_noise = 1;
    d.gain_e_per_adu = GAIN_E_PER_ADU;
    d.out_type = SW_PIX_U8;
    d.seed = seed;
    return sw_detector_apply(ctx, &d, electrons, u8);
}

/* The reference frame of an eye simulation's SH geometry: a flat wavefront through every lenslet
 * (sh.pupil.a_um = 0), no eye artefacts, the same detector (another noise seed). */
static sw_status make_reference(sw_context *ctx, const sw_eyesim_params *ep, uint64_t seed,
                                sw_image *u8)
{
    sw_shsim_params sh = ep->sh;
    sh.pupil.a_um = sh.pupil.b_um = 0.0;
    sh.pupil.cu_um = sh.pupil.cv_um = 0.0;
    sh.pupil.obscuration = 0.0;
    sw_shsim *plan = NULL;
    sw_image e = {0};
    sw_status st = sw_shsim_create(ctx, &sh, &plan);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, sh.width, sh.height, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_shsim_run(plan, &e, 0);
    if (st == SW_OK)
        st = detect(ctx, &e, seed, u8);
    sw_image_free(&e);
    sw_shsim_destroy(plan);
    return st;
}

/* ---------------------------------------------------------------- accuracy */

typedef struct acc_stats {
    int images, valid, good;
    double sum_rmse35, sum_rmse26; /* over the good images */
    double sum_rms;                /* measured RMS, over the valid images */
    double sum_within;             /* centroids within 1 px, over all images */
    double sum_err;                /* their errors */
    int64_t n_err;
    int rx_ok;       /* valid images whose M, J0, J45 are all within 0.05 D of the truth's */
    double rx_worst; /* the largest |dM|, |dJ0|, |dJ45| over the valid images, dioptres */
} acc_stats;

/* sqrt(sum_{j = j0}^{j1 - 1} (a_j - b_j)^2) */
static double rmse(const double *a, const double *b, int j0, int j1)
{
    double s = 0.0;
    for (int j = j0; j < j1; j++)
        s += (a[j] - b[j]) * (a[j] - b[j]);
    return sqrt(s);
}

/* Adds one image's result of one algorithm to st. x, y, status, eye: the plan's last spots. */
static void add_accuracy(sw_context *ctx, acc_stats *st, const sw_aberrometry_eye *e,
                         const double *truth_coef, const sw_sh_truth *truth, const double *x,
                         const double *y, const uint8_t *status, const uint8_t *eye)
{
    st->images++;
    if (e->valid) {
        const double r26 = rmse(e->coef_um, truth_coef, 3, TERMS);
        st->valid++;
        /* issue 22: the second-order refraction (the default, ANSI Z80.28 power vector) against
         * the truth's over the same pupil */
        sw_refraction t;
        if (sw_zernike_refraction(ctx, truth_coef, TERMS, e->pupil_mm, 0, 0.0, &t) == SW_OK) {
            const double d =
                fmax(fabs(e->rx.M - t.M), fmax(fabs(e->rx.J0 - t.J0), fabs(e->rx.J45 - t.J45)));
            st->rx_ok += d <= 0.05;
            st->rx_worst = fmax(st->rx_worst, d);
        }
        st->sum_rms += sw_zernike_rms(e->coef_um, TERMS, 3);
        if (r26 < 1.0) {
            st->good++;
            st->sum_rmse26 += r26;
            st->sum_rmse35 += rmse(e->coef_um, truth_coef, 6, 21);
        }
    }
    const int64_t nl = (int64_t)truth->nx * truth->ny;
    int within = 0;
    for (int64_t l = 0; l < nl; l++) {
        if (status[l] != SW_SPOT_OK || eye[l] != 1 || !isfinite(truth->x_px[l]))
            continue;
        const double d = hypot(x[l] - truth->x_px[l], y[l] - truth->y_px[l]);
        if (d < 1.0) {
            within++;
            st->sum_err += d;
            st->n_err++;
        }
    }
    st->sum_within += within;
}

typedef struct acc_ctx {
    sw_context *ctx;
    const prog_opts *o;
    char device[256];
    sw_eyesim_params ep;
    sw_sh_geometry geom;
    sw_aberrometry_plan *plan[N_ALG];
    double *x, *y; /* nl each */
    uint8_t *status, *eye;
    int64_t peaks, saturated; /* spot peaks at 255 */
} acc_ctx;

static void print_line_start(const acc_ctx *a, const char *bench, const char *config)
{
    printf("{\"bench\":");
    sw_json_write_string(stdout, bench);
    printf(",\"config\":");
    sw_json_write_string(stdout, config);
    printf(",\"backend\":\"%s\",\"device\":", sw_backend_string(sw_context_backend(a->ctx)));
    sw_json_write_string(stdout, a->device);
}

/* Counts the truth spot peaks (the pixel nearest each lit lenslet's spot) at 255. */
static void count_saturation(acc_ctx *a, const sw_image *u8, const sw_sh_truth *t)
{
    for (int64_t l = 0; l < (int64_t)t->nx * t->ny; l++) {
        if (!isfinite(t->x_px[l]) || t->illum[l] < 1.0)
            continue;
        long ix = lround(t->x_px[l]), iy = lround(t->y_px[l]);
        if (ix < 0 || iy < 0 || ix >= u8->width || iy >= u8->height)
            continue;
        a->peaks++;
        a->saturated += ((const uint8_t *)sw_image_row(u8, (int32_t)iy))[ix] == 255;
    }
}

/* One eye image of the test set: coefficients drawn at the RMS level, rendered with the default
 * artefacts, through the detector. coef: TERMS truth coefficients; truth filled. */
static sw_status make_eye(acc_ctx *a, const sw_ocular_population *pop, double level, uint64_t index,
                          double *coef, sw_image *e, sw_image *u8, sw_eyesim_truth *truth)
{
    memset(truth, 0, sizeof *truth); /* the callers free it on every path */
    sw_ocular_options opt;
    sw_ocular_options_default(&opt);
    opt.pupil_mm = EYE_MM;
    opt.max_order = ORDER;
    opt.total_rms_um = level;
    sw_status st = sw_ocular_draw(a->ctx, pop, SEED_ACC, index, &opt, coef, TERMS);
    if (st != SW_OK)
        return st;
    sw_eyesim_params p = a->ep;
    p.eyes[0].coef_um = coef;
    p.eyes[0].count = TERMS;
    p.seed = SEED_ACC + 1000003ull * (index + 1);
    memset(truth, 0, sizeof *truth);
    st = sw_eyesim_render(a->ctx, &p, e, truth);
    if (st == SW_OK)
        st = detect(a->ctx, e, p.seed ^ 0x5eedull, u8);
    return st;
}

static int accuracy(const prog_opts *o, sw_context *ctx)
{
    static const double quick_levels[] = {1.0, 4.0};
    double levels[MAX_LEVELS];
    int nlev = 0;
    if (o->nlevels > 0) {
        for (int i = 0; i < o->nlevels; i++)
            levels[nlev++] = o->levels[i];
    } else if (o->b.quick) {
        for (int i = 0; i < 2; i++)
            levels[nlev++] = quick_levels[i];
    } else {
        for (int i = 1; i <= MAX_LEVELS; i++)
            levels[nlev++] = 0.5 * i;
    }
    const int images = o->images > 0 ? o->images : (o->b.quick ? 2 : 100);
    const int stab_frames = o->b.quick ? 10 : 100;

    acc_ctx a;
    memset(&a, 0, sizeof a);
    a.ctx = ctx;
    a.o = o;
    sw_bench_device_name(ctx, a.device, sizeof a.device);
    sw_eyesim_params_default(&a.ep);
    a.geom = a.ep.sh.geom;
    const int32_t w = a.ep.sh.width, h = a.ep.sh.height;
    const int64_t nl = (int64_t)a.geom.nx * a.geom.ny;
    sw_ocular_population pop;
    memset(&pop, 0, sizeof pop);
    sw_image e = {0}, u8 = {0}, ref = {0};
    double *ref_xy = NULL;
    int rc = 0;
    acc_stats *stats = calloc((size_t)N_ALG * MAX_LEVELS, sizeof *stats);
    a.x = malloc(2 * (size_t)nl * sizeof(double));
    a.status = malloc(2 * (size_t)nl);
    ref_xy = malloc(2 * (size_t)nl * sizeof(double));
    if (!stats || !a.x || !a.status || !ref_xy) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        rc = 1;
        goto done;
    }
    a.y = a.x + nl;
    a.eye = a.status + nl;

    sw_status st = sw_ocular_population_load(ctx, NULL, 6.0, &pop);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, w, h, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, w, h, SW_PIX_U8, &u8);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, w, h, SW_PIX_U8, &ref);
    if (st == SW_OK)
        st = make_reference(ctx, &a.ep, SEED_ACC + 7, &ref);
    int32_t found = 0;
    if (st == SW_OK)
        st = sw_aberrometry_reference(ctx, &a.geom, &ref, ref_xy, ref_xy + nl, &found);
    for (int alg = 0; alg < N_ALG && st == SW_OK; alg++) {
        if (!(o->alg_mask & (1 << alg)))
            continue;
        sw_aberrometry_params p;
        sw_aberrometry_params_default(&p, w, h, SW_PIX_U8, &a.geom);
        p.ref_x = ref_xy;
        p.ref_y = ref_xy + nl;
        p.order = ORDER;
        p.fit_radius_px = 0.5 * EYE_PX;
        p.magnification = EYE_PX * a.geom.pixel_um / (1000.0 * EYE_MM);
        if (o->outlier_sigma >= 0.0)
            p.outlier_sigma = o->outlier_sigma;
        algorithm_params(&p, (sw_search_algorithm)alg);
        st = sw_aberrometry_create(ctx, &p, &a.plan[alg]);
    }
    if (st != SW_OK) {
        rc = fail(ctx, "accuracy setup", st);
        goto done;
    }
    if (!o->b.json_only)
        fprintf(stderr,
                "%s: accuracy: %d images per level, %d levels, %d reference spots of %lld; gain "
                "%.2f e-/ADU\n",
                PROG, images, nlev, (int)found, (long long)nl, GAIN_E_PER_ADU);

    /* The test set: each image is made once and measured by every algorithm. */
    double coef[TERMS];
    for (int lv = 0; lv < nlev && rc == 0; lv++) {
        for (int i = 0; i < images && rc == 0; i++) {
            sw_eyesim_truth truth;
            st = make_eye(&a, &pop, levels[lv], (uint64_t)lv * 100000u + (uint64_t)i, coef, &e, &u8,
                          &truth);
            if (st != SW_OK) {
                sw_eyesim_truth_free(&truth);
                rc = fail(ctx, "making an eye", st);
                break;
            }
            count_saturation(&a, &u8, &truth.eye[0].sh);
            for (int alg = 0; alg < N_ALG && rc == 0; alg++) {
                if (!a.plan[alg])
                    continue;
                sw_aberrometry_result r;
                st = sw_aberrometry_run(a.plan[alg], &u8, &r);
                if (st == SW_OK)
                    st = sw_aberrometry_spots(a.plan[alg], a.x, a.y, a.status, a.eye, NULL, NULL);
                if (st != SW_OK) {
                    rc = fail(ctx, "sw_aberrometry_run", st);
                    break;
                }
                add_accuracy(ctx, &stats[alg * MAX_LEVELS + lv], &r.eye[0], coef, &truth.eye[0].sh,
                             a.x, a.y, a.status, a.eye);
            }
            sw_eyesim_truth_free(&truth);
        }
    }
    if (rc != 0)
        goto done;

    for (int alg = 0; alg < N_ALG; alg++) {
        if (!a.plan[alg])
            continue;
        for (int lv = 0; lv < nlev; lv++) {
            const acc_stats *s = &stats[alg * MAX_LEVELS + lv];
            char config[64];
            snprintf(config, sizeof config, "%s rms %.1f um",
                     sw_search_algorithm_string((sw_search_algorithm)alg), levels[lv]);
            print_line_start(&a, "aberrometry_accuracy", config);
            printf(",\"algorithm\":\"%s\",\"rms_um\":%.3f,\"images\":%d,\"valid\":%d,"
                   "\"pct_rmse_lt_1\":%.2f,",
                   sw_search_algorithm_string((sw_search_algorithm)alg), levels[lv], s->images,
                   s->valid, 100.0 * s->good / (s->images ? s->images : 1));
            if (s->good)
                printf("\"rmse_3_5_um\":%.5f,\"rmse_2_6_um\":%.5f,", s->sum_rmse35 / s->good,
                       s->sum_rmse26 / s->good);
            else
                printf("\"rmse_3_5_um\":null,\"rmse_2_6_um\":null,");
            if (s->valid)
                printf("\"rms_measured_um\":%.5f,", s->sum_rms / s->valid);
            else
                printf("\"rms_measured_um\":null,");
            printf("\"centroids_1px\":%.2f,", s->sum_within / (s->images ? s->images : 1));
            printf("\"pct_rx_within_0_05_d\":%.2f,",
                   100.0 * s->rx_ok / (s->images ? s->images : 1));
            if (s->valid)
                printf("\"rx_worst_d\":%.5f,", s->rx_worst);
            else
                printf("\"rx_worst_d\":null,");
            if (s->n_err)
                printf("\"centroid_error_px\":%.5f}\n", s->sum_err / (double)s->n_err);
            else
                printf("\"centroid_error_px\":null}\n");
        }
    }
    fflush(stdout);
    if (!o->b.json_only) {
        fprintf(stderr,
                "\n%s: accuracy (seed Fig. 12, 13): %% of images with RMSE(orders 2-6) < 1 um; "
                "mean RMSE of orders 3-5 and 2-6 over them; spots within 1 px of the truth per "
                "image and their mean error; %% of images whose second-order refraction (M, J0, "
                "J45) is within 0.05 D of the truth's, and the largest error (D)\n",
                PROG);
        fprintf(stderr, "%-12s %6s %8s %10s %10s %10s %10s %10s %8s %8s\n", "algorithm", "rms_um",
                "%<1um", "rmse35_um", "rmse26_um", "meas_rms", "spots<1px", "err_px", "%rx.05D",
                "rx_max");
        for (int alg = 0; alg < N_ALG; alg++) {
            if (!a.plan[alg])
                continue;
            for (int lv = 0; lv < nlev; lv++) {
                const acc_stats *s = &stats[alg * MAX_LEVELS + lv];
                const double n = s->images ? s->images : 1;
                fprintf(
                    stderr, "%-12s %6.1f %8.1f %10.4f %10.4f %10.4f %10.1f %10.4f %8.1f %8.4f\n",
                    sw_search_algorithm_string((sw_search_algorithm)alg), levels[lv],
                    100.0 * s->good / n, s->good ? s->sum_rmse35 / s->good : NAN,
                    s->good ? s->sum_rmse26 / s->good : NAN, s->valid ? s->sum_rms / s->valid : NAN,
                    s->sum_within / n, s->n_err ? s->sum_err / (double)s->n_err : NAN,
                    100.0 * s->rx_ok / n, s->valid ? s->rx_worst : NAN);
            }
        }
        fprintf(stderr,
                "%s: spot peaks at 255 (8-bit saturation, gain %.2f e-/ADU): %lld of %lld\n", PROG,
                GAIN_E_PER_ADU, (long long)a.saturated, (long long)a.peaks);
        fprintf(
            stderr,
            "Mompean et al. 2019 (Fig. 13): PAPYCS ~0.18 px mean error, 200 -> 165 spots within 1 "
            "px from 0.5 to 6 um; Reichenbach about twice the error\n");
    }

    /* Stability (seed Fig. 16): one static eye, frames differing only in the noise seed. */
    {
        sw_eyesim_truth truth;
        st = make_eye(&a, &pop, 1.0, 999999u, coef, &e, &u8, &truth);
        sw_eyesim_truth_free(&truth);
        if (st != SW_OK) {
            rc = fail(ctx, "making the static eye", st);
            goto done;
        }
        double sum[N_ALG] = {0}, sum2[N_ALG] = {0};
        int nv[N_ALG] = {0};
        for (int k = 0; k < stab_frames && st == SW_OK; k++) {
            st = detect(ctx, &e, SEED_ACC + 0x51ab00ull + (uint64_t)k, &u8);
            for (int alg = 0; alg < N_ALG && st == SW_OK; alg++) {
                if (!a.plan[alg])
                    continue;
                sw_aberrometry_result r;
                st = sw_aberrometry_run(a.plan[alg], &u8, &r);
                if (st == SW_OK && r.eye[0].valid) {
                    const double c = r.eye[0].coef_um[4]; /* c(2,0), OSA j = 4 */
                    sum[alg] += c;
                    sum2[alg] += c * c;
                    nv[alg]++;
                }
            }
        }
        if (st != SW_OK) {
            rc = fail(ctx, "stability run", st);
            goto done;
        }
        for (int alg = 0; alg < N_ALG; alg++) {
            if (!a.plan[alg])
                continue;
            const double mean = nv[alg] ? sum[alg] / nv[alg] : NAN;
            const double var =
                nv[alg] > 1 ? (sum2[alg] - nv[alg] * mean * mean) / (nv[alg] - 1) : NAN;
            const double sd = sqrt(var > 0 ? var : 0.0);
            const char *name = sw_search_algorithm_string((sw_search_algorithm)alg);
            print_line_start(&a, "aberrometry_stability", name);
            printf(",\"algorithm\":\"%s\",\"frames\":%d,\"valid\":%d,\"defocus_true_um\":%.6f,",
                   name, stab_frames, nv[alg], coef[4]);
            if (nv[alg] > 1)
                printf("\"defocus_mean_um\":%.6f,\"defocus_sd_um\":%.6f}\n", mean, sd);
            else
                printf("\"defocus_mean_um\":null,\"defocus_sd_um\":null}\n");
            if (!o->b.json_only)
                fprintf(stderr,
                        "%s: stability (Fig. 16) %-12s %d/%d frames valid: c(2,0) mean %.5f um "
                        "(true %.5f), sd %.5f um\n",
                        PROG, name, nv[alg], stab_frames, mean, coef[4], sd);
        }
        fflush(stdout);
    }

done:
    for (int alg = 0; alg < N_ALG; alg++)
        sw_aberrometry_destroy(a.plan[alg]);
    sw_ocular_population_free(&pop);
    sw_image_free(&e);
    sw_image_free(&u8);
    sw_image_free(&ref);
    free(ref_xy);
    free(stats);
    free(a.x);
    free(a.status);
    return rc;
}

/* ---------------------------------------------------------------- speed */

/* Lenslets of a grid of pitch p (centred on an n x n frame) wholly inside the circle of radius R
 * about the frame's centre. */
static int64_t lenslets_inside(int32_t n, double p, double R, sw_sh_geometry *g)
{
    sw_sh_geometry_default(g);
    g->pitch_px = p;
    g->nx = g->ny = (int32_t)floor(n / p);
    g->x0 = g->y0 = floor(0.5 * (n - p * g->nx));
    const double c = 0.5 * n - 0.5;
    int64_t k = 0;
    for (int32_t iy = 0; iy < g->ny; iy++)
        for (int32_t ix = 0; ix < g->nx; ix++) {
            double x, y;
            sw_sh_reference(g, ix, iy, &x, &y);
            const double dx = fabs(x - c) + 0.5 * p, dy = fabs(y - c) + 0.5 * p;
            k += dx * dx + dy * dy <= R * R;
        }
    return k;
}

/* The pitch giving ~spots lenslets inside the pupil (diameter 0.9 n): bisection on the pitch
 * (the count falls as the pitch grows). */
static void speed_geometry(int32_t n, int32_t spots, sw_sh_geometry *g)
{
    const double R = 0.45 * n;
    double lo = 4.0, hi = 0.9 * n;
    for (int it = 0; it < 60; it++) {
        const double mid = 0.5 * (lo + hi);
        if (lenslets_inside(n, mid, R, g) > spots)
            lo = mid;
        else
            hi = mid;
    }
    const int64_t a = lenslets_inside(n, lo, R, g), b = lenslets_inside(n, hi, R, g);
    lenslets_inside(n, llabs(a - spots) < llabs(b - spots) ? lo : hi, R, g);
}

typedef struct speed_pool {
    int32_t n, spots;
    sw_sh_geometry geom;
    int64_t inside;
    sw_image frame[POOL]; /* u8, pinned on CUDA */
    sw_image ref;
    double *ref_xy;
    double magnification;
} speed_pool;

static void pool_free(speed_pool *f)
{
    for (int i = 0; i < POOL; i++)
        sw_image_free(&f->frame[i]);
    sw_image_free(&f->ref);
    free(f->ref_xy);
}

/* The frames of one configuration, made on ctx (pinned on CUDA). */
static int make_pool(sw_context *ctx, int32_t n, int32_t spots, speed_pool *f)
{
    memset(f, 0, sizeof *f);
    f->n = n;
    f->spots = spots;
    speed_geometry(n, spots, &f->geom);
    f->inside = lenslets_inside(n, f->geom.pitch_px, 0.45 * n, &f->geom);
    const double k = f->geom.pitch_px / 32.0, s = n / 640.0;
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    const double sigma0 = 0.42 * ep.sh.wavelength_um * ep.sh.geom.focal_mm * 1000.0 /
                          (sw_sh_lenslet_um(&ep.sh.geom) * ep.sh.geom.pixel_um);
    ep.sh.width = ep.sh.height = n;
    ep.sh.geom = f->geom;
    ep.sh.sigma_px = sigma0 * k;
    ep.sh.flux_e *= k * k;
    ep.art.glow_edge_px *= s;
    ep.art.reflection_sigma_px *= s;
    ep.eyes[0].cx_px = ep.eyes[0].cy_px = 0.5 * n - 0.5;
    ep.eyes[0].diameter_px = 0.9 * n;
    ep.eyes[0].pupil_mm = EYE_MM;
    f->magnification = 0.9 * n * f->geom.pixel_um / (1000.0 * EYE_MM);
    const int64_t nl = (int64_t)f->geom.nx * f->geom.ny;
    f->ref_xy = malloc(2 * (size_t)nl * sizeof(double));
    if (!f->ref_xy) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return 1;
    }
    sw_ocular_population pop;
    sw_image e = {0};
    sw_status st = sw_ocular_population_load(ctx, NULL, 6.0, &pop);
    if (st == SW_OK)
        st = sw_image_alloc(ctx, n, n, SW_PIX_F32, &e);
    double coef[TERMS];
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        sw_ocular_options opt;
        sw_ocular_options_default(&opt);
        opt.pupil_mm = EYE_MM;
        opt.max_order = ORDER;
        opt.total_rms_um = 1.0;
        st = sw_ocular_draw(ctx, &pop, SEED_SPEED, (uint64_t)i, &opt, coef, TERMS);
        ep.eyes[0].coef_um = coef;
        ep.eyes[0].count = TERMS;
        ep.seed = SEED_SPEED + 31u * (uint64_t)(i + 1);
        if (st == SW_OK)
            st = sw_eyesim_render(ctx, &ep, &e, NULL);
        if (st == SW_OK)
            st = sw_image_alloc(ctx, n, n, SW_PIX_U8, &f->frame[i]);
        if (st == SW_OK)
            st = detect(ctx, &e, ep.seed + 1, &f->frame[i]);
    }
    if (st == SW_OK)
        st = sw_image_alloc(ctx, n, n, SW_PIX_U8, &f->ref);
    if (st == SW_OK)
        st = make_reference(ctx, &ep, SEED_SPEED + 99, &f->ref);
    if (st == SW_OK)
        st = sw_aberrometry_reference(ctx, &f->geom, &f->ref, f->ref_xy, f->ref_xy + nl, NULL);
    sw_image_free(&e);
    sw_ocular_population_free(&pop);
    if (st != SW_OK)
        return fail(ctx, "making the frames", st);
    return 0;
}

typedef struct speed_job {
    sw_aberrometry_plan *plan;
    const speed_pool *f;
    const sw_image *batch[BATCH];
    sw_aberrometry_result res[BATCH];
    int64_t eyes, valid;
} speed_job;

static sw_status run_one(void *user, int sample, double *measured_us)
{
    speed_job *j = user;
    (void)measured_us;
    sw_status st = sw_aberrometry_run(j->plan, &j->f->frame[sample % POOL], &j->res[0]);
    j->eyes++;
    j->valid += st == SW_OK && j->res[0].eye[0].valid;
    return st;
}

static sw_status run_batch(void *user, int sample, double *measured_us)
{
    speed_job *j = user;
    (void)measured_us;
    for (int i = 0; i < BATCH; i++)
        j->batch[i] = &j->f->frame[(sample + i) % POOL];
    sw_status st = sw_aberrometry_run_batch(j->plan, j->batch, BATCH, j->res);
    for (int i = 0; i < BATCH; i++) {
        j->eyes++;
        j->valid += st == SW_OK && j->res[i].eye[0].valid;
    }
    return st;
}

static sw_status make_speed_plan(sw_context *ctx, const speed_pool *f, sw_search_algorithm alg,
                                 sw_aberrometry_plan **out)
{
    const int64_t nl = (int64_t)f->geom.nx * f->geom.ny;
    sw_aberrometry_params p;
    sw_aberrometry_params_default(&p, f->n, f->n, SW_PIX_U8, &f->geom);
    p.ref_x = f->ref_xy;
    p.ref_y = f->ref_xy + nl;
    p.order = ORDER;
    p.magnification = f->magnification;
    if (speed_outlier_sigma >= 0.0)
        p.outlier_sigma = speed_outlier_sigma;
    algorithm_params(&p, alg);
    return sw_aberrometry_create(ctx, &p, out);
}

/* The median of each stage over `runs` timed runs. */
static sw_status stage_times(sw_aberrometry_plan *plan, const speed_pool *f, int runs,
                             double med[SW_AB_STAGES])
{
    double *t = malloc((size_t)runs * SW_AB_STAGES * sizeof *t);
    if (!t)
        return SW_ENOMEM;
    sw_aberrometry_enable_timing(plan, 1);
    sw_status st = SW_OK;
    for (int r = 0; r < runs && st == SW_OK; r++) {
        sw_aberrometry_result res;
        double us[SW_AB_STAGES];
        st = sw_aberrometry_run(plan, &f->frame[r % POOL], &res);
        sw_aberrometry_stage_us(plan, us);
        for (int s = 0; s < SW_AB_STAGES; s++)
            t[s * runs + r] = us[s];
    }
    sw_aberrometry_enable_timing(plan, 0);
    for (int s = 0; s < SW_AB_STAGES && st == SW_OK; s++) {
        sw_bench_result b;
        sw_bench_stats(t + s * runs, runs, &b);
        med[s] = b.median_us;
    }
    free(t);
    return st;
}

static int speed_case(const prog_opts *o, sw_context *gpu, sw_context *cpu, int32_t n,
                      int32_t spots)
{
    speed_pool f;
    if (make_pool(gpu ? gpu : cpu, n, spots, &f) != 0) {
        pool_free(&f);
        return 1;
    }
    char device[256] = "";
    sw_bench_device_name(gpu ? gpu : cpu, device, sizeof device);
    if (!o->b.json_only)
        fprintf(stderr,
                "%s: %dx%d, %d spots asked: pitch %.3f px, grid %dx%d, %lld lenslets "
                "wholly inside the pupil\n",
                PROG, n, n, spots, f.geom.pitch_px, f.geom.nx, f.geom.ny, (long long)f.inside);
    int rc = 0;
    for (int alg = 0; alg < N_ALG && rc == 0; alg++) {
        if (!(o->alg_mask & (1 << alg)))
            continue;
        const char *name = sw_search_algorithm_string((sw_search_algorithm)alg);
        char config[96];
        snprintf(config, sizeof config, "%d %d %s", n, spots, name);
        sw_bench_result rg = {0}, rcpu = {0};
        double stages[SW_AB_STAGES] = {-1, -1, -1, -1};
        speed_job j;
        if (gpu) {
            memset(&j, 0, sizeof j);
            j.f = &f;
            sw_status st = make_speed_plan(gpu, &f, (sw_search_algorithm)alg, &j.plan);
            if (st != SW_OK) {
                rc = fail(gpu, "sw_aberrometry_create", st);
                break;
            }
            sw_bench_case cb = {
                "aberrometry_gpu_batch", config, gpu, run_batch, &j, 0, BATCH, "frames"};
            sw_bench_case cr = {"aberrometry_gpu_run", config, gpu, run_one, &j, 0, 1, "frames"};
            if (sw_bench_run(&o->b, &cb, NULL) != SW_OK || sw_bench_run(&o->b, &cr, &rg) != SW_OK)
                rc = 1;
            if (rc == 0 && (st = stage_times(j.plan, &f, o->b.quick ? 5 : 20, stages)) != SW_OK)
                rc = fail(gpu, "stage times", st);
            if (rc == 0 && j.valid < j.eyes && !o->b.json_only)
                fprintf(stderr,
                        "%s: %s: warning: %lld of %lld GPU runs gave no result for the "
                        "eye\n",
                        PROG, config, (long long)(j.eyes - j.valid), (long long)j.eyes);
            sw_aberrometry_destroy(j.plan);
        }
        if (rc == 0 && cpu) {
            memset(&j, 0, sizeof j);
            j.f = &f;
            sw_bench_options oc = o->b;
            if (oc.reps > 10)
                oc.reps = 10;
            sw_status st = make_speed_plan(cpu, &f, (sw_search_algorithm)alg, &j.plan);
            if (st != SW_OK) {
                rc = fail(cpu, "sw_aberrometry_create (CPU)", st);
                break;
            }
            sw_bench_case cc = {"aberrometry_cpu_run", config, cpu, run_one, &j, 0, 1, "frames"};
            if (sw_bench_run(&oc, &cc, &rcpu) != SW_OK)
                rc = 1;
            if (rc == 0 && j.valid < j.eyes && !o->b.json_only)
                fprintf(stderr,
                        "%s: %s: warning: %lld of %lld CPU runs gave no result for the "
                        "eye\n",
                        PROG, config, (long long)(j.eyes - j.valid), (long long)j.eyes);
            sw_aberrometry_destroy(j.plan);
        }
        if (rc == 0 && gpu) {
            printf("{\"bench\":\"aberrometry_stages\",\"config\":");
            sw_json_write_string(stdout, config);
            printf(",\"backend\":\"cuda\",\"device\":");
            sw_json_write_string(stdout, device);
            printf(",\"spots_inside\":%lld,\"pitch_px\":%.4f,\"stage_us\":[%.3f,%.3f,%.3f,%.3f],"
                   "\"stages\":[\"copy in + pupil\",\"mesh stages\",\"final search + "
                   "discard\",\"fit + copy out\"],\"run_median_us\":%.3f",
                   (long long)f.inside, f.geom.pitch_px, stages[0], stages[1], stages[2], stages[3],
                   rg.median_us);
            if (cpu && rcpu.median_us > 0)
                printf(",\"cpu_median_us\":%.3f,\"speedup\":%.2f", rcpu.median_us,
                       rcpu.median_us / rg.median_us);
            printf("}\n");
            fflush(stdout);
            if (!o->b.json_only)
                fprintf(stderr,
                        "%s: %s: stages %.1f / %.1f / %.1f / %.1f us (copy+pupil / mesh stages / "
                        "final search + discard / fit + copy out)%s",
                        PROG, config, stages[0], stages[1], stages[2], stages[3],
                        cpu && rcpu.median_us > 0 ? "" : "\n");
            if (!o->b.json_only && cpu && rcpu.median_us > 0)
                fprintf(stderr, "; GPU speed-up over the CPU %.1fx\n",
                        rcpu.median_us / rg.median_us);
        }
    }
    pool_free(&f);
    return rc;
}

static int speed(const prog_opts *o, sw_context *gpu, sw_context *cpu)
{
    static const int32_t cfg[][2] = {{640, 250},  {1280, 250},  {2560, 250},
                                     {2560, 500}, {2560, 1100}, {2560, 2000}};
    int rc = 0;
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0] && rc == 0; c++) {
        if (o->b.quick && cfg[c][0] != 640)
            continue;
        rc = speed_case(o, gpu, cpu, cfg[c][0], cfg[c][1]);
    }
    sw_bench_finish(&o->b);
    if (!o->b.json_only)
        fprintf(
            stderr,
            "Mompean et al. 2019 (GTX 980): > 100 frames/s at 2560x2560 up to 2000 spots; overall "
            "speed-up 47x (PAPYCS, 2560, 250 spots), 103x (2000 spots)\n");
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
    sw_context *gpu = NULL, *cpu = NULL;
    if (sw_bench_contexts(&o.b, PROG, o.speed, &gpu, &cpu) != 0)
        return 1;
    rc = 0;
    if (o.accuracy)
        rc = accuracy(&o, gpu ? gpu : cpu);
    if (rc == 0 && o.speed)
        rc = speed(&o, gpu, cpu);
    sw_context_destroy(gpu);
    sw_context_destroy(cpu);
    return rc;
}
