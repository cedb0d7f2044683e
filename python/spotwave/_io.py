"""Files: FITS, PGM and Eiger/NeXus HDF5 frames in (as the ``spotwave`` command reads them),
FITS and PGM out (io.h)."""

import os

from . import _arrays, _spotwave


def read(path, dataset=None):
    """Reads the frames of an image file into a NumPy array: 2-D (height, width) for one frame,
    3-D (frames, height, width) for several.

    Formats (recognised by their first bytes, as ``spotwave find`` and ``spotwave centroid``
    do): FITS (cfitsio; the first image HDU with data; 8/16/32-bit integers with the unsigned
    BZERO convention as uint8/uint16/uint32, other integer and float data as float32, BLANK as
    NaN; a cube's planes are frames), binary PGM (P5, 8 or 16 bits), and HDF5 as Eiger detectors
    write it (a NeXus master with /entry/data/data_000001..., external links followed, or a data
    file with /entry/data/data; bitshuffle/LZ4 through the HDF5 filter plugins). ``dataset``
    names another HDF5 dataset ([frames,] height, width of unsigned integers). Pixels are as
    stored: FITS pixel (1, 1) and element [0][0] are pixel (0, 0) (0-based, the centre of pixel
    (0, 0) at (0.0, 0.0)). The detector's pixel mask and overload of an HDF5 file: see
    :func:`h5_info`.

    Failures raise spotwave.FileError (cannot open or read), FormatError (not the format,
    truncated, corrupt), UnsupportedError (e.g. a compression filter HDF5 cannot load), with the
    library's message naming the file.
    """
    return _spotwave.read(os.fspath(path), dataset)


def h5_info(path, dataset=None):
    """What an Eiger/NeXus HDF5 file holds: frames, width, height, pixel_type, blocks,
    compressed, overload (the count cut-off or saturation value; 0 when none) and pixel_mask
    (uint8 (height, width), 1 = good pixel, or None), for :func:`spotwave.find`'s ``mask`` and
    ``overload``."""
    return _spotwave.h5_info(os.fspath(path), dataset)


def write_fits(path, image):
    """Writes a NumPy image (height, width), or a stack (frames, height, width) as a cube, to a
    FITS file: uint8 -> BITPIX 8, uint16 / uint32 with the unsigned BZERO convention, float32 ->
    BITPIX -32. Written to a temporary name and renamed when complete."""
    _spotwave.write(os.fspath(path), _arrays.host_array(image, "image"), "fits")


def write_pgm(path, image):
    """Writes a uint8 or uint16 NumPy image (height, width) to a binary PGM file (P5)."""
    _spotwave.write(os.fspath(path), _arrays.host_array(image, "image"), "pgm")
