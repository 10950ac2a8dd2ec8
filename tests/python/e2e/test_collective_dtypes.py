"""Collectives of the dtypes Gloo does not take (int16, the unsigned integers, float8), on the
cncl backend: data movement bit for bit, reductions as the card's arithmetic does them
(integers wrap, unsigned order is unsigned, float8 sums round once), checked against values
computed here, in full and in timing mode (whose small collectives carry their values)."""
import json
import pathlib

import pytest

from conftest import free_port

WORKER = r'''
import os, sys
from datetime import timedelta
import torch
import torch.distributed as dist
from world_harness import run_cases, spawn_world

WORLD, PORT = int(sys.argv[1]), sys.argv[2]
U64 = 1 << 64


def worker(rank, n, q):
    import warnings
    warnings.filterwarnings("ignore")
    import torch_mlu
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=PORT)
    torch.mlu.set_device(rank)
    dist.init_process_group("cncl", rank=rank, world_size=n, timeout=timedelta(seconds=120))
    d = torch.device("mlu", rank)
    res = {}

    def ints(dt, values):                     # Python ints, wrapped to dt's bits
        bits = {torch.int16: 16, torch.uint16: 16, torch.uint32: 32, torch.uint64: 64}[dt]
        signed = {torch.int16: torch.int16, torch.uint16: torch.int16, torch.uint32: torch.int32,
                  torch.uint64: torch.int64}[dt]
        m = 1 << bits
        wrapped = [((v % m) - m if (v % m) >= m // 2 else v % m) for v in values]
        return torch.tensor(wrapped, dtype=signed).view(dt)

    def as_int(t):                             # a tensor of dt back to Python ints (unsigned as such)
        dt = t.dtype
        signed = {torch.int16: torch.int16, torch.uint16: torch.int16, torch.uint32: torch.int32,
                  torch.uint64: torch.int64}[dt]
        bits = torch.iinfo(signed).bits
        vals = t.cpu().view(signed).tolist()
        return vals if dt == torch.int16 else [v % (1 << bits) for v in vals]

    def same_bits(a, b):
        a, b = a.cpu(), b.cpu()
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
        assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), (a, b)

    def t_integer_reductions():
        inputs = {
            torch.int16: lambda r: [30000, -30000, 7 + r, 1000 * r, -(r + 1)],
            torch.uint16: lambda r: [65535 - r, 40000 + r, r, 1 << 15, 3],
            torch.uint32: lambda r: [4_000_000_000 + r, r, (1 << 31) + 5 * r, 1, 0xFFFFFFFF],
            torch.uint64: lambda r: [(1 << 63) + r, r, U64 - 1 - r, 5, 1 << 40],
        }
        for dt, f in inputs.items():
            cols = list(zip(*[f(r) for r in range(n)]))
            refs = {
                dist.ReduceOp.SUM: [sum(c) for c in cols],
                dist.ReduceOp.MAX: [max(c) for c in cols],
                dist.ReduceOp.MIN: [min(c) for c in cols],
                dist.ReduceOp.BXOR: [c[0] ^ c[1] ^ (c[2] if n > 2 else 0) for c in cols],
            }
            for op, ref in refs.items():
                t = ints(dt, f(rank)).to(d)
                dist.all_reduce(t, op=op)
                want = as_int(ints(dt, ref))
                assert as_int(t) == want, (dt, op, as_int(t), want)
            # reduce: the root holds the result, the others keep their values
            t = ints(dt, f(rank)).to(d)
            dist.reduce(t, dst=n - 1, op=dist.ReduceOp.MAX)
            want = ints(dt, refs[dist.ReduceOp.MAX]) if rank == n - 1 else ints(dt, f(rank))
            assert as_int(t) == as_int(want), (dt, "reduce", as_int(t), as_int(want))

    def t_reduce_scatter():
        for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
            x = lambda r: torch.tensor([0.5 * (r + 1), 3.0 + r]).to(dt)
            out = torch.empty(1, dtype=dt, device=d)
            dist.reduce_scatter_tensor(out, torch.cat([x(rank)[:1]] * n).to(d))
            same_bits(out, sum(x(r)[:1].float() for r in range(n)).to(dt))
        for dt in (torch.int16, torch.uint32):
            # rank r's block j: [j * 10 + r, 2**15 + r] (block j's sum wraps for int16)
            row = lambda r: [v for j in range(n) for v in (j * 10 + r, (1 << 15) + r * 7)]
            inp = ints(dt, row(rank)).to(d)
            out = torch.empty(2, dtype=dt, device=d)
            dist.reduce_scatter_tensor(out, inp)
            want = [sum(row(r)[2 * rank + k] for r in range(n)) for k in range(2)]
            assert as_int(out) == as_int(ints(dt, want)), (dt, as_int(out), want)
            outs = torch.empty(2, dtype=dt, device=d)
            dist.reduce_scatter(outs, list(inp.chunk(n)), op=dist.ReduceOp.MAX)
            want = [max(row(r)[2 * rank + k] for r in range(n)) for k in range(2)]
            assert as_int(outs) == as_int(ints(dt, want)), (dt, "list", as_int(outs), want)

    def t_integer_avg():
        # the sum as the type holds it (wrapped), divided, truncated; unsigned divided unsigned
        for dt, f in [(torch.int16, lambda r: [32766 - r, -7 * r, 5]), (torch.uint16, lambda r: [65535 - r, r, 9]),
                      (torch.uint32, lambda r: [0xFFFFFFFF - r, r, 9]), (torch.uint64, lambda r: [(1 << 63) + 2 + r, 4, U64 - 1])]:
            bits = {torch.int16: 16, torch.uint16: 16, torch.uint32: 32, torch.uint64: 64}[dt]
            t = ints(dt, f(rank)).to(d)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            sums = [sum(c) % (1 << bits) for c in zip(*[f(r) for r in range(n)])]
            if dt == torch.int16:
                sums = [s - (1 << 16) if s >= 1 << 15 else s for s in sums]
            want = [int(s / n) if dt == torch.int16 else s // n for s in sums]
            assert as_int(t) == as_int(ints(dt, want)), (dt, as_int(t), want)

    def t_float8_reductions():
        for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
            x = lambda r: torch.tensor([0.5 * (r + 1), -1.25, 3.0 + r, 0.0, 1.0 / (r + 1)]).to(dt)
            allin = torch.stack([x(r).float() for r in range(n)])
            for op, ref in [(dist.ReduceOp.SUM, allin.sum(0)), (dist.ReduceOp.MAX, allin.max(0).values),
                            (dist.ReduceOp.AVG, allin.mean(0))]:
                t = x(rank).to(d)
                dist.all_reduce(t, op=op)
                same_bits(t, ref.to(dt))   # reduced in float32, rounded once

    def t_complex_and_refused_ops():
        # complex moves as its real view in every collective (torch hands gather and reduce
        # the complex tensor itself)
        for dt in (torch.complex64, torch.complex128):
            x = lambda r: torch.tensor([1 + 2j * r, -3.5 + 0.25j, r * 1j]).to(dt)
            got = [torch.empty(3, dtype=dt, device=d) for _ in range(n)] if rank == 0 else None
            dist.gather(x(rank).to(d), got, dst=0)
            if rank == 0:
                for r in range(n):
                    same_bits(got[r], x(r))
            outs = [torch.empty(3, dtype=dt, device=d) for _ in range(n)]
            dist.all_to_all(outs, [x(10 * rank + j).to(d) for j in range(n)])
            for j in range(n):
                same_bits(outs[j], x(10 * j + rank))
            t = x(rank).to(d)
            dist.reduce(t, dst=1)
            if rank == 1:
                same_bits(t, sum(x(r) for r in range(n)))
        # what the card's library refuses, before anything moves (the group goes on)
        for t, op, words in [(torch.ones(2, device=d), dist.ReduceOp.BAND, "cannot use ReduceOp.BAND with non-integral dtype float32"),
                             (torch.ones(2, dtype=torch.complex64, device=d), dist.ReduceOp.MAX,
                              "ReduceOp.MAX is not defined on complex tensors (complex64)")]:
            try:
                dist.reduce(t, dst=0, op=op)
                raise AssertionError(f"{op} on {t.dtype} ran")
            except ValueError as e:
                assert words in str(e), e
        t = torch.ones(2).to(d)   # copied from the host: carried in timing mode too
        dist.all_reduce(t)
        same_bits(t, torch.full((2,), float(n)))

    def t_data_movement_bit_exact():
        def payload(dt, r, k=6):               # bytes of every pattern, NaN encodings included
            raw = ((torch.arange(k * torch.empty(0, dtype=dt).element_size()) * 37 + 101 * r + 0x7F) % 256)
            return raw.to(torch.uint8).view(dt)
        for dt in (torch.int16, torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2):
            out = torch.empty(n * 6, dtype=dt, device=d)
            dist.all_gather_into_tensor(out, payload(dt, rank).to(d))
            same_bits(out, torch.cat([payload(dt, r) for r in range(n)]))
            outs = [torch.empty(6, dtype=dt, device=d) for _ in range(n)]
            dist.all_gather(outs, payload(dt, rank).to(d))
            for r in range(n):
                same_bits(outs[r], payload(dt, r))
            t = payload(dt, rank).to(d)
            dist.broadcast(t, src=n - 1)
            same_bits(t, payload(dt, n - 1))
            inp = torch.cat([payload(dt, 10 * rank + j, 2) for j in range(n)]).to(d)
            out = torch.empty(2 * n, dtype=dt, device=d)
            dist.all_to_all_single(out, inp)
            same_bits(out, torch.cat([payload(dt, 10 * j + rank, 2) for j in range(n)]))
            outs = [torch.empty(2, dtype=dt, device=d) for _ in range(n)]
            dist.all_to_all(outs, [payload(dt, 10 * rank + j, 2).to(d) for j in range(n)])
            for j in range(n):
                same_bits(outs[j], payload(dt, 10 * j + rank, 2))
            got = [torch.empty(6, dtype=dt, device=d) for _ in range(n)] if rank == 0 else None
            dist.gather(payload(dt, rank).to(d), got, dst=0)
            if rank == 0:
                for r in range(n):
                    same_bits(got[r], payload(dt, r))
            out = torch.empty(6, dtype=dt, device=d)
            dist.scatter(out, [payload(dt, 50 + r).to(d) for r in range(n)] if rank == 1 else None, src=1)
            same_bits(out, payload(dt, 50 + rank))

    run_cases({k[2:]: v for k, v in sorted(locals().items()) if k.startswith("t_")}, res, dist.barrier)
    torch.mlu.synchronize()
    q.put((rank, res))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    spawn_world(worker, WORLD)
'''

