/*
 * Image quality from the wavefront (quality.h): the API, the checks, the pupil samples and the CPU
 * run with FFTW. The GPU twin is quality_cuda.cu (cuFFT), the plan's layout quality_internal.h.
 */
#include "core/core_internal.h"
#include "quality/quality_internal.h"
#include "spotwave/zernike.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PI_SW 3.14159265358979323846

void sw_psf_params_default(sw_psf_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->size = 256;
    p->pupil_samples = 128;
    p->pupil_mm = 5.0;
    p->wavelength_um = 0.555;
    p->first_j = 3;
    p->max_order = 10;
}

double sw_mtf_diffraction(double u)
{
    if (!(u >= 0.0))
        return u < 0.0 ? sw_mtf_diffraction(-u) : NAN;
    if (u >= 1.0)
        return 0.0;
    return 2.0 / PI_SW * (acos(u) - u * sqrt(1.0 - u * u));
}

double sw_csf_mannos_sakrison(double f_cpd)
{
    const double a = 0.114 * fabs(f_cpd);
    return 2.6 * (0.0192 + a) * exp(-pow(a, 1.1));
}

double sw_zernike_rms_order(const double *coef, int32_t count, int n)
{
    if (!coef || n < 0)
        return NAN;
    double s = 0.0;
    for (int m = -n; m <= n; m += 2) {
        const int j = sw_zernike_osa(n, m);
        if (j >= 0 && j < count)
            s += coef[j] * coef[j];
    }
    return sqrt(s);
}

double sw_psf_arcmin_per_px(const sw_psf_plan *plan)
{
    return plan ? plan->arcmin_px : NAN;
}

double sw_psf_cpd_per_px(const sw_psf_plan *plan)
{
    return plan ? plan->cpd_px : NAN;
}

double sw_psf_cutoff_cpd(const sw_psf_plan *plan)
{
    return plan ? plan->cpd_px * plan->p.pupil_samples : NAN;
}

/* Frequency index of FFT bin k of an N-point transform, -N/2 .. N/2 - 1. */
static int32_t freq_index(int32_t k, int32_t n)
{
    return k < n / 2 ? k : k - n;
}

/* ------------------------------------------------------------------ the CPU run */

/* coef: plan->terms doubles (zero where unused). Outputs host f32 N x N images or NULL. */
static void cpu_run(sw_psf_plan *plan, const double *coef, sw_image *psf, sw_image *mtf,
                    double *sums)
{
    const int32_t N = plan->p.size;
    const size_t NN = (size_t)N * (size_t)N;
    fftw_complex *F = (fftw_complex *)plan->field;
    memset(F, 0, NN * sizeof *F);
    int32_t used[SW_ZERNIKE_MAX_ORDER * (SW_ZERNIKE_MAX_ORDER + 3) / 2 + 1];
    int32_t nu = 0;
    for (int32_t j = 0; j < plan->terms; j++)
        if (coef[j] != 0.0)
            used[nu++] = j;
    const double k = 2.0 * PI_SW / plan->p.wavelength_um;
    const int32_t npix = plan->npix;
#if defined(SW_HAVE_OPENMP)
#pragma omp parallel for schedule(static) num_threads(sw_context_threads(plan->ctx))
#endif
    for (int32_t s = 0; s < npix; s++) {
        double w = 0.0;
        for (int32_t u = 0; u < nu; u++)
            w += coef[used[u]] * plan->basis[(size_t)used[u] * (size_t)npix + (size_t)s];
        F[plan->idx[s]][0] = cos(k * w);
        F[plan->idx[s]][1] = sin(k * w);
    }
    fftw_execute((fftw_plan)plan->fft_plan);
    const double norm = 1.0 / ((double)npix * (double)npix);
    double best = -1.0;
    size_t ibest = 0;
    for (size_t q = 0; q < NN; q++) {
        const double I = (F[q][0] * F[q][0] + F[q][1] * F[q][1]) * norm;
        F[q][0] = I;
        F[q][1] = 0.0;
        if (I > best) {
            best = I;
            ibest = q;
        }
    }
    if (psf)
        for (int32_t v = 0; v < N; v++) {
            float *row = (float *)sw_image_row(psf, (v + N / 2) % N);
            for (int32_t u = 0; u < N; u++)
                row[(u + N / 2) % N] = (float)F[(size_t)v * (size_t)N + (size_t)u][0];
        }
    fftw_execute((fftw_plan)plan->fft_plan);
    const double otf0 = F[0][0];
    double s_otf = 0.0, s_mtf = 0.0;
    for (size_t q = 0; q < NN; q++) {
        const double re = F[q][0] / otf0, im = F[q][1] / otf0;
        s_otf += plan->csf[q] * re;
        s_mtf += plan->csf[q] * sqrt(re * re + im * im);
    }
    if (mtf)
        for (int32_t v = 0; v < N; v++) {
            float *row = (float *)sw_image_row(mtf, (v + N / 2) % N);
            for (int32_t u = 0; u < N; u++) {
                const size_t q = (size_t)v * (size_t)N + (size_t)u;
                row[(u + N / 2) % N] = (float)(sqrt(F[q][0] * F[q][0] + F[q][1] * F[q][1]) / otf0);
            }
        }
    sums[0] = best;
    sums[1] = (double)ibest;
    sums[2] = s_otf;
    sums[3] = s_mtf;
}

