/*
 * spotwave centroid: Shack-Hartmann centre-of-gravity extraction at memory speed (Mocci et al.
 * 2020, below).
 *
 * Paper: Mocci J., Busato F., Bombieri N., Bonora S., Muradore R. 2020, "Efficient
 * implementation of the Shack-Hartmann centroid extraction for edge computing", J. Opt. Soc. Am.
 * A 37(10), 1548 (Eq. 1-7, Sec. 3-4).
 *
 * Frame in, one centroid per lenslet out. The lenslet grid is the sw_sh_geometry of geometry.h
 * (Mocci et al. Eq. 1-5): lenslet (ix, iy), flat index l = iy * nx + ix, owns the pixel region
 * [xb, xe) x [yb, ye) of sw_sh_region.
 *
 * Moments and centroid (Mocci et al. Eq. 6-7). With I'(x, y) the conditioned intensity (below) and
 * (xs, ys) the first pixel of the region after the window (step 6; (xb, yb) without one):
 *     m00 = sum I',   m10 = sum (x - xs) I',   m01 = sum (y - ys) I'   over the region,
 *     cx = xs + m10 / m00,   cy = ys + m01 / m00            (0-based pixel-centre coordinates).
 * The moments are taken about the region's corner so they stay small; the centroid is the same
 * as Eq. (7). A lenslet is invalid (valid = 0, cx = cy = NaN, slopes 0) when it is masked out by
 * the geometry, when m00 <= 0 (an empty lenslet: never divided by zero), or when a moment is not
 * finite (a NaN or Inf pixel in an f32 frame, whatever the conditioning). The intensity is m00
 * for every lenslet, masked or not.
 *
 * Conditioning (Mocci et al. section 3 and Remark 2), applied to every pixel as it is read, in this
 * order (each step optional):
 *   1. look-up table:  v = lut[raw]      (raw is the integer pixel value; u8: 256 entries,
 *                                         u16: 65536 entries; not for f32 frames)
 *   2. dark:           v = v - dark[x, y]  (per pixel, same size as the frame)
 *   3. flat field:     v = v * flat[x, y]  (per-pixel gain)
 *   4. threshold T:    SUBTRACT: v = max(v - T, 0);  ZERO: v = (v >= T) ? v : 0.
 *                      T is `threshold` (ABSOLUTE) or `threshold` times the maximum of v over
 *                      the lenslet's windowed region after steps 1-3 (FRACTION, 0..1).
 *   5. gamma:          v = max(v, 0) ^ gamma  (gamma != 1 only)
 *   6. window:         pixels closer than `window` pixels to the region's edge are excluded
 *                      (the region shrinks to [xb + w, xe - w) x [yb + w, ye - w)).
 * Without steps 1-5 (integer frames), the moments are summed in exact integer arithmetic on
 * both backends, so the CPU and the GPU give bit-identical centroids. With conditioning they are
 * summed in floating point (the GPU in float per column of the region, double per lenslet; the
 * CPU in double) and agree within 1e-4 px (3e-5 px seen).
 *
 * Saturation. A pixel is saturated when its raw value (as read, before the look-up table, dark
 * and flat) is at or above the plan's saturation level: by default the full scale of integer
 * frames (255 for u8, 65535 for u16; give the camera's own level, e.g. 4095 for a 12-bit
 * sensor in 16-bit words, as `saturation`), none for f32 frames unless a level is given. A
 * lenslet with at least one saturated pixel in its region as the moments use it (after the
 * window, step 6) is flagged saturated (result.saturated = 1), masked or not, on every path and
 * backend with the same flags. Its centroid may be biased (the clipped pixels no longer weigh
 * the spot's true profile: exact for a symmetric spot, off for an asymmetric or sub-pixel one)
 * but is still a measurement, and dropping it changes what the reconstructor is given: by
 * default the flag is reported beside `valid` and changes nothing else (saturation is telemetry
 * for the supervisor, which lowers the exposure or the gain); with drop_saturated the lenslet
 * is also invalid (valid 0, x = y = NaN, slopes 0, as an empty lenslet). The pyramidal search's
 * discarding (search.h, Mompean et al., Future Gener. Comput. Syst. 91, Sec. 3.2.1: "empty or
 * saturated cell") drops such spots instead.
 *
 * Slopes. slope = centroid - reference, in pixels, for the lenslets of the geometry's mask (all
 * lenslets when it has none), in lenslet order; 0 for a lenslet that is invalid in the frame.
 * Layout per frame: SW_SLOPES_BLOCKS = all x-slopes then all y-slopes (the default),
 * SW_SLOPES_INTERLEAVED = x0, y0, x1, y1, ... The reference defaults to the geometry's reference
 * positions (sw_sh_reference) and is replaced by sw_centroid_set_reference (for example with the
 * centroids of a reference image). Conversions (geometry.h):
 *     radians of wavefront tilt      = slope_px * pixel_um / (focal_mm * 1000)
 *     wavefront gradient, normalised = slope_rad * R_um     (dW/drho in um for a pupil of radius
 *                                                            R_um, rho = r / R)
 *
 * Frames and batches. A run takes one sw_image that holds `frames` frames stacked vertically:
 * frame f, row y is row f * height + y of the image (a FITS cube read into one buffer has this
 * layout). Pixel types: u8 and u16 (vector loads of 4 pixels when the rows are aligned, scalar
 * otherwise), and f32. Any row stride; the GPU paths take any start address, the host path
 * needs u16 / f32 pixels aligned to their size (SW_EINVAL otherwise).
 *
 * Memory paths (chosen at create; the run allocates nothing):
 *   SW_CENTROID_DEVICE  frames already on the device (sw_image_alloc_device);
 *   SW_CENTROID_COPY    host frames (pinned for speed) copied asynchronously to the plan's
 *                       device buffer, then the kernel; a single frame of the CoG fast path in
 *                       bands of lenslet rows (sw_centroid_set_bands): the kernel starts with
 *                       the first band, and each band's lenslets once its pixel rows have
 *                       arrived, while the next rows are copied;
 *   SW_CENTROID_MAPPED  pinned host frames read directly by the kernel over the bus (zero-copy,
 *                       as Mocci et al. do on the Jetson's unified memory);
 *   SW_CENTROID_HOST    the CPU implementation (OpenMP), the only path of a CPU context.
 * SW_CENTROID_AUTO takes HOST on a CPU context and COPY on a CUDA one, where a pinned frame (or
 * batch) of at most 256 KB is read in place as MAPPED does (its copy and the kernel then overlap:
 * 500 x 500 u8 frames ran 1.22-1.27x of their transfer floor copied, 0.96-1.04x read in place).
 * Results (sw_centroid_result) live in host memory (plain or pinned) or device memory. On the
 * CUDA paths the kernel writes device results and pinned host results directly (pinned ones over
 * the bus, zero-copy), but pinned results that sw_centroid_result_alloc made for exactly the
 * run's frames (one allocation) and that hold more than 768 KB in the arrays asked for are
 * written to the plan's device buffers and come back by the copy engine, one copy per run of
 * consecutive arrays asked for (1000 x 1000 u8 at a 3.8 px pitch: 86-92 -> 70-74 us host to
 * host on an H100); plain host results are copied back. A host result is
 * complete when sw_centroid_run returns; a device result is queued on the context's stream
 * (sw_context_synchronize before the host reads anything else), and until then the frames may
 * still be read (copy and mapped paths): leave them unchanged till the stream has finished. For the
 * lowest latency give pinned results (sw_centroid_result_alloc with SW_MEM_PINNED) and leave NULL
 * the arrays you do not need.
 */
