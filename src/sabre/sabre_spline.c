/*
 * Global SABRE with simplex splines of degree d and continuity r (sabre.h, "global SABRE of degree
 * d"): seed 002's Eq. (1)-(7) with the B-form in full, and the smoothness conditions of Lai &
 * Schumaker (Theorem 2.28) that the seed leaves to de Visser & Verhaegen 2013.
 *
 * Unknowns. C^0 continuity is built in: every domain point (i v0 + j v1 + k v2) / d of a triangle
 * with data is one unknown, shared by the triangles that hold it (the null space of the C^0 part
 * of H is this basis, as the vertex basis is for d = 1). Domain points are keyed by their position
 * times 2d (integers: the centres sit at half-integers) and numbered along the lattice's shorter
 * side (rows of keys), which for d = 1 is sabre_global.c's band order. The anchor (the domain
 * point at the first estimated corner) is not an unknown.
 *
 * Rows. Data: per valid lenslet the mean-gradient pair (sabre.h), integrated over the eight right
 * triangles into which the lattice's triangle edges cut its square (inside the lattice) and over
 * the quarter squares outside it (d >= 2: the nearest triangle's polynomial, 2 x 2 Gauss), plus for
 * d = 1 sabre.h's per-triangle rows. Soft (d >= 2): the conditions of orders r + 1 .. d across
 * every interior edge whose two triangles have data, weight `smoothing`. Hard (r = 1): the
 * first-order conditions, as a penalty mu ||H c + y||^2 whose multiplier estimate y is updated
 * after each solve (the method of multipliers, Hestenes 1969 / Powell 1969): the factorisation is
 * made once, each run repeats the band solve until |H c| is at rounding level.
 *
 * Robust passes (sw_sabre_spline_set_robust): sabre_global.c's Huber pseudo-observations on these
 * rows (the model slope of a lenslet: the weighted mean of its data rows), each pass the same
 * multiplier iteration on the same factor, started from the last solution.
 */
#include "core/core_internal.h"
#include "sabre/sabre_internal.h"

#include "spotwave/sabre.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SW_SPLINE_MAX_DEGREE 3
#define SW_SPLINE_MAX_NB     10 /* (d+1)(d+2)/2 for d = 3 */
/* The hard penalty relative to the data rows, and the multiplier iterations' stop: |H c| below
 * SW_SPLINE_AL_TOL of the largest |c| (or of the slopes' scale when c is 0). */
#define SW_SPLINE_MU       1e4
#define SW_SPLINE_AL_TOL   1e-14
#define SW_SPLINE_AL_ITERS 200

/* A sparse row: unknowns and their coefficients (merged: each unknown once). */
typedef struct srow {
    int n;
    int32_t u[4 * SW_SPLINE_MAX_NB * 3];
    double a[4 * SW_SPLINE_MAX_NB * 3];
} srow;

struct sw_sabre_spline {
    sw_context *ctx;
    int32_t nx, ny, sx, sy, d, r, nb;
    double pitch, lambda, eps;
    uint8_t *valid;
    uint8_t *test; /* per triangle: 1 = estimated (a valid corner)                        */
    int32_t *tunk; /* per triangle and B-coefficient: unknown, -1 anchor, -2 not estimated */
    int32_t n, kd; /* unknowns, half-bandwidth                                             */
    double *ab;    /* Cholesky factor                                                       */
    double *rhs, *y, *hc;
    /* the data and soft rows (for the residual of the refinement): row k has entries
     * rptr[k]..rptr[k+1]-1, weight rw[k], target rt[k] (slope index l or n + l, -1 soft: 0) */
    int64_t nrow, rcap, ecap;
    int64_t *rptr, *rt;
    double *rw;
    int32_t *runk;
    double *rval;
    int alloc_failed;
    int64_t nh; /* hard rows                                                              */
    int64_t *hptr;
    int32_t *hunk;
    double *hval;
    /* the noise-aware weight (smoothing 0, d >= 2): eps0 the degree's floor, noise the slope
     * noise variance the caller gave (< 0: estimated per run), last_* the last run's */
    int auto_w;
    double eps0, noise, last_noise, last_var;
    float *work; /* 2 nx ny: the noise estimate's differences */
    /* robust passes (sabre.h, sw_sabre_spline_set_robust): their number and threshold kappa;
     * obs the pseudo-observations (2 nx ny, as the slopes), mu and wsum the model's slopes and
     * the weights they are averaged with (2 nx ny), res the residual lengths (nx ny) */
    int32_t robust_passes;
    double robust_threshold;
    float *obs;
    double *mu, *wsum, *res;
};

/* ------------------------------------------------------------------ B-form helpers */

/* Position of (i, j, k = d - i - j) in a triangle's coefficients (sabre.h's order). */
static inline int bidx(int d, int i, int j)
{
    return (d - i) * (d - i + 1) / 2 + (d - i - j);
}

static const double fact[] = {1, 1, 2, 6, 24};

/* The Bernstein polynomial B^m_{ijk}(b) (0 for a negative exponent). */
static double bern(int m, int i, int j, int k, const double b[3])
{
    if (i < 0 || j < 0 || k < 0)
        return 0.0;
    return fact[m] / (fact[i] * fact[j] * fact[k]) * pow(b[0], i) * pow(b[1], j) * pow(b[2], k);
}

/* The vertices of triangle q of square (I, J), in sabre.h's order (two corners, the centre). */
static void tri_vertices(int32_t I, int32_t J, int q, double vx[3], double vy[3])
{
    static const int c0[4][2] = {{0, 0}, {1, 0}, {1, 1}, {0, 1}};
    static const int c1[4][2] = {{1, 0}, {1, 1}, {0, 1}, {0, 0}};
    vx[0] = I + c0[q][0], vy[0] = J + c0[q][1];
    vx[1] = I + c1[q][0], vy[1] = J + c1[q][1];
    vx[2] = I + 0.5, vy[2] = J + 0.5;
}

/* Barycentric coordinates of (x, y) and the gradients of b0, b1, b2 (constant). */
static void bary(const double vx[3], const double vy[3], double x, double y, double b[3],
                 double gx[3], double gy[3])
{
    const double det = (vx[1] - vx[0]) * (vy[2] - vy[0]) - (vx[2] - vx[0]) * (vy[1] - vy[0]);
    for (int l = 0; l < 3; l++) {
        const int a = (l + 1) % 3, c = (l + 2) % 3;
        /* b_l = area(p, v_a, v_c) / area: linear, zero on the opposite edge */
        gx[l] = (vy[a] - vy[c]) / det;
        gy[l] = (vx[c] - vx[a]) / det;
        b[l] = ((vx[a] - x) * (vy[c] - y) - (vx[c] - x) * (vy[a] - y)) / det;
    }
}

