/*
 * spotwave sim bench: the closed-loop simulator of loop.h (the atmosphere, the deformable mirror
 * and the Shack-Hartmann camera; Brunner et al. 2018 Sec. 4.B) as a process on image streams
 * (stream.h, the ImageStreamIO layout of milk/CACAO), so that a real-time chain in another process
 * (`spotwave rtc`, or a bench's own) closes the loop through shared memory as it would on a bench.
 *
 * The camera stream holds f32 frames (electrons); the mirror stream nact f32 commands (um of
 * optical path, the Fried corners of loop.h). Frame k is rendered with the commands last read from
 * the mirror stream (sw_loop_camera).
 *
 * Lockstep (the default): the bench waits for a chain to listen to the camera stream (a live
 * process holding one of its semaphores: spotwave rtc and calibrate do), starts from the commands
 * the mirror stream holds, then for every frame: render it with the current commands, write it,
 * wait for the mirror stream to be written again. The
 * chain then sees every frame and its commands always reach the next one: the loop of
 * sw_loop_step with no delay, so with the loop's own chain (--rtc-config) the commands are bit for
 * bit those of `spotwave loop` (--twin checks this against an in-process simulator as it runs;
 * when the loop filters modes of negative gain, loop.h negative_filter, they go to the chain as
 * filter.fits).
 * Free run (--free-run): frames at rate_hz by the clock whatever the chain does; the commands of
 * the newest write are applied (what a real camera does; the chain may miss frames).
 *
 * Streams that exist with the right shape are used as they are (a chain already connected stays
 * connected); others are made afresh (a chain started first waits for the camera stream to
 * appear; spotwave rtc does).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"
#include "outfiles.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "spotwave/stream.h"

#define S "sim bench"

#define MAX_SETS 256
/* --no-turbulence: r0 so large that the screen's RMS is ~1e-10 of the default's (it scales as
 * r0^(-5/6)): a calm bench for calibrating, with the simulator unchanged */
#define CALM_R0_M 1e12

typedef struct bench_opts {
    const char *config, *camera, *dm, *dir, *rtc_dir;
    char *sets[MAX_SETS];
    int nsets;
    long frames;
    int frames_given, free_run, twin, json, no_turbulence;
    double timeout_s, twin_tol;
    sw_loop_params p;
} bench_opts;

