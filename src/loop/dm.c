/*
 * The deformable mirror of the loop stage (loop.h): the influence profile, the shaper (the
 * mirror's surface on a grid, seed 002 Eq. 12) and the least-squares projection of a linear
 * spline onto the actuators (seed 002 Eq. 13, and Eq. 14-15 for one D-SABRE window).
 *
 * Shaper. The influence functions are separable, F_a(x, y) = f(x - x_a) f(y - y_a), so on a grid
 * the surface of Eq. 12 is out = Fy U Fx^T with Fx[i][a] = f(x_i - x_a) and Fy[k][b] =
 * f(y_k - y_b) built once: two sgemm per run (OpenBLAS here, cuBLAS in dm_cuda.cu).
 *
 * Projector. P = (F^T F + lambda I)^-1 F^T B (Eq. 13 / 15 with a Tikhonov term) is built in
 * double from the fitting points one at a time: each point's row of F holds only the actuators
 * whose profile is at least SW_DM_TINY in x and in y (a sparse row), its row of B the three
 * barycentric weights of the spline's triangle there; the lower triangle of N = F^T F and the
 * columns of R = F^T B are accumulated, then LAPACKE_dposv solves N P = R.
 */
#include "loop/loop_internal.h"
#include "sabre/sabre_internal.h"

#include <cblas.h>
#include <lapacke.h>
/* lapacke.h includes <complex.h>, whose macro I would clash with the square index names of
 * sabre.h; nothing here is complex. */
#undef I
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef SW_HAVE_CUDA
#include "core/core_cuda.h"
#endif

/* Influence below this (in x or in y) is left out of the projector's F. */
#define SW_DM_TINY 1e-9
/* Largest actuator count of a projector; its dense N is then 2 GiB of doubles. */
#define SW_PROJ_MAX_ACT 16384
/* Largest dense R = F^T B (nact x nvalues doubles) a projector builds. */
#define SW_PROJ_MAX_R_BYTES ((double)4 * 1024 * 1024 * 1024)

/* ================================================================== influence profile */

const char *sw_dm_influence_string(sw_dm_influence f)
{
    switch (f) {
    case SW_DM_GAUSSIAN: return "gaussian";
    case SW_DM_BEZIER: return "bezier";
    }
    return "unknown";
}

sw_status sw_dm_influence_parse(const char *text, sw_dm_influence *out)
{
    if (!text || !out)
        return sw_fail(NULL, SW_EINVAL, "dm: NULL %s", !text ? "text" : "out");
    for (int i = 0; i <= (int)SW_DM_BEZIER; i++)
        if (strcasecmp(text, sw_dm_influence_string((sw_dm_influence)i)) == 0) {
            *out = (sw_dm_influence)i;
            return SW_OK;
        }
    return sw_fail(NULL, SW_EINVAL, "dm: unknown influence function '%s' (gaussian or bezier)",
                   text);
}

/*
 * OOMAO's "monotonic" influence function (Conan & Correia, OOMAO, influenceFunction.m; see
 * loop.h): the curve (X, Y) of two cubic Bezier segments through the control points
 *     (0, 1), (0.2, 1), (0.4, 0.7), (0.6, 0.4)   and   (0.6, 0.4), (0.8, 0.1), (1, 0), (2, 0),
 * in its x scaled so that it passes through (1 pitch, c). In power form, with tau in [0, 1]:
 *     first:  X = 0.6 tau,                  Y = 1 - 0.9 tau^2 + 0.3 tau^3
 *     second: X = 0.6 + 0.6 tau + 0.8 tau^3,  Y = (1 - tau)^2 (0.4 - 0.1 tau)
 * (the first segment's control abscissae are equally spaced, so its X is linear). The second X
 * is inverted in closed form: tau^3 + 0.75 tau = q, q = (X - 0.6) / 0.8, has the one real root
 * tau = sinh(asinh(4 q) / 3) (as sinh 3a = 3 sinh a + 4 sinh^3 a).
 */
