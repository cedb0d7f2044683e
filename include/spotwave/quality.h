/*
 * spotwave quality: the image quality of an eye (or any optical system) from its wavefront: the
 * point-spread function (PSF) and modulation transfer function (MTF) at a chosen wavelength and
 * pupil, the Strehl ratio, the visual Strehl ratios of Thibos et al. 2004 and the RMS wavefront
 * error by radial order. On the GPU (cuFFT) or the CPU (FFTW), the same steps.
 *
 * Papers: Goodman J. W. 2005, "Introduction to Fourier Optics", 3rd ed., Roberts & Co., Sec. 6.2
 * and 6.4 (the PSF as the squared modulus of the Fourier transform of the pupil function, the OTF
 * as the normalised transform of the PSF, the diffraction-limited OTF of a circular pupil);
 * Thibos L. N., Hong X., Bradley A., Applegate R. A. 2004, "Accuracy and precision of objective
 * refraction from wavefront aberrations", J. Vision 4(4), 329-351, Appendix (metrics SRX, the
 * Strehl ratio in the space domain, and VSOTF / VSMTF, the visual Strehl ratio computed in the
 * frequency domain); Mannos J. L., Sakrison D. J. 1974, "The effects of a visual fidelity criterion
 * on the encoding of images", IEEE Trans. Inf. Theory 20(4), 525-536 (the contrast sensitivity
 * function used here as the neural weighting, see below).
 *
 * The pupil function. P(X, Y) = A(X, Y) exp(2 pi i W(X, Y) / lambda) on an N x N grid
 * (N = size), zero outside the pupil: the unit disc (A = 1 where X^2 + Y^2 <= 1) is sampled by
 * Q = pupil_samples points across its diameter, sample (i, k) at X = (i + 0.5 - N / 2) / (Q / 2),
 * Y likewise (zernike.h's x, y). W = sum_{j >= first_j} c_j Z_j (zernike.h, micrometres over a
 * pupil of pupil_mm): first_j = 3 leaves piston and tilts out (they only move the PSF).
 *
 * The PSF. PSF = |FFT(P)|^2 / (sum A)^2, so the diffraction-limited PSF has its peak at 1 and the
 * Strehl ratio is the PSF's maximum (Thibos et al.'s SRX). Written as an f32 N x N image with the
 * optical axis at pixel (N / 2, N / 2); one pixel is lambda Q / (N D) radians
 * (sw_psf_arcmin_per_px), D the pupil diameter, so Q <= N / 2 samples the PSF at or above the
 * Nyquist rate of the diffraction-limited image (2 pixels per lambda / D).
 *
 * The OTF and MTF. OTF = FFT(PSF) / sum(PSF); MTF = |OTF|, written as an f32 N x N image with
 * zero frequency at (N / 2, N / 2); one pixel is D / (lambda Q) cycles per radian
 * (sw_psf_cpd_per_px, in cycles per degree), the cut-off D / lambda is Q pixels from the centre.
 *
 * Visual Strehl ratios (Thibos et al. 2004, Appendix):
 *   VSOTF = sum_f CSF(f) Re OTF(f) / sum_f CSF(f) OTF_DL(f),
 *   VSMTF = sum_f CSF(f) MTF(f) / sum_f CSF(f) MTF_DL(f),
 * over every frequency of the grid, OTF_DL the same plan's OTF of the unaberrated pupil (computed
 * when the plan is made, so VSOTF = VSMTF = 1 for W = 0 exactly). The weighting CSF(f) is Mannos
 * & Sakrison's contrast sensitivity function of the radial frequency f in cycles per degree,
 * CSF(f) = 2.6 (0.0192 + 0.114 f) exp(-(0.114 f)^1.1): a band-pass stand-in for the neural CSF of
 * Thibos et al. (their exact neural function was not available to us; the ratios depend only on
 * the function's shape). The OTF is complex, so VSOTF may be negative (a contrast reversal).
 *
 * The frame of the PSF. Pixel (x, y) of the PSF is the angle (x - N / 2, y - N / 2) times the
 * pixel size along the pupil's x and y; the retinal image is the same picture turned a half turn
 * by the eye's optics.
 */
