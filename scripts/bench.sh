#!/usr/bin/env bash
# Sets up (if needed) and runs the benchmarks; prints one "name: value" line per figure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh >&2
build/benchmarks/cardsim_bench_sim
# The fabric model alone: one 1 GiB ring all-reduce over 1024 ranks (128 nodes of 8).
start=$(date +%s.%N)
build/traces/cardsim collbench --model-only --preset h100-sxm --ranks 1024 --algo ring \
  --min-bytes 1G --max-bytes 1G --csv > /dev/null
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "fabric_1024rank_allreduce_s: %.4f\n", b - a }'
# And a 1 MiB all-to-all over the same 1024 ranks: a million transfers at once.
start=$(date +%s.%N)
build/traces/cardsim collbench --model-only --preset h100-sxm --ranks 1024 --op all_to_all \
  --min-bytes 1M --max-bytes 1M --csv > /dev/null
end=$(date +%s.%N)
awk -v a="$start" -v b="$end" 'BEGIN { printf "fabric_1024rank_alltoall_s: %.4f\n", b - a }'
# The fabric model against published A100/H200 measurements: geometric-mean error per
# system x collective x algorithm (the per-point table: benchmarks/collective_fidelity.py).
.venv/bin/python benchmarks/collective_fidelity.py | grep '^collective_fidelity_geomean_error_pct'
# Small collectives per second through the fabric server, 8 ranks (threads with own sockets).
build/benchmarks/cardsim_bench_fabric_server
# The server soaked: 1024 clients, 100,000 collectives, three misbehaving clients.
build/benchmarks/cardsim_bench_fabric_soak
.venv/bin/python benchmarks/torch_overhead.py
.venv/bin/python benchmarks/timing_mode.py
# A launch-bound training step: simulated time eager over one captured graph replayed.
.venv/bin/python benchmarks/graph_replay.py
# Llama-7B, ZeRO-3, 8 emulated chips in timing mode: wall seconds per step.
.venv/bin/python benchmarks/timing_mode_7b.py
.venv/bin/python benchmarks/trace_overhead.py
# A DeepSpeed ZeRO-3 step on 2 emulated ranks over the same on 2 CPU ranks (gloo).
.venv/bin/python benchmarks/zero3_overhead.py
# Why that ratio swings: 4 KiB all-reduces between 2 ranks, CPU and emulated (latency, Gloo's loop CPU).
.venv/bin/python benchmarks/allreduce_latency.py
# Replaying a recorded demo job: records per second, and one rank standing for 1024.
.venv/bin/python benchmarks/replay_speed.py
