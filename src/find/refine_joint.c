/*
 * The joint fit of a blend's children (refine.h, "Blends"), on the CPU for both backends: the
 * k children of one blend as one model over the union of their stamps,
 *     m(x, y) = B + sum_c F_c P(x - x_c, y - y_c; s),
 * P the profile of the one-star fit (GAUSS: erf differences; MOFFAT: 3 x 3 Gauss-Legendre, beta
 * fixed), a position and a flux per child, one width s and one constant B for them all. The
 * likelihood, the weights, the merit and the Levenberg-Marquardt rules are the one-star fit's
 * (refine_model.h: sw_rm_pixel_merit, sw_rm_lm_next), written here for 3 k + 2 parameters.
 *
 * Why a joint fit and not each child with its siblings' models subtracted: for stars 3-4 sigma
 * apart the positions of the two are strongly correlated, so fitting one with the other held
 * fixed converges slowly (a Gauss-Seidel sweep on a nearly singular system) and its variance,
 * from a one-star Fisher matrix, leaves that correlation out; the joint fit converges as the
 * one-star fit does and its inverse Fisher matrix gives each child's marginal variance.
 */
#include "find/refine_internal.h"
#include "find/refine_model.h"

#include <stdlib.h>
#include <string.h>

#define JMAX (3 * SW_REFINE_MAX_CHILDREN + 2) /* parameters at most */

/* Parameters: child c at 3 c (x), 3 c + 1 (y), 3 c + 2 (flux); then the width at W(k) and the
 * constant at B(k). */
#define W(k) (3 * (k))
#define B(k) (3 * (k) + 1)

/* The union box of the children's stamps (clipped to the frame); 0 when empty. */
int sw_refine_joint_box(const sw_rm_frame *f, const sw_refine_seed *seeds, const int64_t *idx,
                        int32_t k, int32_t *x0, int32_t *x1, int32_t *y0, int32_t *y1)
{
    *x0 = *y0 = INT32_MAX;
    *x1 = *y1 = INT32_MIN;
    for (int32_t c = 0; c < k; ++c) {
        sw_rm_stamp st;
        const sw_refine_seed *s = &seeds[idx[c]];
        sw_rm_stamp_make(f, s->x, s->y, s->radius, &st);
        *x0 = st.x0 < *x0 ? st.x0 : *x0;
        *y0 = st.y0 < *y0 ? st.y0 : *y0;
        *x1 = st.x1 > *x1 ? st.x1 : *x1;
        *y1 = st.y1 > *y1 ? st.y1 : *y1;
    }
    return *x1 > *x0 && *y1 > *y0;
}

/* The sums of one pass: J^T W J (full, n x n), J^T W r, chi^2, the merit, the pixels used. */
typedef struct joint_acc {
    double a[JMAX * JMAX], g[JMAX];
    double chi2, merit;
    int32_t n, masked;
} joint_acc;

/* L y = rhs, L^T x = y with the Cholesky factor L (n x n, lower). */
static void joint_back(int n, const double *L, const double *rhs, double *x)
{
    double y[JMAX];
    for (int i = 0; i < n; ++i) {
        double s = rhs[i];
        for (int q = 0; q < i; ++q)
            s -= L[i * n + q] * y[q];
        y[i] = s / L[i * n + i];
    }
    for (int i = n - 1; i >= 0; --i) {
        double s = y[i];
        for (int q = i + 1; q < n; ++q)
            s -= L[q * n + i] * x[q];
        x[i] = s / L[i * n + i];
    }
}

/* Cholesky solve of (A + lambda diag A) x = g, n x n; inv (n x n) when not NULL receives the
 * inverse. 0 when not positive definite. L: n x n scratch. */
static int joint_solve(int n, const double *a, double lambda, const double *g, double *x,
                       double *inv, double *L)
{
    for (int i = 0; i < n; ++i)
        for (int j = 0; j <= i; ++j) {
            double s = a[j * n + i] * (i == j ? 1.0 + lambda : 1.0);
            for (int q = 0; q < j; ++q)
                s -= L[i * n + q] * L[j * n + q];
            if (i == j) {
                if (!(s > 0.0) || !isfinite(s))
                    return 0;
                L[i * n + i] = sqrt(s);
            } else {
                L[i * n + j] = s / L[j * n + j];
            }
        }
    joint_back(n, L, g, x);
    for (int c = 0; inv && c < n; ++c) {
        double e[JMAX] = {0}, col[JMAX];
        e[c] = 1.0;
        joint_back(n, L, e, col);
        for (int i = 0; i < n; ++i)
            inv[i * n + c] = col[i];
    }
    return 1;
}

