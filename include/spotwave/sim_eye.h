/*
 * spotwave sim (eyes): synthetic ocular aberrations drawn from a population, and Hartmann-Shack
 * images of one or two eyes with the artefacts of living eyes (Mompean et al. 2019, Sec. 2.1, 3.1,
 * 4.1, 4.3; papers below).
 *
 * Papers: Mompean J., Aragon J. L., Prieto P. M., Artal P. 2019, Future Generation Computer
 * Systems 91, 177-190 (the test images: Sec. 2.1, 3.1, 4.1, 4.3); Thibos L. N., Hong X., Bradley
 * A., Cheng X. 2002, "Statistical variation of aberration structure and image quality in a normal
 * population of healthy eyes", J. Opt. Soc. Am. A 19(12), 2329-2348 (the population).
 *
 * Units:
 *   - Zernike coefficients: micrometres of optical path difference, OSA/ANSI single index j from 0,
 *     orthonormal (RMS-normalised) over a pupil whose diameter is stated in millimetres
 *     (zernike.h conventions). The RMS of a set is sqrt(sum c_j^2) over the terms it names.
 *   - Refraction: dioptres (sphere, cylinder), axis in degrees.
 *   - Detector quantities: pixels (0-based, centre of pixel (0,0) at (0.0, 0.0)), electrons (e-).
 *
 * Population (Mompean et al. Sec. 4.1: "the weight of each Zernike order was set to comply with the
 * statistics [...] for a population of normal subjects"): a multivariate normal of the mean and
 * covariance of the Thibos et al. (2002) data files (data/ocular/README.md), one set per pupil
 * diameter 3.0, 4.5, 6.0 and 7.5 mm. A draw is mean + L z with L the lower Cholesky factor of the
 * covariance (LAPACKE_dpotrf) and z standard normals from rng.h.
 *
 * Refraction to Zernike (power vectors, Thibos, Wheeler & Horner 1997; OSA convention, r the pupil
 * radius in mm):
 *     M = S + C / 2,  J0 = -(C / 2) cos 2a,  J45 = -(C / 2) sin 2a,
 *     c(2,0) = -M r^2 / (4 sqrt 3),  c(2,2) = -J0 r^2 / (2 sqrt 6),  c(2,-2) = -J45 r^2 / (2 sqrt
 * 6) (dioptres x mm^2 = micrometres). A myope (S < 0) gets a positive defocus coefficient.
 *
 * The eye image (Mompean et al. Fig. 1, 2): per eye, the SH spot pattern of its aberration through
 * its pupil (sim_sh.h), on one lenslet grid covering the detector; then, on the host:
 *   glow        the diffuse retinal reflection that back-lights each pupil (what the pupil tracker
 *               of Sec. 3.1 sees against the nearly black iris): glow_e (1 - glow_falloff rho^2)
 *               inside the pupil ellipse (rho its normalised radius), the edge blurred by a
 *               Gaussian of glow_edge_px;
 *   brightness  a multiplicative map 1 + A s(x, y), |s| <= 1, s a weighted sum of
 *               brightness_modes random plane waves of 0.25 to 1 cycle per pupil radius (reduced
 *               transparency of the lens, Sec. 1), per eye in that eye's pupil coordinates
 *               (a pixel takes the map of the eye whose pupil is nearest in normalised radius);
 *   tear film   tear_blobs Gaussian blobs per eye (centres uniform in the pupil, sigma
 *               tear_radius x pupil radius): the intensity drops by tear_depth at a blob's centre
 *               and the image is blended there with a copy blurred by tear_blur_px;
 *   reflection  a corneal reflection per eye: a Gaussian blob of peak reflection_e and sigma
 *               reflection_sigma_px, centred at a random offset of up to reflection_offset x the
 *               pupil radius from the pupil centre (it may saturate the detector);
 *   white noise additive Gaussian noise of white_noise_e over the whole image.
 * Order: (spots + glow) x brightness x tear dip, blended with the blurred copy, + reflection
 * + white noise. The result is an f32 image of expected electrons (white noise included: it may be
 * negative) for sw_detector_apply (sim.h).
 *
 * Randomness: all from rng.h, so a seed gives the same image everywhere. Population draw b of eye
 * index i: sw_rng_draw(seed, SW_RNG_STREAM_EYE, i * 256 + b) gives z_{2b}, z_{2b+1}
 * (sw_rng_normal2). Artefacts: sw_rng_draw(seed, SW_RNG_STREAM_ARTEFACTS, eye << 48 | kind << 40 |
 * k) for kind 1 (reflection), 2 (brightness mode k), 3 (tear blob k); white noise at pixel
 * p = y * width + x: the first normal of draw (15 << 40 | p).
 *
 * Backends: the spots are rendered by the SH simulator on the context's backend; the artefacts
 * are computed on the CPU (on a CUDA context the spots are copied to the host image first).
 */
