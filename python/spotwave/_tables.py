"""Tables: NumPy structured arrays whose fields are the columns of the ``spotwave`` command's CSV
files (DESIGN.md), in the same order. ``pandas.DataFrame(table)`` and
``astropy.table.Table(table)`` read them as they are."""

import numpy as np

# spotwave find: one row per spot.
FIND = np.dtype([
    ("frame", np.int64), ("x_px", np.float64), ("y_px", np.float64), ("x_var", np.float64),
    ("y_var", np.float64), ("intensity", np.float64), ("npix", np.int64), ("bbox_x0", np.int32),
    ("bbox_x1", np.int32), ("bbox_y0", np.int32), ("bbox_y1", np.int32),
])
# spotwave find --3d: the frame is the intensity-weighted frame, plus its variance and extent.
FIND_3D = np.dtype([
    ("frame", np.float64), ("x_px", np.float64), ("y_px", np.float64), ("x_var", np.float64),
    ("y_var", np.float64), ("intensity", np.float64), ("npix", np.int64), ("bbox_x0", np.int32),
    ("bbox_x1", np.int32), ("bbox_y0", np.int32), ("bbox_y1", np.int32), ("z_var", np.float64),
    ("bbox_z0", np.int64), ("bbox_z1", np.int64),
])
# spotwave find --refine: these columns follow (refine.h's flags, the fitted flux and width, and
# the local background above the bias).
FIND_REFINE = [("refine_flags", np.int32), ("flux_adu", np.float64), ("sigma_px", np.float64),
               ("background_adu", np.float64)]
FIND_REFINED = np.dtype(FIND.descr + FIND_REFINE)

# spotwave centroid: one row per lenslet (and frame).
CENTROID = [("ix", np.int32), ("iy", np.int32), ("x_px", np.float32), ("y_px", np.float32),
            ("intensity", np.float32), ("valid", np.uint8)]
CENTROID_REF = [("dx_px", np.float32), ("dy_px", np.float32)]
CENTROID_SAT = [("saturated", np.uint8)]
# The method's status and error bars (centroid.h "Status", "Error bars").
CENTROID_MEASURE = [("status", np.uint8), ("x_var", np.float32), ("y_var", np.float32),
                    ("snr", np.float32)]


def centroid_dtype(frames, reference):
    """The centroid table's dtype: a first column `frame` for stacks, dx_px, dy_px with a
    reference, then saturated, status, x_var, y_var, snr."""
    cols = ([("frame", np.int32)] if frames else []) + CENTROID
    return np.dtype(cols + (CENTROID_REF if reference else []) + CENTROID_SAT +
                    CENTROID_MEASURE)


# spotwave sim stars --truth: the stars whose centre lies on the image.
STARS_TRUTH = np.dtype([("x_px", np.float64), ("y_px", np.float64), ("flux_e", np.float64),
                        ("mag", np.float64)])
# spotwave sim sh --truth: one row per lenslet (the slopes of the mean wavefront gradient added).
SH_TRUTH = np.dtype([
    ("ix", np.int32), ("iy", np.int32), ("x_px", np.float64), ("y_px", np.float64),
    ("ref_x_px", np.float64), ("ref_y_px", np.float64), ("illum", np.float64),
    ("slope_x_rad", np.float64), ("slope_y_rad", np.float64),
])


def from_columns(dtype, columns):
    """A structured array of `dtype` filled from a dict of equal-length 1-D arrays."""
    n = len(next(iter(columns.values()))) if columns else 0
    out = np.empty(n, dtype)
    for name in dtype.names:
        out[name] = columns[name]
    return out
