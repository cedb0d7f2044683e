"""spotwave.read: the formats the command reads, and failures with the library's message."""

import numpy as np
import pytest

import spotwave


def test_fits_pgm_roundtrip(tmp_path):
    rng = np.random.default_rng(1)
    for dtype in (np.uint8, np.uint16, np.uint32, np.float32):
        img = (rng.random((13, 17)) * 200).astype(dtype)
        spotwave.write_fits(tmp_path / "a.fits", img)
        back = spotwave.read(tmp_path / "a.fits")
        assert back.dtype == dtype and np.array_equal(back, img)
    cube = rng.integers(0, 60000, (3, 9, 11)).astype(np.uint16)
    spotwave.write_fits(str(tmp_path / "c.fits"), cube)
    assert np.array_equal(spotwave.read(tmp_path / "c.fits"), cube)
    spotwave.write_pgm(tmp_path / "a.pgm", cube[1])
    assert np.array_equal(spotwave.read(tmp_path / "a.pgm"), cube[1])
    # A crop is written through its row stride.
    spotwave.write_fits(tmp_path / "v.fits", cube[2, 2:7, 3:10])
    assert np.array_equal(spotwave.read(tmp_path / "v.fits"), cube[2, 2:7, 3:10])


def test_hdf5_as_the_command_writes_it(cli, tmp_path):
    h5 = tmp_path / "s.h5"
    cli("sim", "stars", "--random", 20, "--size", "40x30", "--seed", 3, "--out", h5)
    cli("sim", "stars", "--random", 20, "--size", "40x30", "--seed", 3,
        "--out", tmp_path / "s.fits")
    a = spotwave.read(h5)
    assert a.shape == (30, 40) and a.dtype == np.uint16
    assert np.array_equal(a, spotwave.read(tmp_path / "s.fits"))
    info = spotwave.h5_info(h5)
    assert (info["frames"], info["width"], info["height"]) == (1, 40, 30)
    assert spotwave.read(h5, dataset="/entry/data/data_000001").shape == (30, 40)
    with pytest.raises(spotwave.FormatError):
        spotwave.read(h5, dataset="/entry/nothing")


def test_read_failures_carry_the_librarys_message(tmp_path):
    with pytest.raises(spotwave.FileError) as e:
        spotwave.read(tmp_path / "missing.fits")
    assert "missing.fits" in str(e.value) and isinstance(e.value, OSError)
    (tmp_path / "junk.fits").write_bytes(b"SIMPLE  = nonsense" + b"\0" * 100)
    with pytest.raises(spotwave.FormatError) as e:
        spotwave.read(tmp_path / "junk.fits")
    assert "junk.fits" in str(e.value)
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(spotwave.FormatError, match="neither FITS"):
        spotwave.read(tmp_path / "x.txt")
    with pytest.raises(ValueError, match="dataset"):
        spotwave.read(tmp_path / "x.txt", dataset="/a")
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.write_pgm(tmp_path / "f.pgm", np.zeros((4, 4), np.float32))