/* The gradient's coefficients on a triangle's B-coefficients at barycentric point b:
 * d/dx p = sum_m ax[m] c_m (likewise y). */
static void grad_coeffs(int d, const double b[3], const double gx[3], const double gy[3],
                        double *ax, double *ay)
{
    for (int i = d; i >= 0; i--)
        for (int j = d - i; j >= 0; j--) {
            const int k = d - i - j, m = bidx(d, i, j);
            const double b0 = bern(d - 1, i - 1, j, k, b), b1 = bern(d - 1, i, j - 1, k, b),
                         b2 = bern(d - 1, i, j, k - 1, b);
            ax[m] = d * (gx[0] * b0 + gx[1] * b1 + gx[2] * b2);
            ay[m] = d * (gy[0] * b0 + gy[1] * b1 + gy[2] * b2);
        }
}

/* sw_sabre_locate's triangle for (x, y): square clamped, quadrant from its centre. */
static void locate(int32_t sx, int32_t sy, double x, double y, int32_t *si, int32_t *sj, int *q)
{
    const double fxl = floor(x), fyl = floor(y);
    *si = fxl < 0 ? 0 : (fxl > sx - 1 ? sx - 1 : (int32_t)fxl);
    *sj = fyl < 0 ? 0 : (fyl > sy - 1 ? sy - 1 : (int32_t)fyl);
    const double fx = x - *si - 0.5, fy = y - *sj - 0.5, ax = fabs(fx);
    *q = (-fy >= ax) ? 0 : (fy >= ax) ? 2 : (fx > 0) ? 1 : 3;
}

/* Adds a coefficient to a row, merging equal unknowns; unknowns < 0 (anchor, none) dropped. */
static void row_add(srow *r, int32_t u, double a)
{
    if (u < 0 || a == 0.0)
        return;
    for (int j = 0; j < r->n; j++)
        if (r->u[j] == u) {
            r->a[j] += a;
            return;
        }
    r->u[r->n] = u;
    r->a[r->n++] = a;
}

static inline void band_add(double *ab, int32_t kd, int32_t i, int32_t j, double v)
{
    ab[(size_t)(i - j) + (size_t)j * (kd + 1)] += v;
}

/* c r r^T into the band. */
static void row_outer(const sw_sabre_spline *s, const srow *r, double c)
{
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < r->n; j++)
            if (r->u[j] <= r->u[i])
                band_add(s->ab, s->kd, r->u[i], r->u[j], c * r->a[i] * r->a[j]);
}

static int32_t row_span(const srow *r, int32_t kd)
{
    int32_t lo = INT32_MAX, hi = -1;
    for (int j = 0; j < r->n; j++) {
        lo = r->u[j] < lo ? r->u[j] : lo;
        hi = r->u[j] > hi ? r->u[j] : hi;
    }
    return hi >= 0 && hi - lo > kd ? hi - lo : kd;
}

/* Keeps row r (weight w, target t) for the residuals and adds w r r^T to the band. */
static void row_keep(sw_sabre_spline *s, const srow *r, double w, int64_t t)
{
    row_outer(s, r, w);
    if (s->nrow + 1 >= s->rcap) {
        const int64_t cap = 2 * s->rcap + 1024;
        int64_t *p = realloc(s->rptr, (size_t)(cap + 1) * sizeof *p);
        if (p)
            s->rptr = p;
        int64_t *q = realloc(s->rt, (size_t)cap * sizeof *q);
        if (q)
            s->rt = q;
        double *x = realloc(s->rw, (size_t)cap * sizeof *x);
        if (x)
            s->rw = x;
        if (!p || !q || !x) {
            s->alloc_failed = 1;
            return;
        }
        if (s->rcap == 0)
            s->rptr[0] = 0;
        s->rcap = cap;
    }
    const int64_t at = s->rptr[s->nrow];
    if (at + r->n > s->ecap) {
        const int64_t cap = 2 * s->ecap + 16384;
        int32_t *u = realloc(s->runk, (size_t)cap * sizeof *u);
        if (u)
            s->runk = u;
        double *v = realloc(s->rval, (size_t)cap * sizeof *v);
        if (v)
            s->rval = v;
        if (!u || !v) {
            s->alloc_failed = 1;
            return;
        }
        s->ecap = cap;
    }
    for (int j = 0; j < r->n; j++) {
        s->runk[at + j] = r->u[j];
        s->rval[at + j] = r->a[j];
    }
    s->rw[s->nrow] = w;
    s->rt[s->nrow] = t;
    s->rptr[++s->nrow] = at + r->n;
}

/* ------------------------------------------------------------------ the rows */

/* The mean-gradient rows of lenslet (lx, ly) over its square (sabre_spline.c's top); *inside = 1
 * when the lattice covers the square. */
