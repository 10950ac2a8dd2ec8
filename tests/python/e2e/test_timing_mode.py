"""CARDSIM_EXECUTION=timing: the same simulated times, memory statistics and errors as full
mode, without arithmetic or touching device memory; reads of device data give zeros."""
import json
import subprocess

import pytest

STEP = r"""
import json, sys, importlib, torch
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
mode = dm.execution_mode()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.LayerNorm(256),
                        torch.nn.Dropout(0.1), torch.nn.Linear(256, 10)).to(card)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(32, 64).to(card); y = torch.randint(0, 10, (32,)).to(card)
steps = []
for step in range(3):
    dm.synchronize(); t0 = dm.host_time_ns()
    s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    s.record()
    with torch.autocast(card, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(m(x).float(), y)
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    e.record(); e.synchronize()
    steps.append(dict(host_ns=dm.host_time_ns() - t0, event_ms=s.elapsed_time(e), loss=loss.item(),
                      peak=dm.max_memory_allocated(), reserved=dm.memory_reserved()))
print("RESULT " + json.dumps(dict(mode=mode, steps=steps, summary=dm.memory_summary() != "")))
"""


def _result(res):
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_same_simulated_times_and_memory_as_full_mode(py, card):
    full = _result(py(STEP, args=(card,)))
    timing = _result(py(STEP, args=(card,), env={"CARDSIM_EXECUTION": "timing"}))
    assert full["mode"] == "full" and timing["mode"] == "timing"
    for f, t in zip(full["steps"], timing["steps"]):
        assert t["host_ns"] == f["host_ns"] and t["event_ms"] == f["event_ms"], (f, t)
        assert t["peak"] == f["peak"] and t["reserved"] == f["reserved"], (f, t)
        assert f["loss"] > 0 and t["loss"] == 0.0      # the documented fill
    assert timing["summary"]


BIG = r"""
import json, os, torch, torch_mlu, cardsim_torch
cardsim_torch.set_execution_mode("timing")
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
dm = torch.mlu
x = torch.ones(16, device="mlu"); dm.synchronize()
before = rss()
# 3 x 4 GiB on a 22.8 GiB card: far more than a test machine should touch, never touched here
a = torch.empty(32768, 32768, device="mlu")
b = torch.empty(32768, 32768, device="mlu")
s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
s.record(); c = a @ b; a.add_(1); c.relu_(); e.record(); e.synchronize()
after = rss()
oom, held = None, []
try:
    for _ in range(4):   # 12 GiB held + 4 x 4 GiB > the card's 23374 MiB
        held.append(torch.empty(4 << 30, dtype=torch.uint8, device="mlu"))
except torch.OutOfMemoryError as err:
    oom = str(err)
print("RESULT " + json.dumps(dict(grew=after - before, ms=s.elapsed_time(e), item=c[0, 0].item(),
                                  cpu=c[:2, :2].cpu().tolist(), oom=oom,
                                  flops=dm.get_device_properties(0).peak_fp32_flops)))
"""


def test_real_sizes_cost_no_host_memory_and_oom_stays(py):
    r = _result(py(BIG))
    assert r["grew"] < 256 << 20, r["grew"]
    # the matmul alone: 2 n^3 flops at no more than the fp32 peak
    assert r["ms"] * 1e-3 >= 2 * 32768 ** 3 / r["flops"], r
    assert r["item"] == 0.0 and r["cpu"] == [[0.0, 0.0], [0.0, 0.0]]
    assert r["oom"] and "mlu:0" in r["oom"] and "Tried to allocate 4.00 GiB" in r["oom"], r["oom"]


def test_mode_selection_errors(py):
    late = _result(py(r"""
import json, torch, torch_mlu, cardsim_torch
torch.zeros(1, device="mlu")
out = {}
for mode in ("timing", "fast"):
    try:
        cardsim_torch.set_execution_mode(mode)
    except (RuntimeError, ValueError) as e:
        out[mode] = type(e).__name__ + ": " + str(e)
cardsim_torch.set_execution_mode("full")   # the mode in force: accepted
print("RESULT " + json.dumps(out))
"""))
    assert late["timing"].startswith("RuntimeError") and "before the first device use" in late["timing"]
    assert late["fast"].startswith("ValueError") and "full, timing" in late["fast"]
    bad = py("import torch, torch_mlu; torch.zeros(1, device='mlu')", env={"CARDSIM_EXECUTION": "fast"})
    assert bad.returncode != 0 and "CARDSIM_EXECUTION" in bad.stderr and "full, timing" in bad.stderr


