"""The async-correctness checker: ``CARDSIM_CHECK=async`` (``async,raise``), or
``torch.<dev>.async_check()`` around a region.

It reports what a real card shows only as rare, intermittent corruption: a tensor used on
another stream without an event wait, a freed block handed out again while another stream
still used it (a missing ``record_stream``), memory a graph replay uses touched while the
replay may be in flight, and the host reading what a queued device-to-host copy has not
finished writing (a ``non_blocking`` copy read before synchronizing), or overwriting what a
queued host-to-device copy has not finished reading.

The runtime (driver shim) tracks what orders streams and the host: event record and wait,
stream/event/device synchronize, a query that found the work done. This module tells it
which memory each operator touches, through a dispatch mode that sees every operator: the
arguments the schema marks written are writes, the other tensor arguments reads, new
results writes; view operators touch nothing. A use not ordered after a conflicting earlier
one (either of them a write) is a report: a block on stderr that begins with
``cardsim check:`` and names both sides (the earlier access: "producer"; the unordered one:
"offender") with their Python stacks, once per pair of sites. With ``raise`` the offending
operator raises ``AsyncCheckError`` instead, before it runs when its inputs are at fault.

Off by default; when off nothing here is installed and the runtime only tests a flag.
Ordering is happens-before, not timing: a race is reported even where the simulated times
happen to leave it harmless, as it is harmless on a real card only by luck.
"""
from __future__ import annotations

import faulthandler
import os
import sys
import threading
from contextlib import contextmanager

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ENV = "CARDSIM_CHECK"
_TOKENS = ("async", "raise")


class AsyncCheckError(RuntimeError):
    """An asynchronous-ordering bug found by the checker (``CARDSIM_CHECK=async,raise``)."""


def parse(value: str | None) -> tuple[bool, bool]:
    """(on, raise) from a CARDSIM_CHECK value: "", "0", "off", "async" or "async,raise"."""
    v = (value or "").strip().lower()
    if v in ("", "0", "off", "none"):
        return False, False
    tokens = [t.strip() for t in v.split(",") if t.strip()]
    bad = [t for t in tokens if t not in _TOKENS]
    if bad or "async" not in tokens:
        raise ValueError(f"{ENV}={value!r}: {'unknown check ' + repr(bad[0]) if bad else 'no check named'} "
                         f"(valid: async, async,raise; off by default)")
    return True, "raise" in tokens


# Frames of these files are the machinery, not the user's code (shown only when nothing else is).
_INTERNAL = (os.sep + "torch" + os.sep, os.sep + "cardsim_torch" + os.sep, "<frozen ")
_MAX_FRAMES = 24
_SHOWN_FRAMES = 6   # innermost first; a report shows the user's frames nearest the operator
# Operators that touch no tensor data (or whose data movement the runtime itself sees).
_NO_ACCESS = {"aten::record_stream", "aten::set_", "aten::resize_", "aten::resize_as_",
              "aten::empty.memory_format", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
              "aten::new_empty_strided", "aten::lift_fresh", "aten::_has_same_storage_numel",
              "aten::is_pinned", "aten::_pin_memory", "aten::sym_size", "aten::sym_stride",
              "aten::sym_numel", "aten::sym_storage_offset", "aten::is_same_size"}


class _Sites:
    """Interned (Python stack, operator) pairs; the runtime keeps their ids."""

    def __init__(self):
        self._ids: dict = {}
        self._sites: list = [((), "(the runtime itself)")]
        self._lock = threading.Lock()

    def here(self, what: str, depth: int = 2) -> int:
        frames = []
        f = sys._getframe(depth)
        while f is not None and len(frames) < _MAX_FRAMES:
            frames.append((f.f_code.co_filename, f.f_lineno, f.f_code.co_name))
            f = f.f_back
        key = (tuple(frames), what)
        with self._lock:
            i = self._ids.get(key)
            if i is None:
                i = self._ids[key] = len(self._sites)
                self._sites.append(key)
        return i

    def what(self, site: int) -> str:
        return self._sites[site][1] if site < len(self._sites) else "?"

    def user_frames(self, site: int) -> list:
        frames = self._sites[site][0] if site < len(self._sites) else ()
        user = [fr for fr in frames if not any(s in fr[0] for s in _INTERNAL)]
        return user or list(frames)

    def where(self, site: int) -> tuple:
        f = self.user_frames(site)
        return f[0][:2] if f else ("?", 0)

    def stack_lines(self, site: int, indent: str) -> list[str]:
        frames = self.user_frames(site)[:_SHOWN_FRAMES]
        if not frames:
            return [f"{indent}(no Python frame: run by the runtime or the autograd engine's device thread)"]
        return [f'{indent}File "{fn}", line {ln}, in {name}' for fn, ln, name in reversed(frames)]


