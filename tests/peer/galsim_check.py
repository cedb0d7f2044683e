#!/usr/bin/env python3
"""Peer check of `spotwave sim stars` (integrated PSF) against GalSim.

GalSim's drawImage(method='auto') convolves the profile with the pixel, i.e. integrates it over
each pixel: the same thing as spotwave's integrated mode (seed 004 Eq. 2 integrated over the
pixel). For several sizes, widths and positions (one star, then a crowded field) both must agree
per pixel within 1e-5 of the peak.

Centre convention. GalSim's image bounds are 1..nx; pixel i is centred at i and the profile is
drawn at the image's true_center ((1 + nx) / 2, (1 + ny) / 2) plus `offset`. spotwave's pixel x is
GalSim's x + 1, so a star at spotwave (X, Y) needs offset (X - (nx - 1) / 2, Y - (ny - 1) / 2).
FITS stores spotwave pixel (0, 0) as FITS (1, 1), so GalSim's fits reader and its array[y, x]
index the same pixels as spotwave.

Accuracy. GalSim draws through FFTs whose default accuracy (folding_threshold 5e-3,
maxk_threshold 1e-3) leaves errors of ~3e-5 of the peak; they are tightened here to 1e-6 and
1e-7 (errors ~3e-8 of the peak). The ROI is made wide enough (2 ceil(7 sigma) + 1) that
spotwave's truncation is far below the tolerance.

Usage: galsim_check.py PATH/TO/spotwave. Exit 0: agreement; 1: disagreement or failure;
77: GalSim (or numpy) cannot be imported here (ctest: skipped).
"""
import math
import os
import subprocess
import sys
import tempfile

try:
    import galsim
    import numpy as np
except ImportError as e:  # pragma: no cover
    print("SKIP: GalSim is not importable here (%s); pip install galsim to run this check" % e)
    sys.exit(77)

TOL = 1e-5  # of the peak
GSPARAMS = galsim.GSParams(folding_threshold=1e-6, maxk_threshold=1e-7)


def spotwave_render(exe, tmp, name, nx, ny, sigma, stars):
    """Renders stars [(x, y, flux)] with the spotwave command; returns the f32 image array."""
    cat = os.path.join(tmp, name + ".csv")
    with open(cat, "w") as f:
        f.write("x_px,y_px,flux_e\n")
        for x, y, flux in stars:
            f.write("%.17g,%.17g,%.17g\n" % (x, y, flux))
    out = os.path.join(tmp, name + ".fits")
    side = 2 * math.ceil(7 * sigma) + 1
    side = min(side, max(nx, ny))
    cmd = [exe, "--backend", "cpu", "sim", "stars", "--catalog", cat, "--size",
           "%dx%d" % (nx, ny), "--sigma", repr(sigma), "--roi-side", str(side), "--psf",
           "integrated", "--noise", "none", "--bits", "32f", "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode, r.stderr))
    img = galsim.fits.read(out)
    assert img.bounds == galsim.BoundsI(1, nx, 1, ny), img.bounds
    return img.array.astype(np.float64)


def galsim_render(nx, ny, sigma, stars):
    total = np.zeros((ny, nx))
    for x, y, flux in stars:
        g = galsim.Gaussian(flux=flux, sigma=sigma, gsparams=GSPARAMS)
        img = g.drawImage(nx=nx, ny=ny, scale=1.0, method="auto",
                          offset=(x - (nx - 1) / 2.0, y - (ny - 1) / 2.0))
        total += img.array
    return total


def main():
    if len(sys.argv) != 2:
        print("usage: galsim_check.py PATH/TO/spotwave", file=sys.stderr)
        return 1
    exe = sys.argv[1]
    rng = np.random.default_rng(2026)
    cases = []
    # (nx, ny, sigma, stars): odd and even sizes, narrow and wide PSFs, positions anywhere in
    # the pixel, one star near a corner (clipped by the image in both codes).
    for nx, ny, sigma in [(41, 41, 0.8), (40, 33, 1.3), (64, 48, 2.5), (57, 72, 4.0)]:
        x = (nx - 1) / 2.0 + rng.uniform(-3, 3)
        y = (ny - 1) / 2.0 + rng.uniform(-3, 3)
        cases.append((nx, ny, sigma, [(x, y, 1.0e4 * rng.uniform(0.5, 2))]))
    cases.append((50, 40, 1.7, [(1.3, 0.4, 5000.0)]))
    field = [(rng.uniform(-2, 98), rng.uniform(-2, 78), rng.uniform(10, 1e5)) for _ in range(40)]
    cases.append((96, 76, 1.5, field))

    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for k, (nx, ny, sigma, stars) in enumerate(cases):
            a = spotwave_render(exe, tmp, "case%d" % k, nx, ny, sigma, stars)
            b = galsim_render(nx, ny, sigma, stars)
            peak = b.max()
            err = np.abs(a - b).max() / peak
            worst = max(worst, err)
            iy, ix = np.unravel_index(np.argmax(np.abs(a - b)), a.shape)
            print("case %d: %dx%d sigma %g, %d star(s): max |spotwave - galsim| = %.3g of the "
                  "peak (at x=%d, y=%d)" % (k, nx, ny, sigma, len(stars), err, ix, iy))
            if not err <= TOL:
                print("FAIL: case %d differs by %.3g of the peak (tolerance %g)" % (k, err, TOL))
                return 1
    print("ok: spotwave's integrated PSF agrees with GalSim %s within %.3g of the peak "
          "(tolerance %g)" % (galsim.__version__, worst, TOL))
    return 0


if __name__ == "__main__":
    sys.exit(main())
