"""Zernike polynomials: index conversion, the modal fit of Shack-Hartmann slopes, refraction and
pupil transforms (zernike.h, zernike_fit.h).

Conventions: OSA/ANSI Z80.28 single index j = (n (n + 2) + m) / 2 from 0 (Thibos L. N.,
Applegate R. A., Schwiegerling J. T., Webb R. (2002), "Standards for reporting the optical
aberrations of eyes", J. Refract. Surg. 18, S652-S660); Noll's index from 1 (Noll R. J. (1976),
"Zernike polynomials and atmospheric turbulence", J. Opt. Soc. Am. 66(3), 207-211) names the
same functions in another order. Orthonormal over the unit disc (RMS-normalised), x along the
detector's +x (columns) and y along +y (rows), theta counter-clockwise from +x in that frame.
Coefficients in micrometres with the OSA sign: a positive wavefront leads (is phase advanced),
so a myopic eye has c(2, 0) > 0.

The fit: Mompean J., Aragon J. L., Prieto P. M., Artal P. (2018), "GPU-based processing of
Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future Generation
Computer Systems 91, 177-190, section 3.3: each lenslet's slope is the mean wavefront gradient
over its part of the pupil (exact, by Green's theorem), solved by least squares through the
pseudo-inverse (or a QR factorisation).
"""

import numpy as np

from . import _arrays, _context, _spotwave

MAX_ORDER = _spotwave.ZERNIKE_MAX_ORDER


def osa_index(n, m):
    """OSA/ANSI index j of Z(n, m) (from 0); ValueError for an invalid (n, m)."""
    j = _spotwave.zernike_osa(int(n), int(m))
    if j < 0:
        raise ValueError(f"(n, m) = ({n}, {m}) is not a Zernike polynomial (|m| <= n, n - m even, "
                         f"n <= {MAX_ORDER})")
    return j


def noll_index(n, m):
    """Noll index of Z(n, m) (from 1); ValueError for an invalid (n, m)."""
    j = _spotwave.zernike_noll(int(n), int(m))
    if j < 0:
        raise ValueError(f"(n, m) = ({n}, {m}) is not a Zernike polynomial (|m| <= n, n - m even, "
                         f"n <= {MAX_ORDER})")
    return j


def osa_to_nm(j):
    """(n, m) of OSA/ANSI index j (from 0)."""
    return _spotwave.zernike_osa_nm(int(j))


def noll_to_nm(j):
    """(n, m) of Noll index j (from 1)."""
    return _spotwave.zernike_noll_nm(int(j))


def osa_to_noll(j):
    """The Noll index (from 1) of OSA/ANSI index j (from 0)."""
    return noll_index(*osa_to_nm(j))


def noll_to_osa(j):
    """The OSA/ANSI index (from 0) of Noll index j (from 1)."""
    return osa_index(*noll_to_nm(j))


def count(order):
    """Terms up to and including radial order `order`: (order + 1)(order + 2) / 2."""
    return _spotwave.zernike_count(int(order))


def to_noll(coef):
    """Coefficients by OSA/ANSI j (c[0] = piston) reordered by Noll index: out[k] is Noll k + 1.
    The length must cover whole radial orders (1, 3, 6, 10, ... terms). The polynomials are the
    same functions in both orderings, so no value changes sign."""
    c = np.asarray(coef, np.float64)
    perm = _noll_permutation(c.shape[-1])
    return c[..., perm]


def from_noll(coef):
    """Coefficients by Noll index (out of :func:`to_noll`, or aotools / HCIPy's Noll ordering
    from index 1) back to OSA/ANSI order."""
    c = np.asarray(coef, np.float64)
    perm = _noll_permutation(c.shape[-1])
    out = np.empty_like(c)
    out[..., perm] = c
    return out


def _noll_permutation(n):
    order = 0
    while count(order) < n:
        order += 1
    if count(order) != n:
        raise ValueError(f"{n} coefficients do not cover whole radial orders (1, 3, 6, 10, ...)")
    return np.array([noll_to_osa(k + 1) for k in range(n)], np.int64)


