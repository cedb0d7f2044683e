/*
 * bench_loop: the adaptive-optics loop (loop.h, issue 11 "Acceptance, measured"): the real-time
 * chain's latency from camera frame to commands, the closed-loop simulator's speed, seed 002's
 * Fig. 11 closed-loop protocol, and open versus closed loop against the DM's fitting error.
 *
 * --latency: sw_rtc_run, a u16 frame in host memory (pinned on CUDA: sw_image_alloc) to the
 *   commands in host memory (a caller buffer, pinned on CUDA), the plan's whole chain: copy in,
 *   calibration (dark frame subtracted, threshold of 3 read noises subtracted), centre-of-gravity
 *   centroids, slopes, reconstruction, integrator (gain 0.5), commands out, telemetry ring of
 *   --telemetry slots (default 256) written. Systems (lenslet 0.2 m in the telescope pupil):
 *     40 x 40 SH on 240 x 240 px (6 px per lenslet), D = 8 m
 *     80 x 80 SH on 640 x 640 px (8 px), D = 16 m
 *     200 x 200 SH on 1600 x 1600 px (8 px), D = 40 m
 *   (--quick: 8 x 8 on 48 x 48, 6 px, D = 1.6 m). Optics: 10 um pixels, 0.7 um, focal length with
 *   lambda f / d = 1.5 px. Pupil: a circle of the array's diameter; valid lenslets: lit fraction
 *   >= 0.5 (sw_shsim_truth's illum), so the slope count is a real system's; the DM has
 *   (n + 1)^2 Fried actuators: the D-SABRE paths give a command for each, the MVM for those at
 *   the corners of valid lenslets.
 *   Frames: one spot pattern per size, the GEOMETRIC SH model (Gaussian spots, 8 samples per
 *   lenslet) of one von Karman screen (r0 0.15 m at 0.5 um, L0 25 m, sw_phase_screen of 4 samples
 *   per lenslet and 8 more on each side), 5000 e- per fully lit lenslet, then POOL = 8 noisy u16
 *   frames from it (sw_detector_apply: shot noise, 2 e- read noise, bias 100 ADU, gain 1 e-/ADU;
 *   one noise seed per frame), rotated between samples.
 *   Reconstructors (the "config" field "<n>x<n> <path>"):
 *     mvm-fp32, mvm-fp16  r = C s (sw_rtc MVM; fp16: FP16 storage, FP32 accumulation). C is
 *                         nact x 2 ns over the actuators at the corners of valid lenslets (the
 *                         usual Fried choice; 1345 / 5185 / ~31800 of them for 40 / 80 / 200,
 *                         2 ns = 2528 / 10048 / ~62900). For 40 x 40 (and --quick) a real C:
 *                         the interaction matrix of the GEOMETRIC model's true slopes
 *                         (sw_shsim_truth, in pixels) of each actuator's DM surface
 *                         (sw_dm_shaper on 4 samples per lenslet, Gaussian coupling 0.3),
 *                         push-pull 0.05 um (sw_interaction_matrix with a callback), then
 *                         sw_control_matrix (condition number <= 30). For 80 x 80 and
 *                         200 x 200 a random matrix of the right shape (uniform in +-1e-3):
 *                         the latency does not depend on the values (the JSON "note" says
 *                         so). The 200 x 200 C has 2.0e9 entries (8 GB in FP32, just under
 *                         sw_rtc's 2^31): on the GPU only (a CPU frame would take ~0.4 s).
 *     dsabre-local        D-SABRE (H-PME, overlap 1, extend_eq17 = 1, k chosen as seed 002's
 *                         m = 7 rule: k = 8 for 40, 16 for 80, 32 for 200, 2 for --quick; the m
 *                         the plan gets is printed) with the distributed projection (Eq. 14-16:
 *                         sw_projector_params_window of the plan's window, Gaussian 0.3).
 *     dsabre-local+unseen the same with piston and waffle filtered out of r every frame
 *                         (sw_unseen_modes of the valid lenslets; rt_filter on the GPU, one
 *                         block, fused with the integrator): the unseen-mode filter's cost.
 *     dsabre-global       40 x 40 (and --quick) only: the same D-SABRE, then the global
 *                         projection (Eq. 13) of the extended lattice (sw_projector_params_global).
 *   FP16 is a GPU option: the CPU backend (--backend cpu, the same cases) skips mvm-fp16.
 *   Repetitions: --reps 10000, --warmup 100 and --budget 300 s per case unless given (--quick:
 *   100, 5, 2 s; the CPU backend: budget 20 s), median and p99 (nearest rank) of the host clock
 *   around sw_rtc_run alone (it has finished when it returns). One "loop_latency_summary" JSON
 *   line per case sets them beside the issue's targets on the H100 (80 x 80 MVM: median < 50 us and
 *   p99 < 80 us, incl. the frame's copy in; 200 x 200 D-SABRE: median < 150 us) and the published
 *   anchors: pyRTC 290 us p99 at 60 x 60 on an RTX 5090, CACAO 3-5 kHz (200-333 us per frame) on
 *   SCExAO, an ELT-scale CPU RTC under 600 us.
 *
 * --speed: closed-loop simulation speed, sw_loop_step (screen, DM, SH frame, RTC, science PSF):
 *   the seed 002 system (sw_loop_params_default: 32 x 32, D = 12 m, DIFFRACTION) with D-SABRE
 *   LOCAL k = 4 and with MVM, and an 80 x 80 system, D = 30 m (lenslet 0.375 m as the seed's
 *   system; an ELT-class sampling), DIFFRACTION, D-SABRE LOCAL k = 16 and MVM (the 80 x 80 MVM
 *   calibration pokes 6561 actuators through the diffraction model: GPU only). --quick: 8 x 8,
 *   D = 3 m, k = 2. 20 warm-up frames then 200 timed frames (--quick: 5 and 20), host clock per
 *   step; frames/s = 1 / median. Target: > 2000 frames/s for 32 x 32 DIFFRACTION on the GPU;
 *   anchor: COMPASS (GPU) about 1 kHz for VLT-size systems. Also printed: the plan's creation
 *   time and the long-exposure J Strehl after those frames (a check that the loop closed).
 *
 * --fig11: seed 002 Fig. 11 / section 4.B, reduced: 32 x 32 SH, square pupil, 33 x 33 DM
 *   (Gaussian influence), D = 12 m, r0 = 0.15 m at 0.5 um, L0 = 25 m, 10 km/h, 500 Hz, DIFFRACTION
 *   SH, J-band science (1.25 um), 20 warm-up frames then a long exposure of --frames frames
 *   (default 500), screen seeds 1..--screens (default 3); couplings 0.2 0.3 0.4 0.5, integrator
 *   gains 0.3 0.5 0.7 1.0; methods mvm, sabre (global SABRE + global projection), dsabre4-global,
 *   dsabre4-local, dsabre16-global, dsabre16-local (D-SABRE k x k, H-PME, overlap 1, global or
 *   distributed projection). Noise-free unless --magnitude M (2 e- read noise, the simulator's
 *   default photometry; the seed's noisy case is magnitude 8). One "loop_fig11" JSON line per
 *   (method, coupling, gain): mean and sample std over screens of the long-exposure Strehl, mean
 *   turbulence and residual RMS (nm, over the long exposure), and "diverged": the screens whose
 *   mean residual over the long exposure exceeded their mean open-loop turbulence RMS, or whose
 *   step failed (a non-finite command). The seed reports divergence of the distributed
 *   projection at 40-50 % coupling unless the gain is lowered to 0.7 / 0.5. A table on stderr:
 *   rows method, columns coupling x gain (mean Strehl; '!' marks a cell with a diverged screen).
 *   --quick: 8 x 8, D = 3 m, k = 2 and 4 in place of 4 and 16, 1 screen, 20 frames, coupling 0.3,
 *   gain 0.5 (unless --couplings / --gains / --screens / --frames say otherwise).
 *
 * --fig12: Brunner et al. 2018 (JOSA A 35(6)) Figs. 12-14 / sections 4.B.2 and 5.A, reduced: 16 x
 * 16 SH (the paper: 32 x 32) with D = 6 m (the paper's 0.375 m lenslet and r0 = 0.15 m kept),
 * annular pupil (obscuration 0.3 of D; lenslets lit >= 0.5 valid; D-SABRE zero-pads the rest of the
 * square array), 17 x 17 DM, coupling 0.4, integrator gain 0.7, DIFFRACTION SH, J-band science, 20
 * warm-up frames then
 *   --frames (default 200; the paper: 500), screen seeds 1..--screens (default 10; the paper:
 *   50), guide-star magnitudes noise-free, 6, 8, 9, 10, 11 (2 e- read noise; --magnitude M: that
 *   one only). Methods: sabre (global SABRE + global projection, the baseline), and D-SABRE
 *   n/8 x n/8 (moderate: 2 x 2 here, the paper's 4 x 4) and n/2 x n/2 (strong: 8 x 8, the paper's
 *   16 x 16), H-PME, overlap 1, with the global (Eq. 13) or distributed (Eq. 14-16) projection,
 *   the latter on whole windows with one matrix ("local": section 5.A, Fig. 14's "MM") or on the
 *   pupil only with a matrix per partition ("local-pupil": section 4.A, Fig. 14's "MV");
 *   --methods picks some (then no Fig. 13). One "loop_fig12" JSON line per (method, magnitude)
 *   as fig11's; on stderr the table and, per partitioning, MM against MV (Fig. 14). Then
 *   Fig. 13: noise-free, 20 closed-loop frames, D-SABRE
 *   n/4 x n/4 (8 x 8 for 32 x 32) with the distributed projection and global SABRE: the residual
 *   map's RMS and the RMS of its mean over each of the k x k blocks of the lenslet array (the
 *   partition pistons the paper looks for in its maps), mean over the screens ("loop_fig13").
 *   --quick: 8 x 8, 1 screen, 20 frames, noise-free and magnitude 8.
 *
 * --fitting: open loop against closed loop on the seed 002 system (coupling 0.3, gain 0.5), MVM and
 *   D-SABRE LOCAL k = 4: after the 20 warm-up frames, over --frames frames (default 500; --quick:
 *   8 x 8 and 20), the mean turbulence RMS (the open-loop residual), the mean closed-loop residual
 *   RMS and the DM's fitting error (sw_loop_fitting_error, on at most 100 frames spread evenly),
 *   all in nm, and the long-exposure J Strehl.
 *
 * Default (no mode): --latency --speed --fitting (--fig11 and --fig12 are long: ask for them).
 * Options (besides the harness's): the modes, --frames N, --screens N, --magnitude M,
 * --methods LIST, --couplings LIST, --gains LIST (comma-separated), --sizes LIST (latency: of 40,
 * 80, 200), --telemetry N, --influence gaussian|bezier (fig11: the DM's influence functions;
 * Gaussian by default).
 * Output: JSON lines on stdout, tables on stderr (none with --json-only).
 */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG "bench_loop"

