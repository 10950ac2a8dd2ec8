"""Recording traces of a run on the emulated cards (driver_shim/include/cardsim/trace.h).

``CARDSIM_TRACE=<dir>`` records a whole process; ``record_trace(dir)`` records a part of
one::

    with torch.mlu.record_trace("traces/step"):   # or torch.supa.record_trace
        train_step()
    # then: cardsim info traces/step

Each process writes ``<dir>/rank<N>.cstrace`` (N = ``RANK``, else 0). Leaving the block
waits for the cards the trace used, as a synchronize does, and completes the file.

The functions live in the shim, which the extension links in; they are reached through
ctypes so that no torch-including code is needed for them.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import warnings

__all__ = ["record_trace", "start_trace", "stop_trace", "trace_path"]

_lib = None


def _shim():
    global _lib
    if _lib is None:
        from . import _C
        lib = ctypes.CDLL(_C.__file__)
        lib.cardsim_trace_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.cardsim_trace_start.restype = ctypes.c_int
        lib.cardsim_trace_start_compressed.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                                       ctypes.c_size_t]
        lib.cardsim_trace_start_compressed.restype = ctypes.c_int
        lib.cardsim_trace_stop.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.cardsim_trace_stop.restype = ctypes.c_int
        lib.cardsim_trace_active.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.cardsim_trace_active.restype = ctypes.c_int
        _lib = lib
    return _lib


def start_trace(directory, compress=None) -> str:
    """Starts recording into ``directory`` (created if missing); returns the rank file's path.
    ``compress`` as record_trace takes it."""
    from . import _C
    if compress is None:
        how = b""
    elif isinstance(compress, bool):
        how = b"gzip" if compress else b"none"
    elif isinstance(compress, str) and compress:
        how = compress.encode()
    else:
        raise ValueError(f"cardsim trace: compress={compress!r} is not a compression "
                         "(valid: None, True, False, 'none', 'gzip', 'gzip:1' .. 'gzip:9')")
    _C._device_count()      # the runtime starts with this personality's configuration
    err = ctypes.create_string_buffer(4096)
    if _shim().cardsim_trace_start_compressed(os.fsencode(os.fspath(directory)), how, err, len(err)) != 0:
        raise RuntimeError(f"cardsim trace: {err.value.decode(errors='replace')}")
    return trace_path()


def stop_trace() -> None:
    """Stops recording; the file is complete when this returns."""
    err = ctypes.create_string_buffer(4096)
    if _shim().cardsim_trace_stop(err, len(err)) != 0:
        raise RuntimeError(f"cardsim trace: {err.value.decode(errors='replace')}")


def trace_path() -> str | None:
    """The file being recorded, or None."""
    from . import _C
    _C._device_count()      # as start_trace: the runtime starts with this personality's configuration
    buf = ctypes.create_string_buffer(4096)
    return os.fsdecode(buf.value) if _shim().cardsim_trace_active(buf, len(buf)) else None


@contextlib.contextmanager
def record_trace(directory, compress=None):
    """Records what the block does on the cards into ``<directory>/rank<N>.cstrace``;
    yields the file's path. ``compress``: None follows ``CARDSIM_TRACE_COMPRESS``; "gzip",
    "gzip:1" .. "gzip:9" or True write a gzip stream; "none" or False a plain file.

    Inside a recording already running (``CARDSIM_TRACE``, or an enclosing block), the block
    is part of that one: it warns, yields that file's path and leaves it recording."""
    running = trace_path()
    if running is not None:
        warnings.warn(f"cardsim trace: {running} is already being recorded; the block "
                      f"{os.fspath(directory)!r} records into it", stacklevel=3)
        yield running
        return
    path = start_trace(directory, compress)
    try:
        yield path
    finally:
        stop_trace()
