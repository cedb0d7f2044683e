/*
 * spotwave pupil: the pupil ellipse(s) of one or two eyes tracked on their Hartmann-Shack images
 * (Mompean et al. 2019 Sec. 3.1, pupil.h) in every frame of one or more images (FITS, PGM,
 * Eiger/NeXus HDF5); a CSV out (DESIGN.md: pupil,cx_px,cy_px,a_px,b_px,angle_deg,inliers first,
 * then valid,threshold,failure,near), optionally a JSON report with every field of the result, the
 * lenslet mask of a Shack-Hartmann grid, a picture of the fit, and a progress bar on stderr for
 * long runs.
 */
#define _GNU_SOURCE

#include "cli.h"
#include "cli_mpi.h"
#include "json.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB "pupil"

#define PI 3.14159265358979323846

void sw_cmd_pupil_help(FILE *out)
{
    sw_pupil_params d;
    sw_pupil_params_default(&d, 640, 640, SW_PIX_U8);
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] pupil IMAGE... [OPTIONS]\n"
        "\n"
        "Tracks the pupil of one eye (or, with --binocular, of two eyes side by side) on\n"
        "Hartmann-Shack images, where the retina's diffuse glow lights the pupil against the\n"
        "dark iris (Mompean, Aragon, Prieto & Artal 2019, Future Gener. Comput. Syst. 91, 177,\n"
        "Sec. 3.1): 8-bit conversion, Gaussian smoothing, a threshold per eye (Otsu's split of\n"
        "its histogram, then an edge level between the iris and the pupil), morphological\n"
        "close, border pixels, RANSAC ellipses, a least-squares refit. Without glow (an\n"
        "artificial eye, a bench, a dim retina) and with the lenslet grid given, a pupil that\n"
        "path does not find is found from the spots instead (pupil.h; not in Mompean et al.):\n"
        "a walk over the grid follows each lenslet's spot wherever the wavefront moved it,\n"
        "its light over a fully lit lenslet's nearby is the lenslet's share of the pupil, the\n"
        "outline is where that share crosses 1/2, and an ellipse is fitted to it. At pitches\n"
        "of at most 4 x the smoothing's sigma (16 px by default), where the smoothed spots\n"
        "look like a glow, the spots path measures every pupil it finds. A pupil can also be\n"
        "given, and then nothing is tracked.\n"
        "\n"
        "Writes one CSV row per pupil and frame:\n"
        "  pupil,cx_px,cy_px,a_px,b_px,angle_deg,inliers,valid,threshold,failure,near,method\n"
        "pupil 0 is the left eye (smaller x); centre and semi-axes (a >= b) in pixels (0-based:\n"
        "the centre of pixel (0,0) is (0,0)), angle of the major axis in degrees from +x\n"
        "towards +y in [0, 180); inliers: border pixels on the fitted ellipse; valid: 1 when\n"
        "the pupil was found; threshold: the eye's threshold on the 8-bit smoothed image\n"
        "(inside: above it; -1: none); failure: why a pupil was not found (empty when found);\n"
        "near: border pixels just off the fitted ellipse (2 to 4 x --inlier-px from it), many\n"
        "of which mark thresholded noise; method: glow, spots or given (how it was found, or\n"
        "the last way tried). A pupil not found has nan in cx_px..angle_deg. When\n"
        "the inputs hold more than one frame, a first column 'frame' (0-based, counted across\n"
        "all inputs) is added.\n"
        "\n"
        "Input:\n"
        "  IMAGE...               FITS (2-D, or a cube of frames), 8/16-bit PGM, CBF, TIFF\n"
        "                         (every page a frame), or HDF5 as Eiger detectors write it\n"
        "                         (a NeXus master or a data file);\n"
        "                         every frame of every input, which must share one size and\n"
        "                         pixel type (8/16/32-bit unsigned or float)\n"
        "  --dataset PATH         HDF5 dataset to read instead of the automatic "
        "choice\n" SW_CLI_H5_LINKS_HELP
        "  --first N              first frame to process (default 0)\n"
        "  --count N              number of frames (default: all from --first)\n"
        "\n"
        "Tracking (pupil.h; defaults are Mompean et al.'s where the paper gives them):\n"
        "  --binocular            two pupils, a left and a right one (default: one)\n"
        "  --split X              binocular: the first column of the right eye's region\n"
        "                         (default: found in each frame, the darkest valley between the\n"
        "                         eyes)\n"
        "  --scale S              8-bit conversion u8 = v * S, rounded, clamped to 0..255\n"
        "                         (default: 128 / the mean of the pixels above the frame's\n"
        "                         mean, in each frame)\n"
        "  --gauss-radius R       Gaussian smoothing radius, 0..%d (default %d; 0: none)\n"
        "  --gauss-sigma S        its sigma, pixels (default %g)\n"
        "  --otsu-classes 2|3     the threshold's first split: Otsu's of the eye's histogram\n"
        "                         (clipped at 1.5 x the median above its mean) into two\n"
        "                         classes, or into three (iris | pupil | bright) at the lower\n"
        "                         of their two thresholds (default %d)\n"
        "  --edge-level F|auto    the threshold: the iris' mean plus F x (the pupil's median -\n"
        "                         the iris' mean), 0 <= F < 1 (0: Otsu's split); auto (the\n"
        "                         default): F = 0.4, then, after the ellipse is found,\n"
        "                         the half height of its edge, measured in bands about it (the\n"
        "                         glow inside extrapolated to the edge, the iris outside),\n"
        "                         and the fit again until the threshold stays (at most 4\n"
        "                         times): the radius holds when the glow falls off towards\n"
        "                         the edge. A fixed F takes about half the time: 0.4 suits a\n"
        "                         30 %% fall-off, (1 - f) / (2 - f) a known fall-off f\n"
        "  --close-radius R       morphological close: a (2R+1)^2 square, 0..%d (default %d)\n"
        "  --candidates N         RANSAC ellipses per pupil, a multiple of 32 in 32..%d\n"
        "                         (default %d)\n"
        "  --inlier-px D          a border pixel within D pixels of an ellipse votes for it\n"
        "                         (default %g)\n"
        "  --refine N             least-squares refits of the winner, 0..20 (default %d)\n"
        "  --min-radius PX        smallest semi-axis accepted (default: a tenth of the\n"
        "                         frame's smaller side)\n"
        "  --max-radius PX        largest semi-axis accepted (default: the frame's larger side)\n"
        "  --min-coverage F       inliers needed, as a fraction of the perimeter, 0..1\n"
        "                         (default %g)\n"
        "  --max-near-ratio F|inf border pixels just off the ellipse allowed, as a fraction of\n"
        "                         its inliers, >= 0 (default %g; inf: no such test)\n"
        "  --seed S               the RANSAC random numbers (default %llu)\n"
        "  --pupil-method auto|glow|spots\n"
        "                         auto (default): the spots path, with the lenslet grid,\n"
        "                         where the glow path finds no pupil, or finds it only at a\n"
        "                         lower edge level whose half-height refit fails (a glow\n"
        "                         falling off steeply: fallback_reason is the first fit's\n"
        "                         failure), and for every pupil at pitches of at most 4 x\n"
        "                         the smoothing's sigma; glow: never the spots path; spots:\n"
        "                         the spots path for every pupil (an instrument without\n"
        "                         glow). The JSON's method, fallback_reason and spots_failure\n"
        "                         say what happened\n"
        "\n"
        "Given pupils (nothing tracked; pupil.h):\n"
        "%s"
        "\n"
        "Lenslet mask (the lenslets inside each pupil, for the centroid stage):\n"
        "  --pitch PX             lenslet pitch, pixels\n"
        "  --grid NXxNY           lenslets across and down\n"
        "  --origin X0,Y0         corner pixel of lenslet (0,0); all three are needed, as\n"
        "                         'spotwave centroid' and 'spotwave sim sh' take them\n"
        "  --lenslet-rule full|centre\n"
        "                         a lenslet is inside a pupil when its whole square is\n"
        "                         (default full) or its centre is\n"
        "  --lenslet-mask CSV     writes ix,iy,valid,pupil per lenslet (rows iy, then ix; a\n"
        "                         first column 'frame' as above): pupil 0 or 1 and valid 1\n"
        "                         inside exactly one found pupil, pupil -1 and valid 0\n"
        "                         elsewhere. A one-frame file is a --mask for 'spotwave\n"
        "                         centroid'.\n"
        "\n"
        "Output:\n"
        "  -o, --out FILE         the CSV (default: standard output)\n"
        "  --json                 print a JSON report on standard output (needs --out FILE):\n"
        "                         the parameters, and per frame the 8-bit scale, the split\n"
        "                         column and every field of each pupil (failure phrases too)\n"
        "  --overlay FILE.png     a picture of the last frame processed: its 8-bit image in\n"
        "                         false colour (viridis, dark purple to green), the border\n"
        "                         pixels in black, the fitted ellipses and their centres in\n"
        "                         yellow (and the split column, dotted, for two eyes)\n"
        "  --progress / --no-progress  a progress bar on stderr (default: when stderr is a\n"
        "                         terminal and there is more than one frame)\n"
        "  -h, --help             this help\n"
        "\n"
        "Under mpirun (a spotwave built with MPI), e.g. 'mpirun -np 4 spotwave pupil\n"
        "FILES... --out out.csv', the frames are dealt to the processes in\n"
        "contiguous blocks (each on its own GPU or CPU cores) and rank 0 writes every output\n"
        "once, the same bytes as one process when every process uses the same number of\n"
        "BLAS threads (OPENBLAS_NUM_THREADS). A frame that fails stops its rank's block;\n"
        "rank 0 lists the failed frames and the run fails.\n"
        "\n"
        "Exit status: 0 when every frame was processed, whether or not its pupils were found\n"
        "(see valid and failure); 1 when an input cannot be read or used, or an output cannot\n"
        "be written; 2 for a bad option.\n"
        "\n"
        "Example:\n"
        "  spotwave sim eye --binocular --out eyes.pgm --truth eyes\n"
        "  spotwave pupil eyes.pgm --binocular --overlay fit.png\n",
        SW_PUPIL_MAX_RADIUS, d.gauss_radius, d.gauss_sigma, d.otsu_classes, SW_PUPIL_MAX_RADIUS,
        d.close_radius, SW_PUPIL_MAX_CANDIDATES, d.candidates, d.inlier_px, d.refine_iterations,
        d.min_coverage, d.max_near_ratio, (unsigned long long)d.seed, sw_cli_given_help);
}