/* ---------------------------------------------------------------- latency set-up */

#define LENSLET_M     0.2  /* lenslet in the telescope pupil, m        */
#define PIXEL_UM      10.0 /* detector pixel                            */
#define WFS_WL_UM     0.7  /* WFS wavelength                            */
#define NYQ_PX        1.5  /* lambda f / d in pixels                    */
#define R0_M          0.15 /* at 0.5 um                                 */
#define L0_M          25.0
#define SCREEN_SPL    4   /* screen samples per lenslet                 */
#define SCREEN_PAD    8   /* screen samples beyond the array, per side  */
#define LENSLET_FLUX  5e3 /* e- per fully lit lenslet                   */
#define READ_E        2.0
#define BIAS_ADU      100.0
#define THRESHOLD_ADU (3.0 * READ_E)
#define MIN_ILLUM     0.5
#define POOL          8 /* frames rotated                              */
#define DM_Q          4 /* DM surface samples per lenslet (calibration) */
#define POKE_UM       0.05
#define CM_CONDITION  30.0
#define COUPLING      0.3
#define GAIN          0.5
#define SEED_SCREEN   0x100b0001ull
#define SEED_NOISE    0x100b0002ull
#define SEED_CM       0x100b0003ull

#define ANCHORS                                                                                    \
    "pyRTC 290 us p99 at 60x60 (RTX 5090); CACAO 3-5 kHz (SCExAO); ELT-scale CPU RTC < 600 us"
#define RANDOM_NOTE                                                                                \
    "random control matrix of the right shape: the latency does not depend on its values"

/* ---------------------------------------------------------------- options */

#define MAX_LIST 16

typedef struct prog_opts {
    int latency, speed, fig11, fig12, fitting;
    int frames, screens; /* 0: the mode's default */
    double magnitude;    /* NAN: noise-free */
    int method_mask;     /* fig11: bit per method (0: all) */
    char methods[256];   /* --methods as given ("": none); fig12 matches its own names */
    double couplings[MAX_LIST], gains[MAX_LIST];
    int ncoupling, ngain;
    int size_mask; /* latency: bit 0 40, bit 1 80, bit 2 200 (0: all) */
    int telemetry;
    sw_dm_influence influence; /* fig11: the DM's influence functions (Gaussian) */
    int reps_set, warmup_set, budget_set;
    sw_bench_options b;
} prog_opts;

static const char extra_help[] =
    "Modes (default: --latency --speed --fitting):\n"
    "  --latency                frame-to-commands latency of the real-time chain (sw_rtc)\n"
    "  --speed                  closed-loop simulation frames per second (sw_loop_step)\n"
    "  --fig11                  Brunner et al. 2018 Fig. 11 closed-loop Strehl (long)\n"
    "  --fig12                  Brunner et al. 2018 Figs. 12-14, annular pupil, reduced\n"
    "  --fitting                open loop vs closed loop vs the DM's fitting error\n"
    "Options:\n"
    "  --sizes LIST             latency: of 40,80,200 (default all)\n"
    "  --telemetry N            latency: telemetry ring slots, 0..65536 (default 256)\n"
    "  --frames N               fig11 / fitting: long-exposure frames (default 500;\n"
    "                           fig12: 200)\n"
    "  --screens N              fig11: screen seeds (default 3; fig12: 10)\n"
    "  --magnitude M            fig11: guide-star magnitude (default: noise-free);\n"
    "                           fig12: that magnitude only (default: free,6,8,9,10,11)\n"
    "  --influence F            fig11 / fig12: gaussian (default) or bezier influence\n"
    "                           functions\n"
    "  --methods LIST           fig11: of mvm,sabre,dsabre4-global,dsabre4-local,\n"
    "                           dsabre16-global,dsabre16-local (default all); fig12: of\n"
    "                           sabre,dsabreK-global,dsabreK-local,dsabreK-local-pupil\n"
    "                           with K = 2, 8 (--quick: 2, 4) (default all)\n"
    "  --couplings LIST         fig11: actuator couplings (default 0.2,0.3,0.4,0.5)\n"
    "  --gains LIST             fig11: integrator gains (default 0.3,0.5,0.7,1.0)\n"
    "Latency defaults: --reps 10000 --warmup 100 --budget 300 (CPU backend: budget 20 s).\n";

/* fig11's methods */
#define N_METHOD 6
typedef struct fig_method {
    const char *name;
    sw_loop_recon recon;
    int32_t k, k_quick; /* D-SABRE partitions (full / --quick) */
} fig_method;

static const fig_method METHODS[N_METHOD] = {
    {"mvm", SW_LOOP_MVM, 0, 0},
    {"sabre", SW_LOOP_SABRE_GLOBAL, 0, 0},
    {"dsabre4-global", SW_LOOP_DSABRE_GLOBAL, 4, 2},
    {"dsabre4-local", SW_LOOP_DSABRE_LOCAL, 4, 2},
    {"dsabre16-global", SW_LOOP_DSABRE_GLOBAL, 16, 4},
    {"dsabre16-local", SW_LOOP_DSABRE_LOCAL, 16, 4},
};

static int usage_error(const char *opt, const char *v, const char *what)
{
    fprintf(stderr, "%s: %s: '%s' is not %s (see '%s --help')\n", PROG, opt, v, what, PROG);
    return 2;
}

/* A comma-separated list of numbers in (lo, hi]; returns the count, -1 when malformed. */
static int parse_list(const char *v, double lo, double hi, double *out)
{
    int n = 0;
    const char *s = v;
    while (*s) {
        char *e = NULL;
        const double x = strtod(s, &e);
        if (e == s || !(x > lo && x <= hi) || n == MAX_LIST)
            return -1;
        out[n++] = x;
        if (*e == ',')
            e++;
        else if (*e)
            return -1;
        s = e;
    }
    return n;
}

static int parse_int_range(const char *v, long lo, long hi, int *out)
{
    char *e = NULL;
    const long k = strtol(v, &e, 10);
    if (e == v || *e || k < lo || k > hi)
        return 1;
    *out = (int)k;
    return 0;
}

/* Takes this program's own options out of argv (the harness refuses what it does not know) and
 * notes which of the harness's repetition options were given. */
static int parse_own(int *argc, char **argv, prog_opts *o)
{
    int n = 1;
    o->magnitude = NAN;
    o->telemetry = 256;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--latency") == 0) {
            o->latency = 1;
        } else if (strcmp(a, "--speed") == 0) {
            o->speed = 1;
        } else if (strcmp(a, "--fig11") == 0) {
            o->fig11 = 1;
        } else if (strcmp(a, "--fig12") == 0) {
            o->fig12 = 1;
        } else if (strcmp(a, "--fitting") == 0) {
            o->fitting = 1;
        } else if (strcmp(a, "--frames") == 0 || strcmp(a, "--screens") == 0 ||
                   strcmp(a, "--magnitude") == 0 || strcmp(a, "--methods") == 0 ||
                   strcmp(a, "--couplings") == 0 || strcmp(a, "--gains") == 0 ||
                   strcmp(a, "--sizes") == 0 || strcmp(a, "--telemetry") == 0 ||
                   strcmp(a, "--influence") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "%s: %s needs a value (see '%s --help')\n", PROG, a, PROG);
                return 2;
            }
            const char *v = argv[++i];
            if (strcmp(a, "--frames") == 0) {
                if (parse_int_range(v, 1, 1000000, &o->frames))
                    return usage_error(a, v, "a whole number in 1..1000000");
            } else if (strcmp(a, "--screens") == 0) {
                if (parse_int_range(v, 1, 10000, &o->screens))
                    return usage_error(a, v, "a whole number in 1..10000");
            } else if (strcmp(a, "--influence") == 0) {
                if (sw_dm_influence_parse(v, &o->influence) != SW_OK)
                    return usage_error(a, v, "gaussian or bezier");
            } else if (strcmp(a, "--telemetry") == 0) {
                if (parse_int_range(v, 0, 65536, &o->telemetry))
                    return usage_error(a, v, "a whole number in 0..65536");
            } else if (strcmp(a, "--magnitude") == 0) {
                char *e = NULL;
                o->magnitude = strtod(v, &e);
                if (e == v || *e || !(o->magnitude > -5 && o->magnitude < 30))
                    return usage_error(a, v, "a magnitude in -5..30");
            } else if (strcmp(a, "--couplings") == 0) {
                o->ncoupling = parse_list(v, 0.0, 0.999, o->couplings);
                if (o->ncoupling < 1)
                    return usage_error(a, v, "a list of couplings in (0, 1)");
            } else if (strcmp(a, "--gains") == 0) {
                o->ngain = parse_list(v, 0.0, 2.0, o->gains);
                if (o->ngain < 1)
                    return usage_error(a, v, "a list of gains in (0, 2]");
            } else if (strcmp(a, "--sizes") == 0) {
                double s[MAX_LIST];
                const int ns = parse_list(v, 0.0, 1e9, s);
                if (ns < 1)
                    return usage_error(a, v, "a list of 40, 80, 200");
                for (int k = 0; k < ns; k++) {
                    if (s[k] == 40)
                        o->size_mask |= 1;
                    else if (s[k] == 80)
                        o->size_mask |= 2;
                    else if (s[k] == 200)
                        o->size_mask |= 4;
                    else
                        return usage_error(a, v, "a list of 40, 80, 200");
                }
            } else { /* --methods: fig11's names here, fig12's (which depend on the size) in
                        fig12 */
                char buf[256];
                snprintf(o->methods, sizeof o->methods, "%s", v);
                snprintf(buf, sizeof buf, "%s", v);
                int any = 0;
                for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
                    int found = -1;
                    for (int m = 0; m < N_METHOD; m++)
                        if (strcmp(t, METHODS[m].name) == 0)
                            found = m;
                    if (found >= 0)
                        o->method_mask |= 1 << found;
                    else if (strncmp(t, "dsabre", 6) != 0)
                        return usage_error(a, t, "a method name");
                    any = 1;
                }
                if (!any)
                    return usage_error(a, v, "a list of methods");
            }
        } else {
            if (strcmp(a, "--reps") == 0)
                o->reps_set = 1;
            else if (strcmp(a, "--warmup") == 0)
                o->warmup_set = 1;
            else if (strcmp(a, "--budget") == 0)
                o->budget_set = 1;
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    argv[n] = NULL;
    if (!o->latency && !o->speed && !o->fig11 && !o->fig12 && !o->fitting)
        o->latency = o->speed = o->fitting = 1;
    if (!o->method_mask && !o->methods[0])
        o->method_mask = (1 << N_METHOD) - 1; /* with --methods but none of fig11's: 0 */
    if (!o->size_mask)
        o->size_mask = 7;
    return SW_BENCH_CONTINUE;
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    const char *m = sw_context_error(ctx);
    fprintf(stderr, "%s: %s: %s\n", PROG, what, m && m[0] ? m : sw_status_string(st));
    return 1;
}

