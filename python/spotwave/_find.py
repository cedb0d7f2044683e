"""Spot finding: the DIALS dispersion threshold and connected components (find.h).

Method: Winter G. et al. (2018), "DIALS: implementation and evaluation of a new integration
package", Acta Cryst. D74, 85-97, and the dispersion spot finder as documented in G. Winter,
"CUDA Spotfinding" (technical note); the dispersion criterion of Kabsch W. (2010), "XDS",
Acta Cryst. D66, 125-132. Refined positions (refine.h): SExtractor's windowed centroid
XWIN_IMAGE (Bertin E., Arnouts S. 1996, A&AS 117, 393-404) and a Gaussian PSF fit by
Levenberg-Marquardt.
"""

import numpy as np

from . import _arrays, _context, _spotwave, _tables

_PIXEL_TYPES = {np.dtype(np.uint8): "u8", np.dtype(np.uint16): "u16",
                np.dtype(np.uint32): "u32", np.dtype(np.float32): "f32"}


def pixel_type(dtype, name, allowed=_PIXEL_TYPES):
    """The library's pixel type name for a NumPy dtype, or a TypeError naming the argument."""
    dt = np.dtype(dtype)
    if dt.byteorder not in ("=", "|"):
        raise ValueError(f"{name}: {dt.str} is not in the machine's byte order")
    try:
        return allowed[dt]
    except KeyError:
        names = ", ".join(str(np.dtype(k)) for k in allowed)
        raise TypeError(f"{name}: {dt} pixels are not taken here; give {names} "
                        f"(convert with .astype())") from None


def check_keywords(what, more, plan_class, extra=()):
    """A TypeError naming the keywords of **more that neither the plan nor the function takes."""
    import inspect  # noqa: PLC0415

    known = set(inspect.signature(plan_class.__init__).parameters) | set(extra)
    unknown = sorted(set(more) - known)
    if unknown:
        raise TypeError(f"{what}: unexpected keyword argument "
                        + ", ".join(f"'{k}'" for k in unknown))


def _kernel(kernel_size):
    if np.ndim(kernel_size) == 0:
        k = int(kernel_size)
        if k != kernel_size:
            raise TypeError(f"kernel_size: {kernel_size!r} is not a whole number")
        return k, k
    kx, ky = kernel_size
    if int(kx) != kx or int(ky) != ky:
        raise TypeError(f"kernel_size: {kernel_size!r} is not (kx, ky) in whole numbers")
    return int(kx), int(ky)


def _mask(mask, name):
    """A bool or uint8 NumPy mask (non-zero = valid) as uint8, without copying."""
    m = _arrays.host_array(mask, name)
    if m.dtype == np.bool_:
        return m.view(np.uint8)
    if m.dtype != np.uint8:
        raise TypeError(f"{name}: expected a bool or uint8 array (non-zero = valid), got {m.dtype}")
    return m


