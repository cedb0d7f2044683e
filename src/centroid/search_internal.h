/*
 * Between the parts of the centroid search (search.h): search.c (API, validation, dispatch, the
 * CPU PAPYCS / CoM and the discarding stage), search_cuda.cu (their GPU twins) and
 * search_reich.c / search_reich_cuda.cu (Reichenbach's algorithm, seed 001 Sec. 3.2.2). The
 * arithmetic shared by CPU and GPU is search_model.h. Not public.
 */
#ifndef SW_SEARCH_INTERNAL_H
#define SW_SEARCH_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/search.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- Reichenbach (search_reich*) */

/* Reichenbach's state, owned by search_reich.c. */
typedef struct sw_reich sw_reich;

/* Called by sw_search_create for SW_SEARCH_REICHENBACH with parameters already validated
 * (grid present, peak_box, seed_size, thresholds in range; capture_px already resolved:
 * pitch_px / 2 where the caller gave 0). Allocates everything a run needs (device buffers on a CUDA
 * context). */
sw_status sw_reich_create(sw_context *ctx, const sw_search_params *p, sw_reich **out);
void sw_reich_destroy(sw_reich *r); /* NULL is ignored */

/*
 * One run, steps 1-3 of search.h. The frame is checked (size, type, memory) by the caller;
 * active is never NULL (the plan passes an all-ones array when the caller gave NULL), intensity
 * is never NULL. Writes, for every spot: status (OK, INACTIVE or NOT_FOUND), x, y and intensity
 * (the peak's centroid and S0 when found; anything otherwise: the caller sets NaN for spots that
 * are not OK after the discarding stage).
 */
/* CPU: host frame and host arrays. */
sw_status sw_reich_run_cpu(sw_reich *r, const sw_image *frame, const double *sx, const double *sy,
                           const uint8_t *active, double *x, double *y, double *intensity,
                           uint8_t *status);
#ifdef SW_HAVE_CUDA
/* CUDA: device frame (any stride) and device arrays, queued on the context's stream. */
sw_status sw_reich_run_gpu(sw_reich *r, const sw_image *frame, const double *sx, const double *sy,
                           const uint8_t *active, double *x, double *y, double *intensity,
                           uint8_t *status);
#endif
/* Number of peaks of the last run (step 1), -1 before the first. */
int64_t sw_reich_last_peaks(const sw_reich *r);

/* ---------------------------------------------------------------- the plan */

struct sw_search_plan {
    sw_context *ctx;
    sw_search_params p; /* as validated (capture_px resolved) */
    int cuda;           /* 1: the context runs on CUDA        */
    int discard;        /* 1: the discarding stage runs (discard on and a grid) */
    sw_reich *reich;    /* Reichenbach's state, or NULL       */

    /* Host scratch (nspots each): the all-active array, the intensities when the caller gives
     * none, the statuses after criteria 1 and 2 of the discarding stage. */
    uint8_t *h_ones;
    double *h_int;
    uint8_t *h_flag1, *h_flag2;

    /* CUDA (search_cuda.cu): device copies of the run's arrays for host callers, the frame for
     * host frames, the same scratch as above. NULL on the CPU. */
    sw_image d_frame; /* plan-owned device frame (width x height, type) */
    double *d_sx, *d_sy, *d_x, *d_y, *d_int;
    uint8_t *d_active, *d_status, *d_ones, *d_flag1, *d_flag2;
};

/* ---------------------------------------------------------------- discarding stage */

/*
 * The discarding stage of search.h (criteria 1-3) on the result of a search, then the finish:
 * x, y and intensity of every spot whose status is not SW_SPOT_OK become NaN. With
 * plan->discard 0 only the finish runs. One code path for every algorithm.
 * CPU: host frame and host arrays (x, y, intensity, status: nspots each, intensity not NULL).
 */
sw_status sw_search_discard_cpu(sw_search_plan *plan, const sw_image *frame, double *x, double *y,
                                double *intensity, uint8_t *status);
#ifdef SW_HAVE_CUDA
/* CUDA: device frame and device arrays, queued on the context's stream. */
sw_status sw_search_discard_gpu(sw_search_plan *plan, const sw_image *frame, double *x, double *y,
                                double *intensity, uint8_t *status);

/* GPU side of the plan (search_cuda.cu). */
sw_status sw_search_gpu_create(sw_search_plan *plan);
void sw_search_gpu_destroy(sw_search_plan *plan);
/* PAPYCS / CoM on a device frame with device arrays (active and intensity not NULL), queued. */
sw_status sw_search_gpu_search(sw_search_plan *plan, const sw_image *frame, const double *sx,
                               const double *sy, const uint8_t *active, double *x, double *y,
                               double *intensity, uint8_t *status);
/* Copies between host and device arrays of the plan (queued on the context's stream;
 * to_device 1: host -> device). bytes == 0 does nothing. */
sw_status sw_search_gpu_copy(sw_search_plan *plan, void *dst, const void *src, size_t bytes,
                             int to_device);
/* 1 when p is device memory, 2 managed memory, 0 host memory (cudaPointerGetAttributes). */
int sw_search_gpu_is_device(const void *p);
#endif

#ifdef __cplusplus
}
#endif

#endif