static double oomao_y(double x)
{
    if (x <= 0.6) {
        const double t = x / 0.6;
        return 1.0 - t * t * (0.9 - 0.3 * t);
    }
    if (x >= 2.0)
        return 0.0;
    const double t = sinh(asinh(5.0 * (x - 0.6)) / 3.0), u = 1.0 - t;
    return u * u * (0.4 - 0.1 * t);
}

/* The curve's x where its y is c, 0 < c < 1 (Y falls monotonically from 1 at x = 0 to 0 at
 * x = 2), from the cubics' trigonometric roots:
 *   c >= 0.4, first segment: tau^3 - 3 tau^2 + k = 0, k = 10 (1 - c) / 3; with tau = 1 + z,
 *     z^3 - 3 z + (k - 2) = 0, whose root in [-1, 0] is 2 cos(acos(1 - k / 2) / 3 - 2 pi / 3);
 *   c < 0.4, second segment: with u = 1 - tau, u^3 + 3 u^2 - 10 c = 0; with u = z - 1,
 *     z^3 - 3 z + (2 - 10 c) = 0, whose root in [1, 2] is 2 cos(acos(5 c - 1) / 3). */
static double oomao_scale(double c)
{
    const double pi = 3.14159265358979323846;
    if (c >= 0.4) {
        const double k = 10.0 * (1.0 - c) / 3.0;
        return 0.6 * (1.0 + 2.0 * cos(acos(1.0 - 0.5 * k) / 3.0 - 2.0 * pi / 3.0));
    }
    const double t = 2.0 - 2.0 * cos(acos(5.0 * c - 1.0) / 3.0);
    return 0.6 + 0.6 * t + 0.8 * t * t * t;
}

double sw_dm_profile(sw_dm_influence f, double coupling, double r)
{
    if (!(coupling > 0.0 && coupling < 1.0) || isnan(r))
        return NAN;
    const double t = fabs(r);
    switch (f) {
    case SW_DM_GAUSSIAN: return pow(coupling, t * t); /* c^(r^2) */
    case SW_DM_BEZIER: {
        if (t == 0.0)
            return 1.0;
        if (t == 1.0)
            return coupling; /* exactly, rather than to the bisection's last bit */
        const double x = t * oomao_scale(coupling);
        return x >= 2.0 ? 0.0 : oomao_y(x);
    }
    }
    return NAN;
}

/* |r| beyond which the profile is below SW_DM_TINY (a bound: the profile is monotone in |r|). */
static double profile_reach(sw_dm_influence f, double coupling)
{
    if (f == SW_DM_BEZIER)
        return 2.0 / oomao_scale(coupling);       /* zero from there on */
    return sqrt(log(SW_DM_TINY) / log(coupling)); /* c^(r^2) = tiny */
}

void sw_dm_params_default(sw_dm_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->nx = 0;
    p->ny = 0;
    p->influence = SW_DM_GAUSSIAN;
    p->coupling = 0.3;
}

static int influence_ok(sw_dm_influence f)
{
    return f == SW_DM_GAUSSIAN || f == SW_DM_BEZIER;
}

static int coupling_ok(double c)
{
    return c > 0.0 && c < 1.0; /* false for NaN */
}

sw_status sw_dm_check(sw_context *ctx, const sw_dm_params *p)
{
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "dm: NULL parameters");
    if (p->nx < 1 || p->nx > 1024 || p->ny < 1 || p->ny > 1024)
        return sw_fail(ctx, SW_EINVAL,
                       "dm: the lenslet array is %d x %d (1..1024 per side; the actuators are "
                       "(nx + 1) x (ny + 1))",
                       (int)p->nx, (int)p->ny);
    if (!influence_ok(p->influence))
        return sw_fail(ctx, SW_EINVAL, "dm: unknown influence function %d", (int)p->influence);
    if (!coupling_ok(p->coupling))
        return sw_fail(ctx, SW_EINVAL, "dm: coupling %g is not in (0, 1)", p->coupling);
    return SW_OK;
}

