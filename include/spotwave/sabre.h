/*
 * spotwave sabre: wavefront reconstruction from Shack-Hartmann slopes with linear simplex
 * B-splines (SABRE), distributed over partitions (D-SABRE) with hierarchical or distributed piston
 * mode equalisation (H-PME / D-PME), after Brunner, de Visser, Vuik & Verhaegen 2018 (below).
 * Baselines: global SABRE (one least-squares problem on the whole triangulation) and the
 * classic Fried-geometry zonal least-squares reconstructor.
 *
 * Papers: Brunner E., de Visser C. C., Vuik C., Verhaegen M. 2018, "GPU implementation for
 * spline-based wavefront reconstruction", J. Opt. Soc. Am. A 35(6), 859-872 (D-SABRE, H-PME,
 * D-PME); de Visser C. C., Verhaegen M. 2013, "Wavefront reconstruction in adaptive optics systems
 * using nonlinear multivariate splines", J. Opt. Soc. Am. A 30(1), 82-95 (SABRE); Fried D. L.
 * 1977, J. Opt. Soc. Am. 67(3), 370-375 (the zonal least-squares baseline).
 *
 * Units. Slopes are mean wavefront gradients dW/du, dW/dv (for an OPD in micrometres over a pupil
 * in micrometres: radians; sw_sh_truth.slope_x is one). `pitch` is the lenslet pitch in the pupil
 * in any length unit; the wavefront comes out in slope x pitch units (radians x um = um of OPD).
 * Slope arrays are float, x then y: slopes[l] = dW/du and slopes[n + l] = dW/dv of lenslet
 * l = iy * nx + ix, n = nx * ny (the centroid plan's flat order). Piston is not observable: every
 * reconstruction here has an arbitrary constant (set by its anchor) that callers remove.
 *
 * Lattice coordinates. Lenslet (ix, iy) has its reference centre at (x, y) = (ix, iy) in lattice
 * units of one pitch (x along +u, y along +v, as sim_sh.h's pupil plane).
 *
 * The triangulation (Brunner et al. section 2.A, Fig. 2; a "Type-II" or four-directional mesh): the
 * vertices are the lenslet reference centres (the "corner" vertices of a grid of unit squares)
 * and the centre of each square (a "centre" vertex, which is a lenslet corner: the Fried actuator
 * position). Each square is cut by both diagonals into four triangles:
 *     bottom (I,J) (I+1,J) C,  right (I+1,J) (I+1,J+1) C,  top (I+1,J+1) (I,J+1) C,
 *     left (I,J+1) (I,J) C,     C = (I + 1/2, J + 1/2).
 * The spline is linear on each triangle (degree d = 1) and continuous (r = 0): its B-coefficients
 * are its values at the triangle's vertices, so a continuous spline is given by one value per
 * vertex. A sw_sabre_lattice describes such a spline:
 *     corner (I, J), 0 <= I <= sx, 0 <= J <= sy: values[J (sx + 1) + I], at lattice position
 *         (I - offx, J - offy) (the reference centre of lenslet (I - offx, J - offy));
 *     centre (I, J), 0 <= I < sx, 0 <= J < sy: values[(sx + 1)(sy + 1) + J sx + I], at
 *         (I + 1/2 - offx, J + 1/2 - offy).
 *
 * The measurement model (what SABRE's Eq. 4, D = d B^{d-1} P, becomes for d = 1 on this mesh).
 * A Shack-Hartmann lenslet measures the mean gradient of the wavefront over its square, which by
 * the divergence theorem is the difference of the wavefront's means along opposite edges over
 * the pitch. The lenslet square of corner vertex v = (I, J) is covered by eight triangles T_v,
 * one eighth of the square in each (square (I, J): bottom and left; (I-1, J): bottom and right;
 * (I-1, J-1): right and top; (I, J-1): top and left), and the gradient of the linear spline is
 * constant on each triangle, so the spline's mean gradient over the square is exactly the mean
 * of those eight gradients, a_v . s = (1/8) sum_{t in T_v} grad s|_t; its x component is
 *     [c(I,J-1) + c(I,J) - c(I-1,J-1) - c(I-1,J)] / 4 + [s(I+1,J) - s(I-1,J)] / 4
 * (c the centre vertices, s the corners; y alike): half the Fried difference of the lenslet's four
 * corners and half the central difference of the corner lattice, the edge-averaged difference a
 * lenslet reads. This row alone leaves modes unseen (it reads differences of vertices of the same
 * parity only: the corner lattice's parity classes, the centres' piston and checkerboard), so a
 * fraction lambda (triangle_weight) of each lenslet's weight asks each of its triangles separately
 * to have the measured gradient (the per-triangle reading of SABRE's model, in which the slope
 * is the spline's gradient at the lenslet's reference centre, here a vertex shared by eight
 * triangles):
 *     min  sum_v [ (1 - lambda) || a_v . s - p sigma_v ||^2
 *                  + (lambda / 8) sum_{t in T_v} || grad s|_t - p sigma_v ||^2 ]
 *   = min  sum_v [ || a_v . s - p sigma_v ||^2 + (lambda / 8) sum_t || grad s|_t - a_v . s ||^2 ]
 * (p the pitch). The second form shows what lambda does: the lenslet-mean fit plus a smoothness
 * term, the spread of the triangle gradients around each lenslet (zero only for a plane), which
 * fixes the unseen modes. lambda = 1 is the per-triangle model alone (spotwave's model up to
 * 2.0), which holds every triangle to the lenslet's slope: a smoothing that cost accuracy on
 * turbulence (bench_sabre, 64 x 64, exact slopes: 0.0845 against 0.0664 for lambda = 0.2 and
 * 0.0683 for Fried; BENCHMARKS.md). A lenslet on the triangulation's rim (an array edge, or
 * a D-SABRE window's border) has only n_v = 4 (2 at a corner) of its triangles, which do not cover
 * its square, so it keeps the per-triangle rows only (weight lambda n_v / 8 in all): the mean of
 * half a square is not what the lenslet measured (for W = x^2 it is off by a quarter of the
 * curvature), while the per-triangle rows, equally weighted, keep the solution exact for
 * quadratic wavefronts on a full array (the interpolant of W: the mean rows vanish on it, and
 * SABRE's per-triangle residuals cancel). Tilts are exact for any lambda. The default lambda =
 * 0.2 balances exact and noisy slopes (bench_sabre, 50 screens, global SABRE against Fried:
 * 0.0664 / 0.0683 on exact slopes, 0.0759 / 0.0777 at magnitude 6, 0.0769 / 0.0770 at 8, 0.1019
 * / 0.1006 at 10; lambda = 0.5 was worse at every magnitude, and a numpy check put lambda = 0.1
 * 4 % lower on exact slopes and 2 % higher at magnitude 10).
 *   D-SABRE: a window's problem is the same model on the window's triangulation, so one partition
 *   is exactly global SABRE. A window's border lenslets keep only the per-triangle share, which
 *   weakens small windows at low light (bench_sabre, 64 x 64, 50 screens, square pupil): H-PME
 *   improved at every k from exact slopes to magnitude 8 (k = 32: 0.0851 -> 0.0723 exact, 0.1005
 *   -> 0.0955 at 8) but at magnitude 10 only for k <= 8 (k = 16: 0.1341 -> 0.1347, k = 32:
 *   0.1386 -> 0.1441), and lost 2-7 % at magnitude 11; D-PME with k = 32 (whose chains carry
 *   every window's error) lost at every level (0.0974 -> 0.1100 exact).
 *
 * D-SABRE (Brunner et al. sections 2, 3 and 5.A):
 *   - Partitioning: k x k partitions (k = 2^p for H-PME). The SH array is embedded, centred, in
 *     an extended square array of (k m + 1)^2 lenslets (corner vertices), m the smallest integer
 *     with k m + 1 >= max(nx, ny) (Eq. 17 asks k m > sqrt(N), which adds a ring of zero slopes
 *     where none is needed; we use the smallest array that holds the data). Lenslets outside the
 *     real array, and invalid lenslets, get zero slopes (zero padding, section 3.B.2), or the
 *     nearest valid lenslet's (sw_sabre_padding), and optionally fill iterations (below).
 *   - Partition (a, b) has core squares [a m, (a+1) m) x [b m, (b+1) m) and a window of
 *     w = min(m + 2 OL, k m) squares, starting at clamp(a m - OL, 0, k m - w) along each axis: OL
 *     squares of overlap on every side, shifted inwards at the array's edges so that every window
 *     lies inside the extended array and all partitions are identical (the same local matrices).
 *   - Local problem (Eq. 3-7): D_i (the model above on the window's triangles), continuity
 *     constraints H_i (equal B-coefficients where triangles meet), the anchor h_i (the window's
 *     first corner value = 0), A_i = [H_i; h_i]. The null space N of A_i is the vertex basis (one
 *     column per vertex but the anchor, ones at that vertex's B-coefficients); LAPACK's SVD of A_i
 *     checks it at plan creation for windows up to 16 squares. Q = (Dbar^T Dbar)^-1 Dbar^T E,
 *     Dbar = D_i N (E spreads each slope to its rows), solved once by banded Cholesky (LAPACKE
 *     dpbtrf) and stored as float with N folded in: Q maps a window's 2 (w+1)^2 slopes straight
 *     to its (w+1)^2 + w^2 vertex values (the expansion of Eq. 7 is the resorting by N, which for
 *     d = 1, r = 0 is a copy). All partitions' solves are one product Y = Q X (Eq. 16): OpenBLAS
 *     sgemm on the CPU, cuBLAS sgemm on the GPU.
 *   - Piston equalisation from the values on the shared borders of neighbouring cores (the m + 1
 *     corner vertices of a shared edge), using only vertices inside the pupil (a corner vertex is
 *     inside when its lenslet is real and valid, a centre vertex when its four corners are). A
 *     pair's border with none inside uses all its vertices; at H-PME's higher levels such pairs
 *     are left out of a tile border that has pairs with vertices inside (the fallback is per
 *     tile border).
 *     H-PME (Eq. 10-11): levels h = 1..p; at level h the partitions form tiles of 2^(h-1) x
 *     2^(h-1) and groups of 2 x 2 tiles; in each group a master tile (the one with the most
 *     vertices inside the pupil; ties: the lowest tile, so a square pupil gets Brunner et al.'s
 *     order t_i = 2, 3, 4 to t_m = 1, 1, 2) levels its two edge neighbours, then the diagonal tile
 *     is levelled to the one of them with which it shares more border vertices inside the pupil. A
 *     tile's offset is the mean of all (master - target) border differences across the tile
 *     border (pooled over the 2^(h-1) partition pairs: Brunner et al.'s average of pair means when
 *     the pairs have equal counts).
 *     D-PME (Eq. 8-9): the master partition is (floor(k/2), floor(k/2)); at each iteration every
 *     partition adds the largest of its mean differences (neighbour - own) with the neighbours
 *     closer to the master (4-neighbours, Manhattan distance); L_D = the largest distance to the
 *     master iterations (Brunner et al.'s count for their master; more change nothing).
 *   - Assembly: each vertex takes the value of the partition whose core owns it (a corner on a
 *     shared border: the upper partition, whose core starts there; the last one at the array's
 *     far edge), plus that partition's offset.
 *   - D-PME costs G L_D = O(k^3) partition updates per run, in one GPU block: fine for the k of
 *     Brunner et al. (<= 64), slow for hundreds of partitions per side.
 *   - A plan serves one thread at a time (its run uses the plan's scratch buffers); the context
 *     must not be NULL.
 */
