"""The Python examples (examples/python, one per user group) run with small arguments, each in a
fresh process and folder, and say what they should."""

import os
import subprocess
import sys

import numpy as np
import pytest

import spotwave

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                        "python")


def _run(tmp_path, name, *args):
    path = os.path.join(EXAMPLES, name)
    if not os.path.isfile(path):
        pytest.skip(f"{name} is not in {EXAMPLES}")
    env = dict(os.environ, SPOTWAVE_BACKEND=os.environ.get("SPOTWAVE_BACKEND", "cpu"),
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(spotwave.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, path, *map(str, args)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, f"{name} failed:\n{p.stdout}\n{p.stderr}"
    with open(path) as f:
        assert len(f.read().splitlines()) < 40, f"{name} is 40 lines or more"
    return p


def test_ao_loop(tmp_path):
    out = _run(tmp_path, "ao_loop.py", 12).stdout
    turb, resid = (float(v) for v in
                   out.split("turbulence ")[1].replace(" nm RMS, residual", "").split()[:2])
    assert resid < 0.8 * turb, out


def test_aberrometry_session(tmp_path):
    out = _run(tmp_path, "aberrometry_session.py").stdout
    assert "eye 1: pupil 5.1" in out and "refraction -" in out, out
    m = spotwave.read(tmp_path / "wavefront_eye1.fits")
    assert m.shape == (256, 256) and np.isfinite(m[128, 128])


def test_eiger_find(tmp_path):
    img, truth = spotwave.sim.stars(random=60, size=(200, 160), sigma=1.3, mag_range=(2, 7),
                                    seed=2)
    mask = np.ones(img.shape, bool)
    mask[:, :2] = False
    spotwave.write_h5(tmp_path / "run_master.h5", np.stack([img, img[::-1].copy(), img]),
                      frames_per_block=2, linked=True, mask=mask, overload=65000)
    p = _run(tmp_path, "eiger_find.py", "run_master.h5", "s.csv")
    assert "3/3 frames" in p.stderr
    table = np.genfromtxt(tmp_path / "s.csv", delimiter=",", names=True)
    assert list(table.dtype.names) == list(spotwave.find(img).dtype.names)
    assert set(table["frame"].astype(int)) == {0, 1, 2}
    assert (table["x_px"] >= 1.5).all()  # the masked columns hold no spot
    assert f"{len(table)} spots on 3 frames of 200x160" in p.stdout


def test_star_field(tmp_path):
    out = _run(tmp_path, "star_field.py", 80, 256).stdout
    assert "spots found for 80 stars on a 256x256 frame" in out, out
    assert "mag 2..4" in out and "found" in out