static int oom(void)
{
    fprintf(stderr, "%s: out of memory\n", PROG);
    return 1;
}

static void json_start(const char *bench, const char *config, sw_context *ctx)
{
    char device[256];
    sw_bench_device_name(ctx, device, sizeof device);
    printf("{\"bench\":");
    sw_json_write_string(stdout, bench);
    printf(",\"config\":");
    sw_json_write_string(stdout, config);
    printf(",\"backend\":\"%s\",\"device\":", sw_backend_string(sw_context_backend(ctx)));
    sw_json_write_string(stdout, device);
}

/* ,"name":value or null when not finite */
static void json_num(const char *name, double v)
{
    if (isfinite(v))
        printf(",\"%s\":%.6g", name, v);
    else
        printf(",\"%s\":null", name);
}

static int is_gpu(sw_context *ctx)
{
    return sw_context_backend(ctx) == SW_BACKEND_CUDA;
}

/* ================================================================ latency */

typedef struct lat_size {
    int32_t n, px, k;
    int real_cm; /* 1: measured interaction and control matrices; 0: random */
} lat_size;

/* One size's system: the frames, the mask, the centroid parameters. */
typedef struct lat_sys {
    int32_t n, px, w;
    double lenslet_um, focal_mm;
    uint8_t *mask;
    int32_t ns;   /* valid lenslets = slopes per axis */
    int32_t *act; /* MVM: the corners of valid lenslets, flat (n + 1)^2 index */
    int32_t nact_mvm;
    float *dark;                 /* w x w bias frame               */
    sw_image frames[POOL];       /* u16 (pinned on CUDA)           */
    sw_shsim *sim;               /* GEOMETRIC, the circular pupil  */
    sw_sh_geometry geom;         /* valid = mask                   */
    sw_centroid_params centroid; /* the chain's centroid stage     */
} lat_sys;

static void lat_sys_free(lat_sys *s)
{
    for (int i = 0; i < POOL; i++)
        sw_image_free(&s->frames[i]);
    sw_shsim_destroy(s->sim);
    free(s->mask);
    free(s->act);
    free(s->dark);
    memset(s, 0, sizeof *s);
}

/* The simulator, the mask, and the POOL noisy frames of one spot pattern. */
static int lat_sys_make(sw_context *ctx, const lat_size *z, lat_sys *s)
{
    memset(s, 0, sizeof *s);
    s->n = z->n;
    s->px = z->px;
    s->w = z->n * z->px;
    s->lenslet_um = z->px * PIXEL_UM;
    s->focal_mm = NYQ_PX * s->lenslet_um * PIXEL_UM / WFS_WL_UM / 1000.0;
    const int32_t n = s->n, w = s->w;

    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = w;
    sw_sh_geometry_default(&sp.geom);
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.geom.pitch_px = s->px;
    sp.geom.nx = sp.geom.ny = n;
    sp.geom.pixel_um = PIXEL_UM;
    sp.geom.focal_mm = s->focal_mm;
    sp.model = SW_SH_GEOMETRIC;
    sp.wavelength_um = WFS_WL_UM;
    sp.flux_e = LENSLET_FLUX;
    sp.pupil = sw_pupil_circle(n * s->lenslet_um);
    sp.samples = 8; /* the mean gradients: 8 x 8 samples per lenslet */
    s->geom = sp.geom;

    sw_sh_truth tr;
    memset(&tr, 0, sizeof tr);
    sw_wavefront scr;
    memset(&scr, 0, sizeof scr);
    sw_image e = {0};
    s->mask = malloc((size_t)n * n);
    s->dark = malloc((size_t)w * w * sizeof *s->dark);
    if (!s->mask || !s->dark)
        return oom();
    for (int64_t i = 0; i < (int64_t)w * w; i++)
        s->dark[i] = (float)BIAS_ADU;

    sw_status st = sw_shsim_create(ctx, &sp, &s->sim);
    if (st == SW_OK)
        st = sw_shsim_truth(s->sim, &tr); /* flat: the illumination */
    if (st != SW_OK)
        return fail(ctx, "SH simulator", st);
    for (int64_t l = 0; l < (int64_t)n * n; l++) {
        s->mask[l] = tr.illum[l] >= MIN_ILLUM;
        s->ns += s->mask[l];
    }
    sw_sh_truth_free(&tr);
    s->geom.valid = s->mask;
    /* the MVM's actuators: the Fried corners of the valid lenslets */
    s->act = malloc((size_t)(n + 1) * (n + 1) * sizeof *s->act);
    if (!s->act)
        return oom();
    for (int32_t cy = 0; cy <= n; cy++)
        for (int32_t cx = 0; cx <= n; cx++) {
            int lit = 0;
            for (int32_t iy = cy - 1; iy <= cy; iy++)
                for (int32_t ix = cx - 1; ix <= cx; ix++)
                    if (ix >= 0 && iy >= 0 && ix < n && iy < n && s->mask[iy * n + ix])
                        lit = 1;
            if (lit)
                s->act[s->nact_mvm++] = cy * (n + 1) + cx;
        }

    /* the turbulence, in the lenslet plane: SCREEN_SPL samples per lenslet */
    sw_turbulence turb;
    sw_turbulence_default(&turb);
    turb.r0_m = R0_M;
    turb.L0_m = L0_M;
    turb.wavelength_um = 0.5;
    const int32_t nscr = n * SCREEN_SPL + 2 * SCREEN_PAD;
    st = sw_phase_screen(ctx, &turb, nscr, LENSLET_M / SCREEN_SPL, SEED_SCREEN, (uint64_t)n, &scr);
    if (st == SW_OK) {
        scr.spacing_um = s->lenslet_um / SCREEN_SPL;
        scr.u0_um = scr.v0_um = -0.5 * (nscr - 1) * scr.spacing_um;
        st = sw_shsim_add_wavefront(s->sim, &scr, 1.0);
    }
    if (st == SW_OK)
        st = sw_image_alloc(ctx, w, w, SW_PIX_F32, &e);
    if (st == SW_OK)
        st = sw_shsim_run(s->sim, &e, 0);
    sw_detector det;
    sw_detector_default(&det);
    det.shot_noise = 1;
    det.read_noise_e = READ_E;
    det.bias_adu = BIAS_ADU;
    det.gain_e_per_adu = 1.0;
    det.out_type = SW_PIX_U16;
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        det.seed = SEED_NOISE + (uint64_t)(n * POOL + i);
        st = sw_image_alloc(ctx, w, w, SW_PIX_U16, &s->frames[i]);
        if (st == SW_OK)
            st = sw_detector_apply(ctx, &det, &e, &s->frames[i]);
    }
    sw_image_free(&e);
    sw_wavefront_free(&scr);
    if (st != SW_OK)
        return fail(ctx, "rendering the frames", st);

    sw_centroid_params_default(&s->centroid);
    s->centroid.geometry = s->geom;
    s->centroid.width = s->centroid.height = w;
    s->centroid.type = SW_PIX_U16;
    s->centroid.dark = s->dark;
    s->centroid.threshold_mode = SW_THRESHOLD_SUBTRACT;
    s->centroid.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    s->centroid.threshold = THRESHOLD_ADU;
    return 0;
}

/* ---- the measured interaction matrix (sw_interaction_matrix's callback) */

typedef struct im_user {
    lat_sys *s;
    sw_dm_params dm;
    sw_lattice_grid g; /* the DM surface's samples (lattice units) */
    double *fx, *fy;   /* one actuator's profile along x and y on the grid */
    sw_wavefront wf;   /* the same grid in the pupil plane (um) */
    double px_per_rad; /* slopes in pixels, as the chain's centroids */
} im_user;

/* The mirror's shape +phi_u as the OPD, the GEOMETRIC model's true slopes of the valid lenslets
 * (x block then y block, pixels). The surface is seed 002 Eq. 12 summed here over the non-zero
 * commands (a push-pull has one) with the library's profile (sw_dm_profile); sw_dm_shaper would
 * give the same through an sgemm, and OpenBLAS's spinning threads slow the simulator's OpenMP
 * loops that follow each call many times over on a small machine. */
static void im_surface(im_user *u, const float *commands)
{
    const sw_lattice_grid *g = &u->g;
    const int32_t n = u->s->n;
    memset(u->wf.opd_um, 0, (size_t)g->width * g->height * sizeof *u->wf.opd_um);
    for (int32_t a = 0; a < u->s->nact_mvm; a++) {
        if (commands[a] == 0.0f)
            continue;
        const int32_t cx = u->s->act[a] % (n + 1), cy = u->s->act[a] / (n + 1);
        for (int32_t i = 0; i < g->width; i++)
            u->fx[i] =
                sw_dm_profile(u->dm.influence, u->dm.coupling, g->x0 + i * g->step - (cx - 0.5));
        for (int32_t k = 0; k < g->height; k++)
            u->fy[k] =
                sw_dm_profile(u->dm.influence, u->dm.coupling, g->y0 + k * g->step - (cy - 0.5));
        for (int32_t k = 0; k < g->height; k++)
            for (int32_t i = 0; i < g->width; i++)
                u->wf.opd_um[(int64_t)k * g->width + i] += commands[a] * u->fy[k] * u->fx[i];
    }
}

static sw_status im_measure(void *user, const float *commands, float *slopes)
{
    im_user *u = user;
    const int32_t n = u->s->n, ns = u->s->ns;
    im_surface(u, commands);
    sw_status st = sw_shsim_clear_opd(u->s->sim);
    if (st == SW_OK)
        st = sw_shsim_add_wavefront(u->s->sim, &u->wf, 1.0);
    sw_sh_truth tr;
    memset(&tr, 0, sizeof tr);
    if (st == SW_OK)
        st = sw_shsim_truth(u->s->sim, &tr);
    if (st != SW_OK)
        return st;
    int32_t k = 0;
    for (int64_t l = 0; l < (int64_t)n * n; l++) {
        if (!u->s->mask[l])
            continue;
        slopes[k] = (float)(tr.slope_x[l] * u->px_per_rad);
        slopes[ns + k] = (float)(tr.slope_y[l] * u->px_per_rad);
        k++;
    }
    sw_sh_truth_free(&tr);
    return SW_OK;
}

/* im_surface against sw_dm_shaper_run for one actuator in the middle of the pupil (SW_EINTERNAL
 * when they differ by more than 1e-5 of the command). */
