/*
 * Between the C side of the wavefront maps (zmap.c: API, validation, basis maps, the CPU maps)
 * and the CUDA side (zmap_cuda.cu: the same maps on the GPU). Not public. Seed 001 section 3.4.
 *
 * Layout of the basis maps. Pixel (i, k) of a size x size map sits at X = (2 i + 1) / size - 1,
 * Y = (2 k + 1) / size - 1 (zernike_fit.h). Only the part of each row that can be inside the
 * pupil is stored: row k keeps the pixels [row_a[k], row_a[k] + row_len[k]), the smallest span
 * holding every pixel of the row with o^2 <= X^2 + Y^2 <= 1, widened to multiples of
 * SW_ZMAP_VEC pixels (so a group of SW_ZMAP_VEC pixels starting at a multiple of SW_ZMAP_VEC is
 * either wholly stored or wholly outside, and is one aligned vector load). The spans of all rows
 * follow each other (row k's at row_off[k]) and make one map of npix values; map j (OSA index) is
 * at j * npix. Stored pixels outside the pupil (the span's padding, the central obscuration, or
 * beyond the image's last column) hold NaN in every map, so the sum is NaN there by itself. The
 * disc covers pi / 4 of the square, so this reads ~21 % fewer bytes than full maps.
 */
#ifndef SW_ZMAP_INTERNAL_H
#define SW_ZMAP_INTERNAL_H

#include <stdint.h>

#include "spotwave/zernike_fit.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_ZMAP_VEC       8 /* pixels per vector group: 16 bytes of half, 32 bytes of float */
#define SW_ZMAP_MAX_ORDER 10
#define SW_ZMAP_MAX_TERMS 66 /* sw_zernike_count(10) */
#define SW_ZMAP_MAX_SIZE  8192

struct sw_zmap_plan {
    sw_context *ctx;
    sw_zmap_params p;
    int32_t terms;                      /* J = sw_zernike_count(max_order) */
    int cuda;                           /* the plan lives on the GPU (CUDA context) */
    int threads;                        /* CPU threads */
    int32_t *row_a, *row_len, *row_off; /* per row (host copies on both backends) */
    int64_t npix;                       /* stored pixels per map (a multiple of SW_ZMAP_VEC) */
    void *basis;   /* CPU: terms * npix floats or uint16 halves; NULL on CUDA */
    float *lut;    /* CPU, half: the 65536 half -> float values */
    float *acc;    /* CPU: threads * (size + SW_ZMAP_VEC) floats of row accumulators */
    void *d_rows;  /* CUDA: int4 per row (a, len, off, 0) */
    void *d_basis; /* CUDA: terms * npix float or __half */
};

/* IEEE binary16 <-> binary32, written out bit by bit (no compiler support needed): float -> half
 * rounds to nearest, ties to even, overflows to +-Inf, keeps NaN a (quiet) NaN; half -> float is
 * exact. */
uint16_t sw_half_from_float(float f);
float sw_half_to_float(uint16_t h);

/* 1 when pixel (i, k) of a size x size map lies inside the pupil: o^2 <= X^2 + Y^2 <= 1 with
 * X, Y as above, each operation rounded once in double (the CUDA side uses the same roundings). */
int sw_zmap_inside(int32_t size, double obscuration, int32_t i, int32_t k);

/*
 * A second method (for measurement, not the seed's): the wavefront evaluated on the fly per
 * pixel in double precision, with no basis maps. With w = X + i Y = rho e^{i theta} and
 * t = rho^2, every Z_n^m = N P_nk(t) Re/Im(w^k) (zernike_basis.c), so
 *     W = sum_k [ A_k(t) Re(w^k) + B_k(t) Im(w^k) ],
 * A_k, B_k polynomials in t of degree (n_max - k) / 2 whose coefficients (the c_j N_n^m times
 * the radial coefficients) are worked out once per run on the host: about 2 J multiply-adds per
 * pixel and no memory read. Same output as sw_zmap_run (NaN outside the pupil).
 */
typedef struct sw_zmap_poly {
    int32_t kmax;                                               /* n_max of the terms given */
    int32_t deg[SW_ZMAP_MAX_ORDER + 1];                         /* degree of A_k and B_k in t */
    double a[SW_ZMAP_MAX_ORDER + 1][SW_ZMAP_MAX_ORDER / 2 + 1]; /* A_k: coefficient of t^p */
    double b[SW_ZMAP_MAX_ORDER + 1][SW_ZMAP_MAX_ORDER / 2 + 1]; /* B_k */
} sw_zmap_poly;

#ifdef SW_HAVE_CUDA
/* CUDA side. Failures go through sw_fail on plan->ctx. */
sw_status sw_zmap_cuda_alloc(sw_zmap_plan *plan); /* d_rows (uploaded), d_basis */
sw_status sw_zmap_cuda_upload(sw_zmap_plan *plan, int32_t j0, int32_t nj,
                              const void *host); /* maps j0 .. j0 + nj - 1 from host memory */
void sw_zmap_cuda_free(sw_zmap_plan *plan);
/* The map sum_{j < nterms} c[j] Z_j into a device f32 image (queued on the context's stream). */
sw_status sw_zmap_cuda_run(sw_zmap_plan *plan, const float *c, int32_t nterms, sw_image *out);
sw_status sw_zmap_cuda_direct(sw_zmap_plan *plan, const sw_zmap_poly *poly, sw_image *out);
/* sw_zmap_wrap on device images. */
sw_status sw_zmap_cuda_wrap(sw_context *ctx, const sw_image *map, double wavelength_um,
                            sw_image *out);
#endif

#ifdef __cplusplus
}
#endif

#endif
