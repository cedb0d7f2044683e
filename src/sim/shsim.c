/*
 * The Shack-Hartmann spot simulator (sim_sh.h): pupils, the plan's pupil grid and OPD, truth,
 * the CPU renderers and the truth CSV. The CUDA renderers are in shsim_cuda.cu; the formulas both
 * evaluate are in sh_model.h.
 *
 * Physics: a lenslet of side p and focal length f images the local tilt of the wavefront onto a
 * spot displaced by f <grad W> (the average-tilt theorem: the centroid of |Fraunhofer field|^2 of
 * a exp(i 2 pi W / lambda) is at f times the a^2-weighted mean of grad W, a = 1 on the lit part
 * of the lenslet; Goodman, Introduction to Fourier Optics, Sec. 4.2, Eq. 4-17 for the field);
 * seed 000 Eq. (1)-(5) for the lenslet grid on the detector (geometry.h).
 *
 * GEOMETRIC: the pupil grid holds q x q samples per lenslet (q = samples), sample centres at
 * u = (ix - nx/2 + (k + 1/2)/q) p, plus a one-sample border. Weight of a sample: the fraction of
 * its square inside the pupil (exact 0/1 where the square is clear of the pupil's edges, else
 * 16 x 16 sub-points). <grad W> = sum(w grad W) / sum(w), grad W by central differences (exact for
 * tilts; one-sided next to NaN samples of a phase screen); illum = sum(w) / q^2. The spot (centre
 * reference + F <grad W>, flux flux_e illum) is drawn in a roi_px square.
 *
 * DIFFRACTION: z = lambda f / (p pixel) is the first zero in pixels; focal samples are
 * pixel / os apart, which makes the pupil spacing delta = lambda f os / (pixel N) (one DFT bin
 * per focal sample). One pupil grid at spacing delta covers the array; each lenslet takes the
 * tile of samples its square touches, A = coverage of the sample by (lenslet square AND pupil)
 * (exact for the square, 16 x 16 sub-points at the pupil's edges), and its field is
 * A exp(i 2 pi (W + tilt) / lambda) (sh_model.h), zero-padded to N x N and transformed (FFTW);
 * |E|^2 is box-summed over os x os focal samples per detector pixel.
 * Where the design differs from a plain "window at the reference position": the focal window is
 * centred on the lenslet's true spot (reference + F <grad W>): the tilt removes <grad W> and adds
 * the offset t between the true spot and the focal sample grid, and the window is placed on the
 * detector at the spot's sub-sample. A tilt in the pupil is a shift in the focal plane, so the
 * pattern is the same; but the DFT's periodic window now wraps the pattern's tails about the spot
 * itself, and spots displaced by more than half a pitch are not folded back into their own
 * window. What is left: the wrapped tails pull the centroid towards the window's centre by ~2% of
 * the offset between them (at most half a focal sample, see sw_sh_make_dlens
 * in sh_internal.h), and aberrated spots'
 * asymmetric tails wrap asymmetrically (0.013 px in test_sim_sh's aberrated case at the default
 * FFT size; a larger fft_size reduces both).
 * Flux: GEOMETRIC spots carry flux_e x illum. DIFFRACTION patterns are scaled by
 * flux_e / (N^2 M^2), M = p / delta the lenslet side in samples (sim_sh.h). The DFT's peak is
 * (sum A)^2 = (lit area in samples)^2, so this makes the peak the continuous pattern's; the
 * pattern then carries flux_e sum(A^2) / M^2: illum x flux_e less the light of the continuous
 * pattern beyond the FFT window (for a fully lit lenslet, 1 - O(1 / M): the coverage-weighted edge
 * samples act as a box filter that attenuates the window's outer part). Scaling to flux_e x illum
 * instead would keep the total but make the core too bright by about as much (6% for M = 13.5).
 *
 * Truth weights (both models): the lit area of each sample (w, or A), i.e. the continuous
 * theorem's uniform weights over the lit part of the lenslet. (A^2, "the average-tilt theorem on
 * the sampled field", gives the samples cut by the lenslet's edges too little weight: a 1-D model
 * with fractional edge samples shows the DFT pattern's centroid following the A-weighted mean, the
 * A^2-weighted one biased towards the fully lit side by up to 0.1 DFT bins, and in 2-D the A^2
 * truth was 0.05 px from the analytic lenslet mean at p/delta ~ 10, the A truth 0.009 px.)
 *
 * Determinism: the CPU renderers add spots into the image in lenslet order (threads own bands of
 * rows), so the image does not depend on the thread count.
 */
#include "sim/sh_internal.h"
#include "sim/sh_model.h"
#include "sim/psf.h"
#include "spotwave/io.h"
#include "spotwave/zernike.h"

#include <fftw3.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#ifdef SW_HAVE_OPENMP
#include <omp.h>
#endif

static int on_cuda(const sw_shsim *plan);

#define SHSIM_MAX_ROI        2048
#define SHSIM_MAX_SAMPLES    256
#define SHSIM_MAX_OVERSAMPLE 64
#define SHSIM_MAX_FFT        8192
#define SHSIM_MAX_GRID       ((int64_t)1 << 27) /* pupil-grid samples */
#define SHSIM_SUPER          16                 /* sub-points per side at the pupil's edges */
#define SHSIM_CHUNK_BYTES    ((size_t)64 << 20) /* CPU diffraction: patches per chunk */

/* ------------------------------------------------------------------ pupils */

sw_pupil sw_pupil_circle(double diameter_um)
{
    sw_pupil p;
    memset(&p, 0, sizeof p);
    p.a_um = 0.5 * diameter_um;
    p.b_um = 0.5 * diameter_um;
    return p;
}

sw_status sw_pupil_check(sw_context *ctx, const sw_pupil *p)
{
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "pupil: NULL");
    if (!isfinite(p->cu_um) || !isfinite(p->cv_um) || !isfinite(p->a_um) || !isfinite(p->b_um) ||
        !isfinite(p->angle_deg) || !isfinite(p->obscuration))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: centre (%g, %g) um, semi-axes %g, %g um, angle %g deg and "
                       "obscuration %g must all be finite",
                       p->cu_um, p->cv_um, p->a_um, p->b_um, p->angle_deg, p->obscuration);
    if (p->a_um < 0.0 || p->b_um < 0.0 || (p->a_um == 0.0) != (p->b_um == 0.0))
        return sw_fail(ctx, SW_EINVAL,
                       "pupil: semi-axes %g, %g um: both must be positive (or both 0 for no pupil)",
                       p->a_um, p->b_um);
    if (fabs(p->cu_um) > 1e9 || fabs(p->cv_um) > 1e9 || p->a_um > 1e9 || p->b_um > 1e9)
        return sw_fail(ctx, SW_EINVAL, "pupil: centre (%g, %g) um or semi-axes %g, %g um absurd",
                       p->cu_um, p->cv_um, p->a_um, p->b_um);
    if (!(p->obscuration >= 0.0 && p->obscuration < 1.0))
        return sw_fail(ctx, SW_EINVAL, "pupil: obscuration %g must be in [0, 1)", p->obscuration);
    return SW_OK;
}

/* A pupil ready for repeated tests: rho^2 = (u'/a)^2 + (v'/b)^2 of the rotated offset. */
typedef struct pupil_k {
    int all; /* no pupil: everything lit */
    double cu, cv, c, s, ia, ib, o, imin;
} pupil_k;

static pupil_k pupil_prepare(const sw_pupil *p)
{
    pupil_k k;
    memset(&k, 0, sizeof k);
    k.all = !(p->a_um > 0.0);
    if (k.all)
        return k;
    const double t = p->angle_deg * (SW_SHM_PI / 180.0);
    k.cu = p->cu_um;
    k.cv = p->cv_um;
    k.c = cos(t);
    k.s = sin(t);
    k.ia = 1.0 / p->a_um;
    k.ib = 1.0 / p->b_um;
    k.o = p->obscuration;
    k.imin = 1.0 / fmin(p->a_um, p->b_um);
    return k;
}