static sw_status check_surface(sw_context *ctx, im_user *u)
{
    const int32_t n = u->s->n, na = u->s->nact_mvm, nfull = (n + 1) * (n + 1);
    const int64_t count = (int64_t)u->g.width * u->g.height;
    float *c = calloc((size_t)na, sizeof *c), *full = calloc((size_t)nfull, sizeof *full);
    float *shape = malloc((size_t)count * sizeof *shape);
    sw_dm_shaper *sh = NULL;
    sw_status st = c && full && shape ? SW_OK : SW_ENOMEM;
    if (st == SW_OK)
        st = sw_dm_shaper_create(ctx, &u->dm, &u->g, &sh);
    if (st == SW_OK) {
        c[na / 2] = 1.0f;
        full[u->s->act[na / 2]] = 1.0f;
        im_surface(u, c);
        st = sw_dm_shaper_run(sh, full, SW_MEM_HOST, shape);
    }
    double worst = 0;
    for (int64_t i = 0; st == SW_OK && i < count; i++)
        worst = fmax(worst, fabs(shape[i] - u->wf.opd_um[i]));
    if (st == SW_OK && !(worst <= 1e-5))
        st = sw_error_set(ctx, SW_EINTERNAL,
                          "the DM surface of the calibration differs from sw_dm_shaper's by %g",
                          worst);
    sw_dm_shaper_destroy(sh);
    free(c);
    free(full);
    free(shape);
    return st;
}

/* The control matrix (nact_mvm x 2 ns) from the interaction matrix of the simulator's slopes. */
static int real_cm(sw_context *ctx, lat_sys *s, const sw_dm_params *dm, int quiet, float *cm,
                   int32_t *kept)
{
    const int32_t n = s->n, nact = s->nact_mvm, nsl = 2 * s->ns;
    im_user u;
    memset(&u, 0, sizeof u);
    u.s = s;
    u.dm = *dm;
    u.px_per_rad = sw_sh_px_per_rad(&s->geom);
    u.g = sw_lattice_grid_lenslets(n, n, DM_Q, 1);
    float *im = malloc((size_t)nsl * nact * sizeof *im);
    u.fx = malloc((size_t)u.g.width * sizeof *u.fx);
    u.fy = malloc((size_t)u.g.height * sizeof *u.fy);
    sw_status st = im && u.fx && u.fy ? SW_OK : SW_ENOMEM;
    if (st == SW_OK)
        st = sw_wavefront_alloc(ctx, u.g.width, u.g.height, s->lenslet_um * u.g.step, &u.wf);
    if (st == SW_OK) {
        /* lattice x -> pupil u = (x + 1/2 - n/2) lenslet_um (sim_sh.h, loop.h) */
        u.wf.u0_um = (u.g.x0 + 0.5 - 0.5 * n) * s->lenslet_um;
        u.wf.v0_um = (u.g.y0 + 0.5 - 0.5 * n) * s->lenslet_um;
        st = check_surface(ctx, &u);
    }
    const double t0 = sw_bench_now_us();
    if (st == SW_OK)
        st = sw_interaction_matrix(ctx, nact, nsl, POKE_UM, im_measure, &u, im);
    const double t1 = sw_bench_now_us();
    sw_cm_result res;
    memset(&res, 0, sizeof res);
    if (st == SW_OK)
        st = sw_control_matrix(ctx, im, nsl, nact, CM_CONDITION, 0, cm, &res);
    const double t2 = sw_bench_now_us();
    *kept = res.kept;
    sw_wavefront_free(&u.wf);
    free(u.fx);
    free(u.fy);
    free(im);
    if (st == SW_OK)
        st = sw_shsim_clear_opd(s->sim);
    if (st != SW_OK)
        return fail(ctx, "interaction / control matrix", st);
    if (!quiet)
        fprintf(
            stderr,
            "%s: %dx%d: interaction matrix %d x %d in %.1f s, control matrix (condition <= %.0f) "
            "%d modes kept in %.1f s\n",
            PROG, (int)n, (int)n, (int)nsl, (int)nact, 1e-6 * (t1 - t0), CM_CONDITION,
            (int)res.kept, 1e-6 * (t2 - t1));
    return 0;
}

/* A random nact x cols matrix, uniform in +-1e-3 (xorshift64*: an 8 GB fill in seconds). */
static void random_cm(float *cm, size_t count, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < count; i++) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        const uint64_t r = x * 0x2545F4914F6CDD1Dull;
        cm[i] = (float)(((double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0) * 1e-3);
    }
}

typedef struct lat_job {
    sw_rtc *rtc;
    const sw_image *frames;
    float *commands;
} lat_job;

static sw_status lat_run(void *user, int sample, double *measured_us)
{
    lat_job *j = user;
    /* the host clock around the run alone (it has finished when it returns): the harness's
     * stream synchronisation after it is not part of the chain */
    const double t0 = sw_bench_now_us();
    const sw_status st = sw_rtc_run(j->rtc, &j->frames[sample % POOL], j->commands, NULL);
    *measured_us = sw_bench_now_us() - t0;
    return st;
}

typedef struct lat_row {
    char config[64];
    int32_t n, m, kept;
    double median, p99, target_median, target_p99; /* targets NAN: none */
    int random;
} lat_row;

#define MAX_LAT_ROWS 16

/* One case: the plan, the run, the summary line. */
/* FP16 storage of the control matrix, measured for accuracy: the first frame's commands of a
 * fresh plan (u = g C s) with the matrix in FP32 are kept; the FP16 plan's are compared to them
 * (relative RMS and largest difference over the commands), one JSON line
 * "loop_fp16_accuracy". The plan's state is reset afterwards. */
static float *fp32_first;
static int32_t fp32_first_n;

static int mvm_fp16_accuracy(sw_context *ctx, sw_rtc *rtc, lat_sys *s, const sw_rtc_params *rp,
                             const char *config, float *commands)
{
    sw_status st = sw_rtc_run(rtc, &s->frames[0], commands, NULL);
    sw_rtc_reset(rtc);
    if (st != SW_OK)
        return fail(ctx, "the first frame", st);
    if (!rp->fp16) {
        float *f = realloc(fp32_first, (size_t)rp->nact * sizeof *f);
        if (!f)
            return oom();
        fp32_first = f;
        fp32_first_n = rp->nact;
        memcpy(fp32_first, commands, (size_t)rp->nact * sizeof *f);
        return 0;
    }
    if (fp32_first_n != rp->nact)
        return 0;
    double d2 = 0.0, r2 = 0.0, dmax = 0.0, rmax = 0.0;
    for (int32_t a = 0; a < rp->nact; a++) {
        const double d = (double)commands[a] - fp32_first[a];
        d2 += d * d;
        r2 += (double)fp32_first[a] * fp32_first[a];
        dmax = fabs(d) > dmax ? fabs(d) : dmax;
        rmax = fabs(fp32_first[a]) > rmax ? fabs(fp32_first[a]) : rmax;
    }
    json_start("loop_fp16_accuracy", config, ctx);
    json_num("rel_rms", r2 > 0.0 ? sqrt(d2 / r2) : NAN);
    json_num("max_abs_over_max", rmax > 0.0 ? dmax / rmax : NAN);
    printf("}\n");
    return 0;
}

static int lat_case(const prog_opts *o, const sw_bench_options *bo, sw_context *ctx, lat_sys *s,
                    const sw_rtc_params *rp, const char *path, lat_row *row, float *commands)
{
    const int gpu = is_gpu(ctx);
    snprintf(row->config, sizeof row->config, "%dx%d %s", (int)s->n, (int)s->n, path);
    row->n = s->n;
    row->target_median = row->target_p99 = NAN;
    if (gpu && s->n == 80 && rp->recon == SW_RTC_MVM) {
        row->target_median = 50.0;
        row->target_p99 = 80.0;
    }
    if (gpu && s->n == 200 && rp->recon == SW_RTC_SABRE)
        row->target_median = 150.0;
    sw_rtc *rtc = NULL;
    const double t0 = sw_bench_now_us();
    sw_status st = sw_rtc_create(ctx, rp, &rtc);
    const double create_s = 1e-6 * (sw_bench_now_us() - t0);
    if (st != SW_OK) {
        char what[96];
        snprintf(what, sizeof what, "sw_rtc_create (%s)", row->config);
        return fail(ctx, what, st);
    }
    if (sw_rtc_slopes(rtc) != s->ns) {
        fprintf(stderr, "%s: %s: the plan has %d slopes per axis, the mask %d\n", PROG, row->config,
                (int)sw_rtc_slopes(rtc), (int)s->ns);
        sw_rtc_destroy(rtc);
        return 1;
    }
    if (rp->recon == SW_RTC_MVM && mvm_fp16_accuracy(ctx, rtc, s, rp, row->config, commands) != 0) {
        sw_rtc_destroy(rtc);
        return 1;
    }
    lat_job j = {rtc, s->frames, commands};
    sw_bench_case c = {"loop_latency", row->config, ctx, lat_run, &j, 0, 1.0, "frames"};
    sw_bench_result r;
    memset(&r, 0, sizeof r);
    int rc = sw_bench_run(bo, &c, &r) == SW_OK ? 0 : 1;
    if (rc == 0) {
        /* the commands of the last frame must be numbers */
        for (int32_t a = 0; a < rp->nact; a++)
            if (!isfinite(commands[a])) {
                fprintf(stderr, "%s: %s: command %d is not finite\n", PROG, row->config, (int)a);
                rc = 1;
                break;
            }
    }
    sw_rtc_destroy(rtc);
    if (rc != 0)
        return rc;
    row->median = r.median_us;
    row->p99 = r.p99_us;
    json_start("loop_latency_summary", row->config, ctx);
    printf(",\"lenslets\":%d,\"frame_px\":%d,\"slopes\":%d,\"nact\":%d", (int)(s->n * s->n),
           (int)s->w, (int)(2 * s->ns), (int)rp->nact);
    if (rp->recon == SW_RTC_SABRE)
        printf(",\"k\":%d,\"m\":%d", (int)rp->sabre.partitions, (int)row->m);
    else
        printf(",\"modes\":%d", (int)row->kept);
    json_num("median_us", r.median_us);
    json_num("p99_us", r.p99_us);
    printf(",\"reps\":%d", r.reps);
    json_num("target_median_us", row->target_median);
    json_num("target_p99_us", row->target_p99);
    if (isfinite(row->target_median))
        printf(",\"meets_target\":%s",
               r.median_us < row->target_median &&
                       (!isfinite(row->target_p99) || r.p99_us < row->target_p99)
                   ? "true"
                   : "false");
    json_num("create_s", create_s);
    printf(",\"telemetry\":%d,\"anchors\":\"%s\"", o->telemetry, ANCHORS);
    if (row->random)
        printf(",\"note\":\"%s\"", RANDOM_NOTE);
    printf("}\n");
    fflush(stdout);
    return 0;
}

static void print_target(double t)
{
    if (isfinite(t))
        fprintf(stderr, " %8.0f", t);
    else
        fprintf(stderr, " %8s", "-");
}

