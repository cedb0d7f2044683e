"""Ocular aberrometry on Hartmann-Shack images of one or two living eyes (aberrometry.h), as
``spotwave aberrometry``: per frame and eye the pupil, the Zernike aberrations and the refraction.

Method: Mompean J., Aragon J. L., Prieto P. M., Artal P. (2019), "GPU-based processing of
Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future Generation
Computer Systems 91, 177-190 (online 2018), the whole system of its Sec. 3: pupil tracking
(Sec. 3.1), the spots of the lenslets wholly inside the pupil searched by PAPYCS, the pyramidal
search, with a dynamic mesh from preliminary low-order fits and three discarding criteria, or by
the centre of mass or Reichenbach's algorithm (Sec. 3.2), their displacements from the reference
centroids fitted with Zernike polynomials over the analysis circle (Sec. 3.3). The refraction:
the power vectors of Thibos L. N., Hong X., Bradley A., Applegate R. A. (2004), "Accuracy and
precision of objective refraction from wavefront aberrations", J. Vision 4(4), 329-351, from the
second-order terms (with the 4th and 6th order terms when higher_order_rx), at the measurement
wavelength (the command's JSON also gives it corrected to the visible).

Conventions. Pixels are 0-based, (x, y) = (column, row), the centre of pixel (0, 0) at (0.0, 0.0).
Coefficients are micrometres by OSA/ANSI index j from 0 (Thibos, Applegate, Schwiegerling & Webb
2002, J. Refract. Surg. 18, S652-S660), orthonormal over the eye's pupil (``pupil_mm``), with the
OSA sign: a myopic eye has c(2, 0) > 0; piston is 0. Eye 1 is the left one in the image (smaller
x). pupil_mm = 2 R_px pixel_um / (1000 magnification), magnification = the pupil's size on the
lenslet array / at the eye; the default 0.61875 is the command's (that of ``spotwave.sim.eye``
with its defaults: a 5.12 mm pupil 576 pixels wide on 5.5 um pixels): give your instrument's.
"""

import os

import numpy as np

from . import _arrays, _context, _spotwave
from ._find import pixel_type
from ._pupil import _given

__all__ = ["AberrometryPlan", "Eye", "Measurement", "Reference", "FrameResult", "aberrometry",
           "reference", "COEF_TABLE", "SPOTS_TABLE", "DEFAULT_MAGNIFICATION"]

DEFAULT_MAGNIFICATION = 0.61875
_TYPES = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16", np.dtype(np.float32): "f32"}
_ALGORITHMS = ("papycs", "com", "reichenbach")

# spotwave aberrometry's CSV (a first column frame for several frames) and --spots table.
COEF_TABLE = [("eye", np.int32), ("j", np.int32), ("n", np.int32), ("m", np.int32),
              ("coef_um", np.float64)]
SPOTS_TABLE = np.dtype([("ix", np.int32), ("iy", np.int32), ("eye", np.uint8),
                        ("x_px", np.float64), ("y_px", np.float64), ("x0_px", np.float64),
                        ("y0_px", np.float64), ("status", np.uint8)])


def _image(x, name):
    if isinstance(x, (str, os.PathLike)):
        from ._io import read  # noqa: PLC0415

        return read(x)
    return x


class Reference:
    """The calibration (:func:`reference`): ``geometry`` dict(x0, y0, pitch, nx, ny, pixel_um,
    focal_mm), ``source`` ("reference": found in the image, or "options"), the reference
    centroids ``ref_x``, ``ref_y`` ((ny, nx) float64 pixels, NaN where no spot was found),
    ``found`` (their number) and the image's ``shape`` and ``dtype``."""

    def __init__(self, geometry, source, ref_x, ref_y, found, shape, dtype):
        self.geometry, self.source = geometry, source
        self.ref_x, self.ref_y, self.found = ref_x, ref_y, found
        self.shape, self.dtype = shape, dtype

    def __repr__(self):
        g = self.geometry
        return (f"spotwave.aberrometry.Reference(grid=({g['nx']}, {g['ny']}), "
                f"pitch={g['pitch']:g}, found={self.found}, source='{self.source}')")


