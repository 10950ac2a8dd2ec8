"""Fidelity of the fabric model against published measurements of real 8-GPU machines.

Reads the calibration subset (default: benchmarks/data/collectives-published-subset.csv, a
copy of the shared file), maps each row to a reference preset (A100 rows: a100-sxm, H200
rows: h200-sxm) and an algorithm (ring -> ring, tree -> tree, NVLS -> switch; rows that
state none -> the model's own choice), times them with `cardsim collbench --model-only`
(one process per group of sizes; peer copies through the emulated device, in timing mode)
and prints the error of every point and, per system x
collective x algorithm, the geometric-mean error exp(mean |ln(model/measured)|) - 1.

Rows that set a preset parameter (the latency, NVLink4 and NVLS figures) are shown as `cal` and left
out of the means: their agreement is by construction. Anchor rows without a time and rows
the fabric model does not time are listed with the reason.

Usage: collective_fidelity.py [CSV] [--cardsim PATH] [--json FILE]
Prints `collective_fidelity_geomean_error_pct: X  # group, N points` once per group.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import pathlib
import subprocess
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CSV = ROOT / "benchmarks" / "data" / "collectives-published-subset.csv"
DEFAULT_CARDSIM = ROOT / "build" / "traces" / "cardsim"

# Rows whose value went into a preset: (source_id, gpus, bytes, algorithm prefix) -> what it set.
CALIBRATION = {
    ("AZ-NDA100V4", 8, 65536, "NCCL default"): "sets a100-sxm fabric.collective_latency",
    ("AZ-NDV5-H200", 8, 65536, "NVLS"): "sets h200-sxm fabric.collective_latency",
    ("MLE-H200-SHARP", 8, 8589934592, "NVLS (NCCL auto)"): "sets h200-sxm fabric.reduction_efficiency",
    ("MLE-H200-SHARP", 8, 8589934592, "Ring (NCCL_NVLS_ENABLE=0)"): "sets h200-sxm fabric.link.efficiency",
}

# Anchor rows (no time) and what they set, for the listing.
ANCHORS = {
    ("MLE-A100-NOTE", "all_reduce"): "NVLink3 efficiency of a100-sxm (fabric.link.efficiency = 235/300)",
    ("MLE-H200-NVBW", "memcpy_h2d"): "PCIe Gen5 efficiency of h200-sxm (host_link.efficiency = 0.88)",
}

# Anchor rows (no time) read but not used for a parameter, and why.
UNUSED_ANCHORS = {
    ("MLE-H200-NVBW", "memcpy_p2p"): "copy engines reach 0.881 of NVLink4; the model's copies reach 16/18 of it "
                                     "(fabric.link.copy_efficiency from NVLink's packet format, 0.889: a copy 0.9 % faster)",
}

# The fabric model's collectives for the CSV's names. A copy between two GPUs is a peer copy
# of the device model (a copy engine's DMA over the fabric route): PEER_COPY times it through
# the emulated device, as a program's `b.copy_(a)` between two devices runs.
PEER_COPY = "peer_copy"
OPS = {"all_reduce": "all_reduce", "sendrecv": "send_recv", "memcpy_p2p": PEER_COPY}
PYTHON = ROOT / ".venv" / "bin" / "python"
# One peer copy of each size from device 0 to device 1, timed by events (timing mode: no bytes
# move, the times are a full run's); prints "bytes microseconds" per size.
PEER_COPY_PROGRAM = r"""
import sys, torch, torch_mlu
for n in map(int, sys.argv[1:]):
    a = torch.empty(n, dtype=torch.uint8, device="mlu:0")
    b = torch.empty(n, dtype=torch.uint8, device="mlu:1")
    start, end = torch.mlu.Event(enable_timing=True), torch.mlu.Event(enable_timing=True)
    start.record()
    b.copy_(a)
    end.record()
    end.synchronize()
    print(n, start.elapsed_time(end) * 1e3)
    del a, b
