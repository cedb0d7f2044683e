/*
 * bench_rtc_stream: the real-time chain as a process between image streams (issue 27's
 * benchmark): the latency from a camera frame's write (its semaphore posts) to the mirror
 * commands' write, `spotwave rtc` in a child process, beside the in-process latency of the same
 * chain (sw_rtc_run on the same frames, no streams).
 *
 * The chain: a Shack-Hartmann sensor of --nx N lenslets per side (default 40; --quick 8), 8 px
 * per lenslet (N 8 x N 8 px frames, u16 or f32: --type), a circular pupil across the array,
 * valid lenslets those lit to more than half (the simulator's illuminated fraction), a dark
 * threshold subtracted, centre-of-gravity centroids (Mocci et al. 2020, J. Opt. Soc. Am. A
 * 37(10), 1548), the slopes (2 ns), a control matrix, an integrator (gain 0.5), the commands. The
 * mirror: the Fried actuators at the corners of valid lenslets (nact). The control matrix is a
 * random dense matrix of that shape (uniform in +-1e-3, a fixed seed): the latency of a dense
 * matrix-vector product does not depend on the values (bench_loop --latency measures a real one
 * at 40 x 40). Its files (rtc.conf, cm.fits, valid.fits) are written to a temporary folder in
 * $TMPDIR (else /tmp), the streams to one in /dev/shm (a tmpfs) when it exists (else beside the
 * files); both are removed at the end.
 *
 * The frames: a ring of --ring frames (default 16) rendered before the run by the simulator's
 * GEOMETRIC model (Gaussian spots; a few random low-order Zernike terms per frame, 5000 e- per
 * lenslet, plus a bias of 100 counts), so the camera costs a memcpy per frame.
 *
 * Modes (--modes, a list of inproc, sem, spin; default all three), --frames frames each (default
 * 10^5; 10^6 for the record; --quick 2000), paced at --rate Hz (default 2000) by
 * clock_nanosleep to absolute deadlines (CLOCK_MONOTONIC):
 *   inproc  sw_rtc_run on the ring's frames in this process (host frames, pinned on CUDA),
 *           timed by the host clock; "missed": runs longer than one frame period.
 *   sem     `spotwave [--backend B] rtc --wait sem --telemetry T --json --frames N` as a child
 *           (fork + exec of the spotwave command built with this program, or --cli PATH /
 *           $SPOTWAVE_CLI), this process the camera: each frame is written to the camera stream
 *           (sw_stream_write: memcpy, write time, cnt0, semaphore posts). Two figures per run:
 *             rtc     the child's own summary: camera write time (the stream's writetime,
 *                     CLOCK_TAI) -> the end of its write of the commands (every semaphore
 *                     posted); the camera frames it never took ("missed");
 *             outside measured here: a thread sleeping on a semaphore of the commands stream
 *                     takes its wake-up time (CLOCK_TAI) for every commands update and subtracts
 *                     the write time of the camera frame it answers, which it reads from the
 *                     chain's telemetry row of that update (written after the commands: the
 *                     frame's cnt0). This includes the reader's own wake-up: what a mirror
 *                     process waiting on the stream sees. It can come out below the child's
 *                     figure: the reader holds the first semaphore and may wake while the
 *                     child still posts the others. "missed": updates the reader could not
 *                     match to a frame (it came after the next one).
 *           The child writes the telemetry row (2 + 2 ns + nact doubles) after the commands of
 *           every frame: work in the frame period, outside its latency.
 *   spin    the same with --wait spin (the child polls cnt0: a core busy).
 * The stream figures' floor over the in-process one: the wake-up of the chain on the camera's
 * semaphore (spin: a poll), the copy of the frame out of the stream, the commands' write and
 * posts, and (outside) the wake-up of the commands' reader. Times are doubles of CLOCK_TAI
 * seconds (the stream's format), a rounding of ~0.25 us.
 * Memory: the child's VmRSS (/proc/PID/status) when it is ready, after a second of frames
 * ("start") and just before the last frame ("end"): the soak's "no memory growth". --soak prints
 * it (and the frames so far) every 10 s on stderr. The child's latency histogram (4 MB of 0.1 us
 * bins, zeroed pages) is mapped in as new latencies land in new pages: a few pages of growth
 * where the latencies spread (a slow, loaded machine) are that, not a leak.
 * A child that missed frames never reaches --frames: it is stopped by SIGINT 2 s after the last
 * frame (its summary still comes).
 *
 * Options (besides the harness's --backend, --threads, --quick, --json-only; --reps, --warmup and
 * --budget are not used): --nx N, --type u16|f32, --rate HZ, --frames N, --ring N, --modes LIST,
 * --cli PATH, --rtc-cpu N (the child's --cpu), --rtc-fifo P (the child's --fifo), --soak.
 * Output: one JSON line per figure on stdout ("bench":"rtc_stream"), a table on stderr.
 */
#define _GNU_SOURCE

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "spotwave/stream.h"

#define PROG "bench_rtc_stream"

#ifndef SW_CLI_PATH
#define SW_CLI_PATH "spotwave"
#endif

#define PITCH_PX     8
#define FLUX_E       5e3
#define BIAS         100.0
#define THRESHOLD    106.0 /* bias + 3 x 2 e- read noise, as a real sensor's */
#define CM_AMPLITUDE 1e-3
#define MODE_INPROC  1
#define MODE_SEM     2
#define MODE_SPIN    4
#define MAX_FRAMES   10000000L
#define SOAK_S       10.0
#define CAM_NAME     "swb_cam"
#define DM_NAME      "swb_dm"
#define TEL_NAME     "swb_tel"

