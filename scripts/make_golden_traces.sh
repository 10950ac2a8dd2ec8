#!/usr/bin/env bash
# Regenerates the golden traces, tests/data/golden/traces/<program>/rank<N>.cstrace, by
# recording the programs in tests/data/golden/programs/ on the default preset. Run it when
# the trace format or the model's timing changes on purpose: tests/python/e2e/
# test_golden_traces.py replays the committed files and says when they no longer match.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py=.venv/bin/python
[ -x "$py" ] || { echo "make_golden_traces.sh: no .venv (run scripts/setup.sh first)" >&2; exit 2; }
programs=tests/data/golden/programs
out=tests/data/golden/traces
# Nothing of the caller's cardsim or launcher setup may leak into the recordings.
for v in $(env | sed -n 's/^\(CARDSIM_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT DS_ACCELERATOR MLU_VISIBLE_DEVICES || true

for name in two_streams memory_bound compute_bound; do
  rm -rf "${out:?}/$name"
  CARDSIM_TRACE="$out/$name" CARDSIM_DEVICES=2 "$py" "$programs/$name.py" > /dev/null
done

rm -rf "${out:?}/dp_step"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=()
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CARDSIM_DEVICES=1 \
    CARDSIM_TRACE="$out/dp_step" "$py" "$programs/dp_step.py" > /dev/null &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done

for name in two_streams memory_bound compute_bound dp_step; do
  printf '%-14s %s\n' "$name" "$(.venv/bin/cardsim info "$out/$name" | grep -E '^recorded_total_us')"
done
