/*
 * spotwave centroid search: robust spot centroids of ocular Hartmann-Shack images by the
 * pyramidal search PAPYCS, with the two baselines of Mompean et al. (Centre of Mass and
 * Reichenbach's algorithm) and PAPYCS's discarding stage (Mompean et al. Sec. 3.2). The
 * lenslet-grid centre of gravity at memory speed is centroid.h (Mocci et al.); this stage is the
 * robust one.
 *
 * Paper: Mompean J., Aragon J. L., Prieto P. M., Artal P. 2019, "GPU-based processing of
 * Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future Generation
 * Computer Systems 91, 177-190, Sec. 3.2 (PAPYCS 3.2.1, Reichenbach 3.2.2, centre of mass 3.2.3).
 *
 * The mesh. A run searches `nspots` spots. Spot k has a start position (start_x[k], start_y[k])
 * in pixels (core.h convention: 0-based, the centre of pixel (0, 0) at (0.0, 0.0)) and an
 * `active` flag (0: not searched). In the static mesh the start positions are the reference
 * centroids (from a reference image, no eye); in the dynamic mesh they are the positions
 * predicted by a preliminary Zernike fit (aberrometry.h). With a grid (nx x ny = nspots, spot k
 * = iy * nx + ix, as geometry.h's lenslets), spots have 4-neighbours; the discarding stage and
 * Reichenbach's algorithm need it.
 *
 * Pixels are taken as constant over their square: pixel (i, j) covers [i - 0.5, i + 0.5) x
 * [j - 0.5, j + 0.5) with the value v(i, j). A window of side s centred at (cx, cy) is the square
 * [cx - s/2, cx + s/2] x [cy - s/2, cy + s/2] clipped to the frame [-0.5, width - 0.5] x
 * [-0.5, height - 0.5]; pixel (i, j) enters it with the weight w = wx(i) wy(j), wx(i) the length
 * of [i - 0.5, i + 0.5) inside the window's x-extent (so 1 inside, a fraction on the two edge
 * columns: Mompean et al.'s "weighted values for the pixel borders", from Prieto et al. 2000), and
 * at the position (mx(i), my(j)), the middle of the part inside. Pixels with w > 0 are the
 * window's pixels.
 *
 * One centre-of-mass step in a window W (Mompean et al. Algorithm 2, lines 9-19):
 *     m  = min over the window's pixels of v                       (the window minimum)
 *     S0 = sum_W w (v - m),  Sx = sum_W w (v - m) mx,  Sy = sum_W w (v - m) my
 *     new centre = (Sx / S0, Sy / S0)   when S0 > 0; else the centre stays (a flat window).
 * The sums are the exact integrals of the piecewise-constant frame minus m over the window.
 *
 * PAPYCS (Mompean et al. Sec. 3.2.1, Algorithms 1-2): from the start position, steps with window
 * sides s = window_px, window_px - 1, ..., min_window_px, each window centred on the previous
 * step's centre. The result is the last centre; the spot's intensity is the last S0.
 * The neighbour window (PAPYCS with a grid, neighbour_window f > 0; not in the paper): spot k's
 * first side is at most floor(f d_k + 1e-6) (the 1e-6 px absorbs rounding), not below
 * min_window_px, with d_k the distance in the max norm, max(|dx|, |dy|), from its start to the
 * nearest finite start of its 8 grid neighbours, searched in this run or not (none finite: no
 * limit). With f = 1 a window never reaches past the midpoint to a neighbour's start: where a
 * dynamic mesh predicts spots closer than a pitch (spots converging at the edge of an aberrated
 * pupil), a spot started nearer its own spot than its neighbour's cannot take the neighbour's.
 * Where the spots lie a pitch apart the side stays window_px (the pitch). Give NaN starts for
 * neighbours without a prediction.
 * CoM (Sec. 3.2.3): one step of side window_px at the start position.
 * Reichenbach (Sec. 3.2.2, after Reichenbach et al. 2014):
 *   1. peaks: pixels that are the largest in the peak_box x peak_box square centred on them
 *      (ties: the first in raster order wins; pixels beyond the frame do not count) and above
 *      the threshold T (peak_threshold, or when 0: mean + 3 standard deviations of the frame's
 *      finite pixels); each peak's position is the centre of mass (above) of the peak_box window
 *      centred on its pixel;
 *   2. seed: the active spot whose start position is nearest the mean of the active start
 *      positions (the lowest index on ties), and the seed_size x seed_size block of grid spots
 *      centred on it: each active one takes the peak nearest its start position within
 *      capture_px (a peak is taken once: the nearest spot wins, then the lowest index);
 *   3. growth, in rounds until a round finds nothing: every active spot not yet found whose
 *      grid neighbour n1 at offset (dx, dy) in {(+-1, 0), (0, +-1)} is found predicts its
 *      position from it: with the next one n2 at 2 (dx, dy) also found, p = 2 n1 - n2 (linear
 *      extrapolation from two found spots); otherwise p = n1 + (start - start of n1); the
 *      predictions of the neighbours found are averaged; the spot takes the free peak nearest p
 *      within capture_px, conflicts as in 2. A round reads the state of the previous round only
 *      (so every backend finds the same spots in the same rounds).
 *   Spots never reached are SW_SPOT_NOT_FOUND.
 *
 * Discarding stage (Mompean et al. Sec. 3.2.1, three criteria; after the search, when discard is
 * on), on the spots found, in this order:
 *   1. empty or saturated cell: with (i, j) the pixel holding the centroid and d =
 *      discard_ring_px, the spot is kept when v(i, j) - (the mean of the 8 pixels
 *      (i + a d, j + b d), a, b in {-1, 0, 1} not both 0) > discard_contrast (Mompean et al.'s
 *      15, in pixel units: grey levels of an 8-bit frame; their d is 1, the 8 neighbours);
 *      otherwise SW_SPOT_EMPTY (a saturated plateau fails this as an empty cell does; a plateau
 *      wider than the last window already made that window flat: SW_SPOT_FLAT). A centroid whose
 *      (2d + 1)^2 block leaves the frame fails. A spot much wider than the paper's (sigma of
 *      ~2.5 px on 30-px lenslets) rises too little between neighbouring pixels to pass with
 *      d = 1: d scaled with the spot (the aberrometer scales it with the pitch) keeps the test
 *      what the paper meant.
 *   2. spacing: for each pair of grid 4-neighbours both kept by 1, with d the distance of
 *      their centroids and p = pitch_px, d < min_spacing p or d > max_spacing p discards both
 *      (SW_SPOT_SPACING);
 *   3. isolated: a spot kept by 1-2 with none of its 4 grid neighbours kept is discarded
 *      (SW_SPOT_ISOLATED).
 *
 * Backends. CPU (OpenMP over spots) and CUDA (PAPYCS and CoM: the window's columns spread over
 * the 32 lanes of a warp, 4 per lane, the four quantities reduced by interleaved shuffles; for
 * u8 and u16 frames a block of warps per spot shares the rows of each step (the integer column
 * sums are exact, so splitting them changes nothing) over the spot's neighbourhood staged in
 * shared memory, and its first warp does the double part; f32 frames: one warp per spot, the
 * Mompean et al.'s Algorithm 1; Reichenbach: a tile scan for the peaks, one warp per peak for their
 * centres of mass, then one block of 1024 threads for the seed and all the growth rounds). The sums
 * are formed in the same order on both (the CPU walks the same 32 lanes and the same shuffle tree,
 * integer pixel sums are exact), so CPU and GPU give the same centroids to the last bit for the
 * same start positions.
 */
