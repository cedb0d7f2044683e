/*
 * spotwave rtc: the real-time chain of loop.h (sw_rtc: frame -> centroids -> slopes -> control
 * matrix -> controller -> commands; Mocci et al. 2020 Sec. 6) as a process between image streams
 * in the ImageStreamIO layout (stream.h): camera frames in, mirror commands out, the slopes and a
 * telemetry row out when asked. It runs until stopped (SIGINT / SIGTERM, or --frames), prints a
 * status line once a second and a summary at the end.
 *
 * Configuration: `key = value` lines (--config; config.c), then --set KEY=VALUE in order:
 *   nx, ny             lenslets across and down (required)
 *   pitch_px           lenslet pitch in pixels (required)
 *   x0, y0             corner pixel of lenslet (0, 0) (0, 0)
 *   pixel_um, focal_mm detector pixel and lenslet focal length (geometry.h's defaults; the MVM
 *                      chain works in pixels, D-SABRE in radians: pixel_um / (1000 focal_mm))
 *   valid              FITS/PGM image of nx x ny, non-zero = a lenslet that is measured (all)
 *   threshold          counts subtracted from every pixel before the centroids (0: none)
 *   window             pixels left out at every lenslet's border (0)
 *   recon              mvm (default) | dsabre
 *   cm                 mvm: control matrix, FITS, one row per actuator: width 2 ns (x slopes then
 *                      y), height nact (sw_control_matrix's layout)
 *   im                 or an interaction matrix in the same layout as measured through the mirror
 *                      (row a: the slopes of actuator a's unit command; calibrate --im): the
 *                      control matrix is its truncated pseudo-inverse, negated (the controller
 *                      adds g C s and the mirror subtracts its shape):
 *   cm_condition       largest condition number kept (30; 0: no limit)
 *   cm_modes           largest number of modes kept (0: no limit)
 *   fp16               1: the GPU holds the matrix in FP16 (0)
 *   partitions, overlap, pme, extend_eq17
 *                      dsabre: D-SABRE's K x K partitions (4), overlap (1), piston equalisation
 *                      (hierarchical), Eq. 17's extension (1) (Brunner et al. 2018; sabre.h)
 *   lenslet_um         dsabre: the lenslet pitch in the unit of the commands (pixel_um x pitch_px)
 *   slope_gain         dsabre: the sensor's slope gain, divided out of the slopes in radians (1;
 *                      spotwave sim bench writes its simulator's, sw_loop_slope_gain)
 *   projection         dsabre: corners (the spline at the Fried corners) | local (the distributed
 *                      projection onto the mirror, Eq. 14-16, each window fitted whole with one
 *                      matrix: Fig. 14's "MM"; the default) | local-pupil (the distributed
 *                      projection on the pupil only, section 4.A: a matrix per partition fitting
 *                      the window's squares centred on a lenslet corner the sensor sees, by the
 *                      actuators it sees, the others' commands 0: Fig. 14's "MV"); local and
 *                      local-pupil need extend_eq17 = 1
 *   influence          dsabre, local: the mirror's influence function (gaussian | bezier)
 *   coupling           dsabre, local: the influence at the neighbours (0.3) (loop.h)
 *   controller         integrator | leaky | pi (integrator)
 *   gain, leak, clip   the controller's (0.5, 0.01, 0: no stroke limit)
 *   kp                 pi: the proportional gain of every command (0; ki = gain)
 *   unseen             none | piston | waffle | piston-waffle: the Fried geometry's unseen modes
 *                      filtered out of r (piston-waffle for dsabre, none for mvm)
 *   filter             a FITS image of the modes filtered out of r instead, one a row (nfilter
 *                      x nact f32, 1..32 rows, orthonormal): spotwave sim bench writes its
 *                      loop's (the unseen modes and those of negative gain, loop.h)
 *
 * Timing. A frame's latency is the time from the camera's write of the frame (the stream's
 * writetime, on the streams' clock (stream.h), set just before its semaphores are posted) to the
 * end of the write of the commands into --out (before the slopes and telemetry), in microseconds,
 * kept in a histogram of 0.1 us bins up to 100 ms (constant memory however long the run). A missed
 * frame is a camera frame the chain never saw: cnt0 advanced by more than one between two frames it
 * took.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "spotwave/stream.h"

#define SUB "rtc"

#define HIST_BIN_US 0.1
#define HIST_BINS   1000000 /* 100 ms */

/* ------------------------------------------------------------------ configuration */

typedef struct rtc_config {
    int have_nx, have_ny, have_pitch;
    sw_sh_geometry geom;
    char valid[4096], cm[4096], im[4096], filter[4096];
    double threshold;
    int32_t window;
    int dsabre; /* recon = dsabre */
    double cm_condition;
    int32_t cm_modes;
    int fp16;
    sw_sabre_params sabre;        /* partitions, overlap, pme, extend_eq17 (nx, ny, pitch later) */
    double lenslet_um;            /* 0: pixel_um x pitch_px                                      */
    double slope_gain;            /* dsabre: slopes in radians divided by this (1)                */
    sw_rtc_projection projection; /* corners | local | local-pupil                               */
    sw_dm_params dm;              /* influence, coupling                                          */
    sw_controller_params ctrl;
    int unseen;     /* SW_UNSEEN_* filtered (the Fried geometry's: nact = (nx + 1)(ny + 1)) */
    int unseen_set; /* given in the file (else: piston-waffle for dsabre, none for mvm)     */
    double kp;      /* PI: proportional gain of every mode (ki: gain)                       */
} rtc_config;

static void config_default(rtc_config *c)
{
    memset(c, 0, sizeof *c);
    sw_sh_geometry_default(&c->geom);
    c->geom.x0 = c->geom.y0 = 0.0;
    c->cm_condition = 30.0;
    sw_sabre_params_default(&c->sabre);
    c->sabre.pme = SW_SABRE_PME_HIERARCHICAL;
    c->slope_gain = 1.0;
    c->sabre.extend_eq17 = 1;
    c->projection = SW_RTC_PROJ_LOCAL;
    sw_dm_params_default(&c->dm);
    sw_controller_params_default(&c->ctrl);
}

/* Each key: its name, and a setter that returns 0 or -1 with what it takes in want. */
typedef int (*key_set_fn)(rtc_config *c, const char *v, char *want, size_t n);

static int want(char *buf, size_t n, const char *what)
{
    snprintf(buf, n, "%s", what);
    return -1;
}

static int num(const char *v, double lo, double hi, double *out)
{
    double x;
    if (sw_cli_parse_double(v, &x) != 0 || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

static int k_nx(rtc_config *c, const char *v, char *w, size_t n)
{
    long k;
    if (sw_cli_parse_long(v, 1, 4096, &k) != 0)
        return want(w, n, "a whole number in 1..4096");
    c->geom.nx = (int32_t)k;
    c->have_nx = 1;
    return 0;
}
static int k_ny(rtc_config *c, const char *v, char *w, size_t n)
{
    long k;
    if (sw_cli_parse_long(v, 1, 4096, &k) != 0)
        return want(w, n, "a whole number in 1..4096");
    c->geom.ny = (int32_t)k;
    c->have_ny = 1;
    return 0;
}
static int k_pitch(rtc_config *c, const char *v, char *w, size_t n)
{
    if (num(v, 1.0, 1024.0, &c->geom.pitch_px) != 0)
        return want(w, n, "a pitch in 1..1024 pixels");
    c->have_pitch = 1;
    return 0;
}
static int k_x0(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, -1e9, 1e9, &c->geom.x0) ? want(w, n, "a number (pixels)") : 0;
}
static int k_y0(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, -1e9, 1e9, &c->geom.y0) ? want(w, n, "a number (pixels)") : 0;
}
static int k_pixel(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 1e-9, 1e9, &c->geom.pixel_um) ? want(w, n, "a positive number (um)") : 0;
}
static int k_focal(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 1e-9, 1e9, &c->geom.focal_mm) ? want(w, n, "a positive number (mm)") : 0;
}
static int k_file(char *dst, size_t size, const char *v, char *w, size_t n)
{
    if (strlen(v) >= size)
        return want(w, n, "a file name shorter than 4096 characters");
    snprintf(dst, size, "%s", v);
    return 0;
}
static int k_valid(rtc_config *c, const char *v, char *w, size_t n)
{
    return k_file(c->valid, sizeof c->valid, v, w, n);
}
static int k_cm(rtc_config *c, const char *v, char *w, size_t n)
{
    return k_file(c->cm, sizeof c->cm, v, w, n);
}
static int k_im(rtc_config *c, const char *v, char *w, size_t n)
{
    return k_file(c->im, sizeof c->im, v, w, n);
}
static int k_filter(rtc_config *c, const char *v, char *w, size_t n)
{
    return k_file(c->filter, sizeof c->filter, v, w, n);
}
static int k_threshold(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 0.0, 1e30, &c->threshold) ? want(w, n, "a number >= 0") : 0;
}
static int k_window(rtc_config *c, const char *v, char *w, size_t n)
{
    long k;
    if (sw_cli_parse_long(v, 0, 512, &k) != 0)
        return want(w, n, "a whole number in 0..512");
    c->window = (int32_t)k;
    return 0;
}
static int k_recon(rtc_config *c, const char *v, char *w, size_t n)
{
    if (strcmp(v, "mvm") && strcmp(v, "dsabre"))
        return want(w, n, "mvm or dsabre");
    c->dsabre = strcmp(v, "dsabre") == 0;
    return 0;
}
static int k_condition(rtc_config *c, const char *v, char *w, size_t n)
{
    if (num(v, 0.0, 1e300, &c->cm_condition) != 0 ||
        (c->cm_condition > 0.0 && c->cm_condition < 1.0))
        return want(w, n, "0 (no limit) or a number >= 1");
    return 0;
}
static int k_modes(rtc_config *c, const char *v, char *w, size_t n)
{
    long k;
    if (sw_cli_parse_long(v, 0, 1 << 24, &k) != 0)
        return want(w, n, "a whole number >= 0");
    c->cm_modes = (int32_t)k;
    return 0;
}
static int k_fp16(rtc_config *c, const char *v, char *w, size_t n)
{
    if (strcmp(v, "0") && strcmp(v, "1"))
        return want(w, n, "0 or 1");
    c->fp16 = v[0] == '1';
    return 0;
}
static int k_partitions(rtc_config *c, const char *v, char *w, size_t n)
{
    long k;
    if (sw_cli_parse_long(v, 1, 1024, &k) != 0)
        return want(w, n, "a whole number in 1..1024");
    c->sabre.partitions = (int32_t)k;
    return 0;
}
static int k_overlap(rtc_config *c, const char *v, char *w, size_t n)
{
    long k;
    if (sw_cli_parse_long(v, 0, 64, &k) != 0)
        return want(w, n, "a whole number in 0..64");
    c->sabre.overlap = (int32_t)k;
    return 0;
}
static int k_pme(rtc_config *c, const char *v, char *w, size_t n)
{
    return sw_sabre_pme_parse(v, &c->sabre.pme) != SW_OK
               ? want(w, n, "hierarchical, distributed or none")
               : 0;
}
static int k_extend(rtc_config *c, const char *v, char *w, size_t n)
{
    if (strcmp(v, "0") && strcmp(v, "1"))
        return want(w, n, "0 or 1");
    c->sabre.extend_eq17 = v[0] == '1';
    return 0;
}
static int k_lenslet(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 1e-9, 1e12, &c->lenslet_um) ? want(w, n, "a positive number") : 0;
}
static int k_slope_gain(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 0.01, 100.0, &c->slope_gain) ? want(w, n, "a number in 0.01..100") : 0;
}
static int k_projection(rtc_config *c, const char *v, char *w, size_t n)
{
    if (strcmp(v, "corners") == 0)
        c->projection = SW_RTC_PROJ_CORNERS;
    else if (strcmp(v, "local") == 0)
        c->projection = SW_RTC_PROJ_LOCAL;
    else if (strcmp(v, "local-pupil") == 0)
        c->projection = SW_RTC_PROJ_LOCAL_PUPIL;
    else
        return want(w, n, "corners, local or local-pupil");
    return 0;
}

