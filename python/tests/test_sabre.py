"""spotwave.sabre against `spotwave sabre` on the same slopes table (the same numbers as the
command prints them), against the wavefront the SH simulator was given, plans, bad input."""

import json

import numpy as np
import pytest

import spotwave
from conftest import fmt, read_csv

NX, NY = 12, 10


def _write_slopes(path, dx, dy, cols=("dx_rad", "dy_rad")):
    with open(path, "w") as f:
        f.write(f"ix,iy,{cols[0]},{cols[1]}\n")
        for iy in range(dx.shape[0]):
            for ix in range(dx.shape[1]):
                f.write(f"{ix},{iy},{float(dx[iy, ix])!r},{float(dy[iy, ix])!r}\n")


@pytest.fixture(scope="module")
def slopes(tmp_path_factory):
    """Slopes of a Zernike wavefront through a circular pupil (the simulator's truth), NaN for
    lenslets lit less than half, and the table the command reads."""
    ctx = spotwave.Context("cpu")
    z = np.zeros(15)
    z[3], z[4], z[5], z[7], z[12] = 0.04, 0.3, -0.1, 0.08, 0.05
    _, truth = spotwave.sim.sh(grid=(NX, NY), pitch=16, zernike=z, pupil_mm=1.0, noise="none",
                               ctx=ctx)
    lit = truth["illum"].reshape(NY, NX) > 0.5
    dx = np.where(lit, truth["slope_x_rad"].reshape(NY, NX), np.nan)
    dy = np.where(lit, truth["slope_y_rad"].reshape(NY, NX), np.nan)
    d = tmp_path_factory.mktemp("sabre")
    _write_slopes(d / "s.csv", dx, dy)
    return d, dx, dy


def _num(v):
    return fmt(float(v), "%.10g")


@pytest.mark.parametrize("method, options", [
    ("dsabre", {}),
    ("dsabre", dict(partitions=2, pme="distributed", overlap=2, padding="nearest", fill=2)),
    ("global", {}),
    ("fried", {}),
])
def test_reconstruct_is_the_commands(cli, cpu, slopes, method, options):
    d, dx, dy = slopes
    args = ["sabre", d / "s.csv", "--method", method, "--lenslet-um", 88, "--actuators",
            d / "a.csv", "--map", d / "m.fits", "--map-size", 40, "--json"]
    for k, v in options.items():
        args += ["--" + k.replace("_", "-"), v]
    if method != "fried":
        args += ["--values", d / "v.csv"]
    report = json.loads(cli(*args).stdout)
    r = spotwave.sabre.reconstruct(dx, dy, method=method, lenslet_um=88, map_size=40, ctx=cpu,
                                   **options)
    header, rows = read_csv(d / "a.csv")
    assert header == ["cx", "cy", "w"]
    assert [[str(t["cx"]), str(t["cy"]), _num(t["w"])] for t in r.actuator_table()] == rows
    assert (r.rms, r.pv, r.piston, r.active) == (report["rms"], report["pv"],
                                                 report["piston_removed"],
                                                 report["corners_active"])
    assert np.array_equal(spotwave.read(d / "m.fits"), r.map, equal_nan=True)
    if method == "fried":
        assert r.values is None
        return
    header, rows = read_csv(d / "v.csv")
    mine = []
    for t in r.values_table():
        xy = ([str(int(t["x"])), str(int(t["y"]))] if t["kind"] == "corner"
              else ["%.1f" % t["x"], "%.1f" % t["y"]])
        mine.append([str(t["kind"]), str(t["I"]), str(t["J"])] + xy + [_num(t["w"])])
    assert mine == rows
    assert r.lattice.nvalues == len(rows)
    if method == "dsabre":
        assert r.info["k"] == report["partitions"] and r.info["window"] == report["window"]
        assert r.lattice._dict() == report["lattice"]


def test_pixel_slopes_are_the_commands(cli, cpu, slopes):
    d, dx, dy = slopes
    f = 3.5 * 1000 / 5.5  # pixels per radian
    px, py = (dx * f).astype(np.float32), (dy * f).astype(np.float32)
    _write_slopes(d / "p.csv", px, py, ("dx_px", "dy_px"))
    cli("sabre", d / "p.csv", "--pixel-um", 5.5, "--focal-mm", 3.5, "--partitions", 4,
        "--actuators", d / "ap.csv")
    keep = px.copy()
    r = spotwave.sabre.reconstruct(px, py, pixel_um=5.5, focal_mm=3.5, partitions=4, ctx=cpu)
    _, rows = read_csv(d / "ap.csv")
    assert [_num(w) for w in r.actuators.ravel()] == [row[2] for row in rows]
    assert r.unit == "rad_pitch"
    assert np.array_equal(px, keep, equal_nan=True)