static void mean_rows(const sw_sabre_spline *s, int32_t lx, int32_t ly, srow *rx, srow *ry,
                      int *inside)
{
    const int d = s->d;
    rx->n = ry->n = 0;
    *inside = 1;
    for (int quarter = 0; quarter < 4; quarter++) {
        const int ox = (quarter == 0 || quarter == 3) ? 1 : -1, oy = quarter < 2 ? 1 : -1;
        const int32_t ci = lx - (ox < 0), cj = ly - (oy < 0);
        const double hx = 0.5 * ox, hy = 0.5 * oy;
        double ax[SW_SPLINE_MAX_NB], ay[SW_SPLINE_MAX_NB];
        if (ci >= 0 && cj >= 0 && ci < s->sx && cj < s->sy) {
            /* two right triangles, cut by the diagonal from the corner to the square's centre */
            for (int part = 0; part < 2; part++) {
                const int q = part == 0 ? (oy > 0 ? 0 : 2) : (ox > 0 ? 3 : 1);
                const double px[3] = {lx, lx + hx, part == 0 ? lx + hx : lx};
                const double py[3] = {ly, part == 0 ? ly : ly + hy, ly + hy};
                double vx[3], vy[3];
                tri_vertices(ci, cj, q, vx, vy);
                const int64_t t = 4 * ((int64_t)cj * s->sx + ci) + q;
                for (int g = 0; g < 3; g++) { /* interior 3-point rule, exact to degree 2 */
                    const double x = (4 * px[g] + px[(g + 1) % 3] + px[(g + 2) % 3]) / 6.0;
                    const double y = (4 * py[g] + py[(g + 1) % 3] + py[(g + 2) % 3]) / 6.0;
                    double b[3], gx[3], gy[3];
                    bary(vx, vy, x, y, b, gx, gy);
                    grad_coeffs(d, b, gx, gy, ax, ay);
                    for (int m = 0; m < s->nb; m++) {
                        row_add(rx, s->tunk[t * s->nb + m], ax[m] / 24.0); /* area 1/8, 1/3 */
                        row_add(ry, s->tunk[t * s->nb + m], ay[m] / 24.0);
                    }
                }
            }
        } else {
            *inside = 0;
            if (d == 1)
                continue; /* sabre.h: a rim lenslet keeps the per-triangle rows only */
            int32_t si, sj;
            int q;
            locate(s->sx, s->sy, lx + 0.5 * hx, ly + 0.5 * hy, &si, &sj, &q);
            double vx[3], vy[3];
            tri_vertices(si, sj, q, vx, vy);
            const int64_t t = 4 * ((int64_t)sj * s->sx + si) + q;
            const double e = 0.5 / sqrt(3.0);
            for (int g = 0; g < 4; g++) { /* 2 x 2 Gauss on the quarter square */
                const double x = lx + hx * (0.5 + ((g & 1) ? e : -e));
                const double y = ly + hy * (0.5 + ((g & 2) ? e : -e));
                double b[3], gx[3], gy[3];
                bary(vx, vy, x, y, b, gx, gy);
                grad_coeffs(d, b, gx, gy, ax, ay);
                for (int m = 0; m < s->nb; m++) {
                    row_add(rx, s->tunk[t * s->nb + m], ax[m] / 16.0); /* area 1/4, 1/4 */
                    row_add(ry, s->tunk[t * s->nb + m], ay[m] / 16.0);
                }
            }
        }
    }
}

/* The conditions of order n between triangles t and u sharing an edge (Lai & Schumaker 2007,
 * Theorem 2.28): with t = (A, B, C), u = (A, B, C') and beta the barycentric coordinates of C'
 * in t, for i + j = d - n: c^u_{i,j,n} = sum_{a+b+c=n} c^t_{i+a, j+b, c} B^n_{abc}(beta).
 * Returns the rows (d - n + 1 of them). */
static int edge_rows(const sw_sabre_spline *s, int64_t t, int64_t u, int n, srow *rows)
{
    const int d = s->d;
    double tx[3], ty[3], ux[3], uy[3];
    tri_vertices((int32_t)((t / 4) % s->sx), (int32_t)((t / 4) / s->sx), (int)(t % 4), tx, ty);
    tri_vertices((int32_t)((u / 4) % s->sx), (int32_t)((u / 4) / s->sx), (int)(u % 4), ux, uy);
    /* pt[l]: t's vertex index playing A, B, C; pu likewise for u (C' its third) */
    int pt[3], pu[3], na = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            if (tx[a] == ux[b] && ty[a] == uy[b] && na < 2) {
                pt[na] = a;
                pu[na] = b;
                na++;
            }
    if (na != 2)
        return 0;
    pt[2] = 3 - pt[0] - pt[1];
    pu[2] = 3 - pu[0] - pu[1];
    const double vx[3] = {tx[pt[0]], tx[pt[1]], tx[pt[2]]},
                 vy[3] = {ty[pt[0]], ty[pt[1]], ty[pt[2]]};
    double beta[3], gx[3], gy[3];
    bary(vx, vy, ux[pu[2]], uy[pu[2]], beta, gx, gy);
    int nr = 0;
    for (int i = d - n; i >= 0; i--) {
        const int j = d - n - i;
        srow *r = &rows[nr++];
        r->n = 0;
        int eu[3];
        eu[pu[0]] = i, eu[pu[1]] = j, eu[pu[2]] = n;
        row_add(r, s->tunk[u * s->nb + bidx(d, eu[0], eu[1])], 1.0);
        for (int a = n; a >= 0; a--)
            for (int b = n - a; b >= 0; b--) {
                const int c = n - a - b;
                int et[3];
                et[pt[0]] = i + a, et[pt[1]] = j + b, et[pt[2]] = c;
                row_add(r, s->tunk[t * s->nb + bidx(d, et[0], et[1])], -bern(n, a, b, c, beta));
            }
    }
    return nr;
}

/* Calls fn(s, t, u, ctx) for every interior edge whose two triangles have data. */
typedef void (*edge_fn)(sw_sabre_spline *s, int64_t t, int64_t u, void *arg);

static void for_edges(sw_sabre_spline *s, edge_fn fn, void *arg)
{
    for (int32_t J = 0; J < s->sy; J++)
        for (int32_t I = 0; I < s->sx; I++) {
            const int64_t base = 4 * ((int64_t)J * s->sx + I);
            for (int q = 0; q < 4; q++) /* the diagonals inside the square */
                if (s->test[base + q] && s->test[base + (q + 1) % 4])
                    fn(s, base + q, base + (q + 1) % 4, arg);
            if (J > 0 && s->test[base] && s->test[base - 4 * s->sx + 2])
                fn(s, base, base - 4 * s->sx + 2, arg); /* bottom with the top below */
            if (I > 0 && s->test[base + 3] && s->test[base - 4 + 1])
                fn(s, base + 3, base - 4 + 1, arg); /* left with the right on the left */
        }
}

/* ------------------------------------------------------------------ create */

typedef struct edge_pass {
    int mode; /* 0: band width, 1: count hard rows, 2: store hard rows, 3: add to the band */
    int64_t count, fill;
} edge_pass;

static void edge_visit(sw_sabre_spline *s, int64_t t, int64_t u, void *arg)
{
    edge_pass *e = arg;
    srow rows[SW_SPLINE_MAX_DEGREE + 1];
    for (int n = 1; n <= s->d; n++) {
        const int hard = n <= s->r, soft = !hard && s->d >= 2;
        if (!hard && !soft)
            continue;
        const int nr = edge_rows(s, t, u, n, rows);
        for (int k = 0; k < nr; k++) {
            const srow *r = &rows[k];
            if (e->mode == 0)
                s->kd = row_span(r, s->kd);
            else if (e->mode == 1 && hard)
                e->count++, e->fill += r->n;
            else if (e->mode == 2 && hard) {
                for (int j = 0; j < r->n; j++) {
                    s->hunk[e->fill] = r->u[j];
                    s->hval[e->fill++] = r->a[j];
                }
                s->hptr[++e->count] = e->fill;
            } else if (e->mode == 3 && hard)
                row_outer(s, r, SW_SPLINE_MU);
            else if (e->mode == 3)
                row_keep(s, r, s->eps, -1);
        }
    }
}