def reference(image, *, pitch=None, grid=None, origin=None, pixel_um=5.5, focal_mm=3.5,
              ctx=None):
    """The reference centroids of a reference image (no eye: a flat wavefront through the
    lenslets; aberrometry.h, ``sw_aberrometry_reference``: PAPYCS from the lenslets' optical
    axes with windows of the lenslet size). The lenslet grid: pitch (pixels), grid (nx, ny) and
    origin (x0, y0), all three, or none to find it in the image (``spotwave.find_geometry``).
    image: a 2-D array (uint8, uint16 or float32) or a file name. Returns a :class:`Reference`;
    ValueError when no spot is found."""
    ctx = _context.resolve(ctx)
    image = _image(image, "reference")
    shape, dtype = _arrays.shape_dtype(image, "reference")
    if len(shape) != 2:
        raise ValueError(f"reference: expected one 2-D frame, got shape {shape}")
    given = [v is not None for v in (pitch, grid, origin)]
    if any(given) and not all(given):
        raise TypeError("the lenslet grid needs all of pitch, grid and origin (or none: found "
                        "in the reference)")
    if all(given):
        nx, ny = (int(v) for v in grid)
        x0, y0 = (float(v) for v in origin)
        geom = dict(x0=x0, y0=y0, pitch=float(pitch), nx=nx, ny=ny, pixel_um=float(pixel_um),
                    focal_mm=float(focal_mm))
        source = "options"
    else:
        from ._centroid import find_geometry  # noqa: PLC0415

        geom = find_geometry(image, pixel_um=pixel_um, focal_mm=focal_mm, ctx=ctx)
        source = "reference"
    obj, device = _arrays.as_input(image, "reference", ctx)
    with _arrays.DeviceRun(ctx, device):
        rx, ry, found = _spotwave.aberrometry_reference(ctx, geom, obj)
    if found < 1:
        raise ValueError(f"reference: no spot found in any of the {geom['nx']}x{geom['ny']} "
                         f"lenslets")
    ny, nx = geom["ny"], geom["nx"]
    return Reference(geom, source, rx.reshape(ny, nx), ry.reshape(ny, nx), found, shape,
                     np.dtype(dtype))


_reference = reference  # the name `reference` is aberrometry()'s argument


class Eye:
    """One eye's result: ``valid`` and ``failure`` (why not: "no pupil", "few spots", ...);
    ``pupil`` (the tracker's ellipse: cx_px, cy_px, a_px, b_px, angle_deg, inliers, valid,
    failure); the analysis circle ``cx_px``, ``cy_px``, ``radius_px``; ``pupil_mm`` (the
    coefficients' pupil) and ``measured_pupil_mm``; the lenslets ``lenslets`` (used),
    ``central`` (in the static central mesh), ``found``, ``kept``, ``discarded`` (by criterion 1,
    2, 3), ``outliers`` (of the kept, rejected by the final fit); ``terms``; ``coef_um`` (OSA j = 0 .. terms - 1, um, NaN when invalid); ``prelim_um``
    (the first preliminary fit); ``residual_px`` (RMS of the fit's residual slopes); ``rx``
    (sphere_d, cyl_d, axis_deg in minus-cylinder form, M, J0, J45, dioptres); ``rms_um``
    (orders >= 2) and ``hoa_rms_um`` (orders >= 3)."""

    def __init__(self, d):
        self.__dict__.update(d)
        self.measured_pupil_mm = d["pupil_mm"]
        if not self.valid:
            self.coef_um = np.full(self.terms, np.nan)

    def __repr__(self):
        if not self.valid:
            return f"spotwave.aberrometry.Eye(valid=False, failure='{self.failure}')"
        r = self.rx
        return (f"spotwave.aberrometry.Eye(pupil_mm={self.pupil_mm:.3f}, kept={self.kept}, "
                f"rms_um={self.rms_um:.3f}, rx={r['sphere_d']:+.2f} {r['cyl_d']:+.2f} x "
                f"{r['axis_deg']:.0f})")


class FrameResult:
    """One frame: ``eyes`` (one or two :class:`Eye`), the tracker's 8-bit ``scale`` and
    ``split_x`` (the column between two eyes)."""

    def __init__(self, d, frame=0):
        self.frame = frame
        self.scale, self.split_x = d["scale"], d["split_x"]
        self.eyes = [Eye(e) for e in d["eyes"]]

    def __repr__(self):
        return f"spotwave.aberrometry.FrameResult(frame={self.frame}, eyes={self.eyes})"


