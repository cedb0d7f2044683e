/*
 * spotwave fit: Shack-Hartmann slopes -> Zernike coefficients by least squares over the lenslets
 * of a pupil (Mompean et al. 2019 Sec. 3.3: the derivative matrix of the Zernike polynomials,
 * solved through its pseudo-inverse or a QR factorisation; zernike_fit.h), with the wavefront map
 * of section 3.4 (sw_zmap_*, and its modulo-one display), the pupil rescaled (sw_zernike_rescale),
 * a left eye mirrored into the right-eye frame (sw_zernike_mirror_x) and the refraction of
 * Thibos et al. 2004 (sw_zernike_refraction).
 */
#define _GNU_SOURCE

#include "cli.h"
#include "json.h"
#include "outfiles.h"

#include <errno.h>
#include <getopt.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define SUB "fit"

#define DEF_PIXEL_UM  5.5
#define DEF_FOCAL_MM  3.5
#define DEF_ORDER     6
#define MAX_ORDER     10
#define DEF_MAP_SIZE  256
#define MAX_MAP_SIZE  8192
#define DEF_MIN_ILLUM 0.5
#define MAX_BATCH     64 /* frames per library run */
#define MAX_TEXT_ROWS 10 /* frames listed in the text report */

void sw_cmd_fit_help(FILE *out)
{
    fprintf(
        out,
        "Usage: spotwave [GLOBAL OPTIONS] fit SLOPES.csv --pitch PX [OPTIONS]\n"
        "\n"
        "Fits Zernike polynomials (OSA/ANSI, orthonormal over the pupil, micrometres of optical\n"
        "path) to Shack-Hartmann spot displacements by least squares: each lenslet's slope is the\n"
        "mean wavefront gradient over its part of the pupil (Mompean, Aragon, Prieto & Artal\n"
        "2019, Future Gener. Comput. Syst. 91, 177, Sec. 3.3; zernike_fit.h), and writes the\n"
        "coefficients, optionally the wavefront map (Sec. 3.4) and a JSON report with the\n"
        "refraction (power vectors of Thibos, Hong, Bradley & Applegate 2004, J. Vision 4(4),\n"
        "329: from the second-order terms alone unless --higher-order-rx).\n"
        "\n"
        "Input:\n"
        "  SLOPES.csv             a slopes CSV of 'spotwave centroid --slopes' "
        "(ix,iy,dx_px,dy_px)\n"
        "                         or a centroids CSV of 'spotwave centroid --reference' (its\n"
        "                         dx_px,dy_px and valid columns are used). A column 'frame'\n"
        "                         holds several frames (whole numbers; each is fitted on its\n"
        "                         own). A lenslet is invalid in a frame when its dx_px or dy_px\n"
        "                         is nan or its valid is 0; it is left out of that frame's fit.\n"
        "                         Lenslets the table does not list, or that are invalid in every\n"
        "                         frame, are outside the fit's mask. Rows naming a lenslet\n"
        "                         outside the grid, or one lenslet twice in a frame, are errors.\n"
        "\n"
        "Lenslet grid (as 'spotwave centroid'; geometry.h):\n"
        "  --pitch PX             lenslet pitch in pixels, may be fractional (required)\n"
        "  --grid NXxNY           lenslets across and down (default: the largest ix + 1 by the\n"
        "                         largest iy + 1 of the table; give it when lenslets at the\n"
        "                         grid's far edges are missing from the table)\n"
        "  --origin X0,Y0         corner pixel of lenslet (0,0) (default 0,0; it matters only\n"
        "                         with --pupil-center, which is in the same detector pixels)\n"
        "  --pixel-um P           detector pixel pitch, micrometres (default %g)\n"
        "  --focal-mm F           lenslet focal length, millimetres (default %g)\n"
        "\n"
        "Pupil (at the lenslet array, which images 1:1 onto the detector):\n"
        "  --pupil-mm D           pupil diameter, mm: radius D * 1000 / 2 / pixel-um pixels\n"
        "  --pupil-px R           pupil radius, pixels (instead of --pupil-mm)\n"
        "                         (default: the circle inscribed in the grid, radius\n"
        "                         pitch * min(NX, NY) / 2)\n"
        "  --pupil-center X,Y     pupil centre, pixels (default: the centre of the grid's\n"
        "                         reference positions, X0 - 0.5 + pitch * NX / 2, likewise Y;\n"
        "                         where 'spotwave sim sh' centres its pupil)\n"
        "  --obscuration F        central obscuration, fraction of the diameter, 0 <= F < 1\n"
        "\n"
        "Fit:\n"
        "  --order N              radial orders 1..N, N in 1..%d (default %d)\n"
        "  --method pinv|qr       pinv: precomputed pseudo-inverse (SVD; Mompean et al.'s\n"
        "                         choice, default); qr: least squares through a QR factorisation\n"
        "  --truncate K           pinv: drop the K smallest singular values (default 0)\n"
        "  --min-illum F          lenslets with less than this fraction of their area inside\n"
        "                         the pupil are not used (0..1, default %g)\n"
        "\n"
        "Reporting:\n"
        "  --rescale-mm D         report the coefficients (CSV, JSON, map, refraction) over a\n"
        "                         concentric smaller pupil of diameter D mm (at most the fitted\n"
        "                         pupil's diameter)\n"
        "  --eye left|right       right (default): the coefficients as measured, x along the\n"
        "                         detector's +x; left: mirrored about the vertical axis (x -> -x,\n"
        "                         the OSA convention) into the right-eye frame, so that a left\n"
        "                         eye that mirrors a right eye gives its coefficients; the map\n"
        "                         and refraction are of the mirrored coefficients\n"
        "  --vertex-mm V          refraction at a spectacle plane V mm in front of the corneal\n"
        "                         plane (default 0: at the corneal plane)\n"
        "  --higher-order-rx      refraction with the 4th and 6th order terms too (Thibos et\n"
        "                         al. 2004, the Seidel terms to order 6), as 'spotwave\n"
        "                         aberrometry' always reports it (default: the second-order\n"
        "                         terms c(2,-2), c(2,0), c(2,2) alone)\n"
        "\n"
        "Output:\n"
        "  -o, --out CSV          coefficients (default '-': standard output): "
        "j,n,m,noll,coef_um,\n"
        "                         every term 0 .. J - 1 of order N (piston is invisible to slopes\n"
        "                         and written 0), a first column 'frame' with several frames;\n"
        "                         nan for a frame left with fewer valid slopes than unknowns\n"
        "  --index ansi|noll      ansi (default): rows by the OSA/ANSI index j, columns\n"
        "                         j,n,m,noll,coef_um; noll: rows by the Noll index, columns\n"
        "                         noll,n,m,j,coef_um\n"
        "  --map FILE             the wavefront map over the pupil's bounding square (nan/\n"
        "                         transparent outside the pupil), micrometres: .fits (float;\n"
        "                         a cube with one plane per frame) or .png (a diverging colour\n"
        "                         scale with a bar; with several frames one file per frame,\n"
        "                         BASE-F.png for frame F)\n"
        "  --map-size N           map side in pixels, 1..%d (default %d)\n"
        "  --wrap-um W            also write Mompean et al.'s display of the map (Sec. 3.4):\n"
        "                         frac(W(x, y) / W) scaled to 0..255, a grey PNG named\n"
        "                         BASE-wrapped.png (BASE-F-wrapped.png per frame with several),\n"
        "                         BASE being FILE without its extension; needs --map\n"
        "  --json                 print a JSON report on standard output (needs --out FILE): per\n"
        "                         frame the coefficients (OSA order), RMS without piston and\n"
        "                         tilt, RMS of orders >= 3, fit residual (px), lenslets used,\n"
        "                         and the refraction (M, J0, J45, sphere, cyl, axis)\n"
        "  -h, --help             print this help and exit\n"
        "\n"
        "Exit codes: 0 success; 1 a failure while running (unreadable table, lenslets outside the\n"
        "grid, more terms than the lenslets in the pupil can determine, ...); 2 a usage error.\n"
        "\n"
        "Example:\n"
        "  spotwave centroid frame.fits --pitch 21.5 --reference ref.fits --slopes s.csv\n"
        "  spotwave fit s.csv --pitch 21.5 --grid 11x9 --pupil-mm 1.2 --order 4 --out z.csv "
        "--json\n",
        DEF_PIXEL_UM, DEF_FOCAL_MM, MAX_ORDER, DEF_ORDER, DEF_MIN_ILLUM, MAX_MAP_SIZE,
        DEF_MAP_SIZE);
}

