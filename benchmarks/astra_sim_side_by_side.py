"""cardsim and ASTRA-sim on the same Chakra workloads, side by side.

    benchmarks/astra_sim_side_by_side.py --astra-sim BIN --astra-src DIR [--trace DIR]

BIN is ASTRA-sim's analytical (congestion-unaware) binary, DIR its source tree (for its
example workloads and configurations); neither is part of this project or installed by it.
Rows:
  - ASTRA-sim's microbenchmarks examples/workload/microbenchmarks/<op>/8npus_1MB, on
    ASTRA-sim with its HGX-H100-validated system and network files, and on cardsim with
    `--preset h100-sxm`;
  - with --trace, a cardsim recording exported by `cardsim export --chakra` and run on both:
    ASTRA-sim with the same HGX-H100 system file and a switch of as many NPUs as the trace
    has ranks, cardsim on the recording's own configuration.
Prints each simulator's simulated time (µs; ASTRA-sim's cycles are nanoseconds, its slowest
rank), cardsim's busy time (its total less the time no card worked: ASTRA-sim charges no
host time) and wall seconds (best of --repeat runs).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def best_of(n, cmd, env=None, cwd=None):
    best, out = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
        took = time.perf_counter() - t
        if res.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, cmd))} failed:\n{res.stderr[-3000:]}{res.stdout[-3000:]}")
        best, out = min(best, took), res
    return best, out


def run_astra(bin_, src, workload, system, network, npus, repeat, groups=None):
    """Runs ASTRA-sim with one of its example system files and its example network file
    resized to `npus`; returns (wall seconds, the finished process)."""
    src = pathlib.Path(src)
    with tempfile.TemporaryDirectory() as tmp:
        net = pathlib.Path(tmp) / "net.yml"
        base = (src / "examples/network/analytical" / network).read_text()
        net.write_text(re.sub(r"npus_count:\s*\[\s*\d+\s*\]", f"npus_count: [ {npus} ]", base))
        cmd = [bin_, f"--workload-configuration={workload}",
               f"--system-configuration={src / 'examples/system/native_collectives' / system}",
               f"--remote-memory-configuration={src / 'examples/remote_memory/analytical/no_memory_expansion.json'}",
               f"--network-configuration={net}"]
        if groups:
            cmd.append(f"--comm-group-configuration={groups}")
        return best_of(repeat, cmd, cwd=tmp)   # ASTRA-sim writes its log/ where it runs


def astra(bin_, src, workload, npus, repeat, groups=None):
    wall, res = run_astra(bin_, src, workload, "HGX-H100-validated.json", "HGX-H100-validated.yml", npus, repeat,
                          groups)
    text = res.stdout + res.stderr
    if "unreleased nodes" in text or "Unsupported" in text:
        raise SystemExit(f"ASTRA-sim did not finish {workload}:\n{text[-3000:]}")
    cycles = [int(c) for c in re.findall(r"sys\[\d+\] finished, (\d+) cycles", text)]
    if len(cycles) != npus:
        raise SystemExit(f"ASTRA-sim finished {len(cycles)} of {npus} ranks of {workload}:\n{text[-3000:]}")
    return max(cycles) / 1e3, wall


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def one_all_reduce_et(path, nbytes):
    """A Chakra ET file of one all-reduce, as ASTRA-sim's microbenchmarks are written
    (et_def.proto: GlobalMetadata.version; Node name 2, type 3 = COMM_COLL_NODE, attr 10 with
    name 1, int64_val 9, bool_val 27), each message length-delimited."""
    def field(num, payload):
        return varint(num << 3 | 2) + varint(len(payload)) + payload

    def attr(name, key, value):
        return field(10, field(1, name.encode()) + varint(key << 3) + varint(value))
    meta = field(1, b"0.0.4")
    node = field(2, b"all_reduce") + varint(3 << 3) + varint(7) + attr("is_cpu_op", 27, 0) + \
        attr("comm_type", 9, 0) + attr("comm_size", 9, nbytes)
    path.write_bytes(varint(len(meta)) + meta + varint(len(node)) + node)


def astra_big_ring(bin_, src, ranks, nbytes):
    """ASTRA-sim's time for one ring all-reduce over `ranks` NPUs on its Ring example network
    (50 GB/s, 500 ns per hop); cardsim's counterpart is one switch of `ranks` devices with
    50 GB/s links of 0.25 us each (0.5 us per hop)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for r in range(ranks):
            one_all_reduce_et(tmp / f"ar.{r}.et", nbytes)
        wall, res = run_astra(bin_, src, tmp / "ar", "Ring_4chunks.json", "Ring_8npus.yml", ranks, 1)
    cycles = [int(c) for c in re.findall(r"sys\[\d+\] finished, (\d+) cycles", res.stdout + res.stderr)]
    if len(cycles) != ranks:
        raise SystemExit(f"ASTRA-sim finished {len(cycles)} of {ranks} ranks")
    return max(cycles) / 1e3, wall


