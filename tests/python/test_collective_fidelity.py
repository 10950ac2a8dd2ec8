"""benchmarks/collective_fidelity.py: the fabric model against published measurements of 8-GPU
A100 and H200 machines (benchmarks/data/collectives-published-subset.csv).

Guards against regressions of the model's fidelity. The bounds are what the model reaches
now plus a small margin. Every group but A100 send/recv reaches the 5 % target (A100's
peer copy since copies run at NVLink's packet-format share of the link rather than at NCCL's
collectives' efficiency); send/recv is off for the reasons the README's "Fidelity" section
gives (NCCL's point-to-point reaching less of the link than its collectives). The size
regimes the model captures are held to 5 %, A100's 2-128 MiB to 7 %.
"""
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "collective_fidelity.py"
CARDSIM = ROOT / "build" / "traces" / "cardsim"

# Geometric-mean error bound per system x collective x algorithm, in percent (achieved today).
BOUNDS = {
    "a100-sxm all_reduce auto": 4.5,      # 3.8: within the 5 % target
    "a100-sxm sendrecv auto": 37.5,       # 36.5: NCCL p2p reaches 195 of 235 GB/s; 128 MiB warm-up point
    "a100-sxm memcpy_p2p auto": 5.0,      # 3.2: copy engines at 16/18 of NVLink (18.4 at NCCL's 0.783)
    "h200-sxm all_reduce ring": 3.0,      # 2.5: within the 5 % target
    "h200-sxm all_reduce switch": 4.5,    # 4.0: within the 5 % target (10.3 before NVLS's rounds)
}

# Regimes the model captures: small (<= 1 MiB) and large (>= 256 MiB) all-reduce, per group.
WITHIN_5_PCT = [
    ("a100-sxm all_reduce auto", "small"), ("a100-sxm all_reduce auto", "large"),
    ("h200-sxm all_reduce switch", "small"), ("h200-sxm all_reduce switch", "large"),
    ("h200-sxm all_reduce ring", "small"), ("h200-sxm all_reduce ring", "large"),
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if not CARDSIM.exists():
        pytest.fail(f"{CARDSIM} is missing: run scripts/setup.sh first")
    out = tmp_path_factory.mktemp("fidelity") / "fidelity.json"
    res = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    return res.stdout, json.loads(out.read_text())


def geomean_pct(points):
    logs = [abs(math.log(p["model_us"] / p["measured_us"])) for p in points]
    return (math.exp(sum(logs) / len(logs)) - 1) * 100


def test_every_group_stays_within_its_bound(report):
    stdout, doc = report
    groups = {g["group"]: g for g in doc["groups"]}
    assert set(groups) == set(BOUNDS), sorted(groups)
    for name, bound in BOUNDS.items():
        assert groups[name]["geomean_error_pct"] < bound, (name, groups[name])
    # One summary line per group for scripts/bench.sh.
    lines = [l for l in stdout.splitlines() if l.startswith("collective_fidelity_geomean_error_pct: ")]
    assert len(lines) == len(BOUNDS)
    for l in lines:
        float(l.split(":", 1)[1].split("#")[0])


def test_small_and_large_all_reduce_within_5_pct(report):
    _, doc = report
    for group, regime in WITHIN_5_PCT:
        pts = [p for p in doc["points"] if p["group"] == group and not p["calibration"] and
               (p["bytes"] <= 1 << 20 if regime == "small" else p["bytes"] >= 256 << 20)]
        assert len(pts) >= 5, (group, regime)
        assert geomean_pct(pts) < 5.0, (group, regime, geomean_pct(pts))
    # A100's 2-128 MiB: the ring's pipeline filling over its 14 steps (6 % today; 30 % before
    # the pipeline was modelled)
    mid = [p for p in doc["points"] if p["group"] == "a100-sxm all_reduce auto" and 2 << 20 <= p["bytes"] <= 128 << 20]
    assert len(mid) == 7 and geomean_pct(mid) < 7.0, geomean_pct(mid)
    # NVLS's 2-128 MiB on Azure's table: its rounds of 16 MiB, the multicast of one overlapping
    # the reduction of the next (6.3 % today; 16 % when it was one streaming phase)
    mid = [p for p in doc["points"] if p["group"] == "h200-sxm all_reduce switch" and p["source_id"] == "AZ-NDV5-H200"
           and 2 << 20 <= p["bytes"] <= 128 << 20]
    assert len(mid) == 7 and geomean_pct(mid) < 7.5, geomean_pct(mid)
    # NVLS over 5 to 8 GPUs (8 GiB): each rank moves S (1 + 1/n) each way, so fewer GPUs are
    # slower, as measured (-4 to -1 % when the model moved S whatever the count)
    few = [p for p in doc["points"] if p["source_id"] == "MLE-H200-SHARP" and p["group"] == "h200-sxm all_reduce switch"
           and not p["calibration"]]
    assert len(few) == 3 and all(abs(p["error_pct"]) < 3.0 for p in few), few


def test_mapping_calibration_and_skipped_rows(report):
    stdout, doc = report
    pts = doc["points"]
    assert len(pts) == 84
    # Algorithms: NVLS -> switch (H200 only), ring -> ring, unstated -> the model's choice.
    for p in pts:
        if p["system"] == "a100-sxm":
            assert p["algo"] == "" and p["model_algo"] != "switch", p
    assert {p["model_algo"] for p in pts if p["group"] == "h200-sxm all_reduce switch"} == {"switch"}
    assert {p["model_algo"] for p in pts if p["group"] == "h200-sxm all_reduce ring"} == {"ring"}
    # The rows that set preset parameters are marked and left out of the means.
    cal = [p for p in pts if p["calibration"]]
    assert len(cal) == 4
    assert sorted(p["calibration"].split()[-1] for p in cal) == [
        "fabric.collective_latency", "fabric.collective_latency", "fabric.link.efficiency",
        "fabric.reduction_efficiency"], cal
    assert all(abs(p["error_pct"]) < 0.5 for p in cal), cal
    for g in doc["groups"]:
        assert g["points"] + g["calibration_points"] == sum(1 for p in pts if p["group"] == g["group"])
    # Anchors without a time and host/on-device copies are listed with a reason, not timed.
    skipped = {(s["source_id"], s["collective"]): s["reason"] for s in doc["skipped"]}
    assert len(skipped) == 7
    assert "anchor" in skipped[("MLE-A100-NOTE", "all_reduce")]
    assert "not used" in skipped[("MLE-H200-NVBW", "memcpy_p2p")] and "copy engine" in skipped[("MLE-H200-NVBW", "memcpy_p2p")]
    assert "host link" in skipped[("NAPKIN-A100", "memcpy_h2d_pinned")]
    assert "does not touch the fabric" in skipped[("NAPKIN-A100", "memcpy_d2d")]
    # One collbench process per group of sizes, not per point.
    header = stdout.splitlines()[0]
    assert int(header.split(", ")[1].split()[0]) <= 12, header


def test_a_missing_file_is_an_error(tmp_path):
    res = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "none.csv")], capture_output=True, text=True)
    assert res.returncode == 2
    assert "no such file" in res.stderr
