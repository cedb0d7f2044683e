"""Cross-checks against aotools (https://github.com/AOtools/aotools), the adaptive-optics
community's NumPy toolbox: Zernike indices and values, coefficients exchanged both ways through
a Shack-Hartmann frame, centre-of-gravity centroids of the same frame, and the turbulence
structure functions. Skipped, saying so, when aotools is not importable.

Conventions, spelled out once:
- aotools numbers Zernike polynomials by Noll index j >= 1 (``aotools.zernIndex(j)`` gives
  (n, m), m > 0 the cosine terms for even j); spotwave by OSA/ANSI j >= 0. The functions are the
  same, with the same normalisation (aotools' default ``norm="noll"``: RMS 1 over the unit disc,
  spotwave's orthonormal basis), on the same grid (``zernike_nm``'s pixel centres
  (i - N/2 + 0.5) / (N/2) are ``spotwave.zernike.MapPlan``'s (2 i + 1) / N - 1), with x along
  columns and y along rows in both. So coefficients convert by reordering alone:
  ``spotwave.zernike.to_noll`` / ``from_noll``.
- Signs: a Zernike map is a map; what it means is the user's. ``spotwave.sim.sh``'s ``screen`` is
  an optical path (a delay), while spotwave's coefficients follow the OSA sign (a positive
  wavefront leads), so an aotools map used as that optical path has spotwave coefficients of
  the opposite sign.
"""

import numpy as np
import pytest

import spotwave
from spotwave import zernike as zk

aotools = pytest.importorskip("aotools", reason="aotools is not importable (pip install aotools)")


def test_noll_indices_are_aotools():
    # Every Noll index of orders 0..10: the same (n, m), signs included.
    for j in range(1, zk.count(10) + 1):
        assert zk.noll_to_nm(j) == tuple(aotools.zernIndex(j)), j
        assert zk.osa_to_noll(zk.noll_to_osa(j)) == j


def test_zernike_values_are_aotools():
    n, terms = 64, zk.count(10)  # orders 0..10, 66 polynomials
    z_ao = aotools.zernikeArray(terms, n)  # Noll 1..66, norm="noll"
    g = (np.arange(n) - n / 2 + 0.5) / (n / 2)
    x, y = np.meshgrid(g, g)
    disc = aotools.circle(n / 2.0, n) != 0
    assert disc.sum() == (x**2 + y**2 <= 1).sum()  # the same pixels inside
    osa = np.array([zk.noll_to_osa(k + 1) for k in range(terms)])
    z_sw = zk.basis(osa, x, y)
    assert np.abs(z_sw[:, disc] - z_ao[:, disc]).max() < 1e-9
    assert np.all(z_ao[:, ~disc] == 0)  # aotools clips outside the disc; spotwave does not


def _fit(frame, ref, grid, pitch, pupil_mm, cpu, **more):
    t = spotwave.centroid(frame, pitch=pitch, grid=grid, reference=ref, ctx=cpu)
    nx, ny = grid
    return zk.fit(t["dx_px"].reshape(ny, nx), t["dy_px"].reshape(ny, nx), pitch=pitch,
                  pixel_um=5.5, focal_mm=3.5, pupil_mm=pupil_mm, order=4, ctx=cpu, **more)


def test_coefficients_to_aotools(cpu):
    # spotwave -> aotools: a frame of known OSA coefficients, centroided and fitted by spotwave;
    # the fit reordered to Noll gives aotools the same wavefront map as spotwave's, and the
    # simulated one within the fit's error.
    c = np.zeros(15)
    c[1], c[3], c[4], c[5], c[7], c[8], c[12] = 0.1, 0.05, 0.2, -0.07, 0.04, -0.03, 0.02
    img, _, ref = spotwave.sim.sh(grid=(16, 16), pitch=16, zernike=c, pupil_mm=1.2,
                                  noise="none", bits="32f", reference=True, ctx=cpu)
    fit = _fit(img, ref, (16, 16), 16, 1.2, cpu)
    assert np.abs(fit - c).max() < 0.015, fit - c
    n = 128
    disc = aotools.circle(n / 2.0, n) != 0
    ao = aotools.phaseFromZernikes(zk.to_noll(fit), n)
    sw = zk.wavefront_map(fit, n, ctx=cpu)  # float32, NaN outside the pupil
    assert np.isnan(sw[~disc]).all()
    assert np.abs(ao[disc] - sw[disc]).max() < 1e-5  # um
    truth = aotools.phaseFromZernikes(zk.to_noll(c), n)
    assert np.sqrt(np.mean((ao[disc] - truth[disc]) ** 2)) < 0.02  # um RMS (measured 0.013)