class AberrometryPlan:
    """The aberrometry plan (aberrometry.h, ``sw_aberrometry_create``) for frames of one shape
    and dtype and one calibration.

    ``AberrometryPlan(reference, *, shape=None, dtype=None, eyes=1, algorithm="papycs",
    order=6, prelim_order=None, central_fraction=0.5, mesh_stages=4, mesh_tolerance=0.25,
    mesh_slopes=4, mesh_residual=0.2, outlier_sigma=5.0, outlier_min_px=1.0,
    neighbour_window=1.0, fit_radius_px=0.0, magnification=0.61875, vertex_mm=0.0, window=None, discard=True, contrast=15.0,
    discard_ring=0, streams=2, higher_order_rx=False, pupil_method="auto", given=None, ctx=None)``

    reference: a :class:`Reference` (its grid and centroids; shape and dtype default to its
    image's). eyes: 1 or 2 (binocular). algorithm: "papycs" (Mompean et al. 2019 Sec. 3.2.1),
    "com" or "reichenbach" (Sec. 3.2.2-3.2.3). order: fitted radial orders 1..order (<= 10).
    prelim_order: the dynamic mesh's first preliminary fit (default min(3, order); 0: the static
    mesh only), central_fraction (of the analysis radius), mesh_stages (1: the paper's single
    stage), mesh_tolerance (pitches; 0: no mesh check), mesh_slopes (a stage fits more orders
    while its spots give this many slopes per unknown; 0: the stage's own order), mesh_residual
    (a raised fit whose residual RMS exceeds this many pixels gives way to the stage's own order;
    inf: never), outlier_sigma and outlier_min_px (the final fit rejects its worst spot, one at a
    time and at most 8 per eye, while that spot's residual exceeds outlier_sigma times the fit's
    residual RMS and outlier_min_px pixels; 0: none), neighbour_window (no first PAPYCS window wider than this times the distance to a
    neighbour's predicted spot: 1, the default, never reaches past the midpoint; 0: the paper's
    windows); as ``spotwave aberrometry --mesh-slopes / --mesh-residual / --outlier-sigma /
    --outlier-min-px / --neighbour-window``.
    fit_radius_px: a fixed analysis radius
    (0: the pupil ellipse's major semi-axis). magnification: see the module. vertex_mm: the
    refraction at a spectacle plane. window: the first search window (default: the pitch rounded
    down). discard, contrast, discard_ring: the discarding criteria (discard_ring: criterion 1's
    distance in pixels, 0: the pitch / 32 rounded, at least 1). streams: frames in flight on the GPU.
    higher_order_rx: the refraction ``rx`` with the 4th and 6th orders (Thibos et al. 2004's
    Seidel terms) instead of the second-order terms alone (the default, as the command's).
    pupil_method ("auto", "glow", "spots") and given (one (cx_px, cy_px, a_px, b_px, angle_deg)
    ellipse per eye, skipping tracking): as :class:`spotwave.PupilPlan` and ``spotwave
    aberrometry --pupil-method / --pupil-ellipse``.

    ``plan(frame)``: a 2-D frame -> :class:`FrameResult`; a 3-D stack -> a list of them (run as
    a batch). Host or device frames (CUDA context). ``plan.spots()``: the last frame's lenslets.
    """

    def __init__(self, reference, *, shape=None, dtype=None, eyes=1, algorithm="papycs",
                 order=6, prelim_order=None, central_fraction=0.5, mesh_stages=4,
                 mesh_tolerance=0.25, mesh_slopes=4, mesh_residual=0.2, outlier_sigma=5.0,
                 outlier_min_px=1.0, neighbour_window=1.0, fit_radius_px=0.0,
                 magnification=DEFAULT_MAGNIFICATION, vertex_mm=0.0, window=None, discard=True,
                 contrast=15.0, discard_ring=0, streams=2,
                 higher_order_rx=False, pupil_method="auto", given=None, ctx=None):
        self.ctx = _context.resolve(ctx)
        if not isinstance(reference, Reference):
            raise TypeError(f"reference: expected a spotwave.aberrometry.Reference (from "
                            f"spotwave.aberrometry.reference()), got {type(reference).__name__}")
        shape = reference.shape if shape is None else tuple(int(v) for v in shape)
        dtype = reference.dtype if dtype is None else np.dtype(dtype)
        if eyes not in (1, 2):
            raise ValueError(f"eyes: {eyes!r} is not 1 or 2")
        if algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm: '{algorithm}' is not 'papycs', 'com' or 'reichenbach'")
        if prelim_order is None:
            prelim_order = min(3, int(order))
        elif prelim_order > order:
            raise ValueError(f"prelim_order {prelim_order} is above order {order}")
        if not discard and (contrast != 15.0 or discard_ring != 0):
            raise TypeError(f"{'contrast' if contrast != 15.0 else 'discard_ring'} sets a "
                            f"discarding criterion: it needs discard=True")
        g = reference.geometry
        params = dict(g, width=shape[1], height=shape[0],
                      pixel_type=pixel_type(dtype, "dtype", _TYPES), n_eyes=int(eyes),
                      algorithm=algorithm, order=int(order), prelim_order=int(prelim_order),
                      central_fraction=central_fraction, mesh_stages=mesh_stages,
                      mesh_tolerance=mesh_tolerance, mesh_slopes_per_term=int(mesh_slopes),
                      mesh_raise_residual_px=float(mesh_residual),
                      outlier_sigma=float(outlier_sigma), outlier_min_px=float(outlier_min_px),
                      neighbour_window=neighbour_window, fit_radius_px=fit_radius_px,
                      magnification=magnification, vertex_mm=vertex_mm,
                      window_px=0 if window is None else int(window), discard=bool(discard),
                      discard_contrast=contrast, discard_ring_px=int(discard_ring),
                      streams=streams,
                      higher_order_rx=bool(higher_order_rx), pupil_method=pupil_method,
                      given=_given(given, int(eyes)),
                      ref_x=np.ascontiguousarray(reference.ref_x, np.float64),
                      ref_y=np.ascontiguousarray(reference.ref_y, np.float64))
        self._p = _spotwave.AberrometryPlan(self.ctx, params)
        self.reference, self.shape, self.dtype = reference, shape, dtype
        self.eyes, self.order, self.algorithm = int(eyes), int(order), algorithm
        self.vertex_mm = float(vertex_mm)
        self.higher_order_rx = bool(higher_order_rx)
        self.params = {k: v for k, v in params.items() if k not in ("ref_x", "ref_y")}

    def __call__(self, frames):
        shape, _ = _arrays.shape_dtype(frames, "image")
        obj, device = _arrays.as_input(frames, "image", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            res = self._p.run(obj)
        out = [FrameResult(d, k) for k, d in enumerate(res)]
        return out if len(shape) == 3 else out[0]

    def spots(self):
        """The last frame's lenslets (the command's --spots table): ix, iy, eye (0: in no pupil),
        x_px, y_px (the centroid, NaN when not found), x0_px, y0_px (where the final search
        started), status (search.h: 0 found, 1 not searched, 2 outside the frame, 3 flat,
        4 not found, 5..7 discarded: empty cell, spacing, isolated; 8 rejected by the final fit
        as an outlier)."""
        d = self._p.spots()
        g = self.reference.geometry
        n = g["nx"] * g["ny"]
        t = np.empty(n, SPOTS_TABLE)
        t["ix"] = np.arange(n) % g["nx"]
        t["iy"] = np.arange(n) // g["nx"]
        for k in ("eye", "x_px", "y_px", "x0_px", "y0_px", "status"):
            t[k] = d[k]
        return t

    def enable_timing(self, on=True):
        """Per-stage device times (CUDA) for :meth:`stage_us`."""
        self._p.enable_timing(bool(on))

    def stage_us(self):
        """The last run's device times (us): copy in + pupil, the dynamic mesh, the final search
        and discarding, the mesh check + fit + copy out; -1 when not measured."""
        return self._p.stage_us()

    def __repr__(self):
        g = self.reference.geometry
        return (f"spotwave.aberrometry.AberrometryPlan(shape={self.shape}, dtype={self.dtype}, "
                f"grid=({g['nx']}, {g['ny']}), eyes={self.eyes}, algorithm='{self.algorithm}', "
                f"order={self.order})")


class Measurement:
    """What :func:`aberrometry` returns: ``frames`` (one :class:`FrameResult` per frame),
    ``reference`` (the :class:`Reference`), ``plan`` (the :class:`AberrometryPlan`: its
    ``spots()`` are the last frame's). ``table(index="ansi")``: the command's CSV as a structured
    array eye, j, n, m, coef_um (a first column frame for several frames); j by OSA/ANSI from 0,
    or Noll from 1 with index="noll"."""

    def __init__(self, frames, reference, plan, stack):
        self.frames, self.reference, self.plan, self._stack = frames, reference, plan, stack

    def table(self, index="ansi"):
        from . import zernike as zk  # noqa: PLC0415

        if index not in ("ansi", "osa", "noll"):
            raise ValueError(f"index: '{index}' is not 'ansi' or 'noll'")
        noll = index == "noll"
        terms = zk.count(self.plan.order)
        rows = []
        for f in self.frames:
            for e, eye in enumerate(f.eyes):
                for r in range(terms):
                    j = r + 1 if noll else r
                    n, m = zk.noll_to_nm(j) if noll else zk.osa_to_nm(j)
                    osa = zk.osa_index(n, m)
                    c = eye.coef_um[osa] if eye.valid and osa < eye.terms else np.nan
                    rows.append((f.frame, e + 1, j, n, m, c))
        cols = ([("frame", np.int64)] if self._stack else []) + COEF_TABLE
        t = np.empty(len(rows), np.dtype(cols))
        for i, name in enumerate(("frame", "eye", "j", "n", "m", "coef_um")):
            if name in t.dtype.names:
                t[name] = [r[i] for r in rows]
        return t

    def __repr__(self):
        return f"spotwave.aberrometry.Measurement(frames={len(self.frames)}, plan={self.plan})"


def aberrometry(images, *, reference, pitch=None, grid=None, origin=None, pixel_um=5.5,
                focal_mm=3.5, binocular=False, pupil_mm=None, ctx=None, **options):
    """Measures the ocular aberrations of one eye (or two, binocular=True) on Hartmann-Shack
    frames, as ``spotwave aberrometry`` (the same numbers on the same images). Returns a
    :class:`Measurement`.

    images: a 2-D frame, a 3-D stack (frames, height, width) or a file name (FITS, PGM, HDF5);
    reference: the reference image (array or file name): a flat wavefront through every lenslet,
    no eye. The lenslet grid: pitch, grid and origin (all three), or none to find it in the
    reference; pixel_um, focal_mm. options: those of :class:`AberrometryPlan` (algorithm,
    order, prelim_order, central_fraction, mesh_stages, mesh_tolerance, mesh_slopes,
    neighbour_window, fit_radius_px, magnification, vertex_mm, window, discard, contrast,
    discard_ring, streams, higher_order_rx). pupil_mm:
    report every eye's coefficients and refraction over this pupil (at most the measured one:
    they are rescaled).
    """
    from ._find import check_keywords  # noqa: PLC0415

    check_keywords("aberrometry", options, AberrometryPlan)
    for k in ("reference", "shape", "dtype", "eyes", "ctx"):
        if k in options:
            raise TypeError(f"aberrometry: unexpected keyword argument '{k}'")
    ctx = _context.resolve(ctx)
    images = _image(images, "images")
    shape, dtype = _arrays.shape_dtype(images, "images")
    if len(shape) not in (2, 3):
        raise ValueError(f"images: expected a 2-D frame or a 3-D stack, got shape {shape}")
    pixel_type(dtype, "images", _TYPES)
    ref_img = _image(reference, "reference")
    rshape, rdtype = _arrays.shape_dtype(ref_img, "reference")
    if rshape != shape[-2:]:
        raise ValueError(f"reference: {rshape[1]}x{rshape[0]}, the images {shape[-1]}x"
                         f"{shape[-2]}: the reference must come from the same camera and size")
    ref = _reference(ref_img, pitch=pitch, grid=grid, origin=origin, pixel_um=pixel_um,
                     focal_mm=focal_mm, ctx=ctx)
    plan = AberrometryPlan(ref, shape=shape[-2:], dtype=dtype, eyes=2 if binocular else 1,
                           ctx=ctx, **options)
    res = plan(images)
    frames = res if isinstance(res, list) else [res]
    if pupil_mm is not None:
        if not pupil_mm > 0:
            raise ValueError(f"pupil_mm: {pupil_mm!r} is not a positive number")
        for f in frames:
            for k, e in enumerate(f.eyes):
                if not e.valid:
                    continue
                if pupil_mm > e.pupil_mm * (1.0 + 1e-9):
                    raise ValueError(f"frame {f.frame}, eye {k + 1}: pupil_mm {pupil_mm:g} is "
                                     f"larger than the measured pupil of {e.pupil_mm:.4g} mm "
                                     f"(coefficients are only rescaled to a smaller pupil)")
                c, rx = _spotwave.aberrometry_rescale_eye(ctx, e.coef_um, e.pupil_mm,
                                                          float(pupil_mm), plan.vertex_mm,
                                                          plan.higher_order_rx)
                e.coef_um, e.rx, e.pupil_mm = c, rx, float(pupil_mm)
                e.rms_um = _spotwave.zernike_rms(c, 3)
                e.hoa_rms_um = _spotwave.zernike_rms(c, 6) if e.terms > 6 else np.nan
    return Measurement(frames, ref, plan, len(shape) == 3)