"""

NOT_COVERED = {
    "memcpy_h2d_pinned": "host<->device copies run over the host link (the device model's DMA path), "
                         "not the fabric collbench times",
    "memcpy_d2h_pinned": "host<->device copies run over the host link (the device model's DMA path), "
                         "not the fabric collbench times",
    "memcpy_d2d": "a copy within one device's memory does not touch the fabric",
    "memcpy_p2p_bidirectional": "no time or size published (anchor)",
}


@dataclass
class Point:
    source_id: str
    system: str          # preset
    collective: str      # as in the CSV
    op: str              # collbench --op
    algo: str            # collbench --algo, "" = the model's choice
    ranks: int
    bytes: int
    measured_us: float
    model_us: float = math.nan
    model_algo: str = ""
    calibration: str = ""

    @property
    def group(self) -> str:
        return f"{self.system} {self.collective} {self.algo or 'auto'}"

    @property
    def error(self) -> float:
        return self.model_us / self.measured_us - 1


def preset_of(system: str) -> str | None:
    if "A100" in system:
        return "a100-sxm"
    if "H200" in system:
        return "h200-sxm"
    return None


def algo_of(text: str, preset: str) -> str:
    """The model's algorithm for the source's words; "" lets the model choose."""
    t = text.strip().lower()
    if not t or t.startswith("nccl default"):
        return ""
    if "nvls_enable=0" in t or t.startswith("ring"):
        return "ring"
    if t.startswith("nvls"):
        # NVLink SHARP reduces in the switch; a preset without it cannot run it.
        return "switch" if preset == "h200-sxm" else ""
    if t.startswith("tree"):
        return "tree"
    return ""


def read_rows(path: pathlib.Path):
    points, skipped = [], []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            key = (r["source_id"], r["collective"])
            if not r["measured_us"].strip() or r["notes"].startswith("NO TIME"):
                why = ANCHORS.get(key)
                unused = UNUSED_ANCHORS.get(key)
                skipped.append({**key_dict(r), "reason": "anchor without a time" +
                                (f": sets the {why}" if why else f": not used ({unused})" if unused else ": not used")})
                continue
            preset = preset_of(r["system"])
            op = OPS.get(r["collective"])
            if preset is None or op is None:
                skipped.append({**key_dict(r), "reason": NOT_COVERED.get(
                    r["collective"], f"no preset or fabric operation for {r['system']!r} {r['collective']!r}")})
                continue
            gpus, size = int(r["gpus"]), int(r["bytes"])
            cal = next((why for (sid, g, b, a), why in CALIBRATION.items()
                        if sid == r["source_id"] and g == gpus and b == size and r["algorithm"].startswith(a)), "")
            points.append(Point(r["source_id"], preset, r["collective"], op, algo_of(r["algorithm"], preset),
                                gpus, size, float(r["measured_us"]), calibration=cal))
    return points, skipped


def key_dict(r) -> dict:
    return {"source_id": r["source_id"], "system": r["system"], "gpus": r["gpus"],
            "collective": r["collective"], "bytes": r["bytes"]}


def run_model(points: list[Point], cardsim: pathlib.Path) -> int:
    """Fills model_us: one collbench process per (preset, op, ranks, algo), sweeping by
    doubling from its smallest to its largest size; sizes off that sweep get their own run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    groups: dict[tuple, list[Point]] = defaultdict(list)
    for p in points:
        groups[(p.system, p.op, p.ranks, p.algo)].append(p)
    processes = 0
    for (preset, op, ranks, algo), members in sorted(groups.items()):
        if op == PEER_COPY:
            sizes = sorted({p.bytes for p in members})
            res = subprocess.run([str(PYTHON), "-c", PEER_COPY_PROGRAM, *map(str, sizes)], capture_output=True,
                                 text=True, env=dict(env, CARDSIM_PRESET=preset, CARDSIM_EXECUTION="timing"),
                                 timeout=300)
            processes += 1
            if res.returncode != 0:
                raise SystemExit(f"collective_fidelity: timing a peer copy on {preset} failed:\n{res.stderr}")
            copy_us = {int(n): float(us) for n, us in (ln.split() for ln in res.stdout.split("\n") if ln.strip())}
            for p in members:
                p.model_us, p.model_algo = copy_us[p.bytes], "copy"
            continue
        sizes = sorted({p.bytes for p in members})
        sweep, s = set(), sizes[0]
        while s <= sizes[-1]:
            sweep.add(s)
            s *= 2
        runs = [(sizes[0], max(x for x in sizes if x in sweep))] + [(x, x) for x in sizes if x not in sweep]
        times: dict[int, tuple[float, str]] = {}
        for lo, hi in runs:
            cmd = [str(cardsim), "collbench", "--model-only", "--csv", "--preset", preset, "--ranks", str(ranks),
                   "--op", op, "--min-bytes", str(lo), "--max-bytes", str(hi)]
            if algo:
                cmd += ["--algo", algo]
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
            processes += 1
            if res.returncode != 0:
                raise SystemExit(f"collective_fidelity: {' '.join(cmd)} failed:\n{res.stderr}")
            for row in csv.DictReader(io.StringIO(res.stdout)):
                times[int(float(row["bytes"]))] = (float(row["time_us"]), row["algo"])
        for p in members:
            p.model_us, p.model_algo = times[p.bytes]
    return processes


