"""The personality's torch.distributed backend (``cncl`` for mlu, ``bccl`` for supa).

Bytes move through Gloo on CPU tensors that alias device memory (device memory is
host-addressable in the emulator). Collectives complete before the call returns and
their Work is already done, which is a legal schedule of the asynchronous API; point to
point operations stay asynchronous so that isend/irecv pairs cannot deadlock.

Timing: each collective charges its device an alpha-beta cost until the collective
fabric is modelled: time = alpha * steps + bytes_on_the_wire / link_bandwidth, with the
ring algorithm's steps and wire bytes (see ``collective_cost``).
"""
from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

_GLOO_OPS = (ReduceOp.SUM, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.BAND,
             ReduceOp.BOR, ReduceOp.BXOR)


class _DoneWork(dist._Work):
    """A finished collective: wait() returns at once, the future holds the outputs."""

    def __init__(self, result):
        super().__init__()
        self._result = result
        self._fut = torch.futures.Future()
        self._fut.set_result(result)

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self):
        return self._result

    def get_future(self):
        return self._fut


class _PendingWork(dist._Work):
    """A point-to-point transfer in flight on Gloo; copies back on completion."""

    def __init__(self, inner, finish, result):
        super().__init__()
        self._inner, self._finish, self._result, self._done = inner, finish, result, False

    def wait(self, timeout: timedelta | None = None) -> bool:
        if not self._done:
            self._inner.wait() if timeout is None else self._inner.wait(timeout)
            self._finish()
            self._done = True
        return True

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


class _Host:
    """Maps device tensors to CPU tensors Gloo can use, and writes results back."""

    def __init__(self, device_type: str, alias):
        self.device_type, self.alias = device_type, alias
        self.writebacks: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, t: torch.Tensor, written: bool = False) -> torch.Tensor:
        if t.device.type != self.device_type:
            return t
        if t.is_contiguous():
            return self.alias(t)
        packed = t.contiguous()
        if written:
            self.writebacks.append((t, packed))
        return self.alias(packed)

    def finish(self) -> None:
        for dst, packed in self.writebacks:
            dst.copy_(packed)
        self.writebacks.clear()


def collective_cost(kind: str, nbytes: int, world: int) -> tuple[int, float]:
    """(steps, bytes each rank sends) of the ring algorithm for a collective."""
    if world <= 1:
        return 0, 0.0
    n = world
    if kind == "all_reduce":
        return 2 * (n - 1), 2.0 * (n - 1) / n * nbytes
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return n - 1, (n - 1) / n * nbytes
    if kind in ("broadcast", "reduce", "gather", "scatter"):
        return n - 1, float(nbytes)
    if kind == "barrier":       # an all-reduce of one 4-byte element, as the vendor libraries do
        return 2 * (n - 1), 2.0 * (n - 1) / n * 4
    return 1, float(nbytes)     # send / recv


