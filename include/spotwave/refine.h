/*
 * spotwave refine: sub-pixel star positions with error bars, for the spots that find (find.h)
 * or anything else located; a local background, and a CCD detector model.
 *
 * Methods:
 *   XWIN   the iterative Gaussian-windowed centroid XWIN_IMAGE of SExtractor (Bertin E., Arnouts
 *          S. 1996, "SExtractor: Software for source extraction", A&AS 117, 393-404; the
 *          SExtractor manual, "Windowed positional parameters", Eq. 27; as SEP's sep_windowed,
 *          Barbary K. 2016, "SEP: Source Extractor as a library", JOSS 1(6), 58): window sigma
 *          s = d50 / sqrt(8 ln 2), d50 the diameter of the disc holding half the spot's flux
 *          (measured on the stamp, below); from the seed position, x <- x + 2 sum w_i I_i
 *          (x_i - x) / sum w_i I_i with w_i = exp(-r_i^2 / 2 s^2) over r_i < 4 s, until the shift
 *          is below 2e-4 px or after 16 iterations. Variance: ERRX2WIN = 4 sum w_i^2 var_i
 *          (x_i - x)^2 / (sum w_i I_i)^2 with the pixel variances of the detector model.
 *   GAUSS  a circular Gaussian (pixel-integrated: erf differences) plus a constant, fitted by
 *          Levenberg-Marquardt on a square stamp; parameters x, y, flux, sigma, background;
 *          maximum likelihood with each pixel's electrons plus read_noise^2 taken as Poisson
 *          (so var_i is the detector model's variance of the model's value, Poisson + read
 *          noise; weights 1 / var_i); the covariance is the inverse of J^T W J at the solution.
 *          Converged when the next (Gauss-Newton) step would move the parameters by less than
 *          3e-4 of their error bars (or than the float sums' rounding of it, for stars above
 *          ~5e4 e-), or a step moved them by less than 1e-5 (px, or of themselves). At high SNR
 *          its scatter reaches the Cramer-Rao bound.
 *   MOFFAT as GAUSS with a circular Moffat profile (Moffat A. F. J. 1969, "A theoretical
 *          investigation of focal stellar images in the photographic emulsion and application to
 *          photographic photometry", A&A 3, 455-461) in place of the Gaussian:
 *              I(r) = F (beta - 1) / (pi alpha^2) (1 + r^2 / alpha^2)^-beta + B,
 *          parameters x, y, F, alpha, B; beta is fixed (sw_refine_set_moffat_beta; default
 *          4.765, the Moffat exponent that best fits the PSF of Kolmogorov turbulence: Trujillo
 *          I., Aguerri J. A. L., Cepa J., Gutierrez C. M. 2001, "The effects of seeing on Sersic
 *          profiles - II. The Moffat PSF", MNRAS 328, 977-985). Integrated over each pixel by
 *          the 3 x 3-node Gauss-Legendre product rule (the Gaussian's erf differences have no
 *          Moffat counterpart); result.sigma is alpha (FWHM = 2 alpha sqrt(2^(1/beta) - 1)).
 *
 * Blends: spots that share a non-zero `parent` (find's deblending, find.h) are the children of
 * one blend, and a one-star model over a stamp that holds the neighbour is pulled towards it
 * (2-3 px at 3-4 sigma). GAUSS and MOFFAT fit the children of a blend jointly: one model with a
 * position and a flux per child and a shared width and constant, by the same Levenberg-Marquardt
 * on the same likelihood, over the union of the children's stamps (at most
 * SW_REFINE_MAX_CHILDREN children and a union box of at most SW_REFINE_MAX_JOINT_SIDE px a side);
 * each child's variance is its diagonal entry of the inverse of the joint Fisher information, so
 * it carries the correlation with its neighbours. This joint fit runs on the CPU on both backends
 * (on CUDA the frame is copied back to the host for it when a run holds blends). XWIN, a blend
 * beyond those limits, or a joint fit that fails leave the children at their input (deblended)
 * positions, flagged SW_REFINE_BLEND.
 *
 * Detector model (ADU in, electrons inside): a pixel's value v is bias + (signal + sky) / gain
 * + noise; its variance var = max(m + b, 0) / gain + read_noise^2 / gain^2 (ADU^2, floored at
 * one electron's 1 / gain^2), m the expected signal and b the local background above the bias.
 * Photon-counting frames: gain 1, read noise 0, bias 0 (the defaults).
 *
 * Background (the level b above the bias, subtracted from each sample before the refinement):
 *   NONE     b = 0: frames without sky (the fit still carries its constant);
 *   ANNULUS  per spot, the sigma-clipped median of the pixels r_in <= r < r_out about the seed's
 *            pixel (3 passes clipping at clip_sigma standard deviations about the median;
 *            the median is the ceil(n / 2)-th smallest of the n values kept, exactly);
 *   MESH     SExtractor's background map (Bertin & Arnouts 1996, section 3.1; SEP's
 *            sep_background): the frame cut into mesh_size^2 boxes; per box the valid pixels
 *            are sigma-clipped about their median (clip_sigma, to convergence or 10 passes) and
 *            the box's level is the mode estimate 2.5 median - 1.5 mean, or the median when
 *            (mean - median) / sd > 0.3 (crowded); the mesh is median-filtered over
 *            mesh_filter x mesh_filter boxes and read between box centres by bilinear
 *            interpolation (SExtractor uses a bicubic spline), constant beyond the outer centres.
 *
 * Stamps: (2R + 1)^2 pixels about the pixel nearest the seed, R = radius or, when radius is 0,
 * half the spot's bounding box's larger side + 3 (4 .. SW_REFINE_MAX_RADIUS). XWIN measures d50
 * on that stamp and then uses R = ceil(4 s) (at most the maximum). Pixels outside the frame,
 * masked, not finite or at/above overload are left out (flags below).
 *
 * Backends: the CPU refines spots in parallel (OpenMP); CUDA runs a group of lanes per spot (16,
 * two spots per warp, for GAUSS and MOFFAT without a background step; 32 otherwise, the faster
 * of the two as measured; lanes over the stamp's pixels, reductions within the group; the
 * environment variable SPOTWAVE_REFINE_LANES = 8 | 16 | 32 changes the group, for measurement),
 * with the same per-pixel arithmetic (refine_model.h). Each pass adds its pixels' terms in
 * float (a GPU's double rate is a fraction of its float rate), the steps and the covariance are
 * taken in double; the two backends add in another order, so they agree to that rounding: in
 * the GPU test positions within 1e-2 of their error bars (measured: at most ~4e-3) and the
 * other results within 1e-3 relative. The MESH map is
 * computed on the CPU in both (a device frame is copied to the host for it); only the small mesh
 * goes to the GPU.
 */