/* ------------------------------------------------------------------ plans */

void sw_psf_destroy(sw_psf_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->cuda)
        sw_psf_cuda_free(plan);
#endif
    if (plan->fft_plan) {
        sw_fftw_planner_lock();
        fftw_destroy_plan((fftw_plan)plan->fft_plan);
        sw_fftw_planner_unlock();
    }
    fftw_free(plan->field);
    free(plan->idx);
    free(plan->basis);
    free(plan->csf);
    free(plan);
}

static sw_status check_params(sw_context *ctx, const sw_psf_params *p)
{
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "PSF plan: params is NULL");
    if (p->size < 16 || p->size > SW_PSF_MAX_SIZE)
        return sw_fail(ctx, SW_EINVAL, "PSF plan: size %d is outside 16..%d", (int)p->size,
                       SW_PSF_MAX_SIZE);
    if (p->pupil_samples < 4 || p->pupil_samples > p->size / 2)
        return sw_fail(ctx, SW_EINVAL,
                       "PSF plan: %d samples across the pupil: give 4 to size / 2 = %d (the OTF "
                       "spans twice the pupil and must fit the grid)",
                       (int)p->pupil_samples, (int)(p->size / 2));
    if (!isfinite(p->pupil_mm) || !(p->pupil_mm > 0.0))
        return sw_fail(ctx, SW_EINVAL, "PSF plan: pupil diameter %g mm must be positive",
                       p->pupil_mm);
    if (!isfinite(p->wavelength_um) || !(p->wavelength_um > 0.0))
        return sw_fail(ctx, SW_EINVAL, "PSF plan: wavelength %g um must be positive",
                       p->wavelength_um);
    if (p->first_j < 0 || p->first_j > 3)
        return sw_fail(ctx, SW_EINVAL, "PSF plan: first term j = %d is outside 0..3",
                       (int)p->first_j);
    if (p->max_order < 1 || p->max_order > SW_ZERNIKE_MAX_ORDER)
        return sw_fail(ctx, SW_EINVAL, "PSF plan: order %d is outside 1..%d", (int)p->max_order,
                       SW_ZERNIKE_MAX_ORDER);
    return SW_OK;
}