typedef struct prog_opts {
    int nx;
    sw_pixel_type type;
    double rate;
    long frames; /* 0: the default */
    int ring;
    int modes;
    const char *cli;
    int rtc_cpu, rtc_fifo;
    int soak;
    sw_bench_options b;
} prog_opts;

static const char extra_help[] =
    "The latency of `spotwave rtc` between image streams (camera frame written -> commands\n"
    "written / seen by a reader), beside the in-process latency of the same chain.\n"
    "Options:\n"
    "  --nx N                   lenslets per side, 8 px each (default 40; --quick 8)\n"
    "  --type u16|f32           camera pixels (default u16)\n"
    "  --rate HZ                frame rate (default 2000)\n"
    "  --frames N               frames per mode (default 100000; --quick 2000)\n"
    "  --ring N                 pre-rendered frames played in turn (default 16)\n"
    "  --modes LIST             of inproc,sem,spin (default all)\n"
    "  --cli PATH               the spotwave command (default: $SPOTWAVE_CLI, else the one\n"
    "                           built with this program)\n"
    "  --rtc-cpu N              the child's --cpu N (pin it to core N)\n"
    "  --rtc-fifo P             the child's --fifo P (SCHED_FIFO; needs the right)\n"
    "  --soak                   the child's memory (VmRSS) every 10 s on stderr\n"
    "--reps, --warmup and --budget are not used: every frame counts.\n";

static int usage_error(const char *opt, const char *v, const char *what)
{
    fprintf(stderr, "%s: %s: '%s' is not %s (see '%s --help')\n", PROG, opt, v, what, PROG);
    return 2;
}

static int parse_long(const char *v, long lo, long hi, long *out)
{
    char *e = NULL;
    errno = 0;
    const long k = strtol(v, &e, 10);
    if (errno || e == v || *e || k < lo || k > hi)
        return 1;
    *out = k;
    return 0;
}

/* Takes this program's options out of argv (the harness refuses what it does not know). */
static int parse_own(int *argc, char **argv, prog_opts *o)
{
    int n = 1;
    o->type = SW_PIX_U16;
    o->rate = 2000.0;
    o->ring = 16;
    o->rtc_cpu = -1;
    const char *env = getenv("SPOTWAVE_CLI");
    o->cli = env && *env ? env : SW_CLI_PATH;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--soak") == 0) {
            o->soak = 1;
            continue;
        }
        static const char *const valued[] = {"--nx",     "--type",    "--rate",
                                             "--frames", "--ring",    "--modes",
                                             "--cli",    "--rtc-cpu", "--rtc-fifo"};
        int k = -1;
        for (int j = 0; j < (int)(sizeof valued / sizeof valued[0]); j++)
            if (strcmp(a, valued[j]) == 0)
                k = j;
        if (k < 0) {
            argv[n++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc) {
            fprintf(stderr, "%s: %s needs a value (see '%s --help')\n", PROG, a, PROG);
            return 2;
        }
        const char *v = argv[++i];
        long x = 0;
        switch (k) {
        case 0:
            if (parse_long(v, 2, 400, &x))
                return usage_error(a, v, "a whole number in 2..400");
            o->nx = (int)x;
            break;
        case 1:
            if (strcmp(v, "u16") == 0)
                o->type = SW_PIX_U16;
            else if (strcmp(v, "f32") == 0)
                o->type = SW_PIX_F32;
            else
                return usage_error(a, v, "u16 or f32");
            break;
        case 2: {
            char *e = NULL;
            o->rate = strtod(v, &e);
            if (e == v || *e || !(o->rate >= 1.0 && o->rate <= 1e5))
                return usage_error(a, v, "a rate in 1..100000 Hz");
            break;
        }
        case 3:
            if (parse_long(v, 1, MAX_FRAMES, &o->frames))
                return usage_error(a, v, "a whole number in 1..10000000");
            break;
        case 4:
            if (parse_long(v, 1, 1024, &x))
                return usage_error(a, v, "a whole number in 1..1024");
            o->ring = (int)x;
            break;
        case 5: {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", v);
            char *save = NULL;
            for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (strcmp(t, "inproc") == 0)
                    o->modes |= MODE_INPROC;
                else if (strcmp(t, "sem") == 0)
                    o->modes |= MODE_SEM;
                else if (strcmp(t, "spin") == 0)
                    o->modes |= MODE_SPIN;
                else
                    return usage_error(a, v, "a list of inproc, sem, spin");
            }
            if (!o->modes)
                return usage_error(a, v, "a list of inproc, sem, spin");
            break;
        }
        case 6: o->cli = v; break;
        case 7:
            if (parse_long(v, 0, 1023, &x))
                return usage_error(a, v, "a core number in 0..1023");
            o->rtc_cpu = (int)x;
            break;
        default:
            if (parse_long(v, 1, 99, &x))
                return usage_error(a, v, "a priority in 1..99");
            o->rtc_fifo = (int)x;
            break;
        }
    }
    *argc = n;
    argv[n] = NULL;
    if (!o->modes)
        o->modes = MODE_INPROC | MODE_SEM | MODE_SPIN;
    return SW_BENCH_CONTINUE;
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    const char *m = ctx ? sw_context_error(ctx) : NULL;
    fprintf(stderr, "%s: %s: %s\n", PROG, what, m && m[0] ? m : sw_status_string(st));
    return 1;
}

static int oom(void)
{
    fprintf(stderr, "%s: out of memory\n", PROG);
    return 1;
}

/* ---------------------------------------------------------------- clocks */

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sleep_until(const struct timespec *t)
{
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, t, NULL) == EINTR) {
    }
}

static void ts_add_ns(struct timespec *t, long long ns)
{
    long long total = (long long)t->tv_nsec + ns;
    t->tv_sec += (time_t)(total / 1000000000LL);
    t->tv_nsec = (long)(total % 1000000000LL);
}