#ifndef SPOTWAVE_SEARCH_H
#define SPOTWAVE_SEARCH_H

#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_SEARCH_MAX_WINDOW 256 /* largest window_px */
#define SW_SEARCH_MAX_BOX    63  /* largest peak_box  */

typedef enum sw_search_algorithm {
    SW_SEARCH_PAPYCS = 0,     /* pyramidal search (Mompean et al. Sec. 3.2.1)     */
    SW_SEARCH_COM = 1,        /* one centre of mass (Sec. 3.2.3)         */
    SW_SEARCH_REICHENBACH = 2 /* peaks and grid growth (Sec. 3.2.2)      */
} sw_search_algorithm;

/* "papycs", "com", "reichenbach"; and the parser (SW_EINVAL on anything else). */
const char *sw_search_algorithm_string(sw_search_algorithm a);
sw_status sw_search_algorithm_parse(const char *text, sw_search_algorithm *out);

/* The state of one spot after a run. */
typedef enum sw_spot_status {
    SW_SPOT_OK = 0,
    SW_SPOT_INACTIVE = 1,  /* not searched (active 0)                                   */
    SW_SPOT_OUTSIDE = 2,   /* a window lay wholly outside the frame, or a non-finite
                              start position                                            */
    SW_SPOT_FLAT = 3,      /* the last window had no signal above its minimum (S0 <= 0),
                              or a NaN / Inf pixel in a window                          */
    SW_SPOT_NOT_FOUND = 4, /* Reichenbach: no peak reached this spot                    */
    SW_SPOT_EMPTY = 5,     /* discarded, criterion 1 (empty or saturated cell)          */
    SW_SPOT_SPACING = 6,   /* discarded, criterion 2 (a neighbour too close or too far) */
    SW_SPOT_ISOLATED = 7,  /* discarded, criterion 3 (no kept neighbour)                */
    SW_SPOT_OUTLIER = 8    /* kept by the search, rejected by a fit that it did not
                              follow (aberrometry.h step 5's outlier rejection)         */
} sw_spot_status;

