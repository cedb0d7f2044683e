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
#include "spotwave/find.h"

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
 * A beam centre, distance or pixel size in `from` without an orientation drops `into`'s
 * orientation (it would override them): the flat model with the values given is used. */
void sw_diffraction_geometry_merge(sw_diffraction_geometry *into,
                                   const sw_diffraction_geometry *from);

/* SW_OK when g has everything resolution needs (SW_DG_RESOLUTION) with finite, positive
 * wavelength, distance and pixel sizes (and, with orientation, unit fast and slow vectors);
 * otherwise SW_EINVAL with a message naming what is missing (ctx may be NULL). */
sw_status sw_diffraction_geometry_check(sw_context *ctx, const sw_diffraction_geometry *g);

/* ------------------------------------------------------------------ resolution (resolution.c)
 *
 * Bragg's law: a pixel at scattering angle 2 theta (the angle at the sample between the direct
 * beam, +z, and the ray to the pixel) records d = lambda / (2 sin theta); |s| = 1/d is the length
 * of the scattering vector. The pixel's position: with orientation, origin_mm + x pixel_x_mm fast
 * + y pixel_y_mm slow; without, (x - beam_x_px) pixel_x_mm, (y - beam_y_px) pixel_y_mm in a plane
 * normal to the beam at distance_mm. These take g as sw_diffraction_geometry_check accepts it
 * (they do not check it again); pixel coordinates are spotwave's (the centre of pixel (0,0) at
 * (0,0)). */

/* The pixel's position in the laboratory frame, mm. */
void sw_diffraction_lab_mm(const sw_diffraction_geometry *g, double x_px, double y_px,
                           double out[3]);
/* 2 theta, radians (0 on the direct beam; up to pi for a pixel behind the sample). */
double sw_diffraction_two_theta(const sw_diffraction_geometry *g, double x_px, double y_px);
/* (1/d)^2 = 4 sin^2(theta) / lambda^2, in 1/angstrom^2: 0 on the direct beam. Computed without
 * the cancellation of 1 - cos 2theta near the beam. */
double sw_diffraction_inv_d2(const sw_diffraction_geometry *g, double x_px, double y_px);
/* d, angstrom: INFINITY on the direct beam itself. */
double sw_diffraction_d_spacing(const sw_diffraction_geometry *g, double x_px, double y_px);
/* |s| = 1/d, 1/angstrom. */
double sw_diffraction_s(const sw_diffraction_geometry *g, double x_px, double y_px);

/* ------------------------------------------------------------------ masks (mask.c) */

/*
 * Hexagonal ice (ice Ih), the rings DIALS masks: the d-spacings of every reflection allowed in
 * space group P6_3/mmc (No. 194; hh-2h l and 000l need l even) of the cell a = b = 4.498 A,
 * c = 7.338 A, gamma = 120 degrees (DIALS's ice_rings.unit_cell and space_group, in its
 * dials/util/masking.py; Winter et al. 2018, Acta Cryst. D74, 85-97), down to d_min (> 0): 1/d^2
 * = 4 (h^2 + h k + k^2) / (3 a^2) + l^2 / c^2. Distinct spacings, largest first, into d[0..max-1];
 * returns how many there are (which may exceed max: only max are written).
 */
int sw_diffraction_ice_rings(double d_min, double *d, int max);

/* DIALS's default ice-ring width, in 1/d^2 (1/angstrom^2): a ring at d_i masks the pixels with
 * |1/d^2 - 1/d_i^2| <= width / 2. */
#define SW_DIFFRACTION_ICE_RING_WIDTH 0.002

/* An untrusted region of the detector, in pixel coordinates (spotwave's; the numbers DIALS's
 * untrusted.rectangle / circle / polygon take mean the same pixels). */
typedef enum sw_diffraction_shape_kind {
    SW_DIFFRACTION_RECT = 0,   /* pixels x0 <= x < x1, y0 <= y < y1 (v = x0, x1, y0, y1)      */
    SW_DIFFRACTION_CIRCLE = 1, /* pixels with (x - xc)^2 + (y - yc)^2 < r^2 (v = xc, yc, r)   */
    SW_DIFFRACTION_POLYGON = 2 /* pixels whose centre lies inside (even-odd rule) the polygon of
                                  nvertices >= 3 vertices xy[2i], xy[2i+1]                   */
} sw_diffraction_shape_kind;

typedef struct sw_diffraction_shape {
    sw_diffraction_shape_kind kind;
    double v[4];
    int32_t nvertices;
    const double *xy;
} sw_diffraction_shape;

/*
 * One module of a detector whose modules a file lists (NXmx's NXdetector_module groups, io.h's
 * sw_h5_read_modules): the rectangle of the frame it reads out and, when the file places it, its
 * own position in the laboratory frame.
 */
