/*
 * Between the parts of the pupil stage (not public):
 *   pupil.c        the API (pupil.h): parameters, validation, the plan, dispatch, inspection
 *   pupil_cpu.c    the CPU pipeline (steps 0-9 of pupil.h, OpenMP over rows)
 *   pupil_cuda.cu  its GPU twin (ten kernels captured in one CUDA graph)
 *   pupil_model.h  the arithmetic both share (bit-identical up to the RANSAC winner)
 */
#ifndef SW_PUPIL_INTERNAL_H
#define SW_PUPIL_INTERNAL_H

#include "core/core_internal.h"
#include "pupil/pupil_model.h"
#include "spotwave/pupil.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_PUPIL_MAX_TAPS (2 * SW_PUPIL_MAX_RADIUS + 1)

struct sw_pupil_plan {
    sw_context *ctx;
    sw_pupil_params p; /* resolved: max_radius_px filled in; p.geometry points to geom or NULL */
    sw_sh_geometry geom;
    int has_geom;
    int64_t npix;
    int32_t n_taps;                      /* 2 gauss_radius + 1                          */
    uint32_t gauss_w[SW_PUPIL_MAX_TAPS]; /* Q16 weights, sum 65536 (sw_pupil_gauss_weights) */
    float *randoms;                      /* candidates x 5, host                         */

    /* the last frame, host side (filled by both backends for inspection) */
    int have_frame;
    sw_pupil_result last;

    /* CPU work (pupil_cpu.c): frame-sized u8 images with stride width, border lists */
    uint8_t *img8, *tmp8, *smooth8, *closed8;
    int32_t *border_xy[2]; /* the regions' border lists (x, y pairs) in one list of 2 npix int32
                              (CPU path): [1] starts split x height points after [0] */
    int64_t border_n[2];
    uint8_t *lenslet_mask; /* nx * ny, host copy of the last mask (NULL without geometry) */

    void *gpu;        /* pupil_cuda.cu's state (NULL on a CPU plan) */
    int preset;       /* GPU: the next enqueue runs no tracker (sw_pupil_gpu_preset)      */
    void *host_frame; /* GPU: a host copy of a device frame for the spots path (lazily)    */
    /* the last frame: per pupil, sw_pm_auto_recheck (pupil_model.h): the first fit's failure
     * when a retry of step 3d found the pupil and a refit then found nothing (the spots path
     * measures such a pupil again), else SW_PUPIL_OK */
    sw_pupil_failure recheck[2];
};

/* Q16 weights of the Gaussian (step 1): w_k = round(65536 g_k / sum g) with
 * g_k = exp(-k^2 / (2 sigma^2)), k = -r..r, then the centre weight adjusted so that the sum is
 * exactly 65536. r = 0 gives the single weight 65536 (no smoothing). */
void sw_pupil_gauss_weights(int32_t r, double sigma, uint32_t *w);

/* ---------------------------------------------------------------- CPU (pupil_cpu.c) */

sw_status sw_pupil_cpu_init(sw_pupil_plan *plan);
void sw_pupil_cpu_free(sw_pupil_plan *plan);
/* The whole chain on a host frame; fills *result, plan->last, the host images and border lists,
 * and plan->lenslet_mask when there is a geometry. */
sw_status sw_pupil_cpu_run(sw_pupil_plan *plan, const sw_image *frame, sw_pupil_result *result);

/* The steps, exposed for the tests (all images tight, stride = width, u8): */
/* step 1, separable: rows of in into tmp, then columns of tmp into out. */
void sw_pupil_cpu_gauss(const uint8_t *in, uint8_t *tmp, uint8_t *out, int32_t width,
                        int32_t height, int32_t radius, const uint32_t *w);
/* steps 3-4 on the region [x0, x1) x [0, height) of the frame: inside = smooth > t, then
 * dilation and erosion with a (2 r + 1)^2 square clipped to the region; out (frame-sized,
 * only the region written) gets 1 / 0. tmp is frame-sized scratch. */
void sw_pupil_cpu_close(const uint8_t *smooth, uint8_t *tmp, uint8_t *out, int32_t width,
                        int32_t height, int32_t x0, int32_t x1, int32_t t, int32_t radius);
/* step 5: the border pixels of the region in raster order into xy (x, y pairs); returns n. */
int64_t sw_pupil_cpu_border(const uint8_t *closed, int32_t width, int32_t height, int32_t x0,
                            int32_t x1, int32_t *xy);
/* step 2 (split_x < 0): the split column of a smoothed frame. */
int32_t sw_pupil_cpu_split(const uint8_t *smooth, int32_t width, int32_t height);
/* steps 6-9 for one region's border list (n points xy): RANSAC with the plan's random numbers,
 * refinement, validity, into *out (its region, border and threshold fields are the caller's:
 * only valid, failure, the ellipse, inliers, candidate and votes are written). */