void sw_sabre_spline_params_default(sw_sabre_spline_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->pitch = 1.0;
    p->degree = 1;
    p->continuity = 0;
    p->triangle_weight = SW_SABRE_TRIANGLE_WEIGHT;
    p->smoothing = 0.0; /* the degree's default (sabre.h) */
}

void sw_sabre_spline_destroy(sw_sabre_spline *s)
{
    if (!s)
        return;
    free(s->valid);
    free(s->test);
    free(s->tunk);
    free(s->ab);
    free(s->rhs);
    free(s->y);
    free(s->hc);
    free(s->rptr);
    free(s->rt);
    free(s->rw);
    free(s->runk);
    free(s->rval);
    free(s->hptr);
    free(s->hunk);
    free(s->hval);
    free(s->work);
    free(s->obs);
    free(s->mu);
    free(s->wsum);
    free(s->res);
    free(s);
}

/* Numbers the domain points (sabre_spline.c's top); fills tunk. */
static sw_status number_points(sw_sabre_spline *s)
{
    const int d = s->d;
    const int64_t kx = 2 * (int64_t)d * s->sx + 1, ky = 2 * (int64_t)d * s->sy + 1;
    const int64_t ntri = 4 * (int64_t)s->sx * s->sy;
    int32_t *key = malloc((size_t)(kx * ky) * sizeof *key);
    if (!key)
        return sw_fail(s->ctx, SW_ENOMEM, "global SABRE (degree %d): out of memory", d);
    for (int64_t k = 0; k < kx * ky; k++)
        key[k] = -2;
    /* mark the points of estimated triangles */
    for (int64_t t = 0; t < ntri; t++) {
        if (!s->test[t])
            continue;
        double vx[3], vy[3];
        tri_vertices((int32_t)((t / 4) % s->sx), (int32_t)((t / 4) / s->sx), (int)(t % 4), vx, vy);
        for (int i = d; i >= 0; i--)
            for (int j = d - i; j >= 0; j--) {
                const int k = d - i - j;
                const int64_t X = llround(2 * (i * vx[0] + j * vx[1] + k * vx[2]));
                const int64_t Y = llround(2 * (i * vy[0] + j * vy[1] + k * vy[2]));
                key[Y * kx + X] = 0;
            }
    }
    /* the anchor: the first corner (row-major) that is a point of an estimated triangle */
    int64_t anchor = -1;
    for (int32_t J = 0; J <= s->sy && anchor < 0; J++)
        for (int32_t I = 0; I <= s->sx && anchor < 0; I++) {
            const int64_t k = (int64_t)2 * d * J * kx + (int64_t)2 * d * I;
            if (key[k] == 0)
                anchor = k;
        }
    if (anchor >= 0)
        key[anchor] = -1;
    s->n = 0;
    const int by_rows = s->nx <= s->ny;
    const int64_t outer = by_rows ? ky : kx, inner = by_rows ? kx : ky;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const int64_t k = by_rows ? o * kx + i : i * kx + o;
            if (key[k] == 0)
                key[k] = s->n++;
        }
    for (int64_t t = 0; t < ntri; t++) {
        double vx[3], vy[3];
        tri_vertices((int32_t)((t / 4) % s->sx), (int32_t)((t / 4) / s->sx), (int)(t % 4), vx, vy);
        for (int i = d; i >= 0; i--)
            for (int j = d - i; j >= 0; j--) {
                const int k = d - i - j;
                const int64_t X = llround(2 * (i * vx[0] + j * vx[1] + k * vx[2]));
                const int64_t Y = llround(2 * (i * vy[0] + j * vy[1] + k * vy[2]));
                s->tunk[t * s->nb + bidx(d, i, j)] = s->test[t] ? key[Y * kx + X] : -2;
            }
    }
    free(key);
    return SW_OK;
}

/* The data rows of every valid lenslet: into the band and kept (add = 1) or only the band
 * width. */
static sw_status data_rows(sw_sabre_spline *s, int add)
{
    const int64_t nlens = (int64_t)s->nx * s->ny;
    for (int64_t l = 0; l < nlens; l++) {
        if (!s->valid[l])
            continue;
        const int32_t lx = (int32_t)(l % s->nx), ly = (int32_t)(l / s->nx);
        srow rx, ry, tr[8][2];
        int inside, nt = 0;
        mean_rows(s, lx, ly, &rx, &ry, &inside);
        double mw = 1.0;
        if (s->d == 1) { /* sabre.h's model: per-triangle rows, the mean rows where covered */
            int32_t sqi[8], sqj[8];
            int q[8];
            nt = sw_sabre_corner_triangles(s->sx, s->sy, lx, ly, sqi, sqj, q);
            mw = sw_sabre_mean_weight(inside ? 8 : nt, s->lambda);
            for (int k = 0; k < nt; k++) {
                double vx[3], vy[3], b[3], gx[3], gy[3];
                tri_vertices(sqi[k], sqj[k], q[k], vx, vy);
                bary(vx, vy, vx[2], vy[2], b, gx, gy);
                const int64_t t = 4 * ((int64_t)sqj[k] * s->sx + sqi[k]) + q[k];
                tr[k][0].n = tr[k][1].n = 0;
                for (int m = 0; m < 3; m++) {
                    row_add(&tr[k][0], s->tunk[t * 3 + m], gx[m]);
                    row_add(&tr[k][1], s->tunk[t * 3 + m], gy[m]);
                }
            }
        }
        if (!add) {
            s->kd = row_span(&rx, row_span(&ry, s->kd));
            for (int k = 0; k < nt; k++)
                s->kd = row_span(&tr[k][0], row_span(&tr[k][1], s->kd));
            continue;
        }
        const double tw = sw_sabre_tri_weight(nt, s->lambda);
        if (mw > 0) {
            row_keep(s, &rx, mw, l);
            row_keep(s, &ry, mw, l + nlens);
        }
        for (int k = 0; k < nt; k++) {
            row_keep(s, &tr[k][0], tw, l);
            row_keep(s, &tr[k][1], tw, l + nlens);
        }
    }
    return s->alloc_failed ? SW_ENOMEM : SW_OK;
}