typedef struct sw_diffraction_module {
    int32_t x0, y0;          /* its first pixel in the frame (NXmx data_origin [slow, fast])    */
    int32_t width, height;   /* its pixels along x and y (NXmx data_size [slow, fast]), > 0     */
    int orientation;         /* 1: the fields below place its pixels; 0: the detector's geometry
                                places them as it places the rest of the frame                  */
    double origin_mm[3];     /* where the centre of frame pixel (0,0) would be on this module's
                                plane: its pixel (x, y) lies at origin_mm + x pixel_x_mm fast +
                                y pixel_y_mm slow (sw_diffraction_geometry's meaning)            */
    double fast[3], slow[3]; /* unit vectors of +x and +y                               */
    double pixel_x_mm, pixel_y_mm; /* its pixel pitch (> 0 with orientation)                  */
} sw_diffraction_module;

/*
 * A detector's modules (panels). Either equal modules in a grid, as Eiger and Pilatus detectors
 * are built: modules of module_w x module_h pixels from the frame's top-left corner, gap_x
 * columns and gap_y rows of dead pixels between them; the last column or row of modules may be
 * cut by the frame's edge; modules numbered row by row from 0 (panel = row * columns + column).
 * Or, when nmodules > 0, the modules listed (the grid's fields are then not used): panel k is
 * modules[k], and every pixel outside them is a gap. Listed modules lie inside the frame and do
 * not overlap (sw_diffraction_mask checks). A module with an orientation gives its pixels'
 * d-spacings through sw_diffraction_panel_geometry.
 */
typedef struct sw_diffraction_panels {
    int32_t module_w, module_h; /* pixels, > 0                */
    int32_t gap_x, gap_y;       /* pixels, >= 0               */
    const sw_diffraction_module *modules;
    int32_t nmodules;
} sw_diffraction_panels;

/* The panel holding pixel (x, y) (rounded to the nearest pixel) of a width x height frame, or -1
 * in a gap or outside the frame. */
int32_t sw_diffraction_panel_at(const sw_diffraction_panels *p, int32_t width, int32_t height,
                                double x, double y);
/* How many panels a width x height frame holds (columns x rows; or nmodules). */
int32_t sw_diffraction_panel_count(const sw_diffraction_panels *p, int32_t width, int32_t height);

/* The geometry of panel `panel`'s pixels: g, with the listed module's orientation and pixel size
 * when it has one (out = g otherwise, and for p NULL, a grid or a panel out of range). */
void sw_diffraction_panel_geometry(const sw_diffraction_geometry *g, const sw_diffraction_panels *p,
                                   int32_t panel, sw_diffraction_geometry *out);
/* d (angstrom) at (x, y) of a width x height frame: sw_diffraction_d_spacing with the geometry of
 * the panel holding the pixel (g outside every panel, and when p is NULL). */
double sw_diffraction_d_at(const sw_diffraction_geometry *g, const sw_diffraction_panels *p,
                           int32_t width, int32_t height, double x, double y);

/* What sw_diffraction_mask excludes. Zero (memset) is "nothing". */
typedef struct sw_diffraction_mask_params {
    double d_min;          /* angstrom: pixels with d <= d_min are masked; 0: no limit      */
    double d_max;          /* angstrom: pixels with d >= d_max are masked; 0: no limit      */
    int ice_rings;         /* 1: mask the ice rings (sw_diffraction_ice_rings)              */
    double ice_ring_width; /* in 1/d^2 (1/angstrom^2); 0: SW_DIFFRACTION_ICE_RING_WIDTH      */
    const sw_diffraction_shape *shapes; /* untrusted regions (the beam stop's shadow too)    */
    int32_t nshapes;
    const sw_diffraction_panels *panels; /* not NULL: the gaps between modules are masked,
                                            and each listed module's pixels judged by d with
                                            its own orientation when it has one           */
} sw_diffraction_mask_params;

/*
 * Clears (sets to 0) in mask (width x height bytes, row-major) every pixel that p excludes and
 * leaves the others as they were: start from all 1 (good), or from a detector's own mask, and the
 * result is their AND. Pixels are judged at their centres, as DIALS's masks do. d_min, d_max and
 * the ice rings need a geometry that passes sw_diffraction_geometry_check (g may be NULL when p
 * asks for none of them); the ice rings are listed down to the highest resolution on the frame
 * (its corners). masked, when not NULL, receives how many pixels this call cleared.
 * SW_EINVAL for a bad argument (a negative or inverted d range, a shape with a non-finite or
 * non-positive size, a polygon of fewer than 3 vertices, modules of no size or negative gaps,
 * listed modules outside the frame, overlapping, or with an orientation that is not unit vectors
 * and positive pixel sizes).
 */