static double ts_s(const struct timespec *t)
{
    return (double)t->tv_sec + 1e-9 * (double)t->tv_nsec;
}

/* ---------------------------------------------------------------- the system */

typedef struct sys {
    int32_t nx, width, height, ns, nact;
    sw_pixel_type type;
    uint8_t *valid; /* nx x nx */
    float *cm;      /* nact x 2 ns */
    void **ring;    /* frames, tight rows */
    int nring;
    size_t frame_bytes;
    char dir[256];  /* the streams: in /dev/shm (tmpfs) when it exists */
    char fdir[256]; /* the chain's files: in $TMPDIR or /tmp (/dev/shm may be small) */
    char conf[300], cmf[300], vf[300];
} sys;

static void sys_free(sys *s)
{
    if (s->ring)
        for (int i = 0; i < s->nring; i++)
            free(s->ring[i]);
    free(s->ring);
    free(s->valid);
    free(s->cm);
    memset(s, 0, sizeof *s);
}

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static double uniform(uint64_t *x)
{
    return (double)(splitmix(x) >> 11) * 0x1.0p-52 - 1.0;
}

static void geometry(const sys *s, sw_sh_geometry *g)
{
    sw_sh_geometry_default(g);
    g->nx = g->ny = s->nx;
    g->pitch_px = PITCH_PX;
    g->x0 = g->y0 = 0.0;
}

/* Renders the ring (on a CPU context: only the pixels matter) and finds the valid lenslets. */
static int render(sw_context *cpu, sys *s)
{
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    geometry(s, &sp.geom);
    sp.width = s->width;
    sp.height = s->height;
    sp.model = SW_SH_GEOMETRIC;
    sp.flux_e = FLUX_E;
    sp.samples = 8;
    const double diam = s->nx * sw_sh_lenslet_um(&sp.geom);
    sp.pupil = sw_pupil_circle(diam);
    sp.min_illum = 0.5;
    sw_shsim *sim = NULL;
    sw_image img;
    memset(&img, 0, sizeof img);
    sw_status st = sw_shsim_create(cpu, &sp, &sim);
    if (st != SW_OK)
        return fail(cpu, "sw_shsim_create", st);
    if ((st = sw_image_alloc(cpu, s->width, s->height, SW_PIX_F32, &img)) != SW_OK) {
        sw_shsim_destroy(sim);
        return fail(cpu, "sw_image_alloc", st);
    }
    int rc = 0;
    sw_sh_truth t;
    memset(&t, 0, sizeof t);
    if ((st = sw_shsim_truth(sim, &t)) != SW_OK) {
        rc = fail(cpu, "sw_shsim_truth", st);
        goto done;
    }
    const size_t nl = (size_t)s->nx * s->nx;
    s->valid = calloc(nl, 1);
    s->ring = calloc((size_t)s->nring, sizeof *s->ring);
    if (!s->valid || !s->ring) {
        rc = oom();
        goto done;
    }
    s->ns = 0;
    for (size_t l = 0; l < nl; l++) {
        s->valid[l] = t.illum[l] > 0.5;
        s->ns += s->valid[l];
    }
    const size_t npx = (size_t)s->width * s->height;
    s->frame_bytes = npx * sw_pixel_size(s->type);
    uint64_t seed = 27;
    for (int k = 0; k < s->nring && rc == 0; k++) {
        double coef[10] = {0};
        for (int j = 1; j < 10; j++) /* tilts to astigmatism and coma: a few tenths of a pixel */
            coef[j] = 0.2 * uniform(&seed);
        if ((st = sw_shsim_clear_opd(sim)) != SW_OK ||
            (st = sw_shsim_add_zernike(sim, coef, 10, 0.5 * diam)) != SW_OK ||
            (st = sw_shsim_run(sim, &img, 0)) != SW_OK) {
            rc = fail(cpu, "rendering the frames", st);
            break;
        }
        if (!(s->ring[k] = aligned_alloc(64, (s->frame_bytes + 63) / 64 * 64))) {
            rc = oom();
            break;
        }
        for (int32_t y = 0; y < s->height; y++) {
            const float *src = sw_image_row(&img, y);
            for (int32_t x = 0; x < s->width; x++) {
                const double v = (double)src[x] + BIAS;
                const size_t i = (size_t)y * s->width + x;
                if (s->type == SW_PIX_U16)
                    ((uint16_t *)s->ring[k])[i] = (uint16_t)fmin(65535.0, floor(v + 0.5));
                else
                    ((float *)s->ring[k])[i] = (float)v;
            }
        }
    }
done:
    sw_sh_truth_free(&t);
    sw_image_free(&img);
    sw_shsim_destroy(sim);
    return rc;
}

/* The Fried actuators at the corners of valid lenslets, and a random control matrix. */
static int make_cm(sys *s)
{
    const int32_t n = s->nx, na = n + 1;
    s->nact = 0;
    for (int32_t y = 0; y < na; y++)
        for (int32_t x = 0; x < na; x++) {
            int used = 0;
            for (int dy = -1; dy <= 0; dy++)
                for (int dx = -1; dx <= 0; dx++) {
                    const int32_t lx = x + dx, ly = y + dy;
                    if (lx >= 0 && lx < n && ly >= 0 && ly < n && s->valid[(size_t)ly * n + lx])
                        used = 1;
                }
            s->nact += used;
        }
    const size_t count = (size_t)s->nact * 2 * (size_t)s->ns;
    if (!(s->cm = malloc(count * sizeof *s->cm)))
        return oom();
    uint64_t seed = 11;
    for (size_t i = 0; i < count; i++)
        s->cm[i] = (float)(CM_AMPLITUDE * uniform(&seed));
    return 0;
}

