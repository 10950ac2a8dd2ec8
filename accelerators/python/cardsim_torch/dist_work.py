"""The Work objects of the personality's process group (distributed.py): a collective that
already finished, an all-gather whose host side ends later (in_flight.py), several waited on
as one, and a point-to-point transfer still in flight on Gloo, whose failures are reported in
the words the collectives use; and the runtime's markers on the card they order streams by."""
from __future__ import annotations

import threading
from datetime import timedelta

import torch
import torch.distributed as dist

from . import in_flight


class DoneWork(dist._Work):
    """A collective finished on the host: wait() orders the caller's current stream after it
    on the card (`end`: CollectiveEnd; None for one that ran on no card) and
    returns at once; the future holds the outputs."""

    def __init__(self, result, end=None):
        super().__init__()
        self._result = result
        self._end = end
        self._fut = None   # made when asked for (most callers only wait)

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self._end is not None:
            self._end.order_current_stream()
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self):
        return self._result

    def get_future(self):
        if self._fut is None:
            self._fut = torch.futures.Future()
            self._fut.set_result(self._result)
        return self._fut


class LaterWork(dist._Work):
    """A collective launched on the card whose host side ends later: `finish_host` ends
    Gloo's transfer and settles the fabric's answer (raising their failures), once. Until
    it is finished (in_flight: at its wait(), or earlier at a point the program's order
    fixes) it holds the device tensors Gloo reads (`ins`) and writes (`outs`), as the vendor
    backends stash a collective's tensors: a caller's temporary input must not be freed and
    its memory handed to the next tensor while the bytes still move. wait() then orders the
    caller's current stream after the collective (`end`), as DoneWork's."""

    def __init__(self, finish_host, inner, result, end, ins, outs):
        super().__init__()
        self._finish_host, self._inner, self._result, self._end = finish_host, inner, result, end
        self._ins, self._outs = ins, outs
        self._spans = None   # (read, written) byte spans, once asked for (in_flight.finish_touching)
        self._lock = threading.Lock()
        self._host_done = False
        self._error = None
        self._fut = None
        in_flight.add(self)

    def reads(self) -> list:
        return self._spans_of()[0]

    def writes(self) -> list:
        return self._spans_of()[1]

    def _spans_of(self) -> tuple:
        if self._spans is None:
            self._spans = (in_flight.spans(self._ins), in_flight.spans(self._outs))
        return self._spans

    def _end_host(self) -> None:
        with self._lock:
            if not self._host_done:
                self._host_done = True
                try:
                    self._finish_host()
                except BaseException as e:
                    self._error = e
                    raise
                finally:   # Gloo's work and the host views go (gloo_hold waits for them at exit)
                    self._finish_host = self._inner = None
            elif self._error is not None:
                raise self._error

    def finish(self) -> None:
        """Ends the host side and lets go of the tensors (in_flight calls it)."""
        try:
            self._end_host()
        finally:
            in_flight.discard(self)
            self._ins = self._outs = ()

    def wait(self, timeout: timedelta | None = None) -> bool:
        self.finish()
        if self._end is not None:
            self._end.order_current_stream()
        return True

    def is_completed(self) -> bool:
        # Gloo's transfer done: its host side ends now, so a caller polling it then reading
        # the output finds it there. (The tensors stay held until a point the program's
        # order fixes: when Gloo finished must not change what the allocator hands out.)
        if not self._host_done and self._inner.is_completed():
            try:
                self._end_host()
            except Exception:
                pass   # completed, failed: wait() raises it
        return self._host_done

    def is_success(self) -> bool:
        return self._error is None

    def exception(self):
        return self._error

    def result(self):
        return self._result

    def get_future(self):
        if self._fut is None:
            self.wait()
            self._fut = torch.futures.Future()
            self._fut.set_result(self._result)
        return self._fut


class AllWorks(dist._Work):
    """Works that make one (Gloo's transfers of one collective, a coalesced call, a
    coalescing block): waited on as one."""

    def __init__(self, works, result=None):
        super().__init__()
        self._works, self._result = works, result

    def wait(self, timeout: timedelta | None = None) -> bool:
        for w in self._works:
            w.wait() if timeout is None else w.wait(timeout)
        return True

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def result(self):
        return self._result

    def get_future(self):
        self.wait()
        fut = torch.futures.Future()
        fut.set_result(self._result)
        return fut


