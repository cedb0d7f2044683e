"""Arrays in and out: NumPy on the host, CuPy (or any DLPack / CUDA array interface object) on the
device, without copies.

Inputs. A NumPy array is handed to the binding as it is: any array whose rows are contiguous runs
of pixels at a constant positive row stride (views, crops, padded rows) is read in place through
``sw_image``'s explicit row stride; anything else is refused with a TypeError or ValueError naming
the argument (never a silent copy). Byte orders other than the machine's are refused (the library
reads native numbers). A device array (``__dlpack_device__`` saying CUDA, or
``__cuda_array_interface__``) is exported with ``__dlpack__(stream=ctx.stream)``, so that its
producer orders its pending work before the context's stream; it must live on the context's
device. Objects with only ``__cuda_array_interface__`` go through ``cupy.asarray`` (a view).

Outputs are allocated on the side of the inputs: NumPy arrays for host inputs, CuPy arrays on the
context's device for device inputs.

Streams. The library queues device work on the context's stream (``ctx.stream``). Around a run on
device arrays, :class:`DeviceRun` makes the context's stream wait for CuPy's current stream (so
that arrays CuPy wrote or allocated there are ready) and CuPy's current stream wait for the
context's stream (so that CuPy sees the results), with CUDA events: no host synchronisation.
Both are skipped when CuPy's current stream is the context's stream
(``with cupy.cuda.ExternalStream(ctx.stream): ...``), the fastest way to chain CuPy and spotwave.
"""

import numpy as np

from . import _spotwave

_KDL_CPU, _KDL_CUDA, _KDL_CUDA_HOST, _KDL_CUDA_MANAGED = 1, 2, 3, 13

_cupy_module = None


def cupy_module(required_for=None):
    """The cupy module, or None when it is not installed (TypeError when required_for names what
    needs it)."""
    global _cupy_module
    if _cupy_module is None:
        try:
            import cupy  # noqa: PLC0415

            _cupy_module = cupy
        except ImportError:
            _cupy_module = False
    if not _cupy_module and required_for:
        raise TypeError(f"{required_for} needs CuPy (pip install cupy-cuda12x or cupy-cuda13x)")
    return _cupy_module or None


def _dlpack_device(x):
    f = getattr(x, "__dlpack_device__", None)
    if f is None:
        return None
    try:
        dev = f()
        return int(dev[0]), int(dev[1])
    except Exception:  # noqa: BLE001 - a broken producer is reported as "not an array"
        return None


def is_device(x):
    """True when x is a CUDA device array (DLPack device CUDA / managed, or a CUDA array
    interface)."""
    if isinstance(x, np.ndarray):
        return False
    dev = _dlpack_device(x)
    if dev is not None:
        return dev[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED)
    return hasattr(x, "__cuda_array_interface__")


def check_byte_order(x, name):
    if x.dtype.byteorder not in ("=", "|"):  # NumPy writes the native order as "="
        native = x.dtype.newbyteorder("=")
        raise ValueError(
            f"{name}: {x.dtype.str} is not in the machine's byte order; convert with "
            f"{name}.astype('{native.str}')"
        )


def host_array(x, name):
    """x as a NumPy array without copying (NumPy arrays, host DLPack arrays, buffer-protocol
    objects), or a TypeError naming the argument."""
    if isinstance(x, np.ndarray):
        check_byte_order(x, name)
        return x
    dev = _dlpack_device(x)
    if dev is not None and dev[0] == _KDL_CPU:
        a = np.from_dlpack(x)
        return a
    if dev is None and not isinstance(x, (list, tuple, int, float, str, bytes)) and hasattr(
        x, "__array_interface__"
    ):
        a = np.asarray(x)
        check_byte_order(a, name)
        return a
    raise TypeError(
        f"{name}: expected a NumPy array or a device array (__dlpack__ / "
        f"__cuda_array_interface__), got {type(x).__name__}"
    )


def as_input(x, name, ctx):
    """What to hand the binding for input array x: a NumPy array (host) or a DLPack capsule
    exported for the context's stream (device). Returns (obj, on_device)."""
    if isinstance(x, np.ndarray):
        check_byte_order(x, name)
        return x, False
    dev = _dlpack_device(x)
    if dev is None and hasattr(x, "__cuda_array_interface__"):
        cp = cupy_module(f"{name}: an array with only __cuda_array_interface__")
        x = cp.asarray(x)  # a view: CuPy honours the interface's stream
        dev = _dlpack_device(x)
    if dev is not None and dev[0] in (_KDL_CUDA, _KDL_CUDA_MANAGED):
        require_cuda(ctx, name)
        if dev[1] != ctx.device:
            raise ValueError(f"{name}: the array is on CUDA device {dev[1]}, the context on "
                             f"device {ctx.device}")
        return x.__dlpack__(stream=ctx.stream), True
    return host_array(x, name), False


def as_output(x, name, ctx):
    """What to hand the binding for an output array x the library writes: a writable NumPy array,
    or a DLPack capsule of a device array exported for the context's stream. Returns
    (obj, on_device)."""
    if isinstance(x, np.ndarray):
        check_byte_order(x, name)
        if not x.flags.writeable:
            raise ValueError(f"{name}: the array is read-only")
        return x, False
    return as_input(x, name, ctx)


def require_cuda(ctx, name):
    if ctx.backend != "cuda":
        raise TypeError(
            f"{name}: a device array needs a CUDA context (this one runs on the CPU: {ctx.reason})"
        )


def shape_dtype(x, name):
    """(shape, numpy dtype) of an array-like without converting it."""
    try:
        return tuple(int(n) for n in x.shape), np.dtype(x.dtype)
    except (AttributeError, TypeError):
        raise TypeError(
            f"{name}: expected a NumPy array or a device array (__dlpack__ / "
            f"__cuda_array_interface__), got {type(x).__name__}"
        ) from None


def empty(shape, dtype, device, ctx):
    """An uninitialised output array: NumPy on the host, CuPy on the context's device."""
    if not device:
        return np.empty(shape, dtype)
    cp = cupy_module("a device output")
    with cp.cuda.Device(ctx.device):
        return cp.empty(shape, dtype)


def _external_stream(ctx):
    cp = cupy_module("a device run")
    s = getattr(ctx, "_cupy_stream", None)
    if s is None:
        with cp.cuda.Device(ctx.device):  # ExternalStream takes the current device
            s = cp.cuda.ExternalStream(ctx.stream)
        ctx._cupy_stream = s
    return s


class DeviceRun:
    """Orders a run on the context's stream between CuPy's current stream's work before and
    after it (see the module's text). A no-op for host runs (device=False)."""

    __slots__ = ("ctx", "device", "_cur")

    def __init__(self, ctx, device):
        self.ctx = ctx
        self.device = device
        self._cur = None

    def __enter__(self):
        if not self.device:
            return self
        cp = cupy_module()
        if cp is None:  # a device array from another library, outputs given by the caller
            return self
        cur = cp.cuda.get_current_stream()
        if cur.ptr == self.ctx.stream:
            return self
        self._cur = cur
        ev = cp.cuda.Event(block=False, disable_timing=True)
        ev.record(cur)
        _external_stream(self.ctx).wait_event(ev)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self.device and cupy_module() is None:
            # No CuPy to order the producer's stream after ours: wait for the run on the host.
            self.ctx.synchronize()
        elif self._cur is not None:
            cp = cupy_module()
            ev = cp.cuda.Event(block=False, disable_timing=True)
            ev.record(_external_stream(self.ctx))
            self._cur.wait_event(ev)
        return False