#ifndef SPOTWAVE_SABRE_H
#define SPOTWAVE_SABRE_H

#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The measurement model's lambda (above): the default and the smallest accepted. */
#define SW_SABRE_TRIANGLE_WEIGHT     0.2
#define SW_SABRE_TRIANGLE_WEIGHT_MIN 1e-3

/*
 * Robust passes (outlier rejection; global SABRE, its splines of degree d and D-SABRE's local
 * solves). A lenslet whose spot
 * a noise peak captured reads a slope far from its neighbours', and least squares spreads that
 * error over the wavefront around it. Each pass takes the last solution's model slopes
 * mu_v = a_v . s / pitch (the lenslet-mean row above), the residuals r_v = sigma_v - mu_v (both
 * components; |r_v| their length) and the scale m = the lower median of |r_v| (the element of
 * rank floor((n - 1) / 2)) over the lenslets of the problem (global: the valid lenslets; D-SABRE:
 * each window's own real lenslets, so every partition decides alone), and solves again with the
 * pseudo-observations
 *     sigma'_v = mu_v + r_v min(1, kappa m / |r_v|)
 * (Huber's clipping of the residual at kappa m: a lenslet within the threshold keeps its slope,
 * one beyond it is pulled in to the threshold). With the same matrix each pass is one step of the
 * least-squares iteration on modified residuals that computes Huber's regression M-estimate
 * (Huber P. J. 1981, Robust Statistics, Wiley), the scale re-estimated at every step, so it costs
 * one more solve (D-SABRE: a GEMM) per pass.
 * For Gaussian residuals m is 1.18 of the per-component standard deviation, so kappa = 3 clips
 * beyond about 3.5 sigma.
 */
