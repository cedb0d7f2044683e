"""spotwave.zernike: the fit against `spotwave fit` and against the simulator's coefficients;
index conversion and refraction."""

import numpy as np
import pytest

import spotwave
from spotwave import zernike
from conftest import fmt, read_csv


def test_indices():
    assert zernike.osa_index(2, 0) == 4 and zernike.noll_index(2, 0) == 4
    assert zernike.osa_to_nm(1) == (1, -1) and zernike.noll_to_nm(3) == (1, -1)
    assert zernike.noll_to_nm(2) == (1, 1) and zernike.osa_to_noll(2) == 2
    assert zernike.noll_to_nm(11) == (4, 0) and zernike.osa_index(4, 0) == 12
    for j in range(66):
        assert zernike.noll_to_osa(zernike.osa_to_noll(j)) == j
        n, m = zernike.osa_to_nm(j)
        assert j == (n * (n + 2) + m) // 2
    c = np.arange(15.0)
    assert np.array_equal(zernike.from_noll(zernike.to_noll(c)), c)
    assert zernike.to_noll(c)[3] == c[4]  # Noll 4 is defocus, OSA 4
    assert zernike.count(4) == 15
    with pytest.raises(ValueError, match="not a Zernike polynomial"):
        zernike.osa_index(2, 1)
    with pytest.raises(ValueError, match="whole radial orders"):
        zernike.to_noll(np.zeros(5))


def test_refraction_sign_and_formula():
    c = np.zeros(6)
    c[4] = 0.5  # myopic: a leading wavefront
    rx = zernike.refraction(c, 5.0)
    assert rx["M"] == pytest.approx(-4 * np.sqrt(3) * 0.5 / 2.5**2)
    assert rx["M"] < 0 and rx["cyl_d"] == 0.0
    assert np.array_equal(zernike.mirror_x(zernike.mirror_x(c)), c)
    assert zernike.rescale(c, 5.0, 5.0)[4] == pytest.approx(0.5)