sw_status sw_sabre_spline_create(sw_context *ctx, const sw_sabre_spline_params *p,
                                 sw_sabre_spline **out)
{
    char who[48];
    if (out)
        *out = NULL;
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "global SABRE (degree d): params is NULL");
    snprintf(who, sizeof who, "global SABRE (degree %d)", (int)p->degree);
    sw_status st = sw_sabre_check_create(ctx, who, out != NULL, p->nx, p->ny, p->pitch);
    if (st != SW_OK)
        return st;
    if (p->degree < 1 || p->degree > SW_SPLINE_MAX_DEGREE)
        return sw_fail(ctx, SW_EINVAL, "%s: the degree %d is not in 1..%d", who, (int)p->degree,
                       SW_SPLINE_MAX_DEGREE);
    if (p->continuity < 0 || p->continuity >= p->degree || p->continuity > 1)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: the continuity order %d is not in 0..%d (r < d, and r <= 1)", who,
                       (int)p->continuity, p->degree - 1 < 1 ? p->degree - 1 : 1);
    if (p->degree == 1 &&
        !(p->triangle_weight >= SW_SABRE_TRIANGLE_WEIGHT_MIN && p->triangle_weight <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "%s: triangle_weight %g is not in %g..1", who,
                       p->triangle_weight, SW_SABRE_TRIANGLE_WEIGHT_MIN);
    if (p->degree >= 2 && p->smoothing != 0.0 && !(p->smoothing >= 1e-8 && p->smoothing <= 1e6))
        return sw_fail(ctx, SW_EINVAL, "%s: smoothing %g is not in 1e-8..1e6 (or 0: the default)",
                       who, p->smoothing);
    const int d = p->degree;
    const int32_t sx = p->nx - 1, sy = p->ny - 1;
    const int64_t nlens = (int64_t)p->nx * p->ny, ntri = 4 * (int64_t)sx * sy;
    /* refuse before allocating: about (1 + 2 (d - 1) + ...) points per square */
    {
        const double per = 2.0 + 6.0 * (d - 1) + 4.0 * (d >= 3 ? (d - 1) * (d - 2) / 2 : 0);
        const double shorter = sx < sy ? sx : sy, longer = sx < sy ? sy : sx;
        const double bytes = per * shorter * longer * (2 * per * shorter) * sizeof(double);
        if (bytes > (double)4 * 1024 * 1024 * 1024)
            return sw_fail(ctx, SW_EINVAL,
                           "%s: the normal matrix would need about %.1f GiB of band storage; use "
                           "a lower degree or D-SABRE for arrays this large",
                           who, bytes / (1024.0 * 1024 * 1024));
    }
    sw_sabre_spline *s = calloc(1, sizeof *s);
    if (!s)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    s->ctx = ctx;
    s->nx = p->nx;
    s->ny = p->ny;
    s->sx = sx;
    s->sy = sy;
    s->d = d;
    s->r = p->continuity;
    s->nb = (d + 1) * (d + 2) / 2;
    s->pitch = p->pitch;
    s->lambda = p->triangle_weight;
    s->eps0 = SW_SABRE_SPLINE_SMOOTHING; /* the noise-aware weight's floor, both degrees */
    s->eps = p->smoothing != 0.0 ? p->smoothing : s->eps0;
    s->auto_w = p->degree >= 2 && p->smoothing == 0.0;
    s->noise = -1.0;
    s->last_noise = s->last_var = NAN;
    s->robust_passes = 0;
    s->robust_threshold = SW_SABRE_ROBUST_THRESHOLD;
    s->valid = malloc((size_t)nlens);
    s->work = malloc((size_t)(4 * nlens) * sizeof *s->work);
    s->test = calloc((size_t)ntri, 1);
    s->tunk = malloc((size_t)(ntri * s->nb) * sizeof *s->tunk);
    s->obs = malloc((size_t)(2 * nlens) * sizeof *s->obs);
    s->mu = malloc((size_t)(2 * nlens) * sizeof *s->mu);
    s->wsum = malloc((size_t)(2 * nlens) * sizeof *s->wsum);
    s->res = malloc((size_t)nlens * sizeof *s->res);
    if (!s->valid || !s->work || !s->test || !s->tunk || !s->obs || !s->mu || !s->wsum || !s->res) {
        sw_sabre_spline_destroy(s);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    }
    if (!sw_sabre_copy_mask(p->valid, nlens, s->valid)) {
        sw_sabre_spline_destroy(s);
        return sw_fail(ctx, SW_EINVAL, "%s: no valid lenslet", who);
    }
    for (int32_t J = 0; J < sy; J++)
        for (int32_t I = 0; I < sx; I++)
            for (int q = 0; q < 4; q++) {
                int64_t idx[3];
                double cx[3], cy[3];
                sw_sabre_triangle(sx, sy, I, J, q, idx, cx, cy);
                s->test[4 * ((int64_t)J * sx + I) + q] =
                    (uint8_t)(s->valid[idx[0]] || s->valid[idx[1]]);
            }
    st = number_points(s);
    if (st != SW_OK) {
        sw_sabre_spline_destroy(s);
        return st;
    }
    /* band width, the hard rows, storage */
    s->kd = 0;
    data_rows(s, 0);
    edge_pass e = {0, 0, 0};
    for_edges(s, edge_visit, &e);
    e.mode = 1;
    for_edges(s, edge_visit, &e);
    s->nh = e.count;
    s->hptr = malloc((size_t)(s->nh + 1) * sizeof *s->hptr);
    s->hunk = malloc((size_t)(e.fill > 0 ? e.fill : 1) * sizeof *s->hunk);
    s->hval = malloc((size_t)(e.fill > 0 ? e.fill : 1) * sizeof *s->hval);
    s->rhs = malloc((size_t)(s->n > 0 ? s->n : 1) * sizeof *s->rhs);
    s->y = calloc((size_t)(s->nh > 0 ? s->nh : 1), sizeof *s->y);
    s->hc = calloc((size_t)(s->nh > 0 ? s->nh : 1), sizeof *s->hc);
    if (!s->hptr || !s->hunk || !s->hval || !s->rhs || !s->y || !s->hc) {
        sw_sabre_spline_destroy(s);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    }
    s->hptr[0] = 0;
    e = (edge_pass){2, 0, 0};
    for_edges(s, edge_visit, &e);
    st = sw_sabre_band_alloc(ctx, who, s->n, s->kd, &s->ab);
    if (st != SW_OK) {
        sw_sabre_spline_destroy(s);
        return st;
    }
    st = data_rows(s, 1);
    e = (edge_pass){3, 0, 0};
    for_edges(s, edge_visit, &e);
    if (st != SW_OK || s->alloc_failed) {
        sw_sabre_spline_destroy(s);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    }
    if (s->n > 0) {
        st = sw_sabre_band_factor(ctx, who,
                                  "the valid lenslets form parts that do not touch, so their "
                                  "relative piston is unknown",
                                  s->ab, s->n, s->kd);
        if (st != SW_OK) {
            sw_sabre_spline_destroy(s);
            return st;
        }
    }
    *out = s;
    return SW_OK;
}