#define SW_SABRE_ROBUST_THRESHOLD  3.0 /* kappa, the default */
#define SW_SABRE_ROBUST_MAX_PASSES 16

/* ------------------------------------------------------------------ splines on the lattice */

typedef struct sw_sabre_lattice {
    int32_t sx, sy;     /* squares along x and y, >= 1                                     */
    int32_t offx, offy; /* corner (I, J) is the reference centre of lenslet (I-offx, J-offy) */
} sw_sabre_lattice;

/* Number of values (vertices): (sx + 1)(sy + 1) + sx sy. */
int64_t sw_sabre_lattice_values(const sw_sabre_lattice *l);

/*
 * The spline at lattice position (x, y) (lenslet units, see above). Inside the triangulation:
 * the linear interpolation on the triangle that contains the point. Outside: the plane of the
 * triangle of the nearest square whose quadrant (bottom/right/top/left, by the direction from the
 * square's centre) contains the point, extended (so a Fried corner on the array's rim gets
 * 2 s(corner) - s(centre)). NaN if a vertex with a nonzero weight is NaN.
 */
double sw_sabre_eval(const sw_sabre_lattice *l, const double *values, double x, double y);

/* The spline at the (nx + 1)(ny + 1) lenslet corners of an nx x ny array (the Fried actuator
 * grid), corner (cx, cy) at (cx - 1/2, cy - 1/2), out[cy (nx + 1) + cx]. */
void sw_sabre_eval_corners(const sw_sabre_lattice *l, const double *values, int32_t nx, int32_t ny,
                           double *out);

/*
 * The spline on a width x height pixel grid spanning the nx x ny array's footprint: pixel (i, k)
 * at x = -1/2 + (i + 1/2) nx / width, y = -1/2 + (k + 1/2) ny / height; out[k width + i].
 */
sw_status sw_sabre_map(sw_context *ctx, const sw_sabre_lattice *l, const double *values, int32_t nx,
                       int32_t ny, int32_t width, int32_t height, double *out);

/* ------------------------------------------------------------------ D-SABRE */

typedef enum sw_sabre_pme {
    SW_SABRE_PME_HIERARCHICAL = 0, /* H-PME, Eq. 10-11 (needs k = 2^p)                   */
    SW_SABRE_PME_DISTRIBUTED = 1,  /* D-PME, Eq. 8-9                                     */
    SW_SABRE_PME_NONE = 2          /* local pistons left as they are (for studies)        */
} sw_sabre_pme;

const char *sw_sabre_pme_string(sw_sabre_pme p);
sw_status sw_sabre_pme_parse(const char *text,
                             sw_sabre_pme *out); /* hierarchical|distributed|none */

/* What D-SABRE feeds the local solves where the extended array has no data (outside the real
 * array, invalid lenslets). ZERO: zero slopes, Brunner et al.'s zero padding (section 3.B.2).
 * NEAREST: the slopes of the nearest valid lenslet (breadth-first over the extended lattice's
 * corners, 8-neighbourhood, so "nearest" in the chessboard metric; ties: the lower lenslet index):
 * the wavefront is continued with the gradient at the pupil's edge instead of being forced flat
 * next to it; Brunner et al. suggest extrapolating the slope data as the remedy for the
 * zero-padding errors they report (section 3.B.2). Neither changes the matrices, only which slope
 * the gather reads, so the cost is the same. */
typedef enum sw_sabre_padding { SW_SABRE_PAD_ZERO = 0, SW_SABRE_PAD_NEAREST = 1 } sw_sabre_padding;