#ifndef SPOTWAVE_QUALITY_H
#define SPOTWAVE_QUALITY_H

#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SW_PSF_MAX_SIZE 4096

typedef struct sw_psf_params {
    int32_t size;          /* N, the FFT grid's side: 16 .. SW_PSF_MAX_SIZE (default 256)      */
    int32_t pupil_samples; /* Q, samples across the pupil's diameter: 4 .. N / 2 (default N / 2) */
    double pupil_mm;       /* the coefficients' pupil diameter, mm (> 0; default 5)            */
    double wavelength_um;  /* the light's wavelength, micrometres (> 0; default 0.555)          */
    int32_t first_j;       /* OSA index of the first term used: 0 .. 3 (default 3)             */
    int32_t max_order;     /* highest radial order a run may give: 1 .. SW_ZERNIKE_MAX_ORDER
                              (default 10)                                                    */
} sw_psf_params;

void sw_psf_params_default(sw_psf_params *p);

/* One run's numbers. */
typedef struct sw_psf_quality {
    double strehl;         /* maximum of the PSF (its diffraction-limited peak is 1)        */
    double vsotf, vsmtf;   /* visual Strehl ratios (see the top)                            */
    double peak_x, peak_y; /* where the PSF is largest, pixels (the first maximum)          */
} sw_psf_quality;

typedef struct sw_psf_plan sw_psf_plan;

/*
 * Validates p and allocates everything (the Zernike terms on the pupil samples, FFT plans, the
 * weights), on the GPU on a CUDA context. SW_EINVAL with a message for: N outside 16..4096, Q
 * outside 4..N/2, a pupil or wavelength not finite and positive, first_j outside 0..3, max_order
 * outside 1..SW_ZERNIKE_MAX_ORDER.
 */
sw_status sw_psf_create(sw_context *ctx, const sw_psf_params *p, sw_psf_plan **out);
void sw_psf_destroy(sw_psf_plan *plan); /* NULL is ignored */

/* Angular size of a PSF pixel, arc minutes; frequency step of an MTF pixel, cycles per degree;
 * the diffraction cut-off D / lambda, cycles per degree. */
double sw_psf_arcmin_per_px(const sw_psf_plan *plan);
double sw_psf_cpd_per_px(const sw_psf_plan *plan);
double sw_psf_cutoff_cpd(const sw_psf_plan *plan);

/*
 * One wavefront: coef[j] for OSA j = 0 .. count - 1 (count >= 1; terms below
 * first_j ignored; terms beyond max_order must be 0). psf and mtf (either may be NULL): f32 images
 * of N x N, in host memory or, on a CUDA context, device memory; quality may be NULL. SW_EINVAL
 * (outputs untouched) for non-finite coefficients or images of another size or type. The run has
 * finished when it returns.
 */
sw_status sw_psf_run(sw_psf_plan *plan, const double *coef, int32_t count, sw_image *psf,
                     sw_image *mtf, sw_psf_quality *quality);

/*
 * The radially averaged MTF of an MTF image of this plan (host memory): out[k] is the mean of the
 * pixels whose distance from the centre rounds to k, for k = 0 .. n - 1 (frequency k times
 * sw_psf_cpd_per_px); NaN where no pixel falls.
 */
sw_status sw_psf_mtf_radial(const sw_psf_plan *plan, const sw_image *mtf, double *out, int32_t n);

/* The diffraction-limited MTF of a circular pupil at frequency f / cut-off u in [0, 1]:
 * (2 / pi) (acos u - u sqrt(1 - u^2)); 0 beyond the cut-off (Goodman Sec. 6.4). */
double sw_mtf_diffraction(double u);

/* Mannos & Sakrison's contrast sensitivity at f cycles per degree (see the top). */
double sw_csf_mannos_sakrison(double f_cpd);

/* RMS wavefront error of the terms of radial order n alone: sqrt(sum c_j^2) over the OSA j of
 * order n below count (micrometres when the coefficients are). */
double sw_zernike_rms_order(const double *coef, int32_t count, int n);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_QUALITY_H */
