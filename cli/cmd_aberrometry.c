/*
 * spotwave aberrometry: Hartmann-Shack images of one or two living eyes in; per frame and eye the
 * pupil, the Zernike aberrations and the refraction out (Mompean et al. 2019, the whole system:
 * pupil tracking Sec. 3.1, centroid search Sec. 3.2, modal fit Sec. 3.3, wavefront map Sec. 3.4;
 * aberrometry.h). The reference image (no eye: a flat wavefront over the lenslet array) gives the
 * reference centroids and, when the grid is not given, the lenslet grid.
 *
 * Outputs: the Zernike CSV `eye,j,n,m,coef_um` (DESIGN.md; a first column `frame` for several
 * frames), a JSON report (--json), wavefront maps of the last frame (--map, PNG or FITS) and the
 * per-lenslet spots of the last frame (--spots).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "cli_mpi.h"
#include "clinical.h"
#include "json.h"
#include "outfiles.h"

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SUB "aberrometry"

#define DEF_PIXEL_UM 5.5
#define DEF_FOCAL_MM 3.5
/* The magnification of 'spotwave sim eye' with its defaults: a 5.12 mm pupil drawn 576 px wide
 * (0.9 x 640) on 5.5 um pixels, 576 x 5.5 / 5120. The library's default is 1; the command's is
 * the simulator's, so that sim eye's image through aberrometry's defaults gives the true
 * refraction (issue 29: with 1 the pupil came out 3.17 mm and the sphere 2.6x too strong). */
#define DEF_MAGNIFICATION 0.61875
#define DEF_MAP_SIZE      256
#define MAX_BATCH         16 /* frames per sw_aberrometry_run_batch call */

/* Defaults of the library for the help text (a 640 x 640 u8 frame, sim eye's grid). */
static void help_defaults(sw_aberrometry_params *d)
{
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.pitch_px = 32.0;
    g.nx = g.ny = 20;
    sw_aberrometry_params_default(d, 640, 640, SW_PIX_U8, &g);
}

void sw_cmd_aberrometry_help(FILE *out)
{
    sw_aberrometry_params d;
    help_defaults(&d);
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] aberrometry IMAGE... --reference REF [OPTIONS]\n"
        "\n"
        "Measures the ocular aberrations of one eye (or, with --binocular, of two eyes side by\n"
        "side) on Hartmann-Shack images, after Mompean, Aragon, Prieto & Artal 2019 (Future\n"
        "Gener. Comput. Syst. 91, 177): per frame, the pupil is tracked (Sec. 3.1), the spots\n"
        "of the lenslets wholly inside it are searched (Sec. 3.2: PAPYCS, the pyramidal\n"
        "search, with a dynamic mesh from a preliminary low-order fit and three discarding\n"
        "criteria; or the centre of mass or Reichenbach's algorithm, Sec. 3.2.2-3.2.3), their\n"
        "displacements from the reference centroids are fitted with Zernike polynomials over\n"
        "the analysis circle (Sec. 3.3), and the refraction follows from the coefficients:\n"
        "the power vectors of Thibos, Hong, Bradley & Applegate 2004 (J. Vision 4(4), 329)\n"
        "of the second-order terms (with the 4th and 6th orders on request, as 'spotwave fit'),\n"
        "corrected from the measurement wavelength to the visible; on request also the image\n"
        "quality (PSF, MTF, Strehl and visual Strehl ratios).\n"
        "\n"
        "Writes one CSV row per Zernike term and eye:\n"
        "  eye,j,n,m,coef_um\n"
        "eye 1 is the left eye (smaller x), eye 2 the right one; j the index of --index (OSA/ANSI\n"
        "from 0, or Noll from 1), (n, m) the radial and azimuthal orders, coef_um the\n"
        "coefficient in micrometres (OSA sign: a myopic eye has c(2,0) > 0) over the eye's\n"
        "pupil diameter (the JSON report's pupil_mm). Piston is 0. An eye without a result\n"
        "(its pupil not found, too few spots, ...) has nan coefficients; the JSON report says\n"
        "why. When the inputs hold more than one frame, a first column 'frame' (0-based, counted\n"
        "across all inputs) is added.\n"
        "\n"
        "Input:\n"
        "  IMAGE...               FITS (2-D, or a cube of frames), 8/16-bit PGM, CBF, TIFF\n"
        "                         (every page a frame), or HDF5 as Eiger detectors write it;\n"
        "                         every frame of every input, which must share one size and\n"
        "                         pixel type (8/16-bit unsigned or float)\n"
        "  --reference REF        the reference image (FITS, PGM, CBF or TIFF; one frame of the\n"
        "                         images' size): a flat wavefront through every lenslet, no\n"
        "                         eye (e.g. 'spotwave sim sh' with the same grid). Its\n"
        "                         centroids are the zero of the slopes (required)\n"
        "  --dataset PATH         HDF5 dataset to read instead of the automatic "
        "choice\n" SW_CLI_H5_LINKS_HELP
        "  --first N              first frame to process (default 0)\n"
        "  --count N              number of frames (default: all from --first)\n"
        "\n"
        "Lenslet grid and optics:\n"
        "  --pitch PX             lenslet pitch, pixels (may be fractional)\n"
        "  --grid NXxNY           lenslets across and down\n"
        "  --origin X0,Y0         corner pixel of lenslet (0,0); give all three, or none to\n"
        "                         find the grid in the reference image\n"
        "  --pixel-um P           detector pixel pitch, micrometres (default %g)\n"
        "  --focal-mm F           lenslet focal length, millimetres (default %g)\n"
        "  --magnification M      size of the pupil on the lenslet array / its size at the eye\n"
        "                         (default %g, that of 'spotwave sim eye' with its defaults:\n"
        "                         a 5.12 mm pupil 576 px wide on 5.5 um pixels; give your\n"
        "                         instrument's): pupil_mm = 2 R_px pixel / (1000 M). The\n"
        "                         pupil goes as 1 / M and the refraction as M^2; the\n"
        "                         coefficients in um do not change. The report says which M\n"
        "                         was used\n"
        "\n"
        "Analysis:\n"
        "  --binocular            two eyes, a left and a right one (default: one)\n"
        "  --algorithm papycs|com|reichenbach\n"
        "                         centroid search (default papycs)\n"
        "  --order N              fitted radial orders 1..N, N in 1..%d (default %d)\n"
        "  --prelim-order N       the dynamic mesh's preliminary fit, 0..N (default %d; 0: the\n"
        "                         static mesh only)\n"
        "  --central-fraction F   the preliminary fit's central area, x the analysis radius,\n"
        "                         (0, 1] (default %g)\n"
        "  --mesh-stages N        stages of the dynamic mesh, 1..%d (default %d; 1: the paper's\n"
        "                         single preliminary fit)\n"
        "  --mesh-tolerance F     discard kept spots farther than F pitches from their start\n"
        "                         (default %g; 0: no mesh check)\n"
        "  --mesh-slopes N        a stage of the dynamic mesh fits more orders (up to --order)\n"
        "                         while its spots give N slopes per unknown, 0..1000 (default\n"
        "                         %d; 0: the stages' own orders, e.g. the paper's single stage)\n"
        "  --mesh-residual PX     a raised stage fit whose residual RMS exceeds PX pixels gives\n"
        "                         way to the stage's own orders (default %g; inf: never)\n"
        "  --outlier-sigma K      the final fit rejects its worst spot while its residual\n"
        "                         exceeds K x the fit's residual RMS and --outlier-min-px,\n"
        "                         refitting each time, at most %d per eye (default %g; 0: none)\n"
        "  --outlier-min-px PX    the rejection's floor, pixels (default %g)\n"
        "  --neighbour-window F   with the dynamic mesh, no first search window wider than F x\n"
        "                         the distance to a neighbour's predicted spot, F >= 0 (default\n"
        "                         %g: never past the midpoint; 0: windows of --window, the\n"
        "                         paper's)\n"
        "  --fit-radius-px R      analysis circle radius, pixels (default: the pupil ellipse's\n"
        "                         major semi-axis)\n"
        "  --window W             first search window side, pixels, 3..%d (default: the pitch\n"
        "                         rounded down)\n"
        "  --no-discard           keep every spot found (default: the three discarding\n"
        "                         criteria: empty or saturated cell, spacing, isolated)\n"
        "  --contrast C           criterion 1: the centroid's pixel must exceed the mean of the\n"
        "                         8 pixels D away (the 8 neighbours when D is 1) by more than C\n"
        "                         grey levels of an 8-bit frame (default %g, Mompean et al.'s),\n"
        "                         scaled to the frame's pixels as C x full scale / 255\n"
        "  --discard-ring D       criterion 1's distance D, pixels, 0..%d (default 0: the pitch\n"
        "                         / 32 rounded, at least 1: wider spots on larger lenslets)\n"
        "  --full-scale V         a full-scale pixel's value for that scaling (default: by\n"
        "                         type: 255 for 8-bit, 65535 for 16-bit, 1 for float frames\n"
        "                         in [0, 1]; e.g. 4095 for a 12-bit camera in 16-bit words, 255\n"
        "                         for float frames in grey levels)\n"
        "  --vertex-mm V          refraction at a spectacle plane V mm in front of the cornea\n"
        "                         (default 0: the corneal plane)\n"
        "  --eye OD|OS            name the eye (one eye; also right|left): OS reports its\n"
        "                         coefficients (CSV, JSON, map) mirrored about the vertical axis\n"
        "                         (ANSI Z80.28's left-eye frame); default: not named, as measured\n"
        "  --eyes auto|OD,OS|OS,OD  name the two eyes (--binocular), the one at smaller x first;\n"
        "                         auto: OD at smaller x (a camera facing the patient), OS with\n"
        "                         --flip-x; default: not named, both as measured\n"
        "  --pupil-mm D           report the coefficients and refraction over a pupil of D mm,\n"
        "                         at most the measured one (the coefficients are rescaled)\n"
        "  --streams N            frames in flight on the GPU, 1..%d (default %d)\n"
        "\n"
        "%s"
        "Pupil (default: tracked in every frame from the retinal glow, Mompean et al. Sec. 3.1;\n"
        "where the glow path finds none, e.g. an artificial eye or a bench with no glow, from\n"
        "the spots on the lenslet grid: each lenslet's light at its spot over a fully lit\n"
        "lenslet's is its share of the pupil, and an ellipse is fitted where that crosses 1/2;\n"
        "the report's pupil_method and pupil_fallback_reason say which and why; see\n"
        "'spotwave pupil'):\n"
        "%s"
        "  --pupil-method auto|glow|spots\n"
        "                         auto (default): the spots path where the glow path finds\n"
        "                         no pupil, or finds it only at a lower edge level whose\n"
        "                         half-height refit fails (a glow falling off steeply),\n"
        "                         and for every pupil at pitches of at most 16 px (4 x the\n"
        "                         smoothing's sigma); glow: never the spots path; spots: the\n"
        "                         spots path for every pupil (an instrument without glow)\n"
        "  --edge-level F|auto    the glow path's threshold between iris and pupil (see\n"
        "                         'spotwave pupil'; default auto: the edge's half height\n"
        "                         measured per frame, the radius within 1 %% when the glow\n"
        "                         falls off towards the edge); a fixed F (0.4 suits a 30 %%\n"
        "                         fall-off) tracks in about half the time\n"
        "\n"
        "Output:\n"
        "  -o, --out FILE         the CSV (default: standard output)\n"
        "  --index ansi|noll      the CSV's j column (default ansi)\n"
        "  --json                 print a JSON report on standard output (needs --out FILE):\n"
        "                         the parameters and the grid (magnification_default: true\n"
        "                         when --magnification was not given), and per frame and eye\n"
        "                         the pupil (its method: glow, spots or given), pupil_method,\n"
        "                         pupil_fallback_reason,\n"
        "                         the analysis circle, pupil_mm, the lenslets used, found, kept\n"
        "                         and discarded by each criterion, the coefficients, the\n"
        "                         refraction (sphere, cyl, axis, M, J0, J45), the residual, and\n"
        "                         valid / failure\n"
        "  --map FILE             the wavefront map of the last frame, a .png picture (colour\n"
        "                         scale in micrometres) or a .fits image (micrometres, nan\n"
        "                         outside the pupil); for two eyes FILE gets _eye1 / _eye2\n"
        "                         before its extension. An eye without a result gets no map.\n"
        "  --map-size N           map side, pixels, 8..4096 (default %d)\n"
        "  --spots CSV            the last frame's lenslets: ix,iy,eye,x_px,y_px,x0_px,y0_px,\n"
        "                         status (eye 0: in no pupil; x0, y0: where the final search\n"
        "                         started; status 0 found, 1 not searched, 2 outside the\n"
        "                         frame, 3 flat, 4 not found, 5..7 discarded: empty cell,\n"
        "                         spacing, isolated)\n"
        "  --progress / --no-progress  a progress bar on stderr (default: when stderr is a\n"
        "                         terminal and there is more than one frame)\n"
        "  -h, --help             this help\n"
        "\n"
        "Under mpirun (a spotwave built with MPI), e.g. 'mpirun -np 4 spotwave aberrometry\n"
        "FILES... --reference R --out out.csv', the frames are dealt to the processes in\n"
        "contiguous blocks (each on its own GPU or CPU cores) and rank 0 writes every output\n"
        "once, the same bytes as one process when every process uses the same number of\n"
        "BLAS threads (OPENBLAS_NUM_THREADS). A frame that fails stops its rank's block;\n"
        "rank 0 lists the failed frames and the run fails.\n"
        "\n"
        "Exit status: 0 when every frame was processed, whether or not each eye has a result\n"
        "(see the report); 1 when an input cannot be read or used (a reference of another\n"
        "size, a grid outside the image), --pupil-mm is larger than a measured pupil, or an\n"
        "output cannot be written; 2 for a bad option.\n"
        "\n"
        "Example:\n"
        "  spotwave sim sh --size 640x640 --grid 20x20 --pitch 32 --flux 2000 --bits 8 \\\n"
        "      --out ref.pgm\n"
        "  spotwave sim eye --rms-um 1 --out eye.pgm\n"
        "  spotwave aberrometry eye.pgm --reference ref.pgm --magnification 0.61875 \\\n"
        "      --out z.csv --json --map w.png\n",
        DEF_PIXEL_UM, DEF_FOCAL_MM, DEF_MAGNIFICATION, SW_AB_MAX_ORDER, d.order, d.prelim_order,
        d.central_fraction, SW_AB_MAX_STAGES, d.mesh_stages, d.mesh_tolerance,
        d.mesh_slopes_per_term, d.mesh_raise_residual_px, SW_AB_MAX_OUTLIERS, d.outlier_sigma,
        d.outlier_min_px, d.neighbour_window, SW_SEARCH_MAX_WINDOW, d.discard_contrast,
        SW_SEARCH_MAX_WINDOW / 2, SW_AB_MAX_STREAMS, d.streams, sw_cli_clinical_help_text(),
        sw_cli_given_help, DEF_MAP_SIZE);
}

