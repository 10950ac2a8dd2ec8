"""Collectives launched on the card whose host side ends later (distributed.py's async
all-gathers, dist_work.LaterWork): Gloo may still be moving their bytes.

Each is finished (Gloo's transfer waited for, the fabric server's answer read, the tensors
it held let go) at a point the program's order fixes: its own wait(), the next collective
that could read or write its tensors, a device synchronize, the group's end. Never when
Gloo happens to be done: what the caching allocator hands out next depends on when those
tensors are let go, so finishing by the host's speed would make simulated times vary from
run to run (and between full and timing mode)."""
from __future__ import annotations

_works: dict = {}   # id -> LaterWork not finished yet, oldest first
_bounds: dict = {}  # id -> the bounds of its (read, written) spans, once asked for


def add(work) -> None:
    _works[id(work)] = work


def discard(work) -> None:
    """`work` finished (LaterWork.finish)."""
    _works.pop(id(work), None)
    _bounds.pop(id(work), None)


def any_in_flight() -> bool:
    return bool(_works)


def finish_all() -> None:
    """Finishes every collective in flight, oldest first."""
    _finish(list(_works.values()))


def finish_touching(reads, writes) -> None:
    """Finishes the collectives in flight that write memory in `reads` or `writes`, or read
    memory in `writes` (spans: (start, end) byte addresses): a collective about to start on
    those bytes must see them settled. Others stay in flight (gathers of other tensors)."""
    if not _works or not (reads or writes):
        return
    # ZeRO-3 keeps dozens of gathers in flight and asks this before each new one: each
    # work's span bounds rule most out before their spans are compared.
    touched = _hull(reads + writes)
    written = _hull(writes)
    _finish([w for w in _works.values()
             if (_overlap(_bounds_of(w)[1], touched) and (_meets(w.writes(), reads) or _meets(w.writes(), writes)))
             or (_overlap(_bounds_of(w)[0], written) and _meets(w.reads(), writes))])


def _bounds_of(work) -> tuple:
    b = _bounds.get(id(work))
    if b is None:
        b = _bounds[id(work)] = (_hull(work.reads()), _hull(work.writes()))
    return b


def _hull(spans):
    """The smallest span holding `spans` (None for none)."""
    if not spans:
        return None
    return min(lo for lo, _ in spans), max(hi for _, hi in spans)


def _overlap(a, b) -> bool:
    return a is not None and b is not None and a[0] < b[1] and b[0] < a[1]


def _finish(works) -> None:
    # The first failure is raised once all are finished (each also keeps its own, for its wait()).
    first = None
    for w in works:
        try:
            w.finish()
        except Exception as e:
            first = first or e
    if first is not None:
        raise first


def _meets(a, b) -> bool:
    return any(lo < hi2 and lo2 < hi for lo, hi in a for lo2, hi2 in b)


def spans(tensors) -> list:
    """The byte spans [start, end) the tensors' elements lie in (a view's whole extent)."""
    out = []
    for t in tensors:
        if t.numel() == 0:
            continue
        extent = 1 + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if s > 1)
        start = t.data_ptr()
        out.append((start, start + extent * t.element_size()))
    return out
