"""`cardsim replay`: a recorded run re-timed without running the program again. On the
recording's own configuration it reproduces the recorded times exactly; with --set or
--preset it answers what-if questions; with --ranks N one data-parallel rank stands for N."""
import json
import os
import pathlib
import re
import subprocess
import zlib

import pytest

from conftest import free_port

ROOT = pathlib.Path(__file__).resolve().parents[3]
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")


def _env(extra=None):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("CARDSIM_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                       "MASTER_PORT", "DS_ACCELERATOR", "MLU_VISIBLE_DEVICES")}
    e.update(extra or {})
    return e


def record(tmp_path, name, code, world=1, extra=None):
    """Runs `code` on `world` ranks with CARDSIM_TRACE; returns the trace directory."""
    out = tmp_path / name
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    port = free_port()
    procs = []
    for r in range(world):
        own = dict(CARDSIM_TRACE=str(out), CARDSIM_DEVICES="1" if world > 1 else "2", RANK=str(r),
                   WORLD_SIZE=str(world), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        own.update(extra or {})
        env = _env(own)
        procs.append(subprocess.Popen([PYTHON, str(script)], env=env, cwd=str(ROOT), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        o, e = p.communicate(timeout=300)
        assert p.returncode == 0, e[-3000:]
    return out


def cardsim(*args):
    return subprocess.run([CARDSIM, *map(str, args)], capture_output=True, text=True, env=_env(), timeout=600)


def recorded_total_us(path):
    res = cardsim("info", path, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["recorded_total_us"]


def replay(tmp_path, path, *args):
    out = tmp_path / f"replay-{len(list(tmp_path.iterdir()))}.json"
    res = cardsim("replay", path, "--json", out, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "total_us:" in res.stdout
    return json.loads(out.read_text())


TWO_STREAMS = r'''
import torch, torch_mlu
x = torch.randn(384, 384, device="mlu")
side = torch.mlu.Stream()
h = torch.empty(1 << 16).pin_memory()
for i in range(4):
    y = (x @ x).relu()
    with torch.mlu.stream(side):
        w = torch.ones(1 << 18, device="mlu") * 3
        done = torch.mlu.Event()
        done.record()
    torch.mlu.current_stream().wait_event(done)
    z = y.sum() + w.sum()
    h.copy_(w[: 1 << 16], non_blocking=True)
    torch.ones(8, device="mlu:1").add_(1)          # the second card too
torch.mlu.synchronize()
print(z.item())
'''

DP_STEP = r'''
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).to("mlu")
x = torch.randn(64 * (rank + 1), 256, device="mlu")        # rank 1 works twice as long
for _ in range(2):
    loss = model(x).square().mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_replay_on_the_recorded_configuration_reproduces_the_recorded_times(tmp_path):
    trace = record(tmp_path, "streams", TWO_STREAMS)
    rep = replay(tmp_path, trace)
    assert rep["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)
    b = rep["breakdown"]
    parts = b["compute_us"] + b["memory_bound_us"] + b["copies_us"] + b["exposed_communication_us"] + b["idle_us"]
    assert parts == pytest.approx(b["total_us"], rel=1e-9, abs=1e-6)
    assert b["compute_us"] > 0 and b["memory_bound_us"] > 0 and b["copies_us"] > 0
    names = {k["name"] for k in rep["top_kernels"]}
    assert "aten::mm" in names and "aten::relu" in names, names
    # the critical path runs from the first host call to the last completion, each instant once
    cp = rep["critical_path"]
    assert cp["total_us"] == pytest.approx(rep["total_us"], rel=1e-9, abs=1e-6)
    assert sum(cp["by_kind"].values()) == pytest.approx(cp["total_us"], rel=1e-9, abs=1e-6)
    assert cp["by_kind"]["kernel"] > 0 and cp["items"][0]["time_us"] >= cp["items"][-1]["time_us"]
    # the items listed and those left off account for the whole path
    listed = sum(i["time_us"] for i in cp["items"])
    assert listed + cp["items_left_off_us"] == pytest.approx(cp["total_us"], rel=1e-9, abs=1e-6), cp
    assert (cp["items_left_off"] == 0 or len(cp["items"]) == 10) and cp["items_left_off_us"] >= 0, cp
    for u in rep["ranks"][0]["utilization"]:
        assert 0 <= u["compute"] <= 1 and 0 <= u["memory_bandwidth"] <= 1 and 0 <= u["dma"] <= 1, u
    assert {u["device"] for u in rep["ranks"][0]["utilization"]} == {0, 1}


def test_a_recording_with_measured_host_time_replays_to_its_recorded_times(tmp_path):
    """CARDSIM_HOST_TIME=measured charges the program's own time between calls: a replay keeps
    it (as the gaps between calls), so the replay's total is the recorded one, sleeps and all,
    with the same two streams, events, copies and synchronizations."""
    code = TWO_STREAMS.replace("    y = (x @ x).relu()", "    time.sleep(0.01)\n    y = (x @ x).relu()")
    code = code.replace("import torch, torch_mlu", "import time, torch, torch_mlu")
    trace = record(tmp_path, "measured", code, extra={"CARDSIM_HOST_TIME": "measured"})
    recorded = recorded_total_us(trace)
    assert recorded > 4 * 10_000, recorded          # the four 10 ms sleeps are host time
    assert replay(tmp_path, trace)["total_us"] == pytest.approx(recorded, abs=1e-6)


POLLING = r'''
import torch, torch_mlu
x = torch.randn(1024, 1024, device="mlu")
done = torch.mlu.Event()
y = x @ x @ x
done.record()
while not done.query():          # the host polls until the card is done
    pass
with torch.mlu.stream(torch.mlu.Stream()):
    z = y + 1                    # issued once y is known complete, on another stream
torch.mlu.synchronize()
'''


def test_a_polling_loop_polls_the_replays_card(tmp_path):
    """A program that polls an event stops polling when the replay's card is done: sooner on
    a faster card (the recording's spinning is not kept), later on a slower one (what it
    issues after the loop still comes after the work it waited for); as recorded on its own."""
    trace = record(tmp_path, "poll", POLLING)
    recorded = recorded_total_us(trace)
    assert replay(tmp_path, trace)["total_us"] == pytest.approx(recorded, abs=1e-6)
    fast = replay(tmp_path, trace, "--set", "compute.peak.fp32=400TFLOPS")
    row = fast["breakdown"]
    assert fast["total_us"] < 0.5 * recorded, (fast["total_us"], recorded)
    assert row["idle_us"] < 0.5 * fast["total_us"], row          # no spinning kept as idle time
    kept = tmp_path / "slow"
    slow = replay(tmp_path, trace, "--set", "compute.peak.fp32=1TFLOPS", "--keep", kept)
    assert slow["total_us"] > 2 * recorded, (slow["total_us"], recorded)
    res = cardsim("info", kept, "--records")
    commands = [dict(re.findall(r"(\w+): (\S+)", line.split("command {", 1)[1])) for line in res.stdout.splitlines()
                if " command {" in line]
    names = dict(re.findall(r"name \{ id: (\d+) text: \"([^\"]+)\"", res.stdout))
    mm_end = max(int(c["end_ps"]) for c in commands if names.get(c.get("name")) == "aten::mm")
    add_start = min(int(c["start_ps"]) for c in commands if names.get(c.get("name")) == "aten::add.Tensor")
    assert add_start >= mm_end, (add_start, mm_end)


def test_a_child_process_of_the_same_rank_does_not_spoil_the_recording(tmp_path):
    """A recorded program that starts a process using the card (same environment, so the
    same rank file): the child is not recorded and says so; the parent's recording is whole
    and replays to its recorded times."""
    code = r'''
import subprocess, sys, torch, torch_mlu
x = torch.randn(256, 256, device="mlu")
y = x @ x
torch.mlu.synchronize()
r = subprocess.run([sys.executable, "-c", "import torch, torch_mlu; print(float(torch.ones(10, device='mlu').sum()))"],
                   capture_output=True, text=True)
assert r.returncode == 0 and r.stdout.strip() == "10.0", r
assert "not recording" in r.stderr and "another live process is recording into this file" in r.stderr, r.stderr
y = y @ x
torch.mlu.synchronize()
'''
    trace = record(tmp_path, "parent", code)
    assert sorted(p.name for p in trace.iterdir()) == ["rank0.cstrace"]
    assert replay(tmp_path, trace)["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)


def test_replay_of_a_two_rank_job_joins_the_ranks_collectives_exactly(tmp_path):
    trace = record(tmp_path, "dp", DP_STEP, world=2)
    listing = cardsim("info", trace / "rank0.cstrace", "--records")
    colls = [ln for ln in listing.stdout.splitlines() if " collective {" in ln]
    assert colls and all('dtype: "float32"' in ln for ln in colls), colls[:2]   # the element type is recorded
    # each collective's device command is tied to its own host call (the stream reached it
    # later than the host submitted it: the tie must not follow the stream)
    import re
    kinds = {}
    for ln in listing.stdout.splitlines():
        m = re.search(r" #\d+ (\w+) \{.*\} call: (\d+)", ln)
        if m and m.group(1) != "command":
            kinds[m.group(2)] = m.group(1)
    tied = [re.search(r"command \{.* call: (\d+)", ln) for ln in listing.stdout.splitlines()
            if " command {" in ln and "kind: COLLECTIVE" in ln]
    assert tied and all(t and kinds.get(t.group(1)) == "collective" for t in tied), (tied, kinds)
    rep = replay(tmp_path, trace)
    assert rep["world_size"] == 2 and [r["rank"] for r in rep["ranks"]] == [0, 1]
    assert rep["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)
    cp = rep["critical_path"]
    assert cp["total_us"] == pytest.approx(rep["total_us"], rel=1e-9, abs=1e-6)
    assert cp["by_kind"].get("collective", 0) > 0, cp
    assert all(u["fabric"] > 0 for r in rep["ranks"] for u in r["utilization"])
    # per link: each all-reduce of B bytes over 2 ranks puts B on each chip's way out (ring
    # or direct: 2(n-1)/n * B per rank), over the two chips' path on the card
    grad_bytes = 4 * sum(p for p in (256 * 512, 512, 512 * 256, 256))   # fp32 gradients, once per step
    links = {l["link"]: l for l in rep["links"]}
    assert links, rep["links"]
    out0 = [l for name, l in links.items() if name.startswith("card0.chip0->")]
    assert out0 and all(l["bytes"] == pytest.approx(2 * grad_bytes) for l in out0), (out0, grad_bytes)
    for l in rep["links"]:
        assert l["utilization"] == pytest.approx(l["busy_us"] / rep["total_us"], rel=1e-6, abs=1e-6)
        assert 0 < l["utilization"] < 1
    assert [l["busy_us"] for l in rep["links"]] == sorted((l["busy_us"] for l in rep["links"]), reverse=True)
    r0, r1 = (r["breakdown"] for r in rep["ranks"])
    # rank 0 waits for the slower rank 1 inside the all-reduces: more communication time
    assert r0["communication_us"] > r1["communication_us"] > 0
    # one rank standing for more: collectives over more ranks never make the step faster,
    # and the step never beats its own compute
    totals = []
    for n in (2, 16, 256):
        rep_n = replay(tmp_path, trace, "--ranks", n)
        assert rep_n["world_size"] == n and rep_n["replicated_to"] == (0 if n == 2 else n)
        b = rep_n["breakdown"]
        assert rep_n["total_us"] >= b["compute_us"] + b["memory_bound_us"]
        totals.append(rep_n["total_us"])
    assert totals[0] <= totals[1] <= totals[2], totals
    assert totals[2] > totals[0]


MEMORY_BOUND = r'''
import torch, torch_mlu
x = torch.ones(1 << 22, device="mlu")
for _ in range(20):
    x = x * 1.0001 + 0.5
torch.mlu.synchronize()
print(torch.mlu.get_device_properties(0).memory_bandwidth)
'''

# Timing mode: the card's times are the same, and the host's own bf16 matrix product is
# minutes per call on a machine without bf16 instructions (AVX2 only: 118 s for one 2048^2).
COMPUTE_BOUND = r'''
import torch, torch_mlu, cardsim_torch
cardsim_torch.set_execution_mode("timing")
x = torch.randn(2048, 2048, device="mlu", dtype=torch.bfloat16)
for _ in range(6):
    y = x @ x
torch.mlu.synchronize()
'''


def test_what_if_double_memory_bandwidth_speeds_up_memory_bound_work_only(tmp_path):
    probe = subprocess.run([PYTHON, "-c", "import torch, torch_mlu; "
                            "print(torch.mlu.get_device_properties(0).memory_bandwidth)"],
                           capture_output=True, text=True, env=_env(), cwd=str(ROOT))
    bw = float(probe.stdout.strip())
    doubled = f"memory.bandwidth={2 * bw / 1e9:.3f} GB/s"
    mem = record(tmp_path, "mem", MEMORY_BOUND)
    base, fast = replay(tmp_path, mem), replay(tmp_path, mem, "--set", doubled)
    assert base["total_us"] == pytest.approx(recorded_total_us(mem), abs=1e-6)
    speedup = base["total_us"] / fast["total_us"]
    assert 1.6 < speedup <= 2.0 + 1e-6, speedup
    comp = record(tmp_path, "comp", COMPUTE_BOUND)
    base, fast = replay(tmp_path, comp), replay(tmp_path, comp, "--set", doubled)
    assert base["breakdown"]["compute_us"] > 0.8 * base["total_us"], base["breakdown"]
    top = base["critical_path"]["items"][0]
    assert top["name"] == "aten::mm" and top["time_us"] > 0.8 * base["total_us"], base["critical_path"]
    assert base["total_us"] / fast["total_us"] < 1.15


PIPELINE = r"""
import os, torch, torch_mlu, torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
d = torch.device("mlu", 0)
for step in range(2):
    if rank == 0:
        x = torch.randn(1024, 1024, device=d)
        for _ in range(3):
            x = x @ x / 1024
        dist.send(x[:256].contiguous(), dst=1)
        back = torch.empty(256, 1024, device=d)
        dist.recv(back, src=1)
    else:
        got = torch.empty(256, 1024, device=d)
        dist.recv(got, src=0)
        dist.send(got * 2, dst=0)
torch.mlu.synchronize()
dist.destroy_process_group()
"""


def test_replay_of_point_to_point_transfers_reproduces_the_recorded_times(tmp_path):
    """A two-stage pipeline: each receive waits for its sender on the fabric server, in the
    recording and in the replay; a faster fabric shortens the step."""
    trace = record(tmp_path, "pipe", PIPELINE, world=2)
    listing = cardsim("info", trace / "rank1.cstrace", "--records").stdout
    assert "p2p: RECV" in listing and "posted_event:" in listing and "p2p: SEND" in listing, listing[:2000]
    rep = replay(tmp_path, trace)
    assert rep["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)
    fast = replay(tmp_path, trace, "--set", "fabric.on_card.bandwidth=2000 GB/s", "--set",
                  "fabric.link.bandwidth=2000 GB/s")
    assert fast["total_us"] < rep["total_us"]
    # One rank standing for one: its transfers have no peer, which is the input's problem
    alone = cardsim("replay", trace, "--ranks", "1")
    assert alone.returncode == 2, alone.stderr
    assert "point-to-point transfer between ranks 0 and 1" in alone.stderr and "2 ranks or more" in alone.stderr


UNEVEN_ALL_TO_ALL = r"""
import torch, torch_mlu, torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
d = torch.device("mlu", 0)
x = torch.ones(1 << 20, device=d)
for skew in (False, True):
    # skewed: rank 0 sends 7/8 of its buffer to rank 1, rank 1 1/8 of its own to rank 0
    ins = ([1 << 17, 7 << 17] if rank == 0 else [1 << 17, 7 << 17]) if skew else None
    outs = ([1 << 17, 1 << 17] if rank == 0 else [7 << 17, 7 << 17]) if skew else None
    out = torch.empty(sum(outs) if outs else 1 << 20, device=d)
    dist.all_to_all_single(out, x * 2, outs, ins)
torch.mlu.synchronize()
dist.destroy_process_group()
"""


def test_replay_of_an_uneven_all_to_all_reproduces_its_recorded_time(tmp_path):
    """An all_to_all with splits records what each rank sent each peer (format 1.5) and
    replays with it: the recorded times, not the even exchange's."""
    trace = record(tmp_path, "a2a", UNEVEN_ALL_TO_ALL, world=2)
    listing = cardsim("info", trace / "rank0.cstrace", "--records").stdout
    assert "send_bytes: 524288" in listing and "send_bytes: 3670016" in listing, listing[-3000:]
    rep = replay(tmp_path, trace)
    assert rep["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)
    # rank 0 standing for 4 ranks: the recorded split is the 2-rank world's, the exchange
    # taken as even (each rank its recorded buffer)
    wide = replay(tmp_path, trace, "--ranks", "4")
    model = cardsim("collbench", "--model-only", "--preset", "mlu370-x8", "--ranks", "4", "--op", "all_to_all",
                    "--min-bytes", "4M", "--max-bytes", "4M", "--csv")
    assert model.returncode == 0, model.stderr
    even_us = float(model.stdout.splitlines()[1].split(",")[4])
    a2a = [i for i in wide["critical_path"]["items"] if i["name"].startswith("all_to_all")]
    assert [i["count"] for i in a2a] == [2], wide["critical_path"]
    assert a2a[0]["time_us"] == pytest.approx(2 * even_us, rel=1e-4), (a2a, even_us)


COPY_BESIDE_COLLECTIVE = r"""
import os, torch, torch.distributed as dist
import torch_mlu
rank = int(os.environ["RANK"])
torch.mlu.set_device(rank)
dist.init_process_group("cncl")
n = (16 << 20) // 4
t = torch.ones(n, device=torch.device("mlu", rank))
if rank == 0:
    x, y = torch.ones(n, device="mlu:0"), torch.empty(n, device="mlu:1")
dist.barrier()
if rank == 0:
    with torch.mlu.stream(torch.mlu.Stream()):
        y.copy_(x, non_blocking=True)
dist.all_reduce(t)
torch.mlu.synchronize()
dist.destroy_process_group()
"""


def test_replay_of_a_peer_copy_beside_a_collective_reproduces_the_recorded_times(tmp_path):
    """Rank 0's process copies chip 0 -> chip 1 just before the ranks all-reduce over chips 0
    and 1: the fabric server hears of the copy in the recording and in the replay alike."""
    trace = record(tmp_path, "peer_copy_job", COPY_BESIDE_COLLECTIVE, world=2, extra={"CARDSIM_DEVICES": "2"})
    rep = replay(tmp_path, trace)
    assert rep["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)
    fast = replay(tmp_path, trace, "--set", "fabric.on_card.bandwidth=2000 GB/s")
    assert fast["total_us"] < rep["total_us"]


TWO_STREAM_COLLECTIVES = r"""
import torch, torch.distributed as dist
import torch_mlu
dist.init_process_group("cncl")
g1, g2 = dist.new_group([0, 1]), dist.new_group([0, 1])
s1, s2 = torch.mlu.Stream(), torch.mlu.Stream()
x, y = torch.ones(1 << 22, device="mlu"), torch.ones(1 << 22, device="mlu")
w = torch.randn(1024, 1024, device="mlu")
for step in range(3):
    with torch.mlu.stream(s1):
        dist.all_reduce(x, group=g1)
    with torch.mlu.stream(s2):
        dist.all_reduce(y, group=g2)     # while the first runs: both share the link
    with torch.mlu.stream(s1):
        z = w @ w                        # after the first: the run ends where it does
    if step == 1:
        s1.synchronize()                 # the host past the first one's end: it stays put
    torch.mlu.synchronize()
dist.destroy_process_group()
"""


def test_replay_of_collectives_on_two_streams_moves_the_first_ones_end_as_recorded(tmp_path):
    """Each rank puts an all_reduce on each of two streams at once: the first's answer is
    moved later once the second, sharing its links, is answered (fabric protocol 5), in
    the recording and in the replay alike; faster links shorten both."""
    trace = record(tmp_path, "two_stream_job", TWO_STREAM_COLLECTIVES, world=2)
    rep = replay(tmp_path, trace)
    assert rep["total_us"] == pytest.approx(recorded_total_us(trace), abs=1e-6)
    # Whether an end can move depends on the program's calls alone, not on how far the
    # simulation ran ahead: the same times with the simulation on its own thread.
    threaded = record(tmp_path, "two_stream_job_threaded", TWO_STREAM_COLLECTIVES, world=2,
                      extra={"CARDSIM_SIM_DRIVER": "thread"})
    assert recorded_total_us(threaded) == pytest.approx(recorded_total_us(trace), abs=1e-6)
    fast = replay(tmp_path, trace, "--set", "fabric.on_card.bandwidth=2000 GB/s")
    assert fast["total_us"] < rep["total_us"]
    # CARDSIM_FABRIC_REVISE=0 keeps every answer where it falls (the first one alone): a
    # shorter run, which its replay reproduces (the variable travels in the header).
    kept = record(tmp_path, "two_stream_job_kept", TWO_STREAM_COLLECTIVES, world=2,
                  extra={"CARDSIM_FABRIC_REVISE": "0"})
    assert recorded_total_us(kept) < recorded_total_us(trace)
    assert replay(tmp_path, kept)["total_us"] == pytest.approx(recorded_total_us(kept), abs=1e-6)
    # The replay of a recording made by an older cardsim follows the rules it was made
    # under: before format 1.3 a collective started after its call's launch overhead
    # (CARDSIM_COLL_START=launched); before 1.2 answers did not move either.
    launched = record(tmp_path, "two_stream_job_launched", TWO_STREAM_COLLECTIVES, world=2,
                      extra={"CARDSIM_COLL_START": "launched"})
    both = record(tmp_path, "two_stream_job_launched_kept", TWO_STREAM_COLLECTIVES, world=2,
                  extra={"CARDSIM_COLL_START": "launched", "CARDSIM_FABRIC_REVISE": "0"})
    assert recorded_total_us(launched) > recorded_total_us(trace)   # each starts later
    for minor, want in ((2, launched), (1, both)):
        older = tmp_path / f"two_stream_job_1.{minor}"
        older.mkdir()
        for f in sorted(trace.glob("rank*.cstrace")):
            (older / f.name).write_bytes(as_older_format(f.read_bytes(), minor))
        assert f"trace format 1.{minor}" in cardsim("info", older).stdout
        assert replay(tmp_path, older)["total_us"] == pytest.approx(recorded_total_us(want), abs=1e-6), minor


def as_older_format(data: bytes, minor: int) -> bytes:
    """A trace file of format 1.7 as the same bytes marked 1.`minor` (its header's
    format_minor and its End record's CRC-32 changed, nothing else)."""
    def varint(at):
        v = shift = 0
        while True:
            b = data[at]
            v |= (b & 0x7F) << shift
            at += 1
            if not b & 0x80:
                return v, at
            shift += 7
    starts, at = [], 8                      # after the magic: length-prefixed records
    while at < len(data):
        starts.append(at)
        n, body = varint(at)
        at = body + n
    assert at == len(data)
    # The End record's fixed32 crc32 (tag 0x2D): last, or followed by the fabric job (tag
    # 0x32, a length, the job's bytes).
    crc_at = next(p + 1 for p in range(len(data) - 5, starts[-1], -1)
                  if data[p] == 0x2D and (p + 5 == len(data) or (data[p + 5] == 0x32 and data[p + 6] == len(data) - p - 7)))
    out = bytearray(data)
    _, body = varint(starts[0])
    _, inner = varint(body + 1)                     # Envelope.header: tag 0x0A, length
    assert out[inner:inner + 4] == bytes([0x08, 1, 0x10, 7]), out[inner:inner + 4]   # format 1.7
    out[inner + 3] = minor
    out[crc_at:crc_at + 4] = zlib.crc32(bytes(out[:starts[-1]])).to_bytes(4, "little")
    return bytes(out)


def test_replay_on_another_preset_differs_and_names_it(tmp_path):
    trace = record(tmp_path, "p", COMPUTE_BOUND)
    res = cardsim("replay", trace, "--preset", "mlu590")
    assert res.returncode == 0, res.stderr
    assert "on mlu590 (MLU590)" in res.stdout
    other = float(res.stdout.split("total_us:")[1].split()[0])
    assert other != pytest.approx(recorded_total_us(trace), rel=1e-3)


def test_replay_bad_input_exits_2_naming_what_is_wrong(tmp_path):
    trace = record(tmp_path, "bad", COMPUTE_BOUND)
    res = cardsim("replay", trace, "--set", "memory.bandwidth=-1 GB/s")
    assert res.returncode == 2 and "memory.bandwidth" in res.stderr and "negative" in res.stderr, res.stderr
    res = cardsim("replay", trace, "--set", "memory.bandwith=1 TB/s")
    assert res.returncode == 2 and "bandwith" in res.stderr, res.stderr
    res = cardsim("replay", trace, "--preset", "no-such-card")
    assert res.returncode == 2 and "no-such-card" in res.stderr, res.stderr
    res = cardsim("replay", trace, "--ranks", "0")
    assert res.returncode == 2 and "--ranks" in res.stderr, res.stderr
    res = cardsim("replay", tmp_path / "missing")
    assert res.returncode == 2 and "missing" in res.stderr, res.stderr
    data = (trace / "rank0.cstrace").read_bytes()
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "rank0.cstrace").write_bytes(data[: len(data) // 2])
    res = cardsim("replay", cut)
    assert res.returncode == 2 and "rank0.cstrace" in res.stderr, res.stderr
    assert "total_us" not in res.stdout


SWEEP_HEADER = ("memory.bandwidth,total_us,compute_us,memory_bound_us,copies_us,communication_us,"
                "exposed_communication_us,idle_us")


def test_sweep_writes_a_row_per_value_equal_to_single_replays_and_a_plot(tmp_path):
    import csv
    trace = record(tmp_path, "sweep", MEMORY_BOUND)
    prefix = tmp_path / "out" / "bw"
    prefix.parent.mkdir()
    values = ["300 GB/s", "600 GB/s", "1200 GB/s"]
    res = cardsim("sweep", trace, "--set", "memory.bandwidth=" + ",".join(values), "--out", prefix, "--jobs", "2")
    assert res.returncode == 0, res.stderr[-3000:]
    text = (tmp_path / "out" / "bw.csv").read_text()
    assert text.splitlines()[0] == SWEEP_HEADER
    rows = list(csv.DictReader(text.splitlines()))
    assert [r["memory.bandwidth"] for r in rows] == values
    totals = [float(r["total_us"]) for r in rows]
    assert totals[0] > totals[1] > totals[2], totals
    for r, v in zip(rows, values):
        single = replay(tmp_path, trace, "--set", f"memory.bandwidth={v}")
        assert float(r["total_us"]) == pytest.approx(single["total_us"], abs=1e-6)
    assert (tmp_path / "out" / "bw.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # two swept keys: the cartesian product, the last varying fastest
    res = cardsim("sweep", trace, "--set", "memory.bandwidth=300 GB/s,600 GB/s", "--set",
                  "host.launch_overhead=2 us,4 us", "--out", tmp_path / "grid", "--no-plot")
    assert res.returncode == 0, res.stderr[-3000:]
    grid = list(csv.DictReader((tmp_path / "grid.csv").read_text().splitlines()))
    assert [(r["memory.bandwidth"], r["host.launch_overhead"]) for r in grid] == [
        ("300 GB/s", "2 us"), ("300 GB/s", "4 us"), ("600 GB/s", "2 us"), ("600 GB/s", "4 us")]
    assert not (tmp_path / "grid.png").exists()


def test_sweep_bad_input(tmp_path):
    trace = record(tmp_path, "sweepbad", COMPUTE_BOUND)
    res = cardsim("sweep", trace, "--set", "memory.bandwidth=1 TB/s")
    assert res.returncode == 2 and "nothing to sweep" in res.stderr, res.stderr
    res = cardsim("sweep", trace, "--set", "memory.bandwith=1 TB/s,2 TB/s", "--out", tmp_path / "x")
    assert res.returncode == 2 and "bandwith" in res.stderr, res.stderr
    assert not (tmp_path / "x.csv").exists()
    res = cardsim("sweep", tmp_path / "nothing", "--set", "memory.bandwidth=1 TB/s,2 TB/s")
    assert res.returncode == 2 and "nothing" in res.stderr, res.stderr
    # one bad value among good ones: refused by key and value before any replay runs
    res = cardsim("sweep", trace, "--set", "memory.bandwidth=1 TB/s,-5 GB/s,2 TB/s", "--out", tmp_path / "y")
    assert res.returncode == 2 and 'device.memory.bandwidth: "-5 GB/s" is negative' in res.stderr, res.stderr
    assert "the recording's preset mlu370-x8" in res.stderr, res.stderr   # what the replays would take
    assert "replays done" not in res.stderr and not list(tmp_path.glob("y.*")), res.stderr
    # a value the what-if cannot replay (time past the simulation's end): the progress counts it
    res = cardsim("sweep", GOLDEN_DP_STEP.parent / "memory_bound", "--set", "memory.bandwidth=10 B/s,1 TB/s",
                  "--out", tmp_path / "z", "--no-plot")
    assert res.returncode == 2 and "2/2 replays done (1 failed)" in res.stderr, res.stderr
    assert "1 of 2 replays failed; no output written" in res.stderr and not list(tmp_path.glob("z.*"))


GOLDEN_DP_STEP = ROOT / "tests" / "data" / "golden" / "traces" / "dp_step"


def test_sweep_of_a_list_valued_key_keeps_bracketed_commas(tmp_path):
    """fabric.library_algorithms is itself a comma list: [a,b] sweeps it as one value."""
    import csv
    values = ["ring,direct", "ring", "tree"]
    res = cardsim("sweep", GOLDEN_DP_STEP, "--ranks", "8", "--set",
                  "fabric.library_algorithms=[ring,direct], ring ,[tree]", "--out", tmp_path / "libs", "--no-plot")
    assert res.returncode == 0, res.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "libs.csv").read_text().splitlines()))
    assert [r["fabric.library_algorithms"] for r in rows] == values
    for r, v in zip(rows, values):
        single = replay(tmp_path, GOLDEN_DP_STEP, "--ranks", "8", "--set", f"fabric.library_algorithms={v}")
        assert float(r["total_us"]) == pytest.approx(single["total_us"], abs=1e-6)
    # the tuner's choice among more algorithms is never slower than among fewer
    assert float(rows[0]["total_us"]) <= float(rows[1]["total_us"])
    for bad, what in (("[ring,tree", "without its ]"), ("ring],tree", "without its ["),
                      ("a[b],c", "whole value"), ("[],ring", "empty value")):
        res = cardsim("sweep", GOLDEN_DP_STEP, "--set", f"fabric.library_algorithms={bad}", "--out", tmp_path / "bad")
        assert res.returncode == 2 and what in res.stderr, (bad, res.stderr)
        assert not (tmp_path / "bad.csv").exists()
    for bad in ("", "ring,,tree"):   # an empty value names its key
        res = cardsim("sweep", GOLDEN_DP_STEP, "--set", f"fabric.library_algorithms={bad}", "--out", tmp_path / "bad")
        assert res.returncode == 2 and "--set fabric.library_algorithms: an empty value" in res.stderr, res.stderr


PARTIAL_WITH_THINGS_FROM_BEFORE = r'''
import sys, torch, torch_mlu
x = torch.randn(1024, 1024, device="mlu")
side = torch.mlu.Stream()
made = torch.mlu.Event()
with torch.mlu.stream(side):
    before = torch.ones(1 << 22, device="mlu") * 3     # queued before the recording
    made.record()
h = torch.empty(1 << 20).pin_memory()                    # pinned before the recording
torch.mlu.synchronize()
with torch.mlu.record_trace(sys.argv[1]):
    torch.mlu.current_stream().wait_event(made)         # an event from before
    y = (x + before[: 1 << 20].view(1024, 1024)).relu()
    with torch.mlu.stream(side):                        # a stream from before
        z = before.sum()
    h.copy_(y.view(-1), non_blocking=True)              # into the pinned buffer: asynchronous
    g = y @ y
torch.mlu.synchronize()
'''


def test_a_partial_recording_replays_exactly_with_memory_streams_and_events_from_before_it(tmp_path):
    """What the program made before record_trace (a pinned buffer, device memory, a stream,
    a recorded event) gets stand-ins in the replay that cost the replayed calls no time:
    the replay reproduces the recorded times, the copy into the pinned buffer staying
    asynchronous (format 1.4 marks it pinned)."""
    script = tmp_path / "partial.py"
    script.write_text(PARTIAL_WITH_THINGS_FROM_BEFORE)
    out = tmp_path / "partial"
    res = subprocess.run([PYTHON, str(script), str(out)], cwd=str(ROOT), env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = replay(tmp_path, out)
    assert rep["total_us"] == pytest.approx(recorded_total_us(out), abs=1e-6)
    records = cardsim("info", out, "--records").stdout
    assert "host_pinned: true" in records, records[-2000:]


def test_a_graph_captured_before_a_partial_recording_is_refused_naming_it(tmp_path):
    """A graph captured before record_trace has no nodes in the trace: its launch cannot be
    replayed, and the replay says so (exit status 2, the input's limit) with what to do."""
    script = tmp_path / "graph_before.py"
    script.write_text(r'''
import sys, torch, torch_mlu
x = torch.randn(256, 256, device="mlu")
g = torch.mlu.MLUGraph()
with torch.mlu.graph(g):
    y = x * 2 + 1
with torch.mlu.record_trace(sys.argv[1]):
    g.replay()
torch.mlu.synchronize()
''')
    out = tmp_path / "graph_before"
    res = subprocess.run([PYTHON, str(script), str(out)], cwd=str(ROOT), env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    res = cardsim("replay", out)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "was captured before the recording started" in res.stderr
    assert "start the recording before the capture" in res.stderr


ALL_REDUCES_THEN_A_BARRIER = r'''
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
torch.mlu.set_device(0)
x = torch.ones(1 << 24, device="mlu")
for _ in range(3):
    dist.all_reduce(x)
dist.barrier()
x.mul_(2)
torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_the_critical_path_goes_through_a_barrier_to_the_collectives_it_waited_for(tmp_path):
    """A barrier holds its caller until it completes: the kernel launched after it was
    handed over when the barrier (behind the all-reduces on its stream) ended, so the path
    is those all-reduces, not a host gap as long as they are."""
    trace = record(tmp_path, "barrier", ALL_REDUCES_THEN_A_BARRIER, world=2)
    rep = replay(tmp_path, trace)
    cp = rep["critical_path"]
    assert cp["by_kind"].get("collective", 0) > 0.5 * cp["total_us"], cp
    assert cp["by_kind"].get("host", 0) < 0.05 * cp["total_us"], cp


TWO_KERNELS_AT_ONCE = r'''
import torch, torch_mlu
a = torch.ones(1 << 22, device="mlu"); b = torch.ones(1 << 22, device="mlu")
torch.mlu.synchronize()
s1, s2 = torch.mlu.Stream(), torch.mlu.Stream()
with torch.mlu.stream(s1):
    a.mul_(2)
with torch.mlu.stream(s2):
    b.mul_(2)
torch.mlu.synchronize()
h = torch.empty(1 << 22)
h.copy_(a)
torch.mlu.synchronize()
'''


def test_kernels_side_by_side_hold_at_most_every_cluster(tmp_path):
    """Two kernels that each could use every cluster, on two streams at once, share them:
    the clusters' utilization is never above the time any kernel ran (each kernel once
    counted as holding all of them)."""
    rep = replay(tmp_path, record(tmp_path, "side_by_side", TWO_KERNELS_AT_ONCE))
    (u,) = rep["ranks"][0]["utilization"]
    assert 0 < u["clusters"] <= u["compute"] + 1e-12, u