const char *sw_sabre_padding_string(sw_sabre_padding p);
sw_status sw_sabre_padding_parse(const char *text, sw_sabre_padding *out); /* zero|nearest */

typedef struct sw_sabre_params {
    int32_t nx, ny;          /* SH array, 2..4096 each                                           */
    double pitch;            /* lenslet pitch in the pupil, > 0 (output = slope x pitch units)   */
    const uint8_t *valid;    /* optional nx * ny: lenslets with data (NULL: all); copied          */
    int32_t partitions;      /* k per side, 1 .. max(nx, ny) - 1; a power of two for H-PME (8)   */
    int32_t overlap;         /* OL, 0..64 (1)                                                     */
    sw_sabre_pme pme;        /* (hierarchical)                                                    */
    int32_t dpme_iterations; /* D-PME iterations; 0: L_D (0)                                    */
    sw_sabre_padding padding; /* (zero)                                                        */
    int32_t fill_iterations;  /* 0..16 (0): after the first solve, replace the padded slopes by
                                 the reconstruction's own slopes there and solve again, this
                                 many times (see below)                                        */
    int32_t extend_eq17;      /* 0 (0): the smallest extended array, k m + 1 >= max(nx, ny);
                                 1: Eq. 17's, k m > max(nx, ny), so that every lenslet corner
                                 (Fried actuator) is a square centre of the extended lattice,
                                 as the distributed DM projection needs                         */
    double triangle_weight;   /* lambda of the measurement model (above), 1e-3..1 (0.2)         */
    int32_t robust_passes;    /* robust passes of the local solves (above), 0..16 (0)         */
    double robust_threshold;  /* their kappa, 1..1000 (3)                                     */
    int32_t robust_pme;       /* 0 (0): a border's offset from the mean of its differences;
                                 1: from their median (see below)                             */
    int32_t pme_band;         /* 0 (0): the offsets from the corners on the line between two
                                 cores (Brunner et al.); 1: from the band of overlap squares
                                 on either side of it (see below)                            */
} sw_sabre_params;

/* nx = ny = 0 (must be set), pitch 1, no mask, 8 partitions, overlap 1, H-PME, L_D iterations,
 * zero padding, no fill iterations, the smallest extended array, the model's default lambda, no
 * robust passes, mean offsets on the border line.
 *
 * Fill iterations (beyond Brunner et al., who name extrapolating the slope data as the remedy for
 * their zero-padding errors, section 3.B.2): each pass predicts the slope of every padded corner of
 * the extended array from the last local solves, as the model sees it (the mean gradient of the
 * triangles of its owner partition's window that touch it, over the pitch; piston-free, so no PME
 * is needed in between), and solves all partitions again with those slopes; the PME and the
 * assembly follow the last pass. A padded corner gets its owner's prediction in every window
 * that holds it, so the rows agree with the solution only within each owner's window: the passes
 * converge quickly with one partition (in a numpy check on an annulus: relative error 0.253 with
 * zero padding, 0.201 / 0.185 / 0.180 after 1 / 2 / 3 passes, 0.175 at convergence, global
 * 0.169) and more slowly with many small ones, slowest without overlap (bench_sabre: 4 passes cut
 * the annulus's error 2-2.6x for k <= 4, 10-25 % for k >= 8). Each pass costs a gather, a GEMM and
 * the prediction.
 *
 * Robust passes of the local solves (robust_passes, robust_threshold; the definition above), after
 * the fill iterations: each window takes its model slopes at its real, valid lenslets from its
 * own last solve (the mean gradient of its triangles there, sw_sabre_predict), the scale m from
 * its own residuals, and replaces those lenslets' slopes by the pseudo-observations; padded
 * corners keep what the padding or the fill gave them. A pass costs a prediction at every local
 * corner, a median per window and a GEMM. Measured (bench_sabre, 64 x 64, 3 passes, kappa 3, 50
 * screens): global SABRE's error falls 10 % at magnitude 11 (55 e- per lenslet: 0.324 -> 0.290,
 * below Fried's 0.320) and by less than 1 % at magnitude 10 and brighter, where the centroids'
 * errors are close to Gaussian (10 screens: kappa = 2 gains more at magnitude 11, 0.283 against
 * 0.304, and costs 2.5 % on exact slopes); with 3 % of the lenslets made outliers (test_sabre) the
 * error falls 2.5 times. Off by default: it pays only for faint stars or bad lenslets, and costs a
 * GEMM per pass.
 *
 * Robust PME (robust_pme = 1): the pair sums of step 3 (sabre_internal.h) become n times the lower
 * median of the pair's border differences instead of their sum, so that a few vertices that a bad
 * lenslet pulled away do not shift the offset of a whole tile; H-PME pools the pairs of a tile
 * border as before (Eq. 10), D-PME divides by n again (Eq. 8).
 *
 * Border band (pme_band = 1, beyond Brunner et al.): each pair's differences are taken over the
 * vertices that both windows hold within OL squares of the line between the two cores, along the
 * cores' common extent ((2 OL + 1)(m + 1) corners and 2 OL m centres, those inside the pupil as
 * for the line), instead of the m + 1 corners on the line: more values for each offset.
 *
 * Measured with both and 3 robust passes (50 screens): H-PME k = 32 noise-free 0.072 -> 0.070,
 * annular 0.075 -> 0.071, D-PME k = 32 0.110 -> 0.098; at magnitude 10 no change (0.144; 10
 * screens: robust PME alone 0.148 -> 0.146, with the band 0.144). None closes the gap to global
 * SABRE at magnitude 10 (0.102): with 5 x 5 lenslets per window, 16 of them on its border where
 * the model keeps only the per-triangle share, the local solutions themselves are noisy (their
 * tilts, which no piston equalisation touches); replacing the 73 lenslets with the largest
 * centroid errors by their true slopes moved H-PME k = 32 only from 0.148 to 0.141 (10 screens),
 * so outliers are not what costs accuracy there. */
