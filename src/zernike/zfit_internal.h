/*
 * Between the C side of the Zernike fit (zfit.c: API, validation, derivative matrix, CPU fit)
 * and its CUDA twin (zfit_cuda.cu). Not public.
 *
 * The fitted system (seed 001 section 3.3, zernike_fit.h) is kept compact: only the used
 * lenslets' slopes are rows. With nu used lenslets, row i < nu is the x slope of used lenslet i
 * and row nu + i its y slope (nrow = 2 nu); column j - 1 is OSA mode j = 1 .. J - 1 (m = J - 1
 * unknowns). Dense matrices are column-major (LAPACK's order) with leading dimension nrow.
 */
#ifndef SW_ZFIT_INTERNAL_H
#define SW_ZFIT_INTERNAL_H

#include "core/core_internal.h"
#include "spotwave/zernike_fit.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sw_zfit_plan {
    sw_context *ctx;
    sw_zfit_params p; /* as given; p.weights and p.geometry.valid point to the copies below */
    uint8_t *mask;    /* nl copy of geometry.valid, or NULL */
    double *weights;  /* nl copy of the weights, or NULL */
    int32_t nx, ny, nl;
    int32_t n;        /* slopes per axis (lenslets of the mask) */
    int32_t *slope_l; /* n flat lenslet indices of the slopes */
    int32_t J, m;     /* terms, unknowns m = J - 1 */
    double *illum;    /* n illuminated fractions */
    double *D;        /* public matrix: 2 n x m, row-major, unused rows 0 */

    /* compact system */
    int32_t nu, nrow; /* used lenslets, rows = 2 nu */
    int32_t *row_pos; /* nrow: index of the row's slope within a frame (the plan's layout) */
    int32_t *row_l;   /* nrow: the row's flat lenslet index (for the valid flags) */
    double *row_w;    /* nrow: sqrt of the lenslet's weight */
    double *Dc;       /* nrow x m: unweighted rows of D (column-major) */
    double *Aw;       /* nrow x m: W^(1/2) Dc (column-major) */
    double *P;        /* PINV: m x nrow, (W^(1/2) Dc)^+ (column-major, ld m) */
    double *qr, *tau; /* QR: dgeqrf of Aw (nrow x m, column-major) and its m reflectors */
    double *sing;     /* m singular values of Aw, decreasing */
    int32_t rank;     /* singular values kept (m - truncate for PINV, m for QR) */

    /* CPU scratch (allocated at create) */
    double *B;      /* nrow x max_frames: weighted slopes (right-hand sides) */
    double *S;      /* nrow x max_frames: raw slopes, then residuals */
    double *red_A;  /* nrow x m: a frame's reduced system */
    double *red_b;  /* nrow */
    int32_t *red_i; /* nu: the used lenslets a reduced system keeps */
    double *C;      /* m x max_frames: a batch's coefficients */
    double *work;   /* LAPACK workspace */
    int32_t lwork;
    uint8_t *bad; /* max_frames: 1 for a frame with an invalid used lenslet */

    void *gpu; /* zfit_cuda.cu's state on a CUDA context */
};

/*
 * Integrals over the region A = (square [cx - h, cx + h] x [cy - h, cy + h]) n (disc r <= 1)
 * minus (disc r < obsc), in unit-disc coordinates, by Green's theorem (seed 001 section 3.3;
 * zernike_fit.h): area[0] = |A|, gx[j] = iint dZ_j/dX dA = oint Z_j dY,
 * gy[j] = iint dZ_j/dY dA = -oint Z_j dX for OSA j = 0 .. count - 1 (count <= 66). Straight
 * edges take an exact Gauss-Legendre rule; arcs are cut in pieces of at most pi / (8 arc_refine)
 * with a 16-point rule each (arc_refine = 1 in the library; a test compares with larger values).
 */
void sw_zfit_region_integrals(int max_order, double cx, double cy, double h, double obsc,
                              int arc_refine, double *area, double *gx, double *gy);

/* Fits one frame (host arrays: 2 n slopes in the plan's layout, nl flags or NULL) on its own
 * reduced system: the used lenslets that are valid and finite in it. Writes J coefficients and
 * the residual (NULL: not written); NaN when fewer rows than unknowns remain or the reduced
 * system is singular. */
void sw_zfit_host_frame(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid, double *coef,
                        double *residual);

/* 1 when a used lenslet of the frame is flagged 0 or has a non-finite slope. */
int sw_zfit_frame_bad(const sw_zfit_plan *plan, const float *slopes, const uint8_t *valid);

#ifdef SW_HAVE_CUDA
sw_status sw_zfit_gpu_create(sw_zfit_plan *plan);
sw_status sw_zfit_gpu_run(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid,
                          int32_t frames, sw_memory memory, double *coef, double *residual);
void sw_zfit_gpu_destroy(sw_zfit_plan *plan);
#endif

#ifdef __cplusplus
}
#endif

#endif
