/*
 * spotwave geometry: the Shack-Hartmann lenslet grid on the detector, one type shared by the SH
 * simulator (sim_sh.h) and the centroid stage (Mocci et al. 2020, Eq. 1-5, below).
 *
 * Paper: Mocci J., Busato F., Bombieri N., Bonora S., Muradore R. 2020, "Efficient
 * implementation of the Shack-Hartmann centroid extraction for edge computing", J. Opt. Soc. Am.
 * A 37(10), 1548, Eq. 1-5.
 *
 * Conventions (core.h): pixel (x, y) = (column, row), 0-based, the centre of pixel (0,0) at
 * (0.0, 0.0), so pixel x spans [x - 0.5, x + 0.5).
 *
 * Grid. nx x ny lenslets; lenslet (ix, iy), 0 <= ix < nx, 0 <= iy < ny, has the flat index
 * l = iy * nx + ix (row-major; Mocci et al. Eq. 4 walks l column-major on a square grid, w_L = nx,
 * and the index is only a name). pitch d = lenslet pitch / pixel pitch (Mocci et al. Eq. 2), in
 * pixels, not necessarily an integer. (x0, y0) is the corner pixel of lenslet (0, 0): the lenslet
 * with the smallest x and y (Mocci et al.'s "bottom-left" for an image whose row 0 is at the
 * bottom).
 *
 * Pixel regions (Mocci et al. Eq. 3-4). Lenslet (ix, iy) owns the pixels
 *     floor(x0 + d ix) <= x < floor(x0 + d (ix + 1)),  floor(y0 + d iy) <= y < floor(y0 + d (iy +
 * 1)). This is Eq. (3) with the corner x_l = x0 + d ix kept real, as Mocci et al.'s own text has it
 * ((x_l, y_l) in R^2): flooring x_l first as Eq. (4) prints would leave a pixel between some
 * neighbours for non-integer d. The regions are adjacent and disjoint, and together form the
 * RoI of Mocci et al. Eq. (5) (d nx by d ny pixels, up to rounding).
 *
 * Reference position. On the detector the lenslet (ix, iy) spans the continuous interval
 * [x0 - 0.5 + d ix, x0 - 0.5 + d (ix + 1)) (pixel edges), so its optical axis, where the spot of a
 * flat wavefront lands, is at
 *     x_ref = x0 - 0.5 + d (ix + 0.5),   y_ref = y0 - 0.5 + d (iy + 0.5).
 * For integer x0 and d this is the centre of the pixel region; otherwise the region's middle lies
 * (frac(e) + frac(e + d)) / 2 pixels below it, e = x0 + d ix (the floors of Eq. 3 give each
 * region the pixels that contain the start of its lenslet up to, not including, the one that
 * contains its end).
 *
 * Units. A spot displacement dx (pixels) is a local wavefront slope (radians, = dW/du for the
 * optical path difference W and pupil coordinate u in the same unit) of
 *     slope = dx * pixel_um / (focal_mm * 1000),
 * the lenslet pitch in the pupil is lenslet_um = d * pixel_um (the lenslets image straight onto
 * the detector, Mocci et al. Eq. 2).
 *
 * Validity mask (optional): nx * ny bytes, row-major by l; 0 = lenslet unused (outside the pupil).
 * The mask is not owned by the geometry.
 */
#ifndef SPOTWAVE_GEOMETRY_H
#define SPOTWAVE_GEOMETRY_H

#include <stdint.h>
#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sw_sh_geometry {
    double x0, y0;        /* corner pixel of lenslet (0, 0) (see above)                          */
    double pitch_px;      /* d, pixels per lenslet, > 0 (3..1024 in practice; non-integer ok)    */
    int32_t nx, ny;       /* lenslets per row and per column, >= 1                                */
    double pixel_um;      /* detector pixel pitch, micrometres (> 0)                              */
    double focal_mm;      /* lenslet focal length, millimetres (> 0)                              */
    const uint8_t *valid; /* optional nx*ny validity mask (NULL: all lenslets valid)              */
} sw_sh_geometry;

/* A 10 x 10 grid of 16-pixel lenslets at (0, 0), 5.5 um pixels, 3.5 mm focal length. */
void sw_sh_geometry_default(sw_sh_geometry *g);

/*
 * Checks the geometry against an image of width x height (pass 0, 0 to check the geometry
 * alone): finite values, pitch_px > 0, nx, ny >= 1 with nx * ny <= 2^24, pixel_um and focal_mm
 * positive, and every lenslet's pixel region non-empty and inside the image (0 <= x, x < width).
 * SW_EINVAL with a message naming the offending field or lenslet.
 */
sw_status sw_sh_geometry_check(sw_context *ctx, const sw_sh_geometry *g, int32_t width,
                               int32_t height);

/* The pixel region of lenslet (ix, iy): columns [*xb, *xe), rows [*yb, *ye) (Mocci et al. Eq. 3).
 * */
void sw_sh_region(const sw_sh_geometry *g, int32_t ix, int32_t iy, int32_t *xb, int32_t *xe,
                  int32_t *yb, int32_t *ye);

/* The reference position of lenslet (ix, iy) (see above). */
void sw_sh_reference(const sw_sh_geometry *g, int32_t ix, int32_t iy, double *x, double *y);

/* Lenslet pitch in the pupil, micrometres: pitch_px * pixel_um. */
double sw_sh_lenslet_um(const sw_sh_geometry *g);

/* Pixels of spot displacement per radian of wavefront slope: focal_mm * 1000 / pixel_um. */
double sw_sh_px_per_rad(const sw_sh_geometry *g);

/* 1 when lenslet l is valid (no mask, or mask[l] != 0). */
static inline int sw_sh_is_valid(const sw_sh_geometry *g, int64_t l)
{
    return g->valid == NULL || g->valid[l] != 0;
}

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_GEOMETRY_H */