void sw_sabre_params_default(sw_sabre_params *p);

typedef struct sw_sabre sw_sabre;

/*
 * Builds the partitioning, the local matrices and Q (host; on a CUDA context Q and the tables are
 * uploaded and a cuBLAS handle made). SW_EINVAL with a message for: nx, ny outside 2..4096, a
 * pitch not finite and > 0, partitions < 1 or > max(nx, ny) - 1, not a power of two with H-PME,
 * overlap outside 0..64, negative iterations, a window with more than 20000 values (too few
 * partitions for the array), no valid lenslet. SW_ENOMEM; SW_EINTERNAL if LAPACK fails.
 */
sw_status sw_sabre_create(sw_context *ctx, const sw_sabre_params *p, sw_sabre **out);
void sw_sabre_destroy(sw_sabre *plan); /* NULL is ignored */

typedef struct sw_sabre_info {
    int32_t k, m, window;     /* partitions per side, core squares, window squares          */
    int32_t extended;         /* k m + 1: extended array side (corner vertices)              */
    int32_t local_values;     /* (w+1)^2 + w^2: rows of Q                                    */
    int32_t local_slopes;     /* 2 (w+1)^2: columns of Q                                     */
    int32_t dpme_iterations;  /* iterations D-PME runs (L_D unless set)                      */
    sw_sabre_lattice lattice; /* the extended lattice of the values sw_sabre_run returns    */
    double null_check;        /* max |A N| and rank defect found by the LAPACK check; -1 if
                                 the window was too large to check                         */
} sw_sabre_info;

void sw_sabre_get_info(const sw_sabre *plan, sw_sabre_info *out);

/*
 * Reconstructs one frame. slopes: 2 nx ny floats (x then y; those of invalid lenslets are not
 * read). values: NULL or sw_sabre_lattice_values(&info.lattice) floats, the spline on the
 * extended lattice; actuators: NULL or (nx + 1)(ny + 1) floats, the spline at the lenslet corners
 * (sw_sabre_eval_corners). At least one of them. All arrays in `memory`: SW_MEM_HOST /
 * SW_MEM_PINNED (any context) or SW_MEM_DEVICE (CUDA). On a CUDA context the whole run is on the
 * GPU (slopes copied in, gather, cuBLAS sgemm, PME, assembly, results copied out: one CUDA graph
 * for the kernels) and has finished when the call returns.
 * A NaN or infinite slope of a valid lenslet: SW_ERANGE with a message naming it, outputs
 * unspecified. Bad arguments: SW_EINVAL.
 */
sw_status sw_sabre_run(sw_sabre *plan, const float *slopes, sw_memory memory, float *values,
                       float *actuators);

/*
 * Distributed DM projection (Brunner et al. Eq. 14-16), inside the run. P: the local projection of
 * one window, rows = w^2 actuators at the window's square centres (row j w + i for square (i, j)),
 * cols = local_values (the window's values in the local order of sabre_internal.h: corners y L + x,
 * then centres L^2 + y w + x), row-major, as sw_projector_matrix gives for
 * sw_projector_params_window (loop.h); copied (uploaded on CUDA). After it is set, the run's
 * `actuators` output is the projected commands instead of the spline at the corners: all
 * partitions' local commands are one product Z = P Y (Eq. 16; sgemm), and the command of lenslet
 * corner (cx, cy), the centre of extended square (I, J) = (cx - 1 + offx, cy - 1 + offy), comes
 * from the partition whose core owns that square: Z[its local square] + K[owner] q1[local square],
 * q1 = P 1 (the PME offset applied to the whole window, overlap included, as section 4.A asks).
 * Needs a plan made with extend_eq17 = 1 (SW_EINVAL otherwise, or for rows != w^2, cols !=
 * local_values or a non-finite entry). P = NULL removes the projection (rows and cols ignored).
 */
sw_status sw_sabre_set_projection(sw_sabre *plan, const float *P, int32_t rows, int32_t cols);

/*
 * The distributed DM projection with one matrix per partition (Brunner et al. section 4.A, Eq.
 * 14-15, as first posed: each partition fits only the actuators and the fitting points of its
 * window that lie in the pupil, so the windows at the pupil's edge have matrices of their own;
 * their Fig. 14 calls this variant "MV", for the matrix-vector products it needs, and the shared
 * matrix of sw_sabre_set_projection, Eq. 16, "MM"). P: `partitions` matrices of rows x cols,
 * stacked: partition i = b k + a (core column a, row b) at P + i rows cols, each as
 * sw_sabre_set_projection's P (rows = w^2, cols = local_values, row-major); loop.h's
 * sw_rtc_params_sabre builds them (SW_RTC_PROJ_LOCAL_PUPIL). The run then computes each window's
 * local commands Z_i = P_i Y_i (OpenBLAS sgemv per partition on the CPU, one strided-batched
 * cuBLAS sgemm on the GPU) and the command of a lenslet corner as above, Z_i + K[i] q1_i with
 * q1_i = P_i 1 of its owner partition i. SW_EINVAL as sw_sabre_set_projection, and for
 * partitions != k^2 or a non-finite entry (the message names the partition). P = NULL removes
 * the projection (the other arguments ignored). Either call replaces the other's projection.
 */
sw_status sw_sabre_set_projection_partitions(sw_sabre *plan, const float *P, int32_t partitions,
                                             int32_t rows, int32_t cols);