/* ------------------------------------------------------------------ parsing */

typedef struct fit_opts {
    const char *input, *out, *map;
    int have_grid, have_pitch, have_origin;
    int32_t nx, ny;
    double pitch, x0, y0, pixel_um, focal_mm;
    int have_pupil_mm, have_pupil_px, have_center;
    double pupil_mm, pupil_px, cx, cy, obscuration;
    long order, truncate, map_size;
    int have_truncate;
    sw_zfit_method method;
    double min_illum;
    int index_noll, map_fits;
    int have_wrap;
    double wrap_um;
    int eye_left, have_eye;
    int json, higher_rx;
    double vertex_mm;
    int have_rescale;
    double rescale_mm;
} fit_opts;

static int parse_options(int argc, char **argv, fit_opts *o)
{
    enum {
        OPT_GRID = 256,
        OPT_PITCH,
        OPT_ORIGIN,
        OPT_PIXEL,
        OPT_FOCAL,
        OPT_PUPIL_MM,
        OPT_PUPIL_PX,
        OPT_CENTER,
        OPT_OBSCURATION,
        OPT_ORDER,
        OPT_METHOD,
        OPT_TRUNCATE,
        OPT_MIN_ILLUM,
        OPT_INDEX,
        OPT_MAP,
        OPT_MAP_SIZE,
        OPT_WRAP,
        OPT_EYE,
        OPT_JSON,
        OPT_VERTEX,
        OPT_HIGHER,
        OPT_RESCALE
    };
    static const struct option longopts[] = {
        {"grid", required_argument, NULL, OPT_GRID},
        {"pitch", required_argument, NULL, OPT_PITCH},
        {"origin", required_argument, NULL, OPT_ORIGIN},
        {"pixel-um", required_argument, NULL, OPT_PIXEL},
        {"focal-mm", required_argument, NULL, OPT_FOCAL},
        {"pupil-mm", required_argument, NULL, OPT_PUPIL_MM},
        {"pupil-px", required_argument, NULL, OPT_PUPIL_PX},
        {"pupil-center", required_argument, NULL, OPT_CENTER},
        {"obscuration", required_argument, NULL, OPT_OBSCURATION},
        {"order", required_argument, NULL, OPT_ORDER},
        {"method", required_argument, NULL, OPT_METHOD},
        {"truncate", required_argument, NULL, OPT_TRUNCATE},
        {"min-illum", required_argument, NULL, OPT_MIN_ILLUM},
        {"out", required_argument, NULL, 'o'},
        {"index", required_argument, NULL, OPT_INDEX},
        {"map", required_argument, NULL, OPT_MAP},
        {"map-size", required_argument, NULL, OPT_MAP_SIZE},
        {"wrap-um", required_argument, NULL, OPT_WRAP},
        {"eye", required_argument, NULL, OPT_EYE},
        {"json", no_argument, NULL, OPT_JSON},
        {"vertex-mm", required_argument, NULL, OPT_VERTEX},
        {"higher-order-rx", no_argument, NULL, OPT_HIGHER},
        {"rescale-mm", required_argument, NULL, OPT_RESCALE},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *S = SUB;
    int c;
    double v;
    sw_cli_getopt_reset();
    while ((c = sw_cli_getopt(S, argc, argv, "o:h", longopts)) != -1) {
        switch (c) {
        case OPT_GRID:
            if (sw_cli_opt_grid(S, "--grid", optarg, &o->nx, &o->ny) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_grid = 1;
            break;
        case OPT_PITCH:
            if (sw_cli_opt_double(S, "--pitch", optarg, SW_CLI_POSITIVE,
                                  "a positive number of pixels", &o->pitch) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_pitch = 1;
            break;
        case OPT_ORIGIN:
            if (sw_cli_opt_pair(S, "--origin", optarg, "X0,Y0 in pixels", &o->x0, &o->y0) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_origin = 1;
            break;
        case OPT_CENTER:
            if (sw_cli_opt_pair(S, "--pupil-center", optarg, "X,Y in pixels", &o->cx, &o->cy) !=
                SW_EXIT_OK)
                return SW_EXIT_USAGE;
            o->have_center = 1;
            break;
        case OPT_PIXEL:
        case OPT_FOCAL:
        case OPT_PUPIL_MM:
        case OPT_PUPIL_PX:
        case OPT_WRAP:
        case OPT_RESCALE:
            if (sw_cli_parse_double(optarg, &v) != 0 || !(v > 0))
                return sw_cli_usage(S, "%s: '%s' is not a positive %s", sw_cli_option_name(argv),
                                    optarg, c == OPT_PUPIL_PX ? "number of pixels" : "length");
            if (c == OPT_PIXEL)
                o->pixel_um = v;
            else if (c == OPT_FOCAL)
                o->focal_mm = v;
            else if (c == OPT_PUPIL_MM)
                o->pupil_mm = v, o->have_pupil_mm = 1;
            else if (c == OPT_PUPIL_PX)
                o->pupil_px = v, o->have_pupil_px = 1;
            else if (c == OPT_WRAP)
                o->wrap_um = v, o->have_wrap = 1;
            else
                o->rescale_mm = v, o->have_rescale = 1;
            break;
        case OPT_OBSCURATION:
            if (sw_cli_parse_double(optarg, &o->obscuration) != 0 || o->obscuration < 0 ||
                o->obscuration >= 1)
                return sw_cli_usage(S, "--obscuration: '%s' is not a fraction in [0, 1)", optarg);
            break;
        case OPT_ORDER:
            if (sw_cli_parse_long(optarg, 1, MAX_ORDER, &o->order) != 0)
                return sw_cli_usage(S, "--order: '%s' is not a radial order in 1..%d", optarg,
                                    MAX_ORDER);
            break;
        case OPT_METHOD:
            if (strcmp(optarg, "pinv") == 0)
                o->method = SW_ZFIT_PINV;
            else if (strcmp(optarg, "qr") == 0)
                o->method = SW_ZFIT_QR;
            else
                return sw_cli_usage(S, "--method: '%s' is not pinv or qr", optarg);
            break;
        case OPT_TRUNCATE:
            if (sw_cli_parse_long(optarg, 0, 65536, &o->truncate) != 0)
                return sw_cli_usage(S, "--truncate: '%s' is not a whole number >= 0", optarg);
            o->have_truncate = 1;
            break;
        case OPT_MIN_ILLUM:
            if (sw_cli_parse_double(optarg, &o->min_illum) != 0 || o->min_illum < 0 ||
                o->min_illum > 1)
                return sw_cli_usage(S, "--min-illum: '%s' is not a fraction in [0, 1]", optarg);
            break;
        case OPT_INDEX:
            if (strcmp(optarg, "ansi") == 0 || strcmp(optarg, "osa") == 0)
                o->index_noll = 0;
            else if (strcmp(optarg, "noll") == 0)
                o->index_noll = 1;
            else
                return sw_cli_usage(S, "--index: '%s' is not ansi or noll", optarg);
            break;
        case OPT_MAP_SIZE:
            if (sw_cli_parse_long(optarg, 1, MAX_MAP_SIZE, &o->map_size) != 0)
                return sw_cli_usage(S, "--map-size: '%s' is not a whole number of pixels in 1..%d",
                                    optarg, MAX_MAP_SIZE);
            break;
        case OPT_EYE:
            if (strcmp(optarg, "left") == 0)
                o->eye_left = 1;
            else if (strcmp(optarg, "right") == 0)
                o->eye_left = 0;
            else
                return sw_cli_usage(S, "--eye: '%s' is not left or right", optarg);
            o->have_eye = 1;
            break;
        case OPT_VERTEX:
            if (sw_cli_opt_double(S, "--vertex-mm", optarg, SW_CLI_NONNEG, "a distance >= 0",
                                  &o->vertex_mm) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_MAP:
        case 'o':
            if (sw_cli_opt_file(S, sw_cli_option_name(argv), optarg,
                                c == OPT_MAP ? &o->map : &o->out) != SW_EXIT_OK)
                return SW_EXIT_USAGE;
            break;
        case OPT_JSON: o->json = 1; break;
        case OPT_HIGHER: o->higher_rx = 1; break;
        case 'h': sw_cmd_fit_help(stdout); return -1;
        default: return SW_EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return sw_cli_usage(S, "no SLOPES.csv given");
    o->input = argv[optind];
    if (optind + 1 < argc)
        return sw_cli_usage(S,
                            "unexpected argument '%s' (one table; a 'frame' column holds "
                            "several frames)",
                            argv[optind + 1]);
    if (!o->have_pitch)
        return sw_cli_usage(S, "give the lenslet grid: --pitch PX (with --grid and --origin)");
    if (o->have_pupil_mm && o->have_pupil_px)
        return sw_cli_usage(S, "give --pupil-mm or --pupil-px, not both");
    if (o->have_truncate && o->method != SW_ZFIT_PINV)
        return sw_cli_usage(S, "--truncate applies to --method pinv only");
    if (o->map) {
        if (sw_cli_ends_with(o->map, ".fits") || sw_cli_ends_with(o->map, ".fit"))
            o->map_fits = 1;
        else if (!sw_cli_ends_with(o->map, ".png"))
            return sw_cli_usage(S, "--map: '%s' does not end in .fits or .png", o->map);
    }
    if (o->have_wrap && !o->map)
        return sw_cli_usage(S, "--wrap-um writes a display of the map: give --map FILE");
    if (o->json && (!o->out || strcmp(o->out, "-") == 0))
        return sw_cli_usage(S, "--json prints the report on standard output: give --out FILE "
                               "for the coefficients");
    if (o->map && o->out && strcmp(o->map, o->out) == 0)
        return sw_cli_usage(S, "--map and --out name the same file");
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ files */

/* ------------------------------------------------------------------ the slopes table */

/* The table's slopes by frame and lenslet. */
typedef struct slopes_in {
    int32_t frames;    /* distinct values of the 'frame' column (1 without one)        */
    int64_t *label;    /* frames: the frame numbers, increasing                          */
    int32_t nx, ny;    /* the largest ix + 1 and iy + 1 of the table                     */
    int64_t rows;      /* data rows                                                      */
    uint8_t *listed;   /* frames * nl: the lenslet has a row in the frame (nl once read) */
    uint8_t *valid;    /* frames * nl: finite slopes and valid != 0                      */
    float *dx, *dy;    /* frames * nl slopes, pixels (0 where not valid)                 */
    double *fcol;      /* the frame of each row (a copy), NULL without a 'frame' column  */
    double *ix, *iy;   /* copies of the lenslet columns                                  */
    double *cdx, *cdy; /* copies of the slope columns                                    */
    double *cvalid;    /* copy of the 'valid' column, or NULL                            */
} slopes_in;

static void slopes_free(slopes_in *s)
{
    free(s->label);
    free(s->listed);
    free(s->valid);
    free(s->dx);
    free(s->dy);
    free(s->fcol);
    free(s->ix);
    free(s->iy);
    free(s->cdx);
    free(s->cdy);
    free(s->cvalid);
    memset(s, 0, sizeof *s);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double *copy_column(const sw_table *t, int32_t c)
{
    double *a = malloc(sizeof(double) * (size_t)(t->nrows > 0 ? t->nrows : 1));
    if (a && c >= 0)
        memcpy(a, t->cols[c], sizeof(double) * (size_t)t->nrows);
    return a;
}

/* Reads the table's columns (ix, iy, dx_px, dy_px; frame and valid when present), checks the
 * cells that do not depend on the grid, and finds the frames and the table's grid extent. */
static int read_table(sw_context *ctx, const char *path, slopes_in *s)
{
    memset(s, 0, sizeof *s);
    sw_table t;
    sw_status st = sw_csv_read(ctx, path, &t);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
    static const char *const need[4] = {"ix", "iy", "dx_px", "dy_px"};
    int32_t col[4];
    int rc = SW_EXIT_OK;
    for (int i = 0; i < 4 && rc == SW_EXIT_OK; i++) {
        col[i] = sw_table_column(&t, need[i]);
        if (col[i] < 0)
            rc = sw_cli_fail(SUB,
                             "slopes table '%s' has no column '%s' (give the slopes of "
                             "'spotwave centroid --slopes', or its centroids with --reference)",
                             path, need[i]);
    }
    if (rc == SW_EXIT_OK && t.nrows == 0)
        rc = sw_cli_fail(SUB, "slopes table '%s' has no rows", path);
    if (rc != SW_EXIT_OK) {
        sw_table_free(&t);
        return rc;
    }
    const int32_t cframe = sw_table_column(&t, "frame"), cvalid = sw_table_column(&t, "valid");
    s->rows = t.nrows;
    s->ix = copy_column(&t, col[0]);
    s->iy = copy_column(&t, col[1]);
    s->cdx = copy_column(&t, col[2]);
    s->cdy = copy_column(&t, col[3]);
    s->fcol = cframe >= 0 ? copy_column(&t, cframe) : NULL;
    s->cvalid = cvalid >= 0 ? copy_column(&t, cvalid) : NULL;
    sw_table_free(&t);
    if (!s->ix || !s->iy || !s->cdx || !s->cdy || (cframe >= 0 && !s->fcol) ||
        (cvalid >= 0 && !s->cvalid))
        return sw_cli_fail(SUB, "out of memory");

    /* Cells: whole lenslet indices >= 0, whole frame numbers >= 0, valid 0/1, no infinities. */
    double max_ix = 0, max_iy = 0;
    for (int64_t r = 0; r < s->rows; r++) {
        const double fx = s->ix[r], fy = s->iy[r];
        if (!(fx == floor(fx)) || !(fy == floor(fy)) || fx < 0 || fy < 0 || fx >= 65536 ||
            fy >= 65536)
            return sw_cli_fail(SUB,
                               "slopes table '%s', data row %lld: lenslet (%g,%g) is not a "
                               "pair of whole numbers in 0..65535",
                               path, (long long)r + 1, fx, fy);
        max_ix = fx > max_ix ? fx : max_ix;
        max_iy = fy > max_iy ? fy : max_iy;
        if (s->fcol) {
            const double f = s->fcol[r];
            if (!(f == floor(f)) || f < 0 || f > 2147483647.0)
                return sw_cli_fail(SUB,
                                   "slopes table '%s', data row %lld: frame %g is not a whole "
                                   "number >= 0",
                                   path, (long long)r + 1, f);
        }
        if (s->cvalid && s->cvalid[r] != 0.0 && s->cvalid[r] != 1.0)
            return sw_cli_fail(SUB, "slopes table '%s', data row %lld: valid = %g (0 or 1)", path,
                               (long long)r + 1, s->cvalid[r]);
        /* (slopes are kept as floats: beyond FLT_MAX they would become infinite) */
        if (fabs(s->cdx[r]) > FLT_MAX || fabs(s->cdy[r]) > FLT_MAX)
            return sw_cli_fail(SUB,
                               "slopes table '%s', data row %lld: an infinite or out-of-range "
                               "slope (nan marks an invalid lenslet)",
                               path, (long long)r + 1);
    }
    s->nx = (int32_t)max_ix + 1;
    s->ny = (int32_t)max_iy + 1;

    /* The frames: the distinct values of the 'frame' column, in increasing order. */
    s->frames = 1;
    s->label = malloc(sizeof(int64_t) * (size_t)(s->fcol ? s->rows : 1));
    if (!s->label)
        return sw_cli_fail(SUB, "out of memory");
    s->label[0] = 0;
    if (s->fcol) {
        double *v = malloc(sizeof(double) * (size_t)s->rows);
        if (!v)
            return sw_cli_fail(SUB, "out of memory");
        memcpy(v, s->fcol, sizeof(double) * (size_t)s->rows);
        qsort(v, (size_t)s->rows, sizeof(double), cmp_double);
        int64_t n = 0;
        for (int64_t r = 0; r < s->rows; r++)
            if (r == 0 || v[r] != v[r - 1])
                s->label[n++] = (int64_t)v[r];
        free(v);
        if (n > 1000000)
            return sw_cli_fail(SUB, "slopes table '%s' holds %lld frames (at most 1000000)", path,
                               (long long)n);
        s->frames = (int32_t)n;
    }
    return SW_EXIT_OK;
}

/* Index of frame number f among the labels (present by construction). */
static int32_t frame_index(const slopes_in *s, double f)
{
    int32_t lo = 0, hi = s->frames - 1;
    const int64_t want = (int64_t)f;
    while (lo < hi) {
        const int32_t mid = lo + (hi - lo) / 2;
        if (s->label[mid] < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Places the rows on the nx x ny grid: per frame and lenslet, listed / valid / slopes. */
static int place_rows(sw_context *ctx, const char *path, int32_t nx, int32_t ny, slopes_in *s)
{
    const size_t nl = (size_t)nx * (size_t)ny, total = (size_t)s->frames * nl;
    /* listed, valid, dx, dy: 10 bytes per frame and lenslet, whatever few rows the table has */
    const size_t per = 2 + 2 * sizeof(float);
    if (sw_memory_check(ctx, (uint64_t)total, per,
                        "slopes table '%s': %d frame%s x %lld lenslets (a %dx%d grid)", path,
                        (int)s->frames, s->frames == 1 ? "" : "s", (long long)nl, (int)nx,
                        (int)ny) != SW_OK)
        return sw_cli_fail(SUB, "%s", sw_context_error(ctx));
    s->listed = calloc(total, 1);
    s->valid = calloc(total, 1);
    s->dx = calloc(total, sizeof(float));
    s->dy = calloc(total, sizeof(float));
    if (!s->listed || !s->valid || !s->dx || !s->dy)
        return sw_cli_fail(SUB, "out of memory (%lld frames of %lld lenslets)",
                           (long long)s->frames, (long long)nl);
    for (int64_t r = 0; r < s->rows; r++) {
        const int64_t ix = (int64_t)s->ix[r], iy = (int64_t)s->iy[r];
        if (ix >= nx || iy >= ny)
            return sw_cli_fail(SUB,
                               "slopes table '%s', data row %lld: lenslet (%lld,%lld) is not in "
                               "the %dx%d grid",
                               path, (long long)r + 1, (long long)ix, (long long)iy, (int)nx,
                               (int)ny);
        const int32_t f = s->fcol ? frame_index(s, s->fcol[r]) : 0;
        const size_t i = (size_t)f * nl + (size_t)(iy * nx + ix);
        if (s->listed[i])
            return sw_cli_fail(SUB,
                               "slopes table '%s', data row %lld: lenslet (%lld,%lld) is listed "
                               "twice%s",
                               path, (long long)r + 1, (long long)ix, (long long)iy,
                               s->fcol ? " in one frame"
                                       : " (a 'frame' column holds several frames)");
        s->listed[i] = 1;
        const int ok =
            (!s->cvalid || s->cvalid[r] != 0.0) && !isnan(s->cdx[r]) && !isnan(s->cdy[r]);
        s->valid[i] = (uint8_t)ok;
        s->dx[i] = ok ? (float)s->cdx[r] : 0.0f;
        s->dy[i] = ok ? (float)s->cdy[r] : 0.0f;
    }
    return SW_EXIT_OK;
}

/* ------------------------------------------------------------------ the run */

typedef struct report {
    int32_t frames, nx, ny;
    int64_t rows;
    double pitch, x0, y0, pixel_um, focal_mm;
    double cx, cy, radius_px, pupil_mm, report_mm;
    int32_t terms, nslopes, used, listed;
    int64_t *label;    /* frames                                      */
    double *coef;      /* frames * terms, as reported (rescaled, mirrored) */
    double *residual;  /* frames, pixels                             */
    int32_t *used_f;   /* frames: used lenslets valid in the frame  */
    sw_refraction *rx; /* frames (NaN when not available)           */
    int32_t failed;    /* frames with NaN coefficients              */
    sw_backend backend;
    double read_ms, plan_ms, run_ms, map_ms, write_ms;
    char map_first[4096]; /* the first map file written (for the report) */
    char wrap_first[4096];
    int32_t maps_written;
} report;

static void report_free(report *r)
{
    free(r->label);
    free(r->coef);
    free(r->residual);
    free(r->used_f);
    free(r->rx);
}

/* The name of a map file: BASE[-F][-wrapped].EXT, BASE being --map without its extension. */
static int map_name(const char *map, int multi, int64_t label, int wrapped, char *buf, size_t size)
{
    const char *dot = strrchr(map, '.');
    const char *slash = strrchr(map, '/');
    size_t base = (dot && (!slash || dot > slash)) ? (size_t)(dot - map) : strlen(map);
    const char *ext = wrapped ? ".png" : map + base;
    char frame[32] = "";
    if (multi)
        snprintf(frame, sizeof frame, "-%lld", (long long)label);
    const int n =
        snprintf(buf, size, "%.*s%s%s%s", (int)base, map, frame, wrapped ? "-wrapped" : "", ext);
    return n >= 0 && (size_t)n < size ? 0 : -1;
}

static void fill_nan(sw_image *img)
{
    for (int32_t y = 0; y < img->height; y++) {
        float *row = sw_image_row(img, y);
        for (int32_t x = 0; x < img->width; x++)
            row[x] = NAN;
    }
}

static int all_finite(const double *c, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(c[i]))
            return 0;
    return 1;
}

/* The keys of the FITS map: micrometres over the reported pupil, a plane per frame. */
static void map_header(sw_cli_hdr *h, const fit_opts *o, const report *r, int32_t size)
{
    sw_cli_hdr_init(h, "um", "wavefront; NaN outside the pupil");
    sw_cli_hdr_comment(h, "spotwave fit: the wavefront of the Zernike fit, a plane per frame");
    sw_cli_hdr_command(h);
    sw_cli_hdr_wcs_linear(h, "PUPILX", "PUPILY", "mm", 0.5 * (size + 1), 0.5 * (size + 1), 0.0, 0.0,
                          r->report_mm / size, r->report_mm / size);
    sw_cli_hdr_num(h, "PUPIL", r->report_mm, "[mm] pupil diameter the map spans");
    sw_cli_hdr_int(h, "ORDER", o->order, "highest radial order fitted");
    sw_cli_hdr_int(h, "TERMS", r->terms, "Zernike terms");
    sw_cli_hdr_num(h, "OBSCUR", o->obscuration, "central obscuration, fraction of the pupil");
    sw_cli_hdr_int(h, "FRAME1", r->label[0], "table frame of plane 1");
    if (r->frames > 1)
        sw_cli_hdr_int(h, "FRAMEN", r->label[r->frames - 1], "table frame of the last plane");
}

/* The wavefront maps of every frame (Mompean et al. 2019 Sec. 3.4) and their modulo-one displays.
 */
static int write_maps(sw_context *ctx, const fit_opts *o, report *r)
{
    sw_zmap_params mp;
    sw_zmap_params_default(&mp);
    mp.size = (int32_t)o->map_size;
    mp.max_order = (int32_t)o->order;
    mp.obscuration = o->obscuration;
    mp.half = 0;
    sw_zmap_plan *plan = NULL;
    sw_status st = sw_zmap_create(ctx, &mp, &plan);
    if (st != SW_OK)
        return sw_cli_fail(SUB, "map: %s", sw_cli_lib_error(ctx, st));
    const int multi = r->frames > 1;
    const int32_t nimg = o->map_fits ? r->frames : 1;
    sw_image *img = calloc((size_t)nimg, sizeof *img);
    sw_image wrap;
    memset(&wrap, 0, sizeof wrap);
    int rc = img ? SW_EXIT_OK : sw_cli_fail(SUB, "out of memory");
    for (int32_t i = 0; rc == SW_EXIT_OK && i < nimg; i++)
        if ((st = sw_image_alloc(ctx, mp.size, mp.size, SW_PIX_F32, &img[i])) != SW_OK)
            rc = sw_cli_fail(SUB, "map: %s", sw_cli_lib_error(ctx, st));
    if (rc == SW_EXIT_OK && o->have_wrap &&
        (st = sw_image_alloc(ctx, mp.size, mp.size, SW_PIX_U8, &wrap)) != SW_OK)
        rc = sw_cli_fail(SUB, "map: %s", sw_cli_lib_error(ctx, st));
    char name[4096];
    for (int32_t f = 0; rc == SW_EXIT_OK && f < r->frames; f++) {
        sw_image *m = &img[o->map_fits ? f : 0];
        const double *c = r->coef + (size_t)f * r->terms;
        if (!all_finite(c, r->terms)) {
            fill_nan(m);
        } else if ((st = sw_zmap_run(plan, c, r->terms, m)) != SW_OK ||
                   (st = sw_context_synchronize(ctx)) != SW_OK) {
            rc = sw_cli_fail(SUB, "map of frame %lld: %s", (long long)r->label[f],
                             sw_cli_lib_error(ctx, st));
            break;
        }
        if (!o->map_fits) {
            if (map_name(o->map, multi, r->label[f], 0, name, sizeof name) != 0) {
                rc = sw_cli_fail(SUB, "cannot write the map: the name '%s' is too long", o->map);
                break;
            }
            char title[96];
            snprintf(title, sizeof title, "wavefront, frame %lld, orders 1-%ld",
                     (long long)r->label[f], o->order);
            const char *staged = sw_cli_file_staged("--map", name);
            if (!staged) {
                rc = SW_EXIT_FAIL;
                break;
            }
            if ((st = sw_cli_map_png(ctx, staged, m, SW_CLI_UM, title)) != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
                break;
            }
            if (r->maps_written++ == 0)
                snprintf(r->map_first, sizeof r->map_first, "%s", name);
        }
        if (o->have_wrap) {
            if (map_name(o->map, multi, r->label[f], 1, name, sizeof name) != 0) {
                rc = sw_cli_fail(SUB, "cannot write the map: the name '%s' is too long", o->map);
                break;
            }
            if ((st = sw_zmap_wrap(ctx, m, o->wrap_um, &wrap)) != SW_OK ||
                (st = sw_context_synchronize(ctx)) != SW_OK) {
                rc = sw_cli_fail(SUB, "wrapped map of frame %lld: %s", (long long)r->label[f],
                                 sw_cli_lib_error(ctx, st));
                break;
            }
            sw_png_options po;
            sw_png_options_default(&po);
            po.colormap = SW_CMAP_GREY;
            po.vmin = 0.0;
            po.vmax = 255.0;
            const char *staged = sw_cli_file_staged("--wrap-um", name);
            if (!staged) {
                rc = SW_EXIT_FAIL;
                break;
            }
            if ((st = sw_png_write(ctx, staged, &wrap, &po)) != SW_OK) {
                rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
                break;
            }
            if (f == 0)
                snprintf(r->wrap_first, sizeof r->wrap_first, "%s", name);
        }
    }
    if (rc == SW_EXIT_OK && o->map_fits) {
        sw_cli_hdr hdr;
        map_header(&hdr, o, r, mp.size);
        const char *staged = sw_cli_file_staged("--map", o->map);
        if (!staged)
            rc = SW_EXIT_FAIL;
        else if ((st = sw_cli_hdr_write(ctx, staged, img, nimg, &hdr)) != SW_OK)
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(ctx, st));
        else {
            r->maps_written = 1;
            snprintf(r->map_first, sizeof r->map_first, "%s", o->map);
        }
    }
    for (int32_t i = 0; img && i < nimg; i++)
        sw_image_free(&img[i]);
    free(img);
    sw_image_free(&wrap);
    sw_zmap_destroy(plan);
    return rc;
}

/* One row of the coefficient CSV. */
static void put_coef(FILE *f, double v)
{
    if (isnan(v))
        fputs(",nan", f);
    else
        fprintf(f, ",%.10g", v);
}

static void write_coefficients(FILE *out, const fit_opts *o, const report *r)
{
    const int multi = r->frames > 1;
    fprintf(out, "%s%s\n", multi ? "frame," : "",
            o->index_noll ? "noll,n,m,j,coef_um" : "j,n,m,noll,coef_um");
    for (int32_t f = 0; f < r->frames; f++) {
        const double *c = r->coef + (size_t)f * r->terms;
        for (int32_t i = 0; i < r->terms; i++) {
            int n = 0, m = 0;
            /* Noll indices 1 .. J cover the same terms as OSA 0 .. J - 1 (whole orders). */
            if (o->index_noll)
                sw_zernike_noll_nm(i + 1, &n, &m);
            else
                sw_zernike_osa_nm(i, &n, &m);
            const int j = sw_zernike_osa(n, m), noll = sw_zernike_noll(n, m);
            if (multi)
                fprintf(out, "%lld,", (long long)r->label[f]);
            if (o->index_noll)
                fprintf(out, "%d,%d,%d,%d", noll, n, m, j);
            else
                fprintf(out, "%d,%d,%d,%d", j, n, m, noll);
            put_coef(out, c[j]);
            fputc('\n', out);
        }
    }
}

typedef struct run_state {
    sw_context *ctx;
    slopes_in in;
    uint8_t *mask;    /* nl: lenslets valid in at least one frame */
    int32_t *slope_l; /* nslopes: the lenslet of each slope (mask lenslets in order) */
    uint8_t *used;    /* nslopes: the fit uses the slope's lenslet */
    sw_zfit_plan *plan;
    float *slopes;  /* batch * 2 nslopes */
    uint8_t *valid; /* batch * nl */
    sw_cli_out out;
} run_state;

static void state_free(run_state *s)
{
    sw_cli_out_close(SUB, &s->out, 0);
    sw_zfit_destroy(s->plan);
    slopes_free(&s->in);
    free(s->mask);
    free(s->slope_l);
    free(s->used);
    free(s->slopes);
    free(s->valid);
    sw_context_destroy(s->ctx);
}

static int run_fit(const sw_cli_globals *gl, const fit_opts *o, report *r)
{
    run_state s;
    memset(&s, 0, sizeof s);
    int rc = sw_cli_context(gl, SUB, &s.ctx);
    if (rc != SW_EXIT_OK)
        return rc;
    r->backend = sw_context_backend(s.ctx);
    sw_status st;

    /* The table on the grid. */
    double t0 = sw_cli_now();
    if ((rc = read_table(s.ctx, o->input, &s.in)) != SW_EXIT_OK)
        goto done;
    r->nx = o->have_grid ? o->nx : s.in.nx;
    r->ny = o->have_grid ? o->ny : s.in.ny;
    if ((int64_t)r->nx * r->ny > (1 << 24)) {
        rc = sw_cli_fail(SUB, "a grid of %dx%d lenslets is larger than 2^24", (int)r->nx,
                         (int)r->ny);
        goto done;
    }
    if ((rc = place_rows(s.ctx, o->input, r->nx, r->ny, &s.in)) != SW_EXIT_OK)
        goto done;
    r->frames = s.in.frames;
    r->rows = s.in.rows;
    r->read_ms = 1e3 * (sw_cli_now() - t0);

    /* The mask: lenslets valid in at least one frame; the geometry. */
    const int32_t nl = r->nx * r->ny;
    if (!(s.mask = calloc((size_t)nl, 1))) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    int32_t nmask = 0;
    for (int32_t f = 0; f < r->frames; f++)
        for (int32_t l = 0; l < nl; l++)
            if (s.in.valid[(size_t)f * nl + l])
                s.mask[l] = 1;
    for (int32_t l = 0; l < nl; l++) {
        nmask += s.mask[l];
        for (int32_t f = 0; f < r->frames; f++)
            if (s.in.listed[(size_t)f * nl + l]) {
                r->listed++;
                break;
            }
    }
    if (nmask == 0) {
        rc =
            sw_cli_fail(SUB, "slopes table '%s' has no valid slope (all nan or valid 0)", o->input);
        goto done;
    }
    sw_sh_geometry g;
    sw_sh_geometry_default(&g);
    g.pitch_px = o->pitch;
    g.nx = r->nx;
    g.ny = r->ny;
    g.x0 = o->have_origin ? o->x0 : 0.0;
    g.y0 = o->have_origin ? o->y0 : 0.0;
    g.pixel_um = o->pixel_um;
    g.focal_mm = o->focal_mm;
    g.valid = s.mask;
    if ((st = sw_sh_geometry_check(s.ctx, &g, 0, 0)) != SW_OK) {
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(s.ctx, st));
        goto done;
    }
    r->pitch = g.pitch_px;
    r->x0 = g.x0;
    r->y0 = g.y0;
    r->pixel_um = g.pixel_um;
    r->focal_mm = g.focal_mm;

    /* The pupil: radius in pixels (the lenslet array images 1:1 onto the detector). */
    r->radius_px = o->have_pupil_px   ? o->pupil_px
                   : o->have_pupil_mm ? o->pupil_mm * 1000.0 / 2.0 / g.pixel_um
                                      : 0.5 * g.pitch_px * (g.nx < g.ny ? g.nx : g.ny);
    r->cx = o->have_center ? o->cx : g.x0 - 0.5 + 0.5 * g.pitch_px * g.nx;
    r->cy = o->have_center ? o->cy : g.y0 - 0.5 + 0.5 * g.pitch_px * g.ny;
    r->pupil_mm = o->have_pupil_mm ? o->pupil_mm : 2.0 * r->radius_px * g.pixel_um / 1000.0;
    r->report_mm = r->pupil_mm;
    if (o->have_rescale) {
        if (o->rescale_mm > r->pupil_mm * (1.0 + 1e-12)) {
            rc = sw_cli_usage(SUB, "--rescale-mm %g is larger than the fitted pupil (%g mm)",
                              o->rescale_mm, r->pupil_mm);
            goto done;
        }
        r->report_mm = o->rescale_mm < r->pupil_mm ? o->rescale_mm : r->pupil_mm;
    }

    /* The plan (Mompean et al. 2019 Sec. 3.3: the derivative matrix and its factorisation). */
    const int32_t batch = r->frames < MAX_BATCH ? r->frames : MAX_BATCH;
    sw_zfit_params p;
    sw_zfit_params_default(&p);
    p.geometry = g;
    p.pupil_cx_px = r->cx;
    p.pupil_cy_px = r->cy;
    p.pupil_radius_px = r->radius_px;
    p.obscuration = o->obscuration;
    p.max_order = (int32_t)o->order;
    p.min_illum = o->min_illum;
    p.method = o->method;
    p.truncate = (int32_t)o->truncate;
    p.weights = NULL;
    p.layout = SW_SLOPES_BLOCKS;
    p.max_frames = batch;
    t0 = sw_cli_now();
    if ((st = sw_zfit_create(s.ctx, &p, &s.plan)) != SW_OK) {
        rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(s.ctx, st));
        goto done;
    }
    r->plan_ms = 1e3 * (sw_cli_now() - t0);
    r->terms = sw_zfit_terms(s.plan);
    r->nslopes = sw_zfit_slopes(s.plan);
    r->used = sw_zfit_used(s.plan);
    if (r->nslopes != nmask || r->terms != sw_zernike_count((int)o->order)) {
        rc = sw_cli_fail(SUB,
                         "internal error: the plan has %d slopes and %d terms, expected %d "
                         "and %d",
                         (int)r->nslopes, (int)r->terms, (int)nmask,
                         sw_zernike_count((int)o->order));
        goto done;
    }

    /* Which lenslet each slope is (the mask's lenslets in order, as the centroid plan), and
     * whether the fit uses it (its row of the derivative matrix is not zero). */
    const int32_t ns = r->nslopes, J = r->terms, mcols = J - 1;
    s.slope_l = malloc(sizeof(int32_t) * (size_t)ns);
    s.used = calloc((size_t)ns, 1);
    s.slopes = malloc(sizeof(float) * 2 * (size_t)ns * (size_t)batch);
    s.valid = malloc((size_t)nl * (size_t)batch);
    r->label = malloc(sizeof(int64_t) * (size_t)r->frames);
    r->coef = malloc(sizeof(double) * (size_t)J * (size_t)r->frames);
    r->residual = malloc(sizeof(double) * (size_t)r->frames);
    r->used_f = calloc((size_t)r->frames, sizeof(int32_t));
    r->rx = malloc(sizeof(sw_refraction) * (size_t)r->frames);
    if (!s.slope_l || !s.used || !s.slopes || !s.valid || !r->label || !r->coef || !r->residual ||
        !r->used_f || !r->rx) {
        rc = sw_cli_fail(SUB, "out of memory");
        goto done;
    }
    memcpy(r->label, s.in.label, sizeof(int64_t) * (size_t)r->frames);
    const double *D = sw_zfit_matrix(s.plan);
    for (int32_t l = 0, k = 0; l < nl; l++)
        if (s.mask[l])
            s.slope_l[k++] = l;
    for (int32_t k = 0; k < ns; k++)
        for (int32_t c = 0; c < mcols && !s.used[k]; c++)
            s.used[k] = D[(size_t)k * mcols + c] != 0.0 || D[(size_t)(ns + k) * mcols + c] != 0.0;

    /* Fit the frames in batches. */
    t0 = sw_cli_now();
    for (int32_t f0 = 0; f0 < r->frames; f0 += batch) {
        const int32_t n = r->frames - f0 < batch ? r->frames - f0 : batch;
        for (int32_t i = 0; i < n; i++) {
            const size_t src = (size_t)(f0 + i) * nl;
            float *sl = s.slopes + (size_t)i * 2 * ns;
            memcpy(s.valid + (size_t)i * nl, s.in.valid + src, (size_t)nl);
            for (int32_t k = 0; k < ns; k++) {
                const size_t l = src + (size_t)s.slope_l[k];
                sl[k] = s.in.dx[l];
                sl[ns + k] = s.in.dy[l];
                r->used_f[f0 + i] += s.used[k] && s.in.valid[l];
            }
        }
        st = sw_zfit_run(s.plan, s.slopes, s.valid, n, SW_MEM_HOST, r->coef + (size_t)f0 * J,
                         r->residual + f0);
        if (st == SW_OK)
            st = sw_context_synchronize(s.ctx);
        if (st != SW_OK) {
            rc = sw_cli_fail(SUB, "%s", sw_cli_lib_error(s.ctx, st));
            goto done;
        }
    }
    r->run_ms = 1e3 * (sw_cli_now() - t0);

    /* As reported: over the smaller pupil, in the right-eye frame; the refraction. */
    for (int32_t f = 0; f < r->frames; f++) {
        double *c = r->coef + (size_t)f * J;
        sw_refraction *rx = &r->rx[f];
        rx->M = rx->J0 = rx->J45 = rx->sphere_d = rx->cyl_d = rx->axis_deg = NAN;
        if (!all_finite(c, J)) {
            for (int32_t j = 0; j < J; j++)
                c[j] = NAN;
            r->residual[f] = NAN;
            r->failed++;
            continue;
        }
        if (o->have_rescale && r->report_mm < r->pupil_mm &&
            (st = sw_zernike_rescale(s.ctx, c, J, r->pupil_mm, r->report_mm, c)) != SW_OK) {
            rc = sw_cli_fail(SUB, "--rescale-mm: %s", sw_cli_lib_error(s.ctx, st));
            goto done;
        }
        c[0] = 0.0; /* the piston over the smaller pupil: as invisible to slopes as before */
        if (o->eye_left)
            sw_zernike_mirror_x(c, J, c);
        if (J >= 6 && (st = sw_zernike_refraction(s.ctx, c, J, r->report_mm, o->higher_rx,
                                                  o->vertex_mm, rx)) != SW_OK) {
            rc = sw_cli_fail(SUB, "refraction of frame %lld: %s", (long long)r->label[f],
                             sw_cli_lib_error(s.ctx, st));
            goto done;
        }
    }
    if (r->failed == r->frames) {
        rc = sw_cli_fail(SUB,
                         "%s: %s has fewer valid slopes in the pupil (%d lenslets) than the %d "
                         "unknowns of order %ld",
                         o->input, r->frames == 1 ? "the frame" : "every frame", (int)r->used_f[0],
                         (int)(J - 1), o->order);
        goto done;
    }

    /* Outputs: maps, then the coefficients moved into place. */
    if (o->map) {
        t0 = sw_cli_now();
        if ((rc = write_maps(s.ctx, o, r)) != SW_EXIT_OK)
            goto done;
        r->map_ms = 1e3 * (sw_cli_now() - t0);
    }
    t0 = sw_cli_now();
    if ((rc = sw_cli_out_open(SUB, &s.out, o->out)) != SW_EXIT_OK)
        goto done;
    write_coefficients(s.out.f, o, r);
    if ((rc = sw_cli_out_close(SUB, &s.out, 1)) != SW_EXIT_OK)
        goto done;
    r->write_ms = 1e3 * (sw_cli_now() - t0);
    if (r->failed > 0 && !gl->quiet)
        fprintf(stderr,
                "spotwave fit: warning: %d of %d frames have fewer valid slopes than unknowns "
                "(nan coefficients)\n",
                (int)r->failed, (int)r->frames);
    rc = SW_EXIT_OK;
done:
    state_free(&s);
    return rc;
}

/* ------------------------------------------------------------------ the report */

static void print_report(const fit_opts *o, const report *r)
{
    const int32_t J = r->terms;
    if (!o->json) {
        printf("fit: %d frame%s, grid %dx%d of %g px, %d lenslets with valid slopes, %d used "
               "in the pupil\n",
               (int)r->frames, r->frames == 1 ? "" : "s", (int)r->nx, (int)r->ny, r->pitch,
               (int)r->nslopes, (int)r->used);
        printf("  pupil      %.6g mm (radius %.6g px) at (%.6g, %.6g) px, obscuration %g; "
               "order %ld (%d terms), %s\n",
               r->pupil_mm, r->radius_px, r->cx, r->cy, o->obscuration, o->order, (int)J,
               o->method == SW_ZFIT_QR ? "qr" : "pinv");
        if (o->have_rescale || o->eye_left)
            printf("  reported   over %.6g mm%s\n", r->report_mm,
                   o->eye_left ? ", left eye mirrored into the right-eye frame (x -> -x)" : "");
        for (int32_t f = 0; f < r->frames && f < MAX_TEXT_ROWS; f++) {
            const double *c = r->coef + (size_t)f * J;
            const sw_refraction *x = &r->rx[f];
            printf("  frame %-4lld RMS %.4g um (no piston/tilt), residual %.4g px, %d lenslets",
                   (long long)r->label[f], sw_zernike_rms(c, J, 3), r->residual[f],
                   (int)r->used_f[f]);
            if (isfinite(x->M))
                printf("; %+.2f / %+.2f x %.0f (M %+.3f D)", x->sphere_d, x->cyl_d, x->axis_deg,
                       x->M);
            printf("\n");
        }
        if (r->frames > MAX_TEXT_ROWS)
            printf("  ...        %d more frames in %s\n", (int)(r->frames - MAX_TEXT_ROWS), o->out);
        printf("  wrote      %s", o->out);
        if (r->maps_written)
            printf(", %s%s", r->map_first, r->maps_written > 1 ? ", ..." : "");
        if (o->have_wrap)
            printf(", %s%s", r->wrap_first, r->frames > 1 ? ", ..." : "");
        printf("\n");
        return;
    }
    cJSON *j = cJSON_CreateObject();
    sw_cli_json_string(j, "subcommand", "fit");
    sw_cli_json_string(j, "input", o->input);
    sw_cli_json_int(j, "rows", r->rows);
    sw_cli_json_int(j, "frames", r->frames);
    sw_cli_json_int(j, "grid_nx", r->nx);
    sw_cli_json_int(j, "grid_ny", r->ny);
    sw_cli_json_double(j, "pitch_px", r->pitch);
    sw_cli_json_double(j, "origin_x_px", r->x0);
    sw_cli_json_double(j, "origin_y_px", r->y0);
    sw_cli_json_double(j, "pixel_um", r->pixel_um);
    sw_cli_json_double(j, "focal_mm", r->focal_mm);
    sw_cli_json_double(j, "pupil_cx_px", r->cx);
    sw_cli_json_double(j, "pupil_cy_px", r->cy);
    sw_cli_json_double(j, "pupil_radius_px", r->radius_px);
    sw_cli_json_double(j, "pupil_mm", r->pupil_mm);
    sw_cli_json_double(j, "report_pupil_mm", r->report_mm);
    sw_cli_json_double(j, "obscuration", o->obscuration);
    sw_cli_json_int(j, "order", o->order);
    sw_cli_json_int(j, "terms", J);
    sw_cli_json_string(j, "method", o->method == SW_ZFIT_QR ? "qr" : "pinv");
    sw_cli_json_int(j, "truncate", o->truncate);
    sw_cli_json_double(j, "min_illum", o->min_illum);
    sw_cli_json_string(j, "index", o->index_noll ? "noll" : "ansi");
    sw_cli_json_string(j, "eye", o->eye_left ? "left" : "right");
    sw_cli_json_int(j, "lenslets_listed", r->listed);
    sw_cli_json_int(j, "lenslets_in_mask", r->nslopes);
    sw_cli_json_int(j, "lenslets_used", r->used);
    sw_cli_json_double(j, "vertex_mm", o->vertex_mm);
    cJSON_AddBoolToObject(j, "higher_order_rx", o->higher_rx);
    sw_cli_json_int(j, "frames_failed", r->failed);
    cJSON *results = cJSON_AddArrayToObject(j, "results");
    for (int32_t f = 0; f < r->frames; f++) {
        const double *c = r->coef + (size_t)f * J;
        const int ok = all_finite(c, J);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddItemToArray(results, e);
        sw_cli_json_int(e, "frame", r->label[f]);
        cJSON *coef = cJSON_AddArrayToObject(e, "coef_um");
        for (int32_t k = 0; k < J; k++)
            cJSON_AddItemToArray(coef, sw_cli_json_num(c[k]));
        sw_cli_json_double(e, "rms_um", ok ? sw_zernike_rms(c, J, 3) : NAN);
        sw_cli_json_double(e, "rms_hoa_um", ok && J > 10 ? sw_zernike_rms(c, J, 10) : NAN);
        sw_cli_json_double(e, "residual_px", r->residual[f]);
        sw_cli_json_int(e, "used_lenslets", r->used_f[f]);
        const sw_refraction *x = &r->rx[f];
        if (!isfinite(x->M)) {
            cJSON_AddNullToObject(e, "refraction");
        } else {
            cJSON *rx = cJSON_AddObjectToObject(e, "refraction");
            sw_cli_json_double(rx, "M_d", x->M);
            sw_cli_json_double(rx, "J0_d", x->J0);
            sw_cli_json_double(rx, "J45_d", x->J45);
            sw_cli_json_double(rx, "sphere_d", x->sphere_d);
            sw_cli_json_double(rx, "cyl_d", x->cyl_d);
            sw_cli_json_double(rx, "axis_deg", x->axis_deg);
        }
    }
    sw_cli_json_string(j, "backend", sw_backend_string(r->backend));
    sw_cli_json_fixed(j, "read_ms", r->read_ms, 6);
    sw_cli_json_fixed(j, "plan_ms", r->plan_ms, 6);
    sw_cli_json_fixed(j, "run_ms", r->run_ms, 6);
    sw_cli_json_fixed(j, "map_ms", r->map_ms, 6);
    sw_cli_json_fixed(j, "write_ms", r->write_ms, 6);
    sw_cli_json_string(j, "out", o->out);
    sw_cli_json_string(j, "map", r->maps_written ? r->map_first : NULL);
    sw_cli_json_int(j, "map_files", r->maps_written);
    sw_cli_json_string(j, "wrapped", o->have_wrap ? r->wrap_first : NULL);
    sw_cli_json_print(j);
}

int sw_cmd_fit(const sw_cli_globals *g, int argc, char **argv)
{
    fit_opts o;
    memset(&o, 0, sizeof o);
    o.pixel_um = DEF_PIXEL_UM;
    o.focal_mm = DEF_FOCAL_MM;
    o.order = DEF_ORDER;
    o.method = SW_ZFIT_PINV;
    o.min_illum = DEF_MIN_ILLUM;
    o.map_size = DEF_MAP_SIZE;
    int rc = parse_options(argc, argv, &o);
    if (rc == -1)
        return SW_EXIT_OK; /* --help */
    if (rc != SW_EXIT_OK)
        return rc;
    if (!o.out)
        o.out = "-";
    sw_cli_file_in("slopes", o.input);
    sw_cli_file_out("--out", o.out);
    sw_cli_file_out("--map", o.map);
    if ((rc = sw_cli_files_check()) != SW_EXIT_OK)
        return rc;
    report r;
    memset(&r, 0, sizeof r);
    rc = run_fit(g, &o, &r);
    if (rc == SW_EXIT_OK && strcmp(o.out, "-") != 0)
        print_report(&o, &r);
    report_free(&r);
    return rc;
}