#ifndef SPOTWAVE_CENTROID_H
#define SPOTWAVE_CENTROID_H

#include <stdint.h>
#include "spotwave/core.h"
#include "spotwave/geometry.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest lenslet pitch a plan takes, pixels (regions up to 128 x 128 keep the exact sums of
 * u16 frames in 32 bits per column and 64 bits per lenslet). */
#define SW_CENTROID_MAX_PITCH_PX 128.0

typedef enum sw_threshold_mode {
    SW_THRESHOLD_NONE = 0,
    SW_THRESHOLD_SUBTRACT = 1, /* subtract T and clip at zero */
    SW_THRESHOLD_ZERO = 2      /* zero the pixels below T, keep the others unchanged */
} sw_threshold_mode;

typedef enum sw_threshold_kind {
    SW_THRESHOLD_ABSOLUTE = 0, /* T = threshold, in conditioned intensity units          */
    SW_THRESHOLD_FRACTION = 1  /* T = threshold * (maximum of the lenslet), 0 <= threshold <= 1 */
} sw_threshold_kind;

typedef enum sw_centroid_path {
    SW_CENTROID_AUTO = 0,
    SW_CENTROID_HOST = 1,
    SW_CENTROID_DEVICE = 2,
    SW_CENTROID_COPY = 3,
    SW_CENTROID_MAPPED = 4
} sw_centroid_path;

