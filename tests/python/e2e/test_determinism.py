"""Simulated time, end to end: identical across processes for the same program and
configuration, and single operations land on their closed forms (roofline for a matmul,
bytes / link bandwidth for a host-to-device copy)."""
import json
import pathlib
import re
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]


def preset_values(name: str) -> dict:
    """{'device.host_link.latency': '2 us', ...} from simulator/presets/<name>.textproto."""
    out, stack = {}, []
    for raw in (ROOT / "simulator" / "presets" / f"{name}.textproto").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if m := re.fullmatch(r"(\w+)\s*\{", line):
            stack.append(m.group(1))
        elif line == "}":
            stack.pop()
        elif m := re.fullmatch(r'value:\s*"([^"]*)"', line):
            out[".".join(stack)] = m.group(1)
    return out


def _run(py, card, body, env=None):
    code = textwrap.dedent(f"""\
        import json, torch
        import torch_{card}
        mod = torch.{card}
        res = {{}}
        """) + textwrap.dedent(body) + '\nprint("RESULT " + json.dumps(res))\n'
    proc = py(code, env=env)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


# ---- determinism -----------------------------------------------------------------------

_MIXED = """
    torch.manual_seed(0)
    d = torch.device("{card}", 0)
    E = lambda: mod.Event(enable_timing=True)
    side = mod.Stream()
    start = E(); start.record()
    a = torch.randn(512, 768).to(d)                                  # H2D, pageable
    b = torch.randn(768, 256).pin_memory().to(d, non_blocking=True)  # H2D, pinned
    marks, host_ns = [], []
    for i in range(3):
        e = E(); e.record(); marks.append(e)
        c = torch.relu(a @ b) * 0.5 + 1.0                            # matmul + elementwise
        with mod.stream(side):                                       # a second stream
            side.wait_stream(mod.current_stream())
            big = torch.ones(1 << 20, device=d)
            z = (big * 3).sum()
            w = torch.randn(256, 256, device=d) @ torch.randn(256, 256, device=d)
            w2 = w.clone()                                           # device to device
        mod.current_stream().wait_stream(side)
        host = c.cpu()                                               # D2H
        host_ns.append(mod.host_time_ns())
    e = E(); e.record(); marks.append(e)
    e.synchronize()
    host_ns.append(mod.host_time_ns())
    res["from_start"] = [start.elapsed_time(m) for m in marks]
    res["between"] = [marks[i].elapsed_time(marks[i + 1]) for i in range(len(marks) - 1)]
    res["host_ns"] = host_ns
    res["checksum"] = float(host.sum()) + float(z.cpu()) + float(w2.sum().cpu())
    """


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_simulated_times_identical_across_processes(py, card):
    body = _MIXED.format(card=card)
    first = _run(py, card, body)
    second = _run(py, card, body)
    assert first == second
    assert all(t > 0 for t in first["from_start"] + first["between"])
    assert first["host_ns"] == sorted(first["host_ns"]) and first["host_ns"][0] > 0
    if card == "mlu":
        # the host's own thread count and speed do not enter simulated time
        # (the checksum may differ in its last bits: host float sums depend on threading)
        third = _run(py, card, body, env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        for key in ("from_start", "between", "host_ns"):
            assert third[key] == first[key], key


def test_simulated_times_depend_on_configuration(py, tmp_path):
    # the same program on a configuration with slower host link and memory: not identical
    body = _MIXED.format(card="mlu")
    cfg = tmp_path / "slow.cfg"
    cfg.write_text("memory.bandwidth = 100 GB/s\nhost_link.efficiency = 0.4\n")
    base = _run(py, "mlu", body)
    slow = _run(py, "mlu", body, env={"CARDSIM_CONFIG": str(cfg)})
    assert slow["checksum"] == base["checksum"]
    assert slow["from_start"][-1] > base["from_start"][-1]


# ---- closed forms ------------------------------------------------------------------

_SINGLE_OPS = """
    d = torch.device("{card}", 0)
    p = mod.get_device_properties(0)
    res["props"] = dict(fp32=p.peak_fp32_flops, bw=p.memory_bandwidth, link=p.host_link_bandwidth)
    def timed(fn):
        mod.synchronize()
        s = mod.Event(enable_timing=True); e = mod.Event(enable_timing=True)
        s.record(); out = fn(); e.record(); e.synchronize()
        return s.elapsed_time(e), out
    mm = {{}}
    for M, N, K in {shapes}:
        a = torch.randn(M, K, device=d); b = torch.randn(K, N, device=d)
        a @ b                                     # warm up the allocator
        ms, c = timed(lambda: a @ b)
        mm[f"{{M}}x{{N}}x{{K}}"] = ms
        del a, b, c
    res["matmul"] = mm
    nbytes = 64 << 20
    pinned = torch.ones(nbytes, dtype=torch.uint8).pin_memory()
    pageable = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=d)
    back = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    res["copy"] = dict(
        nbytes=nbytes,
        h2d_pinned=timed(lambda: dst.copy_(pinned, non_blocking=True))[0],
        h2d_pageable=timed(lambda: dst.copy_(pageable))[0],
        d2h_pinned=timed(lambda: back.copy_(dst, non_blocking=True))[0],
    )
    mod.synchronize()
    res["copied_ok"] = bool(back.all().item())
    """


def _roofline_ms(M, N, K, props, gemm_efficiency):
    flops = 2.0 * M * N * K
    nbytes = 4.0 * (M * K + K * N + M * N)
    return max(flops / (props["fp32"] * gemm_efficiency), nbytes / props["bw"]) * 1e3


# Fixed costs a single operation may add on top of its closed form (dispatch, first-byte
# latency, DMA setup): microseconds, never a share of a millisecond-scale operation.
SLACK_MS = 0.015


@pytest.mark.parametrize("card,preset,shapes", [
    ("mlu", "mlu370-x8", [(2048, 2048, 2048), (8192, 64, 8192)]),
    ("supa", "br100", [(4096, 4096, 2048), (16384, 32, 16384)]),
])
def test_single_ops_match_closed_forms(py, card, preset, shapes):
    res = _run(py, card, _SINGLE_OPS.format(card=card, shapes=shapes))
    pv = preset_values(preset)
    eff = float(pv["device.compute.efficiency.gemm"])
    props = res["props"]
    for M, N, K in shapes:
        got = res["matmul"][f"{M}x{N}x{K}"]
        want = _roofline_ms(M, N, K, props, eff)
        assert abs(got - want) <= 0.04 * want + SLACK_MS, (
            f"{M}x{N}x{K} fp32 matmul took {got:.4f} simulated ms, roofline "
            f"(gemm efficiency {eff}) says {want:.4f} ms")
    # the link bandwidth the properties report: PCIe rate x lanes x efficiency of the preset
    gen = int(pv["device.host_link.pcie_generation"])
    lanes = int(pv["device.host_link.lanes"])
    lane_bits = {3: 8e9, 4: 16e9, 5: 32e9}[gen] * 128 / 130
    link = lane_bits * lanes / 8 * float(pv["device.host_link.efficiency"])
    assert props["link"] == pytest.approx(link, rel=1e-6)
    cp = res["copy"]
    n = cp["nbytes"]
    want = n / link * 1e3
    assert abs(cp["h2d_pinned"] - want) <= 0.03 * want + SLACK_MS, (cp, want)
    assert abs(cp["d2h_pinned"] - want) <= 0.03 * want + SLACK_MS, (cp, want)
    pageable_eff = float(pv["device.host_link.pageable_efficiency"])
    want_pageable = n / (link * pageable_eff) * 1e3
    assert abs(cp["h2d_pageable"] - want_pageable) <= 0.03 * want_pageable + SLACK_MS, (cp, want_pageable)
    assert res["copied_ok"]


def test_matmul_roofline_with_full_efficiency(py, tmp_path):
    # with the GEMM efficiency overridden to 1 the closed form is the plain roofline
    # max(2MNK / peak_fp32_flops, bytes / memory_bandwidth)
    cfg = tmp_path / "ideal.cfg"
    cfg.write_text("compute.efficiency.gemm = 1.0\n")
    shapes = [(2048, 2048, 2048), (8192, 64, 8192)]
    res = _run(py, "mlu", _SINGLE_OPS.format(card="mlu", shapes=shapes),
               env={"CARDSIM_CONFIG": str(cfg)})
    for M, N, K in shapes:
        got = res["matmul"][f"{M}x{N}x{K}"]
        want = _roofline_ms(M, N, K, res["props"], 1.0)
        assert abs(got - want) <= 0.04 * want + SLACK_MS, (M, N, K, got, want)
