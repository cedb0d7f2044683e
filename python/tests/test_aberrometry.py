"""spotwave.sim.eye against `spotwave sim eye` and spotwave.aberrometry against `spotwave
aberrometry` on the same images (the same numbers as the commands print them), the measured
aberrations and refraction against the simulator's truth, plans, bad input."""

import json

import numpy as np
import pytest

import spotwave
from conftest import fmt, read_csv

AB = spotwave.aberrometry


@pytest.fixture(scope="module")
def one():
    return spotwave.Context("cpu", threads=1)


def _cli(cli, *args):
    return cli("--threads", 1, *args)


@pytest.fixture(scope="module")
def eye(cli, tmp_path_factory):
    """One eye as the command draws it (the default 640 x 640 frame), its reference and truth."""
    d = tmp_path_factory.mktemp("eye")
    _cli(cli, "sim", "eye", "--rms-um", 1.0, "--seed", 17, "--tear-film", 2, "--out",
         d / "e.fits", "--reference", d / "r.fits", "--truth", d / "t")
    return d


def _num(v, spec="%.9g"):
    return fmt(float(v), spec)


def test_sim_eye_is_the_commands(one, eye):
    img, truth, ref = spotwave.sim.eye(rms_um=1.0, seed=17, tear_film=2, reference=True,
                                       ctx=one)
    assert img.dtype == np.uint8 and img.shape == (640, 640)
    assert np.array_equal(spotwave.read(eye / "e.fits"), img)
    assert np.array_equal(spotwave.read(eye / "r.fits"), ref)
    (t,) = truth
    header, rows = read_csv(eye / "t_eye0_zernike.csv")
    assert [float(r[header.index("coef_um")]) for r in rows] == pytest.approx(
        list(t["coef_um"]), abs=5e-10)
    assert t["coef_um"][0] == 0 and t["coef_um"][1] == 0  # piston, tilts zeroed
    assert np.sqrt(np.sum(t["coef_um"][3:] ** 2)) == pytest.approx(1.0)
    header, rows = read_csv(eye / "t_pupils.csv")
    for k in ("cx_px", "cy_px", "a_px", "b_px", "reflection_x_px", "reflection_y_px"):
        assert float(rows[0][header.index(k)]) == pytest.approx(t[k], rel=1e-15), k
    header, rows = read_csv(eye / "t_eye0_spots.csv")
    got = np.array([[float(s[k]) for k in header] for s in t["spots"]])
    assert np.array_equal(got, np.array(rows, float), equal_nan=True)


def test_sim_eye_binocular_zernike_is_the_commands(cli, one, tmp_path):
    (tmp_path / "z.csv").write_text("j,coef_um\n3,0.1\n4,0.5\n5,-0.2\n7,0.05\n")
    _cli(cli, "sim", "eye", "--binocular", "--size", "480x240", "--pitch", 12, "--zernike",
         tmp_path / "z.csv", "--sphere-d", -1, "--no-artefacts", "--reflection", 300, "--seed",
         3, "--bits", 16, "--out", tmp_path / "b.pgm")
    z = np.array([0, 0, 0, 0.1, 0.5, -0.2, 0, 0.05])
    keep = z.copy()
    img, truth = spotwave.sim.eye(binocular=True, size=(480, 240), pitch=12, zernike=z,
                                  sphere_d=-1, artefacts=False, reflection=300, seed=3, bits=16,
                                  ctx=one)
    assert np.array_equal(spotwave.read(tmp_path / "b.pgm"), img)
    assert len(truth) == 2 and truth[0]["cx_px"] < truth[1]["cx_px"]
    assert truth[0]["coef_um"][4] > 0.5  # a myopic sphere adds positive defocus (OSA sign)
    assert np.array_equal(z, keep)


def _csv_rows(table):
    ints = {"frame", "eye", "j", "n", "m"}
    return [[str(r[k]) if k in ints else _num(r[k]) for k in table.dtype.names] for r in table]


