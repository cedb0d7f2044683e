"""Pupil tracking on Hartmann-Shack images of the eye (pupil.h).

Method: Mompean J., Aragon J. L., Prieto P. M., Artal P. (2018), "GPU-based processing of
Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future Generation
Computer Systems 91, 177-190, section 3.1: Gaussian smoothing, Otsu's threshold, a morphological
close, the border pixels and a RANSAC ellipse, refined by least squares.
"""

import numpy as np

from . import _arrays, _context, _spotwave
from ._centroid import manual_geometry
from ._find import check_keywords, pixel_type

PUPIL = [("pupil", np.int32), ("cx_px", np.float64), ("cy_px", np.float64),
         ("a_px", np.float64), ("b_px", np.float64), ("angle_deg", np.float64),
         ("inliers", np.int32), ("valid", np.uint8), ("threshold", np.int32),
         ("failure", "U64"), ("near", np.int32), ("method", "U8")]


def _edge_level(v):
    """edge_level "auto" is pupil.h's SW_PUPIL_EDGE_AUTO (a negative level); numbers pass."""
    if isinstance(v, str):
        if v != "auto":
            raise ValueError(f"edge_level: expected a number in [0, 1) or 'auto', got {v!r}")
        return -1.0
    if v < 0:  # a negative level is the C library's "auto": say it by name, not by accident
        raise ValueError(f"edge_level: expected a number in [0, 1) or 'auto', got {v!r}")
    return v


