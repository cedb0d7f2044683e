/*
 * spotwave demo: a tour of what the build can do, on a built-in example image.
 *
 * The demo is a list of steps (demo_steps[] below) run in order on one shared state; each step
 * prints its lines of the report and returns 0, or -1 with a message. Later stages append their
 * steps (simulate a Shack-Hartmann frame, find spots, centroid, reconstruct, ...) to the list and
 * their fields to demo_state; the driver, the report and the clean-up stay as they are.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "outfiles.h"

#include "spotwave/sim.h"
#include "spotwave/sim_eye.h"
#include "spotwave/zernike_fit.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SUB               "demo"
#define DEMO_DEFAULT_OUT  "./spotwave-demo"
#define DEMO_DEFAULT_SIZE 512
#define DEMO_DEFAULT_SEED 42
#define DEMO_TIMING_REPS  7 /* timings are the median of this many calls, after one warm-up */
#define DEMO_STARS        300
#define DEMO_SIGMA        1.5
#define DEMO_SKY_E        100.0
#define DEMO_READ_E       5.0
#define DEMO_ZERO_POINT   2e5 /* e- of a magnitude-0 star */

void sw_cmd_demo_help(FILE *out)
{
    fprintf(out,
            "Usage: spotwave [GLOBAL OPTIONS] demo [--out DIR] [--size WxH] [--seed S] [--steps "
            "LIST]\n"
            "\n"
            "Simulates an example star field (%d random stars, Gaussian PSF, sky, shot and\n"
            "read noise; f32; truth in demo_truth.csv), computes its statistics, converts it to "
            "u16 (scaled so its range\n"
            "fills 0..65535), writes demo.fits (f32), demo_u16.pgm and demo.png (viridis with a\n"
            "scale bar) into DIR, reads the FITS and PGM files back and checks they are\n"
            "identical, and reports what it did with the timings of the conversion and the\n"
            "statistics on the backend in use (median of %d calls). Then finds the stars' spots\n"
            "(DIALS dispersion extended: Winter et al. 2018, Acta Cryst. D74, 85; in\n"
            "demo_spots.csv) and matches them to the truth. Then a binocular synthetic-eye\n"
            "frame, SH frames through the centroid stage and the Zernike fit, and the ocular\n"
            "aberrometer (Mompean et al. 2019, Future Gener. Comput. Syst. 91, 177: pupils,\n"
            "PAPYCS, Zernike fit, refraction) on two population eyes against their truth, with a\n"
            "wavefront map per eye (demo_aberrometry_eye1.png, demo_aberrometry_eye2.png).\n"
            "Last, wavefront reconstruction (Brunner et al. 2018, J. Opt. Soc. Am. A 35(6),\n"
            "859): a 64x64 Shack-Hartmann array under a von Karman screen\n"
            "(r0 0.15 m, L0 25 m), its exact lenslet-mean slopes through D-SABRE (8x8\n"
            "partitions, H-PME, on the backend in use), global SABRE and the Fried\n"
            "reconstructor, each with its relative RMS error against the screen; the D-SABRE\n"
            "wavefront in demo_sabre.fits (um). And an adaptive-optics loop (the same paper,\n"
            "Sec. 4): a 16x16 SH array on a 6 m telescope under moving turbulence, D-SABRE with\n"
            "the distributed DM projection and an integrator, closed against open loop\n"
            "(residual, fitting error, long-exposure Strehl in J).\n"
            "\n"
            "Options:\n"
            "  -o, --out DIR     output directory, created if missing (default %s)\n"
            "  --size WxH        image size in pixels (default %dx%d)\n"
            "  --seed S          star and noise seed, 64-bit (default %d)\n"
            "  --steps LIST      which stages to run after the star field, comma-separated: eyes,\n"
            "                    find, centroid, fit, aberrometry, sabre, loop (default all)\n"
            "  -h, --help        print this help and exit\n",
            DEMO_STARS, DEMO_TIMING_REPS, DEMO_DEFAULT_OUT, DEMO_DEFAULT_SIZE, DEMO_DEFAULT_SIZE,
            DEMO_DEFAULT_SEED);
}

/* ------------------------------------------------------------------ state shared by the steps */

typedef struct demo_state {
    /* inputs */
    const sw_cli_globals *g;
    sw_context *ctx;
    const char *outdir;
    int32_t width, height;
    uint64_t seed;
    /* products */
    char path_fits[4096];
    char path_pgm[4096];
    char path_png[4096];
    char path_truth[4096];
    sw_stars stars;     /* the example's stars (truth)   */
    sw_detector det;    /* the example's detector model  */
    sw_spot_list spots; /* the spots found in it         */
    sw_image image;     /* the example image, f32, host */
    sw_image image_u16; /* the same scaled to u16, host */
    sw_image_stats stats;
    double scale, offset;
    size_t clipped;
    /* failure */
    char error[2048];
} demo_state;

static int demo_fail(demo_state *s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static int demo_fail(demo_state *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->error, sizeof s->error, fmt, ap);
    va_end(ap);
    return -1;
}

/* The library's message for the last failure on the context (or the status' name). */
static const char *lib_error(const demo_state *s, sw_status st)
{
    const char *m = sw_context_error(s->ctx);
    return (m && *m) ? m : sw_status_string(st);
}

static int join_path(demo_state *s, char *buf, size_t size, const char *name)
{
    int n = snprintf(buf, size, "%s/%s", s->outdir, name);
    if (n < 0 || (size_t)n >= size)
        return demo_fail(s, "output path '%s/%s' is too long", s->outdir, name);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* ------------------------------------------------------------------ the steps */

static int step_backend(demo_state *s)
{
    printf("  backend    %s (requested %s): %s\n", sw_backend_string(sw_context_backend(s->ctx)),
           sw_backend_string(s->g->backend), sw_context_backend_reason(s->ctx));
    if (sw_context_backend(s->ctx) == SW_BACKEND_CUDA) {
        sw_device_info d;
        sw_status st = sw_context_device_info(s->ctx, &d);
        if (st != SW_OK)
            return demo_fail(s, "cannot query the CUDA device: %s", lib_error(s, st));
        printf("  device     %s, %.1f GiB, compute capability %d.%d\n", d.name,
               (double)d.total_memory / (1024.0 * 1024.0 * 1024.0), d.cc_major, d.cc_minor);
    }
    return 0;
}

static int step_outdir(demo_state *s)
{
    if (sw_cli_mkdir_p(s->outdir) != 0)
        return demo_fail(s, "cannot create the output directory '%s': %s", s->outdir,
                         strerror(errno));
    if (join_path(s, s->path_fits, sizeof s->path_fits, "demo.fits") ||
        join_path(s, s->path_pgm, sizeof s->path_pgm, "demo_u16.pgm") ||
        join_path(s, s->path_png, sizeof s->path_png, "demo.png") ||
        join_path(s, s->path_truth, sizeof s->path_truth, "demo_truth.csv"))
        return -1;
    return 0;
}

/*
 * The example picture: a smooth background (100 + 40 (1 + sin(3 pi x / W) cos(2 pi y / H)) / 2),
 * DEMO_SPOTS circular Gaussian spots (peak 500..5000, sigma 1.5..4 px, positions from the
 * Philox streams SW_RNG_STREAM_POSITIONS / _MAGNITUDES), and Gaussian noise of variance
 * 25 + signal (read noise 5 plus a shot-noise-like term) from SW_RNG_STREAM_PIXEL_NOISE.
 * Not the simulator stage: just something worth looking at.
 */
/* The example: a star field from the simulator (Li et al. 2012) with the detector model's noise. */
static int step_image(demo_state *s)
{
    const int32_t w = s->width, h = s->height;
    sw_stars stars = {0};
    sw_starsim *plan = NULL;
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = w;
    p.height = h;
    p.sigma = DEMO_SIGMA;
    p.roi_side = 2 * (int32_t)ceil(5.0 * DEMO_SIGMA) + 1;
    p.max_stars = DEMO_STARS;
    sw_detector det;
    sw_detector_default(&det);
    det.sky_e = DEMO_SKY_E;
    det.read_noise_e = DEMO_READ_E;
    det.seed = s->seed;
    det.out_type = SW_PIX_F32;

    sw_status st =
        sw_stars_random(s->ctx, DEMO_STARS, w, h, 0.0, 8.0, DEMO_ZERO_POINT, 0.0, s->seed, &stars);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, w, h, SW_PIX_F32, &s->image);
    if (st == SW_OK)
        st = sw_starsim_create(s->ctx, &p, &plan);
    if (st == SW_OK)
        st = sw_starsim_run(plan, &stars, &s->image);
    double render_us = st == SW_OK ? sw_starsim_render_us(plan) : -1.0;
    sw_starsim_method used = plan ? sw_starsim_method_used(plan) : SW_STARSIM_AUTO;
    if (st == SW_OK)
        st = sw_detector_apply(s->ctx, &det, &s->image, &s->image);
    if (st == SW_OK)
        st = sw_stars_write_truth(s->ctx, s->path_truth, &stars, w, h, NULL);
    sw_starsim_destroy(plan);
    s->stars = stars; /* kept for the find step */
    s->det = det;
    if (st != SW_OK)
        return demo_fail(s, "simulating the example star field failed: %s", lib_error(s, st));
    printf("  simulate   %dx%d star field, seed %llu: %d stars (mag 0-8), Gaussian PSF sigma %.1f "
           "px integrated over pixels, method %s",
           w, h, (unsigned long long)s->seed, DEMO_STARS, DEMO_SIGMA,
           sw_starsim_method_string(used));
    if (render_us >= 0)
        printf(" (%.1f us on the GPU)", render_us);
    printf("\n  detector   sky %.0f e-, shot noise, read noise %.0f e-; truth in %s\n", DEMO_SKY_E,
           DEMO_READ_E, s->path_truth);
    return 0;
}