static int latency(const prog_opts *o, sw_context *ctx)
{
    static const lat_size full[3] = {{40, 6, 8, 1}, {80, 8, 16, 0}, {200, 8, 32, 0}};
    static const lat_size quick[1] = {{8, 6, 2, 1}};
    const lat_size *sizes = o->b.quick ? quick : full;
    const int nsize = o->b.quick ? 1 : 3;
    const int gpu = is_gpu(ctx);

    sw_bench_options bo = o->b;
    if (!o->reps_set)
        bo.reps = o->b.quick ? 100 : 10000;
    if (!o->warmup_set)
        bo.warmup = o->b.quick ? 5 : 100;
    if (!o->budget_set)
        bo.budget_s = o->b.quick ? 2.0 : (gpu ? 300.0 : 20.0);

    lat_row rows[MAX_LAT_ROWS];
    int nrow = 0, rc = 0;
    for (int zi = 0; zi < nsize && rc == 0; zi++) {
        const lat_size *z = &sizes[zi];
        if (!o->b.quick && !(o->size_mask & (1 << zi)))
            continue;
        lat_sys s;
        if ((rc = lat_sys_make(ctx, z, &s)) != 0) {
            lat_sys_free(&s);
            break;
        }
        const int32_t n = z->n, nact = (n + 1) * (n + 1);
        if (!o->b.json_only)
            fprintf(stderr,
                    "%s: %dx%d SH on %dx%d u16 px: %d valid lenslets (lit >= %.1f), %d slopes, "
                    "%d actuators (MVM: %d at valid lenslets' corners)\n",
                    PROG, (int)n, (int)n, (int)s.w, (int)s.w, (int)s.ns, MIN_ILLUM, (int)(2 * s.ns),
                    (int)nact, (int)s.nact_mvm);
        sw_dm_params dm;
        sw_dm_params_default(&dm);
        dm.nx = dm.ny = n;
        dm.influence = SW_DM_GAUSSIAN;
        dm.coupling = COUPLING;

        sw_image cmd = {0};
        sw_status st = sw_image_alloc(ctx, nact, 1, SW_PIX_F32, &cmd);
        if (st != SW_OK) {
            rc = fail(ctx, "commands buffer", st);
            lat_sys_free(&s);
            break;
        }

        sw_rtc_params rp;
        sw_rtc_params_default(&rp);
        rp.centroid = s.centroid;
        rp.nact = nact;
        rp.telemetry = o->telemetry;
        sw_controller_params_default(&rp.controller);
        rp.controller.kind = SW_CTRL_INTEGRATOR;
        rp.controller.nact = nact;
        rp.controller.gain = GAIN;

        /* MVM: FP32 then FP16 (GPU); the 200 x 200 matrix on the GPU only */
        const size_t cm_count = (size_t)s.nact_mvm * (size_t)(2 * s.ns);
        if (!gpu && n == 200) {
            if (!o->b.json_only)
                fprintf(stderr, "%s: 200x200 MVM skipped on the CPU (a %.1f GB matrix)\n", PROG,
                        4e-9 * (double)cm_count);
        } else if (cm_count >= ((size_t)1 << 31)) {
            fprintf(stderr, "%s: %dx%d MVM skipped: %zu matrix entries, sw_rtc takes < 2^31\n",
                    PROG, (int)n, (int)n, cm_count);
        } else {
            float *cm = malloc(cm_count * sizeof *cm);
            int32_t kept = -1;
            if (!cm)
                rc = oom();
            if (rc == 0 && z->real_cm)
                rc = real_cm(ctx, &s, &dm, o->b.json_only, cm, &kept);
            else if (rc == 0)
                random_cm(cm, cm_count, SEED_CM + (uint64_t)n);
            rp.recon = SW_RTC_MVM;
            rp.cm = cm;
            rp.nact = rp.controller.nact = s.nact_mvm;
            for (int h = 0; h < (gpu ? 2 : 1) && rc == 0 && nrow < MAX_LAT_ROWS; h++) {
                rp.fp16 = h;
                lat_row *row = &rows[nrow];
                memset(row, 0, sizeof *row);
                row->kept = kept;
                row->random = !z->real_cm;
                rc = lat_case(o, &bo, ctx, &s, &rp, h ? "mvm-fp16" : "mvm-fp32", row, cmd.data);
                if (rc == 0)
                    nrow++;
            }
            rp.cm = NULL;
            rp.fp16 = 0;
            rp.nact = rp.controller.nact = nact;
            free(cm);
        }

        /* D-SABRE: the plan's geometry first (m, window, lattice), then the projections */
        sw_sabre_params sab;
        sw_sabre_params_default(&sab);
        sab.nx = sab.ny = n;
        sab.pitch = s.lenslet_um;
        sab.valid = s.mask;
        sab.partitions = z->k;
        sab.overlap = 1;
        sab.pme = SW_SABRE_PME_HIERARCHICAL;
        sab.extend_eq17 = 1;
        sw_sabre *probe = NULL;
        sw_sabre_info info;
        memset(&info, 0, sizeof info);
        if (rc == 0) {
            st = sw_sabre_create(ctx, &sab, &probe);
            if (st != SW_OK)
                rc = fail(ctx, "sw_sabre_create", st);
            else
                sw_sabre_get_info(probe, &info);
            sw_sabre_destroy(probe);
        }
        if (rc == 0 && !o->b.json_only)
            fprintf(stderr,
                    "%s: %dx%d D-SABRE: k = %d, m = %d (Eq. 17: k m > %d), window %d squares, "
                    "extended %d, Q %d x %d\n",
                    PROG, (int)n, (int)n, (int)info.k, (int)info.m, (int)n, (int)info.window,
                    (int)info.extended, (int)info.local_values, (int)info.local_slopes);
        for (int pv = 0; pv < 2 && rc == 0 && nrow < MAX_LAT_ROWS; pv++) {
            const int global = pv == 1;
            if (global && n != sizes[0].n)
                continue; /* the global projection: the smallest size only */
            sw_projector_params pp;
            if (global)
                sw_projector_params_global(&pp, &dm, &info.lattice);
            else
                sw_projector_params_window(&pp, &dm, info.window);
            sw_projector *proj = NULL;
            st = sw_projector_create(ctx, &pp, &proj);
            if (st != SW_OK) {
                rc = fail(ctx, "sw_projector_create", st);
                break;
            }
            int32_t prow = 0, pcol = 0;
            rp.recon = SW_RTC_SABRE;
            rp.sabre = sab;
            rp.slope_scale = PIXEL_UM / (s.focal_mm * 1000.0);
            rp.projection = global ? SW_RTC_PROJ_GLOBAL : SW_RTC_PROJ_LOCAL;
            rp.projection_matrix = sw_projector_matrix(proj, &prow, &pcol);
            rp.projection_rows = prow;
            rp.projection_cols = pcol;
            /* the local projection twice: as it is, and with piston and waffle filtered out of
             * r per frame (loop.h's unseen modes; rt_filter on the GPU): the filter's cost */
            float *zf = NULL;
            for (int filt = 0; filt < (global ? 1 : 2) && rc == 0 && nrow < MAX_LAT_ROWS; filt++) {
                if (filt) {
                    int32_t nf = 0;
                    if (!(zf = malloc((size_t)nact * 2 * sizeof *zf))) {
                        rc = oom();
                        break;
                    }
                    st =
                        sw_unseen_modes(n, n, s.mask, SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE, zf, &nf);
                    if (st != SW_OK) {
                        rc = fail(ctx, "sw_unseen_modes", st);
                        break;
                    }
                    rp.controller.nfilter = nf;
                    rp.controller.filter = zf;
                }
                lat_row *row = &rows[nrow];
                memset(row, 0, sizeof *row);
                row->m = info.m;
                row->kept = -1;
                rc = lat_case(o, &bo, ctx, &s, &rp,
                              global ? "dsabre-global"
                                     : (filt ? "dsabre-local+unseen" : "dsabre-local"),
                              row, cmd.data);
                if (rc == 0)
                    nrow++;
            }
            rp.controller.nfilter = 0;
            rp.controller.filter = NULL;
            free(zf);
            rp.projection_matrix = NULL;
            sw_projector_destroy(proj);
        }
        sw_image_free(&cmd);
        lat_sys_free(&s);
    }
    sw_bench_finish(&bo);
    if (!o->b.json_only && nrow) {
        char device[256];
        sw_bench_device_name(ctx, device, sizeof device);
        fprintf(stderr,
                "\n%s: latency, frame (host) -> commands (host), %s (%s); us; targets on the "
                "H100 (issue 11)\n",
                PROG, device, sw_backend_string(sw_context_backend(ctx)));
        fprintf(stderr, "%-22s %9s %9s %8s %8s %5s %s\n", "config", "median", "p99", "tgt_med",
                "tgt_p99", "m", "note");
        for (int i = 0; i < nrow; i++) {
            const lat_row *r = &rows[i];
            fprintf(stderr, "%-22s %9.1f %9.1f", r->config, r->median, r->p99);
            print_target(r->target_median);
            print_target(r->target_p99);
            if (r->m > 0)
                fprintf(stderr, " %5d", (int)r->m);
            else
                fprintf(stderr, " %5s", "-");
            fprintf(stderr, " %s\n", r->random ? "random C" : (r->kept > 0 ? "measured C" : ""));
        }
        fprintf(stderr, "anchors: %s\n", ANCHORS);
    }
    return rc;
}

/* ================================================================ closed-loop helpers */

/* The seed 002 system (sw_loop_params_default) resized to n lenslets at the seed's lenslet size
 * (D = 12 m for 32) unless diameter_m > 0. */
static void loop_params(sw_loop_params *p, int32_t n, double diameter_m, sw_loop_recon recon,
                        int32_t k)
{
    sw_loop_params_default(p);
    p->nx = n;
    p->diameter_m = diameter_m > 0 ? diameter_m : 12.0 * n / 32.0;
    p->recon = recon;
    if (k > 0)
        p->partitions = k;
}

typedef struct loop_run {
    double turb_sum, res_sum; /* over the frames after the warm-up */
    double fit_sum;
    int64_t frames, fits;
    double long_strehl;
    int failed;        /* a step failed (diverged) */
    int32_t neg_modes; /* sw_loop_negative_modes: filtered, -1 not looked for */
    double neg_min;    /* its smallest gain before the filter */
} loop_run;

/* Runs warm-up + frames steps; fitting: the fitting error on at most 100 frames after the warm-up.
 * Returns 0, or 1 when set-up failed (a failed step is recorded in r->failed instead). */
