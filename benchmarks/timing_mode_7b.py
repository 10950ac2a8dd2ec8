"""timing_mode_7b_step_s: wall seconds of one DeepSpeed ZeRO-3 training step of a Llama-7B
architecture (bf16, 1 x 2048 tokens per rank, activation checkpointing) on 8 emulated
MLU370-X8 chips in timing mode, all 8 rank processes on this machine (target <= 30 s).
The job is scripts/demo.sh's (train_lm.py --model llama-7b --timing); the figure is the
slowest rank's wall time of the last of --steps (3) steps (the first builds DeepSpeed's
parameter trace). Also prints the simulated step and the host memory the ranks held.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--card", default="mlu", choices=["mlu", "supa"])
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k != "DS_ACCELERATOR"}
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "steps.json"
        proc = subprocess.run([str(ROOT / "scripts" / "demo.sh"), "--card", args.card, "--cards", "8",
                               "--model", "llama-7b", "--timing", "--checkpointing", "--steps", str(args.steps),
                               "--json", str(out)], cwd=str(ROOT), env=env, capture_output=True, text=True,
                              timeout=3600)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
            return 1
        records = json.loads(out.read_text())
    last = records[-1]
    print(f"timing_mode_7b_step_s: {last['wall_step_s_max']:.2f}")
    print(f"timing_mode_7b_sim_step_ms: {last['sim_step_ms']:.1f}")
    print(f"timing_mode_7b_host_rss_max_mib: {max(last['rank_host_rss_mib']):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
