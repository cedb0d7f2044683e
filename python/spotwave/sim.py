"""Simulated images whose truth is known: star fields and Shack-Hartmann spot patterns, through a
detector model (sim.h, sim_sh.h, turbulence.h), as ``spotwave sim stars`` and ``spotwave sim sh``
make them: the same parameters and seed give the command's image.

Units: pixels are 0-based with the centre of pixel (0, 0) at (0.0, 0.0); fluxes in
photo-electrons (e-) per exposure; images in ADU of the detector's output type (uint8, uint16,
uint32: rounded and clamped) or float32.

Methods: star fields after Li C., Zhang Y., Zheng C., Hu X., "Implementing high-performance
intensity model with blur effect on GPUs for large-scale star image simulation" (IEEE conference
paper, ~2013): magnitudes by their Eq. (1), the Gaussian PSF of Eq. (2) over a region of interest
around each star (Eq. 3). Shack-Hartmann geometry after Mocci et al. (2020), J. Opt. Soc. Am. A
37(10), 1548-1556, Eq. (1)-(5). Turbulence: FFT phase screens with subharmonics (Lane R. G.,
Glindemann A., Dainty J. C. (1992), "Simulation of a Kolmogorov phase screen", Waves in Random
Media 2(3), 209-224). Noise from the counter-based Philox generator (Salmon J. K., Moraes M. A.,
Dror R. O., Shaw D. E. (2011), "Parallel random numbers: as easy as 1, 2, 3", SC'11), so a seed
gives the same image on the CPU and the GPU.
"""

import math

import numpy as np

from . import _arrays, _context, _spotwave, _tables

_BITS = {8: np.uint8, "8": np.uint8, 16: np.uint16, "16": np.uint16, 32: np.uint32,
         "32": np.uint32, "32f": np.float32}


def _out_dtype(bits):
    if bits in _BITS:
        return np.dtype(_BITS[bits])
    try:
        dt = np.dtype(bits)
    except TypeError:
        dt = None
    if dt in (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32), np.dtype(np.float32)):
        return dt
    raise ValueError(f"bits: {bits!r} is not 8, 16, 32 or '32f' (or a uint8, uint16, uint32, "
                     f"float32 dtype)")


def _detector(params, *, sky_e, dark_e, read_noise_e, gain, bias, full_well, shot_noise, noise,
              seed):
    if noise not in ("shot", "none"):
        raise ValueError(f"noise: '{noise}' is not 'shot' or 'none'")
    if noise == "none" and read_noise_e > 0:
        raise ValueError(f"noise='none' and read_noise_e={read_noise_e:g} contradict each other")
    params.update(sky_e=sky_e, dark_e=dark_e, read_noise_e=0.0 if noise == "none" else read_noise_e,
                  gain=gain, bias=bias, full_well=full_well,
                  shot_noise=bool(shot_noise) and noise != "none", seed=seed)


def _size(size, name="size"):
    try:
        w, h = (int(v) for v in size)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected (width, height), got {size!r}") from None
    return w, h


def _column(table, name):
    try:
        return np.ascontiguousarray(np.asarray(table[name], np.float64))
    except (KeyError, ValueError, IndexError, TypeError):
        return None


