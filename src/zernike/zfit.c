/*
 * Zernike fit of Shack-Hartmann slopes (seed 001 section 3.3; the API and the model are
 * zernike_fit.h): the derivative matrix, its factorisation, and the CPU fit. The GPU fit is
 * zfit_cuda.cu.
 *
 * Derivative matrix. Seed 001 fits the slopes with the derivatives of the Zernike polynomials;
 * a lenslet measures the mean gradient of the wavefront over its illuminated area A, so the row
 * of lenslet l holds mean_A dZ_j/dX and mean_A dZ_j/dY. The area integrals are turned into
 * boundary integrals by Green's theorem (counter-clockwise boundary):
 *     iint_A dZ/dX dA = oint Z dY,   iint_A dZ/dY dA = -oint Z dX,   |A| = oint X dY,
 * and A = (lenslet square) n (pupil disc) minus (obscuration disc) has a boundary made of pieces
 * of the square's edges (inside the annulus), arcs of the pupil circle (inside the square,
 * counter-clockwise) and arcs of the obscuration circle (inside the square, clockwise). On a
 * straight piece Z is a polynomial of degree <= max_order <= 10 in the parameter, integrated
 * exactly by an 8-point Gauss-Legendre rule (exact to degree 15); on an arc Z dY is a
 * trigonometric polynomial of the angle, integrated by 16-point rules on pieces of at most
 * pi / 8 (converged to rounding: tests/unit/test_zernike_fit.c compares a 16 times finer rule).
 * A lenslet inside the annulus has only straight pieces, so its row is exact.
 *
 * Fit. With Aw = W^(1/2) Dc (the used rows, weighted), PINV: P = Aw^+ from the SVD
 * (LAPACKE_dgesvd), the `truncate` smallest singular values dropped, and c = P W^(1/2) s for all
 * frames of a batch in one cblas_dgemm (frames as columns). QR: Aw = Q R (LAPACKE_dgeqrf) at
 * create; per run Q^T (W^(1/2) s) (dormqr) and R c = (...)[0:m] (dtrtrs), the batch as the
 * right-hand sides. The singular values are computed for both methods: the plan is refused when
 * a kept one is below 1e-10 of the largest (a singular geometry).
 *
 * Invalid lenslets. A frame in which a used lenslet is flagged 0, or has a non-finite slope
 * (NaN, and also +-Inf), cannot use the shared factorisation: it is solved on its own reduced
 * system (the remaining rows of Aw) with LAPACKE_dgels, after the batch. A frame left with fewer
 * rows than unknowns, or whose reduced system is exactly singular (dgels info > 0), gets NaN.
 */
#include "zernike/zfit_internal.h"

#include "spotwave/zernike.h"

#include <cblas.h>
#include <lapacke.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ZF_EDGE_POINTS 8  /* Gauss-Legendre points per straight piece: exact to degree 15 */
#define ZF_ARC_POINTS  16 /* per arc piece */
#define ZF_MAX_TERMS   66 /* order 10 */
#define ZF_RANK_TOL    1e-10
#define ZF_PI          3.14159265358979323846

void sw_zfit_params_default(sw_zfit_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    sw_sh_geometry_default(&p->geometry);
    /* the pupil inscribed in the grid: the centre of the lenslets' footprint, half its side */
    const sw_sh_geometry *g = &p->geometry;
    p->pupil_cx_px = g->x0 - 0.5 + g->pitch_px * g->nx / 2.0;
    p->pupil_cy_px = g->y0 - 0.5 + g->pitch_px * g->ny / 2.0;
    p->pupil_radius_px = g->pitch_px * (g->nx < g->ny ? g->nx : g->ny) / 2.0;
    p->obscuration = 0.0;
    p->max_order = 6;
    p->min_illum = 0.5;
    p->method = SW_ZFIT_PINV;
    p->truncate = 0;
    p->weights = NULL;
    p->layout = SW_SLOPES_BLOCKS;
    p->max_frames = 1;
}

/* ------------------------------------------------------------------ quadrature */

