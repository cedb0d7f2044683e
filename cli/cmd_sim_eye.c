/*
 * spotwave sim eye: Hartmann-Shack images of one or two synthetic eyes (Mompean et al. 2019
 * Sec. 4.1: population aberrations, retinal glow, reflections, brightness maps, noise; sim_eye.h).
 */
#define _GNU_SOURCE

#include "json.h"
#include "sim_common.h"

#include "spotwave/sim_eye.h"
#include "spotwave/turbulence.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SUB_EYE "sim eye"

#define EYE_DEF_WAVELENGTH 0.78
#define EYE_DEF_FLUX       2000.0
#define EYE_DEF_PUPIL_MM   5.12

static void sim_eye_help(FILE *out)
{
    sw_eye_artefacts a;
    sw_eye_artefacts_default(&a);
    fprintf(out,
            "Usage: spotwave [GLOBAL OPTIONS] sim eye [OPTIONS] --out IMAGE\n"
            "\n"
            "Hartmann-Shack images of one or two synthetic eyes, as in the test set of Mompean,\n"
            "Aragon, Prieto & Artal 2019 (Future Gener. Comput. Syst. 91, 177, Sec. 4.1):\n"
            "aberrations drawn from a population of normal eyes (Thibos, Hong, Bradley & Cheng\n"
            "2002, J. Opt. Soc. Am. A 19(12), 2329; data/ocular), the spots of each eye through\n"
            "its pupil, the diffuse retinal glow that lights the pupils, corneal reflections,\n"
            "brightness maps, tear-film break-up and white noise, then the detector model. With\n"
            "--truth it writes each eye's spot positions, Zernike coefficients and pupil\n"
            "ellipse.\n"
            "\n"
            "Eyes:\n"
            "  --binocular            two eyes side by side (default: one)\n"
            "  --eye-center X,Y       a pupil centre in pixels; once per eye (default: the\n"
            "                         centre of the image, or of each half)\n"
            "  --pupil-px P           pupil diameter on the detector, pixels (default: 0.9 x the\n"
            "                         smaller side of the image or of each half). The eye's\n"
            "                         pupil reaches the detector magnified by P x pixel-um /\n"
            "                         (1000 x pupil-mm): 576 x 5.5 / 5120 = 0.61875 by default,\n"
            "                         the default --magnification of 'spotwave aberrometry'; the\n"
            "                         report prints it: give it to aberrometry when it differs\n"
            "  --pupil-mm D           the eye's pupil diameter, mm: the coefficients' pupil\n"
            "                         (default %g)\n"
            "  --ellipse B/A,ANGLE    elliptical pupils: minor/major ratio, major axis angle\n"
            "                         (degrees from +x towards +y)\n"
            "\n"
            "Aberrations (coefficients in um over --pupil-mm; piston removed):\n"
            "  --zernike CSV          given coefficients (n,m / j / noll and coef_um); once per\n"
            "                         eye, or once for both. Tilts are kept.\n"
            "  --zernike-pupil-mm D   the pupil of those coefficients, >= --pupil-mm (default\n"
            "                         --pupil-mm); they are rescaled to --pupil-mm\n"
            "  --data DIR             population statistics folder (default:\n"
            "                         $SPOTWAVE_DATA_DIR/ocular, else the source tree's\n"
            "                         data/ocular)\n"
            "  --population-mm D      statistics of this pupil: 3.0, 4.5, 6.0 or 7.5 (default:\n"
            "                         the smallest >= --pupil-mm), rescaled to --pupil-mm\n"
            "  --index I              population draw of the first eye (default 0; the second\n"
            "                         eye is I+1)\n"
            "  --max-order N          radial orders above N set to 0\n"
            "  --keep-tilt            keep the population's tilts (default: zero them)\n"
            "  --sphere-d S           sphere added to every eye, dioptres\n"
            "  --cyl-d C              cylinder, dioptres\n"
            "  --axis-deg A           cylinder axis, degrees\n"
            "  --rms-um R             scale orders >= 2 so that their RMS is R um (Mompean et\n"
            "                         al. 2019, Sec. 4.3: 0.5 to 6)\n"
            "\n"
            "Artefacts (--no-artefacts turns off all those not given):\n"
            "  --glow E               retinal glow at the pupil centre, e-/px (default %g; 0: no\n"
            "                         glow, as an artificial eye or a bench: aberrometry then\n"
            "                         finds the pupil from the spots)\n"
            "  --glow-falloff F       fraction of the glow lost at the pupil edge (default %g)\n"
            "  --reflection E         corneal reflection peak, e- (default %g; 0: none)\n"
            "  --reflection-sigma PX  its Gaussian sigma (default %g)\n"
            "  --reflection-offset F  largest offset from the pupil centre, x radius (%g)\n"
            "  --brightness F         brightness map amplitude, 0 <= F < 1 (default %g)\n"
            "  --tear-film N          tear-film break-up blobs per eye (default %d)\n"
            "  --tear-depth F         intensity drop at a blob's centre (default %g)\n"
            "  --white-noise E        additive Gaussian noise, e- RMS (default %g)\n"
            "  --no-artefacts         a clean image (spots only)\n"
            "\n"
            "%s"
            "\n"
            "%s"
            "  --seed S               population draws, artefacts and noise (default %d)\n"
            "\n"
            "Output:\n"
            "  -o, --out IMAGE        .fits (any --bits), .pgm or .h5 (Eiger-like NeXus; 8 or 16 "
            "bits)\n"
            "  --truth PREFIX         PREFIX_eye<k>_spots.csv (ix,iy,x_px,y_px,ref_x_px,ref_y_px,\n"
            "                         illum), PREFIX_eye<k>_zernike.csv (j,n,m,noll,coef_um) and\n"
            "                         PREFIX_pupils.csv (pupil,cx_px,cy_px,a_px,b_px,angle_deg,\n"
            "                         pupil_mm,reflection_x_px,reflection_y_px,magnification,\n"
            "                         pixel_um: the magnification is aberrometry's\n"
            "                         --magnification for this image)\n"
            "  --reference IMAGE      flat wavefronts through the same pupils and detector, no\n"
            "                         artefacts (the centroid reference)\n"
            "  --json                 print the report as JSON\n"
            "  -h, --help             print this help and exit\n"
            "\n"
            "Mompean et al.'s test set is 100 images per RMS level 0.5, 1.0, ... 6.0 um over a\n"
            "5.12 mm pupil; one of them:\n"
            "  spotwave sim eye --rms-um 2.5 --seed 17 --out e.pgm --truth e --reference ref.pgm\n",
            EYE_DEF_PUPIL_MM, a.glow_e, a.glow_falloff, a.reflection_e, a.reflection_sigma_px,
            a.reflection_offset, a.brightness, a.tear_blobs, a.tear_depth, a.white_noise_e,
            sim_sh_opts_help("default: as many as fit the image",
                             "default 640x640; 1280x640 binocular", EYE_DEF_WAVELENGTH,
                             EYE_DEF_FLUX),
            sim_detector_help(8), DEF_SEED);
}

