/*
 * Splines on the SABRE lattice (evaluation, corners, maps), global SABRE (one least-squares
 * problem on the whole triangulation) and the Fried zonal baseline; sabre.h documents all three.
 *
 * Global SABRE is seed 002's Eq. (3)-(7) on the whole triangulation T (G = 1): with linear
 * splines (d = 1, r = 0) the null space N of the continuity constraints H is the vertex basis,
 * so the constrained problem (Eq. 3) is an unconstrained least-squares problem in one value per
 * vertex, and the anchor h (Eq. 5) removes the first estimated corner from the unknowns. The
 * regression matrix D (Eq. 4; sabre.h's measurement model) has, per valid lenslet v, the mean row
 * a_v . s = pitch * sigma_v (weight 1 - lambda when the lattice covers v's square) and one row
 * pair per triangle of v, g_t . s = pitch * sigma_v (weight lambda / 8), in lattice units. Eq. (6)
 * is solved through its normal equations Dbar^T Dbar c = Dbar^T sigma.
 *
 * Solving. A mean row couples a lenslet's four centres with its corner neighbours two apart, so
 * centres couple to centres and no square-by-square elimination is left: the normal matrix is
 * band-stored with the corner and centre rows interleaved along the longer side (half-bandwidth
 * about twice the shorter side's corner and centre count), factorised once by LAPACKE_dpbtrf; a
 * run forms the right-hand side and solves with LAPACKE_dpbtrs (once more per robust pass).
 */
#include "core/core_internal.h"
#include "sabre/sabre_internal.h"

#include "spotwave/sabre.h"

#include <lapacke.h>
/* lapacke.h includes <complex.h>, whose macro I would clash with the square indices (I, J) used
 * here as in sabre.h; nothing here is complex. */
#undef I
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A band factor larger than this is refused (the problem is meant for D-SABRE then). */
#define SW_GLOBAL_MAX_BAND_BYTES ((double)4 * 1024 * 1024 * 1024)

/* A Cholesky pivot L_jj^2 below this fraction of the largest diagonal entry means singular. */
#define SW_GLOBAL_PIVOT_TOL 1e-10

/* ------------------------------------------------------------------ splines on the lattice */

int64_t sw_sabre_lattice_values(const sw_sabre_lattice *l)
{
    if (!l || l->sx < 1 || l->sy < 1)
        return 0;
    return (int64_t)(l->sx + 1) * (l->sy + 1) + (int64_t)l->sx * l->sy;
}

double sw_sabre_eval(const sw_sabre_lattice *l, const double *values, double x, double y)
{
    if (!l || !values || l->sx < 1 || l->sy < 1 || !isfinite(x) || !isfinite(y))
        return NAN;
    int64_t idx[3];
    double w[3];
    /* lattice position: corner (I, J) sits at lenslet position (I - offx, J - offy) */
    sw_sabre_locate(l->sx, l->sy, x + l->offx, y + l->offy, idx, w);
    double v = 0.0;
    for (int k = 0; k < 3; k++)
        if (w[k] != 0.0) /* at a vertex or on an edge, a vertex of weight 0 (perhaps NaN: not
                            estimated by the global solve) does not count */
            v += w[k] * values[idx[k]];
    return v;
}

void sw_sabre_eval_corners(const sw_sabre_lattice *l, const double *values, int32_t nx, int32_t ny,
                           double *out)
{
    if (!out || nx < 1 || ny < 1)
        return;
    for (int32_t cy = 0; cy <= ny; cy++)
        for (int32_t cx = 0; cx <= nx; cx++)
            out[(int64_t)cy * (nx + 1) + cx] = sw_sabre_eval(l, values, cx - 0.5, cy - 0.5);
}

