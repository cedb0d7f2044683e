#!/usr/bin/env python3
"""Refined star positions beside SEP on the same frames (issue 23's benchmark).

Makes a 1024^2 frame of 300 stars (sigma 1.5 px, pixel-integrated Gaussians, sky 100 e-, read
noise 5 e-, gain 1.5 e-/ADU, bias 200 ADU, 16-bit) with `spotwave sim stars`, then measures:
  - spotwave find (CCD mode) with --refine none, xwin and gauss (--background mesh);
  - SEP (Barbary 2016, JOSS 1(6), 58): sep.Background, sep.extract at 1.5 sigma, then
    sep.winpos with sig = 2 / 2.35 * flux_radius(0.5) (SEP's recipe for XWIN_IMAGE);
and prints, against the truth table: recall (a detection within 1.5 px), the centroid RMS
(per axis) over the isolated stars (no other star within 10 px), and the Cramer-Rao bound's
RMS over the same stars (Fisher information of a pixel-integrated Gaussian with Poisson + read
noise, all of x, y, flux, sigma, sky unknown, over a 13 x 13 stamp).

Usage: bench/peer_sep_refine.py PATH/TO/spotwave [--seeds N]   (needs numpy and sep; astropy
for the FITS reading)
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
    import sep
    from astropy.io import fits
except ImportError as e:  # pragma: no cover
    print(f"skip: {e}", file=sys.stderr)
    sys.exit(77)

W = H = 1024
SIGMA, SKY, READ, GAIN, BIAS = 1.5, 100.0, 5.0, 1.5, 200.0


def erf_frac(i, c, s):
    from math import erf, sqrt
    return 0.5 * (erf((i + 0.5 - c) / (sqrt(2) * s)) - erf((i - 0.5 - c) / (sqrt(2) * s)))


def crb_var_x(x, y, flux, r=6):
    """(I^-1)_xx in px^2 for one star, electrons, central differences."""
    th = np.array([x, y, flux, SIGMA, SKY])
    h = np.array([1e-4, 1e-4, 1e-3 * flux, 1e-4, 1e-3])
    cx, cy = int(math.floor(x + 0.5)), int(math.floor(y + 0.5))
    px = np.arange(cx - r, cx + r + 1)
    py = np.arange(cy - r, cy + r + 1)

    def model(t):
        ex = np.array([erf_frac(i, t[0], t[3]) for i in px])
        ey = np.array([erf_frac(j, t[1], t[3]) for j in py])
        return t[2] * np.outer(ey, ex) + t[4]

    mu = model(th)
    d = []
    for k in range(5):
        tp, tm = th.copy(), th.copy()
        tp[k] += h[k]
        tm[k] -= h[k]
        d.append(((model(tp) - model(tm)) / (2 * h[k])).ravel())
    d = np.array(d)
    w = 1.0 / (mu.ravel() + READ * READ)
    fisher = (d * w) @ d.T
    return np.linalg.inv(fisher)[0, 0]


def read_table(path):
    with open(path) as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def score(truth, xs, ys, isolated):
    """recall over all stars, RMS per axis over the isolated ones."""
    xs, ys = np.asarray(xs), np.asarray(ys)
    found, err2 = 0, []
    for k, t in enumerate(truth):
        if len(xs) == 0:
            break
        d2 = (xs - t["x_px"]) ** 2 + (ys - t["y_px"]) ** 2
        i = int(np.argmin(d2))
        if d2[i] <= 1.5 ** 2:
            found += 1
            if isolated[k]:
                err2.append(0.5 * d2[i])
    return found, math.sqrt(sum(err2) / max(len(err2), 1)), len(err2)


def run(sw, seed, tmp):
    frame, truth_csv = os.path.join(tmp, f"f{seed}.fits"), os.path.join(tmp, f"t{seed}.csv")
    subprocess.run([sw, "sim", "stars", "--random", "300", "--size", f"{W}x{H}", "--sigma",
                    str(SIGMA), "--psf", "integrated", "--zero-point", "40000", "--mag-range",
                    "0,2.5", "--sky-e", str(SKY), "--read-noise-e", str(READ), "--gain", str(GAIN),
                    "--bias", str(BIAS), "--bits", "16", "--seed", str(seed), "-o", frame,
                    "--truth", truth_csv], check=True, capture_output=True)
    truth = read_table(truth_csv)
    tx = np.array([t["x_px"] for t in truth])
    ty = np.array([t["y_px"] for t in truth])
    isolated = []
    for t in truth:
        d = np.hypot(tx - t["x_px"], ty - t["y_px"])
        edge = min(t["x_px"], t["y_px"], W - 1 - t["x_px"], H - 1 - t["y_px"])
        isolated.append(np.sum(d < 10.0) == 1 and edge > 8)
    crb = [crb_var_x(t["x_px"], t["y_px"], t["flux_e"]) for t, i in zip(truth, isolated) if i]
    rows = {}
    for m in ("none", "xwin", "gauss"):
        out = os.path.join(tmp, f"s{seed}_{m}.csv")
        args = [sw, "find", frame, "--ccd", "--bias", str(BIAS), "--read-noise", str(READ),
                "-o", out]
        if m != "none":
            args += ["--refine", m, "--background", "mesh"]
        subprocess.run(args, check=True, capture_output=True)
        s = read_table(out)
        rows[f"spotwave {m}"] = score(truth, [r["x_px"] for r in s], [r["y_px"] for r in s],
                                      isolated)
    data = fits.getdata(frame).astype(np.float64)
    bkg = sep.Background(data)
    sub = data - bkg
    objs = sep.extract(sub, 1.5, err=bkg.globalrms)
    rows["sep extract"] = score(truth, objs["x"], objs["y"], isolated)
    r50, _ = sep.flux_radius(sub, objs["x"], objs["y"], 6.0 * objs["a"], 0.5, subpix=5)
    xw, yw, _ = sep.winpos(sub, objs["x"], objs["y"], 2.0 / 2.35 * r50)
    rows["sep winpos"] = score(truth, xw, yw, isolated)
    return rows, math.sqrt(np.mean(crb)), len(truth)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("spotwave")
    ap.add_argument("--seeds", type=int, default=3)
    a = ap.parse_args()
    acc = {}
    crbs, n = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(1, a.seeds + 1):
            rows, crb, nt = run(a.spotwave, seed, tmp)
            crbs.append(crb)
            n += nt
            for k, (found, rms, niso) in rows.items():
                f, r2, c = acc.get(k, (0, 0.0, 0))
                acc[k] = (f + found, r2 + rms * rms * niso, c + niso)
    crb = math.sqrt(np.mean(np.square(crbs)))
    print(f"# {a.seeds} frames of {W}x{H}, 300 stars each, sigma {SIGMA} px, sky {SKY} e-, "
          f"read {READ} e-, gain {GAIN} e-/ADU; sep {sep.__version__}")
    print(f"{'method':18s} {'recall':>8s} {'rms_px':>8s} {'rms/crb':>8s}  (isolated stars)")
    for k, (found, r2, c) in acc.items():
        rms = math.sqrt(r2 / c)
        print(f"{k:18s} {found / n:8.3f} {rms:8.4f} {rms / crb:8.2f}")
    print(f"{'cramer-rao bound':18s} {'':8s} {crb:8.4f} {1.0:8.2f}")


if __name__ == "__main__":
    main()