class FindPlan:
    """A spot-finding plan for frames of one size and pixel type (find.h, ``sw_find_create``).

    ``FindPlan(shape, dtype, *, algorithm="dispersion_extended", gain=1.0, kernel_size=3,
    sigma_b=6.0, sigma_s=3.0, min_local=2, global_threshold=0.0, mask=None, gain_map=None,
    overload=None, connectivity=4, min_spot_size=3, max_spot_size=1000, max_separation=2.0,
    max_strong_fraction=0.25, window="auto", max_components=None, refine="none",
    background="none", mesh_size=64, stamp_radius=None, detector_gain=1.0, read_noise=0.0,
    bias=0.0, moffat_beta=None, ctx=None)``

    shape: (height, width) of a frame; dtype: uint8, uint16, uint32 or float32 (float32 pixels
    are rounded to whole counts, NaN/Inf masked). Parameters as ``spotwave find`` (DIALS's names
    and defaults): algorithm "dispersion" or "dispersion_extended"; kernel_size K or (KX, KY),
    window half-sizes 1..15 (3: a 7 x 7 window); sigma_b, the background (index of dispersion)
    sigma; sigma_s, the strong-pixel sigma; min_local, the fewest valid pixels in a window (0:
    the whole window); global_threshold, pixels must exceed it; gain, the detector gain (or
    gain_map, a float32 (height, width) map); mask, a bool/uint8 (height, width) array, non-zero
    = valid; overload, values at or above it are masked (None: 255 / 0xfffe / 0xfffffffe for
    8/16/32-bit, none for float); connectivity 4 or 8; min_spot_size, max_spot_size (0: no
    limit), pixels; max_separation, peak-to-centroid distance in pixels (0: off);
    max_strong_fraction, a frame with more strong pixels than this fraction of its valid pixels
    is an error (0: off); window, the GPU's window sums "auto", "brute" or "tiled".
    The mask and gain map are copied when the plan is made.
    Refined positions (refine.h; as ``spotwave find --refine``; 2-D spots, not three_d):
    refine "none" (the intensity-weighted mean of the strong pixels), "xwin" (SExtractor's
    iterative Gaussian-windowed centroid XWIN_IMAGE, Bertin & Arnouts 1996, A&AS 117, 393),
    "gauss" (a pixel-integrated circular Gaussian plus a constant fitted by Levenberg-Marquardt
    with Poisson + read-noise weights) or "moffat" (the same with a circular Moffat profile,
    Moffat 1969, A&A 3, 455, of fixed exponent moffat_beta, None: 4.765, the best Moffat fit to
    a Kolmogorov-turbulence PSF, Trujillo et al. 2001, MNRAS 328, 977; sigma_px is then its
    alpha); x_px, y_px then hold the refined position and x_var,
    y_var its variance, and the table gains refine_flags (1 stamp cut by the edge, 2 bad pixels
    left out, 4 not refined: the plain centroid kept, 8 fit stopped at its pass limit, 16 a
    blend's child that kept its deblended position, 32 a blend's child fitted jointly with the
    others: refine.h),
    flux_adu, sigma_px, background_adu. background: "none", "annulus" (sigma-clipped median of
    a ring about each spot) or "mesh" (SExtractor's background map, boxes of mesh_size px);
    stamp_radius: the stamp's half-size, 2..15 (None: from the spot's bounding box); the
    detector: detector_gain (e-/ADU), read_noise (e- RMS), bias (ADU). The frames' overload
    (or the type's default) leaves pixels out of the refinement too.

    Calling the plan runs it (no allocation in the library once its spot list has grown):
    ``plan(image, *, frame_index=0, strong=None, three_d=False, progress=None)`` -> a structured
    array with the ``spotwave find`` CSV columns (see :func:`find`). image: one frame (height,
    width) or a stack (frames, height, width), NumPy or device (CuPy); spots are listed by frame,
    then by their first pixel in raster order. strong: a uint8 NumPy array of the image's shape
    that receives 1 for strong pixels. three_d, progress: for NumPy stacks (see :func:`find`).
    ``plan.stats`` holds the last run's counts (valid and strong pixels, components, spots,
    rejections).
    """

    def __init__(self, shape, dtype, *, algorithm="dispersion_extended", gain=1.0, kernel_size=3,
                 sigma_b=6.0, sigma_s=3.0, min_local=2, global_threshold=0.0, mask=None,
                 gain_map=None, overload=None, connectivity=4, min_spot_size=3,
                 max_spot_size=1000, max_separation=2.0, max_strong_fraction=0.25,
                 window="auto", max_components=None, refine="none", background="none",
                 mesh_size=64, stamp_radius=None, detector_gain=1.0, read_noise=0.0, bias=0.0,
                 moffat_beta=None, ctx=None):
        self.ctx = _context.resolve(ctx)
        if len(shape) != 2:
            raise ValueError(f"shape: expected (height, width), got {shape!r}")
        height, width = (int(n) for n in shape)
        kx, ky = _kernel(kernel_size)
        params = dict(algorithm=algorithm, kernel_x=kx, kernel_y=ky, sigma_b=sigma_b,
                      sigma_s=sigma_s, min_local=min_local, global_threshold=global_threshold,
                      gain=gain, overload=overload, connectivity=connectivity,
                      min_spot_size=min_spot_size, max_spot_size=max_spot_size,
                      max_separation=max_separation, max_strong_fraction=max_strong_fraction,
                      window=window, max_components=max_components, refine=refine,
                      background=background, mesh_size=mesh_size, stamp_radius=stamp_radius,
                      detector_gain=detector_gain, read_noise=read_noise, bias=bias,
                      moffat_beta=moffat_beta)
        if mask is not None:
            params["mask"] = _mask(mask, "mask")
        if gain_map is not None:
            params["gain_map"] = _arrays.host_array(gain_map, "gain_map")
        self._plan = _spotwave.FindPlan(self.ctx, width, height, pixel_type(dtype, "dtype"),
                                        params)
        self.shape = (height, width)
        self.dtype = np.dtype(dtype)

    @property
    def refine(self):
        """The refinement's settings: method, background, mesh_size, stamp_radius (0:
        automatic), detector_gain, read_noise, bias, overload, moffat_beta."""
        return self._plan.refine

    @property
    def stats(self):
        """Counts of the last run: frames, valid_pixels, strong_pixels, components, spots,
        rejected_small, rejected_large, rejected_separation."""
        return self._plan.stats

    @property
    def params(self):
        """The plan's parameters, as the library holds them."""
        return self._plan.params

    def __call__(self, image, *, frame_index=0, strong=None, three_d=False, progress=None):
        shape, _ = _arrays.shape_dtype(image, "image")
        obj, device = _arrays.as_input(image, "image", self.ctx)
        if strong is not None:
            strong = _mask(strong, "strong")
        if three_d and self.refine["method"] != "none":
            raise TypeError("three_d: refined positions are for 2-D spots (refine='none' with "
                            "three_d)")
        if len(shape) == 3 and not device and (three_d or progress is not None or shape[0] > 1):
            cols = self._plan.run_sequence(obj, int(frame_index), bool(three_d), strong, progress)
        else:
            if three_d:
                raise TypeError("three_d: joining spots across frames needs a NumPy stack "
                                "(frames, height, width)")
            if progress is not None:
                raise TypeError("progress: reported for NumPy stacks only")
            with _arrays.DeviceRun(self.ctx, device):
                cols = self._plan.run(obj, int(frame_index), strong)
        return _spot_table(cols, three_d, "refine_flags" in cols)

    def __repr__(self):
        return (f"spotwave.FindPlan(shape={self.shape}, dtype={self.dtype}, "
                f"algorithm='{self.params['algorithm']}', backend='{self.ctx.backend}')")


