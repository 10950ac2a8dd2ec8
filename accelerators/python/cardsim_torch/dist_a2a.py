"""The personality's process group's all-to-all calls (distributed.py): the members' splits
compared before any byte moves (by the fabric server, else among the members), uneven
exchanges timed pair by pair, timing mode's carried exchanges settled by the members."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ReduceOp

from .dist_dtypes import movable as _movable, movable_numel as _movable_numel
from .dist_host import TimingGloo as _TimingGloo

_AllgatherOptions = getattr(dist, "AllgatherOptions", None) or torch._C._distributed_c10d.AllgatherOptions


def _fabric_server() -> bool:
    from . import distributed
    return distributed._fabric_server


def _uneven(sizes):
    """An all_to_all's bytes to each group rank, or None where they are all alike (the
    even exchange, timed from the buffer's size alone)."""
    return None if len(set(sizes)) <= 1 else sizes


class AllToAll:
    """Mixed into CardsimProcessGroup, whose helpers (_host, _charge, _done, _wait, _work,
    _gloo, _timing, _timing_gloo, _ranks, _name) these use."""

    def _a2a_carried(self, send, recv) -> bool:
        """Timing mode: whether an all_to_all moves its bytes (every member's send and receive
        at most the carried bytes, as for the other collectives); decided alike on every
        member, whose sizes this one does not know, by a carried all-reduce of the largest."""
        biggest = torch.tensor([float(max(sum(send), sum(recv)))], dtype=torch.float64)
        o = dist.AllreduceOptions()
        o.reduceOp = ReduceOp.MAX
        self._gloo.allreduce([biggest], o).wait()
        return biggest.item() <= _TimingGloo.CARRIED_BYTES

    def _a2a_agree(self, send, recv) -> None:
        """Without a fabric server (which compares the members' splits before any byte
        moves), the members compare them here: every member sees every row, so all fail
        alike, in the server's words, before Gloo (which aborts or misplaces bytes on splits
        that disagree)."""
        if _fabric_server() or self.size() < 2:
            return
        n = self.size()
        rows = torch.empty(n, 2 * n, dtype=torch.float64)
        self._gloo._allgather_base(rows.view(-1), torch.tensor(send + recv, dtype=torch.float64),
                                   _AllgatherOptions()).wait()
        for a in range(n):
            for b in range(n):
                sent, expected = rows[a, b].item(), rows[b, n + a].item()
                if sent != expected:
                    ra, rb = self._ranks[a], self._ranks[b]
                    raise dist.DistBackendError(
                        f"{self._name}: all_to_all of process group {self._ranks}: the ranks disagree on its splits: "
                        f"rank {ra} sends rank {rb} {sent:.0f} bytes, but rank {rb} expects {expected:.0f} bytes "
                        f"from rank {ra}")

    def _a2a_sizes(self, send, recv):
        """An all_to_all's per-member sizes for the fabric: both rows where either is uneven
        or they differ (the server checks them against the peers' before any byte moves),
        else none (the even exchange of the buffer, each way)."""
        return {"send": send, "recv": recv} if _uneven(send) or _uneven(recv) or send != recv else {}

    def alltoall(self, output_tensors, input_tensors, opts=None):
        # As all_to_all_single over the concatenation on the host views (Gloo has no list
        # form; staging on the stream would cost time the vendor library does not spend).
        # The inputs' host views come first: packing a non-contiguous one is a kernel on the
        # stream, before the exchange that sends it.
        h = self._host()
        ins = [_movable(h(t)).reshape(-1) for t in input_tensors]
        send = [t.numel() * t.element_size() for t in input_tensors]
        recv = [t.numel() * t.element_size() for t in output_tensors]
        self._a2a_agree(send, recv)
        # Reported before Gloo starts: splits the members disagree on fail here, on every member.
        self._charge("all_to_all", input_tensors, **self._a2a_sizes(send, recv))
        if self._timing and not self._a2a_carried(send, recv):
            h.finish()
            return self._work(output_tensors)
        flat = torch.cat(ins) if ins else torch.empty(0)
        units = [_movable_numel(t) for t in output_tensors]   # elements of the type Gloo moves
        outs = torch.empty(sum(units), dtype=flat.dtype)
        if self._timing:
            self._timing_gloo.carry_next = True
        self._wait(self._gloo.alltoall_base(outs, flat, units, [t.numel() for t in ins], opts or dist.AllToAllOptions()))
        off = 0
        for t in output_tensors:
            view = _movable(h(t, written=True))
            view.copy_(outs[off:off + view.numel()].reshape(view.shape))
            off += view.numel()
            if self._timing and view.numel():   # carried: the card holds these values
                self._timing_gloo._noter()(view.data_ptr(), view.numel() * view.element_size())
        h.finish()
        return self._work(output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        h = self._host()
        out_h, in_h = _movable(h(output, True)), _movable(h(input))
        n = self.size()

        def row(t, splits):
            if t.dim() == 0 or t.size(0) == 0:
                return [0] * n
            per = t.numel() // t.size(0) * t.element_size()   # bytes per index of dim 0
            return [s * per for s in splits] if splits else [t.numel() * t.element_size() // n] * n
        send, recv = row(input, list(input_split_sizes)), row(output, list(output_split_sizes))
        self._a2a_agree(send, recv)
        # Reported before Gloo starts: splits the members disagree on fail here, on every member.
        self._charge("all_to_all", input, **self._a2a_sizes(send, recv))
        if self._timing and not self._a2a_carried(send, recv):
            h.finish()
            return self._work([output])
        if self._timing:
            self._timing_gloo.carry_next = True
        work = self._gloo.alltoall_base(out_h, in_h, list(output_split_sizes), list(input_split_sizes),
                                  opts or dist.AllToAllOptions())
        return self._done(h, work, [output])

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)