enum {
    OPT_DATASET = 256,
    OPT_H5_LINK_DIRS,
    OPT_H5_LINKS_ANYWHERE,
    OPT_FIRST,
    OPT_COUNT,
    OPT_BINOCULAR,
    OPT_SPLIT,
    OPT_SCALE,
    OPT_GAUSS_RADIUS,
    OPT_GAUSS_SIGMA,
    OPT_OTSU_CLASSES,
    OPT_EDGE_LEVEL,
    OPT_CLOSE_RADIUS,
    OPT_CANDIDATES,
    OPT_INLIER,
    OPT_REFINE,
    OPT_MIN_RADIUS,
    OPT_MAX_RADIUS,
    OPT_MIN_COVERAGE,
    OPT_MAX_NEAR_RATIO,
    OPT_SEED,
    OPT_PITCH,
    OPT_GRID,
    OPT_ORIGIN,
    OPT_LENSLET_RULE,
    OPT_LENSLET_MASK,
    OPT_JSON,
    OPT_OVERLAY,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
    OPT_PUPIL_CENTER,
    OPT_PUPIL_RADIUS,
    OPT_PUPIL_ELLIPSE,
    OPT_PUPIL_METHOD,
};

typedef struct pupil_opts {
    char **inputs;
    int ninputs;
    const char *dataset;
    long first, count; /* count -1: all */
    sw_pupil_params p; /* size and type filled once the inputs are open */
    int have_split;
    int have_min_radius; /* else a tenth of the frame's smaller side, once it is known */
    int have_pitch, have_grid, have_origin, have_rule;
    sw_sh_geometry geom; /* pitch, grid and origin from the options */
    const char *out, *mask_out, *overlay;
    int json, progress; /* progress: -1 auto */
    sw_cli_given given; /* --pupil-center, --pupil-radius-px, --pupil-ellipse */
} pupil_opts;

