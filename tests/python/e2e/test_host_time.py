"""Host time follows causality across threads.

PyTorch runs backward for the card on the autograd engine's own thread while the caller
blocks. The launches made there must cost the caller their host time, and that thread must
not start before the hand-off: a launch-bound step can never be shorter than its launches
times the launch overhead, forward and backward alike.
"""
import json

import pytest

LAUNCH_US = 50.0   # far above any kernel of the tiny model: the step is launch-bound

PROG = r"""
import json, sys, torch, importlib
card = sys.argv[1]
importlib.import_module("torch_" + card)
from cardsim_torch import _C
dm = getattr(torch, card)
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(6)]).to(card)
x = torch.randn(4, 8, device=card)
kernels = lambda acts: sum(1 for a in acts if a[0] == "kernel")
out = []
for step in range(3):
    dm.synchronize()
    _C._set_activity_recording(True); _C._drain_activities()
    start, mid, end = (dm.Event(enable_timing=True) for _ in range(3))
    h0 = dm.host_time_ns(); start.record()
    loss = m(x).square().mean()
    mid.record(); h1 = dm.host_time_ns()
    dm.synchronize()
    n_fwd = kernels(_C._drain_activities())
    h1s = dm.host_time_ns()
    loss.backward()
    h2 = dm.host_time_ns(); end.record(); end.synchronize()
    n_bwd = kernels(_C._drain_activities())
    out.append(dict(n_fwd=n_fwd, n_bwd=n_bwd, host_fwd_us=(h1 - h0) / 1e3, host_bwd_us=(h2 - h1s) / 1e3,
                    dev_fwd_ms=start.elapsed_time(mid), dev_bwd_ms=mid.elapsed_time(end)))
    m.zero_grad(set_to_none=True)
print("RESULT " + json.dumps(out))
"""


def _run(py, card, tmp_path):
    cfg = tmp_path / "host.cfg"
    cfg.write_text(f"host.launch_overhead = {LAUNCH_US} us\n")
    res = py(PROG, env={"CARDSIM_CONFIG": str(cfg)}, args=(card,))
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_backward_launches_cost_host_time(py, card, tmp_path):
    steps = _run(py, card, tmp_path)
    for s in steps:
        assert s["n_fwd"] >= 6 and s["n_bwd"] >= 12, s
        # Each launch costs the launching thread LAUNCH_US; backward's launches are the
        # caller's cost too, since it waits for them.
        assert s["host_fwd_us"] >= s["n_fwd"] * LAUNCH_US, s
        assert s["host_bwd_us"] >= s["n_bwd"] * LAUNCH_US, s
        # The device cannot finish a launch-bound phase before its last launch was issued.
        assert s["dev_bwd_ms"] * 1e3 >= (s["n_bwd"] - 1) * LAUNCH_US, s
    # Steps after the first are identical (no drift between the threads' clocks). Times end
    # on the card's clock edges, not whole nanoseconds: differences of ns floats are compared
    # to rounding.
    assert steps[1] == pytest.approx(steps[2], rel=1e-12, abs=1e-9)


def test_backward_host_time_is_deterministic_across_processes(py, tmp_path):
    assert _run(py, "mlu", tmp_path) == _run(py, "mlu", tmp_path)


JOIN = r"""
import json, sys, threading, importlib, torch
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
x = torch.ones(16, device=card)
dm.synchronize()
out = {}
def work(n):
    for _ in range(n):
        x.add_(1)
    out["worker_end_ns"] = dm.host_time_ns()
def idle():
    out["idle"] = sum(range(1000))
t0 = dm.host_time_ns()
t = threading.Thread(target=work, args=(20,)); t.start(); t.join()
t1 = dm.host_time_ns()
u = threading.Thread(target=idle); u.start(); u.join()
t2 = dm.host_time_ns()
print("RESULT " + json.dumps(dict(t0=t0, t1=t1, t2=t2, **out)))
"""


def test_joining_a_thread_continues_from_its_clock(py, tmp_path):
    cfg = tmp_path / "host.cfg"
    cfg.write_text(f"host.launch_overhead = {LAUNCH_US} us\n")
    res = py(JOIN, env={"CARDSIM_CONFIG": str(cfg)}, args=("mlu",))
    assert res.returncode == 0, res.stderr[-3000:]
    r = json.loads(next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])
    # The worker's 20 launches happened after the start; the joiner continues after them.
    assert r["worker_end_ns"] - r["t0"] >= 20 * LAUNCH_US * 1e3, r
    assert r["t1"] >= r["worker_end_ns"], r
    # Joining a thread that never used the card costs no simulated time.
    assert r["t2"] == r["t1"], r
