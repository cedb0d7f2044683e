"""The default context: one per process, made on first use.

Every function and plan takes ``ctx=``; without it they use :func:`default_context`, a
``Context(backend)`` with the backend from the environment variable ``SPOTWAVE_BACKEND``
(``auto``, ``cpu`` or ``cuda``; default ``auto``: the GPU when one is usable). A child process
made by ``fork`` gets a context of its own (CUDA state does not survive a fork).
"""

import os
import threading

from . import _spotwave

_lock = threading.Lock()
_default = None
_default_pid = None


def default_context():
    """The process's default :class:`Context` (made on first use; see the module's text)."""
    global _default, _default_pid
    with _lock:
        if _default is None or _default_pid != os.getpid():
            backend = os.environ.get("SPOTWAVE_BACKEND", "auto")
            _default = _spotwave.Context(backend)
            _default_pid = os.getpid()
        return _default


def set_default_context(ctx):
    """Makes ``ctx`` (a :class:`Context`, or None to make a new one on next use) the default."""
    global _default, _default_pid
    if ctx is not None and not isinstance(ctx, _spotwave.Context):
        raise TypeError(f"ctx: expected a spotwave.Context, got {type(ctx).__name__}")
    with _lock:
        _default = ctx
        _default_pid = os.getpid() if ctx is not None else None


def resolve(ctx):
    """``ctx`` itself, or the default context when it is None."""
    if ctx is None:
        return default_context()
    if not isinstance(ctx, _spotwave.Context):
        raise TypeError(f"ctx: expected a spotwave.Context, got {type(ctx).__name__}")
    return ctx
