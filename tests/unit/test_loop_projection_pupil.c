/*
 * The DM projections on a pupil (Brunner et al. 2018, J. Opt. Soc. Am. A 35(6), section 4.A):
 *   - the projector with actuators left out (sw_projector_solve_masked) is the least-squares fit
 *     of Eq. 13 / 15 by the actuators kept, checked against a direct solve of a small case;
 *   - D-SABRE with one projection matrix per partition (sw_sabre_set_projection_partitions) uses
 *     each partition's own matrix for the commands its core owns;
 *   - the distributed projection on the pupil (SW_RTC_PROJ_LOCAL_PUPIL, Fig. 14's "MV") is the
 *     shared window projection ("MM") inside the pupil, zero outside it, and leaves out the
 *     actuators the sensor does not see;
 *   - the global projection (SW_RTC_PROJ_GLOBAL) fits only the actuators the sensor sees, so the
 *     linearised closed loop of D-SABRE 8 x 8 on an annular 16 x 16 pupil has no mode of negative
 *     gain (it had one of -0.33 when the actuators inside the obscuration were fitted too, and
 *     the loop diverged: BENCHMARKS.md, Figs. 12-14).
 */
#include "testutil.h"

#include "loop/loop_internal.h"

#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static sw_context *ctx;

static int setup(void **state)
{
    (void)state;
    ctx = sw_test_cpu_context(1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sw_context_destroy(ctx);
    return 0;
}

/* ------------------------------------------------------------------ the masked projector */

/* Solves the n x n symmetric positive definite system A x = b in place (Cholesky, double);
 * b becomes x. */
static void spd_solve(double *A, double *b, int n)
{
    for (int j = 0; j < n; j++) {
        double d = A[j * n + j];
        for (int k = 0; k < j; k++)
            d -= A[j * n + k] * A[j * n + k];
        assert_true(d > 0.0);
        A[j * n + j] = sqrt(d);
        for (int i = j + 1; i < n; i++) {
            double s = A[i * n + j];
            for (int k = 0; k < j; k++)
                s -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = s / A[j * n + j];
        }
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < i; k++)
            b[i] -= A[i * n + k] * b[k];
        b[i] /= A[i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) {
        for (int k = i + 1; k < n; k++)
            b[i] -= A[k * n + i] * b[k];
        b[i] /= A[i * n + i];
    }
}

/* A 4 x 4 window, 3 of its 16 squares not fitted and 3 of its 16 actuators left out: u = P c is
 * the least-squares fit of the spline c at the fitting points by the kept actuators (normal
 * equations solved here from F and B built point by point with sw_dm_profile and sw_sabre_eval),
 * the left-out actuators' commands are 0, and the residual is orthogonal to every kept
 * influence function (no regularisation). */
static void test_masked_projector_is_least_squares(void **state)
{
    (void)state;
    const int32_t w = 4, na = w * w, q = 3;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.coupling = 0.35;
    sw_projector_params pp;
    sw_projector_params_window(&pp, &dm, w);
    pp.samples = q;
    pp.regularisation = 0.0;
    uint8_t smask[16], active[16];
    for (int i = 0; i < 16; i++) {
        smask[i] = !(i == 0 || i == 3 || i == 12); /* three corners of the window not fitted */
        active[i] = !(i == 0 || i == 7 || i == 13);
    }
    pp.square_mask = smask;
    const int64_t nv = sw_sabre_lattice_values(&pp.lattice);
    float *P = malloc((size_t)na * nv * sizeof *P);
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, active, 0, P), SW_OK);

    /* a random spline */
    double *c = malloc((size_t)nv * sizeof *c), *e = calloc((size_t)nv, sizeof *e);
    uint64_t s = 12345;
    for (int64_t v = 0; v < nv; v++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c[v] = (double)(s >> 11) / 9007199254740992.0 - 0.5;
    }
    double u[16];
    for (int a = 0; a < na; a++) {
        double acc = 0.0;
        for (int64_t v = 0; v < nv; v++)
            acc += (double)P[a * nv + v] * c[v];
        u[a] = acc;
    }

    /* F and B at the fitting points; N = F_A^T F_A, r = F_A^T B c over the kept actuators */
    int idx[16], nk = 0;
    for (int a = 0; a < na; a++)
        if (active[a])
            idx[nk++] = a;
    double N[16 * 16], r[16], g[16];
    memset(N, 0, sizeof N);
    memset(r, 0, sizeof r);
    memset(g, 0, sizeof g);
    int points = 0;
    for (int sj = 0; sj < w; sj++)
        for (int si = 0; si < w; si++) {
            if (!smask[sj * w + si])
                continue;
            for (int b = 0; b < q; b++)
                for (int a = 0; a < q; a++) {
                    const double x = si + (a + 0.5) / q, y = sj + (b + 0.5) / q;
                    const double bc = sw_sabre_eval(&pp.lattice, c, x, y);
                    double f[16], fu = 0.0;
                    for (int k = 0; k < nk; k++) {
                        const int ax = idx[k] % w, ay = idx[k] / w;
                        f[k] = sw_dm_profile(dm.influence, dm.coupling, x - (ax + 0.5)) *
                               sw_dm_profile(dm.influence, dm.coupling, y - (ay + 0.5));
                        fu += f[k] * u[idx[k]];
                    }
                    for (int k = 0; k < nk; k++) {
                        for (int l = 0; l < nk; l++)
                            N[k * nk + l] += f[k] * f[l];
                        r[k] += f[k] * bc;
                        g[k] += f[k] * (bc - fu); /* the residual's gradient */
                    }
                    points++;
                }
        }
    assert_int_equal(points, 13 * q * q);
    double rn = 0.0, gn = 0.0;
    for (int k = 0; k < nk; k++) {
        rn += r[k] * r[k];
        gn += g[k] * g[k];
    }
    if (!(sqrt(gn) <= 1e-4 * sqrt(rn)))
        fail_msg("F_A^T (B c - F u) = %.3g against F_A^T B c = %.3g", sqrt(gn), sqrt(rn));
    spd_solve(N, r, nk);
    double du = 0.0, un = 0.0;
    for (int k = 0; k < nk; k++) {
        du = fmax(du, fabs(r[k] - u[idx[k]]));
        un = fmax(un, fabs(r[k]));
    }
    if (!(du <= 1e-4 * un))
        fail_msg("P c differs from the direct least squares by %.3g (max %.3g)", du, un);
    assert_true(un > 0.1);
    for (int a = 0; a < na; a++)
        if (!active[a])
            assert_true(u[a] == 0.0);

    /* NULL mask: sw_projector_create's matrix, entry for entry */
    sw_projector_params p2 = pp;
    p2.regularisation = 1e-6;
    sw_projector *pr = NULL;
    assert_int_equal(sw_projector_create(ctx, &p2, &pr), SW_OK);
    assert_int_equal(sw_projector_solve_masked(ctx, &p2, NULL, 0, P), SW_OK);
    int32_t rows = 0, cols = 0;
    const float *Pr = sw_projector_matrix(pr, &rows, &cols);
    assert_int_equal(rows, na);
    assert_int_equal(cols, (int32_t)nv);
    assert_memory_equal(P, Pr, (size_t)na * nv * sizeof *P);
    sw_projector_destroy(pr);
    free(c);
    free(e);
    free(P);
}