def stars(*, catalog=None, random=None, size=(1024, 1024), sigma=1.0, roi=None, roi_side=None,
          psf="integrated", zero_point=1e6, ratio="pogson", mag_range=(0.0, 15.0), seed=1,
          method="auto", sky_e=0.0, dark_e=0.0, read_noise_e=0.0, gain=1.0, bias=0.0,
          full_well=0.0, shot_noise=True, noise="shot", bits=16, device=False, ctx=None):
    """A star field (as ``spotwave sim stars``). Returns ``(image, truth)``.

    Source (exactly one): catalog, a table with columns x_px, y_px (pixels) and flux_e (e-) or
    mag (a structured array, dict or DataFrame; flux_e wins when both are given); or random=N
    stars uniform over the image's area with magnitudes uniform in mag_range (reproducible with
    seed). Rendering: size (width, height); sigma, the Gaussian PSF's standard deviation in
    pixels; roi (radius R: side 2R + 1) or roi_side (default 2 ceil(5 sigma) + 1, at most the
    larger side); psf "integrated" (over each pixel: conserves flux) or "sampled" (at the pixel
    centre, as the paper); zero_point A (e- of a magnitude-0 star) and ratio r ("pogson" = 10^0.4,
    or e.g. 2.512 as the paper): flux = A r^-mag; method "auto", "sequential", "openmp",
    "parallel", "adaptive", "deterministic".
    Detector: sky_e, dark_e (e- per pixel), shot_noise (Poisson), read_noise_e (e- RMS), gain
    (e- per ADU), bias (ADU), full_well (e-, 0: none), noise "shot" or "none" (the expected
    image), bits 8, 16 (default), 32 or "32f"; seed for the stars and the noise.
    device: True gives the image as a CuPy array on the context's GPU (no host copy).

    image: (height, width) of the output type. truth: a structured array with the columns of the
    command's truth CSV, x_px, y_px, flux_e, mag (NaN for stars given by flux only), for the
    stars whose centre lies on the image (-0.5 <= x < width - 0.5, y likewise), in list order.
    """
    ctx = _context.resolve(ctx)
    width, height = _size(size)
    if (catalog is None) == (random is None):
        raise TypeError("stars: give exactly one of catalog and random")
    if sigma <= 0:
        raise ValueError(f"sigma: {sigma!r} is not a positive number of pixels")
    larger = max(width, height)
    if roi is not None and roi_side is not None:
        raise TypeError("stars: give roi or roi_side, not both")
    if roi is not None:
        side = 2 * int(roi) + 1
    elif roi_side is not None:
        side = int(roi_side)
    else:
        r = math.ceil(5.0 * sigma)
        side = larger if 2.0 * r + 1.0 > larger else 2 * r + 1
    if side > larger:
        raise ValueError(f"roi: the ROI side {side} px is larger than the {width}x{height} image")
    if isinstance(ratio, str):
        if ratio.lower() != "pogson":
            raise ValueError(f"ratio: '{ratio}' is not 'pogson' or a number")
        ratio = 0.0
    params = dict(width=width, height=height, sigma=sigma, roi_side=side, psf=psf,
                  method=method, zero_point=zero_point, ratio=float(ratio))
    if random is not None:
        mmin, mmax = (float(v) for v in mag_range)
        if mmin > mmax:
            raise ValueError(f"mag_range: {mag_range!r} is not (min, max) with min <= max")
        params.update(random=int(random), mag_min=mmin, mag_max=mmax)
    else:
        x, y = _column(catalog, "x_px"), _column(catalog, "y_px")
        flux, mag = _column(catalog, "flux_e"), _column(catalog, "mag")
        if x is None or y is None or (flux is None and mag is None):
            raise ValueError("catalog: expected columns x_px, y_px and flux_e or mag")
        params.update(x=x, y=y, flux=flux, mag=mag)
    _detector(params, sky_e=sky_e, dark_e=dark_e, read_noise_e=read_noise_e, gain=gain,
              bias=bias, full_well=full_well, shot_noise=shot_noise, noise=noise, seed=seed)
    if device:
        _arrays.require_cuda(ctx, "device=True")
    image = _arrays.empty((height, width), _out_dtype(bits), device, ctx)
    out, _ = _arrays.as_output(image, "image", ctx)
    with _arrays.DeviceRun(ctx, device):
        truth, _report = _spotwave.sim_stars(ctx, params, out)
    return image, _tables.from_columns(_tables.STARS_TRUTH, truth)


def _zernike_coefs(z):
    """OSA coefficients (um) from a 1-D sequence by j, or a table with coef_um and j, noll or
    (n, m)."""
    names = getattr(getattr(z, "dtype", None), "names", None)
    if names is None and isinstance(z, dict):
        names = tuple(z)
    if not names:
        c = np.asarray(z, np.float64)
        if c.ndim != 1:
            raise ValueError("zernike: expected a 1-D array of coefficients by OSA j (um)")
        return np.ascontiguousarray(c)
    from . import zernike as zk  # noqa: PLC0415

    coef = np.asarray(z["coef_um"], np.float64)
    if "j" in names:
        js = [int(j) for j in np.asarray(z["j"])]
    elif "noll" in names:
        js = [zk.noll_to_osa(j) for j in np.asarray(z["noll"])]
    else:
        js = [zk.osa_index(n, m) for n, m in zip(np.asarray(z["n"]), np.asarray(z["m"]))]
    out = np.zeros(max(js) + 1 if js else 0)
    for j, c in zip(js, coef):
        out[j] = c
    return out


