/*
 * spotwave zernike fitting: Shack-Hartmann slopes -> Zernike coefficients (Mompean et al. section
 * 3.3), wavefront maps (section 3.4), pupil transforms and refraction. The basis itself (indices,
 * normalisation, evaluation, the x/y convention) is zernike.h.
 *
 * Papers: Mompean J., Aragon J. L., Prieto P. M., Artal P. 2019, Future Generation Computer
 * Systems 91, 177-190 (Sec. 3.3 the modal fit, Sec. 3.4 the maps); Thibos L. N., Hong X., Bradley
 * A., Applegate R. A. 2004, J. Vision 4(4), 329-351 (refraction from the coefficients).
 *
 * Frames and units.
 *   - The lenslet array images 1:1 onto the detector (geometry.h), so the pupil is given in
 *     detector pixels: centre (pupil_cx_px, pupil_cy_px) and radius R_px; unit-disc coordinates
 *     of a point (x, y) are X = (x - cx) / R_px, Y = (y - cy) / R_px (x = column, y = row, as in
 *     zernike.h). The pupil radius in micrometres is R_um = R_px * pixel_um.
 *   - Lenslet (ix, iy) is the square of side d = pitch_px centred on its reference position
 *     (sw_sh_reference): [x_ref - d/2, x_ref + d/2] x [y_ref - d/2, y_ref + d/2].
 *   - Slopes are spot displacements in pixels (centroid.h). A wavefront W = sum_j c_j Z_j in
 *     micrometres, OSA/ANSI Z80.28 sign (a positive W leads, is phase advanced: a myopic eye has
 *     c(2,0) > 0; the optical path delay is -W, as in sim_sh.h) moves the spot of lenslet l by
 *         dx_l = -F * mean_{A_l} dW/du = -F / R_um * sum_j c_j mean_{A_l} dZ_j/dX,  dy_l likewise,
 *     F = sw_sh_px_per_rad(geometry) = focal_mm * 1000 / pixel_um, A_l the part of the lenslet
 *     inside the pupil (annulus when obscuration > 0). The means are exact: the area integral of
 *     dZ/dX is turned into a boundary integral of Z (Green's theorem) and evaluated with
 *     Gauss-Legendre rules exact for the polynomial on straight edges and converged to 1e-12 on
 *     the pupil's arcs. This is the derivative matrix D (2 n_used rows: x rows then y rows;
 *     J - 1 columns: OSA j = 1 .. J - 1; piston is invisible to slopes and reported as 0).
 *   - Fit: c = argmin || W^(1/2) (D c - s) || over the lenslets used (weights W, per lenslet,
 *     the same for x and y). PINV: c = P s with P = (W^(1/2) D)^+ W^(1/2) precomputed by SVD
 *     (LAPACKE_dgesvd; the `truncate` smallest singular values dropped); QR: Householder QR of
 *     W^(1/2) D (LAPACKE_dgeqrf / cuSOLVER) and a triangular solve per frame. Residual: the RMS
 *     over the used lenslets' x and y slopes of (D c - s), in pixels.
 *   - Invalid lenslets of a frame (a valid flag 0, or a NaN slope) are left out of that frame's
 *     fit: such a frame is solved on its own reduced system (slower), the others in one batch.
 */
#ifndef SPOTWAVE_ZERNIKE_FIT_H
#define SPOTWAVE_ZERNIKE_FIT_H

#include <stdint.h>
#include "spotwave/centroid.h"
#include "spotwave/core.h"
#include "spotwave/geometry.h"
#include "spotwave/zernike.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ pupil transforms */

/*
 * The same wavefront over a concentric smaller pupil: coefficients over radius from_r written in
 * the basis of radius to_r (0 < to_r <= from_r; any unit). Exact (sw_ocular_rescale's method).
 * in and out may be the same array.
 */
sw_status sw_zernike_rescale(sw_context *ctx, const double *in, int32_t count, double from_r,
                             double to_r, double *out);

/*
 * Mirror image about the vertical axis (x -> -x), the OSA convention for turning a left eye's
 * coefficients into the right-eye frame and back: c'(n, m) = (-1)^m c(n, m) for m >= 0 and
 * -(-1)^|m| c(n, m) for m < 0. in and out may be the same array.
 */
