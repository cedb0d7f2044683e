"""spotwave.sim against the `spotwave sim` command (the same image and truth for the same
parameters and seed) and against its own truth."""

import numpy as np
import pytest

import spotwave
from conftest import read_csv


def _truth_equal(table, path):
    header, rows = read_csv(path)
    assert len(table) == len(rows)
    for k, name in enumerate(header):
        want = np.array([float(r[k]) for r in rows])
        got = table[name].astype(np.float64)
        assert np.array_equal(got, want, equal_nan=True), name


def test_stars_random_is_the_commands(cli, cpu, tmp_path):
    img_path, truth_path = tmp_path / "a.fits", tmp_path / "t.csv"
    cli("sim", "stars", "--random", 40, "--size", "96x64", "--sigma", 1.3, "--seed", 7,
        "--read-noise-e", 3, "--sky-e", 20, "--out", img_path, "--truth", truth_path)
    img, truth = spotwave.sim.stars(random=40, size=(96, 64), sigma=1.3, seed=7,
                                    read_noise_e=3, sky_e=20, ctx=cpu)
    assert img.shape == (64, 96) and img.dtype == np.uint16
    assert np.array_equal(img, spotwave.read(img_path))
    _truth_equal(truth, truth_path)
    assert truth.dtype.names == ("x_px", "y_px", "flux_e", "mag")


def test_stars_catalog_and_noise_free_truth(cli, cpu, tmp_path):
    cat = np.array([(10.25, 20.5, 5000.0), (40.0, 12.75, 12000.0), (-30.0, 5.0, 100.0)],
                   dtype=[("x_px", "f8"), ("y_px", "f8"), ("flux_e", "f8")])
    (tmp_path / "c.csv").write_text("x_px,y_px,flux_e\n" + "".join(
        f"{float(x)!r},{float(y)!r},{float(f)!r}\n" for x, y, f in cat))
    cli("sim", "stars", "--catalog", tmp_path / "c.csv", "--size", "64x48", "--noise", "none",
        "--bits", "32f", "--out", tmp_path / "a.fits", "--truth", tmp_path / "t.csv")
    img, truth = spotwave.sim.stars(catalog=cat, size=(64, 48), noise="none", bits="32f",
                                    ctx=cpu)
    assert img.dtype == np.float32
    assert np.array_equal(img, spotwave.read(tmp_path / "a.fits"))
    _truth_equal(truth, tmp_path / "t.csv")
    # The star off the image is not in the truth; the integrated PSF conserves the flux.
    assert len(truth) == 2 and np.all(np.isnan(truth["mag"]))
    assert abs(img.sum() - 17000.0) < 17000.0 * 1e-3


def test_sh_is_the_commands(cli, cpu, tmp_path):
    (tmp_path / "z.csv").write_text("n,m,coef_um\n2,0,0.4\n2,-2,0.15\n3,1,-0.1\n")
    cli("sim", "sh", "--grid", "8x6", "--pitch", 20, "--zernike", tmp_path / "z.csv",
        "--pupil-mm", 0.8, "--read-noise-e", 2, "--seed", 5, "--out", tmp_path / "s.fits",
        "--truth", tmp_path / "t.csv", "--reference", tmp_path / "r.fits")
    z = np.array([(2, 0, 0.4), (2, -2, 0.15), (3, 1, -0.1)],
                 dtype=[("n", "i4"), ("m", "i4"), ("coef_um", "f8")])
    img, truth, ref = spotwave.sim.sh(grid=(8, 6), pitch=20, zernike=z, pupil_mm=0.8,
                                      read_noise_e=2, seed=5, reference=True, ctx=cpu)
    assert img.shape == (120, 160)
    assert np.array_equal(img, spotwave.read(tmp_path / "s.fits"))
    assert np.array_equal(ref, spotwave.read(tmp_path / "r.fits"))
    header, _ = read_csv(tmp_path / "t.csv")
    assert list(truth.dtype.names[:len(header)]) == header
    _truth_equal(truth[list(header)], tmp_path / "t.csv")


