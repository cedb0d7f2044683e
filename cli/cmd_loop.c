/*
 * spotwave loop: the closed-loop adaptive-optics simulator of loop.h (Brunner et al. 2018 Sec. 4,
 * Mocci et al. 2020 Sec. 6) run from a configuration: an infinite turbulence screen moving with the
 * wind, the Shack-Hartmann frame, the real-time chain (MVM, or SABRE / D-SABRE with the global
 * projection of Eq. 13 or the distributed one of Eq. 14-16), the controller, the mirror's shape
 * subtracted, and the science PSF's short- and long-exposure Strehl. Writes a per-frame table, a
 * summary (text or JSON), a plot (plot.c) and the last frame's phase maps.
 *
 * Configuration: the defaults of sw_loop_params_default (Brunner et al. 2018 Sec. 4.B), then a file
 * of `key = value` lines (--config), then the options and --set key=value in command-line order.
 * The keys are named after the fields of sw_loop_params (table `keys` below).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"
#include "outfiles.h"
#include "plot.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SUB "loop"

#define DEF_FRAMES    200
#define MAX_FRAMES    1000000
#define MAX_OVERRIDE  256
#define PLOT_WIDTH    960
#define PLOT_HEIGHT   760
#define GAIN_MAX      10.0 /* gains above: a usage error (5 x the widest stable range, 2) */
#define DIVERGE_K     5    /* residual above DIVERGE_X x the turbulence this many frames running */
#define DIVERGE_X     2.0
#define DIVERGE_HUGE  100.0 /* residual above this x the turbulence: diverged at once */
#define MAX_WARN      5
#define TREND_WINDOWS 8   /* the frames after the warm-up in this many windows             */
#define TREND_MIN     10  /* frames per window, at least (shorter runs: no trend)           */
#define TREND_GROW    0.2 /* residual / turbulence and commands / turbulence both growing   */
#define TREND_CMD     1.0 /* or the commands alone growing by this much: drifting modes      */
#define TREND_RES     0.5 /* or the residual ratio alone (a saturated mirror cannot grow)    */

/* An uncalibrated SABRE / D-SABRE loop whose sensor's slope gain is below this: a warning. */
#define SLOPE_GAIN_WARN 0.95

/* ------------------------------------------------------------------ configuration keys */

typedef enum key_type {
    KT_INT,        /* int32_t in [lo, hi]                                  */
    KT_DOUBLE,     /* finite double in the range of `range`                */
    KT_BOOL,       /* int: 0/1, yes/no, true/false, on/off                 */
    KT_U64,        /* uint64_t, decimal or 0x hex                          */
    KT_MAGNITUDE,  /* double, or "none" (NAN: noise-free)                  */
    KT_MODEL,      /* sw_sh_model                                          */
    KT_INFLUENCE,  /* sw_dm_influence                                      */
    KT_RECON,      /* sw_loop_recon                                        */
    KT_CONTROLLER, /* sw_controller_kind                                   */
    KT_UNSEEN,     /* int: SW_UNSEEN_* bits (sw_unseen_parse)              */
    KT_MODAL,      /* int: 0 actuators, 1 im, 2 kl                         */
    KT_FRAMES      /* the command's frame count (not in sw_loop_params)    */
} key_type;

/* Ranges of KT_DOUBLE keys. */
typedef enum range {
    R_ANY,      /* any finite number          */
    R_POS,      /* > 0                        */
    R_NONNEG,   /* >= 0                       */
    R_OPEN01,   /* 0 < x < 1                  */
    R_HALFOPEN, /* 0 <= x < 1                 */
    R_UNIT,     /* 0 < x <= 1                 */
    R_COND      /* 0 (no limit) or >= 1       */
} range;

typedef struct key_def {
    const char *name;
    key_type type;
    size_t offset; /* into sw_loop_params */
    range rng;     /* KT_DOUBLE            */
    long lo, hi;   /* KT_INT, KT_FRAMES    */
} key_def;

#define P(field) offsetof(sw_loop_params, field)

static const key_def keys[] = {
    {"nx", KT_INT, P(nx), R_ANY, 2, 1024},
    {"diameter_m", KT_DOUBLE, P(diameter_m), R_POS, 0, 0},
    {"square_pupil", KT_BOOL, P(square_pupil), R_ANY, 0, 0},
    {"obscuration", KT_DOUBLE, P(obscuration), R_HALFOPEN, 0, 0},
    {"px_per_lenslet", KT_INT, P(px_per_lenslet), R_ANY, 2, 128},
    {"wfs_wavelength_um", KT_DOUBLE, P(wfs_wavelength_um), R_POS, 0, 0},
    {"nyquist_px", KT_DOUBLE, P(nyquist_px), R_POS, 0, 0},
    {"model", KT_MODEL, P(model), R_ANY, 0, 0},
    {"magnitude", KT_MAGNITUDE, P(magnitude), R_ANY, 0, 0},
    {"zero_point", KT_DOUBLE, P(zero_point), R_POS, 0, 0},
    {"throughput", KT_DOUBLE, P(throughput), R_UNIT, 0, 0},
    {"read_noise_e", KT_DOUBLE, P(read_noise_e), R_NONNEG, 0, 0},
    {"threshold_e", KT_DOUBLE, P(threshold_e), R_NONNEG, 0, 0},
    {"threshold_peak", KT_DOUBLE, P(threshold_peak), R_HALFOPEN, 0, 0},
    {"slope_calibration", KT_BOOL, P(slope_calibration), R_ANY, 0, 0},
    {"negative_filter", KT_INT, P(negative_filter), R_ANY, 0, 2},
    {"r0_m", KT_DOUBLE, P(turbulence.r0_m), R_POS, 0, 0},
    {"L0_m", KT_DOUBLE, P(turbulence.L0_m), R_POS, 0, 0},
    {"r0_wavelength_um", KT_DOUBLE, P(turbulence.wavelength_um), R_POS, 0, 0},
    {"subharmonics", KT_INT, P(turbulence.subharmonics), R_ANY, 0, 8},
    {"wind_m_s", KT_DOUBLE, P(wind_m_s), R_NONNEG, 0, 0},
    {"rate_hz", KT_DOUBLE, P(rate_hz), R_POS, 0, 0},
    {"seed", KT_U64, P(seed), R_ANY, 0, 0},
    {"samples", KT_INT, P(samples), R_ANY, 1, 32},
    {"influence", KT_INFLUENCE, P(dm.influence), R_ANY, 0, 0},
    {"coupling", KT_DOUBLE, P(dm.coupling), R_OPEN01, 0, 0},
    {"recon", KT_RECON, P(recon), R_ANY, 0, 0},
    {"cm_condition", KT_DOUBLE, P(cm_condition), R_COND, 0, 0},
    {"poke_um", KT_DOUBLE, P(poke_um), R_POS, 0, 0},
    {"partitions", KT_INT, P(partitions), R_ANY, 1, 1024},
    {"overlap", KT_INT, P(overlap), R_ANY, 0, 64},
    {"controller", KT_CONTROLLER, P(controller.kind), R_ANY, 0, 0},
    {"gain", KT_DOUBLE, P(controller.gain), R_NONNEG, 0, 0},
    {"leak", KT_DOUBLE, P(controller.leak), R_HALFOPEN, 0, 0},
    {"clip", KT_DOUBLE, P(controller.clip), R_NONNEG, 0, 0},
    {"unseen", KT_UNSEEN, P(unseen), R_ANY, 0, 0},
    {"modal", KT_MODAL, P(modal), R_ANY, 0, 0},
    {"kp", KT_DOUBLE, P(kp), R_ANY, 0, 0},
    {"gain_window", KT_INT, P(gain_window), R_ANY, 0, 65536},
    {"delay", KT_INT, P(delay), R_ANY, 0, 1000},
    {"science_wavelength_um", KT_DOUBLE, P(science_wavelength_um), R_POS, 0, 0},
    {"warmup", KT_INT, P(warmup), R_ANY, 0, MAX_FRAMES},
    {"frames", KT_FRAMES, 0, R_ANY, 1, MAX_FRAMES},
};
static const size_t n_keys = sizeof keys / sizeof keys[0];

#undef P

static const key_def *find_key(const char *name)
{
    for (size_t i = 0; i < n_keys; i++)
        if (strcmp(keys[i].name, name) == 0)
            return &keys[i];
    return NULL;
}

