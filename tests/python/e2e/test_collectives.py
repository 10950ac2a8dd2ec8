"""The cncl (mlu) and bccl (supa) torch.distributed backends, end to end: every collective
on 2 and 3 ranks (one process per rank, torch.multiprocessing spawn), results checked
against values computed locally, and the simulated time an all_reduce charges."""
import json
import pathlib
import re

import pytest

from conftest import free_port

ROOT = pathlib.Path(__file__).resolve().parents[3]
HERE = pathlib.Path(__file__).resolve().parent   # world_harness, for the worker script

WORKER = r'''
import importlib, os, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from world_harness import run_cases, spawn_world

CARD, WORLD, PORT = sys.argv[1], int(sys.argv[2]), sys.argv[3]
BACKEND = {"mlu": "cncl", "supa": "bccl"}[CARD]


def worker(rank, world, q):
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)
    importlib.import_module(f"torch_{CARD}")
    mod = getattr(torch, CARD)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=PORT)
    mod.set_device(rank)
    # a bounded timeout: ranks left behind by a failed run exit on their own
    # device_id binds the device to the group: a torch.device on mlu, torch's int form on supa
    dist.init_process_group(BACKEND, rank=rank, world_size=world, timeout=timedelta(seconds=150),
                            device_id=torch.device(CARD, rank) if CARD == "mlu" else rank)
    d = torch.device(CARD, rank)
    n = world
    res = {}

    def base(r, k=6):                     # rank r's input
        return torch.arange(k, dtype=torch.float32) * (r + 1) + r

    def eq(a, b):
        assert isinstance(a, torch.Tensor) and a.device == d, (type(a), getattr(a, "device", None))
        a = a.cpu()
        assert a.shape == b.shape and torch.allclose(a.to(b.dtype), b), (a, b)

    def t_backend():
        assert dist.get_backend() == BACKEND, dist.get_backend()
        assert dist.get_world_size() == n and dist.get_rank() == rank

    def t_bound_device():
        # init_process_group(device_id=...) binds the device to the default group and to
        # the groups made after it (torch reads it for barrier and split_group)
        assert dist.distributed_c10d._get_default_group().bound_device_id == d
        sub = dist.new_group(list(range(n)))
        assert sub.bound_device_id == d, sub.bound_device_id
        t = torch.ones(3, device=d)
        dist.all_reduce(t, group=sub)
        eq(t, torch.full((3,), float(n)))
        # groups of some ranks, made by every rank (torch splits them from a bound default
        # group whose backend says it can split: ours says it cannot, so each is made whole)
        alone = [dist.new_group([r]) for r in range(n)]
        t = torch.full((2,), float(rank + 1), device=d)
        dist.all_reduce(t, group=alone[rank])
        eq(t, torch.full((2,), float(rank + 1)))
        try:
            dist.split_group(split_ranks=[[r] for r in range(n)])
            raise AssertionError("split_group split a group of ours")
        except RuntimeError as e:
            assert "does not support splitting" in str(e), e

    def t_all_reduce():
        allin = torch.stack([base(r) for r in range(n)])
        for op, ref in [(dist.ReduceOp.SUM, allin.sum(0)), (dist.ReduceOp.AVG, allin.mean(0)),
                        (dist.ReduceOp.MAX, allin.max(0).values), (dist.ReduceOp.MIN, allin.min(0).values),
                        (dist.ReduceOp.PRODUCT, allin.prod(0))]:
            t = base(rank).to(d)
            dist.all_reduce(t, op=op)
            eq(t, ref)

    def t_all_reduce_dtypes():
        for dt in (torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.float64):
            t = (torch.arange(5) + rank).to(dt).to(d)
            dist.all_reduce(t)
            eq(t, sum(torch.arange(5) + r for r in range(n)).to(dt))
        for dt in (torch.int32, torch.int64):   # AVG of integers: the sum, divided and truncated
            t = (torch.arange(-3, 4) * 7 + rank).to(dt).to(d)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            total = sum(torch.arange(-3, 4) * 7 + r for r in range(n))
            eq(t, torch.div(total, n, rounding_mode="trunc").to(dt))

    def t_all_reduce_coalesced():
        ts = [base(rank).to(d), base(rank, 3).to(d) * 2]
        dist.all_reduce_coalesced(ts)
        eq(ts[0], sum(base(r) for r in range(n)))
        eq(ts[1], sum(base(r, 3) * 2 for r in range(n)))

    def t_all_gather():
        outs = [torch.empty(6, device=d) for _ in range(n)]
        dist.all_gather(outs, base(rank).to(d))
        for r in range(n):
            eq(outs[r], base(r))

    def t_all_gather_uneven():
        # outputs of different sizes (torch allows them): rank r's r + 1 elements to output r
        outs = [torch.empty(r + 1, 2, device=d) for r in range(n)]
        dist.all_gather(outs, base(rank, 2 * (rank + 1)).reshape(rank + 1, 2).to(d))
        for r in range(n):
            eq(outs[r], base(r, 2 * (r + 1)).reshape(r + 1, 2))
        try:
            dist.all_gather([torch.empty(r + 2, device=d) for r in range(n)], torch.ones(1, device=d))
            raise AssertionError("an input that does not fit its output was taken")
        except ValueError as e:
            assert f"output {rank} (this rank's) must hold the input's 1 elements" in str(e), e

    def t_all_gather_into_tensor():
        out = torch.empty(n * 6, device=d)
        dist.all_gather_into_tensor(out, base(rank).to(d))
        eq(out, torch.cat([base(r) for r in range(n)]))
        out2 = torch.empty(n * 2, 3, device=d)          # concatenation along dim 0 of (2, 3)
        dist.all_gather_into_tensor(out2, base(rank).reshape(2, 3).to(d))
        eq(out2, torch.cat([base(r).reshape(2, 3) for r in range(n)]))

    def t_all_gather_into_tensor_stacked():
        # torch documents two output forms: a concatenation or a stack of the inputs
        out = torch.empty(n, 6, device=d)
        dist.all_gather_into_tensor(out, base(rank).to(d))
        eq(out, torch.stack([base(r) for r in range(n)]))

    def t_single_forms():
        # torch's newer names of the tensor forms (all_gather_into_tensor and
        # reduce_scatter_tensor are deprecated for them)
        if not hasattr(dist, "all_gather_single"):
            return
        out = torch.empty(n * 6, device=d)
        dist.all_gather_single(out, base(rank).to(d))
        eq(out, torch.cat([base(r) for r in range(n)]))
        inp = torch.cat([base(rank, 4) + 10 * j for j in range(n)]).to(d)
        out = torch.empty(4, device=d)
        dist.reduce_scatter_single(out, inp)
        eq(out, sum(base(r, 4) + 10 * rank for r in range(n)))

    def t_reduce_scatter():
        ins = [base(rank, 4).to(d) + 10 * j for j in range(n)]
        out = torch.empty(4, device=d)
        dist.reduce_scatter(out, ins)
        eq(out, sum(base(r, 4) + 10 * rank for r in range(n)))
        out = torch.empty(4, device=d)
        dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)
        eq(out, base(n - 1, 4) + 10 * rank)

    def t_reduce_scatter_tensor():
        inp = torch.cat([base(rank, 4) + 10 * j for j in range(n)]).to(d)
        out = torch.empty(4, device=d)
        dist.reduce_scatter_tensor(out, inp)
        eq(out, sum(base(r, 4) + 10 * rank for r in range(n)))
        out = torch.empty(4, device=d)
        dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.AVG)
        eq(out, sum(base(r, 4) + 10 * rank for r in range(n)) / n)
        out = torch.empty(4, device=d)                  # the stacked input form
        dist.reduce_scatter_tensor(out, inp.reshape(n, 4))
        eq(out, sum(base(r, 4) + 10 * rank for r in range(n)))
        try:                                            # every rank's output one too large
            dist.reduce_scatter_tensor(torch.empty(5, device=d), inp)
            raise AssertionError("an output that does not fit the input was taken")
        except ValueError as e:
            assert f"times the output's elements: input of {4 * n} elements, output of 5" in str(e), e

    def t_broadcast():
        for src in range(n):
            t = base(rank).to(d)
            dist.broadcast(t, src=src)
            eq(t, base(src))

    def t_reduce():
        for dst in (0, n - 1):
            t = base(rank).to(d)
            dist.reduce(t, dst=dst)
            if rank == dst:
                eq(t, sum(base(r) for r in range(n)))
        t = base(rank).to(d)
        dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
        if rank == 0:
            eq(t, base(n - 1))

    def t_gather():
        t = base(rank).to(d)
        outs = [torch.empty(6, device=d) for _ in range(n)] if rank == 1 else None
        dist.gather(t, outs, dst=1)
        if rank == 1:
            for r in range(n):
                eq(outs[r], base(r))

    def t_scatter():
        out = torch.empty(6, device=d)
        ins = [base(r).to(d) * 7 for r in range(n)] if rank == n - 1 else None
        dist.scatter(out, ins, src=n - 1)
        eq(out, base(rank) * 7)

    def t_all_to_all():
        ins = [torch.full((2, 3), float(100 * rank + j), device=d) for j in range(n)]
        outs = [torch.empty(2, 3, device=d) for _ in range(n)]
        dist.all_to_all(outs, ins)
        for j in range(n):
            eq(outs[j], torch.full((2, 3), float(100 * j + rank)))

    def t_all_to_all_single():
        inp = (torch.arange(2 * n, dtype=torch.float32) + 100 * rank).to(d)
        out = torch.empty(2 * n, device=d)
        dist.all_to_all_single(out, inp)
        eq(out, torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r
                           for r in range(n)]))

    def t_all_to_all_single_uneven():
        # rank r sends j + 2r + 1 elements to rank j, valued 1000 r + j
        in_splits = [j + 2 * rank + 1 for j in range(n)]
        out_splits = [rank + 2 * r + 1 for r in range(n)]
        inp = torch.cat([torch.full((s,), float(1000 * rank + j)) for j, s in enumerate(in_splits)]).to(d)
        out = torch.empty(sum(out_splits), device=d)
        dist.all_to_all_single(out, inp, out_splits, in_splits)
        eq(out, torch.cat([torch.full((s,), float(1000 * r + rank)) for r, s in enumerate(out_splits)]))

    def t_all_to_all_self_split_checked():
        # Splits that agree between every two ranks but not a rank's to itself (it sends
        # itself 2 elements, expects 1): every member fails, naming that rank, before Gloo
        # moves a byte (which would abort); the group goes on.
        me = n - 1
        ins = [1] * n
        outs = [1] * n
        if rank == me:
            ins[me] = 2
        inp = torch.ones(sum(ins), device=d)
        out = torch.empty(sum(outs), device=d)
        try:
            dist.all_to_all_single(out, inp, outs, ins)
            raise AssertionError("the exchange ran")
        except dist.DistBackendError as e:
            assert f"rank {me} sends rank {me} 8 bytes, but rank {me} expects 4 bytes from rank {me}" in str(e), e
        t = torch.ones(2, device=d)
        dist.all_reduce(t)
        eq(t, torch.full((2,), float(n)))

    def t_all_to_all_timing():
        # The same 12 MiB buffer per rank exchanged evenly, then skewed: each rank sends 3/4
        # of it to its next rank and the rest evenly to the others (the fabric times each
        # pair's own size, not the even exchange of the buffer).
        from cardsim_torch import _C
        T = 3 << 20
        skew = [3 * T // 4 if j == (rank + 1) % n else T // (4 * (n - 1)) for j in range(n)]
        got = [3 * T // 4 if rank == (j + 1) % n else T // (4 * (n - 1)) for j in range(n)]
        inp = torch.ones(T, device=d)
        spans = {}
        for name, ins, outs in (("even", None, None), ("skewed", skew, got)):
            out = torch.empty(sum(outs) if outs else T, device=d)
            dist.barrier()
            mod.synchronize()
            _C._set_activity_recording(True); _C._drain_activities()
            dist.barrier()
            dist.all_to_all_single(out, inp, outs, ins)
            mod.synchronize()
            (a,) = [a for a in _C._drain_activities() if a[0] == "collective" and a[3].startswith("all_to_all")]
            _C._set_activity_recording(False)
            spans[name] = (a[5] - a[4]) * 1e-3   # ns -> us
            eq(out, torch.ones(out.numel()))
        res["all_to_all_timing_data"] = {"spans": spans, "bytes": T * 4, "skew_bytes": 3 * T,
                                         "preset": mod.get_device_properties(d).preset}

    def t_send_recv():
        if rank == 0:
            dist.send(base(0).to(d) * 3, dst=n - 1)
        elif rank == n - 1:
            t = torch.empty(6, device=d)
            dist.recv(t, src=0)
            eq(t, base(0) * 3)

    def t_sends_are_buffered():
        # Every rank sends before it receives (to its next rank and its previous one), tags
        # are received in another order than sent, and the buffer is changed right after its
        # send: sends wait for no receive, and carry the bytes of their call.
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        buf = torch.full((5,), float(rank), device=d)
        dist.send(buf, dst=nxt, tag=7)
        buf.fill_(-1.0)                   # reused at once: the send had its bytes already
        dist.send(torch.full((3,), 10.0 + rank, device=d), dst=nxt, tag=2)
        first, second = torch.empty(3, device=d), torch.empty(5, device=d)
        dist.recv(first, src=prv, tag=2)
        dist.recv(second, src=prv, tag=7)
        eq(first, torch.full((3,), 10.0 + prv))
        eq(second, torch.full((5,), float(prv)))

    def t_recv_any():
        # A receive from any rank answers who sent it, as Gloo's does.
        if rank == 0:
            dist.send(base(0).to(d) * 5, dst=n - 1)
            dist.send(base(0).to(d) * 7, dst=n - 1)
        elif rank == n - 1:
            t = torch.empty(6, device=d)
            assert dist.recv(t) == 0
            eq(t, base(0) * 5)
            w = dist.irecv(t, src=0)
            w.wait()
            assert w._source_rank() == 0
            eq(t, base(0) * 7)

    def t_isend_irecv():
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        t = torch.empty(6, device=d)
        works = [dist.isend(base(rank).to(d), dst=nxt), dist.irecv(t, src=prv)]
        for w in works:
            w.wait()
        eq(t, base(prv))
        t2 = torch.empty(6, device=d)
        ops = [dist.P2POp(dist.isend, base(rank).to(d) + 1, nxt), dist.P2POp(dist.irecv, t2, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        eq(t2, base(prv) + 1)

    def t_barrier():
        for _ in range(3):
            dist.barrier()

    def t_objects():
        objs = [None] * n
        dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank, "t": (rank, [1.5])})
        assert objs == [{"rank": r, "s": "x" * r, "t": (r, [1.5])} for r in range(n)], objs
        lst = [{"a": 1}, [rank], "hello"] if rank == 0 else [None, None, None]
        dist.broadcast_object_list(lst, src=0)
        assert lst == [{"a": 1}, [0], "hello"], lst

    def t_direct_calls():
        # The process group's own methods, called without options (torch's defaults).
        pg = dist.distributed_c10d._get_default_group()
        outs = [torch.empty(6, device=d) for _ in range(n)]
        pg.allgather([outs], [base(rank).to(d)]).wait()
        for r in range(n):
            eq(outs[r], base(r))
        out = torch.empty(n * 6, device=d)
        pg._allgather_base(out, base(rank).to(d)).wait()
        eq(out, torch.cat([base(r) for r in range(n)]))
        t = base(rank).to(d)
        pg.allreduce([t]).wait()
        eq(t, sum(base(r) for r in range(n)))

    def t_reduce_scatter_bits_of_gloo():
        # The same bits as Gloo on CPU, list and tensor forms (3 ranks sum in a ring's order).
        gloo = dist.new_group(backend="gloo")
        g = torch.Generator().manual_seed(rank)
        ins = [torch.randn(1000, generator=g) for _ in range(n)]
        ref = torch.empty(1000)
        dist.reduce_scatter(ref, [t.clone() for t in ins], group=gloo)
        out = torch.empty(1000, device=d)
        dist.reduce_scatter(out, [t.to(d) for t in ins])
        assert torch.equal(out.cpu(), ref), (out.cpu() - ref).abs().max()
        ref = torch.empty(1000)
        dist.reduce_scatter_tensor(ref, torch.cat(ins), group=gloo)
        out = torch.empty(1000, device=d)
        dist.reduce_scatter_tensor(out, torch.cat(ins).to(d))
        assert torch.equal(out.cpu(), ref), (out.cpu() - ref).abs().max()

    def t_unsupported_op_named():
        try:
            dist.all_reduce(base(rank).to(d), op=dist._make_nccl_premul_sum(2.0))
            raise AssertionError("PREMUL_SUM ran")
        except ValueError as e:
            assert "reduce op PREMUL_SUM is not supported" in str(e) and "AVG" in str(e), e

    def t_async_wait_orders_streams():
        # wait() on a collective issued on another stream: the caller's stream goes on only
        # after it on the card (as NCCL's wait()); from the same stream, no wait is added.
        t = torch.ones(1 << 20, device=d)
        side = mod.Stream()
        side.wait_stream(mod.current_stream())
        ended = mod.Event(enable_timing=True)
        after = mod.Event(enable_timing=True)
        with mod.stream(side):
            w = dist.all_reduce(t, async_op=True)
            ended.record()
        w.wait()
        after.record()
        t.mul_(2)
        mod.synchronize()
        assert ended.elapsed_time(after) >= 0, ended.elapsed_time(after)
        eq(t[:3], torch.full((3,), 2.0 * n))
        from cardsim_torch import _C
        with mod.stream(side):
            before = _C._host_time_ns()
            w.wait()                  # from the collective's own stream: stream order has it
            assert _C._host_time_ns() == before, _C._host_time_ns() - before

    def t_async_op():
        t = base(rank).to(d)
        w = dist.all_reduce(t, async_op=True)
        got = w.get_future().wait()
        assert w.wait() is True and w.is_completed()
        eq(got[0], sum(base(r) for r in range(n)))
        eq(t, sum(base(r) for r in range(n)))
        out = torch.empty(n * 6, device=d)
        w = dist.all_gather_into_tensor(out, base(rank).to(d), async_op=True)
        got = w.get_future().wait()
        eq(got[0], torch.cat([base(k) for k in range(n)]))
        outs = [torch.empty(6, device=d) for _ in range(n)]
        w = dist.all_gather(outs, base(rank).to(d), async_op=True)
        w.wait()
        for r in range(n):
            eq(outs[r], base(r))
        out = torch.empty(4, device=d)
        inp = torch.cat([base(rank, 4) + 10 * j for j in range(n)]).to(d)
        w = dist.reduce_scatter_tensor(out, inp, async_op=True)
        got = w.get_future().wait()
        eq(got[0], sum(base(r, 4) + 10 * rank for r in range(n)))
        b = base(rank).to(d)
        w = dist.broadcast(b, src=0, async_op=True)
        got = w.get_future().wait()
        eq(got[0], base(0))

    def t_async_all_gathers_back_to_back():
        # ZeRO-3's pattern: gathers issued back to back, waited on after (here in reverse
        # order, one polled first), with temporaries as inputs: every output is its own
        # gather's, non-contiguous ones included, however the host side completes them.
        outs = [torch.empty(n * 6, device=d) for _ in range(4)]
        works = [dist.all_gather_into_tensor(outs[j], (base(rank) + 100 * j).to(d), async_op=True)
                 for j in range(4)]
        lists = [[torch.empty(3, 2, device=d).t() for _ in range(n)] for _ in range(2)]
        works += [dist.all_gather(lists[j], (base(rank).reshape(2, 3) * (j + 2)).to(d), async_op=True)
                  for j in range(2)]
        while not works[0].is_completed():
            pass
        eq(outs[0], torch.cat([base(k) for k in range(n)]))
        for w in reversed(works):
            assert w.wait() is True and w.is_completed() and w.is_success()
        for j in range(4):
            eq(outs[j], torch.cat([base(k) + 100 * j for k in range(n)]))
        for j in range(2):
            for r in range(n):
                eq(lists[j][r], base(r).reshape(2, 3) * (j + 2))
        assert works[1].get_future().wait()[0] is outs[1]

    def t_gathers_in_flight_finish_when_needed():
        # Gathers never waited on: what reads or writes their bytes next finds them settled -
        # a gather of a gather's output, an all_reduce of one, a device synchronize, a
        # coalescing block's end - while a gather of other tensors leaves them in flight.
        mod = getattr(torch, d.type)
        g1 = torch.empty(n * 6, device=d)
        w1 = dist.all_gather_into_tensor(g1, base(rank).to(d), async_op=True)
        g2 = torch.empty(n * n * 6, device=d)
        dist.all_gather_into_tensor(g2, g1, async_op=True).wait()   # reads g1: after w1
        eq(g2, torch.cat([torch.cat([base(k) for k in range(n)])] * n))
        assert w1.is_completed()
        g3 = torch.empty(n * 6, device=d)
        w3 = dist.all_gather_into_tensor(g3, (base(rank) * 3).to(d), async_op=True)
        s = torch.ones(n * 6, device=d)
        dist.all_reduce(g3 if rank == 0 else s)            # rank 0 reduces g3: gathered first
        eq(g3 if rank == 0 else s, torch.cat([base(k) * 3 for k in range(n)]) + (n - 1))
        g4 = torch.empty(n * 6, device=d)
        dist.all_gather_into_tensor(g4, (base(rank) + 7).to(d), async_op=True)
        mod.synchronize()
        eq(g4, torch.cat([base(k) + 7 for k in range(n)]))
        # ... as does a synchronize of a stream or of an event recorded after the gather, or
        # a query of one that finds the work done (a polling loop, then a read)
        from cardsim_torch import in_flight
        side = mod.Stream()
        for how in ("stream", "event", "stream query", "event query"):
            g5 = torch.empty(n * 6, device=d)
            with mod.stream(side):
                dist.all_gather_into_tensor(g5, (base(rank) + 11).to(d), async_op=True)
                ev = mod.Event()
                ev.record()
            assert in_flight.any_in_flight()
            waited = side if how.startswith("stream") else ev
            if how.endswith("query"):
                while not waited.query():
                    pass
            else:
                waited.synchronize()
            assert not in_flight.any_in_flight(), how
            eq(g5, torch.cat([base(k) + 11 for k in range(n)]))
        outs = [torch.empty(n * 6, device=d) for _ in range(3)]
        with dist._coalescing_manager(device=d, async_ops=True) as cm:
            for j in range(3):
                dist.all_gather_into_tensor(outs[j], (base(rank) - j).to(d))
        cm.wait()
        for j in range(3):
            eq(outs[j], torch.cat([base(k) - j for k in range(n)]))
        w3.wait()

    def t_non_contiguous():
        m = (torch.arange(24, dtype=torch.float32).reshape(4, 6) * (rank + 1)).to(d)
        col = m[:, 1]
        assert not col.is_contiguous()
        dist.all_reduce(col)
        want = torch.arange(24, dtype=torch.float32).reshape(4, 6) * (rank + 1)
        want[:, 1] = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, 1] * sum(range(1, n + 1))
        eq(m, want)                       # the column was reduced in place, the rest untouched
        mt = (torch.arange(12, dtype=torch.float32).reshape(3, 4) + rank).to(d).t()
        assert not mt.is_contiguous()
        dist.broadcast(mt, src=0)
        eq(mt, torch.arange(12, dtype=torch.float32).reshape(3, 4).t())
        outs = [torch.empty(4, 3, device=d).t() for _ in range(n)]
        dist.all_gather(outs, (torch.ones(3, 4) * rank).to(d).t().contiguous().t())
        for r in range(n):
            eq(outs[r], torch.ones(3, 4) * r)
        # lists of non-contiguous inputs (columns): each packed copy held until the call ends
        grid = lambda k: torch.arange(4 * n, dtype=torch.float32).reshape(4, n) + 100 * k
        cols = list(grid(rank).to(d).chunk(n, dim=1))
        outs = [torch.zeros(4, 1, device=d).t().t() for _ in range(n)]
        dist.all_to_all(outs, cols)
        for k in range(n):
            eq(outs[k], grid(k)[:, rank:rank + 1])
        out = torch.zeros(1, 4, device=d).t()          # a non-contiguous output too
        dist.scatter(out, cols if rank == 0 else None, src=0)
        eq(out, grid(0)[:, rank:rank + 1])
        out = torch.zeros(1, 4, device=d).t()
        dist.reduce_scatter(out, cols)
        eq(out, sum(grid(k) for k in range(n))[:, rank:rank + 1])

    def t_timing():
        from cardsim_torch import _C
        props = mod.get_device_properties(d)
        times, durations = {}, {}
        for nbytes in (4, 1 << 16, 1 << 24):
            t = torch.ones(nbytes // 4, device=d)
            # after a barrier and a synchronize every rank's host stands at the barrier's
            # completion, so the ranks reach the all_reduce together
            mod.synchronize()
            dist.barrier()
            mod.synchronize()
            _C._set_activity_recording(True); _C._drain_activities()
            s = mod.Event(enable_timing=True); e = mod.Event(enable_timing=True)
            s.record(); dist.all_reduce(t); e.record(); e.synchronize()
            times[str(nbytes)] = s.elapsed_time(e)
            # the collective command's own duration on the card (simulated ns)
            coll = [a for a in _C._drain_activities() if a[0] == "collective" and a[3].startswith("all_reduce:")]
            _C._set_activity_recording(False)
            assert len(coll) == 1, coll
            durations[str(nbytes)] = [round((coll[0][5] - coll[0][4]) * 1000), coll[0][3].split(":")[1]]
            eq(t[:3], torch.full((min(3, t.numel()),), float(n)))
        res["timing_data"] = {"ms": times, "ps": durations, "link": props.host_link_bandwidth,
                              "preset": props.preset}

    def t_capture_refused():
        # Bytes move when the call is made, so a graph could not replay a collective: the
        # backend refuses it during capture, and the stream and group stay usable.
        s = mod.Stream()
        g = getattr(mod, {"mlu": "MLUGraph", "supa": "SUPAGraph"}[CARD])()
        t = torch.ones(4, device=d)
        try:
            with mod.graph(g, stream=s):
                dist.all_reduce(t)
        except RuntimeError as e:
            assert "cannot be captured" in str(e) and BACKEND in str(e), e
        else:
            raise AssertionError("all_reduce was captured")
        dist.all_reduce(t)
        eq(t, torch.full((4,), float(n)))

    def t_charges():
        # barrier, send and recv occupy the communication stream for their alpha-beta time
        from cardsim_torch import _C
        t = torch.zeros(1024, device=d)
        dist.barrier()
        mod.synchronize()   # every rank now starts from the same simulated time
        _C._set_activity_recording(True); _C._drain_activities()
        dist.barrier()
        issued = None
        if rank == 0:
            dist.send(t + 1, 1)
            issued = _C._host_time_ns()   # the send's issue ends as its call returns
        elif rank == 1:
            dist.recv(t, 0)
            eq(t[:2], torch.ones(2))
        mod.synchronize()
        drained = [a for a in _C._drain_activities() if a[0] == "collective"]
        acts = [(a[3].split(":")[0], round((a[5] - a[4]) * 1000)) for a in drained]
        spans = [(a[3].split(":")[0], a[4], a[5]) for a in drained]
        _C._set_activity_recording(False)
        res["charges_data"] = {"acts": acts, "spans": spans, "issued": issued, "link": mod.get_device_properties(d).host_link_bandwidth,
                               "preset": mod.get_device_properties(d).preset}

    run_cases({k[2:]: v for k, v in sorted(locals().items()) if k.startswith("t_")}, res, dist.barrier)
    q.put((rank, res))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    spawn_world(worker, WORLD)
'''

