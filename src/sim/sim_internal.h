/*
 * Between the C side of the star simulator (starsim.c, detector.c: API, validation, the CPU
 * renderers) and its CUDA twins (starsim_cuda.cu, detector_cuda.cu). Not public.
 */
#ifndef SW_SIM_INTERNAL_H
#define SW_SIM_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/sim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A star as the renderers take it: the ROI origin (integer pixel) and the star's position
 * relative to it in float (small numbers, so float keeps ~1e-6 px), and its flux.
 * dx = X - x0, dy = Y - y0, with x0 = sw_roi_origin(X, side). */
typedef struct sw_packed_star {
    int32_t x0, y0;
    float dx, dy;
    float flux;
    float pad;
} sw_packed_star;

struct sw_starsim {
    sw_context *ctx;
    sw_starsim_params p;
    sw_starsim_method used;     /* method of the last run */
    sw_packed_star *packed;     /* host buffer of p.max_stars packed stars */
    int64_t auto_adaptive_from; /* AUTO on the GPU: adaptive from this many stars on */
    void *gpu;                  /* state owned by starsim_cuda.cu (device buffers, the LUT) */
    /* Owned by starsim.c: */
    int64_t rendered;    /* stars of the last run whose ROI touched the image */
    int cpu_threads;     /* threads of the OpenMP renderer (the context's at create) */
    double *cpu_w;       /* cpu_threads x 2 x roi_side weights of the OpenMP renderer */
    sw_image gpu_image;  /* CUDA: f32 device image for runs into host images (at create) */
    sw_image host_image; /* CUDA: f32 host image for CPU methods into device images (lazy) */
    int packed_pinned;   /* 1: `packed` is pinned host memory (CUDA: uploads are async DMA) */
    int32_t bands;       /* sw_starsim_set_bands: 0 auto, 1 whole image, n bands */
    int64_t *band_count; /* cpu_threads x (SW_STARSIM_MAX_BANDS + 1): stars per thread and band */
    uint8_t *band_id;    /* max_stars: the band of each star of a banded run (255: skipped) */
    int32_t *band_order; /* max_stars: each worker's chunk of star indices sorted by band */
    uint8_t *row_band;   /* height: the band of each row (banded runs; for the current bands) */
    int32_t row_band_hb; /* the band height row_band was made for (0: none) */
};

#ifdef SW_HAVE_CUDA
/* Allocates the device buffers and builds the adaptive look-up table; sets
 * plan->auto_adaptive_from. */
sw_status sw_starsim_gpu_create(sw_starsim *plan);
/* Renders n packed stars (host array) into out, an f32 device image of the plan's size, with
 * method PARALLEL, ADAPTIVE or DETERMINISTIC. Queued on the context's stream. */
sw_status sw_starsim_gpu_run(sw_starsim *plan, const sw_packed_star *stars, int64_t n,
                             sw_starsim_method method, sw_image *out);
/*
 * A run into `out`, an f32 HOST image of the plan's size, in bands of rows, queued band by band
 * (starsim.c packs band b + 1 while band b is on its way): band b holds the rows [y0, y1) and the
 * packed stars stars[first .. first + n) whose ROI starts in those rows (ROI starts above the
 * image count in band 0); a band is at least roi_side rows, so its stars reach at most into the
 * next band. begin: after the work already queued on the context's stream, clears the plan's
 * device image (DETERMINISTIC: its fixed-point sums). band: uploads the band's stars on a copy
 * stream, renders them on the context's stream (DETERMINISTIC: then turns the band's rows into
 * floats) and, once rendered, copies the band's rows to `out` on a second copy stream (band b's
 * rows are complete after bands b - 1 and b: the only stars that reach them). Bands in order,
 * 0 first. end: waits for the last copy; `out` is complete on return.
 */
sw_status sw_starsim_gpu_bands_begin(sw_starsim *plan, sw_starsim_method method);
sw_status sw_starsim_gpu_band(sw_starsim *plan, int b, const sw_packed_star *stars, int64_t first,
                              int64_t n, int32_t y0, int32_t y1, sw_starsim_method method,
                              sw_image *out);
sw_status sw_starsim_gpu_bands_end(sw_starsim *plan);
/* Waits until the last run's star upload has read plan->packed (before it is packed again). */
sw_status sw_starsim_gpu_wait_upload(sw_starsim *plan);
void sw_starsim_gpu_destroy(sw_starsim *plan);
/* Device time of the last GPU run's rendering kernels (CUDA events), microseconds; -1 if none. */
double sw_starsim_gpu_render_us(sw_starsim *plan);

/* Detector model on device images (same formula and RNG draws as detector.c). */
sw_status sw_detector_apply_cuda(sw_context *ctx, const sw_detector *d, const sw_image *electrons,
                                 sw_image *out);
#endif

#ifdef __cplusplus
}
#endif

#endif
