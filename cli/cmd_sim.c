/*
 * spotwave sim: simulated images with known truth. `sim stars` renders a star field (Li et al.
 * 2012: magnitudes by Eq. 1, the Gaussian PSF of Eq. 2 over each star's ROI, Eq. 3), applies the
 * detector model and writes the image and the truth table. `sim sh` renders a Shack-Hartmann
 * spot pattern (Mocci et al. 2020 Eq. 1-5 geometry, sim_sh.h) of a Zernike wavefront, a phase
 * screen or turbulence; `sim eye` one or two synthetic eyes (Mompean et al. 2019 Sec. 4.1:
 * population aberrations, retinal glow, reflections, brightness maps, noise; sim_eye.h).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "outfiles.h"

#include "spotwave/sim_eye.h"
#include "spotwave/turbulence.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SUB       "sim"
#define SUB_STARS "sim stars"
#define SUB_SH    "sim sh"
#define SUB_EYE   "sim eye"

#define DEF_SIZE       1024
#define DEF_SIGMA      1.0
#define DEF_ZERO_POINT 1e6
#define DEF_MAG_MIN    0.0
#define DEF_MAG_MAX    15.0
#define DEF_SEED       1

void sw_cmd_sim_help(FILE *out)
{
    fprintf(out, "Usage: spotwave [GLOBAL OPTIONS] sim SIMULATION [OPTIONS]\n"
                 "\n"
                 "Simulated images whose truth is known.\n"
                 "\n"
                 "Simulations:\n"
                 "  stars     a star field with Gaussian blur and a detector model (Li, Zhang,\n"
                 "            Zheng & Hu 2012, IEEE IPDPS Workshops, 1879)\n"
                 "  sh        a Shack-Hartmann spot pattern of a Zernike wavefront, a phase\n"
                 "            screen or turbulence (Lane, Glindemann & Dainty 1992), with its\n"
                 "            true centroids (lenslet geometry of Mocci et al. 2020, J. Opt.\n"
                 "            Soc. Am. A 37(10), 1548, Eq. 1-5)\n"
                 "  eye       Hartmann-Shack images of one or two synthetic eyes (the test\n"
                 "            images of Mompean et al. 2019, Future Gener. Comput. Syst. 91,\n"
                 "            177, Sec. 4.1; the population of Thibos et al. 2002): population\n"
                 "            aberrations, retinal glow, reflections, noise\n"
                 "\n"
                 "See 'spotwave sim stars --help', 'spotwave sim sh --help', 'spotwave sim eye "
                 "--help'.\n");
}

static const char *detector_help(int default_bits);

static void sim_stars_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] sim stars SOURCE [OPTIONS] --out IMAGE\n"
        "\n"
        "Renders stars as circular Gaussians of width sigma (Li, Zhang, Zheng & Hu 2012,\n"
        "\"Implementing high-performance intensity model with blur effect on GPUs for\n"
        "large-scale star image simulation\", IEEE IPDPS Workshops, 1879-1888, Eq. 2) over a\n"
        "square ROI around each star, with fluxes from magnitudes by g = A r^-m (Eq. 1), then\n"
        "applies the detector model (sky, dark current, Poisson shot noise, full well, read\n"
        "noise, gain, bias, ADC) and writes the image and, with --truth, the stars that land\n"
        "on it.\n"
        "Pixel coordinates are 0-based; the centre of pixel (0,0) is (0,0).\n"
        "\n"
        "Source (exactly one):\n"
        "  --catalog CSV          columns x_px,y_px and mag or flux_e (flux_e wins if both)\n"
        "  --random N             N stars, positions uniform over the image, magnitudes\n"
        "                         uniform in --mag-range (reproducible with --seed)\n"
        "  --sky CSV              columns ra_deg,dec_deg and mag or flux_e, projected by a\n"
        "                         pinhole camera; needs --attitude, --focal-mm and --pixel-um.\n"
        "                         At roll 0 north is up (-y) and east left (-x); roll is the\n"
        "                         position angle of the image's up direction (north through\n"
        "                         east). Stars within half the ROI side of the edge are kept.\n"
        "  --attitude RA,DEC,ROLL boresight and roll, degrees\n"
        "  --focal-mm F           focal length, mm\n"
        "  --pixel-um P           pixel pitch, micrometres\n"
        "\n"
        "Rendering:\n"
        "  --size WxH             image size (default %dx%d)\n"
        "  --sigma PX             PSF standard deviation in pixels (default %g)\n"
        "  --roi R                ROI radius: side 2R+1 pixels\n"
        "  --roi-side S           ROI side in pixels (default: 2 ceil(5 sigma) + 1, at most the\n"
        "                         larger image side)\n"
        "  --psf sampled|integrated\n"
        "                         PSF at the pixel centre (Li et al.) or integrated over the\n"
        "                         pixel (conserves flux; default)\n"
        "  --zero-point A         e- of a magnitude-0 star (default %g)\n"
        "  --ratio R|pogson       magnitude ratio (default pogson = 10^0.4; Li et al.: 2.512)\n"
        "  --mag-range MIN,MAX    magnitudes of --random stars (default %g,%g)\n"
        "  --seed S               stars and noise seed, 64-bit (default %d)\n"
        "  --method M             auto|sequential|openmp|parallel|adaptive|deterministic\n"
        "                         (default auto: OpenMP on the CPU; on the GPU Li et al.'s\n"
        "                         parallel or adaptive simulator, Sec. III.B-C, by star count)\n"
        "\n"
        "%s"
        "\n"
        "Output:\n"
        "  -o, --out IMAGE        .fits (any --bits), .pgm or .h5 (Eiger-like NeXus; 8 or 16 "
        "bits)\n"
        "  --truth CSV            x_px,y_px,flux_e,mag of the stars whose centre is on the\n"
        "                         image (mag is nan for stars given by flux only)\n"
        "  --json                 print the report as JSON\n"
        "  -h, --help             print this help and exit\n",
        DEF_SIZE, DEF_SIZE, DEF_SIGMA, DEF_ZERO_POINT, DEF_MAG_MIN, DEF_MAG_MAX, DEF_SEED,
        detector_help(16));
}

/* ------------------------------------------------------------------ parsing */

/* ------------------------------------------------------------------ the detector (all sims) */

/* The detector options, shared by every simulation (values below any subcommand's own). */
enum {
    OPT_DET_SKY_E = 200,
    OPT_DET_DARK_E,
    OPT_DET_READ,
    OPT_DET_GAIN,
    OPT_DET_BIAS,
    OPT_DET_FULL_WELL,
    OPT_DET_NO_SHOT,
    OPT_DET_NOISE,
    OPT_DET_BITS
};

// clang-format off
#define DETECTOR_LONGOPTS \
    {"sky-e", required_argument, NULL, OPT_DET_SKY_E}, \
    {"dark-e", required_argument, NULL, OPT_DET_DARK_E}, \
    {"read-noise-e", required_argument, NULL, OPT_DET_READ}, \
    {"gain", required_argument, NULL, OPT_DET_GAIN}, \
    {"bias", required_argument, NULL, OPT_DET_BIAS}, \
    {"full-well", required_argument, NULL, OPT_DET_FULL_WELL}, \
    {"no-shot-noise", no_argument, NULL, OPT_DET_NO_SHOT}, \
    {"noise", required_argument, NULL, OPT_DET_NOISE}, \
    {"bits", required_argument, NULL, OPT_DET_BITS}
// clang-format on

typedef struct det_opts {
    sw_detector det;
    int noise_none, no_shot, read_given;
} det_opts;

static void det_opts_init(det_opts *d, sw_pixel_type bits)
{
    memset(d, 0, sizeof *d);
    sw_detector_default(&d->det);
    d->det.out_type = bits;
}

/* The help text of the detector options (default output bits given). */
static const char *detector_help(int default_bits)
{
    static char buf[1200];
    snprintf(buf, sizeof buf,
             "Detector:\n"
             "  --sky-e E              sky background, e- per pixel (default 0)\n"
             "  --dark-e E             dark current x exposure, e- per pixel (default 0)\n"
             "  --read-noise-e E       Gaussian read noise, e- RMS (default 0)\n"
             "  --gain G               e- per ADU (default 1); not find's --gain, which is the\n"
             "                         background's variance / mean in ADU (1/G without bias\n"
             "                         and read noise)\n"
             "  --bias B               offset in ADU (default 0)\n"
             "  --full-well E          saturation in e- (default 0: none)\n"
             "  --no-shot-noise        no Poisson noise\n"
             "  --noise shot|none      none: neither shot nor read noise (the expected image)\n"
             "  --bits 8|16|32|32f     output pixels: unsigned 8/16/32-bit (rounded, clamped) or\n"
             "                         float (default %d)\n",
             default_bits);
    return buf;
}

/* Handles option c if it is a detector option: SW_EXIT_OK when taken, SW_EXIT_USAGE after a
 * usage line for a bad value, -1 when c is not a detector option. */
static int detector_option(const char *S, int c, const char *name, const char *arg, det_opts *d)
{
    double v;
    switch (c) {
    case OPT_DET_SKY_E:
    case OPT_DET_DARK_E:
    case OPT_DET_READ:
    case OPT_DET_FULL_WELL:
        if (sw_cli_parse_double(arg, &v) != 0 || v < 0)
            return sw_cli_usage(S, "%s: '%s' is not a non-negative number of electrons", name, arg);
        if (c == OPT_DET_SKY_E)
            d->det.sky_e = v;
        else if (c == OPT_DET_DARK_E)
            d->det.dark_e = v;
        else if (c == OPT_DET_READ)
            d->det.read_noise_e = v, d->read_given = 1;
        else
            d->det.full_well_e = v;
        return SW_EXIT_OK;
    case OPT_DET_GAIN:
        if (sw_cli_parse_double(arg, &d->det.gain_e_per_adu) != 0 || !(d->det.gain_e_per_adu > 0))
            return sw_cli_usage(S, "--gain: '%s' is not a positive number of e- per ADU", arg);
        return SW_EXIT_OK;
    case OPT_DET_BIAS:
        if (sw_cli_parse_double(arg, &d->det.bias_adu) != 0)
            return sw_cli_usage(S, "--bias: '%s' is not a number of ADU", arg);
        return SW_EXIT_OK;
    case OPT_DET_NO_SHOT: d->no_shot = 1; return SW_EXIT_OK;
    case OPT_DET_NOISE:
        if (strcmp(arg, "none") == 0)
            d->noise_none = 1;
        else if (strcmp(arg, "shot") == 0)
            d->noise_none = 0;
        else
            return sw_cli_usage(S, "--noise: '%s' is not shot or none", arg);
        return SW_EXIT_OK;
    case OPT_DET_BITS:
        if (strcmp(arg, "8") == 0)
            d->det.out_type = SW_PIX_U8;
        else if (strcmp(arg, "16") == 0)
            d->det.out_type = SW_PIX_U16;
        else if (strcmp(arg, "32") == 0)
            d->det.out_type = SW_PIX_U32;
        else if (strcmp(arg, "32f") == 0)
            d->det.out_type = SW_PIX_F32;
        else
            return sw_cli_usage(S, "--bits: '%s' is not 8, 16, 32 or 32f", arg);
        return SW_EXIT_OK;
    default: return -1;
    }
}

/* After the options: resolves --noise none / --no-shot-noise and the seed. */
static int detector_finish(const char *S, det_opts *d, uint64_t seed)
{
    if (d->noise_none && (d->read_given && d->det.read_noise_e > 0))
        return sw_cli_usage(S, "--noise none and --read-noise-e %g contradict each other",
                            d->det.read_noise_e);
    if (d->noise_none || d->no_shot)
        d->det.shot_noise = 0;
    if (d->noise_none)
        d->det.read_noise_e = 0;
    d->det.seed = seed;
    return SW_EXIT_OK;
}

