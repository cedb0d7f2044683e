"""Interoperability with astropy (and photutils when present): spot lists as astropy tables,
the command's CSV read by astropy as the Python table, FITS images exchanged both ways.
Skipped, saying so, when astropy is not importable.
"""

import numpy as np
import pytest

import spotwave

astropy = pytest.importorskip("astropy", reason="astropy is not importable (pip install astropy)")
from astropy import units as u  # noqa: E402
from astropy.io import ascii as asc  # noqa: E402
from astropy.io import fits  # noqa: E402
from astropy.table import QTable, Table  # noqa: E402


@pytest.fixture(scope="module")
def stars():
    cpu = spotwave.Context("cpu")
    img, truth = spotwave.sim.stars(random=80, size=(200, 160), sigma=1.4, seed=9, sky_e=40,
                                    read_noise_e=2, mag_range=(6.0, 11.0), ctx=cpu)
    return img, truth, spotwave.find(img, ctx=cpu)


def test_spot_list_is_an_astropy_table(stars):
    _, truth, spots = stars
    t = Table(spots)
    assert t.colnames == list(spots.dtype.names)
    assert t.colnames[:3] == ["frame", "x_px", "y_px"] and len(t) == len(spots) > 20
    for name in t.colnames:
        assert t[name].dtype == spots.dtype[name]
        assert np.array_equal(np.asarray(t[name]), spots[name])
    # Units follow from the names (the columns are the command's CSV's, unitless numbers):
    q = QTable(spots)
    q["x_px"] = q["x_px"] * u.pix
    q["y_px"] = q["y_px"] * u.pix
    assert q["x_px"].unit == u.pix and q["x_px"][0].value == spots["x_px"][0]
    # and the truth table too
    tt = Table(truth)
    assert tt.colnames == ["x_px", "y_px", "flux_e", "mag"] and len(tt) == 80


def test_commands_csv_reads_as_the_python_table(cli, stars, tmp_path):
    img, _, spots = stars
    spotwave.write_fits(tmp_path / "a.fits", img)
    cli("find", tmp_path / "a.fits", "--out", tmp_path / "f.csv")
    t = asc.read(tmp_path / "f.csv", format="csv")
    assert t.colnames == list(spots.dtype.names)
    assert len(t) == len(spots)
    # the command prints positions to 1e-4 px (%.4f), variances to 6 digits
    assert np.abs(np.asarray(t["x_px"]) - spots["x_px"]).max() <= 5.1e-5
    assert np.abs(np.asarray(t["y_px"]) - spots["y_px"]).max() <= 5.1e-5
    assert np.allclose(np.asarray(t["x_var"]), spots["x_var"], rtol=1e-5)
    for name in ("frame", "npix", "bbox_x0", "bbox_x1", "bbox_y0", "bbox_y1", "intensity"):
        assert np.array_equal(np.asarray(t[name]), spots[name]), name


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.float32])
def test_fits_both_ways(tmp_path, dtype):
    rng = np.random.default_rng(5)
    top = np.iinfo(dtype).max if np.dtype(dtype).kind == "u" else 1e6
    img = rng.uniform(0, top, size=(3, 24, 40)).astype(dtype)  # a cube: 3 frames
    img[0, 0, 0], img[0, 0, 1] = 0, top  # the ends of the range
    spotwave.write_fits(tmp_path / "sw.fits", img)
    with fits.open(tmp_path / "sw.fits") as h:
        data = h[0].data
        # the unsigned BZERO convention read as the same unsigned type; floats stay big-endian
        assert (data.dtype.kind, data.dtype.itemsize) == (img.dtype.kind, img.dtype.itemsize)
        assert np.array_equal(data, img)
        if not data.dtype.isnative:
            # spotwave reads native byte order only: refused by name, never copied silently
            with pytest.raises(ValueError, match="image.*byte order"):
                spotwave.find(data[0])
    fits.PrimaryHDU(img).writeto(tmp_path / "ap.fits")
    back = spotwave.read(tmp_path / "ap.fits")
    assert back.dtype == img.dtype and np.array_equal(back, img)
    fits.PrimaryHDU(img[1]).writeto(tmp_path / "ap2.fits")
    assert np.array_equal(spotwave.read(tmp_path / "ap2.fits"), img[1])  # one frame: 2-D


@pytest.mark.filterwarnings("ignore:The fit may not have converged")
def test_photutils_refines_spotwave_spots(stars):
    # Optional: photutils' centroid_sources (a 2-D Gaussian fitted in 7 x 7 boxes at spotwave's
    # spots, on the background-subtracted frame) lands closer to the truth than spotwave's
    # DIALS centroids of the strong pixels (which keep the sky under them): measured 0.18 px
    # against 0.27 px RMS. (photutils' plain centre of mass in the same boxes is no better than
    # spotwave's here: 0.28 px.)
    pytest.importorskip("photutils", reason="photutils is not importable (pip install photutils)")
    from photutils.centroids import centroid_2dg, centroid_sources

    img, truth, spots = stars
    data = img.astype(np.float64) - np.median(img)
    x, y = centroid_sources(data, spots["x_px"], spots["y_px"], box_size=7,
                            centroid_func=centroid_2dg)

    def dist(px, py):
        return np.hypot(px[:, None] - truth["x_px"], py[:, None] - truth["y_px"]).min(axis=1)

    d_pu, d_sw = dist(x, y), dist(spots["x_px"], spots["y_px"])
    ok = (d_pu < 1) & (d_sw < 1)  # matched stars (a blend may leave one more than 1 px off)
    assert ok.sum() >= 0.9 * len(spots)
    assert np.sqrt(np.mean(d_pu[ok] ** 2)) < 0.8 * np.sqrt(np.mean(d_sw[ok] ** 2))
