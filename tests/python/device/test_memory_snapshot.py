"""Memory snapshots: torch.<dev>.memory._record_memory_history / _snapshot / _dump_snapshot in
PyTorch's format, read by PyTorch's own torch.cuda._memory_viz, consistent with memory_stats."""
import pickle
import sys

import pytest
import torch
import torch.cuda._memory_viz as memory_viz


def _allocate_weights(card):          # a named frame the snapshot must show
    return torch.empty(1 << 18, device=card)


def _allocate_scratch(card):
    return torch.empty(64, device=card)


@pytest.fixture
def history(dm):
    dm.synchronize()
    dm.empty_cache()
    dm.memory._record_memory_history(max_entries=100000, clear_history=True)
    yield dm.memory
    dm.memory._record_memory_history(None, clear_history=True)
    dm.empty_cache()


def _mine(snap, *addresses):
    return [s for s in snap["segments"] if s["address"] in addresses]


def test_snapshot_segments_blocks_and_stacks(dm, card, history):
    weights = _allocate_weights(card)
    scratch = _allocate_scratch(card)
    scratch_addr = scratch.data_ptr()
    del scratch                     # cached: an inactive block
    snap = history._snapshot()
    assert set(snap) >= {"segments", "device_traces"}
    (w,) = _mine(snap, weights.data_ptr())
    assert w["device"] == 0 and w["total_size"] == 1 << 20 and w["segment_type"] == "small"
    assert w["allocated_size"] == w["active_size"] == 1 << 20 and w["requested_size"] == 1 << 20
    block = w["blocks"][0]
    assert block["state"] == "active_allocated" and block["size"] == 1 << 20
    names = [(f["name"], f["filename"]) for f in block["frames"]]
    assert ("_allocate_weights", __file__) in names, names
    assert ("test_snapshot_segments_blocks_and_stacks", __file__) in names, names
    (s,) = _mine(snap, scratch_addr)
    assert s["blocks"][0]["state"] == "inactive" and s["allocated_size"] == 0 and s["blocks"][0]["frames"] == []
    # consistent with memory_stats: allocated and reserved bytes are the segments' sums
    stats = dm.memory_stats()
    on_dev0 = [x for x in snap["segments"] if x["device"] == 0]
    assert sum(x["allocated_size"] for x in on_dev0) == stats["allocated_bytes.all.current"]
    assert sum(x["total_size"] for x in on_dev0) == stats["reserved_bytes.all.current"]
    big = torch.empty(4 << 20, dtype=torch.uint8, device=card)
    (b,) = _mine(history._snapshot(), big.data_ptr())
    assert b["segment_type"] == "large"


def test_trace_records_every_allocator_action_with_simulated_times(dm, card, history):
    a = _allocate_weights(card)
    addr = a.data_ptr()
    del a
    b = _allocate_weights(card)      # reuses the cached block: no new segment
    assert b.data_ptr() == addr
    del b
    dm.empty_cache()                 # gives the segment back
    trace = [e for e in history._snapshot()["device_traces"][0] if e["addr"] == addr]
    assert [e["action"] for e in trace] == ["segment_alloc", "alloc", "free_requested", "free_completed",
                                            "alloc", "free_requested", "free_completed", "segment_free"]
    assert all(e["size"] == 1 << 20 for e in trace)
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)
    assert any(f["name"] == "_allocate_weights" for f in trace[1]["frames"])
    assert any(f["name"] == "test_trace_records_every_allocator_action_with_simulated_times"
               for f in trace[2]["frames"])      # the free's own stack


def test_max_entries_keeps_the_latest(dm, card, history):
    history._record_memory_history(max_entries=3, clear_history=True)
    for _ in range(5):
        _allocate_scratch(card)
    trace = history._snapshot()["device_traces"][0]
    assert len(trace) == 3 and trace[-1]["action"] == "free_completed"


def test_out_of_memory_is_in_the_trace(dm, card, history):
    free, total = dm.mem_get_info()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(total + (1 << 30), dtype=torch.uint8, device=card)
    (oom,) = [e for e in history._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert oom["size"] == total + (1 << 30) and 0 < oom["device_free"] <= total
    assert "raise OutOfMemoryError" in memory_viz.trace(history._snapshot())


def test_pytorch_memory_viz_renders_the_dump(dm, card, history, tmp_path):
    keep = [_allocate_weights(card) for _ in range(3)]
    del keep[1]
    path = tmp_path / "snap.pickle"
    history._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    text = memory_viz.trace(snap)
    assert "Device 0" in text and "cudaMalloc" in text and "del " in text
    summary = memory_viz.segsum(snap)
    assert "segments:" in summary and "total_reserved" in summary
    for html in (memory_viz.trace_plot(snap), memory_viz.segment_plot(snap)):
        assert html.lstrip().startswith("<!DOCTYPE html>") or "<html" in html[:500].lower(), html[:300]


def test_history_off_records_nothing_and_costs_no_stacks(dm, card):
    dm.memory._record_memory_history(None, clear_history=True)
    t = _allocate_weights(card)
    snap = dm.memory._snapshot()
    (seg,) = _mine(snap, t.data_ptr())
    assert seg["frames"] == [] and all(not d for d in snap["device_traces"])
    assert dm.memory_snapshot() == snap["segments"]


def test_bad_arguments_are_named(dm):
    with pytest.raises(ValueError, match="enabled"):
        dm.memory._record_memory_history("everything")
    with pytest.raises(ValueError, match="max_entries"):
        dm.memory._record_memory_history(max_entries=-1)


def test_the_memory_module_is_importable(card):
    mod = sys.modules[f"torch.{card}.memory"]
    assert mod is getattr(torch, card).memory
    assert callable(mod.memory_allocated) and callable(mod._dump_snapshot)


def test_a_reused_larger_block_shows_the_allocation_and_its_remainder(dm, card, history):
    big = torch.empty(1 << 18, device=card)             # 1 MiB segment
    addr = big.data_ptr()
    del big
    small = torch.empty((1 << 18) - 4096, device=card)  # reuses it: 16 KiB less
    assert small.data_ptr() == addr
    (seg,) = _mine(history._snapshot(), addr)
    assert [b["state"] for b in seg["blocks"]] == ["active_allocated", "inactive"]
    assert [b["size"] for b in seg["blocks"]] == [(1 << 20) - 16384, 16384]
    assert seg["allocated_size"] == (1 << 20) - 16384 and seg["total_size"] == 1 << 20
    assert seg["blocks"][1]["address"] == addr + (1 << 20) - 16384
