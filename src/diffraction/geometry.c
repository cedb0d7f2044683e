/*
 * The diffraction geometry's bookkeeping (diffraction.h): initialising, merging options over a
 * file's header, checking that resolution can be computed.
 */
#include "core/core_internal.h"
#include "spotwave/diffraction.h"

#include <math.h>
#include <string.h>

void sw_diffraction_geometry_init(sw_diffraction_geometry *g)
{
    if (g)
        memset(g, 0, sizeof *g);
}

void sw_diffraction_geometry_merge(sw_diffraction_geometry *into,
                                   const sw_diffraction_geometry *from)
{
    if (!into || !from)
        return;
    const uint32_t h = from->have;
    if (h & SW_DG_WAVELENGTH)
        into->wavelength_a = from->wavelength_a;
    if (h & SW_DG_DISTANCE)
        into->distance_mm = from->distance_mm;
    if (h & SW_DG_BEAM) {
        into->beam_x_px = from->beam_x_px;
        into->beam_y_px = from->beam_y_px;
    }
    if (h & SW_DG_PIXEL) {
        into->pixel_x_mm = from->pixel_x_mm;
        into->pixel_y_mm = from->pixel_y_mm;
    }
    if (h & SW_DG_ORIENTATION) {
        into->orientation = from->orientation;
        memcpy(into->origin_mm, from->origin_mm, sizeof into->origin_mm);
        memcpy(into->fast, from->fast, sizeof into->fast);
        memcpy(into->slow, from->slow, sizeof into->slow);
    }
    if (h & SW_DG_OVERLOAD)
        into->overload = from->overload;
    if (h & SW_DG_EXPOSURE)
        into->exposure_s = from->exposure_s;
    /* A beam centre, distance or pixel size given without an orientation replaces a file's
     * orientation (which holds them too): the flat model with the given values is used. */
    if ((h & (SW_DG_BEAM | SW_DG_DISTANCE | SW_DG_PIXEL)) && !(h & SW_DG_ORIENTATION) &&
        into->orientation) {
        into->orientation = 0;
        into->have &= ~(uint32_t)SW_DG_ORIENTATION;
    }
    into->have |= h;
}

static int positive(double v)
{
    return isfinite(v) && v > 0.0;
}

static int unit(const double v[3])
{
    const double n = v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
    return isfinite(n) && fabs(n - 1.0) < 1e-6;
}

sw_status sw_diffraction_geometry_check(sw_context *ctx, const sw_diffraction_geometry *g)
{
    if (!g)
        return sw_fail(ctx, SW_EINVAL, "sw_diffraction_geometry_check: NULL geometry");
    static const struct {
        uint32_t bit;
        const char *what;
    } need[] = {{SW_DG_WAVELENGTH, "the wavelength"},
                {SW_DG_DISTANCE, "the detector distance"},
                {SW_DG_BEAM, "the beam centre"},
                {SW_DG_PIXEL, "the pixel size"}};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!(g->have & need[i].bit))
            return sw_fail(ctx, SW_EINVAL, "diffraction geometry: %s is not known", need[i].what);
    if (!positive(g->wavelength_a))
        return sw_fail(ctx, SW_EINVAL, "diffraction geometry: wavelength %g A is not positive",
                       g->wavelength_a);
    if (!positive(g->distance_mm))
        return sw_fail(ctx, SW_EINVAL, "diffraction geometry: distance %g mm is not positive",
                       g->distance_mm);
    if (!positive(g->pixel_x_mm) || !positive(g->pixel_y_mm))
        return sw_fail(ctx, SW_EINVAL,
                       "diffraction geometry: pixel size %g x %g mm is not positive", g->pixel_x_mm,
                       g->pixel_y_mm);
    if (!isfinite(g->beam_x_px) || !isfinite(g->beam_y_px))
        return sw_fail(ctx, SW_EINVAL, "diffraction geometry: the beam centre is not finite");
    if (g->orientation && (!unit(g->fast) || !unit(g->slow) || !isfinite(g->origin_mm[0]) ||
                           !isfinite(g->origin_mm[1]) || !isfinite(g->origin_mm[2])))
        return sw_fail(ctx, SW_EINVAL,
                       "diffraction geometry: the orientation's axes are not unit vectors");
    return SW_OK;
}
