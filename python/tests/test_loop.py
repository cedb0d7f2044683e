"""spotwave.loop: the simulator against `spotwave loop --json` on the same configuration and
seed (the same numbers but the timings), the mirror, the projection, the calibration through a
Python callable, the controllers and the real-time chain against the stages they chain, its
distributed projection on the pupil only against `spotwave rtc`'s; bad input."""

import json
import os
import subprocess
import time

import numpy as np
import pytest

import spotwave

L = spotwave.loop


@pytest.fixture(scope="module")
def one():
    """A one-thread CPU context: the loop's many small OpenMP / BLAS calls run fastest alone on
    a busy machine, and the command runs with --threads 1 to match."""
    return spotwave.Context("cpu", threads=1)


SMALL = dict(model="geometric", samples=4, frames=12, warmup=2)
TIMINGS = {"create_s", "run_s", "frames_per_s"}


@pytest.mark.parametrize("config", [
    dict(nx=4, recon="mvm", cm_condition=20),
    dict(nx=6, recon="dsabre-local", partitions=2, controller="leaky", leak=0.05, delay=1),
    dict(nx=6, recon="dsabre-global", partitions=2, influence="bezier", coupling=0.25),
    # the distributed projection on the pupil only, a matrix per partition
    dict(nx=6, recon="dsabre-local-pupil", partitions=2),
    dict(nx=5, recon="sabre", magnitude=9, read_noise_e=1, controller="pi", gain=0.4, seed=7),
    # PI over the interaction matrix's modes, its gains re-chosen every 32 frames
    dict(nx=6, recon="mvm", controller="pi", modal="im", gain_window=32, magnitude=11,
         frames=100, wind_m_s=10),
    # the same over the mirror's Karhunen-Loeve modes
    dict(nx=6, recon="mvm", controller="pi", modal="kl", gain_window=32, magnitude=11,
         frames=100, wind_m_s=10),
])
def test_simulate_is_the_commands(cli, one, config):
    cfg = dict(SMALL, **config)
    args = ["--threads", 1, "loop", "--json"]
    for k, v in cfg.items():
        args += ["--set", f"{k}={v}"]
    report = json.loads(cli(*args).stdout)
    summary = L.simulate(ctx=one, **cfg)
    assert list(summary) == list(report)
    for k in report:
        if k not in TIMINGS:
            assert summary[k] == report[k], k
    assert summary["residual_nm_mean"] < summary["turbulence_nm_mean"]  # the loop corrects
    assert (summary["modes"] is None) == (cfg["recon"] != "mvm")


@pytest.mark.parametrize("config", [
    dict(nx=6, recon="mvm", gain=3.0, frames=20),              # diverges
    dict(nx=6, recon="dsabre-local", partitions=2, clip=0.01),  # a saturated mirror
    dict(nx=6, recon="dsabre-local", partitions=2, delay=1, gain=1.02),  # above g_max = 1
    # piston and waffle left unfiltered drift into the stroke limit: diverging by the trend
    dict(nx=8, diameter_m=3, model="diffraction", px_per_lenslet=8, recon="dsabre-local",
         partitions=2, clip=0.7, unseen="none", frames=800, warmup=20),
    # a sensor that loses slope gain, not calibrated
    dict(nx=6, recon="dsabre-local", partitions=2, model="diffraction", px_per_lenslet=10,
         slope_calibration=False),
])
def test_guards_are_the_commands(cli, one, config):
    """The physics guards (warnings, diverged, divergence_frame, saturated_frames) as the command
    reports them."""
    cfg = dict(SMALL, **config)
    args = ["--threads", 1, "loop", "--json"]
    for k, v in cfg.items():
        args += ["--set", f"{k}={v}"]
    report = json.loads(cli(*args).stdout)
    summary = L.simulate(ctx=one, **cfg)
    assert report["warnings"], report
    for k in report:
        if k not in TIMINGS:
            assert summary[k] == report[k], k
    if cfg.get("gain") == 3.0:
        assert summary["diverged"] and summary["divergence_frame"] >= 1
    if "clip" in cfg:
        assert summary["saturated_frames"] > 0
    if cfg.get("unseen") == "none":
        assert summary["diverged"] and summary["divergence_reason"] == "trend"
    if cfg.get("slope_calibration") is False:
        assert min(summary["slope_gain"]) < 0.95