/* Artefact options given explicitly (kept by --no-artefacts). */
enum {
    ART_GLOW = 1,
    ART_FALLOFF = 2,
    ART_REFL = 4,
    ART_REFL_SIGMA = 8,
    ART_REFL_OFFSET = 16,
    ART_BRIGHT = 32,
    ART_TEAR = 64,
    ART_TEAR_DEPTH = 128,
    ART_WHITE = 256
};

typedef struct eye_opts {
    sh_opts sh;
    int binocular;
    double pupil_mm, pupil_px, ellipse_ratio, ellipse_angle;
    double centers[2][2];
    int n_centers, have_ellipse;
    const char *zernike[2];
    int n_zernike;
    double zernike_pupil_mm;
    const char *data;
    double population_mm;
    long max_order;
    int keep_tilt;
    double rms_um;
    sw_eye_rx rx;
    uint64_t index;
    sw_eye_artefacts art;
    unsigned art_given;
    int no_artefacts;
    uint64_t seed;
    det_opts d;
    const char *out, *truth, *reference;
    int json;
} eye_opts;

typedef struct eye_report {
    const char *source;
    sw_eyesim_truth truth;
    double render_ms, detector_ms, write_ms;
    sw_backend backend;
} eye_report;

static int parse_eye_options(int argc, char **argv, eye_opts *o)
{
    enum {
        OPT_BINOCULAR = 256,
        OPT_CENTER,
        OPT_PUPIL_PX,
        OPT_PUPIL_MM,
        OPT_ELLIPSE,
        OPT_ZERNIKE,
        OPT_ZPUPIL,
        OPT_DATA,
        OPT_POPULATION,
        OPT_INDEX,
        OPT_MAX_ORDER,
        OPT_KEEP_TILT,
        OPT_SPHERE,
        OPT_CYL,
        OPT_AXIS,
        OPT_RMS,
        OPT_GLOW,
        OPT_FALLOFF,
        OPT_REFL,
        OPT_REFL_SIGMA,
        OPT_REFL_OFFSET,
        OPT_BRIGHT,
        OPT_TEAR,
        OPT_TEAR_DEPTH,
        OPT_WHITE,
        OPT_NO_ART,
        OPT_SEED,
        OPT_TRUTH,
        OPT_REFERENCE,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"binocular", no_argument, NULL, OPT_BINOCULAR},
        {"eye-center", required_argument, NULL, OPT_CENTER},
        {"pupil-px", required_argument, NULL, OPT_PUPIL_PX},
        {"pupil-mm", required_argument, NULL, OPT_PUPIL_MM},
        {"ellipse", required_argument, NULL, OPT_ELLIPSE},
        {"zernike", required_argument, NULL, OPT_ZERNIKE},
        {"zernike-pupil-mm", required_argument, NULL, OPT_ZPUPIL},
        {"data", required_argument, NULL, OPT_DATA},
        {"population-mm", required_argument, NULL, OPT_POPULATION},
        {"index", required_argument, NULL, OPT_INDEX},
        {"max-order", required_argument, NULL, OPT_MAX_ORDER},
        {"keep-tilt", no_argument, NULL, OPT_KEEP_TILT},
        {"sphere-d", required_argument, NULL, OPT_SPHERE},
        {"cyl-d", required_argument, NULL, OPT_CYL},
        {"axis-deg", required_argument, NULL, OPT_AXIS},
        {"rms-um", required_argument, NULL, OPT_RMS},
        {"glow", required_argument, NULL, OPT_GLOW},
        {"glow-falloff", required_argument, NULL, OPT_FALLOFF},
        {"reflection", required_argument, NULL, OPT_REFL},
        {"reflection-sigma", required_argument, NULL, OPT_REFL_SIGMA},
        {"reflection-offset", required_argument, NULL, OPT_REFL_OFFSET},
        {"brightness", required_argument, NULL, OPT_BRIGHT},
        {"tear-film", required_argument, NULL, OPT_TEAR},
        {"tear-depth", required_argument, NULL, OPT_TEAR_DEPTH},
        {"white-noise", required_argument, NULL, OPT_WHITE},
        {"no-artefacts", no_argument, NULL, OPT_NO_ART},
        {"seed", required_argument, NULL, OPT_SEED},
        {"out", required_argument, NULL, 'o'},
        {"truth", required_argument, NULL, OPT_TRUTH},
        {"reference", required_argument, NULL, OPT_REFERENCE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        SH_LONGOPTS,
        DETECTOR_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB_EYE;
    double list[2], v;
    long n;
    int c, rc;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        const char *name = sw_cli_option_name(argv);
        switch (c) {
        case OPT_BINOCULAR: o->binocular = 1; break;
        case OPT_CENTER:
            if (sw_cli_parse_list(optarg, list, 2) != 0)
                return sw_cli_usage(S, "--eye-center: '%s' is not X,Y in pixels", optarg);
            if (o->n_centers == 2)
                return sw_cli_usage(S, "--eye-center: at most two eyes");
            o->centers[o->n_centers][0] = list[0];
            o->centers[o->n_centers][1] = list[1];
            o->n_centers++;
            break;
        case OPT_PUPIL_PX:
        case OPT_PUPIL_MM:
        case OPT_ZPUPIL:
        case OPT_POPULATION:
        case OPT_RMS:
            if (sw_cli_parse_double(optarg, &v) != 0 || !(v > 0) || (c == OPT_RMS && v > 1e3))
                return sw_cli_usage(S, "%s: '%s' is not a positive number", name, optarg);
            if (c == OPT_PUPIL_PX)
                o->pupil_px = v;
            else if (c == OPT_PUPIL_MM)
                o->pupil_mm = v;
            else if (c == OPT_ZPUPIL)
                o->zernike_pupil_mm = v;
            else if (c == OPT_POPULATION)
                o->population_mm = v;
            else
                o->rms_um = v;
            break;
        case OPT_ELLIPSE:
            if (sw_cli_parse_list(optarg, list, 2) != 0 || !(list[0] > 0) || list[0] > 1)
                return sw_cli_usage(S, "--ellipse: '%s' is not B/A,ANGLE with 0 < B/A <= 1",
                                    optarg);
            o->ellipse_ratio = list[0];
            o->ellipse_angle = list[1];
            o->have_ellipse = 1;
            break;
        case OPT_ZERNIKE:
            if (o->n_zernike == 2)
                return sw_cli_usage(S, "--zernike: at most one file per eye (two)");
            o->zernike[o->n_zernike++] = optarg;
            break;
        case OPT_DATA: o->data = optarg; break;
        case OPT_INDEX:
            if (sw_cli_parse_u64(optarg, &o->index) != 0 || o->index >= ((uint64_t)1 << 55))
                return sw_cli_usage(S, "--index: '%s' is not a draw index in 0..2^55-1", optarg);
            break;
        case OPT_MAX_ORDER:
            if (sw_cli_parse_long(optarg, 0, SW_ZERNIKE_MAX_ORDER, &n) != 0)
                return sw_cli_usage(S, "--max-order: '%s' is not an order in 0..%d", optarg,
                                    SW_ZERNIKE_MAX_ORDER);
            o->max_order = n;
            break;
        case OPT_KEEP_TILT: o->keep_tilt = 1; break;
        case OPT_SPHERE:
        case OPT_CYL:
        case OPT_AXIS:
            if (sw_cli_parse_double(optarg, &v) != 0 || (c != OPT_AXIS && fabs(v) > 100))
                return sw_cli_usage(S, "%s: '%s' is not a %s", name, optarg,
                                    c == OPT_AXIS ? "number of degrees"
                                                  : "power in dioptres (-100..100)");
            if (c == OPT_SPHERE)
                o->rx.sphere_d = v;
            else if (c == OPT_CYL)
                o->rx.cyl_d = v;
            else
                o->rx.axis_deg = v;
            break;
        case OPT_GLOW:
        case OPT_FALLOFF:
        case OPT_REFL:
        case OPT_REFL_SIGMA:
        case OPT_REFL_OFFSET:
        case OPT_BRIGHT:
        case OPT_TEAR_DEPTH:
        case OPT_WHITE: {
            const int fraction = c == OPT_FALLOFF || c == OPT_REFL_OFFSET || c == OPT_TEAR_DEPTH;
            if (sw_cli_parse_double(optarg, &v) != 0 || v < 0 || (fraction && v > 1) ||
                (c == OPT_BRIGHT && v >= 1) || (c == OPT_REFL_SIGMA && !(v > 0)))
                return sw_cli_usage(S, "%s: '%s' is not %s", name, optarg,
                                    fraction              ? "a fraction in [0, 1]"
                                    : c == OPT_BRIGHT     ? "an amplitude in [0, 1)"
                                    : c == OPT_REFL_SIGMA ? "a positive number of pixels"
                                                          : "a non-negative number of electrons");
            if (c == OPT_GLOW)
                o->art.glow_e = v, o->art_given |= ART_GLOW;
            else if (c == OPT_FALLOFF)
                o->art.glow_falloff = v, o->art_given |= ART_FALLOFF;
            else if (c == OPT_REFL)
                o->art.reflection_e = v, o->art_given |= ART_REFL;
            else if (c == OPT_REFL_SIGMA)
                o->art.reflection_sigma_px = v, o->art_given |= ART_REFL_SIGMA;
            else if (c == OPT_REFL_OFFSET)
                o->art.reflection_offset = v, o->art_given |= ART_REFL_OFFSET;
            else if (c == OPT_BRIGHT)
                o->art.brightness = v, o->art_given |= ART_BRIGHT;
            else if (c == OPT_TEAR_DEPTH)
                o->art.tear_depth = v, o->art_given |= ART_TEAR_DEPTH;
            else
                o->art.white_noise_e = v, o->art_given |= ART_WHITE;
            break;
        }
        case OPT_TEAR:
            if (sw_cli_parse_long(optarg, 0, 1000, &n) != 0)
                return sw_cli_usage(S, "--tear-film: '%s' is not a blob count in 0..1000", optarg);
            o->art.tear_blobs = (int32_t)n;
            o->art_given |= ART_TEAR;
            break;
        case OPT_NO_ART: o->no_artefacts = 1; break;
        case OPT_SEED:
            if (sw_cli_opt_u64(S, "--seed", optarg, &o->seed) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case 'o':
            if (sw_cli_opt_file(S, "--out", optarg, &o->out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TRUTH:
        case OPT_REFERENCE:
            if (!*optarg)
                return sw_cli_usage(S, "%s: the name is empty", name);
            if (c == OPT_TRUTH)
                o->truth = optarg;
            else
                o->reference = optarg;
            break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sim_eye_help(stdout); return -1;
        default: {
            int r = sim_sh_option(S, c, optarg, &o->sh);
            if (r == -1)
                r = sim_detector_option(S, c, name, optarg, &o->d);
            if (r == -1)
                return SW_EXIT_USAGE;
            if (r != SW_EXIT_OK)
                return r;
            break;
        }
        }
    }
    if (optind < argc)
        return sw_cli_usage(S, "unexpected argument '%s'", argv[optind]);
    const int ne = o->binocular ? 2 : 1;
    if (o->n_centers != 0 && o->n_centers != ne)
        return sw_cli_usage(S, "give --eye-center once per eye (%d) or not at all", ne);
    if (o->n_zernike > ne)
        return sw_cli_usage(S, "two --zernike files for one eye: add --binocular or drop one");
    if (o->n_zernike && (o->data || o->population_mm > 0 || o->keep_tilt))
        return sw_cli_usage(S, "--data, --population-mm and --keep-tilt are for population "
                               "eyes, not --zernike files");
    if (!o->n_zernike && o->zernike_pupil_mm > 0)
        return sw_cli_usage(S, "--zernike-pupil-mm goes with --zernike");
    if (o->zernike_pupil_mm > 0 && o->zernike_pupil_mm < o->pupil_mm)
        return sw_cli_usage(S,
                            "--zernike-pupil-mm %g is smaller than --pupil-mm %g: coefficients "
                            "are only rescaled to a smaller pupil",
                            o->zernike_pupil_mm, o->pupil_mm);
    if (!o->n_zernike) {
        if (o->population_mm > 0) {
            int ok = 0;
            for (int i = 0; i < SW_OCULAR_PUPILS_COUNT; i++)
                ok |= fabs(o->population_mm - sw_ocular_pupils_mm[i]) <= 1e-6;
            if (!ok)
                return sw_cli_usage(S, "--population-mm: %g is not 3.0, 4.5, 6.0 or 7.5",
                                    o->population_mm);
            if (o->population_mm < o->pupil_mm - 1e-9)
                return sw_cli_usage(S,
                                    "--population-mm %g is smaller than --pupil-mm %g (only "
                                    "smaller pupils are reached by rescaling)",
                                    o->population_mm, o->pupil_mm);
        } else {
            for (int i = SW_OCULAR_PUPILS_COUNT - 1; i >= 0; i--)
                if (sw_ocular_pupils_mm[i] >= o->pupil_mm - 1e-9)
                    o->population_mm = sw_ocular_pupils_mm[i];
            if (!(o->population_mm > 0))
                return sw_cli_usage(S,
                                    "--pupil-mm %g is larger than the largest population pupil "
                                    "(7.5 mm): give --zernike coefficients instead",
                                    o->pupil_mm);
        }
    }
    if (o->no_artefacts) {
        if (!(o->art_given & ART_GLOW))
            o->art.glow_e = 0;
        if (!(o->art_given & ART_REFL))
            o->art.reflection_e = 0;
        if (!(o->art_given & ART_BRIGHT))
            o->art.brightness = 0;
        if (!(o->art_given & ART_TEAR))
            o->art.tear_blobs = 0;
        if (!(o->art_given & ART_WHITE))
            o->art.white_noise_e = 0;
    }
    if ((rc = sim_sh_resolve(S, &o->sh, 1, o->binocular ? 1280 : 640, 640)) != SW_EXIT_OK)
        return rc;
    const double w = o->sh.width, h = o->sh.height;
    if (!(o->pupil_px > 0)) {
        const double side = fmin(w / ne, h);
        o->pupil_px = floor(0.9 * side);
    }
    if (o->n_centers == 0)
        for (int e = 0; e < ne; e++) {
            o->centers[e][0] = (2.0 * e + 1.0) * w / (2.0 * ne) - 0.5;
            o->centers[e][1] = 0.5 * h - 0.5;
        }
    if ((rc = sim_detector_finish(S, &o->d, o->seed)) != SW_EXIT_OK)
        return rc;
    if (!o->out)
        return sw_cli_usage(S, "--out IMAGE is required");
    if ((rc = sim_check_image_name(S, "--out", o->out, o->d.det.out_type)) != SW_EXIT_OK)
        return rc;
    if (o->reference && (rc = sim_check_image_name(S, "--reference", o->reference,
                                                   o->d.det.out_type)) != SW_EXIT_OK)
        return rc;
    return SW_EXIT_OK;
}

/* The coefficients of each eye: from the files or drawn from the population. */
static int eye_coefficients(sw_context *ctx, const eye_opts *o, double *coef[2], int32_t count[2])
{
    const char *S = SUB_EYE;
    const int ne = o->binocular ? 2 : 1;
    sw_ocular_options opt;
    sw_ocular_options_default(&opt);
    opt.pupil_mm = o->pupil_mm;
    opt.max_order = (int32_t)o->max_order;
    opt.rx = o->rx;
    opt.total_rms_um = o->rms_um;
    sw_status st = SW_OK;
    if (o->n_zernike) {
        opt.keep_tilt = 1;
        const double from = o->zernike_pupil_mm > 0 ? o->zernike_pupil_mm : o->pupil_mm;
        for (int e = 0; e < ne; e++) {
            sw_zernike_coefs z;
            const char *path = o->zernike[e < o->n_zernike ? e : 0];
            if ((st = sw_zernike_read_csv(ctx, path, &z)) != SW_OK)
                return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
            count[e] = z.count > 6 ? z.count : 6;
            coef[e] = calloc((size_t)count[e], sizeof(double));
            if (!coef[e]) {
                sw_zernike_coefs_free(&z);
                return sw_cli_fail(S, "out of memory");
            }
            st = sw_ocular_apply(ctx, z.coef_um, z.count, from, &opt, coef[e], count[e]);
            sw_zernike_coefs_free(&z);
            if (st != SW_OK)
                return sw_cli_fail(S, "%s: %s", path, sw_cli_lib_error(ctx, st));
        }
        return SW_EXIT_OK;
    }
    opt.keep_tilt = o->keep_tilt;
    sw_ocular_population pop;
    if ((st = sw_ocular_population_load(ctx, o->data, o->population_mm, &pop)) != SW_OK)
        return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    for (int e = 0; e < ne && st == SW_OK; e++) {
        count[e] = pop.count;
        coef[e] = calloc((size_t)count[e], sizeof(double));
        if (!coef[e]) {
            sw_ocular_population_free(&pop);
            return sw_cli_fail(S, "out of memory");
        }
        st = sw_ocular_draw(ctx, &pop, o->seed, o->index + (uint64_t)e, &opt, coef[e], count[e]);
    }
    sw_ocular_population_free(&pop);
    if (st != SW_OK)
        return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    return SW_EXIT_OK;
}

static int write_eye_truth(sw_context *ctx, const char *prefix, const sw_eyesim_truth *t,
                           double pixel_um)
{
    const char *S = SUB_EYE;
    char path[4200];
    sw_status st;
    for (int e = 0; e < t->n_eyes; e++) {
        snprintf(path, sizeof path, "%s_eye%d_spots.csv", prefix, e);
        const char *staged = sw_cli_file_staged("--truth", path);
        if (!staged)
            return SW_EXIT_FAIL;
        if ((st = sw_sh_truth_write_csv(ctx, staged, &t->eye[e].sh)) != SW_OK)
            return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        snprintf(path, sizeof path, "%s_eye%d_zernike.csv", prefix, e);
        double zero = 0.0;
        sw_zernike_coefs z = {t->eye[e].count, t->eye[e].coef_um};
        if (z.count < 1) {
            z.count = 1;
            z.coef_um = &zero;
        }
        if (!(staged = sw_cli_file_staged("--truth", path)))
            return SW_EXIT_FAIL;
        if ((st = sw_zernike_write_csv(ctx, staged, &z)) != SW_OK)
            return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    }
    /* the magnification and pixel pitch the image was drawn with (2 a_px pixel_um / (1000
     * pupil_mm)): what 'spotwave aberrometry --magnification' needs to give the true pupil */
    static const char *const names[] = {
        "pupil",    "cx_px",           "cy_px",           "a_px",          "b_px",    "angle_deg",
        "pupil_mm", "reflection_x_px", "reflection_y_px", "magnification", "pixel_um"};
    sw_table tab;
    if ((st = sw_table_create(ctx, 11, names, &tab)) != SW_OK)
        return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    for (int e = 0; e < t->n_eyes && st == SW_OK; e++) {
        const sw_eye_truth *q = &t->eye[e];
        const double row[11] = {e,
                                q->cx_px,
                                q->cy_px,
                                q->a_px,
                                q->b_px,
                                q->angle_deg,
                                q->pupil_mm,
                                q->reflection_x_px,
                                q->reflection_y_px,
                                2.0 * q->a_px * pixel_um / (1000.0 * q->pupil_mm),
                                pixel_um};
        st = sw_table_append(ctx, &tab, row);
    }
    snprintf(path, sizeof path, "%s_pupils.csv", prefix);
    const char *staged = st == SW_OK ? sw_cli_file_staged("--truth", path) : NULL;
    if (st == SW_OK && !staged) {
        sw_table_free(&tab);
        return SW_EXIT_FAIL;
    }
    if (st == SW_OK)
        st = sw_csv_write(ctx, staged, &tab);
    sw_table_free(&tab);
    if (st != SW_OK)
        return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    return SW_EXIT_OK;
}

static void eye_header(sw_cli_hdr *h, const eye_opts *o, const eye_report *r,
                       const sw_detector *det, int reference)
{
    sim_image_header(h,
                     reference ? "spotwave sim eye: the reference frame (no eye, flat wavefront)"
                               : "spotwave sim eye: a simulated Hartmann-Shack frame of eyes",
                     det, o->seed);
    sw_cli_hdr_bool(h, "REFFRAME", reference, "the reference frame (no eye)");
    sim_sh_header(h, &o->sh);
    sw_cli_hdr_str(h, "SOURCE", r->source, "the eyes' aberrations");
    sw_cli_hdr_int(h, "EYES", o->binocular ? 2 : 1, "eyes on the frame");
    sw_cli_hdr_num(h, "PUPIL", o->pupil_mm, "[mm] eye pupil diameter");
    sw_cli_hdr_num(h, "PUPILPX", o->pupil_px, "[pixel] pupil diameter on the detector");
    sw_cli_hdr_num(h, "EYE1X", o->centers[0][0], "[pixel] pupil centre of eye 1 (0-based)");
    sw_cli_hdr_num(h, "EYE1Y", o->centers[0][1], "[pixel] pupil centre of eye 1 (0-based)");
    if (o->binocular) {
        sw_cli_hdr_num(h, "EYE2X", o->centers[1][0], "[pixel] pupil centre of eye 2 (0-based)");
        sw_cli_hdr_num(h, "EYE2Y", o->centers[1][1], "[pixel] pupil centre of eye 2 (0-based)");
    }
    if (!o->n_zernike) {
        sw_cli_hdr_num(h, "POPPUPIL", o->population_mm, "[mm] pupil of the population statistics");
        if (o->max_order > 0)
            sw_cli_hdr_int(h, "MAXORDER", o->max_order, "radial orders above it set to 0");
        if (o->rms_um > 0)
            sw_cli_hdr_num(h, "EYERMS", o->rms_um, "[um] RMS of the orders >= 2, scaled to");
        sw_cli_hdr_u64(h, "POPINDEX", o->index, "population draw of eye 1");
    }
    sw_cli_hdr_num(h, "SPHERE", o->rx.sphere_d, "[1/m] sphere added (dioptres)");
    sw_cli_hdr_num(h, "CYL", o->rx.cyl_d, "[1/m] cylinder added (dioptres)");
    sw_cli_hdr_num(h, "AXIS", o->rx.axis_deg, "[deg] cylinder axis");
    /* the artefacts of living eyes (none on the reference) */
    sw_eye_artefacts a = o->art;
    if (reference)
        sw_eye_artefacts_none(&a);
    sw_cli_hdr_num(h, "GLOW", a.glow_e, "[electron] retinal glow at the pupil centre");
    sw_cli_hdr_num(h, "REFLECT", a.reflection_e, "[electron] corneal reflection peak");
    sw_cli_hdr_num(h, "BRIGHTMP", a.brightness, "amplitude of the brightness map");
    sw_cli_hdr_int(h, "TEARBLOB", a.tear_blobs, "tear-film break-up blobs per eye");
    sw_cli_hdr_num(h, "WHITENS", a.white_noise_e, "[electron] additive white noise RMS");
}

static int run_eye(const sw_cli_globals *g, const eye_opts *o, eye_report *r)
{
    const char *S = SUB_EYE;
    sw_context *ctx = NULL;
    int rc = sw_cli_context(g, S, &ctx);
    if (rc != SW_EXIT_OK)
        return rc;
    r->backend = sw_context_backend(ctx);
    r->source = o->n_zernike ? "zernike" : "population";
    const int ne = o->binocular ? 2 : 1;
    double *coef[2] = {NULL, NULL};
    int32_t count[2] = {0, 0};
    sw_image e;
    memset(&e, 0, sizeof e);
    sw_status st;
    if ((rc = eye_coefficients(ctx, o, coef, count)) != SW_EXIT_OK)
        goto done;

    sw_eyesim_params p;
    sw_eyesim_params_default(&p);
    sim_sh_params(&o->sh, &p.sh);
    p.n_eyes = ne;
    for (int k = 0; k < ne; k++) {
        sw_eye *eye = &p.eyes[k];
        eye->cx_px = o->centers[k][0];
        eye->cy_px = o->centers[k][1];
        eye->diameter_px = o->pupil_px;
        eye->ellipticity = o->have_ellipse ? o->ellipse_ratio : 1.0;
        eye->angle_deg = o->have_ellipse ? o->ellipse_angle : 0.0;
        eye->pupil_mm = o->pupil_mm;
        eye->coef_um = coef[k];
        eye->count = count[k];
    }
    p.art = o->art;
    p.seed = o->seed;
    if ((st = sw_image_alloc(ctx, o->sh.width, o->sh.height, SW_PIX_F32, &e)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    double t0 = sw_cli_now();
    st = sw_eyesim_render(ctx, &p, &e, &r->truth);
    r->render_ms = 1e3 * (sw_cli_now() - t0);
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    sw_cli_hdr hdr;
    eye_header(&hdr, o, r, &o->d.det, 0);
    if ((rc = sim_detect_and_write(ctx, S, &o->d.det, &e, o->out, &hdr, &r->detector_ms,
                                   &r->write_ms)) != SW_EXIT_OK)
        goto done;
    if (o->truth && (rc = write_eye_truth(ctx, o->truth, &r->truth, o->sh.pixel_um)) != SW_EXIT_OK)
        goto done;
    if (o->reference) {
        for (int k = 0; k < ne; k++) {
            p.eyes[k].coef_um = NULL;
            p.eyes[k].count = 0;
        }
        sw_eye_artefacts_none(&p.art);
        if ((st = sw_eyesim_render(ctx, &p, &e, NULL)) != SW_OK) {
            rc = sw_cli_fail(S, "reference: %s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        sw_detector det = sim_reference_detector(&o->d.det);
        eye_header(&hdr, o, r, &det, 1);
        if ((rc = sim_detect_and_write(ctx, S, &det, &e, o->reference, &hdr, NULL, NULL)) !=
            SW_EXIT_OK)
            goto done;
    }
    rc = SW_EXIT_OK;
done:
    sw_image_free(&e);
    free(coef[0]);
    free(coef[1]);
    sw_context_destroy(ctx);
    return rc;
}

/* The pupil's magnification onto the detector (sim_eye.h's sw_eye) and the refraction of the true
 * coefficients as 'spotwave aberrometry' reports it by default (Thibos et al. 2004, the second
 * order; higher: with the 4th and 6th orders, as with --higher-order-rx); NaN where there is
 * none. */
static double eye_magnification(const eye_opts *o, const sw_eye_truth *q)
{
    return 2.0 * q->a_px * o->sh.pixel_um / (1000.0 * q->pupil_mm);
}

static sw_refraction eye_true_rx(const sw_eye_truth *q, int higher)
{
    sw_refraction rx;
    double c[6] = {0};
    const double *coef = q->coef_um;
    int32_t count = q->count;
    if (count < 6) { /* fewer terms than the second order: the rest are 0 */
        for (int32_t j = 0; j < count; j++)
            c[j] = q->coef_um[j];
        coef = c;
        count = 6;
    }
    if (sw_zernike_refraction(NULL, coef, count, q->pupil_mm, higher, 0.0, &rx) != SW_OK)
        rx.M = rx.J0 = rx.J45 = rx.sphere_d = rx.cyl_d = rx.axis_deg = NAN;
    return rx;
}

static void print_eye(const eye_opts *o, const eye_report *r)
{
    const sw_eyesim_truth *t = &r->truth;
    if (!o->json) {
        printf("sim eye: %d eye%s (%s aberrations", t->n_eyes, t->n_eyes > 1 ? "s" : "", r->source);
        if (!o->n_zernike)
            printf(", %.1f mm statistics", o->population_mm);
        printf("), %g mm pupils\n", o->pupil_mm);
        printf("  image      %dx%d, grid %dx%d of %g px, %s model\n", o->sh.width, o->sh.height,
               o->sh.nx, o->sh.ny, o->sh.pitch, sw_sh_model_string(o->sh.model));
        for (int e = 0; e < t->n_eyes; e++) {
            const sw_eye_truth *q = &t->eye[e];
            const sw_refraction rx = eye_true_rx(q, 0);
            printf("  eye %d      centre (%g, %g) px, diameter %g px, RMS %.4f um, %lld lenslets "
                   "lit\n",
                   e, q->cx_px, q->cy_px, 2 * q->a_px,
                   q->count > 0 ? sw_zernike_rms(q->coef_um, q->count, 3) : 0.0,
                   (long long)sim_lit_lenslets(&q->sh, o->sh.min_illum));
            printf("             magnification %g (pupil %g mm on %g px of %g um); true refraction "
                   "%+.2f D %+.2f D x %.0f deg (second order, as aberrometry)\n",
                   eye_magnification(o, q), q->pupil_mm, 2 * q->a_px, o->sh.pixel_um, rx.sphere_d,
                   rx.cyl_d, rx.axis_deg);
        }
        printf("  artefacts  glow %g e-, reflection %g e-, brightness %g, tear film %d, white "
               "noise %g e-\n",
               o->art.glow_e, o->art.reflection_e, o->art.brightness, o->art.tear_blobs,
               o->art.white_noise_e);
        printf("  backend    %s; render %.3f ms, detector %.3f ms, write %.3f ms\n",
               sw_backend_string(r->backend), r->render_ms, r->detector_ms, r->write_ms);
        printf("  wrote      %s", o->out);
        if (o->truth)
            printf(", %s_*.csv", o->truth);
        if (o->reference)
            printf(", %s", o->reference);
        printf("\n");
        return;
    }
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "sim eye");
    sw_cli_json_int(j, "eyes", t->n_eyes);
    sw_cli_json_string(j, "source", r->source);
    sw_cli_json_double(j, "population_mm", o->n_zernike ? NAN : o->population_mm);
    sw_cli_json_double(j, "pupil_mm", o->pupil_mm);
    sw_cli_json_int(j, "width", o->sh.width);
    sw_cli_json_int(j, "height", o->sh.height);
    sw_cli_json_int(j, "grid_nx", o->sh.nx);
    sw_cli_json_int(j, "grid_ny", o->sh.ny);
    sw_cli_json_double(j, "pitch_px", o->sh.pitch);
    sw_cli_json_string(j, "model", sw_sh_model_string(o->sh.model));
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_u64(j, "seed", o->seed);
    sw_cli_json_string(j, "pixel_type", sw_pixel_type_string(o->d.det.out_type));
    cJSON *eyes = cJSON_AddArrayToObject(j, "eye");
    for (int e = 0; e < t->n_eyes; e++) {
        const sw_eye_truth *q = &t->eye[e];
        const sw_refraction rx = eye_true_rx(q, 0), rxh = eye_true_rx(q, 1);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddItemToArray(eyes, x);
        sw_cli_json_double(x, "cx_px", q->cx_px);
        sw_cli_json_double(x, "cy_px", q->cy_px);
        sw_cli_json_double(x, "a_px", q->a_px);
        sw_cli_json_double(x, "b_px", q->b_px);
        sw_cli_json_double(x, "angle_deg", q->angle_deg);
        sw_cli_json_double(x, "rms_um",
                           q->count > 0 ? sw_zernike_rms(q->coef_um, q->count, 3) : 0.0);
        sw_cli_json_double(x, "defocus_um", q->count > 4 ? q->coef_um[4] : 0.0);
        sw_cli_json_int(x, "lenslets_lit", sim_lit_lenslets(&q->sh, o->sh.min_illum));
        sw_cli_json_double(x, "reflection_x_px", q->reflection_x_px);
        sw_cli_json_double(x, "reflection_y_px", q->reflection_y_px);
        sw_cli_json_double(x, "magnification", eye_magnification(o, q));
        cJSON *rj = cJSON_AddObjectToObject(x, "refraction");
        sw_cli_json_double(rj, "sphere_d", rx.sphere_d);
        sw_cli_json_double(rj, "cyl_d", rx.cyl_d);
        sw_cli_json_double(rj, "axis_deg", rx.axis_deg);
        sw_cli_json_double(rj, "M", rx.M);
        sw_cli_json_double(rj, "J0", rx.J0);
        sw_cli_json_double(rj, "J45", rx.J45);
        cJSON *rh = cJSON_AddObjectToObject(x, "refraction_higher_order");
        sw_cli_json_double(rh, "sphere_d", rxh.sphere_d);
        sw_cli_json_double(rh, "cyl_d", rxh.cyl_d);
        sw_cli_json_double(rh, "axis_deg", rxh.axis_deg);
        sw_cli_json_double(rh, "M", rxh.M);
        sw_cli_json_double(rh, "J0", rxh.J0);
        sw_cli_json_double(rh, "J45", rxh.J45);
    }
    sw_cli_json_fixed(j, "render_ms", r->render_ms, 6);
    sw_cli_json_fixed(j, "detector_ms", r->detector_ms, 6);
    sw_cli_json_fixed(j, "write_ms", r->write_ms, 6);
    sw_cli_json_string(j, "out", o->out);
    sw_cli_json_string(j, "truth", o->truth);
    sw_cli_json_string(j, "reference", o->reference);
    sw_cli_json_print(j);
}

int sw_cmd_sim_eye(const sw_cli_globals *g, int argc, char **argv)
{
    eye_opts o;
    memset(&o, 0, sizeof o);
    sim_sh_opts_init(&o.sh, EYE_DEF_WAVELENGTH, EYE_DEF_FLUX);
    o.pupil_mm = EYE_DEF_PUPIL_MM;
    o.max_order = -1;
    sw_eye_artefacts_default(&o.art);
    o.seed = DEF_SEED;
    sim_det_opts_init(&o.d, SW_PIX_U8);
    int rc = parse_eye_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    for (int i = 0; i < o.n_zernike; i++)
        sw_cli_file_in("--zernike", o.zernike[i]);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--reference", o.reference);
    if ((rc = sw_cli_files_check()) != SW_EXIT_OK)
        return rc;
    eye_report r;
    memset(&r, 0, sizeof r);
    rc = run_eye(g, &o, &r);
    if (rc == SW_EXIT_OK)
        print_eye(&o, &r);
    sw_eyesim_truth_free(&r.truth);
    return rc;
}
