/*
 * spotwave aberrometry: a Hartmann-Shack image of one or two living eyes in; each eye's pupil,
 * Zernike aberrations and refraction out, on the GPU or the CPU (Mompean et al. 2019, below: the
 * whole system).
 *
 * Papers: Mompean J., Aragon J. L., Prieto P. M., Artal P. 2019, "GPU-based processing of
 * Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future Generation
 * Computer Systems 91, 177-190 (Sec. 3, the whole system); Thibos L. N., Hong X., Bradley A.,
 * Applegate R. A. 2004, "Accuracy and precision of objective refraction from wavefront
 * aberrations", J. Vision 4(4), 329-351 (the refraction: second order, or with the 4th and 6th
 * orders on request).
 *
 * Calibration. A reference image (no eye: a flat wavefront through the lenslets) gives the
 * reference centroids: PAPYCS (search.h) started at the geometry's reference positions
 * (geometry.h) with windows of the lenslet size (sw_aberrometry_reference). They are the
 * static search mesh, and the zero of the slopes.
 *
 * Per frame (Mompean et al. Sec. 3, Steps 1-3):
 *   1. Pupil tracking (pupil.h, one or two pupils) with the lenslet grid: lenslet l belongs to
 *      eye e when it lies wholly inside pupil e (SW_PUPIL_LENSLET_FULL) and has a reference
 *      centroid. An eye whose pupil is not found is reported invalid with the tracker's reason.
 *      Where the retinal glow path finds no pupil, pupil.h's spots path looks for it in the
 *      spots' envelope (pupil.spots_fallback, on by default; on the GPU the frame then runs a
 *      second time with the pupils found on the host); given pupils (pupil.given) skip tracking.
 *   2. The analysis circle of eye e: centre = its pupil's centre, radius R_px = fit_radius_px
 *      (> 0), or the pupil ellipse's major semi-axis a_px (0, default). The lenslets used are
 *      those of eye e whose reference position lies inside the circle (r <= R_px).
 *   3. Dynamic mesh (Mompean et al. Sec. 3.2.1, "use of a dynamic search mesh"), when prelim_order
 *      > 0 (PAPYCS only), in S = mesh_stages stages. Stage k = 0 .. S - 1 has the circle of radius
 *      f_k R_px, f_k = central_fraction + (1 - central_fraction) k / S (0.5, 0.625, 0.75, 0.875
 *      by default), and the orders 1 .. o_k, o_k = min(prelim_order + k, order) (3, 4, 5, 6);
 *      a lenslet belongs to the first stage whose circle holds its reference position (stage
 *      0: the static central mesh):
 *      a. search (step 4's algorithm and discarding) of the used lenslets of stages 0 .. k:
 *         from their reference centroids in stage 0, else from the prediction of stage k - 1.
 *         PAPYCS with the neighbour window (search.h; neighbour_window f, default 1): where the
 *         predictions put neighbouring spots closer than a pitch (spots converging at the edge
 *         of an aberrated pupil), no first window is wider than f times the distance (max
 *         norm) to a neighbour's predicted spot, so with f = 1 none reaches past the midpoint
 *         (the lenslets not searched yet count by their predictions): a lenslet predicted near
 *         its own spot cannot take a brighter neighbour's within a lenslet-sized window;
 *      b. preliminary fit: Zernike orders 1 .. o_k over the whole analysis circle (step 5's
 *         model and solver) to the slopes of the n spots kept in a; more orders, up to order,
 *         where those spots give at least q = mesh_slopes_per_term (default 4) slopes per
 *         unknown: the highest o with q (J(o) - 1) <= 2 n, J(o) = (o + 1)(o + 2) / 2. A
 *         low-order fit over the central disc of a strongly aberrated eye predicts the next
 *         ring poorly: orders 1-3 over the central half of Mompean et al.'s 5.12 mm test pupil
 *         (60 spots) put the next ring's starts 14-18 px off their spots at 6 um RMS, where the
 *         spots converge to 18-21 px apart; those 60 spots carry order 6 (27 unknowns, 4.4
 *         slopes each), whose predictions land within 2 px. A pupil of 9 lenslets across (16
 *         central spots) keeps the schedule 3, 4, 5, 6;
 *      c. extrapolation: every used lenslet's predicted centroid = reference + D_k c_k (the
 *         derivative matrix of the stage's terms times their coefficients: cuBLAS dgemv on the
 *         GPU, cblas_dgemv on the CPU).
 *      The final search (4) starts from the last stage's prediction (the distorted mesh). Each
 *      stage extrapolates over a short ring only, with a fit of more orders over a larger
 *      circle, so the edge spots are predicted well within half a pitch up to ~6 um RMS, where
 *      Mompean et al.'s single stage (mesh_stages 1, prelim_order 2) lets PAPYCS converge onto a
 *      neighbour's spot. prelim_um reports stage 0's fit (its terms of orders 1 .. prelim_order).
 *      prelim_order 0: one search of all used lenslets from their reference centroids (the
 *      static mesh).
 *   4. Search (search.h: PAPYCS, CoM or Reichenbach; window_px defaults to the lenslet pitch
 *      rounded down; with the dynamic mesh PAPYCS's neighbour window as in 3a) and, when
 *      discard is on, the three discarding criteria on the lenslet grid (criterion 1's
 *      contrast, Mompean et al.'s 15 grey levels of their 8-bit frames, scaled to the frame's
 *      full scale: 15 x 65535 / 255 on u16 frames, 15 / 255 on float frames in [0, 1], unless
 *      contrast_full_scale says otherwise). With the dynamic mesh, the mesh check
 * follows: a kept spot farther than mesh_tolerance x pitch_px from its start (its predicted
 * position) converged onto another lenslet's spot and is discarded as SW_SPOT_SPACING (counted in
 * discarded[1]).
 *   5. Fit, per eye: slopes s_l = centroid_l - reference_l (pixels) of the spots kept; the model
 *      of zernike_fit.h: s = D c with D the mean gradients of the Zernike terms over each
 *      lenslet's square (side pitch_px, centred on its geometry reference position, in
 *      analysis-circle coordinates; exact Gauss-Legendre means of the polynomials), times
 *      -F / R_um (F = focal_mm 1000 / pixel_um, R_um = R_px pixel_um). c = the least-squares
 *      solution over orders 1 .. order by the normal equations (D^T D) c = D^T s, Cholesky
 *      (on the GPU one fused kernel per fit, a block per eye; cblas and LAPACKE on the CPU;
 *      order <= 10, where D^T D is well conditioned). D depends on the pupil's position, so it
 *      is built per frame (on the GPU, one thread per lenslet). Piston is 0.
 *      Outlier rejection (outlier_sigma K > 0): with v_l = (D c - s)_l the residual of spot l
 *      (x and y) and rho the residual RMS over the fit's slopes, the spot of largest |v_l| is
 *      rejected (SW_SPOT_OUTLIER, counted in `outliers`) when |v_l| > max(K rho,
 *      outlier_min_px), and the fit is solved again without it; at most SW_AB_MAX_OUTLIERS
 *      spots per eye, one at a time (a wrong spot pulls the fit towards it, so its neighbours'
 *      residuals grow too: removing the worst first keeps them). A search that takes a
 *      neighbour's spot, where converging edge spots lie a few pixels apart (a 5 um eye of the
 *      accuracy protocol: 6 px off, RMSE 0.30 um and 0.105 D of refraction error from one spot),
 *      is what it is for; clean fits leave every spot below 1 px and change nothing.
 *   6. Refraction (zernike_fit.h's sw_zernike_refraction; the second-order terms, or with the
 *      4th and 6th orders when higher_order_rx) over the eye's pupil diameter
 *      pupil_mm = 2 R_px pixel_um / (1000 magnification), magnification = the size of the pupil
 *      on the lenslet array / its size at the eye.
 * Wavefront maps are zernike_fit.h's sw_zmap plans, fed with the coefficients.
 *
 * An eye is valid when its pupil was found, its fits had at least as many slopes as unknowns
 * (2 x spots kept >= terms - 1) and the normal matrix was positive definite; otherwise its
 * coefficients are NaN and `failure` says why. A run with invalid eyes is still SW_OK.
 *
 * Backends. CUDA: after the frame's one copy in, everything runs on the GPU (the pupil tracker's
 * graph, the searches, the design matrix, the solves) with no host synchronisation until the
 * small result comes back (one copy out). The CPU twin gives the same centroids (search.h's
 * arithmetic is bit-identical) and coefficients to rounding (the solvers differ).
 * Throughput: sw_aberrometry_run_batch keeps `streams` frames in flight, each on its own CUDA
 * stream with its own buffers, so one frame's copy overlaps the others' kernels.
 */