#ifndef SPOTWAVE_SIM_EYE_H
#define SPOTWAVE_SIM_EYE_H

#include <stddef.h>
#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/geometry.h"
#include "spotwave/sim_sh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ population */

/* Population pupil diameters with data files, mm. */
#define SW_OCULAR_PUPILS_COUNT 4
extern const double sw_ocular_pupils_mm[SW_OCULAR_PUPILS_COUNT]; /* 3.0, 4.5, 6.0, 7.5 */

/* The folder of the population files: <sw_data_dir>/ocular (core.h says where sw_data_dir looks:
 * $SPOTWAVE_DATA_DIR first, then share/spotwave beside the installed library). Written into
 * buf; SW_EINVAL when it does not fit, SW_EIO when no data folder exists. */
sw_status sw_ocular_default_dir(sw_context *ctx, char *buf, size_t size);

typedef struct sw_ocular_population {
    double pupil_mm; /* pupil diameter of the statistics                                  */
    int32_t count;   /* terms j = 0 .. count - 1 (15, 28, 36 or 66 for the four files)     */
    double *mean_um; /* count: population mean                                            */
    double *sd_um;   /* count: standard deviation (as in the stats file)                  */
    double *cov_um2; /* count x count, row-major, symmetric                              */
    double *chol;    /* count x count, row-major: lower Cholesky factor L, cov = L L^T     */
} sw_ocular_population;

/*
 * Loads thibos2002_pupil<D>mm_stats.csv (columns j,n,m,mean_um,sd_um, one row per j = 0, 1, ...
 * in order) and thibos2002_pupil<D>mm_cov.csv ('#' comment lines, then count rows of count
 * numbers) from dir (NULL: sw_ocular_default_dir). pupil_mm must be one of sw_ocular_pupils_mm
 * (within 1e-6 mm): otherwise SW_EINVAL naming the available ones. Checks: j in order with (n, m)
 * matching j, finite values, sd >= 0, a square count x count symmetric covariance (relative
 * 1e-9), sd = sqrt(diagonal) (to 1e-5 um + 1e-3 relative), positive definite (Cholesky).
 * Missing file: SW_EIO; malformed: SW_EFORMAT; both naming the file. *out zeroed on failure.
 */
sw_status sw_ocular_population_load(sw_context *ctx, const char *dir, double pupil_mm,
                                    sw_ocular_population *out);
void sw_ocular_population_free(sw_ocular_population *p); /* NULL-safe, leaves a zeroed struct */

/* A spectacle refraction in minus-cylinder or plus-cylinder form (any sign of cyl_d). */
typedef struct sw_eye_rx {
    double sphere_d, cyl_d; /* dioptres */
    double axis_deg;        /* cylinder axis, degrees */
} sw_eye_rx;

/* The second-order coefficients of a refraction over a pupil of diameter pupil_mm (see the top):
 * out[0] = c(2,-2) (j = 3), out[1] = c(2,0) (j = 4), out[2] = c(2,2) (j = 5), micrometres. */
void sw_eye_rx_to_zernike(const sw_eye_rx *rx, double pupil_mm, double out[3]);

/*
 * Zernike coefficients over a pupil of diameter from_mm re-expressed over the concentric smaller
 * pupil to_mm (0 < to_mm <= from_mm): the same wavefront, restricted to the smaller disc, written
 * in the Zernike basis of that disc (exact: a polynomial of order n stays one of order <= n; the
 * coefficients are found by least squares on sample points, LAPACKE_dgels). in and out may be the
 * same array. Piston is kept (it changes). count up to sw_zernike_count(SW_ZERNIKE_MAX_ORDER).
 */