static int step_stats(demo_state *s)
{
    sw_status st = sw_image_stats_compute(s->ctx, &s->image, &s->stats);
    if (st != SW_OK)
        return demo_fail(s, "statistics of the example image failed: %s", lib_error(s, st));
    const sw_image_stats *t = &s->stats;
    printf("  stats      min %.2f, max %.2f, mean %.3f, stddev %.3f (%lld finite, %lld NaN, "
           "%lld Inf)\n",
           t->min, t->max, t->mean, t->stddev, (long long)t->n_finite, (long long)t->n_nan,
           (long long)t->n_inf);
    if (t->n_finite != (int64_t)s->width * s->height)
        return demo_fail(s, "statistics counted %lld finite pixels in a %dx%d image",
                         (long long)t->n_finite, s->width, s->height);
    return 0;
}

static int step_convert(demo_state *s)
{
    sw_status st = sw_image_alloc(s->ctx, s->width, s->height, SW_PIX_U16, &s->image_u16);
    if (st != SW_OK)
        return demo_fail(s, "cannot allocate the u16 image: %s", lib_error(s, st));
    /* Map [min, max] onto [0, 65535]. */
    double range = s->stats.max - s->stats.min;
    s->scale = range > 0 ? 65535.0 / range : 1.0;
    s->offset = -s->stats.min * s->scale;
    st = sw_image_convert(s->ctx, &s->image, &s->image_u16, s->scale, s->offset, &s->clipped);
    if (st != SW_OK)
        return demo_fail(s, "conversion f32 -> u16 failed: %s", lib_error(s, st));
    printf("  convert    f32 -> u16: out = in * %.6g %c %.6g, %zu pixel%s clipped\n", s->scale,
           s->offset < 0 ? '-' : '+', fabs(s->offset), s->clipped, s->clipped == 1 ? "" : "s");
    return 0;
}

/* Times stats and convert on the images given (host or device): one warm-up, then the median
 * of DEMO_TIMING_REPS calls, each ended by sw_context_synchronize. */
static int time_ops(demo_state *s, const sw_image *f32, sw_image *u16, double *stats_us,
                    double *convert_us)
{
    double t[DEMO_TIMING_REPS];
    sw_image_stats tmp;
    size_t clipped;
    sw_status st;
    for (int i = -1; i < DEMO_TIMING_REPS; i++) {
        double t0 = sw_cli_now();
        st = sw_image_stats_compute(s->ctx, f32, &tmp);
        if (st == SW_OK)
            st = sw_context_synchronize(s->ctx);
        if (st != SW_OK)
            return demo_fail(s, "timing the statistics failed: %s", lib_error(s, st));
        if (i >= 0)
            t[i] = 1e6 * (sw_cli_now() - t0);
    }
    *stats_us = median(t, DEMO_TIMING_REPS);
    for (int i = -1; i < DEMO_TIMING_REPS; i++) {
        double t0 = sw_cli_now();
        st = sw_image_convert(s->ctx, f32, u16, s->scale, s->offset, &clipped);
        if (st == SW_OK)
            st = sw_context_synchronize(s->ctx);
        if (st != SW_OK)
            return demo_fail(s, "timing the conversion failed: %s", lib_error(s, st));
        if (i >= 0)
            t[i] = 1e6 * (sw_cli_now() - t0);
    }
    *convert_us = median(t, DEMO_TIMING_REPS);
    return 0;
}

static int step_timings(demo_state *s)
{
    const char *be = sw_backend_string(sw_context_backend(s->ctx));
    double st_us, cv_us;
    sw_image scratch = {0};
    sw_status st = sw_image_alloc(s->ctx, s->width, s->height, SW_PIX_U16, &scratch);
    if (st != SW_OK)
        return demo_fail(s, "cannot allocate a scratch image: %s", lib_error(s, st));
    int rc = time_ops(s, &s->image, &scratch, &st_us, &cv_us);
    sw_image_free(&scratch);
    if (rc != 0)
        return rc;
    printf("  timings    %s, host images: stats %.1f us, convert f32->u16 %.1f us "
           "(median of %d)\n",
           be, st_us, cv_us, DEMO_TIMING_REPS);
    if (sw_context_backend(s->ctx) != SW_BACKEND_CUDA)
        return 0;

    /* On the GPU also time device-resident images: the kernels without the transfers. */
    sw_image d_f32 = {0}, d_u16 = {0};
    st = sw_image_alloc_device(s->ctx, s->width, s->height, SW_PIX_F32, &d_f32);
    if (st == SW_OK)
        st = sw_image_alloc_device(s->ctx, s->width, s->height, SW_PIX_U16, &d_u16);
    if (st == SW_OK)
        st = sw_image_copy(s->ctx, &s->image, &d_f32);
    if (st != SW_OK) {
        rc = demo_fail(s, "cannot stage the image on the device: %s", lib_error(s, st));
    } else {
        rc = time_ops(s, &d_f32, &d_u16, &st_us, &cv_us);
        if (rc == 0)
            printf("  timings    %s, device images: stats %.1f us, convert f32->u16 %.1f us "
                   "(median of %d)\n",
                   be, st_us, cv_us, DEMO_TIMING_REPS);
    }
    sw_image_free(&d_u16);
    sw_image_free(&d_f32);
    return rc;
}

/* The HISTORY line of the demo's FITS files: what reproduces them (the options that change them,
 * not the command line, so that --out and --threads leave the files identical). */
static void demo_history(sw_cli_hdr *h, const demo_state *s)
{
    sw_cli_hdr_history(h, "spotwave demo --seed %llu --size %dx%d", (unsigned long long)s->seed,
                       (int)s->width, (int)s->height);
}

static int step_write(demo_state *s)
{
    sw_cli_hdr h;
    sw_cli_hdr_init(&h, "adu", "detector counts: electrons / GAIN + BIAS");
    sw_cli_hdr_comment(&h, "spotwave demo: a simulated star field (sim stars' renderer)");
    demo_history(&h, s);
    sw_cli_hdr_u64(&h, "SEED", s->seed, "stars and noise seed (--seed)");
    sw_cli_hdr_int(&h, "NSTARS", DEMO_STARS, "random stars, magnitudes 0..8");
    sw_cli_hdr_num(&h, "SIGMA", DEMO_SIGMA, "[pixel] Gaussian PSF standard deviation");
    sw_cli_hdr_num(&h, "ZEROPT", DEMO_ZERO_POINT, "[electron] flux of a magnitude-0 star");
    sw_cli_hdr_detector(&h, &s->det);
    sw_status st = sw_cli_hdr_write(s->ctx, s->path_fits, &s->image, 1, &h);
    if (st != SW_OK)
        return demo_fail(s, "cannot write %s: %s", s->path_fits, lib_error(s, st));
    printf("  wrote      %s (f32)\n", s->path_fits);

    st = sw_pgm_write(s->ctx, s->path_pgm, &s->image_u16);
    if (st != SW_OK)
        return demo_fail(s, "cannot write %s: %s", s->path_pgm, lib_error(s, st));
    printf("  wrote      %s (u16)\n", s->path_pgm);
    return 0;
}

/* The star field as a picture: an asinh stretch from zscale's lower end to the brightest pixel
 * (faint stars and the sky's noise visible, bright cores not saturated), viridis, a colour bar,
 * and a circle around each spot the find step found. */
static int step_picture(demo_state *s)
{
    const sw_spot_list *l = &s->spots;
    sw_png_marker *m = malloc((size_t)(l->count > 0 ? l->count : 1) * sizeof *m);
    if (!m)
        return demo_fail(s, "out of memory");
    for (int64_t i = 0; i < l->count; i++) {
        m[i].x = l->spots[i].x;
        m[i].y = l->spots[i].y;
        m[i].radius = 3.0 * DEMO_SIGMA + 2.0;
    }
    char title[128];
    snprintf(title, sizeof title, "%d simulated stars; circles: %lld spots found", DEMO_STARS,
             (long long)l->count);
    sw_png_options o;
    sw_png_options_default(&o);
    o.colormap = SW_CMAP_VIRIDIS;
    o.stretch = SW_PNG_ASINH;
    o.scale_bar = 1;
    o.label = "adu (asinh scale)";
    o.title = title;
    o.markers = m;
    o.nmarkers = (int32_t)l->count;
    sw_status st = sw_png_write(s->ctx, s->path_png, &s->image, &o);
    free(m);
    if (st != SW_OK)
        return demo_fail(s, "cannot write %s: %s", s->path_png, lib_error(s, st));
    printf("  wrote      %s (viridis, asinh stretch, scale bar, the spots circled)\n", s->path_png);
    return 0;
}

/* A binocular Hartmann-Shack image of two synthetic eyes (sim_eye.h; Mompean et al. 2019 Fig.
 * 2): aberrations drawn from the Thibos 2002 population at 1.5 um RMS, glow, reflections,
 * brightness map, then the detector; the spots' truth is checked against the pupils. */