static int parse_opts(pupil_opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"dataset", required_argument, NULL, OPT_DATASET},
        {"h5-link-dirs", required_argument, NULL, OPT_H5_LINK_DIRS},
        {"h5-links-anywhere", no_argument, NULL, OPT_H5_LINKS_ANYWHERE},
        {"first", required_argument, NULL, OPT_FIRST},
        {"count", required_argument, NULL, OPT_COUNT},
        {"binocular", no_argument, NULL, OPT_BINOCULAR},
        {"split", required_argument, NULL, OPT_SPLIT},
        {"scale", required_argument, NULL, OPT_SCALE},
        {"gauss-radius", required_argument, NULL, OPT_GAUSS_RADIUS},
        {"gauss-sigma", required_argument, NULL, OPT_GAUSS_SIGMA},
        {"otsu-classes", required_argument, NULL, OPT_OTSU_CLASSES},
        {"edge-level", required_argument, NULL, OPT_EDGE_LEVEL},
        {"close-radius", required_argument, NULL, OPT_CLOSE_RADIUS},
        {"candidates", required_argument, NULL, OPT_CANDIDATES},
        {"inlier-px", required_argument, NULL, OPT_INLIER},
        {"refine", required_argument, NULL, OPT_REFINE},
        {"min-radius", required_argument, NULL, OPT_MIN_RADIUS},
        {"max-radius", required_argument, NULL, OPT_MAX_RADIUS},
        {"min-coverage", required_argument, NULL, OPT_MIN_COVERAGE},
        {"max-near-ratio", required_argument, NULL, OPT_MAX_NEAR_RATIO},
        {"seed", required_argument, NULL, OPT_SEED},
        {"pitch", required_argument, NULL, OPT_PITCH},
        {"grid", required_argument, NULL, OPT_GRID},
        {"origin", required_argument, NULL, OPT_ORIGIN},
        {"lenslet-rule", required_argument, NULL, OPT_LENSLET_RULE},
        {"lenslet-mask", required_argument, NULL, OPT_LENSLET_MASK},
        {"out", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"overlay", required_argument, NULL, OPT_OVERLAY},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"pupil-center", required_argument, NULL, OPT_PUPIL_CENTER},
        {"pupil-centre", required_argument, NULL, OPT_PUPIL_CENTER},
        {"pupil-radius-px", required_argument, NULL, OPT_PUPIL_RADIUS},
        {"pupil-ellipse", required_argument, NULL, OPT_PUPIL_ELLIPSE},
        {"pupil-method", required_argument, NULL, OPT_PUPIL_METHOD},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB;
    sw_pupil_params *p = &o->p;
    sw_pupil_params_default(p, SW_PUPIL_MIN_SIZE, SW_PUPIL_MIN_SIZE, SW_PIX_U8);
    sw_sh_geometry_default(&o->geom);
    o->count = -1;
    o->progress = -1;
    int c, rc = SW_EXIT_OK;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        const char *name = sw_cli_option_name(argv);
        switch (c) {
        case OPT_DATASET: o->dataset = optarg; break;
        case OPT_H5_LINK_DIRS: sw_cli_inputs_h5_links(optarg, -1); break;
        case OPT_H5_LINKS_ANYWHERE: sw_cli_inputs_h5_links(NULL, 1); break;
        case OPT_FIRST:
            if ((rc = sw_cli_opt_at_least(S, name, optarg, 0, "a frame number >= 0", &o->first)) !=
                SW_EXIT_OK)
                return rc;
            break;
        case OPT_COUNT:
            if ((rc = sw_cli_opt_at_least(S, name, optarg, 1, "a count >= 1", &o->count)) !=
                SW_EXIT_OK)
                return rc;
            break;
        case OPT_BINOCULAR: p->n_pupils = 2; break;
        case OPT_SPLIT:
            rc = sw_cli_opt_int(S, name, optarg, 1, SW_IMAGE_MAX_DIM - 1, &p->split_x);
            o->have_split = 1;
            break;
        case OPT_SCALE:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &p->input_scale);
            break;
        case OPT_GAUSS_RADIUS:
            rc = sw_cli_opt_int(S, name, optarg, 0, SW_PUPIL_MAX_RADIUS, &p->gauss_radius);
            break;
        case OPT_GAUSS_SIGMA:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &p->gauss_sigma);
            break;
        case OPT_OTSU_CLASSES: rc = sw_cli_opt_int(S, name, optarg, 2, 3, &p->otsu_classes); break;
        case OPT_EDGE_LEVEL:
            if (strcmp(optarg, "auto") == 0) {
                p->edge_level = SW_PUPIL_EDGE_AUTO;
                break;
            }
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0 or auto",
                                   &p->edge_level);
            if (rc == SW_EXIT_OK && !(p->edge_level < 1))
                return sw_cli_usage(S, "%s: '%s' is not below 1", name, optarg);
            break;
        case OPT_CLOSE_RADIUS:
            rc = sw_cli_opt_int(S, name, optarg, 0, SW_PUPIL_MAX_RADIUS, &p->close_radius);
            break;
        case OPT_CANDIDATES:
            rc = sw_cli_opt_int(S, name, optarg, 32, SW_PUPIL_MAX_CANDIDATES, &p->candidates);
            if (rc == SW_EXIT_OK && p->candidates % 32 != 0)
                return sw_cli_usage(S, "%s: %d is not a multiple of 32", name, p->candidates);
            break;
        case OPT_INLIER:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0", &p->inlier_px);
            break;
        case OPT_REFINE: rc = sw_cli_opt_int(S, name, optarg, 0, 20, &p->refine_iterations); break;
        case OPT_MIN_RADIUS:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0",
                                   &p->min_radius_px);
            o->have_min_radius = 1;
            break;
        case OPT_MAX_RADIUS:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0",
                                   &p->max_radius_px);
            break;
        case OPT_MIN_COVERAGE:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0",
                                   &p->min_coverage);
            if (rc == SW_EXIT_OK && p->min_coverage > 1)
                return sw_cli_usage(S, "%s: '%s' is above 1", name, optarg);
            break;
        case OPT_MAX_NEAR_RATIO:
            if (strcmp(optarg, "inf") == 0)
                p->max_near_ratio = INFINITY; /* pupil.h: +Inf, no near-band test */
            else
                rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0",
                                       &p->max_near_ratio);
            break;
        case OPT_SEED:
            if (sw_cli_parse_u64(optarg, &p->seed) != 0)
                return sw_cli_usage(S, "%s: '%s' is not a whole number >= 0", name, optarg);
            break;
        case OPT_PITCH:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &o->geom.pitch_px);
            o->have_pitch = 1;
            break;
        case OPT_GRID:
            if ((rc = sw_cli_opt_grid(S, name, optarg, &o->geom.nx, &o->geom.ny)) != SW_EXIT_OK)
                return rc;
            o->have_grid = 1;
            break;
        case OPT_ORIGIN:
            if ((rc = sw_cli_opt_pair(S, name, optarg, "X0,Y0 in pixels", &o->geom.x0,
                                      &o->geom.y0)) != SW_EXIT_OK)
                return rc;
            o->have_origin = 1;
            break;
        case OPT_LENSLET_RULE:
            if (strcmp(optarg, "full") == 0)
                p->lenslet_rule = SW_PUPIL_LENSLET_FULL;
            else if (strcmp(optarg, "centre") == 0 || strcmp(optarg, "center") == 0)
                p->lenslet_rule = SW_PUPIL_LENSLET_CENTRE;
            else
                return sw_cli_usage(S, "%s: '%s' is not full or centre", name, optarg);
            o->have_rule = 1;
            break;
        case OPT_LENSLET_MASK: o->mask_out = optarg; break;
        case 'o': o->out = optarg; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_OVERLAY: o->overlay = optarg; break;
        case OPT_PROGRESS: o->progress = 1; break;
        case OPT_NO_PROGRESS: o->progress = 0; break;
        case OPT_PUPIL_CENTER:
            rc = sw_cli_given_option(S, name, SW_CLI_GIVEN_CENTER, optarg, &o->given);
            break;
        case OPT_PUPIL_RADIUS:
            rc = sw_cli_given_option(S, name, SW_CLI_GIVEN_RADIUS, optarg, &o->given);
            break;
        case OPT_PUPIL_ELLIPSE:
            rc = sw_cli_given_option(S, name, SW_CLI_GIVEN_ELLIPSE, optarg, &o->given);
            break;
        case OPT_PUPIL_METHOD:
            if ((p->spots_fallback = sw_cli_pupil_method(optarg)) < 0)
                return sw_cli_usage(S, "%s: '%s' is not auto, glow or spots", name, optarg);
            break;
        case 'h': sw_cmd_pupil_help(stdout); return -1;
        default: return SW_EXIT_USAGE;
        }
        if (rc != SW_EXIT_OK)
            return rc;
    }
    if (optind >= argc)
        return sw_cli_usage(S, "no IMAGE given");
    o->inputs = argv + optind;
    o->ninputs = argc - optind;
    if (o->have_split && p->n_pupils != 2)
        return sw_cli_usage(S, "--split divides the frame between two eyes: add --binocular");
    if (o->have_min_radius && p->max_radius_px > 0 && p->max_radius_px < p->min_radius_px)
        return sw_cli_usage(S, "--max-radius %g is below --min-radius %g", p->max_radius_px,
                            p->min_radius_px);
    int ngeom = o->have_pitch + o->have_grid + o->have_origin;
    if (ngeom != 0 && ngeom != 3)
        return sw_cli_usage(S, "the lenslet grid needs all of --pitch, --grid and --origin");
    if ((o->mask_out || o->have_rule) && ngeom == 0)
        return sw_cli_usage(S, "%s needs the lenslet grid (--pitch, --grid, --origin)",
                            o->mask_out ? "--lenslet-mask" : "--lenslet-rule");
    if (o->json && (!o->out || strcmp(o->out, "-") == 0))
        return sw_cli_usage(S, "--json prints the report on standard output: give --out FILE "
                               "for the CSV");
    if (o->mask_out && strcmp(o->mask_out, "-") == 0)
        return sw_cli_usage(S, "--lenslet-mask needs a file name");
    if ((rc = sw_cli_given_finish(S, &o->given, p->n_pupils, p)) != SW_EXIT_OK)
        return rc;
    if (p->given && o->overlay)
        return sw_cli_usage(S, "--overlay draws the tracker's images: there are none with a given "
                               "pupil");
    return SW_EXIT_OK;
}

