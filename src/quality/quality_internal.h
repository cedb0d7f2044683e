/*
 * Between the C side of the image-quality plans (quality.c: API, validation, the pupil samples,
 * the CPU run with FFTW) and the CUDA side (quality_cuda.cu: the same run with cuFFT). Not public.
 *
 * The plan holds the Zernike terms at the pupil's samples only: npix samples inside the unit
 * disc, sample s at grid index idx[s] (row-major in the N x N grid) with the terms' values
 * basis[j * npix + s] for j = 0 .. terms - 1 (double). The weights csf[k] (Mannos & Sakrison) are
 * per grid frequency in the FFT's own order (frequency index (kx, ky) with kx, ky taken modulo N
 * into -N/2 .. N/2 - 1). dl_otf and dl_mtf are the denominators of VSOTF and VSMTF.
 */
#ifndef SW_QUALITY_INTERNAL_H
#define SW_QUALITY_INTERNAL_H

#include <stdint.h>

#include "spotwave/quality.h"
#include "spotwave/zernike.h"

#ifdef __cplusplus
extern "C" {
#endif

struct sw_psf_plan {
    sw_context *ctx;
    sw_psf_params p;
    int cuda;
    int32_t terms; /* sw_zernike_count(max_order): the terms the basis holds */
    int32_t npix;  /* pupil samples inside the disc */
    int32_t *idx;  /* npix grid indices (host) */
    double *basis; /* terms * npix (host) */
    double *csf;   /* N * N weights, FFT order (host) */
    double dl_otf, dl_mtf;
    double arcmin_px, cpd_px;
    /* CPU */
    void *field;    /* fftw_complex N * N */
    void *fft_plan; /* fftw_plan, in place, forward */
    /* CUDA */
    void *d_idx, *d_basis, *d_csf, *d_field, *d_coef, *d_sums;
    float *d_psf, *d_mtf;
    int cufft_plan; /* cufftHandle */
    int have_cufft;
};

/* The sums one run reduces to: [0] max PSF, [1] its index, [2] sum CSF Re OTF, [3] sum CSF MTF. */
#define SW_PSF_SUMS 4

#ifdef SW_HAVE_CUDA
sw_status sw_psf_cuda_alloc(sw_psf_plan *plan);
void sw_psf_cuda_free(sw_psf_plan *plan);
/* coef: plan->terms doubles (host), zero below first_j and beyond the caller's count. psf, mtf:
 * device f32 images or NULL (the plan's own buffers are used). sums: host, SW_PSF_SUMS. */
sw_status sw_psf_cuda_run(sw_psf_plan *plan, const double *coef, sw_image *psf, sw_image *mtf,
                          double *sums);
#endif

#ifdef __cplusplus
}
#endif

#endif