static int step_eyes(demo_state *s)
{
    char dir[4096], path[4096];
    sw_status st = sw_ocular_default_dir(s->ctx, dir, sizeof dir);
    sw_ocular_population pop = {0};
    if (st == SW_OK)
        st = sw_ocular_population_load(s->ctx, dir, 6.0, &pop);
    if (st != SW_OK)
        return demo_fail(s, "ocular population: %s", lib_error(s, st));
    double coef[2][66] = {{0}};
    sw_ocular_options o;
    sw_ocular_options_default(&o);
    o.pupil_mm = 5.12;
    o.total_rms_um = 1.5;
    sw_eyesim_params p;
    sw_eyesim_params_default(&p);
    p.sh.width = 1280;
    p.sh.height = 640;
    p.sh.geom.nx = 40;
    p.n_eyes = 2;
    for (int e = 0; e < 2 && st == SW_OK; e++) {
        st = sw_ocular_draw(s->ctx, &pop, s->seed, (uint64_t)e, &o, coef[e], pop.count);
        p.eyes[e].cx_px = 320.0 + 640.0 * e + (e ? -12.0 : 9.0);
        p.eyes[e].cy_px = 319.5 + (e ? 7.0 : -5.0);
        p.eyes[e].diameter_px = 560.0;
        p.eyes[e].coef_um = coef[e];
        p.eyes[e].count = pop.count;
    }
    p.seed = s->seed;
    sw_ocular_population_free(&pop);
    sw_image electrons = {0}, u8 = {0};
    sw_eyesim_truth truth = {0};
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, p.sh.width, p.sh.height, SW_PIX_F32, &electrons);
    double t0 = sw_cli_now();
    if (st == SW_OK)
        st = sw_eyesim_render(s->ctx, &p, &electrons, &truth);
    double ms = (sw_cli_now() - t0) * 1e3;
    sw_detector d;
    sw_detector_default(&d);
    d.out_type = SW_PIX_U8;
    d.gain_e_per_adu = 8.0;
    d.seed = s->seed;
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, p.sh.width, p.sh.height, SW_PIX_U8, &u8);
    if (st == SW_OK)
        st = sw_detector_apply(s->ctx, &d, &electrons, &u8);
    int lit = 0;
    if (st == SW_OK) {
        for (int e = 0; e < 2; e++)
            for (int l = 0; l < truth.eye[e].sh.nx * truth.eye[e].sh.ny; l++)
                lit += truth.eye[e].sh.illum[l] > 0.0;
        printf("  eyes       binocular H-S image %dx%d: %d lit lenslets, 1.5 um RMS per eye, "
               "%.1f ms\n",
               (int)p.sh.width, (int)p.sh.height, lit, ms);
        if (join_path(s, path, sizeof path, "demo_eyes.pgm") != 0)
            st = SW_EINVAL;
        else if ((st = sw_pgm_write(s->ctx, path, &u8)) == SW_OK)
            printf("  wrote      %s (u8, the detector's counts)\n", path);
        sw_png_options po;
        sw_png_options_default(&po);
        po.scale_bar = 1;
        po.stretch = SW_PNG_ASINH; /* the spots beside the bright corneal reflections */
        po.label = "adu (asinh scale)";
        po.title = "two synthetic eyes: a Hartmann-Shack frame";
        if (st == SW_OK && join_path(s, path, sizeof path, "demo_eyes.png") != 0)
            st = SW_EINVAL;
        else if (st == SW_OK && (st = sw_png_write(s->ctx, path, &u8, &po)) == SW_OK)
            printf("  wrote      %s\n", path);
    }
    sw_eyesim_truth_free(&truth);
    sw_image_free(&electrons);
    sw_image_free(&u8);
    if (st != SW_OK)
        return s->error[0] ? -1 : demo_fail(s, "%s", lib_error(s, st));
    if (lit < 200)
        return demo_fail(s, "only %d lenslets lit in the eye image", lit);
    return 0;
}

/* One centroid plan over one frame: RMS error (per axis) against the truth, the time of the run
 * and the path it took. */
static sw_status demo_centroid_once(demo_state *s, const sw_centroid_params *cp,
                                    const sw_image *frame, const sw_sh_truth *truth, double *rms,
                                    double *us, sw_centroid_path *path)
{
    sw_centroid_plan *plan = NULL;
    sw_centroid_result res = {0};
    sw_status st = sw_centroid_create(s->ctx, cp, &plan);
    if (st == SW_OK)
        st = sw_centroid_result_alloc(plan, 1, SW_MEM_HOST, &res);
    double t0 = sw_cli_now();
    if (st == SW_OK)
        st = sw_centroid_run(plan, frame, &res);
    *us = (sw_cli_now() - t0) * 1e6;
    double sum = 0;
    int n = 0;
    for (int32_t l = 0; st == SW_OK && l < truth->nx * truth->ny; l++)
        if (res.valid[l] && isfinite(truth->x_px[l])) {
            double dx = res.x[l] - truth->x_px[l], dy = res.y[l] - truth->y_px[l];
            sum += dx * dx + dy * dy;
            n++;
        }
    *rms = n ? sqrt(sum / (2.0 * n)) : NAN;
    *path = sw_centroid_plan_path(plan);
    sw_centroid_result_free(&res);
    sw_centroid_destroy(plan);
    return st;
}

/* A Shack-Hartmann frame with a known aberration through the centroid stage (Mocci et al.
 * 2020): the centroids against the simulator's truth, noise-free and with detector noise. */
/* Spot finding (Winter et al. 2018) on the example star field: DIALS dispersion extended,
 * spots matched to the simulator's stars. A star counts as findable when its SNR, F / sqrt(F + 4 pi
 * sigma^2 (sky + read^2)), is at least 10 and no other star lies within 15 px (the halo of a
 * magnitude-0 star reaches that far at this sky level, and blended spots are one spot). */
static int step_find(demo_state *s)
{
    sw_find_params p;
    sw_find_params_default(&p, s->width, s->height, SW_PIX_F32);
    /* The demo puts its stars on whatever --size asks for: a small image is all stars, which the
     * strong-fraction guard would refuse as "not a spot pattern". */
    p.max_strong_fraction = 0.0;
    sw_find_plan *plan = NULL;
    sw_spot_list spots = {0};
    char path[4096];
    if (join_path(s, path, sizeof path, "demo_spots.csv") != 0)
        return -1;
    double t0 = sw_cli_now();
    sw_status st = sw_find_create(s->ctx, &p, &plan);
    if (st == SW_OK)
        st = sw_find_run(plan, &s->image, 0, &spots, NULL, NULL);
    double ms = 1e3 * (sw_cli_now() - t0);
    sw_find_destroy(plan);
    if (st != SW_OK) {
        sw_spot_list_free(&spots);
        return demo_fail(s, "%s", lib_error(s, st));
    }
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "frame,x_px,y_px,x_var,y_var,intensity,npix,bbox_x0,bbox_x1,bbox_y0,bbox_y1\n");
        for (int64_t i = 0; i < spots.count; i++) {
            const sw_spot *q = &spots.spots[i];
            fprintf(f, "%lld,%.4f,%.4f,%.6g,%.6g,%.17g,%lld,%d,%d,%d,%d\n", (long long)q->z0, q->x,
                    q->y, q->x_var, q->y_var, q->intensity, (long long)q->npix, q->x0, q->x1, q->y0,
                    q->y1);
        }
    }
    if (!f || fclose(f) != 0) {
        sw_spot_list_free(&spots);
        return demo_fail(s, "cannot write %s", path);
    }
    const sw_stars *t = &s->stars;
    const double noise = DEMO_SKY_E + DEMO_READ_E * DEMO_READ_E;
    int64_t findable = 0, found = 0;
    double err2 = 0.0;
    for (int64_t i = 0; i < t->count; i++) {
        double F = t->flux[i];
        if (F / sqrt(F + 4.0 * M_PI * DEMO_SIGMA * DEMO_SIGMA * noise) < 10.0 || t->x[i] < 5 ||
            t->y[i] < 5 || t->x[i] > s->width - 6 || t->y[i] > s->height - 6)
            continue;
        int crowded = 0;
        for (int64_t k = 0; k < t->count && !crowded; k++)
            crowded = k != i && hypot(t->x[k] - t->x[i], t->y[k] - t->y[i]) < 15.0;
        if (crowded)
            continue;
        findable++;
        double best = INFINITY;
        for (int64_t k = 0; k < spots.count; k++)
            best = fmin(best, hypot(spots.spots[k].x - t->x[i], spots.spots[k].y - t->y[i]));
        if (best < 1.5) {
            found++;
            err2 += best * best;
        }
    }
    printf(
        "  find       dispersion_extended 7x7: %lld spots in %.1f ms; %lld of %lld isolated stars "
        "(15 px) with SNR >= 10 found, centroid RMS error %.3f px; spots in %s\n",
        (long long)spots.count, ms, (long long)found, (long long)findable,
        found ? sqrt(err2 / (double)found) : NAN, path);
    s->spots = spots; /* for the picture */
    if (findable > 0 && (double)found < 0.95 * (double)findable)
        return demo_fail(s, "only %lld of %lld findable stars were found", (long long)found,
                         (long long)findable);
    return 0;
}