/* ---------------------------------------------------------------- the job */

typedef struct pupil_job {
    pupil_opts *o;
    sw_cli_inputs in; /* the frames of all inputs */
    sw_cli_progress bar;
} pupil_job;

/* ---------------------------------------------------------------- output */

/* A CSV number: nan for NaN (one spelling whatever the C library prints). */
static void csv_num(FILE *f, double v)
{
    if (isnan(v))
        fputs(",nan", f);
    else
        fprintf(f, ",%.6f", v);
}

/* A JSON number: null when not finite. */
static const char *failure_text(const sw_pupil_ellipse *q)
{
    return q->valid ? "" : sw_pupil_failure_string(q->failure);
}

static int write_csv(const pupil_opts *o, int with_frame, int64_t first, int64_t count,
                     const sw_pupil_result *res)
{
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, o->out);
    if (rc != SW_EXIT_OK)
        return rc;
    fprintf(out.f,
            "%spupil,cx_px,cy_px,a_px,b_px,angle_deg,inliers,valid,threshold,failure,near,method\n",
            with_frame ? "frame," : "");
    for (int64_t k = 0; k < count; k++) {
        for (int32_t i = 0; i < res[k].n_pupils; i++) {
            const sw_pupil_ellipse *q = &res[k].pupil[i];
            if (with_frame)
                fprintf(out.f, "%lld,", (long long)(first + k));
            fprintf(out.f, "%d", i);
            csv_num(out.f, q->cx_px);
            csv_num(out.f, q->cy_px);
            csv_num(out.f, q->a_px);
            csv_num(out.f, q->b_px);
            csv_num(out.f, q->angle_deg);
            /* the failure phrases are plain words: no quoting needed, but be safe */
            const char *why = failure_text(q);
            int quote = strpbrk(why, ",\"\n") != NULL;
            fprintf(out.f, ",%d,%d,%d,%s%s%s,%d,%s\n", q->inliers, q->valid ? 1 : 0, q->threshold,
                    quote ? "\"" : "", why, quote ? "\"" : "", q->near,
                    sw_pupil_method_string(q->method));
        }
    }
    return sw_cli_out_close(SUB, &out, 1);
}