void sw_pupil_cpu_fit(const sw_pupil_plan *plan, const sw_pm_region *r, const int32_t *xy,
                      int64_t n, sw_pupil_ellipse *out);

/* ---------------------------------------------------------------- host (pupil_spots.c) */

/* The lenslet mask of result's pupils into plan->lenslet_mask (with a geometry). */
void sw_pupil_mask_host(sw_pupil_plan *plan, const sw_pupil_result *result);
/* The plan's given pupils as a result (pupil.h "Given pupils"). */
void sw_pupil_given_result(const sw_pupil_plan *plan, sw_pupil_result *result);
/* For each pupil of result not found: glow_failure set, then (spots_fallback) the spots path
 * S1-S6 on the host frame (the plan's size and type); so for every pupil (spots_fallback 2, or
 * 1 with small lenslets: sw_pupil_spots_small_pitch), or one whose edge level did not settle
 * (plan->recheck; spots_fallback 1). The lenslet mask is
 * recomputed into plan->lenslet_mask when a pupil was found. */
sw_status sw_pupil_spots_fallback(sw_pupil_plan *plan, const sw_image *frame,
                                  sw_pupil_result *result);
/* Whether spots_fallback 1 measures every pupil by the spots path (pupil.h): a lenslet pitch of at
 * most 4 x the smoothing's sigma (min(gauss_sigma, gauss_radius)). */
int sw_pupil_spots_small_pitch(const sw_pupil_plan *plan);

#ifdef SW_HAVE_CUDA
/* ---------------------------------------------------------------- GPU (pupil_cuda.cu) */

/* Allocates plan->gpu: device buffers for the frame's size, the random numbers uploaded, the
 * mapped host result; captures the per-frame graph lazily on the first run. */
sw_status sw_pupil_gpu_init(sw_pupil_plan *plan);
void sw_pupil_gpu_free(sw_pupil_plan *plan);
/* The whole chain on a host or device frame; fills *result and plan->last, and the device
 * lenslet mask when there is a geometry (copied to plan->lenslet_mask as well). */
sw_status sw_pupil_gpu_run(sw_pupil_plan *plan, const sw_image *frame, sw_pupil_result *result);
/* Copies the last frame's images (any may be NULL; tight host buffers of npix bytes) and
 * border lists (xy of capacity pairs; *count the full number) from the device. */
sw_status sw_pupil_gpu_images(sw_pupil_plan *plan, uint8_t *img8, uint8_t *smooth8,
                              uint8_t *closed8);
sw_status sw_pupil_gpu_border(sw_pupil_plan *plan, int32_t i, int32_t *xy, int64_t capacity,
                              int64_t *count);
const uint8_t *sw_pupil_gpu_lenslet_mask(const sw_pupil_plan *plan);
/* The host side after the device tracker (sw_pupil_gpu_collect's result): when a pupil was not
 * found and spots_fallback is on, the spots path on the host (frame: the caller's frame, in host
 * memory, or a device frame, copied back from the plan's tight copy); when it finds one, the
 * pupils and the lenslet mask are uploaded to the device (the stream waits) and *result,
 * plan->last and the mapped result updated. *redo (may be NULL) is set to 1 then: steps chained
 * after the tracker on the device (aberrometry.h) must run again with sw_pupil_gpu_preset. */
sw_status sw_pupil_gpu_fallback(sw_pupil_plan *plan, const sw_image *frame, sw_pupil_result *result,
                                int *redo);
/* The next sw_pupil_gpu_enqueue copies the frame but runs no tracker: the pupils and mask on the
 * device are those sw_pupil_gpu_fallback uploaded (given pupils: always so). */
void sw_pupil_gpu_preset(sw_pupil_plan *plan);

/* For the aberrometry pipeline (aberrometry.h), which chains its kernels after the tracker's
 * without waiting: sw_pupil_gpu_enqueue queues the frame's copy (host or device frame) and the
 * graph on the plan's stream and returns at once. When the stream has passed that point the
 * result is in the mapped host memory: sw_pupil_gpu_collect copies it into *result and
 * plan->last. Device addresses for kernels queued after the graph: the frame's tight copy (the
 * plan's type, rows of width pixels) and the two pupils (sw_pupil_ellipse, as in the result). */
sw_status sw_pupil_gpu_enqueue(sw_pupil_plan *plan, const sw_image *frame);
void sw_pupil_gpu_collect(sw_pupil_plan *plan, sw_pupil_result *result);
const void *sw_pupil_gpu_frame(const sw_pupil_plan *plan);
const sw_pupil_ellipse *sw_pupil_gpu_pupils(const sw_pupil_plan *plan);
#endif

#ifdef __cplusplus
}
#endif

#endif /* SW_PUPIL_INTERNAL_H */