/* Empty problems and bad input. */
static void test_masked_projector_bad_input(void **state)
{
    (void)state;
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    sw_projector_params pp;
    sw_projector_params_window(&pp, &dm, 3);
    const int64_t nv = sw_sabre_lattice_values(&pp.lattice);
    float *P = malloc((size_t)9 * nv * sizeof *P);
    uint8_t none[9], all[9];
    memset(none, 0, sizeof none);
    memset(all, 1, sizeof all);
    assert_int_equal(sw_projector_solve_masked(ctx, NULL, NULL, 0, P), SW_EINVAL);
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, NULL, 0, NULL), SW_EINVAL);
    /* no square fitted, or no actuator kept: refused, or P = 0 with empty_ok */
    pp.square_mask = none;
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, NULL, 0, P), SW_EINVAL);
    P[5] = 1.0f;
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, NULL, 1, P), SW_OK);
    for (int64_t i = 0; i < 9 * nv; i++)
        assert_true(P[i] == 0.0f);
    pp.square_mask = all;
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, none, 0, P), SW_EINVAL);
    P[7] = 1.0f;
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, none, 1, P), SW_OK);
    for (int64_t i = 0; i < 9 * nv; i++)
        assert_true(P[i] == 0.0f);
    /* the parameters are checked as sw_projector_create's */
    pp.coupling = 1.5;
    assert_int_equal(sw_projector_solve_masked(ctx, &pp, all, 1, P), SW_EINVAL);
    free(P);
}

