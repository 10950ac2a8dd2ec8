"""Many ranks, one fabric: one process per rank sharing the fabric server that rank 0
starts (or a `cardsim fabricd`). Collectives complete on every rank at the latest arrival
plus the model's time, whatever order the processes start and arrive in, and a rank that
dies or hangs fails the others with an error naming the group, the collective and the rank."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import free_port

ROOT = pathlib.Path(__file__).resolve().parents[3]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")

WORKER = r'''
import json, os, sys, time
from datetime import timedelta
import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
scenario = os.environ["SCENARIO"]
time.sleep(float(os.environ.get("START_DELAY", "0")))
import torch_mlu
from cardsim_torch import _C
mod = torch.mlu
mod.set_device(0)
d = torch.device("mlu", 0)
dist.init_process_group("cncl", timeout=timedelta(seconds=float(os.environ.get("PG_TIMEOUT", "60"))))
out = {"rank": rank}


def coll_acts():
    return [(a[3], a[4], a[5]) for a in _C._drain_activities() if a[0] == "collective"]


# SUBGROUP=1: the collectives run in a group made over all ranks (not the default group).
group = dist.new_group(list(range(world))) if os.environ.get("SUBGROUP") else None


def timed_failure(t):
    """An all_reduce that should fail: its error (or None) and how long it took to come."""
    t0 = time.monotonic()
    try:
        dist.all_reduce(t, group=group)
        out["error"] = None
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["wall_s"] = time.monotonic() - t0


if scenario in ("copy_beside_collective", "collective_beside_copy"):
    # Each rank's process drives both chips of the first card; rank r's collective runs on
    # chip r, so the all_reduce of ranks 0, 1 crosses the chips' on-card link, as does a copy
    # from x on chip 0 to y on chip 1.
    mod.set_device(rank)
    n = int(os.environ["NBYTES"]) // 4
    t = torch.ones(n, device=torch.device("mlu", rank))
    if rank == 0:
        x, y = torch.ones(n, device="mlu:0"), torch.empty(n, device="mlu:1")

if scenario == "timing":
    # Ranks reach each collective at different simulated times (different compute first);
    # wall-clock delays differ between runs.
    _C._set_activity_recording(True)
    x = torch.randn(64 * (rank + 1), 64 * (rank + 1), device=d)
    for step in range(3):
        time.sleep(float(os.environ.get("STEP_DELAY", "0")) * ((rank + step) % world))
        y = x @ x
        t = torch.ones(1 << 16, device=d) * (rank + 1)
        dist.all_reduce(t)
        side = mod.Stream()
        with mod.stream(side):
            u = torch.ones(1 << 10, device=d)
            dist.all_reduce(u)
        z = y @ y           # overlaps the side-stream collective
    mod.synchronize()
    out["sum"] = t[0].item()
    out["acts"] = coll_acts()
    out["host_ns"] = _C._host_time_ns()
elif scenario == "events_around_one_call":
    # The plain way to time a collective: events on the current stream, idle, around one
    # call, after a barrier and a synchronize (the ranks then stand together).
    times, hosts = {}, []
    if rank == 1:
        y = torch.randn(256, 256, device=d) @ torch.randn(256, 256, device=d)   # misaligned first
    for n in (4, 1 << 12, 1 << 18, 1 << 20, 1 << 24):
        t = torch.ones(max(1, n // 4), device=d)
        mod.synchronize()
        dist.barrier()
        mod.synchronize()
        hosts.append(_C._host_time_ns())
        b, e = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        b.record()
        dist.all_reduce(t)
        e.record()
        e.synchronize()
        times[n] = b.elapsed_time(e) * 1e3
    out["us"] = times
    out["hosts"] = hosts
elif scenario == "on_another_device":
    # The process sees the node's 8 chips and runs rank r on chip STRIDE x r.
    dev = torch.device("mlu", int(os.environ["STRIDE"]) * rank)
    if os.environ.get("NOSET"):
        dist.barrier()   # before any collective, on device rank % 8 (torch's rule), not both on 0
    else:
        mod.set_device(dev)
    t = torch.ones(int(os.environ["NBYTES"]) // 4, device=dev)
    dist.all_reduce(t)
    mod.synchronize(dev)
    _C._set_activity_recording(True)
    dist.all_reduce(t)
    mod.synchronize(dev)
    out["sum"] = t[0].item()
    out["span"] = [e - s for _, s, e in coll_acts()]
elif scenario == "all_to_all_edges":
    # Values the ranks exchange (carried in timing mode too: 32 bytes each), splits the two
    # ranks disagree on, and a list whose input on rank 0 is a transposed view. (Values are
    # made on the host: in timing mode what the card computes reads as zeros.)
    x = (torch.arange(8, dtype=torch.float32) + 10 * rank).to(d)
    y = torch.empty(8, device=d)
    dist.all_to_all_single(y, x)
    out["single"] = y.cpu().tolist()
    outs = [torch.empty(4, device=d) for _ in range(2)]
    dist.all_to_all(outs, list(x.split(4)))
    out["list"] = [o.cpu().tolist() for o in outs]
    z = torch.empty(8 if rank == 0 else 6, device=d)    # rank 0 sends 4 and 2, rank 1 4 and 4
    dist.all_to_all_single(z, torch.ones(6 + 2 * rank).to(d), [4, 4] if rank == 0 else [2, 4], [4, 2 + 2 * rank])
    out["uneven"] = z.cpu().tolist()
    try:   # rank 1 expects 5 elements from rank 0, which sends it 3
        dist.all_to_all_single(torch.empty(6 if rank == 0 else 8, device=d), torch.ones(6, device=d),
                               [3, 3] if rank == 0 else [5, 3], [3, 3])
        out["mismatch"] = None
    except Exception as e:
        out["mismatch"] = f"{type(e).__name__}: {e}"
    try:   # rank 0 sends rank 1 2 elements; rank 1 runs the even exchange (3 from each)
        dist.all_to_all_single(torch.empty(6, device=d), torch.ones(5 if rank == 0 else 6, device=d),
                               [3, 3] if rank == 0 else None, [3, 2] if rank == 0 else None)
        out["mismatch_sender"] = None
    except Exception as e:
        out["mismatch_sender"] = f"{type(e).__name__}: {e}"
    t = torch.ones(4).to(d)
    dist.all_reduce(t)                      # the group goes on
    out["after"] = t.cpu().tolist()
    base = torch.ones(512, 1024, device=d)
    ins = [base[:, :512].t(), base[:, 512:].t()] if rank == 0 else [base[:, :512].contiguous(), base[:, 512:].contiguous()]
    outs = [torch.empty(512, 512, device=d) for _ in range(2)]
    mod.synchronize()
    dist.barrier()
    mod.synchronize()
    _C._set_activity_recording(True)
    dist.all_to_all(outs, ins)
    mod.synchronize()
    out["ends"] = [e for n, s, e in coll_acts() if n.startswith("all_to_all")]
elif scenario == "p2p_events":
    # Point to point timed the plain way, each side between events on its current stream:
    # blocking send/recv, isend/irecv, and a ring exchange in one batch.
    times = {}
    x = torch.ones(1 << 18, device=d)
    buf = torch.empty_like(x)
    peer = 1 - rank

    def blocking():
        dist.send(x, 1) if rank == 0 else dist.recv(buf, 0)

    def nonblocking():
        (dist.isend(x, 1) if rank == 0 else dist.irecv(buf, 0)).wait()

    def ring():
        for q in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, buf, peer)]):
            q.wait()
    for name, f in (("blocking", blocking), ("nonblocking", nonblocking), ("ring", ring)):
        f()
        mod.synchronize()
        dist.barrier()
        mod.synchronize()
        b, e = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        b.record()
        f()
        e.record()
        e.synchronize()
        times[name] = b.elapsed_time(e) * 1e3
    out["us"] = times
    # Sends are buffered: the last one may still be Gloo's to hand over when its caller is
    # done, and the os._exit below skips the group's end that would wait for it.
    dist.barrier()
elif scenario == "preferred_algo":
    # Under CARDSIM_COLL_ALGO every kind of call still runs; each is timed by the preferred
    # algorithm where it does that kind, else by the tuner's choice.
    _C._set_activity_recording(True)
    n = int(os.environ["NBYTES"]) // 4
    t = torch.ones(n, device=d)
    dist.all_reduce(t)
    outs = [torch.empty(n, device=d) for _ in range(world)]
    dist.all_gather(outs, t)
    dist.reduce_scatter_tensor(torch.empty(n // world, device=d), t)
    if rank == 0:
        dist.send(t, 1)
    elif rank == 1:
        dist.recv(t, 0)
    mod.synchronize()
    out["sum"] = outs[-1][0].item()
    out["names"] = [a[3] for a in _C._drain_activities() if a[0] == "collective"]
elif scenario == "kill":
    t = torch.ones(16, device=d)
    dist.all_reduce(t, group=group)
    mod.synchronize()
    if rank == world - 1:
        os._exit(3)          # dies without a word, as a killed process does
    time.sleep(0.5)
    timed_failure(t)
    if rank == 0:
        # This worker leaves with os._exit (no atexit), so the server rank 0 hosts would go
        # at once; a normal exit keeps it up while other ranks are connected. Stand in for that.
        time.sleep(3)
elif scenario == "kill_cpu":
    # The same over CPU tensors (the backends serve cpu too: Gloo alone moves them).
    t = torch.ones(16)
    dist.all_reduce(t, group=group)
    if rank == world - 1:
        os._exit(3)
    time.sleep(0.5)
    timed_failure(t)
    if rank == 0:
        time.sleep(3)
elif scenario in ("kill_mid_transfer", "hang_mid_transfer"):
    # The last rank dies (or stops) while large all_reduces' bytes move on Gloo, after the
    # fabric server answered them: the others' error still names the group, the
    # collective, and the rank that left (or that none did).
    import signal, threading
    t = torch.ones(1 << 22, device=d)
    dist.all_reduce(t)
    mod.synchronize()
    pidfile = os.path.join(os.environ["OUT_DIR"], "stopped.pid")
    if rank == world - 1:
        def leave():
            time.sleep(1.0)
            if scenario == "kill_mid_transfer":
                os._exit(3)
            with open(pidfile, "w") as f:
                f.write(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGSTOP)
        threading.Thread(target=leave, daemon=True).start()
    t0 = time.monotonic()
    out["error"] = None
    while time.monotonic() - t0 < 60:
        try:
            dist.all_reduce(t)
        except Exception as e:
            out["error"] = f"{type(e).__name__}: {e}"
            break
    out["wall_s"] = time.monotonic() - t0
    # Each survivor stays a moment after its failure, and the stopped rank is killed only
    # then: a rank that left at once would be what the other survivor's pending collective
    # fails on ("rank 1 left the job"), not the lost rank; the server rank 0 hosts stays up
    # meanwhile.
    time.sleep(2)
    if rank == 0 and os.path.exists(pidfile):
        os.kill(int(open(pidfile).read()), signal.SIGKILL)
elif scenario == "refused_by_one":
    # Rank 1 gives all_gather_into_tensor an output of the wrong size, which Gloo refuses on
    # rank 1 alone before any byte moves: reported all the same (as refused, with Gloo's
    # words), and both fail naming it; the group, whose Gloo transfers are now out of step,
    # then refuses collectives at once (no timeout, no abort); a new group works. Then an
    # input that does not fit the (agreed) outputs: refused on rank 1 alone, failed on both.
    x = torch.ones(10, device=d)
    try:
        dist.all_gather_into_tensor(torch.empty(7 if rank == 1 else 20, device=d), x)
        out["first"] = None
    except Exception as e:
        out["first"] = f"{type(e).__name__}: {e}"
    t0 = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4, device=d))
        out["next"] = None
    except Exception as e:
        out["next"] = f"{type(e).__name__}: {e}"
    out["next_s"] = time.monotonic() - t0
    fresh = dist.new_group([0, 1])
    y = torch.ones(4, device=d)
    dist.all_reduce(y, group=fresh)
    out["fresh"] = y.cpu().tolist()
    t0 = time.monotonic()
    try:
        dist.all_gather([torch.zeros(4, device=d) for _ in range(2)], torch.ones(4 + rank, device=d), group=fresh)
        out["input_misfit"] = None
    except Exception as e:
        out["input_misfit"] = f"{type(e).__name__}: {e}"
    out["input_misfit_s"] = time.monotonic() - t0
elif scenario == "reduction_disagrees":
    # The same bytes reduced as another type, then with another operation: Gloo would sum
    # garbage without a word; the fabric server names both sides, and each group is then
    # refused; a fresh group works. Last, a type Gloo reduces widened (int16) against one it
    # takes: Gloo's transfers would differ in size (an abort), so it is reported first.
    errs = []
    for kw in ({"dtype": torch.float16 if rank == 0 else torch.bfloat16}, {"op": "avg" if rank == 0 else "sum"},
               {"dtype": torch.int16 if rank == 0 else torch.float16}):
        g = dist.new_group([0, 1])
        x = torch.ones(4, dtype=kw.get("dtype", torch.float32), device=d)
        try:
            op = {"avg": dist.ReduceOp.AVG, "sum": dist.ReduceOp.SUM}[kw.get("op", "sum")]
            dist.all_reduce(x, op=op, group=g)
            errs.append(None)
        except Exception as e:
            errs.append(f"{type(e).__name__}: {e}")
    out["errors"] = errs
    y = torch.ones(4, device=d)
    dist.all_reduce(y, group=dist.new_group([0, 1]))
    out["fresh"] = y.cpu().tolist()
elif scenario == "die_uncaught":
    # The last rank dies; the others' collective error goes uncaught (the program ends by
    # it), after they note when it came.
    t = torch.ones(16, device=d)
    dist.all_reduce(t)
    mod.synchronize()
    if rank == world - 1:
        os._exit(3)
    time.sleep(0.5)
    try:
        dist.all_reduce(t)
    finally:
        with open(os.path.join(os.environ["OUT_DIR"], f"error{rank}"), "w") as f:
            f.write(repr(time.time()))
elif scenario in ("p2p_kill", "p2p_hang"):
    t = torch.ones(16, device=d)
    dist.all_reduce(t)
    mod.synchronize()
    if rank == 1:
        if scenario == "p2p_kill":
            os._exit(3)          # the sender dies before sending
        time.sleep(8)            # the sender never sends within rank 0's timeout
        os._exit(0)
    t0 = time.monotonic()
    try:
        dist.recv(torch.zeros(256, device=d), src=1)
        out["error"] = None
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["wall_s"] = time.monotonic() - t0
    time.sleep(1)
elif scenario == "hang":
    t = torch.ones(16, device=d)
    dist.all_reduce(t)
    if rank == world - 1:
        time.sleep(12)       # well past the others' 3 s timeout; then goes away quietly
        os._exit(0)
    timed_failure(t)
elif scenario == "host_leaves_first":
    # Rank 0 (which hosts the fabric server) finishes and exits normally while ranks 1 and
    # 2 go on with collectives of their own group for longer than the server's idle grace.
    pair = dist.new_group([1, 2])
    if rank == 0:
        print("OUT " + json.dumps(out), flush=True)
        sys.exit(0)          # a normal exit: the server keeps serving the others
    t = torch.ones(256, device=d)
    n = 0
    try:
        # The same count on both ranks (a wall-clock bound let one stop a collective before
        # the other, which then waited for a rank that had left): 150 x 50 ms, past the grace.
        for _ in range(150):
            u = t.clone()
            dist.all_reduce(u, group=pair)
            n += 1
            assert u[0].item() == 2.0
            time.sleep(0.05)
        out["error"] = None
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    out["collectives"] = n
elif scenario == "two_groups":
    # Chips 0 and 1 are on card 0, chips 2 and 3 on card 1: the groups {0, 2} and {1, 3}
    # both cross the link between the two cards.
    mine = dist.new_group([0, 2]), dist.new_group([1, 3])
    group = mine[rank % 2]
    n = int(os.environ.get("ELEMS", str(1 << 24)))

    def timed(g):
        t = torch.ones(n, device=d) * (rank + 1)
        mod.synchronize()
        b, e = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        b.record()
        dist.all_reduce(t, group=g)
        e.record()
        e.synchronize()
        assert t[0].item() == (4.0 if rank % 2 == 0 else 6.0), t[0].item()
        return b.elapsed_time(e)

    time.sleep(float(os.environ.get("STEP_DELAY", "0")) * rank)
    out["alone_ms"] = timed(group) if rank % 2 == 0 else None   # group {0, 2} alone
    dist.barrier()
    mod.synchronize()
    time.sleep(float(os.environ.get("STEP_DELAY", "0")) * (3 - rank))
    out["together_ms"] = timed(group)                            # both groups at once
    dist.barrier()
    mod.synchronize()
    out["host_ns"] = _C._host_time_ns()
elif scenario == "p2p_parked":
    # Rank 2 waits in a receive that rank 0 sends only after its all_reduce with rank 1:
    # parked on the fabric server meanwhile, it does not hold that all_reduce.
    pair = dist.new_group([0, 1])
    dist.barrier()
    t0 = time.monotonic()
    if rank == 2:
        got = torch.zeros(4, device=d)
        dist.recv(got, src=0)
        out["got"] = got[0].item()
    else:
        t = torch.ones(1 << 10, device=d) * (rank + 1)
        dist.all_reduce(t, group=pair)
        out["sum"] = t[0].item()
        if rank == 0:
            dist.send(torch.full((4,), 7.0, device=d), dst=2)
    out["wall_s"] = time.monotonic() - t0
    dist.barrier()
elif scenario == "pipeline":
    # Rank 0 computes for milliseconds of simulated time, then sends; rank 1 posts its
    # receive at once. The receive cannot end before the data left rank 0.
    _C._set_activity_recording(True)
    n = int(os.environ.get("ELEMS", str(1 << 20)))
    if rank == 0:
        x = torch.randn(2048, 2048, device=d)
        for _ in range(4):
            x = x @ x / 2048
        dist.send(torch.full((n,), 3.0, device=d), dst=1)
    else:
        got = torch.zeros(n, device=d)
        dist.recv(got, src=0)
        out["got"] = got[0].item()
    mod.synchronize()
    out["acts"] = coll_acts()
    dist.barrier()   # rank 0 hosts the fabric server: it stays until rank 1's receive is answered
elif scenario == "exchange":
    # Each rank posts its receive before its send (as ring exchanges do): it must not block.
    _C._set_activity_recording(True)
    n = int(os.environ.get("ELEMS", str(1 << 18)))
    other = 1 - rank
    x = torch.randn(512 * (rank + 1), 512, device=d)
    y = x @ x.T   # rank 1 reaches the exchange later in simulated time
    got = torch.zeros(n, device=d)
    ops = [dist.P2POp(dist.irecv, got, other), dist.P2POp(dist.isend, torch.full((n,), rank + 1.0, device=d), other)]
    if os.environ.get("BATCHED") == "1":
        reqs = dist.batch_isend_irecv(ops)
    else:
        reqs = [dist.irecv(got, src=other), dist.isend(torch.full((n,), rank + 1.0, device=d), dst=other)]
    for q in reqs:
        q.wait()
    mod.synchronize()
    out["got"] = got[0].item()
    out["acts"] = coll_acts()
    dist.barrier()   # as in the pipeline: the server's host stays until both receives are answered
elif scenario == "host_exits_at_once":
    # Rank 0 hosts the job's fabric server and ends its process the moment its last
    # collective returns (os._exit skips the exit handler that keeps the server up): the
    # server answers the ranks of other processes first, so theirs are out already.
    t = torch.ones(1 << 10, device=d) * (rank + 1)
    for _ in range(5):
        dist.all_reduce(t)
    mod.synchronize()
    out["sum"] = t[0].item()
    print("OUT " + json.dumps(out), flush=True)
    os._exit(0)
elif scenario == "copy_beside_collective":
    # Rank 0 times a copy from chip 0 to chip 1 over their on-card link: alone, then while
    # the all_reduce runs beside it.
    if rank == 0:
        def timed_copy():
            s, e = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
            s.record(); y.copy_(x); e.record()
            return s, e
        mod.synchronize()
        s, e = timed_copy()
        e.synchronize()
        out["alone_us"] = s.elapsed_time(e) * 1e3
    dist.barrier()
    side = mod.Stream()
    with mod.stream(side):
        dist.all_reduce(t)           # on the side stream; the copy on the default one
    if rank == 0:
        s, e = timed_copy()
        e.synchronize()
        out["beside_us"] = s.elapsed_time(e) * 1e3
    mod.synchronize()
    out["sum"] = t[0].item()
elif scenario == "collective_beside_copy":
    # The all_reduce timed alone, then with rank 0 having queued a copy chip 0 -> chip 1
    # over the link it crosses, on a side stream just before.
    def timed_all_reduce():
        s, e = mod.Event(enable_timing=True), mod.Event(enable_timing=True)
        s.record(); dist.all_reduce(t); e.record()
        e.synchronize()
        return s.elapsed_time(e) * 1e3
    mod.synchronize()
    dist.barrier()
    out["alone_us"] = timed_all_reduce()
    dist.barrier()
    if rank == 0:
        side = mod.Stream()
        with mod.stream(side):
            y.copy_(x, non_blocking=True)
    out["beside_us"] = timed_all_reduce()
    mod.synchronize()
    out["sum"] = t[0].item()
elif scenario == "two_streams":
    # Two process groups of both ranks, an all_reduce on each from its own stream: the second
    # issued while the first runs (they share the on-card link of chips 0 and 1), or after
    # the host waited for the first.
    n = int(os.environ["NBYTES"]) // 4
    g1, g2 = dist.new_group([0, 1]), dist.new_group([0, 1])
    s1, s2 = mod.Stream(), mod.Stream()
    x, y = torch.ones(n, device=d), torch.ones(n, device=d) * 2

    def pair(wait_between):
        mod.synchronize()
        dist.barrier()
        mod.synchronize()
        ev = [mod.Event(enable_timing=True) for _ in range(4)]
        with mod.stream(s1):
            ev[0].record()
            dist.all_reduce(x, group=g1)
            ev[1].record()
        if wait_between:
            s1.synchronize()
        with mod.stream(s2):
            ev[2].record()
            dist.all_reduce(y, group=g2)
            ev[3].record()
        mod.synchronize()
        return [ev[0].elapsed_time(ev[1]) * 1e3, ev[2].elapsed_time(ev[3]) * 1e3]

    out["overlapping_us"] = pair(False)
    out["apart_us"] = pair(True)
    out["sums"] = [x[0].item(), y[0].item()]
elif scenario == "simple":
    t = torch.ones(1 << 12, device=d) * (rank + 1)
    dist.all_reduce(t)
    out["sum"] = t[0].item()
print("OUT " + json.dumps(out), flush=True)
sys.stdout.flush()
if rank == 0:
    # This process hosts the job's fabric server, and _exit skips the exit handler that keeps
    # it serving: give its thread a moment to finish sending the answers it was writing to
    # the others when this rank got its own (on a loaded machine it may be descheduled in
    # between, and a rank would see the server vanish instead of its collective's error).
    time.sleep(0.5)
os._exit(0)
'''


def _env(extra: dict) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k not in
         ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR")}
    # The server's log on rank 0's stderr: what a failing test shows (and one test checks).
    e.update(CARDSIM_PRESET="mlu370-x8", CARDSIM_DEVICES="1", CARDSIM_FABRIC_LOG="1")
    e.update(extra)
    return e


def run_ranks(tmp_path, world: int, scenario: str, per_rank=None, timeout=180, **env):
    """Starts `world` rank processes; returns {rank: OUT dict or None} and their stderr."""
    script = tmp_path / "fabric_worker.py"
    script.write_text(WORKER)
    port = free_port()
    procs = []
    for r in range(world):
        e = _env(dict(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), SCENARIO=scenario, **{k: str(v) for k, v in env.items()}))
        e.update({k: str(v) for k, v in (per_rank(r) if per_rank else {}).items()})
        procs.append(subprocess.Popen([PYTHON, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=e, cwd=str(ROOT), start_new_session=True))
    results, errs = {}, {}
    deadline = time.monotonic() + timeout
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, err = p.communicate()
        lines = [ln for ln in out.splitlines() if ln.startswith("OUT ")]
        results[r] = json.loads(lines[-1][4:]) if lines else None
        errs[r] = f"exit status {p.returncode}{'' if lines else ', no OUT line'}\n" + err[-3000:]
    return results, errs


def _shown(errs: dict) -> str:
    """Each rank's exit status and stderr, whole (an assertion's repr would cut them)."""
    return "\n".join(f"--- rank {r}: {e}" for r, e in sorted(errs.items()))


def model_us(op: str, ranks: int, nbytes: int, preset="mlu370-x8") -> float:
    out = subprocess.run([CARDSIM, "collbench", "--model-only", "--preset", preset, "--ranks", str(ranks), "--op", op,
                          "--min-bytes", str(nbytes), "--max-bytes", str(nbytes), "--csv"],
                         capture_output=True, text=True, env=_env({}), timeout=60)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.strip().splitlines()[1].split(",")[4])


def test_ranks_complete_together_at_the_latest_arrival_plus_the_models_time(tmp_path):
    world = 3
    res, errs = run_ranks(tmp_path, world, "timing")
    assert all(res[r] for r in range(world)), _shown(errs)
    # CARDSIM_FABRIC_LOG=1 (set for every run here): the server's log on rank 0's stderr.
    assert all(f"cardsim fabricd: rank {r} of job " in errs[0] for r in range(world)), errs[0]
    # The store is on loopback, so every rank is on this host: all join by the Unix socket.
    assert errs[0].count("connection from unix:@") == world and "connection from 127.0.0.1" not in errs[0], errs[0]
    assert all(res[r]["sum"] == 6.0 for r in range(world))
    # (activities come in completion order, the same on every rank when ends agree)
    acts = [sorted(res[r]["acts"], key=lambda a: a[2]) for r in range(world)]
    assert all(len(a) == 6 for a in acts), acts
    big_ns, small_ns = (model_us("all_reduce", world, n) * 1e3 for n in (1 << 18, 1 << 12))
    spans = []
    for i in range(6):
        ends = {acts[r][i][2] for r in range(world)}
        assert len(ends) == 1, (i, [acts[r][i] for r in range(world)])   # every member completes together
        spans.append((max(acts[r][i][1] for r in range(world)), ends.pop()))
    took = sorted(e - s for s, e in spans)
    # from the last member's arrival, each takes the model's time (collbench prints us to 3
    # decimals) when nothing overlaps it; a large one on the default stream and a small one
    # the ranks put on the side stream while it runs share the links they both cross, so
    # both take longer (slowed only if their transfers, after the call's fixed latency, do
    # overlap): the large one's answer is moved later once the small one is answered.
    big = [sp for sp in spans if sp[1] - sp[0] > 2 * small_ns]
    assert len(big) == 3, took
    for s, e in spans:
        alone = big_ns if (s, e) in big else small_ns
        if any(os < e and s < oe for os, oe in spans if (os, oe) != (s, e)):
            assert e - s > alone - 0.5, (s, e, spans)
        else:
            assert e - s == pytest.approx(alone, abs=0.5), (s, e, spans)
    assert any(e - s > big_ns + 1 for s, e in big), took   # a large one slowed by the small one beside it
    # the ranks did reach some of them at different times (rank 2 computes more first)
    assert any(len({acts[r][i][1] for r in range(world)}) > 1 for i in range(6))


def test_events_around_one_collective_on_an_idle_stream_read_the_models_time(tmp_path):
    # The collective is its stream's from the call's start; the call's host cost (the launch
    # overhead) comes after, overlapping its first steps, so no launch gap sits between the
    # start event and it. One shorter than that cost ends with it, on every member together
    # (launch-bound, as on real cards), so a barrier leaves the ranks' hosts together.
    res, errs = run_ranks(tmp_path, 2, "events_around_one_call")
    assert res[0] and res[1], _shown(errs)
    assert res[0]["hosts"] == res[1]["hosts"], (res[0]["hosts"], res[1]["hosts"])
    # mlu370-x8's host.launch_overhead and host.event_overhead: a launch-bound collective ends
    # with its issue, and the end event is recorded after that.
    launch_us, event_us = 4.0, 1.0
    for n in (4, 1 << 12, 1 << 18, 1 << 20, 1 << 24):
        want = max(model_us("all_reduce", 2, n), launch_us + event_us)
        for r in (0, 1):
            assert res[r]["us"][str(n)] == pytest.approx(want, abs=0.002), (n, r, res[r]["us"], want)


def test_a_rank_is_timed_on_the_card_it_runs_on(tmp_path):
    """A process that sees the node's cards runs its rank where it chooses (`deepspeed
    --include localhost:0,2` puts rank 1 on chip 2): the fabric times the collective over
    those chips' links. Ranks on chips 0 and 1 take collbench's time for 2 ranks; on chips 0
    and 2 (another card of the MLU370-X8) another; two ranks on one chip, which the vendor
    libraries refuse, are timed on their ranks' chips and told so once."""
    nbytes = 1 << 24
    spans, errs = {}, {}
    for stride in (1, 2, 0, "2-noset"):
        res, errs[stride] = run_ranks(tmp_path, 2, "on_another_device", CARDSIM_DEVICES="8", STRIDE=str(stride)[0],
                                      NBYTES=nbytes, **({"NOSET": "1"} if stride == "2-noset" else {}))
        assert res[0] and res[1], _shown(errs[stride])
        assert res[0]["sum"] == res[1]["sum"] == 4.0
        assert res[0]["span"] == res[1]["span"], (stride, res)   # the members end together
        (spans[stride],) = res[0]["span"]
    assert spans[1] * 1e-3 == pytest.approx(model_us("all_reduce", 2, nbytes), abs=0.002), spans
    assert abs(spans[2] - spans[1]) > 0.05 * spans[1], spans   # other links, another time
    assert spans[0] == spans[1], spans
    # tensors on chips 0 and 2 without set_device: a barrier first runs on the group rank's
    # device, as torch's backends choose one (no note), the all_reduce on the tensors' chips
    assert spans["2-noset"] == spans[2], spans
    for stride in (1, 2, "2-noset"):
        assert "cardsim: ranks" not in errs[stride][0] + errs[stride][1], errs[stride]
    for r in (0, 1):
        assert errs[0][r].count("all run on device 0") == 1, errs[0][r][-2000:]


def test_point_to_point_between_events_reads_the_models_time(tmp_path):
    """A send/recv timed between events on each side takes collbench's send_recv time for the
    same preset, ranks and size: the receive's posting mark (the runtime's own) costs the
    host nothing (a torch event's record added 1 us)."""
    res, errs = run_ranks(tmp_path, 2, "p2p_events")
    assert res[0] and res[1], _shown(errs)
    want = model_us("send_recv", 2, 1 << 20)
    for r in (0, 1):
        for name, us in res[r]["us"].items():
            assert us == pytest.approx(want, abs=0.002), (r, name, us, want)


def test_a_preferred_algorithm_times_what_it_does_and_leaves_the_rest_to_the_tuner(tmp_path):
    nbytes = 1 << 20
    res, errs = run_ranks(tmp_path, 2, "preferred_algo", NBYTES=nbytes, CARDSIM_COLL_ALGO="tree")
    assert all(res[r] for r in range(2)), _shown(errs)
    assert res[0]["sum"] == res[1]["sum"] == 2.0
    names = res[0]["names"]
    # tree does all_reduce; all_gather, reduce_scatter and the send go to the tuner's choice
    assert names[0] == "all_reduce:tree", names
    assert all(n.split(":")[1] != "tree" for n in names[1:]), names
    assert {n.split(":")[0] for n in names} >= {"all_gather", "reduce_scatter"}, names
    # the same rule in collbench: the preferred one's time, or the tuner's with no preference
    forced = subprocess.run([CARDSIM, "collbench", "--model-only", "--preset", "mlu370-x8", "--ranks", "2",
                             "--op", "all_gather", "--min-bytes", str(2 * nbytes), "--max-bytes", str(2 * nbytes),
                             "--csv"], capture_output=True, text=True, env=_env({"CARDSIM_COLL_ALGO": "tree"}))
    assert forced.returncode == 0, forced.stderr
    assert float(forced.stdout.splitlines()[1].split(",")[4]) == model_us("all_gather", 2, 2 * nbytes)
    # a named --algo is run or refused
    refused = subprocess.run([CARDSIM, "collbench", "--model-only", "--preset", "mlu370-x8", "--ranks", "2",
                              "--op", "all_gather", "--algo", "tree", "--min-bytes", "1M", "--max-bytes", "1M"],
                             capture_output=True, text=True, env=_env({}))
    assert refused.returncode == 2 and "tree does not do all_gather" in refused.stderr, refused.stderr


def test_a_node_count_too_small_for_the_job_is_refused_naming_it(tmp_path):
    # One node of one device cannot hold two ranks: set by hand, the count is not grown.
    overrides = tmp_path / "one_per_node.conf"
    overrides.write_text("fabric.devices_per_node=1\n")
    res, errs = run_ranks(tmp_path, 2, "timing", timeout=60, CARDSIM_PRESET="br100", CARDSIM_NODES=1,
                          CARDSIM_CONFIG=overrides)
    assert res == {0: None, 1: None}, res
    assert any("1 node(s) of 1 devices (CARDSIM_NODES or fabric.nodes) cannot hold a job of 2 ranks" in e
               for e in errs.values()), _shown(errs)


def test_times_do_not_depend_on_the_order_ranks_start_or_arrive_in(tmp_path):
    world = 3
    runs = []
    for order in (lambda r: r, lambda r: world - 1 - r):
        res, errs = run_ranks(tmp_path, world, "timing", per_rank=lambda r, o=order: {
            "START_DELAY": 0.4 * o(r), "STEP_DELAY": 0.15 * (o(r) + 1)})
        assert all(res[r] for r in range(world)), _shown(errs)
        runs.append({r: (res[r]["acts"], res[r]["host_ns"]) for r in range(world)})
    assert runs[0] == runs[1]


def test_the_rank_hosting_the_server_may_exit_at_once_after_its_last_collective(tmp_path):
    world = 3
    for _ in range(3):
        res, errs = run_ranks(tmp_path, world, "host_exits_at_once")
        assert all(res[r] for r in range(world)), _shown(errs)
        # 1+2+3 = 6 after the first all_reduce, then each multiplies by 3 (three equal terms)
        assert all(res[r]["sum"] == 6.0 * 3 ** 4 for r in range(world)), res


def test_a_collective_holds_back_a_peer_copy_on_the_link_it_crosses(tmp_path):
    # 64 MiB each: the 2-rank all_reduce over chips 0 and 1 keeps their on-card link busy in
    # both directions for its whole time, so the copy (chip 0 -> chip 1, on the default
    # stream) moves next to nothing until it ends, then at the full rate.
    nbytes = 64 << 20
    res, errs = run_ranks(tmp_path, 2, "copy_beside_collective", CARDSIM_DEVICES=2, NBYTES=nbytes)
    assert all(res[r] for r in range(2)), _shown(errs)
    assert all(res[r]["sum"] == 2.0 for r in range(2))
    alone, beside = res[0]["alone_us"], res[0]["beside_us"]
    coll = model_us("all_reduce", 2, nbytes)
    assert beside > alone + 0.8 * coll, (alone, beside, coll)
    assert beside < alone + coll * 1.05, (alone, beside, coll)


def test_a_peer_copy_queued_before_a_collective_slows_it_on_the_link_they_share(tmp_path):
    # The other way round: rank 0 queues a 64 MiB copy chip 0 -> chip 1 on a side stream,
    # then both ranks all-reduce 64 MiB over chips 0 and 1: the fabric server, told of the
    # copy, times the all_reduce sharing one direction of the link with it, on both ranks.
    nbytes = 64 << 20
    res, errs = run_ranks(tmp_path, 2, "collective_beside_copy", CARDSIM_DEVICES=2, NBYTES=nbytes)
    assert all(res[r] for r in range(2)), _shown(errs)
    assert all(res[r]["sum"] == 4.0 for r in range(2))
    coll = model_us("all_reduce", 2, nbytes)
    for r in range(2):
        alone, beside = res[r]["alone_us"], res[r]["beside_us"]
        assert alone == pytest.approx(coll, rel=0.05), (r, alone, coll)
        assert beside > alone + 0.2 * coll, (r, alone, beside, coll)
        assert beside < alone + 1.05 * coll, (r, alone, beside, coll)


def test_two_collectives_a_rank_puts_on_two_streams_at_once_both_share_the_link(tmp_path):
    # The first all_reduce is answered alone before the second is issued; once the second,
    # issued while the first runs, is answered sharing the link with it, the first's end
    # moves later too (no rank's host had waited past it): both slowed, on both ranks alike.
    # With the host waiting for the first in between, each is alone.
    nbytes = 64 << 20
    res, errs = run_ranks(tmp_path, 2, "two_streams", NBYTES=nbytes)
    assert all(res[r] for r in range(2)), _shown(errs)
    assert res[0]["sums"] == res[1]["sums"] == [4.0, 8.0]
    coll = model_us("all_reduce", 2, nbytes)
    assert res[0]["overlapping_us"] == pytest.approx(res[1]["overlapping_us"], rel=1e-6)
    assert res[0]["apart_us"] == pytest.approx(res[1]["apart_us"], rel=1e-6)
    first, second = res[0]["overlapping_us"]
    assert 1.5 * coll < first < 2.05 * coll, (first, coll)
    assert 1.5 * coll < second < 2.05 * coll, (second, coll)
    assert res[0]["apart_us"] == [pytest.approx(coll, rel=0.02)] * 2, (res[0]["apart_us"], coll)


def test_a_bad_fabric_revise_setting_is_refused_naming_it(tmp_path):
    res, errs = run_ranks(tmp_path, 2, "simple", CARDSIM_FABRIC_REVISE="yes", timeout=120)
    for r in range(2):
        assert res[r] is None, res[r]
        assert "CARDSIM_FABRIC_REVISE must be 0 or 1, got 'yes'" in errs[r], errs[r][-2000:]


def test_a_bad_collective_start_setting_is_refused_naming_it(tmp_path):
    res, errs = run_ranks(tmp_path, 2, "simple", CARDSIM_COLL_START="later", timeout=120)
    for r in range(2):
        assert res[r] is None, res[r]
        assert "CARDSIM_COLL_START must be call or launched, got 'later'" in errs[r], errs[r][-2000:]


def test_a_rank_that_dies_fails_the_others_naming_it(tmp_path):
    world = 3
    res, errs = run_ranks(tmp_path, world, "kill", timeout=120)
    assert res[world - 1] is None     # it died
    for r in range(world - 1):
        assert res[r], errs[r]
        e = res[r]["error"]
        assert e and e.startswith("DistBackendError"), e
        assert "cncl" in e and "all_reduce #1 of process group [0, 1, 2]" in e, e
        assert f"rank {world - 1} left the job" in e, e
        assert res[r]["wall_s"] < 20, res[r]
    # A group made over the same ranks as the default group is told apart from it.
    res, errs = run_ranks(tmp_path, world, "kill", timeout=120, SUBGROUP=1)
    for r in range(world - 1):
        assert res[r], errs[r]
        e = res[r]["error"]
        assert "all_reduce #1 of process group [0, 1, 2] (the 2nd group created over these ranks)" in e, e


def test_a_rank_that_dies_fails_the_others_collectives_on_cpu_tensors_naming_it(tmp_path):
    world = 3
    res, errs = run_ranks(tmp_path, world, "kill_cpu", timeout=120)
    for r in range(world - 1):
        assert res[r], errs[r]
        e = res[r]["error"]
        assert e and e.startswith("DistBackendError"), e
        assert "cncl: all_reduce of process group [0, 1, 2]" in e and f"rank {world - 1} left the job" in e, e
        assert res[r]["wall_s"] < 20, res[r]


@pytest.mark.parametrize("scenario", ["kill_mid_transfer", "hang_mid_transfer"])
def test_a_rank_lost_while_bytes_move_fails_the_others_naming_the_group_and_it(tmp_path, scenario):
    world = 3
    res, errs = run_ranks(tmp_path, world, scenario, timeout=120, PG_TIMEOUT=4, OUT_DIR=tmp_path)
    for r in range(world - 1):
        assert res[r], errs[r]
        e = res[r]["error"]
        assert e and e.startswith("DistBackendError"), e
        # Gloo's failure names the collective; the fabric server's (the rank was lost between
        # two collectives, the next one reported) names its number in the group too
        assert re.search(r"cncl: all_reduce(: CommFailed: all_reduce #\d+)? of process group \[0, 1, 2\]", e), e
        if scenario == "kill_mid_transfer":
            assert f"rank {world - 1} left the job" in e, e
        else:   # stopped mid-transfer (Gloo's timeout), or between two (the server's)
            # (a survivor that gave up a collective earlier never starts the next one the
            # other reports: the server then waits for both of them, the stopped one among them)
            assert "a member stopped answering" in e or \
                re.search(rf"waiting for rank\(s\) \[([0-9]+, )*{world - 1}\]", e), e
        assert res[r]["wall_s"] < 40, res[r]


def test_a_call_gloo_refuses_on_one_member_fails_every_member_and_the_group_says_so(tmp_path):
    res, errs = run_ranks(tmp_path, 2, "refused_by_one", timeout=120, PG_TIMEOUT=20)
    for r in (0, 1):
        assert res[r], errs[r]
        first, nxt = res[r]["first"], res[r]["next"]
        assert first and "the ranks disagree" in first and "all_gather #0 of process group [0, 1]" in first, first
        # the sizes (rank 0 arrived first), or why rank 1 could not run it (it arrived first)
        assert ("28 bytes" in first and "80 bytes" in first) or \
            ("rank 1 cannot run it" in first and "invalid tensor size" in first), first
        assert nxt and "process group [0, 1] is unusable" in nxt and "create a new group" in nxt, nxt
        assert res[r]["next_s"] < 5, res[r]
        assert res[r]["fresh"] == [2.0] * 4, res[r]
        # every member fails at once (the others waited out the group's timeout before)
        e = res[r]["input_misfit"]
        assert e and "rank 1 cannot run it" in e and "all_gather #1 of process group [0, 1]" in e, e
        assert res[r]["input_misfit_s"] < 5, res[r]


def test_a_reductions_members_that_disagree_on_its_dtype_or_op_fail_naming_both(tmp_path):
    res, errs = run_ranks(tmp_path, 2, "reduction_disagrees", timeout=120, PG_TIMEOUT=20)
    for r in (0, 1):
        assert res[r], errs[r]
        by_type, by_op, widened = res[r]["errors"]
        for e in (by_type, by_op, widened):
            assert e and e.startswith("DistBackendError") and "the ranks disagree" in e, e
        assert "(float16, root 0" in by_type and "(bfloat16, root 0" in by_type, by_type
        assert "(avg, root 0" in by_op and "(sum, root 0" in by_op, by_op
        assert "(int16, root 0" in widened and "(float16, root 0" in widened, widened
        assert res[r]["fresh"] == [2.0] * 4, res[r]


def test_a_survivor_whose_error_ends_the_program_exits_promptly(tmp_path):
    """The exit handler's wait for the process groups is brief once a member was lost (the
    groups never shut down cleanly then): a survivor ends within seconds of its error, not
    after the 10 s bound for a healthy job."""
    script = tmp_path / "fabric_worker.py"
    script.write_text(WORKER)
    port = free_port()
    procs = []
    for r in range(3):
        e = _env(dict(RANK=str(r), WORLD_SIZE="3", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      SCENARIO="die_uncaught", OUT_DIR=str(tmp_path)))
        procs.append(subprocess.Popen([PYTHON, str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True, env=e, cwd=str(ROOT), start_new_session=True))
    ended = {}
    deadline = time.monotonic() + 120
    while len(ended) < 3 and time.monotonic() < deadline:
        for r, p in enumerate(procs):
            if r not in ended and p.poll() is not None:
                ended[r] = time.time()
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    for r in (0, 1):
        err = procs[r].stderr.read()
        assert procs[r].returncode == 1 and "rank 2 left the job" in err, (procs[r].returncode, err[-2000:])
        came = float((tmp_path / f"error{r}").read_text())
        assert ended[r] - came < 6, (r, ended[r] - came)


def test_a_rank_that_hangs_fails_the_others_within_the_timeout(tmp_path):
    world = 3
    res, errs = run_ranks(tmp_path, world, "hang", timeout=120, PG_TIMEOUT=3)
    for r in range(world - 1):
        assert res[r], errs[r]
        e = res[r]["error"]
        assert e and "timed out after 3 s" in e and f"rank(s) [{world - 1}]" in e, e
        assert "all_reduce #1 of process group [0, 1, 2]" in e, e
        assert res[r]["wall_s"] < 11, res[r]
    # the timeout runs from the first arrival: the first rank there waited all of it (a rank
    # arriving later, on a loaded machine, waits that much less)
    assert max(res[r]["wall_s"] for r in range(world - 1)) >= 2.5, res


@pytest.mark.parametrize("scenario", ["p2p_kill", "p2p_hang"])
def test_a_receive_whose_sender_dies_or_hangs_fails_naming_the_transfer(tmp_path, scenario):
    res, errs = run_ranks(tmp_path, 2, scenario, timeout=120, PG_TIMEOUT=3)
    assert res[0], errs[0]
    e = res[0]["error"]
    assert e and e.startswith("DistBackendError"), e
    assert "recv from rank 1 (1024 bytes, tag 0) in process group [0, 1]" in e, e
    why = "rank 1 left the job" if scenario == "p2p_kill" else "within the process group's timeout"
    assert why in e, e
    assert res[0]["wall_s"] < 10, res[0]


def test_the_rank_hosting_the_server_may_leave_while_other_groups_go_on(tmp_path):
    """The server lives in rank 0's process: at rank 0's exit it keeps serving while other
    ranks are connected and busy, past its idle grace of a few seconds."""
    res, errs = run_ranks(tmp_path, 3, "host_leaves_first", timeout=120)
    assert res[0] is not None, errs[0]
    for r in (1, 2):
        assert res[r] and res[r]["error"] is None, (res[r], errs[r])
        assert res[r]["collectives"] > 20, res[r]


def test_collectives_of_two_groups_at_once_share_the_link_they_both_cross(tmp_path):
    """On an MLU370-X8, groups {0, 2} and {1, 3} both cross the link between cards 0 and 1:
    at once, each all_reduce takes about twice as long as alone (64 MiB: bandwidth-bound),
    the same on every member, and the same whatever order the ranks come in."""
    runs = []
    for delay in (0, 0.3):
        res, errs = run_ranks(tmp_path, 4, "two_groups", STEP_DELAY=delay)
        assert all(res[r] for r in range(4)), errs
        runs.append(res)
    res = runs[0]
    alone = res[0]["alone_ms"]
    assert res[2]["alone_ms"] == alone
    together = {r: res[r]["together_ms"] for r in range(4)}
    assert together[0] == together[2] and together[1] == together[3], together
    assert together[0] == together[1], together          # the same size over the same links
    assert 1.8 * alone < together[0] < 2.05 * alone, (alone, together)
    assert runs[1] == runs[0]


def test_a_rank_waiting_in_a_receive_does_not_hold_the_collectives_it_waits_for(tmp_path):
    """A rank blocked in a point-to-point receive is parked on the fabric server: the
    all_reduce whose end lets its sender go on is answered at once, not after the settle time
    (here 30 s, so that holding it would show)."""
    res, errs = run_ranks(tmp_path, 3, "p2p_parked", CARDSIM_FABRIC_SETTLE_S=30, timeout=120)
    assert all(res[r] for r in range(3)), errs
    assert res[0]["sum"] == res[1]["sum"] == 3.0 and res[2]["got"] == 7.0
    assert max(res[r]["wall_s"] for r in range(3)) < 15, res


def _p2p(acts):
    return [a for a in acts if a[0].startswith("send_recv")]


def test_a_receive_ends_after_its_sender_began_plus_the_transfer(tmp_path):
    """Point to point is joined on the fabric server: rank 1 posts its receive long before
    rank 0, busy computing, sends; the receive ends at the send's start plus the model's time
    for the transfer (before, each side was timed alone and the receive ended first)."""
    n = 1 << 20
    res, errs = run_ranks(tmp_path, 2, "pipeline", ELEMS=n)
    assert res[0] and res[1], errs
    assert res[1]["got"] == 3.0
    (send,), (recv,) = _p2p(res[0]["acts"]), _p2p(res[1]["acts"])
    transfer_ns = model_us("send_recv", 2, 4 * n) * 1e3
    assert send[2] - send[1] == pytest.approx(transfer_ns, abs=0.5)      # the sender goes on alone
    assert send[1] > 1e6                                                  # after its milliseconds of compute
    assert recv[2] == pytest.approx(send[1] + transfer_ns, abs=0.5), (send, recv)


@pytest.mark.parametrize("batched", [False, True])
def test_an_exchange_posting_receives_first_completes_and_is_timed_by_both_sides(tmp_path, batched):
    n = 1 << 18
    res, errs = run_ranks(tmp_path, 2, "exchange", ELEMS=n, BATCHED=int(batched), timeout=120)
    assert res[0] and res[1], errs
    assert res[0]["got"] == 2.0 and res[1]["got"] == 1.0
    transfer_ns = model_us("send_recv", 2, 4 * n) * 1e3
    sends, recvs = {}, {}
    for r in (0, 1):
        acts = sorted(_p2p(res[r]["acts"]), key=lambda a: (a[1], a[2]))
        assert len(acts) == 2, acts
        # the send is queued when called; the receive (posted first) when waited on
        sends[r], recvs[r] = acts
        assert sends[r][2] - sends[r][1] == pytest.approx(transfer_ns, abs=0.5)   # never waits
    # rank 1 computed more first: its send starts later
    assert sends[1][1] > sends[0][1]
    for r in (0, 1):
        # a receive ends once the peer's data has arrived, and after its stream's send
        assert recvs[r][2] == pytest.approx(max(sends[r][2], sends[1 - r][1] + transfer_ns), abs=0.5), (r, sends, recvs)
    assert recvs[0][2] == pytest.approx(sends[1][1] + transfer_ns, abs=0.5)   # rank 0 waited for rank 1


def _start_fabricd(*args):
    p = subprocess.Popen([CARDSIM, "fabricd", "--bind", "127.0.0.1", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=_env({}))
    line = p.stdout.readline()
    assert "serving the fabric of preset" in line, (line, p.stderr.read() if p.poll() is not None else "")
    port = int(line.split(" on 127.0.0.1:")[1].split()[0])
    p.local_address = line.split("on this host also CARDSIM_FABRIC=")[1].split(")")[0]
    return p, port


def test_a_fabricd_started_by_hand_serves_a_job(tmp_path):
    """Over TCP, and for ranks on its host over its Unix-domain socket: one job each."""
    p, port = _start_fabricd("--preset", "mlu370-x8")
    try:
        assert p.local_address.startswith("unix:@"), p.local_address
        for where in (f"127.0.0.1:{port}", p.local_address):
            res, errs = run_ranks(tmp_path, 2, "simple", CARDSIM_FABRIC=where)
            assert all(res[r] and res[r]["sum"] == 3.0 for r in range(2)), (where, errs)
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "stopped (2 collectives completed, 0 failed, 0 revised)" in err, err
    assert "rank 0 of job" in err and "joined" in err, err
    assert "connection from unix:@" in err and "connection from 127.0.0.1:" in err, err


def test_a_fabricd_moves_an_answer_a_later_collective_shares_the_link_with_and_counts_it(tmp_path):
    """The two-stream program through a server started by hand: of its six collectives (a
    barrier and two all-reduces per pair), the first all-reduce's answer is revised once
    (the pair issued apart is not), and the stop line says so."""
    nbytes = 64 << 20
    p, port = _start_fabricd("--preset", "mlu370-x8")
    try:
        res, errs = run_ranks(tmp_path, 2, "two_streams", NBYTES=nbytes, CARDSIM_FABRIC=f"127.0.0.1:{port}")
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    assert all(res[r] for r in range(2)), _shown(errs)
    coll = model_us("all_reduce", 2, nbytes)
    first, second = res[0]["overlapping_us"]
    assert 1.5 * coll < first < 2.05 * coll, (first, coll)
    assert res[0]["apart_us"] == [pytest.approx(coll, rel=0.02)] * 2, (res[0]["apart_us"], coll)
    assert p.returncode == 0, err
    assert "stopped (6 collectives completed, 0 failed, 1 revised)" in err, err


def test_a_rank_with_another_preset_is_refused_by_name(tmp_path):
    p, port = _start_fabricd("--preset", "mlu590", "--quiet")
    try:
        res, errs = run_ranks(tmp_path, 2, "simple", timeout=60, CARDSIM_FABRIC=f"127.0.0.1:{port}")
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    assert res[0] is None and res[1] is None
    assert "uses preset 'mlu370-x8' but this fabric server models preset 'mlu590'" in errs[0], errs[0]


def test_fabricd_rejects_bad_flags():
    out = subprocess.run([CARDSIM, "fabricd", "--port", "70000"], capture_output=True, text=True, env=_env({}))
    assert out.returncode == 2 and "--port must be 0..65535" in out.stderr, out.stderr
    out = subprocess.run([CARDSIM, "fabricd", "--preset", "nope"], capture_output=True, text=True, env=_env({}))
    assert out.returncode == 2 and "nope" in out.stderr, out.stderr
    out = subprocess.run([CARDSIM, "fabricd", "--settle-s", "-1"], capture_output=True, text=True, env=_env({}))
    assert out.returncode == 2 and "--settle-s must be 0..3600 seconds, got -1" in out.stderr, out.stderr


@pytest.mark.parametrize("mode,fabric", [("full", ""), ("timing", ""), ("full", "off"), ("timing", "off")])
def test_all_to_all_edges_move_values_refuse_disagreeing_splits_and_end_together(tmp_path, mode, fabric):
    """Small all_to_alls move their values in either mode; splits the ranks disagree on fail
    on both with an error naming them (the group goes on), with or without a fabric server;
    an input that must be packed (a transposed view) is packed before the exchange, which
    ends on both ranks together (on the server's fabric: alone, each rank times its own)."""
    res, errs = run_ranks(tmp_path, 2, "all_to_all_edges", CARDSIM_EXECUTION=mode, CARDSIM_FABRIC=fabric)
    assert res[0] and res[1], _shown(errs)
    for r in (0, 1):
        mine = [float(v + 10 * r) for v in range(8)]
        assert res[r]["single"] == [float(v + 10 * p) for p in (0, 1) for v in range(4 * r, 4 * r + 4)], res[r]
        assert res[r]["list"] == [[float(v + 10 * p) for v in range(4 * r, 4 * r + 4)] for p in (0, 1)], (res[r], mine)
        assert res[r]["uneven"] == [1.0] * (8 if r == 0 else 6), res[r]
        assert "rank 0 sends rank 1 12 bytes, but rank 1 expects 20 bytes from rank 0" in (res[r]["mismatch"] or ""), res[r]
        assert "rank 0 sends rank 1 8 bytes, but rank 1 expects 12 bytes from rank 0" in (res[r]["mismatch_sender"] or ""), res[r]
        assert res[r]["after"] == [2.0] * 4
    assert len(res[0]["ends"]) == len(res[1]["ends"]) == 1, (res[0]["ends"], res[1]["ends"])
    if fabric == "off":
        return
    assert res[0]["ends"] == res[1]["ends"], (res[0]["ends"], res[1]["ends"])