enum {
    OPT_REFERENCE = 256,
    OPT_DATASET,
    OPT_H5_LINK_DIRS,
    OPT_H5_LINKS_ANYWHERE,
    OPT_FIRST,
    OPT_COUNT,
    OPT_PITCH,
    OPT_GRID,
    OPT_ORIGIN,
    OPT_PIXEL,
    OPT_FOCAL,
    OPT_MAGNIFICATION,
    OPT_BINOCULAR,
    OPT_ALGORITHM,
    OPT_ORDER,
    OPT_PRELIM,
    OPT_STAGES,
    OPT_TOLERANCE,
    OPT_SLOPES,
    OPT_NEIGHBOUR,
    OPT_RAISE_RES,
    OPT_OUT_SIGMA,
    OPT_OUT_MIN,
    OPT_CENTRAL,
    OPT_FIT_RADIUS,
    OPT_WINDOW,
    OPT_NO_DISCARD,
    OPT_CONTRAST,
    OPT_RING,
    OPT_VERTEX,
    OPT_PUPIL_MM,
    OPT_STREAMS,
    OPT_INDEX,
    OPT_JSON,
    OPT_MAP,
    OPT_MAP_SIZE,
    OPT_SPOTS,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
    OPT_EYE,
    OPT_EYES,
    OPT_PUPIL_CENTER,
    OPT_PUPIL_RADIUS,
    OPT_PUPIL_ELLIPSE,
    OPT_PUPIL_METHOD,
    OPT_FULL_SCALE,
    OPT_EDGE_LEVEL,
};

typedef struct ab_opts {
    char **inputs;
    int ninputs;
    const char *reference, *dataset, *out, *map, *spots;
    long first, count; /* count -1: all */
    int have_pitch, have_grid, have_origin, have_magnification;
    sw_sh_geometry geom; /* pitch, grid and origin from the options; pixel_um, focal_mm */
    double magnification, central_fraction, fit_radius_px, contrast, vertex_mm, pupil_mm;
    int have_central, have_contrast, have_prelim, have_window, have_stages, have_tolerance;
    int have_ring;
    int32_t ring;
    int have_slopes, have_neighbour, have_raise_res, have_out_sigma, have_out_min;
    double raise_res, out_sigma, out_min;
    int32_t mesh_slopes;
    double neighbour_window;
    int32_t mesh_stages;
    double mesh_tolerance;
    int32_t n_eyes, order, prelim_order, window, streams, map_size;
    sw_search_algorithm algorithm;
    int no_discard, noll, json, progress, map_fits;
    sw_cli_clinical clin; /* refraction and image-quality options (clinical.h) */
    int side[2];          /* the eyes' sides: 0 not named, 1 OD, 2 OS          */
    int eyes_auto;        /* --eyes auto                                       */
    sw_cli_given given;   /* --pupil-center, --pupil-radius-px, --pupil-ellipse */
    int spots_mode;       /* --pupil-method: pupil.h's spots_fallback (1: auto) */
    int have_edge_level;  /* --edge-level given                                  */
    double edge_level;    /* its value (SW_PUPIL_EDGE_AUTO for auto)             */
    double full_scale;    /* --full-scale (0: by type) */
} ab_opts;

static int is_fits_name(const char *path)
{
    return sw_cli_ends_with(path, ".fits") || sw_cli_ends_with(path, ".fit") ||
           sw_cli_ends_with(path, ".fts");
}