/* ------------------------------------------------------------------ run, evaluation */

int64_t sw_sabre_spline_coefficients(const sw_sabre_spline *s)
{
    return s ? 4 * (int64_t)s->sx * s->sy * s->nb : 0;
}

void sw_sabre_spline_lattice(const sw_sabre_spline *s, sw_sabre_lattice *out)
{
    if (!s || !out)
        return;
    out->sx = s->sx;
    out->sy = s->sy;
    out->offx = out->offy = 0;
}

int32_t sw_sabre_spline_degree(const sw_sabre_spline *s)
{
    return s ? s->d : 0;
}

/* h = H c over the unknowns x (the anchor 0). */
static void hard_apply(const sw_sabre_spline *s, const double *x, double *h)
{
    for (int64_t k = 0; k < s->nh; k++) {
        double v = 0.0;
        for (int64_t f = s->hptr[k]; f < s->hptr[k + 1]; f++)
            v += s->hval[f] * x[s->hunk[f]];
        h[k] = v;
    }
}

/* g = the negative gradient of the penalised objective at c (sabre_spline.c's top):
 * sum_data w a (t - a.c) - sum_soft w h (h.c) - mu sum_hard h (h.c + y). */
static void objective_gradient(const sw_sabre_spline *s, const float *slopes, const double *c,
                               double *g)
{
    memset(g, 0, (size_t)s->n * sizeof *g);
    for (int64_t k = 0; k < s->nrow; k++) {
        double v = s->rt[k] >= 0 ? s->pitch * (double)slopes[s->rt[k]] : 0.0;
        for (int64_t f = s->rptr[k]; f < s->rptr[k + 1]; f++)
            v -= s->rval[f] * c[s->runk[f]];
        v *= s->rw[k];
        for (int64_t f = s->rptr[k]; f < s->rptr[k + 1]; f++)
            g[s->runk[f]] += s->rval[f] * v;
    }
    for (int64_t k = 0; k < s->nh; k++) {
        double v = s->y[k];
        for (int64_t f = s->hptr[k]; f < s->hptr[k + 1]; f++)
            v += s->hval[f] * c[s->hunk[f]];
        v *= SW_SPLINE_MU;
        for (int64_t f = s->hptr[k]; f < s->hptr[k + 1]; f++)
            g[s->hunk[f]] -= s->hval[f] * v;
    }
}

/* The slope noise variance of one frame (sabre.h, "the noise-aware weight"): third differences
 * s_i - 3 s_(i+1) + 3 s_(i+2) - s_(i+3) of each slope component along every run of four valid
 * lenslets in x and in y. They vanish on slopes that are polynomials of degree <= 2 (the slopes
 * of a wavefront of degree <= 3) and carry 20 sigma^2 of white noise; their median square over
 * 20 times the median of chi^2_1 (0.45494) is the estimate, robust to outliers and to the
 * signal's few rough places. *var: the slopes' variance (each component's mean removed, the
 * two components averaged). Returns -1 when no run of four exists. */
static double slope_noise(sw_sabre_spline *s, const float *slopes, double *var)
{
    const int64_t nlens = (int64_t)s->nx * s->ny;
    int64_t m = 0, nv = 0;
    double sum[2] = {0, 0}, sum2[2] = {0, 0};
    for (int64_t l = 0; l < nlens; l++)
        if (s->valid[l])
            for (int c = 0; c < 2; c++) {
                const double v = slopes[l + c * nlens];
                sum[c] += v;
                sum2[c] += v * v;
                nv += c == 0;
            }
    *var = 0.0;
    for (int c = 0; c < 2 && nv > 0; c++)
        *var += 0.5 * fmax(0.0, sum2[c] / nv - (sum[c] / nv) * (sum[c] / nv));
    for (int32_t j = 0; j + 1 < s->ny; j++)
        for (int32_t i = 0; i + 1 < s->nx; i++) {
            const int64_t l = (int64_t)j * s->nx + i, r = l + 1, u = l + s->nx, ur = u + 1;
            if (!s->valid[l] || !s->valid[r] || !s->valid[u] || !s->valid[ur])
                continue;
            const float *x = slopes, *y = slopes + nlens;
            const double e = 0.5 * ((double)x[u] + x[ur] - x[l] - x[r]) -
                             0.5 * ((double)y[r] + y[ur] - y[l] - y[u]);
            s->work[m++] = (float)(e * e);
        }
    if (m == 0)
        return -1.0;
    double e2 = 0.0;
    for (int64_t k = 0; k < m; k++)
        e2 += s->work[k];
    return e2 / (2.0 * m);
}

/* Rebuilds the normal matrix with soft weight w from the kept rows and factorises it. */
static sw_status refactor(sw_sabre_spline *s, const char *who, double w)
{
    memset(s->ab, 0, (size_t)s->n * (s->kd + 1) * sizeof *s->ab);
    for (int64_t k = 0; k < s->nrow; k++) {
        if (s->rt[k] < 0)
            s->rw[k] = w;
        for (int64_t f = s->rptr[k]; f < s->rptr[k + 1]; f++)
            for (int64_t g = s->rptr[k]; g < s->rptr[k + 1]; g++)
                if (s->runk[g] <= s->runk[f])
                    band_add(s->ab, s->kd, s->runk[f], s->runk[g],
                             s->rw[k] * s->rval[f] * s->rval[g]);
    }
    for (int64_t k = 0; k < s->nh; k++)
        for (int64_t f = s->hptr[k]; f < s->hptr[k + 1]; f++)
            for (int64_t g = s->hptr[k]; g < s->hptr[k + 1]; g++)
                if (s->hunk[g] <= s->hunk[f])
                    band_add(s->ab, s->kd, s->hunk[f], s->hunk[g],
                             SW_SPLINE_MU * s->hval[f] * s->hval[g]);
    s->eps = NAN; /* until the factorisation succeeds */
    const sw_status st =
        sw_sabre_band_factor(s->ctx, who, "the soft weight changed", s->ab, s->n, s->kd);
    if (st == SW_OK)
        s->eps = w;
    return st;
}