#ifndef SPOTWAVE_ABERROMETRY_H
#define SPOTWAVE_ABERROMETRY_H

#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/geometry.h"
#include "spotwave/pupil.h"
#include "spotwave/search.h"
#include "spotwave/zernike_fit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_AB_MAX_ORDER    10
#define SW_AB_MAX_TERMS    66 /* sw_zernike_count(10) */
#define SW_AB_MAX_STREAMS  8
#define SW_AB_MAX_STAGES   8 /* preliminary stages of the dynamic mesh (mesh_stages)       */
#define SW_AB_MAX_OUTLIERS 8 /* spots step 5 may reject per eye (outlier_sigma)           */

/* Reference centroids of a reference image: PAPYCS from the geometry's reference positions
 * with windows of floor(pitch_px) (at least 3), no discarding. ref_x, ref_y: nx * ny doubles
 * (host), NaN where no spot was found (the search's status not OK, or the spot's intensity
 * below 1 % of the median of the found ones). Returns the number found in *found (may be NULL).
 * SW_EINVAL for a geometry outside the image or an image type search.h does not take. */
sw_status sw_aberrometry_reference(sw_context *ctx, const sw_sh_geometry *g,
                                   const sw_image *reference, double *ref_x, double *ref_y,
                                   int32_t *found);