typedef enum sw_slope_layout {
    SW_SLOPES_BLOCKS = 0,     /* x-slopes of all lenslets, then y-slopes */
    SW_SLOPES_INTERLEAVED = 1 /* x, y of lenslet 0, then lenslet 1, ... */
} sw_slope_layout;

/*
 * Methods. Each measures one lenslet from its region as the moments use it (after the window)
 * and its conditioned pixels c (steps 1-5 above); all but COG on the plain fast path run the
 * generic per-lenslet code (centroid_method.h), the same on the CPU and the GPU.
 *   COG        centre of gravity of c (Mocci et al. 2020, Eq. 6-7).
 *   WCOG       weighted centre of gravity, x = sum x W c / sum W c, with a Gaussian weight
 *              W = exp(-r^2 / (2 s^2)), s = fwhm_px / 2.3548, centred at the reference position
 *              (wcog_iterations 0) or re-centred on the last estimate wcog_iterations times
 *              (from the reference): Nicolle M., Fusco T., Rousset G., Michau V. (2004),
 *              "Improvement of Shack-Hartmann wave-front sensor measurement for extreme adaptive
 *              optics", Opt. Lett. 29(23), 2743-2745; Thomas S., Fusco T., Tokovinin A.,
 *              Nicolle M., Michau V., Rousset G. (2006), "Comparison of centroid computation
 *              algorithms in a Shack-Hartmann sensor", MNRAS 371, 323-336. The fixed weight
 *              responds to a displacement d of a Gaussian spot of r.m.s. width s0 with
 *              s^2 / (s^2 + s0^2) d (not corrected here); the re-centred one is unbiased for a
 *              symmetric spot.
 *   LOCAL      per-lenslet background: the mean b and the standard deviation s of the region's
 *              outer ring of pixels (one 3-sigma clipping pass); CoG of (c - b) over the pixels
 *              with c > b + local_k s.
 *   BRIGHTEST  CoG of the brightest_n pixels: b = the (brightest_n + 1)-th largest c of the
 *              region (the smallest c when the region has fewer pixels), CoG of max(c - b, 0).
 *   CORRELATION the shift of the region against the same region of corr_reference: C(u, v) =
 *              sum over the inner area (the region less S = corr_search_px on every side) of
 *              c(x + u, y + v) (r(x, y) - mean r), for |u|, |v| <= S; the integer maximum, then
 *              a 1-D parabola through it and its two neighbours on each axis; x = reference x +
 *              shift (the reference position of the lenslet, sw_centroid_set_reference, is the
 *              template's position). Löfdahl M. G. (2010), "Evaluation of image-shift
 *              measurement algorithms for solar Shack-Hartmann wavefront sensors", A&A 524, A90
 *              (the cross-correlation with parabolic interpolation is one of the methods compared
 *              there). A maximum on the edge of the search range: SW_CENTROID_LEFT.
 *   QUADCELL   quadrant sums about the region's centre (A top-left, B top-right, C bottom-left,
 *              D bottom-right; an odd middle row or column is split half to each side):
 *              x = centre + g ((B + D) - (A + C)) / S,  y = centre + g ((C + D) - (A + B)) / S,
 *              S = A + B + C + D, g = quad_gain_px. For a Gaussian spot of r.m.s. width s0 well
 *              inside the quadrants the normalised difference is erf(d / (sqrt(2) s0)), so
 *              g = sqrt(pi / 2) s0 makes the response 1 at d = 0 (the default from fwhm_px).
 *              Meant for 2 x 2 regions (each quadrant one pixel).
 *
 * Error bars (x_var, y_var, px^2; generic path only, NaN on the fast COG path): first-order
 * propagation of the pixel variances var(I_i) (detector, above) through the estimator:
 *   CoG-like (COG, LOCAL, BRIGHTEST, fixed WCOG), with w_i the weight (1, or W_i) and c'_i the
 *   derivative of the conditioned (and thresholded) value (0 for a pixel thresholded away):
 *       var(x) = sum (x_i - x)^2 w_i^2 c'_i^2 var(I_i) / (sum w_i c_i)^2;
 *   re-centred WCOG (the fixed point of x = sum x W(x) c / sum W(x) c): the same numerator over
 *       (sum W c - sum (x_i - x)^2 W c / s^2)^2;
 *   CORRELATION (a noiseless template, the least-squares shift estimate):
 *       var(x) = sum g_i^2 var(I_i) / (a sum g_i^2)^2, g_i = d r / d x (central differences of
 *       the template), a = C(peak) / sum (r - mean r)^2 (the intensity ratio);
 *   QUADCELL: var(x) = g^2 ((1 - q)^2 var(B + D) + (1 + q)^2 var(A + C)) / S^2, q the
 *       normalised difference.
 * The noise of the background (LOCAL, BRIGHTEST) and the weight's own dependence on the data
 * are left out.
 * SNR: (sum w_i c_i) / sqrt(sum w_i^2 c'_i^2 var(I_i)) (CoG-like, QUADCELL: w = 1), and
 * C(peak) / sqrt(sum (r - mean r)^2 var(I)) for CORRELATION.
 *
 * Status (sw_centroid_result.status, sw_centroid_status_string), the first that applies:
 *   MASKED     not in the geometry's mask;                                   valid 0
 *   NONFINITE  a NaN or Inf pixel (f32 frames) or sum;                       valid 0
 *   EMPTY      no signal (the method's sum <= 0);                            valid 0
 *   FAINT      SNR < min_snr (before the geometric checks: they mean little on noise);  valid 0
 *   LEFT       the spot has left its region: |centroid - reference| > max_shift_px, or the
 *              brightest pixel on the region's outer ring (peak_border), or (CORRELATION) the
 *              maximum on the edge of the search range;                  valid 0
 *   CUT        cut by the region's edge: the centroid within edge_px of it, or more than
 *              edge_fraction of the signal in the outer ring;             valid 0
 *   SATURATED  a saturated pixel (as `saturated`);        valid 0 with drop_saturated, else 1
 *   OK                                                                        valid 1
 * Invalid lenslets have x = y = NaN (and slopes 0) as before; x_var, y_var, snr NaN.
 */