void sw_zernike_mirror_x(const double *in, int32_t count, double *out);

/* ------------------------------------------------------------------ refraction */

/*
 * Refraction from the coefficients over a pupil of diameter pupil_mm (Thibos, Hong, Bradley &
 * Applegate 2004, "Accuracy and precision of objective refraction from wavefront aberrations"),
 * power vectors in dioptres with r = pupil_mm / 2:
 *   second order only:   M = -4 sqrt3 c(2,0) / r^2,  J0 = -2 sqrt6 c(2,2) / r^2,
 *                        J45 = -2 sqrt6 c(2,-2) / r^2;
 *   with higher orders (Seidel terms to order 6):
 *                        M   = (-4 sqrt3 c20 + 12 sqrt5 c40 - 24 sqrt7 c60) / r^2,
 *                        J0  = (-2 sqrt6 c22 + 6 sqrt10 c42 - 12 sqrt14 c62) / r^2,
 *                        J45 = (-2 sqrt6 c2-2 + 6 sqrt10 c4-2 - 12 sqrt14 c6-2) / r^2.
 * Sphere / cylinder / axis in minus-cylinder form: cyl = -2 sqrt(J0^2 + J45^2),
 * sphere = M - cyl / 2, axis = atan2(J45, J0) / 2 in [0, 180) degrees, measured from +x towards
 * +y of the zernike.h frame (the inverse of sw_eye_rx_to_zernike). The refraction is the lens
 * that corrects the eye: a positive c(2,0) (myopic wavefront) gives a negative M.
 * vertex_mm > 0: the sphere and the sphere + cylinder meridians moved to a spectacle plane
 * vertex_mm in front of the corneal plane, P' = P / (1 + vertex_mm / 1000 * P).
 */
typedef struct sw_refraction {
    double M, J0, J45;      /* power vector at the corneal plane, dioptres */
    double sphere_d, cyl_d; /* minus-cylinder form (at the vertex distance), dioptres */
    double axis_deg;        /* 0 <= axis < 180 */
} sw_refraction;

sw_status sw_zernike_refraction(sw_context *ctx, const double *coef, int32_t count, double pupil_mm,
                                int higher_orders, double vertex_mm, sw_refraction *out);

/*
 * The same with a chromatic shift: shift_d dioptres are added to M (defocus only; J0 and J45 do not
 * change) before the sphere and cylinder are formed, e.g. sw_eye_lca_d(measured, reference) to
 * turn a refraction measured in the near infrared into the one for visible light.
 * sw_zernike_refraction is this function with shift_d = 0.
 */
sw_status sw_zernike_refraction_shifted(sw_context *ctx, const double *coef, int32_t count,
                                        double pupil_mm, int higher_orders, double vertex_mm,
                                        double shift_d, sw_refraction *out);

/*
 * Longitudinal chromatic aberration of the eye, from the Chromatic Eye of Thibos L. N., Ye M.,
 * Zhang X., Bradley A. 1992, "The chromatic eye: a new reduced-eye model of ocular chromatic
 * aberration in humans", Appl. Opt. 31(19), 3594-3600: the eye's refractive error at wavelength
 * lambda (micrometres) is Rx(lambda) = p - q / (lambda - c) dioptres, q = 0.63346 D um,
 * c = 0.21410 um (the constant p drops out of every difference). Returns
 * Rx(to_um) - Rx(from_um): the dioptres to add to M (or to the sphere) measured at from_um to get
 * the refraction at to_um. The eye is more myopic at short wavelengths, so from 0.78 um to
 * 0.555 um this is -0.739 D. NaN unless both wavelengths are finite and above c (0.2141 um).
 */
double sw_eye_lca_d(double from_um, double to_um);

/*
 * Zernike coefficients of the same wavefront seen through a mirrored image (an instrument whose
 * camera flips the picture): flip_x maps x -> -x, which changes the sign of the terms odd in x
 * (cos(m theta) with m odd, sin(|m| theta) with |m| even: c(1,1), c(2,-2), c(3,1), c(3,3), ...);
 * flip_y maps y -> -y, which changes the sign of the terms odd in y (every sin term, m < 0:
 * c(1,-1), c(2,-2), c(3,-3), c(3,-1), ...). Both: a half turn (the terms of odd m change sign).
 * flip_x alone is sw_zernike_mirror_x. in and out may be the same array.
 */
