"""Shared-memory image streams in the layout of milk/CACAO's ImageStreamIO (version "2.00").

A stream is the file ``<dir>/<name>.im.shm`` that cameras, real-time computers and deformable
mirrors on an adaptive-optics bench map together; a writer posts a semaphore per reader when a
frame lands. milk's tools and ImageStreamIO's own Python module open the streams written here,
and these open theirs. Streams live in ``$MILK_SHM_DIR`` when it names a directory, else
``/milk/shm`` when it exists, else ``/tmp`` (ImageStreamIO's order); ``dir=`` overrides that.

>>> s = Stream.create("camera", (480, 640), "uint16")   # (height, width), NumPy order
>>> s.write(frame)                     # cnt0 + 1, every reader woken
>>> r = Stream.open("camera")
>>> c = r.wait(after=0, timeout=1.0)   # sleeps on a semaphore of its own
>>> img = r.read()                     # a consistent copy of the newest frame
>>> r.array                            # the shared memory itself (a NumPy view)

Shapes are NumPy's: (width,), (height, width) or (depth, height, width); a circular buffer
(``circular=True``, 3 axes) takes one (height, width) slice per write and ``cnt1`` is the slice
written last. Times are seconds on ImageStreamIO's clock (CLOCK_TAI).
"""

from __future__ import annotations

import numpy as np

from . import _spotwave

__all__ = ["Stream", "stream_dir", "remove"]

_DTYPES = {
    1: np.uint8, 2: np.int8, 3: np.uint16, 4: np.int16, 5: np.uint32, 6: np.int32,
    7: np.uint64, 8: np.int64, 9: np.float32, 10: np.float64, 11: np.complex64,
    12: np.complex128, 13: np.float16,
}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}
_MODES = {"sem": 0, "semaphore": 0, "spin": 1}


def stream_dir(dir: str | None = None) -> str:
    """The directory streams go to (``dir`` itself when given)."""
    return _spotwave.stream_dir(dir)


def remove(name: str, dir: str | None = None) -> None:
    """Removes the stream's file (processes that have it open keep their mapping)."""
    _spotwave.stream_remove(name, dir)


