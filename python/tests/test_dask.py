"""spotwave.find_dask and pupil_dask: a Dask array of frames dealt to Dask's workers gives the
table of one spotwave.find / spotwave.pupil call over the whole stack, row for row, whatever
the chunking (one frame per block, uneven blocks, blocks cut across the image too) and the
scheduler (threads, synchronous); refinement and CCD mode travel; bad input is
refused. Skips without Dask (pip install 'dask[array]')."""

import numpy as np
import pytest

import spotwave

da = pytest.importorskip("dask.array", reason="Dask is not importable (pip install 'dask[array]')")


@pytest.fixture(scope="module")
def stack(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("dask")
    frames = []
    for seed in range(7):
        cli("sim", "stars", "--random", 40, "--size", "128x96", "--seed", seed + 1, "--sky-e", 30,
            "--read-noise-e", 2, "--mag-range", "6,11", "--out", d / f"s{seed}.fits")
        frames.append(spotwave.read(d / f"s{seed}.fits"))
    return np.stack(frames)


def _same(a, b):
    assert a.dtype == b.dtype
    assert len(a) == len(b) and len(a) > 0
    for name in a.dtype.names:
        if a.dtype[name].kind == "f":
            np.testing.assert_array_equal(a[name], b[name], err_msg=name)
        else:
            assert (a[name] == b[name]).all(), name


@pytest.mark.parametrize("chunks", [1, 3, (2, 4, 1), (3, 4)])
def test_find_dask_is_one_call(cpu, stack, chunks):
    one = spotwave.find(stack, ctx=cpu)
    if isinstance(chunks, tuple):
        chunks = (chunks, -1, -1)
    got = spotwave.find_dask(da.from_array(stack, chunks=chunks), backend="cpu",
                             scheduler="threads")
    _same(one, got)
    assert set(got["frame"]) == set(range(len(stack)))


def test_find_dask_blocks_cut_across_the_image(cpu, stack):
    one = spotwave.find(stack, ctx=cpu, first_frame=100)
    got = spotwave.find_dask(da.from_array(stack, chunks=(2, 48, 64)), backend="cpu",
                             first_frame=100, scheduler="synchronous")
    _same(one, got)


def test_find_dask_refine_and_ccd(cpu, stack):
    one = spotwave.find(stack, ctx=cpu, refine="gauss", background="annulus", ccd=True)
    got = spotwave.find_dask(da.from_array(stack, chunks=2), backend="cpu", refine="gauss",
                             background="annulus", ccd=True, scheduler="threads")
    _same(one, got)


def test_find_dask_lazy(cpu, stack):
    lazy = spotwave.find_dask(da.from_array(stack, chunks=3), backend="cpu", compute=False)
    _same(spotwave.find(stack, ctx=cpu), lazy.compute(scheduler="synchronous"))


def test_pupil_dask_is_one_call(cpu, cli, tmp_path):
    eyes = []
    for seed in range(5):
        cli("sim", "eye", "--size", "256x256", "--pitch", 16, "--grid", "16x16", "--seed",
            seed + 1, "--out", tmp_path / f"e{seed}.pgm")
        eyes.append(spotwave.read(tmp_path / f"e{seed}.pgm"))
    eyes = np.stack(eyes)
    one = spotwave.pupil(eyes, ctx=cpu)
    got = spotwave.pupil_dask(da.from_array(eyes, chunks=2), backend="cpu", scheduler="threads")
    _same(one, got)
    assert list(got["frame"]) == list(range(5))


def test_dask_bad_input(stack):
    with pytest.raises(TypeError, match="dask.array"):
        spotwave.find_dask(stack)
    with pytest.raises(ValueError, match="3-D"):
        spotwave.find_dask(da.from_array(stack[0]))
    with pytest.raises(ValueError, match="no frames"):
        spotwave.find_dask(da.from_array(stack[:0]))
    for k in ("three_d", "strong", "progress", "ctx"):
        with pytest.raises(TypeError, match=k):
            spotwave.find_dask(da.from_array(stack, chunks=2), **{k: None})
    with pytest.raises(TypeError, match="lenslet_mask"):
        spotwave.pupil_dask(da.from_array(stack, chunks=2), lenslet_mask=None)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.find_dask(da.from_array(stack, chunks=2), backend="cpu", sigma_b=-1)