typedef enum sw_centroid_method {
    SW_CENTROID_METHOD_COG = 0,
    SW_CENTROID_METHOD_WCOG = 1,
    SW_CENTROID_METHOD_LOCAL = 2,
    SW_CENTROID_METHOD_BRIGHTEST = 3,
    SW_CENTROID_METHOD_CORRELATION = 4,
    SW_CENTROID_METHOD_QUADCELL = 5
} sw_centroid_method;

typedef enum sw_centroid_status {
    SW_CENTROID_OK = 0,
    SW_CENTROID_MASKED = 1,
    SW_CENTROID_NONFINITE = 2,
    SW_CENTROID_EMPTY = 3,
    SW_CENTROID_LEFT = 4, /* (FAINT = 6 is checked before LEFT and CUT; the numbers stay) */
    SW_CENTROID_CUT = 5,
    SW_CENTROID_FAINT = 6,
    SW_CENTROID_SATURATED = 7
} sw_centroid_status;

/* "cog", "wcog", "local", "brightest", "correlation", "quadcell" and the parser (SW_EINVAL on
 * anything else). */
const char *sw_centroid_method_string(sw_centroid_method m);
sw_status sw_centroid_method_parse(const char *text, sw_centroid_method *out);
/* "ok", "masked", "nonfinite", "empty", "left", "cut", "faint", "saturated" ("?" otherwise). */
const char *sw_centroid_status_string(int status);