def test_max_gain():
    assert L.max_gain(0) == pytest.approx(2.0)
    assert L.max_gain(1) == pytest.approx(1.0)
    assert L.max_gain(2) == pytest.approx((5 ** 0.5 - 1) / 2)
    assert L.max_gain(0, "leaky", 0.2) == pytest.approx(1.8)
    assert L.max_gain(2, "leaky", 0.2) > L.max_gain(2)
    with pytest.raises(ValueError, match="far outside the stable range"):
        L.Simulator(nx=4, gain=1e30)


def test_open_loop_and_steps(cli, one):
    cfg = dict(SMALL, nx=6, recon="dsabre-local", partitions=2)
    report = json.loads(cli("--threads", 1, "loop", "--json", "--open-loop",
                            *[f"--set={k}={v}" for k, v in cfg.items()]).stdout)
    summary = L.simulate(open_loop=True, ctx=one, **cfg)
    assert summary["config"]["gain"] == 0 and summary["open_loop"] is True
    assert {k: v for k, v in summary.items() if k not in TIMINGS} == \
        {k: v for k, v in report.items() if k not in TIMINGS}
    # Open loop: the residual is the turbulence.
    assert summary["residual_nm_mean"] == pytest.approx(summary["turbulence_nm_mean"], rel=1e-6)
    # Frame by frame is the same as a run, and the table is the command's --report.
    a = L.Simulator(ctx=one, **cfg)
    b = L.Simulator(ctx=one, **cfg)
    table = a.run()
    rows = [b.step() for _ in range(cfg["frames"])]
    assert list(table.dtype.names) == ["frame", "turbulence_nm", "residual_nm", "strehl",
                                       "marechal", "command_rms_um", "long_strehl"]
    assert [r["residual_nm"] for r in rows] == list(table["residual_nm"])
    assert np.array_equal(table["frame"], np.arange(1, cfg["frames"] + 1))
    assert np.isnan(table["long_strehl"][:cfg["warmup"]]).all()
    m = a.maps()
    assert m["turbulence"].shape == (24, 24)
    assert np.nanmax(np.abs(m["residual"] - (m["turbulence"] - m["correction"]))) < 1e-5
    assert a.fitting_error() > 0


def test_mirror_and_projection(one):
    dm = L.DM((6, 6), coupling=0.3)
    assert dm.nact == 49
    assert np.allclose(dm.profile([0, 1, 2, -1]), [1, 0.3, 0.3 ** 4, 0.3])
    bz = L.DM((6, 6), influence="bezier", coupling=0.3)
    # OOMAO's monotonic shape: 0.0240 at two pitches, zero from 2.97 pitches on at c = 0.3
    assert np.allclose(bz.profile([0, 1, 2, 3]), [1, 0.3, 0.024001999471822296, 0], atol=1e-12)
    # One poke: the surface is the separable profile around the actuator.
    shaper = dm.shaper(samples=4, ctx=one)
    g = shaper.grid
    u = np.zeros(dm.nact, np.float32)
    u[24] = 1.0
    s = shaper(u)
    xs = g["x0"] + np.arange(g["width"]) * g["step"]
    ys = g["y0"] + np.arange(g["height"]) * g["step"]
    ax, ay = dm.positions()
    assert (ax.ravel()[24], ay.ravel()[24]) == (2.5, 2.5)
    assert np.allclose(s, np.outer(dm.profile(ys - 2.5), dm.profile(xs - 2.5)), atol=1e-6)
    # Projection: the spline through a smooth mirror shape gives back its commands.
    yy, xx = np.mgrid[0:7, 0:7] - 3.0
    u = (0.3 * xx ** 2 / 9 + 0.2 * xx * yy / 9 - 0.1 * yy).astype(np.float32).ravel()
    lat = spotwave.sabre.Lattice(5, 5)
    _, _, _, x, y = lat.positions()
    c = sum(u[a] * dm.profile(x - ax.ravel()[a]) * dm.profile(y - ay.ravel()[a])
            for a in range(dm.nact)).astype(np.float32)
    P = L.Projector(dm, lat, ctx=one)
    assert P.shape == (49, lat.nvalues) and P.matrix.shape == P.shape
    assert np.abs(P(c) - u).max() < 0.1 * np.abs(u).max()
    assert np.allclose(P(c), P.matrix @ c, atol=1e-5)
    w = L.Projector.window(dm, 4, ctx=one)
    assert w.shape == (16, 41)