static int parse_opts(ab_opts *o, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"reference", required_argument, NULL, OPT_REFERENCE},
        {"dataset", required_argument, NULL, OPT_DATASET},
        {"h5-link-dirs", required_argument, NULL, OPT_H5_LINK_DIRS},
        {"h5-links-anywhere", no_argument, NULL, OPT_H5_LINKS_ANYWHERE},
        {"first", required_argument, NULL, OPT_FIRST},
        {"count", required_argument, NULL, OPT_COUNT},
        {"pitch", required_argument, NULL, OPT_PITCH},
        {"grid", required_argument, NULL, OPT_GRID},
        {"origin", required_argument, NULL, OPT_ORIGIN},
        {"pixel-um", required_argument, NULL, OPT_PIXEL},
        {"focal-mm", required_argument, NULL, OPT_FOCAL},
        {"magnification", required_argument, NULL, OPT_MAGNIFICATION},
        {"binocular", no_argument, NULL, OPT_BINOCULAR},
        {"algorithm", required_argument, NULL, OPT_ALGORITHM},
        {"order", required_argument, NULL, OPT_ORDER},
        {"prelim-order", required_argument, NULL, OPT_PRELIM},
        {"mesh-stages", required_argument, NULL, OPT_STAGES},
        {"mesh-tolerance", required_argument, NULL, OPT_TOLERANCE},
        {"mesh-slopes", required_argument, NULL, OPT_SLOPES},
        {"neighbour-window", required_argument, NULL, OPT_NEIGHBOUR},
        {"mesh-residual", required_argument, NULL, OPT_RAISE_RES},
        {"outlier-sigma", required_argument, NULL, OPT_OUT_SIGMA},
        {"outlier-min-px", required_argument, NULL, OPT_OUT_MIN},
        {"central-fraction", required_argument, NULL, OPT_CENTRAL},
        {"fit-radius-px", required_argument, NULL, OPT_FIT_RADIUS},
        {"window", required_argument, NULL, OPT_WINDOW},
        {"no-discard", no_argument, NULL, OPT_NO_DISCARD},
        {"contrast", required_argument, NULL, OPT_CONTRAST},
        {"discard-ring", required_argument, NULL, OPT_RING},
        {"vertex-mm", required_argument, NULL, OPT_VERTEX},
        {"pupil-mm", required_argument, NULL, OPT_PUPIL_MM},
        {"streams", required_argument, NULL, OPT_STREAMS},
        {"index", required_argument, NULL, OPT_INDEX},
        {"out", required_argument, NULL, 'o'},
        {"json", no_argument, NULL, OPT_JSON},
        {"map", required_argument, NULL, OPT_MAP},
        {"map-size", required_argument, NULL, OPT_MAP_SIZE},
        {"spots", required_argument, NULL, OPT_SPOTS},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"eye", required_argument, NULL, OPT_EYE},
        {"eyes", required_argument, NULL, OPT_EYES},
        SW_CLI_CLINICAL_LONGOPTS,
        {"pupil-center", required_argument, NULL, OPT_PUPIL_CENTER},
        {"pupil-centre", required_argument, NULL, OPT_PUPIL_CENTER},
        {"pupil-radius-px", required_argument, NULL, OPT_PUPIL_RADIUS},
        {"pupil-ellipse", required_argument, NULL, OPT_PUPIL_ELLIPSE},
        {"pupil-method", required_argument, NULL, OPT_PUPIL_METHOD},
        {"edge-level", required_argument, NULL, OPT_EDGE_LEVEL},
        {"full-scale", required_argument, NULL, OPT_FULL_SCALE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB;
    sw_aberrometry_params d;
    help_defaults(&d);
    sw_sh_geometry_default(&o->geom);
    o->geom.pixel_um = DEF_PIXEL_UM;
    o->geom.focal_mm = DEF_FOCAL_MM;
    o->count = -1;
    o->progress = -1;
    o->n_eyes = 1;
    o->magnification = DEF_MAGNIFICATION;
    o->order = d.order;
    o->prelim_order = d.prelim_order;
    o->streams = d.streams;
    o->algorithm = d.algorithm;
    o->map_size = DEF_MAP_SIZE;
    sw_cli_clinical_init(&o->clin);
    o->spots_mode = 1;
    int c, rc = SW_EXIT_OK;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        const char *name = sw_cli_option_name(argv);
        switch (c) {
        case OPT_REFERENCE: rc = sw_cli_opt_file(S, name, optarg, &o->reference); break;
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
        case OPT_PIXEL:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &o->geom.pixel_um);
            break;
        case OPT_FOCAL:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &o->geom.focal_mm);
            break;
        case OPT_MAGNIFICATION:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &o->magnification);
            o->have_magnification = 1;
            break;
        case OPT_BINOCULAR: o->n_eyes = 2; break;
        case OPT_ALGORITHM:
            if (sw_search_algorithm_parse(optarg, &o->algorithm) != SW_OK)
                return sw_cli_usage(S, "%s: '%s' is not papycs, com or reichenbach", name, optarg);
            break;
        case OPT_ORDER: rc = sw_cli_opt_int(S, name, optarg, 1, SW_AB_MAX_ORDER, &o->order); break;
        case OPT_PRELIM:
            rc = sw_cli_opt_int(S, name, optarg, 0, SW_AB_MAX_ORDER, &o->prelim_order);
            o->have_prelim = 1;
            break;
        case OPT_STAGES:
            rc = sw_cli_opt_int(S, name, optarg, 1, SW_AB_MAX_STAGES, &o->mesh_stages);
            o->have_stages = 1;
            break;
        case OPT_SLOPES:
            rc = sw_cli_opt_int(S, name, optarg, 0, 1000, &o->mesh_slopes);
            o->have_slopes = 1;
            break;
        case OPT_NEIGHBOUR:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0",
                                   &o->neighbour_window);
            o->have_neighbour = 1;
            break;
        case OPT_RAISE_RES:
            if (strcmp(optarg, "inf") == 0) {
                o->raise_res = INFINITY;
            } else {
                rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0 or inf",
                                       &o->raise_res);
            }
            o->have_raise_res = 1;
            break;
        case OPT_OUT_SIGMA:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0", &o->out_sigma);
            o->have_out_sigma = 1;
            break;
        case OPT_OUT_MIN:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0", &o->out_min);
            o->have_out_min = 1;
            break;
        case OPT_TOLERANCE:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0",
                                   &o->mesh_tolerance);
            o->have_tolerance = 1;
            break;
        case OPT_CENTRAL:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &o->central_fraction);
            if (rc == SW_EXIT_OK && o->central_fraction > 1)
                return sw_cli_usage(S, "%s: '%s' is above 1", name, optarg);
            o->have_central = 1;
            break;
        case OPT_FIT_RADIUS:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0",
                                   &o->fit_radius_px);
            break;
        case OPT_WINDOW:
            rc = sw_cli_opt_int(S, name, optarg, 3, SW_SEARCH_MAX_WINDOW, &o->window);
            o->have_window = 1;
            break;
        case OPT_NO_DISCARD: o->no_discard = 1; break;
        case OPT_CONTRAST:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0", &o->contrast);
            o->have_contrast = 1;
            break;
        case OPT_RING:
            rc = sw_cli_opt_int(S, name, optarg, 0, SW_SEARCH_MAX_WINDOW / 2, &o->ring);
            o->have_ring = 1;
            break;
        case OPT_VERTEX:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0", &o->vertex_mm);
            break;
        case OPT_PUPIL_MM:
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0", &o->pupil_mm);
            break;
        case OPT_STREAMS:
            rc = sw_cli_opt_int(S, name, optarg, 1, SW_AB_MAX_STREAMS, &o->streams);
            break;
        case OPT_INDEX:
            if (strcmp(optarg, "ansi") == 0 || strcmp(optarg, "osa") == 0)
                o->noll = 0;
            else if (strcmp(optarg, "noll") == 0)
                o->noll = 1;
            else
                return sw_cli_usage(S, "%s: '%s' is not ansi or noll", name, optarg);
            break;
        case 'o': rc = sw_cli_opt_file(S, name, optarg, &o->out); break;
        case OPT_JSON: o->json = 1; break;
        case OPT_MAP: rc = sw_cli_opt_file(S, name, optarg, &o->map); break;
        case OPT_MAP_SIZE: rc = sw_cli_opt_int(S, name, optarg, 8, 4096, &o->map_size); break;
        case OPT_SPOTS: rc = sw_cli_opt_file(S, name, optarg, &o->spots); break;
        case OPT_PROGRESS: o->progress = 1; break;
        case OPT_NO_PROGRESS: o->progress = 0; break;
        case OPT_EYE:
            if (sw_cli_eye_parse(optarg, &o->side[0]) != 0)
                return sw_cli_usage(S, "%s: '%s' is not OD, OS, right or left", name, optarg);
            break;
        case OPT_EYES: {
            char a[8] = "", b[8] = "";
            if (strcmp(optarg, "auto") == 0)
                o->eyes_auto = 1;
            else if (sscanf(optarg, "%7[^,],%7s", a, b) != 2 ||
                     sw_cli_eye_parse(a, &o->side[0]) != 0 ||
                     sw_cli_eye_parse(b, &o->side[1]) != 0 || o->side[0] == o->side[1])
                return sw_cli_usage(S, "%s: '%s' is not auto, OD,OS or OS,OD", name, optarg);
            break;
        }
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
            if ((o->spots_mode = sw_cli_pupil_method(optarg)) < 0)
                return sw_cli_usage(S, "%s: '%s' is not auto, glow or spots", name, optarg);
            break;
        case OPT_EDGE_LEVEL:
            o->have_edge_level = 1;
            if (strcmp(optarg, "auto") == 0) {
                o->edge_level = SW_PUPIL_EDGE_AUTO;
                break;
            }
            rc = sw_cli_opt_double(S, name, optarg, SW_CLI_NONNEG, "a number >= 0 or auto",
                                   &o->edge_level);
            if (rc == SW_EXIT_OK && !(o->edge_level < 1))
                return sw_cli_usage(S, "%s: '%s' is not below 1", name, optarg);
            break;
        case OPT_FULL_SCALE:
            rc =
                sw_cli_opt_double(S, name, optarg, SW_CLI_POSITIVE, "a number > 0", &o->full_scale);
            break;
        case 'h': sw_cmd_aberrometry_help(stdout); return -1;
        default:
            if ((rc = sw_cli_clinical_option(S, c, optarg, &o->clin)) == -1)
                return SW_EXIT_USAGE;
            break;
        }
        if (rc != SW_EXIT_OK)
            return rc;
    }
    if (optind >= argc)
        return sw_cli_usage(S, "no IMAGE given");
    o->inputs = argv + optind;
    o->ninputs = argc - optind;
    if (!o->reference)
        return sw_cli_usage(S, "--reference REF is required (an image of a flat wavefront "
                               "through the lenslets, no eye)");
    const int ngeom = o->have_pitch + o->have_grid + o->have_origin;
    if (ngeom != 0 && ngeom != 3)
        return sw_cli_usage(S, "the lenslet grid needs all of --pitch, --grid and --origin (or "
                               "none: found in the reference)");
    if (o->have_prelim && o->prelim_order > o->order)
        return sw_cli_usage(S, "--prelim-order %d is above --order %d", o->prelim_order, o->order);
    if (o->no_discard && (o->have_contrast || o->have_ring || o->full_scale > 0))
        return sw_cli_usage(S, "%s sets a discarding criterion: drop --no-discard",
                            o->have_contrast ? "--contrast"
                            : o->have_ring   ? "--discard-ring"
                                             : "--full-scale");
    if (o->json && (!o->out || strcmp(o->out, "-") == 0))
        return sw_cli_usage(S, "--json prints the report on standard output: give --out FILE "
                               "for the CSV");
    if (o->spots && strcmp(o->spots, "-") == 0)
        return sw_cli_usage(S, "--spots needs a file name");
    if (o->n_eyes == 2 && o->side[0] && !o->side[1])
        return sw_cli_usage(S, "--eye names one eye: with --binocular give --eyes");
    if (o->n_eyes == 1 && (o->side[1] || o->eyes_auto))
        return sw_cli_usage(S, "--eyes names two eyes: give --binocular, or --eye for one");
    if (o->eyes_auto) {
        o->side[0] = o->clin.flip_x ? 2 : 1;
        o->side[1] = 3 - o->side[0];
    }
    if ((rc = sw_cli_clinical_check(S, &o->clin)) != SW_EXIT_OK)
        return rc;
    {
        /* checked here against the eyes asked for; the plan takes them in make_plan */
        sw_pupil_params tmp;
        memset(&tmp, 0, sizeof tmp);
        if ((rc = sw_cli_given_finish(S, &o->given, o->n_eyes, &tmp)) != SW_EXIT_OK)
            return rc;
    }
    if (o->map) {
        if (is_fits_name(o->map))
            o->map_fits = 1;
        else if (!sw_cli_ends_with(o->map, ".png"))
            return sw_cli_usage(S, "--map: '%s' is neither .png nor .fits", o->map);
    }
    return SW_EXIT_OK;
}