static double pupil_rho2(const pupil_k *k, double u, double v)
{
    const double du = u - k->cu, dv = v - k->cv;
    const double up = (du * k->c + dv * k->s) * k->ia, vp = (-du * k->s + dv * k->c) * k->ib;
    return up * up + vp * vp;
}

static int pupil_in(const pupil_k *k, double u, double v)
{
    if (k->all)
        return 1;
    const double r2 = pupil_rho2(k, u, v);
    return r2 <= 1.0 && (k->o <= 0.0 || r2 >= k->o * k->o);
}

int sw_pupil_contains(const sw_pupil *p, double u, double v)
{
    if (!p)
        return 0;
    pupil_k k = pupil_prepare(p);
    return pupil_in(&k, u, v);
}

/* Fraction of the rectangle [u1, u2] x [v1, v2] inside the pupil: exact 0 or 1 when the
 * rectangle is clear of both edges (rho is Lipschitz with constant 1 / min(a, b)), otherwise
 * SHSIM_SUPER^2 sub-points. */
static double pupil_fraction(const pupil_k *k, double u1, double u2, double v1, double v2)
{
    if (!(u2 > u1) || !(v2 > v1))
        return 0.0;
    if (k->all)
        return 1.0;
    const double uc = 0.5 * (u1 + u2), vc = 0.5 * (v1 + v2);
    const double m = 0.5 * hypot(u2 - u1, v2 - v1) * k->imin * (1.0 + 1e-9) + 1e-12;
    const double rho = sqrt(pupil_rho2(k, uc, vc));
    if (rho - m > 1.0 || (k->o > 0.0 && rho + m < k->o))
        return 0.0;
    if (rho + m < 1.0 && (k->o <= 0.0 || rho - m > k->o))
        return 1.0;
    int n = 0;
    for (int j = 0; j < SHSIM_SUPER; j++) {
        const double v = v1 + (v2 - v1) * ((double)j + 0.5) / SHSIM_SUPER;
        for (int i = 0; i < SHSIM_SUPER; i++)
            n += pupil_in(k, u1 + (u2 - u1) * ((double)i + 0.5) / SHSIM_SUPER, v);
    }
    return (double)n / (SHSIM_SUPER * SHSIM_SUPER);
}

/* ------------------------------------------------------------------ names */

const char *sw_sh_model_string(sw_sh_model m)
{
    return m == SW_SH_GEOMETRIC ? "geometric" : m == SW_SH_DIFFRACTION ? "diffraction" : "?";
}

sw_status sw_sh_model_parse(const char *text, sw_sh_model *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_sh_model_parse: NULL argument");
    if (strcasecmp(text, "geometric") == 0)
        *out = SW_SH_GEOMETRIC;
    else if (strcasecmp(text, "diffraction") == 0)
        *out = SW_SH_DIFFRACTION;
    else
        return sw_fail(NULL, SW_EINVAL,
                       "unknown SH spot model \"%s\": expected geometric or diffraction", text);
    return SW_OK;
}

const char *sw_sh_spot_string(sw_sh_spot s)
{
    return s == SW_SH_SPOT_GAUSSIAN ? "gaussian" : s == SW_SH_SPOT_SINC2 ? "sinc2" : "?";
}

sw_status sw_sh_spot_parse(const char *text, sw_sh_spot *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "sw_sh_spot_parse: NULL argument");
    if (strcasecmp(text, "gaussian") == 0)
        *out = SW_SH_SPOT_GAUSSIAN;
    else if (strcasecmp(text, "sinc2") == 0)
        *out = SW_SH_SPOT_SINC2;
    else
        return sw_fail(NULL, SW_EINVAL, "unknown SH spot shape \"%s\": expected gaussian or sinc2",
                       text);
    return SW_OK;
}

/* ------------------------------------------------------------------ parameters */

void sw_shsim_params_default(sw_shsim_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    sw_sh_geometry_default(&p->geom);
    p->width = 160; /* the default 10 x 10 grid of 16 px */
    p->height = 160;
    p->model = SW_SH_GEOMETRIC;
    p->spot = SW_SH_SPOT_GAUSSIAN;
    p->wavelength_um = 0.8;
    p->sigma_px = 0.0;
    p->flux_e = 5e4;
    p->roi_px = 0;
    p->samples = 16;
    p->oversample = 0;
    p->fft_size = 0;
    p->pupil = sw_pupil_circle(0.0);
    p->min_illum = 0.0;
}

/* Smallest 2^a 3^b 5^c >= n (n >= 1). */
static int64_t next_smooth(int64_t n)
{
    for (int64_t m = n < 1 ? 1 : n;; m++) {
        int64_t r = m;
        while (r % 2 == 0)
            r /= 2;
        while (r % 3 == 0)
            r /= 3;
        while (r % 5 == 0)
            r /= 5;
        if (r == 1)
            return m;
    }
}

static sw_status check_params(sw_context *ctx, const sw_shsim_params *p)
{
    if (p->width <= 0 || p->height <= 0 || p->width > SW_IMAGE_MAX_DIM ||
        p->height > SW_IMAGE_MAX_DIM ||
        (int64_t)p->width * (int64_t)p->height > SW_IMAGE_MAX_PIXELS)
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: image size %dx%d is not valid (1 to %d per side, at most "
                       "%lld pixels)",
                       (int)p->width, (int)p->height, SW_IMAGE_MAX_DIM, SW_IMAGE_MAX_PIXELS);
    sw_status st = sw_sh_geometry_check(ctx, &p->geom, p->width, p->height);
    if (st != SW_OK)
        return st;
    if (p->model != SW_SH_GEOMETRIC && p->model != SW_SH_DIFFRACTION)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: unknown model %d", (int)p->model);
    if (p->spot != SW_SH_SPOT_GAUSSIAN && p->spot != SW_SH_SPOT_SINC2)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: unknown spot shape %d", (int)p->spot);
    if (!(p->wavelength_um > 0.0) || !(p->wavelength_um < 1e6))
        return sw_fail(ctx, SW_EINVAL, "SH simulator: wavelength %g um must be positive and finite",
                       p->wavelength_um);
    if (!(p->sigma_px >= 0.0) || !(p->sigma_px <= 1e6))
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: spot sigma %g px must be finite and >= 0 (0: automatic)",
                       p->sigma_px);
    if (!(p->flux_e >= 0.0) || !(p->flux_e <= FLT_MAX))
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: flux %g e- must be finite, non-negative and at most %g",
                       p->flux_e, (double)FLT_MAX);
    if (p->roi_px < 0 || p->roi_px > SHSIM_MAX_ROI)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: ROI side %d px: expected 0 (automatic) to %d",
                       (int)p->roi_px, SHSIM_MAX_ROI);
    if (p->samples < 0 || p->samples > SHSIM_MAX_SAMPLES)
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: %d pupil samples per lenslet: expected 1 to %d (0: 16)",
                       (int)p->samples, SHSIM_MAX_SAMPLES);
    if (p->oversample < 0 || p->oversample > SHSIM_MAX_OVERSAMPLE)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: oversample %d: expected 0 (automatic) to %d",
                       (int)p->oversample, SHSIM_MAX_OVERSAMPLE);
    if (p->fft_size < 0 || p->fft_size > SHSIM_MAX_FFT)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: FFT size %d: expected 0 (automatic) to %d",
                       (int)p->fft_size, SHSIM_MAX_FFT);
    if ((st = sw_pupil_check(ctx, &p->pupil)) != SW_OK)
        return st;
    if (!(p->min_illum >= 0.0 && p->min_illum < 1.0))
        return sw_fail(ctx, SW_EINVAL, "SH simulator: min_illum %g must be in [0, 1)",
                       p->min_illum);
    return SW_OK;
}