typedef struct sw_centroid_params {
    sw_sh_geometry geometry; /* the grid; geometry.valid is copied at create                 */
    int32_t width, height;   /* frame size; every region must lie inside it                   */
    sw_pixel_type type;      /* SW_PIX_U8, SW_PIX_U16 or SW_PIX_F32                            */
    int32_t max_frames;      /* largest batch a run takes (>= 1, default 1)                    */
    sw_centroid_path path;   /* memory path (above), default AUTO                              */

    /* Conditioning (all off by default). Arrays are copied at create. */
    const float *dark; /* width * height, row-major, or NULL                             */
    const float *flat; /* width * height gains, or NULL                                  */
    const float *lut;  /* 256 (u8) or 65536 (u16) entries, or NULL                       */
    sw_threshold_mode threshold_mode;
    sw_threshold_kind threshold_kind;
    double threshold; /* T (ABSOLUTE) or the fraction of the lenslet maximum (FRACTION) */
    double gamma;     /* power law exponent, > 0; 1 = off (default)                     */
    int32_t window;   /* border excluded from every region, pixels, >= 0 (default 0)    */

    sw_slope_layout slope_layout; /* default BLOCKS */

    /* Saturation (above): pixels with a raw value >= saturation are saturated. 0 (default): the
     * type's full scale (u8 255, u16 65535), none for f32; negative (SW_CENTROID_NO_SATURATION):
     * none; otherwise the level (finite, > 0, any type). drop_saturated: 1 makes saturated
     * lenslets invalid (default 0: flagged only). */
    double saturation;
    int drop_saturated;

    /* Method (below, "Methods"; default SW_CENTROID_METHOD_COG) and its parameters. */
    sw_centroid_method method;
    double fwhm_px;              /* WCOG: FWHM of the Gaussian weight, px (> 0); QUADCELL: the
                                    spot's FWHM that sets the default gain (when quad_gain_px 0)   */
    int32_t wcog_iterations;     /* WCOG: 0 = weight fixed at the reference position; N >= 1: the
                                    weight re-centred on the last estimate N times               */
    double local_k;              /* LOCAL: threshold k sigma above the border background (>= 0,
                                    default 3)                                                    */
    int32_t brightest_n;         /* BRIGHTEST: pixels kept (>= 1)                                 */
    const float *corr_reference; /* CORRELATION: width * height reference image (f32, copied);
                                    each lenslet's region of it is that lenslet's template     */
    int32_t corr_search_px;      /* CORRELATION: shifts searched, -S..S px on each axis (>= 1;
                                    0: a quarter of the smaller region side, at least 1)          */
    double quad_gain_px;         /* QUADCELL: px per unit of the normalised difference; 0: from
                                    fwhm_px, sqrt(pi / 2) * fwhm_px / 2.3548 (a Gaussian spot)    */

    /* Detector, for the error bars (x_var, y_var) and the SNR: var(I) = max(I, 0) / gain +
     * (read_noise_e / gain)^2 in ADU^2, I the pixel after the dark and the flat. gain_e_per_adu
     * 0 (default): unknown; the generic path then takes every pixel's variance from the
     * lenslet's border pixels (their sample variance). */
    double gain_e_per_adu; /* >= 0 */
    double read_noise_e;   /* >= 0 (needs a gain when > 0) */

    /* Validity checks ("Status"), all off by default (0). */
    double min_snr;       /* SNR below this: SW_CENTROID_FAINT                                */
    double max_shift_px;  /* |centroid - reference| above this (px): SW_CENTROID_LEFT          */
    int peak_border;      /* 1: the brightest pixel on the region's outer ring: SW_CENTROID_LEFT */
    double edge_px;       /* centroid closer than this to the region's edge: SW_CENTROID_CUT   */
    double edge_fraction; /* more than this fraction of the signal in the outer ring:
                             SW_CENTROID_CUT (0..1)                                           */
} sw_centroid_params;