/* ---------------------------------------------------------------- the run */

/* An eye's result as reported: the library's, rescaled to --pupil-mm when asked. */
typedef struct eye_out {
    sw_aberrometry_eye e;
    double measured_pupil_mm;
    sw_cli_eye_rx clin; /* clinical refraction and image quality (clinical.h) */
} eye_out;

typedef struct frame_out {
    int32_t n_eyes;
    double scale, split_x;
    eye_out eye[2];
} frame_out;

typedef struct ab_job {
    ab_opts *o;
    sw_context *ctx;
    sw_cli_inputs in;
    sw_frames ref;
    sw_sh_geometry geom;
    int geom_from_reference;
    double *ref_x, *ref_y;
    int32_t ref_found;
    sw_aberrometry_params p;
    sw_aberrometry_plan *plan;
    sw_aberrometry_result *batch_res;
    sw_image buf[MAX_BATCH];
    frame_out *res;
    sw_image psf[2], mtf[2]; /* the last frame's, with --psf / --mtf */
    int64_t first, count;
    int64_t failed; /* the frame a failure was printed for, or -1 */
    int dealt;      /* the frames were dealt: under MPI every rank then gathers */
    sw_cli_progress bar;
    int map_written[2];
} ab_job;

static void job_free(ab_job *j)
{
    sw_aberrometry_destroy(j->plan);
    for (int i = 0; i < MAX_BATCH; i++)
        sw_image_free(&j->buf[i]);
    free(j->batch_res);
    free(j->res);
    for (int k = 0; k < 2; k++) {
        sw_image_free(&j->psf[k]);
        sw_image_free(&j->mtf[k]);
    }
    free(j->ref_x);
    free(j->ref_y);
    sw_frames_free(&j->ref);
    sw_cli_inputs_free(&j->in);
    sw_context_destroy(j->ctx);
}

/* The reference image: one frame of the images' size; the grid (options or found in it); the
 * reference centroids (sw_aberrometry_reference). */
static int prepare_reference(ab_job *j)
{
    ab_opts *o = j->o;
    sw_status st;
    int rc = sw_cli_read_frames(j->ctx, SUB, "reference image", o->reference, 1, &j->ref);
    if (rc != SW_EXIT_OK)
        return rc;
    const sw_image *ref = &j->ref.frames[0];
    if (j->ref.count != 1)
        return sw_cli_fail(SUB, "reference image '%s' holds %d frames; give one", o->reference,
                           (int)j->ref.count);
    if (ref->width != j->in.width || ref->height != j->in.height)
        return sw_cli_fail(SUB,
                           "reference image '%s' is %dx%d, the images %dx%d: the reference must "
                           "come from the same camera and size",
                           o->reference, (int)ref->width, (int)ref->height, (int)j->in.width,
                           (int)j->in.height);
    j->geom = o->geom;
    j->geom.valid = NULL;
    if (!o->have_pitch) {
        j->geom_from_reference = 1;
        if ((st = sw_centroid_find_geometry(j->ctx, ref, &j->geom)) != SW_OK)
            return sw_cli_fail(SUB,
                               "reference image '%s': %s (give the grid with --pitch, --grid and "
                               "--origin)",
                               o->reference, sw_cli_lib_error(j->ctx, st));
    }
    if ((st = sw_sh_geometry_check(j->ctx, &j->geom, j->in.width, j->in.height)) != SW_OK)
        return sw_cli_fail(SUB, "the lenslet grid: %s", sw_cli_lib_error(j->ctx, st));
    const size_t nl = (size_t)j->geom.nx * (size_t)j->geom.ny;
    j->ref_x = malloc(nl * sizeof *j->ref_x);
    j->ref_y = malloc(nl * sizeof *j->ref_y);
    if (!j->ref_x || !j->ref_y)
        return sw_cli_fail(SUB, "out of memory");
    st = sw_aberrometry_reference(j->ctx, &j->geom, ref, j->ref_x, j->ref_y, &j->ref_found);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "reference image '%s': %s", o->reference,
                           sw_cli_lib_error(j->ctx, st));
    if (j->ref_found < 1)
        return sw_cli_fail(SUB, "reference image '%s': no spot found in any of the %dx%d lenslets",
                           o->reference, (int)j->geom.nx, (int)j->geom.ny);
    return SW_EXIT_OK;
}

static int make_plan(ab_job *j)
{
    const ab_opts *o = j->o;
    sw_aberrometry_params *p = &j->p;
    if (j->in.type != SW_PIX_U8 && j->in.type != SW_PIX_U16 && j->in.type != SW_PIX_F32)
        return sw_cli_fail(SUB, "'%s' has %s pixels; aberrometry takes 8/16-bit or float frames",
                           o->inputs[0], sw_pixel_type_string(j->in.type));
    sw_aberrometry_params_default(p, j->in.width, j->in.height, j->in.type, &j->geom);
    p->ref_x = j->ref_x;
    p->ref_y = j->ref_y;
    p->n_eyes = o->n_eyes;
    p->algorithm = o->algorithm;
    p->order = o->order;
    if (o->have_prelim)
        p->prelim_order = o->prelim_order;
    else if (p->prelim_order > o->order)
        p->prelim_order = o->order;
    if (o->have_central)
        p->central_fraction = o->central_fraction;
    if (o->have_stages)
        p->mesh_stages = o->mesh_stages;
    if (o->have_slopes)
        p->mesh_slopes_per_term = o->mesh_slopes;
    if (o->have_neighbour)
        p->neighbour_window = o->neighbour_window;
    if (o->have_raise_res)
        p->mesh_raise_residual_px = o->raise_res;
    if (o->have_out_sigma)
        p->outlier_sigma = o->out_sigma;
    if (o->have_out_min)
        p->outlier_min_px = o->out_min;
    if (o->have_tolerance)
        p->mesh_tolerance = o->mesh_tolerance;
    p->fit_radius_px = o->fit_radius_px;
    p->magnification = o->magnification;
    p->vertex_mm = o->vertex_mm;
    p->higher_order_rx = o->clin.higher_rx;
    if (o->have_window)
        p->window_px = o->window;
    p->discard = !o->no_discard;
    if (o->have_contrast)
        p->discard_contrast = o->contrast;
    if (o->have_ring)
        p->discard_ring_px = o->ring;
    p->contrast_full_scale = o->full_scale;
    p->streams = o->streams;
    p->pupil.spots_fallback = o->spots_mode;
    if (o->have_edge_level)
        p->pupil.edge_level = o->edge_level;
    (void)sw_cli_given_finish(SUB, &o->given, o->n_eyes, &p->pupil); /* checked by parse_opts */
    sw_status st = sw_aberrometry_create(j->ctx, p, &j->plan);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(j->ctx, st));
    return SW_EXIT_OK;
}