void sw_zernike_flip(const double *in, int32_t count, int flip_x, int flip_y, double *out);

/*
 * A sphero-cylinder written the other way round (transposition): sphere' = sphere + cyl,
 * cyl' = -cyl, axis' = axis + 90 degrees; minus-cylinder form <-> plus-cylinder form. The axis
 * comes out in clinical notation, 1..180 degrees (0 written as 180). in and out may be the same.
 */
void sw_refraction_transpose(double sphere_d, double cyl_d, double axis_deg, double *sphere_out,
                             double *cyl_out, double *axis_out);

/* An axis in clinical notation: degrees reduced to (0, 180], 0 written as 180 (ISO 8429's
 * "TABO" scale runs 0..180 counter-clockwise as the examiner faces the patient, the same for both
 * eyes; prescriptions write 1..180). NaN stays NaN. */
double sw_refraction_axis_clinical(double axis_deg);

/* ------------------------------------------------------------------ fitting */

typedef enum sw_zfit_method {
    SW_ZFIT_PINV = 0, /* precomputed pseudo-inverse, one matrix product per batch */
    SW_ZFIT_QR = 1    /* least squares through the QR factorisation */
} sw_zfit_method;

typedef struct sw_zfit_params {
    sw_sh_geometry geometry; /* lenslets (reference positions, pitch), pixel_um, focal_mm and the
                                validity mask: the slope vector has one entry per mask lenslet,
                                as sw_centroid_plan_slopes                                       */
    double pupil_cx_px, pupil_cy_px; /* pupil centre on the detector                          */
    double pupil_radius_px;          /* > 0                                                    */
    double obscuration;              /* 0 <= o < 1: central obscuration (annular pupil)        */
    int32_t max_order;               /* fitted radial orders 1 .. max_order (1..10; default 6) */
    double min_illum;       /* lenslets whose area inside the pupil is below this fraction of
                               the lenslet are not used (default 0.5)                           */
    sw_zfit_method method;  /* default PINV                                                     */
    int32_t truncate;       /* PINV: smallest singular values dropped (default 0; QR ignores
                               it)                                                              */
    const double *weights;  /* per lenslet of the grid (nx * ny), >= 0, or NULL (all 1); copied */
    sw_slope_layout layout; /* layout of the slopes given to run (centroid.h), default BLOCKS   */
    int32_t max_frames;     /* largest batch (default 1; at most 65535 on a CUDA context)      */
} sw_zfit_params;

/* A 10 x 10 grid of 16 px (sw_sh_geometry_default), the pupil inscribed in it, order 6, PINV,
 * min_illum 0.5, one frame. */
void sw_zfit_params_default(sw_zfit_params *p);

typedef struct sw_zfit_plan sw_zfit_plan;

/*
 * Builds the derivative matrix and factorises it (SVD or QR; on a CUDA context the factors and
 * matrices are also uploaded). SW_EINVAL with a message for: a bad geometry or pupil, an order
 * outside 1..10, fewer used slopes (2 n_used) than unknowns (J - 1), a singular geometry (rank
 * below J - 1 after truncation, or a truncation leaving nothing), negative or NaN weights.
 */
sw_status sw_zfit_create(sw_context *ctx, const sw_zfit_params *p, sw_zfit_plan **out);
void sw_zfit_destroy(sw_zfit_plan *plan);

/* Coefficients per frame (J = sw_zernike_count(max_order), OSA j = 0 .. J - 1, c_0 = 0). */
int32_t sw_zfit_terms(const sw_zfit_plan *plan);
/* Slopes per frame and axis (the mask lenslets, as the centroid plan's), and how many of them
 * the fit uses (enough illumination, weight > 0). */