static int loop_go(sw_context *ctx, const sw_loop_params *p, int32_t frames, int fitting,
                   loop_run *r, double *create_s)
{
    memset(r, 0, sizeof *r);
    r->long_strehl = NAN;
    sw_loop *l = NULL;
    const double t0 = sw_bench_now_us();
    sw_status st = sw_loop_create(ctx, p, &l);
    if (create_s)
        *create_s = 1e-6 * (sw_bench_now_us() - t0);
    if (st != SW_OK)
        return fail(ctx, "sw_loop_create", st);
    r->neg_modes = sw_loop_negative_modes(l, &r->neg_min);
    const int32_t stride = frames > 100 ? (frames + 99) / 100 : 1;
    for (int32_t f = 0; f < p->warmup + frames; f++) {
        sw_loop_frame fr;
        st = sw_loop_step(l, &fr);
        if (st != SW_OK) {
            r->failed = 1;
            break;
        }
        if (f < p->warmup)
            continue;
        r->turb_sum += fr.turbulence_nm;
        r->res_sum += fr.residual_nm;
        r->frames++;
        if (fitting && (f - p->warmup) % stride == 0) {
            double fit = NAN;
            st = sw_loop_fitting_error(l, &fit);
            if (st != SW_OK) {
                sw_loop_destroy(l);
                return fail(ctx, "sw_loop_fitting_error", st);
            }
            r->fit_sum += fit;
            r->fits++;
        }
    }
    if (!r->failed)
        r->long_strehl = sw_loop_long_strehl(l);
    sw_loop_destroy(l);
    return 0;
}

/* ================================================================ speed */

typedef struct speed_job {
    sw_loop *l;
    sw_loop_frame last;
} speed_job;

static sw_status speed_run(void *user, int sample, double *measured_us)
{
    speed_job *j = user;
    return sw_loop_step(j->l, &j->last);
}

typedef struct speed_sys {
    int32_t n;
    double diameter_m;
    sw_loop_recon recon;
    int32_t k;
    int gpu_only;
} speed_sys;

static int speed(const prog_opts *o, sw_context *ctx)
{
    static const speed_sys full[4] = {{32, 12.0, SW_LOOP_DSABRE_LOCAL, 4, 0},
                                      {32, 12.0, SW_LOOP_MVM, 0, 0},
                                      {80, 30.0, SW_LOOP_DSABRE_LOCAL, 16, 0},
                                      {80, 30.0, SW_LOOP_MVM, 0, 1}};
    static const speed_sys quick[2] = {{8, 3.0, SW_LOOP_DSABRE_LOCAL, 2, 0},
                                       {8, 3.0, SW_LOOP_MVM, 0, 0}};
    const speed_sys *sys = o->b.quick ? quick : full;
    const int nsys = o->b.quick ? 2 : 4;
    const int gpu = is_gpu(ctx);
    sw_bench_options bo = o->b;
    bo.reps = o->b.quick ? 20 : 200;
    bo.warmup = o->b.quick ? 5 : 20;
    bo.budget_s = o->budget_set ? o->b.budget_s : (o->b.quick ? 10.0 : 600.0);

    typedef struct row_t {
        char config[64];
        double median, fps, create_s, strehl, residual;
        int32_t n;
    } row_t;
    row_t rows[4];
    int nrow = 0, rc = 0;
    for (int i = 0; i < nsys && rc == 0; i++) {
        const speed_sys *s = &sys[i];
        char config[64];
        snprintf(config, sizeof config, "%dx%d D%.0fm diffraction %s", (int)s->n, (int)s->n,
                 s->diameter_m, sw_loop_recon_string(s->recon));
        if (s->k > 0) {
            const size_t len = strlen(config);
            snprintf(config + len, sizeof config - len, " k%d", (int)s->k);
        }
        if (s->gpu_only && !gpu) {
            if (!o->b.json_only)
                fprintf(stderr,
                        "%s: %s skipped on the CPU (calibration through the diffraction "
                        "model of every actuator)\n",
                        PROG, config);
            continue;
        }
        sw_loop_params p;
        loop_params(&p, s->n, s->diameter_m, s->recon, s->k);
        p.model = SW_SH_DIFFRACTION;
        p.warmup = bo.warmup;
        speed_job j;
        memset(&j, 0, sizeof j);
        const double t0 = sw_bench_now_us();
        sw_status st = sw_loop_create(ctx, &p, &j.l);
        const double create_s = 1e-6 * (sw_bench_now_us() - t0);
        if (st != SW_OK) {
            rc = fail(ctx, "sw_loop_create", st);
            break;
        }
        sw_bench_case c = {"loop_speed", config, ctx, speed_run, &j, 0, 1.0, "frames"};
        sw_bench_result r;
        memset(&r, 0, sizeof r);
        if (sw_bench_run(&bo, &c, &r) != SW_OK)
            rc = 1;
        const double strehl = sw_loop_long_strehl(j.l);
        const int32_t modes = sw_loop_modes(j.l);
        sw_loop_destroy(j.l);
        if (rc != 0)
            break;
        row_t *w = &rows[nrow++];
        snprintf(w->config, sizeof w->config, "%s", config);
        w->n = s->n;
        w->median = r.median_us;
        w->fps = r.median_us > 0 ? 1e6 / r.median_us : NAN;
        w->create_s = create_s;
        w->strehl = strehl;
        w->residual = j.last.residual_nm;
        json_start("loop_speed_summary", config, ctx);
        json_num("median_us", r.median_us);
        json_num("frames_per_s", w->fps);
        printf(",\"frames\":%d,\"warmup\":%d", r.reps, bo.warmup);
        json_num("create_s", create_s);
        json_num("long_strehl_j", strehl);
        json_num("last_residual_nm", j.last.residual_nm);
        json_num("last_turbulence_nm", j.last.turbulence_nm);
        if (modes >= 0)
            printf(",\"modes\":%d", (int)modes);
        if (s->n == 32 && gpu)
            printf(",\"target_frames_per_s\":2000,\"meets_target\":%s",
                   w->fps > 2000.0 ? "true" : "false");
        printf(",\"anchor\":\"COMPASS (GPU) ~1 kHz for VLT-size systems\"}\n");
        fflush(stdout);
    }
    sw_bench_finish(&bo);
    if (!o->b.json_only && nrow) {
        fprintf(stderr, "\n%s: closed-loop simulation speed (%s backend), sw_loop_step\n", PROG,
                sw_backend_string(sw_context_backend(ctx)));
        fprintf(stderr, "%-40s %10s %10s %9s %9s %11s\n", "config", "median_us", "frames/s",
                "create_s", "LE_Strehl", "residual_nm");
        for (int i = 0; i < nrow; i++)
            fprintf(stderr, "%-40s %10.1f %10.1f %9.2f %9.4f %11.1f\n", rows[i].config,
                    rows[i].median, rows[i].fps, rows[i].create_s, rows[i].strehl,
                    rows[i].residual);
        fprintf(stderr, "target: > 2000 frames/s for 32x32 DIFFRACTION on the GPU; COMPASS (GPU) "
                        "~1 kHz for VLT-size systems\n");
    }
    return rc;
}

/* ================================================================ fig11 */

/* One case's runs over the screens (fig11, fig12): the long-exposure Strehl's mean and spread,
 * the mean turbulence and residual, the screens that diverged. */
typedef struct screen_stats {
    double s_sum, s_sum2, turb, res, t0;
    int s_n, t_n, diverged;
    int neg_max;    /* the most negative modes a screen's loop filtered (-1: none looked for) */
    double neg_min; /* the smallest closed-loop gain before the filter over the screens */
} screen_stats;

static void stats_add(screen_stats *st, const loop_run *r)
{
    const double mt = r->frames ? r->turb_sum / r->frames : NAN;
    const double mr = r->frames ? r->res_sum / r->frames : NAN;
    st->diverged += r->failed || !(mr <= mt);
    if (r->neg_modes > st->neg_max)
        st->neg_max = r->neg_modes;
    if (isnan(st->neg_min) || r->neg_min < st->neg_min)
        st->neg_min = r->neg_min;
    if (isfinite(mt) && isfinite(mr)) {
        st->turb += mt;
        st->res += mr;
        st->t_n++;
    }
    if (isfinite(r->long_strehl)) {
        st->s_sum += r->long_strehl;
        st->s_sum2 += r->long_strehl * r->long_strehl;
        st->s_n++;
    }
}

static double stats_mean(const screen_stats *st)
{
    return st->s_n ? st->s_sum / st->s_n : NAN;
}

/* The end of a case's JSON line (after its own fields) and its line on stderr. */
static void stats_report(const prog_opts *o, const char *config, const screen_stats *st, int32_t n,
                         int screens, int32_t frames)
{
    const double mean = stats_mean(st);
    const double sd =
        st->s_n > 1 ? sqrt(fmax(0.0, (st->s_sum2 - st->s_n * mean * mean) / (st->s_n - 1))) : NAN;
    const double turb = st->t_n ? st->turb / st->t_n : NAN;
    const double res = st->t_n ? st->res / st->t_n : NAN;
    printf(",\"influence\":\"%s\"", sw_dm_influence_string(o->influence));
    printf(",\"lenslets\":%d,\"screens\":%d,\"frames\":%d,\"warmup\":20", (int)n, screens,
           (int)frames);
    json_num("strehl_mean", mean);
    json_num("strehl_std", sd);
    json_num("turbulence_nm", turb);
    json_num("residual_nm", res);
    printf(",\"diverged\":%d,\"negative_modes\":%d", st->diverged, st->neg_max);
    json_num("loop_min_gain", st->neg_min);
    json_num("seconds", 1e-6 * (sw_bench_now_us() - st->t0));
    printf("}\n");
    fflush(stdout);
    if (!o->b.json_only)
        fprintf(stderr,
                "%s: %-28s Strehl %.4f (std %.4f), turbulence %.1f nm, residual %.1f nm, %d of "
                "%d screens diverged\n",
                PROG, config, mean, sd, turb, res, st->diverged, screens);
}