def sh(*, zernike=None, zernike_radius_mm=None, screen=None, screen_spacing_um=None,
       screen_scale_um=1.0, turbulence=None, diameter_m=None, screen_index=0, pupil_mm=None,
       pupil_center_mm=(0.0, 0.0), obscuration=0.0, ellipse=None, grid=(16, 16), pitch=32.0,
       origin=None, size=None, pixel_um=5.5, focal_mm=3.5, lenslet_um=None, wavelength_um=0.8,
       model="geometric", spot="gaussian", sigma=0.0, flux=5e4, roi=0, samples=0, oversample=0,
       fft_size=0, min_illum=0.0, sky_e=0.0, dark_e=0.0, read_noise_e=0.0, gain=1.0, bias=0.0,
       full_well=0.0, shot_noise=True, noise="shot", bits=16, seed=1, reference=False,
       device=False, ctx=None):
    """A Shack-Hartmann spot pattern (as ``spotwave sim sh``). Returns ``(image, truth)``, or
    ``(image, truth, reference_image)`` with reference=True.

    Wavefront (at most one; none: flat): zernike, coefficients in um by OSA j (a 1-D array, or a
    table with coef_um and j, noll or n, m), OSA sign (a positive wavefront leads), over a circle
    of radius zernike_radius_mm (default: the pupil's radius; without pupil_mm the circle
    inscribed in the grid); screen, an optical path map (2-D float64, um per unit x
    screen_scale_um) sampled every screen_spacing_um, centred on the array; turbulence,
    dict(r0=metres, L0=25 metres (0 or inf: Kolmogorov), wavelength=0.5 um (of r0),
    subharmonics=3), on the sky of a telescope diameter_m across (needed) whose pupil is imaged
    onto pupil_mm (else the array's larger side), as the command's --diameter-m: an FFT screen 4
    times the array's width (at most 2048 samples) laid on the array (spacing screen_spacing_um,
    default the lenslet pitch / 8; screen_index picks a screen of the seed's sequence).
    Pupil: pupil_mm, the diameter at the lenslets; pupil_center_mm (u, v) offset from the array's
    centre; obscuration (fraction); ellipse (b/a, angle_deg). Without pupil_mm every lenslet is
    fully lit.
    Geometry (0-based pixels): grid (nx, ny); pitch, pixels per lenslet; origin (x0, y0), the
    corner pixel of lenslet (0, 0) (default: the grid centred); size (width, height) (default:
    just enough for the grid); pixel_um; focal_mm; lenslet_um (with pixel_um it sets the pitch,
    otherwise the pixel size).
    Spots: wavelength_um; model "geometric" (a spot per lenslet at the mean slope) or
    "diffraction" (|FFT|^2 of each lenslet's field); spot "gaussian" or "sinc2"; sigma (px, 0:
    0.42 lambda f / pitch); flux (e- of a fully lit lenslet); roi, samples, oversample, fft_size
    (0: automatic); min_illum. Detector: as :func:`stars`.
    reference: also render the flat-wavefront reference exposure (its own noise, seed + the
    golden-ratio constant, as the command). device: CuPy images on the context's GPU.

    truth: a structured array with the columns of the command's truth CSV, ix, iy, x_px, y_px
    (the spot's true centre: reference + F <grad W>, NaN for lenslets not drawn), ref_x_px,
    ref_y_px (the optical axis), illum (lit fraction 0..1), then slope_x_rad, slope_y_rad (the
    mean wavefront slope), one row per lenslet in lenslet order (iy, then ix).
    """
    ctx = _context.resolve(ctx)
    if sum(v is not None for v in (zernike, screen, turbulence)) > 1:
        raise TypeError("sh: give at most one of zernike, screen and turbulence")
    if turbulence is not None and not (diameter_m is not None and diameter_m > 0):
        raise TypeError("sh: turbulence needs diameter_m, the telescope's diameter in metres (r0 "
                        "and L0 are the sky's; for r0 in the plane of the array, give the width "
                        "the pupil spans there, in metres)")
    if diameter_m is not None and turbulence is None:
        raise TypeError("sh: diameter_m goes with turbulence")
    if screen is not None and screen_spacing_um is None:
        raise TypeError("sh: screen needs screen_spacing_um")
    if zernike_radius_mm is not None and zernike is None:
        raise TypeError("sh: zernike_radius_mm goes with zernike")
    if pupil_mm is None and (tuple(pupil_center_mm) != (0.0, 0.0) or ellipse is not None
                             or obscuration > 0):
        raise TypeError("sh: pupil_center_mm, obscuration and ellipse need pupil_mm")
    nx, ny = (int(v) for v in grid)
    pitch = float(pitch)
    if lenslet_um is not None:  # two of lenslet_um, pitch (given), pixel_um
        pixel_um = lenslet_um / pitch
    if origin is not None:
        x0, y0 = (float(v) for v in origin)
    if size is None:
        ox, oy = (x0, y0) if origin is not None else (0.0, 0.0)
        width, height = math.ceil(ox + pitch * nx), math.ceil(oy + pitch * ny)
    else:
        width, height = _size(size)
    if origin is None:
        x0 = math.floor(0.5 * (width - pitch * nx))
        y0 = math.floor(0.5 * (height - pitch * ny))
    _spotwave.geometry_check(dict(x0=x0, y0=y0, pitch=pitch, nx=nx, ny=ny, pixel_um=pixel_um,
                                  focal_mm=focal_mm), width, height)
    lens_um = pitch * pixel_um
    params = dict(width=width, height=height, x0=x0, y0=y0, pitch=pitch, nx=nx, ny=ny,
                  pixel_um=pixel_um, focal_mm=focal_mm, model=model, spot=spot,
                  wavelength_um=wavelength_um, sigma_px=sigma, flux_e=flux, roi_px=roi,
                  samples=samples, oversample=oversample, fft_size=fft_size, min_illum=min_illum)
    if pupil_mm is not None:
        cu, cv = (float(v) for v in pupil_center_mm)
        params.update(pupil_diameter_um=pupil_mm * 1e3, pupil_cu_um=cu * 1e3,
                      pupil_cv_um=cv * 1e3, obscuration=obscuration)
        if ellipse is not None:
            ratio, angle = (float(v) for v in ellipse)
            params.update(pupil_b_ratio=ratio, pupil_angle_deg=angle)
    if zernike is not None:
        params["zernike"] = _zernike_coefs(zernike)
        params["zernike_radius_um"] = (zernike_radius_mm * 1e3 if zernike_radius_mm is not None
                                       else 0.5 * pupil_mm * 1e3 if pupil_mm is not None
                                       else 0.5 * lens_um * min(nx, ny))
    elif screen is not None:
        params.update(screen=_arrays.host_array(screen, "screen"),
                      screen_spacing_um=screen_spacing_um, screen_scale=screen_scale_um)
    elif turbulence is not None:
        t = dict(turbulence)
        unknown = set(t) - {"r0", "L0", "wavelength", "subharmonics"}
        if "r0" not in t or unknown:
            raise TypeError("turbulence: expected dict(r0=metres[, L0=metres, wavelength=um, "
                            "subharmonics=N])")
        spacing = screen_spacing_um if screen_spacing_um is not None else lens_um / 8.0
        ext = lens_um * max(nx, ny)
        n = max(2.0 * math.ceil(0.5 * (ext / spacing + 4.0)), 8.0)
        if n > 8192:
            raise ValueError(f"turbulence: covering the {ext:g} um array at {spacing:g} um "
                             f"spacing needs a {n:g}-sample screen (at most 8192): give a larger "
                             f"screen_spacing_um")
        wide = 4  # as the command: an FFT screen of the array's own size runs low over it
        while wide > 1 and wide * n > 2048:
            wide -= 1
        image_um = pupil_mm * 1e3 if pupil_mm is not None else ext
        L0 = t.get("L0", 25.0)
        params.update(r0_m=t["r0"], L0_m=L0,
                      turbulence_wavelength_um=t.get("wavelength", 0.5),
                      subharmonics=t.get("subharmonics", 3), screen_n=int(wide * n),
                      screen_spacing_um=spacing, screen_index=int(screen_index),
                      screen_sky_spacing_m=spacing * diameter_m / image_um)
    _detector(params, sky_e=sky_e, dark_e=dark_e, read_noise_e=read_noise_e, gain=gain,
              bias=bias, full_well=full_well, shot_noise=shot_noise, noise=noise, seed=seed)
    if device:
        _arrays.require_cuda(ctx, "device=True")
    dtype = _out_dtype(bits)
    image = _arrays.empty((height, width), dtype, device, ctx)
    ref = _arrays.empty((height, width), dtype, device, ctx) if reference else None
    out, _ = _arrays.as_output(image, "image", ctx)
    rout = _arrays.as_output(ref, "reference", ctx)[0] if reference else None
    with _arrays.DeviceRun(ctx, device):
        truth, report = _spotwave.sim_sh(ctx, params, out, rout)
    if report["lit"] == 0:
        raise ValueError(f"the pupil lights none of the {report['lenslets']} lenslets (check "
                         f"pupil_mm, pupil_center_mm and min_illum against the grid)")
    table = _tables.from_columns(_tables.SH_TRUTH, truth)
    return (image, table, ref) if reference else (image, table)