/* Device time of the last GPU run's kernels (CUDA events around the graph, microseconds); -1
 * for CPU runs. */
double sw_sabre_kernel_us(const sw_sabre *plan);

/* The plan's local matrix Q (host, column-major local_values x local_slopes, float). */
const float *sw_sabre_local_matrix(const sw_sabre *plan);

/* ------------------------------------------------------------------ global SABRE */

typedef struct sw_sabre_global sw_sabre_global;

/*
 * One least-squares problem (the model above: a row pair per valid lenslet and its triangles'
 * rows) on the triangles of the nx x ny array's lattice (sx = nx - 1, sy = ny - 1, no offset)
 * that have at least one valid corner; vertices of no such triangle are not estimated (NaN).
 * Normal equations in band storage, corner and centre rows interleaved along the longer side
 * (half-bandwidth about 4 min(nx, ny)), factorised once by LAPACKE_dpbtrf; anchor: the first
 * estimated corner = 0. A run is one band solve (dpbtrs), and one more per robust pass. Measured
 * on one core: 64 x 64 0.3 s to create, 2 ms a run; 100 x 100 1.1 s and 57 ms; 200 x 200 11 s and
 * 0.7 s, with a band of 0.5 GB (the model's rows reach two corner rows, so the band is four times
 * the corner-only band of spotwave 2.0's model: an accuracy baseline, not a real-time path).
 * SW_EINVAL for bad sizes/pitch, no valid lenslet, or a singular system (valid lenslets in parts
 * that do not touch: the relative piston is unknown).
 */
sw_status sw_sabre_global_create(sw_context *ctx, int32_t nx, int32_t ny, double pitch,
                                 const uint8_t *valid, sw_sabre_global **out);

typedef struct sw_sabre_global_params {
    int32_t nx, ny;          /* SH array, 2..4096 each                                          */
    double pitch;            /* lenslet pitch in the pupil, > 0 (1)                             */
    const uint8_t *valid;    /* optional nx * ny: lenslets with data (NULL: all); copied         */
    double triangle_weight;  /* lambda of the measurement model, 1e-3..1 (0.2)                 */
    int32_t robust_passes;   /* robust passes (above), 0..16 (0: plain least squares)          */
    double robust_threshold; /* kappa, 1..1000 (3)                                              */
} sw_sabre_global_params;

/* nx = ny = 0 (must be set), pitch 1, no mask, the defaults above. */
void sw_sabre_global_params_default(sw_sabre_global_params *p);
/* sw_sabre_global_create with every parameter; the same errors, and SW_EINVAL for a parameter
 * out of its range. sw_sabre_global_create(ctx, nx, ny, pitch, valid, out) is this with the
 * defaults. */
sw_status sw_sabre_global_create_params(sw_context *ctx, const sw_sabre_global_params *p,
                                        sw_sabre_global **out);
void sw_sabre_global_destroy(sw_sabre_global *g);
void sw_sabre_global_lattice(const sw_sabre_global *g, sw_sabre_lattice *out);
/* slopes as sw_sabre_run (host); values: sw_sabre_lattice_values doubles. SW_ERANGE for NaN. */
sw_status sw_sabre_global_run(sw_sabre_global *g, const float *slopes, double *values);

/* ------------------------------------------------------------------ global SABRE of degree d */

/*
 * Global SABRE with simplex splines of degree d and continuity order r on the same triangulation
 * (de Visser & Verhaegen 2013, sections 2-3; Brunner et al. 2018, section 2: the B-form, Eq. 1-7;
 * the smoothness conditions are Lai & Schumaker's, Lai M.-J., Schumaker L. L. 2007, "Spline
 * Functions on Triangulations", Cambridge University Press, Theorem 2.28). Host code on any
 * context; D-SABRE (sw_sabre_create, on the CPU and the GPU) stays linear.
 *
 * The spline. On each triangle t = 4 (J sx + I) + q (sw_sabre_lattice's squares, q = 0 bottom,
 * 1 right, 2 top, 3 left) it is the polynomial sum_{i+j+k=d} c_ijk d!/(i! j! k!) b0^i b1^j b2^k in
 * the barycentric coordinates (b0, b1, b2) of the triangle's vertices v0, v1 (its two corners, in
 * the order sabre.h lists them: bottom (I,J) (I+1,J); right (I+1,J) (I+1,J+1); top (I+1,J+1)
 * (I,J+1); left (I,J+1) (I,J)) and v2 (the centre). Its B-coefficients are stored per triangle,
 * (d+1)(d+2)/2 of them, in the order i = d..0, then j = d-i..0 (k = d - i - j): coef[t nb + m].
 * Continuity: C^0 always (neighbouring triangles share the coefficients of their common edge:
 * one unknown per domain point); C^1 (r = 1) as the constraints H c = 0 of Lai & Schumaker's
 * conditions across every interior edge, solved exactly: the normal matrix of the rows plus a
 * penalty on H c is factorised once (banded Cholesky, LAPACKE_dpbtrf), and each run iterates the
 * method of multipliers with the correction taken from the residual of the rows themselves
 * (corrected semi-normal equations), until the correction and |H c| are at rounding level (a
 * few band solves).
 *
 * The measurement model: a valid lenslet's slopes are the spline's mean gradient over its square
 * (sabre.h's lenslet-mean model), integrated exactly: the square is cut at the triangle edges
 * (eight right triangles inside the lattice) and each part's gradient integrated by a 3-point
 * rule exact to degree 2 (the gradient's degree d - 1 <= 2). A rim lenslet's square reaches half
 * a pitch beyond the triangulation; for d >= 2 those parts use the polynomial of the nearest
 * triangle (sabre.h's extension rule, the one sw_sabre_spline_eval uses), so that a polynomial
 * wavefront of degree <= d is reproduced exactly, rim included. For d = 1 the model is sabre.h's
 * with its triangle share lambda (rim lenslets: the per-triangle rows only), and the result
 * equals sw_sabre_global_run's.
 * A lenslet-mean model alone leaves modes unseen (for d = 1 the parity modes of sabre.h; for
 * d >= 2 the space has more coefficients than there are slopes: about 1 (d = 2, r = 1), 5 (d = 3,
 * r = 1) and 8 (d = 2, r = 0) free values per lenslet against its 2 slopes). For d >= 2 they are
 * fixed by a soft smoothness term: `smoothing` times the sum of squares of the conditions of
 * orders r + 1 .. d across every interior edge (each row: a triangle's B-coefficient minus its
 * prediction from the neighbour, in wavefront units). A polynomial of degree <= d satisfies all of
 * them, so the term biases nothing that the spline space holds exactly.
 * Anchor: the coefficient at the first estimated corner vertex (its value) is 0; triangles with
 * no valid corner are not estimated (NaN coefficients).
 * Cost: the unknowns are the domain points (about 2, 8, 18 per lenslet for d = 1, 2, 3), in a
 * band of about 2 lattice rows' worth of them; 64 x 64: d = 2 about 32 000 unknowns (band 0.3 GB),
 * d = 3 about 71 000 (band 1.3 GB), 14-21 s to factorise on a 2-core machine. An accuracy baseline.
 */