static int step_centroid(demo_state *s)
{
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = 512;
    sp.geom.nx = sp.geom.ny = 32;
    sp.geom.pitch_px = 16.0;
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.flux_e = 4e4;
    sp.sigma_px = 1.2; /* spots well inside their 16 px regions: no truncation bias */
    sw_shsim *sim = NULL;
    sw_sh_truth truth = {0};
    sw_image e = {0}, u16 = {0};
    double coef[9] = {0, 0, 0, 0.15, 0.3, -0.2, 0, 0.08, 0}; /* OSA j = 3..8, micrometres */
    double radius = 0.5 * sp.geom.nx * sw_sh_lenslet_um(&sp.geom);
    double rms[2] = {NAN, NAN}, us[2] = {0, 0};
    sw_centroid_path path = SW_CENTROID_AUTO;
    sw_status st = sw_shsim_create(s->ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_shsim_add_zernike(sim, coef, 9, radius);
    if (st == SW_OK)
        st = sw_shsim_truth(sim, &truth);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, sp.width, sp.height, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, sp.width, sp.height, SW_PIX_U16, &u16);
    if (st == SW_OK)
        st = sw_shsim_run(sim, &e, 0);
    sw_centroid_params cp;
    sw_centroid_params_default(&cp);
    cp.geometry = sp.geom;
    cp.width = sp.width;
    cp.height = sp.height;
    cp.type = SW_PIX_U16;
    /* Noise-free: the expected electrons rounded to counts, no conditioning. */
    if (st == SW_OK)
        st = sw_image_convert(s->ctx, &e, &u16, 1.0, 0.0, NULL);
    if (st == SW_OK)
        st = demo_centroid_once(s, &cp, &u16, &truth, &rms[0], &us[0], &path);
    /* Shot and read noise at 1 e-/ADU over a 100 ADU bias; 10% of each lenslet's maximum
     * subtracted. */
    sw_detector d;
    sw_detector_default(&d);
    d.out_type = SW_PIX_U16;
    d.gain_e_per_adu = 1.0;
    d.bias_adu = 100.0;
    d.read_noise_e = 5.0;
    d.seed = s->seed;
    if (st == SW_OK)
        st = sw_detector_apply(s->ctx, &d, &e, &u16);
    cp.threshold_mode = SW_THRESHOLD_SUBTRACT;
    cp.threshold_kind = SW_THRESHOLD_FRACTION;
    cp.threshold = 0.1;
    if (st == SW_OK)
        st = demo_centroid_once(s, &cp, &u16, &truth, &rms[1], &us[1], &path);
    sw_sh_truth_free(&truth);
    sw_shsim_destroy(sim);
    sw_image_free(&e);
    sw_image_free(&u16);
    if (st != SW_OK)
        return demo_fail(s, "%s", lib_error(s, st));
    printf("  centroid   32x32 lenslets of 16 px (%s path): RMS error %.4f px noise-free (%.0f "
           "us), %.4f px with shot + read noise and a 10%% threshold (%.0f us)\n",
           sw_centroid_path_string(path), rms[0], us[0], rms[1], us[1]);
    if (!(rms[0] < 0.01))
        return demo_fail(s, "noise-free centroids are %.4f px RMS from the truth", rms[0]);
    return 0;
}

/* The aberrometry chain on a simulated frame: SH spots of a known wavefront -> centroids and
 * slopes (Mocci et al. 2020) -> Zernike fit (Mompean et al. 2019 Sec. 3.3) -> refraction and a
 * wavefront map (Sec. 3.4), the coefficients checked against those the frame was made from. */
static int step_fit(demo_state *s)
{
    const int32_t nl = 24;
    const double d = 16.0, R = 0.5 * nl * d; /* the pupil fills the lenslet array */
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = (int32_t)(nl * d);
    sp.geom.nx = sp.geom.ny = nl;
    sp.geom.pitch_px = d;
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.sigma_px = 1.2;
    sp.flux_e = 4e4;
    const double R_um = R * sp.geom.pixel_um;
    sp.pupil = sw_pupil_circle(2.0 * R_um);
    double truth[15] = {0, 0, 0, 0.08, 0.35, -0.12, 0.04, -0.05, 0.02, 0, 0, 0, 0.06, 0, 0};
    sw_shsim *sim = NULL;
    sw_image e = {0}, u16 = {0}, map = {0};
    sw_centroid_plan *cplan = NULL;
    sw_centroid_result cres = {0};
    sw_zfit_plan *fplan = NULL;
    sw_zmap_plan *mplan = NULL;
    double coef[15], resid = NAN;
    sw_status st = sw_shsim_create(s->ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_shsim_add_zernike(sim, truth, 15, R_um);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, sp.width, sp.height, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, sp.width, sp.height, SW_PIX_U16, &u16);
    if (st == SW_OK)
        st = sw_shsim_run(sim, &e, 0);
    if (st == SW_OK)
        st = sw_image_convert(s->ctx, &e, &u16, 1.0, 0.0, NULL);
    sw_centroid_params cp;
    sw_centroid_params_default(&cp);
    cp.geometry = sp.geom;
    cp.width = sp.width;
    cp.height = sp.height;
    cp.type = SW_PIX_U16;
    if (st == SW_OK)
        st = sw_centroid_create(s->ctx, &cp, &cplan);
    if (st == SW_OK)
        st = sw_centroid_result_alloc(cplan, 1, SW_MEM_HOST, &cres);
    if (st == SW_OK)
        st = sw_centroid_run(cplan, &u16, &cres);
    sw_zfit_params fp;
    sw_zfit_params_default(&fp);
    fp.geometry = sp.geom;
    fp.pupil_cx_px = fp.pupil_cy_px = R - 0.5; /* the array's centre (pixel-centre frame) */
    fp.pupil_radius_px = R;
    fp.max_order = 4;
    double t0 = sw_cli_now(), us = 0;
    if (st == SW_OK)
        st = sw_zfit_create(s->ctx, &fp, &fplan);
    if (st == SW_OK) {
        t0 = sw_cli_now();
        st = sw_zfit_run(fplan, cres.slopes, cres.valid, 1, SW_MEM_HOST, coef, &resid);
        us = (sw_cli_now() - t0) * 1e6;
    }
    sw_refraction rx = {0};
    if (st == SW_OK)
        st = sw_zernike_refraction(s->ctx, coef, 15, 2e-3 * R_um, 0, 0.0, &rx);
    sw_zmap_params mp;
    sw_zmap_params_default(&mp);
    mp.max_order = 4;
    if (st == SW_OK)
        st = sw_zmap_create(s->ctx, &mp, &mplan);
    if (st == SW_OK)
        st = sw_image_alloc(NULL, mp.size, mp.size, SW_PIX_F32, &map);
    if (st == SW_OK)
        st = sw_zmap_run(mplan, coef, 15, &map);
    char path[4096];
    if (st == SW_OK && join_path(s, path, sizeof path, "demo_wavefront.png") != 0)
        st = SW_EINVAL;
    else if (st == SW_OK)
        st = sw_cli_map_png(s->ctx, path, &map, SW_CLI_UM,
                            "wavefront of the Zernike fit, orders 1-4");
    double worst = 0.0;
    for (int j = 1; st == SW_OK && j < 15; j++)
        worst = fmax(worst, fabs(coef[j] - truth[j]));
    int used = fplan ? sw_zfit_used(fplan) : 0;
    sw_zmap_destroy(mplan);
    sw_zfit_destroy(fplan);
    sw_centroid_result_free(&cres);
    sw_centroid_destroy(cplan);
    sw_shsim_destroy(sim);
    sw_image_free(&e);
    sw_image_free(&u16);
    sw_image_free(&map);
    if (st != SW_OK)
        return s->error[0] ? -1 : demo_fail(s, "%s", lib_error(s, st));
    printf(
        "  fit        %d lenslets -> 14 Zernike terms to order 4 in %.0f us: largest error "
        "%.4f um, residual %.4f px; refraction over %.2f mm: %+.2f D sphere %+.2f D cyl x %.0f\n",
        used, us, worst, resid, 2e-3 * R_um, rx.sphere_d, rx.cyl_d, rx.axis_deg);
    printf("  wrote      %s (wavefront map, um)\n", path);
    if (!(worst < 0.01))
        return demo_fail(s, "the fitted coefficients are %.4f um from the truth", worst);
    return 0;
}

/* The ocular aberrometer (aberrometry.h; Mompean et al. 2019 Sec. 3): a binocular Hartmann-Shack
 * frame of two population eyes (sim_eye.h: orders 2..6 scaled to DEMO_AB_RMS um RMS, the default
 * artefacts of living eyes, shot noise, u8) and its reference frame (the SH simulator with
 * sh.pupil.a_um = 0: every lenslet lit, a flat wavefront) -> reference centroids -> one run of
 * PAPYCS with the dynamic mesh and the discarding stage. Per eye: the pupil found against the
 * simulator's, the spots, the RMSE of the orders 2..6 coefficients against the truth (paper
 * Sec. 4.3: sqrt(sum_j (measured_j - true_j)^2) over j = 3..27), the refraction, a map. */
#define DEMO_AB_RMS      1.0   /* um RMS of the orders 2..6 of each eye              */
#define DEMO_AB_ORDER    6     /* the truth's orders and the fitted ones             */
#define DEMO_AB_TERMS    28    /* sw_zernike_count(6)                                */
#define DEMO_AB_GAIN     1.5   /* e-/ADU: the spots stay below 255 (bench_aberrometry) */
#define DEMO_AB_PUPIL_PX 512.0 /* pupil diameter on the detector, px                 */
#define DEMO_AB_MAX_RMSE 0.1   /* um: a larger error of either eye fails the step    */

