/*
 * spotwave pupil: tracking the pupil(s) of one or two eyes on their Hartmann-Shack image
 * (Mompean et al. Sec. 3.1), on the GPU and on the CPU with the same results.
 *
 * Paper: Mompean J., Aragon J. L., Prieto P. M., Artal P. 2019, "GPU-based processing of
 * Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future Generation
 * Computer Systems 91, 177-190, Sec. 3.1.
 *
 * The eye's pupil is back-lit by the diffuse retinal reflection and stands out against the nearly
 * black iris. Per frame:
 *   0. 8-bit image: u8 = clamp(rint(v * scale), 0, 255) (NaN: 0), scale = input_scale, or, when
 *      input_scale is 0 (default), 128 / m2: m1 = the frame's mean (NaN and Inf pixels count as
 *      0), m2 = the mean of the finite pixels above it (v > m1), both summed in one fixed order
 *      (pupil_model.h). The pupil's inside (most of the pixels above the mean, whatever its
 *      area, the camera's gain or bit depth) maps near 128; a saturated corneal reflection and
 *      the spot peaks clip at 255 without darkening it. m1 not positive and finite: the frame is
 *      empty (SW_PUPIL_EMPTY_FRAME, scale 0); no pixel above m1 (a uniform frame): m2 = m1 (and
 *      step 3 finds no contrast). Mompean et al.'s images were 8-bit (their optimisation 4).
 *   1. Gaussian smoothing (radius 4, sigma 4 by default, Mompean et al.'s), separable, on 8-bit
 *      data: integer weights w_k (k = -r..r) summing to 2^16, each 1-D pass
 *      out = (sum_k w_k in[clamp(x + k)] + 2^15) >> 16, rows first, then columns; pixels beyond
 *      the image repeat the edge pixel.
 *   2. Regions: one pupil uses the whole frame. Two pupils (binocular) split the frame into a
 *      left and a right region at column split_x: fixed when given, otherwise found in each
 *      frame as the deepest valley of the smoothed image's column profile between the two eyes
 *      (below), so the eyes need not sit in fixed halves. Everything that follows is done per
 *      region, as if the region were the image: pupil 0 is the left one.
 *   3. Threshold t of the region's smoothed histogram (256 bins; inside = v > t), in three
 *      exact integer steps (pupil_model.h):
 *      a. clip: P = the median of the pixels above the region's mean; the pixels above
 *         c = floor(3 P / 2) count as c (when c < 255), so that a reflection's or the spots'
 *         few very bright pixels cannot take a class of the split;
 *      b. split: Otsu's threshold t_o of the clipped histogram: otsu_classes 3 (default): the
 *         three-class Otsu (the pair t1 < t2 maximising the between-class variance of
 *         {v <= t1}, {t1 < v <= t2}, {v > t2}, the smallest (t1, t2) on ties), t_o = t1: the
 *         iris below, the pupil (and reflections, spots) above, even when the pupils fill the
 *         frame; otsu_classes 2: the two-class Otsu (the t in 0..254 maximising the variance
 *         between {v <= t} and {v > t}, the smallest on ties); a region whose clipped pixels
 *         take exactly two values gets the two-class split;
 *      c. edge level: b = the mean of the pixels v <= t_o (the iris), p = the median of those
 *         above (the pupil), t = floor(b + edge_level (p - b)). Otsu's own threshold lies near
 *         the middle of the class means, above the half height of the pupil's edge when the
 *         glow falls off towards it (about 1 px too far in); edge_level 0.4 is the half height
 *         of an edge at 80 % of the pupil's median, the retinal glow of Mompean et al.'s images
 *         (falloff 0.3). edge_level 0: t = t_o. edge_level < 0 (SW_PUPIL_EDGE_AUTO): 0.4
 *         here, then step 3d;
 *      d. automatic edge level (edge_level < 0; not from Mompean et al.): the right level
 *         depends on how far the glow falls off towards the edge (for a glow falling off by f
 *         as 1 - f rho^2 it is (1 - f) / (2 - f): 0.5 at f = 0, 0.09 at f = 0.9), so after a
 *         pupil is found (steps 4-9) its edge is measured in three bands of the smoothed image
 *         about the found ellipse (rho its normalised radius, R = (a + b) / 2, m = 3 s + 3 px
 *         off the edge, s = min(gauss_sigma, gauss_radius), bands of 8 px): the median of
 *         rho in [0.6, 0.75) (L1), of the 8 px inside the edge's margin (L2), of the 8 px
 *         outside it (L3). The glow at the edge, Le, is L2 extrapolated linearly in rho^2 to
 *         rho = 1 (at most L2), and the new threshold is the edge's half height,
 *         t = floor((Le + L3) / 2); steps 4-9 run again with it, until t stays, at most 4
 *         times. A refit that does not find the pupil keeps the last one found (and its
 *         threshold, mask and border list); a pupil smaller than R = 2 (m + 8) px, bands with
 *         fewer than 64 pixels, or an edge less than 2 levels above the outside keep the
 *         threshold they have. A first fit that fails with a ragged border (CLUTTER or
 *         LOW_SUPPORT; other failures are not the level's: a region too small at 0.4 grows at
 *         every lower level, and a lone corneal reflection became a pupil so) is tried again at the
 *         edge levels 0.2, 0.1 and 0.05 (each halving the level reaches an edge half as bright:
 *         a glow falling off by 0.8-0.95 has its edge below 0.4, and the blob cut at 0.4 out of
 *         the dim glow inside it is ragged), skipping those that give no lower threshold, until
 *         one finds it with a clean edge (near-band points at most half of max_near_ratio x
 *         inliers); the refits then follow from it and must have a clean edge too. None
 *         finding it: the first fit's pupil (not found), mask and border list stay.
 *      A region whose pixels all have one value has no threshold: not found.
 *   4. Morphological close of the inside mask with a (2 close_radius + 1)^2 square: dilation
 *      (maximum) then erosion (minimum), each separable (rows, then columns), windows clipped to
 *      the region (so a pupil cut by the image edge is not eroded from outside).
 *   5. Border pixels: inside pixels with at least one of their 8 neighbours in the region
 *      outside (pixels beyond the region or the image do not count), listed in raster order of
 *      the region.
 *   6. RANSAC (Mompean et al. footnote 1): `candidates` (default 1024) conics, each through 5
 *      border points picked by random numbers u in (0, 1) drawn once when the plan is made (Mompean
 *      et al.'s optimisation 2): index = floor(u n) for n border points. A candidate that is not a
 *      real ellipse with semi-axes in [min_radius_px, max_radius_px] gets no votes. Every border
 *      point within inlier_px of a candidate (Sampson distance, the first-order geometric
 *      distance |Q| / |grad Q|) votes for it; the winner has the most votes, the lowest index on
 *      ties. Coordinates are taken about the region's centre and scaled to about [-1, 1].
 *   7. Refinement: refine_iterations rounds of a gradient-weighted algebraic least-squares fit
 *      (Sampson's iteration) to the points within inlier_px of the current ellipse, starting
 *      from the winner; the conic is normalised by A + C = 1 (invariant to rotation and shift).
 *   8. The border pixels are the inside layer of the thresholded area; the threshold contour
 *      lies half a pixel further out, so 0.5 px is added to both fitted semi-axes.
 *   9. Valid when the final inliers number at least min_coverage x the ellipse's perimeter
 *      (Ramanujan's approximation; a border pixel covers about one pixel of perimeter), the
 *      near-band points (border pixels 2 inlier_px < d <= 4 inlier_px from the final ellipse,
 *      counted in the same pass as the inliers) number at most max_near_ratio x the inliers,
 *      the semi-axes are in range and the numbers are finite. A pupil's border is one clean
 *      curve with few points just off it; the border of thresholded noise is dense everywhere
 *      (a noise "ellipse" has about as many near-band points as inliers). Otherwise the pupil is
 *      reported not found, with the reason; nothing is fabricated.
 *
 * Binocular split (step 2, split_x < 0): P(x) = sum over rows of the smoothed image at column x,
 * summed over the columns x - h .. x + h (h = max(4, width / 64), clipped); split_x = the x in
 * [width / 4, 3 width / 4) with the smallest value, the one nearest width / 2 on ties (then the
 * smaller). Integer sums: every backend finds the same column.
 *
 * Given pupils (given = 1): the caller's ellipses (given_pupil[i], e.g. from another instrument or
 * drawn by hand) are the result of every frame: nothing is tracked (method SW_PUPIL_METHOD_GIVEN).
 * They must lie within the frame's larger side and be at least 1 px in radius.
 *
 * Pupils made of spots alone (spots_fallback = 1, the default, with a geometry): a Hartmann-Shack
 * image without retinal glow (an artificial eye, a bench, a dim retina) has no back-lit pupil for
 * steps 1-9, so a region whose pupil they do not find is tried again from the spots' envelope on
 * the lenslet grid (method SW_PUPIL_METHOD_SPOTS; the glow path's reason stays in glow_failure).
 * So is one that step 3d found only by a retry at a lower level and whose refit at the measured
 * half height then found nothing (the level did not settle: a glow that falls off steeply
 * towards the edge, whose half height is near the iris' noise; sim eye's fall-off 0.95 gave
 * pupils 1.9-2.4 % small where the spots path measures 0.2-0.6 % large); where the spots path
 * finds it, its pupil is taken and glow_failure is the first fit's failure. And with lenslets of
 * at most 4 s px (s = min(gauss_sigma, gauss_radius): 16 px by default) every pupil is: step 1's
 * smoothing merges such spots into what the glow path takes for a glow, with or without one, and
 * its edge is the smoothed spots' (bench_eye_pupils, 60 eyes a row, radius error max 1.6 % with
 * glow and 2.6 % without at 10 px by the glow path, 0.29 % and 0.15 % by the spots path; at 14
 * and 16 px with glow 1.4-1.6 % against 0.2-0.3 %; at 20 px the glow path is the better, 0.22 %
 * against 1.8 %). glow_failure is then SW_PUPIL_OK (replaced, not failed); on a GPU plan each
 * frame is then read on the host (a device frame copied back), the spots path runs there (its
 * cells' statistics, S1, over the context's threads; the walk, S3, on one; the medians of 8-bit
 * pixels counted: 6-7 ms for a 640 x 640 u8 frame of 10 px lenslets on one core of the
 * development machine's AMD EPYC, 4 ms on two), and the
 * aberrometer runs a frame twice (the glow path's pupil, then the spots path's).
 * Not from Mompean et al., who track the glow only. A lenslet's light is the light through the
 * part of it inside the pupil, so the pupil's edge is where a lenslet's light falls to half a
 * fully lit one's:
 *   S1. per lenslet cell of the geometry whose centre lies in the region: its light
 *       F = sum over the cell's pixels of (v - b), b the cell's background (a local one: glow,
 *       offset and the spot wings' floor drop out): the mean of its pixels up to its median m
 *       + 3 x 1.4826 x their median absolute deviation (a spot's core left out), but at most
 *       m + skew. A mean, because where the noise is clipped at 0 (the dark background of an
 *       8-bit frame) its mean is above its median, and a glow's noise is not clipped: light
 *       above the median made a glowing eye's lit lenslets look half as bright as they are
 *       against the dark ones, and its spots pupil 2-4 % large. At most m + skew, because the
 *       spots that converging rays crowd together at the edge of a strongly aberrated pupil
 *       raise a cell's mean through their wings, not its median;
 *   S2. the classes of the cells' light (Otsu's split, on the light clipped to the 5th .. 1.5 x
 *       the 75th percentile, so that a corneal reflection cannot take a class; medians of the
 *       classes): skew = the lower class's median of the light above the cells' medians, per
 *       pixel (the unlit cells' noise skew); then of F: beta = the lower class's (an unlit
 *       cell's light), F0 = the upper class's less beta, then again over the interior cells
 *       only (lit with their four neighbours lit): a fully lit lenslet's light;
 *   S3. each lenslet's light at its own spot, wherever the wavefront moved it (a spot may leave
 *       its cell at the edge of an aberrated pupil): a walk over the grid from the lit cell
 *       nearest the lit cells' centre, ring by ring, where a lenslet's spot is looked for at
 *       the prediction from its measured neighbours (linear extrapolation from two in a row,
 *       else one neighbour plus a pitch): the light in a window of side max(6, pitch_px / 2)
 *       px there, above the background (as S1's) of a window of side pitch_px, re-centred
 *       once on its centroid (at most a quarter pitch); its coverage c = light / (a fully lit
 *       lenslet's light in such a window). A lenslet with c > 1/2 passes the walk on; a spot
 *       that does not sit about a pitch from each lit neighbour's (within half a pitch, in the
 *       grid's direction; as Mompean et al.'s spacing criterion) or sits within half a pitch
 *       of one holds another lenslet's spot and counts as dark; one with c > 1.5 (a reflection
 *       in it) passes the walk on without predicting. Each coverage is then divided by the
 *       median coverage of the interior lenslets within two of it (the light through a living
 *       eye's pupil is not uniform). Lenslets never reached have c = 0; dark lenslets enclosed
 *       by the pupil's lenslets count as 1, lit ones apart from it as 0;
 *   S4. the outline: where c crosses 1/2 between the centres of two lenslets that are
 *       neighbours along a row or a column (linear interpolation): a straight edge through a
 *       lenslet's centre covers half of it;
 *   S5. an ellipse fitted to those points: algebraic least squares (conic normalised by
 *       A + C = 1), then spots_iterations rounds of Sampson's gradient-weighted refit to the
 *       points within half a pitch of the last ellipse;
 *   S6. valid when at least 8 cells have c > 1/2, F0 stands 5 times above a cell's noise (the
 *       cells' median absolute deviation, over the square root of their pixels), at least 6
 *       outline points are left and the ellipse is real with semi-axes in [min_radius_px,
 *       max_radius_px]; otherwise spots_failure says why and the glow path's failure stays the
 *       pupil's failure.
 * This runs on the host (from the frame in host memory, or a copy of a device frame) after the
 * device tracker on a CUDA plan: it costs nothing when the glow path finds the pupils.
 *
 * Lenslet mask (for the centroid stage): with a geometry (geometry.h), lenslet l gets 1 + p when
 * it lies inside pupil p (by lenslet_rule: its whole square, the default, or its reference
 * position), 0 when it lies in neither pupil, in both (overlapping pupils: its spot may mix two
 * eyes' light), or when the pupil was not found.
 *
 * Backends: CPU (OpenMP over rows) and CUDA (separable shared-memory filters on 8-bit data,
 * warp ballot/popcount votes, the result written by the GPU straight into mapped host memory;
 * the steps after the frame's upload are one CUDA graph). Every step up to the RANSAC winner is
 * computed with the same integer or IEEE arithmetic on both (no fused multiply-adds), so the
 * CPU and the GPU see the same 8-bit images, thresholds, border lists and winner; the refined
 * ellipses agree to rounding (1e-6 px). The refinement's sums are added in a different order on
 * the two, so a border point lying exactly on a band's edge may count on one and not on the
 * other: inliers and near may differ by one or two, and a pupil exactly at the min_coverage or
 * max_near_ratio limit may be judged differently. Step 3d (the automatic edge level) takes the
 * same decisions on both from the same band histograms; the bands are drawn about the refined
 * ellipse, so a pixel within ~1e-12 of a band's limit could in principle count in another band
 * on the other backend (never seen in the tests).
 */