/* rtc.conf, cm.fits, valid.fits in s->fdir. */
static int write_files(sw_context *cpu, sys *s)
{
    snprintf(s->conf, sizeof s->conf, "%s/rtc.conf", s->fdir);
    snprintf(s->cmf, sizeof s->cmf, "%s/cm.fits", s->fdir);
    snprintf(s->vf, sizeof s->vf, "%s/valid.fits", s->fdir);
    sw_image img;
    sw_status st = sw_image_wrap(s->cm, 2 * s->ns, s->nact, 0, SW_PIX_F32, SW_MEM_HOST, &img);
    if (st == SW_OK)
        st = sw_fits_write(cpu, s->cmf, &img, 1);
    if (st != SW_OK)
        return fail(cpu, s->cmf, st);
    st = sw_image_wrap(s->valid, s->nx, s->nx, 0, SW_PIX_U8, SW_MEM_HOST, &img);
    if (st == SW_OK)
        st = sw_fits_write(cpu, s->vf, &img, 1);
    if (st != SW_OK)
        return fail(cpu, s->vf, st);
    sw_sh_geometry g;
    geometry(s, &g);
    FILE *f = fopen(s->conf, "w");
    if (!f) {
        fprintf(stderr, "%s: %s: %s\n", PROG, s->conf, strerror(errno));
        return 1;
    }
    fprintf(f,
            "# bench_rtc_stream: %d x %d lenslets of %d px, random control matrix %d x %d\n"
            "nx = %d\nny = %d\npitch_px = %d\nx0 = 0\ny0 = 0\npixel_um = %.17g\n"
            "focal_mm = %.17g\nvalid = valid.fits\nthreshold = %.17g\ncm = cm.fits\n"
            "controller = integrator\ngain = 0.5\n",
            (int)s->nx, (int)s->nx, PITCH_PX, (int)s->nact, (int)(2 * s->ns), (int)s->nx,
            (int)s->nx, PITCH_PX, g.pixel_um, g.focal_mm, THRESHOLD);
    const int bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) {
        fprintf(stderr, "%s: %s: write failed\n", PROG, s->conf);
        return 1;
    }
    return 0;
}

static void remove_files(sw_context *cpu, sys *s)
{
    if (!s->fdir[0])
        return;
    unlink(s->conf);
    unlink(s->cmf);
    unlink(s->vf);
    sw_stream_remove(cpu, s->dir, CAM_NAME);
    sw_stream_remove(cpu, s->dir, DM_NAME);
    sw_stream_remove(cpu, s->dir, TEL_NAME);
    if (strcmp(s->dir, s->fdir) != 0)
        rmdir(s->dir);
    rmdir(s->fdir);
}

/* ---------------------------------------------------------------- results */

typedef struct row {
    char mode[16], measured[48];
    long frames; /* frames with a figure */
    double median, p99, max, mean;
    long missed;     /* -1: not applicable */
    long rss0, rss1; /* kB, -1: not applicable */
    double late_max; /* producer: the latest write behind its deadline, us (stream modes) */
} row;

#define MAX_ROWS 8
static row rows[MAX_ROWS];
static int nrows;

static void emit(const prog_opts *o, sw_context *ctx, const sys *s, const row *r)
{
    char device[256], config[128];
    sw_bench_device_name(ctx, device, sizeof device);
    snprintf(config, sizeof config, "%dx%d %s %dx%d, %d slopes, %d act, %.0f Hz", (int)s->nx,
             (int)s->nx, s->type == SW_PIX_U16 ? "u16" : "f32", (int)s->width, (int)s->height,
             (int)(2 * s->ns), (int)s->nact, o->rate);
    printf("{\"bench\":\"rtc_stream\",\"config\":");
    sw_json_write_string(stdout, config);
    printf(",\"backend\":\"%s\",\"device\":", sw_backend_string(sw_context_backend(ctx)));
    sw_json_write_string(stdout, device);
    printf(",\"threads\":%d,\"mode\":\"%s\",\"measured\":\"%s\",\"frames\":%ld",
           sw_context_threads(ctx), r->mode, r->measured, r->frames);
    const double v[4] = {r->median, r->p99, r->max, r->mean};
    static const char *const k[4] = {"median_us", "p99_us", "max_us", "mean_us"};
    for (int i = 0; i < 4; i++) {
        if (isfinite(v[i]))
            printf(",\"%s\":%.6g", k[i], v[i]);
        else
            printf(",\"%s\":null", k[i]);
    }
    if (r->missed >= 0)
        printf(",\"missed\":%ld", r->missed);
    if (r->rss0 >= 0)
        printf(",\"rss_start_kb\":%ld,\"rss_end_kb\":%ld", r->rss0, r->rss1);
    if (isfinite(r->late_max))
        printf(",\"producer_late_max_us\":%.6g", r->late_max);
    printf(",\"rate_hz\":%.6g,\"lenslets\":%d,\"slopes\":%d,\"actuators\":%d,\"cm\":\"random\"}\n",
           o->rate, (int)s->nx, (int)(2 * s->ns), (int)s->nact);
    fflush(stdout);
    if (nrows < MAX_ROWS)
        rows[nrows++] = *r;
}

/* median, p99 (nearest rank), max, mean of n samples (sorted in place) into r */
static void stats(double *v, long n, row *r)
{
    r->frames = n;
    r->median = r->p99 = r->max = r->mean = NAN;
    if (n <= 0)
        return;
    sw_bench_result b;
    sw_bench_stats(v, (int)n, &b);
    r->median = b.median_us;
    r->p99 = b.p99_us;
    r->max = b.max_us;
    r->mean = b.mean_us;
}

/* ---------------------------------------------------------------- in process */