def test_aberrometry_is_the_commands(cli, one, eye):
    report = json.loads(_cli(cli, "aberrometry", eye / "e.fits", "--reference", eye / "r.fits",
                             "--out", eye / "z.csv", "--spots", eye / "s.csv", "--json").stdout)
    img = spotwave.read(eye / "e.fits")
    keep = img.copy()
    m = AB.aberrometry(eye / "e.fits", reference=eye / "r.fits", ctx=one)
    header, rows = read_csv(eye / "z.csv")
    table = m.table()
    assert list(table.dtype.names) == header and _csv_rows(table) == rows
    g, rg = m.reference.geometry, report["lenslet_grid"]
    assert (g["nx"], g["ny"], g["pitch"], g["x0"], g["y0"]) == (rg["nx"], rg["ny"],
                                                                rg["pitch_px"], rg["x0"],
                                                                rg["y0"])
    assert m.reference.found == report["reference_spots"]
    (je,) = report["frames"][0]["eyes"]
    (e,) = m.frames[0].eyes
    assert e.valid and je["valid"]
    for k in ("cx_px", "cy_px", "a_px", "b_px", "angle_deg", "inliers"):
        assert e.pupil[k] == je["pupil"][k], k
    assert (e.cx_px, e.cy_px, e.radius_px) == tuple(je["analysis_circle"][k] for k in
                                                    ("cx_px", "cy_px", "radius_px"))
    c = je["counts"]
    assert (e.lenslets, e.central, e.found, e.kept, e.discarded, e.outliers) == (
        c["lenslets"], c["central"], c["found"], c["kept"],
        [c["discarded_empty"], c["discarded_spacing"], c["discarded_isolated"]], c["outliers"])
    assert [x["coef_um"] for x in je["coefficients"]] == list(e.coef_um)
    assert (e.pupil_mm, e.rms_um, e.hoa_rms_um, e.residual_px) == (
        je["pupil_mm"], je["rms_um"], je["hoa_rms_um"], je["residual_px"])
    assert e.rx == je["refraction"]
    header, rows = read_csv(eye / "s.csv")
    spots = m.plan.spots()
    assert list(spots.dtype.names) == header
    assert [[str(s[k]) if k in ("ix", "iy", "eye", "status") else _num(s[k]) for k in header]
            for s in spots] == rows
    assert np.array_equal(img, keep)


def test_mesh_and_discard_options_are_the_commands(cli, one, eye, tmp_path):
    report = json.loads(_cli(cli, "aberrometry", eye / "e.fits", "--reference", eye / "r.fits",
                             "--out", tmp_path / "z.csv", "--json", "--mesh-slopes", 0,
                             "--neighbour-window", 0.5, "--discard-ring", 2).stdout)
    assert (report["mesh_slopes_per_term"], report["neighbour_window"],
            report["discard_ring_px"]) == (0, 0.5, 2)
    m = AB.aberrometry(eye / "e.fits", reference=eye / "r.fits", mesh_slopes=0,
                       neighbour_window=0.5, discard_ring=2, ctx=one)
    (je,) = report["frames"][0]["eyes"]
    assert [x["coef_um"] for x in je["coefficients"]] == list(m.frames[0].eyes[0].coef_um)
    p = m.plan.params
    assert (p["mesh_slopes_per_term"], p["neighbour_window"], p["discard_ring_px"]) == (0, 0.5, 2)


def test_stack_pupil_and_noll_are_the_commands(cli, one, eye, tmp_path):
    img = spotwave.read(eye / "e.fits")
    cube = np.stack([img, img[:, ::-1].copy()])
    spotwave.write_fits(tmp_path / "c.fits", cube)
    _cli(cli, "aberrometry", tmp_path / "c.fits", "--reference", eye / "r.fits", "--pupil-mm", 4,
         "--index", "noll", "--order", 4, "--algorithm", "com", "--out", tmp_path / "z.csv")
    ref = AB.reference(spotwave.read(eye / "r.fits"), ctx=one)
    m = AB.aberrometry(cube, reference=eye / "r.fits", pupil_mm=4, order=4, algorithm="com",
                       ctx=one)
    header, rows = read_csv(tmp_path / "z.csv")
    table = m.table(index="noll")
    assert header[0] == "frame" and list(table.dtype.names) == header
    assert _csv_rows(table) == rows
    assert all(f.eyes[0].pupil_mm == 4.0 for f in m.frames)
    # The plan on its own gives the same (batch or one at a time).
    plan = AB.AberrometryPlan(ref, order=4, algorithm="com", ctx=one)
    one_frame = plan(cube[1])
    assert np.array_equal(one_frame.eyes[0].coef_um, plan(cube)[1].eyes[0].coef_um)


def test_against_the_simulated_eye(one):
    img, truth, ref = spotwave.sim.eye(zernike=np.zeros(15), sphere_d=-2, cyl_d=-1, axis_deg=30,
                                       reference=True, seed=5, ctx=one)
    (e,) = AB.aberrometry(img, reference=ref, ctx=one).frames[0].eyes
    assert e.valid and e.kept > 200
    assert e.pupil_mm == pytest.approx(5.12, rel=0.01)
    assert np.abs(e.coef_um[3:6] - truth[0]["coef_um"][3:6]).max() < 0.02
    # The refraction drawn is the refraction measured (no higher orders here).
    assert e.rx["sphere_d"] == pytest.approx(-2, abs=0.05)
    assert e.rx["cyl_d"] == pytest.approx(-1, abs=0.05)
    assert e.rx["axis_deg"] == pytest.approx(30, abs=2)
    img, truth, ref = spotwave.sim.eye(binocular=True, size=(768, 384), rms_um=1.5, seed=8,
                                       reference=True, ctx=one)
    eyes = AB.aberrometry(img, reference=ref, binocular=True, ctx=one).frames[0].eyes
    assert len(eyes) == 2 and all(x.valid for x in eyes)
    for x, t in zip(eyes, truth):
        assert abs(x.pupil["cx_px"] - t["cx_px"]) < 2
        assert np.abs(x.coef_um[3:15] - t["coef_um"][3:15]).max() < 0.05


