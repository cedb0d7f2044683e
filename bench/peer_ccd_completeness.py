#!/usr/bin/env python3
"""Catalogue completeness on a real CCD frame (issue 23's benchmark).

The frame and its catalogue are SEP's test data (Barbary 2016, JOSS 1(6), 58): data/image.fits,
a 256 x 256 crop of an ESO NTT/EMMI R-band CCD exposure (1992, "sum of 3 frames", bias-subtracted
and flat-fielded, float values), and data/image.cat, the SExtractor (Bertin & Arnouts 1996, A&AS
117, 393) catalogue SEP compares itself with, made by `sextractor image.fits` with SEP's
data/default.sex (DETECT_THRESH 1.5, DETECT_MINAREA 5, the 3 x 3 filter default.conv,
DEBLEND_MINCONT 1.0: no deblending, BACK_SIZE 64). They are not in spotwave's tree: their
licence is not stated (SEP's code is LGPL/BSD/MIT, its data files carry no terms), so this script
finds them in a checkout of SEP's sources (github kbarbary/sep, the data/ folder): give its path
with --sep-data, or set SEP_DATA.

It runs `spotwave find` in the documented CCD mode (--ccd: the gains from the clipped background)
with --background mesh --refine gauss, without and with --deblend, and SEP's own sep.extract on
the same frame (SExtractor's settings of default.sex: threshold 1.5 x the background RMS,
minarea 5, the default 3 x 3 filter, deblend_cont 1.0), then matches each to the SExtractor
catalogue (X_IMAGE, Y_IMAGE, 1-based, moved to spotwave's 0-based pixel centres) within
--radius px (default 2) and prints completeness (catalogue objects matched), the number of
detections not in the catalogue, and the RMS per axis of the matched positions against
SExtractor's XWIN_IMAGE, YWIN_IMAGE (windowed centroids; X_IMAGE for SEP's isophotal ones).

Usage: bench/peer_ccd_completeness.py PATH/TO/spotwave [--sep-data DIR] [--radius PX]
       [-- extra spotwave find options]
(needs numpy; sep for its column; astropy is not needed)
"""
import argparse
import csv
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}", file=sys.stderr)
    sys.exit(77)


def read_cat(path):
    """SExtractor ASCII_HEAD: '#   N NAME ...' lines name the columns (1-based)."""
    cols, rows = {}, []
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                p = line.split()
                cols[p[2]] = int(p[1]) - 1
            elif line.strip():
                rows.append([float(v) for v in line.split()])
    a = np.array(rows)
    return {k: a[:, i] for k, i in cols.items()}


def score(cx, cy, wx, wy, xs, ys, radius):
    """completeness, unmatched detections, RMS per axis against (wx, wy) of the matched."""
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    used = np.zeros(len(xs), bool)
    err2, found = [], 0
    for x, y, u, v in zip(cx, cy, wx, wy):
        if len(xs) == 0:
            break
        d = np.hypot(xs - x, ys - y)
        i = int(np.argmin(d))
        if d[i] <= radius:
            found += 1
            used[i] = True
            err2.append(0.5 * ((xs[i] - u) ** 2 + (ys[i] - v) ** 2))
    rms = math.sqrt(sum(err2) / len(err2)) if err2 else float("nan")
    return found, int((~used).sum()), rms


def spotwave(sw, image, out, extra):
    args = [sw, "find", image, "--ccd", "--background", "mesh", "--refine", "gauss", "-o", out]
    r = subprocess.run(args + extra, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"spotwave find failed: {r.stderr}")
    with open(out) as f:
        rows = list(csv.DictReader(f))
    ccd = [l for l in r.stderr.splitlines() if "CCD mode" in l]
    return [float(s["x_px"]) for s in rows], [float(s["y_px"]) for s in rows], ccd


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spotwave")
    ap.add_argument("--sep-data", default=os.environ.get("SEP_DATA", ""))
    ap.add_argument("--radius", type=float, default=2.0)
    ap.add_argument("extra", nargs="*", help="more spotwave find options (after --)")
    a = ap.parse_args()
    image = os.path.join(a.sep_data, "image.fits")
    catalog = os.path.join(a.sep_data, "image.cat")
    if not (os.path.exists(image) and os.path.exists(catalog)):
        print("skip: SEP's data/image.fits and data/image.cat not found (give --sep-data DIR, "
              "the data/ folder of a checkout of SEP's sources)", file=sys.stderr)
        sys.exit(77)
    cat = read_cat(catalog)
    cx, cy = cat["X_IMAGE"] - 1.0, cat["Y_IMAGE"] - 1.0
    wx, wy = cat["XWIN_IMAGE"] - 1.0, cat["YWIN_IMAGE"] - 1.0
    n = len(cx)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, opts in (("spotwave find --ccd", []), ("spotwave find --ccd --deblend",
                                                         ["--deblend"])):
            xs, ys, ccd = spotwave(a.spotwave, image, os.path.join(tmp, "s.csv"), opts + a.extra)
            rows[name] = (score(cx, cy, wx, wy, xs, ys, a.radius), len(xs))
    sep_version = "not installed"
    try:
        import sep
        from astropy.io import fits  # noqa: F401  (SEP reads arrays; astropy reads the FITS)
        data = fits.getdata(image).astype(np.float64)
        bkg = sep.Background(data, bw=64, bh=64, fw=3, fh=3)
        sub = data - bkg
        objs = sep.extract(sub, 1.5, err=bkg.globalrms, minarea=5, deblend_cont=1.0)
        rows["SEP extract (SExtractor settings)"] = (
            score(cx, cy, cx, cy, objs["x"], objs["y"], a.radius), len(objs))
        sep_version = sep.__version__
    except ImportError as e:
        print(f"note: no SEP column ({e})", file=sys.stderr)
    print(f"# SEP data/image.fits (256 x 256, ESO NTT/EMMI), SExtractor catalogue: {n} objects; "
          f"match radius {a.radius} px; sep {sep_version}")
    for l in ccd:
        print("#", l)
    print(f"{'method':36s} {'found':>6s} {'complete':>9s} {'extra':>6s} {'rms_px':>7s}")
    for k, ((found, extra, rms), total) in rows.items():
        print(f"{k:36s} {total:6d} {found / n:9.3f} {extra:6d} {rms:7.3f}")
    print("# rms: per axis, matched objects, against XWIN_IMAGE (SEP: against X_IMAGE)")


if __name__ == "__main__":
    main()
