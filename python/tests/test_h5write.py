"""spotwave.write_h5 (io.h's Eiger-like writer): what it writes reads back as the command reads
it (frames, blocks, linked data files, pixel mask, overload); bad input."""

import numpy as np
import pytest

import spotwave


def test_write_h5_reads_back(tmp_path):
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 4000, size=(5, 30, 40), dtype=np.uint16)
    keep = frames.copy()
    spotwave.write_h5(tmp_path / "a.h5", frames, frames_per_block=2, overload=3000)
    assert np.array_equal(spotwave.read(tmp_path / "a.h5"), frames)
    info = spotwave.h5_info(tmp_path / "a.h5")
    assert (info["frames"], info["blocks"], info["overload"]) == (5, 3, 3000)
    mask = np.ones((30, 40), bool)
    mask[3, 4] = False
    spotwave.write_h5(tmp_path / "run_master.h5", frames[:, ::2], linked=True, mask=mask[::2],
                      compression="deflate")
    assert (tmp_path / "run_data_000001.h5").exists()
    assert np.array_equal(spotwave.read(tmp_path / "run_master.h5"), frames[:, ::2])
    pm = spotwave.h5_info(tmp_path / "run_master.h5")["pixel_mask"]
    assert pm is not None and np.array_equal(pm != 0, mask[::2])
    spotwave.write_h5(tmp_path / "one.h5", frames[0].astype(np.uint8), compression="none")
    assert spotwave.read(tmp_path / "one.h5").shape == (30, 40)
    assert np.array_equal(frames, keep)


def test_write_h5_bad_input(tmp_path):
    f = np.zeros((2, 8, 8), np.uint16)
    with pytest.raises(TypeError, match="frames: float32 pixels are not taken here"):
        spotwave.write_h5(tmp_path / "x.h5", f.astype(np.float32))
    with pytest.raises(ValueError, match="compression: 'zip'"):
        spotwave.write_h5(tmp_path / "x.h5", f, compression="zip")
    with pytest.raises(ValueError, match="mask: expected 64 elements"):
        spotwave.write_h5(tmp_path / "x.h5", f, mask=np.ones((4, 4), bool))
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.write_h5(tmp_path / "x.h5", f, overload=-1)
    assert not (tmp_path / "x.h5").exists()


def test_cli_linked_data_files_are_inputs(tmp_path, cli):
    """`spotwave find` on a master never replaces a data file its links lead to, and follows
    links only beside the master unless --h5-link-dirs names another folder."""
    rng = np.random.default_rng(2)
    frames = rng.poisson(5, size=(2, 32, 32)).astype(np.uint16)
    frames[:, 10:13, 20:23] += 400  # one spot a frame
    master, data = tmp_path / "run_master.h5", tmp_path / "run_data_000001.h5"
    spotwave.write_h5(master, frames, linked=True, compression="none")
    before = data.read_bytes()
    p = cli("find", master, "--out", data, check=False)
    assert p.returncode == 1 and "would replace the input" in p.stderr, p.stderr
    assert data.read_bytes() == before
    assert not list(tmp_path.glob(".spotwave-*"))
    # the data file moved to another folder: found only where --h5-link-dirs allows
    other = tmp_path / "elsewhere"
    other.mkdir()
    data.rename(other / data.name)
    p = cli("find", master, "--out", tmp_path / "s.csv", check=False)
    assert p.returncode == 1 and "run_data_000001.h5" in p.stderr, p.stderr
    assert not (tmp_path / "s.csv").exists()
    cli("find", master, "--out", tmp_path / "s.csv", "--h5-link-dirs", other)
    assert (tmp_path / "s.csv").read_text().startswith("frame,x_px,y_px")