@pytest.mark.parametrize("cards", [1, 2])
def test_deepspeed_demo_steps_take_the_same_simulated_time(root, tmp_path, group_runner, cards):
    import os
    runs = {}
    for mode in ("full", "timing"):
        out = tmp_path / f"{mode}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k != "DS_ACCELERATOR"}
        env.update(CARDSIM_EXECUTION=mode, OMP_NUM_THREADS="1")
        proc = group_runner([str(root / "scripts" / "demo.sh"), "--cards", str(cards), "--steps", "3",
                             "--zero-stage", "3", "--json", str(out)], timeout=600, env=env, cwd=str(root))
        assert proc.returncode == 0, proc.stderr[-4000:]
        runs[mode] = json.loads(out.read_text())
    for f, t in zip(runs["full"], runs["timing"]):
        # The same time; the steps start at other absolute times (printing a tensor during
        # ZeRO-3's setup costs what its values make it cost), so float ns may round apart.
        assert t["sim_step_ms"] == pytest.approx(f["sim_step_ms"], rel=1e-12, abs=0), (f, t)
        assert t["peak_mem_mib"] == f["peak_mem_mib"], (f, t)
        assert t["kernel_flops"] == f["kernel_flops"], (f, t)
        assert f["loss"] > 0 and t["loss"] == 0.0


READS = r"""
import torch, torch_mlu
x = torch.ones(8, device="mlu")
total = 0.0
for _ in range(3):
    total += (x * 2).sum().item()          # READ-SITE-1
host = x.cpu()                             # READ-SITE-2
print("TOTAL", total, host.tolist()[:2])
"""


def test_host_reads_are_reported_by_site_in_timing_mode(py, tmp_path):
    prog = tmp_path / "reads.py"
    prog.write_text(READS)
    res = py(f"import runpy; runpy.run_path({str(prog)!r})",
             env={"CARDSIM_EXECUTION": "timing", "CARDSIM_REPORT_HOST_READS": "1"})
    assert res.returncode == 0, res.stderr[-3000:]
    assert "TOTAL 0.0 [0.0, 0.0]" in res.stdout
    lines = {l.split("reads.py:")[1].split(" ")[0]: l for l in res.stderr.splitlines() if "reads.py:" in l}
    src = READS.splitlines()
    line1 = next(i for i, l in enumerate(src, 1) if "READ-SITE-1" in l)
    line2 = next(i for i, l in enumerate(src, 1) if "READ-SITE-2" in l)
    assert lines[str(line1)].split()[0] == "3", res.stderr     # .item() three times at one site
    assert lines[str(line2)].split()[0] == "1", res.stderr
    assert "host read(s) of device data in timing mode" in res.stderr
    full = py(f"import runpy; runpy.run_path({str(prog)!r})", env={"CARDSIM_REPORT_HOST_READS": "1"})
    assert full.returncode == 0 and "host read" not in full.stderr and "TOTAL 48.0" in full.stdout