/* The projection's name in the configuration (and the JSON summary). */
static const char *projection_name(sw_rtc_projection p)
{
    return p == SW_RTC_PROJ_CORNERS  ? "corners"
           : p == SW_RTC_PROJ_LOCAL  ? "local"
           : p == SW_RTC_PROJ_GLOBAL ? "global"
                                     : "local-pupil";
}
static int k_influence(rtc_config *c, const char *v, char *w, size_t n)
{
    return sw_dm_influence_parse(v, &c->dm.influence) != SW_OK ? want(w, n, "gaussian or bezier")
                                                               : 0;
}
static int k_coupling(rtc_config *c, const char *v, char *w, size_t n)
{
    if (num(v, 0.0, 1.0, &c->dm.coupling) != 0 || c->dm.coupling <= 0.0 || c->dm.coupling >= 1.0)
        return want(w, n, "a number between 0 and 1");
    return 0;
}
static int k_controller(rtc_config *c, const char *v, char *w, size_t n)
{
    return sw_controller_kind_parse(v, &c->ctrl.kind) != SW_OK
               ? want(w, n, "integrator, leaky or pi")
               : 0;
}
static int k_gain(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 0.0, 10.0, &c->ctrl.gain) ? want(w, n, "a number in 0..10") : 0;
}
static int k_leak(rtc_config *c, const char *v, char *w, size_t n)
{
    if (num(v, 0.0, 1.0, &c->ctrl.leak) != 0 || c->ctrl.leak >= 1.0)
        return want(w, n, "a number in [0, 1)");
    return 0;
}
static int k_clip(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, 0.0, 1e30, &c->ctrl.clip) ? want(w, n, "a number >= 0 (0: no limit)") : 0;
}

static int k_unseen(rtc_config *c, const char *v, char *w, size_t n)
{
    c->unseen_set = 1;
    return sw_unseen_parse(v, &c->unseen) != SW_OK ? want(w, n,
                                                          "none, piston, waffle or "
                                                          "piston-waffle")
                                                   : 0;
}
static int k_kp(rtc_config *c, const char *v, char *w, size_t n)
{
    return num(v, -1e6, 1e6, &c->kp) ? want(w, n, "a number") : 0;
}

static const struct {
    const char *name;
    key_set_fn set;
} rtc_keys[] = {
    {"nx", k_nx},
    {"ny", k_ny},
    {"pitch_px", k_pitch},
    {"x0", k_x0},
    {"y0", k_y0},
    {"pixel_um", k_pixel},
    {"focal_mm", k_focal},
    {"valid", k_valid},
    {"threshold", k_threshold},
    {"window", k_window},
    {"recon", k_recon},
    {"cm", k_cm},
    {"im", k_im},
    {"cm_condition", k_condition},
    {"cm_modes", k_modes},
    {"fp16", k_fp16},
    {"partitions", k_partitions},
    {"overlap", k_overlap},
    {"pme", k_pme},
    {"extend_eq17", k_extend},
    {"lenslet_um", k_lenslet},
    {"slope_gain", k_slope_gain},
    {"projection", k_projection},
    {"influence", k_influence},
    {"coupling", k_coupling},
    {"controller", k_controller},
    {"gain", k_gain},
    {"leak", k_leak},
    {"clip", k_clip},
    {"unseen", k_unseen},
    {"filter", k_filter},
    {"kp", k_kp},
};

/* sw_cli_config_set_fn over rtc_keys. */
static int config_set(void *user, const char *name, const char *value, char *want_buf, size_t wsize)
{
    for (size_t i = 0; i < sizeof rtc_keys / sizeof rtc_keys[0]; i++)
        if (strcmp(name, rtc_keys[i].name) == 0)
            return value ? rtc_keys[i].set(user, value, want_buf, wsize) : 0;
    return SW_CLI_CONFIG_UNKNOWN;
}

/* ------------------------------------------------------------------ options */

typedef struct rtc_opts {
    const char *config, *in, *out, *slopes, *telemetry, *dir;
    const char *set[64];
    int nset;
    sw_stream_wait_mode wait;
    long frames;      /* 0: until stopped */
    double timeout_s; /* < 0: wait for frames forever */
    double open_s;    /* how long to wait for --in to appear */
    int cpu;          /* -1: no affinity */
    int fifo;         /* 0: no real-time priority */
    int json, status; /* status: -1 automatic (on when stderr is a terminal) */
    int copy;         /* --copy: every frame copied out of the stream first */
    rtc_config c;
} rtc_opts;

void sw_cmd_rtc_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] rtc --config FILE --in STREAM --out STREAM\n"
        "                [--slopes STREAM] [--telemetry STREAM] [OPTIONS]\n"
        "\n"
        "The real-time chain of an adaptive-optics bench as a process: camera frames from an\n"
        "image stream in the ImageStreamIO layout of milk/CACAO (shared memory, semaphores),\n"
        "Shack-Hartmann centre-of-gravity centroids (Mocci et al. 2020, J. Opt. Soc. Am. A\n"
        "37(10), 1548), slopes, the control matrix, the controller, and the mirror's commands\n"
        "written to a stream, frame by frame until stopped (SIGINT or SIGTERM finish the frame\n"
        "in hand and leave every stream whole).\n"
        "\n"
        "Streams:\n"
        "  --in STREAM            camera frames (u8, u16 or f32, 2-D); waited for up to\n"
        "                         --open-timeout seconds when it does not exist yet\n"
        "  --out STREAM           commands, nact floats; created when missing, used as it is\n"
        "                         when it holds nact floats (a mirror's own stream)\n"
        "  --slopes STREAM        the slopes (2 ns floats: x then y), written after the commands\n"
        "  --telemetry STREAM     one row of doubles per frame after the commands: the camera\n"
        "                         frame's cnt0, the latency in us, the slopes, the commands\n"
        "  --dir DIR              where the streams are (default $MILK_SHM_DIR, else\n"
        "                         ImageStreamIO's folder; stream.h)\n"
        "  --wait sem|spin        wake on the input's semaphore (sem, the default) or poll its\n"
        "                         counter cnt0 (spin: lowest latency, one core busy)\n"
        "  --copy                 copy each frame out of the camera stream before the chain\n"
        "                         reads it (default: the chain reads the stream's own memory\n"
        "                         when the camera is not writing, page-locked for the GPU's\n"
        "                         upload where CUDA allows it; a frame the camera wrote over\n"
        "                         during the run, the chain a whole frame late, is counted:\n"
        "                         JSON torn)\n"
        "\n"
        "Chain:\n"
        "  --config FILE          `key = value` lines, '#' comments: nx, ny, pitch_px (required),\n"
        "                         x0, y0, pixel_um, focal_mm, valid (mask image), threshold,\n"
        "                         window, recon (mvm|dsabre); mvm: cm (control matrix FITS,\n"
        "                         width 2 ns, height nact) or im (interaction matrix as\n"
        "                         measured through the mirror, same layout; C = its truncated\n"
        "                         pseudo-inverse, negated, with cm_condition (30) and\n"
        "                         cm_modes), fp16; dsabre (Brunner et al. 2018, J. Opt. Soc.\n"
        "                         Am. A 35(6), 859): partitions (4), overlap (1), pme\n"
        "                         (hierarchical|distributed|none), extend_eq17 (1),\n"
        "                         lenslet_um, slope_gain (1: the slopes in radians are\n"
        "                         divided by it), projection (corners|local|local-pupil:\n"
        "                         the spline at the Fried corners, the distributed\n"
        "                         projection of Eq. 14-16 with each window fitted whole\n"
        "                         (Fig. 14's MM; the default), or on the pupil only, a\n"
        "                         matrix per partition (section 4.A, Fig. 14's MV); both\n"
        "                         distributed ones need extend_eq17 = 1), influence\n"
        "                         (gaussian|bezier), coupling (0.3); controller\n"
        "                         (integrator|leaky|pi), gain (0.5), leak (0.01), clip (0),\n"
        "                         kp (pi: C(z) = kp + gain / (1 - z^-1) per command; 0);\n"
        "                         unseen (none|piston|waffle|piston-waffle): the modes a\n"
        "                         sensor on the Fried geometry cannot see, filtered out of\n"
        "                         the reconstruction (default piston-waffle for dsabre,\n"
        "                         none for mvm; needs one command per lenslet corner);\n"
        "                         filter FILE: the modes filtered out instead, the rows of\n"
        "                         a FITS image (nfilter x nact floats, 1..32 rows,\n"
        "                         orthonormal; spotwave sim bench writes its loop's)\n"
        "  --set KEY=VALUE        one key, after the file (repeatable)\n"
        "\n"
        "Running:\n"
        "  --frames N             stop after N frames (default: run until stopped)\n"
        "  --timeout SECONDS      fail (exit 1) when no frame comes for this long (default:\n"
        "                         wait forever)\n"
        "  --open-timeout SECONDS how long to wait for --in to appear (10)\n"
        "  --cpu N                pin the process to CPU core N\n"
        "  --fifo PRIORITY        real-time scheduling SCHED_FIFO at PRIORITY (1..99; needs\n"
        "                         CAP_SYS_NICE or an rtprio limit; refused otherwise, exit 1)\n"
        "  --status / --no-status the status line on stderr once a second: frames, latency\n"
        "                         median / p99 / max (us), missed frames (default: on when\n"
        "                         stderr is a terminal)\n"
        "  --json                 the summary at the end as one JSON object\n"
        "\n"
        "Latency is from the camera's write of a frame (the stream's writetime) to the end of\n"
        "the write of its commands. A missed frame is one the chain never saw.\n"
        "\n"
        "Exit codes: 0 stopped as asked (signal or --frames); 1 a failure (a stream that\n"
        "does not check out, a matrix that does not fit the geometry, a frame timeout); 2 a\n"
        "usage error.\n"
        "\n"
        "Example (a simulated bench; see spotwave sim bench --help):\n"
        "  spotwave sim bench --rtc-config bench/ --frames 0\n"
        "  spotwave rtc --config bench/rtc.conf --in sw_cam --out sw_dm &\n"
        "  spotwave sim bench --camera sw_cam --dm sw_dm --frames 1000\n");
}

