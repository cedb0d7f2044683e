/*
 * spotwave sim (Shack-Hartmann): pupils, wavefronts, and SH spot-pattern rendering with true
 * centroids. Turbulence is in turbulence.h, synthetic eyes in sim_eye.h.
 *
 * Frames (geometry.h for the detector side):
 *   Pupil plane: (u, v) in micrometres, at the lenslet array, origin at the centre of the array's
 *   footprint, u along the detector's +x and v along +y. With p = sw_sh_lenslet_um(geom), lenslet
 *   (ix, iy) covers u in [(ix - nx/2) p, (ix + 1 - nx/2) p), v likewise, and images onto the
 *   detector with its axis at the reference position (geometry.h):
 *       x = x0 - 0.5 + d (u / p + nx / 2),   y = y0 - 0.5 + d (v / p + ny / 2).
 *   Wavefront: optical path difference W(u, v) in micrometres (a positive W is a delay; Zernike
 *   coefficients, OSA sign, add minus their sum: see sw_shsim_add_zernike).
 *
 * Spot models (sw_shsim_params.model):
 *   GEOMETRIC   - each lenslet's spot is centred at reference + F * <grad W> (pixels), with
 *                 F = sw_sh_px_per_rad(geom) and <grad W> the mean gradient of W over the
 *                 lenslet's illuminated area (weights: the pupil's coverage of each sample).
 *                 The spot is a pixel-integrated Gaussian of sigma_px, or the square lenslet's
 *                 Fraunhofer pattern sinc^2(x / z) sinc^2(y / z), z = lambda f / p in pixels
 *                 (averaged over oversample^2 points per pixel), drawn in a roi_px square around
 *                 the spot. Flux: flux_e x illuminated fraction.
 *   DIFFRACTION - per lenslet, the field A(u, v) exp(i 2 pi W / lambda) over the lenslet square
 *                 (A: coverage of each sample by pupil and lenslet) is zero-padded to fft_size^2
 *                 and Fourier transformed; the focal plane is sampled at pixel / oversample and
 *                 |E|^2 summed over oversample^2 samples per detector pixel. The pupil sample
 *                 spacing is lambda f oversample / (pixel fft_size) (so that one FFT bin is one
 *                 focal sample). Each lenslet's focal window is centred on its spot's true
 *                 position (reference + F <grad W>): the tilt <grad W> is taken out of the
 *                 field and the offset between the true position and the focal sample grid put
 *                 back as an exact tilt, so wrapped tails stay symmetric about the spot and a
 *                 spot displaced by more than half a pitch does not fold back. Light falling
 *                 outside the lenslet's own region lands on its neighbours' pixels (cross-talk),
 *                 as on a real sensor; light beyond the window is dropped (a few % for the
 *                 automatic window of two pitches: raise fft_size to keep more).
 *                 Flux: flux_e x (sum A^2) / (lenslet area in samples), so that a fully lit
 *                 lenslet's peak is right.
 *
 * Truth (sw_shsim_truth): per lenslet, in flat index order l = iy * nx + ix:
 *   ref_x_px, ref_y_px - the reference position (flat wavefront);
 *   x_px, y_px         - reference + F <grad W>: the spot's centre for GEOMETRIC and, by the
 *                        average-tilt theorem, the centre of gravity of the DIFFRACTION spot
 *                        (weights: the lit area A of each sample, in both models: with A^2
 *                        the samples cut by a lenslet edge count too little, measured 0.05 px
 *                        off at 10 samples per lenslet against 0.009 px with A);
 *   slope_x, slope_y   - <grad W> in radians;
 *   illum              - illuminated fraction of the lenslet, 0..1 (area covered by the pupil).
 *   Lenslets with illum <= min_illum, or marked invalid in geom.valid, are not rendered, and their
 *   x_px, y_px, slopes are NaN.
 */
#ifndef SPOTWAVE_SIM_SH_H
#define SPOTWAVE_SIM_SH_H

#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/geometry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ pupils */

/*
 * An elliptical (circular when a = b) pupil with an optional central obscuration, in pupil-plane
 * coordinates. A point (u, v) is inside when, with (u', v') its offset from the centre rotated by
 * -angle, (u'/a)^2 + (v'/b)^2 <= 1 and, if obscuration > 0, (u'/(o a))^2 + (v'/(o b))^2 >= 1.
 * a_um = 0 means "no pupil": the whole lenslet array is illuminated.
 */
typedef struct sw_pupil {
    double cu_um, cv_um; /* centre (offset from the array's centre) */
    double a_um, b_um;   /* semi-axes; a along the direction angle_deg from +u towards +v */
    double angle_deg;
    double obscuration; /* 0 <= o < 1: central obscuration as a fraction of the semi-axes */
} sw_pupil;