static int run_inproc(const prog_opts *o, sw_context *ctx, const sys *s, long frames)
{
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    sw_centroid_params *cp = &rp.centroid;
    geometry(s, &cp->geometry);
    cp->geometry.valid = s->valid;
    cp->width = s->width;
    cp->height = s->height;
    cp->type = s->type;
    cp->max_frames = 1;
    cp->path = SW_CENTROID_AUTO;
    cp->threshold_mode = SW_THRESHOLD_SUBTRACT;
    cp->threshold_kind = SW_THRESHOLD_ABSOLUTE;
    cp->threshold = THRESHOLD;
    rp.recon = SW_RTC_MVM;
    rp.nact = s->nact;
    rp.cm = s->cm;
    rp.controller.nact = s->nact;
    sw_rtc *rtc = NULL;
    sw_status st = sw_rtc_create(ctx, &rp, &rtc);
    if (st != SW_OK)
        return fail(ctx, "sw_rtc_create", st);
    int rc = 0;
    sw_image *img = calloc((size_t)s->nring, sizeof *img);
    float *u = malloc((size_t)s->nact * sizeof *u);
    float *sl = malloc(2 * (size_t)s->ns * sizeof *sl);
    double *lat = malloc((size_t)frames * sizeof *lat);
    if (!img || !u || !sl || !lat) {
        rc = oom();
        goto done;
    }
    for (int k = 0; k < s->nring; k++) {
        /* as the child holds its frame: sw_image_alloc (pinned on CUDA) */
        if ((st = sw_image_alloc(ctx, s->width, s->height, s->type, &img[k])) != SW_OK) {
            rc = fail(ctx, "sw_image_alloc", st);
            goto done;
        }
        const size_t rb = (size_t)s->width * sw_pixel_size(s->type);
        for (int32_t y = 0; y < s->height; y++)
            memcpy(sw_image_row(&img[k], y), (const char *)s->ring[k] + (size_t)y * rb, rb);
    }
    const long long period_ns = (long long)llround(1e9 / o->rate);
    const double period_us = 1e-3 * (double)period_ns;
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    ts_add_ns(&due, 10 * period_ns);
    long missed = 0;
    double next_soak = mono_s() + SOAK_S;
    for (long i = 0; i < frames; i++) {
        sleep_until(&due);
        const double t0 = sw_bench_now_us();
        if ((st = sw_rtc_run(rtc, &img[i % s->nring], u, sl)) != SW_OK) {
            rc = fail(ctx, "sw_rtc_run", st);
            goto done;
        }
        lat[i] = sw_bench_now_us() - t0;
        missed += lat[i] > period_us;
        ts_add_ns(&due, period_ns);
        if (o->soak && mono_s() >= next_soak) {
            fprintf(stderr, "%s: soak: in-process, %ld frames\n", PROG, i + 1);
            next_soak += SOAK_S;
        }
    }
    row r;
    memset(&r, 0, sizeof r);
    snprintf(r.mode, sizeof r.mode, "inproc");
    snprintf(r.measured, sizeof r.measured, "sw_rtc_run");
    stats(lat, frames, &r);
    r.missed = missed;
    r.rss0 = r.rss1 = -1;
    r.late_max = NAN;
    emit(o, ctx, s, &r);
done:
    if (img)
        for (int k = 0; k < s->nring; k++)
            sw_image_free(&img[k]);
    free(img);
    free(u);
    free(sl);
    free(lat);
    sw_rtc_destroy(rtc);
    return rc;
}

/* ---------------------------------------------------------------- through streams */

/* VmRSS of a process in kB; -1 when it cannot be read. */
static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

typedef struct observer {
    sw_stream *dm, *tel;
    int32_t sem, tsem;
    uint64_t base, tbase; /* the commands' and the telemetry's cnt0 before the first frame */
    long frames;
    size_t row_len; /* telemetry row, doubles */
    double *row;
    double *wake; /* [1..frames]: CLOCK_TAI seconds of the wake-up for update k; 0: none */
    int64_t *cam; /* [1..frames]: the camera frame (its cnt0) that update k answers; 0: unknown */
    long skipped; /* updates not matched to their camera frame (the reader came too late) */
    atomic_llong final; /* the commands' last cnt0 once the chain has ended; -1 before */
    volatile int stop;
    atomic_int done;
} observer;

/* The commands' reader: sleeps on the commands stream's semaphore and takes the time it wakes;
 * then reads the chain's telemetry row of that update (written after the commands) for the camera
 * frame it answers. */
static void *observe(void *arg)
{
    observer *ob = arg;
    uint64_t last = ob->base;
    while (!ob->stop) {
        const long long final = atomic_load(&ob->final);
        if (final >= 0 && last >= (uint64_t) final)
            break;
        uint64_t c = 0, tc = 0;
        sw_status st =
            sw_stream_wait(ob->dm, SW_STREAM_WAIT_SEM, ob->sem, last, 0.1, &ob->stop, &c);
        if (st != SW_OK)
            continue; /* timeout or stop: check the flag */
        const double t = sw_stream_clock_now();
        const uint64_t k = c - ob->base;
        if (c > last + 1)
            ob->skipped += (long)(c - last - 1);
        last = c;
        if (k < 1 || k > (uint64_t)ob->frames)
            continue;
        st = sw_stream_wait(ob->tel, SW_STREAM_WAIT_SEM, ob->tsem, ob->tbase + k - 1, 1.0,
                            &ob->stop, &tc);
        if (st == SW_OK)
            st = sw_stream_read(ob->tel, ob->row, ob->row_len * sizeof(double), &tc);
        if (st != SW_OK || tc != ob->tbase + k) {
            ob->skipped++; /* the row of update k is gone (or never came) */
            continue;
        }
        ob->wake[k] = t;
        ob->cam[k] = (int64_t)ob->row[0];
    }
    atomic_store(&ob->done, 1);
    return NULL;
}