/* The noise-aware weight of sabre.h: floor_w + sigma2 / (var - sigma2) on a grid of half decades
 * from floor_w (so that a steady noise level keeps the factorisation), the signal variance
 * var - sigma2 kept >= SW_SABRE_SPLINE_MIN_SIGNAL var. */
static double noise_weight(double floor_w, double sigma2, double var)
{
    if (!(sigma2 > 0.0) || !(var > 0.0))
        return floor_w;
    sigma2 = fmin(sigma2, var); /* the noise ratio at most 1 / SW_SABRE_SPLINE_MIN_SIGNAL */
    const double signal = fmax(var - sigma2, SW_SABRE_SPLINE_MIN_SIGNAL * var);
    const double w = floor_w + sigma2 / signal;
    const double k = floor(2.0 * log10(w / floor_w) + 0.5);
    return floor_w * pow(10.0, 0.5 * k);
}

sw_status sw_sabre_spline_set_noise(sw_sabre_spline *s, double sigma2)
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "global SABRE (degree d): the plan is NULL");
    if (!s->auto_w)
        return sw_fail(s->ctx, SW_EINVAL,
                       "global SABRE (degree %d): the noise sets the smoothing weight only when "
                       "the plan's smoothing is 0 (the default) and d >= 2",
                       (int)s->d);
    if (!(sigma2 >= 0.0 || sigma2 == -1.0) || !isfinite(sigma2))
        return sw_fail(s->ctx, SW_EINVAL,
                       "global SABRE (degree %d): the slope noise variance %g is not >= 0 (or -1: "
                       "estimated per run)",
                       (int)s->d, sigma2);
    s->noise = sigma2;
    return SW_OK;
}

double sw_sabre_spline_smoothing(const sw_sabre_spline *s)
{
    return s && s->d >= 2 ? s->eps : NAN;
}

double sw_sabre_spline_noise(const sw_sabre_spline *s)
{
    return s ? s->last_noise : NAN;
}

/* The penalised least-squares solution for the data `slopes` with the factorisation in use, from
 * c and the multipliers s->y as they are (zero for a fresh start). Each iteration: one solve for
 * the correction from the residual of the rows themselves (the corrected semi-normal equations:
 * the accuracy of a QR of the rows, not of the squared normal matrix), then the multiplier update
 * y += H c; until the correction and |H c| are at rounding level (SW_SPLINE_AL_TOL of `scale`, the
 * largest |pitch slope|, or of the largest |c|). */
static sw_status solve(sw_sabre_spline *s, const char *who, const float *slopes, double scale,
                       double *c)
{
    sw_status st = SW_OK;
    for (int it = 0; it < SW_SPLINE_AL_ITERS; it++) {
        objective_gradient(s, slopes, c, s->rhs);
        st = sw_sabre_band_solve(s->ctx, who, s->n, s->kd, s->ab, s->rhs);
        if (st != SW_OK)
            break;
        double dmax = 0.0, cmax = scale;
        for (int32_t u = 0; u < s->n; u++) {
            c[u] += s->rhs[u];
            dmax = fmax(dmax, fabs(s->rhs[u]));
            cmax = fmax(cmax, fabs(c[u]));
        }
        hard_apply(s, c, s->hc);
        double hmax = 0.0;
        for (int64_t k = 0; k < s->nh; k++) {
            hmax = fmax(hmax, fabs(s->hc[k]));
            s->y[k] += s->hc[k];
        }
        if (it > 0 && dmax <= SW_SPLINE_AL_TOL * cmax && hmax <= SW_SPLINE_AL_TOL * cmax)
            break;
    }
    return st;
}

/* A robust pass's pseudo-observations (sabre.h, "Robust passes") into s->obs: for each valid
 * lenslet the model's slope mu from the solution c, the residual r = sigma - mu, and mu +
 * r min(1, kappa m / |r|), m the lower median of |r| over the valid lenslets. The model's slope
 * is the weighted mean of the lenslet's data rows (over the pitch): for d >= 2 its mean-gradient
 * row; for d = 1 the mean row and the per-triangle rows together, which is the mean of its
 * triangles' gradients, sabre.h's a_v (sw_sabre_global_run's pass, on the same rows). As there,
 * mu is rounded to float before the residual is taken, so that a lenslet within the threshold
 * keeps its slope exactly. */
static void robust_data(sw_sabre_spline *s, const float *slopes, const double *c)
{
    const int64_t nlens = (int64_t)s->nx * s->ny;
    for (int64_t k = 0; k < 2 * nlens; k++)
        s->mu[k] = s->wsum[k] = 0.0;
    for (int64_t k = 0; k < s->nrow; k++) {
        const int64_t t = s->rt[k];
        if (t < 0)
            continue;
        double v = 0.0;
        for (int64_t f = s->rptr[k]; f < s->rptr[k + 1]; f++)
            v += s->rval[f] * c[s->runk[f]];
        s->mu[t] += s->rw[k] * v;
        s->wsum[t] += s->rw[k];
    }
    int64_t nres = 0;
    for (int64_t l = 0; l < nlens; l++) {
        s->obs[l] = s->obs[l + nlens] = 0.0f;
        if (!s->valid[l])
            continue;
        for (int q = 0; q < 2; q++) {
            const int64_t t = l + q * nlens;
            s->obs[t] = (float)(s->wsum[t] > 0.0 ? s->mu[t] / (s->wsum[t] * s->pitch) : 0.0);
        }
        const double rx = (double)slopes[l] - (double)s->obs[l];
        const double ry = (double)slopes[l + nlens] - (double)s->obs[l + nlens];
        s->res[nres++] = sqrt(rx * rx + ry * ry);
    }
    if (nres == 0)
        return;
    const double tau = s->robust_threshold * sw_sabre_lower_median(s->res, nres);
    for (int64_t l = 0; l < nlens; l++) {
        if (!s->valid[l])
            continue;
        const double mx = s->obs[l], my = s->obs[l + nlens];
        const double rx = (double)slopes[l] - mx, ry = (double)slopes[l + nlens] - my;
        const double r = sqrt(rx * rx + ry * ry), f = r > tau ? tau / r : 1.0;
        s->obs[l] = (float)(mx + f * rx);
        s->obs[l + nlens] = (float)(my + f * ry);
    }
}