static void json_report(const pupil_job *j, sw_context *ctx, int64_t first, int64_t count,
                        const sw_pupil_result *res, const int32_t *lenslets, double seconds,
                        const sw_cli_mpi *mpi)
{
    const pupil_opts *o = j->o;
    const sw_pupil_params *p = &o->p;
    cJSON *rep = cJSON_CreateObject();
    sw_cli_json_string(rep, "command", "pupil");
    cJSON *inputs = cJSON_AddArrayToObject(rep, "inputs");
    for (int i = 0; i < o->ninputs; i++)
        cJSON_AddItemToArray(inputs, sw_cli_json_str(o->inputs[i]));
    sw_cli_json_string(rep, "out", o->out);
    sw_cli_json_string(rep, "lenslet_mask", o->mask_out);
    sw_cli_json_string(rep, "overlay", o->overlay);
    sw_cli_json_string(rep, "backend", sw_backend_string(sw_context_backend(ctx)));
    sw_cli_json_int_array(rep, "frame_size", (const int64_t[]){j->in.width, j->in.height}, 2);
    sw_cli_json_string(rep, "pixel_type", sw_pixel_type_string(j->in.type));
    sw_cli_json_int(rep, "first_frame", first);
    sw_cli_json_int(rep, "frame_count", count);
    sw_cli_json_int(rep, "pupils", p->n_pupils);
    if (p->n_pupils == 2 && p->split_x >= 0)
        sw_cli_json_int(rep, "split", p->split_x);
    else
        sw_cli_json_string(rep, "split", p->n_pupils == 2 ? "auto" : NULL);
    if (p->input_scale > 0)
        sw_cli_json_double(rep, "scale", p->input_scale);
    else
        sw_cli_json_string(rep, "scale", "auto");
    sw_cli_json_int(rep, "gauss_radius", p->gauss_radius);
    sw_cli_json_double(rep, "gauss_sigma", p->gauss_sigma);
    sw_cli_json_int(rep, "otsu_classes", p->otsu_classes);
    if (p->edge_level < 0.0)
        sw_cli_json_string(rep, "edge_level", "auto");
    else
        sw_cli_json_double(rep, "edge_level", p->edge_level);
    sw_cli_json_int(rep, "close_radius", p->close_radius);
    sw_cli_json_int(rep, "candidates", p->candidates);
    sw_cli_json_double(rep, "inlier_px", p->inlier_px);
    sw_cli_json_int(rep, "refine", p->refine_iterations);
    sw_cli_json_double(rep, "min_radius_px", p->min_radius_px);
    sw_cli_json_double(rep, "max_radius_px",
                       p->max_radius_px > 0
                           ? p->max_radius_px
                           : (double)(j->in.width > j->in.height ? j->in.width : j->in.height));
    sw_cli_json_double(rep, "min_coverage", p->min_coverage);
    sw_cli_json_double(rep, "max_near_ratio", p->max_near_ratio); /* null: inf, no near-band test */
    sw_cli_json_u64(rep, "seed", p->seed);
    cJSON_AddBoolToObject(rep, "given", p->given);
    sw_cli_json_string(rep, "pupil_method", sw_cli_pupil_method_name(p->spots_fallback));
    if (p->geometry) {
        cJSON *g = cJSON_AddObjectToObject(rep, "lenslet_grid");
        sw_cli_json_double(g, "pitch_px", p->geometry->pitch_px);
        sw_cli_json_int(g, "nx", p->geometry->nx);
        sw_cli_json_int(g, "ny", p->geometry->ny);
        sw_cli_json_double(g, "x0", p->geometry->x0);
        sw_cli_json_double(g, "y0", p->geometry->y0);
        sw_cli_json_string(g, "rule",
                           p->lenslet_rule == SW_PUPIL_LENSLET_CENTRE ? "centre" : "full");
    } else {
        cJSON_AddNullToObject(rep, "lenslet_grid");
    }
    int64_t found = 0, asked = 0;
    cJSON *frames = cJSON_AddArrayToObject(rep, "frames");
    for (int64_t k = 0; k < count; k++) {
        const sw_pupil_result *r = &res[k];
        cJSON *fj = cJSON_CreateObject();
        cJSON_AddItemToArray(frames, fj);
        sw_cli_json_int(fj, "frame", first + k);
        sw_cli_json_double(fj, "scale", r->scale);
        sw_cli_json_int(fj, "split_x", r->split_x);
        cJSON *pupils = cJSON_AddArrayToObject(fj, "pupils");
        for (int32_t i = 0; i < r->n_pupils; i++) {
            const sw_pupil_ellipse *q = &r->pupil[i];
            asked++;
            found += q->valid != 0;
            cJSON *x = cJSON_CreateObject();
            cJSON_AddItemToArray(pupils, x);
            sw_cli_json_int(x, "pupil", i);
            cJSON_AddBoolToObject(x, "valid", q->valid);
            sw_cli_json_string(x, "failure", q->valid ? NULL : sw_pupil_failure_string(q->failure));
            sw_cli_json_int(x, "failure_code", (int)q->failure);
            sw_cli_json_double(x, "cx_px", q->cx_px);
            sw_cli_json_double(x, "cy_px", q->cy_px);
            sw_cli_json_double(x, "a_px", q->a_px);
            sw_cli_json_double(x, "b_px", q->b_px);
            sw_cli_json_double(x, "angle_deg", q->angle_deg);
            sw_cli_json_int(x, "inliers", q->inliers);
            sw_cli_json_int(x, "near", q->near);
            sw_cli_json_int(x, "border", q->border);
            sw_cli_json_int(x, "threshold", q->threshold);
            sw_cli_json_int(x, "candidate", q->candidate);
            sw_cli_json_int(x, "votes", q->votes);
            sw_cli_json_int(x, "x0", q->x0);
            sw_cli_json_int(x, "x1", q->x1);
            sw_cli_json_string(x, "method", sw_pupil_method_string(q->method));
            sw_cli_json_string(
                x, "fallback_reason",
                q->glow_failure != SW_PUPIL_OK ? sw_pupil_failure_string(q->glow_failure) : NULL);
            sw_cli_json_string(
                x, "spots_failure",
                q->spots_failure != SW_PUPIL_OK ? sw_pupil_failure_string(q->spots_failure) : NULL);
            sw_cli_json_int(x, "spots_lit", q->spots_lit);
            sw_cli_json_int(x, "spots_points", q->spots_points);
            if (lenslets)
                sw_cli_json_int(x, "lenslets", lenslets[2 * k + i]);
        }
    }
    sw_cli_json_int(rep, "pupils_found", found);
    sw_cli_json_int(rep, "pupils_asked", asked);
    sw_cli_json_fixed(rep, "seconds", seconds, 6);
    sw_cli_json_fixed(rep, "frames_per_second", seconds > 0 ? (double)count / seconds : 0.0, 3);
    sw_cli_mpi_json(mpi, rep);
    sw_cli_json_print(rep);
}