sw_status sw_ocular_rescale(sw_context *ctx, const double *in, int32_t count, double from_mm,
                            double to_mm, double *out);

/* What sw_ocular_draw and sw_ocular_apply do to a set of coefficients, in this order. */
typedef struct sw_ocular_options {
    double pupil_mm;     /* pupil of the result; 0: the source's; else <= the source's (the
                            coefficients are rescaled, sw_ocular_rescale)                     */
    int32_t max_order;   /* terms of radial order above this are set to 0 (< 0: keep all)     */
    int keep_tilt;       /* 0 (default): tilts j = 1, 2 set to 0 (a tilt moves every spot
                            alike: alignment, not aberration); 1: kept                          */
    sw_eye_rx rx;        /* added to the second order (zeros: nothing)                         */
    double total_rms_um; /* > 0: all terms j >= 3 scaled by one factor so that
                            sqrt(sum_{j>=3} c_j^2) = total_rms_um (Mompean et al. Sec. 4.3's
                            RMS, refraction included, tilts not); 0: as they are               */
} sw_ocular_options;

/* pupil 0 (the source's), all orders, tilts zeroed, no refraction, no RMS scaling. */
void sw_ocular_options_default(sw_ocular_options *o);

/*
 * Applies opt to in (in_count terms over a pupil of in_pupil_mm): rescale to opt->pupil_mm,
 * piston (j = 0) set to 0, orders above max_order and (unless keep_tilt) tilts set to 0,
 * refraction added over the result's pupil, then the RMS scaling. Writes out[0 .. count - 1]
 * (terms beyond in_count are 0; terms beyond count are dropped). SW_EINVAL for: non-finite input,
 * count < 1, a refraction with count < 6, total_rms_um > 0 with no term j >= 3 left to scale,
 * opt->pupil_mm larger than in_pupil_mm. in and out may be the same array when count ==
 * in_count.
 */
sw_status sw_ocular_apply(sw_context *ctx, const double *in, int32_t in_count, double in_pupil_mm,
                          const sw_ocular_options *opt, double *out, int32_t count);

/*
 * Draws eye number index from the population under seed (see the top for the RNG draws): mean +
 * L z over the population's pupil, then sw_ocular_apply(opt) (opt NULL: the defaults).
 * index < 2^56.
 */
sw_status sw_ocular_draw(sw_context *ctx, const sw_ocular_population *pop, uint64_t seed,
                         uint64_t index, const sw_ocular_options *opt, double *out, int32_t count);

/* ------------------------------------------------------------------ eye images */

/* One eye as the detector sees it. */
typedef struct sw_eye {
    double cx_px, cy_px;   /* pupil centre on the detector, pixels                              */
    double diameter_px;    /* pupil diameter on the detector along its major axis, pixels (> 0)  */
    double ellipticity;    /* minor / major axis, (0, 1] (1: a circle)                           */
    double angle_deg;      /* major-axis direction, degrees from +x towards +y                  */
    double pupil_mm;       /* the eye's physical pupil diameter: the coefficients' pupil (> 0).
                              The Zernike circle is the ellipse's circumscribed circle (radius
                              diameter_px / 2 on the detector), so on the detector the pupil is
                              magnified by diameter_px * pixel_um / (1000 pupil_mm).             */
    const double *coef_um; /* OSA coefficients over pupil_mm (NULL or count 0: flat wavefront)  */
    int32_t count;
} sw_eye;

typedef struct sw_eye_artefacts {
    double glow_e;              /* retinal glow at the pupil centre, e-/px (0: none)          */
    double glow_falloff;        /* fraction of the glow lost at the pupil edge, 0..1         */
    double glow_edge_px;        /* sigma of the pupil edge's blur, px (0: a sharp edge)       */
    double reflection_e;        /* peak of the corneal reflection, e- (0: none)              */
    double reflection_sigma_px; /* its Gaussian sigma, px (> 0 when reflection_e > 0)         */
    double reflection_offset;   /* largest offset from the pupil centre, x pupil radius, 0..1 */
    double brightness;          /* amplitude A of the brightness map, 0 <= A < 1 (0: none)    */
    int32_t brightness_modes;   /* plane waves in the map, 1..64                              */
    int32_t tear_blobs;         /* tear-film break-up blobs per eye, 0..1000 (0: none)        */
    double tear_depth;          /* intensity drop at a blob's centre, 0..1                     */
    double tear_radius;         /* blob sigma as a fraction of the pupil radius, (0, 1]       */
    double tear_blur_px;        /* blur sigma at a blob's centre, px (0: no blur)             */
    double white_noise_e;       /* additive Gaussian noise, e- RMS (0: none)                  */
} sw_eye_artefacts;

