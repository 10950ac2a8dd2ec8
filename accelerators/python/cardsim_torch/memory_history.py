"""``torch.<device>.memory``: the memory functions of the device module plus PyTorch's
snapshot API (``_record_memory_history``, ``_snapshot``, ``_dump_snapshot``), in PyTorch's
snapshot format, so that ``torch.cuda._memory_viz`` and pytorch.org/memory_viz read it.

Times in the trace are the simulated host time of each allocator call (microseconds), like
every other time cardsim reports. Stacks are Python stacks (``stacks="all"`` records no C++
frames). The allocator never splits a device segment, so each segment holds one block.
"""
from __future__ import annotations

import pickle
import sys
import types

_SMALL = 1 << 20   # the allocator's small-pool boundary (DeviceAllocator.cpp)


def build(name: str, _C, functions: dict) -> types.ModuleType:
    mod = types.ModuleType(f"torch.{name}.memory", f"Memory management of the emulated {name.upper()} (cardsim).")

    def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize,
                               device=None, clear_history=False, compile_context=False,
                               global_record_annotations=False, skip_actions=None, **legacy):
        """Starts (``enabled="all"``: stacks of live blocks and a log of the allocator's
        actions, at most ``max_entries`` per device; ``"state"``: the stacks only) or stops
        (``None``) recording the allocator's history, as torch.cuda.memory's does."""
        if isinstance(enabled, bool):     # the legacy form: _record_memory_history(True, ...)
            enabled = "all" if enabled else None
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', not {enabled!r}")
        if context not in (None, "state", "alloc", "all"):
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', not {context!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', not {stacks!r}")
        if not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"max_entries must be a non-negative integer, not {max_entries!r}")
        on = enabled is not None
        _C._record_memory_history(on and context is not None, enabled == "all",
                                  min(max_entries, (1 << 63) - 1), bool(clear_history))

    def _snapshot(device=None, augment_with_fx_traces=False):
        """The allocator's state: ``segments`` (every device segment with its block, state and
        allocating stack) and ``device_traces`` (per device, the recorded actions)."""
        snap = _C._memory_snapshot()
        for seg in snap["segments"]:
            seg["segment_type"] = "small" if seg["total_size"] <= _SMALL else "large"
        return snap

    def _dump_snapshot(filename="dump_snapshot.pickle", augment_with_fx_traces=False):
        """Pickles :func:`_snapshot` into ``filename``."""
        with open(filename, "wb") as f:
            pickle.dump(_snapshot(), f)

    def memory_snapshot():
        """The segments of :func:`_snapshot` (torch.cuda.memory_snapshot's form)."""
        return _snapshot()["segments"]

    ns = dict(functions)
    ns.update(_record_memory_history=_record_memory_history, _snapshot=_snapshot, _dump_snapshot=_dump_snapshot,
              memory_snapshot=memory_snapshot)
    for k, v in ns.items():
        setattr(mod, k, v)
    mod.__all__ = sorted(k for k in ns if not k.startswith("_"))
    return mod