sw_lattice_grid sw_lattice_grid_lenslets(int32_t nx, int32_t ny, int32_t q, int32_t margin)
{
    sw_lattice_grid g;
    memset(&g, 0, sizeof g);
    const int64_t w = (int64_t)(nx > ny ? nx : ny) * q + 2 * (int64_t)margin;
    if (nx < 1 || ny < 1 || q < 1 || margin < 0 || w > INT32_MAX)
        return g; /* width 0: refused by whoever uses it */
    g.width = nx * q + 2 * margin;
    g.height = ny * q + 2 * margin;
    g.step = 1.0 / q;
    g.x0 = -0.5 + (0.5 - margin) / q;
    g.y0 = g.x0;
    return g;
}

/* ================================================================== shaper (Eq. 12) */

void sw_dm_shaper_destroy(sw_dm_shaper *s)
{
    if (!s)
        return;
#ifdef SW_HAVE_CUDA
    sw_dm_shaper_gpu_destroy(s);
#endif
    free(s->Fx);
    free(s->Fy);
    free(s->T);
    free(s);
}

/* M[i n + a] = f(p0 + i step - (a - 1/2)): the profile from sample i to actuator a (at a - 1/2). */
static void fill_profile(sw_dm_influence f, double c, int32_t count, double p0, double step,
                         int32_t n, float *M)
{
    for (int32_t i = 0; i < count; i++) {
        const double p = p0 + i * step;
        for (int32_t a = 0; a < n; a++)
            M[(int64_t)i * n + a] = (float)sw_dm_profile(f, c, p - (a - 0.5));
    }
}

sw_status sw_dm_shaper_create(sw_context *ctx, const sw_dm_params *dm, const sw_lattice_grid *g,
                              sw_dm_shaper **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "dm shaper: NULL output");
    *out = NULL;
    if (!dm || !g)
        return sw_fail(ctx, SW_EINVAL, "dm shaper: NULL %s", !dm ? "mirror" : "grid");
    sw_status st = sw_dm_check(ctx, dm);
    if (st != SW_OK)
        return st;
    if (g->width < 1 || g->width > 8192 || g->height < 1 || g->height > 8192)
        return sw_fail(ctx, SW_EINVAL, "dm shaper: the grid is %d x %d samples (1..8192 per side)",
                       (int)g->width, (int)g->height);
    if (!(isfinite(g->step) && g->step > 0.0) || !isfinite(g->x0) || !isfinite(g->y0))
        return sw_fail(ctx, SW_EINVAL,
                       "dm shaper: the grid's step (%g) must be finite and > 0 and its origin "
                       "(%g, %g) finite",
                       g->step, g->x0, g->y0);

    sw_dm_shaper *s = (sw_dm_shaper *)calloc(1, sizeof *s);
    if (!s)
        return sw_fail(ctx, SW_ENOMEM, "dm shaper: out of memory");
    s->ctx = ctx;
    s->dm = *dm;
    s->grid = *g;
    s->nax = dm->nx + 1;
    s->nay = dm->ny + 1;
    s->Fx = (float *)malloc((size_t)g->width * s->nax * sizeof(float));
    s->Fy = (float *)malloc((size_t)g->height * s->nay * sizeof(float));
    s->T = (float *)malloc((size_t)s->nay * g->width * sizeof(float));
    if (!s->Fx || !s->Fy || !s->T) {
        sw_dm_shaper_destroy(s);
        return sw_fail(ctx, SW_ENOMEM, "dm shaper: out of memory for a %d x %d grid", (int)g->width,
                       (int)g->height);
    }
    fill_profile(dm->influence, dm->coupling, g->width, g->x0, g->step, s->nax, s->Fx);
    fill_profile(dm->influence, dm->coupling, g->height, g->y0, g->step, s->nay, s->Fy);

#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        st = sw_dm_shaper_gpu_create(s);
        if (st != SW_OK) {
            sw_dm_shaper_destroy(s);
            return st;
        }
    }
#endif
    *out = s;
    return SW_OK;
}