COLLECTIVES = ["backend", "bound_device", "all_reduce", "all_reduce_dtypes", "all_reduce_coalesced", "all_gather", "all_gather_uneven",
               "all_gather_into_tensor", "all_gather_into_tensor_stacked", "single_forms", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
               "reduce", "gather", "scatter", "all_to_all", "all_to_all_single",
               "all_to_all_single_uneven", "all_to_all_self_split_checked", "all_to_all_timing", "send_recv", "sends_are_buffered", "recv_any", "isend_irecv", "barrier", "objects",
               "async_op", "async_all_gathers_back_to_back", "gathers_in_flight_finish_when_needed", "async_wait_orders_streams", "unsupported_op_named", "reduce_scatter_bits_of_gloo", "direct_calls", "non_contiguous", "capture_refused"]

WORLDS = [("mlu", 2), ("mlu", 3), ("supa", 3)]

KNOWN_BUGS: dict = {}


_cache: dict = {}


@pytest.fixture(scope="module")
def world_results(py, tmp_path_factory):
    def get(card, world):
        if (card, world) not in _cache:
            script = tmp_path_factory.mktemp("coll") / "collectives_worker.py"
            script.write_text(WORKER)
            code = (f"import runpy, sys; sys.path.insert(0, {str(HERE)!r}); "
                    f"sys.argv = [{str(script)!r}, {card!r}, '{world}', "
                    f"'{free_port()}']; runpy.run_path({str(script)!r}, run_name='__main__')")
            proc = py(code, timeout=240)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                _cache[(card, world)] = (f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n"
                                         f"{proc.stderr[-5000:]}")
            else:
                _cache[(card, world)] = {int(k): v for k, v in json.loads(lines[-1][7:]).items()}
        got = _cache[(card, world)]
        if isinstance(got, str):
            pytest.fail(f"the {world}-rank {card} run failed:\n{got}")
        return got
    return get