def summarize(points: list[Point]) -> list[dict]:
    out = []
    by_group: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        by_group[p.group].append(p)
    for name, members in sorted(by_group.items()):
        scored = [p for p in members if not p.calibration]
        logs = [abs(math.log(p.model_us / p.measured_us)) for p in scored]
        system, collective, algo = name.split(" ")
        out.append({"group": name, "system": system, "collective": collective, "algo": algo,
                    "points": len(scored), "calibration_points": len(members) - len(scored),
                    "geomean_error_pct": (math.exp(sum(logs) / len(logs)) - 1) * 100 if logs else math.nan,
                    "max_abs_error_pct": max((abs(p.error) * 100 for p in scored), default=math.nan)})
    return out


def by_source(points: list[Point], group: str) -> list[dict]:
    """The group's scored points split by source (harnesses differ: nccl-tests vs torch)."""
    out = []
    for sid in sorted({p.source_id for p in points if p.group == group}):
        logs = [abs(math.log(p.model_us / p.measured_us)) for p in points
                if p.group == group and p.source_id == sid and not p.calibration]
        if logs:
            out.append({"source_id": sid, "points": len(logs),
                        "geomean_error_pct": (math.exp(sum(logs) / len(logs)) - 1) * 100})
    return out


def human(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="?", default=str(DEFAULT_CSV), help=f"measurements (default {DEFAULT_CSV})")
    ap.add_argument("--cardsim", default=str(DEFAULT_CARDSIM), help="the cardsim executable")
    ap.add_argument("--json", help="also write points, groups and skipped rows to this file")
    a = ap.parse_args(argv)
    path, cardsim = pathlib.Path(a.csv), pathlib.Path(a.cardsim)
    if not path.is_file():
        print(f"collective_fidelity: no such file: {path}", file=sys.stderr)
        return 2
    if not cardsim.is_file():
        print(f"collective_fidelity: {cardsim} is missing: build first (scripts/setup.sh)", file=sys.stderr)
        return 2
    points, skipped = read_rows(path)
    processes = run_model(points, cardsim)
    groups = summarize(points)

    print(f"# collective fidelity: {len(points)} points from {path.name}, {processes} collbench processes")
    print(f"# {'system':9} {'source':15} {'collective':11} {'algo':7} {'model':7} {'n':>2} {'bytes':>6} "
          f"{'measured_us':>12} {'model_us':>12} {'error':>8}")
    for p in sorted(points, key=lambda p: (p.group, p.source_id, p.ranks, p.bytes)):
        flag = f"  cal: {p.calibration}" if p.calibration else ""
        print(f"  {p.system:9} {p.source_id:15} {p.collective:11} {p.algo or 'auto':7} {p.model_algo:7} "
              f"{p.ranks:>2} {human(p.bytes):>6} {p.measured_us:12.2f} {p.model_us:12.2f} {p.error * 100:+7.1f}%{flag}")
    print("# not timed:")
    for s in skipped:
        print(f"#   {s['source_id']} {s['collective']} ({s['gpus']} GPUs, {s['bytes'] or '-'} B): {s['reason']}")
    print("# geometric-mean error per system x collective x algorithm (calibration rows left out):")
    for g in groups:
        print(f"#   {g['group']:32} {g['points']:3} points  geomean {g['geomean_error_pct']:5.1f}%  "
              f"max {g['max_abs_error_pct']:5.1f}%")
        for src in by_source(points, g["group"]):
            print(f"#     {src['source_id']:30} {src['points']:3} points  geomean {src['geomean_error_pct']:5.1f}%")
    for g in groups:
        print(f"collective_fidelity_geomean_error_pct: {g['geomean_error_pct']:.2f}  # {g['group']}, "
              f"{g['points']} points")
    if a.json:
        doc = {"points": [{**asdict(p), "group": p.group, "error_pct": p.error * 100} for p in points],
               "groups": [{**g, "by_source": by_source(points, g["group"])} for g in groups],
               "skipped": skipped}
        pathlib.Path(a.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
