#!/usr/bin/env bash
# Sets up (if needed) and runs the main job: DeepSpeed trains a small transformer LM on two
# emulated cards (--card mlu, the default, or --card supa), launched by DeepSpeed's own
# launcher; rank 0 prints loss, simulated step time, tokens per simulated second, peak
# device memory and compute utilization per step. Other arguments go to the training
# program (see accelerators/examples/train_lm.py --help): --steps, --zero-stage, --precision.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh >&2
card=mlu
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --card) card="$2"; shift 2 ;;
    --card=*) card="${1#--card=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$card" in mlu|supa) ;; *) echo "demo.sh: --card must be mlu or supa, got '$card'" >&2; exit 2 ;; esac
export DS_ACCELERATOR="$card"
port=$((29500 + RANDOM % 1000))
exec .venv/bin/deepspeed --num_gpus 2 --master_port "$port" accelerators/examples/train_lm.py \
  --card "$card" "${args[@]}"
