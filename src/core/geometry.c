/*
 * The Shack-Hartmann lenslet grid (geometry.h; seed 000 Eq. 1-5): validation, pixel regions and
 * reference positions, shared by the SH simulator and the centroid stage.
 */
#include "core/core_internal.h"
#include "spotwave/geometry.h"

#include <math.h>

void sw_sh_geometry_default(sw_sh_geometry *g)
{
    g->x0 = 0.0;
    g->y0 = 0.0;
    g->pitch_px = 16.0;
    g->nx = 10;
    g->ny = 10;
    g->pixel_um = 5.5;
    g->focal_mm = 3.5;
    g->valid = NULL;
}

/* Seed Eq. (3) with the real corner x_l = x0 + d i (geometry.h). */
static int32_t edge(double origin, double pitch, int32_t i)
{
    return (int32_t)floor(origin + pitch * (double)i);
}

void sw_sh_region(const sw_sh_geometry *g, int32_t ix, int32_t iy, int32_t *xb, int32_t *xe,
                  int32_t *yb, int32_t *ye)
{
    *xb = edge(g->x0, g->pitch_px, ix);
    *xe = edge(g->x0, g->pitch_px, ix + 1);
    *yb = edge(g->y0, g->pitch_px, iy);
    *ye = edge(g->y0, g->pitch_px, iy + 1);
}

void sw_sh_reference(const sw_sh_geometry *g, int32_t ix, int32_t iy, double *x, double *y)
{
    *x = g->x0 - 0.5 + g->pitch_px * ((double)ix + 0.5);
    *y = g->y0 - 0.5 + g->pitch_px * ((double)iy + 0.5);
}

double sw_sh_lenslet_um(const sw_sh_geometry *g)
{
    return g->pitch_px * g->pixel_um;
}

double sw_sh_px_per_rad(const sw_sh_geometry *g)
{
    return g->focal_mm * 1000.0 / g->pixel_um;
}

sw_status sw_sh_geometry_check(sw_context *ctx, const sw_sh_geometry *g, int32_t width,
                               int32_t height)
{
    if (!g)
        return sw_fail(ctx, SW_EINVAL, "SH geometry: NULL");
    if (!isfinite(g->x0) || !isfinite(g->y0))
        return sw_fail(ctx, SW_EINVAL, "SH geometry: origin (%g, %g) is not finite", g->x0, g->y0);
    if (!(g->pitch_px > 0.0) || !isfinite(g->pitch_px))
        return sw_fail(ctx, SW_EINVAL, "SH geometry: lenslet pitch %g px must be positive",
                       g->pitch_px);
    if (g->pitch_px < 1.0)
        return sw_fail(
            ctx, SW_EINVAL,
            "SH geometry: lenslet pitch %g px is below one pixel (regions would be empty)",
            g->pitch_px);
    if (g->nx < 1 || g->ny < 1 || (int64_t)g->nx * g->ny > (1 << 24))
        return sw_fail(ctx, SW_EINVAL, "SH geometry: grid %dx%d: need 1..2^24 lenslets in all",
                       (int)g->nx, (int)g->ny);
    if (!(g->pixel_um > 0.0) || !isfinite(g->pixel_um))
        return sw_fail(ctx, SW_EINVAL, "SH geometry: pixel size %g um must be positive",
                       g->pixel_um);
    if (!(g->focal_mm > 0.0) || !isfinite(g->focal_mm))
        return sw_fail(ctx, SW_EINVAL, "SH geometry: focal length %g mm must be positive",
                       g->focal_mm);
    /* The grid's far corner must be representable before it is compared with the image. */
    double far_x = g->x0 + g->pitch_px * g->nx, far_y = g->y0 + g->pitch_px * g->ny;
    if (fabs(g->x0) > 1e9 || fabs(g->y0) > 1e9 || far_x > 1e9 || far_y > 1e9)
        return sw_fail(ctx, SW_EINVAL,
                       "SH geometry: the grid (origin %g, %g, %dx%d of %g px) is "
                       "far outside any image",
                       g->x0, g->y0, (int)g->nx, (int)g->ny, g->pitch_px);
    if (width <= 0 && height <= 0)
        return SW_OK;
    int32_t xb, xe, yb, ye;
    sw_sh_region(g, 0, 0, &xb, &xe, &yb, &ye);
    if (xb < 0 || yb < 0)
        return sw_fail(ctx, SW_EINVAL,
                       "SH geometry: lenslet (0,0) starts at pixel (%d, %d), outside the %dx%d "
                       "image; the origin must be >= 0",
                       (int)xb, (int)yb, (int)width, (int)height);
    sw_sh_region(g, g->nx - 1, g->ny - 1, &xb, &xe, &yb, &ye);
    if (xe > width || ye > height)
        return sw_fail(ctx, SW_EINVAL,
                       "SH geometry: lenslet (%d,%d) ends at pixel (%d, %d), outside the %dx%d "
                       "image (origin %g, %g, pitch %g px, grid %dx%d)",
                       (int)(g->nx - 1), (int)(g->ny - 1), (int)xe - 1, (int)ye - 1, (int)width,
                       (int)height, g->x0, g->y0, g->pitch_px, (int)g->nx, (int)g->ny);
    return SW_OK;
}