def test_sh_turbulence_is_the_commands(cli, cpu, tmp_path):
    # r0 and L0 on the sky of a telescope diameter_m across (the command's --diameter-m), the
    # pupil its image: the same screen and spots as the command, bit for bit.
    cli("sim", "sh", "--grid", "8x8", "--pitch", 16, "--turbulence", "r0=0.15,L0=25",
        "--diameter-m", 4, "--pupil-mm", 0.6, "--noise", "none", "--seed", 5,
        "--out", tmp_path / "s.fits", "--truth", tmp_path / "t.csv")
    img, truth = spotwave.sim.sh(grid=(8, 8), pitch=16, turbulence=dict(r0=0.15, L0=25),
                                 diameter_m=4, pupil_mm=0.6, noise="none", seed=5, ctx=cpu)
    assert np.array_equal(img, spotwave.read(tmp_path / "s.fits"))
    header, _ = read_csv(tmp_path / "t.csv")
    _truth_equal(truth[list(header)], tmp_path / "t.csv")
    with pytest.raises(TypeError, match="diameter_m"):
        spotwave.sim.sh(grid=(8, 8), turbulence=dict(r0=0.15), ctx=cpu)
    with pytest.raises(TypeError, match="goes with turbulence"):
        spotwave.sim.sh(grid=(8, 8), diameter_m=4, ctx=cpu)


def test_sh_truth_moves_with_the_wavefront(cpu):
    # A tilt Z(1, 1) = 2 x over radius R (OSA sign: a positive wavefront leads) moves every
    # spot by -F * dW/du = -F * 2 c / R pixels, F = focal / pixel.
    c, grid, pitch = 0.2, (6, 6), 16.0
    img, truth = spotwave.sim.sh(grid=grid, pitch=pitch, zernike=[0.0, 0.0, c], noise="none",
                                 ctx=cpu)
    radius_um = 0.5 * pitch * 5.5 * min(grid)
    shift = -(3.5e3 / 5.5) * 2.0 * c / radius_um
    assert np.allclose(truth["x_px"] - truth["ref_x_px"], shift, atol=1e-9)
    assert np.allclose(truth["y_px"], truth["ref_y_px"], atol=1e-9)
    assert np.all(truth["illum"] == 1.0)


def test_sim_bad_arguments(cpu):
    with pytest.raises(TypeError, match="exactly one of catalog and random"):
        spotwave.sim.stars(ctx=cpu)
    with pytest.raises(ValueError, match="bits"):
        spotwave.sim.stars(random=1, bits=12, ctx=cpu)
    with pytest.raises(ValueError, match="contradict"):
        spotwave.sim.stars(random=1, noise="none", read_noise_e=2, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        spotwave.sim.sh(grid=(8, 8), pitch=20, size=(100, 100), ctx=cpu)
    assert "lenslet" in str(e.value) or "grid" in str(e.value)
    with pytest.raises(ValueError, match="lights none"):
        spotwave.sim.sh(grid=(4, 4), pitch=16, pupil_mm=0.1, pupil_center_mm=(5.0, 5.0),
                        ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.sim.stars(catalog={"x_px": [1.0], "y_px": [np.nan], "flux_e": [10.0]},
                           size=(16, 16), ctx=cpu)


def test_phase_screen_statistics(cpu):
    # The mean structure function over screens against Kolmogorov's 6.88 (r / r0)^(5/3) (a
    # small-scale check: at a few samples the FFT screen's finite size does not matter).
    r0, spacing, n = 0.1, 0.01, 128
    d = []
    for k in range(6):
        s = spotwave.sim.phase_screen(n, spacing, r0=r0, L0=0, seed=3, index=k, ctx=cpu)
        phase = s * 2 * np.pi / 0.5  # um of OPD -> rad at the r0 wavelength (0.5 um)
        d.append([np.mean((phase[:, lag:] - phase[:, :-lag]) ** 2) for lag in (1, 2, 4)])
    d = np.mean(d, axis=0)
    want = spotwave.sim.structure_function(np.array([1, 2, 4]) * spacing, r0=r0, L0=0)
    assert np.allclose(want, 6.8839 * (np.array([1, 2, 4]) * spacing / r0) ** (5 / 3), rtol=1e-3)
    assert np.all(np.abs(d / want - 1) < 0.15), d / want
    again = spotwave.sim.phase_screen(n, spacing, r0=r0, L0=0, seed=3, index=5, ctx=cpu)
    assert np.array_equal(again, s)


def test_infinite_screen_moves_along_v(cpu):
    s = spotwave.sim.InfiniteScreen(16, 0.02, r0=0.1, L0=5.0, seed=2, ctx=cpu)
    a = s.window()
    s.advance(0.02)
    b = s.window()
    assert a.shape == (16, 16) and s.rows_added == 1
    assert np.allclose(b[1:], a[:-1])
    assert s.position_m == pytest.approx(0.02)