def refraction(coef, pupil_mm, *, higher_orders=False, vertex_mm=0.0, shift_d=0.0):
    """The refraction of a wavefront (OSA coefficients in um over a pupil of diameter pupil_mm):
    power vector M, J0, J45 (dioptres) and sphere_d, cyl_d (minus-cylinder form), axis_deg
    (0 <= axis < 180, from +x towards +y). Second order only, or with higher_orders the 4th and
    6th order terms too; vertex_mm > 0 moves sphere and cylinder to a spectacle plane; shift_d
    dioptres are added to M (e.g. ``eye_lca(0.78, 0.555)`` for a near-infrared measurement).

    Method: Thibos L. N., Hong X., Bradley A., Applegate R. A. (2004), "Accuracy and precision of
    objective refraction from wavefront aberrations", J. Vision 4(4), 329-351.
    """
    c = np.ascontiguousarray(np.asarray(coef, np.float64))
    return _spotwave.zernike_refraction(c, float(pupil_mm), bool(higher_orders), float(vertex_mm),
                                        float(shift_d))


def eye_lca(from_um, to_um):
    """Dioptres to add to a refraction measured at from_um to get it at to_um (micrometres): the
    longitudinal chromatic aberration of the Chromatic Eye, Rx = p - 0.63346 / (lambda - 0.21410)
    (Thibos L. N., Ye M., Zhang X., Bradley A. (1992), "The chromatic eye: a new reduced-eye model
    of ocular chromatic aberration in humans", Appl. Opt. 31(19), 3594-3600). 0.78 -> 0.555 um:
    -0.739 D."""
    return _spotwave.eye_lca_d(float(from_um), float(to_um))


def flip(coef, x=False, y=False):
    """The coefficients of a wavefront seen through a mirrored image: x changes the sign of the
    terms odd in x (x -> -x, as mirror_x), y of those odd in y (every sin term, m < 0)."""
    c = np.ascontiguousarray(np.asarray(coef, np.float64))
    return _spotwave.zernike_flip(c, bool(x), bool(y))


def transpose(sphere_d, cyl_d, axis_deg):
    """A sphero-cylinder in the other cylinder form: (sphere + cyl, -cyl, axis + 90), the axis in
    clinical notation 1..180."""
    return _spotwave.refraction_transpose(float(sphere_d), float(cyl_d), float(axis_deg))


def image_quality(coef, pupil_mm, *, wavelength_um=0.555, size=256, pupil_samples=None,
                  first_j=3, ctx=None):
    """The PSF and MTF of a wavefront (OSA coefficients in um over pupil_mm) at wavelength_um, on
    an size x size FFT grid with pupil_samples (default size // 2) across the pupil (quality.h;
    cuFFT on a CUDA context, FFTW on the CPU). Returns (psf, mtf, numbers): psf normalised to the
    diffraction-limited peak (so its maximum is the Strehl ratio), optical axis at
    [size // 2, size // 2], one pixel ``numbers["arcmin_per_px"]``; mtf with zero frequency at the
    centre, one pixel ``numbers["cpd_per_px"]`` cycles per degree; numbers also holds strehl,
    vsotf and vsmtf (the visual Strehl ratios of Thibos, Hong, Bradley & Applegate 2004, J. Vision
    4(4), 329-351, weighted by Mannos & Sakrison's 1974 contrast sensitivity function) and
    cutoff_cpd. first_j: the first OSA term used (3 leaves piston and tilts out)."""
    c = np.ascontiguousarray(np.asarray(coef, np.float64))
    q = int(size) // 2 if pupil_samples is None else int(pupil_samples)
    psf, mtf, d = _spotwave.image_quality(_context.resolve(ctx), c, float(pupil_mm),
                                          float(wavelength_um), int(size), q, int(first_j))
    n = int(size)
    return psf.reshape(n, n), mtf.reshape(n, n), d