/* The pupil samples and their Zernike values; the frequency weights. */
static sw_status build_tables(sw_psf_plan *pl)
{
    const int32_t N = pl->p.size, Q = pl->p.pupil_samples;
    const double half = 0.5 * (double)Q;
    int32_t npix = 0;
    for (int pass = 0; pass < 2; pass++) {
        npix = 0;
        for (int32_t k = 0; k < N; k++) {
            const double Y = ((double)k + 0.5 - 0.5 * (double)N) / half;
            if (fabs(Y) > 1.0)
                continue;
            for (int32_t i = 0; i < N; i++) {
                const double X = ((double)i + 0.5 - 0.5 * (double)N) / half;
                if (X * X + Y * Y > 1.0)
                    continue;
                if (pass == 1)
                    pl->idx[npix] = k * N + i;
                npix++;
            }
        }
        if (pass == 0) {
            pl->npix = npix;
            pl->idx = malloc((size_t)npix * sizeof *pl->idx);
            pl->basis = malloc((size_t)npix * (size_t)pl->terms * sizeof *pl->basis);
            pl->csf = malloc((size_t)N * (size_t)N * sizeof *pl->csf);
            if (!pl->idx || !pl->basis || !pl->csf)
                return sw_fail(pl->ctx, SW_ENOMEM, "PSF plan: out of memory");
        }
    }
    for (int32_t j = 0; j < pl->terms; j++) {
        int n = 0, m = 0;
        (void)sw_zernike_osa_nm(j, &n, &m);
        double *b = pl->basis + (size_t)j * (size_t)npix;
        for (int32_t s = 0; s < npix; s++) {
            const int32_t i = pl->idx[s] % N, k = pl->idx[s] / N;
            const double X = ((double)i + 0.5 - 0.5 * (double)N) / half;
            const double Y = ((double)k + 0.5 - 0.5 * (double)N) / half;
            b[s] = sw_zernike_eval(n, m, X, Y);
        }
    }
    for (int32_t v = 0; v < N; v++)
        for (int32_t u = 0; u < N; u++) {
            const double fx = freq_index(u, N) * pl->cpd_px, fy = freq_index(v, N) * pl->cpd_px;
            pl->csf[(size_t)v * (size_t)N + (size_t)u] = sw_csf_mannos_sakrison(hypot(fx, fy));
        }
    return SW_OK;
}

static sw_status run_any(sw_psf_plan *plan, const double *coef, sw_image *psf, sw_image *mtf,
                         double *sums)
{
#ifdef SW_HAVE_CUDA
    if (plan->cuda)
        return sw_psf_cuda_run(plan, coef, psf, mtf, sums);
#endif
    cpu_run(plan, coef, psf, mtf, sums);
    return SW_OK;
}

sw_status sw_psf_create(sw_context *ctx, const sw_psf_params *p, sw_psf_plan **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "sw_psf_create: out is NULL");
    *out = NULL;
    if (!ctx)
        return sw_fail(ctx, SW_EINVAL, "sw_psf_create: ctx is NULL");
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    double *zero = NULL;
    double sums[SW_PSF_SUMS];
    sw_psf_plan *pl = calloc(1, sizeof *pl);
    if (!pl)
        return sw_fail(ctx, SW_ENOMEM, "PSF plan: out of memory");
    pl->ctx = ctx;
    pl->p = *p;
    pl->terms = sw_zernike_count(p->max_order);
    pl->cuda = sw_context_backend(ctx) == SW_BACKEND_CUDA;
    const double D_um = 1000.0 * p->pupil_mm;
    /* PSF pixel lambda Q / (N D) rad; MTF pixel D / (lambda Q) cycles per rad */
    pl->arcmin_px =
        p->wavelength_um * p->pupil_samples / ((double)p->size * D_um) * 180.0 / PI_SW * 60.0;
    pl->cpd_px = D_um / (p->wavelength_um * p->pupil_samples) * PI_SW / 180.0;
    if ((st = build_tables(pl)) != SW_OK)
        goto fail;
    if (!pl->cuda) {
        const size_t NN = (size_t)p->size * (size_t)p->size;
        pl->field = fftw_malloc(NN * sizeof(fftw_complex));
        if (!pl->field) {
            st = sw_fail(ctx, SW_ENOMEM, "PSF plan: out of memory");
            goto fail;
        }
        sw_fftw_planner_lock();
        pl->fft_plan = fftw_plan_dft_2d(p->size, p->size, (fftw_complex *)pl->field,
                                        (fftw_complex *)pl->field, FFTW_FORWARD, FFTW_ESTIMATE);
        sw_fftw_planner_unlock();
        if (!pl->fft_plan) {
            st = sw_fail(ctx, SW_EINTERNAL, "PSF plan: FFTW could not plan a %dx%d transform",
                         (int)p->size, (int)p->size);
            goto fail;
        }
    }
#ifdef SW_HAVE_CUDA
    else if ((st = sw_psf_cuda_alloc(pl)) != SW_OK) {
        goto fail;
    }
#endif
    /* The denominators of the visual Strehl ratios: this plan's own unaberrated pupil. */
    zero = calloc((size_t)pl->terms, sizeof *zero);
    if (!zero) {
        st = sw_fail(ctx, SW_ENOMEM, "PSF plan: out of memory");
        goto fail;
    }
    st = run_any(pl, zero, NULL, NULL, sums);
    free(zero);
    if (st != SW_OK)
        goto fail;
    pl->dl_otf = sums[2];
    pl->dl_mtf = sums[3];
    *out = pl;
    return SW_OK;