/* Gauss-Legendre nodes and weights on [-1, 1] (Newton on P_n from the Chebyshev guesses). */
static void gauss_legendre(int n, double *x, double *w)
{
    for (int i = 0; i < n; i++) {
        double z = cos(ZF_PI * (i + 0.75) / (n + 0.5)), dp = 1.0;
        for (int it = 0; it < 100; it++) {
            double p0 = 1.0, p1 = 0.0;
            for (int k = 1; k <= n; k++) {
                double p2 = p1;
                p1 = p0;
                p0 = ((2.0 * k - 1.0) * z * p1 - (k - 1.0) * p2) / k;
            }
            dp = n * (z * p0 - p1) / (z * z - 1.0);
            double dz = p0 / dp;
            z -= dz;
            if (fabs(dz) < 1e-16)
                break;
        }
        x[i] = z;
        w[i] = 2.0 / ((1.0 - z * z) * dp * dp);
    }
}

typedef struct zf_quad {
    double ex[ZF_EDGE_POINTS], ew[ZF_EDGE_POINTS];
    double ax[ZF_ARC_POINTS], aw[ZF_ARC_POINTS];
    int J;
    int zn[ZF_MAX_TERMS], zm[ZF_MAX_TERMS];
} zf_quad;

static void quad_init(zf_quad *q, int max_order)
{
    gauss_legendre(ZF_EDGE_POINTS, q->ex, q->ew);
    gauss_legendre(ZF_ARC_POINTS, q->ax, q->aw);
    q->J = sw_zernike_count(max_order);
    for (int j = 0; j < q->J; j++)
        sw_zernike_osa_nm(j, &q->zn[j], &q->zm[j]);
}

