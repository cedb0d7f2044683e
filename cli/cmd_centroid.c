/*
 * spotwave centroid: the centre of gravity of every Shack-Hartmann lenslet's spot (Mocci et
 * al. 2020, Eq. 6-7) in each frame of an image, over the lenslet grid of Eq. 1-5 given by options
 * or found in a reference image (sw_centroid_find_geometry), with the conditioning of centroid.h
 * (look-up table, dark, flat, threshold, gamma, window), and the slopes against a reference
 * image or table. --algorithm pyramid|com searches the spots instead (search.h, Mompean et al.
 * 2019 Sec. 3.2: PAPYCS or one centre of mass per lenslet, started at the reference positions).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define SUB "centroid"

#define DEF_PIXEL_UM 5.5
#define DEF_FOCAL_MM 3.5
#define MAX_BATCH    64 /* frames per library run */

void sw_cmd_centroid_help(FILE *out)
{
    fprintf(out,
            "Usage: spotwave [GLOBAL OPTIONS] centroid IMAGE [OPTIONS]\n"
            "\n"
            "Measures the centre of gravity of the spot of every Shack-Hartmann lenslet (Mocci,\n"
            "Busato, Bombieri, Bonora & Muradore 2020, J. Opt. Soc. Am. A 37(10), 1548, Eq. 6-7)\n"
            "in each frame of IMAGE and writes one CSV row per lenslet and frame. Pixel\n"
            "coordinates are 0-based; the centre of pixel (0,0) is (0,0).\n"
            "\n"
            "Input:\n"
            "  IMAGE                  FITS (a 2-D image, or a cube whose planes are frames),\n"
            "                         8/16-bit PGM, CBF or TIFF (every page a frame). 8/16-bit\n"
            "                         and float pixels are used as they\n"
            "                         are; 32-bit integer pixels are converted to float.\n"
            "\n"
            "Lenslet grid (Mocci et al. 2020, Eq. 1-5):\n"
            "  --geometry auto|manual auto: find the pitch, origin and grid in the --reference\n"
            "                         image (a flat-wavefront spot pattern, one spot per lenslet;\n"
            "                         pitch 3..128 px); manual (default): from the options below\n"
            "  --pitch PX             lenslet pitch in pixels, 1..128, may be fractional\n"
            "                         (needed with manual geometry)\n"
            "  --grid NXxNY           lenslets across and down (default: as many as fit)\n"
            "  --origin X0,Y0         corner pixel of lenslet (0,0) (default: the grid centred on\n"
            "                         the image in whole pixels, where 'spotwave sim sh' puts it)\n"
            "  --mask CSV             columns ix,iy,valid: lenslets with valid 0 are left out;\n"
            "                         lenslets it does not list stay in (a centroids CSV of this\n"
            "                         command is a mask)\n"
            "  --pixel-um P           detector pixel pitch, micrometres (default %g)\n"
            "  --focal-mm F           lenslet focal length, millimetres (default %g)\n"
            "\n"
            "Conditioning (per pixel, in this order; centroid.h):\n"
            "  --lut CSV              look-up table, one column 'value': 256 rows for 8-bit\n"
            "                         frames, 65536 for 16-bit ones (v = lut[raw])\n"
            "  --dark IMAGE           dark frame (FITS or PGM, the frame size) subtracted\n"
            "  --flat IMAGE           per-pixel gains (FITS or PGM, the frame size) multiplied in\n"
            "  --threshold T          threshold in conditioned intensity units\n"
            "  --threshold-fraction F threshold as a fraction (0..1) of each lenslet's brightest\n"
            "                         conditioned pixel (instead of --threshold)\n"
            "  --threshold-mode subtract|zero\n"
            "                         subtract T and clip at 0 (default), or zero the pixels\n"
            "                         below T and keep the others\n"
            "  --gamma G              raise the conditioned intensity to the power G (default 1)\n"
            "  --window W             leave out W pixels at each edge of every lenslet's region\n"
            "                         (default 0)\n"
            "  --algorithm cog|pyramid|com\n"
            "                         cog: centre of gravity of each lenslet's region (default);\n"
            "                         pyramid: PAPYCS, the pyramidal search of Mompean, Aragon,\n"
            "                         Prieto & Artal 2019 (Future Gener. Comput. Syst. 91, 177,\n"
            "                         Sec. 3.2.1): centres of mass in windows shrinking from the\n"
            "                         pitch rounded down to 3 px, each on the last centre, minus\n"
            "                         the window's minimum;\n"
            "                         com: one such centre of mass in a window of the pitch (the\n"
            "                         same paper, Sec. 3.2.3). Both start at the reference\n"
            "                         centroids (below; without a reference at the lenslets'\n"
            "                         optical axes) and take the pixels as they are: no\n"
            "                         conditioning options (--lut, --dark, --flat,\n"
            "                         --threshold*, --gamma, --window) and no --path.\n"
            "                         intensity is the last window's sum above its minimum.\n"
            "  --discard              pyramid, com: the discarding stage of Mompean et al. 2019,\n"
            "                         Sec. 3.2.1 (empty or saturated cell, spacing, isolated\n"
            "                         spots; criterion 1 compares the centroid's pixel with\n"
            "                         the 8 pixels max(1, pitch / 32 rounded) away): the spots it\n"
            "                         discards get valid 0 (default: none discarded)\n"
            "\n"
            "Methods (--algorithm cog; centroid.h \"Methods\"):\n"
            "  --method M             cog (default), wcog, local, brightest, correlation or\n"
            "                         quadcell:\n"
            "                         wcog: weighted CoG with a Gaussian weight of --fwhm, fixed\n"
            "                         at the reference or re-centred --iterations times (Nicolle,\n"
            "                         Fusco, Rousset & Michau 2004, Opt. Lett. 29(23), 2743);\n"
            "                         local: background and noise from each lenslet's outer ring\n"
            "                         of pixels, CoG above --local-k sigma;\n"
            "                         brightest: CoG of the --brightest N pixels minus the\n"
            "                         (N+1)-th;\n"
            "                         correlation: shift against the same lenslet of the\n"
            "                         --reference image (needed), normalised cross-correlation\n"
            "                         over +-(--search) px and parabola fits (Lofdahl 2010, A&A\n"
            "                         524, A90), for extended scenes;\n"
            "                         quadcell: (A+B-C-D)/sum of the quadrants times --quad-gain\n"
            "                         (default sqrt(pi/2) * --fwhm / 2.3548), 2x2 lenslets\n"
            "  --fwhm PX              wcog weight FWHM; quadcell spot FWHM\n"
            "  --iterations N         wcog re-centrings (default 0: fixed weight)\n"
            "  --local-k K            local threshold in sigmas (default 3)\n"
            "  --brightest N          brightest: pixels kept\n"
            "  --search PX            correlation search half-width (default a quarter region)\n"
            "  --quad-gain PX         quadcell gain\n"
            "  --gain E               detector gain, e-/ADU: error bars x_var,y_var from photon\n"
            "                         and read noise (without it, from each lenslet's outer\n"
            "                         ring; plain cog without it or a check: no error bars)\n"
            "  --read-noise E         read noise, electrons (needs --gain)\n"
            "\n"
            "Validity (status column; centroid.h \"Status\"; all off by default):\n"
            "  --min-snr S            status faint below this SNR\n"
            "  --max-shift PX         status left when the centroid is farther from the\n"
            "                         reference\n"
            "  --peak-border          status left when the brightest pixel is on the region's\n"
            "                         outer ring\n"
            "  --edge-px PX           status cut when the centroid is closer to the region's edge\n"
            "  --edge-fraction F      status cut when more than F of the signal is on the ring\n"
            "\n"
            "Saturation (cog; centroid.h):\n"
            "  --saturation V|none    raw pixel value (before --lut, --dark, --flat) at or above\n"
            "                         which a pixel is saturated (default: the full scale of\n"
            "                         integer frames, 255 for 8-bit and 65535 for 16-bit; none\n"
            "                         for float frames, 32-bit integer ones included). A lenslet\n"
            "                         with a saturated pixel in its region (after --window) gets\n"
            "                         saturated 1; its centroid is kept (valid) but may be\n"
            "                         biased. Give the camera's level (e.g. 4095 for 12 bits in\n"
            "                         16-bit words); none: no check\n"
            "  --drop-saturated       saturated lenslets also get valid 0 (no centroid, no\n"
            "                         slope), as empty ones; a saturated lenslet of the\n"
            "                         --reference image then leaves the mask\n"
            "\n"
            "Reference and slopes (slope = centroid - reference, pixels):\n"
            "  --reference FILE       an image (FITS/PGM: one frame, the image's size and pixel\n"
            "                         type) whose centroids, with the same grid and\n"
            "                         conditioning, are the reference; or a CSV with columns\n"
            "                         ix,iy,x_px,y_px listing each lenslet of the grid once\n"
            "                         (a one-frame centroids CSV of this command, or the truth\n"
            "                         CSV of 'spotwave sim sh'). A lenslet invalid (nan) in the\n"
            "                         reference leaves the mask; it is an error when --mask\n"
            "                         keeps it. Without --reference, slopes are measured from\n"
            "                         the lenslets' optical axes (geometry.h).\n"
            "  --slopes CSV           writes ix,iy,dx_px,dy_px for the lenslets of the mask (nan\n"
            "                         where invalid in the frame), and dx_rad,dy_rad = dx_px *\n"
            "                         pixel / focal when --pixel-um and --focal-mm are given\n"
            "  --interleaved          run the library with interleaved slopes (x0,y0,x1,y1,...)\n"
            "                         instead of blocks (all x, then all y); the files are the\n"
            "                         same either way\n"
            "\n"
            "Output:\n"
            "  -o, --out CSV          centroids (default '-': standard output):\n"
            "                         ix,iy,x_px,y_px,intensity,valid, then dx_px,dy_px with\n"
            "                         --reference, then (cog) saturated (1: a saturated pixel in\n"
            "                         the lenslet's region), status (0 ok, 1 masked, 2\n"
            "                         nonfinite, 3 empty, 4 left, 5 cut, 6 faint, 7 saturated),\n"
            "                         x_var,y_var (px^2; nan without error bars) and snr; a\n"
            "                         first column 'frame' (0-based)\n"
            "                         when IMAGE holds several frames; x_px, y_px, dx_px, dy_px\n"
            "                         are nan for invalid lenslets. Rows in lenslet order (iy,\n"
            "                         then ix).\n"
            "  --path auto|host|device|copy|mapped\n"
            "                         the library's memory path (default auto: host on the CPU,\n"
            "                         copy on a GPU)\n"
            "  --json                 print a JSON report on standard output (needs --out FILE):\n"
            "                         grid, valid and saturated lenslets, slope mean and RMS,\n"
            "                         path, timings\n"
            "  -h, --help             print this help and exit\n"
            "\n"
            "Example:\n"
            "  spotwave centroid frame.fits --geometry auto --reference ref.fits --out c.csv\n",
            DEF_PIXEL_UM, DEF_FOCAL_MM);
}