typedef struct sw_aberrometry_params {
    int32_t width, height;       /* frame size                                                   */
    sw_pixel_type type;          /* u8, u16 or f32                                               */
    sw_sh_geometry geometry;     /* the lenslet grid (pitch, pixel_um, focal_mm); its valid mask
                                    is ignored (the pupils choose the lenslets)                  */
    const double *ref_x, *ref_y; /* reference centroids, nx * ny each (NaN: no spot); NULL:
                                    the geometry's reference positions. Copied.              */
    int32_t n_eyes;              /* 1 (default) or 2 (binocular)                              */
    sw_search_algorithm algorithm;   /* default PAPYCS                                          */
    int32_t order;                   /* fitted radial orders 1 .. order, 1 .. 10 (default 6)   */
    int32_t prelim_order;            /* dynamic mesh's first preliminary fit (stage 0), 0 ..
                                        order (default 3; 0: static mesh only)                  */
    double central_fraction;         /* the static central mesh's radius / R_px, (0, 1]
                                        (default 0.5)                                           */
    int32_t mesh_stages;             /* preliminary stages of the dynamic mesh (step 3), 1 ..
                                        SW_AB_MAX_STAGES (default 4; 1: the paper's one stage)  */
    double mesh_tolerance;           /* the mesh check (step 4), pitches, >= 0 (default 0.25;
                                        0: no check)                                            */
    int32_t mesh_slopes_per_term;    /* step 3b: a stage fits more orders than its o_k (up to
                                        order) while its kept spots give this many slopes per
                                        unknown, 0 .. 1000 (default 4; 0: exactly o_k)          */
    double mesh_raise_residual_px;   /* step 3b: a raised fit whose residual RMS (pixels) over
                                        its slopes exceeds this is replaced by the stage's own
                                        order's, > 0 (default 0.2); +Inf: no check            */
    double outlier_sigma;            /* step 5's outlier rejection: K, >= 0 (default 5; 0: none) */
    double outlier_min_px;           /* ... and its floor, pixels, >= 0 (default 1)              */
    double neighbour_window;         /* PAPYCS's neighbour window (search.h) in every search of
                                        the dynamic mesh, >= 0 (default 1: no first window
                                        reaches past the midpoint to a neighbour's predicted
                                        spot; 0: windows of window_px, the paper's)             */
    double fit_radius_px;            /* > 0: fixed analysis radius; 0 (default): the pupil's a */
    double magnification;            /* pupil size on the lenslets / at the eye, > 0 (1)        */
    double vertex_mm;                /* refraction at a spectacle plane this far (0: cornea)    */
    int32_t window_px;               /* search window (search.h); 0 (default): floor(pitch_px) */
    int32_t min_window_px;           /* 3                                                       */
    int discard;                     /* discarding stage, default 1                             */
    double discard_contrast;         /* 15: criterion 1's contrast in grey levels of an 8-bit
                                        frame (Mompean et al.'s), scaled to the frame's pixels
                                        by contrast_full_scale / 255                            */
    int32_t discard_ring_px;         /* criterion 1's distance (search.h), 0 .. 128; 0 (default):
                                        max(1, round(pitch_px / 32)), the paper's 8 neighbours
                                        at its ~30-px lenslets and as far in proportion on
                                        larger ones, where spots of the same f-number are wider */
    double contrast_full_scale;      /* the value of a full-scale pixel; 0 (default): by type,
                                        u8 255, u16 65535, f32 1 (frames in [0, 1]); e.g. 4095
                                        for a 12-bit camera in 16-bit words, 255 for float
                                        frames in the 8-bit scale                              */
    double min_spacing, max_spacing; /* 0.5, 1.5                                              */
    int32_t peak_box;                /* Reichenbach (search.h), default 13                   */
    double peak_threshold;           /* 0: automatic                                          */
    sw_pupil_params pupil;           /* the tracker's options; width, height, type, n_pupils
                                        and geometry are set from the fields above           */
    int32_t streams;                 /* frames in flight in run_batch, 1 .. SW_AB_MAX_STREAMS
                                        (default 2; the CPU runs them one after another)      */
    int higher_order_rx;             /* 0 (default): the refraction from the second-order terms
                                        alone; 1: with the 4th and 6th orders (zernike_fit.h)  */
} sw_aberrometry_params;