void sw_cmd_sim_bench_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] sim bench [--config FILE] [--set KEY=VALUE ...]\n"
        "                [--camera STREAM] [--dm STREAM] [--rtc-config DIR] [OPTIONS]\n"
        "\n"
        "The closed-loop simulator of `spotwave loop` (Brunner, de Visser, Vuik & Verhaegen\n"
        "2018, J. Opt. Soc. Am. A 35(6), 859, Sec. 4.B) as a bench: its atmosphere,\n"
        "deformable mirror and Shack-Hartmann camera run here and talk to a real-time chain\n"
        "in another process through image streams in the ImageStreamIO layout of\n"
        "milk/CACAO: camera frames (f32 electrons) out, mirror commands (nact f32, um) in.\n"
        "\n"
        "Configuration: as `spotwave loop` (its --config keys and --set; see spotwave loop\n"
        "--help); delay must be 0 (the bench's timing is the delay).\n"
        "  --config FILE          `key = value` lines\n"
        "  --set KEY=VALUE        one key (repeatable)\n"
        "  --frames N             frames to run (default: the configuration's frames); 0 with\n"
        "                         --rtc-config: only write the chain's files\n"
        "  --no-turbulence        a calm bench (r0 = 10^12 m: the screen's RMS ~1e-10 of the\n"
        "                         default's), to calibrate with spotwave calibrate\n"
        "\n"
        "Streams:\n"
        "  --camera STREAM        camera frames (default sw_cam)\n"
        "  --dm STREAM            mirror commands (default sw_dm); both are made when\n"
        "                         missing or of another shape, used as they are otherwise\n"
        "  --dir DIR              where the streams are (default $MILK_SHM_DIR, else\n"
        "                         ImageStreamIO's folder)\n"
        "  --free-run             frames at rate_hz by the clock, whatever the chain does\n"
        "                         (default: lockstep: the bench starts when a chain listens\n"
        "                         to the camera stream, and each frame waits for the\n"
        "                         chain's commands)\n"
        "  --timeout SECONDS      lockstep: fail when no chain listens, or it does not write\n"
        "                         the mirror stream, for this long (default 30)\n"
        "\n"
        "The chain:\n"
        "  --rtc-config DIR       write the simulator's own chain for spotwave rtc:\n"
        "                         DIR/rtc.conf, DIR/valid.fits (the measured lenslets) and,\n"
        "                         for recon mvm, DIR/cm.fits (the control matrix from its\n"
        "                         push-pull calibration); for recon dsabre-local,\n"
        "                         DIR/filter.fits when the loop filters modes of negative\n"
        "                         gain (key negative_filter) beside the unseen ones; recon\n"
        "                         must be mvm or dsabre-local\n"
        "  --twin                 lockstep: run the in-process simulator beside the bench and\n"
        "                         compare the commands that come back with its own, frame\n"
        "                         by frame (JSON: twin_identical_frames, twin_first_difference)\n"
        "  --json                 the summary as one JSON object\n"
        "\n"
        "Exit codes: 0 success; 1 a failure (streams, the chain's timeout, a twin that\n"
        "differs); 2 a usage error.\n"
        "\n"
        "Example (three shells, or & for the first two):\n"
        "  spotwave sim bench --set nx=16 --set recon=mvm --rtc-config b/ --frames 0\n"
        "  spotwave rtc --config b/rtc.conf --in sw_cam --out sw_dm --frames 1000 &\n"
        "  spotwave sim bench --set nx=16 --set recon=mvm --frames 1000 --twin --json\n");
}