static int is_hdf5_name(const char *path)
{
    return sw_cli_ends_with(path, ".h5") || sw_cli_ends_with(path, ".hdf5") ||
           sw_cli_ends_with(path, ".nxs");
}

/* An image name the writers take: .fits/.fit/.fts (any type), .pgm (8 or 16 bits) or
 * .h5/.hdf5/.nxs (8 or 16 bits: an Eiger-like NeXus file, bitshuffle/LZ4 when the plugin is
 * there, deflate otherwise). */
static int check_image_name(const char *S, const char *opt, const char *path, sw_pixel_type t)
{
    if (sw_cli_ends_with(path, ".pgm")) {
        if (t != SW_PIX_U8 && t != SW_PIX_U16)
            return sw_cli_usage(S, "a PGM file holds 8 or 16 bits: use --bits 8 or 16, or a .fits "
                                   "name");
    } else if (is_hdf5_name(path)) {
        if (t != SW_PIX_U8 && t != SW_PIX_U16)
            return sw_cli_usage(S, "an HDF5 (Eiger) file holds integer counts: use --bits 8 or "
                                   "16, or a .fits name");
    } else if (!sw_cli_ends_with(path, ".fits") && !sw_cli_ends_with(path, ".fit") &&
               !sw_cli_ends_with(path, ".fts")) {
        return sw_cli_usage(S, "%s: '%s' does not end in .fits, .pgm or .h5", opt, path);
    }
    return SW_EXIT_OK;
}

/* Writes an image by its name's extension; a FITS file gets the header keys h. */
static sw_status write_any(sw_context *ctx, const char *path, const sw_image *img,
                           const sw_cli_hdr *h)
{
    if (sw_cli_ends_with(path, ".pgm"))
        return sw_pgm_write(ctx, path, img);
    if (is_hdf5_name(path))
        return sw_h5_write(ctx, path, img, 1, 0,
                           sw_h5_bitshuffle_available() ? SW_H5_BSLZ4 : SW_H5_DEFLATE, NULL, 0.0);
    return sw_cli_hdr_write(ctx, path, img, 1, h);
}

/* The keys every simulated detector image carries: BUNIT (the detector's counts), the command
 * line, the detector model, the seed. */
static void image_header(sw_cli_hdr *h, const char *what, const sw_detector *det, uint64_t seed)
{
    sw_cli_hdr_init(h, "adu", "detector counts: electrons / GAIN + BIAS");
    sw_cli_hdr_comment(h, "%s", what);
    sw_cli_hdr_command(h);
    sw_cli_hdr_u64(h, "SEED", seed, "simulation seed (--seed)");
    sw_cli_hdr_detector(h, det);
}

/* ------------------------------------------------------------------ sim stars */

typedef struct stars_opts {
    const char *catalog, *sky, *out, *truth;
    long random; /* -1: not given */
    int have_attitude, have_focal, have_pixel;
    sw_camera cam;
    int32_t width, height;
    double sigma;
    long roi_side; /* 0: default */
    sw_psf_mode psf;
    double zero_point, ratio, mag_min, mag_max;
    uint64_t seed;
    sw_starsim_method method;
    det_opts d;
    int json;
} stars_opts;

typedef struct stars_report {
    const char *source;
    int64_t stars, rendered, truth_rows;
    double load_ms, render_ms, detector_ms, write_ms;
    sw_starsim_method method;
    sw_backend backend;
} stars_report;

static const char *source_name(const stars_opts *o)
{
    return o->catalog ? "catalog" : o->sky ? "sky" : "random";
}

static void print_text(const stars_opts *o, const stars_report *r)
{
    printf("sim stars: %lld stars (%s), %lld rendered, %lld skipped\n", (long long)r->stars,
           r->source, (long long)r->rendered, (long long)(r->stars - r->rendered));
    printf("  image      %dx%d, sigma %g px, ROI %ld px, %s PSF\n", o->width, o->height, o->sigma,
           o->roi_side, o->psf == SW_PSF_INTEGRATED ? "integrated" : "sampled");
    printf("  method     %s (%s backend)\n", sw_starsim_method_string(r->method),
           sw_backend_string(r->backend));
    printf("  detector   %s shot noise, read %g e-, sky %g e-, dark %g e-, gain %g e-/ADU, bias %g "
           "ADU, %s\n",
           o->d.det.shot_noise ? "with" : "no", o->d.det.read_noise_e, o->d.det.sky_e,
           o->d.det.dark_e, o->d.det.gain_e_per_adu, o->d.det.bias_adu,
           sw_pixel_type_string(o->d.det.out_type));
    printf("  times      stars %.3f ms, render %.3f ms, detector %.3f ms, write %.3f ms\n",
           r->load_ms, r->render_ms, r->detector_ms, r->write_ms);
    printf("  wrote      %s", o->out);
    if (o->truth)
        printf(", %s (%lld stars)", o->truth, (long long)r->truth_rows);
    printf("\n");
}

static void print_json(const stars_opts *o, const stars_report *r)
{
    printf("{\n  \"subcommand\": \"sim stars\",\n  \"source\": ");
    sw_json_write_string(stdout, r->source);
    printf(",\n  \"stars\": %lld,\n  \"rendered\": %lld,\n  \"skipped\": %lld,\n",
           (long long)r->stars, (long long)r->rendered, (long long)(r->stars - r->rendered));
    printf("  \"width\": %d,\n  \"height\": %d,\n  \"sigma_px\": %.17g,\n  \"roi_side_px\": %ld,\n",
           o->width, o->height, o->sigma, o->roi_side);
    printf("  \"psf\": \"%s\",\n  \"method\": \"%s\",\n  \"backend\": \"%s\",\n",
           o->psf == SW_PSF_INTEGRATED ? "integrated" : "sampled",
           sw_starsim_method_string(r->method), sw_backend_string(r->backend));
    printf("  \"seed\": %llu,\n  \"shot_noise\": %s,\n  \"read_noise_e\": %.17g,\n",
           (unsigned long long)o->seed, o->d.det.shot_noise ? "true" : "false",
           o->d.det.read_noise_e);
    printf("  \"pixel_type\": \"%s\",\n", sw_pixel_type_string(o->d.det.out_type));
    printf("  \"stars_ms\": %.6f,\n  \"render_ms\": %.6f,\n  \"detector_ms\": %.6f,\n"
           "  \"write_ms\": %.6f,\n",
           r->load_ms, r->render_ms, r->detector_ms, r->write_ms);
    printf("  \"out\": ");
    sw_json_write_string(stdout, o->out);
    printf(",\n  \"truth\": ");
    sw_json_write_string(stdout, o->truth);
    if (o->truth)
        printf(",\n  \"truth_rows\": %lld", (long long)r->truth_rows);
    printf("\n}\n");
}

