"""spotwave: images of point sources on NVIDIA GPUs and CPUs — spot finding, Shack-Hartmann
centroids, Zernike wavefronts and simulators — as a thin layer over the spotwave C library.

Conventions (every function follows them):

- Pixels are 0-based, (x, y) = (column, row), and the centre of pixel (0, 0) is at (0.0, 0.0):
  pixel x spans [x - 0.5, x + 0.5).
- Images are NumPy arrays (height, width), or stacks (frames, height, width), of uint8, uint16,
  uint32 or float32 pixels; any view whose rows are contiguous is read in place. Device arrays
  (CuPy, or any ``__dlpack__`` / ``__cuda_array_interface__`` array on the context's GPU) are read
  in place on the GPU and give device arrays out; nothing goes through the host unless a function
  says so. Arrays are never modified; calls release the GIL.
- Tables are NumPy structured arrays whose fields are the ``spotwave`` command's CSV columns.
- Zernike polynomials use the OSA/ANSI Z80.28 single index j = (n (n + 2) + m) / 2 from 0
  (Thibos, Applegate, Schwiegerling & Webb 2002, J. Refract. Surg. 18, S652-S660), orthonormal
  over the unit disc, coefficients in micrometres with the OSA sign: a positive wavefront leads,
  so a myopic eye has c(2, 0) > 0. Noll indices (Noll 1976, J. Opt. Soc. Am. 66(3), 207-211)
  are converted by :mod:`spotwave.zernike`.
- Failures in the library raise :class:`spotwave.Error` subclasses (InvalidArgumentError is a
  ValueError, FileError an OSError, ...) carrying the library's message; bad array arguments
  raise TypeError or ValueError naming the argument.

Every function takes ``ctx=`` (a :class:`Context`); without it the process's default context is
used (:func:`default_context`: backend from SPOTWAVE_BACKEND, default "auto").
"""

from . import _spotwave
from ._centroid import STATUS as CENTROID_STATUS
from ._centroid import CentroidPlan, CentroidResult, centroid, find_geometry
from ._context import default_context, set_default_context
from ._find import FindPlan, ccd_estimate, find
from ._io import h5_info, read, write_fits, write_pgm
from ._pupil import PupilPlan, pupil
from ._spotwave import (
    Context,
    CudaError,
    Error,
    FileError,
    FormatError,
    InternalError,
    InvalidArgumentError,
    NoDeviceError,
    OutOfMemoryError,
    RangeError,
    StoppedError,
    TimeoutError,
    UnsupportedError,
    build_info,
    built_with_cuda,
    cuda_device_count,
    data_dir,
)
from . import sim, zernike  # noqa: E402  (submodules that use the names above)
from . import sabre  # noqa: E402
from . import loop  # noqa: E402
from . import aberrometry  # noqa: E402
from . import stream  # noqa: E402
from .stream import Stream  # noqa: E402
from ._h5write import write_h5  # noqa: E402,F401
from ._dask import find_dask, pupil_dask  # noqa: E402,F401

__version__ = _spotwave.__version__

__all__ = [
    "CENTROID_STATUS", "CentroidPlan", "CentroidResult", "Context", "CudaError", "Error",
    "FileError", "FindPlan",
    "FormatError", "InternalError", "InvalidArgumentError", "NoDeviceError", "OutOfMemoryError",
    "PupilPlan", "pupil",
    "RangeError", "StoppedError", "Stream", "TimeoutError", "UnsupportedError", "build_info",
    "built_with_cuda", "ccd_estimate", "centroid",
    "cuda_device_count", "data_dir", "default_context", "find", "find_dask", "find_geometry",
    "h5_info", "pupil_dask", "read",
    "set_default_context", "sim", "stream", "write_fits", "write_pgm", "zernike",
]
