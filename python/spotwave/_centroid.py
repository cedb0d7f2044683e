"""Shack-Hartmann centroids: one per lenslet, by the centre of gravity or another method, with
error bars and a status (centroid.h, geometry.h).

Methods: Mocci J., Busato F., Bombieri N., Bonora S., Muradore R. (2020), "An efficient
implementation of the Shack-Hartmann centroids extraction for edge computing", J. Opt. Soc. Am. A
37(10), 1548-1556: the lenslet geometry of Eq. (1)-(5), the centre of gravity of Eq. (6)-(7).
Weighted centre of gravity: Nicolle M., Fusco T., Rousset G., Michau V. (2004), Opt. Lett.
29(23), 2743-2745; Thomas S. et al. (2006), MNRAS 371, 323-336. Correlation: Lofdahl M. G.
(2010), "Evaluation of image-shift measurement algorithms for solar Shack-Hartmann wavefront
sensors", A&A 524, A90.
"""

import math

import numpy as np

from . import _arrays, _context, _spotwave, _tables
from ._find import _mask, check_keywords, pixel_type

_CENTROID_TYPES = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16",
                   np.dtype(np.float32): "f32"}

METHODS = ("cog", "wcog", "local", "brightest", "correlation", "quadcell")
#: The ``status`` codes of a centroid (centroid.h "Status"): code -> name.
STATUS = {k: _spotwave.centroid_status_string(k) for k in range(8)}


def _float32_map(a, name):
    m = _arrays.host_array(a, name)
    if m.dtype != np.float32:
        raise TypeError(f"{name}: expected a float32 array, got {m.dtype} "
                        f"(convert with .astype(numpy.float32))")
    return m


def _pair(v, name, kind=float):
    try:
        a, b = v
        return kind(a), kind(b)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a pair, got {v!r}") from None


def manual_geometry(shape, pitch, grid=None, origin=None):
    """The lenslet grid as ``spotwave centroid`` resolves it: (nx, ny) as many lenslets as fit
    when grid is None, the origin centring the grid in whole pixels when origin is None.
    Returns dict(x0, y0, pitch, nx, ny)."""
    height, width = shape
    pitch = float(pitch)
    nx, ny = (_pair(grid, "grid", int) if grid is not None
              else (int(math.floor(width / pitch)), int(math.floor(height / pitch))))
    x0, y0 = (_pair(origin, "origin") if origin is not None
              else (math.floor(0.5 * (width - pitch * nx)), math.floor(0.5 * (height - pitch * ny))))
    return dict(x0=float(x0), y0=float(y0), pitch=pitch, nx=nx, ny=ny)


class CentroidResult:
    """The outputs of a :class:`CentroidPlan` run, NumPy arrays (host plans) or CuPy arrays
    (device plans): x, y (the centroid, pixels, NaN where invalid), intensity (the conditioned
    intensity m00 of every lenslet), valid (uint8, 1 valid / 0 invalid), saturated (uint8, 1
    when a raw pixel of the lenslet's region is at or above the plan's saturation level),
    status (uint8, the reason, :data:`spotwave.CENTROID_STATUS`), x_var, y_var (float32, the
    centroid's variance from photon and read noise, px^2) and snr (float32), each
    (frames, ny, nx); x_var, y_var and snr are NaN on the plain centre-of-gravity fast path
    (``plan.fast``) and for invalid lenslets; slopes (frames, 2, nslopes) for the "blocks"
    layout, x-slopes then y-slopes, or (frames, nslopes, 2) "interleaved": centroid - reference
    in pixels for the lenslets of the mask, 0 where invalid in the frame. ``frames`` is the
    number of frames the last run filled (the arrays may hold more). Any array may be None: it
    is not written."""

    __slots__ = ("x", "y", "intensity", "valid", "slopes", "frames", "saturated", "x_var",
                 "y_var", "snr", "status")

    def __init__(self, x, y, intensity, valid, slopes, frames=0, saturated=None, x_var=None,
                 y_var=None, snr=None, status=None):
        self.x, self.y, self.intensity, self.valid, self.slopes = x, y, intensity, valid, slopes
        self.frames = frames
        self.saturated = saturated
        self.x_var, self.y_var, self.snr, self.status = x_var, y_var, snr, status

    def _outputs(self):
        """(array, name) of the ten outputs, in the binding's argument order."""
        return ((self.x, "out.x"), (self.y, "out.y"), (self.intensity, "out.intensity"),
                (self.valid, "out.valid"), (self.slopes, "out.slopes"),
                (self.saturated, "out.saturated"), (self.x_var, "out.x_var"),
                (self.y_var, "out.y_var"), (self.snr, "out.snr"), (self.status, "out.status"))

    def __repr__(self):
        return (f"spotwave.CentroidResult(frames={self.frames}, lenslets={self.x.shape[1:]}, "
                f"{type(self.x).__module__.split('.')[0]})")