def test_bad_input(one, eye):
    img = spotwave.read(eye / "e.fits")
    ref_img = spotwave.read(eye / "r.fits")
    keep = img.copy()
    with pytest.raises(ValueError, match="reference: 320x640, the images 640x640"):
        AB.aberrometry(img, reference=ref_img[:, :320], ctx=one)
    with pytest.raises(TypeError, match="needs all of pitch, grid and origin"):
        AB.aberrometry(img, reference=ref_img, pitch=32, ctx=one)
    with pytest.raises(TypeError, match="images: uint32 pixels are not taken here"):
        AB.aberrometry(img.astype(np.uint32), reference=ref_img, ctx=one)
    with pytest.raises(spotwave.InvalidArgumentError, match="order"):
        AB.aberrometry(img, reference=ref_img, order=11, prelim_order=3, ctx=one)
    with pytest.raises(ValueError, match="prelim_order 5 is above order 4"):
        AB.aberrometry(img, reference=ref_img, order=4, prelim_order=5, ctx=one)
    with pytest.raises(ValueError, match="is larger than the measured pupil"):
        AB.aberrometry(img, reference=ref_img, pupil_mm=7, ctx=one)
    with pytest.raises(TypeError, match="aberrometry: unexpected keyword argument 'oder'"):
        AB.aberrometry(img, reference=ref_img, oder=4, ctx=one)
    with pytest.raises(ValueError, match="algorithm: 'lsq'"):
        AB.aberrometry(img, reference=ref_img, algorithm="lsq", ctx=one)
    ref = AB.reference(ref_img, ctx=one)
    with pytest.raises(spotwave.InvalidArgumentError, match="discard_ring_px 129 must be 0 .. 128"):
        AB.AberrometryPlan(ref, discard_ring=129, ctx=one)
    with pytest.raises(spotwave.InvalidArgumentError, match="mesh_slopes_per_term"):
        AB.AberrometryPlan(ref, mesh_slopes=-1, ctx=one)
    with pytest.raises(TypeError, match="discard_ring sets a discarding criterion"):
        AB.AberrometryPlan(ref, discard=False, discard_ring=2, ctx=one)
    plan = AB.AberrometryPlan(ref, ctx=one)
    with pytest.raises(ValueError, match="the plan was made for u8 frames of 640 x 640"):
        plan(img[:320])
    with pytest.raises(ValueError, match="no spot found"):
        AB.reference(np.zeros((640, 640), np.uint8), pitch=32, grid=(20, 20), origin=(0, 0),
                     ctx=one)
    with pytest.raises(ValueError, match="population_mm: 5 is not 3.0, 4.5, 6.0 or 7.5"):
        spotwave.sim.eye(population_mm=5, ctx=one)
    with pytest.raises(ValueError, match="larger than the largest population pupil"):
        spotwave.sim.eye(pupil_mm=8, ctx=one)
    with pytest.raises(ValueError, match=r"ellipse: b/a = 2 is not in \(0, 1\]"):
        spotwave.sim.eye(ellipse=(2, 0), ctx=one)
    with pytest.raises(spotwave.InvalidArgumentError):
        spotwave.sim.eye(eye_center=(5000, 5000), ctx=one)
    assert np.array_equal(img, keep)


def test_given_pupil_is_the_commands(cli, one, eye, tmp_path):
    """A given pupil per eye skips tracking, in the plan as in `spotwave aberrometry
    --pupil-ellipse`: the same coefficients."""
    report = json.loads(_cli(cli, "aberrometry", eye / "e.fits", "--reference", eye / "r.fits",
                             "--pupil-ellipse", "320,320,250,240,0", "--out", tmp_path / "z.csv",
                             "--json").stdout)
    (je,) = report["frames"][0]["eyes"]
    ref = AB.reference(spotwave.read(eye / "r.fits"), ctx=one)
    plan = AB.AberrometryPlan(ref, given=[(320, 320, 250, 240, 0)], ctx=one)
    (e,) = plan(spotwave.read(eye / "e.fits")).eyes
    assert e.valid and je["valid"] and e.pupil["cx_px"] == 320.0 == je["pupil"]["cx_px"]
    assert [x["coef_um"] for x in je["coefficients"]] == list(e.coef_um)
    with pytest.raises(ValueError, match="given"):
        AB.AberrometryPlan(ref, given=[(1, 2, 3, 4, 5), (1, 2, 3, 4, 5)], ctx=one)