/* The full-scale pixel value discarding's contrast is scaled with: contrast_full_scale, or by
 * the pixel type when it is 0 (see above). Criterion 1's contrast in the frame's pixels is
 * discard_contrast x this / 255. */
double sw_aberrometry_full_scale(const sw_aberrometry_params *p);

/* Criterion 1's distance d in pixels: discard_ring_px, or sw_search_discard_ring(the pitch) when
 * it is 0 (see above). */
int32_t sw_aberrometry_discard_ring(const sw_aberrometry_params *p);

/* Defaults above for a width x height frame of type t and the lenslet grid g. */
void sw_aberrometry_params_default(sw_aberrometry_params *p, int32_t width, int32_t height,
                                   sw_pixel_type t, const sw_sh_geometry *g);

/* Why an eye has no result. */
typedef enum sw_ab_failure {
    SW_AB_OK = 0,
    SW_AB_NO_PUPIL = 1,    /* the tracker did not find it (pupil.failure says why)   */
    SW_AB_FEW_SPOTS = 2,   /* fewer kept slopes than unknowns (final fit)            */
    SW_AB_FEW_CENTRAL = 3, /* the same in the preliminary fit                         */
    SW_AB_SINGULAR = 4     /* the normal matrix was not positive definite             */
} sw_ab_failure;