/* The look of Mompean et al.'s test set: glow 20 e-/px (falloff 0.3, edge 1.5 px), a reflection of
 * 600 e- peak (sigma 12 px, offset up to 0.3 radius), brightness map +-30% (6 modes), no tear
 * film (tear_depth 0.5, radius 0.15, blur 2 px when enabled), white noise 3 e-. */
void sw_eye_artefacts_default(sw_eye_artefacts *a);
/* All artefacts off (the parameters of the default kept, the switches at 0). */
void sw_eye_artefacts_none(sw_eye_artefacts *a);

typedef struct sw_eyesim_params {
    sw_shsim_params sh; /* image size, lenslet grid (covering the detector), spot model, flux,
                           ... (sim_sh.h); sh.pupil is ignored: each eye gives its own        */
    int32_t n_eyes;     /* 1 or 2                                                              */
    sw_eye eyes[2];
    sw_eye_artefacts art;
    uint64_t seed; /* artefacts                                                           */
} sw_eyesim_params;

/*
 * A monocular default close to Mompean et al. Sec. 4.1's 640 x 640 case with 250 spots: 640 x 640
 * pixels, a 20 x 20 grid of 32-pixel lenslets (5.5 um pixels, 3.5 mm focal length), 0.78 um
 * light, geometric Gaussian spots, 2000 e- per lenslet, one eye at the centre with a 576-pixel
 * (18 lenslets, ~254 lit) pupil of 5.12 mm, flat wavefront, sw_eye_artefacts_default, seed 1.
 */
void sw_eyesim_params_default(sw_eyesim_params *p);

/* The truth of one eye. */
typedef struct sw_eye_truth {
    double cx_px, cy_px;                     /* pupil ellipse on the detector                    */
    double a_px, b_px;                       /* semi-axes (a: major)                             */
    double angle_deg;                        /* major axis, degrees from +x towards +y, [0, 180) */
    double pupil_mm;                         /* the coefficients' pupil                          */
    double reflection_x_px, reflection_y_px; /* the reflection's centre (NaN: none)            */
    int32_t count;                           /* coefficients (copy of the eye's)                 */
    double *coef_um;
    sw_sh_truth sh; /* this eye's lenslets (sim_sh.h)                   */
} sw_eye_truth;

typedef struct sw_eyesim_truth {
    int32_t n_eyes;
    sw_eye_truth eye[2];
} sw_eyesim_truth;

void sw_eyesim_truth_free(sw_eyesim_truth *t); /* NULL-safe, leaves a zeroed struct */

/*
 * Renders the eyes into electrons, a host (plain or pinned) f32 image of sh.width x sh.height,
 * which is overwritten, and fills truth (may be NULL). Everything is validated first (SW_EINVAL,
 * image untouched): n_eyes 1 or 2; per eye finite values, diameter_px > 0, ellipticity in (0, 1],
 * pupil_mm > 0, finite coefficients, a pupil that reaches the image (its bounding box meets it;
 * a pupil cut by the image's edge is fine); the artefacts' ranges (see sw_eye_artefacts); the SH
 * parameters (sw_shsim_create). A failure after that (memory) may leave the image half drawn.
 */
sw_status sw_eyesim_render(sw_context *ctx, const sw_eyesim_params *p, sw_image *electrons,
                           sw_eyesim_truth *truth);

/* The SH simulator's pupil (pupil-plane micrometres, sim_sh.h) of an eye on the detector. */
sw_pupil sw_eye_pupil(const sw_sh_geometry *g, const sw_eye *eye);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_SIM_EYE_H */