#ifndef SPOTWAVE_REFINE_H
#define SPOTWAVE_REFINE_H

#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/find.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sw_refine_method {
    SW_REFINE_NONE = 0,  /* leave the positions as they are                              */
    SW_REFINE_XWIN = 1,  /* SExtractor's windowed centroid                                */
    SW_REFINE_GAUSS = 2, /* Gaussian PSF fit (default)                                   */
    SW_REFINE_MOFFAT = 3 /* Moffat PSF fit (beta fixed)                                  */
} sw_refine_method;

typedef enum sw_refine_background {
    SW_BACKGROUND_NONE = 0, /* default */
    SW_BACKGROUND_ANNULUS = 1,
    SW_BACKGROUND_MESH = 2
} sw_refine_background;

/* Largest stamp half-size (a 31 x 31 stamp: one warp lane per column on the GPU). */
#define SW_REFINE_MAX_RADIUS 15

/* The joint fit of a blend's children (above): at most this many children, and a union of their
 * stamps within a box of at most this side (px). */
#define SW_REFINE_MAX_CHILDREN   16
#define SW_REFINE_MAX_JOINT_SIDE 96

/* MOFFAT's exponent beta unless sw_refine_set_moffat_beta says otherwise (Trujillo et al. 2001). */
#define SW_REFINE_MOFFAT_BETA 4.765