typedef struct sw_sabre_spline_params {
    int32_t nx, ny;         /* SH array, 2..4096 each                                         */
    double pitch;           /* lenslet pitch in the pupil, > 0 (1)                            */
    const uint8_t *valid;   /* optional nx * ny: lenslets with data (NULL: all); copied        */
    int32_t degree;         /* d, 1..3 (1)                                                    */
    int32_t continuity;     /* r, 0..d - 1 (0)                                                */
    double triangle_weight; /* lambda of sabre.h's model, d = 1 only, 1e-3..1 (0.2)           */
    double smoothing;       /* weight of the soft conditions, d >= 2 only, 1e-8..1e6; 0
                               (the default): noise-aware, below                             */
} sw_sabre_spline_params;

/* The soft term's weight W. Given (smoothing > 0), it is fixed. By default (smoothing 0, d >= 2)
 * it is chosen per run from the slopes' noise, as a Tikhonov weight is (the noise variance over
 * the signal's):
 *     W = SW_SABRE_SPLINE_SMOOTHING + sigma2 / (var - sigma2),
 * var the slopes' variance (each component's mean removed, the two averaged), var - sigma2 kept
 * >= SW_SABRE_SPLINE_MIN_SIGNAL var, and W rounded to a grid of half decades from 0.01 (0.01,
 * 0.0316, 0.1, ...) so that a steady noise level keeps the factorisation: a run whose W differs
 * from the plan's refactorises it (d = 3 at 64 x 64: 14-21 s on a 2-core machine; d = 2: about
 * 1.5 s). sigma2, the slope noise variance (slope units squared), is the caller's
 * (sw_sabre_spline_set_noise) or estimated from the frame: gradients are curl free, white noise
 * is not, so the mean square of the 2 x 2 curl
 *     (sx(i,j+1) + sx(i+1,j+1) - sx(i,j) - sx(i+1,j)) / 2 - (sy(i+1,j) + sy(i+1,j+1) - sy(i,j)
 *     - sy(i,j+1)) / 2
 * over the blocks of four valid lenslets, over 2, is the white noise's variance plus what the
 * signal leaves (the curl of lenslet-mean slopes vanishes for wavefronts of degree <= 3, not for
 * turbulence sampled at 2.6 r0 a lenslet, where it is 3.6-3.8 % of var); the estimate is that
 * mean square less SW_SABRE_SPLINE_CURL_LEAK var, at least 0. Exact slopes of a polynomial of
 * degree <= 3 therefore give sigma2 = 0 and W = 0.01, and the polynomial back exactly (which it
 * is at any W: it satisfies every soft condition).
 * The form was fitted on bench_sabre --accuracy (64 x 64, square pupil, von Karman screens with
 * r0 0.15 m on 0.39 m lenslets, CoG centroids, magnitudes 0-12; BENCHMARKS.md): the best fixed W
 * there was 0.01 to magnitude 8, 0.1 at 10 and 1 at 11-12, where the true sigma2 / (var -
 * sigma2) is about 0.02, 0.1 and 2 (sigma2: the slopes' error against the exact lenslet means):
 * a Tikhonov weight of 1 times that ratio. The estimate was within 4-20 % of that sigma2 from
 * magnitude 10; on brighter stars (0.1-1.9 times it, the error there mostly the centroids' gain
 * error, which has no curl) W stays within half a decade of its floor. The
 * leak term assumes turbulence like that: rougher slopes (more aliasing) read as a little noise. */
#define SW_SABRE_SPLINE_SMOOTHING       1e-2 /* the floor of the noise-aware weight, d = 2, 3 */
#define SW_SABRE_SPLINE_SMOOTHING_CUBIC 1e-1 /* the best fixed weight for d = 3 (4.0's default) */
#define SW_SABRE_SPLINE_CURL_LEAK       0.04 /* the signal's share of the curl, of var */
#define SW_SABRE_SPLINE_MIN_SIGNAL      1e-2 /* the signal variance's floor, of var */

/* nx = ny = 0 (must be set), pitch 1, no mask, d = 1, r = 0, lambda 0.2, smoothing 0 (the
 * noise-aware weight above). */