const char *sw_ab_failure_string(sw_ab_failure f);

typedef struct sw_aberrometry_eye {
    int valid;
    sw_ab_failure failure;
    sw_pupil_ellipse pupil; /* the tracker's ellipse                                    */
    double cx_px, cy_px;    /* analysis circle: centre and radius, pixels               */
    double radius_px;
    double pupil_mm;      /* its diameter at the eye                                  */
    int32_t lenslets;     /* used lenslets (step 2)                                   */
    int32_t central;      /* of which searched in the static central mesh (step 3a)    */
    int32_t found;        /* search status OK                                          */
    int32_t kept;         /* kept by the discarding stage (= found without it)         */
    int32_t discarded[3]; /* by criterion 1, 2, 3                                       */
    int32_t outliers;     /* of the kept, rejected by the final fit (step 5): the fit used
                             kept - outliers spots                                        */
    int32_t terms;        /* J = sw_zernike_count(order)                                */
    double coef_um[SW_AB_MAX_TERMS];   /* OSA j = 0 .. J - 1 over pupil_mm; NaN when invalid */
    double prelim_um[SW_AB_MAX_TERMS]; /* the preliminary fit's (orders 1 .. prelim_order) */
    double residual_px; /* RMS of D c - s over the kept slopes                      */
    sw_refraction rx;   /* from the coefficients: second order, or with the 4th and 6th
                           orders when higher_order_rx (at the measurement wavelength)     */
} sw_aberrometry_eye;

typedef struct sw_aberrometry_result {
    int32_t n_eyes;
    sw_aberrometry_eye eye[2];
    double scale, split_x; /* the tracker's 8-bit scale and split column              */
} sw_aberrometry_result;

typedef struct sw_aberrometry_plan sw_aberrometry_plan;

sw_status sw_aberrometry_create(sw_context *ctx, const sw_aberrometry_params *p,
                                sw_aberrometry_plan **out);
void sw_aberrometry_destroy(sw_aberrometry_plan *plan); /* NULL is ignored */

/* One frame (host, pinned or device memory; the plan's size and type, any stride). The result
 * is complete when the call returns. */
sw_status sw_aberrometry_run(sw_aberrometry_plan *plan, const sw_image *frame,
                             sw_aberrometry_result *out);

/* n frames (frames[k] in host, pinned or device memory), results into out[0 .. n - 1], with up
 * to `streams` frames in flight on the GPU. For throughput: the frames should be pinned. */
sw_status sw_aberrometry_run_batch(sw_aberrometry_plan *plan, const sw_image *const *frames,
                                   int32_t n, sw_aberrometry_result *out);

/* The last run's per-lenslet results (the last frame of a batch), host arrays of nx * ny, any
 * may be NULL: centroid x, y (pixels, NaN when not found), search status (sw_spot_status;
 * SW_SPOT_INACTIVE for lenslets not used), eye (0: none, 1 or 2), and the mesh the final search
 * started from (x0, y0). */
sw_status sw_aberrometry_spots(sw_aberrometry_plan *plan, double *x, double *y, uint8_t *status,
                               uint8_t *eye, double *x0, double *y0);

/* Per-stage device times of the last run (CUDA with timing on; -1 otherwise), microseconds:
 * [0] copy in + pupil, [1] the stages of the dynamic mesh (searches, preliminary fits,
 * predictions), [2] final search + discarding, [3] mesh check, final fit + copy out. */
#define SW_AB_STAGES 4
void sw_aberrometry_enable_timing(sw_aberrometry_plan *plan, int on);
void sw_aberrometry_stage_us(const sw_aberrometry_plan *plan, double us[SW_AB_STAGES]);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_ABERROMETRY_H */