@pytest.fixture(scope="module")
def slopes(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("fit")
    (d / "z.csv").write_text("n,m,coef_um\n2,0,0.2\n2,-2,0.08\n3,1,0.04\n4,0,-0.03\n")
    cli("sim", "sh", "--grid", "12x12", "--pitch", 16, "--zernike", d / "z.csv",
        "--pupil-mm", 1.0, "--noise", "none", "--bits", "32f", "--out", d / "s.fits",
        "--reference", d / "r.fits")
    cli("centroid", d / "s.fits", "--pitch", 16, "--reference", d / "r.fits",
        "--slopes", d / "sl.csv", "--out", d / "c.csv")
    return d


def test_fit_is_the_commands(cli, cpu, slopes):
    cli("fit", slopes / "sl.csv", "--pitch", 16, "--grid", "12x12", "--pupil-mm", 1.0,
        "--order", 4, "--out", slopes / "z.out.csv")
    table = spotwave.centroid(spotwave.read(slopes / "s.fits"), pitch=16,
                              reference=spotwave.read(slopes / "r.fits"), ctx=cpu)
    dx, dy = table["dx_px"].reshape(12, 12), table["dy_px"].reshape(12, 12)
    coef = zernike.fit(dx, dy, pitch=16, pixel_um=5.5, focal_mm=3.5, pupil_mm=1.0, order=4,
                       ctx=cpu)
    header, rows = read_csv(slopes / "z.out.csv")
    assert header == ["j", "n", "m", "noll", "coef_um"] and len(rows) == len(coef) == 15
    assert [r[4] for r in rows] == [fmt(c, "%.10g") for c in coef]
    assert coef[0] == 0.0


def test_fit_recovers_the_simulated_wavefront(cpu, slopes):
    table = spotwave.centroid(spotwave.read(slopes / "s.fits"), pitch=16,
                              reference=spotwave.read(slopes / "r.fits"), ctx=cpu)
    dx, dy = table["dx_px"].reshape(12, 12), table["dy_px"].reshape(12, 12)
    coef, info = zernike.fit(dx, dy, pitch=16, pixel_um=5.5, focal_mm=3.5, pupil_mm=1.0,
                             order=4, return_info=True, ctx=cpu)
    want = np.zeros(15)
    want[4], want[3], want[8], want[12] = 0.2, 0.08, 0.04, -0.03
    assert np.abs(coef - want).max() < 0.01, coef - want
    assert info["residual_px"] < 0.05 and info["used"] > 50
    # Stacks give one row per frame; left eyes are mirrored.
    two = zernike.fit(np.stack([dx, dx]), np.stack([dy, dy]), pitch=16, pixel_um=5.5,
                      focal_mm=3.5, pupil_mm=1.0, order=4, eye="left", ctx=cpu)
    assert two.shape == (2, 15) and np.allclose(two[1], zernike.mirror_x(coef))


def test_fit_bad_input(cpu):
    dx = np.zeros((6, 6))
    with pytest.raises(ValueError, match="two arrays of one shape"):
        zernike.fit(dx, np.zeros((6, 5)), pitch=16, pixel_um=5.5, focal_mm=3.5, pupil_mm=0.5)
    with pytest.raises(ValueError, match="no valid slope"):
        zernike.fit(dx * np.nan, dx, pitch=16, pixel_um=5.5, focal_mm=3.5, pupil_mm=0.5,
                    ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        zernike.fit(dx[:2, :2], dx[:2, :2], pitch=16, pixel_um=5.5, focal_mm=3.5,
                    pupil_mm=0.15, order=6, ctx=cpu)
    assert "slopes" in str(e.value) or "unknowns" in str(e.value)
    with pytest.raises(TypeError, match="fit: unexpected keyword argument"):
        zernike.fit(dx, dx, pitch=16, pixel_um=5.5, focal_mm=3.5, pupil_mm=0.5, ordre=4)


def test_basis_values_and_orthonormality():
    assert zernike.basis(4, 0.5, 0.0) == pytest.approx(np.sqrt(3) * (2 * 0.25 - 1))
    assert zernike.basis(2, 0.3, 0.7) == pytest.approx(2 * 0.3)  # Z(1, 1) = 2 x
    n = 400
    g = (np.arange(n) + 0.5) / n * 2 - 1
    x, y = np.meshgrid(g, g)
    inside = x**2 + y**2 <= 1
    z = zernike.basis(np.arange(10), x[inside], y[inside])
    gram = z @ z.T / inside.sum()
    assert np.abs(gram - np.eye(10)).max() < 0.02
    v, dx, dy = zernike.basis([4], np.array([0.5]), np.array([0.0]), grad=True)
    assert dx[0, 0] == pytest.approx(np.sqrt(3) * 4 * 0.5) and dy[0, 0] == pytest.approx(0.0)


def test_wavefront_map(cpu):
    c = np.zeros(15)
    c[4], c[12] = 0.3, -0.1
    size = 64
    m = zernike.wavefront_map(c, size, ctx=cpu)
    assert m.shape == (size, size) and m.dtype == np.float32
    i = (np.arange(size) * 2 + 1) / size - 1
    X, Y = np.meshgrid(i, i)
    inside = X**2 + Y**2 <= 1
    want = 0.3 * zernike.basis(4, X, Y) - 0.1 * zernike.basis(12, X, Y)
    assert np.isnan(m[~inside]).all()
    assert np.allclose(m[inside], want[inside], atol=1e-5)
    plan = zernike.MapPlan(size, 4, method="basis", ctx=cpu)
    assert np.allclose(plan(c), m, atol=1e-5, equal_nan=True)


def test_refraction_chromatic_flip_transpose():
    # The Chromatic Eye (Thibos et al. 1992): 0.78 -> 0.555 um is -0.739 D, added to M only.
    d = zernike.eye_lca(0.78, 0.555)
    assert d == pytest.approx(0.63346 / (0.78 - 0.2141) - 0.63346 / (0.555 - 0.2141), abs=1e-12)
    assert d == pytest.approx(-0.739, abs=1e-3)
    c = np.zeros(6)
    c[3], c[4], c[5] = 0.2, 0.6, -0.3
    a = zernike.refraction(c, 5.0)
    b = zernike.refraction(c, 5.0, shift_d=d)
    assert b["M"] == pytest.approx(a["M"] + d) and b["J0"] == a["J0"] and b["J45"] == a["J45"]
    # a flipped camera: the terms odd in y (m < 0) change sign, the axis a -> 180 - a
    f = zernike.flip(c, y=True)
    assert list(f) == [0, 0, 0, -0.2, 0.6, -0.3]
    assert (zernike.refraction(f, 5.0)["axis_deg"] + a["axis_deg"]) % 180 == pytest.approx(0)
    assert np.array_equal(zernike.flip(c, x=True), zernike.mirror_x(c))
    s, cy, ax = zernike.transpose(-2.0, -1.0, 30.0)
    assert (s, cy, ax) == (pytest.approx(-3.0), 1.0, pytest.approx(120.0))
    assert zernike.transpose(s, cy, ax) == (pytest.approx(-2.0), -1.0, pytest.approx(30.0))


def test_image_quality_airy_and_marechal():
    psf, mtf, q = zernike.image_quality(np.zeros(6), 4.0, wavelength_um=0.6, size=128,
                                        pupil_samples=32)
    assert psf.shape == (128, 128) and q["strehl"] == pytest.approx(1.0, abs=1e-12)
    assert psf[64, 64] == pytest.approx(1.0, abs=1e-6) and mtf[64, 64] == pytest.approx(1.0)
    assert q["vsotf"] == pytest.approx(1.0) and q["cutoff_cpd"] == pytest.approx(
        4e-3 / 0.6e-6 * np.pi / 180)
    c = np.zeros(15)
    c[12] = 0.02  # spherical aberration, 0.02 um RMS at 0.555 um
    _, _, q = zernike.image_quality(c, 5.0, size=128)
    assert q["strehl"] == pytest.approx(np.exp(-(2 * np.pi * 0.02 / 0.555) ** 2), abs=5e-3)