class CardsimProcessGroup(dist.ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: timedelta, backend_name: str,
                 device_type: str):
        super().__init__(rank, size)
        from . import _C
        self._alias = _C._cpu_alias
        self._charge_fn = _C._charge_collective
        self._name = backend_name
        self._device_type = device_type
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore(f"{backend_name}/gloo", store), rank,
                                           size, timeout)

    # -- helpers ------------------------------------------------------------------------

    def getBackendName(self) -> str:
        return self._name

    def name(self) -> str:
        return self._name

    def _host(self) -> _Host:
        self._refuse_in_capture()
        return _Host(self._device_type, self._alias)

    def _refuse_in_capture(self) -> None:
        # Bytes move through Gloo when the call is made, so a graph replay would move none.
        module = getattr(torch, self._device_type)
        if module.is_initialized() and module.is_current_stream_capturing():
            raise RuntimeError(
                f"{self._name}: collectives cannot be captured into a graph on the emulated "
                f"card (stream {module.current_stream().stream_id} of device "
                f"{module.current_device()} is capturing); run them outside the capture")

    def _done(self, h: _Host, work, result, kind: str | None = None, sized=None):
        work.wait()
        h.finish()
        if kind is not None:
            self._charge(kind, sized)
        return _DoneWork(result)

    def _charge(self, kind: str, tensors) -> None:
        """Queues the collective's alpha-beta time on the device's current stream."""
        if tensors is None:
            return
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        dev = [t for t in tensors if t.device.type == self._device_type]
        if not dev:
            return
        nbytes = sum(t.numel() * t.element_size() for t in tensors)
        steps, wire = collective_cost(kind, nbytes, self.size())
        self._charge_fn(dev[0].device.index, f"{self._name}:{kind}", steps, wire)

    @staticmethod
    def _avg(op) -> bool:
        return op == ReduceOp.AVG

    def _reduce_op(self, op):
        if op == ReduceOp.AVG:
            return ReduceOp.SUM
        if not any(op == k for k in _GLOO_OPS):
            raise ValueError(f"{self._name}: reduce op {op} is not supported")
        return op

    # -- collectives ---------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        op = opts.reduceOp
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        o = dist.AllreduceOptions()
        o.reduceOp = self._reduce_op(op)
        self._done(h, self._gloo.allreduce(host, o), tensors, "all_reduce", tensors)
        if self._avg(op):
            for t in tensors:
                t.div_(self.size())
        return _DoneWork(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        for t in tensors:
            o = dist.AllreduceOptions()
            o.reduceOp = opts.reduceOp
            self.allreduce([t], o)
        return _DoneWork(tensors)

    def allgather(self, output_tensors, input_tensors, opts=None):
        h = self._host()
        outs = [[h(t, written=True) for t in lst] for lst in output_tensors]
        ins = [h(t) for t in input_tensors]
        return self._done(h, self._gloo.allgather(outs, ins, opts or dist.AllgatherOptions()),
                          output_tensors, "all_gather", [t for lst in output_tensors for t in lst])

    def _allgather_base(self, output, input, opts=None):
        h = self._host()
        # Gloo wants the concatenated form; the stacked (world, *input.shape) form is the same bytes.
        return self._done(h, self._gloo._allgather_base(h(output, True).view(-1), h(input).reshape(-1),
                                                        opts or dist.AllgatherOptions()), [output],
                          "all_gather", output)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._allgather_base(o, i, opts)
        return _DoneWork(outputs)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        for outs, inp in zip(output_lists, input_list):
            self.allgather([outs], [inp], opts)
        return _DoneWork(output_lists)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        op = opts.reduceOp
        # Gloo's reduce_scatter over lists: do it as all_reduce of the stacked input,
        # then keep this rank's slice (same bytes, simpler and available everywhere).
        for out, ins in zip(output_tensors, input_tensors):
            full = torch.stack([t.reshape(-1) for t in ins])
            h = self._host()
            o = dist.AllreduceOptions()
            o.reduceOp = self._reduce_op(op)
            self._done(h, self._gloo.allreduce([h(full, True)], o), None)
            if self._avg(op):
                full.div_(self.size())
            out.copy_(full[self.rank()].reshape(out.shape))
            self._charge("reduce_scatter", full)
        return _DoneWork(output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        n = self.size()
        chunks = list(input.reshape(n, -1).unbind(0))
        self.reduce_scatter([output.reshape(-1)], [chunks], opts)
        return _DoneWork([output])

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        for o, i in zip(outputs, inputs):
            self._reduce_scatter_base(o, i, opts)
        return _DoneWork(outputs)

    def broadcast(self, tensors, opts=None):
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        return self._done(h, self._gloo.broadcast(host, opts or dist.BroadcastOptions()), tensors,
                          "broadcast", tensors)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        op = opts.reduceOp
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        o = dist.ReduceOptions()
        o.reduceOp = self._reduce_op(op)
        o.rootRank = opts.rootRank
        o.rootTensor = opts.rootTensor
        self._done(h, self._gloo.reduce(host, o), tensors, "reduce", tensors)
        if self._avg(op) and self.rank() == opts.rootRank:
            for t in tensors:
                t.div_(self.size())
        return _DoneWork(tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        h = self._host()
        outs = [[h(t, written=True) for t in lst] for lst in output_tensors]
        ins = [h(t) for t in input_tensors]
        return self._done(h, self._gloo.gather(outs, ins, opts or dist.GatherOptions()), output_tensors,
                          "gather", input_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        h = self._host()
        outs = [h(t, written=True) for t in output_tensors]
        ins = [[h(t) for t in lst] for lst in input_tensors]
        return self._done(h, self._gloo.scatter(outs, ins, opts or dist.ScatterOptions()), output_tensors,
                          "scatter", output_tensors)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        # As all_to_all_single over the concatenation (Gloo has no list form).
        ins = torch.cat([t.reshape(-1) for t in input_tensors])
        outs = torch.empty(sum(t.numel() for t in output_tensors), dtype=ins.dtype, device=ins.device)
        self.alltoall_base(outs, ins, [t.numel() for t in output_tensors],
                           [t.numel() for t in input_tensors], opts)
        off = 0
        for t in output_tensors:
            t.copy_(outs[off:off + t.numel()].reshape(t.shape))
            off += t.numel()
        return _DoneWork(output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        h = self._host()
        return self._done(h, self._gloo.alltoall_base(h(output, True), h(input),
                                                      list(output_split_sizes),
                                                      list(input_split_sizes),
                                                      opts or dist.AllToAllOptions()), [output],
                          "all_to_all", input)

    # The names torch.distributed uses for the tensor forms of these collectives.
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    # Collectives complete at the call, so a coalescing block needs no batching.
    def _start_coalescing(self, device):
        pass

    def _end_coalescing(self, device):
        return _DoneWork([])

    def barrier(self, opts=None):
        self._refuse_in_capture()
        self._gloo.barrier(dist.BarrierOptions()).wait()
        module = getattr(torch, self._device_type)
        if module.is_initialized():
            ids = list(getattr(opts, "device_ids", None) or [])
            device = ids[0] if ids else module.current_device()
            steps, wire = collective_cost("barrier", 0, self.size())
            self._charge_fn(device, f"{self._name}:barrier", steps, wire)
        return _DoneWork([])

    # -- point to point ------------------------------------------------------------------

    def send(self, tensors, dst: int, tag: int = 0):
        h = self._host()
        host = [h(t) for t in tensors]
        self._charge("send", tensors)
        return _PendingWork(self._gloo.send(host, dst, tag), h.finish, tensors)

    def recv(self, tensors, src: int, tag: int = 0):
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        self._charge("recv", tensors)
        return _PendingWork(self._gloo.recv(host, src, tag), h.finish, tensors)

    def recv_anysource(self, tensors, tag: int = 0):
        h = self._host()
        host = [h(t, written=True) for t in tensors]
        self._charge("recv", tensors)
        return _PendingWork(self._gloo.recv_anysource(host, tag), h.finish, tensors)


def register_backend(p) -> None:
    """Registers ``p.comm_backend`` with torch.distributed for the device and for cpu."""
    if p.comm_backend.upper() in dist.Backend._plugins:
        return

    def create(store, rank, size, timeout):
        return CardsimProcessGroup(store, rank, size, timeout, p.comm_backend, p.device)

    dist.Backend.register_backend(p.comm_backend, create, devices=[p.device, "cpu"])
