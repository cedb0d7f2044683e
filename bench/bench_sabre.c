/*
 * bench_sabre: wavefront reconstruction from Shack-Hartmann slopes (sabre.h): D-SABRE with H-PME
 * and D-PME against global SABRE and the Fried zonal baseline, with seed 002's two protocols.
 *
 * --accuracy (seed 002 section 3.B, Fig. 6 and Fig. 9-10). Open loop, Monte Carlo over screens:
 *   Telescope D = 25 m, a 64 x 64 SH array (lenslet 0.390625 m in the telescope pupil).
 *   Turbulence: von Karman, r0 = 0.15 m at 0.55 um, L0 = 25 m, sw_phase_screen (3 subharmonic
 *   levels) of 576 x 576 samples at 25 / 512 m: 8 samples per lenslet, the 512 x 512 samples
 *   over the array in the middle and 32 more on every side (so that the simulator's bilinear
 *   interpolation never leaves the screen). Screen s of the run is index s of seed SEED_SCREEN.
 *   The SH sensor (sim_sh.h, DIFFRACTION model) at 0.55 um: 16 px per lenslet, 10 um pixels,
 *   lenslet 160 um in the lenslet plane (the screen's spacing is scaled to 20 um there; the OPD,
 *   in um, is unchanged), focal length chosen so that lambda f / d = 2 px (Nyquist sampled spots;
 *   16 px = 8 lambda / d of field: the per-lenslet tilts of this turbulence, ~0.8 lambda / d RMS
 *   per axis, stay inside). 1024 x 1024 frames.
 *   Photometry: a zero point of 9e9 photons s^-1 m^-2 at magnitude 0 (V band, ~1000 photons s^-1
 *   cm^-2 A^-1 over 900 A), 50 % throughput to the detector, 2 ms exposure, a lenslet of
 *   0.1526 m^2: 1.37e6 e- per fully lit lenslet at magnitude 0; guide stars of magnitude 0, 2, 4,
 *   6, 8, 10, 11, 12 (1.37e6, 2.18e5, 3.45e4, 5467, 866, 137, 54.7, 21.8 e-; at magnitudes 0-4
 *   the 6 e- threshold below cuts little of the diffraction wings and the neighbours' light, so
 *   the centre of gravity loses slope gain and every method's error is larger there than at
 *   magnitude 6: a centroiding effect, not the reconstructors'). Detector: shot noise and 2 e-
 *   RMS read noise
 *   (sw_detector_apply, f32 output, gain 1 e- per unit, no ADC).
 *   Centroids: centre of gravity (centroid.h) with an absolute threshold of 3 x the read noise
 *   (6 e-) subtracted (SUBTRACT, ABSOLUTE: 0.2 of each lenslet's maximum gave twice the error
 *   at magnitude 10, where the maximum is often a noise pixel); slopes in radians =
 *   (centroid - reference) / sw_sh_px_per_rad, the
 *   reference the geometry's (a flat wavefront's spot, also of a partly lit lenslet, is
 *   centro-symmetric about it). The noise-free row uses the simulator's true slopes
 *   (sw_shsim_truth slope_x / slope_y, the exact lenslet-mean gradients) and no image.
 *   Pupils: square (all 64 x 64 lenslets valid, the whole array lit) and annular (a circle of the
 *   array's diameter with a central obscuration of 0.3 of the diameter; valid: illuminated
 *   fraction >= 0.5 from sw_shsim_truth's illum; the other lenslets get zero slopes in D-SABRE,
 *   the seed's zero padding).
 *   Reconstructors (pitch = the lenslet's 160 um, so estimates are OPD in um): global SABRE,
 *   Fried (reg 1e-3), D-SABRE with H-PME and with D-PME for k = 1, 2, 4, 8, 16, 32 partitions
 *   per side, overlap 1 (k = 1 has nothing to equalise: both columns share one plan). SABRE's
 *   model share lambda, its robust passes and the robust PME (sabre.h) apply to global SABRE and
 *   every D-SABRE plan alike (--lambda, --robust, --robust-k, --robust-pme; --lambda 1 is the
 *   per-triangle model of spotwave 2.0, for before/after tables on the same data).
 *   Metric per screen: relative RMS = RMS(estimate - truth) / RMS(truth), both with their mean
 *   removed, over a fixed set of screen samples (the 512 x 512 over the array, at lattice
 *   positions x = -1/2 + (i + 1/2) / 8): those inside the pupil whose triangle of the global
 *   lattice (sw_sabre_locate) has all three vertices inside it (corners: valid lenslets; centres:
 *   four valid corners). The same set for every method. For the square pupil this includes the
 *   half-lenslet rim outside the triangulation (estimates extrapolate there). Estimates:
 *   sw_sabre_map on that grid (checked against sw_sabre_eval on the first screen) and
 *   sw_fried_eval. Reported: mean and sample standard deviation over the screens.
 *   Cost: one render per screen and pupil (flux 1 e-, scaled per magnitude with
 *   sw_image_convert), 14 reconstructions per slope set; the k = 1 plan (a 64 x 64 window, Q of
 *   8065 x 8192) takes ~6 s to make on 2 cores, once per pupil.
 *
 * --speed (seed 002 section 5.B, Table 1): 100 x 100 lenslets with k = 16 and 200 x 200 with
 *   k = 32 (m = 7 core squares, as the seed), overlap 1, the annular pupil mask (diameter =
 *   array, obscuration 0.3 of the diameter, valid: lit fraction >= 0.5 by 16 x 16 point
 *   sampling), H-PME and the D-PME variant. Four slope vectors of N(0, 1) values
 *   (sw_image_fill_random) rotated between samples. Output: the actuators (the spline at the
 *   lenslet corners) only. Cases (the "bench" field; config "<n>x<n> k<k> annular <pme>"):
 *     sabre_cpu          a CPU context, host memory (OpenMP / OpenBLAS)
 *     sabre_gpu_pinned   GPU end to end: pinned host slopes in, pinned actuators out (the
 *                        harness's host clock; sw_sabre_run has finished when it returns)
 *     sabre_gpu_device   GPU with device memory in and out (host clock)
 *     sabre_gpu_kernels  the kernels' device time (sw_sabre_kernel_us, as measured_us)
 *     sabre_create       plan creation, once per plan (own JSON line, host clock)
 *   then one "sabre_speed_summary" line per configuration beside the seed's anchors (GTX TITAN
 *   X): kernels 379 us (100 x 100, p = 4) and 658 us (200 x 200, p = 5); 0.59 ms and 1.55 ms
 *   with the host-device transfers. The seed's kernel times include a local DM projection (a
 *   second sgemm); ours evaluate the spline at the actuators instead (sabre.h).
 *
 * Options (besides the harness's): --accuracy, --speed (default: both), --screens N (default
 * 50; --quick: 3), --size 100|200 and --pme hierarchical|distributed (speed: one configuration
 * or variant only), --padding zero|nearest and --fill N (D-SABRE), --lambda X, --robust N,
 * --robust-k K, --robust-pme, --pme-band (sabre.h; the model and the robust options of global
 * SABRE, of its splines of degree D too, and every D-SABRE plan). --backend cuda runs the
 * simulator, the centroids and D-SABRE on the GPU (the global and Fried baselines are host code).
 * With --degree 2|3 and the environment variable SW_BENCH_NOISE set, each spline run logs on
 * stderr the noise variance its weight came from (sw_sabre_spline_noise), the true one (the
 * slopes against the same screen's exact lenslet means), the slopes' variance and the weight
 * chosen (sabre.h's noise-aware weight).
 */
#include "harness.h"

#include "spotwave/rng.h"
#include "sabre/sabre_internal.h" /* sw_sabre_locate: the triangle of a lattice position */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROG "bench_sabre"

/* ---------------------------------------------------------------- accuracy set-up */

