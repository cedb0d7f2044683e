/*
 * spotwave sim: star-field images with Gaussian blur and a detector model (Li et al. 2012, below).
 *
 * Paper: Li C., Zhang Y., Zheng C., Hu X. 2012, "Implementing high-performance intensity model
 * with blur effect on GPUs for large-scale star image simulation", IEEE 26th International
 * Parallel and Distributed Processing Symposium Workshops (IPDPSW 2012), 1879-1888.
 *
 * Units and conventions:
 *   - Positions in pixels, 0-based, the centre of pixel (0,0) at (0.0, 0.0) (core.h).
 *   - Fluxes in photo-electrons (e-) per exposure; magnitudes are converted with Li et al. Eq. (1),
 *     g(m) = A * r^(-m), A the zero point (e- of a magnitude-0 star), r = 10^0.4 by default
 *     (exact Pogson ratio) or 2.512 as in Li et al.
 *   - The PSF is the circular Gaussian of Li et al. Eq. (2) with standard deviation sigma (pixels):
 *       mu(x, y) = 1 / (2 pi sigma^2) exp(-((x - X)^2 + (y - Y)^2) / (2 sigma^2)),
 *     and a star adds phi = g * mu (Li et al. Eq. 3) to the pixels of its region of interest (ROI):
 *     the roi_side x roi_side pixels whose centre is nearest the star, i.e. columns
 *     x0 .. x0 + roi_side - 1 with x0 = floor(X - (roi_side - 1) / 2 + 0.5), rows likewise
 *     (for an odd side 2R+1: the pixels within R of the pixel nearest the star).
 *
 * Rendering gives an f32 image of expected electrons per pixel (no noise). The detector model
 * (sw_detector_apply) then adds sky, dark current, shot and read noise, bias, gain, full well
 * and ADC quantisation.
 */
#ifndef SPOTWAVE_SIM_H
#define SPOTWAVE_SIM_H

#include "spotwave/core.h"
#include "spotwave/io.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ stars */

/* A star list as a struct of arrays (as SEP does): count entries each. */
typedef struct sw_stars {
    int64_t count;
    double *x;    /* pixels */
    double *y;    /* pixels */
    double *flux; /* e- per exposure */
    double *mag;  /* magnitude (NaN when the star was given by flux only) */
} sw_stars;

/* Allocates arrays for count stars (zeroed; mag NaN). */
sw_status sw_stars_alloc(sw_context *ctx, int64_t count, sw_stars *out);
void sw_stars_free(sw_stars *s);

/* Li et al. Eq. (1): flux = zero_point * ratio^(-mag). ratio <= 0 means 10^0.4 (Pogson), computed
 * as zero_point * 10^(-0.4 mag) so that 5 magnitudes are a factor of 100 to the last bit. */
double sw_mag_to_flux(double mag, double zero_point, double ratio);
/* The inverse: mag = -log(flux / zero_point) / log(ratio). flux 0: +Inf; flux < 0, NaN or
 * zero_point <= 0: NaN. */
double sw_flux_to_mag(double flux, double zero_point, double ratio);

/*
 * Reads a catalogue of detector positions: a CSV (io.h's sw_csv_read) with columns x_px, y_px
 * and flux_e (e-) or mag (converted with sw_mag_to_flux(mag, zero_point, ratio)); other columns
 * are ignored. When both flux_e and mag are present, flux_e gives the flux and mag is kept as
 * given (it is not checked against flux_e). Missing columns, non-numeric cells, NaN/Inf positions,
 * fluxes or magnitudes and negative fluxes: SW_EFORMAT naming the file and the row (1-based data
 * row). Positions may lie anywhere (stars outside the image are skipped when rendering).
 */
sw_status sw_stars_read_csv(sw_context *ctx, const char *path, double zero_point, double ratio,
                            sw_stars *out);