#ifndef SPOTWAVE_PUPIL_H
#define SPOTWAVE_PUPIL_H

#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/geometry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_PUPIL_MAX_RADIUS     16     /* largest Gaussian / close radius          */
#define SW_PUPIL_MAX_CANDIDATES 65536  /* RANSAC candidates per pupil              */
#define SW_PUPIL_MIN_SIZE       16     /* smallest width and height of a frame     */
#define SW_PUPIL_EDGE_OFFSET_PX 0.5    /* added to the fitted semi-axes (step 8)   */
#define SW_PUPIL_EDGE_AUTO      (-1.0) /* edge_level: measured per frame (step 3d) */

typedef enum sw_pupil_lenslet_rule {
    SW_PUPIL_LENSLET_FULL = 0,  /* the lenslet's whole square inside the ellipse (default) */
    SW_PUPIL_LENSLET_CENTRE = 1 /* its reference position inside the ellipse                */
} sw_pupil_lenslet_rule;

/* An ellipse: centre, semi-axes a >= b (pixels), major axis angle (degrees from +x towards +y). */
typedef struct sw_pupil_shape {
    double cx_px, cy_px, a_px, b_px, angle_deg;
} sw_pupil_shape;

/* How a pupil was found. */
typedef enum sw_pupil_method {
    SW_PUPIL_METHOD_GLOW = 0,  /* steps 1-9: the back-lit pupil (Mompean et al. Sec. 3.1) */
    SW_PUPIL_METHOD_SPOTS = 1, /* S1-S6: the spots' envelope on the lenslet grid           */
    SW_PUPIL_METHOD_GIVEN = 2  /* the caller's ellipse                                     */
} sw_pupil_method;