/* The progress bar, called through sw_cli_mpi_progress. */
static void progress_update(void *user, int64_t done, int64_t total)
{
    sw_cli_progress_update(user, done, total);
}

/* ---------------------------------------------------------------- the overlay picture */

/* Marks pixel (x, y) of a float picture with v when it lies inside. */
static void mark(sw_image *pic, double x, double y, float v)
{
    long ix = lround(x), iy = lround(y);
    if (ix < 0 || iy < 0 || ix >= pic->width || iy >= pic->height)
        return;
    ((float *)sw_image_row(pic, (int32_t)iy))[ix] = v;
}

/* The ellipse of q, sampled every half pixel or less along its perimeter. */
static void draw_ellipse(sw_image *pic, const sw_pupil_ellipse *q, float v)
{
    double t = q->angle_deg * (PI / 180.0), ct = cos(t), st = sin(t);
    int n = (int)ceil(4.0 * PI * q->a_px) + 8;
    for (int k = 0; k < n; k++) {
        double s = 2.0 * PI * k / n, u = q->a_px * cos(s), w = q->b_px * sin(s);
        mark(pic, q->cx_px + u * ct - w * st, q->cy_px + u * st + w * ct, v);
    }
    for (int d = -4; d <= 4; d++) { /* the centre: a small cross */
        mark(pic, q->cx_px + d, q->cy_px, v);
        mark(pic, q->cx_px, q->cy_px + d, v);
    }
}

