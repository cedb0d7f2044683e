"""Spot finding: the DIALS dispersion threshold and connected components (find.h).

Method: Winter G. et al. (2018), "DIALS: implementation and evaluation of a new integration
package", Acta Cryst. D74, 85-97, and the dispersion spot finder as documented in G. Winter,
"CUDA Spotfinding" (technical note); the dispersion criterion of Kabsch W. (2010), "XDS",
Acta Cryst. D66, 125-132.
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
    max_strong_fraction=0.25, window="auto", max_components=None, ctx=None)``

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
                 window="auto", max_components=None, ctx=None):
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
                      window=window, max_components=max_components)
        if mask is not None:
            params["mask"] = _mask(mask, "mask")
        if gain_map is not None:
            params["gain_map"] = _arrays.host_array(gain_map, "gain_map")
        self._plan = _spotwave.FindPlan(self.ctx, width, height, pixel_type(dtype, "dtype"),
                                        params)
        self.shape = (height, width)
        self.dtype = np.dtype(dtype)

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
        return _spot_table(cols, three_d)

    def __repr__(self):
        return (f"spotwave.FindPlan(shape={self.shape}, dtype={self.dtype}, "
                f"algorithm='{self.params['algorithm']}', backend='{self.ctx.backend}')")


def _spot_table(cols, three_d):
    if three_d:
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


def find(image, *, algorithm="dispersion_extended", gain=1.0, kernel_size=3, sigma_b=6.0,
         sigma_s=3.0, min_local=2, global_threshold=0.0, mask=None, **more):
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

    Returns a NumPy structured array, one row per spot, with the columns of the ``spotwave find``
    CSV: frame, x_px, y_px (the centroid, 0-based pixel coordinates: the centre of pixel (0, 0)
    is (0.0, 0.0)), x_var, y_var (the Poisson variance of the centroid, px^2), intensity (summed
    counts), npix, bbox_x0, bbox_x1, bbox_y0, bbox_y1 (the bounding box, upper bounds exclusive,
    as DIALS). With three_d, frame is the intensity-weighted frame (float) and z_var, bbox_z0,
    bbox_z1 follow.

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
    check_keywords("find", more, FindPlan)
    plan = FindPlan(shape[-2:], dtype, algorithm=algorithm, gain=gain, kernel_size=kernel_size,
                    sigma_b=sigma_b, sigma_s=sigma_s, min_local=min_local,
                    global_threshold=global_threshold, mask=mask, **more)
    return plan(image, frame_index=run.get("first_frame", 0), strong=run.get("strong"),
                three_d=run.get("three_d", False), progress=run.get("progress"))
