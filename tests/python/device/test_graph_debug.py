"""Graph.debug_dump writes the captured graph as Graphviz DOT: every node in replay order with
its kind, stream and cost; without enable_debug_mode it warns and writes nothing (as on CUDA)."""
import re

import pytest
import torch


def _graph_class(dm, card):
    return getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")


def test_debug_dump_lists_every_captured_node_in_order(dm, card, tmp_path):
    x = torch.ones(256, 256, device=card)
    host = torch.randn(256, 256).pin_memory()
    s = dm.Stream()
    s.wait_stream(dm.current_stream())
    g = _graph_class(dm, card)()
    g.enable_debug_mode()
    with dm.graph(g, stream=s):
        y = x @ x                      # kernel: 2 * 256^3 flops
        x.copy_(host, non_blocking=True)   # host-to-device copy
        y.zero_()                      # a memset or a fill kernel
    path = tmp_path / "graph.dot"
    g.debug_dump(str(path))
    dot = path.read_text()
    assert dot.startswith(f"digraph {_graph_class(dm, card).__name__} {{")
    nodes = re.findall(r'^  n(\d+) \[label="(\d+): ([^\\]+)\\n([^,]+), stream (\d+)(?:\\n([^"]*))?"\];$', dot, re.M)
    assert len(nodes) == g.node_count() >= 3
    assert [int(n[0]) for n in nodes] == list(range(len(nodes)))
    assert all(int(n[4]) == s.stream_id for n in nodes)
    mm = next(n for n in nodes if n[2] == "aten::mm")
    assert mm[3] == "kernel" and "33.55 MFLOP" in mm[5]   # 2 * 256^3
    copy = next(n for n in nodes if n[3] == "memcpy HtoD")
    assert "262.14 KB" in copy[5]                          # 256 * 256 * 4 bytes
    assert dot.count(" -> ") == len(nodes) - 1


def test_debug_dump_without_debug_mode_warns_and_writes_nothing(dm, card, tmp_path):
    x = torch.ones(16, device=card)
    s = dm.Stream()
    s.wait_stream(dm.current_stream())
    g = _graph_class(dm, card)()
    with dm.graph(g, stream=s):
        x.mul_(2)
    path = tmp_path / "graph.dot"
    with pytest.warns(UserWarning, match="enable_debug_mode"):
        g.debug_dump(str(path))
    assert not path.exists()


def test_debug_dump_draws_fork_and_join_edges(dm, card, tmp_path):
    x = torch.ones(64, 64, device=card)
    s, side = dm.Stream(), dm.Stream()
    s.wait_stream(dm.current_stream())
    g = _graph_class(dm, card)()
    g.enable_debug_mode()
    with dm.graph(g, stream=s):
        a = x * 2                          # 0: on the capture stream
        side.wait_stream(s)                # fork
        with dm.stream(side):
            b = a + 1                      # 1: on the side stream
        c = a - 1                          # 2: on the capture stream, concurrent with 1
        s.wait_stream(side)                # join
        d = b * c                          # 3: after both
    g.debug_dump(str(tmp_path / "g.dot"))
    dot = (tmp_path / "g.dot").read_text()
    edges = set(re.findall(r"n(\d+) -> n(\d+);", dot))
    assert edges == {("0", "1"), ("0", "2"), ("1", "3"), ("2", "3")}, dot
    g.replay()
    dm.synchronize()
    assert torch.equal(d.cpu(), torch.full((64, 64), 3.0))