#define NL          64                       /* lenslets per side                      */
#define NLL         (NL * NL)                /* lenslets                               */
#define TEL_D_M     25.0                     /* telescope diameter, m                  */
#define SPL         8                        /* screen samples per lenslet             */
#define MAP_N       (NL * SPL)               /* samples over the array per side (512)  */
#define SCREEN_PAD  32                       /* screen samples beyond it on each side  */
#define SCREEN_N    (MAP_N + 2 * SCREEN_PAD) /* 576                                    */
#define R0_M        0.15                     /* Fried parameter at WL_UM               */
#define L0_M        25.0                     /* outer scale                            */
#define WL_UM       0.55                     /* r0 wavelength and WFS wavelength       */
#define PX_LENSLET  16                       /* pixels per lenslet                     */
#define PIXEL_UM    10.0                     /* detector pixel                         */
#define LENSLET_UM  (PX_LENSLET * PIXEL_UM)  /* lenslet pitch in the lenslet plane     */
#define NYQ_PX      2.0                      /* lambda f / d in pixels                 */
#define FOCAL_MM    (NYQ_PX * LENSLET_UM * PIXEL_UM / WL_UM / 1000.0)
#define FRAME_PX    (NL * PX_LENSLET) /* 1024                                   */
#define OBSCURATION 0.3               /* of the diameter                        */
#define MIN_ILLUM   0.5               /* valid lenslet: lit fraction >= this    */
#define ZERO_POINT  9e9               /* photons s^-1 m^-2 at magnitude 0       */
#define THROUGHPUT  0.5
#define EXPOSURE_S  2e-3
#define READ_E      2.0
#define THRESHOLD_E (3.0 * READ_E) /* CoG threshold, e- (subtracted) */
#define FRIED_REG   1e-3
#define N_MAG       8
#define N_NOISE     (N_MAG + 1) /* noise-free, then the magnitudes        */
#define N_K         6
#define N_METHOD    (2 + 2 * N_K)
#define N_PUPIL     2
#define SEED_SCREEN 0x5ab2e001ull
#define SEED_NOISE  0x5ab2e002ull
#define SEED_SPEED  0x5ab2e003ull

static const double MAGS[N_MAG] = {0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 11.0, 12.0};
static const int32_t KS[N_K] = {1, 2, 4, 8, 16, 32};
static const char *const PUPIL_NAME[N_PUPIL] = {"square", "annular"};

/* ---------------------------------------------------------------- options */

typedef struct prog_opts {
    int accuracy, speed;
    int screens;
    int size;           /* speed: 100 or 200 only; 0 both */
    int pme_mask;       /* speed: bit 0 H-PME, bit 1 D-PME */
    sw_bench_options b; /* the harness's */
} prog_opts;

static const char extra_help[] =
    "Protocols (Brunner et al. 2018; default: both):\n"
    "  --accuracy               open-loop relative RMS error over turbulence screens (3.B)\n"
    "  --speed                  run times, CPU and GPU, 100x100 and 200x200 (5.B, Table 1)\n"
    "  --screens N              accuracy: screens (default 50; --quick: 3)\n"
    "  --size 100|200           speed: that configuration only\n"
    "  --pme P                  speed: hierarchical or distributed only\n"
    "  --padding zero|nearest   D-SABRE's padding (sabre.h; default zero, the seed's)\n"
    "  --fill N                 D-SABRE's fill iterations, 0..16 (sabre.h; default 0)\n"
    "  --lambda X               the model's per-triangle share, 0.001..1 (sabre.h; default 0.2;\n"
    "                           1 is the per-triangle model of spotwave 2.0)\n"
    "  --degree D --continuity R [--smoothing E]\n"
    "                           accuracy: the global column is global SABRE of degree D, 1..3,\n"
    "                           continuity R < D (sabre.h), smoothing E for D >= 2\n"
    "  --no-dsabre              accuracy: global and Fried only\n"
    "  --pupil square|annular   accuracy: that pupil only (default both)\n"
    "  --robust N               robust passes of global SABRE (every --degree) and the local\n"
    "                           solves, 0..16 (sabre.h; default 0)\n"
    "  --robust-k K             their threshold kappa, 1..1000 (default 3)\n"
    "  --robust-pme             H-PME / D-PME offsets from border medians (sabre.h)\n"
    "  --pme-band               H-PME / D-PME offsets from the overlap band (sabre.h)\n";

/* --fill: D-SABRE's fill iterations (every D-SABRE plan). */
static int32_t g_fill = 0;

/* --padding: what D-SABRE reads where the extended array has no data (every D-SABRE plan). */
static sw_sabre_padding g_padding = SW_SABRE_PAD_ZERO;

/* --lambda, --robust, --robust-k, --robust-pme: the model and the robust passes (global SABRE and
 * every D-SABRE plan). */
static double g_lambda = SW_SABRE_TRIANGLE_WEIGHT;
static int32_t g_robust = 0;
static double g_robust_k = SW_SABRE_ROBUST_THRESHOLD;
static int32_t g_robust_pme = 0;
static int32_t g_pme_band = 0;
/* --degree D --continuity R --smoothing E: the global column is global SABRE of degree D
 * (sw_sabre_spline_create) instead of sw_sabre_global_create; --no-dsabre: only the global and
 * Fried columns (the D-SABRE ones print as NaN). */
static int32_t g_degree = 0, g_continuity = 0, g_no_dsabre = 0;
/* --pupil: bit 0 square, bit 1 annular (0: both) */
static int g_pupil_mask = 0;
static double g_smoothing = 0.0; /* 0: the degree's default (sabre.h) */

static int usage_error(const char *opt, const char *v, const char *what)
{
    fprintf(stderr, "%s: %s: '%s' is not %s (see '%s --help')\n", PROG, opt, v, what, PROG);
    return 2;
}

/* Takes this program's own options out of argv (the harness refuses what it does not know).
 * Returns SW_BENCH_CONTINUE or an exit code. */
static int parse_own(int *argc, char **argv, prog_opts *o)
{
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--accuracy") == 0) {
            o->accuracy = 1;
        } else if (strcmp(a, "--speed") == 0) {
            o->speed = 1;
        } else if (strcmp(a, "--robust-pme") == 0) {
            g_robust_pme = 1;
        } else if (strcmp(a, "--pme-band") == 0) {
            g_pme_band = 1;
        } else if (strcmp(a, "--no-dsabre") == 0) {
            g_no_dsabre = 1;
        } else if (strcmp(a, "--pupil") == 0 && i + 1 < *argc) {
            const char *v = argv[++i];
            if (strcmp(v, "square") == 0)
                g_pupil_mask |= 1;
            else if (strcmp(v, "annular") == 0)
                g_pupil_mask |= 2;
            else
                return usage_error(a, v, "square or annular");
        } else if ((strcmp(a, "--degree") == 0 || strcmp(a, "--continuity") == 0 ||
                    strcmp(a, "--smoothing") == 0) &&
                   i + 1 < *argc) {
            const char *v = argv[++i];
            char *e = NULL;
            const double d = strtod(v, &e);
            if (e == v || *e)
                return usage_error(a, v, "a number");
            if (a[2] == 'd')
                g_degree = (int32_t)d;
            else if (a[2] == 'c')
                g_continuity = (int32_t)d;
            else
                g_smoothing = d;
        } else if (strcmp(a, "--lambda") == 0 || strcmp(a, "--robust") == 0 ||
                   strcmp(a, "--robust-k") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "%s: %s needs a value (see '%s --help')\n", PROG, a, PROG);
                return 2;
            }
            const char *v = argv[++i];
            char *e = NULL;
            const double d = strtod(v, &e);
            if (strcmp(a, "--lambda") == 0) {
                if (e == v || *e || !(d >= SW_SABRE_TRIANGLE_WEIGHT_MIN && d <= 1.0))
                    return usage_error(a, v, "a number in 0.001..1");
                g_lambda = d;
            } else if (strcmp(a, "--robust") == 0) {
                if (e == v || *e || !(d >= 0 && d <= SW_SABRE_ROBUST_MAX_PASSES) || d != floor(d))
                    return usage_error(a, v, "a whole number in 0..16");
                g_robust = (int32_t)d;
            } else {
                if (e == v || *e || !(d >= 1.0 && d <= 1e3))
                    return usage_error(a, v, "a number in 1..1000");
                g_robust_k = d;
            }
        } else if (strcmp(a, "--screens") == 0 || strcmp(a, "--size") == 0 ||
                   strcmp(a, "--pme") == 0 || strcmp(a, "--padding") == 0 ||
                   strcmp(a, "--fill") == 0) {
            if (i + 1 >= *argc) {
                fprintf(stderr, "%s: %s needs a value (see '%s --help')\n", PROG, a, PROG);
                return 2;
            }
            const char *v = argv[++i];
            if (strcmp(a, "--fill") == 0) {
                char *e = NULL;
                long f = strtol(v, &e, 10);
                if (e == v || *e || f < 0 || f > 16)
                    return usage_error(a, v, "a whole number in 0..16");
                g_fill = (int32_t)f;
                continue;
            }
            if (strcmp(a, "--padding") == 0) {
                if (sw_sabre_padding_parse(v, &g_padding) != SW_OK)
                    return usage_error(a, v, "zero or nearest");
                continue;
            }
            if (strcmp(a, "--pme") == 0) {
                sw_sabre_pme p;
                if (sw_sabre_pme_parse(v, &p) != SW_OK || p == SW_SABRE_PME_NONE)
                    return usage_error(a, v, "hierarchical or distributed");
                o->pme_mask |= 1 << (int)p;
                continue;
            }
            char *end = NULL;
            long k = strtol(v, &end, 10);
            if (a[2] == 's' && a[3] == 'c') {
                if (end == v || *end || k < 2 || k > 100000)
                    return usage_error(a, v, "a whole number in 2..100000");
                o->screens = (int)k;
            } else {
                if (end == v || *end || (k != 100 && k != 200))
                    return usage_error(a, v, "100 or 200");
                o->size = (int)k;
            }
        } else {
            argv[n++] = argv[i];
        }
    }
    *argc = n;
    argv[n] = NULL;
    if (!o->accuracy && !o->speed)
        o->accuracy = o->speed = 1;
    if (!o->pme_mask)
        o->pme_mask = 3;
    return SW_BENCH_CONTINUE;
}

