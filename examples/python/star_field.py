"""A star field simulated and found (astronomy): stars of magnitude 2..9 with a Gaussian PSF on
a noisy detector (after Li, Zhang, Zheng & Hu, ~2013, IEEE, large-scale star image simulation),
the spots found by the DIALS dispersion finder (Winter et al. 2018, Acta Cryst. D74, 85), and
every true star matched to its nearest spot: completeness and centroid error by magnitude. The
spot list is a NumPy structured array: astropy.table.Table(spots) and pandas read it as it is.

    python3 star_field.py [STARS] [SIZE]
"""
import sys

import numpy as np

import spotwave

n = int(sys.argv[1]) if len(sys.argv) > 1 else 400
size = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
img, truth = spotwave.sim.stars(random=n, size=(size, size), sigma=1.3, mag_range=(2, 9),
                                sky_e=20, read_noise_e=4, seed=11)      # uint16 ADU, truth table
spots = spotwave.find(img)                                               # x_px, y_px, intensity...
print(f"{len(spots)} spots found for {len(truth)} stars on a {size}x{size} frame "
      f"({spotwave.default_context().backend})")
dx = spots["x_px"][None, :] - truth["x_px"][:, None]
dy = spots["y_px"][None, :] - truth["y_px"][:, None]
dist = np.sqrt(dx ** 2 + dy ** 2).min(axis=1)          # each star to its nearest spot, pixels
found = dist < 1.0
for lo in range(2, 9, 2):
    sel = (truth["mag"] >= lo) & (truth["mag"] < lo + 2)
    if sel.any():
        err = np.median(dist[sel & found]) if (sel & found).any() else float("nan")
        print(f"mag {lo}..{lo + 2}: {sel.sum():4d} stars, {found[sel].mean():6.1%} found, "
              f"median centroid error {err:.3f} px")
try:
    from astropy.table import Table
    print(Table(spots[["x_px", "y_px", "intensity", "npix"]][:5]))
except ImportError:
    print(spots[["x_px", "y_px", "intensity", "npix"]][:5])