/* The automatic choices (sim_sh.h); fails for sampling that cannot be honoured. */
static sw_status resolve_params(sw_context *ctx, sw_shsim *plan)
{
    sw_shsim_params *p = &plan->p;
    const sw_sh_geometry *g = &p->geom;
    plan->p_um = sw_sh_lenslet_um(g);
    plan->F = sw_sh_px_per_rad(g);
    plan->z_px = p->wavelength_um * g->focal_mm * 1000.0 / (plan->p_um * g->pixel_um);
    if (!(plan->z_px > 0.0) || !isfinite(plan->z_px))
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: the diffraction scale lambda f / p = %g px "
                       "is not usable",
                       plan->z_px);
    if (p->sigma_px == 0.0)
        p->sigma_px = 0.42 * plan->z_px;
    if (!(p->sigma_px > 0.0) || !isfinite(p->sigma_px))
        return sw_fail(ctx, SW_EINVAL, "SH simulator: spot sigma %g px is not usable", p->sigma_px);
    if (p->roi_px == 0) {
        double r = ceil(g->pitch_px) + 2.0;
        p->roi_px = r > SHSIM_MAX_ROI ? SHSIM_MAX_ROI : (int32_t)r;
    }
    if (p->samples == 0)
        p->samples = 16;
    const int needs_os = p->model == SW_SH_DIFFRACTION || p->spot == SW_SH_SPOT_SINC2;
    if (p->oversample == 0) {
        double os = ceil(2.0 / plan->z_px);
        if (os < 2.0)
            os = 2.0;
        if (os > SHSIM_MAX_OVERSAMPLE) {
            if (needs_os)
                return sw_fail(ctx, SW_EINVAL,
                               "SH simulator: the lenslet's diffraction pattern (first zero %g px) "
                               "needs %g focal samples per pixel, more than the %d spotwave takes",
                               plan->z_px, os, SHSIM_MAX_OVERSAMPLE);
            os = SHSIM_MAX_OVERSAMPLE;
        }
        p->oversample = (int32_t)os;
    }
    plan->os = p->oversample;
    if (p->model != SW_SH_DIFFRACTION)
        return SW_OK;
    if (p->fft_size == 0) {
        int64_t n = next_smooth((int64_t)ceil(2.0 * p->oversample * g->pitch_px - 1e-9));
        if (n > SHSIM_MAX_FFT)
            return sw_fail(ctx, SW_EINVAL,
                           "SH simulator: a %g px lenslet at oversample %d needs an FFT of %lld, "
                           "more than the %d spotwave takes",
                           g->pitch_px, (int)p->oversample, (long long)n, SHSIM_MAX_FFT);
        p->fft_size = (int32_t)n;
    }
    plan->N = p->fft_size;
    plan->h = p->wavelength_um * g->focal_mm * 1000.0 * plan->os / (g->pixel_um * plan->N);
    plan->m_samples = plan->p_um / plan->h;
    const double tile = floor(plan->m_samples) + 2.0;
    if (tile > plan->N)
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: the lenslet spans %.1f pupil samples, which does not fit an "
                       "FFT of %d (FFT size %d, oversample %d: raise the FFT size or the "
                       "oversampling)",
                       plan->m_samples, (int)plan->N, (int)plan->N, (int)plan->os);
    plan->tile = (int32_t)tile;
    plan->pw = (plan->N - 1) / plan->os + 2;
    return SW_OK;
}

/* ------------------------------------------------------------------ pupil grid */

/* Lenslet ix's extent in u (um): [(ix - nx/2) p, (ix + 1 - nx/2) p). */
static double lens_lo(double p_um, int32_t i, int32_t n)
{
    return ((double)i - 0.5 * (double)n) * p_um;
}

/* Marks lit samples (2) and their four neighbours (1) in need. */
static void mark_neighbours(sw_shsim *plan)
{
    const int32_t W = plan->gw, H = plan->gh;
    for (int32_t k = 1; k + 1 < H; k++)
        for (int32_t i = 1; i + 1 < W; i++) {
            const size_t s = (size_t)k * W + i;
            if (plan->need[s] != 2)
                continue;
            const size_t nb[4] = {s - 1, s + 1, s - (size_t)W, s + (size_t)W};
            for (int j = 0; j < 4; j++)
                if (plan->need[nb[j]] == 0)
                    plan->need[nb[j]] = 1;
        }
}

static sw_status alloc_grid(sw_shsim *plan)
{
    const int64_t n = (int64_t)plan->gw * plan->gh;
    if (plan->gw < 3 || plan->gh < 3 || n > SHSIM_MAX_GRID)
        return sw_fail(
            plan->ctx, SW_EINVAL,
            "SH simulator: the pupil grid would hold %dx%d samples (at most %lld in all: "
            "fewer lenslets, samples, or a smaller FFT)",
            (int)plan->gw, (int)plan->gh, (long long)SHSIM_MAX_GRID);
    plan->opd = calloc((size_t)n, sizeof(double));
    plan->scratch = malloc((size_t)n * sizeof(double));
    plan->need = calloc((size_t)n, 1);
    if (!plan->opd || !plan->scratch || !plan->need)
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory for a %dx%d pupil grid",
                       (int)plan->gw, (int)plan->gh);
    return SW_OK;
}

static sw_status build_lit(sw_shsim *plan)
{
    const sw_shsim_params *p = &plan->p;
    int32_t n = 0;
    for (int32_t l = 0; l < plan->nl; l++)
        n += sw_sh_is_valid(&p->geom, l) && plan->illum[l] > p->min_illum;
    plan->nlit = n;
    plan->lit = malloc(((size_t)n + 1) * sizeof *plan->lit);
    if (!plan->lit)
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory");
    n = 0;
    for (int32_t l = 0; l < plan->nl; l++)
        if (sw_sh_is_valid(&p->geom, l) && plan->illum[l] > p->min_illum)
            plan->lit[n++] = l;
    return SW_OK;
}

/* GEOMETRIC: q x q samples per lenslet plus a one-sample border; coverage and illumination. */
static sw_status setup_geometric(sw_shsim *plan)
{
    const sw_sh_geometry *g = &plan->p.geom;
    const int32_t q = plan->p.samples;
    const int64_t gw = (int64_t)g->nx * q + 2, gh = (int64_t)g->ny * q + 2;
    plan->h = plan->p_um / q;
    /* (too large a grid is refused by alloc_grid) */
    plan->gw = gw > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)gw;
    plan->gh = gh > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)gh;
    plan->gu0 = lens_lo(plan->p_um, 0, g->nx) - 0.5 * plan->h;
    plan->gv0 = lens_lo(plan->p_um, 0, g->ny) - 0.5 * plan->h;
    sw_status st = alloc_grid(plan);
    if (st != SW_OK)
        return st;
    const size_t n = (size_t)plan->gw * plan->gh;
    if (!(plan->cover = calloc(n, sizeof(float))))
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory for the pupil grid");
    const pupil_k pk = pupil_prepare(&plan->p.pupil);
    const double h = plan->h;
    const int32_t W = plan->gw;
#pragma omp parallel for schedule(dynamic, 4) num_threads(plan->threads)
    for (int32_t k = 1; k < plan->gh - 1; k++) {
        const double v = plan->gv0 + k * h;
        for (int32_t i = 1; i < W - 1; i++) {
            const double u = plan->gu0 + i * h;
            plan->cover[(size_t)k * W + i] =
                (float)pupil_fraction(&pk, u - 0.5 * h, u + 0.5 * h, v - 0.5 * h, v + 0.5 * h);
        }
    }
    for (int32_t l = 0; l < plan->nl; l++) {
        const int32_t ix = l % g->nx, iy = l / g->nx;
        double s = 0.0;
        for (int32_t kv = 0; kv < q; kv++) {
            const float *row = plan->cover + (size_t)(1 + iy * q + kv) * W + 1 + ix * q;
            for (int32_t ku = 0; ku < q; ku++)
                s += row[ku];
        }
        plan->illum[l] = s / ((double)q * q);
    }
    if ((st = build_lit(plan)) != SW_OK)
        return st;
    for (int32_t i = 0; i < plan->nlit; i++) {
        const int32_t l = plan->lit[i], ix = l % g->nx, iy = l / g->nx;
        for (int32_t kv = 0; kv < q; kv++) {
            const size_t row = (size_t)(1 + iy * q + kv) * W + 1 + (size_t)ix * q;
            for (int32_t ku = 0; ku < q; ku++)
                if (plan->cover[row + ku] > 0.0f)
                    plan->need[row + ku] = 2;
        }
    }
    mark_neighbours(plan);
    plan->gspots = calloc((size_t)plan->nlit + 1, sizeof *plan->gspots);
    if (!plan->gspots)
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory");
    return SW_OK;
}