static int parse_stars_options(int argc, char **argv, stars_opts *o)
{
    enum {
        OPT_CATALOG = 256,
        OPT_RANDOM,
        OPT_SKY,
        OPT_ATTITUDE,
        OPT_FOCAL,
        OPT_PIXEL,
        OPT_SIZE,
        OPT_SIGMA,
        OPT_ROI,
        OPT_ROI_SIDE,
        OPT_PSF,
        OPT_ZERO_POINT,
        OPT_RATIO,
        OPT_MAG_RANGE,
        OPT_SEED,
        OPT_METHOD,
        OPT_TRUTH,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"catalog", required_argument, NULL, OPT_CATALOG},
        {"random", required_argument, NULL, OPT_RANDOM},
        {"sky", required_argument, NULL, OPT_SKY},
        {"attitude", required_argument, NULL, OPT_ATTITUDE},
        {"focal-mm", required_argument, NULL, OPT_FOCAL},
        {"pixel-um", required_argument, NULL, OPT_PIXEL},
        {"size", required_argument, NULL, OPT_SIZE},
        {"sigma", required_argument, NULL, OPT_SIGMA},
        {"roi", required_argument, NULL, OPT_ROI},
        {"roi-side", required_argument, NULL, OPT_ROI_SIDE},
        {"psf", required_argument, NULL, OPT_PSF},
        {"zero-point", required_argument, NULL, OPT_ZERO_POINT},
        {"ratio", required_argument, NULL, OPT_RATIO},
        {"mag-range", required_argument, NULL, OPT_MAG_RANGE},
        {"seed", required_argument, NULL, OPT_SEED},
        {"method", required_argument, NULL, OPT_METHOD},
        DETECTOR_LONGOPTS,
        {"out", required_argument, NULL, 'o'},
        {"truth", required_argument, NULL, OPT_TRUTH},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB_STARS;
    long roi_radius = -1, roi_side = -1;
    double list[3];
    int c, rc;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        switch (c) {
        case OPT_CATALOG: o->catalog = optarg; break;
        case OPT_SKY: o->sky = optarg; break;
        case OPT_RANDOM:
            if (sw_cli_parse_long(optarg, 0, INT32_MAX, &o->random) != 0)
                return sw_cli_usage(S, "--random: '%s' is not a star count in 0..%d", optarg,
                                    INT32_MAX);
            break;
        case OPT_ATTITUDE:
            if (sw_cli_parse_list(optarg, list, 3) != 0 || fabs(list[1]) > 90.0)
                return sw_cli_usage(S, "--attitude: '%s' is not RA,DEC,ROLL in degrees", optarg);
            o->cam.ra_deg = list[0];
            o->cam.dec_deg = list[1];
            o->cam.roll_deg = list[2];
            o->have_attitude = 1;
            break;
        case OPT_FOCAL:
            if (sw_cli_parse_double(optarg, &o->cam.focal_mm) != 0 || !(o->cam.focal_mm > 0))
                return sw_cli_usage(S, "--focal-mm: '%s' is not a positive length", optarg);
            o->have_focal = 1;
            break;
        case OPT_PIXEL:
            if (sw_cli_parse_double(optarg, &o->cam.pixel_um) != 0 || !(o->cam.pixel_um > 0))
                return sw_cli_usage(S, "--pixel-um: '%s' is not a positive length", optarg);
            o->have_pixel = 1;
            break;
        case OPT_SIZE:
            if (sw_cli_parse_size(optarg, &o->width, &o->height) != 0)
                return sw_cli_usage(S, "--size: '%s' is not WIDTHxHEIGHT with both in 1..%d",
                                    optarg, SW_IMAGE_MAX_DIM);
            break;
        case OPT_SIGMA:
            if (sw_cli_parse_double(optarg, &o->sigma) != 0 || !(o->sigma > 0))
                return sw_cli_usage(S, "--sigma: '%s' is not a positive number of pixels", optarg);
            break;
        case OPT_ROI:
            if (sw_cli_parse_long(optarg, 0, SW_IMAGE_MAX_DIM, &roi_radius) != 0)
                return sw_cli_usage(S, "--roi: '%s' is not a radius in 0..%d pixels", optarg,
                                    SW_IMAGE_MAX_DIM);
            break;
        case OPT_ROI_SIDE:
            if (sw_cli_parse_long(optarg, 1, SW_IMAGE_MAX_DIM, &roi_side) != 0)
                return sw_cli_usage(S, "--roi-side: '%s' is not a side in 1..%d pixels", optarg,
                                    SW_IMAGE_MAX_DIM);
            break;
        case OPT_PSF:
            if (strcmp(optarg, "sampled") == 0)
                o->psf = SW_PSF_SAMPLED;
            else if (strcmp(optarg, "integrated") == 0)
                o->psf = SW_PSF_INTEGRATED;
            else
                return sw_cli_usage(S, "--psf: '%s' is not sampled or integrated", optarg);
            break;
        case OPT_ZERO_POINT:
            if (sw_cli_parse_double(optarg, &o->zero_point) != 0 || !(o->zero_point > 0))
                return sw_cli_usage(S, "--zero-point: '%s' is not a positive flux in e-", optarg);
            break;
        case OPT_RATIO:
            if (strcasecmp(optarg, "pogson") == 0)
                o->ratio = 0.0;
            else if (sw_cli_parse_double(optarg, &o->ratio) != 0 || !(o->ratio > 0) ||
                     o->ratio == 1.0)
                return sw_cli_usage(S,
                                    "--ratio: '%s' is not 'pogson' or a positive ratio other "
                                    "than 1 (Li et al.'s is 2.512)",
                                    optarg);
            break;
        case OPT_MAG_RANGE:
            if (sw_cli_parse_list(optarg, list, 2) != 0 || list[0] > list[1])
                return sw_cli_usage(S, "--mag-range: '%s' is not MIN,MAX with MIN <= MAX", optarg);
            o->mag_min = list[0];
            o->mag_max = list[1];
            break;
        case OPT_SEED:
            if (sw_cli_parse_u64(optarg, &o->seed) != 0)
                return sw_cli_usage(S, "--seed: '%s' is not an unsigned 64-bit integer", optarg);
            break;
        case OPT_METHOD:
            if (sw_starsim_method_parse(optarg, &o->method) != SW_OK)
                return sw_cli_usage(S,
                                    "--method: '%s' is not one of auto, sequential, openmp, "
                                    "parallel, adaptive, deterministic",
                                    optarg);
            break;
        case 'o':
            if (!*optarg)
                return sw_cli_usage(S, "--out: the file name is empty");
            o->out = optarg;
            break;
        case OPT_TRUTH:
            if (!*optarg)
                return sw_cli_usage(S, "--truth: the file name is empty");
            o->truth = optarg;
            break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sim_stars_help(stdout); return -1;
        default: {
            const int r = detector_option(S, c, sw_cli_option_name(argv), optarg, &o->d);
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

    /* The source. */
    int sources = (o->catalog != NULL) + (o->sky != NULL) + (o->random >= 0);
    if (sources != 1)
        return sw_cli_usage(S, "give exactly one of --catalog, --random and --sky");
    if (o->sky && !(o->have_attitude && o->have_focal && o->have_pixel))
        return sw_cli_usage(S, "--sky needs --attitude, --focal-mm and --pixel-um");
    if (!o->sky && (o->have_attitude || o->have_focal || o->have_pixel))
        return sw_cli_usage(S, "--attitude, --focal-mm and --pixel-um go with --sky");
    /* The ROI. */
    if (roi_radius >= 0 && roi_side >= 0)
        return sw_cli_usage(S, "give --roi or --roi-side, not both");
    const long larger = o->width > o->height ? o->width : o->height;
    if (roi_radius >= 0)
        o->roi_side = 2 * roi_radius + 1;
    else if (roi_side >= 0)
        o->roi_side = roi_side;
    else { /* 2 ceil(5 sigma) + 1, at most the larger side */
        const double r = ceil(5.0 * o->sigma);
        o->roi_side = 2.0 * r + 1.0 > (double)larger ? larger : 2 * (long)r + 1;
    }
    if (o->roi_side > larger)
        return sw_cli_usage(S, "the ROI side %ld px is larger than the %dx%d image", o->roi_side,
                            o->width, o->height);
    /* The detector. */
    if ((rc = detector_finish(S, &o->d, o->seed)) != SW_EXIT_OK)
        return rc;
    /* The output. */
    if (!o->out)
        return sw_cli_usage(S, "--out IMAGE is required");
    return check_image_name(S, "--out", o->out, o->d.det.out_type);
}

static const char *lib_error(sw_context *ctx, sw_status st)
{
    const char *m = sw_context_error(ctx);
    return (m && *m) ? m : sw_status_string(st);
}

/*
 * The pinhole camera as a celestial FITS WCS (Calabretta & Greisen 2002, A&A 395, 1077): a
 * pinhole projects by the gnomonic (TAN) projection, so the pixel position is CRPIX plus a
 * constant matrix times the standard coordinates (xi east, eta north) of a direction about the
 * boresight, exactly. The matrix is measured by projecting two directions (sw_camera_project);
 * CD is its inverse, in degrees per pixel.
 */
static void stars_wcs(sw_cli_hdr *h, const sw_camera *cam)
{
    const double d2r = M_PI / 180.0, step = 1e-3; /* radians in the tangent plane */
    const double a0 = cam->ra_deg * d2r, d0 = cam->dec_deg * d2r;
    double x0, y0, m[2][2];
    if (!sw_camera_project(cam, cam->ra_deg, cam->dec_deg, &x0, &y0))
        return;
    for (int k = 0; k < 2; k++) {
        const double xi = k == 0 ? step : 0.0, eta = k == 0 ? 0.0 : step;
        /* the direction whose standard coordinates are (xi, eta) */
        const double den = cos(d0) - eta * sin(d0);
        const double ra = a0 + atan2(xi, den);
        const double dec = atan2(eta * cos(d0) + sin(d0), hypot(xi, den));
        double x, y;
        if (!sw_camera_project(cam, ra / d2r, dec / d2r, &x, &y))
            return;
        m[0][k] = (x - x0) / (step / d2r); /* pixels per degree */
        m[1][k] = (y - y0) / (step / d2r);
    }
    const double det = m[0][0] * m[1][1] - m[0][1] * m[1][0];
    if (!(fabs(det) > 0.0))
        return;
    double ra0 = fmod(cam->ra_deg, 360.0);
    if (ra0 < 0)
        ra0 += 360.0;
    sw_cli_hdr_int(h, "WCSAXES", 2, "world coordinate axes");
    sw_cli_hdr_str(h, "CTYPE1", "RA---TAN", "gnomonic projection: a pinhole camera");
    sw_cli_hdr_str(h, "CTYPE2", "DEC--TAN", "gnomonic projection: a pinhole camera");
    sw_cli_hdr_str(h, "CUNIT1", "deg", NULL);
    sw_cli_hdr_str(h, "CUNIT2", "deg", NULL);
    /* rounded to 1e-9 px: the projection's rounding noise left out */
    sw_cli_hdr_num(h, "CRPIX1", round((x0 + 1.0) * 1e9) / 1e9,
                   "the boresight (FITS pixels count from 1)");
    sw_cli_hdr_num(h, "CRPIX2", round((y0 + 1.0) * 1e9) / 1e9,
                   "the boresight (FITS pixels count from 1)");
    sw_cli_hdr_num(h, "CRVAL1", ra0, "[deg] right ascension of the boresight");
    sw_cli_hdr_num(h, "CRVAL2", cam->dec_deg, "[deg] declination of the boresight");
    sw_cli_hdr_num(h, "CD1_1", m[1][1] / det, "[deg/pixel]");
    sw_cli_hdr_num(h, "CD1_2", -m[0][1] / det, "[deg/pixel]");
    sw_cli_hdr_num(h, "CD2_1", -m[1][0] / det, "[deg/pixel]");
    sw_cli_hdr_num(h, "CD2_2", m[0][0] / det, "[deg/pixel]");
    sw_cli_hdr_num(h, "LONPOLE", 180.0, "[deg] native longitude of the celestial pole");
    sw_cli_hdr_str(h, "RADESYS", "ICRS", "the catalogue's frame");
    sw_cli_hdr_num(h, "ROLL", cam->roll_deg,
                   "[deg] position angle of the image's up (-y) direction");
}

static void stars_header(sw_cli_hdr *h, const stars_opts *o, const stars_report *r)
{
    image_header(h, "spotwave sim stars: a simulated star field", &o->d.det, o->seed);
    sw_cli_hdr_str(h, "SOURCE", r->source, "where the stars came from");
    sw_cli_hdr_int(h, "NSTARS", r->stars, "stars in the source");
    sw_cli_hdr_int(h, "NRENDER", r->rendered, "stars rendered");
    sw_cli_hdr_num(h, "SIGMA", o->sigma, "[pixel] Gaussian PSF standard deviation");
    sw_cli_hdr_str(h, "PSF", o->psf == SW_PSF_INTEGRATED ? "integrated" : "sampled",
                   "PSF integrated over pixels or sampled at centres");
    sw_cli_hdr_int(h, "ROISIDE", o->roi_side, "[pixel] side of the square rendered per star");
    sw_cli_hdr_num(h, "ZEROPT", o->zero_point, "[electron] flux of a magnitude-0 star");
    sw_cli_hdr_num(h, "MAGRATIO", o->ratio > 0 ? o->ratio : pow(10.0, 0.4),
                   "flux ratio of one magnitude");
    if (!o->catalog && !o->sky) {
        sw_cli_hdr_num(h, "MAGMIN", o->mag_min, "brightest random magnitude");
        sw_cli_hdr_num(h, "MAGMAX", o->mag_max, "faintest random magnitude");
    }
    if (o->have_pixel) {
        sw_cli_hdr_num(h, "XPIXSZ", o->cam.pixel_um, "[um] pixel pitch along x");
        sw_cli_hdr_num(h, "YPIXSZ", o->cam.pixel_um, "[um] pixel pitch along y");
    }
    if (o->have_focal)
        sw_cli_hdr_num(h, "FOCALLEN", o->cam.focal_mm, "[mm] focal length");
    if (o->have_pixel && o->have_focal)
        sw_cli_hdr_num(h, "PIXSCALE",
                       180.0 / M_PI * 3600.0 * o->cam.pixel_um * 1e-3 / o->cam.focal_mm,
                       "[arcsec/pixel] at the boresight");
    if (o->sky) {
        sw_camera cam = o->cam;
        cam.width = o->width;
        cam.height = o->height;
        stars_wcs(h, &cam);
    }
}

static int run_stars(const sw_cli_globals *g, const stars_opts *o, stars_report *r)
{
    sw_context *ctx = NULL;
    int rc = sw_cli_context(g, SUB_STARS, &ctx);
    if (rc != SW_EXIT_OK)
        return rc;
    const char *S = SUB_STARS;
    const int cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    sw_stars stars;
    memset(&stars, 0, sizeof stars);
    sw_starsim *plan = NULL;
    sw_image host, d_e, d_out;
    memset(&host, 0, sizeof host);
    memset(&d_e, 0, sizeof d_e);
    memset(&d_out, 0, sizeof d_out);
    sw_status st;
    r->backend = sw_context_backend(ctx);
    r->source = source_name(o);

    /* Stars. */
    double t0 = sw_cli_now();
    if (o->catalog) {
        st = sw_stars_read_csv(ctx, o->catalog, o->zero_point, o->ratio, &stars);
    } else if (o->sky) {
        sw_camera cam = o->cam;
        cam.width = o->width;
        cam.height = o->height;
        st = sw_stars_read_sky_csv(ctx, o->sky, &cam, o->zero_point, o->ratio,
                                   0.5 * (double)o->roi_side, &stars);
    } else {
        st = sw_stars_random(ctx, o->random, o->width, o->height, o->mag_min, o->mag_max,
                             o->zero_point, o->ratio, o->seed, &stars);
    }
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    r->stars = stars.count;
    r->load_ms = 1e3 * (sw_cli_now() - t0);

    /* Render. */
    sw_starsim_params p;
    sw_starsim_params_default(&p);
    p.width = o->width;
    p.height = o->height;
    p.sigma = o->sigma;
    p.roi_side = (int32_t)o->roi_side;
    p.psf = o->psf;
    p.method = o->method;
    p.max_stars = stars.count > 0 ? stars.count : 1;
    if ((st = sw_starsim_create(ctx, &p, &plan)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    if ((st = sw_image_alloc(ctx, o->width, o->height, o->d.det.out_type, &host)) != SW_OK ||
        (cuda &&
         ((st = sw_image_alloc_device(ctx, o->width, o->height, SW_PIX_F32, &d_e)) != SW_OK ||
          (st = sw_image_alloc_device(ctx, o->width, o->height, o->d.det.out_type, &d_out)) !=
              SW_OK))) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    /* On the CPU the electrons go into a host f32 image: `host` when the output is f32 (the
     * detector then works in place), a temporary otherwise. On CUDA both stay on the device. */
    sw_image h_e;
    memset(&h_e, 0, sizeof h_e);
    if (!cuda && o->d.det.out_type != SW_PIX_F32 &&
        (st = sw_image_alloc(ctx, o->width, o->height, SW_PIX_F32, &h_e)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    sw_image *electrons = cuda ? &d_e : (h_e.data ? &h_e : &host);
    sw_image *adu = cuda ? &d_out : &host;
    t0 = sw_cli_now();
    st = sw_starsim_run(plan, &stars, electrons);
    if (st == SW_OK)
        st = sw_context_synchronize(ctx);
    r->render_ms = 1e3 * (sw_cli_now() - t0);
    if (st != SW_OK) {
        sw_image_free(&h_e);
        rc = sw_cli_fail(S, "rendering: %s", lib_error(ctx, st));
        goto done;
    }
    r->rendered = sw_starsim_rendered(plan);
    r->method = sw_starsim_method_used(plan);

    /* Detector. */
    t0 = sw_cli_now();
    st = sw_detector_apply(ctx, &o->d.det, electrons, adu);
    if (st == SW_OK && cuda)
        st = sw_image_copy(ctx, &d_out, &host);
    r->detector_ms = 1e3 * (sw_cli_now() - t0);
    sw_image_free(&h_e);
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "detector model: %s", lib_error(ctx, st));
        goto done;
    }

    /* Files. */
    t0 = sw_cli_now();
    sw_cli_hdr hdr;
    stars_header(&hdr, o, r);
    st = write_any(ctx, o->out, &host, &hdr);
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    if (o->truth && (st = sw_stars_write_truth(ctx, o->truth, &stars, o->width, o->height,
                                               &r->truth_rows)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    r->write_ms = 1e3 * (sw_cli_now() - t0);
    rc = SW_EXIT_OK;
done:
    sw_image_free(&d_out);
    sw_image_free(&d_e);
    sw_image_free(&host);
    sw_starsim_destroy(plan);
    sw_stars_free(&stars);
    sw_context_destroy(ctx);
    return rc;
}

static int cmd_stars(const sw_cli_globals *g, int argc, char **argv)
{
    stars_opts o;
    memset(&o, 0, sizeof o);
    o.random = -1;
    o.width = o.height = DEF_SIZE;
    o.sigma = DEF_SIGMA;
    o.psf = SW_PSF_INTEGRATED;
    o.zero_point = DEF_ZERO_POINT;
    o.ratio = 0.0;
    o.mag_min = DEF_MAG_MIN;
    o.mag_max = DEF_MAG_MAX;
    o.seed = DEF_SEED;
    o.method = SW_STARSIM_AUTO;
    det_opts_init(&o.d, SW_PIX_U16);
    int rc = parse_stars_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    stars_report r;
    memset(&r, 0, sizeof r);
    rc = run_stars(g, &o, &r);
    if (rc != SW_EXIT_OK)
        return rc;
    if (o.json)
        print_json(&o, &r);
    else
        print_text(&o, &r);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ SH options (sh and eye) */

/* The lenslet grid and spot options, shared by `sim sh` and `sim eye`. */
enum {
    OPT_SH_GRID = 300,
    OPT_SH_PITCH,
    OPT_SH_ORIGIN,
    OPT_SH_SIZE,
    OPT_SH_PIXEL,
    OPT_SH_FOCAL,
    OPT_SH_LENSLET,
    OPT_SH_WAVELENGTH,
    OPT_SH_MODEL,
    OPT_SH_SPOT,
    OPT_SH_SIGMA,
    OPT_SH_FLUX,
    OPT_SH_ROI,
    OPT_SH_SAMPLES,
    OPT_SH_OVERSAMPLE,
    OPT_SH_FFT,
    OPT_SH_MIN_ILLUM
};

// clang-format off
#define SH_LONGOPTS \
    {"grid", required_argument, NULL, OPT_SH_GRID}, \
    {"pitch", required_argument, NULL, OPT_SH_PITCH}, \
    {"origin", required_argument, NULL, OPT_SH_ORIGIN}, \
    {"size", required_argument, NULL, OPT_SH_SIZE}, \
    {"pixel-um", required_argument, NULL, OPT_SH_PIXEL}, \
    {"focal-mm", required_argument, NULL, OPT_SH_FOCAL}, \
    {"lenslet-um", required_argument, NULL, OPT_SH_LENSLET}, \
    {"wavelength-um", required_argument, NULL, OPT_SH_WAVELENGTH}, \
    {"model", required_argument, NULL, OPT_SH_MODEL}, \
    {"spot", required_argument, NULL, OPT_SH_SPOT}, \
    {"sigma", required_argument, NULL, OPT_SH_SIGMA}, \
    {"flux", required_argument, NULL, OPT_SH_FLUX}, \
    {"roi", required_argument, NULL, OPT_SH_ROI}, \
    {"samples", required_argument, NULL, OPT_SH_SAMPLES}, \
    {"oversample", required_argument, NULL, OPT_SH_OVERSAMPLE}, \
    {"fft-size", required_argument, NULL, OPT_SH_FFT}, \
    {"min-illum", required_argument, NULL, OPT_SH_MIN_ILLUM}
// clang-format on

typedef struct sh_opts {
    int32_t width, height;
    int32_t nx, ny;
    double pitch, x0, y0, pixel_um, focal_mm, lenslet_um;
    int have_size, have_grid, have_pitch, have_origin, have_pixel, have_lenslet;
    double wavelength_um, sigma_px, flux_e, min_illum;
    sw_sh_model model;
    sw_sh_spot spot;
    long roi, samples, oversample, fft_size;
} sh_opts;

static void sh_opts_init(sh_opts *o, double wavelength_um, double flux_e)
{
    memset(o, 0, sizeof *o);
    o->pitch = 32.0;
    o->nx = o->ny = 16;
    o->pixel_um = 5.5;
    o->focal_mm = 3.5;
    o->wavelength_um = wavelength_um;
    o->flux_e = flux_e;
    o->model = SW_SH_GEOMETRIC;
    o->spot = SW_SH_SPOT_GAUSSIAN;
}

static const char *sh_help(const char *grid_default, const char *size_default, double wavelength,
                           double flux)
{
    static char buf[4096];
    snprintf(buf, sizeof buf,
             "Lenslet grid and detector geometry (Mocci et al. 2020, Eq. 1-5; 0-based pixel\n"
             "centres):\n"
             "  --grid NXxNY           lenslets across and down (%s)\n"
             "  --pitch PX             lenslet pitch in pixels, may be fractional (default 32)\n"
             "  --origin X0,Y0         corner pixel of lenslet (0,0) (default: the grid centred\n"
             "                         on the image, whole pixels)\n"
             "  --size WxH             image size (%s)\n"
             "  --pixel-um P           pixel pitch, micrometres (default 5.5)\n"
             "  --focal-mm F           lenslet focal length, mm (default 3.5)\n"
             "  --lenslet-um L         lenslet pitch, micrometres: with --pixel-um it sets the\n"
             "                         pitch in pixels, otherwise the pixel size (= L / pitch)\n"
             "\n"
             "Spots:\n"
             "  --wavelength-um W      wavelength (default %g)\n"
             "  --model geometric|diffraction\n"
             "                         geometric: a spot per lenslet at the mean wavefront slope\n"
             "                         (default); diffraction: |FFT|^2 of each lenslet's field\n"
             "  --spot gaussian|sinc2  geometric spot shape (default gaussian)\n"
             "  --sigma PX             Gaussian spot sigma (default 0: 0.42 lambda f / lenslet\n"
             "                         pitch, in pixels)\n"
             "  --flux E               e- of a fully lit lenslet (default %g)\n"
             "  --roi PX               side of the square drawn around a geometric spot\n"
             "                         (default 0: the pitch rounded up, plus 2)\n"
             "  --samples N            pupil samples per lenslet side for the mean slope (16)\n"
             "  --oversample N         focal samples per pixel side (default 0: automatic)\n"
             "  --fft-size N           diffraction FFT side (default 0: automatic)\n"
             "  --min-illum F          lenslets lit to this fraction or less are not drawn (0)\n",
             grid_default, size_default, wavelength, flux);
    return buf;
}

static int sh_option(const char *S, int c, const char *arg, sh_opts *o)
{
    double v, list[2];
    long n;
    switch (c) {
    case OPT_SH_GRID:
        if (sw_cli_parse_size(arg, &o->nx, &o->ny) != 0)
            return sw_cli_usage(S, "--grid: '%s' is not NXxNY lenslets", arg);
        o->have_grid = 1;
        return SW_EXIT_OK;
    case OPT_SH_PITCH:
        if (sw_cli_parse_double(arg, &o->pitch) != 0 || !(o->pitch > 0))
            return sw_cli_usage(S, "--pitch: '%s' is not a positive number of pixels", arg);
        o->have_pitch = 1;
        return SW_EXIT_OK;
    case OPT_SH_ORIGIN:
        if (sw_cli_parse_list(arg, list, 2) != 0)
            return sw_cli_usage(S, "--origin: '%s' is not X0,Y0 in pixels", arg);
        o->x0 = list[0];
        o->y0 = list[1];
        o->have_origin = 1;
        return SW_EXIT_OK;
    case OPT_SH_SIZE:
        if (sw_cli_parse_size(arg, &o->width, &o->height) != 0)
            return sw_cli_usage(S, "--size: '%s' is not WIDTHxHEIGHT with both in 1..%d", arg,
                                SW_IMAGE_MAX_DIM);
        o->have_size = 1;
        return SW_EXIT_OK;
    case OPT_SH_PIXEL:
    case OPT_SH_FOCAL:
    case OPT_SH_LENSLET:
    case OPT_SH_WAVELENGTH:
        if (sw_cli_parse_double(arg, &v) != 0 || !(v > 0))
            return sw_cli_usage(S, "%s: '%s' is not a positive length",
                                c == OPT_SH_PIXEL     ? "--pixel-um"
                                : c == OPT_SH_FOCAL   ? "--focal-mm"
                                : c == OPT_SH_LENSLET ? "--lenslet-um"
                                                      : "--wavelength-um",
                                arg);
        if (c == OPT_SH_PIXEL)
            o->pixel_um = v, o->have_pixel = 1;
        else if (c == OPT_SH_FOCAL)
            o->focal_mm = v;
        else if (c == OPT_SH_LENSLET)
            o->lenslet_um = v, o->have_lenslet = 1;
        else
            o->wavelength_um = v;
        return SW_EXIT_OK;
    case OPT_SH_MODEL:
        if (sw_sh_model_parse(arg, &o->model) != SW_OK)
            return sw_cli_usage(S, "--model: '%s' is not geometric or diffraction", arg);
        return SW_EXIT_OK;
    case OPT_SH_SPOT:
        if (sw_sh_spot_parse(arg, &o->spot) != SW_OK)
            return sw_cli_usage(S, "--spot: '%s' is not gaussian or sinc2", arg);
        return SW_EXIT_OK;
    case OPT_SH_SIGMA:
        if (sw_cli_parse_double(arg, &o->sigma_px) != 0 || o->sigma_px < 0)
            return sw_cli_usage(S, "--sigma: '%s' is not a non-negative number of pixels", arg);
        return SW_EXIT_OK;
    case OPT_SH_FLUX:
        if (sw_cli_parse_double(arg, &o->flux_e) != 0 || o->flux_e < 0)
            return sw_cli_usage(S, "--flux: '%s' is not a non-negative number of electrons", arg);
        return SW_EXIT_OK;
    case OPT_SH_MIN_ILLUM:
        if (sw_cli_parse_double(arg, &o->min_illum) != 0 || o->min_illum < 0 || o->min_illum >= 1)
            return sw_cli_usage(S, "--min-illum: '%s' is not a fraction in [0, 1)", arg);
        return SW_EXIT_OK;
    case OPT_SH_ROI:
    case OPT_SH_SAMPLES:
    case OPT_SH_OVERSAMPLE:
    case OPT_SH_FFT:
        if (sw_cli_parse_long(arg, 0, 65536, &n) != 0)
            return sw_cli_usage(S, "%s: '%s' is not a whole number in 0..65536",
                                c == OPT_SH_ROI          ? "--roi"
                                : c == OPT_SH_SAMPLES    ? "--samples"
                                : c == OPT_SH_OVERSAMPLE ? "--oversample"
                                                         : "--fft-size",
                                arg);
        if (c == OPT_SH_ROI)
            o->roi = n;
        else if (c == OPT_SH_SAMPLES)
            o->samples = n;
        else if (c == OPT_SH_OVERSAMPLE)
            o->oversample = n;
        else
            o->fft_size = n;
        return SW_EXIT_OK;
    default: return -1;
    }
}

/*
 * Resolves the defaults: the pixel/lenslet/pitch triangle, the grid from the size (eye: as many
 * lenslets as fit) or the size from the grid (sh), the origin centring the grid; then checks the
 * geometry against the image (a usage error when it does not fit).
 */
static int sh_resolve(const char *S, sh_opts *o, int grid_from_size, int32_t def_w, int32_t def_h)
{
    if (o->have_lenslet) {
        if (o->have_pixel && o->have_pitch) {
            if (fabs(o->lenslet_um - o->pitch * o->pixel_um) > 1e-9 * o->lenslet_um)
                return sw_cli_usage(S,
                                    "--lenslet-um %g disagrees with --pitch %g x --pixel-um %g: "
                                    "give two of the three",
                                    o->lenslet_um, o->pitch, o->pixel_um);
        } else if (o->have_pixel) {
            o->pitch = o->lenslet_um / o->pixel_um;
        } else {
            o->pixel_um = o->lenslet_um / o->pitch;
        }
    }
    if (grid_from_size) {
        if (!o->have_size)
            o->width = def_w, o->height = def_h;
        if (!o->have_grid) {
            o->nx = (int32_t)floor((double)o->width / o->pitch);
            o->ny = (int32_t)floor((double)o->height / o->pitch);
            if (o->nx < 1 || o->ny < 1)
                return sw_cli_usage(S, "a lenslet of %g px does not fit the %dx%d image", o->pitch,
                                    o->width, o->height);
        }
    } else if (!o->have_size) {
        const double x0 = o->have_origin ? o->x0 : 0.0, y0 = o->have_origin ? o->y0 : 0.0;
        const double w = ceil(x0 + o->pitch * o->nx), h = ceil(y0 + o->pitch * o->ny);
        if (!(w >= 1 && h >= 1 && w <= SW_IMAGE_MAX_DIM && h <= SW_IMAGE_MAX_DIM &&
              w * h <= (double)SW_IMAGE_MAX_PIXELS))
            return sw_cli_usage(S, "the grid %dx%d of %g px needs a %gx%g image: give --size",
                                o->nx, o->ny, o->pitch, w, h);
        o->width = (int32_t)w;
        o->height = (int32_t)h;
    }
    if (!o->have_origin) {
        o->x0 = floor(0.5 * ((double)o->width - o->pitch * o->nx));
        o->y0 = floor(0.5 * ((double)o->height - o->pitch * o->ny));
    }
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.x0 = o->x0;
    g.y0 = o->y0;
    g.pitch_px = o->pitch;
    g.nx = o->nx;
    g.ny = o->ny;
    g.pixel_um = o->pixel_um;
    g.focal_mm = o->focal_mm;
    if (sw_sh_geometry_check(NULL, &g, o->width, o->height) != SW_OK)
        return sw_cli_usage(S, "%s", sw_context_error(NULL));
    return SW_EXIT_OK;
}

static void sh_params(const sh_opts *o, sw_shsim_params *p)
{
    sw_shsim_params_default(p);
    p->width = o->width;
    p->height = o->height;
    sw_sh_geometry_default(&p->geom);
    p->geom.x0 = o->x0;
    p->geom.y0 = o->y0;
    p->geom.pitch_px = o->pitch;
    p->geom.nx = o->nx;
    p->geom.ny = o->ny;
    p->geom.pixel_um = o->pixel_um;
    p->geom.focal_mm = o->focal_mm;
    p->model = o->model;
    p->spot = o->spot;
    p->wavelength_um = o->wavelength_um;
    p->sigma_px = o->sigma_px;
    p->flux_e = o->flux_e;
    p->min_illum = o->min_illum;
    if (o->roi > 0)
        p->roi_px = (int32_t)o->roi;
    if (o->samples > 0)
        p->samples = (int32_t)o->samples;
    p->oversample = (int32_t)o->oversample;
    p->fft_size = (int32_t)o->fft_size;
}

/* The lenslet array and the detector's geometry of a Shack-Hartmann image. */
static void sh_header(sw_cli_hdr *h, const sh_opts *o)
{
    sw_cli_hdr_int(h, "GRIDNX", o->nx, "lenslets across");
    sw_cli_hdr_int(h, "GRIDNY", o->ny, "lenslets down");
    sw_cli_hdr_num(h, "PITCH", o->pitch, "[pixel] lenslet pitch on the detector");
    sw_cli_hdr_num(h, "ORIGINX", o->x0, "[pixel] x of lenslet (0,0)'s corner (0-based)");
    sw_cli_hdr_num(h, "ORIGINY", o->y0, "[pixel] y of lenslet (0,0)'s corner (0-based)");
    sw_cli_hdr_num(h, "LENSLET", o->pitch * o->pixel_um, "[um] lenslet pitch");
    sw_cli_hdr_num(h, "FOCALLEN", o->focal_mm, "[mm] lenslet focal length");
    sw_cli_hdr_num(h, "XPIXSZ", o->pixel_um, "[um] detector pixel pitch along x");
    sw_cli_hdr_num(h, "YPIXSZ", o->pixel_um, "[um] detector pixel pitch along y");
    sw_cli_hdr_num(h, "WAVELEN", o->wavelength_um, "[um] wavelength");
    sw_cli_hdr_str(h, "SHMODEL", sw_sh_model_string(o->model), "spot model");
    sw_cli_hdr_num(h, "FLUX", o->flux_e, "[electron] flux of a fully lit lenslet");
}

static int64_t lit_lenslets(const sw_sh_truth *t, double min_illum)
{
    int64_t n = 0;
    for (int64_t l = 0; l < (int64_t)t->nx * t->ny; l++)
        n += t->illum[l] > min_illum;
    return n;
}

static void json_number(double v)
{
    if (isfinite(v))
        printf("%.17g", v);
    else
        printf("null");
}

/* Applies the detector to a host f32 image of electrons into a new host image of the output type
 * and writes it. */
/* The detector of the reference image (--reference): the same camera, another exposure, so its
 * noise is drawn under a different seed (the golden-ratio constant added to --seed); with the same
 * draws the noise would cancel in centroid - reference and flatter every later stage. */
static sw_detector reference_detector(const sw_detector *d)
{
    sw_detector r = *d;
    r.seed = d->seed + 0x9E3779B97F4A7C15ull;
    return r;
}

static int detect_and_write(sw_context *ctx, const char *S, const sw_detector *det,
                            const sw_image *electrons, const char *path, const sw_cli_hdr *h,
                            double *det_ms, double *write_ms)
{
    sw_image out;
    memset(&out, 0, sizeof out);
    sw_status st = sw_image_alloc(ctx, electrons->width, electrons->height, det->out_type, &out);
    double t0 = sw_cli_now();
    if (st == SW_OK)
        st = sw_detector_apply(ctx, det, electrons, &out);
    if (det_ms)
        *det_ms += 1e3 * (sw_cli_now() - t0);
    if (st != SW_OK) {
        sw_image_free(&out);
        return sw_cli_fail(S, "detector model: %s", lib_error(ctx, st));
    }
    t0 = sw_cli_now();
    if ((st = write_any(ctx, path, &out, h)) != SW_OK) {
        sw_image_free(&out);
        return sw_cli_fail(S, "%s", lib_error(ctx, st));
    }
    if (write_ms)
        *write_ms += 1e3 * (sw_cli_now() - t0);
    sw_image_free(&out);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ sim sh */

#define SH_DEF_WAVELENGTH 0.8
#define SH_DEF_FLUX       5e4

static void sim_sh_help(FILE *out)
{
    fprintf(out,
            "Usage: spotwave [GLOBAL OPTIONS] sim sh [SOURCE] [OPTIONS] --out IMAGE\n"
            "\n"
            "Renders the Shack-Hartmann spot pattern of a wavefront through a pupil (sim_sh.h),\n"
            "applies the detector model, and writes the image and, with --truth, each lenslet's\n"
            "true spot position. Pupil-plane coordinates (u, v) are micrometres at the lenslet\n"
            "array, origin at the array's centre, u along +x and v along +y.\n"
            "\n"
            "Source (at most one; none: a flat wavefront):\n"
            "  --zernike CSV          coefficients: columns n,m or j (OSA) or noll, and coef_um\n"
            "  --zernike-radius-mm R  radius of the Zernike circle at the lenslets (default: the\n"
            "                         pupil's semi-major axis; without --pupil-mm the circle\n"
            "                         inscribed in the grid)\n"
            "  --screen FITS          an optical path map (2-D FITS), centred on the array\n"
            "  --screen-spacing-um S  its sample spacing (needed with --screen; with\n"
            "                         --turbulence the default is the lenslet pitch / 8)\n"
            "  --screen-scale-um K    micrometres of path per file unit (default 1; for phase\n"
            "                         in radians at wavelength W: W / (2 pi))\n"
            "  --turbulence r0=R[,L0=L][,wavelength=W][,subharmonics=N]\n"
            "                         a von Karman (L0 > 0) or Kolmogorov (L0=0 or inf) FFT phase\n"
            "                         screen with subharmonics (Lane, Glindemann & Dainty 1992,\n"
            "                         Waves Random Media 2(3), 209) covering the array: r0 and\n"
            "                         L0 in metres in the plane of the lenslet array (the plane\n"
            "                         of (u, v) and --pupil-mm, not the sky's), r0 at W um of\n"
            "                         wavelength (defaults L0=25, wavelength=0.5,\n"
            "                         subharmonics=3). For a telescope of diameter D imaged onto\n"
            "                         an array A wide, give r0 and L0 times A / D (D = 8 m and\n"
            "                         r0 0.15 m on 16 lenslets of 176 um: r0=5.28e-5)\n"
            "  --screen-index I       which screen of the --seed's sequence (default 0)\n"
            "\n"
            "Pupil (at the lenslet array; default: every lenslet fully lit):\n"
            "  --pupil-mm D           pupil diameter (the major axis of an ellipse)\n"
            "  --pupil-center-mm U,V  its centre's offset from the array centre (default 0,0)\n"
            "  --obscuration F        central obscuration, fraction of the diameter (0..1)\n"
            "  --ellipse B/A,ANGLE    minor/major axis ratio and the major axis direction,\n"
            "                         degrees from +x towards +y\n"
            "\n"
            "%s"
            "\n"
            "%s"
            "  --seed S               noise and turbulence seed, 64-bit (default %d)\n"
            "\n"
            "Output:\n"
            "  -o, --out IMAGE        .fits (any --bits), .pgm or .h5 (Eiger-like NeXus; 8 or 16 "
            "bits)\n"
            "  --truth CSV            ix,iy,x_px,y_px,ref_x_px,ref_y_px,illum per lenslet\n"
            "                         (x_px, y_px nan for lenslets not drawn)\n"
            "  --reference IMAGE      the flat-wavefront image through the same pupil and\n"
            "                         detector (the centroid reference)\n"
            "  --json                 print the report as JSON\n"
            "  -h, --help             print this help and exit\n",
            sh_help("default 16x16", "default: the grid's extent", SH_DEF_WAVELENGTH, SH_DEF_FLUX),
            detector_help(16), DEF_SEED);
}

typedef struct simsh_opts {
    sh_opts sh;
    const char *zernike, *screen, *turbulence;
    double spacing_um, scale_um, zernike_radius_mm;
    int have_spacing;
    sw_turbulence turb;
    uint64_t screen_index;
    double pupil_mm, pupil_cu_mm, pupil_cv_mm, obscuration, ellipse_ratio, ellipse_angle;
    int have_pupil_center, have_ellipse;
    uint64_t seed;
    det_opts d;
    const char *out, *truth, *reference;
    int json;
} simsh_opts;

typedef struct simsh_report {
    const char *source;
    int64_t lit;
    int32_t screen_n;
    double radius_um, rms_um;
    double render_ms, detector_ms, write_ms;
    sw_backend backend;
} simsh_report;

/* "r0=0.1,L0=25,wavelength=0.5,subharmonics=3" */
static int parse_turbulence(const char *text, sw_turbulence *t)
{
    char buf[256];
    if (!text || strlen(text) >= sizeof buf)
        return -1;
    strcpy(buf, text);
    sw_turbulence_default(t);
    int have_r0 = 0;
    for (char *item = strtok(buf, ","); item; item = strtok(NULL, ",")) {
        char *eq = strchr(item, '=');
        if (!eq)
            return -1;
        *eq = '\0';
        double v;
        if (strcmp(item, "L0") == 0 &&
            (strcasecmp(eq + 1, "inf") == 0 || strcasecmp(eq + 1, "infinity") == 0))
            v = INFINITY; /* Kolmogorov, as L0=0 */
        else if (sw_cli_parse_double(eq + 1, &v) != 0)
            return -1;
        if (strcmp(item, "r0") == 0 && v > 0)
            t->r0_m = v, have_r0 = 1;
        else if (strcmp(item, "L0") == 0 && v >= 0)
            t->L0_m = v;
        else if (strcmp(item, "wavelength") == 0 && v > 0)
            t->wavelength_um = v;
        else if (strcmp(item, "subharmonics") == 0 && v >= 0 &&
                 v <= SW_TURBULENCE_MAX_SUBHARMONICS && v == floor(v))
            t->subharmonics = (int32_t)v;
        else
            return -1;
    }
    return have_r0 ? 0 : -1;
}

static int parse_sh_options(int argc, char **argv, simsh_opts *o)
{
    enum {
        OPT_ZERNIKE = 256,
        OPT_ZRADIUS,
        OPT_SCREEN,
        OPT_SPACING,
        OPT_SCALE,
        OPT_TURB,
        OPT_SCREEN_INDEX,
        OPT_PUPIL,
        OPT_PUPIL_CENTER,
        OPT_OBSCURATION,
        OPT_ELLIPSE,
        OPT_SEED,
        OPT_TRUTH,
        OPT_REFERENCE,
        OPT_JSON
    };
    static const struct option longopts[] = {
        {"zernike", required_argument, NULL, OPT_ZERNIKE},
        {"zernike-radius-mm", required_argument, NULL, OPT_ZRADIUS},
        {"screen", required_argument, NULL, OPT_SCREEN},
        {"screen-spacing-um", required_argument, NULL, OPT_SPACING},
        {"screen-scale-um", required_argument, NULL, OPT_SCALE},
        {"turbulence", required_argument, NULL, OPT_TURB},
        {"screen-index", required_argument, NULL, OPT_SCREEN_INDEX},
        {"pupil-mm", required_argument, NULL, OPT_PUPIL},
        {"pupil-center-mm", required_argument, NULL, OPT_PUPIL_CENTER},
        {"obscuration", required_argument, NULL, OPT_OBSCURATION},
        {"ellipse", required_argument, NULL, OPT_ELLIPSE},
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
    const char *S = SUB_SH;
    double list[2];
    int c, rc;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        switch (c) {
        case OPT_ZERNIKE: o->zernike = optarg; break;
        case OPT_SCREEN: o->screen = optarg; break;
        case OPT_TURB:
            if (parse_turbulence(optarg, &o->turb) != 0)
                return sw_cli_usage(S,
                                    "--turbulence: '%s' is not r0=R[,L0=L][,wavelength=W]"
                                    "[,subharmonics=N] (r0 > 0, L0 >= 0 in metres)",
                                    optarg);
            o->turbulence = optarg;
            break;
        case OPT_ZRADIUS:
        case OPT_SPACING:
        case OPT_SCALE:
        case OPT_PUPIL: {
            double v;
            if (sw_cli_parse_double(optarg, &v) != 0 || !(v > 0))
                return sw_cli_usage(S, "%s: '%s' is not a positive number",
                                    sw_cli_option_name(argv), optarg);
            if (c == OPT_ZRADIUS)
                o->zernike_radius_mm = v;
            else if (c == OPT_SPACING)
                o->spacing_um = v, o->have_spacing = 1;
            else if (c == OPT_SCALE)
                o->scale_um = v;
            else
                o->pupil_mm = v;
            break;
        }
        case OPT_SCREEN_INDEX:
            if (sw_cli_parse_u64(optarg, &o->screen_index) != 0 ||
                o->screen_index >= ((uint64_t)1 << 32))
                return sw_cli_usage(S, "--screen-index: '%s' is not in 0..2^32-1", optarg);
            break;
        case OPT_PUPIL_CENTER:
            if (sw_cli_parse_list(optarg, list, 2) != 0)
                return sw_cli_usage(S, "--pupil-center-mm: '%s' is not U,V in mm", optarg);
            o->pupil_cu_mm = list[0];
            o->pupil_cv_mm = list[1];
            o->have_pupil_center = 1;
            break;
        case OPT_OBSCURATION:
            if (sw_cli_parse_double(optarg, &o->obscuration) != 0 || o->obscuration < 0 ||
                o->obscuration >= 1)
                return sw_cli_usage(S, "--obscuration: '%s' is not a fraction in [0, 1)", optarg);
            break;
        case OPT_ELLIPSE:
            if (sw_cli_parse_list(optarg, list, 2) != 0 || !(list[0] > 0) || list[0] > 1)
                return sw_cli_usage(S, "--ellipse: '%s' is not B/A,ANGLE with 0 < B/A <= 1",
                                    optarg);
            o->ellipse_ratio = list[0];
            o->ellipse_angle = list[1];
            o->have_ellipse = 1;
            break;
        case OPT_SEED:
            if (sw_cli_parse_u64(optarg, &o->seed) != 0)
                return sw_cli_usage(S, "--seed: '%s' is not an unsigned 64-bit integer", optarg);
            break;
        case 'o':
            if (!*optarg)
                return sw_cli_usage(S, "--out: the file name is empty");
            o->out = optarg;
            break;
        case OPT_TRUTH:
        case OPT_REFERENCE:
            if (!*optarg)
                return sw_cli_usage(S, "%s: the file name is empty", sw_cli_option_name(argv));
            if (c == OPT_TRUTH)
                o->truth = optarg;
            else
                o->reference = optarg;
            break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sim_sh_help(stdout); return -1;
        default: {
            int r = sh_option(S, c, optarg, &o->sh);
            if (r == -1)
                r = detector_option(S, c, sw_cli_option_name(argv), optarg, &o->d);
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
    if ((o->zernike != NULL) + (o->screen != NULL) + (o->turbulence != NULL) > 1)
        return sw_cli_usage(S, "give at most one of --zernike, --screen and --turbulence");
    if (o->screen && !o->have_spacing)
        return sw_cli_usage(S, "--screen needs --screen-spacing-um");
    if (!o->screen && o->scale_um > 0)
        return sw_cli_usage(S, "--screen-scale-um goes with --screen");
    if (o->have_spacing && !o->screen && !o->turbulence)
        return sw_cli_usage(S, "--screen-spacing-um goes with --screen or --turbulence");
    if (o->zernike_radius_mm > 0 && !o->zernike)
        return sw_cli_usage(S, "--zernike-radius-mm goes with --zernike");
    if (!(o->pupil_mm > 0) && (o->have_pupil_center || o->have_ellipse || o->obscuration > 0))
        return sw_cli_usage(S, "--pupil-center-mm, --obscuration and --ellipse need --pupil-mm");
    if (o->scale_um <= 0)
        o->scale_um = 1.0;
    if ((rc = sh_resolve(S, &o->sh, 0, 0, 0)) != SW_EXIT_OK)
        return rc;
    if ((rc = detector_finish(S, &o->d, o->seed)) != SW_EXIT_OK)
        return rc;
    if (!o->out)
        return sw_cli_usage(S, "--out IMAGE is required");
    if ((rc = check_image_name(S, "--out", o->out, o->d.det.out_type)) != SW_EXIT_OK)
        return rc;
    if (o->reference &&
        (rc = check_image_name(S, "--reference", o->reference, o->d.det.out_type)) != SW_EXIT_OK)
        return rc;
    return SW_EXIT_OK;
}

static void sh_image_header(sw_cli_hdr *h, const simsh_opts *o, const simsh_report *r,
                            const sw_detector *det, int reference)
{
    image_header(h,
                 reference ? "spotwave sim sh: the reference frame (flat wavefront)"
                           : "spotwave sim sh: a simulated Shack-Hartmann frame",
                 det, o->seed);
    sw_cli_hdr_bool(h, "REFFRAME", reference, "the reference frame (flat wavefront)");
    sh_header(h, &o->sh);
    sw_cli_hdr_str(h, "SOURCE", r->source, "the wavefront");
    if (o->zernike) {
        sw_cli_hdr_num(h, "ZRADIUS", r->radius_um, "[um] radius of the Zernike unit circle");
        sw_cli_hdr_num(h, "ZRMS", r->rms_um, "[um] RMS of the Zernike wavefront");
    }
    if (o->turbulence) {
        sw_cli_hdr_num(h, "R0", o->turb.r0_m, "[m] Fried parameter at R0WAVE");
        sw_cli_hdr_num(h, "L0", isfinite(o->turb.L0_m) ? o->turb.L0_m : 0.0,
                       "[m] outer scale (0: Kolmogorov)");
        sw_cli_hdr_num(h, "R0WAVE", o->turb.wavelength_um, "[um] wavelength of R0");
        sw_cli_hdr_int(h, "SUBHARM", o->turb.subharmonics, "subharmonic levels of the screen");
        sw_cli_hdr_u64(h, "SCRINDEX", o->screen_index, "phase screen index");
    }
    if (o->pupil_mm > 0) {
        sw_cli_hdr_num(h, "PUPIL", o->pupil_mm, "[mm] pupil diameter");
        sw_cli_hdr_num(h, "PUPILCU", o->pupil_cu_mm, "[mm] pupil centre, u");
        sw_cli_hdr_num(h, "PUPILCV", o->pupil_cv_mm, "[mm] pupil centre, v");
        sw_cli_hdr_num(h, "OBSCUR", o->obscuration, "central obscuration, fraction of the pupil");
    }
}

static int run_sh(const sw_cli_globals *g, const simsh_opts *o, simsh_report *r)
{
    const char *S = SUB_SH;
    sw_context *ctx = NULL;
    int rc = sw_cli_context(g, S, &ctx);
    if (rc != SW_EXIT_OK)
        return rc;
    r->backend = sw_context_backend(ctx);
    r->source = o->zernike      ? "zernike"
                : o->screen     ? "screen"
                : o->turbulence ? "turbulence"
                                : "flat";
    const int cuda = r->backend == SW_BACKEND_CUDA;
    sw_shsim *plan = NULL;
    sw_zernike_coefs z;
    memset(&z, 0, sizeof z);
    sw_wavefront w;
    memset(&w, 0, sizeof w);
    sw_sh_truth truth;
    memset(&truth, 0, sizeof truth);
    sw_image e_host, e_dev;
    memset(&e_host, 0, sizeof e_host);
    memset(&e_dev, 0, sizeof e_dev);
    sw_status st;

    sw_shsim_params p;
    sh_params(&o->sh, &p);
    const double lenslet_um = o->sh.pitch * o->sh.pixel_um;
    if (o->pupil_mm > 0) {
        p.pupil = sw_pupil_circle(o->pupil_mm * 1e3);
        p.pupil.cu_um = o->pupil_cu_mm * 1e3;
        p.pupil.cv_um = o->pupil_cv_mm * 1e3;
        if (o->have_ellipse) {
            p.pupil.b_um = p.pupil.a_um * o->ellipse_ratio;
            p.pupil.angle_deg = o->ellipse_angle;
        }
        p.pupil.obscuration = o->obscuration;
    }
    if ((st = sw_shsim_create(ctx, &p, &plan)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }

    /* The wavefront. */
    if (o->zernike) {
        r->radius_um = o->zernike_radius_mm > 0 ? o->zernike_radius_mm * 1e3
                       : o->pupil_mm > 0
                           ? 0.5 * o->pupil_mm * 1e3
                           : 0.5 * lenslet_um * (o->sh.nx < o->sh.ny ? o->sh.nx : o->sh.ny);
        st = sw_zernike_read_csv(ctx, o->zernike, &z);
        if (st == SW_OK)
            st = sw_shsim_add_zernike(plan, z.coef_um, z.count, r->radius_um);
        if (st == SW_OK)
            r->rms_um = sw_zernike_rms(z.coef_um, z.count, 1);
    } else if (o->screen || o->turbulence) {
        if (o->screen) {
            st = sw_wavefront_read_fits(ctx, o->screen, o->spacing_um, o->scale_um, &w);
        } else {
            const double spacing = o->have_spacing ? o->spacing_um : lenslet_um / 8.0;
            const double ext = lenslet_um * (o->sh.nx > o->sh.ny ? o->sh.nx : o->sh.ny);
            double n = 2.0 * ceil(0.5 * (ext / spacing + 4.0));
            if (n < SW_PHASE_SCREEN_MIN)
                n = SW_PHASE_SCREEN_MIN;
            if (n > SW_PHASE_SCREEN_MAX) {
                rc = sw_cli_fail(S,
                                 "turbulence: covering the %g um array at %g um spacing needs a "
                                 "%g-sample screen (at most %d): give a larger "
                                 "--screen-spacing-um",
                                 ext, spacing, n, SW_PHASE_SCREEN_MAX);
                goto done;
            }
            r->screen_n = (int32_t)n;
            st = sw_phase_screen(ctx, &o->turb, (int32_t)n, spacing * 1e-6, o->seed,
                                 o->screen_index, &w);
        }
        if (st == SW_OK)
            st = sw_shsim_add_wavefront(plan, &w, 1.0);
    }
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }

    /* Render (on CUDA into a device image, then to the host for the detector). */
    if ((st = sw_image_alloc(ctx, o->sh.width, o->sh.height, SW_PIX_F32, &e_host)) != SW_OK ||
        (cuda && (st = sw_image_alloc_device(ctx, o->sh.width, o->sh.height, SW_PIX_F32, &e_dev)) !=
                     SW_OK)) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    for (int pass = 0; pass < (o->reference ? 2 : 1); pass++) {
        if (pass == 1 && (st = sw_shsim_clear_opd(plan)) != SW_OK) {
            rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
            goto done;
        }
        double t0 = sw_cli_now();
        st = sw_shsim_run(plan, cuda ? &e_dev : &e_host, 0);
        if (st == SW_OK && cuda)
            st = sw_image_copy(ctx, &e_dev, &e_host);
        if (pass == 0)
            r->render_ms = 1e3 * (sw_cli_now() - t0);
        if (st != SW_OK) {
            rc = sw_cli_fail(S, "rendering: %s", lib_error(ctx, st));
            goto done;
        }
        if (pass == 0 && (st = sw_shsim_truth(plan, &truth)) != SW_OK) {
            rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
            goto done;
        }
        /* The reference is another exposure: its own noise (reference_detector). */
        sw_detector det = pass == 0 ? o->d.det : reference_detector(&o->d.det);
        sw_cli_hdr hdr;
        sh_image_header(&hdr, o, r, &det, pass == 1);
        rc = detect_and_write(ctx, S, &det, &e_host, pass == 0 ? o->out : o->reference, &hdr,
                              &r->detector_ms, &r->write_ms);
        if (rc != SW_EXIT_OK)
            goto done;
    }
    r->lit = lit_lenslets(&truth, sw_shsim_params_used(plan)->min_illum);
    if (r->lit == 0) {
        rc = sw_cli_fail(S,
                         "the pupil lights none of the %d lenslets (check --pupil-mm, "
                         "--pupil-center-mm and --min-illum against the grid)",
                         (int)(truth.nx * truth.ny));
        goto done;
    }
    if (o->truth && (st = sw_sh_truth_write_csv(ctx, o->truth, &truth)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    rc = SW_EXIT_OK;
done:
    sw_image_free(&e_dev);
    sw_image_free(&e_host);
    sw_sh_truth_free(&truth);
    sw_wavefront_free(&w);
    sw_zernike_coefs_free(&z);
    sw_shsim_destroy(plan);
    sw_context_destroy(ctx);
    return rc;
}

static void print_sh(const simsh_opts *o, const simsh_report *r)
{
    if (!o->json) {
        printf("sim sh: %s wavefront, %lld of %d lenslets lit\n", r->source, (long long)r->lit,
               o->sh.nx * o->sh.ny);
        printf("  image      %dx%d, grid %dx%d of %g px at (%g, %g), %s model\n", o->sh.width,
               o->sh.height, o->sh.nx, o->sh.ny, o->sh.pitch, o->sh.x0, o->sh.y0,
               sw_sh_model_string(o->sh.model));
        printf("  optics     %g um pixels, f %g mm, lenslet %g um, %g um light\n", o->sh.pixel_um,
               o->sh.focal_mm, o->sh.pitch * o->sh.pixel_um, o->sh.wavelength_um);
        if (o->zernike)
            printf("  wavefront  RMS %g um over a %g um radius\n", r->rms_um, r->radius_um);
        printf("  backend    %s; render %.3f ms, detector %.3f ms, write %.3f ms\n",
               sw_backend_string(r->backend), r->render_ms, r->detector_ms, r->write_ms);
        printf("  wrote      %s", o->out);
        if (o->truth)
            printf(", %s", o->truth);
        if (o->reference)
            printf(", %s", o->reference);
        printf("\n");
        return;
    }
    printf("{\n  \"subcommand\": \"sim sh\",\n  \"source\": \"%s\",\n", r->source);
    printf("  \"width\": %d,\n  \"height\": %d,\n  \"grid_nx\": %d,\n  \"grid_ny\": %d,\n",
           o->sh.width, o->sh.height, o->sh.nx, o->sh.ny);
    printf("  \"pitch_px\": %.17g,\n  \"origin_x_px\": %.17g,\n  \"origin_y_px\": %.17g,\n",
           o->sh.pitch, o->sh.x0, o->sh.y0);
    printf("  \"pixel_um\": %.17g,\n  \"focal_mm\": %.17g,\n  \"wavelength_um\": %.17g,\n",
           o->sh.pixel_um, o->sh.focal_mm, o->sh.wavelength_um);
    printf("  \"model\": \"%s\",\n  \"lenslets\": %d,\n  \"lenslets_lit\": %lld,\n",
           sw_sh_model_string(o->sh.model), o->sh.nx * o->sh.ny, (long long)r->lit);
    printf("  \"zernike_radius_um\": ");
    json_number(o->zernike ? r->radius_um : NAN);
    printf(",\n  \"rms_um\": ");
    json_number(o->zernike ? r->rms_um : NAN);
    printf(",\n  \"screen_samples\": %d,\n", r->screen_n);
    printf("  \"backend\": \"%s\",\n  \"seed\": %llu,\n  \"pixel_type\": \"%s\",\n",
           sw_backend_string(r->backend), (unsigned long long)o->seed,
           sw_pixel_type_string(o->d.det.out_type));
    printf("  \"render_ms\": %.6f,\n  \"detector_ms\": %.6f,\n  \"write_ms\": %.6f,\n",
           r->render_ms, r->detector_ms, r->write_ms);
    printf("  \"out\": ");
    sw_json_write_string(stdout, o->out);
    printf(",\n  \"truth\": ");
    sw_json_write_string(stdout, o->truth);
    printf(",\n  \"reference\": ");
    sw_json_write_string(stdout, o->reference);
    printf("\n}\n");
}

static int cmd_sh(const sw_cli_globals *g, int argc, char **argv)
{
    simsh_opts o;
    memset(&o, 0, sizeof o);
    sh_opts_init(&o.sh, SH_DEF_WAVELENGTH, SH_DEF_FLUX);
    sw_turbulence_default(&o.turb);
    o.seed = DEF_SEED;
    det_opts_init(&o.d, SW_PIX_U16);
    int rc = parse_sh_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    simsh_report r;
    memset(&r, 0, sizeof r);
    if ((rc = run_sh(g, &o, &r)) != SW_EXIT_OK)
        return rc;
    print_sh(&o, &r);
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ sim eye */

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
            "  --glow E               retinal glow at the pupil centre, e-/px (default %g)\n"
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
            "                         pupil_mm,reflection_x_px,reflection_y_px)\n"
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
            sh_help("default: as many as fit the image", "default 640x640; 1280x640 binocular",
                    EYE_DEF_WAVELENGTH, EYE_DEF_FLUX),
            detector_help(8), DEF_SEED);
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
            if (sw_cli_parse_u64(optarg, &o->seed) != 0)
                return sw_cli_usage(S, "--seed: '%s' is not an unsigned 64-bit integer", optarg);
            break;
        case 'o':
            if (!*optarg)
                return sw_cli_usage(S, "--out: the file name is empty");
            o->out = optarg;
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
            int r = sh_option(S, c, optarg, &o->sh);
            if (r == -1)
                r = detector_option(S, c, name, optarg, &o->d);
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
    if ((rc = sh_resolve(S, &o->sh, 1, o->binocular ? 1280 : 640, 640)) != SW_EXIT_OK)
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
    if ((rc = detector_finish(S, &o->d, o->seed)) != SW_EXIT_OK)
        return rc;
    if (!o->out)
        return sw_cli_usage(S, "--out IMAGE is required");
    if ((rc = check_image_name(S, "--out", o->out, o->d.det.out_type)) != SW_EXIT_OK)
        return rc;
    if (o->reference &&
        (rc = check_image_name(S, "--reference", o->reference, o->d.det.out_type)) != SW_EXIT_OK)
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
                return sw_cli_fail(S, "%s", lib_error(ctx, st));
            count[e] = z.count > 6 ? z.count : 6;
            coef[e] = calloc((size_t)count[e], sizeof(double));
            if (!coef[e]) {
                sw_zernike_coefs_free(&z);
                return sw_cli_fail(S, "out of memory");
            }
            st = sw_ocular_apply(ctx, z.coef_um, z.count, from, &opt, coef[e], count[e]);
            sw_zernike_coefs_free(&z);
            if (st != SW_OK)
                return sw_cli_fail(S, "%s: %s", path, lib_error(ctx, st));
        }
        return SW_EXIT_OK;
    }
    opt.keep_tilt = o->keep_tilt;
    sw_ocular_population pop;
    if ((st = sw_ocular_population_load(ctx, o->data, o->population_mm, &pop)) != SW_OK)
        return sw_cli_fail(S, "%s", lib_error(ctx, st));
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
        return sw_cli_fail(S, "%s", lib_error(ctx, st));
    return SW_EXIT_OK;
}

static int write_eye_truth(sw_context *ctx, const char *prefix, const sw_eyesim_truth *t)
{
    const char *S = SUB_EYE;
    char path[4200];
    sw_status st;
    for (int e = 0; e < t->n_eyes; e++) {
        snprintf(path, sizeof path, "%s_eye%d_spots.csv", prefix, e);
        if ((st = sw_sh_truth_write_csv(ctx, path, &t->eye[e].sh)) != SW_OK)
            return sw_cli_fail(S, "%s", lib_error(ctx, st));
        snprintf(path, sizeof path, "%s_eye%d_zernike.csv", prefix, e);
        double zero = 0.0;
        sw_zernike_coefs z = {t->eye[e].count, t->eye[e].coef_um};
        if (z.count < 1) {
            z.count = 1;
            z.coef_um = &zero;
        }
        if ((st = sw_zernike_write_csv(ctx, path, &z)) != SW_OK)
            return sw_cli_fail(S, "%s", lib_error(ctx, st));
    }
    static const char *const names[] = {
        "pupil",     "cx_px",    "cy_px",           "a_px",           "b_px",
        "angle_deg", "pupil_mm", "reflection_x_px", "reflection_y_px"};
    sw_table tab;
    if ((st = sw_table_create(ctx, 9, names, &tab)) != SW_OK)
        return sw_cli_fail(S, "%s", lib_error(ctx, st));
    for (int e = 0; e < t->n_eyes && st == SW_OK; e++) {
        const sw_eye_truth *q = &t->eye[e];
        const double row[9] = {
            e,           q->cx_px,           q->cy_px,          q->a_px, q->b_px, q->angle_deg,
            q->pupil_mm, q->reflection_x_px, q->reflection_y_px};
        st = sw_table_append(ctx, &tab, row);
    }
    snprintf(path, sizeof path, "%s_pupils.csv", prefix);
    if (st == SW_OK)
        st = sw_csv_write(ctx, path, &tab);
    sw_table_free(&tab);
    if (st != SW_OK)
        return sw_cli_fail(S, "%s", lib_error(ctx, st));
    return SW_EXIT_OK;
}

static void eye_header(sw_cli_hdr *h, const eye_opts *o, const eye_report *r,
                       const sw_detector *det, int reference)
{
    image_header(h,
                 reference ? "spotwave sim eye: the reference frame (no eye, flat wavefront)"
                           : "spotwave sim eye: a simulated Hartmann-Shack frame of eyes",
                 det, o->seed);
    sw_cli_hdr_bool(h, "REFFRAME", reference, "the reference frame (no eye)");
    sh_header(h, &o->sh);
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
    sh_params(&o->sh, &p.sh);
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
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    double t0 = sw_cli_now();
    st = sw_eyesim_render(ctx, &p, &e, &r->truth);
    r->render_ms = 1e3 * (sw_cli_now() - t0);
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", lib_error(ctx, st));
        goto done;
    }
    sw_cli_hdr hdr;
    eye_header(&hdr, o, r, &o->d.det, 0);
    if ((rc = detect_and_write(ctx, S, &o->d.det, &e, o->out, &hdr, &r->detector_ms,
                               &r->write_ms)) != SW_EXIT_OK)
        goto done;
    if (o->truth && (rc = write_eye_truth(ctx, o->truth, &r->truth)) != SW_EXIT_OK)
        goto done;
    if (o->reference) {
        for (int k = 0; k < ne; k++) {
            p.eyes[k].coef_um = NULL;
            p.eyes[k].count = 0;
        }
        sw_eye_artefacts_none(&p.art);
        if ((st = sw_eyesim_render(ctx, &p, &e, NULL)) != SW_OK) {
            rc = sw_cli_fail(S, "reference: %s", lib_error(ctx, st));
            goto done;
        }
        sw_detector det = reference_detector(&o->d.det);
        eye_header(&hdr, o, r, &det, 1);
        if ((rc = detect_and_write(ctx, S, &det, &e, o->reference, &hdr, NULL, NULL)) != SW_EXIT_OK)
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
 * coefficients as 'spotwave aberrometry' reports it (Thibos et al. 2004 with the 4th and 6th
 * orders); NaN where there is none. */
static double eye_magnification(const eye_opts *o, const sw_eye_truth *q)
{
    return 2.0 * q->a_px * o->sh.pixel_um / (1000.0 * q->pupil_mm);
}

static sw_refraction eye_true_rx(const sw_eye_truth *q)
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
    if (sw_zernike_refraction(NULL, coef, count, q->pupil_mm, 1, 0.0, &rx) != SW_OK)
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
            const sw_refraction rx = eye_true_rx(q);
            printf("  eye %d      centre (%g, %g) px, diameter %g px, RMS %.4f um, %lld lenslets "
                   "lit\n",
                   e, q->cx_px, q->cy_px, 2 * q->a_px,
                   q->count > 0 ? sw_zernike_rms(q->coef_um, q->count, 3) : 0.0,
                   (long long)lit_lenslets(&q->sh, o->sh.min_illum));
            printf("             magnification %g (pupil %g mm on %g px of %g um); true refraction "
                   "%+.2f D %+.2f D x %.0f deg (orders 2, 4, 6, as aberrometry)\n",
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
    printf("{\n  \"subcommand\": \"sim eye\",\n  \"eyes\": %d,\n  \"source\": \"%s\",\n", t->n_eyes,
           r->source);
    printf("  \"population_mm\": ");
    json_number(o->n_zernike ? NAN : o->population_mm);
    printf(",\n  \"pupil_mm\": %.17g,\n  \"width\": %d,\n  \"height\": %d,\n", o->pupil_mm,
           o->sh.width, o->sh.height);
    printf("  \"grid_nx\": %d,\n  \"grid_ny\": %d,\n  \"pitch_px\": %.17g,\n", o->sh.nx, o->sh.ny,
           o->sh.pitch);
    printf("  \"model\": \"%s\",\n  \"backend\": \"%s\",\n  \"seed\": %llu,\n",
           sw_sh_model_string(o->sh.model), sw_backend_string(r->backend),
           (unsigned long long)o->seed);
    printf("  \"pixel_type\": \"%s\",\n  \"eye\": [", sw_pixel_type_string(o->d.det.out_type));
    for (int e = 0; e < t->n_eyes; e++) {
        const sw_eye_truth *q = &t->eye[e];
        const sw_refraction rx = eye_true_rx(q);
        printf("%s\n    {\"cx_px\": %.17g, \"cy_px\": %.17g, \"a_px\": %.17g, \"b_px\": %.17g, "
               "\"angle_deg\": %.17g, \"rms_um\": %.17g, \"defocus_um\": %.17g, "
               "\"lenslets_lit\": %lld, \"reflection_x_px\": ",
               e ? "," : "", q->cx_px, q->cy_px, q->a_px, q->b_px, q->angle_deg,
               q->count > 0 ? sw_zernike_rms(q->coef_um, q->count, 3) : 0.0,
               q->count > 4 ? q->coef_um[4] : 0.0,
               (long long)lit_lenslets(&q->sh, o->sh.min_illum));
        json_number(q->reflection_x_px);
        printf(", \"reflection_y_px\": ");
        json_number(q->reflection_y_px);
        printf(", \"magnification\": ");
        json_number(eye_magnification(o, q));
        printf(", \"refraction\": {\"sphere_d\": ");
        json_number(rx.sphere_d);
        printf(", \"cyl_d\": ");
        json_number(rx.cyl_d);
        printf(", \"axis_deg\": ");
        json_number(rx.axis_deg);
        printf(", \"M\": ");
        json_number(rx.M);
        printf(", \"J0\": ");
        json_number(rx.J0);
        printf(", \"J45\": ");
        json_number(rx.J45);
        printf("}}");
    }
    printf("\n  ],\n  \"render_ms\": %.6f,\n  \"detector_ms\": %.6f,\n  \"write_ms\": %.6f,\n",
           r->render_ms, r->detector_ms, r->write_ms);
    printf("  \"out\": ");
    sw_json_write_string(stdout, o->out);
    printf(",\n  \"truth\": ");
    sw_json_write_string(stdout, o->truth);
    printf(",\n  \"reference\": ");
    sw_json_write_string(stdout, o->reference);
    printf("\n}\n");
}

static int cmd_eye(const sw_cli_globals *g, int argc, char **argv)
{
    eye_opts o;
    memset(&o, 0, sizeof o);
    sh_opts_init(&o.sh, EYE_DEF_WAVELENGTH, EYE_DEF_FLUX);
    o.pupil_mm = EYE_DEF_PUPIL_MM;
    o.max_order = -1;
    sw_eye_artefacts_default(&o.art);
    o.seed = DEF_SEED;
    det_opts_init(&o.d, SW_PIX_U8);
    int rc = parse_eye_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    eye_report r;
    memset(&r, 0, sizeof r);
    rc = run_eye(g, &o, &r);
    if (rc == SW_EXIT_OK)
        print_eye(&o, &r);
    sw_eyesim_truth_free(&r.truth);
    return rc;
}

int sw_cmd_sim(const sw_cli_globals *g, int argc, char **argv)
{
    if (argc < 2)
        return sw_cli_usage(SUB, "which simulation? (stars, sh, eye)");
    const char *what = argv[1];
    if (strcmp(what, "-h") == 0 || strcmp(what, "--help") == 0) {
        sw_cmd_sim_help(stdout);
        return SW_EXIT_OK;
    }
    if (strcmp(what, "stars") == 0)
        return cmd_stars(g, argc - 1, argv + 1);
    if (strcmp(what, "sh") == 0)
        return cmd_sh(g, argc - 1, argv + 1);
    if (strcmp(what, "eye") == 0)
        return cmd_eye(g, argc - 1, argv + 1);
    if (what[0] == '-')
        return sw_cli_usage(SUB, "'%s': name the simulation first (stars, sh, eye)", what);
    return sw_cli_usage(SUB, "unknown simulation '%s' (available: stars, sh, eye)", what);
}