/* A circular pupil of the given diameter, centred. */
sw_pupil sw_pupil_circle(double diameter_um);
/* Checks a pupil: finite, a, b > 0 or both 0 (no pupil), 0 <= obscuration < 1. */
sw_status sw_pupil_check(sw_context *ctx, const sw_pupil *p);
/* 1 when (u, v) is inside the pupil (always 1 for a_um = 0). */
int sw_pupil_contains(const sw_pupil *p, double u, double v);

/* ------------------------------------------------------------------ sampled wavefronts */

/*
 * An optical path difference map sampled on a regular grid in the pupil plane: sample (i, k)
 * (column i, row k) is at u = u0_um + i * spacing_um, v = v0_um + k * spacing_um, value
 * opd_um[k * nu + i]. NaN samples are allowed only where no light falls
 * (in maps built in memory: sw_wavefront_read_fits refuses NaN).
 */
typedef struct sw_wavefront {
    int32_t nu, nv;
    double spacing_um;
    double u0_um, v0_um;
    double *opd_um; /* host memory, nu * nv */
} sw_wavefront;

/* Allocates a zeroed map centred on the pupil origin (u0 = -(nu - 1) spacing / 2, v0 likewise). */
sw_status sw_wavefront_alloc(sw_context *ctx, int32_t nu, int32_t nv, double spacing_um,
                             sw_wavefront *out);
void sw_wavefront_free(sw_wavefront *w); /* NULL-safe, leaves a zeroed struct */
/* Bilinear interpolation at (u, v); NaN outside the sampled area [u0, u0 + (nu-1) s]. */
double sw_wavefront_sample(const sw_wavefront *w, double u, double v);
/*
 * Reads a phase screen from the first image HDU of a FITS file (2-D, any numeric type) as OPD:
 * opd = value * scale_um (scale_um: micrometres per file unit; for a phase in radians at
 * wavelength lambda, scale = lambda / (2 pi)), sample spacing spacing_um, centred on the pupil
 * origin. Non-2-D data, NaN/Inf values, spacing or scale not positive and finite: SW_EFORMAT /
 * SW_EINVAL with the path.
 */
sw_status sw_wavefront_read_fits(sw_context *ctx, const char *path, double spacing_um,
                                 double scale_um, sw_wavefront *out);
/* Writes the map as a 2-D FITS float image (micrometres). */
sw_status sw_wavefront_write_fits(sw_context *ctx, const char *path, const sw_wavefront *w);

/* ------------------------------------------------------------------ SH rendering */

typedef enum sw_sh_model { SW_SH_GEOMETRIC = 0, SW_SH_DIFFRACTION = 1 } sw_sh_model;
typedef enum sw_sh_spot { SW_SH_SPOT_GAUSSIAN = 0, SW_SH_SPOT_SINC2 = 1 } sw_sh_spot;

typedef struct sw_shsim_params {
    int32_t width, height; /* image size                                                   */
    sw_sh_geometry geom;   /* the lenslet grid; must fit the image (sw_sh_geometry_check)  */
    sw_sh_model model;
    sw_sh_spot spot;      /* GEOMETRIC only: spot shape                                   */
    double wavelength_um; /* > 0 (default 0.8)                                            */
    double sigma_px;      /* GEOMETRIC Gaussian sigma; 0: 0.42 lambda f / (p pixel), the
                             Gaussian closest to the lenslet's Airy-like core             */
    double flux_e;        /* photo-electrons of a fully illuminated lenslet (default 5e4) */
    int32_t roi_px;       /* GEOMETRIC: side of the square drawn around each spot; 0: the
                             lenslet pitch rounded up, plus 2                             */
    int32_t samples;      /* GEOMETRIC: pupil samples per lenslet side for <grad W>
                             (0: 16)                                                      */
    int32_t oversample;   /* focal samples per pixel side (sinc^2 spot, DIFFRACTION);
                             0: automatic (>= 2 and Nyquist for |E|^2)                    */
    int32_t fft_size;     /* DIFFRACTION: FFT side; 0: automatic (smallest 2^a 3^b 5^c
                             covering twice the lenslet pitch in focal samples); left 0
                             by GEOMETRIC plans                                           */
    sw_pupil pupil;       /* illuminated area (a_um = 0: all lenslets fully lit)          */
    double min_illum;     /* lenslets lit to this fraction or less are not drawn (0)      */
} sw_shsim_params;

void sw_shsim_params_default(sw_shsim_params *p);

typedef struct sw_shsim sw_shsim;

/*
 * Validates everything (geometry inside the image, pupil, positive finite optics, sizes), works
 * out the automatic sampling, and allocates (host grids; on CUDA device buffers and cuFFT plans).
 * The OPD starts flat (zero). SW_EINVAL with a message for bad parameters; SW_ENOMEM.
 */