sw_status sw_sabre_spline_set_robust(sw_sabre_spline *s, int32_t passes, double threshold)
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "global SABRE (degree d): the plan is NULL");
    if (passes < 0 || passes > SW_SABRE_ROBUST_MAX_PASSES)
        return sw_fail(s->ctx, SW_EINVAL,
                       "global SABRE (degree %d): robust passes %d is not in 0..%d", (int)s->d,
                       (int)passes, SW_SABRE_ROBUST_MAX_PASSES);
    if (!(threshold >= 1.0 && threshold <= 1e3))
        return sw_fail(s->ctx, SW_EINVAL,
                       "global SABRE (degree %d): robust threshold %g is not in 1..1000", (int)s->d,
                       threshold);
    s->robust_passes = passes;
    s->robust_threshold = threshold;
    return SW_OK;
}

sw_status sw_sabre_spline_run(sw_sabre_spline *s, const float *slopes, double *coef)
{
    char who[48];
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "global SABRE (degree d): the plan is NULL");
    snprintf(who, sizeof who, "global SABRE (degree %d)", (int)s->d);
    if (!slopes || !coef)
        return sw_fail(s->ctx, SW_EINVAL, "%s: slopes or coef is NULL", who);
    sw_status st = sw_sabre_check_slopes(s->ctx, who, s->nx, s->ny, s->valid, slopes);
    if (st != SW_OK)
        return st;
    const int64_t nlens = (int64_t)s->nx * s->ny;
    if (s->auto_w) {
        double var = 0.0, sigma2 = slope_noise(s, slopes, &var);
        /* the estimate less the curl that the signal itself leaves (sabre.h) */
        sigma2 = fmax(0.0, sigma2 - SW_SABRE_SPLINE_CURL_LEAK * var);
        if (s->noise >= 0.0)
            sigma2 = s->noise;
        s->last_noise = sigma2;
        s->last_var = var;
        const double w = noise_weight(s->eps0, sigma2, var);
        if (!(w == s->eps)) {
            st = refactor(s, who, w);
            if (st != SW_OK)
                return st;
        }
    }
    const size_t bytes = (size_t)(s->n > 0 ? s->n : 1) * sizeof(double);
    double *c = calloc(1, bytes);
    if (!c)
        return sw_fail(s->ctx, SW_ENOMEM, "%s: out of memory", who);
    double scale = 0.0;
    for (int64_t l = 0; l < nlens; l++)
        if (s->valid[l])
            scale = fmax(scale,
                         s->pitch * fmax(fabs((double)slopes[l]), fabs((double)slopes[l + nlens])));
    memset(s->y, 0, (size_t)s->nh * sizeof *s->y);
    st = solve(s, who, slopes, scale, c);
    /* robust passes: the same factorisation (and soft weight), the pseudo-observations as data;
     * each solve starts from the last one's c and multipliers */
    for (int32_t t = 0; t < s->robust_passes && st == SW_OK; t++) {
        robust_data(s, slopes, c);
        st = solve(s, who, s->obs, scale, c);
    }
    if (st == SW_OK) {
        const int64_t nc = sw_sabre_spline_coefficients(s);
        for (int64_t k = 0; k < nc; k++) {
            const int32_t u = s->tunk[k];
            coef[k] = u >= 0 ? c[u] : (u == -1 ? 0.0 : NAN);
        }
    }
    free(c);
    return st;
}

/* The polynomial of triangle t at (x, y): value and gradient. */
static void eval_tri(const sw_sabre_spline *s, const double *coef, int64_t t, double x, double y,
                     double out[3])
{
    double vx[3], vy[3], b[3], gx[3], gy[3], ax[SW_SPLINE_MAX_NB], ay[SW_SPLINE_MAX_NB];
    tri_vertices((int32_t)((t / 4) % s->sx), (int32_t)((t / 4) / s->sx), (int)(t % 4), vx, vy);
    bary(vx, vy, x, y, b, gx, gy);
    grad_coeffs(s->d, b, gx, gy, ax, ay);
    double v = 0.0, dx = 0.0, dy = 0.0;
    const double *c = coef + t * s->nb;
    for (int i = s->d; i >= 0; i--)
        for (int j = s->d - i; j >= 0; j--) {
            const int m = bidx(s->d, i, j);
            v += c[m] * bern(s->d, i, j, s->d - i - j, b);
            dx += c[m] * ax[m];
            dy += c[m] * ay[m];
        }
    out[0] = v;
    out[1] = dx;
    out[2] = dy;
}

double sw_sabre_spline_eval(const sw_sabre_spline *s, const double *coef, double x, double y)
{
    if (!s || !coef || !isfinite(x) || !isfinite(y))
        return NAN;
    int32_t si, sj;
    int q;
    locate(s->sx, s->sy, x, y, &si, &sj, &q);
    double o[3];
    eval_tri(s, coef, 4 * ((int64_t)sj * s->sx + si) + q, x, y, o);
    return o[0];
}

sw_status sw_sabre_spline_eval_triangle(const sw_sabre_spline *s, const double *coef, int64_t t,
                                        double x, double y, double out[3])
{
    if (!s || !coef || !out)
        return sw_fail(s ? s->ctx : NULL, SW_EINVAL, "global SABRE (degree d): NULL argument");
    if (t < 0 || t >= 4 * (int64_t)s->sx * s->sy)
        return sw_fail(s->ctx, SW_EINVAL,
                       "global SABRE (degree %d): triangle %lld is not in 0..%lld", (int)s->d,
                       (long long)t, (long long)(4 * (int64_t)s->sx * s->sy - 1));
    eval_tri(s, coef, t, x, y, out);
    return SW_OK;
}

sw_status sw_sabre_spline_map(const sw_sabre_spline *s, const double *coef, int32_t width,
                              int32_t height, double *out)
{
    if (!s || !coef || !out)
        return sw_fail(s ? s->ctx : NULL, SW_EINVAL, "global SABRE (degree d) map: NULL argument");
    if (width < 1 || height < 1)
        return sw_fail(s->ctx, SW_EINVAL, "global SABRE (degree d) map: %d x %d pixels", (int)width,
                       (int)height);
    for (int32_t k = 0; k < height; k++) {
        const double y = -0.5 + (k + 0.5) * s->ny / height;
        for (int32_t i = 0; i < width; i++) {
            const double x = -0.5 + (i + 0.5) * s->nx / width;
            out[(int64_t)k * width + i] = sw_sabre_spline_eval(s, coef, x, y);
        }
    }
    return SW_OK;
}