static int fail(sw_context *ctx, const char *what, sw_status st)
{
    const char *m = sw_context_error(ctx);
    fprintf(stderr, "%s: %s: %s\n", PROG, what, m && m[0] ? m : sw_status_string(st));
    return 1;
}

static void json_start(const char *bench, const char *config, sw_context *ctx, const char *device)
{
    printf("{\"bench\":");
    sw_json_write_string(stdout, bench);
    printf(",\"config\":");
    sw_json_write_string(stdout, config);
    printf(",\"backend\":\"%s\",\"device\":", sw_backend_string(sw_context_backend(ctx)));
    sw_json_write_string(stdout, device);
}

/* ---------------------------------------------------------------- accuracy */

typedef enum { M_GLOBAL = 0, M_FRIED = 1, M_DSABRE = 2 } method_kind;

typedef struct method {
    method_kind kind;
    sw_sabre_pme pme;
    int32_t k;
    char label[8]; /* table column */
    char name[48]; /* JSON config  */
} method;

static void methods_init(method *m)
{
    m[0] = (method){M_GLOBAL, SW_SABRE_PME_NONE, 0, "global", "sabre-global"};
    m[1] = (method){M_FRIED, SW_SABRE_PME_NONE, 0, "fried", "fried"};
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < N_K; i++) {
            method *q = &m[2 + p * N_K + i];
            q->kind = M_DSABRE;
            q->pme = p ? SW_SABRE_PME_DISTRIBUTED : SW_SABRE_PME_HIERARCHICAL;
            q->k = KS[i];
            snprintf(q->label, sizeof q->label, "%s%d", p ? "D" : "H", (int)KS[i]);
            snprintf(q->name, sizeof q->name, "dsabre %s k%d", p ? "d-pme" : "h-pme", (int)KS[i]);
        }
}

/* Photo-electrons of a fully lit lenslet per exposure at magnitude mag. */
static double lenslet_flux(double mag)
{
    const double d = TEL_D_M / NL;
    return ZERO_POINT * pow(10.0, -0.4 * mag) * d * d * EXPOSURE_S * THROUGHPUT;
}

/* Lattice coordinate (lenslet units) of map sample i (0..MAP_N-1). */
static double map_x(int32_t i)
{
    return -0.5 + (i + 0.5) / SPL;
}

/* The running sums of one (pupil, noise, method) cell. */
typedef struct cell {
    double sum, sum2;
    int n;
} cell;

typedef struct acc_state {
    sw_context *ctx;
    const prog_opts *o;
    char device[256];
    int gpu;
    method meth[N_METHOD];
    cell cells[N_PUPIL][N_NOISE][N_METHOD];
    int valid_count[N_PUPIL];
    int64_t sample_count[N_PUPIL];
    double truth_rms_sum[N_PUPIL];

    /* per pupil */
    uint8_t valid[NLL];
    int32_t *set; /* sample indices k MAP_N + i of the metric's set */
    int64_t nset;
    sw_sabre_global *glob;
    sw_sabre_spline *spline; /* --degree */
    sw_fried *fried;
    sw_sabre *ds[2 * N_K];
    sw_sabre_lattice lat[N_METHOD]; /* global and D-SABRE lattices */

    /* buffers */
    double *truth; /* MAP_N^2 */
    double *est;   /* MAP_N^2 */
    double *dval;  /* values, the largest lattice */
    float *fval;   /* D-SABRE values */
    double *phase; /* Fried corners */
    double *coef;  /* --degree: B-coefficients */
    float *slopes; /* 2 NLL */
    int64_t max_values;
    int map_checked;
} acc_state;

/* 1 when vertex v of the global lattice (sx = sy = NL - 1) is inside the pupil: a corner whose
 * lenslet is valid, or a centre whose four corner lenslets are. */
static int vertex_inside(const uint8_t *valid, int64_t v)
{
    const int32_t sx = NL - 1;
    const int64_t ncorner = (int64_t)NL * NL;
    if (v < ncorner)
        return valid[v] != 0;
    const int64_t c = v - ncorner;
    const int32_t I = (int32_t)(c % sx), J = (int32_t)(c / sx);
    const int64_t a = (int64_t)J * NL + I;
    return valid[a] && valid[a + 1] && valid[a + NL] && valid[a + NL + 1];
}

/* The metric's sample set of the current pupil (see the top). */
static int build_set(acc_state *a, int pupil)
{
    a->set = malloc((size_t)MAP_N * MAP_N * sizeof *a->set);
    if (!a->set)
        return 1;
    const sw_pupil pu = sw_pupil_circle(NL * LENSLET_UM);
    sw_pupil an = pu;
    an.obscuration = OBSCURATION;
    a->nset = 0;
    for (int32_t k = 0; k < MAP_N; k++)
        for (int32_t i = 0; i < MAP_N; i++) {
            const double x = map_x(i), y = map_x(k);
            /* lenslet-plane position: lenslet ix's centre at (ix + 1/2 - NL/2) pitch */
            const double u = (x + 0.5 - 0.5 * NL) * LENSLET_UM,
                         v = (y + 0.5 - 0.5 * NL) * LENSLET_UM;
            if (pupil == 1 && !sw_pupil_contains(&an, u, v))
                continue;
            int64_t idx[3];
            double w[3];
            sw_sabre_locate(NL - 1, NL - 1, x, y, idx, w);
            if (vertex_inside(a->valid, idx[0]) && vertex_inside(a->valid, idx[1]) &&
                vertex_inside(a->valid, idx[2]))
                a->set[a->nset++] = k * MAP_N + i;
        }
    return 0;
}

/* Relative RMS of est against truth over the set, means removed. */
static double rel_rms(const acc_state *a, const double *est, double *truth_rms)
{
    double se = 0, st = 0;
    for (int64_t s = 0; s < a->nset; s++) {
        se += est[a->set[s]];
        st += a->truth[a->set[s]];
    }
    const double me = se / (double)a->nset, mt = st / (double)a->nset;
    double num = 0, den = 0;
    for (int64_t s = 0; s < a->nset; s++) {
        const double t = a->truth[a->set[s]] - mt, d = est[a->set[s]] - me - t;
        num += d * d;
        den += t * t;
    }
    if (truth_rms)
        *truth_rms = sqrt(den / (double)a->nset);
    return sqrt(num / den);
}

