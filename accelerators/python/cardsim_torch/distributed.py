"""The personality's torch.distributed backend (``cncl`` for mlu, ``bccl`` for supa).

Bytes move through Gloo on CPU tensors that alias device memory (device memory is
host-addressable in the emulator). Most collectives complete before the call returns and
their Work is already done, which is a legal schedule of the asynchronous API; all_gather
(ZeRO-3's parameter gathers, issued back to back with async_op) completes on the host at
its Work's wait() or at the next point of the program that needs its bytes (in_flight.py),
and point to point operations stay asynchronous so that isend/irecv pairs cannot deadlock.

Timing: each collective occupies the device's current stream on the preset's collective
fabric (shim launchFabricCollective); the group's global ranks are its devices on the fabric,
one device per rank. In a job of several processes the ranks share one fabric server: rank 0
starts it in its process when the default group is created and its address travels through
the c10d store (its Unix-domain socket when the store is on loopback, every rank on this
host; ``CARDSIM_FABRIC=host:port`` or ``unix:PATH`` names a ``cardsim fabricd`` instead;
``CARDSIM_FABRIC=off`` times each collective alone on each rank). A collective then starts
on each rank when its stream gets to it, and completes on every member at the latest
arrival plus the model's time, whatever order the processes reach it in. It is reported to
the server before the bytes move, so a member that died or hangs fails the others with an
error naming the group, the collective and the missing rank, within the group's timeout.
Point-to-point transfers are joined there too, without ever blocking a sender: a send is
reported and takes the model's time from its own arrival (a buffered send); a receive is
reported when its Work is waited on, as posted when it was called (an event recorded then),
and completes at the later of the two arrivals plus the transfer's time, so a receiver never
finishes before its sender began. ``recv_anysource`` stays timed on its own rank.
"""
from __future__ import annotations

import os
import sys
import uuid
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from . import gloo_hold as _gloo_hold
from .dist_host import Host as _Host, TimingGloo as _TimingGloo
from .dist_exit import broken as _broken, register_exit_handler as _register_exit_handler
from .dist_exit import flush_limit_s as _flush_limit_s
from .socket_flush import tcp_sockets as _tcp_sockets, wait_tcp_sent as _wait_tcp_sent
from .dist_work import AllWorks as _AllWorks, CollectiveEnd as _CollectiveEnd, DoneWork as _DoneWork
from .dist_work import LaterWork as _LaterWork
from . import in_flight as _in_flight
from .dist_work import SendsInFlight as _SendsInFlight
from .dist_p2p import PointToPoint
from .dist_a2a import AllToAll
from .dist_binding import UnsplittableBackend as _UnsplittableBackend, bind_device
from .dist_dtypes import Reducible as _Reducible, movable as _movable

# torch.distributed does not export AllgatherOptions (the other collectives' options it does).
_AllgatherOptions = getattr(dist, "AllgatherOptions", None) or torch._C._distributed_c10d.AllgatherOptions

_GLOO_OPS = (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND,
             ReduceOp.BOR, ReduceOp.BXOR)


def _parked_wait(work, timeout: timedelta | None = None):
    """Waits for a Gloo transfer that only another rank's progress completes (nothing was
    reported to the fabric server for it): parked on the server meanwhile, so that the
    collectives other ranks wait for need not wait for this rank's next one."""
    if not _fabric_joined or work.is_completed():
        return work.wait() if timeout is None else work.wait(timeout)
    from . import _C
    _C._fabric_park(True)
    try:
        return work.wait() if timeout is None else work.wait(timeout)
    finally:
        _C._fabric_park(False)


# torch.distributed's collectives as the fabric model names them; gather and scatter are
# timed as the rooted reduce and broadcast of the same bytes.
_FABRIC_OP = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
              "broadcast": "broadcast", "reduce": "reduce", "gather": "reduce", "scatter": "broadcast",
              "all_to_all": "all_to_all", "send": "send_recv", "recv": "send_recv", "barrier": "barrier"}


