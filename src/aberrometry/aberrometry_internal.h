/*
 * Between the parts of the aberrometry stage (not public):
 *   aberrometry.c          the API (aberrometry.h): parameters, validation, the plan and its
 *                          slots, run / run_batch, the CPU pipeline (steps 1-6), the result
 *   aberrometry_cuda.cu    the GPU twin: one frame queued on a slot's stream with no host sync
 *   ab_model.h             the model arithmetic both share (Zernike terms, design rows,
 *                          lenslet classification)
 */
#ifndef SW_ABERROMETRY_INTERNAL_H
#define SW_ABERROMETRY_INTERNAL_H

#include "aberrometry/ab_model.h"
#include "core/core_internal.h"
#include "spotwave/aberrometry.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * What a backend measures for one eye of one frame; aberrometry.c turns it (with the pupil
 * result) into an sw_aberrometry_eye (sw_ab_result_fill). Fields a stage that did not run leaves
 * alone must be 0.
 */
typedef struct sw_ab_raw_eye {
    int32_t failure;       /* sw_ab_failure: SW_AB_OK or the first failure, in the order
                              NO_PUPIL, FEW_CENTRAL, SINGULAR (preliminary), FEW_SPOTS,
                              SINGULAR (final)                                              */
    int32_t lenslets;      /* used lenslets (step 2)                                         */
    int32_t central;       /* of which central (step 3a; 0 without the dynamic mesh)        */
    int32_t found;         /* final search: status OK, or discarded by criterion 1-3 (found
                              by the search, then discarded)                                 */
    int32_t kept;          /* final search: status OK after discarding                       */
    int32_t discarded[3];  /* SW_SPOT_EMPTY, SW_SPOT_SPACING, SW_SPOT_ISOLATED               */
    int32_t outliers;      /* of the kept, rejected by the final fit (SW_SPOT_OUTLIER)        */
    int32_t prelim_ok;     /* 1 when the preliminary fit was solved (prelim[] valid)          */
    double cx, cy, radius; /* analysis circle, pixels (any value when the pupil is not found) */
    double coef[SW_AB_MAX_TERMS];   /* final fit, j = 0 .. J - 1 (coef[0] = 0); valid when
                                       failure is SW_AB_OK                                    */
    double prelim[SW_AB_MAX_TERMS]; /* preliminary fit, j = 0 .. Jp - 1 (prelim[0] = 0); valid
                                       when prelim_ok                                         */
    double residual;                /* RMS of D c - s over the kept slopes (x and y), pixels */
} sw_ab_raw_eye;

typedef struct sw_ab_raw {
    sw_ab_raw_eye eye[2];
} sw_ab_raw;

/* One frame in flight: its own context (stream), pupil tracker and search plans. */
typedef struct sw_ab_slot {
    sw_context *ctx;        /* slot 0: the plan's context; slots 1..: created with
                               sw_context_create for the same CUDA device (own stream)      */
    int own_ctx;            /* 1 when ctx was created here (destroyed with the plan)          */
    sw_pupil_plan *pupil;   /* with the geometry: it makes the lenslet mask (step 1)          */
    sw_search_plan *search; /* p.algorithm on the grid, discarding as the params say: every
                               stage of the dynamic mesh (step 3) and the final search (4)  */
    void *gpu;              /* aberrometry_cuda.cu's state of this slot (NULL on the CPU)    */
} sw_ab_slot;

struct sw_ab_cpu; /* aberrometry.c's work arrays */

struct sw_aberrometry_plan {
    sw_context *ctx;
    sw_aberrometry_params p; /* resolved: window_px filled in (floor(pitch_px) when 0),
                                geometry.valid NULL, ref_x / ref_y point to the copies below,
                                pupil.width / height / type / n_pupils / geometry set (geometry
                                -> p.geometry)                                               */
    double *ref_x, *ref_y;   /* host copies of the reference centroids, nl each (NaN: none;
                                the geometry's reference positions when none were given)     */
    int32_t nl;              /* lenslets, nx * ny                                             */
    int32_t J;               /* terms of the final fit, sw_zernike_count(order)               */
    int32_t Jp;              /* terms of the preliminary fit, sw_zernike_count(prelim_order)
                                with the dynamic mesh; 0 without it                          */
    int dynamic;             /* 1: the dynamic mesh (prelim_order > 0 and PAPYCS)             */
    int32_t n_stages;        /* S: p.mesh_stages with the dynamic mesh, 0 without it          */
    double frac[SW_AB_MAX_STAGES]; /* stage k's circle radius / R_px (aberrometry.h step 3) */
    int32_t Js[SW_AB_MAX_STAGES];  /* stage k's terms, sw_zernike_count(its order); Js[0] = Jp */
    double mesh_tol_px;            /* the mesh check's distance, mesh_tolerance x pitch_px with
                                      the dynamic mesh (0: no check)                           */
    int cuda;        /* the plan's context is CUDA                                     */
    int32_t n_slots; /* CUDA: p.streams; CPU: 1                                        */
    sw_ab_slot slot[SW_AB_MAX_STREAMS];
    int32_t last_slot;     /* the slot of the last frame run, -1 before the first           */
    int timing;            /* sw_aberrometry_enable_timing                                   */
    struct sw_ab_cpu *cpu; /* CPU work arrays (NULL on a CUDA plan)                          */
};

/* Fills out from the pupil result and a backend's raw result: pupil ellipses, circles,
 * pupil_mm, counts, coefficients (NaN for j < J when the eye is invalid), the preliminary
 * coefficients (NaN for j < Jp when that fit was not solved), refraction (sw_zernike_refraction
 * with the higher orders), valid flags. */
sw_status sw_ab_result_fill(sw_aberrometry_plan *plan, const sw_pupil_result *pr,
                            const sw_ab_raw *raw, sw_aberrometry_result *out);

#ifdef SW_HAVE_CUDA
/* ---------------------------------------------------------------- GPU (aberrometry_cuda.cu) */

/* Device state of a slot (slot->gpu): buffers, uploaded reference centroids, handles. */
sw_status sw_ab_gpu_init(sw_aberrometry_plan *plan, int slot);
void sw_ab_gpu_free(sw_aberrometry_plan *plan, int slot);
/* Queues the whole frame on the slot's stream (copy in, the pupil graph via
 * sw_pupil_gpu_enqueue, searches with device arrays, fits, the result's copy out); no host
 * sync. */
sw_status sw_ab_gpu_enqueue(sw_aberrometry_plan *plan, int slot, const sw_image *frame);
/* Waits for the slot and fills the pupil result and the raw result. */
sw_status sw_ab_gpu_collect(sw_aberrometry_plan *plan, int slot, sw_pupil_result *pr,
                            sw_ab_raw *raw);
/* The slot's last frame per lenslet (aberrometry.h sw_aberrometry_spots; any may be NULL). */
sw_status sw_ab_gpu_spots(sw_aberrometry_plan *plan, int slot, double *x, double *y,
                          uint8_t *status, uint8_t *eye, double *x0, double *y0);
/* The slot's last per-stage times (SW_AB_STAGES, microseconds; -1 without timing). */
void sw_ab_gpu_stage_us(const sw_aberrometry_plan *plan, int slot, double *us);
#endif

#ifdef __cplusplus
}
#endif

#endif /* SW_ABERROMETRY_INTERNAL_H */