static int fig11(const prog_opts *o, sw_context *ctx)
{
    static const double def_c[4] = {0.2, 0.3, 0.4, 0.5}, def_g[4] = {0.3, 0.5, 0.7, 1.0};
    const int quick = o->b.quick;
    const int32_t n = quick ? 8 : 32;
    const int32_t frames = o->frames > 0 ? o->frames : (quick ? 20 : 500);
    const int screens = o->screens > 0 ? o->screens : (quick ? 1 : 3);
    double cs[MAX_LIST], gs[MAX_LIST];
    int nc, ng;
    if (o->ncoupling) {
        nc = o->ncoupling;
        memcpy(cs, o->couplings, sizeof cs);
    } else if (quick) {
        nc = 1;
        cs[0] = 0.3;
    } else {
        nc = 4;
        memcpy(cs, def_c, sizeof def_c);
    }
    if (o->ngain) {
        ng = o->ngain;
        memcpy(gs, o->gains, sizeof gs);
    } else if (quick) {
        ng = 1;
        gs[0] = 0.5;
    } else {
        ng = 4;
        memcpy(gs, def_g, sizeof def_g);
    }
    const int noisy = isfinite(o->magnitude);
    if (!o->method_mask) {
        fprintf(stderr, "%s: fig11: none of its methods in --methods '%s'\n", PROG, o->methods);
        return 2;
    }
    if (!o->b.json_only)
        fprintf(stderr,
                "%s: fig11: %dx%d SH, square pupil, D = %.1f m, DIFFRACTION, %s, %d screens, "
                "20 warm-up + %d frames per run\n",
                PROG, (int)n, (int)n, 12.0 * n / 32.0, noisy ? "noisy" : "noise-free", screens,
                (int)frames);

    double table[N_METHOD][MAX_LIST][MAX_LIST];
    int divtab[N_METHOD][MAX_LIST][MAX_LIST];
    int rc = 0;
    for (int mi = 0; mi < N_METHOD && rc == 0; mi++) {
        for (int ci = 0; ci < MAX_LIST; ci++)
            for (int gi = 0; gi < MAX_LIST; gi++) {
                table[mi][ci][gi] = NAN;
                divtab[mi][ci][gi] = 0;
            }
        if (!(o->method_mask & (1 << mi)))
            continue;
        const fig_method *m = &METHODS[mi];
        const int32_t k = quick ? m->k_quick : m->k;
        for (int ci = 0; ci < nc && rc == 0; ci++)
            for (int gi = 0; gi < ng && rc == 0; gi++) {
                screen_stats st = {.neg_max = -1, .neg_min = NAN};
                st.t0 = sw_bench_now_us();
                for (int sc = 0; sc < screens && rc == 0; sc++) {
                    sw_loop_params p;
                    loop_params(&p, n, 0.0, m->recon, k);
                    p.square_pupil = 1;
                    p.model = SW_SH_DIFFRACTION;
                    p.magnitude = o->magnitude;
                    if (noisy)
                        p.read_noise_e = 2.0;
                    p.seed = 1 + (uint64_t)sc;
                    p.dm.influence = o->influence;
                    p.dm.coupling = cs[ci];
                    p.controller.kind = SW_CTRL_INTEGRATOR;
                    p.controller.gain = gs[gi];
                    p.warmup = 20;
                    loop_run r;
                    if ((rc = loop_go(ctx, &p, frames, 0, &r, NULL)) != 0)
                        break;
                    stats_add(&st, &r);
                }
                if (rc != 0)
                    break;
                table[mi][ci][gi] = stats_mean(&st);
                divtab[mi][ci][gi] = st.diverged;
                char config[96];
                snprintf(config, sizeof config, "%s c%.2f g%.2f", m->name, cs[ci], gs[gi]);
                json_start("loop_fig11", config, ctx);
                printf(",\"method\":\"%s\",\"recon\":\"%s\",\"partitions\":%d", m->name,
                       sw_loop_recon_string(m->recon), (int)k);
                json_num("coupling", cs[ci]);
                json_num("gain", gs[gi]);
                json_num("magnitude", o->magnitude);
                stats_report(o, config, &st, n, screens, frames);
            }
    }
    if (rc == 0 && !o->b.json_only) {
        fprintf(stderr,
                "\n%s: fig11 long-exposure Strehl at %.2f um, mean over %d screens ('!': a "
                "screen diverged)\n%-20s",
                PROG, 1.25, screens, "method \\ c,g");
        for (int ci = 0; ci < nc; ci++)
            for (int gi = 0; gi < ng; gi++) {
                char h[16];
                snprintf(h, sizeof h, "%.1f,%.1f", cs[ci], gs[gi]);
                fprintf(stderr, " %8s", h);
            }
        fprintf(stderr, "\n");
        for (int mi = 0; mi < N_METHOD; mi++) {
            if (!(o->method_mask & (1 << mi)))
                continue;
            char name[32];
            if (quick && METHODS[mi].k_quick > 0)
                snprintf(name, sizeof name, "%s(k%d)", METHODS[mi].name, (int)METHODS[mi].k_quick);
            else
                snprintf(name, sizeof name, "%s", METHODS[mi].name);
            fprintf(stderr, "%-20s", name);
            for (int ci = 0; ci < nc; ci++)
                for (int gi = 0; gi < ng; gi++)
                    fprintf(stderr, " %7.4f%c", table[mi][ci][gi], divtab[mi][ci][gi] ? '!' : ' ');
            fprintf(stderr, "\n");
        }
        fprintf(stderr,
                "Brunner et al. 2018 Fig. 11: distributed within ~1%% of global at low coupling; "
                "distributed diverges at 40-50%% coupling unless the gain is lowered to "
                "0.7 / 0.5\n");
    }
    return rc;
}

/* ================================================================ fig12 */

/* The methods of Brunner et al. 2018 Figs. 12 and 14 at one SH size n: global SABRE, and D-SABRE
 * at a moderate and a strong partitioning (n / 8 and n / 2 partitions per side: 4 and 16 for the
 * paper's 32 x 32) with the global projection (Eq. 13), the distributed one on whole windows with
 * one matrix (Eq. 14-16, section 5.A: Fig. 14's "MM"; "local") and the distributed one on the
 * pupil only, a matrix per partition (section 4.A: Fig. 14's "MV"; "local-pupil"). */
#define N_FIG12 7
typedef struct fig12_method {
    char name[32];
    sw_loop_recon recon;
    int32_t k;
} fig12_method;

static void fig12_methods(int32_t n, fig12_method m[N_FIG12])
{
    const int32_t kmod = n / 8 > 1 ? n / 8 : 2, kstr = n / 2;
    static const sw_loop_recon r[3] = {SW_LOOP_DSABRE_GLOBAL, SW_LOOP_DSABRE_LOCAL,
                                       SW_LOOP_DSABRE_LOCAL_PUPIL};
    static const char *const suffix[3] = {"global", "local", "local-pupil"};
    m[0] = (fig12_method){"sabre", SW_LOOP_SABRE_GLOBAL, 0};
    for (int i = 0; i < 6; i++) {
        m[1 + i].recon = r[i % 3];
        m[1 + i].k = i < 3 ? kmod : kstr;
        snprintf(m[1 + i].name, sizeof m[1 + i].name, "dsabre%d-%s", (int)m[1 + i].k,
                 suffix[i % 3]);
    }
}

/* fig12's methods picked by --methods (bit per method; all without it); -1 for a name that is
 * none of them (and none of fig11's). */
static int fig12_mask(const prog_opts *o, const fig12_method m[N_FIG12])
{
    if (!o->methods[0])
        return (1 << N_FIG12) - 1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", o->methods);
    int mask = 0;
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        int found = -1;
        for (int i = 0; i < N_FIG12; i++)
            if (strcmp(t, m[i].name) == 0)
                found = i;
        if (found >= 0) {
            mask |= 1 << found;
            continue;
        }
        int fig11 = 0;
        for (int i = 0; i < N_METHOD; i++)
            fig11 |= strcmp(t, METHODS[i].name) == 0;
        if (!fig11) {
            fprintf(stderr, "%s: fig12: unknown method '%s' (", PROG, t);
            for (int i = 0; i < N_FIG12; i++)
                fprintf(stderr, "%s%s", i ? ", " : "", m[i].name);
            fprintf(stderr, ")\n");
            return -1;
        }
    }
    return mask;
}

/* The Fig. 12-14 loop: annular pupil (30 % of D obscured), coupling 0.4, integrator gain 0.7. */
static void fig12_params(sw_loop_params *p, int32_t n, const fig12_method *m, double magnitude,
                         uint64_t seed, sw_dm_influence influence)
{
    loop_params(p, n, 0.0, m->recon, m->k);
    p->square_pupil = 0;
    p->obscuration = 0.3;
    p->model = SW_SH_DIFFRACTION;
    p->magnitude = magnitude;
    if (isfinite(magnitude))
        p->read_noise_e = 2.0;
    p->seed = seed;
    p->dm.influence = influence;
    p->dm.coupling = 0.4;
    p->controller.kind = SW_CTRL_INTEGRATOR;
    p->controller.gain = 0.7;
    p->warmup = 20;
}

/* Fig. 13's question as a number: after `iters` closed-loop frames (noise-free), the residual
 * map's RMS and the RMS over the k x k blocks of the lenslet array (the partitions' cores, to
 * within the Eq. 17 extension) of each block's mean residual: the partition pistons a zero-padded
 * D-SABRE would leave. Both piston-removed over the pupil, nm. */
static int fig13_case(sw_context *ctx, const sw_loop_params *p, int32_t iters, int32_t k,
                      double *res_nm, double *block_nm)
{
    sw_loop *l = NULL;
    sw_status st = sw_loop_create(ctx, p, &l);
    if (st != SW_OK)
        return fail(ctx, "sw_loop_create", st);
    for (int32_t f = 0; f < iters && st == SW_OK; f++) {
        sw_loop_frame fr;
        st = sw_loop_step(l, &fr);
    }
    int32_t side = 0;
    float *r = NULL;
    if (st == SW_OK)
        st = sw_loop_maps(l, &side, NULL, NULL, NULL);
    if (st == SW_OK && !(r = malloc((size_t)side * side * sizeof(float))))
        st = SW_ENOMEM;
    if (st == SW_OK)
        st = sw_loop_maps(l, NULL, NULL, NULL, r);
    if (st != SW_OK) {
        free(r);
        sw_loop_destroy(l);
        return fail(ctx, "fig13 loop", st);
    }
    double s1 = 0, s2 = 0, cnt = 0;
    double bs[64 * 64], bn[64 * 64];
    memset(bs, 0, sizeof bs);
    memset(bn, 0, sizeof bn);
    for (int32_t y = 0; y < side; y++)
        for (int32_t x = 0; x < side; x++) {
            const double v = r[(size_t)y * side + x];
            if (!isfinite(v))
                continue;
            s1 += v;
            s2 += v * v;
            cnt++;
            const int32_t b =
                (int32_t)((int64_t)y * k / side) * k + (int32_t)((int64_t)x * k / side);
            bs[b] += v;
            bn[b]++;
        }
    const double mean = cnt > 0 ? s1 / cnt : 0;
    double b1 = 0, bw = 0;
    for (int32_t b = 0; b < k * k; b++)
        if (bn[b] > 0) {
            const double d = bs[b] / bn[b] - mean;
            b1 += bn[b] * d * d; /* weighted by the block's pupil samples */
            bw += bn[b];
        }
    *res_nm = cnt > 0 ? 1e3 * sqrt(fmax(0.0, s2 / cnt - mean * mean)) : NAN;
    *block_nm = bw > 0 ? 1e3 * sqrt(b1 / bw) : NAN;
    free(r);
    sw_loop_destroy(l);
    return 0;
}

