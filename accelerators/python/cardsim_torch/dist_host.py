"""The process group's host side (distributed.py): device tensors as CPU tensors Gloo can
use, and timing mode's stand-in for Gloo."""
from __future__ import annotations

from . import checker as _checker
from . import gloo_hold as _gloo_hold
from .dist_work import DoneWork as _DoneWork

# Timing mode: which argument of each Gloo call holds the bytes every rank contributes alike
# (so that all ranks make the same choice below); None: no bytes. Calls not listed (all to
# all, whose ranks may send different amounts) never move bytes in timing mode.
_SYMMETRIC_ARG = {"allreduce": 0, "broadcast": 0, "reduce": 0, "allgather": 1, "_allgather_base": 1,
                  "gather": 1, "scatter": 0, "reduce_scatter": 1, "send": 0, "recv": 0, "recv_anysource": 0,
                  "barrier": None}


class TimingGloo:
    """Timing mode: a collective of at most the shim's carried bytes per rank (1 MiB) moves
    its bytes through Gloo, so that what ranks exchange about their own bookkeeping (lengths,
    ids, flags: values copied from the host, which the card carries) arrives, and its results
    are noted as carried data; a larger one moves nothing (its outputs keep what they held:
    zeros, like everything the card computes, unless carried host data was written there)."""

    CARRIED_BYTES = 1 << 20

    def __init__(self, gloo):
        self._gloo = gloo
        self._note = None
        # The next call moves its bytes whatever its kind and size (the caller decided: an
        # all_to_all its members agreed to carry).
        self.carry_next = False

    def _noter(self):
        if self._note is None:
            import ctypes
            from . import _C
            f = ctypes.CDLL(_C.__file__).cardsim_timing_note_host_write
            f.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            f.restype = ctypes.c_int
            self._note = f
        return self._note

    def __getattr__(self, name):
        real = getattr(self._gloo, name)
        arg = _SYMMETRIC_ARG.get(name, -1)

        def call(*args, **kwargs):
            carry, self.carry_next = self.carry_next, False
            if arg == -1 and not carry:
                return _DoneWork(None)
            nbytes = 0 if arg in (None, -1) else sum(t.numel() * t.element_size() for t in _gloo_hold.tensors(args[arg]))
            if nbytes > self.CARRIED_BYTES and not carry:
                return _DoneWork(None)
            work = real(*args, **kwargs)
            note = self._noter()
            for t in _gloo_hold.tensors(args):
                if t.numel():
                    note(t.data_ptr(), t.numel() * t.element_size())
            return work
        return call


class Host:
    """Maps device tensors to CPU tensors Gloo can use, and writes results back."""

    def __init__(self, device_type: str, alias, what: str = "a collective"):
        self.device_type, self.alias, self.what = device_type, alias, what
        self.writebacks: list[tuple[torch.Tensor, torch.Tensor]] = []
        # Packed copies of non-contiguous inputs: held until finish(), or the allocator would
        # hand one's memory to the next (every host view of a list then aliasing the last).
        self.packed: list[torch.Tensor] = []
        # Under the async checker, Gloo's threads touch device memory through the host views
        # until finish(): the runtime's own access, like a kernel's.
        self._window = _checker.open_window()

    def __call__(self, t: torch.Tensor, written: bool = False) -> torch.Tensor:
        if t.device.type != self.device_type:
            return t
        if (c := _checker.active()) is not None:   # the collective uses it on the current stream
            c.operand(t, written, self.what)
        if t.is_contiguous():
            return self.alias(t)
        packed = t.contiguous()
        if written:
            self.writebacks.append((t, packed))
        else:
            self.packed.append(packed)
        return self.alias(packed)

    def finish(self) -> None:
        for dst, packed in self.writebacks:
            dst.copy_(packed)
        self.writebacks.clear()
        self.packed.clear()
        self._window = _checker.close_window(self._window)

    def __del__(self):
        self._window = _checker.close_window(getattr(self, "_window", None))
