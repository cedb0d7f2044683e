/*
 * spotwave sim sh: a Shack-Hartmann spot pattern (Mocci et al. 2020 Eq. 1-5 geometry, sim_sh.h)
 * of a Zernike wavefront, a phase screen or turbulence, with its true centroids.
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

#define SUB_SH "sim sh"

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
            "                         Waves Random Media 2(3), 209) over the array: r0 and L0 in\n"
            "                         metres at the telescope of --diameter-m (needed), r0 at W\n"
            "                         um of wavelength (defaults L0=25, wavelength=0.5,\n"
            "                         subharmonics=3). The screen is 4 times the array's width\n"
            "                         (fewer when that passes 2048 samples), so that the\n"
            "                         largest separations keep their statistics\n"
            "  --diameter-m D         the telescope's diameter in metres: the pupil (--pupil-mm,\n"
            "                         else the array's larger side) is its image, so r0 and L0\n"
            "                         are the sky's, as in `spotwave loop` (diameter_m, r0_m).\n"
            "                         The report gives the wavefront's RMS over the pupil and\n"
            "                         theory's (von Karman, piston removed; a circular pupil or\n"
            "                         a square array). r0 in the plane of the array instead:\n"
            "                         give the width the pupil spans there, in metres\n"
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
            sim_sh_opts_help("default 16x16", "default: the grid's extent", SH_DEF_WAVELENGTH,
                             SH_DEF_FLUX),
            sim_detector_help(16), DEF_SEED);
}

typedef struct simsh_opts {
    sh_opts sh;
    const char *zernike, *screen, *turbulence;
    double spacing_um, scale_um, zernike_radius_mm, diameter_m;
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
    double screen_spacing_m, theory_rms_um; /* turbulence: on the sky; over the pupil (or NaN) */
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
        OPT_DIAMETER,
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
        {"diameter-m", required_argument, NULL, OPT_DIAMETER},
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
        case OPT_DIAMETER:
        case OPT_PUPIL: {
            double v;
            if (sw_cli_opt_double(S, sw_cli_option_name(argv), optarg, SW_CLI_POSITIVE,
                                  "a positive number", &v) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            if (c == OPT_ZRADIUS)
                o->zernike_radius_mm = v;
            else if (c == OPT_SPACING)
                o->spacing_um = v, o->have_spacing = 1;
            else if (c == OPT_SCALE)
                o->scale_um = v;
            else if (c == OPT_DIAMETER)
                o->diameter_m = v;
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
            if (sw_cli_opt_u64(S, "--seed", optarg, &o->seed) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case 'o':
            if (sw_cli_opt_file(S, "--out", optarg, &o->out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_TRUTH:
        case OPT_REFERENCE:
            if (sw_cli_opt_file(S, sw_cli_option_name(argv), optarg,
                                c == OPT_TRUTH ? &o->truth : &o->reference) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o->json = 1; break;
        case 'h': sim_sh_help(stdout); return -1;
        default: {
            int r = sim_sh_option(S, c, optarg, &o->sh);
            if (r == -1)
                r = sim_detector_option(S, c, sw_cli_option_name(argv), optarg, &o->d);
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
    if (o->turbulence && !(o->diameter_m > 0))
        return sw_cli_usage(S, "--turbulence needs --diameter-m D, the telescope's diameter in "
                               "metres (r0 and L0 are the sky's; for r0 in the plane of the "
                               "array, give the width the pupil spans there, in metres)");
    if (o->diameter_m > 0 && !o->turbulence)
        return sw_cli_usage(S, "--diameter-m goes with --turbulence");
    if (o->have_spacing && !o->screen && !o->turbulence)
        return sw_cli_usage(S, "--screen-spacing-um goes with --screen or --turbulence");
    if (o->zernike_radius_mm > 0 && !o->zernike)
        return sw_cli_usage(S, "--zernike-radius-mm goes with --zernike");
    if (!(o->pupil_mm > 0) && (o->have_pupil_center || o->have_ellipse || o->obscuration > 0))
        return sw_cli_usage(S, "--pupil-center-mm, --obscuration and --ellipse need --pupil-mm");
    if (o->scale_um <= 0)
        o->scale_um = 1.0;
    if ((rc = sim_sh_resolve(S, &o->sh, 0, 0, 0)) != SW_EXIT_OK)
        return rc;
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

static void sh_image_header(sw_cli_hdr *h, const simsh_opts *o, const simsh_report *r,
                            const sw_detector *det, int reference)
{
    sim_image_header(h,
                     reference ? "spotwave sim sh: the reference frame (flat wavefront)"
                               : "spotwave sim sh: a simulated Shack-Hartmann frame",
                     det, o->seed);
    sw_cli_hdr_bool(h, "REFFRAME", reference, "the reference frame (flat wavefront)");
    sim_sh_header(h, &o->sh);
    sw_cli_hdr_str(h, "SOURCE", r->source, "the wavefront");
    if (o->zernike) {
        sw_cli_hdr_num(h, "ZRADIUS", r->radius_um, "[um] radius of the Zernike unit circle");
        sw_cli_hdr_num(h, "ZRMS", r->rms_um, "[um] RMS of the Zernike wavefront");
    }
    if (o->turbulence) {
        sw_cli_hdr_num(h, "R0", o->turb.r0_m, "[m] Fried parameter at R0WAVE");
        sw_cli_hdr_num(h, "DIAMETER", o->diameter_m, "[m] telescope diameter the pupil images");
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

/* The turbulence screen's RMS over the pupil (its samples inside the pupil and the array),
 * piston removed, into r->rms_um, and theory's, sw_turbulence_pupil_variance, into
 * r->theory_rms_um for a circular pupil inside the array (diameter --diameter-m) or, without a
 * pupil, a square array (side --diameter-m); NaN otherwise. */
static void turbulence_rms(const simsh_opts *o, const sw_pupil *pupil, double lenslet_um,
                           const sw_wavefront *w, simsh_report *r)
{
    const double hu = 0.5 * o->sh.nx * lenslet_um, hv = 0.5 * o->sh.ny * lenslet_um;
    double s1 = 0.0, s2 = 0.0, count = 0.0;
    for (int32_t k = 0; k < w->nv; k++) {
        const double v = w->v0_um + k * w->spacing_um;
        for (int32_t i = 0; i < w->nu; i++) {
            const double u = w->u0_um + i * w->spacing_um;
            if (fabs(u) < hu && fabs(v) < hv && sw_pupil_contains(pupil, u, v)) {
                const double x = w->opd_um[(size_t)k * (size_t)w->nu + (size_t)i];
                s1 += x;
                s2 += x * x;
                count += 1.0;
            }
        }
    }
    const double mean = count > 0 ? s1 / count : 0.0;
    r->rms_um = count > 0 ? sqrt(fmax(s2 / count - mean * mean, 0.0)) : NAN;
    r->theory_rms_um = NAN;
    int shape = -1; /* 0: circle, 1: square */
    if (pupil->a_um > 0) {
        if (pupil->a_um == pupil->b_um && pupil->obscuration == 0 &&
            fabs(pupil->cu_um) + pupil->a_um <= hu && fabs(pupil->cv_um) + pupil->a_um <= hv)
            shape = 0;
    } else if (o->sh.nx == o->sh.ny) {
        shape = 1;
    }
    if (shape >= 0)
        r->theory_rms_um = sqrt(sw_turbulence_pupil_variance(&o->turb, o->diameter_m, shape)) *
                           o->turb.wavelength_um / (2.0 * 3.14159265358979323846);
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
    sim_sh_params(&o->sh, &p);
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
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
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
            /* 4 times the array (an FFT screen is periodic: over a pupil of its own size its
             * piston-removed variance runs ~9 % low, turbulence.h), at most 2048 samples */
            int wide = 4;
            while (wide > 1 && wide * n > 2048)
                wide--;
            n *= wide;
            r->screen_n = (int32_t)n;
            /* made on the sky, where the pupil's image (--pupil-mm, else the array's larger
             * side) is --diameter-m across, then laid on the array: the same optical path */
            const double image_um = o->pupil_mm > 0 ? o->pupil_mm * 1e3 : ext;
            r->screen_spacing_m = spacing * o->diameter_m / image_um;
            st = sw_phase_screen(ctx, &o->turb, (int32_t)n, r->screen_spacing_m, o->seed,
                                 o->screen_index, &w);
            if (st == SW_OK) {
                w.spacing_um = spacing;
                w.u0_um = w.v0_um = -0.5 * (n - 1.0) * spacing;
                turbulence_rms(o, &p.pupil, lenslet_um, &w, r);
            }
        }
        if (st == SW_OK)
            st = sw_shsim_add_wavefront(plan, &w, 1.0);
    }
    if (st != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }

    /* Render (on CUDA into a device image, then to the host for the detector). */
    if ((st = sw_image_alloc(ctx, o->sh.width, o->sh.height, SW_PIX_F32, &e_host)) != SW_OK ||
        (cuda && (st = sw_image_alloc_device(ctx, o->sh.width, o->sh.height, SW_PIX_F32, &e_dev)) !=
                     SW_OK)) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
        goto done;
    }
    for (int pass = 0; pass < (o->reference ? 2 : 1); pass++) {
        if (pass == 1 && (st = sw_shsim_clear_opd(plan)) != SW_OK) {
            rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        double t0 = sw_cli_now();
        st = sw_shsim_run(plan, cuda ? &e_dev : &e_host, 0);
        if (st == SW_OK && cuda)
            st = sw_image_copy(ctx, &e_dev, &e_host);
        if (pass == 0)
            r->render_ms = 1e3 * (sw_cli_now() - t0);
        if (st != SW_OK) {
            rc = sw_cli_fail(S, "rendering: %s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        if (pass == 0 && (st = sw_shsim_truth(plan, &truth)) != SW_OK) {
            rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
            goto done;
        }
        /* The reference is another exposure: its own noise (sim_reference_detector). */
        sw_detector det = pass == 0 ? o->d.det : sim_reference_detector(&o->d.det);
        sw_cli_hdr hdr;
        sh_image_header(&hdr, o, r, &det, pass == 1);
        rc = sim_detect_and_write(ctx, S, &det, &e_host, pass == 0 ? o->out : o->reference, &hdr,
                                  &r->detector_ms, &r->write_ms);
        if (rc != SW_EXIT_OK)
            goto done;
    }
    r->lit = sim_lit_lenslets(&truth, sw_shsim_params_used(plan)->min_illum);
    if (r->lit == 0) {
        rc = sw_cli_fail(S,
                         "the pupil lights none of the %d lenslets (check --pupil-mm, "
                         "--pupil-center-mm and --min-illum against the grid)",
                         (int)(truth.nx * truth.ny));
        goto done;
    }
    const char *truth_path = o->truth ? sw_cli_file_staged("--truth", o->truth) : NULL;
    if (o->truth && !truth_path) {
        rc = SW_EXIT_FAIL;
        goto done;
    }
    if (o->truth && (st = sw_sh_truth_write_csv(ctx, truth_path, &truth)) != SW_OK) {
        rc = sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
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
        if (o->turbulence) {
            printf("  turbulence r0 %g m at %g um, L0 %g m, on a %g m telescope (D / r0 = %.4g); "
                   "screen %dx%d of %g m\n",
                   o->turb.r0_m, o->turb.wavelength_um, o->turb.L0_m, o->diameter_m,
                   o->diameter_m / o->turb.r0_m, (int)r->screen_n, (int)r->screen_n,
                   r->screen_spacing_m);
            printf("  wavefront  RMS %.4g um over the pupil, piston removed", r->rms_um);
            if (isfinite(r->theory_rms_um))
                printf(" (theory: %.4g um)", r->theory_rms_um);
            printf("\n");
        }
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
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "sim sh");
    sw_cli_json_string(j, "source", r->source);
    sw_cli_json_int(j, "width", o->sh.width);
    sw_cli_json_int(j, "height", o->sh.height);
    sw_cli_json_int(j, "grid_nx", o->sh.nx);
    sw_cli_json_int(j, "grid_ny", o->sh.ny);
    sw_cli_json_double(j, "pitch_px", o->sh.pitch);
    sw_cli_json_double(j, "origin_x_px", o->sh.x0);
    sw_cli_json_double(j, "origin_y_px", o->sh.y0);
    sw_cli_json_double(j, "pixel_um", o->sh.pixel_um);
    sw_cli_json_double(j, "focal_mm", o->sh.focal_mm);
    sw_cli_json_double(j, "wavelength_um", o->sh.wavelength_um);
    sw_cli_json_string(j, "model", sw_sh_model_string(o->sh.model));
    sw_cli_json_int(j, "lenslets", (int64_t)o->sh.nx * o->sh.ny);
    sw_cli_json_int(j, "lenslets_lit", r->lit);
    sw_cli_json_double(j, "zernike_radius_um", o->zernike ? r->radius_um : NAN);
    sw_cli_json_double(j, "rms_um", o->zernike || o->turbulence ? r->rms_um : NAN);
    sw_cli_json_double(j, "rms_theory_um", o->turbulence ? r->theory_rms_um : NAN);
    sw_cli_json_double(j, "diameter_m", o->turbulence ? o->diameter_m : NAN);
    sw_cli_json_double(j, "r0_m", o->turbulence ? o->turb.r0_m : NAN);
    sw_cli_json_int(j, "screen_samples", r->screen_n);
    sw_cli_json_double(j, "screen_spacing_m", o->turbulence ? r->screen_spacing_m : NAN);
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_u64(j, "seed", o->seed);
    sw_cli_json_string(j, "pixel_type", sw_pixel_type_string(o->d.det.out_type));
    sw_cli_json_fixed(j, "render_ms", r->render_ms, 6);
    sw_cli_json_fixed(j, "detector_ms", r->detector_ms, 6);
    sw_cli_json_fixed(j, "write_ms", r->write_ms, 6);
    sw_cli_json_string(j, "out", o->out);
    sw_cli_json_string(j, "truth", o->truth);
    sw_cli_json_string(j, "reference", o->reference);
    sw_cli_json_print(j);
}

int sw_cmd_sim_sh(const sw_cli_globals *g, int argc, char **argv)
{
    simsh_opts o;
    memset(&o, 0, sizeof o);
    sim_sh_opts_init(&o.sh, SH_DEF_WAVELENGTH, SH_DEF_FLUX);
    sw_turbulence_default(&o.turb);
    o.seed = DEF_SEED;
    sim_det_opts_init(&o.d, SW_PIX_U16);
    int rc = parse_sh_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    sw_cli_file_in("--zernike", o.zernike);
    sw_cli_file_in("--screen", o.screen);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--truth", o.truth);
    sw_cli_file_out("--reference", o.reference);
    if ((rc = sw_cli_files_check()) != SW_EXIT_OK)
        return rc;
    simsh_report r;
    memset(&r, 0, sizeof r);
    if ((rc = run_sh(g, &o, &r)) != SW_EXIT_OK)
        return rc;
    print_sh(&o, &r);
    return SW_EXIT_OK;
}