typedef struct sw_refine_params {
    int32_t width, height; /* frame size                                               */
    sw_pixel_type type;    /* u8, u16, u32 or f32                                       */
    sw_refine_method method;
    sw_refine_background background;
    double gain;        /* e- per ADU, > 0 (default 1)                              */
    double read_noise;  /* e- RMS, >= 0 (default 0)                                 */
    double bias;        /* ADU (default 0)                                          */
    int32_t radius;     /* stamp half-size, 0 = automatic (above), else 2 .. max    */
    int32_t annulus_in; /* annulus radii, px; 0 = R + 2 and R + 8 (R: the stamp's)  */
    int32_t annulus_out;
    int32_t mesh_size;   /* MESH box side, px (default 64)                           */
    int32_t mesh_filter; /* median filter over mesh boxes, odd, 1 = none (default 3) */
    double clip_sigma;   /* sigma clipping of both backgrounds (default 3)           */
    int32_t max_iter;    /* GAUSS, MOFFAT: Levenberg-Marquardt passes (default 50)   */
    const uint8_t *mask; /* width * height, non-zero = valid, or NULL; copied         */
    double overload;     /* values >= overload are left out; 0 = none                */
} sw_refine_params;

void sw_refine_params_default(sw_refine_params *p, int32_t width, int32_t height, sw_pixel_type t);

/* "none" | "xwin" | "gauss" | "moffat", and "none" | "annulus" | "mesh". */
const char *sw_refine_method_string(sw_refine_method m);
sw_status sw_refine_method_parse(const char *text, sw_refine_method *out);
const char *sw_refine_background_string(sw_refine_background b);
sw_status sw_refine_background_parse(const char *text, sw_refine_background *out);

/* Per-spot flags (bits). FAILED: the spot keeps its input position and variance. */
#define SW_REFINE_EDGE   1 /* the stamp was cut by the frame's edge (refined with what is left) */
#define SW_REFINE_MASKED 2 /* masked / non-finite / overloaded pixels were left out            */
#define SW_REFINE_FAILED                                                                           \
    4                       /* no refinement: too few pixels, no positive flux, a singular fit,    \
                               or the position left the stamp                                 */
#define SW_REFINE_MAXITER 8 /* GAUSS, MOFFAT: the pass limit came before convergence (kept)   */
#define SW_REFINE_BLEND                                                                            \
    16 /* a child of a blend (spots sharing a non-zero parent) that keeps its input (deblended)    \
          position and variance: XWIN, a blend beyond the joint fit's limits, or a joint fit that  \
          failed; the other fields are a one-star refinement's, for information                */
#define SW_REFINE_JOINT                                                                            \
    32 /* GAUSS, MOFFAT: a child of a blend fitted jointly with the other children (above); flux,  \
          sigma, background, chi2, npix and iterations are the joint fit's                      */

typedef struct sw_refine_result {
    double x, y;           /* refined position, px (the input's when FAILED)           */
    double x_var, y_var;   /* its variance, px^2                                        */
    double flux, flux_var; /* GAUSS, MOFFAT: fitted flux (ADU) and variance; XWIN: sum w I, 0 */
    double sigma;          /* GAUSS: fitted sigma; MOFFAT: alpha; XWIN: the window's s, px */
    double background;     /* local background above the bias (ADU): the annulus or the
                              mesh at the spot, plus the fit's constant for GAUSS, MOFFAT */
    double chi2;           /* GAUSS, MOFFAT: chi^2 at the solution; XWIN: 0             */
    int32_t npix;          /* pixels used                                               */
    int32_t iterations;    /* window iterations or fit passes                           */
    int32_t flags;         /* SW_REFINE_* bits                                          */
    int32_t reserved;
} sw_refine_result;