/* ------------------------------------------------------------------ one matrix per partition */

static sw_sabre *plan_k(int32_t n, int32_t k, int eq17, const uint8_t *valid)
{
    sw_sabre_params sp;
    sw_sabre_params_default(&sp);
    sp.nx = sp.ny = n;
    sp.partitions = k;
    sp.extend_eq17 = eq17;
    sp.valid = valid;
    sw_sabre *plan = NULL;
    assert_int_equal(sw_sabre_create(ctx, &sp, &plan), SW_OK);
    return plan;
}

static void wavefront_slopes(int32_t n, float *s)
{
    for (int32_t iy = 0; iy < n; iy++)
        for (int32_t ix = 0; ix < n; ix++) {
            const double x = (ix - 0.5 * (n - 1)) / n, y = (iy - 0.5 * (n - 1)) / n;
            s[iy * n + ix] = (float)((6.0 * x - 2.0 * y + 2.0 * cos(2.0 * x + y)) / n + 0.01);
            s[n * n + iy * n + ix] = (float)((-2.0 * x + cos(2.0 * x + y)) / n);
        }
}

/* The window projector of a plan (w^2 x nl). */
static float *window_matrix(const sw_sabre_info *info, int32_t *rows, int32_t *cols)
{
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    sw_projector_params wp;
    sw_projector_params_window(&wp, &dm, info->window);
    sw_projector *pr = NULL;
    assert_int_equal(sw_projector_create(ctx, &wp, &pr), SW_OK);
    const float *P = sw_projector_matrix(pr, rows, cols);
    float *copy = malloc((size_t)*rows * *cols * sizeof *copy);
    memcpy(copy, P, (size_t)*rows * *cols * sizeof *copy);
    sw_projector_destroy(pr);
    return copy;
}

/* The same matrix for every partition gives the shared projection's commands (to the rounding of
 * sgemv against sgemm); partition i's matrix scaled by 1 + i / 8 scales exactly the commands of
 * the lenslet corners its core owns (the offset term K q1 scales with it). */
static void test_partition_matrices(void **state)
{
    (void)state;
    const int32_t n = 12, k = 4, nc = (n + 1) * (n + 1);
    sw_sabre *plan = plan_k(n, k, 1, NULL);
    sw_sabre_info info;
    sw_sabre_get_info(plan, &info);
    const int32_t G = k * k, w2 = info.window * info.window;
    int32_t rows = 0, cols = 0;
    float *P = window_matrix(&info, &rows, &cols);
    assert_int_equal(rows, w2);
    const size_t ne = (size_t)rows * cols;
    float *Ps = malloc(ne * G * sizeof *Ps);
    float slopes[2 * 144], shared[169], per[169];
    wavefront_slopes(n, slopes);

    assert_int_equal(sw_sabre_set_projection(plan, P, rows, cols), SW_OK);
    assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, NULL, shared), SW_OK);
    double smax = 0.0;
    for (int c = 0; c < nc; c++)
        smax = fmax(smax, fabs(shared[c]));
    assert_true(smax > 0.05);

    for (int32_t i = 0; i < G; i++)
        memcpy(Ps + (size_t)i * ne, P, ne * sizeof *P);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows, cols), SW_OK);
    assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, NULL, per), SW_OK);
    for (int c = 0; c < nc; c++)
        if (!(fabs(per[c] - shared[c]) <= 1e-5 * smax))
            fail_msg("corner %d: %.7g with G equal matrices, %.7g with the shared one", c, per[c],
                     shared[c]);

    for (int32_t i = 0; i < G; i++)
        for (size_t e = 0; e < ne; e++)
            Ps[(size_t)i * ne + e] = P[e] * (1.0f + (float)i / 8.0f);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows, cols), SW_OK);
    assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, NULL, per), SW_OK);
    for (int32_t cy = 0; cy <= n; cy++)
        for (int32_t cx = 0; cx <= n; cx++) {
            /* the owner of extended square (cx - 1 + offx, cy - 1 + offy) (sabre.h) */
            int32_t a = (cx - 1 + info.lattice.offx) / info.m,
                    b = (cy - 1 + info.lattice.offy) / info.m;
            a = a < k ? a : k - 1;
            b = b < k ? b : k - 1;
            const int c = cy * (n + 1) + cx;
            const double want = shared[c] * (1.0 + (b * k + a) / 8.0);
            if (!(fabs(per[c] - want) <= 2e-5 * smax))
                fail_msg("corner (%d, %d), partition %d: %.7g, expected %.7g", cx, cy, b * k + a,
                         per[c], want);
        }

    /* back to one shared matrix, then none: the spline at the corners again */
    assert_int_equal(sw_sabre_set_projection(plan, P, rows, cols), SW_OK);
    assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, NULL, per), SW_OK);
    assert_memory_equal(per, shared, sizeof shared);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, NULL, 0, 0, 0), SW_OK);
    sw_sabre *plain = plan_k(n, k, 1, NULL);
    float spline[169];
    assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, NULL, per), SW_OK);
    assert_int_equal(sw_sabre_run(plain, slopes, SW_MEM_HOST, NULL, spline), SW_OK);
    assert_memory_equal(per, spline, sizeof spline);
    sw_sabre_destroy(plain);
    sw_sabre_destroy(plan);
    free(Ps);
    free(P);
}