/* The child's summary (one JSON object): where the value of "key" starts; NULL when absent. */
static const char *json_value(const char *json, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    /* the key, not a string value that reads the same ("stopped_by": "frames") */
    for (const char *p = strstr(json, pat); p; p = strstr(p + 1, pat)) {
        const char *q = p + strlen(pat);
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
            q++;
        if (*q != ':')
            continue;
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
            q++;
        return q;
    }
    return NULL;
}

/* The number of "key" (NAN when absent or not a number). */
static double json_field(const char *json, const char *key)
{
    const char *p = json_value(json, key);
    if (!p)
        return NAN;
    char *e = NULL;
    const double v = strtod(p, &e);
    return e == p ? NAN : v;
}

/* 1 when "key" is the string want. */
static int json_string_is(const char *json, const char *key, const char *want)
{
    const char *p = json_value(json, key);
    const size_t n = strlen(want);
    return p && p[0] == '"' && strncmp(p + 1, want, n) == 0 && p[1 + n] == '"';
}

/* Waits up to seconds for the child; 1 when it exited (status in *status), 0 otherwise. */
static int wait_child(pid_t pid, double seconds, int *status)
{
    const double end = mono_s() + seconds;
    for (;;) {
        const pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid)
            return 1;
        if (w < 0 && errno != EINTR)
            return 1;
        if (mono_s() >= end)
            return 0;
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
    }
}

static pid_t spawn_rtc(const prog_opts *o, sw_context *ctx, const sys *s, const char *wait,
                       long frames, int out_fd)
{
    char nframes[32], cpu[16], fifo[16], threads[16];
    snprintf(nframes, sizeof nframes, "%ld", frames);
    snprintf(cpu, sizeof cpu, "%d", o->rtc_cpu);
    snprintf(fifo, sizeof fifo, "%d", o->rtc_fifo);
    snprintf(threads, sizeof threads, "%d", o->b.threads);
    const char *argv[40];
    int n = 0;
    argv[n++] = o->cli;
    argv[n++] = "--backend";
    argv[n++] = sw_backend_string(sw_context_backend(ctx));
    if (o->b.threads > 0) {
        argv[n++] = "--threads";
        argv[n++] = threads;
    }
    argv[n++] = "rtc";
    argv[n++] = "--config";
    argv[n++] = s->conf;
    argv[n++] = "--in";
    argv[n++] = CAM_NAME;
    argv[n++] = "--out";
    argv[n++] = DM_NAME;
    argv[n++] = "--telemetry";
    argv[n++] = TEL_NAME;
    argv[n++] = "--dir";
    argv[n++] = s->dir;
    argv[n++] = "--wait";
    argv[n++] = wait;
    argv[n++] = "--frames";
    argv[n++] = nframes;
    argv[n++] = "--json";
    argv[n++] = "--no-status";
    if (o->rtc_cpu >= 0) {
        argv[n++] = "--cpu";
        argv[n++] = cpu;
    }
    if (o->rtc_fifo > 0) {
        argv[n++] = "--fifo";
        argv[n++] = fifo;
    }
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        dup2(out_fd, 1);
        close(out_fd);
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", PROG, argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static int make_stream(sw_context *ctx, const sys *s, const char *name, int naxis, uint32_t w,
                       uint32_t h, sw_stream_type t, sw_stream **out)
{
    sw_stream_params p;
    sw_stream_params_default(&p);
    p.name = name;
    p.naxis = naxis;
    p.size[0] = w;
    p.size[1] = h;
    p.size[2] = 1;
    p.type = t;
    const sw_status st = sw_stream_create(ctx, s->dir, &p, out);
    return st == SW_OK ? 0 : fail(ctx, name, st);
}

