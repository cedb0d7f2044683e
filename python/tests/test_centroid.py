"""spotwave.centroid against `spotwave centroid` on the same files (the same numbers as the
command prints them) and against the SH simulator's truth; plans; bad input."""

import numpy as np
import pytest

import spotwave
from conftest import fmt, read_csv

GRID, PITCH = (10, 8), 16


def _same_as_csv(table, path):
    header, rows = read_csv(path)
    assert list(table.dtype.names) == header
    assert len(table) == len(rows)
    ints = {"frame", "ix", "iy", "valid", "saturated", "status"}
    for t, row in zip(table, rows):
        got = [fmt(t[n], "%d") if n in ints else fmt(float(t[n]), "%.9g") for n in header]
        assert got == row


@pytest.fixture(scope="module")
def sh(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("centroid")
    (d / "z.csv").write_text("n,m,coef_um\n2,0,0.3\n2,2,-0.1\n3,-1,0.05\n")
    cli("sim", "sh", "--grid", "10x8", "--pitch", PITCH, "--zernike", d / "z.csv",
        "--pupil-mm", 0.75, "--read-noise-e", 3, "--seed", 9, "--out", d / "s.fits",
        "--reference", d / "r.fits", "--truth", d / "t.csv")
    return d


def test_centroid_is_the_commands(cli, cpu, sh):
    cli("centroid", sh / "s.fits", "--pitch", PITCH, "--grid", "10x8", "--out", sh / "c.csv")
    img = spotwave.read(sh / "s.fits")
    table = spotwave.centroid(img, grid=GRID, pitch=PITCH, ctx=cpu)
    _same_as_csv(table, sh / "c.csv")
    assert table["valid"].sum() > 20 and np.isnan(table["x_px"][table["valid"] == 0]).all()


def test_centroid_conditioning_and_reference_image_are_the_commands(cli, cpu, sh):
    cli("centroid", sh / "s.fits", "--pitch", PITCH, "--grid", "10x8", "--reference",
        sh / "r.fits", "--threshold", 25, "--threshold-mode", "zero", "--window", 1,
        "--gamma", 1.5, "--out", sh / "cr.csv")
    img, ref = spotwave.read(sh / "s.fits"), spotwave.read(sh / "r.fits")
    table = spotwave.centroid(img, grid=GRID, pitch=PITCH, reference=ref, threshold=25,
                              threshold_mode="zero", window=1, gamma=1.5, ctx=cpu)
    _same_as_csv(table, sh / "cr.csv")
    assert np.isfinite(table["dx_px"]).sum() > 20


def test_centroid_reference_table_and_stack_are_the_commands(cli, cpu, sh):
    img = spotwave.read(sh / "s.fits")
    cube = np.stack([img, img[::-1].copy()])
    spotwave.write_fits(sh / "cube.fits", cube)
    cli("centroid", sh / "cube.fits", "--pitch", PITCH, "--grid", "10x8", "--reference",
        sh / "t.csv", "--threshold-fraction", 0.2, "--out", sh / "cc.csv")
    header, rows = read_csv(sh / "t.csv")
    tx = np.array([float(r[header.index("x_px")]) for r in rows]).reshape(8, 10)
    ty = np.array([float(r[header.index("y_px")]) for r in rows]).reshape(8, 10)
    table = spotwave.centroid(cube, grid=GRID, pitch=PITCH, reference=(tx, ty),
                              threshold_fraction=0.2, ctx=cpu)
    _same_as_csv(table, sh / "cc.csv")
    assert table.dtype.names[0] == "frame" and set(table["frame"]) == {0, 1}


def test_centroid_geometry_auto_is_the_commands(cli, cpu, sh):
    cli("centroid", sh / "s.fits", "--geometry", "auto", "--reference", sh / "r.fits",
        "--out", sh / "ca.csv")
    table = spotwave.centroid(spotwave.read(sh / "s.fits"), geometry="auto",
                              reference=spotwave.read(sh / "r.fits"), ctx=cpu)
    _same_as_csv(table, sh / "ca.csv")


def test_centroid_against_truth(cpu):
    z = np.zeros(10)
    z[4], z[5], z[7] = 0.25, 0.1, -0.05
    img, truth = spotwave.sim.sh(grid=(12, 12), pitch=20, zernike=z, noise="none",
                                 bits="32f", ctx=cpu)
    table = spotwave.centroid(img, grid=(12, 12), pitch=20, ctx=cpu)
    assert table["valid"].all()
    err = np.hypot(table["x_px"] - truth["x_px"], table["y_px"] - truth["y_px"])
    # The CoG of a Gaussian spot well inside its lenslet is its centre (to the tails cut off).
    assert err.max() < 0.01, err.max()


def test_plan_runs_into_given_outputs(cpu, sh):
    img = spotwave.read(sh / "s.fits")
    plan = spotwave.CentroidPlan(img.shape, img.dtype, grid=GRID, pitch=PITCH, max_frames=2,
                                 ctx=cpu)
    assert (plan.nx, plan.ny, plan.lenslets, plan.nslopes) == (10, 8, 80, 80)
    assert plan.path == "host"
    out = plan.result()
    ptrs = [a.__array_interface__["data"][0] for a in (out.x, out.y, out.valid, out.slopes)]
    r = plan(img, out=out)
    assert r is out and r.frames == 1
    assert ptrs == [a.__array_interface__["data"][0] for a in (out.x, out.y, out.valid,
                                                               out.slopes)]
    table = spotwave.centroid(img, grid=GRID, pitch=PITCH, ctx=cpu)
    assert np.array_equal(out.x[0].ravel(), table["x_px"], equal_nan=True)
    rx, ry = plan.reference_positions()
    ok = out.valid[0].ravel() != 0
    assert np.allclose(out.slopes[0, 0][ok], (out.x[0].ravel() - rx.ravel())[ok], atol=1e-4)
    # A new reference: the slopes move by the difference.
    plan.set_reference(rx + 1.0, ry)
    plan(img, out=out)
    assert np.allclose(out.slopes[0, 0][ok], (out.x[0].ravel() - rx.ravel() - 1.0)[ok],
                       atol=1e-4)


def test_centroid_bad_input(cpu):
    img = np.zeros((64, 64), np.uint8)
    img[::8, ::8] = 200
    keep = img.copy()
    with pytest.raises(TypeError, match="image: uint32 pixels are not taken here"):
        spotwave.centroid(img.astype(np.uint32), pitch=8, ctx=cpu)
    with pytest.raises(ValueError, match="does not fit"):
        spotwave.centroid(img, pitch=8, grid=(9, 8), ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        spotwave.centroid(img, pitch=8, grid=(9, 8), origin=(0, 0), ctx=cpu)
    assert "lenslet" in str(e.value)
    with pytest.raises(TypeError, match="give the lenslet grid"):
        spotwave.centroid(img, ctx=cpu)
    with pytest.raises(TypeError, match="centroid: unexpected keyword argument 'pitch_px'"):
        spotwave.centroid(img, pitch=8, pitch_px=8, ctx=cpu)
    with pytest.raises(ValueError, match="reference: 64x32 uint8, the image 64x64 uint8"):
        spotwave.centroid(img, pitch=8, reference=img[:32], ctx=cpu)
    with pytest.raises(ValueError, match="reference: give"):
        spotwave.centroid(img, pitch=8, reference=(np.zeros((8, 8)), np.zeros((4, 4))), ctx=cpu)
    with pytest.raises(ValueError, match="dark: expected 4096 elements"):
        spotwave.centroid(img, pitch=8, dark=np.zeros((8, 8), np.float32), ctx=cpu)
    with pytest.raises(TypeError, match="dark: expected a float32 array"):
        spotwave.centroid(img, pitch=8, dark=np.zeros((64, 64)), ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        spotwave.centroid(img, pitch=8, gamma=-1, ctx=cpu)
    assert "gamma" in str(e.value)
    plan = spotwave.CentroidPlan((64, 64), np.uint8, pitch=8, ctx=cpu)
    with pytest.raises(ValueError, match="the plan was made for u8 frames of 64 x 64"):
        plan(np.zeros((64, 48), np.uint8))
    with pytest.raises(ValueError, match="at most 1"):
        plan(np.zeros((2, 64, 64), np.uint8))
    out = plan.result()
    with pytest.raises(TypeError, match="out.x: expected float32 elements"):
        plan(img, out=spotwave.CentroidResult(out.x.astype(np.float64), out.y, out.intensity,
                                              out.valid, out.slopes))
    ro = out.x.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out.x: the array is read-only"):
        plan(img, out=spotwave.CentroidResult(ro, out.y, out.intensity, out.valid, out.slopes))
    assert np.array_equal(img, keep)


def test_nan_pixels_and_empty_lenslets_are_invalid_not_errors(cpu):
    img = np.zeros((32, 32), np.float32)
    img[4, 4] = img[4, 20] = img[20, 4] = 10.0
    img[20, 20] = np.nan
    keep = img.copy()
    table = spotwave.centroid(img, pitch=16, grid=(2, 2), ctx=cpu)
    assert list(table["valid"]) == [1, 1, 1, 0]
    assert table["x_px"][0] == 4.0 and table["y_px"][2] == 20.0
    zero = spotwave.centroid(np.zeros((32, 32), np.uint8), pitch=16, ctx=cpu)
    assert not zero["valid"].any() and np.isnan(zero["x_px"]).all()
    assert np.array_equal(img, keep, equal_nan=True)


def _clipped_frame(dtype=np.uint8, top=255, hot=9):
    """A 64 x 64 frame of 4 x 4 lenslets of 16 px: lenslet l has a symmetric 5 x 5 spot of peak
    100 + 10 l at its centre pixel (16 ix + 8, 16 iy + 8); lenslet `hot` a peak of 400 clipped
    at `top` (its centre of gravity stays at the spot's centre)."""
    k = np.array([0.25, 0.5, 1.0, 0.5, 0.25])
    img = np.zeros((64, 64), np.float64)
    for l in range(16):
        cx, cy = 16 * (l % 4) + 8, 16 * (l // 4) + 8
        peak = 400.0 if l == hot else 100.0 + 10 * l
        img[cy - 2:cy + 3, cx - 2:cx + 3] = np.minimum(np.floor(peak * np.outer(k, k)), top)
    return img.astype(dtype)


def test_saturation_flags_the_clipped_lenslet(cpu):
    img = _clipped_frame()
    keep = img.copy()
    centre = (np.arange(16) % 4) * 16 + 8.0
    # the default level of uint8 frames (255): lenslet 9 only, kept valid, at its spot's centre
    t = spotwave.centroid(img, pitch=16, ctx=cpu)
    assert t.dtype.names[-5:] == ("saturated", "status", "x_var", "y_var", "snr")
    assert list(np.flatnonzero(t["saturated"])) == [9]
    assert t["valid"].all() and np.array_equal(t["x_px"], centre)
    # dropped: invalid, NaN
    t = spotwave.centroid(img, pitch=16, drop_saturated=True, ctx=cpu)
    assert list(np.flatnonzero(t["valid"] == 0)) == [9] and np.isnan(t["x_px"][9])
    assert list(np.flatnonzero(t["saturated"])) == [9]
    # an explicit level: peaks >= 150.5 (lenslets 6..15); "none": no flag
    t = spotwave.centroid(img, pitch=16, saturation=150.5, ctx=cpu)
    assert list(np.flatnonzero(t["saturated"])) == list(range(6, 16))
    t = spotwave.centroid(img, pitch=16, saturation="none", drop_saturated=True, ctx=cpu)
    assert not t["saturated"].any() and t["valid"].all()
    # the plan's outputs and the level in force
    plan = spotwave.CentroidPlan(img.shape, img.dtype, pitch=16, max_frames=2, ctx=cpu)
    assert plan.saturation == 255.0 and plan.drop_saturated is False
    out = plan.result()
    assert out.saturated.shape == (2, 4, 4) and out.saturated.dtype == np.uint8
    plan(np.stack([img, _clipped_frame(hot=-1)]), out=out)
    assert out.frames == 2
    assert list(np.flatnonzero(out.saturated[0])) == [9] and not out.saturated[1].any()
    # a result without the array: not written, the rest as before
    bare = spotwave.CentroidResult(out.x, out.y, out.intensity, out.valid, out.slopes)
    assert plan(img, out=bare).saturated is None and out.valid[0].all()
    assert spotwave.CentroidPlan(img.shape, np.uint16, pitch=16, ctx=cpu).saturation == 65535.0
    # float frames: no level unless one is given
    f = img.astype(np.float32) * 1000.0
    assert spotwave.CentroidPlan(f.shape, f.dtype, pitch=16, ctx=cpu).saturation is None
    assert not spotwave.centroid(f, pitch=16, ctx=cpu)["saturated"].any()
    t = spotwave.centroid(f, pitch=16, saturation=255000.0, ctx=cpu)
    assert list(np.flatnonzero(t["saturated"])) == [9]
    for bad in (0, -3, float("nan"), float("inf"), "lots"):
        with pytest.raises(ValueError, match="saturation"):
            spotwave.centroid(img, pitch=16, saturation=bad, ctx=cpu)
    assert np.array_equal(img, keep)


def test_saturation_is_the_commands(cli, cpu, tmp_path):
    img = _clipped_frame()
    img[0, 48] = 255  # lenslet 3's corner: outside the region of a window of 1
    spotwave.write_fits(tmp_path / "a.fits", img)
    for extra, kw in (([], {}),
                      (["--saturation", 150.5, "--drop-saturated"],
                       dict(saturation=150.5, drop_saturated=True)),
                      (["--window", 1], dict(window=1))):
        cli("centroid", tmp_path / "a.fits", "--pitch", 16, *extra, "--out", tmp_path / "c.csv")
        table = spotwave.centroid(img, pitch=16, ctx=cpu, **kw)
        _same_as_csv(table, tmp_path / "c.csv")
        want = [3, 9] if not extra else [9] if kw.get("window") else [3] + list(range(6, 16))
        assert list(np.flatnonzero(table["saturated"])) == want, extra


# ------------------------------------------------------------------ methods, status, error bars

@pytest.mark.parametrize("method, args, kw", [
    ("wcog", ["--fwhm", 4, "--iterations", 3, "--gain", 2, "--read-noise", 3],
     dict(fwhm_px=4, iterations=3, gain=2, read_noise=3)),
    ("local", ["--local-k", 2.5, "--min-snr", 5], dict(local_k=2.5, min_snr=5)),
    ("brightest", ["--brightest", 12, "--max-shift", 3, "--edge-px", 1],
     dict(brightest_n=12, max_shift_px=3, edge_px=1)),
    ("quadcell", ["--fwhm", 3, "--peak-border", "--edge-fraction", 0.3],
     dict(fwhm_px=3, peak_border=True, edge_fraction=0.3)),
])
def test_centroid_methods_are_the_commands(cli, cpu, sh, method, args, kw):
    cli("centroid", sh / "s.fits", "--pitch", PITCH, "--grid", "10x8", "--method", method, *args,
        "--out", sh / f"m_{method}.csv")
    table = spotwave.centroid(spotwave.read(sh / "s.fits"), grid=GRID, pitch=PITCH,
                              method=method, ctx=cpu, **kw)
    _same_as_csv(table, sh / f"m_{method}.csv")
    ok = table["valid"] != 0
    assert ok.sum() > 20
    # The generic path measures error bars for every valid lenslet, none for the others.
    assert (table["x_var"][ok] > 0).all() and (table["snr"][ok] > 0).all()
    assert np.isnan(table["x_var"][~ok]).all()


def test_centroid_correlation_takes_the_reference_as_template(cli, cpu, sh):
    cli("centroid", sh / "s.fits", "--pitch", PITCH, "--grid", "10x8", "--method", "correlation",
        "--reference", sh / "r.fits", "--search", 4, "--out", sh / "m_corr.csv")
    img, ref = spotwave.read(sh / "s.fits"), spotwave.read(sh / "r.fits")
    table = spotwave.centroid(img, grid=GRID, pitch=PITCH, method="correlation", reference=ref,
                              search_px=4, ctx=cpu)
    _same_as_csv(table, sh / "m_corr.csv")
    # The slopes are the CoG's (same frame, same reference), to the correlation's accuracy.
    cog = spotwave.centroid(img, grid=GRID, pitch=PITCH, reference=ref, ctx=cpu)
    both = (table["valid"] != 0) & (cog["valid"] != 0) & (cog["intensity"] > 0.2 *
                                                           cog["intensity"].max())
    assert both.sum() > 20
    assert np.abs(table["dx_px"][both] - cog["dx_px"][both]).max() < 0.3
    with pytest.raises(TypeError, match="needs reference= an image"):
        spotwave.centroid(img, grid=GRID, pitch=PITCH, method="correlation", ctx=cpu)
    with pytest.raises(TypeError, match="needs template="):
        spotwave.CentroidPlan(img.shape, img.dtype, pitch=PITCH, method="correlation", ctx=cpu)


def _status_frame():
    """A float32 64 x 64 frame of 4 x 4 lenslets of 16 px (optical axes at 16 i + 7.5), Gaussian
    spots of sigma 1.5 px on their axes but: 7 pushed 7 px right (the frame's edge cuts it, no
    neighbour gets its light); 14 pushed 5.5 px down (its centroid 2.5 px from the edge); 3
    bright (peak above 5000); 9 faint (flux 20 under 10 e- of read noise); 10 empty; 15 a NaN
    pixel."""
    yy, xx = np.mgrid[0:64, 0:64]
    img = np.zeros((64, 64), np.float64)
    shifts = {7: (7.0, 0.0), 14: (0.0, 5.5)}
    flux = {3: 1e5, 9: 20.0}
    for l in range(16):
        if l == 10:
            continue
        dx, dy = shifts.get(l, (0.0, 0.0))
        cx, cy = 16 * (l % 4) + 7.5 + dx, 16 * (l // 4) + 7.5 + dy
        f = flux.get(l, 5000.0)
        img += f / (2 * np.pi * 1.5**2) * np.exp(-((xx - cx)**2 + (yy - cy)**2) / (2 * 1.5**2))
    img = img.astype(np.float32)
    img[32:48, 32:48] = 0  # no neighbour's far tail either
    img[56, 56] = np.nan
    return img


def test_centroid_status_flags_spots_that_left_or_are_cut_faint_empty(cli, cpu, tmp_path):
    img = _status_frame()
    spotwave.write_fits(tmp_path / "st.fits", img)
    kw = dict(gain=1, read_noise=10, max_shift_px=6, edge_px=3, min_snr=5, saturation=5000)
    cli("centroid", tmp_path / "st.fits", "--pitch", 16, "--gain", 1, "--read-noise", 10,
        "--max-shift", 6, "--edge-px", 3, "--min-snr", 5, "--saturation", 5000,
        "--out", tmp_path / "st.csv")
    table = spotwave.centroid(img, pitch=16, ctx=cpu, **kw)
    _same_as_csv(table, tmp_path / "st.csv")
    S = {v: k for k, v in spotwave.CENTROID_STATUS.items()}
    want = [S["ok"]] * 16
    want[3], want[7], want[14], want[9], want[10], want[15] = (
        S["saturated"], S["left"], S["cut"], S["faint"], S["empty"], S["nonfinite"])
    assert list(table["status"]) == want
    # saturated stays valid unless dropped; the others are invalid, with NaN positions
    assert list(np.flatnonzero(table["valid"] == 0)) == [7, 9, 10, 14, 15]
    assert np.isnan(table["x_px"][[7, 9, 10, 14, 15]]).all()
    # Without the checks the pushed spots are reported valid, the one that left 7 px off.
    plain = spotwave.centroid(img, pitch=16, gain=1, read_noise=10, ctx=cpu)
    assert plain["valid"][[7, 14]].all() and plain["x_px"][7] - 55.5 > 6
    # A masked lenslet: status masked, whatever its spot.
    mask = np.ones((4, 4), bool)
    mask[1, 3] = False
    masked = spotwave.centroid(img, pitch=16, mask=mask, ctx=cpu, **kw)
    assert masked["status"][7] == S["masked"] and masked["valid"][7] == 0
    dropped = spotwave.centroid(img, pitch=16, drop_saturated=True, ctx=cpu, **kw)
    assert dropped["status"][3] == S["saturated"] and dropped["valid"][3] == 0


def test_centroid_error_bars_follow_the_noise(cpu):
    # Photon noise only (gain 1 e-/ADU): the reported sigma of the centroid against the
    # scatter over noise realisations, and the plain CoG path reports none.
    rng = np.random.default_rng(5)
    yy, xx = np.mgrid[0:32, 0:32]
    mean = 4000 / (2 * np.pi * 1.5**2) * np.exp(-((xx % 16 - 7.5)**2 + (yy % 16 - 7.5)**2) /
                                                 (2 * 1.5**2)) + 2.0
    stack = rng.poisson(mean, size=(200, 32, 32)).astype(np.float32)
    t = spotwave.centroid(stack, pitch=16, method="wcog", fwhm_px=5, iterations=3, gain=1,
                          ctx=cpu)
    x = t["x_px"].reshape(200, 4)
    v = t["x_var"].reshape(200, 4)
    assert (t["status"] == 0).all()
    ratio = np.sqrt(v.mean(axis=0)) / x.std(axis=0)
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
    assert spotwave.CentroidPlan((32, 32), np.float32, pitch=16, ctx=cpu).fast
    cog = spotwave.centroid(stack[0], pitch=16, ctx=cpu)
    assert np.isnan(cog["x_var"]).all() and (cog["status"] == 0).all()


def test_centroid_method_bad_input(cpu):
    img = np.zeros((32, 32), np.uint8)
    with pytest.raises(ValueError, match="method: 'median' is not"):
        spotwave.centroid(img, pitch=16, method="median", ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError, match="fwhm"):
        spotwave.centroid(img, pitch=16, method="wcog", ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError, match="brightest_n"):
        spotwave.centroid(img, pitch=16, method="brightest", ctx=cpu)
    with pytest.raises(TypeError, match="read_noise: needs gain"):
        spotwave.centroid(img, pitch=16, read_noise=3, ctx=cpu)
    with pytest.raises(TypeError, match="template: a template goes with method='correlation'"):
        spotwave.CentroidPlan(img.shape, img.dtype, pitch=16, template=img, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError, match="edge_fraction"):
        spotwave.centroid(img, pitch=16, edge_fraction=2, ctx=cpu)