static void test_partition_matrices_bad_input(void **state)
{
    (void)state;
    const int32_t n = 8, k = 2;
    sw_sabre *plan = plan_k(n, k, 1, NULL);
    sw_sabre_info info;
    sw_sabre_get_info(plan, &info);
    const int32_t G = k * k;
    int32_t rows = 0, cols = 0;
    float *P = window_matrix(&info, &rows, &cols);
    const size_t ne = (size_t)rows * cols;
    float *Ps = malloc(ne * G * sizeof *Ps);
    for (int32_t i = 0; i < G; i++)
        memcpy(Ps + (size_t)i * ne, P, ne * sizeof *P);
    assert_int_equal(sw_sabre_set_projection_partitions(NULL, Ps, G, rows, cols), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G - 1, rows, cols), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G + 1, rows, cols), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, 1, rows, cols), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows - 1, cols), SW_EINVAL);
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows, cols + 1), SW_EINVAL);
    Ps[3 * ne + 5] = NAN;
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows, cols), SW_EINVAL);
    assert_non_null(strstr(sw_context_error(ctx), "partition 3"));
    Ps[3 * ne + 5] = INFINITY;
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows, cols), SW_EINVAL);
    Ps[3 * ne + 5] = 0.0f;
    assert_int_equal(sw_sabre_set_projection_partitions(plan, Ps, G, rows, cols), SW_OK);
    /* a plan without Eq. 17's extension has no actuator at every window's square centres */
    sw_sabre *plain = plan_k(n, k, 0, NULL);
    assert_int_equal(sw_sabre_set_projection_partitions(plain, Ps, G, rows, cols), SW_EINVAL);
    sw_sabre_destroy(plain);
    sw_sabre_destroy(plan);
    free(Ps);
    free(P);
}

/* ------------------------------------------------------------------ the annular pupil */

#define AN 16 /* lenslets per side */

/* The fig12 pupil: a circle of the array's diameter with 0.3 of it obscured; lenslets lit to 0.5
 * or more are valid; fitting squares (extended lattice, centred on lenslet corners) those whose
 * centre is inside the annulus. */
static double annulus_lit(int ix, int iy)
{
    const int S = 32;
    const double R = AN / 2.0, c = (AN - 1) / 2.0;
    int in = 0;
    for (int b = 0; b < S; b++)
        for (int a = 0; a < S; a++) {
            const double x = ix - 0.5 + (a + 0.5) / S - c, y = iy - 0.5 + (b + 0.5) / S - c;
            const double r = hypot(x, y);
            in += r <= R && r >= 0.3 * R;
        }
    return (double)in / (S * S);
}