/* An eye's clinical numbers (clinical.h): its coefficients turned into the examiner's frame
 * (--flip-x / --flip-y), the refraction (the selected one into e.rx) and the image quality there
 * (the pictures' data for the last frame), then a left eye's coefficients mirrored for the report
 * (ANSI Z80.28). */
static int eye_clinical(ab_job *j, int64_t index, int32_t k, eye_out *q)
{
    const ab_opts *o = j->o;
    sw_aberrometry_eye *e = &q->e;
    sw_zernike_flip(e->coef_um, e->terms, o->clin.flip_x, o->clin.flip_y, e->coef_um);
    const int last = index == j->first + j->count - 1;
    char what[64];
    snprintf(what, sizeof what, "frame %lld, eye %d", (long long)index, (int)k + 1);
    int rc = sw_cli_eye_clinical(j->ctx, SUB, what, &o->clin, e->coef_um, e->terms, e->pupil_mm,
                                 o->vertex_mm, last && o->clin.psf_png ? &j->psf[k] : NULL,
                                 last && o->clin.mtf_png ? &j->mtf[k] : NULL, &q->clin);
    if (rc != SW_EXIT_OK)
        return rc;
    e->rx = q->clin.measured;
    if (o->side[k] == 2)
        sw_zernike_mirror_x(e->coef_um, e->terms, e->coef_um);
    return SW_EXIT_OK;
}

/* Copies the library's result of frame `index` into the report, rescaled to --pupil-mm. */
static int keep_result(ab_job *j, int64_t index, const sw_aberrometry_result *r, frame_out *f)
{
    const ab_opts *o = j->o;
    f->n_eyes = r->n_eyes;
    f->scale = r->scale;
    f->split_x = r->split_x;
    for (int32_t k = 0; k < r->n_eyes; k++) {
        eye_out *q = &f->eye[k];
        q->e = r->eye[k];
        q->measured_pupil_mm = r->eye[k].pupil_mm;
        if (!q->e.valid)
            continue;
        if (!(o->pupil_mm > 0)) {
            int rc = eye_clinical(j, index, k, q);
            if (rc != SW_EXIT_OK)
                return rc;
            continue;
        }
        sw_aberrometry_eye *e = &q->e;
        if (o->pupil_mm > e->pupil_mm * (1.0 + 1e-9))
            return sw_cli_fail(SUB,
                               "frame %lld, eye %d: --pupil-mm %g is larger than the measured "
                               "pupil of %.4g mm (coefficients are only rescaled to a smaller "
                               "pupil)",
                               (long long)index, (int)k + 1, o->pupil_mm, e->pupil_mm);
        sw_status st =
            sw_zernike_rescale(j->ctx, e->coef_um, e->terms, e->pupil_mm, o->pupil_mm, e->coef_um);
        if (st == SW_OK)
            /* at least 6 terms (the second order; those beyond `terms` are 0) */
            st = sw_zernike_refraction(j->ctx, e->coef_um, e->terms < 6 ? 6 : e->terms, o->pupil_mm,
                                       o->clin.higher_rx, o->vertex_mm, &e->rx);
        if (st != SW_OK)
            return sw_cli_fail(SUB, "frame %lld, eye %d: --pupil-mm: %s", (long long)index,
                               (int)k + 1, sw_cli_lib_error(j->ctx, st));
        e->pupil_mm = o->pupil_mm;
        int rc = eye_clinical(j, index, k, q);
        if (rc != SW_EXIT_OK)
            return rc;
    }
    return SW_EXIT_OK;
}

/* The progress bar, called through sw_cli_mpi_progress. */
static void progress_update(void *user, int64_t done, int64_t total)
{
    sw_cli_progress_update(user, done, total);
}

/* Frame `index` alone (sw_aberrometry_run) into *f. */
static int run_one(ab_job *j, int64_t index, frame_out *f)
{
    const sw_image *frame = NULL;
    int rc = sw_cli_inputs_frame(j->ctx, SUB, &j->in, index, &frame);
    if (rc != SW_EXIT_OK)
        return rc;
    sw_status st = sw_aberrometry_run(j->plan, frame, &j->batch_res[0]);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "frame %lld: %s", (long long)index, sw_cli_lib_error(j->ctx, st));
    return keep_result(j, index, &j->batch_res[0], f);
}

/* This rank's frames (every frame in one process: mpi->my_first, my_count): one at a time when
 * the run has one, else batches of up to MAX_BATCH frames copied into the context's (pinned on
 * CUDA) buffers for sw_aberrometry_run_batch. A failure is printed and its frame kept in
 * j->failed. */
static int run_frames(ab_job *j, int quiet, sw_cli_mpi *mpi)
{
    const ab_opts *o = j->o;
    sw_status st;
    int rc;
    j->res = calloc((size_t)j->count, sizeof *j->res);
    const int32_t nb = j->count < MAX_BATCH ? (int32_t)j->count : MAX_BATCH;
    j->batch_res = calloc((size_t)nb, sizeof *j->batch_res);
    rc = !j->res || !j->batch_res ? sw_cli_fail(SUB, "out of memory") : SW_EXIT_OK;
    if (rc == SW_EXIT_OK)
        sw_cli_progress_start(&j->bar, SUB, sw_cli_mpi_root(mpi) ? o->progress : 0, quiet,
                              j->count);
    /* every rank, this one failed or not, agrees before the frames: a rank that failed before
     * them stops all of them, and none then gathers (there is no frame to report) */
    if ((rc = sw_cli_mpi_agree(mpi, rc)) != SW_EXIT_OK)
        return rc;
    sw_cli_mpi_deal(mpi, &j->in, j->first, j->count, j->bar.on);
    j->dealt = 1;
    const int64_t lo = mpi->my_first - j->first, hi = lo + mpi->my_count;
    j->failed = -1;
    if (j->count == 1) {
        if (hi > lo && (rc = run_one(j, j->first, &j->res[0])) != SW_EXIT_OK) {
            j->failed = j->first;
            return rc;
        }
        sw_cli_mpi_progress(mpi, hi - lo, progress_update, &j->bar);
        return SW_EXIT_OK;
    }
    for (int32_t i = 0; i < nb; i++)
        if ((st = sw_image_alloc(j->ctx, j->in.width, j->in.height, j->in.type, &j->buf[i])) !=
            SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(j->ctx, st));
    const sw_image *ptr[MAX_BATCH];
    for (int64_t k0 = lo; k0 < hi; k0 += nb) {
        const int32_t n = hi - k0 < nb ? (int32_t)(hi - k0) : nb;
        j->failed = j->first + k0;
        for (int32_t i = 0; i < n; i++) {
            const sw_image *frame = NULL;
            j->failed = j->first + k0 + i;
            if ((rc = sw_cli_inputs_frame(j->ctx, SUB, &j->in, j->first + k0 + i, &frame)) !=
                SW_EXIT_OK)
                return rc;
            if ((st = sw_image_copy(j->ctx, frame, &j->buf[i])) != SW_OK)
                return sw_cli_fail(SUB, "frame %lld: %s", (long long)(j->first + k0 + i),
                                   sw_cli_lib_error(j->ctx, st));
            ptr[i] = &j->buf[i];
        }
        j->failed = j->first + k0;
        if ((st = sw_aberrometry_run_batch(j->plan, ptr, n, j->batch_res)) != SW_OK) {
            if (j->bar.on)
                fputc('\n', stderr);
            return sw_cli_fail(SUB, "frames %lld..%lld: %s", (long long)(j->first + k0),
                               (long long)(j->first + k0 + n - 1), sw_cli_lib_error(j->ctx, st));
        }
        for (int32_t i = 0; i < n; i++) {
            j->failed = j->first + k0 + i;
            if ((rc = keep_result(j, j->first + k0 + i, &j->batch_res[i], &j->res[k0 + i])) !=
                SW_EXIT_OK)
                return rc;
        }
        sw_cli_mpi_progress(mpi, k0 + n - lo, progress_update, &j->bar);
    }
    j->failed = -1;
    return SW_EXIT_OK;
}

/* ---------------------------------------------------------------- output */

/* A CSV number: nan for NaN (one spelling whatever the C library prints). */
static void csv_num(FILE *f, double v)
{
    if (isnan(v))
        fputs(",nan", f);
    else
        fprintf(f, ",%.9g", v);
}

/* A JSON number: null when not finite. */
/* (n, m) of row r of an eye's CSV rows: OSA order, or Noll order with --index noll (the Noll
 * indices of orders <= N are exactly 1 .. J). Returns the j written. */
static int row_term(int noll, int r, int *n, int *m)
{
    if (noll) {
        sw_zernike_noll_nm(r + 1, n, m);
        return r + 1;
    }
    sw_zernike_osa_nm(r, n, m);
    return r;
}