/* sw_sabre_map against sw_sabre_eval on a few hundred samples of the set (once). */
static int check_map(acc_state *a, const sw_sabre_lattice *l, const double *values)
{
    double worst = 0;
    for (int64_t s = 0; s < a->nset; s += 1 + a->nset / 300) {
        const int32_t i = a->set[s] % MAP_N, k = a->set[s] / MAP_N;
        const double e = sw_sabre_eval(l, values, map_x(i), map_x(k));
        const double d = fabs(e - a->est[a->set[s]]);
        if (!(d <= worst))
            worst = d;
    }
    if (!(worst <= 1e-9 * (1.0 + fabs(a->est[a->set[0]])))) {
        fprintf(stderr, "%s: sw_sabre_map differs from sw_sabre_eval by %g\n", PROG, worst);
        return 1;
    }
    a->map_checked = 1;
    return 0;
}

/* Reconstructs one slope set with every method and adds the relative RMS errors. */
static int reconstruct_all(acc_state *a, int pupil, int noise)
{
    for (int mi = 0; mi < N_METHOD; mi++) {
        const method *m = &a->meth[mi];
        sw_status st = SW_OK;
        const char *what = m->name;
        if (m->kind == M_FRIED) {
            st = sw_fried_run(a->fried, a->slopes, a->phase);
            if (st == SW_OK)
                for (int64_t s = 0; s < a->nset; s++) {
                    const int32_t i = a->set[s] % MAP_N, k = a->set[s] / MAP_N;
                    a->est[a->set[s]] = sw_fried_eval(NL, NL, a->phase, map_x(i), map_x(k));
                }
        } else {
            if (m->kind == M_DSABRE && g_no_dsabre)
                continue;
            if (m->kind == M_GLOBAL && a->spline) {
                st = sw_sabre_spline_run(a->spline, a->slopes, a->coef);
                if (getenv("SW_BENCH_NOISE")) {
                    double sm[2] = {0, 0}, s2[2] = {0, 0};
                    int nv = 0;
                    for (int l = 0; l < NLL; l++)
                        if (a->valid[l]) {
                            nv++;
                            for (int c = 0; c < 2; c++) {
                                sm[c] += a->slopes[l + c * NLL];
                                s2[c] += (double)a->slopes[l + c * NLL] * a->slopes[l + c * NLL];
                            }
                        }
                    const double var = 0.5 * (s2[0] / nv - sm[0] * sm[0] / nv / nv + s2[1] / nv -
                                              sm[1] * sm[1] / nv / nv);
                    static float exact[2 * NLL];
                    double tn = 0;
                    if (noise == 0)
                        memcpy(exact, a->slopes, sizeof exact);
                    for (int l = 0; l < NLL; l++)
                        if (a->valid[l])
                            for (int c = 0; c < 2; c++)
                                tn += 0.5 * (a->slopes[l + c * NLL] - exact[l + c * NLL]) *
                                      (a->slopes[l + c * NLL] - exact[l + c * NLL]) / nv;
                    fprintf(stderr,
                            "noise %d sigma2 %.4e true %.4e var %.4e ratio %.4e weight %g\n", noise,
                            sw_sabre_spline_noise(a->spline), tn, var,
                            sw_sabre_spline_noise(a->spline) / var,
                            sw_sabre_spline_smoothing(a->spline));
                }
                if (st == SW_OK)
                    st = sw_sabre_spline_map(a->spline, a->coef, MAP_N, MAP_N, a->est);
                if (st != SW_OK)
                    return fail(a->ctx, what, st);
                goto measured;
            }
            if (m->kind == M_GLOBAL) {
                st = sw_sabre_global_run(a->glob, a->slopes, a->dval);
            } else {
                sw_sabre *plan = a->ds[mi - 2] ? a->ds[mi - 2] : a->ds[0]; /* k = 1 */
                st = sw_sabre_run(plan, a->slopes, SW_MEM_HOST, a->fval, NULL);
                const int64_t nv = sw_sabre_lattice_values(&a->lat[mi]);
                for (int64_t v = 0; v < nv && st == SW_OK; v++)
                    a->dval[v] = a->fval[v];
            }
            if (st == SW_OK)
                st = sw_sabre_map(a->ctx, &a->lat[mi], a->dval, NL, NL, MAP_N, MAP_N, a->est);
            if (st == SW_OK && m->kind == M_DSABRE && !a->map_checked &&
                check_map(a, &a->lat[mi], a->dval) != 0)
                return 1;
        }
        if (st != SW_OK)
            return fail(a->ctx, what, st);
    measured:;
        const double r = rel_rms(a, a->est, NULL);
        if (!isfinite(r)) {
            fprintf(stderr, "%s: %s, %s pupil: the estimate is not finite on the sample set\n",
                    PROG, m->name, PUPIL_NAME[pupil]);
            return 1;
        }
        cell *c = &a->cells[pupil][noise][mi];
        c->sum += r;
        c->sum2 += r * r;
        c->n++;
    }
    return 0;
}

static void free_plans(acc_state *a)
{
    sw_sabre_global_destroy(a->glob);
    sw_sabre_spline_destroy(a->spline);
    a->spline = NULL;
    free(a->coef);
    a->coef = NULL;
    sw_fried_destroy(a->fried);
    for (int i = 0; i < 2 * N_K; i++)
        sw_sabre_destroy(a->ds[i]);
    a->glob = NULL;
    a->fried = NULL;
    memset(a->ds, 0, sizeof a->ds);
    free(a->set);
    a->set = NULL;
}

/* The reconstructors of the current pupil (valid mask set). */
static int make_plans(acc_state *a, int pupil)
{
    const uint8_t *mask = pupil == 0 ? NULL : a->valid;
    sw_sabre_global_params gp;
    sw_sabre_global_params_default(&gp);
    gp.nx = gp.ny = NL;
    gp.pitch = LENSLET_UM;
    gp.valid = mask;
    gp.triangle_weight = g_lambda;
    gp.robust_passes = g_robust;
    gp.robust_threshold = g_robust_k;
    sw_status st = sw_sabre_global_create_params(a->ctx, &gp, &a->glob);
    if (st != SW_OK)
        return fail(a->ctx, "sw_sabre_global_create", st);
    sw_sabre_global_lattice(a->glob, &a->lat[0]);
    if (g_degree > 0) {
        sw_sabre_spline_params sp;
        sw_sabre_spline_params_default(&sp);
        sp.nx = sp.ny = NL;
        sp.pitch = LENSLET_UM;
        sp.valid = mask;
        sp.degree = g_degree;
        sp.continuity = g_continuity;
        sp.triangle_weight = g_lambda;
        sp.smoothing = g_smoothing;
        const double t0 = sw_bench_now_us();
        st = sw_sabre_spline_create(a->ctx, &sp, &a->spline);
        if (st != SW_OK)
            return fail(a->ctx, "sw_sabre_spline_create", st);
        st = sw_sabre_spline_set_robust(a->spline, g_robust, g_robust_k);
        if (st != SW_OK)
            return fail(a->ctx, "sw_sabre_spline_set_robust", st);
        a->coef = malloc((size_t)sw_sabre_spline_coefficients(a->spline) * sizeof *a->coef);
        if (!a->coef)
            return fail(a->ctx, "out of memory", SW_ENOMEM);
        if (!a->o->b.json_only)
            fprintf(stderr, "%s: global SABRE d %d r %d (smoothing %g), plan %.2f s\n", PROG,
                    (int)g_degree, (int)g_continuity, g_smoothing, 1e-6 * (sw_bench_now_us() - t0));
    }
    st = sw_fried_create(a->ctx, NL, NL, LENSLET_UM, mask, FRIED_REG, &a->fried);
    if (st != SW_OK)
        return fail(a->ctx, "sw_fried_create", st);
    a->max_values = sw_sabre_lattice_values(&a->lat[0]);
    for (int mi = 2; mi < N_METHOD && !g_no_dsabre; mi++) {
        const method *m = &a->meth[mi];
        sw_sabre_params p;
        sw_sabre_params_default(&p);
        p.nx = p.ny = NL;
        p.pitch = LENSLET_UM;
        p.valid = mask;
        p.partitions = m->k;
        p.overlap = 1;
        p.pme = m->pme;
        p.padding = g_padding;
        p.fill_iterations = g_fill;
        p.triangle_weight = g_lambda;
        p.robust_passes = g_robust;
        p.robust_threshold = g_robust_k;
        p.robust_pme = g_robust_pme;
        p.pme_band = g_pme_band;
        if (m->k == 1 && m->pme == SW_SABRE_PME_DISTRIBUTED) {
            /* one partition: nothing to equalise, the H-PME k = 1 plan is the same (and its
             * creation the slowest: a 64 x 64 window) */
            a->lat[mi] = a->lat[2];
            continue;
        }
        const double t0 = sw_bench_now_us();
        st = sw_sabre_create(a->ctx, &p, &a->ds[mi - 2]);
        if (st != SW_OK) {
            char what[96];
            snprintf(what, sizeof what, "sw_sabre_create (%s, %s pupil)", m->name,
                     PUPIL_NAME[pupil]);
            return fail(a->ctx, what, st);
        }
        sw_sabre_info info;
        sw_sabre_get_info(a->ds[mi - 2], &info);
        a->lat[mi] = info.lattice;
        const int64_t nv = sw_sabre_lattice_values(&info.lattice);
        if (nv > a->max_values)
            a->max_values = nv;
        if (!a->o->b.json_only && pupil == 0)
            fprintf(stderr,
                    "%s: %-16s m %d, window %d squares, Q %d x %d, extended %d, plan %.2f s\n",
                    PROG, m->name, (int)info.m, (int)info.window, (int)info.local_values,
                    (int)info.local_slopes, (int)info.extended, 1e-6 * (sw_bench_now_us() - t0));
    }
    return 0;
}