/* First sample of the tile of the lenslet spanning [lo, lo + p): the first whose square
 * [u - h/2, u + h/2] reaches past lo. */
static int32_t tile_origin(const sw_shsim *plan, double lo, double g0)
{
    return (int32_t)floor((lo - 0.5 * plan->h - g0) / plan->h) + 1;
}

/* The amplitudes of lenslet l's tile (tile x tile floats, or NULL: only their sums). */
static void lens_tile(const sw_shsim *plan, const pupil_k *pk, int32_t l, float *amp, double *sum_a)
{
    const sw_sh_geometry *g = &plan->p.geom;
    const int32_t ix = l % g->nx, iy = l / g->nx, T = plan->tile;
    const double h = plan->h;
    const double ul = lens_lo(plan->p_um, ix, g->nx), uh = lens_lo(plan->p_um, ix + 1, g->nx);
    const double vl = lens_lo(plan->p_um, iy, g->ny), vh = lens_lo(plan->p_um, iy + 1, g->ny);
    const int32_t gx0 = tile_origin(plan, ul, plan->gu0), gy0 = tile_origin(plan, vl, plan->gv0);
    double s = 0.0;
    for (int32_t b = 0; b < T; b++) {
        const double v = plan->gv0 + (double)(gy0 + b) * h;
        const double v1 = fmax(v - 0.5 * h, vl), v2 = fmin(v + 0.5 * h, vh);
        for (int32_t a = 0; a < T; a++) {
            const double u = plan->gu0 + (double)(gx0 + a) * h;
            const double u1 = fmax(u - 0.5 * h, ul), u2 = fmin(u + 0.5 * h, uh);
            double A = 0.0;
            if (u2 > u1 && v2 > v1)
                A = (u2 - u1) * (v2 - v1) / (h * h) * pupil_fraction(pk, u1, u2, v1, v2);
            if (amp)
                amp[(size_t)b * T + a] = (float)A;
            s += A;
        }
    }
    *sum_a = s;
}

/* DIFFRACTION: the grid at spacing delta over the array (+ margin), the lit lenslets' tiles. */
static sw_status setup_diffraction(sw_shsim *plan)
{
    const sw_sh_geometry *g = &plan->p.geom;
    const double M = plan->m_samples;
    const double gw = ceil(g->nx * M) + 6.0, gh = ceil(g->ny * M) + 6.0;
    plan->gw = gw > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)gw;
    plan->gh = gh > INT32_MAX / 2 ? INT32_MAX / 2 : (int32_t)gh;
    plan->gu0 = -0.5 * (plan->gw - 1) * plan->h;
    plan->gv0 = -0.5 * (plan->gh - 1) * plan->h;
    sw_status st = alloc_grid(plan);
    if (st != SW_OK)
        return st;
    const pupil_k pk = pupil_prepare(&plan->p.pupil);
    const double area = M * M;
#pragma omp parallel for schedule(dynamic, 16) num_threads(plan->threads)
    for (int32_t l = 0; l < plan->nl; l++) {
        double s;
        lens_tile(plan, &pk, l, NULL, &s);
        plan->illum[l] = fmin(s / area, 1.0);
    }
    if ((st = build_lit(plan)) != SW_OK)
        return st;
    const int32_t T = plan->tile;
    size_t na;
    if (!sw_mul_ok((size_t)plan->nlit, (size_t)T * T, &na) || !sw_mul_ok(na, sizeof(float), &na) ||
        !(plan->amp = malloc(na + sizeof(float))) ||
        !(plan->tile_g = malloc(2 * ((size_t)plan->nlit + 1) * sizeof(int32_t))) ||
        !(plan->dlens = calloc((size_t)plan->nlit + 1, sizeof *plan->dlens)))
        return sw_fail(plan->ctx, SW_ENOMEM,
                       "SH simulator: out of memory for %d lenslet tiles of %dx%d samples",
                       (int)plan->nlit, (int)T, (int)T);
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 16) num_threads(plan->threads) reduction(| : bad)
    for (int32_t i = 0; i < plan->nlit; i++) {
        const int32_t l = plan->lit[i], ix = l % g->nx, iy = l / g->nx;
        const int32_t gx0 = tile_origin(plan, lens_lo(plan->p_um, ix, g->nx), plan->gu0);
        const int32_t gy0 = tile_origin(plan, lens_lo(plan->p_um, iy, g->ny), plan->gv0);
        plan->tile_g[2 * i] = gx0;
        plan->tile_g[2 * i + 1] = gy0;
        bad |= gx0 < 1 || gy0 < 1 || gx0 + T > plan->gw - 1 || gy0 + T > plan->gh - 1;
        double s;
        if (!bad)
            lens_tile(plan, &pk, l, plan->amp + (size_t)i * T * T, &s);
    }
    if (bad)
        return sw_fail(plan->ctx, SW_EINTERNAL,
                       "SH simulator: a lenslet tile falls outside the pupil grid");
    for (int32_t i = 0; i < plan->nlit; i++) {
        const float *a = plan->amp + (size_t)i * T * T;
        for (int32_t b = 0; b < T; b++)
            for (int32_t c = 0; c < T; c++)
                if (a[(size_t)b * T + c] > 0.0f)
                    plan->need[(size_t)(plan->tile_g[2 * i + 1] + b) * plan->gw +
                               (size_t)(plan->tile_g[2 * i] + c)] = 2;
    }
    mark_neighbours(plan);
    return SW_OK;
}

/* CPU buffers of the renderers. */
static sw_status setup_cpu(sw_shsim *plan)
{
    const int nt = plan->threads;
    if (plan->p.model == SW_SH_GEOMETRIC) {
        plan->cpu_w = malloc((size_t)nt * 2u * (size_t)plan->p.roi_px * sizeof(double));
        if (!plan->cpu_w)
            return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory");
        return SW_OK;
    }
    const int N = plan->N, T = plan->tile;
    size_t nb;
    if (!sw_mul_ok((size_t)N * N, (size_t)nt, &nb) || !sw_mul_ok(nb, sizeof(fftw_complex), &nb))
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: FFT buffers too large");
    const size_t patch = (size_t)plan->pw * plan->pw * sizeof(double);
    size_t chunk = SHSIM_CHUNK_BYTES / patch;
    if (chunk < (size_t)nt)
        chunk = (size_t)nt;
    if (chunk > (size_t)plan->nlit)
        chunk = plan->nlit > 0 ? (size_t)plan->nlit : 1;
    plan->chunk = (int32_t)chunk;
    plan->fft_buf = fftw_malloc(nb);
    plan->fft_map = malloc((size_t)nt * 2u * (size_t)N * sizeof(int32_t));
    plan->patches = malloc(chunk * patch);
    if (!plan->fft_buf || !plan->fft_map || !plan->patches)
        return sw_fail(plan->ctx, SW_ENOMEM,
                       "SH simulator: out of memory for %d FFT buffers of %dx%d", nt, N, N);
    fftw_complex *buf = plan->fft_buf;
    /* FFTW's planner is not thread-safe: one planner at a time across spotwave. FFTW_MEASURE
     * (0.1 to 0.8 s per new size, remembered for the process) runs 2-7x faster than
     * FFTW_ESTIMATE's plans for these strided transforms (N = 192, 256). */
    sw_fftw_planner_lock();
    {
        /* rows 0 .. T-1 (the tile's), then every column: the 2-D DFT of the zero-padded tile */
        plan->fft_rows = fftw_plan_many_dft(1, &N, T, buf, NULL, 1, N, buf, NULL, 1, N,
                                            FFTW_FORWARD, FFTW_MEASURE);
        plan->fft_cols = fftw_plan_many_dft(1, &N, N, buf, NULL, N, 1, buf, NULL, N, 1,
                                            FFTW_FORWARD, FFTW_MEASURE);
    }
    sw_fftw_planner_unlock();
    if (!plan->fft_rows || !plan->fft_cols)
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: FFTW could not plan a %dx%d FFT", N, N);
    return SW_OK;
}