static int write_csv(const ab_job *j, int with_frame)
{
    const ab_opts *o = j->o;
    sw_cli_out out;
    int rc = sw_cli_out_open(SUB, &out, o->out);
    if (rc != SW_EXIT_OK)
        return rc;
    const int terms = sw_zernike_count(o->order);
    fprintf(out.f, "%seye,j,n,m,coef_um\n", with_frame ? "frame," : "");
    for (int64_t k = 0; k < j->count; k++) {
        const frame_out *f = &j->res[k];
        for (int32_t e = 0; e < f->n_eyes; e++) {
            const sw_aberrometry_eye *q = &f->eye[e].e;
            for (int r = 0; r < terms; r++) {
                int n = 0, m = 0;
                const int jj = row_term(o->noll, r, &n, &m);
                const int osa = sw_zernike_osa(n, m);
                if (with_frame)
                    fprintf(out.f, "%lld,", (long long)(j->first + k));
                fprintf(out.f, "%d,%d,%d,%d", (int)e + 1, jj, n, m);
                csv_num(out.f, q->valid && osa < q->terms ? q->coef_um[osa] : NAN);
                fputc('\n', out.f);
            }
        }
    }
    return sw_cli_out_close(SUB, &out, 1);
}

/* The last frame's lenslets (sw_aberrometry_spots). */
static int write_spots(ab_job *j)
{
    const int32_t nx = j->geom.nx, ny = j->geom.ny;
    const size_t nl = (size_t)nx * (size_t)ny;
    double *a = malloc(4 * nl * sizeof *a);
    uint8_t *b = malloc(2 * nl);
    if (!a || !b) {
        free(a);
        free(b);
        return sw_cli_fail(SUB, "out of memory");
    }
    double *x = a, *y = a + nl, *x0 = a + 2 * nl, *y0 = a + 3 * nl;
    uint8_t *status = b, *eye = b + nl;
    sw_status st = sw_aberrometry_spots(j->plan, x, y, status, eye, x0, y0);
    int rc = SW_EXIT_OK;
    if (st != SW_OK)
        rc = sw_cli_fail(SUB, "--spots: %s", sw_cli_lib_error(j->ctx, st));
    sw_cli_out out = {0};
    if (rc == SW_EXIT_OK)
        rc = sw_cli_out_open(SUB, &out, j->o->spots);
    if (rc == SW_EXIT_OK) {
        fprintf(out.f, "ix,iy,eye,x_px,y_px,x0_px,y0_px,status\n");
        for (size_t l = 0; l < nl; l++) {
            fprintf(out.f, "%d,%d,%d", (int)(l % (size_t)nx), (int)(l / (size_t)nx), (int)eye[l]);
            csv_num(out.f, x[l]);
            csv_num(out.f, y[l]);
            csv_num(out.f, x0[l]);
            csv_num(out.f, y0[l]);
            fprintf(out.f, ",%d\n", (int)status[l]);
        }
        rc = sw_cli_out_close(SUB, &out, 1);
    }
    free(a);
    free(b);
    return rc;
}

/* FILE, or FILE with _eye<k> before its extension for two eyes. */
static void map_name(const char *path, int n_eyes, int k, char *buf, size_t size)
{
    if (n_eyes < 2) {
        snprintf(buf, size, "%s", path);
        return;
    }
    const char *dot = strrchr(path, '.');
    const char *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash))
        dot = path + strlen(path);
    snprintf(buf, size, "%.*s_eye%d%s", (int)(dot - path), path, k + 1, dot);
}

/* The keys of an eye's FITS map: micrometres over the eye's pupil, and what was measured. */
static void map_header(sw_cli_hdr *h, const ab_job *j, const sw_aberrometry_eye *e, int k,
                       int32_t size)
{
    sw_cli_hdr_init(h, "um", "wavefront; NaN outside the pupil");
    sw_cli_hdr_comment(h, "spotwave aberrometry: the wavefront of eye %d, frame %lld", k + 1,
                       (long long)(j->first + j->count - 1));
    sw_cli_hdr_command(h);
    sw_cli_hdr_wcs_linear(h, "PUPILX", "PUPILY", "mm", 0.5 * (size + 1), 0.5 * (size + 1), 0.0, 0.0,
                          e->pupil_mm / size, e->pupil_mm / size);
    sw_cli_hdr_int(h, "EYE", k + 1, "eye number, as in the report");
    sw_cli_hdr_int(h, "FRAME", j->first + j->count - 1, "input frame (0-based)");
    sw_cli_hdr_num(h, "PUPIL", e->pupil_mm, "[mm] pupil diameter at the eye the map spans");
    sw_cli_hdr_num(h, "PUPILCX", e->cx_px, "[pixel] analysis circle centre x (0-based)");
    sw_cli_hdr_num(h, "PUPILCY", e->cy_px, "[pixel] analysis circle centre y (0-based)");
    sw_cli_hdr_num(h, "PUPILR", e->radius_px, "[pixel] analysis circle radius");
    sw_cli_hdr_num(h, "MAGNIF", j->p.magnification, "detector / eye magnification");
    sw_cli_hdr_str(h, "SEARCH", sw_search_algorithm_string(j->p.algorithm), "spot search");
    sw_cli_hdr_int(h, "ORDER", j->p.order, "highest radial order fitted");
    sw_cli_hdr_int(h, "TERMS", e->terms, "Zernike terms (OSA/ANSI order)");
    sw_cli_hdr_int(h, "SPOTS", e->kept, "spots kept for the fit");
    sw_cli_hdr_num(h, "RESIDUAL", e->residual_px, "[pixel] RMS residual of the fit");
    sw_cli_hdr_num(h, "SPHERE", e->rx.sphere_d, "[1/m] refraction sphere (dioptres)");
    sw_cli_hdr_num(h, "CYL", e->rx.cyl_d, "[1/m] refraction cylinder (dioptres)");
    sw_cli_hdr_num(h, "AXIS", e->rx.axis_deg, "[deg] cylinder axis");
}