class Stream:
    """An open stream. Use :meth:`create` or :meth:`open`; a context manager closes it."""

    def __init__(self, handle):
        self._h = handle
        info = handle.info()
        self._dtype = np.dtype(_DTYPES[info["type_code"]])
        self._shape = tuple(reversed(info["size"]))
        self._circular = bool(info["circular"])
        self._frame_shape = self._shape[1:] if self._circular else self._shape
        self._sem = -1

    # ---------------------------------------------------------------- create, open, close
    @classmethod
    def create(cls, name: str, shape, dtype="float32", *, dir: str | None = None,
               semaphores: int = 0, keywords: int = 16, circular: bool = False) -> "Stream":
        """Creates (or replaces) a stream of ``shape`` (NumPy order, 1 to 3 axes) and ``dtype``
        (any of ImageStreamIO's: u/int8..64, float16/32/64, complex64/128). ``semaphores=0``
        gives ImageStreamIO's ten. A process that had the old stream open keeps its mapping of
        the old file (see :meth:`stale`)."""
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(int(n) for n in shape)
        try:
            code = _CODES[np.dtype(dtype)]
        except (KeyError, TypeError):
            raise TypeError(f"dtype {dtype!r} is not one of ImageStreamIO's types") from None
        size = list(reversed(shape))
        return cls(_spotwave._Stream.create(name, size, code, semaphores, keywords, circular, dir))

    @classmethod
    def open(cls, name: str, *, dir: str | None = None) -> "Stream":
        """Opens an existing stream (its header is checked; a bad one raises FormatError)."""
        return cls(_spotwave._Stream.open(name, dir))

    def close(self) -> None:
        """Releases this reader's semaphore and unmaps (views of :attr:`array` keep the mapping
        alive until they go). Does not remove the file."""
        if self._h is not None and not self._h.closed:
            if self._sem >= 0:
                self._h.release_semaphore(self._sem)
                self._sem = -1
            self._h.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    # ---------------------------------------------------------------- properties
    @property
    def path(self) -> str:
        return self._h.path

    @property
    def shape(self) -> tuple:
        """The whole array's shape (NumPy order)."""
        return self._shape

    @property
    def frame_shape(self) -> tuple:
        """What one write carries: the whole array, or one slice of a circular buffer."""
        return self._frame_shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def circular(self) -> bool:
        return self._circular

    @property
    def cnt0(self) -> int:
        """Frames written so far (an atomic load)."""
        return self._h.cnt0

    @property
    def cnt1(self) -> int:
        """Circular buffer: the slice written last."""
        return self._h.cnt1

    @property
    def array(self) -> np.ndarray:
        """The shared memory as a NumPy array (a view: it changes as writers write; copy it with
        :meth:`read` for a consistent frame)."""
        return self._h.array()

    def info(self) -> dict:
        """The header: size, type, counters, write flag, times, PIDs, byte sizes."""
        return self._h.info()

    def stale(self) -> bool:
        """True when the file has been removed or re-created since this stream was opened."""
        return self._h.stale()

    # ---------------------------------------------------------------- writer
    def write(self, frame) -> None:
        """Writes one frame (shape :attr:`frame_shape`; converted to the stream's dtype when it
        can be without loss of kind) and wakes every reader."""
        a = np.ascontiguousarray(frame)
        if a.shape != self._frame_shape:
            raise ValueError(f"frame of shape {a.shape}: the stream takes {self._frame_shape}")
        if a.dtype != self._dtype:
            if not np.can_cast(a.dtype, self._dtype, casting="same_kind"):
                raise TypeError(f"frame of dtype {a.dtype}: the stream holds {self._dtype}")
            a = a.astype(self._dtype)
        self._h.write(a)

    # ---------------------------------------------------------------- readers
    def read(self, out: np.ndarray | None = None) -> np.ndarray:
        """A consistent copy of the newest frame (circular buffer: of slice cnt1); into ``out``
        when given (C-contiguous, the frame's shape and dtype)."""
        if out is None:
            out = np.empty(self._frame_shape, self._dtype)
        elif out.shape != self._frame_shape or out.dtype != self._dtype:
            raise ValueError(f"out must be {self._frame_shape} {self._dtype}")
        self._h.read(out)
        return out

    def read_counted(self):
        """(frame, cnt0 of that frame)."""
        out = np.empty(self._frame_shape, self._dtype)
        c = self._h.read(out)
        return out, c

    def wait(self, after: int | None = None, timeout: float | None = None,
             mode: str = "sem") -> int:
        """Waits until cnt0 > ``after`` (default: the current cnt0, i.e. the next frame) and
        returns cnt0. ``mode`` "sem" sleeps on a semaphore this reader claims on its first wait
        (drained then), "spin" polls. ``timeout`` in seconds (None: no limit) raises
        spotwave.TimeoutError (a TimeoutError) when it runs out; Ctrl-C interrupts the wait."""
        m = _MODES.get(mode)
        if m is None:
            raise ValueError(f"mode {mode!r} is not 'sem' or 'spin'")
        if after is None:
            after = self._h.cnt0
        if m == 0 and self._sem < 0:
            self._sem = self._h.claim_semaphore()
            self._h.flush_semaphore(self._sem)
        return self._h.wait(m, max(self._sem, 0), int(after), -1.0 if timeout is None else float(timeout))

    @property
    def semaphore(self) -> int:
        """The semaphore this reader waits on (-1 before its first semaphore wait)."""
        return self._sem

    # ---------------------------------------------------------------- keywords
    def set_keyword(self, name: str, value, comment: str = "") -> None:
        """Sets a keyword: int -> 'L', float -> 'D', str -> 'S' (at most 15 characters)."""
        if isinstance(value, (bool, int, np.integer)):
            self._h.set_keyword_int(name, int(value), comment)
        elif isinstance(value, (float, np.floating)):
            self._h.set_keyword_double(name, float(value), comment)
        elif isinstance(value, str):
            self._h.set_keyword_string(name, value, comment)
        else:
            raise TypeError(f"keyword {name}: {type(value).__name__} is not int, float or str")

    @property
    def keywords(self) -> dict:
        """{name: value} of the keywords in use."""
        return {n: v for n, v, _ in self._h.keywords()}

    def keyword_comments(self) -> dict:
        """{name: comment}."""
        return {n: c for n, _, c in self._h.keywords()}

    def __repr__(self):
        state = "closed" if self._h.closed else f"cnt0={self.cnt0}"
        return f"<spotwave.Stream {self.path} {self._shape} {self._dtype} {state}>"