sw_status sw_dm_shaper_run(sw_dm_shaper *s, const float *commands, sw_memory memory, float *out)
{
    if (!s)
        return sw_fail(NULL, SW_EINVAL, "dm shaper: NULL plan");
    sw_context *ctx = s->ctx;
    if (!commands || !out)
        return sw_fail(ctx, SW_EINVAL, "dm shaper: NULL %s", !commands ? "commands" : "output");
    if (memory != SW_MEM_HOST && memory != SW_MEM_PINNED && memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "dm shaper: unknown memory kind %d", (int)memory);
#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA)
        return sw_dm_shaper_gpu_run(s, commands, memory, out);
#endif
    if (memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL,
                       "dm shaper: device memory given to a plan on the CPU backend (use host or "
                       "pinned memory)");
    const int32_t W = s->grid.width, H = s->grid.height;
    /* T = U Fx^T (nay x width), then out = Fy T (height x width): Eq. 12, separable */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->nay, W, s->nax, 1.0f, commands, s->nax,
                s->Fx, s->nax, 0.0f, s->T, W);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, H, W, s->nay, 1.0f, s->Fy, s->nay, s->T,
                W, 0.0f, out, W);
    return SW_OK;
}

/* ================================================================== projector (Eq. 13-15) */

void sw_projector_params_default(sw_projector_params *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->influence = SW_DM_GAUSSIAN;
    p->coupling = 0.3;
    p->samples = 4;
    p->square_mask = NULL;
    p->regularisation = 1e-6;
}

void sw_projector_params_global(sw_projector_params *p, const sw_dm_params *dm,
                                const sw_sabre_lattice *lattice)
{
    if (!p)
        return;
    sw_projector_params_default(p);
    if (lattice)
        p->lattice = *lattice;
    if (!dm)
        return;
    p->influence = dm->influence;
    p->coupling = dm->coupling;
    /* the Fried actuators of the real array: corner (cx, cy) at (cx - 1/2, cy - 1/2) */
    p->nax = dm->nx + 1;
    p->nay = dm->ny + 1;
    p->ax0 = -0.5;
    p->ay0 = -0.5;
}

void sw_projector_params_window(sw_projector_params *p, const sw_dm_params *dm, int32_t w)
{
    if (!p)
        return;
    sw_projector_params_default(p);
    if (dm) {
        p->influence = dm->influence;
        p->coupling = dm->coupling;
    }
    /* one window of w x w squares, its actuators at the square centres (Eq. 14-15) */
    p->lattice.sx = w;
    p->lattice.sy = w;
    p->lattice.offx = 0;
    p->lattice.offy = 0;
    p->nax = w;
    p->nay = w;
    p->ax0 = 0.5;
    p->ay0 = 0.5;
}

void sw_projector_destroy(sw_projector *p)
{
    if (!p)
        return;
#ifdef SW_HAVE_CUDA
    sw_projector_gpu_destroy(p);
#endif
    free(p->P);
    free(p);
}

static sw_status projector_check(sw_context *ctx, const sw_projector_params *p)
{
    if (!influence_ok(p->influence))
        return sw_fail(ctx, SW_EINVAL, "projector: unknown influence function %d",
                       (int)p->influence);
    if (!coupling_ok(p->coupling))
        return sw_fail(ctx, SW_EINVAL, "projector: coupling %g is not in (0, 1)", p->coupling);
    const sw_sabre_lattice *l = &p->lattice;
    if (l->sx < 1 || l->sy < 1 || l->sx > 65536 || l->sy > 65536)
        return sw_fail(ctx, SW_EINVAL, "projector: the lattice has %d x %d squares (1..65536 each)",
                       (int)l->sx, (int)l->sy);
    if (p->nax < 1 || p->nay < 1)
        return sw_fail(ctx, SW_EINVAL, "projector: the actuator grid is %d x %d (>= 1 each)",
                       (int)p->nax, (int)p->nay);
    if ((int64_t)p->nax * p->nay > SW_PROJ_MAX_ACT)
        return sw_fail(ctx, SW_EINVAL,
                       "projector: %d x %d actuators is more than %d (the dense normal matrix "
                       "would exceed 2 GiB); use the distributed projection",
                       (int)p->nax, (int)p->nay, SW_PROJ_MAX_ACT);
    if (!isfinite(p->ax0) || !isfinite(p->ay0))
        return sw_fail(ctx, SW_EINVAL, "projector: actuator origin (%g, %g) is not finite", p->ax0,
                       p->ay0);
    if (p->samples < 1 || p->samples > 16)
        return sw_fail(ctx, SW_EINVAL, "projector: %d fitting points per square side (1..16)",
                       (int)p->samples);
    if (!(isfinite(p->regularisation) && p->regularisation >= 0.0))
        return sw_fail(ctx, SW_EINVAL, "projector: regularisation %g is not finite and >= 0",
                       p->regularisation);
    const int64_t nv = sw_sabre_lattice_values(l), nact = (int64_t)p->nax * p->nay;
    if ((double)nv * (double)nact * sizeof(double) > SW_PROJ_MAX_R_BYTES)
        return sw_fail(ctx, SW_EINVAL,
                       "projector: %lld actuators x %lld lattice values: the dense F^T B would "
                       "exceed 4 GiB",
                       (long long)nact, (long long)nv);
    if (p->square_mask) {
        int any = 0;
        for (int64_t j = 0; j < (int64_t)l->sx * l->sy && !any; j++)
            any = p->square_mask[j] != 0;
        if (!any)
            return sw_fail(ctx, SW_EINVAL,
                           "projector: the square mask selects no square (no fitting point)");
    }
    return SW_OK;
}