typedef struct sw_refine_plan sw_refine_plan;

/* Validates p (SW_EINVAL naming the field) and allocates the work buffers (device ones on a
 * CUDA context). */
sw_status sw_refine_create(sw_context *ctx, const sw_refine_params *p, sw_refine_plan **out);
void sw_refine_destroy(sw_refine_plan *plan); /* NULL is ignored */

/* MOFFAT's exponent beta for the plan's next runs: finite, 1 < beta <= 100 (SW_EINVAL otherwise;
 * default SW_REFINE_MOFFAT_BETA). Any method's plan takes it; only MOFFAT uses it. */
sw_status sw_refine_set_moffat_beta(sw_refine_plan *plan, double beta);

/*
 * Refines n spots on a frame (host or, on CUDA, device memory; the plan's size and type). The
 * seed of spot i is its (x, y) and bounding box; spots sharing a non-zero parent are a blend's
 * children (above: fitted jointly, or kept). Spots that are not FAILED get the refined x, y,
 * x_var, y_var written back; the rest is left alone. results (host, n entries, or NULL) receive
 * the details. The buffers grow to the largest n seen (the only allocation a run may make).
 */
sw_status sw_refine_run(sw_refine_plan *plan, const sw_image *frame, sw_spot *spots, int64_t n,
                        sw_refine_result *results);

/* The MESH background of a frame (ADU above the plan's bias) as an f32 host image of the frame's
 * size (allocated here; free with sw_image_free). Any background setting of the plan. */
sw_status sw_refine_background_map(sw_refine_plan *plan, const sw_image *frame, sw_image *out);

/*
 * CCD mode: the background's statistics over a frame (host memory; mask may be NULL): its
 * valid pixels sigma-clipped at 3 sd about the median until stable (at most 10 passes; the stars
 * go). mean and variance are of the raw values (ADU). Then
 *     dispersion_gain = variance / mean        (find.h's gain: what DIALS's test expects of a
 *                                               background in the frame's units)
 *     gain = (mean - bias) / (variance - read_noise^2 / gain^2), solved for gain (e-/ADU):
 *            variance gain^2 - (mean - bias) gain - read_noise^2 = 0, the positive root.
 * SW_ERANGE when fewer than 100 pixels are left, or the background is not above the bias.
 */
typedef struct sw_ccd_estimate {
    double mean, variance;  /* of the clipped background, ADU and ADU^2 */
    int64_t npix;           /* pixels kept                               */
    double dispersion_gain; /* variance / mean                          */
    double gain;            /* e- per ADU                               */
} sw_ccd_estimate;

sw_status sw_ccd_estimate_frame(sw_context *ctx, const sw_image *frame, const uint8_t *mask,
                                double bias, double read_noise, sw_ccd_estimate *out);

/*
 * A growing list of refinement results, one per spot that a find plan appends (same order).
 */
typedef struct sw_refine_list {
    int64_t count;
    int64_t capacity;
    sw_refine_result *items;
} sw_refine_list;

void sw_refine_list_free(sw_refine_list *l); /* frees and zeroes; NULL ignored */

/*
 * Attaches a refinement plan to a find plan (same context, frame size and type): from then on
 * sw_find_run and sw_find_sequence (2-D only: a 3-D sequence is refused) refine each frame's
 * spots on that frame before appending them (on CUDA, on the device copy of the frame), and
 * append one result per spot to `results` when it is not NULL. refine NULL detaches. The find
 * plan does not own either; both must outlive its runs.
 */
sw_status sw_find_set_refine(sw_find_plan *find, sw_refine_plan *refine, sw_refine_list *results);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_REFINE_H */
