/*
 * spotwave sim: simulated images with known truth. `sim stars` renders a star field (Li et al.
 * 2012: magnitudes by Eq. 1, the Gaussian PSF of Eq. 2 over each star's ROI, Eq. 3), applies the
 * detector model and writes the image and the truth table. `sim sh` renders a Shack-Hartmann
 * spot pattern (Mocci et al. 2020 Eq. 1-5 geometry, sim_sh.h) of a Zernike wavefront, a phase
 * screen or turbulence; `sim eye` one or two synthetic eyes (Mompean et al. 2019 Sec. 4.1:
 * population aberrations, retinal glow, reflections, brightness maps, noise; sim_eye.h).
 *
 * Each simulation has its own file (cmd_sim_stars.c, cmd_sim_sh.c, cmd_sim_eye.c: options, help,
 * run, report); this one holds the `sim` dispatcher and what they share (sim_common.h).
 */
#define _GNU_SOURCE

#include "sim_common.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SUB "sim"

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
                 "  bench     the closed-loop simulator's atmosphere, mirror and camera as a\n"
                 "            process on image streams (ImageStreamIO layout), for spotwave rtc\n"
                 "\n"
                 "See 'spotwave sim stars --help', 'spotwave sim sh --help', 'spotwave sim eye "
                 "--help',\n'spotwave sim bench --help'.\n");
}

/* ------------------------------------------------------------------ the detector (all sims) */

void sim_det_opts_init(det_opts *d, sw_pixel_type bits)
{
    memset(d, 0, sizeof *d);
    sw_detector_default(&d->det);
    d->det.out_type = bits;
}