static sw_status alloc_frame(acc_state *a, sw_image *img)
{
    return a->gpu ? sw_image_alloc_device(a->ctx, FRAME_PX, FRAME_PX, SW_PIX_F32, img)
                  : sw_image_alloc(a->ctx, FRAME_PX, FRAME_PX, SW_PIX_F32, img);
}

/* One pupil: the simulator, the centroid plan and the reconstructors, then every screen. */
static int run_pupil(acc_state *a, int pupil, int screens)
{
    sw_shsim_params sp;
    sw_shsim_params_default(&sp);
    sp.width = sp.height = FRAME_PX;
    sw_sh_geometry_default(&sp.geom);
    sp.geom.x0 = sp.geom.y0 = 0.0;
    sp.geom.pitch_px = PX_LENSLET;
    sp.geom.nx = sp.geom.ny = NL;
    sp.geom.pixel_um = PIXEL_UM;
    sp.geom.focal_mm = FOCAL_MM;
    sp.model = SW_SH_DIFFRACTION;
    sp.wavelength_um = WL_UM;
    sp.flux_e = 1.0; /* scaled per magnitude */
    if (pupil == 1) {
        sp.pupil = sw_pupil_circle(NL * LENSLET_UM);
        sp.pupil.obscuration = OBSCURATION;
    }
    sw_turbulence turb;
    sw_turbulence_default(&turb);
    turb.r0_m = R0_M;
    turb.L0_m = L0_M;
    turb.wavelength_um = WL_UM;
    const double px_per_rad = sw_sh_px_per_rad(&sp.geom);

    sw_shsim *sim = NULL;
    sw_centroid_plan *cen = NULL;
    sw_centroid_result res;
    memset(&res, 0, sizeof res);
    sw_image e1 = {0}, work = {0};
    sw_wavefront w;
    memset(&w, 0, sizeof w);
    sw_sh_truth tr;
    memset(&tr, 0, sizeof tr);
    int rc = 0;

    sw_status st = sw_shsim_create(a->ctx, &sp, &sim);
    if (st == SW_OK)
        st = sw_shsim_truth(sim, &tr); /* flat OPD: the illumination */
    if (st != SW_OK) {
        rc = fail(a->ctx, "simulator set-up", st);
        goto done;
    }
    a->valid_count[pupil] = 0;
    for (int l = 0; l < NLL; l++) {
        a->valid[l] = pupil == 0 || tr.illum[l] >= MIN_ILLUM;
        a->valid_count[pupil] += a->valid[l];
    }
    sw_sh_truth_free(&tr);
    memset(&tr, 0, sizeof tr);
    if (build_set(a, pupil) != 0) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        rc = 1;
        goto done;
    }
    a->sample_count[pupil] = a->nset;
    if (!a->o->b.json_only)
        fprintf(stderr, "%s: %s pupil: %d valid lenslets, %lld samples in the metric's set\n", PROG,
                PUPIL_NAME[pupil], a->valid_count[pupil], (long long)a->nset);
    if ((rc = make_plans(a, pupil)) != 0)
        goto done;
    a->dval = malloc((size_t)a->max_values * sizeof *a->dval);
    a->fval = malloc((size_t)a->max_values * sizeof *a->fval);
    if (!a->dval || !a->fval) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        rc = 1;
        goto done;
    }

    sw_centroid_params cp;
    sw_centroid_params_default(&cp);
    cp.geometry = sp.geom;
    cp.width = cp.height = FRAME_PX;
    cp.type = SW_PIX_F32;
    cp.path = a->gpu ? SW_CENTROID_DEVICE : SW_CENTROID_HOST;
    cp.threshold_mode = SW_THRESHOLD_SUBTRACT;
    cp.threshold_kind = SW_THRESHOLD_ABSOLUTE;
    cp.threshold = THRESHOLD_E;
    st = sw_centroid_create(a->ctx, &cp, &cen);
    if (st == SW_OK)
        st = sw_centroid_result_alloc(cen, 1, SW_MEM_HOST, &res);
    if (st == SW_OK)
        st = alloc_frame(a, &e1);
    if (st == SW_OK)
        st = alloc_frame(a, &work);
    if (st != SW_OK) {
        rc = fail(a->ctx, "centroid set-up", st);
        goto done;
    }

    for (int s = 0; s < screens && rc == 0; s++) {
        const double t0 = sw_bench_now_us();
        sw_wavefront_free(&w); /* sw_phase_screen allocates its output */
        st =
            sw_phase_screen(a->ctx, &turb, SCREEN_N, TEL_D_M / MAP_N, SEED_SCREEN, (uint64_t)s, &w);
        if (st != SW_OK) {
            rc = fail(a->ctx, "sw_phase_screen", st);
            break;
        }
        /* the same OPD in the lenslet plane: 8 samples per 160 um lenslet */
        w.spacing_um = LENSLET_UM / SPL;
        w.u0_um = w.v0_um = -0.5 * (SCREEN_N - 1) * w.spacing_um;
        for (int32_t k = 0; k < MAP_N; k++)
            for (int32_t i = 0; i < MAP_N; i++)
                a->truth[k * MAP_N + i] =
                    w.opd_um[(int64_t)(k + SCREEN_PAD) * SCREEN_N + i + SCREEN_PAD];
        st = sw_shsim_clear_opd(sim);
        if (st == SW_OK)
            st = sw_shsim_add_wavefront(sim, &w, 1.0);
        if (st == SW_OK)
            st = sw_shsim_truth(sim, &tr);
        if (st == SW_OK)
            st = sw_shsim_run(sim, &e1, 0);
        if (st != SW_OK) {
            rc = fail(a->ctx, "simulating the SH frame", st);
            break;
        }
        double trms;
        rel_rms(a, a->truth, &trms);
        a->truth_rms_sum[pupil] += trms;

        /* noise-free: the true lenslet-mean gradients */
        for (int l = 0; l < NLL; l++) {
            a->slopes[l] = a->valid[l] ? (float)tr.slope_x[l] : 0.0f;
            a->slopes[NLL + l] = a->valid[l] ? (float)tr.slope_y[l] : 0.0f;
        }
        sw_sh_truth_free(&tr);
        memset(&tr, 0, sizeof tr);
        rc = reconstruct_all(a, pupil, 0);

        for (int mg = 0; mg < N_MAG && rc == 0; mg++) {
            sw_detector d;
            sw_detector_default(&d);
            d.shot_noise = 1;
            d.read_noise_e = READ_E;
            d.gain_e_per_adu = 1.0;
            d.out_type = SW_PIX_F32;
            d.seed = SEED_NOISE + 64u * (uint64_t)s + 8u * (uint64_t)pupil + (uint64_t)mg;
            st = sw_image_convert(a->ctx, &e1, &work, lenslet_flux(MAGS[mg]), 0.0, NULL);
            if (st == SW_OK)
                st = sw_detector_apply(a->ctx, &d, &work, &work);
            if (st == SW_OK)
                st = sw_centroid_run(cen, &work, &res);
            if (st != SW_OK) {
                rc = fail(a->ctx, "detector and centroids", st);
                break;
            }
            /* blocks layout, all lenslets (no mask in the geometry): pixels -> radians */
            for (int l = 0; l < NLL; l++) {
                a->slopes[l] = a->valid[l] ? (float)(res.slopes[l] / px_per_rad) : 0.0f;
                a->slopes[NLL + l] = a->valid[l] ? (float)(res.slopes[NLL + l] / px_per_rad) : 0.0f;
            }
            rc = reconstruct_all(a, pupil, mg + 1);
        }
        if (!a->o->b.json_only)
            fprintf(stderr, "%s: %s pupil, screen %d/%d: truth RMS %.3f um, %.1f s\n", PROG,
                    PUPIL_NAME[pupil], s + 1, screens, trms, 1e-6 * (sw_bench_now_us() - t0));
    }

