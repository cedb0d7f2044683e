/*
 * Geometry-aware pixel masks (diffraction.h): resolution limits, the rings of hexagonal ice and
 * untrusted regions (rectangles, circles, polygons: the beam stop's shadow), all as one mask that
 * the spot finder takes (find.h's mask). Masking pixels, as DIALS does (dials/util/masking.py;
 * Winter et al. 2018), rather than dropping spots afterwards: a masked pixel never enters a
 * window's background statistics either, so a ring's diffuse scatter does not inflate the
 * dispersion of its neighbours, and the GPU path needs nothing new.
 */
#include "core/core_internal.h"
#include "spotwave/diffraction.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Ice Ih, DIALS's ice_rings defaults: a = b = 4.498 A, c = 7.338 A, gamma = 120, P6_3/mmc. */
#define ICE_A 4.498
#define ICE_C 7.338

/* P6_3/mmc (No. 194) reflection conditions: hh-2h l (and its equivalents (h,-2h), (-2h,h)) and
 * 000l need l even; every other (h, k, l) is allowed. */
static int ice_allowed(int h, int k, int l)
{
    if (l % 2 == 0)
        return 1;
    return !(h == k || k == -2 * h || h == -2 * k);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The distinct 1/d^2 of ice down to 1/d^2 <= s2_max, ascending, in a malloc'd array (*n of
 * them); NULL when out of memory (or none: *n = 0). */
static double *ice_inv_d2(double s2_max, int *n)
{
    *n = 0;
    const int hmax = (int)ceil(ICE_A * sqrt(s2_max)) + 1;
    const int lmax = (int)ceil(ICE_C * sqrt(s2_max)) + 1;
    /* one entry per (q = h^2 + hk + k^2, l >= 0) that some allowed (h, k, l) reaches */
    const int qmax = 3 * hmax * hmax;
    size_t cap = (size_t)(qmax + 1) * (size_t)(lmax + 1);
    unsigned char *seen = calloc(cap, 1);
    if (!seen)
        return NULL;
    for (int h = -hmax; h <= hmax; h++)
        for (int k = -hmax; k <= hmax; k++) {
            const int q = h * h + h * k + k * k;
            if (q > qmax)
                continue;
            for (int l = 0; l <= lmax; l++)
                if ((q > 0 || l > 0) && ice_allowed(h, k, l))
                    seen[(size_t)q * (size_t)(lmax + 1) + (size_t)l] = 1;
        }
    size_t count = 0;
    for (size_t i = 0; i < cap; i++)
        count += seen[i];
    double *v = malloc((count ? count : 1) * sizeof *v);
    if (!v) {
        free(seen);
        return NULL;
    }
    size_t m = 0;
    for (int q = 0; q <= qmax; q++)
        for (int l = 0; l <= lmax; l++)
            if (seen[(size_t)q * (size_t)(lmax + 1) + (size_t)l]) {
                const double s2 = 4.0 * q / (3.0 * ICE_A * ICE_A) + (double)l * l / (ICE_C * ICE_C);
                if (s2 <= s2_max)
                    v[m++] = s2;
            }
    free(seen);
    qsort(v, m, sizeof *v, cmp_double);
    size_t u = 0;
    for (size_t i = 0; i < m; i++)
        if (u == 0 || v[i] != v[u - 1])
            v[u++] = v[i];
    *n = (int)u;
    return v;
}

int sw_diffraction_ice_rings(double d_min, double *d, int max)
{
    if (!(d_min > 0.0) || !isfinite(d_min))
        return 0;
    int n;
    double *v = ice_inv_d2(1.0 / (d_min * d_min), &n);
    if (!v)
        return n == 0 ? 0 : -1;
    for (int i = 0; i < n && i < max; i++)
        d[i] = 1.0 / sqrt(v[i]);
    free(v);
    return n;
}

/* ------------------------------------------------------------------ shapes */