/* The per-lenslet formulas' constants and the lit samples' bounding box. */
static void finish_setup(sw_shsim *plan)
{
    sw_sh_kconst *c = &plan->kc;
    c->roi = plan->p.roi_px;
    c->os = plan->os;
    c->N = plan->N;
    c->F = plan->F;
    c->kw = 2.0 * SW_SHM_PI / plan->p.wavelength_um;
    c->h = plan->h;
    c->m_samples = plan->m_samples;
    int32_t i0 = plan->gw, i1 = -1, k0 = plan->gh, k1 = -1;
    for (int32_t k = 0; k < plan->gh; k++)
        for (int32_t i = 0; i < plan->gw; i++)
            if (plan->need[(size_t)k * plan->gw + i] == 2) {
                i0 = i < i0 ? i : i0;
                i1 = i > i1 ? i : i1;
                k0 = k < k0 ? k : k0;
                k1 = k > k1 ? k : k1;
            }
    plan->lit_i0 = i0;
    plan->lit_i1 = i1;
    plan->lit_k0 = k0;
    plan->lit_k1 = k1;
}

/* ------------------------------------------------------------------ plan */

sw_status sw_shsim_create(sw_context *ctx, const sw_shsim_params *p, sw_shsim **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_shsim_create: out is NULL");
    *out = NULL;
    if (!ctx || !p)
        return sw_fail(ctx, SW_EINVAL, "sw_shsim_create: %s is NULL", ctx ? "params" : "context");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    sw_shsim *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "SH simulator: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    plan->threads = sw_context_threads(ctx);
    if (plan->threads < 1)
        plan->threads = 1;
    const sw_sh_geometry *g = &plan->p.geom;
    plan->nl = g->nx * g->ny;
    if ((st = resolve_params(ctx, plan)) != SW_OK) {
        sw_shsim_destroy(plan);
        return st;
    }
    if (p->geom.valid) {
        if (!(plan->valid = malloc((size_t)plan->nl))) {
            sw_shsim_destroy(plan);
            return sw_fail(ctx, SW_ENOMEM, "SH simulator: out of memory");
        }
        memcpy(plan->valid, p->geom.valid, (size_t)plan->nl);
        plan->p.geom.valid = plan->valid;
    }
    const size_t nl = (size_t)plan->nl;
    plan->illum = calloc(nl, sizeof(double));
    plan->truth_x = malloc(nl * sizeof(double));
    plan->truth_y = malloc(nl * sizeof(double));
    plan->slope_x = malloc(nl * sizeof(double));
    plan->slope_y = malloc(nl * sizeof(double));
    if (!plan->illum || !plan->truth_x || !plan->truth_y || !plan->slope_x || !plan->slope_y) {
        sw_shsim_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "SH simulator: out of memory for %d lenslets", plan->nl);
    }
    for (size_t l = 0; l < nl; l++)
        plan->truth_x[l] = plan->truth_y[l] = plan->slope_x[l] = plan->slope_y[l] = NAN;
    st = plan->p.model == SW_SH_GEOMETRIC ? setup_geometric(plan) : setup_diffraction(plan);
    if (st == SW_OK)
        finish_setup(plan);
    if (st == SW_OK && ctx->backend != SW_BACKEND_CUDA)
        st = setup_cpu(plan);
#ifdef SW_HAVE_CUDA
    if (st == SW_OK && ctx->backend == SW_BACKEND_CUDA) {
        if (plan->p.model == SW_SH_DIFFRACTION &&
            !(plan->opd_f = malloc((size_t)plan->gw * plan->gh * sizeof(float))))
            st = sw_fail(ctx, SW_ENOMEM, "SH simulator: out of memory");
        if (st == SW_OK)
            st = sw_image_alloc_device(ctx, p->width, p->height, SW_PIX_F32, &plan->gpu_image);
        if (st == SW_OK)
            st = sw_shsim_gpu_create(plan);
    }
#endif
    if (st != SW_OK) {
        sw_shsim_destroy(plan);
        return st;
    }
    plan->dirty = 1;
    plan->gpu_stale = 1;
    sw_log(ctx, SW_LOG_DEBUG,
           "SH simulator: %s, %dx%d lenslets (%d drawn), z = %.4g px, oversample %d, FFT %d, "
           "pupil grid %dx%d at %.4g um",
           sw_sh_model_string(plan->p.model), (int)g->nx, (int)g->ny, (int)plan->nlit, plan->z_px,
           (int)plan->p.oversample, (int)plan->p.fft_size, (int)plan->gw, (int)plan->gh, plan->h);
    *out = plan;
    return SW_OK;
}

void sw_shsim_destroy(sw_shsim *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_shsim_gpu_destroy(plan);
#endif
    sw_image_free(&plan->gpu_image);
    if (plan->fft_rows || plan->fft_cols) {
        sw_fftw_planner_lock();
        if (plan->fft_rows)
            fftw_destroy_plan((fftw_plan)plan->fft_rows);
        if (plan->fft_cols)
            fftw_destroy_plan((fftw_plan)plan->fft_cols);
        sw_fftw_planner_unlock();
    }
    fftw_free(plan->fft_buf);
    free(plan->fft_map);
    free(plan->patches);
    free(plan->cpu_w);
    free(plan->opd_f);
    free(plan->gspots);
    free(plan->dlens);
    free(plan->tile_g);
    free(plan->amp);
    free(plan->truth_x);
    free(plan->truth_y);
    free(plan->slope_x);
    free(plan->slope_y);
    free(plan->lit);
    free(plan->illum);
    free(plan->cover);
    free(plan->need);
    free(plan->scratch);
    free(plan->opd);
    free(plan->valid);
    free(plan);
}

const sw_shsim_params *sw_shsim_params_used(const sw_shsim *plan)
{
    return plan ? &plan->p : NULL;
}

/* ------------------------------------------------------------------ OPD */

sw_status sw_shsim_clear_opd(sw_shsim *plan)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_shsim_clear_opd: plan is NULL");
    memset(plan->opd, 0, (size_t)plan->gw * plan->gh * sizeof(double));
    plan->dirty = 1;
    plan->dev_opd = 0;
    return SW_OK;
}

/* The host setters that add to the OPD refuse to add to one that lives on the device. */
static sw_status check_host_opd(const sw_shsim *plan, const char *fn)
{
    if (!plan->dev_opd)
        return SW_OK;
    return sw_fail(plan->ctx, SW_EUNSUPPORTED,
                   "SH simulator: %s cannot add to the OPD set on the device by "
                   "sw_shsim_set_opd_device (the host does not hold it): sw_shsim_clear_opd first",
                   fn);
}

/* Adds the scratch values of the samples in use to the OPD. */
static void commit_scratch(sw_shsim *plan)
{
    const size_t n = (size_t)plan->gw * plan->gh;
#pragma omp parallel for schedule(static) num_threads(plan->threads)
    for (size_t i = 0; i < n; i++)
        if (plan->need[i])
            plan->opd[i] += plan->scratch[i];
    plan->dirty = 1;
}

