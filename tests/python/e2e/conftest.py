"""End-to-end tests: each runs programs in fresh processes (a process can hold one card
personality, and the runtime reads its configuration once)."""
import os
import pathlib
import signal
import socket
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


def run_group(cmd, timeout, **kw):
    """subprocess.run in a new session; on timeout the whole process group (launcher and
    ranks) is killed, not only the launcher."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, **kw)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(map(str, cmd))} timed out after {timeout} s\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.fixture(scope="session")
def group_runner():
    """run_group: runs a launcher and its ranks, killing them all on timeout."""
    return run_group


_reserved_ports: list = []


def free_port() -> int:
    """A port for a job's store, reserved until this test process ends: the socket stays
    bound (not listening, SO_REUSEADDR, which the store's own socket also sets, so it can
    still take the port), so no other process's bind to port 0 is given it meanwhile (two
    tests running at once got the same port from bind-then-close, and their ranks joined
    each other's job)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    _reserved_ports.append(s)
    return s.getsockname()[1]


def run_ranks(code: str, world: int, args=(), env: dict | None = None, timeout: int = 180):
    """Runs `code` as `world` rank processes of one job (RANK, WORLD_SIZE, MASTER_* set, as a
    launcher does); returns [(returncode, stdout, stderr)] by rank."""
    port = str(free_port())
    procs = []
    for rank in range(world):
        e = dict(os.environ)
        for k in ("CARDSIM_PRESET", "CARDSIM_DEVICES", "CARDSIM_CONFIG", "CARDSIM_EXECUTION",
                  "DS_ACCELERATOR", "MLU_VISIBLE_DEVICES", "SUPA_VISIBLE_DEVICES"):
            e.pop(k, None)
        e.update(env or {})
        e.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=port)
        procs.append(subprocess.Popen([PYTHON, "-c", code, *map(str, args)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=e, cwd=str(ROOT)))
    out = []
    try:
        for p in procs:
            o, err = p.communicate(timeout=timeout)
            out.append((p.returncode, o, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out