/* The help text of the detector options (default output bits given). */
const char *sim_detector_help(int default_bits)
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
int sim_detector_option(const char *S, int c, const char *name, const char *arg, det_opts *d)
{
    double v;
    switch (c) {
    case OPT_DET_SKY_E:
    case OPT_DET_DARK_E:
    case OPT_DET_READ:
    case OPT_DET_FULL_WELL:
        if (sw_cli_opt_double(S, name, arg, SW_CLI_NONNEG, "a non-negative number of electrons",
                              &v) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
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
        if (sw_cli_opt_double(S, "--gain", arg, SW_CLI_POSITIVE, "a positive number of e- per ADU",
                              &d->det.gain_e_per_adu) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
        return SW_EXIT_OK;
    case OPT_DET_BIAS:
        if (sw_cli_opt_double(S, "--bias", arg, SW_CLI_ANY, "a number of ADU", &d->det.bias_adu) !=
            SW_EXIT_OK)
            return SW_EXIT_USAGE;
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
int sim_detector_finish(const char *S, det_opts *d, uint64_t seed)
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
int sim_check_image_name(const char *S, const char *opt, const char *path, sw_pixel_type t)
{
    if (sw_cli_ends_with(path, ".pgm")) {
        if (t != SW_PIX_U8 && t != SW_PIX_U16)
            return sw_cli_usage(S, "a PGM file holds 8 or 16 bits: use --bits 8 or 16, or a .fits "
                                   "name");
    } else if (is_hdf5_name(path)) {
        if (t != SW_PIX_U8 && t != SW_PIX_U16)
            return sw_cli_usage(S, "an HDF5 (Eiger) file holds integer counts: use --bits 8 or "
                                   "16, or a .fits name");
    } else if (sw_cli_ends_with(path, ".cbf")) {
        if (t == SW_PIX_F32)
            return sw_cli_usage(S, "a CBF file holds integer counts: use --bits 8, 16 or 32, or a "
                                   ".fits or .tif name");
    } else if (!sw_cli_ends_with(path, ".fits") && !sw_cli_ends_with(path, ".fit") &&
               !sw_cli_ends_with(path, ".fts") && !sw_cli_ends_with(path, ".tif") &&
               !sw_cli_ends_with(path, ".tiff")) {
        return sw_cli_usage(S, "%s: '%s' does not end in .fits, .pgm, .h5, .tif, .tiff or .cbf",
                            opt, path);
    }
    return SW_EXIT_OK;
}

/* Writes an image by its name's extension; a FITS file gets the header keys h. */
sw_status sim_write_any(sw_context *ctx, const char *path, const sw_image *img, const sw_cli_hdr *h)
{
    if (sw_cli_ends_with(path, ".pgm"))
        return sw_pgm_write(ctx, path, img);
    if (sw_cli_ends_with(path, ".tif") || sw_cli_ends_with(path, ".tiff"))
        return sw_tiff_write(ctx, path, img, 1, 0);
    if (sw_cli_ends_with(path, ".cbf")) {
        /* Count_cutoff: where the counts saturate (find's default overload of the type) */
        sw_diffraction_geometry g;
        sw_diffraction_geometry_init(&g);
        if (img->type == SW_PIX_U8 || img->type == SW_PIX_U16) {
            g.overload = img->type == SW_PIX_U8 ? 255.0 : 65534.0;
            g.have = SW_DG_OVERLOAD;
        }
        return sw_cbf_write(ctx, path, img, NULL, &g);
    }
    if (is_hdf5_name(path))
        return sw_h5_write(ctx, path, img, 1, 0,
                           sw_h5_bitshuffle_available() ? SW_H5_BSLZ4 : SW_H5_DEFLATE, NULL, 0.0);
    return sw_cli_hdr_write(ctx, path, img, 1, h);
}

/* The keys every simulated detector image carries: BUNIT (the detector's counts), the command
 * line, the detector model, the seed. */
void sim_image_header(sw_cli_hdr *h, const char *what, const sw_detector *det, uint64_t seed)
{
    sw_cli_hdr_init(h, "adu", "detector counts: electrons / GAIN + BIAS");
    sw_cli_hdr_comment(h, "%s", what);
    sw_cli_hdr_command(h);
    sw_cli_hdr_u64(h, "SEED", seed, "simulation seed (--seed)");
    sw_cli_hdr_detector(h, det);
}

/* ------------------------------------------------------------------ SH options (sh and eye) */

void sim_sh_opts_init(sh_opts *o, double wavelength_um, double flux_e)
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

const char *sim_sh_opts_help(const char *grid_default, const char *size_default, double wavelength,
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

int sim_sh_option(const char *S, int c, const char *arg, sh_opts *o)
{
    double v, list[2];
    long n;
    switch (c) {
    case OPT_SH_GRID:
        if (sw_cli_opt_grid(S, "--grid", arg, &o->nx, &o->ny) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
        o->have_grid = 1;
        return SW_EXIT_OK;
    case OPT_SH_PITCH:
        if (sw_cli_opt_double(S, "--pitch", arg, SW_CLI_POSITIVE, "a positive number of pixels",
                              &o->pitch) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
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
        if (sw_cli_opt_size(S, "--size", arg, &o->width, &o->height) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
        o->have_size = 1;
        return SW_EXIT_OK;
    case OPT_SH_PIXEL:
    case OPT_SH_FOCAL:
    case OPT_SH_LENSLET:
    case OPT_SH_WAVELENGTH:
        if (sw_cli_opt_double(S,
                              c == OPT_SH_PIXEL     ? "--pixel-um"
                              : c == OPT_SH_FOCAL   ? "--focal-mm"
                              : c == OPT_SH_LENSLET ? "--lenslet-um"
                                                    : "--wavelength-um",
                              arg, SW_CLI_POSITIVE, "a positive length", &v) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
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
        if (sw_cli_opt_double(S, "--sigma", arg, SW_CLI_NONNEG, "a non-negative number of pixels",
                              &o->sigma_px) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
        return SW_EXIT_OK;
    case OPT_SH_FLUX:
        if (sw_cli_opt_double(S, "--flux", arg, SW_CLI_NONNEG, "a non-negative number of electrons",
                              &o->flux_e) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
        return SW_EXIT_OK;
    case OPT_SH_MIN_ILLUM:
        if (sw_cli_parse_double(arg, &o->min_illum) != 0 || o->min_illum < 0 || o->min_illum >= 1)
            return sw_cli_usage(S, "--min-illum: '%s' is not a fraction in [0, 1)", arg);
        return SW_EXIT_OK;
    case OPT_SH_ROI:
    case OPT_SH_SAMPLES:
    case OPT_SH_OVERSAMPLE:
    case OPT_SH_FFT:
        if (sw_cli_opt_long(S,
                            c == OPT_SH_ROI          ? "--roi"
                            : c == OPT_SH_SAMPLES    ? "--samples"
                            : c == OPT_SH_OVERSAMPLE ? "--oversample"
                                                     : "--fft-size",
                            arg, 0, 65536, &n) != SW_EXIT_OK)
            return SW_EXIT_USAGE;
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
int sim_sh_resolve(const char *S, sh_opts *o, int grid_from_size, int32_t def_w, int32_t def_h)
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

void sim_sh_params(const sh_opts *o, sw_shsim_params *p)
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
void sim_sh_header(sw_cli_hdr *h, const sh_opts *o)
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

int64_t sim_lit_lenslets(const sw_sh_truth *t, double min_illum)
{
    int64_t n = 0;
    for (int64_t l = 0; l < (int64_t)t->nx * t->ny; l++)
        n += t->illum[l] > min_illum;
    return n;
}

/* Applies the detector to a host f32 image of electrons into a new host image of the output type
 * and writes it. */
/* The detector of the reference image (--reference): the same camera, another exposure, so its
 * noise is drawn under a different seed (the golden-ratio constant added to --seed); with the same
 * draws the noise would cancel in centroid - reference and flatter every later stage. */
sw_detector sim_reference_detector(const sw_detector *d)
{
    sw_detector r = *d;
    r.seed = d->seed + 0x9E3779B97F4A7C15ull;
    return r;
}

int sim_detect_and_write(sw_context *ctx, const char *S, const sw_detector *det,
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
        return sw_cli_fail(S, "detector model: %s", sw_cli_lib_error(ctx, st));
    }
    t0 = sw_cli_now();
    const char *staged = sw_cli_file_staged("output", path);
    if (!staged) {
        sw_image_free(&out);
        return SW_EXIT_FAIL;
    }
    if ((st = sim_write_any(ctx, staged, &out, h)) != SW_OK) {
        sw_image_free(&out);
        return sw_cli_fail(S, "%s", sw_cli_lib_error(ctx, st));
    }
    if (write_ms)
        *write_ms += 1e3 * (sw_cli_now() - t0);
    sw_image_free(&out);
    return SW_EXIT_OK;
}

int sw_cmd_sim(const sw_cli_globals *g, int argc, char **argv)
{
    if (argc < 2)
        return sw_cli_usage(SUB, "which simulation? (stars, sh, eye, bench)");
    const char *what = argv[1];
    if (strcmp(what, "-h") == 0 || strcmp(what, "--help") == 0) {
        sw_cmd_sim_help(stdout);
        return SW_EXIT_OK;
    }
    /* the files' messages name the simulation ("spotwave sim eye: ...") */
    if (strcmp(what, "stars") == 0) {
        sw_cli_files_begin("sim stars");
        return sw_cmd_sim_stars(g, argc - 1, argv + 1);
    }
    if (strcmp(what, "sh") == 0) {
        sw_cli_files_begin("sim sh");
        return sw_cmd_sim_sh(g, argc - 1, argv + 1);
    }
    if (strcmp(what, "eye") == 0) {
        sw_cli_files_begin("sim eye");
        return sw_cmd_sim_eye(g, argc - 1, argv + 1);
    }
    if (strcmp(what, "bench") == 0) {
        sw_cli_files_begin("sim bench");
        return sw_cmd_sim_bench(g, argc - 1, argv + 1);
    }
    if (what[0] == '-')
        return sw_cli_usage(SUB, "'%s': name the simulation first (stars, sh, eye, bench)", what);
    return sw_cli_usage(SUB, "unknown simulation '%s' (available: stars, sh, eye, bench)", what);
}