_HINTS = {
    "stream race": "make {offender} wait for {producer} between the two uses: waiting_stream.wait_stream("
                   "producing_stream), or an Event recorded on the producer's stream after its use and "
                   "waited on (Event.wait) by the other",
    "freed block reused": "call tensor.record_stream(s) for each other stream s that used the tensor before "
                          "freeing it (or free it only after synchronizing with that stream)",
    "graph replay race": "order the access after the replay (wait on the replay stream, or do it on that "
                         "stream) before touching memory the graph uses",
    "host read before copy completed": "synchronize (the stream, or an Event recorded after the copy) before "
                                       "the host uses the copy's destination",
    "host write before copy completed": "synchronize (the stream, or an Event recorded after the copy) before "
                                        "the host overwrites the copy's source",
}


class Checker:
    """The process's checker state: sites, what was already reported, the mode."""

    def __init__(self, _C, device: str, raise_errors: bool):
        self._C = _C
        self.device = device
        self.raise_errors = raise_errors
        self.sites = _Sites()
        self._seen: set = set()
        self.reports: list[str] = []   # every block shown, for tests and tools

    # -- formatting -----------------------------------------------------------------------
    def _side(self, s: dict) -> str:
        if s["host"]:
            return "the host"
        where = f"stream {s['stream']} ({self.device}:{s['device']})"
        return f"graph {s['graph']} replayed on {where}" if s["graph"] else where

    def format(self, r: dict) -> str:
        p, o = r["producer"], r["offender"]
        mem = "host memory" if r["memory_device"] < 0 else f"{self.device}:{r['memory_device']} memory"
        verb = lambda s: "writes" if s["write"] else "reads"   # noqa: E731
        lines = [f"cardsim check: {r['kind']}: {self._side(o)} {verb(o)} {mem} "
                 f"0x{r['address']:x} (+{r['bytes']} bytes) that {self._side(p)} "
                 f"{'wrote' if p['write'] else 'read'}, with nothing ordering the two "
                 f"(no event wait or synchronize between them)"]
        for label, s in (("producer", p), ("offender", o)):
            did = verb(s) if s is o else ("wrote" if s["write"] else "read")
            lines.append(f"  {label}: {self._side(s)} {did} it in {self.sites.what(s['site'])}")
            lines += self.sites.stack_lines(s["site"], "    ")
        lines.append("  fix: " + _HINTS.get(r["kind"], "order the two uses").format(
            dev=f"torch.{self.device}", producer=self._side(p), offender=self._side(o)))
        return "\n".join(lines)

    # -- reports ------------------------------------------------------------------------------
    def flush(self) -> None:
        if not self._C._check_pending():
            return
        blocks = []
        for r in self._C._check_drain():
            key = (r["kind"], self.sites.where(r["producer"]["site"]), self.sites.where(r["offender"]["site"]))
            if key in self._seen and not self.raise_errors:
                continue
            self._seen.add(key)
            blocks.append(self.format(r))
        if not blocks:
            return
        self.reports += blocks
        if self.raise_errors:
            raise AsyncCheckError("\n".join(blocks))
        print("\n".join(blocks), file=sys.stderr, flush=True)

    def operand(self, t: torch.Tensor, write: bool, what: str) -> None:
        """A tensor a collective uses on the current stream (collectives do not pass the
        dispatcher here: the process group is written in Python)."""
        self._C._check_set_site(self.sites.here(what, depth=3))
        try:
            self._C._check_tensors([t], write)
        finally:
            self._C._check_set_site(0)
        self.flush()

    def site_here(self, what: str | None) -> None:
        """Names the caller's stack as the site of the runtime calls that follow (graph replay);
        None: back to none."""
        self._C._check_set_site(0 if what is None else self.sites.here(what, depth=3))


_SCHEMAS: dict = {}


def _schema(func):
    info = _SCHEMAS.get(func)
    if info is None:
        s = func._schema
        name = s.name + ("." + s.overload_name if s.overload_name else "")
        written = {a.name for a in s.arguments if a.alias_info is not None and a.alias_info.is_write}
        names = [a.name for a in s.arguments]
        view = bool(s.returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in s.returns)
        fresh = [r.alias_info is None for r in s.returns]
        skip = view or s.name in _NO_ACCESS or name in _NO_ACCESS
        info = _SCHEMAS[func] = (name, names, written, fresh, skip)
    return info