def _spot_table(cols, three_d, refined=False):
    if refined:
        out = np.empty(len(cols["x"]), _tables.FIND_REFINED)
        out["frame"] = cols["z0"]
        for name, _ in _tables.FIND_REFINE:
            out[name] = cols[name]
    elif three_d:
        out = np.empty(len(cols["x"]), _tables.FIND_3D)
        out["frame"] = cols["z"]
        out["z_var"] = cols["z_var"]
        out["bbox_z0"] = cols["z0"]
        out["bbox_z1"] = cols["z1"]
    else:
        out = np.empty(len(cols["x"]), _tables.FIND)
        out["frame"] = cols["z0"]
    out["x_px"] = cols["x"]
    out["y_px"] = cols["y"]
    out["x_var"] = cols["x_var"]
    out["y_var"] = cols["y_var"]
    out["intensity"] = cols["intensity"]
    out["npix"] = cols["npix"]
    out["bbox_x0"] = cols["x0"]
    out["bbox_x1"] = cols["x1"]
    out["bbox_y0"] = cols["y0"]
    out["bbox_y1"] = cols["y1"]
    return out


_CCD_SIGMA = 2.0  # ccd=True's sigma_b and sigma_s unless given (cmd_find.c's SW_CLI_CCD_SIGMA)


def ccd_estimate(image, *, bias=0.0, read_noise=0.0, mask=None, ctx=None):
    """CCD mode's estimate (refine.h, ``sw_ccd_estimate_frame``): the background of one host
    frame (its valid pixels sigma-clipped at 3 sd about the median until stable, the stars
    gone). Returns dict(mean (ADU), variance (ADU^2), npix, dispersion_gain = variance / mean
    (find's gain), gain (the detector's e-/ADU from (mean - bias) / gain = variance -
    read_noise^2 / gain^2))."""
    ctx = _context.resolve(ctx)
    shape, dtype = _arrays.shape_dtype(image, "image")
    if len(shape) != 2:
        raise ValueError(f"image: expected one frame (height, width), got shape {shape}")
    pixel_type(dtype, "image")
    if _arrays.is_device(image):
        raise TypeError("image: the CCD estimate reads a host frame: pass a NumPy array")
    return _spotwave.ccd_estimate(ctx, image, None if mask is None else _mask(mask, "mask"),
                                  float(bias), float(read_noise))


def ccd_keywords(first, gain, sigma_b, sigma_s, mask, more):
    """CCD mode's numbers from the run's first frame (a host array), as ``spotwave find --ccd``:
    more's detector_gain (unless given) from :func:`ccd_estimate`, and the returned (gain,
    sigma_b, sigma_s): the dispersion gain unless gain or gain_map is given, and 2, 2 for the
    sigmas unless given (sky-limited frames)."""
    est = ccd_estimate(first, bias=more.get("bias", 0.0), read_noise=more.get("read_noise", 0.0),
                       mask=mask, ctx=more.get("ctx"))
    if more.get("detector_gain") is None:
        more["detector_gain"] = est["gain"]
    if gain is None and more.get("gain_map") is None:
        gain = est["dispersion_gain"]
    return (gain, _CCD_SIGMA if sigma_b is None else sigma_b,
            _CCD_SIGMA if sigma_s is None else sigma_s)


