/*
 * The per-image summary (diffraction.h): spot counts, total intensity and a resolution estimate
 * by DISTL's method 2 (Zhang et al. 2006, J. Appl. Cryst. 39, 112-119, section 2.4.4), with the
 * constants of DIALS's per-image analysis (dials/algorithms/spot_finding/per_image_analysis.py:
 * binner_d_star_cubed and estimate_resolution_limit_distl_method2).
 */
#include "core/core_internal.h"
#include "spotwave/diffraction.h"

#include <math.h>
#include <stdlib.h>

static int cmp_desc(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

sw_status sw_diffraction_estimate_d_min(sw_context *ctx, const double *d, int64_t n, double *d_min)
{
    if (!d_min || n < 0 || (n > 0 && !d))
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_estimate_d_min: NULL argument");
    *d_min = 0.0;
    if (n <= 10)
        return SW_OK;
    double *all = malloc((size_t)n * 2 * sizeof *all);
    if (!all)
        return sw_fail(ctx, SW_ENOMEM, "sw_diffraction_estimate_d_min: out of memory");
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(d[i]) && d[i] > 0.0)
            all[m++] = d[i];
    if (m <= 10) {
        free(all);
        return SW_OK;
    }
    /* the distinct spacings, largest (lowest resolution) first, as 1/d^3 ascending */
    double *u = all + m;
    for (int64_t i = 0; i < m; i++)
        u[i] = all[i];
    qsort(u, (size_t)m, sizeof *u, cmp_desc);
    int64_t nu = 0;
    for (int64_t i = 0; i < m; i++)
        if (nu == 0 || u[i] != u[nu - 1])
            u[nu++] = u[i];
    for (int64_t i = 0; i < nu; i++)
        u[i] = 1.0 / (u[i] * u[i] * u[i]);
    /* the first shell holds 5% of the spacings or 25, whichever is more, at most a quarter */
    const int64_t low = (int64_t)ceil(fmin(fmax(25.0, 0.05 * (double)nu), 0.25 * (double)nu));
    if (low >= nu || !(u[low] - u[0] > 0.0)) {
        free(all);
        return SW_OK;
    }
    const double span = u[nu - 1] - u[0];
    double nslots = ceil(span / (u[low] - u[0]));
    nslots = fmax(fmin(nslots, 40.0), 20.0);
    const int ns = (int)nslots;
    const double step = span / nslots;
    int64_t counts[40] = {0};
    double edge_min[40] = {0}, edge_max[40] = {0}; /* each shell's d range [d_min, d_max) */
    for (int i = 0; i < ns; i++) {
        edge_max[i] = 1.0 / cbrt(u[0] + i * step);
        edge_min[i] = 1.0 / cbrt(u[0] + (i + 1) * step);
    }
    for (int64_t k = 0; k < m; k++)
        for (int i = 0; i < ns; i++)
            if (all[k] < edge_max[i] && all[k] >= edge_min[i]) {
                counts[i]++;
                break;
            }
    /* the first shell that, with the next, holds fewer than mu t0 spots */
    const double t0 = 0.5 * (double)(counts[0] + counts[1]), mu = 0.15;
    int i = 0;
    for (i = 0; i < ns - 1; i++)
        if (counts[i] < mu * t0 && counts[i + 1] < mu * t0)
            break;
    if (i == ns - 1)
        i = ns - 2; /* no such shell: the last but one, as DIALS's loop leaves it */
    *d_min = edge_min[i];
    free(all);
    return SW_OK;
}

sw_status sw_diffraction_summarise(sw_context *ctx, const sw_diffraction_geometry *g,
                                   const sw_spot *spots, int64_t n, int64_t frame,
                                   sw_diffraction_summary *out)
{
    return sw_diffraction_summarise_panels(ctx, g, NULL, 0, 0, spots, n, frame, out);
}

sw_status sw_diffraction_summarise_panels(sw_context *ctx, const sw_diffraction_geometry *g,
                                          const sw_diffraction_panels *panels, int32_t width,
                                          int32_t height, const sw_spot *spots, int64_t n,
                                          int64_t frame, sw_diffraction_summary *out)
{
    if (!out || n < 0 || (n > 0 && !spots))
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_summarise: NULL argument");
    out->frame = frame;
    out->n_spots = n;
    out->total_intensity = 0.0;
    out->d_min_estimate = 0.0;
    for (int64_t i = 0; i < n; i++)
        out->total_intensity += spots[i].intensity;
    if (!g || sw_diffraction_geometry_check(NULL, g) != SW_OK) {
        out->n_spots_d_lt_4a = -1;
        out->n_spots_d_gt_4a = -1;
        return SW_OK;
    }
    out->n_spots_d_lt_4a = 0;
    out->n_spots_d_gt_4a = 0;
    if (n == 0)
        return SW_OK;
    double *d = malloc((size_t)n * sizeof *d);
    if (!d)
        return sw_fail(ctx, SW_ENOMEM, "sw_diffraction_summarise: out of memory");
    for (int64_t i = 0; i < n; i++) {
        d[i] = sw_diffraction_d_at(g, panels, width, height, spots[i].x, spots[i].y);
        out->n_spots_d_lt_4a += d[i] < 4.0;
        out->n_spots_d_gt_4a += d[i] > 4.0;
    }
    sw_status st = sw_diffraction_estimate_d_min(ctx, d, n, &out->d_min_estimate);
    free(d);
    return st;
}
