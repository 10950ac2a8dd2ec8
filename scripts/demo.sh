#!/usr/bin/env bash
# Sets up (if needed) and runs the main job: DeepSpeed trains a small transformer LM on two
# emulated cards (--card mlu, the default, or --card supa), launched by DeepSpeed's own
# launcher; rank 0 prints loss, simulated step time, tokens per simulated second, peak
# device memory, compute utilization and the compute / communication / exposed-communication
# split per step. --cards N (default 2) runs N ranks, one card each, on one fabric (up to the
# preset's devices: 8 MLU370-X8 chips, 8 BR100s). Other arguments go to the training program
# (see accelerators/examples/train_lm.py --help): --steps, --zero-stage, --precision, and for
# real-size what-ifs --model llama-7b|llama-13b --timing [--checkpointing] [--layers N].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
scripts/setup.sh >&2
card=mlu
cards=2
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --card) card="$2"; shift 2 ;;
    --card=*) card="${1#--card=}"; shift ;;
    --cards) cards="$2"; shift 2 ;;
    --cards=*) cards="${1#--cards=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$card" in mlu|supa) ;; *) echo "demo.sh: --card must be mlu or supa, got '$card'" >&2; exit 2 ;; esac
case "$cards" in ''|*[!0-9]*) echo "demo.sh: --cards must be a positive number, got '$cards'" >&2; exit 2 ;; esac
if [ "$cards" -lt 1 ] || [ "$cards" -gt 8 ]; then
  echo "demo.sh: --cards must be 1..8 (one node of the preset), got $cards" >&2; exit 2
fi
export DS_ACCELERATOR="$card"
port=$((29500 + RANDOM % 1000))
exec .venv/bin/deepspeed --num_gpus "$cards" --master_port "$port" accelerators/examples/train_lm.py \
  --card "$card" "${args[@]}"
