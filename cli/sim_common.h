/*
 * What the `spotwave sim` simulations share (cmd_sim.c): the detector options and model, image
 * names and writing, the lenslet grid and spot options of `sim sh` and `sim eye`. Each simulation
 * lives in its own file (cmd_sim_stars.c, cmd_sim_sh.c, cmd_sim_eye.c) with its options, help and
 * run; cmd_sim.c dispatches to them.
 */
#ifndef SW_CLI_SIM_COMMON_H
#define SW_CLI_SIM_COMMON_H

#include "cli.h"
#include "outfiles.h"

#define DEF_SEED 1

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

void sim_det_opts_init(det_opts *d, sw_pixel_type bits);
/* The help text of the detector options (default output bits given); a static buffer. */
const char *sim_detector_help(int default_bits);
/* Handles option c if it is a detector option: SW_EXIT_OK when taken, SW_EXIT_USAGE after a
 * usage line for a bad value, -1 when c is not a detector option. */
int sim_detector_option(const char *S, int c, const char *name, const char *arg, det_opts *d);
/* After the options: resolves --noise none / --no-shot-noise and the seed. */
int sim_detector_finish(const char *S, det_opts *d, uint64_t seed);
/* An image name the writers take for pixels of type t; a usage line naming opt otherwise. */
int sim_check_image_name(const char *S, const char *opt, const char *path, sw_pixel_type t);
/* Writes an image by its name's extension; a FITS file gets the header keys h. */
sw_status sim_write_any(sw_context *ctx, const char *path, const sw_image *img,
                        const sw_cli_hdr *h);
/* The keys every simulated detector image carries. */
void sim_image_header(sw_cli_hdr *h, const char *what, const sw_detector *det, uint64_t seed);

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

void sim_sh_opts_init(sh_opts *o, double wavelength_um, double flux_e);
/* The help text of the grid and spot options; a static buffer. */
const char *sim_sh_opts_help(const char *grid_default, const char *size_default, double wavelength,
                             double flux);
/* As sim_detector_option, for the grid and spot options. */
int sim_sh_option(const char *S, int c, const char *arg, sh_opts *o);
/* Resolves the grid's defaults and checks it against the image (a usage error when not). */
int sim_sh_resolve(const char *S, sh_opts *o, int grid_from_size, int32_t def_w, int32_t def_h);
void sim_sh_params(const sh_opts *o, sw_shsim_params *p);
/* The lenslet array and the detector's geometry of a Shack-Hartmann image. */
void sim_sh_header(sw_cli_hdr *h, const sh_opts *o);
/* Lenslets lit above min_illum. */
int64_t sim_lit_lenslets(const sw_sh_truth *t, double min_illum);
/* The detector of the reference image (--reference): another exposure, another seed. */
sw_detector sim_reference_detector(const sw_detector *d);
/* Applies the detector to a host f32 image of electrons and writes the result to path. */
int sim_detect_and_write(sw_context *ctx, const char *S, const sw_detector *det,
                         const sw_image *electrons, const char *path, const sw_cli_hdr *h,
                         double *det_ms, double *write_ms);

/* The simulations (argv[0] is the simulation's name). */
int sw_cmd_sim_stars(const sw_cli_globals *g, int argc, char **argv);
int sw_cmd_sim_sh(const sw_cli_globals *g, int argc, char **argv);
int sw_cmd_sim_eye(const sw_cli_globals *g, int argc, char **argv);

#endif /* SW_CLI_SIM_COMMON_H */