static const char *range_text(range r)
{
    switch (r) {
    case R_POS: return "a number > 0";
    case R_NONNEG: return "a number >= 0";
    case R_OPEN01: return "a number between 0 and 1 (both excluded)";
    case R_HALFOPEN: return "a number in [0, 1)";
    case R_UNIT: return "a number in (0, 1]";
    case R_COND: return "0 (no limit) or a number >= 1";
    default: return "a finite number";
    }
}

static int in_range(range r, double v)
{
    switch (r) {
    case R_POS: return v > 0;
    case R_NONNEG: return v >= 0;
    case R_OPEN01: return v > 0 && v < 1;
    case R_HALFOPEN: return v >= 0 && v < 1;
    case R_UNIT: return v > 0 && v <= 1;
    case R_COND: return v == 0 || v >= 1;
    default: return 1;
    }
}

/* Sets one key from its text. 0, or -1 with what was expected in `want` (for the message). */
static int set_key(const key_def *k, const char *text, sw_loop_params *p, long *frames, char *want,
                   size_t wsize)
{
    char *base = (char *)p + k->offset;
    double v;
    long n;
    switch (k->type) {
    case KT_INT:
    case KT_FRAMES:
        if (sw_cli_parse_long(text, k->lo, k->hi, &n) != 0) {
            snprintf(want, wsize, "a whole number in %ld..%ld", k->lo, k->hi);
            return -1;
        }
        if (k->type == KT_FRAMES)
            *frames = n;
        else
            *(int32_t *)(void *)base = (int32_t)n;
        return 0;
    case KT_DOUBLE:
        if (sw_cli_parse_double(text, &v) != 0 || !in_range(k->rng, v)) {
            snprintf(want, wsize, "%s", range_text(k->rng));
            return -1;
        }
        *(double *)(void *)base = v;
        return 0;
    case KT_BOOL: {
        static const char *const yes[] = {"1", "yes", "true", "on"};
        static const char *const no[] = {"0", "no", "false", "off"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0) {
                *(int *)(void *)base = strcasecmp(text, yes[i]) == 0;
                return 0;
            }
        }
        snprintf(want, wsize, "1 or 0 (yes/no, true/false, on/off)");
        return -1;
    }
    case KT_U64:
        if (sw_cli_parse_u64(text, (uint64_t *)(void *)base) != 0) {
            snprintf(want, wsize, "a whole number >= 0 (decimal or 0x hex)");
            return -1;
        }
        return 0;
    case KT_MAGNITUDE:
        if (strcasecmp(text, "none") == 0) {
            *(double *)(void *)base = NAN;
            return 0;
        }
        if (sw_cli_parse_double(text, &v) != 0) {
            snprintf(want, wsize, "a magnitude, or none (noise-free)");
            return -1;
        }
        *(double *)(void *)base = v;
        return 0;
    case KT_MODEL:
        if (sw_sh_model_parse(text, (sw_sh_model *)(void *)base) != SW_OK) {
            snprintf(want, wsize, "geometric or diffraction");
            return -1;
        }
        return 0;
    case KT_INFLUENCE:
        if (sw_dm_influence_parse(text, (sw_dm_influence *)(void *)base) != SW_OK) {
            snprintf(want, wsize, "gaussian or bezier");
            return -1;
        }
        return 0;
    case KT_RECON:
        if (sw_loop_recon_parse(text, (sw_loop_recon *)(void *)base) != SW_OK) {
            snprintf(want, wsize, "mvm, sabre, dsabre-global, dsabre-local or dsabre-local-pupil");
            return -1;
        }
        return 0;
    case KT_CONTROLLER:
        if (sw_controller_kind_parse(text, (sw_controller_kind *)(void *)base) != SW_OK) {
            snprintf(want, wsize, "integrator, leaky or pi");
            return -1;
        }
        return 0;
    case KT_UNSEEN:
        if (sw_unseen_parse(text, (int *)(void *)base) != SW_OK) {
            snprintf(want, wsize, "none, piston, waffle or piston-waffle");
            return -1;
        }
        return 0;
    case KT_MODAL:
        if (strcasecmp(text, "actuators") == 0 || strcasecmp(text, "im") == 0 ||
            strcasecmp(text, "kl") == 0) {
            *(int *)(void *)base = strcasecmp(text, "im") == 0   ? 1
                                   : strcasecmp(text, "kl") == 0 ? 2
                                                                 : 0;
            return 0;
        }
        snprintf(want, wsize, "actuators, im or kl");
        return -1;
    }
    snprintf(want, wsize, "a value");
    return -1;
}

/* The key's current value as text (what a configuration file would hold). */
static void key_value(const key_def *k, const sw_loop_params *p, long frames, char *buf,
                      size_t size)
{
    const char *base = (const char *)p + k->offset;
    double v;
    switch (k->type) {
    case KT_INT: snprintf(buf, size, "%d", (int)*(const int32_t *)(const void *)base); return;
    case KT_FRAMES: snprintf(buf, size, "%ld", frames); return;
    case KT_BOOL: snprintf(buf, size, "%d", *(const int *)(const void *)base ? 1 : 0); return;
    case KT_U64:
        snprintf(buf, size, "%llu", (unsigned long long)*(const uint64_t *)(const void *)base);
        return;
    case KT_DOUBLE:
    case KT_MAGNITUDE:
        v = *(const double *)(const void *)base;
        if (isnan(v))
            snprintf(buf, size, "none");
        else
            snprintf(buf, size, "%.10g", v);
        return;
    case KT_MODEL:
        snprintf(buf, size, "%s", sw_sh_model_string(*(const sw_sh_model *)(const void *)base));
        return;
    case KT_INFLUENCE:
        snprintf(buf, size, "%s",
                 sw_dm_influence_string(*(const sw_dm_influence *)(const void *)base));
        return;
    case KT_RECON:
        snprintf(buf, size, "%s", sw_loop_recon_string(*(const sw_loop_recon *)(const void *)base));
        return;
    case KT_CONTROLLER:
        snprintf(buf, size, "%s",
                 sw_controller_kind_string(*(const sw_controller_kind *)(const void *)base));
        return;
    case KT_UNSEEN: snprintf(buf, size, "%s", sw_unseen_string(*(const int *)base)); return;
    case KT_MODAL: {
        const int m = *(const int *)base;
        snprintf(buf, size, "%s", m == 2 ? "kl" : m ? "im" : "actuators");
        return;
    }
    }
    snprintf(buf, size, "?");
}

/* ------------------------------------------------------------------ help */