done:
    sw_wavefront_free(&w);
    sw_sh_truth_free(&tr);
    sw_image_free(&e1);
    sw_image_free(&work);
    sw_centroid_result_free(&res);
    sw_centroid_destroy(cen);
    sw_shsim_destroy(sim);
    free_plans(a);
    free(a->dval);
    free(a->fval);
    a->dval = NULL;
    a->fval = NULL;
    return rc;
}

static void cell_stats(const cell *c, double *mean, double *sd)
{
    *mean = c->n ? c->sum / c->n : NAN;
    const double var = c->n > 1 ? (c->sum2 - c->n * *mean * *mean) / (c->n - 1) : NAN;
    *sd = c->n > 1 ? sqrt(var > 0 ? var : 0.0) : NAN;
}

static void noise_label(int noise, char *buf, size_t size)
{
    if (noise == 0)
        snprintf(buf, size, "noise-free");
    else
        snprintf(buf, size, "mag %.0f", MAGS[noise - 1]);
}

static void print_accuracy(const acc_state *a, int screens)
{
    /* the set-up, once */
    json_start("sabre_accuracy_setup", "64x64 D=25m", a->ctx, a->device);
    printf(",\"lenslets\":%d,\"telescope_m\":%.3f,\"lenslet_m\":%.6f,\"r0_m\":%.3f,\"L0_m\":%.3f,"
           "\"r0_wavelength_um\":%.3f,\"wfs_wavelength_um\":%.3f,\"screen_n\":%d,"
           "\"screen_spacing_m\":%.8f,\"screens\":%d,\"px_per_lenslet\":%d,\"lambda_f_d_px\":%.2f,"
           "\"model\":\"diffraction\",\"zero_point_ph_s_m2\":%.4g,\"throughput\":%.3f,"
           "\"exposure_s\":%.4g,\"read_noise_e\":%.2f,\"threshold_subtract_e\":%.3f,"
           "\"obscuration\":%.2f,\"min_illum\":%.2f,\"fried_reg\":%.1e,\"overlap\":1,"
           "\"padding\":\"%s\",\"fill_iterations\":%d,\"triangle_weight\":%.4g,"
           "\"robust_passes\":%d,\"robust_threshold\":%.4g,\"robust_pme\":%d,\"pme_band\":%d,"
           "\"flux_e\":{",
           NL, TEL_D_M, TEL_D_M / NL, R0_M, L0_M, WL_UM, WL_UM, SCREEN_N, TEL_D_M / MAP_N, screens,
           PX_LENSLET, NYQ_PX, ZERO_POINT, THROUGHPUT, EXPOSURE_S, READ_E, THRESHOLD_E, OBSCURATION,
           MIN_ILLUM, FRIED_REG, sw_sabre_padding_string(g_padding), (int)g_fill, g_lambda,
           (int)g_robust, g_robust_k, (int)g_robust_pme, (int)g_pme_band);
    for (int mg = 0; mg < N_MAG; mg++)
        printf("%s\"%.0f\":%.2f", mg ? "," : "", MAGS[mg], lenslet_flux(MAGS[mg]));
    printf("},\"valid_lenslets\":{\"square\":%d,\"annular\":%d},\"samples\":{\"square\":%lld,"
           "\"annular\":%lld},\"truth_rms_um\":{\"square\":%.4f,\"annular\":%.4f}}\n",
           a->valid_count[0], a->valid_count[1], (long long)a->sample_count[0],
           (long long)a->sample_count[1], a->truth_rms_sum[0] / screens,
           a->truth_rms_sum[1] / screens);

    for (int pu = 0; pu < N_PUPIL; pu++)
        for (int nz = 0; nz < N_NOISE; nz++)
            for (int mi = 0; mi < N_METHOD; mi++) {
                const method *m = &a->meth[mi];
                char nl[32], config[128];
                noise_label(nz, nl, sizeof nl);
                snprintf(config, sizeof config, "%s %s %s", PUPIL_NAME[pu], nl, m->name);
                double mean, sd;
                cell_stats(&a->cells[pu][nz][mi], &mean, &sd);
                json_start("sabre_accuracy", config, a->ctx, a->device);
                printf(",\"pupil\":\"%s\",", PUPIL_NAME[pu]);
                if (nz)
                    printf("\"magnitude\":%.1f,\"flux_e\":%.2f,", MAGS[nz - 1],
                           lenslet_flux(MAGS[nz - 1]));
                else
                    printf("\"magnitude\":null,\"flux_e\":null,");
                printf("\"method\":\"%s\",\"pme\":%s%s%s,\"partitions\":",
                       m->kind == M_GLOBAL  ? "sabre_global"
                       : m->kind == M_FRIED ? "fried"
                                            : "dsabre",
                       m->kind == M_DSABRE ? "\"" : "",
                       m->kind == M_DSABRE ? sw_sabre_pme_string(m->pme) : "null",
                       m->kind == M_DSABRE ? "\"" : "");
                if (m->kind == M_DSABRE)
                    printf("%d,\"overlap\":1,", (int)m->k);
                else
                    printf("null,\"overlap\":null,");
                printf("\"screens\":%d,\"valid_lenslets\":%d,\"samples\":%lld,\"rel_rms_mean\":",
                       a->cells[pu][nz][mi].n, a->valid_count[pu], (long long)a->sample_count[pu]);
                if (isfinite(mean))
                    printf("%.6f", mean);
                else
                    printf("null");
                printf(",\"rel_rms_sd\":");
                if (isfinite(sd))
                    printf("%.6f}\n", sd);
                else
                    printf("null}\n");
            }
    fflush(stdout);
    if (a->o->b.json_only)
        return;
    for (int t = 0; t < 2; t++) {
        fprintf(stderr,
                "\n%s: accuracy (Brunner et al. 2018 Fig. 6 square, Fig. 10 annular): relative RMS "
                "error, %s "
                "over %d screens\n",
                PROG, t ? "standard deviation" : "mean", screens);
        fprintf(stderr, "%-20s", "pupil / noise");
        for (int mi = 0; mi < N_METHOD; mi++)
            fprintf(stderr, " %7s", a->meth[mi].label);
        fprintf(stderr, "\n");
        for (int pu = 0; pu < N_PUPIL; pu++)
            for (int nz = 0; nz < N_NOISE; nz++) {
                char nl[32], row[48];
                noise_label(nz, nl, sizeof nl);
                snprintf(row, sizeof row, "%s %s", PUPIL_NAME[pu], nl);
                fprintf(stderr, "%-20s", row);
                for (int mi = 0; mi < N_METHOD; mi++) {
                    double mean, sd;
                    cell_stats(&a->cells[pu][nz][mi], &mean, &sd);
                    fprintf(stderr, " %7.4f", t ? sd : mean);
                }
                fprintf(stderr, "\n");
            }
    }
    fprintf(stderr,
            "columns: global SABRE, Fried (reg %.0e), D-SABRE H-PME (H) and D-PME (D) with k x k "
            "partitions, overlap 1\nflux per lit lenslet:",
            FRIED_REG);
    for (int mg = 0; mg < N_MAG; mg++)
        fprintf(stderr, "%s mag %.0f %.1f e-", mg ? "," : "", MAGS[mg], lenslet_flux(MAGS[mg]));
    fprintf(stderr,
            "; read noise %.0f e-, CoG threshold %.0f e- subtracted; mean truth RMS %.3f um "
            "(square), %.3f um (annular)\n"
            "Brunner et al. 2018 (OOMAO, 100 screens): H-PME stays flat as k grows while D-PME "
            "degrades "
            "(Fig. 6); annular: H-PME usable, D-PME much worse, stronger decomposition helps "
            "(Fig. 10)\n",
            READ_E, THRESHOLD_E, a->truth_rms_sum[0] / screens, a->truth_rms_sum[1] / screens);
}