def _turbulence(r0, L0, wavelength_um, subharmonics):
    return dict(r0_m=float(r0), L0_m=float(L0), wavelength_um=float(wavelength_um),
                subharmonics=subharmonics)


def phase_screen(n, spacing_m, *, r0, L0=25.0, wavelength_um=0.5, subharmonics=3, seed=1,
                 index=0, ctx=None):
    """An n x n FFT phase screen (n even, 8..8192) sampled every spacing_m metres, as optical
    path difference in micrometres (a float64 (n, n) array, row = v, column = u).

    Turbulence: von Karman with outer scale L0 (metres) or Kolmogorov (L0 = 0 or inf); the
    Fried parameter r0 (metres) at wavelength_um. Method: Lane, Glindemann & Dainty (1992), Waves
    in Random Media 2(3), 209-224, with `subharmonics` levels of subharmonics (0..8) for the
    large scales. Screen `index` of the sequence of `seed` is reproducible alone, and the CPU and
    the GPU give the same screen to double rounding.
    """
    ctx = _context.resolve(ctx)
    params = dict(_turbulence(r0, L0, wavelength_um, subharmonics), n=n, spacing_m=spacing_m,
                  seed=seed, index=index)
    a = _spotwave.phase_screen(ctx, params)
    return a.reshape(int(n), int(n))