CARRY = r"""
import importlib, json, os, sys
from datetime import timedelta
import torch
import torch.distributed as dist
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
dm.set_execution_mode("timing")
rank = int(os.environ["RANK"])
dm.set_device(rank)
dist.init_process_group({"mlu": "cncl", "supa": "bccl"}[card], timeout=timedelta(seconds=60))
d = torch.device(card, rank)
# What DeepSpeed's ZeRO-3 does to check that the ranks agree: host values, broadcast, read back.
ids = torch.tensor([7, 11, 13] if rank == 0 else [-1, -1, -1], device=d)
dist.broadcast(ids, src=0)
flag = torch.tensor([rank + 1.0], device=d)
dist.all_reduce(flag)
avg = torch.tensor([rank + 1.0], device=d)
dist.all_reduce(avg, op=dist.ReduceOp.AVG)
big_host = torch.ones(1 << 19).to(d)          # 2 MiB from the host: not carried
dist.all_reduce(big_host)
out = dict(ids=ids.cpu().tolist(), flag=flag.item(), avg=avg.item(), big_host=big_host[:3].cpu().tolist(),
           computed=(ids * 2).cpu().tolist(), filled=torch.full((3,), 5.0, device=d).cpu().tolist(),
           nonzero=ids.nonzero().flatten().cpu().tolist(), printed=repr(torch.ones(2, device=d)))
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_timing_mode_carries_small_host_data_between_ranks(card):
    from conftest import run_ranks
    for rank, (rc, o, e) in enumerate(run_ranks(CARRY, 2, args=(card,))):
        assert rc == 0, e[-3000:]
        r = json.loads(o.split("RESULT ", 1)[1])
        assert r["ids"] == [7, 11, 13], (rank, r)            # host data, broadcast, read back
        assert r["flag"] == 3.0 and r["avg"] == 1.5, (rank, r)
        assert r["nonzero"] == [0, 1, 2], (rank, r)          # value-shaped operators run on what is there
        # what the card computes, and host data beyond the carried size, read as zeros
        assert r["computed"] == [0, 0, 0] and r["filled"] == [0.0, 0.0, 0.0], (rank, r)
        assert r["big_host"] == [0.0, 0.0, 0.0], (rank, r)
        assert r["printed"].startswith("tensor([0., 0.]"), (rank, r)


GRAPH = r"""
import json, sys, importlib, torch
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(card)
x = torch.randn(128, 256, device=card)
side = dm.Stream()
side.wait_stream(dm.current_stream())
with dm.stream(side):              # warm-up on a side stream, as graph capture wants
    m(x)
dm.current_stream().wait_stream(side)
dm.synchronize()
g = getattr(dm, sys.argv[2])()
with dm.graph(g):
    y = m(x)
    z = (x * 2) + 1                # a temporary freed inside the capture: the graph keeps it
times = []
for _ in range(3):
    a, b = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    a.record(); g.replay(); b.record(); b.synchronize()
    times.append(a.elapsed_time(b))
st = dm.memory_stats()
print("RESULT " + json.dumps(dict(mode=dm.execution_mode(), times=times, y=y[0, :3].cpu().tolist(),
                                  allocated=dm.memory_allocated(), reserved=dm.memory_reserved(),
                                  allocations=st["allocation.all.current"], freed=st["allocation.all.freed"],
                                  summary="Allocated memory" in dm.memory_summary())))
"""


@pytest.mark.parametrize("card,graph", [("mlu", "MLUGraph"), ("supa", "SUPAGraph")])
def test_graph_capture_and_replay_time_the_same_in_timing_mode(py, card, graph):
    full = _result(py(GRAPH, args=(card, graph)))
    timing = _result(py(GRAPH, args=(card, graph), env={"CARDSIM_EXECUTION": "timing"}))
    assert full["mode"] == "full" and timing["mode"] == "timing"
    assert timing["times"] == full["times"] and min(full["times"]) > 0, (full, timing)
    for k in ("allocated", "reserved", "allocations", "freed", "summary"):
        assert timing[k] == full[k], (k, full[k], timing[k])
    assert any(v != 0 for v in full["y"]) and timing["y"] == [0.0, 0.0, 0.0]


def test_a_trace_recorded_in_timing_mode_replays_as_recorded(root, py, tmp_path):
    cardsim = str(root / "build" / "traces" / "cardsim")
    totals = {}
    for mode in ("full", "timing"):
        d = tmp_path / mode
        res = py(STEP, args=("mlu",), env={"CARDSIM_EXECUTION": mode, "CARDSIM_TRACE": str(d)})
        assert res.returncode == 0, res.stderr[-3000:]
        info = subprocess.run([cardsim, "info", str(d), "--json"], capture_output=True, text=True)
        assert info.returncode == 0, info.stderr
        recorded = json.loads(info.stdout)
        rep = subprocess.run([cardsim, "replay", str(d), "--json", str(tmp_path / f"{mode}.json")],
                             capture_output=True, text=True)
        assert rep.returncode == 0, rep.stderr
        replayed = json.loads((tmp_path / f"{mode}.json").read_text())
        totals[mode] = (recorded, replayed)
    (f_rec, f_rep), (t_rec, t_rep) = totals["full"], totals["timing"]
    assert t_rec["execution_mode"] == "timing" and f_rec["execution_mode"] == "full", (f_rec, t_rec)
    # the same commands, and replaying the timing-mode trace gives what it recorded
    assert t_rec["records"] == f_rec["records"], (f_rec, t_rec)
    assert t_rep["total_us"] == pytest.approx(t_rec["recorded_total_us"], rel=1e-9), (t_rec, t_rep)


def test_deepspeed_fp16_loss_scaling_runs_through_in_timing_mode(root, tmp_path, group_runner):
    # Zeros everywhere are finite: no overflow is found, no step skipped, the scale holds.
    import os
    out = tmp_path / "fp16.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k != "DS_ACCELERATOR"}
    env.update(CARDSIM_EXECUTION="timing")
    proc = group_runner([str(root / "scripts" / "demo.sh"), "--steps", "3", "--precision", "fp16",
                         "--json", str(out)], timeout=600, env=env, cwd=str(root))
    assert proc.returncode == 0, proc.stderr[-4000:]
    text = proc.stdout + proc.stderr
    assert "OVERFLOW" not in text and "Skipping step" not in text, text[-3000:]
    recs = json.loads(out.read_text())
    assert len(recs) == 3 and all(r["loss"] == 0.0 and r["sim_step_ms"] > 0 for r in recs), recs


CONV = r"""
import json, sys, importlib, torch
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                        torch.nn.Conv2d(16, 8, 3, stride=2), torch.nn.Flatten()).to(card)
x = torch.randn(8, 3, 32, 32).to(card)
dm.synchronize()
s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
s.record()
out = m(x)
out.square().mean().backward()
e.record(); e.synchronize()
print("RESULT " + json.dumps(dict(ms=s.elapsed_time(e), shape=list(out.shape),
                                  grad_shape=list(m[0].weight.grad.shape))))