def test_coefficients_from_aotools(cpu):
    # aotools -> spotwave: aotools' map of Noll coefficients over a disc of diameter 1.5 mm,
    # given to the SH simulator as the optical path over a pupil of 1.2 mm; spotwave's fit is
    # the same wavefront: the coefficients reordered to OSA (from_noll), carried to the smaller
    # concentric pupil (rescale), with the sign of a delay (see the module's text).
    noll = np.zeros(15)
    noll[[1, 2, 3, 4, 5, 6, 7, 10]] = [0.08, -0.05, 0.15, -0.06, 0.04, 0.03, -0.02, 0.02]
    disc_mm, samples, pupil_mm = 1.5, 300, 1.2
    opd = aotools.phaseFromZernikes(noll, samples)  # um, zero outside the disc
    img, _, ref = spotwave.sim.sh(grid=(16, 16), pitch=16, screen=opd,
                                  screen_spacing_um=disc_mm * 1e3 / samples, pupil_mm=pupil_mm,
                                  noise="none", bits="32f", reference=True, ctx=cpu)
    fit = _fit(img, ref, (16, 16), 16, pupil_mm, cpu)
    want = -zk.rescale(zk.from_noll(noll), disc_mm, pupil_mm)
    # um, of coefficients up to 0.1 (measured 0.0018: the screen sampled every 5 um)
    assert np.abs(fit[1:] - want[1:]).max() < 0.005, fit - want


@pytest.fixture(scope="module")
def sh_frame():
    cpu = spotwave.Context("cpu")
    c = np.zeros(10)
    c[3], c[4], c[7] = -0.1, 0.3, 0.05
    img, _ = spotwave.sim.sh(grid=(12, 10), pitch=14, zernike=c, pupil_mm=0.9, sky_e=30,
                             read_noise_e=3, seed=4, ctx=cpu)
    return img


@pytest.mark.parametrize("mode", ["none", "zero", "subtract"])
def test_centroids_are_aotools_centre_of_gravity(cpu, sh_frame, mode):
    # The same frame, the same lenslet regions (14 x 14 px from pixel (0, 0)), the same
    # threshold: 20 % of each lenslet's maximum. aotools' centre_of_gravity zeroes the pixels
    # below it on a stack of sub-apertures (spotwave's threshold_mode="zero": v >= T kept) and
    # subtracts it on a single one (threshold_mode="subtract"); its origin is each region's
    # first pixel.
    p, nx, ny = 14, 12, 10
    sub = sh_frame.astype(np.float64).reshape(ny, p, nx, p).transpose(0, 2, 1, 3)
    sub = sub.reshape(nx * ny, p, p)
    if mode == "none":
        kw = {}
        ao = aotools.centre_of_gravity(sub.copy())
    elif mode == "zero":
        kw = dict(threshold_fraction=0.2, threshold_mode="zero")
        ao = aotools.centre_of_gravity(sub.copy(), threshold=0.2)  # writes into its input
    else:
        kw = dict(threshold_fraction=0.2, threshold_mode="subtract")
        ao = np.array([aotools.centre_of_gravity(s.copy(), threshold=0.2) for s in sub]).T
    t = spotwave.centroid(sh_frame, pitch=p, grid=(nx, ny), origin=(0, 0), ctx=cpu, **kw)
    assert t["valid"].all()
    # float32 centroids of ~14 x 14 u16 pixels against float64 (measured 7e-6 px)
    assert np.abs(t["x_px"] - (t["ix"] * p + ao[0])).max() < 1e-4
    assert np.abs(t["y_px"] - (t["iy"] * p + ao[1])).max() < 1e-4


def test_structure_functions_are_aotools():
    # spotwave's theory against aotools' formulas: von Karman (aotools' 0.17253 (L0/r0)^(5/3)
    # [...]) and Kolmogorov (aotools' 6.88 (r/r0)^(5/3)); spotwave uses the exact constant
    # 2 (24/5 Gamma(6/5))^(5/6) = 6.88388..., aotools the rounded 6.88: 5.6e-4 apart.
    from aotools.turbulence import slopecovariance as sc

    r = np.array([0.01, 0.05, 0.2, 1.0, 5.0])
    for L0 in (10.0, 25.0):
        sw = spotwave.sim.structure_function(r, r0=0.12, L0=L0)
        assert np.allclose(sw, sc.structure_function_vk(r, 0.12, L0), rtol=1e-3)
    sw = spotwave.sim.structure_function(r, r0=0.12, L0=0)
    assert np.allclose(sw, sc.structure_function_kolmogorov(r, 0.12), rtol=1e-3)