int32_t sw_zfit_slopes(const sw_zfit_plan *plan);
int32_t sw_zfit_used(const sw_zfit_plan *plan);
/* Illuminated fraction of slope k's lenslet (0..1), -1 for a bad k. */
double sw_zfit_illum(const sw_zfit_plan *plan, int32_t k);
/* The derivative matrix (host): row r < n (x) or n + r (y) for slope k = r, column j - 1 for
 * OSA j = 1 .. J - 1, pixels per micrometre of coefficient; rows of unused lenslets are 0.
 * 2 n x (J - 1), row-major, n = sw_zfit_slopes. Valid while the plan lives. */
const double *sw_zfit_matrix(const sw_zfit_plan *plan);

/*
 * Fits `frames` frames (1 .. max_frames). slopes: frames * 2 n floats in the plan's layout;
 * valid: NULL or frames * nx * ny flags (the centroid result's `valid`: a lenslet flagged 0 is
 * left out of that frame's fit); coef: frames * J doubles; residual_px: NULL or frames doubles.
 * All arrays in `memory`: SW_MEM_HOST / SW_MEM_PINNED (any context) or SW_MEM_DEVICE (CUDA). On
 * a CUDA context the run has finished when it returns, also for device arrays (it reads back
 * which frames have invalid lenslets, and solves those on the host). A NaN or +-Inf slope counts
 * as invalid. A frame left with fewer used slopes than unknowns
 * gets NaN coefficients and residual, and SW_OK (the run goes on); bad arguments: SW_EINVAL and
 * the outputs untouched.
 */
sw_status sw_zfit_run(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid, int32_t frames,
                      sw_memory memory, double *coef, double *residual_px);

/* ------------------------------------------------------------------ wavefront maps */

typedef struct sw_zmap_params {
    int32_t size;       /* the map is size x size pixels spanning the pupil's bounding square:
                           pixel (i, k) at X = (2 i + 1) / size - 1, Y = (2 k + 1) / size - 1  */
    int32_t max_order;  /* terms j = 0 .. sw_zernike_count(max_order) - 1 (<= 10)            */
    double obscuration; /* 0 <= o < 1: pixels with r < o are outside the pupil too           */
    int half;           /* 1: the basis maps stored as IEEE half (binary16) on the GPU and the
                           CPU, summed in float; 0: float                                       */
} sw_zmap_params;

/* size 256, order 6, no obscuration, float basis. */
void sw_zmap_params_default(sw_zmap_params *p);

typedef struct sw_zmap_plan sw_zmap_plan;

/* Precomputes the basis maps Z_j on the pixel grid (Mompean et al. section 3.4), on the device on a
 * CUDA context. size 1 .. 8192; SW_EINVAL otherwise. */
sw_status sw_zmap_create(sw_context *ctx, const sw_zmap_params *p, sw_zmap_plan **out);
void sw_zmap_destroy(sw_zmap_plan *plan);

/*
 * The wavefront sum_j coef[j] Z_j (count <= the plan's terms; missing terms 0) into out, an f32
 * size x size image (host, or device on a CUDA context), micrometres; pixels outside the pupil
 * NaN. On the GPU the coefficients are kept in shared memory (Mompean et al.'s optimisation 1).
 */
sw_status sw_zmap_run(sw_zmap_plan *plan, const double *coef, int32_t count, sw_image *out);

/*
 * The same map evaluated pixel by pixel without the basis maps: each Zernike term written as a
 * polynomial in r^2 per angular frequency and evaluated in double. Same arguments, checks and
 * output as sw_zmap_run; the CPU and the GPU agree to double rounding. Reads no basis, so it is the
 * faster method for large maps (BENCHMARKS.md).
 */
sw_status sw_zmap_run_direct(sw_zmap_plan *plan, const double *coef, int32_t count, sw_image *out);

/*
 * Mompean et al.'s display (section 3.4): frac(W / wavelength_um) scaled to 0..255 into a u8 image
 * of the map's size (host or device); outside the pupil 0. From an f32 map made by sw_zmap_run.
 */
sw_status sw_zmap_wrap(sw_context *ctx, const sw_image *map, double wavelength_um, sw_image *out);

/* Writes a map as a PNG for people: diverging colour scale symmetric about 0, a colour bar
 * labelled in micrometres, NaN (outside the pupil) transparent. */
sw_status sw_zmap_write_png(sw_context *ctx, const char *path, const sw_image *map);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_ZERNIKE_FIT_H */