static void annulus_masks(uint8_t *valid, const sw_sabre_lattice *lat, uint8_t *squares)
{
    for (int iy = 0; iy < AN; iy++)
        for (int ix = 0; ix < AN; ix++)
            valid[iy * AN + ix] = annulus_lit(ix, iy) >= 0.5;
    const double R = AN / 2.0, c = (AN - 1) / 2.0;
    for (int sj = 0; sj < lat->sy; sj++)
        for (int si = 0; si < lat->sx; si++) {
            const double r = hypot(si + 0.5 - lat->offx - c, sj + 0.5 - lat->offy - c);
            squares[sj * lat->sx + si] = r < R && r > 0.3 * R;
        }
}

static int corner_seen(const uint8_t *valid, int cx, int cy)
{
    for (int iy = cy - 1; iy <= cy; iy++)
        for (int ix = cx - 1; ix <= cx; ix++)
            if (ix >= 0 && iy >= 0 && ix < AN && iy < AN && valid[iy * AN + ix])
                return 1;
    return 0;
}

static void sabre_params_annulus(sw_sabre_params *sp, const uint8_t *valid, int32_t k)
{
    sw_sabre_params_default(sp);
    sp->nx = sp->ny = AN;
    sp->valid = valid;
    sp->partitions = k;
    sp->extend_eq17 = 1;
}

/* LOCAL_PUPIL with k x k partitions: k^2 stacked matrices; a window wholly inside the annulus
 * with every actuator seen has LOCAL's matrix; a window with no fitting square has 0; the rows of
 * actuators the sensor does not see (beyond the real array, or no valid lenslet around them) are
 * 0. Counts the windows of the first two kinds. */
static void check_local_pupil(int32_t k, int *inside, int *empty)
{
    uint8_t valid[AN * AN] = {0};
    sw_sabre_params sp;
    sabre_params_annulus(&sp, valid, k);
    sw_sabre *tmp = plan_k(AN, k, 1, NULL); /* the lattice does not depend on the mask */
    sw_sabre_info info;
    sw_sabre_get_info(tmp, &info);
    sw_sabre_destroy(tmp);
    const sw_sabre_lattice *lat = &info.lattice;
    uint8_t *squares = malloc((size_t)lat->sx * lat->sy);
    annulus_masks(valid, lat, squares);
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = dm.ny = AN;
    dm.coupling = 0.4;

    sw_rtc_params mm, mv;
    sw_rtc_params_default(&mm);
    sw_rtc_params_default(&mv);
    float *Pmm = NULL, *Pmv = NULL;
    assert_int_equal(sw_rtc_params_sabre(ctx, &sp, &dm, SW_RTC_PROJ_LOCAL, NULL, 1.0, &mm, &Pmm),
                     SW_OK);
    assert_int_equal(
        sw_rtc_params_sabre(ctx, &sp, &dm, SW_RTC_PROJ_LOCAL_PUPIL, squares, 1.0, &mv, &Pmv),
        SW_OK);
    const int32_t w = info.window, w2 = w * w, nl = info.local_values, S = lat->sx;
    assert_int_equal(mv.projection, SW_RTC_PROJ_LOCAL_PUPIL);
    assert_int_equal(mv.projection_rows, k * k * w2);
    assert_int_equal(mv.projection_cols, nl);
    assert_int_equal(mm.projection_rows, w2);
    *inside = *empty = 0;
    for (int32_t b = 0; b < k; b++)
        for (int32_t a = 0; a < k; a++) {
            /* the window's first square (sabre.h): clamp(a m - OL, 0, S - w) */
            int32_t x0 = a * info.m - sp.overlap, y0 = b * info.m - sp.overlap;
            x0 = x0 < 0 ? 0 : (x0 > S - w ? S - w : x0);
            y0 = y0 < 0 ? 0 : (y0 > S - w ? S - w : y0);
            const float *Pi = Pmv + ((size_t)b * k + a) * w2 * nl;
            int all_in = 1, any_in = 0;
            for (int32_t j = 0; j < w; j++)
                for (int32_t i = 0; i < w; i++) {
                    const int cx = x0 + i + 1 - lat->offx, cy = y0 + j + 1 - lat->offy;
                    const int seen =
                        cx >= 0 && cy >= 0 && cx <= AN && cy <= AN && corner_seen(valid, cx, cy);
                    const int fit = squares[(y0 + j) * S + x0 + i];
                    all_in &= seen && fit;
                    any_in |= fit;
                    if (!seen)
                        for (int32_t v = 0; v < nl; v++)
                            assert_true(Pi[(size_t)(j * w + i) * nl + v] == 0.0f);
                }
            if (all_in) {
                ++*inside;
                for (size_t e = 0; e < (size_t)w2 * nl; e++)
                    if (!(fabsf(Pi[e] - Pmm[e]) <= 1e-5f))
                        fail_msg("k %d, partition (%d, %d) inside the pupil: entry %zu %.7g, MM "
                                 "%.7g",
                                 k, a, b, e, Pi[e], Pmm[e]);
            }
            if (!any_in) {
                ++*empty;
                for (size_t e = 0; e < (size_t)w2 * nl; e++)
                    assert_true(Pi[e] == 0.0f);
            }
        }
    free(Pmm);
    free(Pmv);

    /* LOCAL_PUPIL needs Eq. 17's lattice */
    float *bad = (float *)squares;
    sp.extend_eq17 = 0;
    assert_int_equal(
        sw_rtc_params_sabre(ctx, &sp, &dm, SW_RTC_PROJ_LOCAL_PUPIL, squares, 1.0, &mv, &bad),
        SW_EINVAL);
    assert_null(bad);
    free(squares);
}