class CentroidPlan:
    """A centroid plan: the lenslet grid on frames of one size and pixel type, the conditioning,
    and the memory path, validated and allocated once (centroid.h, ``sw_centroid_create``).

    ``CentroidPlan(shape, dtype, *, pitch, grid=None, origin=None, pixel_um=5.5, focal_mm=3.5,
    mask=None, threshold=None, threshold_mode="subtract", threshold_fraction=None, gamma=1.0,
    window=0, dark=None, flat=None, lut=None, saturation=None, drop_saturated=False,
    max_frames=1, memory="host", path=None, slope_layout="blocks", method="cog", fwhm_px=None,
    iterations=0, local_k=3.0, brightest_n=None, template=None, search_px=None,
    quad_gain_px=None, gain=None, read_noise=None, min_snr=None, max_shift_px=None,
    peak_border=False, edge_px=None, edge_fraction=None, ctx=None)``

    shape: (height, width) of a frame; dtype: uint8, uint16 or float32.
    Geometry (Mocci et al. 2020, Eq. 1-5; 0-based pixels, the centre of pixel (0, 0) at
    (0.0, 0.0)): pitch, pixels per lenslet (1..128, may be fractional); grid (nx, ny) lenslets
    (default: as many as fit); origin (x0, y0), the corner pixel of lenslet (0, 0) (default: the
    grid centred in whole pixels, as ``spotwave sim sh`` puts it); lenslet (ix, iy) owns pixels
    floor(x0 + pitch ix) <= x < floor(x0 + pitch (ix + 1)), rows likewise; its optical axis
    (the default reference) is at x0 - 0.5 + pitch (ix + 0.5). pixel_um, focal_mm: the detector
    pixel and the lenslet focal length (slope_rad = slope_px * pixel_um / (focal_mm * 1000)).
    mask: (ny, nx) bool/uint8, lenslets with 0 are left out of the slopes.
    Conditioning, per pixel in this order (all off by default): lut (float32, 256 or 65536
    entries: v = lut[raw]); dark (float32 (height, width), subtracted); flat (float32 gains,
    multiplied); threshold T in conditioned units, or threshold_fraction F (T = F x the
    lenslet's brightest pixel), with threshold_mode "subtract" (v = max(v - T, 0)) or "zero"
    (v = v if v >= T else 0); gamma (v = max(v, 0) ** gamma); window (pixels left out at each
    edge of every lenslet's region).
    Saturation: a raw pixel (before lut, dark, flat) at or above ``saturation`` is saturated,
    and a lenslet with one in its region (after the window) gets ``saturated`` 1 in the
    result; None (default): the full scale of integer frames (255 for uint8, 65535 for uint16),
    no check for float32; "none": no check; a number > 0: that level (e.g. 4095 for a 12-bit
    camera). Saturated lenslets stay valid (their centroid may be biased) unless
    drop_saturated, which makes them invalid. ``plan.saturation`` is the level in force (None:
    no check).
    Method (centroid.h "Methods"; as ``spotwave centroid --method``): "cog" (default, the
    centre of gravity); "wcog", a Gaussian-weighted CoG of FWHM fwhm_px, fixed at the reference
    position (iterations 0) or re-centred ``iterations`` times (Nicolle et al. 2004, Opt. Lett.
    29(23), 2743; Thomas et al. 2006, MNRAS 371, 323); "local", the CoG above a background and
    threshold (local_k sigma) from the lenslet's outer ring; "brightest", the CoG of the
    brightest_n pixels minus the next one; "correlation", the shift of each lenslet's region
    against the same region of ``template`` (a (height, width) image, copied as float32), over
    +-search_px px (default a quarter of the region), with parabola fits (Lofdahl 2010, A&A 524,
    A90): x is the reference position plus the shift; "quadcell", quadrant sums times
    quad_gain_px (default sqrt(pi/2) fwhm_px / 2.3548), for 2 x 2 lenslets.
    Error bars (x_var, y_var, snr of the result): gain, the detector's e-/ADU (None: the pixel
    variance from each lenslet's outer ring), read_noise in electrons (needs gain).
    Validity (status, all off by default): min_snr (below: "faint"), max_shift_px (farther from
    the reference: "left"), peak_border (the brightest pixel on the region's outer ring:
    "left"), edge_px (the centroid closer to the region's edge: "cut"), edge_fraction (more
    than this fraction of the signal on the outer ring: "cut"). ``plan.fast`` is True when the
    plan runs the plain CoG code (method "cog", no detector, no check): x_var, y_var and snr
    are then NaN.
    max_frames: the largest stack a run takes. memory: "host" (NumPy frames) or "device"
    (CuPy / device frames, read in place); path: the library's memory path ("host", "copy",
    "mapped", "device"; default from memory and the context). slope_layout: "blocks" or
    "interleaved".

    ``plan(frames, out=None)`` runs the plan on a frame (height, width) or a stack
    (frames, height, width) and returns a :class:`CentroidResult` (``out``, when given: see
    :meth:`result`; the library allocates nothing). The real-time path: a device plan, the same
    ``out`` every call, and CuPy frames made on the context's stream
    (``with cupy.cuda.ExternalStream(ctx.stream): ...``, see the package README): then a call is
    one C call with no argument conversion and no stream events. Without conditioning, integer frames are
    summed exactly: the CPU and the GPU give bit-identical centroids.
    """

    def __init__(self, shape, dtype, *, pitch, grid=None, origin=None, pixel_um=5.5,
                 focal_mm=3.5, mask=None, threshold=None, threshold_mode="subtract",
                 threshold_fraction=None, gamma=1.0, window=0, dark=None, flat=None, lut=None,
                 saturation=None, drop_saturated=False, max_frames=1, memory="host", path=None,
                 slope_layout="blocks", method="cog", fwhm_px=None, iterations=0, local_k=3.0,
                 brightest_n=None, template=None, search_px=None, quad_gain_px=None, gain=None,
                 read_noise=None, min_snr=None, max_shift_px=None, peak_border=False,
                 edge_px=None, edge_fraction=None, ctx=None):
        self.ctx = _context.resolve(ctx)
        if len(shape) != 2:
            raise ValueError(f"shape: expected (height, width), got {shape!r}")
        height, width = (int(n) for n in shape)
        if memory not in ("host", "device"):
            raise ValueError(f"memory: '{memory}' is not 'host' or 'device'")
        if memory == "device":
            _arrays.require_cuda(self.ctx, "memory='device'")
        if path is None:
            path = "device" if memory == "device" else "auto"
        geom = manual_geometry((height, width), pitch, grid, origin)
        params = dict(geom, width=width, height=height,
                      pixel_type=pixel_type(dtype, "dtype", _CENTROID_TYPES),
                      pixel_um=pixel_um, focal_mm=focal_mm, max_frames=max_frames, path=path,
                      gamma=gamma, window=window, slope_layout=slope_layout)
        if threshold is not None and threshold_fraction is not None:
            raise ValueError("threshold, threshold_fraction: give one, not both")
        if threshold_mode not in ("subtract", "zero"):
            raise ValueError(f"threshold_mode: '{threshold_mode}' is not 'subtract' or 'zero'")
        if threshold is not None or threshold_fraction is not None:
            params["threshold_mode"] = threshold_mode
            params["threshold_kind"] = "absolute" if threshold is not None else "fraction"
            params["threshold"] = threshold if threshold is not None else threshold_fraction
        if isinstance(saturation, str):
            if saturation != "none":
                raise ValueError(f"saturation: '{saturation}' is not a level or 'none'")
            params["saturation"] = -1.0
        elif saturation is not None:
            level = float(saturation)
            if not (math.isfinite(level) and level > 0):
                raise ValueError(f"saturation: {saturation!r} is not a positive finite level "
                                 f"(or None for the type's full scale, 'none' for no check)")
            params["saturation"] = level
        params["drop_saturated"] = bool(drop_saturated)
        if mask is not None:
            params["mask"] = _mask(mask, "mask")
        if dark is not None:
            params["dark"] = _float32_map(dark, "dark")
        if flat is not None:
            params["flat"] = _float32_map(flat, "flat")
        if lut is not None:
            params["lut"] = _float32_map(lut, "lut")
        if method not in METHODS:
            raise ValueError(f"method: '{method}' is not " + ", ".join(f"'{m}'" for m in METHODS))
        if method == "correlation" and template is None:
            raise TypeError("method='correlation' needs template= (a (height, width) image whose "
                            "lenslet regions are the templates)")
        if template is not None:
            if method != "correlation":
                raise TypeError(f"template: a template goes with method='correlation', not "
                                f"'{method}'")
            t = _arrays.host_array(template, "template")
            if t.shape != (height, width):
                raise ValueError(f"template: shape {t.shape}, the frames ({height}, {width})")
            params["template"] = np.ascontiguousarray(t, np.float32)
        if read_noise and not gain:
            raise TypeError("read_noise: needs gain= (the detector's e-/ADU)")
        params.update(method=method, fwhm_px=fwhm_px, iterations=iterations, local_k=local_k,
                      brightest_n=brightest_n, search_px=search_px, quad_gain_px=quad_gain_px,
                      gain=gain, read_noise=read_noise, min_snr=min_snr,
                      max_shift_px=max_shift_px, peak_border=bool(peak_border), edge_px=edge_px,
                      edge_fraction=edge_fraction)
        self._plan = _spotwave.CentroidPlan(self.ctx, params)
        self.shape = (height, width)
        self.dtype = np.dtype(dtype)
        self.memory = memory
        self.geometry = dict(geom, pixel_um=float(pixel_um), focal_mm=float(focal_mm))
        self.slope_layout = slope_layout
        self._bound_out = None  # the device result bound for the real-time path (_run_fast)
        self._fast_key = None  # (shape, typestr, strides) of the last frame that took it
        self._fast_stride = 0

    nx = property(lambda self: self._plan.nx, doc="Lenslets across.")
    ny = property(lambda self: self._plan.ny, doc="Lenslets down.")
    lenslets = property(lambda self: self._plan.lenslets, doc="nx * ny.")
    nslopes = property(lambda self: self._plan.nslopes,
                       doc="Slopes per frame and axis: the lenslets of the mask.")
    path = property(lambda self: self._plan.path, doc="The memory path the plan runs.")
    saturation = property(lambda self: self._plan.saturation,
                          doc="The saturation level in force, raw pixel units (None: no check).")
    drop_saturated = property(lambda self: self._plan.drop_saturated,
                              doc="True when saturated lenslets are made invalid.")
    max_frames = property(lambda self: self._plan.max_frames, doc="Largest stack a run takes.")
    method = property(lambda self: self._plan.method, doc="The centroid method.")
    fast = property(lambda self: self._plan.fast,
                    doc="True when the plan runs the plain CoG code (no error bars, no checks).")

    def slope_lenslets(self):
        """The flat lenslet index (iy * nx + ix) of each slope, int32 (nslopes,)."""
        return self._plan.slope_lenslets()

    def reference_positions(self):
        """The lenslets' optical axes (the default reference), (ref_x, ref_y), each (ny, nx)
        float64 pixels (geometry.h)."""
        g = self.geometry
        rx, ry = _spotwave.geometry_reference(g)
        return rx.reshape(g["ny"], g["nx"]), ry.reshape(g["ny"], g["nx"])

    def set_reference(self, ref_x=None, ref_y=None):
        """Replaces the slope reference: ref_x, ref_y (ny, nx) float64 pixels, finite for every
        lenslet of the mask; None, None restores the lenslets' optical axes."""
        if ref_x is not None:
            ref_x = np.ascontiguousarray(_arrays.host_array(ref_x, "ref_x"), np.float64)
        if ref_y is not None:
            ref_y = np.ascontiguousarray(_arrays.host_array(ref_y, "ref_y"), np.float64)
        self._plan.set_reference(ref_x, ref_y)

    def result(self, frames=None):
        """A :class:`CentroidResult` with room for `frames` frames (default max_frames) on the
        plan's side (NumPy or CuPy), to give as ``out=``."""
        f = self.max_frames if frames is None else int(frames)
        ny, nx, ns = self.ny, self.nx, self.nslopes
        dev = self.memory == "device"
        sl = (f, 2, ns) if self.slope_layout == "blocks" else (f, ns, 2)
        def per_lenslet(dtype):
            return _arrays.empty((f, ny, nx), dtype, dev, self.ctx)

        return CentroidResult(per_lenslet(np.float32), per_lenslet(np.float32),
                              per_lenslet(np.float32), per_lenslet(np.uint8),
                              _arrays.empty(sl, np.float32, dev, self.ctx),
                              saturated=per_lenslet(np.uint8), x_var=per_lenslet(np.float32),
                              y_var=per_lenslet(np.float32), snr=per_lenslet(np.float32),
                              status=per_lenslet(np.uint8))

    def _run_fast(self, frames, out):
        """The real-time path (device plans): a CuPy frame on the context's own stream, into a
        result bound once. One C call, no argument conversion: the frame's address and row
        stride come from __cuda_array_interface__, checked against the last frame's layout.
        Returns None when the frame does not qualify (the general path then runs)."""
        cp = _arrays.cupy_module()
        if cp is None or cp.cuda.get_current_stream().ptr != self.ctx.stream:
            return None  # other streams: the general path orders them with events
        cai = frames.__cuda_array_interface__
        key = (cai["shape"], cai["typestr"], cai["strides"])
        if key != self._fast_key:
            dev = getattr(getattr(frames, "device", None), "id", None)
            if dev != self.ctx.device or np.dtype(cai["typestr"]) != self.dtype:
                return None
            shape, strides = cai["shape"], cai["strides"]
            h, w = self.shape
            item = self.dtype.itemsize
            if shape[-2:] != (h, w) or len(shape) not in (2, 3):
                return None
            row = w * item if strides is None else strides[-2]
            if strides is not None and (strides[-1] != item or row < w * item or
                                        (len(shape) == 3 and strides[0] != h * row)):
                return None
            self._fast_key, self._fast_stride = key, row
        if out is not self._bound_out:
            self._plan.bind_outputs(*[None if a is None else _arrays.as_output(a, n, self.ctx)[0]
                                      for a, n in out._outputs()])
            self._bound_out = out
        n = cai["shape"][0] if len(cai["shape"]) == 3 else 1
        out.frames = self._plan.run_device(cai["data"][0], self._fast_stride, n)
        return out

    def __call__(self, frames, out=None):
        if (out is not None and self.memory == "device" and
                hasattr(frames, "__cuda_array_interface__") and
                self._run_fast(frames, out) is not None):
            return out
        if out is None:
            shape, _ = _arrays.shape_dtype(frames, "image")
            out = self.result(shape[0] if len(shape) == 3 else 1)
        if type(frames) is np.ndarray and type(out.x) is np.ndarray:
            # The host fast path: the binding checks the arrays (dtype, size, writability).
            _arrays.check_byte_order(frames, "image")
            out.frames = self._plan.run(frames, *(a for a, _ in out._outputs()))
            return out
        obj, device = _arrays.as_input(frames, "image", self.ctx)
        outs = [None if a is None else _arrays.as_output(a, name, self.ctx)[0]
                for a, name in out._outputs()]
        with _arrays.DeviceRun(self.ctx, device):
            out.frames = self._plan.run(obj, *outs)
        return out

    def __repr__(self):
        return (f"spotwave.CentroidPlan(shape={self.shape}, dtype={self.dtype}, "
                f"grid=({self.nx}, {self.ny}), pitch={self.geometry['pitch']}, "
                f"method='{self.method}', path='{self.path}')")


