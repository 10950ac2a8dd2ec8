"""Host time across PyTorch's autograd hand-off.

For a device other than the CPU, PyTorch runs backward on the autograd engine's own
thread while the calling thread blocks. Each host thread has a virtual clock, so without
this the launches of backward would cost the caller nothing and the engine's thread would
start from wherever it stopped last time. Around every backward (``Tensor.backward``,
``torch.autograd.backward`` and ``torch.autograd.grad`` all come through
``_engine_run_backward``), the threads share one clock that starts at the caller's time; the
caller continues from where backward ended. Nested backward calls (checkpointing) join the
outer one.
"""
from __future__ import annotations

import functools

import torch.autograd
import torch.autograd.graph

_installed = False


def install(_C) -> None:
    global _installed
    if _installed:
        return
    original = torch.autograd.graph._engine_run_backward

    @functools.wraps(original)
    def _engine_run_backward(*args, **kwargs):
        if not _C._is_initialized():
            return original(*args, **kwargs)
        _C._host_clock_share_begin()
        try:
            return original(*args, **kwargs)
        finally:
            _C._host_clock_share_end()

    torch.autograd.graph._engine_run_backward = _engine_run_backward
    torch.autograd._engine_run_backward = _engine_run_backward
    _installed = True
