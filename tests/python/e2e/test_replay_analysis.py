"""What `cardsim replay` says of a run: a launched graph's kernels are judged by the roofline
from their capture (their commands are tied to the graph's launch, or on the streams a
capture forked to, to no call), so a graph of memory-bound kernels reads as memory-bound
work, in the breakdown and among the top kernels, as the same kernels run eagerly do; and
the critical path covers the whole run when the ranks began recording at different times."""
import subprocess

import pytest

from conftest import free_port
from test_replay import CARDSIM, PYTHON, ROOT, _env, record, recorded_total_us, replay

ELEMENTWISE = r'''
import sys, torch, torch_mlu
mode = sys.argv[1] if len(sys.argv) > 1 else "{mode}"
x = torch.randn(1 << 22, device="mlu")
torch.mlu.synchronize()
if mode == "eager":
    for _ in range(4):
        y = (x * 2.0).relu()
        w = x + 1.0
else:
    g, s = torch.mlu.MLUGraph(), torch.mlu.Stream()
    with torch.mlu.graph(g, stream=s):
        y = (x * 2.0).relu()
        if mode == "forked":   # a branch on another stream, joined before the capture ends
            cur = torch.mlu.current_stream()
            side = torch.mlu.Stream()
            side.wait_stream(cur)
            with torch.mlu.stream(side):
                w = x + 1.0
            cur.wait_stream(side)
        else:
            w = x + 1.0
    for _ in range(4):
        g.replay()
torch.mlu.synchronize()
'''


@pytest.mark.parametrize("mode", ["graph", "forked"])
def test_a_graphs_memory_bound_kernels_are_memory_bound_work(tmp_path, mode):
    eager = replay(tmp_path, record(tmp_path, "eager", ELEMENTWISE.replace("{mode}", "eager")))
    path = record(tmp_path, mode, ELEMENTWISE.replace("{mode}", mode))
    got = replay(tmp_path, path)
    assert got["total_us"] == pytest.approx(recorded_total_us(path), abs=1e-6)
    for run in (eager, got):
        b = run["breakdown"]
        assert b["compute_us"] == pytest.approx(0, abs=1e-6), b
        assert b["memory_bound_us"] > 0.8 * run["total_us"], b
        tops = {k["name"]: k for k in run["top_kernels"]}
        for name in ("aten::mul.Tensor", "aten::relu", "aten::add.Tensor"):
            assert tops[name]["count"] == 4 and tops[name]["bound"] == "memory", (name, tops)
    # the same kernels, the same time each: the graph saves only the host's launches
    tops = {k["name"]: k for k in got["top_kernels"]}
    for k in eager["top_kernels"]:
        if k["name"] in tops:
            assert tops[k["name"]]["time_us"] == pytest.approx(k["time_us"], rel=0.05), (k, tops[k["name"]])


LATE_RECORDING = r'''
import sys, torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
x = torch.randn(256, 256, device="mlu")
dist.all_reduce(x)
if rank == 1:       # rank 1 starts recording later: a long matmul of its own first
    a = torch.randn(2048, 2048, device="mlu")
    (a @ a).sum().item()
with torch.mlu.record_trace(sys.argv[1]):
    for _ in range(2):
        y = (x @ x).relu()
        dist.all_reduce(y)
    torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_the_critical_path_covers_ranks_that_began_recording_later(tmp_path):
    script = tmp_path / "late.py"
    script.write_text(LATE_RECORDING)
    out, port = tmp_path / "late", free_port()
    procs = [subprocess.Popen([PYTHON, str(script), str(out)], cwd=str(ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=_env(dict(CARDSIM_DEVICES="1", RANK=str(r), WORLD_SIZE="2", LOCAL_RANK="0",
                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))))
             for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    rep = replay(tmp_path, out)
    assert rep["total_us"] == pytest.approx(recorded_total_us(out), abs=1e-6)
    cp = rep["critical_path"]
    assert cp["total_us"] == pytest.approx(rep["total_us"], rel=1e-9, abs=1e-6), cp
    late = [i for i in cp["items"] if i["name"] == "before the rank's recording"]
    # rank 1's matmul of 2048^3 x 2 flops ran before its recording: at least that long
    assert late and late[0]["kind"] == "host" and late[0]["time_us"] > 10, cp
    # rank 1, the late one, spans less than the run (rank 0 waited for it in the all_reduce)
    assert rep["ranks"][1]["breakdown"]["total_us"] < rep["total_us"] - 10, rep["ranks"]
