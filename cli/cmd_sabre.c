/*
 * spotwave sabre: Shack-Hartmann slopes -> wavefront, with linear simplex B-splines distributed
 * over partitions (D-SABRE, Brunner et al. 2018 Secs. 2, 3 and 5.A; sabre.h) and piston
 * equalisation by H-PME (Brunner et al. 2018 Eq. 10-11) or D-PME (Eq. 8-9), or with the two
 * baselines of sabre.h: global SABRE (one least-squares problem, de Visser & Verhaegen 2013;
 * Brunner et al. 2018 Sec. 2) and Fried's zonal least squares (Fried 1977).
 *
 * Global SABRE also takes splines of degree d = 1..3 and continuity order r (--degree,
 * --continuity, --smoothing: sw_sabre_spline_create, sabre.h), host code on any context.
 * D-SABRE's local solves and global SABRE of every degree take robust passes (outlier rejection
 * with Huber pseudo-observations: --robust-passes, --robust-threshold; sabre.h).
 *
 * Outputs: the wavefront at the lenslet corners (the Fried actuator grid: DM commands,
 * `cx,cy,w`), the spline's vertex values (`kind,I,J,x,y,w`; for d >= 2 the spline evaluated at
 * the mesh's vertices), a FITS map, and a JSON report.
 * Every output has its piston removed (slopes cannot see it): the actuators and values over the
 * corners of the valid lenslets, the map over its pixels in valid lenslets.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"
#include "outfiles.h"

#include <getopt.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB "sabre"

#define DEF_PARTITIONS 8
#define DEF_OVERLAP    1
#define DEF_FRIED_REG  1e-3
#define MAX_GRID       4096 /* sabre.h: 2..4096 lenslets per side */
#define MAX_MAP_SIZE   8192
#define DEF_MAP_CAP    2048 /* the default map side: 16 pixels a lenslet, at most this */
#define MAX_REPEAT     100000
#define MAX_DEGREE     3    /* sabre.h: sw_sabre_spline_create takes d = 1..3, r = 0..min(1, d-1) */
#define MIN_SMOOTHING  1e-8 /* sw_sabre_spline_create's range for the soft conditions' weight */
#define MAX_SMOOTHING  1e6

typedef enum { METHOD_DSABRE = 0, METHOD_GLOBAL, METHOD_FRIED } sabre_method;

static const char *method_name(sabre_method m)
{
    return m == METHOD_DSABRE ? "dsabre" : m == METHOD_GLOBAL ? "global" : "fried";
}

void sw_cmd_sabre_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] sabre SLOPES.csv [OPTIONS]\n"
        "\n"
        "Reconstructs the wavefront from Shack-Hartmann slopes with linear simplex B-splines on\n"
        "a triangulation of the lenslet grid (SABRE: de Visser & Verhaegen 2013, J. Opt. Soc.\n"
        "Am. A 30(1), 82), distributed over K x K overlapping partitions whose local pistons\n"
        "are equalised afterwards (D-SABRE with H-PME, Eq. 10-11, or D-PME, Eq. 8-9, of\n"
        "Brunner, de Visser, Vuik & Verhaegen 2018, J. Opt. Soc. Am. A 35(6), 859, Secs. 2-3;\n"
        "sabre.h), or with one of two baselines: global SABRE (one least-squares problem over\n"
        "the whole grid) and Fried's zonal least squares (Fried 1977, J. Opt. Soc. Am. 67(3),\n"
        "370: phases at the lenslet corners). Global SABRE also takes splines of degree 2 or 3\n"
        "(--degree; B-form splines with C1 continuity imposed exactly, de Visser & Verhaegen\n"
        "2013; Brunner et al. 2018 Sec. 2). D-SABRE runs on the GPU when the context is CUDA\n"
        "(--backend); the baselines and the splines of every degree run on the CPU (on a CUDA\n"
        "context too: the report says path 'host').\n"
        "\n"
        "Input:\n"
        "  SLOPES.csv             columns ix,iy and either dx_rad,dy_rad (radians: mean\n"
        "                         wavefront gradients, used when present) or dx_px,dy_px (spot\n"
        "                         displacements in pixels, converted with --pixel-um and\n"
        "                         --focal-mm: rad = px * pixel_um / (focal_mm * 1000)), as\n"
        "                         'spotwave centroid --slopes' writes them. A lenslet is valid\n"
        "                         when it has a row with finite slopes (and valid != 0 when\n"
        "                         the table has a 'valid' column); lenslets without a row or\n"
        "                         with nan slopes have no data. A 'frame' column may hold one\n"
        "                         frame number only. Rows naming a lenslet outside the grid or\n"
        "                         a lenslet twice, and infinite slopes, are errors\n"
        "  --grid NXxNY           lenslets across and down, 2..%d each (default: the largest\n"
        "                         ix + 1 by the largest iy + 1 of the table)\n"
        "  --pixel-um P           detector pixel pitch, micrometres (for dx_px,dy_px)\n"
        "  --focal-mm F           lenslet focal length, millimetres (for dx_px,dy_px)\n"
        "  --lenslet-um P         lenslet pitch in the pupil (default 1: the wavefront comes out\n"
        "                         in radians x pitch; in micrometres the wavefront is in\n"
        "                         micrometres of optical path)\n"
        "\n"
        "Method:\n"
        "  --method dsabre|global|fried\n"
        "                         dsabre: distributed SABRE (default); global: one SABRE\n"
        "                         problem on the whole grid; fried: Fried-geometry zonal least\n"
        "                         squares with a light Laplacian regularisation\n"
        "  --partitions K         dsabre: K x K partitions, 1 .. max(NX, NY) - 1, a power of\n"
        "                         two for hierarchical PME (default %d, halved until it fits a\n"
        "                         smaller grid)\n"
        "  --pme hierarchical|distributed|none\n"
        "                         dsabre: piston mode equalisation between the partitions\n"
        "                         (H-PME, D-PME, or none; default hierarchical)\n"
        "  --overlap OL           dsabre: squares of overlap on each side of a partition's core,\n"
        "                         0..64 (default %d)\n"
        "  --padding zero|nearest dsabre: slopes where the extended array has no data: zeros\n"
        "                         (Brunner et al.'s zero padding, default) or the nearest valid\n"
        "                         lenslet's\n"
        "  --fill N               dsabre: fill iterations 0..16 (default 0): the padded slopes\n"
        "                         replaced by the solution's own and solved again, N times\n"
        "  --dpme-iterations N    dsabre with distributed PME: iterations (default 0: L_D, the\n"
        "                         largest distance to the master partition)\n"
        "  --fried-reg R          fried: weight of the Laplacian that removes the waffle mode,\n"
        "                         > 0 (default %g)\n"
        "  --degree D             global: the spline's degree, 1..%d (default 1, the linear\n"
        "                         mesh; given alone it selects --method global). D-SABRE is\n"
        "                         linear only: D > 1 with --method dsabre or its options is an\n"
        "                         error. Cost: about 2, 8, 18 unknowns a lenslet for D = 1, 2,\n"
        "                         3, in a band of two lattice rows; 64x64 at D = 3 takes 15-20\n"
        "                         s and 1.3 GB to set up (an accuracy reference, not real time)\n"
        "  --continuity R         global: the spline's continuity order, 0..min(1, D-1): C0 or\n"
        "                         C1 across every edge, imposed exactly (default: 1 for D >= 2)\n"
        "  --smoothing W          global, D >= 2: weight of the soft conditions of orders\n"
        "                         R+1..D across the edges, which fix what the slopes leave\n"
        "                         unseen, %g..%g (default: noise-aware, %g plus the slope\n"
        "                         noise variance over the signal's, the noise estimated from\n"
        "                         the slopes' curl; sabre.h, BENCHMARKS.md. %g was the best\n"
        "                         fixed weight for D = 3 on bench_sabre's turbulence)\n"
        "  --robust-passes N      dsabre, global (every degree): outlier rejection, 0..%d passes\n"
        "                         (default 0): after the least-squares solve, N more solves\n"
        "                         with each lenslet's slope pulled to within K times the\n"
        "                         median residual of the fit (Huber's M-estimate by modified\n"
        "                         residuals, Huber 1981, Robust Statistics, Wiley; sabre.h).\n"
        "                         dsabre: each partition's own lenslets decide; global: all\n"
        "                         valid lenslets. Each pass costs one more solve on the same\n"
        "                         factorisation. In the library's tests 3 passes cut the\n"
        "                         error that 3%% wild lenslets cause 2.8-6 times (a cubic with\n"
        "                         a light --smoothing, which nearly interpolates each lenslet,\n"
        "                         1.5 times: a pass moves a lenslet by its share of the fit)\n"
        "  --robust-threshold K   the threshold K, a multiple of the median residual length,\n"
        "                         1..1000 (default %g: beyond about 3.5 sigma of Gaussian\n"
        "                         noise); needs --robust-passes\n"
        "\n"
        "Output (the piston is removed from each; with no output option the actuators go to\n"
        "standard output):\n"
        "  --actuators CSV        the wavefront at the (NX+1) x (NY+1) lenslet corners, the\n"
        "                         Fried actuator grid: cx,cy,w, corner (cx, cy) between lenslets\n"
        "                         (cx-1, cy-1) and (cx, cy); nan at corners of no valid lenslet;\n"
        "                         the mean over the others is 0 ('-': standard output)\n"
        "  --values CSV           dsabre, global: the spline's vertex values kind,I,J,x,y,w;\n"
        "                         with --degree 2 or 3 the spline evaluated at the mesh's\n"
        "                         vertices (its B-coefficients there; the spline is more than\n"
        "                         these values between them: use --map for the surface);\n"
        "                         kind 'corner' (a lenslet centre) or 'centre' (a lenslet\n"
        "                         corner), (I, J) its index in the spline's lattice, (x, y) its\n"
        "                         position in lenslet units (lenslet (ix, iy) is centred on\n"
        "                         (ix, iy)); dsabre's lattice covers the extended array of its\n"
        "                         partitions (vertices outside the grid included), global's\n"
        "                         vertices that no valid lenslet reaches are nan; the same\n"
        "                         piston as the actuators is removed ('-': standard output)\n"
        "  --map FILE             the wavefront on a pixel grid spanning the lenslet array\n"
        "                         (.fits: float; .png: a picture with a colour bar): pixel\n"
        "                         (i, k) at x = -1/2 + (i + 1/2) NX / W, y likewise; nan where\n"
        "                         the pixel's lenslet is invalid; mean 0 over the other pixels\n"
        "  --map-size N           the map's longer side, pixels, 1..%d (default 16 per lenslet,\n"
        "                         at most %d); the other side keeps the pixels square\n"
        "  --repeat N             run the reconstruction N times (timings; default 1)\n"
        "  --json                 print a JSON report on standard output (no table may go\n"
        "                         there): method, grid, partitions, core and window squares,\n"
        "                         the spline's degree, continuity and smoothing,\n"
        "                         PME iterations, valid lenslets, the wavefront's RMS and\n"
        "                         peak-to-valley over the corners of the valid lenslets, run\n"
        "                         times (us) and the backend\n"
        "  -h, --help             print this help and exit\n"
        "\n"
        "Exit codes: 0 success; 1 a failure while running (unreadable table, no valid lenslet,\n"
        "a partitioning the library refuses, ...); 2 a usage error.\n"
        "\n"
        "Example:\n"
        "  spotwave centroid frame.fits --pitch 32 --grid 16x16 --reference ref.fits \\\n"
        "      --pixel-um 5.5 --focal-mm 3.5 --slopes s.csv\n"
        "  spotwave sabre s.csv --lenslet-um 176 --partitions 4 --actuators dm.csv \\\n"
        "      --map w.fits --json\n",
        MAX_GRID, DEF_PARTITIONS, DEF_OVERLAP, DEF_FRIED_REG, MAX_DEGREE, MIN_SMOOTHING,
        MAX_SMOOTHING, SW_SABRE_SPLINE_SMOOTHING, SW_SABRE_SPLINE_SMOOTHING_CUBIC,
        SW_SABRE_ROBUST_MAX_PASSES, SW_SABRE_ROBUST_THRESHOLD, MAX_MAP_SIZE, DEF_MAP_CAP);
}