/* "glow", "spots" or "given". */
const char *sw_pupil_method_string(sw_pupil_method m);

typedef struct sw_pupil_params {
    int32_t width, height; /* frame size, >= SW_PUPIL_MIN_SIZE                              */
    sw_pixel_type type;    /* u8, u16, u32 or f32                                            */
    int32_t n_pupils;      /* 1 (default) or 2 (binocular)                                  */
    int32_t split_x;       /* binocular: < 0 (default -1) found per frame; else the first
                              column of the right region, 1 .. width - 1                    */
    double input_scale;    /* 8-bit conversion factor (step 0); 0 (default): automatic       */
    int32_t gauss_radius;  /* 4; 0 .. SW_PUPIL_MAX_RADIUS (0: no smoothing)                  */
    double gauss_sigma;    /* 4; >= 0.001                                                      */
    int32_t close_radius;  /* 4; 0 .. SW_PUPIL_MAX_RADIUS (0: no close)                      */
    int32_t candidates;    /* 1024; 32 .. SW_PUPIL_MAX_CANDIDATES, a multiple of 32           */
    double inlier_px;      /* 2 (Mompean et al.'s); > 0                                    */
    int32_t refine_iterations;      /* 3; 0 .. 20 (0: the RANSAC winner as it is)                */
    double min_radius_px;           /* min(width, height) / 10; smallest semi-axis accepted (a lone
                                       corneal reflection thresholds to a disc of ~2.4 sigma)    */
    double max_radius_px;           /* 0: the frame's larger side; largest semi-axis accepted     */
    double min_coverage;            /* 0.25; inliers / perimeter needed for a valid pupil, 0..1   */
    int32_t otsu_classes;           /* 3; step 3's split: 2 or 3 classes                          */
    double edge_level;              /* SW_PUPIL_EDGE_AUTO (-1; any negative value; the default since
                                       5.0.0): the level measured per pupil (step 3d); or step 3c's
                                       fixed level, [0, 1) (0: Otsu's split itself; 0.4: the default
                                       before 5.0.0, about half the time on the GPU, suits a glow
                                       falling off by ~30 %)                                         */
    double max_near_ratio;          /* 0.75; near-band points / inliers allowed (step 9), >= 0
                                       (+Inf: no near-band test)                                  */
    uint64_t seed;                  /* the RANSAC random numbers (rng.h), default 1               */
    const sw_sh_geometry *geometry; /* optional: lenslet grid for the lenslet mask; copied at
                                       create (its valid mask is ignored)                   */
    sw_pupil_lenslet_rule lenslet_rule; /* default SW_PUPIL_LENSLET_FULL                   */
    int given;                          /* 1: given_pupil[0 .. n_pupils) are the pupils; no
                                           tracking (default 0)                              */
    sw_pupil_shape given_pupil[2];      /* the given ellipses (pixels, degrees)              */
    int spots_fallback;                 /* 1 (default): a pupil the glow path does not find,
                                           or finds only by a retry of step 3d whose refit
                                           then fails (a glow falling off steeply: its pupil
                                           measured 2 % small at 0.95), and every pupil with
                                           lenslets of at most 4 x the smoothing's sigma,
                                           is looked for in the spots' envelope (needs a
                                           geometry; the glow path's pupil stays where that
                                           fails);
                                           2: every pupil is (an instrument without glow; the
                                           glow path's pupil stays where the spots path fails);
                                           0: never                                          */
    int32_t spots_iterations;           /* S5's refits, 0 .. 20 (default 3)                   */
} sw_pupil_params;

