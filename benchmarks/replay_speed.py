"""Replay speed, from one recording of the demo (train_lm.py, ZeRO-3, 2 ranks, 2 steps):

replay_records_per_s: records of the recorded job replayed per wall second (`cardsim replay`
  of the whole 2-rank job, process start-up included, its rank processes on every core the
  machine lends: both ranks run side by side on a machine of 2 cores or more).
replay_records_per_s_one_core: the same with the replay held to one core (sched_setaffinity),
  the form of the target (>= 2,000,000 on one core): the two ranks, the fabric server and the
  parent's reading and analysis take turns on it.
replay_1024rank_dp_step_s: wall seconds for `cardsim replay --ranks 1024` of that recording
  (rank 0 replicated to 1024 data-parallel ranks; target <= 20 s).
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")


def main() -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k != "DS_ACCELERATOR"}
    with tempfile.TemporaryDirectory() as tmp:
        trace = pathlib.Path(tmp) / "demo"
        env_rec = dict(env, CARDSIM_TRACE=str(trace), DS_ACCELERATOR="mlu")
        rec = subprocess.run([str(ROOT / ".venv" / "bin" / "deepspeed"), "--num_gpus", "2", "--master_port",
                              str(29600 + os.getpid() % 300), str(ROOT / "accelerators" / "examples" / "train_lm.py"),
                              "--steps", "2"], env=env_rec, cwd=str(ROOT), capture_output=True, text=True,
                             timeout=900)
        if rec.returncode != 0:
            print(rec.stderr[-3000:], file=sys.stderr)
            return 1
        info = json.loads(subprocess.run([CARDSIM, "info", str(trace), "--json"], capture_output=True, text=True,
                                         env=env, check=True).stdout)
        records = sum(info["records"].values())
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run([CARDSIM, "replay", str(trace)], capture_output=True, text=True, env=env, check=True)
            best = min(best, time.perf_counter() - t)
        print(f"replay_records_per_s: {records / best:.0f}")
        one = sorted(os.sched_getaffinity(0))[:1]
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run([CARDSIM, "replay", str(trace)], capture_output=True, text=True, env=env, check=True,
                           preexec_fn=lambda: os.sched_setaffinity(0, one))
            best = min(best, time.perf_counter() - t)
        print(f"replay_records_per_s_one_core: {records / best:.0f}")
        t = time.perf_counter()
        subprocess.run([CARDSIM, "replay", str(trace), "--ranks", "1024"], capture_output=True, text=True, env=env,
                       check=True)
        print(f"replay_1024rank_dp_step_s: {time.perf_counter() - t:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