fail:
    sw_psf_destroy(pl);
    return st;
}

/* An output image: f32, N x N, host (or device on CUDA). */
static sw_status check_out(sw_psf_plan *plan, const sw_image *img, const char *what)
{
    if (!img)
        return SW_OK;
    sw_status st = sw_image_check(plan->ctx, img);
    if (st != SW_OK)
        return st;
    if (img->width != plan->p.size || img->height != plan->p.size || img->type != SW_PIX_F32)
        return sw_fail(plan->ctx, SW_EINVAL, "PSF run: the %s image must be f32 of %dx%d", what,
                       (int)plan->p.size, (int)plan->p.size);
    if (img->memory == SW_MEM_DEVICE && !plan->cuda)
        return sw_fail(plan->ctx, SW_EINVAL,
                       "PSF run: the %s image is in device memory on a CPU context", what);
    return SW_OK;
}

sw_status sw_psf_run(sw_psf_plan *plan, const double *coef, int32_t count, sw_image *psf,
                     sw_image *mtf, sw_psf_quality *quality)
{
    if (!plan)
        return SW_EINVAL;
    sw_context *ctx = plan->ctx;
    if (!coef || count < 1)
        return sw_fail(ctx, SW_EINVAL, "PSF run: no coefficients");
    for (int32_t j = 0; j < count; j++) {
        if (!isfinite(coef[j]))
            return sw_fail(ctx, SW_EINVAL, "PSF run: coefficient j = %d is %g", (int)j, coef[j]);
        if (j >= plan->terms && coef[j] != 0.0)
            return sw_fail(ctx, SW_EINVAL,
                           "PSF run: coefficient j = %d is beyond the plan's order %d", (int)j,
                           (int)plan->p.max_order);
    }
    sw_status st = check_out(plan, psf, "PSF");
    if (st == SW_OK)
        st = check_out(plan, mtf, "MTF");
    if (st != SW_OK)
        return st;
    double *c = calloc((size_t)plan->terms, sizeof *c);
    if (!c)
        return sw_fail(ctx, SW_ENOMEM, "PSF run: out of memory");
    for (int32_t j = plan->p.first_j; j < count && j < plan->terms; j++)
        c[j] = coef[j];
    double sums[SW_PSF_SUMS];
    st = run_any(plan, c, psf, mtf, sums);
    free(c);
    if (st != SW_OK)
        return st;
    if (quality) {
        const int32_t N = plan->p.size;
        const int64_t q = (int64_t)sums[1];
        quality->strehl = sums[0];
        quality->vsotf = sums[2] / plan->dl_otf;
        quality->vsmtf = sums[3] / plan->dl_mtf;
        quality->peak_x = (double)((q % N + N / 2) % N);
        quality->peak_y = (double)((q / N + N / 2) % N);
    }
    return SW_OK;
}

sw_status sw_psf_mtf_radial(const sw_psf_plan *plan, const sw_image *mtf, double *out, int32_t n)
{
    if (!plan || !mtf || !out || n < 1)
        return SW_EINVAL;
    const int32_t N = plan->p.size;
    if (mtf->width != N || mtf->height != N || mtf->type != SW_PIX_F32 ||
        mtf->memory == SW_MEM_DEVICE)
        return sw_fail(plan->ctx, SW_EINVAL, "radial MTF: give the plan's f32 %dx%d host image",
                       (int)N, (int)N);
    double *cnt = calloc((size_t)n, sizeof *cnt);
    if (!cnt)
        return sw_fail(plan->ctx, SW_ENOMEM, "radial MTF: out of memory");
    for (int32_t k = 0; k < n; k++)
        out[k] = 0.0;
    for (int32_t y = 0; y < N; y++) {
        const float *row = (const float *)sw_image_row(mtf, y);
        for (int32_t x = 0; x < N; x++) {
            const long r = lround(hypot((double)(x - N / 2), (double)(y - N / 2)));
            if (r < n) {
                out[r] += row[x];
                cnt[r] += 1.0;
            }
        }
    }
    for (int32_t k = 0; k < n; k++)
        out[k] = cnt[k] > 0 ? out[k] / cnt[k] : NAN;
    free(cnt);
    return SW_OK;
}
