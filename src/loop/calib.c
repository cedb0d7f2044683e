/*
 * Calibration of the classic matrix-vector reconstructor (loop.h): the interaction matrix by
 * push-pull through the caller's measurement, and the control matrix as its truncated
 * pseudo-inverse (LAPACKE_dgesdd in double). The control matrix maps slopes to r, the commands
 * whose mirror shape best matches the wavefront that produced them (loop.h's sign convention):
 * with slopes s = D u, C s = V_k V_k^T u, the part of u in the kept modes.
 */
#include "loop/loop_internal.h"

#include <cblas.h>
#include <lapacke.h>
#undef I /* <complex.h>'s, through lapacke.h; nothing here is complex */
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest matrix (entries) the calibration accepts: LAPACK's 32-bit indices. */
#define SW_CALIB_MAX_ENTRIES 2147483647LL

sw_status sw_interaction_matrix(sw_context *ctx, int32_t nact, int32_t nslopes, double amp,
                                sw_measure_fn measure, void *user, float *im)
{
    if (!measure || !im)
        return sw_fail(ctx, SW_EINVAL, "interaction matrix: NULL %s",
                       !measure ? "measurement" : "output");
    if (nact < 1 || nslopes < 1 || (int64_t)nact * nslopes > SW_CALIB_MAX_ENTRIES)
        return sw_fail(ctx, SW_EINVAL,
                       "interaction matrix: %d actuators x %d slopes (>= 1 each, at most 2^31 - 1 "
                       "entries)",
                       (int)nact, (int)nslopes);
    if (!(isfinite(amp) && amp > 0.0))
        return sw_fail(ctx, SW_EINVAL, "interaction matrix: amplitude %g is not finite and > 0",
                       amp);
    float *u = (float *)calloc((size_t)nact, sizeof(float));
    float *sp = (float *)malloc((size_t)nslopes * sizeof(float));
    float *sm = (float *)malloc((size_t)nslopes * sizeof(float));
    if (!u || !sp || !sm) {
        free(u);
        free(sp);
        free(sm);
        return sw_fail(ctx, SW_ENOMEM, "interaction matrix: out of memory");
    }
    sw_status st = SW_OK;
    for (int32_t a = 0; a < nact && st == SW_OK; a++) {
        /* push (+amp e_a) and pull (-amp e_a), the other commands 0 */
        u[a] = (float)amp;
        st = measure(user, u, sp);
        if (st == SW_OK) {
            u[a] = (float)-amp;
            st = measure(user, u, sm);
        }
        u[a] = 0.0f;
        if (st != SW_OK)
            break;
        /* column a = (s+ - s-) / (2 amp) (the amplitude as applied, in float) */
        const double two_amp = 2.0 * (double)(float)amp;
        float *col = im + (int64_t)a * nslopes;
        for (int32_t k = 0; k < nslopes; k++)
            col[k] = (float)(((double)sp[k] - (double)sm[k]) / two_amp);
    }
    free(u);
    free(sp);
    free(sm);
    return st;
}

sw_status sw_control_matrix(sw_context *ctx, const float *im, int32_t nslopes, int32_t nact,
                            double max_condition, int32_t max_modes, float *cm,
                            sw_cm_result *result)
{
    if (!im || !cm)
        return sw_fail(ctx, SW_EINVAL, "control matrix: NULL %s",
                       !im ? "interaction matrix" : "output");
    if (nact < 1 || nslopes < 1 || (int64_t)nact * nslopes > SW_CALIB_MAX_ENTRIES)
        return sw_fail(ctx, SW_EINVAL,
                       "control matrix: %d slopes x %d actuators (>= 1 each, at most 2^31 - 1 "
                       "entries)",
                       (int)nslopes, (int)nact);
    if (!(max_condition == 0.0 || (isfinite(max_condition) && max_condition >= 1.0)))
        return sw_fail(ctx, SW_EINVAL, "control matrix: max_condition %g (>= 1, or 0 for no limit)",
                       max_condition);
    if (max_modes < 0)
        return sw_fail(ctx, SW_EINVAL, "control matrix: max_modes %d (>= 0, 0: no limit)",
                       (int)max_modes);
    const int64_t m = nslopes, n = nact, total = m * n;
    const int64_t kk = m < n ? m : n;
    for (int64_t e = 0; e < total; e++)
        if (!isfinite(im[e]))
            return sw_fail(ctx, SW_EINVAL,
                           "control matrix: entry (slope %lld, actuator %lld) of the interaction "
                           "matrix is not finite",
                           (long long)(e % m), (long long)(e / m));

    double *A = (double *)malloc((size_t)total * sizeof(double));
    double *S = (double *)malloc((size_t)kk * sizeof(double));
    double *U = (double *)malloc((size_t)(m * kk) * sizeof(double));
    double *VT = (double *)malloc((size_t)(kk * n) * sizeof(double));
    double *C = (double *)malloc((size_t)total * sizeof(double));
    if (!A || !S || !U || !VT || !C) {
        free(A);
        free(S);
        free(U);
        free(VT);
        free(C);
        return sw_fail(ctx, SW_ENOMEM, "control matrix: out of memory (%d x %d)", (int)nslopes,
                       (int)nact);
    }
    for (int64_t e = 0; e < total; e++)
        A[e] = (double)im[e];
    /* D = U S V^T (thin: U m x kk, V^T kk x n) */
    lapack_int info = LAPACKE_dgesdd(LAPACK_COL_MAJOR, 'S', (lapack_int)m, (lapack_int)n, A,
                                     (lapack_int)m, S, U, (lapack_int)m, VT, (lapack_int)kk);
    free(A);
    if (info != 0) {
        free(S);
        free(U);
        free(VT);
        free(C);
        return sw_fail(ctx, SW_EINTERNAL, "control matrix: LAPACKE_dgesdd failed (%d)", (int)info);
    }

    /* kept modes: sigma_i > 0, sigma_i >= sigma_0 / max_condition, at most max_modes */
    int64_t kept = 0;
    while (kept < kk && S[kept] > 0.0 &&
           (max_condition == 0.0 || S[kept] >= S[0] / max_condition) &&
           (max_modes == 0 || kept < max_modes))
        kept++;

    /* C = V S^+ U^T over the kept modes: with U's kept columns scaled by 1 / sigma_i, C^T (m x n
     * column-major, which is cm's row-major nact x nslopes) = U_k S_k^-1 V_k^T */
    if (kept > 0) {
        for (int64_t i = 0; i < kept; i++)
            for (int64_t k = 0; k < m; k++)
                U[i * m + k] /= S[i];
        cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)kept, 1.0, U,
                    (int)m, VT, (int)kk, 0.0, C, (int)m);
        for (int64_t e = 0; e < total; e++)
            cm[e] = (float)C[e];
    } else {
        memset(cm, 0, (size_t)total * sizeof(float));
    }

    if (result) {
        result->kept = (int32_t)kept;
        if (result->singular)
            memcpy(result->singular, S, (size_t)kk * sizeof(double));
        if (result->modes) /* V(:, 1:kept), nact x kept column-major */
            for (int64_t i = 0; i < kept; i++)
                for (int64_t a = 0; a < n; a++)
                    result->modes[i * n + a] = (float)VT[a * kk + i];
    }
    free(S);
    free(U);
    free(VT);
    free(C);
    return SW_OK;
}