/* Work of one joint fit, on the heap (a few tens of kB). */
typedef struct joint_work {
    joint_acc acc, best_acc;
    double best[JMAX], trial[JMAX], step[JMAX];
    double L[JMAX * JMAX], inv[JMAX * JMAX];
    double J[JMAX];
    uint8_t *in;    /* the union box: 1 where a pixel lies in some child's stamp */
    uint8_t *inner; /* 1 where it lies strictly inside some child's stamp         */
    /* GAUSS: per child, the column (x) and row (y) factors over the box */
    double *ex, *dex, *dsx, *ey, *dey, *dsy;
} joint_work;

/* One pass over the union at parameters p: the sums into acc. */
static void joint_pass(const sw_rm_frame *f, int32_t method, double beta, double level,
                       const double *p, int32_t k, int32_t x0, int32_t x1, int32_t y0, int32_t y1,
                       joint_work *w, joint_acc *acc)
{
    const int n = 3 * k + 2;
    const int32_t bw = x1 - x0, bh = y1 - y0;
    const int moffat = method == SW_REFINE_MOFFAT;
    const double s = p[W(k)];
    memset(acc, 0, sizeof(*acc));
    if (!moffat)
        for (int32_t c = 0; c < k; ++c) {
            for (int32_t i = 0; i < bw; ++i)
                sw_rm_axis(x0 + i, p[3 * c], s, &w->ex[c * bw + i], &w->dex[c * bw + i],
                           &w->dsx[c * bw + i]);
            for (int32_t j = 0; j < bh; ++j)
                sw_rm_axis(y0 + j, p[3 * c + 1], s, &w->ey[c * bh + j], &w->dey[c * bh + j],
                           &w->dsy[c * bh + j]);
        }
    for (int32_t j = 0; j < bh; ++j)
        for (int32_t i = 0; i < bw; ++i) {
            if (!w->in[j * bw + i])
                continue;
            double d, b;
            if (!sw_rm_sample(f, x0 + i, y0 + j, level, &d, &b)) {
                acc->masked++;
                continue;
            }
            double m = p[B(k)], ds = 0.0;
            for (int32_t c = 0; c < k; ++c) {
                double P, dPx, dPy, dPs;
                if (moffat) {
                    sw_rm_moffat_pixel((double)(x0 + i) - p[3 * c], (double)(y0 + j) - p[3 * c + 1],
                                       s, beta, &P, &dPx, &dPy, &dPs);
                } else {
                    const double ex = w->ex[c * bw + i], ey = w->ey[c * bh + j];
                    P = ex * ey;
                    dPx = w->dex[c * bw + i] * ey;
                    dPy = ex * w->dey[c * bh + j];
                    dPs = w->dsx[c * bw + i] * ey + ex * w->dsy[c * bh + j];
                }
                const double F = p[3 * c + 2];
                m += F * P;
                w->J[3 * c] = F * dPx;
                w->J[3 * c + 1] = F * dPy;
                w->J[3 * c + 2] = P;
                ds += F * dPs;
            }
            w->J[W(k)] = ds;
            w->J[B(k)] = 1.0;
            double wt, r;
            acc->merit += sw_rm_pixel_merit(f, m, d, b, &wt, &r);
            for (int a = 0; a < n; ++a) {
                const double wj = wt * w->J[a];
                acc->g[a] += wj * r;
                for (int q = a; q < n; ++q)
                    acc->a[a * n + q] += wj * w->J[q];
            }
            acc->chi2 += wt * r * r;
            acc->n++;
        }
    for (int a = 0; a < n; ++a) /* the lower triangle from the upper */
        for (int q = 0; q < a; ++q)
            acc->a[a * n + q] = acc->a[q * n + a];
}