def rescale(coef, from_diameter, to_diameter):
    """The same wavefront over a concentric smaller pupil: coefficients over a pupil of diameter
    from_diameter written in the basis of to_diameter (<= from_diameter; any unit). Exact."""
    c = np.ascontiguousarray(np.asarray(coef, np.float64))
    return _spotwave.zernike_rescale(c, float(from_diameter), float(to_diameter))


def mirror_x(coef):
    """Mirror image about the vertical axis (x -> -x), the OSA convention between a left eye and
    the right-eye frame: c'(n, m) = (-1)^m c(n, m) for m >= 0, -(-1)^|m| c(n, m) for m < 0."""
    c = np.ascontiguousarray(np.asarray(coef, np.float64))
    return _spotwave.zernike_mirror_x(c)


class FitPlan:
    """A Zernike fit plan: the derivative matrix of the lenslets of a grid inside a pupil,
    factorised once (zernike_fit.h, ``sw_zfit_create``).

    ``FitPlan(*, grid, pitch, pupil_radius_px, pupil_center_px=None, origin=(0, 0),
    pixel_um=5.5, focal_mm=3.5, mask=None, order=6, obscuration=0.0, min_illum=0.5,
    method="pinv", truncate=0, weights=None, slope_layout="blocks", max_frames=1, ctx=None)``

    The lenslet grid as :class:`spotwave.CentroidPlan`'s (grid (nx, ny), pitch in pixels,
    origin the corner pixel of lenslet (0, 0)); the pupil on the detector in pixels (the
    lenslets image 1:1): centre (default: the centre of the grid's reference positions, where
    ``spotwave sim sh`` centres its pupil) and radius; mask (ny, nx): the lenslets whose slopes
    the slope vector holds (default all), as the centroid plan's; lenslets with less than
    min_illum of their area inside the pupil are not used; weights (ny, nx) >= 0.

    ``plan(slopes, valid=None, out=None)``: slopes (frames, 2 * nslopes) float32 in the plan's
    layout (pixels; a CentroidResult's ``slopes``), valid (frames, ny, nx) uint8 or None (a
    lenslet flagged 0 or with a NaN slope is left out of that frame's fit), NumPy or device
    arrays; returns the coefficients (frames, terms) float64, um by OSA j, piston 0 (invisible
    to slopes); a frame left with fewer slopes than unknowns gets NaN. ``plan.residual`` holds
    the last run's RMS slope residual per frame (pixels).
    """

    def __init__(self, *, grid, pitch, pupil_radius_px, pupil_center_px=None, origin=(0.0, 0.0),
                 pixel_um=5.5, focal_mm=3.5, mask=None, order=6, obscuration=0.0, min_illum=0.5,
                 method="pinv", truncate=0, weights=None, slope_layout="blocks", max_frames=1,
                 ctx=None):
        self.ctx = _context.resolve(ctx)
        nx, ny = (int(v) for v in grid)
        x0, y0 = (float(v) for v in origin)
        if pupil_center_px is None:
            pupil_center_px = (x0 - 0.5 + 0.5 * pitch * nx, y0 - 0.5 + 0.5 * pitch * ny)
        cx, cy = (float(v) for v in pupil_center_px)
        params = dict(x0=x0, y0=y0, pitch=pitch, nx=nx, ny=ny, pixel_um=pixel_um,
                      focal_mm=focal_mm, pupil_cx_px=cx, pupil_cy_px=cy,
                      pupil_radius_px=pupil_radius_px, obscuration=obscuration, order=order,
                      min_illum=min_illum, method=method, truncate=truncate,
                      slope_layout=slope_layout, max_frames=max_frames)
        if mask is not None:
            m = _arrays.host_array(mask, "mask")
            params["mask"] = m.view(np.uint8) if m.dtype == np.bool_ else m
        if weights is not None:
            params["weights"] = np.ascontiguousarray(_arrays.host_array(weights, "weights"),
                                                     np.float64)
        self._plan = _spotwave.ZernikeFitPlan(self.ctx, params)
        self.grid = (nx, ny)
        self.residual = None

    terms = property(lambda self: self._plan.terms, doc="Coefficients per frame (OSA 0..J-1).")
    nslopes = property(lambda self: self._plan.nslopes, doc="Slopes per frame and axis.")
    used = property(lambda self: self._plan.used, doc="Slopes (lenslets) the fit uses.")
    max_frames = property(lambda self: self._plan.max_frames, doc="Largest batch.")

    def matrix(self):
        """The derivative matrix (2 nslopes, terms - 1): pixels of slope per um of coefficient j
        = 1 .. terms - 1 (x rows, then y rows; rows of unused lenslets 0)."""
        return self._plan.matrix().reshape(2 * self.nslopes, self.terms - 1)

    def illum(self):
        """The illuminated fraction (0..1) of each slope's lenslet."""
        return self._plan.illum()

    def __call__(self, slopes, valid=None, out=None):
        shape, _ = _arrays.shape_dtype(slopes, "slopes")
        frames = shape[0] if len(shape) == 2 else 1
        device = _arrays.is_device(slopes)
        s, _ = _arrays.as_input(slopes, "slopes", self.ctx)
        v = None if valid is None else _arrays.as_input(
            valid.view(np.uint8) if getattr(valid, "dtype", None) == np.bool_ else valid,
            "valid", self.ctx)[0]
        if out is None:
            out = _arrays.empty((frames, self.terms), np.float64, device, self.ctx)
        res = _arrays.empty((frames,), np.float64, device, self.ctx)
        o, _ = _arrays.as_output(out, "out", self.ctx)
        r, _ = _arrays.as_output(res, "residual", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            self._plan.run(s, v, frames, o, r)
        self.residual = res
        return out


def fit(dx_px, dy_px, *, pitch, pixel_um, focal_mm, pupil_mm, order=6, **more):
    """Fits Zernike polynomials to Shack-Hartmann spot displacements (as ``spotwave fit``).

    dx_px, dy_px: spot displacements (centroid - reference) in pixels, shape (ny, nx) by lenslet
    (row iy, column ix), or (frames, ny, nx); NaN for a lenslet left out. A lenslet valid in no
    frame is outside the fit's mask. pitch: lenslet pitch in pixels; pixel_um: detector pixel,
    micrometres; focal_mm: lenslet focal length, mm; pupil_mm: pupil diameter at the lenslet
    array in mm (radius pupil_mm * 1000 / 2 / pixel_um pixels; None with pupil_px); order: the
    fitted radial orders 1..order (1..10).
    More keywords: origin (x0, y0), the corner pixel of lenslet (0, 0) (default (0, 0); it
    matters with pupil_center); pupil_px, the pupil radius in pixels instead of pupil_mm;
    pupil_center (x, y) pixels (default: the centre of the grid's reference positions);
    obscuration (fraction of the diameter); min_illum (default 0.5); method "pinv" or "qr";
    truncate; valid (bool (ny, nx) or (frames, ny, nx)); weights (ny, nx); rescale_mm (report
    over a concentric smaller pupil); eye "right" or "left" (left: mirrored x -> -x into the
    right-eye frame); return_info (also return a dict with residual_px, used, terms); ctx.

    Returns the coefficients in micrometres by OSA/ANSI j, piston first (always 0: invisible to
    slopes), a 1-D array of (order + 1)(order + 2) / 2 terms, or (frames, terms) for stacks; NaN
    for a frame left with fewer valid slopes than unknowns.

    Method: Mompean et al. (2018), Future Generation Computer Systems 91, 177-190, section 3.3.
    """
    ctx = _context.resolve(more.pop("ctx", None))
    origin = more.pop("origin", (0.0, 0.0))
    pupil_px = more.pop("pupil_px", None)
    center = more.pop("pupil_center", None)
    valid = more.pop("valid", None)
    rescale_mm = more.pop("rescale_mm", None)
    eye = more.pop("eye", "right")
    return_info = more.pop("return_info", False)
    allowed = {"obscuration", "min_illum", "method", "truncate", "weights"}
    extra = set(more) - allowed
    if extra:
        raise TypeError(f"fit: unexpected keyword argument {', '.join(sorted(extra))}")
    if eye not in ("right", "left"):
        raise ValueError(f"eye: '{eye}' is not 'right' or 'left'")
    for a, name in ((dx_px, "dx_px"), (dy_px, "dy_px")):
        if _arrays.is_device(a):
            raise TypeError(f"{name}: fit() derives the lenslet mask from the slopes on the "
                            f"host; for device slopes make a spotwave.zernike.FitPlan")
    dx = np.asarray(_arrays.host_array(dx_px, "dx_px"), np.float64)
    dy = np.asarray(_arrays.host_array(dy_px, "dy_px"), np.float64)
    if dx.ndim not in (2, 3) or dx.shape != dy.shape:
        raise ValueError(f"dx_px, dy_px: expected two arrays of one shape (ny, nx) or "
                         f"(frames, ny, nx), got {dx.shape} and {dy.shape}")
    single = dx.ndim == 2
    if single:
        dx, dy = dx[None], dy[None]
    frames, ny, nx = dx.shape
    if frames == 0 or ny == 0 or nx == 0:
        raise ValueError(f"dx_px: the slope arrays are empty (shape {dx.shape})")
    ok = ~(np.isnan(dx) | np.isnan(dy))
    if valid is not None:
        v = np.asarray(_arrays.host_array(valid, "valid")) != 0
        ok &= np.broadcast_to(v, ok.shape)
    mask = ok.any(axis=0)
    if not mask.any():
        raise ValueError("dx_px, dy_px: no valid slope (all NaN or invalid)")
    if pupil_px is not None:
        if pupil_mm is not None:
            raise ValueError("pupil_mm, pupil_px: give one, not both")
        radius = float(pupil_px)
        pupil_d = 2.0 * radius * pixel_um / 1000.0
    elif pupil_mm is None:
        raise TypeError("fit: give pupil_mm (or pupil_px)")
    else:
        radius = pupil_mm * 1000.0 / 2.0 / pixel_um
        pupil_d = float(pupil_mm)
    plan = FitPlan(grid=(nx, ny), pitch=pitch, pupil_radius_px=radius, pupil_center_px=center,
                   origin=origin, pixel_um=pixel_um, focal_mm=focal_mm,
                   mask=mask.astype(np.uint8), order=order, max_frames=frames, ctx=ctx, **more)
    lens = np.flatnonzero(mask.ravel())
    okf = ok.reshape(frames, -1)
    sx = np.where(okf, dx.reshape(frames, -1), 0.0)[:, lens]
    sy = np.where(okf, dy.reshape(frames, -1), 0.0)[:, lens]
    slopes = np.ascontiguousarray(np.concatenate([sx, sy], axis=1), np.float32)
    coef = plan(slopes, okf.astype(np.uint8))
    residual = plan.residual
    bad = ~np.isfinite(coef).all(axis=1)
    if bad.all():
        raise ValueError(f"dx_px, dy_px: {'the frame has' if frames == 1 else 'every frame has'} "
                         f"fewer valid slopes in the pupil than the {plan.terms - 1} unknowns of "
                         f"order {order}")
    coef[bad] = np.nan
    residual[bad] = np.nan
    report_d = pupil_d
    if rescale_mm is not None:
        if rescale_mm > pupil_d * (1.0 + 1e-12):
            raise ValueError(f"rescale_mm: {rescale_mm:g} is larger than the fitted pupil "
                             f"({pupil_d:g} mm)")
        report_d = min(float(rescale_mm), pupil_d)
    for f in np.flatnonzero(~bad):
        c = coef[f]
        if report_d < pupil_d:
            c = rescale(c, pupil_d, report_d)
        c[0] = 0.0
        if eye == "left":
            c = mirror_x(c)
        coef[f] = c
    out = coef[0] if single else coef
    if return_info:
        info = dict(residual_px=residual[0] if single else residual, used=plan.used,
                    terms=plan.terms, pupil_mm=report_d, pupil_radius_px=radius)
        return out, info
    return out


def basis(j, x, y, *, grad=False):
    """Values of the Zernike polynomials of OSA/ANSI indices j (an int or a sequence) at
    unit-disc points (x, y) (arrays of one shape; the polynomials are evaluated outside the disc
    too). Returns an array of shape j.shape + x.shape (the j axis dropped for a scalar j); with
    grad also (dZ/dx, dZ/dy) in unit-disc coordinates: (values, dzdx, dzdy). Orthonormal over
    the unit disc: the mean of Z_j Z_k over the disc is 1 for j = k, 0 otherwise."""
    js = np.asarray(j)
    if js.dtype.kind not in "iu":
        raise TypeError(f"j: expected OSA indices (integers), got {js.dtype}")
    xa, ya = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    jj = np.ascontiguousarray(js.ravel(), np.int32)
    v, gx, gy = _spotwave.zernike_eval(jj, np.ascontiguousarray(xa.ravel()),
                                       np.ascontiguousarray(ya.ravel()), bool(grad))
    shape = js.shape + xa.shape
    if not grad:
        return v.reshape(shape)
    return v.reshape(shape), gx.reshape(shape), gy.reshape(shape)


class MapPlan:
    """A wavefront map plan: the Zernike basis sampled on a size x size grid spanning the
    pupil's bounding square, pixel (i, k) at X = (2 i + 1) / size - 1, Y = (2 k + 1) / size - 1
    (row k along +y), precomputed once (on the GPU on a CUDA context; Mompean et al. 2018,
    section 3.4).

    ``MapPlan(size=256, order=6, *, obscuration=0.0, half=False, method="basis", device=False,
    ctx=None)``: half stores the basis as IEEE binary16; method "basis" (sum of the stored
    maps) or "direct" (each term evaluated per pixel in double: faster for large maps);
    device: maps come back as CuPy arrays on the context's GPU.
    ``plan(coef, out=None)``: the wavefront sum_j coef[j] Z_j (OSA, um; terms beyond the
    plan's are refused, missing ones are 0) as a float32 (size, size) array in um, NaN outside
    the pupil.
    """

    def __init__(self, size=256, order=6, *, obscuration=0.0, half=False, method="basis",
                 device=False, ctx=None):
        self.ctx = _context.resolve(ctx)
        if method not in ("basis", "direct"):
            raise ValueError(f"method: '{method}' is not 'basis' or 'direct'")
        if device:
            _arrays.require_cuda(self.ctx, "device=True")
        self._plan = _spotwave.ZernikeMapPlan(self.ctx, dict(size=size, order=order,
                                                             obscuration=obscuration, half=half))
        self.size, self.method, self.device = int(size), method, bool(device)

    terms = property(lambda self: self._plan.terms, doc="Terms the plan holds.")

    def __call__(self, coef, out=None):
        c = np.ascontiguousarray(np.asarray(coef, np.float64))
        if out is None:
            out = _arrays.empty((self.size, self.size), np.float32, self.device, self.ctx)
        o, device = _arrays.as_output(out, "out", self.ctx)
        with _arrays.DeviceRun(self.ctx, device):
            self._plan.run(c, o, self.method == "direct")
        return out


def wavefront_map(coef, size=256, *, obscuration=0.0, method="direct", device=False, ctx=None):
    """The wavefront of OSA coefficients (um) over the pupil's bounding square: a float32
    (size, size) map in um, NaN outside the pupil (see :class:`MapPlan`; one-shot)."""
    c = np.asarray(coef, np.float64)
    order = 0
    while count(order) < len(c):
        order += 1
    return MapPlan(size, max(order, 1), obscuration=obscuration, method=method, device=device,
                   ctx=ctx)(c)