_OP_NAMES: dict = {}


def _op_name(op) -> str:
    """A ReduceOp's name ("SUM"; a ReduceOp object shows no name of its own). Asked on every
    reduction: remembered per operation type."""
    kind = getattr(op, "op", op)   # a ReduceOp.RedOpType: hashable
    name = _OP_NAMES.get(kind)
    if name is None:
        name = _OP_NAMES[kind] = str(kind).rsplit(".", 1)[-1]
    return name


# Process groups created in this process, by their members: the n-th group with the same
# members is the n-th on every member (groups are created collectively), so the pair keys
# a group's sequence of collectives on the fabric server.
_group_instances: dict[tuple, int] = {}
_fabric_joined = False
_fabric_server = False   # connected to a fabric server (not CARDSIM_FABRIC=off, not alone)


def _join_fabric(store, rank: int, size: int, timeout: timedelta) -> None:
    """Connects this process to the job's fabric server (see the module docstring)."""
    global _fabric_joined, _fabric_server
    if _fabric_joined or size < 2:
        return
    _fabric_joined = True
    where = os.environ.get("CARDSIM_FABRIC", "").strip()
    if where == "off":
        return
    from . import _C
    if rank == 0:
        if not where:
            master = os.environ.get("MASTER_ADDR", "127.0.0.1")
            local = master in ("127.0.0.1", "localhost", "::1")
            port, local_address = _C._fabric_serve("127.0.0.1" if local else "0.0.0.0", 0)
            # Every rank on this host (the store is on loopback): the server's Unix-domain
            # socket, cheaper per collective than loopback TCP.
            where = (local_address or f"127.0.0.1:{port}") if local else f"{master}:{port}"
        store.set("cardsim/fabric/address", where)
        store.set("cardsim/fabric/job", uuid.uuid4().hex)
    else:
        store.wait(["cardsim/fabric/address", "cardsim/fabric/job"], timeout)
        where = store.get("cardsim/fabric/address").decode()
    job = store.get("cardsim/fabric/job").decode()
    # The process group's timeout bounds the wait for the server too (a server started by
    # hand that is not there, or not answering).
    _C._fabric_connect(where, job, rank, size, timeout.total_seconds())
    _fabric_server = True