def _tensors(v, out: list) -> None:
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, (list, tuple)):
        for x in v:
            if isinstance(x, torch.Tensor):
                out.append(x)


class _CheckMode(TorchDispatchMode):
    def __init__(self, checker: Checker):
        super().__init__()
        self.checker = checker

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name, names, written, fresh, skip = _schema(func)
        if skip:
            return func(*args, **kwargs)
        c = self.checker
        _C = c._C
        _C._check_set_site(c.sites.here(name))
        reads: list = []
        writes: list = []
        for i, v in enumerate(args):
            _tensors(v, writes if i < len(names) and names[i] in written else reads)
        for k, v in kwargs.items():
            _tensors(v, writes if k in written else reads)
        cards = {t.device for t in reads + writes if t.device.type == c.device}
        target = kwargs.get("device")
        if isinstance(target, torch.device) and target.type == c.device:
            index = target.index if target.index is not None else getattr(torch, c.device).current_device()
            cards.add(torch.device(c.device, index))
        if len(cards) > 1:
            # A copy between cards: it runs on one card's stream after a two-way barrier, and
            # the runtime checks the copy itself.
            try:
                out = func(*args, **kwargs)
                c.flush()
                return out
            finally:
                _C._check_set_site(0)
        try:
            if reads:
                _C._check_tensors(reads, False)
            if writes:
                _C._check_tensors(writes, True)
            c.flush()
            out = func(*args, **kwargs)
            results: list = []
            for is_fresh, r in zip(fresh, out if isinstance(out, tuple) else (out,)):
                if is_fresh:
                    _tensors(r, results)
            results = [t for t in results if t.device.type == c.device]   # host results: the copy's own
            if results:
                _C._check_tensors(results, True)
            c.flush()
            return out
        finally:
            _C._check_set_site(0)


_lock = threading.Lock()
_checker: Checker | None = None
_env_on = False
_depth = 0


def active() -> Checker | None:
    return _checker


def open_window() -> Checker | None:
    """Opens a window on guarded device memory (the runtime's own access through host views);
    returns the checker that close_window takes, or None when the checker is off."""
    c = _checker
    if c is not None:
        c._C._check_window(True)
    return c


def close_window(opened: Checker | None) -> None:
    """Closes what open_window opened (None: nothing); returns None for the caller to keep."""
    if opened is not None:
        opened._C._check_window(False)


def _start(_C, device: str, raise_errors: bool) -> Checker:
    """Turns the runtime's checker and device-memory guard on."""
    _C._check_enable(True)
    if not faulthandler.is_enabled():   # the Python stack of a host access to device memory
        faulthandler.enable()           # (first: the guard's fault handler chains to it)
    _C._check_guard(True)
    return Checker(_C, device, raise_errors)


def install_from_env(_C, device: str) -> None:
    """CARDSIM_CHECK=async[,raise]: checks the whole process from the first device use."""
    global _checker, _env_on
    on, raise_errors = parse(os.environ.get(ENV))
    if not on:
        return
    _checker = _start(_C, device, raise_errors)
    _env_on = True
    _CheckMode(_checker).__enter__()   # for the life of the process


class Region:
    """What async_check() yields: the reports shown since the region began."""

    def __init__(self, checker: Checker):
        self.checker = checker
        self._start = len(checker.reports)

    @property
    def reports(self) -> list[str]:
        return self.checker.reports[self._start:]


@contextmanager
def async_check(_C, device: str, raise_errors: bool = False):
    """Checks the enclosed region (this thread's operators, and the backward passes it runs).
    Yields a Region; its ``reports`` lists the blocks shown within it. Under CARDSIM_CHECK the
    whole process is checked already: the region then only scopes ``reports`` and ``raise``."""
    global _checker, _depth
    with _lock:
        if _checker is None:
            _checker = _start(_C, device, raise_errors)
        checker = _checker
        push_mode = not _env_on and _depth == 0   # one mode checks each operator once
        _depth += 1
        prev_raise = checker.raise_errors
        checker.raise_errors = raise_errors or prev_raise
    try:
        if push_mode:
            with _CheckMode(checker):
                yield Region(checker)
        else:
            yield Region(checker)
    finally:
        with _lock:
            checker.raise_errors = prev_raise
            _depth -= 1
            if _depth == 0 and not _env_on:
                _C._check_guard(False)
                _C._check_enable(False)
                _checker = None