static int accuracy(const prog_opts *o, sw_context *ctx)
{
    const int screens = o->screens > 0 ? o->screens : (o->b.quick ? 3 : 50);
    acc_state *a = calloc(1, sizeof *a);
    if (!a) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return 1;
    }
    a->ctx = ctx;
    a->o = o;
    a->gpu = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    sw_bench_device_name(ctx, a->device, sizeof a->device);
    methods_init(a->meth);
    a->truth = malloc((size_t)MAP_N * MAP_N * sizeof *a->truth);
    a->est = malloc((size_t)MAP_N * MAP_N * sizeof *a->est);
    a->phase = malloc((size_t)(NL + 1) * (NL + 1) * sizeof *a->phase);
    a->slopes = malloc(2 * (size_t)NLL * sizeof *a->slopes);
    int rc = 0;
    if (!a->truth || !a->est || !a->phase || !a->slopes) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        rc = 1;
    }
    if (rc == 0 && !o->b.json_only)
        fprintf(stderr,
                "%s: accuracy: %d screens, 64x64 SH, D = %.0f m, r0 %.2f m, L0 %.0f m at %.2f um; "
                "%d px per lenslet, f = %.4f mm\n",
                PROG, screens, TEL_D_M, R0_M, L0_M, WL_UM, PX_LENSLET, FOCAL_MM);
    for (int pu = 0; pu < N_PUPIL && rc == 0; pu++)
        if (!g_pupil_mask || (g_pupil_mask >> pu & 1))
            rc = run_pupil(a, pu, screens);
    if (rc == 0)
        print_accuracy(a, screens);
    free(a->truth);
    free(a->est);
    free(a->phase);
    free(a->slopes);
    free(a);
    return rc;
}

/* ---------------------------------------------------------------- speed */

#define POOL 4

/* Annular mask of an n x n array: a circle of the array's diameter, central obscuration
 * OBSCURATION of it, valid when at least MIN_ILLUM of a lenslet's 16 x 16 sample points lie
 * inside. Returns the number of valid lenslets. */
static int annular_mask(int32_t n, uint8_t *valid)
{
    const double R = 0.5 * n, r = OBSCURATION * R;
    int count = 0;
    for (int32_t iy = 0; iy < n; iy++)
        for (int32_t ix = 0; ix < n; ix++) {
            int in = 0;
            for (int b = 0; b < 16; b++)
                for (int c = 0; c < 16; c++) {
                    const double x = ix - 0.5 * n + (c + 0.5) / 16.0;
                    const double y = iy - 0.5 * n + (b + 0.5) / 16.0;
                    const double q = x * x + y * y;
                    in += q <= R * R && q >= r * r;
                }
            valid[iy * n + ix] = in >= MIN_ILLUM * 256;
            count += valid[iy * n + ix];
        }
    return count;
}

typedef struct speed_job {
    sw_sabre *plan;
    const float *slopes[POOL];
    sw_memory memory;
    float *actuators;
    int kernel; /* report sw_sabre_kernel_us */
} speed_job;

static sw_status speed_run(void *user, int sample, double *measured_us)
{
    speed_job *j = user;
    sw_status st = sw_sabre_run(j->plan, j->slopes[sample % POOL], j->memory, NULL, j->actuators);
    if (st == SW_OK && j->kernel)
        *measured_us = sw_sabre_kernel_us(j->plan);
    return st;
}

/* Slope pools and output buffers of one configuration on one context. */
typedef struct speed_bufs {
    sw_image host[POOL]; /* host (CPU context) or pinned (CUDA context) */
    sw_image dev[POOL];  /* device (CUDA) */
    sw_image act_host, act_dev;
} speed_bufs;

static void bufs_free(speed_bufs *b)
{
    for (int i = 0; i < POOL; i++) {
        sw_image_free(&b->host[i]);
        sw_image_free(&b->dev[i]);
    }
    sw_image_free(&b->act_host);
    sw_image_free(&b->act_dev);
}

/* A flat float buffer of at least count values as an f32 image of SPEED_ROW-wide rows (images
 * are at most 65536 wide): 64 KiB rows, so that host (64-byte) and device (pitched) strides are
 * tight and the values are contiguous. */
#define SPEED_ROW 16384

static sw_status flat_alloc(sw_context *ctx, int32_t count, int device, sw_image *img)
{
    const int32_t h = (count + SPEED_ROW - 1) / SPEED_ROW;
    sw_status st = device ? sw_image_alloc_device(ctx, SPEED_ROW, h, SW_PIX_F32, img)
                          : sw_image_alloc(ctx, SPEED_ROW, h, SW_PIX_F32, img);
    if (st == SW_OK && img->stride != SPEED_ROW * sizeof(float)) {
        fprintf(stderr, "%s: a %d-float row got a stride of %zu bytes: buffers not contiguous\n",
                PROG, SPEED_ROW, img->stride);
        return SW_EINTERNAL;
    }
    return st;
}

static sw_status bufs_make(sw_context *ctx, int32_t n, speed_bufs *b)
{
    memset(b, 0, sizeof *b);
    const int gpu = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    const int32_t ns = 2 * n * n, na = (n + 1) * (n + 1);
    sw_status st = flat_alloc(ctx, na, 0, &b->act_host);
    if (st == SW_OK && gpu)
        st = flat_alloc(ctx, na, 1, &b->act_dev);
    for (int i = 0; i < POOL && st == SW_OK; i++) {
        st = flat_alloc(ctx, ns, 0, &b->host[i]);
        if (st == SW_OK)
            st = sw_image_fill_random(ctx, &b->host[i], SEED_SPEED + (uint64_t)(n * 16 + i),
                                      SW_RNG_STREAM_USER, SW_RANDOM_NORMAL, 0.0, 1.0);
        if (st == SW_OK && gpu)
            st = flat_alloc(ctx, ns, 1, &b->dev[i]);
        if (st == SW_OK && gpu)
            st = sw_image_copy(ctx, &b->host[i], &b->dev[i]);
    }
    if (st == SW_OK)
        st = sw_context_synchronize(ctx);
    return st;
}

