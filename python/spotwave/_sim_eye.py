"""Synthetic eyes (sim_eye.h): Hartmann-Shack images of one or two living eyes, as ``spotwave
sim eye`` makes them (the same parameters and seed give the command's image). Imported into
:mod:`spotwave.sim` as :func:`spotwave.sim.eye`."""

import math

import numpy as np

from . import _context, _spotwave, _tables

_SH_TRUTH = _tables.SH_TRUTH

_ARTEFACTS = {  # keyword: the library's field
    "glow": "glow_e", "glow_falloff": "glow_falloff", "reflection": "reflection_e",
    "reflection_sigma": "reflection_sigma_px", "reflection_offset": "reflection_offset",
    "brightness": "brightness", "tear_film": "tear_blobs", "tear_depth": "tear_depth",
    "white_noise": "white_noise_e",
}
# Those --no-artefacts turns off when not given.
_SWITCHES = ("glow", "reflection", "brightness", "tear_film", "white_noise")


def artefact_defaults():
    """The artefacts of Mompean et al. (2019)'s test set as the library draws them by default
    (sim_eye.h, ``sw_eye_artefacts_default``), by the library's field names."""
    return _spotwave.eye_artefacts_default()


def population(pupil_mm, *, data=None, ctx=None):
    """The ocular population statistics of Thibos L. N., Hong X., Bradley A., Cheng X. (2002),
    "Statistical variation of aberration structure and image quality in a normal population of
    healthy eyes", J. Opt. Soc. Am. A 19(12), 2329-2348, for a pupil of 3.0, 4.5, 6.0 or 7.5 mm
    (data: the folder, default spotwave's data/ocular): dict(pupil_mm, mean_um, sd_um, cov_um2)
    by OSA/ANSI j from 0, micrometres."""
    ctx = _context.resolve(ctx)
    d = _spotwave.ocular_population(ctx, None if data is None else str(data), float(pupil_mm))
    n = d["mean_um"].size
    d["cov_um2"] = d["cov_um2"].reshape(n, n)
    return d