"""


def test_convolutions_run_in_timing_mode_with_the_full_mode_times(py):
    full = _result(py(CONV, args=("mlu",)))
    timing = _result(py(CONV, args=("mlu",), env={"CARDSIM_EXECUTION": "timing"}))
    assert timing["shape"] == full["shape"] == [8, 8 * 15 * 15]
    assert timing["grad_shape"] == full["grad_shape"] == [16, 3, 3, 3]
    assert timing["ms"] == full["ms"] > 0


COMPILED = r"""
import json, sys, importlib, torch
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
f = torch.compile(lambda x, y: torch.nn.functional.silu(x) * y + 1)
x, y = torch.randn(1 << 16).to(card), torch.randn(1 << 16).to(card)
f(x, y)   # compiles
s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
s.record(); out = f(x, y); e.record(); e.synchronize()
print("RESULT " + json.dumps(dict(ms=s.elapsed_time(e), total=out.sum().item())))
"""


def test_a_torch_compiled_function_runs_in_timing_mode_with_the_full_mode_time(py):
    # Inductor's kernels run on the host in full mode and are skipped in timing mode
    # (device memory is not there to touch); both queue the same cost.
    full = _result(py(COMPILED, args=("supa",)))
    timing = _result(py(COMPILED, args=("supa",), env={"CARDSIM_EXECUTION": "timing"}))
    assert timing["ms"] == full["ms"] > 0
    assert full["total"] != 0 and timing["total"] == 0.0


ATTENTION = r"""
import json, sys, importlib, torch, torch.nn.functional as F
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
q, k, v = (torch.randn(2, 4, 128, 32).to(card).requires_grad_() for _ in range(3))
s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
s.record()
out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
out.sum().backward()
e.record(); e.synchronize()
print("RESULT " + json.dumps(dict(ms=s.elapsed_time(e), shape=list(q.grad.shape), stride=list(q.grad.stride()),
                                  total=out.sum().item())))
"""


def test_fused_attention_runs_in_timing_mode_with_the_full_mode_time(py):
    # Its result shapes come from the meta kernel, in timing mode, and the layouts must agree.
    full = _result(py(ATTENTION, args=("mlu",)))
    timing = _result(py(ATTENTION, args=("mlu",), env={"CARDSIM_EXECUTION": "timing"}))
    assert (timing["shape"], timing["stride"]) == (full["shape"], full["stride"]) == ([2, 4, 128, 32], [16384, 4096, 32, 1])
    assert timing["ms"] == full["ms"] > 0
    assert full["total"] != 0 and timing["total"] == 0.0