/*
 * The last frame's 8-bit image (pupil.h step 0) in viridis over 0 .. 0.8 of the scale, its
 * border pixels (step 5) as NaN, drawn black, the ellipses and the binocular split at 1.0, the
 * top of the scale (yellow). The border is drawn first, so that the ellipse stays visible on it.
 */
static int write_overlay(sw_context *ctx, sw_pupil_plan *plan, const pupil_opts *o,
                         const sw_pupil_result *r, int32_t w, int32_t h)
{
    sw_image in8 = {0}, pic = {0};
    int32_t *xy = NULL;
    int rc = SW_EXIT_OK;
    sw_status st = sw_image_alloc(NULL, w, h, SW_PIX_U8, &in8);
    if (st == SW_OK)
        st = sw_image_alloc(NULL, w, h, SW_PIX_F32, &pic);
    if (st == SW_OK)
        st = sw_pupil_last_images(plan, &in8, NULL, NULL);
    if (st != SW_OK) {
        rc = sw_cli_fail(SUB, "--overlay: %s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    for (int32_t y = 0; y < h; y++) {
        const uint8_t *a = sw_image_row(&in8, y);
        float *b = sw_image_row(&pic, y);
        for (int32_t x = 0; x < w; x++)
            b[x] = 0.8f * (float)a[x] / 255.0f;
    }
    for (int32_t i = 0; i < r->n_pupils; i++) {
        int64_t n = 0;
        if ((st = sw_pupil_last_border(plan, i, NULL, 0, &n)) != SW_OK)
            break;
        free(xy);
        xy = malloc((size_t)(n > 0 ? n : 1) * 2 * sizeof *xy);
        if (!xy) {
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
        if ((st = sw_pupil_last_border(plan, i, xy, n, &n)) != SW_OK)
            break;
        for (int64_t k = 0; k < n; k++)
            mark(&pic, xy[2 * k], xy[2 * k + 1], NAN);
    }
    if (st != SW_OK) {
        rc = sw_cli_fail(SUB, "--overlay: %s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    for (int32_t i = 0; i < r->n_pupils; i++)
        if (r->pupil[i].valid)
            draw_ellipse(&pic, &r->pupil[i], 1.0f);
    if (r->n_pupils == 2)
        for (int32_t y = 0; y < h; y++)
            if (y % 8 < 4)
                mark(&pic, r->split_x, y, 1.0f); /* the right region's first column */
    sw_png_options po;
    sw_png_options_default(&po);
    po.colormap = SW_CMAP_VIRIDIS;
    po.vmin = 0.0;
    po.vmax = 1.0;
    const char *staged = sw_cli_file_staged("--overlay", o->overlay);
    if (!staged)
        rc = SW_EXIT_FAIL;
    else if ((st = sw_png_write(ctx, staged, &pic, &po)) != SW_OK)
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
done:
    free(xy);
    sw_image_free(&in8);
    sw_image_free(&pic);
    return rc;
}

/* ---------------------------------------------------------------- the command */

int sw_cmd_pupil(const sw_cli_globals *g, int argc, char **argv)
{
    pupil_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts(&o, argc, argv);
    if (rc < 0)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    for (int i = 0; i < o.ninputs; i++)
        sw_cli_file_in("image", o.inputs[i]);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--lenslet-mask", o.mask_out);
    sw_cli_file_out("--overlay", o.overlay);
    /* `mpirun -np N`: the frames dealt to N processes (cli_mpi.h); a plain run is rank 0 of 1 */
    sw_cli_mpi mpi;
    if ((rc = sw_cli_mpi_start(&mpi, SUB)) == SW_EXIT_OK)
        rc = sw_cli_files_check();
    const sw_cli_globals rank_g = sw_cli_mpi_globals(&mpi, g);

    sw_context *ctx = NULL;
    if (rc != SW_EXIT_OK || (rc = sw_cli_context(&rank_g, SUB, &ctx)) != SW_EXIT_OK)
        return sw_cli_mpi_end(&mpi, rc);
    pupil_job j;
    memset(&j, 0, sizeof j);
    j.o = &o;
    sw_pupil_plan *plan = NULL;
    sw_pupil_result *res = NULL;
    uint8_t *mask = NULL, *masks = NULL;
    int32_t *lenslets = NULL;
    size_t nl = 0;
    sw_cli_out mout = {0};
    sw_status st;

    if ((rc = sw_cli_inputs_open(ctx, SUB, o.inputs, o.ninputs, o.dataset, 0, NULL, NULL, &j.in)) !=
        SW_EXIT_OK)
        goto done;
    int64_t first = o.first, count = 0;
    if ((rc = sw_cli_inputs_range(SUB, &j.in, first, o.count, &count)) != SW_EXIT_OK)
        goto done;
    const int with_frame = j.in.total > 1;

    o.p.width = j.in.width;
    o.p.height = j.in.height;
    o.p.type = j.in.type;
    if (!o.have_min_radius) { /* pupil.h's default for this frame size */
        sw_pupil_params d;
        sw_pupil_params_default(&d, j.in.width, j.in.height, j.in.type);
        o.p.min_radius_px = d.min_radius_px;
        if (o.p.max_radius_px > 0 && o.p.max_radius_px < o.p.min_radius_px) {
            rc = sw_cli_fail(SUB,
                             "--max-radius %g is below the smallest radius %g (a tenth of the "
                             "frame's smaller side): give --min-radius too",
                             o.p.max_radius_px, o.p.min_radius_px);
            goto done;
        }
    }
    const sw_sh_geometry *geom = NULL;
    if (o.have_pitch) {
        if ((st = sw_sh_geometry_check(ctx, &o.geom, j.in.width, j.in.height)) != SW_OK) {
            rc = sw_cli_fail(SUB, "the lenslet grid: %s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        geom = &o.geom;
        o.p.geometry = geom;
        nl = (size_t)geom->nx * (size_t)geom->ny;
        mask = malloc(nl);
        lenslets = calloc((size_t)count * 2, sizeof *lenslets);
        /* every frame's lenslet mask, written after the frames (MPI ranks fill their blocks) */
        masks = o.mask_out ? calloc((size_t)count, nl) : NULL;
        if (!mask || !lenslets || (o.mask_out && !masks)) {
            rc = sw_cli_fail(SUB, "out of memory");
            goto done;
        }
    }
    if ((st = sw_pupil_create(ctx, &o.p, &plan)) != SW_OK) {
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    res = calloc((size_t)count, sizeof *res);
    if (!res) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }

    sw_cli_progress_start(&j.bar, "pupil", sw_cli_mpi_root(&mpi) ? o.progress : 0, g->quiet, count);
    if ((rc = sw_cli_mpi_agree(&mpi, SW_EXIT_OK)) != SW_EXIT_OK)
        goto done;
    /* this rank's frames (all of them in one process); rank 0 gathers the others' results */
    sw_cli_mpi_deal(&mpi, &j.in, first, count, j.bar.on);
    st = SW_OK;
    int64_t failed = -1;
    for (int64_t k = mpi.my_first - first; k < mpi.my_first - first + mpi.my_count; k++) {
        int64_t index = first + k;
        const sw_image *frame = NULL;
        if ((st = sw_cli_inputs_frame_status(ctx, &j.in, index, &frame)) == SW_OK)
            st = sw_pupil_run(plan, frame, &res[k], mask);
        if (st != SW_OK) {
            failed = index;
            break;
        }
        if (mask) {
            for (size_t l = 0; l < nl; l++) {
                const uint8_t m = mask[l];
                if (m == 1 || m == 2)
                    lenslets[2 * k + m - 1]++;
            }
            if (masks)
                memcpy(masks + (size_t)k * nl, mask, nl);
        }
        sw_cli_mpi_progress(&mpi, k + 1 - (mpi.my_first - first), progress_update, &j.bar);
    }
    const sw_cli_mpi_array arrays[] = {
        {res, sizeof *res}, {lenslets, 2 * sizeof *lenslets}, {masks, nl}};
    if (mpi.on) {
        rc = sw_cli_mpi_gather_frames(&mpi, ctx, st, failed, arrays, masks ? 3 : lenslets ? 2 : 1);
        if (rc != SW_EXIT_OK || !sw_cli_mpi_root(&mpi))
            goto done; /* only rank 0 writes */
        /* the overlay draws the plan's images of the last frame: rank 0 runs it again when
         * another rank had it (the table keeps the gathered result) */
        const int64_t last = first + count - 1;
        if (o.overlay && last >= mpi.my_first + mpi.my_count) {
            const sw_image *frame = NULL;
            sw_pupil_result again;
            if ((st = sw_cli_inputs_frame_status(ctx, &j.in, last, &frame)) == SW_OK)
                st = sw_pupil_run(plan, frame, &again, mask);
            if (st != SW_OK) {
                rc = sw_cli_fail(SUB, "frame %lld: %s", (long long)last, sw_cli_lib_error(ctx, st));
                goto done;
            }
        }
    } else if (st != SW_OK) {
        if (j.bar.on)
            fputc('\n', stderr);
        rc = sw_cli_fail(SUB, "frame %lld: %s", (long long)failed, sw_cli_lib_error(ctx, st));
        goto done;
    }
    double seconds = sw_cli_now() - j.bar.t_start;

    /* the picture first: a run that cannot write it leaves no table behind */
    if (o.overlay &&
        (rc = write_overlay(ctx, plan, &o, &res[count - 1], j.in.width, j.in.height)) != SW_EXIT_OK)
        goto done;
    if ((rc = write_csv(&o, with_frame, first, count, res)) != SW_EXIT_OK)
        goto done;
    if (masks) {
        if ((rc = sw_cli_out_open(SUB, &mout, o.mask_out)) != SW_EXIT_OK)
            goto done;
        fprintf(mout.f, "%six,iy,valid,pupil\n", with_frame ? "frame," : "");
        for (int64_t k = 0; k < count; k++) {
            for (int32_t iy = 0; iy < geom->ny; iy++) {
                for (int32_t ix = 0; ix < geom->nx; ix++) {
                    const uint8_t m = masks[(size_t)k * nl + (size_t)iy * geom->nx + ix];
                    if (with_frame)
                        fprintf(mout.f, "%lld,", (long long)(first + k));
                    fprintf(mout.f, "%d,%d,%d,%d\n", ix, iy, m != 0, (int)m - 1);
                }
            }
        }
        if ((rc = sw_cli_out_close(SUB, &mout, 1)) != SW_EXIT_OK)
            goto done;
    }
    if (o.json)
        json_report(&j, ctx, first, count, res, lenslets, seconds, &mpi);
    rc = SW_EXIT_OK;

done:
    sw_cli_out_close(SUB, &mout, 0);
    free(res);
    free(mask);
    free(masks);
    free(lenslets);
    sw_pupil_destroy(plan);
    sw_cli_inputs_free(&j.in);
    sw_context_destroy(ctx);
    return sw_cli_mpi_end(&mpi, rc);
}