/* sw_centroid_params.saturation: no pixel is ever saturated. */
#define SW_CENTROID_NO_SATURATION (-1.0)

/* Defaults: the sw_sh_geometry_default grid, a 160 x 160 u8 frame, one frame, AUTO path, no
 * conditioning, gamma 1, window 0, BLOCKS, the type's full scale as the saturation level,
 * saturated lenslets kept valid; method COG, fwhm_px 0, local_k 3, brightest_n 0, no detector,
 * no checks. */
void sw_centroid_params_default(sw_centroid_params *p);

typedef struct sw_centroid_plan sw_centroid_plan;

/*
 * Validates the parameters (geometry inside the frame, pitch >= 1, supported pixel type, a LUT
 * only for integer frames, window leaving every region at least one pixel, finite threshold,
 * gamma > 0, a path the context can run) and allocates everything a run needs.
 */
sw_status sw_centroid_create(sw_context *ctx, const sw_centroid_params *p, sw_centroid_plan **out);
void sw_centroid_destroy(sw_centroid_plan *plan); /* NULL is ignored */

/* 1 when the plan runs the fast COG code (method COG, no detector, no check): x_var, y_var and
 * snr are then NaN and status only OK, MASKED, NONFINITE, EMPTY or SATURATED. */
int sw_centroid_plan_fast(const sw_centroid_plan *plan);
/* The path the plan runs (AUTO resolved). */
sw_centroid_path sw_centroid_plan_path(const sw_centroid_plan *plan);
/* "auto", "host", "device", "copy", "mapped"; and the parser (SW_EINVAL on anything else). */
const char *sw_centroid_path_string(sw_centroid_path path);
sw_status sw_centroid_path_parse(const char *text, sw_centroid_path *out);
/* The saturation level in force (the given one, or the type's full scale), in raw pixel units;
 * -1 when no pixel is checked. */
double sw_centroid_plan_saturation(const sw_centroid_plan *plan);
/* Lenslets per frame (nx * ny) and slopes per frame and axis (lenslets valid in the mask). */
int32_t sw_centroid_plan_lenslets(const sw_centroid_plan *plan);
int32_t sw_centroid_plan_slopes(const sw_centroid_plan *plan);
/* The flat lenslet index of slope k (0 <= k < sw_centroid_plan_slopes). */
int32_t sw_centroid_plan_slope_lenslet(const sw_centroid_plan *plan, int32_t k);

/*
 * Per-frame results, frame-major: centroid x of lenslet l in frame f is x[f * lenslets + l];
 * slopes of frame f start at slopes[f * 2 * nslopes]. Any array may be NULL: it is not written
 * (and, on the GPU, not copied).
 */
typedef struct sw_centroid_result {
    int32_t frames;       /* capacity, frames                                   */
    int32_t lenslets;     /* nx * ny                                            */
    int32_t nslopes;      /* slopes per axis (sw_centroid_plan_slopes)           */
    sw_memory memory;     /* where the arrays live                               */
    float *x, *y;         /* frames * lenslets centroids (pixels), NaN if invalid */
    float *intensity;     /* frames * lenslets m00 (conditioned intensity units)   */
    uint8_t *valid;       /* frames * lenslets, 1 valid / 0 invalid              */
    float *slopes;        /* frames * 2 * nslopes, pixels                        */
    int owned;            /* made by sw_centroid_result_alloc (one allocation: free
                             it with sw_centroid_result_free, not array by array, with
                             at least one of its own arrays left in the struct) */
    uint8_t *saturated;   /* frames * lenslets, 1: a saturated pixel in the region */
    float *x_var, *y_var; /* frames * lenslets variances of x, y (px^2; "Error bars"), NaN
                             when not measured (fast COG path) or invalid            */
    float *snr;           /* frames * lenslets signal-to-noise ratio, NaN likewise     */
    uint8_t *status;      /* frames * lenslets sw_centroid_status                      */
} sw_centroid_result;