def find_geometry(reference, *, pixel_um=5.5, focal_mm=3.5, ctx=None):
    """The lenslet grid of a reference image (one spot per lenslet, a flat wavefront): the pitch
    from the periodicity of the row and column profiles (3..128 px), the phase of the spots and
    the extent of the lit lenslets (``sw_centroid_find_geometry``). Returns dict(x0, y0, pitch,
    nx, ny, pixel_um, focal_mm), to pass on as ``CentroidPlan(..., **geometry)``-style
    arguments (origin=(x0, y0), grid=(nx, ny), pitch)."""
    ctx = _context.resolve(ctx)
    obj, device = _arrays.as_input(reference, "reference", ctx)
    if device:
        # The profiles are computed on the host (once, at calibration); no silent copy back.
        raise TypeError("reference: find_geometry reads a host image: pass a NumPy array "
                        "(e.g. cupy.asnumpy(reference)), or give the grid (pitch, grid, origin)")
    with _arrays.DeviceRun(ctx, device):
        return _spotwave.find_geometry(ctx, obj, pixel_um, focal_mm)


def centroid(image, *, grid=None, pitch=None, origin=None, threshold=None,
             threshold_mode="subtract", **more):
    """Centroids of the spots of a Shack-Hartmann frame, one per lenslet: the centre of gravity
    of each lenslet's pixels (centroid.h; as ``spotwave centroid``).

    image: a frame (height, width) or a stack (frames, height, width) of uint8, uint16 or
    float32 pixels, NumPy or device (CuPy: read in place on the GPU).
    grid: (nx, ny) lenslets (default: as many as fit); pitch: pixels per lenslet (required,
    may be fractional); origin: (x0, y0), the corner pixel of lenslet (0, 0) (default: the grid
    centred in whole pixels); threshold, threshold_mode: see :class:`CentroidPlan`.
    More keywords: threshold_fraction, gamma, window, dark, flat, lut, mask, saturation,
    drop_saturated, pixel_um, focal_mm, path, ctx (see :class:`CentroidPlan`), geometry="auto"
    (find the grid in the reference image instead of pitch/grid/origin), and reference: an
    image of the same size and type whose
    centroids (same grid and conditioning) are the reference, or a pair (ref_x, ref_y) of
    (ny, nx) arrays; a lenslet invalid in the reference leaves the mask (an error when ``mask``
    keeps it), as the command does.
    Method keywords (see :class:`CentroidPlan`; ``spotwave centroid --method`` and its options):
    method ("cog", "wcog", "local", "brightest", "correlation", "quadcell"), fwhm_px,
    iterations, local_k, brightest_n, search_px, quad_gain_px; the detector's gain (e-/ADU) and
    read_noise (e-) for the error bars; min_snr, max_shift_px, peak_border, edge_px,
    edge_fraction for the status. method="correlation" takes the reference image as its
    template too (and needs it), as the command does.

    Returns, for NumPy input, a structured array with the ``spotwave centroid`` CSV columns, one
    row per lenslet in lenslet order (iy, then ix), and per frame for stacks (a first column
    ``frame``): ix, iy, x_px, y_px (NaN where invalid), intensity, valid (1/0); with a reference
    also dx_px, dy_px (centroid - reference, pixels; NaN where invalid or outside the mask); last
    saturated (1/0: a saturated pixel in the lenslet's region; keywords saturation,
    drop_saturated, see :class:`CentroidPlan`), status (0 ok, 1 masked, 2 nonfinite, 3 empty,
    4 left, 5 cut, 6 faint, 7 saturated: :data:`spotwave.CENTROID_STATUS`), x_var, y_var (the
    centroid's variance, px^2) and snr (NaN without error bars: the plain CoG, and invalid
    lenslets). For device input, a dict of CuPy arrays with the same names (rows in the same
    order).

    Method: Mocci et al. (2020), J. Opt. Soc. Am. A 37(10), 1548-1556, Eq. (1)-(7).
    """
    ctx = _context.resolve(more.pop("ctx", None))
    reference = more.pop("reference", None)
    geometry = more.pop("geometry", "manual")
    shape, dtype = _arrays.shape_dtype(image, "image")
    if len(shape) not in (2, 3):
        raise ValueError(f"image: expected a 2-D image (height, width) or a 3-D stack "
                         f"(frames, height, width), got a {len(shape)}-D array of shape {shape}")
    frame_shape = shape[-2:]
    pixel_type(dtype, "image", _CENTROID_TYPES)
    device = _arrays.is_device(image)
    ref_is_image = reference is not None and not isinstance(reference, tuple)
    if geometry == "auto":
        if pitch is not None or grid is not None or origin is not None:
            raise TypeError("geometry='auto' finds the grid: drop grid, pitch and origin")
        if not ref_is_image:
            raise TypeError("geometry='auto' needs a reference image")
        g = find_geometry(reference, pixel_um=more.get("pixel_um", 5.5),
                          focal_mm=more.get("focal_mm", 3.5), ctx=ctx)
        pitch, grid, origin = g["pitch"], (g["nx"], g["ny"]), (g["x0"], g["y0"])
    elif geometry != "manual":
        raise ValueError(f"geometry: '{geometry}' is not 'manual' or 'auto'")
    elif pitch is None:
        raise TypeError("centroid: give the lenslet grid: pitch=PX (with grid and origin), or "
                        "geometry='auto' with a reference image")
    elif origin is None:
        nx, ny = (manual_geometry(frame_shape, pitch, grid)[k] for k in ("nx", "ny"))
        if pitch * nx > frame_shape[1] or pitch * ny > frame_shape[0]:
            raise ValueError(f"image: a grid of {nx}x{ny} lenslets of {pitch:g} px does not fit "
                             f"its {frame_shape[1]}x{frame_shape[0]} pixels")
    frames = shape[0] if len(shape) == 3 else 1
    if more.get("method") == "correlation":
        if not ref_is_image:
            raise TypeError("method='correlation' needs reference= an image: its lenslet regions "
                            "are the templates")
        if "template" in more:
            raise TypeError("centroid: the template is the reference image: drop template=")
        t = reference.get() if _arrays.is_device(reference) else reference  # copied once
        more["template"] = _arrays.host_array(t, "reference")
    check_keywords("centroid", more, CentroidPlan)
    for k in ("memory", "max_frames"):
        if k in more:
            raise TypeError(f"centroid: unexpected keyword argument '{k}' (set by the image)")
    kw = dict(grid=grid, origin=origin, threshold=threshold, threshold_mode=threshold_mode,
              memory="device" if device else "host", ctx=ctx, **more)
    plan = CentroidPlan(frame_shape, dtype, pitch=pitch, max_frames=max(frames, 1), **kw)
    if reference is not None:
        plan = _apply_reference(plan, reference, ref_is_image, frame_shape, dtype, pitch, kw,
                                frames)
    res = plan(image)
    return _table(plan, res, len(shape) == 3, reference is not None, device)