void sw_cmd_loop_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] loop [--config FILE] [--set KEY=VALUE ...] [OPTIONS]\n"
        "\n"
        "Simulates a closed adaptive-optics loop (loop.h; Brunner, de Visser, Vuik & Verhaegen\n"
        "2018, J. Opt. Soc. Am. A 35(6), 859, Sec. 4; Mocci et al. 2020, J. Opt. Soc. Am. A\n"
        "37(10), 1548, Sec. 6): an infinite turbulence screen moving with the wind (Assemat,\n"
        "Wilson & Gendron 2006, Opt. Express 14(3), 988), the Shack-Hartmann frame of a guide\n"
        "star, the real-time chain (centroids, slopes, reconstruction: MVM, or SABRE / D-SABRE\n"
        "with the global DM projection of Brunner et al.'s Eq. 13 or the distributed one of\n"
        "Eq. 14-16: over whole windows with one matrix, Sec. 5.A's, or only on the pupil with\n"
        "a matrix per partition, Sec. 4.A's), the controller, and the deformable mirror's\n"
        "shape subtracted from the next phase; the science camera's short- and long-exposure\n"
        "Strehl and the residual RMS frame by frame.\n"
        "Runs on the context's backend (--backend; the screen is made on the CPU).\n"
        "\n"
        "Configuration: Brunner et al.'s Sec. 4.B setting (32 x 32 lenslets, D = 12 m, square\n"
        "pupil, diffraction model, noise-free, r0 0.15 m at 0.5 um, L0 25 m, 10 km/h, 500 Hz,\n"
        "Gaussian coupling 0.3, D-SABRE 4 x 4 with the distributed projection, integrator gain\n"
        "0.5, J band, 20 warm-up frames) and %d frames, then the file, then the options below\n"
        "in the order given.\n"
        "  --config FILE          `key = value` lines; '#' starts a comment; blank lines are\n"
        "                         skipped; a key given twice, a NUL byte or a line over %d\n"
        "                         characters is an error (FILE:LINE: ...). Keys\n"
        "                         (sw_loop_params' fields):\n"
        "                         nx diameter_m square_pupil obscuration px_per_lenslet\n"
        "                         wfs_wavelength_um nyquist_px model (geometric|diffraction)\n"
        "                         magnitude (a number, or none: noise-free) zero_point\n"
        "                         throughput read_noise_e threshold_e threshold_peak\n"
        "                         slope_calibration r0_m L0_m\n"
        "                         r0_wavelength_um subharmonics wind_m_s rate_hz\n"
        "                         seed samples influence (gaussian|bezier) coupling recon\n"
        "                         (mvm|sabre|dsabre-global|dsabre-local|dsabre-local-pupil)\n"
        "                         cm_condition poke_um\n"
        "                         partitions overlap controller (integrator|leaky|pi) gain\n"
        "                         leak clip delay science_wavelength_um warmup frames\n"
        "                         unseen (none|piston|waffle|piston-waffle) negative_filter\n"
        "                         modal (actuators|im|kl) kp gain_window\n"
        "                         unseen: the modes a Shack-Hartmann sensor on the Fried\n"
        "                         geometry cannot see, filtered out of every reconstruction\n"
        "                         (default piston-waffle; without it they drift and eat\n"
        "                         the stroke). negative_filter (sabre and dsabre-*): the\n"
        "                         loop's modes of negative gain filtered out too, found at\n"
        "                         set-up from the eigenvalues of reconstructor x interaction\n"
        "                         matrix (JSON keys negative_modes, loop_min_gain): 1 with at\n"
        "                         most 600 actuators (default), 2 at any size, 0 never; it\n"
        "                         measures the interaction matrix as mvm does, and costs\n"
        "                         about mvm's set-up (O(nact^3): 0.8 s at 289 actuators, 12\n"
        "                         s at 1089, diffraction, one core).\n"
        "                         controller = pi: per mode, C(z) = kp + ki / (1 - z^-1)\n"
        "                         with ki = gain and kp = key kp (0: the\n"
        "                         integrator), over one mode per actuator, the interaction\n"
        "                         matrix's kept modes (modal = im, recon mvm) or the\n"
        "                         mirror's Karhunen-Loeve modes (modal = kl: shapes\n"
        "                         orthonormal over the pupil, uncorrelated in the loop's\n"
        "                         turbulence; Gendron 1995, PhD thesis, Paris 7);\n"
        "                         with clip, anti-windup by back-calculation.\n"
        "                         gain_window N (pi, recon mvm, kp 0): every N frames after\n"
        "                         the warm-up, each mode's integral gain is re-chosen from\n"
        "                         its closed-loop telemetry (Gendron & Lena 1994, Astron.\n"
        "                         Astrophys. 291, 337: the gain that minimises the predicted\n"
        "                         residual of disturbance and noise); 0: fixed gains. Use\n"
        "                         1024 frames or more: short windows cannot resolve the\n"
        "                         turbulence's few hertz and choose gains far too low\n"
        "                         Centroids: the centre of gravity with a threshold\n"
        "                         subtracted, the larger of threshold_e (0: 3 x read_noise_e\n"
        "                         with a magnitude, none without) and threshold_peak x the\n"
        "                         peak pixel of the flat wavefront's spot at the loop's flux.\n"
        "                         slope_calibration (default 1): the sensor's slope gain,\n"
        "                         measured at set-up with known tilts of 1/16 to 1/4\n"
        "                         lambda/d (key slope_gain of --json), is divided out of the\n"
        "                         slopes sabre and dsabre-* reconstruct from; mvm needs none\n"
        "                         (its interaction matrix is measured through the same\n"
        "                         sensor)\n"
        "  --set KEY=VALUE        one key (repeatable)\n"
        "  --frames N             frames to simulate, 1..%d (default %d; more than warmup)\n"
        "  --gain G               controller gain (key gain), 0..%g. Above the stable limit\n"
        "                         of the loop's delay, d = delay + 1 frames, it is a warning:\n"
        "                         g < 2 sin(pi/(2(2d-1))) for the integrator (2, 1, 0.618 for\n"
        "                         d = 1, 2, 3: where the roots of z^d - z^(d-1) + g = 0 leave\n"
        "                         the unit circle; the leaky one's limit is found likewise)\n"
        "  --coupling C           influence at the neighbouring actuators, 0 < C < 1\n"
        "  --recon R              mvm, sabre, dsabre-global, dsabre-local (distributed\n"
        "                         projection, whole windows: Brunner et al. Fig. 14's MM) or\n"
        "                         dsabre-local-pupil (distributed, pupil only: Fig. 14's MV)\n"
        "  --partitions K         D-SABRE K x K partitions\n"
        "  --magnitude M          guide-star magnitude, or none (noise-free)\n"
        "  --seed S               screen and noise seed\n"
        "  --open-loop            gain 0: the mirror never moves (the turbulence for comparison)\n"
        "  --strict               exit 1 when the run has any warning (below), after the\n"
        "                         outputs are written\n"
        "\n"
        "Warnings (a line 'warning' in the summary and on standard error; the JSON keys\n"
        "warnings, gain_max_stable, loop_delay_frames, diverged, divergence_frame,\n"
        "saturated_frames, slope_gain): the gain above the stable limit; a diverged loop\n"
        "(the residual RMS not finite, above %g x the turbulence RMS once, or above %g x it\n"
        "for %d frames running; divergence_frame is the first of them), or diverging by its\n"
        "trend (the frames after the warm-up in %d windows: the residual and the command\n"
        "RMS, each growing both alone and over the turbulence RMS, by more than %.0f %% over\n"
        "the run along their fitted lines, the commands alone by %.0f %% or the residual\n"
        "alone by %.0f %%: divergence_reason \"trend\", the JSON's trend object has the\n"
        "growths); a saturated mirror (frames with more than half of the commands at the\n"
        "stroke limit, key clip); an uncalibrated sabre or dsabre-* loop whose slope gain is\n"
        "below %g (slope_calibration = 0, or a gain outside 0.5..2, not applied: a faint\n"
        "star's spot below the threshold). The simulated detector has no full well, so the\n"
        "mirror is where this loop saturates. The limit is for the nominal gain; the\n"
        "sensor's response to large spot motions is below 1, so a loop a little above it may\n"
        "stay bounded (it is still flagged).\n"
        "\n"
        "Output (a summary goes to standard output):\n"
        "  --report CSV           one row per frame: frame, turbulence_nm, residual_nm, strehl,\n"
        "                         marechal, command_rms_um, long_strehl (the long exposure so\n"
        "                         far; nan during the warm-up); '-': standard output, in\n"
        "                         place of the summary\n"
        "  --plot PNG             two panels over the frames: the short-exposure Strehl and the\n"
        "                         running long-exposure Strehl; the residual RMS with the\n"
        "                         turbulence RMS and the fitting error (at the end) as references\n"
        "  --maps PREFIX          the last frame's phase maps (um, nan outside the pupil) as\n"
        "                         float FITS: PREFIXturbulence.fits, PREFIXcorrection.fits,\n"
        "                         PREFIXresidual.fits (e.g. --maps out/run1_)\n"
        "  --json                 the summary as one JSON object: the configuration (every key),\n"
        "                         frames, warm-up, long-exposure Strehl, means after the warm-up\n"
        "                         (residual and turbulence RMS, short Strehl, Marechal), the\n"
        "                         fitting error, the control matrix's modes (mvm), the\n"
        "                         modes of negative gain filtered (negative_modes: null when\n"
        "                         not looked for; loop_min_gain: the smallest gain), frames/s,\n"
        "                         backend and the files written\n"
        "  -h, --help             print this help and exit\n"
        "\n"
        "Exit codes: 0 success; 1 a failure while running (an unreadable configuration file,\n"
        "parameters the simulator refuses, a file that cannot be written, a warning under\n"
        "--strict); 2 a usage error (unknown, repeated or bad key or value, a configuration\n"
        "line that is not key = value, a gain above %g).\n"
        "\n"
        "Example:\n"
        "  spotwave loop --set nx=16 --recon mvm --gain 0.4 --frames 300 \\\n"
        "      --report loop.csv --plot loop.png --json\n",
        DEF_FRAMES, SW_CLI_CONFIG_LINE, MAX_FRAMES, DEF_FRAMES, GAIN_MAX, DIVERGE_HUGE, DIVERGE_X,
        DIVERGE_K, TREND_WINDOWS, 100.0 * TREND_GROW, 100.0 * TREND_CMD, 100.0 * TREND_RES,
        SLOPE_GAIN_WARN, GAIN_MAX);
}

