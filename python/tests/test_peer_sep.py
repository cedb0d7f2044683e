"""Star centroids against SEP (Barbary 2016, J. Open Source Softw. 1(6), 58: Source Extractor as
a library) on the same simulated frame, both measured against the simulator's truth. Skipped,
saying so, when sep is not importable.

What the comparison shows (512 x 512, 150 random stars of 100 to 9700 e-, Gaussian PSF sigma
1.5 px, sky 50 e-, read noise 3 e-; the 146 stars at least 5 px inside the frame, so that no
method's window is cut; RMS distance to the true centre over the 88 stars all three measure,
and over the 36 of them brighter than 3000 e-):
                                                                          all 88   bright 36
    spotwave.find (DIALS dispersion, intensity-weighted centroid of the   0.22 px  0.10 px
                   strong pixels)
    SEP sep.extract (isophotal barycentre above 3 sigma)                  0.16 px  0.07 px
    SEP sep.winpos (Gaussian-windowed, iterated)                          0.14 px  0.06 px
So spotwave is NOT at least as close to the truth as SEP: ``spotwave find`` centroids the
counts of the strong pixels as DIALS does (background included, no window), made for finding
and indexing diffraction spots, while SEP's windowed positions are an astrometric estimator.
Detection: both find 90 of the 146 (neither a false one); spotwave misses a pair of bright
stars 7.5 px apart that SEP deblends (find has no deblending: the pair is one component whose
peak lies more than max_separation = 2 px from its centroid, so it is rejected) and one faint
star; SEP misses two faint ones spotwave finds.
The tests assert what holds: both find the same stars but for those few, spotwave's centroids
within 2x of SEP's windowed error, and SEP's winpos started from spotwave's spots gives SEP's
accuracy: the route for astrometry (spotwave finds on the GPU, SEP refines).
"""

import numpy as np
import pytest

import spotwave

sep = pytest.importorskip("sep", reason="sep is not importable (pip install sep)")

SIGMA = 1.5


@pytest.fixture(scope="module")
def field():
    cpu = spotwave.Context("cpu")
    img, truth = spotwave.sim.stars(random=150, size=(512, 512), sigma=SIGMA, seed=3, sky_e=50,
                                    read_noise_e=3, mag_range=(5.0, 10.0), ctx=cpu)
    spots = spotwave.find(img, ctx=cpu)
    data = img.astype(np.float64)
    bkg = sep.Background(data)
    sub = data - bkg
    objs = sep.extract(sub, 3.0, err=bkg.globalrms, minarea=5)
    xw, yw, _ = sep.winpos(sub, objs["x"], objs["y"], np.full(len(objs), SIGMA))
    x, y = truth["x_px"], truth["y_px"]
    inner = (x > 5) & (x < 506) & (y > 5) & (y < 506)
    return dict(truth=truth, inner=inner, spots=spots, sub=sub, objs=objs, win=(xw, yw))


def _errors(truth, x, y):
    """Distance from each true star to the nearest detection within 1 px (NaN: not found), and
    the number of detections farther than 1 px from every star (false ones)."""
    tx, ty = truth["x_px"], truth["y_px"]
    dist = np.hypot(x[None, :] - tx[:, None], y[None, :] - ty[:, None])  # (stars, detections)
    best = dist.min(axis=1) if len(x) else np.full(len(tx), np.inf)
    false = int(np.sum(dist.min(axis=0) > 1.0)) if len(x) else 0
    return np.where(best < 1.0, best, np.nan), false


def _rms(e):
    return float(np.sqrt(np.mean(e**2)))


def test_the_same_stars_are_found(field):
    t = field["truth"]
    e_sw, false_sw = _errors(t, field["spots"]["x_px"], field["spots"]["y_px"])
    e_sep, false_sep = _errors(t, field["objs"]["x"], field["objs"]["y"])
    inner = field["inner"]
    found_sw, found_sep = np.isfinite(e_sw) & inner, np.isfinite(e_sep) & inner
    assert false_sw == 0 and false_sep == 0
    assert found_sw.sum() >= 85 and found_sep.sum() >= 85  # measured 90 and 91 of 146
    # measured: 3 found by SEP only (the blended pair, one faint), 2 by spotwave only
    assert np.sum(found_sep & ~found_sw) <= 4 and np.sum(found_sw & ~found_sep) <= 4


def test_centroids_against_truth_beside_sep(field):
    t = field["truth"]
    e_sw, _ = _errors(t, field["spots"]["x_px"], field["spots"]["y_px"])
    e_iso, _ = _errors(t, field["objs"]["x"], field["objs"]["y"])
    e_win, _ = _errors(t, *field["win"])
    both = np.isfinite(e_sw) & np.isfinite(e_iso) & np.isfinite(e_win) & field["inner"]
    assert both.sum() >= 80
    sw, iso, win = _rms(e_sw[both]), _rms(e_iso[both]), _rms(e_win[both])
    # Measured: spotwave 0.219, SEP isophotal 0.160, SEP windowed 0.140 px (module's text).
    assert sw < 0.3 and win < 0.2
    assert win < iso and sw < 2.0 * win, (sw, iso, win)
    bright = both & (t["flux_e"] > 3000)
    assert bright.sum() >= 30
    # Bright stars: spotwave 0.099, SEP windowed 0.060 px.
    assert _rms(e_sw[bright]) < 0.15 and _rms(e_sw[bright]) < 2.0 * _rms(e_win[bright])


def test_sep_winpos_refines_spotwave_spots(field):
    # spotwave finds, SEP refines: winpos started at spotwave's centroids converges on SEP's own
    # windowed positions, so a pipeline can take spotwave's finder (GPU) and SEP's astrometry.
    s = field["spots"]
    xr, yr, _ = sep.winpos(field["sub"], s["x_px"], s["y_px"], np.full(len(s), SIGMA))
    t = field["truth"]
    e_ref, _ = _errors(t, xr, yr)
    e_win, _ = _errors(t, *field["win"])
    e_sw, _ = _errors(t, s["x_px"], s["y_px"])
    both = np.isfinite(e_ref) & np.isfinite(e_win) & field["inner"]
    assert both.sum() >= 80
    assert np.abs(e_ref[both] - e_win[both]).max() < 1e-3  # measured 3e-5 px
    assert _rms(e_ref[both]) < 0.8 * _rms(e_sw[both])
