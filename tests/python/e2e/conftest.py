"""End-to-end tests: each runs programs in fresh processes (a process can hold one card
personality, and the runtime reads its configuration once)."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def run_python(code: str, env: dict | None = None, timeout: int = 300, args=()):
    """Runs `code` in a fresh interpreter of the project venv; returns CompletedProcess."""
    e = dict(os.environ)
    for k in ("CARDSIM_PRESET", "CARDSIM_DEVICES", "CARDSIM_CONFIG", "MLU_VISIBLE_DEVICES",
              "SUPA_VISIBLE_DEVICES", "DS_ACCELERATOR", "RANK", "WORLD_SIZE", "LOCAL_RANK",
              "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([PYTHON, "-c", code, *args], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=str(ROOT))


@pytest.fixture(scope="session")
def py():
    return run_python


@pytest.fixture(scope="session")
def root():
    return ROOT