/* The wavefront maps of the last frame's eyes (zernike_fit.h's sw_zmap). */
static int write_maps(ab_job *j, int quiet)
{
    const ab_opts *o = j->o;
    const frame_out *f = &j->res[j->count - 1];
    sw_zmap_params zp;
    sw_zmap_params_default(&zp);
    zp.size = o->map_size;
    zp.max_order = o->order;
    sw_zmap_plan *zplan = NULL;
    sw_image map = {0};
    int rc = SW_EXIT_OK;
    sw_context *ctx = j->ctx;
    sw_status st = sw_zmap_create(ctx, &zp, &zplan);
    if (st == SW_OK)
        st = sw_image_alloc(NULL, zp.size, zp.size, SW_PIX_F32, &map);
    if (st != SW_OK) {
        rc = sw_cli_fail(SUB, "--map: %s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    for (int32_t k = 0; k < f->n_eyes; k++) {
        const sw_aberrometry_eye *e = &f->eye[k].e;
        char path[4200];
        map_name(o->map, f->n_eyes, k, path, sizeof path);
        if (!e->valid) {
            if (!quiet)
                fprintf(stderr, "spotwave %s: eye %d has no result (%s): no map '%s'\n", SUB,
                        (int)k + 1, sw_ab_failure_string(e->failure), path);
            continue;
        }
        if ((st = sw_zmap_run(zplan, e->coef_um, e->terms, &map)) != SW_OK) {
            rc = sw_cli_fail(SUB, "--map: %s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        const char *staged = sw_cli_file_staged("--map", path);
        if (!staged) {
            rc = SW_EXIT_FAIL;
            goto done;
        }
        if (o->map_fits) {
            sw_cli_hdr hdr;
            map_header(&hdr, j, e, k, zp.size);
            st = sw_cli_hdr_write(ctx, staged, &map, 1, &hdr);
        } else {
            char title[96];
            snprintf(title, sizeof title, "eye %d wavefront, frame %lld, %.2f mm pupil", (int)k + 1,
                     (long long)(j->first + j->count - 1), e->pupil_mm);
            st = sw_cli_map_png(ctx, staged, &map, SW_CLI_UM, title);
        }
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        j->map_written[k] = 1;
    }
done:
    sw_image_free(&map);
    sw_zmap_destroy(zplan);
    return rc;
}

/* The PSF and MTF pictures of the last frame's eyes (clinical.h), FILE_eye<k> for two eyes. */
static int write_quality(ab_job *j, int quiet)
{
    const ab_opts *o = j->o;
    const frame_out *f = &j->res[j->count - 1];
    for (int32_t k = 0; k < f->n_eyes; k++) {
        const eye_out *q = &f->eye[k];
        if (!q->e.valid || !q->clin.have_quality) {
            if (!quiet)
                fprintf(stderr, "spotwave %s: eye %d has no result: no PSF or MTF picture\n", SUB,
                        (int)k + 1);
            continue;
        }
        char path[4200], title[160];
        const long long fr = (long long)(j->first + j->count - 1);
        sw_status st = SW_OK;
        if (o->clin.psf_png) {
            sw_cli_eye_file(o->clin.psf_png, f->n_eyes, k, path, sizeof path);
            snprintf(title, sizeof title, "eye %d PSF, %.2f mm, %.3g um, Strehl %.3f", (int)k + 1,
                     q->e.pupil_mm, q->clin.quality_um, q->clin.q.strehl);
            const char *staged = sw_cli_file_staged("--psf", path);
            if (!staged)
                return SW_EXIT_FAIL;
            st = sw_cli_psf_png(j->ctx, staged, &j->psf[k], q->clin.psf_arcmin_px, title);
        }
        if (st == SW_OK && o->clin.mtf_png) {
            sw_cli_eye_file(o->clin.mtf_png, f->n_eyes, k, path, sizeof path);
            snprintf(title, sizeof title, "eye %d MTF, frame %lld, %.2f mm, %.3g um, VSMTF %.3f",
                     (int)k + 1, fr, q->e.pupil_mm, q->clin.quality_um, q->clin.q.vsmtf);
            const char *staged = sw_cli_file_staged("--mtf", path);
            if (!staged)
                return SW_EXIT_FAIL;
            st = sw_cli_mtf_png(j->ctx, staged, &j->mtf[k], q->clin.mtf_cpd_px, q->clin.cutoff_cpd,
                                title);
        }
        if (st != SW_OK)
            return sw_cli_fail(SUB, "%s", sw_cli_lib_error(j->ctx, st));
    }
    return SW_EXIT_OK;
}

static cJSON *json_eye(const ab_opts *o, const eye_out *q, int k, const char *map)
{
    const sw_aberrometry_eye *e = &q->e;
    const sw_pupil_ellipse *p = &e->pupil;
    cJSON *x = cJSON_CreateObject();
    sw_cli_json_int(x, "eye", k + 1);
    cJSON_AddBoolToObject(x, "valid", e->valid);
    if (e->valid) {
        cJSON_AddNullToObject(x, "failure");
    } else if (e->failure == SW_AB_NO_PUPIL) {
        char why[384];
        snprintf(why, sizeof why, "%s: %s%s%s", sw_ab_failure_string(e->failure),
                 sw_pupil_failure_string(p->failure),
                 p->spots_failure != SW_PUPIL_OK ? "; spots path: " : "",
                 p->spots_failure != SW_PUPIL_OK ? sw_pupil_failure_string(p->spots_failure) : "");
        sw_cli_json_string(x, "failure", why);
    } else {
        sw_cli_json_string(x, "failure", sw_ab_failure_string(e->failure));
    }
    sw_cli_json_int(x, "failure_code", (int)e->failure);
    cJSON *pj = cJSON_AddObjectToObject(x, "pupil");
    cJSON_AddBoolToObject(pj, "valid", p->valid);
    sw_cli_json_string(pj, "failure", p->valid ? NULL : sw_pupil_failure_string(p->failure));
    sw_cli_json_double(pj, "cx_px", p->valid ? p->cx_px : NAN);
    sw_cli_json_double(pj, "cy_px", p->valid ? p->cy_px : NAN);
    sw_cli_json_double(pj, "a_px", p->valid ? p->a_px : NAN);
    sw_cli_json_double(pj, "b_px", p->valid ? p->b_px : NAN);
    sw_cli_json_double(pj, "angle_deg", p->valid ? p->angle_deg : NAN);
    sw_cli_json_int(pj, "inliers", p->inliers);
    sw_cli_json_string(pj, "method", sw_pupil_method_string(p->method));
    sw_cli_json_string(pj, "fallback_reason",
                       p->glow_failure != SW_PUPIL_OK ? sw_pupil_failure_string(p->glow_failure)
                                                      : NULL);
    sw_cli_json_string(pj, "spots_failure",
                       p->spots_failure != SW_PUPIL_OK ? sw_pupil_failure_string(p->spots_failure)
                                                       : NULL);
    sw_cli_json_string(x, "pupil_method", sw_pupil_method_string(p->method));
    sw_cli_json_string(x, "pupil_fallback_reason",
                       p->glow_failure != SW_PUPIL_OK ? sw_pupil_failure_string(p->glow_failure)
                                                      : NULL);
    cJSON *cj = cJSON_AddObjectToObject(x, "analysis_circle");
    sw_cli_json_double(cj, "cx_px", e->cx_px);
    sw_cli_json_double(cj, "cy_px", e->cy_px);
    sw_cli_json_double(cj, "radius_px", e->radius_px);
    sw_cli_json_double(x, "pupil_mm", e->pupil_mm);
    sw_cli_json_double(x, "measured_pupil_mm", q->measured_pupil_mm);
    cJSON *n = cJSON_AddObjectToObject(x, "counts");
    sw_cli_json_int(n, "lenslets", e->lenslets);
    sw_cli_json_int(n, "central", e->central);
    sw_cli_json_int(n, "found", e->found);
    sw_cli_json_int(n, "kept", e->kept);
    sw_cli_json_int(n, "discarded", e->discarded[0] + e->discarded[1] + e->discarded[2]);
    sw_cli_json_int(n, "discarded_empty", e->discarded[0]);
    sw_cli_json_int(n, "discarded_spacing", e->discarded[1]);
    sw_cli_json_int(n, "discarded_isolated", e->discarded[2]);
    sw_cli_json_int(n, "outliers", e->outliers);
    sw_cli_json_int(x, "terms", e->terms);
    cJSON *coef = cJSON_AddArrayToObject(x, "coefficients");
    for (int r = 0; r < e->terms; r++) {
        int nn = 0, m = 0;
        const int jj = row_term(o->noll, r, &nn, &m);
        const int osa = sw_zernike_osa(nn, m);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(coef, c);
        sw_cli_json_int(c, "j", jj);
        sw_cli_json_int(c, "n", nn);
        sw_cli_json_int(c, "m", m);
        sw_cli_json_double(c, "coef_um", e->valid ? e->coef_um[osa] : NAN);
    }
    const int ok = e->valid;
    /* orders >= 2 (no piston, no tilt); hoa: orders >= 3 */
    sw_cli_json_double(x, "rms_um", ok ? sw_zernike_rms(e->coef_um, e->terms, 3) : NAN);
    sw_cli_json_double(x, "hoa_rms_um",
                       ok && e->terms > 6 ? sw_zernike_rms(e->coef_um, e->terms, 6) : NAN);
    sw_cli_json_double(x, "residual_px", ok ? e->residual_px : NAN);
    cJSON *rx = cJSON_AddObjectToObject(x, "refraction");
    sw_cli_json_double(rx, "sphere_d", ok ? e->rx.sphere_d : NAN);
    sw_cli_json_double(rx, "cyl_d", ok ? e->rx.cyl_d : NAN);
    sw_cli_json_double(rx, "axis_deg", ok ? e->rx.axis_deg : NAN);
    sw_cli_json_double(rx, "M", ok ? e->rx.M : NAN);
    sw_cli_json_double(rx, "J0", ok ? e->rx.J0 : NAN);
    sw_cli_json_double(rx, "J45", ok ? e->rx.J45 : NAN);
    sw_cli_eye_json(x, &o->clin, &q->clin, o->side[k], e->coef_um, e->terms, e->pupil_mm,
                    o->vertex_mm);
    sw_cli_json_string(x, "map", map);
    return x;
}

static void json_report(const ab_job *j, double seconds, const sw_cli_mpi *mpi)
{
    const ab_opts *o = j->o;
    const sw_aberrometry_params *p = &j->p;
    cJSON *r = cJSON_CreateObject();
    sw_cli_json_string(r, "command", "aberrometry");
    cJSON *inputs = cJSON_AddArrayToObject(r, "inputs");
    for (int i = 0; i < o->ninputs; i++)
        cJSON_AddItemToArray(inputs, sw_cli_json_str(o->inputs[i]));
    sw_cli_json_string(r, "reference", o->reference);
    sw_cli_json_string(r, "out", o->out);
    sw_cli_json_string(r, "spots", o->spots);
    sw_cli_json_string(r, "backend", sw_backend_string(sw_context_backend(j->ctx)));
    sw_cli_json_int_array(r, "frame_size", (const int64_t[]){j->in.width, j->in.height}, 2);
    sw_cli_json_string(r, "pixel_type", sw_pixel_type_string(j->in.type));
    sw_cli_json_int(r, "first_frame", j->first);
    sw_cli_json_int(r, "frame_count", j->count);
    const sw_sh_geometry *g = &j->geom;
    cJSON *grid = cJSON_AddObjectToObject(r, "lenslet_grid");
    sw_cli_json_string(grid, "source", j->geom_from_reference ? "reference" : "options");
    sw_cli_json_int(grid, "nx", g->nx);
    sw_cli_json_int(grid, "ny", g->ny);
    sw_cli_json_double(grid, "pitch_px", g->pitch_px);
    sw_cli_json_double(grid, "x0", g->x0);
    sw_cli_json_double(grid, "y0", g->y0);
    sw_cli_json_double(grid, "pixel_um", g->pixel_um);
    sw_cli_json_double(grid, "focal_mm", g->focal_mm);
    sw_cli_json_int(r, "reference_spots", j->ref_found);
    sw_cli_json_int(r, "eyes", p->n_eyes);
    sw_cli_json_string(r, "algorithm", sw_search_algorithm_string(p->algorithm));
    sw_cli_json_int(r, "order", p->order);
    sw_cli_json_int(r, "prelim_order", p->prelim_order);
    sw_cli_json_int(r, "mesh_stages", p->mesh_stages);
    sw_cli_json_double(r, "mesh_tolerance", p->mesh_tolerance);
    sw_cli_json_int(r, "mesh_slopes_per_term", p->mesh_slopes_per_term);
    sw_cli_json_double(r, "neighbour_window", p->neighbour_window);
    sw_cli_json_double(r, "mesh_raise_residual_px", p->mesh_raise_residual_px);
    sw_cli_json_double(r, "outlier_sigma", p->outlier_sigma);
    sw_cli_json_double(r, "outlier_min_px", p->outlier_min_px);
    sw_cli_json_double(r, "central_fraction", p->central_fraction);
    if (p->fit_radius_px > 0)
        sw_cli_json_double(r, "fit_radius_px", p->fit_radius_px);
    else
        sw_cli_json_string(r, "fit_radius_px", "pupil");
    sw_cli_json_double(r, "magnification", p->magnification);
    sw_cli_json_string(r, "magnification_source",
                       o->have_magnification ? "option" : "default (sim eye's)");
    cJSON_AddBoolToObject(r, "magnification_default", !o->have_magnification);
    cJSON_AddBoolToObject(r, "pupil_given", p->pupil.given);
    sw_cli_json_string(r, "pupil_tracking",
                       p->pupil.given ? "given"
                                      : sw_cli_pupil_method_name(p->pupil.spots_fallback));
    if (p->pupil.edge_level < 0.0)
        sw_cli_json_string(r, "edge_level", "auto");
    else
        sw_cli_json_double(r, "edge_level", p->pupil.edge_level);
    sw_cli_json_double(r, "vertex_mm", p->vertex_mm);
    sw_cli_clinical_json(r, &o->clin);
    sw_cli_json_string(r, "psf", o->clin.psf_png);
    sw_cli_json_string(r, "mtf", o->clin.mtf_png);
    sw_cli_json_int(r, "window_px", p->window_px > 0 ? p->window_px : (int)floor(g->pitch_px));
    cJSON_AddBoolToObject(r, "discard", p->discard);
    sw_cli_json_double(r, "discard_contrast", p->discard_contrast);
    sw_cli_json_double(r, "contrast_full_scale", sw_aberrometry_full_scale(p));
    sw_cli_json_int(r, "discard_ring_px", sw_aberrometry_discard_ring(p));
    sw_cli_json_double(r, "discard_contrast_px",
                       p->discard_contrast * sw_aberrometry_full_scale(p) / 255.0);
    sw_cli_json_string(r, "index", o->noll ? "noll" : "ansi");
    sw_cli_json_double(r, "pupil_mm", o->pupil_mm > 0 ? o->pupil_mm : NAN);
    sw_cli_json_int(r, "streams", p->streams);
    cJSON *frames = cJSON_AddArrayToObject(r, "frames");
    int64_t valid = 0, asked = 0;
    for (int64_t k = 0; k < j->count; k++) {
        const frame_out *fr = &j->res[k];
        cJSON *fj = cJSON_CreateObject();
        cJSON_AddItemToArray(frames, fj);
        sw_cli_json_int(fj, "frame", j->first + k);
        sw_cli_json_double(fj, "scale", fr->scale);
        sw_cli_json_double(fj, "split_x", fr->split_x);
        cJSON *eyes = cJSON_AddArrayToObject(fj, "eyes");
        for (int32_t e = 0; e < fr->n_eyes; e++) {
            char path[4200];
            const int last = k == j->count - 1;
            if (o->map)
                map_name(o->map, fr->n_eyes, e, path, sizeof path);
            cJSON_AddItemToArray(eyes, json_eye(o, &fr->eye[e], e,
                                                last && o->map && j->map_written[e] ? path : NULL));
            asked++;
            valid += fr->eye[e].e.valid != 0;
        }
    }
    sw_cli_json_int(r, "eyes_valid", valid);
    sw_cli_json_int(r, "eyes_asked", asked);
    sw_cli_json_fixed(r, "seconds", seconds, 6);
    sw_cli_json_fixed(r, "frames_per_second", seconds > 0 ? (double)j->count / seconds : 0.0, 3);
    sw_cli_mpi_json(mpi, r);
    sw_cli_json_print(r);
}

/* A few lines for people when the CSV went to a file and no JSON was asked for. */
static void text_report(const ab_job *j, double seconds)
{
    const frame_out *f = &j->res[j->count - 1];
    printf("aberrometry: %lld frame%s of %dx%d %s, grid %dx%d of %g px%s, %s, order %d, %.3f s\n",
           (long long)j->count, j->count == 1 ? "" : "s", j->in.width, j->in.height,
           sw_pixel_type_string(j->in.type), j->geom.nx, j->geom.ny, j->geom.pitch_px,
           j->geom_from_reference ? " (from the reference)" : "",
           sw_search_algorithm_string(j->p.algorithm), j->p.order, seconds);
    printf("  optics     magnification %g (%s), %g um pixels, f %g mm; refraction %s at %g um\n",
           j->p.magnification,
           j->o->have_magnification ? "--magnification" : "the default: sim eye's; give yours",
           j->geom.pixel_um, j->geom.focal_mm,
           j->o->clin.higher_rx ? "with the 4th and 6th orders" : "of the second order",
           j->o->clin.wavelength_um);
    for (int32_t k = 0; k < f->n_eyes; k++) {
        const sw_aberrometry_eye *e = &f->eye[k].e;
        if (!e->valid) {
            printf("  eye %d      no result: %s\n", (int)k + 1, sw_ab_failure_string(e->failure));
            continue;
        }
        printf("  eye %d      pupil %.3f mm at (%.1f, %.1f) px; %d lenslets, %d kept; RMS %.3f "
               "um; %+.2f D %+.2f D x %.0f deg\n",
               (int)k + 1, e->pupil_mm, e->cx_px, e->cy_px, e->lenslets, e->kept,
               sw_zernike_rms(e->coef_um, e->terms, 3), e->rx.sphere_d, e->rx.cyl_d,
               e->rx.axis_deg);
        const sw_cli_eye_rx *q = &f->eye[k].clin;
        if (q->ok) {
            char line[160];
            sw_cli_rx_text(line, sizeof line, j->o->clin.higher_rx ? &q->higher : &q->second,
                           j->o->side[k], j->o->clin.reference_um);
            printf("             Rx %s\n", line);
        }
        if (q->have_quality)
            printf("             Strehl %.4f, VSOTF %.4f, VSMTF %.4f at %.3g um\n", q->q.strehl,
                   q->q.vsotf, q->q.vsmtf, q->quality_um);
    }
}

/* ---------------------------------------------------------------- the command */

int sw_cmd_aberrometry(const sw_cli_globals *g, int argc, char **argv)
{
    ab_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_opts(&o, argc, argv);
    if (rc < 0)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    for (int i = 0; i < o.ninputs; i++)
        sw_cli_file_in("image", o.inputs[i]);
    sw_cli_file_in("--reference", o.reference);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--map", o.map);
    sw_cli_file_out("--spots", o.spots);
    sw_cli_file_out("--psf", o.clin.psf_png);
    sw_cli_file_out("--mtf", o.clin.mtf_png);
    /* `mpirun -np N`: the frames dealt to N processes (cli_mpi.h); a plain run is rank 0 of 1 */
    sw_cli_mpi mpi;
    if ((rc = sw_cli_mpi_start(&mpi, SUB)) == SW_EXIT_OK)
        rc = sw_cli_files_check();
    const sw_cli_globals rank_g = sw_cli_mpi_globals(&mpi, g);
    ab_job j;
    memset(&j, 0, sizeof j);
    j.o = &o;
    if (rc != SW_EXIT_OK || (rc = sw_cli_context(&rank_g, SUB, &j.ctx)) != SW_EXIT_OK)
        return sw_cli_mpi_end(&mpi, rc);
    if ((rc = sw_cli_inputs_open(j.ctx, SUB, o.inputs, o.ninputs, o.dataset, 0, NULL, NULL,
                                 &j.in)) != SW_EXIT_OK)
        goto done;
    j.first = o.first;
    if ((rc = sw_cli_inputs_range(SUB, &j.in, j.first, o.count, &j.count)) != SW_EXIT_OK)
        goto done;
    if ((rc = prepare_reference(&j)) != SW_EXIT_OK || (rc = make_plan(&j)) != SW_EXIT_OK)
        goto done;
    rc = run_frames(&j, g->quiet, &mpi);
    if (mpi.on && j.dealt) {
        /* rank 0 gathers every rank's results; a failed rank has printed its message */
        const sw_cli_mpi_array arrays[] = {{j.res, sizeof *j.res}};
        rc = sw_cli_mpi_gather_frames(&mpi, NULL, rc == SW_EXIT_OK ? SW_OK : SW_EINVAL, j.failed,
                                      arrays, 1);
        if (rc != SW_EXIT_OK || !sw_cli_mpi_root(&mpi))
            goto done; /* only rank 0 writes */
        /* the last frame's pictures and lenslets come from the plan that ran it: rank 0 runs it
         * again when another rank had it (its results in the table stay the gathered ones) */
        const int64_t last = j.first + j.count - 1;
        if ((o.spots || o.clin.psf_png || o.clin.mtf_png) && last >= mpi.my_first + mpi.my_count) {
            frame_out again;
            if ((rc = run_one(&j, last, &again)) != SW_EXIT_OK)
                goto done;
        }
    }
    if (rc != SW_EXIT_OK)
        goto done;
    double seconds = sw_cli_now() - j.bar.t_start;
    /* pictures and side tables first: a run that cannot write them leaves no table behind */
    if (o.map && (rc = write_maps(&j, g->quiet)) != SW_EXIT_OK)
        goto done;
    if ((o.clin.psf_png || o.clin.mtf_png) && (rc = write_quality(&j, g->quiet)) != SW_EXIT_OK)
        goto done;
    if (o.spots && (rc = write_spots(&j)) != SW_EXIT_OK)
        goto done;
    if ((rc = write_csv(&j, j.in.total > 1)) != SW_EXIT_OK)
        goto done;
    if (o.json)
        json_report(&j, seconds, &mpi);
    else if (o.out && strcmp(o.out, "-") != 0)
        text_report(&j, seconds);
    rc = SW_EXIT_OK;
done:
    job_free(&j);
    return sw_cli_mpi_end(&mpi, rc);
}