/* ------------------------------------------------------------------ options */

/* One setting from the command line, applied after the configuration file. */
typedef struct override {
    char key[64];
    const char *value;
    char source[96]; /* "--gain" or "--set gain=..." for messages */
} override;

typedef struct loop_opts {
    const char *sub; /* for messages: "loop", or "sim bench" (sw_cli_loop_config) */
    const char *config, *report, *plot, *maps;
    int json, open_loop, strict;
    override ov[MAX_OVERRIDE];
    int nov;
    /* the configuration, once applied */
    sw_loop_params p;
    long frames;
} loop_opts;

static int add_override(loop_opts *o, const char *key, const char *value, const char *source)
{
    if (o->nov >= MAX_OVERRIDE)
        return sw_cli_usage(o->sub, "more than %d settings on the command line", MAX_OVERRIDE);
    override *v = &o->ov[o->nov++];
    snprintf(v->key, sizeof v->key, "%s", key);
    v->value = value;
    snprintf(v->source, sizeof v->source, "%s", source);
    return SW_EXIT_OK;
}

/* -1: --help was printed; SW_EXIT_OK; or a usage error's code. */
static int parse_options(int argc, char **argv, loop_opts *o)
{
    enum {
        OPT_CONFIG = 256,
        OPT_SET,
        OPT_FRAMES,
        OPT_GAIN,
        OPT_COUPLING,
        OPT_RECON,
        OPT_PARTITIONS,
        OPT_MAGNITUDE,
        OPT_SEED,
        OPT_OPEN,
        OPT_REPORT,
        OPT_PLOT,
        OPT_MAPS,
        OPT_JSON,
        OPT_STRICT
    };
    static const struct option longopts[] = {
        {"config", required_argument, NULL, OPT_CONFIG},
        {"set", required_argument, NULL, OPT_SET},
        {"frames", required_argument, NULL, OPT_FRAMES},
        {"gain", required_argument, NULL, OPT_GAIN},
        {"coupling", required_argument, NULL, OPT_COUPLING},
        {"recon", required_argument, NULL, OPT_RECON},
        {"partitions", required_argument, NULL, OPT_PARTITIONS},
        {"magnitude", required_argument, NULL, OPT_MAGNITUDE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"open-loop", no_argument, NULL, OPT_OPEN},
        {"report", required_argument, NULL, OPT_REPORT},
        {"plot", required_argument, NULL, OPT_PLOT},
        {"maps", required_argument, NULL, OPT_MAPS},
        {"json", no_argument, NULL, OPT_JSON},
        {"strict", no_argument, NULL, OPT_STRICT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c, rc;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(SUB, argc, argv, "h", longopts)) != -1) {
        const char *key = NULL;
        switch (c) {
        case 'h': sw_cmd_loop_help(stdout); return -1;
        case OPT_CONFIG:
            if (o->config)
                return sw_cli_usage(SUB, "--config is given twice");
            if (sw_cli_opt_file(SUB, "--config", optarg, &o->config) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_SET: {
            char name[64], source[96];
            const char *value;
            if ((rc = sw_cli_split_set(SUB, optarg, name, sizeof name, &value)) != SW_EXIT_OK)
                return rc;
            snprintf(source, sizeof source, "--set %s", name);
            if ((rc = add_override(o, name, value, source)) != SW_EXIT_OK)
                return rc;
            break;
        }
        case OPT_FRAMES: key = "frames"; break;
        case OPT_GAIN: key = "gain"; break;
        case OPT_COUPLING: key = "coupling"; break;
        case OPT_RECON: key = "recon"; break;
        case OPT_PARTITIONS: key = "partitions"; break;
        case OPT_MAGNITUDE: key = "magnitude"; break;
        case OPT_SEED: key = "seed"; break;
        case OPT_OPEN: o->open_loop = 1; break;
        case OPT_REPORT:
        case OPT_PLOT:
        case OPT_MAPS:
            if (sw_cli_opt_file(SUB, sw_cli_option_name(argv), optarg,
                                c == OPT_REPORT ? &o->report
                                : c == OPT_PLOT ? &o->plot
                                                : &o->maps) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o->json = 1; break;
        case OPT_STRICT: o->strict = 1; break;
        default: return SW_EXIT_USAGE;
        }
        if (key && (rc = add_override(o, key, optarg, sw_cli_option_name(argv))) != SW_EXIT_OK)
            return rc;
    }
    if (optind < argc)
        return sw_cli_usage(SUB, "unexpected argument '%s'", argv[optind]);
    if (o->plot && !sw_cli_ends_with(o->plot, ".png"))
        return sw_cli_usage(SUB, "--plot: '%s' does not end in .png", o->plot);
    if (o->report && o->json && strcmp(o->report, "-") == 0)
        return sw_cli_usage(SUB, "--report - and --json both want standard output");
    return SW_EXIT_OK;
}

/* sw_cli_config_set_fn over the loop's keys. */
static int config_set(void *user, const char *name, const char *value, char *want, size_t wsize)
{
    loop_opts *o = user;
    const key_def *k = find_key(name);
    if (!k)
        return SW_CLI_CONFIG_UNKNOWN;
    if (!value)
        return 0;
    return set_key(k, value, &o->p, &o->frames, want, wsize) == 0 ? 0 : -1;
}

/* Reads the configuration file into o->p / o->frames (config.c says what is refused). */
static int read_config(loop_opts *o)
{
    return sw_cli_config_read(o->sub, o->config, config_set, o);
}

/* The stable limit of the loop's gain: its integrator (or leaky integrator; PI with kp = 0, as
 * here, is the integrator of gain ki) sees its correction delay + 1 frames later (the mirror's
 * shape of frame k comes from the commands of frame k - 1 - delay: loop.h). */
static double loop_max_gain(const sw_loop_params *p)
{
    return sw_controller_max_gain(p->delay + 1,
                                  p->controller.kind == SW_CTRL_LEAKY ? p->controller.leak : 0.0);
}

/* Defaults, the file, the command line, --open-loop, and the checks between keys. */
static int build_config(loop_opts *o)
{
    sw_loop_params_default(&o->p);
    o->frames = DEF_FRAMES;
    int rc;
    if (o->config && (rc = read_config(o)) != SW_EXIT_OK)
        return rc;
    for (int i = 0; i < o->nov; i++) {
        const override *v = &o->ov[i];
        const key_def *k = find_key(v->key);
        char want[96];
        if (!k)
            return sw_cli_usage(o->sub, "%s: unknown key '%s'", v->source, v->key);
        if (!*v->value)
            return sw_cli_usage(o->sub, "%s: no value", v->source);
        if (set_key(k, v->value, &o->p, &o->frames, want, sizeof want) != 0)
            return sw_cli_usage(o->sub, "%s: '%s' is not %s", v->source, v->value, want);
    }
    if (o->open_loop)
        o->p.controller.gain = 0.0; /* PI: ki of every mode is the gain, kp 0 */
    /* Gains far outside any stable range are mistakes, not experiments: the widest range, a
     * one-frame delay, ends at 2 (sw_controller_max_gain). Negative and non-finite gains never
     * get this far (the key takes finite numbers >= 0). */
    if (o->p.controller.gain > GAIN_MAX)
        return sw_cli_usage(o->sub,
                            "gain %g is far outside the stable range (this loop's limit is %.4g "
                            "for a delay of %d frame%s; gains above %g are refused)",
                            o->p.controller.gain, loop_max_gain(&o->p), (int)o->p.delay + 1,
                            o->p.delay == 0 ? "" : "s", GAIN_MAX);
    if (o->frames <= o->p.warmup && strcmp(o->sub, SUB) == 0)
        return sw_cli_usage(o->sub,
                            "frames (%ld) must be more than warmup (%d): the long exposure "
                            "starts after the warm-up",
                            o->frames, (int)o->p.warmup);
    return SW_EXIT_OK;
}

int sw_cli_loop_config(const char *sub, const char *config, int n, char *const *sets,
                       sw_loop_params *p, long *frames)
{
    loop_opts *o = calloc(1, sizeof *o);
    if (!o)
        return sw_cli_fail(sub, "out of memory");
    o->sub = sub;
    o->config = config;
    int rc = SW_EXIT_OK;
    for (int i = 0; rc == SW_EXIT_OK && i < n; i++) {
        char name[64], source[96];
        const char *value;
        if ((rc = sw_cli_split_set(sub, sets[i], name, sizeof name, &value)) != SW_EXIT_OK)
            break;
        snprintf(source, sizeof source, "--set %s", name);
        /* the value lives in argv: the override points at it */
        rc = add_override(o, name, value, source);
    }
    if (rc == SW_EXIT_OK)
        rc = build_config(o);
    if (rc == SW_EXIT_OK) {
        *p = o->p;
        *frames = o->frames;
    }
    free(o);
    return rc;
}

/* ------------------------------------------------------------------ the run */

typedef struct loop_run {
    sw_loop_frame *f; /* frames */
    double *long_strehl;
    double create_s, run_s, fitting_nm;
    int32_t modes;
    int32_t negative_modes; /* sw_loop_negative_modes (-1: not looked for) */
    double loop_min_gain;
    /* PI's integral gains at the end (min, median, max over the modes), and tuning rounds */
    int32_t gain_modes, gain_rounds;
    double gain_min, gain_median, gain_max_mode;
    double slope_gain[2]; /* the sensor's, measured at create (sw_loop_slope_gain) */
    int gain_applied;     /* 1: divided out of the reconstructor's slopes */
    double threshold_e;   /* the centroid threshold in force */
    sw_backend backend;
    /* after the warm-up */
    double residual_mean, turbulence_mean, strehl_mean, marechal_mean, long_final;
    char maps[3][4096];
    /* the physics guards */
    double gain_max;       /* stable limit of the gain for the loop's delay */
    int32_t nact;          /* actuators */
    long diverged_at;      /* first frame of the divergence (1-based), 0: none */
    long above_run;        /* frames running with the residual above DIVERGE_X x turbulence */
    long saturated_frames; /* frames with most commands at the stroke limit */
    long first_saturated;  /* the first of them (1-based), 0: none */
    /* the trend after the warm-up (watch_trend): growth over the run, of the fitted line */
    long trend_window;            /* frames per window, 0: too short a run for a trend */
    double residual_growth;       /* of the residual RMS                                */
    double residual_ratio_growth; /* of residual / turbulence                       */
    double command_growth;        /* of the command RMS                                 */
    double command_ratio_growth;  /* of command RMS / turbulence RMS                 */
    int diverging;                /* the trend says the loop is running away           */
    long diverging_from;          /* first frame of the first window past the threshold */
    char warn[MAX_WARN][320];     /* the warnings, in words */
    int nwarn;
} loop_run;

/* Divergence, from the frames seen so far (frame i, 0-based, just run): a residual that is not
 * finite, or above DIVERGE_HUGE x the turbulence, diverges at once; one above DIVERGE_X x the
 * turbulence for DIVERGE_K frames running diverges from the first of them. A loop whose mirror
 * does nothing has residual = turbulence, so only a correction that adds error triggers it. */
static void watch_divergence(loop_run *r, long i)
{
    const double res = r->f[i].residual_nm, turb = r->f[i].turbulence_nm;
    if (r->diverged_at)
        return;
    if (!isfinite(res) || res > DIVERGE_HUGE * turb) {
        r->diverged_at = i + 1;
        return;
    }
    r->above_run = res > DIVERGE_X * turb ? r->above_run + 1 : 0;
    if (r->above_run >= DIVERGE_K)
        r->diverged_at = i + 1 - (DIVERGE_K - 1);
}

/* Growth over the run of x_0 .. x_{n-1} (n windows): the least-squares line's rise from the
 * first to the last window over its mean. */
static double growth(const double *x, int n)
{
    double sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0;
    for (int i = 0; i < n; i++) {
        sx += i;
        sy += x[i];
        sxx += (double)i * i;
        sxy += i * x[i];
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), mean = sy / n;
    return mean > 0.0 ? slope * (n - 1) / mean : 0.0;
}

/* Divergence from the trend (after the run): the frames after the warm-up in TREND_WINDOWS
 * windows, in each the residual and the command RMS, alone and over the turbulence RMS. A
 * quantity grows when both its own line and its ratio's line grow: the seeing getting worse
 * raises the residual but not its ratio, and getting better raises the ratio of a residual held
 * up by noise or aliasing but not the residual itself. A loop whose residual and commands both
 * grow by more than TREND_GROW over the run, whose commands alone grow by TREND_CMD (modes the
 * sensor does not see, drifting), or whose residual alone grows by TREND_RES (a mirror at its
 * stroke limit cannot grow its commands), is diverging even if no frame crossed
 * watch_divergence's thresholds. */
static void watch_trend(const loop_opts *o, loop_run *r, long frames_run)
{
    const long n = frames_run - o->p.warmup;
    r->trend_window = n / TREND_WINDOWS >= TREND_MIN ? n / TREND_WINDOWS : 0;
    if (!r->trend_window)
        return;
    double res_w[TREND_WINDOWS], cmd_w[TREND_WINDOWS], rho[TREND_WINDOWS], cmd[TREND_WINDOWS];
    for (int w = 0; w < TREND_WINDOWS; w++) {
        double res = 0.0, turb = 0.0, c = 0.0;
        for (long i = 0; i < r->trend_window; i++) {
            const sw_loop_frame *f = &r->f[o->p.warmup + w * r->trend_window + i];
            res += f->residual_nm;
            turb += f->turbulence_nm;
            c += f->command_rms_um * 1e3;
        }
        res_w[w] = res;
        cmd_w[w] = c;
        rho[w] = turb > 0.0 ? res / turb : 0.0;
        cmd[w] = turb > 0.0 ? c / turb : 0.0;
    }
    r->residual_growth = growth(res_w, TREND_WINDOWS);
    r->residual_ratio_growth = growth(rho, TREND_WINDOWS);
    r->command_growth = growth(cmd_w, TREND_WINDOWS);
    r->command_ratio_growth = growth(cmd, TREND_WINDOWS);
    const double gr = fmin(r->residual_growth, r->residual_ratio_growth);
    const double gc = fmin(r->command_growth, r->command_ratio_growth);
    r->diverging = (gr > TREND_GROW && gc > TREND_GROW) || gc > TREND_CMD || gr > TREND_RES;
    r->diverging_from = 0;
    for (int w = 1; r->diverging && w < TREND_WINDOWS && !r->diverging_from; w++)
        if (rho[w] > (1.0 + TREND_GROW) * rho[0] || cmd[w] > (1.0 + TREND_GROW) * cmd[0])
            r->diverging_from = o->p.warmup + (long)w * r->trend_window + 1;
    if (r->diverging && !r->diverging_from) /* no window stands out: the whole run */
        r->diverging_from = o->p.warmup + 1;
}

static void add_warning(loop_run *r, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void add_warning(loop_run *r, const char *fmt, ...)
{
    if (r->nwarn >= MAX_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->warn[r->nwarn++], sizeof r->warn[0], fmt, ap);
    va_end(ap);
}

/* The warnings of a run (or of its part before a failure): gain above the stable limit,
 * divergence, saturation. */
static void make_warnings(const loop_opts *o, loop_run *r, long frames_run)
{
    const sw_loop_params *p = &o->p;
    r->nwarn = 0;
    if (p->controller.gain > r->gain_max)
        add_warning(r,
                    "gain %g is above the stable limit %.4g of the %s with a loop delay of %d "
                    "frame%s (delay %d + 1): the loop is expected to diverge",
                    p->controller.gain, r->gain_max, sw_controller_kind_string(p->controller.kind),
                    (int)p->delay + 1, p->delay == 0 ? "" : "s", (int)p->delay);
    if (r->diverged_at) {
        const sw_loop_frame *f = &r->f[frames_run - 1];
        add_warning(r,
                    "the loop diverged from frame %ld: residual above %g x the turbulence (last "
                    "frame %lld: residual %.4g nm, turbulence %.4g nm)",
                    r->diverged_at, DIVERGE_X, (long long)f->frame, f->residual_nm,
                    f->turbulence_nm);
    }
    if (r->diverging && !r->diverged_at)
        add_warning(r,
                    "the loop is diverging: over the %ld frames after the warm-up the residual "
                    "grew by %.0f %% (%.0f %% over the turbulence) and the command RMS by %.0f "
                    "%% (%.0f %%) (windows of %ld frames; from frame %ld)",
                    frames_run - (long)p->warmup, 100.0 * r->residual_growth,
                    100.0 * r->residual_ratio_growth, 100.0 * r->command_growth,
                    100.0 * r->command_ratio_growth, r->trend_window, r->diverging_from);
    const double gmin = fmin(r->slope_gain[0], r->slope_gain[1]);
    if (p->recon != SW_LOOP_MVM && !r->gain_applied && gmin < SLOPE_GAIN_WARN)
        add_warning(r,
                    "the sensor's slope gain is %.3f along x and %.3f along y, not calibrated "
                    "(%s): the %s reconstructor sees slopes %.0f %% short",
                    r->slope_gain[0], r->slope_gain[1],
                    p->slope_calibration ? "a gain outside 0.5..2 is not applied"
                                         : "slope_calibration = 0",
                    sw_loop_recon_string(p->recon), 100.0 * (1.0 - gmin));
    if (r->saturated_frames > 0)
        add_warning(r,
                    "the mirror saturated in %ld of %ld frames (first: frame %ld): more than half "
                    "of the %d commands at the stroke limit clip = %g um",
                    r->saturated_frames, frames_run, r->first_saturated, (int)r->nact,
                    p->controller.clip);
}

/* The keys of a --maps file: micrometres over the telescope pupil, the loop's parameters. */
static void maps_header(sw_cli_hdr *h, const loop_opts *o, const char *which)
{
    const sw_loop_params *p = &o->p;
    const int32_t side = p->samples * p->nx;
    sw_cli_hdr_init(h, "um", "phase (optical path); NaN outside the pupil");
    sw_cli_hdr_comment(h, "spotwave loop: the %s phase of the last frame", which);
    sw_cli_hdr_command(h);
    sw_cli_hdr_wcs_linear(h, "PUPILX", "PUPILY", "m", 0.5 * (side + 1), 0.5 * (side + 1), 0.0, 0.0,
                          p->diameter_m / side, p->diameter_m / side);
    sw_cli_hdr_str(h, "MAP", which, "turbulence, correction (the mirror) or residual");
    sw_cli_hdr_int(h, "FRAME", o->frames, "the frame shown (1-based)");
    sw_cli_hdr_num(h, "DIAMETER", p->diameter_m, "[m] telescope diameter the map spans");
    sw_cli_hdr_int(h, "GRIDNX", p->nx, "lenslets per side");
    sw_cli_hdr_int(h, "SAMPLES", p->samples, "phase samples per lenslet side");
    sw_cli_hdr_num(h, "R0", p->turbulence.r0_m, "[m] Fried parameter at R0WAVE");
    sw_cli_hdr_num(h, "L0", isfinite(p->turbulence.L0_m) ? p->turbulence.L0_m : 0.0,
                   "[m] outer scale (0: Kolmogorov)");
    sw_cli_hdr_num(h, "R0WAVE", p->turbulence.wavelength_um, "[um] wavelength of R0");
    sw_cli_hdr_num(h, "WIND", p->wind_m_s, "[m/s] wind speed");
    sw_cli_hdr_num(h, "RATE", p->rate_hz, "[Hz] frame rate");
    sw_cli_hdr_u64(h, "SEED", p->seed, "screen and noise seed");
    sw_cli_hdr_num(h, "MAGNITUD", p->magnitude, "guide star magnitude (absent: noise-free)");
    sw_cli_hdr_str(h, "RECON", sw_loop_recon_string(p->recon), "reconstructor");
    sw_cli_hdr_str(h, "CONTROL", sw_controller_kind_string(p->controller.kind), "controller");
    sw_cli_hdr_num(h, "CTRLGAIN", p->controller.gain, "controller gain (0: open loop)");
    sw_cli_hdr_int(h, "DELAY", p->delay, "extra frames of delay");
    sw_cli_hdr_num(h, "SCIWAVE", p->science_wavelength_um, "[um] science wavelength");
}

static int cmp_float(const void *a, const void *b)
{
    const float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

static int run_loop(sw_context *ctx, const loop_opts *o, int quiet, loop_run *r)
{
    sw_loop *l = NULL;
    double t0 = sw_cli_now();
    sw_status st = sw_loop_create(ctx, &o->p, &l);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    r->create_s = sw_cli_now() - t0;
    r->gain_max = loop_max_gain(&o->p);
    r->nact = sw_loop_actuators(l);
    r->gain_applied = sw_loop_slope_gain(l, r->slope_gain);
    r->threshold_e = sw_loop_threshold_e(l);
    r->f = calloc((size_t)o->frames, sizeof *r->f);
    r->long_strehl = calloc((size_t)o->frames, sizeof *r->long_strehl);
    int rc = SW_EXIT_OK;
    if (!r->f || !r->long_strehl)
        rc = sw_cli_fail(SUB, "out of memory (%ld frames)", o->frames);
    sw_cli_progress prog;
    sw_cli_progress_start(&prog, SUB, -1, quiet, o->frames);
    r->run_s = 0.0; /* the steps alone (frames/s as bench_loop counts them) */
    for (long i = 0; rc == SW_EXIT_OK && i < o->frames; i++) {
        t0 = sw_cli_now();
        st = sw_loop_step(l, &r->f[i]);
        r->run_s += sw_cli_now() - t0;
        if (st != SW_OK) {
            make_warnings(o, r, i);
            rc = sw_cli_fail(SUB, "frame %ld: %s%s%s%s", i + 1, sw_cli_lib_error(ctx, st),
                             r->nwarn ? " (" : "", r->nwarn ? r->warn[r->nwarn - 1] : "",
                             r->nwarn ? ")" : "");
            break;
        }
        watch_divergence(r, i);
        if (2 * (int64_t)sw_loop_clipped(l) > (int64_t)r->nact && r->saturated_frames++ == 0)
            r->first_saturated = i + 1;
        r->long_strehl[i] = sw_loop_long_strehl(l);
        sw_cli_progress_update(&prog, i + 1, o->frames);
    }
    /* the fitting error is not computed for very large mirrors (SW_EUNSUPPORTED): NaN then */
    if (rc == SW_EXIT_OK && (st = sw_loop_fitting_error(l, &r->fitting_nm)) != SW_OK) {
        if (st == SW_EUNSUPPORTED)
            r->fitting_nm = NAN;
        else
            rc = sw_cli_fail(SUB, "fitting error: %s", sw_cli_lib_error(ctx, st));
    }
    r->modes = sw_loop_modes(l);
    r->negative_modes = sw_loop_negative_modes(l, &r->loop_min_gain);
    const float *ki = sw_loop_gains(l, &r->gain_modes, &r->gain_rounds);
    if (ki && r->gain_modes > 0) {
        float *sorted = malloc((size_t)r->gain_modes * sizeof(float));
        if (sorted) {
            memcpy(sorted, ki, (size_t)r->gain_modes * sizeof(float));
            qsort(sorted, (size_t)r->gain_modes, sizeof(float), cmp_float);
            r->gain_min = sorted[0];
            r->gain_median = sorted[r->gain_modes / 2];
            r->gain_max_mode = sorted[r->gain_modes - 1];
            free(sorted);
        } else {
            r->gain_modes = 0;
        }
    }
    if (rc == SW_EXIT_OK && o->maps) {
        const int32_t side = o->p.samples * o->p.nx;
        const size_t n = (size_t)side * (size_t)side;
        float *m = malloc(3 * n * sizeof *m);
        int32_t got = 0;
        if (!m)
            rc = sw_cli_fail(SUB, "out of memory (maps of %d x %d)", (int)side, (int)side);
        else if ((st = sw_loop_maps(l, &got, m, m + n, m + 2 * n)) != SW_OK)
            rc = sw_cli_fail(SUB, "maps: %s", sw_cli_lib_error(ctx, st));
        else if (got != side)
            rc = sw_cli_fail(SUB, "internal error: maps of side %d, expected %d", (int)got,
                             (int)side);
        static const char *const names[3] = {"turbulence", "correction", "residual"};
        for (int k = 0; rc == SW_EXIT_OK && k < 3; k++) {
            snprintf(r->maps[k], sizeof r->maps[k], "%s%s.fits", o->maps, names[k]);
            sw_image img;
            if ((st = sw_image_alloc(ctx, side, side, SW_PIX_F32, &img)) != SW_OK) {
                rc = sw_cli_fail(SUB, "maps: %s", sw_cli_lib_error(ctx, st));
                break;
            }
            for (int32_t y = 0; y < side; y++)
                memcpy(sw_image_row(&img, y), m + k * n + (size_t)y * side, sizeof(float) * side);
            sw_cli_hdr hdr;
            maps_header(&hdr, o, names[k]);
            const char *staged = sw_cli_file_staged("--maps", r->maps[k]);
            st = staged ? sw_cli_hdr_write(ctx, staged, &img, 1, &hdr) : SW_EIO;
            sw_image_free(&img);
            if (!staged)
                rc = SW_EXIT_FAIL;
            else if (st != SW_OK)
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        }
        free(m);
    }
    sw_loop_destroy(l);
    if (rc != SW_EXIT_OK)
        return rc;

    /* Means after the warm-up (frames warmup + 1 ..). */
    double sr = 0, st_ = 0, ss = 0, sm = 0;
    long n = 0;
    for (long i = o->p.warmup; i < o->frames; i++, n++) {
        sr += r->f[i].residual_nm;
        st_ += r->f[i].turbulence_nm;
        ss += r->f[i].strehl;
        sm += r->f[i].marechal;
    }
    r->residual_mean = sr / (double)n;
    r->turbulence_mean = st_ / (double)n;
    r->strehl_mean = ss / (double)n;
    r->marechal_mean = sm / (double)n;
    r->long_final = r->long_strehl[o->frames - 1];
    watch_trend(o, r, o->frames);
    make_warnings(o, r, o->frames);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ outputs */

static void put_number(FILE *f, double v)
{
    if (isnan(v))
        fputs("nan", f);
    else
        fprintf(f, "%.10g", v);
}

static int write_report(const loop_opts *o, const loop_run *r)
{
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, o->report);
    if (rc != SW_EXIT_OK)
        return rc;
    fputs("frame,turbulence_nm,residual_nm,strehl,marechal,command_rms_um,long_strehl\n", out.f);
    for (long i = 0; i < o->frames; i++) {
        const sw_loop_frame *f = &r->f[i];
        const double v[6] = {f->turbulence_nm, f->residual_nm,    f->strehl,
                             f->marechal,      f->command_rms_um, r->long_strehl[i]};
        fprintf(out.f, "%lld", (long long)f->frame);
        for (int k = 0; k < 6; k++) {
            fputc(',', out.f);
            put_number(out.f, v[k]);
        }
        fputc('\n', out.f);
    }
    return sw_cli_out_close(SUB, &out, 1); /* the commit checks for write errors */
}

static int write_plot(const loop_opts *o, const loop_run *r)
{
    const size_t n = (size_t)o->frames;
    double *buf = malloc(5 * n * sizeof *buf);
    if (!buf)
        return sw_cli_fail(SUB, "out of memory (plot)");
    double *x = buf, *strehl = buf + n, *res = buf + 2 * n, *turb = buf + 3 * n,
           *longs = buf + 4 * n;
    for (size_t i = 0; i < n; i++) {
        x[i] = (double)r->f[i].frame;
        strehl[i] = r->f[i].strehl;
        res[i] = r->f[i].residual_nm;
        turb[i] = r->f[i].turbulence_nm;
        longs[i] = r->long_strehl[i];
    }
    const double fx[2] = {x[0], x[n - 1]}, fy[2] = {r->fitting_nm, r->fitting_nm};

    const sw_plot_rgb blue = {31, 119, 180}, orange = {255, 127, 14}, red = {214, 39, 40},
                      green = {44, 160, 44};
    const sw_plot_series top[2] = {
        {x, strehl, (int64_t)n, blue, 0, "short exposure"},
        {x, longs, (int64_t)n, orange, 0, "long exposure"},
    };
    const sw_plot_series bottom[3] = {
        {x, turb, (int64_t)n, red, 0, "turbulence"},
        {x, res, (int64_t)n, blue, 0, "residual"},
        {fx, fy, 2, green, 1, "fitting error"},
    };
    char title1[160], title2[160];
    snprintf(title1, sizeof title1, "strehl at %g " SW_CLI_UM ": %s, %s gain %g, coupling %g%s",
             o->p.science_wavelength_um, sw_loop_recon_string(o->p.recon),
             sw_controller_kind_string(o->p.controller.kind), o->p.controller.gain,
             o->p.dm.coupling, o->open_loop ? " (open loop)" : "");
    snprintf(title2, sizeof title2, "wavefront rms over the pupil: %dx%d lenslets, d/r0 %.3g",
             (int)o->p.nx, (int)o->p.nx, o->p.diameter_m / o->p.turbulence.r0_m);

    sw_plot_canvas c;
    const sw_plot_rgb white = {255, 255, 255};
    if (sw_plot_canvas_init(&c, PLOT_WIDTH, PLOT_HEIGHT, white) != 0) {
        free(buf);
        return sw_cli_fail(SUB, "out of memory (plot)");
    }
    const int32_t half = PLOT_HEIGHT / 2;
    sw_plot_panel p1 = {.x = 0,
                        .y = 0,
                        .width = PLOT_WIDTH,
                        .height = half,
                        .title = title1,
                        .xlabel = "frame",
                        .ylabel = "strehl",
                        .xmin = 0.0,
                        .xmax = (double)o->frames,
                        .ymin = 0.0,
                        .ymax = NAN,
                        .series = top,
                        .nseries = 2,
                        .scale = 2};
    p1.vline = (double)o->p.warmup + 0.5;
    p1.vline_label = "end of warm-up";
    sw_plot_panel p2 = p1;
    p2.y = half;
    p2.height = PLOT_HEIGHT - half;
    p2.title = title2;
    p2.ylabel = "rms (nm)";
    p2.series = bottom;
    p2.nseries = 3;
    p2.vline_label = NULL;
    int rc = SW_EXIT_OK;
    if (sw_plot_panel_draw(&c, &p1, NULL) != 0 || sw_plot_panel_draw(&c, &p2, NULL) != 0)
        rc = sw_cli_fail(SUB, "internal error: the plot's panels do not fit");
    char err[512];
    const char *staged = rc == SW_EXIT_OK ? sw_cli_file_staged("--plot", o->plot) : NULL;
    if (rc == SW_EXIT_OK && !staged)
        rc = SW_EXIT_FAIL;
    if (rc == SW_EXIT_OK && sw_plot_write_png(&c, staged, err, sizeof err) != 0)
        rc = sw_cli_fail(SUB, "%s", err);
    sw_plot_canvas_free(&c);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ the summary */

static void print_json(const loop_opts *o, const loop_run *r)
{
    char v[128];
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "loop");
    sw_cli_json_string(j, "config_file", o->config);
    cJSON *cfg = cJSON_AddObjectToObject(j, "config");
    for (size_t i = 0; i < n_keys; i++) {
        const key_def *k = &keys[i];
        key_value(k, &o->p, o->frames, v, sizeof v);
        const int text = k->type == KT_MODEL || k->type == KT_INFLUENCE || k->type == KT_RECON ||
                         k->type == KT_CONTROLLER || k->type == KT_UNSEEN || k->type == KT_MODAL;
        if (text)
            sw_cli_json_string(cfg, k->name, v);
        else if (strcmp(v, "none") == 0)
            cJSON_AddNullToObject(cfg, k->name);
        else
            cJSON_AddRawToObject(cfg, k->name, v); /* the number as the configuration writes it */
    }
    cJSON_AddBoolToObject(j, "open_loop", o->open_loop);
    sw_cli_json_int(j, "frames", o->frames);
    sw_cli_json_int(j, "warmup", o->p.warmup);
    sw_cli_json_double(j, "long_strehl", r->long_final);
    sw_cli_json_double(j, "strehl_mean", r->strehl_mean);
    sw_cli_json_double(j, "marechal_mean", r->marechal_mean);
    sw_cli_json_double(j, "residual_nm_mean", r->residual_mean);
    sw_cli_json_double(j, "turbulence_nm_mean", r->turbulence_mean);
    sw_cli_json_double(j, "residual_nm_last", r->f[o->frames - 1].residual_nm);
    sw_cli_json_double(j, "turbulence_nm_last", r->f[o->frames - 1].turbulence_nm);
    sw_cli_json_double(j, "fitting_error_nm", r->fitting_nm);
    if (r->modes >= 0)
        sw_cli_json_int(j, "modes", r->modes);
    else
        cJSON_AddNullToObject(j, "modes");
    if (r->negative_modes >= 0)
        sw_cli_json_int(j, "negative_modes", r->negative_modes);
    else
        cJSON_AddNullToObject(j, "negative_modes");
    sw_cli_json_double(j, "loop_min_gain", r->loop_min_gain);
    if (r->gain_modes > 0) { /* PI: its integral gains per mode at the end */
        cJSON *g = cJSON_AddObjectToObject(j, "pi_gains");
        sw_cli_json_int(g, "modes", r->gain_modes);
        sw_cli_json_int(g, "rounds", r->gain_rounds);
        sw_cli_json_double(g, "min", r->gain_min);
        sw_cli_json_double(g, "median", r->gain_median);
        sw_cli_json_double(g, "max", r->gain_max_mode);
    } else {
        cJSON_AddNullToObject(j, "pi_gains");
    }
    sw_cli_json_double(j, "create_s", r->create_s);
    sw_cli_json_double(j, "run_s", r->run_s);
    sw_cli_json_double(j, "frames_per_s", r->run_s > 0 ? (double)o->frames / r->run_s : NAN);
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_double(j, "gain_max_stable", r->gain_max);
    sw_cli_json_int(j, "loop_delay_frames", o->p.delay + 1);
    cJSON_AddBoolToObject(j, "diverged", r->diverged_at > 0 || r->diverging);
    if (r->diverged_at > 0)
        sw_cli_json_int(j, "divergence_frame", r->diverged_at);
    else if (r->diverging && r->diverging_from > 0)
        sw_cli_json_int(j, "divergence_frame", r->diverging_from);
    else
        cJSON_AddNullToObject(j, "divergence_frame");
    sw_cli_json_string(j, "divergence_reason",
                       r->diverged_at ? "residual" : (r->diverging ? "trend" : NULL));
    cJSON *tr = cJSON_AddObjectToObject(j, "trend");
    if (r->trend_window > 0) {
        sw_cli_json_int(tr, "windows", TREND_WINDOWS);
        sw_cli_json_int(tr, "window_frames", r->trend_window);
        sw_cli_json_double(tr, "residual_growth", r->residual_growth);
        sw_cli_json_double(tr, "residual_ratio_growth", r->residual_ratio_growth);
        sw_cli_json_double(tr, "command_growth", r->command_growth);
        sw_cli_json_double(tr, "command_ratio_growth", r->command_ratio_growth);
    }
    sw_cli_json_int(j, "saturated_frames", r->saturated_frames);
    cJSON *g = cJSON_AddArrayToObject(j, "slope_gain");
    for (int k = 0; g && k < 2; k++)
        cJSON_AddItemToArray(g, sw_cli_json_num(r->slope_gain[k]));
    cJSON *w = cJSON_AddArrayToObject(j, "warnings");
    for (int k = 0; k < r->nwarn; k++)
        cJSON_AddItemToArray(w, sw_cli_json_str(r->warn[k]));
    cJSON_AddBoolToObject(j, "strict", o->strict);
    sw_cli_json_string(j, "report", o->report);
    sw_cli_json_string(j, "plot", o->plot);
    if (o->maps) {
        cJSON *m = cJSON_AddArrayToObject(j, "maps");
        for (int k = 0; k < 3; k++)
            cJSON_AddItemToArray(m, sw_cli_json_str(r->maps[k]));
    } else {
        cJSON_AddNullToObject(j, "maps");
    }
    sw_cli_json_print(j);
}

static void print_text(const loop_opts *o, const loop_run *r)
{
    const sw_loop_params *p = &o->p;
    printf("loop: %s, %dx%d lenslets, D %g m, r0 %g m at %g um, %g m/s, %g Hz%s\n",
           sw_loop_recon_string(p->recon), (int)p->nx, (int)p->nx, p->diameter_m,
           p->turbulence.r0_m, p->turbulence.wavelength_um, p->wind_m_s, p->rate_hz,
           o->open_loop ? ", open loop" : "");
    /* Every key, wrapped: the run's whole configuration, in the file's syntax. */
    char v[128], item[192];
    int col = 0;
    for (size_t i = 0; i < n_keys; i++) {
        key_value(&keys[i], p, o->frames, v, sizeof v);
        snprintf(item, sizeof item, "%s=%s", keys[i].name, v);
        const int len = (int)strlen(item);
        if (col == 0 || col + 1 + len > 96) {
            printf("%s  config     %s", col ? "\n" : "", item);
            col = 13 + len;
        } else {
            printf(" %s", item);
            col += 1 + len;
        }
    }
    printf("\n");
    printf("  frames     %ld (warm-up %d), %.1f frames/s, set-up %.2f s, %s backend\n", o->frames,
           (int)p->warmup, r->run_s > 0 ? (double)o->frames / r->run_s : 0.0, r->create_s,
           sw_backend_string(r->backend));
    printf("  strehl     long exposure %.4f at %g um; short %.4f, marechal %.4f (means)\n",
           r->long_final, p->science_wavelength_um, r->strehl_mean, r->marechal_mean);
    printf("  rms        residual %.2f nm, turbulence %.2f nm (means after the warm-up)\n",
           r->residual_mean, r->turbulence_mean);
    printf("  fitting    %.2f nm (the mirror's best fit of the last turbulence)\n", r->fitting_nm);
    if (r->modes >= 0)
        printf("  modes      %d (control matrix, condition <= %g)\n", (int)r->modes,
               p->cm_condition);
    if (r->negative_modes > 0)
        printf("  filtered   %d mode(s) of negative closed-loop gain (the smallest %.4g)\n",
               (int)r->negative_modes, r->loop_min_gain);
    printf("  sensor     slope gain %.4f x, %.4f y (%s); threshold %.4g e-\n", r->slope_gain[0],
           r->slope_gain[1],
           r->gain_applied
               ? "divided out"
               : (p->recon == SW_LOOP_MVM ? "in the interaction matrix" : "not calibrated"),
           r->threshold_e);
    for (int k = 0; k < r->nwarn; k++)
        printf("  warning    %s\n", r->warn[k]);
    printf("  wrote     ");
    int any = 0;
    const char *files[5] = {o->report, o->plot, o->maps ? r->maps[0] : NULL,
                            o->maps ? r->maps[1] : NULL, o->maps ? r->maps[2] : NULL};
    for (int i = 0; i < 5; i++)
        if (files[i])
            printf("%s %s", any++ ? "," : "", strcmp(files[i], "-") ? files[i] : "stdout");
    printf("%s\n", any ? "" : " nothing");
}

/* ------------------------------------------------------------------ the command */

int sw_cmd_loop(const sw_cli_globals *g, int argc, char **argv)
{
    loop_opts *o = calloc(1, sizeof *o);
    if (!o)
        return sw_cli_fail(SUB, "out of memory");
    o->sub = SUB;
    int rc = parse_options(argc, argv, o);
    if (rc == -1) {
        free(o);
        return SW_EXIT_OK; /* --help */
    }
    if (rc == SW_EXIT_OK)
        rc = build_config(o);
    if (rc == SW_EXIT_OK) {
        sw_cli_file_in("--config", o->config);
        sw_cli_file_out("--report", o->report);
        sw_cli_file_out("--plot", o->plot);
        static const char *const kinds[3] = {"turbulence", "correction", "residual"};
        for (int k = 0; o->maps && k < 3; k++) {
            char name[4200];
            snprintf(name, sizeof name, "%s%s.fits", o->maps, kinds[k]);
            sw_cli_file_out("--maps", name);
        }
        rc = sw_cli_files_check();
    }
    if (rc != SW_EXIT_OK) {
        free(o);
        return rc;
    }
    sw_context *ctx = NULL;
    if ((rc = sw_cli_context(g, SUB, &ctx)) != SW_EXIT_OK) {
        free(o);
        return rc;
    }
    loop_run r;
    memset(&r, 0, sizeof r);
    r.backend = sw_context_backend(ctx);
    rc = run_loop(ctx, o, g->quiet, &r);
    if (rc == SW_EXIT_OK && o->report)
        rc = write_report(o, &r);
    if (rc == SW_EXIT_OK && o->plot)
        rc = write_plot(o, &r);
    const int table_to_stdout = o->report && strcmp(o->report, "-") == 0;
    if (rc == SW_EXIT_OK && !table_to_stdout) {
        if (o->json)
            print_json(o, &r);
        else
            print_text(o, &r);
    }
    /* The warnings on stderr too (the summary may have gone to a file or been JSON); under
     * --strict any of them fails the run, after the outputs were written. */
    if (rc == SW_EXIT_OK) {
        for (int k = 0; k < r.nwarn; k++)
            fprintf(stderr, "spotwave %s: warning: %s\n", SUB, r.warn[k]);
        if (o->strict && r.nwarn > 0) {
            sw_cli_files_keep(); /* the outputs are whole: they record the failing run */
            rc = sw_cli_fail(SUB, "--strict: %d warning%s (above)", r.nwarn,
                             r.nwarn == 1 ? "" : "s");
        }
    }
    free(r.f);
    free(r.long_strehl);
    sw_context_destroy(ctx);
    free(o);
    return rc;
}
