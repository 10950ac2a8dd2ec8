"""Copies between two emulated cards of one process cross the preset's fabric (the route
between the two devices: its latency, then its bytes at the slowest link's rate), not the
cards' PCIe links. The fabric's figures are set by key path so the closed forms are exact."""
import json

import pytest

PROGRAM = r'''
import json, sys, torch, torch_mlu
n = int(sys.argv[1])
src = torch.arange(n // 4, dtype=torch.float32, device="mlu:0")
out = {}
for dst in range(1, torch.mlu.device_count()):
    b = torch.empty(n // 4, device=f"mlu:{dst}")
    torch.mlu.synchronize(0); torch.mlu.synchronize(dst)
    s, e = torch.mlu.Event(enable_timing=True), torch.mlu.Event(enable_timing=True)
    s.record(); b.copy_(src); e.record(); e.synchronize()
    assert torch.equal(b.cpu(), src.cpu())
    out[dst] = s.elapsed_time(e) * 1e3
print(json.dumps(out))
'''

ON_CARD_GBPS, BETWEEN_GBPS = 50.0, 20.0
CONFIG = """
fabric.on_card.bandwidth = 50 GB/s
fabric.on_card.latency = 1 us
fabric.link.bandwidth = 20 GB/s
fabric.link.latency = 2 us
fabric.switch_latency = 0 us
"""
NBYTES = 64 << 20


def _copy_times(py, tmp_path, visible=None):
    cfg = tmp_path / "fabric.conf"
    cfg.write_text(CONFIG)
    env = {"CARDSIM_PRESET": "mlu370-x8", "CARDSIM_DEVICES": "4", "CARDSIM_CONFIG": str(cfg)}
    if visible:
        env["MLU_VISIBLE_DEVICES"] = visible
    r = py(PROGRAM, env=env, args=(str(NBYTES),))
    assert r.returncode == 0, r.stderr[-3000:]
    return {int(k): v for k, v in json.loads(r.stdout.strip().splitlines()[-1]).items()}


def _closed_form_us(latency_us, gbps):
    return latency_us + NBYTES / (gbps * 1e3)


def test_a_peer_copy_takes_its_fabric_route(py, tmp_path):
    t = _copy_times(py, tmp_path)
    # chip 0 -> chip 1: the two on-card hops; chip 0 -> chips 2, 3: on-card, card to card, on-card.
    # Each time also holds the copy's launch on the stream, well under the 2% allowed.
    assert t[1] == pytest.approx(_closed_form_us(2.0, ON_CARD_GBPS), rel=0.02)
    for d in (2, 3):
        assert t[d] == pytest.approx(_closed_form_us(4.0, BETWEEN_GBPS), rel=0.02)


def test_visible_devices_keep_the_physical_route(py, tmp_path):
    # mlu:0 and mlu:1 are chips 1 and 2: on two cards, so the copy crosses the card link.
    t = _copy_times(py, tmp_path, visible="1,2")
    assert t[1] == pytest.approx(_closed_form_us(4.0, BETWEEN_GBPS), rel=0.02)
