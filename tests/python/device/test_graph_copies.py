"""Captured copies that stage through temporaries replay correctly.

A host-to-device copy with a layout or dtype change stages the source on the host, and a
device-to-host copy into a tensor it cannot write directly lays the result out from a
staging buffer. In a graph both happen at every replay: the graph owns the staging buffers
and the host-side steps are host nodes of the graph.
"""
import gc

import pytest
import torch


def _graph(dm, card):
    return getattr(dm, {"mlu": "MLUGraph", "supa": "SUPAGraph"}[card])()


@pytest.mark.parametrize("src_dtype", [torch.float64, torch.float16, torch.int32])
def test_h2d_copy_with_dtype_change_reads_the_source_at_replay(dm, card, src_dtype):
    src = torch.arange(64).to(src_dtype).pin_memory()
    dst = torch.zeros(64, device=card)
    g, side = _graph(dm, card), dm.Stream()
    with dm.graph(g, stream=side):
        dst.copy_(src, non_blocking=True)
    # Temporaries made during capture are gone; churn the host heap so a stale pointer shows.
    junk = [torch.randn(64, dtype=torch.float64) for _ in range(64)]
    del junk
    gc.collect()
    for shift in (0, 7, 100):
        src.copy_(torch.arange(64).to(src_dtype) + shift)
        g.replay()
        dm.synchronize()
        assert dst.cpu().tolist() == [float(i + shift) for i in range(64)]


def test_h2d_copy_from_non_contiguous_source_in_a_graph(dm, card):
    base = torch.zeros(8, 2).pin_memory()
    src = base[:, 1]                        # strided: staged on the host
    dst = torch.zeros(8, device=card)
    g, side = _graph(dm, card), dm.Stream()
    with dm.graph(g, stream=side):
        dst.copy_(src, non_blocking=True)
    base[:, 1] = torch.arange(8.0)
    g.replay()
    dm.synchronize()
    assert dst.cpu().tolist() == list(map(float, range(8)))


def test_d2h_copy_into_non_contiguous_host_tensor_updates_at_each_replay(dm, card):
    d = torch.arange(6.0, device=card)
    host = torch.full((6, 2), -1.0)
    out = host[:, 0]                        # not contiguous: laid out from a staging buffer
    g, side = _graph(dm, card), dm.Stream()
    with dm.graph(g, stream=side):
        out.copy_(d, non_blocking=True)
    assert out.tolist() == [-1.0] * 6       # capture does not run the copy
    g.replay()
    dm.synchronize()
    assert out.tolist() == list(map(float, range(6)))
    d.add_(10)
    g.replay()
    dm.synchronize()
    assert out.tolist() == [10.0 + i for i in range(6)]
    assert host[:, 1].tolist() == [-1.0] * 6   # the other column is untouched


def test_d2h_copy_with_dtype_change_in_a_graph(dm, card):
    d = torch.arange(5.0, device=card)
    out = torch.zeros(5, dtype=torch.float64)
    g, side = _graph(dm, card), dm.Stream()
    with dm.graph(g, stream=side):
        out.copy_(d, non_blocking=True)
    d.mul_(3)
    g.replay()
    dm.synchronize()
    assert out.tolist() == [3.0 * i for i in range(5)]


def test_resize_inside_a_graph_keeps_the_copied_block(dm, card):
    t = torch.arange(4.0, device=card)
    g, side = _graph(dm, card), dm.Stream()
    with dm.graph(g, stream=side):
        t.resize_(64)                        # moves the old bytes to a bigger block
        t[:4].mul_(2)
    # The replay copies from the old block again: it must still hold the original values.
    junk = [torch.full((4,), 99.0, device=card) for _ in range(16)]
    del junk
    g.replay()
    dm.synchronize()
    assert t[:4].cpu().tolist() == [0.0, 2.0, 4.0, 6.0]


def test_destroyed_graphs_release_the_memory_they_hold(dm, card):
    src = torch.arange(1024, dtype=torch.float64).pin_memory()
    dst = torch.zeros(1024, device=card)
    side = dm.Stream()
    for _ in range(3):
        g = _graph(dm, card)
        with dm.graph(g, stream=side):
            dst.copy_(src, non_blocking=True)
        g.replay()
        dm.synchronize()
        del g
    gc.collect()
    before = dm.memory_allocated()
    for _ in range(50):
        g = _graph(dm, card)
        with dm.graph(g, stream=side):
            dst.copy_(src, non_blocking=True)
        del g
    gc.collect()
    dm.synchronize()
    assert dm.memory_allocated() == before