static int run_stream(const prog_opts *o, sw_context *ctx, const sys *s, int spin, long frames)
{
    const char *wait = spin ? "spin" : "sem";
    sw_stream *cam = NULL, *dm = NULL, *tel = NULL;
    observer ob;
    memset(&ob, 0, sizeof ob);
    ob.sem = ob.tsem = -1;
    atomic_init(&ob.final, -1);
    ob.row_len = 2 + 2 * (size_t)s->ns + (size_t)s->nact;
    double *wt = NULL, *lat = NULL;
    int pipefd[2] = {-1, -1};
    pid_t pid = -1;
    pthread_t thread;
    int have_thread = 0, rc = 0, exited = 0;
    int status = 1 << 8; /* as exit code 1 until the child's is known */
    long rss_ready = -1, rss0 = -1, rss1 = -1;
    double late_max = 0.0; /* producer: us behind its deadline, the worst */
    char json[8192];
    size_t jn = 0;
    json[0] = '\0';

    if ((rc = make_stream(ctx, s, CAM_NAME, 2, (uint32_t)s->width, (uint32_t)s->height,
                          sw_stream_type_from_pixel(s->type), &cam)) != 0 ||
        (rc = make_stream(ctx, s, DM_NAME, 1, (uint32_t)s->nact, 1, SW_STREAM_F32, &dm)) != 0 ||
        (rc = make_stream(ctx, s, TEL_NAME, 1, (uint32_t)ob.row_len, 1, SW_STREAM_F64, &tel)) != 0)
        goto done;
    wt = calloc((size_t)frames, sizeof *wt);
    ob.wake = calloc((size_t)frames + 1, sizeof *ob.wake);
    ob.cam = calloc((size_t)frames + 1, sizeof *ob.cam);
    ob.row = malloc(ob.row_len * sizeof *ob.row);
    lat = malloc((size_t)frames * sizeof *lat);
    if (!wt || !ob.wake || !ob.cam || !ob.row || !lat) {
        rc = oom();
        goto done;
    }
    /* the commands' reader holds its semaphores before the chain's first post */
    sw_status st = sw_stream_claim_semaphore(dm, &ob.sem);
    if (st == SW_OK)
        st = sw_stream_claim_semaphore(tel, &ob.tsem);
    if (st != SW_OK || ob.sem < 0 || ob.tsem < 0) {
        rc = fail(ctx, "claiming a semaphore of the commands and telemetry streams", st);
        goto done;
    }
    if (pipe(pipefd) != 0) {
        fprintf(stderr, "%s: pipe: %s\n", PROG, strerror(errno));
        rc = 1;
        goto done;
    }
    pid = spawn_rtc(o, ctx, s, wait, frames, pipefd[1]);
    close(pipefd[1]);
    pipefd[1] = -1;
    if (pid < 0) {
        fprintf(stderr, "%s: fork: %s\n", PROG, strerror(errno));
        rc = 1;
        goto done;
    }
    /* ready: the chain has written its first (zero) commands and holds a camera semaphore */
    const double t_ready = mono_s() + 120.0;
    while (sw_stream_readers(cam) < 1) {
        if (wait_child(pid, 0.0, &status)) {
            exited = 1;
            fprintf(stderr, "%s: %s rtc (%s) ended before its first frame\n", PROG, o->cli, wait);
            rc = 1;
            goto done;
        }
        if (mono_s() > t_ready) {
            fprintf(stderr, "%s: %s rtc (%s) not ready after 120 s\n", PROG, o->cli, wait);
            rc = 1;
            goto done;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    rss_ready = rss_kb(pid);
    ob.dm = dm;
    ob.tel = tel;
    ob.base = sw_stream_cnt0(dm);
    ob.tbase = sw_stream_cnt0(tel);
    ob.frames = frames;
    sw_stream_flush_semaphore(dm, ob.sem);
    sw_stream_flush_semaphore(tel, ob.tsem);
    if (pthread_create(&thread, NULL, observe, &ob) != 0) {
        fprintf(stderr, "%s: cannot start the commands' reader\n", PROG);
        rc = 1;
        goto done;
    }
    have_thread = 1;

    /* the camera */
    const long long period_ns = (long long)llround(1e9 / o->rate);
    const long warm = (long)fmin((double)(frames - 1), o->rate); /* a second of frames */
    struct timespec due;
    clock_gettime(CLOCK_MONOTONIC, &due);
    ts_add_ns(&due, 20000000LL); /* 20 ms: the reader thread is asleep on its semaphore */
    double next_soak = mono_s() + SOAK_S;
    sw_stream_info info;
    for (long i = 0; i < frames; i++) {
        if (i == warm)
            rss0 = rss_kb(pid);
        if (i == frames - 1)
            rss1 = rss_kb(pid); /* before the last frame: the child ends after it */
        sleep_until(&due);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        const double late = 1e6 * (ts_s(&now) - ts_s(&due));
        late_max = late > late_max ? late : late_max;
        if ((st = sw_stream_write(cam, s->ring[i % s->nring], s->frame_bytes)) != SW_OK) {
            rc = fail(ctx, "writing the camera stream", st);
            goto done;
        }
        sw_stream_get_info(cam, &info);
        wt[i] = info.write_time;
        ts_add_ns(&due, period_ns);
        if (o->soak && mono_s() >= next_soak) {
            fprintf(stderr, "%s: soak: %s, %ld frames, rtc VmRSS %ld kB\n", PROG, wait, i + 1,
                    rss_kb(pid));
            next_soak += SOAK_S;
        }
    }
    /* the last answers, then the child's end (a signal when it missed frames: --frames is never
     * reached then) */
    exited = wait_child(pid, 2.0, &status);
    if (!exited) {
        kill(pid, SIGINT);
        exited = wait_child(pid, 10.0, &status);
    }
    /* the reader takes the updates still queued, then ends */
    atomic_store(&ob.final, (long long)sw_stream_cnt0(dm));
    const double t_end = mono_s() + 2.0;
    while (!atomic_load(&ob.done) && mono_s() < t_end) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }

done:
    if (have_thread) {
        ob.stop = 1;
        pthread_join(thread, NULL);
    }
    if (pid > 0 && !exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        exited = 1;
    }
    if (pipefd[0] >= 0) {
        ssize_t k;
        while (jn + 1 < sizeof json && (k = read(pipefd[0], json + jn, sizeof json - 1 - jn)) > 0)
            jn += (size_t)k;
        json[jn] = '\0';
        close(pipefd[0]);
    }
    if (pipefd[1] >= 0)
        close(pipefd[1]);
    if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        fprintf(stderr, "%s: %s rtc (%s) failed (exit status %d)\n", PROG, o->cli, wait,
                WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        rc = 1;
    }
    if (rc == 0 && jn == 0) {
        fprintf(stderr, "%s: %s rtc (%s) printed no summary\n", PROG, o->cli, wait);
        rc = 1;
    }
    if (rc == 0) {
        const double cf = json_field(json, "frames"), missed = json_field(json, "missed");
        row r;
        memset(&r, 0, sizeof r);
        snprintf(r.mode, sizeof r.mode, "%s", wait);
        snprintf(r.measured, sizeof r.measured, "rtc: camera write -> commands written");
        r.frames = isfinite(cf) ? (long)cf : -1;
        r.median = json_field(json, "latency_median_us");
        r.p99 = json_field(json, "latency_p99_us");
        r.max = json_field(json, "latency_max_us");
        r.mean = json_field(json, "latency_mean_us");
        r.missed = isfinite(missed) ? (long)missed : -1;
        r.rss0 = rss0 >= 0 ? rss0 : rss_ready;
        r.rss1 = rss1;
        r.late_max = late_max;
        if (!json_string_is(json, "stopped_by", "frames") && !o->b.json_only)
            fprintf(stderr,
                    "%s: %s: the chain answered %ld of %ld frames and was stopped by a signal\n",
                    PROG, wait, r.frames, frames);
        emit(o, ctx, s, &r);
        /* outside: update k answers camera frame cam[k] (written at index cam[k] - 1) */
        long n = 0;
        for (long k = 1; k <= frames; k++)
            if (ob.wake[k] > 0.0 && ob.cam[k] >= 1 && ob.cam[k] <= frames)
                lat[n++] = 1e6 * (ob.wake[k] - wt[ob.cam[k] - 1]);
        row q = r;
        snprintf(q.measured, sizeof q.measured, "outside: camera write -> reader woken");
        stats(lat, n, &q);
        q.missed = ob.skipped;
        emit(o, ctx, s, &q);
        if (!o->b.json_only && ob.skipped)
            fprintf(stderr,
                    "%s: %s: %ld updates not matched to their frame (the commands' "
                    "reader came too late)\n",
                    PROG, wait, ob.skipped);
    }
    if (ob.sem >= 0)
        sw_stream_release_semaphore(dm, ob.sem);
    if (ob.tsem >= 0)
        sw_stream_release_semaphore(tel, ob.tsem);
    sw_stream_close(cam);
    sw_stream_close(dm);
    sw_stream_close(tel);
    free(wt);
    free(ob.wake);
    free(ob.cam);
    free(ob.row);
    free(lat);
    return rc;
}

/* ---------------------------------------------------------------- main */

static int make_dir(sys *s)
{
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp || strlen(tmp) > 200)
        tmp = "/tmp";
    snprintf(s->fdir, sizeof s->fdir, "%s/sw_rtcbench_XXXXXX", tmp);
    if (!mkdtemp(s->fdir)) {
        fprintf(stderr, "%s: cannot make a folder in %s: %s\n", PROG, tmp, strerror(errno));
        s->fdir[0] = '\0';
        return 1;
    }
    struct stat sb;
    snprintf(s->dir, sizeof s->dir, "/dev/shm/sw_rtcbench_XXXXXX");
    if (stat("/dev/shm", &sb) != 0 || !S_ISDIR(sb.st_mode) || !mkdtemp(s->dir))
        snprintf(s->dir, sizeof s->dir, "%s", s->fdir);
    return 0;
}