def structure_function(r_m, *, r0, L0=25.0, wavelength_um=0.5):
    """The phase structure function D(r) in rad^2 at the r0 wavelength: von Karman (exact, with
    K_5/6) or 6.8839 (r / r0)^(5/3) for Kolmogorov (L0 = 0 or inf). r_m: a number or an array of
    separations in metres."""
    params = _turbulence(r0, L0, wavelength_um, 3)
    r = np.asarray(r_m, np.float64)
    out = np.array([_spotwave.structure_function(params, float(v)) for v in r.ravel()])
    return out.reshape(r.shape) if r.ndim else float(out[0])


class InfiniteScreen:
    """An infinite phase screen: an n x n window (n even, 8..1024) over a frozen screen that
    moves along +v, new rows drawn from the earlier ones (Assemat F., Wilson R. W., Gendron E.
    (2006), "Method for simulating infinitely long and non stationary phase screens with
    optimized memory storage", Opt. Express 14(3), 988-999). von Karman turbulence (finite L0).

    ``InfiniteScreen(n, spacing_m, *, r0, L0=25.0, wavelength_um=0.5, subharmonics=3, seed=1,
    ctx=None)``; ``advance(distance_m)`` moves the screen; ``window()`` gives the current
    (n, n) OPD in micrometres. Runs on the CPU whatever the context.
    """

    def __init__(self, n, spacing_m, *, r0, L0=25.0, wavelength_um=0.5, subharmonics=3, seed=1,
                 ctx=None):
        self.ctx = _context.resolve(ctx)
        params = dict(_turbulence(r0, L0, wavelength_um, subharmonics), n=n,
                      spacing_m=spacing_m, seed=seed)
        self._s = _spotwave.InfiniteScreen(self.ctx, params)
        self.n = int(n)

    def advance(self, distance_m):
        """Moves the screen by distance_m (>= 0) metres along +v."""
        self._s.advance(float(distance_m))

    def window(self):
        """The current window, (n, n) float64 OPD in micrometres."""
        return self._s.window().reshape(self.n, self.n)

    rows_added = property(lambda self: self._s.rows_added, doc="Rows drawn since creation.")
    position_m = property(lambda self: self._s.position_m, doc="Distance moved, metres.")


from ._sim_eye import eye  # noqa: E402,F401  (synthetic eyes: sim_eye.h)
