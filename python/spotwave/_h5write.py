"""Eiger-like HDF5 out (io.h, ``sw_h5_write``): frames as detectors of the Eiger family write
them, for :func:`spotwave.read` and DIALS / dxtbx."""

import os

import numpy as np

from . import _arrays, _spotwave
from ._find import _mask


def write_h5(path, frames, *, frames_per_block=0, compression="auto", mask=None, overload=0.0,
             linked=False):
    """Writes a uint8, uint16 or uint32 NumPy frame (height, width) or stack (frames, height,
    width) as an Eiger-like NeXus (NXmx) file: /entry/data/data_000001, ... of frames_per_block
    frames each (0: all in one), chunked one frame per chunk, compressed ("auto": bitshuffle/LZ4
    when HDF5's filter plugin is there, else "deflate"; or "bslz4", "deflate", "none"). mask:
    (height, width) bool/uint8, non-zero = good pixel, written as the detector's pixel_mask;
    overload > 0: the count cut-off. linked: Eiger's layout of a master file with external links
    to "<stem>_data_000001.h5", ... beside it. Written to a temporary name and renamed when
    complete."""
    a = _arrays.host_array(frames, "frames")
    m = None if mask is None else np.ascontiguousarray(_mask(mask, "mask"))
    _spotwave.h5_write(os.fspath(path), a, int(frames_per_block), str(compression), m,
                       float(overload), bool(linked))