/* The fit itself (see sw_refine_joint_fit); w allocated by the caller. */
static int joint_run(const sw_rm_frame *f, int32_t method, double beta, int32_t max_iter,
                     double level, const sw_refine_seed *seeds, const int64_t *idx, int32_t k,
                     int32_t x0, int32_t x1, int32_t y0, int32_t y1, joint_work *w,
                     sw_refine_result *results)
{
    const int n = 3 * k + 2;
    const int32_t bw = x1 - x0, bh = y1 - y0;
    int32_t rmax = 0, edge = 0;
    /* the union and its inside */
    memset(w->in, 0, (size_t)bw * (size_t)bh);
    memset(w->inner, 0, (size_t)bw * (size_t)bh);
    for (int32_t c = 0; c < k; ++c) {
        const sw_refine_seed *s = &seeds[idx[c]];
        sw_rm_stamp st;
        sw_rm_stamp_make(f, s->x, s->y, s->radius, &st);
        edge |= st.edge;
        rmax = s->radius > rmax ? s->radius : rmax;
        for (int32_t y = st.y0; y < st.y1; ++y)
            for (int32_t x = st.x0; x < st.x1; ++x) {
                w->in[(y - y0) * bw + (x - x0)] = 1;
                if (abs(x - st.cx) < st.radius && abs(y - st.cy) < st.radius)
                    w->inner[(y - y0) * bw + (x - x0)] = 1;
            }
    }
    /* the start: B0 the mean of the union's border (pixels inside no stamp's inner square), the
     * union's sum above it shared out by the children's peaks, the width from their peaks */
    double sum = 0.0, border = 0.0;
    int32_t npix = 0, nborder = 0;
    for (int32_t j = 0; j < bh; ++j)
        for (int32_t i = 0; i < bw; ++i) {
            double d, b;
            if (!w->in[j * bw + i] || !sw_rm_sample(f, x0 + i, y0 + j, level, &d, &b))
                continue;
            sum += d;
            npix++;
            if (!w->inner[j * bw + i]) {
                border += d;
                nborder++;
            }
        }
    const double b0 = nborder > 0 ? border / nborder : 0.0;
    const double ftot = sum - b0 * npix;
    double peaks[SW_REFINE_MAX_CHILDREN], psum = 0.0;
    for (int32_t c = 0; c < k; ++c) {
        const sw_refine_seed *s = &seeds[idx[c]];
        const int32_t cx = (int32_t)floor(s->x + 0.5), cy = (int32_t)floor(s->y + 0.5);
        double pk = -INFINITY;
        for (int32_t y = cy - 1; y <= cy + 1; ++y)
            for (int32_t x = cx - 1; x <= cx + 1; ++x) {
                double d, b;
                if (x >= 0 && y >= 0 && x < f->width && y < f->height &&
                    sw_rm_sample(f, x, y, level, &d, &b))
                    pk = fmax(pk, d - b0);
            }
        if (!(pk > 0.0))
            return 0;
        peaks[c] = pk;
        psum += pk;
        w->trial[3 * c] = s->x;
        w->trial[3 * c + 1] = s->y;
    }
    if (!(ftot > 0.0))
        return 0;
    const double kw = sw_rm_width_scale(method, beta);
    double s0 = sqrt(ftot * sw_rm_peak_scale(method, beta) / psum);
    const double smin = 0.5 / kw, smax = 0.5 * rmax / kw;
    s0 = s0 < smin ? smin : (s0 > smax ? smax : s0);
    for (int32_t c = 0; c < k; ++c)
        w->trial[3 * c + 2] = ftot * peaks[c] / psum;
    w->trial[W(k)] = s0;
    w->trial[B(k)] = b0;

    /* Levenberg-Marquardt for n parameters, its sums in double (sw_rm_pixel_merit) and so the
     * rules the one-star fit kept before its sums went to float (refine_model.h sw_rm_lm_next):
     * a lower merit is accepted; converged when an accepted step moved every star by < 1e-5 px
     * and the merit by < 1e-7 of chi^2 */
    double lambda = 1e-3;
    int have = 0, converged = 0, it = 0;
    for (;;) {
        joint_pass(f, method, beta, level, w->trial, k, x0, x1, y0, y1, w, &w->acc);
        it++;
        int accepted = 0;
        double moved = 0.0, dmerit = 0.0;
        const int finite = isfinite(w->acc.chi2) && isfinite(w->acc.merit);
        if (!have) {
            if (w->acc.n < n + 1 || !finite)
                return 0;
            accepted = 1;
        } else if (finite && w->acc.merit < w->best_acc.merit) {
            accepted = 1;
            for (int32_t c = 0; c < k; ++c)
                moved = fmax(moved, fmax(fabs(w->trial[3 * c] - w->best[3 * c]),
                                         fabs(w->trial[3 * c + 1] - w->best[3 * c + 1])));
            dmerit = w->best_acc.merit - w->acc.merit;
        }
        if (accepted) {
            const int first = !have;
            memcpy(w->best, w->trial, (size_t)n * sizeof(double));
            w->best_acc = w->acc;
            have = 1;
            lambda = fmax(lambda * 0.1, 1e-9);
            if (!first && moved < 1e-5 && dmerit <= 1e-7 * w->acc.chi2 + 1e-12) {
                converged = 1;
                break;
            }
        } else {
            lambda *= 10.0;
            if (lambda > 1e10) {
                converged = 1;
                break;
            }
        }
        if (it >= max_iter)
            break;
        while (!joint_solve(n, w->best_acc.a, lambda, w->best_acc.g, w->step, NULL, w->L)) {
            lambda = lambda < 1e-6 ? 1e-3 : lambda * 10.0;
            if (lambda > 1e10)
                return 0;
        }
        for (int a = 0; a < n; ++a)
            w->trial[a] = w->best[a] + w->step[a];
        /* the width stays positive: at most halved in one step */
        if (w->trial[W(k)] < 0.5 * w->best[W(k)])
            w->trial[W(k)] = 0.5 * w->best[W(k)];
    }
    if (!joint_solve(n, w->best_acc.a, 0.0, w->best_acc.g, w->step, w->inv, w->L))
        return 0;
    /* the solution must make sense: positive fluxes and width, each child within its stamp
     * of its seed, no two children on one star */
    const double *p = w->best, s = p[W(k)];
    if (!(s > 0.0) || s * kw > rmax)
        return 0;
    for (int32_t c = 0; c < k; ++c) {
        const sw_refine_seed *sd = &seeds[idx[c]];
        if (!(p[3 * c + 2] > 0.0) || fabs(p[3 * c] - sd->x) > sd->radius ||
            fabs(p[3 * c + 1] - sd->y) > sd->radius || !(w->inv[3 * c * n + 3 * c] > 0.0) ||
            !(w->inv[(3 * c + 1) * n + 3 * c + 1] > 0.0))
            return 0;
        for (int32_t q = 0; q < c; ++q)
            if (hypot(p[3 * c] - p[3 * q], p[3 * c + 1] - p[3 * q + 1]) < 0.5 * s * kw)
                return 0;
    }
    for (int32_t c = 0; c < k; ++c) {
        sw_refine_result *r = &results[idx[c]];
        const double x = p[3 * c], y = p[3 * c + 1];
        memset(r, 0, sizeof(*r));
        r->x = x;
        r->y = y;
        r->x_var = w->inv[3 * c * n + 3 * c];
        r->y_var = w->inv[(3 * c + 1) * n + 3 * c + 1];
        r->flux = p[3 * c + 2];
        r->flux_var = w->inv[(3 * c + 2) * n + 3 * c + 2];
        r->sigma = s;
        const int32_t cx = (int32_t)floor(x + 0.5), cy = (int32_t)floor(y + 0.5);
        r->background = (f->mesh ? sw_rm_mesh_at(f, cx, cy) : level) + p[B(k)];
        r->chi2 = w->best_acc.chi2;
        r->npix = w->best_acc.n;
        r->iterations = it;
        r->flags = SW_REFINE_JOINT | (edge ? SW_REFINE_EDGE : 0) |
                   (w->best_acc.masked ? SW_REFINE_MASKED : 0) |
                   (converged ? 0 : SW_REFINE_MAXITER);
    }
    return 1;
}