static int finite4(const double *v, int n)
{
    for (int i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

static sw_status check_shape(sw_context *ctx, const sw_diffraction_shape *s, int32_t i)
{
    switch (s->kind) {
    case SW_DIFFRACTION_RECT:
        if (!finite4(s->v, 4) || !(s->v[1] > s->v[0]) || !(s->v[3] > s->v[2]))
            return sw_fail(ctx, SW_EINVAL,
                           "sw_diffraction_mask: rectangle %d (%g,%g,%g,%g) needs x0 < x1 and "
                           "y0 < y1",
                           (int)i, s->v[0], s->v[1], s->v[2], s->v[3]);
        return SW_OK;
    case SW_DIFFRACTION_CIRCLE:
        if (!finite4(s->v, 3) || !(s->v[2] > 0.0))
            return sw_fail(ctx, SW_EINVAL,
                           "sw_diffraction_mask: circle %d needs a finite centre and a radius > 0",
                           (int)i);
        return SW_OK;
    case SW_DIFFRACTION_POLYGON:
        if (s->nvertices < 3 || !s->xy)
            return sw_fail(ctx, SW_EINVAL,
                           "sw_diffraction_mask: polygon %d needs at least 3 vertices", (int)i);
        for (int32_t k = 0; k < 2 * s->nvertices; k++)
            if (!isfinite(s->xy[k]))
                return sw_fail(ctx, SW_EINVAL,
                               "sw_diffraction_mask: polygon %d has a non-finite vertex", (int)i);
        return SW_OK;
    }
    return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: shape %d has an unknown kind", (int)i);
}

static int64_t clear(uint8_t *m)
{
    if (!*m)
        return 0;
    *m = 0;
    return 1;
}

static int64_t clamp_floor(double v, int32_t lo, int32_t hi)
{
    double f = floor(v);
    return f < lo ? lo : f > hi ? hi : (int64_t)f;
}

static int64_t clamp_ceil(double v, int32_t lo, int32_t hi)
{
    double f = ceil(v);
    return f < lo ? lo : f > hi ? hi : (int64_t)f;
}

static int inside_polygon(const sw_diffraction_shape *s, double x, double y)
{
    int in = 0;
    const double *p = s->xy;
    for (int32_t i = 0, j = s->nvertices - 1; i < s->nvertices; j = i++) {
        const double xi = p[2 * i], yi = p[2 * i + 1], xj = p[2 * j], yj = p[2 * j + 1];
        if ((yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi)
            in = !in;
    }
    return in;
}

static int64_t mask_shape(const sw_diffraction_shape *s, int32_t w, int32_t h, uint8_t *mask)
{
    int64_t n = 0;
    if (s->kind == SW_DIFFRACTION_RECT) {
        const int64_t x0 = clamp_ceil(s->v[0], 0, w), x1 = clamp_ceil(s->v[1], 0, w);
        const int64_t y0 = clamp_ceil(s->v[2], 0, h), y1 = clamp_ceil(s->v[3], 0, h);
        for (int64_t y = y0; y < y1; y++)
            for (int64_t x = x0; x < x1; x++)
                n += clear(&mask[y * w + x]);
    } else if (s->kind == SW_DIFFRACTION_CIRCLE) {
        const double xc = s->v[0], yc = s->v[1], r = s->v[2];
        const int64_t x0 = clamp_floor(xc - r, 0, w), x1 = clamp_ceil(xc + r + 1, 0, w);
        const int64_t y0 = clamp_floor(yc - r, 0, h), y1 = clamp_ceil(yc + r + 1, 0, h);
        for (int64_t y = y0; y < y1; y++)
            for (int64_t x = x0; x < x1; x++) {
                const double dx = (double)x - xc, dy = (double)y - yc;
                if (dx * dx + dy * dy < r * r)
                    n += clear(&mask[y * w + x]);
            }
    } else {
        double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
        for (int32_t i = 0; i < s->nvertices; i++) {
            xmin = fmin(xmin, s->xy[2 * i]);
            xmax = fmax(xmax, s->xy[2 * i]);
            ymin = fmin(ymin, s->xy[2 * i + 1]);
            ymax = fmax(ymax, s->xy[2 * i + 1]);
        }
        const int64_t x0 = clamp_floor(xmin, 0, w), x1 = clamp_ceil(xmax + 1, 0, w);
        const int64_t y0 = clamp_floor(ymin, 0, h), y1 = clamp_ceil(ymax + 1, 0, h);
        for (int64_t y = y0; y < y1; y++)
            for (int64_t x = x0; x < x1; x++)
                if (inside_polygon(s, (double)x, (double)y))
                    n += clear(&mask[y * w + x]);
    }
    return n;
}

/* ------------------------------------------------------------------ panels */

static int panels_ok(const sw_diffraction_panels *p)
{
    if (p->nmodules > 0)
        return p->modules != NULL;
    return p->nmodules == 0 && p->module_w > 0 && p->module_h > 0 && p->gap_x >= 0 &&
           p->gap_y >= 0 && (int64_t)p->module_w + p->gap_x <= INT32_MAX &&
           (int64_t)p->module_h + p->gap_y <= INT32_MAX;
}

static int unit3(const double v[3])
{
    const double n = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    return isfinite(n) && fabs(n - 1.0) < 1e-6;
}

/* Listed modules: inside the frame, of positive size, not overlapping, orientations usable. */
static sw_status check_modules(sw_context *ctx, const sw_diffraction_panels *p, int32_t width,
                               int32_t height)
{
    for (int32_t k = 0; k < p->nmodules; k++) {
        const sw_diffraction_module *m = &p->modules[k];
        if (m->width <= 0 || m->height <= 0 || m->x0 < 0 || m->y0 < 0 ||
            (int64_t)m->x0 + m->width > width || (int64_t)m->y0 + m->height > height)
            return sw_fail(ctx, SW_EINVAL,
                           "sw_diffraction_mask: module %d (%d x %d px at %d, %d) does not lie "
                           "inside the %d x %d frame",
                           (int)k, (int)m->width, (int)m->height, (int)m->x0, (int)m->y0,
                           (int)width, (int)height);
        if (m->orientation &&
            (!unit3(m->fast) || !unit3(m->slow) || !isfinite(m->origin_mm[0]) ||
             !isfinite(m->origin_mm[1]) || !isfinite(m->origin_mm[2]) || !(m->pixel_x_mm > 0.0) ||
             !(m->pixel_y_mm > 0.0) || !isfinite(m->pixel_x_mm) || !isfinite(m->pixel_y_mm)))
            return sw_fail(ctx, SW_EINVAL,
                           "sw_diffraction_mask: module %d's orientation is not unit axes and "
                           "positive pixel sizes",
                           (int)k);
        for (int32_t i = 0; i < k; i++) {
            const sw_diffraction_module *o = &p->modules[i];
            if (m->x0 < o->x0 + o->width && o->x0 < m->x0 + m->width && m->y0 < o->y0 + o->height &&
                o->y0 < m->y0 + m->height)
                return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: modules %d and %d overlap",
                               (int)i, (int)k);
        }
    }
    return SW_OK;
}

int32_t sw_diffraction_panel_count(const sw_diffraction_panels *p, int32_t width, int32_t height)
{
    if (!p || !panels_ok(p) || width <= 0 || height <= 0)
        return 0;
    if (p->nmodules > 0)
        return p->nmodules;
    const int64_t px = (int64_t)p->module_w + p->gap_x, py = (int64_t)p->module_h + p->gap_y;
    return (int32_t)(((width + px - 1) / px) * ((height + py - 1) / py));
}

int32_t sw_diffraction_panel_at(const sw_diffraction_panels *p, int32_t width, int32_t height,
                                double x, double y)
{
    if (!p || !panels_ok(p) || !isfinite(x) || !isfinite(y))
        return -1;
    const double rx = floor(x + 0.5), ry = floor(y + 0.5);
    if (rx < 0 || ry < 0 || rx >= width || ry >= height)
        return -1;
    const int64_t ix = (int64_t)rx, iy = (int64_t)ry;
    if (p->nmodules > 0) {
        for (int32_t k = 0; k < p->nmodules; k++) {
            const sw_diffraction_module *m = &p->modules[k];
            if (ix >= m->x0 && ix < (int64_t)m->x0 + m->width && iy >= m->y0 &&
                iy < (int64_t)m->y0 + m->height)
                return k;
        }
        return -1;
    }
    const int64_t px = (int64_t)p->module_w + p->gap_x, py = (int64_t)p->module_h + p->gap_y;
    if (ix % px >= p->module_w || iy % py >= p->module_h)
        return -1;
    const int64_t cols = (width + px - 1) / px;
    return (int32_t)((iy / py) * cols + ix / px);
}

void sw_diffraction_panel_geometry(const sw_diffraction_geometry *g, const sw_diffraction_panels *p,
                                   int32_t panel, sw_diffraction_geometry *out)
{
    *out = *g;
    if (!p || p->nmodules <= 0 || !p->modules || panel < 0 || panel >= p->nmodules)
        return;
    const sw_diffraction_module *m = &p->modules[panel];
    if (!m->orientation)
        return;
    out->orientation = 1;
    memcpy(out->origin_mm, m->origin_mm, sizeof out->origin_mm);
    memcpy(out->fast, m->fast, sizeof out->fast);
    memcpy(out->slow, m->slow, sizeof out->slow);
    out->pixel_x_mm = m->pixel_x_mm;
    out->pixel_y_mm = m->pixel_y_mm;
    out->have |= SW_DG_ORIENTATION | SW_DG_PIXEL;
}

double sw_diffraction_d_at(const sw_diffraction_geometry *g, const sw_diffraction_panels *p,
                           int32_t width, int32_t height, double x, double y)
{
    if (!p || p->nmodules <= 0)
        return sw_diffraction_d_spacing(g, x, y);
    sw_diffraction_geometry pg;
    sw_diffraction_panel_geometry(g, p, sw_diffraction_panel_at(p, width, height, x, y), &pg);
    return sw_diffraction_d_spacing(&pg, x, y);
}

/* ------------------------------------------------------------------ the mask */

/* Index of the first ring with 1/d^2 >= v in rings[0..n-1] (ascending). */
static int lower_bound(const double *rings, int n, double v)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (rings[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

sw_status sw_diffraction_mask(sw_context *ctx, const sw_diffraction_geometry *g,
                              const sw_diffraction_mask_params *p, int32_t width, int32_t height,
                              uint8_t *mask, int64_t *masked)
{
    if (masked)
        *masked = 0;
    if (!p || !mask || width <= 0 || height <= 0)
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: NULL argument or empty frame");
    if (!isfinite(p->d_min) || p->d_min < 0.0 || !isfinite(p->d_max) || p->d_max < 0.0)
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: d_min %g and d_max %g must be >= 0",
                       p->d_min, p->d_max);
    if (p->d_min > 0.0 && p->d_max > 0.0 && !(p->d_min < p->d_max))
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: d_min %g A is not below d_max %g A",
                       p->d_min, p->d_max);
    if (!isfinite(p->ice_ring_width) || p->ice_ring_width < 0.0)
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: the ice-ring width must be >= 0");
    if (p->nshapes < 0 || (p->nshapes > 0 && !p->shapes))
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_mask: %d shapes but no array",
                       (int)p->nshapes);
    for (int32_t i = 0; i < p->nshapes; i++) {
        sw_status st = check_shape(ctx, &p->shapes[i], i);
        if (st != SW_OK)
            return st;
    }
    if (p->panels && !panels_ok(p->panels))
        return sw_fail(ctx, SW_EINVAL,
                       "sw_diffraction_mask: modules of %d x %d px with gaps %d, %d are not a "
                       "layout",
                       (int)p->panels->module_w, (int)p->panels->module_h, (int)p->panels->gap_x,
                       (int)p->panels->gap_y);
    if (p->panels && p->panels->nmodules > 0) {
        sw_status st = check_modules(ctx, p->panels, width, height);
        if (st != SW_OK)
            return st;
    }
    const int by_d = p->d_min > 0.0 || p->d_max > 0.0 || p->ice_rings;
    if (by_d) {
        sw_status st = sw_diffraction_geometry_check(ctx, g);
        if (st != SW_OK)
            return st;
    }

    int64_t n = 0;
    for (int32_t i = 0; i < p->nshapes; i++)
        n += mask_shape(&p->shapes[i], width, height, mask);
    /* listed modules, each with its own geometry for the d limits and rings */
    const sw_diffraction_panels *listed = p->panels && p->panels->nmodules > 0 ? p->panels : NULL;
    int32_t *owner = NULL; /* the module of each pixel, -1 in a gap (listed modules only) */
    if (listed) {
        owner = malloc((size_t)width * (size_t)height * sizeof *owner);
        if (!owner)
            return sw_fail(ctx, SW_ENOMEM, "sw_diffraction_mask: out of memory");
        for (size_t i = 0; i < (size_t)width * (size_t)height; i++)
            owner[i] = -1;
        for (int32_t k = 0; k < listed->nmodules; k++) {
            const sw_diffraction_module *m = &listed->modules[k];
            for (int64_t y = m->y0; y < (int64_t)m->y0 + m->height; y++)
                for (int64_t x = m->x0; x < (int64_t)m->x0 + m->width; x++)
                    owner[y * width + x] = k;
        }
        for (size_t i = 0; i < (size_t)width * (size_t)height; i++)
            if (owner[i] < 0)
                n += clear(&mask[i]);
    } else if (p->panels) {
        const int64_t px = (int64_t)p->panels->module_w + p->panels->gap_x;
        const int64_t py = (int64_t)p->panels->module_h + p->panels->gap_y;
        for (int64_t y = 0; y < height; y++) {
            const int gap_row = y % py >= p->panels->module_h;
            for (int64_t x = 0; x < width; x++)
                if (gap_row || x % px >= p->panels->module_w)
                    n += clear(&mask[y * width + x]);
        }
    }

    if (by_d) {
        const double hw =
            0.5 * (p->ice_ring_width > 0.0 ? p->ice_ring_width : SW_DIFFRACTION_ICE_RING_WIDTH);
        int nrings = 0;
        double *rings = NULL;
        if (p->ice_rings) {
            /* down to the frame's highest resolution (its corners; each module's), as DIALS
             * does */
            double s2max = 0.0;
            const double cx[2] = {0.0, width - 1.0}, cy[2] = {0.0, height - 1.0};
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++)
                    s2max = fmax(s2max, sw_diffraction_inv_d2(g, cx[a], cy[b]));
            for (int32_t k = 0; listed && k < listed->nmodules; k++) {
                const sw_diffraction_module *m = &listed->modules[k];
                sw_diffraction_geometry mg;
                sw_diffraction_panel_geometry(g, listed, k, &mg);
                const double mx[2] = {m->x0, m->x0 + m->width - 1.0},
                             my[2] = {m->y0, m->y0 + m->height - 1.0};
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++)
                        s2max = fmax(s2max, sw_diffraction_inv_d2(&mg, mx[a], my[b]));
            }
            rings = ice_inv_d2(s2max + hw, &nrings);
            if (!rings && nrings != 0) {
                free(owner);
                return sw_fail(ctx, SW_ENOMEM, "sw_diffraction_mask: out of memory");
            }
        }
        /* in 1/d^2: d <= d_min is s2 >= 1/d_min^2; d >= d_max is s2 <= 1/d_max^2 */
        const double s2_hi = p->d_min > 0.0 ? 1.0 / (p->d_min * p->d_min) : INFINITY;
        const double s2_lo = p->d_max > 0.0 ? 1.0 / (p->d_max * p->d_max) : -1.0;
        int64_t nd = 0;
#pragma omp parallel for schedule(static) reduction(+ : nd) num_threads(sw_context_threads(ctx))
        for (int32_t y = 0; y < height; y++) {
            uint8_t *row = mask + (size_t)y * (size_t)width;
            /* the geometry of the module under the pixel (listed modules with an orientation
             * place their own pixels), else g */
            sw_diffraction_geometry mg = *g;
            int32_t mg_of = -1;
            for (int32_t x = 0; x < width; x++) {
                if (!row[x])
                    continue;
                const sw_diffraction_geometry *pg = g;
                if (owner) {
                    const int32_t k = owner[(size_t)y * (size_t)width + (size_t)x];
                    if (k >= 0 && listed->modules[k].orientation) {
                        if (k != mg_of) {
                            sw_diffraction_panel_geometry(g, listed, k, &mg);
                            mg_of = k;
                        }
                        pg = &mg;
                    }
                }
                const double s2 = sw_diffraction_inv_d2(pg, x, y);
                int bad = s2 >= s2_hi || s2 <= s2_lo;
                if (!bad && nrings > 0) {
                    /* the nearest rings on either side of s2 */
                    const int k = lower_bound(rings, nrings, s2);
                    bad = (k < nrings && rings[k] - s2 <= hw) || (k > 0 && s2 - rings[k - 1] <= hw);
                }
                if (bad) {
                    row[x] = 0;
                    nd++;
                }
            }
        }
        free(rings);
        n += nd;
    }
    free(owner);
    if (masked)
        *masked = n;
    return SW_OK;
}
