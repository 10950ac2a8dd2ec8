"""Keeps the CPU tensors handed to Gloo alive in Python until Gloo's worker thread let go.

A collective gives Gloo host views of device memory made for the call. Gloo's worker thread
drops its reference to the finished work a moment after the caller's wait() returns; if the
caller dropped the view first, that last drop happens on the worker and must take the GIL to
release the view's Python object. During interpreter finalization taking the GIL ends the
thread by forced unwinding, which C++ turns into std::terminate ("terminate called without
an active exception", exit status -6) for a run that succeeded. So every tensor passed to
Gloo is held here until its use count is back to what it was before the call (Gloo's
references gone), then released on a Python thread; at exit (before finalization) the holder
waits, with the GIL released, for the workers to let go of the rest.
"""
from __future__ import annotations

import collections
import threading
import time

import torch

_lock = threading.Lock()
_held: collections.deque = collections.deque()


def tensors(x):
    """The tensors in `x`, a tensor or nested lists and tuples of them, in order."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from tensors(y)


def _trim_locked() -> None:
    # (tensor, its use count before Gloo had it): released once back to that count.
    kept = [(t, base) for t, base in _held if t._use_count() > base]
    _held.clear()
    _held.extend(kept)


def before(args) -> list:
    """The tensors among `args` (nested lists and tuples) with their use counts, taken
    before the call that hands them to Gloo; give the result to hold() after it."""
    return [(t, t._use_count()) for t in tensors(args)]


def hold(counted: list) -> None:
    """Holds what before() listed until Gloo lets go of it."""
    with _lock:
        _trim_locked()
        _held.extend(counted)


def held() -> int:
    """How many tensors are held now (after releasing those Gloo let go of)."""
    with _lock:
        _trim_locked()
        return len(_held)


def drain(timeout_s: float) -> bool:
    """Waits up to timeout_s for Gloo to let go of every held tensor; True when it did."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _lock:
            _trim_locked()
            if not _held:
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.001)   # releases the GIL: a worker waiting for it can finish its drop


class HeldGloo:
    """A Gloo backend (or its timing-mode stand-in) whose calls hold their tensors."""

    def __init__(self, gloo):
        self._gloo = gloo

    def __getattr__(self, name):
        real = getattr(self._gloo, name)
        if not callable(real):
            return real

        def call(*args, **kwargs):
            counted = before((args, tuple(kwargs.values())))
            work = real(*args, **kwargs)
            hold(counted)
            return work
        return call