/*
 * count random stars: star i takes draw i of the spotwave RNG (rng.h) under seed:
 * x = -0.5 + width * u, y = -0.5 + height * v (uniform over the image's area, whose pixels span
 * [-0.5, width - 0.5) x [-0.5, height - 0.5)) with (u, v) from stream SW_RNG_STREAM_POSITIONS;
 * mag = mag_min + (mag_max - mag_min) * w (uniform) with w from SW_RNG_STREAM_MAGNITUDES;
 * flux = sw_mag_to_flux(mag, zero_point, ratio). The same seed gives the same stars everywhere.
 */
sw_status sw_stars_random(sw_context *ctx, int64_t count, int32_t width, int32_t height,
                          double mag_min, double mag_max, double zero_point, double ratio,
                          uint64_t seed, sw_stars *out);

/*
 * A pinhole camera pointed at the sky (sky mode).
 *
 * Attitude: the boresight (optical axis) points at (ra_deg, dec_deg) (ICRS-like equatorial
 * coordinates, degrees). The image axes at roll 0: +x (columns) towards decreasing RA (west) and
 * +y (rows) towards decreasing Dec (south): north up and east left, as the sky appears on a
 * display whose row 0 is at the top (an unmirrored image: x, y and the boresight form a
 * right-handed frame). roll_deg is the position angle of the image's up direction (-y), measured
 * from north through east: at roll 90 east is up and north points to +x.
 *
 * Projection (gnomonic / pinhole): a star of unit direction s has camera coordinates
 * X = s . ex, Y = s . ey, Z = s . boresight and lands at
 *     x = cx + (f / p) X / Z,  y = cy + (f / p) Y / Z,  cx = (width - 1) / 2, cy = (height - 1) /
 * 2, with f / p = focal_mm * 1000 / pixel_um pixels. Stars with Z <= 0 are behind the camera.
 */
typedef struct sw_camera {
    double ra_deg, dec_deg, roll_deg; /* attitude, degrees (|dec| <= 90) */
    double focal_mm;                  /* focal length, mm (> 0) */
    double pixel_um;                  /* pixel pitch, micrometres (> 0) */
    int32_t width, height;            /* detector size, pixels */
} sw_camera;

/* Checks a camera (finite angles, |dec| <= 90, focal and pixel > 0, size within the image
 * limits); SW_EINVAL with a message when bad. */
sw_status sw_camera_check(sw_context *ctx, const sw_camera *cam);
/* Projects one direction; returns 1 and sets *x, *y when the star is in front of the camera
 * (Z > 0), 0 otherwise (then *x, *y are NaN). cam must have passed sw_camera_check. */
int sw_camera_project(const sw_camera *cam, double ra_deg, double dec_deg, double *x, double *y);

/*
 * Projects n catalogue stars and keeps those in front of the camera whose position lies inside
 * the image widened by margin_px on every side: -0.5 - margin <= x < width - 0.5 + margin (y
 * likewise). A margin of half the ROI side keeps the stars just outside the edge whose light
 * still falls on the detector. flux (e-) and mag are per star; mag may be NULL (NaN kept).
 * Non-finite inputs: SW_EINVAL.
 */
sw_status sw_stars_from_sky(sw_context *ctx, const sw_camera *cam, int64_t n, const double *ra_deg,
                            const double *dec_deg, const double *flux, const double *mag,
                            double margin_px, sw_stars *out);
/* Reads a sky catalogue CSV with columns ra_deg, dec_deg and flux_e or mag (as
 * sw_stars_read_csv: flux_e wins when both are present) and projects it (sw_stars_from_sky). */
sw_status sw_stars_read_sky_csv(sw_context *ctx, const char *path, const sw_camera *cam,
                                double zero_point, double ratio, double margin_px, sw_stars *out);

/*
 * Writes the truth table: a CSV x_px,y_px,flux_e,mag of the stars whose centre lies on the
 * detector, -0.5 <= x < width - 0.5 and -0.5 <= y < height - 0.5 (pixel (0,0) spans
 * [-0.5, 0.5)), in the order of the list. mag is written as "nan" for stars given by flux only.
 * *written (may be NULL) receives the number of rows.
 */
