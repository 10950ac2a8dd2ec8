"""The live path of ``cardsim collbench --ranks N``: N rank processes, one emulated device
each, run the collective through torch.distributed's ``cncl``/``bccl`` backend (the job's
shared fabric server times it) and measure it with device events, as nccl-tests does with
CUDA events.

``python -m cardsim_torch.collbench --preset P --ranks N --op OP --sizes B1,B2,...
[--iters K] [--warmup W] [--execution timing|full]`` starts the ranks and prints one line
per size, ``<bytes> <time_us>``: the bytes actually moved (nccl-tests' size, rounded down
so that every rank's share is whole float32 elements) and the mean over the ranks of the
event-measured time per iteration (send_recv, where every rank sends to the next: the slowest
rank's). The ``cardsim`` CLI formats them. CARDSIM_COLL_ALGO,
CARDSIM_NODES and CARDSIM_CONFIG reach the ranks through the environment.

Execution: ``timing`` (the default) moves no bytes (see CARDSIM_EXECUTION), which leaves
every simulated time unchanged and makes large sizes cheap; ``full`` moves them through
Gloo and checks each result against its closed form, as nccl-tests' ``-c 1`` does.
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time

# Device time the stream is held per timed call while the host issues them (see _worker):
# well above any preset's host cost per call (a launch is a few microseconds).
HOLD_PER_CALL_S = 100e-6

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv",
       "barrier")


def _personality(preset: str) -> tuple[str, str]:
    """(package, device) that drives the preset's card: Biren presets run under torch_supa."""
    return ("torch_supa", "supa") if preset.startswith("br") else ("torch_mlu", "mlu")


def _elements(op: str, nbytes: int, world: int) -> int:
    """float32 elements of nccl-tests' buffer for `op`, rounded down so shares are whole."""
    n = nbytes // 4
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        n -= n % world
    return max(n, 1) if op == "barrier" else n   # 0: too small for one element per rank


