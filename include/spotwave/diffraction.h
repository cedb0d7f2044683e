/*
 * Diffraction experiments: the geometry a crystallographer's detector file carries, and what the
 * spot finder (find.h) does with it.
 *
 * The geometry (sw_diffraction_geometry) comes from the detector's own files (io.h: the Pilatus
 * CBF mini-header, the NeXus/NXmx fields of an Eiger master; sw_diffraction_geometry_merge lets
 * command options override them) and gives every pixel its scattering angle and d-spacing by
 * Bragg's law, d = lambda / (2 sin theta), 2 theta the angle between the direct beam and the ray
 * from the sample to the pixel.
 *
 * Conventions: pixel coordinates as everywhere in spotwave (the centre of pixel (0,0) at (0.0,
 * 0.0); DIALS and XDS put it at (0.5, 0.5)); lengths in millimetres, wavelengths and d-spacings in
 * ångströms. The laboratory frame is NeXus's (McStas): z along the beam, from the source through
 * the sample (at the origin), y up, x completing a right-handed frame.
 */
#ifndef SPOTWAVE_DIFFRACTION_H
#define SPOTWAVE_DIFFRACTION_H

#include "spotwave/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * A flat detector (or one panel of one). Pixel (x, y) lies at
 *   origin_mm + x * pixel_x_mm * fast + y * pixel_y_mm * slow
 * in the laboratory frame (fast: the direction of increasing x, slow: of increasing y; unit
 * vectors). When orientation is 0 the detector is taken normal to the beam at distance_mm (the
 * directions of its axes in that plane do not change a d-spacing): only beam_x_px, beam_y_px,
 * distance_mm and the pixel sizes matter then, and origin/fast/slow are ignored.
 * A field that is unknown is 0 (NaN never appears): the setters and readers say which were
 * found in `have` (SW_DG_* bits).
 */
typedef struct sw_diffraction_geometry {
    double wavelength_a;           /* the X-ray wavelength, angstrom                          */
    double distance_mm;            /* sample to the detector plane along its normal, mm         */
    double beam_x_px, beam_y_px;   /* where the direct beam meets the detector (pixels)        */
    double pixel_x_mm, pixel_y_mm; /* pixel pitch along x and y, mm                          */
    int orientation;               /* 1: origin_mm, fast, slow hold the general orientation   */
    double origin_mm[3];           /* the centre of pixel (0,0) in the laboratory frame        */
    double fast[3], slow[3];       /* unit vectors of +x and +y                                */
    double overload;               /* counts at or above which a pixel is overloaded (0: none) */
    double exposure_s;             /* exposure time of a frame (0: unknown)                    */
    uint32_t have;                 /* SW_DG_* bits: which fields a file or an option gave      */
} sw_diffraction_geometry;

enum {
    SW_DG_WAVELENGTH = 1u << 0,
    SW_DG_DISTANCE = 1u << 1,
    SW_DG_BEAM = 1u << 2,
    SW_DG_PIXEL = 1u << 3,
    SW_DG_ORIENTATION = 1u << 4,
    SW_DG_OVERLOAD = 1u << 5,
    SW_DG_EXPOSURE = 1u << 6,
    /* what resolution needs: wavelength, distance, beam centre, pixel size */
    SW_DG_RESOLUTION = SW_DG_WAVELENGTH | SW_DG_DISTANCE | SW_DG_BEAM | SW_DG_PIXEL,
};

/* Zero everywhere, nothing known. */
void sw_diffraction_geometry_init(sw_diffraction_geometry *g);

/* Copies into `into` every field that `from` has (its `have` bits): options over a file's header.
 */
void sw_diffraction_geometry_merge(sw_diffraction_geometry *into,
                                   const sw_diffraction_geometry *from);

/* SW_OK when g has everything resolution needs (SW_DG_RESOLUTION) with finite, positive
 * wavelength, distance and pixel sizes (and, with orientation, unit fast and slow vectors);
 * otherwise SW_EINVAL with a message naming what is missing (ctx may be NULL). */
sw_status sw_diffraction_geometry_check(sw_context *ctx, const sw_diffraction_geometry *g);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_DIFFRACTION_H */