sw_status sw_diffraction_mask(sw_context *ctx, const sw_diffraction_geometry *g,
                              const sw_diffraction_mask_params *p, int32_t width, int32_t height,
                              uint8_t *mask, int64_t *masked);

/* ------------------------------------------------------------------ per-image summary (summary.c)
 */

/*
 * The resolution limit of one image from its spots' d-spacings, by method 2 of Zhang Z., Sauter
 * N. K., van den Bedem H., Snell G., Deacon A. M. (2006), "Automated diffraction image analysis
 * and spot searching for high-throughput crystal screening", J. Appl. Cryst. 39, 112-119, section
 * 2.4.4 (DISTL), as DIALS's per-image analysis computes it (d_min_distl_method_2): shells of equal
 * reciprocal-space volume (equal steps of 1/d^3, 20 to 40 of them, the first holding 5% of the
 * distinct spacings or 25, at most a quarter), t0 the mean count of the first two shells; the
 * limit is the high-resolution edge of the first shell that, with the next one, holds fewer than
 * 0.15 t0 spots (else of the last shell but one). Non-finite or non-positive d are ignored.
 * *d_min receives the limit in angstrom, or 0 when there are 10 spots or fewer (DIALS's bound) or
 * their spacings do not spread.
 */
sw_status sw_diffraction_estimate_d_min(sw_context *ctx, const double *d, int64_t n, double *d_min);

/* One image's summary (DIALS's per-image analysis, Winter et al. 2018, names its counterparts). */
typedef struct sw_diffraction_summary {
    int64_t frame;
    int64_t n_spots;         /* spots on the frame                                      */
    int64_t n_spots_d_lt_4a; /* of them with d < 4 angstrom (-1: no geometry)            */
    int64_t n_spots_d_gt_4a; /* with d > 4 angstrom: DIALS's n_spots_4A (-1: no geometry) */
    double total_intensity;  /* summed spot intensities                                  */
    double d_min_estimate;   /* sw_diffraction_estimate_d_min, angstrom; 0: none         */
} sw_diffraction_summary;

/*
 * The summary of frame `frame` from spots[0..n-1] (the spots of that frame; d from each centroid
 * x, y). g may be NULL (or lack what resolution needs): then the d counts are -1 and there is no
 * estimate.
 */
sw_status sw_diffraction_summarise(sw_context *ctx, const sw_diffraction_geometry *g,
                                   const sw_spot *spots, int64_t n, int64_t frame,
                                   sw_diffraction_summary *out);
/* The same with each spot's d from its panel's geometry (sw_diffraction_d_at; panels may be
 * NULL) on a width x height frame. */
sw_status sw_diffraction_summarise_panels(sw_context *ctx, const sw_diffraction_geometry *g,
                                          const sw_diffraction_panels *panels, int32_t width,
                                          int32_t height, const sw_spot *spots, int64_t n,
                                          int64_t frame, sw_diffraction_summary *out);

/* ------------------------------------------------------------------ the spot table in HDF5
 * (spots_h5.c) */

/* What a spot table holds besides the spots' own fields. */
typedef struct sw_diffraction_table {
    int three_d;                         /* the spots are 3-D: frame is their weighted z, and
                                            z_var, bbox_z0, bbox_z1 are written               */
    double pixel_origin;                 /* added to x and y: 0 (spotwave's convention) or 0.5
                                            (DIALS's and XDS's)                               */
    const sw_diffraction_geometry *geom; /* not NULL: a d_a column (geometry checked first;
                                            d by sw_diffraction_d_at with the panels)         */
    const sw_diffraction_panels *panels; /* not NULL: a panel column                          */
    int32_t width, height;               /* the frame's size (for panel)                      */
} sw_diffraction_table;

/*
 * Writes spots[0..n-1] as an HDF5 file at path (replaced if it exists): a group /spots holding one
 * 1-D dataset of n values per column of `spotwave find`'s CSV, named as the CSV's columns (frame:
 * int64, or float64 for 3-D spots; x_px, y_px, x_var, y_var, intensity, z_var, d_a: float64;
 * npix, bbox_z0, bbox_z1: int64; bbox_x0 .. bbox_y1, panel: int32), then parent (int64: the
 * deblending parent, sw_spot.parent, 0 for every spot of a run without --deblend), each with a
 * "units" attribute;
 * /spots carries "pixel_origin" (the convention) and "count". SW_EIO when the file cannot be
 * written, SW_EINVAL for bad arguments.
 */
sw_status sw_diffraction_write_spots_h5(sw_context *ctx, const char *path, const sw_spot *spots,
                                        int64_t n, const sw_diffraction_table *t);

#ifdef __cplusplus
}
#endif

#endif /* SPOTWAVE_DIFFRACTION_H */