static int parse_options(int argc, char **argv, rtc_opts *o)
{
    enum {
        OPT_CONFIG = 256,
        OPT_SET,
        OPT_IN,
        OPT_OUT,
        OPT_SLOPES,
        OPT_TELEMETRY,
        OPT_DIR,
        OPT_WAIT,
        OPT_FRAMES,
        OPT_TIMEOUT,
        OPT_OPEN,
        OPT_CPU,
        OPT_FIFO,
        OPT_STATUS,
        OPT_NO_STATUS,
        OPT_COPY,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"set", required_argument, NULL, OPT_SET},
        {"copy", no_argument, NULL, OPT_COPY},
        {"in", required_argument, NULL, OPT_IN},
        {"out", required_argument, NULL, OPT_OUT},
        {"slopes", required_argument, NULL, OPT_SLOPES},
        {"telemetry", required_argument, NULL, OPT_TELEMETRY},
        {"dir", required_argument, NULL, OPT_DIR},
        {"wait", required_argument, NULL, OPT_WAIT},
        {"frames", required_argument, NULL, OPT_FRAMES},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"open-timeout", required_argument, NULL, OPT_OPEN},
        {"cpu", required_argument, NULL, OPT_CPU},
        {"fifo", required_argument, NULL, OPT_FIFO},
        {"status", no_argument, NULL, OPT_STATUS},
        {"no-status", no_argument, NULL, OPT_NO_STATUS},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    o->wait = SW_STREAM_WAIT_SEM;
    o->timeout_s = -1.0;
    o->open_s = 10.0;
    o->cpu = -1;
    o->status = -1;
    int c;
    long n;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(SUB, argc, argv, "h", longopts)) != -1) {
        switch (c) {
        case 'h': sw_cmd_rtc_help(stdout); return -1;
        case OPT_CONFIG:
            if (sw_cli_opt_file(SUB, "--config", optarg, &o->config) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_SET:
            if (o->nset == (int)(sizeof o->set / sizeof o->set[0]))
                return sw_cli_usage(SUB, "--set: more than %d", o->nset);
            o->set[o->nset++] = optarg;
            break;
        case OPT_IN: o->in = optarg; break;
        case OPT_OUT: o->out = optarg; break;
        case OPT_SLOPES: o->slopes = optarg; break;
        case OPT_TELEMETRY: o->telemetry = optarg; break;
        case OPT_DIR: o->dir = optarg; break;
        case OPT_WAIT:
            if (strcmp(optarg, "sem") == 0)
                o->wait = SW_STREAM_WAIT_SEM;
            else if (strcmp(optarg, "spin") == 0)
                o->wait = SW_STREAM_WAIT_SPIN;
            else
                return sw_cli_usage(SUB, "--wait: '%s' is not sem or spin", optarg);
            break;
        case OPT_FRAMES:
            if (sw_cli_opt_at_least(SUB, "--frames", optarg, 1, "a count >= 1", &o->frames) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TIMEOUT:
        case OPT_OPEN:
            /* --open-timeout 0 looks once; a frame timeout of 0 would fail at once */
            if (sw_cli_opt_double(SUB, sw_cli_option_name(argv), optarg,
                                  c == OPT_TIMEOUT ? SW_CLI_POSITIVE : SW_CLI_NONNEG,
                                  c == OPT_TIMEOUT ? "a positive number of seconds"
                                                   : "a number of seconds >= 0",
                                  c == OPT_TIMEOUT ? &o->timeout_s : &o->open_s) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_CPU:
            if (sw_cli_opt_long(SUB, "--cpu", optarg, 0, CPU_SETSIZE - 1, &n) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->cpu = (int)n;
            break;
        case OPT_FIFO:
            if (sw_cli_opt_long(SUB, "--fifo", optarg, 1, 99, &n) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->fifo = (int)n;
            break;
        case OPT_STATUS: o->status = 1; break;
        case OPT_NO_STATUS: o->status = 0; break;
        case OPT_COPY: o->copy = 1; break;
        case OPT_JSON: o->json = 1; break;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return sw_cli_usage(SUB, "unexpected argument '%s'", argv[optind]);
    if (!o->config)
        return sw_cli_usage(SUB, "give the chain: --config FILE");
    if (!o->in || !o->out)
        return sw_cli_usage(SUB, "give the streams: --in CAMERA --out COMMANDS");
    const char *names[4] = {o->in, o->out, o->slopes, o->telemetry};
    static const char *const opt[4] = {"--in", "--out", "--slopes", "--telemetry"};
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (names[i] && names[j] && strcmp(names[i], names[j]) == 0)
                return sw_cli_usage(SUB, "%s and %s name the same stream '%s'", opt[i], opt[j],
                                    names[i]);
    return SW_EXIT_OK;
}

static const char *beside(const rtc_opts *o, const char *name, char *buf, size_t n);

static int build_config(rtc_opts *o, int need_matrix)
{
    config_default(&o->c);
    int rc = sw_cli_config_read(SUB, o->config, config_set, &o->c);
    for (int i = 0; rc == SW_EXIT_OK && i < o->nset; i++) {
        char name[64], want[160] = "a value";
        const char *value;
        if ((rc = sw_cli_split_set(SUB, o->set[i], name, sizeof name, &value)) != SW_EXIT_OK)
            return rc;
        const int r = config_set(&o->c, name, *value ? value : NULL, want, sizeof want);
        if (r == SW_CLI_CONFIG_UNKNOWN)
            return sw_cli_usage(SUB, "--set: unknown key '%s'", name);
        if (!*value)
            return sw_cli_usage(SUB, "--set %s: no value", name);
        if (r != 0)
            return sw_cli_usage(SUB, "--set %s: '%s' is not %s", name, value, want);
    }
    if (rc != SW_EXIT_OK)
        return rc;
    if (o->c.filter[0] && o->c.unseen_set)
        return sw_cli_usage(
            SUB, "%s: give one of unseen or filter (filter holds every mode filtered)", o->config);
    char *files[4] = {o->c.valid, o->c.cm, o->c.im, o->c.filter};
    for (int i = 0; i < 4; i++) {
        char buf[sizeof o->c.cm];
        if (!files[i][0])
            continue;
        const char *b = beside(o, files[i], buf, sizeof buf);
        if (!b || strlen(b) >= sizeof o->c.cm)
            return sw_cli_usage(SUB, "%s: the file name '%s' is too long beside it", o->config,
                                files[i]);
        if (b == buf)
            memcpy(files[i], buf, strlen(buf) + 1);
    }
    if (!o->c.have_nx || !o->c.have_ny || !o->c.have_pitch)
        return sw_cli_usage(SUB, "%s: nx, ny and pitch_px are required", o->config);
    if (need_matrix && !o->c.dsabre && !!o->c.cm[0] == !!o->c.im[0])
        return sw_cli_usage(SUB, "%s: give one of cm (control matrix) or im (interaction matrix)",
                            o->config);
    if (need_matrix && o->c.dsabre && (o->c.cm[0] || o->c.im[0]))
        return sw_cli_usage(SUB, "%s: recon = dsabre takes no cm or im (the spline reconstructs)",
                            o->config);
    if (need_matrix && o->c.dsabre && o->c.projection != SW_RTC_PROJ_CORNERS &&
        !o->c.sabre.extend_eq17)
        return sw_cli_usage(SUB,
                            "%s: projection = %s needs extend_eq17 = 1 (the distributed "
                            "projection's windows have an actuator at every square centre, "
                            "every lenslet corner one with Eq. 17's extension: Brunner et al. "
                            "2018); use projection = corners without it",
                            o->config, projection_name(o->c.projection));
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ the run */

/* Latency histogram: 0.1 us bins, an overflow count, the maximum. */
typedef struct hist {
    uint32_t *bin;
    uint64_t n, over;
    double max, sum;
} hist;

static void hist_add(hist *h, double us)
{
    if (!(us >= 0.0))
        us = 0.0; /* clocks of two processes: never negative in the figures */
    const double b = us / HIST_BIN_US;
    if (b >= HIST_BINS)
        h->over++;
    else
        h->bin[(size_t)b]++;
    h->n++;
    h->sum += us;
    h->max = us > h->max ? us : h->max;
}

/* The q-quantile (0..1), the upper edge of its bin; NaN when empty. */
static double hist_quantile(const hist *h, double q)
{
    if (h->n == 0)
        return NAN;
    uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;
    want = want < 1 ? 1 : want;
    for (size_t i = 0; i < HIST_BINS; i++) {
        seen += h->bin[i];
        if (seen >= want)
            return (double)(i + 1) * HIST_BIN_US;
    }
    return h->max;
}

static sw_pixel_type pixel_of(sw_stream_type t)
{
    switch (t) {
    case SW_STREAM_U8: return SW_PIX_U8;
    case SW_STREAM_U16: return SW_PIX_U16;
    case SW_STREAM_F32: return SW_PIX_F32;
    default: return (sw_pixel_type)-1;
    }
}

/* The newest frame of a camera stream into img (any stride): read whole and consistent into
 * img's own memory when its rows are tight (sw_image_alloc rounds strides up to 64 bytes), else
 * through `staging` (width x height tight) row by row. */
static sw_status read_camera(sw_stream *cam, sw_image *img, void *staging, uint64_t *c0)
{
    const size_t row = (size_t)img->width * sw_pixel_size(img->type);
    const size_t bytes = row * (size_t)img->height;
    if (img->stride == row)
        return sw_stream_read(cam, img->data, bytes, c0);
    const sw_status st = sw_stream_read(cam, staging, bytes, c0);
    for (int32_t y = 0; st == SW_OK && y < img->height; y++)
        memcpy(sw_image_row(img, y), (const char *)staging + (size_t)y * row, row);
    return st;
}

/* A file the configuration names: relative names are beside the configuration file; NULL when
 * that path does not fit in n bytes. */
static const char *beside(const rtc_opts *o, const char *name, char *buf, size_t n)
{
    const char *slash = strrchr(o->config, '/');
    if (name[0] == '/' || !slash)
        return name;
    const int k = snprintf(buf, n, "%.*s/%s", (int)(slash - o->config), o->config, name);
    return k >= 0 && (size_t)k < n ? buf : NULL; /* NULL: it does not fit (never truncated) */
}

/* A matrix file: FITS f32 (or any type, converted), width x height as the file has it. */
static int read_matrix(sw_context *ctx, const char *what, const char *path, int32_t *w, int32_t *h,
                       float **out)
{
    sw_frames fr;
    memset(&fr, 0, sizeof fr);
    int rc = sw_cli_read_frames(ctx, SUB, what, path, 1, &fr);
    if (rc != SW_EXIT_OK)
        return rc;
    if (fr.count != 1) {
        sw_frames_free(&fr);
        return sw_cli_fail(SUB, "%s '%s' has %d frames, not one matrix", what, path, (int)fr.count);
    }
    const sw_image *m = &fr.frames[0];
    *w = m->width;
    *h = m->height;
    float *a = malloc((size_t)m->width * m->height * sizeof *a);
    if (!a) {
        sw_frames_free(&fr);
        return sw_cli_fail(SUB, "out of memory for %s", what);
    }
    for (int32_t y = 0; y < m->height; y++)
        for (int32_t x = 0; x < m->width; x++) {
            const double v = sw_image_get(m, x, y);
            if (!isfinite(v)) {
                free(a);
                sw_frames_free(&fr);
                return sw_cli_fail(SUB, "%s '%s': entry (%d, %d) is not finite", what, path, (int)x,
                                   (int)y);
            }
            a[(size_t)y * m->width + x] = (float)v;
        }
    sw_frames_free(&fr);
    *out = a;
    return SW_EXIT_OK;
}

/* Opens `name`, waiting up to open_s seconds for it to appear. */
static int open_wait(sw_context *ctx, const rtc_opts *o, const char *option, const char *name,
                     double open_s, sw_stream **out)
{
    const double t0 = sw_cli_now();
    for (;;) {
        const sw_status st = sw_stream_open(ctx, o->dir, name, out);
        if (st == SW_OK)
            return SW_EXIT_OK;
        if (sw_cli_stop)
            return -1; /* stopped while waiting: a clean exit */
        if (st != SW_EIO || sw_cli_now() - t0 >= open_s)
            return sw_cli_fail(SUB, "%s %s: %s", option, name, sw_cli_lib_error(ctx, st));
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

/* An output stream of n values of type t: the existing one when it has that shape, else made. */
static int output_stream(sw_context *ctx, const rtc_opts *o, const char *option, const char *name,
                         uint32_t n, sw_stream_type t, sw_stream **out)
{
    sw_stream *s = NULL;
    if (sw_stream_open(ctx, o->dir, name, &s) == SW_OK) {
        sw_stream_info in;
        if (sw_stream_get_info(s, &in) == SW_OK && in.type == t &&
            (uint64_t)in.size[0] * (in.naxis > 1 ? in.size[1] : 1) == n && in.naxis <= 2 &&
            !in.circular) {
            *out = s;
            return SW_EXIT_OK;
        }
        sw_stream_close(s);
        return sw_cli_fail(SUB,
                           "%s %s exists with another shape or type (it should hold %u %s): "
                           "remove it (spotwave stream rm %s) or name another",
                           option, name, (unsigned)n, sw_stream_type_string(t), name);
    }
    sw_stream_params p;
    sw_stream_params_default(&p);
    p.name = name;
    p.naxis = 1;
    p.size[0] = n;
    p.size[1] = 1;
    p.size[2] = 1;
    p.type = t;
    const sw_status st = sw_stream_create(ctx, o->dir, &p, out);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s %s: %s", option, name, sw_cli_lib_error(ctx, st));
    return SW_EXIT_OK;
}

typedef struct rtc_run {
    sw_stream *in, *out, *slopes, *tel;
    sw_rtc *rtc;
    float *cm, *im;
    uint8_t *valid;
    float *filter; /* the filter's modes: the unseen ones, or key filter's (nact x nfilter) */
    float *kpv;    /* PI: kp of every mode */
    sw_image frame;
    float *u, *s;
    double *row;
    void *staging;   /* a tight copy of the frame when the image's rows are padded */
    sw_image direct; /* the camera stream's own frame (zero copy), data NULL with --copy */
    int registered;  /* direct.data is page-locked (sw_host_register) */
    uint64_t torn;   /* frames read in place that the camera wrote over during the run */
    int clock_warned;
    uint64_t reopened; /* streams opened again after their writer made them afresh */
    int32_t sem;
    hist lat;
    uint64_t frames, missed, first_cnt0;
    double run_s;
    int32_t width, height, ns, nact, kept;
    sw_stream_type type;
    const char *stopped_by;
} rtc_run;

/* The camera stream (waited for), and the centroid parameters of the configuration's grid on
 * its frames: cp, r->width, r->height, r->type, r->valid, r->ns. */
static int camera_chain(sw_context *ctx, const rtc_opts *o, const char *option, const char *name,
                        sw_stream **cam, sw_centroid_params *cp, rtc_run *r)
{
    const rtc_config *c = &o->c;
    int rc;
    if ((rc = open_wait(ctx, o, option, name, o->open_s, cam)) != SW_EXIT_OK)
        return rc;
    sw_stream_info ii;
    sw_status st = sw_stream_get_info(*cam, &ii);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s %s: %s", option, name, sw_cli_lib_error(ctx, st));
    r->type = ii.type;
    if ((int)pixel_of(ii.type) < 0 || ii.naxis != 2 || ii.circular)
        return sw_cli_fail(SUB,
                           "%s %s holds %d-axis %s frames%s: the chain takes 2-D u8, u16 or "
                           "f32 frames",
                           option, name, (int)ii.naxis, sw_stream_type_string(ii.type),
                           ii.circular ? " in a circular buffer" : "");
    r->width = (int32_t)ii.size[0];
    r->height = (int32_t)ii.size[1];
    sw_centroid_params_default(cp);
    cp->geometry = c->geom;
    cp->width = r->width;
    cp->height = r->height;
    cp->type = pixel_of(ii.type);
    cp->max_frames = 1;
    cp->path = SW_CENTROID_HOST;
    cp->window = c->window;
    if (c->threshold > 0.0) {
        cp->threshold_mode = SW_THRESHOLD_SUBTRACT;
        cp->threshold_kind = SW_THRESHOLD_ABSOLUTE;
        cp->threshold = c->threshold;
    }
    if (c->valid[0]) {
        float *m = NULL;
        int32_t w = 0, h = 0;
        if ((rc = read_matrix(ctx, "valid mask", c->valid, &w, &h, &m)) != SW_EXIT_OK)
            return rc;
        if (w != c->geom.nx || h != c->geom.ny) {
            free(m);
            return sw_cli_fail(SUB, "valid mask '%s' is %d x %d, the grid %d x %d", c->valid,
                               (int)w, (int)h, (int)c->geom.nx, (int)c->geom.ny);
        }
        r->valid = malloc((size_t)w * h);
        if (!r->valid) {
            free(m);
            return sw_cli_fail(SUB, "out of memory");
        }
        for (size_t i = 0; i < (size_t)w * h; i++)
            r->valid[i] = m[i] != 0.0f;
        free(m);
        cp->geometry.valid = r->valid;
    }
    if ((st = sw_sh_geometry_check(ctx, &cp->geometry, r->width, r->height)) != SW_OK)
        return sw_cli_fail(SUB, "%s: the grid does not fit %s %s (%d x %d): %s", o->config, option,
                           name, (int)r->width, (int)r->height, sw_cli_lib_error(ctx, st));
    int32_t ns = 0;
    for (int32_t i = 0; i < c->geom.nx * c->geom.ny; i++)
        ns += r->valid ? r->valid[i] != 0 : 1;
    r->ns = ns;
    return SW_EXIT_OK;
}

/* PI's kp for every mode (the identity basis: one per command). */
static int kp_extras(const rtc_config *c, rtc_run *r, sw_controller_params *cp)
{
    if (c->ctrl.kind == SW_CTRL_PI && c->kp != 0.0) {
        /* one mode per command (the identity basis): kp each, ki = gain */
        if (!(r->kpv = malloc((size_t)r->nact * sizeof(float))))
            return sw_cli_fail(SUB, "out of memory");
        for (int32_t a = 0; a < r->nact; a++)
            r->kpv[a] = (float)c->kp;
        cp->kp = r->kpv;
    }
    return SW_EXIT_OK;
}

/* The controller's extras once nact is known: the filter's modes (the file's, or the unseen
 * modes of the Fried geometry: piston, waffle; filtered by default for D-SABRE, whose commands
 * are those corners; for an MVM matrix only when asked, and then it must have a row per corner),
 * and PI's kp for every mode. */
static int controller_extras(sw_context *ctx, const rtc_config *c, rtc_run *r,
                             sw_controller_params *cp)
{
    if (c->filter[0]) { /* the modes given, one a row */
        int32_t w = 0, h = 0;
        int rc = read_matrix(ctx, "filter", c->filter, &w, &h, &r->filter);
        if (rc != SW_EXIT_OK)
            return rc;
        if (w != r->nact || h < 1 || h > 32)
            return sw_cli_fail(SUB,
                               "filter '%s' is %d x %d: it needs one row of %d commands per mode, "
                               "1 to 32 modes",
                               c->filter, (int)w, (int)h, (int)r->nact);
        /* the controller subtracts Z (Z^T r): the rows must be orthonormal */
        for (int32_t i = 0; i < h; i++)
            for (int32_t j = 0; j <= i; j++) {
                double dot = 0.0;
                for (int32_t a = 0; a < w; a++)
                    dot += (double)r->filter[(size_t)i * w + a] * r->filter[(size_t)j * w + a];
                if (fabs(dot - (i == j ? 1.0 : 0.0)) > 1e-4)
                    return sw_cli_fail(SUB,
                                       "filter '%s': rows %d and %d are not orthonormal (their "
                                       "product is %g)",
                                       c->filter, (int)j, (int)i, dot);
            }
        cp->nfilter = h;
        cp->filter = r->filter;
        return kp_extras(c, r, cp);
    }
    const int unseen =
        c->unseen_set ? c->unseen : (c->dsabre ? SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE : 0);
    const int32_t corners = (c->geom.nx + 1) * (c->geom.ny + 1);
    if (unseen) {
        if (r->nact != corners)
            return sw_cli_fail(SUB,
                               "unseen = %s: the filter is the Fried geometry's, one command per "
                               "lenslet corner ((%d + 1) x (%d + 1) = %d), but the chain has %d",
                               sw_unseen_string(unseen), (int)c->geom.nx, (int)c->geom.ny,
                               (int)corners, (int)r->nact);
        if (!(r->filter = malloc((size_t)corners * 2 * sizeof(float))))
            return sw_cli_fail(SUB, "out of memory");
        const sw_status st =
            sw_unseen_modes(c->geom.nx, c->geom.ny, r->valid, unseen, r->filter, &cp->nfilter);
        if (st != SW_OK)
            return sw_cli_fail(SUB, "unseen modes: %s", sw_cli_lib_error(NULL, st));
        cp->filter = r->filter;
    }
    return kp_extras(c, r, cp);
}

static int setup(sw_context *ctx, const rtc_opts *o, rtc_run *r)
{
    const rtc_config *c = &o->c;
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    sw_centroid_params *cp = &rp.centroid;
    sw_status st;
    int rc = camera_chain(ctx, o, "--in", o->in, &r->in, cp, r);
    if (rc != SW_EXIT_OK)
        return rc;
    cp->path = SW_CENTROID_AUTO;
    const int32_t ns = r->ns;
    rp.controller = c->ctrl;
    if (c->dsabre) {
        /* D-SABRE (Brunner et al. 2018): the spline's values at the Fried corners, or the
         * distributed projection onto the mirror (Eq. 14-16), on the pupil only a matrix per
         * partition fitting the squares centred on a corner the sensor sees (square_mask NULL:
         * sw_rtc_params_sabre); slopes to radians by the grid */
        sw_sabre_params sp = c->sabre;
        sp.nx = c->geom.nx;
        sp.ny = c->geom.ny;
        sp.pitch = c->lenslet_um > 0.0 ? c->lenslet_um : c->geom.pixel_um * c->geom.pitch_px;
        sp.valid = r->valid;
        sw_dm_params dm = c->dm;
        dm.nx = c->geom.nx;
        dm.ny = c->geom.ny;
        r->nact = (c->geom.nx + 1) * (c->geom.ny + 1);
        float *pm = NULL;
        st = sw_rtc_params_sabre(ctx, &sp, &dm, c->projection, NULL,
                                 c->geom.pixel_um / (c->geom.focal_mm * 1000.0) / c->slope_gain,
                                 &rp, &pm);
        rp.nact = r->nact;
        rp.controller.nact = r->nact;
        if (st == SW_OK && (rc = controller_extras(ctx, c, r, &rp.controller)) != SW_EXIT_OK) {
            free(pm);
            return rc;
        }
        if (st == SW_OK)
            st = sw_rtc_create(ctx, &rp, &r->rtc);
        free(pm);
        if (st != SW_OK)
            return sw_cli_fail(SUB, "D-SABRE chain: %s", sw_cli_lib_error(ctx, st));
    } else {
        int32_t mw = 0, mh = 0;
        const char *mpath = c->cm[0] ? c->cm : c->im;
        if ((rc = read_matrix(ctx, c->cm[0] ? "control matrix" : "interaction matrix", mpath, &mw,
                              &mh, c->cm[0] ? &r->cm : &r->im)) != SW_EXIT_OK)
            return rc;
        if (mw != 2 * ns)
            return sw_cli_fail(SUB,
                               "%s '%s' is %d wide: the grid has %d measured lenslets, so 2 x %d "
                               "= %d slopes (one row per actuator)",
                               c->cm[0] ? "cm" : "im", mpath, (int)mw, (int)ns, (int)ns,
                               (int)(2 * ns));
        r->nact = mh;
        if (r->im) {
            /* im: row a holds actuator a's slopes as measured through the mirror (calibrate's
             * --im), the column-major nslopes x nact layout sw_control_matrix takes; the chain
             * adds g C s and the mirror subtracts its shape: C = -pinv(im) */
            if (!(r->cm = malloc((size_t)mw * mh * sizeof(float))))
                return sw_cli_fail(SUB, "out of memory");
            sw_cm_result res;
            memset(&res, 0, sizeof res);
            st = sw_control_matrix(ctx, r->im, mw, mh, c->cm_condition, c->cm_modes, r->cm, &res);
            if (st != SW_OK)
                return sw_cli_fail(SUB, "control matrix from '%s': %s", mpath,
                                   sw_cli_lib_error(ctx, st));
            for (size_t i = 0; i < (size_t)mw * mh; i++)
                r->cm[i] = -r->cm[i];
            r->kept = res.kept;
        }
        rp.recon = SW_RTC_MVM;
        rp.nact = r->nact;
        rp.cm = r->cm;
        rp.fp16 = c->fp16;
        rp.controller.nact = r->nact;
        if ((rc = controller_extras(ctx, c, r, &rp.controller)) != SW_EXIT_OK)
            return rc;
        if ((st = sw_rtc_create(ctx, &rp, &r->rtc)) != SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    }

    /* buffers: the frame as the chain reads it (a copy: the camera may write the next one while
     * the chain works), the commands, the slopes, the telemetry row */
    if ((st = sw_image_alloc(ctx, r->width, r->height, cp->type, &r->frame)) != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    r->u = calloc((size_t)r->nact, sizeof(float));
    r->s = calloc(2 * (size_t)ns, sizeof(float));
    r->row = calloc(2 + 2 * (size_t)ns + (size_t)r->nact, sizeof(double));
    r->lat.bin = calloc(HIST_BINS, sizeof(uint32_t));
    r->staging = malloc((size_t)r->width * r->height * sw_pixel_size(cp->type));
    if (!r->u || !r->s || !r->row || !r->lat.bin || !r->staging)
        return sw_cli_fail(SUB, "out of memory");

    if ((rc = output_stream(ctx, o, "--out", o->out, (uint32_t)r->nact, SW_STREAM_F32, &r->out)) !=
        SW_EXIT_OK)
        return rc;
    if (o->slopes && (rc = output_stream(ctx, o, "--slopes", o->slopes, (uint32_t)(2 * ns),
                                         SW_STREAM_F32, &r->slopes)) != SW_EXIT_OK)
        return rc;
    if (o->telemetry &&
        (rc = output_stream(ctx, o, "--telemetry", o->telemetry, (uint32_t)(2 + 2 * ns + r->nact),
                            SW_STREAM_F64, &r->tel)) != SW_EXIT_OK)
        return rc;
    if (!o->copy) {
        /* zero copy: the chain reads the stream's frame where it is (on the GPU, page-locked so
         * the upload is a DMA like a pinned image's) */
        const size_t bytes = (size_t)r->width * r->height * sw_pixel_size(cp->type);
        void *data = sw_stream_data(r->in);
        if ((st = sw_image_wrap(data, r->width, r->height, 0, cp->type, SW_MEM_HOST, &r->direct)) !=
            SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        if (sw_context_backend(ctx) == SW_BACKEND_CUDA) {
            if ((st = sw_host_register(ctx, data, bytes)) == SW_OK) {
                r->registered = 1;
                r->direct.memory = SW_MEM_PINNED;
            } else
                fprintf(stderr,
                        "spotwave %s: the camera stream's memory could not be page-locked (%s): "
                        "the GPU copies it at pageable speed\n",
                        SUB, sw_cli_lib_error(ctx, st));
        }
    }
    return SW_EXIT_OK;
}

/* A writer that makes its stream afresh (a camera or mirror process restarted) unlinks the file
 * this process maps: the camera is opened again (same shape and type, its semaphore claimed
 * again, frames before the reopening not taken: *last), the outputs likewise. -1 when stopped by
 * a signal while waiting for the camera to come back. */
static int reopen_stale(sw_context *ctx, const rtc_opts *o, rtc_run *r, uint64_t *last)
{
    int rc;
    if (sw_stream_stale(r->in)) {
        if (r->registered)
            sw_host_unregister(ctx, r->direct.data);
        r->registered = 0;
        if (r->sem >= 0)
            sw_stream_release_semaphore(r->in, r->sem);
        r->sem = -1;
        sw_stream_close(r->in);
        r->in = NULL;
        if ((rc = open_wait(ctx, o, "--in", o->in, o->open_s, &r->in)) != SW_EXIT_OK)
            return rc;
        sw_stream_info ii;
        sw_status st = sw_stream_get_info(r->in, &ii);
        if (st != SW_OK || ii.naxis != 2 || ii.type != r->type || ii.circular ||
            (int32_t)ii.size[0] != r->width || (int32_t)ii.size[1] != r->height)
            return sw_cli_fail(SUB,
                               "--in %s was made afresh with another shape or type: start the "
                               "chain again",
                               o->in);
        if ((st = sw_stream_claim_semaphore(r->in, &r->sem)) != SW_OK)
            return sw_cli_fail(SUB, "--in %s: %s", o->in, sw_cli_lib_error(ctx, st));
        sw_stream_flush_semaphore(r->in, r->sem);
        if (r->direct.data) {
            r->direct.data = sw_stream_data(r->in);
            if (sw_context_backend(ctx) == SW_BACKEND_CUDA &&
                sw_host_register(ctx, r->direct.data, ii.frame_bytes) == SW_OK)
                r->registered = 1;
            r->direct.memory = r->registered ? SW_MEM_PINNED : SW_MEM_HOST;
        }
        *last = sw_stream_cnt0(r->in);
        r->reopened++;
        fprintf(stderr, "spotwave %s: --in %s was made afresh by its writer: opened again\n", SUB,
                o->in);
    }
    sw_stream **outs[3] = {&r->out, &r->slopes, &r->tel};
    const char *names[3] = {o->out, o->slopes, o->telemetry};
    static const char *const opts[3] = {"--out", "--slopes", "--telemetry"};
    for (int i = 0; i < 3; i++) {
        if (!*outs[i] || !sw_stream_stale(*outs[i]))
            continue;
        sw_stream_info oi;
        sw_stream_get_info(*outs[i], &oi);
        sw_stream_close(*outs[i]);
        *outs[i] = NULL;
        const uint32_t n = oi.size[0] * (oi.naxis > 1 ? oi.size[1] : 1);
        if ((rc = output_stream(ctx, o, opts[i], names[i], n, oi.type, outs[i])) != SW_EXIT_OK)
            return rc;
        r->reopened++;
        fprintf(stderr, "spotwave %s: %s %s was made afresh: opened again\n", SUB, opts[i],
                names[i]);
    }
    return SW_EXIT_OK;
}

static void status_line(const rtc_run *r)
{
    fprintf(stderr,
            "spotwave rtc: %llu frames, latency median %.1f us, p99 %.1f us, max %.1f us, "
            "%llu missed\n",
            (unsigned long long)r->frames, hist_quantile(&r->lat, 0.5),
            hist_quantile(&r->lat, 0.99), r->lat.max, (unsigned long long)r->missed);
}

static int run(sw_context *ctx, const rtc_opts *o, rtc_run *r)
{
    uint64_t last = sw_stream_cnt0(r->in); /* frames written before the start are not taken */
    /* the controller's state, zero, as the first commands: the mirror starts flat, and a bench
     * waiting for the chain (sim bench) knows it is there */
    sw_status st0 = sw_stream_write(r->out, r->u, (size_t)r->nact * sizeof(float));
    if (st0 != SW_OK)
        return sw_cli_fail(SUB, "--out %s: %s", o->out, sw_cli_lib_error(ctx, st0));
    /* then listen: a semaphore of the camera's, held even when spinning (a bench in lockstep
     * starts when a chain holds one) */
    if ((st0 = sw_stream_claim_semaphore(r->in, &r->sem)) != SW_OK || r->sem < 0)
        return sw_cli_fail(SUB, "--in %s: %s", o->in, sw_cli_lib_error(ctx, st0));
    sw_stream_flush_semaphore(r->in, r->sem);
    const int status = o->status >= 0 ? o->status : isatty(2);
    const double t0 = sw_cli_now();
    double next_status = t0 + 1.0;
    const size_t ubytes = (size_t)r->nact * sizeof(float);
    r->stopped_by = "frames";
    while (!o->frames || r->frames < (uint64_t)o->frames) {
        uint64_t c0 = 0;
        sw_status st;
        double waited = 0.0;
        for (;;) {
            /* in slices of at most a second: a camera stream made afresh under us (the old file
             * unlinked) is noticed, and the status line goes on */
            const double slice = o->timeout_s < 0.0 ? 1.0 : fmin(1.0, o->timeout_s - waited);
            st = sw_stream_wait(r->in, o->wait, r->sem, last, slice, &sw_cli_stop, &c0);
            if (st != SW_ETIMEDOUT || sw_cli_stop)
                break;
            waited += slice;
            const int rs = reopen_stale(ctx, o, r, &last);
            if (rs == -1)
                break; /* stopped by a signal while the camera was away: ends below */
            if (rs != SW_EXIT_OK)
                return rs;
            if (o->timeout_s >= 0.0 && waited >= o->timeout_s)
                return sw_cli_fail(SUB, "no frame on --in %s for %g s (%llu frames taken)", o->in,
                                   o->timeout_s, (unsigned long long)r->frames);
            if (status && sw_cli_now() >= next_status) {
                status_line(r);
                next_status = sw_cli_now() + 1.0;
            }
        }
        if (sw_cli_stop) {
            r->stopped_by = "signal";
            break;
        }
        if (st != SW_OK)
            return sw_cli_fail(SUB, "--in %s: %s", o->in, sw_cli_lib_error(ctx, st));
        sw_stream_info ii;
        int done = 0;
        if (r->direct.data) {
            /* zero copy, checked like a seqlock: the frame is whole if no write began before
             * the run's end (write flag down) and none ended during it (cnt0 unchanged) */
            sw_stream_get_info(r->in, &ii);
            if (!ii.write_flag) {
                c0 = ii.cnt0;
                if ((st = sw_rtc_run(r->rtc, &r->direct, r->u, r->s)) != SW_OK)
                    return sw_cli_fail(SUB, "frame %llu: %s", (unsigned long long)c0,
                                       sw_cli_lib_error(ctx, st));
                /* the run has advanced the controller: its commands stand. A frame the camera
                 * wrote over meanwhile (the chain a whole frame period late) was read as a mix
                 * of two frames' rows: counted (JSON torn); --copy avoids it */
                sw_stream_info after;
                atomic_thread_fence(memory_order_acquire); /* the run's reads before the look */
                sw_stream_get_info(r->in, &after);
                r->torn += after.write_flag || after.cnt0 != c0;
                done = 1;
            }
        }
        if (!done) {
            /* the newest frame, copied whole (retried while the camera writes) */
            /* the write time of the frame read: the header's, unless another frame came
             * between the two looks (then read again) */
            for (int tries = 0;; tries++) {
                sw_stream_get_info(r->in, &ii);
                if ((st = read_camera(r->in, &r->frame, r->staging, &c0)) != SW_OK)
                    return sw_cli_fail(SUB, "--in %s: %s", o->in, sw_cli_lib_error(ctx, st));
                if (c0 == ii.cnt0 || tries == 8)
                    break;
            }
            if ((st = sw_rtc_run(r->rtc, &r->frame, r->u, r->s)) != SW_OK)
                return sw_cli_fail(SUB, "frame %llu: %s", (unsigned long long)c0,
                                   sw_cli_lib_error(ctx, st));
        }
        if (r->frames == 0)
            r->first_cnt0 = c0;
        else if (c0 > last + 1)
            r->missed += c0 - last - 1;
        last = c0;
        if ((st = sw_stream_write(r->out, r->u, ubytes)) != SW_OK)
            return sw_cli_fail(SUB, "--out %s: %s", o->out, sw_cli_lib_error(ctx, st));
        const double us = 1e6 * (sw_stream_clock_now() - ii.write_time);
        hist_add(&r->lat, us);
        if ((us < -1000.0 || us > 1e6) && !r->clock_warned) {
            /* a camera that stamps its frames on another clock than ImageStreamIO's */
            r->clock_warned = 1;
            fprintf(stderr,
                    "spotwave %s: warning: frame %llu was written %.6g s from now by this "
                    "machine's CLOCK_TAI: the camera stamps another clock (or another "
                    "machine's), so the latencies are not meaningful\n",
                    SUB, (unsigned long long)c0, us * 1e-6);
        }
        r->frames++;
        if (r->slopes &&
            (st = sw_stream_write(r->slopes, r->s, 2 * (size_t)r->ns * sizeof(float))) != SW_OK)
            return sw_cli_fail(SUB, "--slopes %s: %s", o->slopes, sw_cli_lib_error(ctx, st));
        if (r->tel) {
            double *row = r->row;
            row[0] = (double)c0;
            row[1] = us;
            for (int32_t k = 0; k < 2 * r->ns; k++)
                row[2 + k] = r->s[k];
            for (int32_t a = 0; a < r->nact; a++)
                row[2 + 2 * r->ns + a] = r->u[a];
            if ((st = sw_stream_write(
                     r->tel, row, (2 + 2 * (size_t)r->ns + (size_t)r->nact) * sizeof(double))) !=
                SW_OK)
                return sw_cli_fail(SUB, "--telemetry %s: %s", o->telemetry,
                                   sw_cli_lib_error(ctx, st));
        }
        if (sw_cli_now() >= next_status) {
            /* once a second: streams made afresh under us, and the status line */
            const int rs = reopen_stale(ctx, o, r, &last);
            if (rs == -1) {
                r->stopped_by = "signal";
                break;
            }
            if (rs != SW_EXIT_OK)
                return rs;
            if (status)
                status_line(r);
            next_status += 1.0;
        }
    }
    r->run_s = sw_cli_now() - t0;
    return SW_EXIT_OK;
}

static void summary(const rtc_opts *o, const rtc_run *r, sw_backend backend)
{
    const double med = hist_quantile(&r->lat, 0.5), p99 = hist_quantile(&r->lat, 0.99);
    if (o->json) {
        cJSON *j = cJSON_CreateObject();
        sw_cli_json_string(j, "command", SUB);
        sw_cli_json_string(j, "backend", sw_backend_string(backend));
        sw_cli_json_string(j, "in", o->in);
        sw_cli_json_string(j, "out", o->out);
        sw_cli_json_string(j, "wait", o->wait == SW_STREAM_WAIT_SEM ? "sem" : "spin");
        sw_cli_json_string(j, "stopped_by", r->stopped_by);
        sw_cli_json_u64(j, "frames", r->frames);
        sw_cli_json_u64(j, "missed", r->missed);
        sw_cli_json_u64(j, "first_cnt0", r->first_cnt0);
        sw_cli_json_string(j, "frames_read", o->copy ? "copied" : "in place");
        sw_cli_json_u64(j, "torn", r->torn);
        sw_cli_json_u64(j, "reopened", r->reopened);
        sw_cli_json_int(j, "width", r->width);
        sw_cli_json_int(j, "height", r->height);
        sw_cli_json_int(j, "slopes", 2 * r->ns);
        sw_cli_json_int(j, "actuators", r->nact);
        /* the reconstruction, and D-SABRE's projection (null for the control matrix) */
        sw_cli_json_string(j, "recon", o->c.dsabre ? "dsabre" : "mvm");
        sw_cli_json_string(j, "projection", o->c.dsabre ? projection_name(o->c.projection) : NULL);
        if (r->im)
            sw_cli_json_int(j, "modes_kept", r->kept);
        sw_cli_json_double(j, "latency_median_us", med);
        sw_cli_json_double(j, "latency_p99_us", p99);
        sw_cli_json_double(j, "latency_max_us", r->frames ? r->lat.max : NAN);
        sw_cli_json_double(j, "latency_mean_us", r->frames ? r->lat.sum / (double)r->frames : NAN);
        sw_cli_json_u64(j, "latency_over_100ms", r->lat.over);
        sw_cli_json_double(j, "run_s", r->run_s);
        sw_cli_json_print(j);
        return;
    }
    printf("rtc: %llu frames (%s), %llu missed, %d x %d frames -> %d slopes -> %d commands\n",
           (unsigned long long)r->frames, r->stopped_by, (unsigned long long)r->missed,
           (int)r->width, (int)r->height, (int)(2 * r->ns), (int)r->nact);
    if (r->frames)
        printf("latency: median %.1f us, p99 %.1f us, max %.1f us (camera write -> commands "
               "written)\n",
               med, p99, r->lat.max);
}

static void run_free(sw_context *ctx, rtc_run *r)
{
    if (r->registered)
        sw_host_unregister(ctx, r->direct.data);
    if (r->in && r->sem >= 0)
        sw_stream_release_semaphore(r->in, r->sem);
    sw_stream_close(r->in);
    sw_stream_close(r->out);
    sw_stream_close(r->slopes);
    sw_stream_close(r->tel);
    sw_rtc_destroy(r->rtc);
    sw_image_free(&r->frame);
    free(r->cm);
    free(r->im);
    free(r->valid);
    free(r->filter);
    free(r->kpv);
    free(r->u);
    free(r->s);
    free(r->row);
    free(r->staging);
    free(r->lat.bin);
}

int sw_cmd_rtc(const sw_cli_globals *g, int argc, char **argv)
{
    rtc_opts *o = calloc(1, sizeof *o);
    if (!o)
        return sw_cli_fail(SUB, "out of memory");
    int rc = parse_options(argc, argv, o);
    if (rc == -1) {
        free(o);
        return SW_EXIT_OK;
    }
    if (rc == SW_EXIT_OK)
        rc = build_config(o, 1);
    if (rc == SW_EXIT_OK) {
        sw_cli_file_in("--config", o->config);
        sw_cli_file_in("cm", o->c.cm[0] ? o->c.cm : NULL);
        sw_cli_file_in("im", o->c.im[0] ? o->c.im : NULL);
        sw_cli_file_in("valid", o->c.valid[0] ? o->c.valid : NULL);
        sw_cli_file_in("filter", o->c.filter[0] ? o->c.filter : NULL);
        rc = sw_cli_files_check();
    }
    if (rc != SW_EXIT_OK) {
        free(o);
        return rc;
    }
    if (o->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(o->cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) {
            rc = sw_cli_fail(SUB, "--cpu %d: %s", o->cpu, strerror(errno));
            free(o);
            return rc;
        }
    }
    if (o->fifo > 0) {
        struct sched_param sp = {.sched_priority = o->fifo};
        if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0) {
            rc = sw_cli_fail(SUB,
                             "--fifo %d: %s (real-time scheduling needs CAP_SYS_NICE or an "
                             "rtprio limit)",
                             o->fifo, strerror(errno));
            free(o);
            return rc;
        }
    }
    sw_context *ctx = NULL;
    if ((rc = sw_cli_context(g, SUB, &ctx)) != SW_EXIT_OK) {
        free(o);
        return rc;
    }
    sw_cli_catch_stop();
    rtc_run r;
    memset(&r, 0, sizeof r);
    r.sem = -1;
    rc = setup(ctx, o, &r);
    if (rc == -1) { /* a signal while waiting for the camera */
        r.stopped_by = "signal";
        rc = SW_EXIT_OK;
    } else if (rc == SW_EXIT_OK)
        rc = run(ctx, o, &r);
    if (rc == SW_EXIT_OK)
        summary(o, &r, sw_context_backend(ctx));
    else if (r.frames)
        status_line(&r);
    run_free(ctx, &r);
    sw_context_destroy(ctx);
    free(o);
    return rc;
}

/* ================================================================== spotwave calibrate */

#undef SUB
#define SUB "calibrate"

typedef struct calib_opts {
    rtc_opts r; /* config, dir, open_s, timeout_s (camera, dm in in / out) */
    const char *cm_out, *im_out;
    double amp;
    int hadamard, settle, average;
    double condition;
    long modes;
    int have_condition, have_modes;
} calib_opts;

void sw_cmd_calibrate_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] calibrate --config FILE --camera STREAM --dm STREAM\n"
        "                --out CM.fits [--im IM.fits] [OPTIONS]\n"
        "\n"
        "Measures the interaction matrix of an adaptive-optics bench through its image streams\n"
        "(ImageStreamIO layout of milk/CACAO): pokes each actuator through the mirror's\n"
        "command stream, reads the camera stream, takes the Shack-Hartmann centre-of-gravity\n"
        "slopes (Mocci et al. 2020, J. Opt. Soc. Am. A 37(10), 1548) of the grid in the\n"
        "configuration, and writes the control matrix for spotwave rtc: the truncated\n"
        "pseudo-inverse by SVD, negated (spotwave's controller adds g C s, and the mirror\n"
        "subtracts its shape from the wavefront the sensor sees).\n"
        "\n"
        "  --config FILE          the chain's `key = value` file (spotwave rtc --help): nx, ny,\n"
        "                         pitch_px, x0, y0, valid, threshold, window (cm, im and the\n"
        "                         controller's keys are read and not used)\n"
        "  --set KEY=VALUE        one key, after the file (repeatable)\n"
        "  --camera STREAM        the camera's frames (u8, u16 or f32)\n"
        "  --dm STREAM            the mirror's commands (its size gives the actuators)\n"
        "  --dir DIR              where the streams are (default $MILK_SHM_DIR, else\n"
        "                         ImageStreamIO's folder)\n"
        "  --amp A                poke amplitude in command units (0.05)\n"
        "  --hadamard             poke all actuators at once in the patterns of a Sylvester\n"
        "                         Hadamard matrix (N = the next power of two >= actuators;\n"
        "                         each pattern pushed and pulled), and recover each\n"
        "                         actuator's response as (1/N) H^T of the pattern responses:\n"
        "                         the same matrix with N times the light per measurement\n"
        "                         (Kasper et al. 2004, J. Opt. Soc. Am. A 21(8), 1481)\n"
        "  --settle N             camera frames left out after each poke (0: a bench in\n"
        "                         lockstep, as spotwave sim bench; a camera that exposes\n"
        "                         while the mirror moves needs 1 or more)\n"
        "  --average N            frames averaged per measurement (1)\n"
        "  --condition C          largest condition number kept (the configuration's\n"
        "                         cm_condition, 30; 0: no limit)\n"
        "  --modes N              most modes kept (cm_modes; 0: no limit)\n"
        "  --out CM.fits          the control matrix: width 2 ns (x slopes then y), height\n"
        "                         actuators (spotwave rtc's cm key)\n"
        "  --im IM.fits           the measured interaction matrix, one row per actuator\n"
        "                         (spotwave rtc's im key)\n"
        "  --timeout SECONDS      fail when a frame does not come for this long (10)\n"
        "  --open-timeout SECONDS how long to wait for the streams to appear (10)\n"
        "  --json                 the summary as one JSON object\n"
        "\n"
        "The mirror is left at zero commands at the end (and after a failure).\n"
        "\n"
        "Exit codes: 0 success; 1 a failure (streams, timeouts, a matrix that cannot be\n"
        "inverted); 2 a usage error.\n"
        "\n"
        "Example (with spotwave sim bench in lockstep, no turbulence):\n"
        "  spotwave sim bench --set recon=mvm --no-turbulence --frames 100000 &\n"
        "  spotwave calibrate --config b/rtc.conf --camera sw_cam --dm sw_dm --out cm.fits\n");
}

static int parse_calib(int argc, char **argv, calib_opts *co)
{
    enum {
        OPT_CONFIG = 256,
        OPT_SET,
        OPT_CAMERA,
        OPT_DM,
        OPT_DIR,
        OPT_AMP,
        OPT_HADAMARD,
        OPT_SETTLE,
        OPT_AVERAGE,
        OPT_CONDITION,
        OPT_MODES,
        OPT_OUT,
        OPT_IM,
        OPT_TIMEOUT,
        OPT_OPEN,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"set", required_argument, NULL, OPT_SET},
        {"camera", required_argument, NULL, OPT_CAMERA},
        {"dm", required_argument, NULL, OPT_DM},
        {"dir", required_argument, NULL, OPT_DIR},
        {"amp", required_argument, NULL, OPT_AMP},
        {"hadamard", no_argument, NULL, OPT_HADAMARD},
        {"settle", required_argument, NULL, OPT_SETTLE},
        {"average", required_argument, NULL, OPT_AVERAGE},
        {"condition", required_argument, NULL, OPT_CONDITION},
        {"modes", required_argument, NULL, OPT_MODES},
        {"out", required_argument, NULL, OPT_OUT},
        {"im", required_argument, NULL, OPT_IM},
        {"timeout", required_argument, NULL, OPT_TIMEOUT},
        {"open-timeout", required_argument, NULL, OPT_OPEN},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    rtc_opts *o = &co->r;
    o->timeout_s = 10.0;
    o->open_s = 10.0;
    co->amp = 0.05;
    co->average = 1;
    long n;
    int c;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(SUB, argc, argv, "h", longopts)) != -1) {
        switch (c) {
        case 'h': sw_cmd_calibrate_help(stdout); return -1;
        case OPT_CONFIG:
            if (sw_cli_opt_file(SUB, "--config", optarg, &o->config) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_SET:
            if (o->nset == (int)(sizeof o->set / sizeof o->set[0]))
                return sw_cli_usage(SUB, "--set: more than %d", o->nset);
            o->set[o->nset++] = optarg;
            break;
        case OPT_CAMERA: o->in = optarg; break;
        case OPT_DM: o->out = optarg; break;
        case OPT_DIR: o->dir = optarg; break;
        case OPT_AMP:
            if (sw_cli_opt_double(SUB, "--amp", optarg, SW_CLI_POSITIVE, "a positive amplitude",
                                  &co->amp) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_HADAMARD: co->hadamard = 1; break;
        case OPT_SETTLE:
        case OPT_AVERAGE:
            if (sw_cli_opt_long(SUB, sw_cli_option_name(argv), optarg, c == OPT_SETTLE ? 0 : 1,
                                1000, &n) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            *(c == OPT_SETTLE ? &co->settle : &co->average) = (int)n;
            break;
        case OPT_CONDITION:
            if (sw_cli_opt_double(SUB, "--condition", optarg, SW_CLI_NONNEG,
                                  "0 (no limit) or a number >= 1", &co->condition) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (co->condition > 0.0 && co->condition < 1.0)
                return sw_cli_usage(SUB, "--condition: '%s' is not 0 (no limit) or a number >= 1",
                                    optarg);
            co->have_condition = 1;
            break;
        case OPT_MODES:
            if (sw_cli_opt_long(SUB, "--modes", optarg, 0, 1 << 20, &co->modes) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            co->have_modes = 1;
            break;
        case OPT_OUT:
        case OPT_IM:
            if (sw_cli_opt_file(SUB, sw_cli_option_name(argv), optarg,
                                c == OPT_OUT ? &co->cm_out : &co->im_out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TIMEOUT:
        case OPT_OPEN:
            if (sw_cli_opt_double(SUB, sw_cli_option_name(argv), optarg, SW_CLI_POSITIVE,
                                  "a positive number of seconds",
                                  c == OPT_TIMEOUT ? &o->timeout_s : &o->open_s) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o->json = 1; break;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind < argc)
        return sw_cli_usage(SUB, "unexpected argument '%s'", argv[optind]);
    if (!o->config)
        return sw_cli_usage(SUB, "give the grid: --config FILE");
    if (!o->in || !o->out)
        return sw_cli_usage(SUB, "give the streams: --camera STREAM --dm STREAM");
    if (strcmp(o->in, o->out) == 0)
        return sw_cli_usage(SUB, "--camera and --dm name the same stream '%s'", o->in);
    if (!co->cm_out)
        return sw_cli_usage(SUB, "give --out CM.fits (the control matrix)");
    return SW_EXIT_OK;
}

/* The measurement through the streams (sw_measure_fn). */
typedef struct calib_state {
    sw_context *ctx;
    const calib_opts *co;
    sw_stream *cam, *dm;
    int32_t sem, nact, ns;
    sw_centroid_plan *plan;
    sw_centroid_result res;
    sw_image frame;
    size_t fbytes;
    void *staging; /* read_camera's */
    uint64_t last; /* the camera's newest frame taken */
    double *acc;
    long frames_used, pokes;
    char why[160]; /* what failed, when not the library */
} calib_state;

/* The next camera frame after `after` into cs->frame. */
static sw_status next_frame(calib_state *cs, uint64_t after)
{
    const rtc_opts *o = &cs->co->r;
    uint64_t c0 = 0;
    sw_status st = sw_stream_wait(cs->cam, SW_STREAM_WAIT_SEM, cs->sem, after, o->timeout_s,
                                  &sw_cli_stop, &c0);
    if (st == SW_ETIMEDOUT)
        snprintf(cs->why, sizeof cs->why, "no frame on --camera %s for %g s", o->in, o->timeout_s);
    else if (st == SW_ECANCELED)
        snprintf(cs->why, sizeof cs->why, "stopped by a signal");
    if (st == SW_OK)
        st = read_camera(cs->cam, &cs->frame, cs->staging, &c0);
    if (st == SW_OK)
        cs->last = c0;
    return st;
}

static sw_status calib_measure(void *user, const float *commands, float *slopes)
{
    calib_state *cs = user;
    const int total = cs->co->settle + cs->co->average;
    const int32_t n = 2 * cs->ns;
    for (int32_t k = 0; k < n; k++)
        cs->acc[k] = 0.0;
    sw_status st = SW_OK;
    for (int j = 0; j < total && st == SW_OK; j++) {
        /* the commands are written before every frame: a bench in lockstep renders one frame
         * per write, a free-running camera just sees the same commands again */
        const uint64_t before = sw_stream_cnt0(cs->cam);
        if ((st = sw_stream_write(cs->dm, commands, (size_t)cs->nact * sizeof(float))) != SW_OK ||
            (st = next_frame(cs, before)) != SW_OK)
            break;
        if (j < cs->co->settle)
            continue;
        if ((st = sw_centroid_run(cs->plan, &cs->frame, &cs->res)) != SW_OK)
            break;
        for (int32_t k = 0; k < n; k++)
            cs->acc[k] += cs->res.slopes[k];
        cs->frames_used++;
    }
    cs->pokes++;
    if (st == SW_OK)
        for (int32_t k = 0; k < n; k++)
            slopes[k] = (float)(cs->acc[k] / cs->co->average);
    return st;
}

/* Sylvester Hadamard entry H[a][j] = (-1)^popcount(a & j). */
static float hadamard_entry(uint32_t a, uint32_t j)
{
    return (__builtin_popcount(a & j) & 1) ? -1.0f : 1.0f;
}

/* The interaction matrix (row per actuator: im[a * 2 ns + k]) by Hadamard push-pull: pattern j
 * (column j of H), y_j = (s(+amp h_j) - s(-amp h_j)) / (2 amp); the response of actuator a is
 * (1/N) sum_j H[a][j] y_j, since the rows of H are orthogonal with norm N. */
static sw_status hadamard_im(calib_state *cs, double amp, float *im)
{
    uint32_t N = 1;
    while (N < (uint32_t)cs->nact)
        N <<= 1;
    const int32_t nsl = 2 * cs->ns, nact = cs->nact;
    float *u = malloc((size_t)nact * sizeof(float));
    float *sp = malloc((size_t)nsl * sizeof(float)), *sm = malloc((size_t)nsl * sizeof(float));
    double *acc = calloc((size_t)nsl * nact, sizeof(double));
    sw_status st = SW_OK;
    if (!u || !sp || !sm || !acc) {
        st = SW_ENOMEM;
        snprintf(cs->why, sizeof cs->why, "out of memory");
    }
    for (uint32_t j = 0; j < N && st == SW_OK; j++) {
        for (int32_t a = 0; a < nact; a++)
            u[a] = (float)amp * hadamard_entry((uint32_t)a, j);
        if ((st = calib_measure(cs, u, sp)) != SW_OK)
            break;
        for (int32_t a = 0; a < nact; a++)
            u[a] = -u[a];
        if ((st = calib_measure(cs, u, sm)) != SW_OK)
            break;
        for (int32_t a = 0; a < nact; a++) {
            const double h = hadamard_entry((uint32_t)a, j);
            double *row = acc + (size_t)a * nsl;
            for (int32_t k = 0; k < nsl; k++)
                row[k] += h * ((double)sp[k] - (double)sm[k]) / (2.0 * amp);
        }
    }
    if (st == SW_OK)
        for (size_t i = 0; i < (size_t)nsl * nact; i++)
            im[i] = (float)(acc[i] / N);
    free(u);
    free(sp);
    free(sm);
    free(acc);
    return st;
}

int sw_cmd_calibrate(const sw_cli_globals *g, int argc, char **argv)
{
    calib_opts *co = calloc(1, sizeof *co);
    if (!co)
        return sw_cli_fail(SUB, "out of memory");
    rtc_opts *o = &co->r;
    int rc = parse_calib(argc, argv, co);
    if (rc == -1) {
        free(co);
        return SW_EXIT_OK;
    }
    if (rc == SW_EXIT_OK)
        rc = build_config(o, 0);
    if (rc == SW_EXIT_OK) {
        sw_cli_file_in("--config", o->config);
        sw_cli_file_in("valid", o->c.valid[0] ? o->c.valid : NULL);
        sw_cli_file_out("--out", co->cm_out);
        sw_cli_file_out("--im", co->im_out);
        rc = sw_cli_files_check();
    }
    if (rc != SW_EXIT_OK) {
        free(co);
        return rc;
    }
    const double condition = co->have_condition ? co->condition : o->c.cm_condition;
    const int32_t modes = co->have_modes ? (int32_t)co->modes : o->c.cm_modes;
    sw_context *ctx = NULL;
    if ((rc = sw_cli_context(g, SUB, &ctx)) != SW_EXIT_OK) {
        free(co);
        return rc;
    }
    sw_cli_catch_stop();

    calib_state cs;
    memset(&cs, 0, sizeof cs);
    cs.ctx = ctx;
    cs.co = co;
    cs.sem = -1;
    rtc_run r; /* camera_chain's fields */
    memset(&r, 0, sizeof r);
    sw_centroid_params cp;
    float *im = NULL, *cm = NULL, *zero = NULL;
    double *sing = NULL;
    sw_cm_result res;
    memset(&res, 0, sizeof res);
    const double t0 = sw_cli_now();
    sw_status st = SW_OK;
    rc = camera_chain(ctx, o, "--camera", o->in, &cs.cam, &cp, &r);
    if (rc == SW_EXIT_OK)
        rc = open_wait(ctx, o, "--dm", o->out, o->open_s, &cs.dm);
    if (rc == -1)
        rc = sw_cli_fail(SUB, "stopped by a signal while waiting for the streams");
    sw_stream_info di;
    if (rc == SW_EXIT_OK && (st = sw_stream_get_info(cs.dm, &di)) != SW_OK)
        rc = sw_cli_fail(SUB, "--dm %s: %s", o->out, sw_cli_lib_error(ctx, st));
    if (rc == SW_EXIT_OK && (di.type != SW_STREAM_F32 || di.circular))
        rc =
            sw_cli_fail(SUB, "--dm %s holds %s%s: commands are f32", o->out,
                        sw_stream_type_string(di.type), di.circular ? " in a circular buffer" : "");
    if (rc == SW_EXIT_OK) {
        cs.ns = r.ns;
        cs.nact = (int32_t)(di.frame_bytes / sizeof(float));
        cs.fbytes = (size_t)r.width * r.height * sw_pixel_size(cp.type);
        im = malloc((size_t)2 * cs.ns * cs.nact * sizeof(float));
        cm = malloc((size_t)2 * cs.ns * cs.nact * sizeof(float));
        zero = calloc((size_t)cs.nact, sizeof(float));
        cs.acc = calloc((size_t)2 * cs.ns, sizeof(double));
        cs.staging = malloc(cs.fbytes);
        sing = calloc((size_t)(cs.nact < 2 * cs.ns ? cs.nact : 2 * cs.ns), sizeof(double));
        if (!im || !cm || !zero || !cs.acc || !sing || !cs.staging)
            rc = sw_cli_fail(SUB, "out of memory");
    }
    if (rc == SW_EXIT_OK &&
        ((st = sw_centroid_create(ctx, &cp, &cs.plan)) != SW_OK ||
         (st = sw_centroid_result_alloc(cs.plan, 1, SW_MEM_HOST, &cs.res)) != SW_OK ||
         (st = sw_image_alloc(ctx, r.width, r.height, cp.type, &cs.frame)) != SW_OK))
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    if (rc == SW_EXIT_OK && ((st = sw_stream_claim_semaphore(cs.cam, &cs.sem)) != SW_OK))
        rc = sw_cli_fail(SUB, "--camera %s: %s", o->in, sw_cli_lib_error(ctx, st));
    if (rc == SW_EXIT_OK) {
        sw_stream_flush_semaphore(cs.cam, cs.sem);
        /* the camera runs (a bench in lockstep sends its first frame when we listen) */
        if ((st = next_frame(&cs, 0)) != SW_OK)
            rc = sw_cli_fail(SUB, "--camera %s: %s", o->in,
                             cs.why[0] ? cs.why : sw_cli_lib_error(ctx, st));
    }
    if (rc == SW_EXIT_OK) {
        st = co->hadamard
                 ? hadamard_im(&cs, co->amp, im)
                 : sw_interaction_matrix(ctx, cs.nact, 2 * cs.ns, co->amp, calib_measure, &cs, im);
        if (st != SW_OK)
            rc = sw_cli_fail(SUB, "measuring: %s", cs.why[0] ? cs.why : sw_cli_lib_error(ctx, st));
    }
    if (cs.dm && zero)
        sw_stream_write(cs.dm, zero, (size_t)cs.nact * sizeof(float)); /* the mirror flat */
    if (rc == SW_EXIT_OK) {
        res.singular = sing;
        if ((st = sw_control_matrix(ctx, im, 2 * cs.ns, cs.nact, condition, modes, cm, &res)) !=
            SW_OK)
            rc = sw_cli_fail(SUB, "control matrix: %s", sw_cli_lib_error(ctx, st));
    }
    if (rc == SW_EXIT_OK) {
        /* the chain adds g C s and the mirror subtracts its shape: C = -pinv(IM measured) */
        for (size_t i = 0; i < (size_t)2 * cs.ns * cs.nact; i++)
            cm[i] = -cm[i];
        sw_image img;
        const char *out[2] = {co->cm_out, co->im_out};
        float *mat[2] = {cm, im};
        for (int i = 0; i < 2 && rc == SW_EXIT_OK; i++) {
            if (!out[i])
                continue;
            const char *staged = sw_cli_file_staged(i ? "--im" : "--out", out[i]);
            if (!staged)
                rc = SW_EXIT_FAIL;
            else if ((st = sw_image_wrap(mat[i], 2 * cs.ns, cs.nact, 0, SW_PIX_F32, SW_MEM_HOST,
                                         &img)) != SW_OK ||
                     (st = sw_fits_write(ctx, staged, &img, 1)) != SW_OK)
                rc = sw_cli_fail(SUB, "%s: %s", out[i], sw_cli_lib_error(ctx, st));
        }
    }
    if (rc == SW_EXIT_OK) {
        const int32_t nsv = cs.nact < 2 * cs.ns ? cs.nact : 2 * cs.ns;
        const double secs = sw_cli_now() - t0;
        if (o->json) {
            cJSON *j = cJSON_CreateObject();
            sw_cli_json_string(j, "command", SUB);
            sw_cli_json_string(j, "camera", o->in);
            sw_cli_json_string(j, "dm", o->out);
            sw_cli_json_string(j, "method", co->hadamard ? "hadamard" : "push-pull");
            sw_cli_json_double(j, "amp", co->amp);
            sw_cli_json_int(j, "actuators", cs.nact);
            sw_cli_json_int(j, "slopes", 2 * cs.ns);
            sw_cli_json_int(j, "modes_kept", res.kept);
            sw_cli_json_double(j, "singular_first", nsv ? sing[0] : NAN);
            sw_cli_json_double(j, "singular_last_kept", res.kept ? sing[res.kept - 1] : NAN);
            sw_cli_json_int(j, "measurements", cs.pokes);
            sw_cli_json_int(j, "frames_used", cs.frames_used);
            sw_cli_json_double(j, "seconds", secs);
            sw_cli_json_string(j, "cm", co->cm_out);
            sw_cli_json_string(j, "im", co->im_out);
            sw_cli_json_print(j);
        } else
            printf("calibrate: %d actuators x %d slopes (%s, %ld measurements, %.1f s); %d modes "
                   "kept; control matrix %s\n",
                   (int)cs.nact, (int)(2 * cs.ns), co->hadamard ? "Hadamard" : "push-pull",
                   cs.pokes, secs, (int)res.kept, co->cm_out);
    }
    if (cs.cam && cs.sem >= 0)
        sw_stream_release_semaphore(cs.cam, cs.sem);
    sw_stream_close(cs.cam);
    sw_stream_close(cs.dm);
    sw_centroid_result_free(&cs.res);
    sw_centroid_destroy(cs.plan);
    sw_image_free(&cs.frame);
    free(r.valid);
    free(cs.acc);
    free(cs.staging);
    free(im);
    free(cm);
    free(zero);
    free(sing);
    sw_context_destroy(ctx);
    free(co);
    return rc;
}
