"""`cardsim replay` on graphs: a launched graph's kernels are judged by the roofline from
their capture (their commands are tied to the graph's launch, or on the streams a capture
forked to, to no call), so a graph of memory-bound kernels reads as memory-bound work, in
the breakdown and among the top kernels, as the same kernels run eagerly do."""
import pytest

from test_replay import record, recorded_total_us, replay

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