@pytest.mark.parametrize("card,world,name", [
    pytest.param(c, w, name, id=f"{c}-{w}ranks-{name}",
                 marks=[pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[name])] if name in KNOWN_BUGS else [])
    for c, w in WORLDS for name in COLLECTIVES])
def test_collective(world_results, card, world, name):
    res = world_results(card, world)
    assert sorted(res) == list(range(world))
    errors = {r: res[r].get(name, "not run") for r in res if res[r].get(name) != "ok"}
    assert not errors, "\n".join(f"rank {r}: {e}" for r, e in errors.items())


def _model_us(preset: str, op: str, ranks: int, nbytes: int) -> tuple[float, str]:
    """The fabric model's time (us) and algorithm for one collective, from cardsim collbench."""
    import os
    import subprocess
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    out = subprocess.run([str(ROOT / ".venv" / "bin" / "cardsim"), "collbench", "--model-only", "--preset", preset,
                          "--ranks", str(ranks), "--op", op, "--min-bytes", str(nbytes), "--max-bytes", str(nbytes),
                          "--csv"], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    row = out.stdout.strip().splitlines()[1].split(",")
    return float(row[4]), row[1]


# host.launch_overhead of mlu370-x8 and br100 (the presets of WORLDS).
LAUNCH_US = 4.0


def _on_card_us(model_us: float) -> float:
    """A collective's time on its stream: the model's, or, shorter than the host's cost of
    issuing it, until that issue ends (it starts 1 ps into its call)."""
    return max(model_us, LAUNCH_US - 1e-6)


@pytest.mark.parametrize("card,world", WORLDS, ids=[f"{c}-{w}ranks" for c, w in WORLDS])
def test_all_reduce_time_is_the_fabric_models(world_results, card, world):
    """Live c10d all_reduce takes what `cardsim collbench --model-only` says for the same
    preset, ranks, size and algorithm, on every rank."""
    res = world_results(card, world)
    errors = {r: res[r].get("timing", "not run") for r in res if res[r].get("timing") != "ok"}
    assert not errors, "\n".join(f"rank {r}: {e}" for r, e in errors.items())
    timings = [res[r]["timing_data"] for r in range(world)]
    assert all(t == timings[0] for t in timings), timings     # every rank charges the same
    t = timings[0]
    for nbytes, (ps, algo) in t["ps"].items():
        want_us, want_algo = _model_us(t["preset"], "all_reduce", world, int(nbytes))
        assert algo == want_algo, (nbytes, algo, want_algo)
        assert ps * 1e-6 == pytest.approx(_on_card_us(want_us), abs=2e-3), (nbytes, ps, want_us)
        # event to event on an idle stream: the model's time from the call's start (the launch
        # overhead overlaps it), or, launch-bound, the issue and the end event's record
        ms = t["ms"][nbytes]
        if want_us > LAUNCH_US + 1.0:
            assert ms == pytest.approx(want_us * 1e-3, abs=2e-6), (nbytes, ms, want_us)
        assert want_us * 1e-3 * (1 - 1e-6) <= ms <= max(want_us, LAUNCH_US + 1.0) * 1e-3 + 2e-6, (nbytes, ms, want_us)
    # a large message takes longer than a small one by its bytes over the fabric
    assert t["ps"][str(1 << 24)][0] > 10 * t["ps"]["4"][0]


@pytest.mark.parametrize("card,world", WORLDS, ids=[f"{c}-{w}ranks" for c, w in WORLDS])
def test_barrier_send_recv_take_the_fabric_models_time(world_results, card, world):
    res = world_results(card, world)
    errors = {r: res[r].get("charges", "not run") for r in res if res[r].get("charges") != "ok"}
    assert not errors, "\n".join(f"rank {r}: {e}" for r, e in errors.items())
    preset = res[0]["charges_data"]["preset"]
    barrier_us, _ = _model_us(preset, "barrier", world, 4)
    p2p_us, _ = _model_us(preset, "send_recv", 2, 1024 * 4)   # rank 0 -> rank 1: devices 0 and 1
    for r in range(world):
        acts = dict(res[r]["charges_data"]["acts"])
        assert acts.get("barrier", 0) * 1e-6 == pytest.approx(_on_card_us(barrier_us), abs=2e-3), (r, acts)
        if r != 0 and r != 1:
            assert "send_recv" not in acts, (r, acts)
    # the send goes on alone: from its start (behind t + 1, or at its call) for the model's
    # time, but not ending before its call has issued it (the launch overhead overlaps it)
    (send,) = [sp for sp in res[0]["charges_data"]["spans"] if sp[0] == "send_recv"]
    issued = res[0]["charges_data"]["issued"]
    # (collbench prints microseconds to 3 decimals: the model's time is known to half a ns)
    assert send[2] == pytest.approx(max(send[1] + p2p_us * 1e3, issued), abs=0.5), (send, issued, p2p_us)
    # the receive (posted earlier: rank 0 computes t + 1 first) ends when the data has arrived
    (recv,) = [sp for sp in res[1]["charges_data"]["spans"] if sp[0] == "send_recv"]
    assert recv[2] == pytest.approx(max(send[1] + p2p_us * 1e3, issued), abs=0.5), (send, recv, issued)
    assert recv[2] == pytest.approx(send[2], abs=2e-3), (send, recv)   # the two sides end together


@pytest.mark.parametrize("card,world", WORLDS, ids=[f"{c}-{w}ranks" for c, w in WORLDS])
def test_an_uneven_all_to_all_takes_its_largest_pairs_time(world_results, card, world):
    """all_to_all_single with splits is timed pair by pair: a rank sending 3/4 of its buffer
    to one peer takes as long as that transfer (on 2 ranks, each direction its own link:
    `collbench`'s send_recv of those bytes), longer than the even exchange of the buffer."""
    res = world_results(card, world)
    data = [res[r]["all_to_all_timing_data"] for r in range(world)]
    spans = [d["spans"] for d in data]
    for name in ("even", "skewed"):   # every member ends together, from a common start
        assert all(s[name] == pytest.approx(spans[0][name], abs=2e-3) for s in spans), spans
    preset = data[0]["preset"]
    even_us, _ = _model_us(preset, "all_to_all", world, data[0]["bytes"])
    assert spans[0]["even"] == pytest.approx(even_us, abs=2e-3), (spans, even_us)
    assert spans[0]["skewed"] > spans[0]["even"] * 1.2, spans
    if world == 2:
        pair_us, _ = _model_us(preset, "send_recv", 2, data[0]["skew_bytes"])
        assert spans[0]["skewed"] == pytest.approx(pair_us, abs=2e-3), (spans, pair_us)
