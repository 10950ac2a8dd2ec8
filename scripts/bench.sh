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
.venv/bin/python benchmarks/torch_overhead.py
.venv/bin/python benchmarks/timing_mode.py
.venv/bin/python benchmarks/trace_overhead.py