/* ------------------------------------------------------------------ parsing */

typedef struct centroid_opts {
    const char *image, *reference, *mask, *dark, *flat, *lut, *out, *slopes;
    int geometry_auto, reference_csv;
    int have_grid, have_pitch, have_origin, have_pixel, have_focal;
    int32_t nx, ny;
    double pitch, x0, y0, pixel_um, focal_mm;
    int have_threshold, have_fraction, have_mode;
    double threshold;
    sw_threshold_mode mode;
    double gamma;
    long window;
    int interleaved, json;
    sw_centroid_path path;
    int search, discard, have_path; /* --algorithm pyramid|com (search.h), --discard */
    sw_search_algorithm algorithm;
    int have_saturation, drop_saturated; /* --saturation, --drop-saturated (cog) */
    sw_centroid_method method;           /* --method and its options (cog) */
    int have_method_opt, peak_border;
    double fwhm, local_k, quad_gain, gain, read_noise, min_snr, max_shift, edge_px, edge_fraction;
    int32_t iterations, brightest, search_px;
    double saturation; /* sw_centroid_params.saturation (< 0: none) */
} centroid_opts;

static int parse_options(int argc, char **argv, centroid_opts *o)
{
    enum {
        OPT_GEOMETRY = 256,
        OPT_GRID,
        OPT_PITCH,
        OPT_ORIGIN,
        OPT_MASK,
        OPT_PIXEL,
        OPT_FOCAL,
        OPT_LUT,
        OPT_DARK,
        OPT_FLAT,
        OPT_THRESHOLD,
        OPT_FRACTION,
        OPT_MODE,
        OPT_GAMMA,
        OPT_WINDOW,
        OPT_ALGORITHM,
        OPT_REFERENCE,
        OPT_SLOPES,
        OPT_INTERLEAVED,
        OPT_PATH,
        OPT_JSON,
        OPT_DISCARD,
        OPT_SATURATION,
        OPT_DROP_SATURATED,
        OPT_METHOD,
        OPT_FWHM,
        OPT_ITERATIONS,
        OPT_LOCAL_K,
        OPT_BRIGHTEST,
        OPT_SEARCH,
        OPT_QUAD_GAIN,
        OPT_GAIN,
        OPT_READ_NOISE,
        OPT_MIN_SNR,
        OPT_MAX_SHIFT,
        OPT_PEAK_BORDER,
        OPT_EDGE_PX,
        OPT_EDGE_FRACTION
    };
    static const struct option longopts[] = {
        {"geometry", required_argument, NULL, OPT_GEOMETRY},
        {"grid", required_argument, NULL, OPT_GRID},
        {"pitch", required_argument, NULL, OPT_PITCH},
        {"origin", required_argument, NULL, OPT_ORIGIN},
        {"mask", required_argument, NULL, OPT_MASK},
        {"pixel-um", required_argument, NULL, OPT_PIXEL},
        {"focal-mm", required_argument, NULL, OPT_FOCAL},
        {"lut", required_argument, NULL, OPT_LUT},
        {"dark", required_argument, NULL, OPT_DARK},
        {"flat", required_argument, NULL, OPT_FLAT},
        {"threshold", required_argument, NULL, OPT_THRESHOLD},
        {"threshold-fraction", required_argument, NULL, OPT_FRACTION},
        {"threshold-mode", required_argument, NULL, OPT_MODE},
        {"gamma", required_argument, NULL, OPT_GAMMA},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"algorithm", required_argument, NULL, OPT_ALGORITHM},
        {"reference", required_argument, NULL, OPT_REFERENCE},
        {"slopes", required_argument, NULL, OPT_SLOPES},
        {"interleaved", no_argument, NULL, OPT_INTERLEAVED},
        {"path", required_argument, NULL, OPT_PATH},
        {"out", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"discard", no_argument, NULL, OPT_DISCARD},
        {"saturation", required_argument, NULL, OPT_SATURATION},
        {"drop-saturated", no_argument, NULL, OPT_DROP_SATURATED},
        {"method", required_argument, NULL, OPT_METHOD},
        {"fwhm", required_argument, NULL, OPT_FWHM},
        {"iterations", required_argument, NULL, OPT_ITERATIONS},
        {"local-k", required_argument, NULL, OPT_LOCAL_K},
        {"brightest", required_argument, NULL, OPT_BRIGHTEST},
        {"search", required_argument, NULL, OPT_SEARCH},
        {"quad-gain", required_argument, NULL, OPT_QUAD_GAIN},
        {"gain", required_argument, NULL, OPT_GAIN},
        {"read-noise", required_argument, NULL, OPT_READ_NOISE},
        {"min-snr", required_argument, NULL, OPT_MIN_SNR},
        {"max-shift", required_argument, NULL, OPT_MAX_SHIFT},
        {"peak-border", no_argument, NULL, OPT_PEAK_BORDER},
        {"edge-px", required_argument, NULL, OPT_EDGE_PX},
        {"edge-fraction", required_argument, NULL, OPT_EDGE_FRACTION},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB;
    int c;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        switch (c) {
        case OPT_GEOMETRY:
            if (strcmp(optarg, "auto") == 0)
                o->geometry_auto = 1;
            else if (strcmp(optarg, "manual") == 0)
                o->geometry_auto = 0;
            else
                return sw_cli_usage(S, "--geometry: '%s' is not auto or manual", optarg);
            break;
        case OPT_GRID:
            if (sw_cli_opt_grid(S, "--grid", optarg, &o->nx, &o->ny) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_grid = 1;
            break;
        case OPT_PITCH:
            if (sw_cli_opt_double(S, "--pitch", optarg, SW_CLI_POSITIVE,
                                  "a positive number of pixels", &o->pitch) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (o->pitch < 1.0)
                return sw_cli_usage(S,
                                    "--pitch: %g px is below one pixel (a lenslet must own at "
                                    "least one pixel)",
                                    o->pitch);
            if (o->pitch > SW_CENTROID_MAX_PITCH_PX)
                return sw_cli_usage(S, "--pitch: %g px is above the largest supported (%g px)",
                                    o->pitch, SW_CENTROID_MAX_PITCH_PX);
            o->have_pitch = 1;
            break;
        case OPT_ORIGIN:
            if (sw_cli_opt_pair(S, "--origin", optarg, "X0,Y0 in pixels", &o->x0, &o->y0) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_origin = 1;
            break;
        case OPT_PIXEL:
        case OPT_FOCAL: {
            double v;
            if (sw_cli_opt_double(S, c == OPT_PIXEL ? "--pixel-um" : "--focal-mm", optarg,
                                  SW_CLI_POSITIVE, "a positive length", &v) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_PIXEL)
                o->pixel_um = v, o->have_pixel = 1;
            else
                o->focal_mm = v, o->have_focal = 1;
            break;
        }
        case OPT_THRESHOLD:
            if (sw_cli_opt_double(S, "--threshold", optarg, SW_CLI_ANY, "a number",
                                  &o->threshold) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_threshold = 1;
            break;
        case OPT_FRACTION:
            if (sw_cli_parse_double(optarg, &o->threshold) != 0 || o->threshold < 0 ||
                o->threshold > 1)
                return sw_cli_usage(S, "--threshold-fraction: '%s' is not a fraction in [0, 1]",
                                    optarg);
            o->have_fraction = 1;
            break;
        case OPT_MODE:
            if (strcmp(optarg, "subtract") == 0)
                o->mode = SW_THRESHOLD_SUBTRACT;
            else if (strcmp(optarg, "zero") == 0)
                o->mode = SW_THRESHOLD_ZERO;
            else
                return sw_cli_usage(S, "--threshold-mode: '%s' is not subtract or zero", optarg);
            o->have_mode = 1;
            break;
        case OPT_GAMMA:
            if (sw_cli_opt_double(S, "--gamma", optarg, SW_CLI_POSITIVE, "a positive exponent",
                                  &o->gamma) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_WINDOW:
            if (sw_cli_parse_long(optarg, 0, 65536, &o->window) != 0)
                return sw_cli_usage(S, "--window: '%s' is not a whole number of pixels >= 0",
                                    optarg);
            break;
        case OPT_ALGORITHM:
            if (strcmp(optarg, "pyramid") == 0 || strcmp(optarg, "papycs") == 0)
                o->search = 1, o->algorithm = SW_SEARCH_PAPYCS;
            else if (strcmp(optarg, "com") == 0)
                o->search = 1, o->algorithm = SW_SEARCH_COM;
            else if (strcmp(optarg, "cog") == 0)
                o->search = 0;
            else
                return sw_cli_usage(S, "--algorithm: '%s' is not cog, pyramid or com", optarg);
            break;
        case OPT_DISCARD: o->discard = 1; break;
        case OPT_SATURATION:
            if (strcmp(optarg, "none") == 0)
                o->saturation = SW_CENTROID_NO_SATURATION;
            else if (sw_cli_opt_double(S, "--saturation", optarg, SW_CLI_POSITIVE,
                                       "a positive raw pixel value, or none",
                                       &o->saturation) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_saturation = 1;
            break;
        case OPT_DROP_SATURATED: o->drop_saturated = 1; break;
        case OPT_METHOD:
            if (sw_centroid_method_parse(optarg, &o->method) != SW_OK)
                return sw_cli_usage(S,
                                    "--method: '%s' is not cog, wcog, local, brightest, "
                                    "correlation or quadcell",
                                    optarg);
            o->have_method_opt = 1;
            break;
        case OPT_FWHM:
        case OPT_LOCAL_K:
        case OPT_QUAD_GAIN:
        case OPT_GAIN:
        case OPT_READ_NOISE:
        case OPT_MIN_SNR:
        case OPT_MAX_SHIFT:
        case OPT_EDGE_PX:
        case OPT_EDGE_FRACTION: {
            const int pos = c == OPT_FWHM || c == OPT_QUAD_GAIN || c == OPT_GAIN;
            double *dst = c == OPT_FWHM         ? &o->fwhm
                          : c == OPT_LOCAL_K    ? &o->local_k
                          : c == OPT_QUAD_GAIN  ? &o->quad_gain
                          : c == OPT_GAIN       ? &o->gain
                          : c == OPT_READ_NOISE ? &o->read_noise
                          : c == OPT_MIN_SNR    ? &o->min_snr
                          : c == OPT_MAX_SHIFT  ? &o->max_shift
                          : c == OPT_EDGE_PX    ? &o->edge_px
                                                : &o->edge_fraction;
            const char *name = c == OPT_FWHM         ? "--fwhm"
                               : c == OPT_LOCAL_K    ? "--local-k"
                               : c == OPT_QUAD_GAIN  ? "--quad-gain"
                               : c == OPT_GAIN       ? "--gain"
                               : c == OPT_READ_NOISE ? "--read-noise"
                               : c == OPT_MIN_SNR    ? "--min-snr"
                               : c == OPT_MAX_SHIFT  ? "--max-shift"
                               : c == OPT_EDGE_PX    ? "--edge-px"
                                                     : "--edge-fraction";
            if (sw_cli_opt_double(S, name, optarg, pos ? SW_CLI_POSITIVE : SW_CLI_NONNEG,
                                  pos ? "a positive number" : "a number >= 0", dst) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_EDGE_FRACTION && o->edge_fraction > 1.0)
                return sw_cli_usage(S, "--edge-fraction: '%s' is not a fraction in 0..1", optarg);
            o->have_method_opt = 1;
            break;
        }
        case OPT_ITERATIONS:
            if (sw_cli_opt_int(S, "--iterations", optarg, 0, 100, &o->iterations) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_method_opt = 1;
            break;
        case OPT_BRIGHTEST:
            if (sw_cli_opt_int(S, "--brightest", optarg, 1, 16384, &o->brightest) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_method_opt = 1;
            break;
        case OPT_SEARCH:
            if (sw_cli_opt_int(S, "--search", optarg, 1, 64, &o->search_px) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_method_opt = 1;
            break;
        case OPT_PEAK_BORDER:
            o->peak_border = 1;
            o->have_method_opt = 1;
            break;
        case OPT_PATH:
            if (sw_centroid_path_parse(optarg, &o->path) != SW_OK)
                return sw_cli_usage(S, "--path: '%s' is not auto, host, device, copy or mapped",
                                    optarg);
            o->have_path = 1;
            break;
        case OPT_MASK:
        case OPT_LUT:
        case OPT_DARK:
        case OPT_FLAT:
        case OPT_REFERENCE:
        case OPT_SLOPES:
        case 'o':
            if (sw_cli_opt_file(S, sw_cli_option_name(argv), optarg,
                                c == OPT_MASK        ? &o->mask
                                : c == OPT_LUT       ? &o->lut
                                : c == OPT_DARK      ? &o->dark
                                : c == OPT_FLAT      ? &o->flat
                                : c == OPT_REFERENCE ? &o->reference
                                : c == OPT_SLOPES    ? &o->slopes
                                                     : &o->out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_INTERLEAVED: o->interleaved = 1; break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sw_cmd_centroid_help(stdout); return -1;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return sw_cli_usage(S, "no IMAGE given");
    o->image = argv[optind];
    if (optind + 1 < argc)
        return sw_cli_usage(S, "unexpected argument '%s' (one IMAGE, cubes hold several frames)",
                            argv[optind + 1]);

    o->reference_csv = o->reference && sw_cli_ends_with(o->reference, ".csv");
    if (o->geometry_auto) {
        if (o->have_grid || o->have_pitch || o->have_origin)
            return sw_cli_usage(S, "--geometry auto finds the grid: drop --grid, --pitch and "
                                   "--origin (or use --geometry manual)");
        if (!o->reference || o->reference_csv)
            return sw_cli_usage(S, "--geometry auto needs a --reference image (FITS or PGM)");
    } else if (!o->have_pitch) {
        return sw_cli_usage(S, "give the lenslet grid: --pitch PX (with --grid and --origin), "
                               "or --geometry auto with a --reference image");
    }
    if (o->search) {
        const char *cond = o->lut               ? "--lut"
                           : o->dark            ? "--dark"
                           : o->flat            ? "--flat"
                           : o->have_threshold  ? "--threshold"
                           : o->have_fraction   ? "--threshold-fraction"
                           : o->have_mode       ? "--threshold-mode"
                           : o->gamma != 1.0    ? "--gamma"
                           : o->window != 0     ? "--window"
                           : o->have_path       ? "--path"
                           : o->interleaved     ? "--interleaved"
                           : o->have_saturation ? "--saturation"
                           : o->drop_saturated  ? "--drop-saturated"
                           : o->have_method_opt ? "--method and its options"
                                                : NULL;
        if (cond)
            return sw_cli_usage(S,
                                "%s goes with --algorithm cog (pyramid and com search the "
                                "pixels as they are)",
                                cond);
    } else if (o->discard) {
        return sw_cli_usage(S, "--discard goes with --algorithm pyramid or com");
    }
    if (o->have_threshold && o->have_fraction)
        return sw_cli_usage(S, "give --threshold or --threshold-fraction, not both");
    if (!o->search && o->method == SW_CENTROID_METHOD_CORRELATION &&
        (!o->reference || o->reference_csv))
        return sw_cli_usage(S, "--method correlation needs --reference IMAGE (the template)");
    if (o->method == SW_CENTROID_METHOD_WCOG && !(o->fwhm > 0))
        return sw_cli_usage(S, "--method wcog needs --fwhm PX (the weight's FWHM)");
    if (o->method == SW_CENTROID_METHOD_QUADCELL && !(o->fwhm > 0) && !(o->quad_gain > 0))
        return sw_cli_usage(S, "--method quadcell needs --fwhm PX (the spot's) or --quad-gain PX");
    if (o->method == SW_CENTROID_METHOD_BRIGHTEST && o->brightest < 1)
        return sw_cli_usage(S, "--method brightest needs --brightest N");
    if (o->read_noise > 0 && !(o->gain > 0))
        return sw_cli_usage(S, "--read-noise needs --gain");
    if (o->have_mode && !o->have_threshold && !o->have_fraction)
        return sw_cli_usage(S, "--threshold-mode needs --threshold or --threshold-fraction");
    if (o->json && (!o->out || strcmp(o->out, "-") == 0))
        return sw_cli_usage(S, "--json prints the report on standard output: give --out FILE "
                               "for the centroids");
    if (o->slopes && o->out && strcmp(o->slopes, o->out) == 0 && strcmp(o->out, "-") != 0)
        return sw_cli_usage(S, "--slopes and --out name the same file");
    if (o->slopes && strcmp(o->slopes, "-") == 0 && (!o->out || strcmp(o->out, "-") == 0))
        return sw_cli_usage(S, "only one of --out and --slopes can go to standard output");
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ files */

/* FITS or PGM frames; 32-bit integer frames become float (the centroid takes u8, u16, f32). */
static int read_frames(sw_context *ctx, const char *what, const char *path, sw_frames *out)
{
    return sw_cli_read_frames(ctx, SUB, what, path, 1, out);
}

/* One frame of the frame size as a tight row-major float array (dark, flat). */
static int read_float_frame(sw_context *ctx, const char *what, const char *path, int32_t w,
                            int32_t h, float **out)
{
    sw_frames fr;
    int rc = read_frames(ctx, what, path, &fr);
    if (rc != SW_EXIT_OK)
        return rc;
    const sw_image *img = &fr.frames[0];
    if (fr.count != 1 || img->width != w || img->height != h) {
        rc = fr.count != 1
                 ? sw_cli_fail(SUB, "%s '%s' holds %d frames; give one", what, path, (int)fr.count)
                 : sw_cli_fail(SUB, "%s '%s' is %dx%d, the image %dx%d", what, path,
                               (int)img->width, (int)img->height, (int)w, (int)h);
        sw_frames_free(&fr);
        return rc;
    }
    float *a = malloc(sizeof(float) * (size_t)w * (size_t)h);
    sw_image f32;
    memset(&f32, 0, sizeof f32);
    sw_status st = a ? sw_image_alloc(NULL, w, h, SW_PIX_F32, &f32) : SW_ENOMEM;
    if (st == SW_OK)
        st = sw_image_convert(NULL, img, &f32, 1.0, 0.0, NULL);
    if (st == SW_OK)
        for (int32_t y = 0; y < h; y++)
            memcpy(a + (size_t)y * w, sw_image_row(&f32, y), sizeof(float) * (size_t)w);
    sw_image_free(&f32);
    sw_frames_free(&fr);
    if (st != SW_OK) {
        free(a);
        return sw_cli_fail(SUB, "%s '%s': %s", what, path, sw_cli_lib_error(NULL, st));
    }
    *out = a;
    return SW_EXIT_OK;
}

/* A column of a table by name, or a failure naming the file. */
static int need_column(const sw_table *t, const char *name, const char *what, const char *path,
                       int32_t *col)
{
    *col = sw_table_column(t, name);
    if (*col < 0)
        return sw_cli_fail(SUB, "%s '%s' has no column '%s'", what, path, name);
    return SW_EXIT_OK;
}

/* The look-up table: one column 'value' of 256 or 65536 rows, matching the frame type. */
static int read_lut(sw_context *ctx, const char *path, sw_pixel_type type, float **out)
{
    sw_table t;
    sw_status st = sw_csv_read(ctx, path, &t);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    int32_t c;
    int rc = need_column(&t, "value", "look-up table", path, &c);
    const int64_t want = type == SW_PIX_U8 ? 256 : type == SW_PIX_U16 ? 65536 : 0;
    if (rc == SW_EXIT_OK && want == 0)
        rc = sw_cli_fail(SUB,
                         "look-up table '%s': the image has %s pixels; a table needs 8 or "
                         "16-bit integer frames",
                         path, sw_pixel_type_string(type));
    else if (rc == SW_EXIT_OK && t.nrows != want)
        rc = sw_cli_fail(SUB,
                         "look-up table '%s' has %lld rows; %s frames need %lld (one per raw "
                         "value)",
                         path, (long long)t.nrows, sw_pixel_type_string(type), (long long)want);
    float *a = NULL;
    if (rc == SW_EXIT_OK && !(a = malloc(sizeof(float) * (size_t)want)))
        rc = sw_cli_fail(SUB, "out of memory");
    for (int64_t i = 0; rc == SW_EXIT_OK && i < want; i++) {
        const double v = t.cols[c][i];
        if (!isfinite(v) || fabs(v) > 3e38)
            rc = sw_cli_fail(SUB, "look-up table '%s': row %lld value %g is not a finite float",
                             path, (long long)i + 1, v);
        else
            a[i] = (float)v;
    }
    sw_table_free(&t);
    if (rc != SW_EXIT_OK) {
        free(a);
        return rc;
    }
    *out = a;
    return SW_EXIT_OK;
}

/*
 * Reads a per-lenslet table with columns ix, iy and `nv` value columns into vals[j][l]
 * (l = iy * nx + ix). exact: every lenslet of the grid must appear once; otherwise any subset,
 * each at most once (seen[l] = 1 for those listed). One clear line on any mismatch.
 */
static int read_lenslet_table(sw_context *ctx, const char *what, const char *path, int32_t nx,
                              int32_t ny, int exact, const char *const *names, int nv,
                              double **vals, uint8_t *seen)
{
    sw_table t;
    sw_status st = sw_csv_read(ctx, path, &t);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    int32_t cix = -1, ciy = -1, cv[4] = {-1, -1, -1, -1};
    int rc = need_column(&t, "ix", what, path, &cix);
    if (rc == SW_EXIT_OK)
        rc = need_column(&t, "iy", what, path, &ciy);
    for (int j = 0; j < nv && rc == SW_EXIT_OK; j++)
        rc = need_column(&t, names[j], what, path, &cv[j]);
    const int32_t cframe = sw_table_column(&t, "frame");
    const int64_t nl = (int64_t)nx * ny;
    memset(seen, 0, (size_t)nl);
    for (int64_t r = 0; rc == SW_EXIT_OK && r < t.nrows; r++) {
        const double fx = t.cols[cix][r], fy = t.cols[ciy][r];
        if (cframe >= 0 && t.cols[cframe][r] != t.cols[cframe][0]) {
            rc = sw_cli_fail(SUB, "%s '%s' holds several frames (column 'frame'); give one", what,
                             path);
            break;
        }
        if (!(fx == floor(fx)) || !(fy == floor(fy)) || fx < 0 || fy < 0 || fx >= nx || fy >= ny) {
            rc =
                sw_cli_fail(SUB, "%s '%s', data row %lld: lenslet (%g,%g) is not in the %dx%d grid",
                            what, path, (long long)r + 1, fx, fy, (int)nx, (int)ny);
            break;
        }
        const int64_t l = (int64_t)fy * nx + (int64_t)fx;
        if (seen[l]) {
            rc = sw_cli_fail(SUB, "%s '%s', data row %lld: lenslet (%d,%d) is listed twice", what,
                             path, (long long)r + 1, (int)fx, (int)fy);
            break;
        }
        seen[l] = 1;
        for (int j = 0; j < nv; j++)
            vals[j][l] = t.cols[cv[j]][r];
    }
    if (rc == SW_EXIT_OK && exact && t.nrows != nl) {
        int64_t miss = 0;
        while (miss < nl && seen[miss])
            miss++;
        rc = sw_cli_fail(SUB,
                         "%s '%s' lists %lld of the %lld lenslets of the %dx%d grid (lenslet "
                         "(%d,%d) is missing): it must list each lenslet once",
                         what, path, (long long)t.nrows, (long long)nl, (int)nx, (int)ny,
                         (int)(miss % nx), (int)(miss / nx));
    }
    sw_table_free(&t);
    return rc;
}

/* ------------------------------------------------------------------ output files */

/* A float cell: shortest round-trip form, "nan" for NaN. */
static void put_num(FILE *f, double v)
{
    if (isnan(v))
        fputs(",nan", f);
    else
        fprintf(f, ",%.9g", v);
}

/* ------------------------------------------------------------------ the run */

typedef struct run_state {
    sw_context *ctx;
    sw_frames frames, ref_frames;
    sw_sh_geometry geom;
    uint8_t *mask; /* nl flags, NULL: all lenslets */
    float *dark, *flat, *lut;
    float *corr; /* --method correlation: the --reference image as floats */
    sw_centroid_plan *plan;
    sw_centroid_result res;
    sw_image batch, batch_dev;
    double *ref_x, *ref_y;
    int32_t *slope_k; /* nl: slope index of each lenslet, -1 outside the mask */
    sw_cli_out out, slopes;
} run_state;

typedef struct report {
    int32_t frames, width, height;
    sw_pixel_type type;
    int32_t nslopes;
    int mask_from_reference;
    int32_t ref_invalid;   /* lenslets of the reference that are invalid (left out of the mask) */
    int64_t *valid;        /* per frame: valid lenslets */
    int64_t *saturated;    /* per frame: saturated lenslets (cog) */
    uint8_t *sat_ever;     /* per lenslet: saturated in some frame (cog) */
    int64_t sat_lenslets;  /* lenslets saturated in at least one frame */
    double sat_level;      /* the plan's level in force, -1: none checked */
    int32_t ref_saturated; /* lenslets saturated in the reference image; -1: no such image */
    double sum_dx, sum_dy, sum_dx2, sum_dy2;
    int64_t nslope_valid;
    sw_centroid_path path;
    sw_backend backend;
    double read_ms, geometry_ms, plan_ms, reference_ms, run_ms, write_ms, kernel_us;
} report;

static void state_free(run_state *s)
{
    sw_cli_out_close(SUB, &s->out, 0);
    sw_cli_out_close(SUB, &s->slopes, 0);
    sw_centroid_result_free(&s->res);
    sw_centroid_destroy(s->plan);
    sw_image_free(&s->batch);
    sw_image_free(&s->batch_dev);
    sw_frames_free(&s->frames);
    sw_frames_free(&s->ref_frames);
    free(s->corr);
    free(s->mask);
    free(s->dark);
    free(s->flat);
    free(s->lut);
    free(s->ref_x);
    free(s->ref_y);
    free(s->slope_k);
    sw_context_destroy(s->ctx);
}

/* The manual grid: defaults as 'spotwave sim sh' resolves them (as many lenslets as fit, the
 * grid centred in whole pixels). */
static void manual_geometry(const centroid_opts *o, int32_t w, int32_t h, sw_sh_geometry *g)
{
    g->pitch_px = o->pitch;
    g->nx = o->have_grid ? o->nx : (int32_t)floor((double)w / o->pitch);
    g->ny = o->have_grid ? o->ny : (int32_t)floor((double)h / o->pitch);
    g->x0 = o->have_origin ? o->x0 : floor(0.5 * ((double)w - o->pitch * g->nx));
    g->y0 = o->have_origin ? o->y0 : floor(0.5 * ((double)h - o->pitch * g->ny));
}

/* (Re)creates the plan for frames of the image's type, with the current mask. */
static int make_plan(run_state *s, const centroid_opts *o, report *r, int32_t max_frames)
{
    sw_centroid_destroy(s->plan);
    s->plan = NULL;
    sw_centroid_result_free(&s->res);
    sw_centroid_params p;
    sw_centroid_params_default(&p);
    p.geometry = s->geom;
    p.geometry.valid = s->mask;
    p.width = r->width;
    p.height = r->height;
    p.type = r->type;
    p.max_frames = max_frames;
    p.path = o->path;
    p.dark = s->dark;
    p.flat = s->flat;
    p.lut = s->lut;
    if (o->have_threshold || o->have_fraction) {
        p.threshold_mode = o->have_mode ? o->mode : SW_THRESHOLD_SUBTRACT;
        p.threshold_kind = o->have_fraction ? SW_THRESHOLD_FRACTION : SW_THRESHOLD_ABSOLUTE;
        p.threshold = o->threshold;
    }
    p.gamma = o->gamma;
    p.window = (int32_t)o->window;
    p.slope_layout = o->interleaved ? SW_SLOPES_INTERLEAVED : SW_SLOPES_BLOCKS;
    p.saturation = o->have_saturation ? o->saturation : 0.0;
    p.drop_saturated = o->drop_saturated;
    p.method = o->method;
    p.fwhm_px = o->fwhm;
    p.wcog_iterations = o->iterations;
    p.local_k = o->local_k;
    p.brightest_n = o->brightest;
    p.corr_search_px = o->search_px;
    p.quad_gain_px = o->quad_gain;
    p.gain_e_per_adu = o->gain;
    p.read_noise_e = o->read_noise;
    p.min_snr = o->min_snr;
    p.max_shift_px = o->max_shift;
    p.peak_border = o->peak_border;
    p.edge_px = o->edge_px;
    p.edge_fraction = o->edge_fraction;
    if (o->method == SW_CENTROID_METHOD_CORRELATION) {
        if (!s->corr) { /* the template: the reference image's pixels as floats */
            const sw_image *ref = &s->ref_frames.frames[0];
            if (!(s->corr = malloc((size_t)ref->width * (size_t)ref->height * sizeof(float))))
                return sw_cli_fail(SUB, "out of memory");
            for (int32_t y = 0; y < ref->height; y++) {
                const char *row = (const char *)ref->data + (size_t)y * ref->stride;
                for (int32_t x = 0; x < ref->width; x++) {
                    float v;
                    if (ref->type == SW_PIX_U8)
                        v = ((const uint8_t *)row)[x];
                    else if (ref->type == SW_PIX_U16)
                        v = ((const uint16_t *)row)[x];
                    else
                        memcpy(&v, row + (size_t)x * sizeof(float), sizeof v);
                    s->corr[(size_t)y * ref->width + x] = v;
                }
            }
        }
        p.corr_reference = s->corr;
    }
    sw_status st = sw_centroid_create(s->ctx, &p, &s->plan);
    if (st == SW_OK)
        st = sw_centroid_result_alloc(s->plan, max_frames, SW_MEM_HOST, &s->res);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(s->ctx, st));
    sw_centroid_enable_timing(s->plan, 1);
    r->sat_level = sw_centroid_plan_saturation(s->plan);
    return SW_EXIT_OK;
}

/* The batch buffers: max_frames frames stacked vertically, in the memory the plan's path
 * takes (a host staging image, plus a device one for the device path). */
static int make_batch(run_state *s, const report *r, int32_t max_frames)
{
    sw_image_free(&s->batch);
    sw_image_free(&s->batch_dev);
    const sw_centroid_path path = sw_centroid_plan_path(s->plan);
    sw_status st = sw_image_alloc(path == SW_CENTROID_HOST ? NULL : s->ctx, r->width,
                                  r->height * max_frames, r->type, &s->batch);
    if (st == SW_OK && path == SW_CENTROID_DEVICE)
        st =
            sw_image_alloc_device(s->ctx, r->width, r->height * max_frames, r->type, &s->batch_dev);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(s->ctx, st));
    return SW_EXIT_OK;
}

/* Runs frames [f0, f0 + n) of `frames` through the plan into s->res. */
static int run_batch(run_state *s, const sw_frames *frames, int32_t f0, int32_t n, report *r)
{
    const int32_t h = r->height;
    const size_t row_bytes = (size_t)r->width * sw_pixel_size(r->type);
    for (int32_t i = 0; i < n; i++) {
        const sw_image *src = &frames->frames[f0 + i];
        for (int32_t y = 0; y < h; y++)
            memcpy(sw_image_row(&s->batch, i * h + y), sw_image_row(src, y), row_bytes);
    }
    sw_image in = s->batch;
    in.height = n * h;
    sw_status st = SW_OK;
    double t0 = sw_cli_now();
    if (s->batch_dev.data) {
        sw_image dev = s->batch_dev;
        dev.height = n * h;
        st = sw_image_copy(s->ctx, &in, &dev);
        in = dev;
    }
    if (st == SW_OK)
        st = sw_centroid_run(s->plan, &in, &s->res);
    if (st == SW_OK)
        st = sw_context_synchronize(s->ctx);
    r->run_ms += 1e3 * (sw_cli_now() - t0);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(s->ctx, st));
    const double k = sw_centroid_kernel_us(s->plan);
    if (k >= 0)
        r->kernel_us = (r->kernel_us < 0 ? 0 : r->kernel_us) + k;
    return SW_EXIT_OK;
}

/* The reference from an image: its centroids under the same grid and conditioning. Lenslets
 * invalid in the reference leave the mask (or, with --mask keeping them, fail). */
static int reference_from_image(run_state *s, const centroid_opts *o, report *r)
{
    int rc = run_batch(s, &s->ref_frames, 0, 1, r);
    if (rc != SW_EXIT_OK)
        return rc;
    const int32_t nl = s->geom.nx * s->geom.ny;
    r->ref_saturated = 0;
    for (int32_t l = 0; l < nl; l++)
        r->ref_saturated += s->res.saturated[l] != 0;
    for (int32_t l = 0; l < nl; l++) {
        const int in_mask = !s->mask || s->mask[l];
        if (s->res.valid[l]) {
            s->ref_x[l] = s->res.x[l];
            s->ref_y[l] = s->res.y[l];
            continue;
        }
        if (in_mask && o->mask)
            return sw_cli_fail(SUB,
                               "reference image '%s': lenslet (%d,%d) has no valid centroid (%s) "
                               "but --mask keeps it",
                               o->reference, (int)(l % s->geom.nx), (int)(l / s->geom.nx),
                               s->res.saturated[l] && o->drop_saturated
                                   ? "saturated, and --drop-saturated drops it"
                                   : "no light after conditioning");
        s->ref_x[l] = s->ref_y[l] = NAN;
    }
    return SW_EXIT_OK;
}

/* The reference from a CSV: every lenslet once; nan rows are invalid reference lenslets. */
static int reference_from_csv(run_state *s, const centroid_opts *o)
{
    static const char *const names[2] = {"x_px", "y_px"};
    double *vals[2] = {s->ref_x, s->ref_y};
    const int32_t nl = s->geom.nx * s->geom.ny;
    uint8_t *seen = malloc((size_t)nl);
    if (!seen)
        return sw_cli_fail(SUB, "out of memory");
    int rc = read_lenslet_table(s->ctx, "reference CSV", o->reference, s->geom.nx, s->geom.ny, 1,
                                names, 2, vals, seen);
    free(seen);
    for (int32_t l = 0; rc == SW_EXIT_OK && l < nl; l++) {
        const int finite = isfinite(s->ref_x[l]) && isfinite(s->ref_y[l]);
        if (!finite && (isinf(s->ref_x[l]) || isinf(s->ref_y[l])))
            rc = sw_cli_fail(SUB, "reference CSV '%s': lenslet (%d,%d) has an infinite position",
                             o->reference, (int)(l % s->geom.nx), (int)(l / s->geom.nx));
        else if (!finite && o->mask && s->mask[l])
            rc = sw_cli_fail(SUB,
                             "reference CSV '%s': lenslet (%d,%d) has no position (nan) but "
                             "--mask keeps it",
                             o->reference, (int)(l % s->geom.nx), (int)(l / s->geom.nx));
        else if (!finite)
            s->ref_x[l] = s->ref_y[l] = NAN;
    }
    return rc;
}

/* Leaves the reference's invalid lenslets out of the mask; 1 when the mask changed. */
static int mask_from_reference(run_state *s, report *r)
{
    const int32_t nl = s->geom.nx * s->geom.ny;
    int changed = 0;
    for (int32_t l = 0; l < nl; l++) {
        if (!isnan(s->ref_x[l]))
            continue;
        if (!s->mask || s->mask[l])
            r->ref_invalid++;
        if (!s->mask) {
            s->mask = malloc((size_t)nl);
            if (!s->mask)
                return -1;
            memset(s->mask, 1, (size_t)nl);
        }
        if (s->mask[l]) {
            s->mask[l] = 0;
            changed = 1;
        }
    }
    return changed;
}

/* Writes the rows of frames [f0, f0 + n) and gathers the statistics. */
static void write_rows(run_state *s, const centroid_opts *o, int32_t f0, int32_t n, report *r)
{
    const int32_t nx = s->geom.nx, nl = nx * s->geom.ny, ns = r->nslopes;
    const int multi = r->frames > 1, with_ref = o->reference != NULL;
    const int rad = o->have_pixel && o->have_focal;
    const double px_to_rad = s->geom.pixel_um / (s->geom.focal_mm * 1000.0);
    for (int32_t i = 0; i < n; i++) {
        const int32_t f = f0 + i;
        const float *x = s->res.x + (size_t)i * nl, *y = s->res.y + (size_t)i * nl;
        const float *in = s->res.intensity + (size_t)i * nl;
        const uint8_t *v = s->res.valid + (size_t)i * nl;
        const uint8_t *sat = s->res.saturated + (size_t)i * nl;
        const uint8_t *stat = s->res.status + (size_t)i * nl;
        const float *xv = s->res.x_var + (size_t)i * nl, *yv = s->res.y_var + (size_t)i * nl;
        const float *sn = s->res.snr + (size_t)i * nl;
        const float *sl = s->res.slopes + (size_t)i * 2 * ns;
        for (int32_t l = 0; l < nl; l++) {
            r->valid[f] += v[l] != 0;
            r->saturated[f] += sat[l] != 0;
            if (sat[l] && !r->sat_ever[l]) {
                r->sat_ever[l] = 1;
                r->sat_lenslets++;
            }
            FILE *out = s->out.f;
            if (multi)
                fprintf(out, "%d,", (int)f);
            fprintf(out, "%d,%d", (int)(l % nx), (int)(l / nx));
            put_num(out, v[l] ? x[l] : NAN);
            put_num(out, v[l] ? y[l] : NAN);
            put_num(out, in[l]);
            fprintf(out, ",%d", v[l] ? 1 : 0);
            if (with_ref) { /* the library's slopes, as in the --slopes file */
                const int32_t k = s->slope_k[l];
                const int ok = v[l] && k >= 0;
                put_num(out, ok ? (o->interleaved ? sl[2 * k] : sl[k]) : NAN);
                put_num(out, ok ? (o->interleaved ? sl[2 * k + 1] : sl[ns + k]) : NAN);
            }
            fprintf(out, ",%d", sat[l] ? 1 : 0);
            fprintf(out, ",%d", (int)stat[l]);
            put_num(out, xv[l]);
            put_num(out, yv[l]);
            put_num(out, sn[l]);
            fputc('\n', out);
        }
        /* The library's slope vector: lenslets of the mask, in slope order. */
        for (int32_t k = 0; k < ns; k++) {
            const int32_t l = sw_centroid_plan_slope_lenslet(s->plan, k);
            const double dx = o->interleaved ? sl[2 * k] : sl[k];
            const double dy = o->interleaved ? sl[2 * k + 1] : sl[ns + k];
            if (v[l]) {
                r->sum_dx += dx;
                r->sum_dy += dy;
                r->sum_dx2 += dx * dx;
                r->sum_dy2 += dy * dy;
                r->nslope_valid++;
            }
            if (!s->slopes.f)
                continue;
            FILE *out = s->slopes.f;
            if (multi)
                fprintf(out, "%d,", (int)f);
            fprintf(out, "%d,%d", (int)(l % nx), (int)(l / nx));
            put_num(out, v[l] ? dx : NAN);
            put_num(out, v[l] ? dy : NAN);
            if (rad) {
                put_num(out, v[l] ? dx * px_to_rad : NAN);
                put_num(out, v[l] ? dy * px_to_rad : NAN);
            }
            fputc('\n', out);
        }
    }
}

static int run_centroid(const sw_cli_globals *gl, const centroid_opts *o, report *r,
                        sw_sh_geometry *geom)
{
    run_state s;
    memset(&s, 0, sizeof s);
    int rc = sw_cli_context(gl, SUB, &s.ctx);
    if (rc != SW_EXIT_OK)
        return rc;
    r->backend = sw_context_backend(s.ctx);
    r->kernel_us = -1.0;
    sw_status st;

    /* Images. */
    double t0 = sw_cli_now();
    if ((rc = read_frames(s.ctx, "image", o->image, &s.frames)) != SW_EXIT_OK)
        goto done;
    r->frames = s.frames.count;
    r->width = s.frames.frames[0].width;
    r->height = s.frames.frames[0].height;
    r->type = s.frames.frames[0].type;
    if (o->reference && !o->reference_csv) {
        if ((rc = read_frames(s.ctx, "reference image", o->reference, &s.ref_frames)) != SW_EXIT_OK)
            goto done;
        if (s.ref_frames.count != 1) {
            rc = sw_cli_fail(SUB, "reference image '%s' holds %d frames; give one", o->reference,
                             (int)s.ref_frames.count);
            goto done;
        }
        const sw_image *ref = &s.ref_frames.frames[0];
        if (ref->width != r->width || ref->height != r->height) {
            rc = sw_cli_fail(SUB, "reference image '%s' is %dx%d, the image %dx%d", o->reference,
                             (int)ref->width, (int)ref->height, (int)r->width, (int)r->height);
            goto done;
        }
        if (ref->type != r->type) {
            rc = sw_cli_fail(SUB,
                             "reference image '%s' has %s pixels, the image %s: give both in the "
                             "same pixel type",
                             o->reference, sw_pixel_type_string(ref->type),
                             sw_pixel_type_string(r->type));
            goto done;
        }
    }
    r->read_ms = 1e3 * (sw_cli_now() - t0);

    /* The grid. */
    sw_sh_geometry_default(&s.geom);
    s.geom.pixel_um = o->have_pixel ? o->pixel_um : DEF_PIXEL_UM;
    s.geom.focal_mm = o->have_focal ? o->focal_mm : DEF_FOCAL_MM;
    if (o->geometry_auto) {
        t0 = sw_cli_now();
        st = sw_centroid_find_geometry(s.ctx, &s.ref_frames.frames[0], &s.geom);
        r->geometry_ms = 1e3 * (sw_cli_now() - t0);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "reference image '%s': %s", o->reference,
                             sw_cli_lib_error(s.ctx, st));
            goto done;
        }
    } else {
        manual_geometry(o, r->width, r->height, &s.geom);
        if (s.geom.nx < 1 || s.geom.ny < 1) {
            rc = sw_cli_fail(SUB, "a lenslet of %g px does not fit the %dx%d image", o->pitch,
                             (int)r->width, (int)r->height);
            goto done;
        }
    }
    if (!o->have_origin &&
        (s.geom.pitch_px * s.geom.nx > r->width || s.geom.pitch_px * s.geom.ny > r->height)) {
        rc = sw_cli_fail(SUB,
                         "image '%s': a grid of %dx%d lenslets of %g px does not fit its %dx%d "
                         "pixels",
                         o->image, s.geom.nx, s.geom.ny, s.geom.pitch_px, r->width, r->height);
        goto done;
    }
    if ((st = sw_sh_geometry_check(s.ctx, &s.geom, r->width, r->height)) != SW_OK) {
        rc = sw_cli_fail(SUB, "image '%s': %s", o->image, sw_cli_lib_error(s.ctx, st));
        goto done;
    }
    const int32_t nl = s.geom.nx * s.geom.ny;

    /* Mask, conditioning, reference arrays. */
    if (o->mask) {
        double *vals[1];
        static const char *const names[1] = {"valid"};
        s.mask = malloc((size_t)nl);
        uint8_t *seen = malloc((size_t)nl);
        vals[0] = malloc(sizeof(double) * (size_t)nl);
        if (!s.mask || !seen || !vals[0]) {
            free(seen);
            free(vals[0]);
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
        rc = read_lenslet_table(s.ctx, "mask", o->mask, s.geom.nx, s.geom.ny, 0, names, 1, vals,
                                seen);
        for (int32_t l = 0; rc == SW_EXIT_OK && l < nl; l++) {
            if (seen[l] && vals[0][l] != 0.0 && vals[0][l] != 1.0)
                rc = sw_cli_fail(SUB, "mask '%s': lenslet (%d,%d) has valid = %g (0 or 1)", o->mask,
                                 l % s.geom.nx, l / s.geom.nx, vals[0][l]);
            s.mask[l] = !seen[l] || vals[0][l] != 0.0;
        }
        free(seen);
        free(vals[0]);
        if (rc != SW_EXIT_OK)
            goto done;
    }
    if (o->dark && (rc = read_float_frame(s.ctx, "dark frame", o->dark, r->width, r->height,
                                          &s.dark)) != SW_EXIT_OK)
        goto done;
    if (o->flat && (rc = read_float_frame(s.ctx, "flat field", o->flat, r->width, r->height,
                                          &s.flat)) != SW_EXIT_OK)
        goto done;
    if (o->lut && (rc = read_lut(s.ctx, o->lut, r->type, &s.lut)) != SW_EXIT_OK)
        goto done;
    if (!(s.ref_x = malloc(sizeof(double) * (size_t)nl)) ||
        !(s.ref_y = malloc(sizeof(double) * (size_t)nl))) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }

    /* The plan: batches of up to MAX_BATCH frames (and 65536 rows). */
    int32_t batch = r->frames < MAX_BATCH ? r->frames : MAX_BATCH;
    if ((int64_t)batch * r->height > SW_IMAGE_MAX_DIM)
        batch = SW_IMAGE_MAX_DIM / r->height;
    if (batch < 1)
        batch = 1;
    t0 = sw_cli_now();
    if ((rc = make_plan(&s, o, r, batch)) != SW_EXIT_OK ||
        (rc = make_batch(&s, r, batch)) != SW_EXIT_OK)
        goto done;
    r->plan_ms = 1e3 * (sw_cli_now() - t0);

    /* The reference. */
    if (o->reference) {
        t0 = sw_cli_now();
        rc = o->reference_csv ? reference_from_csv(&s, o) : reference_from_image(&s, o, r);
        if (rc != SW_EXIT_OK)
            goto done;
        const int changed = mask_from_reference(&s, r);
        if (changed < 0) {
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
        if (changed) { /* the slopes cover the new mask: a new plan */
            r->mask_from_reference = 1;
            if ((rc = make_plan(&s, o, r, batch)) != SW_EXIT_OK)
                goto done;
        }
        /* Masked-out lenslets keep a finite placeholder (their slopes are not computed). */
        for (int32_t l = 0; l < nl; l++)
            if (isnan(s.ref_x[l]))
                sw_sh_reference(&s.geom, l % s.geom.nx, l / s.geom.nx, &s.ref_x[l], &s.ref_y[l]);
        if ((st = sw_centroid_set_reference(s.plan, s.ref_x, s.ref_y)) != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(s.ctx, st));
            goto done;
        }
        r->reference_ms = 1e3 * (sw_cli_now() - t0);
        r->run_ms = 0.0;
        r->kernel_us = -1.0;
    }
    r->nslopes = sw_centroid_plan_slopes(s.plan);
    r->path = sw_centroid_plan_path(s.plan);
    if (!(s.slope_k = malloc(sizeof(int32_t) * (size_t)nl))) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    for (int32_t l = 0; l < nl; l++)
        s.slope_k[l] = -1;
    for (int32_t k = 0; k < r->nslopes; k++)
        s.slope_k[sw_centroid_plan_slope_lenslet(s.plan, k)] = k;

    /* Run and write. */
    if (!(r->valid = calloc((size_t)r->frames, sizeof *r->valid)) ||
        !(r->saturated = calloc((size_t)r->frames, sizeof *r->saturated)) ||
        !(r->sat_ever = calloc((size_t)nl, 1))) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    for (int32_t f = 1; f < r->frames; f++) {
        const sw_image *a = &s.frames.frames[f];
        if (a->width != r->width || a->height != r->height || a->type != r->type) {
            rc = sw_cli_fail(SUB, "image '%s': frame %d differs from frame 0", o->image, (int)f);
            goto done;
        }
    }
    if ((rc = sw_cli_out_open(SUB, &s.out, o->out)) != SW_EXIT_OK)
        goto done;
    if (o->slopes && (rc = sw_cli_out_open(SUB, &s.slopes, o->slopes)) != SW_EXIT_OK)
        goto done;
    const int multi = r->frames > 1;
    fprintf(s.out.f, "%six,iy,x_px,y_px,intensity,valid%s,saturated,status,x_var,y_var,snr\n",
            multi ? "frame," : "", o->reference ? ",dx_px,dy_px" : "");
    if (s.slopes.f)
        fprintf(s.slopes.f, "%six,iy,dx_px,dy_px%s\n", multi ? "frame," : "",
                o->have_pixel && o->have_focal ? ",dx_rad,dy_rad" : "");
    double write_s = 0.0;
    for (int32_t f0 = 0; f0 < r->frames; f0 += batch) {
        const int32_t n = r->frames - f0 < batch ? r->frames - f0 : batch;
        if ((rc = run_batch(&s, &s.frames, f0, n, r)) != SW_EXIT_OK)
            goto done;
        t0 = sw_cli_now();
        write_rows(&s, o, f0, n, r);
        write_s += sw_cli_now() - t0;
    }
    t0 = sw_cli_now();
    if ((rc = sw_cli_out_close(SUB, &s.out, 1)) != SW_EXIT_OK ||
        (rc = sw_cli_out_close(SUB, &s.slopes, 1)) != SW_EXIT_OK)
        goto done;
    r->write_ms = 1e3 * (write_s + sw_cli_now() - t0);
    rc = SW_EXIT_OK;
done:
    *geom = s.geom;
    geom->valid = NULL; /* the mask goes with the state */
    state_free(&s);
    return rc;
}

/* ------------------------------------------------------------------ the search (pyramid, com) */

/*
 * --algorithm pyramid|com: the spots of the grid's lenslets searched by search.h (Mompean et al.
 * 2019 Sec. 3.2.1 PAPYCS, Sec. 3.2.3 centre of mass) with windows of the pitch rounded down,
 * started at the reference centroids: those of the reference image (measured by the same algorithm
 * from the lenslets' optical axes, never discarded; a spot with less than 1 % of the median
 * intensity of the spots found counts as none, as in sw_aberrometry_reference), of the reference
 * CSV, or, without a reference, the optical axes themselves (geometry.h). Lenslets out of the mask
 * (or without a reference centroid) are not searched. valid = the search found the spot (and, with
 * --discard, the discarding stage kept it).
 */

/* The search plan for the grid; discard 0 or 1. */
static int make_search_plan(run_state *s, const centroid_opts *o, const report *r, int discard,
                            sw_search_plan **out)
{
    const int32_t nl = s->geom.nx * s->geom.ny;
    sw_search_params p;
    sw_search_params_default(&p, r->width, r->height, nl);
    p.type = r->type;
    p.algorithm = o->algorithm;
    p.nx = s->geom.nx;
    p.ny = s->geom.ny;
    p.pitch_px = s->geom.pitch_px;
    int32_t w = (int32_t)floor(s->geom.pitch_px);
    w = w < 3 ? 3 : w > SW_SEARCH_MAX_WINDOW ? SW_SEARCH_MAX_WINDOW : w;
    p.window_px = w;
    if (p.min_window_px > w)
        p.min_window_px = w;
    p.discard = discard;
    p.discard_ring_px = sw_search_discard_ring(s->geom.pitch_px);
    sw_status st = sw_search_create(s->ctx, &p, out);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(s->ctx, st));
    return SW_EXIT_OK;
}

/* The reference image's centroids into s->ref_x, s->ref_y (NaN where none). */
static int search_reference(run_state *s, const centroid_opts *o, const report *r)
{
    const int32_t nx = s->geom.nx, nl = nx * s->geom.ny;
    sw_search_plan *plan = NULL;
    int rc = make_search_plan(s, o, r, 0, &plan);
    if (rc != SW_EXIT_OK)
        return rc;
    double *sx = malloc(sizeof(double) * 3 * (size_t)nl);
    uint8_t *status = malloc((size_t)nl);
    if (!sx || !status) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    double *sy = sx + nl, *in = sx + 2 * (size_t)nl;
    for (int32_t l = 0; l < nl; l++)
        sw_sh_reference(&s->geom, l % nx, l / nx, &sx[l], &sy[l]);
    sw_status st = sw_search_run(plan, &s->ref_frames.frames[0], sx, sy, NULL, SW_MEM_HOST,
                                 s->ref_x, s->ref_y, in, status);
    if (st != SW_OK) {
        rc = sw_cli_fail(SUB, "reference image '%s': %s", o->reference,
                         sw_cli_lib_error(s->ctx, st));
        goto done;
    }
    /* the median intensity of the spots found (sorted copy in sy, no longer needed) */
    int32_t n = 0;
    for (int32_t l = 0; l < nl; l++)
        if (status[l] == SW_SPOT_OK)
            sy[n++] = in[l];
    for (int32_t a = 1; a < n; a++) { /* insertion sort: a few thousand lenslets at most */
        const double v = sy[a];
        int32_t b = a;
        for (; b > 0 && sy[b - 1] > v; b--)
            sy[b] = sy[b - 1];
        sy[b] = v;
    }
    const double floor_in =
        n > 0 ? 0.01 * (n % 2 ? sy[n / 2] : 0.5 * (sy[n / 2 - 1] + sy[n / 2])) : 0.0;
    for (int32_t l = 0; l < nl; l++) {
        const int found = status[l] == SW_SPOT_OK && in[l] >= floor_in;
        if (!found && o->mask && s->mask[l]) {
            rc = sw_cli_fail(SUB,
                             "reference image '%s': lenslet (%d,%d) has no spot but --mask keeps "
                             "it",
                             o->reference, (int)(l % nx), (int)(l / nx));
            goto done;
        }
        if (!found)
            s->ref_x[l] = s->ref_y[l] = NAN;
    }
done:
    free(sx);
    free(status);
    sw_search_destroy(plan);
    return rc;
}

static int run_search(const sw_cli_globals *gl, const centroid_opts *o, report *r,
                      sw_sh_geometry *geom)
{
    run_state s;
    memset(&s, 0, sizeof s);
    sw_search_plan *plan = NULL;
    double *buf = NULL;
    uint8_t *status = NULL, *active = NULL;
    int rc = sw_cli_context(gl, SUB, &s.ctx);
    if (rc != SW_EXIT_OK)
        return rc;
    r->backend = sw_context_backend(s.ctx);
    r->kernel_us = -1.0;
    r->path = SW_CENTROID_HOST;
    sw_status st;

    /* Images. */
    double t0 = sw_cli_now();
    if ((rc = read_frames(s.ctx, "image", o->image, &s.frames)) != SW_EXIT_OK)
        goto done;
    r->frames = s.frames.count;
    r->width = s.frames.frames[0].width;
    r->height = s.frames.frames[0].height;
    r->type = s.frames.frames[0].type;
    for (int32_t f = 1; f < r->frames; f++) {
        const sw_image *a = &s.frames.frames[f];
        if (a->width != r->width || a->height != r->height || a->type != r->type) {
            rc = sw_cli_fail(SUB, "image '%s': frame %d differs from frame 0", o->image, (int)f);
            goto done;
        }
    }
    if (o->reference && !o->reference_csv) {
        if ((rc = read_frames(s.ctx, "reference image", o->reference, &s.ref_frames)) != SW_EXIT_OK)
            goto done;
        const sw_image *ref = &s.ref_frames.frames[0];
        if (s.ref_frames.count != 1) {
            rc = sw_cli_fail(SUB, "reference image '%s' holds %d frames; give one", o->reference,
                             (int)s.ref_frames.count);
            goto done;
        }
        if (ref->width != r->width || ref->height != r->height || ref->type != r->type) {
            rc = sw_cli_fail(SUB,
                             "reference image '%s' is %dx%d %s, the image %dx%d %s: give both in "
                             "the same size and pixel type",
                             o->reference, (int)ref->width, (int)ref->height,
                             sw_pixel_type_string(ref->type), (int)r->width, (int)r->height,
                             sw_pixel_type_string(r->type));
            goto done;
        }
    }
    r->read_ms = 1e3 * (sw_cli_now() - t0);

    /* The grid (as for cog). */
    sw_sh_geometry_default(&s.geom);
    s.geom.pixel_um = o->have_pixel ? o->pixel_um : DEF_PIXEL_UM;
    s.geom.focal_mm = o->have_focal ? o->focal_mm : DEF_FOCAL_MM;
    if (o->geometry_auto) {
        t0 = sw_cli_now();
        st = sw_centroid_find_geometry(s.ctx, &s.ref_frames.frames[0], &s.geom);
        r->geometry_ms = 1e3 * (sw_cli_now() - t0);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "reference image '%s': %s", o->reference,
                             sw_cli_lib_error(s.ctx, st));
            goto done;
        }
    } else {
        manual_geometry(o, r->width, r->height, &s.geom);
        if (s.geom.nx < 1 || s.geom.ny < 1) {
            rc = sw_cli_fail(SUB, "a lenslet of %g px does not fit the %dx%d image", o->pitch,
                             (int)r->width, (int)r->height);
            goto done;
        }
    }
    if ((st = sw_sh_geometry_check(s.ctx, &s.geom, r->width, r->height)) != SW_OK) {
        rc = sw_cli_fail(SUB, "image '%s': %s", o->image, sw_cli_lib_error(s.ctx, st));
        goto done;
    }
    const int32_t nx = s.geom.nx, nl = nx * s.geom.ny;

    /* Mask and reference. */
    if (o->mask) {
        double *vals[1];
        static const char *const names[1] = {"valid"};
        s.mask = malloc((size_t)nl);
        uint8_t *seen = malloc((size_t)nl);
        vals[0] = malloc(sizeof(double) * (size_t)nl);
        if (!s.mask || !seen || !vals[0]) {
            free(seen);
            free(vals[0]);
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
        rc = read_lenslet_table(s.ctx, "mask", o->mask, nx, s.geom.ny, 0, names, 1, vals, seen);
        for (int32_t l = 0; rc == SW_EXIT_OK && l < nl; l++) {
            if (seen[l] && vals[0][l] != 0.0 && vals[0][l] != 1.0)
                rc = sw_cli_fail(SUB, "mask '%s': lenslet (%d,%d) has valid = %g (0 or 1)", o->mask,
                                 l % nx, l / nx, vals[0][l]);
            s.mask[l] = !seen[l] || vals[0][l] != 0.0;
        }
        free(seen);
        free(vals[0]);
        if (rc != SW_EXIT_OK)
            goto done;
    }
    if (!(s.ref_x = malloc(sizeof(double) * (size_t)nl)) ||
        !(s.ref_y = malloc(sizeof(double) * (size_t)nl))) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    t0 = sw_cli_now();
    if (o->reference) {
        rc = o->reference_csv ? reference_from_csv(&s, o) : search_reference(&s, o, r);
        if (rc != SW_EXIT_OK)
            goto done;
        if (mask_from_reference(&s, r) < 0) {
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
    } else {
        for (int32_t l = 0; l < nl; l++)
            sw_sh_reference(&s.geom, l % nx, l / nx, &s.ref_x[l], &s.ref_y[l]);
    }
    r->reference_ms = 1e3 * (sw_cli_now() - t0);
    t0 = sw_cli_now();
    if ((rc = make_search_plan(&s, o, r, o->discard, &plan)) != SW_EXIT_OK)
        goto done;
    r->plan_ms = 1e3 * (sw_cli_now() - t0);
    /* the lenslets searched: the mask's, with a reference centroid */
    active = malloc((size_t)nl);
    status = malloc((size_t)nl);
    buf = malloc(sizeof(double) * 3 * (size_t)nl);
    r->valid = calloc((size_t)r->frames, sizeof *r->valid);
    if (!active || !status || !buf || !r->valid) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    double *x = buf, *y = buf + nl, *in = buf + 2 * (size_t)nl;
    r->nslopes = 0;
    for (int32_t l = 0; l < nl; l++) {
        active[l] = (!s.mask || s.mask[l]) && isfinite(s.ref_x[l]) && isfinite(s.ref_y[l]);
        r->nslopes += active[l];
    }

    /* Run and write. */
    if ((rc = sw_cli_out_open(SUB, &s.out, o->out)) != SW_EXIT_OK)
        goto done;
    if (o->slopes && (rc = sw_cli_out_open(SUB, &s.slopes, o->slopes)) != SW_EXIT_OK)
        goto done;
    const int multi = r->frames > 1, with_ref = o->reference != NULL;
    const int rad = o->have_pixel && o->have_focal;
    const double px_to_rad = s.geom.pixel_um / (s.geom.focal_mm * 1000.0);
    fprintf(s.out.f, "%six,iy,x_px,y_px,intensity,valid%s\n", multi ? "frame," : "",
            with_ref ? ",dx_px,dy_px" : "");
    if (s.slopes.f)
        fprintf(s.slopes.f, "%six,iy,dx_px,dy_px%s\n", multi ? "frame," : "",
                rad ? ",dx_rad,dy_rad" : "");
    for (int32_t f = 0; f < r->frames; f++) {
        t0 = sw_cli_now();
        st = sw_search_run(plan, &s.frames.frames[f], s.ref_x, s.ref_y, active, SW_MEM_HOST, x, y,
                           in, status);
        r->run_ms += 1e3 * (sw_cli_now() - t0);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "image '%s', frame %d: %s", o->image, (int)f,
                             sw_cli_lib_error(s.ctx, st));
            goto done;
        }
        for (int32_t l = 0; l < nl; l++) {
            const int v = status[l] == SW_SPOT_OK;
            const double dx = v ? x[l] - s.ref_x[l] : NAN, dy = v ? y[l] - s.ref_y[l] : NAN;
            r->valid[f] += v;
            if (v && active[l]) {
                r->sum_dx += dx;
                r->sum_dy += dy;
                r->sum_dx2 += dx * dx;
                r->sum_dy2 += dy * dy;
                r->nslope_valid++;
            }
            FILE *out = s.out.f;
            if (multi)
                fprintf(out, "%d,", (int)f);
            fprintf(out, "%d,%d", (int)(l % nx), (int)(l / nx));
            put_num(out, v ? x[l] : NAN);
            put_num(out, v ? y[l] : NAN);
            put_num(out, v ? in[l] : NAN);
            fprintf(out, ",%d", v);
            if (with_ref) {
                put_num(out, dx);
                put_num(out, dy);
            }
            fputc('\n', out);
            if (!s.slopes.f || !active[l])
                continue;
            out = s.slopes.f;
            if (multi)
                fprintf(out, "%d,", (int)f);
            fprintf(out, "%d,%d", (int)(l % nx), (int)(l / nx));
            put_num(out, dx);
            put_num(out, dy);
            if (rad) {
                put_num(out, dx * px_to_rad);
                put_num(out, dy * px_to_rad);
            }
            fputc('\n', out);
        }
    }
    t0 = sw_cli_now();
    if ((rc = sw_cli_out_close(SUB, &s.out, 1)) != SW_EXIT_OK ||
        (rc = sw_cli_out_close(SUB, &s.slopes, 1)) != SW_EXIT_OK)
        goto done;
    r->write_ms = 1e3 * (sw_cli_now() - t0);
    rc = SW_EXIT_OK;
done:
    *geom = s.geom;
    geom->valid = NULL;
    sw_search_destroy(plan);
    free(buf);
    free(status);
    free(active);
    state_free(&s);
    return rc;
}

/* ------------------------------------------------------------------ the report */

/* "cog", "pyramid" or "com" (the option's words). */
static const char *algorithm_name(const centroid_opts *o)
{
    return !o->search ? "cog" : o->algorithm == SW_SEARCH_COM ? "com" : "pyramid";
}

/* The memory path of cog; "search" for pyramid and com (host arrays, search.h). */
static const char *path_name(const centroid_opts *o, const report *r)
{
    return o->search ? "search" : sw_centroid_path_string(r->path);
}

static void print_report(const centroid_opts *o, const report *r, const sw_sh_geometry *g)
{
    const double n = (double)r->nslope_valid;
    const double mdx = n > 0 ? r->sum_dx / n : NAN, mdy = n > 0 ? r->sum_dy / n : NAN;
    const double rdx = n > 0 ? sqrt(r->sum_dx2 / n) : NAN, rdy = n > 0 ? sqrt(r->sum_dy2 / n) : NAN;
    int64_t vmin = INT64_MAX, vmax = 0, vsum = 0, smin = INT64_MAX, smax = 0, ssum = 0;
    for (int32_t f = 0; f < r->frames; f++) {
        vmin = r->valid[f] < vmin ? r->valid[f] : vmin;
        vmax = r->valid[f] > vmax ? r->valid[f] : vmax;
        vsum += r->valid[f];
        if (r->saturated) {
            smin = r->saturated[f] < smin ? r->saturated[f] : smin;
            smax = r->saturated[f] > smax ? r->saturated[f] : smax;
            ssum += r->saturated[f];
        }
    }
    if (!r->saturated)
        smin = 0;
    if (!o->json) {
        printf("centroid: %d frame%s of %dx%d %s, grid %dx%d of %g px at (%g, %g)%s\n",
               (int)r->frames, r->frames == 1 ? "" : "s", (int)r->width, (int)r->height,
               sw_pixel_type_string(r->type), (int)g->nx, (int)g->ny, g->pitch_px, g->x0, g->y0,
               o->geometry_auto ? " (found in the reference)" : "");
        printf("  lenslets   %d in the mask of %d; valid per frame %lld..%lld\n", (int)r->nslopes,
               (int)(g->nx * g->ny), (long long)vmin, (long long)vmax);
        if (!o->search && r->sat_level < 0)
            printf("  saturated  not checked (no level for %s frames: give --saturation)\n",
                   sw_pixel_type_string(r->type));
        else if (!o->search)
            printf("  saturated  %lld lenslet%s (pixels >= %g) in some frame, per frame "
                   "%lld..%lld; %s\n",
                   (long long)r->sat_lenslets, r->sat_lenslets == 1 ? "" : "s", r->sat_level,
                   (long long)smin, (long long)smax,
                   o->drop_saturated ? "dropped (valid 0)"
                                     : "kept valid (--drop-saturated drops them)");
        if (!o->search && r->ref_saturated > 0)
            printf("  reference  %d lenslet%s saturated in %s%s\n", (int)r->ref_saturated,
                   r->ref_saturated == 1 ? "" : "s", o->reference,
                   o->drop_saturated ? " (left out of the mask)" : "");
        printf("  slopes     mean (%.4g, %.4g) px, RMS (%.4g, %.4g) px from %s\n", mdx, mdy, rdx,
               rdy, o->reference ? o->reference : "the lenslet axes");
        printf("  path       %s (%s backend); read %.3f ms, plan %.3f ms, run %.3f ms, write "
               "%.3f ms\n",
               path_name(o, r), sw_backend_string(r->backend), r->read_ms, r->plan_ms, r->run_ms,
               r->write_ms);
        printf("  wrote      %s", o->out);
        if (o->slopes)
            printf(", %s", o->slopes);
        printf("\n");
        return;
    }
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "centroid");
    sw_cli_json_string(j, "image", o->image);
    sw_cli_json_int(j, "frames", r->frames);
    sw_cli_json_int(j, "width", r->width);
    sw_cli_json_int(j, "height", r->height);
    sw_cli_json_string(j, "pixel_type", sw_pixel_type_string(r->type));
    sw_cli_json_string(j, "geometry", o->geometry_auto ? "auto" : "manual");
    sw_cli_json_int(j, "grid_nx", g->nx);
    sw_cli_json_int(j, "grid_ny", g->ny);
    sw_cli_json_double(j, "pitch_px", g->pitch_px);
    sw_cli_json_double(j, "origin_x_px", g->x0);
    sw_cli_json_double(j, "origin_y_px", g->y0);
    sw_cli_json_double(j, "pixel_um", g->pixel_um);
    sw_cli_json_double(j, "focal_mm", g->focal_mm);
    sw_cli_json_int(j, "lenslets", (int)(g->nx * g->ny));
    sw_cli_json_int(j, "lenslets_in_mask", r->nslopes);
    sw_cli_json_string(j, "mask", o->mask);
    cJSON_AddBoolToObject(j, "mask_from_reference", r->mask_from_reference);
    sw_cli_json_string(j, "reference", o->reference);
    sw_cli_json_string(j, "reference_kind",
                       !o->reference      ? NULL
                       : o->reference_csv ? "csv"
                                          : "image");
    sw_cli_json_int(j, "reference_invalid", r->ref_invalid);
    sw_cli_json_string(j, "algorithm", algorithm_name(o));
    cJSON_AddBoolToObject(j, "discard", o->discard);
    sw_cli_json_string(j, "threshold_mode",
                       !(o->have_threshold || o->have_fraction)         ? "none"
                       : (o->have_mode && o->mode == SW_THRESHOLD_ZERO) ? "zero"
                                                                        : "subtract");
    sw_cli_json_string(j, "threshold_kind", o->have_fraction ? "fraction" : "absolute");
    sw_cli_json_double(j, "threshold", o->have_threshold || o->have_fraction ? o->threshold : NAN);
    sw_cli_json_double(j, "gamma", o->gamma);
    sw_cli_json_int(j, "window", o->window);
    sw_cli_json_string(j, "dark", o->dark);
    sw_cli_json_string(j, "flat", o->flat);
    sw_cli_json_string(j, "lut", o->lut);
    cJSON *valid = cJSON_AddArrayToObject(j, "valid_per_frame");
    for (int32_t f = 0; f < r->frames; f++) {
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)r->valid[f]);
        cJSON_AddItemToArray(valid, cJSON_CreateRaw(num));
    }
    sw_cli_json_int(j, "valid_total", vsum);
    /* saturation (cog): null where it does not apply (pyramid, com) or no level was checked */
    const int checked = !o->search && r->sat_level >= 0;
    sw_cli_json_double(j, "saturation_level", checked ? r->sat_level : NAN);
    cJSON_AddBoolToObject(j, "drop_saturated", o->drop_saturated);
    if (checked) {
        sw_cli_json_int_array(j, "saturated_per_frame", r->saturated, (int)r->frames);
        sw_cli_json_int(j, "saturated_total", ssum);
        sw_cli_json_int(j, "saturated_lenslets", r->sat_lenslets);
    } else {
        cJSON_AddNullToObject(j, "saturated_per_frame");
        cJSON_AddNullToObject(j, "saturated_total");
        cJSON_AddNullToObject(j, "saturated_lenslets");
    }
    if (checked && r->ref_saturated >= 0)
        sw_cli_json_int(j, "reference_saturated", r->ref_saturated);
    else
        cJSON_AddNullToObject(j, "reference_saturated");
    sw_cli_json_int(j, "slopes_valid", r->nslope_valid);
    sw_cli_json_double(j, "mean_dx_px", mdx);
    sw_cli_json_double(j, "mean_dy_px", mdy);
    sw_cli_json_double(j, "rms_dx_px", rdx);
    sw_cli_json_double(j, "rms_dy_px", rdy);
    sw_cli_json_string(j, "slope_layout", o->interleaved ? "interleaved" : "blocks");
    sw_cli_json_string(j, "path", path_name(o, r));
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_fixed(j, "read_ms", r->read_ms, 6);
    sw_cli_json_fixed(j, "geometry_ms", r->geometry_ms, 6);
    sw_cli_json_fixed(j, "plan_ms", r->plan_ms, 6);
    sw_cli_json_fixed(j, "reference_ms", r->reference_ms, 6);
    sw_cli_json_fixed(j, "run_ms", r->run_ms, 6);
    sw_cli_json_double(j, "kernel_us", r->kernel_us >= 0 ? r->kernel_us : NAN);
    sw_cli_json_fixed(j, "write_ms", r->write_ms, 6);
    sw_cli_json_string(j, "out", o->out);
    sw_cli_json_string(j, "slopes", o->slopes);
    sw_cli_json_string(j, "method", o->search ? NULL : sw_centroid_method_string(o->method));
    sw_cli_json_print(j);
}

int sw_cmd_centroid(const sw_cli_globals *g, int argc, char **argv)
{
    centroid_opts o;
    memset(&o, 0, sizeof o);
    o.pixel_um = DEF_PIXEL_UM;
    o.focal_mm = DEF_FOCAL_MM;
    o.gamma = 1.0;
    o.path = SW_CENTROID_AUTO;
    o.local_k = 3.0;
    int rc = parse_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    sw_cli_file_in("image", o.image);
    sw_cli_file_in("--reference", o.reference);
    sw_cli_file_in("--mask", o.mask);
    sw_cli_file_in("--dark", o.dark);
    sw_cli_file_in("--flat", o.flat);
    sw_cli_file_in("--lut", o.lut);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--slopes", o.slopes);
    if ((rc = sw_cli_files_check()) != SW_EXIT_OK)
        return rc;
    report r;
    memset(&r, 0, sizeof r);
    r.sat_level = -1.0;
    r.ref_saturated = -1;
    sw_sh_geometry geom;
    memset(&geom, 0, sizeof geom);
    rc = o.search ? run_search(g, &o, &r, &geom) : run_centroid(g, &o, &r, &geom);
    if (rc == SW_EXIT_OK && o.out && strcmp(o.out, "-") != 0)
        print_report(&o, &r, &geom);
    free(r.valid);
    free(r.saturated);
    free(r.sat_ever);
    return rc;
}
