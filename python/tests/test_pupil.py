"""spotwave.pupil against `spotwave pupil` on the same eye images (the same numbers as the
command prints them) and against the eye simulator's pupil; bad input."""

import numpy as np
import pytest

import spotwave
from conftest import fmt, read_csv


def _same_as_csv(table, path):
    header, rows = read_csv(path)
    assert list(table.dtype.names) == header
    assert len(table) == len(rows)
    text = {"failure", "method"}
    ints = {"frame", "pupil", "inliers", "valid", "threshold", "near"}
    for t, row in zip(table, rows):
        got = [str(t[n]) if n in text else fmt(t[n], "%d") if n in ints
               else fmt(float(t[n]), "%.6f") for n in header]
        assert got == row


@pytest.fixture(scope="module")
def eyes(cli, tmp_path_factory):
    d = tmp_path_factory.mktemp("pupil")
    cli("sim", "eye", "--size", "320x160", "--binocular", "--pitch", 12, "--seed", 4,
        "--out", d / "e.fits", "--truth", d / "t")
    cli("sim", "eye", "--size", "160x160", "--pitch", 12, "--seed", 5, "--ellipse", "0.8,30",
        "--out", d / "m.fits")
    return d


def test_pupil_is_the_commands(cli, cpu, eyes):
    cli("pupil", eyes / "m.fits", "--out", eyes / "m.csv")
    table = spotwave.pupil(spotwave.read(eyes / "m.fits"), ctx=cpu)
    _same_as_csv(table, eyes / "m.csv")
    assert table["valid"][0] == 1 and table["failure"][0] == ""
    assert table["a_px"][0] > table["b_px"][0]


def test_binocular_and_lenslet_mask_are_the_commands(cli, cpu, eyes):
    cli("pupil", eyes / "e.fits", "--binocular", "--pitch", 12, "--grid", "26x13",
        "--origin", "4,2", "--lenslet-mask", eyes / "lm.csv", "--out", eyes / "e.csv")
    img = spotwave.read(eyes / "e.fits")
    mask = np.zeros((13, 26), np.uint8)
    table = spotwave.pupil(img, binocular=True, pitch=12, grid=(26, 13), origin=(4, 2),
                           lenslet_mask=mask, ctx=cpu)
    _same_as_csv(table, eyes / "e.csv")
    assert list(table["pupil"]) == [0, 1] and table["valid"].all()
    assert table["cx_px"][0] < 160 < table["cx_px"][1]
    header, rows = read_csv(eyes / "lm.csv")
    got = [[str(ix), str(iy), str(int(mask[iy, ix] != 0)), str(int(mask[iy, ix]) - 1)]
           for iy in range(13) for ix in range(26)]
    assert got == rows


def test_pupil_bad_input(cpu):
    with pytest.raises(spotwave.InvalidArgumentError) as e:
        spotwave.pupil(np.zeros((8, 8), np.uint8), ctx=cpu)
    assert "16" in str(e.value)
    flat = np.full((64, 64), 7, np.uint16)
    t = spotwave.pupil(flat, ctx=cpu)
    assert t["valid"][0] == 0 and t["failure"][0] and np.isnan(t["cx_px"][0])
    with pytest.raises(ValueError, match="lenslet_mask: the plan has no lenslet grid"):
        spotwave.pupil(flat, lenslet_mask=np.zeros((4, 4), np.uint8), ctx=cpu)
    with pytest.raises(TypeError, match="pupil: unexpected keyword argument 'radius'"):
        spotwave.pupil(flat, radius=3, ctx=cpu)
    with pytest.raises(ValueError, match="edge_level: expected a number in .0, 1. or 'auto'"):
        spotwave.pupil(flat, edge_level="half", ctx=cpu)
    with pytest.raises(ValueError, match="edge_level: expected a number in .0, 1. or 'auto'"):
        spotwave.pupil(flat, edge_level=-0.5, ctx=cpu)  # not "auto" in disguise


def test_edge_level_fixed_and_auto_are_the_commands(cli, cpu, eyes):
    # a fixed level (the default) and "auto" (the CPU backend's automatic level) each give what
    # the command gives with the same option
    image = spotwave.read(eyes / "m.fits")
    for level in ("0.4", "auto"):
        cli("pupil", eyes / "m.fits", "--edge-level", level, "--out", eyes / f"m{level}.csv")
        table = spotwave.pupil(image, edge_level=level if level == "auto" else float(level),
                               ctx=cpu)
        _same_as_csv(table, eyes / f"m{level}.csv")


def test_given_pupil_and_method_are_the_commands(cli, cpu, eyes):
    """A given ellipse skips tracking (method "given"), as `spotwave pupil --pupil-ellipse`; the
    method names are checked."""
    cli("pupil", eyes / "m.fits", "--pupil-ellipse", "81.5,79,42,36,20", "--out", eyes / "g.csv")
    img = spotwave.read(eyes / "m.fits")
    plan = spotwave.PupilPlan(img.shape, img.dtype, given=[(81.5, 79, 42, 36, 20)], ctx=cpu)
    table = plan(img)
    _same_as_csv(table, eyes / "g.csv")
    assert table["method"][0] == "given"
    assert (table["cx_px"][0], table["a_px"][0], table["angle_deg"][0]) == (81.5, 42.0, 20.0)
    cli("pupil", eyes / "m.fits", "--pupil-method", "glow", "--out", eyes / "gl.csv")
    glow = spotwave.PupilPlan(img.shape, img.dtype, pupil_method="glow", ctx=cpu)(img)
    _same_as_csv(glow, eyes / "gl.csv")
    assert glow["method"][0] == "glow"
    with pytest.raises(ValueError, match="pupil_method"):
        spotwave.PupilPlan(img.shape, img.dtype, pupil_method="moon", ctx=cpu)
    with pytest.raises(ValueError, match="given"):
        spotwave.PupilPlan(img.shape, img.dtype, given=[(1, 2, 3)], ctx=cpu)