sw_status sw_stars_write_truth(sw_context *ctx, const char *path, const sw_stars *stars,
                               int32_t width, int32_t height, int64_t *written);

/* ------------------------------------------------------------------ rendering */

typedef enum sw_psf_mode {
    SW_PSF_SAMPLED = 0,   /* Li et al.: Eq. (2) evaluated at the pixel centre                   */
    SW_PSF_INTEGRATED = 1 /* Eq. (2) integrated over the pixel (erf differences): conserves flux */
} sw_psf_mode;

typedef enum sw_starsim_method {
    SW_STARSIM_AUTO = 0,         /* GPU: parallel or adaptive by the measured inflection point;
                                    CPU: OpenMP                                                   */
    SW_STARSIM_SEQUENTIAL = 1,   /* CPU, one thread: Li et al.'s baseline (Fig. 5)                */
    SW_STARSIM_OPENMP = 2,       /* CPU, threads own bands of rows and walk all stars: no atomics,
                                    bit-identical to SEQUENTIAL and for any thread count          */
    SW_STARSIM_PARALLEL = 3,     /* GPU: one block per star, threads over ROI pixels, atomics
                                    (Li et al. Fig. 6)                                            */
    SW_STARSIM_ADAPTIVE = 4,     /* GPU: look-up table of ROI intensity matrices per sub-pixel
                                    phase, read through the read-only cache (Li et al. III.C)     */
    SW_STARSIM_DETERMINISTIC = 5 /* GPU or CPU: bit-identical images run after run (GPU:
                                    fixed-point integer accumulation; CPU: the OpenMP renderer,
                                    which is deterministic)                                      */
} sw_starsim_method;

/* Largest ROI side accepted: 4096 px (16.8 Mpixel per star; no limit comes from thread-block
 * sizes, and ROI pixel counts stay within 32-bit integers). */
#define SW_STARSIM_MAX_ROI_SIDE 4096

/* DETERMINISTIC on the GPU sums 64-bit fixed point with a quantum of 2^-16 e-: a run's total
 * flux must stay below this (e-), so that no pixel's sum can overflow. */
#define SW_STARSIM_DETERMINISTIC_MAX_FLUX 1e14

typedef struct sw_starsim_params {
    int32_t width, height; /* image size, pixels                                           */
    double sigma;          /* PSF standard deviation, pixels (> 0)                         */
    int32_t roi_side;      /* ROI side in pixels, 1 .. SW_STARSIM_MAX_ROI_SIDE and the image  */
    sw_psf_mode psf;
    sw_starsim_method method;
    int32_t phase_bins; /* adaptive: sub-pixel phase bins per axis, 1..4096 (default 256) */
    int64_t max_stars;  /* stars one run may take (buffers are sized at create)         */
} sw_starsim_params;

void sw_starsim_params_default(sw_starsim_params *p);

typedef struct sw_starsim sw_starsim;

/*
 * Validates and allocates everything (device buffers, the look-up table). SW_EINVAL for: a size
 * outside 1..SW_IMAGE_MAX_DIM per side or SW_IMAGE_MAX_PIXELS in all, sigma not positive and
 * finite, roi_side < 1 or larger than the image's larger side, phase_bins outside 1..4096,
 * max_stars outside 1..2^31-1, an unknown psf or method. PARALLEL and ADAPTIVE on a CPU context:
 * SW_EUNSUPPORTED. The OpenMP renderer uses the context's thread count (sw_context_threads).
 */
