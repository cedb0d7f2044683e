/*
 * Modal gain optimisation (loop.h, sw_modal_gains): Gendron E., Lena P. 1994, "Astronomical
 * adaptive optics. I. Modal control optimization", Astron. Astrophys. 291, 337-347. From a mode's
 * closed-loop telemetry the pseudo-open-loop PSD (the closed-loop PSD over the rejection
 * function's squared modulus; or, sw_modal_gains_pol, the PSD of pseudo-open-loop measurements,
 * the closed-loop ones plus the delayed commands' effect), its white-noise plateau, and the gain
 * that minimises the predicted residual variance. CPU only (FFTW): it runs between frames, not in
 * the real-time chain, which takes the gains it gives as PI's per-mode ki.
 */
#include "loop/loop_internal.h" /* core_internal.h: the FFTW planner lock */

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MG_PI 3.14159265358979323846

void sw_modal_gains_params_default(sw_modal_gains_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->delay_frames = 1;
    p->leak = 0.0;
    p->segment = 256;
    p->margin = 0.9;
    p->candidates = 400;
    p->noise_band = 0.75;
}

/* The rejection function E(e^{iw}) = (1 - a e^{-iw}) / (1 - a e^{-iw} + g e^{-iwd}): |E|^2 and
 * |1 - E|^2. */
static void rejection(double w, double a, double g, int32_t d, double *e2, double *n2)
{
    const double nr = 1.0 - a * cos(w), ni = a * sin(w);             /* 1 - a e^{-iw}           */
    const double dr = nr + g * cos(w * d), di = ni - g * sin(w * d); /* + g e^{-iwd}           */
    const double den = dr * dr + di * di;
    *e2 = (nr * nr + ni * ni) / den;
    /* 1 - E = g e^{-iwd} / (denominator) */
    *n2 = g * g / den;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y ? 1 : 0);
}

/* Both estimators: y closed-loop telemetry (pol 0: its PSD over |E_g0|^2 is the pseudo-open-loop
 * PSD) or pseudo-open-loop measurements (pol 1: their PSD is it). */
