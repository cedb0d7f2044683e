/*
 * Between the parts of refinement (refine.h; not public):
 *   refine.c          the API: parameters, the plan, the CPU path, the mesh, CCD mode, find hook
 *   refine_cuda.cu    the GPU path: a group of 16 (8, 32) lanes per spot
 *   refine_model.h    the per-pixel and per-spot arithmetic, written once for both
 *   refine_joint.c    the joint fit of a blend's children (CPU, both backends)
 */
#ifndef SW_REFINE_INTERNAL_H
#define SW_REFINE_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/refine.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a spot brings to the refinement. */
typedef struct sw_refine_seed {
    double x, y;
    int32_t radius; /* stamp half-size, resolved */
    int32_t pad;
} sw_refine_seed;

/* What a run writes back to its spots: the part of a result every GPU run downloads (the whole
 * sw_refine_result only when the caller asks for it). */
typedef struct sw_refine_packed {
    double x, y, x_var, y_var;
    int32_t flags;
    int32_t pad;
} sw_refine_packed;

struct sw_refine_plan {
    sw_context *ctx;
    sw_refine_params p; /* as given with defaults resolved; p.mask points to `mask` */
    double overload;    /* resolved (INFINITY for 0)                                */
    double beta;        /* MOFFAT's exponent (sw_refine_set_moffat_beta)            */
    uint8_t *mask;      /* width * height or NULL                                   */
    /* the MESH map of the frame being refined */
    float *mesh;
    int32_t mesh_nx, mesh_ny;
    /* host work */
    sw_refine_seed *seeds;
    sw_refine_result *results;
    sw_refine_packed *packed; /* the GPU's write-back (pinned; NULL on a CPU context) */
    int64_t capacity;
    int pinned;
    void *frame_host; /* a device frame copied back for the MESH (CUDA), tight rows */
    void *gpu;        /* refine_cuda.cu's state */
};

struct sw_rm_frame;

/* The union box [x0, x1) x [y0, y1) of the stamps of seeds idx[0 .. k) on f; 0 when empty. */
int sw_refine_joint_box(const struct sw_rm_frame *f, const sw_refine_seed *seeds,
                        const int64_t *idx, int32_t k, int32_t *x0, int32_t *x1, int32_t *y0,
                        int32_t *y1);

/* The joint fit of one blend's children seeds idx[0 .. k) on a host frame (refine.h, "Blends"),
 * GAUSS or MOFFAT; level: the background level of sw_rm_sample (the mesh is f's). 1: results at
 * idx[] filled (SW_REFINE_JOINT); 0: the fit failed; -1: beyond the limits (children, union
 * side); -2: out of memory. results are left alone unless 1. */
int sw_refine_joint_fit(const struct sw_rm_frame *f, int32_t method, double beta, int32_t max_iter,
                        double level, const sw_refine_seed *seeds, const int64_t *idx, int32_t k,
                        sw_refine_result *results);

/* The mesh of a host frame into plan->mesh (MESH background). */
sw_status sw_refine_mesh_compute(sw_refine_plan *plan, const sw_image *frame);

#ifdef SW_HAVE_CUDA
sw_status sw_refine_gpu_create(sw_refine_plan *plan);
void sw_refine_gpu_destroy(sw_refine_plan *plan);
/* n seeds (plan->seeds) on the device frame; x, y, their variances and the flags into
 * plan->packed (host), and, when full, the whole results into plan->results. The mesh, when in
 * use, is plan->mesh (uploaded here). Synchronous. */
sw_status sw_refine_gpu_run(sw_refine_plan *plan, const sw_image *frame, int64_t n, int full);
/* GPU time of the last run's kernel (CUDA events), microseconds; -1 without one. */
double sw_refine_gpu_kernel_us(sw_refine_plan *plan);
/* Lanes per spot of the plan's kernel (32, 16 or 8; SPOTWAVE_REFINE_LANES); 0 without a GPU. */
int sw_refine_gpu_lanes(sw_refine_plan *plan);
#endif

#ifdef __cplusplus
}
#endif

#endif
