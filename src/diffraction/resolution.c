/*
 * Resolution by Bragg's law (diffraction.h): a pixel's position in the laboratory frame, its
 * scattering angle 2 theta to the direct beam (+z), and d = lambda / (2 sin theta).
 */
#include "spotwave/diffraction.h"

#include <math.h>

void sw_diffraction_lab_mm(const sw_diffraction_geometry *g, double x_px, double y_px,
                           double out[3])
{
    if (g->orientation) {
        const double u = x_px * g->pixel_x_mm, v = y_px * g->pixel_y_mm;
        for (int k = 0; k < 3; k++)
            out[k] = g->origin_mm[k] + u * g->fast[k] + v * g->slow[k];
    } else {
        out[0] = (x_px - g->beam_x_px) * g->pixel_x_mm;
        out[1] = (y_px - g->beam_y_px) * g->pixel_y_mm;
        out[2] = g->distance_mm;
    }
}

double sw_diffraction_two_theta(const sw_diffraction_geometry *g, double x_px, double y_px)
{
    double p[3];
    sw_diffraction_lab_mm(g, x_px, y_px, p);
    return atan2(sqrt(p[0] * p[0] + p[1] * p[1]), p[2]);
}

double sw_diffraction_inv_d2(const sw_diffraction_geometry *g, double x_px, double y_px)
{
    double p[3];
    sw_diffraction_lab_mm(g, x_px, y_px, p);
    /* (1/d)^2 = (2 sin theta / lambda)^2 = 2 (1 - cos 2theta) / lambda^2, cos 2theta = z / R;
     * for z > 0, 1 - z/R = (x^2 + y^2) / (R (R + z)) keeps the digits near the beam. */
    const double rho2 = p[0] * p[0] + p[1] * p[1];
    const double r = sqrt(rho2 + p[2] * p[2]);
    if (!(r > 0.0))
        return 0.0;
    const double one_minus_cos = p[2] > 0.0 ? rho2 / (r * (r + p[2])) : 1.0 - p[2] / r;
    return 2.0 * one_minus_cos / (g->wavelength_a * g->wavelength_a);
}

double sw_diffraction_d_spacing(const sw_diffraction_geometry *g, double x_px, double y_px)
{
    const double s2 = sw_diffraction_inv_d2(g, x_px, y_px);
    return s2 > 0.0 ? 1.0 / sqrt(s2) : INFINITY;
}

double sw_diffraction_s(const sw_diffraction_geometry *g, double x_px, double y_px)
{
    return sqrt(sw_diffraction_inv_d2(g, x_px, y_px));
}