def test_against_the_simulated_wavefront(cpu):
    # No pupil: every lenslet lit; the Zernike circle inscribed in the grid (radius 6 lenslets).
    n = 12
    z = np.zeros(10)
    z[4], z[5], z[7] = 0.4, -0.2, 0.1
    _, truth = spotwave.sim.sh(grid=(n, n), pitch=16, zernike=z, noise="none", ctx=cpu)
    dx = truth["slope_x_rad"].reshape(n, n)
    dy = truth["slope_y_rad"].reshape(n, n)
    lens_um = 16 * 5.5
    cy, cx = np.mgrid[0:n + 1, 0:n + 1]
    # corner (cx, cy) at lattice (cx - 1/2, cy - 1/2); the array's centre at (n - 1) / 2
    u, v = (cx - 0.5 - (n - 1) / 2) / (n / 2), (cy - 0.5 - (n - 1) / 2) / (n / 2)
    # The simulator's optical path is minus the OSA wavefront (a positive wavefront leads).
    w = -np.tensordot(z, spotwave.zernike.basis(np.arange(10), u, v), 1)
    w -= w.mean()
    # D-SABRE on 2 x 2 partitions with the padding continued from the pupil's edge (zero padding
    # on many small partitions bends the edges: Brunner et al. 2018 section 3.B.2).
    for method, kw in (("dsabre", dict(partitions=2, padding="nearest", fill=4)), ("global", {}),
                       ("fried", {})):
        r = spotwave.sabre.reconstruct(dx, dy, method=method, lenslet_um=lens_um, ctx=cpu, **kw)
        err = np.sqrt(np.mean((r.actuators - w) ** 2)) / np.sqrt(np.mean(w ** 2))
        # The Fried corners on the array's rim are extrapolated (spline) or regularised (Fried).
        assert err < 0.05, (method, err)
        inner = np.sqrt(np.mean((r.actuators - w)[2:-2, 2:-2] ** 2)) / np.sqrt(np.mean(w ** 2))
        assert inner < 0.02, (method, inner)


def test_plans_and_given_outputs(cpu, slopes):
    _, dx, dy = slopes
    s, valid = spotwave.sabre.slopes_from(dx, dy)
    assert s.shape == (2, NY, NX) and s.dtype == np.float32 and valid.sum() > 40
    plan = spotwave.sabre.SabrePlan(mask=valid, pitch=88.0, partitions=4, ctx=cpu)
    assert plan.grid == (NX, NY) and plan.info["k"] == 4 and plan.memory == "host"
    out = plan.result()
    ptrs = (out.values.ctypes.data, out.actuators.ctypes.data)
    keep = s.copy()
    r = plan(s, out=out)
    assert r is out and ptrs == (out.values.ctypes.data, out.actuators.ctypes.data)
    assert np.array_equal(s, keep)
    # The actuators are the spline at the corners.
    corners = plan.lattice.corners(out.values.astype(np.float64), plan.grid)
    assert np.allclose(corners, out.actuators, atol=1e-5)
    # Only the actuators, into a given array.
    act = np.zeros((NY + 1, NX + 1), np.float32)
    plan(s, out=spotwave.sabre.SabreResult(None, act))
    assert np.array_equal(act, out.actuators)
    # The one-shot function is the plan with the piston removed.
    rec = spotwave.sabre.reconstruct(dx, dy, partitions=4, lenslet_um=88, ctx=cpu)
    on = ~np.isnan(rec.actuators)
    a = out.actuators.astype(np.float64)
    assert np.allclose((a - a[on].mean())[on], rec.actuators[on], atol=1e-6)
    # Q maps a window's slopes to its values.
    i = plan.info
    assert plan.local_matrix().shape == (i["local_values"], i["local_slopes"])
    g = spotwave.sabre.GlobalSabre(mask=valid, ctx=cpu)
    assert g(s).shape == (g.lattice.nvalues,)
    f = spotwave.sabre.Fried(mask=valid, ctx=cpu)
    assert f(s).shape == (NY + 1, NX + 1)


def test_bad_input(cpu, slopes):
    _, dx, dy = slopes
    keep = dx.copy()
    with pytest.raises(spotwave.InvalidArgumentError, match="power of two"):
        spotwave.sabre.reconstruct(dx, dy, partitions=3, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError, match="partitions"):
        spotwave.sabre.reconstruct(dx, dy, partitions=16, pme="distributed", ctx=cpu)
    bad = dx.copy()
    bad[4, 5] = np.inf
    with pytest.raises(ValueError, match=r"dx: lenslet \(5,4\) has an infinite slope"):
        spotwave.sabre.reconstruct(bad, dy, ctx=cpu)
    with pytest.raises(ValueError, match="dy: shape"):
        spotwave.sabre.reconstruct(dx, dy[:5], ctx=cpu)
    with pytest.raises(ValueError, match="no valid lenslet"):
        spotwave.sabre.reconstruct(dx * np.nan, dy, ctx=cpu)
    with pytest.raises(ValueError, match="pme: 'mean'"):
        spotwave.sabre.reconstruct(dx, dy, pme="mean", ctx=cpu)
    with pytest.raises(TypeError, match="apply to method='dsabre' only"):
        spotwave.sabre.reconstruct(dx, dy, method="global", partitions=2, ctx=cpu)
    with pytest.raises(TypeError, match="pixel_um, focal_mm: give both"):
        spotwave.sabre.reconstruct(dx, dy, pixel_um=5.5, ctx=cpu)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.sabre.Fried((NX, NY), reg=0.0, ctx=cpu)
    with pytest.raises(ValueError, match="fried_reg"):
        spotwave.sabre.reconstruct(dx, dy, method="fried", fried_reg=0.0, ctx=cpu)
    s, valid = spotwave.sabre.slopes_from(dx, dy)
    plan = spotwave.sabre.SabrePlan(mask=valid, partitions=2, ctx=cpu)
    with pytest.raises(TypeError, match="slopes: expected float32 elements, got float64"):
        plan(s.astype(np.float64))
    with pytest.raises(ValueError, match="slopes: expected 240 elements"):
        plan(s[:, :5])
    nan = s.copy()
    iy, ix = np.argwhere(valid)[0]
    nan[0, iy, ix] = np.nan
    with pytest.raises(spotwave.RangeError):
        plan(nan)
    with pytest.raises(ValueError, match="mask: shape"):
        spotwave.sabre.SabrePlan((NX, NY), mask=valid[:4], ctx=cpu)
    assert np.array_equal(dx, keep, equal_nan=True)