static int parse_options(int argc, char **argv, bench_opts *o)
{
    enum {
        OPT_CONFIG = 256,
        OPT_SET,
        OPT_FRAMES,
        OPT_CAMERA,
        OPT_DM,
        OPT_DIR,
        OPT_FREE,
        OPT_TIMEOUT,
        OPT_RTC,
        OPT_TWIN,
        OPT_CALM,
        OPT_TWIN_TOL,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"set", required_argument, NULL, OPT_SET},
        {"frames", required_argument, NULL, OPT_FRAMES},
        {"camera", required_argument, NULL, OPT_CAMERA},
        {"dm", required_argument, NULL, OPT_DM},
        {"dir", required_argument, NULL, OPT_DIR},
        {"free-run", no_argument, NULL, OPT_FREE},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"rtc-config", required_argument, NULL, OPT_RTC},
        {"twin", no_argument, NULL, OPT_TWIN},
        {"no-turbulence", no_argument, NULL, OPT_CALM},
        {"twin-tolerance", required_argument, NULL, OPT_TWIN_TOL},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->camera = "sw_cam";
    o->dm = "sw_dm";
    o->timeout_s = 30.0;
    int c;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "h", longopts)) != -1) {
        switch (c) {
        case 'h': sw_cmd_sim_bench_help(stdout); return -1;
        case OPT_CONFIG:
            if (o->config)
                return sw_cli_usage(S, "--config is given twice");
            if (sw_cli_opt_file(S, "--config", optarg, &o->config) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_SET:
            if (o->nsets == MAX_SETS)
                return sw_cli_usage(S, "more than %d --set", MAX_SETS);
            o->sets[o->nsets++] = optarg;
            break;
        case OPT_FRAMES:
            if (sw_cli_opt_at_least(S, "--frames", optarg, 0, "a count >= 0", &o->frames) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->frames_given = 1;
            break;
        case OPT_CAMERA: o->camera = optarg; break;
        case OPT_DM: o->dm = optarg; break;
        case OPT_DIR: o->dir = optarg; break;
        case OPT_FREE: o->free_run = 1; break;
        case OPT_TIMEOUT:
            if (sw_cli_opt_double(S, "--timeout", optarg, SW_CLI_POSITIVE,
                                  "a positive number of "
                                  "seconds",
                                  &o->timeout_s) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_RTC:
            if (sw_cli_opt_file(S, "--rtc-config", optarg, &o->rtc_dir) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TWIN: o->twin = 1; break;
        case OPT_CALM: o->no_turbulence = 1; break;
        case OPT_TWIN_TOL:
            if (sw_cli_opt_double(S, "--twin-tolerance", optarg, SW_CLI_NONNEG, "a number >= 0",
                                  &o->twin_tol) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->twin = 1;
            break;
        case OPT_JSON: o->json = 1; break;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return sw_cli_usage(S, "unexpected argument '%s'", argv[optind]);
    if (strcmp(o->camera, o->dm) == 0)
        return sw_cli_usage(S, "--camera and --dm name the same stream '%s'", o->camera);
    if (o->twin && o->free_run)
        return sw_cli_usage(S, "--twin compares frame by frame: it needs lockstep (drop "
                               "--free-run)");
    if (o->frames_given && o->frames == 0 && !o->rtc_dir)
        return sw_cli_usage(S, "--frames 0 runs nothing: give --rtc-config DIR");
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ the chain's files */

static void rtc_path(char *buf, size_t n, const char *dir, const char *name)
{
    snprintf(buf, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
}

static int write_chain(sw_context *ctx, const bench_opts *o, sw_loop *l)
{
    sw_loop_chain_info ci;
    int32_t w = 0, h = 0, ns = 0;
    sw_status st = sw_loop_chain(l, &ci);
    if (st != SW_OK)
        return sw_cli_fail(S, "--rtc-config: %s", sw_cli_lib_error(ctx, st));
    const int mvm = ci.recon == SW_LOOP_MVM;
    sw_loop_sensor(l, &w, &h, &ns);
    char conf[4200], cmf[4200], vf[4200];
    rtc_path(conf, sizeof conf, o->rtc_dir, "rtc.conf");
    rtc_path(cmf, sizeof cmf, o->rtc_dir, "cm.fits");
    rtc_path(vf, sizeof vf, o->rtc_dir, "valid.fits");
    const char *sc = sw_cli_file_staged("--rtc-config", conf);
    const char *sm = mvm ? sw_cli_file_staged("--rtc-config", cmf) : "";
    const char *sv = sw_cli_file_staged("--rtc-config", vf);
    if (!sc || !sm || !sv)
        return SW_EXIT_FAIL;
    sw_image img;
    if (mvm) {
        /* the control matrix: one row per actuator, 2 ns wide */
        if ((st = sw_image_wrap((void *)ci.cm, 2 * ns, ci.nact, 0, SW_PIX_F32, SW_MEM_HOST,
                                &img)) != SW_OK ||
            (st = sw_fits_write(ctx, sm, &img, 1)) != SW_OK)
            return sw_cli_fail(S, "%s: %s", cmf, sw_cli_lib_error(ctx, st));
    }
    /* the measured lenslets, 1 / 0 */
    const sw_sh_geometry *gm = &ci.centroid.geometry;
    if ((st = sw_image_alloc(ctx, gm->nx, gm->ny, SW_PIX_U8, &img)) != SW_OK)
        return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    for (int32_t y = 0; y < gm->ny; y++)
        for (int32_t x = 0; x < gm->nx; x++)
            ((uint8_t *)sw_image_row(&img, y))[x] =
                (uint8_t)(gm->valid ? gm->valid[(size_t)y * gm->nx + x] != 0 : 1);
    st = sw_fits_write(ctx, sv, &img, 1);
    sw_image_free(&img);
    if (st != SW_OK)
        return sw_cli_fail(S, "%s: %s", vf, sw_cli_lib_error(ctx, st));
    FILE *f = fopen(sc, "w");
    if (!f)
        return sw_cli_fail(S, "%s: %s", conf, strerror(errno));
    const sw_controller_params *c = &o->p.controller;
    const sw_centroid_params *cp = &ci.centroid;
    fprintf(f,
            "# spotwave rtc: the %s chain of spotwave sim bench's simulator (%s)\n"
            "# camera %d x %d f32 frames; files are found beside this one\n"
            "nx = %d\nny = %d\npitch_px = %.17g\nx0 = %.17g\ny0 = %.17g\n"
            "pixel_um = %.17g\nfocal_mm = %.17g\nvalid = valid.fits\n",
            mvm ? "MVM" : "D-SABRE", sw_cli_command_line(), (int)w, (int)h, (int)gm->nx,
            (int)gm->ny, gm->pitch_px, gm->x0, gm->y0, gm->pixel_um, gm->focal_mm);
    if (cp->threshold_mode == SW_THRESHOLD_SUBTRACT && cp->threshold_kind == SW_THRESHOLD_ABSOLUTE)
        fprintf(f, "threshold = %.17g\n", cp->threshold);
    fprintf(f, "window = %d\n", (int)cp->window);
    if (mvm)
        fprintf(f, "recon = mvm\ncm = cm.fits\n");
    else
        fprintf(f,
                "recon = dsabre\npartitions = %d\noverlap = %d\npme = %s\nextend_eq17 = %d\n"
                "lenslet_um = %.17g\nprojection = local\ninfluence = %s\ncoupling = %.17g\n",
                (int)ci.sabre.partitions, (int)ci.sabre.overlap, sw_sabre_pme_string(ci.sabre.pme),
                ci.sabre.extend_eq17 ? 1 : 0, ci.sabre.pitch,
                sw_dm_influence_string(ci.dm.influence), ci.dm.coupling);
    double g[2];
    if (!mvm && sw_loop_slope_gain(l, g)) /* the gain the loop divides out (loopsim.c) */
        fprintf(f, "slope_gain = %.17g\n", 0.5 * (g[0] + g[1]));
    fprintf(f, "controller = %s\ngain = %.17g\nleak = %.17g\nclip = %.17g\n",
            sw_controller_kind_string(c->kind), c->gain, c->leak, c->clip);
    /* the filter: the unseen modes by name, or, when the loop filters modes of negative gain too
     * (loop.h negative_filter), all of its modes as filter.fits, one a row */
    if (sw_loop_negative_modes(l, NULL) > 0) { /* then ci.nfilter > 0 */
        char ff[4200];
        rtc_path(ff, sizeof ff, o->rtc_dir, "filter.fits");
        const char *sf = sw_cli_file_staged("--rtc-config", ff);
        if (!sf) {
            fclose(f);
            return SW_EXIT_FAIL;
        }
        if ((st = sw_image_wrap((void *)ci.filter, ci.nact, ci.nfilter, 0, SW_PIX_F32, SW_MEM_HOST,
                                &img)) != SW_OK ||
            (st = sw_fits_write(ctx, sf, &img, 1)) != SW_OK) {
            fclose(f);
            return sw_cli_fail(S, "%s: %s", ff, sw_cli_lib_error(ctx, st));
        }
        fprintf(f, "filter = filter.fits\n");
    } else
        fprintf(f, "unseen = %s\n", sw_unseen_string(ci.unseen));
    if (c->kind == SW_CTRL_PI)
        fprintf(f, "kp = %.17g\n", o->p.kp);
    const int bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad)
        return sw_cli_fail(S, "%s: write failed", conf);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ the run */

typedef struct bench_run {
    sw_stream *cam, *dm;
    int32_t sem;
    float *frame, *u;
    sw_loop *twin;
    long frames, identical, first_diff, within, compared, dm_writes;
    double max_rel; /* largest |u - twin| / RMS(twin) over the frames */
    double residual_sum, turb_sum, run_s, long_strehl;
    long after_warmup;
} bench_run;

/* The stream `name` of naxis floats w (x h): the existing one when it has that shape (a chain
 * already connected to it stays connected), else made afresh. */
static int make_stream(sw_context *ctx, const bench_opts *o, const char *option, const char *name,
                       int naxis, uint32_t w, uint32_t h, sw_stream **out)
{
    sw_stream *s = NULL;
    if (sw_stream_open(ctx, o->dir, name, &s) == SW_OK) {
        sw_stream_info in;
        if (sw_stream_get_info(s, &in) == SW_OK && in.type == SW_STREAM_F32 && in.naxis == naxis &&
            in.size[0] == w && (naxis < 2 || in.size[1] == h) && !in.circular) {
            *out = s;
            return SW_EXIT_OK;
        }
        sw_stream_close(s);
    }
    sw_stream_params sp;
    sw_stream_params_default(&sp);
    sp.name = name;
    sp.naxis = naxis;
    sp.size[0] = w;
    sp.size[1] = naxis > 1 ? h : 1;
    sp.size[2] = 1;
    sp.type = SW_STREAM_F32;
    const sw_status st = sw_stream_create(ctx, o->dir, &sp, out);
    if (st != SW_OK)
        return sw_cli_fail(S, "%s %s: %s", option, name, sw_cli_lib_error(ctx, st));
    return SW_EXIT_OK;
}

/* Lockstep: waits for a chain to listen to the camera (a live reader holding one of its
 * semaphores); -1 when stopped by a signal. */
static int wait_chain(const bench_opts *o, const bench_run *r)
{
    const double t0 = sw_cli_now();
    while (sw_stream_readers(r->cam) == 0) {
        if (sw_cli_stop)
            return -1;
        if (sw_cli_now() - t0 > o->timeout_s)
            return sw_cli_fail(S,
                               "--camera %s: no chain listening after %g s (start one: "
                               "spotwave rtc --in %s --out %s)",
                               o->camera, o->timeout_s, o->camera, o->dm);
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
    return SW_EXIT_OK;
}

/* Waits for the mirror stream to be written after `after`; its commands into r->u. */
static int wait_dm(sw_context *ctx, const bench_opts *o, bench_run *r, uint64_t after, int32_t nact)
{
    uint64_t c0 = 0;
    sw_status st =
        sw_stream_wait(r->dm, SW_STREAM_WAIT_SEM, r->sem, after, o->timeout_s, &sw_cli_stop, &c0);
    if (sw_cli_stop)
        return -1;
    if (st == SW_ETIMEDOUT)
        return sw_cli_fail(S,
                           "--dm %s: no commands for %g s (is a chain running? spotwave rtc "
                           "--in %s --out %s)",
                           o->dm, o->timeout_s, o->camera, o->dm);
    if (st == SW_OK)
        st = sw_stream_read(r->dm, r->u, (size_t)nact * sizeof(float), &c0);
    if (st != SW_OK)
        return sw_cli_fail(S, "--dm %s: %s", o->dm, sw_cli_lib_error(ctx, st));
    r->dm_writes++;
    return SW_EXIT_OK;
}

/* Frame `frame`'s commands (r->u) against the twin's: identical, or within the tolerance (the
 * largest difference over the RMS of the twin's commands). */
static void twin_compare(const bench_opts *o, bench_run *r, int32_t nact, long frame)
{
    const float *t = sw_loop_commands(r->twin);
    r->compared++;
    if (!t) {
        r->first_diff = r->first_diff ? r->first_diff : frame;
        r->max_rel = INFINITY;
        return;
    }
    double d = 0.0, s2 = 0.0;
    for (int32_t a = 0; a < nact; a++) {
        const double e = fabs((double)r->u[a] - (double)t[a]);
        d = e > d || isnan(e) ? e : d;
        s2 += (double)t[a] * t[a];
    }
    const double rms = sqrt(s2 / nact);
    const double rel = d == 0.0 ? 0.0 : rms > 0.0 ? d / rms : INFINITY;
    r->max_rel = rel > r->max_rel || isnan(rel) ? rel : r->max_rel;
    if (memcmp(t, r->u, (size_t)nact * sizeof(float)) == 0)
        r->identical++;
    else if (!r->first_diff)
        r->first_diff = frame;
    if (rel <= o->twin_tol)
        r->within++;
}

static int run(sw_context *ctx, const bench_opts *o, sw_loop *l, bench_run *r)
{
    int32_t w = 0, h = 0;
    sw_loop_sensor(l, &w, &h, NULL);
    const int32_t nact = sw_loop_actuators(l);
    int rc;
    if ((rc = make_stream(ctx, o, "--camera", o->camera, 2, (uint32_t)w, (uint32_t)h, &r->cam)) !=
            SW_EXIT_OK ||
        (rc = make_stream(ctx, o, "--dm", o->dm, 1, (uint32_t)nact, 1, &r->dm)) != SW_EXIT_OK)
        return rc;
    sw_stream_keyword_set_string(r->cam, "SOURCE", "spotwave", "sim bench camera (e-)");
    sw_stream_keyword_set_string(r->dm, "SOURCE", "spotwave", "sim bench mirror (um OPD)");
    sw_status st = sw_stream_claim_semaphore(r->dm, &r->sem);
    if (st != SW_OK || r->sem < 0)
        return sw_cli_fail(S, "--dm %s: no free semaphore", o->dm);
    r->frame = malloc((size_t)w * h * sizeof(float));
    r->u = calloc((size_t)nact, sizeof(float));
    if (!r->frame || !r->u)
        return sw_cli_fail(S, "out of memory");
    if (o->twin && (st = sw_loop_create(ctx, &o->p, &r->twin)) != SW_OK)
        return sw_cli_fail(S, "--twin: %s", sw_cli_lib_error(ctx, st));
    const size_t fbytes = (size_t)w * h * sizeof(float);
    /* lockstep: a chain listening to the camera starts the bench; the mirror starts from what
     * its stream holds (spotwave rtc writes its zero commands before it listens) */
    if (!o->free_run && (rc = wait_chain(o, r)) != SW_EXIT_OK)
        return rc < 0 ? SW_EXIT_OK : rc;
    uint64_t c00 = 0;
    if (sw_stream_cnt0(r->dm) > 0 &&
        (st = sw_stream_read(r->dm, r->u, (size_t)nact * sizeof(float), &c00)) != SW_OK)
        return sw_cli_fail(S, "--dm %s: %s", o->dm, sw_cli_lib_error(ctx, st));
    for (int32_t a = 0; a < nact; a++)
        if (!isfinite(r->u[a]))
            return sw_cli_fail(S, "--dm %s: command %d is not finite", o->dm, (int)a);
    const double t0 = sw_cli_now();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    const long period_ns = (long)(1e9 / o->p.rate_hz);
    for (long k = 1; k <= o->frames && !sw_cli_stop; k++) {
        if (o->free_run) {
            next.tv_nsec += period_ns;
            while (next.tv_nsec >= 1000000000L) {
                next.tv_nsec -= 1000000000L;
                next.tv_sec++;
            }
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
            uint64_t c0 = 0;
            if (sw_stream_cnt0(r->dm) > 0 &&
                (st = sw_stream_read(r->dm, r->u, (size_t)nact * sizeof(float), &c0)) != SW_OK)
                return sw_cli_fail(S, "--dm %s: %s", o->dm, sw_cli_lib_error(ctx, st));
        }
        if (r->twin) {
            if (k >= 2)
                twin_compare(o, r, nact, k - 1);
            sw_loop_frame tf;
            if ((st = sw_loop_step(r->twin, &tf)) != SW_OK)
                return sw_cli_fail(S, "--twin: frame %ld: %s", k, sw_cli_lib_error(ctx, st));
        }
        sw_loop_frame f;
        if ((st = sw_loop_camera(l, r->u, r->frame, &f)) != SW_OK)
            return sw_cli_fail(S, "frame %ld: %s", k, sw_cli_lib_error(ctx, st));
        const uint64_t before = sw_stream_cnt0(r->dm);
        if ((st = sw_stream_write(r->cam, r->frame, fbytes)) != SW_OK)
            return sw_cli_fail(S, "--camera %s: %s", o->camera, sw_cli_lib_error(ctx, st));
        r->frames = k;
        if (k > o->p.warmup) {
            r->residual_sum += f.residual_nm;
            r->turb_sum += f.turbulence_nm;
            r->after_warmup++;
        }
        if (!o->free_run && (rc = wait_dm(ctx, o, r, before, nact)) != SW_EXIT_OK) {
            if (rc > 0)
                return rc;
            break; /* stopped by a signal: the frames so far are reported */
        }
    }
    if (r->twin && r->frames == o->frames)
        twin_compare(o, r, nact, r->frames);
    r->run_s = sw_cli_now() - t0;
    r->long_strehl = sw_loop_long_strehl(l);
    return SW_EXIT_OK;
}

int sw_cmd_sim_bench(const sw_cli_globals *g, int argc, char **argv)
{
    bench_opts *o = calloc(1, sizeof *o);
    if (!o)
        return sw_cli_fail(S, "out of memory");
    int rc = parse_options(argc, argv, o);
    if (rc == -1) {
        free(o);
        return SW_EXIT_OK;
    }
    long frames = 0;
    if (rc == SW_EXIT_OK)
        rc = sw_cli_loop_config(S, o->config, o->nsets, o->sets, &o->p, &frames);
    if (rc == SW_EXIT_OK) {
        if (!o->frames_given)
            o->frames = frames;
        if (o->no_turbulence)
            o->p.turbulence.r0_m = CALM_R0_M;
        if (o->p.delay != 0)
            rc = sw_cli_usage(S,
                              "delay is %d: the bench's own timing is its delay (set delay = "
                              "0)",
                              (int)o->p.delay);
        else if (o->rtc_dir && o->p.recon != SW_LOOP_MVM && o->p.recon != SW_LOOP_DSABRE_LOCAL)
            rc = sw_cli_usage(S, "--rtc-config needs recon = mvm or dsabre-local (the chains "
                                 "spotwave rtc runs)");
    }
    if (rc == SW_EXIT_OK) {
        sw_cli_file_in("--config", o->config);
        if (o->rtc_dir) {
            if (sw_cli_mkdir_p(o->rtc_dir) != 0)
                rc = sw_cli_fail(S, "--rtc-config %s: %s", o->rtc_dir, strerror(errno));
            static const char *const names[3] = {"rtc.conf", "valid.fits", "cm.fits"};
            for (int i = 0; rc == SW_EXIT_OK && i < (o->p.recon == SW_LOOP_MVM ? 3 : 2); i++) {
                char path[4200];
                rtc_path(path, sizeof path, o->rtc_dir, names[i]);
                sw_cli_file_out("--rtc-config", path);
            }
        }
        if (rc == SW_EXIT_OK)
            rc = sw_cli_files_check();
    }
    if (rc != SW_EXIT_OK) {
        free(o);
        return rc;
    }
    sw_context *ctx = NULL;
    if ((rc = sw_cli_context(g, S, &ctx)) != SW_EXIT_OK) {
        free(o);
        return rc;
    }
    sw_cli_catch_stop();
    sw_loop *l = NULL;
    bench_run r;
    memset(&r, 0, sizeof r);
    r.sem = -1;
    sw_status st = sw_loop_create(ctx, &o->p, &l);
    if (st != SW_OK)
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    if (rc == SW_EXIT_OK && o->rtc_dir)
        rc = write_chain(ctx, o, l);
    if (rc == SW_EXIT_OK && o->frames > 0)
        rc = run(ctx, o, l, &r);
    /* a run stopped by a signal compared the frames before the last */
    if (rc == SW_EXIT_OK && r.twin && r.within != r.compared)
        rc = sw_cli_fail(S,
                         "--twin: the commands differ from the in-process simulator's from "
                         "frame %ld (%ld of %ld frames identical, largest difference %.3g of the "
                         "commands' RMS; --twin-tolerance %g)",
                         r.first_diff, r.identical, r.compared, r.max_rel, o->twin_tol);
    if (rc == SW_EXIT_OK || (r.twin && r.frames)) {
        const double res = r.after_warmup ? r.residual_sum / (double)r.after_warmup : NAN;
        const double tur = r.after_warmup ? r.turb_sum / (double)r.after_warmup : NAN;
        if (o->json) {
            cJSON *j = cJSON_CreateObject();
            sw_cli_json_string(j, "command", "sim bench");
            sw_cli_json_string(j, "mode", o->free_run ? "free-run" : "lockstep");
            sw_cli_json_string(j, "camera", o->frames ? o->camera : NULL);
            sw_cli_json_string(j, "dm", o->frames ? o->dm : NULL);
            sw_cli_json_int(j, "frames", r.frames);
            sw_cli_json_int(j, "dm_writes_seen", r.dm_writes);
            sw_cli_json_int(j, "actuators", sw_loop_actuators(l));
            sw_cli_json_double(j, "residual_mean_nm", res);
            sw_cli_json_double(j, "turbulence_mean_nm", tur);
            sw_cli_json_double(j, "long_strehl", r.frames ? r.long_strehl : NAN);
            sw_cli_json_double(j, "run_s", r.run_s);
            sw_cli_json_double(j, "frames_per_s", r.run_s > 0 ? (double)r.frames / r.run_s : NAN);
            if (o->twin) {
                sw_cli_json_int(j, "twin_compared_frames", r.compared);
                sw_cli_json_int(j, "twin_identical_frames", r.identical);
                sw_cli_json_int(j, "twin_first_difference", r.first_diff);
                sw_cli_json_double(j, "twin_max_rel_difference", r.max_rel);
                sw_cli_json_double(j, "twin_tolerance", o->twin_tol);
            }
            sw_cli_json_string(j, "rtc_config", o->rtc_dir);
            sw_cli_json_print(j);
        } else if (r.frames) {
            printf("sim bench: %ld frames (%s), %.1f frames/s; after the warm-up residual %.1f nm "
                   "(turbulence %.1f nm), long-exposure Strehl %.3f\n",
                   r.frames, o->free_run ? "free run" : "lockstep",
                   r.run_s > 0 ? (double)r.frames / r.run_s : NAN, res, tur, r.long_strehl);
            if (o->twin)
                printf("twin: %ld of %ld frames' commands identical to the in-process "
                       "simulator's\n",
                       r.identical, r.frames);
        } else if (o->rtc_dir)
            printf("sim bench: the chain written to %s (rtc.conf, valid.fits, and cm.fits or "
                   "filter.fits where needed)\n",
                   o->rtc_dir);
    }
    if (r.dm && r.sem >= 0)
        sw_stream_release_semaphore(r.dm, r.sem);
    sw_stream_close(r.cam);
    sw_stream_close(r.dm);
    sw_loop_destroy(r.twin);
    free(r.frame);
    free(r.u);
    sw_loop_destroy(l);
    sw_context_destroy(ctx);
    free(o);
    return rc;
}
