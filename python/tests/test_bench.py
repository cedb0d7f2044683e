"""python -m spotwave.bench: a smoke run (--quick, CPU) that must give its rows, and the C-side
timing loops (python/src/bench.cpp) checked to run the same plans as the Python calls."""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import spotwave
from spotwave import _arrays, _spotwave, bench


def test_quick_run_gives_every_row():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(spotwave.__file__)))]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    p = subprocess.run([sys.executable, "-m", "spotwave.bench", "--quick", "--backend", "cpu",
                        "--threads", "1", "--json-only"], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    assert p.stderr == ""  # --json-only: JSON lines and nothing else
    by = {(r["bench"], r["config"], r["side"]): r for r in rows}
    for config in ("w100 d3.8", "w100 d29"):
        c = by[("centroid", config, "C (host, path host)")]
        py = by[("centroid", config, "Python (host, path host)")]
        assert c["reps"] >= 3 and py["reps"] >= 3
        assert 0 < c["min_us"] <= c["median_us"] <= c["p99_us"]
        assert py["overhead_us"] == pytest.approx(py["median_us"] - c["median_us"])
        assert c["backend"] == "cpu" and c["threads"] == 1
    c = by[("find", "256x256 u16", "C (host)")]
    assert c["spots"] > 0 and "overhead_pct" in by[("find", "256x256 u16", "Python (host)")]
    if bench.ndimage_of(np) is not None:
        eq = by[("find", "256x256 u16", "SciPy box-filter dispersion (host)")]
        assert eq["strong_px"] == eq["strong_px_spotwave"] > 0  # the same threshold
    assert by[("centroid", "w100 d29", "NumPy reshape-and-sum (host)")]["max_diff_px"] < 1e-3
    if importlib.util.find_spec("spotwave.loop") is not None:  # the real-time chain's bindings
        c = by[("rtc", "8x8 mvm-fp32", "C (host)")]
        assert c["nact"] == 81 and c["slopes"] == 128
        assert "overhead_us" in by[("rtc", "8x8 mvm-fp32", "Python (host)")]


def test_bad_arguments_exit_2():
    for args in (["--cases", "nope"], ["--reps", "2"]):
        with pytest.raises(SystemExit) as e:
            bench.main(args)
        assert e.value.code == 2


def test_c_loop_runs_the_python_plan(cpu):
    # The C loop writes the outputs the Python side passes: after it, they hold the centroids
    # of the last frame it ran, frame (warmup + reps - 1) % frames, as the plan gives them.
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 256, (3, 60, 80), dtype=np.uint8)
    plan = spotwave.CentroidPlan((60, 80), np.uint8, pitch=7.5, grid=(10, 8), origin=(1, 0),
                                 ctx=cpu)
    out = plan.result(1)
    params = dict(plan.geometry, width=80, height=60, pixel_type="u8", path=plan.path)
    t = _spotwave.bench_centroid(cpu, params, frames, out.x, out.y, out.intensity, out.valid,
                                 out.slopes, 2, 5, 10.0)
    assert t.shape == (5,) and np.all(t > 0)
    want = plan(frames[(2 + 5 - 1) % 3])
    assert np.array_equal(out.x, want.x) and np.array_equal(out.intensity, want.intensity)
    # a budget stops the loop early, after 3 calls at least
    assert len(_spotwave.bench_centroid(cpu, params, frames, out.x, out.y, out.intensity,
                                        out.valid, out.slopes, 0, 1000, 0.0)) == 3
    with pytest.raises(ValueError, match="reps"):
        _spotwave.bench_centroid(cpu, params, frames, out.x, out.y, out.intensity, out.valid,
                                 out.slopes, 0, 1, 1.0)
    with pytest.raises(ValueError, match="slopes"):
        _spotwave.bench_centroid(cpu, params, frames, out.x, out.y, out.intensity, out.valid,
                                 out.x, 0, 3, 1.0)


def test_c_find_loop_and_equivalents(cpu):
    frames = bench.find_frames(128, 96, 2)
    plan = spotwave.FindPlan((96, 128), np.uint16, ctx=cpu)
    params = dict(plan.params)
    params["kernel_x"], params["kernel_y"] = params.pop("kernel_size")
    t = _spotwave.bench_find(cpu, params, frames, 1, 4, 10.0)
    assert t.shape == (4,) and np.all(t > 0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'kernel_size'"):
        _spotwave.bench_find(cpu, dict(plan.params), frames, 0, 3, 1.0)
    # The reshape-and-sum centre of gravity is spotwave's, lenslet for lenslet.
    img = np.random.default_rng(2).integers(0, 256, (40, 40), dtype=np.uint8)
    x, y, total = bench.cog_equivalent(np, img, 8, 5)
    c = spotwave.centroid(img, pitch=8, grid=(5, 5), origin=(0, 0), ctx=cpu)
    assert np.allclose(x.ravel(), c["x_px"], atol=1e-4) and np.allclose(y.ravel(), c["y_px"],
                                                                        atol=1e-4)
    assert np.allclose(total.ravel(), c["intensity"])