int sw_refine_joint_fit(const sw_rm_frame *f, int32_t method, double beta, int32_t max_iter,
                        double level, const sw_refine_seed *seeds, const int64_t *idx, int32_t k,
                        sw_refine_result *results)
{
    int32_t x0, x1, y0, y1;
    if (k < 1 || k > SW_REFINE_MAX_CHILDREN ||
        !sw_refine_joint_box(f, seeds, idx, k, &x0, &x1, &y0, &y1) ||
        x1 - x0 > SW_REFINE_MAX_JOINT_SIDE || y1 - y0 > SW_REFINE_MAX_JOINT_SIDE)
        return -1;
    const size_t area = (size_t)(x1 - x0) * (size_t)(y1 - y0);
    const size_t axes = (size_t)k * (size_t)((x1 - x0) > (y1 - y0) ? (x1 - x0) : (y1 - y0));
    joint_work *w = malloc(sizeof(*w));
    uint8_t *masks = malloc(2 * area);
    double *fac = malloc(6 * axes * sizeof(double));
    int ok = 0;
    if (w && masks && fac) {
        w->in = masks;
        w->inner = masks + area;
        w->ex = fac;
        w->dex = fac + axes;
        w->dsx = fac + 2 * axes;
        w->ey = fac + 3 * axes;
        w->dey = fac + 4 * axes;
        w->dsy = fac + 5 * axes;
        ok = joint_run(f, method, beta, max_iter, level, seeds, idx, k, x0, x1, y0, y1, w, results);
    } else {
        ok = -2;
    }
    free(w);
    free(masks);
    free(fac);
    return ok;
}