/* Shot noise, DEMO_AB_GAIN e-/ADU, 8 bits: electrons -> u8 (as bench_aberrometry's detector). */
static sw_status demo_ab_detect(sw_context *ctx, const sw_image *e, uint64_t seed, sw_image *u8)
{
    sw_detector d;
    sw_detector_default(&d);
    d.shot_noise = 1;
    d.gain_e_per_adu = DEMO_AB_GAIN;
    d.out_type = SW_PIX_U8;
    d.seed = seed;
    return sw_detector_apply(ctx, &d, e, u8);
}

/* sqrt(sum_{j = j0}^{j1 - 1} (a_j - b_j)^2) */
static double demo_rmse(const double *a, const double *b, int j0, int j1)
{
    double sum = 0.0;
    for (int j = j0; j < j1; j++)
        sum += (a[j] - b[j]) * (a[j] - b[j]);
    return sqrt(sum);
}

static int step_aberrometry(demo_state *s)
{
    /* Two eyes on a 1280 x 640 frame under a 40 x 20 grid of 32-pixel lenslets (the paper's
     * 640 x 640 test eye, sim_eye.h's default, twice side by side), slightly off their halves. */
    sw_eyesim_params ep;
    sw_eyesim_params_default(&ep);
    ep.sh.width = 1280;
    ep.sh.geom.nx = 40;
    ep.n_eyes = 2;
    ep.eyes[0].diameter_px = DEMO_AB_PUPIL_PX;
    ep.eyes[0].cx_px = 329.0;
    ep.eyes[0].cy_px = 315.0;
    ep.eyes[1] = ep.eyes[0];
    ep.eyes[1].cx_px = 948.0;
    ep.eyes[1].cy_px = 327.0;
    ep.seed = s->seed + 1; /* other artefacts than the eyes step's */
    const int32_t w = ep.sh.width, h = ep.sh.height;
    const int64_t nl = (int64_t)ep.sh.geom.nx * ep.sh.geom.ny;
    const double eye_mm = ep.eyes[0].pupil_mm;

    double coef[2][DEMO_AB_TERMS];
    char dir[4096];
    sw_ocular_population pop = {0};
    sw_status st = sw_ocular_default_dir(s->ctx, dir, sizeof dir);
    if (st == SW_OK)
        st = sw_ocular_population_load(s->ctx, dir, 6.0, &pop);
    sw_ocular_options o;
    sw_ocular_options_default(&o);
    o.pupil_mm = eye_mm;
    o.max_order = DEMO_AB_ORDER;
    o.total_rms_um = DEMO_AB_RMS;
    for (int e = 0; e < 2 && st == SW_OK; e++) {
        st = sw_ocular_draw(s->ctx, &pop, s->seed, (uint64_t)e, &o, coef[e], DEMO_AB_TERMS);
        ep.eyes[e].coef_um = coef[e];
        ep.eyes[e].count = DEMO_AB_TERMS;
    }
    sw_ocular_population_free(&pop);

    sw_image el = {0}, frame = {0}, ref = {0};
    sw_eyesim_truth truth = {0};
    sw_shsim *rsim = NULL;
    sw_aberrometry_plan *plan = NULL;
    sw_aberrometry_result res;
    memset(&res, 0, sizeof res);
    double *ref_xy = malloc(2 * (size_t)nl * sizeof *ref_xy);
    int32_t ref_found = 0;
    if (!ref_xy) {
        sw_eyesim_truth_free(&truth);
        return demo_fail(s, "out of memory");
    }
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, w, h, SW_PIX_F32, &el);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, w, h, SW_PIX_U8, &frame);
    if (st == SW_OK)
        st = sw_image_alloc(s->ctx, w, h, SW_PIX_U8, &ref);
    /* The eyes' frame. */
    if (st == SW_OK)
        st = sw_eyesim_render(s->ctx, &ep, &el, &truth);
    if (st == SW_OK)
        st = demo_ab_detect(s->ctx, &el, s->seed ^ 0xab01ull, &frame);
    /* The reference frame: the same lenslets and detector, no eye, every lenslet lit. */
    sw_shsim_params rp = ep.sh;
    memset(&rp.pupil, 0, sizeof rp.pupil); /* a_um = 0: no pupil */
    if (st == SW_OK)
        st = sw_shsim_create(s->ctx, &rp, &rsim);
    if (st == SW_OK)
        st = sw_shsim_run(rsim, &el, 0);
    if (st == SW_OK)
        st = demo_ab_detect(s->ctx, &el, s->seed ^ 0xab02ull, &ref);
    if (st == SW_OK)
        st = sw_aberrometry_reference(s->ctx, &ep.sh.geom, &ref, ref_xy, ref_xy + nl, &ref_found);
    /* The plan: the analysis circle of the simulated pupil (radius diameter_px / 2) and the
     * magnification that makes it eye_mm at the eye, so that the measured coefficients are over
     * the truth's circle (as bench_aberrometry does). */
    sw_aberrometry_params ap;
    sw_aberrometry_params_default(&ap, w, h, SW_PIX_U8, &ep.sh.geom);
    ap.ref_x = ref_xy;
    ap.ref_y = ref_xy + nl;
    ap.n_eyes = 2;
    ap.algorithm = SW_SEARCH_PAPYCS;
    ap.order = DEMO_AB_ORDER;
    ap.fit_radius_px = 0.5 * DEMO_AB_PUPIL_PX;
    ap.magnification = DEMO_AB_PUPIL_PX * ep.sh.geom.pixel_um / (1000.0 * eye_mm);
    if (st == SW_OK)
        st = sw_aberrometry_create(s->ctx, &ap, &plan);
    double ms = 0.0;
    if (st == SW_OK) {
        double t0 = sw_cli_now();
        st = sw_aberrometry_run(plan, &frame, &res);
        ms = 1e3 * (sw_cli_now() - t0);
    }
    /* The true refraction: the truth's coefficients through the same formula, over the same
     * pupil (the measured one is over 2 R_px pixel_um / (1000 magnification) = eye_mm). */
    sw_refraction true_rx[2];
    for (int e = 0; e < 2 && st == SW_OK; e++)
        st = sw_zernike_refraction(s->ctx, coef[e], DEMO_AB_TERMS, eye_mm, ap.higher_order_rx,
                                   ap.vertex_mm, &true_rx[e]);
    sw_shsim_destroy(rsim);
    sw_aberrometry_destroy(plan);
    sw_image_free(&el);
    sw_image_free(&frame);
    sw_image_free(&ref);
    free(ref_xy);
    if (st != SW_OK) {
        sw_eyesim_truth_free(&truth);
        return demo_fail(s, "%s", lib_error(s, st));
    }
    printf("  aberrometry binocular %dx%d u8 H-S frame (%.1f e-/ADU), 2 population eyes (orders "
           "2..%d at %.1f um RMS, default artefacts); reference %d of %lld spots; PAPYCS, "
           "dynamic mesh, discarding, orders 1..%d: %.1f ms\n",
           w, h, DEMO_AB_GAIN, DEMO_AB_ORDER, DEMO_AB_RMS, (int)ref_found, (long long)nl,
           DEMO_AB_ORDER, ms);

    /* Per eye: the report and the wavefront map. */
    sw_zmap_params mp;
    sw_zmap_params_default(&mp);
    mp.max_order = DEMO_AB_ORDER;
    sw_zmap_plan *mplan = NULL;
    sw_image map = {0};
    st = sw_zmap_create(s->ctx, &mp, &mplan);
    if (st == SW_OK)
        st = sw_image_alloc(NULL, mp.size, mp.size, SW_PIX_F32, &map);
    double worst = 0.0;
    int bad_eye = -1;
    for (int e = 0; e < 2 && st == SW_OK; e++) {
        const sw_aberrometry_eye *m = &res.eye[e];
        const sw_eye_truth *t = &truth.eye[e];
        const sw_pupil_ellipse *p = &m->pupil;
        if (!m->valid) {
            bad_eye = e;
            break;
        }
        const double err = demo_rmse(m->coef_um, coef[e], 3, DEMO_AB_TERMS);
        worst = fmax(worst, err);
        printf("  eye %d      pupil (%.2f, %.2f) %.1fx%.1f px, true (%.2f, %.2f) %.1fx%.1f px; "
               "spots: %d used (%d central), %d found, %d kept, %d discarded (%d/%d/%d)\n",
               e + 1, p->cx_px, p->cy_px, 2.0 * p->a_px, 2.0 * p->b_px, t->cx_px, t->cy_px,
               2.0 * t->a_px, 2.0 * t->b_px, (int)m->lenslets, (int)m->central, (int)m->found,
               (int)m->kept, (int)(m->discarded[0] + m->discarded[1] + m->discarded[2]),
               (int)m->discarded[0], (int)m->discarded[1], (int)m->discarded[2]);
        printf("  eye %d      orders 2..%d RMSE %.4f um (true RMS %.3f um); refraction over %.2f "
               "mm %+.2f D sphere %+.2f D cyl x %.0f, true %+.2f D sphere %+.2f D cyl x %.0f\n",
               e + 1, DEMO_AB_ORDER, err, sw_zernike_rms(coef[e], DEMO_AB_TERMS, 3), m->pupil_mm,
               m->rx.sphere_d, m->rx.cyl_d, m->rx.axis_deg, true_rx[e].sphere_d, true_rx[e].cyl_d,
               true_rx[e].axis_deg);
        char name[64], path[4096];
        snprintf(name, sizeof name, "demo_aberrometry_eye%d.png", e + 1);
        if (join_path(s, path, sizeof path, name) != 0)
            break;
        st = sw_zmap_run(mplan, m->coef_um, m->terms, &map);
        char title[96];
        snprintf(title, sizeof title, "eye %d, measured: orders 1-%d over %.2f mm", e + 1,
                 DEMO_AB_ORDER, m->pupil_mm);
        if (st == SW_OK)
            st = sw_cli_map_png(s->ctx, path, &map, SW_CLI_UM, title);
        if (st == SW_OK)
            printf("  wrote      %s (eye %d's measured wavefront, um)\n", path, e + 1);
    }
    sw_zmap_destroy(mplan);
    sw_image_free(&map);
    sw_eyesim_truth_free(&truth);
    if (s->error[0])
        return -1;
    if (st != SW_OK)
        return demo_fail(s, "%s", lib_error(s, st));
    if (bad_eye >= 0)
        return demo_fail(s, "eye %d has no result: %s", bad_eye + 1,
                         sw_ab_failure_string(res.eye[bad_eye].failure));
    if (!(worst < DEMO_AB_MAX_RMSE))
        return demo_fail(s,
                         "the measured coefficients are %.4f um (RMSE, orders 2..%d) from the "
                         "truth",
                         worst, DEMO_AB_ORDER);
    return 0;
}