static void test_local_pupil_matrices(void **state)
{
    (void)state;
    int inside = 0, empty = 0;
    check_local_pupil(4, &inside, &empty); /* m = 5, w = 7: no window wholly inside */
    check_local_pupil(8, &inside, &empty); /* m = 3, w = 5: both kinds */
    if (inside < 1 || empty < 1)
        fail_msg("k = 8: %d windows inside the annulus, %d without a fitting square", inside,
                 empty);
}

/* ------------------------------------------------------------------ the closed loop, linearised */

/* Mean of the 1-D influence profile f(t - a) over t in [t0, t1]. */
static double profile_mean(double coupling, double a, double t0, double t1)
{
    const int Q = 48;
    double s = 0.0;
    for (int i = 0; i < Q; i++)
        s += sw_dm_profile(SW_DM_GAUSSIAN, coupling, t0 + (i + 0.5) * (t1 - t0) / Q - a);
    return s / Q;
}

/*
 * The loop's command -> command map M = (I - Z Z^T) R for a mirror poke: the exact mean slopes of
 * each poke over the valid lenslets (a geometric sensor), D-SABRE, the projection and the
 * piston / waffle filter, as sw_loop's chain runs them. An integrator u += g M (-u) + ... is
 * stable only if every eigenvalue of M has a real part >= 0 (and below 2 / g); a negative one is
 * a mode the loop pushes the wrong way.
 */