class CardsimProcessGroup(PointToPoint, AllToAll, dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: timedelta, backend_name: str,
                 device_type: str, global_ranks=None):
        super().__init__(rank, size)
        _register_exit_handler()
        from . import _C
        self._alias = _C._cpu_alias
        self._launch = _C._launch_collective
        self._settle_answers = _C._fabric_settle
        # The group's members as global ranks (their devices on the fabric), in group order.
        self._ranks = list(global_ranks) if global_ranks else list(range(size))
        # Point-to-point calls issued back to back on one stream form a batch, as
        # batch_isend_irecv's (a group on real cards): (device, stream id, the event recorded
        # before the first of them), so a receive is posted where the batch began, not behind
        # the batch's own sends. A call of anything else, or a wait, ends the batch.
        self._p2p_batch = None
        self._sends = _SendsInFlight()   # buffered sends Gloo has not handed over yet
        self._coalesced = None           # the works of a coalescing block (_start_coalescing)
        self._name = backend_name
        self._device_type = device_type
        self._timeout_s = timeout.total_seconds() if timeout else 0.0
        members = tuple(self._ranks)
        instance = _group_instances.get(members, 0)
        _group_instances[members] = instance + 1
        self._group_key = ",".join(map(str, members)) + f"#{instance}"
        # The first group a process creates is the default group: its ranks are global.
        _join_fabric(store, self._ranks[rank], size, timeout)
        from . import execution_mode
        self._timing = execution_mode() == "timing"
        self._used_device = None   # the first device a collective of the group ran on (barrier's)
        self._ended = None         # where the last collective ended on its card (_CollectiveEnd)
        before = _tcp_sockets()
        gloo = dist.ProcessGroupGloo(dist.PrefixStore(f"{backend_name}/gloo", store), rank, size, timeout)
        self._gloo_sockets = set(_tcp_sockets()) - set(before)   # its connections (socket_flush)
        # Every tensor given to Gloo is held until its worker let go (gloo_hold).
        self._timing_gloo = _TimingGloo(gloo) if self._timing else None
        self._gloo = _gloo_hold.HeldGloo(self._timing_gloo or gloo)
        # The group's name lives on its backends (ProcessGroup::getGroupName reads the first
        # one's): without one, torch's DeviceMesh and functional collectives fail with
        # "ProcessGroup name not set". The Gloo backend that moves the bytes stands for this
        # group; collectives still come here (the methods below override the C++ ones).
        for dev in (device_type, "cpu"):
            self._register_backend(torch.device(dev), dist.ProcessGroup.BackendType.CUSTOM, gloo)

    # -- helpers ------------------------------------------------------------------------

    def _get_backend(self, device):
        # torch asks the bound device's backend whether it can split the group (new_group,
        # split_group, eager init): the Gloo that moves the bytes says it can, but cannot
        # for a group of ours (dist_binding).
        return _UnsplittableBackend(super()._get_backend(device))

    def shutdown(self):
        # Buffered sends are the receivers' still: handed over before the group goes; so
        # are gathers still in flight (a failure of theirs was their waiters' to see).
        try:
            self._order_after_in_flight()
        except Exception:
            pass
        self._sends.drain()
        # What Gloo called sent may still sit in the kernel; its close would drop it.
        _wait_tcp_sent(_flush_limit_s(), getattr(self, "_gloo_sockets", set()))
        return super().shutdown()

    def getBackendName(self) -> str:
        return self._name

    def name(self) -> str:
        return self._name

    def _host(self, ins=None, outs=None) -> _Host:
        """The call's host side, after the collectives in flight it may touch (in_flight):
        all of them, or for a gather (`ins`, `outs`: its tensors) those that meet its own."""
        self._order_after_in_flight(ins, outs)
        self._sends.check()
        self._refuse_if_unusable()
        self._refuse_in_capture()
        return _Host(self._device_type, self._alias, f"{self._name} {sys._getframe(1).f_code.co_name}")

    def _refuse_if_unusable(self) -> None:
        # Members that disagreed on a collective some of them had started on Gloo (sizes,
        # op) left Gloo's transfers out of step: the next collective would pair with the
        # stale one (a timeout, or an abort on mismatched sizes). The group refuses further
        # collectives at once instead, as a broken communicator does.
        if getattr(self, "_unusable", None):
            raise dist.DistBackendError(self._unusable)

    def _refuse_in_capture(self) -> None:
        # Bytes move through Gloo when the call is made, so a graph replay would move none.
        module = getattr(torch, self._device_type)
        if module.is_initialized() and module.is_current_stream_capturing():
            raise RuntimeError(
                f"{self._name}: collectives cannot be captured into a graph on the emulated "
                f"card (stream {module.current_stream().stream_id} of device "
                f"{module.current_device()} is capturing); run them outside the capture")

    def _call(self) -> tuple:
        """The last collective call's state its wait needs (whether it was reported to the
        fabric server, what it was, whether its answer is pending), taken off the group."""
        call = (getattr(self, "_reported", False), getattr(self, "_last", ("collective", self._ranks)),
                getattr(self, "_pending_answer", None))
        self._pending_answer = None
        return call

    def _wait(self, work, call=None):
        # A collective reported to the fabric server completed there, so every member has
        # started Gloo's side of it; one on CPU tensors only was not reported. One whose
        # answer was left for later (_started) is settled first: a member that disagreed
        # or never came fails it there, named, where Gloo's side would wait for it until
        # the group's timeout.
        reported, last, pending = call or self._call()
        if pending:
            self._settle(pending)
        try:
            if not reported:
                return _parked_wait(work)
            return work.wait()
        except dist.DistBackendError:
            raise
        except RuntimeError as e:   # Gloo's words, for CPU tensors too: the group's instead
            raise self._transfer_failure(e, last) from None

    def _later(self, h: _Host, work, result, ins, outs):
        """The Work of an all-gather whose bytes may still be moving (ZeRO-3 issues a step's
        gathers back to back with async_op, then waits): its host side - Gloo's wait, the
        fabric server's answer - ends at its wait() or at the next point that needs its
        bytes (in_flight), so back-to-back gathers overlap on the host as on Gloo. One with
        outputs to copy back (non-contiguous) finishes now: the copy is a kernel on the
        stream, which must come at the same place in the program whenever Gloo finishes."""
        if h.writebacks:
            return self._done(h, work, result)
        call = self._call()
        w = _LaterWork(lambda: (self._wait(work, call), h.finish()), work, result, self._ended, ins, outs)
        if self._coalesced is not None:
            self._coalesced.append(w)
        return w

    @staticmethod
    def _order_after_in_flight(ins=None, outs=None) -> None:
        if not _in_flight.any_in_flight():
            return
        if ins is None:
            _in_flight.finish_all()
        else:
            _in_flight.finish_touching(_in_flight.spans(ins), _in_flight.spans(outs))

    def _charge_only(self, kind: str, tensors, **charge) -> None:
        """Timing mode's collective that moves nothing: charged, after the collectives in
        flight as full mode's _host() has it."""
        self._order_after_in_flight()
        self._charge(kind, tensors, **charge)

    def _settle(self, op: str) -> None:
        """Awaits the fabric server's answer to the collective reported with answer_later."""
        try:
            self._settle_answers(op)
        except dist.DistBackendError as e:
            self._fabric_failed(e, op)

    def _fabric_failed(self, e: Exception, op: str):
        """Raises the fabric server's refusal of `op` in the group's words; a disagreement on
        a collective Gloo had started leaves the group unusable."""
        if "the ranks disagree" in str(e) and op not in ("all_to_all", "send_recv", "barrier"):
            # Gloo had started it (all_to_all and point to point are reported first).
            self._unusable = (f"{self._name}: process group {self._ranks} is unusable: its members disagreed on "
                              f"an earlier {op} that Gloo had started ({e}); create a new group")
        raise _broken(dist.DistBackendError(f"{self._name}: {e}")) from None

    def _transfer_failure(self, err: Exception, last=None) -> Exception:
        """Gloo's error for a collective whose bytes stopped moving, in the words the fabric
        server uses for one a member never started: the group, the collective, and which
        member left (the server saw its connection close) or that none did (one hung)."""
        op, ranks = last or getattr(self, "_last", ("collective", self._ranks))
        text = str(err).strip()
        first = text.splitlines()[0] if text else type(err).__name__
        timed_out = "timed out" in text.lower() or "timeout" in text.lower()
        gone, asked = [], None
        if _fabric_server:
            from . import _C
            import time
            # A killed member's connection to Gloo may break before the server hears it close.
            for attempt in range(10):
                try:
                    gone = _C._fabric_gone(list(ranks), 5.0)
                except Exception as q:   # the server itself is gone (its host, rank 0, left)
                    asked = str(q)
                    break
                if gone or timed_out:
                    break
                time.sleep(0.1)
        if gone:
            why = "; ".join(f"rank {r} {w}" for r, w in gone)
        elif asked is not None:
            why = f"the fabric server cannot say which member left ({asked})"
        elif timed_out:
            why = ("no member left the job, yet the transfer did not complete within the process group's timeout "
                   f"({self._timeout_s:g} s): a member stopped answering (hung?)")
        else:
            why = "the transfer of its bytes failed"
        return _broken(dist.DistBackendError(f"{self._name}: {op} of process group {list(ranks)}: {why} [{first}]"))

    def _done(self, h: _Host, work, result):
        # Each collective starts Gloo's transfer first and queues its fabric time while Gloo
        # moves the bytes: the fabric server's round trip and Gloo's overlap. (A fabric error
        # raises before this wait; Gloo's transfer then ends by itself, at the latest at the
        # process group's timeout.)
        self._wait(work)
        h.finish()
        return self._work(result)

    def _started(self, start, kind: str, tensors, first: bool = False, **charge):
        """Starts Gloo's transfer (`start()`), then reports the collective (`_charge`): its
        fabric time is queued while Gloo moves the bytes. A call Gloo refuses on this member
        alone (an output of the wrong size) is reported all the same, so that the members'
        sequences of collectives stay aligned: members whose sizes differ fail on every one
        of them, named by the fabric server, instead of this one failing alone and every
        later collective of the group pairing with the wrong one. `first`: reported before
        Gloo starts (its members' disagreement then fails it before any byte moves)."""
        if first:
            self._charge(kind, tensors, **charge)
            return start()
        try:
            work = start()
        except Exception as refused:
            try:
                self._charge(kind, tensors, refused=f"{type(refused).__name__}: {refused}".splitlines()[0], **charge)
            except dist.DistBackendError as named:
                raise named from refused
            raise
        # Gloo is moving the bytes: the server's answer is read when the collective is waited on (_wait).
        self._charge(kind, tensors, later=True, **charge)
        return work

    def _charge(self, kind: str, tensors, root: int = 0, peer: int = 1, ranks=None, p2p: int = 0,
                tag: int = 0, posted=None, send=None, recv=None, op=None, refused: str = "",
                later: bool = False) -> None:
        """Queues the collective's fabric time on the device's current stream. `tensors`
        carry nccl-tests' size for `kind` (see shim CollectiveDesc); `root` and `peer` are
        group ranks; `p2p` (1 send, 2 receive), `tag` and `posted` (the receive's event)
        join the two sides of a point-to-point transfer; `send` and `recv`, an all_to_all's
        bytes to and from each group rank where its splits are uneven; `op`, a reduction's
        ReduceOp (the fabric server checks that its members agree on it and on the dtype);
        `later`: the server's answer is awaited by the next _wait (shim answer_later)."""
        self._reported = False
        self._pending_answer = None
        self._ended = None
        self._last = (_FABRIC_OP.get(kind, kind), list(self._ranks if ranks is None else ranks))
        if not p2p:
            self._p2p_batch = None
        if tensors is None:
            return
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        dev = [t for t in tensors if t.device.type == self._device_type]
        if not dev:
            return
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        self._timed(dev[0].device.index, _FABRIC_OP[kind], float(nbytes),
                    self._ranks if ranks is None else ranks, root, peer, str(dev[0].dtype).removeprefix("torch."),
                    p2p, tag, 0 if posted is None else posted.event_id, send, recv,
                    "" if op is None else _op_name(op).lower(), refused, later and not p2p)

    def _timed(self, device: int, op: str, nbytes: float, ranks, root: int, peer: int, dtype: str = "",
               p2p: int = 0, tag: int = 0, posted: int = 0, send=None, recv=None, reduce_op: str = "",
               refused: str = "", later: bool = False) -> None:
        self._reported = True
        self._last = (op, list(ranks))
        if self._used_device is None:
            self._used_device = device
        try:
            self._launch(device, op, nbytes, ranks, root, peer, self._group_key, self._timeout_s, dtype,
                         p2p, tag, posted, send or (), recv or (), reduce_op, refused, later)
        except dist.DistBackendError as e:
            self._fabric_failed(e, op)
        if later:
            self._pending_answer = op
        if not p2p:
            self._ended = _CollectiveEnd(device)

    def _work(self, result):
        """The Work of a collective that finished on the host (see _CollectiveEnd)."""
        return _DoneWork(result, self._ended)

    @staticmethod
    def _avg(op) -> bool:
        return op == ReduceOp.AVG

    def _reduce_op(self, op, tensors):
        """Gloo's operation for `op` over the reduction's tensors, or a ValueError naming
        what the card's library refuses (before anything is widened, reported or moved)."""
        if not any(op == k for k in _GLOO_OPS) and op != ReduceOp.AVG:
            name = _op_name(op)
            valid = ", ".join(str(k).rsplit(".", 1)[-1] for k in _GLOO_OPS) + ", AVG"
            raise ValueError(f"{self._name}: reduce op {name} is not supported (supported: {valid})")
        for t in tensors:
            if any(op == k for k in (ReduceOp.BAND, ReduceOp.BOR, ReduceOp.BXOR)) and (
                    t.is_floating_point() or t.is_complex()):
                raise ValueError(f"{self._name}: cannot use ReduceOp.{_op_name(op)} with non-integral dtype "
                                 f"{str(t.dtype).removeprefix('torch.')}")
            if t.is_complex() and not (op == ReduceOp.SUM or op == ReduceOp.AVG):
                raise ValueError(f"{self._name}: ReduceOp.{_op_name(op)} is not defined on complex tensors "
                                 f"({str(t.dtype).removeprefix('torch.')}); SUM and AVG are")
        return ReduceOp.SUM if op == ReduceOp.AVG else op

    # -- collectives ---------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        op = opts.reduceOp
        o = dist.AllreduceOptions()
        o.reduceOp = self._reduce_op(op, tensors)
        h = self._host()
        r = _Reducible([h(t, written=True) for t in tensors], op, self._timing_gloo)
        work = self._started(lambda: self._gloo.allreduce(r.wide, o),
                             "all_reduce", tensors, first=r.widened, op=op)
        self._wait(work)
        # AVG divides on the host views: the vendor libraries average inside the collective,
        # so a division kernel on the stream would cost time the card does not spend.
        self._average(op, r)
        r.back()
        h.finish()
        return self._work(tensors)

    def _average(self, op, r: _Reducible) -> None:
        if not self._avg(op) or not r.carried:
            return   # moved nothing (timing mode): nothing to divide (and device memory stays untouched)
        r.average(self.size())

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        for t in tensors:
            o = dist.AllreduceOptions()
            o.reduceOp = opts.reduceOp
            self.allreduce([t], o)
        return self._work(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if any(len({t.shape for t in lst}) > 1 for lst in output_tensors):
            return self._allgather_uneven(output_tensors, input_tensors)
        flat_outs = [t for lst in output_tensors for t in lst]
        h = self._host(input_tensors, flat_outs)
        outs = [[_movable(h(t, written=True)) for t in lst] for lst in output_tensors]
        ins = [_movable(h(t)) for t in input_tensors]
        work = self._started(lambda: self._gloo.allgather(outs, ins, opts or _AllgatherOptions()),
                             "all_gather", flat_outs)
        return self._later(h, work, output_tensors, input_tensors, flat_outs)

    def _allgather_uneven(self, output_tensors, input_tensors):
        """all_gather into outputs of different sizes (torch allows it; the vendor backends
        run it as a broadcast from each rank, which Gloo's all_gather cannot): rank r's input
        goes to every member's output r, timed as one all_gather of the outputs' bytes."""
        me = self.rank()
        for outs, inp in zip(output_tensors, input_tensors):
            if len(outs) != self.size() or outs[me].numel() != inp.numel():
                raise ValueError(
                    f"{self._name}: all_gather: output {me} (this rank's) must hold the input's {inp.numel()} "
                    f"elements and there must be one output per rank ({self.size()}); got {len(outs)} outputs"
                    + (f", output {me} of {outs[me].numel()} elements" if len(outs) > me else ""))
            nbytes = sum(t.numel() * t.element_size() for t in outs)
            if self._timing and nbytes > _TimingGloo.CARRIED_BYTES:
                self._charge_only("all_gather", outs)
                continue
            h = self._host()
            views = [_movable(h(t, written=True)) for t in outs]
            views[me].copy_(_movable(h(inp)).reshape(views[me].shape))

            def start():
                works = []
                for root, v in enumerate(views):
                    o = dist.BroadcastOptions()
                    o.rootRank = root
                    works.append(self._gloo.broadcast([v], o))
                return _AllWorks(works)
            self._done(h, self._started(start, "all_gather", outs), outs)
        return self._work(output_tensors)

    def _allgather_base(self, output, input, opts=None):
        h = self._host([input], [output])
        # Gloo wants the concatenated form; the stacked (world, *input.shape) form is the same bytes.
        work = self._started(lambda: self._gloo._allgather_base(_movable(h(output, True)).view(-1),
                                                                _movable(h(input)).reshape(-1),
                                                                opts or _AllgatherOptions()),
                             "all_gather", output)
        return self._later(h, work, [output], [input], [output])

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        return _AllWorks([self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)], outputs)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        return _AllWorks([self.allgather([outs], [inp], opts) for outs, inp in zip(output_lists, input_list)],
                         output_lists)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        # Gloo's own reduce_scatter over the host views (its summation order: the same bits
        # as on CPU); AVG as SUM, divided after.
        opts = opts or dist.ReduceScatterOptions()
        op = opts.reduceOp
        for out, ins in zip(output_tensors, input_tensors):
            o = dist.ReduceScatterOptions()
            o.reduceOp = self._reduce_op(op, ins)
            if self._timing and sum(t.numel() * t.element_size() for t in ins) > _TimingGloo.CARRIED_BYTES:
                self._charge_only("reduce_scatter", ins, op=op)
                continue
            h = self._host()
            r_in = _Reducible([h(t) for t in ins], op, self._timing_gloo)
            r_out = _Reducible([h(out, written=True)], op, self._timing_gloo)
            work = self._started(lambda: self._gloo.reduce_scatter(r_out.wide, [r_in.wide], o),
                                 "reduce_scatter", ins, first=r_in.widened, op=op)
            self._wait(work)
            self._average(op, r_out)
            r_out.back()
            h.finish()
        return self._work(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        # As Gloo does it on CPU: all_reduce of the whole input on the host views, then this
        # rank's slice (same bytes; no staging kernels on the stream, which the vendor
        # library does not run either).
        opts = opts or dist.ReduceScatterOptions()
        op = opts.reduceOp
        n = self.size()
        if output.numel() * n != input.numel():
            raise ValueError(f"{self._name}: reduce_scatter_tensor: the input must hold the world size ({n}) times "
                             f"the output's elements: input of {input.numel()} elements, output of {output.numel()}")
        o = dist.AllreduceOptions()
        o.reduceOp = self._reduce_op(op, [input])
        if self._timing and input.numel() * input.element_size() > _TimingGloo.CARRIED_BYTES:
            self._charge_only("reduce_scatter", [input], op=op)
            return self._work([output])
        h = self._host()
        r = _Reducible([h(input).reshape(n, -1)], op, self._timing_gloo)
        first = r.widened
        if not first:   # the input stays as it was
            r.wide[0] = r.wide[0].clone()
        work = self._started(lambda: self._gloo.allreduce(r.wide, o), "reduce_scatter", [input], first=first, op=op)
        self._wait(work)
        self._average(op, r)
        r.narrow_into(h(output, written=True), r.wide[0][self.rank()].reshape(output.shape))
        h.finish()
        return self._work([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return self._work(outputs)

    def broadcast(self, tensors, opts=None):
        h = self._host()
        host = [_movable(h(t, written=True)) for t in tensors]
        opts = opts or dist.BroadcastOptions()
        work = self._started(lambda: self._gloo.broadcast(host, opts),
                             "broadcast", tensors, root=opts.rootRank)
        self._done(h, work, tensors)
        return self._work(tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        op = opts.reduceOp
        o = dist.ReduceOptions()
        o.reduceOp = self._reduce_op(op, tensors)
        h = self._host()
        r = _Reducible([h(t, written=True) for t in tensors], op, self._timing_gloo)
        o.rootRank = opts.rootRank
        o.rootTensor = opts.rootTensor
        work = self._started(lambda: self._gloo.reduce(r.wide, o),
                             "reduce", tensors, first=r.widened, root=opts.rootRank, op=op)
        self._wait(work)
        if self.rank() == opts.rootRank:   # the others' buffers keep their values, as the libraries leave them
            self._average(op, r)
            r.back()
        h.finish()
        return self._work(tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        h = self._host()
        outs = [[_movable(h(t, written=True)) for t in lst] for lst in output_tensors]
        ins = [_movable(h(t)) for t in input_tensors]
        opts = opts or dist.GatherOptions()
        work = self._started(lambda: self._gloo.gather(outs, ins, opts),
                             "gather", input_tensors, root=opts.rootRank)
        self._done(h, work, output_tensors)
        return self._work(output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        h = self._host()
        outs = [_movable(h(t, written=True)) for t in output_tensors]
        ins = [[_movable(h(t)) for t in lst] for lst in input_tensors]
        opts = opts or dist.ScatterOptions()
        work = self._started(lambda: self._gloo.scatter(outs, ins, opts),
                             "scatter", output_tensors, root=opts.rootRank)
        self._done(h, work, output_tensors)
        return self._work(output_tensors)

    # The names torch.distributed uses for the tensor forms of these collectives.
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    # Collectives start at the call, so a coalescing block needs no batching; its end waits
    # for the gathers still in flight (the others completed at their call).
    def _start_coalescing(self, device):
        self._coalesced = []

    def _end_coalescing(self, device):
        works, self._coalesced = self._coalesced or [], None
        return _AllWorks(works, []) if works else self._work([])

    def _barrier_device(self, opts, module) -> int:
        """The device a barrier runs on, by torch's rule for the vendor backends: the one
        asked for, the group's bound device, the first its collectives used, else the group
        rank's (rank % devices), which a process that never chose its card gets."""
        ids = list(getattr(opts, "device_ids", None) or [])
        if ids:
            return ids[0]
        try:
            bound = self.bound_device_id
        except Exception:   # older torch: no bound device
            bound = None
        if bound is not None and bound.type == self._device_type and bound.index is not None:
            return bound.index
        if self._used_device is not None:
            return self._used_device
        return self.rank() % max(1, module.device_count())

    def barrier(self, opts=None):
        self._order_after_in_flight()
        self._refuse_if_unusable()
        self._refuse_in_capture()
        self._reported = False
        module = getattr(torch, self._device_type)
        if module.is_initialized():
            self._timed(self._barrier_device(opts, module), "barrier", 4.0, self._ranks, 0, 1 if self.size() > 1 else 0)
        self._wait(self._gloo.barrier(dist.BarrierOptions()))
        return self._work([])


def register_backend(p) -> None:
    """Registers ``p.comm_backend`` with torch.distributed for the device and for cpu."""
    if p.comm_backend.upper() in dist.Backend._plugins:
        return

    def create(opts, backend_options=None):
        pg = CardsimProcessGroup(opts.store, opts.group_rank, opts.group_size, opts.timeout, p.comm_backend,
                                 p.device, global_ranks=opts.global_ranks_in_group)
        bind_device(pg, sys._getframe(1))
        return pg

    dist.Backend.register_backend(p.comm_backend, create, extended_api=True, devices=[p.device, "cpu"])
    # A group made after init_process_group(device_id=...) inherits the bound device, a Gloo
    # group too (new_group(backend="gloo")), and torch then asks that group for a backend of
    # the device's type: Gloo serves the card's type as it serves cuda's (its tensors are
    # still refused on the card; CPU tensors are what a Gloo group is for).
    gloo_devices = dist.Backend.backend_capability.get(dist.Backend.GLOO)
    if gloo_devices is not None and p.device not in gloo_devices:
        gloo_devices.append(p.device)