def _apply_reference(plan, reference, ref_is_image, frame_shape, dtype, pitch, kw, frames):
    ny, nx = plan.ny, plan.nx
    if ref_is_image:
        rshape, rdtype = _arrays.shape_dtype(reference, "reference")
        if len(rshape) != 2:
            raise ValueError(f"reference: expected one frame (height, width), got shape {rshape}")
        if rshape != frame_shape or rdtype != dtype:
            raise ValueError(f"reference: {rshape[1]}x{rshape[0]} {rdtype}, the image "
                             f"{frame_shape[1]}x{frame_shape[0]} {dtype}: give both in the same "
                             f"size and pixel type")
        r = plan(reference)
        x, y, v = r.x[0], r.y[0], r.valid[0]
        if _arrays.is_device(reference):  # the reference setup reads back 2 x nx x ny floats
            x, y, v = x.get(), y.get(), v.get()
        ref_x = np.where(v != 0, x, np.nan).astype(np.float64)
        ref_y = np.where(v != 0, y, np.nan).astype(np.float64)
    else:
        ref_x, ref_y = (np.array(_arrays.host_array(a, n), np.float64)
                        for a, n in zip(reference, ("reference x", "reference y")))
        if ref_x.shape != (ny, nx) or ref_y.shape != (ny, nx):
            raise ValueError(f"reference: give (ref_x, ref_y) of shape ({ny}, {nx}) each")
        bad = np.isinf(ref_x) | np.isinf(ref_y)
        if bad.any():
            iy, ix = np.argwhere(bad)[0]
            raise ValueError(f"reference: lenslet ({ix},{iy}) has an infinite position")
        nan = np.isnan(ref_x) | np.isnan(ref_y)
        ref_x[nan] = np.nan
        ref_y[nan] = np.nan
    user_mask = kw.get("mask")
    mask = (np.ones((ny, nx), bool) if user_mask is None
            else np.asarray(_mask(user_mask, "mask")).reshape(ny, nx) != 0)
    invalid = np.isnan(ref_x)
    if user_mask is not None and (invalid & mask).any():
        iy, ix = np.argwhere(invalid & mask)[0]
        raise ValueError(f"reference: lenslet ({ix},{iy}) has no valid position (no light after "
                         f"conditioning) but mask keeps it")
    if (invalid & mask).any():
        kw = dict(kw, mask=mask & ~invalid)
        plan = CentroidPlan(frame_shape, dtype, pitch=pitch, max_frames=max(frames, 1), **kw)
    rx0, ry0 = plan.reference_positions()
    plan.set_reference(np.where(invalid, rx0, ref_x), np.where(invalid, ry0, ref_y))
    return plan