static double min_loop_eigenvalue(sw_rtc_projection proj, int32_t k)
{
    const int32_t na = (AN + 1) * (AN + 1);
    const double coupling = 0.4;
    uint8_t valid[AN * AN] = {0};
    sw_sabre_params sp;
    sabre_params_annulus(&sp, valid, k);
    sp.valid = NULL;
    sw_sabre *tmp = plan_k(AN, k, 1, NULL);
    sw_sabre_info info;
    sw_sabre_get_info(tmp, &info);
    sw_sabre_destroy(tmp);
    uint8_t *squares = malloc((size_t)info.lattice.sx * info.lattice.sy);
    annulus_masks(valid, &info.lattice, squares);
    sp.valid = valid;
    if (proj == SW_RTC_PROJ_GLOBAL)
        sp.triangle_weight = 1.0; /* as sw_loop's global projection */
    sw_dm_params dm;
    sw_dm_params_default(&dm);
    dm.nx = dm.ny = AN;
    dm.coupling = coupling;
    sw_rtc_params rp;
    sw_rtc_params_default(&rp);
    float *P = NULL;
    assert_int_equal(sw_rtc_params_sabre(ctx, &sp, &dm, proj, squares, 1.0, &rp, &P), SW_OK);
    sw_sabre *plan = NULL;
    assert_int_equal(sw_sabre_create(ctx, &sp, &plan), SW_OK);
    if (proj == SW_RTC_PROJ_LOCAL_PUPIL)
        assert_int_equal(sw_sabre_set_projection_partitions(
                             plan, P, k * k, info.window * info.window, rp.projection_cols),
                         SW_OK);
    else if (proj == SW_RTC_PROJ_LOCAL)
        assert_int_equal(sw_sabre_set_projection(plan, P, rp.projection_rows, rp.projection_cols),
                         SW_OK);
    float z[2 * (AN + 1) * (AN + 1)];
    int32_t nz = 0;
    assert_int_equal(sw_unseen_modes(AN, AN, valid, SW_UNSEEN_PISTON | SW_UNSEEN_WAFFLE, z, &nz),
                     SW_OK);
    const int64_t nv = sw_sabre_lattice_values(&info.lattice);
    float *slopes = calloc((size_t)2 * AN * AN, sizeof *slopes);
    float *vals = malloc((size_t)nv * sizeof *vals), *u = malloc((size_t)na * sizeof *u);
    double *M = malloc((size_t)na * na * sizeof *M);
    for (int32_t a = 0; a < na; a++) {
        const double ax = a % (AN + 1) - 0.5, ay = a / (AN + 1) - 0.5;
        for (int iy = 0; iy < AN; iy++)
            for (int ix = 0; ix < AN; ix++) {
                const double x0 = ix - 0.5, x1 = ix + 0.5, y0 = iy - 0.5, y1 = iy + 0.5;
                slopes[iy * AN + ix] = (float)((sw_dm_profile(SW_DM_GAUSSIAN, coupling, x1 - ax) -
                                                sw_dm_profile(SW_DM_GAUSSIAN, coupling, x0 - ax)) *
                                               profile_mean(coupling, ay, y0, y1));
                slopes[AN * AN + iy * AN + ix] =
                    (float)((sw_dm_profile(SW_DM_GAUSSIAN, coupling, y1 - ay) -
                             sw_dm_profile(SW_DM_GAUSSIAN, coupling, y0 - ay)) *
                            profile_mean(coupling, ax, x0, x1));
            }
        if (proj == SW_RTC_PROJ_GLOBAL) {
            assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, vals, NULL), SW_OK);
            for (int32_t r = 0; r < na; r++) {
                double acc = 0.0;
                for (int64_t v = 0; v < nv; v++)
                    acc += (double)P[(size_t)r * nv + v] * vals[v];
                u[r] = (float)acc;
            }
        } else {
            assert_int_equal(sw_sabre_run(plan, slopes, SW_MEM_HOST, NULL, u), SW_OK);
        }
        double zt[2];
        float uf[(AN + 1) * (AN + 1)];
        sw_loop_filter(z, na, nz, u, zt, uf);
        for (int32_t r = 0; r < na; r++)
            M[(size_t)a * na + r] = uf[r]; /* column a, column-major */
    }
    double *wr = malloc((size_t)na * sizeof *wr), *wi = malloc((size_t)na * sizeof *wi);
    assert_int_equal(
        LAPACKE_dgeev(LAPACK_COL_MAJOR, 'N', 'N', na, M, na, wr, wi, NULL, na, NULL, na), 0);
    double lo = INFINITY;
    for (int32_t i = 0; i < na; i++)
        lo = fmin(lo, wr[i]);
    free(wr);
    free(wi);
    free(M);
    free(u);
    free(vals);
    free(slopes);
    free(P);
    free(squares);
    sw_sabre_destroy(plan);
    return lo;
}

/* D-SABRE 8 x 8 on the annulus: no mode of negative gain with the global projection (the
 * actuators the sensor does not see left out) nor with either distributed one. */
static void test_annulus_loop_gains(void **state)
{
    (void)state;
    const sw_rtc_projection projs[3] = {SW_RTC_PROJ_GLOBAL, SW_RTC_PROJ_LOCAL,
                                        SW_RTC_PROJ_LOCAL_PUPIL};
    const char *names[3] = {"global", "local", "local (pupil)"};
    for (int i = 0; i < 3; i++) {
        const double lo = min_loop_eigenvalue(projs[i], 8);
        if (!(lo > -0.02))
            fail_msg("%s projection: the linearised loop has an eigenvalue %.4f", names[i], lo);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masked_projector_is_least_squares),
        cmocka_unit_test(test_masked_projector_bad_input),
        cmocka_unit_test(test_partition_matrices),
        cmocka_unit_test(test_partition_matrices_bad_input),
        cmocka_unit_test(test_local_pupil_matrices),
        cmocka_unit_test(test_annulus_loop_gains),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