sw_status sw_shsim_add_zernike(sw_shsim *plan, const double *coef_um, int32_t count,
                               double radius_um)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_shsim_add_zernike: plan is NULL");
    sw_context *ctx = plan->ctx;
    const int32_t max = sw_zernike_count(SW_ZERNIKE_MAX_ORDER);
    if (count < 0 || count > max)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: %d Zernike terms: expected 0 to %d",
                       (int)count, (int)max);
    sw_status st = check_host_opd(plan, "sw_shsim_add_zernike");
    if (st != SW_OK)
        return st;
    if (count == 0)
        return SW_OK;
    if (!coef_um)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: the Zernike coefficients are NULL");
    if (!(radius_um > 0.0) || !(radius_um < 1e12))
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: Zernike radius %g um must be positive "
                       "and finite",
                       radius_um);
    for (int32_t j = 0; j < count; j++)
        if (!(fabs(coef_um[j]) <= 1e6))
            return sw_fail(ctx, SW_EINVAL,
                           "SH simulator: Zernike coefficient j = %d is %g um (must be finite, "
                           "at most 1e6 in magnitude)",
                           (int)j, coef_um[j]);
    const sw_pupil *pu = &plan->p.pupil;
    const double ir = 1.0 / radius_um;
    const int32_t W = plan->gw;
#pragma omp parallel for schedule(dynamic, 4) num_threads(plan->threads)
    for (int32_t k = 0; k < plan->gh; k++) {
        const double y = (plan->gv0 + k * plan->h - pu->cv_um) * ir;
        for (int32_t i = 0; i < W; i++) {
            const size_t s = (size_t)k * W + i;
            if (!plan->need[s])
                continue;
            const double x = (plan->gu0 + i * plan->h - pu->cu_um) * ir;
            double val, dx, dy;
            sw_zernike_sum_grad(coef_um, count, x, y, &val, &dx, &dy);
            plan->scratch[s] = -val; /* OSA: a positive wavefront leads, the OPD is a delay */
        }
    }
    const size_t n = (size_t)W * plan->gh;
    for (size_t s = 0; s < n; s++)
        if (plan->need[s] && !isfinite(plan->scratch[s]))
            return sw_fail(ctx, SW_EINVAL,
                           "SH simulator: the Zernike sum is %g at pupil point (%g, %g) um "
                           "(radius %g um): not finite",
                           plan->scratch[s], plan->gu0 + (double)(s % (size_t)W) * plan->h,
                           plan->gv0 + (double)(s / (size_t)W) * plan->h, radius_um);
    commit_scratch(plan);
    return SW_OK;
}

sw_status sw_shsim_add_wavefront(sw_shsim *plan, const sw_wavefront *w, double scale)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_shsim_add_wavefront: plan is NULL");
    sw_context *ctx = plan->ctx;
    if (!w || !w->opd_um)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: the wavefront map is %s",
                       w ? "empty (no samples)" : "NULL");
    if (w->nu < 1 || w->nv < 1 || !(w->spacing_um > 0.0) || !isfinite(w->spacing_um) ||
        !isfinite(w->u0_um) || !isfinite(w->v0_um))
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: the wavefront map (%dx%d samples, spacing %g um, origin "
                       "%g, %g um) is not valid",
                       (int)w->nu, (int)w->nv, w->spacing_um, w->u0_um, w->v0_um);
    if (!isfinite(scale))
        return sw_fail(ctx, SW_EINVAL, "SH simulator: wavefront scale %g is not finite", scale);
    sw_status st = check_host_opd(plan, "sw_shsim_add_wavefront");
    if (st != SW_OK)
        return st;
    const int32_t W = plan->gw;
#pragma omp parallel for schedule(dynamic, 4) num_threads(plan->threads)
    for (int32_t k = 0; k < plan->gh; k++) {
        const double v = plan->gv0 + k * plan->h;
        for (int32_t i = 0; i < W; i++) {
            const size_t s = (size_t)k * W + i;
            if (plan->need[s])
                plan->scratch[s] = scale * sw_wavefront_sample(w, plan->gu0 + i * plan->h, v);
        }
    }
    /* Lit samples need a value; their neighbours (used for gradients) may be NaN. */
    const size_t n = (size_t)W * plan->gh;
    for (size_t s = 0; s < n; s++)
        if ((plan->need[s] == 2 && !isfinite(plan->scratch[s])) ||
            (plan->need[s] == 1 && isinf(plan->scratch[s])))
            return sw_fail(ctx, SW_EINVAL,
                           "SH simulator: the wavefront map gives %g at lit pupil point (%g, %g) "
                           "um: it must cover the illuminated pupil (map: %dx%d samples of %g um "
                           "from %g, %g um)",
                           plan->scratch[s], plan->gu0 + (double)(s % (size_t)W) * plan->h,
                           plan->gv0 + (double)(s / (size_t)W) * plan->h, (int)w->nu, (int)w->nv,
                           w->spacing_um, w->u0_um, w->v0_um);
    commit_scratch(plan);
    return SW_OK;
}

sw_status sw_shsim_set_opd_device(sw_shsim *plan, const float *opd, int32_t nu, int32_t nv,
                                  double spacing_um, double u0_um, double v0_um)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_shsim_set_opd_device: plan is NULL");
    sw_context *ctx = plan->ctx;
    if (!on_cuda(plan))
        return sw_fail(ctx, SW_EUNSUPPORTED,
                       "SH simulator: sw_shsim_set_opd_device needs a CUDA context (this plan "
                       "renders on the CPU: use sw_shsim_add_wavefront)");
    if (!opd)
        return sw_fail(ctx, SW_EINVAL, "SH simulator: the device OPD map is NULL");
    if (nu < 1 || nv < 1 || !(spacing_um > 0.0) || !isfinite(spacing_um) || !isfinite(u0_um) ||
        !isfinite(v0_um) || (int64_t)nu * nv > SHSIM_MAX_GRID * 16)
        return sw_fail(ctx, SW_EINVAL,
                       "SH simulator: the device OPD map (%dx%d samples, spacing %g um, origin "
                       "%g, %g um) is not valid",
                       (int)nu, (int)nv, spacing_um, u0_um, v0_um);
    /* every lit sample inside the map (sw_wavefront_sample's test, on the lit samples' bounding
     * box: the values themselves are not read here) */
    if (plan->lit_i1 >= 0) {
        const double a0 = (plan->gu0 + plan->lit_i0 * plan->h - u0_um) / spacing_um;
        const double a1 = (plan->gu0 + plan->lit_i1 * plan->h - u0_um) / spacing_um;
        const double b0 = (plan->gv0 + plan->lit_k0 * plan->h - v0_um) / spacing_um;
        const double b1 = (plan->gv0 + plan->lit_k1 * plan->h - v0_um) / spacing_um;
        if (!(a0 >= 0.0 && a1 <= (double)(nu - 1) && b0 >= 0.0 && b1 <= (double)(nv - 1)))
            return sw_fail(ctx, SW_EINVAL,
                           "SH simulator: the device OPD map (%dx%d samples of %g um from %g, %g "
                           "um) does not cover the lit pupil samples, u in [%g, %g], v in [%g, "
                           "%g] um",
                           (int)nu, (int)nv, spacing_um, u0_um, v0_um,
                           plan->gu0 + plan->lit_i0 * plan->h, plan->gu0 + plan->lit_i1 * plan->h,
                           plan->gv0 + plan->lit_k0 * plan->h, plan->gv0 + plan->lit_k1 * plan->h);
    }
#ifdef SW_HAVE_CUDA
    sw_status st = sw_shsim_gpu_set_opd(plan, opd, nu, nv, spacing_um, u0_um, v0_um);
    if (st != SW_OK) {
        plan->gpu_stale = 1; /* the device's copies may be half overwritten */
        return st;
    }
    /* the device now holds the OPD and the renderers' inputs; the host's are stale */
    plan->dev_opd = 1;
    plan->dirty = 0;
    plan->gpu_stale = 0;
    return SW_OK;
#else
    return sw_fail(ctx, SW_EINTERNAL, "SH simulator: CUDA context in a build without CUDA");
#endif
}

/* ------------------------------------------------------------------ truth */

/* The weighted gradient sums of lenslet l (lit index i) with the model's weights: sum w,
 * sum w dW/du, sum w dW/dv (sw_sh_lens_finish turns them into the spot). */
