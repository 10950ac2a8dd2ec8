"""Small all-reduces between 2 ranks on this host, CPU Gloo and the emulated card (cncl:
Gloo moving the bytes plus the fabric server's answer) side by side in one run: per-call
latency of a 4 KiB all-reduce (median, 90th percentile, mean), and how much CPU the ranks'
Gloo TCP loop threads take meanwhile, in cores (their CPU time, both ranks, over the loop's
wall time). On a 2-core machine that loop spins while a peer's bytes wait for the local
receive, and the 90th percentile is a scheduler tick; what the emulated side adds shows in
the median. Not a target: the README's account of zero3_step_overhead_ratio cites it.
"""
from __future__ import annotations

import argparse
import sys

import two_ranks

WORKER = r'''
import importlib, json, os, statistics, sys, time, torch
mode, calls = sys.argv[1], int(sys.argv[2])
if mode != "cpu":
    importlib.import_module(f"torch_{mode}")
import torch.distributed as dist
dist.init_process_group("gloo" if mode == "cpu" else "cncl")
x = torch.ones(1024, device="cpu" if mode == "cpu" else mode)   # 4 KiB of float32

def loop_cpu_s():
    """CPU seconds of this process's gloo_tcp_loop threads so far."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "gloo_tcp_loop":
                    continue
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])   # utime, stime (clock ticks)
        except OSError:
            pass
    return total / os.sysconf("SC_CLK_TCK")

for _ in range(20):
    dist.all_reduce(x)
times = []
cpu0, wall0 = loop_cpu_s(), time.perf_counter()
for _ in range(calls):
    t = time.perf_counter()
    dist.all_reduce(x)
    times.append(time.perf_counter() - t)
wall = time.perf_counter() - wall0
times.sort()
print("RESULT " + json.dumps({"p50_us": 1e6 * times[len(times) // 2], "p90_us": 1e6 * times[len(times) * 9 // 10],
                              "mean_us": 1e6 * statistics.mean(times), "loop_cores": (loop_cpu_s() - cpu0) / wall}),
      flush=True)
dist.barrier()
dist.destroy_process_group()
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--calls", type=int, default=4000)
    args = ap.parse_args(argv)
    for mode, name in (("cpu", "cpu"), ("mlu", "emulated")):
        r = two_ranks.run(f"allreduce_latency: the {name} job", WORKER, [mode, str(args.calls)],
                          {"DS_ACCELERATOR": mode})
        print(f"allreduce_4k_p50_us_{name}: {r[0]['p50_us']:.0f}")
        print(f"allreduce_4k_p90_us_{name}: {r[0]['p90_us']:.0f}")
        print(f"allreduce_4k_mean_us_{name}: {r[0]['mean_us']:.0f}")
        print(f"gloo_tcp_loop_cores_{name}: {r[0]['loop_cores'] + r[1]['loop_cores']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
