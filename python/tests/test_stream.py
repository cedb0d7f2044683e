"""spotwave.Stream: shared-memory streams in ImageStreamIO's layout, from Python: every dtype
round trip, the NumPy view of the shared memory, circular buffers, keywords, the C command and a
second Python process writing and reading the same streams, timeouts."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import spotwave
from spotwave import Stream

DTYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16",
          "float32", "float64", "complex64", "complex128"]


@pytest.fixture
def shm(tmp_path, monkeypatch):
    d = tmp_path / "shm"
    d.mkdir()
    monkeypatch.setenv("MILK_SHM_DIR", str(d))
    return d


@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip(shm, dtype):
    rng = np.random.default_rng(7)
    frame = (rng.standard_normal((5, 7)) * 100).astype(dtype)
    with Stream.create("rt", (5, 7), dtype) as s:
        assert s.path == str(shm / "rt.im.shm")
        assert s.cnt0 == 0
        s.write(frame)
        s.write(frame)
        with Stream.open("rt") as r:
            assert r.dtype == np.dtype(dtype) and r.shape == (5, 7)
            got, c = r.read_counted()
            assert c == 2
            np.testing.assert_array_equal(got, frame)
            np.testing.assert_array_equal(r.array, frame)
            info = r.info()
            assert info["cnt0"] == 2 and info["size"] == [7, 5] and info["write_flag"] == 0


def test_array_is_a_view_and_outlives_close(shm):
    s = Stream.create("view", (4, 4), "float32")
    a = s.array
    s.write(np.full((4, 4), 3.5, np.float32))
    assert a[2, 2] == 3.5  # the view sees the write
    a[0, 0] = -1.0          # and writes into the shared memory
    with Stream.open("view") as r:
        assert r.read()[0, 0] == -1.0
    s.close()
    assert a[1, 1] == 3.5   # the mapping lives as long as the view
    with pytest.raises(ValueError, match="closed"):
        s.cnt0


def test_shape_and_dtype_checked(shm):
    with Stream.create("chk", (3, 4), "uint16") as s:
        with pytest.raises(ValueError, match="shape"):
            s.write(np.zeros((4, 3), np.uint16))
        with pytest.raises(TypeError):
            s.write(np.zeros((3, 4), np.float32))
        s.write(np.ones((3, 4), np.uint8))  # same kind: converted
        assert s.read()[2, 3] == 1
    with pytest.raises(TypeError):
        Stream.create("bad", (2, 2), "object")
    with pytest.raises(spotwave.InvalidArgumentError, match="name"):
        Stream.create("a/b", (2, 2))
    with pytest.raises(spotwave.FileError):
        Stream.open("missing")


def test_circular(shm):
    with Stream.create("cb", (3, 2, 4), "int32", circular=True) as s:
        assert s.frame_shape == (2, 4)
        for f in range(1, 6):
            s.write(np.full((2, 4), f, np.int32))
            assert s.cnt1 == f % 3
            assert s.read()[0, 0] == f
        assert list(s.array[:, 0, 0]) == [3, 4, 5]


def test_keywords(shm):
    with Stream.create("kw", (2, 2), keywords=4) as s:
        s.set_keyword("EXPTIME", 12, "ms")
        s.set_keyword("GAIN", 1.25)
        s.set_keyword("CAM", "ocam2k")
        with Stream.open("kw") as r:
            assert r.keywords == {"EXPTIME": 12, "GAIN": 1.25, "CAM": "ocam2k"}
            assert r.keyword_comments()["EXPTIME"] == "ms"
        with pytest.raises(TypeError):
            s.set_keyword("X", [1])
        with pytest.raises(spotwave.InvalidArgumentError):
            s.set_keyword("CAM", "a string far too long")


def test_timeout(shm):
    with Stream.create("tmo", (2, 2)) as s:
        t0 = time.monotonic()
        with pytest.raises(spotwave.TimeoutError):
            s.wait(timeout=0.2)
        assert 0.19 < time.monotonic() - t0 < 2
        with pytest.raises(TimeoutError):  # the built-in too
            s.wait(timeout=0.05, mode="spin")
        assert s.semaphore >= 0
        with pytest.raises(ValueError):
            s.wait(mode="poll")


WRITER = """
import sys, time, numpy as np
from spotwave import Stream
s = Stream.open("xp")
for f in range(1, 11):
    time.sleep(0.01)
    s.write(np.full((16, 16), f, np.float32))
"""

READER = """
import sys, numpy as np
from spotwave import Stream
s = Stream.open("xp")
print("ready", flush=True)
c = s.wait(after=0, timeout=5)
print(c, float(s.read()[3, 3]), flush=True)
"""


def _env(shm):
    env = dict(os.environ)
    env["MILK_SHM_DIR"] = str(shm)
    return env


def test_subprocess_writer(shm):
    s = Stream.create("xp", (16, 16), "float32")
    p = subprocess.Popen([sys.executable, "-c", WRITER], env=_env(shm))
    seen, c = 0, 0
    while c < 10:
        c = s.wait(after=c, timeout=5)
        frame, c = s.read_counted()
        assert np.all(frame == frame[0, 0]) and frame[0, 0] == c
        seen += 1
    assert p.wait(timeout=10) == 0
    assert seen >= 3
    s.close()


def test_subprocess_reader(shm):
    s = Stream.create("xp", (16, 16), "float32")
    p = subprocess.Popen([sys.executable, "-c", READER], env=_env(shm), stdout=subprocess.PIPE,
                         text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.1)
    s.write(np.full((16, 16), 42.0, np.float32))
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0
    assert out.split() == ["1", "42.0"]
    s.close()


def test_cli_reads_what_python_wrote(shm, tmp_path):
    cli = os.environ.get("SPOTWAVE_CLI")
    if not cli:
        pytest.skip("SPOTWAVE_CLI is not set (the ctest entry sets it)")
    with Stream.create("fromp", (3, 5), "uint16", keywords=2) as s:
        s.set_keyword("NFRAMES", 7)
        s.write(np.arange(15, dtype=np.uint16).reshape(3, 5))
        r = subprocess.run([cli, "stream", "info", "fromp", "--json"], capture_output=True,
                           text=True, env=_env(shm), check=True)
        import json
        info = json.loads(r.stdout)
        assert info["size"] == [5, 3] and info["cnt0"] == 1 and info["type"] == "u16"
        assert info["keywords"][0]["name"] == "NFRAMES" and info["keywords"][0]["value"] == 7
        out = tmp_path / "f.fits"
        subprocess.run([cli, "stream", "read", "fromp", "--out", str(out)], env=_env(shm),
                       check=True, capture_output=True)
        img = spotwave.read(str(out))
        np.testing.assert_array_equal(np.asarray(img).reshape(3, 5),
                                      np.arange(15).reshape(3, 5))