def eye(*, binocular=False, eye_center=None, pupil_px=None, pupil_mm=5.12, ellipse=None,
        zernike=None, zernike_pupil_mm=None, data=None, population_mm=None, index=0,
        max_order=None, keep_tilt=False, sphere_d=0.0, cyl_d=0.0, axis_deg=0.0, rms_um=None,
        artefacts=True, glow=None, glow_falloff=None, reflection=None, reflection_sigma=None,
        reflection_offset=None, brightness=None, tear_film=None, tear_depth=None,
        white_noise=None, grid=None, pitch=None, origin=None, size=None, pixel_um=None,
        focal_mm=3.5, lenslet_um=None, wavelength_um=0.78, model="geometric", spot="gaussian",
        sigma=0.0, flux=2000.0, roi=0, samples=0, oversample=0, fft_size=0, min_illum=0.0,
        sky_e=0.0, dark_e=0.0, read_noise_e=0.0, gain=1.0, bias=0.0, full_well=0.0,
        shot_noise=True, noise="shot", bits=8, seed=1, reference=False, ctx=None):
    """A Hartmann-Shack image of one or two synthetic eyes (as ``spotwave sim eye``), after the
    test set of Mompean J., Aragon J. L., Prieto P. M., Artal P. (2019), "GPU-based processing of
    Hartmann-Shack images for accurate and high-speed ocular wavefront sensing", Future
    Generation Computer Systems 91, 177-190 (Sec. 4.1): aberrations drawn from the population of
    Thibos et al. (2002) (:func:`population`), each eye's spots through its pupil, the retinal
    glow that lights the pupils, corneal reflections, brightness maps, tear-film break-up and
    white noise, then the detector. Returns ``(image, truth)``, or ``(image, truth,
    reference_image)`` with reference=True (flat wavefronts through the same pupils, no
    artefacts, another exposure's noise: the centroid reference).

    Eyes: binocular (two eyes side by side); eye_center, one (x, y) pixel centre per eye
    (default: the centre of the image, or of each half); pupil_px, the pupil diameter on the
    detector (default 0.9 x the smaller side of the image or half); pupil_mm, the eye's pupil
    (the coefficients' pupil; default 5.12 mm); ellipse (b/a, angle_deg).
    Aberrations, OSA/ANSI coefficients in micrometres over pupil_mm (OSA sign: a myopic eye has
    c(2, 0) > 0; piston removed): zernike, given coefficients (a 1-D array by OSA j, or a table
    with coef_um and j, noll or n, m; one for both eyes, or a list of two), over
    zernike_pupil_mm (>= pupil_mm; default pupil_mm), tilts kept; otherwise a population draw
    (data, population_mm: 3.0, 4.5, 6.0 or 7.5, default the smallest >= pupil_mm; index: the
    first eye's draw, the second's is index + 1; keep_tilt). Then max_order (orders above set
    to 0), sphere_d / cyl_d / axis_deg (a refraction added, dioptres, degrees) and rms_um (orders
    >= 2 scaled to this RMS; Mompean et al. Sec. 4.3: 0.5 to 6).
    Artefacts: glow (e-/px at the pupil centre), glow_falloff, reflection (peak e-),
    reflection_sigma (px), reflection_offset (x radius), brightness (amplitude < 1), tear_film
    (blobs per eye), tear_depth, white_noise (e- RMS); None: the default
    (:func:`artefact_defaults`); artefacts=False turns off those not given.
    Lenslets and spots: as :func:`spotwave.sim.sh` (grid default: as many as fit the image;
    pitch 32 px; size default 640 x 640, 1280 x 640 binocular; wavelength 0.78 um; flux 2000
    e- per lenslet). Detector: as :func:`spotwave.sim.stars`, bits 8 by default.

    truth: one dict per eye (cx_px, cy_px, a_px, b_px, angle_deg: the pupil ellipse, pixels;
    pupil_mm; reflection_x_px, reflection_y_px (NaN: none); coef_um, the coefficients drawn;
    spots, the eye's lenslets as :func:`spotwave.sim.sh`'s truth table).
    """
    from .sim import _detector, _out_dtype, _size, _zernike_coefs  # noqa: PLC0415

    ctx = _context.resolve(ctx)
    ne = 2 if binocular else 1
    # The lenslet grid: the pixel / lenslet / pitch triangle, the grid from the size.
    have_pitch = pitch is not None
    pitch = 32.0 if pitch is None else float(pitch)
    if lenslet_um is not None:
        if pixel_um is not None and have_pitch:
            if abs(lenslet_um - pitch * pixel_um) > 1e-9 * lenslet_um:
                raise ValueError(f"lenslet_um {lenslet_um:g} disagrees with pitch {pitch:g} x "
                                 f"pixel_um {pixel_um:g}: give two of the three")
        elif pixel_um is not None:
            pitch = lenslet_um / pixel_um
        else:
            pixel_um = lenslet_um / pitch
    pixel_um = 5.5 if pixel_um is None else float(pixel_um)
    width, height = _size(size) if size is not None else ((1280 if binocular else 640), 640)
    if grid is None:
        nx, ny = math.floor(width / pitch), math.floor(height / pitch)
        if nx < 1 or ny < 1:
            raise ValueError(f"a lenslet of {pitch:g} px does not fit the {width}x{height} image")
    else:
        nx, ny = (int(v) for v in grid)
    if origin is None:
        x0 = math.floor(0.5 * (width - pitch * nx))
        y0 = math.floor(0.5 * (height - pitch * ny))
    else:
        x0, y0 = (float(v) for v in origin)
    _spotwave.geometry_check(dict(x0=x0, y0=y0, pitch=pitch, nx=nx, ny=ny, pixel_um=pixel_um,
                                  focal_mm=focal_mm), width, height)
    # The eyes on the detector.
    if pupil_px is None:
        pupil_px = math.floor(0.9 * min(width / ne, height))
    if eye_center is None:
        centres = [((2 * e + 1) * width / (2 * ne) - 0.5, 0.5 * height - 0.5) for e in range(ne)]
    else:
        centres = [tuple(float(v) for v in c) for c in
                   (eye_center if np.ndim(eye_center) == 2 else [eye_center])]
        if len(centres) != ne:
            raise ValueError(f"eye_center: give one (x, y) per eye ({ne})")
    ratio, angle = (1.0, 0.0) if ellipse is None else (float(v) for v in ellipse)
    if not 0 < ratio <= 1:
        raise ValueError(f"ellipse: b/a = {ratio:g} is not in (0, 1]")
    # The coefficients.
    if not pupil_mm > 0:
        raise ValueError(f"pupil_mm: {pupil_mm!r} is not a positive number")
    opts = dict(pupil_mm=float(pupil_mm), max_order=-1 if max_order is None else int(max_order),
                sphere_d=float(sphere_d), cyl_d=float(cyl_d), axis_deg=float(axis_deg),
                total_rms_um=0.0 if rms_um is None else float(rms_um))
    if zernike is not None:
        if data is not None or population_mm is not None or keep_tilt:
            raise TypeError("data, population_mm and keep_tilt are for population eyes, not "
                            "given zernike coefficients")
        per_eye = isinstance(zernike, (list, tuple)) and len(zernike) in (1, 2) and all(
            isinstance(z, dict) or np.ndim(z) >= 1 for z in zernike)
        zs = list(zernike) if per_eye else [zernike]
        if len(zs) > ne:
            raise ValueError("zernike: two sets of coefficients for one eye (binocular=True?)")
        frm = float(zernike_pupil_mm) if zernike_pupil_mm is not None else float(pupil_mm)
        if frm < pupil_mm:
            raise ValueError(f"zernike_pupil_mm {frm:g} is smaller than pupil_mm {pupil_mm:g}: "
                             f"coefficients are only rescaled to a smaller pupil")
        coefs = []
        for e in range(ne):
            z = np.ascontiguousarray(_zernike_coefs(zs[e if e < len(zs) else 0]), np.float64)
            coefs.append(_spotwave.ocular_apply(ctx, z, frm, dict(opts, keep_tilt=True),
                                                max(z.size, 6)))
        source = "zernike"
    else:
        if zernike_pupil_mm is not None:
            raise TypeError("zernike_pupil_mm goes with zernike")
        pupils = _spotwave.ocular_pupils()
        if population_mm is None:
            fits = [p for p in pupils if p >= pupil_mm - 1e-9]
            if not fits:
                raise ValueError(f"pupil_mm {pupil_mm:g} is larger than the largest population "
                                 f"pupil (7.5 mm): give zernike coefficients instead")
            population_mm = min(fits)
        elif not any(abs(population_mm - p) <= 1e-6 for p in pupils):
            raise ValueError(f"population_mm: {population_mm:g} is not 3.0, 4.5, 6.0 or 7.5")
        elif population_mm < pupil_mm - 1e-9:
            raise ValueError(f"population_mm {population_mm:g} is smaller than pupil_mm "
                             f"{pupil_mm:g} (only smaller pupils are reached by rescaling)")
        if not 0 <= int(index) < 2 ** 55:
            raise ValueError(f"index: {index!r} is not a draw index in 0..2^55-1")
        coefs = [_spotwave.ocular_draw(ctx, None if data is None else str(data),
                                       float(population_mm), int(seed), int(index) + e,
                                       dict(opts, keep_tilt=bool(keep_tilt)))
                 for e in range(ne)]
        source = "population"
    # Artefacts.
    given = dict(glow=glow, glow_falloff=glow_falloff, reflection=reflection,
                 reflection_sigma=reflection_sigma, reflection_offset=reflection_offset,
                 brightness=brightness, tear_film=tear_film, tear_depth=tear_depth,
                 white_noise=white_noise)
    params = dict(width=width, height=height, x0=x0, y0=y0, pitch=pitch, nx=nx, ny=ny,
                  pixel_um=pixel_um, focal_mm=focal_mm, model=model, spot=spot,
                  wavelength_um=wavelength_um, sigma_px=sigma, flux_e=flux, roi_px=roi,
                  samples=samples, oversample=oversample, fft_size=fft_size,
                  min_illum=min_illum)
    for k, v in given.items():
        if v is not None:
            params[_ARTEFACTS[k]] = v
        elif not artefacts and k in _SWITCHES:
            params[_ARTEFACTS[k]] = 0
    det = {}
    _detector(det, sky_e=sky_e, dark_e=dark_e, read_noise_e=read_noise_e, gain=gain, bias=bias,
              full_well=full_well, shot_noise=shot_noise, noise=noise, seed=seed)
    params.update(det)
    eyes = [dict(cx_px=c[0], cy_px=c[1], diameter_px=float(pupil_px), ellipticity=ratio,
                 angle_deg=angle, pupil_mm=float(pupil_mm), coef_um=coefs[e])
            for e, c in enumerate(centres)]
    dtype = _out_dtype(bits)
    image = np.empty((height, width), dtype)
    ref = np.empty((height, width), dtype) if reference else None
    truth = _spotwave.sim_eye(ctx, params, eyes, image, ref)
    for t in truth:
        t["spots"] = _tables.from_columns(_SH_TRUTH, t["spots"])
        t["source"] = source
    return (image, truth, ref) if reference else (image, truth)