/* A short English phrase ("discarded: isolated", ...). */
const char *sw_spot_status_string(sw_spot_status s);

typedef struct sw_search_params {
    int32_t width, height;         /* frame size, >= 3                                      */
    sw_pixel_type type;            /* SW_PIX_U8, SW_PIX_U16 or SW_PIX_F32                    */
    sw_search_algorithm algorithm; /* default PAPYCS                                         */
    int32_t nspots;                /* spots per run, 1 .. 2^24                               */
    int32_t nx, ny;                /* grid (nx * ny == nspots), or 0, 0: no grid (no
                                      discarding, no Reichenbach)                            */
    double pitch_px;               /* grid pitch, pixels (> 0 with a grid): criterion 2       */
    int32_t window_px;             /* first window side (PAPYCS, CoM): the lenslet size,
                                      min_window_px .. SW_SEARCH_MAX_WINDOW (default 16)      */
    int32_t min_window_px;         /* last PAPYCS window side, >= 2 (default 3, the paper's) */
    double neighbour_window;       /* PAPYCS with a grid: first side <= this x the distance to
                                      the nearest neighbour's start (above), >= 0 (default 0:
                                      off; 1: the midpoint)                                  */
    /* Reichenbach */
    int32_t peak_box;      /* odd, 3 .. SW_SEARCH_MAX_BOX (default 13)                    */
    double peak_threshold; /* >= 0; 0 (default): mean + 3 sd of the frame                */
    int32_t seed_size;     /* odd, 1 .. 15 (default 5)                                    */
    double capture_px;     /* > 0; 0 (default): pitch_px / 2                              */
    /* discarding stage */
    int discard;             /* 1 (default when there is a grid): the three criteria     */
    double discard_contrast; /* criterion 1, pixel units (default 15)                    */
    int32_t discard_ring_px; /* criterion 1's distance d, 1 .. SW_SEARCH_MAX_WINDOW / 2
                                (default 1: the 8 neighbours, the paper's)                 */
    double min_spacing;      /* criterion 2, x pitch (default 0.5)                        */
    double max_spacing;      /* criterion 2, x pitch (default 1.5)                        */
} sw_search_params;

/* PAPYCS, u8, the defaults above for a width x height frame and nspots spots without a grid. */
void sw_search_params_default(sw_search_params *p, int32_t width, int32_t height, int32_t nspots);

/* Criterion 1's distance for lenslets pitch_px wide: max(1, round(pitch_px / 32)), at most
 * SW_SEARCH_MAX_WINDOW / 2: the paper's 8 neighbours at its ~30-px lenslets, as far in
 * proportion on larger ones (spots of the same f-number are as much wider). 1 for a pitch that is
 * not finite and positive. */
int32_t sw_search_discard_ring(double pitch_px);

typedef struct sw_search_plan sw_search_plan;

/* Validates (SW_EINVAL naming the field) and allocates everything a run needs (device buffers
 * on a CUDA context). */
sw_status sw_search_create(sw_context *ctx, const sw_search_params *p, sw_search_plan **out);
void sw_search_destroy(sw_search_plan *plan); /* NULL is ignored */

/*
 * Searches one frame (host or device memory; the plan's size and type; any stride).
 * start_x, start_y (nspots doubles), active (nspots bytes, NULL: all active) in, x, y
 * (nspots doubles, NaN unless SW_SPOT_OK), intensity (nspots doubles, the last S0', NaN
 * unless SW_SPOT_OK; or NULL) and status
 * (nspots bytes, sw_spot_status) out, all in `memory`: SW_MEM_HOST / SW_MEM_PINNED (any
 * context) or SW_MEM_DEVICE (CUDA context). With device arrays and a device frame the run is
 * queued on the context's stream and returns at once; otherwise it has finished when it returns.
 * SW_EINVAL (outputs untouched) on a mismatched frame or memory kind; a bad spot is a status,
 * not an error.
 */
sw_status sw_search_run(sw_search_plan *plan, const sw_image *frame, const double *start_x,
                        const double *start_y, const uint8_t *active, sw_memory memory, double *x,
                        double *y, double *intensity, uint8_t *status);

/* Reichenbach: the number of peaks of the last run (step 1), -1 before one or for the other
 * algorithms. */
int64_t sw_search_last_peaks(const sw_search_plan *plan);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_SEARCH_H */