CASES = ["integer_reductions", "integer_avg", "reduce_scatter", "float8_reductions", "complex_and_refused_ops", "data_movement_bit_exact"]
_cache: dict = {}
HERE = pathlib.Path(__file__).resolve().parent   # world_harness, for the worker script


@pytest.fixture(scope="module")
def results(py, tmp_path_factory):
    def get(mode):
        if mode not in _cache:
            script = tmp_path_factory.mktemp("dtypes") / "dtypes_worker.py"
            script.write_text(WORKER)
            code = (f"import runpy, sys; sys.path.insert(0, {str(HERE)!r}); "
                    f"sys.argv = [{str(script)!r}, '3', '{free_port()}']; "
                    f"runpy.run_path({str(script)!r}, run_name='__main__')")
            proc = py(code, timeout=240, env={"CARDSIM_EXECUTION": mode})
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            _cache[mode] = ({int(k): v for k, v in json.loads(lines[-1][7:]).items()} if proc.returncode == 0 and lines
                            else f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
        got = _cache[mode]
        if isinstance(got, str):
            pytest.fail(f"the 3-rank run in {mode} mode failed:\n{got}")
        return got
    return get


@pytest.mark.parametrize("mode", ["full", "timing"])
@pytest.mark.parametrize("case", CASES)
def test_dtype(results, mode, case):
    res = results(mode)
    assert sorted(res) == [0, 1, 2]
    errors = {r: res[r].get(case, "not run") for r in res if res[r].get(case) != "ok"}
    assert not errors, "\n".join(f"rank {r}: {e}" for r, e in errors.items())
