"""Host time across PyTorch's autograd hand-off, and a clean exit after backward.

For a device other than the CPU, PyTorch runs backward on the autograd engine's own
thread while the calling thread blocks. Each host thread has a virtual clock, so without
this the launches of backward would cost the caller nothing and the engine's thread would
start from wherever it stopped last time. Around every backward (``Tensor.backward``,
``torch.autograd.backward`` and ``torch.autograd.grad`` all come through
``_engine_run_backward``), the threads share one clock that starts at the caller's time; the
caller continues from where backward ended. Nested backward calls (checkpointing) join the
outer one.

Python threads: a thread that joins another (``Thread.join``) continues no earlier than
the joined thread's clock when it finished, if that thread used the card.

Exit: the engine's device thread drops its last reference to a finished backward a moment
after the caller has been woken, and that reference holds Python objects (the thread-local
state torch stashes for the backward). If the program ends in that moment, the thread
needs the GIL while the interpreter finalizes and the process aborts ("terminate called
without an active exception"). At exit, one empty backward per device that ran one makes
each device thread finish that release first; it stashes nothing itself.
"""
from __future__ import annotations

import atexit
import functools
import threading

import torch
import torch.autograd
import torch.autograd.graph

_installed = False
_devices: set[int] = set()


def _note_devices(outputs, device_type: str) -> None:
    for t in outputs if isinstance(outputs, (tuple, list)) else (outputs,):
        dev = getattr(t, "device", None)
        if dev is not None and dev.type == device_type and dev.index is not None:
            _devices.add(dev.index)


def _quiesce(device_type: str) -> None:
    """Runs one empty backward on each device's engine thread (see the module doc)."""
    from torch.autograd.variable import Variable
    for index in sorted(_devices):
        try:
            x = torch.ones((), device=torch.device(device_type, index), requires_grad=True)
            y = x * 1
            Variable._execution_engine.run_backward((y,), (torch.ones_like(y),), False, False, (), True, True)
        except Exception:  # the runtime may already be unusable at exit: nothing to wait for
            pass


def install(_C, device_type: str) -> None:
    global _installed
    if _installed:
        return
    original = torch.autograd.graph._engine_run_backward

    @functools.wraps(original)
    def _engine_run_backward(t_outputs, *args, **kwargs):
        if not _C._is_initialized():
            return original(t_outputs, *args, **kwargs)
        _note_devices(t_outputs, device_type)
        _C._host_clock_share_begin()
        try:
            return original(t_outputs, *args, **kwargs)
        finally:
            _C._host_clock_share_end()

    torch.autograd.graph._engine_run_backward = _engine_run_backward
    torch.autograd._engine_run_backward = _engine_run_backward
    _install_thread_joins(_C)
    atexit.register(_quiesce, device_type)
    _installed = True


def _install_thread_joins(_C) -> None:
    """Thread.join carries the joined thread's host clock into the joiner. The clock is read
    when the thread's body has returned, before join() can return (CPython releases the
    joiner only after _bootstrap_inner has returned)."""
    bootstrap = threading.Thread._bootstrap_inner
    join = threading.Thread.join

    @functools.wraps(bootstrap)
    def _bootstrap_inner(self):
        try:
            bootstrap(self)
        finally:
            try:
                self._cardsim_clock_ps = _C._host_thread_clock_ps() if _C._is_initialized() else None
            except Exception:
                self._cardsim_clock_ps = None

    @functools.wraps(join)
    def _join(self, timeout=None):
        join(self, timeout)
        ps = getattr(self, "_cardsim_clock_ps", None)
        if ps is not None and not self.is_alive() and threading.current_thread() is not self:
            _C._host_clock_join(ps)

    threading.Thread._bootstrap_inner = _bootstrap_inner
    threading.Thread.join = _join
