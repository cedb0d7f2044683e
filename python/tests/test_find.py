"""spotwave.find against `spotwave find` on the same files (the same spots, to the digits the
command prints) and against the star simulator's truth; bad input."""

import numpy as np
import pytest

import spotwave
from conftest import fmt, read_csv

_FORMATS = {"frame": "%d", "x_px": "%.4f", "y_px": "%.4f", "x_var": "%.6g", "y_var": "%.6g",
            "intensity": "%.17g", "npix": "%d", "bbox_x0": "%d", "bbox_x1": "%d",
            "bbox_y0": "%d", "bbox_y1": "%d", "z_var": "%.6g", "bbox_z0": "%d",
            "bbox_z1": "%d", "refine_flags": "%d", "flux_adu": "%.6g", "sigma_px": "%.5g",
            "background_adu": "%.6g"}


def _same_as_csv(spots, path, frame_format="%d"):
    header, rows = read_csv(path)
    assert list(spots.dtype.names) == header
    assert len(spots) == len(rows)
    for s, row in zip(spots, rows):
        got = [fmt(s[name], frame_format if name == "frame" else _FORMATS[name])
               for name in header]
        assert got == row


@pytest.fixture(scope="module")
def field(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("find")
    cli("sim", "stars", "--random", 60, "--size", "160x120", "--seed", 11, "--sky-e", 30,
        "--read-noise-e", 2, "--mag-range", "6,12", "--out", d / "a.fits", "--truth",
        d / "t.csv")
    return d


def test_find_is_the_commands(cli, cpu, field):
    cli("find", field / "a.fits", "--out", field / "f.csv")
    img = spotwave.read(field / "a.fits")
    spots = spotwave.find(img, ctx=cpu)
    assert len(spots) > 10
    _same_as_csv(spots, field / "f.csv")


def test_find_options_are_the_commands(cli, cpu, field):
    cli("find", field / "a.fits", "--algorithm", "dispersion", "--kernel-size", "2,4",
        "--sigma-b", 5, "--sigma-s", 2.5, "--min-local", 0, "--gain", 1.5,
        "--global-threshold", 40, "--connectivity", 8, "--min-spot-size", 2,
        "--out", field / "g.csv")
    img = spotwave.read(field / "a.fits")
    spots = spotwave.find(img, algorithm="dispersion", kernel_size=(2, 4), sigma_b=5,
                          sigma_s=2.5, min_local=0, gain=1.5, global_threshold=40,
                          connectivity=8, min_spot_size=2, ctx=cpu)
    _same_as_csv(spots, field / "g.csv")


def test_find_stack_and_3d_are_the_commands(cli, cpu, field):
    img = spotwave.read(field / "a.fits")
    cube = np.stack([img, np.roll(img, 3, axis=1), img])
    spotwave.write_fits(field / "cube.fits", cube)
    cli("find", field / "cube.fits", "--out", field / "c.csv")
    spots = spotwave.find(cube, ctx=cpu)
    _same_as_csv(spots, field / "c.csv")
    assert set(spots["frame"]) == {0, 1, 2}
    cli("find", field / "cube.fits", "--3d", "--out", field / "c3.csv")
    seen = []
    spots3 = spotwave.find(cube, three_d=True, progress=lambda d, t: seen.append((d, t)),
                           ctx=cpu)
    _same_as_csv(spots3, field / "c3.csv", frame_format="%.6f")
    assert seen[-1] == (3, 3)


def test_find_against_truth(cpu, field):
    from conftest import read_csv as rc
    header, rows = rc(field / "t.csv")
    truth = np.array([[float(v) for v in r] for r in rows])
    xy = truth[:, :2]
    spots = spotwave.find(spotwave.read(field / "a.fits"), ctx=cpu)
    errors = []
    for i, (x, y) in enumerate(xy):
        others = np.delete(xy, i, axis=0)
        isolated = np.hypot(*(others - (x, y)).T).min() > 10
        if truth[i, header.index("mag")] > 8 or not isolated or not (4 < x < 155 and 4 < y < 115):
            continue
        d = np.hypot(spots["x_px"] - x, spots["y_px"] - y)
        errors.append(d.min())
    # The centroid of the strong pixels only: a small bias towards the peak, well under a pixel.
    assert len(errors) >= 4 and max(errors) < 0.25 and np.median(errors) < 0.1, errors


def test_plan_reuse_mask_and_strong(cpu, field):
    img = spotwave.read(field / "a.fits")
    plan = spotwave.FindPlan(img.shape, img.dtype, ctx=cpu)
    a = plan(img)
    b = plan(img)
    assert np.array_equal(a, b)
    assert plan.stats["spots"] == len(a) and plan.stats["frames"] == 1
    strong = np.zeros(img.shape, np.uint8)
    plan(img, strong=strong)
    assert strong.sum() == plan.stats["strong_pixels"] > 0
    mask = np.ones(img.shape, bool)
    s0 = a[0]
    mask[s0["bbox_y0"]:s0["bbox_y1"], s0["bbox_x0"]:s0["bbox_x1"]] = False
    masked = spotwave.find(img, mask=mask, ctx=cpu)
    assert len(masked) == len(a) - 1
    assert not np.any((masked["x_px"] == s0["x_px"]) & (masked["y_px"] == s0["y_px"]))


def test_find_bad_input(cpu):
    img = np.zeros((32, 32), np.uint16)
    keep = img.copy()
    with pytest.raises(ValueError, match="image: expected a 2-D image"):
        spotwave.find(np.zeros(32, np.uint16), ctx=cpu)
    with pytest.raises(TypeError, match="image: int32 pixels"):
        spotwave.find(np.zeros((32, 32), np.int32), ctx=cpu)
    with pytest.raises(ValueError, match="image: the pixels of a row must be contiguous"):
        spotwave.find(np.zeros((32, 64), np.uint16)[:, ::2], ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError, match="frame size 32 x 0 is not valid"):
        spotwave.find(np.zeros((0, 32), np.uint16), ctx=cpu)
    with pytest.raises(ValueError, match="image: the image is empty"):
        spotwave.FindPlan((32, 32), np.uint16, ctx=cpu)(np.zeros((0, 32, 32), np.uint16))
    # The library's own checks, with its message.
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        spotwave.find(img, kernel_size=40, ctx=cpu)
    assert "kernel" in str(e.value)
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        spotwave.find(img, min_local=1, ctx=cpu)
    assert "min_local" in str(e.value)
    with pytest.raises(TypeError, match="find: unexpected keyword argument 'sigma'"):
        spotwave.find(img, sigma=3, ctx=cpu)
    with pytest.raises(ValueError, match="mask: expected 1024 elements"):
        spotwave.find(img, mask=np.ones((16, 16), bool), ctx=cpu)
    with pytest.raises(TypeError, match="mask: expected a bool or uint8"):
        spotwave.find(img, mask=np.ones((32, 32), np.int64), ctx=cpu)
    plan = spotwave.FindPlan((32, 32), np.uint16, ctx=cpu)
    with pytest.raises(ValueError, match="the plan was made for u16 frames of 32 x 32"):
        plan(np.zeros((32, 31), np.uint16))
    with pytest.raises(ValueError, match="the plan was made for u16"):
        plan(np.zeros((32, 32), np.uint8))
    assert np.array_equal(img, keep)


def test_find_nan_pixels_are_masked_and_a_flooded_frame_is_an_error(cpu):
    rng = np.random.default_rng(2)
    img = rng.poisson(10, (48, 48)).astype(np.float32)
    img[20:23, 20:23] += 400
    img[5, 5] = np.nan
    keep = img.copy()
    spots = spotwave.find(img, ctx=cpu)
    assert np.array_equal(img, keep, equal_nan=True)
    assert len(spots) == 1 and abs(spots["x_px"][0] - 21) < 0.05
    flood = np.zeros((48, 48), np.uint16)
    flood[::2, :] = 1000
    with pytest.raises(spotwave.RangeError) as e:
        spotwave.find(flood, algorithm="dispersion", min_spot_size=1, ctx=cpu)
    assert "strong" in str(e.value)


# ------------------------------------------------------------------ refined positions

@pytest.mark.parametrize("args, kw", [
    (["--refine", "gauss", "--background", "annulus", "--detector-gain", 1, "--read-noise", 2],
     dict(refine="gauss", background="annulus", detector_gain=1, read_noise=2)),
    (["--refine", "xwin", "--background", "mesh", "--mesh-size", 32, "--bias", 1.5,
      "--stamp-radius", 6],
     dict(refine="xwin", background="mesh", mesh_size=32, bias=1.5, stamp_radius=6)),
    (["--refine", "gauss", "--ccd", "--read-noise", 2], dict(refine="gauss", ccd=True,
                                                             read_noise=2)),
    (["--refine", "moffat", "--moffat-beta", 3, "--background", "annulus"],
     dict(refine="moffat", moffat_beta=3, background="annulus")),
])
def test_find_refine_is_the_commands(cli, cpu, field, args, kw):
    cli("find", field / "a.fits", *args, "--out", field / "r.csv")
    img = spotwave.read(field / "a.fits")
    spots = spotwave.find(img, ctx=cpu, **kw)
    assert spots.dtype.names[-4:] == ("refine_flags", "flux_adu", "sigma_px", "background_adu")
    assert len(spots) > 10 and (spots["refine_flags"] & 4 == 0).sum() > 10
    _same_as_csv(spots, field / "r.csv")


def test_ccd_estimate_finds_the_simulated_gain(cpu):
    # sky 400 e-, read noise 5 e-, gain 2 e-/ADU, bias 100 ADU: the background's mean is
    # 100 + 200 ADU, its variance (400 + 25) / 4 ADU^2.
    img, _ = spotwave.sim.stars(random=40, size=(200, 160), sigma=1.5, sky_e=400,
                                read_noise_e=5, gain=2, bias=100, mag_range=(6, 10), seed=3,
                                ctx=cpu)
    est = spotwave.ccd_estimate(img, bias=100, read_noise=5, ctx=cpu)
    assert est["mean"] == pytest.approx(300, rel=0.01)
    assert est["variance"] == pytest.approx(106.25, rel=0.05)
    assert est["gain"] == pytest.approx(2.0, rel=0.05)
    assert est["dispersion_gain"] == pytest.approx(est["variance"] / est["mean"])


def _truth_errors(spots, truth):
    """Distance from each true star (bright, isolated, inside) to the nearest spot, and the
    spot's index."""
    xy = np.column_stack([truth["x_px"], truth["y_px"]])
    out = []
    for i, (x, y) in enumerate(xy):
        others = np.delete(xy, i, axis=0)
        if np.hypot(*(others - (x, y)).T).min() < 12 or not (8 < x < 248 and 8 < y < 248):
            continue
        d = np.hypot(spots["x_px"] - x, spots["y_px"] - y)
        if d.min() < 1.5:
            out.append((i, d.argmin(), spots["x_px"][d.argmin()] - x,
                        spots["y_px"][d.argmin()] - y))
    return np.array(out)


def test_refined_positions_are_closer_to_the_truth(cpu):
    # Stars of sigma 1.5 px on a sky of 100 e- with 5 e- of read noise (gain 1): the
    # strong-pixel centroid is pulled towards the peak; the fit uses the whole spot.
    img, truth = spotwave.sim.stars(random=120, size=(256, 256), sigma=1.5, sky_e=100,
                                    read_noise_e=5, zero_point=1e6, mag_range=(4, 7), seed=8,
                                    ctx=cpu)
    plain = spotwave.find(img, ctx=cpu)
    fit = spotwave.find(img, refine="gauss", background="annulus", read_noise=5, ctx=cpu)
    win = spotwave.find(img, refine="xwin", background="annulus", read_noise=5, ctx=cpu)
    mof = spotwave.find(img, refine="moffat", background="annulus", read_noise=5, ctx=cpu)
    assert len(plain) == len(fit) == len(win) == len(mof)
    e0, e1, e2, e3 = (_truth_errors(s, truth) for s in (plain, fit, win, mof))
    assert len(e0) > 30 and len(e1) == len(e0) and len(e2) == len(e0) and len(e3) == len(e0)
    rms = [np.sqrt(np.mean(e[:, 2]**2 + e[:, 3]**2)) for e in (e0, e1, e2, e3)]
    # a Moffat fit of Gaussian stars centres them as well as the Gaussian fit (symmetric spots)
    assert rms[1] < 0.6 * rms[0] and rms[2] < 0.8 * rms[0] and rms[3] < 0.6 * rms[0], rms
    # The fit's reported variance against its errors: chi^2 per degree of freedom near 1.
    k = e1[:, 1].astype(int)
    chi2 = np.mean(e1[:, 2]**2 / fit["x_var"][k] + e1[:, 3]**2 / fit["y_var"][k]) / 2
    assert 0.5 < chi2 < 2.0, chi2
    # The fitted width is the simulator's.
    ok = fit["refine_flags"] & 4 == 0
    assert np.median(fit["sigma_px"][ok]) == pytest.approx(1.5, abs=0.1)


def test_find_refine_bad_input(cpu, field):
    img = spotwave.read(field / "a.fits")
    with pytest.raises(ValueError, match="refine: 'psf' is not"):
        spotwave.find(img, refine="psf", ctx=cpu)
    with pytest.raises(ValueError, match="background: needs refine"):
        spotwave.find(img, background="mesh", ctx=cpu)
    with pytest.raises(TypeError, match="three_d: refined positions are for 2-D spots"):
        spotwave.find(np.stack([img, img]), refine="gauss", three_d=True, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.find(img, refine="gauss", stamp_radius=40, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.find(img, refine="gauss", detector_gain=0, ctx=cpu)
    with pytest.raises(ValueError, match="moffat_beta: needs refine='moffat'"):
        spotwave.find(img, refine="gauss", moffat_beta=3, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.find(img, refine="moffat", moffat_beta=1.0, ctx=cpu)