/* Creates a plan, prints its creation time (JSON line and stderr). */
static sw_status timed_create(const prog_opts *o, sw_context *ctx, const sw_sabre_params *p,
                              const char *config, sw_sabre **plan, double *us)
{
    const double t0 = sw_bench_now_us();
    sw_status st = sw_sabre_create(ctx, p, plan);
    *us = sw_bench_now_us() - t0;
    if (st != SW_OK)
        return st;
    char device[256];
    sw_bench_device_name(ctx, device, sizeof device);
    sw_sabre_info info;
    sw_sabre_get_info(*plan, &info);
    json_start("sabre_create", config, ctx, device);
    printf(",\"create_us\":%.1f,\"m\":%d,\"window\":%d,\"local_values\":%d,\"local_slopes\":%d,"
           "\"extended\":%d,\"dpme_iterations\":%d}\n",
           *us, (int)info.m, (int)info.window, (int)info.local_values, (int)info.local_slopes,
           (int)info.extended, (int)info.dpme_iterations);
    fflush(stdout);
    if (!o->b.json_only)
        fprintf(stderr,
                "%s: %s (%s): plan %.1f ms; m %d, window %d, Q %d x %d, extended %d, D-PME "
                "iterations %d\n",
                PROG, config, sw_backend_string(sw_context_backend(ctx)), 1e-3 * *us, (int)info.m,
                (int)info.window, (int)info.local_values, (int)info.local_slopes,
                (int)info.extended, (int)info.dpme_iterations);
    return SW_OK;
}

typedef struct speed_row {
    char config[64];
    int n;
    double kernels, pinned, device, cpu, create_gpu, create_cpu; /* us, -1 when not run */
} speed_row;

static int speed_config(const prog_opts *o, sw_context *gpu, sw_context *cpu, int32_t n, int32_t k,
                        sw_sabre_pme pme, speed_row *row)
{
    uint8_t *valid = malloc((size_t)n * n);
    if (!valid) {
        fprintf(stderr, "%s: out of memory\n", PROG);
        return 1;
    }
    const int nvalid = annular_mask(n, valid);
    snprintf(row->config, sizeof row->config, "%dx%d k%d annular %s", (int)n, (int)n, (int)k,
             sw_sabre_pme_string(pme));
    row->n = n;
    row->kernels = row->pinned = row->device = row->cpu = row->create_gpu = row->create_cpu = -1;
    if (!o->b.json_only)
        fprintf(stderr, "%s: %s: %d valid lenslets of %d\n", PROG, row->config, nvalid,
                (int)(n * n));
    sw_sabre_params p;
    sw_sabre_params_default(&p);
    p.nx = p.ny = n;
    p.pitch = 1.0;
    p.valid = valid;
    p.partitions = k;
    p.overlap = 1;
    p.pme = pme;
    p.padding = g_padding;
    p.fill_iterations = g_fill;
    int rc = 0;
    sw_context *ctxs[2] = {gpu, cpu};
    for (int c = 0; c < 2 && rc == 0; c++) {
        sw_context *ctx = ctxs[c];
        if (!ctx)
            continue;
        speed_bufs b;
        sw_sabre *plan = NULL;
        sw_status st = bufs_make(ctx, n, &b);
        if (st != SW_OK) {
            rc = fail(ctx, "speed buffers", st);
            bufs_free(&b);
            break;
        }
        double us = 0;
        st = timed_create(o, ctx, &p, row->config, &plan, &us);
        if (st != SW_OK) {
            rc = fail(ctx, "sw_sabre_create", st);
            bufs_free(&b);
            break;
        }
        speed_job j;
        memset(&j, 0, sizeof j);
        j.plan = plan;
        sw_bench_result r;
        memset(&r, 0, sizeof r);
        const double items = 1.0;
        if (ctx == gpu) {
            row->create_gpu = us;
            for (int i = 0; i < POOL; i++)
                j.slopes[i] = b.host[i].data;
            j.memory = SW_MEM_PINNED;
            j.actuators = b.act_host.data;
            sw_bench_case cp = {
                "sabre_gpu_pinned", row->config, ctx, speed_run, &j, 0, items, "frames"};
            if (sw_bench_run(&o->b, &cp, &r) != SW_OK)
                rc = 1;
            row->pinned = r.median_us;
            for (int i = 0; i < POOL; i++)
                j.slopes[i] = b.dev[i].data;
            j.memory = SW_MEM_DEVICE;
            j.actuators = b.act_dev.data;
            sw_bench_case cd = {
                "sabre_gpu_device", row->config, ctx, speed_run, &j, 0, items, "frames"};
            if (rc == 0 && sw_bench_run(&o->b, &cd, &r) != SW_OK)
                rc = 1;
            row->device = r.median_us;
            j.kernel = 1;
            sw_bench_case ck = {
                "sabre_gpu_kernels", row->config, ctx, speed_run, &j, 0, items, "frames"};
            if (rc == 0 && sw_bench_run(&o->b, &ck, &r) != SW_OK)
                rc = 1;
            row->kernels = r.median_us;
        } else {
            row->create_cpu = us;
            for (int i = 0; i < POOL; i++)
                j.slopes[i] = b.host[i].data;
            j.memory = SW_MEM_HOST;
            j.actuators = b.act_host.data;
            sw_bench_case cc = {"sabre_cpu", row->config, ctx, speed_run, &j, 0, items, "frames"};
            if (sw_bench_run(&o->b, &cc, &r) != SW_OK)
                rc = 1;
            row->cpu = r.median_us;
        }
        sw_sabre_destroy(plan);
        bufs_free(&b);
    }
    free(valid);
    return rc;
}

static void print_us(double us)
{
    if (us >= 0)
        fprintf(stderr, " %10.1f", us);
    else
        fprintf(stderr, " %10s", "-");
}

static void json_us(const char *name, double us)
{
    if (us >= 0)
        printf(",\"%s\":%.3f", name, us);
    else
        printf(",\"%s\":null", name);
}

static int speed(const prog_opts *o, sw_context *gpu, sw_context *cpu)
{
    static const int32_t cfg[2][2] = {{100, 16}, {200, 32}};
    static const double seed_kernels[2] = {379.0, 658.0}, seed_total[2] = {590.0, 1550.0};
    speed_row rows[4];
    int nrow = 0, rc = 0;
    for (int c = 0; c < 2 && rc == 0; c++) {
        if (o->size && o->size != cfg[c][0])
            continue;
        for (int pm = 0; pm < 2 && rc == 0; pm++) {
            if (!(o->pme_mask & (1 << pm)))
                continue;
            rc = speed_config(o, gpu, cpu, cfg[c][0], cfg[c][1], (sw_sabre_pme)pm, &rows[nrow]);
            if (rc == 0)
                nrow++;
        }
    }
    sw_bench_finish(&o->b);
    char device[256];
    sw_context *ref = gpu ? gpu : cpu;
    sw_bench_device_name(ref, device, sizeof device);
    for (int i = 0; i < nrow; i++) {
        const int s = rows[i].n == 100 ? 0 : 1;
        json_start("sabre_speed_summary", rows[i].config, ref, device);
        json_us("kernels_us", rows[i].kernels);
        json_us("gpu_pinned_us", rows[i].pinned);
        json_us("gpu_device_us", rows[i].device);
        json_us("cpu_us", rows[i].cpu);
        json_us("create_gpu_us", rows[i].create_gpu);
        json_us("create_cpu_us", rows[i].create_cpu);
        printf(",\"seed_kernels_us\":%.0f,\"seed_total_us\":%.0f,\"seed_device\":\"GeForce GTX "
               "TITAN X\"}\n",
               seed_kernels[s], seed_total[s]);
    }
    fflush(stdout);
    if (!o->b.json_only && nrow) {
        fprintf(stderr,
                "\n%s: speed (Brunner et al. 2018 Table 1), median us; paper: GTX TITAN X, kernels "
                "incl. a "
                "local DM projection, total with the host-device copies\n",
                PROG);
        fprintf(stderr, "%-34s %10s %10s %10s %10s %10s %10s %10s %10s\n", "config", "kernels",
                "gpu_pinned", "gpu_device", "cpu", "create_gpu", "create_cpu", "seed_kern",
                "seed_total");
        for (int i = 0; i < nrow; i++) {
            const int s = rows[i].n == 100 ? 0 : 1;
            fprintf(stderr, "%-34s", rows[i].config);
            print_us(rows[i].kernels);
            print_us(rows[i].pinned);
            print_us(rows[i].device);
            print_us(rows[i].cpu);
            print_us(rows[i].create_gpu);
            print_us(rows[i].create_cpu);
            print_us(seed_kernels[s]);
            print_us(seed_total[s]);
            fprintf(stderr, "\n");
        }
    }
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