/* ------------------------------------------------------------------ options */

typedef struct sabre_opts {
    const char *input, *actuators, *values, *map;
    int have_grid, have_pixel, have_focal, have_lenslet;
    int32_t nx, ny;
    double pixel_um, focal_mm, lenslet_um;
    sabre_method method;
    int have_partitions, have_pme, have_overlap, have_iters, have_reg, have_padding, have_fill;
    long fill;
    sw_sabre_padding padding;
    long partitions, overlap, dpme_iterations, map_size, repeat;
    sw_sabre_pme pme;
    double fried_reg;
    int have_method, have_degree, have_continuity, have_smoothing;
    long degree, continuity;
    double smoothing;
    int have_robust, have_robust_k;
    long robust_passes;
    double robust_threshold;
    int have_map_size, json;
} sabre_opts;

static int parse_options(int argc, char **argv, sabre_opts *o)
{
    enum {
        OPT_GRID = 256,
        OPT_PIXEL,
        OPT_FOCAL,
        OPT_LENSLET,
        OPT_METHOD,
        OPT_PARTITIONS,
        OPT_PME,
        OPT_OVERLAP,
        OPT_ITERS,
        OPT_PADDING,
        OPT_FILL,
        OPT_REG,
        OPT_DEGREE,
        OPT_CONTINUITY,
        OPT_SMOOTHING,
        OPT_ROBUST,
        OPT_ROBUST_K,
        OPT_ACTUATORS,
        OPT_VALUES,
        OPT_MAP,
        OPT_MAP_SIZE,
        OPT_REPEAT,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"grid", required_argument, NULL, OPT_GRID},
        {"pixel-um", required_argument, NULL, OPT_PIXEL},
        {"focal-mm", required_argument, NULL, OPT_FOCAL},
        {"lenslet-um", required_argument, NULL, OPT_LENSLET},
        {"method", required_argument, NULL, OPT_METHOD},
        {"partitions", required_argument, NULL, OPT_PARTITIONS},
        {"pme", required_argument, NULL, OPT_PME},
        {"overlap", required_argument, NULL, OPT_OVERLAP},
        {"dpme-iterations", required_argument, NULL, OPT_ITERS},
        {"padding", required_argument, NULL, OPT_PADDING},
        {"fill", required_argument, NULL, OPT_FILL},
        {"fried-reg", required_argument, NULL, OPT_REG},
        {"degree", required_argument, NULL, OPT_DEGREE},
        {"continuity", required_argument, NULL, OPT_CONTINUITY},
        {"smoothing", required_argument, NULL, OPT_SMOOTHING},
        {"robust-passes", required_argument, NULL, OPT_ROBUST},
        {"robust-threshold", required_argument, NULL, OPT_ROBUST_K},
        {"actuators", required_argument, NULL, OPT_ACTUATORS},
        {"values", required_argument, NULL, OPT_VALUES},
        {"map", required_argument, NULL, OPT_MAP},
        {"map-size", required_argument, NULL, OPT_MAP_SIZE},
        {"repeat", required_argument, NULL, OPT_REPEAT},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB;
    int c;
    double v;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "h", longopts)) != -1) {
        switch (c) {
        case OPT_GRID:
            if (sw_cli_parse_size(optarg, &o->nx, &o->ny) != 0 || o->nx < 2 || o->ny < 2 ||
                o->nx > MAX_GRID || o->ny > MAX_GRID)
                return sw_cli_usage(S, "--grid: '%s' is not NXxNY lenslets, 2..%d each", optarg,
                                    MAX_GRID);
            o->have_grid = 1;
            break;
        case OPT_PIXEL:
        case OPT_FOCAL:
        case OPT_LENSLET:
            if (sw_cli_opt_double(S, sw_cli_option_name(argv), optarg, SW_CLI_POSITIVE,
                                  "a positive length", &v) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_PIXEL)
                o->pixel_um = v, o->have_pixel = 1;
            else if (c == OPT_FOCAL)
                o->focal_mm = v, o->have_focal = 1;
            else
                o->lenslet_um = v, o->have_lenslet = 1;
            break;
        case OPT_METHOD:
            if (strcmp(optarg, "dsabre") == 0)
                o->method = METHOD_DSABRE;
            else if (strcmp(optarg, "global") == 0)
                o->method = METHOD_GLOBAL;
            else if (strcmp(optarg, "fried") == 0)
                o->method = METHOD_FRIED;
            else
                return sw_cli_usage(S, "--method: '%s' is not dsabre, global or fried", optarg);
            o->have_method = 1;
            break;
        case OPT_PARTITIONS:
            /* The library checks the rest (power of two, at most max(NX, NY) - 1). */
            if (sw_cli_opt_long(S, "--partitions", optarg, 1, MAX_GRID, &o->partitions) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_partitions = 1;
            break;
        case OPT_PME:
            if (sw_sabre_pme_parse(optarg, &o->pme) != SW_OK)
                return sw_cli_usage(S, "--pme: '%s' is not hierarchical, distributed or none",
                                    optarg);
            o->have_pme = 1;
            break;
        case OPT_PADDING:
            if (sw_sabre_padding_parse(optarg, &o->padding) != SW_OK)
                return sw_cli_usage(S, "--padding: '%s' is not zero or nearest", optarg);
            o->have_padding = 1;
            break;
        case OPT_FILL:
            if (sw_cli_opt_long(S, "--fill", optarg, 0, 16, &o->fill) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_fill = 1;
            break;
        case OPT_OVERLAP:
            if (sw_cli_opt_long(S, "--overlap", optarg, 0, 64, &o->overlap) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_overlap = 1;
            break;
        case OPT_ITERS:
            if (sw_cli_parse_long(optarg, 0, 1000000, &o->dpme_iterations) != 0)
                return sw_cli_usage(S, "--dpme-iterations: '%s' is not a whole number >= 0",
                                    optarg);
            o->have_iters = 1;
            break;
        case OPT_REG:
            if (sw_cli_opt_double(S, "--fried-reg", optarg, SW_CLI_POSITIVE, "a number > 0",
                                  &o->fried_reg) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_reg = 1;
            break;
        case OPT_DEGREE:
            if (sw_cli_parse_long(optarg, 1, MAX_DEGREE, &o->degree) != 0)
                return sw_cli_usage(S, "--degree: '%s' is not a spline degree in 1..%d", optarg,
                                    MAX_DEGREE);
            o->have_degree = 1;
            break;
        case OPT_CONTINUITY:
            if (sw_cli_parse_long(optarg, 0, 1, &o->continuity) != 0)
                return sw_cli_usage(S, "--continuity: '%s' is not a continuity order 0 or 1",
                                    optarg);
            o->have_continuity = 1;
            break;
        case OPT_SMOOTHING:
            if (sw_cli_opt_double(S, "--smoothing", optarg, SW_CLI_POSITIVE, "a weight > 0",
                                  &o->smoothing) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (!(o->smoothing >= MIN_SMOOTHING && o->smoothing <= MAX_SMOOTHING))
                return sw_cli_usage(S, "--smoothing: %g is not in %g..%g", o->smoothing,
                                    MIN_SMOOTHING, MAX_SMOOTHING);
            o->have_smoothing = 1;
            break;
        case OPT_ROBUST:
            if (sw_cli_opt_long(S, "--robust-passes", optarg, 0, SW_SABRE_ROBUST_MAX_PASSES,
                                &o->robust_passes) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_robust = 1;
            break;
        case OPT_ROBUST_K:
            if (sw_cli_opt_double(S, "--robust-threshold", optarg, SW_CLI_POSITIVE,
                                  "a multiple of the median residual",
                                  &o->robust_threshold) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (!(o->robust_threshold >= 1.0 && o->robust_threshold <= 1e3))
                return sw_cli_usage(S, "--robust-threshold: %g is not in 1..1000",
                                    o->robust_threshold);
            o->have_robust_k = 1;
            break;
        case OPT_MAP_SIZE:
            if (sw_cli_parse_long(optarg, 1, MAX_MAP_SIZE, &o->map_size) != 0)
                return sw_cli_usage(S, "--map-size: '%s' is not a whole number of pixels in 1..%d",
                                    optarg, MAX_MAP_SIZE);
            o->have_map_size = 1;
            break;
        case OPT_REPEAT:
            if (sw_cli_opt_long(S, "--repeat", optarg, 1, MAX_REPEAT, &o->repeat) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_ACTUATORS:
        case OPT_VALUES:
        case OPT_MAP:
            if (sw_cli_opt_file(S, sw_cli_option_name(argv), optarg,
                                c == OPT_ACTUATORS ? &o->actuators
                                : c == OPT_VALUES  ? &o->values
                                                   : &o->map) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sw_cmd_sabre_help(stdout); return -1;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return sw_cli_usage(S, "no SLOPES.csv given");
    o->input = argv[optind];
    if (optind + 1 < argc)
        return sw_cli_usage(S, "unexpected argument '%s' (one slopes table)", argv[optind + 1]);

    /* The spline's degree: global SABRE only (D-SABRE is linear). */
    if ((o->have_continuity || o->have_smoothing) && !o->have_degree)
        return sw_cli_usage(S,
                            "--continuity and --smoothing shape a spline of --degree D: give it");
    if (o->have_degree) {
        if (o->method == METHOD_FRIED)
            return sw_cli_usage(S, "--degree: the fried method has no spline (use --method "
                                   "global)");
        const int dsabre_opts = o->have_partitions || o->have_pme || o->have_overlap ||
                                o->have_iters || o->have_padding || o->have_fill;
        if (o->degree > 1 && (o->method == METHOD_DSABRE && (o->have_method || dsabre_opts)))
            return sw_cli_usage(S,
                                "--degree %ld: D-SABRE (--method dsabre and its --partitions, "
                                "--pme, --overlap, --dpme-iterations, --padding, --fill) is "
                                "linear only; splines of degree 2 and 3 are global SABRE "
                                "(--method global)",
                                o->degree);
        if (!o->have_method && !dsabre_opts)
            o->method = METHOD_GLOBAL;
        if (!o->have_continuity)
            o->continuity = o->degree > 1 ? 1 : 0;
        if (o->continuity >= o->degree)
            return sw_cli_usage(S,
                                "--continuity %ld: a spline of degree %ld has continuity order "
                                "0..%ld (R < D)",
                                o->continuity, o->degree, o->degree - 1);
        if (o->have_smoothing && o->degree < 2)
            return sw_cli_usage(S, "--smoothing applies to --degree 2 or 3 (the linear model has "
                                   "no soft conditions)");
    }
    if (!o->have_degree)
        o->degree = 1;
    if (!o->have_smoothing) /* the library's noise-aware default (sabre.h); reported as chosen */
        o->smoothing = 0.0;

    /* Options of one method only. */
    if (o->method != METHOD_DSABRE && (o->have_partitions || o->have_pme || o->have_overlap ||
                                       o->have_iters || o->have_padding || o->have_fill))
        return sw_cli_usage(S, "--partitions, --pme, --overlap, --dpme-iterations, --padding and "
                               "--fill apply to --method dsabre only");
    if (o->have_iters && o->pme != SW_SABRE_PME_DISTRIBUTED)
        return sw_cli_usage(S, "--dpme-iterations applies to --pme distributed only");
    if (o->have_reg && o->method != METHOD_FRIED)
        return sw_cli_usage(S, "--fried-reg applies to --method fried only");
    if (o->have_robust_k && !o->have_robust)
        return sw_cli_usage(S, "--robust-threshold sets the threshold of the robust passes: give "
                               "--robust-passes N");
    if (o->have_robust && o->method == METHOD_FRIED)
        return sw_cli_usage(S, "--robust-passes applies to --method dsabre and global (fried has "
                               "no robust passes)");
    if (!o->have_robust)
        o->robust_passes = 0;
    if (!o->have_robust_k)
        o->robust_threshold = SW_SABRE_ROBUST_THRESHOLD;
    if (o->values && o->method == METHOD_FRIED)
        return sw_cli_usage(S, "--values: the fried method has no spline (use --actuators)");

    /* Outputs. */
    if (o->have_map_size && !o->map)
        return sw_cli_usage(S, "--map-size sets the size of the map: give --map FILE");
    if (o->map && !sw_cli_ends_with(o->map, ".fits") && !sw_cli_ends_with(o->map, ".fit") &&
        !sw_cli_ends_with(o->map, ".png"))
        return sw_cli_usage(S, "--map: '%s' does not end in .fits or .png", o->map);
    if (!o->actuators && !o->values && !o->map && !o->json)
        o->actuators = "-";
    const int act_out = o->actuators && strcmp(o->actuators, "-") == 0;
    const int val_out = o->values && strcmp(o->values, "-") == 0;
    if (act_out && val_out)
        return sw_cli_usage(S, "only one of --actuators and --values can go to standard output");
    if (o->json && (act_out || val_out))
        return sw_cli_usage(S, "--json prints the report on standard output: give the %s a file",
                            act_out ? "--actuators" : "--values");
    const char *files[3] = {o->actuators, o->values, o->map};
    for (int i = 0; i < 3; i++)
        for (int j = i + 1; j < 3; j++)
            if (files[i] && files[j] && strcmp(files[i], files[j]) == 0 &&
                strcmp(files[i], "-") != 0)
                return sw_cli_usage(S, "--actuators, --values and --map name the same file '%s'",
                                    files[i]);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ the slopes table */

typedef struct slopes_in {
    int32_t nx, ny; /* the grid                                               */
    int64_t rows;   /* data rows                                              */
    int32_t listed; /* lenslets with a row                                    */
    int32_t nvalid; /* lenslets with data                                     */
    int radians;    /* 1: dx_rad,dy_rad were read; 0: dx_px,dy_px converted   */
    uint8_t *valid; /* nx * ny                                                */
    float *slopes;  /* 2 nx ny radians, x then y (sabre.h's order); 0 invalid */
} slopes_in;

static void slopes_free(slopes_in *s)
{
    free(s->valid);
    free(s->slopes);
    memset(s, 0, sizeof *s);
}

/* Reads the table and places its rows on the grid (o->nx x o->ny, or the table's extent). */
static int read_slopes(sw_context *ctx, const sabre_opts *o, slopes_in *s)
{
    memset(s, 0, sizeof *s);
    const char *path = o->input;
    sw_table t;
    sw_status st = sw_csv_read(ctx, path, &t);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    int rc = SW_EXIT_OK;
    const int32_t cix = sw_table_column(&t, "ix"), ciy = sw_table_column(&t, "iy");
    const int32_t crx = sw_table_column(&t, "dx_rad"), cry = sw_table_column(&t, "dy_rad");
    const int32_t cpx = sw_table_column(&t, "dx_px"), cpy = sw_table_column(&t, "dy_px");
    const int32_t cvalid = sw_table_column(&t, "valid"), cframe = sw_table_column(&t, "frame");
    int32_t cdx = crx, cdy = cry;
    double scale = 1.0; /* radians per table unit */
    if (cix < 0 || ciy < 0) {
        rc = sw_cli_fail(SUB, "slopes table '%s' has no column '%s'", path, cix < 0 ? "ix" : "iy");
    } else if ((crx >= 0) != (cry >= 0)) {
        rc = sw_cli_fail(SUB, "slopes table '%s' has column '%s' without '%s'", path,
                         crx >= 0 ? "dx_rad" : "dy_rad", crx >= 0 ? "dy_rad" : "dx_rad");
    } else if (crx < 0 && (cpx < 0 || cpy < 0)) {
        rc = sw_cli_fail(SUB,
                         "slopes table '%s' has neither dx_rad,dy_rad nor dx_px,dy_px (give "
                         "the slopes of 'spotwave centroid --slopes')",
                         path);
    } else if (crx < 0 && (!o->have_pixel || !o->have_focal)) {
        rc = sw_cli_fail(SUB,
                         "slopes table '%s' has its slopes in pixels (dx_px,dy_px): give "
                         "--pixel-um and --focal-mm to convert them to radians",
                         path);
    } else if (t.nrows == 0) {
        rc = sw_cli_fail(SUB, "slopes table '%s' has no rows", path);
    }
    if (rc == SW_EXIT_OK && crx < 0) {
        cdx = cpx;
        cdy = cpy;
        scale = o->pixel_um / (o->focal_mm * 1000.0);
    }
    s->radians = crx >= 0;
    s->rows = t.nrows;

    /* Cells that do not depend on the grid; the table's extent. */
    double max_ix = 0, max_iy = 0;
    for (int64_t r = 0; rc == SW_EXIT_OK && r < t.nrows; r++) {
        const double fx = t.cols[cix][r], fy = t.cols[ciy][r];
        if (!(fx == floor(fx)) || !(fy == floor(fy)) || fx < 0 || fy < 0 || fx >= 65536 ||
            fy >= 65536) {
            rc = sw_cli_fail(SUB,
                             "slopes table '%s', data row %lld: lenslet (%g,%g) is not a pair "
                             "of whole numbers in 0..65535",
                             path, (long long)r + 1, fx, fy);
            break;
        }
        max_ix = fx > max_ix ? fx : max_ix;
        max_iy = fy > max_iy ? fy : max_iy;
        if (isinf(t.cols[cdx][r]) || isinf(t.cols[cdy][r]))
            rc = sw_cli_fail(SUB,
                             "slopes table '%s', data row %lld: an infinite slope (nan marks "
                             "a lenslet without data)",
                             path, (long long)r + 1);
        else if (cvalid >= 0 && t.cols[cvalid][r] != 0.0 && t.cols[cvalid][r] != 1.0)
            rc = sw_cli_fail(SUB, "slopes table '%s', data row %lld: valid = %g (0 or 1)", path,
                             (long long)r + 1, t.cols[cvalid][r]);
        else if (cframe >= 0 && t.cols[cframe][r] != t.cols[cframe][0])
            rc = sw_cli_fail(SUB,
                             "slopes table '%s' holds several frames (%g and %g in its 'frame' "
                             "column): sabre reconstructs one; give it one frame's rows",
                             path, t.cols[cframe][0], t.cols[cframe][r]);
    }
    if (rc == SW_EXIT_OK) {
        s->nx = o->have_grid ? o->nx : (int32_t)max_ix + 1;
        s->ny = o->have_grid ? o->ny : (int32_t)max_iy + 1;
        if (s->nx < 2 || s->ny < 2 || s->nx > MAX_GRID || s->ny > MAX_GRID)
            rc = sw_cli_fail(SUB,
                             "slopes table '%s' spans %dx%d lenslets: sabre needs 2..%d along "
                             "each side (give --grid NXxNY)",
                             path, (int)s->nx, (int)s->ny, MAX_GRID);
    }
    const size_t n = (size_t)s->nx * (size_t)s->ny;
    uint8_t *listed = NULL;
    /* listed, valid, two slopes: 10 bytes a lenslet of the grid, whatever rows the table has */
    if (rc == SW_EXIT_OK && sw_memory_check(ctx, (uint64_t)n, 2 + 2 * sizeof(float),
                                            "slopes table '%s': a grid of %dx%d lenslets", path,
                                            (int)s->nx, (int)s->ny) != SW_OK)
        rc = sw_cli_fail(SUB, "%s", sw_context_error(ctx));
    if (rc == SW_EXIT_OK) {
        listed = calloc(n, 1);
        s->valid = calloc(n, 1);
        s->slopes = calloc(2 * n, sizeof(float));
        if (!listed || !s->valid || !s->slopes)
            rc = sw_cli_fail(SUB, "out of memory (%dx%d lenslets)", (int)s->nx, (int)s->ny);
    }

    /* The rows on the grid. */
    for (int64_t r = 0; rc == SW_EXIT_OK && r < t.nrows; r++) {
        const int64_t ix = (int64_t)t.cols[cix][r], iy = (int64_t)t.cols[ciy][r];
        if (ix >= s->nx || iy >= s->ny) {
            rc = sw_cli_fail(SUB,
                             "slopes table '%s', data row %lld: lenslet (%lld,%lld) is not in "
                             "the %dx%d grid",
                             path, (long long)r + 1, (long long)ix, (long long)iy, (int)s->nx,
                             (int)s->ny);
            break;
        }
        const size_t l = (size_t)(iy * s->nx + ix);
        if (listed[l]) {
            rc = sw_cli_fail(SUB,
                             "slopes table '%s', data row %lld: lenslet (%lld,%lld) is listed "
                             "twice",
                             path, (long long)r + 1, (long long)ix, (long long)iy);
            break;
        }
        listed[l] = 1;
        s->listed++;
        const double dx = t.cols[cdx][r] * scale, dy = t.cols[cdy][r] * scale;
        /* (kept as floats: a slope beyond FLT_MAX, in radians, would become infinite) */
        if ((!isnan(dx) && !(fabs(dx) <= FLT_MAX)) || (!isnan(dy) && !(fabs(dy) <= FLT_MAX))) {
            rc = sw_cli_fail(SUB,
                             "slopes table '%s', data row %lld: a slope beyond the range of float",
                             path, (long long)r + 1);
            break;
        }
        const int ok = (cvalid < 0 || t.cols[cvalid][r] != 0.0) && isfinite(dx) && isfinite(dy);
        if (ok) {
            s->valid[l] = 1;
            s->slopes[l] = (float)dx;
            s->slopes[n + l] = (float)dy;
            s->nvalid++;
        }
    }
    if (rc == SW_EXIT_OK && s->nvalid == 0)
        rc = sw_cli_fail(SUB, "slopes table '%s' has no valid lenslet (every slope is nan%s)", path,
                         cvalid >= 0 ? " or valid 0" : "");
    free(listed);
    sw_table_free(&t);
    return rc;
}

/* ------------------------------------------------------------------ the run */

typedef struct sabre_result {
    int32_t nx, ny;
    double pitch; /* --lenslet-um, or 1 */
    sw_backend backend;
    int gpu;            /* D-SABRE ran on the GPU */
    int32_t partitions; /* k actually used (dsabre) */
    sw_sabre_info info; /* dsabre */
    int have_lattice;   /* dsabre, global: lattice + values */
    sw_sabre_lattice lattice;
    double *values; /* sw_sabre_lattice_values doubles, piston removed */
    int64_t nvalues;
    double *act;             /* (nx + 1)(ny + 1), piston removed, nan at inactive corners */
    sw_sabre_spline *spline; /* global, degree >= 2: the plan (for the map) */
    double *coef;            /* its B-coefficients (raw: the map removes its own mean) */
    int64_t ncoef;
    int32_t active; /* corners of valid lenslets */
    double piston, rms, pv;
    double plan_us, run_us, run_us_min, run_us_mean, kernel_us;
    int32_t map_w, map_h;
} sabre_result;

static void result_free(sabre_result *r)
{
    free(r->values);
    free(r->act);
    free(r->coef);
    sw_sabre_spline_destroy(r->spline);
}

/* The spline of degree >= 2 at vertex (x, y) of its lattice: the first estimated triangle that
 * holds the vertex (the spline is continuous: they all agree), nan if none. */
static double spline_at_vertex(const sabre_result *r, double x, double y)
{
    const sw_sabre_lattice *l = &r->lattice;
    double v = sw_sabre_spline_eval(r->spline, r->coef, x, y);
    for (int32_t J = (int32_t)floor(y) - 1; isnan(v) && J <= (int32_t)floor(y); J++)
        for (int32_t I = (int32_t)floor(x) - 1; isnan(v) && I <= (int32_t)floor(x); I++) {
            if (I < 0 || J < 0 || I >= l->sx || J >= l->sy)
                continue;
            for (int q = 0; q < 4 && isnan(v); q++) {
                double o[3];
                const int64_t t = 4 * ((int64_t)J * l->sx + I) + q;
                if (sw_sabre_spline_eval_triangle(r->spline, r->coef, t, x, y, o) == SW_OK)
                    v = o[0];
            }
        }
    return v;
}

/* Corner (cx, cy) touches lenslets cx-1..cx by cy-1..cy: active when one of them is valid. */
static int corner_active(const slopes_in *s, int32_t cx, int32_t cy)
{
    for (int32_t iy = cy - 1; iy <= cy; iy++)
        for (int32_t ix = cx - 1; ix <= cx; ix++)
            if (ix >= 0 && iy >= 0 && ix < s->nx && iy < s->ny && s->valid[iy * s->nx + ix])
                return 1;
    return 0;
}

/* The partitions when --partitions is not given: 8, halved until it is below max(NX, NY). */
static int32_t default_partitions(int32_t nx, int32_t ny)
{
    const int32_t side = nx > ny ? nx : ny;
    int32_t k = DEF_PARTITIONS;
    while (k > 1 && k > side - 1)
        k /= 2;
    return k;
}

/* One timed run: the first is kept apart, the minimum and the sum (for the mean) updated. */
static void record_run(sabre_result *r, long i, double us, double *sum)
{
    if (i == 0)
        r->run_us = us;
    r->run_us_min = us < r->run_us_min ? us : r->run_us_min;
    *sum += us;
}

/* Runs the chosen reconstructor `repeat` times; fills r->act (raw) and r->values (raw). */
static int reconstruct(sw_context *ctx, const sabre_opts *o, const slopes_in *s, sabre_result *r)
{
    const size_t nact = (size_t)(s->nx + 1) * (size_t)(s->ny + 1);
    const long repeat = o->repeat;
    sw_status st = SW_OK;
    int rc = SW_EXIT_OK;
    double t0, sum = 0.0;
    r->run_us_min = INFINITY;
    r->kernel_us = -1.0;
    if (!(r->act = malloc(sizeof(double) * nact)))
        return sw_cli_fail(SUB, "out of memory");

    if (o->method == METHOD_DSABRE) {
        sw_sabre_params p;
        sw_sabre_params_default(&p);
        p.nx = s->nx;
        p.ny = s->ny;
        p.pitch = r->pitch;
        p.valid = s->valid;
        p.partitions = r->partitions;
        p.overlap = (int32_t)o->overlap;
        p.pme = o->pme;
        p.dpme_iterations = (int32_t)o->dpme_iterations;
        p.padding = o->padding;
        p.fill_iterations = (int32_t)o->fill;
        p.robust_passes = (int32_t)o->robust_passes;
        p.robust_threshold = o->robust_threshold;
        sw_sabre *plan = NULL;
        float *vals = NULL, *act = NULL;
        t0 = sw_cli_now();
        if ((st = sw_sabre_create(ctx, &p, &plan)) != SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        r->plan_us = 1e6 * (sw_cli_now() - t0);
        sw_sabre_get_info(plan, &r->info);
        r->lattice = r->info.lattice;
        r->have_lattice = 1;
        r->nvalues = sw_sabre_lattice_values(&r->lattice);
        r->gpu = r->backend == SW_BACKEND_CUDA;
        vals = malloc(sizeof(float) * (size_t)r->nvalues);
        act = malloc(sizeof(float) * nact);
        r->values = malloc(sizeof(double) * (size_t)r->nvalues);
        if (!vals || !act || !r->values)
            rc = sw_cli_fail(SUB, "out of memory");
        for (long i = 0; rc == SW_EXIT_OK && i < repeat; i++) {
            t0 = sw_cli_now();
            st = sw_sabre_run(plan, s->slopes, SW_MEM_HOST, vals, act);
            const double us = 1e6 * (sw_cli_now() - t0);
            if (st != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
                break;
            }
            record_run(r, i, us, &sum);
        }
        if (rc == SW_EXIT_OK) {
            r->kernel_us = sw_sabre_kernel_us(plan);
            for (int64_t v = 0; v < r->nvalues; v++)
                r->values[v] = vals[v];
            for (size_t c = 0; c < nact; c++)
                r->act[c] = act[c];
        }
        free(vals);
        free(act);
        sw_sabre_destroy(plan);
    } else if (o->method == METHOD_GLOBAL && o->degree > 1) {
        sw_sabre_spline_params p;
        sw_sabre_spline_params_default(&p);
        p.nx = s->nx;
        p.ny = s->ny;
        p.pitch = r->pitch;
        p.valid = s->valid;
        p.degree = (int32_t)o->degree;
        p.continuity = (int32_t)o->continuity;
        p.smoothing = o->smoothing;
        t0 = sw_cli_now();
        if ((st = sw_sabre_spline_create(ctx, &p, &r->spline)) != SW_OK ||
            (st = sw_sabre_spline_set_robust(r->spline, (int32_t)o->robust_passes,
                                             o->robust_threshold)) != SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        r->plan_us = 1e6 * (sw_cli_now() - t0);
        sw_sabre_spline_lattice(r->spline, &r->lattice);
        r->have_lattice = 1;
        r->nvalues = sw_sabre_lattice_values(&r->lattice);
        r->ncoef = sw_sabre_spline_coefficients(r->spline);
        r->values = malloc(sizeof(double) * (size_t)r->nvalues);
        r->coef = malloc(sizeof(double) * (size_t)r->ncoef);
        if (!r->values || !r->coef)
            rc = sw_cli_fail(SUB, "out of memory");
        for (long i = 0; rc == SW_EXIT_OK && i < repeat; i++) {
            t0 = sw_cli_now();
            st = sw_sabre_spline_run(r->spline, s->slopes, r->coef);
            const double us = 1e6 * (sw_cli_now() - t0);
            if (st != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
                break;
            }
            record_run(r, i, us, &sum);
        }
        if (rc == SW_EXIT_OK) {
            /* the vertex values (sabre.h's order: corners, then centres) and the corners */
            const sw_sabre_lattice *l = &r->lattice;
            int64_t v = 0;
            for (int32_t J = 0; J <= l->sy; J++)
                for (int32_t I = 0; I <= l->sx; I++)
                    r->values[v++] = spline_at_vertex(r, I, J);
            for (int32_t J = 0; J < l->sy; J++)
                for (int32_t I = 0; I < l->sx; I++)
                    r->values[v++] = spline_at_vertex(r, I + 0.5, J + 0.5);
            /* a lenslet corner is a square's centre, where sw_sabre_spline_eval picks the bottom
             * triangle: on a rim whose lower lenslets are invalid that one is not estimated */
            for (int32_t cy = 0; cy <= s->ny; cy++)
                for (int32_t cx = 0; cx <= s->nx; cx++)
                    r->act[(size_t)cy * (s->nx + 1) + cx] = spline_at_vertex(r, cx - 0.5, cy - 0.5);
        }
    } else if (o->method == METHOD_GLOBAL) {
        sw_sabre_global *g = NULL;
        sw_sabre_global_params gp;
        sw_sabre_global_params_default(&gp);
        gp.nx = s->nx;
        gp.ny = s->ny;
        gp.pitch = r->pitch;
        gp.valid = s->valid;
        gp.robust_passes = (int32_t)o->robust_passes;
        gp.robust_threshold = o->robust_threshold;
        t0 = sw_cli_now();
        if ((st = sw_sabre_global_create_params(ctx, &gp, &g)) != SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        r->plan_us = 1e6 * (sw_cli_now() - t0);
        sw_sabre_global_lattice(g, &r->lattice);
        r->have_lattice = 1;
        r->nvalues = sw_sabre_lattice_values(&r->lattice);
        if (!(r->values = malloc(sizeof(double) * (size_t)r->nvalues)))
            rc = sw_cli_fail(SUB, "out of memory");
        for (long i = 0; rc == SW_EXIT_OK && i < repeat; i++) {
            t0 = sw_cli_now();
            st = sw_sabre_global_run(g, s->slopes, r->values);
            const double us = 1e6 * (sw_cli_now() - t0);
            if (st != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
                break;
            }
            record_run(r, i, us, &sum);
        }
        if (rc == SW_EXIT_OK)
            sw_sabre_eval_corners(&r->lattice, r->values, s->nx, s->ny, r->act);
        sw_sabre_global_destroy(g);
    } else {
        sw_fried *f = NULL;
        const double reg = o->have_reg ? o->fried_reg : DEF_FRIED_REG;
        t0 = sw_cli_now();
        if ((st = sw_fried_create(ctx, s->nx, s->ny, r->pitch, s->valid, reg, &f)) != SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        r->plan_us = 1e6 * (sw_cli_now() - t0);
        for (long i = 0; rc == SW_EXIT_OK && i < repeat; i++) {
            t0 = sw_cli_now();
            st = sw_fried_run(f, s->slopes, r->act);
            const double us = 1e6 * (sw_cli_now() - t0);
            if (st != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
                break;
            }
            record_run(r, i, us, &sum);
        }
        sw_fried_destroy(f);
    }
    r->run_us_mean = sum / (double)repeat;
    return rc;
}

/* Piston, RMS and peak-to-valley over the active corners; inactive corners become nan. */
static int remove_piston(sabre_method method, const slopes_in *s, sabre_result *r)
{
    const int32_t nx = s->nx, ny = s->ny;
    double sum = 0.0;
    int32_t n = 0;
    for (int32_t cy = 0; cy <= ny; cy++)
        for (int32_t cx = 0; cx <= nx; cx++) {
            double *w = &r->act[(size_t)cy * (nx + 1) + cx];
            if (!corner_active(s, cx, cy)) {
                *w = NAN;
                continue;
            }
            if (!isfinite(*w))
                return sw_cli_fail(SUB,
                                   "internal error: the %s wavefront at lenslet corner (%d,%d) "
                                   "is %g",
                                   method_name(method), (int)cx, (int)cy, *w);
            sum += *w;
            n++;
        }
    r->active = n;
    r->piston = sum / (double)n;
    double ss = 0.0, lo = INFINITY, hi = -INFINITY;
    for (size_t c = 0; c < (size_t)(nx + 1) * (size_t)(ny + 1); c++) {
        if (isnan(r->act[c]))
            continue;
        const double w = r->act[c] - r->piston;
        r->act[c] = w;
        ss += w * w;
        lo = w < lo ? w : lo;
        hi = w > hi ? w : hi;
    }
    r->rms = sqrt(ss / (double)n);
    r->pv = hi - lo;
    for (int64_t v = 0; r->values && v < r->nvalues; v++)
        r->values[v] -= r->piston;
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

static int write_actuators(const char *path, const slopes_in *s, const sabre_result *r)
{
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, path);
    if (rc != SW_EXIT_OK)
        return rc;
    fputs("cx,cy,w\n", out.f);
    for (int32_t cy = 0; cy <= s->ny; cy++)
        for (int32_t cx = 0; cx <= s->nx; cx++) {
            fprintf(out.f, "%d,%d,", (int)cx, (int)cy);
            put_number(out.f, r->act[(size_t)cy * (s->nx + 1) + cx]);
            fputc('\n', out.f);
        }
    return sw_cli_out_close(SUB, &out, 1);
}

static int write_values(const char *path, const sabre_result *r)
{
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, path);
    if (rc != SW_EXIT_OK)
        return rc;
    const sw_sabre_lattice *l = &r->lattice;
    fputs("kind,I,J,x,y,w\n", out.f);
    int64_t v = 0;
    for (int32_t J = 0; J <= l->sy; J++)
        for (int32_t I = 0; I <= l->sx; I++, v++) {
            fprintf(out.f, "corner,%d,%d,%d,%d,", (int)I, (int)J, (int)(I - l->offx),
                    (int)(J - l->offy));
            put_number(out.f, r->values[v]);
            fputc('\n', out.f);
        }
    for (int32_t J = 0; J < l->sy; J++)
        for (int32_t I = 0; I < l->sx; I++, v++) {
            fprintf(out.f, "centre,%d,%d,%.1f,%.1f,", (int)I, (int)J, I + 0.5 - l->offx,
                    J + 0.5 - l->offy);
            put_number(out.f, r->values[v]);
            fputc('\n', out.f);
        }
    return sw_cli_out_close(SUB, &out, 1);
}

/* The keys of the FITS map: the wavefront's unit, the map's coordinates over the lenslet array
 * (lenslet (ix, iy) centred on (ix, iy) pitches) and the reconstruction. */
static void map_header(sw_cli_hdr *h, const sabre_opts *o, const slopes_in *s,
                       const sabre_result *r, int32_t w, int32_t hgt)
{
    if (o->have_lenslet)
        sw_cli_hdr_init(h, "um", "wavefront; NaN where the lenslet is invalid");
    else
        sw_cli_hdr_init(h, "", "wavefront / lenslet pitch (slopes x pitches); NaN: invalid");
    sw_cli_hdr_comment(h, "spotwave sabre: the %s wavefront over the lenslet array, mean 0",
                       method_name(o->method));
    sw_cli_hdr_command(h);
    const double unit = o->have_lenslet ? o->lenslet_um : 1.0;
    sw_cli_hdr_wcs_linear(h, "ARRAYX", "ARRAYY", o->have_lenslet ? "um" : "", 0.5, 0.5, -0.5 * unit,
                          -0.5 * unit, unit * s->nx / w, unit * s->ny / hgt);
    sw_cli_hdr_str(h, "METHOD", method_name(o->method), "reconstructor");
    sw_cli_hdr_int(h, "GRIDNX", s->nx, "lenslets across");
    sw_cli_hdr_int(h, "GRIDNY", s->ny, "lenslets down");
    sw_cli_hdr_int(h, "NVALID", s->nvalid, "valid lenslets");
    if (o->have_lenslet)
        sw_cli_hdr_num(h, "LENSLET", o->lenslet_um, "[um] lenslet pitch");
    sw_cli_hdr_str(h, "SLOPES", s->radians ? "dx_rad,dy_rad" : "dx_px,dy_px", "slope columns");
    if (!s->radians) {
        sw_cli_hdr_num(h, "XPIXSZ", o->pixel_um, "[um] detector pixel pitch");
        sw_cli_hdr_num(h, "FOCALLEN", o->focal_mm, "[mm] lenslet focal length");
    }
    if (o->method == METHOD_DSABRE) {
        sw_cli_hdr_int(h, "PARTS", r->partitions, "partitions per side (k)");
        sw_cli_hdr_int(h, "OVERLAP", o->overlap, "partition overlap");
        sw_cli_hdr_str(h, "PME", sw_sabre_pme_string(o->pme), "piston mode equalisation");
    }
    if (o->method == METHOD_FRIED)
        sw_cli_hdr_num(h, "FRIEDREG", o->fried_reg, "Fried regularisation");
    if (o->method != METHOD_FRIED) {
        sw_cli_hdr_int(h, "DEGREE", (int32_t)o->degree, "spline degree d");
        sw_cli_hdr_int(h, "CONTIN", (int32_t)o->continuity, "spline continuity order r");
        sw_cli_hdr_int(h, "ROBUST", (int32_t)o->robust_passes, "robust passes (Huber)");
        if (o->robust_passes > 0)
            sw_cli_hdr_num(h, "ROBUSTK", o->robust_threshold,
                           "robust threshold, x median residual");
    }
    if (r->spline)
        sw_cli_hdr_num(h, "SMOOTH", sw_sabre_spline_smoothing(r->spline),
                       "weight of the soft spline conditions");
}

/* The map: the spline (sw_sabre_map, sw_sabre_spline_map) or Fried's bilinear phase (sw_fried_eval)
 * at the pixel centres, nan where the pixel's lenslet is invalid, mean 0 over the rest. */
static int write_map(sw_context *ctx, const sabre_opts *o, const slopes_in *s, sabre_result *r)
{
    const int32_t side = s->nx > s->ny ? s->nx : s->ny;
    long size = o->have_map_size ? o->map_size : 16L * side;
    if (!o->have_map_size && size > DEF_MAP_CAP)
        size = DEF_MAP_CAP;
    const int32_t w = (int32_t)fmax(1.0, floor((double)size * s->nx / side + 0.5));
    const int32_t h = (int32_t)fmax(1.0, floor((double)size * s->ny / side + 0.5));
    r->map_w = w;
    r->map_h = h;
    double *m = malloc(sizeof(double) * (size_t)w * (size_t)h);
    if (!m)
        return sw_cli_fail(SUB, "out of memory (a %dx%d map)", (int)w, (int)h);
    sw_status st = SW_OK;
    if (r->spline) {
        st = sw_sabre_spline_map(r->spline, r->coef, w, h, m);
    } else if (r->have_lattice) {
        st = sw_sabre_map(ctx, &r->lattice, r->values, s->nx, s->ny, w, h, m);
    } else {
        for (int32_t k = 0; k < h; k++)
            for (int32_t i = 0; i < w; i++)
                m[(size_t)k * w + i] =
                    sw_fried_eval(s->nx, s->ny, r->act, -0.5 + (i + 0.5) * s->nx / (double)w,
                                  -0.5 + (k + 0.5) * s->ny / (double)h);
    }
    if (st != SW_OK) {
        free(m);
        return sw_cli_fail(SUB, "map: %s", sw_cli_lib_error(ctx, st));
    }
    /* The pixel's lenslet: the one whose square [ix - 1/2, ix + 1/2) holds its centre. */
    double sum = 0.0;
    int64_t n = 0;
    for (int32_t k = 0; k < h; k++) {
        const int32_t iy = (int32_t)floor((k + 0.5) * s->ny / (double)h);
        for (int32_t i = 0; i < w; i++) {
            const int32_t ix = (int32_t)floor((i + 0.5) * s->nx / (double)w);
            double *p = &m[(size_t)k * w + i];
            if (ix >= s->nx || iy >= s->ny || !s->valid[iy * s->nx + ix] || !isfinite(*p)) {
                *p = NAN;
                continue;
            }
            sum += *p;
            n++;
        }
    }
    const double mean = n > 0 ? sum / (double)n : 0.0;
    sw_image img;
    if ((st = sw_image_alloc(ctx, w, h, SW_PIX_F32, &img)) != SW_OK) {
        free(m);
        return sw_cli_fail(SUB, "map: %s", sw_cli_lib_error(ctx, st));
    }
    for (int32_t k = 0; k < h; k++) {
        float *row = sw_image_row(&img, k);
        for (int32_t i = 0; i < w; i++)
            row[i] = (float)(m[(size_t)k * w + i] - mean);
    }
    free(m);
    const char *staged = sw_cli_file_staged("--map", o->map);
    if (!staged) {
        sw_image_free(&img);
        return SW_EXIT_FAIL;
    }
    if (sw_cli_ends_with(o->map, ".png")) {
        /* as the other --map pictures: blue-white-red about 0, a colour bar, no data clear */
        char title[160];
        snprintf(title, sizeof title, "%s wavefront, %dx%d lenslets", method_name(o->method),
                 (int)s->nx, (int)s->ny);
        sw_png_options po;
        sw_png_options_default(&po);
        po.colormap = SW_CMAP_DIVERGING;
        po.scale_bar = 1;
        po.label = o->have_lenslet ? "\xc2\xb5m" : "wavefront / pitch";
        po.nan_transparent = 1;
        po.title = title;
        st = sw_png_write(ctx, staged, &img, &po);
    } else {
        sw_cli_hdr hdr;
        map_header(&hdr, o, s, r, w, h);
        st = sw_cli_hdr_write(ctx, staged, &img, 1, &hdr);
    }
    sw_image_free(&img);
    return st == SW_OK ? SW_EXIT_OK : sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
}

/* ------------------------------------------------------------------ the report */

static void print_report(const sabre_opts *o, const slopes_in *s, const sabre_result *r)
{
    const int ds = o->method == METHOD_DSABRE;
    const char *unit = o->have_lenslet ? "um" : "rad x pitch";
    if (!o->json) {
        printf("sabre: %s, grid %dx%d, %d valid lenslets of %d listed, slopes from %s\n",
               method_name(o->method), (int)s->nx, (int)s->ny, (int)s->nvalid, (int)s->listed,
               s->radians ? "dx_rad,dy_rad" : "dx_px,dy_px");
        if (ds)
            printf("  partitions %dx%d of %d squares, window %d, overlap %d, %s PME%s\n",
                   (int)r->info.k, (int)r->info.k, (int)r->info.m, (int)r->info.window,
                   (int)o->overlap, sw_sabre_pme_string(o->pme), r->gpu ? ", on the GPU" : "");
        if (r->spline)
            printf("  spline     degree %ld, C%ld, smoothing %g, %lld B-coefficients, on the "
                   "host%s\n",
                   o->degree, o->continuity, sw_sabre_spline_smoothing(r->spline),
                   (long long)r->ncoef,
                   r->backend == SW_BACKEND_CUDA ? " (CPU code: the GPU is not used)" : "");
        if (o->robust_passes > 0)
            printf("  robust     %ld passes, threshold %g x the median residual\n",
                   o->robust_passes, o->robust_threshold);
        printf("  wavefront  RMS %.6g %s, peak-to-valley %.6g %s over %d lenslet corners\n", r->rms,
               unit, r->pv, unit, (int)r->active);
        printf("  time       plan %.1f us, run %.1f us", r->plan_us, r->run_us);
        if (o->repeat > 1)
            printf(" (min %.1f, mean %.1f of %ld)", r->run_us_min, r->run_us_mean, o->repeat);
        if (r->kernel_us >= 0)
            printf(", kernels %.1f us", r->kernel_us);
        printf(" (%s backend)\n", sw_backend_string(r->backend));
        printf("  wrote     ");
        const char *files[3] = {o->actuators, o->values, o->map};
        int any = 0;
        for (int i = 0; i < 3; i++)
            if (files[i])
                printf("%s %s", any++ ? "," : "", strcmp(files[i], "-") ? files[i] : "stdout");
        printf("%s\n", any ? "" : " nothing");
        return;
    }
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "sabre");
    sw_cli_json_string(j, "input", o->input);
    sw_cli_json_int(j, "rows", s->rows);
    sw_cli_json_int(j, "grid_nx", s->nx);
    sw_cli_json_int(j, "grid_ny", s->ny);
    sw_cli_json_int(j, "lenslets_listed", s->listed);
    sw_cli_json_int(j, "lenslets_valid", s->nvalid);
    sw_cli_json_string(j, "slopes", s->radians ? "rad" : "px");
    sw_cli_json_double(j, "lenslet_um", o->have_lenslet ? o->lenslet_um : NAN);
    sw_cli_json_string(j, "unit", o->have_lenslet ? "um" : "rad_pitch");
    sw_cli_json_string(j, "method", method_name(o->method));
    if (ds) {
        const sw_sabre_info *i = &r->info;
        sw_cli_json_string(j, "pme", sw_sabre_pme_string(o->pme));
        sw_cli_json_int(j, "partitions", i->k);
        sw_cli_json_int(j, "m", i->m);
        sw_cli_json_int(j, "window", i->window);
        sw_cli_json_int(j, "overlap", o->overlap);
        sw_cli_json_int(j, "extended", i->extended);
        sw_cli_json_int(j, "local_values", i->local_values);
        int levels = 0;
        while ((1 << levels) < i->k)
            levels++;
        sw_cli_json_int(j, "local_slopes", i->local_slopes);
        sw_cli_json_int(j, "iterations",
                        o->pme == SW_SABRE_PME_DISTRIBUTED    ? (int)i->dpme_iterations
                        : o->pme == SW_SABRE_PME_HIERARCHICAL ? levels
                                                              : 0);
        sw_cli_json_double(j, "null_check", i->null_check >= 0 ? i->null_check : NAN);
    } else {
        static const char *const none[] = {"pme",    "partitions", "m",
                                           "window", "overlap",    "iterations"};
        for (size_t k = 0; k < sizeof none / sizeof none[0]; k++)
            cJSON_AddNullToObject(j, none[k]);
    }
    if (o->method == METHOD_FRIED) {
        cJSON_AddNullToObject(j, "degree");
        cJSON_AddNullToObject(j, "continuity");
    } else {
        sw_cli_json_int(j, "degree", (int32_t)o->degree);
        sw_cli_json_int(j, "continuity", (int32_t)o->continuity);
    }
    sw_cli_json_double(j, "smoothing", r->spline ? sw_sabre_spline_smoothing(r->spline) : NAN);
    if (o->method == METHOD_FRIED) {
        cJSON_AddNullToObject(j, "robust_passes");
        cJSON_AddNullToObject(j, "robust_threshold");
    } else {
        sw_cli_json_int(j, "robust_passes", (int32_t)o->robust_passes);
        sw_cli_json_double(j, "robust_threshold", o->robust_threshold);
    }
    if (r->spline)
        sw_cli_json_int(j, "coefficients", r->ncoef);
    sw_cli_json_double(j, "fried_reg",
                       o->method == METHOD_FRIED ? (o->have_reg ? o->fried_reg : DEF_FRIED_REG)
                                                 : NAN);
    if (r->have_lattice) {
        cJSON *l = cJSON_AddObjectToObject(j, "lattice");
        sw_cli_json_int(l, "sx", r->lattice.sx);
        sw_cli_json_int(l, "sy", r->lattice.sy);
        sw_cli_json_int(l, "offx", r->lattice.offx);
        sw_cli_json_int(l, "offy", r->lattice.offy);
    }
    sw_cli_json_int(j, "corners_active", r->active);
    sw_cli_json_double(j, "rms", r->rms);
    sw_cli_json_double(j, "pv", r->pv);
    sw_cli_json_double(j, "piston_removed", r->piston);
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_string(j, "path", r->gpu ? "gpu" : "host");
    sw_cli_json_int(j, "repeat", o->repeat);
    sw_cli_json_double(j, "plan_us", r->plan_us);
    sw_cli_json_double(j, "run_us", r->run_us);
    sw_cli_json_double(j, "run_us_min", r->run_us_min);
    sw_cli_json_double(j, "run_us_mean", r->run_us_mean);
    sw_cli_json_double(j, "kernel_us", r->kernel_us >= 0 ? r->kernel_us : NAN);
    sw_cli_json_string(j, "actuators", o->actuators);
    sw_cli_json_string(j, "values", o->values);
    sw_cli_json_string(j, "map", o->map);
    if (o->map) {
        sw_cli_json_int(j, "map_width", r->map_w);
        sw_cli_json_int(j, "map_height", r->map_h);
    }
    sw_cli_json_print(j);
}

/* ------------------------------------------------------------------ the command */

int sw_cmd_sabre(const sw_cli_globals *g, int argc, char **argv)
{
    sabre_opts o;
    memset(&o, 0, sizeof o);
    o.method = METHOD_DSABRE;
    o.pme = SW_SABRE_PME_HIERARCHICAL;
    o.overlap = DEF_OVERLAP;
    o.fried_reg = DEF_FRIED_REG;
    o.repeat = 1;
    o.lenslet_um = 1.0;
    int rc = parse_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    sw_cli_file_in("slopes", o.input);
    sw_cli_file_out("--actuators", o.actuators);
    sw_cli_file_out("--values", o.values);
    sw_cli_file_out("--map", o.map);
    if ((rc = sw_cli_files_check()) != SW_EXIT_OK)
        return rc;

    sw_context *ctx = NULL;
    if ((rc = sw_cli_context(g, SUB, &ctx)) != SW_EXIT_OK)
        return rc;
    slopes_in s;
    sabre_result r;
    memset(&r, 0, sizeof r);
    if ((rc = read_slopes(ctx, &o, &s)) != SW_EXIT_OK)
        goto done;
    r.nx = s.nx;
    r.ny = s.ny;
    r.pitch = o.have_lenslet ? o.lenslet_um : 1.0;
    r.backend = sw_context_backend(ctx);
    r.partitions = o.have_partitions ? (int32_t)o.partitions : default_partitions(s.nx, s.ny);
    if ((rc = reconstruct(ctx, &o, &s, &r)) != SW_EXIT_OK)
        goto done;
    if ((rc = remove_piston(o.method, &s, &r)) != SW_EXIT_OK)
        goto done;
    if (o.map && (rc = write_map(ctx, &o, &s, &r)) != SW_EXIT_OK)
        goto done;
    if (o.values && (rc = write_values(o.values, &r)) != SW_EXIT_OK)
        goto done;
    if (o.actuators && (rc = write_actuators(o.actuators, &s, &r)) != SW_EXIT_OK)
        goto done;
    const int table_to_stdout =
        (o.actuators && strcmp(o.actuators, "-") == 0) || (o.values && strcmp(o.values, "-") == 0);
    if (!table_to_stdout)
        print_report(&o, &s, &r);
done:
    slopes_free(&s);
    result_free(&r);
    sw_context_destroy(ctx);
    return rc;
}
