"""Spot finding over an Eiger HDF5 file (crystallography): every frame through the DIALS
dispersion spot finder (Winter et al. 2018, Acta Cryst. D74, 85; Kabsch 2010, Acta Cryst. D66,
125), with the detector's pixel mask and count cut-off from the file, a progress bar, and the
spot list written as the CSV of `spotwave find` (frame, x_px, y_px, ..., 0-based pixel centres).

    python3 eiger_find.py RUN_master.h5 [spots.csv]
"""
import sys

import numpy as np

import spotwave

path = sys.argv[1]
out = sys.argv[2] if len(sys.argv) > 2 else "spots.csv"
info = spotwave.h5_info(path)          # frames, size, pixel mask, overload
frames = spotwave.read(path)            # (frames, height, width), unsigned, as stored
frames = frames[None] if frames.ndim == 2 else frames


def bar(done, total):                   # called after each frame
    n = 40 * done // total
    print(f"\r[{'#' * n}{'.' * (40 - n)}] {done}/{total} frames", end="", file=sys.stderr,
          flush=True)


spots = spotwave.find(frames, mask=info["pixel_mask"], overload=info["overload"] or None,
                      progress=bar)
print(file=sys.stderr)
fmt = ["%d" if spots.dtype[k].kind in "iu" else "%.6f" for k in spots.dtype.names]
np.savetxt(out, spots, fmt=fmt, delimiter=",", header=",".join(spots.dtype.names), comments="")
per_frame = np.bincount(spots["frame"], minlength=info["frames"])
print(f"{len(spots)} spots on {info['frames']} frames of {info['width']}x{info['height']} "
      f"(per frame {per_frame.min()}..{per_frame.max()}); wrote {out}")