class PupilPlan:
    """A pupil-tracking plan for frames of one size and pixel type (pupil.h,
    ``sw_pupil_create``).

    ``PupilPlan(shape, dtype, *, pupils=1, split_x=None, input_scale=0.0, gauss_radius=4,
    gauss_sigma=4.0, close_radius=4, candidates=1024, inlier_px=2.0, refine_iterations=3,
    min_radius_px=None, max_radius_px=0.0, min_coverage=0.25, otsu_classes=3, edge_level="auto",
    max_near_ratio=0.75, seed=1, pitch=None, grid=None, origin=None, lenslet_rule="full",
    ctx=None)``

    pupils: 1, or 2 for binocular images (split at column split_x, or at the valley between
    the eyes found per frame). The steps and their parameters are pupil.h's (the names of
    ``spotwave pupil``'s options): the 8-bit conversion (input_scale, 0: automatic), Gaussian
    smoothing (gauss_radius, gauss_sigma), Otsu's threshold (otsu_classes 2 or 3, edge_level: a
    fraction in [0, 1), or "auto", the default: the edge's half height measured from the glow
    beside the first ellipse, pupil.h step 3d; 0.4 tracks in about half the time),
    the close (close_radius), RANSAC (candidates, a multiple of 32; inlier_px; seed),
    refinement (refine_iterations) and the validity tests (min_radius_px, default a tenth of the
    smaller side; max_radius_px, 0: the larger side; min_coverage; max_near_ratio).
    With the lenslet grid (pitch, grid (nx, ny), origin (x0, y0), as :class:`CentroidPlan`) a
    run also fills a lenslet mask: 1 + p for a lenslet inside pupil p (its whole square,
    lenslet_rule "full", or its reference position, "centre"), 0 otherwise.
    pupil_method: "auto" (the glow path, the spots' envelope where it fails, where only a lower
    edge level found the pupil and its refit failed, and for every pupil at lenslet pitches of
    at most 4 x the smoothing's sigma; needs the lenslet grid), "glow" or "spots" (every pupil from the spots' envelope), as ``spotwave pupil
    --pupil-method``. given: the pupils themselves, skipping tracking: a list of (cx_px, cy_px,
    a_px, b_px, angle_deg), one per pupil (``--pupil-ellipse``).

    ``plan(image, lenslet_mask=None)``: image (height, width) or (frames, height, width), NumPy
    or device; lenslet_mask, a uint8 NumPy array (frames, ny, nx) to fill. Returns the table of
    :func:`pupil`.
    """

    def __init__(self, shape, dtype, *, pupils=1, split_x=None, input_scale=0.0, gauss_radius=4,
                 gauss_sigma=4.0, close_radius=4, candidates=1024, inlier_px=2.0,
                 refine_iterations=3, min_radius_px=None, max_radius_px=0.0, min_coverage=0.25,
                 otsu_classes=3, edge_level="auto", max_near_ratio=0.75, seed=1, pitch=None,
                 grid=None, origin=None, lenslet_rule="full", pupil_method="auto", given=None,
                 ctx=None):
        self.ctx = _context.resolve(ctx)
        if len(shape) != 2:
            raise ValueError(f"shape: expected (height, width), got {shape!r}")
        height, width = (int(n) for n in shape)
        params = dict(pupils=pupils, split_x=-1 if split_x is None else split_x,
                      input_scale=input_scale, gauss_radius=gauss_radius,
                      gauss_sigma=gauss_sigma, close_radius=close_radius, candidates=candidates,
                      inlier_px=inlier_px, refine_iterations=refine_iterations,
                      min_radius_px=min_radius_px, max_radius_px=max_radius_px,
                      min_coverage=min_coverage, otsu_classes=otsu_classes,
                      edge_level=_edge_level(edge_level), max_near_ratio=max_near_ratio,
                      seed=seed,
                      lenslet_rule=lenslet_rule, pupil_method=pupil_method,
                      given=_given(given, pupils))
        self.grid = None
        if pitch is not None:
            if grid is None or origin is None:
                raise TypeError("the lenslet grid needs pitch, grid and origin")
            g = manual_geometry((height, width), pitch, grid, origin)
            params.update(g)
            self.grid = (g["nx"], g["ny"])
        elif grid is not None or origin is not None:
            raise TypeError("grid and origin go with pitch (the lenslet grid)")
        self._plan = _spotwave.PupilPlan(self.ctx, width, height, pixel_type(dtype, "dtype"),
                                         params)
        self.shape, self.dtype = (height, width), np.dtype(dtype)

    pupils = property(lambda self: self._plan.pupils, doc="1 or 2.")

    def __call__(self, image, lenslet_mask=None):
        shape, _ = _arrays.shape_dtype(image, "image")
        obj, device = _arrays.as_input(image, "image", self.ctx)
        if lenslet_mask is not None:
            lenslet_mask, _ = _arrays.as_output(lenslet_mask, "lenslet_mask", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            cols = self._plan.run(obj, lenslet_mask)
        stack = len(shape) == 3
        dtype = np.dtype(([("frame", np.int32)] if stack else []) + PUPIL)
        out = np.empty(len(cols["pupil"]), dtype)
        for name in dtype.names:
            out[name] = cols[name]
        return out


def _given(given, n):
    """Given pupils: None, or n (cx_px, cy_px, a_px, b_px, angle_deg) ellipses (a circle: a =
    b), as `spotwave pupil --pupil-ellipse` gives them."""
    if given is None:
        return None
    g = [tuple(float(v) for v in e) for e in given]
    if len(g) != n or any(len(e) != 5 for e in g):
        raise ValueError(f"given: expected {n} (cx_px, cy_px, a_px, b_px, angle_deg) ellipses")
    return g


def pupil(image, *, binocular=False, **more):
    """Finds the pupil(s) of an eye's Hartmann-Shack image (as ``spotwave pupil``).

    image: (height, width) or (frames, height, width) of uint8, uint16, uint32 or float32, NumPy
    or device. binocular: two eyes side by side. More keywords: :class:`PupilPlan`'s, and
    lenslet_mask (a uint8 NumPy array (frames, ny, nx), or (ny, nx) for one frame, to fill;
    needs pitch, grid, origin).

    Returns a structured array with the columns of the ``spotwave pupil`` CSV, one row per pupil
    (and frame, with a first column ``frame`` for stacks): pupil (0: the left one), cx_px, cy_px
    (the centre, 0-based pixels), a_px >= b_px (semi-axes, pixels), angle_deg (of the major
    axis from +x towards +y, 0..180), inliers, valid, threshold (the 8-bit threshold, -1: none),
    failure (why a pupil was not found; '' when it was), near and method (glow, spots or given:
    how it was found, pupil.h); a pupil not found has NaN centre and axes.

    Method: Mompean et al. (2018), Future Generation Computer Systems 91, 177-190, section 3.1.
    """
    mask = more.pop("lenslet_mask", None)
    shape, dtype = _arrays.shape_dtype(image, "image")
    if len(shape) not in (2, 3):
        raise ValueError(f"image: expected a 2-D image (height, width) or a 3-D stack "
                         f"(frames, height, width), got a {len(shape)}-D array of shape {shape}")
    pixel_type(dtype, "image")
    check_keywords("pupil", more, PupilPlan)
    if "pupils" in more:
        raise TypeError("pupil: unexpected keyword argument 'pupils' (use binocular=True)")
    plan = PupilPlan(shape[-2:], dtype, pupils=2 if binocular else 1, **more)
    return plan(image, mask)
