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
 *                       device buffer, then the kernel;
 *   SW_CENTROID_MAPPED  pinned host frames read directly by the kernel over the bus (zero-copy,
 *                       as Mocci et al. do on the Jetson's unified memory);
 *   SW_CENTROID_HOST    the CPU implementation (OpenMP), the only path of a CPU context.
 * SW_CENTROID_AUTO takes HOST on a CPU context and COPY on a CUDA one.
 * Results (sw_centroid_result) live in host memory (plain or pinned) or device memory. On the
 * CUDA paths the kernel writes device results and pinned host results directly (pinned ones over
 * the bus, zero-copy); plain host results are copied back. A host result is complete when
 * sw_centroid_run returns; a device result is queued on the context's stream
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
} sw_centroid_params;

/* sw_centroid_params.saturation: no pixel is ever saturated. */
#define SW_CENTROID_NO_SATURATION (-1.0)

/* Defaults: the sw_sh_geometry_default grid, a 160 x 160 u8 frame, one frame, AUTO path, no
 * conditioning, gamma 1, window 0, BLOCKS, the type's full scale as the saturation level,
 * saturated lenslets kept valid. */
void sw_centroid_params_default(sw_centroid_params *p);

typedef struct sw_centroid_plan sw_centroid_plan;

/*
 * Validates the parameters (geometry inside the frame, pitch >= 1, supported pixel type, a LUT
 * only for integer frames, window leaving every region at least one pixel, finite threshold,
 * gamma > 0, a path the context can run) and allocates everything a run needs.
 */
sw_status sw_centroid_create(sw_context *ctx, const sw_centroid_params *p, sw_centroid_plan **out);
void sw_centroid_destroy(sw_centroid_plan *plan); /* NULL is ignored */

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
    int32_t frames;     /* capacity, frames                                   */
    int32_t lenslets;   /* nx * ny                                            */
    int32_t nslopes;    /* slopes per axis (sw_centroid_plan_slopes)           */
    sw_memory memory;   /* where the arrays live                               */
    float *x, *y;       /* frames * lenslets centroids (pixels), NaN if invalid */
    float *intensity;   /* frames * lenslets m00 (conditioned intensity units)   */
    uint8_t *valid;     /* frames * lenslets, 1 valid / 0 invalid              */
    float *slopes;      /* frames * 2 * nslopes, pixels                        */
    int owned;          /* made by sw_centroid_result_alloc                     */
    uint8_t *saturated; /* frames * lenslets, 1: a saturated pixel in the region */
} sw_centroid_result;

/* Allocates all six arrays for `frames` frames of the plan in `memory` (SW_MEM_HOST,
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