/* The actuator indices i (0 <= i < n, at a0 + i) whose profile at position x is at least
 * SW_DM_TINY, and those values; returns their count. */
static int32_t profile_row(const sw_projector_params *p, double x, double a0, int32_t n,
                           double reach, int32_t *idx, double *val)
{
    double lo = ceil(x - a0 - reach), hi = floor(x - a0 + reach);
    int32_t i0 = lo < 0.0 ? 0 : (lo > n - 1 ? n : (int32_t)lo);
    int32_t i1 = hi > n - 1 ? n - 1 : (hi < 0.0 ? -1 : (int32_t)hi);
    int32_t cnt = 0;
    for (int32_t i = i0; i <= i1; i++) {
        double f = sw_dm_profile(p->influence, p->coupling, x - (a0 + i));
        if (f >= SW_DM_TINY) {
            idx[cnt] = i;
            val[cnt] = f;
            cnt++;
        }
    }
    return cnt;
}

/*
 * Accumulates N = F^T F (lower triangle, column-major nact x nact) and R = F^T B (column-major
 * nact x nv) over the fitting points; *trace = trace(N). Scratch: jx, jy (nax, nay ints), fx, fy
 * (nax, nay doubles), ia (nact ints), fa (nact doubles).
 */
static void accumulate(const sw_projector_params *p, const uint8_t *active, double *N, double *R,
                       double *trace, int32_t *jx, double *fx, int32_t *jy, double *fy, int32_t *ia,
                       double *fa)
{
    const sw_sabre_lattice *l = &p->lattice;
    const int32_t q = p->samples, nax = p->nax, nact = p->nax * p->nay;
    const double reach = profile_reach(p->influence, p->coupling);
    double tr = 0.0;
    for (int32_t sj = 0; sj < l->sy; sj++)
        for (int32_t b = 0; b < q; b++) {
            const double ly = sj + (b + 0.5) / q; /* lattice coordinate (corner J at J) */
            const int32_t ny = profile_row(p, ly - l->offy, p->ay0, p->nay, reach, jy, fy);
            for (int32_t si = 0; si < l->sx; si++) {
                if (p->square_mask && !p->square_mask[(int64_t)sj * l->sx + si])
                    continue;
                for (int32_t a = 0; a < q; a++) {
                    const double lx = si + (a + 0.5) / q;
                    const int32_t nx = profile_row(p, lx - l->offx, p->ax0, nax, reach, jx, fx);
                    /* the point's row of F (Eq. 12's influence functions), actuators ascending */
                    int32_t n = 0;
                    for (int32_t v = 0; v < ny; v++)
                        for (int32_t u = 0; u < nx; u++) {
                            const int32_t act = jy[v] * nax + jx[u];
                            if (active && !active[act])
                                continue; /* not in the fit: a zero column of F */
                            ia[n] = act;
                            fa[n] = fy[v] * fx[u];
                            n++;
                        }
                    /* its row of B: the spline's triangle there (sabre.h) */
                    int64_t vi[3];
                    double w[3];
                    sw_sabre_locate(l->sx, l->sy, lx, ly, vi, w);
                    for (int32_t k1 = 0; k1 < n; k1++) {
                        const double f1 = fa[k1];
                        double *col = N + (int64_t)ia[k1]; /* row ia[k1]; columns ia[k2] <= it */
                        for (int32_t k2 = 0; k2 <= k1; k2++)
                            col[(int64_t)ia[k2] * nact] += f1 * fa[k2];
                        tr += f1 * f1;
                        for (int k = 0; k < 3; k++)
                            if (w[k] != 0.0)
                                R[vi[k] * nact + ia[k1]] += f1 * w[k];
                    }
                }
            }
        }
    *trace = tr;
}