def test_calibration_through_a_callable(one):
    rng = np.random.default_rng(3)
    D0 = rng.normal(size=(30, 12)).astype(np.float32)
    calls = []

    def measure(u):
        calls.append(u.copy())
        return D0 @ u

    D = L.interaction_matrix(measure, 12, 30, amp=0.5)
    assert D.shape == (30, 12) and len(calls) == 24
    assert calls[0][0] == 0.5 and calls[1][0] == -0.5 and np.count_nonzero(calls[0]) == 1
    assert np.allclose(D, D0, atol=1e-5)
    cm = L.control_matrix(D, ctx=one)
    assert cm.cm.shape == (12, 30) and cm.kept == 12 and cm.modes.shape == (12, 12)
    assert np.all(np.diff(cm.singular) <= 0)
    assert np.allclose(cm.cm @ D0, np.eye(12), atol=1e-4)
    few = L.control_matrix(D, max_modes=5, ctx=one)
    assert few.kept == 5 and np.allclose(few.modes.T @ few.modes, np.eye(5), atol=1e-5)

    def broken(u):
        raise KeyError("the camera is off")

    with pytest.raises(KeyError, match="the camera is off"):
        L.interaction_matrix(broken, 12, 30)
    with pytest.raises(ValueError, match="measure: returned 29 slopes, expected 30"):
        L.interaction_matrix(lambda u: np.zeros(29), 12, 30)
    with pytest.raises(spotwave.InvalidArgumentError, match="amplitude"):
        L.interaction_matrix(measure, 12, 30, amp=0.0)


def test_controllers(one):
    r = np.array([1.0, -2.0, 0.5], np.float32)
    c = L.Controller(3, gain=0.5, ctx=one)
    assert np.array_equal(c.step(r), 0.5 * r)
    assert np.array_equal(c.step(r), r)
    c.reset()
    assert np.array_equal(c.step(r), 0.5 * r)
    k = L.Controller(3, "leaky", gain=1.0, leak=0.5, clip=1.5, ctx=one)
    k.step(r)
    assert np.allclose(k.step(r), np.clip(1.5 * r, -1.5, 1.5))
    B = np.eye(3, 2, dtype=np.float32)
    p = L.Controller(3, "pi", modes=B, kp=[1.0, 0.0], ki=[0.5, 0.5], ctx=one)
    assert np.allclose(p.step(r), [1.5, -1.0, 0.0])
    before = p.step(r).copy()
    with pytest.raises(spotwave.RangeError):
        p.step(np.array([np.nan, 0, 0], np.float32))
    assert np.allclose(p.step(r), before + [0.5, -1.0, 0.0])  # the state was not changed
    with pytest.raises(TypeError, match="apply to the 'pi' controller only"):
        L.Controller(3, kp=[1.0, 2.0, 3.0], ctx=one)
    with pytest.raises(ValueError, match="controller: 'pid'"):
        L.Controller(3, "pid", ctx=one)


@pytest.fixture(scope="module")
def frame(one):
    z = np.zeros(10)
    z[4], z[5], z[7] = 0.2, 0.1, -0.05
    img, _ = spotwave.sim.sh(grid=(8, 8), pitch=12, zernike=z, noise="none", bits=16, ctx=one)
    return img