static void table(const prog_opts *o, sw_context *ctx, const sys *s, long frames)
{
    if (o->b.json_only || !nrows)
        return;
    char device[256];
    fprintf(stderr,
            "\n%s: %dx%d lenslets (%s %dx%d frames), %d slopes -> %d actuators (random "
            "matrix), %ld frames at %.0f Hz\n# device: %s (%s backend)\n",
            PROG, (int)s->nx, (int)s->nx, s->type == SW_PIX_U16 ? "u16" : "f32", (int)s->width,
            (int)s->height, (int)(2 * s->ns), (int)s->nact, frames, o->rate,
            sw_bench_device_name(ctx, device, sizeof device),
            sw_backend_string(sw_context_backend(ctx)));
    fprintf(stderr, "%-7s %-40s %8s %10s %10s %10s %7s %10s %10s\n", "mode", "measured", "frames",
            "median_us", "p99_us", "max_us", "missed", "rss0_kB", "rss1_kB");
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        char missed[24], r0[24], r1[24];
        snprintf(missed, sizeof missed, "%ld", r->missed);
        snprintf(r0, sizeof r0, "%ld", r->rss0);
        snprintf(r1, sizeof r1, "%ld", r->rss1);
        fprintf(stderr, "%-7s %-40s %8ld %10.1f %10.1f %10.1f %7s %10s %10s\n", r->mode,
                r->measured, r->frames, r->median, r->p99, r->max, r->missed >= 0 ? missed : "-",
                r->rss0 >= 0 ? r0 : "-", r->rss1 >= 0 ? r1 : "-");
    }
    fprintf(stderr, "missed: inproc, runs longer than a frame period; rtc, camera frames the "
                    "chain never took; outside, updates the reader saw only as a jump\n");
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
    const long frames = o.frames > 0 ? o.frames : (o.b.quick ? 2000 : 100000);
    sys s;
    memset(&s, 0, sizeof s);
    s.nx = o.nx > 0 ? o.nx : (o.b.quick ? 8 : 40);
    s.width = s.height = s.nx * PITCH_PX;
    s.type = o.type;
    s.nring = o.ring;
    sw_context *ctx = NULL, *cpu = NULL;
    if (sw_bench_context(&o.b, PROG, &ctx) != 0)
        return 1;
    if (sw_bench_cpu_context(&o.b, PROG, &cpu) != 0) {
        sw_context_destroy(ctx);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    rc = render(cpu, &s);
    if (rc == 0)
        rc = make_cm(&s);
    if (rc == 0)
        rc = make_dir(&s);
    if (rc == 0)
        rc = write_files(cpu, &s);
    if (rc == 0 && !o.b.json_only)
        fprintf(stderr,
                "%s: %dx%d lenslets, %d slopes, %d actuators, %ld frames at %.0f Hz per "
                "mode, rtc: %s\n",
                PROG, (int)s.nx, (int)s.nx, (int)(2 * s.ns), (int)s.nact, frames, o.rate, o.cli);
    if (rc == 0 && (o.modes & MODE_INPROC))
        rc = run_inproc(&o, ctx, &s, frames);
    if (rc == 0 && (o.modes & MODE_SEM))
        rc = run_stream(&o, ctx, &s, 0, frames);
    if (rc == 0 && (o.modes & MODE_SPIN))
        rc = run_stream(&o, ctx, &s, 1, frames);
    table(&o, ctx, &s, frames);
    remove_files(cpu, &s);
    sys_free(&s);
    sw_context_destroy(cpu);
    sw_context_destroy(ctx);
    return rc;
}