def _table(plan, res, stack, with_ref, device):
    f, ny, nx = res.frames, plan.ny, plan.nx
    nl = nx * ny
    xp = _arrays.cupy_module() if device else np
    valid = res.valid[:f].reshape(f, nl)
    cols = {
        "ix": xp.tile(xp.arange(nx, dtype=xp.int32), f * ny),
        "iy": xp.tile(xp.repeat(xp.arange(ny, dtype=xp.int32), nx), f),
        "x_px": xp.where(valid != 0, res.x[:f].reshape(f, nl), xp.nan).astype(xp.float32).ravel(),
        "y_px": xp.where(valid != 0, res.y[:f].reshape(f, nl), xp.nan).astype(xp.float32).ravel(),
        "intensity": res.intensity[:f].reshape(-1),
        "valid": (valid != 0).astype(xp.uint8).ravel(),
    }
    if stack:
        cols = dict(frame=xp.repeat(xp.arange(f, dtype=xp.int32), nl), **cols)
    if with_ref:
        k = xp.asarray(plan.slope_lenslets().astype(np.int64))
        ns = plan.nslopes
        sl = res.slopes[:f].reshape(f, 2 * ns)
        sx = sl[:, :ns] if plan.slope_layout == "blocks" else sl[:, 0::2]
        sy = sl[:, ns:] if plan.slope_layout == "blocks" else sl[:, 1::2]
        dx = xp.full((f, nl), xp.nan, xp.float32)
        dy = xp.full((f, nl), xp.nan, xp.float32)
        dx[:, k] = sx
        dy[:, k] = sy
        ok = valid != 0
        cols["dx_px"] = xp.where(ok, dx, xp.nan).astype(xp.float32).ravel()
        cols["dy_px"] = xp.where(ok, dy, xp.nan).astype(xp.float32).ravel()
    cols["saturated"] = (res.saturated[:f].reshape(f, nl) != 0).astype(xp.uint8).ravel()
    cols["status"] = res.status[:f].reshape(-1)
    for name in ("x_var", "y_var", "snr"):
        cols[name] = getattr(res, name)[:f].reshape(-1)
    if device:
        return cols
    return _tables.from_columns(_tables.centroid_dtype(stack, with_ref), cols)