/* The defaults above for a width x height frame of type t, one pupil, no geometry. */
void sw_pupil_params_default(sw_pupil_params *p, int32_t width, int32_t height, sw_pixel_type t);

/* Why a pupil was not found (SW_PUPIL_OK when it was). */
typedef enum sw_pupil_failure {
    SW_PUPIL_OK = 0,
    SW_PUPIL_EMPTY_FRAME = 1, /* the frame's mean is 0, negative or not finite (auto scale)  */
    SW_PUPIL_NO_CONTRAST = 2, /* the region's smoothed pixels all have one value             */
    SW_PUPIL_FEW_BORDER = 3,  /* fewer than 5 border pixels                                  */
    SW_PUPIL_NO_ELLIPSE = 4,  /* no candidate was an ellipse in the size range               */
    SW_PUPIL_LOW_SUPPORT = 5, /* the best ellipse has too few inliers (min_coverage)         */
    SW_PUPIL_BAD_FIT = 6,     /* the refinement left no valid ellipse in range               */
    SW_PUPIL_CLUTTER = 7,     /* too many border pixels just off it: noise (max_near_ratio)  */
    SW_PUPIL_NO_GRID = 8,     /* spots path: the plan has no lenslet grid                    */
    SW_PUPIL_FEW_SPOTS = 9,   /* spots path: too few lit lenslets or outline points, or too
                                 faint (S6)                                                   */
    SW_PUPIL_SPOTS_FIT = 10   /* spots path: the outline is no ellipse in the size range    */
} sw_pupil_failure;