def find(image, *, algorithm="dispersion_extended", gain=None, kernel_size=3, sigma_b=None,
         sigma_s=None, min_local=2, global_threshold=0.0, mask=None, **more):
    """Finds spots: the DIALS dispersion threshold, connected components, and per spot the
    intensity-weighted centroid (find.h; as ``spotwave find``).

    image: a frame (height, width) or a stack (frames, height, width) of uint8, uint16, uint32 or
    float32 pixels, a NumPy array or a device array (CuPy: the frames are read on the GPU in
    place; the spot list comes back to the host, as the library returns it).
    Parameters: see :class:`FindPlan` (the same names, DIALS's defaults). More keywords:
    gain_map, overload, connectivity, min_spot_size, max_spot_size, max_separation,
    max_strong_fraction, window, max_components, ctx (a :class:`Context`), strong (a uint8 NumPy
    array of the image's shape for the strong-pixel mask), first_frame (the number of the first
    frame, default 0), three_d (join spots across consecutive frames of a NumPy stack, as
    ``spotwave find --3d``: rotation scans), progress (a callable(done, total) called after each
    frame of a NumPy stack, on the calling thread; it must not call spotwave on the same context).
    Refined positions: refine ("none", "xwin", "gauss", "moffat"), background ("none", "annulus",
    "mesh"), mesh_size, stamp_radius, detector_gain, read_noise, bias, moffat_beta (see :class:`FindPlan`;
    as ``spotwave find --refine ...``), and ccd=True, CCD mode: the first frame's background
    (:func:`ccd_estimate`, host frames) gives the detector gain unless detector_gain is given
    and the dispersion threshold's gain (variance / mean) unless gain or gain_map is given, and
    sigma_b, sigma_s are 2 unless given (DIALS's 6 and 3 otherwise), as ``spotwave find --ccd``
    (:func:`ccd_estimate` returns the numbers; a device frame is copied to the host for it).

    Returns a NumPy structured array, one row per spot, with the columns of the ``spotwave find``
    CSV: frame, x_px, y_px (the centroid, 0-based pixel coordinates: the centre of pixel (0, 0)
    is (0.0, 0.0)), x_var, y_var (the Poisson variance of the centroid, px^2), intensity (summed
    counts), npix, bbox_x0, bbox_x1, bbox_y0, bbox_y1 (the bounding box, upper bounds exclusive,
    as DIALS). With three_d, frame is the intensity-weighted frame (float) and z_var, bbox_z0,
    bbox_z1 follow. With refine, x_px, y_px, x_var, y_var are the refined position and its
    variance, and refine_flags, flux_adu, sigma_px, background_adu follow.

    Method: Winter et al. (2018), Acta Cryst. D74, 85-97 (DIALS), the dispersion spot finder of
    G. Winter's "CUDA Spotfinding" note, and the dispersion criterion of Kabsch (2010), Acta
    Cryst. D66, 125-132.
    """
    run_keys = {"strong", "first_frame", "three_d", "progress"}
    run = {k: more.pop(k) for k in list(more) if k in run_keys}
    shape, dtype = _arrays.shape_dtype(image, "image")
    if len(shape) not in (2, 3):
        raise ValueError(f"image: expected a 2-D image (height, width) or a 3-D stack "
                         f"(frames, height, width), got a {len(shape)}-D array of shape {shape}")
    pixel_type(dtype, "image")
    check_keywords("find", more, FindPlan, extra=("ccd",))
    if more.pop("ccd", False):
        first = image if len(shape) == 2 else image[0]
        if _arrays.is_device(first):
            first = first.get()  # one frame, once: the estimate runs on the host
        gain, sigma_b, sigma_s = ccd_keywords(first, gain, sigma_b, sigma_s, mask, more)
    if gain is None:
        gain = 1.0
    sigma_b = 6.0 if sigma_b is None else sigma_b  # DIALS's defaults
    sigma_s = 3.0 if sigma_s is None else sigma_s
    plan = FindPlan(shape[-2:], dtype, algorithm=algorithm, gain=gain, kernel_size=kernel_size,
                    sigma_b=sigma_b, sigma_s=sigma_s, min_local=min_local,
                    global_threshold=global_threshold, mask=mask, **more)
    return plan(image, frame_index=run.get("first_frame", 0), strong=run.get("strong"),
                three_d=run.get("three_d", False), progress=run.get("progress"))