/*
 * P = (F^T F + lambda I)^-1 F^T B into P (nact x nv row-major floats, the caller's), F holding
 * only the actuators with active[a] != 0 (NULL: all): the others are left out of the fit, so
 * their rows of P are 0 and lambda = regularisation trace(F^T F) / (active actuators). With
 * empty_ok a problem in which no fitting point sees an active actuator gives P = 0 instead of
 * SW_EINVAL (a D-SABRE window outside the pupil). The parameters must have passed
 * projector_check.
 */
static sw_status projector_solve(sw_context *ctx, const sw_projector_params *p,
                                 const uint8_t *active, int empty_ok, float *P)
{
    const int32_t nact = p->nax * p->nay;
    const int64_t nv = sw_sabre_lattice_values(&p->lattice);
    int32_t nactive = 0;
    for (int32_t a = 0; a < nact; a++)
        nactive += !active || active[a];
    double *N = (double *)calloc((size_t)nact * nact, sizeof(double));
    double *R = (double *)calloc((size_t)nact * nv, sizeof(double));
    int32_t *jx = (int32_t *)malloc(((size_t)p->nax + p->nay + nact) * sizeof(int32_t));
    double *fx = (double *)malloc(((size_t)p->nax + p->nay + nact) * sizeof(double));
    if (!N || !R || !jx || !fx) {
        free(N);
        free(R);
        free(jx);
        free(fx);
        return sw_fail(ctx, SW_ENOMEM, "projector: out of memory (%d actuators, %lld values)",
                       (int)nact, (long long)nv);
    }
    double trace = 0.0;
    if (nactive > 0)
        accumulate(p, active, N, R, &trace, jx, fx, jx + p->nax, fx + p->nax, jx + p->nax + p->nay,
                   fx + p->nax + p->nay);
    free(jx);
    free(fx);
    if (!(trace > 0.0)) {
        free(N);
        free(R);
        if (empty_ok) {
            memset(P, 0, (size_t)nact * nv * sizeof(float));
            return SW_OK;
        }
        return sw_fail(ctx, SW_EINVAL, "projector: no fitting point sees any actuator");
    }
    /* N + lambda I, lambda = regularisation trace(N) / (active actuators); an actuator left out
     * has a zero row and column in N and in R: 1 on its diagonal gives it a zero row of P */
    const double lambda = p->regularisation * trace / nactive;
    for (int64_t a = 0; a < nact; a++)
        N[a * nact + a] += (!active || active[a]) ? lambda : 1.0;

    /* P = N^-1 R (Eq. 13 / 15), by Cholesky */
    lapack_int info = LAPACKE_dposv(LAPACK_COL_MAJOR, 'L', nact, (lapack_int)nv, N, nact, R, nact);
    free(N);
    if (info != 0) {
        free(R);
        if (info > 0)
            return sw_fail(ctx, SW_EINVAL,
                           "projector: the normal matrix is singular (actuators that no fitting "
                           "point sees: set regularisation > 0)");
        return sw_fail(ctx, SW_EINTERNAL, "projector: LAPACKE_dposv failed (%d)", (int)info);
    }
    int finite = 1;
    for (int64_t a = 0; a < nact; a++)
        for (int64_t v = 0; v < nv; v++) {
            const double x = R[v * nact + a];
            finite &= isfinite(x) ? 1 : 0;
            P[a * nv + v] = (float)x;
        }
    free(R);
    if (!finite)
        return sw_fail(ctx, SW_EINTERNAL, "projector: the solution is not finite");
    return SW_OK;
}