sw_status sw_sabre_map(sw_context *ctx, const sw_sabre_lattice *l, const double *values, int32_t nx,
                       int32_t ny, int32_t width, int32_t height, double *out)
{
    if (!l || !values || !out)
        return sw_fail(ctx, SW_EINVAL, "sabre map: lattice, values or output is NULL");
    if (l->sx < 1 || l->sy < 1)
        return sw_fail(ctx, SW_EINVAL, "sabre map: the lattice has %d x %d squares (>= 1 each)",
                       (int)l->sx, (int)l->sy);
    if (nx < 1 || ny < 1)
        return sw_fail(ctx, SW_EINVAL, "sabre map: the array is %d x %d lenslets (>= 1 each)",
                       (int)nx, (int)ny);
    if (width < 1 || height < 1)
        return sw_fail(ctx, SW_EINVAL, "sabre map: the map is %d x %d pixels (>= 1 each)",
                       (int)width, (int)height);
    for (int32_t k = 0; k < height; k++) {
        double y = -0.5 + (k + 0.5) * ny / height;
        for (int32_t i = 0; i < width; i++) {
            double x = -0.5 + (i + 0.5) * nx / width;
            out[(int64_t)k * width + i] = sw_sabre_eval(l, values, x, y);
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ shared helpers */

/* Union-find over vertices (path halving), for the "parts that do not touch" check. */
static int32_t uf_find(int32_t *parent, int32_t a)
{
    while (parent[a] != a) {
        parent[a] = parent[parent[a]];
        a = parent[a];
    }
    return a;
}

static void uf_union(int32_t *parent, int32_t a, int32_t b)
{
    a = uf_find(parent, a);
    b = uf_find(parent, b);
    if (a != b)
        parent[a < b ? b : a] = a < b ? a : b;
}

/*
 * Numbers the unknowns on a cols x rows grid of points: estimated points but the anchor (the
 * first estimated one in row-major order, unk = -1 as for points not estimated), in row-major
 * order or, when the grid is wider than tall, column-major (the band is then the shorter side).
 * Returns the number of unknowns; *anchor = the anchor's row-major index (-1 if none).
 */
static int32_t number_unknowns(int32_t cols, int32_t rows, const uint8_t *est, int32_t *unk,
                               int32_t *anchor)
{
    int32_t total = cols * rows;
    *anchor = -1;
    for (int32_t p = 0; p < total; p++) {
        unk[p] = -1;
        if (est[p] && *anchor < 0)
            *anchor = p;
    }
    int32_t n = 0;
    int by_columns = cols > rows; /* row-major couples rows cols apart, column-major rows */
    int32_t outer = by_columns ? cols : rows, inner = by_columns ? rows : cols;
    for (int32_t o = 0; o < outer; o++)
        for (int32_t i = 0; i < inner; i++) {
            int32_t p = by_columns ? i * cols + o : o * cols + i;
            if (est[p] && p != *anchor)
                unk[p] = n++;
        }
    return n;
}

/* The half-bandwidth needed by a group of points that are all coupled to each other. */
static int32_t group_band(const int32_t *unk, const int32_t *pts, int count, int32_t kd)
{
    int32_t lo = -1, hi = -1;
    for (int j = 0; j < count; j++) {
        int32_t u = unk[pts[j]];
        if (u < 0)
            continue;
        if (lo < 0 || u < lo)
            lo = u;
        if (u > hi)
            hi = u;
    }
    return lo >= 0 && hi - lo > kd ? hi - lo : kd;
}

/* Adds v to the symmetric band matrix (lower storage, LAPACK 'L') at unknowns (i, j), i >= j. */
static inline void band_add(double *ab, int32_t kd, int32_t i, int32_t j, double v)
{
    ab[(size_t)(i - j) + (size_t)j * (kd + 1)] += v;
}

/* Allocates the band for n unknowns and half-bandwidth kd, refusing sizes over the limit. */
sw_status sw_sabre_band_alloc(sw_context *ctx, const char *who, int32_t n, int32_t kd, double **ab)
{
    double bytes = (double)n * (kd + 1) * sizeof(double);
    if (bytes > SW_GLOBAL_MAX_BAND_BYTES)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: the normal matrix would need %.1f GiB of band storage (%d unknowns, "
                       "half-bandwidth %d); use D-SABRE for arrays this large",
                       who, bytes / (1024.0 * 1024 * 1024), (int)n, (int)kd);
    *ab = calloc((size_t)n * (kd + 1), sizeof(double));
    if (!*ab)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory for the normal matrix", who);
    return SW_OK;
}

/* Factorises the band (dpbtrf); a zero or tiny pivot means the system is singular. */
sw_status sw_sabre_band_factor(sw_context *ctx, const char *who, const char *why, double *ab,
                               int32_t n, int32_t kd)
{
    double dmax = 0.0;
    for (int32_t j = 0; j < n; j++)
        if (ab[(size_t)j * (kd + 1)] > dmax)
            dmax = ab[(size_t)j * (kd + 1)];
    lapack_int info = LAPACKE_dpbtrf(LAPACK_COL_MAJOR, 'L', n, kd, ab, kd + 1);
    if (info < 0)
        return sw_fail(ctx, SW_EINTERNAL, "%s: LAPACKE_dpbtrf failed (info %d)", who, (int)info);
    if (info > 0)
        return sw_fail(ctx, SW_EINVAL, "%s: singular normal matrix (%s)", who, why);
    for (int32_t j = 0; j < n; j++) {
        double p = ab[(size_t)j * (kd + 1)];
        if (!(p * p >= SW_GLOBAL_PIVOT_TOL * dmax))
            return sw_fail(ctx, SW_EINVAL, "%s: singular normal matrix (%s)", who, why);
    }
    return SW_OK;
}

/* The checks that open both creates: out given (the caller sets *out to NULL), ctx, the sizes. */
sw_status sw_sabre_check_create(sw_context *ctx, const char *who, int have_out, int32_t nx,
                                int32_t ny, double pitch)
{
    if (!have_out)
        return sw_fail(ctx, SW_EINVAL, "%s: out is NULL", who);
    if (!ctx)
        return sw_fail(ctx, SW_EINVAL, "%s: ctx is NULL", who);
    if (nx < 2 || nx > 4096 || ny < 2 || ny > 4096)
        return sw_fail(ctx, SW_EINVAL, "%s: the array is %d x %d lenslets (2..4096 each)", who,
                       (int)nx, (int)ny);
    if (!isfinite(pitch) || pitch <= 0)
        return sw_fail(ctx, SW_EINVAL, "%s: the pitch %g is not finite and > 0", who, pitch);
    return SW_OK;
}

/* SW_ERANGE when a valid lenslet has a NaN or infinite slope. */
sw_status sw_sabre_check_slopes(sw_context *ctx, const char *who, int32_t nx, int32_t ny,
                                const uint8_t *valid, const float *slopes)
{
    int64_t n = (int64_t)nx * ny;
    for (int64_t l = 0; l < n; l++) {
        if (!valid[l])
            continue;
        for (int c = 0; c < 2; c++) {
            float s = slopes[l + c * n];
            if (!isfinite(s))
                return sw_fail(ctx, SW_ERANGE,
                               "%s: the %s slope of valid lenslet (%d, %d) (index %lld) is %s", who,
                               c ? "y" : "x", (int)(l % nx), (int)(l / nx), (long long)l,
                               isnan(s) ? "NaN" : "infinite");
        }
    }
    return SW_OK;
}

/* ------------------------------------------------------------------ global SABRE */

struct sw_sabre_global {
    sw_context *ctx;
    int32_t nx, ny; /* lenslets; the lattice has sx = nx - 1 by sy = ny - 1 squares          */
    double pitch, lambda;
    int32_t robust_passes;
    double robust_threshold;
    uint8_t *valid; /* nx ny: 1 = lenslet with data (all ones without a mask)                */
    uint8_t *tw;    /* 4 sx sy: valid corners (0, 1, 2) of triangle q of square s: tw[4 s + q] */
    uint8_t *est;   /* nvalues: 1 = vertex of a triangle with data (estimated)               */
    int32_t *unk;   /* nvalues: unknown index, -1 for the anchor and vertices not estimated  */
    int32_t anchor; /* corner index of the anchor                                            */
    int64_t nvalues;
    int32_t n, kd; /* unknowns, half-bandwidth                                               */
    double *ab;    /* the normal matrix's Cholesky factor (band, 'L')                        */
    double *rhs;   /* n                                                                       */
    float *work;   /* 2 nx ny: the robust passes' pseudo-observations                       */
    double *res;   /* nx ny: the robust passes' residual norms                               */
};

/*
 * The band order of the vertices: rows of corners and centres interleaved (corner row J, centre
 * row J, corner row J + 1, ...) along the longer side, so that the band is about twice the
 * shorter side's vertex count (a mean row reaches two corner rows: sabre.h).
 */
static int64_t band_position(int32_t nx, int32_t ny, int64_t v)
{
    const int64_t nc = (int64_t)nx * ny;
    const int32_t sx = nx - 1;
    int32_t I, J, centre = v >= nc;
    if (!centre) {
        I = (int32_t)(v % nx);
        J = (int32_t)(v / nx);
    } else {
        I = (int32_t)((v - nc) % sx);
        J = (int32_t)((v - nc) / sx);
    }
    if (nx <= ny) /* rows of nx corners and nx - 1 centres */
        return (int64_t)J * (2 * nx - 1) + (centre ? nx : 0) + I;
    return (int64_t)I * (2 * ny - 1) + (centre ? ny : 0) + J; /* columns */
}

void sw_sabre_global_params_default(sw_sabre_global_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->pitch = 1.0;
    p->triangle_weight = SW_SABRE_TRIANGLE_WEIGHT;
    p->robust_passes = 0;
    p->robust_threshold = SW_SABRE_ROBUST_THRESHOLD;
}

void sw_sabre_global_destroy(sw_sabre_global *g)
{
    if (!g)
        return;
    free(g->valid);
    free(g->tw);
    free(g->est);
    free(g->unk);
    free(g->ab);
    free(g->rhs);
    free(g->work);
    free(g->res);
    free(g);
}

/* Solves the factorised band system (LAPACKE_dpbtrf's lower factor in ab) for rhs, in place;
 * nothing to do for n = 0. */
sw_status sw_sabre_band_solve(sw_context *ctx, const char *who, int32_t n, int32_t kd,
                              const double *ab, double *rhs)
{
    if (n <= 0)
        return SW_OK;
    lapack_int info = LAPACKE_dpbtrs(LAPACK_COL_MAJOR, 'L', n, kd, 1, ab, kd + 1, rhs, n);
    if (info != 0)
        return sw_fail(ctx, SW_EINTERNAL, "%s: LAPACKE_dpbtrs failed (info %d)", who, (int)info);
    return SW_OK;
}

/* out[l] = 1 for a valid lenslet (no mask: all), 0 otherwise; returns how many are valid. */
int64_t sw_sabre_copy_mask(const uint8_t *valid, int64_t nlens, uint8_t *out)
{
    int64_t nvalid = 0;
    for (int64_t l = 0; l < nlens; l++) {
        out[l] = !valid || valid[l] ? 1 : 0;
        nvalid += out[l];
    }
    return nvalid;
}

/* Refuses a triangulation whose triangles with data fall into parts sharing no vertex. */
static sw_status global_connected(sw_sabre_global *g)
{
    int32_t sx = g->nx - 1, sy = g->ny - 1;
    int32_t *parent = malloc((size_t)g->nvalues * sizeof *parent);
    if (!parent)
        return sw_fail(g->ctx, SW_ENOMEM, "global SABRE: out of memory");
    for (int64_t v = 0; v < g->nvalues; v++)
        parent[v] = (int32_t)v;
    for (int32_t J = 0; J < sy; J++)
        for (int32_t I = 0; I < sx; I++)
            for (int q = 0; q < 4; q++) {
                if (!g->tw[4 * ((int64_t)J * sx + I) + q])
                    continue;
                int64_t idx[3];
                double cx[3], cy[3];
                sw_sabre_triangle(sx, sy, I, J, q, idx, cx, cy);
                uf_union(parent, (int32_t)idx[0], (int32_t)idx[2]);
                uf_union(parent, (int32_t)idx[1], (int32_t)idx[2]);
            }
    /* every estimated vertex lies on a triangle with a valid corner: compare valid lenslets */
    int32_t first = -1, other = -1, root = -1;
    for (int32_t l = 0; l < g->nx * g->ny && other < 0; l++) {
        if (!g->valid[l])
            continue;
        if (first < 0) {
            first = l;
            root = uf_find(parent, l);
        } else if (uf_find(parent, l) != root) {
            other = l;
        }
    }
    free(parent);
    if (other >= 0)
        return sw_fail(g->ctx, SW_EINVAL,
                       "global SABRE: singular: the valid lenslets form parts that do not touch "
                       "(no chain of triangles joins lenslet (%d, %d) to lenslet (%d, %d)), so "
                       "their relative piston is unknown",
                       (int)(other % g->nx), (int)(other / g->nx), (int)(first % g->nx),
                       (int)(first / g->nx));
    return SW_OK;
}

sw_status sw_sabre_global_create(sw_context *ctx, int32_t nx, int32_t ny, double pitch,
                                 const uint8_t *valid, sw_sabre_global **out)
{
    sw_sabre_global_params p;
    sw_sabre_global_params_default(&p);
    p.nx = nx;
    p.ny = ny;
    p.pitch = pitch;
    p.valid = valid;
    return sw_sabre_global_create_params(ctx, &p, out);
}

/* Adds c (a a^T) over the unknowns of the vertices vidx (the anchor and vertices not estimated
 * skipped) to the band. */
static void global_outer(sw_sabre_global *g, const int64_t *vidx, const double *a, int nv, double c)
{
    for (int i = 0; i < nv; i++) {
        const int32_t ui = g->unk[vidx[i]];
        if (ui < 0)
            continue;
        for (int j = 0; j < nv; j++) {
            const int32_t uj = g->unk[vidx[j]];
            if (uj >= 0 && uj <= ui)
                band_add(g->ab, g->kd, ui, uj, c * a[i] * a[j]);
        }
    }
}

sw_status sw_sabre_global_create_params(sw_context *ctx, const sw_sabre_global_params *p,
                                        sw_sabre_global **out)
{
    const char *who = "global SABRE";
    if (out)
        *out = NULL;
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "%s: params is NULL", who);
    const int32_t nx = p->nx, ny = p->ny;
    sw_status st = sw_sabre_check_create(ctx, who, out != NULL, nx, ny, p->pitch);
    if (st != SW_OK)
        return st;
    if (!(p->triangle_weight >= SW_SABRE_TRIANGLE_WEIGHT_MIN && p->triangle_weight <= 1.0))
        return sw_fail(ctx, SW_EINVAL, "%s: triangle_weight %g is not in %g..1", who,
                       p->triangle_weight, SW_SABRE_TRIANGLE_WEIGHT_MIN);
    if (p->robust_passes < 0 || p->robust_passes > SW_SABRE_ROBUST_MAX_PASSES)
        return sw_fail(ctx, SW_EINVAL, "%s: robust_passes %d is not in 0..%d", who,
                       (int)p->robust_passes, SW_SABRE_ROBUST_MAX_PASSES);
    if (!(p->robust_threshold >= 1.0 && p->robust_threshold <= 1e3))
        return sw_fail(ctx, SW_EINVAL, "%s: robust_threshold %g is not in 1..1000", who,
                       p->robust_threshold);
    const int32_t sx = nx - 1, sy = ny - 1;
    const int64_t nlens = (int64_t)nx * ny, nsq = (int64_t)sx * sy;

    sw_sabre_global *g = calloc(1, sizeof *g);
    if (!g)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    g->ctx = ctx;
    g->nx = nx;
    g->ny = ny;
    g->pitch = p->pitch;
    g->lambda = p->triangle_weight;
    g->robust_passes = p->robust_passes;
    g->robust_threshold = p->robust_threshold;
    sw_sabre_lattice lat = {sx, sy, 0, 0};
    g->nvalues = sw_sabre_lattice_values(&lat);
    g->valid = malloc((size_t)nlens);
    g->tw = calloc((size_t)(4 * nsq), 1);
    g->est = calloc((size_t)g->nvalues, 1);
    g->unk = malloc((size_t)g->nvalues * sizeof *g->unk);
    if (g->robust_passes > 0) {
        g->work = malloc((size_t)(2 * nlens) * sizeof *g->work);
        g->res = malloc((size_t)nlens * sizeof *g->res);
    }
    if (!g->valid || !g->tw || !g->est || !g->unk ||
        (g->robust_passes > 0 && (!g->work || !g->res))) {
        sw_sabre_global_destroy(g);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    }
    if (!sw_sabre_copy_mask(p->valid, nlens, g->valid)) {
        sw_sabre_global_destroy(g);
        return sw_fail(ctx, SW_EINVAL, "%s: no valid lenslet", who);
    }

    /* Triangles with data: at least one valid corner (the triangles of the valid lenslets, whose
     * rows are sabre.h's model); their vertices are estimated. */
    for (int32_t J = 0; J < sy; J++)
        for (int32_t I = 0; I < sx; I++)
            for (int q = 0; q < 4; q++) {
                int64_t idx[3];
                double cx[3], cy[3];
                sw_sabre_triangle(sx, sy, I, J, q, idx, cx, cy);
                int w = g->valid[idx[0]] + g->valid[idx[1]]; /* corner index = lenslet index */
                g->tw[4 * ((int64_t)J * sx + I) + q] = (uint8_t)w;
                if (w)
                    g->est[idx[0]] = g->est[idx[1]] = g->est[idx[2]] = 1;
            }

    /* Unknowns: the estimated vertices but the anchor (the first estimated corner), numbered in
     * band order (band_position). */
    {
        int64_t npos = (int64_t)g->nvalues;
        int64_t *at = malloc((size_t)npos * sizeof *at); /* vertex at each band position */
        if (!at) {
            sw_sabre_global_destroy(g);
            return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
        }
        for (int64_t q = 0; q < npos; q++)
            at[q] = -1;
        g->anchor = -1;
        for (int64_t v = 0; v < g->nvalues; v++) {
            g->unk[v] = -1;
            if (v < nlens && g->est[v] && g->anchor < 0)
                g->anchor = (int32_t)v;
            at[band_position(nx, ny, v)] = v;
        }
        g->n = 0;
        for (int64_t q = 0; q < npos; q++) {
            const int64_t v = at[q];
            if (v >= 0 && g->est[v] && v != g->anchor)
                g->unk[v] = g->n++;
        }
        free(at);
    }
    g->kd = 0;
    for (int64_t l = 0; l < nlens; l++) {
        if (!g->valid[l])
            continue;
        int64_t vidx[9];
        double ax[9], ay[9];
        int nt;
        const int nv =
            sw_sabre_mean_row(sx, sy, (int32_t)(l % nx), (int32_t)(l / nx), vidx, ax, ay, &nt);
        int32_t lo = INT32_MAX, hi = -1;
        for (int j = 0; j < nv; j++) {
            const int32_t u = g->unk[vidx[j]];
            if (u < 0)
                continue;
            lo = u < lo ? u : lo;
            hi = u > hi ? u : hi;
        }
        if (hi >= 0 && hi - lo > g->kd)
            g->kd = hi - lo;
    }
    g->rhs = malloc((size_t)(g->n > 0 ? g->n : 1) * sizeof *g->rhs);
    st = g->rhs ? sw_sabre_band_alloc(ctx, who, g->n, g->kd, &g->ab)
                : sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    if (st == SW_OK)
        st = global_connected(g);
    if (st != SW_OK) {
        sw_sabre_global_destroy(g);
        return st;
    }

    /* The normal matrix (sabre.h): every valid lenslet's mean rows (weight 1 - lambda when the
     * lattice covers its square, else none) and its triangles' rows (lambda / 8 each). */
    for (int64_t l = 0; l < nlens; l++) {
        if (!g->valid[l])
            continue;
        const int32_t x = (int32_t)(l % nx), y = (int32_t)(l / nx);
        int64_t vidx[9];
        double ax[9], ay[9];
        int nt;
        const int nv = sw_sabre_mean_row(sx, sy, x, y, vidx, ax, ay, &nt);
        const double mw = sw_sabre_mean_weight(nt, g->lambda);
        global_outer(g, vidx, ax, nv, mw);
        global_outer(g, vidx, ay, nv, mw);
        int32_t sqi[8], sqj[8];
        int q[8];
        sw_sabre_corner_triangles(sx, sy, x, y, sqi, sqj, q);
        for (int t = 0; t < nt; t++) {
            int64_t idx[3];
            double cx[3], cy[3];
            sw_sabre_triangle(sx, sy, sqi[t], sqj[t], q[t], idx, cx, cy);
            global_outer(g, idx, cx, 3, sw_sabre_tri_weight(nt, g->lambda));
            global_outer(g, idx, cy, 3, sw_sabre_tri_weight(nt, g->lambda));
        }
    }
    if (g->n > 0) {
        st = sw_sabre_band_factor(ctx, who, "the valid lenslets form parts that do not touch",
                                  g->ab, g->n, g->kd);
        if (st != SW_OK) {
            sw_sabre_global_destroy(g);
            return st;
        }
    }
    *out = g;
    return SW_OK;
}

void sw_sabre_global_lattice(const sw_sabre_global *g, sw_sabre_lattice *out)
{
    if (!g || !out)
        return;
    out->sx = g->nx - 1;
    out->sy = g->ny - 1;
    out->offx = out->offy = 0;
}

/* One solve: the right-hand side sum_v dw_v pitch (sigma_vx a_vx + sigma_vy a_vy) over the valid
 * lenslets (sabre.h, sw_sabre_data_weight), the factorised band, the values (0 at the anchor, NaN
 * where not estimated). */
static sw_status global_solve(sw_sabre_global *g, const float *slopes, double *values)
{
    const int32_t nx = g->nx, sx = g->nx - 1, sy = g->ny - 1;
    const int64_t nlens = (int64_t)nx * g->ny;
    memset(g->rhs, 0, (size_t)g->n * sizeof *g->rhs);
    for (int64_t l = 0; l < nlens; l++) {
        if (!g->valid[l])
            continue;
        int64_t vidx[9];
        double ax[9], ay[9];
        int nt;
        const int nv =
            sw_sabre_mean_row(sx, sy, (int32_t)(l % nx), (int32_t)(l / nx), vidx, ax, ay, &nt);
        const double dw = sw_sabre_data_weight(nt, g->lambda);
        const double px = dw * g->pitch * (double)slopes[l];
        const double py = dw * g->pitch * (double)slopes[l + nlens];
        for (int j = 0; j < nv; j++) {
            const int32_t u = g->unk[vidx[j]];
            if (u >= 0)
                g->rhs[u] += ax[j] * px + ay[j] * py;
        }
    }
    if (sw_sabre_band_solve(g->ctx, "global SABRE", g->n, g->kd, g->ab, g->rhs) != SW_OK)
        return SW_EINTERNAL;
    for (int64_t v = 0; v < g->nvalues; v++)
        values[v] = g->unk[v] >= 0 ? g->rhs[g->unk[v]] : (g->est[v] ? 0.0 : NAN);
    return SW_OK;
}

/* The element of rank floor((n - 1) / 2) of a[0..n-1] (the lower median), by quickselect; a is
 * reordered. n >= 1. */
double sw_sabre_lower_median(double *a, int64_t n)
{
    int64_t lo = 0, hi = n - 1;
    const int64_t want = (n - 1) / 2;
    while (lo < hi) {
        const double pivot = a[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot)
                i++;
            while (a[j] > pivot)
                j--;
            if (i <= j) {
                const double t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            break; /* a[j + 1 .. i - 1] all equal the pivot */
    }
    return a[want];
}

/* The robust pass's pseudo-observations (sabre.h): for each valid lenslet the model's slope
 * mu = a_v . s / pitch from the last solve, the residual r = sigma - mu, and work = mu +
 * r min(1, kappa m / |r|), m the lower median of |r| over the valid lenslets. */
static void global_robust_data(sw_sabre_global *g, const float *slopes, const double *values)
{
    const int32_t nx = g->nx, sx = g->nx - 1, sy = g->ny - 1;
    const int64_t nlens = (int64_t)nx * g->ny;
    int64_t nres = 0;
    for (int64_t l = 0; l < nlens; l++) {
        g->work[l] = g->work[l + nlens] = 0.0f;
        if (!g->valid[l])
            continue;
        int64_t vidx[9];
        double ax[9], ay[9];
        int nt;
        const int nv =
            sw_sabre_mean_row(sx, sy, (int32_t)(l % nx), (int32_t)(l / nx), vidx, ax, ay, &nt);
        double mx = 0.0, my = 0.0;
        for (int j = 0; j < nv; j++) {
            mx += ax[j] * values[vidx[j]];
            my += ay[j] * values[vidx[j]];
        }
        g->work[l] = (float)(mx / g->pitch); /* mu, for now */
        g->work[l + nlens] = (float)(my / g->pitch);
        const double rx = (double)slopes[l] - (double)g->work[l];
        const double ry = (double)slopes[l + nlens] - (double)g->work[l + nlens];
        g->res[nres++] = sqrt(rx * rx + ry * ry);
    }
    if (nres == 0)
        return;
    const double tau = g->robust_threshold * sw_sabre_lower_median(g->res, nres);
    for (int64_t l = 0; l < nlens; l++) {
        if (!g->valid[l])
            continue;
        const double mx = g->work[l], my = g->work[l + nlens];
        const double rx = (double)slopes[l] - mx, ry = (double)slopes[l + nlens] - my;
        const double r = sqrt(rx * rx + ry * ry), f = r > tau ? tau / r : 1.0;
        g->work[l] = (float)(mx + f * rx);
        g->work[l + nlens] = (float)(my + f * ry);
    }
}

sw_status sw_sabre_global_run(sw_sabre_global *g, const float *slopes, double *values)
{
    const char *who = "global SABRE";
    if (!g)
        return sw_fail(NULL, SW_EINVAL, "%s: the plan is NULL", who);
    if (!slopes || !values)
        return sw_fail(g->ctx, SW_EINVAL, "%s: slopes or values is NULL", who);
    sw_status st = sw_sabre_check_slopes(g->ctx, who, g->nx, g->ny, g->valid, slopes);
    if (st != SW_OK)
        return st;
    st = global_solve(g, slopes, values);
    for (int32_t t = 0; t < g->robust_passes && st == SW_OK; t++) {
        global_robust_data(g, slopes, values);
        st = global_solve(g, g->work, values);
    }
    return st;
}

/* ------------------------------------------------------------------ Fried */

struct sw_fried {
    sw_context *ctx;
    int32_t nx, ny; /* lenslets; (nx + 1)(ny + 1) corners                                    */
    double pitch, reg;
    uint8_t *valid; /* nx ny                                                                  */
    uint8_t *est;   /* corners: 1 = corner of a valid lenslet                                 */
    int32_t *unk;   /* corners: unknown index, -1 for the anchor and corners not estimated     */
    int32_t n, kd;
    double *ab; /* Cholesky factor of M^T M + reg L^T L (band, 'L')                           */
    double *rhs;
};

/* Corners a = (ix, iy), b = (ix+1, iy), d = (ix+1, iy+1), e = (ix, iy+1) of lenslet (ix, iy)
 * and the Fried model's coefficients: pitch sx = (-a + b + d - e) / 2, pitch sy =
 * (-a - b + d + e) / 2 (sabre.h). */
static const double fried_cx[4] = {-0.5, 0.5, 0.5, -0.5};
static const double fried_cy[4] = {-0.5, -0.5, 0.5, 0.5};

static void lenslet_corners(int32_t nx, int32_t ix, int32_t iy, int32_t pts[4])
{
    pts[0] = iy * (nx + 1) + ix;
    pts[1] = pts[0] + 1;
    pts[2] = pts[1] + (nx + 1);
    pts[3] = pts[0] + (nx + 1);
}

/* The 5-point Laplacian at corner (cx, cy): centre, then -x, +x, -y, +y; weights -4, 1, 1, 1, 1.
 * Returns 1 when the corner and its four neighbours are estimated (a regulariser row). */
static int laplacian_points(const sw_fried *f, int32_t cx, int32_t cy, int32_t pts[5])
{
    int32_t w = f->nx + 1;
    if (cx < 1 || cy < 1 || cx >= f->nx || cy >= f->ny)
        return 0;
    pts[0] = cy * w + cx;
    pts[1] = pts[0] - 1;
    pts[2] = pts[0] + 1;
    pts[3] = pts[0] - w;
    pts[4] = pts[0] + w;
    for (int j = 0; j < 5; j++)
        if (!f->est[pts[j]])
            return 0;
    return 1;
}

static const double lap_w[5] = {-4, 1, 1, 1, 1};

void sw_fried_destroy(sw_fried *f)
{
    if (!f)
        return;
    free(f->valid);
    free(f->est);
    free(f->unk);
    free(f->ab);
    free(f->rhs);
    free(f);
}

/* Refuses valid lenslets in parts that share no corner and no regulariser row. */
static sw_status fried_connected(sw_fried *f, int32_t anchor)
{
    int32_t ncorner = (f->nx + 1) * (f->ny + 1);
    int32_t *parent = malloc((size_t)ncorner * sizeof *parent);
    if (!parent)
        return sw_fail(f->ctx, SW_ENOMEM, "Fried: out of memory");
    for (int32_t c = 0; c < ncorner; c++)
        parent[c] = c;
    for (int32_t iy = 0; iy < f->ny; iy++)
        for (int32_t ix = 0; ix < f->nx; ix++) {
            if (!f->valid[iy * f->nx + ix])
                continue;
            int32_t pts[4];
            lenslet_corners(f->nx, ix, iy, pts);
            for (int j = 1; j < 4; j++)
                uf_union(parent, pts[0], pts[j]);
        }
    for (int32_t cy = 0; cy <= f->ny; cy++)
        for (int32_t cx = 0; cx <= f->nx; cx++) {
            int32_t pts[5];
            if (laplacian_points(f, cx, cy, pts))
                for (int j = 1; j < 5; j++)
                    uf_union(parent, pts[0], pts[j]);
        }
    int32_t root = uf_find(parent, anchor), other = -1;
    for (int32_t c = 0; c < ncorner && other < 0; c++)
        if (f->est[c] && uf_find(parent, c) != root)
            other = c;
    free(parent);
    if (other >= 0)
        return sw_fail(f->ctx, SW_EINVAL,
                       "Fried: singular: the valid lenslets form parts that do not touch (corner "
                       "(%d, %d) is not linked to corner (%d, %d)), so their relative piston is "
                       "unknown",
                       (int)(other % (f->nx + 1)), (int)(other / (f->nx + 1)),
                       (int)(anchor % (f->nx + 1)), (int)(anchor / (f->nx + 1)));
    return SW_OK;
}

sw_status sw_fried_create(sw_context *ctx, int32_t nx, int32_t ny, double pitch,
                          const uint8_t *valid, double reg, sw_fried **out)
{
    const char *who = "Fried";
    if (out)
        *out = NULL;
    sw_status st = sw_sabre_check_create(ctx, who, out != NULL, nx, ny, pitch);
    if (st != SW_OK)
        return st;
    if (!isfinite(reg) || reg < 0)
        return sw_fail(ctx, SW_EINVAL, "%s: the regulariser weight %g is not finite and >= 0", who,
                       reg);
    if (reg == 0)
        return sw_fail(ctx, SW_EINVAL,
                       "%s: singular: with reg = 0 the waffle mode is not determined by the slopes "
                       "(use reg > 0, e.g. 1e-3)",
                       who);
    int32_t w = nx + 1, ncorner = (nx + 1) * (ny + 1);
    int64_t nlens = (int64_t)nx * ny;

    sw_fried *f = calloc(1, sizeof *f);
    if (!f)
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    f->ctx = ctx;
    f->nx = nx;
    f->ny = ny;
    f->pitch = pitch;
    f->reg = reg;
    f->valid = malloc((size_t)nlens);
    f->est = calloc((size_t)ncorner, 1);
    f->unk = malloc((size_t)ncorner * sizeof *f->unk);
    if (!f->valid || !f->est || !f->unk) {
        sw_fried_destroy(f);
        return sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    }
    if (!sw_sabre_copy_mask(valid, nlens, f->valid)) {
        sw_fried_destroy(f);
        return sw_fail(ctx, SW_EINVAL, "%s: no valid lenslet", who);
    }
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            if (!f->valid[iy * nx + ix])
                continue;
            int32_t pts[4];
            lenslet_corners(nx, ix, iy, pts);
            for (int j = 0; j < 4; j++)
                f->est[pts[j]] = 1;
        }
    int32_t anchor;
    f->n = number_unknowns(w, ny + 1, f->est, f->unk, &anchor);
    f->kd = 0;
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            int32_t pts[4];
            lenslet_corners(nx, ix, iy, pts);
            if (f->valid[iy * nx + ix])
                f->kd = group_band(f->unk, pts, 4, f->kd);
        }
    for (int32_t cy = 0; cy <= ny; cy++)
        for (int32_t cx = 0; cx <= nx; cx++) {
            int32_t pts[5];
            if (laplacian_points(f, cx, cy, pts))
                f->kd = group_band(f->unk, pts, 5, f->kd);
        }
    f->rhs = malloc((size_t)(f->n > 0 ? f->n : 1) * sizeof *f->rhs);
    st = f->rhs ? sw_sabre_band_alloc(ctx, who, f->n, f->kd, &f->ab)
                : sw_fail(ctx, SW_ENOMEM, "%s: out of memory", who);
    if (st == SW_OK)
        st = fried_connected(f, anchor);
    if (st != SW_OK) {
        sw_fried_destroy(f);
        return st;
    }

    /* M^T M: two rows per valid lenslet; reg L^T L: one row per regulariser corner. */
    for (int32_t iy = 0; iy < ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            if (!f->valid[iy * nx + ix])
                continue;
            int32_t pts[4];
            lenslet_corners(nx, ix, iy, pts);
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) {
                    int32_t ui = f->unk[pts[i]], uj = f->unk[pts[j]];
                    if (ui >= 0 && uj >= 0 && uj <= ui)
                        band_add(f->ab, f->kd, ui, uj,
                                 fried_cx[i] * fried_cx[j] + fried_cy[i] * fried_cy[j]);
                }
        }
    for (int32_t cy = 0; cy <= ny; cy++)
        for (int32_t cx = 0; cx <= nx; cx++) {
            int32_t pts[5];
            if (!laplacian_points(f, cx, cy, pts))
                continue;
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 5; j++) {
                    int32_t ui = f->unk[pts[i]], uj = f->unk[pts[j]];
                    if (ui >= 0 && uj >= 0 && uj <= ui)
                        band_add(f->ab, f->kd, ui, uj, reg * lap_w[i] * lap_w[j]);
                }
        }
    if (f->n > 0) {
        st = sw_sabre_band_factor(ctx, who,
                                  "the slopes and the regulariser leave a mode free: too few valid "
                                  "lenslets, or parts joined only at corners?",
                                  f->ab, f->n, f->kd);
        if (st != SW_OK) {
            sw_fried_destroy(f);
            return st;
        }
    }
    *out = f;
    return SW_OK;
}

