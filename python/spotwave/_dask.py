"""Datasets over Dask: :func:`find_dask` and :func:`pupil_dask` deal the frames of a Dask array
to Dask's workers (threads, processes or a cluster, whichever scheduler is in use) and merge the
tables in frame order, the same rows as one :func:`spotwave.find` / :func:`spotwave.pupil` call
over the whole stack (as ``mpirun -np N spotwave find`` is the same as one process).

Each block of frames (the array's chunks along the first axis) is one task: the block is read
(whatever the array's source does: HDF5 through h5py, Zarr, NumPy), run through the library by a
context of the worker thread's own (made once per thread and backend: spotwave's contexts are not
shared between threads), and its table comes back to be concatenated. Dask is optional: it is
imported when these are called.
"""

import os
import threading

import numpy as np

from . import _spotwave
from ._find import ccd_keywords, find
from ._pupil import pupil

_local = threading.local()


def _context(backend, device, threads):
    """The calling thread's context for these settings (made on first use)."""
    cache = getattr(_local, "contexts", None)
    if cache is None or getattr(_local, "pid", None) != os.getpid():
        cache = _local.contexts = {}  # a forked worker makes its own
        _local.pid = os.getpid()
    key = (backend, device, threads)
    if key not in cache:
        cache[key] = _spotwave.Context(backend, device=device, threads=threads)
    return cache[key]


def _find_block(block, first_frame, backend, device, threads, kw):
    ctx = _context(backend, device, threads)
    return find(np.ascontiguousarray(block), first_frame=first_frame, ctx=ctx, **kw)


def _pupil_block(block, first_frame, backend, device, threads, kw):
    ctx = _context(backend, device, threads)
    rows = pupil(np.ascontiguousarray(block), ctx=ctx, **kw)
    rows["frame"] += first_frame
    return rows


def _concat(parts):
    return np.concatenate(parts)


def _blocks(what, frames, run, first_frame, backend, device, threads, scheduler, compute, kw):
    try:
        import dask
        import dask.array as da
    except ImportError as e:
        raise ImportError(f"{what} needs Dask (pip install 'dask[array]')") from e
    if not isinstance(frames, da.Array):
        raise TypeError(f"frames: expected a dask.array.Array (frames, height, width), got "
                        f"{type(frames).__name__} (for a NumPy stack call spotwave."
                        f"{what.replace('_dask', '')} itself)")
    if frames.ndim != 3:
        raise ValueError(f"frames: expected a 3-D array (frames, height, width), got shape "
                         f"{frames.shape}")
    if frames.shape[0] == 0:
        raise ValueError("frames: no frames")
    for k in ("ctx", "strong", "progress", "three_d"):
        if k in kw:
            raise TypeError(f"{what}: {k} is not taken over Dask (each worker thread has its "
                            f"own context; join spots across frames with spotwave.find(three_d="
                            f"True) in one process)")
    if backend is None:
        backend = os.environ.get("SPOTWAVE_BACKEND", "auto")
    frames = frames.rechunk({1: -1, 2: -1})  # whole frames in each block
    starts = np.concatenate([[0], np.cumsum(frames.chunks[0])[:-1]]) + first_frame
    parts = [dask.delayed(run)(b, int(s), backend, device, threads, kw)
             for b, s in zip(frames.to_delayed().ravel(), starts)]
    merged = dask.delayed(_concat)(parts)
    return merged.compute(scheduler=scheduler) if compute else merged


def find_dask(frames, *, first_frame=0, backend=None, device=0, threads=0, scheduler=None,
              compute=True, **kw):
    """:func:`spotwave.find` over a Dask array of frames (frames, height, width), one task per
    block of frames (its chunks along the first axis; the other axes are made whole). The
    merged table is the one ``spotwave.find`` returns for the whole stack: the same rows in
    frame order, frame numbered from first_frame.

    backend ("auto", "cpu", "cuda"; default $SPOTWAVE_BACKEND or auto), device and threads make
    each worker thread's context. scheduler: passed to Dask's compute (None: Dask's default or
    the active distributed Client). compute=False returns the Dask delayed object instead.
    Keywords: those of :func:`spotwave.find`, except ctx, strong, progress and three_d; with
    ccd=True the detector's numbers come from the first frame, once, as in one call.
    """
    if "ctx" in kw:
        raise TypeError("find_dask: ctx is not taken over Dask (each worker thread has its own "
                        "context: give backend, device, threads)")
    if kw.pop("ccd", False):
        first = np.ascontiguousarray(np.asarray(frames[0]))
        gain, sb, ss = ccd_keywords(first, kw.get("gain"), kw.get("sigma_b"), kw.get("sigma_s"),
                                    kw.get("mask"), kw)
        kw.update(gain=gain, sigma_b=sb, sigma_s=ss)
    return _blocks("find_dask", frames, _find_block, first_frame, backend, device, threads,
                   scheduler, compute, kw)


def pupil_dask(frames, *, first_frame=0, backend=None, device=0, threads=0, scheduler=None,
               compute=True, **kw):
    """:func:`spotwave.pupil` over a Dask array of frames (frames, height, width), as
    :func:`find_dask`: the rows of one call over the whole stack, frame numbered from
    first_frame. Keywords: those of :func:`spotwave.pupil` except ctx and lenslet_mask."""
    if "lenslet_mask" in kw:
        raise TypeError("pupil_dask: lenslet_mask is not taken over Dask")
    return _blocks("pupil_dask", frames, _pupil_block, first_frame, backend, device, threads,
                   scheduler, compute, kw)
