/*
 * spotwave sim stars: a star field (Li et al. 2012: magnitudes by Eq. 1, the Gaussian PSF of Eq. 2
 * over each star's ROI, Eq. 3), the detector model, the image and the truth table.
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

#define SUB_STARS "sim stars"

#define DEF_SIZE       1024
#define DEF_SIGMA      1.0
#define DEF_ZERO_POINT 1e6
#define DEF_MAG_MIN    0.0
#define DEF_MAG_MAX    15.0

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
        "  -o, --out IMAGE        .fits or .tif/.tiff (any --bits), .pgm or .h5 (Eiger-like\n"
        "                         NeXus; 8 or 16 bits), .cbf (Pilatus-like mini-CBF, signed\n"
        "                         32-bit byte-offset; integer --bits)\n"
        "  --truth CSV            x_px,y_px,flux_e,mag of the stars whose centre is on the\n"
        "                         image (mag is nan for stars given by flux only)\n"
        "  --json                 print the report as JSON\n"
        "  -h, --help             print this help and exit\n",
        DEF_SIZE, DEF_SIZE, DEF_SIGMA, DEF_ZERO_POINT, DEF_MAG_MIN, DEF_MAG_MAX, DEF_SEED,
        sim_detector_help(16));
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
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "sim stars");
    sw_cli_json_string(j, "source", r->source);
    sw_cli_json_int(j, "stars", r->stars);
    sw_cli_json_int(j, "rendered", r->rendered);
    sw_cli_json_int(j, "skipped", r->stars - r->rendered);
    sw_cli_json_int(j, "width", o->width);
    sw_cli_json_int(j, "height", o->height);
    sw_cli_json_double(j, "sigma_px", o->sigma);
    sw_cli_json_int(j, "roi_side_px", o->roi_side);
    sw_cli_json_string(j, "psf", o->psf == SW_PSF_INTEGRATED ? "integrated" : "sampled");
    sw_cli_json_string(j, "method", sw_starsim_method_string(r->method));
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_u64(j, "seed", o->seed);
    cJSON_AddBoolToObject(j, "shot_noise", o->d.det.shot_noise);
    sw_cli_json_double(j, "read_noise_e", o->d.det.read_noise_e);
    sw_cli_json_string(j, "pixel_type", sw_pixel_type_string(o->d.det.out_type));
    sw_cli_json_fixed(j, "stars_ms", r->load_ms, 6);
    sw_cli_json_fixed(j, "render_ms", r->render_ms, 6);
    sw_cli_json_fixed(j, "detector_ms", r->detector_ms, 6);
    sw_cli_json_fixed(j, "write_ms", r->write_ms, 6);
    sw_cli_json_string(j, "out", o->out);
    sw_cli_json_string(j, "truth", o->truth);
    if (o->truth)
        sw_cli_json_int(j, "truth_rows", r->truth_rows);
    sw_cli_json_print(j);
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
            if (sw_cli_opt_double(S, "--focal-mm", optarg, SW_CLI_POSITIVE, "a positive length",
                                  &o->cam.focal_mm) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_focal = 1;
            break;
        case OPT_PIXEL:
            if (sw_cli_opt_double(S, "--pixel-um", optarg, SW_CLI_POSITIVE, "a positive length",
                                  &o->cam.pixel_um) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_pixel = 1;
            break;
        case OPT_SIZE:
            if (sw_cli_opt_size(S, "--size", optarg, &o->width, &o->height) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_SIGMA:
            if (sw_cli_opt_double(S, "--sigma", optarg, SW_CLI_POSITIVE,
                                  "a positive number of pixels", &o->sigma) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
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
            if (sw_cli_opt_double(S, "--zero-point", optarg, SW_CLI_POSITIVE,
                                  "a positive flux in e-", &o->zero_point) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
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
            if (sw_cli_opt_u64(S, "--seed", optarg, &o->seed) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_METHOD:
            if (sw_starsim_method_parse(optarg, &o->method) != SW_OK)
                return sw_cli_usage(S,
                                    "--method: '%s' is not one of auto, sequential, openmp, "
                                    "parallel, adaptive, deterministic",
                                    optarg);
            break;
        case 'o':
            if (sw_cli_opt_file(S, "--out", optarg, &o->out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TRUTH:
            if (sw_cli_opt_file(S, "--truth", optarg, &o->truth) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sim_stars_help(stdout); return -1;
        default: {
            const int r = sim_detector_option(S, c, sw_cli_option_name(argv), optarg, &o->d);
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
    if ((rc = sim_detector_finish(S, &o->d, o->seed)) != SW_EXIT_OK)
        return rc;
    /* The output. */
    if (!o->out)
        return sw_cli_usage(S, "--out IMAGE is required");
    return sim_check_image_name(S, "--out", o->out, o->d.det.out_type);
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
    sim_image_header(h, "spotwave sim stars: a simulated star field", &o->d.det, o->seed);
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
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
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
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    if ((st = sw_image_alloc(ctx, o->width, o->height, o->d.det.out_type, &host)) != SW_OK ||
        (cuda &&
         ((st = sw_image_alloc_device(ctx, o->width, o->height, SW_PIX_F32, &d_e)) != SW_OK ||
          (st = sw_image_alloc_device(ctx, o->width, o->height, o->d.det.out_type, &d_out)) !=
              SW_OK))) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    /* On the CPU the electrons go into a host f32 image: `host` when the output is f32 (the
     * detector then works in place), a temporary otherwise. On CUDA both stay on the device. */
    sw_image h_e;
    memset(&h_e, 0, sizeof h_e);
    if (!cuda && o->d.det.out_type != SW_PIX_F32 &&
        (st = sw_image_alloc(ctx, o->width, o->height, SW_PIX_F32, &h_e)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
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
        rc = sw_cli_fail(S, "rendering: %s", sw_cli_lib_error(ctx, st));
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
        rc = sw_cli_fail(S, "detector model: %s", sw_cli_lib_error(ctx, st));
        goto done;
    }

    /* Files. */
    t0 = sw_cli_now();
    sw_cli_hdr hdr;
    stars_header(&hdr, o, r);
    const char *staged = sw_cli_file_staged("--out", o->out);
    if (!staged) {
        rc = SW_EXIT_FAIL;
        goto done;
    }
    st = sim_write_any(ctx, staged, &host, &hdr);
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    if (o->truth && !(staged = sw_cli_file_staged("--truth", o->truth))) {
        rc = SW_EXIT_FAIL;
        goto done;
    }
    if (o->truth && (st = sw_stars_write_truth(ctx, staged, &stars, o->width, o->height,
                                               &r->truth_rows)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
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

int sw_cmd_sim_stars(const sw_cli_globals *g, int argc, char **argv)
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
    sim_det_opts_init(&o.d, SW_PIX_U16);
    int rc = parse_stars_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    sw_cli_file_in("--catalog", o.catalog);
    sw_cli_file_in("--sky", o.sky);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--truth", o.truth);
    if ((rc = sw_cli_files_check()) != SW_EXIT_OK)
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