sw_status sw_fried_run(sw_fried *f, const float *slopes, double *phase)
{
    const char *who = "Fried";
    if (!f)
        return sw_fail(NULL, SW_EINVAL, "%s: the plan is NULL", who);
    if (!slopes || !phase)
        return sw_fail(f->ctx, SW_EINVAL, "%s: slopes or phase is NULL", who);
    sw_status st = sw_sabre_check_slopes(f->ctx, who, f->nx, f->ny, f->valid, slopes);
    if (st != SW_OK)
        return st;
    int32_t nx = f->nx, ncorner = (f->nx + 1) * (f->ny + 1);
    int64_t nlens = (int64_t)f->nx * f->ny;

    /* M^T (pitch s); the regulariser rows have zero data. */
    memset(f->rhs, 0, (size_t)f->n * sizeof *f->rhs);
    for (int32_t iy = 0; iy < f->ny; iy++)
        for (int32_t ix = 0; ix < nx; ix++) {
            int64_t l = (int64_t)iy * nx + ix;
            if (!f->valid[l])
                continue;
            double gx = f->pitch * (double)slopes[l], gy = f->pitch * (double)slopes[l + nlens];
            int32_t pts[4];
            lenslet_corners(nx, ix, iy, pts);
            for (int i = 0; i < 4; i++)
                if (f->unk[pts[i]] >= 0)
                    f->rhs[f->unk[pts[i]]] += fried_cx[i] * gx + fried_cy[i] * gy;
        }
    if (sw_sabre_band_solve(f->ctx, who, f->n, f->kd, f->ab, f->rhs) != SW_OK)
        return SW_EINTERNAL;
    for (int32_t c = 0; c < ncorner; c++)
        phase[c] = f->unk[c] >= 0 ? f->rhs[f->unk[c]] : (f->est[c] ? 0.0 : NAN);
    return SW_OK;
}

double sw_fried_eval(int32_t nx, int32_t ny, const double *phase, double x, double y)
{
    if (!phase || nx < 1 || ny < 1 || !isfinite(x) || !isfinite(y))
        return NAN;
    /* corner (cx, cy) sits at (cx - 1/2, cy - 1/2): corner-grid coordinates u = x + 1/2 */
    double u = x + 0.5, v = y + 0.5;
    double fu = floor(u), fv = floor(v);
    int32_t i = fu < 0 ? 0 : (fu > nx - 1 ? nx - 1 : (int32_t)fu);
    int32_t j = fv < 0 ? 0 : (fv > ny - 1 ? ny - 1 : (int32_t)fv);
    double tu = u - i, tv = v - j; /* outside [0, 1] off the grid: the cell's bilinear extended */
    const double *p0 = phase + (int64_t)j * (nx + 1) + i, *p1 = p0 + (nx + 1);
    return (1 - tu) * (1 - tv) * p0[0] + tu * (1 - tv) * p0[1] + (1 - tu) * tv * p1[0] +
           tu * tv * p1[1];
}