def test_rtc_is_the_stages_it_chains(one, frame):
    shape, grid = frame.shape, (8, 8)
    plan = spotwave.CentroidPlan(shape, frame.dtype, pitch=12, grid=grid, ctx=one)
    s = plan(frame).slopes[0].ravel()
    nact = 81
    rng = np.random.default_rng(5)
    cm = (rng.normal(size=(nact, s.size)) * 0.01).astype(np.float32)
    rtc = L.RTC(shape, frame.dtype, pitch=12, grid=grid, cm=cm, gain=0.5, telemetry=4,
                ctx=one)
    assert (rtc.nact, rtc.nslopes) == (81, 64)
    keep = frame.copy()
    slopes = np.empty(128, np.float32)
    u = rtc(frame, slopes=slopes)
    assert u is rtc.commands and np.array_equal(frame, keep)
    assert np.array_equal(slopes, s)
    assert np.allclose(u, 0.5 * (cm @ s), atol=1e-5)
    out = np.empty(81, np.float32)
    assert rtc(frame, out=out) is out and np.allclose(out, cm @ s, atol=1e-5)
    n, ts, tc = rtc.telemetry()
    assert n == 2 and np.array_equal(ts, s) and np.array_equal(tc, out)
    rtc.reset()
    assert np.allclose(rtc(frame), 0.5 * (cm @ s), atol=1e-5)
    assert rtc.last_us > 0
    # D-SABRE with the spline at the Fried corners: the sabre plan on the slopes in radians.
    srt = L.RTC(shape, frame.dtype, pitch=12, grid=grid, recon="sabre",
                sabre=dict(partitions=2, pitch=66.0), gain=1.0, ctx=one)
    scale = 5.5 / 3500.0
    sp = spotwave.sabre.SabrePlan(grid, pitch=66.0, partitions=2, ctx=one)
    ref = sp((s * np.float32(scale)).astype(np.float32)).actuators.ravel()
    assert np.allclose(srt(frame), ref, atol=1e-4 * np.abs(ref).max())
    # ... and with the distributed projection made from a mirror.
    loc = L.RTC(shape, frame.dtype, pitch=12, grid=grid, recon="sabre",
                sabre=dict(partitions=2, pitch=66.0), projection="local", dm=L.DM(grid),
                ctx=one)
    assert np.isfinite(loc(frame)).all()


def _annulus(n=12):
    """Lenslets (n, n) whose centre is 2 to n / 2 lenslets from the array's centre."""
    c = np.arange(n) - (n - 1) / 2
    r = np.hypot(*np.meshgrid(c, c))
    return (r >= 2.0) & (r <= n / 2)