static void gradient_sums(const sw_shsim *plan, int32_t i, int32_t l, double *wsum, double *gx,
                          double *gy)
{
    const sw_sh_geometry *g = &plan->p.geom;
    const int32_t ix = l % g->nx, iy = l / g->nx, W = plan->gw;
    const double h = plan->h;
    double sw = 0.0, sx = 0.0, sy = 0.0;
    if (plan->p.model == SW_SH_GEOMETRIC) {
        const int32_t q = plan->p.samples;
        for (int32_t kv = 0; kv < q; kv++) {
            const size_t row = (size_t)(1 + iy * q + kv) * W + 1 + (size_t)ix * q;
            for (int32_t ku = 0; ku < q; ku++) {
                const double wt = plan->cover[row + ku];
                if (wt > 0.0) {
                    sw += wt;
                    sx += wt * sw_shm_grad1(plan->opd, row + ku, 1, h);
                    sy += wt * sw_shm_grad1(plan->opd, row + ku, (size_t)W, h);
                }
            }
        }
    } else {
        const int32_t T = plan->tile;
        const float *amp = plan->amp + (size_t)i * T * T;
        for (int32_t b = 0; b < T; b++) {
            const size_t row = (size_t)(plan->tile_g[2 * i + 1] + b) * W + plan->tile_g[2 * i];
            for (int32_t a = 0; a < T; a++) {
                const double A = amp[(size_t)b * T + a];
                if (A > 0.0) {
                    const double wt = A;
                    sw += wt;
                    sx += wt * sw_shm_grad1(plan->opd, row + a, 1, h);
                    sy += wt * sw_shm_grad1(plan->opd, row + a, (size_t)W, h);
                }
            }
        }
    }
    *wsum = sw;
    *gx = sx;
    *gy = sy;
}

/* Brings the truth and the renderers' inputs up to date with the OPD. */
static void prepare(sw_shsim *plan)
{
    if (!plan->dirty)
        return;
    const sw_sh_geometry *g = &plan->p.geom;
    const int geometric = plan->p.model == SW_SH_GEOMETRIC;
#pragma omp parallel for schedule(dynamic, 8) num_threads(plan->threads)
    for (int32_t i = 0; i < plan->nlit; i++) {
        const int32_t l = plan->lit[i];
        double sw, sx, sy, rx, ry, gx, gy, x, y;
        gradient_sums(plan, i, l, &sw, &sx, &sy);
        sw_sh_reference(g, l % g->nx, l / g->nx, &rx, &ry);
        const int32_t gx0 = geometric ? 0 : plan->tile_g[2 * i];
        const int32_t gy0 = geometric ? 0 : plan->tile_g[2 * i + 1];
        const double flux = geometric ? plan->p.flux_e * plan->illum[l] : plan->p.flux_e;
        sw_sh_lens_finish(&plan->kc, geometric, sw, sx, sy, rx, ry, gx0, gy0, flux, &gx, &gy, &x,
                          &y, geometric ? &plan->gspots[i] : NULL,
                          geometric ? NULL : &plan->dlens[i]);
        plan->slope_x[l] = gx;
        plan->slope_y[l] = gy;
        plan->truth_x[l] = x;
        plan->truth_y[l] = y;
    }
    if (plan->opd_f) {
        const size_t n = (size_t)plan->gw * plan->gh;
        for (size_t s = 0; s < n; s++)
            plan->opd_f[s] = (float)plan->opd[s];
    }
    plan->dirty = 0;
    plan->gpu_stale = 1;
}

/* ------------------------------------------------------------------ CPU renderers */

static void clear_rows(sw_image *out, int32_t y0, int32_t y1)
{
    for (int32_t y = y0; y < y1; y++)
        memset(sw_image_row(out, y), 0, (size_t)out->width * sizeof(float));
}

/* GEOMETRIC: threads own bands of rows and walk all spots in lenslet order (as starsim.c's
 * OpenMP renderer), each adding flux wx(k) wy(j) over the part of its ROI in the band. */
static void render_geometric(sw_shsim *plan, sw_image *out, int accumulate)
{
    const int roi = plan->p.roi_px, sinc2 = plan->p.spot == SW_SH_SPOT_SINC2, os = plan->os;
    const int32_t W = plan->p.width, H = plan->p.height;
    const double sigma = plan->p.sigma_px, z = plan->z_px;
#pragma omp parallel num_threads(plan->threads)
    {
        const int t = sw_omp_thread(), nt = sw_omp_threads();
        const int32_t r0 = (int32_t)((int64_t)H * t / nt),
                      r1 = (int32_t)((int64_t)H * (t + 1) / nt);
        double *fwx = plan->cpu_w + (size_t)t * 2u * (size_t)roi, *wy = fwx + roi;
        if (!accumulate)
            clear_rows(out, r0, r1);
        for (int32_t i = 0; i < plan->nlit && r0 < r1; i++) {
            const sw_sh_gspot s = plan->gspots[i];
            if (s.flux <= 0.0)
                continue;
            const int j0 = s.y0 < r0 ? r0 - s.y0 : 0;
            const int j1 = s.y0 + roi > r1 ? r1 - s.y0 : roi;
            const int k0 = s.x0 < 0 ? -s.x0 : 0;
            const int k1 = s.x0 + roi > W ? W - s.x0 : roi;
            if (j0 >= j1 || k0 >= k1)
                continue;
            for (int k = k0; k < k1; k++)
                fwx[k] = s.flux * sw_shm_axis_weight(sinc2, (double)k - s.dx, sigma, z, os);
            for (int j = j0; j < j1; j++)
                wy[j] = sw_shm_axis_weight(sinc2, (double)j - s.dy, sigma, z, os);
            for (int j = j0; j < j1; j++) {
                float *row = (float *)sw_image_row(out, s.y0 + j) + s.x0;
                const double wj = wy[j];
                for (int k = k0; k < k1; k++)
                    row[k] = (float)((double)row[k] + fwx[k] * wj);
            }
        }
    }
}

/* DIFFRACTION, one lenslet (lit index i): field, DFT, |E|^2 box-summed into patch (pw x pw
 * pixels from (px0, py0), unscaled), on thread t's buffers. */
static void diffraction_patch(const sw_shsim *plan, int32_t i, int t, double *patch)
{
    const int N = plan->N, T = plan->tile, os = plan->os, pw = plan->pw;
    const sw_sh_dlens d = plan->dlens[i];
    fftw_complex *buf = (fftw_complex *)plan->fft_buf + (size_t)t * N * N;
    int32_t *colpix = plan->fft_map + (size_t)t * 2u * (size_t)N, *rowpix = colpix + N;
    memset(patch, 0, (size_t)pw * pw * sizeof(double));
    if (d.px0 == SW_SH_OFF)
        return;
    memset(buf, 0, (size_t)N * N * sizeof(fftw_complex));
    const float *amp = plan->amp + (size_t)i * T * T;
    const double kw = 2.0 * SW_SHM_PI / plan->p.wavelength_um, c = 0.5 * (T - 1);
    for (int b = 0; b < T; b++) {
        const double *w = plan->opd + (size_t)(d.gy0 + b) * plan->gw + d.gx0;
        for (int a = 0; a < T; a++) {
            const double A = amp[(size_t)b * T + a];
            if (A > 0.0)
                sw_shm_field(A, w[a], kw, d.ax, d.ay, a - c, b - c, &buf[(size_t)b * N + a][0],
                             &buf[(size_t)b * N + a][1]);
        }
    }
    fftw_execute_dft((fftw_plan)plan->fft_rows, buf, buf);
    fftw_execute_dft((fftw_plan)plan->fft_cols, buf, buf);
    for (int a = 0; a < N; a++) {
        colpix[a] = (int32_t)(sw_shm_floor_div((int64_t)d.mx + sw_shm_fft_k(a, N), os) - d.px0);
        rowpix[a] = (int32_t)(sw_shm_floor_div((int64_t)d.my + sw_shm_fft_k(a, N), os) - d.py0);
    }
    for (int b = 0; b < N; b++) {
        double *prow = patch + (size_t)rowpix[b] * pw;
        const fftw_complex *f = buf + (size_t)b * N;
        for (int a = 0; a < N; a++)
            prow[colpix[a]] += f[a][0] * f[a][0] + f[a][1] * f[a][1];
    }
}