sw_status sw_shsim_create(sw_context *ctx, const sw_shsim_params *p, sw_shsim **out);
void sw_shsim_destroy(sw_shsim *plan);
/* The parameters after the automatic choices (sigma_px, roi_px, oversample, fft_size filled). */
const sw_shsim_params *sw_shsim_params_used(const sw_shsim *plan);

/* OPD: the plan holds W sampled on its own pupil grid. clear sets it to zero; add_zernike adds
 * the wavefront sum_j coef_um[j] Z_j over a circle of radius radius_um centred on the pupil's
 * centre (zernike.h conventions, evaluated analytically at every sample, also outside the
 * circle). Zernike coefficients follow OSA/ANSI Z80.28: a positive wavefront LEADS (is phase
 * advanced), so a myopic eye has c(2,0) > 0; the OPD (a delay) is therefore minus the sum, and
 * a spot moves by -F <grad sum_j c_j Z_j>. add_wavefront
 * adds scale * (bilinear interpolation of w), and fails (SW_EINVAL) when a lit sample falls
 * outside w's area. NaN/Inf coefficients or scale: SW_EINVAL, OPD untouched. */
sw_status sw_shsim_clear_opd(sw_shsim *plan);
sw_status sw_shsim_add_zernike(sw_shsim *plan, const double *coef_um, int32_t count,
                               double radius_um);
sw_status sw_shsim_add_wavefront(sw_shsim *plan, const sw_wavefront *w, double scale);

/*
 * CUDA contexts only (SW_EUNSUPPORTED on the CPU): replaces the OPD by a map in device memory,
 * laid out as sw_wavefront's (sample (i, k) at u = u0_um + i spacing_um, v = v0_um + k
 * spacing_um, value opd[k nu + i], um, nu x nv floats, row-major, no padding). On the device, and
 * queued on the context's stream with no synchronisation: the map is resampled onto the plan's
 * pupil grid as sw_shsim_add_wavefront does (sw_wavefront_sample's bilinear rule, NaN outside the
 * map), and each lenslet's mean gradient, spot position and renderer input are computed there, so
 * that the next sw_shsim_run renders it with no host work and no upload. The map must stay valid
 * until that run has executed on the stream. The first call allocates this path's device
 * buffers (9 bytes per pupil-grid sample, 13 for GEOMETRIC, and 32 per drawn lenslet); later
 * calls allocate nothing. Checked: the arguments, and that the map's area
 * covers every lit pupil sample (SW_EINVAL otherwise, OPD untouched); the values are not read on
 * the host, so NaN/Inf in the map are not detected (a lenslet whose spot comes out NaN is not
 * drawn). The host's copy of the OPD is then stale: sw_shsim_truth returns SW_EUNSUPPORTED and
 * sw_shsim_add_zernike / sw_shsim_add_wavefront refuse (SW_EUNSUPPORTED) until
 * sw_shsim_clear_opd, which returns the plan to a zero OPD held on the host.
 */
sw_status sw_shsim_set_opd_device(sw_shsim *plan, const float *opd, int32_t nu, int32_t nv,
                                  double spacing_um, double u0_um, double v0_um);

/*
 * Renders the current OPD into out: an f32 image of the plan's size, expected photo-electrons
 * (then sw_detector_apply for noise). accumulate = 0 clears out first; 1 adds to it (several
 * pupils, e.g. two eyes, on one sensor). out in host memory, or device memory on a CUDA context.
 * Wrong size or type: SW_EINVAL, out untouched.
 */
sw_status sw_shsim_run(sw_shsim *plan, sw_image *out, int accumulate);
/* Device time of the last GPU run (CUDA events, microseconds); -1 for CPU runs or none. */
double sw_shsim_render_us(sw_shsim *plan);

/* Truth of the current OPD (see the top of this file). SW_EUNSUPPORTED after
 * sw_shsim_set_opd_device (see there). */
typedef struct sw_sh_truth {
    int32_t nx, ny;
    double *x_px, *y_px; /* nx * ny each */
    double *ref_x_px, *ref_y_px;
    double *slope_x, *slope_y; /* radians */
    double *illum;
} sw_sh_truth;

sw_status sw_shsim_truth(sw_shsim *plan, sw_sh_truth *out);
void sw_sh_truth_free(sw_sh_truth *t); /* NULL-safe */
/* CSV `ix,iy,x_px,y_px,ref_x_px,ref_y_px,illum` (DESIGN.md), one row per lenslet (NaN written as
 * "nan"). */
sw_status sw_sh_truth_write_csv(sw_context *ctx, const char *path, const sw_sh_truth *t);

const char *sw_sh_model_string(sw_sh_model m);
sw_status sw_sh_model_parse(const char *text, sw_sh_model *out);
const char *sw_sh_spot_string(sw_sh_spot s);
sw_status sw_sh_spot_parse(const char *text, sw_sh_spot *out);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_SIM_SH_H */