/* A short English phrase for a failure ("no contrast in the region", ...). */
const char *sw_pupil_failure_string(sw_pupil_failure f);

typedef struct sw_pupil_ellipse {
    int valid;                     /* 1: found                                                    */
    sw_pupil_failure failure;      /* why not (SW_PUPIL_OK when valid)                            */
    double cx_px, cy_px;           /* centre, pixels (core.h convention)                          */
    double a_px, b_px;             /* semi-axes, a >= b, pixels                                   */
    double angle_deg;              /* major axis, degrees from +x towards +y, [0, 180)           */
    int32_t inliers;               /* border pixels within inlier_px of the final ellipse         */
    int32_t near;                  /* border pixels (2, 4] inlier_px from it (step 9)             */
    int32_t border;                /* border pixels of the region                                 */
    int32_t threshold;             /* step 3's threshold t (8-bit; inside = v > t), -1: none    */
    int32_t candidate;             /* the RANSAC winner's index, -1 when none                     */
    int32_t votes;                 /* its votes                                                   */
    int32_t x0, x1;                /* the region: columns [x0, x1)                                */
    sw_pupil_method method;        /* how it was found (valid), or the last path tried           */
    sw_pupil_failure glow_failure; /* the glow path's failure when it ran and failed, else OK */
    sw_pupil_failure spots_failure; /* the spots path's failure when it ran and failed, else OK */
    int32_t spots_lit;              /* spots path: cells with coverage > 1/2 (S2; 0: not run)  */
    int32_t spots_points;           /* spots path: outline points of the final fit (S5)        */
} sw_pupil_ellipse;