void sw_sabre_spline_params_default(sw_sabre_spline_params *p);

typedef struct sw_sabre_spline sw_sabre_spline;

/* SW_EINVAL for bad sizes, pitch, degree (1..3), continuity (0..d-1), weights, no valid lenslet
 * or a singular system; SW_ENOMEM; SW_EINTERNAL if LAPACK fails. */
sw_status sw_sabre_spline_create(sw_context *ctx, const sw_sabre_spline_params *p,
                                 sw_sabre_spline **out);
void sw_sabre_spline_destroy(sw_sabre_spline *s); /* NULL is ignored */
/* 4 sx sy (d+1)(d+2)/2: the length of a coefficient array (sx = nx - 1, sy = ny - 1). */
int64_t sw_sabre_spline_coefficients(const sw_sabre_spline *s);
void sw_sabre_spline_lattice(const sw_sabre_spline *s, sw_sabre_lattice *out);
int32_t sw_sabre_spline_degree(const sw_sabre_spline *s);
/* slopes as sw_sabre_run (host); coef: sw_sabre_spline_coefficients doubles. SW_ERANGE for a
 * NaN or infinite slope of a valid lenslet. */
sw_status sw_sabre_spline_run(sw_sabre_spline *s, const float *slopes, double *coef);
/* The slope noise variance (slope units squared, the slopes' own) for the noise-aware weight of
 * the runs that follow, in place of the per-frame estimate; -1: estimated again (the default).
 * SW_EINVAL for a plan whose smoothing was given or of degree 1, or sigma2 not >= 0 nor -1. */
sw_status sw_sabre_spline_set_noise(sw_sabre_spline *s, double sigma2);
/* Robust passes (sabre.h's "Robust passes", outlier rejection) for the runs that follow: after
 * the least-squares solve, `passes` (0..SW_SABRE_ROBUST_MAX_PASSES; 0, the default: none) more
 * solves on Huber pseudo-observations with threshold kappa = `threshold` (1..1000;
 * SW_SABRE_ROBUST_THRESHOLD is the others' default) times the lower median of the residual
 * lengths over the valid lenslets, as sw_sabre_global_params' robust_passes. The model slope
 * mu_v is the spline's mean gradient over the lenslet's square (its data rows above; for d = 1
 * the rows weighted as in sabre.h's model, which makes it a_v . s, so d = 1 gives global
 * SABRE's robust result). Each pass re-solves with the factorisation in use (the multiplier
 * iteration, from the last solution): no refactorisation, and the soft weight stays the one the
 * run chose from the measured slopes (an outlier raises the noise estimate, and so the weight,
 * before the passes reject it). SW_EINVAL for passes or threshold out of range (the plan keeps
 * its setting). */
sw_status sw_sabre_spline_set_robust(sw_sabre_spline *s, int32_t passes, double threshold);
/* The weight W of the factorisation in use: after a run, the weight that run used (NaN for
 * d = 1). */
double sw_sabre_spline_smoothing(const sw_sabre_spline *s);
/* The noise variance the last run's weight was chosen from (given or estimated, after the leak
 * term); NaN before a run or when the weight is fixed. */
double sw_sabre_spline_noise(const sw_sabre_spline *s);
/* The spline at lattice position (x, y): the polynomial of the triangle sw_sabre_locate's rule
 * picks (outside the lattice: extended). NaN where that triangle is not estimated. */
double sw_sabre_spline_eval(const sw_sabre_spline *s, const double *coef, double x, double y);
/* The polynomial of triangle t at (x, y) (anywhere: extended), its value and gradient (lattice
 * units) in out[0..2]. SW_EINVAL for t out of range. */
sw_status sw_sabre_spline_eval_triangle(const sw_sabre_spline *s, const double *coef, int64_t t,
                                        double x, double y, double out[3]);
/* The spline on sw_sabre_map's pixel grid. */
sw_status sw_sabre_spline_map(const sw_sabre_spline *s, const double *coef, int32_t width,
                              int32_t height, double *out);

/* ------------------------------------------------------------------ Fried zonal baseline */

typedef struct sw_fried sw_fried;

/*
 * Fried geometry: the phase at the (nx + 1)(ny + 1) lenslet corners; a valid lenslet's slopes are
 *     sx = (p(cx+1,cy) + p(cx+1,cy+1) - p(cx,cy) - p(cx,cy+1)) / (2 pitch),  sy likewise,
 * and the estimate minimises sum (model - slope)^2 + reg sum (discrete Laplacian of p)^2 / pitch^2
 * (the 5-point Laplacian over corners whose 4 neighbours are estimated: it removes the waffle
 * mode the slopes cannot see), corners of no valid lenslet not estimated (NaN), anchor: the first
 * estimated corner = 0. Banded Cholesky once. reg >= 0 (1e-3 is a light touch); 0 leaves the
 * waffle mode free and is refused (SW_EINVAL, singular).
 */
sw_status sw_fried_create(sw_context *ctx, int32_t nx, int32_t ny, double pitch,
                          const uint8_t *valid, double reg, sw_fried **out);
void sw_fried_destroy(sw_fried *f);
/* phase: (nx + 1)(ny + 1) doubles, corner (cx, cy) at [cy (nx + 1) + cx]. */
sw_status sw_fried_run(sw_fried *f, const float *slopes, double *phase);
/* Bilinear interpolation of the corner phases at lattice position (x, y) (lenslet (ix, iy)
 * spans [ix - 1/2, ix + 1/2]); outside the corner grid: the nearest cell's bilinear extended. */
double sw_fried_eval(int32_t nx, int32_t ny, const double *phase, double x, double y);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_SABRE_H */