def test_rtc_local_pupil_is_the_command(one, tmp_path, monkeypatch):
    """projection="local-pupil", the distributed projection on the pupil only (Brunner et al.
    2018, J. Opt. Soc. Am. A 35(6), section 4.A; Fig. 14's "MV"), on an annular pupil: the
    commands of `spotwave rtc` with projection = local-pupil on the same frame and
    configuration, bit for bit; 0 at the corners no measured lenslet touches (left out of the
    fit), where "local" (each window fitted whole, "MM") moves them."""
    cli = os.environ.get("SPOTWAVE_CLI")
    if not cli:
        pytest.skip("SPOTWAVE_CLI is not set (the ctest entry sets it)")
    z = np.zeros(9)
    z[4], z[5], z[7], z[8] = 0.1, 0.08, -0.05, 0.04
    img, _ = spotwave.sim.sh(grid=(12, 12), pitch=10, zernike=z, noise="none", bits=8,
                             flux=1500, sigma=1.2, ctx=one)
    valid = _annulus()
    spotwave.write_pgm(tmp_path / "valid.pgm", valid.astype(np.uint8) * 255)
    conf = tmp_path / "rtc.conf"
    conf.write_text("nx = 12\nny = 12\npitch_px = 10\npixel_um = 5.5\nfocal_mm = 3.5\n"
                    "valid = valid.pgm\nrecon = dsabre\npartitions = 2\n"
                    "projection = local-pupil\ngain = 0.5\n")
    shm = tmp_path / "shm"
    shm.mkdir()
    monkeypatch.setenv("MILK_SHM_DIR", str(shm))
    with spotwave.Stream.create("lpcam", img.shape, "uint8") as cam:
        cam.write(img)
        p = subprocess.Popen([cli, "--backend", "cpu", "--threads", "1", "rtc", "--config",
                              str(conf), "--in", "lpcam", "--out", "lpdm", "--frames", "1",
                              "--timeout", "20", "--copy", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t0 = time.monotonic()
        while p.poll() is None and time.monotonic() - t0 < 30:  # frames until it took one
            cam.write(img)
            time.sleep(0.05)
        out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    report = json.loads(out)
    assert report["recon"] == "dsabre" and report["projection"] == "local-pupil", report
    with spotwave.Stream.open("lpdm") as dm:
        u_cli = dm.read().ravel().copy()

    def chain(projection):
        # the command's defaults: slopes in radians (pixel_um / focal_mm), hierarchical piston
        # equalisation, gain 0.5, piston and waffle filtered
        rtc = L.RTC(img.shape, img.dtype, pitch=10, grid=(12, 12), mask=valid, recon="sabre",
                    sabre=dict(partitions=2, pitch=55.0), projection=projection,
                    filter=L.unseen_modes(12, 12, valid), gain=0.5, ctx=one)
        return rtc(img).copy()

    u = chain("local-pupil")
    assert u.shape == u_cli.shape == (169,)
    np.testing.assert_array_equal(u, u_cli)
    seen = np.zeros((13, 13), bool)  # the corners of the measured lenslets
    for dy in (0, 1):
        for dx in (0, 1):
            seen[dy:dy + 12, dx:dx + 12] |= valid
    seen = seen.ravel()
    rms = np.sqrt(np.mean(u[seen] ** 2))
    assert rms > 0.01 and np.all(u[~seen] == 0)
    local = chain("local")
    assert np.abs(local[~seen]).max() > 0.2 * rms
    assert np.abs(local - u)[seen].max() > 0.2 * rms


def test_bad_input(one, frame):
    with pytest.raises(TypeError, match="loop: unexpected keyword argument 'gian'"):
        L.Simulator(gian=0.3, ctx=one)
    with pytest.raises(ValueError, match=r"gain: -1.0 is not a number >= 0"):
        L.Simulator(gain=-1, ctx=one)
    with pytest.raises(ValueError, match="recon: 'lsq' is not"):
        L.Simulator(recon="lsq", ctx=one)
    with pytest.raises(ValueError, match="frames .5. must be more than warmup .20."):
        L.simulate(frames=5, ctx=one)
    with pytest.raises(ValueError, match="nx: 1 is not a whole number in 2..1024"):
        L.Simulator(nx=1, ctx=one)
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        L.Simulator(nx=6, partitions=3, recon="dsabre-local", **SMALL, ctx=one)
    assert "partitions" in str(e.value) or "power of two" in str(e.value)
    cm = np.zeros((81, 128), np.float32)
    with pytest.raises(ValueError, match="cm: 8100 elements, the chain needs nact x 2 "
                                         "nslopes = 81 x 128"):
        L.RTC(frame.shape, frame.dtype, pitch=12, grid=(8, 8), cm=cm[:, :100], ctx=one)
    rtc = L.RTC(frame.shape, frame.dtype, pitch=12, grid=(8, 8), cm=cm, ctx=one)
    with pytest.raises(ValueError, match="the chain was made for u16 frames of 96 x 96"):
        rtc(frame[:48])
    with pytest.raises(TypeError, match="frame: uint32 pixels are not taken here"):
        rtc(frame.astype(np.uint32))
    with pytest.raises(TypeError, match="recon='mvm' needs cm"):
        L.RTC(frame.shape, frame.dtype, pitch=12, grid=(8, 8), ctx=one)
    with pytest.raises(ValueError, match="projection: 'mv' is not 'corners', 'global', "
                                         "'local' or 'local-pupil'"):
        L.RTC(frame.shape, frame.dtype, pitch=12, grid=(8, 8), recon="sabre",
              projection="mv", ctx=one)
    with pytest.raises(ValueError, match="projection: 'mv' is not 'corners', 'global', "
                                         "'local' or 'local-pupil'"):
        spotwave._spotwave.rtc_projection_matrix(one, {}, L.DM((8, 8))._dict(), 8, 8, None,
                                                 "mv", None)
    with pytest.raises(spotwave.InvalidArgumentError):
        L.DM((6, 6), coupling=1.5)
    with pytest.raises(ValueError, match="influence: 'cubic'"):
        L.DM((6, 6), influence="cubic")


def test_unseen_modes_and_filter(one):
    """unseen_modes: piston and waffle over the valid lenslets' corners, orthonormal, invisible to
    the Fried geometry's differences; a Controller with them as its filter never integrates
    them."""
    valid = np.ones((5, 5), bool)
    valid[0, 0] = False
    Z = L.unseen_modes(5, 5, valid)
    assert Z.shape == (36, 2) and Z.dtype == np.float32
    np.testing.assert_allclose(Z.T @ Z, np.eye(2), atol=1e-5)
    assert Z[0, 0] == 0 and Z[0, 1] == 0  # the corner only the invalid lenslet touches
    c = Z.reshape(6, 6, 2)
    sx = 0.5 * ((c[:-1, 1:] - c[:-1, :-1]) + (c[1:, 1:] - c[1:, :-1]))
    sy = 0.5 * ((c[1:, :-1] - c[:-1, :-1]) + (c[1:, 1:] - c[:-1, 1:]))
    assert np.abs(sx[valid]).max() < 1e-6 and np.abs(sy[valid]).max() < 1e-6
    assert L.unseen_modes(5, 5, which="piston").shape == (36, 1)
    with pytest.raises(ValueError, match="which"):
        L.unseen_modes(5, 5, which="tip")
    ctl = L.Controller(36, "leaky", gain=0.5, leak=0.01, filter=Z, ctx=one)
    rng = np.random.default_rng(3)
    for _ in range(20):
        u = ctl.step((3.0 + rng.normal(size=36)).astype(np.float32))
    assert np.abs(Z.T @ u).max() < 1e-4 * np.abs(u).max()
    with pytest.raises(ValueError, match="filter"):
        L.Controller(36, filter=np.zeros((35, 2), np.float32), ctx=one)


def test_negative_modes(one):
    """negative_filter: D-SABRE with partitions of 2 x 2 lenslets on an 8 x 8 annulus has a mode
    of negative closed-loop gain; filtered (the default) the loop holds, not filtered it runs
    away; the simulator reports what it filtered, None where it did not look."""
    cfg = dict(nx=8, diameter_m=3.0, square_pupil=False, obscuration=0.3, coupling=0.4, gain=0.7,
               recon="dsabre-local-pupil", partitions=4, model="geometric", samples=2,
               px_per_lenslet=4, frames=600, warmup=20)
    on = L.simulate(ctx=one, **cfg)
    off = L.simulate(ctx=one, negative_filter=0, **cfg)
    assert on["config"]["negative_filter"] == 1 and off["config"]["negative_filter"] == 0
    assert on["negative_modes"] >= 1 and on["loop_min_gain"] < -0.05
    assert off["negative_modes"] is None and off["loop_min_gain"] is None
    assert on["residual_nm_last"] < 0.5 * on["turbulence_nm_last"]
    assert off["residual_nm_last"] > 3 * on["residual_nm_last"]
    sim = L.Simulator(ctx=one, **dict(cfg, recon="mvm"))
    assert sim.negative_modes == (None, None)
    with pytest.raises(ValueError, match="negative_filter"):
        L.Simulator(ctx=one, negative_filter=3)


def test_modal_gains_and_set_gains(one):
    """modal_gains on two scalar loops of known statistics (a slow disturbance with little noise,
    and noise alone): a high gain for the first, ~0 for the second, the noise found; then PI's
    set_gains is bumpless (the commands do not jump when ki changes)."""
    rng = np.random.default_rng(5)
    n, d = 8192, 2
    y = np.zeros((n, 2), np.float32)
    y_pol = np.zeros((n, 2), np.float32)  # the pseudo-open-loop measurements: y + u_{k-d}
    for m, (rho, sw, sn) in enumerate(((0.995, 0.05, 0.05), (0.0, 0.0, 0.3))):
        phi, hist = 0.0, [0.0] * d
        for k in range(n):
            phi = rho * phi + sw * rng.normal()
            yk = phi - hist[d - 1] + sn * rng.normal()
            y_pol[k, m] = yk + hist[d - 1]
            hist = [hist[0] + 0.3 * yk] + hist[:-1]
            y[k, m] = yk
    r = L.modal_gains(y, [0.3, 0.3], delay_frames=d, ctx=one)
    assert r["gains"][0] > 0.2 and r["gains"][1] < 0.05
    assert r["noise"][1] == pytest.approx(0.09, rel=0.15)
    rp = L.modal_gains(y_pol, [0.3, 0.3], delay_frames=d, pol=True, ctx=one)
    np.testing.assert_allclose(rp["gains"], r["gains"], rtol=0.15, atol=0.01)
    assert rp["noise"][1] == pytest.approx(0.09, rel=0.15)
    ctl = L.Controller(3, "pi", kp=[0, 0, 0], ki=[0.5, 0.5, 0.5], ctx=one)
    for _ in range(5):
        u0 = ctl.step(np.array([1.0, -1.0, 0.5], np.float32)).copy()
    ctl.set_gains(ki=[0.25, 1.0, 0.5])
    np.testing.assert_allclose(ctl.step(np.zeros(3, np.float32)), u0, rtol=1e-6)
    with pytest.raises(ValueError, match="pi"):
        L.Controller(3, ctx=one).set_gains(ki=[1, 1, 1])