def p2p_failure(what: str, peer: int, err: Exception) -> Exception:
    """Gloo's error for a point-to-point transfer, in the words the collectives use: what,
    with whom, and why (the peer's process gone, or the group's timeout)."""
    text = str(err)
    low = text.lower()
    if "closed by peer" in low or "connection reset" in low or "broken pipe" in low or "connection closed" in low:
        why = f"rank {peer} left the job (its connection closed: the process exited or was killed)"
    elif "timed out" in low or "timeout" in low:
        why = f"rank {peer} did not take part within the process group's timeout"
    else:
        why = "the transfer failed"
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return dist.DistBackendError(f"{what}: {why} [{first}]")


class PendingWork(dist._Work):
    """A point-to-point transfer in flight on Gloo; copies back on completion."""

    def __init__(self, inner, finish, result, what: str = "", peer: int = -1, peer_in_group: int | None = None):
        super().__init__()
        self._inner, self._finish, self._result, self._done = inner, finish, result, False
        self._what, self._peer, self._peer_in_group = what, peer, peer_in_group

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self._done:
            try:
                from .distributed import _parked_wait   # (distributed imports this module)
                _parked_wait(self._inner, timeout)
            except dist.DistBackendError:
                raise
            except RuntimeError as e:
                if not self._what:
                    raise
                from .dist_exit import broken
                raise broken(p2p_failure(self._what, self._peer, e)) from e
            self._finish()
            self._done = True
        return True

    def _source_rank(self) -> int:
        """The group rank the transfer came from (a receive; from any rank: known once it
        arrived, so this waits for it), as Gloo's own works answer it."""
        self.wait()
        if self._peer_in_group is not None:
            return self._peer_in_group
        return self._inner._source_rank()

    def is_completed(self) -> bool:
        return self._done or self._inner.is_completed()

    def is_success(self) -> bool:
        return self._inner.is_success()

    def result(self):
        self.wait()
        return self._result

    def get_future(self):
        fut = torch.futures.Future()
        self.wait()
        fut.set_result(self._result)
        return fut


class SendsInFlight:
    """A group's buffered sends Gloo has not handed over yet: a failure (the receiver left,
    or never posted within the group's timeout) is raised by the group's next call, or by a
    wait, once Gloo has given up on it."""

    def __init__(self):
        self._works: list = []

    def add(self, work, what: str, peer: int) -> None:
        self._works.append((work, what, peer))

    def drain(self) -> None:
        """Waits until Gloo has handed every send over (the group's end: the receivers still
        get them), each at most the group's timeout; a failure is written, not raised."""
        works, self._works = self._works, []
        for work, what, peer in works:
            try:
                work.wait()
            except Exception as e:
                import sys
                sys.stderr.write(f"cardsim: {p2p_failure(what, peer, e)}\n")

    def check(self) -> None:
        if not self._works:
            return
        failure, keep = None, []
        for work, what, peer in self._works:
            if not work.is_completed():
                keep.append((work, what, peer))
                continue
            try:
                work.wait()
            except Exception as e:   # Gloo's words: the collectives' instead
                failure = failure or p2p_failure(what, peer, e)
        self._works = keep
        if failure is not None:
            from .dist_exit import broken
            raise broken(failure)


class BufferedSendWork(DoneWork):
    """A send whose bytes were copied out at its call: complete for its caller (the buffer
    may be reused), as the vendor libraries' sends are; Gloo hands the copy over once the
    receiver posts (SendsInFlight)."""

    def __init__(self, finish, result, sends: SendsInFlight):
        super().__init__(result)
        self._finish, self._sends, self._done = finish, sends, False

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self._done:
            self._done = True
            self._finish()
        self._sends.check()
        return True

    def get_future(self):
        self.wait()
        return super().get_future()


class RuntimeMarker:
    """An event the runtime records on a device's current stream for itself (where point-to-
    point calls were posted, where a collective ended): it costs the host no time (a torch
    event's record costs the program a call it never made)."""

    def __init__(self, device: int):
        from . import _C
        self._destroy = _C._posting_marker_destroy
        self.event_id = _C._posting_marker(device)

    def __del__(self):
        try:
            self._destroy(self.event_id)
        except Exception:   # the runtime already shut down at exit
            pass


class CollectiveEnd:
    """Where a collective ended on its stream: a runtime marker after it. Its Work, waited on
    from another stream, makes that stream wait for it (as the vendor libraries' wait()
    does); waited on from the same stream, stream order has it already."""

    def __init__(self, device: int):
        from . import _C
        self._device = device
        # (stream id, device, type) as the runtime gives it: no Stream object per collective.
        self._current = _C._current_stream
        self._stream_id = self._current(device)[0]
        self._marker = RuntimeMarker(device)
        self._wait_marker = _C._stream_wait_marker

    def order_current_stream(self) -> None:
        if self._current(self._device)[0] != self._stream_id:
            self._wait_marker(self._device, self._marker.event_id)