/* Adds wt * Z_j(X, Y) * (dY, -dX) to (gx, gy) and wt * X * dY to the area. */
static void accumulate(const zf_quad *q, double X, double Y, double wt, double dX, double dY,
                       double *area, double *gx, double *gy)
{
    *area += wt * X * dY;
    for (int j = 0; j < q->J; j++) {
        double z = sw_zernike_eval(q->zn[j], q->zm[j], X, Y) * wt;
        gx[j] += z * dY;
        gy[j] -= z * dX;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The pieces of the segment P0 -> P1 inside the annulus obsc <= r <= 1. */
static void edge_pieces(const zf_quad *q, double x0, double y0, double x1, double y1, double obsc,
                        double *area, double *gx, double *gy)
{
    double dx = x1 - x0, dy = y1 - y0;
    double t[6];
    int nt = 0;
    t[nt++] = 0.0;
    double radii[2] = {1.0, obsc};
    for (int c = 0; c < (obsc > 0.0 ? 2 : 1); c++) {
        double a = dx * dx + dy * dy, b = 2.0 * (x0 * dx + y0 * dy);
        double cc = x0 * x0 + y0 * y0 - radii[c] * radii[c];
        double disc = b * b - 4.0 * a * cc;
        if (disc <= 0.0)
            continue;
        double sq = sqrt(disc);
        double r1 = (-b - sq) / (2.0 * a), r2 = (-b + sq) / (2.0 * a);
        if (r1 > 0.0 && r1 < 1.0)
            t[nt++] = r1;
        if (r2 > 0.0 && r2 < 1.0)
            t[nt++] = r2;
    }
    t[nt++] = 1.0;
    qsort(t, (size_t)nt, sizeof t[0], cmp_double);
    for (int i = 0; i + 1 < nt; i++) {
        double ta = t[i], tb = t[i + 1];
        if (tb - ta <= 0.0)
            continue;
        double tm = 0.5 * (ta + tb);
        /* Inside the annulus when at least two of three points of the piece are strictly inside:
         * a piece that only touches a circle (tangent at one point) is left out. */
        int in = 0;
        for (int k = 1; k <= 3; k++) {
            double tt = ta + 0.25 * k * (tb - ta);
            double xk = x0 + tt * dx, yk = y0 + tt * dy, r2 = xk * xk + yk * yk;
            in += r2 < 1.0 && r2 > obsc * obsc;
        }
        if (in < 2)
            continue;
        double half = 0.5 * (tb - ta);
        for (int k = 0; k < ZF_EDGE_POINTS; k++) {
            double tt = tm + half * q->ex[k];
            accumulate(q, x0 + tt * dx, y0 + tt * dy, half * q->ew[k], dx, dy, area, gx, gy);
        }
    }
}

/* The arcs of the circle of radius rho inside the square, counter-clockwise (dir = 1) or
 * clockwise (dir = -1). */
static void arc_pieces(const zf_quad *q, double rho, int dir, double cx, double cy, double h,
                       int refine, double *area, double *gx, double *gy)
{
    double th[9];
    int nt = 0;
    double xs[2] = {cx - h, cx + h}, ys[2] = {cy - h, cy + h};
    for (int i = 0; i < 2; i++) {
        if (fabs(xs[i]) < rho) {
            double a = acos(xs[i] / rho);
            th[nt++] = a;
            th[nt++] = 2.0 * ZF_PI - a;
        }
        if (fabs(ys[i]) < rho) {
            double a = asin(ys[i] / rho);
            th[nt++] = a < 0.0 ? a + 2.0 * ZF_PI : a;
            th[nt++] = ZF_PI - a;
        }
    }
    double lo, hi;
    int whole = 0; /* the full circle, inside the square */
    if (nt == 0) {
        /* No side line cuts the circle: it is wholly inside the square (whose centre-relative
         * origin, the circle's centre, is then inside) or wholly outside. */
        if (!(fabs(cx) < h && fabs(cy) < h))
            return;
        th[nt++] = 0.0;
        whole = 1;
    }
    qsort(th, (size_t)nt, sizeof th[0], cmp_double);
    double max_piece = ZF_PI / (8.0 * refine);
    for (int i = 0; i < nt; i++) {
        lo = th[i];
        hi = (i + 1 < nt) ? th[i + 1] : th[0] + 2.0 * ZF_PI;
        if (hi - lo <= 0.0)
            continue;
        /* inside the square at two of three points, strictly (a tangent touch is not inside) */
        int in = 0;
        for (int k = 1; k <= 3; k++) {
            double a = lo + 0.25 * k * (hi - lo);
            in += fabs(rho * cos(a) - cx) < h && fabs(rho * sin(a) - cy) < h;
        }
        if (in < 2 && !whole)
            continue;
        int pieces = (int)ceil((hi - lo) / max_piece);
        double step = (hi - lo) / pieces;
        for (int p = 0; p < pieces; p++) {
            double a0 = lo + p * step, half = 0.5 * step, am = a0 + half;
            for (int k = 0; k < ZF_ARC_POINTS; k++) {
                double a = am + half * q->ax[k];
                double c = cos(a), s = sin(a);
                /* dX = -rho sin(a) da, dY = rho cos(a) da, traversed in direction dir */
                accumulate(q, rho * c, rho * s, half * q->aw[k] * dir, -rho * s, rho * c, area, gx,
                           gy);
            }
        }
    }
}

static void region_integrals(const zf_quad *q, double cx, double cy, double h, double obsc,
                             int refine, double *area, double *gx, double *gy)
{
    *area = 0.0;
    for (int j = 0; j < q->J; j++)
        gx[j] = gy[j] = 0.0;
    double xa = cx - h, xb = cx + h, ya = cy - h, yb = cy + h;
    /* the square counter-clockwise: bottom, right, top, left */
    edge_pieces(q, xa, ya, xb, ya, obsc, area, gx, gy);
    edge_pieces(q, xb, ya, xb, yb, obsc, area, gx, gy);
    edge_pieces(q, xb, yb, xa, yb, obsc, area, gx, gy);
    edge_pieces(q, xa, yb, xa, ya, obsc, area, gx, gy);
    arc_pieces(q, 1.0, 1, cx, cy, h, refine, area, gx, gy);
    if (obsc > 0.0)
        arc_pieces(q, obsc, -1, cx, cy, h, refine, area, gx, gy);
}

void sw_zfit_region_integrals(int max_order, double cx, double cy, double h, double obsc,
                              int arc_refine, double *area, double *gx, double *gy)
{
    zf_quad q;
    quad_init(&q, max_order);
    region_integrals(&q, cx, cy, h, obsc, arc_refine < 1 ? 1 : arc_refine, area, gx, gy);
}

/* ------------------------------------------------------------------ plan */

static int row_pos(sw_slope_layout layout, int32_t n, int32_t k, int axis)
{
    return layout == SW_SLOPES_INTERLEAVED ? 2 * k + axis : axis * n + k;
}

void sw_zfit_destroy(sw_zfit_plan *plan)
{
    if (!plan)
        return;
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        sw_zfit_gpu_destroy(plan);
#endif
    free(plan->mask);
    free(plan->weights);
    free(plan->slope_l);
    free(plan->illum);
    free(plan->D);
    free(plan->row_pos);
    free(plan->row_l);
    free(plan->row_w);
    free(plan->Dc);
    free(plan->Aw);
    free(plan->P);
    free(plan->qr);
    free(plan->tau);
    free(plan->sing);
    free(plan->B);
    free(plan->S);
    free(plan->red_A);
    free(plan->red_b);
    free(plan->red_i);
    free(plan->C);
    free(plan->work);
    free(plan->bad);
    free(plan);
}

static sw_status check_params(sw_context *ctx, const sw_zfit_params *p)
{
    if (sw_sh_geometry_check(ctx, &p->geometry, 0, 0) != SW_OK)
        return SW_EINVAL;
    if (!isfinite(p->pupil_cx_px) || !isfinite(p->pupil_cy_px))
        return sw_fail(ctx, SW_EINVAL, "zernike fit: the pupil centre (%g, %g) is not finite",
                       p->pupil_cx_px, p->pupil_cy_px);
    if (!(p->pupil_radius_px > 0.0) || !isfinite(p->pupil_radius_px))
        return sw_fail(ctx, SW_EINVAL,
                       "zernike fit: the pupil radius %g px is not positive and finite",
                       p->pupil_radius_px);
    if (!(p->obscuration >= 0.0 && p->obscuration < 1.0))
        return sw_fail(ctx, SW_EINVAL, "zernike fit: obscuration %g is outside [0, 1)",
                       p->obscuration);
    if (p->max_order < 1 || p->max_order > 10)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: max_order %d is outside 1..10",
                       (int)p->max_order);
    if (!(p->min_illum >= 0.0 && p->min_illum <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "zernike fit: min_illum %g is outside [0, 1]", p->min_illum);
    if (p->method != SW_ZFIT_PINV && p->method != SW_ZFIT_QR)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: unknown method %d", (int)p->method);
    if (p->layout != SW_SLOPES_BLOCKS && p->layout != SW_SLOPES_INTERLEAVED)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: unknown slope layout %d", (int)p->layout);
    const int32_t max_batch = sw_context_backend(ctx) == SW_BACKEND_CUDA ? 65535 : 1000000;
    if (p->max_frames < 1 || p->max_frames > max_batch) /* a CUDA grid's y extent */
        return sw_fail(ctx, SW_EINVAL, "zernike fit: max_frames %d is outside 1..%d",
                       (int)p->max_frames, (int)max_batch);
    int32_t m = sw_zernike_count(p->max_order) - 1;
    if (p->truncate < 0 || (p->method == SW_ZFIT_PINV && p->truncate >= m))
        return sw_fail(ctx, SW_EINVAL,
                       "zernike fit: truncate %d must be >= 0 and leave some of the %d singular "
                       "values",
                       (int)p->truncate, (int)m);
    if (p->weights) {
        int64_t nl = (int64_t)p->geometry.nx * p->geometry.ny;
        for (int64_t l = 0; l < nl; l++)
            if (!(p->weights[l] >= 0.0) || !isfinite(p->weights[l]))
                return sw_fail(ctx, SW_EINVAL,
                               "zernike fit: weight of lenslet %lld is %g (must be finite and "
                               ">= 0)",
                               (long long)l, p->weights[l]);
    }
    return SW_OK;
}

#define ZF_ALLOC(ptr, count)                                                                       \
    do {                                                                                           \
        size_t n_ = (size_t)(count);                                                               \
        (ptr) = calloc(n_ ? n_ : 1, sizeof *(ptr));                                                \
        if (!(ptr)) {                                                                              \
            sw_zfit_destroy(plan);                                                                 \
            return sw_fail(ctx, SW_ENOMEM, "zernike fit: out of memory");                          \
        }                                                                                          \
    } while (0)

/* Builds D (public and compact) and the illumination. */
static void build_matrix(sw_zfit_plan *plan)
{
    const sw_zfit_params *p = &plan->p;
    const sw_sh_geometry *g = &p->geometry;
    zf_quad q;
    quad_init(&q, p->max_order);
    double R = p->pupil_radius_px, h = g->pitch_px / (2.0 * R);
    /* -F / R_um: OSA coefficients (a positive wavefront leads) move spots against the gradient
     * (zernike_fit.h, sim_sh.h) */
    double scale = -sw_sh_px_per_rad(g) / (R * g->pixel_um);
    double gx[ZF_MAX_TERMS], gy[ZF_MAX_TERMS], area;
    int32_t n = plan->n, m = plan->m;
    for (int32_t k = 0; k < n; k++) {
        int32_t l = plan->slope_l[k];
        double xr, yr;
        sw_sh_reference(g, l % plan->nx, l / plan->nx, &xr, &yr);
        region_integrals(&q, (xr - p->pupil_cx_px) / R, (yr - p->pupil_cy_px) / R, h,
                         p->obscuration, 1, &area, gx, gy);
        double ill = area / (4.0 * h * h);
        ill = ill < 0.0 ? 0.0 : (ill > 1.0 ? 1.0 : ill);
        plan->illum[k] = ill;
        double w = plan->weights ? plan->weights[l] : 1.0;
        /* below 1e-6 of a lenslet the boundary integrals cancel too much to be trusted */
        if (!(area > 0.0) || ill < p->min_illum || ill < 1e-6 || !(w > 0.0))
            continue;
        for (int32_t j = 1; j <= m; j++) {
            plan->D[(size_t)k * m + j - 1] = scale * gx[j] / area;
            plan->D[(size_t)(n + k) * m + j - 1] = scale * gy[j] / area;
        }
        plan->nu++;
        plan->illum[k] = ill;
        plan->row_w[k] = -1.0; /* marks the slope used, compacted below */
    }
}

sw_status sw_zfit_create(sw_context *ctx, const sw_zfit_params *p, sw_zfit_plan **out)
{
    if (!p || !out)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: NULL %s", !p ? "params" : "out");
    *out = NULL;
    sw_status st = check_params(ctx, p);
    if (st != SW_OK)
        return st;
    sw_zfit_plan *plan = calloc(1, sizeof *plan);
    if (!plan)
        return sw_fail(ctx, SW_ENOMEM, "zernike fit: out of memory");
    plan->ctx = ctx;
    plan->p = *p;
    plan->nx = p->geometry.nx;
    plan->ny = p->geometry.ny;
    plan->nl = plan->nx * plan->ny;
    int32_t nl = plan->nl;
    if (p->geometry.valid) {
        ZF_ALLOC(plan->mask, nl);
        memcpy(plan->mask, p->geometry.valid, (size_t)nl);
    }
    plan->p.geometry.valid = plan->mask;
    if (p->weights) {
        ZF_ALLOC(plan->weights, nl);
        memcpy(plan->weights, p->weights, (size_t)nl * sizeof(double));
    }
    plan->p.weights = plan->weights;
    plan->J = sw_zernike_count(p->max_order);
    plan->m = plan->J - 1;
    int32_t m = plan->m;

    int32_t n = 0;
    for (int32_t l = 0; l < nl; l++)
        n += sw_sh_is_valid(&plan->p.geometry, l);
    plan->n = n;
    ZF_ALLOC(plan->slope_l, n);
    for (int32_t l = 0, k = 0; l < nl; l++)
        if (sw_sh_is_valid(&plan->p.geometry, l))
            plan->slope_l[k++] = l;
    ZF_ALLOC(plan->illum, n);
    ZF_ALLOC(plan->D, (size_t)2 * n * m);
    ZF_ALLOC(plan->row_w, (size_t)2 * (n > 0 ? n : 1));
    build_matrix(plan);

    int32_t nu = plan->nu, nrow = 2 * nu;
    plan->nrow = nrow;
    if (nrow < m) {
        sw_zfit_destroy(plan);
        return sw_fail(ctx, SW_EINVAL,
                       "zernike fit: %d used slopes (%d lenslets lit to >= %g with weight > 0) "
                       "are fewer than the %d unknowns of order %d",
                       (int)nrow, (int)nu, p->min_illum, (int)m, (int)p->max_order);
    }
    /* compact rows: x rows of the used lenslets, then their y rows */
    double *mark = plan->row_w;
    ZF_ALLOC(plan->row_w, nrow);
    ZF_ALLOC(plan->row_pos, nrow);
    ZF_ALLOC(plan->row_l, nrow);
    ZF_ALLOC(plan->Dc, (size_t)nrow * m);
    ZF_ALLOC(plan->Aw, (size_t)nrow * m);
    for (int32_t k = 0, i = 0; k < n; k++) {
        if (mark[k] != -1.0)
            continue;
        int32_t l = plan->slope_l[k];
        double w = sqrt(plan->weights ? plan->weights[l] : 1.0);
        for (int axis = 0; axis < 2; axis++) {
            int32_t r = i + axis * nu;
            plan->row_pos[r] = row_pos(p->layout, n, k, axis);
            plan->row_l[r] = l;
            plan->row_w[r] = w;
            for (int32_t j = 0; j < m; j++) {
                double d = plan->D[(size_t)(axis * n + k) * m + j];
                plan->Dc[(size_t)j * nrow + r] = d;
                plan->Aw[(size_t)j * nrow + r] = w * d;
            }
        }
        i++;
    }
    free(mark);

    /* SVD of Aw: rank check for both methods, the pseudo-inverse for PINV */
    double *U = NULL, *VT = NULL, *A = NULL, *superb = NULL;
    ZF_ALLOC(plan->sing, m);
    U = malloc((size_t)nrow * m * sizeof(double));
    VT = malloc((size_t)m * m * sizeof(double));
    A = malloc((size_t)nrow * m * sizeof(double));
    superb = malloc((size_t)m * sizeof(double));
    if (!U || !VT || !A || !superb) {
        free(U), free(VT), free(A), free(superb);
        sw_zfit_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "zernike fit: out of memory");
    }
    memcpy(A, plan->Aw, (size_t)nrow * m * sizeof(double));
    lapack_int info = LAPACKE_dgesvd(LAPACK_COL_MAJOR, 'S', 'S', nrow, m, A, nrow, plan->sing, U,
                                     nrow, VT, m, superb);
    int32_t keep = p->method == SW_ZFIT_PINV ? m - p->truncate : m;
    plan->rank = keep;
    if (info == 0 && !(plan->sing[keep - 1] > ZF_RANK_TOL * plan->sing[0])) {
        double s0 = plan->sing[0], sk = plan->sing[keep - 1];
        free(U), free(VT), free(A), free(superb);
        sw_zfit_destroy(plan);
        return sw_fail(ctx, SW_EINVAL,
                       "zernike fit: singular geometry: singular value %d of %d is %g of the "
                       "largest (%g); the lenslets used cannot tell the %d modes of order %d apart",
                       (int)keep, (int)m, s0 > 0.0 ? sk / s0 : 0.0, s0, (int)m, (int)p->max_order);
    }
    if (info == 0 && p->method == SW_ZFIT_PINV) {
        plan->P = malloc((size_t)m * nrow * sizeof(double));
        if (plan->P) {
            /* P = V S^-1 U^T over the kept values: U's columns scaled by 1 / s first */
            for (int32_t i = 0; i < keep; i++)
                cblas_dscal(nrow, 1.0 / plan->sing[i], U + (size_t)i * nrow, 1);
            cblas_dgemm(CblasColMajor, CblasTrans, CblasTrans, m, nrow, keep, 1.0, VT, m, U, nrow,
                        0.0, plan->P, m);
        }
    }
    free(U), free(VT), free(A), free(superb);
    if (info != 0) {
        sw_zfit_destroy(plan);
        return sw_fail(ctx, SW_EINTERNAL, "zernike fit: LAPACKE_dgesvd failed (info %d)",
                       (int)info);
    }
    if (p->method == SW_ZFIT_PINV && !plan->P) {
        sw_zfit_destroy(plan);
        return sw_fail(ctx, SW_ENOMEM, "zernike fit: out of memory");
    }

    int32_t F = p->max_frames;
    double wq = 0.0;
    if (p->method == SW_ZFIT_QR) {
        ZF_ALLOC(plan->qr, (size_t)nrow * m);
        ZF_ALLOC(plan->tau, m);
        memcpy(plan->qr, plan->Aw, (size_t)nrow * m * sizeof(double));
        info = LAPACKE_dgeqrf(LAPACK_COL_MAJOR, nrow, m, plan->qr, nrow, plan->tau);
        if (info != 0) {
            sw_zfit_destroy(plan);
            return sw_fail(ctx, SW_EINTERNAL, "zernike fit: LAPACKE_dgeqrf failed (info %d)",
                           (int)info);
        }
        info = LAPACKE_dormqr_work(LAPACK_COL_MAJOR, 'L', 'T', nrow, F, m, plan->qr, nrow,
                                   plan->tau, NULL, nrow, &wq, -1);
    }
    double wg = 0.0;
    ZF_ALLOC(plan->red_A, (size_t)nrow * m);
    ZF_ALLOC(plan->red_b, nrow);
    ZF_ALLOC(plan->red_i, nu);
    info = LAPACKE_dgels_work(LAPACK_COL_MAJOR, 'N', nrow, m, 1, plan->red_A, nrow, plan->red_b,
                              nrow, &wg, -1);
    plan->lwork = (int32_t)(wq > wg ? wq : wg) + 1;
    ZF_ALLOC(plan->work, plan->lwork);
    ZF_ALLOC(plan->B, (size_t)nrow * F);
    ZF_ALLOC(plan->S, (size_t)nrow * F);
    ZF_ALLOC(plan->bad, F);
    ZF_ALLOC(plan->C, (size_t)m * F);

#ifdef SW_HAVE_CUDA
    if (sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        st = sw_zfit_gpu_create(plan);
        if (st != SW_OK) {
            sw_zfit_destroy(plan);
            return st;
        }
    }
#endif
    *out = plan;
    return SW_OK;
}

int32_t sw_zfit_terms(const sw_zfit_plan *plan)
{
    return plan ? plan->J : 0;
}

int32_t sw_zfit_slopes(const sw_zfit_plan *plan)
{
    return plan ? plan->n : 0;
}

int32_t sw_zfit_used(const sw_zfit_plan *plan)
{
    return plan ? plan->nu : 0;
}

double sw_zfit_illum(const sw_zfit_plan *plan, int32_t k)
{
    if (!plan || k < 0 || k >= plan->n)
        return -1.0;
    return plan->illum[k];
}

const double *sw_zfit_matrix(const sw_zfit_plan *plan)
{
    return plan ? plan->D : NULL;
}

/* ------------------------------------------------------------------ CPU fit */

int sw_zfit_frame_bad(const sw_zfit_plan *plan, const float *slopes, const uint8_t *valid)
{
    for (int32_t r = 0; r < plan->nrow; r++) {
        if (valid && !valid[plan->row_l[r]])
            return 1;
        if (!isfinite(slopes[plan->row_pos[r]]))
            return 1;
    }
    return 0;
}

void sw_zfit_host_frame(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid, double *coef,
                        double *residual)
{
    int32_t nu = plan->nu, nrow = plan->nrow, m = plan->m;
    /* the lenslets kept: valid, and both slopes finite */
    int32_t nr = 0;
    for (int32_t i = 0; i < nu; i++) {
        if (valid && !valid[plan->row_l[i]])
            continue;
        if (!isfinite(slopes[plan->row_pos[i]]) || !isfinite(slopes[plan->row_pos[nu + i]]))
            continue;
        plan->red_i[nr] = i;
        nr++;
    }
    int32_t rows = 2 * nr;
    coef[0] = 0.0;
    if (rows < m) {
        for (int32_t j = 1; j <= m; j++)
            coef[j] = NAN;
        if (residual)
            *residual = NAN;
        return;
    }
    for (int32_t t = nr - 1; t >= 0; t--) {
        int32_t i = plan->red_i[t];
        for (int axis = 0; axis < 2; axis++) {
            int32_t r = i + axis * nu, rr = t + axis * nr;
            for (int32_t j = 0; j < m; j++)
                plan->red_A[(size_t)j * rows + rr] = plan->Aw[(size_t)j * nrow + r];
            plan->red_b[rr] = plan->row_w[r] * slopes[plan->row_pos[r]];
        }
    }
    lapack_int info = LAPACKE_dgels_work(LAPACK_COL_MAJOR, 'N', rows, m, 1, plan->red_A, rows,
                                         plan->red_b, rows, plan->work, plan->lwork);
    if (info != 0) {
        for (int32_t j = 1; j <= m; j++)
            coef[j] = NAN;
        if (residual)
            *residual = NAN;
        return;
    }
    for (int32_t j = 0; j < m; j++)
        coef[j + 1] = plan->red_b[j];
    if (residual) {
        double ss = 0.0;
        for (int32_t t = 0; t < nr; t++) {
            int32_t i = plan->red_i[t];
            for (int axis = 0; axis < 2; axis++) {
                int32_t r = i + axis * nu;
                double v = -(double)slopes[plan->row_pos[r]];
                for (int32_t j = 0; j < m; j++)
                    v += plan->Dc[(size_t)j * nrow + r] * coef[j + 1];
                ss += v * v;
            }
        }
        *residual = sqrt(ss / rows);
    }
}

/* The batch on the host: frames without invalid lenslets through the shared factorisation. */
static sw_status host_run(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid,
                          int32_t frames, double *coef, double *residual)
{
    int32_t nrow = plan->nrow, m = plan->m, J = plan->J, n2 = 2 * plan->n;
    int32_t ng = 0;
    for (int32_t f = 0; f < frames; f++) {
        const float *s = slopes + (size_t)f * n2;
        const uint8_t *v = valid ? valid + (size_t)f * plan->nl : NULL;
        plan->bad[f] = (uint8_t)sw_zfit_frame_bad(plan, s, v);
        if (plan->bad[f])
            continue;
        double *b = plan->B + (size_t)ng * nrow, *sr = plan->S + (size_t)ng * nrow;
        for (int32_t r = 0; r < nrow; r++) {
            sr[r] = s[plan->row_pos[r]];
            b[r] = plan->row_w[r] * sr[r];
        }
        ng++;
    }
    double *C = plan->C; /* m x ng coefficients */
    if (ng > 0) {
        if (plan->p.method == SW_ZFIT_PINV) {
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, m, ng, nrow, 1.0, plan->P, m,
                        plan->B, nrow, 0.0, C, m);
        } else {
            lapack_int info =
                LAPACKE_dormqr_work(LAPACK_COL_MAJOR, 'L', 'T', nrow, ng, m, plan->qr, nrow,
                                    plan->tau, plan->B, nrow, plan->work, plan->lwork);
            if (info == 0)
                info = LAPACKE_dtrtrs_work(LAPACK_COL_MAJOR, 'U', 'N', 'N', m, ng, plan->qr, nrow,
                                           plan->B, nrow);
            if (info != 0)
                return sw_fail(plan->ctx, SW_EINTERNAL,
                               "zernike fit: QR solve failed (LAPACK info %d)", (int)info);
            for (int32_t g = 0; g < ng; g++)
                memcpy(C + (size_t)g * m, plan->B + (size_t)g * nrow, (size_t)m * sizeof(double));
        }
        if (residual) /* S = Dc C - S */
            cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, nrow, ng, m, 1.0, plan->Dc, nrow,
                        C, m, -1.0, plan->S, nrow);
    }
    for (int32_t f = 0, g = 0; f < frames; f++) {
        double *c = coef + (size_t)f * J;
        if (plan->bad[f]) {
            sw_zfit_host_frame(plan, slopes + (size_t)f * n2,
                               valid ? valid + (size_t)f * plan->nl : NULL, c,
                               residual ? residual + f : NULL);
            continue;
        }
        c[0] = 0.0;
        memcpy(c + 1, C + (size_t)g * m, (size_t)m * sizeof(double));
        if (residual) {
            const double *e = plan->S + (size_t)g * nrow;
            double ss = 0.0;
            for (int32_t r = 0; r < nrow; r++)
                ss += e[r] * e[r];
            residual[f] = sqrt(ss / nrow);
        }
        g++;
    }
    return SW_OK;
}

sw_status sw_zfit_run(sw_zfit_plan *plan, const float *slopes, const uint8_t *valid, int32_t frames,
                      sw_memory memory, double *coef, double *residual_px)
{
    if (!plan)
        return sw_fail(NULL, SW_EINVAL, "zernike fit: NULL plan");
    sw_context *ctx = plan->ctx;
    if (!slopes || !coef)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: NULL %s", !slopes ? "slopes" : "coef");
    if (frames < 1 || frames > plan->p.max_frames)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: %d frames is outside 1..max_frames (%d)",
                       (int)frames, (int)plan->p.max_frames);
    if (memory != SW_MEM_HOST && memory != SW_MEM_PINNED && memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "zernike fit: unknown memory kind %d", (int)memory);
    if (memory == SW_MEM_DEVICE && !plan->gpu)
        return sw_fail(ctx, SW_EINVAL,
                       "zernike fit: device memory needs a plan made on a CUDA context");
#ifdef SW_HAVE_CUDA
    if (plan->gpu)
        return sw_zfit_gpu_run(plan, slopes, valid, frames, memory, coef, residual_px);
#endif
    return host_run(plan, slopes, valid, frames, coef, residual_px);
}
