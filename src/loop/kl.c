/*
 * Karhunen-Loeve modes of a deformable mirror (loop.h, sw_dm_kl_modes): the mirror's command
 * vectors whose shapes over the pupil are orthonormal and whose coefficients in von Karman
 * turbulence are uncorrelated, in order of decreasing variance. The double diagonalisation AO
 * simulators use for their "DM KL" bases (Gendron E. 1995, PhD thesis, Universite Paris 7):
 *   F: the influence functions sampled on the pupil, piston removed (npix x nact);
 *   G = F^T F = U S U^T, the geometric covariance, its modes with S above 1e-6 max S kept (the
 *     others, piston among them, do not shape the pupil);
 *   B0 = U S^(-1/2): command vectors of orthonormal shapes (B0^T G B0 = I);
 *   K = B0^T F^T C F B0, the turbulence covariance of their coefficients, C_pq = B(|r_p - r_q|)
 *     (sw_turbulence_covariance: the phase covariance of von Karman turbulence) = V L V^T;
 *   the modes B = B0 V, variances L, in order of decreasing L.
 * CPU only (LAPACKE, OpenBLAS): it runs when a loop is made. C is npix x npix: the pupil is
 * sampled at most 4096 points.
 */
#include "loop/loop_internal.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KL_MAX_PIX 4096 /* C is KL_MAX_PIX^2 doubles: 134 MB */
#define KL_KEEP    1e-6 /* geometric modes kept: S > KL_KEEP max S */

