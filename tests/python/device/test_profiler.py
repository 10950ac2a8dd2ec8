"""torch.profiler shows the card: device slices in simulated time on per-stream tracks, linked
to the operators that launched them, in key_averages and in the Chrome trace."""
import json
import os

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile


def _busy(card):
    """Keeps the current stream busy, so that events recorded next measure only what follows."""
    a = torch.randn(1024, 1024, device=card)
    return a @ a


@pytest.mark.skipif(bool(os.environ.get("CARDSIM_CHECK")),
                    reason="the checker's dispatch mode adds a level of operator events")
def test_device_slices_carry_the_simulated_durations_events_report(dm, card):
    x = torch.randn(512, 512, device=card)
    dm.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        _busy(card)
        start, end = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
        start.record()
        y = x @ x
        end.record()
        end.synchronize()
    kernels = [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1 and e.name == "aten::mm"]
    assert len(kernels) == 2, [(e.name, e.device_type) for e in prof.events()]
    timed = kernels[-1]    # the 512 x 512 product, between the two events
    assert timed.time_range.elapsed_us() == pytest.approx(start.elapsed_time(end) * 1000, rel=1e-6, abs=1e-3)
    # linked to the operator that launched it: the CPU op carries the device time (the CPU
    # operators that emulate the kernel on the host are not recorded: one aten::mm per launch)
    ops = [e for e in prof.events() if e.device_type == DeviceType.CPU and e.name == "aten::mm"]
    assert len(ops) == 2 and all(op.device_time_total > 0 for op in ops), \
        [(op.name, op.device_time_total) for op in ops]
    nested = [e.name for e in prof.events() if e.device_type == DeviceType.CPU and e.name == "aten::mm_out"]
    assert nested == [], nested
    assert sum(op.device_time_total for op in ops) == pytest.approx(sum(k.time_range.elapsed_us() for k in kernels))
    avg = {e.key: e for e in prof.key_averages() if e.device_time_total > 0 and e.self_cpu_time_total > 0}
    assert "aten::mm" in avg, list(avg)
    del y


def test_chrome_trace_has_per_stream_device_tracks_copies_and_memsets(dm, card, tmp_path):
    side = dm.Stream()
    host = torch.ones(4096)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        d = host.to(card)                       # a copy from the host
        z = torch.zeros(1 << 16, device=card)    # a memset or fill
        with dm.stream(side):
            w = torch.relu(torch.randn(256, 256, device=card))
        dm.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    device = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("device") == f"{card}:0"]
    cats = {e["cat"] for e in device}
    assert "kernel" in cats and "gpu_memcpy" in cats, cats
    relu = [e for e in device if e["name"] == "aten::relu"]
    assert relu and relu[0]["tid"] == side.stream_id and relu[0]["args"]["stream"] == side.stream_id
    copies = [e for e in device if e["cat"] == "gpu_memcpy"]
    assert copies[0]["args"]["bytes"] == 4096 * 4 and copies[0]["args"]["kind"] == "memcpy HtoD"
    for e in device:                          # linked to an operator (External id = correlation)
        assert e["dur"] >= 0 and "External id" in e["args"], e
    del d, z, w


def test_no_slice_starts_before_its_operator_and_order_is_simulated(dm, card, tmp_path):
    x = torch.randn(256, 256, device=card)
    dm.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        for _ in range(3):
            x = torch.tanh(x @ x)
        dm.synchronize()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op" and "External id" in e.get("args", {})}
    device = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    assert len(device) == 6, [e["name"] for e in device]
    for e in device:
        op = ops[e["args"]["External id"]]
        assert e["ts"] >= op["ts"] - 1e-3 and op["name"] == e["name"], (e, op)
    # one stream: the model's order, no overlap, and never closer than in simulated time
    starts = [e["args"]["simulated start us"] for e in device]
    assert starts == sorted(starts)
    for a, b, s0, s1 in zip(device, device[1:], starts, starts[1:]):
        assert b["ts"] >= a["ts"] + a["dur"] - 1e-3
        assert b["ts"] - a["ts"] >= s1 - s0 - 2e-3


def test_the_vendor_activity_name(card):
    assert getattr(ProfilerActivity, card.upper()) == ProfilerActivity.PrivateUse1