/* DIFFRACTION: chunks of lenslets; their patches are computed in parallel, then added in
 * lenslet order by threads that own bands of rows. */
static void render_diffraction(sw_shsim *plan, sw_image *out, int accumulate)
{
    const int32_t W = plan->p.width, H = plan->p.height, pw = plan->pw;
    if (!accumulate) {
#pragma omp parallel num_threads(plan->threads)
        {
            const int t = sw_omp_thread(), nt = sw_omp_threads();
            clear_rows(out, (int32_t)((int64_t)H * t / nt), (int32_t)((int64_t)H * (t + 1) / nt));
        }
    }
    for (int32_t c0 = 0; c0 < plan->nlit; c0 += plan->chunk) {
        const int32_t n = plan->nlit - c0 < plan->chunk ? plan->nlit - c0 : plan->chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(plan->threads)
        for (int32_t i = 0; i < n; i++)
            diffraction_patch(plan, c0 + i, sw_omp_thread(), plan->patches + (size_t)i * pw * pw);
#pragma omp parallel num_threads(plan->threads)
        {
            const int t = sw_omp_thread(), nt = sw_omp_threads();
            const int32_t r0 = (int32_t)((int64_t)H * t / nt),
                          r1 = (int32_t)((int64_t)H * (t + 1) / nt);
            for (int32_t i = 0; i < n && r0 < r1; i++) {
                const sw_sh_dlens d = plan->dlens[c0 + i];
                if (d.px0 == SW_SH_OFF)
                    continue;
                const int64_t y0 = d.py0 > r0 ? d.py0 : r0;
                const int64_t y1 = (int64_t)d.py0 + pw < r1 ? (int64_t)d.py0 + pw : r1;
                const int64_t x0 = d.px0 > 0 ? d.px0 : 0;
                const int64_t x1 = (int64_t)d.px0 + pw < W ? (int64_t)d.px0 + pw : W;
                const double *patch = plan->patches + (size_t)i * pw * pw;
                for (int64_t y = y0; y < y1; y++) {
                    float *row = sw_image_row(out, (int32_t)y);
                    const double *prow = patch + (size_t)(y - d.py0) * pw - d.px0;
                    for (int64_t x = x0; x < x1; x++)
                        row[x] = (float)((double)row[x] + d.scale * prow[x]);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ run */

static int on_cuda(const sw_shsim *plan)
{
    return plan->ctx && plan->ctx->backend == SW_BACKEND_CUDA;
}

static sw_status check_out(sw_context *ctx, const sw_shsim *plan, const sw_image *out)
{
    return sw_image_check_output(ctx, "SH simulator", out, SW_PIX_F32, plan->p.width,
                                 plan->p.height, on_cuda(plan));
}

sw_status sw_shsim_run(sw_shsim *plan, sw_image *out, int accumulate)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_shsim_run: plan is NULL");
    sw_context *ctx = plan->ctx;
    sw_status st = check_out(ctx, plan, out);
    if (st != SW_OK)
        return st;
    prepare(plan);
    if (!on_cuda(plan)) {
        if (plan->p.model == SW_SH_GEOMETRIC)
            render_geometric(plan, out, accumulate);
        else
            render_diffraction(plan, out, accumulate);
        plan->last_gpu = 0;
        return SW_OK;
    }
#ifdef SW_HAVE_CUDA
    if (out->memory == SW_MEM_DEVICE) {
        st = sw_shsim_gpu_run(plan, out, accumulate);
    } else {
        if (accumulate)
            st = sw_image_copy(ctx, out, &plan->gpu_image);
        if (st == SW_OK)
            st = sw_shsim_gpu_run(plan, &plan->gpu_image, accumulate);
        if (st == SW_OK)
            st = sw_image_copy(ctx, &plan->gpu_image, out);
    }
    plan->last_gpu = st == SW_OK;
    return st;
#else
    return sw_fail(ctx, SW_EINTERNAL, "SH simulator: CUDA context in a build without CUDA");
#endif
}

double sw_shsim_render_us(sw_shsim *plan)
{
#ifdef SW_HAVE_CUDA
    if (plan && plan->gpu && plan->last_gpu)
        return sw_shsim_gpu_render_us(plan);
#endif
    (void)plan;
    return -1.0;
}

/* ------------------------------------------------------------------ truth */

void sw_sh_truth_free(sw_sh_truth *t)
{
    if (!t)
        return;
    free(t->x_px);
    free(t->y_px);
    free(t->ref_x_px);
    free(t->ref_y_px);
    free(t->slope_x);
    free(t->slope_y);
    free(t->illum);
    memset(t, 0, sizeof *t);
}

sw_status sw_shsim_truth(sw_shsim *plan, sw_sh_truth *out)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "sw_shsim_truth: plan is NULL");
    if (!out)
        return sw_fail(plan->ctx, SW_EINVAL, "sw_shsim_truth: out is NULL");
    memset(out, 0, sizeof *out);
    if (plan->dev_opd)
        return sw_fail(plan->ctx, SW_EUNSUPPORTED,
                       "SH simulator: no truth for an OPD set on the device "
                       "(sw_shsim_set_opd_device); the truth needs an OPD set on the host");
    prepare(plan);
    const size_t n = (size_t)plan->nl, b = n * sizeof(double);
    sw_sh_truth t;
    t.nx = plan->p.geom.nx;
    t.ny = plan->p.geom.ny;
    t.x_px = malloc(b);
    t.y_px = malloc(b);
    t.ref_x_px = malloc(b);
    t.ref_y_px = malloc(b);
    t.slope_x = malloc(b);
    t.slope_y = malloc(b);
    t.illum = malloc(b);
    if (!t.x_px || !t.y_px || !t.ref_x_px || !t.ref_y_px || !t.slope_x || !t.slope_y || !t.illum) {
        sw_sh_truth_free(&t);
        return sw_fail(plan->ctx, SW_ENOMEM, "SH simulator: out of memory for the truth");
    }
    memcpy(t.x_px, plan->truth_x, b);
    memcpy(t.y_px, plan->truth_y, b);
    memcpy(t.slope_x, plan->slope_x, b);
    memcpy(t.slope_y, plan->slope_y, b);
    memcpy(t.illum, plan->illum, b);
    for (size_t l = 0; l < n; l++)
        sw_sh_reference(&plan->p.geom, (int32_t)(l % (size_t)t.nx), (int32_t)(l / (size_t)t.nx),
                        &t.ref_x_px[l], &t.ref_y_px[l]);
    *out = t;
    return SW_OK;
}

sw_status sw_sh_truth_write_csv(sw_context *ctx, const char *path, const sw_sh_truth *t)
{
    if (!path)
        return sw_fail(ctx, SW_EINVAL, "sw_sh_truth_write_csv: path is NULL");
    if (!t || t->nx < 1 || t->ny < 1 || !t->x_px || !t->y_px || !t->ref_x_px || !t->ref_y_px ||
        !t->illum)
        return sw_fail(ctx, SW_EINVAL, "%s: the SH truth is %s", path, t ? "incomplete" : "NULL");
    static const char *const names[] = {"ix",       "iy",       "x_px", "y_px",
                                        "ref_x_px", "ref_y_px", "illum"};
    sw_table tab;
    sw_status st = sw_table_create(ctx, 7, names, &tab);
    if (st != SW_OK)
        return st;
    const int64_t n = (int64_t)t->nx * t->ny;
    for (int64_t l = 0; l < n && st == SW_OK; l++) {
        const double row[7] = {(double)(l % t->nx), (double)(l / t->nx), t->x_px[l], t->y_px[l],
                               t->ref_x_px[l],      t->ref_y_px[l],      t->illum[l]};
        st = sw_table_append(ctx, &tab, row);
    }
    if (st == SW_OK)
        st = sw_csv_write(ctx, path, &tab);
    sw_table_free(&tab);
    return st;
}