static int fig12(const prog_opts *o, sw_context *ctx)
{
    static const double def_mag[6] = {NAN, 6.0, 8.0, 9.0, 10.0, 11.0};
    const int quick = o->b.quick;
    const int32_t n = quick ? 8 : 16;
    const int32_t frames = o->frames > 0 ? o->frames : (quick ? 20 : 200);
    const int screens = o->screens > 0 ? o->screens : (quick ? 1 : 10);
    double mags[6];
    int nmag;
    if (isfinite(o->magnitude)) {
        nmag = 1;
        mags[0] = o->magnitude;
    } else if (quick) {
        nmag = 2;
        mags[0] = NAN;
        mags[1] = 8.0;
    } else {
        nmag = 6;
        memcpy(mags, def_mag, sizeof mags);
    }
    fig12_method ms[N_FIG12];
    fig12_methods(n, ms);
    const int mask = fig12_mask(o, ms);
    if (mask < 0)
        return 2;
    if (!mask) {
        fprintf(stderr, "%s: fig12: none of its methods in --methods '%s'\n", PROG, o->methods);
        return 2;
    }
    if (!o->b.json_only)
        fprintf(stderr,
                "%s: fig12: %dx%d SH (zero-padded for D-SABRE), annular pupil 30 %% of D "
                "obscured, D = %.1f m, %dx%d DM, coupling 0.4, gain 0.7, DIFFRACTION, %d screens, "
                "20 warm-up + %d frames per run\n",
                PROG, (int)n, (int)n, 12.0 * n / 32.0, (int)n + 1, (int)n + 1, screens,
                (int)frames);
    double table[N_FIG12][6];
    int divtab[N_FIG12][6];
    int rc = 0;
    for (int mi = 0; mi < N_FIG12; mi++)
        for (int gi = 0; gi < nmag; gi++) {
            table[mi][gi] = NAN;
            divtab[mi][gi] = 0;
        }
    for (int mi = 0; mi < N_FIG12 && rc == 0; mi++)
        for (int gi = 0; gi < nmag && rc == 0 && (mask >> mi & 1); gi++) {
            screen_stats st = {.neg_max = -1, .neg_min = NAN};
            st.t0 = sw_bench_now_us();
            for (int sc = 0; sc < screens && rc == 0; sc++) {
                sw_loop_params p;
                fig12_params(&p, n, &ms[mi], mags[gi], 1 + (uint64_t)sc, o->influence);
                loop_run r;
                if ((rc = loop_go(ctx, &p, frames, 0, &r, NULL)) != 0)
                    break;
                stats_add(&st, &r);
            }
            if (rc != 0)
                break;
            table[mi][gi] = stats_mean(&st);
            divtab[mi][gi] = st.diverged;
            char config[256], mag[16];
            if (isfinite(mags[gi]))
                snprintf(mag, sizeof mag, "m%.0f", mags[gi]);
            else
                snprintf(mag, sizeof mag, "noise-free");
            snprintf(config, sizeof config, "%.31s %.15s", ms[mi].name, mag);
            json_start("loop_fig12", config, ctx);
            printf(",\"method\":\"%s\",\"recon\":\"%s\",\"partitions\":%d", ms[mi].name,
                   sw_loop_recon_string(ms[mi].recon), (int)ms[mi].k);
            json_num("magnitude", mags[gi]);
            json_num("obscuration", 0.3);
            json_num("coupling", 0.4);
            json_num("gain", 0.7);
            stats_report(o, config, &st, n, screens, frames);
        }
    if (rc == 0 && !o->b.json_only) {
        fprintf(stderr,
                "\n%s: fig12 long-exposure Strehl at 1.25 um, mean over %d screens ('!': a "
                "screen diverged); in brackets: relative to sabre\n%-20s",
                PROG, screens, "method \\ magnitude");
        for (int gi = 0; gi < nmag; gi++) {
            char h[16];
            if (isfinite(mags[gi]))
                snprintf(h, sizeof h, "%.0f", mags[gi]);
            else
                snprintf(h, sizeof h, "free");
            fprintf(stderr, " %17s", h);
        }
        fprintf(stderr, "\n");
        for (int mi = 0; mi < N_FIG12; mi++) {
            if (!(mask >> mi & 1))
                continue;
            fprintf(stderr, "%-20s", ms[mi].name);
            for (int gi = 0; gi < nmag; gi++)
                fprintf(stderr, " %7.4f%c(%+5.1f%%)", table[mi][gi], divtab[mi][gi] ? '!' : ' ',
                        100.0 * (table[mi][gi] / table[0][gi] - 1.0));
            fprintf(stderr, "\n");
        }
        /* Fig. 14: the distributed projection on whole windows (MM, "local") against the one on
         * the pupil only (MV, "local-pupil"), per partitioning */
        for (int mi = 2; mi + 1 < N_FIG12; mi += 3) {
            if (!(mask >> mi & 1) || !(mask >> (mi + 1) & 1))
                continue;
            fprintf(stderr, "Fig. 14, %dx%d: MM / MV - 1 =", (int)ms[mi].k, (int)ms[mi].k);
            for (int gi = 0; gi < nmag; gi++)
                fprintf(stderr, " %+5.1f%%", 100.0 * (table[mi][gi] / table[mi + 1][gi] - 1.0));
            fprintf(stderr, "\n");
        }
        fprintf(stderr, "Brunner et al. 2018 Fig. 12: distributed within 0.8 %% (4x4) and 1.4 %% "
                        "(16x16) of SABRE for magnitudes <= 8, and ahead of the global projection "
                        "on the annular pupil; Fig. 14: the distributed projection on whole "
                        "windows (MM, 'local') within 0.5 %% of the pupil-only one (MV, "
                        "'local-pupil') at 4x4 for moderate noise and ahead of it for strong "
                        "noise, within 1.2 %% of SABRE for <= 8, 3.6 %% for <= 11\n");
    }

    /* Fig. 13: noise-free, 20 closed-loop frames, D-SABRE n/4 x n/4 (8 x 8 for 32 x 32) with the
     * distributed projection, against global SABRE (no partitions, no zero padding); not with
     * --methods. */
    if (o->methods[0])
        return rc;
    const int32_t k13 = n / 4 > 1 ? n / 4 : 2;
    const fig12_method m13[2] = {{"sabre", SW_LOOP_SABRE_GLOBAL, 0},
                                 {"dsabre-local", SW_LOOP_DSABRE_LOCAL, k13}};
    double r13[2] = {0, 0}, b13[2] = {0, 0};
    for (int mi = 0; mi < 2 && rc == 0; mi++) {
        for (int sc = 0; sc < screens && rc == 0; sc++) {
            sw_loop_params p;
            fig12_params(&p, n, &m13[mi], NAN, 1 + (uint64_t)sc, o->influence);
            double rn = NAN, bn = NAN;
            if ((rc = fig13_case(ctx, &p, 20, k13, &rn, &bn)) != 0)
                break;
            r13[mi] += rn / screens;
            b13[mi] += bn / screens;
        }
        if (rc != 0)
            break;
        char config[128];
        snprintf(config, sizeof config, "%s k%d after 20", m13[mi].name, (int)k13);
        json_start("loop_fig13", config, ctx);
        printf(",\"method\":\"%s\",\"partitions\":%d,\"blocks\":%d,\"iterations\":20,"
               "\"lenslets\":%d,\"screens\":%d",
               m13[mi].name, (int)m13[mi].k, (int)k13, (int)n, screens);
        json_num("residual_nm", r13[mi]);
        json_num("block_piston_nm", b13[mi]);
        printf("}\n");
        fflush(stdout);
    }
    if (rc == 0 && !o->b.json_only)
        fprintf(stderr,
                "\n%s: fig13 after 20 noise-free closed-loop frames, mean over %d screens: "
                "residual RMS / RMS of the %dx%d blocks' mean residual (partition pistons)\n"
                "  sabre              %7.1f nm / %6.1f nm\n"
                "  dsabre%d-local      %7.1f nm / %6.1f nm\n",
                PROG, screens, (int)k13, (int)k13, r13[0], b13[0], (int)k13, r13[1], b13[1]);
    return rc;
}

/* ================================================================ fitting */

static int fitting(const prog_opts *o, sw_context *ctx)
{
    const int quick = o->b.quick;
    const int32_t n = quick ? 8 : 32;
    const int32_t frames = o->frames > 0 ? o->frames : (quick ? 20 : 500);
    static const sw_loop_recon recons[2] = {SW_LOOP_MVM, SW_LOOP_DSABRE_LOCAL};
    double turb[2], res[2], fit[2], strehl[2];
    char configs[2][64];
    int rc = 0, nrow = 0;
    for (int i = 0; i < 2 && rc == 0; i++) {
        sw_loop_params p;
        loop_params(&p, n, 0.0, recons[i], recons[i] == SW_LOOP_MVM ? 0 : (quick ? 2 : 4));
        p.dm.coupling = COUPLING;
        p.controller.kind = SW_CTRL_INTEGRATOR;
        p.controller.gain = GAIN;
        p.warmup = 20;
        snprintf(configs[i], sizeof configs[i], "%dx%d %s c%.1f g%.1f", (int)n, (int)n,
                 sw_loop_recon_string(recons[i]), COUPLING, GAIN);
        loop_run r;
        double create_s = 0;
        if ((rc = loop_go(ctx, &p, frames, 1, &r, &create_s)) != 0)
            break;
        if (r.failed) {
            fprintf(stderr, "%s: %s: a loop step failed (%s)\n", PROG, configs[i],
                    sw_context_error(ctx));
            rc = 1;
            break;
        }
        turb[i] = r.frames ? r.turb_sum / r.frames : NAN;
        res[i] = r.frames ? r.res_sum / r.frames : NAN;
        fit[i] = r.fits ? r.fit_sum / r.fits : NAN;
        strehl[i] = r.long_strehl;
        json_start("loop_fitting", configs[i], ctx);
        printf(",\"lenslets\":%d,\"frames\":%d,\"warmup\":20,\"fitting_frames\":%d", (int)n,
               (int)frames, (int)r.fits);
        json_num("diameter_m", p.diameter_m);
        json_num("open_loop_nm", turb[i]);
        json_num("closed_loop_nm", res[i]);
        json_num("fitting_nm", fit[i]);
        json_num("closed_over_fitting", res[i] / fit[i]);
        json_num("long_strehl_j", strehl[i]);
        json_num("create_s", create_s);
        printf("}\n");
        fflush(stdout);
        nrow++;
    }
    if (!o->b.json_only && nrow) {
        fprintf(stderr,
                "\n%s: open vs closed loop (%s backend), mean RMS over %d frames after 20 "
                "warm-up, nm\n",
                PROG, sw_backend_string(sw_context_backend(ctx)), (int)frames);
        fprintf(stderr, "%-32s %10s %10s %10s %8s %9s\n", "config", "open", "closed", "fitting",
                "cl/fit", "LE_Strehl");
        for (int i = 0; i < nrow; i++)
            fprintf(stderr, "%-32s %10.1f %10.1f %10.1f %8.2f %9.4f\n", configs[i], turb[i], res[i],
                    fit[i], res[i] / fit[i], strehl[i]);
    }
    return rc;
}

/* ================================================================ main */

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
    if (o.latency)
        rc = latency(&o, ctx);
    if (rc == 0 && o.speed)
        rc = speed(&o, ctx);
    if (rc == 0 && o.fitting)
        rc = fitting(&o, ctx);
    if (rc == 0 && o.fig11)
        rc = fig11(&o, ctx);
    if (rc == 0 && o.fig12)
        rc = fig12(&o, ctx);
    sw_context_destroy(ctx);
    return rc;
}