/* Allocates all ten arrays for `frames` frames of the plan in `memory` (SW_MEM_HOST,
 * SW_MEM_PINNED or SW_MEM_DEVICE; pinned and device need a CUDA context). */
sw_status sw_centroid_result_alloc(sw_centroid_plan *plan, int32_t frames, sw_memory memory,
                                   sw_centroid_result *out);
void sw_centroid_result_free(sw_centroid_result *r); /* owned arrays only; NULL is ignored */

/*
 * Replaces the slope reference: ref_x, ref_y per lenslet (nx * ny each, pixels), finite for every
 * lenslet of the mask (SW_ERANGE otherwise, the old reference kept). NULL, NULL restores the
 * geometry's reference positions. Copied.
 */
sw_status sw_centroid_set_reference(sw_centroid_plan *plan, const double *ref_x,
                                    const double *ref_y);

/*
 * Centroids of `frames.height / height` frames (a whole number, 1..max_frames) stacked in
 * `frames`, whose width, type and memory must match the plan (device memory for DEVICE, pinned
 * for MAPPED, host for HOST and COPY). The result must have room for them.
 * Returns SW_OK even when lenslets are invalid (see their flags); SW_EINVAL on mismatched input,
 * leaving the result untouched.
 */
sw_status sw_centroid_run(sw_centroid_plan *plan, const sw_image *frames, sw_centroid_result *out);

/* Device time of the last run's kernel in microseconds (CUDA paths, measured with events when
 * timing is enabled); -1 when not measured. */
void sw_centroid_enable_timing(sw_centroid_plan *plan, int on);
double sw_centroid_kernel_us(const sw_centroid_plan *plan);

/*
 * Bands of a COPY run (single-frame runs from pinned memory of plans on the fast CoG path; other
 * runs take the whole frame): the lenslet rows are split into n bands of about equal counts; band
 * k's pixel rows are copied on a stream of the plan's own, each band followed by a flag in device
 * memory, and the kernel, launched once the copies are queued, sums band k's lenslets as soon as
 * band k's flag is set, so the copy of the frame overlaps the kernel and the results it writes. 0
 * (default) and 1: the whole frame copied, then one kernel (on an H200 every Table 1 size of
 * Mocci et al. ran slower in bands: queuing each band's copies costs more host time than the
 * overlap saves; BENCHMARKS.md, issue 25); n: n bands (at most the lenslet rows). The results are
 * the same bits for any n. SW_EINVAL outside 0..SW_CENTROID_MAX_BANDS. When run with a
 * device-memory result, the frame is read until the context's stream has finished, as on the
 * whole-frame path.
 */
#define SW_CENTROID_MAX_BANDS 16
sw_status sw_centroid_set_bands(sw_centroid_plan *plan, int32_t bands);
/* The bands a single-frame run of the plan takes (1 off the COPY path or the fast CoG path, and
 * on a device that cannot copy while it computes). */
int32_t sw_centroid_plan_bands(const sw_centroid_plan *plan);

/*
 * Finds the lenslet grid of a reference image (one spot per lenslet, no aberration): the pitch
 * from the periodicity of the row and column profiles (3 <= pitch <= 128 px), the phase of the
 * spots, and the extent of the lit lenslets. Writes origin, pitch and grid size into g (the other
 * fields are left as they are). SW_EINVAL when no periodic spot pattern is found.
 */
sw_status sw_centroid_find_geometry(sw_context *ctx, const sw_image *reference, sw_sh_geometry *g);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_CENTROID_H */
