"""Runs a Python program as a 2-rank torch.distributed job on this host (the benchmarks that
compare the emulated card with the CPU side by side): each rank a fresh interpreter with
RANK/WORLD_SIZE/MASTER_* set, no CARDSIM_ variables of the caller's, one OpenMP thread."""
from __future__ import annotations

import json
import os
import pathlib
import socket
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(what: str, program: str, args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> list[dict]:
    """Runs `program` (source text) on both ranks with `args` and `env`; returns each rank's
    last "RESULT <json>" line (None for a rank that printed none). Exits naming `what` if a
    rank fails."""
    port = str(_port())
    base = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_") and k != "DS_ACCELERATOR"}
    procs = []
    for r in range(2):
        e = dict(base, **(env or {}), RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=port, OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([PYTHON, "-c", program, *args], env=e, cwd=str(ROOT), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (_, err) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"{what} failed:\n{err[-3000:]}")
    results = []
    for out, _ in outs:
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        results.append(json.loads(lines[-1][len("RESULT "):]) if lines else None)
    return results