/* D-SABRE (sabre.h; Brunner et al. 2018 Secs. 2, 3 and 5.A) on its open-loop case (Sec. 3.B):
 * a 64 x 64 Shack-Hartmann array on a 25 m telescope (lenslets of 0.390625 m) under one von
 * Karman screen (r0 0.15 m at 0.55 um, L0 25 m; sw_phase_screen, 8 samples per lenslet, the
 * DEMO_SB_MAP^2 samples over the array in the middle and DEMO_SB_PAD more on every side). The
 * slopes are the exact lenslet-mean gradients of the screen, noise-free: the SH simulator's truth
 * with the GEOMETRIC model and one pupil sample per screen sample (the screen's spacing scaled to
 * the lenslet plane, where a lenslet is DEMO_SB_LENSLET_UM: the OPD is the same), no image drawn.
 * D-SABRE (8 x 8 partitions, overlap 1, H-PME, zero padding) on the context's backend, global
 * SABRE and the Fried reconstructor (host) are each compared to the screen over its samples inside
 * the array (lattice positions x = -1/2 + (i + 1/2) / 8): relative RMS error = RMS(estimate -
 * screen) / RMS(screen), both with their mean (the unobservable piston) removed. */
#define DEMO_SB_NL         64                              /* lenslets per side */
#define DEMO_SB_SPL        8                               /* screen samples per lenslet */
#define DEMO_SB_MAP        (DEMO_SB_NL * DEMO_SB_SPL)      /* samples over the array (512) */
#define DEMO_SB_PAD        32                              /* more on every side */
#define DEMO_SB_SCREEN     (DEMO_SB_MAP + 2 * DEMO_SB_PAD) /* 576 */
#define DEMO_SB_LENSLET_M  0.390625                        /* lenslet in the telescope pupil, m */
#define DEMO_SB_R0_M       0.15                            /* Fried parameter at DEMO_SB_WL_UM, m */
#define DEMO_SB_L0_M       25.0                            /* outer scale, m */
#define DEMO_SB_WL_UM      0.55
#define DEMO_SB_PX         8    /* detector pixels per lenslet (no image is drawn) */
#define DEMO_SB_PIXEL_UM   20.0 /* so that a lenslet is 160 um in the lenslet plane */
#define DEMO_SB_LENSLET_UM (DEMO_SB_PX * DEMO_SB_PIXEL_UM)
#define DEMO_SB_K          8    /* D-SABRE partitions per side */
#define DEMO_SB_FRIED_REG  1e-3 /* the Fried reconstructor's Laplacian weight */
#define DEMO_SB_MAX_REL    0.15 /* a larger D-SABRE relative RMS error fails the step */

/* RMS(est - truth) / RMS(truth) over n samples, both with their mean removed. */
static double demo_rel_rms(const double *est, const double *truth, int64_t n)
{
    double se = 0.0, st = 0.0;
    for (int64_t i = 0; i < n; i++) {
        se += est[i];
        st += truth[i];
    }
    const double me = se / (double)n, mt = st / (double)n;
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double t = truth[i] - mt, d = est[i] - me - t;
        num += d * d;
        den += t * t;
    }
    return sqrt(num / den);
}

/* Lattice coordinate of map sample i (lenslet ix spans [ix - 1/2, ix + 1/2)). */
static double demo_sb_x(int32_t i)
{
    return -0.5 + (i + 0.5) / DEMO_SB_SPL;
}

