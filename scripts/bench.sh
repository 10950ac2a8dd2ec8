#!/usr/bin/env bash
# Sets up (if needed) and runs the benchmarks; prints one "name: value" line per figure.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh >&2
build/benchmarks/cardsim_bench_sim
.venv/bin/python benchmarks/torch_overhead.py