sw_status sw_starsim_create(sw_context *ctx, const sw_starsim_params *p, sw_starsim **out);
/*
 * Renders the stars into out, an f32 image of width x height (host or, on CUDA, device memory),
 * which is first cleared. Stars whose ROI misses the image are skipped; ROIs are clipped at the
 * edges. NaN/Inf positions or fluxes, negative fluxes or fluxes beyond float, more than
 * max_stars stars, an output that is not f32 of the plan's size: SW_EINVAL, out untouched.
 * On a CUDA context the GPU methods render a host `out` into a device image kept in the plan and
 * copy it; SEQUENTIAL and OPENMP render a device `out` on the host and copy it.
 * A pinned host `out` (sw_image_alloc on the CUDA context) from a GPU method is rendered in bands
 * of rows (sw_starsim_set_bands): the stars are sorted by the band of their ROI's first row while
 * they are packed, each band's stars are uploaded, rendered and its rows copied back while the
 * next band renders, so that the image's copy overlaps the rendering (a pageable `out` takes the
 * whole image, then one copy). The pixels are those of the whole-image order: DETERMINISTIC gives
 * the same bits; PARALLEL and ADAPTIVE add each pixel's contributions with float atomics in an
 * order that was never fixed, banded or not.
 */
sw_status sw_starsim_run(sw_starsim *plan, const sw_stars *stars, sw_image *out);
/*
 * Bands of rows for runs of GPU methods into pinned host images (above): 0 (default) chooses (about
 * 512 KiB of image per band, at most SW_STARSIM_MAX_BANDS, every band at least roi_side rows);
 * 1 renders the whole image, then copies it; n > 1 asks for n bands (fewer when the bands would
 * be shorter than roi_side). SW_EINVAL outside 0..SW_STARSIM_MAX_BANDS. No effect on the CPU.
 */
#define SW_STARSIM_MAX_BANDS 32
sw_status sw_starsim_set_bands(sw_starsim *plan, int32_t bands);
/* The method a run uses (AUTO resolved for the last run's star count; before the first run, for
 * max_stars stars). */
sw_starsim_method sw_starsim_method_used(const sw_starsim *plan);
/* Stars of the last run whose ROI touched the image (the others were skipped). */
int64_t sw_starsim_rendered(const sw_starsim *plan);
void sw_starsim_destroy(sw_starsim *plan);
/* Device time (CUDA events, microseconds) of the last run's rendering kernels on the GPU: the
 * clearing, star upload and any copy back to the host are outside (a run in bands into a host
 * image: from the first band's rendering to the last's, the waits for the bands' stars
 * included). -1 when the last run was on the CPU or there was none. Waits for the run to
 * finish. */
double sw_starsim_render_us(sw_starsim *plan);

const char *sw_starsim_method_string(sw_starsim_method m);
sw_status sw_starsim_method_parse(const char *text, sw_starsim_method *out);

/* ------------------------------------------------------------------ detector */

typedef struct sw_detector {
    double sky_e;           /* sky background, e- per pixel per exposure                     */
    double dark_e;          /* dark current x exposure, e- per pixel                           */
    int shot_noise;         /* non-zero: Poisson noise on signal + sky + dark                  */
    double read_noise_e;    /* Gaussian read noise, e- RMS                                     */
    double gain_e_per_adu;  /* e- per ADU (> 0)                                                */
    double bias_adu;        /* offset added in ADU                                             */
    double full_well_e;     /* saturation in e- (0: none)                                      */
    sw_pixel_type out_type; /* u8/u16/u32 (ADC: rounded, clamped to the type) or f32 (no ADC) */
    uint64_t seed;          /* noise seed: same seed, same noise on the CPU and the GPU        */
} sw_detector;

void sw_detector_default(sw_detector *d);

/*
 * ADU = clamp(round((min(Poisson(e + sky + dark), full_well) + N(0, read)) / gain + bias)).
 * electrons: f32 expected electrons (from sw_starsim_run); out: an image of d->out_type of the
 * same size, in the same memory (host, or device on CUDA). Pixel (x, y) draws its noise with
 * index y * width + x (src/sim/noise.h), so the CPU and the GPU give the same image; rounding is
 * to nearest (ties to even), then clamped to the type's range. In place is allowed for an f32
 * output over the same pixels. Non-finite electrons: SW_ERANGE; bad parameters (non-finite,
 * negative noise, gain <= 0): SW_EINVAL; out untouched. Host images on a CUDA context are
 * processed on the CPU.
 */
sw_status sw_detector_apply(sw_context *ctx, const sw_detector *d, const sw_image *electrons,
                            sw_image *out);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_SIM_H */