def cardsim_big_ring(ranks, nbytes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    cmd = [CARDSIM, "collbench", "--model-only", "--preset", "h100-sxm", "--ranks", str(ranks), "--op", "all_reduce",
           "--algo", "ring", "--min-bytes", str(nbytes), "--max-bytes", str(nbytes), "--csv",
           "--set", "fabric.link.bandwidth=50 GB/s", "--set", "fabric.link.efficiency=1",
           "--set", "fabric.link.latency=0.25 us", "--set", "fabric.switch_latency=0 us",
           "--set", "fabric.collective_latency=0 us", "--set", f"fabric.devices_per_node={ranks}",
           # one switch of that many ports, one lane each (ASTRA-sim's Ring has no ports)
           "--set", "fabric.link.lanes=1", "--set", f"fabric.switch_ports={ranks}",
           # 1 KiB chunks: the ring's pipeline fill (2045 chunks, 0.04 ms) all but gone, as in
           # ASTRA-sim's analytical ring
           "--set", "fabric.chunk=1 KiB"]
    wall, res = best_of(1, cmd, env)
    return float(res.stdout.strip().splitlines()[1].split(",")[4]), wall


def cardsim(path, repeat, *extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "r.json"
        wall, _ = best_of(repeat, [CARDSIM, "replay", str(path), *extra, "--json", str(out)], env)
        rep = json.loads(out.read_text())
        # busy: the run less the time no card worked (host-bound stretches); the part a
        # simulator that charges no host time has to compare with
        return rep["total_us"], rep["total_us"] - rep["breakdown"]["idle_us"], wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--astra-sim", required=True, help="ASTRA-sim's AstraSim_Analytical_Congestion_Unaware")
    ap.add_argument("--astra-src", required=True, help="ASTRA-sim's source tree")
    ap.add_argument("--trace", help="a cardsim trace directory to export and run on both")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big-ranks", type=int, default=0,
                    help="also one 1 GiB ring all-reduce over this many ranks (ASTRA-sim's Ring example "
                         "network, 50 GB/s links; cardsim --model-only with the same link figures)")
    a = ap.parse_args()
    rows = []
    for op in OPS:
        prefix = pathlib.Path(a.astra_src) / "examples/workload/microbenchmarks" / op / "8npus_1MB" / op
        a_us, a_wall = astra(a.astra_sim, a.astra_src, prefix, 8, a.repeat)
        c_us, c_busy, c_wall = cardsim(prefix, a.repeat, "--preset", "h100-sxm")
        rows.append((f"{op} 8npus_1MB", a_us, a_wall, c_us, c_busy, c_wall))
    if a.trace:
        with tempfile.TemporaryDirectory() as tmp:
            prefix = pathlib.Path(tmp) / "job"
            res = subprocess.run([CARDSIM, "export", a.trace, "--chakra", str(prefix)], capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(res.stderr)
            ranks = len(list(pathlib.Path(tmp).glob("job.*.et")))
            a_us, a_wall = astra(a.astra_sim, a.astra_src, prefix, ranks, a.repeat,
                                 groups=pathlib.Path(tmp) / "job.comm_groups.json")
            c_us, c_busy, c_wall = cardsim(prefix, a.repeat)
            rows.append((f"{pathlib.Path(a.trace).name} ({ranks} ranks, exported)", a_us, a_wall, c_us, c_busy,
                         c_wall))
    if a.big_ranks:
        a_us, a_wall = astra_big_ring(a.astra_sim, a.astra_src, a.big_ranks, 1 << 30)
        c_us, c_wall = cardsim_big_ring(a.big_ranks, 1 << 30)
        rows.append((f"ring all_reduce 1 GiB, {a.big_ranks} ranks", a_us, a_wall, c_us, c_us, c_wall))
    print(f"{'workload':36s} {'ASTRA-sim us':>14s} {'wall s':>8s} {'cardsim us':>14s} {'busy us':>14s} {'wall s':>8s}")
    for name, a_us, a_wall, c_us, c_busy, c_wall in rows:
        print(f"{name:36s} {a_us:14.3f} {a_wall:8.3f} {c_us:14.3f} {c_busy:14.3f} {c_wall:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