sw_status sw_projector_create(sw_context *ctx, const sw_projector_params *p, sw_projector **out)
{
    return sw_projector_create_masked(ctx, p, NULL, out);
}

sw_status sw_projector_create_masked(sw_context *ctx, const sw_projector_params *p,
                                     const uint8_t *active, sw_projector **out)
{
    if (!out)
        return sw_fail(ctx, SW_EINVAL, "projector: NULL output");
    *out = NULL;
    if (!p)
        return sw_fail(ctx, SW_EINVAL, "projector: NULL parameters");
    sw_status st = projector_check(ctx, p);
    if (st != SW_OK)
        return st;

    const int32_t nact = p->nax * p->nay;
    const int64_t nv = sw_sabre_lattice_values(&p->lattice);
    sw_projector *pr = (sw_projector *)calloc(1, sizeof *pr);
    float *P = (float *)malloc((size_t)nact * nv * sizeof(float));
    if (!pr || !P) {
        free(pr);
        free(P);
        return sw_fail(ctx, SW_ENOMEM, "projector: out of memory (%d actuators, %lld values)",
                       (int)nact, (long long)nv);
    }
    pr->ctx = ctx;
    pr->nact = nact;
    pr->nvalues = (int32_t)nv;
    pr->P = P;
    if ((st = projector_solve(ctx, p, active, 0, P)) != SW_OK) {
        sw_projector_destroy(pr);
        return st;
    }

#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA) {
        st = sw_projector_gpu_create(pr);
        if (st != SW_OK) {
            sw_projector_destroy(pr);
            return st;
        }
    }
#endif
    *out = pr;
    return SW_OK;
}

sw_status sw_projector_solve_masked(sw_context *ctx, const sw_projector_params *p,
                                    const uint8_t *active, int empty_ok, float *P)
{
    if (!p || !P)
        return sw_fail(ctx, SW_EINVAL, "projector: NULL %s", !p ? "parameters" : "matrix");
    /* a mask without a square is an empty problem, which empty_ok accepts */
    sw_projector_params q = *p;
    int any = !q.square_mask;
    for (int64_t j = 0; j < (int64_t)q.lattice.sx * q.lattice.sy && !any && q.lattice.sx > 0; j++)
        any = q.square_mask[j] != 0;
    if (!any && empty_ok)
        q.square_mask = NULL;
    const sw_status st = projector_check(ctx, &q);
    if (st != SW_OK)
        return st;
    if (!any && empty_ok) {
        memset(P, 0, (size_t)q.nax * q.nay * sw_sabre_lattice_values(&q.lattice) * sizeof(float));
        return SW_OK;
    }
    return projector_solve(ctx, &q, active, empty_ok, P);
}

const float *sw_projector_matrix(const sw_projector *p, int32_t *rows, int32_t *cols)
{
    if (rows)
        *rows = p ? p->nact : 0;
    if (cols)
        *cols = p ? p->nvalues : 0;
    return p ? p->P : NULL;
}

sw_status sw_projector_run(sw_projector *p, const float *values, sw_memory memory, float *commands)
{
    if (!p)
        return sw_fail(NULL, SW_EINVAL, "projector: NULL plan");
    sw_context *ctx = p->ctx;
    if (!values || !commands)
        return sw_fail(ctx, SW_EINVAL, "projector: NULL %s", !values ? "values" : "commands");
    if (memory != SW_MEM_HOST && memory != SW_MEM_PINNED && memory != SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL, "projector: unknown memory kind %d", (int)memory);
#ifdef SW_HAVE_CUDA
    if (ctx && sw_context_backend(ctx) == SW_BACKEND_CUDA)
        return sw_projector_gpu_run(p, values, memory, commands);
#endif
    if (memory == SW_MEM_DEVICE)
        return sw_fail(ctx, SW_EINVAL,
                       "projector: device memory given to a plan on the CPU backend (use host or "
                       "pinned memory)");
    /* u = P c (Eq. 13 / 15 applied) */
    cblas_sgemv(CblasRowMajor, CblasNoTrans, p->nact, p->nvalues, 1.0f, p->P, p->nvalues, values, 1,
                0.0f, commands, 1);
    return SW_OK;
}