typedef struct sw_pupil_result {
    int32_t n_pupils;
    sw_pupil_ellipse pupil[2];
    double scale;    /* the 8-bit conversion factor used (step 0)                               */
    int32_t split_x; /* binocular: the first column of the right region; 1 pupil: width     */
} sw_pupil_result;

typedef struct sw_pupil_plan sw_pupil_plan;

/* Validates p (SW_EINVAL naming the bad field), draws the random numbers, allocates the work
 * buffers (device ones and a mapped host result on a CUDA context). */
sw_status sw_pupil_create(sw_context *ctx, const sw_pupil_params *p, sw_pupil_plan **out);
void sw_pupil_destroy(sw_pupil_plan *plan); /* NULL is ignored */

/*
 * Tracks the pupil(s) in one frame (host or device memory, the plan's size and type, any
 * stride). result is filled whether or not the pupils are found (SW_OK either way: check
 * result->pupil[i].valid). lenslet_mask, when not NULL, receives geometry.nx * geometry.ny bytes
 * (see the top; the plan must have a geometry, else SW_EINVAL). On a CUDA context with a device
 * frame the call returns when the result is in host memory.
 */
sw_status sw_pupil_run(sw_pupil_plan *plan, const sw_image *frame, sw_pupil_result *result,
                       uint8_t *lenslet_mask);

/* On a CUDA plan: the device copy of the last frame's lenslet mask (nx * ny bytes, on the
 * context's stream), for the centroid stage to use without a round trip; NULL on a CPU plan or
 * without a geometry. */
const uint8_t *sw_pupil_lenslet_mask_device(const sw_pupil_plan *plan);

/*
 * The last frame's intermediate images, for inspection and tests: host u8 images of the frame's
 * size (any may be NULL): the 8-bit input (step 0), the smoothed image (step 1), and the closed
 * inside mask (step 4: 1 inside, 0 outside). SW_EINVAL before the first frame or for images of
 * the wrong size or type.
 */
sw_status sw_pupil_last_images(sw_pupil_plan *plan, sw_image *input8, sw_image *smoothed,
                               sw_image *closed);

/* The last frame's border pixels of pupil i in their order (step 5), as x, y pairs:
 * xy[2k], xy[2k+1] for k < min(*count, capacity); *count = their number. */
sw_status sw_pupil_last_border(sw_pupil_plan *plan, int32_t i, int32_t *xy, int64_t capacity,
                               int64_t *count);

/* The plan's RANSAC random numbers: candidates x 5 floats in (0, 1), candidate-major. */
const float *sw_pupil_randoms(const sw_pupil_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_PUPIL_H */