def _worker(args) -> int:
    import importlib
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    package, devtype = _personality(args.preset)
    importlib.import_module(package)
    from . import _C
    mod = getattr(torch, devtype)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    mod.set_device(0)
    dev = torch.device(devtype, 0)
    dist.init_process_group("bccl" if devtype == "supa" else "cncl", timeout=timedelta(seconds=args.timeout))
    full = args.execution == "full"

    def make(op: str, n: int):
        """Input and output buffers for one call of `op` on `n` elements (nccl-tests' size)."""
        share = n // world
        fill = float(rank + 1)
        if op == "all_gather":
            return torch.full((share,), fill, device=dev), torch.empty(n, device=dev)
        if op == "reduce_scatter":
            return torch.full((n,), fill, device=dev), torch.empty(share, device=dev)
        if op in ("all_to_all", "send_recv"):
            return torch.full((n,), fill, device=dev), torch.empty(n, device=dev)
        return torch.full((n,), fill, device=dev), None

    def run(op: str, src, dst) -> None:
        if op == "all_reduce":
            dist.all_reduce(src)
        elif op == "all_gather":
            dist.all_gather_into_tensor(dst, src)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(dst, src)
        elif op == "broadcast":
            dist.broadcast(src, 0)
        elif op == "reduce":
            dist.reduce(src, 0)
        elif op == "all_to_all":
            dist.all_to_all_single(dst, src)
        elif op == "send_recv":
            # nccl-tests' sendrecv: every rank sends to the next and receives from the previous
            ops = [dist.P2POp(dist.isend, src, (rank + 1) % world), dist.P2POp(dist.irecv, dst, (rank - 1) % world)]
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        elif op == "barrier":
            dist.barrier()

    def check(op: str, n: int, src, dst) -> None:
        """The result of the last call (nccl-tests -c): after `iters + warmup` calls."""
        calls = args.iters + args.warmup + 1
        total = world * (world + 1) / 2
        if op == "all_reduce":
            # each call sums the previous sums: rank-independent after the first
            want = total * world ** (calls - 1)
        elif op == "all_gather":
            want = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(n // world)
        elif op == "reduce_scatter":
            want = total
        elif op == "broadcast":
            want = 1.0
        elif op == "all_to_all":
            want = torch.arange(1, world + 1, dtype=torch.float32).repeat_interleave(n // world)
        elif op == "reduce":
            want = None     # non-root buffers may serve as scratch; the root's depends on them
        elif op == "send_recv":
            want = float((rank - 1) % world + 1)     # the previous rank's fill
        else:
            return
        if want is None:
            return
        got = (dst if op in ("all_gather", "reduce_scatter", "all_to_all", "send_recv") else src).cpu()
        want_t = want if isinstance(want, torch.Tensor) else torch.full_like(got, want)
        if not torch.equal(got, want_t):
            bad = (got != want_t).nonzero()[0].item()
            raise SystemExit(f"cardsim collbench: rank {rank}: {op} of {n * 4} bytes gave a wrong result at "
                             f"element {bad}: {got[bad].item()} (expected {want_t[bad].item()})")

    for i, nbytes in enumerate(args.sizes):
        n = _elements(args.op, nbytes, world)
        if n == 0:   # an empty collective: NCCL returns at once, as nccl-tests' 0-byte rows show
            print(f"T {i} 0 0.0", flush=True)
            continue
        src, dst = make(args.op, n)
        for _ in range(args.warmup):
            run(args.op, src, dst)
        # Line the ranks up, then hold the stream while the host issues the timed calls
        # (ahead of them one untimed call, then the start event): they run back to back as
        # the stream gets to them, never waiting for the host, so a row is the collective's
        # own time as the model gives it (--model-only), tiny messages included (whose calls
        # would otherwise be paced by the host's launch cost), as nccl-tests' timing of a
        # captured graph (-G) shows it on real cards. Every rank's hold ends at once.
        dist.barrier()
        mod.synchronize()
        if args.op != "barrier":   # (a barrier holds its caller until it completes: no queue to build)
            _C._stream_delay(mod.current_device(), HOLD_PER_CALL_S * (args.iters + 2))
        run(args.op, src, dst)
        start, end = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            run(args.op, src, dst)
        end.record()
        end.synchronize()
        us = start.elapsed_time(end) * 1e3 / args.iters
        if full:
            check(args.op, n, src, dst)
        print(f"T {i} {n * 4} {us:.6f}", flush=True)
        del src, dst
    dist.barrier()
    dist.destroy_process_group()
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(args) -> int:
    if args.op == "send_recv" and args.ranks < 2:
        print("cardsim collbench: send_recv needs --ranks 2 or more", file=sys.stderr)
        return 2
    port = _free_port()
    base = {k: v for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "CARDSIM_DEVICES", "CARDSIM_FABRIC", "CARDSIM_TRACE", "MLU_VISIBLE_DEVICES",
                         "SUPA_VISIBLE_DEVICES", "BR_VISIBLE_DEVICES")}
    base.update(CARDSIM_PRESET=args.preset, CARDSIM_DEVICES="1", CARDSIM_EXECUTION=args.execution,
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(args.ranks), LOCAL_RANK="0",
                PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "cardsim_torch.collbench", "--worker", "--preset", args.preset,
           "--ranks", str(args.ranks), "--op", args.op, "--sizes", ",".join(map(str, args.sizes)),
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--execution", args.execution,
           "--timeout", str(args.timeout)]
    procs = []
    for r in range(args.ranks):
        env = dict(base, RANK=str(r))
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs: list[str] = [""] * args.ranks
    errs: list[str] = [""] * args.ranks
    failed = None
    # Wait for all; the first to fail takes the others down (they would hang in a collective).
    pending = set(range(args.ranks))
    while pending:
        for r in sorted(pending):
            p = procs[r]
            if p.poll() is None:
                continue
            outs[r], errs[r] = p.communicate()
            pending.discard(r)
            if p.returncode != 0 and failed is None:
                failed = r
                for q in procs:
                    if q.poll() is None:
                        q.kill()
        time.sleep(0.02)
    if failed is not None:
        tail = "\n".join(errs[failed].strip().splitlines()[-15:])
        print(f"cardsim collbench: rank {failed} of {args.ranks} failed (exit {procs[failed].returncode}):\n{tail}",
              file=sys.stderr)
        return 1
    # Rows by the size's place in the sweep (sizes too small for one element per rank are all
    # 0 bytes, a row each).
    times: dict[int, list[float]] = {}
    moved: dict[int, int] = {}
    for r in range(args.ranks):
        for line in outs[r].splitlines():
            if line.startswith("T "):
                _, i, b, us = line.split()
                moved[int(i)] = int(b)
                times.setdefault(int(i), []).append(float(us))
    for i, nbytes in enumerate(args.sizes):
        if len(times.get(i, [])) != args.ranks:
            print(f"cardsim collbench: {len(times.get(i, []))} of {args.ranks} ranks reported the row for "
                  f"{nbytes} bytes", file=sys.stderr)
            return 1
        # send_recv: the slowest rank's (its pair bounds the exchange); otherwise the mean
        t = max(times[i]) if args.op == "send_recv" else sum(times[i]) / len(times[i])
        print(f"{moved[i]} {t:.6f}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cardsim_torch.collbench")
    ap.add_argument("--preset", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--op", choices=OPS, required=True)
    ap.add_argument("--sizes", required=True, help="comma-separated byte counts")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--execution", choices=("timing", "full"), default="timing")
    ap.add_argument("--timeout", type=float, default=300.0, help="process-group timeout in seconds")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.ranks < 1 or args.iters < 1 or args.warmup < 0:
        ap.error("--ranks and --iters must be at least 1, --warmup at least 0")
    return _worker(args) if args.worker else _launch(args)


if __name__ == "__main__":
    sys.exit(main())