static sw_status modal_gains(sw_context *ctx, const sw_modal_gains_params *p, const float *y,
                             int64_t nframes, int32_t nmodes, const float *gains, float *out,
                             double *noise, double *predicted, int pol)
{
    if (!p || !y || !gains || !out)
        return sw_fail(ctx, SW_EINVAL, "modal gains: NULL %s",
                       !p ? "parameters" : (!y ? "telemetry" : (!gains ? "gains" : "output")));
    const int32_t L = p->segment, d = p->delay_frames;
    if (d < 1 || d > 1000)
        return sw_fail(ctx, SW_EINVAL, "modal gains: delay %d frames (1..1000)", (int)d);
    if (!(p->leak >= 0.0 && p->leak < 1.0))
        return sw_fail(ctx, SW_EINVAL, "modal gains: leak %g (0 <= leak < 1)", p->leak);
    if (L < 16 || L > 65536 || (L & (L - 1)) != 0)
        return sw_fail(ctx, SW_EINVAL, "modal gains: segment %d (a power of two, 16..65536)",
                       (int)L);
    if (nframes < L)
        return sw_fail(ctx, SW_EINVAL, "modal gains: %lld frames, fewer than a segment (%d)",
                       (long long)nframes, (int)L);
    if (nmodes < 1)
        return sw_fail(ctx, SW_EINVAL, "modal gains: %d modes (>= 1)", (int)nmodes);
    if (!(p->margin > 0.0 && p->margin < 1.0) || !(p->noise_band > 0.0 && p->noise_band < 1.0) ||
        p->candidates < 2 || p->candidates > 100000)
        return sw_fail(ctx, SW_EINVAL,
                       "modal gains: margin %g and noise band %g must be in (0, 1), candidates "
                       "%d in 2..100000",
                       p->margin, p->noise_band, (int)p->candidates);
    for (int32_t i = 0; i < nmodes; i++)
        if (!(isfinite(gains[i]) && gains[i] > 0.0f))
            return sw_fail(ctx, SW_EINVAL, "modal gains: the gain of mode %d is %g (> 0)", (int)i,
                           (double)gains[i]);
    for (int64_t k = 0; k < nframes * nmodes; k++)
        if (!isfinite(y[k]))
            return sw_fail(ctx, SW_EINVAL,
                           "modal gains: telemetry sample %lld (frame %lld, mode "
                           "%lld) is not finite",
                           (long long)k, (long long)(k / nmodes), (long long)(k % nmodes));

    const double a = 1.0 - p->leak, gmax = sw_controller_max_gain(d, p->leak) * p->margin;
    const int32_t nb = L / 2 + 1;                     /* one-sided bins 0 .. L/2 */
    const int64_t nseg = (nframes - L) / (L / 2) + 1; /* half-overlapped segments */
    double *seg = fftw_malloc((size_t)L * sizeof(double));
    fftw_complex *spec = fftw_malloc((size_t)nb * sizeof(fftw_complex));
    double *win = malloc((size_t)L * sizeof(double)), *psd = malloc((size_t)nb * sizeof(double));
    double *plateau = malloc((size_t)nb * sizeof(double));
    double *e0 = malloc((size_t)nb * sizeof(double));
    fftw_plan plan = NULL;
    sw_status st = SW_OK;
    if (!seg || !spec || !win || !psd || !plateau || !e0)
        st = sw_fail(ctx, SW_ENOMEM, "modal gains: out of memory");
    else {
        sw_fftw_planner_lock();
        plan = fftw_plan_dft_r2c_1d(L, seg, spec, FFTW_ESTIMATE);
        sw_fftw_planner_unlock();
        if (!plan)
            st = sw_fail(ctx, SW_EINTERNAL, "modal gains: FFTW plan of %d failed", (int)L);
    }
    double wsum2 = 0.0;
    for (int32_t t = 0; st == SW_OK && t < L; t++) {
        win[t] = 0.5 - 0.5 * cos(2.0 * MG_PI * t / L); /* Hann */
        wsum2 += win[t] * win[t];
    }

    for (int32_t i = 0; st == SW_OK && i < nmodes; i++) {
        /* Welch PSD of the mode, normalised so that sum_f wf psd_f / L is the variance (wf: 1 at
         * 0 and L/2, 2 between: the one-sided bins) */
        memset(psd, 0, (size_t)nb * sizeof(double));
        int nonzero = 0;
        for (int64_t sgi = 0; sgi < nseg; sgi++) {
            const int64_t k0 = sgi * (L / 2);
            double mean = 0.0;
            for (int32_t t = 0; t < L; t++)
                mean += y[(k0 + t) * nmodes + i];
            mean /= L;
            for (int32_t t = 0; t < L; t++) {
                const double v = y[(k0 + t) * nmodes + i];
                nonzero |= v != 0.0;
                seg[t] = (v - mean) * win[t];
            }
            fftw_execute(plan);
            for (int32_t f = 0; f < nb; f++)
                psd[f] += (spec[f][0] * spec[f][0] + spec[f][1] * spec[f][1]) / wsum2;
        }
        const double g0 = gains[i];
        if (!nonzero) {
            out[i] = (float)g0;
            if (noise)
                noise[i] = 0.0;
            if (predicted)
                predicted[i] = 0.0;
            continue;
        }
        /* pseudo-open loop: P_ol = P_y / |E_g0|^2 (or P_y of pseudo-open-loop measurements);
         * the plateau's median is the noise */
        int32_t np = 0;
        for (int32_t f = 1; f < nb; f++) {
            double n2;
            rejection(2.0 * MG_PI * f / L, a, g0, d, &e0[f], &n2);
            psd[f] = psd[f] / (double)nseg / (pol ? 1.0 : e0[f]);
            if ((double)f / (L / 2) > p->noise_band)
                plateau[np++] = psd[f];
        }
        qsort(plateau, (size_t)np, sizeof(double), cmp_double);
        const double pn =
            np > 0 ? (np % 2 ? plateau[np / 2] : 0.5 * (plateau[np / 2 - 1] + plateau[np / 2]))
                   : 0.0;
        /* sigma^2(g) over the candidates (bin 0 holds the removed mean: skipped) */
        double best = INFINITY, bestg = g0;
        for (int32_t c = 1; c <= p->candidates; c++) {
            const double g = gmax * c / p->candidates;
            double s2 = 0.0;
            for (int32_t f = 1; f < nb; f++) {
                double e2, n2;
                rejection(2.0 * MG_PI * f / L, a, g, d, &e2, &n2);
                const double wf = f == L / 2 ? 1.0 : 2.0;
                const double pphi = psd[f] > pn ? psd[f] - pn : 0.0;
                s2 += wf * (e2 * pphi + n2 * pn);
            }
            s2 /= L;
            if (s2 < best) {
                best = s2;
                bestg = g;
            }
        }
        out[i] = (float)bestg;
        if (noise)
            noise[i] = pn; /* white: the PSD level is the per-frame variance */
        if (predicted)
            predicted[i] = best;
    }
    if (plan) {
        sw_fftw_planner_lock();
        fftw_destroy_plan(plan);
        sw_fftw_planner_unlock();
    }
    fftw_free(seg);
    fftw_free(spec);
    free(win);
    free(psd);
    free(plateau);
    free(e0);
    return st;
}

sw_status sw_modal_gains(sw_context *ctx, const sw_modal_gains_params *p, const float *y,
                         int64_t nframes, int32_t nmodes, const float *gains, float *out,
                         double *noise, double *predicted)
{
    return modal_gains(ctx, p, y, nframes, nmodes, gains, out, noise, predicted, 0);
}

sw_status sw_modal_gains_pol(sw_context *ctx, const sw_modal_gains_params *p, const float *y_pol,
                             int64_t nframes, int32_t nmodes, const float *gains, float *out,
                             double *noise, double *predicted)
{
    return modal_gains(ctx, p, y_pol, nframes, nmodes, gains, out, noise, predicted, 1);
}