sw_status sw_dm_kl_modes(sw_context *ctx, const sw_dm_params *dm, const sw_lattice_grid *grid,
                         const uint8_t *pupil, double step_m, const sw_turbulence *t,
                         int32_t max_modes, float *modes, double *variance, int32_t *nmodes)
{
    if (!dm || !grid || !pupil || !t || !modes || !nmodes || max_modes < 1)
        return sw_fail(ctx, SW_EINVAL, "DM KL modes: NULL argument or max_modes %d < 1",
                       (int)max_modes);
    SW_TRY(sw_dm_check(ctx, dm));
    SW_TRY(sw_turbulence_check(ctx, t));
    if (!(step_m > 0.0 && isfinite(step_m)) || grid->width < 1 || grid->height < 1)
        return sw_fail(ctx, SW_EINVAL, "DM KL modes: sample step %g m on a %dx%d grid", step_m,
                       (int)grid->width, (int)grid->height);
    const int32_t nact = (dm->nx + 1) * (dm->ny + 1), w = grid->width;
    const int64_t ng = (int64_t)grid->width * grid->height;
    int64_t npix = 0;
    for (int64_t k = 0; k < ng; k++)
        npix += pupil[k] != 0;
    if (npix < 2 || npix > KL_MAX_PIX)
        return sw_fail(ctx, SW_EINVAL,
                       "DM KL modes: %lld pupil samples (2..%d: sample the pupil more coarsely)",
                       (long long)npix, KL_MAX_PIX);
    *nmodes = 0;

    sw_context *cpu = NULL;
    sw_dm_shaper *sh = NULL;
    double *F = malloc((size_t)npix * nact * sizeof(double)); /* npix x nact, column-major */
    float *cmd = calloc((size_t)nact, sizeof(float)), *surf = malloc((size_t)ng * sizeof(float));
    int32_t *pix = malloc((size_t)npix * sizeof(int32_t));
    double *G = malloc((size_t)nact * nact * sizeof(double)), *S = malloc(nact * sizeof(double));
    double *CF = NULL, *K = NULL, *L = NULL, *B0 = NULL, *tab = NULL;
    sw_status st = SW_OK;
    if (!F || !cmd || !surf || !pix || !G || !S) {
        st = sw_fail(ctx, SW_ENOMEM, "DM KL modes: out of memory");
        goto done;
    }
    for (int64_t k = 0, n = 0; k < ng; k++)
        if (pupil[k])
            pix[n++] = (int32_t)k;
    /* F: each actuator's shape on the pupil, its pupil mean removed */
    sw_context_params cp;
    sw_context_params_default(&cp);
    cp.backend = SW_BACKEND_CPU;
    cp.threads = sw_context_threads(ctx);
    if ((st = sw_context_create(&cp, &cpu)) != SW_OK ||
        (st = sw_dm_shaper_create(cpu, dm, grid, &sh)) != SW_OK) {
        st = sw_fail(ctx, st, "DM KL modes: %s", sw_context_error(cpu));
        goto done;
    }
    for (int32_t a = 0; a < nact; a++) {
        cmd[a] = 1.0f;
        if ((st = sw_dm_shaper_run(sh, cmd, SW_MEM_HOST, surf)) != SW_OK) {
            st = sw_fail(ctx, st, "DM KL modes: %s", sw_context_error(cpu));
            goto done;
        }
        cmd[a] = 0.0f;
        double *f = F + (size_t)a * npix, mean = 0.0;
        for (int64_t p = 0; p < npix; p++)
            mean += (f[p] = surf[pix[p]]);
        mean /= (double)npix;
        for (int64_t p = 0; p < npix; p++)
            f[p] -= mean;
    }
    /* G = F^T F = U S U^T (dsyev: ascending eigenvalues; U overwrites G, column-major) */
    cblas_dsyrk(CblasColMajor, CblasUpper, CblasTrans, nact, (int)npix, 1.0, F, (int)npix, 0.0, G,
                nact);
    if (LAPACKE_dsyev(LAPACK_COL_MAJOR, 'V', 'U', nact, G, nact, S) != 0) {
        st = sw_fail(ctx, SW_EINTERNAL, "DM KL modes: the geometric covariance's eigenvalues");
        goto done;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < nact; i++)
        m += S[i] > KL_KEEP * S[nact - 1];
    if (m < 1 || !(S[nact - 1] > 0.0)) {
        st = sw_fail(ctx, SW_EINVAL, "DM KL modes: the mirror does not shape the pupil");
        goto done;
    }
    /* B0 = U S^(-1/2) over the kept (the largest m) eigenvalues */
    B0 = malloc((size_t)nact * m * sizeof(double));
    CF = malloc((size_t)npix * m * sizeof(double));
    K = malloc((size_t)m * m * sizeof(double));
    L = malloc((size_t)m * sizeof(double));
    tab = malloc((size_t)grid->width * grid->height * sizeof(double));
    if (!B0 || !CF || !K || !L || !tab) {
        st = sw_fail(ctx, SW_ENOMEM, "DM KL modes: out of memory");
        goto done;
    }
    for (int32_t j = 0; j < m; j++) {
        const int32_t i = nact - m + j;
        const double s = 1.0 / sqrt(S[i]);
        for (int32_t a = 0; a < nact; a++)
            B0[(size_t)j * nact + a] = G[(size_t)i * nact + a] * s;
    }
    /* the orthonormal shapes F B0 (npix x m, into CF), then C (F B0), column by column, with C's
     * entries from a table of B over the grid's offsets */
    double *FB = malloc((size_t)npix * m * sizeof(double));
    if (!FB) {
        st = sw_fail(ctx, SW_ENOMEM, "DM KL modes: out of memory");
        goto done;
    }
    cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)npix, m, nact, 1.0, F, (int)npix,
                B0, nact, 0.0, FB, (int)npix);
    for (int32_t dy = 0; dy < grid->height; dy++)
        for (int32_t dx = 0; dx < w; dx++)
            tab[(size_t)dy * w + dx] = sw_turbulence_covariance(t, step_m * hypot(dx, dy));
    double *Cm = malloc((size_t)npix * npix * sizeof(double));
    if (!Cm) {
        free(FB);
        st = sw_fail(ctx, SW_ENOMEM, "DM KL modes: out of memory (%lld^2 covariances)",
                     (long long)npix);
        goto done;
    }
    for (int64_t q = 0; q < npix; q++)
        for (int64_t p = 0; p < npix; p++) {
            const int32_t dx = abs(pix[p] % w - pix[q] % w), dy = abs(pix[p] / w - pix[q] / w);
            Cm[(size_t)q * npix + p] = tab[(size_t)dy * w + dx];
        }
    cblas_dsymm(CblasColMajor, CblasLeft, CblasUpper, (int)npix, m, 1.0, Cm, (int)npix, FB,
                (int)npix, 0.0, CF, (int)npix);
    free(Cm);
    /* K = (F B0)^T C (F B0) = V L V^T */
    cblas_dgemm(CblasColMajor, CblasTrans, CblasNoTrans, m, m, (int)npix, 1.0, FB, (int)npix, CF,
                (int)npix, 0.0, K, m);
    free(FB);
    if (LAPACKE_dsyev(LAPACK_COL_MAJOR, 'V', 'U', m, K, m, L) != 0) {
        st = sw_fail(ctx, SW_EINTERNAL, "DM KL modes: the turbulence covariance's eigenvalues");
        goto done;
    }
    /* B = B0 V, in order of decreasing variance (dsyev gives increasing) */
    const int32_t n = m < max_modes ? m : max_modes;
    for (int32_t j = 0; j < n; j++) {
        const double *v = K + (size_t)(m - 1 - j) * m;
        for (int32_t a = 0; a < nact; a++) {
            double acc = 0.0;
            for (int32_t i = 0; i < m; i++)
                acc += B0[(size_t)i * nact + a] * v[i];
            modes[(size_t)j * nact + a] = (float)acc;
        }
        if (variance)
            variance[j] = L[m - 1 - j];
    }
    *nmodes = n;

done:
    sw_dm_shaper_destroy(sh);
    sw_context_destroy(cpu);
    free(F);
    free(cmd);
    free(surf);
    free(pix);
    free(G);
    free(S);
    free(CF);
    free(K);
    free(L);
    free(B0);
    free(tab);
    return st;
}