static int step_sabre(demo_state *s)
{
    const int32_t nl = DEMO_SB_NL, nll = nl * nl, nmap = DEMO_SB_MAP;
    const int64_t nsamp = (int64_t)nmap * nmap;
    sw_turbulence turb;
    sw_turbulence_default(&turb);
    turb.r0_m = DEMO_SB_R0_M;
    turb.L0_m = DEMO_SB_L0_M;
    turb.wavelength_um = DEMO_SB_WL_UM;
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = nl * DEMO_SB_PX;
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.geom.nx = sp.geom.ny = nl;
    sp.geom.pitch_px = DEMO_SB_PX;
    sp.geom.pixel_um = DEMO_SB_PIXEL_UM;
    sp.model = SW_SH_GEOMETRIC;
    sp.samples = DEMO_SB_SPL; /* the pupil samples are the screen's samples */

    sw_wavefront w;
    memset(&w, 0, sizeof w);
    sw_sh_truth tr;
    memset(&tr, 0, sizeof tr);
    sw_shsim *sim = NULL;
    sw_sabre *ds = NULL;
    sw_sabre_global *glob = NULL;
    sw_fried *fried = NULL;
    sw_image img = {0};
    double *truth = malloc((size_t)nsamp * sizeof *truth);
    double *est = malloc((size_t)nsamp * sizeof *est);
    float *slopes = malloc(2 * (size_t)nll * sizeof *slopes);
    double *phase = malloc((size_t)(nl + 1) * (nl + 1) * sizeof *phase);
    double *dval = NULL;
    float *fval = NULL;
    double rel[3] = {NAN, NAN, NAN}, ms[3] = {0, 0, 0}, run_us[DEMO_TIMING_REPS];
    double plan_ms = 0.0, kernel_us = -1.0, truth_rms = 0.0;
    sw_sabre_info info;
    memset(&info, 0, sizeof info);
    char path[4096];
    sw_status st = SW_OK;
    if (!truth || !est || !slopes || !phase) {
        st = SW_ENOMEM;
        demo_fail(s, "out of memory");
    }
    if (st == SW_OK && join_path(s, path, sizeof path, "demo_sabre.fits") != 0)
        st = SW_EINVAL;

    /* The screen, and the same OPD in the lenslet plane. */
    if (st == SW_OK)
        st = sw_phase_screen(s->ctx, &turb, DEMO_SB_SCREEN, DEMO_SB_LENSLET_M / DEMO_SB_SPL,
                             s->seed, 0, &w);
    if (st == SW_OK) {
        w.spacing_um = DEMO_SB_LENSLET_UM / DEMO_SB_SPL;
        w.u0_um = w.v0_um = -0.5 * (DEMO_SB_SCREEN - 1) * w.spacing_um;
        for (int32_t k = 0; k < nmap; k++)
            for (int32_t i = 0; i < nmap; i++)
                truth[(int64_t)k * nmap + i] =
                    w.opd_um[(int64_t)(k + DEMO_SB_PAD) * DEMO_SB_SCREEN + i + DEMO_SB_PAD];
        double sum = 0.0, sum2 = 0.0;
        for (int64_t i = 0; i < nsamp; i++)
            sum += truth[i];
        for (int64_t i = 0; i < nsamp; i++)
            sum2 += (truth[i] - sum / (double)nsamp) * (truth[i] - sum / (double)nsamp);
        truth_rms = sqrt(sum2 / (double)nsamp);
    }
    /* The exact lenslet-mean gradients (radians), x then y. */
    if (st == SW_OK)
        st = sw_shsim_create(s->ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_shsim_add_wavefront(sim, &w, 1.0);
    if (st == SW_OK)
        st = sw_shsim_truth(sim, &tr);
    for (int32_t l = 0; st == SW_OK && l < nll; l++) {
        slopes[l] = (float)tr.slope_x[l];
        slopes[nll + l] = (float)tr.slope_y[l];
    }

    /* D-SABRE on the context's backend: the plan, one warm-up run, then the timed runs. */
    sw_sabre_params p;
    sw_sabre_params_default(&p);
    p.nx = p.ny = nl;
    p.pitch = DEMO_SB_LENSLET_UM;
    p.partitions = DEMO_SB_K;
    p.overlap = 1;
    p.pme = SW_SABRE_PME_HIERARCHICAL;
    double t0 = sw_cli_now();
    if (st == SW_OK)
        st = sw_sabre_create(s->ctx, &p, &ds);
    plan_ms = 1e3 * (sw_cli_now() - t0);
    int64_t nv = 0;
    if (st == SW_OK) {
        sw_sabre_get_info(ds, &info);
        sw_sabre_lattice gl = {nl - 1, nl - 1, 0, 0};
        nv = sw_sabre_lattice_values(&info.lattice);
        const int64_t ng = sw_sabre_lattice_values(&gl);
        dval = malloc((size_t)(nv > ng ? nv : ng) * sizeof *dval);
        fval = malloc((size_t)nv * sizeof *fval);
        if (!dval || !fval) {
            st = SW_ENOMEM;
            demo_fail(s, "out of memory");
        }
    }
    if (st == SW_OK)
        st = sw_sabre_run(ds, slopes, SW_MEM_HOST, fval, NULL);
    for (int i = 0; i < DEMO_TIMING_REPS && st == SW_OK; i++) {
        t0 = sw_cli_now();
        st = sw_sabre_run(ds, slopes, SW_MEM_HOST, fval, NULL);
        run_us[i] = 1e6 * (sw_cli_now() - t0);
    }
    if (st == SW_OK) {
        kernel_us = sw_sabre_kernel_us(ds);
        for (int64_t v = 0; v < nv; v++)
            dval[v] = fval[v];
        st = sw_sabre_map(s->ctx, &info.lattice, dval, nl, nl, nmap, nmap, est);
    }
    if (st == SW_OK) {
        rel[0] = demo_rel_rms(est, truth, nsamp);
        /* The D-SABRE wavefront, its mean removed, as an f32 FITS map (um). */
        double mean = 0.0;
        for (int64_t i = 0; i < nsamp; i++)
            mean += est[i];
        mean /= (double)nsamp;
        st = sw_image_alloc(s->ctx, nmap, nmap, SW_PIX_F32, &img);
        for (int32_t k = 0; k < nmap && st == SW_OK; k++) {
            float *row = sw_image_row(&img, k);
            for (int32_t i = 0; i < nmap; i++)
                row[i] = (float)(est[(int64_t)k * nmap + i] - mean);
        }
        if (st == SW_OK) {
            sw_cli_hdr h;
            sw_cli_hdr_init(&h, "um", "wavefront (optical path difference), mean 0");
            sw_cli_hdr_comment(&h, "spotwave demo: D-SABRE's wavefront from noise-free slopes");
            demo_history(&h, s);
            const double dx = DEMO_SB_LENSLET_M / DEMO_SB_SPL;
            sw_cli_hdr_wcs_linear(&h, "PUPILX", "PUPILY", "m", 0.5 * (nmap + 1), 0.5 * (nmap + 1),
                                  0.0, 0.0, dx, dx);
            sw_cli_hdr_u64(&h, "SEED", s->seed, "phase screen seed (--seed)");
            sw_cli_hdr_num(&h, "R0", DEMO_SB_R0_M, "[m] Fried parameter at R0WAVE");
            sw_cli_hdr_num(&h, "L0", DEMO_SB_L0_M, "[m] outer scale");
            sw_cli_hdr_num(&h, "R0WAVE", DEMO_SB_WL_UM, "[um] wavelength of R0");
            sw_cli_hdr_int(&h, "GRIDNX", nl, "lenslets across");
            sw_cli_hdr_int(&h, "GRIDNY", nl, "lenslets down");
            sw_cli_hdr_num(&h, "LENSLETM", DEMO_SB_LENSLET_M, "[m] lenslet in the pupil");
            sw_cli_hdr_str(&h, "METHOD", "dsabre", "reconstructor");
            sw_cli_hdr_int(&h, "PARTS", DEMO_SB_K, "partitions per side (k)");
            sw_cli_hdr_str(&h, "PME", "hierarchical", "piston mode equalisation");
            st = sw_cli_hdr_write(s->ctx, path, &img, 1, &h);
        }
    }

    /* Global SABRE (host): one least-squares problem on the whole lattice. */
    if (st == SW_OK)
        st = sw_sabre_global_create(s->ctx, nl, nl, DEMO_SB_LENSLET_UM, NULL, &glob);
    if (st == SW_OK) {
        sw_sabre_lattice gl;
        sw_sabre_global_lattice(glob, &gl);
        t0 = sw_cli_now();
        st = sw_sabre_global_run(glob, slopes, dval);
        ms[1] = 1e3 * (sw_cli_now() - t0);
        if (st == SW_OK)
            st = sw_sabre_map(s->ctx, &gl, dval, nl, nl, nmap, nmap, est);
        if (st == SW_OK)
            rel[1] = demo_rel_rms(est, truth, nsamp);
    }
    /* Fried geometry (host), bilinear between the lenslet corners. */
    if (st == SW_OK)
        st = sw_fried_create(s->ctx, nl, nl, DEMO_SB_LENSLET_UM, NULL, DEMO_SB_FRIED_REG, &fried);
    if (st == SW_OK) {
        t0 = sw_cli_now();
        st = sw_fried_run(fried, slopes, phase);
        ms[2] = 1e3 * (sw_cli_now() - t0);
    }
    if (st == SW_OK) {
        for (int32_t k = 0; k < nmap; k++)
            for (int32_t i = 0; i < nmap; i++)
                est[(int64_t)k * nmap + i] =
                    sw_fried_eval(nl, nl, phase, demo_sb_x(i), demo_sb_x(k));
        rel[2] = demo_rel_rms(est, truth, nsamp);
    }

    sw_fried_destroy(fried);
    sw_sabre_global_destroy(glob);
    sw_sabre_destroy(ds);
    sw_shsim_destroy(sim);
    sw_sh_truth_free(&tr);
    sw_wavefront_free(&w);
    sw_image_free(&img);
    free(truth);
    free(est);
    free(slopes);
    free(phase);
    free(dval);
    free(fval);
    if (s->error[0])
        return -1;
    if (st != SW_OK)
        return demo_fail(s, "%s", lib_error(s, st));

    const char *be = sw_backend_string(sw_context_backend(s->ctx));
    printf("  sabre      %dx%d SH lenslets of %.4g m, von Karman screen (r0 %.2f m at %.2f um, L0 "
           "%.0f m, %dx%d samples, seed %llu): %.3f um RMS over the array; exact lenslet-mean "
           "gradients, noise-free\n",
           nl, nl, DEMO_SB_LENSLET_M, DEMO_SB_R0_M, DEMO_SB_WL_UM, DEMO_SB_L0_M, DEMO_SB_SCREEN,
           DEMO_SB_SCREEN, (unsigned long long)s->seed, truth_rms);
    printf("  sabre      D-SABRE %dx%d partitions (m %d, window %d), overlap 1, H-PME, %s: "
           "relative RMS error %.4f; run %.1f us (median of %d",
           DEMO_SB_K, DEMO_SB_K, (int)info.m, (int)info.window, be, rel[0],
           median(run_us, DEMO_TIMING_REPS), DEMO_TIMING_REPS);
    if (kernel_us >= 0)
        printf(", %.1f us on the GPU", kernel_us);
    printf("), plan %.1f ms\n", plan_ms);
    printf("  sabre      global SABRE: relative RMS error %.4f; run %.2f ms (host)\n", rel[1],
           ms[1]);
    printf("  sabre      Fried (reg %g): relative RMS error %.4f; run %.2f ms (host)\n",
           DEMO_SB_FRIED_REG, rel[2], ms[2]);
    printf("  wrote      %s (D-SABRE wavefront, %dx%d samples over the array, um)\n", path, nmap,
           nmap);
    if (!(rel[0] < DEMO_SB_MAX_REL))
        return demo_fail(s, "D-SABRE's relative RMS error %.4f is not below %.2f", rel[0],
                         DEMO_SB_MAX_REL);
    return 0;
}

/* ------------------------------------------------------------------ closed loop (issue 11) */

/* The closed-loop simulator (loop.h; Brunner et al. 2018 Sec. 4.B, scaled down to run in seconds on
 * a CPU): 16 x 16 lenslets on a 6 m telescope, diffraction SH, a 17 x 17 Gaussian DM with 30 %
 * coupling, D-SABRE with 2 x 2 partitions and the distributed projection (Eq. 14-16), an
 * integrator of gain 0.5, J-band science camera; the same system in open loop for comparison. */
#define DEMO_LOOP_N      16
#define DEMO_LOOP_D_M    6.0
#define DEMO_LOOP_FRAMES 120
#define DEMO_LOOP_WARMUP 20

static int demo_loop_run(demo_state *s, double gain, double *turb, double *resid, double *strehl,
                         double *fit_nm, double *fps)
{
    sw_loop_params p;
    sw_loop_params_default(&p);
    p.nx = DEMO_LOOP_N;
    p.diameter_m = DEMO_LOOP_D_M;
    p.partitions = 2;
    p.recon = SW_LOOP_DSABRE_LOCAL;
    p.controller.gain = gain;
    p.warmup = DEMO_LOOP_WARMUP;
    p.seed = s->seed;
    sw_loop *l = NULL;
    sw_status st = sw_loop_create(s->ctx, &p, &l);
    double t = 0.0, r = 0.0;
    const double t0 = sw_cli_now();
    for (int k = 0; k < DEMO_LOOP_FRAMES && st == SW_OK; k++) {
        sw_loop_frame f;
        st = sw_loop_step(l, &f);
        if (st == SW_OK && k >= DEMO_LOOP_WARMUP) {
            t += f.turbulence_nm;
            r += f.residual_nm;
        }
    }
    const double dt = sw_cli_now() - t0;
    if (st == SW_OK)
        st = sw_loop_fitting_error(l, fit_nm);
    if (st == SW_OK) {
        *turb = t / (DEMO_LOOP_FRAMES - DEMO_LOOP_WARMUP);
        *resid = r / (DEMO_LOOP_FRAMES - DEMO_LOOP_WARMUP);
        *strehl = sw_loop_long_strehl(l);
        *fps = DEMO_LOOP_FRAMES / dt;
    }
    sw_loop_destroy(l);
    if (st != SW_OK)
        return demo_fail(s, "closed loop: %s", lib_error(s, st));
    return 0;
}

static int step_loop(demo_state *s)
{
    double t[2], r[2], se[2], fit[2], fps[2];
    if (demo_loop_run(s, 0.5, &t[0], &r[0], &se[0], &fit[0], &fps[0]) != 0 ||
        demo_loop_run(s, 0.0, &t[1], &r[1], &se[1], &fit[1], &fps[1]) != 0)
        return -1;
    printf("  loop       %dx%d SH (diffraction) on a %.0f m telescope, %dx%d DM (Gaussian, 30 %% "
           "coupling), r0 0.15 m, 10 km/h, 500 Hz, %d frames (%d warm-up), %s\n",
           DEMO_LOOP_N, DEMO_LOOP_N, DEMO_LOOP_D_M, DEMO_LOOP_N + 1, DEMO_LOOP_N + 1,
           DEMO_LOOP_FRAMES, DEMO_LOOP_WARMUP, sw_backend_string(sw_context_backend(s->ctx)));
    printf("  loop       closed (D-SABRE 2x2, distributed projection, gain 0.5): residual %.0f nm "
           "RMS (turbulence %.0f nm, DM fitting error %.0f nm), long-exposure Strehl in J %.3f, "
           "%.0f frames/s\n",
           r[0], t[0], fit[0], se[0], fps[0]);
    printf("  loop       open: residual %.0f nm RMS, long-exposure Strehl in J %.3f\n", r[1],
           se[1]);
    if (!(r[0] < 0.5 * r[1]))
        return demo_fail(s,
                         "the closed loop's residual %.0f nm is not below half the open loop's "
                         "%.0f nm",
                         r[0], r[1]);
    return 0;
}

static int step_read_back(demo_state *s)
{
    sw_image back = {0};
    sw_status st = sw_fits_read_frame(s->ctx, s->path_fits, 0, &back);
    if (st != SW_OK)
        return demo_fail(s, "cannot read back %s: %s", s->path_fits, lib_error(s, st));
    int same = sw_image_equal(&s->image, &back);
    sw_image_free(&back);
    if (!same)
        return demo_fail(s, "%s read back differs from the image written", s->path_fits);

    st = sw_pgm_read(s->ctx, s->path_pgm, &back);
    if (st != SW_OK)
        return demo_fail(s, "cannot read back %s: %s", s->path_pgm, lib_error(s, st));
    same = sw_image_equal(&s->image_u16, &back);
    sw_image_free(&back);
    if (!same)
        return demo_fail(s, "%s read back differs from the image written", s->path_pgm);
    printf("  read back  demo.fits and demo_u16.pgm: identical to what was written\n");
    return 0;
}

/* ------------------------------------------------------------------ the list of steps */

typedef struct demo_step {
    const char *name;
    int (*run)(demo_state *s);
    int optional; /* 1: one of the stages --steps can choose; 0: always run (the star field) */
} demo_step;

static const demo_step demo_steps[] = {
    {"backend", step_backend, 0},         /* which backend, why, which device          */
    {"output", step_outdir, 0},           /* create --out and the file names           */
    {"simulate", step_image, 0},          /* star field + detector noise (sim, f32)    */
    {"stats", step_stats, 0},             /* sw_image_stats_compute                    */
    {"convert", step_convert, 0},         /* sw_image_convert f32 -> u16, full range   */
    {"timings", step_timings, 0},         /* stats and convert on the backend in use   */
    {"write", step_write, 0},             /* FITS, PGM, PNG                            */
    {"read back", step_read_back, 0},     /* FITS and PGM identical to what was written */
    {"eyes", step_eyes, 1},               /* binocular synthetic-eye H-S image (sim eye) */
    {"find", step_find, 1},               /* star field's spots vs truth (Winter 2018) */
    {"picture", step_picture, 1},         /* the star field, found spots circled (PNG) */
    {"centroid", step_centroid, 1},       /* SH frame -> centroids vs truth (Mocci 2020) */
    {"fit", step_fit, 1},                 /* -> slopes -> Zernike fit, refraction, map (Mompean) */
    {"aberrometry", step_aberrometry, 1}, /* eyes -> pupils, PAPYCS, Zernike, refraction */
    {"sabre", step_sabre, 1},             /* screen -> slopes -> D-SABRE, SABRE, Fried (Brunner) */
    {"loop", step_loop, 1},               /* closed AO loop vs open loop (Brunner Sec. 4) */
    /* later stages append here */
};
#define DEMO_NSTEPS (sizeof demo_steps / sizeof demo_steps[0])

/* --steps LIST: a comma-separated list of the optional steps' names, or "all". Marks the chosen
 * steps in `on`; returns the name that is not a step, or NULL. */
static const char *demo_parse_steps(const char *list, int on[DEMO_NSTEPS])
{
    static char bad[64];
    for (size_t i = 0; i < DEMO_NSTEPS; i++)
        on[i] = !demo_steps[i].optional || strcmp(list, "all") == 0;
    if (strcmp(list, "all") == 0)
        return NULL;
    const char *p = list;
    while (1) {
        size_t n = strcspn(p, ",");
        size_t i = 0;
        for (; i < DEMO_NSTEPS; i++)
            if (demo_steps[i].optional && strlen(demo_steps[i].name) == n &&
                strncmp(demo_steps[i].name, p, n) == 0)
                break;
        if (i == DEMO_NSTEPS) {
            snprintf(bad, sizeof bad, "%.*s", (int)(n < 60 ? n : 60), p);
            return bad;
        }
        on[i] = 1;
        if (strcmp(demo_steps[i].name, "find") == 0) /* its picture comes with it */
            for (size_t k = 0; k < DEMO_NSTEPS; k++)
                on[k] |= strcmp(demo_steps[k].name, "picture") == 0;
        if (!p[n])
            return NULL;
        p += n + 1;
    }
}

static void demo_state_free(demo_state *s)
{
    sw_spot_list_free(&s->spots);
    sw_image_free(&s->image_u16);
    sw_image_free(&s->image);
    sw_stars_free(&s->stars);
}

int sw_cmd_demo(const sw_cli_globals *g, int argc, char **argv)
{
    enum { OPT_SIZE = 256, OPT_SEED, OPT_STEPS };
    static const struct option longopts[] = {
        {"out", required_argument, NULL, 'o'},
        {"size", required_argument, NULL, OPT_SIZE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"steps", required_argument, NULL, OPT_STEPS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    demo_state s;
    memset(&s, 0, sizeof s);
    s.g = g;
    s.outdir = DEMO_DEFAULT_OUT;
    s.width = s.height = DEMO_DEFAULT_SIZE;
    s.seed = DEMO_DEFAULT_SEED;
    int on[DEMO_NSTEPS];
    demo_parse_steps("all", on);

    int c;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(SUB, argc, argv, "o:h", longopts)) != -1) {
        switch (c) {
        case 'o':
            if (!*optarg)
                return sw_cli_usage(SUB, "--out: the directory name is empty");
            s.outdir = optarg;
            break;
        case OPT_SIZE:
            if (sw_cli_opt_size(SUB, "--size", optarg, &s.width, &s.height) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_SEED:
            if (sw_cli_opt_u64(SUB, "--seed", optarg, &s.seed) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_STEPS: {
            const char *bad = demo_parse_steps(optarg, on);
            if (bad)
                return sw_cli_usage(SUB,
                                    "--steps: '%s' is not one of eyes, find, centroid, fit, "
                                    "aberrometry, sabre, loop (or all)",
                                    bad);
            break;
        }
        case 'h': sw_cmd_demo_help(stdout); return SW_EXIT_OK;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return sw_cli_usage(SUB, "unexpected argument '%s'", argv[optind]);

    int rc = sw_cli_context(g, SUB, &s.ctx);
    if (rc != SW_EXIT_OK)
        return rc;

    double t0 = sw_cli_now();
    printf("spotwave %s demo\n", sw_version());
    rc = SW_EXIT_OK;
    for (size_t i = 0; i < DEMO_NSTEPS; i++) {
        if (on[i] && demo_steps[i].run(&s) != 0) {
            rc = sw_cli_fail(SUB, "%s: %s", demo_steps[i].name, s.error);
            break;
        }
    }
    if (rc == SW_EXIT_OK) {
        printf("  methods    star field: Li et al. 2012; find: Winter et al. 2018 (DIALS); "
               "centroid: Mocci et al. 2020; eyes, fit, aberrometry: Mompean et al. 2019; "
               "sabre, loop: Brunner et al. 2018 (README.md: Methods and papers)\n");
        printf("done in %.2f s: pictures and data in %s\n", sw_cli_now() - t0, s.outdir);
    }
    demo_state_free(&s);
    sw_context_destroy(s.ctx);
    return rc;
}
